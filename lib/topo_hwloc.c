/* lib/topo_hwloc.c: lib/shared/topo.h on hwloc: this machine, or a synthetic or XML topology, its NUMA nodes, and thread binding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <hwloc.h>
#include "topo.h"

struct tl_topo {
	hwloc_topology_t h;
	int binds;
	uint32_t nnodes;
	int *node_os;
	tl__cpuset *node_cpus;
	tl__cpuset cpus;
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

void tl__topo_free(tl__topo *t)
{
	if (!t)
		return;
	if (t->h)
		hwloc_topology_destroy(t->h);
	free(t->node_os);
	free(t->node_cpus);
	free(t);
}

int tl__topo_load(tl__topo **out, const char *desc)
{
	tl__topo *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	if (hwloc_topology_init(&t->h) < 0) {
		t->h = NULL;
		tl__topo_free(t);
		return -ENOMEM;
	}
	int r = 0;
	if (desc) {
		size_t len = strlen(desc);
		int xml = len > 4 && !strcmp(desc + len - 4, ".xml");
		if (xml ? hwloc_topology_set_xml(t->h, desc) < 0
			: hwloc_topology_set_synthetic(t->h, desc) < 0)
			r = xml && errno ? -errno : -EINVAL;
	}
	if (!r && hwloc_topology_load(t->h) < 0)
		r = errno ? -errno : -EINVAL;
	if (r) {
		tl__topo_free(t);
		return r;
	}
	/* Synthetic and XML topologies describe CPUs that are not ours. */
	t->binds = !desc && hwloc_topology_is_thissystem(t->h);
	int n = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
	t->nnodes = n > 0 ? (uint32_t)n : 0;
	if (t->nnodes) {
		t->node_os = calloc(t->nnodes, sizeof *t->node_os);
		t->node_cpus = calloc(t->nnodes, sizeof *t->node_cpus);
		if (!t->node_os || !t->node_cpus) {
			tl__topo_free(t);
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < t->nnodes; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, i);
		t->node_os[i] = o ? (int)o->os_index : (int)i;
		from_bitmap(&t->node_cpus[i], o ? o->cpuset : NULL);
	}
	from_bitmap(&t->cpus, hwloc_topology_get_topology_cpuset(t->h));
	*out = t;
	return 0;
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
	hwloc_bitmap_t b = hwloc_bitmap_alloc();
	if (!b)
		return -ENOMEM;
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
		for (uint64_t w = set->w[i]; w; w &= w - 1)
			hwloc_bitmap_set(b, i * 64 + (unsigned)__builtin_ctzll(w));
	int r = hwloc_set_cpubind(t->h, b, HWLOC_CPUBIND_THREAD) < 0 ? (errno ? -errno : -EINVAL) : 0;
	hwloc_bitmap_free(b);
	return r;
}
