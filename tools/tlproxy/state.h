/* tools/tlproxy/state.h: a shard's own state: the connection record, the shard, the tokens of its operations, and the small helpers every data-plane stage uses (types only; no stage). */
#ifndef TLP_STATE_H
#define TLP_STATE_H

/*
 * Calls: every data-plane stage includes this; it includes only the world
 * and the pure modules (stages: docs/DESIGN.md, "tlproxy by stage").
 */
#include <stdint.h>
#include <string.h>

#include "world.h"
#include "alog.h"
#include "proxyproto.h"
#include "sni.h"
#include "splice.h"
#include "takeover.h"

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
/* A server's resume data (tl_tls_resume_data: a ticket, its secrets and
 * the server's certificate chain), kept per shard and server row: for the
 * server srv_id, under generation gen_ver (a reload drops them, as its CA
 * or names may differ); len 0: none. */
#define TLP_TICKET_MAX 8192
struct tlp_ticket {
	uint64_t srv_id, gen_ver;
	uint32_t len;
	uint8_t b[TLP_TICKET_MAX];
};

#define HB_SIZE 640 /* a v2 header with its TLS TLVs (backend.c, pp_tls) */

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
	OP_TLS_HS,     /* a side's TLS handshake: the client's (tls.c), the server's (backend_tls.c) */
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

enum { C_FREE = 0, C_PEEK, C_QUEUED, C_CONNECT, C_FWD, C_CLOSING, C_HELD,
       C_TLS /* the client's TLS handshake (tls.c); its deadline is the session's */ };

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
#define F_TLS(s) (0x1000000u << (s)) /* side s is a TLS session (ts[s]): its I/O goes through it */
#define F_PPSENT 0x8000000u          /* the PROXY header went (before a tls: pool's TLS) */
#define F_HOWAIT 0x4000000u          /* takeover: still being set up when its shard began
				      * handing over; handed over once it forwards */

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
	int16_t cerr;            /* the last failed connect's error (negative errno), 0 none */
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
	tl_tls_id ts[2];         /* F_TLS(s): side s's TLS session */
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
	int write_now; /* a lease is written with tl_try_write first (fwd.h) */
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
	struct tlp_lw { const uint8_t *p; uint32_t len, seq; } *lw; /* by lease id */
	struct tlp_lw *tlw;      /* by TLS plaintext lease index (side.h) */
	uint32_t ntlw;
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
	/* What ends (conn.c) freed for others, handed on at the end of the
	 * pass (shard.c) by the stages above conn.c: pools with a server slot
	 * free and clients queued (room_due by pool index, room_list in
	 * order), and big peek buffers free with peeks waiting. */
	uint8_t room_due[TLP_REG_POOLS];
	uint16_t room_list[TLP_REG_POOLS];
	uint32_t nroom;
	int grant_due;
	struct tlp_udp *udp;       /* UDP listeners and sessions (udp.c), NULL: none */
	/* TLS (tls.c): the shard's context, NULL when no listener had tls:
	 * at the start; and a record per connection slot for the log. */
	struct tl_tls_ctx *tls;
	struct tlp_alog_tls *tlr;
	/* Resumption towards tls: pools' servers: per server row, the resume
	 * data of the last session with it on this shard that was a full
	 * handshake (side.h keeps it, backend_tls.c offers it); NULL: no TLS. */
	struct tlp_ticket *tk;
};
_Static_assert(TLP_REG_POOLS <= 65536, "room_list holds pool indexes in 16 bits");

/* Clients held past a limit, at most, per shard (accept.c: the table's
 * spare); and how long accepts go one at a time after a shortage of
 * descriptors (accept.c, PZ_ONESHOT). */
#define HELD_MAX 64
#define TIGHT_NS 1000000000ull

static inline struct tlp_shard *SH(tl_shard *s)
{
	return tl_shard_data(s);
}

static inline uint32_t CI(const struct tlp_shard *sh, const struct tlp_conn *c)
{
	return (uint32_t)(c - sh->c);
}

static inline void srv_count(struct tlp_shard *sh, struct tlp_srv *srv, int d)
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

/* A connection or UDP session of shard sh begins under generation g: g
 * stays while any does (tlp_gen_shard). */
static inline void tlp_gen_hold(struct tlp_shard *sh, struct tlp_gen *g)
{
	g->sc[sh->id].n++;
}

/* ... and ends: the shard's reference to g goes with the last one once the
 * shard has moved on to a newer generation. */
static inline void tlp_gen_unhold(struct tlp_shard *sh, struct tlp_gen *g)
{
	struct tlp_gen_shard *gs = &g->sc[sh->id];

	if (--gs->n == 0 && gs->away)
		tlp_gen_put(g);
}

static inline void count_err(struct tlp_shard *sh, int cause)
{
	if (cause != TLP_END_DONE)
		tl_shard_counter_add(sh->s, tlp_w.st_errors + cause - 1, 1);
}

static inline struct tlp_peek *PK(struct tlp_shard *sh, uint32_t i)
{
	return &sh->pkc[i / PK_CHUNK][i % PK_CHUNK];
}

static inline uint8_t *peek_buf(struct tlp_shard *sh, struct tlp_peek *p)
{
	return p->big != NONE ? sh->big + (size_t)p->big * PEEK_CAP : p->small;
}

/* Pool gp has a server slot free and clients queued: hand it on at the end
 * of the pass (shard.c calls tlp_room). */
static inline void tlp_room_later(struct tlp_shard *sh, struct tlp_gpool *gp)
{
	if (!sh->room_due[gp->idx]) {
		sh->room_due[gp->idx] = 1;
		sh->room_list[sh->nroom++] = (uint16_t)gp->idx;
	}
}

/*
 * The per-connection takeover (ho.c) behind one hook: the stages below it
 * (conn.c, fwd, backend) reach it only through tlp_ho_hook, and only for
 * a connection being handed over (F_HO) or awaited (F_HOWAIT), so the
 * forwarding path makes no call for it otherwise.
 *  - TLP_HO_DROP: c ends while handed over; s is conn_end's abort mask.
 *  - TLP_HO_KEEP: a read of side s brought n bytes at p (lease id), kept
 *    for the successor instead of written.
 *  - TLP_HO_STEP: something c waited for ended: try its detach again.
 *  - TLP_HO_FORWARDS: c (F_HOWAIT) forwards now: hand it over too.
 *  - TLP_HO_FORGET: c (F_HOWAIT) ended before it forwarded.
 */
enum { TLP_HO_DROP, TLP_HO_KEEP, TLP_HO_STEP, TLP_HO_FORWARDS, TLP_HO_FORGET };
extern void (*const tlp_ho_hook)(struct tlp_shard *sh, struct tlp_conn *c, int ev, int s,
				 const uint8_t *p, uint32_t id, uint32_t n);

#endif /* TLP_STATE_H */
