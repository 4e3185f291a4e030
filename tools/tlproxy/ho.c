/* tools/tlproxy/ho.c: the per-connection half of live takeover: handing a shard's listeners and forwarding connections over, and carrying on connections handed in; the data path reaches it through one hook (state.h). */
/* Calls: ho -> accept, backend, fwd, conn, wheel, state, world, udp,
 * takeover (the process side). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ho.h"
#include "accept.h"
#include "conn.h"
#include "fwd.h"
#include "takeover.h"
#include "udp.h"
#include "wheel.h"

static void ho_resume(struct tlp_shard *sh, struct tlp_conn *c);

/*
 * Handing a forwarding connection over: both its handles are detached at
 * once, which cancels every operation they have. What the reads had taken
 * still arrives and is kept (ho_keep); each write says how much of it went
 * (u.write.written) and the rest is kept (ho_cut_write), in the order the
 * writes were issued; a splice flushes its pipe first; a shutdown that
 * had not sent its FIN yet is left to the new process. Once every one of
 * them has ended, the descriptors come out and the pair leaves as a CONN
 * record whose carry is what each side is still owed, in order. A FIN
 * read meanwhile is not passed on here: the new process sends it after
 * the carry. Nothing waits for a slow reader, which may take its bytes
 * from the new process as it likes; only a splice into it whose pipe
 * must drain first can hold a connection past the deadline, and then it
 * carries on here (ho_resume).
 */

static void tlp_shard_ho_listeners(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};

	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++)
		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++) {
			int fd;

			if (tl_handle_eq(sh->lh[gi][ai], none))
				continue;
			fd = tl_handle_fd(sh->loop, sh->lh[gi][ai]);
			if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
				tlp_ho_push_listener(sh->id, fd);
		}
	for (uint32_t i = 0; i < sh->nxlh; i++) {
		int fd = tl_handle_fd(sh->loop, sh->xlh[i]);

		if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
			tlp_ho_push_listener(sh->id, fd);
	}
	tlp_udp_ho_listeners(sh);
}

/*
 * A TLS side moves as its session's record state (tl_tls_release) and
 * its stream: the release stops the session's stream read, the records
 * already read come to the side's read as plaintext (kept like any read's
 * bytes), its writes finish, then the read ends and the session gives
 * the stream back, which is detached as a plain side's. A session that
 * cannot move (tl_tls_release's -EOPNOTSUPP) keeps its whole connection
 * here, to drain. Progress of a release comes from the TLS layer's own
 * completions, which reach no handler of ours: while one is under way the
 * connection steps again every turn (TLP_MSG_HO_STEP).
 */

/* Release TLS side s: 1 once released (c->h[s] is its bare stream and
 * o->st[s] its state), 0 while under way, or a negative errno
 * (-EOPNOTSUPP: it cannot move). A plain side: 1. */
static int ho_release(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	struct tlp_ho_out *o = c->ho;
	tl_handle h;
	int r;

	if (!side_tls(c, s))
		return 1;
	if (!o->st[s] && !(o->st[s] = malloc(TL_TLS_STATE_MAX)))
		return -ENOMEM;
	r = tl_tls_release(sh->tls, c->ts[s], o->st[s], TL_TLS_STATE_MAX, &h);
	if (r == -EAGAIN) {
		o->rel |= (uint8_t)(1u << s);
		return 0;
	}
	if (r < 0)
		return r;
	o->rel &= (uint8_t)~(1u << s);
	o->st_len[s] = (uint32_t)r;
	c->h[s] = h;
	c->flags &= ~F_TLS(s);
	return 1;
}

/* Give up the releases under way: those sessions carry on here, their
 * reads cancelled so that they end as a detached side's do (unless
 * keep_reads: a connection that was never handed over). */
static void ho_unrelease(struct tlp_shard *sh, struct tlp_conn *c, int keep_reads)
{
	struct tlp_ho_out *o = c->ho;

	for (int s = 0; s < 2; s++) {
		if (!(o->rel & (1u << s)))
			continue;
		o->rel &= (uint8_t)~(1u << s);
		tl_tls_release(sh->tls, c->ts[s], NULL, 0, NULL);
		if (!keep_reads && (c->flags & F_RD(s)) && !(c->flags & (F_EOF(s) | F_HORD(s))))
			tl_tls_cancel(sh->tls, c->rd[s]);
	}
}

/* Take a released side's session back (ho_resume): 0, or a negative errno. */
static int ho_reimport(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	struct tlp_ho_out *o = c->ho;
	tl_tls_config *cfg = s == 0 ? c->lr->tls : c->gen->tls_by_gp[c->gp->idx];
	int r;

	if (!o->st_len[s])
		return 0;
	r = tl_tls_import(sh->tls, cfg, c->h[s], o->st[s], o->st_len[s], tok(CI(sh, c), s, OP_CLOSE, 0),
			  &c->ts[s]);
	explicit_bzero(o->st[s], o->st_len[s]);
	o->st_len[s] = 0;
	if (r == 0)
		c->flags |= F_TLS(s);
	return r;
}

/* Detach side s of c (a first call cancels what it has; a TLS side is
 * released first). 0, or -1 when c was cut. */
static int ho_detach(struct tlp_shard *sh, struct tlp_conn *c, int s)
{
	struct tlp_ho_out *o = c->ho;
	int r;

	if (o->fd[s] >= 0 || tl_handle_eq(c->h[s], TL_HANDLE_NONE))
		return 0;
	if ((r = ho_release(sh, c, s)) <= 0) {
		if (r == 0)
			return 0;
		tlp_conn_end(sh, c, TLP_END_BUSY, 3);
		return -1;
	}
	r = tl_detach(sh->loop, c->h[s], &o->fd[s]);
	if (r == 0) {
		c->h[s] = TL_HANDLE_NONE;
		return 0;
	}
	o->fd[s] = -1;
	if (r == -EAGAIN)
		return 0;
	tlp_conn_end(sh, c, TLP_END_BUSY, 3);
	return -1;
}

static void ho_begin(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = calloc(1, sizeof *o);

	if (!o)
		return; /* it drains here */
	o->fd[0] = o->fd[1] = -1;
	o->in = c->ho; /* a record whose carry is still being written */
	c->ho = o;
	c->flags |= F_HO;
	/* TLS sides first: one that cannot move keeps the connection here
	 * before anything of it was detached. */
	for (int s = 0; s < 2; s++) {
		int r = ho_release(sh, c, s);

		if (r == -EOPNOTSUPP) {
			ho_unrelease(sh, c, 1);
			c->ho = o->in;
			c->flags &= ~F_HO;
			free(o->st[0]);
			free(o->st[1]);
			free(o);
			return; /* it drains here */
		}
		if (r < 0) {
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
	}
	for (int s = 0; s < 2; s++)
		if (ho_detach(sh, c, s) < 0)
			return;
	tlp_ho_step(sh, c);
}

/* Begin handing c over, one of the pending count: a connection that stays
 * (it cannot move, or no memory) leaves the count here; one that ends or
 * goes leaves it on that path. */
static void ho_start(struct tlp_shard *sh, struct tlp_conn *c)
{
	ho_begin(sh, c);
	if (!(c->flags & F_HO) && c->state == C_FWD)
		tlp_ho_gone();
}

static void keep_listener(struct tlp_shard *sh, tl_handle h, uint64_t token)
{
	int fd = tl_handle_fd(sh->loop, h);

	if (sh->kept && fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0) {
		sh->kept[sh->nkept].fd = fd;
		sh->kept[sh->nkept++].tok = token;
	}
	tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
}

static void tlp_shard_ho_end(tl_shard *s, int ok)
{
	struct tlp_shard *sh = SH(s);

	for (uint32_t i = 0; i < sh->nkept; i++) {
		tl_handle h;
		tl_op op;
		int fd = sh->kept[i].fd;

		if (ok || sh->stopping || sh->nxlh == TLP_MAX_INHERIT || tl_adopt(sh->loop, fd, &h) < 0) {
			close(fd);
			continue;
		}
		/* The successor went away: accept again, where the handle was. */
		if (tl_accept_start(sh->loop, h, sh->kept[i].tok, &op) < 0) {
			tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			continue;
		}
		uint64_t d = tl_token_data(sh->kept[i].tok);
		uint32_t gi = (uint32_t)(d & 0xffff), ai = (uint32_t)((d >> 16) & 0xff);

		if (gi < TLP_REG_LISTENERS && ai < TLP_MAX_LISTEN && !sh->lh[gi][ai].v) {
			sh->lh[gi][ai] = h;
		} else {
			sh->xtok[sh->nxlh] = sh->kept[i].tok;
			sh->xlh[sh->nxlh++] = h;
		}
	}
	if (!ok && sh->kept)
		sh->draining = sh->ho_was_draining;
	free(sh->kept);
	sh->kept = NULL;
	sh->nkept = 0;
	tlp_udp_ho_end(sh, ok);
}

static uint32_t tlp_shard_handover(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};
	uint32_t n = 0;

	sh->handing = 1;
	sh->ho_was_draining = sh->draining;
	sh->draining = 1; /* no listener comes back, not even on a reload */
	free(sh->kept);
	sh->nkept = 0;
	sh->kept = calloc(tlp_w.ngl * TLP_MAX_LISTEN + sh->nxlh + 1, sizeof *sh->kept);
	/* The new process holds the sockets: closing our handles leaves their
	 * queues to it. A descriptor of each stays here until the end, in case
	 * the new process goes away first (tlp_shard_ho_end). */
	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++)
		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++)
			if (!tl_handle_eq(sh->lh[gi][ai], none)) {
				keep_listener(sh, sh->lh[gi][ai], tl_token(TLP_H_LISTEN, gi | (uint64_t)ai << 16));
				sh->lh[gi][ai] = none;
			}
	for (uint32_t i = 0; i < sh->nxlh; i++)
		keep_listener(sh, sh->xlh[i], sh->xtok[i]);
	sh->nxlh = 0;
	for (uint32_t i = 0; i < sh->cap; i++) {
		struct tlp_conn *c = &sh->c[i];

		/* (A TLS session that cannot move finishes here: ho_begin.) */
		if (c->state == C_FWD && !(c->flags & F_HO)) {
			n++;
			ho_start(sh, c);
		} else if (c->state == C_TLS || c->state == C_PEEK || c->state == C_CONNECT) {
			/* Being set up (ho_await) */
			n++;
			c->flags |= F_HOWAIT;
		}
	}
	return n + tlp_udp_handover(sh);
}

/*
 * A connection still being set up when its shard begins handing over (a
 * TLS handshake, a peek at its first bytes, a connect to its server: each
 * bounded by its own timeout) is awaited: once it forwards, it is handed
 * over like the others (TLP_HO_FORWARDS), so that a client that connected a
 * moment before the switch does not stay in the old process for its whole
 * life. The handover's deadline bounds the wait: what has not got that far
 * by then drains here (tlp_shard_ho_stop). Clients waiting in the queue or
 * for a descriptor (C_QUEUED, C_HELD) wait for capacity, which may take
 * long: they are not awaited, and drain here.
 */
static void ho_await_ready(struct tlp_shard *sh, struct tlp_conn *c)
{
	c->flags &= ~F_HOWAIT;
	ho_start(sh, c);
}

/* Bytes read from side s while handing over: kept, not written. */
static void ho_keep(struct tlp_shard *sh, struct tlp_conn *c, int s, const uint8_t *p, uint32_t id,
		    uint32_t n)
{
	struct tlp_ho_out *o = c->ho;

	if (o->len[s] + (uint64_t)n > TLP_HO_CARRY_MAX) {
		/* More than a stream's leases can hold: not expected; cut. */
		side_lease_free(sh, side_lease_arg(c, s, id));
		tlp_conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	if (o->len[s] + n > o->cap[s]) {
		uint32_t cap = o->cap[s] ? o->cap[s] : 65536;
		uint8_t *b;

		while (cap < o->len[s] + n)
			cap *= 2;
		b = realloc(o->b[s], cap);
		if (!b) {
			side_lease_free(sh, side_lease_arg(c, s, id));
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		o->b[s] = b;
		o->cap[s] = cap;
	}
	memcpy(o->b[s] + o->len[s], p, n);
	o->len[s] += n;
	side_lease_free(sh, side_lease_arg(c, s, id)); /* a TLS side's: the layer's */
}

/* A write of p[0..len) to side d, number seq, ended while c is handed
 * over (completion e): what it did not write is owed to d, after what the
 * writes issued before it did not write. */
void tlp_ho_cut_write(struct tlp_shard *sh, struct tlp_conn *c, int d, const tl_completion *e,
		      const uint8_t *p, uint32_t len, uint32_t seq)
{
	struct tlp_ho_out *o = c->ho;
	uint64_t done = e->u.write.written;
	struct tlp_ho_piece *w;

	if (e->result > 0 && (uint64_t)e->result >= len)
		done = len; /* all of it went */
	if (c->state != C_FWD || done >= len ||
	    (e->result < 0 && e->result != -ECANCELED))
		return; /* written, or the connection ends anyway */
	if (o->nw[d] == o->capw[d]) {
		uint32_t cap = o->capw[d] ? 2 * o->capw[d] : 16;

		w = realloc(o->w[d], cap * sizeof *w);
		if (!w) {
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		o->w[d] = w;
		o->capw[d] = cap;
	}
	w = &o->w[d][o->nw[d]];
	w->len = len - (uint32_t)done;
	w->seq = seq;
	w->p = malloc(w->len);
	if (!w->p) {
		tlp_conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	memcpy(w->p, p + done, w->len);
	o->nw[d]++;
}

/* What side s^1 is still owed of side s's bytes, in order, into one new
 * buffer: 0 and *out (NULL when none), or -E2BIG / -ENOMEM. */
static int ho_carry(struct tlp_ho_out *o, int s, uint8_t **out, uint32_t *len)
{
	struct tlp_ho_piece *w = o->w[s ^ 1];
	uint32_t n = o->nw[s ^ 1];
	uint64_t total = o->len[s];
	uint8_t *b, *q;

	/* Few pieces (the writes in flight): an insertion sort by number. */
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && (int32_t)(w[j].seq - w[j - 1].seq) < 0; j--) {
			struct tlp_ho_piece t = w[j];

			w[j] = w[j - 1];
			w[j - 1] = t;
		}
	for (uint32_t i = 0; i < n; i++)
		total += w[i].len;
	*out = NULL;
	*len = 0;
	if (!total)
		return 0;
	if (total > TLP_HO_CARRY_MAX)
		return -E2BIG;
	q = b = malloc(total);
	if (!b)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(q, w[i].p, w[i].len);
		q += w[i].len;
	}
	if (o->len[s])
		memcpy(q, o->b[s], o->len[s]);
	*out = b;
	*len = (uint32_t)total;
	return 0;
}

static void ho_free(struct tlp_ho_out *o)
{
	for (int s = 0; s < 2; s++) {
		if (o->st[s])
			explicit_bzero(o->st[s], TL_TLS_STATE_MAX); /* keys */
		free(o->st[s]);
		for (uint32_t i = 0; i < o->nw[s]; i++)
			free(o->w[s][i].p);
		free(o->w[s]);
		free(o->b[s]);
	}
	free(o->in);
	free(o);
}

/* A connection being handed over ends here instead (conn_end): sides in
 * abort_mask are reset, as their handles would be. */
static void ho_drop(struct tlp_conn *c, int abort_mask)
{
	struct tlp_ho_out *o = c->ho;
	struct tlp_ho_in *in = o->in;

	for (int s = 0; s < 2; s++)
		if (o->fd[s] >= 0) {
			if (abort_mask & (1 << s))
				tlp_ho_fd_abort(o->fd[s]);
			else
				close(o->fd[s]);
		}
	o->in = NULL;
	ho_free(o);
	/* Carry writes still in flight hold their record until they end
	 * (carry_written). */
	c->ho = in;
	c->flags &= ~F_HO;
	tlp_ho_gone();
}

static uint16_t peer_len(const tl_addr *a)
{
	switch (a->sa.sa_family) {
	case AF_INET:
		return sizeof a->in;
	case AF_INET6:
		return sizeof a->in6;
	default:
		return 0; /* an unnamed Unix peer: nothing to say */
	}
}

/* Every operation of c has ended: neither a read, a write, a splice nor a
 * shutdown is left in flight. */
static int ho_quiet(const struct tlp_conn *c)
{
	uint32_t f = c->flags;

	for (int s = 0; s < 2; s++)
		if (((f & F_RD(s)) && !(f & (F_EOF(s) | F_HORD(s)))) || c->wq[s] ||
		    ((f & F_SHUT(s)) && !(f & F_SHUTOK(s))))
			return 0;
	return 1;
}

void tlp_ho_step(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = c->ho;
	uint32_t f = c->flags;
	uint8_t *carry[2] = {NULL, NULL};
	struct tlp_ho_msg m;
	int r = 0;

	if (c->state != C_FWD || !(f & F_HO))
		return;
	if (f & F_HORES) {
		ho_resume(sh, c);
		return;
	}
	for (int s = 0; s < 2; s++)
		if ((o->rel & (1u << s)) && ho_detach(sh, c, s) < 0)
			return;
	if (o->rel) {
		/* the TLS layer's own completions move it on: look again next turn */
		if (o->posted)
			return;
		if (tl_shard_post(sh->s, sh->id, tlp_ctl_token(TLP_MSG_HO_STEP, CI(sh, c)), 0) < 0)
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
		else
			o->posted = 1;
		return;
	}
	if (!ho_quiet(c))
		return;
	if ((f & F_EOF(0)) && (f & F_EOF(1)) && !o->len[0] && !o->len[1] && !o->nw[0] && !o->nw[1]) {
		/* Both FINs came and nothing is owed: closing both ends it
		 * here, with the FINs still owed. */
		tlp_conn_end(sh, c, TLP_END_DONE, 0);
		return;
	}
	for (int s = 0; s < 2; s++) {
		if (ho_detach(sh, c, s) < 0)
			return;
		if (o->fd[s] < 0 && !tl_handle_eq(c->h[s], TL_HANDLE_NONE)) {
			/* Its completions are still queued: after this turn. */
			if (tl_shard_post(sh->s, sh->id, tlp_ctl_token(TLP_MSG_HO_STEP, CI(sh, c)), 0) < 0)
				tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
	}
	for (int s = 0; s < 2; s++)
		if (o->fd[s] < 0) {
			/* A side that had finished before it came here (its socket
			 * was no longer a connection): an unconnected socket stands
			 * for it, and the record says it finished (handover.h). */
			o->fd[s] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (o->fd[s] < 0) {
				tlp_conn_end(sh, c, TLP_END_BUSY, 3);
				return;
			}
		}
	memset(&m, 0, offsetof(struct tlp_ho_msg, u) + sizeof m.u.conn);
	m.type = TLP_HO_CONN;
	for (int s = 0; s < 2 && r == 0; s++) {
		if (f & F_EOF(s))
			m.u.conn.flags |= TLP_HO_EOF(s);
		if (f & F_SHUTOK(s))
			m.u.conn.flags |= TLP_HO_SHUT(s);
		m.u.conn.bytes[s] = c->bytes[s];
		r = ho_carry(o, s, &carry[s], &m.u.conn.carry_len[s]);
		m.u.conn.carry[s] = carry[s];
		m.u.conn.tls[s] = o->st_len[s] ? o->st[s] : NULL;
		m.u.conn.tls_len[s] = o->st_len[s];
	}
	if (r < 0) {
		free(carry[0]);
		free(carry[1]);
		tlp_conn_end(sh, c, TLP_END_BUSY, 3);
		return;
	}
	m.u.conn.server = c->vidx;
	m.u.conn.age_ns = tl_now(sh->loop) - c->t0;
	snprintf(m.u.conn.listener, sizeof m.u.conn.listener, "%s", c->lr->gl->name);
	snprintf(m.u.conn.pool, sizeof m.u.conn.pool, "%s", c->gp ? c->gp->name : "");
	snprintf(m.u.conn.srv, sizeof m.u.conn.srv, "%s", c->srv ? c->srv->label : "");
	m.u.conn.peer_len = peer_len(&c->peer);
	memcpy(&m.u.conn.peer, &c->peer, m.u.conn.peer_len);
	/* The record takes the descriptors whatever happens. */
	tlp_ho_push_conn(&m, o->fd);
	free(carry[0]);
	free(carry[1]);
	o->fd[0] = o->fd[1] = -1;
	ho_free(o);
	c->ho = NULL;
	c->flags &= ~F_HO;
	/* Gone from here: what conn_end would release, without a close. */
	c->state = C_CLOSING;
	c->cause = TLP_END_DONE;
	if (c->flags & F_LCOUNT)
		atomic_fetch_sub_explicit(&c->lr->gl->conns, 1, memory_order_relaxed);
	if (c->flags & F_WCOUNT)
		atomic_fetch_sub_explicit(&tlp_w.conns, 1, memory_order_relaxed);
	c->flags &= ~(F_LCOUNT | F_WCOUNT);
	tlp_srv_release(sh, c);
	tlp_conn_free(sh, c);
}

static void tlp_shard_ho_step(tl_shard *s, uint32_t ci)
{
	struct tlp_shard *sh = SH(s);

	if (ci >= sh->cap)
		return;
	if (sh->c[ci].flags & F_HO)
		((struct tlp_ho_out *)sh->c[ci].ho)->posted = 0;
	tlp_ho_step(sh, &sh->c[ci]);
}

/* A carry write of an adopted connection ended: the record goes with the
 * last (while the connection is handed over again, it is the handover's). */
void tlp_carry_written(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_in **pin = (c->flags & F_HO) ? &((struct tlp_ho_out *)c->ho)->in
						   : (struct tlp_ho_in **)&c->ho;
	struct tlp_ho_in *in = *pin;

	(void)sh;
	if (in && --in->nwrites == 0) {
		free(in);
		*pin = NULL;
	}
}

/* Forward again: the bytes of in (or none) first, then reads on the sides
 * still open, and the FINs read but not yet passed on. c->ho takes in. */
void tlp_ho_carry_on(struct tlp_shard *sh, struct tlp_conn *c, struct tlp_ho_in *in)
{
	uint32_t ci = CI(sh, c);

	c->ho = in;
	if (in) {
		const struct tlp_ho_conn *hc = &in->c;

		in->nwrites = 1; /* held until every write below is issued */
		for (int k = 0; k < 2 && c->state == C_FWD; k++)
			if (hc->carry_len[k]) {
				if (tl_handle_eq(c->h[k ^ 1], TL_HANDLE_NONE)) {
					/* Owed to a side that is gone: cut. */
					tlp_conn_end(sh, c, TLP_END_BUSY, 3);
					break;
				}
				in->nwrites++;
				write_buf(sh, c, k ^ 1, hc->carry[k], hc->carry_len[k], OP_WRITE_CARRY, 0);
				if (c->state != C_FWD)
					in->nwrites--; /* write_buf ended it: no completion */
			}
		tlp_carry_written(sh, c);
	}
	for (int k = 0; k < 2 && c->state == C_FWD; k++) {
		if (c->flags & F_EOF(k))
			continue;
		tlp_spl_init(&c->sp[k], c->lr->cfg->splice);
		if (side_read_start(sh, c, k, tok(ci, k, OP_READ, 0), &c->rd[k]) < 0) {
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		c->flags |= F_RD(k);
	}
	/* A FIN read and not passed on yet. */
	for (int k = 0; k < 2 && c->state == C_FWD; k++)
		if ((c->flags & F_EOF(k)) && !(c->flags & F_SHUT(k ^ 1)))
			tlp_shut(sh, c, k ^ 1);
	if (c->state == C_FWD) {
		arm_idle(sh, c);
		maybe_done(sh, c);
	}
}

/* The deadline passed with c still on its way (or the new process went
 * away): it carries on here once every operation has ended (ho_step calls
 * again until then), with what each side is owed written first. */
static void ho_resume(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_ho_out *o = c->ho;
	struct tlp_ho_in *in = NULL;
	uint8_t *carry[2] = {NULL, NULL};
	uint32_t len[2] = {0, 0};

	ho_unrelease(sh, c, 0);
	if (!ho_quiet(c))
		return;
	for (int s = 0; s < 2; s++)
		if (o->fd[s] >= 0) {
			if (tl_adopt(sh->loop, o->fd[s], &c->h[s]) < 0) {
				c->h[s] = TL_HANDLE_NONE;
				tlp_conn_end(sh, c, TLP_END_BUSY, 3); /* ho_drop resets it */
				return;
			}
			o->fd[s] = -1;
		}
	for (int s = 0; s < 2; s++)
		if (ho_reimport(sh, c, s) < 0) {
			tlp_conn_end(sh, c, TLP_END_TLS, 3);
			return;
		}
	for (int s = 0; s < 2; s++)
		if (ho_carry(o, s, &carry[s], &len[s]) < 0) {
			free(carry[0]);
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
	if (len[0] || len[1]) {
		in = malloc(sizeof *in + len[0] + len[1]);
		if (!in) {
			free(carry[0]);
			free(carry[1]);
			tlp_conn_end(sh, c, TLP_END_BUSY, 3);
			return;
		}
		memset(&in->c, 0, sizeof in->c);
		for (int s = 0; s < 2; s++) {
			in->c.carry[s] = in->body + (s ? len[0] : 0);
			in->c.carry_len[s] = len[s];
			if (len[s])
				memcpy(in->body + (s ? len[0] : 0), carry[s], len[s]);
		}
		in->fd[0] = in->fd[1] = -1;
	}
	free(carry[0]);
	free(carry[1]);
	ho_free(o);
	c->ho = NULL;
	c->flags &= ~(F_HO | F_HORD(0) | F_HORD(1) | F_HORES);
	tlp_ho_gone();
	tlp_ho_carry_on(sh, c, in);
}

static uint32_t tlp_shard_ho_stop(tl_shard *s)
{
	struct tlp_shard *sh = SH(s);
	uint32_t n = 0;

	sh->handing = 0;
	for (uint32_t i = 0; i < sh->cap; i++) {
		struct tlp_conn *c = &sh->c[i];

		if (c->state == C_FWD && (c->flags & F_HO)) {
			c->flags |= F_HORES;
			n++;
			ho_resume(sh, c);
		} else if (c->flags & F_HOWAIT) {
			c->flags &= ~F_HOWAIT;
			n++; /* still being set up at the deadline: it drains here */
		} else if ((c->flags & (F_TLS(0) | F_TLS(1))) && c->state != C_FREE && c->state != C_CLOSING) {
			n++; /* a TLS session was never handed over: it drains here */
		}
	}
	return n + tlp_udp_ho_stop(sh);
}

/* ---- the hook and the messages ---- */

static void ho_event(struct tlp_shard *sh, struct tlp_conn *c, int ev, int s, const uint8_t *p,
		     uint32_t id, uint32_t n)
{
	switch (ev) {
	case TLP_HO_DROP:
		ho_drop(c, s);
		return;
	case TLP_HO_KEEP:
		ho_keep(sh, c, s, p, id, n);
		return;
	case TLP_HO_STEP:
		tlp_ho_step(sh, c);
		return;
	case TLP_HO_FORWARDS:
		ho_await_ready(sh, c);
		return;
	case TLP_HO_FORGET:
		c->flags &= ~F_HOWAIT;
		tlp_ho_gone();
		return;
	default:
		return;
	}
}

void (*const tlp_ho_hook)(struct tlp_shard *sh, struct tlp_conn *c, int ev, int s,
			  const uint8_t *p, uint32_t id, uint32_t n) = ho_event;

void tlp_ho_msg(tl_shard *s, uint32_t type, uint64_t arg, uint64_t payload)
{
	uint32_t me = tl_shard_id(s), n = tlp_w.nshards;

	if (type == TLP_MSG_HO_STEP) {
		tlp_shard_ho_step(s, (uint32_t)arg);
		return;
	}
	if (type == TLP_MSG_HO_CONN) {
		struct tlp_ho_in *in = (struct tlp_ho_in *)(uintptr_t)payload;
		int r;

		if (!in)
			return;
		if (arg & TLP_HO_FROM_THREAD) {
			/* Shard 0 spreads them over every shard in turn. */
			static uint32_t rr;
			uint32_t to = rr++ % n;

			if (in->c.flags & TLP_HO_UDP) {
				/* A UDP session: the shard receiving on its socket. */
				int o = tlp_udp_owner(in->fd[0]);

				to = o >= 0 ? (uint32_t)o : me;
			}

			if (to != me &&
			    tl_shard_post(s, to, tlp_ctl_token(TLP_MSG_HO_CONN, 0), payload) == 0)
				return;
		}
		r = tlp_shard_adopt(s, in);
		if (r < 0)
			tlp_log("takeover: shard %u cannot carry on a connection: %s", me, tl_strerror(r));
		tlp_ho_answer(type, r < 0 ? 0 : 1);
		return;
	}
	if (arg & TLP_HO_FROM_THREAD) {
		/* A shard that cannot be told does not answer: the thread's
		 * wait ends at its deadline. */
		for (uint32_t t = 0; t < n; t++)
			if (tl_shard_post(s, t,
					  tlp_ctl_token(type, arg & ~(uint64_t)TLP_HO_FROM_THREAD), 0) < 0)
				tlp_log("takeover: shard %u cannot be told", t);
		return;
	}
	if (type == TLP_MSG_HO_LISTEN) {
		tlp_shard_ho_listeners(s);
		tlp_ho_answer(type, 0);
	} else if (type == TLP_MSG_HO_GO) {
		tlp_ho_answer(type, (int64_t)tlp_shard_handover(s));
	} else if (type == TLP_MSG_HO_STOP) {
		tlp_ho_answer(type, (int64_t)tlp_shard_ho_stop(s));
	} else if (type == TLP_MSG_HO_FIN) {
		tlp_shard_ho_end(s, !(arg & TLP_HO_FAILED));
		tlp_ho_answer(type, 0);
	}
}
