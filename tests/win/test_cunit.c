/* tests/win/test_cunit.c: the Windows build's CUnit stand-in keeps CUnit's word: a failed check fails its test and counts, a fatal one ends the test there, a passing one counts nothing, and a suite whose set-up fails fails the run, and a crash ends the program with a failure. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <windows.h>

#include <CUnit/Basic.h>

#include "check.h"

static int after_fatal, ran_second;

static void pass_all(void)
{
	CHECK_EQ(-2, -2);
	CHECK_EQ_FATAL(7, 7);
	CHECK_STR("a", "a");
	CHECK_STR(NULL, NULL);
	CHECK_TRUE(1);
	CHECK_TRUE_FATAL(2 > 1, "with a message %d", 3);
	CU_ASSERT_EQUAL(1, 1);
	CU_ASSERT_PTR_NULL(NULL);
	CU_ASSERT_STRING_EQUAL("x", "x");
}

static void fail_twice(void)
{
	CHECK_EQ(-2, 0);
	CHECK_STR("a", "b");
}

static void fail_fatal(void)
{
	CHECK_EQ_FATAL(1, 2);
	after_fatal = 1;
}

static void runs_after_fatal(void)
{
	ran_second = 1;
	CU_ASSERT_TRUE(CU_get_current_test() != NULL);
}

static int init_fails(void)
{
	return -1;
}

static void never_runs(void)
{
	ran_second = 2;
}

static volatile uintptr_t bad_address = 16;

static void crashes(void)
{
	*(volatile int *)bad_address = 1; /* a page fault */
}

static int failures;
#define EXPECT(cond)                                                              \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "test_cunit: not (%s), line %d\n", #cond, __LINE__); \
			failures++;                                               \
		}                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "crash")) { /* the child of the last check */
		CU_initialize_registry();
		CU_pSuite cs = CU_add_suite("crashing", NULL, NULL);
		CU_add_test(cs, "crashes", crashes);
		CU_basic_run_tests();
		return 0; /* never reached: the crash ends the process with 3 */
	}
	EXPECT(CU_initialize_registry() == CUE_SUCCESS);
	CU_pSuite s = CU_add_suite("passing", NULL, NULL);
	EXPECT(s && CU_add_test(s, "pass_all", pass_all));
	CU_basic_set_mode(CU_BRM_VERBOSE);
	EXPECT(CU_basic_run_tests() == CUE_SUCCESS);
	EXPECT(CU_get_number_of_tests_run() == 1);
	EXPECT(CU_get_number_of_tests_failed() == 0);
	EXPECT(CU_get_number_of_failures() == 0);
	CU_cleanup_registry();

	fprintf(stderr, "test_cunit: the failures printed next are expected\n");
	EXPECT(CU_initialize_registry() == CUE_SUCCESS);
	s = CU_add_suite("failing", NULL, NULL);
	EXPECT(s && CU_add_test(s, "fail_twice", fail_twice) && CU_add_test(s, "fail_fatal", fail_fatal) &&
	       CU_add_test(s, "runs_after_fatal", runs_after_fatal));
	CU_pSuite bad = CU_add_suite("init_fails", init_fails, NULL);
	EXPECT(bad && CU_add_test(bad, "never_runs", never_runs));
	CU_basic_run_tests();
	EXPECT(CU_get_number_of_tests_run() == 3);
	EXPECT(CU_get_number_of_tests_failed() == 2);
	/* Two failed checks, one fatal one, one suite that could not start. */
	EXPECT(CU_get_number_of_failures() == 4);
	EXPECT(after_fatal == 0);
	EXPECT(ran_second == 1);
	EXPECT(CU_get_current_test() == NULL && CU_get_current_suite() == NULL);
	CU_cleanup_registry();

	/* A crash in a test ends its program with a failure, not 0. */
	char cmd[MAX_PATH + 16];
	snprintf(cmd, sizeof cmd, "\"%s\" crash", argv[0]);
	STARTUPINFOA si = {.cb = sizeof si};
	PROCESS_INFORMATION pi;
	DWORD code = 0;
	EXPECT(CreateProcessA(NULL, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
	if (WaitForSingleObject(pi.hProcess, 15000) != WAIT_OBJECT_0) { /* a hang fails too */
		fprintf(stderr, "test_cunit: the crashing child did not end in 15 s\n");
		TerminateProcess(pi.hProcess, 1);
		WaitForSingleObject(pi.hProcess, 5000);
	}
	GetExitCodeProcess(pi.hProcess, &code);
	CloseHandle(pi.hProcess);
	CloseHandle(pi.hThread);
	EXPECT(code == 3);
	if (!failures)
		printf("test_cunit: the stand-in records, stops and counts as CUnit does\n");
	/* Ended here rather than by returning: under wine, on a wineserver
	 * started moments before, the exit after a child that crashed could
	 * wait past the test's timeout (seen in the test command's first runs). */
	fflush(stdout);
	fflush(stderr);
	TerminateProcess(GetCurrentProcess(), failures ? 1 : 0);
	return failures ? 1 : 0;
}
