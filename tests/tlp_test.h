/* tests/tlp_test.h: the frame of tlproxy's module tests: assertions that print what they saw, file reading, and a CUnit main. */
#ifndef TLP_TEST_H
#define TLP_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "check.h"

/* The assertions, under this frame's names (tests/check.h). */
#define T_EQ CHECK_EQ
#define T_STR CHECK_STR
#define T_TRUE CHECK_TRUE

static inline int tlp_has(const char *s, const char *sub)
{
	return s && strstr(s, sub);
}

static inline const char *tlp_or_empty(const char *s)
{
	return s ? s : "";
}

/* s contains sub. */
#define T_HAS(s, sub) T_TRUE(tlp_has((s), (sub)), "\"%s\" lacks \"%s\"", tlp_or_empty(s), (sub))

struct tlp_case {
	const char *name;
	CU_TestFunc fn;
};

/* Read a whole file into a malloc'ed buffer; NULL if it cannot. */
static inline unsigned char *tlp_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (b = malloc((size_t)n + 1)) && fread(b, 1, (size_t)n, f) == (size_t)n) {
		b[n] = 0;
		*len = (size_t)n;
	} else {
		free(b);
		b = NULL;
	}
	fclose(f);
	return b;
}

/* Run the cases as one suite; exit status 0 only if all passed. */
static inline int tlp_test_main(const char *suite_name, const struct tlp_case *cases, size_t n)
{
	CU_pSuite suite;
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite(suite_name, NULL, NULL);
	if (!suite)
		goto fail;
	for (size_t i = 0; i < n; i++)
		if (!CU_add_test(suite, cases[i].name, cases[i].fn))
			goto fail;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS)
		goto fail;
	failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	return failures ? 1 : 0;
fail:
	CU_cleanup_registry();
	return 1;
}

#endif /* TLP_TEST_H */
