/* tests/test_http.c: CUnit tests of tlhttp's pure modules: request parser (every refusal, split invariance), range, preconditions and entity-tags, dates, MIME, response heads, safe paths. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "tl_config.h"
#if TL_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#include "tlhttp/cond.h"
#include "tlhttp/date.h"
#include "tlhttp/fcache.h"
#include "tlhttp/mime.h"
#include "tlhttp/parse.h"
#include "tlhttp/path.h"
#include "tlhttp/range.h"
#include "tlhttp/resp.h"

#define S(lit) lit, sizeof(lit) - 1
#define WRK "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"

/* ---- helpers ---- */

/* An exact-size heap copy, so that ASan reports a read one byte too far. */
static char *copy(const char *s, size_t n)
{
	char *p = malloc(n ? n : 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p);
	memcpy(p, s, n);
	return p;
}

static int same_span(struct tlhttp_span a, const char *ba, struct tlhttp_span b, const char *bb)
{
	if (!a.p || !b.p)
		return !a.p && !b.p && a.len == 0 && b.len == 0;
	return a.len == b.len && a.p - ba == b.p - bb;
}

/* Two parses of the same bytes, each against its own buffer. */
static int same_req(const struct tlhttp_req *a, const char *ba, const struct tlhttp_req *b, const char *bb)
{
	return a->method == b->method && a->minor == b->minor && a->keep_alive == b->keep_alive &&
	       a->conn_close == b->conn_close && a->conn_keep_alive == b->conn_keep_alive &&
	       a->expect_continue == b->expect_continue &&
	       a->has_content_length == b->has_content_length && a->reason == b->reason &&
	       a->status == b->status && a->nheaders == b->nheaders &&
	       a->content_length == b->content_length && same_span(a->target, ba, b->target, bb) &&
	       same_span(a->path, ba, b->path, bb) && same_span(a->query, ba, b->query, bb) &&
	       same_span(a->authority, ba, b->authority, bb) && same_span(a->host, ba, b->host, bb) &&
	       same_span(a->if_modified_since, ba, b->if_modified_since, bb) &&
	       same_span(a->range, ba, b->range, bb) && same_span(a->expect, ba, b->expect, bb) &&
	       same_span(a->if_range, ba, b->if_range, bb) && same_span(a->if_match, ba, b->if_match, bb) &&
	       same_span(a->if_none_match, ba, b->if_none_match, bb) &&
	       same_span(a->if_unmodified_since, ba, b->if_unmodified_since, bb) &&
	       a->if_match_lines == b->if_match_lines && a->if_none_match_lines == b->if_none_match_lines;
}

static int span_is(struct tlhttp_span s, const char *want)
{
	if (!want)
		return s.p == NULL;
	return s.p && s.len == strlen(want) && !memcmp(s.p, want, s.len);
}

/*
 * Parses in[0..n) whole, and checks that every split gives the same result:
 * a prefix of k bytes gives 0 or that result, and then the whole (in another
 * buffer: the spans must follow) gives it; fed byte by byte, a new buffer
 * each time, it gives 0 until it gives that result. Returns the result; the
 * whole parse is left in *out against *outbuf (the caller frees it).
 */
static int parse_checked(const char *in, size_t n, const struct tlhttp_limits *lim,
			 struct tlhttp_req *out, char **outbuf)
{
	struct tlhttp_req r;
	char *w = copy(in, n);
	int rc;

	CU_ASSERT_EQUAL_FATAL(tlhttp_req_init(out, lim), 0);
	rc = tlhttp_parse(out, w, n);
	*outbuf = w;
	CU_ASSERT_TRUE(rc == -EBADMSG || (rc >= 0 && (size_t)rc <= n));
	/* Asking again gives the same answer. */
	CU_ASSERT_EQUAL(tlhttp_parse(out, w, n), rc);

	for (size_t k = 0; k <= n; k++) {
		char *a = copy(in, k), *b;
		int r1, r2;

		tlhttp_req_init(&r, lim);
		r1 = tlhttp_parse(&r, a, k);
		if (r1 != 0) {
			CU_ASSERT_EQUAL(r1, rc);
			CU_ASSERT_TRUE(same_req(&r, a, out, w));
			free(a);
			continue;
		}
		b = copy(in, n);
		free(a);
		r2 = tlhttp_parse(&r, b, n);
		CU_ASSERT_EQUAL(r2, rc);
		if (r2 != rc || !same_req(&r, b, out, w)) {
			CU_FAIL("split parse differs");
			fprintf(stderr, "split at %zu of %zu: %d (%s) vs %d\n", k, n, r2,
				tlhttp_reason_name(r.reason), rc);
		}
		free(b);
	}

	tlhttp_req_init(&r, lim);
	int last = 0;
	size_t k;
	for (k = 1; k <= n; k++) {
		char *a = copy(in, k);
		last = tlhttp_parse(&r, a, k);
		if (last != 0) {
			CU_ASSERT_TRUE(same_req(&r, a, out, w));
			free(a);
			break;
		}
		free(a);
	}
	CU_ASSERT_EQUAL(last, rc);
	return rc;
}

/* ---- parser: accepted shapes ---- */

static void test_accept_wrk(void)
{
	struct tlhttp_req r;
	char *b;
	int rc = parse_checked(S(WRK), NULL, &r, &b);

	CU_ASSERT_EQUAL(rc, (int)strlen(WRK));
	CU_ASSERT_EQUAL(r.method, TLHTTP_GET);
	CU_ASSERT_EQUAL(r.minor, 1);
	CU_ASSERT_EQUAL(r.keep_alive, 1);
	CU_ASSERT_EQUAL(r.status, 0);
	CU_ASSERT_EQUAL(r.reason, TLHTTP_R_OK);
	CU_ASSERT_EQUAL(r.nheaders, 1);
	CU_ASSERT_TRUE(span_is(r.target, "/"));
	CU_ASSERT_TRUE(span_is(r.path, "/"));
	CU_ASSERT_TRUE(span_is(r.query, NULL));
	CU_ASSERT_TRUE(span_is(r.authority, NULL));
	CU_ASSERT_TRUE(span_is(r.host, "127.0.0.1:8080"));
	CU_ASSERT_TRUE(span_is(r.range, NULL));
	CU_ASSERT_TRUE(span_is(r.if_modified_since, NULL));
	CU_ASSERT_EQUAL(r.has_content_length, 0);
	/* Zero-copy: the spans are inside the buffer. */
	CU_ASSERT_PTR_EQUAL(r.host.p, b + 22);
	free(b);
}

static void test_accept_fields(void)
{
	static const char in[] = "HEAD /a/b%20c.html?x=1&y=/?z HTTP/1.1\r\n"
				 "hOsT:example.com   \r\n"
				 "Range:\tbytes=0-99\t\r\n"
				 "IF-MODIFIED-SINCE: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
				 "expect: 100-continue\r\n"
				 "content-LENGTH: 000\r\n"
				 "X-Tab: a\tb\r\n"
				 "X-Obs-Text: caf\xc3\xa9\r\n"
				 "X-Empty:\r\n"
				 "User-Agent: test/1.0 (with \"quotes\", commas; and ~!@#$%^&*)\r\n"
				 "\r\n";
	struct tlhttp_req r;
	char *b;

	CU_ASSERT_EQUAL(parse_checked(S(in), NULL, &r, &b), (int)strlen(in));
	CU_ASSERT_EQUAL(r.method, TLHTTP_HEAD);
	CU_ASSERT_TRUE(span_is(r.target, "/a/b%20c.html?x=1&y=/?z"));
	CU_ASSERT_TRUE(span_is(r.path, "/a/b%20c.html"));
	CU_ASSERT_TRUE(span_is(r.query, "x=1&y=/?z"));
	CU_ASSERT_TRUE(span_is(r.host, "example.com"));
	CU_ASSERT_TRUE(span_is(r.range, "bytes=0-99"));
	CU_ASSERT_TRUE(span_is(r.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT"));
	CU_ASSERT_TRUE(span_is(r.expect, "100-continue"));
	CU_ASSERT_EQUAL(r.expect_continue, 1);
	CU_ASSERT_EQUAL(r.has_content_length, 1);
	CU_ASSERT_EQUAL(r.content_length, 0);
	CU_ASSERT_EQUAL(r.nheaders, 9);
	free(b);

	/* An empty query, an empty Host, Expect other than 100-continue. */
	static const char in2[] = "GET /x? HTTP/1.1\r\nHost:\r\nExpect: 100-continuex\r\n\r\n";
	CU_ASSERT_EQUAL(parse_checked(S(in2), NULL, &r, &b), (int)strlen(in2));
	CU_ASSERT_TRUE(span_is(r.query, ""));
	CU_ASSERT_TRUE(span_is(r.host, ""));
	CU_ASSERT_EQUAL(r.expect_continue, 0);
	CU_ASSERT_TRUE(span_is(r.expect, "100-continuex"));
	free(b);
}

static void test_accept_absolute_form(void)
{
	static const struct {
		const char *in, *path, *query, *authority;
	} cases[] = {
		{ "GET http://example.com/a/b?c HTTP/1.1\r\nHost: x\r\n\r\n", "/a/b", "c", "example.com" },
		{ "GET HTTPS://[::1]:8443/ HTTP/1.1\r\nHost: x\r\n\r\n", "/", NULL, "[::1]:8443" },
		{ "GET http://h HTTP/1.1\r\nHost: x\r\n\r\n", "/", NULL, "h" },
		{ "HEAD http://h?q=1 HTTP/1.0\r\n\r\n", "/", "q=1", "h" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tlhttp_req r;
		char *b;
		CU_ASSERT_EQUAL(parse_checked(cases[i].in, strlen(cases[i].in), NULL, &r, &b),
				(int)strlen(cases[i].in));
		CU_ASSERT_TRUE(span_is(r.path, cases[i].path));
		CU_ASSERT_TRUE(span_is(r.query, cases[i].query));
		CU_ASSERT_TRUE(span_is(r.authority, cases[i].authority));
		/* Even the "/" made up for an empty path is in the buffer. */
		CU_ASSERT_TRUE(r.path.p >= b && r.path.p < b + strlen(cases[i].in));
		free(b);
	}
}

static void test_keep_alive(void)
{
	static const struct {
		const char *in;
		int minor, keep_alive, close, ka;
	} cases[] = {
		{ "GET / HTTP/1.0\r\n\r\n", 0, 0, 0, 0 },
		{ "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0, 1, 0, 1 },
		{ "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, 1, 0, 1 },
		{ "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0, 0, 1, 1 },
		{ "GET / HTTP/1.0\r\nconnection: close\r\n\r\n", 0, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 1, 1, 0, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 1, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n", 1, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, close\r\n\r\n", 1, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: ,, foo ,\tclose\t,\r\n\r\n", 1, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: closed, xclose\r\n\r\n", 1, 1, 0, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo\r\nConnection: close\r\n\r\n", 1, 0, 1, 0 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nConnection:\r\n\r\n", 1, 1, 0, 0 },
		/* 1.2 .. 1.9 are read as 1.1 (RFC 9110 2.5). */
		{ "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 1, 1, 0, 0 },
		{ "GET / HTTP/1.9\r\nHost: a\r\nConnection: close\r\n\r\n", 1, 0, 1, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct tlhttp_req r;
		char *b;
		int rc = parse_checked(cases[i].in, strlen(cases[i].in), NULL, &r, &b);
		CU_ASSERT_EQUAL(rc, (int)strlen(cases[i].in));
		CU_ASSERT_EQUAL(r.minor, cases[i].minor);
		CU_ASSERT_EQUAL(r.keep_alive, cases[i].keep_alive);
		CU_ASSERT_EQUAL(r.conn_close, cases[i].close);
		CU_ASSERT_EQUAL(r.conn_keep_alive, cases[i].ka);
		if (rc != (int)strlen(cases[i].in) || r.keep_alive != cases[i].keep_alive)
			fprintf(stderr, "case %zu: rc %d reason %s\n", i, rc, tlhttp_reason_name(r.reason));
		free(b);
	}
}

static void test_pipelined(void)
{
	static const char in[] = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
				 "HEAD /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
				 "\r\nGET /3 HTTP/1.0\r\n\r\n"
				 "GET /4 HTTP/1.1\r\nHo";
	static const struct {
		const char *path;
		int len, method;
	} want[] = {
		{ "/1", 28, TLHTTP_GET },
		{ "/2", 48, TLHTTP_HEAD },
		{ "/3", 21, TLHTTP_GET },
	};
	size_t n = strlen(in), off = 0;
	char *b = copy(in, n);
	struct tlhttp_req r;

	for (size_t i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
		int rc = tlhttp_parse(&r, b + off, n - off);
		CU_ASSERT_EQUAL(rc, want[i].len);
		CU_ASSERT_EQUAL(r.method, want[i].method);
		CU_ASSERT_TRUE(span_is(r.path, want[i].path));
		if (rc <= 0)
			break;
		off += (size_t)rc;
	}
	CU_ASSERT_EQUAL(off, 97);
	/* The fourth is partial: more bytes are needed. */
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, b + off, n - off), 0);
	free(b);

	/* Each of them, with everything after it, split anywhere. */
	for (size_t i = 0, o = 0; i < 3; o += (size_t)want[i].len, i++) {
		char *w;
		CU_ASSERT_EQUAL(parse_checked(in + o, n - o, NULL, &r, &w), want[i].len);
		free(w);
	}
}

static void test_rebase(void)
{
	static const char in[] = "GET /p?q HTTP/1.1\r\nHost: h\r\nRange: bytes=1-2\r\n\r\n";
	size_t n = strlen(in);
	char *a = copy(in, 30), *b = copy(in, n);
	struct tlhttp_req r;

	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, a, 30), 0);
	CU_ASSERT_PTR_EQUAL(r.path.p, a + 4);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, b, n), (int)n);
	CU_ASSERT_PTR_EQUAL(r.path.p, b + 4);
	CU_ASSERT_PTR_EQUAL(r.query.p, b + 7);
	CU_ASSERT_PTR_EQUAL(r.host.p, b + 25);
	CU_ASSERT_TRUE(span_is(r.range, "bytes=1-2"));
	/* A finished request still follows its buffer. */
	CU_ASSERT_EQUAL(tlhttp_parse(&r, a, n), (int)n);
	CU_ASSERT_PTR_EQUAL(r.host.p, a + 25);
	free(a);
	free(b);
}

static void test_leading_crlf(void)
{
	struct tlhttp_req r;
	char *b;

	CU_ASSERT_EQUAL(parse_checked(S("\r\n\r\nGET /x HTTP/1.0\r\n\r\n"), NULL, &r, &b), 23);
	CU_ASSERT_TRUE(span_is(r.path, "/x"));
	free(b);
	/* Only empty lines: still waiting. */
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("\r\n\r\n\r\n")), 0);
}

static void test_repeated_fields(void)
{
	struct tlhttp_req r;
	char *b;

	/* A second If-Modified-Since or Range makes the field absent. */
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1\r\nrange: bytes=2-3\r\n"
				       "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"),
				     NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.range, NULL));
	CU_ASSERT_TRUE(span_is(r.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT"));
	free(b);
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: x\r\n"
				       "If-Modified-Since: y\r\nExpect: 100-continue\r\nExpect: z\r\n\r\n"),
				     NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.if_modified_since, NULL));
	CU_ASSERT_TRUE(span_is(r.range, NULL));
	CU_ASSERT_TRUE(span_is(r.if_range, NULL));
	/* Expect: the first line counts. */
	CU_ASSERT_TRUE(span_is(r.expect, "100-continue"));
	CU_ASSERT_EQUAL(r.expect_continue, 1);
	free(b);

	/* If-Range: its value; repeated, present but empty. */
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\nRange: bytes=5-\r\n"
				       "IF-RANGE: Sun, 06 Nov 1994 08:49:37 GMT \r\n\r\n"),
				     NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.if_range, "Sun, 06 Nov 1994 08:49:37 GMT"));
	free(b);
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\nIf-Range: \"x\"\r\n"
				       "If-Range: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"),
				     NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.if_range, ""));
	free(b);

	/* If-Unmodified-Since repeated: absent (a list of dates). If-Match
	 * and If-None-Match: the first line, and how many there are. */
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\n"
				       "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
				       "If-Match: \"a\" \r\nif-none-match:*\r\nIF-MATCH: \"b\"\r\n"
				       "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"),
				     NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.if_unmodified_since, NULL));
	CU_ASSERT_TRUE(span_is(r.if_match, "\"a\""));
	CU_ASSERT_EQUAL(r.if_match_lines, 2);
	CU_ASSERT_TRUE(span_is(r.if_none_match, "*"));
	CU_ASSERT_EQUAL(r.if_none_match_lines, 1);
	free(b);
	CU_ASSERT_TRUE(parse_checked(S("GET / HTTP/1.1\r\nHost: a\r\n"
				       "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
				       "If-None-Match:\r\n\r\n"), NULL, &r, &b) > 0);
	CU_ASSERT_TRUE(span_is(r.if_unmodified_since, "Sun, 06 Nov 1994 08:49:37 GMT"));
	CU_ASSERT_TRUE(span_is(r.if_none_match, ""));
	CU_ASSERT_EQUAL(r.if_none_match_lines, 1);
	CU_ASSERT_TRUE(span_is(r.if_match, NULL));
	CU_ASSERT_EQUAL(r.if_match_lines, 0);
	free(b);
	/* More than 255 lines: the count stops there. */
	static const struct tlhttp_limits many = { .max_line = 100, .max_header_bytes = 8000,
						   .max_headers = 400 };
	char big[8000];
	size_t bl = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < 300; i++)
		bl += (size_t)sprintf(big + bl, "If-Match: \"%d\"\r\n", i);
	bl += (size_t)sprintf(big + bl, "\r\n");
	struct tlhttp_req m;
	CU_ASSERT_EQUAL(tlhttp_req_init(&m, &many), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&m, big, bl), (int)bl);
	CU_ASSERT_EQUAL(m.if_match_lines, 255);
	CU_ASSERT_TRUE(span_is(m.if_match, "\"0\""));
}

/* tlhttp_req_field_next: every line of a field, in order, wherever the
 * head lies. */
static void test_field_next(void)
{
	static const char head[] = "\r\nGET / HTTP/1.1\r\nIf-Match: \"a\", \"b\" \r\nHost: a\r\n"
				   "If-Matchx: no\r\nX-If-Match: no\r\nif-match:\t*\t\r\n"
				   "IF-MATCH:\r\n\r\nGET / HTTP/1.1\r\nIf-Match: \"later\"\r\n\r\n";
	struct tlhttp_req r;
	struct tlhttp_span v;
	uint32_t pos = 0;
	char *b = copy(head, sizeof head - 1);

	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	/* Not accepted yet. */
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, b, 20), 0);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), -EINVAL);
	int n = tlhttp_parse(&r, b, sizeof head - 1);
	CU_ASSERT_TRUE_FATAL(n > 0);
	CU_ASSERT_EQUAL(r.if_match_lines, 3);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 1);
	CU_ASSERT_TRUE(span_is(v, "\"a\", \"b\""));
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 1);
	CU_ASSERT_TRUE(span_is(v, "*"));
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 1);
	CU_ASSERT_TRUE(span_is(v, ""));
	/* The next request's line is not this one's. */
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 0);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 0);
	pos = 0;
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "host", &pos, &v), 1);
	CU_ASSERT_TRUE(span_is(v, "a"));
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "host", &pos, &v), 0);
	pos = 0;
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-none-match", &pos, &v), 0);
	/* The buffer moved (the caller compacted it): the values follow. */
	char *moved = copy(head, sizeof head - 1);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, moved, sizeof head - 1), n);
	pos = 0;
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), 1);
	CU_ASSERT_TRUE(v.p > moved && v.p < moved + n);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(NULL, "if-match", &pos, &v), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, NULL, &pos, &v), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", NULL, &v), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, NULL), -EINVAL);
	/* A refused request has none. */
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("GET / HTTP/1.1\r\nIf-Match: x\r\n\r\n")), -EBADMSG);
	pos = 0;
	CU_ASSERT_EQUAL(tlhttp_req_field_next(&r, "if-match", &pos, &v), -EINVAL);
	free(moved);
	free(b);
}

/* ---- parser: every refusal ---- */

static const struct tlhttp_limits small = { .max_line = 32, .max_header_bytes = 64, .max_headers = 3 };

#define H11 " HTTP/1.1\r\nHost: a\r\n"
static const struct refusal {
	const char *name;
	const char *in;
	size_t len;
	const struct tlhttp_limits *lim;
	int status, reason;
} refusals[] = {
	{ "bare LF ends the request line", S("GET / HTTP/1.1\nHost: a\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_LF },
	{ "bare LF ends a header", S("GET /" H11 "X: y\n\r\n"), NULL, 400, TLHTTP_R_BARE_LF },
	{ "bare LF as the last line", S("GET /" H11 "\n"), NULL, 400, TLHTTP_R_BARE_LF },
	{ "a lone LF first", S("\nGET / HTTP/1.0\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_LF },
	{ "bare CR in the target", S("GET /a\rb HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "bare CR in the method", S("GE\rT / HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "bare CR in the version", S("GET / HTTP/1.1\r\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "bare CR in a value", S("GET /" H11 "X: a\rb\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "bare CR in a long value", S("GET /" H11 "X: 0123456789abcdef\r0123\r\n\r\n"), NULL, 400,
	  TLHTTP_R_BARE_CR },
	{ "bare CR in a name", S("GET /" H11 "X\r: a\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "bare CR as a line", S("GET /" H11 "\r\r\n\r\n"), NULL, 400, TLHTTP_R_BARE_CR },
	{ "method with a bad char", S("G@T / HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_METHOD },
	{ "method with a control char", S("G\x01T / HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_METHOD },
	{ "line starting with SP", S(" GET / HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_METHOD },
	{ "method with a tab", S("GET\t/ HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_METHOD },
	{ "two spaces", S("GET  / HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_REQUEST_LINE },
	{ "no version (HTTP/0.9)", S("GET /\r\n\r\n"), NULL, 400, TLHTTP_R_REQUEST_LINE },
	{ "method alone", S("GET\r\n\r\n"), NULL, 400, TLHTTP_R_REQUEST_LINE },
	{ "method and space", S("GET \r\n\r\n"), NULL, 400, TLHTTP_R_REQUEST_LINE },
	{ "target with a quote", S("GET /a\"b HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with a fragment", S("GET /a#b HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with a brace", S("GET /a{b HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with a backslash", S("GET /a\\b HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with raw UTF-8", S("GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with a NUL", S("GET /a\0b HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "target with a tab", S("GET /a\tb HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_TARGET },
	{ "asterisk-form on GET", S("GET *" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "authority-form on GET", S("GET example.com:80" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "ftp absolute-form", S("GET ftp://h/" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "absolute-form, empty host", S("GET http:///x" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "absolute-form, scheme only", S("GET http://" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "absolute-form with userinfo", S("GET http://u:p@h/" H11 "\r\n"), NULL, 400, TLHTTP_R_TARGET_FORM },
	{ "version followed by SP", S("GET / HTTP/1.1 \r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "version without minor", S("GET / HTTP/1\r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "version with two digits", S("GET / HTTP/1.10\r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "version in lowercase", S("GET / http/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "version with a letter", S("GET / HTTP/a.1\r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "a fourth part", S("GET / HTTP/1.1 x\r\n\r\n"), NULL, 400, TLHTTP_R_VERSION },
	{ "HTTP/2.0", S("GET / HTTP/2.0\r\n\r\n"), NULL, 505, TLHTTP_R_VERSION_NOT_SUPPORTED },
	{ "HTTP/0.9", S("GET / HTTP/0.9\r\n\r\n"), NULL, 505, TLHTTP_R_VERSION_NOT_SUPPORTED },
	{ "HTTP/3.1 with POST", S("POST / HTTP/3.1\r\n\r\n"), NULL, 505, TLHTTP_R_VERSION_NOT_SUPPORTED },
	{ "POST", S("POST /" H11 "Content-Length: 3\r\n\r\nabc"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "lowercase get", S("get /" H11 "\r\n"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "GETX", S("GETX /" H11 "\r\n"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "OPTIONS *", S("OPTIONS *" H11 "\r\n"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "CONNECT", S("CONNECT h:443" H11 "\r\n"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "405 before the headers end", S("DELETE /x HTTP/1.1\r\n"), NULL, 405, TLHTTP_R_METHOD_NOT_ALLOWED },
	{ "obs-fold", S("GET /" H11 "X: a\r\n b\r\n\r\n"), NULL, 400, TLHTTP_R_OBS_FOLD },
	{ "obs-fold with a tab", S("GET /" H11 "X: a\r\n\tb\r\n\r\n"), NULL, 400, TLHTTP_R_OBS_FOLD },
	{ "whitespace after the request line", S("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), NULL, 400,
	  TLHTTP_R_OBS_FOLD },
	{ "empty name", S("GET /" H11 ": a\r\n\r\n"), NULL, 400, TLHTTP_R_EMPTY_NAME },
	{ "name with a paren", S("GET /" H11 "X(y: a\r\n\r\n"), NULL, 400, TLHTTP_R_NAME_CHAR },
	{ "name with a control char", S("GET /" H11 "X\x01y: a\r\n\r\n"), NULL, 400, TLHTTP_R_NAME_CHAR },
	{ "name with a NUL", S("GET /" H11 "X\0y: a\r\n\r\n"), NULL, 400, TLHTTP_R_NAME_CHAR },
	{ "name with UTF-8", S("GET /" H11 "X\xc3\xa9: a\r\n\r\n"), NULL, 400, TLHTTP_R_NAME_CHAR },
	{ "name with a slash", S("GET /" H11 "X/y: a\r\n\r\n"), NULL, 400, TLHTTP_R_NAME_CHAR },
	{ "SP before the colon", S("GET /" H11 "X : a\r\n\r\n"), NULL, 400, TLHTTP_R_WS_BEFORE_COLON },
	{ "HTAB before the colon", S("GET /" H11 "X\t: a\r\n\r\n"), NULL, 400, TLHTTP_R_WS_BEFORE_COLON },
	{ "SP before Host's colon", S("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), NULL, 400,
	  TLHTTP_R_WS_BEFORE_COLON },
	{ "no colon", S("GET /" H11 "Xy\r\n\r\n"), NULL, 400, TLHTTP_R_NO_COLON },
	{ "value with a control char", S("GET /" H11 "X: a\x01" "b\r\n\r\n"), NULL, 400, TLHTTP_R_VALUE_CHAR },
	{ "value with DEL", S("GET /" H11 "X: a\x7f\r\n\r\n"), NULL, 400, TLHTTP_R_VALUE_CHAR },
	{ "value with a NUL", S("GET /" H11 "X: \0\r\n\r\n"), NULL, 400, TLHTTP_R_VALUE_CHAR },
	{ "long value with a NUL", S("GET /" H11 "X: 0123456789abcdef0123456789\0abcdef\r\n\r\n"), NULL, 400,
	  TLHTTP_R_VALUE_CHAR },
	{ "long value with ESC at its end", S("GET /" H11 "X: 0123456789abcdef0123456789\x1b\r\n\r\n"), NULL, 400,
	  TLHTTP_R_VALUE_CHAR },
	{ "value with a vertical tab", S("GET /" H11 "X: a\vb\r\n\r\n"), NULL, 400, TLHTTP_R_VALUE_CHAR },
	{ "no Host in 1.1", S("GET / HTTP/1.1\r\nX: y\r\n\r\n"), NULL, 400, TLHTTP_R_NO_HOST },
	{ "no Host, absolute-form", S("GET http://h/ HTTP/1.1\r\n\r\n"), NULL, 400, TLHTTP_R_NO_HOST },
	{ "two Host lines", S("GET /" H11 "Host: a\r\n\r\n"), NULL, 400, TLHTTP_R_DUP_HOST },
	{ "two Host lines, other case", S("GET /" H11 "HOST: b\r\n\r\n"), NULL, 400, TLHTTP_R_DUP_HOST },
	{ "two Host lines in 1.0", S("GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n"), NULL, 400,
	  TLHTTP_R_DUP_HOST },
	{ "Host with a space", S("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), NULL, 400, TLHTTP_R_BAD_HOST },
	{ "Host with a slash", S("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), NULL, 400, TLHTTP_R_BAD_HOST },
	{ "Host with userinfo", S("GET / HTTP/1.1\r\nHost: u@h\r\n\r\n"), NULL, 400, TLHTTP_R_BAD_HOST },
	{ "Host with a comma", S("GET / HTTP/1.1\r\nHost: a, b\r\n\r\n"), NULL, 400, TLHTTP_R_BAD_HOST },
	{ "Connection with a parameter", S("GET /" H11 "Connection: close;x=1\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CONNECTION },
	{ "Connection with a space", S("GET /" H11 "Connection: keep alive\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CONNECTION },
	{ "Content-Length empty", S("GET /" H11 "Content-Length: \r\n\r\n"), NULL, 400, TLHTTP_R_CL_INVALID },
	{ "Content-Length negative", S("GET /" H11 "Content-Length: -1\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length with a plus", S("GET /" H11 "Content-Length: +1\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length in hex", S("GET /" H11 "Content-Length: 0x10\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length with a space", S("GET /" H11 "Content-Length: 1 2\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length as a list", S("GET /" H11 "Content-Length: 0, 0\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length of 2^63", S("GET /" H11 "Content-Length: 9223372036854775808\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_INVALID },
	{ "Content-Length overflowing", S("GET /" H11 "Content-Length: 184467440737095516160\r\n\r\n"), NULL,
	  400, TLHTTP_R_CL_INVALID },
	{ "Content-Length twice, same", S("GET /" H11 "Content-Length: 0\r\nContent-Length: 0\r\n\r\n"), NULL,
	  400, TLHTTP_R_CL_DUP },
	{ "Content-Length twice, differing", S("GET /" H11 "Content-Length: 0\r\nContent-Length: 5\r\n\r\n"),
	  NULL, 400, TLHTTP_R_CL_CONFLICT },
	{ "Content-Length and Transfer-Encoding",
	  S("GET /" H11 "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_AND_TE },
	{ "Transfer-Encoding then Content-Length",
	  S("GET /" H11 "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"), NULL, 400,
	  TLHTTP_R_CL_AND_TE },
	{ "Transfer-Encoding in 1.0", S("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_HTTP10 },
	{ "Transfer-Encoding gzip", S("GET /" H11 "Transfer-Encoding: gzip\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "chunked then gzip", S("GET /" H11 "Transfer-Encoding: chunked, gzip\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "chunked twice", S("GET /" H11 "Transfer-Encoding: chunked, chunked\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "chunked then gzip on two lines",
	  S("GET /" H11 "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "chunked with a parameter", S("GET /" H11 "Transfer-Encoding: chunked;x=1\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "Transfer-Encoding empty", S("GET /" H11 "Transfer-Encoding:\r\n\r\n"), NULL, 400,
	  TLHTTP_R_TE_NOT_CHUNKED },
	{ "Transfer-Encoding chunked", S("GET /" H11 "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), NULL, 400,
	  TLHTTP_R_BODY },
	{ "gzip, chunked", S("GET /" H11 "transfer-encoding: gzip, CHUNKED\r\n\r\n"), NULL, 400, TLHTTP_R_BODY },
	{ "GET with a body", S("GET /" H11 "Content-Length: 5\r\n\r\nhello"), NULL, 400, TLHTTP_R_BODY },
	{ "HEAD with a body", S("HEAD /" H11 "Content-Length: 1\r\n\r\nx"), NULL, 400, TLHTTP_R_BODY },
	/* small limits: a request line of 32 bytes is the most */
	{ "request line one over", S("GET /xxxxxxxxxxxxxxxxxxx HTTP/1.1\r\nHost: a\r\n\r\n"), &small, 414,
	  TLHTTP_R_LINE_TOO_LONG },
	{ "request line at the limit after an empty line",
	  S("\r\nGET /xxxxxxxxxxxxxxxxxx HTTP/1.1\r\nHost: a\r\n\r\n"), &small, 414, TLHTTP_R_LINE_TOO_LONG },
	{ "no LF within the limit", S("GET /xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), &small, 414, TLHTTP_R_LINE_TOO_LONG },
	{ "garbage without LF", S("\x01\x02\x03\x04\x05\x06\x07\x08\x01\x02\x03\x04\x05\x06\x07\x08"
				  "\x01\x02\x03\x04\x05\x06\x07\x08\x01\x02\x03\x04\x05\x06\x07\x08\x01\x02"),
	  &small, 414, TLHTTP_R_LINE_TOO_LONG },
	{ "header section one over",
	  S("GET / HTTP/1.1\r\nHost: a\r\nX: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n"), &small,
	  431, TLHTTP_R_HEADERS_TOO_LARGE },
	{ "header section: the final CRLF over",
	  S("GET / HTTP/1.1\r\nHost: a\r\nX: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n"), &small,
	  431, TLHTTP_R_HEADERS_TOO_LARGE },
	{ "too many header lines", S("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"), &small, 431,
	  TLHTTP_R_TOO_MANY_HEADERS },
	{ "too many, even bad ones", S("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n C\r\n\r\n"), &small, 431,
	  TLHTTP_R_TOO_MANY_HEADERS },
};

static void test_refusals(void)
{
	int covered[TLHTTP_R_COUNT] = { 0 };

	for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
		const struct refusal *c = &refusals[i];
		struct tlhttp_req r;
		char *b;
		int rc = parse_checked(c->in, c->len, c->lim, &r, &b);

		if (rc != -EBADMSG || r.status != c->status || r.reason != c->reason) {
			CU_FAIL("wrong refusal");
			fprintf(stderr, "\n  %s: rc %d status %d reason %s, want %d %s\n", c->name, rc, r.status,
				tlhttp_reason_name(r.reason), c->status, tlhttp_reason_name((unsigned)c->reason));
		}
		covered[c->reason] = 1;
		free(b);
	}
	/* Every reason but OK has a case above. */
	for (int i = 1; i < TLHTTP_R_COUNT; i++)
		if (!covered[i]) {
			CU_FAIL("a reason without a test");
			fprintf(stderr, "\n  no case for %s\n", tlhttp_reason_name((unsigned)i));
		}
}

/* Just inside each limit is accepted, and a head of exactly the limits. */
/* A bad byte at every position of values of every length up to 40 (the
 * value check goes a word at a time, the last word overlapping), and of
 * Host values (checked four bytes at a time). */
static void test_value_positions(void)
{
	static const unsigned char bad[] = { 0x00, 0x01, 0x0b, 0x1f, 0x7f };
	static const unsigned char bad_host[] = { ' ', '/', '@', '"', '#', 0x80 };
	char req[200];

	for (size_t n = 1; n <= 40; n++) {
		for (size_t at = 0; at <= n; at++) {
			for (size_t k = 0; k < sizeof bad + 1; k++) {
				struct tlhttp_req r;
				char v[64];
				memset(v, 'a', n);
				/* k == sizeof bad: a clean value (and HTAB inside) */
				if (at < n)
					v[at] = k < sizeof bad ? (char)bad[k] : '\t';
				/* By hand: the value may hold a NUL. */
				static const char pre[] = "GET / HTTP/1.1\r\nHost: h\r\nX: z";
				int len = (int)(sizeof pre - 1);
				memcpy(req, pre, sizeof pre - 1);
				memcpy(req + len, v, n);
				len += (int)n;
				memcpy(req + len, "z\r\n\r\n", 5);
				len += 5;
				char *b = copy(req, (size_t)len);
				tlhttp_req_init(&r, NULL);
				int rc = tlhttp_parse(&r, b, (size_t)len);
				int refuse = at < n && k < sizeof bad;
				CU_ASSERT_TRUE(refuse ? rc == -EBADMSG && r.reason == TLHTTP_R_VALUE_CHAR
						      : rc == len);
				free(b);
			}
			for (size_t k = 0; k < sizeof bad_host + 1 && at < n; k++) {
				struct tlhttp_req r;
				char v[64];
				memset(v, 'h', n);
				v[at] = k < sizeof bad_host ? (char)bad_host[k] : ':';
				int len = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %.*s\r\n\r\n",
						   (int)n, v);
				char *b = copy(req, (size_t)len);
				tlhttp_req_init(&r, NULL);
				int rc = tlhttp_parse(&r, b, (size_t)len);
				/* A space at either end is OWS, trimmed. */
				int refuse = k < sizeof bad_host &&
					     !(bad_host[k] == ' ' && (at == 0 || at == n - 1));
				CU_ASSERT_TRUE(refuse ? rc == -EBADMSG && r.reason == TLHTTP_R_BAD_HOST
						      : rc == len);
				free(b);
			}
		}
	}
}

static void test_limits_edges(void)
{
	static const char *const ok[] = {
		"GET /xxxxxxxxxxxxxxxxxx HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\nGET /xxxxxxxxxxxxxxxx HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
		"GET /xxxxxxxxxxxxxxxxxx HTTP/1.1\r\nHost: a\r\nX: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		struct tlhttp_req r;
		char *b;
		int rc = parse_checked(ok[i], strlen(ok[i]), &small, &r, &b);
		CU_ASSERT_EQUAL(rc, (int)strlen(ok[i]));
		if (rc <= 0)
			fprintf(stderr, "\n  limits case %zu: %d %s\n", i, rc, tlhttp_reason_name(r.reason));
		free(b);
	}

	/* 33 bytes without LF may still end in CR LF within the limit; 34
	 * cannot. */
	struct tlhttp_req r;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &small), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("GET /xxxxxxxxxxxxxxxxxxxxxxxxxxxx")), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("GET /xxxxxxxxxxxxxxxxxxxxxxxxxxxxx")), -EBADMSG);
	CU_ASSERT_EQUAL(r.status, 414);

	/* A buffer much longer than any head: the header bound is counted
	 * from the end of the request line, not from the buffer's end. */
	size_t n = 32 + 2 + 64, big = n + 4096;
	char *b = malloc(big);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	memset(b, '\n', big);
	memcpy(b, "GET / HTTP/1.1\r\nHost: a\r\n", 25);
	memset(b + 25, 'x', n - 25);
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &small), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, b, big), -EBADMSG);
	CU_ASSERT_EQUAL(r.reason, TLHTTP_R_HEADERS_TOO_LARGE);
	free(b);

	/* The defaults: 8 KiB request line, 16 KiB headers, 100 lines. */
	size_t cap = 40000;
	char *d = malloc(cap);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d);
	for (int over = 0; over < 2; over++) {
		size_t len = 0;
		len += (size_t)sprintf(d, "GET /");
		memset(d + len, 'a', 8192 - 14 + (size_t)over);
		len += 8192 - 14 + (size_t)over;
		len += (size_t)sprintf(d + len, " HTTP/1.1\r\nHost: a\r\n\r\n");
		CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
		CU_ASSERT_EQUAL(tlhttp_parse(&r, d, len), over ? -EBADMSG : (int)len);
		CU_ASSERT_EQUAL(r.status, over ? 414 : 0);
	}
	for (int over = 0; over < 2; over++) {
		size_t len = (size_t)sprintf(d, "GET / HTTP/1.1\r\nHost: a\r\n");
		for (int i = 0; i < 99 + over; i++)
			len += (size_t)sprintf(d + len, "X-%d: y\r\n", i);
		len += (size_t)sprintf(d + len, "\r\n");
		CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
		CU_ASSERT_EQUAL(tlhttp_parse(&r, d, len), over ? -EBADMSG : (int)len);
		CU_ASSERT_EQUAL(r.reason, over ? TLHTTP_R_TOO_MANY_HEADERS : TLHTTP_R_OK);
	}
	for (int over = 0; over < 2; over++) {
		/* Header section: "Host: a\r\n" (9) + "X: " + v + "\r\n" + "\r\n". */
		size_t v = 16384 - 9 - 3 - 2 - 2 + (size_t)over;
		size_t len = (size_t)sprintf(d, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
		memset(d + len, 'v', v);
		len += v;
		len += (size_t)sprintf(d + len, "\r\n\r\n");
		CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
		CU_ASSERT_EQUAL(tlhttp_parse(&r, d, len), over ? -EBADMSG : (int)len);
		CU_ASSERT_EQUAL(r.status, over ? 431 : 0);
	}
	free(d);
}

static void test_bad_calls(void)
{
	struct tlhttp_req r;
	struct tlhttp_limits l;

	CU_ASSERT_EQUAL(tlhttp_req_init(NULL, NULL), -EINVAL);
	l = small;
	l.max_line = 0;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S(WRK)), -EINVAL);
	l = small;
	l.max_header_bytes = 1;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), -EINVAL);
	l = small;
	l.max_headers = 0;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), -EINVAL);
	l = small;
	l.max_line = TLHTTP_LIMIT_MAX + 1;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), -EINVAL);
	l = small;
	l.max_headers = TLHTTP_LIMIT_MAX + 1;
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), -EINVAL);
	l = (struct tlhttp_limits){ TLHTTP_LIMIT_MAX, TLHTTP_LIMIT_MAX, TLHTTP_LIMIT_MAX };
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, &l), 0);

	CU_ASSERT_EQUAL(tlhttp_parse(NULL, S(WRK)), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, NULL, 3), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, NULL, 0), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, WRK, 20), 0);
	/* Fewer bytes than before. */
	CU_ASSERT_EQUAL(tlhttp_parse(&r, WRK, 19), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S(WRK)), (int)strlen(WRK));
	/* A refusal sticks. */
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("X / HTTP/1.1\r\n")), -EBADMSG);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("X / HTTP/1.1\r\nHost: a\r\n\r\n")), -EBADMSG);
	CU_ASSERT_EQUAL(r.status, 405);
	/* After a refusal before the request line, the spans are NULL. */
	CU_ASSERT_EQUAL(tlhttp_req_init(&r, NULL), 0);
	CU_ASSERT_EQUAL(tlhttp_parse(&r, S("GET /\n")), -EBADMSG);
	CU_ASSERT_PTR_NULL(r.target.p);
	CU_ASSERT_PTR_NULL(r.host.p);
}

static void test_reasons(void)
{
	CU_ASSERT_EQUAL(tlhttp_reason_status(TLHTTP_R_OK), 0);
	CU_ASSERT_EQUAL(tlhttp_reason_status(TLHTTP_R_LINE_TOO_LONG), 414);
	CU_ASSERT_EQUAL(tlhttp_reason_status(TLHTTP_R_COUNT), -EINVAL);
	CU_ASSERT_PTR_NULL(tlhttp_reason_name(TLHTTP_R_COUNT));
	CU_ASSERT_PTR_NULL(tlhttp_reason_text(TLHTTP_R_COUNT));
	CU_ASSERT_STRING_EQUAL(tlhttp_reason_name(TLHTTP_R_BARE_CR), "BARE_CR");
	for (unsigned i = 0; i < TLHTTP_R_COUNT; i++) {
		int s = tlhttp_reason_status(i);
		CU_ASSERT_TRUE(i == 0 ? s == 0 : (s == 400 || s == 405 || s == 414 || s == 431 || s == 505));
		CU_ASSERT_PTR_NOT_NULL(tlhttp_reason_name(i));
		CU_ASSERT_TRUE(tlhttp_reason_text(i) && tlhttp_reason_text(i)[0]);
		CU_ASSERT_TRUE(i == 0 || tlhttp_status_text(s) != NULL);
	}
}

/* ---- range ---- */

static void test_range(void)
{
	static const struct {
		const char *v;
		uint64_t size;
		int want;
		uint64_t first, last;
	} cases[] = {
		{ "bytes=0-499", 1000, 206, 0, 499 },
		{ "bytes=500-", 1000, 206, 500, 999 },
		{ "bytes=-200", 1000, 206, 800, 999 },
		{ "bytes=-2000", 1000, 206, 0, 999 },
		{ "bytes=0-0", 1000, 206, 0, 0 },
		{ "bytes=999-", 1000, 206, 999, 999 },
		{ "bytes=0-5000", 1000, 206, 0, 999 },
		{ "bytes=0-18446744073709551616000", 1000, 206, 0, 999 },
		{ "bytes=-18446744073709551616000", 1000, 206, 0, 999 },
		{ "BYTES=1-2", 1000, 206, 1, 2 },
		{ "bytes= 1-2 ,", 1000, 206, 1, 2 },
		{ "bytes=,,1-2,\t,", 1000, 206, 1, 2 },
		{ "bytes=1000-", 1000, 416, 0, 0 },
		{ "bytes=1000-2000", 1000, 416, 0, 0 },
		{ "bytes=18446744073709551616000-", 1000, 416, 0, 0 },
		{ "bytes=-0", 1000, 416, 0, 0 },
		{ "bytes=0-", 0, 416, 0, 0 },
		{ "bytes=-5", 0, 200, 0, 0 },
		{ "bytes=5-3", 1000, 200, 0, 0 },
		{ "bytes=0-1,2-3", 1000, 200, 0, 0 },
		{ "bytes=0-1, 5000-", 1000, 200, 0, 0 },
		{ "bytes=0-1,x", 1000, 200, 0, 0 },
		{ "bytes=", 1000, 200, 0, 0 },
		{ "bytes=,", 1000, 200, 0, 0 },
		{ "bytes", 1000, 200, 0, 0 },
		{ "bytes 0-1", 1000, 200, 0, 0 },
		{ "bytes =0-1", 1000, 200, 0, 0 },
		{ "items=0-1", 1000, 200, 0, 0 },
		{ "bytes=a-b", 1000, 200, 0, 0 },
		{ "bytes=0-1x", 1000, 200, 0, 0 },
		{ "bytes=0 -1", 1000, 200, 0, 0 },
		{ "bytes=--1", 1000, 200, 0, 0 },
		{ "bytes=-", 1000, 200, 0, 0 },
		{ "bytes=1", 1000, 200, 0, 0 },
		{ "bytes=+1-2", 1000, 200, 0, 0 },
		{ "", 1000, 200, 0, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t f = 77, l = 77;
		int rc = tlhttp_range_parse(cases[i].v, strlen(cases[i].v), cases[i].size, &f, &l);
		CU_ASSERT_EQUAL(rc, cases[i].want);
		if (rc == 206) {
			CU_ASSERT_EQUAL(f, cases[i].first);
			CU_ASSERT_EQUAL(l, cases[i].last);
		} else {
			/* Written only for 206. */
			CU_ASSERT_TRUE(f == 77 && l == 77);
		}
		if (rc != cases[i].want)
			fprintf(stderr, "\n  range \"%s\": %d\n", cases[i].v, rc);
	}
	uint64_t f, l;
	CU_ASSERT_EQUAL(tlhttp_range_parse(NULL, 3, 10, &f, &l), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_range_parse("bytes=0-1", 9, 10, NULL, &l), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_range_parse("bytes=0-1", 9, 10, &f, NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_range_parse(NULL, 0, 10, &f, &l), 200);
	/* Exactly its length is read. */
	char *v = copy(S("bytes=0-12"));
	CU_ASSERT_EQUAL(tlhttp_range_parse(v, 10, 100, &f, &l), 206);
	CU_ASSERT_EQUAL(l, 12);
	CU_ASSERT_EQUAL(tlhttp_range_parse(v, 9, 100, &f, &l), 206);
	CU_ASSERT_EQUAL(l, 1);
	free(v);
}

/* ---- preconditions and entity-tags ---- */

static void test_etag_format(void)
{
	static const struct {
		int64_t mtime;
		uint64_t size;
		const char *want;
	} cases[] = {
		{ 1700000000, 15, "\"6553f100-f\"" }, /* nginx's, for the same file */
		{ 0, 0, "\"0-0\"" },
		{ 1, 16, "\"1-10\"" },
		{ -1, UINT64_MAX, "\"ffffffffffffffff-ffffffffffffffff\"" },
		{ INT64_MIN, 255, "\"8000000000000000-ff\"" },
	};
	char out[TLHTTP_ETAG_MAX];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(out, '#', sizeof out);
		CU_ASSERT_EQUAL(tlhttp_etag_format(cases[i].mtime, cases[i].size, out),
				(int)strlen(cases[i].want));
		CU_ASSERT_STRING_EQUAL(out, cases[i].want);
	}
	/* The longest fills the buffer exactly. */
	CU_ASSERT_EQUAL(strlen("\"ffffffffffffffff-ffffffffffffffff\"") + 1, TLHTTP_ETAG_MAX);
	CU_ASSERT_EQUAL(tlhttp_etag_format(0, 0, NULL), -EINVAL);
}

#define TAG "\"6553f100-f\""

static void test_etag_match(void)
{
	static const struct {
		const char *v;
		int strong, weak; /* results of the strong and the weak comparison */
	} cases[] = {
		{ "*", TLHTTP_TAGS_STAR, TLHTTP_TAGS_STAR },
		{ TAG, 1, 1 },
		{ "W/" TAG, 0, 1 },
		{ "\"6553f100-e\"", 0, 0 },
		{ "\"6553F100-f\"", 0, 0 }, /* opaque: case counts */
		{ "\"x\", " TAG, 1, 1 },
		{ "\"x\",W/" TAG, 0, 1 },
		{ TAG ", W/" TAG, 1, 1 },
		{ ", ,\t" TAG " ,,", 1, 1 },
		{ "\"\"", 0, 0 },               /* an empty opaque-tag is a tag */
		{ "\"!#~\x80\xff\"", 0, 0 },  /* etagc's edges */
		{ "", 0, 0 },                   /* no tag */
		{ ",", 0, 0 },
		/* Bad syntax: the whole field, whatever matched before. */
		{ "6553f100-f", -EBADMSG, -EBADMSG },
		{ "\"6553f100-f", -EBADMSG, -EBADMSG },
		{ TAG " " TAG, -EBADMSG, -EBADMSG },
		{ TAG "x", -EBADMSG, -EBADMSG },
		{ "w/" TAG, -EBADMSG, -EBADMSG },
		{ "W" TAG, -EBADMSG, -EBADMSG },
		{ "W/ " TAG, -EBADMSG, -EBADMSG },
		{ "*, " TAG, -EBADMSG, -EBADMSG },
		{ TAG ", *", -EBADMSG, -EBADMSG },
		{ "**", -EBADMSG, -EBADMSG },
		{ TAG ", junk", -EBADMSG, -EBADMSG },
		{ "\"a b\"", -EBADMSG, -EBADMSG },  /* SP is not etagc */
		{ "\"a\x7f\"", -EBADMSG, -EBADMSG },
		{ "\"a\tb\"", -EBADMSG, -EBADMSG },
		{ "\"a\"\"b\"", -EBADMSG, -EBADMSG },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = strlen(cases[i].v);
		char *v = copy(cases[i].v, n); /* exactly its length is read */
		int s = tlhttp_etag_match(v, n, TAG, sizeof TAG - 1, 1);
		int w = tlhttp_etag_match(v, n, TAG, sizeof TAG - 1, 0);
		if (s != cases[i].strong || w != cases[i].weak)
			fprintf(stderr, "\n  tags '%s': strong %d, weak %d\n", cases[i].v, s, w);
		CU_ASSERT_EQUAL(s, cases[i].strong);
		CU_ASSERT_EQUAL(w, cases[i].weak);
		/* A representation without a tag: nothing matches, syntax
		 * still counts. */
		int none = tlhttp_etag_match(v, n, NULL, 0, 0);
		CU_ASSERT_EQUAL(none, cases[i].weak == 1 ? 0 : cases[i].weak);
		free(v);
	}
	CU_ASSERT_EQUAL(tlhttp_etag_match(NULL, 1, TAG, sizeof TAG - 1, 1), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_etag_match(S(TAG), NULL, 3, 1), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_etag_match(NULL, 0, TAG, sizeof TAG - 1, 1), TLHTTP_TAGS_NONE);
}

static void test_if_range(void)
{
	const int64_t now = 1714000000;
	const struct tlhttp_validators val = { .etag = TAG, .mtime = 784111777, .has_mtime = 1 };
	const struct tlhttp_validators nodate = { .etag = TAG, .mtime = 784111777 };
	const struct tlhttp_validators notag = { .mtime = 784111777, .has_mtime = 1 };

	CU_ASSERT_EQUAL(tlhttp_if_range_ok(NULL, 0, &val, now), 1);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sun, 06 Nov 1994 08:49:37 GMT"), &val, now), 1);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sunday, 06-Nov-94 08:49:37 GMT"), &val, now), 1);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sun Nov  6 08:49:37 1994"), &val, now), 1);
	/* A second off, either way: the file is not the one the client has. */
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sun, 06 Nov 1994 08:49:38 GMT"), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sun, 06 Nov 1994 08:49:36 GMT"), &val, now), 0);
	/* A date starting with W is a date, not a weak tag. */
	const struct tlhttp_validators wed = { .etag = TAG, .mtime = 1700006400, .has_mtime = 1 };
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Wed, 15 Nov 2023 00:00:00 GMT"), &wed, now), 1);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("Sun, 06 Nov 1994 08:49:37 GMT"), &nodate, now), 0);
	/* Tags: one strong tag, compared strongly. */
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S(TAG), &val, now), 1);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S(TAG), &notag, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("W/" TAG), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("\"abc\""), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S(TAG ", " TAG), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S(TAG " "), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("\"6553f100-f"), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("*"), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok("", 0, &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S("garbage"), &val, now), 0);
	CU_ASSERT_EQUAL(tlhttp_if_range_ok(S(TAG), NULL, now), -EINVAL);
}

/* Parses head (which must be accepted) and evaluates its preconditions. */
static int pc(const char *head, const struct tlhttp_validators *val, int64_t now, int *range_ok)
{
	struct tlhttp_req r;
	char *b;
	int rc;

	*range_ok = -1;
	CU_ASSERT_TRUE_FATAL(parse_checked(head, strlen(head), NULL, &r, &b) > 0);
	rc = tlhttp_preconditions(&r, val, now, range_ok);
	free(b);
	return rc;
}

static void test_preconditions(void)
{
#define MT "Tue, 14 Nov 2023 22:13:20 GMT" /* 1700000000 */
#define OLD "Tue, 14 Nov 2023 22:13:19 GMT"
#define NEW "Tue, 14 Nov 2023 22:13:21 GMT"
	static const struct {
		const char *fields;
		int want, range_ok; /* range_ok: -1 when not set (not 200) */
	} cases[] = {
		{ "", 200, 1 },
		{ "Range: bytes=0-1\r\n", 200, 1 },
		/* 1. If-Match */
		{ "If-Match: " TAG "\r\n", 200, 1 },
		{ "If-Match: *\r\n", 200, 1 },
		{ "If-Match: \"a\", \"b\"\r\n", 412, -1 },
		{ "If-Match: W/" TAG "\r\n", 412, -1 },
		{ "If-Match: bad\r\n", 412, -1 },
		{ "If-Match:\r\n", 412, -1 },
		{ "If-Match: \"a\"\r\nIf-Match: " TAG "\r\n", 200, 1 },
		{ "If-Match: \"a\"\r\nIf-Match: \"b\"\r\n", 412, -1 },
		{ "If-Match: " TAG "\r\nIf-Match: bad\r\n", 412, -1 },
		{ "If-Match: *\r\nIf-Match: " TAG "\r\n", 412, -1 },
		{ "If-Match: \r\nIf-Match: " TAG "\r\n", 200, 1 },
		/* 2. If-Unmodified-Since, only without If-Match */
		{ "If-Unmodified-Since: " OLD "\r\n", 412, -1 },
		{ "If-Unmodified-Since: " MT "\r\n", 200, 1 },
		{ "If-Unmodified-Since: " NEW "\r\n", 200, 1 },
		{ "If-Unmodified-Since: Fri, 01 Jan 9999 00:00:00 GMT\r\n", 200, 1 },
		{ "If-Unmodified-Since: soon\r\n", 200, 1 },
		{ "If-Unmodified-Since: " OLD "\r\nIf-Unmodified-Since: " OLD "\r\n", 200, 1 },
		{ "If-Match: " TAG "\r\nIf-Unmodified-Since: " OLD "\r\n", 200, 1 },
		{ "If-Match: *\r\nIf-Unmodified-Since: " OLD "\r\n", 200, 1 },
		/* 3. If-None-Match */
		{ "If-None-Match: *\r\n", 304, -1 },
		{ "If-None-Match: " TAG "\r\n", 304, -1 },
		{ "If-None-Match: W/" TAG "\r\n", 304, -1 },
		{ "If-None-Match: \"a\"\r\n", 200, 1 },
		{ "If-None-Match: bad " TAG "\r\n", 200, 1 },
		{ "If-None-Match: \"a\"\r\nIf-None-Match: W/" TAG "\r\n", 304, -1 },
		{ "If-None-Match: *\r\nIf-None-Match: *\r\n", 200, 1 },
		/* 4. If-Modified-Since, only without If-None-Match */
		{ "If-Modified-Since: " MT "\r\n", 304, -1 },
		{ "If-Modified-Since: " NEW "\r\n", 304, -1 },
		{ "If-Modified-Since: " OLD "\r\n", 200, 1 },
		{ "If-Modified-Since: Fri, 01 Jan 9999 00:00:00 GMT\r\n", 200, 1 }, /* after now */
		{ "If-Modified-Since: " MT "\r\nIf-None-Match: \"a\"\r\n", 200, 1 },
		{ "If-Modified-Since: " MT "\r\nIf-None-Match: bad\r\n", 200, 1 },
		{ "If-Modified-Since: " OLD "\r\nIf-None-Match: " TAG "\r\n", 304, -1 },
		/* The order between them. */
		{ "If-None-Match: *\r\nIf-Match: \"a\"\r\n", 412, -1 },
		{ "If-None-Match: " TAG "\r\nIf-Unmodified-Since: " OLD "\r\n", 412, -1 },
		{ "If-Modified-Since: " MT "\r\nIf-Unmodified-Since: " OLD "\r\n", 412, -1 },
		{ "If-Match: " TAG "\r\nIf-None-Match: " TAG "\r\n", 304, -1 },
		{ "If-Modified-Since: " MT "\r\nRange: bytes=0-1\r\nIf-Range: \"a\"\r\n", 304, -1 },
		/* 5. If-Range */
		{ "Range: bytes=0-1\r\nIf-Range: " TAG "\r\n", 200, 1 },
		{ "Range: bytes=0-1\r\nIf-Range: W/" TAG "\r\n", 200, 0 },
		{ "Range: bytes=0-1\r\nIf-Range: " MT "\r\n", 200, 1 },
		{ "Range: bytes=0-1\r\nIf-Range: " OLD "\r\n", 200, 0 },
		{ "If-Range: \"a\"\r\n", 200, 1 }, /* no Range: nothing to decide */
		{ "If-Match: " TAG "\r\nRange: bytes=0-1\r\nIf-Range: \"a\"\r\n", 200, 0 },
	};
	const struct tlhttp_validators val = { .etag = TAG, .mtime = 1700000000, .has_mtime = 1 };
	const int64_t now = 1714000000;
	char head[512];
	int range_ok;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(head, sizeof head, "GET / HTTP/1.1\r\nHost: a\r\n%s\r\n", cases[i].fields);
		int rc = pc(head, &val, now, &range_ok);
		if (rc != cases[i].want || range_ok != cases[i].range_ok)
			fprintf(stderr, "\n  %s: %d, range_ok %d\n", cases[i].fields, rc, range_ok);
		CU_ASSERT_EQUAL(rc, cases[i].want);
		CU_ASSERT_EQUAL(range_ok, cases[i].range_ok);
		/* HEAD: the same. */
		snprintf(head, sizeof head, "HEAD / HTTP/1.1\r\nHost: a\r\n%s\r\n", cases[i].fields);
		CU_ASSERT_EQUAL(pc(head, &val, now, &range_ok), cases[i].want);
	}

	/* A representation with neither tag nor date (tlhttp --body): only
	 * "*" matches, and the dates are ignored. */
	const struct tlhttp_validators none = { 0 };
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: *\r\n\r\n", &none, now, &range_ok), 304);
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-None-Match: " TAG "\r\n\r\n", &none, now, &range_ok), 200);
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-Match: *\r\n\r\n", &none, now, &range_ok), 200);
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-Match: " TAG "\r\n\r\n", &none, now, &range_ok), 412);
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-Unmodified-Since: " OLD "\r\n\r\n", &none, now, &range_ok), 200);
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: " NEW "\r\n\r\n", &none, now, &range_ok), 200);
	/* A file modified in the future: If-Modified-Since of now is not
	 * "not modified since". */
	const struct tlhttp_validators future = { .etag = TAG, .mtime = now + 100, .has_mtime = 1 };
	CU_ASSERT_EQUAL(pc("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Wed, 24 Apr 2024 23:06:40 GMT\r\n\r\n",
			   &future, now, &range_ok), 200);

	struct tlhttp_req r;
	tlhttp_req_init(&r, NULL);
	CU_ASSERT_EQUAL(tlhttp_preconditions(NULL, &val, now, &range_ok), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_preconditions(&r, NULL, now, &range_ok), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_preconditions(&r, &val, now, NULL), -EINVAL);
#undef MT
#undef OLD
#undef NEW
}

#undef TAG

/* ---- dates ---- */

static void test_date_format(void)
{
	static const struct {
		int64_t t;
		const char *s;
	} cases[] = {
		{ 0, "Thu, 01 Jan 1970 00:00:00 GMT" },
		{ 784111777, "Sun, 06 Nov 1994 08:49:37 GMT" },
		{ -1, "Wed, 31 Dec 1969 23:59:59 GMT" },
		{ 951782400, "Tue, 29 Feb 2000 00:00:00 GMT" },
		{ 951868799, "Tue, 29 Feb 2000 23:59:59 GMT" },
		{ 4107542400, "Mon, 01 Mar 2100 00:00:00 GMT" },
		{ TLHTTP_TIME_MIN, "Mon, 01 Jan 0001 00:00:00 GMT" },
		{ TLHTTP_TIME_MAX, "Fri, 31 Dec 9999 23:59:59 GMT" },
	};
	char out[TLHTTP_DATE_LEN + 1];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(out, 0, sizeof out);
		CU_ASSERT_EQUAL(tlhttp_date_format(cases[i].t, out), TLHTTP_DATE_LEN);
		CU_ASSERT_STRING_EQUAL(out, cases[i].s);
	}
	CU_ASSERT_EQUAL(tlhttp_date_format(TLHTTP_TIME_MIN - 1, out), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_date_format(TLHTTP_TIME_MAX + 1, out), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_date_format(0, NULL), -EINVAL);

	/* Against the C library, over random times from 1900 to 9999. */
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < 200000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int64_t t = -2208988800LL + (int64_t)(x % (uint64_t)(TLHTTP_TIME_MAX + 2208988800LL));
		time_t tt = (time_t)t;
		struct tm tm;
		char want[64];
		gmtime_r(&tt, &tm);
		strftime(want, sizeof want, "%a, %d %b %Y %H:%M:%S GMT", &tm);
		memset(out, 0, sizeof out);
		tlhttp_date_format(t, out);
		if (strcmp(out, want)) {
			CU_FAIL("date differs from gmtime");
			fprintf(stderr, "\n  %lld: %s vs %s\n", (long long)t, out, want);
			break;
		}
		int64_t back;
		if (tlhttp_date_parse(out, TLHTTP_DATE_LEN, 0, &back) || back != t) {
			CU_FAIL("date does not round-trip");
			break;
		}
	}
}

static void test_date_parse(void)
{
	/* now = 2024-04-25 */
	const int64_t now = 1714000000;
	static const struct {
		const char *s;
		int64_t want; /* INT64_MIN: invalid */
	} cases[] = {
		{ "Sun, 06 Nov 1994 08:49:37 GMT", 784111777 },
		{ "Sunday, 06-Nov-94 08:49:37 GMT", 784111777 },
		{ "Sun Nov  6 08:49:37 1994", 784111777 },
		{ "Sun Nov 06 08:49:37 1994", 784111777 },
		/* the day name is not checked against the date */
		{ "Mon, 06 Nov 1994 08:49:37 GMT", 784111777 },
		{ "Wednesday, 06-Nov-94 08:49:37 GMT", 784111777 },
		/* rfc850's two-digit year: within 50 years of now's */
		{ "Thursday, 01-Jan-70 00:00:00 GMT", 3155760000 }, /* 2070 */
		{ "Thursday, 01-Jan-75 00:00:00 GMT", 157766400 },  /* 1975 */
		{ "Tuesday, 29-Feb-00 00:00:00 GMT", 951782400 },   /* 2000 */
		{ "Tue, 29 Feb 2000 00:00:00 GMT", 951782400 },
		{ "Thu, 01 Jan 1970 00:00:60 GMT", 60 },
		{ "Mon, 01 Jan 0001 00:00:00 GMT", TLHTTP_TIME_MIN },
		{ "Fri, 31 Dec 9999 23:59:59 GMT", TLHTTP_TIME_MAX },
		{ "Thu, 29 Feb 1900 00:00:00 GMT", INT64_MIN },
		{ "Thu, 31 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Thu, 00 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 24:00:00 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 08:60:00 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 08:49:61 GMT", INT64_MIN },
		{ "Sun, 06 Nov 0000 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 08:49:37 gmt", INT64_MIN },
		{ "Sun, 06 Nov 1994 08:49:37 UTC", INT64_MIN },
		{ "sun, 06 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sux, 06 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 6 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 08:49:37 GMT ", INT64_MIN },
		{ " Sun, 06 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 Nov 1994 08-49-37 GMT", INT64_MIN },
		{ "Sun,_06 Nov 1994 08:49:37 GMT", INT64_MIN },
		{ "Sun, 06 Nov 19a4 08:49:37 GMT", INT64_MIN },
		{ "Sunday, 06-Nov-1994 08:49:37 GMT", INT64_MIN },
		{ "Sunday, 06 Nov 94 08:49:37 GMT", INT64_MIN },
		{ "Sund, 06-Nov-94 08:49:37 GMT", INT64_MIN },
		{ "Sunday, 06-Nov-94 08:49:37 UTC", INT64_MIN },
		{ "Sun Nov 6 08:49:37 1994", INT64_MIN },
		{ "Sun Nov  6 08:49:37 1994 ", INT64_MIN },
		{ "Sun Nov  x 08:49:37 1994", INT64_MIN },
		{ "Sun Nov 31 08:49:37 1994", INT64_MIN },
		{ "", INT64_MIN },
		{ "1714000000", INT64_MIN },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t t = 12345;
		char *s = copy(cases[i].s, strlen(cases[i].s));
		int rc = tlhttp_date_parse(s, strlen(cases[i].s), now, &t);
		if (cases[i].want == INT64_MIN) {
			CU_ASSERT_EQUAL(rc, -EINVAL);
		} else {
			CU_ASSERT_EQUAL(rc, 0);
			CU_ASSERT_EQUAL(t, cases[i].want);
		}
		if ((rc == 0) != (cases[i].want != INT64_MIN) || (rc == 0 && t != cases[i].want))
			fprintf(stderr, "\n  date \"%s\": %d %lld\n", cases[i].s, rc, (long long)t);
		free(s);
	}
	int64_t t;
	/* In 2090: "94" is 2094 (ahead, but not by more than 50 years), "40"
	 * is 2140 (2040 would be 50 years back), "41" is 2041. */
	const int64_t y2090 = 3786912000; /* 2090-01-01 */
	CU_ASSERT_EQUAL(tlhttp_date_parse(S("Sunday, 06-Nov-94 08:49:37 GMT"), y2090, &t), 0);
	CU_ASSERT_EQUAL(t, 3939871777);
	CU_ASSERT_EQUAL(tlhttp_date_parse(S("Sunday, 06-Nov-40 08:49:37 GMT"), y2090, &t), 0);
	char out[TLHTTP_DATE_LEN + 1] = { 0 };
	tlhttp_date_format(t, out);
	CU_ASSERT_STRING_EQUAL(out, "Sun, 06 Nov 2140 08:49:37 GMT");
	CU_ASSERT_EQUAL(tlhttp_date_parse(S("Sunday, 06-Nov-41 08:49:37 GMT"), y2090, &t), 0);
	tlhttp_date_format(t, out);
	CU_ASSERT_STRING_EQUAL(out, "Wed, 06 Nov 2041 08:49:37 GMT");
	CU_ASSERT_EQUAL(tlhttp_date_parse(NULL, 3, now, &t), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_date_parse(S("Sun, 06 Nov 1994 08:49:37 GMT"), now, NULL), -EINVAL);
}

static void test_date_cache(void)
{
	struct tlhttp_date_cache c;

	CU_ASSERT_EQUAL(tlhttp_date_cache_init(NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_date_cache_init(&c), 0);
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(&c, 784111777), 1);
	CU_ASSERT_STRING_EQUAL(c.line, "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
	CU_ASSERT_EQUAL(strlen(c.line), TLHTTP_DATE_LINE_LEN);
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(&c, 784111777), 0);
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(&c, 784111778), 1);
	CU_ASSERT_STRING_EQUAL(c.line, "Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(&c, TLHTTP_TIME_MAX + 1), -EINVAL);
	CU_ASSERT_STRING_EQUAL(c.line, "Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(NULL, 0), -EINVAL);
	/* A clock going back is followed too. */
	CU_ASSERT_EQUAL(tlhttp_date_cache_update(&c, 0), 1);
	CU_ASSERT_STRING_EQUAL(c.line, "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
}

/* ---- MIME ---- */

static void test_mime(void)
{
	static const struct {
		const char *name, *type;
	} cases[] = {
		{ "index.html", "text/html; charset=utf-8" },
		{ "a/b.HTM", "text/html; charset=utf-8" },
		{ "s.css", "text/css; charset=utf-8" },
		{ "app.js", "text/javascript; charset=utf-8" },
		{ "m.mjs", "text/javascript; charset=utf-8" },
		{ "d.json", "application/json" },
		{ "r.txt", "text/plain; charset=utf-8" },
		{ "f.xml", "application/xml" },
		{ "i.svg", "image/svg+xml" },
		{ "i.png", "image/png" },
		{ "i.jpg", "image/jpeg" },
		{ "i.JPEG", "image/jpeg" },
		{ "i.gif", "image/gif" },
		{ "i.webp", "image/webp" },
		{ "favicon.ico", "image/x-icon" },
		{ "m.wasm", "application/wasm" },
		{ "doc.pdf", "application/pdf" },
		{ "f.woff", "font/woff" },
		{ "f.woff2", "font/woff2" },
		{ "v.mp4", "video/mp4" },
		{ "v.webm", "video/webm" },
		{ "archive.tar.gz", "application/octet-stream" },
		{ "Makefile", "application/octet-stream" },
		{ "dir.html/file", "application/octet-stream" },
		{ ".html", "application/octet-stream" },
		{ "a/.html", "application/octet-stream" },
		{ "a.", "application/octet-stream" },
		{ "a.htmlx", "application/octet-stream" },
		{ "a.woff22", "application/octet-stream" },
		{ "", "application/octet-stream" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *t = tlhttp_mime_type(cases[i].name, strlen(cases[i].name));
		CU_ASSERT_STRING_EQUAL(t, cases[i].type);
	}
	CU_ASSERT_STRING_EQUAL(tlhttp_mime_type(NULL, 4), "application/octet-stream");
	/* Only n bytes count. */
	CU_ASSERT_STRING_EQUAL(tlhttp_mime_type("a.css.png", 5), "text/css; charset=utf-8");
}

/* ---- response heads ---- */

/* Formats r into buffers of every size: too small is -ENOBUFS and nothing
 * past the size is touched; the exact size and more give want. */
static void head_is(const struct tlhttp_resp *r, const char *want)
{
	size_t n = strlen(want);
	char buf[1024];

	for (size_t cap = 0; cap <= n + 1; cap++) {
		memset(buf, '#', sizeof buf);
		int rc = tlhttp_head_format(cap ? buf : NULL, cap, r);
		if (cap < n) {
			CU_ASSERT_EQUAL(rc, -ENOBUFS);
		} else {
			CU_ASSERT_EQUAL(rc, (int)n);
			CU_ASSERT_TRUE(rc == (int)n && !memcmp(buf, want, n));
		}
		for (size_t k = cap; k < sizeof buf; k++)
			if (buf[k] != '#') {
				CU_FAIL("written past cap");
				break;
			}
	}
}

static void test_head(void)
{
	struct tlhttp_date_cache dc;

	tlhttp_date_cache_init(&dc);
	tlhttp_date_cache_update(&dc, 784111777);

	struct tlhttp_resp r = { .status = 200, .date = &dc, .server = "tlhttp",
				 .content_type = "text/html; charset=utf-8", .content_length = 612,
				 .has_last_modified = 1, .last_modified = 0 };
	head_is(&r, "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: tlhttp\r\n"
		    "Content-Type: text/html; charset=utf-8\r\nContent-Length: 612\r\n"
		    "Last-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 206, .content_length = 100, .content_range = TLHTTP_CRANGE_BYTES,
				  .range_first = 0, .range_last = 99, .range_size = 18446744073709551615ull,
				  .connection = TLHTTP_CONN_KEEP_ALIVE };
	head_is(&r, "HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\n"
		    "Content-Range: bytes 0-99/18446744073709551615\r\nConnection: keep-alive\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 416, .content_length = 0,
				  .content_range = TLHTTP_CRANGE_UNSATISFIED, .range_size = 1000,
				  .connection = TLHTTP_CONN_CLOSE };
	head_is(&r, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\n"
		    "Content-Range: bytes */1000\r\nConnection: close\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 405, .content_length = 0, .allow = 1,
				  .connection = TLHTTP_CONN_CLOSE, .date = &dc };
	head_is(&r, "HTTP/1.1 405 Method Not Allowed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
		    "Content-Length: 0\r\nAllow: GET, HEAD\r\nConnection: close\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 304, .content_length = -1 };
	head_is(&r, "HTTP/1.1 304 Not Modified\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 206, .content_length = 2, .has_last_modified = 1,
				  .last_modified = 1700000000, .etag = "\"6553f100-f\"",
				  .content_range = TLHTTP_CRANGE_BYTES, .range_first = 0, .range_last = 1,
				  .range_size = 15 };
	head_is(&r, "HTTP/1.1 206 Partial Content\r\nContent-Length: 2\r\n"
		    "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\nETag: \"6553f100-f\"\r\n"
		    "Content-Range: bytes 0-1/15\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 412, .content_length = 24 };
	head_is(&r, "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 24\r\n\r\n");

	r = (struct tlhttp_resp){ .status = 431, .content_length = 9223372036854775807LL };
	head_is(&r, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 9223372036854775807\r\n\r\n");

	static const int statuses[] = { 200, 206, 304, 400, 403, 404, 405, 408, 412, 413,
					414, 416, 417, 431, 500, 501, 503, 505 };
	for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
		CU_ASSERT_PTR_NOT_NULL(tlhttp_status_text(statuses[i]));
	CU_ASSERT_PTR_NULL(tlhttp_status_text(299));
	CU_ASSERT_PTR_NULL(tlhttp_status_text(0));
}

static void test_head_invalid(void)
{
	struct tlhttp_date_cache never;
	char buf[512];
	const struct tlhttp_resp ok = { .status = 200, .content_length = 1 };
	struct tlhttp_resp r;

	tlhttp_date_cache_init(&never);
	CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, &ok), 38);
	CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_head_format(NULL, 10, &ok), -EINVAL);
#define BAD(field, value)                                                     \
	do {                                                                  \
		r = ok;                                                       \
		r.field = value;                                              \
		CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, &r), -EINVAL); \
	} while (0)
	BAD(status, 299);
	BAD(status, 1200);
	BAD(server, "a\r\nSet-Cookie: x");
	BAD(server, "a\n");
	BAD(content_type, "text/html\r\n");
	BAD(content_type, "text/\x7fhtml");
	BAD(etag, "\"a\"\r\nSet-Cookie: x");
	BAD(date, &never);
	BAD(connection, 3);
	BAD(content_range, 3);
	r = ok;
	r.has_last_modified = 1;
	r.last_modified = TLHTTP_TIME_MAX + 1;
	CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, &r), -EINVAL);
	r = ok;
	r.content_range = TLHTTP_CRANGE_BYTES;
	r.range_first = 5, r.range_last = 4, r.range_size = 10;
	CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, &r), -EINVAL);
	r.range_first = 0, r.range_last = 10, r.range_size = 10;
	CU_ASSERT_EQUAL(tlhttp_head_format(buf, sizeof buf, &r), -EINVAL);
	r.range_last = 9;
	CU_ASSERT_TRUE(tlhttp_head_format(buf, sizeof buf, &r) > 0);
	/* A tab is allowed in a value. */
	r = ok;
	r.server = "a\tb";
	CU_ASSERT_TRUE(tlhttp_head_format(buf, sizeof buf, &r) > 0);
#undef BAD
}

/* ---- paths ---- */

static void test_path_normalize(void)
{
	static const struct {
		const char *in, *out; /* out NULL: err */
		int err;
	} cases[] = {
		{ "/", ".", 0 },
		{ "/a.txt", "a.txt", 0 },
		{ "/dir/", "dir/", 0 },
		{ "/dir", "dir", 0 },
		{ "/a/./b", "a/b", 0 },
		{ "/a//b", "a/b", 0 },
		{ "//a///b//", "a/b/", 0 },
		{ "/a/../b", "b", 0 },
		{ "/a/b/../../c", "c", 0 },
		{ "/a/.", "a/", 0 },
		{ "/a/..", ".", 0 },
		{ "/a/b/..", "a/", 0 },
		{ "/./", ".", 0 },
		{ "/...", "...", 0 },
		{ "/..a/a..", "..a/a..", 0 },
		{ "/a%20b", "a b", 0 },
		{ "/%41%62%7e", "Ab~", 0 },
		{ "/a?b/../..", "a", 0 },
		{ "/?x", ".", 0 },
		{ "/a%3Fb", "a?b", 0 },
		{ "/%2e/a", "a", 0 },
		{ "/a/%2E%2e/b", "b", 0 },
		{ "/a%5cb", "a\\b", 0 },
		{ "/..", NULL, -ENOENT },
		{ "/../a", NULL, -ENOENT },
		{ "/a/../../b", NULL, -ENOENT },
		{ "/%2e%2e/x", NULL, -ENOENT },
		{ "/%2E%2E", NULL, -ENOENT },
		{ "/.%2e/", NULL, -ENOENT },
		{ "/a/b/../../../etc/passwd", NULL, -ENOENT },
		{ "/a%2Fb", NULL, -ENOENT },
		{ "/a%2fb", NULL, -ENOENT },
		{ "/%2F", NULL, -ENOENT },
		{ "/%00", NULL, -EINVAL },
		{ "/a%00.html", NULL, -EINVAL },
		{ "/%4", NULL, -EINVAL },
		{ "/%", NULL, -EINVAL },
		{ "/%zz", NULL, -EINVAL },
		{ "/%g0", NULL, -EINVAL },
		{ "a", NULL, -EINVAL },
		{ "", NULL, -EINVAL },
		{ "?/", NULL, -EINVAL },
	};
	char out[64];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *in = copy(cases[i].in, strlen(cases[i].in));
		memset(out, '#', sizeof out);
		int rc = tlhttp_path_normalize(in, strlen(cases[i].in), out, sizeof out);
		if (cases[i].out) {
			CU_ASSERT_EQUAL(rc, (int)strlen(cases[i].out));
			CU_ASSERT_TRUE(rc >= 0 && !strcmp(out, cases[i].out));
		} else {
			CU_ASSERT_EQUAL(rc, cases[i].err);
		}
		if (cases[i].out ? rc < 0 || strcmp(out, cases[i].out) : rc != cases[i].err)
			fprintf(stderr, "\n  path \"%s\": %d \"%.*s\"\n", cases[i].in, rc, rc > 0 ? rc : 0, out);
		free(in);
	}
	/* The room: "abc" needs 4 bytes, and its segment's '/' one more
	 * while it is built. */
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/abc"), out, 5), 3);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/abc"), out, 4), -ENAMETOOLONG);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/"), out, 2), 1);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/"), out, 1), -ENAMETOOLONG);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/a"), out, 0), -ENAMETOOLONG);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(NULL, 1, out, 8), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_path_normalize(S("/a"), NULL, 8), -EINVAL);
	/* Only n bytes are read. */
	CU_ASSERT_EQUAL(tlhttp_path_normalize("/ab/../c", 3, out, sizeof out), 2);
	CU_ASSERT_STRING_EQUAL(out, "ab");
}

static char tmp_root[300], tmp_top[256];

static void put_file(const char *dir, const char *name, const char *body)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(body, f);
	fclose(f);
}

/* top/outside.txt, top/root/{index.html, a.txt, dir/index.html, empty/,
 * sub/b.txt, link_out, link_in, link_dir, fifo, null, dir_bad/index.html/}. */
static int make_tree(void)
{
	char p[512];
	const char *t = getenv("TMPDIR");

	snprintf(tmp_top, sizeof tmp_top, "%s/tlhttp-test.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmp_top))
		return -1;
	snprintf(tmp_root, sizeof tmp_root, "%s/root", tmp_top);
	put_file(tmp_top, "outside.txt", "secret\n");
	if (mkdir(tmp_root, 0755))
		return -1;
	put_file(tmp_root, "index.html", "<p>root</p>\n");
	put_file(tmp_root, "a.txt", "hello\n");
	snprintf(p, sizeof p, "%s/dir", tmp_root);
	mkdir(p, 0755);
	put_file(p, "index.html", "<p>dir</p>\n");
	snprintf(p, sizeof p, "%s/empty", tmp_root);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/sub", tmp_root);
	mkdir(p, 0755);
	put_file(p, "b.txt", "bee\n");
	snprintf(p, sizeof p, "%s/dir_bad", tmp_root);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/dir_bad/index.html", tmp_root);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/link_out", tmp_root);
	if (symlink("../outside.txt", p))
		return -1;
	snprintf(p, sizeof p, "%s/link_abs", tmp_root);
	if (symlink("/etc/hostname", p))
		return -1;
	snprintf(p, sizeof p, "%s/link_in", tmp_root);
	if (symlink("a.txt", p))
		return -1;
	snprintf(p, sizeof p, "%s/link_dir", tmp_root);
	if (symlink("dir", p))
		return -1;
	snprintf(p, sizeof p, "%s/fifo", tmp_root);
	if (mkfifo(p, 0644))
		return -1;
	return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(p);
}

static void rm_tree(void)
{
	if (tmp_top[0] && nftw(tmp_top, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
		fprintf(stderr, "test_http: could not remove %s\n", tmp_top);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "test_http: an open blocked (a FIFO waiting for a writer?)\n";
	if (write(2, msg, sizeof msg - 1) < 0)
		_exit(3);
	_exit(2);
}

/* Opens the URL path url under root: normalise, then open. */
static int open_url(int root, const char *url, struct tlhttp_file *f)
{
	char name[256];
	int rc = tlhttp_path_normalize(url, strlen(url), name, sizeof name);
	return rc < 0 ? rc : tlhttp_path_open(root, name, f);
}

static void test_path_open(void)
{
	struct tlhttp_file f;
	int root, rc;

	CU_ASSERT_EQUAL_FATAL(make_tree(), 0);
	root = tlhttp_root_open(tmp_root);
	if (root == -ENOSYS && RUNNING_ON_VALGRIND) {
		/* valgrind 3.19 does not know openat2: it answers ENOSYS, and
		 * nothing is served, which "no openat2" checks. */
		printf("\n  SKIP open beneath the root: valgrind has no openat2\n");
		return;
	}
	CU_ASSERT_TRUE_FATAL(root >= 0);
	signal(SIGALRM, on_alarm);
	alarm(10);

	static const struct {
		const char *url;
		int err, index;
		uint64_t size;
	} cases[] = {
		{ "/a.txt", 0, 0, 6 },
		{ "/a.txt?x=1", 0, 0, 6 },
		{ "/", 0, 1, 12 },
		{ "/dir", 0, 1, 11 },
		{ "/dir/", 0, 1, 11 },
		{ "/dir/index.html", 0, 0, 11 },
		{ "/sub/b.txt", 0, 0, 4 },
		{ "/sub/../a.txt", 0, 0, 6 },
		{ "/%61.txt", 0, 0, 6 },
		{ "/missing", -ENOENT, 0, 0 },
		{ "/empty/", -ENOENT, 0, 0 },
		{ "/empty", -ENOENT, 0, 0 },
		{ "/sub/", -ENOENT, 0, 0 },
		{ "/a.txt/", -ENOTDIR, 0, 0 },
		{ "/a.txt/x", -ENOTDIR, 0, 0 },
		{ "/../outside.txt", -ENOENT, 0, 0 },
		{ "/%2e%2e/outside.txt", -ENOENT, 0, 0 },
		{ "/dir/%2e%2e/%2e%2e/outside.txt", -ENOENT, 0, 0 },
		{ "/link_out", -ELOOP, 0, 0 },
		{ "/link_abs", -ELOOP, 0, 0 },
		{ "/link_in", -ELOOP, 0, 0 },
		{ "/link_dir/index.html", -ELOOP, 0, 0 },
		{ "/link_dir/", -ELOOP, 0, 0 },
		{ "/fifo", -ENODEV, 0, 0 },
		{ "/dir_bad/", -ENODEV, 0, 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&f, 0, sizeof f);
		f.fd = -1;
		rc = open_url(root, cases[i].url, &f);
		CU_ASSERT_EQUAL(rc, cases[i].err);
		if (rc != cases[i].err)
			fprintf(stderr, "\n  open %s: %d, want %d\n", cases[i].url, rc, cases[i].err);
		if (rc == 0) {
			struct stat st;
			CU_ASSERT_EQUAL(f.size, cases[i].size);
			CU_ASSERT_EQUAL(f.index, cases[i].index);
			CU_ASSERT_EQUAL(fstat(f.fd, &st), 0);
			CU_ASSERT_TRUE(S_ISREG(st.st_mode));
			CU_ASSERT_EQUAL(f.mtime, (int64_t)st.st_mtim.tv_sec);
			CU_ASSERT_TRUE(fcntl(f.fd, F_GETFD) & FD_CLOEXEC);
			close(f.fd);
		} else {
			CU_ASSERT_EQUAL(f.fd, -1);
			CU_ASSERT_EQUAL(tlhttp_path_status(rc), 404);
		}
	}

	/* Names that never come out of tlhttp_path_normalize: the kernel
	 * stops them too. */
	CU_ASSERT_EQUAL(tlhttp_path_open(root, "../outside.txt", &f), -EXDEV);
	CU_ASSERT_EQUAL(tlhttp_path_open(root, "dir/../../outside.txt", &f), -EXDEV);
	CU_ASSERT_EQUAL(tlhttp_path_open(root, "/etc/hostname", &f), -EXDEV);
	CU_ASSERT_EQUAL(tlhttp_path_open(root, "a.txt", NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_path_open(root, NULL, &f), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_path_open(-1, "a.txt", &f), -EINVAL);

	/* A device node: 404 like the FIFO. Making one needs CAP_MKNOD (or a
	 * kernel and filesystem that let this user namespace make one): only
	 * that refusal is a skip. */
	char p[512];
	snprintf(p, sizeof p, "%s/null", tmp_root);
	if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) {
		CU_ASSERT_EQUAL(tlhttp_path_open(root, "null", &f), -ENODEV);
	} else if (errno == EPERM) {
		printf("\n  SKIP device node case: mknod: %s (the FIFO case covers non-regular files)\n",
		       strerror(errno));
	} else {
		CU_FAIL("mknod of a device node failed (not for want of a capability)");
		fprintf(stderr, "\n  mknod %s: %s\n", p, strerror(errno));
	}
	alarm(0);

	/* No descriptor leaked: the next one is the lowest free. */
	int probe = dup(0);
	CU_ASSERT_TRUE(probe == root + 1);
	close(probe);
	close(root);

	CU_ASSERT_EQUAL(tlhttp_root_open(NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_root_open("/nonexistent/tlhttp"), -ENOENT);
	snprintf(p, sizeof p, "%s/a.txt", tmp_root);
	CU_ASSERT_EQUAL(tlhttp_root_open(p), -ENOTDIR);

	struct open_how how;
	CU_ASSERT_EQUAL(tlhttp_open_how(NULL), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_open_how(&how), 0);
	CU_ASSERT_EQUAL(how.resolve, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	CU_ASSERT_EQUAL(how.flags, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	CU_ASSERT_EQUAL(how.mode, 0);
}

#if defined(__x86_64__)
#define AUDIT_ARCH_SELF AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_SELF AUDIT_ARCH_AARCH64
#endif

/* With openat2 refused as -ENOSYS (an old kernel, or a filter), nothing is
 * served: tlhttp_root_open says so. Run in a child: a filter stays. */
static void test_no_openat2(void)
{
#ifdef AUDIT_ARCH_SELF
	pid_t pid = fork();
	CU_ASSERT_TRUE_FATAL(pid >= 0);
	if (pid == 0) {
		struct sock_filter code[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_SELF, 1, 0),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = { .len = sizeof code / sizeof code[0], .filter = code };
		struct tlhttp_file f;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
			_exit(10);
		if (tlhttp_root_open(tmp_root) != -ENOSYS)
			_exit(11);
		int dir = open(tmp_root, O_PATH | O_DIRECTORY);
		if (dir < 0 || tlhttp_path_open(dir, "a.txt", &f) != -ENOSYS)
			_exit(12);
		if (tlhttp_path_status(-ENOSYS) != 500)
			_exit(13);
		_exit(0);
	}
	int st;
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT_TRUE(WIFEXITED(st));
	CU_ASSERT_EQUAL(WEXITSTATUS(st), 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fprintf(stderr, "\n  child: status %#x\n", st);
#else
	printf("\n  SKIP no-openat2 case: no seccomp architecture constant for this CPU\n");
#endif
}

/* The open-file cache, on a clock of its own (ns). */
static void write_at(const char *dir, const char *name, const char *body, int replace)
{
	char p[600], tmp[620];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s.new", p);
	FILE *f = fopen(replace ? tmp : p, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs(body, f);
	fclose(f);
	if (replace)
		CU_ASSERT_EQUAL(rename(tmp, p), 0);
}

static void test_fcache(void)
{
	char dir[256], p[600];
	const char *t = getenv("TMPDIR");
	struct tlhttp_fcache *c;
	struct tlhttp_file f, g;
	uint32_t r1, r2;
	struct stat st;
	const uint64_t s1 = 1000000000ull;
	uint64_t now = 5 * s1;

	snprintf(dir, sizeof dir, "%s/tlhttp-fcache.XXXXXX", t && *t ? t : "/tmp");
	CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
	int root = tlhttp_root_open(dir);
	if (root == -ENOSYS && RUNNING_ON_VALGRIND) {
		printf("\n  SKIP open-file cache: valgrind has no openat2\n");
		rmdir(dir);
		return;
	}
	CU_ASSERT_TRUE_FATAL(root >= 0);
	CU_ASSERT_EQUAL(tlhttp_fcache_new(&c, root, 3), -EINVAL);
	CU_ASSERT_EQUAL(tlhttp_fcache_new(&c, -1, 4), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_new(&c, root, 1), 0); /* one set: 4 ways */
	write_at(dir, "a", "one", 0);

	/* A second get is the same descriptor, fstat'ed again: a file written
	 * in place shows its new size at once. */
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now, &f, &r1), 0);
	CU_ASSERT_TRUE(r1 != 0 && f.size == 3);
	tlhttp_fcache_put(c, r1, f.fd);
	write_at(dir, "a", "three", 0);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now + 1, &g, &r2), 0);
	CU_ASSERT_TRUE(g.fd == f.fd && r2 == r1 && g.size == 5);
	tlhttp_fcache_put(c, r2, g.fd);
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 1);

	/* Renamed over: the old file until the entry is due, then the new. */
	write_at(dir, "a", "second!", 1);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now + s1 / 2, &g, &r2), 0);
	CU_ASSERT_TRUE(g.fd == f.fd && g.size == 5);
	tlhttp_fcache_put(c, r2, g.fd);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now + s1, &g, &r2), 0);
	CU_ASSERT_TRUE(r2 != 0 && g.size == 7);
	CU_ASSERT_TRUE(fstat(g.fd, &st) == 0 && st.st_size == 7);
	tlhttp_fcache_put(c, r2, g.fd);
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 1);
	now += s1;

	/* Replaced while being sent: the new file comes uncached (ref 0, the
	 * caller's to close), the old descriptor stays for its sender. */
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now, &f, &r1), 0);
	write_at(dir, "a", "3rd", 1);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "a", now + s1, &g, &r2), 0);
	CU_ASSERT_TRUE(r2 == 0 && g.fd != f.fd && g.size == 3);
	tlhttp_fcache_put(c, r2, g.fd); /* closes it */
	CU_ASSERT_TRUE(fcntl(g.fd, F_GETFD) < 0 && fcntl(f.fd, F_GETFD) >= 0);
	tlhttp_fcache_put(c, r1, f.fd);

	/* Removed: not found once due, and the entry goes. A symbolic link in
	 * its place is refused like any other. */
	snprintf(p, sizeof p, "%s/a", dir);
	CU_ASSERT_EQUAL(unlink(p), 0);
	CU_ASSERT_EQUAL(symlink("/etc/hostname", p), 0);
	CU_ASSERT_EQUAL(tlhttp_fcache_get(c, "a", now + 2 * s1, &g, &r2), -ELOOP);
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 0);
	CU_ASSERT_EQUAL(tlhttp_fcache_get(c, "missing", now, &g, &r2), -ENOENT);
	now += 2 * s1;

	/* Five names in four ways: the least recently used one goes, unless
	 * it is in use; with every way in use a fifth is served uncached. */
	uint32_t refs[5];
	int fds[5];
	for (int i = 0; i < 5; i++) {
		char name[8];
		snprintf(name, sizeof name, "f%d", i);
		write_at(dir, name, "x", 0);
	}
	for (int i = 0; i < 4; i++) {
		char name[8];
		snprintf(name, sizeof name, "f%d", i);
		CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, name, now + (uint64_t)i, &f, &refs[i]), 0);
		fds[i] = f.fd;
		CU_ASSERT_TRUE(refs[i] != 0);
	}
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "f4", now + 10, &f, &refs[4]), 0);
	CU_ASSERT_EQUAL(refs[4], 0);
	tlhttp_fcache_put(c, refs[4], f.fd);
	for (int i = 0; i < 4; i++)
		tlhttp_fcache_put(c, refs[i], fds[i]);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "f4", now + 11, &f, &refs[4]), 0);
	CU_ASSERT_TRUE(refs[4] != 0);
	CU_ASSERT_TRUE(fcntl(fds[0], F_GETFD) < 0); /* f0 was the oldest */
	tlhttp_fcache_put(c, refs[4], f.fd);
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 4);

	/* A long name is not cached. */
	char longname[300];
	memset(longname, 'n', TLHTTP_FCACHE_NAME_MAX);
	longname[TLHTTP_FCACHE_NAME_MAX] = '\0';
	write_at(dir, longname, "long", 0);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, longname, now, &f, &r1), 0);
	CU_ASSERT_TRUE(r1 == 0 && f.size == 4);
	tlhttp_fcache_put(c, r1, f.fd);

	/* Idle entries close at the sweep; used ones stay. A shorter idle
	 * time closes them sooner. */
	CU_ASSERT_EQUAL(tlhttp_fcache_sweep(c, now + 11, TLHTTP_FCACHE_IDLE_NS), 0);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "f4", now + 100, &f, &r1), 0);
	tlhttp_fcache_put(c, r1, f.fd);
	CU_ASSERT_EQUAL(tlhttp_fcache_sweep(c, now + 100, 100), 0);
	CU_ASSERT_EQUAL(tlhttp_fcache_sweep(c, now + 110, 100), 3); /* f4 used at now + 100 */
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 1);
	CU_ASSERT_EQUAL_FATAL(tlhttp_fcache_get(c, "f4", now + TLHTTP_FCACHE_IDLE_NS, &f, &r1), 0);
	tlhttp_fcache_put(c, r1, f.fd);
	CU_ASSERT_EQUAL(tlhttp_fcache_sweep(c, now + TLHTTP_FCACHE_IDLE_NS + 11, TLHTTP_FCACHE_IDLE_NS), 0);
	CU_ASSERT_EQUAL(tlhttp_fcache_open(c), 1);
	tlhttp_fcache_free(c);
	close(root);

	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_path_status(void)
{
	static const struct {
		int err, status;
	} cases[] = {
		{ 0, 200 },	      { 3, 200 },	  { -EINVAL, 400 },  { -ENOENT, 404 }, { -ENOTDIR, 404 },
		{ -EXDEV, 404 },      { -ELOOP, 404 },	  { -ENODEV, 404 },  { -ENXIO, 404 },  { -EISDIR, 404 },
		{ -ENAMETOOLONG, 404 }, { -EACCES, 403 }, { -EPERM, 403 },   { -EMFILE, 503 }, { -ENFILE, 503 },
		{ -ENOMEM, 503 },     { -ENOSYS, 500 },	  { -EIO, 500 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		CU_ASSERT_EQUAL(tlhttp_path_status(cases[i].err), cases[i].status);
}

int main(void)
{
	static const struct {
		const char *suite, *name;
		CU_TestFunc fn;
	} tests[] = {
		{ "parse", "wrk request", test_accept_wrk },
		{ "parse", "fields", test_accept_fields },
		{ "parse", "absolute-form", test_accept_absolute_form },
		{ "parse", "keep-alive and Connection lists", test_keep_alive },
		{ "parse", "pipelined", test_pipelined },
		{ "parse", "buffer moves between calls", test_rebase },
		{ "parse", "empty lines first", test_leading_crlf },
		{ "parse", "repeated fields", test_repeated_fields },
		{ "parse", "every line of a field", test_field_next },
		{ "parse", "every refusal", test_refusals },
		{ "parse", "a bad byte anywhere in a value", test_value_positions },
		{ "parse", "limit edges", test_limits_edges },
		{ "parse", "bad calls", test_bad_calls },
		{ "parse", "reason table", test_reasons },
		{ "range", "range", test_range },
		{ "cond", "entity-tag format", test_etag_format },
		{ "cond", "entity-tag lists", test_etag_match },
		{ "cond", "If-Range", test_if_range },
		{ "cond", "preconditions in RFC 9110's order", test_preconditions },
		{ "date", "format", test_date_format },
		{ "date", "parse", test_date_parse },
		{ "date", "cache", test_date_cache },
		{ "mime", "types", test_mime },
		{ "head", "format", test_head },
		{ "head", "invalid", test_head_invalid },
		{ "path", "normalize", test_path_normalize },
		{ "path", "open beneath the root", test_path_open },
		{ "path", "no openat2", test_no_openat2 },
		{ "path", "status", test_path_status },
		{ "path", "open-file cache", test_fcache },
	};
	CU_pSuite suite = NULL;
	const char *cur = NULL;
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		if (!cur || strcmp(cur, tests[i].suite)) {
			cur = tests[i].suite;
			suite = CU_add_suite(cur, NULL, NULL);
			if (!suite)
				goto fail;
		}
		if (!CU_add_test(suite, tests[i].name, tests[i].fn))
			goto fail;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS)
		goto fail;
	failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	rm_tree();
	return failures ? 1 : 0;
fail:
	CU_cleanup_registry();
	rm_tree();
	return 1;
}
