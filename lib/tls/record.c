/* lib/tls/record.c: record I/O: the library's transport callbacks over the session's leases and ciphertext buffers, the read pump (whole records in, plaintext leases out) and the write pump (host writes in, ciphertext buffers out). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tls_int.h"

/*
 * In: the stream's leases queue up in s->lq as they come, framed
 * (frame.h) so that s->whole counts the bytes at the front that form whole
 * records. The library's pull callback serves bytes only from whole
 * records and only one record per library call (s->in_budget): a call
 * never reads ahead, so a call that must stop (no plaintext buffer, the
 * host's quota) never holds bytes the layer cannot account for. A lease
 * goes back to the loop as soon as the library has taken its last byte.
 *
 * Out: the library's push callback appends records to the ciphertext
 * buffer being filled (s->out_cur, from the ctx's pool); a buffer is
 * written to the stream (tl_write, in order with the session's other
 * writes) at the end of each pump, or when the next record would not fit.
 * A host write ends when the write of the buffer holding its last record
 * has completed (its sequence number, last_seq). Before the library is
 * asked to encrypt n bytes, the buffer has room for them and the record's
 * overhead, so push never fails for host data; only a handshake flight
 * larger than the room, with the pool empty, makes push answer EAGAIN,
 * which the library keeps and retries.
 */

/* ---- in ---- */

static void lq_pop(struct tl_tls_ctx *x, struct tls_sess *s)
{
	struct tls_lent *e = &x->lents[s->lq_head];
	uint32_t idx = s->lq_head;
	if (e->id & TLS_SPILL_BIT) {
		tls__spill_put(x, e->id & ~TLS_SPILL_BIT);
	} else {
		tl_lease_release(x->loop, e->id);
		s->lq_leases--;
	}
	s->lq_head = e->next;
	if (s->lq_head == NONE)
		s->lq_tail = NONE;
	s->lq_n--;
	e->next = x->lent_free;
	x->lent_free = idx;
}

/* Copy n bytes from the front of the queue into p (NULL: drop them), and
 * give back the leases emptied. */
void tls__lq_take(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *p, uint32_t n)
{
	while (n) {
		struct tls_lent *e = &x->lents[s->lq_head];
		uint32_t c = e->len - e->off < n ? e->len - e->off : n;
		if (p) {
			memcpy(p, e->data + e->off, c);
			p += c;
		}
		e->off += c;
		n -= c;
		if (e->off == e->len)
			lq_pop(x, s);
	}
}

/* Copy the first n bytes of the queue without taking them. */
void tls__lq_peek(const struct tl_tls_ctx *x, const struct tls_sess *s, uint8_t *p, uint32_t n)
{
	for (uint32_t i = s->lq_head; n && i != NONE; i = x->lents[i].next) {
		const struct tls_lent *e = &x->lents[i];
		uint32_t c = e->len - e->off < n ? e->len - e->off : n;
		memcpy(p, e->data + e->off, c);
		p += c;
		n -= c;
	}
}

int tls__input(struct tl_tls_ctx *x, struct tls_sess *s, const tl_lease *l, uint32_t n)
{
	if (x->lent_free == NONE)
		return -ENOBUFS; /* more leases than loop_leases said the loop has */
	uint32_t idx = x->lent_free;
	struct tls_lent *e = &x->lents[idx];
	x->lent_free = e->next;
	e->data = l->data;
	e->id = l->id;
	e->len = n;
	e->off = 0;
	e->next = NONE;
	if (s->lq_tail == NONE)
		s->lq_head = idx;
	else
		x->lents[s->lq_tail].next = idx;
	s->lq_tail = idx;
	s->lq_n++;
	s->lq_leases++;
	s->whole += tls_frame_feed(&s->fr, l->data, n);
	if (s->fr.error)
		s->frame_bad = 1; /* failed once the whole records before it are read */
	if (s->lq_leases >= TLS_LQ_CAP && s->whole == 0)
		tls__compact(x, s);
	return 0;
}

void tls__compact(struct tl_tls_ctx *x, struct tls_sess *s)
{
	/* No whole record is queued, so the library holds no part of one
	 * (window 0) and every queued byte belongs to the record under way:
	 * at most TLS_REC_HDR + TLS_REC_BODY_MAX, what a spill buffer holds. */
	struct tls_lent *h = &x->lents[s->lq_head];
	uint32_t node, used = 0;
	uint8_t *buf;

	if (s->whole || s->window || !s->lq_n || s->wait_spill)
		return;
	if (h->id & TLS_SPILL_BIT) {
		node = s->lq_head;
		buf = h->data;
		used = h->len - h->off;
		memmove(buf, buf + h->off, used);
		s->lq_head = h->next;
	} else {
		uint32_t sp = tls__spill_get(x, s);
		if (sp == NONE)
			return; /* runs again when one comes back */
		x->st.spills++;
		node = x->lent_free; /* there is one: a spill buffer's */
		x->lent_free = x->lents[node].next;
		s->lq_n++;
		buf = tls_spill(x, sp);
		x->lents[node].id = TLS_SPILL_BIT | sp;
		x->lents[node].data = buf;
	}
	while (s->lq_head != NONE) {
		struct tls_lent *e = &x->lents[s->lq_head];
		uint32_t n = e->len - e->off;
		if (used + n > TLS_SPILL_SIZE)
			abort(); /* cannot happen: see above */
		memcpy(buf + used, e->data + e->off, n);
		used += n;
		lq_pop(x, s);
	}
	x->lents[node].len = used;
	x->lents[node].off = 0;
	x->lents[node].next = NONE;
	s->lq_head = s->lq_tail = node;
	s->lq_n = 1;
}

void tls__input_drop(struct tl_tls_ctx *x, struct tls_sess *s)
{
	while (s->lq_n)
		lq_pop(x, s);
	s->whole = s->window = 0;
}

static ssize_t pull(gnutls_transport_ptr_t ptr, void *buf, size_t n)
{
	struct tls_sess *s = ptr;

	if (s->window == 0) {
		uint8_t h[TLS_REC_HDR];
		if (s->in_budget == 0 || s->whole < TLS_REC_HDR) {
			gnutls_transport_set_errno(s->gs, EAGAIN);
			return -1;
		}
		tls__lq_peek(s->x, s, h, TLS_REC_HDR);
		s->window = tls_frame_size(h);
		s->in_budget--;
	}
	uint32_t c = s->window < n ? s->window : (uint32_t)n;
	tls__lq_take(s->x, s, buf, c);
	s->window -= c;
	s->whole -= c;
	return (ssize_t)c;
}

static int pull_timeout(gnutls_transport_ptr_t ptr, unsigned ms)
{
	struct tls_sess *s = ptr;

	(void)ms;
	return s->window || (s->in_budget && s->whole) ? 1 : 0;
}

/* ---- out ---- */

int tls__out_ensure(struct tl_tls_ctx *x, struct tls_sess *s, uint32_t need)
{
	if (s->out_cur != NONE && TLS_OUT_SIZE - s->out_len >= need)
		return 0;
	if (s->out_cur != NONE && s->out_len) {
		if (s->outq_n == TLS_OUTQ)
			return -1; /* runs again when one of its writes completes */
		tls__out_flush(x, s, s->cur_app);
	}
	if (s->out_cur == NONE) {
		if (s->outq_n == TLS_OUTQ)
			return -1;
		s->out_cur = tls__out_get(x, s);
		if (s->out_cur == NONE)
			return -1; /* on the ctx's waiting list */
		s->out_len = 0;
		s->cur_app = 0;
	}
	return 0;
}

void tls__out_flush(struct tl_tls_ctx *x, struct tls_sess *s, int app)
{
	if (s->out_cur == NONE || s->out_len == 0)
		return;
	uint32_t idx = s->out_cur;
	tl_op op;
	int r = tl_write(x->loop, s->h, tls_out(x, idx), s->out_len,
			 tls_tok(x, TK_WRITE, tls_sess_slot(x, s), idx), &op);
	s->out_cur = NONE;
	s->out_len = 0;
	s->cur_app = 0;
	if (r < 0) {
		tls__out_put(x, idx);
		if (!s->out_err)
			s->out_err = r;
		tls__writes_fail(x, s, r);
		return;
	}
	uint32_t at = (s->outq_first + s->outq_n) % TLS_OUTQ;
	s->outq[at] = idx;
	s->outq_app[at] = (uint8_t)(app != 0);
	s->outq_n++;
	s->out_app += app != 0;
	s->seq_sub++;
}

static ssize_t push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int iovcnt)
{
	struct tls_sess *s = ptr;
	struct tl_tls_ctx *x = s->x;
	ssize_t done = 0;

	for (int i = 0; i < iovcnt; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t n = iov[i].iov_len;
		while (n) {
			if (s->out_cur == NONE || s->out_len == TLS_OUT_SIZE) {
				if (tls__out_ensure(x, s, 1) < 0) {
					s->out_starved = 1;
					if (done)
						return done;
					gnutls_transport_set_errno(s->gs, EAGAIN);
					return -1;
				}
			}
			size_t c = TLS_OUT_SIZE - s->out_len < n ? TLS_OUT_SIZE - s->out_len : n;
			memcpy(tls_out(x, s->out_cur) + s->out_len, p, c);
			s->out_len += (uint32_t)c;
			p += c;
			n -= c;
			done += (ssize_t)c;
		}
	}
	return done;
}

void tls__transport(struct tls_sess *s)
{
	gnutls_transport_set_ptr(s->gs, s);
	gnutls_transport_set_pull_function(s->gs, pull);
	gnutls_transport_set_pull_timeout_function(s->gs, pull_timeout);
	gnutls_transport_set_vec_push_function(s->gs, push);
}

/* End the host writes whose records were all written (seq_done). */
static void writes_done(struct tl_tls_ctx *x, struct tls_sess *s)
{
	while (s->aw_head != NONE) {
		struct tls_op *o = &x->ops[s->aw_head];
		if (o->last_seq > s->seq_done)
			break;
		s->aw_head = o->next;
		if (s->aw_head == NONE)
			s->aw_tail = NONE;
		o->flags &= (uint8_t)~OPF_QUEUED;
		tls__op_end(x, o, o->total, 0);
	}
}

void tls__out_done(struct tl_tls_ctx *x, struct tls_sess *s, uint32_t idx, int64_t result)
{
	/* The loop writes a stream's buffers in order and completes them in
	 * order: this is the front one. */
	if (!s->outq_n || s->outq[s->outq_first] != idx)
		return; /* cannot happen */
	s->out_app -= s->outq_app[s->outq_first];
	s->outq_first = (uint8_t)((s->outq_first + 1) % TLS_OUTQ);
	s->outq_n--;
	s->seq_done++;
	tls__out_put(x, idx);
	if (result < 0 && !s->out_err) {
		s->out_err = (int)result;
		tls__writes_fail(x, s, (int)result);
	}
	writes_done(x, s);
	if (s->state == S_CLOSING && s->closing_wait && s->outq_n == 0)
		tls__close_stream(x, s);
}

void tls__writes_fail(struct tl_tls_ctx *x, struct tls_sess *s, int err)
{
	uint32_t *heads[2] = {&s->aw_head, &s->wq_head};

	for (int k = 0; k < 2; k++) {
		while (*heads[k] != NONE) {
			struct tls_op *o = &x->ops[*heads[k]];
			*heads[k] = o->next;
			o->flags &= (uint8_t)~OPF_QUEUED;
			tls__op_end(x, o, err, 0);
		}
	}
	s->aw_tail = s->wq_tail = NONE;
}

/* ---- the read pump ---- */

void tls__read_pump(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (s->rd_op == NONE || s->fatal || s->notify_in)
		return;
	for (;;) {
		if (s->pl_held >= x->cc.session_leases)
			break; /* runs again when the host gives one back */
		if (s->pl == NONE) {
			if ((s->pl = tls__plain_get(x, s)) == NONE)
				break;
			s->pl_len = 0;
		}
		uint32_t room = x->cc.plain_buffer_size - s->pl_len;
		if (room == 0) {
			tls__deliver(x, s);
			continue;
		}
		if (!tls__plain_pending(s) && s->whole == 0)
			break;
		/* room for what reading may make the library send: a KeyUpdate
		 * in answer, an alert */
		if (tls__out_ensure(x, s, 256) < 0)
			break;
		uint32_t whole0 = s->whole;
		s->in_budget = 1;
		ssize_t r = s->cr ? tls__carry_recv(x, s, tls_plain(x, s->pl) + s->pl_len, room, x->scratch)
				  : gnutls_record_recv(s->gs, tls_plain(x, s->pl) + s->pl_len, room);
		s->in_budget = 0;
		if (r > 0) {
			s->pl_len += (uint32_t)r;
			s->bytes_in += (uint64_t)r;
			continue;
		}
		if (r == 0) {
			s->notify_in = 1; /* the peer's close_notify */
			break;
		}
		if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
			if (s->whole < whole0)
				continue; /* a record that carried no data: a ticket, a KeyUpdate */
			break;
		}
		if (r == GNUTLS_E_REHANDSHAKE) {
			/* No renegotiation: refused the way RFC 5746 allows. */
			gnutls_alert_send(s->gs, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION); /* (the library's only) */
			s->alert_out = GNUTLS_A_NO_RENEGOTIATION;
			continue;
		}
		if (r == GNUTLS_E_WARNING_ALERT_RECEIVED) {
			s->alert_in = gnutls_alert_get(s->gs); /* (the library's only) */
			continue;
		}
		tls__deliver(x, s);
		tls__library_failed(x, s, (int)r);
		return;
	}
	tls__deliver(x, s);
	tls__out_flush(x, s, 0);
}

/* ---- the write pump ---- */

/* An imported session's record of up to max bytes of o's data. */
static ssize_t carry_record(struct tls_sess *s, struct tls_op *o, uint32_t max)
{
	struct iovec v[TL_IOV_MAX];
	uint32_t total = 0;
	int nv = 0;

	while (total < max && o->cur < o->niov) {
		struct iovec *w = &o->iov[o->cur];
		uint32_t left = (uint32_t)w->iov_len - o->off;
		uint32_t n = left < max - total ? left : max - total;
		if (n) {
			v[nv].iov_base = (uint8_t *)w->iov_base + o->off;
			v[nv++].iov_len = n;
			o->off += n;
			total += n;
		}
		if (o->off < w->iov_len || o->cur + 1 == o->niov)
			break;
		o->cur++;
		o->off = 0;
	}
	int r = tls__carry_send(s->x, s, v, nv, total);
	if (r < 0)
		return r;
	o->done += total;
	return (ssize_t)total;
}

/* Take up to max bytes of o's data from its cursor into one record (the
 * library sends them as one, corked when they span segments). Returns the
 * bytes taken, or a library error. */
static ssize_t send_record(struct tls_sess *s, struct tls_op *o, uint32_t max)
{
	struct iovec *v = &o->iov[o->cur];
	uint32_t left = (uint32_t)v->iov_len - o->off;

	if (s->cr)
		return carry_record(s, o, max);
	if (left >= max || o->cur + 1 == o->niov) {
		uint32_t n = left < max ? left : max;
		ssize_t r = gnutls_record_send(s->gs, (const uint8_t *)v->iov_base + o->off, n);
		if (r > 0) {
			o->off += (uint32_t)r;
			o->done += (uint32_t)r;
			if (o->off == v->iov_len && o->cur + 1 < o->niov) {
				o->cur++;
				o->off = 0;
			}
		}
		return r;
	}
	/* Several segments into one record: the library copies them while
	 * corked and seals them as one when uncorked. */
	uint32_t total = 0;
	gnutls_record_cork(s->gs);
	while (total < max && o->cur < o->niov) {
		v = &o->iov[o->cur];
		left = (uint32_t)v->iov_len - o->off;
		uint32_t n = left < max - total ? left : max - total;
		if (n) {
			ssize_t r = gnutls_record_send(s->gs, (const uint8_t *)v->iov_base + o->off, n);
			if (r < 0) {
				gnutls_record_uncork(s->gs, 0);
				return r;
			}
			o->off += (uint32_t)r;
			total += (uint32_t)r;
		}
		if (o->off == v->iov_len) {
			if (o->cur + 1 == o->niov)
				break;
			o->cur++;
			o->off = 0;
		}
	}
	int u = gnutls_record_uncork(s->gs, 0);
	if (u < 0)
		return u;
	o->done += total;
	return (ssize_t)total;
}

void tls__write_pump(struct tl_tls_ctx *x, struct tls_sess *s)
{
	if (!s->hs_done)
		return;
	if (s->fatal || s->out_err) {
		tls__writes_fail(x, s, s->fatal ? s->err : s->out_err);
		return;
	}
	while (s->wq_head != NONE) {
		struct tls_op *o = &x->ops[s->wq_head];
		if (o->type == OP_SHUT || o->type == OP_KEYUPDATE) {
			int ku = o->type == OP_KEYUPDATE;
			if (tls__out_ensure(x, s, 256) < 0)
				break;
			int g = s->cr ? (!ku ? tls__carry_alert(x, s, GNUTLS_AL_WARNING, GNUTLS_A_CLOSE_NOTIFY)
					     : tls__carry_key_update(x, s, o->request))
				      : !ku ? gnutls_bye(s->gs, GNUTLS_SHUT_WR)
					    : gnutls_session_key_update(s->gs, o->request ? GNUTLS_KU_PEER : 0);
			s->wq_head = o->next;
			if (s->wq_head == NONE)
				s->wq_tail = NONE;
			o->flags &= (uint8_t)~OPF_QUEUED;
			tls__out_flush(x, s, 0);
			if (ku)
				tls__op_end(x, o, 0, 0); /* the layer's own: freed */
			if (g < 0) {
				tls__library_failed(x, s, g); /* ends the shutdown too */
				return;
			}
			if (ku)
				continue;
			s->notify_out = 1;
			tl_op sop;
			int r = tl_shutdown(x->loop, s->h, tls_tok(x, TK_SHUT, tls_sess_slot(x, s), s->gen), &sop);
			if (r < 0)
				tls__op_end(x, o, r, 0);
			continue;
		}
		if (s->out_app >= x->cc.session_out)
			break; /* runs again when one of its writes completes */
		uint32_t left = o->total - o->done;
		uint32_t max = left < 16384 ? left : 16384;
		if (tls__out_ensure(x, s, max + TLS_REC_OVERHEAD) < 0)
			break;
		ssize_t r = send_record(s, o, max);
		if (r < 0) {
			tls__library_failed(x, s, (int)r);
			return;
		}
		s->cur_app = 1;
		s->bytes_out += (uint64_t)r;
		if (o->cur + 1 == o->niov && o->off == o->iov[o->cur].iov_len) {
			/* all of it is in the buffer being filled, which will be
			 * written next, as number seq_sub + 1 */
			s->wq_head = o->next;
			if (s->wq_head == NONE)
				s->wq_tail = NONE;
			o->last_seq = s->seq_sub + 1;
			o->next = NONE;
			if (s->aw_tail == NONE)
				s->aw_head = tls_op_slot(x, o);
			else
				x->ops[s->aw_tail].next = tls_op_slot(x, o);
			s->aw_tail = tls_op_slot(x, o);
		}
	}
	tls__out_flush(x, s, s->cur_app);
}
