/* tools/tlproxy/reload.h: applying a reload (shard 0). */
#ifndef TLP_RELOAD_H
#define TLP_RELOAD_H

/* Calls: reload -> resolve, plane, world (config), sdnotify. */
#include "world.h"

/* Apply req's configuration with its TLS contexts (req, which it then
 * owns, with both): build its generation, move the registries to it and
 * publish it; on an error the running configuration stays and the reason
 * is logged (and systemd told READY=1 at once). */
void tlp_reload(struct tlp_reload_req *req);

/* The end of a reload: once every shard has applied its generation (its
 * listeners bound, its pools in use), log "reloaded: ..." and tell
 * systemd READY=1; before that, nothing. Called on TLP_MSG_GEN_IN and on
 * the control plane's tick (the message is best effort). */
void tlp_reload_check(void);
/* Drop a reload still waiting to be announced (the control plane stops). */
void tlp_reload_forget(void);

#endif /* TLP_RELOAD_H */
