/* lib/signal.c: per-loop signal subscriptions and the process-wide handler behind them; the handler wakes loops through the table of loops (lib/xloop.c). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "sysmod.h"
#include "turnloop/signal.h"

/*
 * A signal handler may run on any thread at any moment, so it touches only
 * the static table of loops (lib/xloop.c: never freed memory) and atomics,
 * and wakes a loop through tl_poster_wake (async-signal-safe).
 *
 * Dispositions: the first subscription or hook of a signal installs the
 * handler and keeps the action it replaced; when the last goes, that
 * action is put back. Both under mu, which no handler takes.
 */

#define NSIGS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static struct {
	uint32_t subs;      /* subscriptions of the process */
	int installed;
	struct sigaction old;
} disp[NSIGS + 1];
static void (*_Atomic hooks[NSIGS + 1])(int);

/* Per loop, on its own thread only. */
struct tl_sigloc {
	uint32_t head[NSIGS];  /* subscription ops per signal (u.sig list) */
	uint32_t nsubs[NSIGS];
	uint32_t inner[NSIGS]; /* the core's own interest (tl__signal_inner) */
	uint8_t hit[NSIGS];    /* ... and whether the signal came since it looked */
	int undelivered;       /* some subscription's count waits for room */
};

/* ---- the handler and dispositions ---- */

static void mark(struct tl_xloop *x, struct tl_poster *p, void *arg)
{
	int sig = *(int *)arg;
	atomic_fetch_add(&x->sigcount[sig - 1], 1);
	atomic_store(&x->sigpending, 1);
	tl_poster_wake(p);
}

static void on_signal(int sig)
{
	int e = errno;
	tl__xloop_each(offsetof(struct tl_xloop, sigmask), 1ull << (sig - 1), mark, &sig);
	void (*hook)(int) = atomic_load(&hooks[sig]);
	if (hook)
		hook(sig);
	errno = e;
}

static int catchable(int sig)
{
	if (sig < 1 || sig > NSIGS)
		return 0;
	switch (sig) {
	case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS:
	case SIGFPE: case SIGILL: case SIGTRAP: case SIGSYS:
		return 0;
	}
	return 1;
}

/* Under mu: install the handler for sig if nothing holds it yet. */
static int disp_hold(int sig)
{
	if (disp[sig].installed)
		return 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(sig, &sa, &disp[sig].old) < 0)
		return -errno;
	disp[sig].installed = 1;
	return 0;
}

/* Under mu: put the replaced action back once nothing holds sig. */
static void disp_release(int sig)
{
	if (!disp[sig].installed || disp[sig].subs || atomic_load(&hooks[sig]))
		return;
	sigaction(sig, &disp[sig].old, NULL);
	disp[sig].installed = 0;
}

int tl_signal_hook(int sig, void (*fn)(int))
{
	if (!catchable(sig))
		return -EINVAL;
	int r = 0;
	pthread_mutex_lock(&mu);
	void (*cur)(int) = atomic_load(&hooks[sig]);
	if (fn && cur && cur != fn) {
		r = -EBUSY;
	} else if (fn) {
		r = disp_hold(sig);
		if (r == 0)
			atomic_store(&hooks[sig], fn);
	} else {
		atomic_store(&hooks[sig], NULL);
		disp_release(sig);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

/* ---- subscriptions ---- */

static int loc_get(tl_loop *l)
{
	if (l->sig)
		return 0;
	int r = tl__xloop_get(l);
	if (r < 0)
		return r;
	struct tl_sigloc *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	for (int i = 0; i < NSIGS; i++)
		s->head[i] = TL_NIL;
	l->sig = s;
	return 0;
}

static void sub_link(tl_loop *l, struct tl_opslot *o)
{
	struct tl_sigloc *s = l->sig;
	int k = o->u.sig.signo - 1;
	o->u.sig.prev = TL_NIL;
	o->u.sig.next = s->head[k];
	if (s->head[k] != TL_NIL)
		l->o[s->head[k]].u.sig.prev = o->idx;
	s->head[k] = o->idx;
	if (s->nsubs[k]++ == 0 && !s->inner[k])
		atomic_fetch_or(&l->x->sigmask, 1ull << k);
}

static void sub_unlink(tl_loop *l, struct tl_opslot *o)
{
	struct tl_sigloc *s = l->sig;
	int k = o->u.sig.signo - 1;
	if (o->u.sig.prev == TL_NIL)
		s->head[k] = o->u.sig.next;
	else
		l->o[o->u.sig.prev].u.sig.next = o->u.sig.next;
	if (o->u.sig.next != TL_NIL)
		l->o[o->u.sig.next].u.sig.prev = o->u.sig.prev;
	if (--s->nsubs[k] == 0 && !s->inner[k])
		atomic_fetch_and(&l->x->sigmask, ~(1ull << k));
}

int tl_signal_start(tl_loop *l, int signo, uint64_t token, tl_handle *hid, tl_op *oid)
{
	if (!hid || !oid || !catchable(signo))
		return -EINVAL;
	int r = loc_get(l);
	if (r < 0)
		return r;
	if (l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	struct tl_hslot *h = tl__handle_new(l, TL_H_SIGNAL);
	if (!h)
		return -ENOBUFS;
	struct tl_opslot *o;
	r = tl__op_new(l, h, TL_OP_SIGNAL, TL_K_SIGNAL, token, &o);
	if (r < 0) {
		tl__handle_free(l, h);
		return r;
	}
	o->flags |= TL_OPF_MULTI;
	o->u.sig.signo = signo;
	o->u.sig.pend = 0;
	/* This loop counts the signal before the handler can run. */
	sub_link(l, o);
	pthread_mutex_lock(&mu);
	r = disp_hold(signo);
	if (r == 0)
		disp[signo].subs++;
	pthread_mutex_unlock(&mu);
	if (r < 0) {
		sub_unlink(l, o);
		tl__op_refuse(l, o);
		tl__handle_free(l, h);
		return r;
	}
	*hid = tl__h_id(l, h);
	*oid = tl__op_id(l, o);
	return 0;
}

void tl__signal_cancel(tl_loop *l, struct tl_opslot *o)
{
	int signo = o->u.sig.signo;
	sub_unlink(l, o);
	pthread_mutex_lock(&mu);
	disp[signo].subs--;
	disp_release(signo);
	pthread_mutex_unlock(&mu);
	tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
}

int tl__signal_ready(tl_loop *l)
{
	return l->sig->undelivered || (l->x && atomic_load(&l->x->sigpending));
}

void tl__signal_run(tl_loop *l)
{
	struct tl_sigloc *s = l->sig;
	int arrived = l->x && atomic_exchange(&l->x->sigpending, 0);
	if (!arrived && !s->undelivered)
		return;
	s->undelivered = 0;
	for (int k = 0; k < NSIGS; k++) {
		if (!s->nsubs[k] && !s->inner[k])
			continue;
		uint32_t n = arrived ? atomic_exchange(&l->x->sigcount[k], 0) : 0;
		if (n && s->inner[k])
			s->hit[k] = 1;
		for (uint32_t i = s->head[k]; i != TL_NIL;) {
			struct tl_opslot *o = &l->o[i];
			i = o->u.sig.next;
			o->u.sig.pend += n;
			if (!o->u.sig.pend)
				continue;
			if (!tl__drv_room(l)) {
				s->undelivered = 1; /* the next turn goes on */
				continue;
			}
			tl_completion *c = tl__op_event(l, o, k + 1, 0, TL_NO_LEASE);
			if (c)
				c->aux = o->u.sig.pend;
			o->u.sig.pend = 0;
		}
	}
}

int tl__signal_inner(tl_loop *l, int signo, int on)
{
	int r = loc_get(l);
	if (r < 0)
		return r;
	struct tl_sigloc *s = l->sig;
	int k = signo - 1;
	pthread_mutex_lock(&mu);
	if (on) {
		r = disp_hold(signo);
		if (r == 0)
			disp[signo].subs++;
	} else {
		disp[signo].subs--;
		disp_release(signo);
	}
	pthread_mutex_unlock(&mu);
	if (r < 0)
		return r;
	if (on && s->inner[k]++ == 0 && !s->nsubs[k])
		atomic_fetch_or(&l->x->sigmask, 1ull << k);
	if (!on && --s->inner[k] == 0 && !s->nsubs[k])
		atomic_fetch_and(&l->x->sigmask, ~(1ull << k));
	return 0;
}

int tl__signal_inner_hit(tl_loop *l, int signo)
{
	struct tl_sigloc *s = l->sig;
	int k = signo - 1;
	int h = s && s->hit[k];
	if (h)
		s->hit[k] = 0;
	return h;
}

void tl__signal_destroy(tl_loop *l)
{
	/* Every subscription ended before (tl_loop_destroy closed them). */
	free(l->sig);
	l->sig = NULL;
}
