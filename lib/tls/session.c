/* lib/tls/session.c: a TLS session's life on its stream: start, the stream read and its deadline, the host's ops (handshake, read, write, shutdown, cancel, stop), failure and close. */
#include <errno.h>
#include <string.h>
#include "tls_int.h"

/*
 * A session reads its stream with one tl_read_start from its handshake on
 * (multishot, into the loop's leases; its lease cap is TLS_LQ_CAP, so a
 * session that cannot use its input makes the loop pause that stream and
 * nothing else). That one read carries both deadlines a host can set: the
 * handshake's while it runs, then the read op's (tl_read_deadline: fixed,
 * not moved by bytes), and the stream's idle deadline if the host set one;
 * which of them ended it is told by the clock and the ops still pending.
 *
 * Closing (tl_tls_close): the host's ops end at once (-ECANCELED: nothing
 * of theirs is in the loop, the ciphertext buffers are the ctx's), then a
 * graceful close writes close_notify behind whatever is queued and waits
 * for it (the stream's idle deadline set to close_linger_ns bounds the
 * wait for a peer that reads nothing), and closes the stream; its Closed
 * becomes the session's, after every write of the session has ended.
 */

static uint64_t now(struct tl_tls_ctx *x)
{
	return tl_now(x->loop);
}

/* Start the stream read if it is not running and can. */
static void read_ensure(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->reading || s->eof || s->in_err || s->fatal || s->releasing || s->state != S_OPEN)
		return;
	int r = tl_read_start(x->loop, s->h, tls_tok(x, TK_READ, tls_sess_slot(x, s), s->gen), &s->rop);
	if (r < 0) {
		s->in_err = r;
		return;
	}
	s->reading = 1;
	s->rop_deadline = 0;
	tls__read_deadline(x, s);
}

void tls__read_deadline(struct tl_tls_ctx *x, struct tls_sess *s)
{
	uint64_t d = 0;

	if (s->hs_op != NONE)
		d = x->ops[s->hs_op].deadline;
	else if (s->rd_op != NONE)
		d = x->ops[s->rd_op].deadline;
	if (!s->reading || d == s->rop_deadline)
		return;
	if (tl_read_deadline(x->loop, s->rop, d) == 0)
		s->rop_deadline = d;
}

/* End the host's read: the plaintext already decrypted goes first. */
static void read_end(struct tl_tls_ctx *x, struct tls_sess *s, int64_t result, uint16_t flags);

void tls__deliver(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->pl == NONE)
		return;
	if (!s->pl_len || s->rd_op == NONE) {
		if (!s->pl_len) {
			tls__plain_put(x, s->pl);
			s->pl = NONE;
		}
		return;
	}
	struct tls_op *o = &x->ops[s->rd_op];
	uint32_t idx = s->pl;
	tl_completion c = {
		.token = o->token,
		.op = tls_op_id(x, o),
		.handle = {tls_sess_id(x, s).v},
		.result = s->pl_len,
		.kind = TL_K_READ,
		.flags = TL_F_LEASE,
	};
	c.u.read.lease.data = tls_plain(x, idx);
	c.u.read.lease.id = TLS_LEASE_BIT | idx;
	c.u.read.lease.cap = x->cc.plain_buffer_size;
	x->plain_held[idx] = 1;
	x->plain_owner[idx] = tls_sess_slot(x, s);
	x->plain_owner_gen[idx] = s->gen;
	x->st.plain_held++;
	s->pl_held++;
	s->pl = NONE;
	s->pl_len = 0;
	tls__push(x, &c);
}

static void read_end(struct tl_tls_ctx *x, struct tls_sess *s, int64_t result, uint16_t flags)
{
	if (s->rd_op == NONE)
		return;
	tls__deliver(x, s);
	tls__op_end(x, &x->ops[s->rd_op], result, flags);
	tls__read_deadline(x, s);
}

static void count_failure(struct tl_tls_ctx *x, struct tls_sess *s, int reason)
{
	if (s->hs_started && !s->hs_done && !s->hs_counted) {
		s->hs_counted = 1;
		x->st.failed[reason]++;
	}
}

void tls__fail(struct tl_tls_ctx *x, struct tls_sess *s, int err, int reason)
{
	if (s->fatal)
		return;
	s->fatal = 1;
	s->err = err;
	s->reason = reason;
	count_failure(x, s, reason);
	if (s->hs_op != NONE)
		tls__op_end(x, &x->ops[s->hs_op], err, 0);
	read_end(x, s, err, 0);
	tls__writes_fail(x, s, err);
	if (s->shut_op != NONE)
		tls__op_end(x, &x->ops[s->shut_op], err, 0);
	/* Nothing more will be read: stop the stream's read and drop what it
	 * holds, so that the loop's leases go back now. */
	if (s->reading)
		tl_cancel(x->loop, s->rop);
	tls__input_drop(x, s);
}

void tls__run(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->state != S_OPEN)
		return;
	if (s->lq_leases >= TLS_LQ_CAP && s->whole == 0)
		tls__compact(x, s); /* waited for a spill buffer */
	if (s->hs_started && !s->hs_done && !s->fatal)
		tls__handshake_pump(x, s);
	if (!s->hs_done || s->state != S_OPEN)
		return;
	if (!s->fatal) {
		tls__read_pump(x, s);
		tls__write_pump(x, s);
	}
	/* The host's read ends when the stream has nothing more for it. */
	if (s->rd_op != NONE && !s->fatal && s->pl_held < x->cc.session_leases) {
		if (s->notify_in && s->whole == 0)
			read_end(x, s, 0, TL_F_EOF);
		else if (s->whole == 0 && s->window == 0 && tls__plain_pending(s) == 0 &&
			 (s->eof || s->in_err || s->frame_bad)) {
			if (s->frame_bad)
				tls__fail(x, s, -EBADMSG, TL_TLS_R_PROTOCOL);
			else if (s->in_err)
				read_end(x, s, s->in_err, 0);
			else
				read_end(x, s, -EPROTO, 0); /* truncated: no close_notify */
		}
	}
	if (s->rd_op != NONE || s->hs_op != NONE)
		read_ensure(x, s);
}

/* The stream read ended with -ETIMEDOUT: the handshake's deadline, the
 * read op's, or the stream's idle deadline; each ends what is pending. */
static void read_timed_out(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->hs_op != NONE)
		tls__fail(x, s, -ETIMEDOUT, TL_TLS_R_TIMEOUT);
	else
		read_end(x, s, -ETIMEDOUT, 0);
}

void tls__on_loop(struct tl_tls_ctx *x, struct tls_sess *s, const tl_completion *c)
{
	switch (tls_tok_kind(c->token)) {
	case TK_READ:
		if (c->result > 0 && (c->flags & TL_F_LEASE)) {
			if (s->state != S_OPEN || s->fatal) {
				tl_lease_release(x->loop, c->u.read.lease.id);
			} else if (tls__input(x, s, &c->u.read.lease, (uint32_t)c->result) < 0) {
				tl_lease_release(x->loop, c->u.read.lease.id);
				tls__fail(x, s, -ENOBUFS, TL_TLS_R_INTERNAL);
			}
		}
		if (!(c->flags & TL_F_TERMINAL))
			break;
		s->reading = 0;
		s->rop_deadline = 0;
		if (c->result == 0 && !(c->flags & TL_F_STOPPED))
			s->eof = 1;
		else if (c->result == -ETIMEDOUT && s->state == S_OPEN)
			read_timed_out(x, s);
		else if (c->result < 0 && c->result != -ECANCELED && c->result != -ETIMEDOUT)
			s->in_err = (int)c->result;
		break;
	case TK_WRITE:
		tls__out_done(x, s, tls_tok_aux(c->token), c->result);
		break;
	case TK_SHUT:
		if (s->shut_op != NONE && x->ops[s->shut_op].flags & OPF_QUEUED)
			break; /* cannot happen: the shutdown is issued when it leaves the queue */
		if (s->shut_op != NONE)
			tls__op_end(x, &x->ops[s->shut_op], c->result < 0 ? c->result : 0, 0);
		break;
	case TK_CLOSE:
		if (c->kind != TL_K_CLOSED)
			break;
		/* Every op of the stream has ended: the session is done. */
		tls__input_drop(x, s);
		if (s->pl != NONE) {
			tls__plain_put(x, s->pl);
			s->pl = NONE;
		}
		if (s->out_cur != NONE) {
			tls__out_put(x, s->out_cur);
			s->out_cur = NONE;
		}
		tls__unwait(x, s);
		if (s->gs)
			gnutls_deinit(s->gs);
		s->gs = NULL;
		tls__carry_free(s);
		tls__cslot_put(x, s->cslot);
		s->state = S_CLOSED;
		x->nsess_open--;
		tl_completion cl = {
			.token = s->close_token,
			.handle = {tls_sess_id(x, s).v},
			.kind = TL_K_CLOSED,
			.flags = TL_F_TERMINAL,
		};
		tls__push(x, &cl);
		return;
	default:
		break;
	}
	tls__run(x, s);
}

/* ---- starting ---- */

/* A new session on h: a library session for a handshake, or (state) one
 * carrying on a released session's records. */
static int start(struct tl_tls_ctx *x, tl_tls_config *cfg, int role, tl_handle h,
		 const tl_tls_client_opts *opts, const uint8_t *state, uint32_t len, uint64_t token,
		 tl_tls_id *id)
{
	if (!x || !cfg || !id || cfg->role != role)
		return -EINVAL;
	/* Validates h (a stream of this loop, not closing) and bounds the
	 * leases its reads may hold. */
	int r = tl_handle_caps(x->loop, h, TLS_LQ_CAP, 0);
	if (r < 0)
		return r;
	if (x->sess_free == NONE)
		return -ENOBUFS;
	uint32_t slot = x->sess_free;
	struct tls_sess *s = &x->sess[slot];
	uint32_t cs = tls__cslot_get(x, cfg, &r);
	if (cs == NONE)
		return r;
	x->sess_free = s->next;
	uint16_t gen = s->gen;
	memset(s, 0, sizeof *s);
	s->gen = gen;
	s->x = x;
	s->state = S_OPEN;
	s->server = role == TL_TLS_SERVER;
	s->cslot = cs;
	s->h = h;
	s->close_token = token;
	s->hs_op = s->rd_op = s->shut_op = s->wq_head = s->wq_tail = s->aw_head = s->aw_tail = NONE;
	s->pl = s->out_cur = s->lq_head = s->lq_tail = NONE;
	s->wait_next = s->run_next = s->next = NONE;
	s->alert_in = s->alert_out = -1;
	if (state) {
		s->hs_started = s->hs_done = 1;
		s->hs_counted = 1;
	}
	if ((r = state ? tls__carry_import(x, s, state, len) : tls__session_setup(x, s, opts)) < 0) {
		if (s->gs)
			gnutls_deinit(s->gs);
		s->gs = NULL;
		tls__input_drop(x, s);
		tls__carry_free(s);
		tls__cslot_put(x, cs);
		s->state = S_FREE;
		s->next = x->sess_free;
		x->sess_free = slot;
		return r;
	}
	x->nsess_open++;
	*id = tls_sess_id(x, s);
	return 0;
}

int tl_tls_server(tl_tls_ctx *x, tl_tls_config *cfg, tl_handle h, uint64_t token, tl_tls_id *id)
{
	return start(x, cfg, TL_TLS_SERVER, h, NULL, NULL, 0, token, id);
}

int tl_tls_client(tl_tls_ctx *x, tl_tls_config *cfg, tl_handle h, const tl_tls_client_opts *opts,
		  uint64_t token, tl_tls_id *id)
{
	return start(x, cfg, TL_TLS_CLIENT, h, opts, NULL, 0, token, id);
}

int tl_tls_import(tl_tls_ctx *x, tl_tls_config *cfg, tl_handle h, const void *state, uint32_t len,
		  uint64_t token, tl_tls_id *id)
{
	if (!x || !cfg || !state || !id)
		return -EINVAL;
	return start(x, cfg, cfg->role, h, NULL, state, len, token, id);
}

/* Whether a completion naming s is still in the ctx's queue. */
static int queued_for(const struct tl_tls_ctx *x, const struct tls_sess *s)
{
	uint64_t v = tls_sess_id(x, s).v;

	for (uint32_t i = 0, k = x->q_head; i < x->q_n; i++, k = (k + 1) % x->q_cap)
		if (x->q[k].handle.v == v)
			return 1;
	return 0;
}

int tl_tls_release(tl_tls_ctx *x, tl_tls_id id, void *state, uint32_t cap, tl_handle *h)
{
	struct tls_sess *s = tls__sess_of(x, id);
	int r;

	if (!s)
		return -ENOENT;
	if (!state && !cap && !h) {
		/* abandoned: the session carries on as before */
		if (!s->releasing || s->state != S_OPEN)
			return -EINVAL;
		s->releasing = 0;
		tls__run(x, s);
		tls__runs(x);
		return 0;
	}
	if (!state || !h || s->state != S_OPEN)
		return -EINVAL;
	if (cap < TL_TLS_STATE_MAX)
		return -ENOBUFS;
	if (!s->releasing) {
		if ((r = tls__carry_movable(x, s)) < 0)
			return r;
		s->releasing = 1;
		if (s->reading)
			tl_stop(x->loop, s->rop); /* what it took still comes */
	}
	tls__run(x, s);
	tls__runs(x);
	if (s->state != S_OPEN)
		return -EINVAL;
	if (tls__carry_movable(x, s) < 0) {
		/* failed meanwhile: it stays */
		s->releasing = 0;
		tls__run(x, s);
		tls__runs(x);
		return -EOPNOTSUPP;
	}
	/* Quiet: the stream read over, every whole record opened and handed
	 * out, every write written. */
	if (s->reading || s->whole || tls__plain_pending(s) || s->wq_head != NONE || s->aw_head != NONE ||
	    s->outq_n || (s->out_cur != NONE && s->out_len) || (s->pl != NONE && s->pl_len) ||
	    s->shut_op != NONE)
		return -EAGAIN;
	if (s->rd_op != NONE) {
		read_end(x, s, -ECANCELED, 0);
		return -EAGAIN;
	}
	if (queued_for(x, s))
		return -EAGAIN;
	if ((r = tls__carry_export(x, s, state, cap)) < 0)
		return r;
	/* Gone without a Closed: its buffers back, its slot free. */
	tls__unwait(x, s);
	tls__input_drop(x, s);
	if (s->pl != NONE)
		tls__plain_put(x, s->pl);
	if (s->out_cur != NONE)
		tls__out_put(x, s->out_cur);
	s->pl = s->out_cur = NONE;
	if (s->gs)
		gnutls_deinit(s->gs);
	s->gs = NULL;
	tls__carry_free(s);
	memset(s->sec_client, 0, sizeof s->sec_client);
	memset(s->sec_server, 0, sizeof s->sec_server);
	tls__cslot_put(x, s->cslot);
	*h = s->h;
	x->nsess_open--;
	tls__sess_free(x, s);
	return r;
}

/* ---- the host's ops ---- */

int tl_tls_handshake(tl_tls_ctx *x, tl_tls_id id, uint64_t deadline_ns, uint64_t token, tl_op *op)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!op || s->state != S_OPEN || s->hs_started)
		return -EINVAL;
	struct tls_op *o = tls__op_new(x, s, OP_HS, token);
	if (!o)
		return -ENOBUFS;
	o->deadline = deadline_ns;
	s->hs_op = tls_op_slot(x, o);
	s->hs_started = 1;
	s->hs_start = now(x);
	*op = tls_op_id(x, o);
	read_ensure(x, s);
	if (s->in_err && !s->reading)
		tls__fail(x, s, s->in_err, TL_TLS_R_IO);
	else
		tls__run(x, s);
	tls__runs(x);
	return 0;
}

int tl_tls_read_start(tl_tls_ctx *x, tl_tls_id id, uint64_t token, tl_op *op)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!op || s->state != S_OPEN || s->rd_op != NONE)
		return -EINVAL;
	struct tls_op *o = tls__op_new(x, s, OP_READ, token);
	if (!o)
		return -ENOBUFS;
	s->rd_op = tls_op_slot(x, o);
	*op = tls_op_id(x, o);
	if (s->fatal)
		read_end(x, s, s->err, 0);
	else
		tls__run(x, s);
	tls__runs(x);
	return 0;
}

int tl_tls_read_deadline(tl_tls_ctx *x, tl_op op, uint64_t deadline_ns)
{
	struct tls_op *o = tls__op_of(x, op);

	if (!o)
		return -ENOENT;
	if (o->type != OP_READ)
		return -EINVAL;
	if (o->flags & (OPF_CANCEL | OPF_STOP))
		return -EALREADY;
	o->deadline = deadline_ns;
	struct tls_sess *s = &x->sess[o->sess];
	tls__read_deadline(x, s);
	/* a deadline already past ends it now, as the loop's does next turn */
	if (deadline_ns && deadline_ns <= now(x) && s->hs_op == NONE && !s->reading)
		read_end(x, s, -ETIMEDOUT, 0);
	return 0;
}

static void wq_add(struct tl_tls_ctx *x, struct tls_sess *s, struct tls_op *o)
{
	uint32_t slot = tls_op_slot(x, o);

	o->flags |= OPF_QUEUED;
	o->next = NONE;
	if (s->wq_tail == NONE)
		s->wq_head = slot;
	else
		x->ops[s->wq_tail].next = slot;
	s->wq_tail = slot;
}

int tl_tls_writev(tl_tls_ctx *x, tl_tls_id id, const struct iovec *iov, int n, uint64_t token,
		  tl_op *op)
{
	struct tls_sess *s = tls__sess_of(x, id);
	uint64_t total = 0;

	if (!s)
		return -ENOENT;
	if (!op || !iov || n < 1 || n > TL_IOV_MAX || s->state != S_OPEN || s->shut_op != NONE ||
	    s->releasing)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	if (total == 0 || total > UINT32_MAX)
		return -EINVAL;
	struct tls_op *o = tls__op_new(x, s, OP_WRITE, token);
	if (!o)
		return -ENOBUFS;
	o->niov = (uint8_t)n;
	memcpy(o->iov, iov, (size_t)n * sizeof *iov);
	o->total = (uint32_t)total;
	*op = tls_op_id(x, o);
	wq_add(x, s, o);
	if (s->fatal || s->out_err)
		tls__writes_fail(x, s, s->fatal ? s->err : s->out_err);
	else
		tls__run(x, s);
	tls__runs(x);
	return 0;
}

int tl_tls_write(tl_tls_ctx *x, tl_tls_id id, const void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	if (!buf)
		return x && tls__sess_of(x, id) ? -EINVAL : -ENOENT;
	struct iovec v = {(void *)buf, len};
	return tl_tls_writev(x, id, &v, 1, token, op);
}

int tl_tls_shutdown(tl_tls_ctx *x, tl_tls_id id, uint64_t token, tl_op *op)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!op || s->state != S_OPEN || s->shut_op != NONE || s->notify_out || s->releasing)
		return -EINVAL;
	struct tls_op *o = tls__op_new(x, s, OP_SHUT, token);
	if (!o)
		return -ENOBUFS;
	s->shut_op = tls_op_slot(x, o);
	*op = tls_op_id(x, o);
	wq_add(x, s, o);
	if (s->fatal || s->out_err)
		tls__writes_fail(x, s, s->fatal ? s->err : s->out_err);
	else
		tls__run(x, s);
	tls__runs(x);
	return 0;
}

int tl_tls_key_update(tl_tls_ctx *x, tl_tls_id id, int request_peer)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (s->state != S_OPEN || !s->hs_done || s->fatal || s->shut_op != NONE)
		return -EINVAL;
	if (s->releasing)
		return -EINVAL;
	if (s->cr ? tls__carry_version(s) != TL_TLS_1_3 : gnutls_protocol_get_version(s->gs) != GNUTLS_TLS1_3)
		return -ENOTSUP;
	struct tls_op *o = tls__op_new(x, s, OP_KEYUPDATE, 0);
	if (!o)
		return -ENOBUFS;
	o->request = request_peer != 0;
	wq_add(x, s, o);
	tls__run(x, s);
	tls__runs(x);
	return 0;
}

/* Take o out of whichever queue of its session holds it. */
static void unlink_op(struct tl_tls_ctx *x, struct tls_sess *s, struct tls_op *o)
{
	uint32_t slot = tls_op_slot(x, o);
	uint32_t *heads[2][2] = {{&s->wq_head, &s->wq_tail}, {&s->aw_head, &s->aw_tail}};

	for (int k = 0; k < 2; k++) {
		uint32_t prev = NONE;
		for (uint32_t i = *heads[k][0]; i != NONE; prev = i, i = x->ops[i].next) {
			if (i != slot)
				continue;
			if (prev == NONE)
				*heads[k][0] = o->next;
			else
				x->ops[prev].next = o->next;
			if (*heads[k][1] == slot)
				*heads[k][1] = prev;
			o->flags &= (uint8_t)~OPF_QUEUED;
			return;
		}
	}
}

int tl_tls_cancel(tl_tls_ctx *x, tl_op op)
{
	struct tls_op *o = tls__op_of(x, op);

	if (!o || o->type == OP_KEYUPDATE)
		return -ENOENT;
	if (o->flags & (OPF_CANCEL | OPF_STOP))
		return -EALREADY;
	struct tls_sess *s = &x->sess[o->sess];
	o->flags |= OPF_CANCEL;
	switch (o->type) {
	case OP_HS:
		tls__fail(x, s, -ECANCELED, TL_TLS_R_CANCELED);
		break;
	case OP_READ:
		read_end(x, s, -ECANCELED, 0);
		break;
	default: /* a write or a shutdown: what is written stays written */
		unlink_op(x, s, o);
		tls__op_end(x, o, -ECANCELED, 0);
		break;
	}
	tls__runs(x);
	return 0;
}

int tl_tls_stop(tl_tls_ctx *x, tl_op op)
{
	struct tls_op *o = tls__op_of(x, op);

	if (!o)
		return -ENOENT;
	if (o->type != OP_READ)
		return -EINVAL;
	if (o->flags & (OPF_CANCEL | OPF_STOP))
		return -EALREADY;
	o->flags |= OPF_STOP;
	read_end(x, &x->sess[o->sess], 0, TL_F_STOPPED);
	tls__runs(x);
	return 0;
}

/* ---- closing ---- */

/* Close the stream now (the session's Closed follows the stream's). */
void tls__close_stream(struct tl_tls_ctx *x, struct tls_sess *s)
{
	s->closing_wait = 0;
	uint64_t tok = tls_tok(x, TK_CLOSE, tls_sess_slot(x, s), s->gen);
	int r = s->abort ? tl_close_abort(x->loop, s->h, tok) : tl_close(x->loop, s->h, tok);
	if (r < 0) {
		/* The host closed the stream behind the session's back: no
		 * Closed of ours will come, so make it now. */
		tl_completion c = {.token = tok, .kind = TL_K_CLOSED, .flags = TL_F_TERMINAL};
		tls__on_loop(x, s, &c);
	}
}

int tl_tls_close(tl_tls_ctx *x, tl_tls_id id, uint32_t flags, uint64_t token)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (s->state != S_OPEN || (flags & ~(uint32_t)TL_TLS_CLOSE_ABORT))
		return -EINVAL;
	s->close_token = token;
	s->abort = (flags & TL_TLS_CLOSE_ABORT) != 0;
	count_failure(x, s, TL_TLS_R_CANCELED);
	if (s->hs_op != NONE)
		tls__op_end(x, &x->ops[s->hs_op], -ECANCELED, 0);
	read_end(x, s, -ECANCELED, 0);
	tls__writes_fail(x, s, -ECANCELED);
	if (s->shut_op != NONE)
		tls__op_end(x, &x->ops[s->shut_op], -ECANCELED, 0);
	s->state = S_CLOSING;
	tls__unwait(x, s);
	tls__input_drop(x, s);
	if (s->pl != NONE) {
		tls__plain_put(x, s->pl);
		s->pl = NONE;
	}
	if (!s->abort && s->hs_done && !s->notify_out && !s->fatal && !s->out_err &&
	    tls__out_ensure(x, s, 64) == 0) {
		/* close_notify behind what is queued; the stream's idle deadline
		 * bounds the wait for a peer that does not read */
		tls__unwait(x, s);
		if ((s->cr ? tls__carry_alert(x, s, GNUTLS_AL_WARNING, GNUTLS_A_CLOSE_NOTIFY)
			   : gnutls_bye(s->gs, GNUTLS_SHUT_WR)) == 0) {
			s->notify_out = 1;
			tls__out_flush(x, s, 0);
		}
	}
	tls__unwait(x, s);
	if (s->out_cur != NONE && s->out_len == 0) {
		tls__out_put(x, s->out_cur);
		s->out_cur = NONE;
	}
	if (s->outq_n && !s->abort) {
		s->closing_wait = 1;
		tl_idle_deadline(x->loop, s->h, x->cc.close_linger_ns);
		if (s->reading)
			tl_cancel(x->loop, s->rop);
	} else {
		tls__close_stream(x, s);
	}
	tls__runs(x);
	return 0;
}

int tl_tls_stream(tl_tls_ctx *x, tl_tls_id id, tl_handle *h)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!h)
		return -EINVAL;
	*h = s->h;
	return 0;
}
