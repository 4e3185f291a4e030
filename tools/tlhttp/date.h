/* tools/tlhttp/date.h: HTTP-date (RFC 9110 5.6.7) parsing and formatting, and the cached Date header line. */
#ifndef TLHTTP_DATE_H
#define TLHTTP_DATE_H

#include <stddef.h>
#include <stdint.h>

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
#define TLHTTP_DATE_LEN 29
/* "Date: " + the date + CRLF */
#define TLHTTP_DATE_LINE_LEN (6 + TLHTTP_DATE_LEN + 2)

/* Seconds since the Unix epoch that have a four-digit year: 0001-01-01 to
 * 9999-12-31T23:59:59Z. */
#define TLHTTP_TIME_MIN INT64_C(-62135596800)
#define TLHTTP_TIME_MAX INT64_C(253402300799)

/*
 * Writes t (seconds since the epoch, UTC) as an IMF-fixdate into out, which
 * must hold TLHTTP_DATE_LEN bytes (no NUL is written). Returns
 * TLHTTP_DATE_LEN, or -EINVAL if out is NULL or t is outside
 * TLHTTP_TIME_MIN .. TLHTTP_TIME_MAX.
 */
int tlhttp_date_format(int64_t t, char *out);

/*
 * Parses an HTTP-date: the IMF-fixdate, or one of the two obsolete forms that
 * RFC 9110 requires recipients to accept ("Sunday, 06-Nov-94 08:49:37 GMT"
 * and asctime's "Sun Nov  6 08:49:37 1994"). The whole of s[0..n) must be the
 * date: no surrounding whitespace. Names are case-sensitive, as the RFC
 * says; the day name must be a day name but is not checked against the date;
 * the day must exist in its month; second 60 (a leap second) is accepted and
 * counts as the next minute's 0 (so 9999-12-31 23:59:60 is out of range).
 * The two-digit year of the second form is put in the century that leaves it at most 50 years after now's year and less
 * than 50 years before it (RFC 9110 5.6.7); now is seconds since the epoch.
 * Returns 0 with *out set to seconds since the epoch, or -EINVAL (not an
 * HTTP-date, or s or out NULL).
 */
int tlhttp_date_parse(const char *s, size_t n, int64_t now, int64_t *out);

/* The "Date: ...\r\n" line, formatted again only when the second changes. */
struct tlhttp_date_cache {
	int64_t sec;                           /* the second line holds */
	char line[TLHTTP_DATE_LINE_LEN + 1];   /* NUL-terminated */
};

/* Empties the cache (the first update formats). Returns 0, -EINVAL if c is NULL. */
int tlhttp_date_cache_init(struct tlhttp_date_cache *c);

/*
 * Brings the line to now (seconds since the epoch, from the caller's clock,
 * e.g. once per loop turn). Returns 1 if the line was formatted again, 0 if
 * now is the second it already holds, -EINVAL if c is NULL or now is out of
 * range (the line is then unchanged).
 */
int tlhttp_date_cache_update(struct tlhttp_date_cache *c, int64_t now);

#endif
