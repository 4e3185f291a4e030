/* drivers/sim/ops.c: running operations on simulated sockets, in submission order per direction. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "sim_int.h"

/* ---- op queues ---- */



void tl__sim_q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	SO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		SO(tl__drv_op(l, *tail))->qnext = o->idx;
	*tail = o->idx;
}

int tl__sim_q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = *head; i != TL_NIL; prev = i, i = SO(tl__drv_op(l, i))->qnext) {
		if (i != o->idx)
			continue;
		uint32_t next = SO(o)->qnext;
		if (prev == TL_NIL)
			*head = next;
		else
			SO(tl__drv_op(l, prev))->qnext = next;
		if (*tail == i)
			*tail = prev;
		return 1;
	}
	return 0;
}

int tl__sim_q_has(tl_loop *l, uint32_t head, const struct tl_opslot *o)
{
	for (uint32_t i = head; i != TL_NIL; i = SO(tl__drv_op(l, i))->qnext)
		if (i == o->idx)
			return 1;
	return 0;
}

/* ---- running operations (1: the op reported its terminal event) ---- */

static void lease_wait(struct tl_drv *d, struct sim_sock *s)
{
	if (!s->lease_wait) {
		s->lease_wait = 1;
		d->lwait[d->nlwait++] = s->idx;
	}
}

/* The buffer of a read: the caller's or a pooled lease (0: none free). */
static int read_buf(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o, uint8_t *ubuf,
		    uint32_t ulen, uint8_t **buf, uint32_t *len, uint32_t *lease)
{
	*lease = TL_NO_LEASE;
	if (!(o->flags & TL_OPF_POOLED)) {
		*buf = ubuf;
		*len = ulen;
		return 1;
	}
	const struct tl_hslot *h = tl__drv_handle(d->loop, o->hidx);
	uint32_t id = TL_NO_LEASE, size, count;
	if (h->type != TL_H_STREAM || tl__drv_lease_may(tl__drv_lease_pool(d->loop), h))
		id = tl__drv_lease_take(d->loop);
	if (id == TL_NO_LEASE) {
		/* Never an error (none free, or none this stream may take now,
		 * lib/caps.c): wait until one comes back. */
		lease_wait(d, s);
		return 0;
	}
	*buf = tl__drv_lease_base(d->loop, &size, &count) + (size_t)id * size;
	*len = size;
	*lease = id;
	return 1;
}

static int run_accept(struct tl_drv *d, struct sim_sock *L, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	for (;;) {
		if (!L->acc_head)
			return 0;
		if (multi && !tl__drv_room(d->loop)) {
			tl__sim_sched_at(d, L, now_ns());
			return 0;
		}
		int e = tl__sim_draw(d, TL_SIM_ACCEPT_EMFILE)   ? EMFILE
			: tl__sim_draw(d, TL_SIM_ACCEPT_ENOMEM)  ? ENOMEM
			: tl__sim_draw(d, TL_SIM_ACCEPT_ENOBUFS) ? ENOBUFS
							 : 0;
		if (e) {
			/* The connection stays queued; a multishot accept tries
			 * again a little later rather than in a busy loop. */
			tl__sim_report(d, o, -e, multi ? 0 : TL_F_TERMINAL, TL_NO_LEASE);
			if (!multi)
				return 1;
			tl__sim_sched(d, L);
			return 0;
		}
		struct sim_sock *sv = L->acc_head;
		tl__sim_list_unlink(&L->acc_head, &L->acc_tail, sv);
		L->acc_n--;
		L->d->nqueued--;
		sv->in_accq = 0;
		sv->listener = NULL;
		tl__sim_promote(d, L);
		tl_addr peer = sv->remote;
		tl__sim_hash_u64(d, now_ns());
		tl__sim_hash_u64(d, ((uint64_t)TL_OP_ACCEPT << 48) | ((uint64_t)o->gen << 32) | o->idx);
		tl__sim_hash_u64(d, ((uint64_t)sv->idx << 16) | tl__sim_port_of(&peer));
		d->st.events++;
		if (tl__drv_accept(d->loop, o, (int)sv->idx, &peer, !multi) < 0)
			tl__sim_close_sock(d, sv); /* no handle: the peer sees EOF */
		if (!multi || !(o->flags & TL_OPF_LIVE))
			return 1;
		if (o->flags & TL_OPF_CANCEL)
			return 0;
	}
}

static int run_read(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	const struct tl_hslot *h = tl__drv_handle(d->loop, o->hidx);
	for (;;) {
		/* Over a cap (lib/caps.c): wait for sim_pause(0). */
		if (h->flags & TL_HF_PAUSED)
			return 0;
		if (!s->len) {
			if (s->err) {
				int e = s->err;
				s->err = 0;
				tl__sim_report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
				return 1;
			}
			if (s->rd_eof) {
				tl__sim_report(d, o, 0, TL_F_TERMINAL | TL_F_EOF, TL_NO_LEASE);
				return 1;
			}
			if (s->cs == CS_FAILED || s->cs == CS_NEW) {
				tl__sim_report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
				return 1;
			}
			return 0;
		}
		/* A multishot read's data is a nonterminal event, and so is a
		 * cancelled read's (contract 2.5): both wait for room. */
		if ((multi || (o->flags & TL_OPF_CANCEL)) && !tl__drv_room(d->loop)) {
			tl__sim_sched_at(d, s, now_ns());
			return 0;
		}
		uint8_t *buf;
		uint32_t len, lease;
		if (!read_buf(d, s, o, o->u.rw.buf, o->u.rw.len, &buf, &len, &lease))
			return 0;
		uint32_t n = s->len < len ? s->len : len;
		if (s->segn > 1 && tl__sim_draw(d, TL_SIM_SHORT_IO)) {
			uint32_t m = tl__sim_seg_prefix(s, 1 + tl__sim_below(d, s->segn - 1u));
			if (m < n)
				n = m;
		}
		tl__sim_ring_get(s, buf, n);
		tl__sim_seg_take(s, n);
		/* Room freed: a writer on the other side may go on. */
		if (s->peer && s->peer->whead != TL_NIL)
			tl__sim_sched(d, s->peer);
		tl__sim_report(d, o, n, multi ? 0 : TL_F_TERMINAL, lease);
		if (!multi)
			return 1;
	}
}

/* Datagrams: one per event; a multishot receive (tl_udp_recv_start) goes
 * on while the turn has room and the handle's lease cap leaves some
 * (tl__drv_dgram_room), one lease at a time, as the kernel drivers. */
static int run_recv(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	const struct tl_hslot *hs = tl__drv_handle(d->loop, o->hidx);
	for (;;) {
		if (!s->ndgram)
			return 0;
		if ((multi || (o->flags & TL_OPF_CANCEL)) && !tl__drv_room(d->loop)) {
			tl__sim_sched_at(d, s, now_ns());
			return 0;
		}
		if ((o->flags & TL_OPF_POOLED) && !tl__drv_dgram_room(hs, 1))
			return 0; /* at its cap: sim_pause(0) runs it again */
		uint8_t *buf;
		uint32_t len, lease;
		if (!read_buf(d, s, o, o->u.dg.buf, o->u.dg.len, &buf, &len, &lease))
			return 0;
		struct dg_hdr h;
		tl__sim_ring_get(s, &h, sizeof h);
		uint32_t n = h.len < len ? h.len : len; /* the rest is cut, as with UDP */
		tl__sim_ring_get(s, buf, n);
		tl__sim_ring_get(s, NULL, h.len - n);
		s->ndgram--;
		o->u.dg.addr = h.from;
		o->u.dg.full = h.len;
		o->u.dg.seg = 0;
		memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
		if (hs->flags & TL_HF_PKTINFO) {
			o->u.dg.local = h.to;
			tl__sim_set_port(&o->u.dg.local, 0);
		}
		if (!n && lease != TL_NO_LEASE) {
			tl__drv_lease_drop(d->loop, lease);
			lease = TL_NO_LEASE;
		}
		tl__sim_report(d, o, n, multi ? 0 : TL_F_TERMINAL, lease);
		if (!multi || !(o->flags & TL_OPF_LIVE))
			return 1;
	}
}

/* Copy n bytes of a write's remaining iovecs into p's ring; the iovecs are
 * the core's copies, advanced in place. */
static void gather(struct tl_opslot *o, struct sim_sock *p, uint32_t n)
{
	uint32_t done = 0;
	while (done < n && o->u.wv.cur < o->u.wv.n) {
		tl_iovec *v = &o->u.wv.iov[o->u.wv.cur];
		uint32_t k = v->iov_len < n - done ? (uint32_t)v->iov_len : n - done;
		if (k) {
			tl__sim_ring_put(p, v->iov_base, k);
			v->iov_base = (uint8_t *)v->iov_base + k;
			v->iov_len -= k;
			done += k;
		}
		if (!v->iov_len)
			o->u.wv.cur++;
	}
	o->u.wv.off += done;
}

static int fail_pending(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	int e = s->err;
	s->err = 0;
	tl__sim_report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_write(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->err)
		return fail_pending(d, s, o);
	if (s->broken || s->wr_shut) {
		tl__sim_report(d, o, -EPIPE, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (s->cs != CS_CONNECTED) {
		tl__sim_report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	size_t left = o->u.wv.total - o->u.wv.off;
	struct sim_sock *p = s->peer;
	if (left && !p && s->is_unix) {
		tl__sim_report(d, o, -EPIPE, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (left && !p) {
		/* The TCP peer closed: these bytes go out and are answered by a
		 * reset, which the next operation reports. */
		o->u.wv.off = o->u.wv.total;
		tl__sim_report(d, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
		tl__sim_abort_side(d, s, ECONNRESET);
		return 1;
	}
	if (left) {
		uint32_t space = p->cap - p->len;
		if (!space)
			return 0; /* the peer's reads wake us */
		uint32_t n = left < space ? (uint32_t)left : space;
		if (n > SIM_MSS && tl__sim_draw(d, TL_SIM_SHORT_IO))
			n = SIM_MSS + tl__sim_below(d, n - SIM_MSS);
		if (tl__sim_draw(d, TL_SIM_RESET)) {
			tl__sim_reset_conn(d, s);
			return fail_pending(d, s, o);
		}
		gather(o, p, n);
		tl__sim_seg_add(p, n);
		tl__sim_sched(d, p);
		if (o->u.wv.off < o->u.wv.total) {
			/* A partial write: go on when the next chunk fits. */
			if (p->len < p->cap)
				tl__sim_sched(d, s);
			return 0;
		}
	}
	tl__sim_report(d, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* tl_try_write, under the world's lock: what run_write does for a write at
 * an empty queue's head, at once, with nothing reported (a write's error is
 * the return value, once). A short take is drawn as run_write draws one. */
int64_t tl__sim_try_write(struct tl_drv *d, struct sim_sock *s, const void *buf, uint32_t len)
{
	if (s->whead != TL_NIL || s->cs == CS_WAITING)
		return -EAGAIN;
	if (s->err) {
		int e = s->err;
		s->err = 0;
		return -e;
	}
	if (s->broken || s->wr_shut)
		return -EPIPE;
	if (s->cs != CS_CONNECTED)
		return -ENOTCONN;
	struct sim_sock *p = s->peer;
	if (!p && s->is_unix)
		return -EPIPE;
	if (!p) {
		/* As run_write: out they go, answered by a reset. */
		tl__sim_abort_side(d, s, ECONNRESET);
		return len;
	}
	uint32_t space = p->cap - p->len, n = len < space ? len : space;
	if (!n)
		return -EAGAIN;
	if (n > SIM_MSS && tl__sim_draw(d, TL_SIM_SHORT_IO))
		n = SIM_MSS + tl__sim_below(d, n - SIM_MSS);
	tl__sim_hash_u64(d, ((uint64_t)s->idx << 32) | n); /* a replay checks it */
	tl__sim_ring_put(p, buf, n);
	tl__sim_seg_add(p, n);
	tl__sim_sched(d, p);
	return n;
}

static int run_shutdown(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->err)
		return fail_pending(d, s, o);
	if (s->cs != CS_CONNECTED || s->broken) {
		tl__sim_report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (!s->wr_shut) {
		s->wr_shut = 1;
		if (s->peer) {
			s->peer->rd_eof = 1; /* after the bytes already in its ring */
			tl__sim_sched(d, s->peer);
		}
	}
	tl__sim_report(d, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

/* Whether a datagram from src may reach t: a connected socket takes only
 * its peer's (the port, and the address unless the peer is a wildcard). */
static int dg_accepts(const struct sim_sock *t, const tl_addr *src)
{
	if (!t->dg_conn)
		return 1;
	if (tl__sim_port_of(src) != tl__sim_port_of(&t->remote))
		return 0;
	tl_addr a = tl__sim_as_family(src, t->remote.sa.sa_family);
	tl_addr r = tl__sim_dest_of(&t->remote);
	tl__sim_set_port(&a, 0);
	tl__sim_set_port(&r, 0);
	return tl__sim_ip_any(&t->remote) || memcmp(&a, &r, tl_addr_len(&r)) == 0;
}

static void dg_put(struct sim_sock *t, const struct dg_hdr *h, const void *buf, int front)
{
	if (front && t->ndgram) {
		tl__sim_ring_put_front(t, buf, h->len);
		tl__sim_ring_put_front(t, h, sizeof *h);
	} else {
		tl__sim_ring_put(t, h, sizeof *h);
		tl__sim_ring_put(t, buf, h->len);
	}
	t->ndgram++;
}

static int run_send(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	const tl_addr *to = o->u.dg.addr.sa.sa_family ? &o->u.dg.addr : &s->remote;
	int64_t res = o->u.dg.len;
	if (!o->u.dg.addr.sa.sa_family && !s->dg_conn)
		res = -EDESTADDRREQ;
	else if (o->u.dg.len > UDP_MAX)
		res = -EMSGSIZE;
	else if (to->sa.sa_family == AF_INET6 && s->local.sa.sa_family == AF_INET)
		res = -EAFNOSUPPORT;
	else {
		/* An IPv4-mapped destination is the IPv4 address it stands
		 * for (a dual-stack socket sends IPv4 there, as in Linux). */
		tl_addr dst = tl__sim_dest_of(to);
		dst = tl__sim_unmapped(&dst);
		struct sim_sock *t = tl__sim_find_udp(&dst);
		struct dg_hdr h = {.len = o->u.dg.len, .to = dst};
		/* The source: our port, and the address the datagram went to when
		 * we are bound to a wildcard or send IPv4 from a dual-stack socket
		 * (every address is this host), unless the host chose one. */
		if (o->u.dg.local.sa.sa_family)
			h.from = o->u.dg.local;
		else if (tl__sim_ip_any(&s->local) || dst.sa.sa_family != s->local.sa.sa_family)
			h.from = dst;
		else
			h.from = s->local;
		tl__sim_set_port(&h.from, tl__sim_port_of(&s->local));
		h.from = tl__sim_as_family(&h.from, t ? t->local.sa.sa_family : AF_INET);
		/* Datagrams are lost when the receiver's ring is full, as UDP. */
		if (t && dg_accepts(t, &h.from) && !tl__sim_draw(d, TL_SIM_UDP_DROP)) {
			int copies = 1 + tl__sim_draw(d, TL_SIM_UDP_DUP);
			int front = tl__sim_draw(d, TL_SIM_UDP_REORDER);
			for (int i = 0; i < copies; i++)
				if (t->cap - t->len >= sizeof h + o->u.dg.len)
					dg_put(t, &h, o->u.dg.buf, front);
			tl__sim_sched(d, t);
		}
	}
	tl__sim_report(d, o, res, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_connect(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->conn_res == CONN_PENDING)
		return 0;
	if (s->conn_res < 0)
		s->cs = CS_FAILED;
	tl__sim_report(d, o, s->conn_res, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_op(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	switch (o->code) {
	case TL_OP_ACCEPT:
		return run_accept(d, s, o);
	case TL_OP_READ:
		return run_read(d, s, o);
	case TL_OP_RECV:
		return run_recv(d, s, o);
	case TL_OP_CONNECT:
		return run_connect(d, s, o);
	case TL_OP_WRITE:
		return run_write(d, s, o);
	case TL_OP_SHUTDOWN:
		return run_shutdown(d, s, o);
	case TL_OP_SEND:
		return run_send(d, s, o);
	case TL_OP_SPLICE:
		return tl__sim_run_splice(d, s, o);
	}
	return 1;
}

/* Acknowledge a cancellation: the op leaves its queue (and a connect its
 * listener's wait list) and reports its terminal event. */
void tl__sim_ack_cancel(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (is_rside(o))
		tl__sim_q_remove(d->loop, &s->rhead, &s->rtail, o);
	else
		tl__sim_q_remove(d->loop, &s->whead, &s->wtail, o);
	if (o->code == TL_OP_CONNECT && s->cs != CS_CONNECTED) {
		if (s->cs == CS_WAITING && s->listener)
			tl__sim_list_unlink(&s->listener->wait_head, &s->listener->wait_tail, s);
		s->listener = NULL;
		s->cs = CS_FAILED;
	}
	if (o->code == TL_OP_SPLICE)
		tl__sim_splice_unpark(d, o);
	SO(o)->cancel = CX_NONE;
	tl__sim_report(d, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
}

static void sweep_cancels(struct tl_drv *d, struct sim_sock *s, uint32_t head)
{
	for (uint32_t i = head; i != TL_NIL;) {
		struct tl_opslot *o = tl__drv_op(d->loop, i);
		i = SO(o)->qnext;
		if (SO(o)->cancel == CX_ACK)
			tl__sim_ack_cancel(d, s, o);
	}
}

/* Ops that raced through this run are acknowledged by the next one. */
static void settle_races(struct tl_drv *d, struct sim_sock *s, uint32_t head)
{
	for (uint32_t i = head; i != TL_NIL; i = SO(tl__drv_op(d->loop, i))->qnext) {
		struct tl_opslot *o = tl__drv_op(d->loop, i);
		if (SO(o)->cancel == CX_RACE) {
			SO(o)->cancel = CX_ACK;
			tl__sim_sched(d, s);
		}
	}
}

void tl__sim_run_queue(struct tl_drv *d, struct sim_sock *s, uint32_t *head, uint32_t *tail)
{
	while (*head != TL_NIL) {
		struct tl_opslot *o = tl__drv_op(d->loop, *head);
		if (SO(o)->cancel == CX_ACK) {
			tl__sim_ack_cancel(d, s, o);
			continue;
		}
		uint32_t idx = o->idx;
		if (!run_op(d, s, o))
			break;
		/* The op's slot is retired but its drv words are intact. */
		if (*head == idx) {
			*head = SO(o)->qnext;
			if (*head == TL_NIL)
				*tail = TL_NIL;
		}
	}
}

static void run_sock(struct tl_drv *d, struct sim_sock *s)
{
	if (s->type == SK_FREE || s->hidx == TL_NIL)
		return;
	d->st.runs++;
	sweep_cancels(d, s, s->whead);
	sweep_cancels(d, s, s->rhead);
	tl__sim_run_queue(d, s, &s->whead, &s->wtail);
	tl__sim_run_queue(d, s, &s->rhead, &s->rtail);
	settle_races(d, s, s->whead);
	settle_races(d, s, s->rhead);
	tl__sim_splice_wake(d, s);
}

/* Run the sockets due at `now` that were scheduled before this call: what
 * they schedule for `now` waits for the next poll, so a ping-pong between two
 * sockets of one loop cannot spin inside a poll. */
void tl__sim_run_due(struct tl_drv *d, uint64_t now)
{
	uint64_t limit = d->seq;
	const struct tl_heap_ent *e;
	while ((e = tl__heap_top(&d->sched)) && e->at <= now && e->seq < limit) {
		uint32_t idx = e->slot;
		tl__heap_remove(&d->sched, idx);
		run_sock(d, &d->socks[idx]);
	}
}
