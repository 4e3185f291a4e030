/* tools/tlproxy/shard.c: a shard of the data plane: its start and stop, the one switch its completions and messages go through, the sweep of the wheel, the generations and views it uses, and its stats. */
/* Calls: shard -> every data-plane stage, ctl (shard 0 runs the control
 * plane), world. Only main.c calls in. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shard.h"
#include "accept.h"
#include "backend.h"
#include "conn.h"
#include "ctl.h"
#include "fwd.h"
#include "ho.h"
#include "peek.h"
#include "udp.h"
#include "tls.h"
#include "wheel.h"

static void tlp_shard_use_gen(tl_shard *s, struct tlp_gen *g);
static int tlp_shard_use_view(tl_shard *s, uint32_t pool, struct tlp_view *v);

static void sweep_bucket(struct tlp_shard *sh, uint32_t t)
{
	uint32_t ci = sh->wheel[t & W_MASK];

	sh->wheel[t & W_MASK] = NONE;
	while (ci != NONE) {
		struct tlp_conn *c = &sh->c[ci];
		uint32_t next = c->wnext, due;
		int cause;

		c->wslot = NONE;
		due = deadline(c, &cause);
		if (due == NONE)
			; /* no longer waiting: out of the wheel */
		else if ((int32_t)(due - t) <= 0)
			tlp_conn_end(sh, c, cause, 0);
		else
			wheel_put(sh, c, due);
		ci = next;
	}
}

static void sweep(struct tlp_shard *sh)
{
	uint64_t now = tl_now(sh->loop);
	uint32_t to = (uint32_t)((now - sh->t_base) / sh->tick_ns), n = 0;

	while ((int32_t)(to - sh->tick) > 0 && n++ < W_SIZE) {
		sh->tick++;
		sweep_bucket(sh, sh->tick);
	}
	sh->tick = to;
	/* Held clients and stopped accepts: descriptors may have come free
	 * elsewhere (another process, the control plane). */
	if (sh->nheld || sh->npz) {
		sh->fd_freed = 1;
		tlp_resume(sh);
	}
	/* Clients waiting for a server: a server may have come up. */
	if (sh->queued)
		for (uint32_t i = 0; i < tlp_w.ngp; i++)
			if (sh->lp[i].qhead != NONE)
				tlp_dispatch_queue(sh, tlp_w.gp[i]);
}

/*
 * What connections' ends freed for others (conn.c calls no stage above it,
 * so it leaves these here): a server slot of a pool with clients queued
 * goes to the oldest of them, a big peek buffer to the oldest peek that
 * waits. Handing them on may end more connections and free more; a few
 * rounds, and the rest waits for the next pass (which then does not
 * block: tlp_shard_pass says so).
 */
static void after_ends(struct tlp_shard *sh)
{
	for (int round = 0; round < 4 && (sh->nroom || sh->grant_due); round++) {
		uint32_t n = sh->nroom;

		if (sh->grant_due) {
			sh->grant_due = 0;
			tlp_peek_grant(sh);
		}
		for (uint32_t k = 0; k < n; k++) {
			uint32_t i = sh->room_list[k];

			sh->room_due[i] = 0;
			tlp_room(sh, tlp_w.gp[i]);
		}
		/* What those added meanwhile moves to the front. */
		memmove(sh->room_list, sh->room_list + n, (sh->nroom - n) * sizeof *sh->room_list);
		sh->nroom -= n;
	}
}

int tlp_shard_pass(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_world *w = &tlp_w;

	(void)arg;
	if (!sh)
		return 0;
	if (sh->tls) {
		/* The TLS layer's completions, as the loop's are: their tokens
		 * are the connections'. */
		tl_completion out[64];
		int n;

		while ((n = tl_tls_poll(sh->tls, out, 64)) > 0)
			for (int i = 0; i < n; i++)
				tlp_on_conn(s, &out[i]);
	}
	after_ends(sh);
	tlp_udp_pass(sh);
	if (sh->resume_due)
		tlp_resume(sh);
	if (sh->d_conns) {
		tl_shard_counter_add(s, w->st_conns, sh->d_conns);
		sh->d_conns = 0;
	}
	if (sh->d_bytes[0]) {
		tl_shard_counter_add(s, w->st_bytes_in, sh->d_bytes[0]);
		sh->d_bytes[0] = 0;
	}
	if (sh->d_bytes[1]) {
		tl_shard_counter_add(s, w->st_bytes_out, sh->d_bytes[1]);
		sh->d_bytes[1] = 0;
	}
	for (int i = 0; i < TLP_SPL_ST_ROWS; i++)
		if (sh->d_spl[i]) {
			tl_shard_counter_add(s, w->st_splice + i, sh->d_spl[i]);
			sh->d_spl[i] = 0;
		}
	if (sh->spl_dirty) {
		tl_loop_stats ls;

		tl_loop_stats_get(sh->loop, &ls);
		tl_shard_gauge_set(s, w->st_spl_pipes, ls.pipes);
		tl_shard_gauge_set(s, w->st_spl_pipes + 1, ls.pipes_busy);
		sh->spl_dirty = 0;
	}
	if (sh->open_dirty) {
		tl_shard_gauge_set(s, w->st_open, sh->nopen);
		sh->open_dirty = 0;
	}
	if (sh->queue_dirty) {
		tl_shard_gauge_set(s, w->st_queue, sh->queued);
		sh->queue_dirty = 0;
	}
	for (uint32_t i = 0; i < sh->nsrv_dirty; i++) {
		uint16_t r = sh->srv_dirty[i];

		sh->srv_isdirty[r] = 0;
		tl_shard_gauge_set(s, w->st_srv_conns + r, sh->srv_n[r]);
	}
	sh->nsrv_dirty = 0;
	if (sh->log) {
		uint64_t d = tlp_alog_dropped(sh->log);

		if (d)
			tl_shard_counter_add(s, w->st_log_dropped, d);
	}
	return sh->nroom || sh->grant_due || (sh->tls && tl_tls_pending(sh->tls));
}

void tlp_on_conn(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	struct tlp_conn *c = &sh->c[TOK_CI(t)];
	int side = TOK_SIDE(t);

	switch (TOK_OP(t)) {
	case OP_READ:
		on_read(sh, c, side, e);
		return;
	case OP_PEEK:
		tlp_on_peek(sh, c, e);
		return;
	case OP_TLS_HS:
		if (side)
			tlp_origin_on_hs(sh, c, e);
		else
			tlp_tls_on_hs(sh, c, e);
		return;
	case OP_SPLICE:
		tlp_on_splice(sh, c, side, e);
		return;
	case OP_WRITE: {
		struct tlp_lw *lw = side_lw(sh, (uint32_t)TOK_ARG(t));

		if ((c->flags & F_HO) && lw)
			tlp_ho_cut_write(sh, c, side, e, lw->p, lw->len, lw->seq);
		side_lease_free(sh, (uint32_t)TOK_ARG(t));
		goto written;
	}
	case OP_WRITE_HDR:
		if (c->flags & F_HO)
			tlp_ho_cut_write(sh, c, side, e, sh->hb[TOK_ARG(t)], sh->hbw[TOK_ARG(t)].len,
					 sh->hbw[TOK_ARG(t)].seq);
		sh->hb_free[sh->nhb_free++] = (uint16_t)TOK_ARG(t);
		c->hdr = 0xffff;
		goto written;
	case OP_WRITE_PEEK:
		if ((c->flags & F_HO) && c->peek != NONE) {
			struct tlp_peek *p = PK(sh, c->peek);

			tlp_ho_cut_write(sh, c, side, e, peek_buf(sh, p) + p->off, p->len - p->off, p->wseq);
		}
		c->flags &= ~F_PEEKW;
		tlp_peek_release(sh, c);
		goto written;
	case OP_CONNECT:
		if (c->state != C_CONNECT)
			return; /* ended meanwhile */
		if (e->result < 0)
			tlp_connect_failed(sh, c, (int)e->result);
		else
			tlp_connected(sh, c);
		return;
	case OP_SHUT:
		if (e->result == -ETIMEDOUT)
			tlp_conn_end(sh, c, idle_cause(c), 0);
		else if (e->result < 0 && e->result != -ECANCELED)
			tlp_conn_end(sh, c, side == 0 ? TLP_END_CLIENT_ERROR : TLP_END_SERVER_ERROR,
				     1 << (side ^ 1));
		else if (e->result == 0)
			c->flags |= F_SHUTOK(side);
		else if (c->flags & F_HO)
			c->flags &= ~F_SHUT(side); /* cancelled before its FIN: the new process sends it */
		if (c->state == C_FWD && (c->flags & F_HO))
			tlp_ho_step(sh, c);
		else if (c->state == C_FWD)
			maybe_done(sh, c);
		return;
	case OP_WRITE_CARRY:
		if (c->flags & F_HO) {
			struct tlp_ho_in *in = ((struct tlp_ho_out *)c->ho)->in;

			tlp_ho_cut_write(sh, c, side, e, in->c.carry[side ^ 1], in->c.carry_len[side ^ 1],
					 in->wseq[side]);
		}
		tlp_carry_written(sh, c);
		goto written;
	case OP_CLOSE:
		c->h[side] = TL_HANDLE_NONE;
		/* fall through */
	case OP_CLOSE_OLD:
		if (--c->nclosing == 0 && c->state == C_CLOSING)
			tlp_conn_free(sh, c);
		return;
	default:
		return;
	}
written:
	c->wq[side]--;
	if (e->result == -ETIMEDOUT) {
		tlp_conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result < 0 && e->result != -ECANCELED) {
		/* The destination is gone: its source is reset. */
		tlp_conn_end(sh, c, side == 0 ? TLP_END_CLIENT_ERROR : TLP_END_SERVER_ERROR,
			     1 << (side ^ 1));
		return;
	}
	if (c->state == C_FWD && (c->flags & F_HO))
		tlp_ho_step(sh, c);
	else if (c->state == C_FWD)
		maybe_done(sh, c);
}

/* What a message carries: a mesh message's or a post's payload, else the
 * result (a timer's). */
static uint64_t payload_of(const tl_completion *e)
{
	if (e->kind == TL_K_MESH)
		return e->u.mesh.payload;
	if (e->kind == TL_K_POST)
		return e->u.post.payload;
	return (uint64_t)e->result;
}

void tlp_on_ctl(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	uint32_t type = (uint32_t)(t & 0xff);

	switch (type) {
	case TLP_MSG_SWEEP:
		if (e->kind == TL_K_TIMER && e->result == 0)
			sweep(sh);
		return;
	case TLP_MSG_ORPHAN:
		return;
	case TLP_MSG_ROOM:
		if ((t >> 8) < tlp_w.ngp)
			tlp_dispatch_queue(sh, tlp_w.gp[t >> 8]);
		return;
	case TLP_MSG_RESUME:
		sh->fd_freed = 1;
		tlp_resume(sh);
		return;
	case TLP_MSG_HO_LISTEN:
	case TLP_MSG_HO_GO:
	case TLP_MSG_HO_STEP:
	case TLP_MSG_HO_CONN:
	case TLP_MSG_HO_STOP:
	case TLP_MSG_HO_FIN:
		tlp_ho_msg(s, type, t >> 8,
			   e->kind == TL_K_MESH ? e->u.mesh.payload
			   : e->kind == TL_K_POST ? e->u.post.payload : 0);
		return;
	case TLP_MSG_GEN: {
		struct tlp_gen *g = (struct tlp_gen *)(uintptr_t)payload_of(e);
		int r;

		/* A generation that brings the first tls: listener or pool:
		 * the shard's TLS context is made now, on its loop. */
		if (!SH(s)->tls && tlp_gen_has_tls(g) && (r = tlp_tls_shard_init(SH(s), 1)) < 0)
			tlp_log("reload: shard %u: no TLS context (its TLS clients and servers "
				"fail until a restart): %s",
				SH(s)->id, tl_strerror(r));
		tlp_shard_use_gen(s, g);
		tlp_shard_listen(s, g);
		if ((r = tlp_udp_use(SH(s), g)) < 0)
			tlp_log("reload: shard %u: udp listeners: %s", SH(s)->id, tl_strerror(r));
		/* The last shard to take it tells shard 0, which announces the
		 * reload (its tick looks too, should the post be refused). */
		if (atomic_fetch_add(&g->applied, 1) + 1 == tlp_w.nshards)
			(void)tl_shard_post(s, 0, tlp_ctl_token(TLP_MSG_GEN_IN, 0), 0);
		return;
	}
	case TLP_MSG_VIEW:
		if ((t >> 8) < TLP_REG_POOLS)
			tlp_shard_use_view(s, (uint32_t)(t >> 8),
					   (struct tlp_view *)(uintptr_t)payload_of(e));
		return;
	default:
		/* The control plane's own: a reload, its tick (shard 0). */
		tlp_ctl_msg(s, t, payload_of(e));
		return;
	}
}

void tlp_on_other(tl_shard *s, const tl_completion *e)
{
	(void)s;
	(void)e; /* Closed of handles the runtime closed at the very end */
}

static void tlp_shard_use_gen(tl_shard *s, struct tlp_gen *g)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_gen *old = sh->gen;

	sh->gen = g;
	if (old) {
		old->sc[sh->id].away = 1;
		if (old->sc[sh->id].n == 0)
			tlp_gen_put(old);
	}
}

static int tlp_shard_use_view(tl_shard *s, uint32_t pool, struct tlp_view *v)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_lpool *lp = &sh->lp[pool];
	struct tlp_bal_server *loc = NULL;
	struct tlp_balancer bal;
	struct tlp_avoid avoid;
	int r;

	if (v && v->n) {
		loc = calloc(v->n, sizeof *loc);
		if (!loc || tlp_avoid_init(&avoid, v->n) < 0) {
			free(loc);
			tlp_view_put(v);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < v->n; i++) {
			loc[i].id = v->e[i].srv->id;
			loc[i].weight = v->e[i].weight;
			loc[i].max_conns = v->e[i].max_conns;
			loc[i].state = TLP_SRV_UP;
			/* Keep the rotation where a server stays. */
			if (lp->v)
				for (uint32_t j = 0; j < lp->v->n; j++)
					if (lp->v->e[j].srv == v->e[i].srv)
						loc[i].cw = lp->loc[j].cw;
		}
		r = tlp_bal_attach(&bal, v->balance, loc, v->n, &v->tab);
		if (r < 0) {
			tlp_avoid_free(&avoid);
			free(loc);
			tlp_view_put(v);
			return r;
		}
	} else {
		memset(&bal, 0, sizeof bal);
		memset(&avoid, 0, sizeof avoid);
	}
	tlp_bal_free(&lp->bal);
	tlp_avoid_free(&lp->avoid);
	lp->bal = bal;
	lp->avoid = avoid;
	free(lp->loc);
	if (lp->v)
		tlp_view_put(lp->v);
	lp->loc = loc;
	lp->v = v;
	lp->ver = atomic_load(&tlp_w.gp[pool]->state_ver) - 1;
	lp->recheck_at = 0;
	if (lp->qhead != NONE)
		tlp_dispatch_queue(sh, tlp_w.gp[pool]);
	return 0;
}

int tlp_shard_launch(tl_shard *s, void *arg)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_shard *sh;
	tl_op op;
	int r;

	(void)arg;
	sh = calloc(1, sizeof *sh);
	if (!sh)
		return -ENOMEM;
	sh->s = s;
	sh->loop = tl_shard_loop(s);
	sh->id = tl_shard_id(s);
	sh->write_now = (tl_loop_caps(sh->loop) & TL_CAP_WRITE_AT_ONCE) != 0;
	/* The table: the connections admitted, and HELD_MAX held past a
	 * limit. */
	sh->admit_cap = w->conn_cap;
	sh->cap = w->conn_cap + HELD_MAX;
	sh->c = calloc(sh->cap, sizeof *sh->c);
	sh->wheel = malloc(W_SIZE * sizeof *sh->wheel);
	sh->lh = calloc(TLP_REG_LISTENERS, sizeof *sh->lh);
	sh->pkc = calloc(sh->cap / PK_CHUNK + 1, sizeof *sh->pkc);
	sh->big = malloc((size_t)PEEK_BIG * PEEK_CAP);
	sh->nhb = 1024;
	sh->hb = malloc((size_t)sh->nhb * HB_SIZE);
	sh->hb_free = malloc(sh->nhb * sizeof *sh->hb_free);
	sh->hbw = calloc(sh->nhb, sizeof *sh->hbw);
	sh->lw = calloc(w->nleases, sizeof *sh->lw);
	tl_shard_set_data(s, sh);
	w->shard[sh->id] = sh;
	if (!sh->c || !sh->wheel || !sh->lh || !sh->pkc || !sh->big || !sh->hb || !sh->hb_free ||
	    !sh->hbw || !sh->lw)
		goto nomem;
	/* The first chunk of peek records now: a steady load reuses them. */
	sh->pk_free = NONE;
	if (tlp_peek_grow(sh) < 0)
		goto nomem;
	for (uint32_t i = 0; i < PEEK_BIG; i++)
		sh->big_next[i] = i + 1 < PEEK_BIG ? i + 1 : NONE;
	sh->big_free = 0;
	sh->pkw_head = sh->pkw_tail = NONE;
	sh->held_head = sh->held_tail = NONE;
	for (uint32_t i = 0; i < sh->nhb; i++)
		sh->hb_free[i] = (uint16_t)i;
	sh->nhb_free = sh->nhb;
	for (uint32_t i = 0; i < sh->cap; i++) {
		sh->c[i].wnext = i + 1 < sh->cap ? i + 1 : NONE;
		sh->c[i].wslot = NONE;
	}
	sh->free_head = 0;
	if (tlp_tls_shard_init(sh, tlp_w.tls) < 0)
		goto nomem;
	for (uint32_t i = 0; i < W_SIZE; i++)
		sh->wheel[i] = NONE;
	for (uint32_t i = 0; i < TLP_REG_POOLS; i++)
		sh->lp[i].qhead = sh->lp[i].qtail = NONE;
	if (w->alog)
		sh->log = tlp_alog_ring(w->alog, sh->id);
	/* The references main took for every shard. */
	sh->gen = atomic_load(&w->gen);
	for (uint32_t i = 0; i < w->ngp; i++)
		if (w->gp[i]->view && (r = tlp_shard_use_view(s, i, w->gp[i]->view)) < 0)
			return r;
	sh->tick_ns = w->tick_ns;
	sh->t_base = tl_now(sh->loop);
	r = tl_timer_start(sh->loop, sh->t_base + sh->tick_ns, sh->tick_ns,
			   tlp_ctl_token(TLP_MSG_SWEEP, 0), &sh->sweep_h, &op);
	if (r < 0)
		return r;
	tl_set_ref(sh->loop, sh->sweep_h, 0);
	r = tlp_shard_listen(s, sh->gen);
	if (r < 0) {
		atomic_store(&w->start_failed, 1);
		return r;
	}
	if ((r = tlp_udp_use(sh, sh->gen)) < 0) {
		atomic_store(&w->start_failed, 1);
		return r;
	}
	if (sh->id == 0 && (r = tlp_ctl_start(s)) < 0) {
		atomic_store(&w->start_failed, 1);
		return r;
	}
	atomic_fetch_add(&w->started, 1);
	return 0;
nomem:
	fprintf(stderr, "tlproxy: shard %u: out of memory for %u connections\n", sh->id, sh->cap);
	atomic_store(&w->start_failed, 1);
	return -ENOMEM;
}

void tlp_shard_drain(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);

	(void)arg;
	if (!sh)
		return;
	sh->draining = 1;
	/* The runtime closed the listeners. */
	memset(sh->lh, 0, TLP_REG_LISTENERS * sizeof *sh->lh);
	sh->nxlh = 0;
	tlp_udp_drain(sh);
	if (sh->id == 0)
		tlp_ctl_stop(s);
}

void tlp_shard_stop(tl_shard *s, void *arg)
{
	struct tlp_shard *sh = SH(s);

	(void)arg;
	if (!sh)
		return;
	sh->stopping = 1;
	if (sh->id == 0)
		tlp_ctl_stop(s);
	/* The drain's time is up (or a second signal came): what is still
	 * open is cut, and both its peers see a reset, never an end that
	 * looks like the whole of a transfer. */
	for (uint32_t i = 0; i < sh->cap; i++)
		if (sh->c[i].state != C_FREE && sh->c[i].state != C_CLOSING)
			tlp_conn_end(sh, &sh->c[i], TLP_END_SHUTDOWN, 3);
	tlp_udp_stop(sh);
}

void tlp_shard_free(struct tlp_shard *sh)
{
	if (!sh)
		return;
	for (uint32_t i = 0; i < TLP_REG_POOLS; i++) {
		tlp_bal_free(&sh->lp[i].bal);
		tlp_avoid_free(&sh->lp[i].avoid);
		free(sh->lp[i].loc);
		tlp_view_put(sh->lp[i].v);
	}
	/* Before the shard's generation goes: sessions may hold it. */
	tlp_udp_free(sh);
	if (sh->gen && !sh->gen->sc[sh->id].away)
		tlp_gen_put(sh->gen);
	for (uint32_t i = 0; sh->pkc && i < sh->npk / PK_CHUNK; i++)
		free(sh->pkc[i]);
	free(sh->pkc);
	free(sh->big);
	free(sh->c);
	free(sh->pz);
	free(sh->wheel);
	free(sh->lh);
	for (uint32_t i = 0; i < sh->nkept; i++)
		close(sh->kept[i].fd);
	free(sh->kept);
	free(sh->hb);
	free(sh->hb_free);
	free(sh->hbw);
	free(sh->lw);
	tlp_tls_shard_free(sh);
	free(sh);
}
