/* lib/pool/port.c: the loop's side of the pool: job records, the result port, the core's hooks, submission and reservations. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "pool_int.h"

/* ---- records and the core's hooks ---- */

static void job_free(struct tl_pool_loop *pl, struct tl_job *j)
{
	atomic_store_explicit(&j->state, TL_JOB_FREE, memory_order_relaxed);
	pl->free[pl->nfree++] = j->idx;
}

/* The terminal of a job a worker ran. */
static void deliver(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j)
{
	struct tl_opslot *o = &l->o[j->op_idx];
	int cancelled = (o->flags & TL_OPF_CANCEL) != 0;
	pl->st.queue_wait_ns += j->t_start - j->t_submit;
	pl->st.run_ns += j->t_end - j->t_start;
	pl->st.completed++;
	pl->st.cancelled += (uint64_t)cancelled;
	tl_completion *c = tl__op_finish(l, o, j->res, TL_F_TERMINAL);
	c->aux = j->aux;
	c->u.pool.value = j->value;
	c->u.pool.ptr = j->ptr;
	if (j->ops->deliver)
		j->ops->deliver(j, c, cancelled);
}

static uint32_t hook_drain(tl_loop *l, uint32_t budget)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_port *pt = pl->port;
	uint32_t n = 0, idx;
	while (n < budget && tl__mpsc_pop(&pt->ring, &idx, sizeof idx)) {
		struct tl_job *j = &pt->jobs[idx];
		n++;
		/* The pop's acquire orders everything the worker wrote. */
		if (atomic_load_explicit(&j->state, memory_order_relaxed) == TL_JOB_DONE)
			deliver(l, pl, j);
		job_free(pl, j);
	}
	return n;
}

static int hook_ready(tl_loop *l)
{
	struct tl_pool_loop *pl = l->pool;
	return tl__mpsc_ready(&pl->port->ring);
}

static void hook_cancel(tl_loop *l, struct tl_opslot *o)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_job *j = o->u.pool.job;
	uint32_t st = TL_JOB_QUEUED;
	if (atomic_compare_exchange_strong_explicit(&j->state, &st, TL_JOB_CANCELLED,
						    memory_order_acq_rel, memory_order_acquire)) {
		/* Not started and now it never will: the terminal is due now,
		 * the record comes back when a worker discards it. */
		pl->st.completed++;
		pl->st.cancelled++;
		tl_completion *c = tl__op_finish(l, o, -ECANCELED, TL_F_TERMINAL);
		c->aux = j->aux;
		c->u.pool.value = (uint64_t)(int64_t)-ECANCELED;
		c->u.pool.ptr = j->ptr;
		return;
	}
	if (st == TL_JOB_NATIVE) {
		/* In the driver's hands: ask it; the terminal comes from the
		 * driver once it lets go of the record's memory. A refusal
		 * leaves the job running to its own end, and the core still
		 * reports -ECANCELED for it. */
		(void)l->dv->cancel(l->d, NULL, o);
		return;
	}
	/* Running (or done, with the result on its way): the core turns the
	 * terminal into -ECANCELED; the job may look at its flag. */
	atomic_store_explicit(&j->cancel, 1, memory_order_release);
}

/* ---- jobs the driver runs (job.h) ---- */

/* The driver reported the terminal of a job it ran (tl__drv_event): fill
 * the completion exactly as deliver() does for a worker's result, and give
 * the record back at once, since no worker or ring ever saw it. */
static void hook_native(tl_loop *l, struct tl_opslot *o, tl_completion *c, int64_t res)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_job *j = o->u.pool.job;
	int cancelled = (o->flags & TL_OPF_CANCEL) != 0;
	if (j->rsv >= 0) {
		tl__pool_unreserve(j->rsv);
		j->rsv = -1;
	}
	if (j->ops->native_result) {
		j->ops->native_result(j, res);
	} else {
		j->res = res;
		j->value = (uint64_t)res;
	}
	j->t_end = tl__os_mono_ns();
	pl->st.completed++;
	pl->st.cancelled += (uint64_t)cancelled;
	c->aux = j->aux;
	c->u.pool.value = j->value;
	c->u.pool.ptr = j->ptr;
	if (j->ops->deliver)
		j->ops->deliver(j, c, cancelled);
	job_free(pl, j);
}

static int hook_native_retry(tl_loop *l, struct tl_opslot *o, int64_t res)
{
	struct tl_job *j = o->u.pool.job;
	return j->ops->native_retry && j->ops->native_retry(l, o, j, res);
}

void tl__pool_requeue(tl_loop *l, struct tl_job *j)
{
	struct tl_pool_loop *pl = l->pool;
	int set = j->rsv;
	j->rsv = -1;
	j->t_submit = j->t_start = j->t_end = tl__os_mono_ns();
	atomic_store_explicit(&j->state, TL_JOB_QUEUED, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->poster->refs, 1, memory_order_relaxed);
	/* Cannot fail: the reservation holds the queue slot. */
	(void)tl__pool_bounded_submit(pl->pool, pl->set, j, set);
}

int tl__pool_native_begin(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j, uint8_t kind,
			  uint64_t token, struct tl_opslot **out)
{
	struct tl_opslot *o;
	int r = tl__op_new(l, NULL, TL_OP_POOL, kind, token, &o);
	if (r < 0) {
		if (j->rsv >= 0)
			tl__pool_unreserve(j->rsv);
		job_free(pl, j);
		pl->st.refused++;
		return r;
	}
	j->op_idx = o->idx;
	j->op_gen = o->gen;
	j->cls = TL_POOL_BOUNDED;
	j->t_submit = j->t_start = j->t_end = tl__os_mono_ns();
	o->u.pool.job = j;
	atomic_store_explicit(&j->state, TL_JOB_NATIVE, memory_order_relaxed);
	*out = o;
	return 0;
}

int tl__pool_native_end(struct tl_pool_loop *pl, struct tl_job *j, int r)
{
	if (r == 0) {
		pl->st.submitted++;
		return 0;
	}
	if (j->rsv >= 0)
		tl__pool_unreserve(j->rsv);
	j->rsv = -1;
	if (r == -ENOTSUP) {
		/* Still the caller's, for the pool path. */
		atomic_store_explicit(&j->state, TL_JOB_FREE, memory_order_relaxed);
		return r;
	}
	job_free(pl, j);
	pl->st.refused += (uint64_t)(r == -ENOBUFS);
	return r;
}

/* ---- the port's end ---- */

/* Pop one undelivered result and drop it (tl_job_ops.discard): its job
 * index, or UINT32_MAX when the ring is empty. */
static uint32_t port_discard_one(struct tl_port *pt)
{
	uint32_t idx;
	if (!tl__mpsc_pop(&pt->ring, &idx, sizeof idx))
		return UINT32_MAX;
	struct tl_job *j = &pt->jobs[idx];
	if (atomic_load_explicit(&j->state, memory_order_relaxed) == TL_JOB_DONE &&
	    j->ops->discard)
		j->ops->discard(j);
	return idx;
}

static void hook_detach(tl_loop *l)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_port *pt = pl->port;
	/* tl_loop_destroy has cancelled every op (so nothing is QUEUED any
	 * more) and closed the poster, which running jobs see through
	 * tl_pool_cancelled. Results of finished jobs still in the ring are
	 * dropped now, so that what they made (a descriptor) goes at once. */
	uint32_t idx;
	while ((idx = port_discard_one(pt)) != UINT32_MAX)
		job_free(pl, &pt->jobs[idx]);
	for (uint32_t i = 0; i < pt->njobs; i++) {
		struct tl_job *j = &pt->jobs[i];
		uint32_t st = TL_JOB_QUEUED;
		atomic_compare_exchange_strong(&j->state, &st, TL_JOB_CANCELLED);
		if (st != TL_JOB_FREE)
			atomic_store_explicit(&j->cancel, 1, memory_order_release);
	}
	/* Jobs that use the caller's memory must be done with it before
	 * tl_loop_destroy returns (contract 1.9). */
	for (uint32_t i = 0; i < pt->njobs; i++) {
		struct tl_job *j = &pt->jobs[i];
		while (j->user_mem &&
		       atomic_load_explicit(&j->state, memory_order_acquire) == TL_JOB_RUNNING)
			tl__os_sleep_us(100);
	}
	tl__pool_detach(pl->pool);
	l->pool = NULL;
	l->pool_drain = NULL;
	l->pool_ready = NULL;
	l->pool_cancel = NULL;
	l->pool_detach = NULL;
	l->pool_native = NULL;
	l->pool_native_retry = NULL;
	free(pl->free);
	free(pl);
}

/* Runs on whichever thread drops the poster's last reference: the loop is
 * gone and so is every worker's interest in the port. */
static void port_free(struct tl_poster *p)
{
	struct tl_port *pt = p->port;
	while (port_discard_one(pt) != UINT32_MAX)
		;
	tl__mpsc_free(&pt->ring);
	free(pt->jobs);
	free(pt);
	p->port = NULL;
}

static uint32_t auto_set(struct tl_pool *p)
{
	int cpu = tl__os_cpu();
	if (cpu >= 0 && (uint32_t)cpu < p->ncpu && p->cpu2set[cpu] >= 0)
		return (uint32_t)p->cpu2set[cpu];
	return 0;
}

int tl__pool_loop_setup(tl_loop *l, struct tl_pool_loop **out)
{
	if (tl_likely(l->pool != NULL)) {
		*out = l->pool;
		return 0;
	}
	uint32_t n = l->cfg.max_undelivered;
	struct tl_pool_loop *pl = calloc(1, sizeof *pl);
	struct tl_port *pt = calloc(1, sizeof *pt);
	if (pl)
		pl->free = malloc(n * sizeof *pl->free);
	if (pt)
		pt->jobs = calloc(n, sizeof *pt->jobs);
	if (!pl || !pt || !pl->free || !pt->jobs || tl__mpsc_init(&pt->ring, n) < 0) {
		if (pt)
			free(pt->jobs);
		if (pl)
			free(pl->free);
		free(pl);
		free(pt);
		return -ENOMEM;
	}
	pt->njobs = n;
	pt->poster = l->poster;
	for (uint32_t i = 0; i < n; i++) {
		pt->jobs[i].idx = i;
		pt->jobs[i].port = pt;
		atomic_init(&pt->jobs[i].state, TL_JOB_FREE);
		atomic_init(&pt->jobs[i].cancel, 0);
		pl->free[i] = n - 1 - i; /* low indices first */
	}
	pl->nfree = n;
	pl->port = pt;
	struct tl_pool *p;
	int r = tl__pool_attach(&p);
	if (r < 0) {
		tl__mpsc_free(&pt->ring);
		free(pt->jobs);
		free(pt);
		free(pl->free);
		free(pl);
		return r;
	}
	pl->pool = p;
	pl->set = auto_set(p);
	l->poster->port = pt;
	l->poster->on_last_put = port_free;
	l->pool = pl;
	l->pool_drain = hook_drain;
	l->pool_ready = hook_ready;
	l->pool_cancel = hook_cancel;
	l->pool_detach = hook_detach;
	l->pool_native = hook_native;
	l->pool_native_retry = hook_native_retry;
	*out = pl;
	return 0;
}

int tl_pool_loop_node(tl_loop *l, int node)
{
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	if (node == -1) {
		pl->set = auto_set(pl->pool);
		pl->node_pinned = 0;
		return 0;
	}
	for (uint32_t i = 0; i < pl->pool->nsets; i++)
		if (pl->pool->sets[i].node == node) {
			pl->set = i;
			pl->node_pinned = 1;
			return 0;
		}
	return -EINVAL;
}

struct tl_job *tl__pool_job_new(tl_loop *l, struct tl_pool_loop *pl)
{
	(void)l;
	if (tl_unlikely(!pl->nfree)) {
		pl->st.refused++;
		return NULL;
	}
	struct tl_job *j = &pl->port->jobs[pl->free[--pl->nfree]];
	atomic_store_explicit(&j->cancel, 0, memory_order_relaxed);
	j->user_mem = 0;
	j->aux = 0;
	j->rsv = -1;
	j->ptr = NULL;
	j->res = 0;
	j->value = 0;
	return j;
}

int tl__pool_submit(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j, int cls,
		    uint8_t kind, uint64_t token, int reserved_set, tl_op *op)
{
	struct tl_opslot *o;
	int r = tl__op_new(l, NULL, TL_OP_POOL, kind, token, &o);
	if (r < 0) {
		job_free(pl, j);
		pl->st.refused++;
		return r;
	}
	j->op_idx = o->idx;
	j->op_gen = o->gen;
	j->cls = (uint8_t)cls;
	j->t_submit = tl__os_mono_ns();
	j->t_start = j->t_end = j->t_submit;
	o->u.pool.job = j;
	atomic_store_explicit(&j->state, TL_JOB_QUEUED, memory_order_relaxed);
	/* The job's own reference keeps the port alive for the worker. */
	atomic_fetch_add_explicit(&l->poster->refs, 1, memory_order_relaxed);
	if (cls == TL_POOL_LONG)
		r = tl__pool_long_submit(pl->pool, pl->set, j);
	else
		r = tl__pool_bounded_submit(pl->pool, pl->set, j, reserved_set);
	if (r < 0) {
		/* Never the last reference: the loop holds one. */
		atomic_fetch_sub_explicit(&l->poster->refs, 1, memory_order_relaxed);
		job_free(pl, j);
		tl__op_refuse(l, o);
		pl->st.refused += (uint64_t)(r == -ENOBUFS);
		return r;
	}
	pl->st.submitted++;
	*op = tl__op_id(l, o);
	return 0;
}

/* ---- tl_blocking's kind ---- */

struct blocking_job {
	tl_job_fn fn;
	void *arg;
};
_Static_assert(sizeof(struct blocking_job) <= sizeof(((struct tl_job *)0)->data),
	       "blocking_job fits");

static void blocking_run(struct tl_job *j)
{
	struct blocking_job *b = (struct blocking_job *)j->data;
	int64_t r = b->fn(b->arg, (tl_cancel_flag *)j);
	j->res = r;
	j->value = (uint64_t)r;
}

static const struct tl_job_ops blocking_ops = {
	.run = blocking_run,
};

void tl__pool_job_blocking(struct tl_job *j, tl_job_fn fn, void *arg, int cls)
{
	struct blocking_job *b = (struct blocking_job *)j->data;
	j->ops = &blocking_ops;
	j->aux = (uint8_t)cls;
	b->fn = fn;
	b->arg = arg;
}

int tl_blocking(tl_loop *l, tl_job_fn fn, void *arg, int cls, uint64_t token, tl_op *op)
{
	if (!fn || !op || (cls != TL_POOL_BOUNDED && cls != TL_POOL_LONG))
		return -EINVAL;
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_job *j = tl__pool_job_new(l, pl);
	if (!j)
		return -ENOBUFS;
	tl__pool_job_blocking(j, fn, arg, cls);
	return tl__pool_submit(l, pl, j, cls, TL_K_POOL, token, -1, op);
}

/* ---- reservations ---- */

int tl__pool_reserve(tl_loop *l)
{
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_bset *s = &pl->pool->sets[pl->set];
	if (!tl__pool_admit(s)) {
		pl->st.refused++;
		return -ENOBUFS;
	}
	atomic_fetch_add_explicit(&s->reserved, 1, memory_order_relaxed);
	return (int)pl->set;
}

void tl__pool_unreserve(int set)
{
	/* A loop holding a reservation is attached: the pool cannot go. */
	struct tl_bset *s = &tl__pool_get()->sets[set];
	atomic_fetch_sub_explicit(&s->reserved, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->used, 1, memory_order_relaxed);
}

int tl__pool_loop_gone(const struct tl_job *j)
{
	return atomic_load(&j->port->poster->closed) != 0;
}

void tl_pool_loop_stats_get(const tl_loop *l, tl_pool_loop_stats *out)
{
	const struct tl_pool_loop *pl = l->pool;
	if (!pl) {
		memset(out, 0, sizeof *out);
		out->node = -1;
		return;
	}
	*out = pl->st;
	out->node = pl->pool->sets[pl->set].node;
	out->in_flight = pl->port->njobs - pl->nfree;
}

