/* drivers/uring.c: the io_uring driver: multishot accept and receive, provided buffer rings, one enter per turn. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <liburing.h>
#include "tl_config.h"
#include "internal.h"
#include "sock.h"
#include "uring.h"
#include "turnloop/pool.h"

#if TL_HAVE_VALGRIND
#include <valgrind/memcheck.h>
/* Memory the kernel filled from its own context, after the system call that
 * asked for it returned: valgrind cannot see those writes. (d->vg caches
 * RUNNING_ON_VALGRIND: the client request costs a few instructions even
 * natively, on every read.) */
#define kernel_wrote(d, p, n)                                      \
	do {                                                       \
		if (tl_unlikely((d)->vg))                          \
			(void)VALGRIND_MAKE_MEM_DEFINED((p), (n)); \
	} while (0)
#define under_valgrind() RUNNING_ON_VALGRIND
#else
#define kernel_wrote(d, p, n) ((void)(d))
#define under_valgrind() 0
#endif

/*
 * How the pieces fit.
 *
 * Ops do not reach the kernel from submit(): they join a start list, and
 * poll() turns the list into SQEs right before its single io_uring_enter,
 * which submits them and waits in the same call. So every write a host
 * issues in one turn on one socket leaves in one send, and a turn costs one
 * system call however much it did (connect is the exception: a Unix path is
 * only valid during submit, so its SQE is prepared there).
 *
 * Ordering per stream: like the epoll driver, each stream keeps its reads
 * (and a listener its accepts) in one queue and its connect, writes and
 * shutdown in another; only the head of each queue is in the kernel. The
 * write head's SQE gathers the queued writes behind it (up to UR_GATHER
 * iovecs), and its result is spread over them in order: a short send
 * finishes the ops it covered and re-issues the rest. Datagram sends and
 * receives need no order and go to the kernel side by side.
 *
 * Pooled reads use a provided-buffer ring registered by hand (group 0 of
 * this ring): buffer id == lease id, so a CQE's buffer is the lease the host
 * gets. Released leases go onto a stack, and the ring is kept topped up
 * with a window of the most recently released ones (see top_up), so that
 * the buffers the kernel fills are warm. A read that finds the ring empty
 * (-ENOBUFS) parks on the buffer-wait list and is re-armed when a lease
 * comes back (or at once, with a wider window, if spare leases were
 * waiting); the host never sees -ENOBUFS.
 *
 * Stream reads are one recv per message while the host answers them on the
 * same stream (the next recv goes a poll after the answer, into a lease we
 * pick: see sort_reads) and multishot once it does not.
 *
 * The CQ is four times the SQ; what does not fit is kept by the kernel
 * (IORING_FEAT_NODROP) and poll() pulls it in. A multishot request that the
 * kernel ends (CQ full, an error that leaves the op usable) is re-armed
 * while its op is wanted. Nonterminal events wait in the CQ when the core
 * has no room for them this turn.
 *
 * Sends are plain IORING_OP_SEND/SENDMSG: bench/zc_threshold.c found no
 * size at which IORING_OP_SEND_ZC costs less CPU per byte on this kind of
 * host (over loopback the kernel copies anyway, and the notification makes
 * it 1.25x to 8x dearer), so zero copy is not used.
 *
 * user_data: tag (8 bits) << 56 | op generation (16 bits) << 24 | op slot
 * (24 bits). The tag tells an op's own CQE from an ASYNC_CANCEL's, the wake
 * poll's and the embed timeout's; the generation drops a CQE whose op slot
 * was reused.
 *
 * Typed file requests (lib/fs.c) come through fs_submit as handle-less ops
 * (TL_OP_POOL) whose paths and statx buffer live in the pool's job record;
 * their SQE is prepared at once, like a connect's, and submitted by the
 * turn's enter. Which of them the kernel has is probed once per ring; the
 * rest stay on the pool.
 *
 * Cancellation asks the kernel (ASYNC_CANCEL on the op's user_data) and the
 * op's terminal comes only from the op's own CQE. An op that is not in the
 * kernel (queued behind a head, waiting for buffers or descriptors, or not
 * submitted yet) is acknowledged at once, as epoll does.
 */

#define UR_GATHER 16     /* iovecs one send may gather */
#define UR_BUF_WINDOW 64 /* pooled buffers on the ring at first (see top_up) */
_Static_assert(UR_GATHER >= TL_IOV_MAX, "a send always takes the whole head op");
#define TAG_SHIFT 56
enum { TAG_OP = 1, TAG_CANCEL = 2, TAG_WAKE = 3, TAG_TIMER = 4, TAG_TIMER_CTL = 5 };

/* Where an op is (ur_o.st). */
enum {
	ST_IDLE = 0, /* queued behind its handle's head, or finished */
	ST_START,    /* on the start list: gets an SQE at the next poll */
	ST_KERNEL,   /* an SQE or CQE of it is outstanding */
	ST_BUFWAIT,  /* waits for a pooled buffer to come back */
	ST_FDWAIT,   /* multishot accept waiting for a free descriptor */
	ST_LATER,    /* stream read whose request ended this poll (see sort_reads) */
	ST_DEFER,    /* stream read re-issued at the next poll */
};

struct ur_o {
	uint32_t qnext;        /* next op in the handle's queue */
	uint32_t lnext, lprev; /* start / buffer-wait / fd-wait list */
	uint8_t st;
	uint8_t cancel_sent;   /* an ASYNC_CANCEL targets this op's user_data */
	uint8_t fs_code;       /* native file requests: enum tl_fs_req */
	uint8_t oneshot;       /* stream read: one recv per request, not multishot */
	uint8_t try_lease;     /* stream read: next recv tries a lease of our choosing */
	uint8_t score;         /* stream read: how its tries have been doing (see try_failed) */
	union {
		uint32_t tlease; /* stream read: the lease its recv holds (TL_NO_LEASE: none) */
		uint32_t klen;   /* native file requests: bytes at kbuf the kernel */
	};
	union {
		void *kbuf;    /* native file requests: what the kernel may write
				* (read buffer, statx), for valgrind */
		struct {
			uint32_t fast;  /* messages in a row that came within a
					 * poll of our answer (see on_read) */
			uint8_t slow;   /* multishot because its tries kept missing */
			uint8_t retry;  /* cancelled by us, to be deferred again */
		} sr;                   /* stream reads (see try_failed) */
	};
};
_Static_assert(sizeof(struct ur_o) <= sizeof(((struct tl_opslot *)0)->drv), "ur_o fits");

struct ur_h {
	uint32_t rhead, rtail; /* accepts or reads */
	uint32_t whead, wtail; /* connect, writes, shutdown */
	uint32_t wn;           /* ops the write SQE in flight covers (0: none) */
	uint8_t connecting;    /* reads wait for the connect */
	uint32_t wpoll;        /* the poll that issued its last send (see on_read) */
};
_Static_assert(sizeof(struct ur_h) <= sizeof(((struct tl_hslot *)0)->u.drv), "ur_h fits");

struct ur_list {
	uint32_t head, tail;
};

/* Per SQE slot: what a sendmsg or a Unix connect points at. The kernel
 * copies both when it consumes the SQE (IORING_FEAT_SUBMIT_STABLE), and a
 * slot is handed out again only after that. */
union ur_scratch {
	struct {
		struct msghdr mh;
		struct iovec iov[UR_GATHER];
	} w;
	struct sockaddr_un sun;
	struct __kernel_timespec ts;
};

/* Per op slot, for datagram receives only: recvmsg writes the source length
 * and flags back into the msghdr when it completes, so it must outlive the
 * SQE. The array is calloc'ed, so pages of unused slots are never touched. */
struct ur_msg {
	struct msghdr mh;
	struct iovec iov;
};

struct tl_drv {
	struct io_uring ring;
	tl_loop *loop;
	int wake_fd, embed, reg_ring, wake_armed;
	int vg;                 /* running under valgrind */
	int vg_efd;             /* see vg_wait; -1 unless under valgrind */
	int send_flags;         /* MSG_NOSIGNAL | MSG_WAITALL */
	uint32_t flags, dropped; /* setup flags kept / refused */
	uint32_t max_ops;
	uint32_t polls;         /* ur_poll calls: a peer's answer time in polls */
	struct tl_opslot *ops;  /* the core's tables: fixed for the loop's life */
	struct tl_hslot *hs;
	struct io_uring_buf_ring *br;
	uint32_t br_entries, br_avail; /* buffers on the ring, as far as we know */
	uint32_t br_win;               /* how many br_avail is topped up to */
	uint32_t *spare, nspare;       /* free leases off the ring, most recent on top */
	uint8_t *lease_base;
	uint32_t lease_size, lease_count;
	struct ur_list start, bufwait, fdwait, later, defer;
	uint64_t fdwait_at;       /* when accepts parked on EMFILE try anyway */
	uint64_t tmo_at, tmo_seq; /* embedded loops: the armed timeout, if any */
	int tmo_armed;
	union ur_scratch *scr;
	struct ur_msg *msg;
	uint32_t fs_ok;         /* bit per enum tl_fs_req the ring runs natively */
	struct tl_uring_stats st;
};

static struct tl_uring_debug debug_over;

static inline struct ur_h *UH(struct tl_hslot *h) { return (struct ur_h *)h->u.drv; }
static inline struct ur_o *UO(struct tl_opslot *o) { return (struct ur_o *)o->drv; }
static inline struct tl_opslot *OP(struct tl_drv *d, uint32_t i) { return &d->ops[i]; }
static inline struct tl_hslot *HS(struct tl_drv *d, uint32_t i) { return &d->hs[i]; }

static inline uint64_t ud_op(const struct tl_opslot *o)
{
	return (uint64_t)TAG_OP << TAG_SHIFT | (uint64_t)o->gen << TL_ID_SLOT_BITS | o->idx;
}

static uint64_t ur_now(struct tl_drv *d)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- lists of ops (start, buffer wait, fd wait) ---- */

static struct ur_list *list_of(struct tl_drv *d, uint8_t st)
{
	switch (st) {
	case ST_START:
		return &d->start;
	case ST_BUFWAIT:
		return &d->bufwait;
	case ST_FDWAIT:
		return &d->fdwait;
	case ST_LATER:
		return &d->later;
	case ST_DEFER:
		return &d->defer;
	}
	return NULL;
}

static void list_add(struct tl_drv *d, struct tl_opslot *o, uint8_t st)
{
	struct ur_list *L = list_of(d, st);
	struct ur_o *u = UO(o);
	u->st = st;
	u->lnext = TL_NIL;
	u->lprev = L->tail;
	if (L->tail == TL_NIL)
		L->head = o->idx;
	else
		UO(OP(d, L->tail))->lnext = o->idx;
	L->tail = o->idx;
}

/* Take o off whatever list it is on (none for ST_IDLE/ST_KERNEL). */
static void list_del(struct tl_drv *d, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	struct ur_list *L = list_of(d, u->st);
	if (!L)
		return;
	if (u->lprev == TL_NIL)
		L->head = u->lnext;
	else
		UO(OP(d, u->lprev))->lnext = u->lnext;
	if (u->lnext == TL_NIL)
		L->tail = u->lprev;
	else
		UO(OP(d, u->lnext))->lprev = u->lprev;
	u->st = ST_IDLE;
}

/* ---- per-handle queues ---- */

static int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ;
}

/* Datagram ops are not ordered: they are never queued. */
static int is_queued(const struct tl_hslot *h)
{
	return h->type != TL_H_UDP;
}

static void q_push(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	UO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		UO(OP(d, *tail))->qnext = o->idx;
	*tail = o->idx;
}

static void q_remove(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	if (tl_likely(*head == o->idx)) { /* the op in the kernel is the head */
		*head = UO(o)->qnext;
		if (*head == TL_NIL)
			*tail = TL_NIL;
		return;
	}
	uint32_t prev = TL_NIL;
	for (uint32_t i = *head; i != TL_NIL; prev = i, i = UO(OP(d, i))->qnext) {
		if (i != o->idx)
			continue;
		uint32_t next = UO(o)->qnext;
		if (prev == TL_NIL)
			*head = next;
		else
			UO(OP(d, prev))->qnext = next;
		if (*tail == i)
			*tail = prev;
		return;
	}
}

static void unqueue(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_h *e = UH(h);
	if (!is_queued(h))
		return;
	if (is_rside(o))
		q_remove(d, &e->rhead, &e->rtail, o);
	else
		q_remove(d, &e->whead, &e->wtail, o);
}

/* Put the idle heads of h's queues on the start list. */
static void kick(struct tl_drv *d, struct tl_hslot *h)
{
	struct ur_h *e = UH(h);
	if (!is_queued(h) || h->fd < 0)
		return;
	if (e->rhead != TL_NIL && !e->connecting) {
		struct tl_opslot *o = OP(d, e->rhead);
		if (UO(o)->st == ST_IDLE)
			list_add(d, o, ST_START);
	}
	if (e->whead != TL_NIL) {
		struct tl_opslot *o = OP(d, e->whead);
		if (UO(o)->st == ST_IDLE)
			list_add(d, o, ST_START);
	}
}

/* The op leaves the driver: report its terminal event, start what waited. */
static void op_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int64_t res,
		    uint32_t flags, uint32_t lease)
{
	UO(o)->st = ST_IDLE;
	unqueue(d, h, o);
	tl__drv_event(d->loop, o, res, flags | TL_F_TERMINAL, lease);
	kick(d, h);
}

/* ---- the rings ---- */

/* Hand a buffer (lease id) to the kernel. */
static void provide(struct tl_drv *d, uint32_t id)
{
	io_uring_buf_ring_add(d->br, d->lease_base + (size_t)id * d->lease_size, d->lease_size,
			      (unsigned short)id, io_uring_buf_ring_mask(d->br_entries), 0);
	io_uring_buf_ring_advance(d->br, 1);
	d->br_avail++;
}

/* The kernel takes buffers from the ring in the order they were given, so a
 * ring holding every free lease would cycle through all of them, each one
 * cold in cache and TLB by its turn. The ring gets only a window of them,
 * refilled from a stack whose top is the lease released last; the window
 * grows whenever the kernel finds the ring empty while spare leases wait. */
static void top_up(struct tl_drv *d)
{
	while (d->br_avail < d->br_win && d->nspare)
		provide(d, d->spare[--d->nspare]);
}

/* A free lease (given back by the host, or taken by the kernel for no data). */
static void recycle(struct tl_drv *d, uint32_t id)
{
	d->spare[d->nspare++] = id;
	top_up(d);
}

/* Make the SQEs prepared so far visible to the kernel; returns how many it
 * has not consumed yet. */
static unsigned flush_sq(struct io_uring *r)
{
	unsigned tail = r->sq.sqe_tail;
	if (r->sq.sqe_head != tail) {
		r->sq.sqe_head = tail;
		io_uring_smp_store_release(r->sq.ktail, tail);
	}
	return tail - IO_URING_READ_ONCE(*r->sq.khead);
}

/* One io_uring_enter: submit, run deferred completions, and wait for
 * wait_nr CQEs at most until ts (NULL: no limit). */
static int enter(struct tl_drv *d, unsigned submit, unsigned wait_nr,
		 const struct __kernel_timespec *ts)
{
	struct io_uring_getevents_arg arg = {.ts = (uint64_t)(uintptr_t)ts};
	unsigned flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
	int fd = d->ring.ring_fd;
	if (d->reg_ring) {
		fd = d->ring.enter_ring_fd;
		flags |= IORING_ENTER_REGISTERED_RING;
	}
	d->st.enters++;
	return io_uring_enter2((unsigned)fd, submit, wait_nr, flags, (sigset_t *)&arg, sizeof arg);
}

/* valgrind (3.19) holds its global lock across io_uring_enter, so a thread
 * blocked there freezes every other thread of the program (a waker, say) for
 * good. Under valgrind the blocking part of a wait is a ppoll on an eventfd
 * registered with the ring, which the kernel signals when completions or
 * deferred completion work arrive; enters around it never block. */
static int vg_wait(struct tl_drv *d, unsigned submit, const struct __kernel_timespec *ts)
{
	int r = enter(d, submit, 0, NULL);
	uint64_t v;
	ssize_t got = read(d->vg_efd, &v, sizeof v); /* forget signals already seen */
	(void)got;
	if (io_uring_cq_ready(&d->ring) ||
	    (IO_URING_READ_ONCE(*d->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)))
		return r;
	struct pollfd pf = {.fd = d->vg_efd, .events = POLLIN};
	struct timespec t;
	if (ts) {
		t.tv_sec = ts->tv_sec;
		t.tv_nsec = ts->tv_nsec;
	}
	if (ppoll(&pf, 1, ts ? &t : NULL, NULL) < 0 && errno != EINTR)
		return -errno;
	return enter(d, 0, 0, NULL);
}

/* A free SQE, submitting what is queued if the SQ is full; NULL only when
 * the kernel took none of them. */
static struct io_uring_sqe *sqe_get(struct tl_drv *d)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&d->ring);
	if (tl_unlikely(!s)) {
		d->st.sq_full_flushes++;
		io_uring_submit(&d->ring);
		s = io_uring_get_sqe(&d->ring);
	}
	return s;
}

static inline union ur_scratch *scratch_of(struct tl_drv *d, struct io_uring_sqe *s)
{
	return &d->scr[s - d->ring.sq.sqes];
}

static int arm_wake(struct tl_drv *d)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	io_uring_prep_poll_multishot(s, d->wake_fd, POLLIN);
	io_uring_sqe_set_data64(s, (uint64_t)TAG_WAKE << TAG_SHIFT);
	d->wake_armed = 1;
	return 0;
}

/* ---- issuing ops ---- */

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

/* The write queue's head gets an SQE that also carries the writes queued
 * behind it. 1: done with this start entry, 0: no SQE (retry next poll). */
static int issue_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_h *e = UH(h);
	if (o->code == TL_OP_WRITE && wv_done(o)) {
		/* Nothing (left) to send: finished without the kernel. */
		list_del(d, o);
		op_done(d, h, o, (int64_t)o->u.wv.total, 0, TL_NO_LEASE);
		return 1;
	}
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
	e->wn = 1;
	e->wpoll = d->polls;
	if (o->code == TL_OP_SHUTDOWN) {
		io_uring_prep_shutdown(s, h->fd, SHUT_WR);
		io_uring_sqe_set_data64(s, ud_op(o));
		return 1;
	}
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

static void prep_pooled(struct io_uring_sqe *s)
{
	s->flags |= IOSQE_BUFFER_SELECT;
	s->buf_group = 0;
}

/* Give o (on the start list) its SQE. 1: done, 0: no SQE (retry later). */
static int issue(struct tl_drv *d, struct tl_opslot *o)
{
	struct tl_hslot *h = HS(d, o->hidx);
	if (o->code == TL_OP_WRITE || o->code == TL_OP_SHUTDOWN)
		return issue_write(d, h, o);
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return 0;
	int pooled = o->flags & TL_OPF_POOLED, multi = o->flags & TL_OPF_MULTI;
	switch (o->code) {
	case TL_OP_ACCEPT:
		if (multi)
			io_uring_prep_multishot_accept(s, h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		else
			io_uring_prep_accept(s, h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		break;
	case TL_OP_READ:
		if (!pooled) {
			io_uring_prep_recv(s, h->fd, o->u.rw.buf, o->u.rw.len, 0);
		} else if (UO(o)->oneshot && UO(o)->try_lease && d->nspare) {
			/* Data is probably there (see sort_reads): receive it into
			 * a lease taken here, which spares the kernel its buffer
			 * selection, and come back with -EAGAIN rather than
			 * parking a poll while holding the lease. */
			uint32_t id = d->spare[--d->nspare];
			UO(o)->tlease = id;
			io_uring_prep_recv(s, h->fd, d->lease_base + (size_t)id * d->lease_size,
					   d->lease_size, MSG_DONTWAIT);
		} else {
			if (multi && !UO(o)->oneshot)
				io_uring_prep_recv_multishot(s, h->fd, NULL, 0, 0);
			else
				io_uring_prep_recv(s, h->fd, NULL, d->lease_size, 0);
			prep_pooled(s);
		}
		break;
	case TL_OP_SEND: {
		union ur_scratch *sc = scratch_of(d, s);
		memset(&sc->w.mh, 0, sizeof sc->w.mh);
		sc->w.iov[0].iov_base = o->u.dg.buf;
		sc->w.iov[0].iov_len = o->u.dg.len;
		sc->w.mh.msg_name = &o->u.dg.addr;
		sc->w.mh.msg_namelen = tl_addr_len(&o->u.dg.addr);
		sc->w.mh.msg_iov = sc->w.iov;
		sc->w.mh.msg_iovlen = 1;
		io_uring_prep_sendmsg(s, h->fd, &sc->w.mh, MSG_NOSIGNAL);
		break;
	}
	case TL_OP_RECV: {
		struct ur_msg *m = &d->msg[o->idx];
		memset(m, 0, sizeof *m);
		m->iov.iov_base = pooled ? NULL : o->u.dg.buf;
		m->iov.iov_len = pooled ? d->lease_size : o->u.dg.len;
		m->mh.msg_name = &o->u.dg.addr;
		m->mh.msg_namelen = sizeof o->u.dg.addr;
		m->mh.msg_iov = &m->iov;
		m->mh.msg_iovlen = 1;
		io_uring_prep_recvmsg(s, h->fd, &m->mh, 0);
		if (pooled)
			prep_pooled(s);
		break;
	}
	default: /* not reached: connect, writes and shutdown are issued elsewhere */
		io_uring_prep_nop(s);
		break;
	}
	io_uring_sqe_set_data64(s, ud_op(o));
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
	return 1;
}

/* Turn the start list into SQEs (and re-arm the wake poll if it ended). */
static void run_starts(struct tl_drv *d)
{
	if (!d->wake_armed && arm_wake(d) < 0)
		return;
	while (d->start.head != TL_NIL)
		if (!issue(d, OP(d, d->start.head)))
			break;
}

/* Embedded loops are not polled by their host until the ring fd is
 * readable, so nothing may wait in the SQ for the next turn. */
static void flush_embed(struct tl_drv *d)
{
	run_starts(d);
	if (io_uring_sq_ready(&d->ring))
		io_uring_submit(&d->ring);
}

/* ---- completions ---- */

/* Multishot accepts parked on EMFILE/ENFILE go again when the loop releases
 * a descriptor, or after FDWAIT_RETRY_NS whatever freed one (another loop, a
 * raised limit): a slow timed retry, never a busy loop. */
#define FDWAIT_RETRY_NS (100 * 1000 * 1000)

static void retry_fdwait(struct tl_drv *d)
{
	while (d->fdwait.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->fdwait.head);
		list_del(d, o);
		list_add(d, o, ST_START);
	}
}

static int accept_soft(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

static int accept_retry(int e)
{
	return e == ECONNABORTED || e == EINTR || e == EAGAIN;
}

/* The op a CQE belongs to, or NULL when it is stale. */
static struct tl_opslot *op_of(struct tl_drv *d, uint64_t ud)
{
	uint32_t idx = (uint32_t)ud & (TL_ID_MAX_SLOTS - 1);
	if (idx >= d->max_ops)
		return NULL;
	struct tl_opslot *o = OP(d, idx);
	if (!(o->flags & TL_OPF_LIVE) || o->gen != (uint16_t)(ud >> TL_ID_SLOT_BITS) ||
	    UO(o)->st != ST_KERNEL)
		return NULL;
	return o;
}

/* Would this CQE of o become a nonterminal event (and so need room)? */
static int wants_room(const struct tl_opslot *o, int res)
{
	if (!(o->flags & TL_OPF_MULTI) || (o->flags & TL_OPF_CANCEL))
		return 0;
	if (o->code == TL_OP_READ)
		return res > 0;
	if (o->code == TL_OP_ACCEPT)
		return res >= 0 || accept_soft(-res);
	return 0;
}

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

/* A deferred read tries a lease of ours with MSG_DONTWAIT. A try that
 * misses costs a CQE, a second recv and a poll of latency. A peer that
 * answers within our turn makes tries hit; one slower than our turns (a
 * loaded client, a person, a long path) makes them miss, and its messages
 * are best caught by a receive that stays armed: it costs no SQE per
 * message, and the kernel completes it in the order messages arrive, which
 * keeps a slow peer's many streams answered first come, first served. So a
 * read's score starts at TRY_START, gains 1 per hit (up to TRY_MAX) and
 * loses TRY_MISS per miss; below TRY_MISS the read turns multishot. It
 * takes a run of misses: a fast peer's misses come in short bursts (a
 * scheduling hiccup), and streams that switched on those switched back and
 * forth, each switch costing misses of its own. The peer may catch up:
 * when TL_URING_FAST_RUN messages in a row come within TL_URING_FAST_GAP
 * polls of the one that sent our answer, the driver cancels that multishot
 * receive itself and defers the read again (see retry_deferred). */
#define TRY_START 24
#define TRY_MISS 4
#define TRY_MAX 32

/* A deferred try of o found the socket empty. */
static void try_failed(struct tl_drv *d, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	d->st.read_tries_missed++;
	u->score = u->score > TRY_MISS ? u->score - TRY_MISS : 0;
	if (u->score < TRY_MISS) {
		u->oneshot = 0;
		u->sr.slow = 1;
		u->sr.fast = 0;
		d->st.slow_reads++;
	}
}

/* Slow multishot read o has a fast peer again: cancel its receive, so that
 * its next message is read the deferred way (on_read). */
static void retry_deferred(struct tl_drv *d, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	if (u->cancel_sent)
		return;
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return; /* the SQ is full and the kernel took none: next message */
	io_uring_prep_cancel64(s, ud_op(o), 0);
	io_uring_sqe_set_data64(s, (uint64_t)TAG_CANCEL << TAG_SHIFT);
	u->cancel_sent = 1;
	u->sr.retry = 1;
	u->sr.slow = 0;
	d->st.cancels++;
	d->st.slow_retries++;
}

/* The most one recv of stream read o can return. */
static uint32_t read_cap(const struct tl_drv *d, const struct tl_opslot *o)
{
	return (o->flags & TL_OPF_POOLED) ? d->lease_size : o->u.rw.len;
}

/* Stream reads start as one recv per request, and each ended with less
 * than a full buffer waits on the later list until the host has seen its
 * data. Then, at the start of the next poll:
 * - the host queued a write on the same stream (a request answered): the
 *   peer's next message cannot come before it has our answer, so a recv
 *   issued now would only find the socket empty and park a poll in the
 *   kernel, to be woken and run as task work when the message comes.
 *   Issued one poll later, after the answer went out, it usually finds the
 *   message there and completes inline (ST_DEFER, counted deferred_reads);
 * - nothing was written back (a proxy's stream, a one-way feed): the read
 *   becomes multishot for good, its poll staying armed between messages
 *   (counted multishot_reads).
 * A full buffer means more is waiting: that read goes again at once. A
 * deferred read keeps the poll after it from blocking, so it is in the
 * kernel one turn later whatever happens to the write. */
static int sort_reads(struct tl_drv *d)
{
	while (d->defer.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->defer.head);
		list_del(d, o);
		list_add(d, o, ST_START);
	}
	while (d->later.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->later.head);
		list_del(d, o);
		if (UH(HS(d, o->hidx))->whead != TL_NIL) {
			d->st.deferred_reads++;
			UO(o)->try_lease = 1;
			list_add(d, o, ST_DEFER);
			continue;
		}
		if (o->flags & TL_OPF_POOLED) {
			UO(o)->oneshot = 0;
			d->st.multishot_reads++;
		}
		list_add(d, o, ST_START);
	}
	return d->defer.head != TL_NIL;
}

/* A pooled read found no buffer: wait for one, unless some came back since
 * or the window was too small for the load. */
static void park_for_buffer(struct tl_drv *d, struct tl_opslot *o)
{
	d->st.enobufs++;
	if (d->nspare && d->br_win < d->lease_count) {
		d->br_win = d->br_win * 2 < d->lease_count ? d->br_win * 2 : d->lease_count;
		top_up(d);
	}
	list_add(d, o, d->br_avail ? ST_START : ST_BUFWAIT);
}

static void on_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
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
			/* TCP_NODELAY comes from the listener (see ur_open). */
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
			 * descriptor is released (see retry_fdwait), not in a
			 * busy loop. */
			tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
			if (!more) {
				if (d->fdwait.head == TL_NIL)
					d->fdwait_at = ur_now(d) + FDWAIT_RETRY_NS;
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

static void on_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf)
{
	int more = cf & IORING_CQE_F_MORE;
	uint32_t lease = (cf & IORING_CQE_F_BUFFER) ? cf >> IORING_CQE_BUFFER_SHIFT : TL_NO_LEASE;
	if (lease != TL_NO_LEASE)
		d->br_avail--;
	if (!more)
		UO(o)->st = ST_IDLE;
	if (!more && UO(o)->sr.retry) {
		/* The multishot receive retry_deferred cancelled has ended
		 * (cancelled, or by itself first): the read is one-shot again. */
		UO(o)->sr.retry = 0;
		UO(o)->oneshot = 1;
		UO(o)->score = TRY_START;
		if (res == -ECANCELED && !(o->flags & TL_OPF_CANCEL)) {
			/* Tried one poll later, after any answer the host gives
			 * to the messages it has. */
			UO(o)->try_lease = 1;
			list_add(d, o, ST_DEFER);
			return;
		}
	}
	if (UO(o)->tlease != TL_NO_LEASE) {
		lease = UO(o)->tlease;
		UO(o)->tlease = TL_NO_LEASE;
		if (res == -EAGAIN) {
			/* Nothing there yet: wait for it the usual way, with a
			 * buffer chosen by the kernel when data comes. */
			recycle(d, lease);
			UO(o)->try_lease = 0;
			try_failed(d, o);
			if (o->flags & TL_OPF_CANCEL)
				op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
			else
				list_add(d, o, ST_START);
			return;
		}
		if (res > 0 && UO(o)->score < TRY_MAX)
			UO(o)->score++;
	}
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
		if (more) {
			/* A slow read's peer answering as fast as a try
			 * needs (see try_failed)? */
			if (UO(o)->sr.slow) {
				if (d->polls - UH(h)->wpoll > TL_URING_FAST_GAP)
					UO(o)->sr.fast = 0;
				else if (++UO(o)->sr.fast >= TL_URING_FAST_RUN)
					retry_deferred(d, o);
			}
			return;
		}
		if (UO(o)->oneshot && !(o->flags & TL_OPF_CANCEL)) {
			int full = (uint32_t)res >= read_cap(d, o);
			UO(o)->try_lease = (uint8_t)full;
			list_add(d, o, full ? ST_START : ST_LATER);
		} else
			rearm(d, h, o);
		return;
	}
	if (lease != TL_NO_LEASE)
		recycle(d, lease);
	if (more)
		return;
	if (res == -ENOBUFS && (o->flags & TL_OPF_POOLED) && !(o->flags & TL_OPF_CANCEL)) {
		park_for_buffer(d, o);
		return;
	}
	op_done(d, h, o, res, res == 0 ? TL_F_EOF : 0, TL_NO_LEASE);
}

static void on_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf)
{
	uint32_t lease = (cf & IORING_CQE_F_BUFFER) ? cf >> IORING_CQE_BUFFER_SHIFT : TL_NO_LEASE;
	if (lease != TL_NO_LEASE)
		d->br_avail--;
	UO(o)->st = ST_IDLE;
	if (res >= 0) {
		struct ur_msg *m = &d->msg[o->idx];
		kernel_wrote(d, &m->mh, sizeof m->mh);
		socklen_t alen = m->mh.msg_namelen;
		kernel_wrote(d, &o->u.dg.addr, alen < sizeof o->u.dg.addr ? alen : sizeof o->u.dg.addr);
		if (lease != TL_NO_LEASE && res == 0) {
			recycle(d, lease);
			lease = TL_NO_LEASE;
		}
		if (lease != TL_NO_LEASE) {
			tl__drv_lease_mark(d->loop, lease);
			kernel_wrote(d, d->lease_base + (size_t)lease * d->lease_size, (size_t)res);
		} else if (o->u.dg.buf) {
			kernel_wrote(d, o->u.dg.buf, (size_t)res);
		}
		op_done(d, h, o, res, 0, lease);
		return;
	}
	if (lease != TL_NO_LEASE)
		recycle(d, lease);
	if (res == -ENOBUFS && (o->flags & TL_OPF_POOLED) && !(o->flags & TL_OPF_CANCEL)) {
		park_for_buffer(d, o);
		return;
	}
	op_done(d, h, o, res, 0, TL_NO_LEASE);
}

static void on_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res)
{
	UH(h)->connecting = 0;
	op_done(d, h, o, res, 0, TL_NO_LEASE);
}

/* The write SQE of h's queue head came back: spread its bytes over the ops
 * it covered, in order; finish those fully sent, keep the rest queued. */
static void on_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *head, int res)
{
	struct ur_h *e = UH(h);
	uint32_t covered = e->wn;
	e->wn = 0;
	size_t n = res > 0 ? (size_t)res : 0;
	int err = res < 0 && res != -EAGAIN && res != -EINTR ? res : 0;
	if (head->code == TL_OP_SHUTDOWN) {
		op_done(d, h, head, res, 0, TL_NO_LEASE);
		return;
	}
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

static void drain_wake(struct tl_drv *d, unsigned cf)
{
	uint64_t v;
	ssize_t r = read(d->wake_fd, &v, sizeof v);
	(void)r;
	if (!(cf & IORING_CQE_F_MORE))
		d->wake_armed = 0; /* run_starts re-arms it */
}

/* A CQE that belongs to no op: the wake poll, the embed timeout, an
 * ASYNC_CANCEL's own result, or an op's CQE whose op is gone. */
static void on_other(struct tl_drv *d, const struct io_uring_cqe *c)
{
	switch (c->user_data >> TAG_SHIFT) {
	case TAG_WAKE:
		drain_wake(d, c->flags);
		break;
	case TAG_TIMER:
		/* Fired or removed: either way the one we track is gone. */
		if ((c->user_data & 0xffffffffu) == (d->tmo_seq & 0xffffffffu)) {
			d->tmo_armed = 0;
			d->tmo_at = UINT64_MAX;
		}
		break;
	case TAG_OP:
		/* Stale: keep the buffer it may hold. */
		if (c->flags & IORING_CQE_F_BUFFER) {
			d->br_avail--;
			recycle(d, c->flags >> IORING_CQE_BUFFER_SHIFT);
		}
		break;
	default: /* ASYNC_CANCEL results: the target's own CQE is what counts */
		break;
	}
}

/* A native file request's terminal. An open that succeeded after its
 * cancellation was asked for gives its descriptor back here: the host gets
 * -ECANCELED and must never see (or leak) it. */
static void fs_done(struct tl_drv *d, struct tl_opslot *o, int64_t res)
{
	struct ur_o *u = UO(o);
	u->st = ST_IDLE;
	if (res > 0 && u->kbuf)
		kernel_wrote(d, u->kbuf, (size_t)res < u->klen ? (size_t)res : u->klen);
	else if (res == 0 && u->kbuf && u->klen == sizeof(struct statx))
		kernel_wrote(d, u->kbuf, u->klen);
	if (res >= 0 && (o->flags & TL_OPF_CANCEL) && u->fs_code == TL_FS_OPEN) {
		close((int)res);
		res = -ECANCELED;
		d->st.fs_open_closed++;
	}
	tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
}

static void on_op(struct tl_drv *d, struct tl_opslot *o, const struct io_uring_cqe *c)
{
	if (!(c->flags & IORING_CQE_F_MORE) && UO(o)->cancel_sent) {
		UO(o)->cancel_sent = 0;
		d->st.kernel_acks++;
	}
	if (o->code == TL_OP_POOL) { /* no handle */
		fs_done(d, o, c->res);
		return;
	}
	struct tl_hslot *h = HS(d, o->hidx);
	switch (o->code) {
	case TL_OP_ACCEPT:
		on_accept(d, h, o, c->res, c->flags);
		break;
	case TL_OP_READ:
		on_read(d, h, o, c->res, c->flags);
		break;
	case TL_OP_RECV:
		on_recv(d, h, o, c->res, c->flags);
		break;
	case TL_OP_CONNECT:
		on_connect(d, h, o, c->res);
		break;
	case TL_OP_WRITE:
	case TL_OP_SHUTDOWN:
		on_write(d, h, o, c->res);
		break;
	default: /* TL_OP_SEND */
		op_done(d, h, o, c->res, 0, TL_NO_LEASE);
		break;
	}
}

/* Take CQEs in order until the CQ is empty or a nonterminal event finds no
 * room (then it and those behind it stay in the CQ for the next turn). */
static uint32_t reap(struct tl_drv *d, int *stopped)
{
	struct io_uring *r = &d->ring;
	unsigned mask = r->cq.ring_mask, head = *r->cq.khead, n = 0;
	for (;;) {
		unsigned tail = io_uring_smp_load_acquire(r->cq.ktail);
		if (head == tail)
			break;
		while (head != tail) {
			struct io_uring_cqe c = r->cq.cqes[head & mask];
			struct tl_opslot *o = NULL;
			if (c.user_data >> TAG_SHIFT == TAG_OP) {
				o = op_of(d, c.user_data);
				if (o && wants_room(o, c.res) && !tl__drv_room(d->loop)) {
					d->st.room_stops++;
					*stopped = 1;
					return n;
				}
			}
			head++;
			io_uring_smp_store_release(r->cq.khead, head);
			n++;
			if (o)
				on_op(d, o, &c);
			else
				on_other(d, &c);
		}
	}
	return n;
}

static int ur_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	struct io_uring *r = &d->ring;
	if (tl_unlikely(d->fdwait.head != TL_NIL)) {
		uint64_t now = ur_now(d);
		if (now >= d->fdwait_at)
			retry_fdwait(d);
		else if (timeout_ns < 0 || (uint64_t)timeout_ns > d->fdwait_at - now)
			timeout_ns = (int64_t)(d->fdwait_at - now);
	}
	d->polls++;
	int deferred = sort_reads(d);
	run_starts(d);
	unsigned submit = flush_sq(r);
	unsigned kf = IO_URING_READ_ONCE(*r->sq.kflags);
	/* CQEs already there (left by a turn that ran out of room, or
	 * overflowed): never block on top of them. */
	int block = timeout_ns != 0 && !deferred && !io_uring_cq_ready(r) &&
		    !(kf & IORING_SQ_CQ_OVERFLOW);
	int ret = 0;
	if (block) {
		struct __kernel_timespec ts;
		if (timeout_ns > 0) {
			ts.tv_sec = timeout_ns / 1000000000;
			ts.tv_nsec = timeout_ns % 1000000000;
		}
		info->waits++;
		if (d->vg_efd >= 0)
			ret = vg_wait(d, submit, timeout_ns > 0 ? &ts : NULL);
		else
			ret = enter(d, submit, 1, timeout_ns > 0 ? &ts : NULL);
	} else {
		info->discovery_polls++;
		/* With TASKRUN_FLAG the kernel says when deferred completions
		 * wait for us; otherwise a peek at the CQ is all it takes. */
		if (submit || (kf & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)))
			ret = enter(d, submit, 0, NULL);
	}
	if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY &&
	    ret != -ENOMEM)
		return ret;
	int stopped = 0;
	uint32_t n = reap(d, &stopped);
	/* The kernel kept CQEs that did not fit (IORING_FEAT_NODROP): pull them
	 * in while there is room, or they would wait for the next enter. */
	while (!stopped && (IO_URING_READ_ONCE(*r->sq.kflags) & IORING_SQ_CQ_OVERFLOW)) {
		d->st.overflow_flushes++;
		enter(d, flush_sq(r), 0, NULL);
		uint32_t k = reap(d, &stopped);
		n += k;
		if (!k)
			break;
	}
	if (block && !n)
		info->zero_event_waits++;
	if (d->embed)
		flush_embed(d);
	return 0;
}

/* ---- the driver interface ---- */

static void reset_h(struct tl_hslot *h)
{
	struct ur_h *e = UH(h);
	memset(e, 0, sizeof *e);
	e->rhead = e->rtail = e->whead = e->wtail = TL_NIL;
}

static int ur_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *s)
{
	int fd = tl__sock_open(s);
	if (fd < 0)
		return fd;
	/* Accepted sockets inherit TCP_NODELAY from their listener on Linux:
	 * set it once here instead of once per connection. */
	if (s->kind == TL_OPEN_TCP_LISTEN)
		tl__sock_stream_opts(fd, 0);
	h->fd = fd;
	reset_h(h);
	return 0;
}

static int ur_attach(struct tl_drv *d, struct tl_hslot *h)
{
	reset_h(h);
	return 0;
}

static void ur_release(struct tl_drv *d, struct tl_hslot *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	/* A descriptor came free: accepts that hit EMFILE may go on. */
	retry_fdwait(d);
	if (d->embed)
		flush_embed(d);
}

static int ur_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_local(h->fd, out);
}

/* Connect gets its SQE now: the Unix path it names is only valid during
 * submit (the SQE's scratch slot keeps the address until the kernel copies
 * it). */
static int issue_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
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

static int ur_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	struct ur_h *e = UH(h);
	memset(u, 0, sizeof *u);
	u->qnext = u->lnext = u->lprev = TL_NIL;
	/* Embedded loops keep multishot reads: their host polls the ring's
	 * descriptor, and a deferred read would leave nothing to wake it. */
	u->oneshot = o->code == TL_OP_READ && (o->flags & TL_OPF_MULTI) && !d->embed;
	u->try_lease = u->oneshot; /* a new stream may have data waiting */
	u->score = TRY_START + TRY_MISS; /* its first try may well miss */
	u->tlease = TL_NO_LEASE;
	if (o->code == TL_OP_CONNECT) {
		int r = issue_connect(d, h, o);
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
		flush_embed(d);
	return 0;
}

static int ur_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ur_o *u = UO(o);
	if (o->code == TL_OP_POOL && u->st != ST_KERNEL) {
		/* Not reached today (fs_submit prepares the SQE at once), but a
		 * request the kernel does not hold is acknowledged at once. */
		fs_done(d, o, -ECANCELED);
		return 0;
	}
	if (u->st != ST_KERNEL) {
		/* Not in the kernel: acknowledged at once. */
		list_del(d, o);
		op_done(d, h, o, -ECANCELED, 0, TL_NO_LEASE);
		return 0;
	}
	/* A write riding in its head's SQE is cancelled through that SQE. */
	struct tl_opslot *owner = o;
	if (h && is_queued(h) && !is_rside(o) && UH(h)->whead != TL_NIL)
		owner = OP(d, UH(h)->whead);
	if (UO(owner)->cancel_sent)
		return 0;
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	io_uring_prep_cancel64(s, ud_op(owner), 0);
	io_uring_sqe_set_data64(s, (uint64_t)TAG_CANCEL << TAG_SHIFT);
	UO(owner)->cancel_sent = 1;
	d->st.cancels++;
	if (d->embed)
		flush_embed(d);
	return 0;
}

/* Opcodes for the native file requests (0: none, stays on the pool). */
static const uint8_t fs_opcode[TL_FS_REQ_COUNT_] = {
	[TL_FS_OPEN] = IORING_OP_OPENAT,   [TL_FS_CLOSE] = IORING_OP_CLOSE,
	[TL_FS_READ] = IORING_OP_READ,     [TL_FS_WRITE] = IORING_OP_WRITE,
	[TL_FS_PREAD] = IORING_OP_READ,    [TL_FS_PWRITE] = IORING_OP_WRITE,
	[TL_FS_STAT] = IORING_OP_STATX,    [TL_FS_FSTAT] = IORING_OP_STATX,
	[TL_FS_FSYNC] = IORING_OP_FSYNC,   [TL_FS_UNLINK] = IORING_OP_UNLINKAT,
	[TL_FS_RENAME] = IORING_OP_RENAMEAT, [TL_FS_MKDIR] = IORING_OP_MKDIRAT,
	[TL_FS_RMDIR] = IORING_OP_UNLINKAT,
};

/* Which file requests this ring can run, from the kernel's probe (once per
 * ring, at init): a kernel without an opcode leaves that request on the
 * pool rather than failing it with -EINVAL. */
static uint32_t probe_fs(struct io_uring *r)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(r);
	uint32_t ok = 0;
	if (!p)
		return 0;
	for (unsigned c = 1; c < TL_FS_REQ_COUNT_; c++)
		if (fs_opcode[c] && io_uring_opcode_supported(p, fs_opcode[c]))
			ok |= 1u << c;
	io_uring_free_probe(p);
	return ok;
}

/* Prepare the request's SQE now (like a connect): everything it points at
 * lives in the op's job record or the caller's buffer until the terminal,
 * and the turn's single enter submits it with the rest. */
static int ur_fs_submit(struct tl_drv *d, struct tl_opslot *o, const struct tl_fs_native_req *q)
{
	if (q->code >= TL_FS_REQ_COUNT_ || !(d->fs_ok & (1u << q->code)))
		return -ENOTSUP;
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	struct ur_o *u = UO(o);
	memset(u, 0, sizeof *u);
	u->qnext = u->lnext = u->lprev = TL_NIL;
	u->fs_code = q->code; /* for fs_done */
	switch (q->code) {
	case TL_FS_OPEN:
		io_uring_prep_openat(s, AT_FDCWD, q->path, q->flags, (mode_t)q->mode);
		break;
	case TL_FS_CLOSE:
		io_uring_prep_close(s, q->fd);
		break;
	case TL_FS_READ:
	case TL_FS_PREAD:
		/* Offset -1: the file's current position, as read(2). */
		io_uring_prep_read(s, q->fd, q->buf, q->len,
				   q->code == TL_FS_READ ? (uint64_t)-1 : q->off);
		u->kbuf = q->buf;
		u->klen = q->len;
		break;
	case TL_FS_WRITE:
	case TL_FS_PWRITE:
		io_uring_prep_write(s, q->fd, q->buf, q->len,
				    q->code == TL_FS_WRITE ? (uint64_t)-1 : q->off);
		break;
	case TL_FS_STAT:
		io_uring_prep_statx(s, AT_FDCWD, q->path, 0, STATX_BASIC_STATS, q->stx);
		u->kbuf = q->stx;
		u->klen = sizeof *q->stx;
		break;
	case TL_FS_FSTAT:
		io_uring_prep_statx(s, q->fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, q->stx);
		u->kbuf = q->stx;
		u->klen = sizeof *q->stx;
		break;
	case TL_FS_FSYNC:
		io_uring_prep_fsync(s, q->fd, 0);
		break;
	case TL_FS_UNLINK:
		io_uring_prep_unlinkat(s, AT_FDCWD, q->path, 0);
		break;
	case TL_FS_RMDIR:
		io_uring_prep_unlinkat(s, AT_FDCWD, q->path, AT_REMOVEDIR);
		break;
	case TL_FS_RENAME:
		io_uring_prep_renameat(s, AT_FDCWD, q->path, AT_FDCWD, q->path2, 0);
		break;
	default: /* TL_FS_MKDIR: the probe let nothing else through */
		io_uring_prep_mkdirat(s, AT_FDCWD, q->path, (mode_t)q->mode);
		break;
	}
	io_uring_sqe_set_data64(s, ud_op(o));
	u->st = ST_KERNEL;
	d->st.fs_native++;
	if (d->embed)
		flush_embed(d);
	return 0;
}

static void ur_lease_returned(struct tl_drv *d, uint32_t id)
{
	recycle(d, id);
	if (d->bufwait.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->bufwait.head);
		list_del(d, o);
		list_add(d, o, ST_START);
		if (d->embed)
			flush_embed(d);
	}
}

static int ur_embed_fd(struct tl_drv *d)
{
	return d->ring.ring_fd;
}

/* Nobody waits in poll() for an embedded loop: a timeout request posts a
 * CQE at the next deadline so that the ring fd turns readable then. Each
 * deadline gets a fresh request (its sequence number in user_data) and the
 * previous one is removed, so a late CQE of an old one is recognised. */
static void ur_embed_deadline(struct tl_drv *d, uint64_t at)
{
	if (at == d->tmo_at)
		return;
	if (d->tmo_armed) {
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			return;
		io_uring_prep_timeout_remove(s, (uint64_t)TAG_TIMER << TAG_SHIFT | (d->tmo_seq & 0xffffffffu),
					     0);
		io_uring_sqe_set_data64(s, (uint64_t)TAG_TIMER_CTL << TAG_SHIFT);
		d->tmo_armed = 0;
	}
	d->tmo_at = UINT64_MAX;
	if (at != UINT64_MAX) {
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			return;
		union ur_scratch *sc = scratch_of(d, s);
		sc->ts.tv_sec = (long long)(at / 1000000000u);
		sc->ts.tv_nsec = (long long)(at % 1000000000u);
		io_uring_prep_timeout(s, &sc->ts, 0, IORING_TIMEOUT_ABS);
		d->tmo_seq++;
		io_uring_sqe_set_data64(s, (uint64_t)TAG_TIMER << TAG_SHIFT | (d->tmo_seq & 0xffffffffu));
		d->tmo_armed = 1;
		d->tmo_at = at;
	}
	flush_embed(d);
}

/* ---- setup ---- */

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

/* Set the ring up with the best flags the kernel takes. Each refusal
 * (-EINVAL: a flag it does not know) drops the newest flag still asked for
 * and tries again; other errors (EPERM from a sysctl or seccomp, ENOMEM,
 * ENOSYS) mean no io_uring at all. */
static int setup_ring(struct tl_drv *d, uint32_t sq, uint32_t cq, int embed)
{
	/* Newest first: a kernel that lacks one flag lacks every newer one. */
	uint32_t order[] = {
		debug_over.extra_flags,
		IORING_SETUP_DEFER_TASKRUN, /* 6.1: completions run only when we enter */
		IORING_SETUP_SINGLE_ISSUER, /* 6.0 */
		IORING_SETUP_TASKRUN_FLAG,  /* 5.19: lets a discovery poll skip the syscall */
		IORING_SETUP_COOP_TASKRUN,  /* 5.19: no IPI to run completions */
		IORING_SETUP_SUBMIT_ALL,    /* 5.18 */
		IORING_SETUP_CQSIZE,        /* 5.5 */
	};
	uint32_t flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | IORING_SETUP_SUBMIT_ALL |
			 IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
			 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | debug_over.extra_flags;
	/* An embedded loop's ring fd must turn readable on its own while the
	 * host sleeps elsewhere: completions may not wait for our enter
	 * (DEFER_TASKRUN) nor for the next kernel entry (COOP_TASKRUN). */
	if (embed)
		flags &= ~(IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN |
			   IORING_SETUP_TASKRUN_FLAG);
	for (size_t k = 0;;) {
		struct io_uring_params p;
		memset(&p, 0, sizeof p);
		p.flags = flags;
		p.cq_entries = cq;
		int r = io_uring_queue_init_params(sq, &d->ring, &p);
		if (r == 0) {
			d->flags = flags;
			if ((p.features & (IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG |
					   IORING_FEAT_FAST_POLL | IORING_FEAT_SUBMIT_STABLE)) !=
			    (IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG | IORING_FEAT_FAST_POLL |
			     IORING_FEAT_SUBMIT_STABLE)) {
				io_uring_queue_exit(&d->ring);
				return -ENOTSUP;
			}
			return 0;
		}
		if (r != -EINVAL)
			return r;
		while (k < sizeof order / sizeof order[0] && !(flags & order[k]))
			k++;
		if (k == sizeof order / sizeof order[0])
			return r;
		flags &= ~order[k];
		d->dropped |= order[k];
		/* DEFER_TASKRUN needs SINGLE_ISSUER; TASKRUN_FLAG needs one of
		 * the two task-run modes. */
		if (!(flags & IORING_SETUP_SINGLE_ISSUER))
			flags &= ~IORING_SETUP_DEFER_TASKRUN;
		if (!(flags & (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN)))
			flags &= ~IORING_SETUP_TASKRUN_FLAG;
	}
}

/* Multishot receive (Linux 6.0) has no feature bit; IORING_OP_SEND_ZC came
 * in the same release, and the probe knows it. */
static int has_multishot_recv(struct io_uring *r)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(r);
	if (!p)
		return 0;
	int ok = io_uring_opcode_supported(p, IORING_OP_SEND_ZC);
	io_uring_free_probe(p);
	return ok;
}

static void ur_destroy(struct tl_drv *d)
{
	if (d->br)
		io_uring_unregister_buf_ring(&d->ring, 0);
	io_uring_queue_exit(&d->ring);
	if (d->vg_efd >= 0)
		close(d->vg_efd);
	free(d->br);
	free(d->scr);
	free(d->msg);
	free(d->spare);
	free(d);
}

static int ur_init(tl_loop *loop, const tl_config *cfg, int wake_fd, struct tl_drv **out)
{
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->wake_fd = wake_fd;
	d->embed = cfg->embed;
	d->max_ops = cfg->max_ops;
	d->ops = tl__drv_op(loop, 0);
	d->hs = tl__drv_handle(loop, 0);
	d->vg_efd = -1;
	d->tmo_at = UINT64_MAX;
	d->start = d->bufwait = d->fdwait = d->later = d->defer = (struct ur_list){TL_NIL, TL_NIL};
	d->send_flags = MSG_NOSIGNAL | (debug_over.no_waitall ? 0 : MSG_WAITALL);
	/* The SQ holds what one turn prepares (it is flushed when full); the CQ
	 * absorbs multishot bursts between turns, and overflow beyond it is
	 * kept by the kernel (IORING_FEAT_NODROP) and pulled in by poll. */
	uint32_t sq = pow2_at_least(2 * cfg->events_per_turn);
	sq = sq < 128 ? 128 : sq > 4096 ? 4096 : sq;
	uint32_t cq = 4 * sq;
	if (debug_over.sq_entries)
		sq = debug_over.sq_entries;
	if (debug_over.cq_entries)
		cq = debug_over.cq_entries;
	int r = setup_ring(d, sq, cq, cfg->embed);
	if (r < 0) {
		free(d);
		return r;
	}
	r = -ENOTSUP;
	if (!has_multishot_recv(&d->ring))
		goto fail;
	d->fs_ok = debug_over.no_fs_native ? 0 : probe_fs(&d->ring);
	/* Enter by registered index: no file lookup per io_uring_enter. */
	d->reg_ring = io_uring_register_ring_fd(&d->ring) == 1;

	uint32_t cnt;
	d->lease_base = tl__drv_lease_base(loop, &d->lease_size, &cnt);
	d->lease_count = cnt;
	d->br_entries = pow2_at_least(cnt);
	size_t brsz = ((size_t)d->br_entries * sizeof(struct io_uring_buf) + 4095) & ~(size_t)4095;
	d->br = aligned_alloc(4096, brsz);
	d->scr = calloc(d->ring.sq.ring_entries, sizeof *d->scr);
	d->msg = calloc(cfg->max_ops, sizeof *d->msg);
	d->spare = malloc(cnt * sizeof *d->spare);
	r = -ENOMEM;
	if (!d->br || !d->scr || !d->msg || !d->spare)
		goto fail;
	memset(d->br, 0, brsz);
	struct io_uring_buf_reg reg = {
		.ring_addr = (uint64_t)(uintptr_t)d->br,
		.ring_entries = d->br_entries,
		.bgid = 0,
	};
	r = io_uring_register_buf_ring(&d->ring, &reg, 0);
	if (r < 0) {
		free(d->br);
		d->br = NULL;
		goto fail;
	}
	io_uring_buf_ring_init(d->br);
	for (uint32_t i = 0; i < cnt; i++)
		d->spare[d->nspare++] = cnt - 1 - i; /* low ids first */
	d->br_win = cnt < UR_BUF_WINDOW ? cnt : UR_BUF_WINDOW;
	top_up(d);
	if ((r = arm_wake(d)) < 0)
		goto fail;
	d->vg = under_valgrind() != 0;
	if (d->vg) {
		d->vg_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (d->vg_efd >= 0 && io_uring_register_eventfd(&d->ring, d->vg_efd) < 0) {
			close(d->vg_efd);
			d->vg_efd = -1;
		}
	}
	if (d->embed)
		io_uring_submit(&d->ring);
	d->st.sq_entries = d->ring.sq.ring_entries;
	d->st.cq_entries = d->ring.cq.ring_entries;
	d->st.buf_entries = d->br_entries;
	*out = d;
	return 0;
fail:
	ur_destroy(d);
	return r;
}

/* ---- hooks (drivers/uring.h) ---- */

void tl__uring_debug(const struct tl_uring_debug *dbg)
{
	if (dbg)
		debug_over = *dbg;
	else
		memset(&debug_over, 0, sizeof debug_over);
}

uint32_t tl__uring_flags(const tl_loop *loop, uint32_t *dropped)
{
	if (loop->dv != &tl__driver_uring)
		return 0;
	if (dropped)
		*dropped = loop->d->dropped;
	return loop->d->flags;
}

int tl__uring_stats(const tl_loop *loop, struct tl_uring_stats *out)
{
	if (loop->dv != &tl__driver_uring)
		return -ENOTSUP;
	*out = loop->d->st;
	return 0;
}

const struct tl_driver tl__driver_uring = {
	.name = "uring",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX | TL_CAP_EMBED | TL_CAP_OS | TL_CAP_KBUF,
	.init = ur_init,
	.destroy = ur_destroy,
	.now = ur_now,
	.open = ur_open,
	.attach = ur_attach,
	.release = ur_release,
	.local_addr = ur_local,
	.submit = ur_submit,
	.cancel = ur_cancel,
	.poll = ur_poll,
	.lease_returned = ur_lease_returned,
	.embed_fd = ur_embed_fd,
	.embed_deadline = ur_embed_deadline,
	.fs_submit = ur_fs_submit,
};
