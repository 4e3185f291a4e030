/* tools/tlproxy/fwd.h: forwarding's interface: the per-read path (a read's lease written to the other side) static inline, so that the shard's switch runs it without a call; the rest in fwd.c. */
#ifndef TLP_FWD_H
#define TLP_FWD_H

/* Calls: fwd -> conn, side, wheel, state, world, splice; the takeover only
 * through the hook (state.h). */
#include "conn.h"
#include "side.h"
#include "wheel.h"

/* Shut side d down (its FIN), once. */
void tlp_shut(struct tlp_shard *sh, struct tlp_conn *c, int d);
/* Side s's read stopped for a splice: submit the next splice of s. */
void tlp_spl_next(struct tlp_shard *sh, struct tlp_conn *c, int s);
/* Side s sent its FIN (a read or a splice of s saw the end). */
void tlp_fwd_eof(struct tlp_shard *sh, struct tlp_conn *c, int s);
/* A splice from side s completed (e). */
void tlp_on_splice(struct tlp_shard *sh, struct tlp_conn *c, int s, const tl_completion *e);

/*
 * Writing a lease at once. Where the driver sends inside tl_write anyway
 * (TL_CAP_WRITE_AT_ONCE: epoll), a read's lease is first offered to
 * tl_try_write: the same send(2), but no operation, no completion and no
 * pass through tlp_on_conn to give the lease back: nearly half of a
 * proxied request's instructions (docs/PERFORMANCE.md). What
 * the socket does not take (part, or all: its buffer is full, or writes
 * are queued ahead) goes by tl_write as before, so backpressure and order
 * are unchanged. Not for a TLS side (the session writes records) nor
 * during a takeover (it counts every write in flight). Returns 1 when the
 * write is done (the lease is back, or the connection ended on its error),
 * else 0 with *p and *n what is left to write.
 */
static inline int write_now(struct tlp_shard *sh, struct tlp_conn *c, int d, const void **p,
			    uint32_t *n, uint32_t arg)
{
	int64_t k = tl_try_write(sh->loop, c->h[d], *p, *n);

	if (k == (int64_t)*n) {
		side_lease_free(sh, arg);
		return 1;
	}
	if (k > 0) {
		*p = (const uint8_t *)*p + k;
		*n -= (uint32_t)k;
		return 0;
	}
	if (k == -EAGAIN)
		return 0;
	/* The destination is gone, as a write's completion would say: its
	 * source is reset. */
	side_lease_free(sh, arg);
	tlp_conn_end(sh, c, d == 0 ? TLP_END_CLIENT_ERROR : TLP_END_SERVER_ERROR, 1 << (d ^ 1));
	return 1;
}

static inline void write_buf(struct tlp_shard *sh, struct tlp_conn *c, int d, const void *p,
			     uint32_t n, int op, uint32_t arg)
{
	uint32_t seq;
	tl_op id;

	if (op == OP_WRITE && sh->write_now && !side_tls(c, d) && !(c->flags & F_HO) &&
	    write_now(sh, c, d, &p, &n, arg))
		return;
	seq = sh->wseq++;
	switch (op) {
	case OP_WRITE: {
		struct tlp_lw *lw = side_lw(sh, arg); /* a loop lease, or a TLS one */

		if (lw) {
			lw->p = p;
			lw->len = n;
			lw->seq = seq;
		}
		break;
	}
	case OP_WRITE_HDR:
		sh->hbw[arg].len = n;
		sh->hbw[arg].seq = seq;
		break;
	case OP_WRITE_PEEK:
		PK(sh, c->peek)->wseq = seq;
		break;
	case OP_WRITE_CARRY:
		((struct tlp_ho_in *)c->ho)->wseq[d] = seq;
		break;
	}
	if (side_write(sh, c, d, p, n, tok(CI(sh, c), d, op, arg), &id) < 0) {
		if (op == OP_WRITE)
			side_lease_free(sh, arg);
		else if (op == OP_WRITE_HDR) {
			sh->hb_free[sh->nhb_free++] = (uint16_t)arg;
			c->hdr = 0xffff;
		} else if (op == OP_WRITE_PEEK) {
			c->flags &= ~F_PEEKW;
		}
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
		return;
	}
	c->wq[d]++;
}

/* A read of side s moved n bytes of a lease of cap bytes while forwarding. */
static inline void spl_read(struct tlp_shard *sh, struct tlp_conn *c, int s, uint32_t n, uint32_t cap)
{
	c->t_act = tl_now(sh->loop);
	if (tlp_spl_after_read(&c->sp[s], n, cap) && tl_stop(sh->loop, c->rd[s]) == 0)
		c->sp[s].mode = TLP_SPL_STOPPING;
}

/*
 * Both sides have sent their FIN: once the writes to each side are out and
 * any shutdown issued is done, closing both ends the connection (the close
 * is the FIN still owed to a side, so the second FIN needs no shutdown).
 *
 * Without half_close (the listener's choice, nginx's proxy_half_close
 * off), one FIN is enough: once every byte read from the side that sent it
 * is written to the other and the FIN is passed on, both are closed, so a
 * pair whose server answered and closed stops counting for the server
 * (leastconn, max_conns) and the limits at once, whatever its client does.
 * What the other side sends afterwards is not forwarded.
 */
static inline void maybe_done(struct tlp_shard *sh, struct tlp_conn *c)
{
	uint32_t f = c->flags;

	if (!c->lr->cfg->half_close)
		for (int s = 0; s < 2; s++)
			if ((f & F_EOF(s)) && !c->wq[s ^ 1] && (f & F_SHUTOK(s ^ 1))) {
				tlp_conn_end(sh, c, TLP_END_DONE, 0);
				return;
			}
	if ((f & F_EOF(0)) && (f & F_EOF(1)) && !c->wq[0] && !c->wq[1] &&
	    (!(f & F_SHUT(0)) || (f & F_SHUTOK(0))) && (!(f & F_SHUT(1)) || (f & F_SHUTOK(1))))
		tlp_conn_end(sh, c, TLP_END_DONE, 0);
}

static inline void on_read(struct tlp_shard *sh, struct tlp_conn *c, int s, const tl_completion *e)
{
	if (e->result > 0 && (e->flags & TL_F_LEASE)) {
		uint32_t n = (uint32_t)e->result;
		const tl_lease *l = &e->u.read.lease;

		if (c->state == C_FWD) {
			c->bytes[s] += n;
			sh->d_bytes[s] += n;
			if (c->flags & F_HO) {
				tlp_ho_hook(sh, c, TLP_HO_KEEP, s, l->data, l->id, n);
			} else {
				write_buf(sh, c, s ^ 1, l->data, n, OP_WRITE, side_lease_arg(c, s, l->id));
				if (c->sp[s].mode == TLP_SPL_COPY && c->state == C_FWD)
					spl_read(sh, c, s, n, l->cap);
			}
		} else {
			side_lease_free(sh, side_lease_arg(c, s, l->id));
		}
	}
	if (!(e->flags & TL_F_TERMINAL))
		return;
	if ((c->flags & F_HO) && e->result >= 0 && !(e->flags & TL_F_EOF)) {
		/* Handing over: no splice starts, whatever stopped the read. */
		if (c->sp[s].mode == TLP_SPL_STOPPING)
			c->sp[s].mode = TLP_SPL_COPY;
		c->flags |= F_HORD(s);
		tlp_ho_hook(sh, c, TLP_HO_STEP, 0, NULL, 0, 0);
		return;
	}
	if (c->sp[s].mode == TLP_SPL_STOPPING) {
		/* The read stopped for a splice (or ended first: then as ever). */
		c->sp[s].mode = TLP_SPL_COPY;
		if ((e->flags & TL_F_STOPPED) && c->state == C_FWD) {
			sh->d_spl[TLP_SPL_ST_TO_SPLICE]++;
			tlp_spl_next(sh, c, s);
			return;
		}
	}
	if (e->result == 0 && (e->flags & TL_F_EOF)) {
		if (c->state == C_FWD) {
			tlp_fwd_eof(sh, c, s);
			return;
		}
		c->flags |= F_EOF(s);
		return;
	}
	if (e->result == -ETIMEDOUT) {
		tlp_conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result < 0 && e->result != -ECANCELED) {
		/* A reset (or another error) on side s: the other side sees a
		 * reset too. */
		if (s == 1 && c->srv && tlp_blame((int)e->result) == TLP_BLAME_SERVER)
			tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
		tlp_conn_end(sh, c, s == 0 ? TLP_END_CLIENT_RESET : TLP_END_SERVER_RESET, 1 << (s ^ 1));
		return;
	}
	if (e->result == -ECANCELED && (c->flags & F_HO)) {
		c->flags |= F_HORD(s);
		tlp_ho_hook(sh, c, TLP_HO_STEP, 0, NULL, 0, 0);
	}
}

#endif /* TLP_FWD_H */
