/* shards/foreign.c: blocks freed on the shard that allocated them (tl_shard_alloc, tl_shard_free): an owner in a header, per-owner queues linked through the freed blocks, sent over the mesh and freed there, and what a stop leaves. */
#include <errno.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>

#include "runtime_int.h"

/*
 * Why a header and not jemalloc's own answer: "arenas.lookup" finds the
 * arena of any pointer, but every call takes jemalloc's one process-wide
 * control mutex, so shards freeing at full rate would queue on it. A
 * 16-byte header written at allocation names the owner with no lock and
 * no table, in the block's first cache line that the freeing shard has
 * usually touched anyway, and works the same without jemalloc. The price
 * is 16 bytes a block and that only tl_shard_alloc's blocks qualify.
 *
 * Why the queue is a list through the blocks: a freed block is ours to
 * write, so its header becomes the link. A queue then never fills: when
 * the mesh refuses, the blocks simply wait, however many come meanwhile,
 * and freeing allocates nothing.
 */

#define MAGIC 0x7f5e3a11u
/* Blocks queued for one owner before they go without waiting for the
 * end of the pass: one message frees this many there. */
#define FREE_BATCH 64u

struct hdr {
	union {
		struct {
			uint32_t magic;
			uint32_t owner;
		};
		void *next; /* once queued: the next block for the same owner */
	};
	tl_runtime *rt;
};

#define HDR_SIZE (alignof(max_align_t) > sizeof(struct hdr) ? alignof(max_align_t) : sizeof(struct hdr))
_Static_assert(sizeof(struct hdr) == 16, "the header is two words");
_Static_assert(HDR_SIZE % alignof(max_align_t) == 0, "blocks keep malloc's alignment");

static inline struct hdr *hdr_of(void *p)
{
	return (struct hdr *)((char *)p - HDR_SIZE);
}

void *tl_shard_alloc(tl_shard *s, size_t size)
{
	struct hdr *h;

	if (size > SIZE_MAX - HDR_SIZE)
		return NULL;
	h = malloc(HDR_SIZE + size);
	if (!h)
		return NULL;
	h->magic = MAGIC;
	h->owner = s->id;
	h->rt = s->rt;
	return (char *)h + HDR_SIZE;
}

/* Free a block here and now (its header may be a link by now). */
static inline void release(struct hdr *h)
{
	h->magic = 0; /* a second tl_shard_free of it says -EINVAL */
	free(h);
}

/* Send what waits for owner t; on a refusal it stays (see the mesh). */
static void send_list(tl_shard *s, uint32_t t)
{
	struct tl__freeq *q = &s->fq[t];

	if (tl__mesh_post_free(s, t, q->head) == 0) {
		q->head = NULL;
		q->n = 0;
	}
}

int tl_shard_free(tl_shard *s, void *p)
{
	struct hdr *h;

	if (!p)
		return 0;
	h = hdr_of(p);
	if (h->magic != MAGIC)
		return -EINVAL;
#if TL_ARENAS
	if (s && h->rt == s->rt && h->owner != s->id && h->owner < s->n &&
	    atomic_load_explicit(&s->rt->arenas, memory_order_relaxed)) {
		uint32_t t = h->owner;
		struct tl__freeq *q = &s->fq[t];

		h->next = q->head;
		q->head = h;
		if (!q->listed) {
			q->listed = 1;
			s->fdirty[s->nfdirty++] = t;
		}
		/* Every FREE_BATCH blocks, not each one after a refusal: the
		 * end of the pass tries again anyway. */
		if (++q->n % FREE_BATCH == 0)
			send_list(s, t);
		return 1;
	}
#else
	(void)s;
#endif
	release(h);
	return 0;
}

int tl__foreign_setup(tl_shard *s)
{
	s->fq = calloc(s->n, sizeof *s->fq);
	s->fdirty = malloc((size_t)s->n * sizeof *s->fdirty);
	s->nfdirty = 0;
	return s->fq && s->fdirty ? 0 : -ENOMEM;
}

void tl__foreign_flush(tl_shard *s)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < s->nfdirty; i++) {
		uint32_t t = s->fdirty[i];
		struct tl__freeq *q = &s->fq[t];

		if (q->head)
			send_list(s, t);
		if (q->head)
			s->fdirty[kept++] = t; /* refused: the next pass tries again */
		else
			q->listed = 0;
	}
	s->nfdirty = kept;
}

static void free_list(void *head)
{
	while (head) {
		struct hdr *h = head;

		head = h->next;
		release(h);
	}
}

void tl__foreign_take(tl_shard *s, void *head)
{
	(void)s;
	free_list(head);
}

void tl__foreign_finish(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	/* The same answer on every shard (final since the launch): all of
	 * them wait here, or none. Without arenas nothing is ever queued. */
	if (!TL_ARENAS || !atomic_load(&rt->arenas))
		return;
	/* Every shard has run its last handler, so no block is queued any
	 * more: what the others hold for this shard is freed by it. */
	tl__os_barrier_wait(&rt->barrier);
	for (uint32_t src = 0; src < rt->n; src++) {
		struct tl__freeq *q = &rt->shards[src].fq[s->id];

		free_list(q->head);
		q->head = NULL;
		q->n = 0;
	}
}

void tl__foreign_destroy(tl_runtime *rt)
{
	if (!rt->shards)
		return;
	for (uint32_t i = 0; i < rt->n; i++) {
		tl_shard *s = &rt->shards[i];

		if (s->fq)
			for (uint32_t t = 0; t < rt->n; t++)
				free_list(s->fq[t].head);
		free(s->fq);
		free(s->fdirty);
		s->fq = NULL;
		s->fdirty = NULL;
	}
}
