/* tests/test_runtime.c: CUnit tests of the runtime's lifecycle: launch/stop, pinning, drain, SIGTERM, failed launches, TL_* variables, the stall detector; on Linux and, as win-runtime, on Windows. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#ifndef _WIN32
#include <pthread.h>
#include <sched.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

#include "shard_test.h"
#include "os.h" /* threads, the current CPU, sleeps on both OSes */

/*
 * On Windows (win-runtime, under wine) the same tests run with small
 * Windows halves: the client's sockets are Winsock's, the environment is
 * set by _putenv_s, the CPU count is the active processors'. Windows has
 * no SO_REUSEPORT, so where both shards listen on one port on Linux, shard
 * 1 listens on a port of its own there and the drain's refusal is checked
 * on both ports. The runtime's SIGINT and SIGTERM are console control
 * events on Windows (lib/signal_win.c), which a process cannot send itself
 * under wine (it has no console to send them in: GenerateConsoleCtrlEvent
 * fails), so the tests that send themselves SIGTERM check what they can
 * without it and print a SKIP line for the rest.
 */
#ifdef _WIN32
static int setenv(const char *name, const char *value, int overwrite)
{
	(void)overwrite;
	return _putenv_s(name, value);
}

/* An empty value removes the variable (_putenv_s). */
static int unsetenv(const char *name)
{
	return _putenv_s(name, "");
}
#endif

static long online_cpus(void)
{
#ifdef _WIN32
	return (long)GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
#else
	return sysconf(_SC_NPROCESSORS_ONLN);
#endif
}

static int same_thread(tl__os_thread a, tl__os_thread b)
{
#ifdef _WIN32
	return a == b;
#else
	return pthread_equal(a, b) != 0;
#endif
}

#define MAXS 8
#define TOK_TIMER 0x7171
#define TOK_ACCEPT 0xacce
#define TOK_SELF 0x5e1f

/* What each shard saw, written by that shard only. */
struct seen {
	tl__os_thread thread;
	int cpu, want_cpu;
	int starts, stops, closed, accept_terminal, timer_ticks;
	int listen_rc;
	uint64_t port;
};

static struct seen V[MAXS];
static atomic_uint start_calls;
static int fail_shard = -1, fail_code;
static int open_listener;

static int rt_start(tl_shard *s, void *arg)
{
	struct seen *v = &V[tl_shard_id(s)];
	tl_loop *l = tl_shard_loop(s);
	tl_shard_place place;
	tl_handle h;
	tl_op op;

	(void)arg;
	atomic_fetch_add(&start_calls, 1);
	v->thread = tl__os_thread_self();
	v->cpu = tl__os_cpu();
	ST_CHECK(tl_shard_place_get(s, &place) == 0);
	v->want_cpu = place.pu_os_index;
	v->starts++;
	ST_CHECK(tl_shard_count(s) == tl_runtime_shards(tl_shard_runtime(s)));
	if ((int)tl_shard_id(s) == fail_shard)
		return fail_code;
	/* A repeating timer: a handle the runtime must close when stopping. */
	ST_CHECK(tl_timer_start(l, tl_now(l) + 1000000, 1000000, TOK_TIMER, &h, &op) == 0);
	if (open_listener) {
		tl_addr a;
		tl_listen_opts o = {.reuseport = 1};

		tl_addr_parse(&a, "127.0.0.1", 0);
		v->listen_rc = tl_tcp_listen(l, &a, &o, &h);
		if (v->listen_rc == 0)
			ST_CHECK(tl_accept_start(l, h, TOK_ACCEPT, &op) == 0);
	}
	return 0;
}

static void rt_stop(tl_shard *s, void *arg)
{
	(void)arg;
	V[tl_shard_id(s)].stops++;
}

static void rt_handler(tl_shard *s, const tl_completion *c)
{
	struct seen *v = &V[tl_shard_id(s)];

	if (!tl__os_thread_is(v->thread))
		ST_CHECK(!"completion on another thread");
	if (c->kind == TL_K_CLOSED)
		v->closed++;
	else if (c->kind == TL_K_TIMER)
		v->timer_ticks++;
	else if (c->kind == TL_K_ACCEPT && (c->flags & TL_F_TERMINAL))
		v->accept_terminal++;
}

static void reset(void)
{
	memset(V, 0, sizeof V);
	atomic_store(&start_calls, 0);
	fail_shard = -1;
	fail_code = 0;
	open_listener = 0;
}

static void base(tl_runtime_config *cfg, uint32_t n)
{
	st_config(cfg, n);
	cfg->on_launch = rt_start;
	cfg->on_stop = rt_stop;
	cfg->on_completion = rt_handler;
}

/* ---- start, run on each shard, stop, drain ---- */

static void test_start_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/start_stop");
	long ncpu = online_cpus();

	reset();
	base(&cfg, 2);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_shards(rt), 2);
	CU_ASSERT_EQUAL(tl_runtime_launch(rt), 0);
	CU_ASSERT_EQUAL(tl_runtime_launch(rt), -EINVAL);
	tl__os_sleep_us(20000);
	tl_runtime_stop(rt);
	tl_runtime_stop(rt); /* idempotent */
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "");
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&start_calls), 2);
	CU_ASSERT_FALSE(same_thread(V[0].thread, V[1].thread));
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(V[i].starts, 1);
		CU_ASSERT_EQUAL(V[i].stops, 1);
		/* Drained: the runtime closed the timer and delivered Closed. */
		CU_ASSERT_EQUAL(V[i].closed, 1);
		CU_ASSERT_TRUE(V[i].timer_ticks > 0);
		/* Pinned to the plan's PU (on a machine with enough CPUs the
		 * two shards are on different ones). */
		CU_ASSERT_EQUAL(V[i].cpu, V[i].want_cpu);
	}
	if (ncpu >= 2)
		CU_ASSERT_NOT_EQUAL(V[0].want_cpu, V[1].want_cpu);
	tl_runtime_destroy(NULL);
	st_end(fds);
}

static void test_stop_before_run(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/stop_before_run");

	reset();
	base(&cfg, 3);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0); /* starts, then drains at once */
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&start_calls), 3);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(V[i].closed, 1);
	/* Destroying a runtime that never started. */
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&start_calls), 3);
	/* Destroying a running runtime stops and drains it. */
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_launch(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&start_calls), 6);
	st_end(fds);
}

static void test_bad_config(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt = (tl_runtime *)&cfg;
	int fds = st_begin("runtime/bad_config");

	base(&cfg, 2);
	cfg.mesh_capacity = 0;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	CU_ASSERT_PTR_NULL(rt);
	base(&cfg, 2);
	cfg.mesh_capacity = (1u << 20) + 1;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	base(&cfg, 2);
	cfg.batch = 0;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	base(&cfg, 2);
	cfg.stats_period_ns = 0;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	base(&cfg, 2);
	cfg.plan.cpus = "0-";
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	base(&cfg, 2);
	cfg.plan.overcommit = 0;
	cfg.plan.shards = 4096;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_new(NULL, &cfg), -EINVAL);
	st_end(fds);
}

/* ---- The runtime's command-line options (tl_runtime_config_option) ---- */

static void test_config_option(void)
{
	tl_runtime_config cfg, d;
	int fds = st_begin("runtime/config_option");
	char cpus[] = "0-1";

	tl_runtime_config_init(&d);
	cfg = d;
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--shards", "3"), 1);
	CU_ASSERT_EQUAL(cfg.plan.shards, 3);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--cpus", cpus), 1);
	CU_ASSERT_PTR_EQUAL(cfg.plan.cpus, cpus); /* kept, not copied */
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--mesh-inflight", "65536"), 1);
	CU_ASSERT_EQUAL(cfg.mesh_inflight, 65536);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--mesh-spin-us", "0"), 1);
	CU_ASSERT_EQUAL(cfg.mesh_spin_ns, 0);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--nap-us", "1000"), 1);
	CU_ASSERT_EQUAL(cfg.loop.nap_ns, 1000000);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--shards", "65536"), 1);
	CU_ASSERT_EQUAL(cfg.plan.shards, TL_PLAN_MAX_SHARDS);
	/* Not the runtime's: 0, nothing changed. */
	d = cfg;
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "--port", "80"), 0);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, "shards", "2"), 0);
	CU_ASSERT_EQUAL(memcmp(&cfg, &d, sizeof cfg), 0);
	/* Bad values: -EINVAL, nothing changed. */
	static const char *const bad[][2] = {
		{"--shards", "0"}, {"--shards", "65537"}, {"--shards", "2x"}, {"--shards", ""},
		{"--shards", NULL}, {"--shards", "-1"}, {"--shards", "+2"}, {"--shards", " 2"},
		{"--shards", "18446744073709551617"}, {"--mesh-inflight", "0"},
		{"--mesh-inflight", "65537"}, {"--mesh-spin-us", "1001"}, {"--nap-us", "1001"},
		{"--nap-us", "99999999999999999999999"}, {"--cpus", ""}, {"--cpus", NULL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc = tl_runtime_config_option(&cfg, bad[i][0], bad[i][1]);
		if (rc != -EINVAL)
			fprintf(stderr, "  %s %s: %d\n", bad[i][0], bad[i][1] ? bad[i][1] : "(null)", rc);
		CU_ASSERT_EQUAL(rc, -EINVAL);
	}
	CU_ASSERT_EQUAL(memcmp(&cfg, &d, sizeof cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_config_option(NULL, "--shards", "2"), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_config_option(&cfg, NULL, "2"), -EINVAL);
	st_end(fds);
}

/* A whole command line (tl_runtime_config_args): the program's options
 * of each kind and the runtime's, in any order, the last one winning; each
 * way a line is refused, with a detail that names the argument. */
static void test_config_args(void)
{
	tl_runtime_config cfg, d;
	int fds = st_begin("runtime/config_args");
	uint32_t port = 7, n = 0;
	int flag = 0;
	const char *dir = "def";
	const tl_runtime_option opts[] = {{"--port", TL_OPTION_U32, &port, 1, 65535}, {"--n", TL_OPTION_U32, &n, 0, 10},
					  {"--dir", TL_OPTION_STR, &dir, 0, 0}, {"--flag", TL_OPTION_FLAG, &flag, 0, 0},
					  {NULL, 0, NULL, 0, 0}};
	char *ok[] = {"prog", "--port", "80", "--shards", "2", "--flag", "--dir", "x", "--n", "0", "--port", "65535",
		      "--nap-us", "5"};
	tl_runtime_config_init(&d);
	cfg = d;
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 14, ok, opts), 0);
	CU_ASSERT(port == 65535 && n == 0 && flag == 1 && dir == ok[7]); /* the last --port; the string kept */
	CU_ASSERT(cfg.plan.shards == 2 && cfg.loop.nap_ns == 5000);
	port = 7, flag = 0, dir = "def";
	cfg = d;
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 1, ok, opts), 0); /* nothing given: the defaults stay */
	CU_ASSERT(port == 7 && flag == 0 && strcmp(dir, "def") == 0 && memcmp(&cfg, &d, sizeof cfg) == 0);
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 3, (char *[]){"prog", "--shards", "3"}, NULL), 0); /* the runtime's alone */
	CU_ASSERT_EQUAL(cfg.plan.shards, 3);
	static const struct {
		char *argv[4];
		int argc;
		const char *detail;
	} bad[] = {
		{{"prog", "--port", "0"}, 3, "--port takes a number of 1..65535"},
		{{"prog", "--port", "65536"}, 3, "--port takes a number of 1..65535"},
		{{"prog", "--port", "8x"}, 3, "--port takes a number of 1..65535"},
		{{"prog", "--port"}, 2, "--port takes a number of 1..65535"},
		{{"prog", "--n", "11"}, 3, "--n takes a number of 0..10"},
		{{"prog", "--dir", ""}, 3, "--dir takes a value"},
		{{"prog", "--dir"}, 2, "--dir takes a value"},
		{{"prog", "--nope", "1"}, 3, "--nope: no such option"},
		{{"prog", "port", "1"}, 3, "port: no such option"},
		{{"prog", "--shards", "0"}, 3, "--shards: a missing or bad value"},
		{{"prog", "--cpus"}, 2, "--cpus: a missing or bad value"},
		{{"prog", "--flag", "--port", "x"}, 4, "--port takes a number of 1..65535"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc = tl_runtime_config_args(&cfg, bad[i].argc, (char **)bad[i].argv, opts);
		CU_ASSERT_EQUAL(rc, -EINVAL);
		if (strcmp(tl_error_detail(), bad[i].detail) != 0)
			fprintf(stderr, "  case %zu: detail \"%s\"\n", i, tl_error_detail());
		CU_ASSERT_STRING_EQUAL(tl_error_detail(), bad[i].detail);
	}
	CU_ASSERT_EQUAL(flag, 1); /* what came before the bad argument is set */
	const tl_runtime_option no_dst[] = {{"--x", TL_OPTION_U32, NULL, 0, 1}, {NULL, 0, NULL, 0, 0}};
	const tl_runtime_option no_kind[] = {{"--x", 9, &n, 0, 1}, {NULL, 0, NULL, 0, 0}};
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 1, ok, no_dst), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 1, ok, no_kind), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_config_args(NULL, 1, ok, opts), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 1, NULL, opts), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_config_args(&cfg, 0, ok, opts), -EINVAL);
	st_end(fds);
}

/* ---- SIGTERM stops and drains every shard ---- */

#ifdef _WIN32
static void other_hook(int sig)
{
	(void)sig;
}

/* What Windows lets a process check of itself: the runtime holds the
 * SIGTERM hook (a console control handler) while it runs, and lets go of
 * it at its end, as Linux's test checks the previous action comes back. */
static void test_sigterm_drain(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/sigterm_drain");

	reset();
	base(&cfg, 2);
	cfg.signals = 1;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	CU_ASSERT_EQUAL(tl_signal_hook(SIGTERM, other_hook), -EBUSY);
	CU_ASSERT_EQUAL(tl_signal_hook(SIGINT, other_hook), -EBUSY);
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(tl_signal_hook(SIGTERM, other_hook), 0);
	CU_ASSERT_EQUAL(tl_signal_hook(SIGTERM, NULL), 0);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(V[i].stops, 1);
		CU_ASSERT_EQUAL(V[i].closed, 1);
	}
	st_skip("SIGTERM sent by the process to itself: on Windows it is a console control "
		"event, and wine gives the process no console to generate one in "
		"(GenerateConsoleCtrlEvent fails); the hook's drain is tl_runtime_drain's "
		"(drain_finishes_transfer), a signal from outside is win-echo-shards'");
	st_end(fds);
}
#else
static void test_sigterm_drain(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	struct sigaction before, after;
	int fds = st_begin("runtime/sigterm_drain");

	reset();
	open_listener = 1;
	base(&cfg, 2);
	cfg.signals = 1;
	sigaction(SIGTERM, NULL, &before);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	tl__os_sleep_us(20000);
	CU_ASSERT_EQUAL(kill(getpid(), SIGTERM), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	sigaction(SIGTERM, NULL, &after);
	/* The previous action is back. */
	CU_ASSERT_PTR_EQUAL((void *)after.sa_handler, (void *)before.sa_handler);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(V[i].listen_rc, 0);
		CU_ASSERT_EQUAL(V[i].stops, 1);
		/* Timer and listener closed, the accept's terminal delivered. */
		CU_ASSERT_EQUAL(V[i].closed, 2);
		CU_ASSERT_EQUAL(V[i].accept_terminal, 1);
	}
	st_end(fds);
}
#endif

/* ---- a graceful drain lets an in-flight transfer finish ---- */

/* Each shard listens on one port (SO_REUSEPORT) and sends every connection
 * XFER bytes of the test pattern, one 64 KiB write at a time, then closes
 * it. XFER is far more than the socket buffers between the shard and the
 * client can hold (the client's receive buffer is kept small, the shard's
 * send buffer grows to 4 MiB here): a stop in the middle of it must find
 * bytes not yet written. With 8 MiB and the receive buffer left to grow
 * (to 32 MiB here), a quiet machine had written it all before the second
 * signal, and second_signal_stops read the whole transfer. */
#define XFER (32u << 20)
#define CHUNK 65536u
#define TOK_XW 0x3e17

static uint16_t xport;
static uint8_t xbuf[CHUNK];
struct xfer_shard {
	tl_handle conn;
	uint64_t sent;
	int drains, closed_rt;
	uint16_t port; /* Windows: the port this shard listens on */
};
static struct xfer_shard X[MAXS];
/* The first connection accepted is the transfer's; do_drain's probes that
 * a listener took before the drain closed it are closed at once. */
static _Atomic int xfer_taken;
#define TOK_PROBE 0x3e18

static void x_send(tl_loop *l, struct xfer_shard *x)
{
	tl_op op;
	if (x->sent >= XFER) {
		tl_close(l, x->conn, 1);
		x->conn = TL_HANDLE_NONE;
		return;
	}
	ST_CHECK(tl_write(l, x->conn, xbuf, CHUNK, TOK_XW, &op) == 0);
}

static int x_start(tl_shard *s, void *arg)
{
	tl_loop *l = tl_shard_loop(s);
	tl_addr a;
	tl_listen_opts o = {.reuseport = 1};
	tl_handle h;
	tl_op op;

	(void)arg;
#ifdef _WIN32
	/* No SO_REUSEPORT: shard 0 takes the test's port, shard 1 one of
	 * its own (the client connects to shard 0's). */
	o.reuseport = 0;
	tl_addr_parse(&a, "127.0.0.1", tl_shard_id(s) == 0 ? xport : 0);
	ST_CHECK(tl_tcp_listen(l, &a, &o, &h) == 0);
	ST_CHECK(tl_local_addr(l, h, &a) == 0);
	X[tl_shard_id(s)].port = ntohs(a.in.sin_port);
#else
	tl_addr_parse(&a, "127.0.0.1", xport);
	ST_CHECK(tl_tcp_listen(l, &a, &o, &h) == 0);
#endif
	ST_CHECK(tl_accept_start(l, h, TOK_ACCEPT, &op) == 0);
	return 0;
}

static void x_drain(tl_shard *s, void *arg)
{
	(void)arg;
	X[tl_shard_id(s)].drains++;
}

static void x_handler(tl_shard *s, const tl_completion *c)
{
	struct xfer_shard *x = &X[tl_shard_id(s)];
	tl_loop *l = tl_shard_loop(s);

	if (c->kind == TL_K_ACCEPT && c->result == 0 && !(c->flags & TL_F_TERMINAL)) {
		if (atomic_exchange(&xfer_taken, 1)) {
			ST_CHECK(tl_close(l, c->u.accept.conn, TOK_PROBE) == 0);
			return;
		}
		ST_CHECK(x->conn.v == 0);
		x->conn = c->u.accept.conn;
		x->sent = 0;
		x_send(l, x);
	} else if (c->kind == TL_K_WRITE && c->token == TOK_XW) {
		if (c->result > 0) {
			x->sent += (uint64_t)c->result;
			if (x->conn.v)
				x_send(l, x);
		}
	} else if (c->kind == TL_K_CLOSED && c->token == TL_RT_CLOSE_TOKEN) {
		x->closed_rt++;
	}
}

#ifdef _WIN32
/* The client's sockets on Windows: Winsock's, in an int as the runtime
 * carries them; errors as negative errno values. */
static uint16_t free_port(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint16_t p = (uint16_t)(20000 + ((int)GetCurrentProcessId() * 131 + tries * 7) % 12000);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
		SOCKET fd = socket(AF_INET, SOCK_STREAM, 0);
		int ok;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
		closesocket(fd);
		if (ok)
			return p;
	}
	return 0;
}

static int x_connect_port(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	SOCKET fd = socket(AF_INET, SOCK_STREAM, 0);
	int rcv = 64 << 10;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd == INVALID_SOCKET)
		return tl__os_win_error((unsigned long)WSAGetLastError());
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, (const char *)&rcv, sizeof rcv);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		int e = tl__os_win_error((unsigned long)WSAGetLastError());
		closesocket(fd);
		return e;
	}
	return (int)fd;
}

static int x_connect(void)
{
	return x_connect_port(xport);
}

static long sock_read(int fd, void *buf, size_t n)
{
	return recv((SOCKET)(intptr_t)fd, buf, (int)n, 0);
}
#else
/* A port free a moment ago, below the ephemeral range (32768 and up) so
 * that no other process's outgoing connection takes it meanwhile. */
static uint16_t free_port(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint16_t p = (uint16_t)(20000 + (getpid() * 131 + tries * 7) % 12000);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
		int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, ok;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
		close(fd);
		if (ok)
			return p;
	}
	return 0;
}

static int x_connect(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(xport)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rcv = 64 << 10;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static long sock_read(int fd, void *buf, size_t n)
{
	return (long)read(fd, buf, n);
}
#endif

/* Connect once the shards listen (on_launch runs after tl_runtime_launch). */
static int x_connect_started(void)
{
	int fd = -1;
	for (int i = 0; i < 400 && fd < 0; i++) {
		fd = x_connect();
		if (fd < 0)
			tl__os_sleep_us(5000);
	}
	return fd;
}

/* Read from fd, slowly (a pause every 256 KiB), until EOF or XFER bytes;
 * hook(arg) runs once after 1 MiB. Returns the bytes read; *intact tells
 * whether they all matched. */
static uint64_t x_read(int fd, void (*hook)(void *), void *arg, int *intact)
{
	static uint8_t in[CHUNK];
	uint64_t got = 0;
	int hooked = 0;
	*intact = 1;
	for (;;) {
		long k = sock_read(fd, in, sizeof in);
		if (k <= 0)
			break;
		for (long i = 0; i < k; i++)
			if (in[i] != xbuf[(got + (uint64_t)i) % CHUNK])
				*intact = 0;
		got += (uint64_t)k;
		if (!hooked && got >= (1u << 20)) {
			hooked = 1;
			hook(arg);
		}
		if (got % (256u << 10) < (uint64_t)k)
			tl__os_sleep_us(2000);
	}
	return got;
}

static void x_config(tl_runtime_config *cfg)
{
	memset(X, 0, sizeof X);
	atomic_store(&xfer_taken, 0);
	for (uint32_t i = 0; i < CHUNK; i++)
		xbuf[i] = (uint8_t)(i * 7 + 3);
	xport = free_port();
	st_config(cfg, 2);
	cfg->on_launch = x_start;
	cfg->on_drain = x_drain;
	cfg->on_completion = x_handler;
}

static void do_drain(void *rt)
{
	tl_runtime_drain(rt);
	/* The listeners go at once: a new connection is refused. */
	int refused = 0;
	for (int i = 0; i < 200 && !refused; i++) {
		int fd = x_connect();
		if (fd == -ECONNREFUSED)
			refused = 1;
		else if (fd >= 0)
			tl__os_sock_close(fd);
		tl__os_sleep_us(5000);
	}
	ST_CHECK(refused);
#ifdef _WIN32
	/* Shard 1's listener, on its own port there, goes too. */
	refused = 0;
	for (int i = 0; i < 200 && !refused; i++) {
		int fd = x_connect_port(X[1].port);
		if (fd == -ECONNREFUSED)
			refused = 1;
		else if (fd >= 0)
			tl__os_sock_close(fd);
		tl__os_sleep_us(5000);
	}
	ST_CHECK(refused);
#endif
}

static void test_drain_finishes_transfer(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/drain_finishes_transfer");

	x_config(&cfg);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	int fd = x_connect_started(), intact;
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	uint64_t t0 = st_now_ns();
	uint64_t got = x_read(fd, do_drain, rt, &intact);
	tl__os_sock_close(fd);
	/* Every byte of the transfer in flight arrived, then the runtime ended
	 * by itself, well before the grace period (30 s). */
	CU_ASSERT_EQUAL(got, XFER);
	CU_ASSERT_TRUE(intact);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_TRUE(st_now_ns() - t0 < 10000000000ull);
	tl_runtime_destroy(rt);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(X[i].drains, 1);
		/* The program closed its connection itself; the runtime closed
		 * the listener (the only handle it closed). */
		CU_ASSERT_EQUAL(X[i].closed_rt, 1);
	}
	st_end(fds);
}

/* A second signal (or tl_runtime_stop) during the grace period stops at
 * once: the transfer is cut, the runtime's closes carry its token. */
static void do_two_signals(void *rt)
{
#ifdef _WIN32
	/* What the runtime's hook does at each (shards/runtime.c's
	 * on_signal): the first drains, the second stops. */
	tl_runtime_drain(rt);
	tl__os_sleep_us(20000);
	tl_runtime_stop(rt);
#else
	(void)rt;
	kill(getpid(), SIGTERM);
	tl__os_sleep_us(20000);
	kill(getpid(), SIGTERM);
#endif
}

static void test_second_signal_stops(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/second_signal_stops");

	x_config(&cfg);
	cfg.signals = 1;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	int fd = x_connect_started(), intact;
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	uint64_t got = x_read(fd, do_two_signals, rt, &intact);
	tl__os_sock_close(fd);
	CU_ASSERT_TRUE(got < XFER);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	int cut = 0;
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(X[i].drains, 1);
		cut += X[i].closed_rt == 2; /* the listener, and the connection */
	}
	CU_ASSERT_EQUAL(cut, 1);
#ifdef _WIN32
	st_skip("the two SIGTERMs: a process cannot send itself one under wine (no console to "
		"generate its control event in); drained, then stopped, by the calls the "
		"runtime's hook makes for them");
#endif
	st_end(fds);
}

/* ---- a shard that fails to start stops the rest, with the reason ---- */

static void test_start_fails(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/start_fails");

	reset();
	fail_shard = 1;
	fail_code = -EADDRINUSE;
	base(&cfg, 3);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), -EADDRINUSE);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "shard 1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "on_launch"));
	tl_runtime_destroy(rt);
	/* The others started, then drained cleanly. */
	CU_ASSERT_EQUAL(V[0].closed, 1);
	CU_ASSERT_EQUAL(V[2].closed, 1);
	CU_ASSERT_EQUAL(V[0].stops, 1);
	CU_ASSERT_EQUAL(V[1].closed, 0);
	st_end(fds);
}

static void test_setup_fails(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/setup_fails");

	reset();
	base(&cfg, 2);
	cfg.loop.max_handles = 0; /* every shard's loop is refused */
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_launch(rt), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "cannot create its loop"));
	CU_ASSERT_EQUAL(tl_runtime_run(rt), -EINVAL);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&start_calls), 0); /* no user code ran */
	st_end(fds);
}

/* ---- TL_SHARDS, TL_CPUS, TL_SMT ---- */

static void test_env(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/env");
	long ncpu = online_cpus();

	reset();
	base(&cfg, 0);
	cfg.no_env = 0;
	cfg.plan.overcommit = 0;
	setenv("TL_SHARDS", "1", 1);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_shards(rt), 1);
	tl_runtime_destroy(rt);

	/* The program's own setting wins over the variable. */
	cfg.plan.shards = 2;
	cfg.plan.overcommit = 1;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_shards(rt), 2);
	tl_runtime_destroy(rt);
	cfg.plan.shards = 0;
	cfg.plan.overcommit = 0;

	setenv("TL_SHARDS", "abc", 1);
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	unsetenv("TL_SHARDS");
	setenv("TL_SMT", "2", 1);
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	unsetenv("TL_SMT");

	if (ncpu >= 2) {
		/* TL_CPUS=1: one shard, on CPU 1, and it really runs there. */
		setenv("TL_CPUS", "1", 1);
		CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
		CU_ASSERT_EQUAL(tl_runtime_shards(rt), 1);
		CU_ASSERT_EQUAL(tl_runtime_plan(rt)->shards[0].pu_os_index, 1);
		tl_runtime_stop(rt);
		CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
		tl_runtime_destroy(rt);
		CU_ASSERT_EQUAL(V[0].cpu, 1);
		unsetenv("TL_CPUS");
	}
	/* no_env ignores the variables. */
	setenv("TL_SHARDS", "abc", 1);
	cfg.no_env = 1;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	tl_runtime_destroy(rt);
	unsetenv("TL_SHARDS");
	st_end(fds);
}

/* ---- each handle's pointer, freed at the Closed of the runtime's stop ---- */

#define TOK_DCONN 0xd0c0
#define TOK_DREAD 0xd4ead

/* The state a program keeps per handle, found from each completion. */
struct hstate {
	tl_handle h;
	uint32_t shard;
};

static atomic_int d_live, d_made, d_freed, d_posts;
static atomic_int d_accepted[MAXS], d_connected[MAXS];

static void d_new(tl_shard *s, tl_handle h)
{
	struct hstate *st = malloc(sizeof *st);

	ST_CHECK(st != NULL);
	if (!st)
		return;
	st->h = h;
	st->shard = tl_shard_id(s);
	ST_CHECK(tl_handle_set_data(tl_shard_loop(s), h, st) == 0);
	atomic_fetch_add(&d_live, 1);
	atomic_fetch_add(&d_made, 1);
}

/* Each shard: a repeating timer, a listener accepting, and a connection
 * to it, each with its state; the accepted end gets its own. */
static int d_start(tl_shard *s, void *arg)
{
	tl_loop *l = tl_shard_loop(s);
	tl_addr a;
	tl_handle h;
	tl_op op;

	(void)arg;
	ST_CHECK(tl_timer_start(l, tl_now(l) + 1000000, 1000000, TOK_TIMER, &h, &op) == 0);
	d_new(s, h);
	tl_addr_parse(&a, "127.0.0.1", 0);
	if (tl_tcp_listen(l, &a, NULL, &h) != 0 || tl_local_addr(l, h, &a) != 0)
		return -EIO;
	ST_CHECK(tl_accept_start(l, h, TOK_ACCEPT, &op) == 0);
	d_new(s, h);
	ST_CHECK(tl_tcp_connect(l, &a, 0, TOK_DCONN, &h, &op) == 0);
	d_new(s, h);
	/* A mesh completion names no handle: it carries NULL. */
	ST_CHECK(tl_shard_post(s, tl_shard_id(s), TOK_SELF, 0) == 0);
	return 0;
}

static void d_handler(tl_shard *s, const tl_completion *c)
{
	struct hstate *st = c->data;
	uint32_t me = tl_shard_id(s);

	if (!c->handle.v) {
		ST_CHECK(c->kind == TL_K_MESH && st == NULL);
		atomic_fetch_add(&d_posts, 1);
		return;
	}
	/* Every other completion names a handle that has its state. */
	ST_CHECK(st != NULL);
	if (!st)
		return;
	ST_CHECK(st->h.v == c->handle.v && st->shard == me);
	if (c->kind == TL_K_ACCEPT && c->result == 0 && !(c->flags & TL_F_TERMINAL)) {
		tl_op op;
		d_new(s, c->u.accept.conn);
		ST_CHECK(tl_read_start(tl_shard_loop(s), c->u.accept.conn, TOK_DREAD, &op) == 0);
		atomic_fetch_add(&d_accepted[me], 1);
	} else if (c->kind == TL_K_CONNECT && c->result == 0) {
		atomic_fetch_add(&d_connected[me], 1);
	} else if (c->kind == TL_K_CLOSED) {
		/* The program closed nothing: every Closed is the runtime's. */
		ST_CHECK(c->token == TL_RT_CLOSE_TOKEN);
		free(st);
		atomic_fetch_sub(&d_live, 1);
		atomic_fetch_add(&d_freed, 1);
	}
}

/* The runtime's own closes at a stop (TL_RT_CLOSE_TOKEN) carry each
 * handle's pointer (tl_handle_set_data), so the program frees every
 * handle's state there, with no list of its own: nothing is left. */
static void test_stop_frees_handle_state(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("runtime/stop_frees_handle_state");
	const uint32_t n = 2;

	atomic_store(&d_live, 0);
	atomic_store(&d_made, 0);
	atomic_store(&d_freed, 0);
	atomic_store(&d_posts, 0);
	for (uint32_t i = 0; i < MAXS; i++) {
		atomic_store(&d_accepted[i], 0);
		atomic_store(&d_connected[i], 0);
	}
	st_config(&cfg, n);
	cfg.on_launch = d_start;
	cfg.on_completion = d_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	/* Stop once every shard holds all four handles. */
	uint64_t dl = st_now_ns() + 10ull * 1000000000ull;
	for (;;) {
		uint32_t ready = 0;
		for (uint32_t i = 0; i < n; i++)
			ready += atomic_load(&d_accepted[i]) && atomic_load(&d_connected[i]);
		if (ready == n || st_now_ns() >= dl)
			break;
		tl__os_sleep_us(1000);
	}
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	for (uint32_t i = 0; i < n; i++) {
		CU_ASSERT_EQUAL(atomic_load(&d_accepted[i]), 1);
		CU_ASSERT_EQUAL(atomic_load(&d_connected[i]), 1);
	}
	CU_ASSERT_EQUAL(atomic_load(&d_posts), (int)n);
	CU_ASSERT_EQUAL(atomic_load(&d_made), (int)(4 * n));
	CU_ASSERT_EQUAL(atomic_load(&d_freed), atomic_load(&d_made));
	CU_ASSERT_EQUAL(atomic_load(&d_live), 0);
	st_end(fds);
}

/* ---- the stall detector ---- */

static int slow_start(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0)
		ST_CHECK(tl_shard_post(s, 0, TOK_SELF, 0) == 0);
	return 0;
}

static void slow_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind == TL_K_MESH && c->token == TOK_SELF) {
		tl__os_sleep_us(30000); /* a handler that blocks its shard for 30 ms */
		tl_runtime_stop(tl_shard_runtime(s));
	}
}

static void test_stall(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	tl_stats_shard st0, st1;
	char buf[4096] = "";
	int fds = st_begin("runtime/stall");
	FILE *tmp = tmpfile();
	int saved = dup(2);

	CU_ASSERT_PTR_NOT_NULL_FATAL(tmp);
	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.stall_ns = 10 * 1000000ull;
	cfg.on_launch = slow_start;
	cfg.on_completion = slow_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	/* The counters outlive the run until destroy. */
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid()), 0);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, 0, &st0, NULL, 0), 0);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, 1, &st1, NULL, 0), 0);
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(st0.stalls, 1);
	CU_ASSERT_TRUE(st0.last_stall_ns >= 30 * 1000000ull);
	CU_ASSERT_TRUE(st0.max_pass_ns >= 30 * 1000000ull);
	CU_ASSERT_EQUAL(st1.stalls, 0);
	/* The 30 ms pass is in its bucket, or a later one if the machine kept
	 * the shard off its CPU on top of that. */
	uint64_t slow = 0;
	for (uint32_t b = TL_STATS_HIST - 7; b < TL_STATS_HIST; b++)
		slow += st0.pass_hist[b];
	CU_ASSERT_TRUE(slow > 0);
	rewind(tmp);
	size_t n = fread(buf, 1, sizeof buf - 1, tmp);
	buf[n] = '\0';
	fclose(tmp);
	CU_ASSERT_PTR_NOT_NULL(strstr(buf, "stall on shard 0"));
	CU_ASSERT_PTR_NULL(strstr(buf, "stall on shard 1"));
	st_end(fds);
}

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("runtime", NULL, NULL);
	st_add(s, "start_stop", test_start_stop);
	st_add(s, "stop_before_run", test_stop_before_run);
	st_add(s, "bad_config", test_bad_config);
	st_add(s, "config_option", test_config_option);
	st_add(s, "config_args", test_config_args);
	st_add(s, "sigterm_drain", test_sigterm_drain);
	st_add(s, "drain_finishes_transfer", test_drain_finishes_transfer);
	st_add(s, "second_signal_stops", test_second_signal_stops);
	st_add(s, "start_fails", test_start_fails);
	st_add(s, "setup_fails", test_setup_fails);
	st_add(s, "env", test_env);
	st_add(s, "stop_frees_handle_state", test_stop_frees_handle_state);
	st_add(s, "stall", test_stall);
	return st_run();
}
