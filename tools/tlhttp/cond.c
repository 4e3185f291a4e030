/* tools/tlhttp/cond.c: entity-tags made and matched, and the preconditions of a request evaluated in RFC 9110's order (cond.h). */
#include <errno.h>
#include <string.h>

#include "tlhttp/cond.h"
#include "tlhttp/date.h"

static size_t put_hex(char *p, uint64_t x)
{
	static const char digits[] = "0123456789abcdef";
	char tmp[16];
	size_t n = 0;

	do {
		tmp[n++] = digits[x & 15];
		x >>= 4;
	} while (x);
	for (size_t i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

int tlhttp_etag_format(int64_t mtime, uint64_t size, char out[TLHTTP_ETAG_MAX])
{
	size_t n = 0;

	if (!out)
		return -EINVAL;
	out[n++] = '"';
	n += put_hex(out + n, (uint64_t)mtime);
	out[n++] = '-';
	n += put_hex(out + n, size);
	out[n++] = '"';
	out[n] = '\0';
	return (int)n;
}

static inline int ows(char c)
{
	return c == ' ' || c == '\t';
}

/* etagc: %x21 / %x23-7E / obs-text */
static inline int etagc(unsigned char c)
{
	return c == 0x21 || (c >= 0x23 && c != 0x7f);
}

/*
 * One entity-tag at v[*i..n): on success *i is past its closing quote,
 * *tag and *tlen are the quoted opaque-tag (quotes included) and *weak says
 * whether "W/" came first. Returns 0, or -EBADMSG.
 */
static int one_tag(const char *v, size_t n, size_t *i, const char **tag, size_t *tlen, int *weak)
{
	size_t k = *i, s;

	*weak = 0;
	if (k + 1 < n && v[k] == 'W' && v[k + 1] == '/') {
		*weak = 1;
		k += 2;
	}
	if (k == n || v[k] != '"')
		return -EBADMSG;
	s = k++;
	while (k < n && etagc((unsigned char)v[k]))
		k++;
	if (k == n || v[k] != '"')
		return -EBADMSG;
	k++;
	*tag = v + s;
	*tlen = k - s;
	*i = k;
	return 0;
}

int tlhttp_etag_match(const char *v, size_t n, const char *etag, size_t elen, int strong)
{
	int found = 0, need_comma = 0;
	size_t i = 0;

	if ((!v && n) || (!etag && elen))
		return -EINVAL;
	if (n == 1 && v[0] == '*')
		return TLHTTP_TAGS_STAR;
	for (;;) {
		const char *tag;
		size_t tlen;
		int weak;

		while (i < n && ows(v[i]))
			i++;
		if (i == n)
			break;
		if (v[i] == ',') {
			i++;
			need_comma = 0;
			continue;
		}
		if (need_comma || one_tag(v, n, &i, &tag, &tlen, &weak) < 0)
			return -EBADMSG;
		need_comma = 1;
		/* etag is strong: under the strong comparison a weak tag
		 * never matches it; under the weak one "W/" does not count. */
		if (etag && (!strong || !weak) && tlen == elen && !memcmp(tag, etag, elen))
			found = 1;
	}
	return found ? TLHTTP_TAGS_MATCH : TLHTTP_TAGS_NONE;
}

int tlhttp_if_range_ok(const char *v, size_t n, const struct tlhttp_validators *val, int64_t now)
{
	int64_t t;

	if (!val)
		return -EINVAL;
	if (!v)
		return 1;
	/* A tag starts with a quote or "W/"; a date never does ("Wed, ..."
	 * starts with a W too). */
	if ((n && v[0] == '"') || (n > 1 && v[0] == 'W' && v[1] == '/')) {
		const char *tag;
		size_t i = 0, tlen;
		int weak;

		if (one_tag(v, n, &i, &tag, &tlen, &weak) < 0 || i != n || weak || !val->etag)
			return 0;
		return tlen == strlen(val->etag) && !memcmp(tag, val->etag, tlen);
	}
	return val->has_mtime && tlhttp_date_parse(v, n, now, &t) == 0 && t == val->mtime;
}

/*
 * A list field (If-Match, If-None-Match) over all its lines: TLHTTP_TAGS_*
 * for the whole, or -EBADMSG. "*" is the whole field or it is bad syntax.
 */
static int field_match(const struct tlhttp_req *req, struct tlhttp_span first, unsigned lines,
		       const char *name, const char *etag, int strong)
{
	size_t elen = etag ? strlen(etag) : 0;
	struct tlhttp_span v;
	uint32_t pos = 0;
	int found = 0, rc;

	if (lines == 1)
		return tlhttp_etag_match(first.p, first.len, etag, elen, strong);
	while ((rc = tlhttp_req_field_next(req, name, &pos, &v)) == 1) {
		rc = tlhttp_etag_match(v.p, v.len, etag, elen, strong);
		if (rc < 0 || rc == TLHTTP_TAGS_STAR)
			return -EBADMSG;
		found |= rc == TLHTTP_TAGS_MATCH;
	}
	if (rc < 0)
		return rc;
	return found ? TLHTTP_TAGS_MATCH : TLHTTP_TAGS_NONE;
}

/* One HTTP-date in s (a repeated field is already absent); 0 and *t. */
static int date_of(struct tlhttp_span s, int64_t now, int64_t *t)
{
	return tlhttp_date_parse(s.p, s.len, now, t);
}

int tlhttp_preconditions(const struct tlhttp_req *req, const struct tlhttp_validators *val,
			 int64_t now, int *range_ok)
{
	int64_t t;

	if (!req || !val || !range_ok)
		return -EINVAL;
	/* 1, 2: the client's "only if it is still this one". */
	if (req->if_match.p) {
		if (field_match(req, req->if_match, req->if_match_lines, "if-match", val->etag, 1) <= 0)
			return 412;
	} else if (req->if_unmodified_since.p && val->has_mtime &&
		   date_of(req->if_unmodified_since, now, &t) == 0 && val->mtime > t) {
		return 412;
	}
	/* 3, 4: "only if it is not the one I have". */
	if (req->if_none_match.p) {
		if (field_match(req, req->if_none_match, req->if_none_match_lines, "if-none-match",
				val->etag, 0) > 0)
			return 304;
	} else if (req->if_modified_since.p && val->has_mtime &&
		   date_of(req->if_modified_since, now, &t) == 0 && t <= now && val->mtime <= t) {
		return 304;
	}
	/* 5 */
	*range_ok = !req->range.p || tlhttp_if_range_ok(req->if_range.p, req->if_range.len, val, now);
	return 200;
}
