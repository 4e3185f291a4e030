/* shards/runtime.c: the runtime object (contract 9.2, 9.6): its config, creation, launch of the shard threads, run, stop and drain, the SIGINT/SIGTERM hook, and its one teardown; the getters of a runtime and a shard. */
#include <errno.h>
#include <signal.h> /* SIGINT, SIGTERM */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulist.h"
#include "detail.h"
#include "runtime_int.h"
#include "turnloop/signal.h"

static _Atomic(tl_runtime *) sig_target;

void tl__rt_fail(tl_runtime *rt, int rc, const char *fmt, ...)
{
	va_list ap;

	tl__os_mutex_lock(&rt->mu);
	if (!rt->result) {
		rt->result = rc < 0 ? rc : -EINVAL;
		va_start(ap, fmt);
		vsnprintf(rt->why, sizeof rt->why, fmt, ap);
		va_end(ap);
	}
	tl__os_mutex_unlock(&rt->mu);
}

void tl__rt_wake_all(tl_runtime *rt)
{
	for (uint32_t i = 0; i < rt->n; i++)
		if (rt->shards[i].poster)
			tl_poster_wake(rt->shards[i].poster);
}

void tl_runtime_config_init(tl_runtime_config *c)
{
	memset(c, 0, sizeof *c);
	c->bind = 1;
	tl_config_init(&c->loop);
	c->mesh_capacity = 1024;
	c->mesh_budget = 256;
	c->mesh_inflight = 1024;
	c->mesh_spin_ns = 20000;
	c->batch = 256;
	c->stall_ns = 25 * 1000000ull;
	c->drain_ns = 5 * 1000000000ull;
	c->grace_ns = 30 * 1000000000ull;
	c->stats_period_ns = 1000000ull;
	c->stats = 1;
	c->stats_values = 64;
	c->signals = 1;
	tl__sched_config_init(c);
}

/* value as a whole decimal number in [lo, hi]: 0 and *v, or -EINVAL. */
static int option_number(const char *value, uint32_t lo, uint32_t hi, uint32_t *v)
{
	return tl__parse_count(value, hi, v) < 0 || *v < lo ? -EINVAL : 0;
}

int tl_runtime_config_option(tl_runtime_config *cfg, const char *name, const char *value)
{
	uint32_t v;
	if (!cfg || !name)
		return -EINVAL;
	if (!strcmp(name, "--cpus")) {
		if (!value || !*value)
			return -EINVAL;
		cfg->plan.cpus = value;
		return 1;
	}
	if (!strcmp(name, "--shards")) {
		if (option_number(value, 1, TL_PLAN_MAX_SHARDS, &v) < 0)
			return -EINVAL;
		cfg->plan.shards = v;
	} else if (!strcmp(name, "--mesh-inflight")) {
		if (option_number(value, 1, 65536, &v) < 0)
			return -EINVAL;
		cfg->mesh_inflight = v;
	} else if (!strcmp(name, "--mesh-spin-us")) {
		if (option_number(value, 0, 1000, &v) < 0)
			return -EINVAL;
		cfg->mesh_spin_ns = (uint64_t)v * 1000;
	} else if (!strcmp(name, "--nap-us")) {
		if (option_number(value, 0, 1000, &v) < 0)
			return -EINVAL;
		cfg->loop.nap_ns = (uint64_t)v * 1000;
	} else {
		return 0;
	}
	return 1;
}

int tl_runtime_config_args(tl_runtime_config *cfg, int argc, char **argv, const tl_runtime_option *opts)
{
	const tl_runtime_option *o;
	if (!cfg || !argv || argc < 1)
		return -EINVAL;
	for (o = opts; o && o->name; o++)
		if (!o->dst || o->kind < TL_OPTION_FLAG || o->kind > TL_OPTION_STR) {
			tl__detail_set("option table: %s has no destination or an unknown kind", o->name);
			return -EINVAL;
		}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		uint32_t v;
		int rc;
		for (o = opts; o && o->name && strcmp(o->name, a); o++) {}
		if (o && !o->name)
			o = NULL; /* not the program's */
		if (o && o->kind == TL_OPTION_FLAG) {
			*(int *)o->dst = 1;
			continue;
		}
		i++; /* every other option takes a value */
		if (!o) {
			if ((rc = tl_runtime_config_option(cfg, a, val)) <= 0)
				return tl__detail_set(rc ? "%s: a missing or bad value" : "%s: no such option", a), -EINVAL;
		} else if (o->kind == TL_OPTION_U32) {
			if (option_number(val, o->min, o->max, &v) < 0)
				return tl__detail_set("%s takes a number of %u..%u", a, o->min, o->max), -EINVAL;
			*(uint32_t *)o->dst = v;
		} else {
			if (!val || !*val)
				return tl__detail_set("%s takes a value", a), -EINVAL;
			*(const char **)o->dst = val;
		}
	}
	return 0;
}

/* The first field of c out of its range (the detail of -EINVAL), or NULL. */
static const char *bad_field(const tl_runtime_config *c)
{
	if (!c->mesh_capacity || c->mesh_capacity > TL__SPSC_MAX_CAP)
		return "mesh_capacity must be 1..2^20";
	if (!c->mesh_budget || c->mesh_budget > 65536)
		return "mesh_budget must be 1..65536";
	if (!c->mesh_inflight || c->mesh_inflight > 65536)
		return "mesh_inflight must be 1..65536";
	if (c->mesh_spin_ns > 1000000)
		return "mesh_spin_ns must be at most 1 ms";
	if (!c->batch || c->batch > 65536)
		return "batch must be 1..65536";
	if (!c->drain_ns)
		return "drain_ns must not be 0";
	if (!c->grace_ns)
		return "grace_ns must not be 0";
	if (!c->stats_period_ns || c->stats_period_ns > 1000000000ull)
		return "stats_period_ns must be 1 ns..1 s";
	if (!c->stats_values || c->stats_values > TL_STATS_VALUES_MAX)
		return "stats_values must be 1..TL_STATS_VALUES_MAX";
	if (c->handlers[0])
		return "handlers[0] must be NULL (token handler 0 is on_completion)";
	return tl__sched_bad_field(c);
}

static void join_all(tl_runtime *rt)
{
	for (uint32_t i = 0; i < rt->ncreated; i++)
		tl__os_thread_join(rt->shards[i].thread);
	rt->joined = 1;
}

static void signals_restore(tl_runtime *rt);

/* The one teardown, for a runtime at any stage from a half-made
 * tl_runtime_new to a stopped one: stop and join the threads that run,
 * give the signals back, then free what was made (each part copes with
 * never having been made: NULL pointers, zeroed rings, barrier_ok). */
static void teardown(tl_runtime *rt)
{
	if (rt->started && !rt->joined) {
		tl_runtime_stop(rt);
		join_all(rt);
	}
	signals_restore(rt);
	tl__foreign_destroy(rt); /* blocks still queued, after the threads */
	if (rt->shards)
		for (uint32_t i = 0; i < rt->n; i++) {
			tl_poster_put(rt->shards[i].poster);
			rt->shards[i].poster = NULL;
		}
	if (rt->pairs)
		for (size_t i = 0; i < (size_t)rt->n * rt->n; i++)
			tl__spsc_free(&rt->pairs[i].ring);
	if (rt->barrier_ok)
		tl__os_barrier_destroy(&rt->barrier);
	tl__rt_region_destroy(rt);
	tl_plan_free(&rt->plan);
	tl__os_aligned_free(rt->pairs);
	tl__os_aligned_free(rt->shards);
	free(rt->vkind);
	tl__os_mutex_destroy(&rt->mu);
	tl__os_mutex_destroy(&rt->meta_mu);
	tl__os_cond_destroy(&rt->cv);
	free(rt);
}

int tl_runtime_new(tl_runtime **out, const tl_runtime_config *cfg)
{
	tl_runtime_config defaults;
	tl_plan_request req;
	tl_runtime *rt;
	const char *bad;
	int rc;

	tl__detail_clear();
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg) {
		tl_runtime_config_init(&defaults);
		cfg = &defaults;
	}
	bad = bad_field(cfg);
	if (bad) {
		tl__detail_set("runtime config: %s", bad);
		return -EINVAL;
	}
	req = cfg->plan;
	if (!cfg->no_env && tl_plan_from_env(&req) < 0)
		return -EINVAL; /* its detail names the variable */
	rt = calloc(1, sizeof *rt);
	if (!rt)
		return -ENOMEM;
	rt->cfg = *cfg;
	rt->stats_dfd = -1;
	tl__os_mutex_init(&rt->mu);
	tl__os_mutex_init(&rt->meta_mu);
	tl__os_cond_init(&rt->cv);
	atomic_init(&rt->arenas, TL_ARENAS);
	rt->arenas_why = tl__rt_arenas_build_why();
	rc = tl_plan_compute(&rt->plan, &req, NULL);
	if (rc < 0)
		goto fail; /* its detail says why */
	rt->n = rt->plan.count;
	if (rt->n > TL_RT_MAX_SHARDS) {
		tl__detail_set("%u shards planned, a runtime runs at most %u", rt->n,
			       TL_RT_MAX_SHARDS);
		rc = -EINVAL;
		goto fail;
	}
	rt->pairs = tl__os_aligned_alloc(TL__CACHE_LINE, (size_t)rt->n * rt->n * sizeof *rt->pairs);
	rt->shards = tl__os_aligned_alloc(TL__CACHE_LINE, (size_t)rt->n * sizeof *rt->shards);
	rt->vkind = calloc(cfg->stats_values, 1);
	if (rt->pairs)
		memset(rt->pairs, 0, (size_t)rt->n * rt->n * sizeof *rt->pairs);
	if (rt->shards)
		memset(rt->shards, 0, (size_t)rt->n * sizeof *rt->shards);
	if (!rt->pairs || !rt->shards || !rt->vkind) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < rt->n; i++) {
		tl_shard *s = &rt->shards[i];

		s->rt = rt;
		s->id = i;
		s->n = rt->n;
		s->in = &rt->pairs[i];
		s->outp = &rt->pairs[(size_t)i * rt->n];
		s->st.shard = i;
		s->st.cpu = rt->plan.shards[i].pu_os_index;
		s->st.numa = rt->plan.shards[i].numa_node;
		s->st.arena = UINT32_MAX;
		for (uint32_t j = 0; j < rt->n; j++)
			atomic_init(&rt->pairs[(size_t)i * rt->n + j].want_room, 0);
	}
	rc = tl__rt_region_create(rt);
	if (rc == -EBUSY)
		tl__detail_set("this process already publishes a stats region (one runtime "
			       "with stats at a time; set cfg.stats = 0 for the others)");
	if (rc < 0)
		goto fail;
	*out = rt;
	return 0;
fail:
	teardown(rt);
	return rc;
}

static void on_signal(int sig)
{
	tl_runtime *rt = atomic_load(&sig_target);

	(void)sig;
	if (!rt)
		return;
	if (atomic_fetch_add(&rt->signals_seen, 1) == 0)
		tl_runtime_drain(rt);
	else
		tl_runtime_stop(rt);
}

/* The runtime's SIGINT/SIGTERM handling is a hook on the process's one
 * handler for them (turnloop/signal.h): loops subscribed to those signals
 * are told too, and the action the first of us replaced comes back when
 * the last lets go. */
static void signals_install(tl_runtime *rt)
{
	tl_runtime *none = NULL;

	if (!rt->cfg.signals || !atomic_compare_exchange_strong(&sig_target, &none, rt))
		return;
	tl_signal_hook(SIGINT, on_signal);
	tl_signal_hook(SIGTERM, on_signal);
	rt->sig_installed = 1;
}

static void signals_restore(tl_runtime *rt)
{
	if (!rt->sig_installed)
		return;
	tl_signal_hook(SIGINT, NULL);
	tl_signal_hook(SIGTERM, NULL);
	atomic_store(&sig_target, NULL);
	rt->sig_installed = 0;
}

int tl_runtime_launch(tl_runtime *rt)
{
	int rc = 0;

	tl__detail_clear();
	if (!rt || rt->started)
		return -EINVAL;
	rt->started = 1;
	if (tl__os_barrier_init(&rt->barrier, rt->n)) {
		tl__rt_fail(rt, -ENOMEM, "cannot create the stop barrier");
		rt->joined = 1;
		tl__detail_set("%s", rt->why);
		return rt->result;
	}
	rt->barrier_ok = 1;
	/* Shard threads start without SIGINT/SIGTERM, so those signals
	 * reach the controlling thread's handler instead of interrupting a
	 * shard's OS wait. */
	for (uint32_t i = 0; i < rt->n; i++) {
		rc = tl__os_thread_start_ex(&rt->shards[i].thread, tl__shard_main, &rt->shards[i],
					    TL__OS_BLOCK_STOP);
		if (rc) {
			tl__rt_fail(rt, rc, "cannot start the thread of shard %u: %s", i, strerror(-rc));
			break;
		}
		rt->ncreated++;
	}

	tl__os_mutex_lock(&rt->mu);
	while (rt->nready < rt->ncreated)
		tl__os_cond_wait(&rt->cv, &rt->mu);
	rc = rt->ncreated < rt->n ? -EAGAIN : 0;
	for (uint32_t i = 0; i < rt->ncreated && !rc; i++)
		rc = rt->shards[i].setup_rc;
	if (rc && rt->result)
		rc = rt->result;
	rt->go = rc ? -1 : 1;
	tl__os_cond_broadcast(&rt->cv);
	tl__os_mutex_unlock(&rt->mu);
	if (rc) {
		join_all(rt);
		tl__rt_set_state(rt, TL_STATS_STOPPED);
		tl__detail_set("%s", rt->why);
		return rc;
	}
	if (rt->hdr && atomic_load(&rt->arenas))
		rt->hdr->flags |= TL_STATS_F_ARENAS;
	/* Built for arenas but running without them is a link mistake more
	 * often than not (jemalloc behind libc): say it once, at launch,
	 * rather than leave the program to ask tl_runtime_arenas(). */
	if (TL_ARENAS && !atomic_load(&rt->arenas))
		fprintf(stderr,
			"turnloop: per-shard jemalloc arenas are off: %s (link -ljemalloc ahead of "
			"libc, as pkg-config --libs turnloop does)\n",
			rt->arenas_why);
	signals_install(rt);
	tl__rt_set_state(rt, TL_STATS_RUNNING);
	return 0;
}

int tl_runtime_run(tl_runtime *rt)
{
	int rc;

	tl__detail_clear();
	if (!rt)
		return -EINVAL;
	if (!rt->started) {
		rc = tl_runtime_launch(rt);
		if (rc < 0)
			return rc;
	}
	if (!rt->joined) {
		join_all(rt);
		tl__rt_set_state(rt, TL_STATS_STOPPED);
	}
	tl__os_mutex_lock(&rt->mu);
	rc = rt->result;
	if (rc < 0)
		tl__detail_set("%s", rt->why);
	tl__os_mutex_unlock(&rt->mu);
	return rc;
}

void tl_runtime_stop(tl_runtime *rt)
{
	if (!rt)
		return;
	atomic_store_explicit(&rt->stop, 1, memory_order_release);
	tl__rt_wake_all(rt);
}

void tl_runtime_drain(tl_runtime *rt)
{
	if (!rt)
		return;
	atomic_store_explicit(&rt->drain, 1, memory_order_release);
	tl__rt_wake_all(rt);
}

void tl_runtime_destroy(tl_runtime *rt)
{
	if (rt)
		teardown(rt);
}

uint32_t tl_runtime_shards(const tl_runtime *rt) { return rt ? rt->n : 0; }
const tl_plan *tl_runtime_plan(const tl_runtime *rt) { return rt ? &rt->plan : NULL; }

int tl_runtime_arenas(const tl_runtime *rt, const char **why)
{
	int on = rt && atomic_load(&((tl_runtime *)rt)->arenas);

	if (why)
		*why = on || !rt ? "" : rt->arenas_why;
	return on;
}

tl_loop *tl_shard_loop(tl_shard *s) { return s->loop; }
uint32_t tl_shard_id(const tl_shard *s) { return s->id; }
uint32_t tl_shard_count(const tl_shard *s) { return s->n; }
tl_runtime *tl_shard_runtime(tl_shard *s) { return s->rt; }
int tl_shard_place_get(const tl_shard *s, tl_shard_place *out)
{
	if (!s || !out)
		return -EINVAL;
	*out = s->rt->plan.shards[s->id];
	return 0;
}

void *tl_shard_arg(const tl_shard *s) { return s->rt->cfg.arg; }
void tl_shard_set_data(tl_shard *s, void *data) { s->data = data; }
void *tl_shard_data(const tl_shard *s) { return s->data; }

/* ---- deprecated names, kept for one release (turnloop.h lists them) ---- */

int tl_runtime_start(tl_runtime *rt)
{
	return tl_runtime_launch(rt);
}

const char *tl_runtime_strerror(const tl_runtime *rt)
{
	return rt ? rt->why : "";
}

const tl_shard_place *tl_shard_place_of(const tl_shard *s)
{
	return &s->rt->plan.shards[s->id];
}
