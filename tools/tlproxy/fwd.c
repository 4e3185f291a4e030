/* tools/tlproxy/fwd.c: forwarding: copying and splicing each direction, half-close, and the end of a pair whose both sides are done (the per-read path is static inline in fwd.h). */
/* Calls: fwd -> conn, side, wheel, state, world, splice; the takeover only
 * through the hook (state.h). */
#include "fwd.h"

/*
 * Forwarding in one paragraph. Each side's stream reads with tl_read_start:
 * every read completion carries a pooled lease, which is written as is to
 * the other side and released when that write completes (on epoll the
 * socket usually takes it at once, and it is released there: write_now in
 * fwd.h). The lease counts
 * against the stream it was read from (the loop's per-stream cap), so a
 * destination that does not take its bytes stops its source by itself:
 * backpressure without a copy and without a buffer of our own. An idle
 * connection holds no lease (the driver's receive waits with none), no
 * timer (its timeouts are the loop's deadlines, below) and nothing
 * allocated: its record is a slot of the shard's table, made at start.
 */

void tlp_shut(struct tlp_shard *sh, struct tlp_conn *c, int d)
{
	tl_op op;

	if (c->flags & F_SHUT(d))
		return;
	c->flags |= F_SHUT(d);
	if (side_shutdown(sh, c, d, tok(CI(sh, c), d, OP_SHUT, 0), &op) < 0)
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
}

/*
 * A direction moves from copying to splicing by stopping its read
 * (tl_stop) and, at that read's terminal, submitting a splice from its
 * source to the other side; each splice's completion submits the next. The
 * splice joins the destination's write queue behind the leases already
 * read, so the bytes keep their order, and it waits for room in the
 * destination as a write does: the same backpressure. A splice counts in
 * wq[] like a write, so a connection whose both sides sent their FIN ends
 * only once the splices are out. Back to copying is tl_read_start again.
 */

static void spl_copy(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	c->sp[s].mode = TLP_SPL_COPY;
	if (side_read_start(sh, c, s, tok(CI(sh, c), s, OP_READ, 0), &c->rd[s]) < 0)
		tlp_conn_end(sh, c, TLP_END_BUSY, 0);
}

void tlp_spl_next(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	/* The splice is the source's reader: rd[s] names it (a takeover
	 * cancels it there). */
	int r = tl_splice(sh->loop, c->h[s], c->h[s ^ 1], TLP_SPL_MAX, tok(CI(sh, c), s, OP_SPLICE, 0),
			  &c->rd[s]);

	if (r == 0) {
		c->sp[s].mode = TLP_SPL_SPLICING;
		c->wq[s ^ 1]++;
		sh->spl_dirty = 1;
		return;
	}
	if (r == -ENOBUFS) {
		/* No free pipe in the pool (or no op slot): copy, and count it. */
		sh->d_spl[TLP_SPL_ST_REFUSED]++;
		tlp_spl_refused(&c->sp[s]);
		spl_copy(sh, c, s);
		return;
	}
	/* The driver cannot splice these (-ENOTSUP): this direction copies. */
	spl_copy(sh, c, s);
	c->sp[s].mode = TLP_SPL_OFF;
}

/* Side s sent its FIN (a read or a splice of s saw the end). */
void tlp_fwd_eof(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	c->flags |= F_EOF(s);
	if (c->flags & F_HO) {
		/* The FIN goes on in the new process, after the carry. */
		tlp_ho_hook(sh, c, TLP_HO_STEP, 0, NULL, 0, 0);
		return;
	}
	if (c->flags & F_EOF(s ^ 1)) {
		maybe_done(sh, c);
		return;
	}
	tlp_shut(sh, c, s ^ 1);
	if (c->state == C_FWD)
		arm_idle(sh, c); /* a FIN timeout now */
}

void tlp_on_splice(struct tlp_shard *sh, struct tlp_conn *c, int s, const tl_completion *e)
{
	uint64_t taken = e->u.splice.taken, moved = e->u.splice.moved;
	uint64_t now = tl_now(sh->loop);

	c->wq[s ^ 1]--;
	c->sp[s].mode = TLP_SPL_COPY;
	sh->spl_dirty = 1;
	if (taken) {
		c->bytes[s] += taken;
		sh->d_bytes[s] += taken;
		sh->d_spl[TLP_SPL_ST_BYTES] += moved;
	}
	if (moved)
		c->t_act = now;
	if (c->state != C_FWD)
		return; /* ending: its close cancelled the splice */
	if ((c->flags & F_HO) && taken == moved &&
	    (e->result > 0 || e->result == -ECANCELED || e->result == -ETIMEDOUT)) {
		/* Handing over: the pipe is flushed (taken == moved), and no
		 * read or splice follows here. */
		c->flags |= F_HORD(s);
		tlp_ho_hook(sh, c, TLP_HO_STEP, 0, NULL, 0, 0);
		return;
	}
	if (e->result > 0) {
		if (tlp_spl_after_splice(&c->sp[s], moved)) {
			tlp_spl_next(sh, c, s);
		} else {
			sh->d_spl[TLP_SPL_ST_TO_COPY]++;
			spl_copy(sh, c, s);
		}
		return;
	}
	if (e->result == 0 && (e->flags & TL_F_EOF)) {
		tlp_fwd_eof(sh, c, s);
		return;
	}
	if (e->result == -ETIMEDOUT) {
		/* The destination's idle deadline ended a splice that waited for
		 * its source: when the other direction still moves bytes (its
		 * splices are progress on the other stream only), this one goes
		 * back to a read, which that progress keeps alive, as copying
		 * does. Bytes dropped from the pipe end the connection. */
		if (taken == moved && now - c->t_act < idle_ns(c)) {
			sh->d_spl[TLP_SPL_ST_TO_COPY]++;
			spl_copy(sh, c, s);
			return;
		}
		tlp_conn_end(sh, c, idle_cause(c), 0);
		return;
	}
	if (e->result == -ECANCELED) {
		spl_copy(sh, c, s);
		return;
	}
	if (taken > moved) {
		/* Bytes left the source and did not reach the destination: the
		 * destination failed, and its source is reset. */
		tlp_conn_end(sh, c, s == 0 ? TLP_END_SERVER_ERROR : TLP_END_CLIENT_ERROR, 1 << s);
		return;
	}
	/* The source reset (or failed): the other side sees a reset too. */
	if (s == 1 && c->srv && tlp_blame((int)e->result) == TLP_BLAME_SERVER)
		tlp_passive(c->srv, c->pc, 0, tlp_mono_ns());
	tlp_conn_end(sh, c, s == 0 ? TLP_END_CLIENT_RESET : TLP_END_SERVER_RESET, 1 << (s ^ 1));
}
