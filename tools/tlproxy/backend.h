/* tools/tlproxy/backend.h: the backend choice's interface: pick a server, connect with retries (and TLS to a tls: pool's server), hand free server slots to queued clients. */
#ifndef TLP_BACKEND_H
#define TLP_BACKEND_H

/* Calls: backend -> fwd, conn, queue, wheel, state, world. */
#include "state.h"

/* Choose a server of gp's view for a client at peer (the hash key) and
 * count one on it (process-wide conns and the shard's row), leaving out
 * the view indexes tried[0..*ntried) while another is usable (*ntried goes
 * to 0 when none is). Returns the index in the view with *out set, or
 * -ENOBUFS (every server up is full), -EHOSTUNREACH (none up). */
int tlp_pick(struct tlp_shard *sh, struct tlp_gpool *gp, const struct sockaddr *peer,
	     const uint16_t *tried, uint8_t *ntried, struct tlp_srv **out);
/* Pick a server for c (or queue it, or end it) and connect to it. */
void tlp_assign(struct tlp_shard *sh, struct tlp_conn *c);
/* c's connect failed with err (a negative errno): blame, retry on
 * another server, hold it for a descriptor, or end it. */
void tlp_connect_failed(struct tlp_shard *sh, struct tlp_conn *c, int err);
/* c's connect succeeded: for a tls: pool, its TLS handshake; then
 * tlp_forward. */
void tlp_connected(struct tlp_shard *sh, struct tlp_conn *c);
/* c's server is ready: the PROXY header and the peeked bytes go first,
 * then both sides are read. */
void tlp_forward(struct tlp_shard *sh, struct tlp_conn *c);
/* backend_tls.c: start the TLS session and handshake on c's connected
 * server stream (c's pool has tls:), deadline handshake_timeout. */
void tlp_origin_start(struct tlp_shard *sh, struct tlp_conn *c);
/* c's server handshake ended (e): count it, then tlp_forward, or end c
 * (TLP_END_SERVER_TLS) with the reason counted and logged. */
void tlp_origin_on_hs(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e);
/* Give queued clients of gp the servers that have room, oldest first
 * across the process (the other shards are told by TLP_MSG_ROOM). */
void tlp_dispatch_queue(struct tlp_shard *sh, struct tlp_gpool *gp);
/* A server slot of pool gp came free on this shard: give it to a queued
 * client here, or tell the shard whose client waited longest. */
void tlp_room(struct tlp_shard *sh, struct tlp_gpool *gp);

#endif /* TLP_BACKEND_H */
