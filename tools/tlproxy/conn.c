/* tools/tlproxy/conn.c: a connection's slot from start to end: the table, the peek records and big buffers it holds, its server slot, the held list, the access-log record, and its end. */
/* Calls: conn -> queue, side, wheel, state, world, alog. Every stage above ends
 * connections here; what an end frees for others (a server slot with
 * clients queued, a big buffer with peeks waiting) is handed on at the end
 * of the pass (shard.c), since this file calls no stage above it. */
#include <stdlib.h>
#include <time.h>

#include "conn.h"
#include "side.h"
#include "queue.h"
#include "wheel.h"

static void notify_room(struct tlp_shard *sh);

void tlp_log_conn(struct tlp_shard *sh, const struct tlp_lrt *lr, const tl_addr *peer,
		  const struct tlp_srv *srv, const uint64_t bytes[2], uint64_t t0, int cause,
		  unsigned retries, int cerr, const struct tlp_alog_tls *tls)
{
	struct tlp_alog_rec *r;

	if (!sh->log)
		return;
	r = tlp_alog_claim(sh->log);
	if (!r)
		return; /* full: counted by the ring */
	clock_gettime(CLOCK_REALTIME, &r->end);
	r->dur_ns = tl_now(sh->loop) - t0;
	r->bytes[0] = bytes ? bytes[0] : 0;
	r->bytes[1] = bytes ? bytes[1] : 0;
	r->peer = *peer;
	r->cause = (uint8_t)cause;
	r->retries = (uint8_t)retries;
	r->cerr = (int16_t)cerr;
	r->listener = lr ? lr->gl : NULL;
	if (tls)
		r->tls = *tls;
	else
		r->tls.sides = 0;
	if (srv)
		memcpy(r->server, srv->label, sizeof r->server);
	else
		r->server[0] = '\0';
	tlp_alog_commit(sh->log);
}

struct tlp_conn *tlp_conn_new(struct tlp_shard *sh)
{
	struct tlp_conn *c;

	if (sh->free_head == NONE)
		return NULL;
	c = &sh->c[sh->free_head];
	sh->free_head = c->wnext;
	memset(c, 0, offsetof(struct tlp_conn, peer));
	c->h[0] = c->h[1] = TL_HANDLE_NONE;
	c->wnext = c->wprev = c->qnext = c->qprev = c->wslot = NONE;
	c->hdr = 0xffff;
	c->peek = NONE;
	c->state = C_CONNECT;
	c->cause = 0xff;
	sh->nopen++;
	sh->open_dirty = 1;
	return c;
}

void tlp_conn_free(struct tlp_shard *sh, struct tlp_conn *c)
{
	int cause = c->cause == 0xff ? TLP_END_DONE : c->cause;

	tlp_peek_release(sh, c); /* every op of c has ended */
	tlp_log_conn(sh, c->lr, &c->peer, c->srv, c->bytes, c->t0, cause, c->tries, c->cerr,
		     c->flags & (F_TLS(0) | F_TLS(1)) ? &sh->tlr[CI(sh, c)] : NULL);
	tlp_gen_unhold(sh, c->gen);
	c->state = C_FREE;
	c->wnext = sh->free_head;
	sh->free_head = CI(sh, c);
	sh->nopen--;
	sh->open_dirty = 1;
	if (c->flags & F_ADM)
		sh->nadm--; /* its slot of the table is free */
	notify_room(sh); /* its descriptors and counts are back */
}

/* Another chunk of records, while the pool is smaller than the table. */
int tlp_peek_grow(struct tlp_shard *sh)
{
	struct tlp_peek *chunk;

	if (sh->npk >= sh->cap || !(chunk = malloc(PK_CHUNK * sizeof *chunk)))
		return -1;
	sh->pkc[sh->npk / PK_CHUNK] = chunk;
	for (uint32_t i = 0; i < PK_CHUNK; i++)
		chunk[i].next = i + 1 < PK_CHUNK ? sh->npk + i + 1 : sh->pk_free;
	sh->pk_free = sh->npk;
	sh->npk += PK_CHUNK;
	return 0;
}

/* A record for c. 0, or -1 (no memory). */
int tlp_peek_get(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;

	if (sh->pk_free == NONE && tlp_peek_grow(sh) < 0)
		return -1;
	p = PK(sh, sh->pk_free);
	c->peek = sh->pk_free;
	sh->pk_free = p->next;
	p->len = p->off = 0;
	p->big = NONE;
	return 0;
}

void tlp_pkw_add(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t ci = CI(sh, c);

	c->flags |= F_PKWAIT;
	c->qnext = NONE;
	c->qprev = sh->pkw_tail;
	if (sh->pkw_tail != NONE)
		sh->c[sh->pkw_tail].qnext = ci;
	else
		sh->pkw_head = ci;
	sh->pkw_tail = ci;
	wheel_arm(sh, c);
}

void tlp_pkw_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (!(c->flags & F_PKWAIT))
		return;
	c->flags &= ~F_PKWAIT;
	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		sh->pkw_head = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		sh->pkw_tail = c->qprev;
	c->qnext = c->qprev = NONE;
	wheel_del(sh, c);
}

/* Move a full record's bytes into a free big buffer. */
void tlp_big_take(struct tlp_shard *sh, struct tlp_peek *p)
{
	p->big = sh->big_free;
	sh->big_free = sh->big_next[p->big];
	memcpy(sh->big + (size_t)p->big * PEEK_CAP, p->small, p->len);
}

/* Give c's record (and big buffer) back. Only once no read or write uses
 * them: a one-shot read writes into the buffer until its terminal. */
void tlp_peek_release(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;

	if (c->peek == NONE)
		return;
	p = PK(sh, c->peek);
	if (p->big != NONE) {
		sh->big_next[p->big] = sh->big_free;
		sh->big_free = p->big;
		p->big = NONE;
	}
	p->next = sh->pk_free;
	sh->pk_free = c->peek;
	c->peek = NONE;
	if (sh->pkw_head != NONE)
		sh->grant_due = 1; /* peek.c gives it, at the end of the pass */
}

void tlp_srv_release(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (!(c->flags & F_SRV))
		return;
	c->flags &= ~F_SRV;
	atomic_fetch_sub_explicit(&c->srv->conns, 1, memory_order_relaxed);
	srv_count(sh, c->srv, -1);
	if (atomic_load_explicit(&c->gp->waiting, memory_order_relaxed))
		tlp_room_later(sh, c->gp);
}

void tlp_set_paused(struct tlp_shard *sh)
{
	if (!atomic_exchange_explicit(&tlp_w.paused[sh->id], 1, memory_order_acq_rel))
		atomic_fetch_add_explicit(&tlp_w.npaused, 1, memory_order_acq_rel);
}

/* A connection ended here: its shard, and those waiting for room, look. */
static void notify_room(struct tlp_shard *sh)
{
	sh->fd_freed = 1;
	if (sh->nheld || sh->npz)
		sh->resume_due = 1;
	if (!atomic_load_explicit(&tlp_w.npaused, memory_order_acquire))
		return;
	for (uint32_t t = 0; t < tlp_w.nshards; t++) {
		_Atomic uint8_t *f = &tlp_w.paused[t];

		if (t == sh->id || !atomic_load_explicit(f, memory_order_relaxed) ||
		    !atomic_exchange_explicit(f, 0, memory_order_acq_rel))
			continue;
		atomic_fetch_sub_explicit(&tlp_w.npaused, 1, memory_order_acq_rel);
		tl_shard_post(sh->s, t, tlp_ctl_token(TLP_MSG_RESUME, 0), 0);
	}
}

void tlp_held_add(struct tlp_shard *sh, struct tlp_conn *c, int first)
{
	uint32_t ci = CI(sh, c);

	c->state = C_HELD;
	if (first) {
		c->qprev = NONE;
		c->qnext = sh->held_head;
		if (sh->held_head != NONE)
			sh->c[sh->held_head].qprev = ci;
		else
			sh->held_tail = ci;
		sh->held_head = ci;
	} else {
		c->qnext = NONE;
		c->qprev = sh->held_tail;
		if (sh->held_tail != NONE)
			sh->c[sh->held_tail].qnext = ci;
		else
			sh->held_head = ci;
		sh->held_tail = ci;
	}
	sh->nheld++;
	tlp_set_paused(sh);
}

void tlp_held_del(struct tlp_shard *sh, struct tlp_conn *c)
{
	if (c->qprev != NONE)
		sh->c[c->qprev].qnext = c->qnext;
	else
		sh->held_head = c->qnext;
	if (c->qnext != NONE)
		sh->c[c->qnext].qprev = c->qprev;
	else
		sh->held_tail = c->qprev;
	c->qnext = c->qprev = NONE;
	sh->nheld--;
}

void tlp_fd_short_set(struct tlp_shard *sh, int err)
{
	uint64_t now = tlp_mono_ns();

	sh->fd_short = 1;
	sh->fd_tight_until = now + TIGHT_NS;
	if (now >= sh->fd_log_at) {
		sh->fd_log_at = now + 10000000000ull;
		tlp_log("shard %u: %s: accepting stops until a descriptor is free (clients wait in "
			"the backlog; no server is blamed)",
			sh->id, tl_strerror(err));
	}
}

void tlp_conn_end(struct tlp_shard *sh, struct tlp_conn *c, int cause, int abort_mask)
{
	uint32_t ci = CI(sh, c);
	int was = c->state;

	if (was == C_CLOSING || was == C_FREE)
		return;
	if (c->cause == 0xff)
		c->cause = (uint8_t)cause;
	c->state = C_CLOSING;
	if (c->flags & F_HO)
		tlp_ho_hook(sh, c, TLP_HO_DROP, abort_mask, NULL, 0, 0);
	else if (c->flags & F_HOWAIT)
		tlp_ho_hook(sh, c, TLP_HO_FORGET, 0, NULL, 0, 0);
	wheel_del(sh, c);
	if (was == C_QUEUED)
		tlp_q_del(sh, c);
	else if (was == C_HELD)
		tlp_held_del(sh, c);
	tlp_pkw_del(sh, c);
	/* A peek buffer a read or write still uses goes at that op's end. */
	if (!(c->flags & (F_PEEKW | F_PKRD)))
		tlp_peek_release(sh, c);
	for (int s = 0; s < 2; s++) {
		if (tl_handle_eq(c->h[s], TL_HANDLE_NONE) || (c->flags & F_CLOSE(s)))
			continue;
		c->flags |= F_CLOSE(s);
		c->nclosing++;
		side_close(sh, c, s, abort_mask & (1 << s), tok(ci, s, OP_CLOSE, 0));
	}
	count_err(sh, c->cause);
	if (c->flags & F_LCOUNT)
		atomic_fetch_sub_explicit(&c->lr->gl->conns, 1, memory_order_relaxed);
	if (c->flags & F_WCOUNT)
		atomic_fetch_sub_explicit(&tlp_w.conns, 1, memory_order_relaxed);
	c->flags &= ~(F_LCOUNT | F_WCOUNT);
	tlp_srv_release(sh, c);
	if (!c->nclosing)
		tlp_conn_free(sh, c);
}
