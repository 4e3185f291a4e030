/* tools/tlproxy/ctl.h: shard 0's control plane (health checks, name re-resolution, the admin socket, reload), as the shard and the process start and feed it. */
#ifndef TLP_CTL_H
#define TLP_CTL_H

/*
 * Calls: shard, main -> ctl -> reload, admin, health, resolve, plane, world. The control plane touches
 * the data plane only through the world (registries, generations, views)
 * and messages (TLP_MSG_GEN, TLP_MSG_VIEW, TLP_MSG_ROOM).
 */
#include "world.h"

/* Start it on shard 0 (from its on_launch): the tick timer and the admin
 * socket. 0 or a negative errno. */
int tlp_ctl_start(tl_shard *s);
/* Stop it (drain or stop of shard 0): the timer, admin clients, checks. */
void tlp_ctl_stop(tl_shard *s);
/* Free what the control plane kept (main thread, at the end). */
void tlp_ctl_free(void);
/* The control plane's messages, from the shard's switch: TLP_MSG_RELOAD
 * (payload: struct tlp_reload_req *), TLP_MSG_GEN_IN (every shard applied
 * the newest generation) and TLP_MSG_CTLTICK; others are ignored. */
void tlp_ctl_msg(tl_shard *s, uint64_t type, uint64_t payload);

#endif /* TLP_CTL_H */
