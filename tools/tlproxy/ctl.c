/* tools/tlproxy/ctl.c: shard 0's control plane as a whole: its start and stop, its tick (health rounds, lookups, server states, collection of unused servers) and its messages; the parts are health.c, resolve.c, admin.c and reload.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "ctl.h"
#include "health.h"
#include "plane.h"
#include "reload.h"
#include "resolve.h"

/* Calls: ctl -> reload, admin, health, resolve, plane, world. */
/*
 * Everything here but tlp_ctl_msg and tlp_passive runs on shard 0, the only
 * thread that changes the registries. One repeating timer (CTL_TICK) drives
 * it: health rounds, lookups and the collection of unused servers are due
 * at times this timer looks at, so a health check's timeout past its
 * connect is enforced within one tick.
 */

#define CTL_TICK_NS 50000000ull

/* ---- the control plane's messages ---- */

void tlp_ctl_msg(tl_shard *s, uint64_t t, uint64_t payload)
{
	uint32_t type = (uint32_t)(t & 0xff);
	uint64_t now;

	switch (type) {
	case TLP_MSG_RELOAD:
		if (tl_shard_id(s) == 0 && payload)
			tlp_reload((struct tlp_reload_req *)(uintptr_t)payload);
		return;
	case TLP_MSG_GEN_IN:
		if (tl_shard_id(s) == 0 && tlp_cp.running)
			tlp_reload_check();
		return;
	case TLP_MSG_CTLTICK:
		if (tl_shard_id(s) != 0 || !tlp_cp.running)
			return;
		if ((uint32_t)atomic_load(&tlp_w.started) < tlp_w.nshards)
			return;
		now = tlp_mono_ns();
		tlp_publish_pending();
		tlp_reload_check();
		for (uint32_t i = 0; i < tlp_w.ngp; i++) {
			struct tlp_gpool *gp = tlp_w.gp[i];
			const struct tlp_pool_cfg *pc = gp->cfg;

			if (!pc || !pc->health.enabled)
				continue;
			tlp_health_tick(gp, now);
		}
		for (uint32_t i = 0; i < tlp_w.nhost; i++) {
			struct tlp_host *h = tlp_w.host[i];

			if (h->used && !h->busy && now >= h->next_at)
				tlp_resolve_start(i, now);
		}
		tlp_show_states(now);
		if (now >= tlp_cp.collect_at) {
			tlp_cp.collect_at = now + 1000000000ull;
			tlp_srv_collect();
		}
		return;
	default:
		return;
	}
}

/* ---- start, stop ---- */

int tlp_ctl_start(tl_shard *s)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_gen *g = atomic_load(&w->gen);
	uint64_t now = tlp_mono_ns();
	tl_op op;
	int r;

	tlp_cp.s = s;
	tlp_cp.loop = tl_shard_loop(s);
	w->post0 = tl_poster_get(tlp_cp.loop);
	r = tl_timer_start(tlp_cp.loop, tl_now(tlp_cp.loop) + CTL_TICK_NS, CTL_TICK_NS,
			   tlp_ctl_token(TLP_MSG_CTLTICK, 0), &tlp_cp.tick_h, &op);
	if (r < 0)
		return r;
	tl_set_ref(tlp_cp.loop, tlp_cp.tick_h, 0);
	for (uint32_t i = 0; i < w->nhost; i++)
		w->host[i]->next_at = now + w->host[i]->interval_ns;
	tlp_cp.collect_at = now + 1000000000ull;
	tlp_cp.running = 1;
	if (g->cfg->admin && (r = tlp_admin_start(g->cfg->admin)) < 0)
		return r;
	return 0;
}

void tlp_ctl_stop(tl_shard *s)
{
	(void)s;
	if (!tlp_cp.running)
		return;
	tlp_cp.running = 0;
	tl_close(tlp_cp.loop, tlp_cp.tick_h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
	tlp_admin_stop();
	tlp_health_stop();
	if (tlp_cp.pending_gen) {
		tlp_cp.pending_gen = NULL;
	}
	tlp_reload_forget();
}

void tlp_ctl_free(void)
{
	tlp_admin_free();
	if (tlp_w.post0)
		tl_poster_put(tlp_w.post0);
	tlp_w.post0 = NULL;
	memset(&tlp_cp, 0, sizeof tlp_cp);
}
