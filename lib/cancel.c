/* lib/cancel.c: cancel, stop and close (contract 2): asking drivers, retrying what they could not take, and the handles' reference counts and user pointers. */
#include <errno.h>
#include "sysmod.h"

/* ---- cancel, stop, close ---- */

int tl__op_cancel(tl_loop *l, struct tl_opslot *o, uint16_t why)
{
	if (o->flags & TL_OPF_CANCEL)
		return -EALREADY;
	uint16_t add = TL_OPF_CANCEL | why;
	switch (o->code) {
	case TL_OP_TIMER:
		tl__heap_remove(&l->timers, o->hidx);
		o->flags |= add;
		tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	case TL_OP_ROOM:
		o->flags |= add;
		if (tl__poster_del_waiter(o->u.room.target, l->poster, o->u.room.bit)) {
			l->room_ops[o->u.room.bit] = TL_NIL;
			l->room_used &= ~((uint64_t)1 << o->u.room.bit);
			tl_poster_put(o->u.room.target);
			tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		}
		/* else the room bit is already on its way and finishes the op. */
		return 0;
	case TL_OP_POOL:
		o->flags |= add;
		if (l->pool_cancel)
			l->pool_cancel(l, o);
		return 0;
	case TL_OP_SIGNAL:
		o->flags |= add;
		tl__signal_cancel(l, o);
		return 0;
	case TL_OP_EWAIT:
		o->flags |= add;
		tl__ewait_cancel(l, o);
		return 0;
	case TL_OP_DNS:
		o->flags |= add;
		tl__dns_cancel(l, o);
		return 0;
	case TL_OP_POLL: {
		if (!tl__poll_intercepted(o))
			break;
		o->flags |= add;
		int r = tl__poll_cancel(l, o);
		if (r < 0 && (o->flags & TL_OPF_LIVE))
			o->flags &= (uint16_t)~add;
		return r < 0 ? r : 0;
	}
	default:
		break;
	}
	/* Set the flags first: a driver may acknowledge synchronously. */
	o->flags |= add;
	int r = l->dv->cancel(l->d, &l->h[o->hidx], o);
	if (o->flags & TL_OPF_LIVE) {
		if (r < 0)
			o->flags &= (uint16_t)~add; /* nothing changed: it keeps its deadline (2.4) */
		else
			tl__dl_op_disarm(l, o); /* its end is asked for: no deadline may change it */
	}
	return r < 0 ? r : 0;
}

/* Cancel every op of a closing handle that is not cancelled yet. A driver
 * that cannot take a cancellation now (no submission slot) gets asked again
 * at the start of the next turn: Closed must come in the end. */
static void close_ops(tl_loop *l, struct tl_hslot *h)
{
	for (uint32_t i = h->head; i != TL_NIL;) {
		struct tl_opslot *o = &l->o[i];
		uint32_t next = o->next;
		if (!(o->flags & TL_OPF_CANCEL)) {
			if (tl__op_cancel(l, o, 0) < 0)
				l->close_retry = 1;
		} else if (o->code == TL_OP_SPLICE && (o->flags & TL_OPF_LIVE)) {
			/* Cancelled before and flushing its pipe into h: h is
			 * going, so that flush ends (driver.h); a driver that
			 * cannot take that now is asked again next turn. */
			if (l->dv->cancel(l->d, h, o) < 0)
				l->close_retry = 1;
		}
		i = next;
	}
	/* Splices still reading h: its descriptor goes with its Closed. */
	for (uint32_t i = h->spl_head; i != TL_NIL;) {
		struct tl_opslot *o = &l->o[i];
		uint32_t next = o->u.sp.snext;
		if (!(o->flags & TL_OPF_CANCEL) && tl__op_cancel(l, o, 0) < 0)
			l->close_retry = 1;
		i = next;
	}
}

void tl__retry_closes(tl_loop *l)
{
	l->close_retry = 0;
	for (uint32_t i = 0; i < l->cfg.max_handles; i++) {
		struct tl_hslot *h = &l->h[i];
		if (h->type != TL_H_FREE && (h->flags & TL_HF_CLOSING) &&
		    (h->pending || h->spl_head != TL_NIL))
			close_ops(l, h);
	}
}

/* Cancel or stop by id. An op whose terminal is queued but not yet
 * delivered answers -EALREADY if its cancellation was asked, else -ENOENT. */
static int cancel_id(tl_loop *l, tl_op id, int stop)
{
	uint32_t s = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || s >= l->cfg.max_ops)
		return -ENOENT;
	struct tl_opslot *o = &l->o[s];
	if (o->gen != tl__id_gen(id.v))
		return -ENOENT;
	if (o->flags & TL_OPF_LIVE)
		return tl__op_cancel(l, o, stop ? TL_OPF_STOP : 0);
	if (o->flags & TL_OPF_OWED)
		return (o->flags & TL_OPF_CANCEL) ? -EALREADY : -ENOENT;
	return -ENOENT;
}

int tl_cancel(tl_loop *l, tl_op id)
{
	return cancel_id(l, id, 0);
}

int tl_stop(tl_loop *l, tl_op id)
{
	return cancel_id(l, id, 1);
}

int tl_close(tl_loop *l, tl_handle id, uint64_t token)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	uint32_t w0 = tl__hweight(h);
	h->flags |= TL_HF_CLOSING;
	h->close_token = token;
	if ((h->flags & TL_HF_REF) && tl__hweight(h) > w0)
		l->refs++;
	close_ops(l, h);
	tl__maybe_closed(l, h);
	return 0;
}

static uint32_t close_type(tl_loop *l, int type, uint64_t token)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < l->cfg.max_handles; i++) {
		struct tl_hslot *h = &l->h[i];
		if (h->type != TL_H_FREE && (type < 0 || h->type == type) &&
		    !(h->flags & TL_HF_CLOSING))
			n += tl_close(l, tl__h_id(l, h), token) == 0;
	}
	return n;
}

uint32_t tl_close_all(tl_loop *l, uint64_t token)
{
	return close_type(l, -1, token);
}

uint32_t tl_close_listeners(tl_loop *l, uint64_t token)
{
	return close_type(l, TL_H_LISTEN, token);
}

int tl_set_ref(tl_loop *l, tl_handle id, int ref)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	ref = !!ref;
	if (!!(h->flags & TL_HF_REF) == ref)
		return 0;
	uint64_t w = h->pending + tl__hweight(h);
	for (uint32_t k = 0, i = l->qhead; k < l->qlen; k++, i = i + 1 == l->qcap ? 0 : i + 1) {
		struct tl_qmeta *m = &l->qm[i];
		if (m->op_terminal && m->hidx == h->idx && m->referenced != ref) {
			m->referenced = (uint8_t)ref;
			w++;
		}
	}
	if (ref) {
		h->flags |= TL_HF_REF;
		l->refs += w;
	} else {
		h->flags &= (uint8_t)~TL_HF_REF;
		l->refs -= w;
	}
	return 0;
}

/* The pointer lives in the slot; tl__drain copies it into each record it
 * hands out (loop.c), so a set is seen by every later record. */
int tl_handle_set_data(tl_loop *l, tl_handle id, void *data)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	h->data = data;
	return 0;
}

int tl_handle_data_get(tl_loop *l, tl_handle id, void **data)
{
	if (!data)
		return -EINVAL;
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	*data = h->data;
	return 0;
}
