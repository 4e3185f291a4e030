/* tools/tlhttp/range.h: the Range request header (RFC 9110 14.2), one byte range at most. */
#ifndef TLHTTP_RANGE_H
#define TLHTTP_RANGE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decides how to answer a Range header value v[0..n) (OWS already trimmed,
 * as tlhttp_req.range is) for a representation of size bytes:
 *
 *   ranges = "bytes" "=" range-set     ; "bytes" case-insensitive
 *   range-set = 1#( int-range / suffix-range )   ; OWS around commas, empty
 *                                                ; elements allowed
 *   int-range = 1*DIGIT "-" [ 1*DIGIT ]          suffix-range = "-" 1*DIGIT
 *
 * Returns
 *   206   one satisfiable range: bytes *first .. *last inclusive, last < size
 *         (an int-range's last-pos past the end is cut to size - 1; a suffix
 *         longer than the representation selects all of it).
 *   416   one range, not satisfiable: first-pos >= size, or the suffix "-0"
 *         (the response's Content-Range is then the unsatisfied-range
 *         form, TLHTTP_CRANGE_UNSATISFIED in resp.h).
 *   200   serve the whole representation: the value is not a valid byte
 *         range set (another unit, bad syntax, last-pos before first-pos), it
 *         holds more than one range, or it is a non-zero suffix of an empty
 *         representation, which RFC 9110 14.1.1 calls satisfiable but no 206
 *         can express. More than one range is served whole on purpose
 *         (RFC 9110 14.2 lets a server ignore Range): it spares
 *         multipart/byteranges and the overlapping-ranges amplification.
 *   -EINVAL  v is NULL with n > 0, or first or last is NULL.
 * *first and *last are written only for 206. Numbers too large for 64 bits
 * count as the largest value (so a huge first-pos is 416).
 */
int tlhttp_range_parse(const char *v, size_t n, uint64_t size, uint64_t *first, uint64_t *last);

#endif
