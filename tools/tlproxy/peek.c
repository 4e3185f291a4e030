/* tools/tlproxy/peek.c: the peek stage: reading a PROXY header and a ClientHello before a server is chosen, and the pool the SNI rules pick. */
/* Calls: peek -> backend, conn, wheel, state, world. */
#include "peek.h"
#include "backend.h"
#include "conn.h"
#include "netlist.h"
#include "wheel.h"

/* Free big buffers to the connections waiting for one, oldest first. */
void tlp_peek_grant(struct tlp_shard *sh)
{
	if (sh->granting)
		return; /* the loop below, further up the stack, goes on */
	sh->granting = 1;
	while (sh->big_free != NONE && sh->pkw_head != NONE) {
		struct tlp_conn *w = &sh->c[sh->pkw_head];

		tlp_pkw_del(sh, w);
		tlp_big_take(sh, PK(sh, w->peek));
		tlp_peek_next(sh, w);
	}
	sh->granting = 0;
}

/* Read more into c's peek buffer (a record for the first read; a big
 * buffer, or a wait for one, once the record is full). */
void tlp_peek_next(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p;
	uint32_t room;

	if (c->peek == NONE && tlp_peek_get(sh, c) < 0) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	p = PK(sh, c->peek);
	if (p->big == NONE && p->len == PEEK_SMALL) {
		if (sh->big_free == NONE || sh->pkw_head != NONE) {
			tlp_pkw_add(sh, c); /* behind those already waiting */
			return;
		}
		tlp_big_take(sh, p);
	}
	room = (p->big != NONE ? PEEK_CAP : PEEK_SMALL) - p->len;
	if (!room) {
		/* Not reached: the parsers decide within PEEK_CAP bytes. */
		tlp_conn_end(sh, c, c->flags & F_NEED_PP ? TLP_END_PROXY_BAD : TLP_END_SNI_BAD, 0);
		return;
	}
	if (tl_read(sh->loop, c->h[0], peek_buf(sh, p) + p->len, room,
		    tok(CI(sh, c), 0, OP_PEEK, 0), &c->rop) < 0) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_PKRD;
	/* The header and the hello must come within sni_timeout of the accept. */
	tl_read_deadline(sh->loop, c->rop, c->t0 + c->lr->cfg->sni_timeout_ns);
}

/* Decide c's pool from what the peek read so far, or read more. */
static void peek_parse(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_peek *p = PK(sh, c->peek);
	const uint8_t *buf = peek_buf(sh, p);
	const struct tlp_listener_cfg *lc = c->lr->cfg;
	int r, why;

	if (c->flags & F_NEED_PP) {
		struct tlp_pp_header hd;

		r = tlp_pp_parse(buf, p->len, &hd, &why);
		if (r == -EAGAIN) {
			tlp_peek_next(sh, c);
			return;
		}
		if (r < 0) {
			tlp_conn_end(sh, c, TLP_END_PROXY_BAD, 0);
			return;
		}
		c->flags &= ~F_NEED_PP;
		p->off = (uint32_t)r;
		if (hd.command == TLP_PP_CMD_PROXY &&
		    (hd.family == AF_INET || hd.family == AF_INET6)) {
			memcpy(&c->peer, &hd.src, hd.family == AF_INET ? sizeof hd.src.in
									 : sizeof hd.src.in6);
			memcpy(&c->dst, &hd.dst, hd.family == AF_INET ? sizeof hd.dst.in
									: sizeof hd.dst.in6);
			c->pp_in = 1;
		}
	}
	if (lc->nsni) {
		const struct tlp_lrt *lr = c->lr;

		r = tlp_sni_parse(buf + p->off, p->len - p->off, sh->sni_host,
				  sizeof sh->sni_host, &why);
		if (r == -EAGAIN) {
			if (p->len == PEEK_CAP)
				tlp_conn_end(sh, c, TLP_END_SNI_BAD, 0);
			else
				tlp_peek_next(sh, c);
			return;
		}
		if (r < 0) {
			tlp_conn_end(sh, c, TLP_END_SNI_BAD, 0);
			return;
		}
		int m = r > 0 ? tlp_sni_match(lc->sni, lc->nsni, sh->sni_host, (size_t)r) : -ENOENT;

		c->gp = m >= 0 ? lr->sni_pool[m] : lr->sni_default ? lr->sni_default : lr->pool;
	} else {
		c->gp = c->lr->pool;
	}
	if (!c->gp) {
		tlp_conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	c->pc = c->gen->pc_by_gp[c->gp->idx];
	if (!c->pc) {
		tlp_conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	tlp_assign(sh, c);
}

/* A read into the peek buffer ended. */
void tlp_on_peek(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e)
{
	c->flags &= ~F_PKRD;
	if (c->state != C_PEEK) {
		/* Ending: the buffer is free now, unless a write uses it. */
		if (!(c->flags & F_PEEKW))
			tlp_peek_release(sh, c);
		return;
	}
	if (e->result > 0) {
		uint32_t n = (uint32_t)e->result;

		PK(sh, c->peek)->len += n;
		c->bytes[0] += n;
		sh->d_bytes[0] += n;
		peek_parse(sh, c);
		return;
	}
	if (e->result == 0) {
		/* It left before saying where it goes. */
		c->flags |= F_EOF(0);
		tlp_conn_end(sh, c, c->flags & F_NEED_PP ? TLP_END_PROXY_BAD : TLP_END_SNI_BAD, 0);
		return;
	}
	tlp_conn_end(sh, c, e->result == -ETIMEDOUT ? TLP_END_PEEK_TIMEOUT : TLP_END_CLIENT_RESET, 0);
}
