/* tools/digits.h: the strict decimal numbers of the tools' parsers that do no I/O (cli.c, tlhttp/args.c, tlproxy's config_args.c). */
#ifndef TL_TOOLS_DIGITS_H
#define TL_TOOLS_DIGITS_H

#include <stdint.h>

/*
 * Decimal digits only, lo..hi, no sign, no spaces: 0 and *out set, or -1.
 * strtoul would also take " 7", "+7" and, by negating,
 * "-18446744073709551615" as 1; a count or a port given like that is a
 * typo, not a number. Stopping at the first digit past hi also keeps the
 * value from wrapping (hi is below 2^60 at every caller).
 */
static inline int tools_digits(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0;

	if (!s || !*s)
		return -1;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > hi)
			return -1;
	}
	if (v < lo)
		return -1;
	*out = v;
	return 0;
}

/* The same into a uint32_t (hi below 2^32). */
static inline int tools_digits32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;

	if (tools_digits(s, lo, hi, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

#endif /* TL_TOOLS_DIGITS_H */
