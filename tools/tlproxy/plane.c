/* tools/tlproxy/plane.c: what the parts of shard 0's control plane share: its state, publishing generations and views to the shards, telling a shard of room, and server states as the stats and the admin socket show them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plane.h"

/* Calls: plane -> world. */

struct tlp_cp tlp_cp;

/* ---- publishing ---- */

/* A server of gp may take clients again: the shard whose queued client
 * waited longest is told (a message, even to shard 0 itself: the control
 * plane calls no shard code). */
void tlp_cp_room(struct tlp_gpool *gp)
{
	uint32_t who = tlp_oldest_shard(gp);

	if (who != UINT32_MAX)
		tl_shard_post(tlp_cp.s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
}

int tlp_publish_gen(tl_shard *s, struct tlp_gen *g)
{
	uint32_t n = tl_shard_count(s);
	int r;

	atomic_fetch_add(&g->refs, n);
	r = tl_shard_broadcast(s, tlp_ctl_token(TLP_MSG_GEN, 0), (uint64_t)(uintptr_t)g);
	if (r < 0)
		atomic_fetch_sub(&g->refs, n);
	return r < 0 ? r : 0;
}

int tlp_publish_view(tl_shard *s, struct tlp_gpool *gp)
{
	uint32_t n = tl_shard_count(s);
	struct tlp_view *v = gp->view;
	int r;

	if (v)
		atomic_fetch_add(&v->refs, n);
	r = tl_shard_broadcast(s, tlp_ctl_token(TLP_MSG_VIEW, gp->idx), (uint64_t)(uintptr_t)v);
	if (r < 0 && v)
		atomic_fetch_sub(&v->refs, n);
	return r < 0 ? r : 0;
}

void tlp_publish_pending(void)
{
	if (tlp_cp.pending_gen) {
		if (tlp_publish_gen(tlp_cp.s, tlp_cp.pending_gen) < 0)
			return;
		tlp_cp.pending_gen = NULL;
	}
	for (uint32_t i = 0; i < tlp_w.ngp; i++)
		if (tlp_cp.pending_view[i]) {
			if (tlp_publish_view(tlp_cp.s, tlp_w.gp[i]) < 0)
				return;
			tlp_cp.pending_view[i] = 0;
		}
}

/* ---- server state as the stats show it ---- */

int tlp_srv_state(struct tlp_srv *s, uint64_t now)
{
	uint8_t a = atomic_load(&s->admin);
	uint64_t du = atomic_load(&s->down_until);

	if (a == TLP_ADM_DISABLED)
		return SS_DISABLED;
	if (a == TLP_ADM_DRAIN)
		return SS_DRAIN;
	if (!atomic_load(&s->health))
		return SS_DOWN;
	if (du && now < du)
		return SS_PASSIVE;
	return SS_UP;
}

const char *const tlp_ss_names[SS_COUNT] = {
	[SS_DOWN] = "down",
	[SS_UP] = "up",
	[SS_DRAIN] = "drain",
	[SS_DISABLED] = "disabled",
	[SS_PASSIVE] = "passive-down",
};
_Static_assert(sizeof tlp_ss_names / sizeof tlp_ss_names[0] == SS_COUNT, "a name per state");

void tlp_show_states(uint64_t now)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->nsrv; i++) {
		struct tlp_srv *s = w->srv[i];
		int st;

		if (!s) {
			tlp_cp.shown[i] = 0;
			continue;
		}
		/* A passive mark that ran out goes away here. */
		uint64_t du = atomic_load(&s->down_until);

		if (du && now >= du && atomic_compare_exchange_strong(&s->down_until, &du, 0)) {
			tlp_log("server %s takes connections again (passive down time over)",
				s->name);
			atomic_fetch_add(&s->pool->state_ver, 1);
		}
		st = s->in_use ? tlp_srv_state(s, now) : SS_DOWN;
		if (tlp_cp.shown[i] != st + 1 && s->row >= 0) {
			tlp_cp.shown[i] = (uint8_t)(st + 1);
			tl_shard_gauge_set(tlp_cp.s, w->st_srv_up + s->row, st);
		}
	}
}
