/* tools/tlproxy/side.h: a connection side's I/O, on its stream or, on its TLS session (a client of a tls: listener, a server of a tls: pool): reads, writes, shutdown, close and lease release in one place, so forwarding does not care which. */
#ifndef TLP_SIDE_H
#define TLP_SIDE_H

/* Calls: side -> state (and the runtime's stream and TLS calls). Static
 * inline: the per-read path stays without a call. */
#include "state.h"

/*
 * A TLS session delivers plaintext leases of its ctx's pool, given back
 * with tl_tls_lease_release, whose ids are not the loop's: a write of one
 * carries this bit and the lease's index (its id without TL_TLS_LEASE_BIT)
 * in its token's 24-bit lease field, so that its completion gives it back
 * to the right pool. Both fit in 23 bits (the loop's pooled buffers at
 * most 32768, the layer's plaintext buffers 2^20).
 */
#define SIDE_TLS_LEASE 0x800000u

static inline int side_tls(const struct tlp_conn *c, int s)
{
	return (c->flags & F_TLS(s)) != 0;
}

/* The token argument naming lease id read from side s. */
static inline uint32_t side_lease_arg(const struct tlp_conn *c, int s, uint32_t id)
{
	return side_tls(c, s) ? (id & ~TL_TLS_LEASE_BIT) | SIDE_TLS_LEASE : id;
}

/* The record of the write in flight of the lease named arg (its buffer,
 * length and number, for a takeover that cuts it), or NULL. */
static inline struct tlp_lw *side_lw(struct tlp_shard *sh, uint32_t arg)
{
	if (arg & SIDE_TLS_LEASE)
		return (arg & ~SIDE_TLS_LEASE) < sh->ntlw ? &sh->tlw[arg & ~SIDE_TLS_LEASE] : NULL;
	return arg < tlp_w.nleases ? &sh->lw[arg] : NULL;
}

/* Give back a lease named as side_lease_arg names it. */
static inline void side_lease_free(struct tlp_shard *sh, uint32_t arg)
{
	if (arg & SIDE_TLS_LEASE)
		tl_tls_lease_release(sh->tls, (arg & ~SIDE_TLS_LEASE) | TL_TLS_LEASE_BIT);
	else
		tl_lease_release(sh->loop, arg);
}

static inline int side_read_start(struct tlp_shard *sh, struct tlp_conn *c, int s, uint64_t t,
				  tl_op *op)
{
	if (side_tls(c, s))
		return tl_tls_read_start(sh->tls, c->ts[s], t, op);
	return tl_read_start(sh->loop, c->h[s], t, op);
}

static inline int side_write(struct tlp_shard *sh, struct tlp_conn *c, int d, const void *p,
			     uint32_t n, uint64_t t, tl_op *op)
{
	if (side_tls(c, d))
		return tl_tls_write(sh->tls, c->ts[d], p, n, t, op);
	return tl_write(sh->loop, c->h[d], p, n, t, op);
}

/* The FIN of side d: on TLS, close_notify then the stream's half-close. */
static inline int side_shutdown(struct tlp_shard *sh, struct tlp_conn *c, int d, uint64_t t,
				tl_op *op)
{
	if (side_tls(c, d))
		return tl_tls_shutdown(sh->tls, c->ts[d], t, op);
	return tl_shutdown(sh->loop, c->h[d], t, op);
}

/* Close side s (abort: the peer sees a reset); its completion, the stream's
 * close or the session's Closed, comes with token t. */
/* A TLS server side (s 1) whose session was a full handshake: keep what
 * resumes it for the next connection to its server on this shard (a
 * TLS 1.3 ticket comes after the handshake, with the first reads, so it
 * is taken at the end as well as at the handshake; backend_tls.c offers
 * it). */
static inline void side_keep_ticket(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ticket *k;
	tl_tls_info in;
	int n;

	if (!sh->tk || !c->srv || c->srv->row < 0 || c->srv->row >= TLP_SRV_ROWS)
		return;
	k = &sh->tk[c->srv->row];
	if (k->len && k->srv_id == c->srv->id && k->gen_ver == c->gen->ver)
		return; /* it has one: resumed sessions do not replace it */
	if (tl_tls_info_get(sh->tls, c->ts[1], &in) < 0 || !in.version || in.resumed)
		return;
	n = tl_tls_resume_data(sh->tls, c->ts[1], k->b, TLP_TICKET_MAX);
	if (n <= 0)
		return;
	k->len = (uint32_t)n;
	k->srv_id = c->srv->id;
	k->gen_ver = c->gen->ver;
}

static inline void side_close(struct tlp_shard *sh, struct tlp_conn *c, int s, int abort,
			      uint64_t t)
{
	if (s == 1 && side_tls(c, 1) && !abort)
		side_keep_ticket(sh, c);
	if (side_tls(c, s))
		tl_tls_close(sh->tls, c->ts[s], abort ? TL_TLS_CLOSE_ABORT : 0, t);
	else if (abort)
		tl_close_abort(sh->loop, c->h[s], t);
	else
		tl_close(sh->loop, c->h[s], t);
}

#endif /* TLP_SIDE_H */
