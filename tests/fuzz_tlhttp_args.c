/* tests/fuzz_tlhttp_args.c: libFuzzer target for tlhttp's command line (tools/tlhttp/args.c): the input is a NUL-separated argv. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlhttp/args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Input: byte 0 picks the error buffer (value % 4: 256 bytes, none, 1 byte,
 * 7 bytes, so truncation is exercised); the rest, split at NUL bytes, is
 * argv after the program name. Every argument is a heap block of exactly
 * its length, and so is the error buffer, so that ASan sees a read one
 * byte too far. Checked: the result is 0, 1 or -EINVAL; a refusal has a
 * reason that fits its buffer; the same argv gives the same result; an
 * accepted one is within every documented range, its strings point into
 * argv, and its address is the one --listen names.
 */

#define MAX_ARGS 64
static const size_t err_sizes[4] = {256, 0, 1, 7};

#include "check.h"     /* CHECK: a failure prints its line and aborts */
#include "fuzz_argv.h" /* the argv split from the input */

static void check_ok(const struct tlhttp_opts *o, int argc, char **argv)
{
	char want[80];
	tl_addr a;
	uint64_t mask[16];

	CHECK(!o->body != !o->root);
	CHECK(!o->body || (fuzz_argv_has(o->body, argc, argv) && strlen(o->body) == o->body_len &&
			   o->body_len <= TLHTTP_BODY_MAX));
	CHECK(!o->root || (fuzz_argv_has(o->root, argc, argv) && *o->root));
	CHECK(!o->access_log || (fuzz_argv_has(o->access_log, argc, argv) && *o->access_log));
	CHECK(!o->cpus || (fuzz_argv_has(o->cpus, argc, argv) && tl_cpulist_parse(o->cpus, mask, 16) == 0));
	CHECK(o->shards <= 1024);
	CHECK(o->max_conns >= 1 && o->max_conns <= (1u << 20));
	CHECK(o->header_timeout_ns >= 10000000ull && o->header_timeout_ns <= 86400000000000ull);
	CHECK(o->idle_timeout_ns >= 10000000ull && o->idle_timeout_ns <= 86400000000000ull);
	CHECK(o->port >= 1);
	CHECK(memchr(o->host, '\0', sizeof o->host) != NULL);
	/* The address is the host and port as text would give them. */
	CHECK(tl_addr_parse(&a, o->host, o->port) == 0 && tl_addr_len(&a) == tl_addr_len(&o->addr) &&
	      !memcmp(&a, &o->addr, tl_addr_len(&a)));
	/* And the last --listen of argv says just that: the host as written
	 * (brackets off), the port in digits. */
	const char *last = NULL;
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--listen"))
			last = argv[++i];
		else if (!strcmp(argv[i], "--reuseport") || !strcmp(argv[i], "-h") ||
			 !strcmp(argv[i], "--help"))
			continue;
		else
			i++;
	CHECK(last != NULL);
	snprintf(want, sizeof want, a.sa.sa_family == AF_INET6 ? "[%s]:" : "%s:", o->host);
	CHECK(!strncmp(last, want, strlen(want)));
	const char *pp = last + strlen(want);
	CHECK(*pp && strspn(pp, "0123456789") == strlen(pp) && strtoul(pp, NULL, 10) == o->port);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tlhttp_opts o1, o2;
	char *argv[MAX_ARGS + 1];
	int argc = 0, r1, r2;
	size_t errlen;
	char *err;

	if (size < 1)
		return 0;
	errlen = err_sizes[data[0] % 4];
	argv[argc++] = strdup("tlhttp");
	argc = fuzz_argv_split(data + 1, size - 1, argv, argc, MAX_ARGS);
	err = errlen ? malloc(errlen) : NULL;
	r1 = tlhttp_args_parse(argc, argv, &o1, err, errlen);
	CHECK(r1 == 0 || r1 == 1 || r1 == -EINVAL);
	if (r1 == -EINVAL && err)
		CHECK(memchr(err, '\0', errlen) != NULL && (errlen == 1 || err[0] != '\0'));
	r2 = tlhttp_args_parse(argc, argv, &o2, NULL, 0);
	CHECK(r2 == r1);
	if (r1 == 0) {
		CHECK(!memcmp(&o1, &o2, sizeof o1));
		check_ok(&o1, argc, argv);
	}
	fuzz_argv_free(argv, argc);
	free(err);
	return 0;
}
