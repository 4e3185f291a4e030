/* tests/shard_test.h: small helpers shared by the runtime's test programs (mesh, runtime, stats, tlecho --shards). */
#ifndef TL_TESTS_SHARD_TEST_H
#define TL_TESTS_SHARD_TEST_H

#include <dirent.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "turnloop.h"

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
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
