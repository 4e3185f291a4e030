/* lib/pool/job.h: what a kind of pool job (file requests, lookups, the pool's own tl_blocking) sees of the pool. */
#ifndef TL_POOL_JOB_H
#define TL_POOL_JOB_H

#include <stdatomic.h>
#include <stdint.h>
#include "internal.h"
#include "turnloop/pool.h"

/*
 * The pool runs jobs and knows nothing of what they do: each kind fills one
 * const struct tl_job_ops (designated initializers) and points its records
 * at it, and keeps its own request in the record's data words (a struct of
 * its own, checked to fit with a _Static_assert, as drivers do with a
 * slot's drv words). A record is the kind's from tl__pool_job_new until it
 * is submitted; from then on the pool owns it, and hands it to the ops
 * below on the worker's or the loop's thread.
 */

struct tl_job;
struct tl_port;
struct tl_pool_loop;

struct tl_job_ops {
	/* On a worker: do the work and set j->res (the terminal's result) and
	 * j->value. May look at tl_pool_cancelled((tl_cancel_flag *)j).
	 * Required. */
	void (*run)(struct tl_job *j);
	/* On the loop's thread, while the terminal c of a job that ran (on a
	 * worker or in the driver) is queued; c's aux, value and ptr are
	 * already the record's. Copy results to the caller, undo what the
	 * host will never see. cancelled: the op had been cancelled. */
	void (*deliver)(struct tl_job *j, tl_completion *c, int cancelled);
	/* The result of a job that ran is dropped undelivered (its loop was
	 * destroyed): release what it made. On any thread. */
	void (*discard)(struct tl_job *j);
	/* Kinds the driver may run (tl__pool_native_begin), on the loop's
	 * thread. native_result turns the driver's raw result res into j->res
	 * and j->value as run would have set them (NULL: both are res).
	 * native_retry, called before that, may take the job back from the
	 * driver and give it to a worker (tl__pool_requeue): 1 if it did, so
	 * no terminal is reported now. */
	void (*native_result)(struct tl_job *j, int64_t res);
	int (*native_retry)(tl_loop *loop, struct tl_opslot *op, struct tl_job *j, int64_t res);
};

/* The largest kind's request (a file request with its inline paths and stat
 * buffer), in 64-bit words. */
#define TL_JOB_WORDS 72

struct tl_job {
	_Atomic uint32_t state;  /* enum tl_job_state (pool_int.h) */
	_Atomic uint32_t cancel; /* cooperative flag (tl_pool_cancelled) */
	const struct tl_job_ops *ops;
	uint8_t cls;             /* TL_POOL_* */
	uint8_t aux;             /* the terminal's aux, set by the kind */
	uint8_t user_mem;        /* the worker touches caller memory: destroy waits */
	uint32_t idx;            /* index in the port's array */
	uint32_t op_idx;         /* the op (on the loop's thread only) */
	uint16_t op_gen;
	uint16_t set;            /* bounded set it was admitted to (bounded jobs) */
	int32_t rsv;             /* a bounded reservation it holds for later, or -1 */
	struct tl_port *port;
	uint64_t t_submit, t_start, t_end; /* CLOCK_MONOTONIC ns */
	int64_t res;             /* the result the worker produced */
	uint64_t value;
	void *ptr;               /* the terminal's ptr (tl_pool_set_ptr, or the kind's) */
	uint64_t data[TL_JOB_WORDS]; /* the kind's request */
};

/* The loop's pool state, set up on first use (starting the pool with the
 * defaults if needed): 0, -ENOMEM or the start error. */
int tl__pool_loop_setup(tl_loop *loop, struct tl_pool_loop **out);

/* Take a free record for a new job (NULL: max_undelivered reached; counted
 * as a refusal), with cancel, user_mem, aux, res, value and ptr cleared and
 * no reservation. The caller sets ops and its data (and user_mem, aux, ptr
 * as needed), then calls tl__pool_submit, which either accepts the job (0,
 * *op set) or refuses it and gives the record back. kind is the
 * completions' tl_kind. reserved_set >= 0 uses a reservation made with
 * tl__pool_reserve on that set instead of admitting into the queue (cannot
 * be refused for queue space; if the op table is full, -ENOBUFS, the
 * reservation stays the caller's). */
struct tl_job *tl__pool_job_new(tl_loop *loop, struct tl_pool_loop *pl);
int tl__pool_submit(tl_loop *loop, struct tl_pool_loop *pl, struct tl_job *j, int cls,
		    uint8_t kind, uint64_t token, int reserved_set, tl_op *op);

/* Make j a tl_blocking job: fn(arg, flag) in class cls. */
void tl__pool_job_blocking(struct tl_job *j, tl_job_fn fn, void *arg, int cls);

/* 1 once j's loop is being destroyed: nobody will see its result. */
int tl__pool_loop_gone(const struct tl_job *j);

/* Reservations (for requests accepted now that may need a bounded slot
 * later: a request the driver runs that may fall back to the pool). Reserve
 * one queue slot on the loop's set: returns the set index (>= 0) or
 * -ENOBUFS / the setup error. Unreserve gives back a slot that was not used. */
int tl__pool_reserve(tl_loop *loop);
void tl__pool_unreserve(int set);

/*
 * Jobs the loop's driver runs instead of a worker. The record holds the
 * request's memory (so nothing the driver points at lives on a caller's
 * stack) and comes back through the core's pool_native hook at the op's
 * terminal, never through a worker or the result ring.
 *
 * begin takes j's op (kind: its tl_kind; *o set) and marks the record the
 * driver's, keeping the reservation the kind put in j->rsv (or -1) for a
 * fallback: 0, or the op table's refusal (record and reservation given
 * back). The kind then submits *o through the core and reports the driver's
 * answer r to end: 0 counts the job submitted; on a refusal (the core has
 * undone the op) the reservation is given back, and the record too, except
 * for -ENOTSUP, which leaves it the caller's to submit to the pool instead.
 * end returns r.
 *
 * requeue moves a job the kind took back from the driver (native_retry) to
 * a worker through the reservation it holds, keeping its op (and id).
 */
int tl__pool_native_begin(tl_loop *loop, struct tl_pool_loop *pl, struct tl_job *j,
			  uint8_t kind, uint64_t token, struct tl_opslot **o);
int tl__pool_native_end(struct tl_pool_loop *pl, struct tl_job *j, int r);
void tl__pool_requeue(tl_loop *loop, struct tl_job *j);

#endif
