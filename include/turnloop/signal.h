/* turnloop/signal.h: per-loop signal subscriptions (contract 5: signals). */
#ifndef TURNLOOP_SIGNAL_H
#define TURNLOOP_SIGNAL_H

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Subscribe loop to signal signo. Every loop subscribed to a signal gets
 * its own completion each time it arrives: a nonterminal TL_K_SIGNAL with
 * result = signo and aux = how many times it arrived since that
 * subscription's previous completion (repeats coalesce: aux > 1). Two
 * subscriptions to one signal on one loop each get it too. No driver is
 * involved: this works on every driver, the simulation driver included.
 *
 * How: the first subscription to signo in the process installs one
 * process-wide handler for it (sigaction, SA_RESTART) and saves the action
 * it replaces; the last one to end puts that action back. The handler only
 * counts the signal for each subscribed loop and wakes the loop through its
 * poster (async-signal-safe: atomics and at most one eventfd write per
 * loop); the loop's next turn delivers the completions, under its per-turn
 * budget. A signal that every thread of the process blocks is never
 * delivered (the sharded runtime's shard threads block SIGINT and SIGTERM:
 * the controlling thread takes those, and a shard's subscription is still
 * told, through its poster). Nothing chains to the replaced action.
 *
 * Like libuv's signal handles, a subscription keeps its loop alive
 * (tl_set_ref(h, 0) to not). The handle lives as long as its one op:
 * tl_stop(op) delivers Stopped and then the handle's Closed (token: the
 * op's token); tl_close(h, token) delivers Cancelled, then Closed.
 *
 * With a sharded runtime (turnloop/runtime.h, cfg.signals): its SIGINT and
 * SIGTERM handling is a hook on this same handler (tl_signal_hook), so
 * both are told: a subscription to SIGTERM gets its completion and the
 * runtime drains, and neither replaces the other. A shard's subscription
 * keeps its loop alive through a graceful drain: close it in on_drain.
 *
 * After fork(), the child's table of subscribed loops is cleared (a
 * pthread_atfork handler): a signal there reaches no loop of the parent.
 *
 * Returns 0 and sets *h and *op, or -EINVAL (h or op NULL; signo not in
 * 1..64, or SIGKILL, SIGSTOP, or a synchronous fault: SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGTRAP, SIGSYS; or a signal the C library reserves),
 * -ENOBUFS (handle or op table full, or more than 1024 loops of the process
 * use signals and external waits at once), -ENOMEM (the loop's first
 * subscription could not make its state).
 */
int tl_signal_start(tl_loop *loop, int signo, uint64_t token, tl_handle *h, tl_op *op);

/*
 * Run fn(signo) inside the process's handler for signo, after the
 * subscribed loops were marked: for a program (or the sharded runtime) that
 * must react in the handler itself. fn must be async-signal-safe. One hook
 * per signal; fn NULL removes it. The handler is installed while a hook or
 * a subscription exists, and the replaced action is put back when neither
 * does. Any thread. Returns 0, -EBUSY (another hook holds signo), -EINVAL
 * (signo as tl_signal_start refuses it), or sigaction's error.
 */
int tl_signal_hook(int signo, void (*fn)(int signo));

#ifdef __cplusplus
}
#endif
#endif
