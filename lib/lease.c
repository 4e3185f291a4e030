/* lib/lease.c: the pooled read buffers (leases): taken by the drivers, handed out in completions, given back by the program; a LIFO free stack, so the buffer read into next is the one last given back, still warm in the cache. */
#include <errno.h>
#include "core.h"
#include "sysmod.h"

uint8_t *tl__drv_lease_base(const tl_loop *l, uint32_t *size, uint32_t *count)
{
	*size = l->lease_size;
	*count = l->lease_count;
	return l->lease_mem;
}

uint32_t tl__drv_lease_take(tl_loop *l)
{
	if (!l->lease_nfree)
		return TL_NO_LEASE;
	uint32_t id = l->lease_free[--l->lease_nfree];
	l->lease_out[id] = 1;
	l->lpool.out++;
	return id;
}

uint32_t tl__lease_take(tl_loop *l)
{
	if (!l->dv->lease_take)
		return tl__drv_lease_take(l);
	uint32_t id = l->dv->lease_take(l->d);
	if (id != TL_NO_LEASE)
		tl__drv_lease_mark(l, id);
	return id;
}

void tl__drv_lease_mark(tl_loop *l, uint32_t id)
{
	l->lpool.out += !l->lease_out[id];
	l->lease_out[id] = 1;
}

static void lease_back(tl_loop *l, uint32_t id)
{
	tl__caps_lease_back(l, id);
	l->lpool.out -= l->lease_out[id];
	l->lease_out[id] = 0;
	if (!(l->dv->caps & TL_DRV_CAP_KBUF))
		l->lease_free[l->lease_nfree++] = id;
	if (l->dv->lease_returned)
		l->dv->lease_returned(l->d, id);
	if (tl_unlikely(l->plwait_head != TL_NIL))
		tl__poll_lease_back(l);
}

void tl__drv_lease_drop(tl_loop *l, uint32_t id)
{
	lease_back(l, id);
}

int tl_lease_release(tl_loop *l, uint32_t id)
{
	if (id >= l->lease_count || !l->lease_out[id])
		return -ENOENT;
	lease_back(l, id);
	return 0;
}
