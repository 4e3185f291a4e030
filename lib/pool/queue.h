/* lib/pool/queue.h: the bounded sets' job queue, Vyukov's bounded MPMC ring of job pointers (all inline). */
#ifndef TL_POOL_QUEUE_H
#define TL_POOL_QUEUE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include "os.h"

struct tl_job;

static inline void tl__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

struct tl_jq_cell {
	_Atomic uint64_t seq;
	struct tl_job *job;
};

/* The queue only holds what admission (tl_bset.used) let in: it never
 * refuses a push, and its size is not the set's capacity. */
struct tl_jq {
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) uint64_t mask;
	struct tl_jq_cell *cells;
};

/* Twice the admission bound: see tl__jq_push for why slack helps. 0 or
 * -ENOMEM; the cells are freed with tl__os_aligned_free(q->cells). */
static inline int tl__jq_init(struct tl_jq *q, uint32_t cap)
{
	uint64_t n = 2;
	while (n < 2 * (uint64_t)cap)
		n <<= 1;
	q->cells = tl__os_aligned_alloc(64, ((n * sizeof *q->cells) + 63) & ~(size_t)63);
	if (!q->cells)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		atomic_init(&q->cells[i].seq, i);
		q->cells[i].job = NULL;
	}
	atomic_init(&q->tail, 0);
	atomic_init(&q->head, 0);
	q->mask = n - 1;
	return 0;
}

/*
 * Admission (`used`) guarantees room for every pushed job, yet a cell can
 * still be taken: a consumer that claimed it (moved head) and was preempted
 * before releasing it holds it while the other workers consume past it, and
 * producers lap around to it. That consumer is a few instructions from
 * releasing it, so wait for it rather than fail; the slack of tl__jq_init
 * makes this rare.
 */
static inline void tl__jq_push(struct tl_jq *q, struct tl_job *j)
{
	uint64_t pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
	for (uint32_t waits = 0;;) {
		struct tl_jq_cell *c = &q->cells[pos & q->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				c->job = j;
				atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
				return;
			}
		} else if (dif < 0) {
			if (++waits < 64)
				tl__cpu_relax();
			else
				tl__os_yield();
			pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
		} else {
			pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
		}
	}
}

/* The oldest job, or NULL when none is published. */
static inline struct tl_job *tl__jq_pop(struct tl_jq *q)
{
	uint64_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
	for (;;) {
		struct tl_jq_cell *c = &q->cells[pos & q->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - (pos + 1));
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				struct tl_job *j = c->job;
				atomic_store_explicit(&c->seq, pos + q->mask + 1,
						      memory_order_release);
				return j;
			}
		} else if (dif < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&q->head, memory_order_relaxed);
		}
	}
}

/* A claimed position may not be published yet: callers treat "nonempty" as
 * "look again", never as "a pop will succeed". */
static inline int tl__jq_nonempty(struct tl_jq *q)
{
	return atomic_load_explicit(&q->tail, memory_order_relaxed) !=
	       atomic_load_explicit(&q->head, memory_order_relaxed);
}

#endif
