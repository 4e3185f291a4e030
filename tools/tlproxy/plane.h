/* tools/tlproxy/plane.h: what the parts of shard 0's control plane share (plane.c). */
#ifndef TLP_PLANE_H
#define TLP_PLANE_H

/* Calls: plane -> world. Used by ctl, health, resolve, admin, reload. */
#include "world.h"

/* The control plane's state (shard 0 only). */
struct tlp_cp {
	tl_shard *s;
	tl_loop *loop;
	tl_handle tick_h;
	int running;
	uint64_t collect_at;
	struct tlp_gen *pending_gen; /* built, applied, not yet published */
	struct tlp_gen *announce;    /* a reload not yet on every shard (a reference) */
	int announce_n;              /* its pools with new servers, for the log */
	uint8_t pending_view[TLP_REG_POOLS];
	uint8_t shown[TLP_REG_SERVERS]; /* server_state last published, +1 */
};
extern struct tlp_cp tlp_cp;

/* Publish what is pending (a generation, views of pools marked in
 * pending_view); what the mesh cannot take now waits for the next tick. */
void tlp_publish_pending(void);
/* A server of gp may take clients again: the shard whose queued client
 * waited longest is told (TLP_MSG_ROOM, shard 0 included). */
void tlp_cp_room(struct tlp_gpool *gp);

/* A server's state as the stats (server_state) and the admin socket show
 * it. */
enum { SS_DOWN = 0, SS_UP = 1, SS_DRAIN = 2, SS_DISABLED = 3, SS_PASSIVE = 4, SS_COUNT };
extern const char *const tlp_ss_names[SS_COUNT];
/* s's state at now (SS_*). */
int tlp_srv_state(struct tlp_srv *s, uint64_t now);
/* Publish every server's state that changed, and end passive marks that
 * ran out. */
void tlp_show_states(uint64_t now);
/* A new generation or view for every shard, shard 0 included (mesh
 * broadcast; each shard gets a reference). 0 or a negative errno. */
int tlp_publish_gen(tl_shard *s, struct tlp_gen *g);
int tlp_publish_view(tl_shard *s, struct tlp_gpool *gp);

#endif /* TLP_PLANE_H */
