/* lib/pool/pool_int.h: the blocking pool's private structures, shared by its files and fs.c (and the pool tests). */
#ifndef TL_POOL_INT_H
#define TL_POOL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <hwloc.h>
#include "internal.h"
#include "turnloop/pool.h"
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
 * frees the port (tl__pool_port_free via poster->on_last_put), closing any
 * descriptor an undelivered open had produced.
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
	TL_JOB_NATIVE,     /* run by the driver (fs_submit), not a worker: the record
			    * only holds its paths and statx buffer, and comes back
			    * through the pool_native hook, never the result ring */
};

/* What the worker does (tl_job.type). */
enum tl_job_type {
	TL_JT_BLOCKING = 0,
	TL_JT_FS,      /* u.fs, code in fs_code */
	TL_JT_RESOLVE, /* u.rs */
};

struct tl_port;
struct tl_bset;

struct tl_job {
	_Atomic uint32_t state;  /* enum tl_job_state */
	_Atomic uint32_t cancel; /* cooperative flag (tl_pool_cancelled) */
	uint8_t type;            /* enum tl_job_type */
	uint8_t cls;             /* TL_POOL_* */
	uint8_t fs_code;         /* enum tl_fs_req */
	uint8_t user_mem;        /* the worker touches caller memory: destroy waits */
	uint32_t idx;            /* index in the port's array */
	uint32_t op_idx;         /* the op (on the loop's thread only) */
	uint16_t op_gen;
	uint16_t set;            /* bounded set it was admitted to (bounded jobs) */
	int32_t rsv;             /* native open: its fallback reservation's set, or -1 */
	struct tl_port *port;
	uint64_t t_submit, t_start, t_end; /* CLOCK_MONOTONIC ns */
	int64_t res;             /* the result the worker produced */
	uint64_t value;
	void *ptr;
	union {
		struct {
			tl_job_fn fn;
			void *arg;
		} b;
		struct {
			const char *path, *path2; /* into inl, or the caller's */
			void *buf;                /* caller's buffer or out array */
			void *user_out;           /* stat: where the loop copies st */
			uint64_t off;
			uint32_t len;
			int fd;
			int flags;
			unsigned mode;
			char inl[TL_FS_INLINE_PATH];
			union {
				struct stat st;    /* pool: what stat/fstat wrote */
				struct statx stx;  /* native: what the kernel wrote */
			};
		} fs;
		struct {
			tl_addr *out;
			uint32_t cap, n;
			int family, socktype, protocol, flags;
			uint8_t has_host, has_service;
			union {
				struct {
					char host[256];
					char service[32];
				} in;
				tl_addr addrs[TL_RESOLVE_MAX]; /* written after the call */
			} io;
		} rs;
	} u;
};

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

/* ---- between pool.c and fs.c ---- */

/* The loop's pool state, set up on first use (starting the pool with the
 * defaults if needed): 0, -ENOMEM or the start error. */
int tl__pool_loop_setup(tl_loop *loop, struct tl_pool_loop **out);

/* Take a free record for a new job (NULL: max_undelivered reached; counted
 * as a refusal). The caller fills u, type, user_mem, then calls
 * tl__pool_submit, which either accepts the job (0, *op set) or refuses it
 * and gives the record back. reserved_set >= 0 uses a reservation made with
 * tl__pool_reserve on that set instead of admitting into the queue (cannot
 * be refused for queue space; if the op table is full, -ENOBUFS, the
 * reservation stays the caller's). */
struct tl_job *tl__pool_job_new(tl_loop *loop, struct tl_pool_loop *pl);
int tl__pool_submit(tl_loop *loop, struct tl_pool_loop *pl, struct tl_job *j, int cls,
		    uint8_t kind, uint64_t token, int reserved_set, tl_op *op);

/* Reservations (for requests accepted now that may need a bounded slot
 * later: the io_uring driver's fallback to the pool). Reserve one queue slot
 * on the loop's set: returns the set index (>= 0) or -ENOBUFS / the setup
 * error. Unreserve gives back a slot that was not used. */
int tl__pool_reserve(tl_loop *loop);
void tl__pool_unreserve(int set);

/* Try to run a filled TL_JT_FS job natively through the loop's driver
 * (fs_submit): 0 accepted (*op set, the record is the op's until its
 * terminal), -ENOTSUP when the driver has no native path for it (nothing
 * happened: the caller submits j to the pool as usual), or another negative
 * errno (refused; the record is given back). req's pointers must point into
 * j or the caller's memory. */
int tl__pool_native_submit(tl_loop *loop, struct tl_pool_loop *pl, struct tl_job *j,
			   const struct tl_fs_native_req *req, uint64_t token, tl_op *op);
/* A native request's raw result res (job j): set j->res/j->value as a worker
 * would (statx converted into j->u.fs.st). */
void tl__fs_native_result(struct tl_job *j, int64_t res);

/* Worker side of fs.c: run a TL_JT_FS / TL_JT_RESOLVE job (sets j->res,
 * j->value). */
void tl__fs_exec(struct tl_job *j);
void tl__resolve_exec(struct tl_job *j);
/* Loop side of fs.c, while the terminal completion c is produced: copy
 * results to the caller (stat, addresses), close the descriptor of a
 * cancelled open. c is the queued completion; cancelled says whether the op
 * had been cancelled. */
void tl__fs_deliver(struct tl_job *j, tl_completion *c, int cancelled);
/* A port dies with this record's result undelivered (loop destroyed). */
void tl__fs_discard(struct tl_job *j);

static inline uint64_t tl__pool_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the pool itself, between its files ---- */

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
