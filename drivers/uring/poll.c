/* drivers/uring/poll.c: the io_uring driver's readiness polls of descriptors the loop does not own (TL_OP_POLL). */
#include <poll.h>
#include <string.h>
#include "uring_int.h"

/*
 * Each poll is a one-shot IORING_OP_POLL_ADD. A multishot op (level-
 * triggered, drivers/driver.h) is armed again after each readiness, at the
 * next poll's enter: a descriptor still ready completes at once there, so
 * it is reported once per turn for as long as it stays ready, as the epoll
 * driver's level-triggered registration does. IORING_POLL_ADD_MULTI is not
 * used: it reports wakeups (edges), and a host that does not drain the
 * descriptor would then hear nothing more, on this driver only.
 *
 * The kernel holds its own reference to the file while the poll is armed,
 * so the owner closing the descriptor meanwhile is harmless. The op is in
 * no handle queue: the handle may be one no driver opened.
 */

int tl__ur_poll_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	memset(u, 0, sizeof *u);
	u->qnext = u->lnext = u->lprev = TL_NIL;
	list_add(d, o, ST_START);
	if (d->embed)
		tl__ur_flush_embed(d);
	return 0;
}

int tl__ur_issue_poll(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	io_uring_prep_poll_add(s, o->poll.fd, o->poll.events);
	io_uring_sqe_set_data64(s, ud_op(o));
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
	return 1;
}

void tl__ur_on_poll(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf)
{
	UO(o)->st = ST_IDLE;
	if ((o->flags & TL_OPF_CANCEL) || res < 0 || !o->poll.multi) {
		tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
	list_add(d, o, ST_START);
}

int tl__ur_poll_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (UO(o)->st != ST_KERNEL) {
		/* Waiting for its next arming: nothing in the kernel. */
		list_del(d, o);
		tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	}
	int r = tl__ur_cancel_kernel(d, o);
	if (r < 0)
		return r;
	if (r == 0 && d->embed)
		tl__ur_flush_embed(d);
	return 0;
}
