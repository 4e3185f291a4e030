/* shards/stats_writer.c: the writer of the live stats region (contract 9.7): the region it makes (its home is the platform's: stats_shm.c, stats_shm_win.c), fills, publishes into under a sequence lock per shard and removes; the program's own counters and gauges. Its reader is shards/stats.c; their shared layout is stats_region.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "runtime_int.h"
#include "turnloop/pool.h"

static atomic_int region_owned; /* this process publishes a region */

void tl__rt_set_state(tl_runtime *rt, uint32_t state)
{
	if (rt->hdr)
		atomic_store_explicit(&rt->hdr->state, state, memory_order_release);
}

static void *region_at(tl_runtime *rt, size_t off)
{
	return (char *)rt->region + off;
}

void tl__rt_stats_off(tl_runtime *rt, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rt->stats_why, sizeof rt->stats_why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "turnloop: live stats off: %s\n", rt->stats_why);
}

/* Plain memory in place of the region (stats off, or not publishable), so
 * that the code path stays the same. */
static int region_private(tl_runtime *rt, size_t size)
{
	void *mem = tl__os_aligned_alloc(64, size);

	if (!mem)
		return -ENOMEM;
	memset(mem, 0, size);
	rt->region = mem;
	rt->region_size = size;
	return 0;
}

static int region_create(tl_runtime *rt)
{
	size_t size = tl__stats_header_size(rt->cfg.stats_values) +
		      (size_t)rt->n * tl__stats_stride(rt->cfg.stats_values);
	int rc;

	if (!rt->cfg.stats)
		return region_private(rt, size);
	if (atomic_exchange(&region_owned, 1))
		return -EBUSY;
	rc = tl__rt_shm_create(rt, size);
	if (rc == 0)
		return 0;
	rt->stats_rc = rc;
	rt->region_name[0] = '\0';
	atomic_store(&region_owned, 0);
	return region_private(rt, size);
}

static void region_init(tl_runtime *rt)
{
	struct tl__stats_hdr *h = rt->region;
	uint32_t cap = rt->cfg.stats_values;
	uint64_t start = 0;

	int32_t pid;
	uint32_t uid;

	tl__rt_shm_identity(&pid, &uid, &start);
	h->version = TL_STATS_VERSION;
	h->header_size = (uint32_t)tl__stats_header_size(cap);
	h->shards = rt->n;
	h->stride = (uint32_t)tl__stats_stride(cap);
	h->record_size = sizeof(tl_stats_shard);
	h->flags = TL_STATS_F_POOL | TL_STATS_F_CPU | (rt->region_shm ? TL_STATS_F_LOCKED : 0);
	atomic_init(&h->state, TL_STATS_STARTING);
	h->pid = pid;
	h->uid = uid;
	h->capacity = cap;
	h->start_time = start;
	h->started_ns = tl__os_mono_ns();
	h->stall_ns = rt->cfg.stall_ns;
	h->period_ns = rt->cfg.stats_period_ns;
	h->families_off = (uint32_t)tl__stats_families_off();
	h->labels_off = (uint32_t)tl__stats_labels_off(cap);
	atomic_init(&h->meta_seq, 0);
	rt->fams = region_at(rt, h->families_off);
	rt->labels = region_at(rt, h->labels_off);
	for (uint32_t i = 0; i < rt->n; i++) {
		struct tl__stats_rec *r = region_at(rt, h->header_size + (size_t)i * h->stride);
		const tl_shard_place *p = &rt->plan.shards[i];

		atomic_init(&r->seq, 0);
		r->data.shard = i;
		r->data.cpu = p->pu_os_index;
		r->data.numa = p->numa_node;
		r->data.arena = UINT32_MAX;
		r->data.node_id = -1;
		rt->shards[i].rec = r;
		rt->shards[i].rec_values = (uint64_t *)(r + 1);
	}
	/* The magic goes last: a reader that sees it sees a whole header. */
	__atomic_store_n(&h->magic, TL_STATS_MAGIC, __ATOMIC_RELEASE);
	rt->hdr = h;
}


int tl__rt_region_create(tl_runtime *rt)
{
	int rc = region_create(rt);

	if (rc < 0)
		return rc;
	region_init(rt);
	return 0;
}

void tl__rt_region_destroy(tl_runtime *rt)
{
	if (!rt->region)
		return;
	if (rt->region_shm) {
		tl__rt_set_state(rt, TL_STATS_STOPPED);
		tl__rt_shm_destroy(rt);
		atomic_store(&region_owned, 0);
	} else {
		tl__os_aligned_free(rt->region);
	}
	rt->region = NULL;
	rt->hdr = NULL;
}

/* Begin and end a change of the family table or the labels (meta_seq odd
 * while it lasts); under rt->meta_mu, since labels come from any thread. */
static void meta_begin(tl_runtime *rt)
{
	uint64_t seq = atomic_load_explicit(&rt->hdr->meta_seq, memory_order_relaxed);

	atomic_exchange_explicit(&rt->hdr->meta_seq, seq + 1, memory_order_acq_rel);
}

static void meta_end(tl_runtime *rt)
{
	uint64_t seq = atomic_load_explicit(&rt->hdr->meta_seq, memory_order_relaxed);

	atomic_store_explicit(&rt->hdr->meta_seq, seq + 1, memory_order_release);
}

static uint32_t hist_bucket(uint64_t ns)
{
	uint32_t b = ns ? 64u - (uint32_t)__builtin_clzll(ns) : 0;

	return b < TL_STATS_HIST ? b : TL_STATS_HIST - 1;
}

void tl__rt_account_pass(tl_shard *s, uint64_t busy)
{
	s->st.busy_ns += busy;
	s->st.pass_hist[hist_bucket(busy)]++;
	if (busy > s->st.max_pass_ns)
		s->st.max_pass_ns = busy;
}

/* The pool's view of this shard and of its node's worker set (lock-free
 * snapshots, cheap at the publication rate). */
static void pool_publish(tl_shard *s, tl_stats_shard *st)
{
	tl_pool_loop_stats pl;
	tl_pool_stats nodes[64];
	int n, node;

	tl_pool_loop_stats_get(s->loop, &pl);
	st->pool_submitted = pl.submitted;
	st->pool_refused = pl.refused;
	st->pool_completed = pl.completed;
	st->pool_cancelled = pl.cancelled;
	st->pool_in_flight = pl.in_flight;
	st->pool_wait_ns = pl.queue_wait_ns;
	st->pool_run_ns = pl.run_ns;
	/* The node this shard's jobs go to, its own before its first job. */
	node = pl.node >= 0 ? pl.node : st->numa;
	n = tl_pool_stats_get(NULL, nodes, 64);
	for (int i = 0; i < n && i < 64; i++) {
		if (nodes[i].node != node)
			continue;
		st->node_id = node;
		st->node_threads = nodes[i].threads;
		st->node_busy = nodes[i].busy;
		st->node_queued = nodes[i].queued;
		st->node_reserved = nodes[i].reserved;
		st->node_long_threads = nodes[i].long_threads;
		st->node_long_busy = nodes[i].long_busy;
	}
}

/* Copy the shard's counters into its record under the sequence lock. Uses
 * the loop's public stats only (a constant-time copy). */
void tl__rt_publish(tl_shard *s, uint64_t now)
{
	tl_stats_shard *st = &s->st;
	struct tl__stats_rec *rec = s->rec;
	uint64_t inbound = 0, backlog = 0;
	tl_loop_stats ls;

	tl_loop_stats_get(s->loop, &ls);
	st->updated_ns = now;
	/* The thread's CPU clock is a system call: read it at most once per
	 * period, so a shard that parks often pays for it once per period and
	 * a parked one's figure is at most one period behind. */
	if (now - s->cpu_read >= s->rt->cfg.stats_period_ns || !s->cpu_read) {
		st->cpu_ns = tl__os_thread_cpu_ns();
		s->cpu_read = now;
	}
	st->turns = ls.turns;
	st->os_waits = ls.os_waits;
	st->discovery_polls = ls.discovery_polls;
	st->zero_event_waits = ls.zero_event_waits;
	for (uint32_t k = 0; k < TL_K_COUNT_; k++)
		st->completions[k] = ls.completions[k] + s->mesh_comp[k];
	st->idle_ns = ls.idle_ns;
	st->handles = ls.handles;
	st->ops = ls.ops;
	st->queued = ls.queued;
	st->timers = ls.timers;
	st->leases_out = ls.leases_out;
	st->nic_rx = ls.nic_rx;
	st->nic_tx = ls.nic_tx;
	st->nic_drops = ls.nic_drops;
	st->nic_tx_full = ls.nic_tx_full;
	st->nic_handed_out = ls.nic_handed_out;
	st->nic_handed_in = ls.nic_handed_in;
	st->nic_handoff_drops = ls.nic_handoff_drops;
	st->spins = ls.spins;
	st->spin_parks = ls.spin_parks;
	st->naps = ls.naps;
	st->nap_parks = ls.nap_parks;
	tl__mesh_depths(s, &inbound, &backlog);
	st->mesh_inbound = inbound;
	st->mesh_backlog = backlog;
	if (s->je_alloc) {
		st->alloc_bytes = *s->je_alloc;
		st->freed_bytes = *s->je_freed;
	}
	pool_publish(s, st);
	/* Odd while copying. The exchange's acquire half keeps the copy's
	 * stores from moving above it (what a release fence after a plain
	 * store would do; sanitizers understand this form). */
	uint64_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed);

	atomic_exchange_explicit(&rec->seq, seq + 1, memory_order_acq_rel);
	memcpy(&rec->data, st, sizeof *st);
	if (s->nvals)
		memcpy(s->rec_values, s->vals, (size_t)s->nvals * sizeof *s->vals);
	atomic_store_explicit(&rec->seq, seq + 2, memory_order_release);
	s->last_pub = now;
}


/* ---- the program's own stats ---- */

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

static int valid_name(const char *name)
{
	size_t n = 0;

	if (!name || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
		return 0;
	for (; name[n]; n++)
		if (n + 1 >= TL_STATS_NAME_MAX || !name_char(name[n]))
			return 0;
	return 1;
}

/* Equal once '.' and '-' read as '_' (they map to one Prometheus name). */
static int same_metric(const char *a, const char *b)
{
	for (;; a++, b++) {
		char x = *a == '.' || *a == '-' ? '_' : *a, y = *b == '.' || *b == '-' ? '_' : *b;

		if (x != y)
			return 0;
		if (!x)
			return 1;
	}
}

int tl_runtime_stat(tl_runtime *rt, const char *name, int kind, uint32_t rows)
{
	struct tl__stats_fam *f;

	if (!rt || rt->started || !valid_name(name) ||
	    (kind != TL_STAT_COUNTER && kind != TL_STAT_GAUGE) || rows == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < rt->nfams; i++) {
		f = &rt->fams[i];
		if (!strcmp(f->name, name))
			return f->kind == (uint32_t)kind && f->rows == rows ? (int)f->first : -EINVAL;
		if (same_metric(f->name, name))
			return -EINVAL;
	}
	if (rows > rt->cfg.stats_values - rt->nvals)
		return -ENOBUFS;
	tl__os_mutex_lock(&rt->meta_mu);
	meta_begin(rt);
	f = &rt->fams[rt->nfams];
	memset(f, 0, sizeof *f);
	snprintf(f->name, sizeof f->name, "%s", name);
	f->kind = (uint32_t)kind;
	f->rows = rows;
	f->first = rt->nvals;
	memset(rt->vkind + rt->nvals, kind, rows);
	rt->nfams++;
	rt->nvals += rows;
	rt->hdr->families = rt->nfams;
	rt->hdr->values = rt->nvals;
	meta_end(rt);
	tl__os_mutex_unlock(&rt->meta_mu);
	return (int)f->first;
}

int tl_runtime_counter(tl_runtime *rt, const char *name)
{
	return tl_runtime_stat(rt, name, TL_STAT_COUNTER, 1);
}

int tl_runtime_gauge(tl_runtime *rt, const char *name)
{
	return tl_runtime_stat(rt, name, TL_STAT_GAUGE, 1);
}

static int label_char(char c)
{
	return name_char(c) || c == ':' || c == '/' || c == '@' || c == '+' || c == '=' ||
	       c == '[' || c == ']';
}

int tl_runtime_stat_label(tl_runtime *rt, int id, const char *label)
{
	size_t n = 0;

	if (!rt || !label || id < 0)
		return -EINVAL;
	for (; label[n]; n++)
		if (n + 1 >= TL_STATS_LABEL_MAX || !label_char(label[n]))
			return -EINVAL;
	tl__os_mutex_lock(&rt->meta_mu);
	if ((uint32_t)id >= rt->nvals) {
		tl__os_mutex_unlock(&rt->meta_mu);
		return -EINVAL;
	}
	meta_begin(rt);
	memset(rt->labels[id], 0, TL_STATS_LABEL_MAX);
	memcpy(rt->labels[id], label, n);
	meta_end(rt);
	tl__os_mutex_unlock(&rt->meta_mu);
	return 0;
}

int tl_shard_counter_add(tl_shard *s, int id, uint64_t delta)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_COUNTER))
		return -EINVAL;
	s->vals[id] += delta;
	return 0;
}

int tl_shard_gauge_set(tl_shard *s, int id, int64_t value)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_GAUGE))
		return -EINVAL;
	s->vals[id] = (uint64_t)value;
	return 0;
}

int tl_shard_gauge_add(tl_shard *s, int id, int64_t delta)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_GAUGE))
		return -EINVAL;
	/* Unsigned arithmetic wraps where int64_t would overflow; the word is
	 * read back as int64_t. */
	s->vals[id] += (uint64_t)delta;
	return 0;
}

int tl_runtime_stats_published(const tl_runtime *rt)
{
	tl__detail_clear();
	if (!rt)
		return -EINVAL;
	if (rt->stats_rc < 0) {
		tl__detail_set("%s", rt->stats_why);
		return rt->stats_rc;
	}
	return rt->region_shm;
}

/* Deprecated (turnloop.h): tl_runtime_stats_published and its detail. */
const char *tl_runtime_stats_error(const tl_runtime *rt)
{
	return rt ? rt->stats_why : "";
}
