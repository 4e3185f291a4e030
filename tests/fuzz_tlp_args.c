/* tests/fuzz_tlp_args.c: libFuzzer target for tlproxy's command-line builder (tools/tlproxy/config.c, tlp_args_parse): the input is a NUL-separated argv. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_argv.h"
#include "tlp_model_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Input: byte 0 picks the error buffer (value % 4: 256 bytes, none, 1 byte,
 * 9 bytes, so that cutting is exercised); the rest, split at NUL bytes, is
 * argv after the program name. Every argument is its own heap block of
 * exactly its length, so ASan sees a read one byte too far.
 */

#define MAX_ARGS 64

static const size_t err_sizes[4] = {256, 0, 1, 9};

static void check(int ok, const char *what, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_args: %s (returned %d)\n", what, r);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *argv[MAX_ARGS + 2];
	struct tlp_args a1, a2;
	int argc = 0, r1, r2;
	size_t errlen;
	char *err;

	if (size < 1)
		return 0;
	errlen = err_sizes[data[0] % 4];
	argv[argc++] = strdup("tlproxy");
	argc = fuzz_argv_split(data + 1, size - 1, argv, argc, MAX_ARGS + 1);
	err = errlen ? malloc(errlen) : NULL;

	r1 = tlp_args_parse(argc, argv, &a1, err, errlen);
	check(r1 == 0 || r1 == 1 || r1 == -EINVAL || r1 == -ENOMEM, "unexpected return", r1);
	if (err) {
		check(memchr(err, '\0', errlen) != NULL, "reason not terminated", r1);
		check((r1 < 0) == (err[0] != '\0') || errlen == 1, "reason missing or left over",
		      r1);
		check(strchr(err, '\n') == NULL, "reason of more than one line", r1);
	}
	if (r1 == 0) {
		check(!a1.cfg != !a1.config_path, "neither or both of a model and a path", r1);
		if (a1.cfg) {
			const char *problem = tlp_model_problem(a1.cfg);

			if (problem)
				fprintf(stderr, "fuzz_tlp_args: model: %s\n", problem);
			check(problem == NULL, "built a bad model", r1);
			check(a1.cfg->nlisteners == 1 && a1.cfg->npools == 1 && !a1.check,
			      "not one listener and one pool", r1);
		} else {
			check(fuzz_argv_has(a1.config_path, argc - 1, argv + 1) && *a1.config_path,
			      "path not an argument", r1);
		}
	} else {
		check(!a1.cfg && !a1.config_path, "result left set", r1);
	}
	/* No hidden state. */
	r2 = tlp_args_parse(argc, argv, &a2, NULL, 0);
	check(r1 == r2 && a1.check == a2.check && a1.config_path == a2.config_path &&
		      !a1.cfg == !a2.cfg,
	      "not repeatable", r2);
	if (a1.cfg && a2.cfg)
		check(a1.cfg->pools[0].nservers == a2.cfg->pools[0].nservers &&
			      a1.cfg->pools[0].servers[0].id == a2.cfg->pools[0].servers[0].id,
		      "different model the second time", r2);
	tlp_config_free(a1.cfg);
	tlp_config_free(a2.cfg);
	free(err);
	fuzz_argv_free(argv, argc);
	return 0;
}
