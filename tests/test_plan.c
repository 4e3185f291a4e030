/* tests/test_plan.c: CUnit tests of the shard plan (shards/plan.c) on synthetic hwloc topologies and on the real machine; on Linux and, as win-plan, on Windows. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

#include <CUnit/Basic.h>
#ifndef _WIN32
#include <hwloc.h>
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "turnloop/plan.h"

/*
 * The same program runs on Windows (meson test win-plan, under wine),
 * where the plan reads the machine through lib/topo_win.c: the synthetic
 * topologies are read by its own parser, the real machine is the
 * processor groups and the process affinity (SetProcessAffinityMask for
 * taskset, SetThreadGroupAffinity's result for sched_getaffinity). Not
 * built there: the XML test (an XML export needs hwloc, which the Windows
 * build has not; tl_plan_compute refuses one with -ENOTSUP, which "bad
 * topology" and "explain" check).
 */
#ifdef _WIN32
static int setenv(const char *name, const char *value, int overwrite)
{
	(void)overwrite;
	return _putenv_s(name, value);
}

/* An empty value removes the variable (_putenv_s). */
static int unsetenv(const char *name)
{
	return _putenv_s(name, "");
}
#endif

/* 2 packages x 2 NUMA nodes x 4 cores x 2 PUs: 32 PUs, 16 cores, 4 nodes.
 * hwloc numbers the PUs 0..31 in order, so core c holds PUs 2c and 2c+1,
 * node n holds cores 4n..4n+3 and package p holds nodes 2p and 2p+1. */
static const char *const TOPO = "pack:2 numa:2 core:4 pu:2";

static int plan_is_zero(const tl_plan *p)
{
	return p->count == 0 && p->numa_nodes == 0 && p->shards == NULL && p->topo == NULL;
}

/* Check that shard i of p sits on expected PU and that the other fields
 * follow from TOPO's regular numbering. */
static int place_ok(const tl_plan *p, uint32_t i, int pu)
{
	const tl_shard_place *s = &p->shards[i];

	return s->shard == i && s->pu_os_index == pu && s->core == pu / 2 &&
	       s->numa_node == pu / 8 && s->package == pu / 16;
}

static int numa_adjacent(const tl_plan *p)
{
	for (uint32_t i = 1; i < p->count; i++)
		if (p->shards[i].numa_node < p->shards[i - 1].numa_node)
			return 0;
	return 1;
}

static void test_default(void)
{
	tl_plan p;

	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, NULL, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 16);
	CU_ASSERT_EQUAL(p.numa_nodes, 4);
	CU_ASSERT_PTR_NOT_NULL(p.topo);
	for (uint32_t i = 0; i < p.count && i < 16; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(2 * i)));
	CU_ASSERT_TRUE(numa_adjacent(&p));
	tl_plan_free(&p);
	CU_ASSERT_TRUE(plan_is_zero(&p));
	tl_plan_free(&p); /* twice is harmless */
	tl_plan_free(NULL);

	/* An all-zero request is the same as none. */
	tl_plan_request req = { 0 };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 16);
	tl_plan_free(&p);

	CU_ASSERT_EQUAL(tl_plan_compute(NULL, NULL, TOPO), -EINVAL);
}

static void test_smt(void)
{
	tl_plan_request req = { .smt = 1 };
	tl_plan p;

	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 32);
	CU_ASSERT_EQUAL(p.numa_nodes, 4);
	/* Siblings of one core adjacent, cores in order, nodes in order. */
	for (uint32_t i = 0; i < p.count && i < 32; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)i));
	CU_ASSERT_TRUE(numa_adjacent(&p));
	tl_plan_free(&p);
}

static void test_cpus_narrow(void)
{
	tl_plan_request req = { .cpus = "0-3" };
	tl_plan p;

	/* Two cores: one PU each. */
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 2);
	CU_ASSERT_EQUAL(p.numa_nodes, 1);
	CU_ASSERT_TRUE(place_ok(&p, 0, 0));
	CU_ASSERT_TRUE(place_ok(&p, 1, 2));
	tl_plan_free(&p);

	req.smt = 1;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 4);
	for (uint32_t i = 0; i < p.count && i < 4; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)i));
	tl_plan_free(&p);

	/* The listed PU of a core is used even when it is not the core's
	 * first; the list's own order does not matter, the topology's does. */
	req = (tl_plan_request){ .cpus = "25,3,1" };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 3);
	CU_ASSERT_EQUAL(p.numa_nodes, 2);
	CU_ASSERT_TRUE(place_ok(&p, 0, 1));
	CU_ASSERT_TRUE(place_ok(&p, 1, 3));
	CU_ASSERT_TRUE(place_ok(&p, 2, 25));
	tl_plan_free(&p);

	/* Two PUs of one core without smt: one shard. */
	req = (tl_plan_request){ .cpus = "6-7" };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_TRUE(place_ok(&p, 0, 6));
	tl_plan_free(&p);
}

static void test_shards_truncate(void)
{
	tl_plan_request req = { .shards = 5 };
	tl_plan p;

	/* Node 0 whole (4 cores), then the first core of node 1. */
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 5);
	CU_ASSERT_EQUAL(p.numa_nodes, 2);
	for (uint32_t i = 0; i < p.count && i < 5; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(2 * i)));
	tl_plan_free(&p);

	req.shards = 1;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.numa_nodes, 1);
	CU_ASSERT_TRUE(place_ok(&p, 0, 0));
	tl_plan_free(&p);

	/* Exactly as many as there are cores is fine. */
	req.shards = 16;
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 16);
	tl_plan_free(&p);
}

static void test_overcommit(void)
{
	tl_plan_request req = { .shards = 40 };
	tl_plan p;

	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));

	/* Without smt the usable PUs are one per core, so 17 is too many. */
	req.shards = 17;
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	req.smt = 1;
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 17);
	tl_plan_free(&p);

	req = (tl_plan_request){ .shards = 40, .overcommit = 1 };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 40);
	CU_ASSERT_EQUAL(p.numa_nodes, 4);
	for (uint32_t i = 0; i < p.count && i < 40; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(2 * (i % 16))));
	tl_plan_free(&p);

	req.smt = 1;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 40);
	for (uint32_t i = 0; i < p.count && i < 40; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(i % 32)));
	tl_plan_free(&p);

	req.shards = TL_PLAN_MAX_SHARDS + 1;
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
}

static void test_allowed_holes(void)
{
	tl_plan_request req = { .allowed = "0,2,5-7,12" };
	tl_plan p;

	/* Cores 0, 1, 2 (only PU 5 allowed), 3 and 6. */
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 5);
	CU_ASSERT_EQUAL(p.numa_nodes, 2);
	static const int pus[] = { 0, 2, 5, 6, 12 };
	for (uint32_t i = 0; i < p.count && i < 5; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, pus[i]));
	tl_plan_free(&p);

	req.smt = 1;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 6);
	static const int pus_smt[] = { 0, 2, 5, 6, 7, 12 };
	for (uint32_t i = 0; i < p.count && i < 6; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, pus_smt[i]));
	tl_plan_free(&p);

	/* cpus must stay inside the allowed set. */
	req = (tl_plan_request){ .allowed = "0,2,5-7,12", .cpus = "5-7" };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 2);
	CU_ASSERT_TRUE(place_ok(&p, 0, 5));
	CU_ASSERT_TRUE(place_ok(&p, 1, 6));
	tl_plan_free(&p);
	req.cpus = "1";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
	req.cpus = "4-5";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);

	/* Shards beyond the 5 usable ones. */
	req = (tl_plan_request){ .allowed = "0,2,5-7,12", .shards = 6 };
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);

	/* Allowed CPUs the topology lacks are ignored; none left is -EINVAL. */
	req = (tl_plan_request){ .allowed = "30-40" };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_TRUE(place_ok(&p, 0, 30));
	tl_plan_free(&p);
	req.allowed = "100-200";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
}

/* One-core checks on desc. */
static void one_core(const char *desc)
{
	tl_plan_request req = { 0 };
	tl_plan p;

	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, desc), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.numa_nodes, 1);
	CU_ASSERT_EQUAL(p.shards[0].pu_os_index, 0);
	CU_ASSERT_EQUAL(p.shards[0].core, 0);
	CU_ASSERT_EQUAL(p.shards[0].numa_node, 0);
	CU_ASSERT_EQUAL(p.shards[0].package, -1); /* no package level */
	tl_plan_free(&p);

	req.smt = 1;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, desc), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	tl_plan_free(&p);

	req = (tl_plan_request){ .shards = 2 };
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, desc), -EINVAL);
	req.overcommit = 1;
	req.shards = 3;
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, desc), 0);
	CU_ASSERT_EQUAL(p.count, 3);
	for (uint32_t i = 0; i < p.count && i < 3; i++) {
		CU_ASSERT_EQUAL(p.shards[i].shard, i);
		CU_ASSERT_EQUAL(p.shards[i].pu_os_index, 0);
	}
	tl_plan_free(&p);
}

static void test_one_core(void)
{
	/* The explicit NUMA level is what hwloc inserts by itself for
	 * "core:1 pu:1". It does so with a memmove that valgrind 3.19 (as in
	 * Debian 12) misreports as an overlapping __memcpy_chk inside
	 * libhwloc, so under valgrind only the explicit form runs. */
	one_core("numa:1 core:1 pu:1");
	if (!RUNNING_ON_VALGRIND)
		one_core("core:1 pu:1");
}

static void test_bad_cpu_lists(void)
{
	static const char *const bad[] = {
		"", "3-1", "a", "0-", "-1", "1,,2", ",1", "1,", "1 2", " 1", "1\n",
		"0x1", "1-2-3", "+1", "99999999999999999999", "65536",
	};
	tl_plan_request req = { 0 };
	tl_plan p;
	uint64_t w[2];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		req = (tl_plan_request){ .cpus = bad[i] };
		CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
		CU_ASSERT_TRUE(plan_is_zero(&p));
		req = (tl_plan_request){ .allowed = bad[i] };
		CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
		w[0] = w[1] = ~UINT64_C(0);
		CU_ASSERT_EQUAL(tl_cpulist_parse(bad[i], w, 2), -EINVAL);
		CU_ASSERT_TRUE(w[0] == 0 && w[1] == 0);
	}
	/* Well-formed but not in the topology, hence not allowed. */
	req = (tl_plan_request){ .cpus = "32" };
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	req = (tl_plan_request){ .cpus = "0-40" };
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
}

static void test_cpulist_parse(void)
{
	uint64_t w[2];

	CU_ASSERT_EQUAL(tl_cpulist_parse("0-3,6,8-9", w, 2), 0);
	CU_ASSERT_EQUAL(w[0], UINT64_C(0x34f));
	CU_ASSERT_EQUAL(w[1], 0);
	CU_ASSERT_EQUAL(tl_cpulist_parse("63-64,127", w, 2), 0);
	CU_ASSERT_EQUAL(w[0], UINT64_C(1) << 63);
	CU_ASSERT_EQUAL(w[1], (UINT64_C(1) << 63) | 1);
	/* Overlaps and a single-CPU range are fine. */
	CU_ASSERT_EQUAL(tl_cpulist_parse("5,5,5-5,4-6", w, 1), 0);
	CU_ASSERT_EQUAL(w[0], UINT64_C(0x70));
	CU_ASSERT_EQUAL(tl_cpulist_parse("0-63", w, 1), 0);
	CU_ASSERT_EQUAL(w[0], ~UINT64_C(0));
	/* The previous content never leaks into the result. */
	CU_ASSERT_EQUAL(tl_cpulist_parse("1", w, 1), 0);
	CU_ASSERT_EQUAL(w[0], 2);

	/* Beyond the words given. */
	w[0] = 7;
	CU_ASSERT_EQUAL(tl_cpulist_parse("64", w, 1), -EINVAL);
	CU_ASSERT_EQUAL(w[0], 0);
	CU_ASSERT_EQUAL(tl_cpulist_parse("0-64", w, 1), -EINVAL);
	CU_ASSERT_EQUAL(tl_cpulist_parse("128", w, 2), -EINVAL);

	CU_ASSERT_EQUAL(tl_cpulist_parse(NULL, w, 1), -EINVAL);
	CU_ASSERT_EQUAL(tl_cpulist_parse("1", NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(tl_cpulist_parse("1", w, 0), -EINVAL);
}

static void test_bad_topology(void)
{
	tl_plan p;

	CU_ASSERT_EQUAL(tl_plan_compute(&p, NULL, "nonsense:3"), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
	CU_ASSERT_EQUAL(tl_plan_compute(&p, NULL, ""), -EINVAL);
	CU_ASSERT_TRUE(tl_plan_compute(&p, NULL, "/nonexistent/dir/topo.xml") < 0);
	CU_ASSERT_TRUE(plan_is_zero(&p));
}

#ifndef _WIN32
/* A topology saved as XML plans exactly like the synthetic one it came from. */
static void test_xml(void)
{
	char path[] = "/tmp/tl_test_plan_XXXXXX.xml";
	hwloc_topology_t topo;
	tl_plan p;
	int fd;

	fd = mkstemps(path, 4);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);
	CU_ASSERT_EQUAL_FATAL(hwloc_topology_init(&topo), 0);
	CU_ASSERT_EQUAL(hwloc_topology_set_synthetic(topo, TOPO), 0);
	CU_ASSERT_EQUAL(hwloc_topology_load(topo), 0);
	CU_ASSERT_EQUAL(hwloc_topology_export_xml(topo, path, 0), 0);
	hwloc_topology_destroy(topo);

	CU_ASSERT_EQUAL(tl_plan_compute(&p, NULL, path), 0);
	CU_ASSERT_EQUAL(p.count, 16);
	CU_ASSERT_EQUAL(p.numa_nodes, 4);
	for (uint32_t i = 0; i < p.count && i < 16; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(2 * i)));
	/* Loaded from a file, so not this machine: no binding. */
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, 0), -ENOTSUP);
	tl_plan_free(&p);
	unlink(path);
}
#endif

static void test_env(void)
{
	tl_plan_request req = { 0 };
	tl_plan p;

	unsetenv("TL_CPUS");
	unsetenv("TL_SHARDS");
	unsetenv("TL_SMT");
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_PTR_NULL(req.cpus);
	CU_ASSERT_EQUAL(req.shards, 0);
	CU_ASSERT_EQUAL(req.smt, 0);
	CU_ASSERT_EQUAL(tl_plan_from_env(NULL), -EINVAL);

	setenv("TL_CPUS", "8-15", 1);
	setenv("TL_SHARDS", "3", 1);
	setenv("TL_SMT", "1", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_TRUE(req.cpus && strcmp(req.cpus, "8-15") == 0);
	CU_ASSERT_EQUAL(req.shards, 3);
	CU_ASSERT_EQUAL(req.smt, 1);
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(p.count, 3);
	for (uint32_t i = 0; i < p.count && i < 3; i++)
		CU_ASSERT_TRUE(place_ok(&p, i, (int)(8 + i)));
	tl_plan_free(&p);

	/* Fields the program set win, and their variables are not parsed. */
	req = (tl_plan_request){ .cpus = "0-3", .shards = 2 };
	setenv("TL_CPUS", "garbage", 1);
	setenv("TL_SHARDS", "x", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_STRING_EQUAL(req.cpus, "0-3");
	CU_ASSERT_EQUAL(req.shards, 2);
	CU_ASSERT_EQUAL(req.smt, 1); /* the one unset field came from TL_SMT */

	/* Bad values: -EINVAL and the request unchanged. */
	static const struct { const char *var, *val; } bad[] = {
		{ "TL_CPUS", "3-1" }, { "TL_CPUS", "a" }, { "TL_CPUS", "0-" },
		{ "TL_SHARDS", "x" }, { "TL_SHARDS", "-1" }, { "TL_SHARDS", "4x" },
		{ "TL_SHARDS", "65537" }, { "TL_SHARDS", "99999999999999999999" },
		{ "TL_SHARDS", " 4" },
		{ "TL_SMT", "2" }, { "TL_SMT", "yes" }, { "TL_SMT", "-1" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		unsetenv("TL_CPUS");
		unsetenv("TL_SHARDS");
		unsetenv("TL_SMT");
		setenv(bad[i].var, bad[i].val, 1);
		req = (tl_plan_request){ .overcommit = 1 };
		CU_ASSERT_EQUAL(tl_plan_from_env(&req), -EINVAL);
		CU_ASSERT_TRUE(req.cpus == NULL && req.shards == 0 && req.smt == 0 &&
			       req.overcommit == 1);
	}

	/* A bad TL_SMT spoils the whole call, even after good TL_CPUS. */
	setenv("TL_CPUS", "0-3", 1);
	setenv("TL_SMT", "maybe", 1);
	req = (tl_plan_request){ 0 };
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), -EINVAL);
	CU_ASSERT_PTR_NULL(req.cpus);

	/* Empty variables count as unset; TL_SHARDS=0 means the default. */
	setenv("TL_CPUS", "", 1);
	setenv("TL_SHARDS", "0", 1);
	setenv("TL_SMT", "", 1);
	req = (tl_plan_request){ 0 };
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_PTR_NULL(req.cpus);
	CU_ASSERT_EQUAL(req.shards, 0);
	CU_ASSERT_EQUAL(req.smt, 0);
	setenv("TL_SMT", "0", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_EQUAL(req.smt, 0);

	unsetenv("TL_CPUS");
	unsetenv("TL_SHARDS");
	unsetenv("TL_SMT");
}

static void test_format(void)
{
	static const char want[] =
		"shard 0: cpu 0 core 0 numa 0 package 0\n"
		"shard 1: cpu 2 core 1 numa 0 package 0\n"
		"shard 2: cpu 4 core 2 numa 0 package 0\n"
		"shard 3: cpu 6 core 3 numa 0 package 0\n"
		"shard 4: cpu 8 core 4 numa 1 package 0\n";
	tl_plan_request req = { .shards = 5 };
	tl_plan p;
	char buf[512];

	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_EQUAL(tl_plan_format(&p, buf, sizeof buf), (int)strlen(want));
	CU_ASSERT_STRING_EQUAL(buf, want);

	/* Room for the text but not the NUL, then just enough. */
	memset(buf, 'x', sizeof buf);
	CU_ASSERT_EQUAL(tl_plan_format(&p, buf, strlen(want)), -ENOBUFS);
	CU_ASSERT_EQUAL(buf[0], '\0');
	CU_ASSERT_EQUAL(tl_plan_format(&p, buf, strlen(want) + 1), (int)strlen(want));
	CU_ASSERT_STRING_EQUAL(buf, want);
	CU_ASSERT_EQUAL(tl_plan_format(&p, buf, 10), -ENOBUFS);
	CU_ASSERT_EQUAL(tl_plan_format(&p, buf, 0), -ENOBUFS);
	CU_ASSERT_EQUAL(tl_plan_format(NULL, buf, sizeof buf), -EINVAL);
	CU_ASSERT_EQUAL(tl_plan_format(&p, NULL, sizeof buf), -EINVAL);
	tl_plan_free(&p);

	/* A missing level prints as -1. */
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, NULL, "numa:1 core:1 pu:1"), 0);
	CU_ASSERT_TRUE(tl_plan_format(&p, buf, sizeof buf) > 0);
	CU_ASSERT_STRING_EQUAL(buf, "shard 0: cpu 0 core 0 numa 0 package -1\n");
	tl_plan_free(&p);
}

static void test_bind_synthetic(void)
{
	tl_plan p = { 0 };

	CU_ASSERT_EQUAL(tl_plan_bind_thread(NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, 0), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, NULL, TOPO), 0);
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, 0), -ENOTSUP);
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, p.count), -EINVAL);
	tl_plan_free(&p);
}

/* ---- the real machine ---- */

#ifdef _WIN32
/* The process affinity of group 0 (wine's only group). */
static DWORD_PTR process_mask(void)
{
	DWORD_PTR pm = 0, sm = 0;

	return GetProcessAffinityMask(GetCurrentProcess(), &pm, &sm) ? pm : 0;
}

static int in_affinity(int cpu)
{
	return cpu >= 0 && cpu < 64 && (process_mask() >> cpu & 1);
}

struct bind_job {
	const tl_plan *plan;
	uint32_t shard;
	int rc;
	int cpu_after;
	int only_that_cpu;
};

/* In a thread of its own so the main thread keeps its full affinity. */
static DWORD WINAPI bind_thread(void *arg)
{
	struct bind_job *j = arg;
	int cpu = j->plan->shards[j->shard].pu_os_index;
	PROCESSOR_NUMBER pn;
	GROUP_AFFINITY ga;

	j->rc = tl_plan_bind_thread(j->plan, j->shard);
	GetCurrentProcessorNumberEx(&pn);
	j->cpu_after = pn.Group * 64 + pn.Number;
	j->only_that_cpu = GetThreadGroupAffinity(GetCurrentThread(), &ga) &&
			   ga.Group == cpu / 64 && ga.Mask == (KAFFINITY)1 << cpu % 64;
	return 0;
}

static void test_real_machine(void)
{
	DWORD_PTR mine = process_mask();
	GROUP_AFFINITY before, now;
	tl_plan p;
	int ncpu = __builtin_popcountll((unsigned long long)mine);

	CU_ASSERT_FATAL(ncpu > 0);
	CU_ASSERT_FATAL(GetThreadGroupAffinity(GetCurrentThread(), &before));
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, NULL, NULL), 0);
	CU_ASSERT_TRUE(p.count >= 1);
	CU_ASSERT_TRUE((int)p.count <= ncpu);
	CU_ASSERT_TRUE(p.numa_nodes >= 1);
	for (uint32_t i = 0; i < p.count; i++) {
		CU_ASSERT_EQUAL(p.shards[i].shard, i);
		CU_ASSERT_TRUE(in_affinity(p.shards[i].pu_os_index));
		CU_ASSERT_TRUE(p.shards[i].core >= 0);
		/* One shard per core by default. */
		for (uint32_t k = 0; k < i; k++)
			CU_ASSERT_NOT_EQUAL(p.shards[i].core, p.shards[k].core);
	}
	CU_ASSERT_TRUE(numa_adjacent(&p));

	for (uint32_t s = 0; s < p.count; s += p.count > 1 ? p.count - 1 : 1) {
		struct bind_job j = { .plan = &p, .shard = s, .rc = -1 };
		HANDLE t = CreateThread(NULL, 0, bind_thread, &j, 0, NULL);

		CU_ASSERT_PTR_NOT_NULL_FATAL(t);
		CU_ASSERT_EQUAL(WaitForSingleObject(t, INFINITE), WAIT_OBJECT_0);
		CloseHandle(t);
		CU_ASSERT_EQUAL(j.rc, 0);
		CU_ASSERT_EQUAL(j.cpu_after, p.shards[s].pu_os_index);
		CU_ASSERT_TRUE(j.only_that_cpu);
	}
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, p.count), -EINVAL);
	/* The binding happened in other threads: ours is untouched. */
	CU_ASSERT_TRUE(GetThreadGroupAffinity(GetCurrentThread(), &now));
	CU_ASSERT_TRUE(now.Group == before.Group && now.Mask == before.Mask);
	CU_ASSERT_EQUAL(process_mask(), mine);
	tl_plan_free(&p);
}

/* The plan follows the process affinity (SetProcessAffinityMask, start
 * /affinity). */
static void test_real_affinity(void)
{
	DWORD_PTR mine = process_mask();
	tl_plan p;
	int last = -1;

	for (int c = 0; c < 64; c++)
		if (mine >> c & 1)
			last = c;
	CU_ASSERT_FATAL(last >= 0);

	CU_ASSERT_FATAL(SetProcessAffinityMask(GetCurrentProcess(), (DWORD_PTR)1 << last));
	int rc = tl_plan_compute(&p, NULL, NULL);
	CU_ASSERT_TRUE(SetProcessAffinityMask(GetCurrentProcess(), mine));
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.shards[0].pu_os_index, last);
	tl_plan_free(&p);

	/* cpus narrows the real machine too; a CPU outside it is -EINVAL. */
	char list[16];
	snprintf(list, sizeof list, "%d", last);
	tl_plan_request req = { .cpus = list };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, NULL), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.shards[0].pu_os_index, last);
	tl_plan_free(&p);
	req.cpus = "4095";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, NULL), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
}
#else

static int in_affinity(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set))
		return 0;
	return cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

struct bind_job {
	const tl_plan *plan;
	uint32_t shard;
	int rc;
	int cpu_after;
	int only_that_cpu;
};

/* In a thread of its own so the main thread keeps its full affinity. */
static void *bind_thread(void *arg)
{
	struct bind_job *j = arg;
	cpu_set_t set;
	int cpu = j->plan->shards[j->shard].pu_os_index;

	j->rc = tl_plan_bind_thread(j->plan, j->shard);
	j->cpu_after = sched_getcpu();
	CPU_ZERO(&set);
	j->only_that_cpu = sched_getaffinity(0, sizeof set, &set) == 0 &&
			   CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set);
	return NULL;
}

static void test_real_machine(void)
{
	tl_plan p;
	cpu_set_t mine;
	int ncpu;

	CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof mine, &mine), 0);
	ncpu = CPU_COUNT(&mine);

	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, NULL, NULL), 0);
	CU_ASSERT_TRUE(p.count >= 1);
	CU_ASSERT_TRUE((int)p.count <= ncpu);
	CU_ASSERT_TRUE(p.numa_nodes >= 1);
	for (uint32_t i = 0; i < p.count; i++) {
		CU_ASSERT_EQUAL(p.shards[i].shard, i);
		CU_ASSERT_TRUE(in_affinity(p.shards[i].pu_os_index));
		CU_ASSERT_TRUE(p.shards[i].core >= 0);
		/* One shard per core by default. */
		for (uint32_t k = 0; k < i; k++)
			CU_ASSERT_NOT_EQUAL(p.shards[i].core, p.shards[k].core);
	}
	CU_ASSERT_TRUE(numa_adjacent(&p));

	for (uint32_t s = 0; s < p.count; s += p.count > 1 ? p.count - 1 : 1) {
		struct bind_job j = { .plan = &p, .shard = s, .rc = -1 };
		pthread_t t;

		CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, bind_thread, &j), 0);
		CU_ASSERT_EQUAL(pthread_join(t, NULL), 0);
		CU_ASSERT_EQUAL(j.rc, 0);
		CU_ASSERT_EQUAL(j.cpu_after, p.shards[s].pu_os_index);
		CU_ASSERT_TRUE(j.only_that_cpu);
	}
	CU_ASSERT_EQUAL(tl_plan_bind_thread(&p, p.count), -EINVAL);
	/* The binding happened in other threads: ours is untouched. */
	{
		cpu_set_t now;

		CU_ASSERT_EQUAL(sched_getaffinity(0, sizeof now, &now), 0);
		CU_ASSERT_TRUE(CPU_EQUAL(&now, &mine));
	}
	tl_plan_free(&p);
}

/* The plan follows the process affinity (taskset, sched_setaffinity). */
static void test_real_affinity(void)
{
	cpu_set_t mine, one;
	tl_plan p;
	int last = -1;

	CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof mine, &mine), 0);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mine))
			last = c;
	CU_ASSERT_FATAL(last >= 0);

	CPU_ZERO(&one);
	CPU_SET(last, &one);
	CU_ASSERT_EQUAL_FATAL(sched_setaffinity(0, sizeof one, &one), 0);
	int rc = tl_plan_compute(&p, NULL, NULL);
	CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof mine, &mine), 0);
	CU_ASSERT_EQUAL_FATAL(rc, 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.shards[0].pu_os_index, last);
	tl_plan_free(&p);

	/* cpus narrows the real machine too; a CPU outside it is -EINVAL. */
	char list[16];
	snprintf(list, sizeof list, "%d", last);
	tl_plan_request req = { .cpus = list };
	CU_ASSERT_EQUAL_FATAL(tl_plan_compute(&p, &req, NULL), 0);
	CU_ASSERT_EQUAL(p.count, 1);
	CU_ASSERT_EQUAL(p.shards[0].pu_os_index, last);
	tl_plan_free(&p);
	req.cpus = "4095";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, NULL), -EINVAL);
	CU_ASSERT_TRUE(plan_is_zero(&p));
}
#endif

/* The detail of a plan that cannot be met ("" and 0 when it can). */
static const char *why_not(const tl_plan_request *req, const char *topo, int *rc)
{
	tl_plan p;

	*rc = tl_plan_compute(&p, req, topo);
	if (*rc == 0)
		tl_plan_free(&p);
	return tl_error_detail();
}

/* tl_plan_compute's detail says which part of a request is wrong, and why. */
static void test_explain(void)
{
	tl_plan_request req = {0};
#ifdef _WIN32
	DWORD_PTR mine = process_mask();
#else
	cpu_set_t mine, one;
#endif
	int last = -1, rc;

	/* A plan that can be met leaves no detail, even after one that
	 * could not. */
	req.cpus = "40";
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "cpu 40 does not exist (this machine has cpus 0-31)");
	CU_ASSERT_EQUAL(rc, -EINVAL);
	req.cpus = NULL;
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "");
	CU_ASSERT_EQUAL(rc, 0);
	CU_ASSERT_STRING_EQUAL(why_not(NULL, TOPO, &rc), "");
	req.cpus = "0-3";
	req.allowed = "0-1";
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "cpu 2 is outside the allowed set 0-1");
	req.allowed = NULL;
	req.cpus = NULL;
	req.shards = 17;
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "17 shards asked, but this process has 16 usable cores "
				    "(--smt uses every PU of a core)");
	req.smt = 1;
	req.shards = 33;
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "33 shards asked, but this process has 32 usable PUs");
	req.smt = 0;
	req.cpus = "0-3";
	req.shards = 3;
	CU_ASSERT_STRING_EQUAL(why_not(&req, TOPO, &rc), "3 shards asked, but the listed CPUs hold 2 usable cores "
				    "(--smt uses every PU of a core)");
	req.cpus = "3-1";
	CU_ASSERT_PTR_NOT_NULL(strstr(why_not(&req, TOPO, &rc), "'3-1' is not a CPU list"));
	req.cpus = NULL;
	req.shards = 0;
#ifdef _WIN32
	CU_ASSERT_PTR_NOT_NULL(strstr(why_not(&req, "pack:zero", &rc), "'pack:zero' is not a topology this build can read"));
#else
	CU_ASSERT_PTR_NOT_NULL(strstr(why_not(&req, "pack:zero", &rc), "'pack:zero' is not a topology hwloc can read"));
#endif
	CU_ASSERT_PTR_NOT_NULL(strstr(why_not(&req, "/nonexistent/topo.xml", &rc), "cannot load the topology /nonexistent/topo.xml"));
	CU_ASSERT_EQUAL(tl_plan_compute(NULL, &req, TOPO), -EINVAL);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "no plan to fill (out is NULL)");

	/* On the real machine: a CPU outside this thread's affinity. */
#ifdef _WIN32
	for (int c = 0; c < 64; c++)
		if (mine >> c & 1)
			last = c;
	CU_ASSERT_FATAL(last >= 0);
	if (__builtin_popcountll((unsigned long long)mine) < 2)
		return; /* nothing to leave out */
	CU_ASSERT_FATAL(SetProcessAffinityMask(GetCurrentProcess(), (DWORD_PTR)1 << last));
	char list[16], want[160], got[200];
	int first = -1;

	for (int c = 0; c < last && first < 0; c++)
		if (mine >> c & 1)
			first = c;
	snprintf(list, sizeof list, "%d", first);
	req = (tl_plan_request){.cpus = list};
	snprintf(got, sizeof got, "%s", why_not(&req, NULL, &rc));
	CU_ASSERT_TRUE(SetProcessAffinityMask(GetCurrentProcess(), mine));
	snprintf(want, sizeof want, "cpu %d is outside this process's CPU affinity (it allows %d; "
				    "see start /affinity)", first, last);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_STRING_EQUAL(got, want);
#else
	CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof mine, &mine), 0);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mine))
			last = c;
	CU_ASSERT_FATAL(last >= 0);
	if (CPU_COUNT(&mine) < 2)
		return; /* nothing to leave out */
	CPU_ZERO(&one);
	CPU_SET(last, &one);
	CU_ASSERT_EQUAL_FATAL(sched_setaffinity(0, sizeof one, &one), 0);
	char list[16], want[160], got[200];
	int first = -1;

	for (int c = 0; c < last && first < 0; c++)
		if (CPU_ISSET(c, &mine))
			first = c;
	snprintf(list, sizeof list, "%d", first);
	req = (tl_plan_request){.cpus = list};
	snprintf(got, sizeof got, "%s", why_not(&req, NULL, &rc));
	CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof mine, &mine), 0);
	snprintf(want, sizeof want, "cpu %d is outside this process's CPU affinity (it allows %d; "
				    "see taskset -p)", first, last);
	CU_ASSERT_EQUAL(rc, -EINVAL);
	CU_ASSERT_STRING_EQUAL(got, want);
#endif
}

/* The variables' detail names the variable and shows its value, one line. */
static void test_env_detail(void)
{
	tl_plan_request req = {0};

	setenv("TL_SHARDS", "many", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), -EINVAL);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "TL_SHARDS='many' is not a shard count (0..65536)");
	unsetenv("TL_SHARDS");
	setenv("TL_CPUS", "0-\n1", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), -EINVAL);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "TL_CPUS='0-?1' is not a CPU list (like 0-3,6; CPUs below 65536)");
	unsetenv("TL_CPUS");
	setenv("TL_SMT", "yes", 1);
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), -EINVAL);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "TL_SMT='yes' is neither 0 nor 1");
	unsetenv("TL_SMT");
	CU_ASSERT_EQUAL(tl_plan_from_env(&req), 0);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "");
}

/* The deprecated tl_plan_explain still works for one release: the same
 * line into a buffer, cut to fit. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void test_explain_deprecated(void)
{
	tl_plan_request req = {0};
	char why[256], tiny[8];

	CU_ASSERT_EQUAL(tl_plan_explain(&req, TOPO, why, sizeof why), 0);
	CU_ASSERT_STRING_EQUAL(why, "");
	req.cpus = "40";
	CU_ASSERT_TRUE(tl_plan_explain(&req, TOPO, why, sizeof why) > 0);
	CU_ASSERT_STRING_EQUAL(why, "cpu 40 does not exist (this machine has cpus 0-31)");
	CU_ASSERT_EQUAL(tl_plan_explain(&req, TOPO, tiny, sizeof tiny), (int)sizeof tiny - 1);
	CU_ASSERT_STRING_EQUAL(tiny, "cpu 40 ");
	CU_ASSERT_EQUAL(tl_plan_explain(&req, TOPO, NULL, 8), -EINVAL);
	CU_ASSERT_EQUAL(tl_plan_explain(&req, TOPO, why, 0), -EINVAL);
}
#pragma GCC diagnostic pop

int main(void)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{ "default: one shard per core", test_default },
		{ "smt", test_smt },
		{ "cpus narrows", test_cpus_narrow },
		{ "shards truncates", test_shards_truncate },
		{ "overcommit", test_overcommit },
		{ "allowed set with holes", test_allowed_holes },
		{ "one-core topology", test_one_core },
		{ "bad cpu lists", test_bad_cpu_lists },
		{ "cpulist parser", test_cpulist_parse },
		{ "bad topology", test_bad_topology },
#ifndef _WIN32
		{ "xml topology", test_xml },
#endif
		{ "environment", test_env },
		{ "format", test_format },
		{ "bind on synthetic", test_bind_synthetic },
		{ "real machine", test_real_machine },
		{ "real machine affinity", test_real_affinity },
		{ "explain", test_explain },
		{ "environment detail", test_env_detail },
		{ "explain (deprecated)", test_explain_deprecated },
	};
	CU_pSuite suite;
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("plan", NULL, NULL);
	if (!suite)
		goto fail;
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (!CU_add_test(suite, tests[i].name, tests[i].fn))
			goto fail;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS)
		goto fail;
	failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	return failures ? 1 : 0;
fail:
	CU_cleanup_registry();
	return 1;
}
