/* tools/tlproxy/proxy.c: the data path of one shard: accept, allow/deny, PROXY header and SNI peek, balancing with the queue, connect with retries, forwarding both ways on pooled leases, half-close, resets, timeouts, close. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/socket.h>

#include "proxy.h"
#include "proxyproto.h"
#include "sni.h"
#include "netlist.h"
#include "alog.h"
#include "splice.h"
#include "takeover.h"

/*
 * Forwarding in one paragraph. Each side's stream reads with tl_read_start:
 * every read completion carries a pooled lease, which is written as is to
 * the other side and released when that write completes. The lease counts
 * against the stream it was read from (the loop's per-stream cap), so a
 * destination that does not take its bytes stops its source by itself:
 * backpressure without a copy and without a buffer of our own. An idle
 * connection holds no lease (the driver's receive waits with none), no
 * timer (its timeouts are the loop's deadlines, below) and nothing
 * allocated: its record is a slot of the shard's table, made at start.
 */

#define NONE UINT32_MAX
#define W_BITS 12
#define W_SIZE (1u << W_BITS)
#define W_MASK (W_SIZE - 1)
/*
 * The peek: a connection that must start with a PROXY header or whose
 * ClientHello chooses its pool is read into a buffer of its own before a
 * server is chosen. The reads are one-shot reads into that buffer (no
 * lease is held while a client takes its time), and a read is issued only
 * when there is room: bytes the proxy has no room for stay in the kernel.
 * Each peeking connection takes a record of PEEK_SMALL bytes from its
 * shard's pool when its peek starts (its first read needs the room); the
 * pool grows in chunks of PK_CHUNK up
 * to one record per connection of the table, so slow clients, however
 * many, cannot take a record from a fast one. A header and hello longer
 * than PEEK_SMALL (rare: a hello of a few post-quantum key shares and
 * tickets) moves into one of the shard's PEEK_BIG buffers of PEEK_CAP
 * bytes; when none is free it waits for one, first come first served,
 * without reading, still bounded by sni_timeout. So slow clients cost at
 * most a record each, and only clients that send over PEEK_SMALL bytes
 * without finishing can make others wait, and then only those of their
 * own size.
 */
#define PEEK_CAP (TLP_PP_V2_MAX + TLP_SNI_INPUT_MAX)
#define PEEK_REC 4096
#define PEEK_SMALL (PEEK_REC - 20)
#define PK_CHUNK 64
#define PEEK_BIG 64
#define HB_SIZE 256

/* Operation kinds in a connection token. */
enum {
	OP_READ = 0,
	OP_WRITE,      /* a lease: lease id in the token */
	OP_WRITE_HDR,  /* the PROXY header: its buffer in the token */
	OP_WRITE_PEEK, /* the bytes read while peeking */
	OP_CONNECT,
	OP_SHUT,
	OP_CLOSE,      /* the side's current handle */
	OP_CLOSE_OLD,  /* a server handle of a failed attempt */
	OP_SPLICE,     /* a splice from side s to the other (splice.h) */
	OP_WRITE_CARRY, /* bytes a connection handed over brought (takeover) */
	OP_PEEK,       /* a read into the peek buffer */
};

static inline uint64_t tok(uint32_t ci, int side, int op, uint32_t arg)
{
	return tl_token(TLP_H_CONN, (uint64_t)ci | ((uint64_t)side << 24) | ((uint64_t)op << 25) |
					    ((uint64_t)arg << 29));
}
#define TOK_CI(t) ((uint32_t)((t) & 0xffffff))
#define TOK_SIDE(t) ((int)(((t) >> 24) & 1))
#define TOK_OP(t) ((int)(((t) >> 25) & 0xf))
#define TOK_ARG(t) ((uint32_t)(((t) >> 29) & 0xffffff))

enum { C_FREE = 0, C_PEEK, C_QUEUED, C_CONNECT, C_FWD, C_CLOSING, C_HELD };

/* flags */
#define F_EOF(s) (0x1u << (s))       /* side s sent its FIN */
#define F_SHUT(s) (0x4u << (s))      /* shutdown issued on side s */
#define F_SHUTOK(s) (0x10u << (s))   /* ... and done */
#define F_RD(s) (0x40u << (s))       /* read started on side s */
#define F_CLOSE(s) (0x100u << (s))   /* close issued on side s's handle */
#define F_SRV 0x400u                 /* counted in srv->conns */
#define F_LCOUNT 0x800u              /* counted in the listener's conns */
#define F_WCOUNT 0x1000u             /* counted in the process's conns */
#define F_NEED_PP 0x2000u            /* a PROXY header must come first */
#define F_PEEKW 0x4000u              /* the peek buffer is being written */
#define F_QCOUNT 0x8000u             /* counted in the listener's queued */
#define F_HO 0x10000u                /* being handed over (takeover): ho is a tlp_ho_out */
#define F_HORD(s) (0x20000u << (s))  /* ... and side s's read has ended */
#define F_HORES 0x80000u             /* ... too late: it carries on here */
#define F_PKRD 0x100000u             /* a read into the peek buffer is in flight */
#define F_PKWAIT 0x200000u           /* the peek waits for a big buffer */
#define F_FDWAIT 0x400000u           /* held: admitted, waits for a descriptor to connect */
#define F_ADM 0x800000u              /* admitted: counted in the shard's nadm */

struct tlp_conn {
	tl_handle h[2];          /* [0] client, [1] server */
	uint32_t wnext, wprev;   /* wheel bucket, or free list (wnext) */
	uint32_t qnext, qprev;   /* a pool's queue, the big buffers' wait list, or the held list */
	uint32_t wslot;          /* the tick of its bucket; NONE: not in the wheel */
	uint32_t t_state;        /* tick it was accepted, or its queue wait began */
	uint32_t flags;
	uint16_t wq[2];          /* writes in flight to side s */
	uint8_t state, cause, tries, nclosing;
	uint16_t hdr;            /* header buffer (0xffff none) */
	uint32_t peek;           /* peek record (NONE none) */
	uint32_t vidx;           /* server index in the view it came from */
	uint64_t ticket;         /* its place in the pool's queue */
	tl_op rop;               /* the client's read into the peek buffer */
	void *ho;                /* takeover: struct tlp_ho_out (F_HO) or tlp_ho_in */
	uint16_t tried[TLP_RETRIES_MAX]; /* view indexes tried, ntried of them */
	uint8_t ntried;
	struct tlp_gen *gen;
	const struct tlp_lrt *lr;
	struct tlp_gpool *gp;
	const struct tlp_pool_cfg *pc;
	struct tlp_srv *srv;
	tl_op rd[2];             /* each side's read while forwarding */
	struct tlp_spl sp[2];    /* each side's direction: copying or splicing */
	uint64_t t_act;          /* last bytes moved either way (splice only) */
	uint64_t bytes[2];       /* from the client, from the server */
	uint64_t t0;             /* accepted (tl_now) */
	uint8_t pp_in, laddr;    /* laddr: index of the listen address */
	tl_addr peer;            /* the client (or what its PROXY header said) */
	tl_addr dst;             /* what the PROXY header said it reached (pp_in) */
};

/* A peek record (PEEK_REC bytes in all). */
struct tlp_peek {
	uint32_t len;   /* bytes read */
	uint32_t off;   /* where the bytes to forward start (past a PROXY header) */
	uint32_t next;  /* free list */
	uint32_t big;   /* the big buffer holding the bytes, NONE: small */
	uint32_t wseq;  /* the number of its write to the server (F_PEEKW), of len - off bytes */
	uint8_t small[PEEK_SMALL];
};
_Static_assert(sizeof(struct tlp_peek) == PEEK_REC, "a record is PEEK_REC bytes");

struct tlp_lpool {
	struct tlp_view *v;
	struct tlp_bal_server *loc;  /* this shard's copy of the view's servers */
	struct tlp_balancer bal;     /* over loc, with the view's table */
	struct tlp_avoid avoid;      /* one bit per server: a retry's tried ones, set
				      * and cleared around each pick */
	uint32_t ver;
	uint64_t recheck_at;
	uint32_t qhead, qtail, qlen;
};

struct tlp_shard {
	tl_shard *s;
	tl_loop *loop;
	uint32_t id;
	struct tlp_conn *c;
	uint32_t cap, free_head, nopen;
	/* the timeout wheel */
	uint32_t *wheel;
	uint32_t tick;
	uint64_t t_base, tick_ns;
	tl_handle sweep_h;
	struct tlp_gen *gen;
	struct tlp_lpool lp[TLP_REG_POOLS];
	/* peek records (chunks of PK_CHUNK), big buffers and their wait list */
	struct tlp_peek **pkc;
	uint32_t npk, pk_free;
	uint8_t *big;
	uint32_t big_next[PEEK_BIG], big_free, pkw_head, pkw_tail;
	int granting;
	/* clients held (accepted past a limit, or out of descriptors) and
	 * accepts stopped until there is room */
	uint32_t held_head, held_tail, nheld;
	uint32_t nadm, admit_cap;  /* clients admitted here, and at most (the table less HELD_MAX) */
	struct tlp_paused {
		tl_handle h;
		uint64_t tok;
		int st;        /* PZ_*: its accept is stopping, stopped, or one-shot */
	} *pz;
	uint32_t npz, pzcap;
	int fd_short;              /* a connect or accept found no descriptor */
	int fd_freed;              /* ... and one may have come free since */
	uint64_t fd_tight_until;   /* till then, accept one client at a time */
	int resume_due, resuming;
	uint64_t fd_log_at;
	/* PROXY header buffers */
	uint8_t (*hb)[HB_SIZE];
	uint16_t *hb_free;
	uint32_t nhb, nhb_free;
	/* Every write a connection issues gets the next number, and the
	 * buffer of each write in flight is known by its token (a lease by
	 * its id, a header by its buffer, ...): a takeover that cancels
	 * writes carries their unwritten ends in the order they were issued
	 * (tlp_ho_out). */
	uint32_t wseq;
	struct { const uint8_t *p; uint32_t len, seq; } *lw; /* by lease id */
	struct { uint32_t len, seq; } *hbw;                  /* by header buffer */
	/* listeners: [glisten idx][address idx] */
	tl_handle (*lh)[TLP_MAX_LISTEN];
	int draining, stopping;
	int handing;               /* takeover: handing its connections over */
	tl_handle xlh[TLP_MAX_INHERIT]; /* more listening sockets a takeover brought */
	uint64_t xtok[TLP_MAX_INHERIT]; /* ... and their accept tokens */
	uint32_t nxlh;
	/* Handing over: descriptors of the listening sockets it stopped
	 * accepting on, kept until the successor has them for good. */
	struct { int fd; uint64_t tok; } *kept;
	uint32_t nkept;
	int ho_was_draining;
	uint32_t queued;           /* clients in this shard's queues */
	/* stats not yet published */
	uint64_t d_conns, d_bytes[2], d_spl[TLP_SPL_ST_ROWS];
	int spl_dirty;             /* a splice started or ended: publish the pool */
	int open_dirty, queue_dirty;
	int32_t srv_n[TLP_SRV_ROWS];
	uint8_t srv_isdirty[TLP_SRV_ROWS];
	uint16_t srv_dirty[TLP_SRV_ROWS];
	uint32_t nsrv_dirty;
	struct tlp_alog_ring *log;
	char sni_host[TLP_SNI_HOST_MAX + 1];
};

const char *const tlp_cause_names[TLP_END_COUNT] = {
	[TLP_END_DONE] = "done",
	[TLP_END_CLIENT_RESET] = "client_reset",
	[TLP_END_SERVER_RESET] = "server_reset",
	[TLP_END_CLIENT_ERROR] = "client_error",
	[TLP_END_SERVER_ERROR] = "server_error",
	[TLP_END_IDLE] = "idle_timeout",
	[TLP_END_CLIENT_FIN] = "client_fin_timeout",
	[TLP_END_SERVER_FIN] = "server_fin_timeout",
	[TLP_END_CONNECT] = "connect_failed",
	[TLP_END_NO_SERVER] = "no_server",
	[TLP_END_QUEUE_FULL] = "queue_full",
	[TLP_END_QUEUE_TIMEOUT] = "queue_timeout",
	[TLP_END_DENIED] = "denied",
	[TLP_END_LIMIT] = "limit",
	[TLP_END_PROXY_BAD] = "proxy_header_bad",
	[TLP_END_SNI_BAD] = "sni_bad",
	[TLP_END_PEEK_TIMEOUT] = "peek_timeout",
	[TLP_END_NO_ROUTE] = "no_route",
	[TLP_END_BUSY] = "busy",
	[TLP_END_SHUTDOWN] = "shutdown",
};
_Static_assert(sizeof tlp_cause_names / sizeof tlp_cause_names[0] == TLP_END_COUNT,
	       "a name per cause");

static void conn_end(struct tlp_shard *sh, struct tlp_conn *c, int cause, int abort_mask);
static void maybe_done(struct tlp_shard *sh, struct tlp_conn *c);
static void assign(struct tlp_shard *sh, struct tlp_conn *c);
static void dispatch_queue(struct tlp_shard *sh, struct tlp_gpool *gp);
static void ho_keep(struct tlp_shard *sh, struct tlp_conn *c, int s, const uint8_t *p, uint32_t id,
		    uint32_t n);
static void ho_step(struct tlp_shard *sh, struct tlp_conn *c);
static void ho_resume(struct tlp_shard *sh, struct tlp_conn *c);
static void ho_drop(struct tlp_conn *c, int abort_mask);
static void ho_cut_write(struct tlp_shard *sh, struct tlp_conn *c, int d, const tl_completion *e,
			 const uint8_t *p, uint32_t len, uint32_t seq);
static void carry_written(struct tlp_shard *sh, struct tlp_conn *c);
static void held_add(struct tlp_shard *sh, struct tlp_conn *c, int first);
static void held_del(struct tlp_shard *sh, struct tlp_conn *c);
static void resume(struct tlp_shard *sh);
static void fd_short_set(struct tlp_shard *sh, int err);
static void notify_room(struct tlp_shard *sh);

static inline struct tlp_shard *SH(tl_shard *s)
{
	return tl_shard_data(s);
}

static inline uint32_t CI(const struct tlp_shard *sh, const struct tlp_conn *c)
{
	return (uint32_t)(c - sh->c);
}

/* ---- timeouts ---- */

/*
 * A forwarding connection's timeouts are the loop's own deadlines, with no
 * timer per connection: each stream has an idle deadline (tl_idle_deadline:
 * timeouts.idle, then the FIN timeout once a side has closed), so a side
 * quiet that long ends its pending operations with -ETIMEDOUT; the read of
 * a connection whose PROXY header or ClientHello is awaited has a read
 * deadline (sni_timeout); a connect has its own. What is left are waits
 * with no operation to put a deadline on: a client in the queue, and one
 * waiting for a peek buffer. Those sit in a lazy wheel: one repeating timer
 * per shard moves `tick` on, each waiting connection sits in the bucket of
 * the tick at which its deadline falls, and when a bucket comes up one
 * whose deadline passed is ended. A deadline further than the wheel reaches
 * is looked at after one turn of the wheel. So these timeouts are enforced
 * within one tick of being due.
 */

static void wheel_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (c->wslot == NONE)
		return;
	if (c->wprev != NONE)
		sh->c[c->wprev].wnext = c->wnext;
	else
		sh->wheel[c->wslot & W_MASK] = c->wnext;
	if (c->wnext != NONE)
		sh->c[c->wnext].wprev = c->wprev;
	c->wslot = NONE;
}

static void wheel_put(struct tlp_shard *sh, struct tlp_conn *c, uint32_t due)
{
	uint32_t ci = CI(sh, c), *head;

	wheel_del(sh, c);
	if ((int32_t)(due - sh->tick) <= 0)
		due = sh->tick + 1;
	else if (due - sh->tick >= W_SIZE)
		due = sh->tick + W_SIZE - 1;
	head = &sh->wheel[due & W_MASK];
	c->wslot = due;
	c->wprev = NONE;
	c->wnext = *head;
	if (*head != NONE)
		sh->c[*head].wprev = ci;
	*head = ci;
}

/* The tick at which c's wait ends, and the cause; NONE for a connection
 * that waits on an operation (its deadline is the loop's). */
static uint32_t deadline(const struct tlp_conn *c, int *cause)
{
	const struct tlp_lrt *l = c->lr;

	switch (c->state) {
	case C_PEEK:
		/* Waiting for a big buffer: no read to put a deadline on. */
		*cause = TLP_END_PEEK_TIMEOUT;
		return c->flags & F_PKWAIT ? c->t_state + l->peek_t : NONE;
	case C_QUEUED:
		*cause = TLP_END_QUEUE_TIMEOUT;
		return c->t_state + l->queue_t;
	default:
		*cause = TLP_END_DONE;
		return NONE;
	}
}

/* Why a connection whose deadline fired ends: idle, or a FIN timeout. */
static int idle_cause(const struct tlp_conn *c)
{
	if ((c->flags & F_EOF(0)) && !(c->flags & F_EOF(1)))
		return TLP_END_CLIENT_FIN;
	if ((c->flags & F_EOF(1)) && !(c->flags & F_EOF(0)))
		return TLP_END_SERVER_FIN;
	return TLP_END_IDLE;
}

/* Both streams' idle deadline: timeouts.idle, or the FIN timeout of the
 * side that closed first. */
static uint64_t idle_ns(const struct tlp_conn *c)
{
	const struct tlp_listener_cfg *lc = c->lr->cfg;

	if ((c->flags & F_EOF(0)) && !(c->flags & F_EOF(1)))
		return lc->client_fin_ns;
	if ((c->flags & F_EOF(1)) && !(c->flags & F_EOF(0)))
		return lc->server_fin_ns;
	return lc->idle_timeout_ns;
}

static void arm_idle(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint64_t ns = idle_ns(c);

	for (int s = 0; s < 2; s++)
		if (!tl_handle_eq(c->h[s], TL_HANDLE_NONE))
			tl_idle_deadline(sh->loop, c->h[s], ns);
}

static void wheel_arm(struct tlp_shard *sh, struct tlp_conn *c)
{
	int cause;

	wheel_put(sh, c, deadline(c, &cause));
}

static void sweep_bucket(struct tlp_shard *sh, uint32_t t)
{
	uint32_t ci = sh->wheel[t & W_MASK];

	sh->wheel[t & W_MASK] = NONE;
	while (ci != NONE) {
		struct tlp_conn *c = &sh->c[ci];
		uint32_t next = c->wnext, due;
		int cause;

		c->wslot = NONE;
		due = deadline(c, &cause);
		if (due == NONE)
			; /* no longer waiting: out of the wheel */
		else if ((int32_t)(due - t) <= 0)
			conn_end(sh, c, cause, 0);
		else
			wheel_put(sh, c, due);
		ci = next;
	}
}

static void sweep(struct tlp_shard *sh)
{
	uint64_t now = tl_now(sh->loop);
	uint32_t to = (uint32_t)((now - sh->t_base) / sh->tick_ns), n = 0;

	while ((int32_t)(to - sh->tick) > 0 && n++ < W_SIZE) {
		sh->tick++;
		sweep_bucket(sh, sh->tick);
	}
	sh->tick = to;
	/* Held clients and stopped accepts: descriptors may have come free
	 * elsewhere (another process, the control plane). */
	if (sh->nheld || sh->npz) {
		sh->fd_freed = 1;
		resume(sh);
	}
	/* Clients waiting for a server: a server may have come up. */
	if (sh->queued)
		for (uint32_t i = 0; i < tlp_w.ngp; i++)
			if (sh->lp[i].qhead != NONE)
				dispatch_queue(sh, tlp_w.gp[i]);
}

/* ---- stats ---- */

static void srv_count(struct tlp_shard *sh, struct tlp_srv *srv, int d)
{
	int r = srv->row;

	if (r < 0 || r >= (int)tlp_w.srv_rows)
		return;
	sh->srv_n[r] += d;
	if (!sh->srv_isdirty[r]) {
		sh->srv_isdirty[r] = 1;
		sh->srv_dirty[sh->nsrv_dirty++] = (uint16_t)r;
	}
}

int tlp_shard_pass(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_world *w = &tlp_w;

	(void)arg;
	if (!sh)
		return 0;
	if (sh->resume_due)
		resume(sh);
	if (sh->d_conns) {
		tl_shard_counter_add(s, w->st_conns, sh->d_conns);
		sh->d_conns = 0;
	}
	if (sh->d_bytes[0]) {
		tl_shard_counter_add(s, w->st_bytes_in, sh->d_bytes[0]);
		sh->d_bytes[0] = 0;
	}
	if (sh->d_bytes[1]) {
		tl_shard_counter_add(s, w->st_bytes_out, sh->d_bytes[1]);
		sh->d_bytes[1] = 0;
	}
	for (int i = 0; i < TLP_SPL_ST_ROWS; i++)
		if (sh->d_spl[i]) {
			tl_shard_counter_add(s, w->st_splice + i, sh->d_spl[i]);
			sh->d_spl[i] = 0;
		}
	if (sh->spl_dirty) {
		tl_loop_stats ls;

		tl_loop_stats_get(sh->loop, &ls);
		tl_shard_gauge_set(s, w->st_spl_pipes, ls.pipes);
		tl_shard_gauge_set(s, w->st_spl_pipes + 1, ls.pipes_busy);
		sh->spl_dirty = 0;
	}
	if (sh->open_dirty) {
		tl_shard_gauge_set(s, w->st_open, sh->nopen);
		sh->open_dirty = 0;
	}
	if (sh->queue_dirty) {
		tl_shard_gauge_set(s, w->st_queue, sh->queued);
		sh->queue_dirty = 0;
	}
	for (uint32_t i = 0; i < sh->nsrv_dirty; i++) {
		uint16_t r = sh->srv_dirty[i];

		sh->srv_isdirty[r] = 0;
		tl_shard_gauge_set(s, w->st_srv_conns + r, sh->srv_n[r]);
	}
	sh->nsrv_dirty = 0;
	if (sh->log) {
		uint64_t d = tlp_alog_dropped(sh->log);

		if (d)
			tl_shard_counter_add(s, w->st_log_dropped, d);
	}
	return 0;
}

static void count_err(struct tlp_shard *sh, int cause)
{
	if (cause != TLP_END_DONE)
		tl_shard_counter_add(sh->s, tlp_w.st_errors + cause - 1, 1);
}

/* ---- access log ---- */

static void log_conn(struct tlp_shard *sh, const struct tlp_lrt *lr, const tl_addr *peer,
		     const struct tlp_srv *srv, const uint64_t bytes[2], uint64_t t0, int cause)
{
	struct tlp_alog_rec *r;

	if (!sh->log)
		return;
	r = tlp_alog_claim(sh->log);
	if (!r)
		return; /* full: counted by the ring */
	clock_gettime(CLOCK_REALTIME, &r->end);
	r->dur_ns = tl_now(sh->loop) - t0;
	r->bytes[0] = bytes ? bytes[0] : 0;
	r->bytes[1] = bytes ? bytes[1] : 0;
	r->peer = *peer;
	r->cause = (uint8_t)cause;
	r->listener = lr ? lr->gl : NULL;
	if (srv)
		memcpy(r->server, srv->label, sizeof r->server);
	else
		r->server[0] = '\0';
	tlp_alog_commit(sh->log);
}

/* ---- connection table ---- */

static struct tlp_conn *conn_new(struct tlp_shard *sh)
{
	struct tlp_conn *c;

	if (sh->free_head == NONE)
		return NULL;
	c = &sh->c[sh->free_head];
	sh->free_head = c->wnext;
	memset(c, 0, offsetof(struct tlp_conn, peer));
	c->h[0] = c->h[1] = TL_HANDLE_NONE;
	c->wnext = c->wprev = c->qnext = c->qprev = c->wslot = NONE;
	c->hdr = 0xffff;
	c->peek = NONE;
	c->state = C_CONNECT;
	c->cause = 0xff;
	sh->nopen++;
	sh->open_dirty = 1;
	return c;
}

static void gen_unuse(struct tlp_shard *sh, struct tlp_gen *g)
{
	struct tlp_gen_shard *gs = &g->sc[sh->id];

	if (--gs->n == 0 && gs->away)
		tlp_gen_put(g);
}

static void peek_release(struct tlp_shard *sh, struct tlp_conn *c);

static void conn_free(struct tlp_shard *sh, struct tlp_conn *c)
{
	int cause = c->cause == 0xff ? TLP_END_DONE : c->cause;

	peek_release(sh, c); /* every op of c has ended */
	log_conn(sh, c->lr, &c->peer, c->srv, c->bytes, c->t0, cause);
	gen_unuse(sh, c->gen);
	c->state = C_FREE;
	c->wnext = sh->free_head;
	sh->free_head = CI(sh, c);
	sh->nopen--;
	sh->open_dirty = 1;
	if (c->flags & F_ADM)
		sh->nadm--; /* its slot of the table is free */
	notify_room(sh); /* its descriptors and counts are back */
}

/* ---- peek records and big buffers (the rule is at PEEK_CAP) ---- */

static void peek_next(struct tlp_shard *sh, struct tlp_conn *c);

static inline struct tlp_peek *PK(struct tlp_shard *sh, uint32_t i)
{
	return &sh->pkc[i / PK_CHUNK][i % PK_CHUNK];
}

static inline uint8_t *peek_buf(struct tlp_shard *sh, struct tlp_peek *p)
{
	return p->big != NONE ? sh->big + (size_t)p->big * PEEK_CAP : p->small;
}

/* Another chunk of records, while the pool is smaller than the table. */
static int peek_grow(struct tlp_shard *sh)
{
	struct tlp_peek *chunk;

	if (sh->npk >= sh->cap || !(chunk = malloc(PK_CHUNK * sizeof *chunk)))
		return -1;
	sh->pkc[sh->npk / PK_CHUNK] = chunk;
	for (uint32_t i = 0; i < PK_CHUNK; i++)
		chunk[i].next = i + 1 < PK_CHUNK ? sh->npk + i + 1 : sh->pk_free;
	sh->pk_free = sh->npk;
	sh->npk += PK_CHUNK;
	return 0;
}

/* A record for c. 0, or -1 (no memory). */
static int peek_get(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;

	if (sh->pk_free == NONE && peek_grow(sh) < 0)
		return -1;
	p = PK(sh, sh->pk_free);
	c->peek = sh->pk_free;
	sh->pk_free = p->next;
	p->len = p->off = 0;
	p->big = NONE;
	return 0;
}

static void pkw_add(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t ci = CI(sh, c);

	c->flags |= F_PKWAIT;
	c->qnext = NONE;
	c->qprev = sh->pkw_tail;
	if (sh->pkw_tail != NONE)
		sh->c[sh->pkw_tail].qnext = ci;
	else
		sh->pkw_head = ci;
	sh->pkw_tail = ci;
	wheel_arm(sh, c);
}

static void pkw_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (!(c->flags & F_PKWAIT))
		return;
	c->flags &= ~F_PKWAIT;
	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		sh->pkw_head = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		sh->pkw_tail = c->qprev;
	c->qnext = c->qprev = NONE;
	wheel_del(sh, c);
}

/* Move a full record's bytes into a free big buffer. */
static void big_take(struct tlp_shard *sh, struct tlp_peek *p)
{
	p->big = sh->big_free;
	sh->big_free = sh->big_next[p->big];
	memcpy(sh->big + (size_t)p->big * PEEK_CAP, p->small, p->len);
}

/* Free big buffers to the connections waiting for one, oldest first. */
static void peek_grant(struct tlp_shard *sh)
{
	if (sh->granting)
		return; /* the loop below, further up the stack, goes on */
	sh->granting = 1;
	while (sh->big_free != NONE && sh->pkw_head != NONE) {
		struct tlp_conn *w = &sh->c[sh->pkw_head];

		pkw_del(sh, w);
		big_take(sh, PK(sh, w->peek));
		peek_next(sh, w);
	}
	sh->granting = 0;
}

/* Give c's record (and big buffer) back. Only once no read or write uses
 * them: a one-shot read writes into the buffer until its terminal. */
static void peek_release(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;

	if (c->peek == NONE)
		return;
	p = PK(sh, c->peek);
	if (p->big != NONE) {
		sh->big_next[p->big] = sh->big_free;
		sh->big_free = p->big;
		p->big = NONE;
	}
	p->next = sh->pk_free;
	sh->pk_free = c->peek;
	c->peek = NONE;
	peek_grant(sh);
}

/* ---- balancing ---- */

/* Bring the shard's copy of a pool's server states up to date. */
static void refresh(struct tlp_lpool *lp, struct tlp_gpool *gp, uint64_t now)
{
	struct tlp_view *v = lp->v;
	uint32_t ver = atomic_load_explicit(&gp->state_ver, memory_order_acquire);

	if (ver != lp->ver || now >= lp->recheck_at) {
		uint64_t next = UINT64_MAX;

		lp->ver = ver;
		for (uint32_t i = 0; i < v->n; i++) {
			struct tlp_srv *s = v->e[i].srv;
			uint64_t du = atomic_load_explicit(&s->down_until, memory_order_relaxed);

			lp->loc[i].state = tlp_srv_up(s, now) ? TLP_SRV_UP : TLP_SRV_DOWN;
			if (du && du > now && du < next)
				next = du;
		}
		lp->recheck_at = next;
	}
	if (v->need_conns)
		for (uint32_t i = 0; i < v->n; i++)
			lp->loc[i].conns =
				atomic_load_explicit(&v->e[i].srv->conns, memory_order_relaxed);
}

/*
 * Choose a server for c and count c on it (process-wide): the index in the
 * view, or -ENOBUFS (every server up is full), -EHOSTUNREACH (none up).
 * Servers c already tried are left out while another is usable.
 */
static int pick(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];
	struct tlp_view *v = lp->v;
	uint64_t now, key = 0;
	int r = -EHOSTUNREACH;

	if (!v || !v->n)
		return -EHOSTUNREACH;
	now = tlp_mono_ns();
	refresh(lp, c->gp, now);
	if (tlp_bal_ops[v->balance].needs & TLP_BAL_NEEDS_KEY)
		key = tlp_hash_addr(&c->peer.sa);
	for (int attempt = 0; attempt < 4; attempt++) {
		uint32_t hidden = 0;

		for (uint32_t k = 0; k < c->ntried; k++)
			hidden += (uint32_t)tlp_avoid_add(&lp->avoid, c->tried[k]);
		r = tlp_bal_pick(&lp->bal, key, hidden ? &lp->avoid : NULL);
		for (uint32_t k = 0; k < c->ntried; k++)
			tlp_avoid_del(&lp->avoid, c->tried[k]);
		if (r < 0 && hidden) {
			/* Every other server is out: the tried ones again. */
			c->ntried = 0;
			continue;
		}
		if (r < 0)
			return r;
		struct tlp_vent *e = &v->e[r];
		uint32_t had = atomic_fetch_add_explicit(&e->srv->conns, 1, memory_order_relaxed);

		if (e->max_conns && had >= e->max_conns) {
			/* Another shard took the last place first. */
			atomic_fetch_sub_explicit(&e->srv->conns, 1, memory_order_relaxed);
			lp->loc[r].conns = had;
			if (!v->need_conns)
				lp->loc[r].conns = e->max_conns;
			r = -ENOBUFS;
			continue;
		}
		lp->loc[r].conns = had + 1;
		c->srv = e->srv;
		c->vidx = (uint32_t)r;
		c->flags |= F_SRV;
		srv_count(sh, e->srv, 1);
		return r;
	}
	return r;
}

static void srv_release(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (!(c->flags & F_SRV))
		return;
	c->flags &= ~F_SRV;
	atomic_fetch_sub_explicit(&c->srv->conns, 1, memory_order_relaxed);
	srv_count(sh, c->srv, -1);
	if (atomic_load_explicit(&c->gp->waiting, memory_order_relaxed))
		tlp_room(sh, c->gp);
}

/* ---- queue ---- */

static void q_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];

	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		lp->qhead = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		lp->qtail = c->qprev;
	c->qnext = c->qprev = NONE;
	lp->qlen--;
	sh->queued--;
	sh->queue_dirty = 1;
	atomic_store_explicit(&c->gp->head[sh->id],
			      lp->qhead != NONE ? sh->c[lp->qhead].ticket : UINT64_MAX,
			      memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->gp->waiting, 1, memory_order_relaxed);
	if (c->flags & F_QCOUNT) {
		atomic_fetch_sub_explicit(&c->lr->gl->queued, 1, memory_order_relaxed);
		c->flags &= ~F_QCOUNT;
	}
}

/* Queue c (every server full). 0, or -1 when the queue is full. */
static int q_add(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];
	uint32_t max = c->lr->cfg->queue_max, ci = CI(sh, c);

	if (!max)
		return -1;
	if (atomic_fetch_add_explicit(&c->lr->gl->queued, 1, memory_order_relaxed) >= max) {
		atomic_fetch_sub_explicit(&c->lr->gl->queued, 1, memory_order_relaxed);
		return -1;
	}
	c->flags |= F_QCOUNT;
	c->ticket = atomic_fetch_add_explicit(&c->gp->ticket, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->gp->waiting, 1, memory_order_relaxed);
	c->state = C_QUEUED;
	c->t_state = sh->tick;
	c->qnext = NONE;
	c->qprev = lp->qtail;
	if (lp->qtail != NONE) {
		sh->c[lp->qtail].qnext = ci;
	} else {
		lp->qhead = ci;
		atomic_store_explicit(&c->gp->head[sh->id], c->ticket, memory_order_relaxed);
	}
	lp->qtail = ci;
	lp->qlen++;
	sh->queued++;
	sh->queue_dirty = 1;
	wheel_arm(sh, c);
	return 0;
}

static void start_connect(struct tlp_shard *sh, struct tlp_conn *c);

/* The shard whose first queued client of gp has waited longest, or NONE. */
static uint32_t oldest_shard(struct tlp_gpool *gp)
{
	uint64_t best = UINT64_MAX;
	uint32_t who = NONE;

	for (uint32_t t = 0; t < tlp_w.nshards; t++) {
		uint64_t h = atomic_load_explicit(&gp->head[t], memory_order_relaxed);

		if (h < best) {
			best = h;
			who = t;
		}
	}
	return who;
}

/*
 * Give queued clients of gp the servers that have room, oldest first
 * across the process: while this shard holds the oldest client, it takes
 * the room; when another shard does, that shard is told (TLP_MSG_ROOM) and
 * goes on from there.
 */
static void dispatch_queue(struct tlp_shard *sh, struct tlp_gpool *gp)
{
	struct tlp_lpool *lp = &sh->lp[gp->idx];

	while (lp->qhead != NONE) {
		struct tlp_conn *c = &sh->c[lp->qhead];
		uint32_t who = oldest_shard(gp);
		int r;

		if (who != sh->id && who != NONE) {
			tl_shard_post(sh->s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
			return;
		}
		r = pick(sh, c);
		if (r == -ENOBUFS)
			return;
		q_del(sh, c);
		if (r < 0) {
			conn_end(sh, c, TLP_END_NO_SERVER, 0);
			continue;
		}
		start_connect(sh, c);
	}
}

void tlp_room(struct tlp_shard *sh, struct tlp_gpool *gp)
{
	uint32_t who = oldest_shard(gp);

	if (who == sh->id)
		dispatch_queue(sh, gp);
	else if (who != NONE)
		tl_shard_post(sh->s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
}

/* ---- connecting ---- */

/* Pick a server (or queue, or end) and connect to it. */
static void assign(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];
	int r;

	/* First come, first served: behind clients already waiting. */
	if (lp->qhead != NONE || atomic_load_explicit(&c->gp->waiting, memory_order_relaxed)) {
		if (q_add(sh, c) < 0)
			conn_end(sh, c, TLP_END_QUEUE_FULL, 0);
		else
			dispatch_queue(sh, c->gp);
		return;
	}
	r = pick(sh, c);
	if (r == -ENOBUFS) {
		if (q_add(sh, c) < 0)
			conn_end(sh, c, TLP_END_QUEUE_FULL, 0);
		return;
	}
	if (r < 0) {
		conn_end(sh, c, TLP_END_NO_SERVER, 0);
		return;
	}
	start_connect(sh, c);
}

static void connect_failed(struct tlp_shard *sh, struct tlp_conn *c, int err);

static void start_connect(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_srv *srv = c->srv;
	const struct tlp_lrt *l = c->lr;
	uint64_t dl = tl_now(sh->loop) + l->cfg->connect_timeout_ns;
	uint64_t t = tok(CI(sh, c), 1, OP_CONNECT, 0);
	tl_handle h;
	tl_op op;
	int r;

	c->state = C_CONNECT;
	wheel_del(sh, c); /* the connect's own deadline from here */
	if (srv->unix_path) {
		r = tl_unix_connect(sh->loop, srv->path, dl, t, &h, &op);
	} else if (l->nopts) {
		tl_connect_opts o = {.sockopts = l->opts, .nsockopts = l->nopts};

		r = tl_tcp_connect_opts(sh->loop, &srv->addr, &o, dl, t, &h, &op);
	} else {
		r = tl_tcp_connect(sh->loop, &srv->addr, dl, t, &h, &op);
	}
	if (r < 0) {
		if (r == -ENOBUFS) {
			conn_end(sh, c, TLP_END_BUSY, 0);
			return;
		}
		connect_failed(sh, c, r);
		return;
	}
	c->h[1] = h;
}

static void connect_failed(struct tlp_shard *sh, struct tlp_conn *c, int err)
{
	int blame = tlp_blame(err);

	/* Only what the server did counts against it (tlp_blame). */
	if (blame == TLP_BLAME_SERVER)
		tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
	if (blame != TLP_BLAME_FDS && c->ntried < TLP_RETRIES_MAX)
		c->tried[c->ntried++] = (uint16_t)c->vidx;
	srv_release(sh, c);
	if (!tl_handle_eq(c->h[1], TL_HANDLE_NONE)) {
		tl_close(sh->loop, c->h[1], tok(CI(sh, c), 1, OP_CLOSE_OLD, 0));
		c->nclosing++;
		c->h[1] = TL_HANDLE_NONE;
	}
	if (blame == TLP_BLAME_FDS && !sh->stopping) {
		/* No descriptor to connect with: wait for one, no retry spent
		 * (first in line again if it was being given one). */
		fd_short_set(sh, err);
		held_add(sh, c, sh->resuming);
		c->flags |= F_FDWAIT;
		return;
	}
	if (sh->stopping || c->tries >= c->pc->retries) {
		conn_end(sh, c, TLP_END_CONNECT, 0);
		return;
	}
	c->tries++;
	assign(sh, c);
}

static void write_buf(struct tlp_shard *sh, struct tlp_conn *c, int d, const void *p,
		      uint32_t n, int op, uint32_t arg)
{
	uint32_t seq = sh->wseq++;
	tl_op id;

	switch (op) {
	case OP_WRITE:
		if (arg < tlp_w.nleases) {
			sh->lw[arg].p = p;
			sh->lw[arg].len = n;
			sh->lw[arg].seq = seq;
		}
		break;
	case OP_WRITE_HDR:
		sh->hbw[arg].len = n;
		sh->hbw[arg].seq = seq;
		break;
	case OP_WRITE_PEEK:
		PK(sh, c->peek)->wseq = seq;
		break;
	case OP_WRITE_CARRY:
		((struct tlp_ho_in *)c->ho)->wseq[d] = seq;
		break;
	}
	if (tl_write(sh->loop, c->h[d], p, n, tok(CI(sh, c), d, op, arg), &id) < 0) {
		if (op == OP_WRITE)
			tl_lease_release(sh->loop, arg);
		else if (op == OP_WRITE_HDR) {
			sh->hb_free[sh->nhb_free++] = (uint16_t)arg;
			c->hdr = 0xffff;
		} else if (op == OP_WRITE_PEEK) {
			c->flags &= ~F_PEEKW;
		}
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->wq[d]++;
}

/* The PROXY header the pool sends, into a header buffer. */
static void send_pp(struct tlp_shard *sh, struct tlp_conn *c)
{
	const struct tlp_listener_cfg *lc = c->lr->cfg;
	const struct tlp_endpoint *ep = &lc->listen[c->laddr];
	struct sockaddr_un su_src, su_dst;
	const struct sockaddr *src, *dst;
	tl_addr local;
	uint16_t b;
	int n;

	if (!sh->nhb_free) {
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	if (c->pp_in) {
		src = &c->peer.sa;
		dst = &c->dst.sa;
	} else if (ep->kind == TLP_EP_UNIX) {
		memset(&su_src, 0, sizeof su_src);
		su_src.sun_family = AF_UNIX;
		su_dst = ep->addr.un;
		src = (const struct sockaddr *)&su_src;
		dst = (const struct sockaddr *)&su_dst;
	} else {
		if (tl_local_addr(sh->loop, c->h[0], &local) < 0)
			local = (tl_addr){0};
		src = &c->peer.sa;
		dst = &local.sa;
	}
	b = sh->hb_free[--sh->nhb_free];
	if (c->pc->proxy_protocol == TLP_PP_SEND_V1)
		n = tlp_pp_build_v1(sh->hb[b], HB_SIZE, src, dst);
	else
		n = tlp_pp_build_v2(sh->hb[b], HB_SIZE, src, dst);
	if (n <= 0) {
		sh->hb_free[sh->nhb_free++] = b;
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->hdr = b;
	write_buf(sh, c, 1, sh->hb[b], (uint32_t)n, OP_WRITE_HDR, b);
}

static void shut(struct tlp_shard *sh, struct tlp_conn *c, int d)
{
	tl_op op;

	if (c->flags & F_SHUT(d))
		return;
	c->flags |= F_SHUT(d);
	if (tl_shutdown(sh->loop, c->h[d], tok(CI(sh, c), d, OP_SHUT, 0), &op) < 0)
		conn_end(sh, c, TLP_END_BUSY, 0);
}

static void connected(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t ci = CI(sh, c);

	tlp_passive(c->srv, c->pc, 1, 0);
	c->state = C_FWD;
	if (c->pc->proxy_protocol != TLP_PP_SEND_NONE) {
		send_pp(sh, c);
		if (c->state != C_FWD)
			return;
	}
	if (c->peek != NONE) {
		/* What the peek read goes first; the client's reads follow it
		 * in the server's write queue. */
		struct tlp_peek *p = PK(sh, c->peek);

		if (p->len > p->off) {
			c->flags |= F_PEEKW;
			write_buf(sh, c, 1, peek_buf(sh, p) + p->off, p->len - p->off, OP_WRITE_PEEK,
				  0);
		}
		if (c->state != C_FWD)
			return;
		if (!(c->flags & F_PEEKW))
			peek_release(sh, c);
	}
	if (tl_read_start(sh->loop, c->h[0], tok(ci, 0, OP_READ, 0), &c->rd[0]) < 0) {
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_RD(0);
	if (tl_read_start(sh->loop, c->h[1], tok(ci, 1, OP_READ, 0), &c->rd[1]) < 0) {
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_RD(1);
	tlp_spl_init(&c->sp[0], c->lr->cfg->splice);
	tlp_spl_init(&c->sp[1], c->lr->cfg->splice);
	if (c->flags & F_EOF(0))
		shut(sh, c, 1);
	if (c->state == C_FWD)
		arm_idle(sh, c);
}

/* ---- ending ---- */

static void conn_end(struct tlp_shard *sh, struct tlp_conn *c, int cause, int abort_mask)
{
	uint32_t ci = CI(sh, c);
	int was = c->state;

	if (was == C_CLOSING || was == C_FREE)
		return;
	if (c->cause == 0xff)
		c->cause = (uint8_t)cause;
	c->state = C_CLOSING;
	if (c->flags & F_HO)
		ho_drop(c, abort_mask);
	wheel_del(sh, c);
	if (was == C_QUEUED)
		q_del(sh, c);
	else if (was == C_HELD)
		held_del(sh, c);
	pkw_del(sh, c);
	/* A peek buffer a read or write still uses goes at that op's end. */
	if (!(c->flags & (F_PEEKW | F_PKRD)))
		peek_release(sh, c);
	for (int s = 0; s < 2; s++) {
		if (tl_handle_eq(c->h[s], TL_HANDLE_NONE) || (c->flags & F_CLOSE(s)))
			continue;
		c->flags |= F_CLOSE(s);
		c->nclosing++;
		if (abort_mask & (1 << s))
			tl_close_abort(sh->loop, c->h[s], tok(ci, s, OP_CLOSE, 0));
		else
			tl_close(sh->loop, c->h[s], tok(ci, s, OP_CLOSE, 0));
	}
	count_err(sh, c->cause);
	if (c->flags & F_LCOUNT)
		atomic_fetch_sub_explicit(&c->lr->gl->conns, 1, memory_order_relaxed);
	if (c->flags & F_WCOUNT)
		atomic_fetch_sub_explicit(&tlp_w.conns, 1, memory_order_relaxed);
	c->flags &= ~(F_LCOUNT | F_WCOUNT);
	srv_release(sh, c);
	if (!c->nclosing)
		conn_free(sh, c);
}

/* ---- the peek: PROXY header and ClientHello ---- */

/* Read more into c's peek buffer (a record for the first read; a big
 * buffer, or a wait for one, once the record is full). */
static void peek_next(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;
	uint32_t room;

	if (c->peek == NONE && peek_get(sh, c) < 0) {
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	p = PK(sh, c->peek);
	if (p->big == NONE && p->len == PEEK_SMALL) {
		if (sh->big_free == NONE || sh->pkw_head != NONE) {
			pkw_add(sh, c); /* behind those already waiting */
			return;
		}
		big_take(sh, p);
	}
	room = (p->big != NONE ? PEEK_CAP : PEEK_SMALL) - p->len;
	if (!room) {
		/* Not reached: the parsers decide within PEEK_CAP bytes. */
		conn_end(sh, c, c->flags & F_NEED_PP ? TLP_END_PROXY_BAD : TLP_END_SNI_BAD, 0);
		return;
	}
	if (tl_read(sh->loop, c->h[0], peek_buf(sh, p) + p->len, room,
		    tok(CI(sh, c), 0, OP_PEEK, 0), &c->rop) < 0) {
		conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_PKRD;
	/* The header and the hello must come within sni_timeout of the accept. */
	tl_read_deadline(sh->loop, c->rop, c->t0 + c->lr->cfg->sni_timeout_ns);
}

/* Decide c's pool from what the peek read so far, or read more. */
static void peek_parse(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p = PK(sh, c->peek);
	const uint8_t *buf = peek_buf(sh, p);
	const struct tlp_listener_cfg *lc = c->lr->cfg;
	int r, why;

	if (c->flags & F_NEED_PP) {
		struct tlp_pp_header hd;

		r = tlp_pp_parse(buf, p->len, &hd, &why);
		if (r == -EAGAIN) {
			peek_next(sh, c);
			return;
		}
		if (r < 0) {
			conn_end(sh, c, TLP_END_PROXY_BAD, 0);
			return;
		}
		c->flags &= ~F_NEED_PP;
		p->off = (uint32_t)r;
		if (hd.command == TLP_PP_CMD_PROXY &&
		    (hd.family == AF_INET || hd.family == AF_INET6)) {
			memcpy(&c->peer, &hd.src, hd.family == AF_INET ? sizeof hd.src.in
									 : sizeof hd.src.in6);
			memcpy(&c->dst, &hd.dst, hd.family == AF_INET ? sizeof hd.dst.in
									: sizeof hd.dst.in6);
			c->pp_in = 1;
		}
	}
	if (lc->nsni) {
		const struct tlp_lrt *lr = c->lr;

		r = tlp_sni_parse(buf + p->off, p->len - p->off, sh->sni_host,
				  sizeof sh->sni_host, &why);
		if (r == -EAGAIN) {
			if (p->len == PEEK_CAP)
				conn_end(sh, c, TLP_END_SNI_BAD, 0);
			else
				peek_next(sh, c);
			return;
		}
		if (r < 0) {
			conn_end(sh, c, TLP_END_SNI_BAD, 0);
			return;
		}
		int m = r > 0 ? tlp_sni_match(lc->sni, lc->nsni, sh->sni_host, (size_t)r) : -ENOENT;

		c->gp = m >= 0 ? lr->sni_pool[m] : lr->sni_default ? lr->sni_default : lr->pool;
	} else {
		c->gp = c->lr->pool;
	}
	if (!c->gp) {
		conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	c->pc = c->gen->pc_by_gp[c->gp->idx];
	if (!c->pc) {
		conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	assign(sh, c);
}

/* A read into the peek buffer ended. */
static void on_peek(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e)
{
	c->flags &= ~F_PKRD;
	if (c->state != C_PEEK) {
		/* Ending: the buffer is free now, unless a write uses it. */
		if (!(c->flags & F_PEEKW))
			peek_release(sh, c);
		return;
	}
	if (e->result > 0) {
		uint32_t n = (uint32_t)e->result;

		PK(sh, c->peek)->len += n;
		c->bytes[0] += n;
		sh->d_bytes[0] += n;
		peek_parse(sh, c);
		return;
	}
	if (e->result == 0) {
		/* It left before saying where it goes. */
		c->flags |= F_EOF(0);
		conn_end(sh, c, c->flags & F_NEED_PP ? TLP_END_PROXY_BAD : TLP_END_SNI_BAD, 0);
		return;
	}
	conn_end(sh, c, e->result == -ETIMEDOUT ? TLP_END_PEEK_TIMEOUT : TLP_END_CLIENT_RESET, 0);
}

/* ---- splicing (splice.h has the rule) ---- */

/*
 * A direction moves from copying to splicing by stopping its read
 * (tl_stop) and, at that read's terminal, submitting a splice from its
 * source to the other side; each splice's completion submits the next. The
 * splice joins the destination's write queue behind the leases already
 * read, so the bytes keep their order, and it waits for room in the
 * destination as a write does: the same backpressure. A splice counts in
 * wq[] like a write, so a connection whose both sides sent their FIN ends
 * only once the splices are out. Back to copying is tl_read_start again.
 */

static void spl_copy(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	c->sp[s].mode = TLP_SPL_COPY;
	if (tl_read_start(sh->loop, c->h[s], tok(CI(sh, c), s, OP_READ, 0), &c->rd[s]) < 0)
		conn_end(sh, c, TLP_END_BUSY, 0);
}

static void spl_next(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	/* The splice is the source's reader: rd[s] names it (a takeover
	 * cancels it there). */
	int r = tl_splice(sh->loop, c->h[s], c->h[s ^ 1], TLP_SPL_MAX, tok(CI(sh, c), s, OP_SPLICE, 0),
			  &c->rd[s]);

	if (r == 0) {
		c->sp[s].mode = TLP_SPL_SPLICING;
		c->wq[s ^ 1]++;
		sh->spl_dirty = 1;
		return;
	}
	if (r == -ENOBUFS) {
		/* No free pipe in the pool (or no op slot): copy, and count it. */
		sh->d_spl[TLP_SPL_ST_REFUSED]++;
		tlp_spl_refused(&c->sp[s]);
		spl_copy(sh, c, s);
		return;
	}
	/* The driver cannot splice these (-ENOTSUP): this direction copies. */
	spl_copy(sh, c, s);
	c->sp[s].mode = TLP_SPL_OFF;
}

/* A read of side s moved n bytes of a lease of cap bytes while forwarding. */
static void spl_read(struct tlp_shard *sh, struct tlp_conn *c, int s, uint32_t n, uint32_t cap)
{
	c->t_act = tl_now(sh->loop);
	if (tlp_spl_after_read(&c->sp[s], n, cap) && tl_stop(sh->loop, c->rd[s]) == 0)
		c->sp[s].mode = TLP_SPL_STOPPING;
}

/* Side s sent its FIN (a read or a splice of s saw the end). */
static void fwd_eof(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	c->flags |= F_EOF(s);
	if (c->flags & F_HO) {
		/* The FIN goes on in the new process, after the carry. */
		ho_step(sh, c);
		return;
	}
	if (c->flags & F_EOF(s ^ 1)) {
		maybe_done(sh, c);
		return;
	}
	shut(sh, c, s ^ 1);
	if (c->state == C_FWD)
		arm_idle(sh, c); /* a FIN timeout now */
}

static void on_splice(struct tlp_shard *sh, struct tlp_conn *c, int s, const tl_completion *e)
{
	uint64_t taken = e->u.splice.taken, moved = e->u.splice.moved;
	uint64_t now = tl_now(sh->loop);

	c->wq[s ^ 1]--;
	c->sp[s].mode = TLP_SPL_COPY;
	sh->spl_dirty = 1;
	if (taken) {
		c->bytes[s] += taken;
		sh->d_bytes[s] += taken;
		sh->d_spl[TLP_SPL_ST_BYTES] += moved;
	}
	if (moved)
		c->t_act = now;
	if (c->state != C_FWD)
		return; /* ending: its close cancelled the splice */
	if ((c->flags & F_HO) && taken == moved &&
	    (e->result > 0 || e->result == -ECANCELED || e->result == -ETIMEDOUT)) {
		/* Handing over: the pipe is flushed (taken == moved), and no
		 * read or splice follows here. */
		c->flags |= F_HORD(s);
		ho_step(sh, c);
		return;
	}
	if (e->result > 0) {
		if (tlp_spl_after_splice(&c->sp[s], moved)) {
			spl_next(sh, c, s);
		} else {
			sh->d_spl[TLP_SPL_ST_TO_COPY]++;
			spl_copy(sh, c, s);
		}
		return;
	}
	if (e->result == 0 && (e->flags & TL_F_EOF)) {
		fwd_eof(sh, c, s);
		return;
	}
	if (e->result == -ETIMEDOUT) {
		/* The destination's idle deadline ended a splice that waited for
		 * its source: when the other direction still moves bytes (its
		 * splices are progress on the other stream only), this one goes
		 * back to a read, which that progress keeps alive, as copying
		 * does. Bytes dropped from the pipe end the connection. */
		if (taken == moved && now - c->t_act < idle_ns(c)) {
			sh->d_spl[TLP_SPL_ST_TO_COPY]++;
			spl_copy(sh, c, s);
			return;
		}
		conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result == -ECANCELED) {
		spl_copy(sh, c, s);
		return;
	}
	if (taken > moved) {
		/* Bytes left the source and did not reach the destination: the
		 * destination failed, and its source is reset. */
		conn_end(sh, c, s == 0 ? TLP_END_SERVER_ERROR : TLP_END_CLIENT_ERROR, 1 << s);
		return;
	}
	/* The source reset (or failed): the other side sees a reset too. */
	if (s == 1 && c->srv && tlp_blame((int)e->result) == TLP_BLAME_SERVER)
		tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
	conn_end(sh, c, s == 0 ? TLP_END_CLIENT_RESET : TLP_END_SERVER_RESET, 1 << (s ^ 1));
}

/* ---- completions of connections ---- */

static void on_read(struct tlp_shard *sh, struct tlp_conn *c, int s, const tl_completion *e)
{
	if (e->result > 0 && (e->flags & TL_F_LEASE)) {
		uint32_t n = (uint32_t)e->result;
		const tl_lease *l = &e->u.read.lease;

		if (c->state == C_FWD) {
			c->bytes[s] += n;
			sh->d_bytes[s] += n;
			if (c->flags & F_HO) {
				ho_keep(sh, c, s, l->data, l->id, n);
			} else {
				write_buf(sh, c, s ^ 1, l->data, n, OP_WRITE, l->id);
				if (c->sp[s].mode == TLP_SPL_COPY && c->state == C_FWD)
					spl_read(sh, c, s, n, l->cap);
			}
		} else {
			tl_lease_release(sh->loop, l->id);
		}
	}
	if (!(e->flags & TL_F_TERMINAL))
		return;
	if ((c->flags & F_HO) && e->result >= 0 && !(e->flags & TL_F_EOF)) {
		/* Handing over: no splice starts, whatever stopped the read. */
		if (c->sp[s].mode == TLP_SPL_STOPPING)
			c->sp[s].mode = TLP_SPL_COPY;
		c->flags |= F_HORD(s);
		ho_step(sh, c);
		return;
	}
	if (c->sp[s].mode == TLP_SPL_STOPPING) {
		/* The read stopped for a splice (or ended first: then as ever). */
		c->sp[s].mode = TLP_SPL_COPY;
		if ((e->flags & TL_F_STOPPED) && c->state == C_FWD) {
			sh->d_spl[TLP_SPL_ST_TO_SPLICE]++;
			spl_next(sh, c, s);
			return;
		}
	}
	if (e->result == 0 && (e->flags & TL_F_EOF)) {
		if (c->state == C_FWD) {
			fwd_eof(sh, c, s);
			return;
		}
		c->flags |= F_EOF(s);
		return;
	}
	if (e->result == -ETIMEDOUT) {
		conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result < 0 && e->result != -ECANCELED) {
		/* A reset (or another error) on side s: the other side sees a
		 * reset too. */
		if (s == 1 && c->srv && tlp_blame((int)e->result) == TLP_BLAME_SERVER)
			tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
		conn_end(sh, c, s == 0 ? TLP_END_CLIENT_RESET : TLP_END_SERVER_RESET, 1 << (s ^ 1));
		return;
	}
	if (e->result == -ECANCELED && (c->flags & F_HO)) {
		c->flags |= F_HORD(s);
		ho_step(sh, c);
	}
}

/*
 * Both sides have sent their FIN: once the writes to each side are out and
 * any shutdown issued is done, closing both ends the connection (the close
 * is the FIN still owed to a side, so the second FIN needs no shutdown).
 *
 * Without half_close (the listener's choice, nginx's proxy_half_close
 * off), one FIN is enough: once every byte read from the side that sent it
 * is written to the other and the FIN is passed on, both are closed, so a
 * pair whose server answered and closed stops counting for the server
 * (leastconn, max_conns) and the limits at once, whatever its client does.
 * What the other side sends afterwards is not forwarded.
 */
static void maybe_done(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t f = c->flags;

	if (!c->lr->cfg->half_close)
		for (int s = 0; s < 2; s++)
			if ((f & F_EOF(s)) && !c->wq[s ^ 1] && (f & F_SHUTOK(s ^ 1))) {
				conn_end(sh, c, TLP_END_DONE, 0);
				return;
			}
	if ((f & F_EOF(0)) && (f & F_EOF(1)) && !c->wq[0] && !c->wq[1] &&
	    (!(f & F_SHUT(0)) || (f & F_SHUTOK(0))) && (!(f & F_SHUT(1)) || (f & F_SHUTOK(1))))
		conn_end(sh, c, TLP_END_DONE, 0);
}

void tlp_on_conn(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	struct tlp_conn *c = &sh->c[TOK_CI(t)];
	int side = TOK_SIDE(t);

	switch (TOK_OP(t)) {
	case OP_READ:
		on_read(sh, c, side, e);
		return;
	case OP_PEEK:
		on_peek(sh, c, e);
		return;
	case OP_SPLICE:
		on_splice(sh, c, side, e);
		return;
	case OP_WRITE:
		if ((c->flags & F_HO) && TOK_ARG(t) < tlp_w.nleases)
			ho_cut_write(sh, c, side, e, sh->lw[TOK_ARG(t)].p, sh->lw[TOK_ARG(t)].len,
				     sh->lw[TOK_ARG(t)].seq);
		tl_lease_release(sh->loop, TOK_ARG(t));
		goto written;
	case OP_WRITE_HDR:
		if (c->flags & F_HO)
			ho_cut_write(sh, c, side, e, sh->hb[TOK_ARG(t)], sh->hbw[TOK_ARG(t)].len,
				     sh->hbw[TOK_ARG(t)].seq);
		sh->hb_free[sh->nhb_free++] = (uint16_t)TOK_ARG(t);
		c->hdr = 0xffff;
		goto written;
	case OP_WRITE_PEEK:
		if ((c->flags & F_HO) && c->peek != NONE) {
			struct tlp_peek *p = PK(sh, c->peek);

			ho_cut_write(sh, c, side, e, peek_buf(sh, p) + p->off, p->len - p->off, p->wseq);
		}
		c->flags &= ~F_PEEKW;
		peek_release(sh, c);
		goto written;
	case OP_CONNECT:
		if (c->state != C_CONNECT)
			return; /* ended meanwhile */
		if (e->result < 0)
			connect_failed(sh, c, (int)e->result);
		else
			connected(sh, c);
		return;
	case OP_SHUT:
		if (e->result == -ETIMEDOUT)
			conn_end(sh, c, idle_cause(c), 0);
		else if (e->result < 0 && e->result != -ECANCELED)
			conn_end(sh, c, side == 0 ? TLP_END_CLIENT_ERROR : TLP_END_SERVER_ERROR,
				 1 << (side ^ 1));
		else if (e->result == 0)
			c->flags |= F_SHUTOK(side);
		else if (c->flags & F_HO)
			c->flags &= ~F_SHUT(side); /* cancelled before its FIN: the new process sends it */
		if (c->state == C_FWD && (c->flags & F_HO))
			ho_step(sh, c);
		else if (c->state == C_FWD)
			maybe_done(sh, c);
		return;
	case OP_WRITE_CARRY:
		if (c->flags & F_HO) {
			struct tlp_ho_in *in = ((struct tlp_ho_out *)c->ho)->in;

			ho_cut_write(sh, c, side, e, in->c.carry[side ^ 1], in->c.carry_len[side ^ 1],
				     in->wseq[side]);
		}
		carry_written(sh, c);
		goto written;
	case OP_CLOSE:
		c->h[side] = TL_HANDLE_NONE;
		/* fall through */
	case OP_CLOSE_OLD:
		if (--c->nclosing == 0 && c->state == C_CLOSING)
			conn_free(sh, c);
		return;
	default:
		return;
	}
written:
	c->wq[side]--;
	if (e->result == -ETIMEDOUT) {
		conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result < 0 && e->result != -ECANCELED) {
		/* The destination is gone: its source is reset. */
		conn_end(sh, c, side == 0 ? TLP_END_CLIENT_ERROR : TLP_END_SERVER_ERROR,
			 1 << (side ^ 1));
		return;
	}
	if (c->state == C_FWD && (c->flags & F_HO))
		ho_step(sh, c);
	else if (c->state == C_FWD)
		maybe_done(sh, c);
}

/* ---- holding clients: limits and descriptors ---- */

/*
 * At a limit the proxy stops accepting, rather than accept and close, as
 * HAProxy does: clients past it wait in the kernel's listen backlog and
 * are accepted once there is room. The limits are the process's and each
 * listener's max_conns, and the descriptors: a connect or an accept that
 * fails for want of one (TLP_BLAME_FDS) is the proxy's trouble, never a
 * server's. The accept that brought a client past a limit is stopped
 * (tl_stop), and that client, with any its accept had already taken, is
 * held: accepted, nothing read, not counted, first in line for the room
 * (up to HELD_MAX a shard, the table's spare; past that one is closed as
 * `limit`). A shard's table is a limit too: it admits at most admit_cap
 * clients (max_conns, or 15,872 without: main.c), so that held ones always find
 * a slot. A client
 * that has its server chosen and finds no descriptor to connect with is
 * held the same way (F_FDWAIT), its server slot given back and no retry
 * spent. Room is looked for when a connection of the shard ends (its
 * descriptors and counts are back), when another shard's does (a
 * TLP_MSG_RESUME to every shard that holds or stopped something), and at
 * each sweep tick (descriptors freed elsewhere). Then held clients go
 * first, oldest first, and a listener's accept starts again once none of
 * its clients is held and it has room; one that overshoots is held and
 * stops it again.
 */
#define HELD_MAX 64
#define TIGHT_NS 1000000000ull /* see PZ_STOPPING */

static void set_paused(struct tlp_shard *sh)
{
	if (!atomic_exchange_explicit(&tlp_w.paused[sh->id], 1, memory_order_acq_rel))
		atomic_fetch_add_explicit(&tlp_w.npaused, 1, memory_order_acq_rel);
}

/* A connection ended here: its shard, and those waiting for room, look. */
static void notify_room(struct tlp_shard *sh)
{
	sh->fd_freed = 1;
	if (sh->nheld || sh->npz)
		sh->resume_due = 1;
	if (!atomic_load_explicit(&tlp_w.npaused, memory_order_acquire))
		return;
	for (uint32_t t = 0; t < tlp_w.nshards; t++) {
		_Atomic uint8_t *f = &tlp_w.paused[t];

		if (t == sh->id || !atomic_load_explicit(f, memory_order_relaxed) ||
		    !atomic_exchange_explicit(f, 0, memory_order_acq_rel))
			continue;
		atomic_fetch_sub_explicit(&tlp_w.npaused, 1, memory_order_acq_rel);
		tl_shard_post(sh->s, t, tlp_ctl_token(TLP_MSG_RESUME, 0), 0);
	}
}

static void held_add(struct tlp_shard *sh, struct tlp_conn *c, int first)
{
	uint32_t ci = CI(sh, c);

	c->state = C_HELD;
	if (first) {
		c->qprev = NONE;
		c->qnext = sh->held_head;
		if (sh->held_head != NONE)
			sh->c[sh->held_head].qprev = ci;
		else
			sh->held_tail = ci;
		sh->held_head = ci;
	} else {
		c->qnext = NONE;
		c->qprev = sh->held_tail;
		if (sh->held_tail != NONE)
			sh->c[sh->held_tail].qnext = ci;
		else
			sh->held_head = ci;
		sh->held_tail = ci;
	}
	sh->nheld++;
	set_paused(sh);
}

static void held_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		sh->held_head = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		sh->held_tail = c->qprev;
	c->qnext = c->qprev = NONE;
	sh->nheld--;
}

static void fd_short_set(struct tlp_shard *sh, int err)
{
	uint64_t now = tlp_mono_ns();

	sh->fd_short = 1;
	sh->fd_tight_until = now + TIGHT_NS;
	if (now >= sh->fd_log_at) {
		sh->fd_log_at = now + 10000000000ull;
		tlp_log("shard %u: %s: accepting stops until a descriptor is free (clients wait in "
			"the backlog; no server is blamed)",
			sh->id, tl_strerror(err));
	}
}

/* Count c in the limits, or say it must wait (0). */
static int admit(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_world *w = &tlp_w;
	const struct tlp_lrt *lr = c->lr;

	if (sh->fd_short || sh->nadm >= sh->admit_cap)
		return 0;
	if (w->max_conns &&
	    atomic_fetch_add_explicit(&w->conns, 1, memory_order_relaxed) >= w->max_conns) {
		atomic_fetch_sub_explicit(&w->conns, 1, memory_order_relaxed);
		return 0;
	}
	if (lr->cfg->max_conns && atomic_fetch_add_explicit(&lr->gl->conns, 1, memory_order_relaxed) >=
					  lr->cfg->max_conns) {
		atomic_fetch_sub_explicit(&lr->gl->conns, 1, memory_order_relaxed);
		if (w->max_conns)
			atomic_fetch_sub_explicit(&w->conns, 1, memory_order_relaxed);
		return 0;
	}
	if (w->max_conns)
		c->flags |= F_WCOUNT;
	if (lr->cfg->max_conns)
		c->flags |= F_LCOUNT;
	c->flags |= F_ADM;
	sh->nadm++;
	return 1;
}

/* Would a client of listener gli be let in now, behind no held one? */
static int room_for(struct tlp_shard *sh, uint32_t gli)
{
	const struct tlp_lrt *lr = gli < TLP_REG_LISTENERS ? sh->gen->by_gl[gli] : NULL;

	if (sh->fd_short || sh->nadm >= sh->admit_cap)
		return 0;
	if (tlp_w.max_conns &&
	    atomic_load_explicit(&tlp_w.conns, memory_order_relaxed) >= tlp_w.max_conns)
		return 0;
	if (lr && lr->cfg->max_conns &&
	    atomic_load_explicit(&lr->gl->conns, memory_order_relaxed) >= lr->cfg->max_conns)
		return 0;
	for (uint32_t ci = sh->held_head; ci != NONE; ci = sh->c[ci].qnext)
		if (sh->c[ci].lr->gl->idx == gli)
			return 0;
	return 1;
}

/*
 * A listener's accept that waits for room: PZ_STOPPING (tl_stop asked, its
 * terminal not come), PZ_STOPPED (to be started again once its listener
 * has room), PZ_ONESHOT (started again as a one-shot accept, tl_accept).
 * After a shortage of descriptors, for TIGHT_NS after the last, accepts are
 * started again one client at a time: a multishot accept takes every client
 * of the backlog it can find descriptors for, and with the last few taken
 * by clients that then have none to connect with, no one moves until a
 * connection ends. One at a time, each client is accepted only after the
 * one before has its connect.
 */
enum { PZ_STOPPING, PZ_STOPPED, PZ_ONESHOT };

static struct tlp_paused *pz_find(struct tlp_shard *sh, tl_handle h)
{
	for (uint32_t i = 0; i < sh->npz; i++)
		if (tl_handle_eq(sh->pz[i].h, h))
			return &sh->pz[i];
	return NULL;
}

static struct tlp_paused *pz_add(struct tlp_shard *sh, const tl_completion *e, int st)
{
	if (sh->npz == sh->pzcap) {
		uint32_t cap = sh->pzcap ? 2 * sh->pzcap : 16;
		struct tlp_paused *n = realloc(sh->pz, cap * sizeof *n);

		if (!n)
			return NULL;
		sh->pz = n;
		sh->pzcap = cap;
	}
	sh->pz[sh->npz] = (struct tlp_paused){.h = e->handle, .tok = e->token, .st = st};
	set_paused(sh);
	sh->resume_due = 1; /* room may have come before the flag was seen */
	return &sh->pz[sh->npz++];
}

/* Stop the accept that brought e until there is room. */
static void pause_accept(struct tlp_shard *sh, const tl_completion *e)
{
	struct tlp_paused *z = pz_find(sh, e->handle);

	if (z)
		return; /* stopping, or a one-shot: it starts again with room */
	if (!(e->flags & TL_F_TERMINAL) && tl_stop(sh->loop, e->op) != 0)
		return; /* ended meanwhile */
	/* No memory for the entry: the accept, stopped, would never start
	 * again; so it goes on, and each client past the limit is held. */
	if (!pz_add(sh, e, e->flags & TL_F_TERMINAL ? PZ_STOPPED : PZ_STOPPING) &&
	    !(e->flags & TL_F_TERMINAL)) {
		tl_op op;

		tl_accept_start(sh->loop, e->handle, e->token, &op);
	}
}

/* An accept's terminal (no client with it): one stopped, or a one-shot
 * that failed, starts again when there is room; one cancelled by a close
 * has no handle left to start on. */
static void accept_ended(struct tlp_shard *sh, const tl_completion *e)
{
	struct tlp_paused *z = pz_find(sh, e->handle);

	if (!z)
		return;
	if (e->result == -ECANCELED && z->st == PZ_ONESHOT) {
		*z = sh->pz[--sh->npz];
		return;
	}
	if (e->result < 0 && tlp_blame((int)e->result) == TLP_BLAME_FDS)
		fd_short_set(sh, (int)e->result);
	z->st = PZ_STOPPED;
	sh->resume_due = 1;
}

static void admitted(struct tlp_shard *sh, struct tlp_conn *c);

/* Held clients first, oldest first, then the accepts stopped. */
static void resume(struct tlp_shard *sh)
{
	uint32_t next;

	sh->resume_due = 0;
	if (sh->resuming)
		return;
	sh->resuming = 1;
	/* Out of descriptors, try again only once one may be free (a
	 * connection ended, here or elsewhere, or a tick passed): an accept
	 * started again would only fail again, at once. */
	if (sh->fd_freed)
		sh->fd_short = 0;
	sh->fd_freed = 0;
	for (uint32_t ci = sh->held_head; ci != NONE && !sh->fd_short && !sh->stopping; ci = next) {
		struct tlp_conn *c = &sh->c[ci];

		next = c->qnext;
		if (c->flags & F_FDWAIT) {
			held_del(sh, c);
			c->flags &= ~F_FDWAIT;
			assign(sh, c); /* held again, first, if still short */
			continue;
		}
		if (!admit(sh, c))
			continue;
		held_del(sh, c);
		admitted(sh, c);
	}
	for (uint32_t i = 0; i < sh->npz && !sh->stopping;) {
		struct tlp_paused *z = &sh->pz[i];
		tl_op op;

		if (z->st != PZ_STOPPED ||
		    !room_for(sh, (uint32_t)(tl_token_data(z->tok) & 0xffff))) {
			i++;
			continue;
		}
		/* A handle a reload, drain or takeover closed meanwhile refuses:
		 * nothing to start then. */
		if (tlp_mono_ns() < sh->fd_tight_until) {
			if (tl_accept(sh->loop, z->h, z->tok, &op) == 0) {
				z->st = PZ_ONESHOT;
				i++;
				continue;
			}
		} else {
			tl_accept_start(sh->loop, z->h, z->tok, &op);
		}
		*z = sh->pz[--sh->npz];
	}
	if (sh->nheld || sh->npz)
		set_paused(sh);
	sh->resuming = 0;
}

/* ---- accepting ---- */

static void refuse(struct tlp_shard *sh, const struct tlp_lrt *lr, tl_handle h, const tl_addr *peer,
		   int cause)
{
	tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
	count_err(sh, cause);
	log_conn(sh, lr, peer, NULL, NULL, tl_now(sh->loop), cause);
}

/* A client counted in the limits: read its header or hello, or route it. */
static void admitted(struct tlp_shard *sh, struct tlp_conn *c)
{
	const struct tlp_lrt *lr = c->lr;

	/* Its time starts now: held, it was in the backlog, as far as the
	 * timeouts go. */
	c->t0 = tl_now(sh->loop);
	c->t_state = sh->tick;
	if (lr->peek) {
		if (tlp_netset_match(&lr->cfg->proxy_from, &c->peer.sa) == 1)
			c->flags |= F_NEED_PP;
		if (c->flags & F_NEED_PP || lr->cfg->nsni) {
			c->state = C_PEEK;
			peek_next(sh, c);
			return;
		}
	}
	c->state = C_CONNECT;
	c->pc = lr->pool_cfg;
	if (!c->gp || !c->pc) {
		conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	assign(sh, c);
}

void tlp_on_listen(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	uint32_t gli = (uint32_t)(t & 0xffff), ai = (uint32_t)((t >> 16) & 0xff);
	const struct tlp_lrt *lr;
	struct tlp_conn *c;
	tl_handle h;

	if (e->kind != TL_K_ACCEPT)
		return;
	if ((e->flags & TL_F_TERMINAL) && (e->result < 0 || (e->flags & TL_F_STOPPED))) {
		accept_ended(sh, e);
		return;
	}
	if (e->result < 0) {
		/* No descriptor for the client: it stays in the backlog, and
		 * this accept stops until one is free (the driver would try
		 * again by itself, but one accepted with the last descriptor
		 * would have none to connect with). */
		if (tlp_blame((int)e->result) == TLP_BLAME_FDS) {
			fd_short_set(sh, (int)e->result);
			pause_accept(sh, e);
		}
		return;
	}
	if (e->flags & TL_F_TERMINAL) {
		/* A one-shot accept (accepting one at a time) brought a client:
		 * the next once this one has its turn (resume). */
		struct tlp_paused *z = pz_find(sh, e->handle);

		if (z) {
			z->st = PZ_STOPPED;
			sh->resume_due = 1;
		}
	}
	h = e->u.accept.conn;
	lr = gli < TLP_REG_LISTENERS ? sh->gen->by_gl[gli] : NULL;
	if (!lr || sh->stopping) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_SHUTDOWN);
		return;
	}
	if (tlp_acl_check(&lr->cfg->allow, &lr->cfg->deny, &e->u.accept.peer.sa) != 1) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_DENIED);
		return;
	}
	c = conn_new(sh);
	if (!c) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_BUSY);
		return;
	}
	sh->d_conns++;
	c->h[0] = h;
	c->peer = e->u.accept.peer;
	c->laddr = (uint8_t)ai;
	c->t0 = tl_now(sh->loop);
	c->gen = sh->gen;
	c->gen->sc[sh->id].n++;
	c->lr = lr;
	c->gp = lr->pool;
	if (sh->nheld || !admit(sh, c)) {
		/* Past a limit (or behind held clients): held, and this
		 * listener's accept stops. */
		if (sh->nheld >= HELD_MAX) {
			conn_end(sh, c, TLP_END_LIMIT, 0);
		} else {
			held_add(sh, c, 0);
			sh->resume_due = 1;
		}
		pause_accept(sh, e);
		return;
	}
	admitted(sh, c);
}

/* ---- timers, messages ---- */

void tlp_on_ctl(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	uint32_t type = (uint32_t)(t & 0xff);

	switch (type) {
	case TLP_MSG_SWEEP:
		if (e->kind == TL_K_TIMER && e->result == 0)
			sweep(sh);
		return;
	case TLP_MSG_ORPHAN:
		return;
	case TLP_MSG_ROOM:
		if ((t >> 8) < tlp_w.ngp)
			dispatch_queue(sh, tlp_w.gp[t >> 8]);
		return;
	case TLP_MSG_RESUME:
		sh->fd_freed = 1;
		resume(sh);
		return;
	case TLP_MSG_HO_LISTEN:
	case TLP_MSG_HO_GO:
	case TLP_MSG_HO_STEP:
	case TLP_MSG_HO_CONN:
	case TLP_MSG_HO_STOP:
	case TLP_MSG_HO_FIN:
		tlp_takeover_msg(s, type, t >> 8,
				 e->kind == TL_K_MESH ? e->u.mesh.payload
				 : e->kind == TL_K_POST ? e->u.post.payload : 0);
		return;
	default:
		if (e->kind == TL_K_MESH)
			tlp_ctl_msg(s, t, e->u.mesh.payload);
		else if (e->kind == TL_K_POST)
			tlp_ctl_msg(s, t, e->u.post.payload);
		else
			tlp_ctl_msg(s, t, (uint64_t)e->result);
		return;
	}
}

void tlp_on_other(tl_shard *s, const tl_completion *e)
{
	(void)s;
	(void)e; /* Closed of handles the runtime closed at the very end */
}

/* ---- generations and views on this shard ---- */

void tlp_shard_use_gen(tl_shard *s, struct tlp_gen *g)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_gen *old = sh->gen;

	sh->gen = g;
	if (old) {
		old->sc[sh->id].away = 1;
		if (old->sc[sh->id].n == 0)
			tlp_gen_put(old);
	}
}

int tlp_shard_use_view(tl_shard *s, uint32_t pool, struct tlp_view *v)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_lpool *lp = &sh->lp[pool];
	struct tlp_bal_server *loc = NULL;
	struct tlp_balancer bal;
	struct tlp_avoid avoid;
	int r;

	if (v && v->n) {
		loc = calloc(v->n, sizeof *loc);
		if (!loc || tlp_avoid_init(&avoid, v->n) < 0) {
			free(loc);
			tlp_view_put(v);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < v->n; i++) {
			loc[i].id = v->e[i].srv->id;
			loc[i].weight = v->e[i].weight;
			loc[i].max_conns = v->e[i].max_conns;
			loc[i].state = TLP_SRV_UP;
			/* Keep the rotation where a server stays. */
			if (lp->v)
				for (uint32_t j = 0; j < lp->v->n; j++)
					if (lp->v->e[j].srv == v->e[i].srv)
						loc[i].cw = lp->loc[j].cw;
		}
		r = tlp_bal_attach(&bal, v->balance, loc, v->n, &v->tab);
		if (r < 0) {
			tlp_avoid_free(&avoid);
			free(loc);
			tlp_view_put(v);
			return r;
		}
	} else {
		memset(&bal, 0, sizeof bal);
		memset(&avoid, 0, sizeof avoid);
	}
	tlp_bal_free(&lp->bal);
	tlp_avoid_free(&lp->avoid);
	lp->bal = bal;
	lp->avoid = avoid;
	free(lp->loc);
	if (lp->v)
		tlp_view_put(lp->v);
	lp->loc = loc;
	lp->v = v;
	lp->ver = atomic_load(&tlp_w.gp[pool]->state_ver) - 1;
	lp->recheck_at = 0;
	if (lp->qhead != NONE)
		dispatch_queue(sh, tlp_w.gp[pool]);
	return 0;
}

/* ---- listeners ---- */

/* A predecessor with more shards handed over more sockets of an address
 * than this process has shards: shard k accepts on those numbered k + N,
 * k + 2N, ... as well, so that none of them is closed with clients queued
 * in it. */
static void listen_extra(struct tlp_shard *sh, const struct tlp_lrt *lr, uint32_t ai)
{
	const struct tlp_endpoint *ep = &lr->cfg->listen[ai];

	for (uint32_t k = sh->id + tlp_w.nshards; sh->nxlh < TLP_MAX_INHERIT; k += tlp_w.nshards) {
		int inh = tlp_inherited_nth(ep, k), fd;
		tl_handle h;
		tl_op op;

		if (inh < 0)
			return;
		fd = fcntl(inh, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			return;
		if (tl_adopt(sh->loop, fd, &h) < 0) {
			close(fd);
			continue;
		}
		if (tl_accept_start(sh->loop, h, tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16),
				    &op) < 0) {
			tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			continue;
		}
		sh->xtok[sh->nxlh] = tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16);
		sh->xlh[sh->nxlh++] = h;
	}
}

static int listen_one(struct tlp_shard *sh, const struct tlp_lrt *lr, uint32_t ai)
{
	const struct tlp_listener_cfg *lc = lr->cfg;
	const struct tlp_endpoint *ep = &lc->listen[ai];
	const struct tlp_socket_cfg *so = &lc->socket;
	tl_sockopt_val opts[8];
	uint32_t n = 0;
	tl_listen_opts lo = {.backlog = 4096, .reuseport = 1};
	tl_handle h;
	tl_op op;
	int r, inh, own = 0;

	if (ep->kind == TLP_EP_UNIX && sh->id != 0)
		return 0; /* a path has one listener: shard 0's */
	if (ep->kind == TLP_EP_IP) {
		if (!so->nodelay)
			opts[n++] = (tl_sockopt_val){TL_SO_NODELAY, 0};
		if (so->keepalive) {
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPALIVE, 1};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPIDLE, so->ka_idle_s};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPINTVL, so->ka_interval_s};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPCNT, so->ka_count};
		}
		if (so->rcvbuf)
			opts[n++] = (tl_sockopt_val){TL_SO_RCVBUF, so->rcvbuf};
		if (so->sndbuf)
			opts[n++] = (tl_sockopt_val){TL_SO_SNDBUF, so->sndbuf};
	}
	/* A takeover hands over one socket per shard of the old process: this
	 * shard takes its own, if there is one for it. */
	inh = sh->id ? tlp_inherited_nth(ep, sh->id) : -1;
	if (inh < 0)
		inh = tlp_inherited(ep);
	else
		own = 1;
	if (inh >= 0 && ep->kind == TLP_EP_IP && sh->id != 0 && !own) {
		/* A socket with SO_REUSEPORT (systemd's ReusePort=yes): the
		 * other shards join its group with sockets of their own, and the
		 * kernel spreads connections over the shards. Without it, or if
		 * the group refuses us, they accept on the one socket too. */
		int one = 0;
		socklen_t len = sizeof one;

		if (getsockopt(inh, SOL_SOCKET, SO_REUSEPORT, &one, &len) == 0 && one) {
			tl_addr a;

			memset(&a, 0, sizeof a);
			memcpy(&a, &ep->addr,
			       ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
			lo.v6only = a.sa.sa_family == AF_INET6;
			lo.sockopts = opts;
			lo.nsockopts = n;
			if (tl_tcp_listen(sh->loop, &a, &lo, &h) == 0)
				inh = -2;
		}
	}
	if (inh == -2) {
		r = 0;
	} else if (inh >= 0) {
		/* Handed over by systemd: adopt a descriptor of that socket. */
		int fd = fcntl(inh, F_DUPFD_CLOEXEC, 3);

		r = fd < 0 ? -errno : tl_adopt(sh->loop, fd, &h);
		if (r < 0 && fd >= 0)
			close(fd);
		for (uint32_t k = 0; r == 0 && k < n; k++)
			tl_sockopt_set(sh->loop, h, opts[k].opt, opts[k].value);
	} else if (ep->kind == TLP_EP_UNIX) {
		lo.reuseport = 0;
		r = tl_unix_listen(sh->loop, ep->addr.un.sun_path, &lo, &h);
	} else {
		tl_addr a;

		memset(&a, 0, sizeof a);
		memcpy(&a, &ep->addr, ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
		lo.v6only = a.sa.sa_family == AF_INET6;
		lo.sockopts = opts;
		lo.nsockopts = n;
		r = tl_tcp_listen(sh->loop, &a, &lo, &h);
	}
	if (r < 0) {
		fprintf(stderr, "tlproxy: listener %s: cannot listen on %s: %s\n", lc->name,
			ep->text, tl_strerror(r));
		return r;
	}
	r = tl_accept_start(sh->loop, h, tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16),
			    &op);
	if (r < 0) {
		tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		fprintf(stderr, "tlproxy: listener %s: cannot accept on %s: %s\n", lc->name,
			ep->text, tl_strerror(r));
		return r;
	}
	sh->lh[lr->gl->idx][ai] = h;
	if (own || (sh->id == 0 && inh >= 0))
		listen_extra(sh, lr, ai);
	return 0;
}

/* Listen on what generation g lists that this shard does not listen on
 * yet, and stop listening on what it no longer lists. */
int tlp_shard_listen(tl_shard *s, struct tlp_gen *g)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};
	int rc = 0;

	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++) {
		const struct tlp_lrt *lr = g->by_gl[gi];

		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++) {
			tl_handle h = sh->lh[gi][ai];
			int want = lr && ai < lr->cfg->nlisten;

			if (!want && !tl_handle_eq(h, none)) {
				tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
				sh->lh[gi][ai] = none;
			} else if (want && tl_handle_eq(h, none) && !sh->draining) {
				int r = listen_one(sh, lr, ai);

				if (r < 0 && !rc)
					rc = r;
			}
		}
	}
	return rc;
}

/* ---- start and stop ---- */

int tlp_shard_launch(tl_shard *s, void *arg)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_shard *sh;
	tl_op op;
	int r;

	(void)arg;
	sh = calloc(1, sizeof *sh);
	if (!sh)
		return -ENOMEM;
	sh->s = s;
	sh->loop = tl_shard_loop(s);
	sh->id = tl_shard_id(s);
	/* The table: the connections admitted, and HELD_MAX held past a
	 * limit. */
	sh->admit_cap = w->conn_cap;
	sh->cap = w->conn_cap + HELD_MAX;
	sh->c = calloc(sh->cap, sizeof *sh->c);
	sh->wheel = malloc(W_SIZE * sizeof *sh->wheel);
	sh->lh = calloc(TLP_REG_LISTENERS, sizeof *sh->lh);
	sh->pkc = calloc(sh->cap / PK_CHUNK + 1, sizeof *sh->pkc);
	sh->big = malloc((size_t)PEEK_BIG * PEEK_CAP);
	sh->nhb = 1024;
	sh->hb = malloc((size_t)sh->nhb * HB_SIZE);
	sh->hb_free = malloc(sh->nhb * sizeof *sh->hb_free);
	sh->hbw = calloc(sh->nhb, sizeof *sh->hbw);
	sh->lw = calloc(w->nleases, sizeof *sh->lw);
	tl_shard_set_data(s, sh);
	w->shard[sh->id] = sh;
	if (!sh->c || !sh->wheel || !sh->lh || !sh->pkc || !sh->big || !sh->hb || !sh->hb_free ||
	    !sh->hbw || !sh->lw)
		goto nomem;
	/* The first chunk of peek records now: a steady load reuses them. */
	sh->pk_free = NONE;
	if (peek_grow(sh) < 0)
		goto nomem;
	for (uint32_t i = 0; i < PEEK_BIG; i++)
		sh->big_next[i] = i + 1 < PEEK_BIG ? i + 1 : NONE;
	sh->big_free = 0;
	sh->pkw_head = sh->pkw_tail = NONE;
	sh->held_head = sh->held_tail = NONE;
	for (uint32_t i = 0; i < sh->nhb; i++)
		sh->hb_free[i] = (uint16_t)i;
	sh->nhb_free = sh->nhb;
	for (uint32_t i = 0; i < sh->cap; i++) {
		sh->c[i].wnext = i + 1 < sh->cap ? i + 1 : NONE;
		sh->c[i].wslot = NONE;
	}
	sh->free_head = 0;
	for (uint32_t i = 0; i < W_SIZE; i++)
		sh->wheel[i] = NONE;
	for (uint32_t i = 0; i < TLP_REG_POOLS; i++)
		sh->lp[i].qhead = sh->lp[i].qtail = NONE;
	if (w->alog)
		sh->log = tlp_alog_ring(w->alog, sh->id);
	/* The references main took for every shard. */
	sh->gen = atomic_load(&w->gen);
	for (uint32_t i = 0; i < w->ngp; i++)
		if (w->gp[i]->view && (r = tlp_shard_use_view(s, i, w->gp[i]->view)) < 0)
			return r;
	sh->tick_ns = w->tick_ns;
	sh->t_base = tl_now(sh->loop);
	r = tl_timer_start(sh->loop, sh->t_base + sh->tick_ns, sh->tick_ns,
			   tlp_ctl_token(TLP_MSG_SWEEP, 0), &sh->sweep_h, &op);
	if (r < 0)
		return r;
	tl_set_ref(sh->loop, sh->sweep_h, 0);
	r = tlp_shard_listen(s, sh->gen);
	if (r < 0) {
		atomic_store(&w->start_failed, 1);
		return r;
	}
	if (sh->id == 0 && (r = tlp_ctl_start(s)) < 0) {
		atomic_store(&w->start_failed, 1);
		return r;
	}
	atomic_fetch_add(&w->started, 1);
	return 0;
nomem:
	fprintf(stderr, "tlproxy: shard %u: out of memory for %u connections\n", sh->id, sh->cap);
	atomic_store(&w->start_failed, 1);
	return -ENOMEM;
}

void tlp_shard_drain(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);

	(void)arg;
	if (!sh)
		return;
	sh->draining = 1;
	/* The runtime closed the listeners. */
	memset(sh->lh, 0, TLP_REG_LISTENERS * sizeof *sh->lh);
	sh->nxlh = 0;
	if (sh->id == 0)
		tlp_ctl_stop(s);
}

void tlp_shard_stop(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);

	(void)arg;
	if (!sh)
		return;
	sh->stopping = 1;
	if (sh->id == 0)
		tlp_ctl_stop(s);
	/* The drain's time is up (or a second signal came): what is still
	 * open is cut, and both its peers see a reset, never an end that
	 * looks like the whole of a transfer. */
	for (uint32_t i = 0; i < sh->cap; i++)
		if (sh->c[i].state != C_FREE && sh->c[i].state != C_CLOSING)
			conn_end(sh, &sh->c[i], TLP_END_SHUTDOWN, 3);
}


void tlp_shard_free(struct tlp_shard *sh)
{
	if (!sh)
		return;
	for (uint32_t i = 0; i < TLP_REG_POOLS; i++) {
		tlp_bal_free(&sh->lp[i].bal);
		tlp_avoid_free(&sh->lp[i].avoid);
		free(sh->lp[i].loc);
		tlp_view_put(sh->lp[i].v);
	}
	if (sh->gen && !sh->gen->sc[sh->id].away)
		tlp_gen_put(sh->gen);
	for (uint32_t i = 0; sh->pkc && i < sh->npk / PK_CHUNK; i++)
		free(sh->pkc[i]);
	free(sh->pkc);
	free(sh->big);
	free(sh->c);
	free(sh->pz);
	free(sh->wheel);
	free(sh->lh);
	for (uint32_t i = 0; i < sh->nkept; i++)
		close(sh->kept[i].fd);
	free(sh->kept);
	free(sh->hb);
	free(sh->hb_free);
	free(sh->hbw);
	free(sh->lw);
	free(sh);
}

/* ---- takeover (takeover.c has the process side) ---- */

/*
 * Handing a forwarding connection over: both its handles are detached at
 * once, which cancels every operation they have. What the reads had taken
 * still arrives and is kept (ho_keep); each write says how much of it went
 * (u.write.written) and the rest is kept (ho_cut_write), in the order the
 * writes were issued; a splice flushes its pipe first; a shutdown that
 * had not sent its FIN yet is left to the new process. Once every one of
 * them has ended, the descriptors come out and the pair leaves as a CONN
 * record whose carry is what each side is still owed, in order. A FIN
 * read meanwhile is not passed on here: the new process sends it after
 * the carry. Nothing waits for a slow reader, which may take its bytes
 * from the new process as it likes; only a splice into it whose pipe
 * must drain first can hold a connection past the deadline, and then it
 * carries on here (ho_resume).
 */

void tlp_shard_ho_listeners(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};

	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++)
		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++) {
			int fd;

			if (tl_handle_eq(sh->lh[gi][ai], none))
				continue;
			fd = tl_handle_fd(sh->loop, sh->lh[gi][ai]);
			if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
				tlp_ho_push_listener(sh->id, fd);
		}
	for (uint32_t i = 0; i < sh->nxlh; i++) {
		int fd = tl_handle_fd(sh->loop, sh->xlh[i]);

		if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
			tlp_ho_push_listener(sh->id, fd);
	}
}

/* Detach side s of c (a first call cancels what it has). 0, or -1 when c
 * was cut. */
static int ho_detach(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	struct tlp_ho_out *o = c->ho;
	int r;

	if (o->fd[s] >= 0 || tl_handle_eq(c->h[s], TL_HANDLE_NONE))
		return 0;
	r = tl_detach(sh->loop, c->h[s], &o->fd[s]);
	if (r == 0) {
		c->h[s] = TL_HANDLE_NONE;
		return 0;
	}
	o->fd[s] = -1;
	if (r == -EAGAIN)
		return 0;
	conn_end(sh, c, TLP_END_BUSY, 3);
	return -1;
}

static void ho_begin(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = calloc(1, sizeof *o);

	if (!o)
		return; /* it drains here */
	o->fd[0] = o->fd[1] = -1;
	o->in = c->ho; /* a record whose carry is still being written */
	c->ho = o;
	c->flags |= F_HO;
	for (int s = 0; s < 2; s++)
		if (ho_detach(sh, c, s) < 0)
			return;
	ho_step(sh, c);
}

static void keep_listener(struct tlp_shard *sh, tl_handle h, uint64_t token)
{
	int fd = tl_handle_fd(sh->loop, h);

	if (sh->kept && fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0) {
		sh->kept[sh->nkept].fd = fd;
		sh->kept[sh->nkept++].tok = token;
	}
	tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
}

void tlp_shard_ho_end(tl_shard *s, int ok)
{
	struct tlp_shard *sh = SH(s);

	for (uint32_t i = 0; i < sh->nkept; i++) {
		tl_handle h;
		tl_op op;
		int fd = sh->kept[i].fd;

		if (ok || sh->stopping || sh->nxlh == TLP_MAX_INHERIT || tl_adopt(sh->loop, fd, &h) < 0) {
			close(fd);
			continue;
		}
		/* The successor went away: accept again, where the handle was. */
		if (tl_accept_start(sh->loop, h, sh->kept[i].tok, &op) < 0) {
			tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			continue;
		}
		uint64_t d = tl_token_data(sh->kept[i].tok);
		uint32_t gi = (uint32_t)(d & 0xffff), ai = (uint32_t)((d >> 16) & 0xff);

		if (gi < TLP_REG_LISTENERS && ai < TLP_MAX_LISTEN && !sh->lh[gi][ai].v) {
			sh->lh[gi][ai] = h;
		} else {
			sh->xtok[sh->nxlh] = sh->kept[i].tok;
			sh->xlh[sh->nxlh++] = h;
		}
	}
	if (!ok && sh->kept)
		sh->draining = sh->ho_was_draining;
	free(sh->kept);
	sh->kept = NULL;
	sh->nkept = 0;
}

uint32_t tlp_shard_handover(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};
	uint32_t n = 0;

	sh->handing = 1;
	sh->ho_was_draining = sh->draining;
	sh->draining = 1; /* no listener comes back, not even on a reload */
	free(sh->kept);
	sh->nkept = 0;
	sh->kept = calloc(tlp_w.ngl * TLP_MAX_LISTEN + sh->nxlh + 1, sizeof *sh->kept);
	/* The new process holds the sockets: closing our handles leaves their
	 * queues to it. A descriptor of each stays here until the end, in case
	 * the new process goes away first (tlp_shard_ho_end). */
	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++)
		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++)
			if (!tl_handle_eq(sh->lh[gi][ai], none)) {
				keep_listener(sh, sh->lh[gi][ai], tl_token(TLP_H_LISTEN, gi | (uint64_t)ai << 16));
				sh->lh[gi][ai] = none;
			}
	for (uint32_t i = 0; i < sh->nxlh; i++)
		keep_listener(sh, sh->xlh[i], sh->xtok[i]);
	sh->nxlh = 0;
	for (uint32_t i = 0; i < sh->cap; i++) {
		struct tlp_conn *c = &sh->c[i];

		if (c->state == C_FWD && !(c->flags & F_HO)) {
			n++;
			ho_begin(sh, c);
			if (!(c->flags & F_HO) && c->state == C_FWD)
				tlp_ho_gone(); /* no memory: it stays */
		}
	}
	return n;
}

/* Bytes read from side s while handing over: kept, not written. */
static void ho_keep(struct tlp_shard *sh, struct tlp_conn *c, int s, const uint8_t *p, uint32_t id,
		    uint32_t n)
{
	struct tlp_ho_out *o = c->ho;

	if (o->len[s] + (uint64_t)n > TLP_HO_CARRY_MAX) {
		/* More than a stream's leases can hold: not expected; cut. */
		tl_lease_release(sh->loop, id);
		conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	if (o->len[s] + n > o->cap[s]) {
		uint32_t cap = o->cap[s] ? o->cap[s] : 65536;
		uint8_t *b;

		while (cap < o->len[s] + n)
			cap *= 2;
		b = realloc(o->b[s], cap);
		if (!b) {
			tl_lease_release(sh->loop, id);
			conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		o->b[s] = b;
		o->cap[s] = cap;
	}
	memcpy(o->b[s] + o->len[s], p, n);
	o->len[s] += n;
	tl_lease_release(sh->loop, id);
}

/* A write of p[0..len) to side d, number seq, ended while c is handed
 * over (completion e): what it did not write is owed to d, after what the
 * writes issued before it did not write. */
static void ho_cut_write(struct tlp_shard *sh, struct tlp_conn *c, int d, const tl_completion *e,
			 const uint8_t *p, uint32_t len, uint32_t seq)
{
	struct tlp_ho_out *o = c->ho;
	uint64_t done = e->u.write.written;
	struct tlp_ho_piece *w;

	if (c->state != C_FWD || done >= len ||
	    (e->result < 0 && e->result != -ECANCELED))
		return; /* written, or the connection ends anyway */
	if (o->nw[d] == o->capw[d]) {
		uint32_t cap = o->capw[d] ? 2 * o->capw[d] : 16;

		w = realloc(o->w[d], cap * sizeof *w);
		if (!w) {
			conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		o->w[d] = w;
		o->capw[d] = cap;
	}
	w = &o->w[d][o->nw[d]];
	w->len = len - (uint32_t)done;
	w->seq = seq;
	w->p = malloc(w->len);
	if (!w->p) {
		conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	memcpy(w->p, p + done, w->len);
	o->nw[d]++;
}

/* What side s^1 is still owed of side s's bytes, in order, into one new
 * buffer: 0 and *out (NULL when none), or -E2BIG / -ENOMEM. */
static int ho_carry(struct tlp_ho_out *o, int s, uint8_t **out, uint32_t *len)
{
	struct tlp_ho_piece *w = o->w[s ^ 1];
	uint32_t n = o->nw[s ^ 1];
	uint64_t total = o->len[s];
	uint8_t *b, *q;

	/* Few pieces (the writes in flight): an insertion sort by number. */
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && (int32_t)(w[j].seq - w[j - 1].seq) < 0; j--) {
			struct tlp_ho_piece t = w[j];

			w[j] = w[j - 1];
			w[j - 1] = t;
		}
	for (uint32_t i = 0; i < n; i++)
		total += w[i].len;
	*out = NULL;
	*len = 0;
	if (!total)
		return 0;
	if (total > TLP_HO_CARRY_MAX)
		return -E2BIG;
	q = b = malloc(total);
	if (!b)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(q, w[i].p, w[i].len);
		q += w[i].len;
	}
	if (o->len[s])
		memcpy(q, o->b[s], o->len[s]);
	*out = b;
	*len = (uint32_t)total;
	return 0;
}

static void ho_free(struct tlp_ho_out *o)
{
	for (int s = 0; s < 2; s++) {
		for (uint32_t i = 0; i < o->nw[s]; i++)
			free(o->w[s][i].p);
		free(o->w[s]);
		free(o->b[s]);
	}
	free(o->in);
	free(o);
}

/* A connection being handed over ends here instead (conn_end): sides in
 * abort_mask are reset, as their handles would be. */
static void ho_drop(struct tlp_conn *c, int abort_mask)
{
	struct tlp_ho_out *o = c->ho;
	struct tlp_ho_in *in = o->in;

	for (int s = 0; s < 2; s++)
		if (o->fd[s] >= 0) {
			if (abort_mask & (1 << s))
				tlp_ho_fd_abort(o->fd[s]);
			else
				close(o->fd[s]);
		}
	o->in = NULL;
	ho_free(o);
	/* Carry writes still in flight hold their record until they end
	 * (carry_written). */
	c->ho = in;
	c->flags &= ~F_HO;
	tlp_ho_gone();
}

static uint16_t peer_len(const tl_addr *a)
{
	switch (a->sa.sa_family) {
	case AF_INET:
		return sizeof a->in;
	case AF_INET6:
		return sizeof a->in6;
	default:
		return 0; /* an unnamed Unix peer: nothing to say */
	}
}

/* Every operation of c has ended: neither a read, a write, a splice nor a
 * shutdown is left in flight. */
static int ho_quiet(const struct tlp_conn *c)
{
	uint32_t f = c->flags;

	for (int s = 0; s < 2; s++)
		if (((f & F_RD(s)) && !(f & (F_EOF(s) | F_HORD(s)))) || c->wq[s] ||
		    ((f & F_SHUT(s)) && !(f & F_SHUTOK(s))))
			return 0;
	return 1;
}

static void ho_step(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = c->ho;
	uint32_t f = c->flags;
	uint8_t *carry[2] = {NULL, NULL};
	struct tlp_ho_msg m;
	int r = 0;

	if (c->state != C_FWD || !(f & F_HO))
		return;
	if (f & F_HORES) {
		ho_resume(sh, c);
		return;
	}
	if (!ho_quiet(c))
		return;
	if ((f & F_EOF(0)) && (f & F_EOF(1)) && !o->len[0] && !o->len[1] && !o->nw[0] && !o->nw[1]) {
		/* Both FINs came and nothing is owed: closing both ends it
		 * here, with the FINs still owed. */
		conn_end(sh, c, TLP_END_DONE, 0);
		return;
	}
	for (int s = 0; s < 2; s++) {
		if (ho_detach(sh, c, s) < 0)
			return;
		if (o->fd[s] < 0 && !tl_handle_eq(c->h[s], TL_HANDLE_NONE)) {
			/* Its completions are still queued: after this turn. */
			if (tl_shard_post(sh->s, sh->id, tlp_ctl_token(TLP_MSG_HO_STEP, CI(sh, c)), 0) < 0)
				conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
	}
	for (int s = 0; s < 2; s++)
		if (o->fd[s] < 0) {
			/* A side that had finished before it came here (its socket
			 * was no longer a connection): an unconnected socket stands
			 * for it, and the record says it finished (handover.h). */
			o->fd[s] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (o->fd[s] < 0) {
				conn_end(sh, c, TLP_END_BUSY, 3);
				return;
			}
		}
	memset(&m, 0, offsetof(struct tlp_ho_msg, u) + sizeof m.u.conn);
	m.type = TLP_HO_CONN;
	for (int s = 0; s < 2 && r == 0; s++) {
		if (f & F_EOF(s))
			m.u.conn.flags |= TLP_HO_EOF(s);
		if (f & F_SHUTOK(s))
			m.u.conn.flags |= TLP_HO_SHUT(s);
		m.u.conn.bytes[s] = c->bytes[s];
		r = ho_carry(o, s, &carry[s], &m.u.conn.carry_len[s]);
		m.u.conn.carry[s] = carry[s];
	}
	if (r < 0) {
		free(carry[0]);
		free(carry[1]);
		conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	m.u.conn.server = c->vidx;
	m.u.conn.age_ns = tl_now(sh->loop) - c->t0;
	snprintf(m.u.conn.listener, sizeof m.u.conn.listener, "%s", c->lr->gl->name);
	snprintf(m.u.conn.pool, sizeof m.u.conn.pool, "%s", c->gp ? c->gp->name : "");
	snprintf(m.u.conn.srv, sizeof m.u.conn.srv, "%s", c->srv ? c->srv->label : "");
	m.u.conn.peer_len = peer_len(&c->peer);
	memcpy(&m.u.conn.peer, &c->peer, m.u.conn.peer_len);
	/* The record takes the descriptors whatever happens. */
	tlp_ho_push_conn(&m, o->fd);
	free(carry[0]);
	free(carry[1]);
	o->fd[0] = o->fd[1] = -1;
	ho_free(o);
	c->ho = NULL;
	c->flags &= ~F_HO;
	/* Gone from here: what conn_end would release, without a close. */
	c->state = C_CLOSING;
	c->cause = TLP_END_DONE;
	if (c->flags & F_LCOUNT)
		atomic_fetch_sub_explicit(&c->lr->gl->conns, 1, memory_order_relaxed);
	if (c->flags & F_WCOUNT)
		atomic_fetch_sub_explicit(&tlp_w.conns, 1, memory_order_relaxed);
	c->flags &= ~(F_LCOUNT | F_WCOUNT);
	srv_release(sh, c);
	conn_free(sh, c);
}

void tlp_shard_ho_step(tl_shard *s, uint32_t ci)
{
	struct tlp_shard *sh = SH(s);

	if (ci < sh->cap)
		ho_step(sh, &sh->c[ci]);
}

/* A carry write of an adopted connection ended: the record goes with the
 * last (while the connection is handed over again, it is the handover's). */
static void carry_written(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_in **pin = (c->flags & F_HO) ? &((struct tlp_ho_out *)c->ho)->in
						   : (struct tlp_ho_in **)&c->ho;
	struct tlp_ho_in *in = *pin;

	(void)sh;
	if (in && --in->nwrites == 0) {
		free(in);
		*pin = NULL;
	}
}

static struct tlp_glisten *gl_find(const char *name)
{
	for (uint32_t i = 0; i < tlp_w.ngl; i++)
		if (!strcmp(tlp_w.gl[i]->name, name))
			return tlp_w.gl[i];
	return NULL;
}

static struct tlp_gpool *gp_find(const char *name)
{
	for (uint32_t i = 0; i < tlp_w.ngp; i++)
		if (!strcmp(tlp_w.gp[i]->name, name))
			return tlp_w.gp[i];
	return NULL;
}

/* Forward again: the bytes of in (or none) first, then reads on the sides
 * still open, and the FINs read but not yet passed on. c->ho takes in. */
static void carry_on(struct tlp_shard *sh, struct tlp_conn *c, struct tlp_ho_in *in)
{
	uint32_t ci = CI(sh, c);

	c->ho = in;
	if (in) {
		const struct tlp_ho_conn *hc = &in->c;

		in->nwrites = 1; /* held until every write below is issued */
		for (int k = 0; k < 2 && c->state == C_FWD; k++)
			if (hc->carry_len[k]) {
				if (tl_handle_eq(c->h[k ^ 1], TL_HANDLE_NONE)) {
					/* Owed to a side that is gone: cut. */
					conn_end(sh, c, TLP_END_BUSY, 3);
					break;
				}
				in->nwrites++;
				write_buf(sh, c, k ^ 1, hc->carry[k], hc->carry_len[k], OP_WRITE_CARRY, 0);
				if (c->state != C_FWD)
					in->nwrites--; /* write_buf ended it: no completion */
			}
		carry_written(sh, c);
	}
	for (int k = 0; k < 2 && c->state == C_FWD; k++) {
		if (c->flags & F_EOF(k))
			continue;
		tlp_spl_init(&c->sp[k], c->lr->cfg->splice);
		if (tl_read_start(sh->loop, c->h[k], tok(ci, k, OP_READ, 0), &c->rd[k]) < 0) {
			conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		c->flags |= F_RD(k);
	}
	/* A FIN read and not passed on yet. */
	for (int k = 0; k < 2 && c->state == C_FWD; k++)
		if ((c->flags & F_EOF(k)) && !(c->flags & F_SHUT(k ^ 1)))
			shut(sh, c, k ^ 1);
	if (c->state == C_FWD) {
		arm_idle(sh, c);
		maybe_done(sh, c);
	}
}

/* The deadline passed with c still on its way (or the new process went
 * away): it carries on here once every operation has ended (ho_step calls
 * again until then), with what each side is owed written first. */
static void ho_resume(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = c->ho;
	struct tlp_ho_in *in = NULL;
	uint8_t *carry[2] = {NULL, NULL};
	uint32_t len[2] = {0, 0};

	if (!ho_quiet(c))
		return;
	for (int s = 0; s < 2; s++)
		if (o->fd[s] >= 0) {
			if (tl_adopt(sh->loop, o->fd[s], &c->h[s]) < 0) {
				c->h[s] = TL_HANDLE_NONE;
				conn_end(sh, c, TLP_END_BUSY, 3); /* ho_drop resets it */
				return;
			}
			o->fd[s] = -1;
		}
	for (int s = 0; s < 2; s++)
		if (ho_carry(o, s, &carry[s], &len[s]) < 0) {
			free(carry[0]);
			conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
	if (len[0] || len[1]) {
		in = malloc(sizeof *in + len[0] + len[1]);
		if (!in) {
			free(carry[0]);
			free(carry[1]);
			conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		memset(&in->c, 0, sizeof in->c);
		for (int s = 0; s < 2; s++) {
			in->c.carry[s] = in->body + (s ? len[0] : 0);
			in->c.carry_len[s] = len[s];
			if (len[s])
				memcpy(in->body + (s ? len[0] : 0), carry[s], len[s]);
		}
		in->fd[0] = in->fd[1] = -1;
	}
	free(carry[0]);
	free(carry[1]);
	ho_free(o);
	c->ho = NULL;
	c->flags &= ~(F_HO | F_HORD(0) | F_HORD(1) | F_HORES);
	tlp_ho_gone();
	carry_on(sh, c, in);
}

uint32_t tlp_shard_ho_stop(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	uint32_t n = 0;

	sh->handing = 0;
	for (uint32_t i = 0; i < sh->cap; i++) {
		struct tlp_conn *c = &sh->c[i];

		if (c->state == C_FWD && (c->flags & F_HO)) {
			c->flags |= F_HORES;
			n++;
			ho_resume(sh, c);
		}
	}
	return n;
}

/*
 * Side k of a connection handed over, whose socket is no longer a
 * connection (tl_adopt refused it): our FIN had gone to it, its peer's
 * FIN and last ACK came, and the kernel closed it, with what the peer sent
 * before its FIN still there to read, unless the record says its FIN was
 * read already. That is read here and owed to the other side after what
 * the record carries; the side is then done and its descriptor closed.
 * 0 (*pin may be a new record), or a negative errno: the socket was reset,
 * or our FIN had not gone (so it did not end: it failed).
 */
static int side_finish(struct tlp_ho_in **pin, int k)
{
	struct tlp_ho_in *in = *pin, *n;
	uint8_t *rest = NULL, *b;
	uint32_t len = 0, cap = 0, l0, l1;

	if (!(in->c.flags & TLP_HO_SHUT(k)))
		return -ENOTCONN;
	while (!(in->c.flags & TLP_HO_EOF(k))) {
		ssize_t got;

		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			if (in->c.carry_len[k] + (uint64_t)len >= TLP_HO_CARRY_MAX ||
			    !(b = realloc(rest, cap))) {
				free(rest);
				return -E2BIG;
			}
			rest = b;
		}
		got = recv(in->fd[k], rest + len, cap - len, MSG_DONTWAIT);
		if (got > 0)
			len += (uint32_t)got;
		else if (got == 0)
			in->c.flags |= TLP_HO_EOF(k);
		else if (errno != EINTR) {
			int e = errno == EAGAIN ? -ENOTCONN : -errno;

			free(rest);
			return e;
		}
	}
	if (len) {
		l0 = in->c.carry_len[0] + (k == 0 ? len : 0);
		l1 = in->c.carry_len[1] + (k == 1 ? len : 0);
		if ((k == 0 ? l0 : l1) > TLP_HO_CARRY_MAX || !(n = malloc(sizeof *n + l0 + l1))) {
			free(rest);
			return -E2BIG;
		}
		memcpy(n, in, sizeof *n);
		b = n->body;
		for (int s = 0; s < 2; s++) {
			if (in->c.carry_len[s])
				memcpy(b, in->c.carry[s], in->c.carry_len[s]);
			if (s == k)
				memcpy(b + in->c.carry_len[s], rest, len);
			n->c.carry[s] = b;
			n->c.carry_len[s] = s ? l1 : l0;
			b += n->c.carry_len[s];
		}
		free(in);
		*pin = in = n;
	}
	free(rest);
	close(in->fd[k]);
	in->fd[k] = -1;
	return 0;
}

int tlp_shard_adopt(tl_shard *s, struct tlp_ho_in *in)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_world *w = &tlp_w;
	const struct tlp_ho_conn *hc;
	struct tlp_glisten *gl = gl_find(in->c.listener);
	const struct tlp_lrt *lr = gl ? sh->gen->by_gl[gl->idx] : NULL;
	struct tlp_gpool *gp = gp_find(in->c.pool);
	const struct tlp_pool_cfg *pc = gp ? sh->gen->pc_by_gp[gp->idx] : NULL;
	tl_handle h[2] = {TL_HANDLE_NONE, TL_HANDLE_NONE};
	struct tlp_conn *c;
	int r = 0;

	if (!lr || !pc) {
		r = -ENOENT; /* the new configuration has no such listener or pool */
		goto fail;
	}
	if (sh->stopping) {
		r = -ESHUTDOWN;
		goto fail;
	}
	for (int k = 0; k < 2; k++) {
		if ((r = tl_adopt(sh->loop, in->fd[k], &h[k])) == 0)
			continue;
		if (r != -EINVAL || (r = side_finish(&in, k)) < 0)
			goto fail;
	}
	hc = &in->c;
	if (tl_handle_eq(h[0], TL_HANDLE_NONE) && tl_handle_eq(h[1], TL_HANDLE_NONE)) {
		/* Both sides ended while it moved: nothing is left to do. */
		free(in);
		return 0;
	}
	c = conn_new(sh);
	if (!c) {
		r = -ENOBUFS;
		goto fail;
	}
	c->h[0] = h[0];
	c->h[1] = h[1];
	c->state = C_FWD;
	c->t0 = tl_now(sh->loop) - hc->age_ns;
	c->t_state = sh->tick;
	c->gen = sh->gen;
	c->gen->sc[sh->id].n++;
	c->lr = lr;
	c->gp = gp;
	c->pc = pc;
	c->bytes[0] = hc->bytes[0];
	c->bytes[1] = hc->bytes[1];
	memset(&c->peer, 0, sizeof c->peer);
	if (hc->peer_len && hc->peer_len <= sizeof c->peer)
		memcpy(&c->peer, &hc->peer, hc->peer_len);
	/* Count it where the old process did: its server, the limits. */
	{
		struct tlp_view *v = sh->lp[gp->idx].v;

		for (uint32_t i = 0; v && i < v->n; i++)
			if (!strcmp(v->e[i].srv->label, hc->srv)) {
				c->srv = v->e[i].srv;
				c->vidx = i;
				c->flags |= F_SRV;
				atomic_fetch_add_explicit(&c->srv->conns, 1, memory_order_relaxed);
				srv_count(sh, c->srv, 1);
				break;
			}
	}
	if (w->max_conns) {
		c->flags |= F_WCOUNT;
		atomic_fetch_add_explicit(&w->conns, 1, memory_order_relaxed);
	}
	if (lr->cfg->max_conns) {
		c->flags |= F_LCOUNT;
		atomic_fetch_add_explicit(&lr->gl->conns, 1, memory_order_relaxed);
	}
	for (int k = 0; k < 2; k++) {
		if (hc->flags & TLP_HO_EOF(k))
			c->flags |= F_EOF(k);
		if (hc->flags & TLP_HO_SHUT(k))
			c->flags |= F_SHUT(k) | F_SHUTOK(k);
	}
	carry_on(sh, c, in);
	return c->state == C_FWD || c->cause == TLP_END_DONE ? 0 : -ECONNABORTED;
fail:
	for (int k = 0; k < 2; k++) {
		if (!tl_handle_eq(h[k], TL_HANDLE_NONE))
			tl_close_abort(sh->loop, h[k], tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		else
			tlp_ho_fd_abort(in->fd[k]);
	}
	free(in);
	return r;
}
