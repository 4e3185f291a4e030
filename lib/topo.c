/* lib/topo.c: the getters of lib/shared/topo.h, answered from the description each implementation fills at load (lib/topo_desc.h). */
#include <stdlib.h>

#include "topo_desc.h"

static const struct tl__topo_desc *desc(const tl__topo *t)
{
	return (const struct tl__topo_desc *)(const void *)t;
}

void tl__topo_desc_free(struct tl__topo_desc *d)
{
	free(d->node_os);
	free(d->node_cpus);
	free(d->pus);
}

uint32_t tl__topo_nodes(const tl__topo *t)
{
	return desc(t)->nnodes;
}

int tl__topo_node_os(const tl__topo *t, uint32_t i)
{
	return desc(t)->node_os[i];
}

const tl__cpuset *tl__topo_node_cpus(const tl__topo *t, uint32_t i)
{
	return &desc(t)->node_cpus[i];
}

const tl__cpuset *tl__topo_cpus(const tl__topo *t)
{
	return &desc(t)->cpus;
}

uint32_t tl__topo_pus(const tl__topo *t)
{
	return desc(t)->npus;
}

const tl__topo_pu *tl__topo_pu_at(const tl__topo *t, uint32_t i)
{
	return &desc(t)->pus[i];
}

const tl__cpuset *tl__topo_existing(const tl__topo *t)
{
	return &desc(t)->existing;
}

const tl__cpuset *tl__topo_allowed(const tl__topo *t)
{
	return &desc(t)->allowed;
}
