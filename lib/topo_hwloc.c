/* lib/topo_hwloc.c: lib/shared/topo.h on hwloc: this machine, or a synthetic or XML topology, its NUMA nodes, PUs, cores and packages, the CPUs the process may use, and thread CPU and memory binding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <hwloc.h>
#include "topo_desc.h"

struct tl_topo {
	struct tl__topo_desc d; /* first: lib/topo.c reads it */
	hwloc_topology_t h;
};

static void from_bitmap(tl__cpuset *s, hwloc_const_bitmap_t b)
{
	tl__cpuset_zero(s);
	if (!b)
		return;
	unsigned id;
	hwloc_bitmap_foreach_begin(id, b)
	{
		if (id >= TL__CPUSET_MAX)
			break;
		tl__cpuset_add(s, id);
	}
	hwloc_bitmap_foreach_end();
}

/* hwloc reports failures as -1 plus errno; errno 0 would turn a failure
 * into success, hence the fallback. */
static int hwloc_err(int fallback)
{
	return errno > 0 ? -errno : -fallback;
}

void tl__topo_free(tl__topo *t)
{
	if (!t)
		return;
	if (t->h)
		hwloc_topology_destroy(t->h);
	tl__topo_desc_free(&t->d);
	free(t);
}

/* The PUs in hwloc's logical order, each with its core, first local NUMA
 * node (hwloc order) and package. */
static int load_pus(tl__topo *t)
{
	int n = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
	if (n <= 0)
		return 0;
	t->d.pus = calloc((size_t)n, sizeof *t->d.pus);
	if (!t->d.pus)
		return -ENOMEM;
	hwloc_obj_t pu = NULL;
	while ((pu = hwloc_get_next_obj_by_type(t->h, HWLOC_OBJ_PU, pu)) && t->d.npus < (uint32_t)n) {
		tl__topo_pu *p = &t->d.pus[t->d.npus++];
		hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t->h, HWLOC_OBJ_CORE, pu);
		hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t->h, HWLOC_OBJ_PACKAGE, pu);
		p->cpu = (int)pu->os_index;
		p->core = core ? (int)core->logical_index : -1;
		p->package = pkg ? (int)pkg->logical_index : -1;
		p->node = p->node_os = -1;
		for (uint32_t i = 0; i < t->d.nnodes; i++) {
			hwloc_obj_t o = hwloc_get_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, i);
			if (o && o->cpuset && hwloc_bitmap_isset(o->cpuset, pu->os_index)) {
				p->node = (int)i;
				p->node_os = t->d.node_os[i];
				break;
			}
		}
	}
	return 0;
}

int tl__topo_load(tl__topo **out, const char *desc)
{
	return tl__topo_load_ex(out, desc, 0);
}

int tl__topo_load_ex(tl__topo **out, const char *desc, unsigned flags)
{
	if (desc && !*desc)
		return -EINVAL;
	tl__topo *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	if (hwloc_topology_init(&t->h) < 0) {
		t->h = NULL;
		tl__topo_free(t);
		return -ENOMEM;
	}
	int r = 0;
	if ((flags & TL__TOPO_DISALLOWED) &&
	    hwloc_topology_set_flags(t->h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) < 0)
		r = -EINVAL;
	if (!r && desc) {
		size_t len = strlen(desc);
		int xml = len >= 4 && !strcmp(desc + len - 4, ".xml");
		errno = 0;
		/* A synthetic description hwloc cannot read is a bad argument,
		 * whatever errno its parser left behind. */
		if (xml ? hwloc_topology_set_xml(t->h, desc) < 0
			: hwloc_topology_set_synthetic(t->h, desc) < 0)
			r = xml ? hwloc_err(EINVAL) : -EINVAL;
	}
	errno = 0;
	if (!r && hwloc_topology_load(t->h) < 0)
		r = hwloc_err(EINVAL);
	if (r) {
		tl__topo_free(t);
		return r;
	}
	/* Synthetic and XML topologies describe CPUs that are not ours. */
	t->d.binds = !desc && hwloc_topology_is_thissystem(t->h);
	int n = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
	t->d.nnodes = n > 0 ? (uint32_t)n : 0;
	if (t->d.nnodes) {
		t->d.node_os = calloc(t->d.nnodes, sizeof *t->d.node_os);
		t->d.node_cpus = calloc(t->d.nnodes, sizeof *t->d.node_cpus);
		if (!t->d.node_os || !t->d.node_cpus) {
			tl__topo_free(t);
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < t->d.nnodes; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, i);
		t->d.node_os[i] = o ? (int)o->os_index : (int)i;
		from_bitmap(&t->d.node_cpus[i], o ? o->cpuset : NULL);
	}
	from_bitmap(&t->d.cpus, hwloc_topology_get_topology_cpuset(t->h));
	from_bitmap(&t->d.existing, hwloc_topology_get_complete_cpuset(t->h));
	from_bitmap(&t->d.allowed, hwloc_topology_get_allowed_cpuset(t->h));
	if (load_pus(t) < 0) {
		tl__topo_free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

int tl__topo_affinity(const tl__topo *t, tl__cpuset *out)
{
	tl__cpuset_zero(out);
	if (!t->d.binds)
		return -ENOTSUP;
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	if (!b)
		return -ENOMEM;
	errno = 0;
	int r = 0;
	if (hwloc_get_cpubind(t->h, b, HWLOC_CPUBIND_PROCESS) < 0) {
		errno = 0;
		if (hwloc_get_cpubind(t->h, b, HWLOC_CPUBIND_THREAD) < 0)
			r = hwloc_err(EINVAL);
	}
	if (!r)
		from_bitmap(out, b);
	hwloc_bitmap_free(b);
	return r;
}

int tl__topo_binds(const tl__topo *t)
{
	return t->d.binds;
}

int tl__topo_bind(const tl__topo *t, const tl__cpuset *set)
{
	if (!t->d.binds)
		return -ENOTSUP;
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	if (!b)
		return -ENOMEM;
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
		for (uint64_t w = set->w[i]; w; w &= w - 1)
			hwloc_bitmap_set(b, i * 64 + (unsigned)__builtin_ctzll(w));
	errno = 0;
	int r = hwloc_set_cpubind(t->h, b, HWLOC_CPUBIND_THREAD) < 0 ? hwloc_err(EINVAL) : 0;
	hwloc_bitmap_free(b);
	return r;
}

int tl__topo_bind_memory(const tl__topo *t, int cpu, int node_os)
{
	(void)cpu;
	if (!t->d.binds)
		return -ENOTSUP;
	if (node_os < 0)
		return -EINVAL;
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	if (!b)
		return -ENOMEM;
	int r = 0;
	if (hwloc_bitmap_only(b, (unsigned)node_os) < 0)
		r = -ENOMEM;
	errno = 0;
	if (!r && hwloc_set_membind(t->h, b, HWLOC_MEMBIND_BIND,
				    HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) < 0)
		r = hwloc_err(EINVAL);
	hwloc_bitmap_free(b);
	return r;
}
