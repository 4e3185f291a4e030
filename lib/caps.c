/* lib/caps.c: per-stream caps on the leases a stream holds and the write bytes it has queued, and the read pause they cause (contract 4.10). */
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
 * Limits come from the config (handle_leases, handle_write_bytes); a stream
 * accepted from a listener takes the listener's, and tl_handle_caps()
 * changes them for one handle. A driver may have a read already in the
 * kernel when the pause comes; what it takes is delivered (contract 2.5),
 * so a cap can be passed by that much, never more.
 */

static int over(const struct tl_hslot *h)
{
	return h->leases >= h->lim_leases || h->wbytes >= h->lim_wbytes;
}

static void check(tl_loop *l, struct tl_hslot *h)
{
	int now = over(h), was = !!(h->flags & TL_HF_PAUSED);
	if (now == was || h->type != TL_H_STREAM)
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
	if (from) {
		h->lim_leases = from->lim_leases;
		h->lim_wbytes = from->lim_wbytes;
	} else {
		h->lim_leases = l->cfg.handle_leases < l->lease_count ? l->cfg.handle_leases
								       : l->lease_count;
		h->lim_wbytes = l->cfg.handle_write_bytes;
	}
}

void tl__caps_lease(tl_loop *l, struct tl_hslot *h, uint32_t lease)
{
	l->lease_owner[lease] = tl__h_id(l, h).v;
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
}

int tl_handle_caps(tl_loop *l, tl_handle id, uint32_t leases, uint64_t write_bytes)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if ((h->type != TL_H_STREAM && h->type != TL_H_LISTEN) || (h->flags & TL_HF_CLOSING))
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
