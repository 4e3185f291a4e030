/* lib/internal.h: the loop's private structures (struct tl_loop, the poster), for the core's files only; drivers see drivers/driver.h. */
#ifndef TL_INTERNAL_H
#define TL_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include "turnloop/loop.h"
#include "driver.h"
#include "heap.h"
#include "os.h"
#include "mpsc.h"

/* Event classes with their own per-turn budget and queue reserve. */
enum { TL_CLS_NONE = 0, TL_CLS_NATIVE, TL_CLS_TIMER, TL_CLS_POST, TL_CLS_N };

/* Queue entry metadata, parallel to the completion ring. */
struct tl_qmeta {
	uint8_t cls;        /* TL_CLS_* of a nonterminal event */
	uint8_t referenced; /* holds an alive() reference */
	uint8_t closed;     /* a Closed record: release the handle on delivery */
	uint8_t op_terminal;/* a terminal of an op: frees its slot and credit */
	uint32_t hidx;      /* the handle the record names, TL_NIL if none */
	uint32_t oidx;
};

/* A posted message. */
struct tl_post_msg {
	uint64_t token, payload;
};

/* The cross-thread side of a loop: poster, notifier, room bits. Separately
 * reference-counted so that other threads may hold it past the loop. */
struct tl_poster {
	atomic_int refs;
	atomic_int closed;
	atomic_int state; /* TL_PARK_*: the notifier's view of the loop */
	tl__os_notifier wake; /* what the driver waits on beside its events */
	atomic_uint_fast64_t wakes_sent, wakes_coalesced;
	struct tl_mpsc posts;
	atomic_uint_fast64_t room_bits; /* set by loops we are waiting on */
	tl__os_mutex wmu; /* guards waiters */
	atomic_uint nwaiters; /* written under wmu, read without it by the consumer */
	uint32_t maxwaiters;
	struct tl_room_waiter { struct tl_poster *who; uint32_t bit; } *waiters;
	void (*on_last_put)(struct tl_poster *p); /* frees extras (pool port) */
	void *port; /* pool result port, owned here (see pool) */
};

enum { TL_PARK_RUNNING = 0, TL_PARK_PARKED = 1, TL_PARK_NOTIFIED = 2 };

/* The idle deadline of one handle slot (lib/deadline.c explains them). */
struct tl_idle {
	uint64_t idle_ns; /* 0: none */
	uint64_t last;    /* when the current idle period started */
	uint32_t next;    /* link in the restart list while TL_IDLE_RESTART */
	uint8_t flags;    /* TL_IDLE_* */
};
#define TL_IDLE_QUEUED 0x01  /* has its entry in the heap */
#define TL_IDLE_RESTART 0x02 /* on the restart list: a period starts at the next clock reading */
#define TL_IDLE_LAPSED 0x04  /* its period passed (fired or nothing pending): the next
			      * submission starts one */
#define TL_IDLE_FIRING 0x08  /* a fire the driver refused part of: retried, whatever progress */

/* Every deadline of a loop: one heap whose slots are the handle slots
 * (idle deadlines) followed by the op slots (read and connect deadlines,
 * heap slot hbase + op index), and the handles' idle state. */
struct tl_deadlines {
	struct tl_heap heap;
	struct tl_idle *h;   /* per handle slot */
	uint32_t hbase;      /* = max_handles */
	uint32_t nidle;      /* handles with an idle deadline: 0 skips every hook */
	uint32_t restart;    /* head of the restart list (handle slot), TL_NIL if empty */
};

struct tl_loop {
	const struct tl_driver *dv;
	struct tl_drv *d;
	uint32_t probed;     /* capability flags the driver found at init (probed_caps) */
	struct tl_poster *poster;
	uint32_t owner;
	tl__os_thread thread;
	tl_config cfg;
	uint64_t spin;       /* cfg.spin_ns where the driver and mode allow it, else 0 */
	uint64_t nap;        /* cfg.nap_ns likewise (not on Windows), else 0 */
	uint32_t batch;      /* native records the last turn's polls gathered (nap()) */
	uint32_t batch_reads; /* of them, reads that brought bytes, and those bytes */
	uint64_t batch_bytes;
	uint32_t in_reads;   /* reads that brought bytes, and their bytes, since the */
	uint64_t in_bytes;   /* loop began (wrapping): the batch is the difference */

	struct tl_hslot *h;
	uint32_t hfree, nhandles;
	struct tl_opslot *o;
	uint32_t ofree, nops;
	uint32_t outstanding; /* ops accepted whose terminal was not yet delivered */
	uint32_t native_pending;
	uint64_t refs;        /* alive() count */

	struct tl_heap timers;    /* over handle slots */
	struct tl_deadlines dl;   /* idle, read and connect deadlines (deadline.c) */
	uint64_t timer_seq;

	tl_completion *q;
	struct tl_qmeta *qm;
	uint32_t qcap, qhead, qlen;
	uint32_t buffered[TL_CLS_N];

	/* pooled buffers */
	uint8_t *lease_mem;
	uint32_t lease_size, lease_count;
	uint32_t *lease_free; /* stack of free ids */
	uint32_t lease_nfree;
	uint8_t *lease_out;   /* 1 while the host (or a dropped event) holds it */
	/* lpool.out: how many lease_out[] are 1; the rest of lpool is caps.c's */
	struct tl_lease_pool lpool;
	uint64_t *lease_owner;/* the stream a lease was read from (handle id), 0: none (caps.c) */

	/* The splice pipe pool (splice.c): slots, a stack of made pipes that
	 * are free and one of slots not made yet; pipe_slots is what the
	 * user's pipe budget lets this loop use. */
	struct tl_pipe *pipe;
	uint32_t pipe_slots, pipe_free, pipe_unmade;

	uint32_t room_ops[64]; /* op slot per room bit, TL_NIL if none */
	uint64_t room_used;

	/* Pool hooks, set by the pool module on first use: drain the result
	 * port under a budget, say whether results wait, cancel a job, and let
	 * go of every job when the loop is destroyed. */
	uint32_t (*pool_drain)(tl_loop *loop, uint32_t budget);
	int (*pool_ready)(tl_loop *loop);
	void (*pool_cancel)(tl_loop *loop, struct tl_opslot *op);
	void (*pool_detach)(tl_loop *loop);
	/* A file request the driver ran natively (driver fs_submit) reached
	 * its terminal: fill c's TL_K_FS payload from the raw result res and
	 * give the job record back. Called from tl__drv_event. */
	void (*pool_native)(tl_loop *loop, struct tl_opslot *op, tl_completion *c, int64_t res);
	/* Before that: 1 if the pool took the request over instead (a result
	 * only the native path gives, see pool/fs_native.c), so no event is
	 * reported. */
	int (*pool_native_retry)(tl_loop *loop, struct tl_opslot *op, int64_t res);
	void *pool; /* the pool module's per-loop state */

	/* Contract 5 (lib/sysmod.h): each module's per-loop state, made at its
	 * first use and freed by tl_loop_destroy; and the core's lists of
	 * TL_OP_POLL ops between readinesses (lib/poll.c). */
	struct tl_xloop *x;       /* signal.c: what signal handlers and other threads reach */
	struct tl_sigloc *sig;    /* signal.c */
	struct tl_ewloc *ew;      /* ewait.c */
	struct tl_procloc *proc;  /* proc.c */
	struct tl_dnsloc *dns;    /* dns.c */
	uint32_t pready_head, pready_tail;   /* readiness to act on in this turn */
	uint32_t plwait_head, plwait_tail;   /* waiting for a lease */

	uint64_t late_dropped; /* read bytes after a cancel dropped for want of room (see
				* tl__op_event); 0 unless a driver ignores tl__drv_room() */
	int in_turn;
	int close_retry; /* a close could not cancel every op: retry next turn */
	int destroying;
	tl_loop_stats st;
	uint64_t last_turn_end;
};

/* One pipe of the splice pool (splice.c). */
struct tl_pipe {
	int rfd, wfd;  /* -1 for a driver without OS pipes (sim) */
	uint32_t size; /* what it holds (F_GETPIPE_SZ) */
	uint32_t next; /* the free or unmade stack */
};

/* Core services used by the other modules of lib/ (pool, shards). */
int tl__op_new(tl_loop *loop, struct tl_hslot *h, uint8_t code, uint8_t kind, uint64_t token,
	       struct tl_opslot **out);
/* Queue an op's event (cancellation rules applied) and return the record so
 * the caller can fill its payload; NULL when the event was dropped (a
 * nonterminal event after a cancel request). Terminal events retire the op. */
tl_completion *tl__op_finish(tl_loop *loop, struct tl_opslot *op, int64_t res, uint32_t flags);
/* Undo an op made by tl__op_new whose submission was refused: nothing
 * happened, no completion is owed, alive() is as before. */
void tl__op_refuse(tl_loop *loop, struct tl_opslot *op);
/* Take the next place in the completion queue for a record of class cls
 * (referenced: it holds an alive() reference until handed out); the caller
 * fills it. Inline: every completion passes here. */
static inline tl_completion *tl__enqueue(tl_loop *l, int cls, int referenced)
{
	uint32_t i = l->qhead + l->qlen;
	if (i >= l->qcap)
		i -= l->qcap;
	l->qlen++;
	l->buffered[cls]++;
	l->refs += (uint64_t)referenced;
	l->qm[i] = (struct tl_qmeta){.cls = (uint8_t)cls, .referenced = (uint8_t)referenced,
				     .hidx = TL_NIL};
	tl_completion *c = &l->q[i];
	c->aux = 0;
	return c;
}
struct tl_opslot *tl__op_lookup(tl_loop *loop, tl_op id);
static inline tl_op tl__op_id(const tl_loop *loop, const struct tl_opslot *op)
{
	return (tl_op){tl__id_make(loop->owner, op->gen, op->idx)};
}
static inline tl_handle tl__h_id(const tl_loop *loop, const struct tl_hslot *h)
{
	return (tl_handle){tl__id_make(loop->owner, h->gen, h->idx)};
}

/* Poster internals (lib/poster.c). */
int tl__poster_new(uint32_t capacity, uint32_t waiters, struct tl_poster **out);
void tl__poster_close(struct tl_poster *p);
/* Notifier protocol around the OS wait. */
int tl__poster_begin(struct tl_poster *p);   /* 1 if a wake arrived */
int tl__poster_park(struct tl_poster *p);    /* 0: parked; 1: a wake came, do not block */
void tl__poster_running(struct tl_poster *p);
/* 1 if a wake came since tl__poster_park: polls made while parked (a spin,
 * a nap) take the notifier's event, so they must ask before blocking. */
int tl__poster_woken(struct tl_poster *p);
void tl__poster_signal(struct tl_poster *p); /* fire the notifier (embed mode) */
void tl__poster_wake_waiters(struct tl_poster *p);
/* Register who to hear when p has room: 0 registered, 1 room is there now
 * (nothing registered), -ENOBUFS, -EPIPE. */
int tl__poster_add_waiter(struct tl_poster *p, struct tl_poster *who, uint32_t bit);
/* The consumer freed cells: wake the waiters, if any. */
void tl__poster_room_check(struct tl_poster *p);
int tl__poster_del_waiter(struct tl_poster *p, struct tl_poster *who, uint32_t bit);

#endif
