/* tests/fuzz_tlkv_args.c: libFuzzer target for tlkv's command line (tools/tlkv.c: options, the file included with its main renamed): the input is a NUL-separated argv. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int tlkv_main(int argc, char **argv);
#define main tlkv_main /* the program's own main is not run */
#include "../tools/tlkv.c"
#undef main

#include "check.h"     /* CHECK: a failure prints its line and aborts */
#include "fuzz_argv.h" /* the argv split from the input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARGS_MAX 64

/* The number the last "name VALUE" of argv gives, if any: *v; 1 if there
 * is one. An accepted argv has each value whole digits. */
static int last_value(int argc, char **argv, const char *name, unsigned long *v) {
	int found = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--local"))
			continue;
		if (i + 1 < argc && !strcmp(argv[i], name)) {
			const char *t = argv[i + 1];
			CHECK(*t && strspn(t, "0123456789") == strlen(t));
			*v = strtoul(t, NULL, 10);
			found = 1;
		}
		i++; /* every other option takes a value */
	}
	return found;
}

/*
 * Input, split at NUL bytes, is argv after the program name; every argument
 * is a heap block of exactly its length, so that ASan sees a read one byte
 * too far. Checked: the result is 0 or 2; the same argv gives the same
 * result; an accepted one has every number inside its documented range, as
 * its last occurrence in argv wrote it in digits, and a save folder that is
 * the default or a non-empty string of argv.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	char *argv[ARGS_MAX + 1];
	int argc = 0;
	struct opts o1, o2;
	tl_runtime_config c1, c2;
	argv[argc++] = strdup("tlkv");
	argc = fuzz_argv_split(data, size, argv, argc, ARGS_MAX);
	tl_runtime_config_init(&c1);
	tl_runtime_config_init(&c2);
	int r1 = options(argc, argv, &o1, &c1), r2 = options(argc, argv, &o2, &c2);
	CHECK(r1 == 0 || r1 == 2);
	CHECK(r1 == r2);
	CHECK(r1 == 0 || c1.plan.shards > MAX_SHARDS || *tl_error_detail()); /* the line tlkv prints says why */
	if (r1 == 0) {
		unsigned long v;
		CHECK(o1.port == o2.port && o1.keys == o2.keys && o1.conns == o2.conns && o1.local == o2.local &&
		      o1.dir == o2.dir && c1.plan.shards == c2.plan.shards && c1.plan.cpus == c2.plan.cpus &&
		      c1.mesh_inflight == c2.mesh_inflight && c1.mesh_spin_ns == c2.mesh_spin_ns &&
		      c1.loop.nap_ns == c2.loop.nap_ns);
		CHECK(o1.port >= 1 && o1.port <= 65535);
		CHECK(c1.plan.shards <= MAX_SHARDS);
		CHECK(o1.keys >= 1 && o1.keys <= 1ul << 30);
		CHECK(o1.conns >= 1 && o1.conns <= 16384);
		CHECK(c1.mesh_inflight >= 1 && c1.mesh_inflight <= 65536 && c1.mesh_spin_ns <= 1000000 &&
		      c1.loop.nap_ns <= 1000000);
		CHECK(o1.dir == kv.dir || (fuzz_argv_has(o1.dir, argc, argv) && *o1.dir));
		CHECK(last_value(argc, argv, "--port", &v) ? v == o1.port : o1.port == 6379);
		CHECK(last_value(argc, argv, "--shards", &v) ? v == c1.plan.shards : c1.plan.shards == 0);
		CHECK(last_value(argc, argv, "--keys", &v) ? v == o1.keys : o1.keys == kv.keys);
		CHECK(last_value(argc, argv, "--conns", &v) ? v == o1.conns : o1.conns == kv.conns);
		CHECK(last_value(argc, argv, "--mesh-inflight", &v) ? v == c1.mesh_inflight : c1.mesh_inflight == 1024);
		CHECK(last_value(argc, argv, "--mesh-spin-us", &v) ? v * 1000 == c1.mesh_spin_ns : c1.mesh_spin_ns == 20000);
		CHECK(last_value(argc, argv, "--nap-us", &v) ? v * 1000 == c1.loop.nap_ns : c1.loop.nap_ns == 0);
		CHECK(c1.plan.cpus == NULL || (fuzz_argv_has(c1.plan.cpus, argc, argv) && *c1.plan.cpus));
	}
	fuzz_argv_free(argv, argc);
	return 0;
}
