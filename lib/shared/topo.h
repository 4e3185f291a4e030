/* lib/shared/topo.h: the machine's shape as the runtime reads it (NUMA nodes, cores, packages, PUs, the CPUs the process may use) and binding a thread to CPUs and memory: one interface over hwloc (lib/topo_hwloc.c) and Windows' processor groups (lib/topo_win.c). */
#ifndef TL_TOPO_H
#define TL_TOPO_H

#include <stdint.h>

/*
 * The blocking pool places one worker set on each NUMA node and binds its
 * workers to the node's CPUs through this interface, and nothing else of
 * the pool names hwloc or Windows. Two implementations, one per build:
 *
 *  - lib/topo_hwloc.c (Linux): hwloc, as before: this machine, or a
 *    synthetic description ("pack:2 numa:1 core:2 pu:1") or the path of an
 *    XML export (ends in ".xml") for tests and for planning another
 *    machine's shape;
 *  - lib/topo_win.c (Windows, where no hwloc is built):
 *    GetLogicalProcessorInformationEx's RelationGroup (the CPUs) and
 *    RelationNumaNode (the nodes, each with its GROUP_AFFINITY), binding by
 *    SetThreadGroupAffinity; a synthetic description of hwloc's form
 *    ("type:count ..." levels) is read by a small parser of its own, and an
 *    XML export is -ENOTSUP.
 *
 * Both fill one description at load (lib/topo_desc.h), from which
 * lib/topo.c answers the getters below; what differs is loading, the
 * affinity and binding.
 *
 * The shard plan (shards/plan.c) reads the machine through here too: the
 * PUs in topology order with their cores, NUMA nodes and packages, the
 * CPUs the process may use, and binding a shard's thread (CPU, then
 * memory), each implementation answering all of it.
 *
 * CPUs are numbered as the OS numbers them: Linux's CPU numbers; on
 * Windows 64 × the processor group + the number within it (hwloc's
 * numbering there too, and tl__os_cpu's).
 */

/* A set of CPUs by number; those at or above TL__CPUSET_MAX are left out. */
#define TL__CPUSET_MAX 4096
typedef struct tl__cpuset {
	uint64_t w[TL__CPUSET_MAX / 64];
} tl__cpuset;

static inline void tl__cpuset_zero(tl__cpuset *s)
{
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
		s->w[i] = 0;
}

/* Add cpu (ignored at or above TL__CPUSET_MAX). */
static inline void tl__cpuset_add(tl__cpuset *s, unsigned cpu)
{
	if (cpu < TL__CPUSET_MAX)
		s->w[cpu / 64] |= 1ull << (cpu % 64);
}

static inline int tl__cpuset_has(const tl__cpuset *s, unsigned cpu)
{
	return cpu < TL__CPUSET_MAX && (s->w[cpu / 64] >> (cpu % 64) & 1);
}

/* The highest CPU in s, or -1 when s is empty. */
static inline int tl__cpuset_last(const tl__cpuset *s)
{
	for (unsigned i = TL__CPUSET_MAX / 64; i-- > 0;)
		if (s->w[i])
			return (int)(i * 64 + 63 - (unsigned)__builtin_clzll(s->w[i]));
	return -1;
}

/* How many CPUs s holds. */
static inline unsigned tl__cpuset_count(const tl__cpuset *s)
{
	unsigned n = 0;
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
		n += (unsigned)__builtin_popcountll(s->w[i]);
	return n;
}

/* A loaded topology: immutable once loaded, so any thread may read it. */
typedef struct tl_topo tl__topo;

/*
 * Load one: desc NULL is this machine; otherwise a synthetic description
 * or the path of an XML export (above). 0 and *out set, or -ENOMEM,
 * -EINVAL (a description that cannot be read, an empty one included),
 * -ENOTSUP (a kind of description this build cannot read), or the error
 * of reading the file.
 */
int tl__topo_load(tl__topo **out, const char *desc);
/*
 * The same with flags: TL__TOPO_DISALLOWED keeps the CPUs this process may
 * not use in the topology (hwloc's HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED:
 * those the cgroup cpuset forbids), so that one can tell a CPU that does
 * not exist from one that is forbidden; Windows has no such CPUs (its
 * limits are the process affinity, tl__topo_affinity) and ignores it.
 */
#define TL__TOPO_DISALLOWED 1u
int tl__topo_load_ex(tl__topo **out, const char *desc, unsigned flags);
void tl__topo_free(tl__topo *t);

/* Its NUMA nodes, in the OS's order: how many (0 when the OS names none),
 * each one's OS number, and each one's CPUs (possibly none: a node of
 * memory only). i < tl__topo_nodes(t). */
uint32_t tl__topo_nodes(const tl__topo *t);
int tl__topo_node_os(const tl__topo *t, uint32_t i);
const tl__cpuset *tl__topo_node_cpus(const tl__topo *t, uint32_t i);

/* Every CPU of the topology. */
const tl__cpuset *tl__topo_cpus(const tl__topo *t);

/*
 * One PU (hardware thread) of the topology. Cores and packages are dense
 * logical indexes in topology order (the OS's core ids repeat across
 * packages); the node is the first one local to the PU (a PU may be local
 * to several: DRAM plus HBM or CXL memory; the first is the ordinary one).
 */
typedef struct tl__topo_pu {
	int cpu;     /* OS CPU number */
	int core;    /* core above it, logical index; -1 when the topology has no core level there */
	int node;    /* its NUMA node as an index of tl__topo_node_*(), -1 if none */
	int node_os; /* that node's OS number, -1 if none */
	int package; /* package (socket) above it, logical index; -1 if none */
} tl__topo_pu;

/* The PUs in topology order: hwloc's logical order (Linux); on Windows by
 * CPU number, cores and packages numbered in the order of their first
 * CPU, which is hwloc's order there. i < tl__topo_pus(t). */
uint32_t tl__topo_pus(const tl__topo *t);
const tl__topo_pu *tl__topo_pu_at(const tl__topo *t, uint32_t i);

/*
 * The CPUs the machine has, offline ones included (hwloc's complete
 * cpuset; Windows: the active CPUs of every group), and those the system
 * lets this process use before its own affinity: hwloc's allowed cpuset
 * (the cgroup's; without TL__TOPO_DISALLOWED the same as tl__topo_cpus);
 * Windows: every CPU of the topology. A description's are all of its CPUs.
 */
const tl__cpuset *tl__topo_existing(const tl__topo *t);
const tl__cpuset *tl__topo_allowed(const tl__topo *t);

/*
 * The process's CPU affinity into *out: Linux, hwloc's process binding
 * (sched_setaffinity, taskset: the union over its threads, so threads
 * an earlier plan pinned do not shrink it), or when that cannot be read
 * (it walks /proc/self/task, and gives up while threads come and go) the
 * calling thread's; Windows, the process affinity of each of its groups
 * (GetProcessGroupAffinity, group 0 where that call is missing as under
 * wine 8; GetProcessAffinityMask for a process of one group, every CPU of
 * each group for a process of several). 0, -ENOTSUP
 * when tl__topo_binds(t) is 0, or the OS's refusal as a negative errno.
 */
int tl__topo_affinity(const tl__topo *t, tl__cpuset *out);

/* The CPUs this process may use: tl__topo_allowed() within the affinity
 * when that is known and not empty (nothing to honour otherwise). */
static inline void tl__topo_usable(const tl__topo *t, tl__cpuset *out)
{
	const tl__cpuset *a = tl__topo_allowed(t);
	tl__cpuset aff;

	*out = *a;
	if (tl__topo_affinity(t, &aff) == 0 && tl__cpuset_count(&aff))
		for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
			out->w[i] &= aff.w[i];
}

/* 1 when the topology is this machine's, so that binding to its CPUs means
 * something; 0 for a description (its CPUs are not ours). */
int tl__topo_binds(const tl__topo *t);

/* Bind the calling thread to the CPUs of set (Windows: those of the
 * lowest processor group set has, a thread running in one group at a
 * time): 0, -ENOTSUP when tl__topo_binds(t) is 0, or the OS's refusal as
 * a negative errno (the thread is left as it was). */
int tl__topo_bind(const tl__topo *t, const tl__cpuset *set);

/*
 * Have the calling thread's memory come from NUMA node node_os, the node
 * of CPU cpu (the shard plan's binding, after tl__topo_bind to cpu).
 * Linux: hwloc's HWLOC_MEMBIND_BIND thread policy on that node. Windows
 * has no thread memory policy: a thread's pages come from its ideal
 * processor's node, so this makes cpu the thread's ideal processor
 * (SetThreadIdealProcessorEx) and node_os is not used. 0, -ENOTSUP when
 * tl__topo_binds(t) is 0, or the refusal as a negative errno (Linux
 * without NUMA support: -ENOSYS or -EXDEV; wine 8, which lacks the call:
 * -ENOSYS).
 */
int tl__topo_bind_memory(const tl__topo *t, int cpu, int node_os);

#endif
