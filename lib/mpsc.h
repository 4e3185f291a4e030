/* lib/mpsc.h: a bounded multi-producer single-consumer ring of fixed-size records. */
#ifndef TL_MPSC_H
#define TL_MPSC_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "os.h"

/*
 * Each cell carries a sequence number (Vyukov's bounded queue): a producer
 * claims a position with one CAS on tail and publishes by storing seq =
 * pos + 1; the consumer reads cells whose seq says they are full. A full ring
 * refuses without writing anything, so the caller keeps its value. Records
 * are up to 32 bytes, copied in and out.
 */
struct tl_mpsc_cell {
	atomic_uint_fast64_t seq;
	uint64_t data[4];
};

struct tl_mpsc {
	_Alignas(64) atomic_uint_fast64_t tail; /* producers */
	_Alignas(64) uint64_t head;             /* the consumer */
	uint64_t mask;
	struct tl_mpsc_cell *cells;
};

static inline int tl__mpsc_init(struct tl_mpsc *r, uint32_t cap)
{
	uint64_t n = 1;
	while (n < cap)
		n <<= 1;
	r->cells = tl__os_aligned_alloc(64, ((n * sizeof *r->cells) + 63) & ~(size_t)63);
	if (!r->cells)
		return -1;
	for (uint64_t i = 0; i < n; i++)
		atomic_init(&r->cells[i].seq, i);
	atomic_init(&r->tail, 0);
	r->head = 0;
	r->mask = n - 1;
	return 0;
}

static inline void tl__mpsc_free(struct tl_mpsc *r)
{
	tl__os_aligned_free(r->cells);
	r->cells = NULL;
}

/* 0, or -1 when full (nothing written). Any thread. */
static inline int tl__mpsc_push(struct tl_mpsc *r, const void *rec, size_t len)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	for (;;) {
		struct tl_mpsc_cell *c = &r->cells[pos & r->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				memcpy(c->data, rec, len);
				atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
				return 0;
			}
		} else if (dif < 0) {
			return -1;
		} else {
			pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
		}
	}
}

/* 1 and a record, or 0 when empty. The consumer's thread only. */
static inline int tl__mpsc_pop(struct tl_mpsc *r, void *rec, size_t len)
{
	struct tl_mpsc_cell *c = &r->cells[r->head & r->mask];
	uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
	if (seq != r->head + 1)
		return 0;
	memcpy(rec, c->data, len);
	atomic_store_explicit(&c->seq, r->head + r->mask + 1, memory_order_release);
	r->head++;
	return 1;
}

/* Whether a producer would find a free cell now. Any thread. */
static inline int tl__mpsc_has_room(struct tl_mpsc *r)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	struct tl_mpsc_cell *c = &r->cells[pos & r->mask];
	return atomic_load_explicit(&c->seq, memory_order_acquire) == pos;
}

/* Whether a record is ready for the consumer. */
static inline int tl__mpsc_ready(struct tl_mpsc *r)
{
	struct tl_mpsc_cell *c = &r->cells[r->head & r->mask];
	return atomic_load_explicit(&c->seq, memory_order_acquire) == r->head + 1;
}
#endif
