/* lib/pool/pool.c: the process-wide blocking pool: per-NUMA-node bounded sets, the long class, per-loop result ports. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <hwloc.h>
#include "pool_int.h"

/*
 * Shape of the pool (see pool_int.h for the lifetimes of records and ports):
 *
 * Bounded class: one struct tl_bset per NUMA node that has CPUs. Its queue is
 * a bounded lock-free MPMC ring of job pointers, and admission is a separate
 * counter `used` = queued + reserved, so that reservations and the exact
 * configured capacity (not the ring's power of two) are honoured. Workers
 * park on a futex; a submitter pays the wake system call only when a worker
 * is parked, none is spinning and no wake is already on its way (see wake()),
 * and at most one worker per set spins (briefly) before parking: a loop that
 * submits the next job right after the previous result finds a worker awake.
 * That is what makes the pool cheaper than a mutex-and-condition-variable
 * pool, which signals once per job.
 *
 * Long class: no queue at all. Parked long workers wait on their own
 * condition variable in a per-node idle list; a submission hands its job to
 * one of them (preferring the loop's node), or starts a thread, or is
 * refused at the ceiling. Everything in the class is under one mutex: it is
 * off the fast path by nature (a long job holds its thread for a long time).
 */

#define SETS_MAX 1024u
/* Spinning (search()): pause-spin this many looks, then yield between looks;
 * a yield that lasted this long means the CPU was wanted elsewhere, and
 * spinning stays off for the back-off time. */
#define SPIN_PAUSES 256u
#define SPIN_PREEMPTED_NS 5000u
#define SPIN_BACKOFF_NS 2000000u

/* ---- the job queue: Vyukov's bounded MPMC ring of pointers ---- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

struct tl_jq_cell {
	_Atomic uint64_t seq;
	struct tl_job *job;
};

struct tl_jq {
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) uint64_t mask;
	struct tl_jq_cell *cells;
};

/* Twice the admission bound: see jq_push for why slack helps. */
static int jq_init(struct tl_jq *q, uint32_t cap)
{
	uint64_t n = 2;
	while (n < 2 * (uint64_t)cap)
		n <<= 1;
	q->cells = aligned_alloc(64, ((n * sizeof *q->cells) + 63) & ~(size_t)63);
	if (!q->cells)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		atomic_init(&q->cells[i].seq, i);
		q->cells[i].job = NULL;
	}
	atomic_init(&q->tail, 0);
	atomic_init(&q->head, 0);
	q->mask = n - 1;
	return 0;
}

/*
 * Admission (`used`) guarantees room for every pushed job, yet a cell can
 * still be taken: a consumer that claimed it (moved head) and was preempted
 * before releasing it holds it while the other workers consume past it, and
 * producers lap around to it. That consumer is a few instructions from
 * releasing it, so wait for it rather than fail; the slack of jq_init makes
 * this rare.
 */
static void jq_push(struct tl_jq *q, struct tl_job *j)
{
	uint64_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
	for (uint32_t waits = 0;;) {
		struct tl_jq_cell *c = &q->cells[pos & q->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				c->job = j;
				atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
				return;
			}
		} else if (dif < 0) {
			if (++waits < 64)
				cpu_relax();
			else
				sched_yield();
			pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
		} else {
			pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
		}
	}
}

static struct tl_job *jq_pop(struct tl_jq *q)
{
	uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
	for (;;) {
		struct tl_jq_cell *c = &q->cells[pos & q->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - (pos + 1));
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				struct tl_job *j = c->job;
				atomic_store_explicit(&c->seq, pos + q->mask + 1,
						      memory_order_release);
				return j;
			}
		} else if (dif < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&q->head, memory_order_relaxed);
		}
	}
}

/* A claimed position may not be published yet: callers treat "nonempty" as
 * "look again", never as "a pop will succeed". */
static int jq_nonempty(struct tl_jq *q)
{
	return atomic_load_explicit(&q->tail, memory_order_relaxed) !=
	       atomic_load_explicit(&q->head, memory_order_relaxed);
}

/* ---- pool structures ---- */

struct tl_pool;

struct tl_bworker {
	_Alignas(64) _Atomic uint32_t busy; /* own line: written per job */
	pthread_t th;
	struct tl_bset *set;
	uint32_t i;
};

struct tl_lworker {
	pthread_t th;
	pthread_cond_t cv;
	struct tl_pool *pool;
	struct tl_job *job;            /* handed under lmu */
	struct tl_lworker *prev, *next; /* idle list of its set, or the free list */
	uint32_t set;                  /* node set it is placed on */
	uint32_t bound;                /* set its CPU binding is for (UINT32_MAX: none) */
	uint32_t id;
	int idle;                      /* on an idle list */
	int joinable;                  /* a thread was started and not joined */
};

struct tl_bset {
	struct tl_jq q;
	_Alignas(64) _Atomic uint32_t used; /* queued + reserved: admission */
	_Atomic uint32_t reserved;
	_Alignas(64) _Atomic uint32_t futex;
	_Atomic uint32_t idle;     /* parked (or parking) workers */
	_Atomic uint32_t spinning; /* 0 or 1 */
	_Atomic uint32_t wake_pending; /* 0 or 1 */
	_Atomic uint64_t spin_off_until; /* no spinning before (contention seen) */
	_Alignas(64) _Atomic uint32_t long_threads; /* stats mirrors, written under lmu */
	_Atomic uint32_t long_busy;
	struct tl_pool *pool;
	uint32_t idx;
	int node;                  /* OS index of the NUMA node */
	hwloc_bitmap_t cpuset;
	struct tl_bworker *w;
	uint32_t nw;
	struct tl_lworker *lidle;  /* parked long workers (under lmu) */
};

struct tl_pool {
	tl_pool_config cfg;
	char *topo_str;
	hwloc_topology_t topo;
	int bind;                 /* bind threads (this machine's topology) */
	uint64_t spin_ns;
	struct tl_bset *sets;
	uint32_t nsets;
	int32_t *cpu2set;         /* OS CPU number -> set, -1 if none */
	uint32_t ncpu;
	_Atomic int stopping;
	_Atomic uint32_t loops;   /* loops with pool state */

	pthread_mutex_t smu;      /* start handshake */
	pthread_cond_t scv;
	uint32_t started;

	pthread_mutex_t lmu;      /* the whole long class */
	struct tl_lworker *lrec;
	struct tl_lworker *lfree;
	uint32_t lthreads;
	uint32_t lnext_id;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* start / shutdown / attach */
static _Atomic(struct tl_pool *) g_pool;
static _Atomic uint32_t g_readers; /* lock-free readers of g_pool (stats) */

uint64_t tl__pool_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *f, uint32_t v)
{
	syscall(SYS_futex, f, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *f, int n)
{
	syscall(SYS_futex, f, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

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
		j->t_start = tl__pool_now();
		switch (j->type) {
		case TL_JT_BLOCKING: {
			int64_t r = j->u.b.fn(j->u.b.arg, (tl_cancel_flag *)j);
			j->res = r;
			j->value = (uint64_t)r;
			break;
		}
		case TL_JT_FS:
			tl__fs_exec(j);
			break;
		default:
			tl__resolve_exec(j);
			break;
		}
		j->t_end = tl__pool_now();
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
		(void)hwloc_set_cpubind(p->topo, p->sets[set].cpuset, HWLOC_CPUBIND_THREAD);
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
	futex_wake(&s->futex, 1);
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
	uint64_t t0 = tl__pool_now();
	if (t0 < atomic_load_explicit(&s->spin_off_until, memory_order_relaxed)) {
		atomic_store(&s->spinning, 0);
		return NULL;
	}
	for (uint32_t i = 1;; i++) {
		if (jq_nonempty(&s->q) && (j = jq_pop(&s->q)))
			break;
		if (i & 15) {
			cpu_relax();
			continue;
		}
		uint64_t t = tl__pool_now();
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
			sched_yield();
			uint64_t t2 = tl__pool_now();
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
		if (idle && jq_nonempty(&s->q))
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
	if (!atomic_exchange(&s->wake_pending, 0) && !jq_nonempty(&s->q) &&
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
	pthread_setname_np(pthread_self(), name);
}

static void *bworker_main(void *arg)
{
	struct tl_bworker *w = arg;
	struct tl_bset *s = w->set;
	struct tl_pool *p = s->pool;
	char name[32];
	snprintf(name, sizeof name, "tlpool-%u-%u", s->idx, w->i);
	name_thread(name);
	bind_set(p, s->idx);
	pthread_mutex_lock(&p->smu);
	p->started++;
	pthread_cond_broadcast(&p->scv);
	pthread_mutex_unlock(&p->smu);
	for (;;) {
		struct tl_job *j = jq_pop(&s->q);
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
	return NULL;
}

/* Take one unit of the set's queue capacity (queued + reserved < cap). */
static int admit(struct tl_bset *s)
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

static int bounded_submit(struct tl_pool *p, uint32_t si, struct tl_job *j, int reserved_set)
{
	struct tl_bset *s;
	if (reserved_set >= 0) {
		/* The slot was counted in `used` when it was reserved. */
		s = &p->sets[reserved_set];
		atomic_fetch_sub_explicit(&s->reserved, 1, memory_order_relaxed);
	} else {
		s = &p->sets[si];
		if (!admit(s))
			return -ENOBUFS;
	}
	j->set = (uint16_t)s->idx;
	jq_push(&s->q, j);
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

static void *lworker_main(void *arg)
{
	struct tl_lworker *w = arg;
	struct tl_pool *p = w->pool;
	char name[32];
	snprintf(name, sizeof name, "tllong-%u", w->id);
	name_thread(name);
	pthread_mutex_lock(&p->lmu);
	for (;;) {
		struct tl_job *j = w->job;
		uint32_t set = w->set;
		pthread_mutex_unlock(&p->lmu);
		/* Placed on the submitting loop's node; a parked worker handed a
		 * job from another node moves there. */
		if (w->bound != set) {
			bind_set(p, set);
			w->bound = set;
		}
		run_job(j);
		pthread_mutex_lock(&p->lmu);
		stat_add(&p->sets[w->set].long_busy, -1);
		w->job = NULL;
		idle_push(p, w);
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)p->cfg.long_idle_ms * 1000000ull;
		dl.tv_sec += (time_t)(ns / 1000000000ull);
		dl.tv_nsec = (long)(ns % 1000000000ull);
		while (!w->job) {
			if (atomic_load(&p->stopping))
				goto retire;
			int r = pthread_cond_timedwait(&w->cv, &p->lmu, &dl);
			/* A job handed over during the wait is taken even if the
			 * wait also timed out: it was promised to this worker. */
			if (r == ETIMEDOUT && !w->job)
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
	pthread_mutex_unlock(&p->lmu);
	return NULL;
}

static int spawn(pthread_t *th, void *(*fn)(void *), void *arg)
{
	/* Pool threads take no signals: the process's handlers run on its
	 * own threads, as they would without a pool. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = pthread_create(th, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}

static int long_submit(struct tl_pool *p, uint32_t si, struct tl_job *j)
{
	pthread_mutex_lock(&p->lmu);
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
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&p->lmu);
		return 0;
	}
	if (p->lthreads >= p->cfg.long_max) {
		pthread_mutex_unlock(&p->lmu);
		return -ENOBUFS;
	}
	w = p->lfree;
	p->lfree = w->next;
	w->next = NULL;
	if (w->joinable) {
		/* A retired worker's thread: it has left the lock and is
		 * returning, so this join is short. */
		pthread_join(w->th, NULL);
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
		pthread_mutex_unlock(&p->lmu);
		return r;
	}
	w->joinable = 1;
	p->lthreads++;
	stat_add(&p->sets[si].long_threads, 1);
	stat_add(&p->sets[si].long_busy, 1);
	pthread_mutex_unlock(&p->lmu);
	return 0;
}

/* ---- start and shutdown ---- */

static void pool_free(struct tl_pool *p)
{
	if (p->sets) {
		for (uint32_t i = 0; i < p->nsets; i++) {
			free(p->sets[i].q.cells);
			free(p->sets[i].w);
			if (p->sets[i].cpuset)
				hwloc_bitmap_free(p->sets[i].cpuset);
		}
		free(p->sets);
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

/* Stop and join every thread (no job may be in the pool). */
static void pool_stop(struct tl_pool *p)
{
	atomic_store(&p->stopping, 1);
	for (uint32_t i = 0; i < p->nsets; i++) {
		atomic_fetch_add(&p->sets[i].futex, 1);
		futex_wake(&p->sets[i].futex, INT_MAX);
	}
	for (uint32_t i = 0; i < p->nsets; i++)
		for (uint32_t k = 0; k < p->sets[i].nw; k++)
			if (p->sets[i].w[k].th)
				pthread_join(p->sets[i].w[k].th, NULL);
	pthread_mutex_lock(&p->lmu);
	while (p->lthreads) {
		for (uint32_t i = 0; i < p->nsets; i++)
			for (struct tl_lworker *w = p->sets[i].lidle; w; w = w->next)
				pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&p->lmu);
		usleep(1000);
		pthread_mutex_lock(&p->lmu);
	}
	pthread_mutex_unlock(&p->lmu);
	if (p->lrec)
		for (uint32_t i = 0; i < p->cfg.long_max; i++)
			if (p->lrec[i].joinable) {
				pthread_join(p->lrec[i].th, NULL);
				p->lrec[i].joinable = 0;
			}
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
	p->sets = aligned_alloc(64, bytes);
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
		s->w = aligned_alloc(64, wb);
		if (!s->cpuset || !s->w || jq_init(&s->q, p->cfg.queue_per_node) < 0)
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
	uint32_t want = 0;
	for (uint32_t i = 0; i < p->nsets; i++) {
		for (uint32_t k = 0; k < p->sets[i].nw; k++) {
			struct tl_bworker *w = &p->sets[i].w[k];
			w->set = &p->sets[i];
			w->i = k;
			r = spawn(&w->th, bworker_main, w);
			if (r < 0) {
				w->th = 0;
				pool_stop(p);
				goto fail;
			}
			want++;
		}
	}
	/* Return once every worker runs: thread start-up allocates, and it
	 * must not overlap the loops' steady state. */
	pthread_mutex_lock(&p->smu);
	while (p->started < want)
		pthread_cond_wait(&p->scv, &p->smu);
	pthread_mutex_unlock(&p->smu);
	*out = p;
	return 0;
fail:
	pool_free(p);
	return r;
}

int tl_pool_start(const tl_pool_config *cfg)
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
	pool_stop(p);
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

/* ---- the loop's side ---- */

static void job_free(struct tl_pool_loop *pl, struct tl_job *j)
{
	atomic_store_explicit(&j->state, TL_JOB_FREE, memory_order_relaxed);
	pl->free[pl->nfree++] = j->idx;
}

static void deliver(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j)
{
	struct tl_opslot *o = &l->o[j->op_idx];
	int cancelled = (o->flags & TL_OPF_CANCEL) != 0;
	pl->st.queue_wait_ns += j->t_start - j->t_submit;
	pl->st.run_ns += j->t_end - j->t_start;
	pl->st.completed++;
	pl->st.cancelled += (uint64_t)cancelled;
	tl_completion *c = tl__op_finish(l, o, j->res, TL_F_TERMINAL);
	c->aux = j->type == TL_JT_FS ? j->fs_code : j->cls;
	c->u.pool.value = j->value;
	c->u.pool.ptr = j->ptr;
	if (j->type != TL_JT_BLOCKING)
		tl__fs_deliver(j, c, cancelled);
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
		c->aux = j->type == TL_JT_FS ? j->fs_code : j->cls;
		c->u.pool.value = (uint64_t)(int64_t)-ECANCELED;
		c->u.pool.ptr = j->type == TL_JT_RESOLVE ? (void *)j->u.rs.out : NULL;
		return;
	}
	if (st == TL_JOB_NATIVE) {
		/* In the driver's hands: ask it; the terminal comes from the
		 * kernel once it lets go of the request's memory. A refusal
		 * (no SQE) leaves the request running to its own end, and the
		 * core still reports -ECANCELED for it. */
		(void)l->dv->cancel(l->d, NULL, o);
		return;
	}
	/* Running (or done, with the result on its way): the core turns the
	 * terminal into -ECANCELED; the job may look at its flag. */
	atomic_store_explicit(&j->cancel, 1, memory_order_release);
}

/* The driver reported a native file request's terminal (tl__drv_event): fill
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
	tl__fs_native_result(j, res);
	j->t_end = tl__pool_now();
	pl->st.completed++;
	pl->st.cancelled += (uint64_t)cancelled;
	c->aux = j->fs_code;
	c->u.pool.value = j->value;
	c->u.pool.ptr = j->ptr;
	tl__fs_deliver(j, c, cancelled);
	job_free(pl, j);
}

/* A blocking open(2) never fails with ENXIO on a FIFO that has no reader
 * yet (it waits for one), but io_uring's OPENAT tries the open with
 * O_NONBLOCK first and passes that ENXIO on. Such an open goes to the pool
 * through the reservation taken at submission, keeping its op (and id). */
static int native_open_needs_pool(const struct tl_job *j)
{
	return j->fs_code == TL_FS_OPEN && !(j->u.fs.flags & O_NONBLOCK);
}

static int hook_native_retry(tl_loop *l, struct tl_opslot *o, int64_t res)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_job *j = o->u.pool.job;
	if (res != -ENXIO || j->rsv < 0 || (o->flags & TL_OPF_CANCEL))
		return 0;
	/* Out of the kernel: no longer native. */
	o->flags &= (uint16_t)~TL_OPF_NATIVE;
	l->native_pending--;
	int set = j->rsv;
	j->rsv = -1;
	j->t_submit = j->t_start = j->t_end = tl__pool_now();
	atomic_store_explicit(&j->state, TL_JOB_QUEUED, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->poster->refs, 1, memory_order_relaxed);
	/* Cannot fail: the reservation holds the queue slot. */
	(void)bounded_submit(pl->pool, pl->set, j, set);
	return 1;
}

int tl__pool_native_submit(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j,
			   const struct tl_fs_native_req *req, uint64_t token, tl_op *op)
{
	if (!l->dv->fs_submit)
		return -ENOTSUP;
	j->rsv = -1;
	if (native_open_needs_pool(j)) {
		/* No room for the fallback: the pool path now (and its refusal). */
		int set = tl__pool_reserve(l);
		if (set < 0)
			return -ENOTSUP;
		j->rsv = set;
	}
	struct tl_opslot *o;
	int r = tl__op_new(l, NULL, TL_OP_POOL, TL_K_FS, token, &o);
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
	j->t_submit = j->t_start = j->t_end = tl__pool_now();
	o->u.pool.job = j;
	atomic_store_explicit(&j->state, TL_JOB_NATIVE, memory_order_relaxed);
	/* Counted as native while in the kernel: turns poll for it and
	 * tl_loop_destroy waits for it (op_retire gives the count back). */
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	tl_op id = tl__op_id(l, o);
	r = l->dv->fs_submit(l->d, o, req);
	if (r < 0) {
		tl__op_refuse(l, o);
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
	pl->st.submitted++;
	*op = id;
	return 0;
}

/* Pop one undelivered result and drop it (an open's descriptor is closed):
 * its job index, or UINT32_MAX when the ring is empty. */
static uint32_t port_discard_one(struct tl_port *pt)
{
	uint32_t idx;
	if (!tl__mpsc_pop(&pt->ring, &idx, sizeof idx))
		return UINT32_MAX;
	struct tl_job *j = &pt->jobs[idx];
	if (atomic_load_explicit(&j->state, memory_order_relaxed) == TL_JOB_DONE &&
	    j->type != TL_JT_BLOCKING)
		tl__fs_discard(j);
	return idx;
}

static void hook_detach(tl_loop *l)
{
	struct tl_pool_loop *pl = l->pool;
	struct tl_port *pt = pl->port;
	/* tl_loop_destroy has cancelled every op (so nothing is QUEUED any
	 * more) and closed the poster, which running jobs see through
	 * tl_pool_cancelled. Results of finished jobs still in the ring are
	 * dropped now, so an undelivered open's descriptor closes at once. */
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
	/* Requests that use the caller's memory must be out of the kernel
	 * before tl_loop_destroy returns (contract 1.9). */
	for (uint32_t i = 0; i < pt->njobs; i++) {
		struct tl_job *j = &pt->jobs[i];
		while (j->user_mem &&
		       atomic_load_explicit(&j->state, memory_order_acquire) == TL_JOB_RUNNING)
			usleep(100);
	}
	atomic_fetch_sub(&pl->pool->loops, 1);
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
	int cpu = sched_getcpu();
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
	/* Attach under the start lock, so that no shutdown can slip between
	 * finding the pool and counting this loop in it. */
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
	if (r == 0)
		atomic_fetch_add(&p->loops, 1);
	pthread_mutex_unlock(&g_mu);
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
	j->fs_code = 0;
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
	j->t_submit = tl__pool_now();
	j->t_start = j->t_end = j->t_submit;
	o->u.pool.job = j;
	atomic_store_explicit(&j->state, TL_JOB_QUEUED, memory_order_relaxed);
	/* The job's own reference keeps the port alive for the worker. */
	atomic_fetch_add_explicit(&l->poster->refs, 1, memory_order_relaxed);
	if (cls == TL_POOL_LONG)
		r = long_submit(pl->pool, pl->set, j);
	else
		r = bounded_submit(pl->pool, pl->set, j, reserved_set);
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
	j->type = TL_JT_BLOCKING;
	j->u.b.fn = fn;
	j->u.b.arg = arg;
	return tl__pool_submit(l, pl, j, cls, TL_K_POOL, token, -1, op);
}

int tl__pool_reserve(tl_loop *l)
{
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_bset *s = &pl->pool->sets[pl->set];
	if (!admit(s)) {
		pl->st.refused++;
		return -ENOBUFS;
	}
	atomic_fetch_add_explicit(&s->reserved, 1, memory_order_relaxed);
	return (int)pl->set;
}

void tl__pool_unreserve(int set)
{
	/* A loop holding a reservation is attached: the pool cannot go. */
	struct tl_pool *p = atomic_load(&g_pool);
	struct tl_bset *s = &p->sets[set];
	atomic_fetch_sub_explicit(&s->reserved, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->used, 1, memory_order_relaxed);
}
