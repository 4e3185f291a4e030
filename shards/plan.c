/* shards/plan.c: the shard plan, computed from the hwloc topology (contract 9.1 and 9.8). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "cpulist.h"
#include "detail.h"
#include "turnloop/plan.h"

/* ---- CPU lists (the language: cpulist.c) ---- */

static int bitmap_add(void *ctx, unsigned lo, unsigned hi)
{
	return hwloc_bitmap_set_range(ctx, lo, (int)hi) ? -ENOMEM : 0;
}

static int no_add(void *ctx, unsigned lo, unsigned hi)
{
	(void)ctx;
	(void)lo;
	(void)hi;
	return 0;
}

/* Parse s into a new hwloc bitmap at *out (NULL on failure). */
static int cpulist_bitmap(const char *s, hwloc_bitmap_t *out)
{
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	int rc;

	*out = NULL;
	if (!set)
		return -ENOMEM;
	rc = tl__cpulist_walk(s, TL_PLAN_MAX_CPU, bitmap_add, set);
	if (rc) {
		hwloc_bitmap_free(set);
		return rc;
	}
	*out = set;
	return 0;
}

/* ---- Topology ---- */

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* hwloc reports failures as -1 plus errno; errno 0 would turn a failure
 * into success, hence the fallback. */
static int hwloc_err(int fallback)
{
	return errno > 0 ? -errno : -fallback;
}

static int load_topology(hwloc_topology_t *out, const char *synthetic, unsigned long flags)
{
	hwloc_topology_t topo;
	int rc;

	*out = NULL;
	if (synthetic && !*synthetic)
		return -EINVAL;
	if (hwloc_topology_init(&topo))
		return -ENOMEM;
	if (flags && hwloc_topology_set_flags(topo, flags)) {
		hwloc_topology_destroy(topo);
		return -EINVAL;
	}
	if (synthetic) {
		errno = 0;
		if (ends_with(synthetic, ".xml"))
			rc = hwloc_topology_set_xml(topo, synthetic);
		else
			rc = hwloc_topology_set_synthetic(topo, synthetic);
		if (rc) {
			/* A synthetic description hwloc cannot read is a bad
			 * argument, whatever errno its parser left behind. */
			rc = ends_with(synthetic, ".xml") ? hwloc_err(EINVAL) : -EINVAL;
			hwloc_topology_destroy(topo);
			return rc;
		}
	}
	errno = 0;
	if (hwloc_topology_load(topo)) {
		rc = hwloc_err(EINVAL);
		hwloc_topology_destroy(topo);
		return rc;
	}
	*out = topo;
	return 0;
}

/*
 * The PUs this plan may use. Without INCLUDE_DISALLOWED, hwloc has already
 * left out what the cgroup forbids; the CPU binding (taskset,
 * sched_setaffinity) is not part of that, so intersect it here. The process
 * binding is the union over its threads, so shard threads pinned by an
 * earlier plan do not shrink the next one.
 */
static int allowed_set(hwloc_topology_t topo, const tl_plan_request *req,
		       hwloc_bitmap_t *out)
{
	hwloc_bitmap_t set, extra = NULL;
	int rc = -ENOMEM;

	*out = NULL;
	set = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
	if (!set)
		return -ENOMEM;
	if (hwloc_topology_is_thissystem(topo)) {
		hwloc_bitmap_t bound = hwloc_bitmap_alloc();

		if (!bound)
			goto fail;
		/* The process query walks /proc/self/task and gives up if
		 * threads keep coming and going; the calling thread is the
		 * next best witness. No binding support at all (ENOSYS)
		 * means there is no restriction to honour. */
		if ((hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) == 0 ||
		     hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_THREAD) == 0) &&
		    !hwloc_bitmap_iszero(bound) && hwloc_bitmap_and(set, set, bound)) {
			hwloc_bitmap_free(bound);
			goto fail;
		}
		hwloc_bitmap_free(bound);
	}
	if (req->allowed) {
		rc = cpulist_bitmap(req->allowed, &extra);
		if (rc)
			goto fail;
		rc = hwloc_bitmap_and(set, set, extra) ? -ENOMEM : 0;
		hwloc_bitmap_free(extra);
		if (rc)
			goto fail;
	}
	if (hwloc_bitmap_iszero(set)) {
		rc = -EINVAL;
		goto fail;
	}
	*out = set;
	return 0;
fail:
	hwloc_bitmap_free(set);
	return rc;
}

/* ---- Planning ---- */

struct cand {
	unsigned node_rank; /* NUMA node logical index, UINT32_MAX if none: sort key */
	unsigned core_rank; /* core logical index (or the PU's): sort key */
	unsigned pu_rank;   /* PU logical index: sort key, unique */
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

/* The first NUMA node (hwloc order) local to the PU. A PU can be local to
 * several (DRAM plus HBM or CXL memory); the first is the ordinary one. */
static hwloc_obj_t pu_node(hwloc_topology_t topo, hwloc_obj_t pu)
{
	hwloc_obj_t n = NULL;

	while ((n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)))
		if (n->cpuset && hwloc_bitmap_isset(n->cpuset, pu->os_index))
			return n;
	return NULL;
}

/* Fill cands (room for every PU) with the usable PUs; returns their number
 * or -ENOMEM. Without smt only the first usable PU of each core counts. */
static int collect(hwloc_topology_t topo, hwloc_const_bitmap_t usable, int smt,
		   struct cand *cands)
{
	hwloc_bitmap_t seen = hwloc_bitmap_alloc();
	hwloc_obj_t pu = NULL;
	int n = 0;

	if (!seen)
		return -ENOMEM;
	while ((pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu))) {
		hwloc_obj_t core, node, pkg;
		struct cand *c;

		if (!hwloc_bitmap_isset(usable, pu->os_index))
			continue;
		core = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
		/* Some platforms report no cores: each PU is then its own. */
		if (!core)
			core = pu;
		if (!smt && core != pu) {
			if (hwloc_bitmap_isset(seen, core->logical_index))
				continue;
			if (hwloc_bitmap_set(seen, core->logical_index)) {
				hwloc_bitmap_free(seen);
				return -ENOMEM;
			}
		}
		node = pu_node(topo, pu);
		pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu);
		c = &cands[n++];
		c->node_rank = node ? node->logical_index : UINT32_MAX;
		c->core_rank = core->logical_index;
		c->pu_rank = pu->logical_index;
		c->place.shard = 0;
		c->place.pu_os_index = (int)pu->os_index;
		c->place.core = (int)core->logical_index;
		c->place.numa_node = node ? (int)node->os_index : -1;
		c->place.package = pkg ? (int)pkg->logical_index : -1;
	}
	hwloc_bitmap_free(seen);
	return n;
}

/* Everything after the topology is loaded: pick, order and assign PUs. */
static int plan_from_topology(tl_plan *out, hwloc_topology_t topo,
			      const tl_plan_request *req)
{
	hwloc_bitmap_t usable = NULL, want = NULL, nodes = NULL;
	struct cand *cands = NULL;
	int npu, n, rc;
	uint32_t count;

	rc = allowed_set(topo, req, &usable);
	if (rc)
		return rc;
	if (req->cpus) {
		rc = cpulist_bitmap(req->cpus, &want);
		if (rc)
			goto out;
		if (!hwloc_bitmap_isincluded(want, usable)) {
			rc = -EINVAL;
			goto out;
		}
		if (hwloc_bitmap_copy(usable, want)) {
			rc = -ENOMEM;
			goto out;
		}
	}

	npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	if (npu <= 0) {
		rc = -EINVAL;
		goto out;
	}
	cands = calloc((size_t)npu, sizeof *cands);
	if (!cands) {
		rc = -ENOMEM;
		goto out;
	}
	n = collect(topo, usable, req->smt, cands);
	if (n <= 0) {
		/* 0: the allowed set named no PU hwloc knows. */
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
	nodes = hwloc_bitmap_alloc();
	if (!out->shards || !nodes) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < count; i++) {
		tl_shard_place *s = &out->shards[i];

		*s = cands[i % (uint32_t)n].place;
		s->shard = i;
		if (s->numa_node >= 0 && hwloc_bitmap_set(nodes, (unsigned)s->numa_node)) {
			rc = -ENOMEM;
			goto out;
		}
	}
	out->count = count;
	out->numa_nodes = (uint32_t)hwloc_bitmap_weight(nodes);
	rc = 0;
out:
	if (rc) {
		free(out->shards);
		out->shards = NULL;
	}
	hwloc_bitmap_free(nodes);
	hwloc_bitmap_free(want);
	hwloc_bitmap_free(usable);
	free(cands);
	return rc;
}

/* tl_plan_compute without its detail (which explain() computes with this). */
static int compute(tl_plan *out, const tl_plan_request *req, const char *synthetic)
{
	static const tl_plan_request defaults;
	hwloc_topology_t topo;
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

	rc = load_topology(&topo, synthetic, 0);
	if (rc)
		return rc;
	rc = plan_from_topology(out, topo, req);
	if (rc) {
		hwloc_topology_destroy(topo);
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
	if (p->topo)
		hwloc_topology_destroy(p->topo);
	memset(p, 0, sizeof *p);
}

/* ---- Environment ---- */

static int parse_count(const char *s, uint32_t max, uint32_t *out)
{
	uint32_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (uint32_t)(*s - '0');
		if (v > max)
			return -EINVAL;
	}
	*out = v;
	return 0;
}

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
		if (parse_count(v, TL_PLAN_MAX_SHARDS, &r.shards)) {
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

/* set as a list like "0-3,6" ("none" when empty), in the caller's buf. */
static const char *list_of(hwloc_const_bitmap_t set, char *buf, size_t len)
{
	if (!set || hwloc_bitmap_iszero(set))
		snprintf(buf, len, "none");
	else if (hwloc_bitmap_list_snprintf(buf, len, set) < 0)
		snprintf(buf, len, "?");
	return buf;
}

/* The first CPU of want that set lacks, or -1. */
static int first_missing(hwloc_const_bitmap_t want, hwloc_const_bitmap_t set)
{
	int c;

	hwloc_bitmap_foreach_begin(c, want)
	{
		if (!hwloc_bitmap_isset(set, (unsigned)c))
			return c;
	}
	hwloc_bitmap_foreach_end();
	return -1;
}

static int explain_cpus(struct why *w, hwloc_topology_t topo, const tl_plan_request *req,
			hwloc_const_bitmap_t want)
{
	hwloc_const_bitmap_t all = hwloc_topology_get_complete_cpuset(topo);
	hwloc_const_bitmap_t cg = hwloc_topology_get_allowed_cpuset(topo);
	hwloc_bitmap_t bound = hwloc_bitmap_alloc(), extra = NULL;
	char l1[256];
	int c, rc = 0;

	if (!bound)
		return why_say(w, "out of memory");
	/* What exists, then what the cgroup allows, then the affinity. */
	if ((c = first_missing(want, all)) >= 0) {
		rc = why_say(w, "cpu %d does not exist (this machine has cpus %s)", c,
			     list_of(all, l1, sizeof l1));
		goto out;
	}
	if ((c = first_missing(want, cg)) >= 0) {
		rc = why_say(w, "cpu %d is outside this process's cgroup cpuset (it allows %s)", c,
			     list_of(cg, l1, sizeof l1));
		goto out;
	}
	if (hwloc_topology_is_thissystem(topo) &&
	    (hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) == 0 ||
	     hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_THREAD) == 0) &&
	    !hwloc_bitmap_iszero(bound) && (c = first_missing(want, bound)) >= 0) {
		rc = why_say(w, "cpu %d is outside this process's CPU affinity (it allows %s; "
				"see taskset -p)", c, list_of(bound, l1, sizeof l1));
		goto out;
	}
	if (req->allowed && cpulist_bitmap(req->allowed, &extra) == 0 &&
	    (c = first_missing(want, extra)) >= 0)
		rc = why_say(w, "cpu %d is outside the allowed set %s", c, req->allowed);
out:
	hwloc_bitmap_free(extra);
	hwloc_bitmap_free(bound);
	return rc;
}

/* Why compute(req, synthetic) failed with rc, into buf (len > 0): the
 * reason's length. */
static int explain(const tl_plan_request *req, const char *synthetic, int rc, char *buf,
		   size_t len)
{
	static const tl_plan_request defaults;
	struct why w = {buf, len};
	hwloc_bitmap_t want = NULL;
	hwloc_topology_t topo;
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
	if (rc != -EINVAL)
		return why_say(&w, "cannot load the topology%s%s: %s", synthetic ? " " : "",
			       synthetic ? synthetic : "", strerror(-rc));
	/* The disallowed PUs too, to tell a CPU that does not exist from one
	 * the cgroup forbids. */
	rc = load_topology(&topo, synthetic, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
	if (rc && synthetic)
		return why_say(&w, "'%s' is not a topology hwloc can read (a synthetic "
				   "description like \"pack:2 core:4 pu:2\", or an XML file)",
			       synthetic);
	if (rc)
		return why_say(&w, "cannot load the machine's topology: %s", strerror(-rc));
	if (req->cpus && cpulist_bitmap(req->cpus, &want) == 0) {
		rc = explain_cpus(&w, topo, req, want);
		hwloc_bitmap_free(want);
		if (rc > 0) {
			hwloc_topology_destroy(topo);
			return rc;
		}
	}
	hwloc_topology_destroy(topo);
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
	hwloc_topology_t topo;
	hwloc_bitmap_t set;
	const tl_shard_place *s;
	int rc = 0;

	if (!p || !p->topo || !p->shards || shard >= p->count)
		return -EINVAL;
	topo = p->topo;
	/* Binding calls on a synthetic or XML topology succeed without doing
	 * anything, which would hide a mistake; say so instead. */
	if (!hwloc_topology_is_thissystem(topo))
		return -ENOTSUP;
	s = &p->shards[shard];
	set = hwloc_bitmap_alloc();
	if (!set)
		return -ENOMEM;

	if (hwloc_bitmap_only(set, (unsigned)s->pu_os_index)) {
		rc = -ENOMEM;
		goto out;
	}
	errno = 0;
	if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD)) {
		rc = hwloc_err(EINVAL);
		goto out;
	}
	if (s->numa_node < 0)
		goto out;
	if (hwloc_bitmap_only(set, (unsigned)s->numa_node)) {
		rc = -ENOMEM;
		goto out;
	}
	errno = 0;
	if (hwloc_set_membind(topo, set, HWLOC_MEMBIND_BIND,
			      HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET)) {
		int err = errno;

		if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) <= 1 &&
		    (err == ENOSYS || err == EXDEV))
			goto out;
		rc = err > 0 ? -err : -EINVAL;
	}
out:
	hwloc_bitmap_free(set);
	return rc;
}
