/* tools/reason.h: the one-line reason of the tools' parsers that do no I/O (cli.c, tlhttp/args.c, tlproxy's config.c and netlist.c): formatted into err when there is one, -EINVAL returned. */
#ifndef TL_TOOLS_REASON_H
#define TL_TOOLS_REASON_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Format the reason into err[0..errlen) (nothing when err is NULL or
 * errlen 0; the tool adds its name in front); always -EINVAL, so that a
 * parser can `return fail(...)`. */
static inline int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

#endif /* TL_TOOLS_REASON_H */
