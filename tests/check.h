/* tests/check.h: the one set of assertions every C test uses, under CUnit (CHECK_EQ, CHECK_STR, CHECK_TRUE, and _FATAL forms) and outside it (CHECK: fuzzers, the model, child processes, shard threads), each printing what it saw and where. */
#ifndef TL_TESTS_CHECK_H
#define TL_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

/*
 * Two kinds, one report. A CUnit check records its result with CUnit
 * (CU_assertImplementation), so a failed one fails the program's run of
 * the suite, and prints what it saw first. CHECK is for code CUnit cannot
 * watch (it is not thread-safe, and fuzzers and child processes have no
 * suite): it prints, then runs CHECK_FAILED, which a file may define before
 * it includes this header to say what failing means there; abort() by
 * default. Whatever it does must make the test fail: return an exit code
 * the parent checks, record the failure for the run's verdict, or count it
 * for the suite's own thread to assert.
 *
 * CHECK_CONTEXT, likewise defined before the include, names the test
 * running (an expression of type const char *, NULL for none); it is
 * printed in brackets.
 */
#ifndef CHECK_CONTEXT
#define CHECK_CONTEXT ((const char *)NULL)
#endif
#ifndef CHECK_FAILED
#define CHECK_FAILED(...) abort()
#endif

/* The reporters are out of line (and static, so each test program has its
 * own): inlined into every check, they let GCC carry a checked value's
 * range into the test's code and raise false -Wstringop-overflow warnings
 * there; and they run only on a failure. */
#define CHECK_REPORTER_ __attribute__((unused, noinline, cold))

/* The printf archetype of the reporters' formats: on mingw-w64, "printf"
 * means msvcrt's (no %zu, %hhu); a program built with
 * __USE_MINGW_ANSI_STDIO=1 has C99's, so GCC checks C99's. */
#if defined(_WIN32) && defined(__USE_MINGW_ANSI_STDIO) && __USE_MINGW_ANSI_STDIO
#define CHECK_PRINTF_ gnu_printf
#else
#define CHECK_PRINTF_ printf
#endif

/* " (-ENOENT)" for a negative errno in -4095..-1, "" otherwise: for
 * messages (of failures, and of skips). The last four results stay valid. */
__attribute__((unused, noinline)) static const char *check_errname(long long v)
{
	static __thread char buf[4][64];
	static __thread unsigned k;
	if (v >= 0 || v < -4095)
		return "";
	char *b = buf[k++ & 3];
#ifdef _WIN32
	/* The C runtime names no errno values; tl_strerror's words are in the failure's own line. */
	snprintf(b, sizeof buf[0], " (-errno %lld)", -v);
#else
	const char *name = strerrorname_np((int)-v);
	snprintf(b, sizeof buf[0], " (-%s)", name ? name : "?");
#endif
	return b;
}

/* The start of a failure's line: "  file:line: [context] ". */
CHECK_REPORTER_ static void check_where_(const char *ctx, const char *file, int line)
{
	if (ctx)
		fprintf(stderr, "  %s:%d: [%s] ", file, line, ctx);
	else
		fprintf(stderr, "  %s:%d: ", file, line);
}

/* The rest of it: a message (its format starts with a space), and the end
 * of the line. */
CHECK_REPORTER_ __attribute__((format(CHECK_PRINTF_, 1, 2))) static void check_say_(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

CHECK_REPORTER_ static void check_report_eq_(const char *ctx, const char *file, int line,
					     const char *gexpr, long long got, const char *wexpr,
					     long long want)
{
	check_where_(ctx, file, line);
	fprintf(stderr, "%s = %lld%s, want %s = %lld%s\n", gexpr, got, check_errname(got), wexpr,
		want, check_errname(want));
}

/* ---- under CUnit ---- */

#define CHECK_EQ_(got, want, fatal)                                                              \
	do {                                                                                     \
		long long g_ = (long long)(got), w_ = (long long)(want);                         \
		if (g_ != w_)                                                                    \
			check_report_eq_(CHECK_CONTEXT, __FILE__, __LINE__, #got, g_, #want, w_); \
		CU_assertImplementation(g_ == w_, __LINE__, "CHECK_EQ(" #got ", " #want ")",     \
					__FILE__, "", fatal);                                    \
	} while (0)
/* got == want (as long long), printing both (and errno names) when not. */
#define CHECK_EQ(got, want) CHECK_EQ_(got, want, CU_FALSE)
/* The same, and the test stops there when not. */
#define CHECK_EQ_FATAL(got, want) CHECK_EQ_(got, want, CU_TRUE)

/* Strings equal (either may be NULL), printing both when not. */
#define CHECK_STR(got, want)                                                                     \
	do {                                                                                     \
		const char *g_ = (got), *w_ = (want);                                            \
		int ok_ = (!g_ && !w_) || (g_ && w_ && !strcmp(g_, w_));                         \
		if (!ok_) {                                                                      \
			check_where_(CHECK_CONTEXT, __FILE__, __LINE__);                         \
			fprintf(stderr, "%s = \"%s\", want \"%s\"\n", #got, g_ ? g_ : "(null)",  \
				w_ ? w_ : "(null)");                                             \
		}                                                                                \
		CU_assertImplementation(ok_, __LINE__, "CHECK_STR(" #got ", " #want ")",         \
					__FILE__, "", CU_FALSE);                                 \
	} while (0)

#define CHECK_TRUE_(fatal, cond, ...)                                                            \
	do {                                                                                     \
		int c_ = !!(cond);                                                               \
		if (!c_) {                                                                       \
			check_where_(CHECK_CONTEXT, __FILE__, __LINE__);                         \
			fprintf(stderr, "not (%s):", #cond);                                     \
			check_say_(" " __VA_ARGS__);                                             \
		}                                                                                \
		CU_assertImplementation(c_, __LINE__, #cond, __FILE__, "", fatal);               \
	} while (0)
/* A condition, with an optional printf-style message when it fails. */
#define CHECK_TRUE(cond, ...) CHECK_TRUE_(CU_FALSE, cond, __VA_ARGS__)
#define CHECK_TRUE_FATAL(cond, ...) CHECK_TRUE_(CU_TRUE, cond, __VA_ARGS__)

/* ---- outside CUnit ---- */

/* A condition, with an optional printf-style message; when it fails, the
 * line is printed and CHECK_FAILED runs, with the message's arguments. */
#define CHECK(cond, ...)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			check_where_(CHECK_CONTEXT, __FILE__, __LINE__);                         \
			fprintf(stderr, "not (%s):", #cond);                                     \
			check_say_(" " __VA_ARGS__);                                             \
			CHECK_FAILED("" __VA_ARGS__);                                            \
		}                                                                                \
	} while (0)

#endif
