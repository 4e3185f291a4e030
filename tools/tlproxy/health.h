/* tools/tlproxy/health.h: active health checks' interface (shard 0). */
#ifndef TLP_HEALTH_H
#define TLP_HEALTH_H

/* Calls: health -> plane, world. */
#include "world.h"

/* gp's health at now (its pool checks health): time out checks past
 * their deadline, start a round when one is due. */
void tlp_health_tick(struct tlp_gpool *gp, uint64_t now);
/* Close the handles of the checks in flight (the control plane stops). */
void tlp_health_stop(void);
/* Handler TLP_H_HEALTH: a check's operations. */
void tlp_on_health(tl_shard *s, const tl_completion *c);

#endif /* TLP_HEALTH_H */
