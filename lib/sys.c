/* lib/sys.c: where the contract 5 modules join the turn and the loop's teardown. */
#include "sysmod.h"

int tl__sys_ready(tl_loop *l)
{
	return l->pready_head != TL_NIL || (l->sig && tl__signal_ready(l)) ||
	       (l->ew && tl__ewait_ready(l));
}

uint64_t tl__sys_deadline(tl_loop *l)
{
	uint64_t d = UINT64_MAX, m;
	if (l->ew && (m = tl__ewait_deadline(l)) < d)
		d = m;
	if (l->proc && (m = tl__proc_deadline(l)) < d)
		d = m;
	if (l->dns && (m = tl__dns_deadline(l)) < d)
		d = m;
	return d;
}

void tl__sys_run(tl_loop *l, uint64_t now)
{
	if (l->sig)
		tl__signal_run(l);
	if (l->ew)
		tl__ewait_run(l, now);
	if (l->pready_head != TL_NIL)
		tl__poll_run(l);
	if (l->proc)
		tl__proc_run(l, now);
	if (l->dns)
		tl__dns_run(l, now);
}

int tl__sys_busy(const tl_loop *l)
{
	return l->pready_head != TL_NIL || l->plwait_head != TL_NIL ||
	       (l->proc && tl__proc_waiting(l));
}

void tl__sys_destroy(tl_loop *l)
{
	if (l->sig)
		tl__signal_destroy(l);
	if (l->ew)
		tl__ewait_destroy(l);
	if (l->proc)
		tl__proc_destroy(l);
	if (l->dns)
		tl__dns_destroy(l);
	if (l->x)
		tl__xloop_put(l);
}

void tl__sys_release(tl_loop *l, struct tl_hslot *h)
{
	switch (h->type) {
	case TL_H_PROC:
		tl__proc_release(l, h);
		break;
	case TL_H_STDIO:
		tl__tty_release(l, h);
		break;
	case TL_H_WATCH:
		tl__watch_release(l, h);
		break;
	case TL_H_DNS:
		tl__dns_release(l, h);
		break;
	default: /* TL_H_POLL borrows its descriptor; TL_H_SIGNAL has none */
		break;
	}
	h->fd = -1;
}
