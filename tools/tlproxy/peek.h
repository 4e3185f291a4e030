/* tools/tlproxy/peek.h: the peek stage's interface: a PROXY header and a ClientHello read before a server is chosen. */
#ifndef TLP_PEEK_H
#define TLP_PEEK_H

/* Calls: peek -> backend, conn, wheel, state, world. */
#include "state.h"

/* Read more into c's peek buffer (a record for the first read; a big
 * buffer, or a wait for one, once the record is full). */
void tlp_peek_next(struct tlp_shard *sh, struct tlp_conn *c);
/* A read into c's peek buffer completed (e). */
void tlp_on_peek(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e);
/* Free big buffers to the peeks waiting for one, oldest first. */
void tlp_peek_grant(struct tlp_shard *sh);

#endif /* TLP_PEEK_H */
