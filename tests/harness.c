/* tests/harness.c: helpers shared by the contract suite (see harness.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harness.h"

#include <CUnit/Basic.h>

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _WIN32
#include <pthread.h>
#include <sched.h>
#include <windows.h>
#include "win/handles.h"
#else
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#endif
#include <turnloop/poll.h>
#include "tl_config.h"
#if TL_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif

static char cur_name[160];
static int skip_total;
static int skipped_now;
static unsigned test_timeout_s = H_TEST_TIMEOUT_S;
#ifdef _WIN32
static volatile int sigpipes; /* Windows has no SIGPIPE: a send to a reset socket fails */
#else
static volatile sig_atomic_t sigpipes;
#endif

/* ---- Messages ---- */

/* ---- Frame ---- */

#ifdef _WIN32
/*
 * The watchdog on Windows: a thread of its own (made once, so it is in
 * every test's handle count alike) that waits on an event until the
 * running test's deadline; past it, it names the test and ends the
 * process with 1, as SIGALRM does on Linux. h_begin sets the deadline
 * and h_end clears it, each waking the thread.
 */
static HANDLE dog_event;
static volatile LONG64 dog_deadline_ms; /* GetTickCount64 time; 0: disarmed */

static DWORD WINAPI dog_main(void *arg)
{
	(void)arg;
	for (;;) {
		LONG64 dl = InterlockedCompareExchange64(&dog_deadline_ms, 0, 0);
		ULONGLONG now = GetTickCount64();
		DWORD wait = INFINITE;
		if (dl && (ULONGLONG)dl <= now) {
			static const char m1[] = "\nWATCHDOG: test ";
			static const char m2[] = " did not finish in time (a turn hung?)\n";
			fwrite(m1, 1, sizeof m1 - 1, stderr);
			fwrite(cur_name, 1, strlen(cur_name), stderr);
			fwrite(m2, 1, sizeof m2 - 1, stderr);
			fflush(stderr);
			fflush(stdout);
			/* Not ExitProcess: its DLL detach could wait for a lock a killed thread held. */
			TerminateProcess(GetCurrentProcess(), 1);
		}
		if (dl)
			wait = (DWORD)((ULONGLONG)dl - now);
		WaitForSingleObject(dog_event, wait);
	}
	return 0;
}

static void *warm_leaf(void *arg)
{
	sched_yield();
	return arg;
}

static void *warm_thread(void *arg)
{
	/* Contention on winpthreads' own mutexes (each gets its event at its
	 * first contention, and keeps it) and the C runtime's locks. */
	for (int i = 0; i < 50; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, warm_leaf, NULL) == 0)
			pthread_join(t, NULL);
		free(malloc(64 + (size_t)i * 8));
	}
	return arg;
}

/* What the C runtime, winpthreads and Winsock make once, at their first
 * use, and keep (winpthreads: an event and a thread handle at the first
 * pthread_create, an event per internal mutex at its first contention;
 * Winsock: an event at the first IPv6 socket): made here,
 * before any test counts handles, as main's first loop does on Linux. */
static void warm_up(void)
{
	pthread_t t[4];
	int made = 0;
	while (made < 4 && pthread_create(&t[made], NULL, warm_thread, NULL) == 0)
		made++;
	while (made > 0)
		pthread_join(t[--made], NULL);
	static const int fam[2] = {AF_INET, AF_INET6}, type[2] = {SOCK_STREAM, SOCK_DGRAM};
	for (int f = 0; f < 2; f++)
		for (int k = 0; k < 2; k++) {
			SOCKET s = socket(fam[f], type[k], 0);
			if (s == INVALID_SOCKET)
				continue;
			struct sockaddr_storage a;
			memset(&a, 0, sizeof a);
			a.ss_family = (ADDRESS_FAMILY)fam[f];
			bind(s, (struct sockaddr *)&a, f ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
			closesocket(s);
		}
	/* A failed check's errno name (check.h) is formatted in thread-local
	 * buffers: the first thread-local variable used makes the runtime's
	 * own (emutls) state, a handle that a failure must not add to its
	 * test's leak check. */
	(void)check_errname(-EINVAL);
	fflush(stderr);
}

static void dog_arm(unsigned s)
{
	InterlockedExchange64(&dog_deadline_ms, s ? (LONG64)(GetTickCount64() + (ULONGLONG)s * 1000) : 0);
	SetEvent(dog_event);
}
#define alarm(s) dog_arm(s)
#else
static void on_alarm(int sig)
{
	(void)sig;
	static const char m1[] = "\nWATCHDOG: test ";
	static const char m2[] = " did not finish in time (a turn hung?)\n";
	ssize_t r = write(2, m1, sizeof m1 - 1);
	r = write(2, cur_name, strlen(cur_name));
	r = write(2, m2, sizeof m2 - 1);
	(void)r;
	_exit(1);
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}
#endif

static int slow_factor = 1;

int h_slow(void)
{
	return slow_factor;
}

void h_init(void)
{
	const char *t = getenv("TL_TEST_SLOW");
	if (t && atoi(t) > 0)
		slow_factor = atoi(t);
#if TL_HAVE_VALGRIND
	/* Under valgrind every wait stretches as meson's timeouts do in CI
	 * (--timeout-multiplier 4), unless TL_TEST_SLOW says otherwise. */
	else if (RUNNING_ON_VALGRIND)
		slow_factor = 4;
#endif
	test_timeout_s = H_TEST_TIMEOUT_S * (unsigned)slow_factor;
	t = getenv("TL_TEST_TIMEOUT");
	if (t && atoi(t) > 0)
		test_timeout_s = (unsigned)atoi(t);
#ifdef _WIN32
	/* Winsock for the tests' own sockets, up for the whole run: the IOCP
	 * driver's loops start and end it too, and the simulation driver's do
	 * not, so without this the handle count would change with its state. */
	WSADATA wd;
	if (WSAStartup(MAKEWORD(2, 2), &wd) != 0) {
		fprintf(stderr, "WSAStartup failed\n");
		exit(1);
	}
	dog_event = CreateEventW(NULL, FALSE, FALSE, NULL);
	HANDLE th = dog_event ? CreateThread(NULL, 0, dog_main, NULL, 0, NULL) : NULL;
	if (!th) {
		fprintf(stderr, "the watchdog thread: error %lu\n", GetLastError());
		exit(1);
	}
	CloseHandle(th);
	warm_up();
#else
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	/* A library that writes to a reset socket without MSG_NOSIGNAL would kill
	 * the whole program; count the signal instead and fail that test. */
	sa.sa_handler = on_sigpipe;
	sigaction(SIGPIPE, &sa, NULL);
#endif
	snprintf(cur_name, sizeof cur_name, "(setup)");
}

const char *h_test_name(void)
{
	return cur_name;
}

#ifdef _WIN32
/* Open handles of the process (sockets, ports, events, threads, files). */
int h_fd_count(void)
{
	return win_handle_count();
}
#else
int h_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory stream's own descriptor */
}
#endif

int h_begin(void)
{
	CU_pSuite s = CU_get_current_suite();
	CU_pTest t = CU_get_current_test();
	snprintf(cur_name, sizeof cur_name, "%s/%s", s ? s->pName : "?", t ? t->pName : "?");
	skipped_now = 0;
	sigpipes = 0;
	alarm(test_timeout_s);
	return h_fd_count();
}

void h_drain_close(tl_loop *loop)
{
	tl_completion c[64];
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (tl_alive(loop) && h_wall_ns() < dl) {
		int n = tl_turn(loop, 10 * (int64_t)H_MS, c, 64, NULL);
		if (n < 0) {
			H_EQ(n, 0);
			break;
		}
		for (int i = 0; i < n; i++)
			if (c[i].flags & TL_F_LEASE)
				tl_lease_release(loop, c[i].kind == TL_K_RECV ? c[i].u.recv.lease.id
									      : c[i].u.read.lease.id);
	}
	H_TRUE(!tl_alive(loop), "loop still alive after draining for %d ms", H_WAIT_MS);
	int rc = tl_loop_close(loop);
	H_EQ(rc, 0);
	if (rc != 0)
		tl_loop_destroy(loop); /* keep later tests' descriptor counts honest */
}

void h_end(tl_loop *loop, int fds0)
{
	if (loop)
		h_drain_close(loop);
	int fds = h_fd_count();
	H_EQ(fds, fds0);
	H_EQ(sigpipes, 0);
	alarm(0);
}

tl_loop *h_loop_cfg(const tl_config *cfg)
{
	tl_loop *loop = NULL;
	int rc = tl_loop_new(&loop, cfg);
	H_EQ_FATAL(rc, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(loop);
	return loop;
}

tl_loop *h_loop(void)
{
	tl_config cfg;
	tl_config_init(&cfg);
	return h_loop_cfg(&cfg);
}

void h_skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("\nSKIP %s: ", cur_name);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	if (!skipped_now)
		skip_total++;
	skipped_now = 1;
}

int h_under_wine(void)
{
#ifdef _WIN32
	return win_under_wine();
#else
	return 0;
#endif
}

int h_wine_differs(tl_loop *loop, const char *what)
{
	if (strcmp(tl_loop_driver(loop), "iocp") != 0 || !h_under_wine())
		return 0;
	h_skip("%s: wine 8 differs from Windows here; to run on Windows itself", what);
	return 1;
}

int h_skip_count(void)
{
	return skip_total;
}

int h_need_cap(tl_loop *loop, uint32_t cap)
{
	if (tl_loop_caps(loop) & cap)
		return 1;
	int rc = -ENOTSUP;
	tl_handle h = TL_HANDLE_NONE;
	tl_addr a;
	const char *what = "?", *why = "";
	switch (cap) {
	case TL_CAP_TCP:
		what = "TCP";
		h_loopback(&a, AF_INET, 0);
		rc = tl_tcp_listen(loop, &a, NULL, &h);
		break;
	case TL_CAP_UDP:
		what = "UDP";
		h_loopback(&a, AF_INET, 0);
		rc = tl_udp_bind(loop, &a, &h);
		break;
	case TL_CAP_UNIX: {
		what = "Unix-domain sockets";
		char path[64];
#ifdef _WIN32
		snprintf(path, sizeof path, "tl-contract-probe-%lu", GetCurrentProcessId());
#else
		snprintf(path, sizeof path, "/tmp/tl-contract-probe-%d", (int)getpid());
#endif
		rc = tl_unix_listen(loop, path, NULL, &h);
		if (rc == 0)
			unlink(path);
#ifdef _WIN32
		/* Whether Winsock itself has AF_UNIX (Windows 10 1803 and
		 * later; wine 8 has not): the skip says which it is. */
		SOCKET u = socket(AF_UNIX, SOCK_STREAM, 0);
		if (u == INVALID_SOCKET && WSAGetLastError() == WSAEAFNOSUPPORT)
			why = " (this system's Winsock has no AF_UNIX: WSAEAFNOSUPPORT)";
		else
			why = " (not built yet: this system's Winsock has AF_UNIX)";
		if (u != INVALID_SOCKET)
			closesocket(u);
#endif
		break;
	}
	case TL_CAP_EMBED:
		what = "tl_loop_fd";
		rc = tl_loop_fd(loop);
#ifdef _WIN32
		why = " (a completion port is no descriptor a host's poll or WaitForMultipleObjects can wait on)";
#endif
		break;
	case TL_CAP_POLL: {
		what = "polling OS descriptors (tl_poll_start)";
		tl_op op;
#ifdef _WIN32
		/* A socket: the only kind WSAPoll would watch. */
		SOCKET p0 = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
		if (p0 == INVALID_SOCKET) {
			rc = -EIO;
			break;
		}
		rc = tl_poll_start(loop, (int)(intptr_t)p0, POLLIN, 0, &h, &op);
#else
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0) {
			rc = -errno;
			break;
		}
		rc = tl_poll_start(loop, p[0], POLLIN, 0, &h, &op);
#endif
		if (rc == 0) { /* a driver that has it after all: clean up, fail */
			h_ctx c;
			h_ctx_init(&c, loop);
			h_close(&c, h, 0);
			h_ctx_fini(&c);
			h.v = 0;
		}
#ifdef _WIN32
		closesocket(p0);
#else
		close(p[0]);
		close(p[1]);
#endif
		break;
	}
	case TL_CAP_OS: {
		what = "OS sockets (tl_handle_fd)";
		tl_handle u = TL_HANDLE_NONE;
		h_loopback(&a, AF_INET, 0);
		rc = tl_udp_bind(loop, &a, &u); /* a failure here fails the check */
		if (rc == 0) {
			rc = tl_handle_fd(loop, u);
			h_ctx c;
			h_ctx_init(&c, loop);
			h_close(&c, u, 0);
			h_ctx_fini(&c);
		}
		break;
	}
	case TL_CAP_DETACH: {
		what = "detaching and passing descriptors (tl_detach)";
		int fd = -1;
		tl_handle u = TL_HANDLE_NONE;
		h_loopback(&a, AF_INET, 0);
		rc = tl_udp_bind(loop, &a, &u); /* a failure here fails the check */
		if (rc == 0)
			rc = tl_detach(loop, u, &fd);
		if (rc == 0) {
			h_sock_close(fd); /* detached after all: not the loop's to close */
		} else if (u.v) {
			h_ctx c;
			h_ctx_init(&c, loop);
			h_close(&c, u, 0);
			h_ctx_fini(&c);
		}
		break;
	}
	case TL_CAP_SPLICE: {
		tl_op op;
		what = "tl_splice";
		rc = tl_splice(loop, TL_HANDLE_NONE, TL_HANDLE_NONE, 1, 0, &op);
		break;
	}
	default:
		break;
	}
	H_EQ(rc, -ENOTSUP);
	if (rc == 0 && h.v != 0) {
		h_ctx c;
		h_ctx_init(&c, loop);
		h_close(&c, h, 0);
		h_ctx_fini(&c);
	}
	h_skip("driver %s lacks %s%s", tl_loop_driver(loop), what, why);
	return 0;
}

#ifdef _WIN32
char *h_mkdtemp(char *tmpl)
{
	if (!_mktemp(tmpl) || mkdir(tmpl) != 0)
		return NULL;
	return tmpl;
}

int h_need_ipv6(void)
{
	SOCKET fd = socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP);
	if (fd == INVALID_SOCKET) {
		h_skip("no IPv6 sockets: Winsock error %d", WSAGetLastError());
		return 0;
	}
	struct sockaddr_in6 a;
	memset(&a, 0, sizeof a);
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_loopback;
	int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
	int e = WSAGetLastError();
	closesocket(fd);
	if (rc != 0) {
		h_skip("cannot bind ::1: Winsock error %d", e);
		return 0;
	}
	return 1;
}
#else
int h_need_ipv6(void)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		h_skip("no IPv6 sockets: %s", strerror(errno));
		return 0;
	}
	struct sockaddr_in6 a;
	memset(&a, 0, sizeof a);
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_loopback;
	int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
	int e = errno;
	close(fd);
	if (rc != 0) {
		h_skip("cannot bind ::1: %s", strerror(e));
		return 0;
	}
	return 1;
}
#endif

/* ---- Time ---- */

#ifdef _WIN32
uint64_t h_wall_ns(void)
{
	static LARGE_INTEGER f;
	LARGE_INTEGER c;
	if (!f.QuadPart)
		QueryPerformanceFrequency(&f);
	QueryPerformanceCounter(&c);
	uint64_t q = (uint64_t)c.QuadPart, hz = (uint64_t)f.QuadPart;
	return q / hz * 1000000000ull + q % hz * 1000000000ull / hz;
}

void h_sleep_ms(int ms)
{
	Sleep((DWORD)ms);
}
#else
uint64_t h_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void h_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}
#endif

/* ---- Logs ---- */

static void log_push(h_log *l, const tl_completion *c)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 256;
		tl_completion *v = realloc(l->v, (size_t)cap * sizeof *v);
		if (!v) {
			fprintf(stderr, "out of memory in the test log\n");
			abort();
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *c;
}

void h_ctx_init(h_ctx *c, tl_loop *loop)
{
	memset(c, 0, sizeof *c);
	c->loop = loop;
}

void h_ctx_link(h_ctx *a, h_ctx *b)
{
	a->peer = b;
	b->peer = a;
}

void h_ctx_fini(h_ctx *c)
{
	free(c->log.v);
	c->log.v = NULL;
	c->log.n = c->log.cap = 0;
}

static int turn_one(h_ctx *c, int64_t timeout_ns)
{
	tl_completion out[256];
	int n = tl_turn(c->loop, timeout_ns, out, 256, NULL);
	if (n < 0) {
		if (c->turn_errors++ == 0)
			fprintf(stderr, "  [%s] tl_turn failed: %d%s\n", cur_name, n, h_errname(n));
		CU_FAIL("tl_turn returned an error");
		return n;
	}
	for (int i = 0; i < n; i++)
		log_push(&c->log, &out[i]);
	return n;
}

int h_turn(h_ctx *c, int64_t timeout_ns)
{
	if (c->peer && c->peer->loop != c->loop) {
		/* Neither side may sleep long while the other has work. */
		if (timeout_ns < 0 || timeout_ns > (int64_t)H_MS)
			timeout_ns = (int64_t)H_MS;
		int n = turn_one(c, timeout_ns);
		turn_one(c->peer, 0);
		return n;
	}
	return turn_one(c, timeout_ns);
}

int h_until(h_ctx *c, int (*pred)(void *arg), void *arg, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	for (;;) {
		if (pred(arg))
			return 1;
		if (h_wall_ns() >= dl)
			return 0;
		if (h_turn(c, 10 * (int64_t)H_MS) < 0)
			return pred(arg);
	}
}

struct op_arg {
	h_ctx *c;
	tl_op op;
	tl_handle h;
	uint32_t n;
};

static int pred_term(void *p)
{
	struct op_arg *a = p;
	return h_find_term(&a->c->log, a->op) >= 0;
}

static int pred_closed(void *p)
{
	struct op_arg *a = p;
	return h_find_closed(&a->c->log, a->h) >= 0;
}

static int pred_count(void *p)
{
	struct op_arg *a = p;
	return a->c->log.n >= a->n;
}

int h_wait_op_ms(h_ctx *c, tl_op op, int ms)
{
	struct op_arg a = { .c = c, .op = op };
	if (!h_until(c, pred_term, &a, ms)) {
		fprintf(stderr, "  [%s] no terminal completion for op %#llx within %d ms\n",
			cur_name, (unsigned long long)op.v, ms);
		CU_FAIL("terminal completion did not arrive");
		return -1;
	}
	return h_find_term(&c->log, op);
}

int h_wait_op(h_ctx *c, tl_op op)
{
	return h_wait_op_ms(c, op, H_WAIT_MS);
}

int h_wait_closed(h_ctx *c, tl_handle h)
{
	struct op_arg a = { .c = c, .h = h };
	if (!h_until(c, pred_closed, &a, H_WAIT_MS)) {
		fprintf(stderr, "  [%s] no Closed for handle %#llx within %d ms\n", cur_name,
			(unsigned long long)h.v, H_WAIT_MS);
		CU_FAIL("Closed did not arrive");
		return -1;
	}
	return h_find_closed(&c->log, h);
}

int h_wait_count(h_ctx *c, uint32_t n, int ms)
{
	struct op_arg a = { .c = c, .n = n };
	return h_until(c, pred_count, &a, ms);
}

void h_idle(h_ctx *c, int ms)
{
	uint64_t end = tl_now(c->loop) + (uint64_t)ms * H_MS;
	uint64_t dl = h_wall_ns() + (uint64_t)(ms + H_WAIT_MS) * H_MS;
	int turns = 0;
	for (;;) {
		uint64_t now = tl_now(c->loop);
		if ((now >= end && turns >= 2) || h_wall_ns() >= dl)
			break;
		int64_t t = now >= end ? 0 : (int64_t)(end - now);
		if (h_turn(c, t) < 0)
			break;
		turns++;
	}
}

int h_close(h_ctx *c, tl_handle h, uint64_t token)
{
	int rc = tl_close(c->loop, h, token);
	H_EQ(rc, 0);
	if (rc != 0)
		return -1;
	int i = h_wait_closed(c, h);
	if (i >= 0)
		H_EQ(c->log.v[i].token, token);
	return i;
}

int h_find_op(const h_log *l, tl_op op, uint32_t from)
{
	for (uint32_t i = from; i < l->n; i++)
		if (l->v[i].op.v == op.v && l->v[i].kind != TL_K_CLOSED)
			return (int)i;
	return -1;
}

int h_find_term(const h_log *l, tl_op op)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (l->v[i].op.v == op.v && (l->v[i].flags & TL_F_TERMINAL) &&
		    l->v[i].kind != TL_K_CLOSED)
			return (int)i;
	return -1;
}

int h_find_closed(const h_log *l, tl_handle h)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (l->v[i].kind == TL_K_CLOSED && l->v[i].handle.v == h.v)
			return (int)i;
	return -1;
}

uint32_t h_count_op(const h_log *l, tl_op op, uint32_t from)
{
	uint32_t k = 0;
	for (uint32_t i = from; i < l->n; i++)
		k += l->v[i].op.v == op.v && l->v[i].kind != TL_K_CLOSED;
	return k;
}

uint32_t h_count_term(const h_log *l, tl_op op)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < l->n; i++)
		k += l->v[i].op.v == op.v && (l->v[i].flags & TL_F_TERMINAL) &&
		     l->v[i].kind != TL_K_CLOSED;
	return k;
}

uint32_t h_count_handle(const h_log *l, tl_handle h, uint32_t from)
{
	uint32_t k = 0;
	for (uint32_t i = from; i < l->n; i++)
		k += l->v[i].handle.v == h.v;
	return k;
}

uint32_t h_count_kind(const h_log *l, uint16_t kind, uint32_t from)
{
	uint32_t k = 0;
	for (uint32_t i = from; i < l->n; i++)
		k += l->v[i].kind == kind;
	return k;
}

void h_release_leases(h_ctx *c, uint32_t from)
{
	for (uint32_t i = from; i < c->log.n; i++) {
		tl_completion *x = &c->log.v[i];
		if (!(x->flags & TL_F_LEASE))
			continue;
		uint32_t id = x->kind == TL_K_RECV ? x->u.recv.lease.id : x->u.read.lease.id;
		H_EQ(tl_lease_release(c->loop, id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
}

/* ---- Sockets ---- */

void h_loopback(tl_addr *a, int family, uint16_t port)
{
	int rc = tl_addr_parse(a, family == AF_INET6 ? "::1" : "127.0.0.1", port);
	H_EQ_FATAL(rc, 0);
}

int h_listen(h_ctx *c, int family, const tl_listen_opts *o, tl_handle *h, tl_addr *addr)
{
	tl_addr a;
	h_loopback(&a, family, 0);
	int rc = tl_tcp_listen(c->loop, &a, o, h);
	if (rc != 0)
		return rc;
	rc = tl_local_addr(c->loop, *h, addr);
	H_EQ(rc, 0);
	if (rc == 0) {
		H_EQ(addr->sa.sa_family, family);
		H_TRUE(ntohs(addr->in.sin_port) != 0, "listener bound to port 0");
	}
	return rc;
}

struct pair_arg {
	h_ctx *sc, *cc;
	tl_op aop, cop;
};

static int pred_pair(void *p)
{
	struct pair_arg *a = p;
	return h_find_term(&a->sc->log, a->aop) >= 0 && h_find_term(&a->cc->log, a->cop) >= 0;
}

int h_pair(h_ctx *sc, h_ctx *cc, int family, tl_handle *srv, tl_handle *cli)
{
	tl_handle l;
	tl_addr addr;
	int rc = h_listen(sc, family, NULL, &l, &addr);
	H_EQ(rc, 0);
	if (rc != 0)
		return -1;
	struct pair_arg a = { .sc = sc, .cc = cc };
	rc = tl_accept(sc->loop, l, 0x5ec0, &a.aop);
	H_EQ(rc, 0);
	if (rc == 0) {
		rc = tl_tcp_connect(cc->loop, &addr, 0, 0xc0c0, cli, &a.cop);
		H_EQ(rc, 0);
		if (rc != 0)
			tl_cancel(sc->loop, a.aop);
	}
	int ok = rc == 0 && h_until(sc, pred_pair, &a, H_WAIT_MS);
	if (rc == 0 && !ok) {
		fprintf(stderr, "  [%s] pair: accept/connect did not complete\n", cur_name);
		CU_FAIL("pair: accept/connect did not complete");
	}
	if (ok) {
		const tl_completion *x = &sc->log.v[h_find_term(&sc->log, a.aop)];
		const tl_completion *y = &cc->log.v[h_find_term(&cc->log, a.cop)];
		H_EQ(x->kind, TL_K_ACCEPT);
		H_EQ(y->kind, TL_K_CONNECT);
		H_TRUE(x->result >= 0, "accept result %lld%s", (long long)x->result,
		       h_errname(x->result));
		H_EQ(y->result, 0);
		ok = x->result >= 0 && y->result == 0 && x->u.accept.conn.v != 0;
		*srv = x->u.accept.conn;
	}
	h_close(sc, l, 0x1157);
	return ok ? 0 : -1;
}

int64_t h_write_all(h_ctx *c, tl_handle h, const void *buf, uint32_t len)
{
	tl_op op;
	int rc = tl_write(c->loop, h, buf, len, 0x3417e, &op);
	H_EQ(rc, 0);
	if (rc != 0)
		return rc;
	int i = h_wait_op(c, op);
	if (i < 0)
		return -ETIMEDOUT;
	H_EQ(c->log.v[i].kind, TL_K_WRITE);
	return c->log.v[i].result;
}

int64_t h_read_exact(h_ctx *c, tl_handle h, void *buf, uint32_t len, int *eof)
{
	uint32_t got = 0;
	if (eof)
		*eof = 0;
	while (got < len) {
		tl_op op;
		int rc = tl_read(c->loop, h, (uint8_t *)buf + got, len - got, 0x4ead, &op);
		H_EQ(rc, 0);
		if (rc != 0)
			return rc;
		int i = h_wait_op(c, op);
		if (i < 0)
			return -ETIMEDOUT;
		const tl_completion *x = &c->log.v[i];
		H_EQ(x->kind, TL_K_READ);
		if (x->result < 0)
			return x->result;
		if (x->result == 0) {
			H_TRUE(x->flags & TL_F_EOF, "read result 0 without TL_F_EOF");
			if (eof)
				*eof = 1;
			break;
		}
		H_TRUE(x->result <= len - got, "read returned %lld > %u asked",
		       (long long)x->result, len - got);
		got += (uint32_t)x->result;
	}
	return got;
}

int h_addr_eq(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET)
		return a->in.sin_port == b->in.sin_port &&
		       a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
	if (a->sa.sa_family == AF_INET6)
		return a->in6.sin6_port == b->in6.sin6_port &&
		       memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16) == 0;
	return 1;
}

int h_main_table(int argc, char **argv, const char *name, const h_test *tests)
{
	const char *env = getenv("TL_DRIVER");
	tl_loop *l = NULL;
	CU_pSuite suite = NULL;
	const char *cur = NULL;
	int rc, registered = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
#ifndef _WIN32
	signal(SIGPIPE, SIG_IGN);
#endif
	rc = tl_loop_new(&l, NULL);
	if (rc == -ENOTSUP) {
		printf("SKIP all: driver %s unavailable (-ENOTSUP)\n", env ? env : "(default)");
		return 77;
	}
	if (rc != 0) {
		fprintf(stderr, "tl_loop_new failed: %d%s\n", rc, h_errname(rc));
		return 1;
	}
	printf("%s suite: driver %s (TL_DRIVER=%s)\n", name, tl_loop_driver(l), env ? env : "unset");
	tl_loop_close(l);
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	for (int t = 0; tests[t].fn; t++) {
		char full[160];
		int sel = argc < 2;
		snprintf(full, sizeof full, "%s/%s", tests[t].suite, tests[t].name);
		for (int i = 1; i < argc; i++)
			sel |= strstr(full, argv[i]) != NULL;
		if (!sel)
			continue;
		if (!cur || strcmp(cur, tests[t].suite) != 0)
			suite = CU_add_suite(cur = tests[t].suite, NULL, NULL);
		if (!suite || !CU_add_test(suite, tests[t].name, tests[t].fn)) {
			CU_cleanup_registry();
			return 1;
		}
		registered++;
	}
	if (!registered) {
		fprintf(stderr, "no test matches the filter\n");
		CU_cleanup_registry();
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned run = CU_get_number_of_tests_run(), failed = CU_get_number_of_tests_failed();
	unsigned failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	alarm(0);
	printf("\n%s suite (%s): %u run, %u failed (%u failed assertions), %d skipped\n", name,
	       env ? env : "default driver", run, failed, failures, h_skip_count());
	return failed || failures || !run ? 1 : 0;
}
