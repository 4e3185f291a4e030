/* tests/tlp_test.h: the frame of tlproxy's module tests: assertions that print what they saw, file reading, and a CUnit main. */
#ifndef TLP_TEST_H
#define TLP_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

/* got == want (as long long), printing both when not. */
#define T_EQ(got, want)                                                                     \
	do {                                                                                \
		long long g_ = (long long)(got), w_ = (long long)(want);                    \
		if (g_ != w_)                                                               \
			fprintf(stderr, "  %s:%d: %s = %lld, want %s = %lld\n", __FILE__,   \
				__LINE__, #got, g_, #want, w_);                             \
		CU_assertImplementation(g_ == w_, __LINE__, "T_EQ(" #got ", " #want ")",    \
					__FILE__, "", CU_FALSE);                            \
	} while (0)

/* Strings equal (either may be NULL), printing both when not. */
#define T_STR(got, want)                                                                    \
	do {                                                                                \
		const char *g_ = (got), *w_ = (want);                                       \
		int ok_ = (!g_ && !w_) || (g_ && w_ && !strcmp(g_, w_));                    \
		if (!ok_)                                                                   \
			fprintf(stderr, "  %s:%d: %s = \"%s\", want \"%s\"\n", __FILE__,    \
				__LINE__, #got, g_ ? g_ : "(null)", w_ ? w_ : "(null)");    \
		CU_assertImplementation(ok_, __LINE__, "T_STR(" #got ", " #want ")",        \
					__FILE__, "", CU_FALSE);                            \
	} while (0)

/* A condition, with a printf-style message when it fails. */
#define T_TRUE(cond, ...)                                                                   \
	do {                                                                                \
		int c_ = !!(cond);                                                          \
		if (!c_) {                                                                  \
			fprintf(stderr, "  %s:%d: not (%s): ", __FILE__, __LINE__, #cond);  \
			fprintf(stderr, __VA_ARGS__);                                       \
			fputc('\n', stderr);                                                \
		}                                                                           \
		CU_assertImplementation(c_, __LINE__, #cond, __FILE__, "", CU_FALSE);       \
	} while (0)

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
