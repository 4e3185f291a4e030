/* lib/tls/ctx.c: the per-loop TLS context: its tables, buffer pools and completion queue, ids, and the dispatch of the loop's completions to sessions. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tls_int.h"

/*
 * Every slot, buffer and queue entry is allocated by tl_tls_ctx_new. An op
 * slot stays taken until the host has been handed its terminal, a session
 * slot until its Closed: so the queue of completions, sized for one
 * terminal per op, one Closed per session and one read per plaintext
 * buffer, can never overflow, and a stale id is always -ENOENT (the
 * loop's own rule, contract 1.3).
 */

static _Atomic uint32_t next_ident = 1;

void tl_tls_ctx_config_init(tl_tls_ctx_config *cc)
{
	memset(cc, 0, sizeof *cc);
	cc->max_sessions = 1024;
	cc->max_ops = 4096;
	cc->plain_buffers = 256;
	cc->plain_buffer_size = 16384;
	cc->out_buffers = 256;
	cc->session_leases = 4;
	cc->session_out = 2;
	cc->close_linger_ns = 1000000000ull;
	cc->loop_leases = 32768;
	cc->spill_buffers = 64;
}

static int valid(const tl_tls_ctx_config *cc)
{
	return cc->token_tag >= 1 && cc->max_sessions >= 1 && cc->max_sessions <= (1u << 24) &&
	       cc->max_ops >= 1 && cc->max_ops <= (1u << 24) && cc->plain_buffers >= 1 &&
	       cc->plain_buffers <= (1u << 20) && cc->plain_buffer_size >= 1024 &&
	       cc->plain_buffer_size <= (1u << 20) && cc->out_buffers >= 4 &&
	       cc->out_buffers <= (1u << 20) && cc->session_leases >= 1 &&
	       cc->session_leases <= cc->plain_buffers && cc->session_out >= 1 &&
	       cc->session_out <= cc->out_buffers / 2 && cc->session_out <= TLS_OUTQ / 2 &&
	       cc->close_linger_ns >= 1 && cc->close_linger_ns <= (1ull << 62) &&
	       cc->loop_leases >= 1 && cc->loop_leases <= 32768 && cc->spill_buffers >= 1 &&
	       cc->spill_buffers <= (1u << 20);
}

int tl_tls_ctx_new(tl_loop *loop, const tl_tls_ctx_config *cc, tl_tls_ctx **out)
{
	tl_tls_ctx_config def;
	struct tl_tls_ctx *x;

	if (!loop || !out)
		return -EINVAL;
	if (!cc) {
		tl_tls_ctx_config_init(&def);
		cc = &def;
	}
	if (!valid(cc))
		return -EINVAL;
	if (tls__library_init() < 0)
		return -ENOMEM;
	x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	x->loop = loop;
	x->cc = *cc;
	/* The id's top bit is set (TL_ID_LAYER_BIT) and never is in a loop's
	 * ids, whose identities count from 1 as these do: without it the
	 * first loop and the first ctx of a process issue the same ids. */
	x->ident = 0x800000u | (atomic_fetch_add(&next_ident, 1) & 0x7fffffu);
	x->q_cap = cc->max_ops + cc->max_sessions + cc->plain_buffers;
	x->sess = calloc(cc->max_sessions, sizeof *x->sess);
	x->ops = calloc(cc->max_ops, sizeof *x->ops);
	x->q = calloc(x->q_cap, sizeof *x->q);
	x->plain = malloc((size_t)cc->plain_buffers * cc->plain_buffer_size);
	x->plain_free = malloc(cc->plain_buffers * sizeof *x->plain_free);
	x->plain_owner = calloc(cc->plain_buffers, sizeof *x->plain_owner);
	x->plain_owner_gen = calloc(cc->plain_buffers, sizeof *x->plain_owner_gen);
	x->plain_held = calloc(cc->plain_buffers, 1);
	x->out = malloc((size_t)cc->out_buffers * TLS_OUT_SIZE);
	x->out_free = malloc(cc->out_buffers * sizeof *x->out_free);
	uint32_t nodes = cc->loop_leases + cc->spill_buffers;
	x->lents = malloc(nodes * sizeof *x->lents);
	x->spill = malloc((size_t)cc->spill_buffers * TLS_SPILL_SIZE);
	x->spill_free = malloc(cc->spill_buffers * sizeof *x->spill_free);
	x->scratch = malloc(TLS_SPILL_SIZE);
	if (!x->lents || !x->spill || !x->spill_free || !x->scratch || !x->sess || !x->ops || !x->q || !x->plain || !x->plain_free || !x->plain_owner ||
	    !x->plain_owner_gen || !x->plain_held || !x->out || !x->out_free) {
		tl_tls_ctx_destroy(x);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < cc->max_sessions; i++) {
		x->sess[i].next = i + 1 < cc->max_sessions ? i + 1 : NONE;
		x->sess[i].gen = 1;
	}
	for (uint32_t i = 0; i < cc->max_ops; i++) {
		x->ops[i].next = i + 1 < cc->max_ops ? i + 1 : NONE;
		x->ops[i].gen = 1;
	}
	for (uint32_t i = 0; i < cc->plain_buffers; i++)
		x->plain_free[i] = cc->plain_buffers - 1 - i;
	x->plain_nfree = cc->plain_buffers;
	for (uint32_t i = 0; i < cc->out_buffers; i++)
		x->out_free[i] = cc->out_buffers - 1 - i;
	x->out_nfree = cc->out_buffers;
	for (uint32_t i = 0; i < nodes; i++)
		x->lents[i].next = i + 1 < nodes ? i + 1 : NONE;
	x->lent_free = 0;
	for (uint32_t i = 0; i < cc->spill_buffers; i++)
		x->spill_free[i] = cc->spill_buffers - 1 - i;
	x->spill_nfree = cc->spill_buffers;
	x->sess_free = 0;
	x->op_free = 0;
	x->wp_head = x->wp_tail = x->wo_head = x->wo_tail = x->run_head = x->run_tail = NONE;
	x->ws_head = x->ws_tail = NONE;
	*out = x;
	return 0;
}

void tl_tls_ctx_destroy(tl_tls_ctx *x)
{
	if (!x)
		return;
	if (x->sess)
		for (uint32_t i = 0; i < x->cc.max_sessions; i++)
		{
			if (x->sess[i].gs)
				gnutls_deinit(x->sess[i].gs);
			if (x->spill_free)
				tls__carry_free(&x->sess[i]);
		}
	for (uint32_t i = 0; i < TLS_CSLOTS; i++) {
		if (x->cs[i].prio)
			gnutls_priority_deinit(x->cs[i].prio);
		tl_tls_config_unref(x->cs[i].cfg);
	}
	free(x->sess);
	free(x->ops);
	free(x->q);
	free(x->plain);
	free(x->plain_free);
	free(x->plain_owner);
	free(x->plain_owner_gen);
	free(x->plain_held);
	free(x->out);
	free(x->out_free);
	free(x->lents);
	free(x->spill);
	tls__carry_pool_free(x);
	free(x->spill_free);
	free(x->scratch);
	free(x);
}

/* ---- ids ---- */

struct tls_sess *tls__sess_of(struct tl_tls_ctx *x, tl_tls_id id)
{
	uint32_t slot = (uint32_t)id.v & 0xffffff;
	uint16_t gen = (uint16_t)(id.v >> 24);

	if (!x || (uint32_t)(id.v >> 40) != x->ident || slot >= x->cc.max_sessions)
		return NULL;
	struct tls_sess *s = &x->sess[slot];
	if (s->state == S_FREE || s->state == S_CLOSED || s->gen != gen)
		return NULL;
	return s;
}

struct tls_op *tls__op_of(struct tl_tls_ctx *x, tl_op op)
{
	uint32_t slot = (uint32_t)op.v & 0xffffff;
	uint16_t gen = (uint16_t)(op.v >> 24);

	if (!x || (uint32_t)(op.v >> 40) != x->ident || slot >= x->cc.max_ops)
		return NULL;
	struct tls_op *o = &x->ops[slot];
	if (o->type == OP_FREE || o->ended || o->gen != gen)
		return NULL;
	return o;
}

/* ---- ops and completions ---- */

struct tls_op *tls__op_new(struct tl_tls_ctx *x, struct tls_sess *s, int type, uint64_t token)
{
	if (x->op_free == NONE)
		return NULL;
	struct tls_op *o = &x->ops[x->op_free];
	x->op_free = o->next;
	uint16_t gen = o->gen;
	memset(o, 0, sizeof *o);
	o->gen = gen;
	o->type = (uint8_t)type;
	o->sess = tls_sess_slot(x, s);
	o->next = NONE;
	o->token = token;
	return o;
}

static void op_free(struct tl_tls_ctx *x, struct tls_op *o)
{
	o->type = OP_FREE;
	o->ended = 0;
	if (++o->gen == 0)
		o->gen = 1;
	o->next = x->op_free;
	x->op_free = tls_op_slot(x, o);
}

void tls__push(struct tl_tls_ctx *x, const tl_completion *c)
{
	/* Cannot be full (see the sizes above); were it ever, dropping a
	 * completion would break exactly-once, so it is a bug to stop on. */
	if (x->q_n == x->q_cap)
		abort();
	x->q[(x->q_head + x->q_n++) % x->q_cap] = *c;
}

static const uint16_t kind_of[] = {
	[OP_HS] = TL_K_TLS_HANDSHAKE,
	[OP_READ] = TL_K_READ,
	[OP_WRITE] = TL_K_WRITE,
	[OP_SHUT] = TL_K_SHUTDOWN,
};

void tls__op_end(struct tl_tls_ctx *x, struct tls_op *o, int64_t result, uint16_t flags)
{
	struct tls_sess *s = &x->sess[o->sess];

	if (o->type == OP_KEYUPDATE) { /* the layer's own: nobody waits for it */
		op_free(x, o);
		return;
	}
	if (s->hs_op == tls_op_slot(x, o))
		s->hs_op = NONE;
	if (s->rd_op == tls_op_slot(x, o))
		s->rd_op = NONE;
	if (s->shut_op == tls_op_slot(x, o))
		s->shut_op = NONE;
	tl_completion c = {
		.token = o->token,
		.op = tls_op_id(x, o),
		.handle = {tls_sess_id(x, s).v},
		.result = result,
		.kind = kind_of[o->type],
		.flags = (uint16_t)(TL_F_TERMINAL | flags),
	};
	if (o->type == OP_WRITE)
		c.u.write.written = o->done; /* encrypted into records that go out */
	tls__push(x, &c);
	o->ended = 1; /* its slot is free once the host has the terminal */
}

void tls__sess_free(struct tl_tls_ctx *x, struct tls_sess *s)
{
	s->state = S_FREE;
	if (++s->gen == 0)
		s->gen = 1;
	s->next = x->sess_free;
	x->sess_free = tls_sess_slot(x, s);
}

int tl_tls_poll(tl_tls_ctx *x, tl_completion *out, uint32_t cap)
{
	uint32_t n = 0;

	if (!x || !out || !cap)
		return -EINVAL;
	while (n < cap && x->q_n) {
		tl_completion *c = &x->q[x->q_head];
		out[n++] = *c;
		x->q_head = (x->q_head + 1) % x->q_cap;
		x->q_n--;
		if (c->kind == TL_K_CLOSED) {
			tls__sess_free(x, &x->sess[(uint32_t)c->handle.v & 0xffffff]);
		} else if (c->flags & TL_F_TERMINAL) {
			op_free(x, &x->ops[(uint32_t)c->op.v & 0xffffff]);
		}
	}
	return (int)n;
}

uint32_t tl_tls_pending(const tl_tls_ctx *x)
{
	return x ? x->q_n : 0;
}

/* ---- buffers, and the sessions waiting for them ---- */

static void wait_add(struct tl_tls_ctx *x, struct tls_sess *s, uint32_t *head, uint32_t *tail)
{
	uint32_t slot = tls_sess_slot(x, s);

	s->wait_next = NONE;
	if (*tail == NONE)
		*head = slot;
	else
		x->sess[*tail].wait_next = slot;
	*tail = slot;
	x->st.waits++;
}

static struct tls_sess *wait_pop(struct tl_tls_ctx *x, uint32_t *head, uint32_t *tail)
{
	if (*head == NONE)
		return NULL;
	struct tls_sess *s = &x->sess[*head];
	*head = s->wait_next;
	if (*head == NONE)
		*tail = NONE;
	return s;
}

void tls__kick(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->queued_run || s->state == S_FREE || s->state == S_CLOSED)
		return;
	s->queued_run = 1;
	s->run_next = NONE;
	uint32_t slot = tls_sess_slot(x, s);
	if (x->run_tail == NONE)
		x->run_head = slot;
	else
		x->sess[x->run_tail].run_next = slot;
	x->run_tail = slot;
}

void tls__runs(struct tl_tls_ctx *x)
{
	while (x->run_head != NONE) {
		struct tls_sess *s = &x->sess[x->run_head];
		x->run_head = s->run_next;
		if (x->run_head == NONE)
			x->run_tail = NONE;
		s->queued_run = 0;
		tls__run(x, s);
	}
}

uint32_t tls__plain_get(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (x->plain_nfree == 0) {
		if (!s->wait_plain) {
			s->wait_plain = 1;
			wait_add(x, s, &x->wp_head, &x->wp_tail);
		}
		return NONE;
	}
	return x->plain_free[--x->plain_nfree];
}

void tls__plain_put(struct tl_tls_ctx *x, uint32_t idx)
{
	x->plain_free[x->plain_nfree++] = idx;
	struct tls_sess *w = wait_pop(x, &x->wp_head, &x->wp_tail);
	if (w) {
		w->wait_plain = 0;
		tls__kick(x, w);
	}
}

uint32_t tls__out_get(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (x->out_nfree == 0) {
		if (s && !s->wait_out) {
			s->wait_out = 1;
			wait_add(x, s, &x->wo_head, &x->wo_tail);
		}
		return NONE;
	}
	x->st.out_busy++;
	return x->out_free[--x->out_nfree];
}

void tls__out_put(struct tl_tls_ctx *x, uint32_t idx)
{
	x->out_free[x->out_nfree++] = idx;
	x->st.out_busy--;
	struct tls_sess *w = wait_pop(x, &x->wo_head, &x->wo_tail);
	if (w) {
		w->wait_out = 0;
		tls__kick(x, w);
	}
}

uint32_t tls__spill_get(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (x->spill_nfree == 0) {
		if (s && !s->wait_spill) {
			s->wait_spill = 1;
			wait_add(x, s, &x->ws_head, &x->ws_tail);
		}
		return NONE;
	}
	return x->spill_free[--x->spill_nfree];
}

void tls__spill_put(struct tl_tls_ctx *x, uint32_t idx)
{
	x->spill_free[x->spill_nfree++] = idx;
	struct tls_sess *w = wait_pop(x, &x->ws_head, &x->ws_tail);
	if (w) {
		w->wait_spill = 0;
		tls__kick(x, w);
	}
}

/* A closing session leaves the waiting lists it is on. */
void tls__unwait(struct tl_tls_ctx *x, struct tls_sess *s)
{
	uint32_t slot = tls_sess_slot(x, s);
	uint32_t *lists[3][2] = {{&x->wp_head, &x->wp_tail}, {&x->wo_head, &x->wo_tail},
				 {&x->ws_head, &x->ws_tail}};
	uint8_t *flags[3] = {&s->wait_plain, &s->wait_out, &s->wait_spill};

	for (int k = 0; k < 3; k++) {
		if (!*flags[k])
			continue;
		uint32_t *head = lists[k][0], *tail = lists[k][1], prev = NONE;
		for (uint32_t i = *head; i != NONE; prev = i, i = x->sess[i].wait_next) {
			if (i != slot)
				continue;
			if (prev == NONE)
				*head = s->wait_next;
			else
				x->sess[prev].wait_next = s->wait_next;
			if (*tail == slot)
				*tail = prev;
			break;
		}
		*flags[k] = 0;
	}
}

int tl_tls_lease_release(tl_tls_ctx *x, uint32_t id)
{
	uint32_t idx = id & ~TLS_LEASE_BIT;

	if (!x || !(id & TLS_LEASE_BIT) || idx >= x->cc.plain_buffers || !x->plain_held[idx])
		return -ENOENT;
	x->plain_held[idx] = 0;
	x->st.plain_held--;
	struct tls_sess *s = &x->sess[x->plain_owner[idx]];
	if ((s->state == S_OPEN || s->state == S_CLOSING) && s->gen == x->plain_owner_gen[idx]) {
		s->pl_held--;
		tls__kick(x, s);
	}
	tls__plain_put(x, idx);
	tls__runs(x);
	return 0;
}

/* ---- config slots: one priority cache per config, per ctx ---- */

uint32_t tls__cslot_get(struct tl_tls_ctx *x, tl_tls_config *cfg, int *err)
{
	uint32_t spare = NONE;

	for (uint32_t i = 0; i < TLS_CSLOTS; i++) {
		struct tls_cslot *c = &x->cs[i];
		if (c->cfg == cfg) {
			c->users++;
			return i;
		}
		if (spare == NONE && (!c->cfg || !c->users))
			spare = i;
	}
	if (spare == NONE) {
		*err = -ENOBUFS;
		return NONE;
	}
	struct tls_cslot *c = &x->cs[spare];
	if (c->cfg) { /* an idle config this ctx kept: make room */
		gnutls_priority_deinit(c->prio);
		tl_tls_config_unref(c->cfg);
		c->cfg = NULL;
		c->prio = NULL;
	}
	if (gnutls_priority_init2(&c->prio, cfg->priority, NULL, 0) < 0) {
		c->prio = NULL;
		*err = -ENOMEM;
		return NONE;
	}
	tl_tls_config_ref(cfg);
	c->cfg = cfg;
	c->users = 1;
	return spare;
}

void tls__cslot_put(struct tl_tls_ctx *x, uint32_t slot)
{
	struct tls_cslot *c = &x->cs[slot];

	/* A config nobody else holds any more (a reload replaced it) goes
	 * with its last session; one still held stays ready for the next. */
	if (--c->users == 0 && atomic_load_explicit(&c->cfg->refs, memory_order_acquire) == 1) {
		gnutls_priority_deinit(c->prio);
		tl_tls_config_unref(c->cfg);
		c->cfg = NULL;
		c->prio = NULL;
	}
}

/* ---- the loop's completions ---- */

int tl_tls_complete(tl_tls_ctx *x, const tl_completion *c)
{
	if (!x || !c || (uint8_t)(c->token >> 56) != x->cc.token_tag)
		return 0;
	uint32_t slot = tls_tok_slot(c->token);
	if (slot < x->cc.max_sessions) {
		struct tls_sess *s = &x->sess[slot];
		if (s->state == S_OPEN || s->state == S_CLOSING)
			tls__on_loop(x, s, c);
		else if (c->kind == TL_K_READ && (c->flags & TL_F_LEASE))
			tl_lease_release(x->loop, c->u.read.lease.id); /* cannot happen: kept tidy */
	}
	tls__runs(x);
	return 1;
}

void tl_tls_stats_get(const tl_tls_ctx *x, tl_tls_stats *out)
{
	*out = x->st;
	out->sessions = x->nsess_open;
}
