/* lib/sysmod.h: what the contract 5 modules (poll, proc, signal, tty, watch, ewait, dns) share with the core and each other; never seen by drivers. */
#ifndef TL_SYSMOD_H
#define TL_SYSMOD_H

#include "core.h"

/*
 * The modules of contract section 5 need one thing from a driver: waiting
 * for an OS descriptor to be ready (TL_OP_POLL, drivers/driver.h). What
 * they do with that readiness (reap a child, read a terminal, read an
 * inotify queue, let c-ares read its socket) runs in the core, here:
 *
 *  - A foreign descriptor's poll (lib/poll.c, kind TL_K_POLL) goes to the
 *    driver multishot and each readiness becomes its completion directly.
 *  - Every other poll op is one-shot in the driver (poll.multi 0, whatever
 *    TL_OPF_MULTI says of it to the host) and "intercepted": its kind names the
 *    module that owns it (struct tl_pollkind). When the driver reports the
 *    readiness, the op leaves the driver and joins the loop's ready list;
 *    after the turn's OS wait the module acts on it (tl__poll_run) and
 *    either finishes the op, arms it again, or parks it until a lease comes
 *    back. Acting after the wait, never inside the driver's poll(), keeps
 *    drivers free of re-entrant submits and cancels.
 *
 * Signals and external waits use no driver at all: a process-wide table of
 * loops (struct tl_xloop, lib/signal.c) lets a signal handler or another
 * thread mark a loop and wake it through its poster; the turn collects the
 * marks (tl__sys_run).
 */

/* ---- the turn's hooks (sys.c) ---- */

/* Work waits for the turn (a ready op, a signal, a notified wait): it must
 * not block. */
int tl__sys_ready(tl_loop *l);
/* The earliest deadline of the modules (UINT64_MAX: none). */
uint64_t tl__sys_deadline(tl_loop *l);
/* After the OS wait: collect signals, finish external waits, act on ready
 * ops, fire the modules' deadlines. */
void tl__sys_run(tl_loop *l, uint64_t now);
/* tl_loop_destroy: ops a module still has to finish off the driver. */
int tl__sys_busy(const tl_loop *l);
/* tl_loop_destroy, after every op ended: free the modules' state. */
void tl__sys_destroy(tl_loop *l);
/* Release what a contract 5 handle holds (its Closed was handed out). */
void tl__sys_release(tl_loop *l, struct tl_hslot *h);
/* A handle that lives exactly as long as its one op (poll, signal, watch):
 * the op's terminal is followed by the handle's Closed. */
static inline int tl__sys_one_op(const struct tl_hslot *h)
{
	return h->type == TL_H_POLL || h->type == TL_H_SIGNAL || h->type == TL_H_WATCH;
}

/* ---- the process's table of loops (xloop.c) ---- */

/* The part of a loop that signal handlers and other threads reach: one
 * entry of a static table, so that a stale pointer never names freed
 * memory; users counts those inside the entry now, so that the loop's
 * poster is released only once nobody can still wake it. Signals are 1..64
 * (bit s - 1). */
#define TL_XLOOPS 1024
struct tl_xloop {
	struct tl_poster *_Atomic poster; /* NULL: the entry is free */
	_Atomic int users;
	_Atomic uint64_t sigmask;         /* signals with a subscription on this loop */
	_Atomic int sigpending;           /* a subscribed signal arrived since the last turn */
	_Atomic uint32_t sigcount[64];    /* ... how many of each */
	_Atomic uint64_t ewmask;          /* hash bits of the addresses it waits on (ewait.c) */
	_Atomic int ewnotified;           /* a notify matched one of those bits */
};
/* l's entry (l->x), taken at the first use: 0, -ENOBUFS (table full). */
int tl__xloop_get(tl_loop *l);
/* Give l's entry back (tl_loop_destroy). */
void tl__xloop_put(tl_loop *l);
/* For each live entry whose field at mask_off (sigmask or ewmask) shares a
 * bit with bits: fn(entry) with its poster held live. Async-signal-safe;
 * returns how many entries matched. */
uint32_t tl__xloop_each(size_t mask_off, uint64_t bits,
			void (*fn)(struct tl_xloop *x, struct tl_poster *p, void *arg), void *arg);

/* ---- poll ops (poll.c) ---- */

/* Where an intercepted poll op is while off the driver (o->poll.where). */
enum { TL_PW_NONE = 0, TL_PW_READY, TL_PW_LEASE };

/* A module that owns intercepted poll ops of one kind. */
struct tl_pollkind {
	/* Act on o's readiness: res is the revents, a negative errno from the
	 * driver, or 0 when none is known (a first try, a lease came back).
	 * o is on no list and not in the driver. Cancellation requested shows
	 * in o->flags. */
	void (*ready)(tl_loop *l, struct tl_opslot *o, int32_t res);
	/* Cancellation or stop of o was asked (TL_OPF_CANCEL is set): 0, or a
	 * negative errno (the core then clears the flags again). NULL: the
	 * common way (tl__poll_cancel). */
	int (*cancel)(tl_loop *l, struct tl_opslot *o);
};
extern const struct tl_pollkind tl__proc_kind, tl__tty_kind, tl__watch_kind, tl__dns_kind;

/* The driver has TL_CAP_POLL. */
static inline int tl__can_poll(const tl_loop *l)
{
	return (l->dv->caps & TL_CAP_POLL) != 0;
}
/* Is o an intercepted poll op (a module's, not a foreign descriptor's)? */
static inline int tl__poll_intercepted(const struct tl_opslot *o)
{
	return o->code == TL_OP_POLL && o->kind != TL_K_POLL;
}
/* Hand o (poll.fd and poll.events set) to the driver: 0, or the driver's
 * refusal (then o is as before: not native). */
int tl__poll_arm(tl_loop *l, struct tl_opslot *o);
/* Put o on the ready list with res (0: try, no readiness known). */
void tl__poll_ready(tl_loop *l, struct tl_opslot *o, int32_t res);
/* Park o until a lease is released. */
void tl__poll_lease_wait(tl_loop *l, struct tl_opslot *o);
/* Take o off whichever of the core's lists holds it. */
void tl__poll_unlist(tl_loop *l, struct tl_opslot *o);
/* The driver reported o's (terminal) readiness: o joins the ready list. */
void tl__poll_native_event(tl_loop *l, struct tl_opslot *o, int64_t res);
/* Cancellation of an intercepted op asked: the module's way, or the
 * common one (cancel the driver's poll, or finish at the next run). */
int tl__poll_cancel(tl_loop *l, struct tl_opslot *o);
/* Act on the ready list as it is now (sys.c calls it). */
void tl__poll_run(tl_loop *l);
/* A lease came back: ops waiting for one go to the ready list. */
void tl__poll_lease_back(tl_loop *l);
/* A free lease for a read the core makes itself, from the driver where it
 * keeps the free ones (driver.h lease_take): its id or TL_NO_LEASE. */
uint32_t tl__lease_take(tl_loop *l);
/* Retire o without a completion: internal ops the host never saw (the
 * resolver's socket polls). Gives back its slot and credit, and queues its
 * handle's Closed if that was the last op of a closing handle (loop.c). */
void tl__op_retire_silent(tl_loop *l, struct tl_opslot *o);

/* ---- cancellation of the core-only codes (signal.c, ewait.c, dns.c) ---- */

void tl__signal_cancel(tl_loop *l, struct tl_opslot *o);
void tl__ewait_cancel(tl_loop *l, struct tl_opslot *o);
void tl__dns_cancel(tl_loop *l, struct tl_opslot *o);

/* ---- the modules' turn work (called by sys.c) ---- */

/* The core's own interest in signo on l (on 1: one more, 0: one less),
 * beside the host's subscriptions: the process's handler is held and the
 * signal counted for l. 0 or a negative errno (tl_signal_start's). */
int tl__signal_inner(tl_loop *l, int signo, int on);
/* Did signo come since the last call (for the core's own interest)? Valid
 * after the turn's tl__signal_run. */
int tl__signal_inner_hit(tl_loop *l, int signo);
int tl__signal_ready(tl_loop *l);
void tl__signal_run(tl_loop *l);
void tl__signal_destroy(tl_loop *l);
int tl__ewait_ready(tl_loop *l);
uint64_t tl__ewait_deadline(tl_loop *l);
void tl__ewait_run(tl_loop *l, uint64_t now);
void tl__ewait_destroy(tl_loop *l);
uint64_t tl__proc_deadline(tl_loop *l);
void tl__proc_run(tl_loop *l, uint64_t now);
void tl__proc_destroy(tl_loop *l);
void tl__proc_release(tl_loop *l, struct tl_hslot *h);
/* Children not reaped yet that no driver op waits for (no pidfd). */
int tl__proc_waiting(const tl_loop *l);
void tl__tty_release(tl_loop *l, struct tl_hslot *h);
void tl__watch_release(tl_loop *l, struct tl_hslot *h);
uint64_t tl__dns_deadline(tl_loop *l);
void tl__dns_run(tl_loop *l, uint64_t now);
void tl__dns_release(tl_loop *l, struct tl_hslot *h);
void tl__dns_destroy(tl_loop *l);

/* Terminal and stdio handles take the stream calls (stream.c routes them
 * here, tty.c). */
int tl__stdio_read(tl_loop *l, struct tl_hslot *h, void *buf, uint32_t len, uint16_t flags,
		   uint64_t token, tl_op *oid);
int tl__stdio_writev(tl_loop *l, struct tl_hslot *h, const tl_iovec *iov, int n,
		     uint64_t token, tl_op *oid);

#endif
