/* tools/tlproxy/tls.h: TLS termination, the stage between accept and routing: a client of a tls: listener handshakes first, then is routed (by the SNI name it sent) and forwarded as plaintext. */
#ifndef TLP_TLS_H
#define TLP_TLS_H

/* Calls: tls -> backend, conn, state, world. */
#include "state.h"

/* Make sh's TLS context (and its log records, its tickets towards
 * servers) if want and it has none: at the launch when the configuration
 * has a tls: listener or pool (tlp_w.tls), or at the reload that brings
 * the first one (on the shard's loop). 0, or a negative errno (then it has
 * none). */
int tlp_tls_shard_init(struct tlp_shard *sh, int want);
/* Free what tlp_tls_shard_init made; call once the shard's loop is gone. */
void tlp_tls_shard_free(struct tlp_shard *sh);
/* An admitted client of a tls: listener: start its session and handshake,
 * with the listener's handshake_timeout as its deadline. */
void tlp_tls_start(struct tlp_shard *sh, struct tlp_conn *c);
/* c's handshake ended (e, TL_K_TLS_HANDSHAKE): count it, keep what it
 * agreed for the log, and route c, or end it (TLP_END_TLS). */
void tlp_tls_on_hs(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e);
/* Side s of c carries on a session handed over by a takeover: what it
 * agreed goes in the connection's access-log record. */
void tlp_tls_adopted(struct tlp_shard *sh, struct tlp_conn *c, int s);
/* The handler at TLP_H_TLS: the layer's own stream completions. */
void tlp_on_tls(tl_shard *s, const tl_completion *e);

#endif /* TLP_TLS_H */
