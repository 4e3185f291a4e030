/* tools/tlproxy/queue.c: the queue: clients waiting for a server of a pool, first come first served across shards (the line; who gets a free slot is backend.c's). */
/* Calls: queue -> wheel, state, world. Nothing above it. */
#include "queue.h"
#include "wheel.h"

void tlp_q_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];

	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		lp->qhead = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		lp->qtail = c->qprev;
	c->qnext = c->qprev = NONE;
	lp->qlen--;
	sh->queued--;
	sh->queue_dirty = 1;
	atomic_store_explicit(&c->gp->head[sh->id],
			      lp->qhead != NONE ? sh->c[lp->qhead].ticket : UINT64_MAX,
			      memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->gp->waiting, 1, memory_order_relaxed);
	if (c->flags & F_QCOUNT) {
		atomic_fetch_sub_explicit(&c->lr->gl->queued, 1, memory_order_relaxed);
		c->flags &= ~F_QCOUNT;
	}
}

/* Queue c (every server full). 0, or -1 when the queue is full. */
int tlp_q_add(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];
	uint32_t max = c->lr->cfg->queue_max, ci = CI(sh, c);

	if (!max)
		return -1;
	if (atomic_fetch_add_explicit(&c->lr->gl->queued, 1, memory_order_relaxed) >= max) {
		atomic_fetch_sub_explicit(&c->lr->gl->queued, 1, memory_order_relaxed);
		return -1;
	}
	c->flags |= F_QCOUNT;
	c->ticket = atomic_fetch_add_explicit(&c->gp->ticket, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->gp->waiting, 1, memory_order_relaxed);
	c->state = C_QUEUED;
	c->t_state = sh->tick;
	c->qnext = NONE;
	c->qprev = lp->qtail;
	if (lp->qtail != NONE) {
		sh->c[lp->qtail].qnext = ci;
	} else {
		lp->qhead = ci;
		atomic_store_explicit(&c->gp->head[sh->id], c->ticket, memory_order_relaxed);
	}
	lp->qtail = ci;
	lp->qlen++;
	sh->queued++;
	sh->queue_dirty = 1;
	wheel_arm(sh, c);
	return 0;
}
