/*
 * tests/win/CUnit/CUnit.h: the part of CUnit's API the test programs use,
 * for the Windows build only. Debian builds CUnit for Linux, not for
 * mingw-w64, so the Windows tests compile against this stand-in
 * (tests/win/cunit.c): same names, same meaning (an assertion records a
 * failure; a fatal one also ends the test; a test with a failed assertion
 * is a failed test), no XML, console or automated modes.
 */
#ifndef TL_TESTS_WIN_CUNIT_H
#define TL_TESTS_WIN_CUNIT_H

#include <string.h>

typedef int CU_BOOL;
#define CU_TRUE 1
#define CU_FALSE 0

typedef enum { CUE_SUCCESS = 0, CUE_NOMEMORY = 1, CUE_NOREGISTRY = 10, CUE_NOSUITE = 20,
	       CUE_NOTEST = 30 } CU_ErrorCode;

typedef void (*CU_TestFunc)(void);
typedef int (*CU_InitializeFunc)(void);
typedef int (*CU_CleanupFunc)(void);

typedef struct CU_Test {
	char *pName;
	CU_TestFunc pTestFunc;
	struct CU_Test *pNext;
} CU_Test, *CU_pTest;

typedef struct CU_Suite {
	char *pName;
	CU_InitializeFunc pInitializeFunc;
	CU_CleanupFunc pCleanupFunc;
	CU_pTest pTest, pLast;
	struct CU_Suite *pNext;
} CU_Suite, *CU_pSuite;

/* The registry: made once, freed once. */
CU_ErrorCode CU_initialize_registry(void);
void CU_cleanup_registry(void);
/* A suite (NULL on no memory) and a test in it (NULL likewise). */
CU_pSuite CU_add_suite(const char *name, CU_InitializeFunc init, CU_CleanupFunc clean);
CU_pTest CU_add_test(CU_pSuite suite, const char *name, CU_TestFunc fn);
/* The suite and test running now, NULL outside a run. */
CU_pSuite CU_get_current_suite(void);
CU_pTest CU_get_current_test(void);
/* Counts of the last run: failed assertions, failed tests, tests run. */
unsigned int CU_get_number_of_failures(void);
unsigned int CU_get_number_of_tests_failed(void);
unsigned int CU_get_number_of_tests_run(void);

/* Record one assertion's result; a failed fatal one ends the running test. */
CU_BOOL CU_assertImplementation(CU_BOOL value, unsigned int line, const char *condition,
				const char *file, const char *function, CU_BOOL fatal);

#define CU_ASSERT_IMPL_(v, text, fatal)                                                        \
	CU_assertImplementation(!!(v), __LINE__, text, __FILE__, "", fatal)
#define CU_ASSERT(v) (void)CU_ASSERT_IMPL_(v, #v, CU_FALSE)
#define CU_ASSERT_FATAL(v) (void)CU_ASSERT_IMPL_(v, #v, CU_TRUE)
#define CU_TEST(v) CU_ASSERT(v)
#define CU_TEST_FATAL(v) CU_ASSERT_FATAL(v)
#define CU_FAIL(msg) (void)CU_ASSERT_IMPL_(0, "CU_FAIL(" #msg ")", CU_FALSE)
#define CU_FAIL_FATAL(msg) (void)CU_ASSERT_IMPL_(0, "CU_FAIL_FATAL(" #msg ")", CU_TRUE)
#define CU_ASSERT_TRUE(v) (void)CU_ASSERT_IMPL_(v, "CU_ASSERT_TRUE(" #v ")", CU_FALSE)
#define CU_ASSERT_TRUE_FATAL(v) (void)CU_ASSERT_IMPL_(v, "CU_ASSERT_TRUE_FATAL(" #v ")", CU_TRUE)
#define CU_ASSERT_FALSE(v) (void)CU_ASSERT_IMPL_(!(v), "CU_ASSERT_FALSE(" #v ")", CU_FALSE)
#define CU_ASSERT_FALSE_FATAL(v) (void)CU_ASSERT_IMPL_(!(v), "CU_ASSERT_FALSE_FATAL(" #v ")", CU_TRUE)
#define CU_ASSERT_EQUAL(a, b) (void)CU_ASSERT_IMPL_((a) == (b), "CU_ASSERT_EQUAL(" #a "," #b ")", CU_FALSE)
#define CU_ASSERT_EQUAL_FATAL(a, b)                                                            \
	(void)CU_ASSERT_IMPL_((a) == (b), "CU_ASSERT_EQUAL_FATAL(" #a "," #b ")", CU_TRUE)
#define CU_ASSERT_NOT_EQUAL(a, b)                                                              \
	(void)CU_ASSERT_IMPL_((a) != (b), "CU_ASSERT_NOT_EQUAL(" #a "," #b ")", CU_FALSE)
#define CU_ASSERT_NOT_EQUAL_FATAL(a, b)                                                        \
	(void)CU_ASSERT_IMPL_((a) != (b), "CU_ASSERT_NOT_EQUAL_FATAL(" #a "," #b ")", CU_TRUE)
#define CU_ASSERT_PTR_EQUAL(a, b)                                                              \
	(void)CU_ASSERT_IMPL_((const void *)(a) == (const void *)(b),                          \
			      "CU_ASSERT_PTR_EQUAL(" #a "," #b ")", CU_FALSE)
#define CU_ASSERT_PTR_NULL(p) (void)CU_ASSERT_IMPL_((p) == NULL, "CU_ASSERT_PTR_NULL(" #p ")", CU_FALSE)
#define CU_ASSERT_PTR_NULL_FATAL(p)                                                            \
	(void)CU_ASSERT_IMPL_((p) == NULL, "CU_ASSERT_PTR_NULL_FATAL(" #p ")", CU_TRUE)
#define CU_ASSERT_PTR_NOT_NULL(p)                                                              \
	(void)CU_ASSERT_IMPL_((p) != NULL, "CU_ASSERT_PTR_NOT_NULL(" #p ")", CU_FALSE)
#define CU_ASSERT_PTR_NOT_NULL_FATAL(p)                                                        \
	(void)CU_ASSERT_IMPL_((p) != NULL, "CU_ASSERT_PTR_NOT_NULL_FATAL(" #p ")", CU_TRUE)
#define CU_ASSERT_STRING_EQUAL(a, b)                                                           \
	(void)CU_ASSERT_IMPL_(!strcmp((const char *)(a), (const char *)(b)),                   \
			      "CU_ASSERT_STRING_EQUAL(" #a "," #b ")", CU_FALSE)
#define CU_ASSERT_STRING_EQUAL_FATAL(a, b)                                                     \
	(void)CU_ASSERT_IMPL_(!strcmp((const char *)(a), (const char *)(b)),                   \
			      "CU_ASSERT_STRING_EQUAL_FATAL(" #a "," #b ")", CU_TRUE)

#endif
