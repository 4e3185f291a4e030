/* drivers/sim/splice.c: splices and sendfiles on simulated sockets: a move through an in-memory pipe, with the rules of the OS drivers. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "sim_int.h"

/*
 * The pipe of a splice is a buffer of the pipe's size per pool slot (made
 * the first time the slot is used). At the head of dst's write queue a
 * splice takes once from its source's receive ring into the pipe (at most
 * u.sp.max and the pipe's size, ending on a segment boundary when short_io
 * says so), then writes the pipe into dst's peer as a write would: as far
 * as the peer's ring has room, at least one MSS when short. A source with
 * nothing to give parks the splice on itself (sim_sock.spl); its next run
 * (bytes, end of stream, reset, pause lifted) schedules dst. A sendfile
 * writes the file's bytes (pread) the same way.
 *
 * Cancellation follows driver.h: a splice with bytes in its pipe is not
 * acknowledged but flushes them, unless dst is closing or its deadline
 * ended it; otherwise it is
 * acknowledged at once or by the next run (never raced: a splice that ran
 * once more after its cancel would take bytes it could then only drop).
 */

static struct sim_sock *sock_at(struct tl_drv *d, uint32_t hidx)
{
	struct tl_hslot *h = tl__drv_handle(d->loop, hidx);
	if (h->fd < 0 || (uint32_t)h->fd >= d->nsocks || d->socks[h->fd].type == SK_FREE)
		return NULL;
	return &d->socks[h->fd];
}

static uint8_t *pipe_buf(struct tl_drv *d, const struct tl_opslot *o)
{
	uint32_t i = o->u.sp.pipe;
	if (!d->pipes[i])
		d->pipes[i] = malloc(o->u.sp.pipe_size);
	return d->pipes[i];
}

/* Room in dst's peer for n more bytes: how many may go now (0: wait), or
 * -1 when the op was ended (reported) here. Mirrors a write's checks. */
static int64_t room(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o, uint64_t left)
{
	if (s->err) {
		int e = s->err;
		s->err = 0;
		tl__sim_report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
		return -1;
	}
	if (s->broken || s->wr_shut || s->cs != CS_CONNECTED || (!s->peer && s->is_unix)) {
		tl__sim_report(d, o, s->cs != CS_CONNECTED ? -ENOTCONN : -EPIPE, TL_F_TERMINAL,
			       TL_NO_LEASE);
		return -1;
	}
	if (!s->peer) {
		/* The TCP peer closed: as a write, these go out and are answered
		 * by a reset that the next operation reports. */
		tl__drv_splice_io(d->loop, o, 0, (uint32_t)left);
		tl__sim_report(d, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL, TL_NO_LEASE);
		tl__sim_abort_side(d, s, ECONNRESET);
		return -1;
	}
	struct sim_sock *p = s->peer;
	uint64_t n = p->cap - p->len;
	if (n > left)
		n = left;
	if (n > SIM_MSS && tl__sim_draw(d, TL_SIM_SHORT_IO))
		n = SIM_MSS + tl__sim_below(d, (uint32_t)n - SIM_MSS);
	if (n && tl__sim_draw(d, TL_SIM_RESET)) {
		tl__sim_reset_conn(d, s);
		int e = s->err;
		s->err = 0;
		tl__sim_report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
		return -1;
	}
	return (int64_t)n;
}

/* After a part went into p: wake the peer, and go on when there is room. */
static void wrote(struct tl_drv *d, struct sim_sock *s, struct sim_sock *p, uint32_t n)
{
	tl__sim_seg_add(p, n);
	tl__sim_sched(d, p);
	if (p->len < p->cap)
		tl__sim_sched(d, s);
}

static int run_sendfile(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	uint8_t buf[16384];
	while (o->u.sp.moved < o->u.sp.max) {
		int64_t n = room(d, s, o, o->u.sp.max - o->u.sp.moved);
		if (n < 0)
			return 1;
		if (n == 0)
			return 0; /* the peer's reads wake us */
		if (n > (int64_t)sizeof buf)
			n = sizeof buf;
		long r;
		do
			r = tl__os_pread(o->u.sp.file, buf, (size_t)n, o->u.sp.off);
		while (r < 0 && errno == EINTR);
		if (r <= 0) {
			tl__sim_report(d, o, r < 0 ? -errno : (int64_t)o->u.sp.moved,
				       TL_F_TERMINAL | (r == 0 ? TL_F_EOF : 0), TL_NO_LEASE);
			return 1;
		}
		struct sim_sock *p = s->peer;
		tl__sim_ring_put(p, buf, (uint32_t)r);
		o->u.sp.off += (uint64_t)r;
		tl__drv_splice_io(d->loop, o, 0, (uint32_t)r);
		wrote(d, s, p, (uint32_t)r);
		if (o->u.sp.moved < o->u.sp.max && p->len == p->cap)
			return 0;
	}
	tl__sim_report(d, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* 1: the op reported its terminal; 0: it waits (see the top). */
int tl__sim_run_splice(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (o->u.sp.file >= 0)
		return run_sendfile(d, s, o);
	uint8_t *buf = pipe_buf(d, o);
	if (!buf) {
		tl__sim_report(d, o, -ENOMEM, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (o->u.sp.src != TL_NIL) {
		const struct tl_hslot *sh = tl__drv_handle(d->loop, o->u.sp.src);
		struct sim_sock *src = sock_at(d, o->u.sp.src);
		if (!src || (o->flags & TL_OPF_CANCEL)) /* its acknowledgement is on its way */
			return 0;
		if (sh->flags & TL_HF_PAUSED) {
			src->spl = o->idx;
			return 0;
		}
		if (!src->len) {
			int64_t res = 1;
			if (src->err) {
				res = -src->err;
				src->err = 0;
			} else if (src->rd_eof) {
				res = 0;
			} else if (src->cs == CS_FAILED || src->cs == CS_NEW) {
				res = -ENOTCONN;
			}
			if (res <= 0) {
				src->spl = TL_NIL;
				tl__sim_report(d, o, res, TL_F_TERMINAL | (res == 0 ? TL_F_EOF : 0),
					       TL_NO_LEASE);
				return 1;
			}
			src->spl = o->idx;
			return 0;
		}
		src->spl = TL_NIL;
		uint32_t n = o->u.sp.max < o->u.sp.pipe_size ? o->u.sp.max : o->u.sp.pipe_size;
		if (src->len < n)
			n = src->len;
		if (src->segn > 1 && tl__sim_draw(d, TL_SIM_SHORT_IO)) {
			uint32_t m = tl__sim_seg_prefix(src, 1 + tl__sim_below(d, src->segn - 1u));
			if (m < n)
				n = m;
		}
		tl__sim_ring_get(src, buf, n);
		tl__sim_seg_take(src, n);
		if (src->peer && src->peer->whead != TL_NIL)
			tl__sim_sched(d, src->peer);
		tl__drv_splice_io(d->loop, o, n, 0);
		tl__drv_splice_src_done(d->loop, o);
	}
	while (o->u.sp.moved < o->u.sp.taken) {
		int64_t n = room(d, s, o, o->u.sp.taken - o->u.sp.moved);
		if (n < 0)
			return 1;
		if (n == 0)
			return 0;
		struct sim_sock *p = s->peer;
		/* One take per splice: the pipe holds buf[moved .. taken). */
		tl__sim_ring_put(p, buf + o->u.sp.moved, (uint32_t)n);
		tl__drv_splice_io(d->loop, o, 0, (uint32_t)n);
		wrote(d, s, p, (uint32_t)n);
		if (o->u.sp.moved < o->u.sp.taken && p->len == p->cap)
			return 0;
	}
	tl__sim_report(d, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* s (a source) ran: a splice parked on it may go on. */
void tl__sim_splice_wake(struct tl_drv *d, struct sim_sock *s)
{
	if (s->spl == TL_NIL)
		return;
	struct tl_opslot *o = tl__drv_op(d->loop, s->spl);
	s->spl = TL_NIL;
	struct sim_sock *dst = sock_at(d, o->hidx);
	if (dst)
		tl__sim_sched_at(d, dst, now_ns());
}

int tl__sim_splice_cancel(struct tl_drv *d, struct sim_sock *s, struct tl_hslot *h,
			  struct tl_opslot *o)
{
	if (o->u.sp.file < 0 && o->u.sp.moved < o->u.sp.taken && !(h->flags & TL_HF_CLOSING) &&
	    !(o->flags & TL_OPF_TIMEDOUT))
		return 0; /* it flushes, then reports */
	if (SO(o)->cancel || !tl__sim_q_has(d->loop, s->whead, o))
		return SO(o)->cancel ? 0 : -ENOENT;
	if (tl__sim_draw(d, TL_SIM_CANCEL_FAIL))
		return -EAGAIN;
	if (tl__sim_draw(d, TL_SIM_ASYNC_CANCEL)) {
		SO(o)->cancel = CX_ACK;
		tl__sim_sched(d, s);
		return 0;
	}
	tl__sim_ack_cancel(d, s, o);
	if (s->whead != TL_NIL)
		tl__sim_sched(d, s);
	return 0;
}

/* A splice leaves its queue: it no longer waits on its source. */
void tl__sim_splice_unpark(struct tl_drv *d, struct tl_opslot *o)
{
	if (o->u.sp.file >= 0 || o->u.sp.src == TL_NIL)
		return;
	struct sim_sock *src = sock_at(d, o->u.sp.src);
	if (src && src->spl == o->idx)
		src->spl = TL_NIL;
}
