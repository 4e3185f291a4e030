/* drivers/epoll.c: the readiness driver: edge-triggered epoll, operations run when ready. */
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
#include "driver.h"
#include "sock.h"
#include "splice_io.h"

/*
 * Every socket is registered once, edge-triggered for input and output, so a
 * connection costs no epoll_ctl per operation. Each handle remembers whether
 * it is known readable/writable; an edge sets the flag, EAGAIN or a short
 * read/write clears it (a short stream read means the socket was drained at
 * that instant, and any later data raises a new edge: this saves the extra
 * read that would only return EAGAIN). The exception is the peer's end: once
 * an edge reported EPOLLRDHUP, EPOLLHUP or EPOLLERR, no edge will follow the
 * data already queued, so a short read no longer means drained and reads go
 * on until they return EOF or the error (contract 4.7). Operations queue per direction in
 * submission order. Writes are tried at submission when nothing is queued
 * ahead of them; their completion is queued like any other.
 *
 * The ready ring holds handles with work that needs no new edge: an op
 * submitted to a handle already readable, a multishot that ran out of
 * per-turn room, a read that waited for a pooled buffer. The event's
 * data carries the handle's slot and generation, so that an event for a
 * descriptor closed earlier in the same batch is recognised and dropped.
 *
 * TL_OP_POLL (a descriptor the loop does not own) registers a duplicate of
 * it, level-triggered (one-shot: EPOLLONESHOT), with the op's slot and
 * generation as its data: a registration per op, so two polls of one
 * descriptor (a terminal's reader and writer) never collide, and the
 * duplicate is removed from the set and closed when the op ends, whatever
 * the owner did with the original meanwhile (epoll keys registrations by
 * open file, so closing a descriptor does not remove it while a duplicate
 * lives: the driver always deletes before it closes).
 */

struct ep_h {
	uint32_t rhead, rtail; /* reads, accepts, receives */
	uint32_t whead, wtail; /* connect, writes, shutdown, sends */
	uint8_t readable, writable, registered, queued, lease_wait, connecting, emfile;
	uint8_t peer_end; /* the peer's FIN or reset arrived: read until EOF/error */
	uint8_t fdpass;   /* a Unix stream that receives descriptors: see run_recv_fds */
	uint32_t spl;     /* a splice waiting for this stream (its source) to be
			   * readable or unpaused, TL_NIL: none */
};
_Static_assert(sizeof(struct ep_h) <= sizeof(((struct tl_hslot *)0)->u.drv), "ep_h fits");

struct ep_o {
	uint32_t qnext;
	int dfd; /* TL_OP_POLL: the registered duplicate, -1 once removed */
};

#define EV_WAKE UINT64_MAX
#define EV_TIMER (UINT64_MAX - 1)
#define EV_POLL (1ull << 62) /* | op generation << 32 | op slot */
#define MAX_EVENTS 1024

struct tl_drv {
	tl_loop *loop;
	int epfd, wake_fd;
	int tfd;           /* embedded loops: a timerfd for the next deadline */
	uint64_t tfd_at;
	uint32_t *ready, rcap, rhead, rlen; /* ring of handle slots */
	uint32_t *lwait, nlwait;           /* handles waiting for a lease */
	uint32_t *emfile, nemfile;         /* listeners waiting for a free fd */
	uint64_t emfile_retry_at;          /* ... and when to try them anyway */
	uint32_t maxev;
	struct epoll_event ev[MAX_EVENTS];
};

static inline struct ep_h *EH(struct tl_hslot *h) { return (struct ep_h *)h->u.drv; }
static inline struct ep_o *EO(struct tl_opslot *o) { return (struct ep_o *)o->drv; }

static uint64_t ep_now(struct tl_drv *d)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int ep_init(tl_loop *loop, const tl_config *cfg, int wake_fd, struct tl_drv **out)
{
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->wake_fd = wake_fd;
	d->rcap = 2 * cfg->max_handles + 1;
	d->ready = malloc(d->rcap * sizeof *d->ready);
	d->lwait = malloc(cfg->max_handles * sizeof *d->lwait);
	d->emfile = malloc(cfg->max_handles * sizeof *d->emfile);
	d->maxev = cfg->events_per_turn < MAX_EVENTS ? cfg->events_per_turn : MAX_EVENTS;
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	int r = -errno;
	if (d->epfd < 0 || !d->ready || !d->lwait || !d->emfile)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, wake_fd, &ev) < 0) {
		r = -errno;
		goto fail;
	}
	d->tfd = -1;
	d->tfd_at = UINT64_MAX;
	if (cfg->embed) {
		struct epoll_event tev = {.events = EPOLLIN, .data.u64 = EV_TIMER};
		d->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (d->tfd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->tfd, &tev) < 0) {
			r = -errno;
			if (d->tfd >= 0)
				close(d->tfd);
			goto fail;
		}
	}
	*out = d;
	return 0;
fail:
	if (r == 0)
		r = -ENOMEM;
	if (d->epfd >= 0)
		close(d->epfd);
	free(d->ready);
	free(d->lwait);
	free(d->emfile);
	free(d);
	return r;
}

static void ep_destroy(struct tl_drv *d)
{
	if (d->tfd >= 0)
		close(d->tfd);
	close(d->epfd);
	free(d->ready);
	free(d->lwait);
	free(d->emfile);
	free(d);
}

static void mark_ready(struct tl_drv *d, struct tl_hslot *h)
{
	struct ep_h *e = EH(h);
	if (e->queued)
		return;
	e->queued = 1;
	uint32_t i = d->rhead + d->rlen;
	if (i >= d->rcap)
		i -= d->rcap;
	d->ready[i] = h->idx;
	d->rlen++;
}

static int do_register(struct tl_drv *d, struct tl_hslot *h)
{
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
		.data.u64 = ((uint64_t)h->gen << 32) | h->idx,
	};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, h->fd, &ev) < 0)
		return -errno;
	EH(h)->registered = 1;
	return 0;
}

static void reset_h(struct tl_hslot *h)
{
	struct ep_h *e = EH(h);
	memset(e, 0, sizeof *e);
	e->rhead = e->rtail = e->whead = e->wtail = TL_NIL;
	e->spl = TL_NIL;
}

static int ep_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *s)
{
	int fd = tl__sock_open(s);
	if (fd < 0)
		return fd;
	h->fd = fd;
	reset_h(h);
	/* Streams register when they connect (a fresh socket reports
	 * hang-up, which must not look like a finished connect). */
	if (s->kind == TL_OPEN_TCP_STREAM || s->kind == TL_OPEN_UNIX_STREAM)
		return 0;
	int r = do_register(d, h);
	if (r < 0) {
		close(fd);
		h->fd = -1;
	}
	if (s->kind == TL_OPEN_UDP)
		EH(h)->writable = 1;
	return r;
}

static int ep_attach(struct tl_drv *d, struct tl_hslot *h)
{
	reset_h(h);
	EH(h)->writable = 1;
	return do_register(d, h);
}

static int ep_adopt(struct tl_drv *d, struct tl_hslot *h, int fd)
{
	uint8_t type, fl;
	struct tl__sock_prev prev;
	int r = tl__sock_adopt(fd, &type, &fl, &prev);
	if (r < 0)
		return r;
	uint8_t type0 = h->type, flags0 = h->flags;
	h->type = type;
	h->flags |= fl;
	h->fd = fd;
	/* Registering reports what is already there (bytes, connections, the
	 * peer's end) as the first edge. */
	r = ep_attach(d, h);
	if (r < 0) {
		h->type = type0;
		h->flags = flags0;
		h->fd = -1;
		tl__sock_unadopt(fd, &prev);
	}
	return r;
}

/* The descriptor goes on living elsewhere: an epoll registration outlives
 * our descriptor while any other refers to the same file, so take it out. */
static void ep_detach(struct tl_drv *d, struct tl_hslot *h)
{
	if (EH(h)->registered)
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	EH(h)->registered = 0;
	EH(h)->queued = 0; /* a stale ring entry is skipped */
	h->fd = -1;
}

/* Listeners parked on EMFILE/ENFILE go again when the loop releases a
 * descriptor, or after EMFILE_RETRY_NS whatever freed one (another loop, a
 * raised limit): a slow timed retry, never a busy loop. */
#define EMFILE_RETRY_NS (100 * 1000 * 1000)

static void retry_emfile(struct tl_drv *d)
{
	while (d->nemfile) {
		struct tl_hslot *lh = tl__drv_handle(d->loop, d->emfile[--d->nemfile]);
		if (lh->type == TL_H_LISTEN && EH(lh)->emfile) {
			EH(lh)->emfile = 0;
			EH(lh)->readable = 1;
			mark_ready(d, lh);
		}
	}
}

static void ep_release(struct tl_drv *d, struct tl_hslot *h)
{
	tl__sock_release(h->fd, h->flags & TL_HF_ABORT);
	h->fd = -1;
	EH(h)->queued = 0; /* a stale ring entry is skipped */
	/* A descriptor came free: listeners that hit EMFILE may go on. */
	retry_emfile(d);
}

static int ep_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_local(h->fd, out);
}

static int ep_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_peer(h->fd, h->flags & TL_HF_UNIX, out);
}

static int ep_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value)
{
	return tl__sock_opt(h->fd, !!(h->flags & TL_HF_V6), set, opt, value);
}

/* ---- per-direction op queues ---- */

static void q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	EO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		EO(tl__drv_op(l, *tail))->qnext = o->idx;
	*tail = o->idx;
}

static void q_pop(tl_loop *l, uint32_t *head, uint32_t *tail)
{
	struct tl_opslot *o = tl__drv_op(l, *head);
	*head = EO(o)->qnext;
	if (*head == TL_NIL)
		*tail = TL_NIL;
}

static int q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
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

static int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ || o->code == TL_OP_RECV ||
	       o->code == TL_OP_RECV_FDS;
}

/* ---- running operations ---- */

/* 1: the op finished (popped), 0: it waits (readiness, room or a lease). */
static int run_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	int multi = o->flags & TL_OPF_MULTI;
	for (;;) {
		if (multi && !tl__drv_room(l)) {
			mark_ready(d, h);
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
						d->emfile_retry_at = ep_now(d) + EMFILE_RETRY_NS;
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

/* Take a pooled buffer for a read or receive on h. None free: park h on
 * the lease-wait list (lease_returned resumes it; a shortage is never an
 * error to the host) and return TL_NO_LEASE. */
static uint32_t take_lease(struct tl_drv *d, struct tl_hslot *h, uint8_t **buf, uint32_t *len)
{
	uint32_t cnt, lease = tl__drv_lease_take(d->loop);
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
			mark_ready(d, h);
			return 0;
		}
		uint32_t lease = TL_NO_LEASE, len;
		uint8_t *buf;
		if (o->flags & TL_OPF_POOLED) {
			lease = take_lease(d, h, &buf, &len);
			if (lease == TL_NO_LEASE)
				return 0;
		} else {
			buf = o->u.rw.buf;
			len = o->u.rw.len;
		}
		ssize_t n = read(h->fd, buf, len);
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

static int run_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	tl_loop *l = d->loop;
	uint32_t lease = TL_NO_LEASE, len = o->u.dg.len;
	uint8_t *buf = o->u.dg.buf;
	if (o->flags & TL_OPF_POOLED) {
		lease = take_lease(d, h, &buf, &len);
		if (lease == TL_NO_LEASE)
			return 0;
	}
	socklen_t alen = sizeof o->u.dg.addr;
	ssize_t n;
	do
		n = recvfrom(h->fd, buf, len, 0, &o->u.dg.addr.sa, &alen);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int e = errno;
		if (lease != TL_NO_LEASE)
			tl__drv_lease_drop(l, lease);
		if (e == EAGAIN || e == EWOULDBLOCK) {
			EH(h)->readable = 0;
			return 0;
		}
		tl__drv_event(l, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	tl__drv_event(l, o, n, TL_F_TERMINAL, n > 0 ? lease : TL_NO_LEASE);
	if (n == 0 && lease != TL_NO_LEASE)
		tl__drv_lease_drop(l, lease);
	return 1;
}

static int run_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct msghdr mh = {0};
	for (;;) {
		mh.msg_iov = &o->u.wv.iov[o->u.wv.cur];
		mh.msg_iovlen = o->u.wv.n - o->u.wv.cur;
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

static int run_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	ssize_t n;
	do
		n = sendto(h->fd, o->u.dg.buf, o->u.dg.len, MSG_NOSIGNAL, &o->u.dg.addr.sa,
			   tl_addr_len(&o->u.dg.addr));
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		EH(h)->writable = 0;
		return 0;
	}
	tl__drv_event(d->loop, o, n < 0 ? -errno : n, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
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
static struct tl_hslot *splice_waiter(struct tl_drv *d, struct tl_hslot *h)
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
static int splice_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ep_h *e = EH(h);
	if (o->u.sp.file < 0 && o->u.sp.moved < o->u.sp.taken && !(h->flags & TL_HF_CLOSING) &&
	    !(o->flags & TL_OPF_TIMEDOUT))
		return 0;
	if (!q_remove(d->loop, &e->whead, &e->wtail, o))
		return -ENOENT;
	if (o->u.sp.src != TL_NIL) {
		struct tl_hslot *s = tl__drv_handle(d->loop, o->u.sp.src);
		if (EH(s)->spl == o->idx)
			EH(s)->spl = TL_NIL;
	}
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	if (e->writable && e->whead != TL_NIL)
		mark_ready(d, h);
	return 0;
}

static int run_wop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	switch (o->code) {
	case TL_OP_CONNECT:
		return run_connect_done(d, h, o);
	case TL_OP_WRITE:
		return run_write(d, h, o);
	case TL_OP_SEND:
		return run_send(d, h, o);
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
		return run_recv(d, h, o);
	case TL_OP_RECV_FDS:
		return run_recv_fds(d, h, o);
	}
	return 1;
}

/* Run what the handle's readiness allows, in queue order per direction.
 * A finished op may have been popped already by a cancel; check the head. */
static void run_handle(struct tl_drv *d, struct tl_hslot *h)
{
	tl_loop *l = d->loop;
	struct ep_h *e = EH(h);
	while (e->writable && e->whead != TL_NIL) {
		struct tl_opslot *o = tl__drv_op(l, e->whead);
		if (o->code == TL_OP_CONNECT && e->connecting)
			break; /* only an edge after connect() may finish it */
		uint32_t idx = o->idx;
		if (!run_wop(d, h, o))
			break;
		if (e->whead == idx)
			q_pop(l, &e->whead, &e->wtail);
	}
	while (e->readable && e->rhead != TL_NIL) {
		struct tl_opslot *o = tl__drv_op(l, e->rhead);
		uint32_t idx = o->idx;
		if (!run_rop(d, h, o))
			break;
		if (e->rhead == idx)
			q_pop(l, &e->rhead, &e->rtail);
	}
}

static int start_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
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
	if ((r = do_register(d, h)) < 0)
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
	q_push(d->loop, &EH(h)->whead, &EH(h)->wtail, o);
	if (e == 0) {
		/* Connected at once (Unix sockets usually are). */
		EH(h)->writable = 1;
		mark_ready(d, h);
	} else {
		EH(h)->connecting = 1;
	}
	return 0;
}

/* ---- polls of descriptors the loop does not own ---- */

static int poll_submit(struct tl_drv *d, struct tl_opslot *o)
{
	int dfd = fcntl(o->poll.fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	struct epoll_event ev = {
		/* poll(2)'s bits are epoll's on Linux. */
		.events = o->poll.events | (o->poll.multi ? 0 : EPOLLONESHOT),
		.data.u64 = EV_POLL | (uint64_t)o->gen << 32 | o->idx,
	};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, dfd, &ev) < 0) {
		int e = -errno;
		close(dfd);
		return e;
	}
	EO(o)->dfd = dfd;
	return 0;
}

static void poll_remove(struct tl_drv *d, struct tl_opslot *o)
{
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, EO(o)->dfd, NULL);
	close(EO(o)->dfd);
	EO(o)->dfd = -1;
}

static int poll_cancel(struct tl_drv *d, struct tl_opslot *o)
{
	if (EO(o)->dfd < 0)
		return -ENOENT;
	poll_remove(d, o);
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	return 0;
}

static void poll_event(struct tl_drv *d, uint64_t tag, uint32_t ev)
{
	struct tl_opslot *o = tl__drv_op(d->loop, (uint32_t)tag & (TL_ID_MAX_SLOTS - 1));
	/* Ended earlier in this batch, or the slot went to another op. */
	if (!(o->flags & TL_OPF_LIVE) || o->gen != (uint16_t)(tag >> 32) || o->code != TL_OP_POLL ||
	    EO(o)->dfd < 0)
		return;
	uint32_t res = ev & (o->poll.events | EPOLLERR | EPOLLHUP);
	if (!o->poll.multi) {
		poll_remove(d, o);
		tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	/* Level-triggered: without room now, the next epoll_wait reports it
	 * again. */
	if (tl__drv_room(d->loop))
		tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
}

static int ep_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ep_h *e = EH(h);
	tl_loop *l = d->loop;
	if (o->code == TL_OP_POLL)
		return poll_submit(d, o);
	if (o->code == TL_OP_CONNECT)
		return start_connect(d, h, o);
	if (is_rside(o)) {
		if (o->code == TL_OP_RECV_FDS)
			e->fdpass = 1;
		q_push(l, &e->rhead, &e->rtail, o);
		if (e->readable && e->rhead == o->idx)
			mark_ready(d, h);
		return 0;
	}
	/* Try a write at once when nothing is queued ahead of it: most writes
	 * finish here and never wait for an edge. */
	if (e->whead == TL_NIL && e->writable && !e->connecting) {
		q_push(l, &e->whead, &e->wtail, o);
		if (run_wop(d, h, o) && e->whead == o->idx)
			q_pop(l, &e->whead, &e->wtail);
		return 0;
	}
	q_push(l, &e->whead, &e->wtail, o);
	return 0;
}

static int ep_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (o->code == TL_OP_POLL)
		return poll_cancel(d, o);
	struct ep_h *e = EH(h);
	if (o->code == TL_OP_SPLICE)
		return splice_cancel(d, h, o);
	int found = is_rside(o) ? q_remove(d->loop, &e->rhead, &e->rtail, o)
				: q_remove(d->loop, &e->whead, &e->wtail, o);
	if (!found)
		return -ENOENT;
	if (o->code == TL_OP_CONNECT)
		e->connecting = 0;
	/* Nothing is in flight in the kernel: acknowledge at once. */
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	/* Ops queued behind a cancelled one may run now. */
	if ((e->readable && e->rhead != TL_NIL) || (e->writable && e->whead != TL_NIL))
		mark_ready(d, h);
	return 0;
}

static void ep_lease_returned(struct tl_drv *d, uint32_t id)
{
	while (d->nlwait) {
		struct tl_hslot *h = tl__drv_handle(d->loop, d->lwait[--d->nlwait]);
		if (h->type == TL_H_FREE)
			continue;
		EH(h)->lease_wait = 0;
		mark_ready(d, h);
	}
}

static void ep_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	if (!paused && EH(h)->readable && EH(h)->rhead != TL_NIL)
		mark_ready(d, h);
	/* Possibly inside one of our own calls (driver.h): run it later. */
	struct tl_hslot *dst = paused ? NULL : splice_waiter(d, h);
	if (dst)
		mark_ready(d, dst);
}

static void run_ready(struct tl_drv *d)
{
	/* Only the entries present now: handles re-queued while running wait
	 * for the next poll (their room or lease ran out). */
	for (uint32_t n = d->rlen; n; n--) {
		uint32_t idx = d->ready[d->rhead];
		d->rhead = d->rhead + 1 == d->rcap ? 0 : d->rhead + 1;
		d->rlen--;
		struct tl_hslot *h = tl__drv_handle(d->loop, idx);
		if (h->type == TL_H_FREE || h->type == TL_H_TIMER || !EH(h)->queued)
			continue;
		EH(h)->queued = 0;
		run_handle(d, h);
	}
}

static int ep_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	tl_loop *l = d->loop;
	uint32_t before = tl__drv_queued(l);
	if (tl_unlikely(d->nemfile)) {
		uint64_t now = ep_now(d);
		if (now >= d->emfile_retry_at)
			retry_emfile(d);
		else if (timeout_ns < 0 || (uint64_t)timeout_ns > d->emfile_retry_at - now)
			timeout_ns = (int64_t)(d->emfile_retry_at - now);
	}
	if (d->rlen)
		run_ready(d);
	if (tl__drv_queued(l) != before || d->rlen)
		timeout_ns = 0; /* results are ready: do not block */
	uint32_t room = tl__drv_room(l);
	int maxev = (int)(room < d->maxev ? room : d->maxev);
	if (maxev < 1)
		maxev = 1;
	int n;
	if (timeout_ns == 0) {
		n = epoll_wait(d->epfd, d->ev, maxev, 0);
		info->discovery_polls++;
	} else {
		struct timespec ts, *tp = NULL;
		if (timeout_ns > 0) {
			ts.tv_sec = timeout_ns / 1000000000;
			ts.tv_nsec = timeout_ns % 1000000000;
			tp = &ts;
		}
		n = epoll_pwait2(d->epfd, d->ev, maxev, tp, NULL);
		if (n < 0 && errno == ENOSYS) {
			int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
			n = epoll_wait(d->epfd, d->ev, maxev, ms);
		}
		info->waits++;
	}
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0 && timeout_ns != 0)
		info->zero_event_waits++;
	for (int i = 0; i < n; i++) {
		uint64_t tag = d->ev[i].data.u64;
		uint32_t ev = d->ev[i].events;
		if (tag == EV_WAKE || tag == EV_TIMER) {
			uint64_t v;
			ssize_t r = read(tag == EV_WAKE ? d->wake_fd : d->tfd, &v, sizeof v);
			(void)r;
			continue;
		}
		if (tag & EV_POLL) {
			poll_event(d, tag, ev);
			continue;
		}
		struct tl_hslot *h = tl__drv_handle(l, (uint32_t)tag);
		/* Closed earlier in this batch, or the slot was reused. */
		if (h->type == TL_H_FREE || h->gen != (uint16_t)(tag >> 32) || h->fd < 0)
			continue;
		struct ep_h *e = EH(h);
		if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			e->readable = 1;
		if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			e->peer_end = 1;
		if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
			e->writable = 1;
			e->connecting = 0;
		}
		run_handle(d, h);
		struct tl_hslot *dst = splice_waiter(d, h);
		if (dst)
			run_handle(d, dst);
	}
	return 0;
}

static int ep_embed_fd(struct tl_drv *d)
{
	return d->epfd;
}

static void ep_embed_deadline(struct tl_drv *d, uint64_t at)
{
	if (at == d->tfd_at)
		return;
	struct itimerspec its = {0};
	if (at != UINT64_MAX) {
		/* 0 would disarm: a deadline already due fires at once. */
		uint64_t t = at ? at : 1;
		its.it_value.tv_sec = (time_t)(t / 1000000000u);
		its.it_value.tv_nsec = (long)(t % 1000000000u);
	}
	if (timerfd_settime(d->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		d->tfd_at = at;
}

const struct tl_driver tl__driver_epoll = {
	.name = "epoll",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX | TL_CAP_EMBED | TL_CAP_OS | TL_CAP_DETACH |
		TL_CAP_POLL | TL_CAP_SPLICE,
	.init = ep_init,
	.destroy = ep_destroy,
	.now = ep_now,
	.open = ep_open,
	.attach = ep_attach,
	.release = ep_release,
	.adopt = ep_adopt,
	.detach = ep_detach,
	.local_addr = ep_local,
	.peer_addr = ep_peer,
	.sockopt = ep_sockopt,
	.submit = ep_submit,
	.cancel = ep_cancel,
	.poll = ep_poll,
	.lease_returned = ep_lease_returned,
	.pause = ep_pause,
	.embed_fd = ep_embed_fd,
	.embed_deadline = ep_embed_deadline,
};
