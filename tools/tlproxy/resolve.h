/* tools/tlproxy/resolve.h: re-resolution's interface (shard 0). */
#ifndef TLP_RESOLVE_H
#define TLP_RESOLVE_H

/* Calls: resolve -> plane, world. */
#include "world.h"

/* Look host i (its registry index) up again; the next lookup is due one
 * interval from now. Nothing if the lookup cannot start (the next tick
 * tries again). */
void tlp_resolve_start(uint32_t i, uint64_t now);
/* Handler TLP_H_DNS: a lookup's answer. */
void tlp_on_dns(tl_shard *s, const tl_completion *c);

#endif /* TLP_RESOLVE_H */
