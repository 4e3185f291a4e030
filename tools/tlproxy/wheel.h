/* tools/tlproxy/wheel.h: the wheel of waits with no operation (a queued client, a peek waiting for a big buffer) and the idle deadlines of forwarding connections: static inline, used by every stage. */
#ifndef TLP_WHEEL_H
#define TLP_WHEEL_H

/* Calls: includes state.h only; the sweep that ends what is due is the
 * shard's (shard.c, TLP_MSG_SWEEP). */
#include "state.h"

/*
 * A forwarding connection's timeouts are the loop's own deadlines, with no
 * timer per connection: each stream has an idle deadline (tl_idle_deadline:
 * timeouts.idle, then the FIN timeout once a side has closed), so a side
 * quiet that long ends its pending operations with -ETIMEDOUT; the read of
 * a connection whose PROXY header or ClientHello is awaited has a read
 * deadline (sni_timeout); a connect has its own. What is left are waits
 * with no operation to put a deadline on: a client in the queue, and one
 * waiting for a peek buffer. Those sit in a lazy wheel: one repeating timer
 * per shard moves `tick` on, each waiting connection sits in the bucket of
 * the tick at which its deadline falls, and when a bucket comes up one
 * whose deadline passed is ended. A deadline further than the wheel reaches
 * is looked at after one turn of the wheel. So these timeouts are enforced
 * within one tick of being due.
 */

/*
 * A forwarding connection's timeouts are the loop's own deadlines, with no
 * timer per connection: each stream has an idle deadline (tl_idle_deadline:
 * timeouts.idle, then the FIN timeout once a side has closed), so a side
 * quiet that long ends its pending operations with -ETIMEDOUT; the read of
 * a connection whose PROXY header or ClientHello is awaited has a read
 * deadline (sni_timeout); a connect has its own. What is left are waits
 * with no operation to put a deadline on: a client in the queue, and one
 * waiting for a peek buffer. Those sit in a lazy wheel: one repeating timer
 * per shard moves `tick` on, each waiting connection sits in the bucket of
 * the tick at which its deadline falls, and when a bucket comes up one
 * whose deadline passed is ended. A deadline further than the wheel reaches
 * is looked at after one turn of the wheel. So these timeouts are enforced
 * within one tick of being due.
 */

static inline void wheel_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (c->wslot == NONE)
		return;
	if (c->wprev != NONE)
		sh->c[c->wprev].wnext = c->wnext;
	else
		sh->wheel[c->wslot & W_MASK] = c->wnext;
	if (c->wnext != NONE)
		sh->c[c->wnext].wprev = c->wprev;
	c->wslot = NONE;
}

static inline void wheel_put(struct tlp_shard *sh, struct tlp_conn *c, uint32_t due)
{
	uint32_t ci = CI(sh, c), *head;

	wheel_del(sh, c);
	if ((int32_t)(due - sh->tick) <= 0)
		due = sh->tick + 1;
	else if (due - sh->tick >= W_SIZE)
		due = sh->tick + W_SIZE - 1;
	head = &sh->wheel[due & W_MASK];
	c->wslot = due;
	c->wprev = NONE;
	c->wnext = *head;
	if (*head != NONE)
		sh->c[*head].wprev = ci;
	*head = ci;
}

/* The tick at which c's wait ends, and the cause; NONE for a connection
 * that waits on an operation (its deadline is the loop's). */
static inline uint32_t deadline(const struct tlp_conn *c, int *cause)
{
	const struct tlp_lrt *l = c->lr;

	switch (c->state) {
	case C_PEEK:
		/* Waiting for a big buffer: no read to put a deadline on. */
		*cause = TLP_END_PEEK_TIMEOUT;
		return c->flags & F_PKWAIT ? c->t_state + l->peek_t : NONE;
	case C_QUEUED:
		*cause = TLP_END_QUEUE_TIMEOUT;
		return c->t_state + l->queue_t;
	default:
		*cause = TLP_END_DONE;
		return NONE;
	}
}

/* Why a connection whose deadline fired ends: idle, or a FIN timeout. */
static inline int idle_cause(const struct tlp_conn *c)
{
	if ((c->flags & F_EOF(0)) && !(c->flags & F_EOF(1)))
		return TLP_END_CLIENT_FIN;
	if ((c->flags & F_EOF(1)) && !(c->flags & F_EOF(0)))
		return TLP_END_SERVER_FIN;
	return TLP_END_IDLE;
}

/* Both streams' idle deadline: timeouts.idle, or the FIN timeout of the
 * side that closed first. */
static inline uint64_t idle_ns(const struct tlp_conn *c)
{
	const struct tlp_listener_cfg *lc = c->lr->cfg;

	if ((c->flags & F_EOF(0)) && !(c->flags & F_EOF(1)))
		return lc->client_fin_ns;
	if ((c->flags & F_EOF(1)) && !(c->flags & F_EOF(0)))
		return lc->server_fin_ns;
	return lc->idle_timeout_ns;
}

static inline void arm_idle(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint64_t ns = idle_ns(c);

	for (int s = 0; s < 2; s++)
		if (!tl_handle_eq(c->h[s], TL_HANDLE_NONE))
			tl_idle_deadline(sh->loop, c->h[s], ns);
}

static inline void wheel_arm(struct tlp_shard *sh, struct tlp_conn *c)
{
	int cause;

	wheel_put(sh, c, deadline(c, &cause));
}

#endif /* TLP_WHEEL_H */
