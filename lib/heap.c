/* lib/heap.c: the deadline heap behind timers and the loop's deadlines (idle, read, connect). */
#include <string.h>
#include "heap.h"

int tl__heap_init(struct tl_heap *hp, uint32_t cap)
{
	hp->a = calloc(cap ? cap : 1, sizeof *hp->a);
	hp->pos = malloc((cap ? cap : 1) * sizeof *hp->pos);
	if (!hp->a || !hp->pos) {
		free(hp->a);
		free(hp->pos);
		return -1;
	}
	memset(hp->pos, 0xff, (cap ? cap : 1) * sizeof *hp->pos);
	hp->n = 0;
	hp->cap = cap;
	return 0;
}

void tl__heap_free(struct tl_heap *hp)
{
	free(hp->a);
	free(hp->pos);
	hp->a = NULL;
	hp->pos = NULL;
}

static inline int less(const struct tl_heap_ent *x, const struct tl_heap_ent *y)
{
	return x->at < y->at || (x->at == y->at && x->seq < y->seq);
}

static void place(struct tl_heap *hp, uint32_t i, struct tl_heap_ent e)
{
	hp->a[i] = e;
	hp->pos[e.slot] = i;
}

static void sift_up(struct tl_heap *hp, uint32_t i)
{
	struct tl_heap_ent e = hp->a[i];
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!less(&e, &hp->a[p]))
			break;
		place(hp, i, hp->a[p]);
		i = p;
	}
	place(hp, i, e);
}

static void sift_down(struct tl_heap *hp, uint32_t i)
{
	struct tl_heap_ent e = hp->a[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= hp->n)
			break;
		if (c + 1 < hp->n && less(&hp->a[c + 1], &hp->a[c]))
			c++;
		if (!less(&hp->a[c], &e))
			break;
		place(hp, i, hp->a[c]);
		i = c;
	}
	place(hp, i, e);
}

void tl__heap_push(struct tl_heap *hp, uint32_t slot, uint64_t at, uint64_t seq)
{
	/* Callers size the heap for every slot that can be armed at once. */
	struct tl_heap_ent e = {at, seq, slot};
	hp->a[hp->n] = e;
	hp->pos[slot] = hp->n;
	hp->n++;
	sift_up(hp, hp->n - 1);
}

int tl__heap_remove(struct tl_heap *hp, uint32_t slot)
{
	uint32_t i = hp->pos[slot];
	if (i == UINT32_MAX)
		return 0;
	hp->pos[slot] = UINT32_MAX;
	hp->n--;
	if (i != hp->n) {
		struct tl_heap_ent last = hp->a[hp->n];
		place(hp, i, last);
		if (i > 0 && less(&last, &hp->a[(i - 1) / 2]))
			sift_up(hp, i);
		else
			sift_down(hp, i);
	}
	return 1;
}

void tl__heap_move(struct tl_heap *hp, uint32_t slot, uint64_t at)
{
	uint32_t i = hp->pos[slot];
	struct tl_heap_ent e = hp->a[i];
	int later = at > e.at;
	hp->a[i].at = at;
	if (later)
		sift_down(hp, i);
	else
		sift_up(hp, i);
}
