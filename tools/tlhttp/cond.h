/* tools/tlhttp/cond.h: conditional requests (RFC 9110 13): the entity-tags tlhttp sends, and its preconditions evaluated in the order of 13.2.2. */
#ifndef TLHTTP_COND_H
#define TLHTTP_COND_H

#include <stddef.h>
#include <stdint.h>

#include "tlhttp/parse.h"

/*
 * Entity-tags. A file's tag is strong and made as nginx makes it: its
 * modification time in seconds and its size in bytes, both in lowercase
 * hexadecimal without leading zeros, joined by '-' and quoted:
 * "6553f100-f" for 15 bytes modified at 1700000000 (a time before 1970 is
 * written as its 64-bit two's complement). The same tree served by nginx
 * gives the same tags, so a client or cache that moves between the two
 * keeps its validators. The tag changes with every change of size or
 * second of modification; a file rewritten within the same second to the
 * same length keeps it, as with nginx (and as with Last-Modified).
 *
 * Syntax (RFC 9110 8.8.3, 13.1.1, 13.1.2, 13.1.5):
 *   entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE   ; "W/" case-sensitive
 *   etagc      = %x21 / %x23-7E / %x80-FF
 *   If-Match = If-None-Match = "*" / #entity-tag ; OWS "," OWS, empty elements allowed
 *   If-Range = entity-tag / HTTP-date
 *
 * A field that is not exactly this (an unquoted or unterminated tag, two
 * tags without a comma, "*" beside tags or on more than one line, a
 * lowercase "w/") is taken as a list that matches nothing, whichever part
 * is wrong: If-Match then fails (412: the client's condition is not shown
 * to hold, so nothing is done on its strength), If-None-Match then holds
 * (the representation is sent in full, which is never wrong). RFC 9110
 * gives no rule for bad syntax in these fields; each choice is the safe
 * direction of its field, a bad list is never half-read (a tag found
 * before the error does not count: where an unterminated tag ends is a
 * guess), and no 400 is spent on clients that send sloppy tags. An empty
 * field is a list of no tags.
 */

/* '"' + 16 hex digits + '-' + 16 hex digits + '"' + NUL */
#define TLHTTP_ETAG_MAX 36

/*
 * Writes the entity-tag of a file of size bytes modified at mtime (seconds
 * since the epoch) into out, NUL-terminated, quotes included. Returns its
 * length (without the NUL), or -EINVAL if out is NULL.
 */
int tlhttp_etag_format(int64_t mtime, uint64_t size, char out[TLHTTP_ETAG_MAX]);

/* tlhttp_etag_match's results. */
#define TLHTTP_TAGS_NONE 0  /* a list, no tag of which matches */
#define TLHTTP_TAGS_MATCH 1 /* a list with a tag that matches */
#define TLHTTP_TAGS_STAR 2  /* "*" */

/*
 * Matches one line's value v[0..n) of If-Match or If-None-Match (OWS
 * trimmed) against etag[0..elen), a strong tag with its quotes as
 * tlhttp_etag_format writes it (NULL, 0: the representation has none,
 * and no tag matches). strong 1 is the strong comparison (If-Match: a
 * weak tag never matches), 0 the weak one (If-None-Match: "W/" is not
 * looked at). Returns TLHTTP_TAGS_STAR, _MATCH or _NONE; -EBADMSG if v is
 * neither "*" nor a list of entity-tags (the whole value is checked, even
 * after a match); -EINVAL if v or etag is NULL with a length.
 */
int tlhttp_etag_match(const char *v, size_t n, const char *etag, size_t elen, int strong);

/* What the server knows of the representation it selected. */
struct tlhttp_validators {
	const char *etag; /* its strong entity-tag, quoted, NUL-terminated; NULL: none */
	int64_t mtime;    /* Last-Modified, seconds since the epoch, when has_mtime */
	int has_mtime;    /* 0: no modification date (no Last-Modified is sent) */
};

/*
 * Whether a Range may be honoured given the request's If-Range value
 * v[0..n) (RFC 9110 13.1.5). Without If-Range (v NULL) it may. An
 * entity-tag must be one tag equal to v->etag under the strong comparison
 * (a weak tag never is); an HTTP-date must be exactly the Last-Modified
 * (now, seconds since the epoch, places a two-digit year: date.h).
 * Anything else, a list or a bad tag included, does not match, and the
 * whole representation is served. Returns 1 or 0; -EINVAL if val is NULL.
 */
int tlhttp_if_range_ok(const char *v, size_t n, const struct tlhttp_validators *val, int64_t now);

/*
 * Evaluates the preconditions of req, a GET or HEAD whose answer without
 * them would be 2xx, against the selected representation, in the order of
 * RFC 9110 13.2.2:
 *   1. If-Match: fails (412) unless "*" or a tag matching val->etag
 *      strongly; then
 *   2. only without If-Match, If-Unmodified-Since: fails (412) if the
 *      representation was modified after the date; ignored if it is not
 *      one HTTP-date or there is no modification date;
 *   3. If-None-Match: fails (304) if "*" or a tag matching val->etag
 *      weakly;
 *   4. only without If-None-Match, If-Modified-Since: fails (304) if not
 *      modified after the date; ignored if it is not one HTTP-date, if the
 *      date is later than now (13.1.3), or there is no modification date;
 *   5. If-Range, when there is a Range: *range_ok says whether the Range
 *      may be honoured (tlhttp_if_range_ok); 1 when there is no Range.
 * Lines of If-Match and If-None-Match beyond the first are read from the
 * head (tlhttp_req_field_next), so the buffer req was parsed from must
 * still hold it. now is the server's clock, seconds since the epoch.
 * Returns 200 (go on: serve, honouring the Range if *range_ok), 304 or
 * 412; -EINVAL if an argument is NULL. *range_ok is set on 200 only.
 */
int tlhttp_preconditions(const struct tlhttp_req *req, const struct tlhttp_validators *val,
			 int64_t now, int *range_ok);

#endif
