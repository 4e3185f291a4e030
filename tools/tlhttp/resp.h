/* tools/tlhttp/resp.h: a response head written into the caller's buffer, with its exact length. */
#ifndef TLHTTP_RESP_H
#define TLHTTP_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "tlhttp/date.h"

enum tlhttp_conn {
	TLHTTP_CONN_NONE = 0,       /* no Connection line (HTTP/1.1 keep-alive is the default) */
	TLHTTP_CONN_CLOSE = 1,      /* "Connection: close" */
	TLHTTP_CONN_KEEP_ALIVE = 2, /* "Connection: keep-alive" (what an HTTP/1.0 client needs) */
};

enum tlhttp_crange {
	TLHTTP_CRANGE_NONE = 0,
	TLHTTP_CRANGE_BYTES = 1,       /* "Content-Range: bytes FIRST-LAST/SIZE" (206) */
	TLHTTP_CRANGE_UNSATISFIED = 2, /* "Content-Range: bytes " "*" "/SIZE" (416) */
};

/* What goes into the head; fields that are off are not written. */
struct tlhttp_resp {
	int status;                           /* a status tlhttp_status_text knows */
	const struct tlhttp_date_cache *date; /* its line, as updated; NULL: no Date */
	const char *server;                   /* "Server: <server>"; NULL: none */
	const char *content_type;             /* NULL: none */
	int64_t content_length;               /* < 0: no Content-Length */
	int64_t last_modified;                /* seconds since the epoch, if has_last_modified */
	const char *etag;                     /* "ETag: <etag>" (quotes included); NULL: none */
	uint8_t has_last_modified;
	uint8_t connection;                   /* enum tlhttp_conn */
	uint8_t allow;                        /* 1: "Allow: GET, HEAD" (405) */
	uint8_t content_range;                /* enum tlhttp_crange */
	uint64_t range_first, range_last, range_size;
};

/*
 * The reason phrase of a status this server sends: 200 206 304 400 403 404
 * 405 408 412 413 414 416 417 431 500 501 503 505. Returns a static string, or
 * NULL for any other number.
 */
const char *tlhttp_status_text(int status);

/*
 * Writes the head of r into buf[0..cap): the status line ("HTTP/1.1 <status>
 * <phrase>"), then Date, Server, Content-Type, Content-Length, Last-Modified,
 * ETag, Content-Range, Allow, Connection (those that are on, in that order), each
 * ending in CRLF, then the empty line. No NUL is written.
 *
 * Returns the exact length written, or
 *   -ENOBUFS  it does not fit in cap bytes (nothing is written past
 *             buf[cap - 1]; what is before it is unspecified).
 *   -EINVAL   buf NULL with cap > 0, r NULL, an unknown status, a server,
 *             content_type or etag holding a control character (CR and LF included:
 *             no header can be injected), a date cache never updated, a
 *             last_modified outside TLHTTP_TIME_MIN .. TLHTTP_TIME_MAX, a
 *             bytes Content-Range without first <= last < size, or an
 *             unknown connection or content_range value.
 */
int tlhttp_head_format(char *buf, size_t cap, const struct tlhttp_resp *r);

#endif
