/* drivers/uring/kbuf.c: the io_uring driver's provided-buffer ring, whose buffers are the loop's pooled buffers. */
#include <stdlib.h>
#include <string.h>
#include "uring_int.h"

/*
 * Pooled reads use a provided-buffer ring registered by hand (group 0 of
 * this ring; liburing 2.3 has no setup helper): buffer id == lease id, so a
 * CQE's buffer is the lease the host gets.
 *
 * The kernel takes buffers from the ring in the order they were given, so a
 * ring holding every free lease would cycle through all of them, each one
 * cold in cache and TLB by its turn. The ring gets only a window of them
 * (top_up), refilled from a stack of spare leases whose top is the one
 * released last; the window grows whenever the kernel finds the ring empty
 * while spare leases wait.
 *
 * A read that finds the ring empty (-ENOBUFS) parks on the buffer-wait list
 * and is re-armed when a lease comes back (or at once, with a wider window,
 * if spare leases were waiting); the host never sees -ENOBUFS. A read whose
 * stream may take no more of the pool now (lib/caps.c) waits on the same
 * list.
 */

#define UR_BUF_WINDOW 64 /* pooled buffers on the ring at first */

/* The widest the window grows: all leases but one, which stays on the
 * spare stack for the reads the core makes itself (a watch, a terminal:
 * tl__ur_lease_take) whenever the host holds none. Buffers the kernel was
 * given cannot be taken back, so without it such a read could wait for
 * good once the window had grown over every lease. A receive that finds
 * the ring empty still gets that spare (tl__ur_park_for_buffer): no read
 * waits while a lease is free; the window refills without it. With one or
 * two pooled buffers the kernel gets them all. */
static uint32_t win_max(const struct tl_drv *d)
{
	return d->lease_count >= 3 ? d->lease_count - 1 : d->lease_count;
}

int tl__ur_kbuf_init(struct tl_drv *d)
{
	uint32_t cnt;
	d->lease_base = tl__drv_lease_base(d->loop, &d->lease_size, &cnt);
	d->lease_count = cnt;
	d->br_entries = pow2_at_least(cnt);
	size_t brsz = ((size_t)d->br_entries * sizeof(struct io_uring_buf) + 4095) & ~(size_t)4095;
	d->br = aligned_alloc(4096, brsz);
	d->spare = malloc(cnt * sizeof *d->spare);
	if (!d->br || !d->spare)
		return -ENOMEM;
	memset(d->br, 0, brsz);
	struct io_uring_buf_reg reg = {
		.ring_addr = (uint64_t)(uintptr_t)d->br,
		.ring_entries = d->br_entries,
		.bgid = 0,
	};
	int r = io_uring_register_buf_ring(&d->ring, &reg, 0);
	if (r < 0) {
		free(d->br);
		d->br = NULL;
		return r;
	}
	io_uring_buf_ring_init(d->br);
	for (uint32_t i = 0; i < cnt; i++)
		d->spare[d->nspare++] = cnt - 1 - i; /* low ids first */
	d->br_win = win_max(d) < UR_BUF_WINDOW ? win_max(d) : UR_BUF_WINDOW;
	top_up(d);
	return 0;
}

void tl__ur_kbuf_exit(struct tl_drv *d)
{
	if (d->br)
		io_uring_unregister_buf_ring(&d->ring, 0);
}

/* Wait for a buffer, unless some came back since or the window was too
 * small for the load. */
void tl__ur_park_for_buffer(struct tl_drv *d, struct tl_opslot *o)
{
	d->st.enobufs++;
	if (d->nspare && d->br_win < win_max(d)) {
		d->br_win = d->br_win * 2 < win_max(d) ? d->br_win * 2 : win_max(d);
		top_up(d);
	} else if (d->nspare && !d->br_avail) {
		/* The spare kept for the core's reads: beyond the window, once. */
		provide(d, d->spare[--d->nspare]);
	}
	list_add(d, o, d->br_avail ? ST_START : ST_BUFWAIT);
}

uint32_t tl__ur_lease_take(struct tl_drv *d)
{
	return d->nspare ? d->spare[--d->nspare] : TL_NO_LEASE;
}

void tl__ur_lease_returned(struct tl_drv *d, uint32_t id)
{
	if (id == TL_NO_LEASE) {
		/* The pool has room for reads its surplus refused (lib/caps.c):
		 * every waiter tries again, and one that still may not parks
		 * again at issue. */
		list_restart(d, &d->bufwait);
		if (d->embed)
			tl__ur_flush_embed(d);
		return;
	}
	recycle(d, id);
	if (d->bufwait.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->bufwait.head);
		list_del(d, o);
		list_add(d, o, ST_START);
		if (d->embed)
			tl__ur_flush_embed(d);
	}
}
