/* tests/fuzz_http.c: libFuzzer target for tlhttp's parsers (request heads, Range, preconditions and entity-tags, HTTP-dates, paths), checking their invariants. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlhttp/cond.h"
#include "tlhttp/date.h"
#include "tlhttp/mime.h"
#include "tlhttp/parse.h"
#include "tlhttp/path.h"
#include "tlhttp/range.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The input is the bytes a client sent, parsed as a pipeline of requests
 * under the default limits and under tiny ones (so that 414 and 431 are
 * reached). For every request: the result is in range and consistent; asked
 * again, the parser says the same; the same bytes split in two (at a point
 * derived from the input), and fed byte by byte into a new buffer each time,
 * give the same result with spans at the same offsets. The values the server
 * would go on to parse (Range, the preconditions with every line of
 * If-Match and If-None-Match, the path) go through their parsers, and so
 * does the raw input. Every buffer is a heap block of exactly its length,
 * so that ASan sees a read one byte too far.
 */

#include "check.h" /* CHECK: a failure prints its line and aborts */

static const struct tlhttp_limits dflt = TLHTTP_LIMITS_DEFAULT;
static const struct tlhttp_limits tiny = { .max_line = 24, .max_header_bytes = 48, .max_headers = 3 };

static char *dup_exact(const uint8_t *p, size_t n)
{
	char *c = malloc(n ? n : 1);
	if (!c)
		abort();
	if (n)
		memcpy(c, p, n);
	return c;
}

static int same_span(struct tlhttp_span a, const char *ba, struct tlhttp_span b, const char *bb)
{
	if (!a.p || !b.p)
		return !a.p && !b.p && !a.len && !b.len;
	return a.len == b.len && a.p - ba == b.p - bb;
}

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

static void span_inside(struct tlhttp_span s, const char *b, size_t n, const char *what)
{
	if (!s.p) {
		CHECK(s.len == 0, "%s: NULL span of length %u", what, s.len);
		return;
	}
	CHECK(s.p >= b && s.p + s.len <= b + n, "%s: span outside the head", what);
}

static void check_path(const char *p, size_t n)
{
	char out[64];
	int rc = tlhttp_path_normalize(p, n, out, sizeof out);

	if (rc < 0) {
		CHECK(rc == -EINVAL || rc == -ENOENT || rc == -ENAMETOOLONG, "path: %d", rc);
		return;
	}
	CHECK((size_t)rc < sizeof out && out[rc] == 0 && strlen(out) == (size_t)rc, "path: length %d", rc);
	if (rc == 1 && out[0] == '.')
		return;
	CHECK(out[0] != '/', "path: leading slash");
	/* No empty, "." or ".." segment. */
	for (int s = 0; s < rc;) {
		int e = s;
		while (e < rc && out[e] != '/')
			e++;
		CHECK(e > s, "path: empty segment in %s", out);
		CHECK(!(e - s == 1 && out[s] == '.'), "path: '.' segment in %s", out);
		CHECK(!(e - s == 2 && out[s] == '.' && out[s + 1] == '.'), "path: '..' segment in %s", out);
		s = e + 1;
	}
	(void)tlhttp_mime_type(out, (size_t)rc);
}

static void check_range(const char *v, size_t n, uint64_t size)
{
	uint64_t f = 0, l = 0;
	int rc = tlhttp_range_parse(v, n, size, &f, &l);

	CHECK(rc == 200 || rc == 206 || rc == 416, "range: %d", rc);
	if (rc == 206)
		CHECK(f <= l && l < size, "range: %llu-%llu of %llu", (unsigned long long)f,
		      (unsigned long long)l, (unsigned long long)size);
}

static void check_date(const char *v, size_t n)
{
	int64_t t, back;
	char out[TLHTTP_DATE_LEN];

	if (tlhttp_date_parse(v, n, 1714000000, &t))
		return;
	CHECK(t >= TLHTTP_TIME_MIN && t <= TLHTTP_TIME_MAX, "date: %lld", (long long)t);
	CHECK(tlhttp_date_format(t, out) == TLHTTP_DATE_LEN, "date: format");
	CHECK(tlhttp_date_parse(out, sizeof out, 0, &back) == 0 && back == t, "date: round trip");
}

/* A tag list's value: the result is in range, the same under either
 * comparison but for matches, and a match is only ever a tag that is there. */
static int check_tags(const char *v, size_t n, const char *etag)
{
	size_t elen = etag ? strlen(etag) : 0;
	int s = tlhttp_etag_match(v, n, etag, elen, 1), w = tlhttp_etag_match(v, n, etag, elen, 0);

	CHECK(s == -EBADMSG || (s >= TLHTTP_TAGS_NONE && s <= TLHTTP_TAGS_STAR), "tags: %d", s);
	CHECK((s < 0) == (w < 0) && (s == TLHTTP_TAGS_STAR) == (w == TLHTTP_TAGS_STAR),
	      "tags: strong %d, weak %d", s, w);
	CHECK(s != TLHTTP_TAGS_MATCH || w == TLHTTP_TAGS_MATCH, "tags: strong match, weak not");
	if (w == TLHTTP_TAGS_MATCH)
		CHECK(etag && memmem(v, n, etag, elen), "tags: a match that is not there");
	if (s == TLHTTP_TAGS_STAR)
		CHECK(n == 1 && v[0] == '*', "tags: * for %zu bytes", n);
	return w;
}

/* Every line of a list field: as many as counted (up to 255), the first
 * one the span, each inside the head. */
static void check_lines(const struct tlhttp_req *r, const char *name, struct tlhttp_span first,
			unsigned lines, const char *b, size_t n)
{
	struct tlhttp_span v;
	uint32_t pos = 0;
	unsigned got = 0;
	int rc;

	while ((rc = tlhttp_req_field_next(r, name, &pos, &v)) == 1) {
		span_inside(v, b, n, name);
		if (!got)
			CHECK(v.p == first.p && v.len == first.len, "%s: first line differs", name);
		got++;
		CHECK(got <= r->nheaders, "%s: more lines than headers", name);
		(void)check_tags(v.p, v.len, "\"6553f100-f\"");
	}
	CHECK(rc == 0, "%s: %d", name, rc);
	CHECK(got == lines || (lines == 255 && got >= 255), "%s: %u lines, %u counted", name, got, lines);
}

/* The preconditions of an accepted request: one of the three answers,
 * and a Range decision only with 200. */
static void check_preconditions(const struct tlhttp_req *r, const char *b, size_t n)
{
	static const struct tlhttp_validators vals[] = {
		{ .etag = "\"6553f100-f\"", .mtime = 1700000000, .has_mtime = 1 },
		{ .etag = "\"2ebbd6a1-0\"", .mtime = 784111777, .has_mtime = 1 },
		{ 0 },
	};

	check_lines(r, "if-match", r->if_match, r->if_match_lines, b, n);
	check_lines(r, "if-none-match", r->if_none_match, r->if_none_match_lines, b, n);
	for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
		int ok = -7, rc = tlhttp_preconditions(r, &vals[i], 1714000000, &ok);
		CHECK(rc == 200 || rc == 304 || rc == 412, "preconditions: %d", rc);
		CHECK(rc == 200 ? ok == 0 || ok == 1 : ok == -7, "preconditions: %d, range_ok %d", rc, ok);
		CHECK(rc != 412 || r->if_match.p || r->if_unmodified_since.p, "412 without a cause");
		CHECK(rc != 304 || r->if_none_match.p || r->if_modified_since.p, "304 without a cause");
		CHECK(ok != 0 || (r->range.p && r->if_range.p), "Range refused without If-Range");
		ok = tlhttp_if_range_ok(r->if_range.p, r->if_range.len, &vals[i], 1714000000);
		CHECK(ok == 0 || ok == 1, "if_range_ok %d", ok);
	}
}

/* One request at b[0..n): returns its length, 0 if incomplete, -1 if refused. */
static long one(const uint8_t *in, size_t n, const struct tlhttp_limits *lim, size_t split)
{
	struct tlhttp_req r, s;
	char *b = dup_exact(in, n);
	int rc;

	CHECK(tlhttp_req_init(&r, lim) == 0, "init");
	rc = tlhttp_parse(&r, b, n);
	CHECK(rc == 0 || rc == -EBADMSG || (rc > 0 && (size_t)rc <= n), "rc %d of %zu", rc, n);
	CHECK(tlhttp_parse(&r, b, n) == rc, "a second call differs");
	/* No head is longer than the limits allow: with that many bytes there
	 * is an answer. */
	const struct tlhttp_limits *L = lim ? lim : &dflt;
	CHECK(rc != 0 || n < (size_t)L->max_line + 2 + L->max_header_bytes, "0 with %zu bytes", n);
	if (rc > 0) {
		CHECK(r.status == 0 && r.reason == TLHTTP_R_OK, "accepted with a status");
		CHECK(r.method == TLHTTP_GET || r.method == TLHTTP_HEAD, "method %d", r.method);
		CHECK(r.minor <= 1 && r.keep_alive <= 1, "minor or keep_alive");
		CHECK(!r.content_length, "accepted with a body");
		CHECK(b[rc - 1] == '\n' && b[rc - 2] == '\r', "head does not end in CRLF");
		CHECK(r.path.p && r.path.len && r.path.p[0] == '/', "path");
		span_inside(r.target, b, (size_t)rc, "target");
		span_inside(r.path, b, (size_t)rc, "path");
		span_inside(r.query, b, (size_t)rc, "query");
		span_inside(r.authority, b, (size_t)rc, "authority");
		span_inside(r.host, b, (size_t)rc, "host");
		span_inside(r.if_modified_since, b, (size_t)rc, "if_modified_since");
		span_inside(r.range, b, (size_t)rc, "range");
		span_inside(r.expect, b, (size_t)rc, "expect");
		span_inside(r.if_range, b, (size_t)rc, "if_range");
		span_inside(r.if_match, b, (size_t)rc, "if_match");
		span_inside(r.if_none_match, b, (size_t)rc, "if_none_match");
		span_inside(r.if_unmodified_since, b, (size_t)rc, "if_unmodified_since");
		CHECK(!r.if_match.p == !r.if_match_lines, "if_match without lines");
		CHECK(!r.if_none_match.p == !r.if_none_match_lines, "if_none_match without lines");
		CHECK(!r.minor || r.host.p, "1.1 without Host accepted");
		check_path(r.path.p, r.path.len);
		if (r.range.p) {
			check_range(r.range.p, r.range.len, 0);
			check_range(r.range.p, r.range.len, 1000);
		}
		check_preconditions(&r, b, (size_t)rc);
		if (r.if_modified_since.p)
			check_date(r.if_modified_since.p, r.if_modified_since.len);
		if (r.if_unmodified_since.p)
			check_date(r.if_unmodified_since.p, r.if_unmodified_since.len);
	} else if (rc == -EBADMSG) {
		CHECK(r.reason != TLHTTP_R_OK && r.reason < TLHTTP_R_COUNT, "reason %d", r.reason);
		CHECK(r.status == tlhttp_reason_status(r.reason), "status %d for %s", r.status,
		      tlhttp_reason_name(r.reason));
	}

	/* Split in two: a prefix gives 0 or the result; the rest (in another
	 * buffer) gives the result. */
	split = n ? split % (n + 1) : 0;
	char *p = dup_exact(in, split);
	CHECK(tlhttp_req_init(&s, lim) == 0, "init");
	int r1 = tlhttp_parse(&s, p, split);
	if (r1 == 0) {
		char *w = dup_exact(in, n);
		free(p);
		p = w;
		r1 = tlhttp_parse(&s, p, n);
	}
	CHECK(r1 == rc, "split at %zu of %zu: %d, whole: %d", split, n, r1, rc);
	CHECK(same_req(&s, p, &r, b), "split at %zu of %zu: other results", split, n);
	free(p);

	/* Byte by byte, a new buffer each time (past 1 KiB in steps of 7, to
	 * bound the copying). */
	CHECK(tlhttp_req_init(&s, lim) == 0, "init");
	int last = 0;
	for (size_t k = 1; k <= n && last == 0; k = k < 1024 || k == n ? k + 1 : k + 7 < n ? k + 7 : n) {
		char *q = dup_exact(in, k);
		last = tlhttp_parse(&s, q, k);
		if (last != 0)
			CHECK(same_req(&s, q, &r, b), "byte by byte to %zu: other results", k);
		free(q);
	}
	CHECK(last == rc, "byte by byte: %d, whole: %d", last, rc);
	free(b);
	return rc > 0 ? rc : rc == 0 ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 16777619u;
	for (int l = 0; l < 2; l++) {
		size_t off = 0;
		while (off <= size) {
			long n = one(data + off, size - off, l ? &tiny : NULL, h + off);
			if (n <= 0)
				break;
			off += (size_t)n;
		}
	}

	/* The raw bytes as a Range value, a tag list, an If-Range, a date and
	 * a path. */
	char *c = dup_exact(data, size);
	static const struct tlhttp_validators val = { .etag = "\"6553f100-f\"", .mtime = 1700000000,
						      .has_mtime = 1 };
	(void)check_tags(c, size, "\"6553f100-f\"");
	(void)check_tags(c, size, NULL);
	int ir = tlhttp_if_range_ok(c, size, &val, 1714000000);
	CHECK(ir == 0 || ir == 1, "if_range_ok %d", ir);
	check_range(c, size, 0);
	check_range(c, size, 1);
	check_range(c, size, h);
	check_date(c, size);
	check_path(c, size);
	CHECK(tlhttp_mime_type(c, size) != NULL, "mime");
	free(c);
	return 0;
}
