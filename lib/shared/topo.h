/* lib/shared/topo.h: the machine's shape as the runtime reads it (NUMA nodes and their CPUs) and binding a thread to CPUs: one interface over hwloc (lib/topo_hwloc.c) and Windows' processor groups (lib/topo_win.c). */
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
 * The shard plan (shards/plan.c, still on hwloc) is to read the machine
 * through here too; what it needs beyond this (cores, packages, the CPUs
 * the process may use) belongs in this same interface, each
 * implementation answering it.
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
 * -EINVAL (a description that cannot be read), -ENOTSUP (a kind of
 * description this build cannot read), or the error of reading the file.
 */
int tl__topo_load(tl__topo **out, const char *desc);
void tl__topo_free(tl__topo *t);

/* Its NUMA nodes, in the OS's order: how many (0 when the OS names none),
 * each one's OS number, and each one's CPUs (possibly none: a node of
 * memory only). i < tl__topo_nodes(t). */
uint32_t tl__topo_nodes(const tl__topo *t);
int tl__topo_node_os(const tl__topo *t, uint32_t i);
const tl__cpuset *tl__topo_node_cpus(const tl__topo *t, uint32_t i);

/* Every CPU of the topology. */
const tl__cpuset *tl__topo_cpus(const tl__topo *t);

/* 1 when the topology is this machine's, so that binding to its CPUs means
 * something; 0 for a description (its CPUs are not ours). */
int tl__topo_binds(const tl__topo *t);

/* Bind the calling thread to the CPUs of set (Windows: those of the
 * lowest processor group set has, a thread running in one group at a
 * time): 0, -ENOTSUP when tl__topo_binds(t) is 0, or the OS's refusal as
 * a negative errno (the thread is left as it was). */
int tl__topo_bind(const tl__topo *t, const tl__cpuset *set);

#endif
