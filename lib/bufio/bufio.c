/* lib/bufio/bufio.c: buffered streams on the loop's public API: framed reads over leases, coalesced writes (turnloop/bufio.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turnloop/bufio.h"

/*
 * The reader keeps the stream's unconsumed bytes in two places, in stream
 * order: its buffer (buf[aoff..alen), bytes copied out of leases) and then
 * the leases it was fed (a ring, the oldest one consumed up to soff). A
 * message is looked for where it starts: wholly inside the oldest lease,
 * it is handed out from there; otherwise its bytes are copied into the
 * buffer, lease by lease, until it is whole. The buffer only ever holds the
 * start of the stream's next message (or, after a peek, the bytes asked
 * for), so a byte comes out of its lease at most once, and only when its
 * message spans leases. A reader that waits for more holds no lease.
 */

enum { FRAME_NONE, FRAME_DELIM, FRAME_PREFIX };

#define BUFIO_MAX (1u << 30) /* the largest reader or writer */

static uint32_t held(const tl_rbuf *r)
{
	return r->alen - r->aoff;
}

/* Give the oldest lease back to the loop. */
static void lease_pop(tl_rbuf *r)
{
	tl_lease_release(r->loop, r->q[r->qhead].id);
	r->qbytes -= r->q[r->qhead].len - r->soff;
	r->qhead = (r->qhead + 1) % TL_RBUF_LEASES;
	r->nq--;
	r->soff = 0;
}

/* Take n bytes of the oldest lease as consumed (it goes back once empty). */
static void lease_eat(tl_rbuf *r, uint32_t n)
{
	r->soff += n;
	r->qbytes -= n;
	if (r->soff == r->q[r->qhead].len)
		lease_pop(r);
}

/* At the start of a call that ends the last view: give back the lease it
 * emptied, and reset an empty buffer. */
static void retire(tl_rbuf *r)
{
	if (r->nq && r->soff == r->q[r->qhead].len)
		lease_pop(r);
	if (r->aoff == r->alen) {
		r->aoff = r->alen = 0;
		r->scan = 0;
	}
}

/* r is done: every lease goes back, the bytes held are dropped. */
static int fail(tl_rbuf *r, int err)
{
	while (r->nq)
		lease_pop(r);
	r->aoff = r->alen = r->scan = 0;
	r->err = err;
	return err;
}

/* Move the buffer's bytes to its start, so that a frame can grow to cap. */
static void compact(tl_rbuf *r)
{
	if (r->aoff) {
		memmove(r->buf, r->buf + r->aoff, held(r));
		r->alen -= r->aoff;
		r->aoff = 0;
	}
}

/* Byte i of the frame that starts with the buffer's bytes and goes on with p. */
static uint8_t at(const tl_rbuf *r, const uint8_t *p, uint32_t i)
{
	uint32_t h = held(r);
	return i < h ? r->buf[r->aoff + i] : p[i - h];
}

static int delim_frame(tl_rbuf *r, const uint8_t *p, uint32_t n, uint32_t *take)
{
	uint32_t h = held(r), d = r->fixlen;
	if (r->scan < h) { /* bytes no search has seen (a framing change, a peek) */
		uint32_t lim = h < r->cap ? h : r->cap;
		const uint8_t *e = memmem(r->buf + r->aoff, lim, r->delim, d);
		if (e) {
			*take = 0;
			return (int)(e - (r->buf + r->aoff)) + (int)d;
		}
		if (h >= r->cap)
			return -EMSGSIZE;
		r->scan = h;
	}
	uint32_t lim = n < r->cap - h ? n : r->cap - h;
	/* A delimiter that starts in the buffer and ends in p, ending at e. */
	for (uint32_t e = 1; e < d && e <= lim; e++) {
		if (h + e < d)
			continue;
		uint32_t i = 0, s = h + e - d;
		while (i < d && at(r, p, s + i) == r->delim[i])
			i++;
		if (i == d) {
			*take = e;
			return (int)(h + e);
		}
	}
	const uint8_t *e = lim >= d ? memmem(p, lim, r->delim, d) : NULL;
	if (e) {
		*take = (uint32_t)(e - p) + d;
		return (int)(h + *take);
	}
	if (h + n >= r->cap)
		return -EMSGSIZE;
	*take = n;
	return 0;
}

static int prefix_frame(tl_rbuf *r, const uint8_t *p, uint32_t n, uint32_t *take)
{
	uint32_t h = held(r), w = r->fixlen;
	if (h + n < w) {
		*take = n;
		return 0;
	}
	uint64_t len = 0;
	for (uint32_t i = 0; i < w; i++)
		len = len << 8 | at(r, p, i);
	if (r->flags & TL_RBUF_PREFIX_COUNTED) {
		if (len < w)
			return -EBADMSG;
	} else {
		len += w;
	}
	if (len > r->cap)
		return -EMSGSIZE;
	uint32_t need = len > h ? (uint32_t)len - h : 0;
	*take = need <= n ? need : n;
	return need <= n ? (int)len : 0;
}

/*
 * The frame that starts with the buffer's bytes and goes on with p[0..n):
 * its length when it is whole, with *take the bytes of p it ends with (0
 * when it lies in the buffer); 0 when it is not whole yet (*take = n: all
 * of p belongs to it); or a negative errno.
 */
static int frame(tl_rbuf *r, const uint8_t *p, uint32_t n, uint32_t *take)
{
	return r->kind == FRAME_DELIM ? delim_frame(r, p, n, take) : prefix_frame(r, p, n, take);
}

/* The view of a frame of flen bytes at f: the message without its framing. */
static void view(const tl_rbuf *r, const uint8_t *f, int flen, const uint8_t **msg, uint32_t *len)
{
	*msg = r->kind == FRAME_DELIM ? f : f + r->fixlen;
	*len = (uint32_t)flen - r->fixlen;
}

int tl_rbuf_init(tl_rbuf *r, tl_loop *loop, void *buf, uint32_t max)
{
	if (!r || !loop || max == 0 || max > BUFIO_MAX)
		return -EINVAL;
	memset(r, 0, sizeof *r);
	if (!buf) {
		buf = malloc(max);
		if (!buf)
			return -ENOMEM;
		r->own = 1;
	}
	r->loop = loop;
	r->buf = buf;
	r->cap = max;
	return 0;
}

void tl_rbuf_fini(tl_rbuf *r)
{
	if (!r || !r->loop)
		return;
	while (r->nq)
		lease_pop(r);
	if (r->own)
		free(r->buf);
	memset(r, 0, sizeof *r);
}

int tl_rbuf_set_delim(tl_rbuf *r, const void *delim, uint32_t len)
{
	if (!r || !delim || len == 0 || len > sizeof r->delim)
		return -EINVAL;
	memcpy(r->delim, delim, len);
	r->kind = FRAME_DELIM;
	r->fixlen = (uint8_t)len;
	r->flags = 0;
	r->scan = 0;
	return 0;
}

int tl_rbuf_set_prefix(tl_rbuf *r, uint32_t bytes, uint32_t flags)
{
	if (!r || (bytes != 1 && bytes != 2 && bytes != 4) || (flags & ~TL_RBUF_PREFIX_COUNTED) ||
	    r->cap < bytes)
		return -EINVAL;
	r->kind = FRAME_PREFIX;
	r->fixlen = (uint8_t)bytes;
	r->flags = (uint8_t)flags;
	return 0;
}

int tl_rbuf_feed(tl_rbuf *r, const tl_completion *c)
{
	if (!r || !c || c->kind != TL_K_READ)
		return -EINVAL;
	if (!(c->flags & TL_F_LEASE)) {
		if (c->result > 0)
			return -EINVAL; /* bytes in the host's own buffer: never seen here */
		if (c->flags & TL_F_EOF)
			r->ended = 1;
		return 0;
	}
	if (c->result <= 0 || c->result > c->u.read.lease.cap)
		return -EINVAL;
	if (r->err) {
		tl_lease_release(r->loop, c->u.read.lease.id);
		return 0;
	}
	if (r->nq == TL_RBUF_LEASES)
		return -ENOBUFS;
	uint32_t k = (r->qhead + r->nq++) % TL_RBUF_LEASES;
	r->q[k].data = c->u.read.lease.data;
	r->q[k].id = c->u.read.lease.id;
	r->q[k].len = (uint32_t)c->result;
	r->qbytes += (uint32_t)c->result;
	return 0;
}

/* No more bytes to look at: the end of a message that will not come, or a wait. */
static int starved(tl_rbuf *r)
{
	return r->ended && held(r) ? fail(r, -EPROTO) : 0;
}

int tl_rbuf_next(tl_rbuf *r, const uint8_t **msg, uint32_t *len)
{
	if (!r || !msg || !len || r->kind == FRAME_NONE)
		return -EINVAL;
	if (r->err)
		return r->err;
	retire(r);
	for (;;) {
		const uint8_t *p = NULL;
		uint32_t n = 0, take;
		if (r->nq) {
			p = r->q[r->qhead].data + r->soff;
			n = r->q[r->qhead].len - r->soff;
		}
		int f = frame(r, p, n, &take);
		if (f < 0)
			return fail(r, f);
		if (f > 0 && held(r) == 0) { /* wholly in this lease: no copy */
			view(r, p, f, msg, len);
			r->soff += (uint32_t)f;
			r->qbytes -= (uint32_t)f;
			return 1;
		}
		if (take) {
			compact(r);
			memcpy(r->buf + r->alen, p, take);
			r->alen += take;
			lease_eat(r, take);
		}
		if (f > 0) {
			view(r, r->buf + r->aoff, f, msg, len);
			r->aoff += (uint32_t)f;
			r->scan = 0;
			return 1;
		}
		r->scan = held(r);
		if (!r->nq)
			return starved(r);
	}
}

int tl_rbuf_peek(tl_rbuf *r, uint32_t min, const uint8_t **data)
{
	if (!r || !data)
		return -EINVAL;
	if (r->err)
		return r->err;
	retire(r);
	if (min == 0)
		min = 1;
	if (min > r->cap)
		return fail(r, -EMSGSIZE);
	uint32_t h = held(r);
	if (h == 0 && r->nq && r->q[r->qhead].len - r->soff >= min) {
		*data = r->q[r->qhead].data + r->soff;
		return (int)(r->q[r->qhead].len - r->soff);
	}
	if (h < min) {
		/* Copy what makes min, or everything when that is not here yet:
		 * a reader that waits holds no lease. */
		uint32_t goal = h + r->qbytes < min ? h + r->qbytes : min;
		compact(r);
		while (r->alen < goal) {
			uint32_t n = r->q[r->qhead].len - r->soff;
			if (n > goal - r->alen)
				n = goal - r->alen;
			memcpy(r->buf + r->alen, r->q[r->qhead].data + r->soff, n);
			r->alen += n;
			lease_eat(r, n);
		}
		r->scan = 0;
		if (r->alen < min)
			return starved(r);
	}
	*data = r->buf + r->aoff;
	return (int)held(r);
}

int tl_rbuf_consume(tl_rbuf *r, uint32_t n)
{
	if (!r)
		return -EINVAL;
	uint32_t h = held(r);
	if (h) {
		if (n > h)
			return -EINVAL;
		r->aoff += n;
		r->scan = 0;
		retire(r);
		return 0;
	}
	if (!r->nq)
		return n ? -EINVAL : 0;
	if (n > r->q[r->qhead].len - r->soff)
		return -EINVAL;
	if (n)
		lease_eat(r, n);
	return 0;
}

uint32_t tl_rbuf_buffered(const tl_rbuf *r)
{
	return r ? held(r) + r->qbytes : 0;
}

uint32_t tl_rbuf_leases(const tl_rbuf *r)
{
	return r ? r->nq : 0;
}

/*
 * The writer is a ring of two regions (a bip buffer): A, buf[a0..a1), and
 * once A reached the end and the front is free, B, buf[0..b1), which grows
 * toward a0. Bytes go out A first, then B. One write is in flight at most:
 * it takes everything there is (all of A and of B), so its bytes are a
 * prefix of the ring, and when it completes A becomes what was appended
 * after it. Every run a reservation gets is contiguous.
 */

static int broken(tl_wbuf *w)
{
	if (w->told)
		return -EPIPE;
	w->told = 1;
	return w->err;
}

static void off_list(tl_wbuf *w)
{
	if (!w->pprev)
		return;
	*w->pprev = w->next;
	if (w->next)
		w->next->pprev = w->pprev;
	w->next = NULL;
	w->pprev = NULL;
}

/* w has bytes to send and can send them: on its list for the next flush_all. */
static void dirty(tl_wbuf *w)
{
	if (!w->list || w->pprev || w->flight || w->err)
		return;
	w->next = w->list->first;
	if (w->next)
		w->next->pprev = &w->next;
	w->list->first = w;
	w->pprev = &w->list->first;
}

static uint32_t used(const tl_wbuf *w)
{
	return w->a1 - w->a0 + (w->wrapped ? w->b1 : 0);
}

/* A empty: B (if any) becomes A, or the ring starts over at 0. */
static void settle(tl_wbuf *w)
{
	if (w->a0 != w->a1)
		return;
	w->a0 = 0;
	w->a1 = w->wrapped ? w->b1 : 0;
	w->b1 = 0;
	w->wrapped = 0;
}

/* The run the next bytes go to, of at least min when there is one: after
 * A, or B's (starting B when A's tail is short and the front is not). */
static uint32_t run(tl_wbuf *w, uint32_t min, uint8_t **p)
{
	settle(w);
	if (!w->wrapped && (w->cap - w->a1 >= min || w->a0 < min)) {
		*p = w->buf + w->a1;
		return w->cap - w->a1;
	}
	if (!w->wrapped) {
		w->wrapped = 1;
		w->b1 = 0;
	}
	*p = w->buf + w->b1;
	return w->a0 - w->b1;
}

int tl_wbuf_init(tl_wbuf *w, tl_loop *loop, tl_handle h, void *buf, uint32_t cap,
		 uint64_t token)
{
	if (!w || !loop || tl_handle_eq(h, TL_HANDLE_NONE) || cap == 0 || cap > BUFIO_MAX)
		return -EINVAL;
	memset(w, 0, sizeof *w);
	if (!buf) {
		buf = malloc(cap);
		if (!buf)
			return -ENOMEM;
		w->own = 1;
	}
	w->loop = loop;
	w->h = h;
	w->buf = buf;
	w->cap = cap;
	w->token = token;
	return 0;
}

int tl_wbuf_fini(tl_wbuf *w)
{
	if (!w || !w->loop)
		return 0;
	if (w->flight)
		return -EBUSY;
	off_list(w);
	if (w->own)
		free(w->buf);
	memset(w, 0, sizeof *w);
	return 0;
}

int tl_wbuf_set_list(tl_wbuf *w, tl_wbuf_list *l)
{
	if (!w)
		return -EINVAL;
	off_list(w);
	w->list = l;
	if (used(w))
		dirty(w);
	return 0;
}

uint32_t tl_wbuf_room(const tl_wbuf *w)
{
	if (!w || w->err)
		return 0;
	return w->wrapped ? w->a0 - w->b1 : w->cap - w->a1 + w->a0;
}

uint32_t tl_wbuf_pending(const tl_wbuf *w)
{
	return w ? used(w) : 0;
}

int tl_wbuf_append(tl_wbuf *w, const void *data, uint32_t len)
{
	if (!w || (!data && len))
		return -EINVAL;
	if (w->err)
		return broken(w);
	w->resv = 0;
	settle(w);
	if (len > tl_wbuf_room(w))
		return -ENOBUFS;
	if (!len)
		return 0;
	const uint8_t *d = data;
	if (!w->wrapped) {
		uint32_t k = w->cap - w->a1 < len ? w->cap - w->a1 : len;
		memcpy(w->buf + w->a1, d, k);
		w->a1 += k;
		d += k;
		len -= k;
		if (len) {
			w->wrapped = 1;
			w->b1 = 0;
		}
	}
	if (len) { /* into B: all of it once B has begun, or what A could not take */
		memcpy(w->buf + w->b1, d, len);
		w->b1 += len;
	}
	dirty(w);
	return 0;
}

int tl_wbuf_reserve(tl_wbuf *w, uint32_t min, uint8_t **out)
{
	if (!w || !out)
		return -EINVAL;
	if (w->err)
		return broken(w);
	uint32_t n = run(w, min, out);
	if (n < min) {
		w->resv = 0;
		return -ENOBUFS;
	}
	w->resv = n;
	return (int)n;
}

int tl_wbuf_commit(tl_wbuf *w, uint32_t len)
{
	if (!w || len > w->resv)
		return -EINVAL;
	w->resv = 0;
	if (w->wrapped)
		w->b1 += len;
	else
		w->a1 += len;
	if (len)
		dirty(w);
	return 0;
}

int tl_wbuf_printf(tl_wbuf *w, const char *fmt, ...)
{
	if (!w || !fmt)
		return -EINVAL;
	if (w->err)
		return broken(w);
	uint8_t *p;
	uint32_t n = run(w, 1, &p);
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf((char *)p, n, fmt, ap);
	va_end(ap);
	if (len < 0)
		return -EINVAL;
	if ((uint32_t)len >= n) { /* did not fit in this run: find one that fits */
		if ((uint32_t)len >= w->cap || run(w, (uint32_t)len + 1, &p) < (uint32_t)len + 1)
			return -ENOBUFS;
		va_start(ap, fmt);
		vsnprintf((char *)p, (size_t)len + 1, fmt, ap);
		va_end(ap);
	}
	w->resv = (uint32_t)len;
	tl_wbuf_commit(w, (uint32_t)len);
	return len;
}

/* One write of everything appended: 1, 0 (nothing to do), or the refusal. */
static int flush_one(tl_wbuf *w)
{
	if (w->err)
		return w->err;
	if (w->flight)
		return 0;
	struct iovec iov[2];
	int n = 0;
	uint32_t total = used(w);
	if (w->a1 > w->a0)
		iov[n++] = (struct iovec){w->buf + w->a0, w->a1 - w->a0};
	if (w->wrapped && w->b1)
		iov[n++] = (struct iovec){w->buf, w->b1};
	if (!n)
		return 0;
	int rc = n == 1 ? tl_write(w->loop, w->h, iov[0].iov_base, total, w->token, &w->op)
			: tl_writev(w->loop, w->h, iov, n, w->token, &w->op);
	if (rc == -ENOBUFS)
		return rc;
	if (rc < 0) {
		w->err = rc;
		w->a0 = w->a1 = w->b1 = w->wrapped = 0;
		return rc;
	}
	w->flight = total;
	w->flight_b = w->wrapped ? w->b1 : 0;
	return 1;
}

int tl_wbuf_flush(tl_wbuf *w)
{
	if (!w)
		return -EINVAL;
	off_list(w);
	int rc = flush_one(w);
	if (rc == -ENOBUFS)
		dirty(w);
	return rc < 0 && rc != -ENOBUFS ? broken(w) : rc;
}

int tl_wbuf_flush_all(tl_wbuf_list *l)
{
	if (!l)
		return -EINVAL;
	tl_wbuf *w = l->first;
	int writes = 0;
	l->first = NULL; /* refused ones come back on a fresh list */
	while (w) {
		tl_wbuf *next = w->next;
		w->next = NULL;
		w->pprev = NULL;
		int rc = flush_one(w);
		if (rc > 0)
			writes++;
		else if (rc == -ENOBUFS)
			dirty(w);
		w = next;
	}
	return writes;
}

int tl_wbuf_on_write(tl_wbuf *w, const tl_completion *c)
{
	if (!w || !c || c->kind != TL_K_WRITE || !(c->flags & TL_F_TERMINAL) || !w->flight ||
	    !tl_op_eq(c->op, w->op))
		return -EINVAL;
	if (c->result < 0) {
		w->flight = 0;
		off_list(w);
		w->a0 = w->a1 = w->b1 = w->wrapped = 0;
		if (!w->err)
			w->err = (int)c->result;
		return broken(w);
	}
	if (w->flight_b) { /* it took all of A and B's start: A is the rest of B */
		w->a0 = w->flight_b;
		w->a1 = w->b1;
		w->b1 = 0;
		w->wrapped = 0;
	} else {
		w->a0 += w->flight;
	}
	w->flight = w->flight_b = 0;
	settle(w);
	if (used(w))
		dirty(w);
	return (int)tl_wbuf_room(w);
}
