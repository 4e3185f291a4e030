/* lib/pool/pool_int.h: the blocking pool's private structures, shared by its files only (kinds of jobs see job.h). */
#ifndef TL_POOL_INT_H
#define TL_POOL_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include "internal.h"
#include "os.h"
#include "topo.h"
#include "turnloop/pool.h"
#include "job.h"
#include "queue.h"

/*
 * Lifetimes, the part that is easy to get wrong:
 *
 * A job record lives in its loop's port (struct tl_port), an array sized by
 * cfg.max_undelivered and allocated at the loop's first pool use. The loop
 * takes a free record for each submission and gets it back only through the
 * port's result ring: the worker pushes the record's index when it is done
 * with it (a result, or the acknowledgement of a job the loop cancelled
 * before it started). So a record is never reused while a worker can still
 * touch it, and the ring (one slot per record) can never be full.
 *
 * The port belongs to the loop's poster, which is reference-counted: every
 * job in a worker's hands holds one poster reference, so the port outlives
 * tl_loop_destroy() for as long as a worker needs it. The last reference
 * frees the port (port.c's port_free, via poster->on_last_put), discarding
 * the results still undelivered (tl_job_ops.discard).
 *
 * The job's state is the one decision point between the loop and a worker:
 * QUEUED -> RUNNING (a worker claims it) or QUEUED -> CANCELLED (the loop
 * cancels it before it starts, and finishes the op itself), by CAS, so
 * exactly one of them wins.
 */

enum tl_job_state {
	TL_JOB_FREE = 0,   /* on the loop's free stack */
	TL_JOB_QUEUED,     /* accepted, not started */
	TL_JOB_RUNNING,    /* a worker runs it */
	TL_JOB_DONE,       /* result written; its index is in (or going to) the ring */
	TL_JOB_CANCELLED,  /* cancelled before it started: the op is already finished */
	TL_JOB_NATIVE,     /* run by the driver, not a worker (job.h): it comes
			    * back through the pool_native hook, never the ring */
};

struct tl_pool;
struct tl_bset;

/* A loop's result port: outlives the loop (see above). */
struct tl_port {
	struct tl_mpsc ring;     /* indices of records the workers are done with */
	struct tl_poster *poster;
	struct tl_job *jobs;
	uint32_t njobs;
};

/* The per-loop side (loop->pool), touched by the loop's thread only. */
struct tl_pool_loop {
	struct tl_port *port;
	struct tl_pool *pool;
	uint32_t set;         /* index of its bounded set */
	int node_pinned;      /* tl_pool_loop_node() chose it */
	uint32_t *free;       /* stack of free record indices */
	uint32_t nfree;
	tl_pool_loop_stats st;
};

/* ---- the pool itself, between its files ---- */

struct tl_bworker {
	_Alignas(64) _Atomic uint32_t busy; /* own line: written per job */
	tl__os_thread_handle th;
	struct tl_bset *set;
	uint32_t i;
};

struct tl_lworker {
	tl__os_thread_handle th;
	tl__os_cond cv;
	struct tl_pool *pool;
	struct tl_job *job;            /* handed under lmu */
	struct tl_lworker *prev, *next; /* idle list of its set, or the free list */
	uint32_t set;                  /* node set it is placed on */
	uint32_t bound;                /* set its CPU binding is for (UINT32_MAX: none) */
	uint32_t id;
	int idle;                      /* on an idle list */
	int joinable;                  /* a thread was started and not joined */
};

/* One bounded set per NUMA node with CPUs (pool.c builds them). */
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
	const tl__cpuset *cpus;    /* its CPUs (the topology's) */
	struct tl_bworker *w;
	uint32_t nw;
	struct tl_lworker *lidle;  /* parked long workers (under lmu) */
};

struct tl_pool {
	tl_pool_config cfg;
	char *topo_str;
	tl__topo *topo;
	int bind;                 /* bind threads (this machine's topology) */
	uint64_t spin_ns;
	struct tl_bset *sets;
	uint32_t nsets;
	int32_t *cpu2set;         /* OS CPU number -> set, -1 if none */
	uint32_t ncpu;
	_Atomic int stopping;
	_Atomic uint32_t loops;   /* loops with pool state */

	tl__os_mutex smu;         /* start handshake */
	tl__os_cond scv;
	uint32_t started;

	tl__os_mutex lmu;         /* the whole long class */
	struct tl_lworker *lrec;
	struct tl_lworker *lfree;
	uint32_t lthreads;
	uint32_t lnext_id;
};

/* Start, attach and shutdown (pool.c). Count one more loop in the pool,
 * starting it with the defaults if none runs: 0 (*out set) or the start
 * error. Detach undoes it. */
int tl__pool_attach(struct tl_pool **out);
void tl__pool_detach(struct tl_pool *p);
/* The running pool; only for a caller that holds an attached loop, which
 * keeps it from shutting down. */
struct tl_pool *tl__pool_get(void);

/* Workers (workers.c). Start every bounded worker and return once they all
 * run (0), or stop those started and return the error. Stop joins every
 * thread of both classes; no job may be in the pool. */
int tl__pool_workers_start(struct tl_pool *p);
void tl__pool_workers_stop(struct tl_pool *p);
/* Take one unit of set s's queue capacity (queued + reserved < cap): 1, or 0
 * when it is full. */
int tl__pool_admit(struct tl_bset *s);
/* Queue j on set si (admitting it: -ENOBUFS when full), or on reserved_set
 * through the reservation made there: 0. */
int tl__pool_bounded_submit(struct tl_pool *p, uint32_t si, struct tl_job *j, int reserved_set);
/* Hand j to a parked long worker (the loop's node si first) or a new one:
 * 0, -ENOBUFS at the ceiling, or the thread creation error. */
int tl__pool_long_submit(struct tl_pool *p, uint32_t si, struct tl_job *j);

#endif
