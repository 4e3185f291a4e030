/* lib/shared/heap.h: a binary min-heap of (deadline, sequence, slot) with O(log n) removal; shared with the simulation driver's clock. */
#ifndef TL_HEAP_H
#define TL_HEAP_H

#include <stdint.h>
#include <stdlib.h>

/* Ties on the deadline are broken by the sequence number, so timers that are
 * due together complete in creation order. pos[slot] is the slot's index in
 * the heap (UINT32_MAX when absent), which makes removal O(log n). */
struct tl_heap_ent {
	uint64_t at, seq;
	uint32_t slot;
};

struct tl_heap {
	struct tl_heap_ent *a;
	uint32_t *pos;
	uint32_t n, cap;
};

int tl__heap_init(struct tl_heap *hp, uint32_t cap);
void tl__heap_free(struct tl_heap *hp);
void tl__heap_push(struct tl_heap *hp, uint32_t slot, uint64_t at, uint64_t seq);
int tl__heap_remove(struct tl_heap *hp, uint32_t slot); /* 1 if it was there */
/* Give slot (which must be in the heap) the deadline at: one sift. */
void tl__heap_move(struct tl_heap *hp, uint32_t slot, uint64_t at);

static inline int tl__heap_has(const struct tl_heap *hp, uint32_t slot)
{
	return hp->pos[slot] != UINT32_MAX;
}
static inline const struct tl_heap_ent *tl__heap_top(const struct tl_heap *hp)
{
	return hp->n ? &hp->a[0] : NULL;
}
#endif
