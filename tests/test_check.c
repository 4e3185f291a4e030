/* tests/test_check.c: tests/check.h keeps its word: each failed check fails its test (a CUnit run that exits 1, an abort, a count the suite asserts), each passing one does not. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

#include <CUnit/Basic.h>

#include "check.h"

/* ---- the cases a child runs under a CUnit registry of its own ---- */

static void pass_all(void)
{
	CHECK_EQ(-2, -2);
	CHECK_EQ_FATAL(7, 7);
	CHECK_STR("a", "a");
	CHECK_STR(NULL, NULL);
	CHECK_TRUE(1);
	CHECK_TRUE(2 > 1, "with a message %d", 3);
	CHECK_TRUE_FATAL(1);
}

static void fail_eq(void)
{
	CHECK_EQ(-2, 0); /* prints got -2 (-ENOENT) */
}

static void fail_str(void)
{
	CHECK_STR("a", "b");
}

static void fail_str_null(void)
{
	CHECK_STR(NULL, "b");
}

static void fail_true(void)
{
	CHECK_TRUE(1 > 2, "one is not more than %d", 2);
}

static int after_fatal;

static void fail_fatal(void)
{
	CHECK_EQ_FATAL(1, 2);
	after_fatal = 1; /* not reached: a fatal check ends the test */
}

/* Run one case as a suite of one in a child: its exit status (0 no
 * failure, 1 a failure, 2 the registry could not be built, 3 a fatal
 * check let the test go on). */
static int run_child(const char *name, CU_TestFunc fn)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (CU_initialize_registry() != CUE_SUCCESS)
			_exit(2);
		CU_pSuite s = CU_add_suite("check", NULL, NULL);
		if (!s || !CU_add_test(s, name, fn))
			_exit(2);
		CU_basic_set_mode(CU_BRM_SILENT);
		CU_basic_run_tests();
		unsigned failures = CU_get_number_of_failures();
		CU_cleanup_registry();
		_exit(after_fatal ? 3 : failures ? 1 : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* CHECK as a fuzzer uses it: abort() by default. */
static void check_aborts(int ok)
{
	CHECK(ok, "ok is %d", ok);
}

/* CHECK as shard threads use it: counted for the suite to assert. */
static unsigned counted;
#undef CHECK_FAILED
#define CHECK_FAILED(...) (counted++)

static void check_counts(int ok)
{
	CHECK(ok);
}

/* Run check_aborts(ok) in a child: its status as run_child's. */
static int run_abort_child(int ok)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		check_aborts(ok);
		_exit(0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	int bad = 0;
	struct {
		const char *name;
		CU_TestFunc fn;
		int want;
	} cases[] = {
		{"pass_all", pass_all, 0},         {"fail_eq", fail_eq, 1},
		{"fail_str", fail_str, 1},         {"fail_str_null", fail_str_null, 1},
		{"fail_true", fail_true, 1},       {"fail_fatal", fail_fatal, 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (cases[i].want)
			fprintf(stderr, "expected failure of %s:\n", cases[i].name);
		int got = run_child(cases[i].name, cases[i].fn);
		if (got != cases[i].want) {
			fprintf(stderr, "FAIL %s: the child exited %d, want %d\n", cases[i].name, got,
				cases[i].want);
			bad++;
		}
	}
	fprintf(stderr, "expected failure of CHECK (abort):\n");
	int got = run_abort_child(0);
	if (got != 128 + SIGABRT) {
		fprintf(stderr, "FAIL CHECK(0): the child ended with %d, want SIGABRT\n", got);
		bad++;
	}
	if ((got = run_abort_child(1)) != 0) {
		fprintf(stderr, "FAIL CHECK(1): the child ended with %d, want 0\n", got);
		bad++;
	}
	fprintf(stderr, "expected failure of CHECK (counted):\n");
	check_counts(1);
	check_counts(0);
	if (counted != 1) {
		fprintf(stderr, "FAIL CHECK with a count: %u counted, want 1\n", counted);
		bad++;
	}
	fprintf(stderr, "%s\n", bad ? "check.h: FAILED" : "check.h: every check kept its word");
	return bad ? 1 : 0;
}
