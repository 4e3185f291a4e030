/* lib/ewait.c: external waits: a loop waits on a 64-bit value other threads change and notify. */
#include <errno.h>
#include <stdlib.h>
#include "sysmod.h"
#include "turnloop/ewait.h"

/*
 * A notify must find the loops waiting on its address without a lock (it
 * may come from a signal handler) and without a per-address table (which
 * would allocate): each loop publishes, in its entry of the process's table
 * (struct tl_xloop), a 64-bit hash set of the addresses it waits on. A
 * notify wakes the loops whose set has its address's bit; the woken loop
 * reads the values of all its waits again. A shared bit costs a spurious
 * look, never a lost wake.
 *
 * The race that matters: a wait registers (sets its bit) and only then
 * reads the value; a notify follows the changer's store and only then
 * reads the bits. With a full fence between the two steps on both sides,
 * at least one of them sees the other: the wait reads the new value, or
 * the notify sees the bit.
 */

struct tl_ewloc {
	uint32_t head, tail, n; /* the waits (u.ew list), oldest first */
	uint64_t seq;
	struct tl_heap deadlines; /* over op slots */
};

static uint64_t bit_of(const void *addr)
{
	uint64_t k = (uint64_t)(uintptr_t)addr >> 3;
	return 1ull << ((k * 0x9e3779b97f4a7c15ull) >> 58);
}

static int loc_get(tl_loop *l)
{
	if (l->ew)
		return 0;
	int r = tl__xloop_get(l);
	if (r < 0)
		return r;
	struct tl_ewloc *e = calloc(1, sizeof *e);
	if (!e)
		return -ENOMEM;
	if (tl__heap_init(&e->deadlines, l->cfg.max_ops) < 0) {
		free(e);
		return -ENOMEM;
	}
	e->head = e->tail = TL_NIL;
	l->ew = e;
	return 0;
}

static void w_unlink(tl_loop *l, struct tl_opslot *o)
{
	struct tl_ewloc *e = l->ew;
	if (o->u.ew.prev == TL_NIL)
		e->head = o->u.ew.next;
	else
		l->o[o->u.ew.prev].u.ew.next = o->u.ew.next;
	if (o->u.ew.next == TL_NIL)
		e->tail = o->u.ew.prev;
	else
		l->o[o->u.ew.next].u.ew.prev = o->u.ew.prev;
	e->n--;
	tl__heap_remove(&e->deadlines, o->idx);
}

/* Publish the bits of the waits that remain (only ever drops bits no wait
 * needs: every remaining wait's bit stays set throughout). */
static void republish(tl_loop *l)
{
	uint64_t m = 0;
	for (uint32_t i = l->ew->head; i != TL_NIL; i = l->o[i].u.ew.next)
		m |= bit_of(l->o[i].u.ew.addr);
	atomic_store(&l->x->ewmask, m);
}

static void finish(tl_loop *l, struct tl_opslot *o, int64_t res)
{
	uint64_t v = atomic_load(o->u.ew.addr);
	w_unlink(l, o);
	tl_completion *c = tl__op_event(l, o, res, TL_F_TERMINAL, TL_NO_LEASE);
	if (c)
		c->u.ewait.value = v;
}

int tl_ewait(tl_loop *l, const _Atomic uint64_t *addr, uint64_t expected, uint64_t deadline,
	     uint64_t token, tl_op *oid)
{
	if (!addr || ((uintptr_t)addr & 7) || !oid)
		return -EINVAL;
	int r = loc_get(l);
	if (r < 0)
		return r;
	struct tl_opslot *o;
	r = tl__op_new(l, NULL, TL_OP_EWAIT, TL_K_EWAIT, token, &o);
	if (r < 0)
		return r;
	struct tl_ewloc *e = l->ew;
	o->u.ew.addr = addr;
	o->u.ew.expected = expected;
	o->u.ew.next = TL_NIL;
	o->u.ew.prev = e->tail;
	if (e->tail == TL_NIL)
		e->head = o->idx;
	else
		l->o[e->tail].u.ew.next = o->idx;
	e->tail = o->idx;
	e->n++;
	if (deadline)
		tl__heap_push(&e->deadlines, o->idx, deadline, e->seq++);
	atomic_fetch_or(&l->x->ewmask, bit_of(addr));
	atomic_thread_fence(memory_order_seq_cst);
	/* Already changed: complete in this loop's next turn (a notify mark
	 * makes the turn look). */
	if (atomic_load(addr) != expected)
		atomic_store(&l->x->ewnotified, 1);
	*oid = tl__op_id(l, o);
	return 0;
}

static void wake(struct tl_xloop *x, struct tl_poster *p, void *arg)
{
	(void)arg;
	atomic_store(&x->ewnotified, 1);
	tl_poster_wake(p);
}

int tl_ewait_notify(const _Atomic uint64_t *addr)
{
	if (!addr)
		return -EINVAL;
	atomic_thread_fence(memory_order_seq_cst);
	return (int)tl__xloop_each(offsetof(struct tl_xloop, ewmask), bit_of(addr), wake, NULL);
}

void tl__ewait_cancel(tl_loop *l, struct tl_opslot *o)
{
	finish(l, o, 0); /* the cancel flag makes it -ECANCELED */
	republish(l);
}

int tl__ewait_ready(tl_loop *l)
{
	return l->x && atomic_load(&l->x->ewnotified);
}

uint64_t tl__ewait_deadline(tl_loop *l)
{
	const struct tl_heap_ent *t = tl__heap_top(&l->ew->deadlines);
	return t ? t->at : UINT64_MAX;
}

void tl__ewait_run(tl_loop *l, uint64_t now)
{
	struct tl_ewloc *e = l->ew;
	int changed = 0;
	if (l->x && atomic_exchange(&l->x->ewnotified, 0)) {
		for (uint32_t i = e->head; i != TL_NIL;) {
			struct tl_opslot *o = &l->o[i];
			i = o->u.ew.next;
			if (atomic_load(o->u.ew.addr) != o->u.ew.expected) {
				finish(l, o, 0);
				changed = 1;
			}
		}
	}
	const struct tl_heap_ent *t;
	while ((t = tl__heap_top(&e->deadlines)) && t->at <= now) {
		finish(l, &l->o[t->slot], -ETIMEDOUT);
		changed = 1;
	}
	if (changed)
		republish(l);
}

void tl__ewait_destroy(tl_loop *l)
{
	tl__heap_free(&l->ew->deadlines);
	free(l->ew);
	l->ew = NULL;
}
