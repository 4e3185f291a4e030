/* tests/test_error.c: tl_strerror names the OS meaning of a code first and turnloop's own after it, for every code of the table. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <CUnit/Basic.h>
#include "turnloop.h"

/* Every code turnloop gives a meaning of its own (turnloop/error.h). */
static const int ours[] = {-EINVAL, -ENOENT, -EALREADY, -ENOBUFS, -EAGAIN, -ECANCELED,
			   -ETIMEDOUT, -ENOTSUP, -EPIPE, -EBUSY};

static void test_os_meaning_first(void)
{
	for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
		const char *s = tl_strerror(ours[i]), *os = strerror(-ours[i]);
		if (strncmp(s, os, strlen(os)) != 0)
			fprintf(stderr, "  %d: \"%s\" does not start with \"%s\"\n", ours[i], s, os);
		CU_ASSERT_EQUAL(strncmp(s, os, strlen(os)), 0);
	}
	/* A write's -EPIPE reads as what it is. */
	CU_ASSERT_EQUAL(strncmp(tl_strerror(-EPIPE), "Broken pipe", 11), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_strerror(-EPIPE), "endpoint closed"));
}

static void test_other_codes(void)
{
	CU_ASSERT_STRING_EQUAL(tl_strerror(-ECONNRESET), strerror(ECONNRESET));
	CU_ASSERT_STRING_EQUAL(tl_strerror(0), "Success");
	CU_ASSERT_STRING_EQUAL(tl_strerror(5), "not an error code");
	CU_ASSERT_PTR_NOT_NULL(tl_strerror(-100000));
}

int main(void)
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("error", NULL, NULL);
	if (!s || !CU_add_test(s, "os_meaning_first", test_os_meaning_first) ||
	    !CU_add_test(s, "other_codes", test_other_codes))
		return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned f = CU_get_number_of_failures();
	CU_cleanup_registry();
	return f ? 1 : 0;
}
