/* tools/tlhttp/resp.c: the response-head writer: fixed pieces copied, numbers formatted by hand, every write bounded. */
#include <errno.h>
#include <string.h>

#include "tlhttp/resp.h"

static const struct {
	int status;
	const char *text;
} phrases[] = {
	{ 200, "OK" },
	{ 206, "Partial Content" },
	{ 304, "Not Modified" },
	{ 400, "Bad Request" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 408, "Request Timeout" },
	{ 412, "Precondition Failed" },
	{ 413, "Content Too Large" },
	{ 414, "URI Too Long" },
	{ 416, "Range Not Satisfiable" },
	{ 417, "Expectation Failed" },
	{ 431, "Request Header Fields Too Large" },
	{ 500, "Internal Server Error" },
	{ 501, "Not Implemented" },
	{ 503, "Service Unavailable" },
	{ 505, "HTTP Version Not Supported" },
};

const char *tlhttp_status_text(int status)
{
	for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++)
		if (phrases[i].status == status)
			return phrases[i].text;
	return NULL;
}

struct out {
	char *p, *end;
	int over;
};

static inline void put(struct out *o, const char *s, size_t n)
{
	if ((size_t)(o->end - o->p) < n) {
		o->over = 1;
		o->end = o->p; /* nothing more fits */
		return;
	}
	memcpy(o->p, s, n);
	o->p += n;
}

#define PUTS(o, lit) put(o, lit, sizeof lit - 1)

static void put_u64(struct out *o, uint64_t x)
{
	char tmp[20];
	size_t i = sizeof tmp;

	do {
		tmp[--i] = (char)('0' + x % 10);
		x /= 10;
	} while (x);
	put(o, tmp + i, sizeof tmp - i);
}

/* Length of a header value to write, or -1 if it holds a control char. */
static long value_len(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (((unsigned char)s[n] < 0x20 && s[n] != '\t') || s[n] == 0x7f)
			return -1;
	return (long)n;
}

int tlhttp_head_format(char *buf, size_t cap, const struct tlhttp_resp *r)
{
	struct out o;
	const char *phrase;
	long sl = 0, tl = 0, el = 0;

	if ((!buf && cap) || !r)
		return -EINVAL;
	phrase = tlhttp_status_text(r->status);
	if (!phrase || (r->server && (sl = value_len(r->server)) < 0) ||
	    (r->content_type && (tl = value_len(r->content_type)) < 0) ||
	    (r->etag && (el = value_len(r->etag)) < 0) ||
	    (r->date && r->date->sec == INT64_MIN) ||
	    (r->has_last_modified &&
	     (r->last_modified < TLHTTP_TIME_MIN || r->last_modified > TLHTTP_TIME_MAX)) ||
	    r->connection > TLHTTP_CONN_KEEP_ALIVE || r->content_range > TLHTTP_CRANGE_UNSATISFIED ||
	    (r->content_range == TLHTTP_CRANGE_BYTES &&
	     !(r->range_first <= r->range_last && r->range_last < r->range_size)))
		return -EINVAL;
	if (!buf) /* cap is 0: nothing fits */
		return -ENOBUFS;
	o = (struct out){ buf, buf + cap, 0 };

	char code[4] = { (char)('0' + r->status / 100), (char)('0' + r->status / 10 % 10),
			 (char)('0' + r->status % 10), ' ' };
	PUTS(&o, "HTTP/1.1 ");
	put(&o, code, 4);
	put(&o, phrase, strlen(phrase));
	PUTS(&o, "\r\n");
	if (r->date)
		put(&o, r->date->line, TLHTTP_DATE_LINE_LEN);
	if (r->server) {
		PUTS(&o, "Server: ");
		put(&o, r->server, (size_t)sl);
		PUTS(&o, "\r\n");
	}
	if (r->content_type) {
		PUTS(&o, "Content-Type: ");
		put(&o, r->content_type, (size_t)tl);
		PUTS(&o, "\r\n");
	}
	if (r->content_length >= 0) {
		PUTS(&o, "Content-Length: ");
		put_u64(&o, (uint64_t)r->content_length);
		PUTS(&o, "\r\n");
	}
	if (r->has_last_modified) {
		char d[TLHTTP_DATE_LEN];
		tlhttp_date_format(r->last_modified, d);
		PUTS(&o, "Last-Modified: ");
		put(&o, d, sizeof d);
		PUTS(&o, "\r\n");
	}
	if (r->etag) {
		PUTS(&o, "ETag: ");
		put(&o, r->etag, (size_t)el);
		PUTS(&o, "\r\n");
	}
	if (r->content_range == TLHTTP_CRANGE_BYTES) {
		PUTS(&o, "Content-Range: bytes ");
		put_u64(&o, r->range_first);
		PUTS(&o, "-");
		put_u64(&o, r->range_last);
		PUTS(&o, "/");
		put_u64(&o, r->range_size);
		PUTS(&o, "\r\n");
	} else if (r->content_range == TLHTTP_CRANGE_UNSATISFIED) {
		PUTS(&o, "Content-Range: bytes */");
		put_u64(&o, r->range_size);
		PUTS(&o, "\r\n");
	}
	if (r->allow)
		PUTS(&o, "Allow: GET, HEAD\r\n");
	if (r->connection == TLHTTP_CONN_CLOSE)
		PUTS(&o, "Connection: close\r\n");
	else if (r->connection == TLHTTP_CONN_KEEP_ALIVE)
		PUTS(&o, "Connection: keep-alive\r\n");
	PUTS(&o, "\r\n");
	return o.over ? -ENOBUFS : (int)(o.p - buf);
}
