/* tests/test_sched.c: CUnit tests of cooperative scheduling on a shard (turnloop/sched.h): tasks that yield until done, shares between groups and against the handlers, handlers kept turning while a long task runs, stalls naming their group, full task tables, the end of tasks at a stop and their run through a drain, and declaring groups. */
#include <errno.h>
#include <stdint.h>

#include "shard_test.h"

#define TOK_TASK 0x7a5c
#define TOK_PING 0x9149
#define TOK_TIMER 0x7173

static void burn(uint64_t ns)
{
	uint64_t end = st_now_ns() + ns;

	while (st_now_ns() < end)
		;
}

/* A one-shard runtime with the groups asked for (name, shares; NULL ends). */
static tl_runtime *make(tl_runtime_config *cfg, const char *const *names, const uint32_t *shares)
{
	tl_runtime *rt;

	if (tl_runtime_new(&rt, cfg) != 0)
		return NULL;
	for (int i = 0; names && names[i]; i++)
		CHECK_EQ(tl_runtime_sched_group(rt, names[i], shares[i]), i + 1);
	return rt;
}

/* ---- a task that yields many times completes with its result ---- */

#define SUM_LAST 1000000ull

static struct sum {
	uint64_t next, total;
	uint32_t calls;
	int out_should_yield, handler_should_yield;
	/* The completions, as seen. */
	int ended;
	int64_t result;
	void *arg;
	uint64_t payload;
	uint32_t aux;
	int64_t fail_result;
	uint32_t fail_calls;
	tl_group_stats gs;
} SU;

/* Adds 1..SUM_LAST, at most 1000 numbers a call: 1000 calls at least. */
static int sum_task(tl_shard *s, void *arg)
{
	struct sum *m = arg;

	(void)s;
	m->calls++;
	for (int i = 0; i < 1000 && m->next <= SUM_LAST; i++)
		m->total += m->next++;
	return m->next > SUM_LAST ? TL_TASK_DONE : TL_TASK_MORE;
}

/* Fails with -EIO at its third call. */
static int fail_task(tl_shard *s, void *arg)
{
	(void)s;
	return ++*(uint32_t *)arg == 3 ? -EIO : TL_TASK_MORE;
}

static int sum_launch(tl_shard *s, void *arg)
{
	(void)arg;
	SU.next = 1;
	SU.out_should_yield = tl_shard_should_yield(s);
	ST_CHECK(tl_shard_task_spawn(s, 1, sum_task, &SU, TOK_TASK) == 0);
	ST_CHECK(tl_shard_task_spawn(s, 1, fail_task, &SU.fail_calls, TOK_TASK + 1) == 0);
	return 0;
}

static void sum_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_TASK))
		return;
	SU.handler_should_yield |= tl_shard_should_yield(s);
	if (c->token == TOK_TASK + 1) {
		SU.fail_result = c->result;
		return;
	}
	SU.ended++;
	SU.result = c->result;
	SU.arg = c->u.mesh.arg;
	SU.payload = c->u.mesh.payload;
	SU.aux = c->aux;
	ST_CHECK(tl_shard_group_stats_get(s, 1, &SU.gs) == 0);
	tl_runtime_stop(tl_shard_runtime(s));
}

static void test_yield_many(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {100};
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("sched/yield_many");

	memset(&SU, 0, sizeof SU);
	st_config(&cfg, 1);
	cfg.on_launch = sum_launch;
	cfg.on_completion = sum_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(SU.ended, 1);
	CHECK_EQ(SU.result, 0);
	CHECK_EQ(SU.total, SUM_LAST * (SUM_LAST + 1) / 2);
	CHECK_EQ(SU.calls, SUM_LAST / 1000);
	CHECK_TRUE(SU.arg == &SU);
	CHECK_EQ(SU.payload, 1);
	CHECK_EQ(SU.aux, 0 | TL_MESH_RESULT | TL_MESH_TASK);
	CHECK_EQ(SU.fail_result, -EIO);
	CHECK_EQ(SU.fail_calls, 3);
	/* The runtime counted every call and both ends. */
	CHECK_STR(SU.gs.name, "bg");
	CHECK_EQ(SU.gs.runs, SU.calls + 3);
	CHECK_EQ(SU.gs.spawned, 2);
	CHECK_EQ(SU.gs.tasks, 2);
	CHECK_EQ(SU.gs.runnable, 0);
	CHECK_TRUE(SU.gs.runtime_ns > 0);
	CHECK_EQ(SU.out_should_yield, 0);
	CHECK_EQ(SU.handler_should_yield, 0);
	st_end(fds);
}

/* ---- shares: between groups, and against the handlers ---- */

static struct shares {
	uint64_t target_ns;   /* stop once this much is charged */
	int busy_handlers;    /* on_pass works and asks for more */
	uint32_t ended;
	int64_t results;
	tl_group_stats g[3];
} SH;

/* Spins in units of 2 us until its slice is used up; ends once the groups
 * (or, with busy handlers, main) have been charged target_ns. */
static int spin_task(tl_shard *s, void *arg)
{
	tl_group_stats a, b;

	(void)arg;
	tl_shard_group_stats_get(s, SH.busy_handlers ? 0 : 1, &a);
	tl_shard_group_stats_get(s, SH.busy_handlers ? 1 : 2, &b);
	if ((SH.busy_handlers ? a.runtime_ns : a.runtime_ns + b.runtime_ns) >= SH.target_ns)
		return TL_TASK_DONE;
	do
		burn(2000);
	while (!tl_shard_should_yield(s));
	return TL_TASK_MORE;
}

static int spin_pass(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	if (!SH.busy_handlers || SH.ended)
		return 0;
	burn(20000);
	return 1;
}

static int spin_launch(tl_shard *s, void *arg)
{
	(void)arg;
	ST_CHECK(tl_shard_task_spawn(s, 1, spin_task, NULL, TOK_TASK) == 0);
	if (!SH.busy_handlers)
		ST_CHECK(tl_shard_task_spawn(s, 2, spin_task, NULL, TOK_TASK) == 0);
	return 0;
}

static void spin_handler(tl_shard *s, const tl_completion *c)
{
	uint32_t want = SH.busy_handlers ? 1 : 2;

	if (c->kind != TL_K_MESH || c->token != TOK_TASK)
		return;
	SH.results |= c->result;
	if (++SH.ended < want)
		return;
	for (uint32_t g = 0; g < 3; g++)
		tl_shard_group_stats_get(s, g, &SH.g[g]);
	tl_runtime_stop(tl_shard_runtime(s));
}

static void run_shares(int busy_handlers, const char *const *names, const uint32_t *shares)
{
	tl_runtime_config cfg;
	tl_runtime *rt;

	memset(&SH, 0, sizeof SH);
	SH.busy_handlers = busy_handlers;
	SH.target_ns = 300 * 1000000ull;
	st_config(&cfg, 1);
	cfg.on_launch = spin_launch;
	cfg.on_completion = spin_handler;
	cfg.on_pass = spin_pass;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(SH.ended, busy_handlers ? 1 : 2);
	CHECK_EQ(SH.results, 0);
}

static void test_shares_groups(void)
{
	static const char *const names[] = {"one", "three", NULL};
	static const uint32_t shares[] = {100, 300};
	int fds = st_begin("sched/shares_groups");
	double ratio;

	/* The handlers have nothing to do: the two groups split the quantum
	 * 1:3, by the time the runtime charged them. */
	run_shares(0, names, shares);
	CU_ASSERT_FATAL(SH.g[1].runtime_ns > 0);
	ratio = (double)SH.g[2].runtime_ns / (double)SH.g[1].runtime_ns;
	printf("\n  one %.1f ms in %llu calls, three %.1f ms in %llu calls: 1:%.2f\n",
	       (double)SH.g[1].runtime_ns / 1e6, (unsigned long long)SH.g[1].runs,
	       (double)SH.g[2].runtime_ns / 1e6, (unsigned long long)SH.g[2].runs, ratio);
	CHECK_TRUE(ratio > 2.0 && ratio < 4.5, "ratio 1:%.2f, want about 1:3", ratio);
	CHECK_TRUE(SH.g[1].runs > 100 && SH.g[2].runs > 100);
	st_end(fds);
}

static void test_shares_handlers(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {250};
	int fds = st_begin("sched/shares_handlers");
	double ratio;

	/* The handlers are always busy (main 1000 shares): the group gets a
	 * quarter of main's time, not the whole quantum of each pass. */
	run_shares(1, names, shares);
	CU_ASSERT_FATAL(SH.g[0].runtime_ns > 0);
	ratio = (double)SH.g[1].runtime_ns / (double)SH.g[0].runtime_ns;
	printf("\n  main %.1f ms in %llu passes, bg %.1f ms in %llu calls: %.3f of main's\n",
	       (double)SH.g[0].runtime_ns / 1e6, (unsigned long long)SH.g[0].runs,
	       (double)SH.g[1].runtime_ns / 1e6, (unsigned long long)SH.g[1].runs, ratio);
	CHECK_TRUE(ratio > 0.12 && ratio < 0.5, "bg got %.3f of main's time, want about 0.25",
		   ratio);
	st_end(fds);
}

/* ---- a long task does not hold up the handlers of its shard ---- */

#define WORK_UNITS 100000u /* of 2 us: 200 ms of work */

static struct lat {
	uint32_t units, calls;
	int running;
	uint64_t pings, pings_during, timer_ticks;
	uint64_t last_tick, max_gap;
	/* The most units of work done between two pings, two ticks: counts,
	 * which a loaded machine's preemptions do not inflate. */
	uint32_t units_at_ping, units_at_tick, max_units_ping, max_units_tick;
	int64_t result;
	int ended;
	tl_handle timer;
} LA;

static int work_task(tl_shard *s, void *arg)
{
	(void)arg;
	LA.calls++;
	while (LA.units < WORK_UNITS) {
		burn(2000);
		LA.units++;
		if (tl_shard_should_yield(s))
			return TL_TASK_MORE;
	}
	return TL_TASK_DONE;
}

static int lat_launch(tl_shard *s, void *arg)
{
	tl_loop *l = tl_shard_loop(s);
	tl_op op;

	(void)arg;
	ST_CHECK(tl_timer_start(l, tl_now(l) + 1000000, 1000000, TOK_TIMER, &LA.timer, &op) == 0);
	ST_CHECK(tl_shard_post(s, 0, TOK_PING, 0) == 0);
	ST_CHECK(tl_shard_task_spawn(s, 1, work_task, NULL, TOK_TASK) == 0);
	LA.running = 1;
	return 0;
}

static void lat_handler(tl_shard *s, const tl_completion *c)
{
	tl_loop *l = tl_shard_loop(s);

	if (c->kind == TL_K_TIMER && LA.running) {
		uint64_t now = tl_now(l);

		if (LA.last_tick && now - LA.last_tick > LA.max_gap)
			LA.max_gap = now - LA.last_tick;
		if (LA.units - LA.units_at_tick > LA.max_units_tick)
			LA.max_units_tick = LA.units - LA.units_at_tick;
		LA.units_at_tick = LA.units;
		LA.last_tick = now;
		LA.timer_ticks++;
	} else if (c->kind == TL_K_MESH && c->token == TOK_PING) {
		/* A round trip through the mesh each pass: the handlers' work. */
		LA.pings++;
		LA.pings_during += LA.running;
		if (LA.units - LA.units_at_ping > LA.max_units_ping)
			LA.max_units_ping = LA.units - LA.units_at_ping;
		LA.units_at_ping = LA.units;
		if (LA.running)
			ST_CHECK(tl_shard_post(s, 0, TOK_PING, 0) == 0);
	} else if (c->kind == TL_K_MESH && c->token == TOK_TASK) {
		LA.running = 0;
		LA.ended = 1;
		LA.result = c->result;
		tl_close(l, LA.timer, 0);
		tl_runtime_stop(tl_shard_runtime(s));
	}
}

static void test_handlers_keep_turning(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {1000};
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("sched/handlers_keep_turning");

	memset(&LA, 0, sizeof LA);
	st_config(&cfg, 1);
	cfg.on_launch = lat_launch;
	cfg.on_completion = lat_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	printf("\n  %u calls, %llu pings and %llu ticks while the task ran; between two pings "
	       "%u units of work at most, between two ticks %u and %.3f ms\n",
	       LA.calls, (unsigned long long)LA.pings_during, (unsigned long long)LA.timer_ticks,
	       LA.max_units_ping, LA.max_units_tick, (double)LA.max_gap / 1e6);
	CHECK_EQ(LA.ended, 1);
	CHECK_EQ(LA.result, 0);
	CHECK_EQ(LA.units, WORK_UNITS);
	/* 200 ms of work in slices: the ping went round between them (a
	 * slice is at most the 100 us quantum, 50 units), and the 1 ms timer
	 * kept firing (500 units a tick at most). One call doing the whole
	 * work would put all 100000 units between two pings, and leave a gap
	 * of 200 ms between ticks; the bounds are generous for a loaded
	 * machine. */
	CHECK_TRUE(LA.calls >= 100, "%u calls", LA.calls);
	CHECK_TRUE(LA.pings_during >= LA.calls / 2, "%llu pings for %u calls",
		   (unsigned long long)LA.pings_during, LA.calls);
	CHECK_TRUE(LA.max_units_ping <= 1000, "%u units between pings", LA.max_units_ping);
	CHECK_TRUE(LA.timer_ticks >= 20, "%llu ticks", (unsigned long long)LA.timer_ticks);
	CHECK_TRUE(LA.max_units_tick <= 5000, "%u units between ticks", LA.max_units_tick);
	CHECK_TRUE(LA.max_gap < 100 * 1000000ull, "gap %.3f ms", (double)LA.max_gap / 1e6);
	st_end(fds);
}

/* ---- a task that never yields is a stall naming its group ---- */

static struct stall {
	tl_handle timer;
	tl_group_stats hog, main;
	int ended;
} SL;

static int hog_task(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	burn(30 * 1000000ull); /* never asks should_yield */
	return TL_TASK_DONE;
}

static int stall_launch(tl_shard *s, void *arg)
{
	(void)arg;
	ST_CHECK(tl_shard_task_spawn(s, 1, hog_task, NULL, TOK_TASK) == 0);
	return 0;
}

static void stall_handler(tl_shard *s, const tl_completion *c)
{
	tl_loop *l = tl_shard_loop(s);
	tl_op op;

	if (c->kind == TL_K_MESH && c->token == TOK_TASK) {
		SL.ended = 1;
		/* Then a slow handler: that stall is the handlers'. */
		ST_CHECK(tl_timer_start(l, tl_now(l) + 1000000, 0, TOK_TIMER, &SL.timer, &op) == 0);
	} else if (c->kind == TL_K_TIMER) {
		burn(30 * 1000000ull);
		tl_shard_group_stats_get(s, 1, &SL.hog);
		tl_close(l, SL.timer, 0);
		tl_runtime_stop(tl_shard_runtime(s));
	}
}

/* The values of program family name, or -1. */
static int family_values(tl_stats_reader *r, const char *name, uint64_t *out, uint32_t rows)
{
	tl_stats_info in;
	tl_stats_family f;
	tl_stats_shard st;
	uint64_t vals[64];

	if (tl_stats_info_get(r, &in) < 0)
		return -1;
	for (uint32_t i = 0; i < in.families; i++) {
		if (tl_stats_family_get(r, i, &f) < 0 || strcmp(f.name, name) || f.rows != rows)
			continue;
		if (in.values > 64 || tl_stats_shard_get(r, 0, &st, vals, in.values) < 0)
			return -1;
		memcpy(out, vals + f.first, rows * sizeof *out);
		return 0;
	}
	return -1;
}

static void test_stall_names_group(void)
{
	static const char *const names[] = {"hog", NULL};
	static const uint32_t shares[] = {100};
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	uint64_t hog[4] = {0}, mainv[4] = {0};
	char buf[8192] = "";
	int fds = st_begin("sched/stall_names_group");
	FILE *tmp = tmpfile();
	int saved = dup(2);
	size_t n;

	memset(&SL, 0, sizeof SL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(tmp);
	st_config(&cfg, 1);
	cfg.stats = 1;
	cfg.stall_ns = 10 * 1000000ull;
	cfg.on_launch = stall_launch;
	cfg.on_completion = stall_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	CHECK_EQ(tl_runtime_run(rt), 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	/* The group's rows in the live stats, as tlshard reads them. */
	CHECK_EQ_FATAL(tl_stats_open(&r, getpid()), 0);
	CHECK_EQ(family_values(r, "sched.hog", hog, 4), 0);
	CHECK_EQ(family_values(r, "sched.main", mainv, 4), 0);
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	rewind(tmp);
	n = fread(buf, 1, sizeof buf - 1, tmp);
	buf[n] = '\0';
	fclose(tmp);
	fputs(buf, stderr);
	CHECK_EQ(SL.ended, 1);
	CHECK_TRUE(strstr(buf, "stall on shard 0") != NULL);
	CHECK_TRUE(strstr(buf, "in task group \"hog\"\n") != NULL);
	CHECK_TRUE(strstr(buf, "in handlers\n") != NULL);
	CHECK_EQ(SL.hog.stalls, 1);
	CHECK_TRUE(SL.hog.runtime_ns >= 30 * 1000000ull);
	CHECK_EQ(hog[0], SL.hog.runtime_ns); /* ns */
	CHECK_EQ(hog[1], 1);                 /* runs */
	CHECK_EQ(hog[2], 1);                 /* tasks */
	CHECK_EQ(hog[3], 1);                 /* stalls */
	CHECK_TRUE(mainv[3] >= 1);           /* the slow handler's */
	CHECK_TRUE(mainv[1] > 0 && mainv[0] >= 30 * 1000000ull);
	st_end(fds);
}

/* ---- full task tables, bad spawns ---- */

static struct full {
	uint32_t calls[4];
	int release;
	int rc_full, rc_main, rc_range, rc_null, rc_again, rc_none;
	int ended;
	int64_t results;
} FU;

static int wait_task(tl_shard *s, void *arg)
{
	uint32_t i = (uint32_t)(uintptr_t)arg;

	(void)s;
	FU.calls[i]++;
	/* Task 0 ends after 10 calls; the rest once released. */
	if (i == 0 ? FU.calls[0] >= 10 : FU.release)
		return TL_TASK_DONE;
	return TL_TASK_MORE;
}

static int full_launch(tl_shard *s, void *arg)
{
	(void)arg;
	for (uintptr_t i = 0; i < 3; i++)
		ST_CHECK(tl_shard_task_spawn(s, 1, wait_task, (void *)i, TOK_TASK) == 0);
	FU.rc_full = tl_shard_task_spawn(s, 1, wait_task, (void *)3, TOK_TASK);
	FU.rc_main = tl_shard_task_spawn(s, TL_SCHED_MAIN, wait_task, (void *)3, TOK_TASK);
	FU.rc_range = tl_shard_task_spawn(s, 2, wait_task, (void *)3, TOK_TASK);
	FU.rc_null = tl_shard_task_spawn(s, 1, NULL, NULL, TOK_TASK);
	return 0;
}

static void full_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || c->token != TOK_TASK)
		return;
	FU.results |= c->result;
	if (++FU.ended == 1) {
		/* Task 0's record is free again before this handler runs. */
		ST_CHECK(c->u.mesh.arg == (void *)0);
		FU.rc_again = tl_shard_task_spawn(s, 1, wait_task, (void *)3, TOK_TASK);
		FU.release = 1;
	}
	/* (A refused respawn leaves three to end: stop then, to fail fast.) */
	if (FU.ended == (FU.rc_again == 0 ? 4 : 3))
		tl_runtime_stop(tl_shard_runtime(s));
}

static int none_launch(tl_shard *s, void *arg)
{
	(void)arg;
	FU.rc_none = tl_shard_task_spawn(s, 1, wait_task, (void *)3, TOK_TASK);
	tl_runtime_stop(tl_shard_runtime(s));
	return 0;
}

static void test_full(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {100};
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("sched/full");

	memset(&FU, 0, sizeof FU);
	st_config(&cfg, 1);
	cfg.sched_tasks = 3;
	cfg.on_launch = full_launch;
	cfg.on_completion = full_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(FU.rc_full, -ENOBUFS);
	CHECK_EQ(FU.rc_main, -EINVAL);
	CHECK_EQ(FU.rc_range, -EINVAL);
	CHECK_EQ(FU.rc_null, -EINVAL);
	CHECK_EQ(FU.rc_again, 0);
	CHECK_EQ(FU.ended, 4);
	CHECK_EQ(FU.results, 0);
	CHECK_EQ(FU.calls[0], 10);

	/* No task records at all: every spawn is refused. */
	st_config(&cfg, 1);
	cfg.sched_tasks = 0;
	cfg.on_launch = none_launch;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(FU.rc_none, -ENOBUFS);
	st_end(fds);
}

/* ---- a stop ends every task with -ECANCELED; a drain lets them finish ---- */

struct job {
	uint32_t calls;
	uint32_t id;
};

static struct stop {
	uint32_t spawned, cancelled, other;
	uint32_t calls_min;
	int rc_after, rc_on_stop;
	uint32_t seen_mask;
	tl_group_stats gs;
} SP;

static int forever_task(tl_shard *s, void *arg)
{
	struct job *j = arg;

	j->calls++;
	if (j->calls == 20 && j->id == 0)
		tl_runtime_stop(tl_shard_runtime(s));
	return TL_TASK_MORE;
}

static int stop_launch(tl_shard *s, void *arg)
{
	(void)arg;
	for (uint32_t i = 0; i < 3; i++) {
		struct job *j = calloc(1, sizeof *j);

		j->id = i;
		ST_CHECK(tl_shard_task_spawn(s, 1, forever_task, j, TOK_TASK) == 0);
		SP.spawned++;
	}
	return 0;
}

static void stop_on_stop(tl_shard *s, void *arg)
{
	struct job *j = calloc(1, sizeof *j);

	(void)arg;
	j->id = 3;
	SP.rc_on_stop = tl_shard_task_spawn(s, 1, forever_task, j, TOK_TASK);
	if (SP.rc_on_stop == 0)
		SP.spawned++;
	else
		free(j);
}

static void stop_handler(tl_shard *s, const tl_completion *c)
{
	struct job *j = c->u.mesh.arg;

	if (c->kind != TL_K_MESH || c->token != TOK_TASK)
		return;
	if (c->result == -ECANCELED)
		SP.cancelled++;
	else
		SP.other++;
	SP.seen_mask |= 1u << j->id;
	if (j->id < 3 && (!SP.calls_min || j->calls < SP.calls_min))
		SP.calls_min = j->calls;
	free(j); /* the completion gives arg back */
	SP.rc_after = tl_shard_task_spawn(s, 1, forever_task, NULL, TOK_TASK);
	tl_shard_group_stats_get(s, 1, &SP.gs);
}

static void test_stop_cancels(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {100};
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("sched/stop_cancels");

	memset(&SP, 0, sizeof SP);
	st_config(&cfg, 1);
	cfg.on_launch = stop_launch;
	cfg.on_stop = stop_on_stop;
	cfg.on_completion = stop_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(SP.rc_on_stop, 0);
	CHECK_EQ(SP.spawned, 4);
	CHECK_EQ(SP.cancelled, 4);
	CHECK_EQ(SP.other, 0);
	CHECK_EQ(SP.seen_mask, 0xf);
	CHECK_TRUE(SP.calls_min >= 19, "a task had %u calls", SP.calls_min);
	CHECK_EQ(SP.rc_after, -EPIPE);
	CHECK_EQ(SP.gs.runnable, 0);
	CHECK_EQ(SP.gs.tasks, 4);
	st_end(fds);
}

static struct drain {
	uint32_t calls;
	int ended;
	int64_t result;
} DR;

/* 50 calls, each using its whole slice: one pass each at least. */
static int fifty_task(tl_shard *s, void *arg)
{
	(void)arg;
	do
		burn(2000);
	while (!tl_shard_should_yield(s));
	return ++DR.calls == 50 ? TL_TASK_DONE : TL_TASK_MORE;
}

static int drain_launch(tl_shard *s, void *arg)
{
	(void)arg;
	ST_CHECK(tl_shard_task_spawn(s, 1, fifty_task, NULL, TOK_TASK) == 0);
	/* The loop has nothing alive: only the task keeps the grace going. */
	tl_runtime_drain(tl_shard_runtime(s));
	return 0;
}

static void drain_handler(tl_shard *s, const tl_completion *c)
{
	(void)s;
	if (c->kind == TL_K_MESH && c->token == TOK_TASK) {
		DR.ended++;
		DR.result = c->result;
	}
}

static void test_drain_finishes(void)
{
	static const char *const names[] = {"bg", NULL};
	static const uint32_t shares[] = {100};
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("sched/drain_finishes");

	memset(&DR, 0, sizeof DR);
	st_config(&cfg, 1);
	cfg.on_launch = drain_launch;
	cfg.on_completion = drain_handler;
	rt = make(&cfg, names, shares);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
	CHECK_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CHECK_EQ(DR.ended, 1);
	CHECK_EQ(DR.result, 0);
	CHECK_EQ(DR.calls, 50);
	st_end(fds);
}

/* ---- declaring groups ---- */

static int noop_launch(tl_shard *s, void *arg)
{
	(void)arg;
	tl_runtime_stop(tl_shard_runtime(s));
	return 0;
}

static void test_groups(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	char name[8];
	int fds = st_begin("sched/groups");

	/* The config's fields are checked. */
	st_config(&cfg, 1);
	CHECK_EQ(cfg.sched_tasks, 64);
	CHECK_EQ(cfg.sched_shares, 1000);
	CHECK_EQ(cfg.sched_quantum_ns, 100000);
	cfg.sched_shares = 0;
	CHECK_EQ(tl_runtime_new(&rt, &cfg), -EINVAL);
	CHECK_TRUE(strstr(tl_error_detail(), "sched_shares") != NULL);
	st_config(&cfg, 1);
	cfg.sched_quantum_ns = 999;
	CHECK_EQ(tl_runtime_new(&rt, &cfg), -EINVAL);
	st_config(&cfg, 1);
	cfg.sched_tasks = 65537;
	CHECK_EQ(tl_runtime_new(&rt, &cfg), -EINVAL);

	st_config(&cfg, 1);
	cfg.on_launch = noop_launch;
	cfg.stats_values = 128;
	CHECK_EQ_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CHECK_EQ(tl_runtime_sched_group(NULL, "a", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, NULL, 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "a b", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "a.b", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "abcdefghijklmnopqrstuvwx", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "main", 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "a", 0), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "a", TL_SCHED_SHARES_MAX + 1), -EINVAL);
	CHECK_EQ(tl_runtime_sched_group(rt, "abcdefghijklmnopqrstuvw", TL_SCHED_SHARES_MAX), 1);
	CHECK_EQ(tl_runtime_sched_group(rt, "abcdefghijklmnopqrstuvw", 5), -EEXIST);
	/* A program family in the way ("sched.b-c" and "sched.b_c" read the
	 * same). */
	CHECK_TRUE(tl_runtime_counter(rt, "sched.b-c") >= 0);
	CHECK_EQ(tl_runtime_sched_group(rt, "b_c", 5), -EEXIST);
	for (int i = 2; i < (int)TL_SCHED_GROUPS; i++) {
		snprintf(name, sizeof name, "g%d", i);
		CHECK_EQ(tl_runtime_sched_group(rt, name, 1), i);
	}
	CHECK_EQ(tl_runtime_sched_group(rt, "more", 1), -ENOBUFS);
	CHECK_TRUE(strstr(tl_error_detail(), "groups at most") != NULL);
	CHECK_EQ(tl_runtime_run(rt), 0);
	CHECK_EQ(tl_runtime_sched_group(rt, "late", 1), -EINVAL);
	tl_runtime_destroy(rt);

	/* Too few value slots for the stats of a group and main's. */
	st_config(&cfg, 1);
	cfg.stats_values = 7;
	CHECK_EQ_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CHECK_EQ(tl_runtime_sched_group(rt, "a", 1), -ENOBUFS);
	CHECK_TRUE(strstr(tl_error_detail(), "stats_values") != NULL);
	tl_runtime_destroy(rt);
	st_end(fds);
}

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("sched", NULL, NULL);
	st_add(s, "yield_many", test_yield_many);
	st_add(s, "shares_groups", test_shares_groups);
	st_add(s, "shares_handlers", test_shares_handlers);
	st_add(s, "handlers_keep_turning", test_handlers_keep_turning);
	st_add(s, "stall_names_group", test_stall_names_group);
	st_add(s, "full", test_full);
	st_add(s, "stop_cancels", test_stop_cancels);
	st_add(s, "drain_finishes", test_drain_finishes);
	st_add(s, "groups", test_groups);
	return st_run();
}
