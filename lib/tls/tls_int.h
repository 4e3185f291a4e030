/* lib/tls/tls_int.h: what the TLS layer's files share: the config, the per-loop context, sessions, operations, buffers and tokens. */
#ifndef TL_TLS_INT_H
#define TL_TLS_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <gnutls/gnutls.h>
#include "turnloop/tls.h"
#include "frame.h"
#include "sni.h"

/*
 * The layer sits on the public loop API only (as the sharded runtime
 * does): a session is a stream handle, one tl_read_start on it, and
 * tl_write / tl_shutdown / tl_close of buffers the ctx owns. Its files:
 *
 *   config.c     tl_tls_config: settings checked, files read, the
 *                library's credentials and the SNI map built (any thread)
 *   ctx.c        tl_tls_ctx: tables, pools, the completion queue, ids,
 *                tl_tls_complete's dispatch of the loop's completions
 *   session.c    a session's life: start, the stream read, close, the
 *                host's ops (cancel, stop, deadlines), info
 *   record.c     record I/O: the library's transport callbacks, the read
 *                pump (whole records in, plaintext leases out) and the
 *                write pump (plaintext in, ciphertext buffers out)
 *   handshake.c  the handshake pump, certificate selection by SNI, ALPN,
 *                tickets, and what a library error means (errno, reason)
 *   carry.c      moving a session: its record state out (tl_tls_release)
 *                and in (tl_tls_import), and the record layer an
 *                imported session runs on (GnuTLS's AEAD primitives)
 *   ecsign.c     signatures of ECDSA P-256 keys by libcrypto (without
 *                libcrypto: tls_set_p256_key declines every key)
 *   frame.h, sni.c   the pure parts (record framing, the SNI map)
 */

#define NONE UINT32_MAX

/* ---- the config (shared by every shard, immutable once made) ---- */

struct tl_tls_config {
	_Atomic uint32_t refs;
	int role, verify;
	uint32_t flags, tickets, ticket_lifetime_s;
	uint16_t min_version, max_version;
	uint8_t ticket_key[TL_TLS_TICKET_KEY_SIZE];
	char *priority;      /* the GnuTLS priority string sessions use */
	/* Server: one credentials set per certificate (its key, chain, OCSP
	 * staple, and the client CAs); client: one (trust, its certificate). */
	gnutls_certificate_credentials_t *creds;
	uint32_t ncreds;
	struct tls_sni_map sni;  /* server */
	gnutls_datum_t *alpn;    /* the ALPN list, pointing into alpn_buf */
	uint32_t nalpn;
	char *alpn_buf;
};

/* gnutls_global_init, once per process: 0 or the library's error. */
int tls__library_init(void);

/* ---- buffers ---- */

/* A ciphertext buffer holds one full record (16384 bytes of plaintext and
 * at most 256 of header, inner type, padding and tag: GnuTLS pads nothing)
 * or several small ones, plus room. */
#define TLS_OUT_SIZE (16384 + 1024)
/* What a record costs beyond its plaintext, at most (header 5, TLS 1.2's
 * explicit nonce 8, TLS 1.3's inner type 1, tag 16; generous). */
#define TLS_REC_OVERHEAD 64
/* Plaintext lease ids carry this bit, so that a loop lease id (below the
 * loop's pooled_buffers, at most 2^15) is never taken for one. */
#define TLS_LEASE_BIT TL_TLS_LEASE_BIT

/* ---- operations ---- */

enum { OP_FREE = 0, OP_HS, OP_READ, OP_WRITE, OP_SHUT, OP_KEYUPDATE };
#define OPF_CANCEL 0x1 /* tl_tls_cancel asked */
#define OPF_STOP 0x2   /* tl_tls_stop asked */
#define OPF_QUEUED 0x4 /* in its session's write queue */

struct tls_op {
	uint16_t gen;
	uint8_t type, flags;
	uint8_t ended;      /* its terminal is queued: the slot frees when polled */
	uint32_t sess;      /* session slot */
	uint32_t next;      /* write queue link; free list link */
	uint64_t token;
	uint64_t deadline;  /* OP_HS, OP_READ: absolute, 0: none */
	/* OP_WRITE: what is left to encrypt (cur segment, offset in it), the
	 * total, and the chunk sequence number whose write completion ends it */
	uint8_t niov, cur;
	uint32_t off;
	uint32_t total, done;
	uint64_t last_seq;
	struct iovec iov[TL_IOV_MAX];
	/* OP_KEYUPDATE: ask the peer too */
	uint8_t request;
};

/* ---- sessions ---- */

enum { S_FREE = 0, S_OPEN, S_CLOSING, S_CLOSED };

/* The stream's lease cap: a session that holds TLS_LQ_CAP leases of
 * ciphertext it cannot use yet makes the loop pause that stream. The loop
 * may pass a cap by what a read already in the kernel takes (io_uring's
 * multishot receive fills buffers until its cancel lands: a whole burst),
 * so a session's leases queue on nodes of a ctx-wide pool with one node
 * per lease the loop can have (tl_tls_ctx_config.loop_leases). */
#define TLS_LQ_CAP 4
/* A record the stream brings in small pieces can fill TLS_LQ_CAP leases
 * before it is whole, and the loop pauses the stream there: its bytes are
 * then copied into a spill buffer of the ctx (room for the largest record)
 * and the leases given back, so the rest of it can come. Spill buffers sit
 * in the lease queue like leases; their ids carry this bit. */
#define TLS_SPILL_BIT 0x40000000u
#define TLS_SPILL_SIZE (TLS_REC_HDR + TLS_REC_BODY_MAX + 64)
/* Ciphertext buffers a session may have in the loop's write queue at once
 * (session_out for records of host writes, the rest for the handshake's
 * flights, alerts and tickets). */
#define TLS_OUTQ 8

struct tls_lent {
	uint8_t *data;
	uint32_t id, len, off;
	uint32_t next;
};

struct tls_sess {
	/* The name a client checks the server's certificate against: GnuTLS
	 * keeps the pointer it is given (gnutls_session_set_verify_cert), so
	 * the session keeps its own copy rather than the caller's. */
	char verify_name[TLS_SNI_NAME_MAX + 1];
	uint16_t gen;
	uint8_t state;
	uint8_t server;
	/* flags */
	uint8_t hs_started, hs_done, reading, eof, notify_in, notify_out, fatal, resumed;
	uint8_t closing_wait;   /* a graceful close waits for close_notify's write */
	uint8_t abort;          /* the close is abortive */
	uint8_t peer_cert;
	uint8_t in_budget;      /* records the library may start reading in this call */
	uint8_t out_starved;    /* a push found no buffer (the handshake retries) */
	uint8_t wait_plain, wait_out, wait_spill; /* on the ctx's waiting lists */
	uint8_t queued_run;     /* on the ctx's list of sessions to run */
	uint8_t frame_bad;      /* a record header was refused (after the whole records before it) */
	uint8_t cur_app;        /* the buffer being filled holds records of host writes */
	uint8_t hs_counted;     /* the handshake's outcome is in the stats */
	uint8_t releasing;      /* tl_tls_release began: no new writes, no stream read */
	/* TLS 1.3's first traffic secrets (the key log), for a move */
	uint8_t sec_client[48], sec_server[48];
	/* an imported session's record layer (carry.c); NULL: the library's */
	struct tls_carry *cr;
	uint32_t cslot;         /* the ctx's slot of its config */
	tl_handle h;
	uint64_t close_token;
	gnutls_session_t gs;
	int err, reason;        /* the first fatal error, and its TL_TLS_R_* */
	int in_err;             /* the stream read's error (after its bytes) */
	int out_err;            /* a chunk write's error */
	int alert_in, alert_out;
	uint32_t verify;
	/* the host's ops */
	uint32_t hs_op, rd_op, shut_op, wq_head, wq_tail;
	/* the stream read */
	tl_op rop;
	uint64_t rop_deadline;
	/* ciphertext received: leases in order, framing, and how many bytes
	 * at their front form whole records; window: bytes left of the record
	 * the library is reading */
	uint32_t lq_head, lq_tail, lq_n;
	uint32_t lq_leases;     /* of the lq_n, the loop's leases (not spill buffers) */
	struct tls_frame fr;
	uint32_t whole, window;
	/* plaintext being filled for the host, and the host's leases */
	uint32_t pl, pl_len, pl_held;
	/* ciphertext going out: the buffer being filled, and those written */
	uint32_t out_cur, out_len;
	uint32_t outq[TLS_OUTQ];
	uint8_t outq_app[TLS_OUTQ];
	uint8_t outq_first, outq_n;
	uint8_t out_app;        /* of outq_n, buffers holding host records */
	uint64_t seq_sub, seq_done;
	/* host writes fully encrypted, waiting for their buffers' writes */
	uint32_t aw_head, aw_tail;
	/* waiting lists, and the list of sessions to run */
	uint32_t wait_next, run_next;
	struct tl_tls_ctx *x;
	/* info */
	uint64_t hs_start, hs_ns, bytes_in, bytes_out;
	uint32_t next;          /* free list */
};

/* ---- the per-loop context ---- */

/* Configs one ctx can have sessions of at once (each with its own
 * priority cache). */
#define TLS_CSLOTS 64

struct tls_cslot {
	tl_tls_config *cfg;
	gnutls_priority_t prio;
	uint32_t users;
};

struct tl_tls_ctx {
	tl_loop *loop;
	uint32_t ident;
	tl_tls_ctx_config cc;
	struct tls_cslot cs[TLS_CSLOTS];
	struct tls_sess *sess;
	uint32_t sess_free, nsess_open;
	struct tls_op *ops;
	uint32_t op_free;
	/* TLS completions: a ring sized so it never overflows (one terminal
	 * per op, one Closed per session, one read per plaintext buffer) */
	tl_completion *q;
	uint32_t q_head, q_n, q_cap;
	/* plaintext pool: free stack, and per buffer the session (slot, gen)
	 * holding it through the host */
	uint8_t *plain;
	uint32_t *plain_free, plain_nfree;
	uint32_t *plain_owner;
	uint16_t *plain_owner_gen;
	uint8_t *plain_held;
	/* nodes of the sessions' lease queues */
	struct tls_lent *lents;
	uint32_t lent_free;
	/* spill buffers */
	uint8_t *spill;
	uint32_t *spill_free, spill_nfree;
	uint32_t ws_head, ws_tail;
	/* a record opened in place by the layer's own record layer (TLS_SPILL_SIZE) */
	uint8_t *scratch;
	/* record states of sessions on the layer's own record layer, reused */
	struct tls_carry *carry_free;
	/* ciphertext pool */
	uint8_t *out;
	uint32_t *out_free, out_nfree;
	/* sessions waiting for a buffer (FIFO lists through wait_next), and
	 * sessions a buffer came back for, to run before returning */
	uint32_t wp_head, wp_tail, wo_head, wo_tail, run_head, run_tail;
	tl_tls_stats st;
};

/* ---- loop tokens: tag 8 | kind 4 | slot 24 | aux 28 ---- */

enum { TK_READ = 1, TK_WRITE, TK_SHUT, TK_CLOSE };

static inline uint64_t tls_tok(const struct tl_tls_ctx *x, unsigned kind, uint32_t slot, uint32_t aux)
{
	return (uint64_t)x->cc.token_tag << 56 | (uint64_t)(kind & 0xf) << 52 |
	       (uint64_t)(slot & 0xffffff) << 28 | (aux & 0xfffffff);
}

static inline unsigned tls_tok_kind(uint64_t t) { return (unsigned)(t >> 52) & 0xf; }
static inline uint32_t tls_tok_slot(uint64_t t) { return (uint32_t)(t >> 28) & 0xffffff; }
static inline uint32_t tls_tok_aux(uint64_t t) { return (uint32_t)t & 0xfffffff; }

/* ---- ids (ctx.c) ---- */

static inline uint64_t tls_id(const struct tl_tls_ctx *x, uint16_t gen, uint32_t slot)
{
	return (uint64_t)(x->ident & 0xffffff) << 40 | (uint64_t)gen << 24 | (slot & 0xffffff);
}
/* The session of id (NULL: stale, foreign, or free). */
struct tls_sess *tls__sess_of(struct tl_tls_ctx *x, tl_tls_id id);
/* The op of id (NULL: stale, foreign, or free). */
struct tls_op *tls__op_of(struct tl_tls_ctx *x, tl_op op);
static inline uint32_t tls_sess_slot(const struct tl_tls_ctx *x, const struct tls_sess *s)
{
	return (uint32_t)(s - x->sess);
}
static inline uint32_t tls_op_slot(const struct tl_tls_ctx *x, const struct tls_op *o)
{
	return (uint32_t)(o - x->ops);
}
static inline tl_tls_id tls_sess_id(const struct tl_tls_ctx *x, const struct tls_sess *s)
{
	return (tl_tls_id){tls_id(x, s->gen, tls_sess_slot(x, s))};
}
static inline tl_op tls_op_id(const struct tl_tls_ctx *x, const struct tls_op *o)
{
	return (tl_op){tls_id(x, o->gen, tls_op_slot(x, o))};
}

/* ---- ctx.c ---- */

struct tls_op *tls__op_new(struct tl_tls_ctx *x, struct tls_sess *s, int type, uint64_t token);
/* Queue the op's terminal completion (kind from its type) and free it. */
void tls__op_end(struct tl_tls_ctx *x, struct tls_op *o, int64_t result, uint16_t flags);
/* Put a session's slot back on the free list (its id goes stale). */
void tls__sess_free(struct tl_tls_ctx *x, struct tls_sess *s);
/* Queue a completion (the ring never overflows: see q_cap). */
void tls__push(struct tl_tls_ctx *x, const tl_completion *c);
/* A plaintext buffer for s, or NONE (s then waits, counted). */
uint32_t tls__plain_get(struct tl_tls_ctx *x, struct tls_sess *s);
void tls__plain_put(struct tl_tls_ctx *x, uint32_t idx);
static inline uint8_t *tls_plain(struct tl_tls_ctx *x, uint32_t idx)
{
	return x->plain + (size_t)idx * x->cc.plain_buffer_size;
}
/* A ciphertext buffer, or NONE (s then waits, counted; s may be NULL). */
uint32_t tls__out_get(struct tl_tls_ctx *x, struct tls_sess *s);
/* Give a ciphertext buffer back and run a session waiting for one. */
void tls__out_put(struct tl_tls_ctx *x, uint32_t idx);
/* A spill buffer, or NONE (s then waits); giving one back runs a waiter. */
uint32_t tls__spill_get(struct tl_tls_ctx *x, struct tls_sess *s);
void tls__spill_put(struct tl_tls_ctx *x, uint32_t idx);
static inline uint8_t *tls_spill(struct tl_tls_ctx *x, uint32_t idx)
{
	return x->spill + (size_t)idx * TLS_SPILL_SIZE;
}
static inline uint8_t *tls_out(struct tl_tls_ctx *x, uint32_t idx)
{
	return x->out + (size_t)idx * TLS_OUT_SIZE;
}
/* Run s before the layer returns to the host (a buffer came back for it). */
void tls__kick(struct tl_tls_ctx *x, struct tls_sess *s);
/* Run the kicked sessions (every entry point does, last). */
void tls__runs(struct tl_tls_ctx *x);
/* Take s off the lists of sessions waiting for buffers. */
void tls__unwait(struct tl_tls_ctx *x, struct tls_sess *s);
/* A session's config slot: find or make one for cfg (a priority cache of
 * this ctx). NONE: no free slot (-ENOBUFS) or the library failed. */
uint32_t tls__cslot_get(struct tl_tls_ctx *x, tl_tls_config *cfg, int *err);
void tls__cslot_put(struct tl_tls_ctx *x, uint32_t slot);

/* ---- session.c ---- */

/* Run whatever the session can do now: handshake, reads, writes, close. */
void tls__run(struct tl_tls_ctx *x, struct tls_sess *s);
/* The loop's completion of one of the session's stream ops. */
void tls__on_loop(struct tl_tls_ctx *x, struct tls_sess *s, const tl_completion *c);
/* Make the session fail: err and reason kept, ops ended with err. */
void tls__fail(struct tl_tls_ctx *x, struct tls_sess *s, int err, int reason);
/* Hand the plaintext buffer being filled to the host's read (a nonterminal
 * TL_K_READ), or give it back when it is empty. */
void tls__deliver(struct tl_tls_ctx *x, struct tls_sess *s);
/* Close the stream now; the session's Closed follows the stream's. */
void tls__close_stream(struct tl_tls_ctx *x, struct tls_sess *s);
/* The stream read's deadline: the handshake's while it runs, else the read's. */
void tls__read_deadline(struct tl_tls_ctx *x, struct tls_sess *s);

/* ---- record.c ---- */

void tls__transport(struct tls_sess *s);
/* Hand the lease of a stream read to the session's queue. */
int tls__input(struct tl_tls_ctx *x, struct tls_sess *s, const tl_lease *l, uint32_t n);
/* Drop every held ciphertext lease (closing). */
void tls__input_drop(struct tl_tls_ctx *x, struct tls_sess *s);
/* Held at the lease cap with no whole record: move the bytes into a spill
 * buffer and give the leases back (or wait for a spill buffer). */
void tls__compact(struct tl_tls_ctx *x, struct tls_sess *s);
/* The read pump: whole records into plaintext leases, for the host's read. */
void tls__read_pump(struct tl_tls_ctx *x, struct tls_sess *s);
/* The write pump: host writes into records, out to the stream. */
void tls__write_pump(struct tl_tls_ctx *x, struct tls_sess *s);
/* Make sure a ciphertext buffer with room for need bytes is being filled:
 * 0, or -1 (none: s waits for one). */
int tls__out_ensure(struct tl_tls_ctx *x, struct tls_sess *s, uint32_t need);
/* Write the buffer being filled, if it holds anything. */
void tls__out_flush(struct tl_tls_ctx *x, struct tls_sess *s, int app);
/* A write of a ciphertext buffer completed. */
void tls__out_done(struct tl_tls_ctx *x, struct tls_sess *s, uint32_t idx, int64_t result);
/* End the host's queued writes (and a queued shutdown) with err. */
void tls__writes_fail(struct tl_tls_ctx *x, struct tls_sess *s, int err);

/* Copy the first n bytes of the input queue without taking them; take
 * n bytes from it into p (NULL: drop them), giving back emptied leases. */
void tls__lq_peek(const struct tl_tls_ctx *x, const struct tls_sess *s, uint8_t *p, uint32_t n);
void tls__lq_take(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *p, uint32_t n);

/* ---- carry.c ---- */

/* Record the session's first TLS 1.3 traffic secrets (set at setup). */
void tls__carry_keylog(struct tls_sess *s);
/* 0 if s can be released now or once quiet, -EOPNOTSUPP if never. */
int tls__carry_movable(struct tl_tls_ctx *x, struct tls_sess *s);
/* After its handshake, a library session's records go to the layer's own
 * record layer, in place (the library session is let go): 0, or a
 * negative errno and nothing changed. */
int tls__carry_own(struct tl_tls_ctx *x, struct tls_sess *s);
/* Write s's state into out[0..cap): its length, or a negative errno. */
int tls__carry_export(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *out, uint32_t cap);
/* Make s (open, no library session) carry on from state st[0..len). */
int tls__carry_import(struct tl_tls_ctx *x, struct tls_sess *s, const uint8_t *st, uint32_t len);
/* Give s's record state back to the ctx's free list. */
void tls__carry_free(struct tls_sess *s);
void tls__carry_pool_free(struct tl_tls_ctx *x);
void tls__carry_info(const struct tls_sess *s, tl_tls_info *out);
/* The record layer of an imported session; the library's conventions:
 * bytes, 0 at close_notify, GNUTLS_E_* (GNUTLS_E_AGAIN: nothing, or a
 * record that carried no data). The caller made room in the buffer being
 * filled (send: n + TLS_REC_OVERHEAD; recv: 256, for an answer). */
ssize_t tls__carry_recv(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *buf, uint32_t room, uint8_t *scratch);
uint32_t tls__carry_pending(const struct tls_sess *s);
int tls__carry_send(struct tl_tls_ctx *x, struct tls_sess *s, const struct iovec *v, int nv, uint32_t n);
int tls__carry_alert(struct tl_tls_ctx *x, struct tls_sess *s, int level, int desc);
int tls__carry_key_update(struct tl_tls_ctx *x, struct tls_sess *s, int request);
/* The alert that tells the peer of failure g, or -1 for none. */
int tls__carry_alert_of(int g);
/* TL_TLS_1_3 or TL_TLS_1_2: an imported session's version. */
int tls__carry_version(const struct tls_sess *s);

/* Plaintext opened but not handed out yet. */
static inline size_t tls__plain_pending(struct tls_sess *s)
{
	return s->cr ? tls__carry_pending(s) : gnutls_record_check_pending(s->gs);
}

/* ---- handshake.c ---- */

/* Set up the library session (server or client). 0 or a negative errno. */
int tls__session_setup(struct tl_tls_ctx *x, struct tls_sess *s, const tl_tls_client_opts *o);
void tls__handshake_pump(struct tl_tls_ctx *x, struct tls_sess *s);
/* What a library error means: the errno returned, and *reason. */
int tls__map_error(struct tls_sess *s, int gerr, int *reason);
/* The library's call failed with gerr: alert the peer if it is fatal, and
 * fail the session. */
void tls__library_failed(struct tl_tls_ctx *x, struct tls_sess *s, int gerr);

/* Load crt (PEM, a chain) with key_pem into cred when the key is ECDSA on
 * P-256, its signatures made by libcrypto (ecsign.c): 1 done, 0 not such a
 * key (the caller loads it through GnuTLS), or a GnuTLS error (e.g.
 * GNUTLS_E_CERTIFICATE_KEY_MISMATCH). */
#if TLS_P256_LIBCRYPTO
int tls_set_p256_key(gnutls_certificate_credentials_t cred, const gnutls_datum_t *crt,
		     const gnutls_datum_t *key_pem);
#else
static inline int tls_set_p256_key(gnutls_certificate_credentials_t cred, const gnutls_datum_t *crt,
				   const gnutls_datum_t *key_pem)
{
	(void)cred;
	(void)crt;
	(void)key_pem;
	return 0;
}
#endif

#endif
