/* tools/tlproxy/admin.h: the admin socket's interface (shard 0). */
#ifndef TLP_ADMIN_H
#define TLP_ADMIN_H

/* Calls: admin -> plane, world. */
#include "world.h"

/* Listen on the admin socket at path (a stale socket file is replaced).
 * 0 or a negative errno. */
int tlp_admin_start(const char *path);
/* Close every admin client (the control plane stops). */
void tlp_admin_stop(void);
/* Free the clients' buffers (main thread, at the end). */
void tlp_admin_free(void);
/* Handler TLP_H_ADMIN: the admin socket's accepts and its clients'
 * operations. */
void tlp_on_admin(tl_shard *s, const tl_completion *c);

#endif /* TLP_ADMIN_H */
