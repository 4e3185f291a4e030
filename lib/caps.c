/* lib/caps.c: per-stream caps on the leases a stream holds and the write bytes it has queued, the read pause they cause, and each reading stream's reserved share of the pooled buffers (contract 4.10). */
#include <errno.h>
#include "core.h"

/*
 * Every stream of a loop shares the loop's pooled buffers. Without a limit
 * one peer that sends but never reads takes them all: an echo server's
 * replies to it cannot be written, each held lease waits for its write, and
 * every other connection of the loop stops being read (a well-behaved
 * client saw no round trip for 11 s). So each stream has two caps, counted
 * here and nowhere else:
 *  - leases: a lease counts against the stream it was read from from the
 *    moment its read completion is queued until the host releases it (a
 *    proxy that holds a lease while its write to the other side is pending
 *    is therefore held back by the reading side's cap);
 *  - write bytes: what tl_write/tl_writev queued on the stream and has not
 *    completed yet.
 * While a stream is at or over either cap it is paused (TL_HF_PAUSED): its
 * driver takes nothing more off its socket, so the backlog stays in the
 * kernel where TCP flow control pushes back on the peer, and it resumes as
 * soon as it is under both. Other streams are not affected. A write is
 * never refused for a cap: the cap is the reason reads stop, which is what
 * stops a forwarder from reading faster than it can write.
 *
 * The lease cap holds by construction, on every driver: a driver gives a
 * stream's pooled read a buffer, or puts a request that may take one into
 * the kernel (io_uring's armed recv: tl__drv_read_armed), only while the
 * stream is not paused, one request at a time, and a request takes one
 * buffer at most (drivers/uring/read_policy.h says why io_uring's reads are
 * never multishot). So a stream under its cap by one can gain one lease,
 * and a stream at its cap none: it never holds more than its cap. A read
 * that was in the kernel when a write-bytes pause came may still complete,
 * with its one buffer.
 *
 * Caps alone do not keep stalled streams from starving the others: 128
 * streams at a cap of 8 hold a pool of 1024. So each stream that reads into
 * pooled buffers (a reader, from its first pooled read until it is freed)
 * has one lease reserved for it, and what the pool has beyond the readers'
 * reservations (the surplus) is shared first come, first served:
 *  - a reader holding (or with a request in the kernel for) no lease may
 *    always take one: its reservation;
 *  - beyond that it may take one more only while the free leases exceed
 *    the requests in the kernel and the reservations still owed to the
 *    other readers (tl__drv_lease_may, drivers/driver.h, with the counts
 *    in struct tl_lease_pool); else its read waits as for an empty pool, and is
 *    resumed when a lease comes back or the surplus grows again
 *    (lease_returned).
 * As long as the pool has a lease for every reader (pooled_buffers at
 * least the number of streams that read; a program sizes its pool from
 * its connection limit, as tlproxy does), no set of stalled streams can
 * take the lease another stream needs for its next read: a stream that
 * stalls holds its cap at most, and once the surplus is gone one lease.
 * An idle stream's reservation is a count, not a buffer: io_uring's armed
 * recv takes one only when data comes, the other drivers at the read. The
 * datagram receives and the core's own reads (a terminal's, a watch's)
 * draw on the pool without a reservation; a loop that has them sizes the
 * pool for them too. A datagram handle's leases count against its cap all
 * the same, and its receives pause over it: a driver takes at most what
 * the cap leaves (tl__drv_dgram_room) for a batch of datagrams, so a
 * multishot receive cannot drain the pool past the cap either.
 *
 * Limits come from the config (handle_leases, handle_write_bytes); a stream
 * accepted from a listener takes the listener's, and tl_handle_caps()
 * changes them for one handle.
 */

/* Whether h is a reader with no lease and no request out: one of the
 * reservations still owed (lpool.owed counts them). */
static inline uint32_t owes(const struct tl_hslot *h)
{
	return h->reader && h->leases + h->armed == 0;
}

/* The pool's surplus: free leases beyond those that requests in the
 * kernel may take and those reserved for readers that hold none. */
static inline int64_t surplus(const struct tl_lease_pool *p)
{
	return (int64_t)p->count - p->out - p->armed - p->owed;
}

struct tl_lease_pool *tl__drv_lease_pool(tl_loop *l)
{
	return &l->lpool;
}

void tl__caps_room(tl_loop *l)
{
	if (l->lpool.starved && surplus(&l->lpool) >= 1) {
		l->lpool.starved = 0;
		if (l->dv->lease_returned)
			l->dv->lease_returned(l->d, TL_NO_LEASE);
	}
}

static int over(const struct tl_hslot *h)
{
	return h->leases >= h->lim_leases || h->wbytes >= h->lim_wbytes;
}

static void check(tl_loop *l, struct tl_hslot *h)
{
	int now = over(h), was = !!(h->flags & TL_HF_PAUSED);
	if (now == was || (h->type != TL_H_STREAM && h->type != TL_H_UDP))
		return;
	if (now) {
		h->flags |= TL_HF_PAUSED;
		l->st.paused++;
		l->st.pauses++;
	} else {
		h->flags &= (uint8_t)~TL_HF_PAUSED;
		l->st.paused--;
	}
	if (l->dv->pause)
		l->dv->pause(l->d, h, now);
}

void tl__caps_init(tl_loop *l, struct tl_hslot *h, const struct tl_hslot *from)
{
	h->leases = 0;
	h->wbytes = 0;
	h->armed = 0;
	h->reader = 0;
	if (from) {
		h->lim_leases = from->lim_leases;
		h->lim_wbytes = from->lim_wbytes;
	} else {
		h->lim_leases = l->cfg.handle_leases < l->lease_count ? l->cfg.handle_leases
								       : l->lease_count;
		h->lim_wbytes = l->cfg.handle_write_bytes;
	}
}

void tl__caps_reader(tl_loop *l, struct tl_hslot *h)
{
	if (tl_likely(h->reader))
		return;
	h->reader = 1;
	l->lpool.owed += owes(h);
}

void tl__caps_lease(tl_loop *l, struct tl_hslot *h, uint32_t lease)
{
	l->lease_owner[lease] = tl__h_id(l, h).v;
	l->lpool.owed -= owes(h);
	h->leases++;
	check(l, h);
}

void tl__caps_lease_back(tl_loop *l, uint32_t lease)
{
	uint64_t owner = l->lease_owner[lease];
	if (!owner)
		return;
	l->lease_owner[lease] = 0;
	/* The stream may be gone (a host may hold leases past Closed). */
	struct tl_hslot *h = tl__handle_get(l, (tl_handle){owner});
	if (!h)
		return;
	h->leases--;
	l->lpool.owed += owes(h);
	check(l, h);
}

void tl__caps_write(tl_loop *l, struct tl_hslot *h, int64_t delta)
{
	h->wbytes += (uint64_t)delta;
	check(l, h);
}

void tl__caps_release(tl_loop *l, struct tl_hslot *h)
{
	if (h->flags & TL_HF_PAUSED) {
		h->flags &= (uint8_t)~TL_HF_PAUSED;
		l->st.paused--;
	}
	/* Its leases the host still holds stay out; its reservation goes (the
	 * reads that wanted the surplus resume at the next turn: this may run
	 * inside a driver's callback). */
	l->lpool.owed -= owes(h);
	l->lpool.armed -= h->armed;
	h->reader = 0;
	h->armed = 0;
}

int tl_handle_caps(tl_loop *l, tl_handle id, uint32_t leases, uint64_t write_bytes)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if ((h->type != TL_H_STREAM && h->type != TL_H_LISTEN && h->type != TL_H_UDP) ||
	    (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	if (leases > l->lease_count || write_bytes > TL_MAX_WRITE_CAP)
		return -EINVAL;
	if (leases)
		h->lim_leases = leases;
	if (write_bytes)
		h->lim_wbytes = write_bytes;
	check(l, h);
	return 0;
}
