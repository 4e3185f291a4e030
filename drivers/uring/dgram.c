/* drivers/uring/dgram.c: the io_uring driver's datagrams: sendmsg and recvmsg with their control data, a multishot receive with several recvmsg in the kernel at once, and the lease cap held by construction. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "uring_int.h"

/*
 * Every datagram request of the loop goes to the kernel in the one enter of
 * the next poll, whatever the handle, so sends queued in a turn and the
 * receives of every socket share a system call.
 *
 * A one-shot receive is one recvmsg (into the op's buffer, or taking one
 * buffer at most from the provided-buffer ring), its msghdr in the op's
 * slot of d->msg.
 *
 * A multishot receive (tl_udp_recv_start) keeps several recvmsg requests in
 * the kernel at once, as many as its receive depth (below, 2 to
 * TL_DG_BATCH), each taking one buffer at most and
 * each with its own receive slot (msghdr, source, control data) from a pool
 * sized at setup, named in its user_data. It has no more in the kernel than
 * h's lease cap leaves (tl__drv_dgram_room counts each as armed), so h never
 * holds more leases than its cap: by construction, not by a check after the
 * fact. When one completes, its datagram is delivered and the op tops up
 * again from the CQE handler, staying in the kernel (ST_KERNEL) for as long
 * as any request of it is there; with none there and no room it waits on
 * the paused list for a release. The requests of one socket complete in
 * the order they took datagrams (each dequeues one under the socket's
 * lock, and their completions are posted by this task in that order), so
 * datagrams are delivered in order of arrival.
 *
 * The kernel's own multishot recvmsg is not used: it takes buffers from the
 * shared ring for as long as datagrams come, and no limit of one socket's
 * can be set on it, so a flood on one handle would drain the pool past its
 * cap.
 */

#define RX_SHIFT 40 /* receive slot + 1 in user_data (uring_int.h) */

/*
 * The receive depth: how many recvmsg requests a multishot receive keeps
 * in the kernel. Each datagram wakes every request waiting on its socket
 * and one takes it, so every request past the first costs a wake-up (task
 * work, a poll re-armed) per datagram; with too few, a turn takes no more
 * of a socket's queued datagrams than there are requests. A receive starts
 * at DEPTH_MIN; a poll whose completions brought it a datagram for every
 * request it had in the kernel doubles its depth (its socket may hold
 * more), up to TL_DG_BATCH, and one that brought it fewer than half halves
 * it, down to DEPTH_MIN. A socket taking one datagram at a time (a UDP
 * session's reply) so keeps two requests, and a busy listening socket up
 * to 16. Measured: 16 requests on each of a DNS proxy's 65 sockets cost
 * 1.3x the CPU per query of a bare recvmmsg forwarder, two on each about
 * the same (docs/PERFORMANCE.md, issue 25).
 */
#define DEPTH_MIN 2

/* A datagram came to socket x's receive (rx_n requests of it in the
 * kernel) in this poll's reap: judge the last reap that brought it any once
 * a later one begins. */
static void depth_seen(struct tl_drv *d, struct ur_h *u, uint32_t rx_n)
{
	uint32_t seq = (uint32_t)d->polls;
	if (u->rx_seq != seq) {
		if (u->rx_got && u->rx_got >= u->rx_armed)
			u->rx_depth = u->rx_depth * 2 > TL_DG_BATCH ? TL_DG_BATCH : u->rx_depth * 2;
		else if (2u * u->rx_got < u->rx_armed)
			u->rx_depth = u->rx_depth / 2 < DEPTH_MIN ? DEPTH_MIN : u->rx_depth / 2;
		u->rx_seq = seq;
		u->rx_got = 0;
		/* every request it has now was in the kernel when the reap began */
		u->rx_armed = (uint8_t)rx_n;
	}
	u->rx_got++;
}

int tl__ur_dg_init(struct tl_drv *d)
{
	/* One slot per lease at most (each request may take one), and no
	 * more than user_data's 16 bits name. */
	uint32_t n = d->lease_count < 4096 ? d->lease_count : 4096;
	if (n < 1)
		n = 1;
	d->rx = calloc(n, sizeof *d->rx);
	d->rx_owner = malloc(n * sizeof *d->rx_owner);
	d->rx_free = malloc(n * sizeof *d->rx_free);
	if (!d->rx || !d->rx_owner || !d->rx_free)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		d->rx_owner[i] = TL_NIL;
		d->rx_free[i] = (uint16_t)(n - 1 - i);
	}
	d->rx_count = d->rx_nfree = n;
	return 0;
}

void tl__ur_dg_exit(struct tl_drv *d)
{
	free(d->rx);
	free(d->rx_owner);
	free(d->rx_free);
}

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

/* A one-shot receive: one recvmsg, its msghdr in the op's slot. */
static int issue_one(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
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

/* Put as many receives of multishot o in the kernel as h's cap, the batch
 * and the free slots leave; returns how many were added. */
static uint32_t arm(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	uint32_t depth = UH(h)->rx_depth;
	uint32_t want = u->rx_n < depth ? tl__drv_dgram_room(h, depth - u->rx_n) : 0;
	uint32_t k = 0;
	for (; k < want && d->rx_nfree; k++) {
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			break;
		uint16_t i = d->rx_free[--d->rx_nfree];
		struct ur_msg *m = &d->rx[i];
		d->rx_owner[i] = o->idx;
		m->iov.iov_base = NULL;
		m->iov.iov_len = d->lease_size;
		memset(&m->mh, 0, sizeof m->mh);
		m->mh.msg_name = &m->addr;
		m->mh.msg_namelen = sizeof m->addr;
		m->mh.msg_iov = &m->iov;
		m->mh.msg_iovlen = 1;
		m->mh.msg_control = m->ctl.buf;
		m->mh.msg_controllen = sizeof m->ctl.buf;
		io_uring_prep_recvmsg(s, h->fd, &m->mh, MSG_TRUNC);
		tl__ur_prep_pooled(s);
		io_uring_sqe_set_data64(s, ud_op(o) | (uint64_t)(i + 1u) << RX_SHIFT);
		tl__drv_read_armed(d->lpool, h);
		u->rx_n++;
	}
	return k;
}

int tl__ur_dg_issue_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (!(o->flags & TL_OPF_MULTI))
		return issue_one(d, h, o);
	struct ur_o *u = UO(o);
	u->rx_n = 0;
	u->rx_err = 0;
	struct ur_h *x = UH(h);
	if (x->rx_depth < DEPTH_MIN) {
		/* the socket's first multishot receive */
		x->rx_depth = DEPTH_MIN;
		x->rx_got = x->rx_armed = 0;
		x->rx_seq = (uint32_t)d->polls - 1;
	}
	if (!arm(d, h, o)) {
		if (tl__drv_dgram_room(h, 1) && d->rx_nfree)
			return 0; /* no SQE: the next poll tries again */
		/* At its cap (or every slot in use): a release brings it back
		 * (tl__ur_dg_unpaused). */
		list_del(d, o);
		list_add(d, o, ST_PAUSED);
		return 1;
	}
	list_del(d, o);
	u->st = ST_KERNEL;
	return 1;
}

/* The datagram (or error) res with CQE flags cf that a recvmsg through m
 * received for o: its source, control data and lease. Returns the bytes in
 * the buffer (0 for an error) and sets *lease. */
static uint32_t took(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, struct ur_msg *m,
		     int res, unsigned cf, uint32_t *lease)
{
	int pooled = o->flags & TL_OPF_POOLED;
	uint32_t ls = (cf & IORING_CQE_F_BUFFER) ? cf >> IORING_CQE_BUFFER_SHIFT : TL_NO_LEASE;
	if (ls != TL_NO_LEASE)
		d->br_avail--;
	if (pooled)
		tl__drv_read_disarmed(d->loop, d->lpool, h, res > 0 && ls != TL_NO_LEASE);
	*lease = TL_NO_LEASE;
	if (res < 0) {
		if (ls != TL_NO_LEASE)
			recycle(d, ls);
		return 0;
	}
	kernel_wrote(d, &m->mh, sizeof m->mh);
	kernel_wrote(d, m->mh.msg_name, m->mh.msg_namelen < sizeof(tl_addr)
						? m->mh.msg_namelen : sizeof(tl_addr));
	kernel_wrote(d, m->ctl.buf, m->mh.msg_controllen < sizeof m->ctl.buf
					    ? m->mh.msg_controllen : sizeof m->ctl.buf);
	if (m->mh.msg_name != &o->u.dg.addr)
		o->u.dg.addr = m->addr;
	uint32_t cap = pooled ? d->lease_size : o->u.dg.len;
	uint32_t n = tl__dg_recv_done(&m->mh, o, (uint32_t)res, cap);
	if (ls != TL_NO_LEASE && n == 0) {
		recycle(d, ls);
		ls = TL_NO_LEASE;
	}
	if (ls != TL_NO_LEASE) {
		tl__drv_lease_mark(d->loop, ls);
		kernel_wrote(d, d->lease_base + (size_t)ls * d->lease_size, (size_t)n);
	} else if (o->u.dg.buf) {
		kernel_wrote(d, o->u.dg.buf, (size_t)n);
	}
	*lease = ls;
	return n;
}

/*
 * One of multishot o's requests (slot i) came back. Each datagram wakes
 * every request of the socket and only one takes it; the kernel re-arms a
 * request's poll after such an empty wake-up a bounded number of times
 * (APOLL_MAX_RETRY), then runs it on a worker, where a nonblocking socket
 * answers -EAGAIN. That is no error of the socket: the request is replaced
 * by a fresh one (its budget of wake-ups full again).
 */
static void on_multi(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, uint32_t i,
		     int res, unsigned cf)
{
	struct ur_o *u = UO(o);
	uint32_t lease;
	if (res >= 0)
		depth_seen(d, UH(h), u->rx_n); /* before rx_n counts this one out */
	uint32_t n = took(d, h, o, &d->rx[i], res, cf, &lease);
	d->rx_owner[i] = TL_NIL;
	d->rx_free[d->rx_nfree++] = (uint16_t)i;
	u->rx_n--;
	if (res >= 0)
		tl__drv_event(d->loop, o, n, 0, lease);
	else if (res == -EAGAIN)
		; /* see below: a fresh request takes its place */
	else if (res != -ENOBUFS && res != -ECANCELED && !u->rx_err) {
		/* It ends with this error once the others are back. */
		u->rx_err = (int16_t)res;
		tl__ur_dg_cancel(d, h, o);
	}
	if (u->rx_n)
		return;
	if ((o->flags & TL_OPF_CANCEL) || u->rx_err) {
		op_done(d, h, o, u->rx_err ? u->rx_err : -ECANCELED, 0, TL_NO_LEASE);
		return;
	}
	if (res == -ENOBUFS) {
		/* The ring ran dry: wait for a buffer rather than spin. */
		u->st = ST_IDLE;
		tl__ur_park_for_buffer(d, o);
		return;
	}
	if (!arm(d, h, o)) {
		u->st = ST_IDLE;
		list_add(d, o, tl__drv_dgram_room(h, 1) && d->rx_nfree ? ST_START : ST_PAUSED);
	}
}

void tl__ur_dg_on_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf)
{
	uint32_t slot = (uint32_t)(d->cqe_ud >> RX_SHIFT) & 0xffffu;
	if (slot) {
		on_multi(d, h, o, slot - 1, res, cf);
		if (res != -ENOBUFS && UO(o)->st == ST_KERNEL && UO(o)->rx_n < UH(h)->rx_depth &&
		    !(o->flags & TL_OPF_CANCEL) && !UO(o)->rx_err)
			arm(d, h, o); /* top up: each datagram taken makes room */
		return;
	}
	int pooled = o->flags & TL_OPF_POOLED;
	UO(o)->st = ST_IDLE;
	uint32_t lease;
	uint32_t n = took(d, h, o, &d->msg[o->idx], res, cf, &lease);
	if (res < 0) {
		if (res == -ENOBUFS && pooled && !(o->flags & TL_OPF_CANCEL)) {
			tl__ur_park_for_buffer(d, o);
			return;
		}
		op_done(d, h, o, res, 0, TL_NO_LEASE);
		return;
	}
	op_done(d, h, o, n, 0, lease);
}

/* Cancel o: a multishot receive in the kernel asks the kernel to cancel
 * each of its requests; its terminal comes when the last is back. */
int tl__ur_dg_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	if (u->st != ST_KERNEL) {
		list_del(d, o);
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return 0;
	}
	if (!(o->flags & TL_OPF_MULTI))
		return tl__ur_cancel_sqe(d, o);
	uint32_t left = u->rx_n;
	for (uint32_t i = 0; i < d->rx_count && left; i++) {
		if (d->rx_owner[i] != o->idx)
			continue;
		left--;
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			return -ENOBUFS;
		io_uring_prep_cancel64(s, ud_op(o) | (uint64_t)(i + 1u) << RX_SHIFT, 0);
		io_uring_sqe_set_data64(s, (uint64_t)TAG_CANCEL << TAG_SHIFT);
		d->st.cancels++;
	}
	if (d->embed)
		tl__ur_flush_embed(d);
	return 0;
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
