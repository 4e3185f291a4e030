/* lib/xloop.c: the process's table of loops, the part of each loop that signal handlers and other threads reach to wake it (signals, external waits). */
#include <errno.h>
#include "sysmod.h"

/*
 * A signal handler may run on any thread at any moment, so the table is
 * static (never freed memory) and read with atomics only; a loop is woken
 * through tl_poster_wake (async-signal-safe). An entry stays in place for
 * its loop's life; users tells tl__xloop_put when no handler or notifier
 * can still hold the loop's poster, and only then is the reference let go.
 * Entries are taken and given back under mu, which no handler takes.
 */

static struct tl_xloop xtab[TL_XLOOPS];
static _Atomic uint32_t xhw; /* entries below this may be live */
static tl__os_mutex mu = TL__OS_MUTEX_INIT;

#ifndef _WIN32
/* A forked child must not wake its parent's loops (their notifiers are
 * shared with the parent): forget every entry. */
static void atfork_child(void)
{
	for (uint32_t i = 0; i < TL_XLOOPS; i++) {
		atomic_store(&xtab[i].sigmask, 0);
		atomic_store(&xtab[i].ewmask, 0);
		atomic_store(&xtab[i].poster, NULL);
		atomic_store(&xtab[i].users, 0);
	}
	atomic_store(&xhw, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_setup(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}
#endif

int tl__xloop_get(tl_loop *l)
{
	if (l->x)
		return 0;
#ifndef _WIN32
	pthread_once(&atfork_once, atfork_setup);
#endif
	tl__os_mutex_lock(&mu);
	uint32_t i = 0;
	while (i < TL_XLOOPS && atomic_load(&xtab[i].poster))
		i++;
	if (i == TL_XLOOPS) {
		tl__os_mutex_unlock(&mu);
		return -ENOBUFS;
	}
	struct tl_xloop *x = &xtab[i];
	atomic_store(&x->sigmask, 0);
	atomic_store(&x->sigpending, 0);
	for (int s = 0; s < 64; s++)
		atomic_store(&x->sigcount[s], 0);
	atomic_store(&x->ewmask, 0);
	atomic_store(&x->ewnotified, 0);
	atomic_store(&x->poster, tl_poster_get(l));
	if (atomic_load(&xhw) < i + 1)
		atomic_store(&xhw, i + 1);
	tl__os_mutex_unlock(&mu);
	l->x = x;
	return 0;
}

void tl__xloop_put(tl_loop *l)
{
	struct tl_xloop *x = l->x;
	if (!x)
		return;
	tl__os_mutex_lock(&mu);
	atomic_store(&x->sigmask, 0);
	atomic_store(&x->ewmask, 0);
	struct tl_poster *p = atomic_exchange(&x->poster, NULL);
	tl__os_mutex_unlock(&mu);
	/* A handler or notifier that read the poster before it went is done
	 * with it in a few instructions. */
	while (atomic_load(&x->users))
		;
	tl_poster_put(p);
	l->x = NULL;
}

uint32_t tl__xloop_each(size_t mask_off, uint64_t bits,
			void (*fn)(struct tl_xloop *x, struct tl_poster *p, void *arg), void *arg)
{
	uint32_t n = atomic_load(&xhw), hits = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct tl_xloop *x = &xtab[i];
		_Atomic uint64_t *m = (_Atomic uint64_t *)((char *)x + mask_off);
		if (!(atomic_load(m) & bits))
			continue;
		atomic_fetch_add(&x->users, 1);
		struct tl_poster *p = atomic_load(&x->poster);
		if (p) {
			fn(x, p, arg);
			hits++;
		}
		atomic_fetch_sub(&x->users, 1);
	}
	return hits;
}
