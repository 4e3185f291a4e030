/* tests/shard_test.h: small helpers shared by the runtime's test programs (mesh, runtime, stats, tlecho --shards); on Linux and, for those built there, on Windows. */
#ifndef TL_TESTS_SHARD_TEST_H
#define TL_TESTS_SHARD_TEST_H

#ifdef _WIN32
#include "os.h" /* before turnloop.h: winsock2.h ahead of windows.h */
#include "win/handles.h"
#else
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "turnloop.h"

/*
 * The programs built for Windows too (tests/meson.build's Windows block,
 * run under wine) find here what POSIX gives them differently: the
 * watchdog is a thread waiting on an event until the test's deadline (no
 * alarm(2)), the descriptor count is the process's handle count
 * (tests/win/handles.h: no /proc; sockets, completion ports, events and
 * thread handles alike), the clock is the platform layer's. A test that
 * needs what Windows has no form of says so with st_skip, on Windows only.
 */

/* Checks made on shard threads: CUnit is not thread-safe, so they count
 * here and the test's own thread asserts the count is 0 (st_end does). */
static atomic_uint st_shard_failures;
#define CHECK_CONTEXT st_current
#define CHECK_FAILED(...) atomic_fetch_add(&st_shard_failures, 1)
#include "check.h"
#define ST_CHECK(cond) CHECK(cond)

/* Per-test watchdog: a hung shard must fail the program, not the CI run. */
#define ST_TIMEOUT_S 60

static const char *st_current = "(setup)";

#ifdef _WIN32
static HANDLE st_dog_event;
static volatile LONG64 st_dog_deadline_ms; /* GetTickCount64 time; 0: disarmed */

static DWORD WINAPI st_dog_main(void *arg)
{
	(void)arg;
	for (;;) {
		LONG64 dl = InterlockedCompareExchange64(&st_dog_deadline_ms, 0, 0);
		ULONGLONG now = GetTickCount64();

		if (dl && (ULONGLONG)dl <= now) {
			fprintf(stderr, "\nWATCHDOG: a test did not finish in time: %s\n", st_current);
			fflush(stderr);
			fflush(stdout);
			/* Not ExitProcess: its DLL detach could wait for a lock
			 * a hung shard holds. */
			TerminateProcess(GetCurrentProcess(), 1);
		}
		WaitForSingleObject(st_dog_event, dl ? (DWORD)((ULONGLONG)dl - now) : INFINITE);
	}
	return 0;
}

static inline void st_alarm(unsigned s)
{
	InterlockedExchange64(&st_dog_deadline_ms,
			      s ? (LONG64)(GetTickCount64() + (ULONGLONG)s * 1000) : 0);
	SetEvent(st_dog_event);
}

static inline int st_warm_launch(tl_shard *s, void *arg)
{
	(void)arg;
	tl_runtime_stop(tl_shard_runtime(s));
	return 0;
}

/* Once, before the first test counts handles: the watchdog's thread and
 * event, Winsock up for the whole run (the IOCP driver's loops start and
 * end it too: without this the count would follow its state), then what
 * the system and libgcc make at their first use and keep, as the contract
 * harness's h_init does: a plain loopback connection made, accepted and
 * read (Winsock keeps a handle after the first), and one runtime of one
 * shard with its stats region started and stopped (emutls: a semaphore at
 * the first thread-local variable, which the shards' threads use; the
 * session's object directory, opened at the first named mapping). */
static inline void st_win_init(void)
{
	static int done;
	WSADATA wd;
	HANDLE th;
	tl_runtime_config c;
	tl_runtime *rt;
	struct sockaddr_in a = {.sin_family = AF_INET};
	int alen = sizeof a;
	SOCKET ls, cs, as;
	char byte;

	if (done)
		return;
	done = 1;
	if (WSAStartup(MAKEWORD(2, 2), &wd) != 0) {
		fprintf(stderr, "WSAStartup failed\n");
		exit(1);
	}
	st_dog_event = CreateEventW(NULL, FALSE, FALSE, NULL);
	th = st_dog_event ? CreateThread(NULL, 0, st_dog_main, NULL, 0, NULL) : NULL;
	if (!th) {
		fprintf(stderr, "the watchdog thread: error %lu\n", GetLastError());
		exit(1);
	}
	CloseHandle(th);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	cs = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 1) == 0 &&
	    getsockname(ls, (struct sockaddr *)&a, &alen) == 0 &&
	    connect(cs, (struct sockaddr *)&a, sizeof a) == 0 &&
	    (as = accept(ls, NULL, NULL)) != INVALID_SOCKET) {
		send(as, "x", 1, 0);
		closesocket(as);
		while (recv(cs, &byte, 1, 0) > 0)
			;
	}
	closesocket(cs);
	closesocket(ls);
	tl_runtime_config_init(&c);
	c.plan.shards = 1;
	c.plan.overcommit = 1;
	c.no_env = 1;
	c.signals = 0;
	c.stats = 1;
	c.on_launch = st_warm_launch;
	if (tl_runtime_new(&rt, &c) != 0 || tl_runtime_run(rt) != 0) {
		fprintf(stderr, "the warm-up runtime: %s\n", tl_error_detail());
		exit(1);
	}
	tl_runtime_destroy(rt);
}

/* Open handles of the process. */
static inline int st_fd_count(void)
{
	return win_handle_count();
}

/* Start a test: name it for the watchdog, arm it, count handles. */
static inline int st_begin(const char *name)
{
	st_win_init();
	st_current = name;
	atomic_store(&st_shard_failures, 0);
	st_alarm(ST_TIMEOUT_S);
	return st_fd_count();
}
#define alarm(s) st_alarm(s)

#else
static inline void st_on_alarm(int sig)
{
	static const char m[] = "\nWATCHDOG: a test did not finish in time: ";
	ssize_t r = write(2, m, sizeof m - 1);

	r = write(2, st_current, strlen(st_current));
	r = write(2, "\n", 1);
	(void)r;
	(void)sig;
	_exit(1);
}

/* Open descriptors of the process. */
static inline int st_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* Start a test: name it for the watchdog, arm it, count descriptors. */
static inline int st_begin(const char *name)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = st_on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	st_current = name;
	atomic_store(&st_shard_failures, 0);
	alarm(ST_TIMEOUT_S);
	return st_fd_count();
}
#endif

/* End a test: the runtime is destroyed by now; no descriptor may leak. */
static inline void st_end(int fds0)
{
	int fds = st_fd_count();

	if (fds != fds0)
		fprintf(stderr, "  [%s] descriptors: %d at start, %d at end\n", st_current, fds0, fds);
	CU_ASSERT_EQUAL(fds, fds0);
	CU_ASSERT_EQUAL(atomic_load(&st_shard_failures), 0);
	alarm(0);
}

/* A runtime config for tests: n shards (more than the CPUs is fine), no
 * environment, no signals, no stats region unless asked. */
static inline void st_config(tl_runtime_config *c, uint32_t shards)
{
	tl_runtime_config_init(c);
	c->plan.shards = shards;
	c->plan.overcommit = 1;
	c->no_env = 1;
	c->signals = 0;
	c->stats = 0;
	c->drain_ns = 3000000000ull;
	/* Tests run more shards than CPUs: a shard waiting for its CPU is not
	 * a stall. The stall test sets its own threshold. */
	c->stall_ns = 0;
}

static inline uint64_t st_now_ns(void)
{
#ifdef _WIN32
	return tl__os_mono_ns();
#else
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Spin, yielding, until *v (a word another thread sets) is at least n, for
 * at most 10 s: 1, or 0 at the deadline, so that under ST_CHECK a hung
 * peer fails the test instead of hanging it. */
static inline int st_spin_until_at_least(atomic_int *v, int n)
{
	uint64_t dl = st_now_ns() + 10ull * 1000000000ull;

	while (atomic_load(v) < n)
		if (st_now_ns() > dl)
			return 0;
#ifdef _WIN32
		else
			tl__os_yield();
#else
		else
			sched_yield();
#endif
	return 1;
}

/* The same for a flag set to 1. */
static inline int st_spin_until(atomic_int *flag)
{
	return st_spin_until_at_least(flag, 1);
}

/*
 * The stop tests' choreography (test_mesh_compose's *_stop tests,
 * test_foreign's stop), on two shards: in its on_stop, shard 0 sends work
 * to shard 1 (the test's send), and shard 1 runs that work only after its
 * mesh closed. A test keeps an st_stop_dance in its state, zeroed with it,
 * and its own checks.
 */
struct st_stop_dance {
	atomic_int one_stopping, sent, zero_waits;
	void (*send)(tl_shard *s); /* shard 0's sending work, in its on_stop */
};

static inline int st_dance_pass(tl_shard *s, void *arg)
{
	struct st_stop_dance *d = arg;

	if (tl_shard_id(s) != 0)
		return 0;
	/* After on_stop (drain_ns of 1 ns: shard 0 is done at once, its work
	 * on 1 still out), each pass is one while waiting for shard 1. */
	if (atomic_load(&d->sent))
		atomic_store(&d->zero_waits, 1);
	tl_runtime_stop(tl_shard_runtime(s));
	return 0;
}

static inline void st_dance_stop(tl_shard *s, void *arg)
{
	struct st_stop_dance *d = arg;

	if (tl_shard_id(s) == 0) {
		/* Shard 1 is inside its on_stop, so no pass of it can run the
		 * work before its mesh closes. */
		ST_CHECK(st_spin_until(&d->one_stopping));
		d->send(s);
		atomic_store(&d->sent, 1);
	} else {
		/* Shard 1 does not pass again before the mesh closes: the
		 * work runs at the last delivery. */
		atomic_store(&d->one_stopping, 1);
		ST_CHECK(st_spin_until(&d->zero_waits));
	}
}

/* The dance on cfg (st_config's, two shards): drain_ns of 1 ns, on_pass
 * and on_stop with d as their arg, send as shard 0's work. */
static inline void st_stop_dance_config(tl_runtime_config *cfg, struct st_stop_dance *d,
					void (*send)(tl_shard *s))
{
	d->send = send;
	cfg->drain_ns = 1;
	cfg->on_pass = st_dance_pass;
	cfg->on_stop = st_dance_stop;
	cfg->arg = d;
}

/* Only tests whose name contains $TL_TEST are registered (all without it). */
static inline void st_add(CU_pSuite s, const char *name, CU_TestFunc fn)
{
	const char *only = getenv("TL_TEST");

	if (!only || !*only || strstr(name, only))
		CU_add_test(s, name, fn);
}

/* Run a CUnit registry built by the caller; exit status for meson. */
/* Record that the current test did not run its check, with the reason
 * (a line "SKIP name: why", which tools/check lists at its end). */
static inline void st_skip(const char *why)
{
	printf("\nSKIP %s: %s\n", st_current, why);
	fflush(stdout);
}

static inline int st_run(void)
{
	unsigned failed;

	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}

#endif /* TL_TESTS_SHARD_TEST_H */
