/* drivers/uring/uring_int.h: the io_uring driver's private structures and hot helpers, seen only by drivers/uring/. */
#ifndef TL_URING_INT_H
#define TL_URING_INT_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <liburing.h>
#include "tl_config.h"
#include "driver.h"
#include "uring.h"
#include "read_policy.h"
#include "sock.h"
#include "dgram_io.h"

/*
 * How the pieces fit; each file explains its own part.
 *
 * queue.c        handles, and the per-handle queues the core's ops join
 * ring.c         the ring's setup, and the turn: the start list becomes SQEs
 *                right before the turn's one io_uring_enter, then the CQEs
 * opdef.c        the opcode table: one row per operation family (its hooks and
 *                flags), the file requests' io_uring opcodes and which of
 *                them run natively rather than on the pool
 * net.c          the network operations, and asking the kernel to cancel
 * read_policy.h  how a stream read picks its next request: a try or an armed recv
 * kbuf.c         the provided-buffer ring pooled reads receive into
 * poll.c         readiness polls of descriptors the loop does not own
 * fs.c           typed file requests run as io_uring opcodes
 * splice.c       splices and sendfiles: polls through the ring, bytes by syscall
 * uring.c        the driver table and the diagnostic hooks (drivers/uring.h)
 *
 * user_data: tag (8 bits) << 56 | op generation (16 bits) << 24 | op slot
 * (24 bits), and for the several receives of one multishot datagram receive
 * its receive slot + 1 (16 bits) << 40 (dgram.c). The tag tells an op's own CQE from an ASYNC_CANCEL's, the wake
 * poll's and the embed timeout's; the generation drops a CQE whose op slot
 * was reused.
 */

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

#define UR_GATHER 16     /* iovecs one send may gather */
_Static_assert(UR_GATHER >= TL_IOV_MAX, "a send always takes the whole head op");
#define TAG_SHIFT 56
enum { TAG_OP = 1, TAG_CANCEL = 2, TAG_WAKE = 3, TAG_TIMER = 4, TAG_TIMER_CTL = 5 };

/* Where an op is (ur_o.st). */
enum {
	ST_IDLE = 0, /* queued behind its handle's head, or finished */
	ST_START,    /* on the start list: gets an SQE at the next poll */
	ST_KERNEL,   /* an SQE or CQE of it is outstanding */
	ST_BUFWAIT,  /* waits for a pooled buffer to come back, or for its stream's
		      * share of the pool (lib/caps.c) */
	ST_FDWAIT,   /* multishot accept waiting for a free descriptor */
	ST_LATER,    /* stream read held until the next poll (TL_RP_HOLD) */
	ST_DEFER,    /* stream read issued at the next poll (TL_RP_DEFER) */
	ST_PAUSED,   /* stream read of a handle over a cap (TL_HF_PAUSED): waits for pause(0) */
};

struct ur_o {
	uint32_t qnext;        /* next op in the handle's queue */
	uint32_t lnext, lprev; /* start / buffer-wait / fd-wait list */
	uint8_t st;
	uint8_t cancel_sent;   /* an ASYNC_CANCEL targets this op's user_data */
	uint8_t fs_code;       /* native file requests: enum tl_fs_req */
	struct tl_rp rp;       /* stream reads: the read policy's state */
	union {
		uint32_t tlease; /* stream read: the lease its try holds (TL_NO_LEASE: none) */
		uint32_t klen;   /* native file requests: bytes at kbuf the kernel */
		struct {         /* multishot datagram receive (dgram.c) */
			uint16_t rx_n;  /* its recvmsg requests in the kernel */
			int16_t rx_err; /* the error that ends it once they are back */
		};
	};
	void *kbuf;            /* native file requests: what the kernel may write
				* (read buffer, statx), for valgrind */
};
_Static_assert(sizeof(struct ur_o) <= sizeof(((struct tl_opslot *)0)->drv), "ur_o fits");

struct ur_h {
	uint32_t rhead, rtail; /* accepts or reads */
	uint32_t whead, wtail; /* connect, writes, shutdown */
	uint32_t wn;           /* ops the write SQE in flight covers (0: none) */
	uint8_t connecting;    /* reads wait for the connect */
	uint32_t wpoll;        /* the poll that issued its last send (tl__rp_gap) */
	uint32_t spl;          /* a splice parked until this source is unpaused, TL_NIL */
	/* A datagram socket's receive depth (dgram.c, depth_seen): how many
	 * recvmsg requests its multishot receive keeps in the kernel, and how
	 * the last reap that brought it datagrams went: its poll, the
	 * datagrams, the requests it had in the kernel. */
	uint8_t rx_depth, rx_got, rx_armed;
	uint32_t rx_seq;
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

/* Per op slot, for datagrams: recvmsg writes the source length
 * and flags back into the msghdr when it completes, so it must outlive the
 * SQE. The array is calloc'ed, so pages of unused slots are never touched. */
struct ur_msg {
	struct msghdr mh;
	struct iovec iov;
	union tl__dg_ctl ctl; /* packet info, GSO and GRO (drivers/dgram_io.h) */
	tl_addr addr;         /* receive slots: the source (one-shot: in the op) */
};

/* Per op slot, for descriptor passing (TL_OP_SEND_FDS, TL_OP_RECV_FDS):
 * the msghdr and its control buffer stay where the SQE points until the
 * CQE (recvmsg writes the control data and its length back at the end).
 * calloc'ed like ur_msg. */
struct ur_fdmsg {
	struct msghdr mh;
	struct iovec iov;
	union tl__fds_ctl ctl;
};

struct tl_drv {
	struct io_uring ring;
	tl_loop *loop;
	tl__os_notifier *wake; /* the loop's notifier */
	int embed, reg_ring, wake_armed;
	int vg;                 /* running under valgrind */
	int vg_efd;             /* see vg_wait; -1 unless under valgrind */
	int send_flags;         /* MSG_NOSIGNAL | MSG_WAITALL */
	uint32_t flags, dropped; /* setup flags kept / refused */
	uint32_t max_ops;
	uint32_t polls;         /* ur_poll calls: a peer's answer time in polls */
	struct tl_opslot *ops;  /* the core's tables: fixed for the loop's life */
	struct tl_hslot *hs;
	struct tl_lease_pool *lpool; /* the pool's counts (lib/caps.c), likewise */
	struct io_uring_buf_ring *br;
	uint32_t br_entries, br_avail; /* buffers on the ring, as far as we know */
	uint32_t br_win;               /* how many br_avail is topped up to */
	uint32_t *spare, nspare;       /* free leases off the ring, most recent on top */
	uint8_t *lease_base;
	uint32_t lease_size, lease_count;
	struct ur_list start, bufwait, fdwait, later, defer, paused;
	uint64_t fdwait_at;       /* when accepts parked on EMFILE try anyway */
	uint64_t tmo_at, tmo_seq; /* embedded loops: the armed timeout, if any */
	int tmo_armed;
	union ur_scratch *scr;
	struct ur_msg *msg;
	struct ur_fdmsg *fdm;
	/* Receive slots of multishot datagram receives (dgram.c): several
	 * recvmsg requests of one op in the kernel at once, each with its own
	 * msghdr; rx_owner[i] is the op slot using slot i (TL_NIL: free). */
	struct ur_msg *rx;
	uint32_t *rx_owner;
	uint16_t *rx_free;
	uint32_t rx_count, rx_nfree;
	uint64_t cqe_ud;        /* user_data of the CQE being handled */
	uint32_t fs_ok;         /* bit per enum tl_fs_req the ring runs natively */
	struct tl_uring_stats st;
};

/* Overrides for rings set up from now on (tl__uring_debug, uring.c). */
extern struct tl_uring_debug tl__ur_debug;

/* What the driver does per operation family: one row of tl__ur_opdefs
 * (opdef.c) each, indexed by the core's opcode; the typed file requests
 * (the core's TL_OP_POOL, no handle) take the row after the network ones. */
struct ur_opdef {
	const char *name;
	uint8_t rside;    /* joins its handle's read queue (else the write queue) */
	uint8_t reads;    /* bytes it read after a cancel still make a nonterminal
			   * event (contract 2.5) */
	uint8_t nohandle; /* its ops have no handle: the hooks get h == NULL */
	/* Take o from the core (driver submit); NULL: the handle queues of
	 * queue.c. 0 or a negative errno. */
	int (*submit)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
	/* Give o, on the start list, its SQE: 1 done with this start entry,
	 * 0 no SQE (it stays on the list for the next poll). NULL: the SQE
	 * is prepared at submission and o is never on the start list. */
	int (*issue)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
	/* o's CQE (result res, CQE flags cf). */
	void (*complete)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			 unsigned cf);
	/* Cancel o (driver cancel); NULL: the common cancel of queue.c. */
	int (*cancel)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
};
enum { UR_ROW_FS = TL_OP_CODES_, UR_ROWS_ };
extern const struct ur_opdef tl__ur_opdefs[UR_ROWS_];

/* o's row of the opcode table. */
static inline const struct ur_opdef *opdef(const struct tl_opslot *o)
{
	return &tl__ur_opdefs[tl_unlikely(o->code == TL_OP_POOL) ? UR_ROW_FS : o->code];
}

static inline struct ur_h *UH(struct tl_hslot *h) { return (struct ur_h *)h->u.drv; }
static inline struct ur_o *UO(struct tl_opslot *o) { return (struct ur_o *)o->drv; }
static inline struct tl_opslot *OP(struct tl_drv *d, uint32_t i) { return &d->ops[i]; }
static inline struct tl_hslot *HS(struct tl_drv *d, uint32_t i) { return &d->hs[i]; }

static inline uint64_t ud_op(const struct tl_opslot *o)
{
	return (uint64_t)TAG_OP << TAG_SHIFT | (uint64_t)o->gen << TL_ID_SLOT_BITS | o->idx;
}

/* ---- lists of ops (start, buffer wait, fd wait, later, defer) ---- */

static inline struct ur_list *list_of(struct tl_drv *d, uint8_t st)
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
	case ST_PAUSED:
		return &d->paused;
	}
	return NULL;
}

static inline void list_add(struct tl_drv *d, struct tl_opslot *o, uint8_t st)
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
static inline void list_del(struct tl_drv *d, struct tl_opslot *o)
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

/* Move every op of list L to the start list, in order. */
static inline void list_restart(struct tl_drv *d, struct ur_list *L)
{
	while (L->head != TL_NIL) {
		struct tl_opslot *o = OP(d, L->head);
		list_del(d, o);
		list_add(d, o, ST_START);
	}
}

/* ---- per-handle queues ---- */

static inline int is_rside(const struct tl_opslot *o)
{
	return opdef(o)->rside;
}

/* Datagram ops are not ordered: they are never queued. */
static inline int is_queued(const struct tl_hslot *h)
{
	return h->type != TL_H_UDP;
}

static inline void q_push(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	UO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		UO(OP(d, *tail))->qnext = o->idx;
	*tail = o->idx;
}

static inline void q_remove(struct tl_drv *d, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
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

static inline void unqueue(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
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
static inline void kick(struct tl_drv *d, struct tl_hslot *h)
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

/* The op leaves the driver: report its terminal event, start what waited.
 *
 * An accept ending here took no connection (a one-shot accept that took one
 * ends in tl__ur_on_accept), and may have taken the wake-up of one: the kernel
 * arms an accept's poll as an exclusive waiter, so a new connection wakes
 * only the oldest accept armed on the socket, and a cancel between that
 * wake-up and the task work that would accept (run at this loop's next
 * enter, DEFER_TASKRUN) ends the accept and drops the wake-up. The
 * connection would then wait, unseen by every other accept on the socket
 * (another loop's, another process's after a handover), until another
 * connection arrives. So the socket's other waiters are woken. */
static inline void op_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o,
			   int64_t res, uint32_t flags, uint32_t lease)
{
	UO(o)->st = ST_IDLE;
	unqueue(d, h, o);
	if (tl_unlikely(o->code == TL_OP_ACCEPT))
		tl__sock_listen_wake(h->fd);
	tl__drv_event(d->loop, o, res, flags | TL_F_TERMINAL, lease);
	kick(d, h);
}

/* ---- SQEs ---- */

/* A free SQE, submitting what is queued if the SQ is full; NULL only when
 * the kernel took none of them. */
static inline struct io_uring_sqe *sqe_get(struct tl_drv *d)
{
	struct io_uring_sqe *s = io_uring_get_sqe(&d->ring);
	if (tl_unlikely(!s)) {
		d->st.sq_full_flushes++;
		io_uring_submit(&d->ring);
		s = io_uring_get_sqe(&d->ring);
	}
	return s;
}

/* o, taken off the start list, is in the kernel once its SQE s goes. */
static inline void issued(struct tl_drv *d, struct tl_opslot *o, struct io_uring_sqe *s)
{
	io_uring_sqe_set_data64(s, ud_op(o));
	list_del(d, o);
	UO(o)->st = ST_KERNEL;
}

static inline uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

static inline union ur_scratch *scratch_of(struct tl_drv *d, struct io_uring_sqe *s)
{
	return &d->scr[s - d->ring.sq.sqes];
}

/* ---- the provided-buffer ring (kbuf.c says how it is kept) ---- */

/* Hand a buffer (lease id) to the kernel. */
static inline void provide(struct tl_drv *d, uint32_t id)
{
	io_uring_buf_ring_add(d->br, d->lease_base + (size_t)id * d->lease_size, d->lease_size,
			      (unsigned short)id, io_uring_buf_ring_mask(d->br_entries), 0);
	io_uring_buf_ring_advance(d->br, 1);
	d->br_avail++;
}

/* Fill the ring up to its window from the spare stack, most recent first. */
static inline void top_up(struct tl_drv *d)
{
	while (d->br_avail < d->br_win && d->nspare)
		provide(d, d->spare[--d->nspare]);
}

/* A free lease (given back by the host, or taken by the kernel for no data). */
static inline void recycle(struct tl_drv *d, uint32_t id)
{
	d->spare[d->nspare++] = id;
	top_up(d);
}

/* ---- across the files ---- */

/* uring.c: why setup failed, in words (driver.h init_hint) */
void tl__ur_init_hint(int err, char *buf, size_t len);

/* ring.c: the driver table's init, destroy, now, poll and embed entries */
int tl__ur_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out);
void tl__ur_destroy(struct tl_drv *d);
uint64_t tl__ur_now(struct tl_drv *d);
int tl__ur_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info);
void tl__ur_flush(struct tl_drv *d);
int tl__ur_embed_fd(struct tl_drv *d);
void tl__ur_embed_deadline(struct tl_drv *d, uint64_t at_ns);
/* Embedded loops are not polled by their host until the ring fd is
 * readable, so nothing may wait in the SQ for the next turn. */
void tl__ur_flush_embed(struct tl_drv *d);

/* kbuf.c */
/* Register the ring of pooled buffers (group 0) and fill its first window:
 * 0 or a negative errno. */
int tl__ur_kbuf_init(struct tl_drv *d);
/* Unregister it (before the ring goes; tl__ur_destroy frees the memory). */
void tl__ur_kbuf_exit(struct tl_drv *d);
/* A pooled read found no buffer (-ENOBUFS): park it until one comes back. */
void tl__ur_park_for_buffer(struct tl_drv *d, struct tl_opslot *o);
void tl__ur_lease_returned(struct tl_drv *d, uint32_t id);
/* A spare lease for a read the core makes itself (driver.h lease_take). */
uint32_t tl__ur_lease_take(struct tl_drv *d);
/* The core paused h (over a cap) or resumed it (lib/caps.c, driver.h). */
void tl__ur_pause(struct tl_drv *d, struct tl_hslot *h, int paused);

/* dgram.c: datagram sends and receives (their rows of opdef.c), and h (a
 * datagram handle) back under its lease cap: its parked receives go on. */
int tl__ur_dg_issue_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_dg_on_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf);
int tl__ur_dg_issue_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_dg_on_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf);
void tl__ur_dg_unpaused(struct tl_drv *d, struct tl_hslot *h);
int tl__ur_dg_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
/* The receive slots (ring.c calls them at setup and teardown): 0 or -ENOMEM. */
int tl__ur_dg_init(struct tl_drv *d);
void tl__ur_dg_exit(struct tl_drv *d);
/* net.c: mark SQE s as taking a buffer from the provided-buffer ring. */
void tl__ur_prep_pooled(struct io_uring_sqe *s);

/* queue.c */
/* Multishot accepts parked on EMFILE/ENFILE go again. */
void tl__ur_retry_fdwait(struct tl_drv *d);
int tl__ur_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *s);
int tl__ur_attach(struct tl_drv *d, struct tl_hslot *h);
int tl__ur_adopt(struct tl_drv *d, struct tl_hslot *h, int fd);
int tl__ur_detach(struct tl_drv *d, struct tl_hslot *h);
void tl__ur_release(struct tl_drv *d, struct tl_hslot *h);
int tl__ur_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out);
int tl__ur_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out);
int tl__ur_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value);
int tl__ur_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
/* Ask the kernel to cancel o's SQE (flushed at once on an embedded loop):
 * 0, or -ENOBUFS when no SQE could be had. */
int tl__ur_cancel_sqe(struct tl_drv *d, struct tl_opslot *o);

/* net.c */
/* An accept error that leaves the listener usable, reported as a
 * nonterminal event. */
static inline int accept_soft(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}
/* The network rows of the opcode table (opdef.c). */
int tl__ur_issue_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_nop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_send_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_recv_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_on_accept(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		      unsigned cf);
void tl__ur_on_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		       unsigned cf);
void tl__ur_on_read(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf);
/* Writes and shutdowns: head is the op whose SQE completed. */
void tl__ur_on_write(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *head, int res,
		     unsigned cf);
void tl__ur_on_send_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf);
void tl__ur_on_recv_fds(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf);
/* Prepare o's SQE now (its Unix path is only valid during submit). */
int tl__ur_issue_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
/* Ask the kernel to cancel o's request: 0 asked, 1 a cancel of it is in
 * flight already (nothing done), -ENOBUFS no SQE could be had. */
int tl__ur_cancel_kernel(struct tl_drv *d, struct tl_opslot *o);
/* Start of a poll: issue the reads deferred to it, and tell the policy of
 * each held read whether the host answered. 1 when a read was deferred to
 * the next poll: this one must not block. */
int tl__ur_sort_reads(struct tl_drv *d);
/* A new op's stream-read fields. */
void tl__ur_read_init(struct tl_drv *d, struct tl_opslot *o);

/* poll.c: the TL_OP_POLL row (in no handle queue) */
int tl__ur_poll_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_poll_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ur_issue_poll(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_on_poll(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
		    unsigned cf);

/* splice.c: the TL_OP_SPLICE entry of the table, the cancel of one, and
 * a source back under its caps (tl__ur_pause). */
int tl__ur_splice_issue(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_splice_complete(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			    unsigned cf);
int tl__ur_splice_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__ur_splice_unpaused(struct tl_drv *d, struct tl_hslot *src);

/* opdef.c: the file requests' opcodes */
/* Which typed file requests the ring runs, one bit per enum tl_fs_req. */
uint32_t tl__ur_probe_fs(struct io_uring *r);
/* The driver's fs_route (driver.h): native or pool, decided here only. */
int tl__ur_fs_route(struct tl_drv *d, const struct tl_fs_native_req *q, int *redo);

/* fs.c: the file requests' row (TL_OP_POOL) */
int tl__ur_fs_submit(struct tl_drv *d, struct tl_opslot *o, const struct tl_fs_native_req *q);
/* A native file request's terminal (its CQE, or a cancel of one never
 * submitted). */
void tl__ur_fs_done(struct tl_drv *d, struct tl_opslot *o, int64_t res);
void tl__ur_fs_complete(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf);
int tl__ur_fs_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);

#endif
