/* lib/topo_win.c: lib/shared/topo.h on Windows: processor groups, NUMA nodes, cores and packages from GetLogicalProcessorInformationEx, the process affinity of each group, binding by SetThreadGroupAffinity and SetThreadIdealProcessorEx, and hwloc's synthetic descriptions read here. */
#ifdef _WIN32
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "os.h"
#include "topo_desc.h"

struct tl_topo {
	struct tl__topo_desc d; /* lib/topo.c reads it */
};

/* The first node (in tl__topo_node_* order) that has cpu, or -1. */
static int node_of(const tl__topo *t, unsigned cpu)
{
	for (uint32_t i = 0; i < t->d.nnodes; i++)
		if (tl__cpuset_has(&t->d.node_cpus[i], cpu))
			return (int)i;
	return -1;
}

/* The PUs: every CPU by number, each with its first node; core and
 * package filled in by the caller (-1 until then). */
static int pus_alloc(tl__topo *t)
{
	unsigned n = tl__cpuset_count(&t->d.cpus);
	t->d.pus = calloc(n ? n : 1, sizeof *t->d.pus);
	if (!t->d.pus)
		return -ENOMEM;
	for (unsigned c = 0; c < TL__CPUSET_MAX && t->d.npus < n; c++) {
		if (!tl__cpuset_has(&t->d.cpus, c))
			continue;
		tl__topo_pu *p = &t->d.pus[t->d.npus++];
		p->cpu = (int)c;
		p->core = p->package = -1;
		p->node = node_of(t, c);
		p->node_os = p->node >= 0 ? t->d.node_os[p->node] : -1;
	}
	return 0;
}

/* Room for n nodes: 0 or -ENOMEM. */
static int nodes_alloc(tl__topo *t, uint32_t n)
{
	t->d.node_os = calloc(n ? n : 1, sizeof *t->d.node_os);
	t->d.node_cpus = calloc(n ? n : 1, sizeof *t->d.node_cpus);
	return t->d.node_os && t->d.node_cpus ? 0 : -ENOMEM;
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
 * Number the objects of one relationship (cores, packages) densely in the
 * order of their first CPU and store each PU's in *field (the offset of
 * core or package in tl__topo_pu). Windows names none: they stay -1.
 */
static int number_objects(tl__topo *t, LOGICAL_PROCESSOR_RELATIONSHIP rel, size_t field)
{
	DWORD len;
	int err = 0;
	SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX *b = lpi(rel, &len, &err), *p;
	if (!b)
		return err == -ENOMEM ? err : 0;
	int *rec = malloc(TL__CPUSET_MAX * sizeof *rec), nrec = 0;
	if (!rec) {
		free(b);
		return -ENOMEM;
	}
	for (unsigned c = 0; c < TL__CPUSET_MAX; c++)
		rec[c] = -1;
	/* Each CPU's record, by the records' order. */
	for (p = b; (char *)p < (char *)b + len; p = LPI_NEXT(p)) {
		if (p->Relationship != rel)
			continue;
		for (WORD g = 0; g < p->Processor.GroupCount; g++) {
			tl__cpuset s;
			tl__cpuset_zero(&s);
			add_mask(&s, p->Processor.GroupMask[g].Group, p->Processor.GroupMask[g].Mask);
			for (unsigned c = 0; c < TL__CPUSET_MAX; c++)
				if (tl__cpuset_has(&s, c) && rec[c] < 0)
					rec[c] = nrec;
		}
		nrec++;
	}
	free(b);
	/* Records renumbered in the order of their first CPU. */
	int *dense = malloc((size_t)(nrec ? nrec : 1) * sizeof *dense), next = 0;
	if (!dense) {
		free(rec);
		return -ENOMEM;
	}
	for (int i = 0; i < nrec; i++)
		dense[i] = -1;
	for (uint32_t i = 0; i < t->d.npus; i++) {
		int r = rec[t->d.pus[i].cpu];
		if (r < 0)
			continue;
		if (dense[r] < 0)
			dense[r] = next++;
		*(int *)((char *)&t->d.pus[i] + field) = dense[r];
	}
	free(dense);
	free(rec);
	return 0;
}

/*
 * This machine. The CPUs are the active ones of every processor group
 * (RelationGroup); each NUMA node (RelationNumaNode) comes with one
 * GROUP_AFFINITY. Windows 11 and Server 2022 may split a node over several
 * groups, and report it so only when asked with RelationNumaNodeEx: asked
 * as here, they give the node's primary group, the one its threads start
 * in. Nodes are sorted by number, as hwloc lists them.
 */
/* The machine's PUs, their cores (RelationProcessorCore) and packages
 * (RelationProcessorPackage). */
static int load_machine_pus(tl__topo *t)
{
	if (pus_alloc(t) < 0 ||
	    number_objects(t, RelationProcessorCore, offsetof(tl__topo_pu, core)) < 0 ||
	    number_objects(t, RelationProcessorPackage, offsetof(tl__topo_pu, package)) < 0)
		return -ENOMEM;
	return 0;
}

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
				add_mask(&t->d.cpus, g, p->Group.GroupInfo[g].ActiveProcessorMask);
	free(b);
	t->d.binds = 1;
	b = lpi(RelationNumaNode, &len, &err);
	if (!b) {
		if (err == -ENOMEM)
			return err;
		/* No nodes named: the caller takes every CPU as one. */
		return load_machine_pus(t);
	}
	uint32_t n = 0;
	for (p = b; (char *)p < (char *)b + len; p = LPI_NEXT(p))
		n += p->Relationship == RelationNumaNode;
	if (nodes_alloc(t, n) < 0) {
		free(b);
		return -ENOMEM;
	}
	for (p = b; (char *)p < (char *)b + len && t->d.nnodes < n; p = LPI_NEXT(p)) {
		if (p->Relationship != RelationNumaNode)
			continue;
		uint32_t i = t->d.nnodes++;
		int os = (int)p->NumaNode.NodeNumber;
		/* Insertion by node number. */
		for (; i > 0 && t->d.node_os[i - 1] > os; i--) {
			t->d.node_os[i] = t->d.node_os[i - 1];
			t->d.node_cpus[i] = t->d.node_cpus[i - 1];
		}
		t->d.node_os[i] = os;
		tl__cpuset_zero(&t->d.node_cpus[i]);
		add_mask(&t->d.node_cpus[i], p->NumaNode.GroupMask.Group, p->NumaNode.GroupMask.Mask);
	}
	free(b);
	return load_machine_pus(t);
}

/*
 * hwloc's synthetic description, the part of it the pool's and the plan's
 * tests and configurations use: levels "type:count" from the top down,
 * separated by spaces (no attributes, no indexes). Types as hwloc names
 * them (package/pack/socket, group, die, numa/numanode/node, l1..l5 and
 * their i/cache forms, core, pu). Every level multiplies the ones above it;
 * the last level's objects are the CPUs, numbered in order as hwloc does.
 * The NUMA level (none: one node over everything) cuts the CPUs into nodes
 * of consecutive numbers, the package and core levels (none: -1) into
 * packages and cores likewise, numbered as hwloc's logical indexes are.
 */
enum { LV_OTHER = 1, LV_NUMA, LV_PACKAGE, LV_CORE };

static const struct {
	const char *name;
	int kind;
} levels_known[] = {
	{"machine", LV_OTHER}, {"package", LV_PACKAGE}, {"pack", LV_PACKAGE},
	{"socket", LV_PACKAGE}, {"group", LV_OTHER}, {"die", LV_OTHER}, {"numa", LV_NUMA},
	{"numanode", LV_NUMA}, {"node", LV_NUMA}, {"core", LV_CORE}, {"pu", LV_OTHER},
	{"l1", LV_OTHER}, {"l2", LV_OTHER}, {"l3", LV_OTHER}, {"l4", LV_OTHER}, {"l5", LV_OTHER},
	{"l1i", LV_OTHER}, {"l2i", LV_OTHER}, {"l3i", LV_OTHER}, {"l1cache", LV_OTHER},
	{"l2cache", LV_OTHER}, {"l3cache", LV_OTHER}, {"l4cache", LV_OTHER},
	{"l5cache", LV_OTHER}, {"cache", LV_OTHER},
};

/* The level's kind (LV_*), 0 for a name hwloc does not know. */
static int known_level(const char *w, size_t n)
{
	for (size_t i = 0; i < sizeof levels_known / sizeof *levels_known; i++)
		if (strlen(levels_known[i].name) == n && !_strnicmp(w, levels_known[i].name, n))
			return levels_known[i].kind;
	return 0;
}

static int load_synthetic(tl__topo *t, const char *s)
{
	/* Objects at the package, NUMA and core levels (0: no such level). */
	uint64_t total = 1, nodes = 0, packages = 0, cores = 0;
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
		if (kind == LV_NUMA)
			nodes = total;
		else if (kind == LV_PACKAGE)
			packages = total;
		else if (kind == LV_CORE)
			cores = total;
		levels++;
	}
	if (!levels)
		return -EINVAL;
	if (!nodes)
		nodes = 1;
	uint64_t per = total / nodes;
	if (nodes_alloc(t, (uint32_t)nodes) < 0)
		return -ENOMEM;
	t->d.nnodes = (uint32_t)nodes;
	for (uint32_t i = 0; i < t->d.nnodes; i++) {
		t->d.node_os[i] = (int)i;
		tl__cpuset_zero(&t->d.node_cpus[i]);
		for (uint64_t c = 0; c < per; c++)
			tl__cpuset_add(&t->d.node_cpus[i], (unsigned)(i * per + c));
	}
	for (uint64_t c = 0; c < total; c++)
		tl__cpuset_add(&t->d.cpus, (unsigned)c);
	if (pus_alloc(t) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->d.npus; i++) {
		tl__topo_pu *p = &t->d.pus[i];
		if (cores)
			p->core = (int)((uint64_t)p->cpu / (total / cores));
		if (packages)
			p->package = (int)((uint64_t)p->cpu / (total / packages));
	}
	return 0;
}

int tl__topo_load(tl__topo **out, const char *desc)
{
	return tl__topo_load_ex(out, desc, 0);
}

/* Windows forbids no CPU but by the affinity: flags change nothing. */
int tl__topo_load_ex(tl__topo **out, const char *desc, unsigned flags)
{
	(void)flags;
	if (desc && !*desc)
		return -EINVAL;
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
	/* Every CPU a description names exists and may be used. */
	t->d.existing = t->d.cpus;
	t->d.allowed = t->d.cpus;
	*out = t;
	return 0;
}

void tl__topo_free(tl__topo *t)
{
	if (!t)
		return;
	tl__topo_desc_free(&t->d);
	free(t);
}

/*
 * The groups the process runs in (GetProcessGroupAffinity); for a process
 * of one group its mask there (GetProcessAffinityMask, which answers 0 for
 * a process of several), else every CPU of each of its groups.
 */
int tl__topo_affinity(const tl__topo *t, tl__cpuset *out)
{
	tl__cpuset_zero(out);
	if (!t->d.binds)
		return -ENOTSUP;
	USHORT groups[TL__CPUSET_MAX / 64], n = TL__CPUSET_MAX / 64;
	if (!GetProcessGroupAffinity(GetCurrentProcess(), &n, groups)) {
		n = 1;
		groups[0] = 0;
	}
	DWORD_PTR pm = 0, sm = 0;
	if (n == 1 && GetProcessAffinityMask(GetCurrentProcess(), &pm, &sm) && pm) {
		add_mask(out, groups[0], (KAFFINITY)pm);
		return 0;
	}
	for (USHORT i = 0; i < n && i < TL__CPUSET_MAX / 64; i++)
		if (groups[i] < TL__CPUSET_MAX / 64)
			out->w[groups[i]] = t->d.cpus.w[groups[i]];
	return 0;
}

int tl__topo_binds(const tl__topo *t)
{
	return t->d.binds;
}

int tl__topo_bind(const tl__topo *t, const tl__cpuset *set)
{
	if (!t->d.binds)
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

/* No thread memory policy on Windows: a thread's pages come from its ideal
 * processor's node, so the CPU becomes the ideal one. -ENOSYS where the
 * call is missing (wine 8). */
int tl__topo_bind_memory(const tl__topo *t, int cpu, int node_os)
{
	(void)node_os;
	if (!t->d.binds)
		return -ENOTSUP;
	if (cpu < 0 || cpu >= TL__CPUSET_MAX)
		return -EINVAL;
	PROCESSOR_NUMBER pn;
	memset(&pn, 0, sizeof pn);
	pn.Group = (WORD)(cpu / 64);
	pn.Number = (BYTE)(cpu % 64);
	if (!SetThreadIdealProcessorEx(GetCurrentThread(), &pn, NULL)) {
		DWORD e = GetLastError();
		/* Wine 8 has no such call: no memory placement to make, as
		 * Linux without NUMA support says with ENOSYS. */
		return e == ERROR_CALL_NOT_IMPLEMENTED ? -ENOSYS : tl__os_win_error(e);
	}
	return 0;
}
#endif
