/* shards/mesh.c: the mesh between shards (contract 9.4-9.5): one single-producer ring per ordered pair, messages staged during a pass and published at its end with one wake per parked target; posts, calls and their results (with a backlog the credits bound), room waits, and connections migrated between shards. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"

/* Publish staged messages every this many, so a busy consumer can start
 * before the producer's pass ends; the wake still waits for the pass end. */
#define PUBLISH_EVERY 32u

/* What a ring slot carries: the low 32 bits of tl_mesh_msg.b. A migration
 * (tl_shard_migrate) carries the payload in a and, in the high 32 bits of
 * b, the descriptor (MSG_MIGRATE) or the target's result (MSG_MIGRATED). */
enum {
	MSG_POST = 0,
	MSG_CALL = 1,
	MSG_RESULT = 2,
	MSG_MIGRATE = 3,
	MSG_MIGRATED = 4,
	MSG_GCALL = 5,   /* a gather's part: token is the caller's tl_mesh_gather */
	MSG_GRESULT = 6, /* its result, token as sent */
	MSG_FREE = 7,    /* blocks to free here (foreign.c): a is the list */
	MSG_BCALL = 8,   /* a batch: token is the caller's tl_mesh_batcher, a the first item */
	MSG_BRESULT = 9, /* its result, token as sent, fn the first item */
};
#define MSG_TYPE(b) ((uint32_t)(b))
#define MSG_WORD(b) ((int32_t)((b) >> 32))
#define MSG_MAKE(type, word) ((uint64_t)(type) | (uint64_t)(uint32_t)(word) << 32)

/* ---- setup and teardown (on the shard's thread) ---- */

int tl__mesh_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->out = calloc(s->n, sizeof *s->out);
	s->dirty = malloc((size_t)s->n * sizeof *s->dirty);
	if (!s->out || !s->dirty)
		return -ENOMEM;
	for (uint32_t t = 0; t < s->n; t++) {
		s->out[t].backlog = malloc((size_t)rt->cfg.mesh_inflight * sizeof(struct tl_mesh_msg));
		s->out[t].gq = calloc(rt->cfg.mesh_inflight, sizeof(tl_mesh_gate *));
		s->out[t].gq_free = malloc((size_t)rt->cfg.mesh_inflight * sizeof(uint32_t));
		if (!s->out[t].backlog || !s->out[t].gq || !s->out[t].gq_free)
			return -ENOMEM;
		for (uint32_t i = 0; i < rt->cfg.mesh_inflight; i++)
			s->out[t].gq_free[i] = rt->cfg.mesh_inflight - 1 - i;
		s->out[t].gq_nfree = rt->cfg.mesh_inflight;
	}
	/* The consumer allocates its inbound rings, on its own node. */
	for (uint32_t src = 0; src < s->n; src++)
		if (tl__spsc_init(&s->in[(size_t)src * s->n].ring, rt->cfg.mesh_capacity) < 0)
			return -ENOMEM;
	return 0;
}

/* The inbound rings outlive the thread (a producer may still look at
 * them): the runtime frees them at destroy. */
void tl__mesh_teardown(tl_shard *s)
{
	if (s->out)
		for (uint32_t t = 0; t < s->n; t++) {
			free(s->out[t].backlog);
			free(s->out[t].gq);
			free(s->out[t].gq_free);
		}
	free(s->out);
	free(s->dirty);
	s->out = NULL;
	s->dirty = NULL;
}

void tl__mesh_depths(tl_shard *s, uint64_t *inbound, uint64_t *backlog)
{
	for (uint32_t i = 0; i < s->n; i++) {
		*inbound += tl__spsc_size_approx(&s->in[(size_t)i * s->n].ring);
		*backlog += s->out[i].bl_len;
	}
}

/* ---- the mesh: producer side ---- */

/* Free slots toward t as this producer knows them; rereads the consumer's
 * index only when the cached one says full. */
static inline size_t ring_room(tl_shard *s, struct out *o, struct tl__spsc *r)
{
	size_t cap = r->mask + 1;
	size_t room = cap - (o->head - r->tail_cache);

	if (!room) {
		r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
		room = cap - (o->head - r->tail_cache);
	}
	(void)s;
	return room;
}

static inline void ring_publish(struct out *o, struct tl__spsc *r)
{
	atomic_store_explicit(&r->head, o->head, memory_order_release);
	o->published = o->head;
}

/* Write one message into the next free slot (room already checked). */
static inline void stage(tl_shard *s, uint32_t t, const struct tl_mesh_msg *m)
{
	struct out *o = &s->out[t];
	struct tl__spsc *r = &s->outp[t].ring;

	r->slots[o->head & r->mask] = *m;
	o->head++;
	s->st.mesh_out++;
	if (!o->dirty) {
		o->dirty = 1;
		s->dirty[s->ndirty++] = t;
	}
	if (o->head - o->published >= PUBLISH_EVERY)
		ring_publish(o, r);
}

/* Stage a call to t (room checked): it holds one of t's credits until its
 * result is back. */
static inline void stage_call(tl_shard *s, uint32_t t, const struct tl_mesh_msg *m)
{
	stage(s, t, m);
	s->out[t].inflight++;
	s->inflight_total++;
}

/* Can a new message (not a result) go to t now? 0, or the refusal code. */
static inline int can_send(tl_shard *s, uint32_t t)
{
	struct out *o;

	if (tl_unlikely(t >= s->n))
		return -EINVAL;
	if (tl_unlikely(s->mesh_closed))
		return -EPIPE;
	o = &s->out[t];
	if (tl_unlikely(o->bl_len || !ring_room(s, o, &s->outp[t].ring))) {
		s->st.mesh_refused++;
		return -ENOBUFS;
	}
	return 0;
}

int tl_shard_post(tl_shard *s, uint32_t target, uint64_t token, uint64_t payload)
{
	int rc = can_send(s, target);

	if (tl_unlikely(rc))
		return rc;
	stage(s, target, &(struct tl_mesh_msg){.token = token, .a = payload, .b = MSG_POST});
	return 0;
}

int tl__mesh_post_free(tl_shard *s, uint32_t t, void *head)
{
	struct out *o = &s->out[t];
	int rc = can_send(s, t);

	if (rc) {
		if (rc == -ENOBUFS && !o->free_wait) {
			o->free_wait = 1;
			s->nfree_wait++;
		}
		return rc;
	}
	if (o->free_wait) {
		o->free_wait = 0;
		s->nfree_wait--;
	}
	stage(s, t, &(struct tl_mesh_msg){.a = (uint64_t)(uintptr_t)head, .b = MSG_FREE});
	return 0;
}

/* Can a call (it holds a credit until its result) go to t now? */
static int can_call(tl_shard *s, uint32_t t)
{
	if (t < s->n && s->out[t].inflight >= s->rt->cfg.mesh_inflight && !s->mesh_closed) {
		s->st.mesh_refused++;
		return -ENOBUFS;
	}
	return can_send(s, t);
}

int tl_shard_migrate(tl_shard *s, tl_handle h, uint32_t target, uint64_t token,
		     uint64_t payload)
{
	int fd, rc = can_call(s, target);

	if (rc)
		return rc;
	/* Completions of h that the loop handed out this pass but the program
	 * has not seen yet (later in the batch) hold it as the loop's queued
	 * ones hold tl_detach: their bytes are the program's to handle first. */
	for (uint32_t k = s->bat_i + 1; k < s->bat_n; k++)
		if (s->batch[k].handle.v == h.v)
			return -EAGAIN;
	/* The ring has room and a credit is free: once detached, the
	 * descriptor is sure to go. */
	rc = tl_detach(s->loop, h, &fd);
	if (rc)
		return rc;
	stage_call(s, target,
		   &(struct tl_mesh_msg){.token = token, .a = payload,
					 .b = MSG_MAKE(MSG_MIGRATE, fd)});
	return 0;
}

int tl_shard_submit_to(tl_shard *s, uint32_t target, tl_mesh_fn fn, void *arg, uint64_t token)
{
	int rc;

	if (!fn)
		return -EINVAL;
	rc = can_call(s, target);
	if (rc)
		return rc;
	stage_call(s, target,
		   &(struct tl_mesh_msg){.token = token, .a = (uint64_t)(uintptr_t)arg,
					 .b = MSG_CALL, .fn = (void *)fn});
	return 0;
}

static void deliver_gather(tl_shard *s, tl_mesh_gather *g);
static void deliver_mesh(tl_shard *s, uint64_t token, int64_t result, uint32_t aux,
			 uint64_t value, void *ptr, uint16_t kind);

/* ---- batched calls ---- */

int tl_mesh_batcher_init(tl_mesh_batcher *b, tl_mesh_chain *chains, uint32_t nchains,
			 tl_mesh_fn fn, uint64_t token)
{
	if (!b || !chains || !nchains || !fn)
		return -EINVAL;
	memset(b, 0, sizeof *b);
	memset(chains, 0, (size_t)nchains * sizeof *chains);
	b->chains = chains;
	b->nchains = nchains;
	b->fn = fn;
	b->token = token;
	return 0;
}

int tl_shard_batch_add(tl_shard *s, tl_mesh_batcher *b, uint32_t target, tl_mesh_item *it)
{
	tl_mesh_chain *c;

	if (tl_unlikely(!s || !b || !it || !b->fn || target >= s->n || target >= b->nchains))
		return -EINVAL;
	it->next = NULL; /* a refused item is a chain of one too */
	if (tl_unlikely(s->mesh_closed))
		return -EPIPE;
	c = &b->chains[target];
	if (c->first) {
		c->last->next = it;
	} else {
		c->first = it;
		b->queued++;
	}
	c->last = it;
	if (!b->listed_) {
		b->listed_ = 1;
		b->next_ = s->batchers;
		s->batchers = b;
	}
	return 0;
}

/* A call to t fits now: a credit, ring room, no results backed up before
 * it. Unlike can_call, counts no refusal (a waiting chain asks each pass). */
static int call_fits(tl_shard *s, uint32_t t)
{
	struct out *o = &s->out[t];

	return o->inflight < s->rt->cfg.mesh_inflight && !o->bl_len &&
	       ring_room(s, o, &s->outp[t].ring);
}

/* Something waits for room to t (a batch's chain, a waiting gather): the
 * shard asks to be woken once t can take a call (tl__mesh_room_check).
 * The marks are made afresh at each pass's end: 2 while a pass's end
 * looks again at a target marked at the last one, 1 once marked. A wait
 * that begins counts once in mesh_refused (the mesh had no room), however
 * many passes it lasts. */
static void call_wait(tl_shard *s, uint32_t t)
{
	struct out *o = &s->out[t];

	if (!o->batch_wait) {
		s->nbatch_wait++;
		s->st.mesh_refused++;
	}
	o->batch_wait = 1;
}

static void gathers_flush(tl_shard *s);

void tl__mesh_batches_flush(tl_shard *s)
{
	tl_mesh_batcher **pp = &s->batchers;

	if (s->mesh_closed) /* they end at tl__mesh_end_gathers */
		return;
	for (uint32_t t = 0; s->nbatch_wait && t < s->n; t++)
		if (s->out[t].batch_wait)
			s->out[t].batch_wait = 2;
	if (s->gwait) /* waiting gathers first: batches do not starve them */
		gathers_flush(s);
	while (*pp) {
		tl_mesh_batcher *b = *pp;

		for (uint32_t t = 0; t < b->nchains && b->queued; t++) {
			tl_mesh_chain *c = &b->chains[t];

			if (!c->first)
				continue;
			if (!call_fits(s, t)) { /* stays; woken once t has room */
				call_wait(s, t);
				continue;
			}
			stage_call(s, t,
				   &(struct tl_mesh_msg){.token = (uint64_t)(uintptr_t)b,
							 .a = (uint64_t)(uintptr_t)c->first,
							 .b = MSG_BCALL, .fn = (void *)b->fn});
			b->inflight++;
			c->first = c->last = NULL;
			b->queued--;
		}
		if (b->queued) {
			pp = &b->next_;
			continue;
		}
		*pp = b->next_;
		b->next_ = NULL;
		b->listed_ = 0;
	}
	for (uint32_t t = 0; s->nbatch_wait && t < s->n; t++)
		if (s->out[t].batch_wait == 2) { /* nothing waits for t any more */
			s->out[t].batch_wait = 0;
			s->nbatch_wait--;
		}
}

/* The stop: chains and gathers that never went complete with -EPIPE. */
static void end_batches(tl_shard *s)
{
	while (s->gwait) {
		tl_mesh_gather *g = s->gwait;

		s->gwait = g->next_;
		g->next_ = g->prev_ = NULL;
		g->busy = g->waiting = 0;
		for (uint32_t i = 0; i < g->nparts; i++)
			g->parts[i].state = TL_PART_NONE;
		deliver_mesh(s, g->token, -EPIPE, s->id | TL_MESH_RESULT | TL_MESH_GATHER, 0, g,
			     TL_K_MESH);
	}
	s->gwait_tail = NULL;
	while (s->batchers) {
		tl_mesh_batcher *b = s->batchers;

		s->batchers = b->next_;
		b->next_ = NULL;
		b->listed_ = 0;
		for (uint32_t t = 0; t < b->nchains && b->queued; t++) {
			tl_mesh_item *first = b->chains[t].first;

			if (!first)
				continue;
			b->chains[t].first = b->chains[t].last = NULL;
			b->queued--;
			deliver_mesh(s, b->token, -EPIPE, t | TL_MESH_RESULT | TL_MESH_BATCH, 0, first,
				     TL_K_MESH);
		}
	}
	for (uint32_t t = 0; t < s->n; t++)
		s->out[t].batch_wait = 0;
	s->nbatch_wait = 0;
}

/* A gather's part is back (or lost at the stop): when it was the last,
 * the gather leaves the list and its one completion goes out. */
static void gather_part(tl_shard *s, tl_mesh_gather *g, uint32_t t, int64_t res, uint32_t state)
{
	g->parts[t].result = res;
	g->parts[t].state = state;
	if (--g->pending)
		return;
	if (g->prev_)
		g->prev_->next_ = g->next_;
	else
		s->gathers = g->next_;
	if (g->next_)
		g->next_->prev_ = g->prev_;
	g->next_ = g->prev_ = NULL;
	g->busy = 0;
	deliver_gather(s, g);
}

int tl_mesh_gather_init(tl_mesh_gather *g, tl_mesh_part *parts, uint32_t nparts)
{
	if (!g || !parts || !nparts)
		return -EINVAL;
	memset(g, 0, sizeof *g);
	g->parts = parts;
	g->nparts = nparts;
	return 0;
}

/* Mark the targets of a gather in g's parts (catching one listed twice or
 * out of range): their count, or -EINVAL with every part unmarked. */
static int gather_mark(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets, uint32_t cnt)
{
	for (uint32_t i = 0; i < g->nparts; i++)
		g->parts[i].state = TL_PART_NONE;
	for (uint32_t i = 0; i < cnt; i++) {
		uint32_t t = targets ? targets[i] : i;

		if (t >= s->n || t >= g->nparts || g->parts[t].state != TL_PART_NONE) {
			for (uint32_t k = 0; k < g->nparts; k++)
				g->parts[k].state = TL_PART_NONE;
			return -EINVAL;
		}
		g->parts[t].state = TL_PART_PENDING;
		g->parts[t].result = 0;
	}
	return (int)cnt;
}

/* Stage every marked part of g, and put g on the list of those in flight. */
static void gather_send(tl_shard *s, tl_mesh_gather *g, tl_mesh_fn fn, void *arg, uint64_t token)
{
	uint32_t cnt = 0;

	for (uint32_t t = 0; t < g->nparts; t++) {
		if (g->parts[t].state != TL_PART_PENDING)
			continue;
		stage_call(s, t,
			   &(struct tl_mesh_msg){.token = (uint64_t)(uintptr_t)g,
						 .a = (uint64_t)(uintptr_t)arg, .b = MSG_GCALL,
						 .fn = (void *)fn});
		cnt++;
	}
	g->token = token;
	g->pending = cnt;
	g->busy = 1;
	g->waiting = 0;
	g->prev_ = NULL;
	g->next_ = s->gathers;
	if (s->gathers)
		s->gathers->prev_ = g;
	s->gathers = g;
}

/* Every marked target of g can take a call now? Else the first that
 * cannot (g->blocked). */
static int gather_fits(tl_shard *s, tl_mesh_gather *g)
{
	for (uint32_t t = 0; t < g->nparts; t++)
		if (g->parts[t].state == TL_PART_PENDING && !call_fits(s, t)) {
			g->blocked = t;
			return 0;
		}
	return 1;
}

static int gather_check(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets,
			uint32_t ntargets, tl_mesh_fn fn)
{
	uint32_t cnt = targets ? ntargets : s->n;

	if (!g || !g->parts || !fn || !cnt)
		return -EINVAL;
	if (g->busy)
		return -EBUSY;
	if (!targets && g->nparts < s->n)
		return -EINVAL;
	if (s->mesh_closed)
		return -EPIPE;
	return gather_mark(s, g, targets, cnt);
}

int tl_shard_gather(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets, uint32_t ntargets,
		    tl_mesh_fn fn, void *arg, uint64_t token)
{
	int cnt = gather_check(s, g, targets, ntargets, fn);

	if (cnt < 0)
		return cnt;
	/* All or nothing: a credit and a slot for every target first. */
	if (!gather_fits(s, g)) {
		s->st.mesh_refused++;
		for (uint32_t i = 0; i < g->nparts; i++)
			g->parts[i].state = TL_PART_NONE;
		return -ENOBUFS;
	}
	gather_send(s, g, fn, arg, token);
	return cnt;
}

int tl_shard_gather_wait(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets,
			 uint32_t ntargets, tl_mesh_fn fn, void *arg, uint64_t token)
{
	int cnt = gather_check(s, g, targets, ntargets, fn);

	if (cnt < 0)
		return cnt;
	/* Waiting ones first: a new one does not overtake them. */
	if (!s->gwait && gather_fits(s, g)) {
		gather_send(s, g, fn, arg, token);
		return cnt;
	}
	g->fn_ = (void *)fn;
	g->arg_ = arg;
	g->token = token;
	g->busy = 1;
	g->waiting = 1;
	g->next_ = g->prev_ = NULL;
	if (s->gwait_tail)
		s->gwait_tail->next_ = g;
	else
		s->gwait = g;
	s->gwait_tail = g;
	call_wait(s, s->gwait->blocked); /* the first waits for that target */
	return cnt;
}

/* At a pass's end: the waiting gathers that fit go, in the order made. */
static void gathers_flush(tl_shard *s)
{
	while (s->gwait && gather_fits(s, s->gwait)) {
		tl_mesh_gather *g = s->gwait;

		s->gwait = g->next_;
		if (!s->gwait)
			s->gwait_tail = NULL;
		gather_send(s, g, (tl_mesh_fn)g->fn_, g->arg_, g->token);
	}
	if (s->gwait)
		call_wait(s, s->gwait->blocked);
}

int tl_shard_credits(const tl_shard *s, uint32_t target)
{
	uint32_t max;

	if (!s || target >= s->n)
		return -EINVAL;
	max = s->rt->cfg.mesh_inflight;
	return s->out[target].inflight >= max ? 0 : (int)(max - s->out[target].inflight);
}

int tl_mesh_gate_init(tl_mesh_gate *g)
{
	if (!g)
		return -EINVAL;
	memset(g, 0, sizeof *g);
	return 0;
}

int tl_shard_submit_gated(tl_shard *s, tl_mesh_gate *g, uint32_t target, tl_mesh_fn fn,
			  void *arg, uint64_t token)
{
	struct out *o;
	uint32_t slot;
	int rc;

	if (!g || !fn)
		return -EINVAL;
	if (g->closing)
		return -EBUSY;
	rc = can_call(s, target);
	if (rc)
		return rc;
	/* The word is the gate's slot + 1; the target echoes it on the result. */
	o = &s->out[target];
	slot = o->gq_free[--o->gq_nfree];
	o->gq[slot] = g;
	stage_call(s, target,
		   &(struct tl_mesh_msg){.token = token, .a = (uint64_t)(uintptr_t)arg,
					 .b = MSG_MAKE(MSG_CALL, slot + 1), .fn = (void *)fn});
	g->inflight++;
	return 0;
}

static void gate_due(tl_shard *s, tl_mesh_gate *g)
{
	g->next_ = s->gates_due;
	s->gates_due = g;
}

int tl_shard_gate_close(tl_shard *s, tl_mesh_gate *g, uint64_t token)
{
	if (!g)
		return -EINVAL;
	if (g->closing)
		return -EBUSY;
	g->closing = 1;
	g->token = token;
	if (!g->inflight)
		gate_due(s, g);
	return 0;
}

static void deliver_mesh(tl_shard *s, uint64_t token, int64_t result, uint32_t aux,
			 uint64_t value, void *ptr, uint16_t kind);

void tl__mesh_gates_due(tl_shard *s)
{
	tl_mesh_gate *g = s->gates_due;

	/* Gates closed by the handlers below wait for the next call. */
	s->gates_due = NULL;
	while (g) {
		tl_mesh_gate *next = g->next_;

		g->next_ = NULL;
		g->closing = 0;
		deliver_mesh(s, g->token, g->dropped, s->id | TL_MESH_RESULT | TL_MESH_GATE, 0, g,
			     TL_K_MESH);
		g = next;
	}
}

/* A gated call to t is over (its result is here, or dropped): the gate in
 * its slot counts it, and the slot is free again. */
static void gate_done(tl_shard *s, uint32_t t, uint32_t slot, int dropped)
{
	struct out *o = &s->out[t];
	tl_mesh_gate *g = o->gq[slot];

	o->gq[slot] = NULL;
	o->gq_free[o->gq_nfree++] = slot;
	g->inflight--;
	g->dropped += (uint32_t)dropped;
	if (!g->inflight && g->closing)
		gate_due(s, g);
}

/* All-or-nothing check for a message to every shard. */
static int can_send_all(tl_shard *s, int call)
{
	for (uint32_t t = 0; t < s->n; t++) {
		int rc;

		if (call && s->out[t].inflight >= s->rt->cfg.mesh_inflight && !s->mesh_closed) {
			s->st.mesh_refused++;
			return -ENOBUFS;
		}
		rc = can_send(s, t);
		if (rc)
			return rc;
	}
	return 0;
}

int tl_shard_broadcast(tl_shard *s, uint64_t token, uint64_t payload)
{
	int rc = can_send_all(s, 0);

	if (rc)
		return rc;
	for (uint32_t t = 0; t < s->n; t++)
		stage(s, t, &(struct tl_mesh_msg){.token = token, .a = payload, .b = MSG_POST});
	return (int)s->n;
}

int tl_shard_submit_all(tl_shard *s, tl_mesh_fn fn, void *arg, uint64_t token)
{
	int rc;

	if (!fn)
		return -EINVAL;
	rc = can_send_all(s, 1);
	if (rc)
		return rc;
	for (uint32_t t = 0; t < s->n; t++) {
		stage_call(s, t,
			   &(struct tl_mesh_msg){.token = token, .a = (uint64_t)(uintptr_t)arg,
						 .b = MSG_CALL, .fn = (void *)fn});
	}
	return (int)s->n;
}

int tl_shard_wait_room(tl_shard *s, uint32_t target, uint64_t token)
{
	struct out *o;

	if (target >= s->n)
		return -EINVAL;
	if (s->mesh_closed)
		return -EPIPE;
	o = &s->out[target];
	if (o->room_wait)
		return -ENOBUFS;
	o->room_wait = 1;
	o->room_credit = o->inflight >= s->rt->cfg.mesh_inflight;
	o->room_token = token;
	s->nroom_wait++;
	return 0;
}

/* A function's result for shard t: into the ring if it has room and nothing
 * waits before it, else into the backlog (never refused: the caller's credit
 * reserved its place). */
static void send_result(tl_shard *s, uint32_t t, const struct tl_mesh_msg *m)
{
	struct out *o = &s->out[t];
	uint32_t cap = s->rt->cfg.mesh_inflight;

	if (s->mesh_closed) {
		s->st.mesh_dropped++;
		return;
	}
	if (!o->bl_len && ring_room(s, o, &s->outp[t].ring)) {
		stage(s, t, m);
		return;
	}
	if (o->bl_len == cap) { /* only a broken credit count gets here */
		s->st.mesh_dropped++;
		return;
	}
	if (!o->bl_len)
		s->nbacklog++;
	o->backlog[(o->bl_head + o->bl_len) % cap] = *m;
	o->bl_len++;
}

/* The result message's type word for call m: a gather part's, or a call's
 * (gated or not, as the call said). */
static uint64_t result_word(const struct tl_mesh_msg *m)
{
	if (MSG_TYPE(m->b) == MSG_GCALL)
		return MSG_GRESULT;
	if (MSG_TYPE(m->b) == MSG_BCALL)
		return MSG_BRESULT;
	return MSG_MAKE(MSG_RESULT, MSG_WORD(m->b));
}

int tl_shard_defer(tl_shard *s, tl_mesh_reply *r)
{
	if (!s || !r || !s->call || s->call_deferred)
		return -EINVAL;
	r->token = s->call->token;
	r->arg = s->call->a;
	r->word = result_word(s->call);
	r->src = s->call_src;
	r->shard = s->id + 1;
	s->call_deferred = 1;
	return 0;
}

int tl_shard_reply(tl_shard *s, tl_mesh_reply *r, int64_t result)
{
	if (!s || !r || r->shard != s->id + 1)
		return -EINVAL;
	r->shard = 0; /* answered: a second reply is refused */
	if (s->mesh_closed) {
		s->st.mesh_dropped++;
		return -EPIPE;
	}
	send_result(s, r->src, &(struct tl_mesh_msg){.token = r->token, .a = (uint64_t)result,
						     .b = r->word, .fn = (void *)(uintptr_t)r->arg});
	return 0;
}

/* Move backlogged results into their rings while there is room. */
static void push_backlogs(tl_shard *s)
{
	uint32_t cap = s->rt->cfg.mesh_inflight;

	for (uint32_t t = 0; t < s->n && s->nbacklog; t++) {
		struct out *o = &s->out[t];

		while (o->bl_len && ring_room(s, o, &s->outp[t].ring)) {
			stage(s, t, &o->backlog[o->bl_head]);
			o->bl_head = (o->bl_head + 1) % cap;
			if (!--o->bl_len)
				s->nbacklog--;
		}
	}
}

/* Publish what was staged this pass and wake each target once. The wake
 * costs a system call only if that target is parked (tl_poster_wake). */
void tl__mesh_flush(tl_shard *s)
{
	for (uint32_t i = 0; i < s->ndirty; i++) {
		uint32_t t = s->dirty[i];
		struct out *o = &s->out[t];

		if (o->head != o->published)
			ring_publish(o, &s->outp[t].ring);
		o->dirty = 0;
		if (t != s->id)
			tl_poster_wake(s->rt->shards[t].poster);
	}
	s->ndirty = 0;
}

static void deliver_mesh(tl_shard *s, uint64_t token, int64_t result, uint32_t aux,
			 uint64_t value, void *ptr, uint16_t kind);

/* A gather's one completion: every part back (or lost at the stop). */
static void deliver_gather(tl_shard *s, tl_mesh_gather *g)
{
	uint32_t n = 0, lost = 0;

	for (uint32_t i = 0; i < g->nparts; i++) {
		n += g->parts[i].state != TL_PART_NONE;
		lost += g->parts[i].state == TL_PART_LOST;
	}
	deliver_mesh(s, g->token, lost ? -EPIPE : (int64_t)n,
		     s->id | TL_MESH_RESULT | TL_MESH_GATHER, n, g, TL_K_MESH);
}

static void deliver_mesh(tl_shard *s, uint64_t token, int64_t result, uint32_t aux,
			 uint64_t value, void *ptr, uint16_t kind)
{
	tl_completion c;

	c.token = token;
	c.op = TL_OP_NONE;
	c.handle = TL_HANDLE_NONE;
	c.result = result;
	c.kind = kind;
	c.flags = TL_F_TERMINAL;
	c.aux = aux;
	c.data = NULL;
	c.u.mesh.payload = value;
	c.u.mesh.arg = ptr;
	c.u.mesh.conn = TL_HANDLE_NONE;
	s->mesh_comp[kind]++;
	tl__rt_dispatch(s, &c);
}

/* A connection migrated from src: adopt it and tell the program, or close
 * it; either way src hears how it went. */
static void run_migrate(tl_shard *s, uint32_t src, const struct tl_mesh_msg *m)
{
	tl_completion c;
	int fd = MSG_WORD(m->b);
	int rc = tl_adopt(s->loop, fd, &c.u.mesh.conn);

	if (rc < 0) {
		tl__os_sock_close(fd);
	} else {
		c.token = m->token;
		c.op = TL_OP_NONE;
		c.handle = TL_HANDLE_NONE;
		c.result = 0;
		c.kind = TL_K_MESH;
		c.flags = TL_F_TERMINAL;
		c.aux = src | TL_MESH_MIGRATED;
		c.data = NULL;
		c.u.mesh.payload = m->a;
		c.u.mesh.arg = NULL;
		s->mesh_comp[TL_K_MESH]++;
		tl__rt_dispatch(s, &c);
	}
	send_result(s, src,
		    &(struct tl_mesh_msg){.token = m->token, .a = m->a,
					  .b = MSG_MAKE(MSG_MIGRATED, rc)});
}

/* ---- the mesh: consumer side ---- */

static inline void run_msg(tl_shard *s, uint32_t src, const struct tl_mesh_msg *m)
{
	switch (MSG_TYPE(m->b)) {
	case MSG_POST:
		deliver_mesh(s, m->token, 0, src, m->a, NULL, TL_K_MESH);
		break;
	case MSG_CALL:
	case MSG_GCALL:
	case MSG_BCALL: {
		tl_mesh_fn fn = (tl_mesh_fn)m->fn;
		int64_t res;

		s->call = m;
		s->call_src = src;
		s->call_deferred = 0;
		res = fn(s, (void *)(uintptr_t)m->a);
		s->call = NULL;
		if (!s->call_deferred) /* else tl_shard_reply sends it */
			send_result(s, src, &(struct tl_mesh_msg){.token = m->token, .a = (uint64_t)res,
								  .b = result_word(m), .fn = (void *)(uintptr_t)m->a});
		break;
	}
	case MSG_GRESULT:
		s->out[src].inflight--;
		s->inflight_total--;
		gather_part(s, (tl_mesh_gather *)(uintptr_t)m->token, src, (int64_t)m->a,
			    TL_PART_DONE);
		break;
	case MSG_BRESULT: {
		tl_mesh_batcher *b = (tl_mesh_batcher *)(uintptr_t)m->token;

		s->out[src].inflight--;
		s->inflight_total--;
		b->inflight--;
		deliver_mesh(s, b->token, (int64_t)m->a, src | TL_MESH_RESULT | TL_MESH_BATCH, 0,
			     m->fn, TL_K_MESH);
		break;
	}
	case MSG_MIGRATE:
		run_migrate(s, src, m);
		break;
	case MSG_FREE:
		tl__foreign_take(s, (void *)(uintptr_t)m->a);
		break;
	case MSG_MIGRATED:
		s->out[src].inflight--;
		s->inflight_total--;
		deliver_mesh(s, m->token, MSG_WORD(m->b), src | TL_MESH_RESULT | TL_MESH_MIGRATED,
			     m->a, NULL, TL_K_MESH);
		break;
	default: /* MSG_RESULT */
		s->out[src].inflight--;
		s->inflight_total--;
		if (MSG_WORD(m->b))
			gate_done(s, src, (uint32_t)MSG_WORD(m->b) - 1, 0);
		deliver_mesh(s, m->token, (int64_t)m->a, src | TL_MESH_RESULT, 0, m->fn, TL_K_MESH);
		/* A gate's completion comes after the last of its results. */
		if (s->gates_due)
			tl__mesh_gates_due(s);
		break;
	}
}

/* Take up to budget messages from each inbound ring, running them in place.
 * Returns 1 if some ring still holds messages. */
int tl__mesh_receive(tl_shard *s, uint32_t budget)
{
	tl_completion c;
	uint64_t posts = 0;
	int more = 0;

	c.op = TL_OP_NONE;
	c.handle = TL_HANDLE_NONE;
	c.data = NULL;
	c.u.mesh.conn = TL_HANDLE_NONE;
	for (uint32_t src = 0; src < s->n; src++) {
		struct pair *p = &s->in[(size_t)src * s->n];
		struct tl__spsc *r = &p->ring;
		size_t left = budget;

		/* Chunk by chunk: a producer that keeps publishing keeps this
		 * loop going (up to the budget) instead of paying a whole pass
		 * per chunk, and each chunk's slots go back to it at once. */
		while (left) {
			size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
			size_t avail, take;

			r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
			avail = r->head_cache - tail;
			if (!avail)
				break;
			take = avail < left ? avail : left;
			left -= take;
			more |= avail > take;
			/* The slots stay ours until tail moves below, so posts
			 * are read in place; the record handed out is reused. */
			for (size_t k = 0; k < take; k++) {
				const struct tl_mesh_msg *m = &r->slots[(tail + k) & r->mask];

				if (tl_likely(m->b == MSG_POST)) {
					c.token = m->token;
					c.result = 0;
					c.kind = TL_K_MESH;
					c.flags = TL_F_TERMINAL;
					c.aux = src;
					c.u.mesh.payload = m->a;
					c.u.mesh.arg = NULL;
					posts++;
					tl__rt_dispatch(s, &c);
				} else {
					struct tl_mesh_msg copy = *m;

					run_msg(s, src, &copy);
				}
			}
			s->st.mesh_in += take;
			/* Release the slots. Sequentially consistent, like the
			 * load of want_room after it and the producer's store of
			 * want_room before its reload of tail (Dekker): one of
			 * the two sides sees the other, so a producer waiting
			 * for room is never missed. */
			atomic_exchange_explicit(&r->tail, tail + take, memory_order_seq_cst);
			if (atomic_load_explicit(&p->want_room, memory_order_seq_cst) &&
			    atomic_exchange_explicit(&p->want_room, 0, memory_order_relaxed))
				tl_poster_wake(s->rt->shards[src].poster);
		}
	}
	s->mesh_comp[TL_K_MESH] += posts;
	return more;
}

/* Something in an inbound ring? Exact for this (the consuming) thread. */
int tl__mesh_inbound_ready(tl_shard *s)
{
	for (uint32_t src = 0; src < s->n; src++) {
		struct tl__spsc *r = &s->in[(size_t)src * s->n].ring;

		if (atomic_load_explicit(&r->head, memory_order_acquire) !=
		    atomic_load_explicit(&r->tail, memory_order_relaxed))
			return 1;
	}
	return 0;
}

/*
 * Without arm (inside a pass): move backlogged results into their rings and
 * deliver the room completions that are due. With arm (before parking, after
 * the pass's flush, so nothing may be staged or delivered here): ask the
 * consumers of still-waiting pairs for a wake, and say whether room turned
 * up meanwhile (then the shard must not park).
 */
int tl__mesh_room_check(tl_shard *s, int arm)
{
	int ready = 0;

	if (!arm && s->nbacklog)
		push_backlogs(s);
	if (!s->nroom_wait && !s->nbacklog && !s->nfree_wait && !s->nbatch_wait)
		return 0;
	for (uint32_t t = 0; t < s->n; t++) {
		struct out *o = &s->out[t];
		struct tl__spsc *r = &s->outp[t].ring;

		if (!o->room_wait && !o->bl_len && !o->free_wait && !o->batch_wait)
			continue;
		/* A wait for a credit too: the result that returns it comes
		 * through an inbound ring, whose publisher wakes this shard. */
		int free_credit = o->inflight < s->rt->cfg.mesh_inflight;
		int credit = !o->room_credit || free_credit;

		if (!arm) {
			if (o->room_wait && credit && !o->bl_len && !s->mesh_closed &&
			    ring_room(s, o, r)) {
				o->room_wait = 0;
				s->nroom_wait--;
				deliver_mesh(s, o->room_token, 0, t, 0, NULL, TL_K_ROOM);
			}
			continue;
		}
		atomic_exchange_explicit(&s->outp[t].want_room, 1, memory_order_seq_cst);
		r->tail_cache = atomic_load_explicit(&r->tail, memory_order_seq_cst);
		if (r->mask + 1 - (o->head - r->tail_cache) &&
		    ((o->room_wait && credit) || o->bl_len || o->free_wait ||
		     (o->batch_wait && free_credit)))
			ready = 1;
	}
	return ready;
}


void tl__mesh_close(tl_shard *s)
{
	s->mesh_closed = 1;
	push_backlogs(s);
	for (uint32_t t = 0; t < s->n; t++) {
		s->st.mesh_dropped += s->out[t].bl_len;
		s->out[t].bl_len = 0;
	}
	s->nbacklog = 0;
	/* Blocks still queued for their owners wait for tl__foreign_finish. */
	for (uint32_t t = 0; t < s->n; t++)
		s->out[t].free_wait = 0;
	s->nfree_wait = 0;
	tl__mesh_flush(s);
}

void tl__mesh_end_gathers(tl_shard *s)
{
	end_batches(s);
	/* Gated calls still out will never see their result. */
	for (uint32_t t = 0; t < s->n; t++)
		for (uint32_t slot = 0; slot < s->rt->cfg.mesh_inflight; slot++)
			if (s->out[t].gq[slot])
				gate_done(s, t, slot, 1);
	while (s->gates_due)
		tl__mesh_gates_due(s);
	while (s->gathers) {
		tl_mesh_gather *g = s->gathers;

		/* The last lost part ends it and takes it off the list. */
		for (uint32_t t = 0; t < g->nparts && g->busy; t++)
			if (g->parts[t].state == TL_PART_PENDING) {
				s->out[t].inflight--;
				s->inflight_total--;
				gather_part(s, g, t, 0, TL_PART_LOST);
			}
	}
}
