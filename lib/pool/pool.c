/* lib/pool/pool.c: the process-wide blocking pool: configuration, one bounded set per NUMA node, start, shutdown and statistics. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <hwloc.h>
#include "pool_int.h"

/* The workers and the queue are in workers.c and queue.h; the loop's side
 * (result ports, submission, reservations) in port.c; the lifetimes of job
 * records and ports in pool_int.h. */

#define SETS_MAX 1024u

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* start / shutdown / attach */
static _Atomic(struct tl_pool *) g_pool;
static _Atomic uint32_t g_readers; /* lock-free readers of g_pool (stats) */

/* ---- config ---- */

void tl_pool_config_init(tl_pool_config *c)
{
	memset(c, 0, sizeof *c);
	c->workers_per_node = 4;
	c->queue_per_node = 1024;
	c->long_max = 64;
	c->long_idle_ms = 10000;
	c->spin_us = 50;
	c->topology = NULL;
}

static int valid_config(const tl_pool_config *c)
{
	return c->workers_per_node >= 1 && c->workers_per_node <= 1024 &&
	       c->queue_per_node >= 1 && c->queue_per_node <= (1u << 20) && c->long_max >= 1 &&
	       c->long_max <= 65536 && c->long_idle_ms >= 1 && c->long_idle_ms <= 86400000u &&
	       c->spin_us <= 10000 && (!c->topology || *c->topology);
}

static int same_config(const struct tl_pool *p, const tl_pool_config *c)
{
	const char *a = p->topo_str, *b = c->topology;
	return p->cfg.workers_per_node == c->workers_per_node &&
	       p->cfg.queue_per_node == c->queue_per_node && p->cfg.long_max == c->long_max &&
	       p->cfg.long_idle_ms == c->long_idle_ms && p->cfg.spin_us == c->spin_us &&
	       ((!a && !b) || (a && b && !strcmp(a, b)));
}

/* ---- start and shutdown ---- */

static void pool_free(struct tl_pool *p)
{
	if (p->sets) {
		for (uint32_t i = 0; i < p->nsets; i++) {
			tl__os_aligned_free(p->sets[i].q.cells);
			tl__os_aligned_free(p->sets[i].w);
			if (p->sets[i].cpuset)
				hwloc_bitmap_free(p->sets[i].cpuset);
		}
		tl__os_aligned_free(p->sets);
	}
	if (p->lrec) {
		for (uint32_t i = 0; i < p->cfg.long_max; i++)
			pthread_cond_destroy(&p->lrec[i].cv);
		free(p->lrec);
	}
	free(p->cpu2set);
	if (p->topo)
		hwloc_topology_destroy(p->topo);
	pthread_mutex_destroy(&p->smu);
	pthread_cond_destroy(&p->scv);
	pthread_mutex_destroy(&p->lmu);
	free(p->topo_str);
	free(p);
}

/* The NUMA nodes that have CPUs become sets; a topology without them (or
 * without NUMA objects) is one set spanning every CPU. */
static int build_sets(struct tl_pool *p)
{
	int n = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_NUMANODE);
	hwloc_obj_t nodes[SETS_MAX];
	uint32_t ns = 0;
	for (int i = 0; i < n && ns < SETS_MAX; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
		if (o && o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
			nodes[ns++] = o;
	}
	uint32_t count = ns ? ns : 1;
	size_t bytes = ((count * sizeof *p->sets) + 63) & ~(size_t)63;
	p->sets = tl__os_aligned_alloc(64, bytes);
	if (!p->sets)
		return -ENOMEM;
	memset(p->sets, 0, bytes);
	p->nsets = count;
	for (uint32_t i = 0; i < count; i++) {
		struct tl_bset *s = &p->sets[i];
		s->pool = p;
		s->idx = i;
		s->node = ns ? (int)nodes[i]->os_index : 0;
		s->cpuset = hwloc_bitmap_dup(ns ? nodes[i]->cpuset
					      : hwloc_topology_get_topology_cpuset(p->topo));
		size_t wb = ((p->cfg.workers_per_node * sizeof *s->w) + 63) & ~(size_t)63;
		s->w = tl__os_aligned_alloc(64, wb);
		if (!s->cpuset || !s->w || tl__jq_init(&s->q, p->cfg.queue_per_node) < 0)
			return -ENOMEM;
		memset(s->w, 0, wb);
		s->nw = p->cfg.workers_per_node;
	}
	int last = hwloc_bitmap_last(hwloc_topology_get_topology_cpuset(p->topo));
	p->ncpu = last >= 0 ? (uint32_t)last + 1 : 1;
	p->cpu2set = malloc(p->ncpu * sizeof *p->cpu2set);
	if (!p->cpu2set)
		return -ENOMEM;
	for (uint32_t c = 0; c < p->ncpu; c++) {
		p->cpu2set[c] = -1;
		for (uint32_t i = 0; i < count; i++)
			if (hwloc_bitmap_isset(p->sets[i].cpuset, c)) {
				p->cpu2set[c] = (int32_t)i;
				break;
			}
	}
	return 0;
}

static int load_topology(struct tl_pool *p)
{
	if (hwloc_topology_init(&p->topo) < 0) {
		p->topo = NULL;
		return -ENOMEM;
	}
	const char *t = p->topo_str;
	if (t) {
		size_t len = strlen(t);
		int xml = len > 4 && !strcmp(t + len - 4, ".xml");
		if (xml ? hwloc_topology_set_xml(p->topo, t) < 0
			: hwloc_topology_set_synthetic(p->topo, t) < 0)
			return xml && errno ? -errno : -EINVAL;
	}
	if (hwloc_topology_load(p->topo) < 0)
		return errno ? -errno : -EINVAL;
	/* Synthetic and XML topologies describe CPUs that are not ours. */
	p->bind = !t && hwloc_topology_is_thissystem(p->topo);
	return 0;
}

static int pool_start_locked(const tl_pool_config *cfg, struct tl_pool **out)
{
	struct tl_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	pthread_mutex_init(&p->smu, NULL);
	pthread_cond_init(&p->scv, NULL);
	pthread_mutex_init(&p->lmu, NULL);
	int r = -ENOMEM;
	if (cfg->topology && !(p->topo_str = strdup(cfg->topology)))
		goto fail;
	p->cfg.topology = p->topo_str;
	p->spin_ns = (uint64_t)cfg->spin_us * 1000;
	r = load_topology(p);
	if (r < 0)
		goto fail;
	r = build_sets(p);
	if (r < 0)
		goto fail;
	r = -ENOMEM;
	p->lrec = calloc(cfg->long_max, sizeof *p->lrec);
	if (!p->lrec)
		goto fail;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (uint32_t i = cfg->long_max; i-- > 0;) {
		struct tl_lworker *w = &p->lrec[i];
		pthread_cond_init(&w->cv, &ca);
		w->pool = p;
		w->bound = UINT32_MAX;
		w->next = p->lfree;
		p->lfree = w;
	}
	pthread_condattr_destroy(&ca);
	r = tl__pool_workers_start(p);
	if (r < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	pool_free(p);
	return r;
}

int tl_pool_launch(const tl_pool_config *cfg)
{
	tl_pool_config def;
	if (!cfg) {
		tl_pool_config_init(&def);
		cfg = &def;
	}
	if (!valid_config(cfg))
		return -EINVAL;
	pthread_mutex_lock(&g_mu);
	struct tl_pool *p = atomic_load(&g_pool);
	int r = 0;
	if (p)
		r = same_config(p, cfg) ? 0 : -EINVAL;
	else if ((r = pool_start_locked(cfg, &p)) == 0)
		atomic_store(&g_pool, p);
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Deprecated (turnloop.h): the old name of tl_pool_launch. */
int tl_pool_start(const tl_pool_config *cfg)
{
	return tl_pool_launch(cfg);
}

int tl_pool_shutdown(void)
{
	pthread_mutex_lock(&g_mu);
	struct tl_pool *p = atomic_load(&g_pool);
	if (!p) {
		pthread_mutex_unlock(&g_mu);
		return 0;
	}
	int busy = atomic_load(&p->loops) != 0;
	for (uint32_t i = 0; i < p->nsets && !busy; i++) {
		struct tl_bset *s = &p->sets[i];
		/* `used` first: a worker marks itself busy before it gives
		 * the slot back (see bworker_main). */
		if (atomic_load(&s->used))
			busy = 1;
		for (uint32_t k = 0; k < s->nw && !busy; k++)
			if (atomic_load(&s->w[k].busy))
				busy = 1;
	}
	pthread_mutex_lock(&p->lmu);
	for (uint32_t i = 0; i < p->nsets && !busy; i++)
		if (atomic_load(&p->sets[i].long_busy))
			busy = 1;
	pthread_mutex_unlock(&p->lmu);
	if (busy) {
		pthread_mutex_unlock(&g_mu);
		return -EBUSY;
	}
	tl__pool_workers_stop(p);
	/* Lock-free readers (tl_pool_stats_get) announce themselves before
	 * they load g_pool: wait for those that may have seen p. */
	atomic_store(&g_pool, NULL);
	while (atomic_load(&g_readers))
		sched_yield();
	pool_free(p);
	pthread_mutex_unlock(&g_mu);
	return 0;
}

/* ---- statistics ---- */

int tl__pool_attach(struct tl_pool **out)
{
	/* Under the start lock, so that no shutdown can slip between finding
	 * the pool and counting the loop in it. */
	pthread_mutex_lock(&g_mu);
	struct tl_pool *p = atomic_load(&g_pool);
	int r = 0;
	if (!p) {
		tl_pool_config def;
		tl_pool_config_init(&def);
		r = pool_start_locked(&def, &p);
		if (r == 0)
			atomic_store(&g_pool, p);
	}
	if (r == 0) {
		atomic_fetch_add(&p->loops, 1);
		*out = p;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

void tl__pool_detach(struct tl_pool *p)
{
	atomic_fetch_sub(&p->loops, 1);
}

struct tl_pool *tl__pool_get(void)
{
	return atomic_load(&g_pool);
}

/* ---- statistics ---- */

static void set_stats(const struct tl_bset *s, tl_pool_stats *o)
{
	uint32_t used = atomic_load_explicit(&s->used, memory_order_relaxed);
	uint32_t res = atomic_load_explicit(&s->reserved, memory_order_relaxed);
	o->node = s->node;
	o->threads = s->nw;
	o->busy = 0;
	for (uint32_t k = 0; k < s->nw; k++)
		o->busy += atomic_load_explicit(&s->w[k].busy, memory_order_relaxed);
	o->queued = used > res ? used - res : 0;
	o->reserved = res;
	o->long_threads = atomic_load_explicit(&s->long_threads, memory_order_relaxed);
	o->long_busy = atomic_load_explicit(&s->long_busy, memory_order_relaxed);
}

int tl_pool_stats_get(tl_pool_stats *total, tl_pool_stats *per_node, uint32_t cap)
{
	atomic_fetch_add(&g_readers, 1);
	struct tl_pool *p = atomic_load(&g_pool);
	int n = 0;
	if (total) {
		memset(total, 0, sizeof *total);
		total->node = -1;
	}
	if (p) {
		n = (int)p->nsets;
		for (uint32_t i = 0; i < p->nsets; i++) {
			tl_pool_stats s;
			set_stats(&p->sets[i], &s);
			if (i < cap && per_node)
				per_node[i] = s;
			if (total) {
				total->threads += s.threads;
				total->busy += s.busy;
				total->queued += s.queued;
				total->reserved += s.reserved;
				total->long_threads += s.long_threads;
				total->long_busy += s.long_busy;
			}
		}
	}
	atomic_fetch_sub(&g_readers, 1);
	return n;
}
