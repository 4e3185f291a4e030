/* drivers/epoll/dgram.c: the epoll driver's datagrams: a batch of receives per readiness with recvmmsg, the sends queued in a turn in one sendmmsg. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include "epoll_int.h"
#include "../dgram_io.h"

/* One datagram's receive state in a batch. */
struct rx {
	tl_addr from;
	union tl__dg_ctl ctl;
	struct iovec iov;
	uint32_t lease;
};

/* The datagram in m (its msg_hdr filled by the receive) goes to op o as one
 * event: its addresses and length first (the core copies them at once). */
static void deliver(struct tl_drv *d, struct tl_opslot *o, struct rx *x, struct mmsghdr *m,
		    uint32_t flags)
{
	o->u.dg.addr = x->from;
	m->msg_hdr.msg_name = &o->u.dg.addr;
	uint32_t n = tl__dg_recv_done(&m->msg_hdr, o, m->msg_len, (uint32_t)x->iov.iov_len);
	uint32_t lease = x->lease;
	if (lease != TL_NO_LEASE && n == 0) {
		tl__drv_lease_drop(d->loop, lease);
		lease = TL_NO_LEASE;
	}
	tl__drv_event(d->loop, o, n, flags, lease);
}

static void prep(struct mmsghdr *m, struct rx *x)
{
	memset(m, 0, sizeof *m);
	m->msg_hdr.msg_name = &x->from;
	m->msg_hdr.msg_namelen = sizeof x->from;
	m->msg_hdr.msg_iov = &x->iov;
	m->msg_hdr.msg_iovlen = 1;
	m->msg_hdr.msg_control = x->ctl.buf;
	m->msg_hdr.msg_controllen = sizeof x->ctl.buf;
}

/* A one-shot receive: one datagram, into the op's buffer or one lease. */
static int recv_one(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct rx x = {.lease = TL_NO_LEASE};
	struct mmsghdr m;
	uint8_t *buf = o->u.dg.buf;
	uint32_t len = o->u.dg.len;
	if (o->flags & TL_OPF_POOLED) {
		if (!tl__drv_dgram_room(h, 1))
			return 0; /* over its cap: pause(0) runs it again */
		x.lease = tl__ep_take_lease(d, h, &buf, &len);
		if (x.lease == TL_NO_LEASE)
			return 0;
	}
	x.iov = (struct iovec){buf, len};
	prep(&m, &x);
	ssize_t n;
	do
		n = recvmsg(h->fd, &m.msg_hdr, MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int e = errno;
		if (x.lease != TL_NO_LEASE)
			tl__drv_lease_drop(d->loop, x.lease);
		if (e == EAGAIN || e == EWOULDBLOCK) {
			EH(h)->readable = 0;
			return 0;
		}
		tl__drv_event(d->loop, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	m.msg_len = (unsigned)n;
	deliver(d, o, &x, &m, TL_F_TERMINAL);
	return 1;
}

/*
 * A multishot receive: batches of up to TL_DG_BATCH datagrams per recvmmsg,
 * each batch no larger than the turn's room and what h's lease cap leaves
 * (tl__drv_dgram_room): the leases are taken before the call, so the cap
 * holds whatever the socket holds. Ends only with an error other than
 * "nothing more now" (a connected socket's ICMP error, for one).
 */
static int recv_multi(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	struct rx x[TL_DG_BATCH];
	struct mmsghdr m[TL_DG_BATCH];
	while (EH(h)->readable) {
		uint32_t room = tl__drv_room(l);
		if (!room) {
			tl__ep_mark_ready(d, h);
			return 0;
		}
		uint32_t want = tl__drv_dgram_room(h, room < TL_DG_BATCH ? room : TL_DG_BATCH);
		if (!want)
			return 0; /* at its cap: a release (pause(0)) runs it again */
		uint32_t k = 0;
		while (k < want) {
			uint8_t *buf;
			uint32_t len;
			uint32_t lease = tl__ep_take_lease(d, h, &buf, &len);
			if (lease == TL_NO_LEASE)
				break;
			x[k].lease = lease;
			x[k].iov = (struct iovec){buf, len};
			prep(&m[k], &x[k]);
			k++;
		}
		if (!k)
			return 0; /* parked until a lease comes back */
		int n;
		do
			n = recvmmsg(h->fd, m, k, MSG_TRUNC, NULL);
		while (n < 0 && errno == EINTR);
		int e = n < 0 ? errno : 0;
		for (int i = 0; i < n; i++) {
			deliver(d, o, &x[i], &m[i], 0);
			if (!(o->flags & TL_OPF_LIVE)) {
				for (uint32_t j = (uint32_t)i + 1; j < k; j++)
					tl__drv_lease_drop(l, x[j].lease);
				return 1;
			}
		}
		for (uint32_t j = n > 0 ? (uint32_t)n : 0; j < k; j++)
			tl__drv_lease_drop(l, x[j].lease);
		if (n < 0 && e != EAGAIN && e != EWOULDBLOCK) {
			tl__drv_event(l, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		if (n < 0 || (uint32_t)n < k) {
			EH(h)->readable = 0;
			return 0;
		}
	}
	return 0;
}

int tl__ep_run_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	return (o->flags & TL_OPF_MULTI) ? recv_multi(d, h, o) : recv_one(d, h, o);
}

/*
 * Sends: o is at the head of h's write queue; it and the sends queued
 * behind it (up to TL_DG_BATCH) go in one sendmmsg. Each one the kernel
 * took completes with its length; the first it refused with an error
 * completes with that error; EAGAIN leaves the rest queued for the next
 * writable edge. The ops finished here leave the queue here.
 */
int tl__ep_run_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	struct ep_h *e = EH(h);
	struct mmsghdr m[TL_DG_BATCH];
	struct iovec iov[TL_DG_BATCH];
	union tl__dg_ctl ctl[TL_DG_BATCH];
	struct tl_opslot *ops[TL_DG_BATCH];
	int v6 = !!(h->flags & TL_HF_V6);
	int queued = e->whead == o->idx;
	for (;;) {
		uint32_t k = 0;
		for (struct tl_opslot *p = o; p && k < TL_DG_BATCH;) {
			if (p->code != TL_OP_SEND)
				break;
			ops[k] = p;
			iov[k] = (struct iovec){p->u.dg.buf, p->u.dg.len};
			memset(&m[k], 0, sizeof m[k]);
			tl__dg_send_msg(&m[k].msg_hdr, &iov[k], &ctl[k], p, v6);
			k++;
			if (!queued)
				break; /* run at submit, before it joined the queue */
			uint32_t nx = EO(p)->qnext;
			p = nx == TL_NIL ? NULL : ep_op(d, nx);
		}
		int n;
		do
			n = sendmmsg(h->fd, m, k, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		int err = n < 0 ? errno : 0;
		if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
			e->writable = 0;
			return 0;
		}
		uint32_t done = n < 0 ? 1 : (uint32_t)n;
		for (uint32_t i = 0; i < done; i++) {
			if (queued)
				tl__ep_q_pop(l, &e->whead, &e->wtail);
			tl__drv_event(l, ops[i], n < 0 ? -err : (int64_t)ops[i]->u.dg.len,
				      TL_F_TERMINAL, TL_NO_LEASE);
		}
		if (!queued)
			return 1;
		/* Popped here, so the caller's check of the head finds it gone. */
		if (e->whead == TL_NIL || ep_op(d, e->whead)->code != TL_OP_SEND)
			return 1;
		o = ep_op(d, e->whead);
	}
}
