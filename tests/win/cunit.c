/* tests/win/cunit.c: the Windows build's stand-in for CUnit (CUnit/CUnit.h says why). */
#include "CUnit/Basic.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

static CU_pSuite suites, suites_last;
static CU_pSuite cur_suite;
static CU_pTest cur_test;
static CU_BasicRunMode mode = CU_BRM_NORMAL;
static unsigned n_failures, n_tests_failed, n_tests_run, cur_failures;
static jmp_buf test_exit;
static int registry_up;

static char *dup_name(const char *s)
{
	size_t n = strlen(s ? s : "") + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s ? s : "", n);
	return d;
}

/* A crash fails the run: under wine an unhandled exception goes to its
 * debugger, and the process may still exit 0 (seen: a page fault in a
 * test, then a passing run). The exception is named, the process ends with
 * 3, as abort() does. */
static LONG WINAPI on_crash(EXCEPTION_POINTERS *e)
{
	fprintf(stderr, "CRASH in %s/%s: exception 0x%08lx at %p\n", cur_suite ? cur_suite->pName : "?",
		cur_test ? cur_test->pName : "?", (unsigned long)e->ExceptionRecord->ExceptionCode,
		e->ExceptionRecord->ExceptionAddress);
	fflush(stderr);
	TerminateProcess(GetCurrentProcess(), 3);
	return EXCEPTION_EXECUTE_HANDLER;
}

CU_ErrorCode CU_initialize_registry(void)
{
	SetUnhandledExceptionFilter(on_crash);
	if (registry_up)
		CU_cleanup_registry();
	registry_up = 1;
	n_failures = n_tests_failed = n_tests_run = 0;
	return CUE_SUCCESS;
}

void CU_cleanup_registry(void)
{
	while (suites) {
		CU_pSuite s = suites;
		suites = s->pNext;
		while (s->pTest) {
			CU_pTest t = s->pTest;
			s->pTest = t->pNext;
			free(t->pName);
			free(t);
		}
		free(s->pName);
		free(s);
	}
	suites_last = NULL;
	registry_up = 0;
}

CU_pSuite CU_add_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc clean)
{
	if (!registry_up)
		return NULL;
	CU_pSuite s = calloc(1, sizeof *s);
	if (!s || !(s->pName = dup_name(name))) {
		free(s);
		return NULL;
	}
	s->pInitializeFunc = init;
	s->pCleanupFunc = clean;
	if (suites_last)
		suites_last->pNext = s;
	else
		suites = s;
	suites_last = s;
	return s;
}

CU_pTest CU_add_test(CU_pSuite suite, const char *name, CU_TestFunc fn)
{
	if (!suite || !fn)
		return NULL;
	CU_pTest t = calloc(1, sizeof *t);
	if (!t || !(t->pName = dup_name(name))) {
		free(t);
		return NULL;
	}
	t->pTestFunc = fn;
	if (suite->pLast)
		suite->pLast->pNext = t;
	else
		suite->pTest = t;
	suite->pLast = t;
	return t;
}

CU_pSuite CU_get_current_suite(void)
{
	return cur_suite;
}

CU_pTest CU_get_current_test(void)
{
	return cur_test;
}

unsigned int CU_get_number_of_failures(void)
{
	return n_failures;
}

unsigned int CU_get_number_of_tests_failed(void)
{
	return n_tests_failed;
}

unsigned int CU_get_number_of_tests_run(void)
{
	return n_tests_run;
}

CU_BOOL CU_assertImplementation(CU_BOOL value, unsigned int line, const char *condition,
				const char *file, const char *function, CU_BOOL fatal)
{
	(void)function;
	if (value)
		return CU_TRUE;
	n_failures++;
	cur_failures++;
	fprintf(stderr, "    FAILED %s/%s: %s:%u: %s\n", cur_suite ? cur_suite->pName : "?",
		cur_test ? cur_test->pName : "?", file, line, condition);
	if (fatal && cur_test)
		longjmp(test_exit, 1);
	return CU_FALSE;
}

void CU_basic_set_mode(CU_BasicRunMode m)
{
	mode = m;
}

/* One test, ended early by a failed fatal assertion's longjmp (a frame of
 * its own, so that no local of the caller's lives across the jump). */
static __attribute__((noinline)) void run_one(CU_TestFunc fn)
{
	if (!setjmp(test_exit))
		fn();
}

CU_ErrorCode CU_basic_run_tests(void)
{
	if (!registry_up)
		return CUE_NOREGISTRY;
	n_failures = n_tests_failed = n_tests_run = 0;
	unsigned suites_failed = 0;
	for (CU_pSuite s = suites; s; s = s->pNext) {
		cur_suite = s;
		if (s->pInitializeFunc && s->pInitializeFunc() != 0) {
			fprintf(stderr, "suite %s: its set-up failed; its tests did not run\n", s->pName);
			suites_failed++;
			continue;
		}
		if (mode == CU_BRM_VERBOSE)
			printf("Suite: %s\n", s->pName);
		for (CU_pTest t = s->pTest; t; t = t->pNext) {
			cur_test = t;
			cur_failures = 0;
			if (mode == CU_BRM_VERBOSE) {
				printf("  Test: %s ...", t->pName);
				fflush(stdout);
			}
			run_one(t->pTestFunc);
			n_tests_run++;
			if (cur_failures)
				n_tests_failed++;
			if (mode == CU_BRM_VERBOSE)
				printf("%s\n", cur_failures ? "FAILED" : "passed");
			fflush(stdout);
		}
		cur_test = NULL;
		if (s->pCleanupFunc && s->pCleanupFunc() != 0) {
			fprintf(stderr, "suite %s: its clean-up failed\n", s->pName);
			suites_failed++;
		}
	}
	cur_suite = NULL;
	/* A suite whose set-up or clean-up failed fails the run as CUnit's does. */
	n_failures += suites_failed;
	if (mode != CU_BRM_SILENT)
		printf("\nRun Summary: tests %u run, %u failed; asserts failed %u\n", n_tests_run,
		       n_tests_failed, n_failures);
	return CUE_SUCCESS;
}
