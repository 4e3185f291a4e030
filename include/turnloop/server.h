/* turnloop/server.h: a stream server on a loop (with the sharded runtime, one per shard): its listener, a table of connections made at setup, each with a reader and a writer (turnloop/bufio.h), and each connection's life from accept to the reuse of its slot (docs/BUFIO.md, "A server"). Not built on Windows (docs/WINDOWS.md). */
#ifndef TURNLOOP_SERVER_H
#define TURNLOOP_SERVER_H

#include <stdint.h>
#include "turnloop/loop.h"
#include "turnloop/bufio.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What every request/response server on turnloop writes around its
 * protocol, once: listen and accept; a fixed table of connection slots
 * (more connections than slots are closed at accept); each connection's
 * reader and writer, its reads started, its completions fed to them; one
 * write per connection per pass; the close once the last reply is out; and
 * the slot kept until nothing in flight still writes into it (references),
 * then reused.
 *
 * The host's per-connection struct begins with a tl_conn (cfg.conn_size
 * bytes a slot). The server calls the host back three ways, on the loop's
 * thread: on_open (a new connection), on_ready (something came: bytes, the
 * peer's end, room in the writer, a drain), on_free (the slot is about to
 * be reused: let go of what the host's fields hold). Everything is
 * allocated by tl_server_start(); nothing after it.
 *
 * Wiring, with the sharded runtime (one server per shard):
 *   on_launch:     tl_server_start(&srv, tl_shard_loop(s), &cfg)
 *   on_completion: if (tl_server_completion(srv, x)) return;  (then the host's own)
 *   on_pass:       return tl_server_pass(srv);
 *   on_drain:      tl_server_drain(srv);
 *   after tl_runtime_destroy(): tl_server_free(srv)
 * and tl_server_size() on the runtime's loop template before it starts.
 * With a plain loop: the same calls around tl_turn (tl_server_pass after
 * each turn's completions).
 */

typedef struct tl_server tl_server;

/* A connection: the head of the host's struct. The host reads eof,
 * draining and closed, and uses rd and wr through turnloop/bufio.h (never
 * their init or fini); the rest is the server's. */
typedef struct tl_conn {
	tl_rbuf rd;        /* what came: tl_rbuf_peek/consume, or set a framing and tl_rbuf_next */
	tl_wbuf wr;        /* what goes: appended bytes leave at the pass's end (tl_server_pass) */
	tl_server *srv;
	tl_handle h;
	uint8_t eof;       /* the peer ended its stream (its bytes before that may still be in rd) */
	uint8_t draining;  /* tl_server_drain: answer what came, then tl_conn_end */
	uint8_t closed;    /* closing or closed (an error, tl_conn_close, the runtime's stop): write nothing */
	uint8_t ending_;   /* tl_conn_end was called */
	uint32_t refs_;    /* the open handle's, and the host's tl_conn_hold()s */
	uint32_t lastn_;
	const void *last_; /* tl_conn_end's bytes, not yet in the writer */
	struct tl_conn *next_;
} tl_conn;

typedef struct tl_server_config {
	tl_addr addr;          /* where to listen (TCP) */
	int reuseport;         /* SO_REUSEPORT: a listener per shard on one address */
	int backlog;           /* listen backlog; 0: 511 */
	uint32_t conns;        /* connection slots, 1 .. 2^20 */
	uint32_t conn_size;    /* bytes a slot: the host's struct, tl_conn first, sizeof(tl_conn) .. 2^24 */
	uint32_t read_max;     /* each reader's largest message or peek (tl_rbuf_init's max) */
	uint32_t write_cap;    /* each writer's ring (tl_wbuf_init's cap; at most the loop's handle_write_bytes) */
	/* A new connection, before its first read: the slot's tl_conn is set up
	 * and the host's fields hold what on_free left (zeros the first time).
	 * May be NULL. */
	void (*on_open)(tl_conn *c, void *arg);
	/* Something came for c: bytes (rd), the peer's end (eof), room in the
	 * writer after a write, or a drain (draining). Read, answer, and call
	 * tl_conn_end() when the connection is done. Not called once c is
	 * closed or ending. Required. */
	void (*on_ready)(tl_conn *c, void *arg);
	/* c is closed and its last reference gone: free what the host's fields
	 * hold; the slot is reused after this. Also called by tl_server_free()
	 * for each slot still in use (the loop gone then: release nothing
	 * through it). May be NULL. */
	void (*on_free)(tl_conn *c, void *arg);
	void *arg;             /* the callbacks' arg */
} tl_server_config;

/*
 * Raise the loop settings a server of conns connections needs, in loop
 * config lc (the sharded runtime: &cfg.loop): handles (a connection each,
 * and 64 more), operations (4 a connection, and 1024 more), pooled read
 * buffers (2 a connection, a power of two up to the loop's most, 32768:
 * each reading stream keeps one).
 * Settings already larger are kept. lc NULL: nothing.
 */
void tl_server_size(tl_config *lc, uint32_t conns);

/*
 * Make a server on loop (its thread; with the runtime, in on_launch, so the
 * memory is the shard's node's): the slot table and every connection's
 * read and write buffers are allocated now (calloc: pages are touched as
 * connections use them), then it listens on cfg->addr and accepts until
 * the loop stops. *cfg is copied. Returns 0 and *out; -EINVAL (out, loop
 * or cfg NULL, on_ready NULL, conns 0 or over 2^20, conn_size below
 * sizeof(tl_conn) or over 2^24, read_max or write_cap out of bufio's range); -ENOMEM;
 * or the listen's error (*out NULL then, nothing kept).
 */
int tl_server_start(tl_server **out, tl_loop *loop, const tl_server_config *cfg);

/* The listener's handle (to ask tl_local_addr for the port of an address
 * given with port 0). */
tl_handle tl_server_listener(const tl_server *srv);

/*
 * Offer completion x to srv: 1 when it was srv's (its listener's, or a
 * connection's read, write or close, a connection's turned away at the
 * accept included: handled, on_open/on_ready/on_free
 * called as they came), 0 when not (the host's own: a mesh result, a
 * timer). A connection's handle data is its tl_conn, so a host that
 * starts its own operations on a connection's handle sees them here as
 * srv's: use other handles, or check x->kind first. srv or x NULL: 0.
 */
int tl_server_completion(tl_server *srv, const tl_completion *x);

/*
 * Flush the pass's writes: one write per connection with bytes appended
 * (tl_wbuf_flush_all). Returns 1 when a writer is still waiting for the
 * loop to take its write (the runtime's on_pass: come back soon), else 0.
 */
int tl_server_pass(tl_server *srv);

/* A graceful stop: every open connection gets draining = 1 and one
 * on_ready, to answer what came and tl_conn_end(). srv NULL: nothing. */
void tl_server_drain(tl_server *srv);

/*
 * Free srv once its loop is gone (after tl_runtime_destroy or
 * tl_loop_destroy: nothing here touches the loop): on_free for every slot
 * still in use (closed by the stop, or held), then the memory. NULL:
 * nothing.
 */
void tl_server_free(tl_server *srv);

/*
 * End c gracefully: the writer's bytes go out, then last[0..n) (NULL or 0:
 * none; the bytes must stay valid until written, a string literal say),
 * then c is closed. Call it when every reply is in the writer; on_ready is
 * not called for c after this. Closed or ending already: nothing (the first
 * call's bytes stand). last may be longer than the writer's ring: it goes
 * in pieces as writes make room.
 */
void tl_conn_end(tl_conn *c, const void *last, uint32_t n);

/* Call on_ready for c now, as when something came: work c waited for is
 * back (turnloop/replies.h calls it). Closed: nothing; ending: the end
 * goes on instead. */
void tl_conn_ready(tl_conn *c);

/* Close c now: bytes not written are dropped (a peer that broke the
 * protocol, a timeout). Closed already: nothing. */
void tl_conn_close(tl_conn *c);

/*
 * References: work in flight that will write into c (a call to another
 * shard whose reply lands in the host's part of c) holds c, and the slot
 * is not freed (nor reused) until the last tl_conn_release(), even if c
 * is closed meanwhile. The release that frees c calls on_free before it
 * returns: touch c no more after the last one.
 */
void tl_conn_hold(tl_conn *c);
void tl_conn_release(tl_conn *c);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_SERVER_H */
