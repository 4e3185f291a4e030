/* drivers/epoll/ops.c: the epoll driver's operations, run in submission order per direction when the socket is ready. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "epoll_int.h"

/* ---- per-direction op queues ---- */

void tl__ep_q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	EO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		EO(tl__drv_op(l, *tail))->qnext = o->idx;
	*tail = o->idx;
}

void tl__ep_q_pop(tl_loop *l, uint32_t *head, uint32_t *tail)
{
	struct tl_opslot *o = tl__drv_op(l, *head);
	*head = EO(o)->qnext;
	if (*head == TL_NIL)
		*tail = TL_NIL;
}

int tl__ep_q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = *head; i != TL_NIL; prev = i, i = EO(tl__drv_op(l, i))->qnext) {
		if (i != o->idx)
			continue;
		uint32_t next = EO(o)->qnext;
		if (prev == TL_NIL)
			*head = next;
		else
			EO(tl__drv_op(l, prev))->qnext = next;
		if (*tail == i)
			*tail = prev;
		return 1;
	}
	return 0;
}



/* ---- running operations ---- */

/* 1: the op finished (popped), 0: it waits (readiness, room or a lease). */
static int run_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	int multi = o->flags & TL_OPF_MULTI;
	for (;;) {
		if (multi && !tl__drv_room(l)) {
			tl__ep_mark_ready(d, h);
			return 0;
		}
		tl_addr peer;
		socklen_t len = sizeof peer;
		int fd = accept4(h->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EAGAIN || e == EWOULDBLOCK) {
				EH(h)->readable = 0;
				return 0;
			}
			if (e == EINTR || e == ECONNABORTED)
				continue;
			if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
				/* The pending connection stays queued; retry when a
				 * descriptor is released, not in a busy loop. */
				if (!EH(h)->emfile) {
					EH(h)->emfile = 1;
					if (!d->nemfile)
						d->emfile_retry_at = tl__ep_now(d) + EMFILE_RETRY_NS;
					d->emfile[d->nemfile++] = h->idx;
				}
				tl__drv_event(l, o, -e, multi ? 0 : TL_F_TERMINAL, TL_NO_LEASE);
				return !multi;
			}
			tl__drv_event(l, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		/* TCP options (TCP_NODELAY, ...) come from the listener. */
		if (h->flags & TL_HF_UNIX)
			memset(&peer, 0, sizeof peer), peer.sa.sa_family = AF_UNIX;
		if (tl__drv_accept(l, o, fd, &peer, !multi) < 0)
			close(fd);
		if (!multi || !(o->flags & TL_OPF_LIVE))
			return 1;
		if (o->flags & TL_OPF_CANCEL)
			return 0;
	}
}

/* Take a pooled buffer for a read or receive on h. None free, or none a
 * stream may take now (its share of the pool, lib/caps.c): park h on the
 * lease-wait list (lease_returned resumes it; a shortage is never an error
 * to the host) and return TL_NO_LEASE. */
uint32_t tl__ep_take_lease(struct tl_drv *d, struct tl_hslot *h, uint8_t **buf, uint32_t *len)
{
	uint32_t cnt, lease = TL_NO_LEASE;
	if (h->type != TL_H_STREAM || tl__drv_lease_may(tl__drv_lease_pool(d->loop), h))
		lease = tl__drv_lease_take(d->loop);
	if (lease == TL_NO_LEASE) {
		if (!EH(h)->lease_wait) {
			EH(h)->lease_wait = 1;
			d->lwait[d->nlwait++] = h->idx;
		}
		return TL_NO_LEASE;
	}
	*buf = tl__drv_lease_base(d->loop, len, &cnt) + (size_t)lease * *len;
	return lease;
}

static int run_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	int multi = o->flags & TL_OPF_MULTI;
	while (EH(h)->readable) {
		/* Over a cap (lib/caps.c): the bytes stay in the socket; ep_pause
		 * runs the read again when the stream is under its caps. */
		if (h->flags & TL_HF_PAUSED)
			return 0;
		if (multi && !tl__drv_room(l)) {
			tl__ep_mark_ready(d, h);
			return 0;
		}
		uint32_t lease = TL_NO_LEASE, len;
		uint8_t *buf;
		if (o->flags & TL_OPF_POOLED) {
			lease = tl__ep_take_lease(d, h, &buf, &len);
			if (lease == TL_NO_LEASE)
				return 0;
		} else {
			buf = o->u.rw.buf;
			len = o->u.rw.len;
		}
		ssize_t n = ep_read(h->fd, buf, len);
		if (n > 0) {
			if ((size_t)n < len && !EH(h)->peer_end && !EH(h)->fdpass)
				EH(h)->readable = 0;
			tl__drv_event(l, o, n, multi ? 0 : TL_F_TERMINAL, lease);
			if (!multi)
				return 1;
			continue;
		}
		if (lease != TL_NO_LEASE)
			tl__drv_lease_drop(l, lease);
		if (n == 0) {
			tl__drv_event(l, o, 0, TL_F_TERMINAL | TL_F_EOF, TL_NO_LEASE);
			return 1;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			EH(h)->readable = 0;
			return 0;
		}
		if (errno == EINTR)
			continue;
		tl__drv_event(l, o, -errno, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	return 0;
}

static int run_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct msghdr mh = {0};
	for (;;) {
		struct iovec *v0 = &o->u.wv.iov[o->u.wv.cur];
		ssize_t n;
		/* One buffer left goes by send(2): the kernel then copies in no
		 * msghdr and no iovec array, and costs what write(2) does. */
		if (o->u.wv.n - o->u.wv.cur == 1) {
			n = ep_send(h->fd, v0->iov_base, v0->iov_len, MSG_NOSIGNAL);
		} else {
			mh.msg_iov = v0;
			mh.msg_iovlen = o->u.wv.n - o->u.wv.cur;
			n = ep_sendmsg(h->fd, &mh, MSG_NOSIGNAL);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				EH(h)->writable = 0;
				return 0;
			}
			tl__drv_event(d->loop, o, -errno, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		o->u.wv.off += (size_t)n;
		/* Advance through the copied iovecs; the caller's stay untouched. */
		while (n > 0 && o->u.wv.cur < o->u.wv.n) {
			struct iovec *v = &o->u.wv.iov[o->u.wv.cur];
			if ((size_t)n >= v->iov_len) {
				n -= (ssize_t)v->iov_len;
				o->u.wv.cur++;
			} else {
				v->iov_base = (uint8_t *)v->iov_base + n;
				v->iov_len -= (size_t)n;
				n = 0;
			}
		}
		while (o->u.wv.cur < o->u.wv.n && o->u.wv.iov[o->u.wv.cur].iov_len == 0)
			o->u.wv.cur++;
		if (o->u.wv.cur == o->u.wv.n) {
			tl__drv_event(d->loop, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		/* A short write means the send buffer is full: wait for an edge. */
		EH(h)->writable = 0;
		return 0;
	}
}

/* tl_try_write: the send run_write would make for a write at the queue's
 * empty head, with nothing queued or reported. */
int64_t tl__ep_try_write(struct tl_drv *d, struct tl_hslot *h, const void *buf, uint32_t len)
{
	struct ep_h *e = EH(h);
	(void)d;
	if (e->whead != TL_NIL || !e->writable || e->connecting)
		return -EAGAIN;
	for (;;) {
		ssize_t n = ep_send(h->fd, buf, len, MSG_NOSIGNAL);
		if (n >= 0) {
			if ((size_t)n < len)
				e->writable = 0; /* full: the rest waits for an edge */
			return n ? n : -EAGAIN;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			e->writable = 0;
			return -EAGAIN;
		}
		return -errno;
	}
}

/* Descriptors go with the first sendmsg that moves bytes; the rest of the
 * payload follows as plain bytes (a short send is continued like a write). */
static int run_send_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	union tl__fds_ctl ctl;
	for (;;) {
		struct iovec v = {o->u.fd.buf + o->u.fd.done, o->u.fd.len - o->u.fd.done};
		struct msghdr mh = {.msg_iov = &v, .msg_iovlen = 1};
		if (!o->u.fd.done) {
			mh.msg_control = ctl.buf;
			mh.msg_controllen = tl__sock_fds_ctl(&ctl, o->u.fd.fds, o->u.fd.nfds);
		}
		ssize_t n = sendmsg(h->fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				EH(h)->writable = 0;
				return 0;
			}
			tl__drv_event(d->loop, o, -errno, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		o->u.fd.done += (uint32_t)n;
		if (o->u.fd.done == o->u.fd.len) {
			tl__drv_event(d->loop, o, o->u.fd.len, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		EH(h)->writable = 0;
		return 0;
	}
}

/* A Unix stream's receive ends after bytes that carry descriptors, with
 * more bytes possibly waiting behind them: on such a stream a short read
 * no longer means drained (fdpass), or the rest would wait for an edge
 * that never comes. */
static int run_recv_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	union tl__fds_ctl ctl;
	struct iovec v = {o->u.fd.buf, o->u.fd.len};
	struct msghdr mh = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof ctl.buf};
	ssize_t n;
	do
		n = recvmsg(h->fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			EH(h)->readable = 0;
			return 0;
		}
		tl__drv_event(d->loop, o, -errno, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	int got = tl__sock_take_fds(&mh, o->u.fd.fds, o->u.fd.nfds);
	if (got < 0) {
		tl__drv_event(d->loop, o, got, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	o->u.fd.got = (uint32_t)got;
	tl__drv_event(d->loop, o, n, TL_F_TERMINAL | (n == 0 ? TL_F_EOF : 0), TL_NO_LEASE);
	return 1;
}

static int run_connect_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int err = 0;
	socklen_t len = sizeof err;
	if (getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	EH(h)->connecting = 0;
	tl__drv_event(d->loop, o, -err, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* ---- splices (driver.h; the rules are tl_splice()'s) ----
 *
 * A splice waits at the head of dst's write queue, so it runs when dst is
 * writable; it then needs its source readable (and not paused) too, and
 * parks on the source (ep_h.spl) until an edge or pause(0) there runs dst
 * again. It takes from the source once, with splice(2) into its pipe, and
 * writes the pipe out until done or EAGAIN. */

static int run_sendfile(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	while (o->u.sp.moved < o->u.sp.max) {
		size_t left = o->u.sp.max - o->u.sp.moved;
		ssize_t n = tl__sendfile_out(h->fd, o->u.sp.file, &o->u.sp.off, left);
		if (n == -EAGAIN) {
			EH(h)->writable = 0;
			return 0;
		}
		if (n < 0) {
			tl__drv_event(l, o, n, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		if (n == 0) { /* the file ended first */
			tl__drv_event(l, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL | TL_F_EOF,
				      TL_NO_LEASE);
			return 1;
		}
		tl__drv_splice_io(l, o, 0, (uint32_t)n);
		/* Short: the socket is full, or the file ends; the next call
		 * says which. */
	}
	tl__drv_event(l, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* 1: the splice reported its terminal; 0: it waits. */
static int run_splice(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	if (o->u.sp.file >= 0)
		return run_sendfile(d, h, o);
	if (o->u.sp.src != TL_NIL) {
		struct tl_hslot *s = tl__drv_handle(l, o->u.sp.src);
		struct ep_h *se = EH(s);
		if (!se->readable || (s->flags & TL_HF_PAUSED)) {
			se->spl = o->idx;
			return 0;
		}
		size_t want = o->u.sp.max < o->u.sp.pipe_size ? o->u.sp.max : o->u.sp.pipe_size;
		ssize_t n = tl__splice_in(s->fd, o->u.sp.wfd, want);
		if (n == -EAGAIN) {
			se->readable = 0;
			se->spl = o->idx;
			return 0;
		}
		se->spl = TL_NIL;
		if (n <= 0) {
			tl__drv_event(l, o, n, TL_F_TERMINAL | (n == 0 ? TL_F_EOF : 0), TL_NO_LEASE);
			return 1;
		}
		/* Unlike a short read, a short splice does not mean the socket
		 * was drained: the pipe may have run out of slots first (one per
		 * received segment). Only EAGAIN says so. */
		tl__drv_splice_io(l, o, (uint32_t)n, 0);
		tl__drv_splice_src_done(l, o);
	}
	while (o->u.sp.moved < o->u.sp.taken) {
		if (!EH(h)->writable)
			return 0;
		size_t left = o->u.sp.taken - o->u.sp.moved;
		ssize_t n = tl__splice_out(o->u.sp.rfd, h->fd, left);
		if (n == -EAGAIN) {
			EH(h)->writable = 0;
			return 0;
		}
		if (n <= 0) {
			tl__drv_event(l, o, n < 0 ? n : -EIO, TL_F_TERMINAL, TL_NO_LEASE);
			return 1;
		}
		/* Short or not, go on: EAGAIN tells when the socket is full. */
		tl__drv_splice_io(l, o, 0, (uint32_t)n);
	}
	tl__drv_event(l, o, (int64_t)o->u.sp.moved, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* h may have become readable or unpaused: the stream whose splice waits
 * to read h, if it can go on now (NULL otherwise). */
struct tl_hslot *tl__ep_splice_waiter(struct tl_drv *d, struct tl_hslot *h)
{
	struct ep_h *e = EH(h);
	if (tl_likely(e->spl == TL_NIL) || !e->readable || (h->flags & TL_HF_PAUSED))
		return NULL;
	struct tl_opslot *o = tl__drv_op(d->loop, e->spl);
	e->spl = TL_NIL;
	return tl__drv_handle(d->loop, o->hidx);
}

/* cancel() of a splice (driver.h): one with bytes in its pipe flushes them
 * unless dst is closing; anything else ends now (nothing is in the kernel). */
int tl__ep_splice_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ep_h *e = EH(h);
	if (o->u.sp.file < 0 && o->u.sp.moved < o->u.sp.taken && !(h->flags & TL_HF_CLOSING) &&
	    !(o->flags & TL_OPF_TIMEDOUT))
		return 0;
	if (!tl__ep_q_remove(d->loop, &e->whead, &e->wtail, o))
		return -ENOENT;
	if (o->u.sp.src != TL_NIL) {
		struct tl_hslot *s = tl__drv_handle(d->loop, o->u.sp.src);
		if (EH(s)->spl == o->idx)
			EH(s)->spl = TL_NIL;
	}
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	if (e->writable && e->whead != TL_NIL)
		tl__ep_mark_ready(d, h);
	return 0;
}

int tl__ep_run_wop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	switch (o->code) {
	case TL_OP_CONNECT:
		return run_connect_done(d, h, o);
	case TL_OP_WRITE:
		return run_write(d, h, o);
	case TL_OP_SEND:
		return tl__ep_run_send(d, h, o);
	case TL_OP_SEND_FDS:
		return run_send_fds(d, h, o);
	case TL_OP_SPLICE:
		return run_splice(d, h, o);
	case TL_OP_SHUTDOWN:
		tl__drv_event(d->loop, o, shutdown(h->fd, SHUT_WR) < 0 ? -errno : 0,
			      TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	return 1;
}

static int run_rop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	switch (o->code) {
	case TL_OP_ACCEPT:
		return run_accept(d, h, o);
	case TL_OP_READ:
		return run_read(d, h, o);
	case TL_OP_RECV:
		return tl__ep_run_recv(d, h, o);
	case TL_OP_RECV_FDS:
		return run_recv_fds(d, h, o);
	}
	return 1;
}

/* Run what the handle's readiness allows, in queue order per direction.
 * A finished op may have been popped already by a cancel; check the head. */
void tl__ep_run_handle(struct tl_drv *d, struct tl_hslot *h)
{
	tl_loop *l = d->loop;
	struct ep_h *e = EH(h);
	while (e->writable && e->whead != TL_NIL) {
		struct tl_opslot *o = ep_op(d, e->whead);
		if (o->code == TL_OP_CONNECT && e->connecting)
			break; /* only an edge after connect() may finish it */
		uint32_t idx = o->idx;
		if (!tl__ep_run_wop(d, h, o))
			break;
		if (e->whead == idx)
			tl__ep_q_pop(l, &e->whead, &e->wtail);
	}
	while (e->readable && e->rhead != TL_NIL) {
		struct tl_opslot *o = ep_op(d, e->rhead);
		uint32_t idx = o->idx;
		if (!run_rop(d, h, o))
			break;
		if (e->rhead == idx)
			tl__ep_q_pop(l, &e->rhead, &e->rtail);
	}
}

int tl__ep_start_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int r;
	if (h->flags & TL_HF_UNIX) {
		struct sockaddr_un sun;
		unsigned len;
		if ((r = tl__sock_unix_addr(o->u.conn.path, &sun, &len)) < 0)
			return r;
		r = connect(h->fd, (struct sockaddr *)&sun, len);
	} else {
		r = connect(h->fd, &o->u.conn.addr.sa, tl_addr_len(&o->u.conn.addr));
	}
	int e = r < 0 ? errno : 0;
	if ((r = tl__ep_do_register(d, h)) < 0)
		return r;
	if (e && e != EINPROGRESS) {
		/* Failed at once: a Unix listener's full queue says EAGAIN (not
		 * "in progress"), a path nobody listens on ECONNREFUSED. The
		 * connect ends with that error, as io_uring reports it; later
		 * ops on the socket run and fail. */
		EH(h)->readable = EH(h)->writable = 1;
		tl__drv_event(d->loop, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	}
	tl__ep_q_push(d->loop, &EH(h)->whead, &EH(h)->wtail, o);
	if (e == 0) {
		/* Connected at once (Unix sockets usually are). */
		EH(h)->writable = 1;
		tl__ep_mark_ready(d, h);
	} else {
		EH(h)->connecting = 1;
	}
	return 0;
}
