/* turnloop/plan.h: the shard plan: which CPU, core and NUMA node each shard runs on, from the hwloc topology (Windows: processor groups) (contract 9.1, 9.8). */
#ifndef TURNLOOP_PLAN_H
#define TURNLOOP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A plan says which PU (hardware thread) each shard runs on. It is computed
 * once at setup from the hwloc topology and then only read. The calls keep
 * the rules at the top of turnloop.h.
 *
 * Windows builds no hwloc: there the machine is what
 * GetLogicalProcessorInformationEx says (processor groups, NUMA nodes,
 * cores, packages), and a synthetic description is read by the library's
 * own parser of hwloc's form; what differs is said below as "Windows".
 *
 * Numbering: "cpu" (pu_os_index) and "numa" are the operating system's
 * numbers, the ones taskset, numactl and sched_getcpu() use (Windows: 64 ×
 * the processor group + the number within it, as hwloc numbers them
 * there). "core" and "package" are hwloc logical indexes (dense, in
 * topology order; Windows: in the order of their first CPU, the same
 * thing), because the OS core id repeats across packages and so names
 * nothing on its own.
 */

/* Largest shard count a request may ask for. */
#define TL_PLAN_MAX_SHARDS 65536u
/* CPU numbers in a CPU list must be below this. */
#define TL_PLAN_MAX_CPU 65536u

/*
 * What the program wants. All-zero is the default: one shard per physical
 * core of the allowed cpuset, SMT siblings left out.
 */
typedef struct tl_plan_request {
	const char *cpus;   /* CPU list like "0-3,6" to narrow to, or NULL (all allowed) */
	uint32_t shards;    /* shard count; 0 = one per core (or per PU with smt) */
	int smt;            /* 1: use every allowed PU of a core, not just the first */
	int overcommit;     /* 1: more shards than usable PUs wrap around the PUs */
	/*
	 * A CPU list that further restricts the allowed set, as if it were the
	 * process's cgroup cpuset; NULL = no extra restriction. It is
	 * intersected with what the machine (or synthetic topology) allows, so
	 * it may name CPUs that do not exist; an empty intersection is -EINVAL.
	 * Tests use it to model a cpuset with holes on a synthetic topology;
	 * tlshard uses it to plan for a set it is about to apply.
	 */
	const char *allowed;
} tl_plan_request;

/* Where one shard runs. numa_node and package are -1 when the topology has
 * no such object above the PU. */
typedef struct tl_shard_place {
	uint32_t shard;   /* index of this shard, 0..count-1 */
	int pu_os_index;  /* OS CPU number */
	int core;         /* core, hwloc logical index (the PU's own index if no core level) */
	int numa_node;    /* NUMA node, OS index (first node local to the PU) */
	int package;      /* package (socket), hwloc logical index */
} tl_shard_place;

typedef struct tl_plan {
	uint32_t count;          /* number of shards, >= 1 in a computed plan */
	uint32_t numa_nodes;     /* distinct NUMA nodes the shards are on */
	tl_shard_place *shards;  /* count entries, owned by the plan */
	void *topo;              /* the topology (hwloc's on Linux), owned by the plan; opaque */
} tl_plan;

/*
 * Compute a plan for req (NULL means all defaults) and store it in *out.
 *
 * synthetic NULL: the real machine, restricted to what this process may use:
 * hwloc leaves out PUs the cgroup cpuset forbids, and the plan keeps only
 * PUs in the process's CPU binding (sched_setaffinity, taskset); Windows:
 * the PUs of the process affinity of each of its processor groups
 * (SetProcessAffinityMask, start /affinity).
 * Otherwise a hwloc synthetic description ("pack:2 numa:2 core:4 pu:2") or,
 * when the string ends in ".xml", the path of a hwloc XML export (Windows:
 * -ENOTSUP, reading one needs hwloc; synthetic descriptions of levels
 * "type:count" without attributes work). Plans of synthetic or XML
 * topologies are for planning only: they cannot bind.
 *
 * Order: shards of one NUMA node are adjacent, nodes in hwloc order, cores in
 * hwloc order within a node, and with smt the PUs of one core adjacent.
 * req->cpus narrows the usable PUs (still one per core unless smt, taking
 * the first listed-and-allowed PU of each core); req->shards takes a prefix
 * of that order, so whole NUMA nodes are used before the next one starts.
 * A shard count above the number of usable PUs (one per core without smt)
 * is -EINVAL unless overcommit, which assigns shard i to usable PU i mod n.
 * The environment is not read here; see tl_plan_from_env().
 *
 * Ownership: on success *out holds memory and the topology; release both
 * with tl_plan_free(). On failure *out is zeroed and owns nothing.
 * Returns 0; -EINVAL for out NULL, an empty or unparsable CPU list, a CPU
 * in req->cpus that is not allowed, an empty allowed set, shards above
 * TL_PLAN_MAX_SHARDS, too many shards without overcommit, or a synthetic
 * description hwloc (Windows: the library's parser) rejects; -ENOMEM; or the negated errno hwloc reports
 * when the topology cannot be loaded (e.g. -ENOENT for a missing XML file;
 * Windows: -ENOTSUP for any XML file).
 * Detail (tl_error_detail) on failure: which CPU of req->cpus (or TL_CPUS,
 * once tl_plan_from_env filled it in) is wrong and why (no such CPU on the
 * machine; outside the cgroup cpuset; outside the CPU affinity of the
 * process, as taskset sets it; outside req->allowed), or how many shards
 * were asked against how many usable cores or PUs, or what the topology
 * could not load.
 */
int tl_plan_compute(tl_plan *out, const tl_plan_request *req, const char *synthetic);

/* Release what tl_plan_compute() stored in *p and zero it. Safe on a zeroed
 * plan, on a plan already freed, and with p NULL. Shard threads must have
 * stopped using p (tl_plan_bind_thread) before it is freed. */
void tl_plan_free(tl_plan *p);

/*
 * Fill the fields of *req that the program left unset from the environment
 * (contract 9.8): TL_CPUS (a CPU list) when req->cpus is NULL, TL_SHARDS
 * (decimal 0..TL_PLAN_MAX_SHARDS, 0 = one per core) when req->shards is 0,
 * TL_SMT ("0" or "1") when req->smt is 0. A field the program set wins and
 * the variable is then not even parsed. Because 0 means "unset", a program
 * cannot force smt off against TL_SMT=1. An empty variable counts as unset.
 *
 * Ownership: req->cpus may be left pointing into the environment (getenv),
 * valid until TL_CPUS is changed; compute the plan before changing it.
 * Returns 0, or -EINVAL (req NULL or a bad value, which includes a TL_CPUS
 * that is not a valid CPU list); on -EINVAL *req is unchanged. Detail
 * (tl_error_detail) on failure: the variable and its value.
 */
int tl_plan_from_env(tl_plan_request *req);

/*
 * Deprecated (removed after 0.1): the reason is tl_plan_compute's detail
 * (tl_error_detail). Copies into buf of len bytes (NUL-terminated, cut to
 * fit) the one line tl_plan_compute(&plan, req, synthetic) would leave as
 * its detail. Returns the reason's length, 0 when the request can be met
 * (buf then holds ""), or -EINVAL (buf NULL or len 0).
 */
TL_DEPRECATED("the reason is tl_plan_compute's tl_error_detail()")
int tl_plan_explain(const tl_plan_request *req, const char *synthetic, char *buf, size_t len);

/*
 * Print the plan, one line per shard:
 *   "shard 0: cpu 2 core 1 numa 0 package 0\n"
 * into buf of len bytes, NUL-terminated. Returns the number of bytes written,
 * not counting the NUL; -EINVAL if p or buf is NULL; -ENOBUFS if len cannot
 * hold all of it and the NUL (len 0 included; buf then holds an empty string
 * when len > 0, never a truncated plan).
 */
int tl_plan_format(const tl_plan *p, char *buf, size_t len);

/*
 * Parse a CPU list ("0-3,6,8-9": decimal CPUs and inclusive ranges, comma
 * separated, no spaces) into a bit mask: CPU n is bit n % 64 of
 * mask_words[n / 64]. The nwords words are cleared first. Returns 0, or
 * -EINVAL for s or mask_words NULL, nwords 0, an empty string, an empty
 * item, anything but digits, '-' and ',', a reversed range ("3-1"), or a CPU
 * at or beyond nwords * 64 or TL_PLAN_MAX_CPU; on -EINVAL all words are 0.
 */
int tl_cpulist_parse(const char *s, uint64_t *mask_words, size_t nwords);

/*
 * Bind the calling thread to shard's PU and its memory allocations to that
 * PU's NUMA node (hwloc thread CPU binding and HWLOC_MEMBIND_BIND thread
 * memory binding). Windows: SetThreadGroupAffinity to the PU; it has no
 * thread memory policy, a thread's pages coming from its ideal processor's
 * node, so the PU is made the thread's ideal processor
 * (SetThreadIdealProcessorEx; where that call is missing, as under wine 8,
 * that is ENOSYS). Different shard threads may call it concurrently on the
 * same plan. On a single-node machine a memory binding refused with ENOSYS
 * or EXDEV is not an error (there is nothing to choose there).
 * Returns 0; -EINVAL (p NULL, not computed, or shard >= count); -ENOTSUP
 * for a plan of a synthetic or XML topology; or the negated errno of the
 * failed binding. If the memory binding fails the CPU binding stays.
 */
int tl_plan_bind_thread(const tl_plan *p, uint32_t shard);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_PLAN_H */
