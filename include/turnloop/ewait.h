/* turnloop/ewait.h: a loop waits on a 64-bit value that other threads update and notify (contract 5: external waits). */
#ifndef TURNLOOP_EWAIT_H
#define TURNLOOP_EWAIT_H

#ifdef __cplusplus
/* C++ has no _Atomic qualifier before C++23: take a plain pointer there. */
#define TL_EWAIT_ATOMIC
#else
#define TL_EWAIT_ATOMIC _Atomic
#endif

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Wait, on loop, until the 64-bit value at addr differs from expected (a
 * futex-like condition other threads update), or until deadline_ns
 * (absolute, tl_now() clock; 0: no deadline). One terminal TL_K_EWAIT
 * completion: result 0 once *addr != expected was seen, -ETIMEDOUT at the
 * deadline, -ECANCELED after tl_cancel; u.ewait.value is *addr as last
 * read. If *addr already differs, the wait completes in the next turn with
 * result 0. No driver is involved: works on every driver (on the
 * simulation driver the deadline is virtual time).
 *
 * The loop looks at *addr again only when notified: a thread that changes
 * the value calls tl_ewait_notify(addr) afterwards. It may store with any
 * memory order: the notify orders the store before its check of the
 * waiting loops, and a wait registers before it reads the value, so no
 * change followed by a notify is missed. A change without a notify is seen
 * at the next notify of any address that shares the wait's hash bit, or
 * never.
 *
 * addr must stay valid until the terminal completion and be 8-byte
 * aligned. Returns 0 and sets *op, or -EINVAL (addr NULL or misaligned, op
 * NULL), -ENOBUFS (op table full, or more than 1024 loops of the process
 * use signals and external waits at once), -ENOMEM (the loop's first wait
 * could not make its state).
 */
int tl_ewait(tl_loop *loop, const TL_EWAIT_ATOMIC uint64_t *addr, uint64_t expected,
	     uint64_t deadline_ns, uint64_t token, tl_op *op);

/*
 * Wake every loop waiting on addr (and, rarely, a loop waiting on another
 * address with the same hash bit, which then only looks again), after the
 * caller changed *addr. Any thread; async-signal-safe; no lock: atomics and
 * at most one eventfd write per woken loop, and only if it is parked.
 * Returns how many loops it woke (0 when none waits), or -EINVAL (addr
 * NULL).
 */
int tl_ewait_notify(const TL_EWAIT_ATOMIC uint64_t *addr);

#ifdef __cplusplus
}
#endif
#endif
