/* lib/poster.c: the cross-thread endpoint of a loop: notifier, poster, room waiters. */
#include <errno.h>
#include <stdlib.h>
#include "internal.h"

int tl__poster_new(uint32_t capacity, uint32_t waiters, struct tl_poster **out)
{
	struct tl_poster *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	int e = tl__os_notifier_open(&p->wake);
	if (e < 0) {
		free(p);
		return e;
	}
	p->waiters = calloc(waiters ? waiters : 1, sizeof *p->waiters);
	if (!p->waiters || tl__mpsc_init(&p->posts, capacity) < 0) {
		tl__os_notifier_close(&p->wake);
		free(p->waiters);
		free(p);
		return -ENOMEM;
	}
	p->maxwaiters = waiters;
	tl__os_mutex_init(&p->wmu);
	atomic_init(&p->refs, 1);
	atomic_init(&p->closed, 0);
	atomic_init(&p->state, TL_PARK_RUNNING);
	*out = p;
	return 0;
}

tl_poster *tl_poster_get(tl_loop *loop)
{
	atomic_fetch_add_explicit(&loop->poster->refs, 1, memory_order_relaxed);
	return loop->poster;
}

void tl_poster_put(tl_poster *p)
{
	if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (p->on_last_put)
		p->on_last_put(p);
	/* Waiters registered here hold references on their own posters. */
	for (uint32_t i = 0; i < atomic_load(&p->nwaiters); i++)
		tl_poster_put(p->waiters[i].who);
	tl__os_notifier_close(&p->wake);
	tl__mpsc_free(&p->posts);
	tl__os_mutex_destroy(&p->wmu);
	free(p->waiters);
	free(p);
}

void tl__poster_signal(struct tl_poster *p)
{
	tl__os_notifier_signal(&p->wake);
}

int tl_poster_wake(tl_poster *p)
{
	if (atomic_load_explicit(&p->closed, memory_order_acquire))
		return -EPIPE;
	/* Only a parked loop needs the system call; a running one will look at
	 * its rings before it parks again (see tl__poster_park). */
	int prev = atomic_exchange(&p->state, TL_PARK_NOTIFIED);
	if (prev == TL_PARK_PARKED) {
		tl__poster_signal(p);
		atomic_fetch_add_explicit(&p->wakes_sent, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&p->wakes_coalesced, 1, memory_order_relaxed);
	}
	return 0;
}

int tl_post(tl_poster *p, uint64_t token, uint64_t payload)
{
	if (atomic_load_explicit(&p->closed, memory_order_acquire))
		return -EPIPE;
	struct tl_post_msg m = {token, payload};
	if (tl__mpsc_push(&p->posts, &m, sizeof m) < 0)
		return -ENOBUFS;
	return tl_poster_wake(p);
}

int tl__poster_begin(struct tl_poster *p)
{
	return atomic_exchange(&p->state, TL_PARK_RUNNING) == TL_PARK_NOTIFIED;
}

int tl__poster_park(struct tl_poster *p)
{
	/* The exchange orders against the producers' exchange in tl_poster_wake:
	 * either they see PARKED and fire the notifier, or we see NOTIFIED. */
	if (atomic_exchange(&p->state, TL_PARK_PARKED) == TL_PARK_NOTIFIED) {
		atomic_store(&p->state, TL_PARK_RUNNING);
		return 1;
	}
	return 0;
}

int tl__poster_woken(struct tl_poster *p)
{
	/* Acquire: pairs with the waker's exchange, made after what it
	 * published. */
	return atomic_load_explicit(&p->state, memory_order_acquire) == TL_PARK_NOTIFIED;
}

void tl__poster_running(struct tl_poster *p)
{
	atomic_store_explicit(&p->state, TL_PARK_RUNNING, memory_order_relaxed);
}

void tl__poster_wake_waiters(struct tl_poster *p)
{
	tl__os_mutex_lock(&p->wmu);
	uint32_t n = atomic_load_explicit(&p->nwaiters, memory_order_relaxed);
	for (uint32_t i = 0; i < n; i++) {
		struct tl_poster *who = p->waiters[i].who;
		atomic_fetch_or(&who->room_bits, (uint64_t)1 << p->waiters[i].bit);
		tl_poster_wake(who);
		tl_poster_put(who);
	}
	atomic_store_explicit(&p->nwaiters, 0, memory_order_relaxed);
	tl__os_mutex_unlock(&p->wmu);
}

void tl__poster_close(struct tl_poster *p)
{
	atomic_store_explicit(&p->closed, 1, memory_order_release);
	/* Loops waiting for room learn now: their next post says -EPIPE. */
	tl__poster_wake_waiters(p);
	tl_poster_put(p);
}

int tl__poster_add_waiter(struct tl_poster *p, struct tl_poster *who, uint32_t bit)
{
	int r = 0;
	tl__os_mutex_lock(&p->wmu);
	uint32_t n = atomic_load_explicit(&p->nwaiters, memory_order_relaxed);
	if (atomic_load(&p->closed)) {
		r = -EPIPE;
	} else if (n == p->maxwaiters) {
		r = -ENOBUFS;
	} else {
		p->waiters[n] = (struct tl_room_waiter){who, bit};
		atomic_store_explicit(&p->nwaiters, n + 1, memory_order_relaxed);
		/* Pairs with the fence in the consumer (tl__poster_room_check):
		 * either it sees this waiter after freeing a cell, or we see the
		 * free cell here. Room already there: answer at once. */
		atomic_thread_fence(memory_order_seq_cst);
		if (tl__mpsc_has_room(&p->posts)) {
			atomic_store_explicit(&p->nwaiters, n, memory_order_relaxed);
			r = 1;
		} else {
			atomic_fetch_add(&who->refs, 1);
		}
	}
	tl__os_mutex_unlock(&p->wmu);
	return r;
}

void tl__poster_room_check(struct tl_poster *p)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&p->nwaiters, memory_order_relaxed))
		tl__poster_wake_waiters(p);
}

int tl__poster_del_waiter(struct tl_poster *p, struct tl_poster *who, uint32_t bit)
{
	int found = 0;
	tl__os_mutex_lock(&p->wmu);
	uint32_t n = atomic_load_explicit(&p->nwaiters, memory_order_relaxed);
	for (uint32_t i = 0; i < n; i++) {
		if (p->waiters[i].who == who && p->waiters[i].bit == bit) {
			p->waiters[i] = p->waiters[n - 1];
			atomic_store_explicit(&p->nwaiters, n - 1, memory_order_relaxed);
			found = 1;
			break;
		}
	}
	tl__os_mutex_unlock(&p->wmu);
	if (found)
		tl_poster_put(who);
	return found;
}
