/* tools/tlproxy/backend_tls.c: TLS towards a tls: pool's servers: the client session on a connected server stream, the name it sends and checks, its handshake with a deadline, and a failure's reason counted and logged. */
/* Calls: backend_tls -> backend, conn, state, world (a part of the backend
 * stage: its completions come back through shard.c's switch). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "conn.h"
#include "side.h"

/*
 * The name a server is asked for: the pool's server_name, else the host
 * of the server's address as written (a DNS name, or an IP address, which
 * the certificate must then carry and which is not sent as SNI). Written
 * into buf; "" for a Unix-socket server without server_name.
 */
static void server_name(const struct tlp_conn *c, char *buf, size_t cap)
{
	const char *o = c->srv->origin, *end;
	size_t n;

	if (c->pc->tls.server_name) {
		snprintf(buf, cap, "%s", c->pc->tls.server_name);
		return;
	}
	buf[0] = '\0';
	if (c->srv->unix_path)
		return;
	if (o[0] == '[') {
		end = strchr(o, ']');
		o++;
	} else {
		end = strrchr(o, ':');
	}
	n = end ? (size_t)(end - o) : strlen(o);
	if (n >= cap)
		n = cap - 1;
	memcpy(buf, o, n);
	buf[n] = '\0';
}

void tlp_origin_start(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t ci = CI(sh, c);
	char name[256];
	tl_tls_client_opts o = {0};
	tl_op op;

	if (!sh->tls) {
		/* The shard could not make its TLS context (logged). */
		tlp_conn_end(sh, c, TLP_END_SERVER_TLS, 0);
		return;
	}
	if (!(c->flags & F_TLS(0)))
		memset(&sh->tlr[ci], 0, sizeof sh->tlr[ci]);
	sh->tlr[ci].sides |= 2;
	server_name(c, name, sizeof name);
	o.server_name = name[0] ? name : NULL;
	if (sh->tk && c->srv->row >= 0 && c->srv->row < TLP_SRV_ROWS) {
		/* Resume the last full session with this server (side.h
		 * keeps it); one the server no longer takes is a full
		 * handshake, which replaces it. */
		const struct tlp_ticket *k = &sh->tk[c->srv->row];

		if (k->len && k->srv_id == c->srv->id && k->gen_ver == c->gen->ver) {
			o.resume = k->b;
			o.resume_len = k->len;
		}
	}
	if (tl_tls_client(sh->tls, c->gen->tls_by_gp[c->gp->idx], c->h[1], &o, tok(ci, 1, OP_CLOSE, 0),
			  &c->ts[1]) < 0 &&
	    (!o.resume ||
	     tl_tls_client(sh->tls, c->gen->tls_by_gp[c->gp->idx], c->h[1],
			   &(tl_tls_client_opts){.server_name = o.server_name}, tok(ci, 1, OP_CLOSE, 0),
			   &c->ts[1]) < 0)) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->flags |= F_TLS(1);
	if (tl_tls_handshake(sh->tls, c->ts[1], tl_now(sh->loop) + c->pc->tls.handshake_timeout_ns,
			     tok(ci, 1, OP_TLS_HS, 0), &op) < 0)
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
}

void tlp_origin_on_hs(struct tlp_shard *sh, struct tlp_conn *c, const tl_completion *e)
{
	struct tlp_alog_tls *r = &sh->tlr[CI(sh, c)];
	tl_tls_info in;
	int got = tl_tls_info_get(sh->tls, c->ts[1], &in) == 0;

	if (e->result < 0) {
		int why = got && in.reason > 0 && in.reason < TL_TLS_R_COUNT_ ? in.reason
			  : e->result == -ETIMEDOUT			    ? TL_TLS_R_TIMEOUT
									    : TL_TLS_R_INTERNAL;
		uint64_t now = tlp_mono_ns();
		static _Thread_local uint64_t log_at[TLP_REG_POOLS];
		uint64_t *at = &log_at[c->gp->idx];

		r->up_reason = (uint8_t)why;
		tl_shard_counter_add(sh->s, tlp_w.st_tls_up + why, 1);
		if (now >= *at && why != TL_TLS_R_CANCELED) {
			char v[128] = "", name[256];

			/* One line a second at most per pool and shard: a
			 * misconfigured pool fails every connection the same way. */
			*at = now + 1000000000ull;
			if (got && in.verify)
				tl_tls_verify_text(in.verify, v, sizeof v);
			server_name(c, name, sizeof name);
			tlp_log("pool %s: server %s: TLS handshake failed: %s%s%s (name %s)",
				c->pc->name, c->srv->label, tl_tls_reason_name(why), v[0] ? ": " : "",
				v, name[0] ? name : "-");
		}
		if (c->state == C_CONNECT)
			tlp_conn_end(sh, c, TLP_END_SERVER_TLS, 0);
		return;
	}
	if (got)
		r->up_version = in.version;
	tl_shard_counter_add(sh->s, tlp_w.st_tls_up, 1);
	if (got && in.resumed) {
		r->up_resumed = 1;
		tl_shard_counter_add(sh->s, tlp_w.st_tls_up_resumed, 1);
	} else {
		side_keep_ticket(sh, c); /* a TLS 1.2 ticket is here already */
	}
	if (c->state != C_CONNECT)
		return; /* ending meanwhile */
	tlp_forward(sh, c);
}
