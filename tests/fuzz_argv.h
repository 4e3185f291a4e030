/* tests/fuzz_argv.h: the command-line fuzz targets' argv: an input split at NUL bytes into arguments, each its own heap block. */
#ifndef TL_TESTS_FUZZ_ARGV_H
#define TL_TESTS_FUZZ_ARGV_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Append to argv[0..argc) every piece of data[0..size) between NUL bytes
 * (the empty ones too) while argc < cap, each a heap block of exactly its
 * length and its NUL, so that ASan sees a read one byte too far; then
 * argv[argc] = NULL (argv has cap + 1 places). Returns the new argc; aborts
 * when out of memory. */
static inline int fuzz_argv_split(const uint8_t *data, size_t size, char **argv, int argc, int cap)
{
	for (size_t pos = 0; pos < size && argc < cap;) {
		const uint8_t *nul = memchr(data + pos, 0, size - pos);
		size_t len = nul ? (size_t)(nul - (data + pos)) : size - pos;
		char *a = malloc(len + 1);

		if (!a)
			abort();
		memcpy(a, data + pos, len);
		a[len] = '\0';
		argv[argc++] = a;
		pos += len + 1;
	}
	argv[argc] = NULL;
	return argc;
}

/* 1 when s is one of argv[0..argc) itself (not a copy). */
static inline int fuzz_argv_has(const char *s, int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		if (s == argv[i])
			return 1;
	return 0;
}

/* Free argv[0..argc). */
static inline void fuzz_argv_free(char **argv, int argc)
{
	for (int i = 0; i < argc; i++)
		free(argv[i]);
}

#endif
