/* shards/shard.c: a shard's thread (contract 9.2-9.6): setup (binding, arena, loop), the pass (turn, handlers, mesh, on_pass, tasks, batches, publish, stall check), the phases of a stop (run, grace, drain, wait), the last mesh delivery and teardown. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime_int.h"
#include "turnloop/error.h"

static uint32_t nhandles(tl_shard *s)
{
	tl_loop_stats st;
	tl_loop_stats_get(s->loop, &st);
	return st.handles;
}

static void close_all(tl_shard *s)
{
	tl_close_all(s->loop, TL_RT_CLOSE_TOKEN);
	s->last_nhandles = nhandles(s);
}

/* One pass: turn, hand out completions, run arrived messages, let the
 * program poll, run tasks (sched.c), publish the mesh, account. Returns
 * the turn's error. */
static int pass(tl_shard *s, int64_t timeout)
{
	tl_runtime *rt = s->rt;
	tl_loop *l = s->loop;
	/* A pass starts where the previous one ended (what happens between
	 * two passes is the runtime's own work): one clock read per pass. */
	uint64_t t0 = s->pass_end, t1, busy, mesh_in = s->st.mesh_in;
	struct tl__pass_marks pm = {0};
	tl_turn_info ti;
	int n, rc = 0, more;

	ti.idle_ns = 0;
	ti.waited_ns = 0;
	n = tl_turn(l, timeout, s->batch, rt->cfg.batch, &ti);
	if (n < 0) {
		if (n != -EINTR)
			rc = n;
		n = 0;
	}
	pm.turn_end = t0 + ti.waited_ns;
	pm.turn_ns = ti.waited_ns - ti.idle_ns;
	s->bat_n = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		s->bat_i = (uint32_t)i;
		tl__rt_dispatch(s, &s->batch[i]);
	}
	s->bat_n = 0;
	/* Coarse marks, and only after a part that did something: they name
	 * where a stall went (sched.c) and cost a few ns. */
	if (n)
		pm.handlers_end = tl__os_coarse_ns();
	more = tl__mesh_receive(s, rt->cfg.mesh_budget);
	/* Messages came: a polling window (mesh_spin) starts afresh. */
	s->mesh_got = s->st.mesh_in != mesh_in;
	if (s->mesh_got)
		s->spin_until = 0;
	if (s->gates_due)
		tl__mesh_gates_due(s);
	if (s->nroom_wait || s->nbacklog)
		tl__mesh_room_check(s, 0);
	if (s->st.mesh_in != mesh_in)
		pm.mesh_end = tl__os_coarse_ns();
	if (rt->cfg.on_pass) {
		more |= rt->cfg.on_pass(s, rt->cfg.arg) != 0;
		pm.on_pass_end = tl__os_coarse_ns();
	}
	if (s->tasks)
		more |= tl__sched_run(s, t0, ti.idle_ns, n || more || s->st.mesh_in != mesh_in);
	if (s->batchers || s->gwait)
		tl__mesh_batches_flush(s);
	if (s->nfdirty)
		tl__foreign_flush(s);
	tl__mesh_flush(s);
	s->pass_busy = more;

	t1 = tl__os_mono_ns();
	s->pass_end = t1;
	busy = t1 - t0;
	busy = busy > ti.idle_ns ? busy - ti.idle_ns : 0;
	tl__rt_account_pass(s, busy);
	tl__sched_pass_end(s, busy, &pm); /* and the stall detector */
	if (t1 - s->last_pub >= rt->cfg.stats_period_ns)
		tl__rt_publish(s, t1);
	return rc;
}

/* Work is waiting that must not wait for an OS event. Also arms the
 * room wakes, so that it is safe to park when it says 0. */
static int has_work(tl_shard *s)
{
	return s->pass_busy || s->tasks || s->gates_due || tl__mesh_inbound_ready(s) ||
	       tl__mesh_room_check(s, 1);
}

/*
 * cfg.mesh_spin_ns: nothing to do, but a result is awaited or messages
 * came in the last pass, so more are likely soon: poll (passes that do
 * not block) instead of parking, for up to mesh_spin_ns from the first
 * pass that found nothing. Polling, this shard is not parked, so a sender
 * neither makes a system call to wake it nor waits for it to be
 * scheduled. 1 while the window lasts; 0 to park.
 */
static int mesh_spin(tl_shard *s)
{
	uint64_t win = s->spin_ns;

	if (!win)
		return 0;
	if (!s->spin_until) {
		if (!s->inflight_total && !s->mesh_got)
			return 0;
		s->spin_until = s->pass_end + win;
		return 1;
	}
	if (s->pass_end < s->spin_until)
		return 1;
	s->spin_until = 0; /* used up: park; the next message starts another */
	s->mesh_got = 0;
	return 0;
}

/* Nothing left in the loop: no live handle, op or queued completion. */
static int loop_empty(tl_shard *s)
{
	tl_loop_stats st;
	tl_loop_stats_get(s->loop, &st);
	return !tl_alive(s->loop) && !st.handles && !st.queued;
}

static int drained(tl_shard *s)
{
	return loop_empty(s) && !s->ndirty && !s->nbacklog && !s->inflight_total;
}

/* A graceful drain begins: listeners go, the program is told, its
 * connections may finish until the loop is no longer alive or grace_ns. */
static void begin_grace(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->phase = PH_GRACE;
	tl__rt_set_state(rt, TL_STATS_STOPPING);
	tl_close_listeners(s->loop, TL_RT_CLOSE_TOKEN);
	if (rt->cfg.on_drain)
		rt->cfg.on_drain(s, rt->cfg.arg);
	s->drain_deadline = tl__os_mono_ns() + rt->cfg.grace_ns;
}

/* The stop begins (a hard stop, or the end of the grace period): the
 * program is told, the runtime closes what is still open. */
static void begin_drain(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->phase = PH_DRAIN;
	tl__rt_set_state(rt, TL_STATS_STOPPING);
	if (rt->cfg.on_stop)
		rt->cfg.on_stop(s, rt->cfg.arg);
	tl__sched_stop(s);
	close_all(s);
	s->drain_deadline = tl__os_mono_ns() + rt->cfg.drain_ns;
}

/* The last phase, once every shard has drained: close the mesh, wait until
 * no shard can send any more, deliver what is still in the inbound rings,
 * finish the loop. */
static void finish(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	uint64_t dl;

	if (s->nfdirty) /* blocks freed for their owners go while the mesh is open */
		tl__foreign_flush(s);
	tl__mesh_close(s);
	tl__os_barrier_wait(&rt->barrier);
	s->pass_end = tl__os_mono_ns(); /* waiting for the others is no stall */
	while (tl__mesh_receive(s, UINT32_MAX))
		;
	/* Once every shard has run what was sent to it, no function of a
	 * gather still in flight can run any more: end those gathers, so
	 * that their callers may free them. */
	tl__os_barrier_wait(&rt->barrier);
	tl__mesh_end_gathers(s);
	close_all(s);
	dl = tl__os_mono_ns() + rt->cfg.drain_ns;
	while (!loop_empty(s) && tl__os_mono_ns() < dl) {
		if (pass(s, 10 * 1000000) < 0)
			break;
		if (nhandles(s) > s->last_nhandles)
			close_all(s);
		s->last_nhandles = nhandles(s);
	}
	while (s->gates_due) /* gates closed by the last handlers */
		tl__mesh_gates_due(s);
	tl__foreign_finish(s);
	tl__rt_publish(s, tl__os_mono_ns());
}

static void shard_run(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	int rc;

	if (rt->cfg.on_launch) {
		rc = rt->cfg.on_launch(s, rt->cfg.arg);
		if (rc < 0) {
			tl__rt_fail(rt, rc, "shard %u (cpu %d) failed to launch: on_launch returned %s",
				    s->id, rt->plan.shards[s->id].pu_os_index, tl_strerror(rc));
			tl_runtime_stop(rt);
		}
	}
	if (s->batchers || s->gwait)
		tl__mesh_batches_flush(s);
	tl__mesh_flush(s);
	tl__rt_publish(s, tl__os_mono_ns());
	/* The first turn must not park: on_pass has not run yet. */
	s->pass_busy = 1;
	s->pass_end = tl__os_mono_ns();
	for (;;) {
		int64_t timeout = -1;

		if (s->phase == PH_RUN && atomic_load_explicit(&rt->drain, memory_order_acquire) &&
		    !atomic_load_explicit(&rt->stop, memory_order_acquire))
			begin_grace(s);
		if (s->phase == PH_GRACE) {
			uint64_t now = tl__os_mono_ns();

			if (atomic_load_explicit(&rt->stop, memory_order_acquire) ||
			    (!tl_alive(s->loop) && !has_work(s)) || now >= s->drain_deadline)
				begin_drain(s);
			else
				timeout = (int64_t)(s->drain_deadline - now);
		}
		if (s->phase == PH_RUN && atomic_load_explicit(&rt->stop, memory_order_acquire))
			begin_drain(s);
		if (s->phase == PH_DRAIN) {
			uint64_t now = tl__os_mono_ns();

			if (nhandles(s) > s->last_nhandles)
				close_all(s);
			s->last_nhandles = nhandles(s);
			if (drained(s) || now >= s->drain_deadline) {
				s->phase = PH_WAIT;
				if (atomic_fetch_add(&rt->ndone, 1) + 1 == rt->n)
					tl__rt_wake_all(rt);
			} else {
				timeout = (int64_t)(s->drain_deadline - now);
			}
		}
		if (s->phase == PH_WAIT && atomic_load(&rt->ndone) == rt->n)
			break;
		if (has_work(s))
			timeout = 0;
		else if (timeout != 0 && mesh_spin(s))
			timeout = 0;
		else if (timeout != 0)
			tl__rt_publish(s, s->pass_end); /* about to park: leave fresh numbers */
		rc = pass(s, timeout);
		if (rc < 0) {
			tl__rt_fail(rt, rc, "shard %u (cpu %d): turn failed: %s", s->id,
				    rt->plan.shards[s->id].pu_os_index, tl_strerror(rc));
			tl_runtime_stop(rt);
			if (s->phase == PH_DRAIN)
				s->drain_deadline = 0;
		}
	}
	finish(s);
}

static int shard_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	const tl_shard_place *p = &rt->plan.shards[s->id];
	char name[16];
	int rc;

	snprintf(name, sizeof name, "tl-shard-%u", s->id);
	tl__os_thread_name(name);
	if (rt->cfg.bind) {
		rc = tl_plan_bind_thread(&rt->plan, s->id);
		if (rc < 0) {
			tl__rt_fail(rt, rc, "shard %u cannot bind to cpu %d (numa %d): %s", s->id,
				    p->pu_os_index, p->numa_node, tl_strerror(rc));
			return rc;
		}
	}
	/* Polling for replies on a CPU that another shard shares (a plan
	 * with more shards than CPUs) would keep it from the shard whose
	 * reply this one waits for. */
	s->spin_ns = rt->cfg.mesh_spin_ns;
	for (uint32_t j = 0; j < rt->n; j++)
		if (j != s->id && rt->plan.shards[j].pu_os_index == p->pu_os_index)
			s->spin_ns = 0;
	/* After the binding, so that the arena's first pages are touched
	 * on the shard's node. */
	tl__rt_arena_setup(s);
	s->st.tid = (int32_t)tl__os_tid();
	s->batch = malloc((size_t)rt->cfg.batch * sizeof *s->batch);
	/* The families are final now (declared before start); the values are
	 * this thread's own, on its node. */
	s->nvals = rt->nvals;
	s->vals = calloc(s->nvals ? s->nvals : 1, sizeof *s->vals);
	if (!s->batch || !s->vals || tl__mesh_setup(s) < 0 || tl__sched_setup(s) < 0 ||
	    tl__foreign_setup(s) < 0)
		goto nomem;
	rc = tl_loop_new(&s->loop, &rt->cfg.loop);
	if (rc < 0) {
		tl_driver_info di;
		tl_driver_info_get(&di);
		tl__rt_fail(rt, rc, "shard %u (cpu %d) cannot create its loop: %s%s%s", s->id,
			    p->pu_os_index, tl_strerror(rc), di.last_error[0] ? ": " : "",
			    di.last_error);
		return rc;
	}
	if (!(tl_loop_caps(s->loop) & TL_CAP_NET)) {
		/* A server on the simulation driver would listen where nobody
		 * can reach it. */
		tl__rt_fail(rt, -ENOTSUP,
			    "shard %u: the %s driver reaches no network "
			    "(it runs tests, not servers)", s->id, tl_loop_driver(s->loop));
		return -ENOTSUP;
	}
	s->poster = tl_poster_get(s->loop);
	if (s->id == 0 && rt->hdr)
		snprintf(rt->hdr->driver, sizeof rt->hdr->driver, "%s", tl_loop_driver(s->loop));
	return 0;
nomem:
	tl__rt_fail(rt, -ENOMEM, "shard %u (cpu %d): out of memory at setup", s->id,
		    p->pu_os_index);
	return -ENOMEM;
}

static void shard_teardown(tl_shard *s)
{
	if (s->loop) {
		if (tl_loop_close(s->loop) < 0)
			tl_loop_destroy(s->loop);
		s->loop = NULL;
	}
	tl__mesh_teardown(s);
	tl__sched_teardown(s);
	free(s->batch);
	free(s->vals);
	s->batch = NULL;
	s->vals = NULL;
}

TL__OS_THREAD_FN tl__shard_main(void *arg)
{
	tl_shard *s = arg;
	tl_runtime *rt = s->rt;
	int rc = shard_setup(s), go;

	tl__os_mutex_lock(&rt->mu);
	s->setup_rc = rc;
	rt->nready++;
	tl__os_cond_broadcast(&rt->cv);
	while (!rt->go)
		tl__os_cond_wait(&rt->cv, &rt->mu);
	go = rt->go;
	tl__os_mutex_unlock(&rt->mu);
	if (rc == 0 && go > 0)
		shard_run(s);
	shard_teardown(s);
	return 0;
}
