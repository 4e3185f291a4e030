/* tests/fuzz_cpulist.c: libFuzzer target for CPU lists, TL_CPUS/TL_SHARDS/TL_SMT and the plan, each checked against a reference model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "turnloop/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * Input: byte 0 holds flags (below); the rest, split at NUL bytes, is
 * TL_CPUS, TL_SHARDS, TL_SMT and the request's allowed list, in that order
 * (a missing piece leaves its variable unset). TL_CPUS also goes to
 * tl_cpulist_parse() directly, with a word count the flags pick.
 */
#define F_PRESET_CPUS 0x01   /* req.cpus set by the program: TL_CPUS not read */
#define F_PRESET_SHARDS 0x02 /* req.shards = 2: TL_SHARDS not read */
#define F_PRESET_SMT 0x04    /* req.smt = 1: TL_SMT not read */
#define F_OVERCOMMIT 0x08
#define F_ALLOWED 0x10       /* piece 3 is req.allowed */
#define F_WORDS_SHIFT 5      /* 2 bits: 1, 2, 16 or 1024 mask words */

/*
 * The plan runs on this synthetic machine: 2 NUMA nodes, 2 cores each, 2 PUs
 * per core. hwloc numbers synthetic PUs in order, so PU p is on core p / 2
 * and node p / 4, and the expected plan can be computed by hand.
 */
#define TOPO "numa:2 core:2 pu:2"
#define NPU 8

static const size_t word_counts[4] = {1, 2, 16, 1024};

static void check(int ok, const char *what)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_cpulist: %s\n", what);
	abort();
}

/* ---- reference model of the CPU-list language ---- */

/* Digits only, value below limit (leading zeros allowed). */
static int ref_num(const char *s, size_t len, unsigned limit, unsigned *out)
{
	unsigned long long v = 0;

	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v >= limit)
			return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* Items between commas, each N or N-M with N <= M. Fills set (limit bits)
 * when it is not NULL. Written differently from the library on purpose: it
 * splits first and parses second. */
static int ref_cpulist(const char *s, unsigned limit, uint8_t *set)
{
	const char *item = s;

	if (!*s)
		return -1;
	if (set)
		memset(set, 0, (limit + 7) / 8);
	for (;;) {
		const char *comma = strchr(item, ','), *end = comma ? comma : item + strlen(item);
		const char *dash = memchr(item, '-', (size_t)(end - item));
		unsigned lo, hi;

		if (dash) {
			if (ref_num(item, (size_t)(dash - item), limit, &lo) ||
			    ref_num(dash + 1, (size_t)(end - dash - 1), limit, &hi) || hi < lo)
				return -1;
		} else {
			if (ref_num(item, (size_t)(end - item), limit, &lo))
				return -1;
			hi = lo;
		}
		if (set)
			for (unsigned c = lo; c <= hi; c++)
				set[c / 8] |= (uint8_t)(1u << (c % 8));
		if (!comma)
			return 0;
		item = comma + 1;
	}
}

static int ref_count(const char *s, uint32_t *out)
{
	return ref_num(s, strlen(s), TL_PLAN_MAX_SHARDS + 1, out);
}

/* ---- the three checks ---- */

static void fuzz_cpulist_parse(const char *s, size_t nwords)
{
	static uint64_t mask[1024];
	static uint8_t want[TL_PLAN_MAX_CPU / 8];
	unsigned limit = nwords * 64 < TL_PLAN_MAX_CPU ? (unsigned)nwords * 64 : TL_PLAN_MAX_CPU;
	int r, ref;

	/* Garbage in the words beyond nwords shows an overrun; garbage in
	 * the first nwords must be cleared. */
	memset(mask, 0xa5, sizeof mask);
	r = tl_cpulist_parse(s, mask, nwords);
	ref = ref_cpulist(s, limit, want);
	check(r == 0 || r == -EINVAL, "tl_cpulist_parse: unexpected return");
	check((r == 0) == (ref == 0), "tl_cpulist_parse disagrees with the reference");
	for (size_t w = 0; w < nwords; w++) {
		uint64_t exp = 0;

		/* Bytes of want are little-endian bits; words hold CPU n at
		 * bit n % 64 whatever the byte order. */
		for (unsigned b = 0; r == 0 && b < 8 && w * 64 + b * 8 < limit; b++)
			exp |= (uint64_t)want[w * 8 + b] << (8 * b);
		check(mask[w] == exp, "tl_cpulist_parse: wrong mask");
	}
	for (size_t w = nwords; w < 1024; w++)
		check(mask[w] == 0xa5a5a5a5a5a5a5a5ull, "tl_cpulist_parse wrote past nwords");
}

/* tl_plan_from_env on a request the flags preset; returns its result in *req. */
static int fuzz_from_env(unsigned flags, const char *env_cpus, const char *env_shards,
			 const char *env_smt, tl_plan_request *req)
{
	tl_plan_request before;
	uint32_t shards = 0;
	int r, ok = 1;

	memset(req, 0, sizeof *req);
	if (flags & F_PRESET_CPUS)
		req->cpus = "0-3";
	if (flags & F_PRESET_SHARDS)
		req->shards = 2;
	if (flags & F_PRESET_SMT)
		req->smt = 1;
	before = *req;
	r = tl_plan_from_env(req);
	check(r == 0 || r == -EINVAL, "tl_plan_from_env: unexpected return");

	/* What the contract says it must do. Empty counts as unset. */
	if (!before.cpus && env_cpus && *env_cpus && ref_cpulist(env_cpus, TL_PLAN_MAX_CPU, NULL))
		ok = 0;
	if (!before.shards && env_shards && *env_shards && ref_count(env_shards, &shards))
		ok = 0;
	if (!before.smt && env_smt && *env_smt && strcmp(env_smt, "0") && strcmp(env_smt, "1"))
		ok = 0;
	check((r == 0) == ok, "tl_plan_from_env disagrees with the reference");
	if (r < 0) {
		check(!memcmp(req, &before, sizeof before), "tl_plan_from_env changed *req on error");
		return r;
	}
	if (before.cpus)
		check(req->cpus == before.cpus, "tl_plan_from_env replaced the program's cpus");
	else if (env_cpus && *env_cpus)
		check(req->cpus && !strcmp(req->cpus, env_cpus), "TL_CPUS not taken");
	else
		check(!req->cpus, "cpus from nowhere");
	if (before.shards)
		check(req->shards == before.shards, "tl_plan_from_env replaced the program's shards");
	else
		check(req->shards == ((env_shards && *env_shards) ? shards : 0), "TL_SHARDS not taken");
	if (before.smt)
		check(req->smt == 1, "tl_plan_from_env replaced the program's smt");
	else
		check(req->smt == (env_smt && !strcmp(env_smt, "1")), "TL_SMT not taken");
	return 0;
}

/* The plan of req on TOPO, against the hand-computed one. */
static void fuzz_plan(const tl_plan_request *req)
{
	static uint8_t set[TL_PLAN_MAX_CPU / 8];
	int usable[NPU], list[NPU], n = 0, ok = 1;
	uint32_t count = 0;
	tl_plan plan;
	int r;

	for (int p = 0; p < NPU; p++)
		usable[p] = 1;
	if (req->allowed) {
		if (ref_cpulist(req->allowed, TL_PLAN_MAX_CPU, set))
			ok = 0;
		for (int p = 0; p < NPU && ok; p++)
			usable[p] = set[0] >> p & 1;
	}
	if (ok) {
		int any = 0;

		for (int p = 0; p < NPU; p++)
			any |= usable[p];
		ok = any;
	}
	if (ok && req->cpus) {
		if (ref_cpulist(req->cpus, TL_PLAN_MAX_CPU, set)) {
			ok = 0;
		} else {
			/* Every listed CPU must be usable: not one outside the
			 * machine, not one the allowed list leaves out. */
			for (size_t b = 1; b < sizeof set && ok; b++)
				ok = set[b] == 0;
			for (int p = 0; p < NPU && ok; p++)
				if ((set[0] >> p & 1) && !usable[p])
					ok = 0;
			for (int p = 0; p < NPU && ok; p++)
				usable[p] = set[0] >> p & 1;
		}
	}
	if (ok) {
		/* One PU per core (the first usable one) unless smt. */
		for (int p = 0; p < NPU; p++)
			if (usable[p] && (req->smt || p % 2 == 0 || !usable[p - 1]))
				list[n++] = p;
		count = req->shards ? req->shards : (uint32_t)n;
		if (n == 0 || (count > (uint32_t)n && !req->overcommit))
			ok = 0;
	}

	r = tl_plan_compute(&plan, req, TOPO);
	check(r == 0 || r == -EINVAL, "tl_plan_compute: unexpected return");
	check((r == 0) == ok, "tl_plan_compute disagrees with the reference");
	if (r < 0) {
		check(plan.count == 0 && !plan.shards && !plan.topo, "failed plan not zeroed");
		return;
	}
	check(plan.count == count, "plan: wrong shard count");
	for (uint32_t i = 0; i < count; i++) {
		const tl_shard_place *s = &plan.shards[i];
		int p = list[i % (uint32_t)n];

		check(s->shard == i && s->pu_os_index == p && s->core == p / 2 &&
			      s->numa_node == p / 4 && s->package == -1,
		      "plan: wrong place");
	}
	{
		int on[2] = {0, 0};

		for (uint32_t i = 0; i < count && i < (uint32_t)n; i++)
			on[list[i] / 4] = 1;
		check(plan.numa_nodes == (uint32_t)(on[0] + on[1]), "plan: NUMA node count");
	}
	if (count <= 4096) {
		size_t len = (size_t)count * 64 + 1;
		char *buf = malloc(len);

		check(buf != NULL, "out of memory");
		r = tl_plan_format(&plan, buf, len);
		check(r > 0 && (size_t)r < len && strlen(buf) == (size_t)r, "tl_plan_format");
		/* One byte short of what it needs: refused, not cut. */
		check(tl_plan_format(&plan, buf, (size_t)r) == -ENOBUFS && buf[0] == '\0',
		      "tl_plan_format: short buffer");
		free(buf);
	}
	tl_plan_free(&plan);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static hwloc_topology_t keep;
	tl_plan plan;
	tl_plan_request req = {.smt = 1};

	(void)argc;
	(void)argv;
	/*
	 * hwloc loads its plugins when the first topology of the process is
	 * initialized and unloads them when the last one is destroyed, which
	 * costs ~2 ms per plan. One topology held for the whole run keeps
	 * them loaded (14 us per plan).
	 */
	if (hwloc_topology_init(&keep))
		abort();
	/* The reference assumes PU p is os index p; make sure. */
	if (tl_plan_compute(&plan, &req, TOPO) || plan.count != NPU)
		abort();
	for (uint32_t i = 0; i < plan.count; i++)
		if (plan.shards[i].pu_os_index != (int)i || plan.shards[i].core != (int)i / 2 ||
		    plan.shards[i].numa_node != (int)i / 4)
			abort();
	tl_plan_free(&plan);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *piece[4] = {NULL, NULL, NULL, NULL};
	static const char *const var[3] = {"TL_CPUS", "TL_SHARDS", "TL_SMT"};
	tl_plan_request req;
	unsigned flags;
	size_t pos = 1;

	if (size < 1 || size > 4096)
		return 0;
	flags = data[0];
	for (int k = 0; k < 4 && pos < size; k++) {
		const uint8_t *nul = memchr(data + pos, 0, size - pos);
		size_t len = nul ? (size_t)(nul - (data + pos)) : size - pos;

		piece[k] = malloc(len + 1);
		check(piece[k] != NULL, "out of memory");
		memcpy(piece[k], data + pos, len);
		piece[k][len] = '\0';
		pos += len + 1;
	}
	if (piece[0])
		fuzz_cpulist_parse(piece[0], word_counts[flags >> F_WORDS_SHIFT & 3]);
	for (int k = 0; k < 3; k++) {
		if (piece[k])
			setenv(var[k], piece[k], 1);
		else
			unsetenv(var[k]);
	}
	if (fuzz_from_env(flags, piece[0], piece[1], piece[2], &req) == 0) {
		req.overcommit = !!(flags & F_OVERCOMMIT);
		req.allowed = (flags & F_ALLOWED) ? piece[3] : NULL;
		fuzz_plan(&req);
	}
	for (int k = 0; k < 4; k++)
		free(piece[k]);
	return 0;
}
