/* tools/tlproxy/reload.h: applying a reload (shard 0). */
#ifndef TLP_RELOAD_H
#define TLP_RELOAD_H

/* Calls: reload -> resolve, plane, world, sdnotify. */
#include "world.h"

/* Apply req's configuration with its TLS contexts (req, which it then
 * owns, with both): build its generation, move the registries to it and
 * publish it; on an error the running configuration stays and the reason
 * is logged. Tells systemd READY=1 when done. */
void tlp_reload(struct tlp_reload_req *req);

#endif /* TLP_RELOAD_H */
