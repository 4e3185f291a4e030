/* tools/tlproxy/accept.h: the interface of listeners and accepts. */
#ifndef TLP_ACCEPT_H
#define TLP_ACCEPT_H

/* Calls: accept -> peek, backend, conn, wheel, state, world. */
#include "state.h"

/* An accept's completion (or the close of a refused client). */
void tlp_on_listen(tl_shard *s, const tl_completion *c);
/* Listen on what g lists and this shard does not yet; stop what it drops.
 * 0 or a negative errno (a listener that could not be opened). */
int tlp_shard_listen(tl_shard *s, struct tlp_gen *g);
/* Held clients first, oldest first, then the accepts stopped for room. */
void tlp_resume(struct tlp_shard *sh);

#endif /* TLP_ACCEPT_H */
