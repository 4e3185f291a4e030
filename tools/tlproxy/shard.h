/* tools/tlproxy/shard.h: a shard of the data plane, as the process (main.c) runs it: the runtime's callbacks. */
#ifndef TLP_SHARD_H
#define TLP_SHARD_H

/* Calls: main -> shard -> every data-plane stage (see shard.c). */
#include "world.h"

struct tlp_shard;

/* The runtime's on_launch: the shard's tables, its sweep timer, its
 * listeners; shard 0 starts the control plane. 0 or a negative errno. */
int tlp_shard_launch(tl_shard *s, void *arg);
/* on_stop: cut what is still open (both peers see a reset). */
void tlp_shard_stop(tl_shard *s, void *arg);
/* on_drain: the runtime closed the listeners; shard 0 stops the control
 * plane. */
void tlp_shard_drain(tl_shard *s, void *arg);
/* on_pass: publish the stats, hand on what ends freed (conn.c), admit
 * held clients. Returns nonzero while work is left for the next pass. */
int tlp_shard_pass(tl_shard *s, void *arg);
/* Handler TLP_H_CONN: a connection's operations, by the op in the token. */
void tlp_on_conn(tl_shard *s, const tl_completion *c);
/* Handler TLP_H_CTL: the shard's one switch of messages and timers; the
 * control plane's (reload, its tick) go to ctl.c. */
void tlp_on_ctl(tl_shard *s, const tl_completion *c);
/* Handler of everything else: Closed of handles closed at the very end. */
void tlp_on_other(tl_shard *s, const tl_completion *c);
/* Free a shard's state once the runtime is gone (main thread). */
void tlp_shard_free(struct tlp_shard *sh);

#endif /* TLP_SHARD_H */
