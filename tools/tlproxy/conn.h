/* tools/tlproxy/conn.h: the interface of a connection's slot (conn.c): start, end, and what a connection holds. */
#ifndef TLP_CONN_H
#define TLP_CONN_H

/* Calls: conn -> queue, wheel, state, world, alog (the bottom stage: every
 * stage above ends connections here, and conn.c calls none of them). */
#include "state.h"

/* A free slot of the table, cleared, or NULL when the table is full. */
struct tlp_conn *tlp_conn_new(struct tlp_shard *sh);
/* End c with cause (the first cause given stays): it leaves the wheel, its
 * queue or the held list, its handles are closed (aborted for the sides in
 * abort_mask, bit s for side s: a reset), its counts are given back and its
 * slot is freed once every close is done. Nothing if it is ending already. */
void tlp_conn_end(struct tlp_shard *sh, struct tlp_conn *c, int cause, int abort_mask);
/* Free c's slot once its last operation ended (logs it). */
void tlp_conn_free(struct tlp_shard *sh, struct tlp_conn *c);
/* Log a connection that ended (nothing without an access log): retries is
 * how many connects it retried, cerr the last failed connect's error (0
 * none), tls what its client's TLS handshake agreed (NULL: plain). */
void tlp_log_conn(struct tlp_shard *sh, const struct tlp_lrt *lr, const tl_addr *peer,
		  const struct tlp_srv *srv, const uint64_t bytes[2], uint64_t t0, int cause,
		  unsigned retries, int cerr, const struct tlp_alog_tls *tls);

/* Peek records (the rule is at PEEK_CAP, state.h). Another chunk of
 * records while the pool is smaller than the table: 0, or -1 (full, or no
 * memory). */
int tlp_peek_grow(struct tlp_shard *sh);
/* A record for c: 0, or -1 (no memory). */
int tlp_peek_get(struct tlp_shard *sh, struct tlp_conn *c);
/* c waits for a big buffer, behind those waiting (and in the wheel). */
void tlp_pkw_add(struct tlp_shard *sh, struct tlp_conn *c);
/* c waits no more (nothing if it did not). */
void tlp_pkw_del(struct tlp_shard *sh, struct tlp_conn *c);
/* Move a full record's bytes into a free big buffer (one must be free). */
void tlp_big_take(struct tlp_shard *sh, struct tlp_peek *p);
/* Give c's record and big buffer back, once no operation uses them; a big
 * buffer that others wait for is given at the end of the pass (peek.c). */
void tlp_peek_release(struct tlp_shard *sh, struct tlp_conn *c);

/* Give c's server slot back (process-wide count, stats); with clients
 * queued for the pool, the slot is handed on at the end of the pass. */
void tlp_srv_release(struct tlp_shard *sh, struct tlp_conn *c);

/* Held clients (accept.c has the rule). Hold c, first in line or last. */
void tlp_held_add(struct tlp_shard *sh, struct tlp_conn *c, int first);
/* c is held no more. */
void tlp_held_del(struct tlp_shard *sh, struct tlp_conn *c);
/* This shard holds clients or stopped accepts: tell it when room comes
 * free elsewhere (TLP_MSG_RESUME). */
void tlp_set_paused(struct tlp_shard *sh);
/* A connect or accept found no descriptor (err): accept one at a time for
 * a while, and log it (at most every 10 s). */
void tlp_fd_short_set(struct tlp_shard *sh, int err);

#endif /* TLP_CONN_H */
