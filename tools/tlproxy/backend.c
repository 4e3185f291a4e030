/* tools/tlproxy/backend.c: the backend choice: the shard's balancers over each pool's view, connecting with retries that avoid the servers tried, the PROXY header sent, and handing free server slots to queued clients. */
/* Calls: backend -> fwd, conn, queue, wheel, state, world. */
#include <sys/socket.h>
#include <sys/un.h>

#include "backend.h"
#include "conn.h"
#include "fwd.h"
#include "queue.h"
#include "wheel.h"

static void start_connect(struct tlp_shard *sh, struct tlp_conn *c);

/* Bring the shard's copy of a pool's server states up to date. */
static void refresh(struct tlp_lpool *lp, struct tlp_gpool *gp, uint64_t now)
{
	struct tlp_view *v = lp->v;
	uint32_t ver = atomic_load_explicit(&gp->state_ver, memory_order_acquire);

	if (ver != lp->ver || now >= lp->recheck_at) {
		uint64_t next = UINT64_MAX;

		lp->ver = ver;
		for (uint32_t i = 0; i < v->n; i++) {
			struct tlp_srv *s = v->e[i].srv;
			uint64_t du = atomic_load_explicit(&s->down_until, memory_order_relaxed);

			lp->loc[i].state = tlp_srv_up(s, now) ? TLP_SRV_UP : TLP_SRV_DOWN;
			if (du && du > now && du < next)
				next = du;
		}
		lp->recheck_at = next;
	}
	if (v->need_conns)
		for (uint32_t i = 0; i < v->n; i++)
			lp->loc[i].conns =
				atomic_load_explicit(&v->e[i].srv->conns, memory_order_relaxed);
}

int tlp_pick(struct tlp_shard *sh, struct tlp_gpool *gp, const struct sockaddr *peer,
	     const uint16_t *tried, uint8_t *ntried, struct tlp_srv **out)
{
	struct tlp_lpool *lp = &sh->lp[gp->idx];
	struct tlp_view *v = lp->v;
	uint64_t now, key = 0;
	int r = -EHOSTUNREACH;

	if (!v || !v->n)
		return -EHOSTUNREACH;
	now = tlp_mono_ns();
	refresh(lp, gp, now);
	if (tlp_bal_ops[v->balance].needs & TLP_BAL_NEEDS_KEY)
		key = tlp_hash_addr(peer);
	for (int attempt = 0; attempt < 4; attempt++) {
		uint32_t hidden = 0;

		for (uint32_t k = 0; k < *ntried; k++)
			hidden += (uint32_t)tlp_avoid_add(&lp->avoid, tried[k]);
		r = tlp_bal_pick(&lp->bal, key, hidden ? &lp->avoid : NULL);
		for (uint32_t k = 0; k < *ntried; k++)
			tlp_avoid_del(&lp->avoid, tried[k]);
		if (r < 0 && hidden) {
			/* Every other server is out: the tried ones again. */
			*ntried = 0;
			continue;
		}
		if (r < 0)
			return r;
		struct tlp_vent *e = &v->e[r];
		uint32_t had = atomic_fetch_add_explicit(&e->srv->conns, 1, memory_order_relaxed);

		if (e->max_conns && had >= e->max_conns) {
			/* Another shard took the last place first. */
			atomic_fetch_sub_explicit(&e->srv->conns, 1, memory_order_relaxed);
			lp->loc[r].conns = had;
			if (!v->need_conns)
				lp->loc[r].conns = e->max_conns;
			r = -ENOBUFS;
			continue;
		}
		lp->loc[r].conns = had + 1;
		*out = e->srv;
		srv_count(sh, e->srv, 1);
		return r;
	}
	return r;
}

/*
 * Choose a server for c and count c on it (process-wide): the index in the
 * view, or -ENOBUFS (every server up is full), -EHOSTUNREACH (none up).
 * Servers c already tried are left out while another is usable.
 */
static int pick(struct tlp_shard *sh, struct tlp_conn *c)
{
	int r = tlp_pick(sh, c->gp, &c->peer.sa, c->tried, &c->ntried, &c->srv);

	if (r >= 0) {
		c->vidx = (uint32_t)r;
		c->flags |= F_SRV;
	}
	return r;
}

/*
 * Give queued clients of gp the servers that have room, oldest first
 * across the process: while this shard holds the oldest client, it takes
 * the room; when another shard does, that shard is told (TLP_MSG_ROOM) and
 * goes on from there.
 */
void tlp_dispatch_queue(struct tlp_shard *sh, struct tlp_gpool *gp)
{
	struct tlp_lpool *lp = &sh->lp[gp->idx];

	while (lp->qhead != NONE) {
		struct tlp_conn *c = &sh->c[lp->qhead];
		uint32_t who = tlp_oldest_shard(gp);
		int r;

		if (who != sh->id && who != NONE) {
			tl_shard_post(sh->s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
			return;
		}
		r = pick(sh, c);
		if (r == -ENOBUFS)
			return;
		tlp_q_del(sh, c);
		if (r < 0) {
			tlp_conn_end(sh, c, TLP_END_NO_SERVER, 0);
			continue;
		}
		start_connect(sh, c);
	}
}

void tlp_room(struct tlp_shard *sh, struct tlp_gpool *gp)
{
	uint32_t who = tlp_oldest_shard(gp);

	if (who == sh->id)
		tlp_dispatch_queue(sh, gp);
	else if (who != NONE)
		tl_shard_post(sh->s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
}

/* Pick a server (or queue, or end) and connect to it. */
void tlp_assign(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_lpool *lp = &sh->lp[c->gp->idx];
	int r;

	/* First come, first served: behind clients already waiting. */
	if (lp->qhead != NONE || atomic_load_explicit(&c->gp->waiting, memory_order_relaxed)) {
		if (tlp_q_add(sh, c) < 0)
			tlp_conn_end(sh, c, TLP_END_QUEUE_FULL, 0);
		else
			tlp_dispatch_queue(sh, c->gp);
		return;
	}
	r = pick(sh, c);
	if (r == -ENOBUFS) {
		if (tlp_q_add(sh, c) < 0)
			tlp_conn_end(sh, c, TLP_END_QUEUE_FULL, 0);
		return;
	}
	if (r < 0) {
		tlp_conn_end(sh, c, TLP_END_NO_SERVER, 0);
		return;
	}
	start_connect(sh, c);
}

static void start_connect(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_srv *srv = c->srv;
	const struct tlp_lrt *l = c->lr;
	uint64_t dl = tl_now(sh->loop) + l->cfg->connect_timeout_ns;
	uint64_t t = tok(CI(sh, c), 1, OP_CONNECT, 0);
	tl_handle h;
	tl_op op;
	int r;

	c->state = C_CONNECT;
	wheel_del(sh, c); /* the connect's own deadline from here */
	if (srv->unix_path) {
		r = tl_unix_connect(sh->loop, srv->path, dl, t, &h, &op);
	} else if (l->nopts) {
		tl_connect_opts o = {.sockopts = l->opts, .nsockopts = l->nopts};

		r = tl_tcp_connect_opts(sh->loop, &srv->addr, &o, dl, t, &h, &op);
	} else {
		r = tl_tcp_connect(sh->loop, &srv->addr, dl, t, &h, &op);
	}
	if (r < 0) {
		if (r == -ENOBUFS) {
			tlp_conn_end(sh, c, TLP_END_BUSY, 0);
			return;
		}
		tlp_connect_failed(sh, c, r);
		return;
	}
	c->h[1] = h;
}

void tlp_connect_failed(struct tlp_shard *sh, struct tlp_conn *c, int err)
{
	int blame = tlp_blame(err);

	c->cerr = (int16_t)err; /* for the access log */
	/* Only what the server did counts against it (tlp_blame). */
	if (blame == TLP_BLAME_SERVER)
		tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
	if (blame != TLP_BLAME_FDS && c->ntried < TLP_RETRIES_MAX)
		c->tried[c->ntried++] = (uint16_t)c->vidx;
	tlp_srv_release(sh, c);
	if (!tl_handle_eq(c->h[1], TL_HANDLE_NONE)) {
		tl_close(sh->loop, c->h[1], tok(CI(sh, c), 1, OP_CLOSE_OLD, 0));
		c->nclosing++;
		c->h[1] = TL_HANDLE_NONE;
	}
	if (blame == TLP_BLAME_FDS && !sh->stopping) {
		/* No descriptor to connect with: wait for one, no retry spent
		 * (first in line again if it was being given one). */
		tlp_fd_short_set(sh, err);
		tlp_held_add(sh, c, sh->resuming);
		c->flags |= F_FDWAIT;
		return;
	}
	if (sh->stopping || c->tries >= c->pc->retries) {
		tlp_conn_end(sh, c, TLP_END_CONNECT, 0);
		return;
	}
	c->tries++;
	tlp_assign(sh, c);
}

/* A v2 header of n bytes at h for a client that came over TLS: with the
 * TLVs of its session (version, cipher, SNI, ALPN, client certificate).
 * HB_SIZE holds them at their longest; the length. */
static int pp_tls(struct tlp_shard *sh, struct tlp_conn *c, uint8_t *h, uint32_t n)
{
	tl_tls_info in;
	struct tlp_pp_tls t;
	int r;

	if (!sh->tls || tl_tls_info_get(sh->tls, c->ts[0], &in) < 0)
		return (int)n;
	t.version = in.version == TL_TLS_1_3 ? "TLSv1.3" : in.version == TL_TLS_1_2 ? "TLSv1.2" : "";
	t.cipher = in.cipher;
	t.sni = in.sni;
	t.alpn = in.alpn;
	t.client_cert = in.peer_cert;
	t.verified = in.peer_cert && !in.verify;
	r = tlp_pp_add_tls(h, n, HB_SIZE, &t);
	return r < 0 ? (int)n : r;
}

/* The PROXY header the pool sends, into a header buffer. */
static void send_pp(struct tlp_shard *sh, struct tlp_conn *c)
{
	const struct tlp_listener_cfg *lc = c->lr->cfg;
	const struct tlp_endpoint *ep = &lc->listen[c->laddr];
	struct sockaddr_un su_src, su_dst;
	const struct sockaddr *src, *dst;
	tl_addr local;
	uint16_t b;
	int n;

	if (!sh->nhb_free) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	if (c->pp_in) {
		src = &c->peer.sa;
		dst = &c->dst.sa;
	} else if (ep->kind == TLP_EP_UNIX) {
		memset(&su_src, 0, sizeof su_src);
		su_src.sun_family = AF_UNIX;
		su_dst = ep->addr.un;
		src = (const struct sockaddr *)&su_src;
		dst = (const struct sockaddr *)&su_dst;
	} else {
		if (tl_local_addr(sh->loop, c->h[0], &local) < 0)
			local = (tl_addr){0};
		src = &c->peer.sa;
		dst = &local.sa;
	}
	b = sh->hb_free[--sh->nhb_free];
	if (c->pc->proxy_protocol == TLP_PP_SEND_V1) {
		n = tlp_pp_build_v1(sh->hb[b], HB_SIZE, src, dst);
	} else {
		n = tlp_pp_build_v2(sh->hb[b], HB_SIZE, src, dst);
		if (n > 0 && (c->flags & F_TLS(0)))
			n = pp_tls(sh, c, sh->hb[b], (uint32_t)n);
	}
	if (n <= 0) {
		sh->hb_free[sh->nhb_free++] = b;
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->hdr = b;
	write_buf(sh, c, 1, sh->hb[b], (uint32_t)n, OP_WRITE_HDR, b);
}

void tlp_connected(struct tlp_shard *sh, struct tlp_conn *c)
{
	tlp_passive(c->srv, c->pc, 1, 0);
	if (c->gen->tls_by_gp[c->gp->idx]) {
		/* A tls: pool: its handshake first (backend_tls.c), which
		 * comes back to tlp_forward. A PROXY header goes before it, in
		 * the clear, as the protocol has it (the stream keeps the
		 * order of its writes: the handshake's follow the header). */
		if (c->pc->proxy_protocol != TLP_PP_SEND_NONE) {
			send_pp(sh, c);
			if (c->state != C_CONNECT)
				return;
			c->flags |= F_PPSENT;
		}
		tlp_origin_start(sh, c);
		return;
	}
	tlp_forward(sh, c);
}

void tlp_forward(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t ci = CI(sh, c);

	c->state = C_FWD;
	if (c->pc->proxy_protocol != TLP_PP_SEND_NONE && !(c->flags & F_PPSENT)) {
		send_pp(sh, c);
		if (c->state != C_FWD)
			return;
	}
	if (c->peek != NONE) {
		/* What the peek read goes first; the client's reads follow it
		 * in the server's write queue. */
		struct tlp_peek *p = PK(sh, c->peek);

		if (p->len > p->off) {
			c->flags |= F_PEEKW;
			write_buf(sh, c, 1, peek_buf(sh, p) + p->off, p->len - p->off, OP_WRITE_PEEK,
				  0);
		}
		if (c->state != C_FWD)
			return;
		if (!(c->flags & F_PEEKW))
			tlp_peek_release(sh, c);
	}
	if (side_read_start(sh, c, 0, tok(ci, 0, OP_READ, 0), &c->rd[0]) < 0) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_RD(0);
	if (side_read_start(sh, c, 1, tok(ci, 1, OP_READ, 0), &c->rd[1]) < 0) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_RD(1);
	/* A TLS side has no bytes a splice could move as they are. */
	tlp_spl_init(&c->sp[0], c->lr->cfg->splice && !(c->flags & (F_TLS(0) | F_TLS(1))));
	tlp_spl_init(&c->sp[1], c->lr->cfg->splice && !(c->flags & (F_TLS(0) | F_TLS(1))));
	if (c->flags & F_EOF(0))
		tlp_shut(sh, c, 1);
	if (c->state == C_FWD)
		arm_idle(sh, c);
	if (c->state == C_FWD && (c->flags & F_HOWAIT))
		tlp_ho_hook(sh, c, TLP_HO_FORWARDS, 0, NULL, 0, 0);
}
