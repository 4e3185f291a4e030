/* turnloop/replies.h: a connection's replies in request order, each made on this shard or on the shard that owns the request's data (sent over the mesh in batches), handed to the connection's writer in order (docs/BUFIO.md, "Replies in order"). Not built on Windows (docs/WINDOWS.md). */
#ifndef TURNLOOP_REPLIES_H
#define TURNLOOP_REPLIES_H

#include <stdint.h>
#include "turnloop/runtime.h"
#include "turnloop/server.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A pipelining client sends requests 1, 2, 3; 2's key lives on another
 * shard. 3's reply is ready first but must leave after 2's. A tl_replies
 * is the ring of replies a connection owes, in request order: each is a
 * record (the host's struct, beginning with a tl_reply) that is made here
 * at once (tl_replies_add, then tl_reply_buf), or sent to the shard that
 * owns its data (tl_replies_send: the host's run function makes the reply
 * there, in the record), or made later by the host (tl_replies_wait and
 * tl_replies_made: a gather, say). tl_replies_flush hands the replies
 * whose turn has come to the writer, copied into one reserved run.
 *
 * The connection is held (tl_conn_hold) while any record is away, so a
 * client that disconnects meanwhile does not free the records under the
 * shard that writes them; the queue calls tl_conn_ready when they are back,
 * so the host's on_ready goes on. Everything runs on the connection's
 * shard but the run function. Nothing is allocated but a reply longer than
 * a record's inline room (tl_shard_alloc, on the shard that makes it; freed
 * as it leaves, back on that shard).
 *
 * Wiring: tl_replies_init in on_open, tl_replies_fini in on_free,
 * tl_replies_completion in on_completion (before or after
 * tl_server_completion), tl_replies_flush in on_ready.
 */

enum { TL_REPLY_INLINE = 64 }; /* a reply of up to this many bytes lives in its record */

/* The token of the queues' batches (tl_mesh_batcher_init): the host's own
 * batchers use another. */
#define TL_REPLIES_TOKEN UINT64_C(0x00e9e71e5e9e7100)

typedef struct tl_replies tl_replies;

/* The head of the host's record. The host sets flags and result and reads
 * everything; the rest is the queue's. */
typedef struct tl_reply {
	tl_mesh_item link;  /* first: its batch's next (the runtime's while sent) */
	tl_replies *q;
	uint8_t *data;      /* the reply's bytes: out, or a block of tl_shard_alloc; NULL: none made */
	uint32_t len;       /* their count */
	uint8_t done;       /* made: it leaves in its turn */
	uint8_t keep;       /* sent with keep: the run reads the reader's bytes */
	uint16_t flags;     /* the host's */
	int64_t result;     /* the host's: the run's return; -EPIPE: the runtime stopped before it ran */
	uint8_t out[TL_REPLY_INLINE];
} tl_reply;

/* Runs record r on the shard s that owns its data: make the reply with
 * tl_reply_buf(s, r, n). Its return goes to r->result. */
typedef int64_t (*tl_reply_run_fn)(tl_shard *s, tl_reply *r);

/* A reply with no bytes (r->data NULL: a part of a sum, a request the stop
 * refused) as it leaves: write at most out_max bytes at p; return their count. */
typedef uint32_t (*tl_reply_out_fn)(tl_reply *r, uint8_t *p, void *arg);

typedef struct tl_replies_config {
	void *recs;             /* the ring: nrecs records of rec_size bytes (the connection's memory) */
	uint32_t nrecs;         /* a power of two, 1 .. 2^16: replies owed at most (then tl_replies_add says wait) */
	uint32_t rec_size;      /* sizeof the host's record: sizeof(tl_reply) or more, a multiple of its alignment */
	tl_mesh_chain *chains;  /* one per shard (the connection's memory; see tl_mesh_batcher_init) */
	uint32_t nchains;
	tl_reply_run_fn run;    /* required */
	tl_reply_out_fn out;    /* may be NULL: a reply with no bytes writes nothing */
	uint32_t out_max;       /* out's most bytes (at most the writer's ring) */
	void *arg;              /* out's arg */
} tl_replies_config;

struct tl_replies {
	tl_conn *c;
	tl_shard *s;
	tl_replies_config cfg;
	uint32_t head, tail;    /* records owed: [head, tail) */
	uint32_t off;           /* bytes of the head's reply in the writer already */
	uint32_t away;          /* records sent or waited for */
	uint32_t kept;          /* records sent with keep whose result has not come */
	tl_mesh_batcher b;
};

/*
 * Set up q for connection c on shard s (its on_open), over cfg's ring and
 * chains (*cfg is copied; its memory must live as long as c). Returns 0,
 * or -EINVAL (q, c, s, cfg, recs, chains or run NULL; nrecs 0, over 2^16
 * or not a power of two; rec_size below sizeof(tl_reply) or not a multiple
 * of its alignment; nchains 0).
 */
int tl_replies_init(tl_replies *q, tl_conn *c, tl_shard *s, const tl_replies_config *cfg);

/* Free the blocks of replies never written (on_free). s: the connection's
 * shard, or NULL once the runtime is gone (tl_server_free). */
void tl_replies_fini(tl_replies *q, tl_shard *s);

/* 1 when nothing is owed and the writer has room for min bytes: a reply
 * made now may go straight into c->wr. */
static inline int tl_replies_direct(const tl_replies *q, uint32_t min)
{
	return q->head == q->tail && tl_wbuf_room(&q->c->wr) >= min;
}

/* 1 when replies are owed (made or not). */
static inline int tl_replies_owed(const tl_replies *q) { return q->head != q->tail; }

/* Records away: sent, or waited for (tl_replies_wait), not back yet. */
static inline uint32_t tl_replies_away(const tl_replies *q) { return q->away; }

/* Records sent with keep whose result has not come: while there are, the
 * host must neither peek nor consume c->rd (either ends the view their
 * bytes are in). */
static inline uint32_t tl_replies_kept(const tl_replies *q) { return q->kept; }

/*
 * The next record in request order, made here: done, with no bytes yet
 * (tl_reply_buf), flags and result 0. NULL when nrecs are owed: wait for
 * on_ready. Send it (tl_replies_send) or wait for it (tl_replies_wait)
 * before the next flush, or it leaves as it is.
 */
tl_reply *tl_replies_add(tl_replies *q);

/*
 * Room for r's reply of n bytes, made on shard s (the connection's, or the
 * run's): r->out, or a block of tl_shard_alloc(s). Returns it (r->data,
 * r->len = n), or NULL when out of memory (r unchanged). Once a record (a
 * second call loses the first block). A reply may be longer than the
 * writer's ring: it goes in pieces as writes make room.
 */
uint8_t *tl_reply_buf(tl_shard *s, tl_reply *r, uint32_t n);

/*
 * Send r (the newest record) to shard target, where cfg.run makes its
 * reply, batched with q's other records for target this pass and in order
 * with them. keep: the run reads bytes of the reader (tl_replies_kept).
 * Returns 0; or -EPIPE (the runtime is stopping) or -EINVAL (target out of
 * range): r is done then, with that result and no bytes, for cfg.out.
 */
int tl_replies_send(tl_replies *q, tl_reply *r, uint32_t target, int keep);

/* r's reply comes later (the host's own work elsewhere): not done until
 * tl_replies_made(q, r), which then calls tl_conn_ready and may free the
 * connection (touch it no more). Not from the connection's on_ready:
 * tl_replies_made calls it. */
void tl_replies_wait(tl_replies *q, tl_reply *r);
void tl_replies_made(tl_replies *q, tl_reply *r);

/*
 * Hand the replies whose turn has come to c's writer while it has room
 * (each made one copied, cfg.out for one with no bytes, blocks freed on
 * their shard). Returns 1 when every owed reply is out, else 0.
 */
int tl_replies_flush(tl_replies *q);

/*
 * Offer a completion: 1 when it was a batch of a queue (token
 * TL_REPLIES_TOKEN): its records are done (result -EPIPE, no bytes, when
 * the stop refused them: by then the stop has closed the connection, and
 * they are freed unwritten), tl_conn_ready is called, and the connection
 * may be freed. 0: not a queue's.
 */
int tl_replies_completion(const tl_completion *x);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_REPLIES_H */
