/* lib/pool/workers.c: the pool's two worker classes: bounded workers (queue, spinning, parking) and long workers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "pool_int.h"

/*
 * Bounded class: each set's queue is a bounded lock-free MPMC ring of job
 * pointers (queue.h), and admission is a separate counter `used` = queued +
 * reserved, so that reservations and the exact configured capacity (not the
 * ring's power of two) are honoured. Workers park on a futex; a submitter
 * pays the wake system call only when a worker is parked, none is spinning
 * and no wake is already on its way (see wake()), and at most one worker per
 * set spins (briefly) before parking: a loop that submits the next job right
 * after the previous result finds a worker awake. That is what makes the
 * pool cheaper than a mutex-and-condition-variable pool, which signals once
 * per job.
 *
 * Long class: no queue at all. Parked long workers wait on their own
 * condition variable in a per-node idle list; a submission hands its job to
 * one of them (preferring the loop's node), or starts a thread, or is
 * refused at the ceiling. Everything in the class is under one mutex: it is
 * off the fast path by nature (a long job holds its thread for a long time).
 */

/* Spinning (search()): pause-spin this many looks, then yield between looks;
 * a yield that lasted this long means the CPU was wanted elsewhere, and
 * spinning stays off for the back-off time. */
#define SPIN_PAUSES 256u
#define SPIN_PREEMPTED_NS 5000u
#define SPIN_BACKOFF_NS 2000000u

/* The futex (WaitOnAddress on Windows: lib/shared/os.h). */
static void futex_wait(_Atomic uint32_t *f, uint32_t v)
{
	tl__os_addr_wait(f, v);
}

static void futex_wake(_Atomic uint32_t *f, int all)
{
	tl__os_addr_wake(f, all);
}

/* ---- running one job (both classes) ---- */

/*
 * Claim the job, run it and hand its record back through the port. Exactly
 * one index is pushed per record taken from the queue or handed over, which
 * is what keeps every accepted job at exactly one result. Nothing of the
 * record is touched after the push: the loop may reuse it at once.
 */
static void run_job(struct tl_job *j)
{
	struct tl_port *pt = j->port;
	struct tl_poster *p = pt->poster;
	uint32_t idx = j->idx;
	uint32_t st = TL_JOB_QUEUED;
	/* A loop being destroyed closes its poster before it cancels its ops
	 * one by one: a job of that loop not started yet never starts. */
	uint32_t to = atomic_load_explicit(&p->closed, memory_order_acquire) ? TL_JOB_CANCELLED
									     : TL_JOB_RUNNING;
	if (atomic_compare_exchange_strong_explicit(&j->state, &st, to, memory_order_acq_rel,
						    memory_order_acquire) &&
	    to == TL_JOB_RUNNING) {
		j->t_start = tl__os_mono_ns();
		j->ops->run(j);
		j->t_end = tl__os_mono_ns();
		/* Release: a loop being destroyed waits for this before it lets
		 * the caller reuse memory the request used. */
		atomic_store_explicit(&j->state, TL_JOB_DONE, memory_order_release);
	}
	/* else the loop cancelled it before it started and has already
	 * finished the op: just give the record back. */
	if (tl__mpsc_push(&pt->ring, &idx, sizeof idx) < 0)
		abort(); /* the ring holds every record: cannot happen */
	tl_poster_wake(p);
	tl_poster_put(p);
}

int tl_pool_cancelled(const tl_cancel_flag *c)
{
	const struct tl_job *j = (const struct tl_job *)c;
	return atomic_load_explicit(&j->cancel, memory_order_acquire) ||
	       atomic_load_explicit(&j->port->poster->closed, memory_order_acquire);
}

void tl_pool_set_ptr(tl_cancel_flag *c, void *ptr)
{
	((struct tl_job *)c)->ptr = ptr;
}

/* ---- bounded workers ---- */

static void bind_set(struct tl_pool *p, uint32_t set)
{
	/* A failed binding (a cpuset changed under us) leaves the thread
	 * unbound: slower, never wrong. */
	if (p->bind)
		(void)tl__topo_bind(p->topo, p->sets[set].cpus);
}

/*
 * Waking, in one place. Three counters decide it, and every job pushed is
 * found by some worker (the proof is in the comments of park() and wake()):
 *
 *  - idle: workers in park() (about to sleep, asleep, or just woken);
 *  - spinning: 1 while one worker polls the queue (search());
 *  - wake_pending: 1 from a wake until some worker comes looking.
 *
 * A submitter pays the futex system call only if a worker is parked, none is
 * spinning, and no wake is already on its way: at most one wake is in flight
 * per set, so a burst of submissions costs one system call, not one each,
 * and the woken worker ramps up the next (search()) if the burst needs it.
 */
static void wake(struct tl_bset *s)
{
	/* An exchange, not a load: whoever consumes this flag next (an RMW)
	 * acquires from it and so sees the job pushed before it. */
	if (atomic_exchange(&s->wake_pending, 1))
		return;
	atomic_fetch_add_explicit(&s->futex, 1, memory_order_seq_cst);
	futex_wake(&s->futex, 0);
}

/*
 * Poll the queue for a while before sleeping, at most one worker per set at a
 * time (more spinners would only steal CPUs from the loops): a loop that
 * submits its next job right after a result finds a worker awake, with no
 * system call on either side. A spinner that finds work stops spinning, and
 * if more work waits and someone sleeps, it wakes one: submitters skip the
 * wake while a spinner exists, so this is what keeps a burst from sitting
 * behind one worker.
 */
static struct tl_job *search(struct tl_bset *s)
{
	struct tl_pool *p = s->pool;
	uint32_t zero = 0;
	if (!p->spin_ns || atomic_load_explicit(&s->spinning, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong(&s->spinning, &zero, 1))
		return NULL;
	struct tl_job *j = NULL;
	uint64_t t0 = tl__os_mono_ns();
	if (t0 < atomic_load_explicit(&s->spin_off_until, memory_order_relaxed)) {
		atomic_store(&s->spinning, 0);
		return NULL;
	}
	for (uint32_t i = 1;; i++) {
		if (tl__jq_nonempty(&s->q) && (j = tl__jq_pop(&s->q)))
			break;
		if (i & 15) {
			tl__cpu_relax();
			continue;
		}
		uint64_t t = tl__os_mono_ns();
		if (t - t0 > p->spin_ns || atomic_load_explicit(&p->stopping, memory_order_relaxed))
			break;
		/*
		 * After a short pure spin, yield between looks: on a busy machine
		 * the CPU goes to whoever needs it (often the very loop that is
		 * about to submit), and a yield that took long says somebody
		 * did. Then spinning only steals CPU time: stop, and leave it off
		 * for a while (the pool then behaves like a sleeping pool).
		 */
		if (i >= SPIN_PAUSES) {
			tl__os_yield();
			uint64_t t2 = tl__os_mono_ns();
			if (t2 - t > SPIN_PREEMPTED_NS) {
				atomic_store_explicit(&s->spin_off_until, t2 + SPIN_BACKOFF_NS,
						      memory_order_relaxed);
				break;
			}
		}
	}
	atomic_store(&s->spinning, 0);
	if (j) {
		/* An RMW, not a load: see park() for why that orders it after
		 * the push of any submitter that saw us spinning. */
		uint32_t idle = atomic_fetch_add(&s->idle, 0);
		if (idle && tl__jq_nonempty(&s->q))
			wake(s);
	}
	return j;
}

/*
 * Sleep until a wake bumps the futex. No job is left behind:
 *  - a submitter reads `idle` with an RMW after its push, and a parking
 *    worker increments it before its last look at the queue: one of the two
 *    RMWs comes first and the later acquires from the earlier, so either the
 *    submitter sees the worker (and wakes), or the worker sees the job;
 *  - a submitter that saw `spinning` leaves the job to the spinner, which
 *    clears `spinning` before this same RMW, so the same argument holds;
 *  - a submitter that found a wake pending leaves the job to whichever
 *    worker consumes the flag; every worker consumes it on its way into and
 *    out of the sleep, with an exchange that acquires from the submitter's.
 * Plain fences would do on hardware, but ThreadSanitizer does not model them.
 */
static void park(struct tl_bset *s)
{
	uint32_t f = atomic_load(&s->futex);
	atomic_fetch_add(&s->idle, 1);
	if (!atomic_exchange(&s->wake_pending, 0) && !tl__jq_nonempty(&s->q) &&
	    !atomic_load(&s->pool->stopping))
		futex_wait(&s->futex, f);
	atomic_fetch_sub(&s->idle, 1);
	atomic_exchange(&s->wake_pending, 0);
}

/* Names show in top -H and gdb: "tlpool-<set>-<worker>", "tllong-<n>";
 * the kernel keeps 15 bytes. */
static void name_thread(char *name)
{
	name[15] = 0;
	tl__os_thread_name(name);
}

static TL__OS_THREAD_FN bworker_main(void *arg)
{
	struct tl_bworker *w = arg;
	struct tl_bset *s = w->set;
	struct tl_pool *p = s->pool;
	char name[32];
	snprintf(name, sizeof name, "tlpool-%u-%u", s->idx, w->i);
	name_thread(name);
	bind_set(p, s->idx);
	tl__os_mutex_lock(&p->smu);
	p->started++;
	tl__os_cond_broadcast(&p->scv);
	tl__os_mutex_unlock(&p->smu);
	for (;;) {
		struct tl_job *j = tl__jq_pop(&s->q);
		if (!j) {
			if (atomic_load_explicit(&p->stopping, memory_order_acquire))
				break;
			j = search(s);
			if (!j) {
				park(s);
				continue;
			}
		}
		/* busy before the slot is given back: shutdown reads `used`
		 * first and `busy` second, so a job is always seen in one. */
		atomic_store_explicit(&w->busy, 1, memory_order_seq_cst);
		atomic_fetch_sub_explicit(&s->used, 1, memory_order_seq_cst);
		run_job(j);
		atomic_store_explicit(&w->busy, 0, memory_order_release);
	}
	return 0;
}

int tl__pool_admit(struct tl_bset *s)
{
	uint32_t cap = s->pool->cfg.queue_per_node;
	uint32_t u = atomic_load_explicit(&s->used, memory_order_relaxed);
	do {
		if (u >= cap)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(&s->used, &u, u + 1, memory_order_relaxed,
							memory_order_relaxed));
	return 1;
}

int tl__pool_bounded_submit(struct tl_pool *p, uint32_t si, struct tl_job *j, int reserved_set)
{
	struct tl_bset *s;
	if (reserved_set >= 0) {
		/* The slot was counted in `used` when it was reserved. */
		s = &p->sets[reserved_set];
		atomic_fetch_sub_explicit(&s->reserved, 1, memory_order_relaxed);
	} else {
		s = &p->sets[si];
		if (!tl__pool_admit(s))
			return -ENOBUFS;
	}
	j->set = (uint16_t)s->idx;
	tl__jq_push(&s->q, j);
	/* A spinner will find the job; otherwise wake a sleeper (park()). */
	if (atomic_fetch_add(&s->idle, 0) && !atomic_load(&s->spinning))
		wake(s);
	return 0;
}

/* ---- long workers ---- */

static void idle_unlink(struct tl_pool *p, struct tl_lworker *w)
{
	struct tl_bset *s = &p->sets[w->set];
	if (w->prev)
		w->prev->next = w->next;
	else
		s->lidle = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->prev = w->next = NULL;
	w->idle = 0;
}

static void idle_push(struct tl_pool *p, struct tl_lworker *w)
{
	struct tl_bset *s = &p->sets[w->set];
	w->prev = NULL;
	w->next = s->lidle;
	if (s->lidle)
		s->lidle->prev = w;
	s->lidle = w;
	w->idle = 1;
}

static void stat_add(_Atomic uint32_t *v, int d)
{
	/* Written under lmu only; atomic so that stats may read it any time. */
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + (uint32_t)d,
			      memory_order_relaxed);
}

static TL__OS_THREAD_FN lworker_main(void *arg)
{
	struct tl_lworker *w = arg;
	struct tl_pool *p = w->pool;
	char name[32];
	snprintf(name, sizeof name, "tllong-%u", w->id);
	name_thread(name);
	tl__os_mutex_lock(&p->lmu);
	for (;;) {
		struct tl_job *j = w->job;
		uint32_t set = w->set;
		tl__os_mutex_unlock(&p->lmu);
		/* Placed on the submitting loop's node; a parked worker handed a
		 * job from another node moves there. */
		if (w->bound != set) {
			bind_set(p, set);
			w->bound = set;
		}
		run_job(j);
		tl__os_mutex_lock(&p->lmu);
		stat_add(&p->sets[w->set].long_busy, -1);
		w->job = NULL;
		idle_push(p, w);
		uint64_t dl = tl__os_mono_ns() + (uint64_t)p->cfg.long_idle_ms * 1000000ull;
		while (!w->job) {
			if (atomic_load(&p->stopping))
				goto retire;
			int r = tl__os_cond_timedwait(&w->cv, &p->lmu, dl);
			/* A job handed over during the wait is taken even if the
			 * wait also timed out: it was promised to this worker. */
			if (r == -ETIMEDOUT && !w->job)
				goto retire;
		}
	}
retire:
	idle_unlink(p, w);
	p->lthreads--;
	stat_add(&p->sets[w->set].long_threads, -1);
	/* The record goes back still joinable: whoever reuses it (or the
	 * shutdown) joins this thread, which is about to return. */
	w->next = p->lfree;
	p->lfree = w;
	tl__os_mutex_unlock(&p->lmu);
	return 0;
}

static int spawn(tl__os_thread_handle *th, TL__OS_THREAD_FN (*fn)(void *), void *arg)
{
	/* Pool threads take no signals (POSIX; tl__os_thread_start blocks
	 * them): the process's handlers run on its own threads, as they
	 * would without a pool. */
	return tl__os_thread_start(th, fn, arg);
}

int tl__pool_long_submit(struct tl_pool *p, uint32_t si, struct tl_job *j)
{
	tl__os_mutex_lock(&p->lmu);
	struct tl_lworker *w = p->sets[si].lidle;
	for (uint32_t k = 0; !w && k < p->nsets; k++)
		w = p->sets[k].lidle;
	if (w) {
		idle_unlink(p, w);
		if (w->set != si) {
			stat_add(&p->sets[w->set].long_threads, -1);
			stat_add(&p->sets[si].long_threads, 1);
			w->set = si;
		}
		w->job = j;
		stat_add(&p->sets[si].long_busy, 1);
		tl__os_cond_signal(&w->cv);
		tl__os_mutex_unlock(&p->lmu);
		return 0;
	}
	if (p->lthreads >= p->cfg.long_max) {
		tl__os_mutex_unlock(&p->lmu);
		return -ENOBUFS;
	}
	w = p->lfree;
	p->lfree = w->next;
	w->next = NULL;
	if (w->joinable) {
		/* A retired worker's thread: it has left the lock and is
		 * returning, so this join is short. */
		tl__os_thread_join(w->th);
		w->joinable = 0;
	}
	w->job = j;
	w->set = si;
	w->bound = UINT32_MAX;
	w->id = p->lnext_id++;
	int r = spawn(&w->th, lworker_main, w);
	if (r < 0) {
		w->job = NULL;
		w->next = p->lfree;
		p->lfree = w;
		tl__os_mutex_unlock(&p->lmu);
		return r;
	}
	w->joinable = 1;
	p->lthreads++;
	stat_add(&p->sets[si].long_threads, 1);
	stat_add(&p->sets[si].long_busy, 1);
	tl__os_mutex_unlock(&p->lmu);
	return 0;
}

/* ---- start and shutdown ---- */

/* ---- starting and stopping the threads ---- */

int tl__pool_workers_start(struct tl_pool *p)
{
	uint32_t want = 0;
	for (uint32_t i = 0; i < p->nsets; i++) {
		for (uint32_t k = 0; k < p->sets[i].nw; k++) {
			struct tl_bworker *w = &p->sets[i].w[k];
			w->set = &p->sets[i];
			w->i = k;
			int r = spawn(&w->th, bworker_main, w);
			if (r < 0) {
				w->th = 0; /* no thread */
				tl__pool_workers_stop(p);
				return r;
			}
			want++;
		}
	}
	/* Return once every worker runs: thread start-up allocates, and it
	 * must not overlap the loops' steady state. */
	tl__os_mutex_lock(&p->smu);
	while (p->started < want)
		tl__os_cond_wait(&p->scv, &p->smu);
	tl__os_mutex_unlock(&p->smu);
	return 0;
}

void tl__pool_workers_stop(struct tl_pool *p)
{
	atomic_store(&p->stopping, 1);
	for (uint32_t i = 0; i < p->nsets; i++) {
		atomic_fetch_add(&p->sets[i].futex, 1);
		futex_wake(&p->sets[i].futex, 1);
	}
	for (uint32_t i = 0; i < p->nsets; i++)
		for (uint32_t k = 0; k < p->sets[i].nw; k++)
			if (p->sets[i].w[k].th)
				tl__os_thread_join(p->sets[i].w[k].th);
	tl__os_mutex_lock(&p->lmu);
	while (p->lthreads) {
		for (uint32_t i = 0; i < p->nsets; i++)
			for (struct tl_lworker *w = p->sets[i].lidle; w; w = w->next)
				tl__os_cond_signal(&w->cv);
		tl__os_mutex_unlock(&p->lmu);
		tl__os_sleep_us(1000);
		tl__os_mutex_lock(&p->lmu);
	}
	tl__os_mutex_unlock(&p->lmu);
	if (p->lrec)
		for (uint32_t i = 0; i < p->cfg.long_max; i++)
			if (p->lrec[i].joinable) {
				tl__os_thread_join(p->lrec[i].th);
				p->lrec[i].joinable = 0;
			}
}
