/* lib/topo_win.c: lib/shared/topo.h on Windows: processor groups and NUMA nodes from GetLogicalProcessorInformationEx, binding by SetThreadGroupAffinity, and hwloc's synthetic descriptions read here. */
#ifdef _WIN32
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "os.h"
#include "topo.h"

struct tl_topo {
	int binds;
	uint32_t nnodes;
	int *node_os;
	tl__cpuset *node_cpus;
	tl__cpuset cpus;
};

/* Room for n nodes: 0 or -ENOMEM. */
static int nodes_alloc(tl__topo *t, uint32_t n)
{
	t->node_os = calloc(n ? n : 1, sizeof *t->node_os);
	t->node_cpus = calloc(n ? n : 1, sizeof *t->node_cpus);
	return t->node_os && t->node_cpus ? 0 : -ENOMEM;
}

/* CPUs of one group's affinity mask, numbered 64 × group + bit. */
static void add_mask(tl__cpuset *s, WORD group, KAFFINITY mask)
{
	for (unsigned b = 0; b < 64; b++)
		if ((uint64_t)mask >> b & 1)
			tl__cpuset_add(s, (unsigned)group * 64 + b);
}

/* The records of one relationship, in a buffer the caller frees; NULL with
 * *err set on failure. */
static SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *lpi(LOGICAL_PROCESSOR_RELATIONSHIP rel,
						    DWORD *len, int *err)
{
	*len = 0;
	if (GetLogicalProcessorInformationEx(rel, NULL, len) ||
	    GetLastError() != ERROR_INSUFFICIENT_BUFFER) {
		*err = -ENOTSUP;
		return NULL;
	}
	SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *b = malloc(*len);
	if (!b) {
		*err = -ENOMEM;
		return NULL;
	}
	if (!GetLogicalProcessorInformationEx(rel, b, len)) {
		*err = tl__os_win_error(GetLastError());
		free(b);
		return NULL;
	}
	return b;
}

#define LPI_NEXT(p) ((SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *)((char *)(p) + (p)->Size))

/*
 * This machine. The CPUs are the active ones of every processor group
 * (RelationGroup); each NUMA node (RelationNumaNode) comes with one
 * GROUP_AFFINITY. Windows 11 and Server 2022 may split a node over several
 * groups, and report it so only when asked with RelationNumaNodeEx: asked
 * as here, they give the node's primary group, the one its threads start
 * in. Nodes are sorted by number, as hwloc lists them.
 */
static int load_machine(tl__topo *t)
{
	DWORD len;
	int err = 0;
	SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *b = lpi(RelationGroup, &len, &err), *p;
	if (!b)
		return err;
	for (p = b; (char *)p < (char *)b + len; p = LPI_NEXT(p))
		if (p->Relationship == RelationGroup)
			for (WORD g = 0; g < p->Group.ActiveGroupCount; g++)
				add_mask(&t->cpus, g, p->Group.GroupInfo[g].ActiveProcessorMask);
	free(b);
	t->binds = 1;
	b = lpi(RelationNumaNode, &len, &err);
	if (!b)
		return err == -ENOMEM ? err : 0; /* no nodes named: the caller takes every CPU as one */
	uint32_t n = 0;
	for (p = b; (char *)p < (char *)b + len; p = LPI_NEXT(p))
		n += p->Relationship == RelationNumaNode;
	if (nodes_alloc(t, n) < 0) {
		free(b);
		return -ENOMEM;
	}
	for (p = b; (char *)p < (char *)b + len && t->nnodes < n; p = LPI_NEXT(p)) {
		if (p->Relationship != RelationNumaNode)
			continue;
		uint32_t i = t->nnodes++;
		int os = (int)p->NumaNode.NodeNumber;
		/* Insertion by node number. */
		for (; i > 0 && t->node_os[i - 1] > os; i--) {
			t->node_os[i] = t->node_os[i - 1];
			t->node_cpus[i] = t->node_cpus[i - 1];
		}
		t->node_os[i] = os;
		tl__cpuset_zero(&t->node_cpus[i]);
		add_mask(&t->node_cpus[i], p->NumaNode.GroupMask.Group, p->NumaNode.GroupMask.Mask);
	}
	free(b);
	return 0;
}

/*
 * hwloc's synthetic description, the part of it the pool's tests and
 * configurations use: levels "type:count" from the top down, separated by
 * spaces (no attributes, no indexes). Types as hwloc names them
 * (package/pack/socket, group, die, numa/numanode/node, l1..l5 and their
 * i/cache forms, core, pu). Every level multiplies the ones above it; the
 * NUMA level (none: one node over everything) cuts the CPUs into nodes of
 * consecutive numbers; the last level's objects are the CPUs.
 */
static const struct {
	const char *name;
	int numa;
} levels_known[] = {
	{"machine", 0}, {"package", 0}, {"pack", 0}, {"socket", 0}, {"group", 0}, {"die", 0},
	{"numa", 1}, {"numanode", 1}, {"node", 1}, {"core", 0}, {"pu", 0}, {"l1", 0},
	{"l2", 0}, {"l3", 0}, {"l4", 0}, {"l5", 0}, {"l1i", 0}, {"l2i", 0}, {"l3i", 0},
	{"l1cache", 0}, {"l2cache", 0}, {"l3cache", 0}, {"l4cache", 0}, {"l5cache", 0},
	{"cache", 0},
};

/* 1 for a level hwloc knows, 2 for the NUMA level, 0 for none. */
static int known_level(const char *w, size_t n)
{
	for (size_t i = 0; i < sizeof levels_known / sizeof *levels_known; i++)
		if (strlen(levels_known[i].name) == n && !_strnicmp(w, levels_known[i].name, n))
			return 1 + levels_known[i].numa;
	return 0;
}

static int load_synthetic(tl__topo *t, const char *s)
{
	uint64_t total = 1, nodes = 1;
	int levels = 0;
	while (*s) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s)
			break;
		const char *w = s;
		while (*s && *s != ':' && *s != ' ')
			s++;
		int kind = known_level(w, (size_t)(s - w));
		if (!kind || *s != ':' || s[1] < '0' || s[1] > '9')
			return -EINVAL;
		char *end;
		unsigned long n = strtoul(s + 1, &end, 10);
		if (!n || n > TL__CPUSET_MAX || (*end && *end != ' ' && *end != '\t'))
			return -EINVAL;
		s = end;
		total *= n;
		if (total > TL__CPUSET_MAX)
			return -EINVAL;
		if (kind == 2)
			nodes = total;
		levels++;
	}
	if (!levels)
		return -EINVAL;
	uint64_t per = total / nodes;
	if (nodes_alloc(t, (uint32_t)nodes) < 0)
		return -ENOMEM;
	t->nnodes = (uint32_t)nodes;
	for (uint32_t i = 0; i < t->nnodes; i++) {
		t->node_os[i] = (int)i;
		tl__cpuset_zero(&t->node_cpus[i]);
		for (uint64_t c = 0; c < per; c++)
			tl__cpuset_add(&t->node_cpus[i], (unsigned)(i * per + c));
	}
	for (uint64_t c = 0; c < total; c++)
		tl__cpuset_add(&t->cpus, (unsigned)c);
	return 0;
}

int tl__topo_load(tl__topo **out, const char *desc)
{
	tl__topo *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	int r;
	size_t len = desc ? strlen(desc) : 0;
	if (!desc)
		r = load_machine(t);
	else if (len > 4 && !_stricmp(desc + len - 4, ".xml"))
		r = -ENOTSUP; /* hwloc's XML needs hwloc: not in this build */
	else
		r = load_synthetic(t, desc);
	if (r) {
		tl__topo_free(t);
		return r;
	}
	*out = t;
	return 0;
}

void tl__topo_free(tl__topo *t)
{
	if (!t)
		return;
	free(t->node_os);
	free(t->node_cpus);
	free(t);
}

uint32_t tl__topo_nodes(const tl__topo *t)
{
	return t->nnodes;
}

int tl__topo_node_os(const tl__topo *t, uint32_t i)
{
	return t->node_os[i];
}

const tl__cpuset *tl__topo_node_cpus(const tl__topo *t, uint32_t i)
{
	return &t->node_cpus[i];
}

const tl__cpuset *tl__topo_cpus(const tl__topo *t)
{
	return &t->cpus;
}

int tl__topo_binds(const tl__topo *t)
{
	return t->binds;
}

int tl__topo_bind(const tl__topo *t, const tl__cpuset *set)
{
	if (!t->binds)
		return -ENOTSUP;
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++) {
		if (!set->w[i])
			continue;
		GROUP_AFFINITY ga;
		memset(&ga, 0, sizeof ga);
		ga.Group = (WORD)i;
		ga.Mask = (KAFFINITY)set->w[i];
		if (!SetThreadGroupAffinity(GetCurrentThread(), &ga, NULL))
			return tl__os_win_error(GetLastError());
		return 0;
	}
	return -EINVAL;
}
#endif
