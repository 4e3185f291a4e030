/* drivers/uring/splice.c: the io_uring driver's splices and sendfiles: io_uring polls for readiness, splice(2) and sendfile(2) for the bytes. */
#include <poll.h>
#include "splice_io.h"
#include "uring_int.h"

/*
 * Not IORING_OP_SPLICE. The kernel runs that opcode in an io-wq worker
 * thread every time (it never completes inline), and on the driver's
 * non-blocking sockets a splice from a socket with nothing in it answers
 * -EAGAIN rather than waiting, so a poll has to come first anyway. Measured
 * on this project's hosts (bench/splice_bench.c, docs/EXPERIMENTS.md), the
 * worker round trip costs more CPU per byte than an IORING_OP_POLL_ADD
 * followed by plain non-blocking splice(2) calls from the loop's thread,
 * which is what this file does: the syscalls move the bytes, and the ring
 * only tells when a socket has become readable or writable.
 *
 * A splice is the head of dst's write queue (queue.c) when it reaches the
 * start list. step() then tries its source (splice(2) into the pipe; on
 * -EAGAIN a POLL_ADD on the source, POLLIN), writes the pipe out to dst
 * (on -EAGAIN a POLL_ADD on dst, POLLOUT) and reports the terminal when
 * the pipe is empty; the poll's CQE runs step() again. A sendfile is the
 * second half alone, with sendfile(2). The source is not read while it is
 * over a cap: the splice parks on the paused list, and tl__ur_pause(src, 0)
 * starts it again (ur_h.spl names it).
 *
 * Cancelling (driver.h): a poll in the kernel is cancelled with
 * ASYNC_CANCEL and its CQE ends the op; one that fired as the cancel went
 * in finds TL_OPF_CANCEL in step(). A splice with bytes in its pipe is
 * not cancelled at all unless dst is closing or its idle deadline ended it:
 * it goes on writing them.
 */

/* o leaves the driver with its terminal. */
static int done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int64_t res,
		uint32_t flags)
{
	list_del(d, o);
	op_done(d, h, o, res, flags, TL_NO_LEASE);
	return 1;
}

/* Wait in the kernel until fd has ev. 1: the poll is on its way; 0: no
 * SQE now (o is on the start list for the next poll). */
static int wait_for(struct tl_drv *d, struct tl_opslot *o, int fd, unsigned ev)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s) {
		if (UO(o)->st != ST_START) {
			list_del(d, o);
			list_add(d, o, ST_START);
		}
		return 0;
	}
	io_uring_prep_poll_add(s, fd, ev);
	io_uring_sqe_set_data64(s, ud_op(o));
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
	d->st.splice_polls++;
	return 1;
}

/* Take o as far as it goes now (the return value is issue's). */
static int step(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	int dropping = (o->flags & TL_OPF_CANCEL) &&
		       ((h->flags & TL_HF_CLOSING) || (o->flags & TL_OPF_TIMEDOUT));
	if (o->u.sp.file >= 0) {
		while (o->u.sp.moved < o->u.sp.max) {
			if (o->flags & TL_OPF_CANCEL) /* a poll that fired as it went in */
				return done(d, h, o, -ECANCELED, 0);
			ssize_t n = tl__sendfile_out(h->fd, o->u.sp.file, &o->u.sp.off,
						     o->u.sp.max - o->u.sp.moved);
			if (n == -EAGAIN)
				return wait_for(d, o, h->fd, POLLOUT);
			if (n < 0)
				return done(d, h, o, n, 0);
			if (n == 0)
				return done(d, h, o, (int64_t)o->u.sp.moved, TL_F_EOF);
			tl__drv_splice_io(l, o, 0, (uint32_t)n);
		}
		return done(d, h, o, (int64_t)o->u.sp.moved, 0);
	}
	if (o->u.sp.src != TL_NIL) {
		struct tl_hslot *s = HS(d, o->u.sp.src);
		if (o->flags & TL_OPF_CANCEL)
			return done(d, h, o, -ECANCELED, 0);
		if (s->flags & TL_HF_PAUSED) {
			UH(s)->spl = o->idx;
			list_del(d, o);
			list_add(d, o, ST_PAUSED);
			return 1;
		}
		size_t want = o->u.sp.max < o->u.sp.pipe_size ? o->u.sp.max : o->u.sp.pipe_size;
		ssize_t n = tl__splice_in(s->fd, o->u.sp.wfd, want);
		if (n == -EAGAIN)
			return wait_for(d, o, s->fd, POLLIN);
		if (n <= 0)
			return done(d, h, o, n, n == 0 ? TL_F_EOF : 0);
		tl__drv_splice_io(l, o, (uint32_t)n, 0);
		tl__drv_splice_src_done(l, o);
		d->st.splice_ins++;
	}
	while (o->u.sp.moved < o->u.sp.taken) {
		if (dropping)
			return done(d, h, o, (int64_t)o->u.sp.moved, 0);
		ssize_t n = tl__splice_out(o->u.sp.rfd, h->fd, o->u.sp.taken - o->u.sp.moved);
		if (n == -EAGAIN)
			return wait_for(d, o, h->fd, POLLOUT);
		if (n <= 0)
			return done(d, h, o, n < 0 ? n : -EIO, 0);
		tl__drv_splice_io(l, o, 0, (uint32_t)n);
	}
	return done(d, h, o, (int64_t)o->u.sp.moved, 0);
}

int tl__ur_splice_issue(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	return step(d, h, o);
}

/* A poll's CQE: the mask that became ready, or an error (-ECANCELED when
 * we asked). */
void tl__ur_splice_complete(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			    unsigned cf)
{
	UO(o)->st = ST_IDLE;
	if (res < 0) {
		if (res == -ECANCELED && (o->flags & TL_OPF_CANCEL))
			res = (int)o->u.sp.moved; /* the core reports -ECANCELED */
		op_done(d, h, o, res, 0, TL_NO_LEASE);
		return;
	}
	step(d, h, o);
}

int tl__ur_splice_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	/* Bytes in the pipe are written out first, unless dst is going. */
	if (o->u.sp.file < 0 && o->u.sp.moved < o->u.sp.taken && !(h->flags & TL_HF_CLOSING) &&
	    !(o->flags & TL_OPF_TIMEDOUT))
		return 0;
	if (u->st == ST_KERNEL) {
		int r = tl__ur_cancel_kernel(d, o);
		if (r < 0)
			return r;
		if (r == 0 && d->embed)
			tl__ur_flush_embed(d);
		return 0;
	}
	if (o->u.sp.src != TL_NIL && UH(HS(d, o->u.sp.src))->spl == o->idx)
		UH(HS(d, o->u.sp.src))->spl = TL_NIL;
	done(d, h, o, -ECANCELED, 0);
	return 0;
}

void tl__ur_splice_unpaused(struct tl_drv *d, struct tl_hslot *src)
{
	struct ur_h *e = UH(src);
	if (e->spl == TL_NIL)
		return;
	struct tl_opslot *o = OP(d, e->spl);
	e->spl = TL_NIL;
	if (UO(o)->st == ST_PAUSED) {
		list_del(d, o);
		list_add(d, o, ST_START);
		if (d->embed)
			tl__ur_flush_embed(d);
	}
}
