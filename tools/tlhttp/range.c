/* tools/tlhttp/range.c: the Range header, parsed into one byte range or a decision to serve whole or refuse (range.h). */
#include <errno.h>

#include "tlhttp/range.h"

static int ows(char c)
{
	return c == ' ' || c == '\t';
}

/* Digits at v[*i..n), saturating at UINT64_MAX. Returns how many. */
static size_t number(const char *v, size_t n, size_t *i, uint64_t *out)
{
	size_t k = *i;
	uint64_t x = 0;

	while (k < n && v[k] >= '0' && v[k] <= '9') {
		unsigned d = (unsigned)(v[k] - '0');
		x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
		k++;
	}
	*out = x;
	size_t got = k - *i;
	*i = k;
	return got;
}

int tlhttp_range_parse(const char *v, size_t n, uint64_t size, uint64_t *first, uint64_t *last)
{
	static const char unit[] = "bytes=";
	uint64_t a = 0, b = 0;
	int count = 0, suffix = 0, has_b = 0;
	size_t i;

	if ((!v && n) || !first || !last)
		return -EINVAL;
	if (n < 6)
		return 200;
	for (i = 0; i < 5; i++)
		if ((v[i] | 0x20) != unit[i])
			return 200;
	if (v[5] != '=')
		return 200;
	i = 6;
	for (;;) {
		while (i < n && ows(v[i]))
			i++;
		if (i == n)
			break;
		if (v[i] == ',') {
			i++;
			continue;
		}
		/* One element: int-range or suffix-range. */
		uint64_t x, y = 0;
		int sfx = 0, hy = 0;
		if (v[i] == '-') {
			i++;
			if (!number(v, n, &i, &x))
				return 200;
			sfx = 1;
		} else {
			if (!number(v, n, &i, &x) || i == n || v[i] != '-')
				return 200;
			i++;
			hy = number(v, n, &i, &y) > 0;
			if (hy && y < x)
				return 200;
		}
		while (i < n && ows(v[i]))
			i++;
		if (i < n && v[i] != ',')
			return 200;
		if (++count == 1) {
			a = x;
			b = y;
			suffix = sfx;
			has_b = hy;
		}
	}
	if (count != 1)
		return 200;
	if (suffix) {
		if (a == 0)
			return 416;
		if (size == 0)
			return 200;
		*first = a >= size ? 0 : size - a;
		*last = size - 1;
		return 206;
	}
	if (a >= size)
		return 416;
	*first = a;
	*last = has_b && b < size - 1 ? b : size - 1;
	return 206;
}
