/* shards/plan.c: the shard plan, computed from the machine's topology through lib/shared/topo.h (hwloc on Linux, processor groups on Windows; contract 9.1 and 9.8). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulist.h"
#include "detail.h"
#include "topo.h"
#include "turnloop/plan.h"

/* ---- CPU lists (the language: cpulist.c) ---- */

/*
 * A parsed CPU list: the CPUs a topology can hold (tl__cpuset, below
 * TL__CPUSET_MAX), and the lowest one beyond them, which no topology here
 * has (-1 if none). TL_PLAN_MAX_CPU is above TL__CPUSET_MAX, so a list may
 * name such a CPU, and it must still be told apart from an empty list.
 */
struct cpus {
	tl__cpuset set;
	int beyond;
};

static int cpus_add(void *ctx, unsigned lo, unsigned hi)
{
	struct cpus *c = ctx;

	for (unsigned i = lo; i <= hi && i < TL__CPUSET_MAX; i++)
		tl__cpuset_add(&c->set, i);
	if (hi >= TL__CPUSET_MAX && c->beyond < 0)
		c->beyond = lo > TL__CPUSET_MAX ? (int)lo : TL__CPUSET_MAX;
	return 0;
}

static int no_add(void *ctx, unsigned lo, unsigned hi)
{
	(void)ctx;
	(void)lo;
	(void)hi;
	return 0;
}

/* Parse s into *out: 0 or -EINVAL. */
static int cpulist_set(const char *s, struct cpus *out)
{
	tl__cpuset_zero(&out->set);
	out->beyond = -1;
	return tl__cpulist_walk(s, TL_PLAN_MAX_CPU, cpus_add, out);
}

static void set_and(tl__cpuset *a, const tl__cpuset *b)
{
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++)
		a->w[i] &= b->w[i];
}

/* The first CPU of want that set lacks, or -1. */
static int first_missing(const struct cpus *want, const tl__cpuset *set)
{
	for (unsigned i = 0; i < TL__CPUSET_MAX / 64; i++) {
		uint64_t w = want->set.w[i] & ~set->w[i];

		if (w)
			return (int)(i * 64 + (unsigned)__builtin_ctzll(w));
	}
	return want->beyond;
}

/* ---- Planning ---- */

/*
 * The PUs this plan may use: what the system allows this process (the
 * cgroup's cpuset on Linux: hwloc has left out what it forbids) within
 * the process's CPU affinity (taskset, sched_setaffinity; Windows' process
 * affinity), then within req->allowed. The affinity is the process's, the
 * union over its threads, so shard threads pinned by an earlier plan do
 * not shrink the next one.
 */
static int allowed_set(const tl__topo *topo, const tl_plan_request *req, tl__cpuset *out)
{
	tl__topo_usable(topo, out);
	if (req->allowed) {
		struct cpus extra;

		if (cpulist_set(req->allowed, &extra))
			return -EINVAL;
		set_and(out, &extra.set);
	}
	return tl__cpuset_count(out) ? 0 : -EINVAL;
}

struct cand {
	unsigned node_rank; /* NUMA node in topology order, UINT32_MAX if none: sort key */
	unsigned core_rank; /* core logical index (or the PU's): sort key */
	unsigned pu_rank;   /* PU logical index: sort key, unique */
	int node;           /* the node's index in the topology, -1 if none */
	tl_shard_place place;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->node_rank != y->node_rank)
		return x->node_rank < y->node_rank ? -1 : 1;
	if (x->core_rank != y->core_rank)
		return x->core_rank < y->core_rank ? -1 : 1;
	if (x->pu_rank != y->pu_rank)
		return x->pu_rank < y->pu_rank ? -1 : 1;
	return 0;
}

/* Fill cands (room for every PU) with the usable PUs; returns their number
 * or -ENOMEM. Without smt only the first usable PU of each core counts. */
static int collect(const tl__topo *topo, const tl__cpuset *usable, int smt, struct cand *cands)
{
	uint32_t npu = tl__topo_pus(topo);
	unsigned char *seen = NULL;
	int ncores = 0, n = 0;

	for (uint32_t i = 0; i < npu; i++)
		if (tl__topo_pu_at(topo, i)->core >= ncores)
			ncores = tl__topo_pu_at(topo, i)->core + 1;
	if (ncores && !(seen = calloc((size_t)ncores, 1)))
		return -ENOMEM;
	for (uint32_t i = 0; i < npu; i++) {
		const tl__topo_pu *pu = tl__topo_pu_at(topo, i);
		struct cand *c;

		if (pu->cpu < 0 || !tl__cpuset_has(usable, (unsigned)pu->cpu))
			continue;
		/* Some platforms report no cores: each PU is then its own. */
		if (!smt && pu->core >= 0) {
			if (seen[pu->core])
				continue;
			seen[pu->core] = 1;
		}
		c = &cands[n++];
		c->node_rank = pu->node >= 0 ? (unsigned)pu->node : UINT32_MAX;
		c->core_rank = pu->core >= 0 ? (unsigned)pu->core : i;
		c->pu_rank = i;
		c->node = pu->node;
		c->place.shard = 0;
		c->place.pu_os_index = pu->cpu;
		c->place.core = pu->core >= 0 ? pu->core : (int)i;
		c->place.numa_node = pu->node >= 0 ? pu->node_os : -1;
		c->place.package = pu->package;
	}
	free(seen);
	return n;
}

/* Everything after the topology is loaded: pick, order and assign PUs. */
static int plan_from_topology(tl_plan *out, const tl__topo *topo, const tl_plan_request *req)
{
	tl__cpuset usable;
	struct cand *cands = NULL;
	unsigned char *nodes = NULL;
	uint32_t npu, nnodes = tl__topo_nodes(topo), count;
	int n, rc;

	rc = allowed_set(topo, req, &usable);
	if (rc)
		return rc;
	if (req->cpus) {
		struct cpus want;

		if (cpulist_set(req->cpus, &want) || first_missing(&want, &usable) >= 0)
			return -EINVAL;
		usable = want.set;
	}

	npu = tl__topo_pus(topo);
	if (npu == 0)
		return -EINVAL;
	cands = calloc(npu, sizeof *cands);
	if (!cands)
		return -ENOMEM;
	n = collect(topo, &usable, req->smt, cands);
	if (n <= 0) {
		/* 0: the allowed set named no PU the topology has. */
		rc = n < 0 ? n : -EINVAL;
		goto out;
	}
	qsort(cands, (size_t)n, sizeof *cands, cand_cmp);

	count = req->shards ? req->shards : (uint32_t)n;
	if (count > (uint32_t)n && !req->overcommit) {
		rc = -EINVAL;
		goto out;
	}
	out->shards = calloc(count, sizeof *out->shards);
	nodes = calloc(nnodes ? nnodes : 1, 1);
	if (!out->shards || !nodes) {
		rc = -ENOMEM;
		goto out;
	}
	out->numa_nodes = 0;
	for (uint32_t i = 0; i < count; i++) {
		const struct cand *c = &cands[i % (uint32_t)n];
		tl_shard_place *s = &out->shards[i];

		*s = c->place;
		s->shard = i;
		if (c->node >= 0 && (uint32_t)c->node < nnodes && !nodes[c->node]) {
			nodes[c->node] = 1;
			out->numa_nodes++;
		}
	}
	out->count = count;
	rc = 0;
out:
	if (rc) {
		free(out->shards);
		out->shards = NULL;
		out->numa_nodes = 0;
	}
	free(nodes);
	free(cands);
	return rc;
}

/* tl_plan_compute without its detail (which explain() computes with this). */
static int compute(tl_plan *out, const tl_plan_request *req, const char *synthetic)
{
	static const tl_plan_request defaults;
	tl__topo *topo;
	int rc;

	memset(out, 0, sizeof *out);
	if (!req)
		req = &defaults;
	if (req->shards > TL_PLAN_MAX_SHARDS)
		return -EINVAL;
	/* Reject a bad list before paying for a topology load. */
	if (req->cpus && tl__cpulist_walk(req->cpus, TL_PLAN_MAX_CPU, no_add, NULL))
		return -EINVAL;
	if (req->allowed && tl__cpulist_walk(req->allowed, TL_PLAN_MAX_CPU, no_add, NULL))
		return -EINVAL;
	if (synthetic && !*synthetic)
		return -EINVAL;

	rc = tl__topo_load(&topo, synthetic);
	if (rc)
		return rc;
	rc = plan_from_topology(out, topo, req);
	if (rc) {
		tl__topo_free(topo);
		memset(out, 0, sizeof *out);
		return rc;
	}
	out->topo = topo;
	return 0;
}

void tl_plan_free(tl_plan *p)
{
	if (!p)
		return;
	free(p->shards);
	tl__topo_free(p->topo);
	memset(p, 0, sizeof *p);
}

/* ---- Environment ---- */

/* At most 40 bytes of an environment value for a detail line, anything
 * but printable ASCII shown as '?' (the line must stay one line). */
static const char *shown(const char *v, char *buf, size_t len)
{
	size_t i;

	for (i = 0; v[i] && i < 40 && i + 1 < len; i++)
		buf[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
	buf[i] = '\0';
	return buf;
}

int tl_plan_from_env(tl_plan_request *req)
{
	tl_plan_request r;
	const char *v;
	char b[48];

	tl__detail_clear();
	if (!req)
		return -EINVAL;
	/* Work on a copy so that a bad variable leaves *req untouched. */
	r = *req;
	if (!r.cpus && (v = getenv("TL_CPUS")) && *v) {
		if (tl__cpulist_walk(v, TL_PLAN_MAX_CPU, no_add, NULL)) {
			tl__detail_set("TL_CPUS='%s' is not a CPU list (like 0-3,6; CPUs below %u)",
				       shown(v, b, sizeof b), TL_PLAN_MAX_CPU);
			return -EINVAL;
		}
		r.cpus = v;
	}
	if (!r.shards && (v = getenv("TL_SHARDS")) && *v) {
		if (tl__parse_count(v, TL_PLAN_MAX_SHARDS, &r.shards)) {
			tl__detail_set("TL_SHARDS='%s' is not a shard count (0..%u)",
				       shown(v, b, sizeof b), TL_PLAN_MAX_SHARDS);
			return -EINVAL;
		}
	}
	if (!r.smt && (v = getenv("TL_SMT")) && *v) {
		if (strcmp(v, "0") == 0) {
			r.smt = 0;
		} else if (strcmp(v, "1") == 0) {
			r.smt = 1;
		} else {
			tl__detail_set("TL_SMT='%s' is neither 0 nor 1", shown(v, b, sizeof b));
			return -EINVAL;
		}
	}
	*req = r;
	return 0;
}

/* ---- Why a plan cannot be met ---- */

struct why {
	char *buf;
	size_t len;
};

static int why_say(struct why *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int why_say(struct why *w, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(w->buf, w->len, fmt, ap);
	va_end(ap);
	if (n < 0) {
		w->buf[0] = '\0';
		return 0;
	}
	return (size_t)n < w->len ? n : (int)w->len - 1;
}

/* set as a list like "0-3,6" ("none" when empty), in the caller's buf
 * (cut to fit, as hwloc's list printer cuts). */
static const char *list_of(const tl__cpuset *set, char *buf, size_t len)
{
	size_t off = 0;
	int first = 1;

	buf[0] = '\0';
	for (unsigned c = 0; c < TL__CPUSET_MAX && off + 1 < len; c++) {
		unsigned hi = c;
		int w;

		if (!tl__cpuset_has(set, c))
			continue;
		while (hi + 1 < TL__CPUSET_MAX && tl__cpuset_has(set, hi + 1))
			hi++;
		w = hi == c ? snprintf(buf + off, len - off, "%s%u", first ? "" : ",", c)
			    : snprintf(buf + off, len - off, "%s%u-%u", first ? "" : ",", c, hi);
		if (w < 0)
			break;
		off += (size_t)w < len - off ? (size_t)w : len - off - 1;
		first = 0;
		c = hi;
	}
	if (first)
		snprintf(buf, len, "none");
	return buf;
}

#ifdef _WIN32
#define AFFINITY_HINT "see start /affinity"
#else
#define AFFINITY_HINT "see taskset -p"
#endif

static int explain_cpus(struct why *w, const tl__topo *topo, const tl_plan_request *req,
			const struct cpus *want)
{
	const tl__cpuset *all = tl__topo_existing(topo), *cg = tl__topo_allowed(topo);
	tl__cpuset bound;
	struct cpus extra;
	char l1[256];
	int c;

	/* What exists, then what the cgroup allows, then the affinity. */
	if ((c = first_missing(want, all)) >= 0)
		return why_say(w, "cpu %d does not exist (this machine has cpus %s)", c,
			       list_of(all, l1, sizeof l1));
	if ((c = first_missing(want, cg)) >= 0)
		return why_say(w, "cpu %d is outside this process's cgroup cpuset (it allows %s)", c,
			       list_of(cg, l1, sizeof l1));
	if (tl__topo_affinity(topo, &bound) == 0 && tl__cpuset_count(&bound) &&
	    (c = first_missing(want, &bound)) >= 0)
		return why_say(w, "cpu %d is outside this process's CPU affinity (it allows %s; "
				  AFFINITY_HINT ")", c, list_of(&bound, l1, sizeof l1));
	if (req->allowed && cpulist_set(req->allowed, &extra) == 0 &&
	    (c = first_missing(want, &extra.set)) >= 0)
		return why_say(w, "cpu %d is outside the allowed set %s", c, req->allowed);
	return 0;
}

/* Why compute(req, synthetic) failed with rc, into buf (len > 0): the
 * reason's length. */
static int explain(const tl_plan_request *req, const char *synthetic, int rc, char *buf,
		   size_t len)
{
	static const tl_plan_request defaults;
	struct why w = {buf, len};
	struct cpus want;
	tl__topo *topo;
	tl_plan_request r;
	tl_plan p;

	buf[0] = '\0';
	if (!req)
		req = &defaults;
	if (req->shards > TL_PLAN_MAX_SHARDS)
		return why_say(&w, "%u shards is more than a plan takes (%u)", req->shards,
			       TL_PLAN_MAX_SHARDS);
	if (req->cpus && tl__cpulist_walk(req->cpus, TL_PLAN_MAX_CPU, no_add, NULL))
		return why_say(&w, "'%s' is not a CPU list (like 0-3,6; CPUs below %u)", req->cpus,
			       TL_PLAN_MAX_CPU);
	if (req->allowed && tl__cpulist_walk(req->allowed, TL_PLAN_MAX_CPU, no_add, NULL))
		return why_say(&w, "'%s' is not a CPU list (like 0-3,6)", req->allowed);
#ifdef _WIN32
	if (rc == -ENOTSUP && synthetic)
		return why_say(&w, "cannot load the topology %s: an XML export needs hwloc, "
				   "which this build has not", synthetic);
#endif
	if (rc != -EINVAL)
		return why_say(&w, "cannot load the topology%s%s: %s", synthetic ? " " : "",
			       synthetic ? synthetic : "", strerror(-rc));
	/* The disallowed PUs too, to tell a CPU that does not exist from one
	 * the cgroup forbids. */
	rc = synthetic && !*synthetic ? -EINVAL
				      : tl__topo_load_ex(&topo, synthetic, TL__TOPO_DISALLOWED);
#ifdef _WIN32
	if (rc && synthetic)
		return why_say(&w, "'%s' is not a topology this build can read (a synthetic "
				   "description like \"pack:2 core:4 pu:2\"; XML needs hwloc)",
			       synthetic);
#else
	if (rc && synthetic)
		return why_say(&w, "'%s' is not a topology hwloc can read (a synthetic "
				   "description like \"pack:2 core:4 pu:2\", or an XML file)",
			       synthetic);
#endif
	if (rc)
		return why_say(&w, "cannot load the machine's topology: %s", strerror(-rc));
	if (req->cpus && cpulist_set(req->cpus, &want) == 0) {
		rc = explain_cpus(&w, topo, req, &want);
		if (rc > 0) {
			tl__topo_free(topo);
			return rc;
		}
	}
	tl__topo_free(topo);
	/* The CPUs are fine, so the count is not: plan without it to see how
	 * many shards the request can have. */
	r = *req;
	r.shards = 0;
	if (compute(&p, &r, synthetic) == 0) {
		rc = why_say(&w, "%u shards asked, but %s %u usable %s%s%s", req->shards,
			     req->cpus ? "the listed CPUs hold" : "this process has", p.count,
			     req->smt ? "PU" : "core", p.count == 1 ? "" : "s",
			     req->smt ? "" : " (--smt uses every PU of a core)");
		tl_plan_free(&p);
		return rc;
	}
	return why_say(&w, "no usable CPU: the allowed set and the CPU list do not meet");
}

int tl_plan_compute(tl_plan *out, const tl_plan_request *req, const char *synthetic)
{
	char why[256];
	int rc;

	tl__detail_clear();
	if (!out) {
		tl__detail_set("no plan to fill (out is NULL)");
		return -EINVAL;
	}
	rc = compute(out, req, synthetic);
	if (rc < 0) {
		explain(req, synthetic, rc, why, sizeof why);
		tl__detail_set("%s", why[0] ? why : strerror(-rc));
	}
	return rc;
}

/* Deprecated (turnloop.h): the reason is tl_plan_compute's detail. */
int tl_plan_explain(const tl_plan_request *req, const char *synthetic, char *buf, size_t len)
{
	tl_plan p;
	int rc;

	if (!buf || !len)
		return -EINVAL;
	buf[0] = '\0';
	rc = compute(&p, req, synthetic);
	if (rc == 0) {
		tl_plan_free(&p);
		return 0;
	}
	return explain(req, synthetic, rc, buf, len);
}

/* ---- Output and binding ---- */

int tl_plan_format(const tl_plan *p, char *buf, size_t len)
{
	size_t off = 0;

	if (!p || !buf || (p->count && !p->shards))
		return -EINVAL;
	/* Not even room for the terminating NUL. */
	if (len == 0)
		return -ENOBUFS;
	buf[0] = '\0';
	for (uint32_t i = 0; i < p->count; i++) {
		const tl_shard_place *s = &p->shards[i];
		int w = snprintf(buf + off, len - off,
				 "shard %u: cpu %d core %d numa %d package %d\n",
				 s->shard, s->pu_os_index, s->core, s->numa_node,
				 s->package);

		if (w < 0 || (size_t)w >= len - off) {
			buf[0] = '\0';
			return -ENOBUFS;
		}
		off += (size_t)w;
	}
	if (off > INT_MAX) {
		buf[0] = '\0';
		return -ENOBUFS;
	}
	return (int)off;
}

int tl_plan_bind_thread(const tl_plan *p, uint32_t shard)
{
	const tl__topo *topo;
	const tl_shard_place *s;
	tl__cpuset one;
	int rc;

	if (!p || !p->topo || !p->shards || shard >= p->count)
		return -EINVAL;
	topo = p->topo;
	/* Binding to a synthetic or XML topology's CPUs would bind to CPUs
	 * that are not the ones described; say so instead. */
	if (!tl__topo_binds(topo))
		return -ENOTSUP;
	s = &p->shards[shard];
	if (s->pu_os_index < 0 || s->pu_os_index >= TL__CPUSET_MAX)
		return -EINVAL;
	tl__cpuset_zero(&one);
	tl__cpuset_add(&one, (unsigned)s->pu_os_index);
	rc = tl__topo_bind(topo, &one);
	if (rc || s->numa_node < 0)
		return rc;
	rc = tl__topo_bind_memory(topo, s->pu_os_index, s->numa_node);
	/* Nothing to choose on a single-node machine. */
	if (tl__topo_nodes(topo) <= 1 && (rc == -ENOSYS || rc == -EXDEV))
		rc = 0;
	return rc;
}
