/* lib/pool/pool.c: the process-wide blocking pool: configuration, one bounded set per NUMA node, start, shutdown and statistics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "pool_int.h"

/* The workers and the queue are in workers.c and queue.h; the loop's side
 * (result ports, submission, reservations) in port.c; the lifetimes of job
 * records and ports in pool_int.h. */

#define SETS_MAX 1024u

static tl__os_mutex g_mu = TL__OS_MUTEX_INIT; /* start / shutdown / attach */
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
		}
		tl__os_aligned_free(p->sets);
	}
	if (p->lrec) {
		for (uint32_t i = 0; i < p->cfg.long_max; i++)
			tl__os_cond_destroy(&p->lrec[i].cv);
		free(p->lrec);
	}
	free(p->cpu2set);
	tl__topo_free(p->topo);
	tl__os_mutex_destroy(&p->smu);
	tl__os_cond_destroy(&p->scv);
	tl__os_mutex_destroy(&p->lmu);
	free(p->topo_str);
	free(p);
}

/* The NUMA nodes that have CPUs become sets; a topology without them (or
 * without NUMA objects) is one set spanning every CPU. */
static int build_sets(struct tl_pool *p)
{
	uint32_t n = tl__topo_nodes(p->topo);
	uint32_t nodes[SETS_MAX];
	uint32_t ns = 0;
	for (uint32_t i = 0; i < n && ns < SETS_MAX; i++)
		if (tl__cpuset_count(tl__topo_node_cpus(p->topo, i)))
			nodes[ns++] = i;
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
		s->node = ns ? tl__topo_node_os(p->topo, nodes[i]) : 0;
		s->cpus = ns ? tl__topo_node_cpus(p->topo, nodes[i]) : tl__topo_cpus(p->topo);
		size_t wb = ((p->cfg.workers_per_node * sizeof *s->w) + 63) & ~(size_t)63;
		s->w = tl__os_aligned_alloc(64, wb);
		if (!s->w || tl__jq_init(&s->q, p->cfg.queue_per_node) < 0)
			return -ENOMEM;
		memset(s->w, 0, wb);
		s->nw = p->cfg.workers_per_node;
	}
	int last = tl__cpuset_last(tl__topo_cpus(p->topo));
	p->ncpu = last >= 0 ? (uint32_t)last + 1 : 1;
	p->cpu2set = malloc(p->ncpu * sizeof *p->cpu2set);
	if (!p->cpu2set)
		return -ENOMEM;
	for (uint32_t c = 0; c < p->ncpu; c++) {
		p->cpu2set[c] = -1;
		for (uint32_t i = 0; i < count; i++)
			if (tl__cpuset_has(p->sets[i].cpus, c)) {
				p->cpu2set[c] = (int32_t)i;
				break;
			}
	}
	return 0;
}

/* This machine's topology, or the configuration's description of one
 * (lib/shared/topo.h: hwloc, or Windows' own); threads are bound only on
 * this machine's. */
static int load_topology(struct tl_pool *p)
{
	int r = tl__topo_load(&p->topo, p->topo_str);
	if (r < 0) {
		p->topo = NULL;
		return r;
	}
	p->bind = tl__topo_binds(p->topo);
	return 0;
}

static int pool_start_locked(const tl_pool_config *cfg, struct tl_pool **out)
{
	struct tl_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	tl__os_mutex_init(&p->smu);
	tl__os_cond_init(&p->scv);
	tl__os_mutex_init(&p->lmu);
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
	for (uint32_t i = cfg->long_max; i-- > 0;) {
		struct tl_lworker *w = &p->lrec[i];
		tl__os_cond_init(&w->cv); /* timed waits on the monotonic clock */
		w->pool = p;
		w->bound = UINT32_MAX;
		w->next = p->lfree;
		p->lfree = w;
	}
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
	tl__os_mutex_lock(&g_mu);
	struct tl_pool *p = atomic_load(&g_pool);
	int r = 0;
	if (p)
		r = same_config(p, cfg) ? 0 : -EINVAL;
	else if ((r = pool_start_locked(cfg, &p)) == 0)
		atomic_store(&g_pool, p);
	tl__os_mutex_unlock(&g_mu);
	return r;
}

/* Deprecated (turnloop.h): the old name of tl_pool_launch. */
int tl_pool_start(const tl_pool_config *cfg)
{
	return tl_pool_launch(cfg);
}

int tl_pool_shutdown(void)
{
	tl__os_mutex_lock(&g_mu);
	struct tl_pool *p = atomic_load(&g_pool);
	if (!p) {
		tl__os_mutex_unlock(&g_mu);
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
	tl__os_mutex_lock(&p->lmu);
	for (uint32_t i = 0; i < p->nsets && !busy; i++)
		if (atomic_load(&p->sets[i].long_busy))
			busy = 1;
	tl__os_mutex_unlock(&p->lmu);
	if (busy) {
		tl__os_mutex_unlock(&g_mu);
		return -EBUSY;
	}
	tl__pool_workers_stop(p);
	/* Lock-free readers (tl_pool_stats_get) announce themselves before
	 * they load g_pool: wait for those that may have seen p. */
	atomic_store(&g_pool, NULL);
	while (atomic_load(&g_readers))
		tl__os_yield();
	pool_free(p);
	tl__os_mutex_unlock(&g_mu);
	return 0;
}

/* ---- statistics ---- */

int tl__pool_attach(struct tl_pool **out)
{
	/* Under the start lock, so that no shutdown can slip between finding
	 * the pool and counting the loop in it. */
	tl__os_mutex_lock(&g_mu);
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
	tl__os_mutex_unlock(&g_mu);
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
