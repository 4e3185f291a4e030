/* shards/spsc.h: the mesh ring, a bounded single-producer single-consumer queue between two shards (internal). */
#ifndef TL_SHARDS_SPSC_H
#define TL_SHARDS_SPSC_H

#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "os.h"

/*
 * A Lamport ring: the producer owns head, the consumer owns tail, both count
 * messages ever pushed or popped (free-running, wrapping modulo 2^N, which is
 * harmless because the capacity is a power of two far below it), and a slot
 * is index & mask. Each side publishes its index with a release store after
 * touching the slots and reads the other's with an acquire load, which is
 * all the ordering a single producer and a single consumer need.
 *
 * Each side keeps a private copy of the other side's index and rereads the
 * shared one only when the copy says full (producer) or empty (consumer), so
 * in steady state neither side pulls the other's cache line on every
 * message. The batch calls publish once per batch for the same reason.
 *
 * Threading: exactly one producer thread calls push/push_n and exactly one
 * consumer thread calls pop_n; init and free happen while neither runs.
 * Nothing here blocks, sleeps or allocates after init.
 */

#define TL__CACHE_LINE 64
#define TL__SPSC_MAX_CAP (UINT32_C(1) << 20)

/* One cross-shard message: the mesh layer gives the fields their meaning. */
struct tl_mesh_msg {
	uint64_t token;
	uint64_t a;
	uint64_t b;
	void *fn;
};

/* Two messages per cache line, and a batch copy is plain 32-byte moves. */
_Static_assert(sizeof(void *) != 8 || sizeof(struct tl_mesh_msg) == 32,
	       "tl_mesh_msg must be 32 bytes on 64-bit targets");

/*
 * The struct is 64-byte aligned (three lines: producer, consumer, read-only
 * shared), so whoever embeds or allocates it must honour that: a member of
 * a struct, a static, a local, or tl__os_aligned_alloc(TL__CACHE_LINE, ...), not a
 * plain malloc.
 */
struct tl__spsc {
	/* Written only by the producer. */
	alignas(TL__CACHE_LINE) _Atomic size_t head;
	size_t tail_cache;

	/* Written only by the consumer. */
	alignas(TL__CACHE_LINE) _Atomic size_t tail;
	size_t head_cache;

	/* Set at init, then only read: a line of its own so that neither
	 * side's index stores invalidate it in the other's cache. */
	alignas(TL__CACHE_LINE) struct tl_mesh_msg *slots;
	size_t mask;
};

/*
 * Set up r with room for cap messages, rounded up to a power of two; the
 * slots are allocated here, once, cache-line aligned. Returns 0, -EINVAL
 * (r NULL, cap 0 or cap > 2^20; r is then untouched) or -ENOMEM (r zeroed).
 */
static inline int tl__spsc_init(struct tl__spsc *r, uint32_t cap)
{
	size_t c = 1, bytes;

	if (!r || cap == 0 || cap > TL__SPSC_MAX_CAP)
		return -EINVAL;
	while (c < cap)
		c <<= 1;
	memset(r, 0, sizeof *r);
	/* tl__os_aligned_alloc wants a size that is a multiple of the alignment;
	 * a capacity of 1 is 32 bytes. */
	bytes = c * sizeof(struct tl_mesh_msg);
	bytes = (bytes + TL__CACHE_LINE - 1) & ~(size_t)(TL__CACHE_LINE - 1);
	r->slots = tl__os_aligned_alloc(TL__CACHE_LINE, bytes);
	if (!r->slots)
		return -ENOMEM;
	memset(r->slots, 0, bytes);
	r->mask = c - 1;
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	return 0;
}

/* Free the slots and zero r; messages still inside are dropped. Safe on a
 * zeroed ring and on one already freed. */
static inline void tl__spsc_free(struct tl__spsc *r)
{
	if (!r)
		return;
	tl__os_aligned_free(r->slots);
	memset(r, 0, sizeof *r);
}

/* The capacity chosen at init (a power of two). */
static inline size_t tl__spsc_capacity(const struct tl__spsc *r)
{
	return r->mask + 1;
}

/* Producer: free slots as far as the producer knows, rereading the
 * consumer's index only when the cached one cannot satisfy want. */
static inline size_t tl__spsc_room(struct tl__spsc *r, size_t head, size_t want)
{
	size_t room = r->mask + 1 - (head - r->tail_cache);

	if (room < want) {
		r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
		room = r->mask + 1 - (head - r->tail_cache);
	}
	return room;
}

/*
 * Producer: append one message (copied). Returns 0, or -ENOBUFS when the
 * ring is full, in which case nothing was written.
 */
static inline int tl__spsc_push(struct tl__spsc *r, const struct tl_mesh_msg *m)
{
	size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	if (tl__spsc_room(r, head, 1) < 1)
		return -ENOBUFS;
	r->slots[head & r->mask] = *m;
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
	return 0;
}

/*
 * Producer: append n messages (copied from msgs[0..n)) and publish them with
 * one store, so the consumer sees all of them or none. All or nothing:
 * returns 0 (n == 0 included), -ENOBUFS when fewer than n slots are free
 * (nothing written), or -EINVAL when n exceeds the capacity and so could
 * never fit.
 */
static inline int tl__spsc_push_n(struct tl__spsc *r, const struct tl_mesh_msg *msgs,
				  size_t n)
{
	size_t head, idx, first;

	if (n == 0)
		return 0;
	if (n > r->mask + 1)
		return -EINVAL;
	head = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (tl__spsc_room(r, head, n) < n)
		return -ENOBUFS;
	idx = head & r->mask;
	first = r->mask + 1 - idx;
	if (first > n)
		first = n;
	memcpy(&r->slots[idx], msgs, first * sizeof *msgs);
	memcpy(r->slots, msgs + first, (n - first) * sizeof *msgs);
	atomic_store_explicit(&r->head, head + n, memory_order_release);
	return 0;
}

/*
 * Consumer: move up to n of the oldest messages into out[0..n), in FIFO
 * order, and release their slots to the producer with one store. Returns
 * the number moved, 0 when the ring is empty (or n is 0).
 */
static inline size_t tl__spsc_pop_n(struct tl__spsc *r, struct tl_mesh_msg *out, size_t n)
{
	size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	size_t avail = r->head_cache - tail;
	size_t idx, first;

	if (avail < n) {
		r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
		avail = r->head_cache - tail;
	}
	if (n > avail)
		n = avail;
	if (n == 0)
		return 0;
	idx = tail & r->mask;
	first = r->mask + 1 - idx;
	if (first > n)
		first = n;
	memcpy(out, &r->slots[idx], first * sizeof *out);
	memcpy(out + first, r->slots, (n - first) * sizeof *out);
	atomic_store_explicit(&r->tail, tail + n, memory_order_release);
	return n;
}

/*
 * True when nothing is queued. Exact for the consumer (only the producer can
 * change the answer, and only to false); from any other thread it is a
 * snapshot that may be stale on return.
 */
static inline int tl__spsc_empty(struct tl__spsc *r)
{
	size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);

	return atomic_load_explicit(&r->head, memory_order_acquire) == tail;
}

/*
 * Messages queued, for stats and heuristics only: the two indexes are read
 * at slightly different moments. Tail is read first so the difference can
 * never go negative; it can overshoot while both sides move, hence the clamp
 * to the capacity.
 */
static inline size_t tl__spsc_size_approx(struct tl__spsc *r)
{
	size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	size_t d = head - tail;

	return d > r->mask + 1 ? r->mask + 1 : d;
}

#endif /* TL_SHARDS_SPSC_H */
