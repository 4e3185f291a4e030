/* shards/sched.c: cooperative scheduling on a shard (turnloop/sched.h): scheduling groups and their shares, the task records, the scheduler that runs tasks between turns, per-group stats, and the stall detector's report of where a slow pass went. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "runtime_int.h"

/*
 * The policy, in one place (what turnloop/sched.h promises):
 *
 * Each group has a virtual clock, vt: the time its tasks ran, times VSCALE
 * over its shares, so that groups that ran in proportion to their shares
 * have equal clocks. Main's clock runs with the handlers' time of the
 * passes in which tasks were runnable. In a pass:
 *
 *  - the handlers had work ("active"): main is charged what the pass used
 *    so far, and task groups run while the least clock among them is
 *    behind main's, each slice cut to what would bring it level (at least
 *    min_slice, so a slice is worth the call). So over many busy passes
 *    the groups get main's time times their shares over main's.
 *  - the handlers had nothing: main's clock is brought up to the least
 *    runnable one (an idle main banks no credit that would shut the tasks
 *    out when requests come back), and the tasks may use the whole
 *    quantum.
 *
 * Either way the next slice goes to the runnable group with the least
 * clock, for at most its shares' part of the quantum among the runnable
 * groups, and no pass gives tasks more than the quantum. A group that
 * becomes runnable starts no earlier than the least clock of those already
 * in the race (main's included), so an idle spell earns it nothing. The
 * clocks wrap; they are only compared by their difference.
 */

#define NONE UINT32_MAX
#define VSCALE 65536u

struct task {
	tl_task_fn fn;
	void *arg;
	uint64_t token;
	uint32_t next;  /* the next in its group's queue, or in the free list */
	uint32_t group;
};

struct group {
	uint32_t head, tail, n; /* runnable tasks, in turn order */
	uint32_t shares;
	uint64_t vt;
	uint64_t pass_ns;       /* its tasks' time in this pass */
	uint64_t ns, runs, spawned, ended, stalls;
	uint64_t *vals;         /* its "sched.<name>" rows, or NULL */
};

struct tl__sched {
	struct task *tasks;
	uint32_t cap, free_head, ngroups;
	uint32_t ran;           /* groups whose tasks ran this pass (bits) */
	int running;            /* inside a task's call */
	int stopping;
	uint64_t slice_end;
	uint64_t quantum, min_slice;
	uint64_t pass_ns;       /* all tasks' time in this pass */
	struct group g[TL_SCHED_GROUPS];
};

/* Rows of a group's stats family. */
enum { ROW_NS, ROW_RUNS, ROW_TASKS, ROW_STALLS, ROWS };

static int before(uint64_t a, uint64_t b)
{
	return (int64_t)(a - b) < 0;
}

/* ---- config and groups (the controlling thread, before launch) ---- */

void tl__sched_config_init(tl_runtime_config *c)
{
	c->sched_tasks = 64;
	c->sched_shares = 1000;
	c->sched_quantum_ns = 100000;
}

const char *tl__sched_bad_field(const tl_runtime_config *c)
{
	if (c->sched_tasks > 65536)
		return "sched_tasks must be 0..65536";
	if (!c->sched_shares || c->sched_shares > TL_SCHED_SHARES_MAX)
		return "sched_shares must be 1..TL_SCHED_SHARES_MAX";
	if (c->sched_quantum_ns < 1000 || c->sched_quantum_ns > 1000000000ull)
		return "sched_quantum_ns must be 1 us..1 s";
	return NULL;
}

static int valid_name(const char *name)
{
	size_t len = strlen(name);

	if (!len || len >= TL_SCHED_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* Declare the group's counter family "sched.<name>" and label its rows;
 * its id, or the error (-EEXIST when the program already has it). */
static int declare_stats(tl_runtime *rt, const char *name)
{
	static const char *const labels[ROWS] = {"ns", "runs", "tasks", "stalls"};
	char fam[TL_STATS_NAME_MAX];
	uint32_t before_n = rt->nvals;
	int id;

	snprintf(fam, sizeof fam, "sched.%s", name);
	id = tl_runtime_stat(rt, fam, TL_STAT_COUNTER, ROWS);
	if (id == -EINVAL || (id >= 0 && (uint32_t)id != before_n)) {
		tl__detail_set("a stats family named like \"%s\" exists already", fam);
		return -EEXIST;
	}
	if (id < 0)
		return id;
	for (int r = 0; r < ROWS; r++)
		tl_runtime_stat_label(rt, id + r, labels[r]);
	return id;
}

int tl_runtime_sched_group(tl_runtime *rt, const char *name, uint32_t shares)
{
	uint32_t need;
	int id;

	tl__detail_clear();
	if (!rt || !name)
		return -EINVAL;
	if (rt->started) {
		tl__detail_set("scheduling groups are declared before tl_runtime_launch");
		return -EINVAL;
	}
	if (!valid_name(name) || !strcmp(name, "main")) {
		tl__detail_set("a group's name is 1..%u characters of [A-Za-z0-9_-], not \"main\"",
			       TL_SCHED_NAME_MAX - 1);
		return -EINVAL;
	}
	if (!shares || shares > TL_SCHED_SHARES_MAX) {
		tl__detail_set("a group's shares are 1..%u", TL_SCHED_SHARES_MAX);
		return -EINVAL;
	}
	for (uint32_t i = 1; i < rt->nsgroups; i++)
		if (!strcmp(rt->sgroups[i].name, name)) {
			tl__detail_set("group \"%s\" exists already", name);
			return -EEXIST;
		}
	if (rt->nsgroups == TL_SCHED_GROUPS) {
		tl__detail_set("%u groups at most, main included", TL_SCHED_GROUPS);
		return -ENOBUFS;
	}
	need = rt->nsgroups ? ROWS : 2 * ROWS;
	if (rt->cfg.stats_values - rt->nvals < need) {
		tl__detail_set("the group's stats need %u more of the stats_values slots (%u left)",
			       need, rt->cfg.stats_values - rt->nvals);
		return -ENOBUFS;
	}
	if (!rt->nsgroups) {
		id = declare_stats(rt, "main");
		if (id < 0)
			return id;
		snprintf(rt->sgroups[0].name, TL_SCHED_NAME_MAX, "main");
		rt->sgroups[0].stat = id;
		rt->nsgroups = 1;
	}
	id = declare_stats(rt, name);
	if (id < 0)
		return id;
	snprintf(rt->sgroups[rt->nsgroups].name, TL_SCHED_NAME_MAX, "%s", name);
	rt->sgroups[rt->nsgroups].shares = shares;
	rt->sgroups[rt->nsgroups].stat = id;
	return (int)rt->nsgroups++;
}

/* ---- a shard's scheduler (its thread) ---- */

int tl__sched_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	struct tl__sched *q = calloc(1, sizeof *q);

	if (!q)
		return -ENOMEM;
	s->sched = q;
	q->cap = rt->cfg.sched_tasks;
	if (q->cap && !(q->tasks = calloc(q->cap, sizeof *q->tasks)))
		return -ENOMEM;
	for (uint32_t i = 0; i < q->cap; i++)
		q->tasks[i].next = i + 1 < q->cap ? i + 1 : NONE;
	q->free_head = q->cap ? 0 : NONE;
	q->ngroups = rt->nsgroups ? rt->nsgroups : 1;
	q->quantum = rt->cfg.sched_quantum_ns;
	q->min_slice = q->quantum / 16;
	for (uint32_t i = 0; i < q->ngroups; i++) {
		struct group *g = &q->g[i];

		g->head = g->tail = NONE;
		g->shares = i ? rt->sgroups[i].shares : rt->cfg.sched_shares;
		if (rt->nsgroups && (uint32_t)rt->sgroups[i].stat + ROWS <= s->nvals)
			g->vals = s->vals + rt->sgroups[i].stat;
	}
	return 0;
}

void tl__sched_teardown(tl_shard *s)
{
	if (!s->sched)
		return;
	free(s->sched->tasks);
	free(s->sched);
	s->sched = NULL;
	s->tasks = 0;
}

static void charge(struct tl__sched *q, struct group *g, uint64_t ns)
{
	g->vt += ns * VSCALE / g->shares;
	g->ns += ns;
	g->pass_ns += ns;
	q->pass_ns += ns;
	q->ran |= 1u << (g - q->g);
	if (g->vals)
		g->vals[ROW_NS] = g->ns;
}

int tl_shard_task_spawn(tl_shard *s, uint32_t group, tl_task_fn fn, void *arg, uint64_t token)
{
	struct tl__sched *q = s->sched;
	struct group *g;
	struct task *t;
	uint32_t i;

	if (!fn || group == TL_SCHED_MAIN || group >= q->ngroups)
		return -EINVAL;
	if (q->stopping)
		return -EPIPE;
	if (q->free_head == NONE)
		return -ENOBUFS;
	g = &q->g[group];
	if (!g->n) {
		/* Into the race no earlier than the least clock in it. */
		uint64_t floor = q->g[0].vt;

		for (uint32_t k = 1; k < q->ngroups; k++)
			if (q->g[k].n && before(q->g[k].vt, floor))
				floor = q->g[k].vt;
		if (before(g->vt, floor))
			g->vt = floor;
	}
	i = q->free_head;
	t = &q->tasks[i];
	q->free_head = t->next;
	t->fn = fn;
	t->arg = arg;
	t->token = token;
	t->group = group;
	t->next = NONE;
	if (g->tail == NONE)
		g->head = i;
	else
		q->tasks[g->tail].next = i;
	g->tail = i;
	g->n++;
	g->spawned++;
	s->tasks++;
	return 0;
}

int tl_shard_should_yield(const tl_shard *s)
{
	const struct tl__sched *q = s->sched;

	return q && q->running && !before(tl__os_mono_ns(), q->slice_end);
}

int tl_shard_group_stats_get(const tl_shard *s, uint32_t group, tl_group_stats *out)
{
	const struct group *g;

	if (!s || !out || !s->sched || group >= s->sched->ngroups)
		return -EINVAL;
	g = &s->sched->g[group];
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%s", group ? s->rt->sgroups[group].name : "main");
	out->shares = g->shares;
	out->runnable = g->n;
	out->runtime_ns = g->ns;
	out->runs = g->runs;
	out->spawned = g->spawned;
	out->tasks = g->ended;
	out->stalls = g->stalls;
	return 0;
}

/* Take the head task of g off its queue, free its record and deliver its
 * completion (the record is free before the handler runs, so it may spawn
 * the next). */
static void end_task(tl_shard *s, struct group *g, int64_t result)
{
	struct tl__sched *q = s->sched;
	uint32_t i = g->head;
	struct task *t = &q->tasks[i];
	tl_completion c;

	g->head = t->next;
	if (g->head == NONE)
		g->tail = NONE;
	g->n--;
	g->ended++;
	if (g->vals)
		g->vals[ROW_TASKS] = g->ended;
	s->tasks--;
	c.token = t->token;
	c.op = TL_OP_NONE;
	c.handle = TL_HANDLE_NONE;
	c.result = result;
	c.kind = TL_K_MESH;
	c.flags = TL_F_TERMINAL;
	c.aux = s->id | TL_MESH_RESULT | TL_MESH_TASK;
	c.u.mesh.payload = t->group;
	c.u.mesh.arg = t->arg;
	c.u.mesh.conn = TL_HANDLE_NONE;
	t->fn = NULL;
	t->next = q->free_head;
	q->free_head = i;
	s->mesh_comp[TL_K_MESH]++;
	tl__rt_dispatch(s, &c);
}

/* Call g's head task once, until slice_end; returns the clock after it
 * (and after its completion's handler, if it ended). */
static uint64_t run_one(tl_shard *s, struct group *g, uint64_t now, uint64_t slice_end)
{
	struct tl__sched *q = s->sched;
	uint32_t i = g->head;
	struct task *t = &q->tasks[i];
	uint64_t t1;
	int rc;

	q->running = 1;
	q->slice_end = slice_end;
	rc = t->fn(s, t->arg);
	q->running = 0;
	t1 = tl__os_mono_ns();
	charge(q, g, t1 - now);
	g->runs++;
	if (g->vals)
		g->vals[ROW_RUNS] = g->runs;
	if (rc > 0) {
		/* Its turn is over: to the back of its group's queue (the call
		 * may have queued others behind it). */
		if (g->n > 1) {
			g->head = t->next;
			t->next = NONE;
			q->tasks[g->tail].next = i;
			g->tail = i;
		}
		return t1;
	}
	end_task(s, g, rc);
	now = tl__os_mono_ns();
	charge(q, g, now - t1);
	return now;
}

int tl__sched_run(tl_shard *s, uint64_t t0, uint64_t idle, int active)
{
	struct tl__sched *q = s->sched;
	struct group *m = &q->g[0];
	uint64_t now = tl__os_mono_ns(), end, h;

	h = now - t0;
	h = h > idle ? h - idle : 0;
	if (active) {
		m->vt += h * VSCALE / m->shares;
	} else {
		/* Up to the least runnable clock, if it is behind it. */
		uint64_t lo = 0;
		int any = 0;

		for (uint32_t k = 1; k < q->ngroups; k++)
			if (q->g[k].n && (!any || before(q->g[k].vt, lo))) {
				lo = q->g[k].vt;
				any = 1;
			}
		if (before(m->vt, lo))
			m->vt = lo;
	}
	end = now + q->quantum;
	while (s->tasks && before(now, end)) {
		struct group *g = NULL;
		uint64_t wsum = 0, slice, until;

		for (uint32_t k = 1; k < q->ngroups; k++) {
			struct group *c = &q->g[k];

			if (!c->n)
				continue;
			wsum += c->shares;
			if (!g || before(c->vt, g->vt))
				g = c;
		}
		slice = q->quantum * g->shares / wsum;
		if (active) {
			uint64_t behind;

			if (!before(g->vt, m->vt))
				break; /* the handlers' turn */
			behind = m->vt - g->vt;
			if (behind < slice * VSCALE / g->shares)
				slice = behind * g->shares / VSCALE;
		}
		if (slice < q->min_slice)
			slice = q->min_slice;
		until = before(now + slice, end) ? now + slice : end;
		now = run_one(s, g, now, until);
	}
	return s->tasks != 0;
}

/* Which part of the pass took longest: its name into buf, its time. */
static uint64_t stall_where(tl_shard *s, const struct tl__pass_marks *pm, char *buf, size_t len,
			    struct group **who)
{
	struct tl__sched *q = s->sched;
	uint64_t prev = pm->turn_end, best = pm->turn_ns, part;
	const char *name = "the turn";

	*who = &q->g[0];
	/* Each mark taken is a part's end; coarse marks may trail the fine
	 * clock by a tick, so a part that seems to end before it began took
	 * nothing. */
	const uint64_t ends[3] = {pm->handlers_end, pm->mesh_end, pm->on_pass_end};
	static const char *const names[3] = {"handlers", "mesh", "on_pass"};

	for (int i = 0; i < 3; i++) {
		if (!ends[i])
			continue;
		part = before(prev, ends[i]) ? ends[i] - prev : 0;
		prev = ends[i];
		if (part > best) {
			best = part;
			name = names[i];
		}
	}
	snprintf(buf, len, "%s", name);
	for (uint32_t k = 1; k < q->ngroups; k++)
		if ((q->ran & (1u << k)) && q->g[k].pass_ns > best) {
			best = q->g[k].pass_ns;
			*who = &q->g[k];
			snprintf(buf, len, "task group \"%s\"", s->rt->sgroups[k].name);
		}
	return best;
}

void tl__sched_pass_end(tl_shard *s, uint64_t busy, const struct tl__pass_marks *pm)
{
	tl_runtime *rt = s->rt;
	struct tl__sched *q = s->sched;
	struct group *m = &q->g[0];

	m->ns += busy > q->pass_ns ? busy - q->pass_ns : 0;
	m->runs++;
	if (m->vals) {
		m->vals[ROW_NS] = m->ns;
		m->vals[ROW_RUNS] = m->runs;
	}
	if (tl_unlikely(rt->cfg.stall_ns && busy > rt->cfg.stall_ns)) {
		struct group *who;
		char where[TL_SCHED_NAME_MAX + 16];
		uint64_t took = stall_where(s, pm, where, sizeof where, &who);

		s->st.stalls++;
		s->st.last_stall_ns = busy;
		who->stalls++;
		if (who->vals)
			who->vals[ROW_STALLS] = who->stalls;
		fprintf(stderr,
			"turnloop: stall on shard %u (cpu %d): a pass took %.3f ms (threshold %.3f "
			"ms), %.3f ms of it in %s\n",
			s->id, rt->plan.shards[s->id].pu_os_index, (double)busy / 1e6,
			(double)rt->cfg.stall_ns / 1e6, (double)took / 1e6, where);
	}
	if (q->ran) {
		for (uint32_t k = 1; k < q->ngroups; k++)
			q->g[k].pass_ns = 0;
		q->ran = 0;
		q->pass_ns = 0;
	}
}

void tl__sched_stop(tl_shard *s)
{
	struct tl__sched *q = s->sched;

	q->stopping = 1;
	for (uint32_t k = 1; k < q->ngroups; k++)
		while (q->g[k].n)
			end_task(s, &q->g[k], -ECANCELED);
}
