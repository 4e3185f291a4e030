/* tests/fuzz_tlkv.c: libFuzzer target for tlkv's reader of the Redis protocol (tools/tlkv.c: parse and line): the input is what a client sends, parsed command after command as a connection does, and every answer held to what parse promises. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int tlkv_main(int argc, char **argv);
#define main tlkv_main /* the program's own main is not run */
#include "../tools/tlkv.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct arg av[MAX_ARGS];

/* What parse says of p[0..n): a whole command (its length, each argument
 * inside it), not whole yet (at least *need bytes, more than it has), or bad
 * (an error line to send). Returns parse's value. */
static int parse_checked(const uint8_t *p, uint32_t n, uint32_t *need) {
	uint32_t ac = 0;
	const char *why = NULL;
	*need = 0;
	int used = parse(p, n, av, &ac, need, &why);
	if (used < 0 && (!why || strncmp(why, "-ERR Protocol error: ", 21) || strcmp(why + strlen(why) - 2, "\r\n")))
		abort(); /* bad: the line the client gets, whole */
	if (used == 0 && *need <= n)
		abort(); /* not whole: it asks for more than it was given */
	if ((used > 0 && (uint32_t)used > n) || ac > MAX_ARGS)
		abort();
	for (uint32_t i = 0; used > 0 && i < ac; i++)
		if (av[i].p < p || av[i].n > VAL_MAX || av[i].p + av[i].n > p + used)
			abort(); /* each argument inside the command */
	return used;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	uint32_t n = size > CMD_MAX ? CMD_MAX : (uint32_t)size, off = 0, need;
	uint8_t *p = malloc(n ? n : 1); /* exactly n bytes: a read past them is ASan's */
	if (!p)
		return 0;
	memcpy(p, data, n);
	for (int used; off < n && (used = parse_checked(p + off, n - off, &need)) > 0; off += (uint32_t)used) {
		/* A command split across reads: each shorter piece of a whole
		 * command is not whole yet (never bad) and asks for no more than
		 * the command's length. Every piece of a short one, a few of a
		 * long one. */
		for (uint32_t k = 1; k < (uint32_t)used; k = used <= 64 ? k + 1 : k * 2 + 1) {
			uint8_t *q = malloc(k);
			if (!q)
				break;
			memcpy(q, p + off, k);
			int r = parse_checked(q, k, &need);
			free(q);
			if (r != 0 || need > (uint32_t)used)
				abort();
		}
	}
	free(p);
	return 0;
}
