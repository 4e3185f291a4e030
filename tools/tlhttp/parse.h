/* tools/tlhttp/parse.h: tlhttp's HTTP/1.1 request-head parser: incremental, zero-copy, allocation-free, strict. */
#ifndef TLHTTP_PARSE_H
#define TLHTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

/*
 * What is accepted: a subset of RFC 9112, for a server that answers GET and
 * HEAD and reads no request body. Terms as in RFC 9110 / 9112 (ABNF, RFC 5234).
 *
 *   request-head   = *( CRLF ) request-line *( field-line CRLF ) CRLF
 *   request-line   = method SP request-target SP HTTP-version CRLF
 *   method         = token                    ; only GET and HEAD are served
 *   request-target = origin-form / absolute-form
 *   origin-form    = "/" *tgtchar              ; path [ "?" query ]
 *   absolute-form  = ( "http" / "https" ) "://" authority [ ( "/" / "?" ) *tgtchar ]
 *   authority      = 1*( tgtchar except "/" "?" "@" )
 *   tgtchar        = unreserved / sub-delims / ":" / "@" / "/" / "?" / "%" / "[" / "]"
 *                                              ; RFC 3986 2.2, 2.3
 *   HTTP-version   = "HTTP/" DIGIT "." DIGIT
 *   field-line     = field-name ":" OWS field-value OWS
 *   field-name     = token
 *   field-value    = *( VCHAR / obs-text / SP / HTAB )
 *   token          = 1*tchar                   ; RFC 9110 5.6.2
 *
 * The method, "HTTP" and the version are case-sensitive; the scheme and
 * field names are not. Percent-escapes in the target are checked by path.h,
 * not here; "#", SP and bytes above 0x7E are not tgtchars. The authority of
 * an absolute-form must be non-empty and carry no userinfo (RFC 9110 4.2.1,
 * 4.2.4); the path that follows it is what the server serves.
 *
 * Stricter than RFC 9112 allows, on purpose (each one is refused with 400):
 * every line ends in CRLF (a bare LF is not a line end, RFC 9112 2.2 MAY);
 * exactly one SP between the three parts of the request line; a header line
 * that starts with SP or HTAB (obs-fold, or whitespace after the request
 * line) is refused (RFC 9112 5.2 allows rejecting). Empty lines before the
 * request line are skipped (RFC 9112 2.2), and count toward its limit.
 *
 * Decisions:
 * - Versions: HTTP/1.0 and HTTP/1.1; HTTP/1.2 .. 1.9 are read as 1.1
 *   (RFC 9110 2.5: a higher minor version is processed as the highest one
 *   implemented); any other well-formed version (0.x, 2.x ...) is 505.
 * - A method other than GET and HEAD is 405 (the response carries
 *   "Allow: GET, HEAD"), decided once the request line is in and
 *   well-formed, like 505 (which comes first): the header section of such a
 *   request is not read. asterisk-form and authority-form are thus 405 for
 *   the methods they belong to (OPTIONS, CONNECT), 400 on GET and HEAD.
 * - No body is ever read. A GET or HEAD with Content-Length greater than 0,
 *   or with Transfer-Encoding at all, is refused (400, TLHTTP_R_BODY) rather
 *   than its body skipped: content in a GET has no defined semantics
 *   (RFC 9110 9.3.1) and is a known request-smuggling shape, no legitimate
 *   client sends one, and refusing and closing leaves no doubt about where
 *   the next request starts. Content-Length: 0 is accepted.
 * - Content-Length must be 1*DIGIT with a value up to 2^63 - 1; a second
 *   Content-Length line is refused, with its own reason whether the values
 *   are equal or not. Content-Length with Transfer-Encoding is refused;
 *   Transfer-Encoding in HTTP/1.0 is refused (RFC 9112 6.1: faulty framing);
 *   Transfer-Encoding whose last coding is not "chunked", or that names
 *   "chunked" before another coding (or twice), is refused. The codings are
 *   split at commas and compared case-insensitively; a coding with
 *   parameters is not "chunked".
 * - Host is required in HTTP/1.1 (RFC 9112 3.2); a second Host line and a
 *   Host holding a character outside RFC 3986 reg-name / IP-literal / port
 *   characters are refused. An empty Host is accepted.
 * - Connection is a comma list of tokens (empty elements allowed); "close"
 *   and "keep-alive" are recognised case-insensitively, others ignored.
 *   keep_alive: HTTP/1.1 unless "close"; HTTP/1.0 only with "keep-alive"
 *   and without "close".
 * - If-Modified-Since, If-Unmodified-Since and Range are returned as their
 *   values. A second line of any of them makes the field absent (the server
 *   ignores it): a repeated If-Modified-Since or If-Unmodified-Since is a
 *   list of more than one date, which RFC 9110 13.1.3 and 13.1.4 say to
 *   ignore, and a repeated Range is a multi-range set, which range.h serves
 *   as 200 anyway. Expect: the first line's value is returned, with
 *   expect_continue set when it is exactly "100-continue". If-Range is
 *   returned too (cond.h judges it); a second line leaves it present but
 *   empty, which matches no validator, so the Range is not honoured: the
 *   safe answer is the whole representation.
 * - If-Match and If-None-Match are lists that may span several lines
 *   (RFC 9110 5.3): the first line's value is returned, the lines are
 *   counted, and tlhttp_req_field_next reads every line when there are
 *   more. Their syntax is judged where they are evaluated (cond.h), not
 *   here: a bad entity-tag is not a bad request.
 * - Any other header line is checked for syntax, counted and ignored.
 *
 * Limits (struct tlhttp_limits): max_line bounds the request line without
 * its CRLF, together with any empty lines before it (414 past it);
 * max_header_bytes bounds the header section, from the byte after the
 * request line's CRLF to the final CRLF inclusive (431); max_headers bounds
 * the number of header lines (431).
 *
 * Order of decision, which makes every result a function of the bytes alone
 * (however they were split): lines are taken in order and each is judged
 * whole, once its LF has arrived; a line whose LF is not within the limit is
 * refused for its length, whatever it holds. Bytes of a line not yet ended
 * are never judged, so an error is reported when its line ends, or when the
 * limit is reached. The checks that need the whole head (missing Host, the
 * body rules) come when the empty line arrives, in the order: missing Host,
 * Content-Length with Transfer-Encoding, Transfer-Encoding in HTTP/1.0,
 * Transfer-Encoding not ending in chunked, body.
 *
 * After any refusal the connection must be closed once the response has been
 * sent: where a refused request ends is not known.
 */

/* The refusals, each with its status. X(name, status, description). */
#define TLHTTP_REASONS(X)                                                                    \
	X(OK, 0, "accepted")                                                                 \
	X(BARE_LF, 400, "a line ends in LF without CR")                                      \
	X(BARE_CR, 400, "a CR not followed by LF")                                           \
	X(METHOD, 400, "the method is not a token")                                          \
	X(REQUEST_LINE, 400, "the request line is not three parts separated by single spaces") \
	X(TARGET, 400, "the request target holds a character outside RFC 3986")              \
	X(TARGET_FORM, 400, "the request target is neither origin-form nor an http(s) absolute-form") \
	X(VERSION, 400, "the HTTP version is malformed")                                     \
	X(OBS_FOLD, 400, "a header line starts with whitespace (obs-fold)")                  \
	X(EMPTY_NAME, 400, "a header line has an empty name")                                \
	X(NAME_CHAR, 400, "a header name holds a character outside tchar")                   \
	X(WS_BEFORE_COLON, 400, "whitespace between a header name and its colon")            \
	X(NO_COLON, 400, "a header line has no colon")                                       \
	X(VALUE_CHAR, 400, "a header value holds a control character")                       \
	X(NO_HOST, 400, "an HTTP/1.1 request without Host")                                  \
	X(DUP_HOST, 400, "more than one Host line")                                          \
	X(BAD_HOST, 400, "Host holds a character that no host or port has")                  \
	X(CONNECTION, 400, "Connection is not a list of tokens")                             \
	X(CL_INVALID, 400, "Content-Length is not 1*DIGIT up to 2^63-1")                     \
	X(CL_DUP, 400, "Content-Length repeated with the same value")                        \
	X(CL_CONFLICT, 400, "Content-Length repeated with different values")                 \
	X(CL_AND_TE, 400, "both Content-Length and Transfer-Encoding")                       \
	X(TE_HTTP10, 400, "Transfer-Encoding in an HTTP/1.0 request")                        \
	X(TE_NOT_CHUNKED, 400, "Transfer-Encoding does not end in a single chunked")         \
	X(BODY, 400, "a GET or HEAD request with a body")                                    \
	X(LINE_TOO_LONG, 414, "the request line is over the limit")                          \
	X(HEADERS_TOO_LARGE, 431, "the header section is over the byte limit")               \
	X(TOO_MANY_HEADERS, 431, "more header lines than the limit")                         \
	X(METHOD_NOT_ALLOWED, 405, "a method other than GET and HEAD")                       \
	X(VERSION_NOT_SUPPORTED, 505, "an HTTP version other than 1.x")

enum tlhttp_reason {
#define TLHTTP_R_ENUM(name, status, text) TLHTTP_R_##name,
	TLHTTP_REASONS(TLHTTP_R_ENUM)
#undef TLHTTP_R_ENUM
	TLHTTP_R_COUNT
};

enum tlhttp_method {
	TLHTTP_METHOD_NONE = 0, /* not parsed (yet) */
	TLHTTP_GET = 1,
	TLHTTP_HEAD = 2,
};

struct tlhttp_limits {
	uint32_t max_line;         /* request line bytes, 1 .. TLHTTP_LIMIT_MAX */
	uint32_t max_header_bytes; /* header section bytes, 2 .. TLHTTP_LIMIT_MAX */
	uint32_t max_headers;      /* header lines, 1 .. TLHTTP_LIMIT_MAX */
};
#define TLHTTP_LIMIT_MAX (1u << 20)
/* The defaults, also used when tlhttp_req_init is given NULL. */
#define TLHTTP_LIMITS_DEFAULT { .max_line = 8192, .max_header_bytes = 16384, .max_headers = 100 }

/* Bytes of the caller's buffer. p is NULL when the field is absent; a field
 * present but empty has p set and len 0. */
struct tlhttp_span {
	const char *p;
	uint32_t len;
};

/*
 * One request. The results are complete after tlhttp_parse returned a
 * count; after -EBADMSG, status and reason say why, and the other fields
 * hold what was parsed before the refusal. Every field is defined from
 * tlhttp_req_init on (absent spans are NULL). The spans point into the buffer
 * last given to tlhttp_parse and live as long as its bytes do. The fields
 * ending in '_' are the parser's state.
 */
struct tlhttp_req {
	uint8_t method;          /* enum tlhttp_method */
	uint8_t minor;           /* HTTP/1.<minor>: 0 or 1 */
	uint8_t keep_alive;      /* 1: the connection may carry the next request */
	uint8_t conn_close;      /* Connection listed "close" */
	uint8_t conn_keep_alive; /* Connection listed "keep-alive" */
	uint8_t expect_continue; /* Expect is exactly "100-continue" */
	uint8_t has_content_length;
	uint8_t reason;          /* enum tlhttp_reason: TLHTTP_R_OK unless refused */
	uint16_t status;         /* 0, or the refusal's status (400, 405, 414, 431, 505) */
	uint32_t nheaders;       /* header lines */
	uint64_t content_length; /* 0 unless has_content_length */

	uint8_t if_match_lines;      /* If-Match lines, up to 255 */
	uint8_t if_none_match_lines; /* If-None-Match lines, up to 255 */

	const struct tlhttp_limits *lim_;
	const char *base_;
	uint32_t off_, scan_, hs_, done_;
	uint8_t phase_, seen_, te_, seen2_, pad_[4];

	struct tlhttp_span target;    /* the request-target as sent */
	struct tlhttp_span path;      /* its path, still percent-encoded, starting with "/" */
	struct tlhttp_span query;     /* after "?", without it; p NULL if no "?" */
	struct tlhttp_span authority; /* absolute-form's authority; p NULL for origin-form */
	struct tlhttp_span host;      /* Host's value, OWS trimmed; p NULL if absent */
	struct tlhttp_span if_modified_since;
	struct tlhttp_span range;
	struct tlhttp_span expect;
	struct tlhttp_span if_range;
	struct tlhttp_span if_match;      /* the first line's value */
	struct tlhttp_span if_none_match; /* the first line's value */
	struct tlhttp_span if_unmodified_since;
};

/*
 * Prepares req for a new request with the given limits (NULL: the
 * defaults). lim is kept by pointer: it must outlive req's use. Returns 0, or
 * -EINVAL if req is NULL or a limit is out of its range (req is then unusable:
 * tlhttp_parse refuses it with -EINVAL).
 */
int tlhttp_req_init(struct tlhttp_req *req, const struct tlhttp_limits *lim);

/*
 * Parses the request whose first byte is buf[0], from the len bytes
 * available; bytes past the head (a pipelined request, a partial one) are
 * left alone, and nothing past buf[len - 1] is read. Call it again with more
 * bytes after a 0 (the same request: the bytes already given unchanged, len
 * not smaller; buf may be another address, e.g. after the caller compacted
 * its buffer, and the spans then follow it). Work done on earlier calls is not
 * redone, so a head that trickles in byte by byte costs linear time. After a
 * result other than 0 the request is finished: calling again returns the same
 * result.
 *
 * Returns
 *   n > 0      the head is complete and accepted: it is buf[0 .. n-1], the
 *              next request starts at buf[n]; the results are in req.
 *   0          more bytes are needed (no limit is reached yet).
 *   -EBADMSG   refused: req->status is the status to answer with and
 *              req->reason says why (tlhttp_reason_text); close after it.
 *   -EINVAL    req was not initialised, buf is NULL with len > 0, or len is
 *              smaller than on an earlier call for this request.
 */
int tlhttp_parse(struct tlhttp_req *req, const char *buf, size_t len);

/*
 * Reads the lines of one field of a request tlhttp_parse accepted, in the
 * order they came: name is the field name in lowercase (at most 64 bytes);
 * *pos is 0 for the first call and then what the last call left in it.
 * Each call puts the next line's value (OWS trimmed, pointing into the
 * buffer as the other spans do) in *value and returns 1; it returns 0 when
 * no line is left. For a field listed on several lines (If-Match,
 * If-None-Match), whose first line alone is kept in the request. Returns
 * -EINVAL if an argument is NULL or req holds no accepted head.
 */
int tlhttp_req_field_next(const struct tlhttp_req *req, const char *name, uint32_t *pos,
			  struct tlhttp_span *value);

/* The status of a reason (0 for TLHTTP_R_OK), or -EINVAL if out of range. */
int tlhttp_reason_status(unsigned reason);

/* The reason's symbolic name ("BARE_CR") and its description, static
 * strings; NULL if out of range. */
const char *tlhttp_reason_name(unsigned reason);
const char *tlhttp_reason_text(unsigned reason);

#endif
