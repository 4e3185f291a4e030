/* lib/deadline.c: deadlines without a timer per connection: idle deadlines per stream, deadlines per read and per connect, in one heap per loop (contract 2.4, 4.9). */
#include <errno.h>
#include "core.h"

/*
 * A server wants every connection to end its operations when the peer goes
 * quiet, and a read to give up at a point in time, without a timer handle
 * per connection and without paying for a busy connection's traffic. So
 * each loop has one heap of deadlines, sized at tl_loop_new for every
 * handle slot (idle deadlines) and every op slot (read and connect
 * deadlines), and a deadline is acted on in one way only: its op gets the
 * cancellation flag with TL_OPF_TIMEDOUT through the core's cancel path
 * (tl__op_cancel), and the driver's acknowledgement brings the terminal,
 * which tl__op_event reports as -ETIMEDOUT (bytes already taken come first,
 * contract 2.5). A cancellation the driver refuses changes nothing: the
 * deadline stays due and the next turn asks again (2.4). No driver knows
 * deadlines exist.
 *
 * An op deadline (tl_read_deadline, a connect's deadline_ns) is one heap
 * entry at its absolute time, removed when the op ends or its end is asked
 * for.
 *
 * An idle deadline follows a handle's progress. A period starts when it is
 * armed, at every progress, and when an op is submitted to a handle that
 * had none pending (or whose last period lapsed), so only time with work
 * pending counts; it ends idle_ns later. Progress is every completion of
 * one of its ops that succeeded (a read or receive that moved bytes or saw
 * the end of stream, a write, shutdown or connect that completed; a Stopped
 * terminal is not). When a period ends, each op of the handle that is not
 * already being cancelled ends with -ETIMEDOUT, each once, and the period
 * lapses: nothing more is reported until a new one starts and ends. A
 * period that ends with nothing pending reports nothing.
 *
 * Progress must cost next to nothing, since it comes with every completion
 * of a busy stream. It does not touch the heap: the handle's entry stays
 * where it was, and only when that entry comes due does expire() look at
 * when the current period started and, if it has moved, sift the entry to
 * the new end (the lazy re-arm of libev's documentation). Nor does it read
 * the clock: the handle joins a restart list (once per turn, three stores;
 * later completions in the turn find it there), and the turn stamps every
 * handle on it with the clock reading it takes right after its poll and at
 * its start (tl__dl_resolve). That reading is never earlier than the events,
 * so a deadline never fires early; it is late by at most the batch's
 * processing, or by the time the host spent between turns for a submission
 * or completion made there (as every timer is).
 *
 * Costs, n the entries in the heap: arming, moving or clearing a deadline,
 * O(log n); progress and submissions, O(1) with no clock read; a due entry
 * that finds progress, one O(log n) sift, at most once per idle period of a
 * handle however busy it is; a fire, one O(log n) removal and one driver
 * cancellation per pending op. The turn waits no longer than the heap's
 * first entry (an early one after progress costs one extra wake per idle
 * period). A loop with no idle deadline armed skips every hook on one test.
 */

#define IDLE_MAX (1ull << 62) /* longest idle_ns: due times cannot wrap */

int tl__dl_init(tl_loop *l)
{
	struct tl_deadlines *dl = &l->dl;
	dl->hbase = l->cfg.max_handles;
	dl->nidle = 0;
	dl->restart = TL_NIL;
	dl->h = calloc(l->cfg.max_handles, sizeof *dl->h);
	if (!dl->h)
		return -ENOMEM;
	if (tl__heap_init(&dl->heap, l->cfg.max_handles + l->cfg.max_ops) < 0) {
		free(dl->h);
		dl->h = NULL;
		return -ENOMEM;
	}
	return 0;
}

void tl__dl_free(tl_loop *l)
{
	free(l->dl.h);
	l->dl.h = NULL;
	tl__heap_free(&l->dl.heap);
}

/* Place heap slot at `at`, whether or not it is there already. */
static void place(struct tl_deadlines *dl, uint32_t slot, uint64_t at)
{
	if (tl__heap_has(&dl->heap, slot))
		tl__heap_move(&dl->heap, slot, at);
	else
		tl__heap_push(&dl->heap, slot, at, slot);
}

void tl__dl_op_arm(tl_loop *l, struct tl_opslot *o, uint64_t at)
{
	o->flags |= TL_OPF_DEADLINE;
	place(&l->dl, l->dl.hbase + o->idx, at);
}

uint64_t tl__dl_next(const tl_loop *l)
{
	const struct tl_heap_ent *e = tl__heap_top(&l->dl.heap);
	return e ? e->at : UINT64_MAX;
}

/* ---- idle deadlines ---- */

int tl_idle_deadline(tl_loop *l, tl_handle id, uint64_t idle_ns)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_STREAM || (h->flags & TL_HF_CLOSING) || idle_ns > IDLE_MAX)
		return -EINVAL;
	struct tl_idle *s = &l->dl.h[h->idx];
	/* Only RESTART survives: its list link stays valid. */
	s->flags &= TL_IDLE_RESTART;
	if (!idle_ns) {
		tl__heap_remove(&l->dl.heap, h->idx);
		l->dl.nidle -= s->idle_ns != 0;
		s->idle_ns = 0;
		return 0;
	}
	l->dl.nidle += s->idle_ns == 0;
	s->idle_ns = idle_ns;
	s->last = tl_now(l);
	s->flags |= TL_IDLE_QUEUED;
	/* Moved, not left lazy: a shorter duration must not wait for the old
	 * entry. */
	place(&l->dl, h->idx, s->last + idle_ns);
	return 0;
}

void tl__dl_release(tl_loop *l, struct tl_hslot *h)
{
	struct tl_idle *s = &l->dl.h[h->idx];
	if (!s->idle_ns)
		return;
	tl__heap_remove(&l->dl.heap, h->idx);
	l->dl.nidle--;
	s->idle_ns = 0;
	s->flags &= TL_IDLE_RESTART;
}

void tl__dl_resolve(tl_loop *l, uint64_t now)
{
	struct tl_deadlines *dl = &l->dl;
	for (uint32_t i = dl->restart; i != TL_NIL;) {
		struct tl_idle *s = &dl->h[i];
		uint32_t next = s->next;
		s->flags &= (uint8_t)~(TL_IDLE_RESTART | TL_IDLE_LAPSED);
		if (s->idle_ns) {
			s->last = now;
			if (!(s->flags & TL_IDLE_QUEUED)) {
				s->flags |= TL_IDLE_QUEUED;
				tl__heap_push(&dl->heap, i, now + s->idle_ns, i);
			}
		}
		i = next;
	}
	dl->restart = TL_NIL;
}

/* End every op of h not already ending with -ETIMEDOUT. 0 or the first
 * refusal (the ops before it stay timed out; the next turn goes on). */
static int fire(tl_loop *l, struct tl_hslot *h)
{
	for (uint32_t i = h->head; i != TL_NIL;) {
		struct tl_opslot *o = &l->o[i];
		uint32_t next = o->next; /* a synchronous acknowledgement unlinks o */
		if (!(o->flags & TL_OPF_CANCEL)) {
			int r = tl__op_cancel(l, o, TL_OPF_TIMEDOUT);
			if (r < 0)
				return r;
		}
		i = next;
	}
	return 0;
}

int tl__dl_expire(tl_loop *l, uint64_t now)
{
	struct tl_deadlines *dl = &l->dl;
	for (;;) {
		const struct tl_heap_ent *e = tl__heap_top(&dl->heap);
		if (!e || e->at > now)
			return 0;
		uint32_t slot = e->slot;
		if (slot >= dl->hbase) {
			struct tl_opslot *o = &l->o[slot - dl->hbase];
			int r = tl__op_cancel(l, o, TL_OPF_TIMEDOUT);
			if (r < 0 && r != -EALREADY)
				return r; /* still due: retried next turn */
			tl__dl_op_disarm(l, o);
			continue;
		}
		struct tl_idle *s = &dl->h[slot];
		if (tl_unlikely(!s->idle_ns)) { /* cleared and released entries leave */
			tl__heap_remove(&dl->heap, slot);
			continue;
		}
		if (!(s->flags & TL_IDLE_FIRING) && s->last + s->idle_ns > now) {
			/* Progress since the entry was placed: the lazy re-arm. */
			tl__heap_move(&dl->heap, slot, s->last + s->idle_ns);
			continue;
		}
		tl__heap_remove(&dl->heap, slot);
		s->flags = (uint8_t)((s->flags & ~TL_IDLE_QUEUED) | TL_IDLE_FIRING);
		int r = fire(l, &l->h[slot]);
		if (r < 0) {
			s->flags |= TL_IDLE_QUEUED;
			tl__heap_push(&dl->heap, slot, now, slot);
			return r;
		}
		s->flags = (uint8_t)((s->flags & ~TL_IDLE_FIRING) | TL_IDLE_LAPSED);
	}
}

/* ---- read deadlines ---- */

int tl_read_deadline(tl_loop *l, tl_op id, uint64_t deadline_ns)
{
	uint32_t slot = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || slot >= l->cfg.max_ops)
		return -ENOENT;
	struct tl_opslot *o = &l->o[slot];
	if (o->gen != tl__id_gen(id.v) || !(o->flags & (TL_OPF_LIVE | TL_OPF_OWED)))
		return -ENOENT;
	/* The kind first, so that the answer does not depend on whether the
	 * driver completed the op already. */
	if (o->code != TL_OP_READ && o->code != TL_OP_RECV)
		return -EINVAL;
	/* Its end already asked for (or its terminal queued after that): the
	 * same answer as a second tl_cancel. */
	if (o->flags & TL_OPF_CANCEL)
		return -EALREADY;
	if (!(o->flags & TL_OPF_LIVE))
		return -ENOENT;
	if (deadline_ns)
		tl__dl_op_arm(l, o, deadline_ns);
	else
		tl__dl_op_disarm(l, o);
	return 0;
}
