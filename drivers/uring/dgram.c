/* drivers/uring/dgram.c: the io_uring driver's datagrams: sendmsg and recvmsg with their control data, a multishot receive re-armed per datagram, and the lease cap held by construction. */
#include <errno.h>
#include <string.h>
#include "uring_int.h"

/*
 * Every datagram request of the loop goes to the kernel in the one enter of
 * the next poll, whatever the handle, so sends queued in a turn and the
 * receives of every socket share a system call. A pooled receive is one
 * recvmsg that takes one buffer at most from the provided-buffer ring, and
 * a multishot receive (tl_udp_recv_start) issues the next one when the
 * last completes: h never has more than one request in the kernel, and
 * issues it only while its lease cap leaves room (tl__drv_dgram_room), so
 * it never holds more leases than its cap. The kernel's own multishot
 * recvmsg is not used: it takes buffers from the shared ring for as long
 * as datagrams come, and no limit of one socket's can be set on it.
 */

int tl__ur_dg_issue_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	struct ur_msg *m = &d->msg[o->idx];
	m->iov.iov_base = o->u.dg.buf;
	m->iov.iov_len = o->u.dg.len;
	tl__dg_send_msg(&m->mh, &m->iov, &m->ctl, o, !!(h->flags & TL_HF_V6));
	io_uring_prep_sendmsg(s, h->fd, &m->mh, MSG_NOSIGNAL);
	issued(d, o, s);
	return 1;
}

void tl__ur_dg_on_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf)
{
	(void)cf;
	op_done(d, h, o, res, 0, TL_NO_LEASE);
}

int tl__ur_dg_issue_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int pooled = o->flags & TL_OPF_POOLED;
	if (pooled && !tl__drv_dgram_room(h, 1)) {
		/* At its cap: nothing more off this socket until a release
		 * brings it under (tl__ur_dg_unpaused). */
		list_del(d, o);
		list_add(d, o, ST_PAUSED);
		return 1;
	}
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	struct ur_msg *m = &d->msg[o->idx];
	m->iov.iov_base = pooled ? NULL : o->u.dg.buf;
	m->iov.iov_len = pooled ? d->lease_size : o->u.dg.len;
	tl__dg_recv_msg(&m->mh, &m->iov, &m->ctl, o);
	io_uring_prep_recvmsg(s, h->fd, &m->mh, MSG_TRUNC);
	if (pooled) {
		tl__ur_prep_pooled(s);
		tl__drv_read_armed(d->lpool, h);
	}
	issued(d, o, s);
	return 1;
}

void tl__ur_dg_on_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf)
{
	int pooled = o->flags & TL_OPF_POOLED;
	uint32_t lease = (cf & IORING_CQE_F_BUFFER) ? cf >> IORING_CQE_BUFFER_SHIFT : TL_NO_LEASE;
	if (lease != TL_NO_LEASE)
		d->br_avail--;
	UO(o)->st = ST_IDLE;
	if (pooled)
		tl__drv_read_disarmed(d->loop, d->lpool, h, res > 0 && lease != TL_NO_LEASE);
	if (res < 0) {
		if (lease != TL_NO_LEASE)
			recycle(d, lease);
		if (res == -ENOBUFS && pooled && !(o->flags & TL_OPF_CANCEL)) {
			tl__ur_park_for_buffer(d, o);
			return;
		}
		op_done(d, h, o, res, 0, TL_NO_LEASE);
		return;
	}
	struct ur_msg *m = &d->msg[o->idx];
	kernel_wrote(d, &m->mh, sizeof m->mh);
	kernel_wrote(d, &o->u.dg.addr, m->mh.msg_namelen < sizeof o->u.dg.addr
					       ? m->mh.msg_namelen : sizeof o->u.dg.addr);
	kernel_wrote(d, m->ctl.buf, m->mh.msg_controllen < sizeof m->ctl.buf
					    ? m->mh.msg_controllen : sizeof m->ctl.buf);
	uint32_t cap = pooled ? d->lease_size : o->u.dg.len;
	uint32_t n = tl__dg_recv_done(&m->mh, o, (uint32_t)res, cap);
	if (lease != TL_NO_LEASE && n == 0) {
		recycle(d, lease);
		lease = TL_NO_LEASE;
	}
	if (lease != TL_NO_LEASE) {
		tl__drv_lease_mark(d->loop, lease);
		kernel_wrote(d, d->lease_base + (size_t)lease * d->lease_size, (size_t)n);
	} else if (o->u.dg.buf) {
		kernel_wrote(d, o->u.dg.buf, (size_t)n);
	}
	if (!(o->flags & TL_OPF_MULTI)) {
		op_done(d, h, o, n, 0, lease);
		return;
	}
	tl__drv_event(d->loop, o, n, 0, lease);
	if (o->flags & TL_OPF_CANCEL)
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
	else
		list_add(d, o, ST_START);
}

void tl__ur_dg_unpaused(struct tl_drv *d, struct tl_hslot *h)
{
	for (uint32_t i = d->paused.head; i != TL_NIL;) {
		struct tl_opslot *o = OP(d, i);
		i = UO(o)->lnext;
		if (o->hidx == h->idx) {
			list_del(d, o);
			list_add(d, o, ST_START);
		}
	}
	if (d->embed)
		tl__ur_flush_embed(d);
}
