/* tests/fuzz_cli.c: libFuzzer target for the tools' argument parsers (tools/cli.c): the input is a NUL-separated argv. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Input: byte 0 picks the parser (value % 6: tlecho, tlload, tlshard plan,
 * run, stats, topo) and the error buffer (value / 6 % 4: 256 bytes, none, 1
 * byte, 7 bytes, so truncation is exercised); the rest, split at NUL bytes,
 * is argv after the program name (and the tlshard command). Every argument
 * is its own heap block of exactly its length, and the error buffer too, so
 * that ASan sees a read one byte too far.
 */

#define MAX_ARGS 64

#define NTOOLS 6
static const char *const tool_name[NTOOLS] = {"tlecho",  "tlload",  "tlshard",
					      "tlshard", "tlshard", "tlshard"};
static const char *const command[NTOOLS] = {NULL, NULL, "plan", "run", "stats", "topo"};
static const size_t err_sizes[4] = {256, 0, 1, 7};

static void check(int ok, const char *what, int tool, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_cli: %s (parser %d returned %d)\n", what, tool, r);
	abort();
}

/* A string the parser returned must be one of the arguments or its default. */
static int from_argv(const char *s, int argc, char **argv, const char *dflt)
{
	/* The default is the parser's own literal, not this file's. */
	return (dflt && !strcmp(s, dflt)) || fuzz_argv_has(s, argc, argv);
}

/* Run the parser; the results go to res (cleared first, so that two runs
 * compare with memcmp). */
static int run(int tool, int argc, char **argv, void *res, size_t ressz, char *err, size_t errlen)
{
	memset(res, 0, ressz);
	switch (tool) {
	case 0:
		return tlecho_parse(argc, argv, res, err, errlen);
	case 1:
		return tlload_parse(argc, argv, res, err, errlen);
	case 2:
		return tlshard_plan_parse(argc, argv, res, err, errlen);
	case 3:
		return tlshard_run_parse(argc, argv, res, err, errlen);
	case 4:
		return tlshard_stats_parse(argc, argv, res, err, errlen);
	default:
		return tlshard_topo_parse(argc, argv, res, err, errlen);
	}
}

static int digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* After a successful parse, every number it took was written in decimal
 * digits alone: no sign, no blanks (strtoul would have taken both). */
static void check_numbers(int tool, int argc, char **argv)
{
	static const char *const numeric[] = {"-p", "--port", "--buffers", "--buffer-size",
					      "--shards", "-c", "-s", "-d", "--churn", "--count"};
	int i = tool < 2 ? 1 : 2;

	if (tool == 4) {
		check(digits(argv[2]), "stats PID not in digits", tool, 0);
		i = 3;
	}
	for (; i < argc; i++) {
		if (tool == 3 && !strcmp(argv[i], "--"))
			return;
		if (tool >= 2 && tool != 4 && !strcmp(argv[i], "--smt"))
			continue;
		/* Options without a value, and --watch whose value is there
		 * only when it starts like a number (the stats check looks at
		 * what it became). */
		if (tool != 3 && !strcmp(argv[i], "--json"))
			continue;
		if (tool == 4 && !strcmp(argv[i], "--watch")) {
			if (i + 1 < argc && ((argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') ||
					     argv[i + 1][0] == '.'))
				i++;
			continue;
		}
		if (i + 1 >= argc)
			return;
		for (size_t k = 0; k < sizeof numeric / sizeof numeric[0]; k++)
			if (!strcmp(argv[i], numeric[k]))
				check(digits(argv[i + 1]), "a number not in digits accepted", tool, 0);
		i++;
	}
}

static void check_result(int tool, int r, int argc, char **argv, const void *res)
{
	if (r != 0)
		return;
	check_numbers(tool, argc, argv);
	if (tool == 0) {
		const struct tlecho_opts *o = res;
		uint64_t mask[16];

		check(o->port >= 1 && o->port <= 65535, "tlecho port", tool, r);
		check(o->buffers >= 1 && o->buffers <= 32768, "tlecho buffers", tool, r);
		check(o->buffer_size >= 64 && o->buffer_size <= (1u << 20), "tlecho buffer size",
		      tool, r);
		check(o->shards <= 1024, "tlecho shards", tool, r);
		check(o->driver == TL_DRIVER_DEFAULT || o->driver == TL_DRIVER_EPOLL ||
			      o->driver == TL_DRIVER_URING,
		      "tlecho driver", tool, r);
		check(o->host && from_argv(o->host, argc, argv, "127.0.0.1"), "tlecho host", tool, r);
		check(!o->cpus || (from_argv(o->cpus, argc, argv, NULL) &&
				   tl_cpulist_parse(o->cpus, mask, 16) == 0),
		      "tlecho cpus", tool, r);
		check(tl_addr_len(&o->addr) != 0, "tlecho address", tool, r);
		check(!o->tls_cert == !o->tls_key, "tlecho: --tls-cert and --tls-key go together", tool, r);
		check((!o->tls_cert || from_argv(o->tls_cert, argc, argv, NULL)) &&
			      (!o->tls_key || from_argv(o->tls_key, argc, argv, NULL)),
		      "tlecho tls files", tool, r);
	} else if (tool == 1) {
		const struct tlload_opts *o = res;

		check(o->port >= 1 && o->port <= 65535, "tlload port", tool, r);
		check(o->conns >= 1 && o->conns <= 10000, "tlload conns", tool, r);
		check(o->size >= 1 && o->size <= (1u << 20), "tlload size", tool, r);
		check(o->secs >= 1 && o->secs <= 86400, "tlload secs", tool, r);
		check(o->churn <= (1u << 30), "tlload churn", tool, r);
		check(o->host && from_argv(o->host, argc, argv, "127.0.0.1"), "tlload host", tool, r);
		check(tl_addr_len(&o->addr) != 0, "tlload address", tool, r);
	} else if (tool == 2 || tool == 3 || tool == 5) {
		const struct tlshard_plan_opts *o = res;
		uint64_t mask[16];

		check(o->req.shards <= TL_PLAN_MAX_SHARDS && !!o->req.shards == o->set_shards,
		      "tlshard shards", tool, r);
		check(o->req.smt == o->set_smt && !o->req.overcommit && !o->req.allowed,
		      "tlshard smt", tool, r);
		check(!o->req.cpus == !o->set_cpus &&
			      (!o->req.cpus || (from_argv(o->req.cpus, argc, argv, NULL) &&
						tl_cpulist_parse(o->req.cpus, mask, 16) == 0)),
		      "tlshard cpus", tool, r);
		if (tool == 3)
			check(o->cmd >= 3 && o->cmd < argc && !strcmp(argv[o->cmd - 1], "--") &&
				      !o->topology && !o->json,
			      "tlshard run command", tool, r);
		else
			check(o->cmd == 0 && (!o->topology || (*o->topology &&
							       from_argv(o->topology, argc, argv,
									 NULL))),
			      "tlshard plan/topo command", tool, r);
	} else {
		const struct tlshard_stats_opts *o = res;

		check(o->pid >= 1, "tlshard stats pid", tool, r);
		check(o->watch ? o->secs >= 0.01 && o->secs <= 3600 : o->secs == 0,
		      "tlshard stats secs", tool, r);
		check(o->count <= 1000000000 && (!o->count || o->watch), "tlshard stats count",
		      tool, r);
		check(o->format >= TLSHARD_TABLE && o->format <= TLSHARD_PROMETHEUS &&
			      !(o->watch && o->format == TLSHARD_PROMETHEUS),
		      "tlshard stats format", tool, r);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	union {
		struct tlecho_opts echo;
		struct tlload_opts load;
		struct tlshard_plan_opts plan;
		struct tlshard_stats_opts stats;
	} res1, res2;
	char *argv[MAX_ARGS + 3];
	int argc = 0, tool, r1, r2;
	size_t errlen;
	char *err;

	if (size < 1)
		return 0;
	tool = data[0] % NTOOLS;
	errlen = err_sizes[data[0] / NTOOLS % 4];
	argv[argc++] = strdup(tool_name[tool]);
	if (command[tool])
		argv[argc++] = strdup(command[tool]);
	/* Every piece between NULs is an argument, the empty ones too. */
	argc = fuzz_argv_split(data + 1, size - 1, argv, argc, MAX_ARGS + 2);
	err = errlen ? malloc(errlen) : NULL;

	r1 = run(tool, argc, argv, &res1, sizeof res1, err, errlen);
	/* Every parser takes -h/--help. */
	check(r1 == 0 || r1 == -EINVAL || r1 == 1, "unexpected return", tool, r1);
	if (err) {
		check(memchr(err, '\0', errlen) != NULL, "error not terminated", tool, r1);
		/* A reason whenever it fails and there is room for one. */
		check((r1 < 0) == (errlen > 1 && err[0] != '\0') || errlen == 1,
		      "error reason missing or left over", tool, r1);
	}
	check_result(tool, r1, argc, argv, &res1);
	/* No hidden state: the same argv parses the same way again. */
	r2 = run(tool, argc, argv, &res2, sizeof res2, NULL, 0);
	check(r1 == r2 && (r1 != 0 || !memcmp(&res1, &res2, sizeof res1)), "not repeatable", tool,
	      r1);

	free(err);
	fuzz_argv_free(argv, argc);
	return 0;
}
