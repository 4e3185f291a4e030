/* tools/tlproxy/reload.c: applying a reload (shard 0): the new generation built, the registries moved to it, published to every shard. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plane.h"
#include "reload.h"
#include "resolve.h"
#include "sdnotify.h"

/* Calls: reload -> resolve, plane, world (config), sdnotify. */

void tlp_reload(struct tlp_reload_req *req)
{
	struct tlp_config *cfg = req->cfg;
	struct tlp_world *w = &tlp_w;
	struct tlp_gen *old = atomic_load(&w->gen), *g;
	char err[256];
	int n;

	if (tlp_tick_for(cfg) < w->tick_ns)
		tlp_log("reload: queue timeouts below %llu ms are enforced to within %llu ms until a "
			"restart",
			(unsigned long long)(w->tick_ns * 8 / 1000000),
			(unsigned long long)(w->tick_ns / 1000000));
	if ((cfg->admin || old->cfg->admin) &&
	    (!cfg->admin || !old->cfg->admin || strcmp(cfg->admin, old->cfg->admin)))
		tlp_log("reload: the admin socket stays where it is until a restart");
	if ((cfg->access_log || old->cfg->access_log) &&
	    (!cfg->access_log || !old->cfg->access_log ||
	     strcmp(cfg->access_log, old->cfg->access_log)))
		tlp_log("reload: the access log stays where it is until a restart");
	if (cfg->shards != old->cfg->shards || (cfg->cpus || old->cfg->cpus))
		if (cfg->shards != old->cfg->shards ||
		    !cfg->cpus != !old->cfg->cpus || (cfg->cpus && strcmp(cfg->cpus, old->cfg->cpus)))
			tlp_log("reload: shards and cpus change only with a restart");
	if (cfg->spin_us != old->cfg->spin_us)
		tlp_log("reload: spin_us changes only with a restart");
	if (cfg->nap_us != old->cfg->nap_us)
		tlp_log("reload: nap_us changes only with a restart");
	if (w->conn_cap_udp && tlp_config_tcp_listeners(cfg) && !tlp_config_tcp_listeners(old->cfg))
		tlp_log("reload: the process started without TCP listeners: its TCP listeners take "
			"up to %u connections a shard until a restart (max_conns sizes it)",
			w->conn_cap);
	g = tlp_gen_build(cfg, &req->tls, w->tick_ns, err, sizeof err);
	tlp_tls_made_free(&req->tls);
	free(req);
	if (!g) {
		tlp_log("reload failed: %s; the running configuration stays", err);
		tlp_sd_notify("READY=1");
		return;
	}
	g->ver = old->ver + 1;
	n = tlp_gen_apply(g);
	atomic_store(&w->gen, g);
	tlp_cp.pending_gen = g;
	for (uint32_t i = 0; i < w->ngp; i++)
		tlp_cp.pending_view[i] = 1;
	tlp_publish_pending();
	tlp_gen_put(old);
	for (uint32_t i = 0; i < w->nhost; i++)
		if (w->host[i]->used && !w->host[i]->known && !w->host[i]->busy)
			tlp_resolve_start(i, tlp_mono_ns());
	/* A reload is done when every shard runs it: until then a listener
	 * it adds may not be bound yet, so neither the log nor systemd hear
	 * of it. A newer reload supersedes one still on its way (each shard
	 * takes generations in the order shard 0 sent them). */
	tlp_reload_forget();
	atomic_fetch_add(&g->refs, 1);
	tlp_cp.announce = g;
	tlp_cp.announce_n = n;
	tlp_reload_check();
}

void tlp_reload_check(void)
{
	struct tlp_gen *g = tlp_cp.announce;

	if (!g || atomic_load(&g->applied) < tlp_w.nshards)
		return;
	tlp_log("reloaded: %u listeners, %u pools (%d with new servers)", g->cfg->nlisteners,
		g->cfg->npools, tlp_cp.announce_n);
	tlp_sd_notify("READY=1");
	tlp_reload_forget();
}

void tlp_reload_forget(void)
{
	if (tlp_cp.announce)
		tlp_gen_put(tlp_cp.announce);
	tlp_cp.announce = NULL;
}

