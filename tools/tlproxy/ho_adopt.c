/* tools/tlproxy/ho_adopt.c: the new process's half of a connection handed over: a CONN record made into a connection of this shard, its carry written first. */
#include <stdlib.h>
#include <unistd.h>

#include "conn.h"
#include "ho.h"
#include "takeover.h"
#include "tls.h"
#include "udp.h"
#include "wheel.h"

/* Calls: ho -> conn, tls, udp, wheel, state, world, takeover. */

static struct tlp_glisten *gl_find(const char *name)
{
	for (uint32_t i = 0; i < tlp_w.ngl; i++)
		if (!strcmp(tlp_w.gl[i]->name, name))
			return tlp_w.gl[i];
	return NULL;
}

static struct tlp_gpool *gp_find(const char *name)
{
	for (uint32_t i = 0; i < tlp_w.ngp; i++)
		if (!strcmp(tlp_w.gp[i]->name, name))
			return tlp_w.gp[i];
	return NULL;
}

/*
 * Side k of a connection handed over, whose socket is no longer a
 * connection (tl_adopt refused it): our FIN had gone to it, its peer's
 * FIN and last ACK came, and the kernel closed it, with what the peer sent
 * before its FIN still there to read, unless the record says its FIN was
 * read already. That is read here and owed to the other side after what
 * the record carries; the side is then done and its descriptor closed.
 * 0 (*pin may be a new record), or a negative errno: the socket was reset,
 * or our FIN had not gone (so it did not end: it failed).
 */
static int side_finish(struct tlp_ho_in **pin, int k)
{
	struct tlp_ho_in *in = *pin, *n;
	uint8_t *rest = NULL, *b;
	uint32_t len = 0, cap = 0, l0, l1;

	if (!(in->c.flags & TLP_HO_SHUT(k)))
		return -ENOTCONN;
	while (!(in->c.flags & TLP_HO_EOF(k))) {
		ssize_t got;

		if (len == cap) {
			cap = cap ? 2 * cap : 65536;
			if (in->c.carry_len[k] + (uint64_t)len >= TLP_HO_CARRY_MAX ||
			    !(b = realloc(rest, cap))) {
				free(rest);
				return -E2BIG;
			}
			rest = b;
		}
		got = recv(in->fd[k], rest + len, cap - len, MSG_DONTWAIT);
		if (got > 0)
			len += (uint32_t)got;
		else if (got == 0)
			in->c.flags |= TLP_HO_EOF(k);
		else if (errno != EINTR) {
			int e = errno == EAGAIN ? -ENOTCONN : -errno;

			free(rest);
			return e;
		}
	}
	if (len) {
		l0 = in->c.carry_len[0] + (k == 0 ? len : 0);
		l1 = in->c.carry_len[1] + (k == 1 ? len : 0);
		if ((k == 0 ? l0 : l1) > TLP_HO_CARRY_MAX || !(n = malloc(sizeof *n + l0 + l1))) {
			free(rest);
			return -E2BIG;
		}
		memcpy(n, in, sizeof *n);
		b = n->body;
		for (int s = 0; s < 2; s++) {
			if (in->c.carry_len[s])
				memcpy(b, in->c.carry[s], in->c.carry_len[s]);
			if (s == k)
				memcpy(b + in->c.carry_len[s], rest, len);
			n->c.carry[s] = b;
			n->c.carry_len[s] = s ? l1 : l0;
			b += n->c.carry_len[s];
		}
		free(in);
		*pin = in = n;
	}
	free(rest);
	close(in->fd[k]);
	in->fd[k] = -1;
	return 0;
}

int tlp_shard_adopt(tl_shard *s, struct tlp_ho_in *in)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_world *w = &tlp_w;
	const struct tlp_ho_conn *hc;
	struct tlp_glisten *gl = gl_find(in->c.listener);
	const struct tlp_lrt *lr = gl ? sh->gen->by_gl[gl->idx] : NULL;
	struct tlp_gpool *gp = gp_find(in->c.pool);
	const struct tlp_pool_cfg *pc = gp ? sh->gen->pc_by_gp[gp->idx] : NULL;
	tl_handle h[2] = {TL_HANDLE_NONE, TL_HANDLE_NONE};
	struct tlp_conn *c;
	int r = 0;

	if (in->c.flags & TLP_HO_UDP)
		return tlp_udp_adopt(sh, in);

	if (!lr || !pc) {
		r = -ENOENT; /* the new configuration has no such listener or pool */
		goto fail;
	}
	if (sh->stopping) {
		r = -ESHUTDOWN;
		goto fail;
	}
	for (int k = 0; k < 2; k++) {
		if ((r = tl_adopt(sh->loop, in->fd[k], &h[k])) == 0)
			continue;
		if (r != -EINVAL || (r = side_finish(&in, k)) < 0)
			goto fail;
	}
	hc = &in->c;
	if (tl_handle_eq(h[0], TL_HANDLE_NONE) && tl_handle_eq(h[1], TL_HANDLE_NONE)) {
		/* Both sides ended while it moved: nothing is left to do. */
		free(in);
		return 0;
	}
	c = tlp_conn_new(sh);
	if (!c) {
		r = -ENOBUFS;
		goto fail;
	}
	c->h[0] = h[0];
	c->h[1] = h[1];
	c->state = C_FWD;
	c->t0 = tl_now(sh->loop) - hc->age_ns;
	c->t_state = sh->tick;
	c->gen = sh->gen;
	tlp_gen_hold(sh, c->gen);
	c->lr = lr;
	c->gp = gp;
	c->pc = pc;
	c->bytes[0] = hc->bytes[0];
	c->bytes[1] = hc->bytes[1];
	memset(&c->peer, 0, sizeof c->peer);
	if (hc->peer_len && hc->peer_len <= sizeof c->peer)
		memcpy(&c->peer, &hc->peer, hc->peer_len);
	/* Count it where the old process did: its server, the limits. */
	{
		struct tlp_view *v = sh->lp[gp->idx].v;
		int e = tlp_view_find(v, hc->srv);

		if (e >= 0) {
			c->srv = v->e[e].srv;
			c->vidx = (uint32_t)e;
			c->flags |= F_SRV;
			atomic_fetch_add_explicit(&c->srv->conns, 1, memory_order_relaxed);
			srv_count(sh, c->srv, 1);
		}
	}
	if (w->max_conns) {
		c->flags |= F_WCOUNT;
		atomic_fetch_add_explicit(&w->conns, 1, memory_order_relaxed);
	}
	if (lr->cfg->max_conns) {
		c->flags |= F_LCOUNT;
		atomic_fetch_add_explicit(&lr->gl->conns, 1, memory_order_relaxed);
	}
	for (int k = 0; k < 2; k++) {
		if (hc->flags & TLP_HO_EOF(k))
			c->flags |= F_EOF(k);
		if (hc->flags & TLP_HO_SHUT(k))
			c->flags |= F_SHUT(k) | F_SHUTOK(k);
	}
	/* A TLS side carries on its session from the record state. */
	for (int k = 0; k < 2; k++) {
		if (!hc->tls_len[k] || tl_handle_eq(c->h[k], TL_HANDLE_NONE))
			continue;
		tl_tls_config *cfg = k == 0 ? lr->tls : c->gen->tls_by_gp[gp->idx];

		r = sh->tls && cfg ? tl_tls_import(sh->tls, cfg, c->h[k], hc->tls[k], hc->tls_len[k],
						   tok(CI(sh, c), k, OP_CLOSE, 0), &c->ts[k])
				   : -ENOPROTOOPT; /* the new configuration's side is plain */
		if (r < 0) {
			tlp_conn_end(sh, c, TLP_END_TLS, 3);
			free(in);
			return r;
		}
		c->flags |= F_TLS(k);
		tlp_tls_adopted(sh, c, k);
	}
	tlp_ho_carry_on(sh, c, in);
	return c->state == C_FWD || c->cause == TLP_END_DONE ? 0 : -ECONNABORTED;
fail:
	for (int k = 0; k < 2; k++) {
		if (!tl_handle_eq(h[k], TL_HANDLE_NONE))
			tl_close_abort(sh->loop, h[k], tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		else
			tlp_ho_fd_abort(in->fd[k]);
	}
	free(in);
	return r;
}
