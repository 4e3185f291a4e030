/* drivers/uring/net.c: the io_uring driver's network operations: accept, connect, stream reads and writes, datagrams, descriptor passing, and asking the kernel to cancel. */
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include "sock.h"
#include "uring_int.h"

/*
 * Accept is multishot. A multishot accept that runs out of descriptors
 * (EMFILE/ENFILE) reports it as a nonterminal event and parks on the
 * fd-wait list: it goes again when the loop releases a descriptor, or after
 * FDWAIT_RETRY_NS whatever freed one (another loop, a raised limit): a slow
 * timed retry, never a busy loop.
 *
 * Writes: the write queue's head gets an SQE that also carries the writes
 * queued behind it (up to UR_GATHER iovecs), and its result is spread over
 * them in order: a short send finishes the ops it covered and re-issues the
 * rest. Sends are plain IORING_OP_SEND/SENDMSG: bench/zc_threshold.c found
 * no size at which IORING_OP_SEND_ZC costs less CPU per byte on this kind
 * of host (over loopback the kernel copies anyway, and the notification
 * makes it 1.25x to 8x dearer), so zero copy is not used.
 *
 * Stream reads are one request at a time, a try or an armed recv, each
 * taking one buffer at most, as read_policy.h decides; tl__ur_on_read tells it
 * what each CQE was and does what it answers.
 *
 * Connect gets its SQE at submit: a Unix path is only valid during submit
 * (the SQE's scratch slot keeps the address until the kernel copies it).
 *
 * Cancelling is an ASYNC_CANCEL on the op's user_data (tl__ur_cancel in
 * queue.c says which op's, and when none is needed).
 */

#define FDWAIT_RETRY_NS (100 * 1000 * 1000)

static int accept_retry(int e)
{
	return e == ECONNABORTED || e == EINTR || e == EAGAIN;
}

int tl__ur_cancel_kernel(struct tl_drv *d, struct tl_opslot *o)
{
	if (UO(o)->cancel_sent)
		return 1;
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	io_uring_prep_cancel64(s, ud_op(o), 0);
	io_uring_sqe_set_data64(s, (uint64_t)TAG_CANCEL << TAG_SHIFT);
	UO(o)->cancel_sent = 1;
	d->st.cancels++;
	return 0;
}

/* ---- issuing ---- */


void tl__ur_prep_pooled(struct io_uring_sqe *s)
{
	s->flags |= IOSQE_BUFFER_SELECT;
	s->buf_group = 0;
}

/* Advance o's iovecs by n sent bytes; returns what is left of n. */
static size_t wv_advance(struct tl_opslot *o, size_t n)
{
	while (n && o->u.wv.cur < o->u.wv.n) {
		struct iovec *v = &o->u.wv.iov[o->u.wv.cur];
		if (n < v->iov_len) {
			v->iov_base = (uint8_t *)v->iov_base + n;
			v->iov_len -= n;
			o->u.wv.off += n;
			return 0;
		}
		n -= v->iov_len;
		o->u.wv.off += v->iov_len;
		v->iov_len = 0;
		o->u.wv.cur++;
	}
	return n;
}

static int wv_done(struct tl_opslot *o)
{
	while (o->u.wv.cur < o->u.wv.n && o->u.wv.iov[o->u.wv.cur].iov_len == 0)
		o->u.wv.cur++;
	return o->u.wv.cur == o->u.wv.n;
}

/* The write queue's head (a write or a shutdown) gets an SQE that also
 * carries the writes queued behind it. */
int tl__ur_issue_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_h *e = UH(h);
	if (o->code == TL_OP_WRITE && wv_done(o)) {
		/* Nothing (left) to send: finished without the kernel. */
		list_del(d, o);
		op_done(d, h, o, (int64_t)o->u.wv.total, 0, TL_NO_LEASE);
		return 1;
	}
	if (o->code == TL_OP_SHUTDOWN) {
		/* At the head, every earlier write is out, so the FIN goes now,
		 * inline: the kernel runs IORING_OP_SHUTDOWN only on an io-wq
		 * worker (io_shutdown refuses a non-blocking attempt), which
		 * cost a thread wake-up per half-close, a tenth of a short
		 * proxied connection's CPU. shutdown(2) itself does not block. */
		int r = shutdown(h->fd, SHUT_WR) < 0 ? -errno : 0;
		list_del(d, o);
		d->st.inline_shutdowns++;
		op_done(d, h, o, r, 0, TL_NO_LEASE);
		return 1;
	}
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
	e->wn = 1;
	e->wpoll = d->polls;
	struct iovec *one = &o->u.wv.iov[o->u.wv.cur];
	uint32_t left = o->u.wv.n - o->u.wv.cur;
	if (left == 1 && (UO(o)->qnext == TL_NIL || OP(d, UO(o)->qnext)->code != TL_OP_WRITE)) {
		/* An SQE's length is 32 bits; a longer write goes on in pieces. */
		size_t len = one->iov_len < INT_MAX ? one->iov_len : INT_MAX;
		io_uring_prep_send(s, h->fd, one->iov_base, len, d->send_flags);
		io_uring_sqe_set_data64(s, ud_op(o));
		return 1;
	}
	union ur_scratch *sc = scratch_of(d, s);
	uint32_t n = 0;
	memcpy(sc->w.iov, one, left * sizeof *one);
	n = left;
	for (uint32_t i = UO(o)->qnext; i != TL_NIL;) {
		struct tl_opslot *x = OP(d, i);
		if (x->code != TL_OP_WRITE || UO(x)->st != ST_IDLE)
			break;
		uint32_t k = x->u.wv.n - x->u.wv.cur;
		if (n + k > UR_GATHER)
			break;
		memcpy(&sc->w.iov[n], &x->u.wv.iov[x->u.wv.cur], k * sizeof *one);
		n += k;
		UO(x)->st = ST_KERNEL;
		e->wn++;
		d->st.gathered++;
		i = UO(x)->qnext;
	}
	memset(&sc->w.mh, 0, sizeof sc->w.mh);
	sc->w.mh.msg_iov = sc->w.iov;
	sc->w.mh.msg_iovlen = n;
	io_uring_prep_sendmsg(s, h->fd, &sc->w.mh, (unsigned)d->send_flags);
	io_uring_sqe_set_data64(s, ud_op(o));
	return 1;
}

int tl__ur_issue_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	if (o->flags & TL_OPF_MULTI)
		io_uring_prep_multishot_accept(s, h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	else
		io_uring_prep_accept(s, h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	issued(d, o, s);
	return 1;
}

int tl__ur_issue_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int pooled = o->flags & TL_OPF_POOLED;
	if (tl_unlikely(h->flags & TL_HF_PAUSED)) {
		/* Over a cap: nothing more off this socket (lib/caps.c). */
		list_del(d, o);
		list_add(d, o, ST_PAUSED);
		return 1;
	}
	if (pooled && tl_unlikely(!tl__drv_lease_may(d->lpool, h))) {
		/* Its stream has its share of the pool and the surplus is gone
		 * (lib/caps.c): wait, as for an empty ring. */
		list_del(d, o);
		d->st.pool_waits++;
		list_add(d, o, ST_BUFWAIT);
		return 1;
	}
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	if (!pooled) {
		io_uring_prep_recv(s, h->fd, o->u.rw.buf, o->u.rw.len, 0);
	} else if (tl__rp_try(UO(o)->rp.mode) && d->nspare) {
		/* Data is probably there: receive it into a lease taken here,
		 * which spares the kernel its buffer selection, and come back
		 * with -EAGAIN rather than park a poll holding the lease. */
		uint32_t id = d->spare[--d->nspare];
		UO(o)->tlease = id;
		io_uring_prep_recv(s, h->fd, d->lease_base + (size_t)id * d->lease_size,
				   d->lease_size, MSG_DONTWAIT);
	} else {
		/* Armed: the kernel picks a buffer when data comes, one at most. */
		io_uring_prep_recv(s, h->fd, NULL, d->lease_size, 0);
		if (UO(o)->rp.pf)
			s->ioprio |= IORING_RECVSEND_POLL_FIRST;
		tl__ur_prep_pooled(s);
	}
	if (pooled)
		tl__drv_read_armed(d->lpool, h);
	issued(d, o, s);
	return 1;
}

/* Not reached: a connect's SQE is prepared at submit, and it never joins
 * the start list. Should it, a nop keeps the one-terminal rule. */
int tl__ur_issue_nop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	io_uring_prep_nop(s);
	issued(d, o, s);
	return 1;
}

int tl__ur_issue_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct sockaddr_un sun;
	unsigned len = 0;
	if (h->flags & TL_HF_UNIX) {
		int r = tl__sock_unix_addr(o->u.conn.path, &sun, &len);
		if (r < 0)
			return r;
	}
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	if (h->flags & TL_HF_UNIX) {
		union ur_scratch *sc = scratch_of(d, s);
		sc->sun = sun;
		io_uring_prep_connect(s, h->fd, (struct sockaddr *)&sc->sun, len);
	} else {
		io_uring_prep_connect(s, h->fd, &o->u.conn.addr.sa, tl_addr_len(&o->u.conn.addr));
	}
	io_uring_sqe_set_data64(s, ud_op(o));
	UO(o)->st = ST_KERNEL;
	return 0;
}

/* ---- completions ---- */

/* A multishot request the kernel ended while the op goes on. */
static void rearm(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (o->flags & TL_OPF_CANCEL) {
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return;
	}
	d->st.rearms++;
	list_add(d, o, ST_START);
}

void tl__ur_on_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		      unsigned cf)
{
	int more = cf & IORING_CQE_F_MORE, multi = o->flags & TL_OPF_MULTI;
	if (!more)
		UO(o)->st = ST_IDLE;
	if (res >= 0) {
		tl_addr peer;
		memset(&peer, 0, sizeof peer);
		if (h->flags & TL_HF_UNIX) {
			peer.sa.sa_family = AF_UNIX;
		} else {
			/* TCP_NODELAY comes from the listener (see tl__sock_open). */
			socklen_t len = sizeof peer;
			getpeername(res, &peer.sa, &len);
		}
		if (!multi)
			unqueue(d, h, o);
		if (tl__drv_accept(d->loop, o, res, &peer, !multi) < 0)
			close(res);
		if (!multi)
			kick(d, h);
		else if (!more)
			rearm(d, h, o);
		return;
	}
	int e = -res;
	if (!(o->flags & TL_OPF_CANCEL)) {
		if (multi && accept_soft(e)) {
			/* The connection stays queued in the kernel: go on when a
			 * descriptor is released (see tl__ur_retry_fdwait), not
			 * in a busy loop. */
			tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
			if (!more) {
				if (d->fdwait.head == TL_NIL)
					d->fdwait_at = tl__ur_now(d) + FDWAIT_RETRY_NS;
				list_add(d, o, ST_FDWAIT);
			}
			return;
		}
		if (accept_retry(e)) {
			if (!more)
				rearm(d, h, o);
			return;
		}
	}
	if (!more)
		op_done(d, h, o, res, 0, TL_NO_LEASE);
}

void tl__ur_read_init(struct tl_drv *d, struct tl_opslot *o)
{
	if (o->flags & TL_OPF_MULTI)
		UO(o)->rp = tl__rp_new(d->embed);
	UO(o)->tlease = TL_NO_LEASE;
}

/* Do what the read policy answered for stream read o (read_policy.h). */
static inline void rp_do(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o,
			 struct tl_rp_step s)
{
	struct ur_o *u = UO(o);
	if (tl_unlikely(s.rp.mode != u->rp.mode)) {
		if (s.rp.mode == TL_RP_SLOW)
			d->st.slow_reads++;
		else if (u->rp.mode == TL_RP_SLOW)
			d->st.slow_retries++;
	}
	u->rp = s.rp;
	if (s.act == TL_RP_GO_ON)
		return;
	if (o->flags & TL_OPF_CANCEL) { /* the host's: it ends instead */
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return;
	}
	if (s.act == TL_RP_ISSUE)
		list_add(d, o, ST_START);
	else if (s.act == TL_RP_HOLD)
		list_add(d, o, ST_LATER);
	else
		list_add(d, o, ST_DEFER);
}

void tl__ur_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	struct ur_h *e = UH(h);
	if (!paused && tl_unlikely(e->spl != TL_NIL))
		tl__ur_splice_unpaused(d, h);
	/* Paused: a request in the kernel completes (with one buffer at most,
	 * read_policy.h); the next one parks at issue. */
	if (!paused && h->type == TL_H_UDP) {
		tl__ur_dg_unpaused(d, h);
		return;
	}
	if (paused || e->rhead == TL_NIL)
		return;
	struct tl_opslot *o = OP(d, e->rhead);
	if (o->code == TL_OP_READ && UO(o)->st == ST_PAUSED) {
		list_del(d, o);
		list_add(d, o, ST_START);
	}
}

/* The most one recv of stream read o can return. */
static uint32_t read_cap(const struct tl_drv *d, const struct tl_opslot *o)
{
	return (o->flags & TL_OPF_POOLED) ? d->lease_size : o->u.rw.len;
}

int tl__ur_sort_reads(struct tl_drv *d)
{
	list_restart(d, &d->defer);
	while (d->later.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->later.head);
		struct tl_hslot *h = HS(d, o->hidx);
		list_del(d, o);
		int answered = UH(h)->whead != TL_NIL;
		if (answered)
			d->st.deferred_reads++;
		else
			d->st.fed_reads++;
		rp_do(d, h, o,
		      tl__rp_step(UO(o)->rp, answered ? TL_RP_EV_ANSWERED : TL_RP_EV_UNANSWERED));
	}
	return d->defer.head != TL_NIL;
}

/* A stream read's CQE: the leases, tries and the stream's share of the pool
 * are kept here, and what comes next is the policy's answer. Every request
 * is one-shot (read_policy.h): this is its end. */
void tl__ur_on_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf)
{
	struct ur_o *u = UO(o);
	int pooled = o->flags & TL_OPF_POOLED;
	uint32_t lease = (cf & IORING_CQE_F_BUFFER) ? cf >> IORING_CQE_BUFFER_SHIFT : TL_NO_LEASE;
	if (lease != TL_NO_LEASE)
		d->br_avail--;
	u->st = ST_IDLE;
	if (u->tlease != TL_NO_LEASE) { /* a try */
		lease = u->tlease;
		u->tlease = TL_NO_LEASE;
		if (res == -EAGAIN) {
			recycle(d, lease);
			tl__drv_read_disarmed(d->loop, d->lpool, h, 0);
			d->st.read_tries_missed++;
			rp_do(d, h, o, tl__rp_step(u->rp, TL_RP_EV_MISS));
			return;
		}
		if (res > 0)
			u->rp = tl__rp_step(u->rp, TL_RP_EV_HIT).rp;
	}
	if (pooled)
		tl__drv_read_disarmed(d->loop, d->lpool, h, res > 0 && lease != TL_NO_LEASE);
	if (res > 0) {
		if (lease != TL_NO_LEASE) {
			tl__drv_lease_mark(d->loop, lease);
			kernel_wrote(d, d->lease_base + (size_t)lease * d->lease_size, (size_t)res);
		} else {
			kernel_wrote(d, o->u.rw.buf, (size_t)res);
		}
		if (!(o->flags & TL_OPF_MULTI)) {
			op_done(d, h, o, res, 0, lease);
			return;
		}
		tl__drv_event(d->loop, o, res, 0, lease);
		struct tl_rp rp = u->rp;
		if (rp.mode == TL_RP_SLOW) /* how soon after the stream's last send? */
			rp = tl__rp_step(rp, tl__rp_gap(d->polls - UH(h)->wpoll)).rp;
		rp_do(d, h, o,
		      tl__rp_step(rp, (uint32_t)res >= read_cap(d, o) ? TL_RP_EV_FULL
								   : TL_RP_EV_SHORT));
		return;
	}
	if (lease != TL_NO_LEASE)
		recycle(d, lease);
	if (res == -ENOBUFS && pooled && !(o->flags & TL_OPF_CANCEL)) {
		tl__ur_park_for_buffer(d, o);
		return;
	}
	op_done(d, h, o, res, res == 0 ? TL_F_EOF : 0, TL_NO_LEASE);
}

void tl__ur_on_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf)
{
	UH(h)->connecting = 0;
	op_done(d, h, o, res, 0, TL_NO_LEASE);
}

/* The write SQE of h's queue head came back: spread its bytes over the ops
 * it covered, in order; finish those fully sent, keep the rest queued. */
void tl__ur_on_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *head, int res,
		     unsigned cf)
{
	struct ur_h *e = UH(h);
	uint32_t covered = e->wn;
	e->wn = 0;
	size_t n = res > 0 ? (size_t)res : 0;
	int err = res < 0 && res != -EAGAIN && res != -EINTR ? res : 0;
	/* -ECANCELED because another covered op was cancelled is no error of
	 * the ops that were not. */
	if (err == -ECANCELED) {
		uint32_t i = e->whead;
		for (uint32_t k = 0; k < covered && i != TL_NIL; k++, i = UO(OP(d, i))->qnext)
			if (OP(d, i)->flags & TL_OPF_CANCEL)
				err = 0;
	}
	int shortened = 0;
	uint32_t i = e->whead;
	for (uint32_t k = 0; k < covered && i != TL_NIL; k++) {
		struct tl_opslot *o = OP(d, i);
		i = UO(o)->qnext;
		UO(o)->st = ST_IDLE;
		UO(o)->cancel_sent = 0;
		n = wv_advance(o, n);
		if (wv_done(o)) {
			unqueue(d, h, o);
			tl__drv_event(d->loop, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
			continue;
		}
		shortened = 1;
		if (err) {
			unqueue(d, h, o);
			tl__drv_event(d->loop, o, err, TL_F_TERMINAL, TL_NO_LEASE);
			err = 0;
		} else if (o->flags & TL_OPF_CANCEL) {
			unqueue(d, h, o);
			tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
		}
	}
	if (shortened && res > 0)
		d->st.short_sends++;
	kick(d, h);
}

/* ---- descriptor passing (Unix-domain streams) ---- */

/* A send of descriptors is its own SQE at the head of the write queue,
 * never gathered with the writes around it. Its descriptors go with the
 * first sendmsg; what a short send left goes on as plain bytes. No
 * MSG_WAITALL: the kernel's own retry of a short send would be ours to
 * follow, and the control data must go once. */
int tl__ur_issue_send_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	struct ur_fdmsg *m = &d->fdm[o->idx];
	memset(&m->mh, 0, sizeof m->mh);
	m->iov.iov_base = o->u.fd.buf + o->u.fd.done;
	m->iov.iov_len = o->u.fd.len - o->u.fd.done;
	m->mh.msg_iov = &m->iov;
	m->mh.msg_iovlen = 1;
	if (!o->u.fd.done) {
		m->mh.msg_control = m->ctl.buf;
		m->mh.msg_controllen = tl__sock_fds_ctl(&m->ctl, o->u.fd.fds, o->u.fd.nfds);
	}
	io_uring_prep_sendmsg(s, h->fd, &m->mh, MSG_NOSIGNAL);
	UH(h)->wpoll = d->polls;
	issued(d, o, s);
	return 1;
}

void tl__ur_on_send_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf)
{
	UO(o)->st = ST_IDLE;
	if (res > 0) {
		o->u.fd.done += (uint32_t)res;
		if (o->u.fd.done == o->u.fd.len) {
			op_done(d, h, o, o->u.fd.len, 0, TL_NO_LEASE);
			return;
		}
	} else if (res != 0 && res != -EAGAIN && res != -EINTR) {
		op_done(d, h, o, res, 0, TL_NO_LEASE);
		return;
	}
	if (o->flags & TL_OPF_CANCEL) {
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return;
	}
	kick(d, h); /* the rest of the payload */
}

int tl__ur_issue_recv_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	struct ur_fdmsg *m = &d->fdm[o->idx];
	memset(&m->mh, 0, sizeof m->mh);
	m->iov.iov_base = o->u.fd.buf;
	m->iov.iov_len = o->u.fd.len;
	m->mh.msg_iov = &m->iov;
	m->mh.msg_iovlen = 1;
	m->mh.msg_control = m->ctl.buf;
	m->mh.msg_controllen = sizeof m->ctl.buf;
	io_uring_prep_recvmsg(s, h->fd, &m->mh, MSG_CMSG_CLOEXEC);
	issued(d, o, s);
	return 1;
}

/* The kernel installed the descriptors when it ran the recvmsg: they are
 * reported with the bytes, cancelled or not (the core hands them out or
 * closes them), never dropped here. */
void tl__ur_on_recv_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf)
{
	UO(o)->st = ST_IDLE;
	if (res < 0) {
		op_done(d, h, o, res, 0, TL_NO_LEASE);
		return;
	}
	struct ur_fdmsg *m = &d->fdm[o->idx];
	kernel_wrote(d, &m->mh, sizeof m->mh);
	kernel_wrote(d, m->ctl.buf,
		     m->mh.msg_controllen < sizeof m->ctl.buf ? m->mh.msg_controllen
							 : sizeof m->ctl.buf);
	kernel_wrote(d, o->u.fd.buf, (size_t)res);
	int got = tl__sock_take_fds(&m->mh, o->u.fd.fds, o->u.fd.nfds);
	if (got < 0) {
		op_done(d, h, o, got, 0, TL_NO_LEASE);
		return;
	}
	o->u.fd.got = (uint32_t)got;
	op_done(d, h, o, res, res == 0 ? TL_F_EOF : 0, TL_NO_LEASE);
}
