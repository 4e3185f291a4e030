/* tools/tlhttp/parse.c: the request-head parser (grammar and decisions in parse.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "tlhttp/parse.h"

/* Character classes, one table: a bit per class. */
#define C_TCHAR 1 /* RFC 9110 tchar */
#define C_TGT 2   /* RFC 3986 characters a request-target may hold */
#define C_HOST 4  /* reg-name, IP-literal and port characters */
#define C_PATH 8  /* C_TGT but '?': what a path may hold */

static const unsigned char cls[256] = {
	 0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, /* 0x00 */
	 0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0, /* 0x10 */
	 0, 15,  0,  1, 15, 15, 15, 15, 14, 14, 15, 15, 14, 15, 15, 10, /* SP ! " # $ % & ' ( ) * + , - . / */
	15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 14, 14,  0, 14,  0,  2, /* 0-9 : ; < = > ? */
	10, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, /* @ A-O */
	15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 14,  0, 14,  1, 15, /* P-Z [ \ ] ^ _ */
	 1, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, /* ` a-o */
	15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  0,  1,  0, 15,  0, /* p-z { | } ~ DEL */
	/* 0x80 - 0xff: none of the classes */
};

enum { PH_LINE, PH_HEADERS, PH_DONE, PH_FAILED };

/* seen_ bits */
#define S_HOST 1
#define S_IMS 2
#define S_RANGE 4
#define S_EXPECT 8
#define S_TE 16
#define S_IMS_DUP 32
#define S_RANGE_DUP 64
#define S_IF_RANGE 128
/* seen2_ bits */
#define S_IUS 1
#define S_IUS_DUP 2

/* te_: where the Transfer-Encoding codings stand so far. */
enum { TE_NONE, TE_CHUNKED_LAST, TE_OTHER_LAST, TE_BAD };

static const struct {
	unsigned short status;
	const char *name, *text;
} reasons[TLHTTP_R_COUNT] = {
#define TLHTTP_R_ROW(n, s, t) [TLHTTP_R_##n] = { s, #n, t },
	TLHTTP_REASONS(TLHTTP_R_ROW)
#undef TLHTTP_R_ROW
};
_Static_assert(sizeof reasons / sizeof reasons[0] == TLHTTP_R_COUNT, "one row per reason");

int tlhttp_reason_status(unsigned reason)
{
	return reason < TLHTTP_R_COUNT ? reasons[reason].status : -EINVAL;
}

const char *tlhttp_reason_name(unsigned reason)
{
	return reason < TLHTTP_R_COUNT ? reasons[reason].name : NULL;
}

const char *tlhttp_reason_text(unsigned reason)
{
	return reason < TLHTTP_R_COUNT ? reasons[reason].text : NULL;
}

static const struct tlhttp_limits default_limits = TLHTTP_LIMITS_DEFAULT;

/* Twelve 16-byte stores: the compiler turns a memset of the whole request
 * into a "rep stos", slow to start for this size. */
static inline void clear_spans(struct tlhttp_req *r)
{
	static const struct tlhttp_span none;

	r->target = r->path = r->query = r->authority = none;
	r->host = r->if_modified_since = r->range = r->expect = r->if_range = none;
	r->if_match = r->if_none_match = r->if_unmodified_since = none;
}

int tlhttp_req_init(struct tlhttp_req *req, const struct tlhttp_limits *lim)
{
	if (!req)
		return -EINVAL;
	memset(req, 0, offsetof(struct tlhttp_req, target));
	clear_spans(req);
	if (!lim)
		lim = &default_limits;
	if (lim->max_line < 1 || lim->max_line > TLHTTP_LIMIT_MAX || lim->max_header_bytes < 2 ||
	    lim->max_header_bytes > TLHTTP_LIMIT_MAX || lim->max_headers < 1 ||
	    lim->max_headers > TLHTTP_LIMIT_MAX)
		return -EINVAL;
	req->lim_ = lim;
	return 0;
}

/* The spans that point into the buffer, moved along when it moves. */
static const size_t span_fields[] = {
	offsetof(struct tlhttp_req, target), offsetof(struct tlhttp_req, path),
	offsetof(struct tlhttp_req, query), offsetof(struct tlhttp_req, authority),
	offsetof(struct tlhttp_req, host), offsetof(struct tlhttp_req, if_modified_since),
	offsetof(struct tlhttp_req, range), offsetof(struct tlhttp_req, expect),
	offsetof(struct tlhttp_req, if_range), offsetof(struct tlhttp_req, if_match),
	offsetof(struct tlhttp_req, if_none_match), offsetof(struct tlhttp_req, if_unmodified_since),
};

static void rebase(struct tlhttp_req *r, const char *buf)
{
	uintptr_t delta = (uintptr_t)buf - (uintptr_t)r->base_;

	for (size_t i = 0; i < sizeof span_fields / sizeof span_fields[0]; i++) {
		struct tlhttp_span *s = (struct tlhttp_span *)((char *)r + span_fields[i]);
		if (s->p)
			s->p = (const char *)((uintptr_t)s->p + delta);
	}
	r->base_ = buf;
}

static int fail(struct tlhttp_req *r, int reason)
{
	r->reason = (uint8_t)reason;
	r->status = reasons[reason].status;
	r->phase_ = PH_FAILED;
	return -EBADMSG;
}

static inline struct tlhttp_span span(const unsigned char *p, size_t n)
{
	return (struct tlhttp_span){ (const char *)p, (uint32_t)n };
}

/* a[0..n) equals the lowercase name, ASCII case-insensitively. Only letters
 * and '-' are in the names, and no tchar other than an uppercase letter maps
 * onto one of them under | 0x20. */
static inline int name_is(const unsigned char *a, const char *lower, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((a[i] | 0x20) != (unsigned char)lower[i])
			return 0;
	return 1;
}

/* Case-insensitive equality for arbitrary bytes (list elements). */
static int ieq(const unsigned char *a, size_t n, const char *lower)
{
	size_t i;

	for (i = 0; i < n && lower[i]; i++) {
		unsigned char c = a[i];
		if (c >= 'A' && c <= 'Z')
			c |= 0x20;
		if (c != (unsigned char)lower[i])
			return 0;
	}
	return i == n && !lower[i];
}

/*
 * The request line, [s, c) with b[c] the CR before its LF: every scan below
 * stops at that CR at the latest, since no class holds CR.
 */
static int request_line(struct tlhttp_req *r, const unsigned char *b, size_t s, size_t c)
{
	const unsigned char *p = b + s, *ce = b + c, *t, *v, *qm = NULL;
	size_t n = c - s;
	int other = 0;

	if (n >= 4 && !memcmp(p, "GET ", 4)) {
		r->method = TLHTTP_GET;
		p += 4;
	} else if (n >= 5 && !memcmp(p, "HEAD ", 5)) {
		r->method = TLHTTP_HEAD;
		p += 5;
	} else {
		const unsigned char *m = p;
		while (cls[*p] & C_TCHAR)
			p++;
		if (*p != ' ') {
			if (p == ce)
				return p == m ? TLHTTP_R_METHOD : TLHTTP_R_REQUEST_LINE;
			return *p == '\r' ? TLHTTP_R_BARE_CR : TLHTTP_R_METHOD;
		}
		if (p == m)
			return TLHTTP_R_METHOD;
		other = 1;
		p++;
	}

	t = p;
	while (cls[*p] & C_PATH)
		p++;
	if (*p == '?') {
		qm = p++;
		while (cls[*p] & C_TGT)
			p++;
	}
	if (*p != ' ') {
		if (p == ce)
			return TLHTTP_R_REQUEST_LINE;
		return *p == '\r' ? TLHTTP_R_BARE_CR : TLHTTP_R_TARGET;
	}
	if (p == t)
		return TLHTTP_R_REQUEST_LINE;
	r->target = span(t, (size_t)(p - t));
	v = p + 1;

	if (ce - v != 8 || memcmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
	    v[7] < '0' || v[7] > '9')
		return memchr(v, '\r', (size_t)(ce - v)) ? TLHTTP_R_BARE_CR : TLHTTP_R_VERSION;
	if (v[5] != '1')
		return TLHTTP_R_VERSION_NOT_SUPPORTED;
	r->minor = v[7] != '0';
	if (other)
		return TLHTTP_R_METHOD_NOT_ALLOWED;

	const unsigned char *te = t + r->target.len, *q, *ps;
	if (*t == '/') {
		ps = t;
	} else {
		const unsigned char *a;
		size_t tl = r->target.len;
		if (tl > 7 && ieq(t, 7, "http://"))
			a = t + 7;
		else if (tl > 8 && ieq(t, 8, "https://"))
			a = t + 8;
		else
			return TLHTTP_R_TARGET_FORM;
		ps = a;
		while (ps < te && *ps != '/' && *ps != '?')
			ps++;
		if (ps == a || memchr(a, '@', (size_t)(ps - a)))
			return TLHTTP_R_TARGET_FORM;
		r->authority = span(a, (size_t)(ps - a));
	}
	/* Neither the scheme nor the authority holds a '?': the first one of
	 * the target is the path's end in both forms. */
	q = qm ? qm : te;
	if (qm)
		r->query = span(q + 1, (size_t)(te - q - 1));
	if (q > ps && *ps == '/')
		r->path = span(ps, (size_t)(q - ps));
	else /* absolute-form without a path: "/", found in "HTTP/" */
		r->path = span(v + 4, 1);
	return 0;
}

/*
 * The next non-empty element of a comma list (RFC 9110 5.6.1: empty elements
 * are allowed), OWS trimmed. *i is the position, 0 at the start. Returns 1
 * with the element in *tok and *tlen, 0 at the end of the list.
 */
static int list_next(const unsigned char *v, size_t n, size_t *i, const unsigned char **tok, size_t *tlen)
{
	size_t k = *i, s, e;

	for (;;) {
		while (k < n && (v[k] == ' ' || v[k] == '\t'))
			k++;
		if (k == n) {
			*i = k;
			return 0;
		}
		if (v[k] != ',')
			break;
		k++;
	}
	s = k;
	while (k < n && v[k] != ',')
		k++;
	e = k;
	while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
		e--;
	*i = k;
	*tok = v + s;
	*tlen = e - s;
	return 1;
}

static int on_connection(struct tlhttp_req *r, const unsigned char *v, size_t n)
{
	const unsigned char *tok;
	size_t i = 0, tlen;

	while (list_next(v, n, &i, &tok, &tlen)) {
		for (size_t k = 0; k < tlen; k++)
			if (!(cls[tok[k]] & C_TCHAR))
				return TLHTTP_R_CONNECTION;
		if (ieq(tok, tlen, "close"))
			r->conn_close = 1;
		else if (ieq(tok, tlen, "keep-alive"))
			r->conn_keep_alive = 1;
	}
	return 0;
}

/* Only the order of the codings matters: whatever they are, a GET or HEAD
 * with Transfer-Encoding is refused (parse.h); the state picks the reason. */
static int on_te(struct tlhttp_req *r, const unsigned char *v, size_t n)
{
	const unsigned char *tok;
	size_t i = 0, tlen;

	r->seen_ |= S_TE;
	while (list_next(v, n, &i, &tok, &tlen)) {
		if (r->te_ == TE_CHUNKED_LAST || r->te_ == TE_BAD)
			r->te_ = TE_BAD;
		else
			r->te_ = ieq(tok, tlen, "chunked") ? TE_CHUNKED_LAST : TE_OTHER_LAST;
	}
	return 0;
}

static int on_content_length(struct tlhttp_req *r, const unsigned char *v, size_t n)
{
	uint64_t x = 0;

	if (!n)
		return TLHTTP_R_CL_INVALID;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned)v[i] - '0';
		if (d > 9 || x > (UINT64_C(0x7fffffffffffffff) - d) / 10)
			return TLHTTP_R_CL_INVALID;
		x = x * 10 + d;
	}
	if (r->has_content_length)
		return x == r->content_length ? TLHTTP_R_CL_DUP : TLHTTP_R_CL_CONFLICT;
	r->has_content_length = 1;
	r->content_length = x;
	return 0;
}

/* A field that counts once: a repeat marks it to be dropped at the end. */
static void once(uint8_t *seen, struct tlhttp_span *f, unsigned bit, unsigned dup,
		 const unsigned char *v, size_t n)
{
	if (*seen & bit) {
		*seen |= (uint8_t)dup;
		return;
	}
	*seen |= (uint8_t)bit;
	*f = span(v, n);
}

/* field-vchar, SP, HTAB and obs-text: every byte but CTLs other than HTAB. */
static inline int vchar(unsigned char x)
{
	return (x >= 0x20 || x == '\t') && x != 0x7f;
}

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/*
 * Whether v[0..n) are all vchar, eight bytes at a time: the value's end is
 * known (its line's CR), so it is checked in bulk, and the culprit is looked
 * for only when there is one. Per word: a byte below 0x20 makes
 * (w - 0x20..) & ~w & 0x80.. non-zero (exact for limits up to 0x80), a DEL
 * makes the same test on w ^ 0x7f.. fire for 1; a word with a control char
 * is looked at bytewise, since HTAB is allowed.
 */
static inline int value_clean(const unsigned char *v, size_t n)
{
	size_t i = 0;

	if (n < 8) {
		for (; i < n; i++)
			if (!vchar(v[i]))
				return 0;
		return 1;
	}
	/* The last word overlaps the one before it rather than ending in a
	 * byte loop. */
	for (;; i += 8) {
		uint64_t w, d;
		if (i + 8 > n)
			i = n - 8;
		memcpy(&w, v + i, 8);
		d = w ^ (0x7f * ONES);
		if (((w - 0x20 * ONES) & ~w & HIGHS) | ((d - ONES) & ~d & HIGHS)) {
			for (size_t k = i; k < i + 8; k++)
				if (!vchar(v[k]))
					return 0;
		}
		if (i + 8 == n)
			return 1;
	}
}

/* A line of a list field: the first one is kept, the others counted
 * (tlhttp_req_field_next finds them). */
static void list_line(struct tlhttp_span *f, uint8_t *lines, const unsigned char *v, size_t n)
{
	if (!*lines)
		*f = span(v, n);
	if (*lines < UINT8_MAX)
		(*lines)++;
}

/*
 * A header line, [s, c) with b[c] the CR before its LF, s < c.
 */
static int header_line(struct tlhttp_req *r, const unsigned char *b, size_t s, size_t c)
{
	const unsigned char *p = b + s, *nm = p, *ce = b + c, *v;
	size_t nlen, vlen;

	if (*p == ' ' || *p == '\t')
		return TLHTTP_R_OBS_FOLD;
	while (cls[*p] & C_TCHAR)
		p++;
	if (*p != ':') {
		if (p == ce)
			return TLHTTP_R_NO_COLON;
		if (*p == ' ' || *p == '\t')
			return TLHTTP_R_WS_BEFORE_COLON;
		return *p == '\r' ? TLHTTP_R_BARE_CR : TLHTTP_R_NAME_CHAR;
	}
	if (p == nm)
		return TLHTTP_R_EMPTY_NAME;
	nlen = (size_t)(p - nm);
	p++;
	while (*p == ' ' || *p == '\t')
		p++;
	v = p;
	vlen = (size_t)(ce - v);
	if (!value_clean(v, vlen)) {
		for (size_t i = 0; i < vlen; i++)
			if (!vchar(v[i]))
				return v[i] == '\r' ? TLHTTP_R_BARE_CR : TLHTTP_R_VALUE_CHAR;
	}
	while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;

	switch (nlen) {
	case 4:
		if (name_is(nm, "host", 4)) {
			if (r->seen_ & S_HOST)
				return TLHTTP_R_DUP_HOST;
			unsigned all = C_HOST; /* no branch per byte */
			size_t i = 0;
			for (; i + 4 <= vlen; i += 4)
				all &= (unsigned)(cls[v[i]] & cls[v[i + 1]] & cls[v[i + 2]] & cls[v[i + 3]]);
			for (; i < vlen; i++)
				all &= cls[v[i]];
			if (!(all & C_HOST))
				return TLHTTP_R_BAD_HOST;
			r->seen_ |= S_HOST;
			r->host = span(v, vlen);
		}
		break;
	case 5:
		if (name_is(nm, "range", 5))
			once(&r->seen_, &r->range, S_RANGE, S_RANGE_DUP, v, vlen);
		break;
	case 6:
		if (name_is(nm, "expect", 6) && !(r->seen_ & S_EXPECT)) {
			r->seen_ |= S_EXPECT;
			r->expect = span(v, vlen);
			r->expect_continue = ieq(v, vlen, "100-continue");
		}
		break;
	case 8:
		if (name_is(nm, "if-range", 8)) {
			/* Repeated: present and empty, a validator nothing matches. */
			r->if_range = span(v, r->seen_ & S_IF_RANGE ? 0 : vlen);
			r->seen_ |= S_IF_RANGE;
		} else if (name_is(nm, "if-match", 8)) {
			list_line(&r->if_match, &r->if_match_lines, v, vlen);
		}
		break;
	case 10:
		if (name_is(nm, "connection", 10))
			return on_connection(r, v, vlen);
		break;
	case 14:
		if (name_is(nm, "content-length", 14))
			return on_content_length(r, v, vlen);
		break;
	case 13:
		if (name_is(nm, "if-none-match", 13))
			list_line(&r->if_none_match, &r->if_none_match_lines, v, vlen);
		break;
	case 17:
		if (name_is(nm, "if-modified-since", 17))
			once(&r->seen_, &r->if_modified_since, S_IMS, S_IMS_DUP, v, vlen);
		else if (name_is(nm, "transfer-encoding", 17))
			return on_te(r, v, vlen);
		break;
	case 19:
		if (name_is(nm, "if-unmodified-since", 19))
			once(&r->seen2_, &r->if_unmodified_since, S_IUS, S_IUS_DUP, v, vlen);
		break;
	}
	return 0;
}

static int finish(struct tlhttp_req *r, size_t n)
{
	if (r->minor && !(r->seen_ & S_HOST))
		return fail(r, TLHTTP_R_NO_HOST);
	if (r->seen_ & S_TE) {
		if (r->has_content_length)
			return fail(r, TLHTTP_R_CL_AND_TE);
		if (!r->minor)
			return fail(r, TLHTTP_R_TE_HTTP10);
		if (r->te_ != TE_CHUNKED_LAST)
			return fail(r, TLHTTP_R_TE_NOT_CHUNKED);
		return fail(r, TLHTTP_R_BODY);
	}
	if (r->content_length)
		return fail(r, TLHTTP_R_BODY);
	if (r->seen_ & S_IMS_DUP)
		r->if_modified_since = (struct tlhttp_span){ NULL, 0 };
	if (r->seen_ & S_RANGE_DUP)
		r->range = (struct tlhttp_span){ NULL, 0 };
	if (r->seen2_ & S_IUS_DUP)
		r->if_unmodified_since = (struct tlhttp_span){ NULL, 0 };
	r->keep_alive = r->minor ? !r->conn_close : r->conn_keep_alive && !r->conn_close;
	r->phase_ = PH_DONE;
	r->done_ = (uint32_t)n;
	return (int)n;
}

int tlhttp_parse(struct tlhttp_req *r, const char *buf, size_t len)
{
	const unsigned char *b = (const unsigned char *)buf;
	const struct tlhttp_limits *lim;
	size_t total;

	if (!r || !r->lim_ || (!buf && len))
		return -EINVAL;
	if (r->base_ != buf) {
		if (r->base_) /* a fresh request has no span to move */
			rebase(r, buf);
		r->base_ = buf;
	}
	if (r->phase_ == PH_DONE)
		return (int)r->done_;
	if (r->phase_ == PH_FAILED)
		return -EBADMSG;
	if (len < r->scan_)
		return -EINVAL;
	lim = r->lim_;
	/* No head is longer than this: the rest of the buffer is never looked
	 * at, and every offset fits in 32 bits. */
	total = (size_t)lim->max_line + 2 + lim->max_header_bytes;
	if (len > total)
		len = total;

	for (;;) {
		size_t s = r->off_, from = r->scan_ > s ? r->scan_ : s, e, c;
		size_t bound = r->phase_ == PH_LINE ? (size_t)lim->max_line + 2
						     : (size_t)r->hs_ + lim->max_header_bytes;
		size_t stop = len < bound ? len : bound;
		const unsigned char *lf = from < stop ? memchr(b + from, '\n', stop - from) : NULL;
		int rc;

		if (!lf) {
			if (len >= bound)
				return fail(r, r->phase_ == PH_LINE ? TLHTTP_R_LINE_TOO_LONG
								   : TLHTTP_R_HEADERS_TOO_LARGE);
			r->scan_ = (uint32_t)stop;
			return 0;
		}
		e = (size_t)(lf - b);
		r->off_ = r->scan_ = (uint32_t)(e + 1);
		if (e == s || b[e - 1] != '\r')
			return fail(r, TLHTTP_R_BARE_LF);
		c = e - 1;
		if (r->phase_ == PH_LINE) {
			if (c == s)
				continue; /* an empty line before the request line */
			rc = request_line(r, b, s, c);
			if (rc)
				return fail(r, rc);
			r->hs_ = (uint32_t)(e + 1);
			r->phase_ = PH_HEADERS;
		} else {
			if (c == s)
				return finish(r, e + 1);
			if (r->nheaders == lim->max_headers)
				return fail(r, TLHTTP_R_TOO_MANY_HEADERS);
			rc = header_line(r, b, s, c);
			if (rc)
				return fail(r, rc);
			r->nheaders++;
		}
	}
}

int tlhttp_req_field_next(const struct tlhttp_req *r, const char *name, uint32_t *pos,
			  struct tlhttp_span *value)
{
	const unsigned char *b;
	size_t nlen, k, end;

	if (!r || !name || !pos || !value || r->phase_ != PH_DONE || !r->base_)
		return -EINVAL;
	nlen = strlen(name);
	if (nlen > 64)
		return -EINVAL;
	b = (const unsigned char *)r->base_;
	/* The header section is hs_ .. done_ - 2 (the empty line's CRLF);
	 * every line in it was accepted, so each ends in CRLF and has a
	 * colon after a token. */
	end = r->done_ - 2;
	k = *pos ? *pos : r->hs_;
	while (k < end) {
		const unsigned char *lf = memchr(b + k, '\n', end - k);
		size_t s = k, c = (size_t)(lf - b) - 1, v;

		k = (size_t)(lf - b) + 1;
		if (c - s <= nlen || b[s + nlen] != ':' || !ieq(b + s, nlen, name))
			continue;
		v = s + nlen + 1;
		while (v < c && (b[v] == ' ' || b[v] == '\t'))
			v++;
		while (c > v && (b[c - 1] == ' ' || b[c - 1] == '\t'))
			c--;
		*value = span(b + v, c - v);
		*pos = (uint32_t)k;
		return 1;
	}
	*pos = (uint32_t)end;
	return 0;
}
