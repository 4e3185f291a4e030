/* drivers/uring/queue.c: the io_uring driver's handles and the ops the core submits: which queue an op joins, and when it reaches the start list. */
#include <string.h>
#include "sock.h"
#include "uring_int.h"

/*
 * Ordering per stream: each stream keeps its reads (and a listener its
 * accepts) in one queue and its connect, writes and shutdown in another;
 * only the head of each queue is in the kernel (kick puts an idle head on
 * the start list). The write head's SQE gathers the queued writes behind it
 * (net.c). Datagram sends and receives need no order and go to the start
 * list at once.
 */

static void reset_h(struct tl_hslot *h)
{
	struct ur_h *e = UH(h);
	memset(e, 0, sizeof *e);
	e->rhead = e->rtail = e->whead = e->wtail = TL_NIL;
	e->spl = TL_NIL;
}

int tl__ur_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *s)
{
	/* Accepted sockets inherit TCP_NODELAY (and the other options) from
	 * their listener on Linux: tl__sock_open sets it there once. */
	int fd = tl__sock_open(s);
	if (fd < 0)
		return fd;
	h->fd = fd;
	reset_h(h);
	return 0;
}

int tl__ur_attach(struct tl_drv *d, struct tl_hslot *h)
{
	reset_h(h);
	return 0;
}

int tl__ur_adopt(struct tl_drv *d, struct tl_hslot *h, int fd)
{
	uint8_t type, fl;
	struct tl__sock_prev prev;
	int r = tl__sock_adopt(fd, &type, &fl, &prev);
	if (r < 0)
		return r;
	h->type = type;
	h->flags |= fl;
	h->fd = fd;
	reset_h(h);
	return 0;
}

/* Every op of h has had its CQE (the core asks only then), so the kernel
 * holds nothing of ours on the descriptor. */
int tl__ur_detach(struct tl_drv *d, struct tl_hslot *h)
{
	h->fd = -1;
	return 0;
}

void tl__ur_retry_fdwait(struct tl_drv *d)
{
	list_restart(d, &d->fdwait);
}

void tl__ur_release(struct tl_drv *d, struct tl_hslot *h)
{
	tl__sock_release(h->fd, h->flags & TL_HF_ABORT);
	h->fd = -1;
	/* A descriptor came free: accepts that hit EMFILE may go on. */
	tl__ur_retry_fdwait(d);
	if (d->embed)
		tl__ur_flush_embed(d);
}

int tl__ur_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_local(h->fd, out);
}

int tl__ur_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_peer(h->fd, h->flags & TL_HF_UNIX, out);
}

int tl__ur_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value)
{
	return tl__sock_opt(h->fd, !!(h->flags & TL_HF_V6), set, opt, value);
}

int tl__ur_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	const struct ur_opdef *def = opdef(o);
	if (def->submit) /* its own way in (polls: no handle queue) */
		return def->submit(d, h, o);
	struct ur_o *u = UO(o);
	struct ur_h *e = UH(h);
	memset(u, 0, sizeof *u);
	u->qnext = u->lnext = u->lprev = TL_NIL;
	if (o->code == TL_OP_READ)
		tl__ur_read_init(d, o);
	if (o->code == TL_OP_CONNECT) {
		int r = tl__ur_issue_connect(d, h, o);
		if (r < 0)
			return r;
		q_push(d, &e->whead, &e->wtail, o);
		e->connecting = 1;
	} else if (!is_queued(h)) {
		list_add(d, o, ST_START);
	} else if (is_rside(o)) {
		q_push(d, &e->rhead, &e->rtail, o);
		kick(d, h);
	} else {
		q_push(d, &e->whead, &e->wtail, o);
		kick(d, h);
	}
	if (d->embed)
		tl__ur_flush_embed(d);
	return 0;
}

/* Cancellation asks the kernel (ASYNC_CANCEL on the op's user_data) and the
 * op's terminal comes only from the op's own CQE. An op that is not in the
 * kernel (queued behind a head, waiting for buffers or descriptors, or not
 * issued yet) is acknowledged at once, as epoll does. */
int tl__ur_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	const struct ur_opdef *def = opdef(o);
	if (def->cancel) /* polls, splices, file requests */
		return def->cancel(d, h, o);
	struct ur_o *u = UO(o);
	if (u->st != ST_KERNEL) {
		list_del(d, o);
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return 0;
	}
	/* A write riding in its head's SQE is cancelled through that SQE. */
	struct tl_opslot *owner = o;
	if (h && is_queued(h) && !is_rside(o) && UH(h)->whead != TL_NIL)
		owner = OP(d, UH(h)->whead);
	return tl__ur_cancel_sqe(d, owner);
}

int tl__ur_cancel_sqe(struct tl_drv *d, struct tl_opslot *o)
{
	int r = tl__ur_cancel_kernel(d, o);
	if (r < 0)
		return r;
	if (r == 0 && d->embed)
		tl__ur_flush_embed(d);
	return 0;
}
