/* lib/topo_desc.h: the description both topology implementations fill when they load (lib/topo_hwloc.c, lib/topo_win.c), and lib/topo.c answers the getters of lib/shared/topo.h from. */
#ifndef TL_TOPO_DESC_H
#define TL_TOPO_DESC_H

#include "topo.h"

/*
 * The first member of each implementation's struct tl_topo, so that
 * lib/topo.c reads it through a tl__topo pointer. Filled once at load and
 * never written after (a loaded topology is read by any thread).
 */
struct tl__topo_desc {
	int binds;            /* binding threads works on this system */
	uint32_t nnodes;      /* NUMA nodes, at least 1 */
	int *node_os;         /* [nnodes]: each node's OS number */
	tl__cpuset *node_cpus; /* [nnodes]: each node's CPUs */
	tl__cpuset cpus;      /* the CPUs of the description */
	tl__cpuset existing;  /* every CPU the system has (Windows: cpus) */
	tl__cpuset allowed;   /* the CPUs the process may use (Windows: cpus) */
	uint32_t npus;
	tl__topo_pu *pus;     /* [npus], in topology order */
};

/* Free what the description owns (its arrays; not the description). */
void tl__topo_desc_free(struct tl__topo_desc *d);

#endif
