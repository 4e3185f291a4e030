/* tools/tlproxy/tls.c: TLS termination: each shard's TLS context, a client's handshake with its deadline, its count by result and reason, and its routing by the SNI name it sent. */
/* Calls: tls -> backend, conn, state, world (and side.h through state). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "conn.h"
#include "tls.h"

/*
 * Termination in one paragraph. A listener with tls: has a server config
 * made when its generation is built (world.c: its files are read then),
 * shared by every shard; each shard has its own tl_tls_ctx, so shards
 * never share the library's state. An admitted client gets a session on
 * its stream (the session owns the stream from then on: side.h sends the
 * connection's client-side reads, writes, shutdown and close through it)
 * and a handshake whose deadline is t0 + handshake_timeout, however slowly
 * its bytes come. At its end the client is routed as a peeked one is, by
 * the name it sent (the listener's sni: rules), and connected; forwarding
 * then moves plaintext. The handshake's result, and the reason of a
 * failure, are counted in tls_handshakes; what it agreed goes in the
 * client's access-log line.
 */

int tlp_tls_shard_init(struct tlp_shard *sh, int want)
{
	tl_tls_ctx_config cc;
	int r;

	if (!want || sh->tls)
		return 0;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TLP_H_TLS;
	/* A session per connection slot, and a read, a write and a
	 * handshake or shutdown each. */
	cc.max_sessions = sh->cap < (1u << 24) ? sh->cap : (1u << 24);
	cc.max_ops = cc.max_sessions * 3 < (1u << 24) ? cc.max_sessions * 3 : (1u << 24);
	if (tlp_w.nleases && tlp_w.nleases < cc.loop_leases)
		cc.loop_leases = tlp_w.nleases;
	r = tl_tls_ctx_new(sh->loop, &cc, &sh->tls);
	if (r < 0) {
		fprintf(stderr, "tlproxy: shard %u: no TLS context: %s\n", sh->id, tl_strerror(r));
		return r;
	}
	sh->tlr = calloc(sh->cap, sizeof *sh->tlr);
	/* a server row's resume data (touched only for tls: pools' servers) */
	sh->tk = calloc(TLP_SRV_ROWS, sizeof *sh->tk);
	/* the writes of plaintext leases, as sh->lw the loop's */
	sh->tlw = calloc(cc.plain_buffers, sizeof *sh->tlw);
	sh->ntlw = sh->tlw ? cc.plain_buffers : 0;
	if (sh->tlr && sh->tlw && sh->tk)
		return 0;
	tlp_tls_shard_free(sh); /* no session yet: the context can go now */
	return -ENOMEM;
}

void tlp_tls_shard_free(struct tlp_shard *sh)
{
	if (sh->tls)
		tl_tls_ctx_destroy(sh->tls);
	sh->tls = NULL;
	free(sh->tlr);
	sh->tlr = NULL;
	if (sh->tk)
		explicit_bzero(sh->tk, TLP_SRV_ROWS * sizeof *sh->tk); /* secrets */
	free(sh->tk);
	sh->tk = NULL;
	free(sh->tlw);
	sh->tlw = NULL;
	sh->ntlw = 0;
}

void tlp_tls_start(struct tlp_shard *sh, struct tlp_conn *c)
{
	const struct tlp_lrt *lr = c->lr;
	uint32_t ci = CI(sh, c);
	tl_op op;

	if (!sh->tls) {
		/* The shard could not make its TLS context (logged). */
		tlp_conn_end(sh, c, TLP_END_TLS, 0);
		return;
	}
	memset(&sh->tlr[ci], 0, sizeof sh->tlr[ci]);
	sh->tlr[ci].sides = 1;
	if (tl_tls_server(sh->tls, lr->tls, c->h[0], tok(ci, 0, OP_CLOSE, 0), &c->ts[0]) < 0) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_TLS(0);
	c->state = C_TLS;
	if (tl_tls_handshake(sh->tls, c->ts[0], c->t0 + lr->cfg->tls.handshake_timeout_ns,
			     tok(ci, 0, OP_TLS_HS, 0), &op) < 0)
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
}

/* Copy s into dst[0..cap), cut to fit: a log field, not a name to use. */
static void cut(char *dst, size_t cap, const char *s)
{
	size_t n = strnlen(s, cap - 1);

	memcpy(dst, s, n);
	dst[n] = '\0';
}

static void keep(struct tlp_alog_tls *r, const tl_tls_info *in)
{
	r->version = in->version;
	r->resumed = in->resumed;
	r->reason = (uint8_t)in->reason;
	r->hs_us = (uint32_t)(in->handshake_ns / 1000 > UINT32_MAX ? UINT32_MAX
								    : in->handshake_ns / 1000);
	cut(r->cipher, sizeof r->cipher, in->cipher);
	cut(r->alpn, sizeof r->alpn, in->alpn);
	cut(r->sni, sizeof r->sni, in->sni);
}

void tlp_tls_adopted(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	struct tlp_alog_tls *r = &sh->tlr[CI(sh, c)];
	tl_tls_info in;

	if (!(r->sides & 3))
		memset(r, 0, sizeof *r);
	r->sides |= (uint8_t)(1u << s);
	if (tl_tls_info_get(sh->tls, c->ts[s], &in) < 0)
		return;
	if (s == 0)
		keep(r, &in);
	else
		r->up_version = in.version;
}

void tlp_tls_on_hs(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e)
{
	const struct tlp_lrt *lr = c->lr;
	const struct tlp_listener_cfg *lc = lr->cfg;
	struct tlp_alog_tls *r = &sh->tlr[CI(sh, c)];
	tl_tls_info in;
	int got = tl_tls_info_get(sh->tls, c->ts[0], &in) == 0;

	if (got)
		keep(r, &in);
	if (e->result < 0) {
		int why = got && in.reason > 0 && in.reason < TL_TLS_R_COUNT_ ? in.reason
			  : e->result == -ETIMEDOUT			    ? TL_TLS_R_TIMEOUT
									    : TL_TLS_R_INTERNAL;

		r->reason = (uint8_t)why;
		tl_shard_counter_add(sh->s, tlp_w.st_tls_hs + why, 1);
		if (c->state == C_TLS)
			tlp_conn_end(sh, c, TLP_END_TLS, 0);
		return;
	}
	tl_shard_counter_add(sh->s, tlp_w.st_tls_hs, 1);
	if (got && in.resumed)
		tl_shard_counter_add(sh->s, tlp_w.st_tls_resumed, 1);
	if (c->state != C_TLS)
		return; /* ending meanwhile */
	/* Routed by the name the client sent, as a peeked hello is. */
	c->gp = lr->pool;
	if (lc->nsni) {
		int m = got && in.sni[0] ? tlp_sni_match(lc->sni, lc->nsni, in.sni, strlen(in.sni))
					 : -ENOENT;

		c->gp = m >= 0 ? lr->sni_pool[m] : lr->sni_default ? lr->sni_default : lr->pool;
	}
	c->pc = c->gp ? c->gen->pc_by_gp[c->gp->idx] : NULL;
	c->state = C_CONNECT;
	if (!c->gp || !c->pc) {
		tlp_conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	tlp_assign(sh, c);
}

void tlp_on_tls(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);

	if (sh && sh->tls)
		tl_tls_complete(sh->tls, e);
}
