/* drivers/iocp/net.c: the IOCP driver's stream operations: accept, connect, reads into the caller's buffer or a lease, gathered writes, shutdown, and their cancellation. */
#include <errno.h>
#include <string.h>
#include "iocp_int.h"

static struct io_op *IO(struct tl_drv *d, const struct tl_opslot *o)
{
	return &d->ops[o->idx];
}

static int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ || o->code == TL_OP_RECV;
}

/* ---- the per-handle queues ---- */

static void q_push(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	IO(d, o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		d->ops[*tail].qnext = o->idx;
	*tail = o->idx;
}

static void q_pop(struct tl_drv *d, uint32_t *head, uint32_t *tail)
{
	*head = d->ops[*head].qnext;
	if (*head == TL_NIL)
		*tail = TL_NIL;
}

static int q_remove(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = *head; i != TL_NIL; prev = i, i = d->ops[i].qnext) {
		if (i != o->idx)
			continue;
		if (prev == TL_NIL)
			*head = d->ops[i].qnext;
		else
			d->ops[prev].qnext = d->ops[i].qnext;
		if (*tail == i)
			*tail = prev;
		return 1;
	}
	return 0;
}

/* Take the head of h's read queue off it (its op ended). */
void tl__io_rpop(struct tl_drv *d, struct tl_hslot *h)
{
	q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
}

/* ---- posting the heads ---- */

int tl__io_last_error(void)
{
	return tl__os_win_error((unsigned long)WSAGetLastError());
}

#define last_error tl__io_last_error

/* h's socket on the loop's port, before its first overlapped operation
 * (iocp_int.h): 0 or a negative errno. */
int tl__io_join(struct tl_drv *d, struct tl_hslot *h)
{
	if (IH(h)->joined)
		return 0;
	if (!CreateIoCompletionPort((HANDLE)io_sock(h), d->port, 0, 0))
		return tl__os_win_error(GetLastError());
	IH(h)->joined = 1;
	return 0;
}

/* Post accept op o on listener h: 1 posted, or the error that ends it
 * (the caller takes it off the queue, then reports it: a terminal may
 * bring the driver back in through pause(), and must find it gone). */
static int post_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	int fam = h->flags & TL_HF_V6 ? AF_INET6 : AF_INET;
	DWORD got = 0;
	int r = tl__io_join(d, h);
	if (r)
		return r;
	io->accepted = WSASocketW(fam, SOCK_STREAM, IPPROTO_TCP, NULL, 0, WSA_FLAG_OVERLAPPED);
	if (io->accepted == INVALID_SOCKET)
		return last_error();
	memset(&io->ov, 0, sizeof io->ov);
	if (!d->acceptex(io_sock(h), io->accepted, io->u.addrs, 0, IO_ADDR_LEN, IO_ADDR_LEN, &got, &io->ov) &&
	    WSAGetLastError() != ERROR_IO_PENDING) {
		int e = last_error();
		closesocket(io->accepted);
		io->accepted = INVALID_SOCKET;
		return e;
	}
	io->inflight = 1;
	return 1;
}

/* Post read op o: 1 posted, 0 waits (paused: kick again later), or the
 * error that ends it (as post_accept's). A pooled read posts a zero-byte
 * WSARecv and takes its lease when bytes are there (iocp_int.h). */
static int post_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	WSABUF b = {0, NULL};
	DWORD flags = 0;
	io->lease = TL_NO_LEASE;
	io->probe = !!(o->flags & TL_OPF_POOLED);
	/* Over a cap (lib/caps.c): bytes stay in the socket until pause(0);
	 * waiting for a lease: until one comes back (lease_returned). */
	if (io->probe && ((h->flags & TL_HF_PAUSED) || IH(h)->lease_wait))
		return 0;
	int r = tl__io_join(d, h);
	if (r)
		return r;
	if (!io->probe) {
		b.buf = (char *)o->u.rw.buf;
		b.len = o->u.rw.len;
	}
	memset(&io->ov, 0, sizeof io->ov);
	if (WSARecv(io_sock(h), &b, 1, NULL, &flags, &io->ov, NULL) != 0 &&
	    WSAGetLastError() != WSA_IO_PENDING)
		return last_error();
	io->inflight = 1;
	return 1;
}

/* Post write op o from where it got to: 1 posted, or the error that ends
 * it (as post_accept's). */
static int post_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	int r = tl__io_join(d, h);
	if (r)
		return r;
	memset(&io->ov, 0, sizeof io->ov);
	/* tl_iovec is WSABUF's layout (include/turnloop/platform.h). */
	if (WSASend(io_sock(h), (WSABUF *)&o->u.wv.iov[o->u.wv.cur], o->u.wv.n - o->u.wv.cur, NULL, 0,
		    &io->ov, NULL) != 0 &&
	    WSAGetLastError() != WSA_IO_PENDING)
		return last_error();
	io->inflight = 1;
	return 1;
}

/*
 * Post what each queue's head needs, as far as order allows. An op that
 * ends here leaves its queue before its terminal is reported: a terminal
 * may bring the driver back in (a write's end lowers the stream's queued
 * bytes, the core lifts a cap, pause(0) kicks again), and the nested kick
 * must not find the op still at the head and post it twice. Completions
 * keep the same order.
 */
void tl__io_kick(struct tl_drv *d, struct tl_hslot *h)
{
	struct io_h *e = IH(h);
	while (!e->rbusy && e->rhead != TL_NIL) {
		struct tl_opslot *o = &d->os[e->rhead];
		int r = o->code == TL_OP_ACCEPT ? post_accept(d, h, o)
			: o->code == TL_OP_RECV ? tl__io_post_recv(d, h, o)
						: post_read(d, h, o);
		if (r == 1) {
			e->rbusy = 1;
		} else if (r == 0) {
			break; /* waits for room or a lease */
		} else {
			q_pop(d, &e->rhead, &e->rtail);
			tl__drv_event(d->loop, o, r, TL_F_TERMINAL, TL_NO_LEASE);
		}
	}
	while (!e->wbusy && !e->connecting && e->whead != TL_NIL) {
		struct tl_opslot *o = &d->os[e->whead];
		int r;
		if (o->code == TL_OP_WRITE) {
			if ((r = post_write(d, h, o)) == 1) {
				e->wbusy = 1;
				break;
			}
		} else { /* TL_OP_SHUTDOWN */
			r = shutdown(io_sock(h), SD_SEND) ? last_error() : 0;
		}
		q_pop(d, &e->whead, &e->wtail);
		tl__drv_event(d->loop, o, r, TL_F_TERMINAL, TL_NO_LEASE);
	}
}

static int start_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	int r = tl__io_join(d, h);
	if (r)
		return r;
	memset(&io->ov, 0, sizeof io->ov);
	if (!d->connectex(io_sock(h), &o->u.conn.addr.sa, (int)tl_addr_len(&o->u.conn.addr), NULL, 0, NULL,
			  &io->ov) &&
	    WSAGetLastError() != ERROR_IO_PENDING)
		return last_error(); /* nothing happened */
	io->inflight = 1;
	IH(h)->connecting = 1;
	q_push(d, &IH(h)->whead, &IH(h)->wtail, o);
	IH(h)->wbusy = 1;
	return 0;
}

int tl__io_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_h *e = IH(h);
	struct io_op *io = IO(d, o);
	io->inflight = io->cancelled = 0;
	io->lease = TL_NO_LEASE;
	io->accepted = INVALID_SOCKET;
	switch (o->code) {
	case TL_OP_CONNECT:
		return start_connect(d, h, o);
	case TL_OP_ACCEPT:
	case TL_OP_READ:
	case TL_OP_RECV:
		q_push(d, &e->rhead, &e->rtail, o);
		break;
	case TL_OP_SEND: /* in the OS at once: sends keep no order among themselves */
		return tl__io_send(d, h, o);
	case TL_OP_WRITE:
	case TL_OP_SHUTDOWN:
		q_push(d, &e->whead, &e->wtail, o);
		break;
	case TL_OP_POLL: /* h is the core's alone (driver.h): no queue */
		return tl__io_poll_submit(d, o);
	default:
		return -ENOTSUP;
	}
	tl__io_kick(d, h);
	return 0;
}

int tl__io_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_h *e = IH(h);
	struct io_op *io = IO(d, o);
	if (o->code == TL_OP_POLL)
		return tl__io_poll_cancel(d, o);
	if (io->inflight) {
		/* Its own completion ends it (ERROR_OPERATION_ABORTED, or its
		 * result if it finished first: then CancelIoEx finds nothing). */
		io->cancelled = 1;
		CancelIoEx((HANDLE)io_sock(h), &io->ov);
		return 0;
	}
	if (o->code == TL_OP_SEND)
		return -ENOENT; /* never queued: in the OS, or over */
	int found = is_rside(o) ? q_remove(d, &e->rhead, &e->rtail, o) : q_remove(d, &e->whead, &e->wtail, o);
	if (!found)
		return -ENOENT;
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	tl__io_kick(d, h);
	return 0;
}

/* ---- completions ---- */

static void accept_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err)
{
	struct io_op *io = IO(d, o);
	int multi = o->flags & TL_OPF_MULTI;
	SOCKET s = io->accepted;
	io->accepted = INVALID_SOCKET;
	if (!err) {
		SOCKET ls = io_sock(h);
		struct sockaddr *local, *remote;
		int llen = 0, rlen = 0;
		tl_addr peer;
		/* The listener's options (TCP_NODELAY among them) pass to s here. */
		setsockopt(s, SOL_SOCKET, SO_UPDATE_ACCEPT_CONTEXT, (char *)&ls, sizeof ls);
		d->acceptaddrs(io->u.addrs, 0, IO_ADDR_LEN, IO_ADDR_LEN, &local, &llen, &remote, &rlen);
		memset(&peer, 0, sizeof peer);
		memcpy(&peer, remote, (size_t)rlen < sizeof peer ? (size_t)rlen : sizeof peer);
		int last = !multi || io->cancelled;
		if (last) /* off the queue before its terminal (tl__io_kick says why) */
			q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
		if (tl__drv_accept(d->loop, o, (int)(intptr_t)s, &peer, last) < 0)
			closesocket(s);
		if (!last && !(o->flags & TL_OPF_LIVE)) /* its terminal queued by the core */
			q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
		return; /* or posted again by the kick */
	}
	closesocket(s);
	/* A client that reset before its accept finished is the OS's business:
	 * a multishot accept goes on. */
	if (multi && !io->cancelled && (err == -ECONNRESET || err == -ECONNABORTED))
		return;
	q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
	tl__drv_event(d->loop, o, err, TL_F_TERMINAL, TL_NO_LEASE);
}

/* A pooled read's probe came back with bytes (or the end) there: read them
 * into leases, one recv each, while the stream is under its caps, the pool
 * has a lease for it, the turn has room and more is there. Returns 1 when
 * o ended (its terminal reported, o off the queue), 0 when it waits (the
 * kick posts its probe again, or a lease or pause(0) kicks it). */
static int read_leases(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	uint32_t size, count;
	uint8_t *base = tl__drv_lease_base(d->loop, &size, &count);
	while (!(h->flags & TL_HF_PAUSED) && (!multi || tl__drv_room(d->loop))) {
		uint32_t lease = TL_NO_LEASE;
		if (tl__drv_lease_may(tl__drv_lease_pool(d->loop), h))
			lease = tl__drv_lease_take(d->loop);
		if (lease == TL_NO_LEASE) {
			if (!IH(h)->lease_wait) {
				IH(h)->lease_wait = 1;
				d->lwait[d->nlwait++] = h->idx;
			}
			return 0;
		}
		int n = recv(io_sock(h), (char *)base + (size_t)lease * size, (int)size, 0);
		int e = n < 0 ? WSAGetLastError() : 0;
		if (n > 0 && multi) {
			tl__drv_event(d->loop, o, n, 0, lease); /* the lease is the host's now */
			if ((uint32_t)n < size || !(o->flags & TL_OPF_LIVE))
				break; /* drained (the probe tells of more), or ended by the core */
			continue;
		}
		if (n <= 0)
			tl__drv_lease_drop(d->loop, lease);
		if (n < 0 && e == WSAEWOULDBLOCK)
			return 0; /* nothing after all: the probe again */
		/* One-shot bytes, the end of the stream, or an error: its terminal,
		 * off the queue first (tl__io_kick says why). */
		q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
		if (n > 0)
			tl__drv_event(d->loop, o, n, TL_F_TERMINAL, lease);
		else
			tl__drv_event(d->loop, o, n < 0 ? tl__os_win_error((unsigned long)e) : 0,
				      TL_F_TERMINAL | (n == 0 ? TL_F_EOF : 0), TL_NO_LEASE);
		return 1;
	}
	if (!(o->flags & TL_OPF_LIVE)) { /* its terminal queued by the core */
		q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
		return 1;
	}
	return 0;
}

static void read_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n)
{
	struct io_op *io = IO(d, o);
	if (!err && io->probe && !io->cancelled) {
		read_leases(d, h, o); /* then posted again by the kick, or it waits */
		return;
	}
	if (!err && !io->probe && n > 0) { /* the caller's buffer: off the queue first */
		q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
		tl__drv_event(d->loop, o, n, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	if (!err && io->cancelled)
		err = -ECANCELED; /* its probe came back after the cancel: nothing taken */
	q_pop(d, &IH(h)->rhead, &IH(h)->rtail);
	tl__drv_event(d->loop, o, err ? err : 0, TL_F_TERMINAL | (err ? 0 : TL_F_EOF), TL_NO_LEASE);
}

static void write_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n)
{
	if (!err) {
		size_t left = n;
		o->u.wv.off += n;
		while (left && o->u.wv.cur < o->u.wv.n) {
			tl_iovec *v = &o->u.wv.iov[o->u.wv.cur];
			if (left >= v->iov_len) {
				left -= v->iov_len;
				o->u.wv.cur++;
			} else {
				v->iov_base = (uint8_t *)v->iov_base + left;
				v->iov_len -= (unsigned long)left;
				left = 0;
			}
		}
		while (o->u.wv.cur < o->u.wv.n && !o->u.wv.iov[o->u.wv.cur].iov_len)
			o->u.wv.cur++;
		if (o->u.wv.cur < o->u.wv.n && !IO(d, o)->cancelled)
			return; /* the rest: posted again by the kick */
		if (o->u.wv.cur < o->u.wv.n)
			err = -ECANCELED;
	}
	q_pop(d, &IH(h)->whead, &IH(h)->wtail); /* before its terminal (tl__io_kick) */
	tl__drv_event(d->loop, o, err ? err : (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
}

/* The completion of the op whose record holds ov. */
void tl__io_complete(struct tl_drv *d, OVERLAPPED *ov)
{
	struct io_op *io = tl_container_of(ov, struct io_op, ov);
	struct tl_opslot *o = &d->os[io - d->ops];
	struct tl_hslot *h = &d->hs[o->hidx];
	DWORD n = 0, fl = 0;
	int err = 0;
	if (o->code == TL_OP_POLL) { /* AFD's request, on no socket of ours */
		tl__io_poll_done(d, o);
		return;
	}
	if (!WSAGetOverlappedResult(io_sock(h), ov, &n, FALSE, &fl))
		err = last_error();
	io->inflight = 0;
	switch (o->code) {
	case TL_OP_ACCEPT:
		IH(h)->rbusy = 0;
		accept_done(d, h, o, err);
		break;
	case TL_OP_READ:
		IH(h)->rbusy = 0;
		read_done(d, h, o, err, n);
		break;
	case TL_OP_CONNECT:
		IH(h)->wbusy = 0;
		IH(h)->connecting = 0;
		if (!err && setsockopt(io_sock(h), SOL_SOCKET, SO_UPDATE_CONNECT_CONTEXT, NULL, 0) != 0)
			err = last_error();
		q_pop(d, &IH(h)->whead, &IH(h)->wtail);
		tl__drv_event(d->loop, o, err, TL_F_TERMINAL, TL_NO_LEASE);
		break;
	case TL_OP_WRITE:
		IH(h)->wbusy = 0;
		write_done(d, h, o, err, n);
		break;
	case TL_OP_RECV:
		IH(h)->rbusy = 0;
		tl__io_recv_done(d, h, o, err, n);
		break;
	case TL_OP_SEND:
		tl__io_send_done(d, h, o, err, n);
		break;
	}
	if (h->type != TL_H_FREE)
		tl__io_kick(d, h);
}
