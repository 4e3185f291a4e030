/* drivers/dpdk/driver.c: the DPDK driver's handles, operations and poll: datagrams on a claimed queue pair, and the idle policy. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include "dpdk_int.h"

/* ---- op lists ---- */

static void l_push(struct tl_drv *d, struct dp_list *q, struct tl_opslot *o, uint8_t where)
{
	DPO(o)->next = TL_NIL;
	DPO(o)->where = where;
	if (q->tail == TL_NIL)
		q->head = o->idx;
	else
		DPO(&d->os[q->tail])->next = o->idx;
	q->tail = o->idx;
	q->n++;
}

static struct tl_opslot *l_pop(struct tl_drv *d, struct dp_list *q)
{
	if (q->head == TL_NIL)
		return NULL;
	struct tl_opslot *o = &d->os[q->head];
	q->head = DPO(o)->next;
	if (q->head == TL_NIL)
		q->tail = TL_NIL;
	q->n--;
	DPO(o)->where = DPO_NONE;
	return o;
}

/* Put o back at the front of q (it keeps its place in the order). */
static void l_unpop(struct tl_drv *d, struct dp_list *q, struct tl_opslot *o, uint8_t where)
{
	DPO(o)->next = q->head;
	DPO(o)->where = where;
	q->head = o->idx;
	if (q->tail == TL_NIL)
		q->tail = o->idx;
	q->n++;
}

static int l_remove(struct tl_drv *d, struct dp_list *q, struct tl_opslot *o)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = q->head; i != TL_NIL; prev = i, i = DPO(&d->os[i])->next) {
		if (i != o->idx)
			continue;
		uint32_t next = DPO(o)->next;
		if (prev == TL_NIL)
			q->head = next;
		else
			DPO(&d->os[prev])->next = next;
		if (q->tail == i)
			q->tail = prev;
		q->n--;
		DPO(o)->where = DPO_NONE;
		return 1;
	}
	return 0;
}

/* ---- the ready list: handles whose datagrams may meet receives ---- */

void tl__dp_ready(struct tl_drv *d, struct tl_hslot *h)
{
	struct dp_h *e = DPH(h);
	if ((e->flags & DPH_READY) || e->rhead == TL_NIL || !e->qhead)
		return;
	e->flags |= DPH_READY;
	e->rdy_next = TL_NIL;
	e->rdy_prev = d->rdy_tail;
	if (d->rdy_tail == TL_NIL)
		d->rdy_head = h->idx;
	else
		DPH(&d->hs[d->rdy_tail])->rdy_next = h->idx;
	d->rdy_tail = h->idx;
}

static void unready(struct tl_drv *d, struct tl_hslot *h)
{
	struct dp_h *e = DPH(h);
	if (!(e->flags & DPH_READY))
		return;
	if (e->rdy_prev == TL_NIL)
		d->rdy_head = e->rdy_next;
	else
		DPH(&d->hs[e->rdy_prev])->rdy_next = e->rdy_next;
	if (e->rdy_next == TL_NIL)
		d->rdy_tail = e->rdy_prev;
	else
		DPH(&d->hs[e->rdy_next])->rdy_prev = e->rdy_prev;
	e->flags &= (uint8_t)~DPH_READY;
}

/* ---- receives ---- */

static void rq_pop(struct dp_h *e)
{
	struct rte_mbuf *m = e->qhead;
	e->qhead = dp_meta(m)->next;
	if (!e->qhead)
		e->qtail = NULL;
	e->qlen--;
	rte_pktmbuf_free(m);
}

/* *a = [ip]:port (a was zeroed). */
static void addr6(tl_addr *a, const uint8_t *ip, uint16_t port)
{
	a->in6.sin6_family = AF_INET6;
	memcpy(&a->in6.sin6_addr, ip, 16);
	a->in6.sin6_port = port;
}

/* Hand h's oldest datagram to receive o: 1 if it went, 0 if it must wait
 * (no room this turn, the handle's lease cap, no pooled buffer). */
static int deliver(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct dp_h *e = DPH(h);
	int multi = o->flags & TL_OPF_MULTI;
	if (multi && !tl__drv_room(d->loop))
		return 0;
	struct rte_mbuf *m = e->qhead;
	struct dp_meta *mt = dp_meta(m);
	uint8_t *buf = o->u.dg.buf;
	uint32_t cap = o->u.dg.len, lease = TL_NO_LEASE;
	if ((o->flags & TL_OPF_POOLED) && mt->len) {
		if (!tl__drv_dgram_room(h, 1))
			return 0; /* at its cap: pause(0) brings it back */
		lease = tl__drv_lease_take(d->loop);
		if (lease == TL_NO_LEASE) {
			if (!(e->flags & DPH_LEASE_WAIT)) {
				e->flags |= DPH_LEASE_WAIT;
				d->lwait[d->nlwait++] = h->idx;
			}
			return 0;
		}
		uint32_t cnt;
		buf = tl__drv_lease_base(d->loop, &cap, &cnt) + (size_t)lease * cap;
	}
	uint32_t n = mt->len < cap ? mt->len : cap;
	if (n)
		memcpy(buf, rte_pktmbuf_mtod_offset(m, uint8_t *, mt->off), n);
	memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	if (h->flags & TL_HF_PKTINFO)
		memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
	if (mt->v6) {
		const struct rte_ipv6_hdr *ip = rte_pktmbuf_mtod_offset(m, const struct rte_ipv6_hdr *, mt->l3);
		addr6(&o->u.dg.addr, ip->src_addr, mt->sport);
		if (h->flags & TL_HF_PKTINFO)
			addr6(&o->u.dg.local, ip->dst_addr, mt->dport);
	} else {
		if (e->flags & DPH_V6) {
			/* An IPv4 datagram on a dual handle: its source
			 * IPv4-mapped; its destination as the kernel's
			 * IP_PKTINFO gives it on such a socket, IPv4. */
			dp_ip a = dp_ip4(mt->sip);
			addr6(&o->u.dg.addr, a.b, mt->sport);
		} else {
			o->u.dg.addr.in.sin_family = AF_INET;
			o->u.dg.addr.in.sin_addr.s_addr = mt->sip;
			o->u.dg.addr.in.sin_port = mt->sport;
		}
		if (h->flags & TL_HF_PKTINFO) {
			o->u.dg.local.in.sin_family = AF_INET;
			o->u.dg.local.in.sin_addr.s_addr = mt->dip;
			o->u.dg.local.in.sin_port = mt->dport;
		}
	}
	o->u.dg.full = mt->full;
	o->u.dg.seg = 0;
	rq_pop(e);
	if (!multi) {
		e->rhead = DPO(o)->next;
		if (e->rhead == TL_NIL)
			e->rtail = TL_NIL;
		DPO(o)->where = DPO_NONE;
	}
	tl__drv_event(d->loop, o, n, multi ? 0 : TL_F_TERMINAL, lease);
	return 1;
}

/* Match h's datagrams with its receives while they can go. */
static void run_handle(struct tl_drv *d, struct tl_hslot *h)
{
	struct dp_h *e = DPH(h);
	while (e->qhead && e->rhead != TL_NIL) {
		struct tl_opslot *o = &d->os[e->rhead];
		if (!deliver(d, h, o))
			return;
	}
}

static void run_ready(struct tl_drv *d)
{
	uint32_t i = d->rdy_head;
	while (i != TL_NIL) {
		struct tl_hslot *h = &d->hs[i];
		uint32_t next = DPH(h)->rdy_next;
		run_handle(d, h);
		if (!DPH(h)->qhead || DPH(h)->rhead == TL_NIL)
			unready(d, h);
		if (!tl__drv_room(d->loop))
			return;
		i = next;
	}
}

/* ---- sends ---- */

/* Turn what waits on the transmit list into frames and hand them to the TX
 * ring, with the control frames (ARP) first. */
static void flush_tx(struct tl_drv *d)
{
	if (d->nctl) {
		uint16_t n = rte_eth_tx_burst(d->port, d->queue, d->ctl, (uint16_t)d->nctl);
		if (n < d->nctl)
			memmove(d->ctl, d->ctl + n, (d->nctl - n) * sizeof d->ctl[0]);
		d->nctl -= n;
		d->st.tx_frames += n;
		if (d->nctl)
			return; /* the ring is full */
	}
	while (d->tx.head != TL_NIL) {
		struct rte_mbuf *m[DP_BURST];
		struct tl_opslot *ops[DP_BURST];
		uint32_t k = 0, want = d->tx.n < DP_BURST ? d->tx.n : DP_BURST;
		if (!want || rte_pktmbuf_alloc_bulk(d->mp, m, want) != 0)
			return; /* the pool is empty: received frames hold it; next poll */
		while (k < want) {
			struct tl_opslot *o = l_pop(d, &d->tx);
			if (!o)
				break;
			struct tl_hslot *h = &d->hs[o->hidx];
			int r = tl__dp_build(d, h, o, m[k]);
			if (r < 0) {
				rte_pktmbuf_reset(m[k]);
				tl__drv_event(d->loop, o, r, TL_F_TERMINAL, TL_NO_LEASE);
				continue;
			}
			if (r > 0) {
				/* Ask for the neighbour now; the send waits. */
				l_push(d, &d->nw, o, DPO_NEIGH);
				DPO(o)->tries = 1;
				DPO(o)->due = tl__os_mono_ns() + DP_ARP_EVERY_NS;
				tl__dp_ask(d, h, o);
				continue;
			}
			ops[k++] = o;
		}
		if (d->nctl) {
			uint16_t n = rte_eth_tx_burst(d->port, d->queue, d->ctl, (uint16_t)d->nctl);
			if (n < d->nctl)
				memmove(d->ctl, d->ctl + n, (d->nctl - n) * sizeof d->ctl[0]);
			d->nctl -= n;
			d->st.tx_frames += n;
		}
		uint16_t sent = k ? rte_eth_tx_burst(d->port, d->queue, m, (uint16_t)k) : 0;
		if (k)
			d->st.tx_bursts++;
		d->st.tx_frames += sent;
		for (uint32_t i = 0; i < sent; i++)
			tl__drv_event(d->loop, ops[i], ops[i]->u.dg.len, TL_F_TERMINAL, TL_NO_LEASE);
		rte_pktmbuf_free_bulk(m + sent, want - sent);
		if (sent < k) {
			d->st.tx_full++;
			for (uint32_t i = k; i-- > sent;)
				l_unpop(d, &d->tx, ops[i], DPO_TX);
			return;
		}
	}
}

/* Sends waiting for a neighbour: ask again, or give up. */
static void run_neigh(struct tl_drv *d, uint64_t now)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = d->nw.head; i != TL_NIL;) {
		struct tl_opslot *o = &d->os[i];
		struct dp_o *p = DPO(o);
		uint32_t next = p->next;
		if (now >= p->due) {
			if (p->tries >= DP_ARP_TRIES) {
				if (prev == TL_NIL)
					d->nw.head = next;
				else
					DPO(&d->os[prev])->next = next;
				if (d->nw.tail == i)
					d->nw.tail = prev;
				d->nw.n--;
				p->where = DPO_NONE;
				d->st.unreachable++;
				tl__drv_event(d->loop, o, -EHOSTUNREACH, TL_F_TERMINAL, TL_NO_LEASE);
				i = next;
				continue;
			}
			p->tries++;
			p->due = now + DP_ARP_EVERY_NS;
			tl__dp_ask(d, &d->hs[o->hidx], o);
		}
		prev = i;
		i = next;
	}
}

/* ---- the poll ---- */

/* One pass over the queue pair: sends out, frames in, datagrams matched
 * with receives. */
static void work(struct tl_drv *d, uint64_t now)
{
	if (now >= d->link_at) {
		struct rte_eth_link lk;
		if (rte_eth_link_get_nowait(d->port, &lk) == 0)
			d->link_up = lk.link_status == RTE_ETH_LINK_UP;
		d->link_at = now + 100 * 1000 * 1000;
		if (d->nw.head != TL_NIL)
			run_neigh(d, now);
	}
	if (!d->link_up) {
		run_ready(d); /* what came before still meets its receives */
		return; /* polling stops while the link is down */
	}
	flush_tx(d);
	/* Frames come in while the turn has room for their events; a full
	 * handle queue drops, as a full socket does. */
	for (int b = 0; b < 8 && tl__drv_room(d->loop); b++) {
		struct rte_mbuf *m[DP_BURST];
		uint16_t n = rte_eth_rx_burst(d->port, d->queue, m, DP_BURST);
		if (!n)
			break;
		d->st.rx_bursts++;
		d->st.rx_frames += n;
		for (uint16_t i = 0; i < n; i++)
			tl__dp_input(d, m[i]);
		run_ready(d);
		if (n < DP_BURST)
			break;
	}
	if (d->sh) {
		/* What other pairs handed this one, as if received here; and
		 * the loops this pass handed datagrams to woken if they nap. */
		tl__dp_hand_in(d);
		if (d->handed_to) {
			atomic_thread_fence(memory_order_seq_cst);
			for (uint64_t t = d->handed_to; t; t &= t - 1) {
				struct dp_qwake *w = &d->sh->wake[__builtin_ctzll(t)];
				if (atomic_load_explicit(&w->napping, memory_order_relaxed) &&
				    atomic_exchange_explicit(&w->napping, 0, memory_order_relaxed))
					tl__os_notifier_signal(&w->w);
			}
			d->handed_to = 0;
		}
	}
	run_ready(d);
	if (d->nctl)
		flush_tx(d); /* ARP answers go out in this pass */
}

/* 1 if the notifier was written (a post, a wake, a cross-loop event). */
static int woken(struct tl_drv *d)
{
	return tl__os_notifier_drain(d->wake);
}

/* Frames and hand-offs taken so far: a change is work found. */
static uint64_t taken(const struct tl_drv *d)
{
	return d->st.rx_frames + d->st.handed_in;
}

/* Sleep on the loop's notifier (and, with the hand-off, on the pair's
 * own) for at most nap ns: 1 if woken by a post or wake (the turn ends),
 * 0 if the time ran out or another pair handed this one a datagram (the
 * next poll takes it). Before sleeping the loop says it naps, then looks
 * at its rings once more: a pair that hands it a datagram after that sees
 * it napping and signals (work()'s fence pairs with this one). */
static int nap(struct tl_drv *d, uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
	struct pollfd pf[2] = {{.fd = tl__os_notifier_fd(d->wake), .events = POLLIN}};
	nfds_t nf = 1;
	struct dp_qwake *w = NULL;
	if (d->sh) {
		w = &d->sh->wake[d->queue];
		atomic_store_explicit(&w->napping, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (tl__dp_hand_pending(d)) {
			atomic_store_explicit(&w->napping, 0, memory_order_relaxed);
			return 0;
		}
		pf[1] = (struct pollfd){.fd = tl__os_notifier_fd(&w->w), .events = POLLIN};
		nf = 2;
	}
	d->st.naps++;
	int n = ppoll(pf, nf, &ts, NULL);
	if (w) {
		atomic_store_explicit(&w->napping, 0, memory_order_relaxed);
		if (n > 0 && (pf[1].revents & POLLIN))
			tl__os_notifier_drain(&w->w);
	}
	if (n > 0 && (pf[0].revents & POLLIN)) {
		woken(d);
		return 1;
	}
	return 0;
}

/*
 * The idle policy. A poll that finds nothing and may wait keeps polling
 * the queue pair while the loop found work in the last spin_ns
 * (TL_DPDK_SPIN_US, default 200 µs), since more is likely soon; after that
 * it naps: it sleeps on the loop's notifier for at most nap_ns
 * (TL_DPDK_NAP_US, default 250 µs), then polls the pair again, until its
 * timeout. A virtual port has no interrupt to sleep on, so a datagram
 * that comes to an idle loop waits up to nap_ns; an idle loop costs a
 * wake-up and a poll every nap_ns (docs/DPDK.md measures it).
 */
static int dp_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	tl_loop *l = d->loop;
	uint32_t before = tl__drv_queued(l);
	uint64_t now = tl__os_mono_ns();
	uint64_t rxb = taken(d);
	work(d, now);
	if (tl__drv_queued(l) != before || taken(d) != rxb)
		d->last_work = now;
	if (tl__drv_queued(l) != before || timeout_ns == 0) {
		info->discovery_polls++;
		return 0;
	}
	info->waits++;
	uint64_t limit = timeout_ns < 0 ? UINT64_MAX : now + (uint64_t)timeout_ns;
	for (uint32_t spins = 0;; spins++) {
		now = tl__os_mono_ns();
		if (now >= limit)
			break;
		if (now - d->last_work < d->spin_ns) {
			d->st.spins++;
			if ((spins & 63) == 63 && woken(d))
				return 0;
		} else {
			if (nap(d, limit - now < d->nap_ns ? limit - now : d->nap_ns))
				return 0;
			now = tl__os_mono_ns();
		}
		rxb = taken(d);
		work(d, now);
		if (tl__drv_queued(l) != before || taken(d) != rxb) {
			/* Frames that made no completion (dropped, or waiting
			 * for a receive) end the wait too, so the turn ends and
			 * a runtime publishes the counters they changed. */
			d->last_work = now;
			return 0;
		}
	}
	info->zero_event_waits++;
	return 0;
}

/* ---- handles ---- */

static int bind_port(struct tl_drv *d, struct tl_hslot *h, uint16_t port, int reuse)
{
	uint32_t first = d->bound[port];
	if (first != TL_NIL) {
		/* SO_REUSEPORT: every handle on the port must have asked. */
		if (!reuse)
			return -EADDRINUSE;
		for (uint32_t i = first; i != TL_NIL; i = DPH(&d->hs[i])->chain)
			if (!(DPH(&d->hs[i])->flags & DPH_REUSEPORT))
				return -EADDRINUSE;
	}
	struct dp_h *e = DPH(h);
	e->chain = first;
	e->lport = htons(port);
	e->flags |= DPH_BOUND | (reuse ? DPH_REUSEPORT : 0);
	d->bound[port] = h->idx;
	if (first == TL_NIL && d->sh)
		atomic_fetch_or_explicit(&d->sh->owners[port], 1ull << d->queue, memory_order_release);
	return 0;
}

static void unbind_port(struct tl_drv *d, struct tl_hslot *h)
{
	struct dp_h *e = DPH(h);
	if (!(e->flags & DPH_BOUND))
		return;
	uint32_t *p = &d->bound[ntohs(e->lport)];
	while (*p != TL_NIL && *p != h->idx)
		p = &DPH(&d->hs[*p])->chain;
	if (*p == h->idx)
		*p = e->chain;
	e->flags &= (uint8_t)~DPH_BOUND;
	if (d->sh && d->bound[ntohs(e->lport)] == TL_NIL)
		atomic_fetch_and_explicit(&d->sh->owners[ntohs(e->lport)], ~(1ull << d->queue),
					  memory_order_release);
}

static int dp_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *sp)
{
	if (sp->kind != TL_OPEN_UDP)
		return -ENOTSUP;
	int fam = sp->addr->sa.sa_family;
	if (fam != AF_INET && fam != AF_INET6)
		return -EAFNOSUPPORT;
	if (sp->udp_flags & ~(TL_UDP_REUSEPORT | TL_UDP_PKTINFO))
		return -EOPNOTSUPP;
	uint32_t mine = 0;
	uint8_t flags = 0;
	if (fam == AF_INET) {
		uint32_t a = sp->addr->in.sin_addr.s_addr;
		mine = tl__dp_mine(d, a);
		if (a != INADDR_ANY && !mine)
			return -EADDRNOTAVAIL;
	} else {
		/* IPv6: :: takes both families; an IPv4-mapped address its
		 * IPv4 address; any other one of the port's IPv6 addresses.
		 * The port is one link: a scope id is not looked at. */
		dp_ip a;
		memcpy(a.b, &sp->addr->in6.sin6_addr, 16);
		flags = DPH_V6;
		if (dp_ip_is4(&a)) {
			mine = tl__dp_mine(d, a.w[3]);
			if (!mine)
				return -EADDRNOTAVAIL; /* ::ffff:0.0.0.0 too: not served */
		} else if (a.q[0] || a.q[1]) {
			mine = tl__dp_mine6(d, a.b);
			if (!mine)
				return -EADDRNOTAVAIL;
			flags |= DPH_ADDR6;
		}
	}
	memset(h->u.drv, 0, sizeof h->u.drv);
	struct dp_h *e = DPH(h);
	e->addr = (uint8_t)mine;
	e->flags = flags;
	e->rhead = e->rtail = e->rdy_next = e->rdy_prev = e->chain = TL_NIL;
	int reuse = !!(sp->udp_flags & TL_UDP_REUSEPORT);
	uint16_t port = ntohs(sp->addr->in.sin_port);
	int r = -EADDRINUSE;
	if (port) {
		r = bind_port(d, h, port, reuse);
	} else {
		/* An ephemeral port, as the kernel's range has them, and one
		 * no other loop of the process holds either: the ports are one
		 * space per process (as a kernel's are per host), and two
		 * handles connected to the same peer on the same port of two
		 * loops would each take the other's datagrams when they land
		 * on its pair. The table's bit is claimed first, so two loops
		 * that try the same port at once cannot both have it. */
		for (uint32_t i = 0; i < 28232 && r < 0; i++) {
			uint16_t p = d->next_port;
			d->next_port = d->next_port >= 60999 ? 32768 : d->next_port + 1;
			if (d->bound[p] != TL_NIL)
				continue;
			if (d->sh) {
				uint64_t bit = 1ull << d->queue;
				uint64_t was = atomic_fetch_or_explicit(&d->sh->owners[p], bit,
									memory_order_acq_rel);
				if (was & ~bit) {
					atomic_fetch_and_explicit(&d->sh->owners[p], ~bit,
								  memory_order_release);
					continue;
				}
			}
			r = bind_port(d, h, p, reuse);
		}
	}
	if (r < 0)
		return r;
	h->fd = -1;
	return 0;
}

static int dp_attach(struct tl_drv *d, struct tl_hslot *h)
{
	(void)d;
	(void)h;
	return -ENOTSUP;
}

static void dp_release(struct tl_drv *d, struct tl_hslot *h)
{
	struct dp_h *e = DPH(h);
	unready(d, h);
	unbind_port(d, h);
	while (e->qhead)
		rq_pop(e);
	if (e->flags & DPH_LEASE_WAIT) {
		for (uint32_t i = 0; i < d->nlwait; i++)
			if (d->lwait[i] == h->idx) {
				d->lwait[i] = d->lwait[--d->nlwait];
				break;
			}
	}
	e->flags = 0;
}

static int dp_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	struct dp_h *e = DPH(h);
	memset(out, 0, sizeof *out);
	if (e->flags & DPH_V6) {
		dp_ip a = {.q = {0, 0}};
		if (e->flags & DPH_ADDR6)
			a = d->ip6[e->addr - 1];
		else if (e->addr)
			a = dp_ip4(d->ips[e->addr - 1]);
		addr6(out, a.b, e->lport);
		return 0;
	}
	out->in.sin_family = AF_INET;
	out->in.sin_addr.s_addr = e->addr ? d->ips[e->addr - 1] : INADDR_ANY;
	out->in.sin_port = e->lport;
	return 0;
}

static int dp_dgram_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer)
{
	struct dp_h *e = DPH(h);
	dp_ip a;
	uint16_t port;
	if (peer->sa.sa_family == AF_INET) {
		a = dp_ip4(peer->in.sin_addr.s_addr);
		port = peer->in.sin_port;
	} else if (peer->sa.sa_family == AF_INET6 && (e->flags & DPH_V6)) {
		memcpy(a.b, &peer->in6.sin6_addr, 16);
		port = peer->in6.sin6_port;
	} else {
		return -EAFNOSUPPORT;
	}
	if (!port)
		return -EINVAL;
	/* A handle bound to an address of one family reaches that family
	 * only (an IPv4 handle, an IPv6 one bound to an IPv4-mapped or to
	 * an IPv6 address); an IPv6 one bound to :: reaches both. */
	int p6 = !dp_ip_is4(&a);
	if (p6 ? (e->addr && !(e->flags & DPH_ADDR6)) : !!(e->flags & DPH_ADDR6))
		return -EAFNOSUPPORT;
	if (p6) {
		d->peer6[h->idx] = a;
		e->flags |= DPH_PEER6;
	} else {
		e->peer_ip = a.w[3];
		e->flags &= (uint8_t)~DPH_PEER6;
	}
	e->peer_port = port;
	/* Datagrams already queued from other sources stay, as a kernel
	 * socket's do. */
	return 0;
}

static int dp_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	struct dp_h *e = DPH(h);
	if (!e->peer_port)
		return -ENOTCONN;
	memset(out, 0, sizeof *out);
	if (e->flags & DPH_V6) {
		dp_ip a = (e->flags & DPH_PEER6) ? d->peer6[h->idx] : dp_ip4(e->peer_ip);
		addr6(out, a.b, e->peer_port);
		return 0;
	}
	out->in.sin_family = AF_INET;
	out->in.sin_addr.s_addr = e->peer_ip;
	out->in.sin_port = e->peer_port;
	return 0;
}

static int dp_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct dp_h *e = DPH(h);
	if (o->code == TL_OP_SEND) {
		l_push(d, &d->tx, o, DPO_TX);
		return 0;
	}
	if (o->code != TL_OP_RECV)
		return -ENOTSUP;
	struct dp_list q = {e->rhead, e->rtail, 0};
	l_push(d, &q, o, DPO_RECV);
	e->rhead = q.head;
	e->rtail = q.tail;
	tl__dp_ready(d, h);
	return 0;
}

static int dp_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct dp_o *p = DPO(o);
	int found = 0;
	if (p->where == DPO_TX) {
		found = l_remove(d, &d->tx, o);
	} else if (p->where == DPO_NEIGH) {
		found = l_remove(d, &d->nw, o);
	} else if (p->where == DPO_RECV && h) {
		struct dp_list q = {DPH(h)->rhead, DPH(h)->rtail, 0};
		found = l_remove(d, &q, o);
		DPH(h)->rhead = q.head;
		DPH(h)->rtail = q.tail;
		if (DPH(h)->rhead == TL_NIL)
			unready(d, h);
	}
	if (!found)
		return -ENOENT;
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	return 0;
}

static void dp_lease_returned(struct tl_drv *d, uint32_t id)
{
	(void)id;
	while (d->nlwait) {
		struct tl_hslot *h = &d->hs[d->lwait[--d->nlwait]];
		DPH(h)->flags &= (uint8_t)~DPH_LEASE_WAIT;
		tl__dp_ready(d, h);
	}
}

static void dp_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	if (!paused)
		tl__dp_ready(d, h);
}

/* ---- setup ---- */

static uint64_t env_us(const char *name, uint64_t def)
{
	const char *e = getenv(name);
	if (!e || !*e)
		return def * 1000;
	char *end;
	unsigned long long v = strtoull(e, &end, 10);
	if (*end || v > 1000000)
		return UINT64_MAX;
	return v * 1000;
}

static int dp_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out)
{
	uint64_t spin = env_us("TL_DPDK_SPIN_US", 200), nap = env_us("TL_DPDK_NAP_US", 250);
	if (spin == UINT64_MAX || nap == UINT64_MAX || nap == 0)
		return -EINVAL;
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->bound = malloc(65536 * sizeof *d->bound);
	d->lwait = malloc(cfg->max_handles * sizeof *d->lwait);
	d->peer6 = malloc(cfg->max_handles * sizeof *d->peer6);
	if (!d->bound || !d->lwait || !d->peer6) {
		free(d->bound);
		free(d->lwait);
		free(d->peer6);
		free(d);
		return -ENOMEM;
	}
	struct dp_port_info pi;
	int reg = 0;
	int r = tl__dp_claim(&d->queue, &d->mp, &pi, &reg);
	if (r < 0) {
		free(d->bound);
		free(d->lwait);
		free(d->peer6);
		free(d);
		return r;
	}
	for (uint32_t i = 0; i < 65536; i++)
		d->bound[i] = TL_NIL;
	d->loop = loop;
	d->hs = tl__drv_handle(loop, 0);
	d->os = tl__drv_op(loop, 0);
	d->wake = wake;
	d->port = pi.port;
	d->mac = pi.mac;
	memcpy(d->ips, pi.ips, sizeof d->ips);
	d->nips = pi.nips;
	d->ip = pi.ips[0];
	memcpy(d->ip6, pi.ip6, sizeof d->ip6);
	d->nip6 = pi.nip6;
	d->tx_offload = pi.tx_offload;
	d->spin_ns = spin;
	d->nap_ns = nap;
	d->tx.head = d->tx.tail = d->nw.head = d->nw.tail = TL_NIL;
	d->rdy_head = d->rdy_tail = TL_NIL;
	d->next_port = (uint16_t)(32768 + ((uint32_t)getpid() * 7919u + d->queue * 4099u) % 28232);
	d->st.queue = d->queue;
	d->st.nd_mc = pi.nd_mc;
	d->registered = (uint8_t)reg;
	d->sh = pi.sh;
	*out = d;
	return 0;
}

static void dp_init_hint(int err, char *buf, size_t len)
{
	(void)err;
	const char *w = tl__dp_why();
	snprintf(buf, len, "%s%s", *w ? "; " : "", w);
}

static void dp_destroy(struct tl_drv *d)
{
	for (uint32_t i = 0; i < d->nctl; i++)
		rte_pktmbuf_free(d->ctl[i]);
	tl__dp_unclaim(d->queue, d->registered);
	free(d->bound);
	free(d->lwait);
	free(d->peer6);
	free(d);
}

static uint64_t dp_now(struct tl_drv *d)
{
	(void)d;
	return tl__os_mono_ns();
}

static void dp_stats(struct tl_drv *d, tl_loop_stats *out)
{
	const struct tl_dpdk_stats *s = &d->st;
	out->nic_rx = s->rx_frames;
	out->nic_tx = s->tx_frames;
	out->nic_drops = s->drop_bad + s->drop_frag + s->drop_proto + s->drop_not_ours +
			 s->drop_no_port + s->drop_rcvq + s->drop_ext6 + s->drop_handoff + s->drop_nombuf;
	out->nic_tx_full = s->tx_full;
	out->nic_handed_out = s->handed_out;
	out->nic_handed_in = s->handed_in;
	out->nic_handoff_drops = s->drop_handoff;
}

const struct tl_driver tl__driver_dpdk = {
	.name = "dpdk",
	.caps = TL_CAP_UDP | TL_CAP_NET,
	.init = dp_init,
	.init_hint = dp_init_hint,
	.destroy = dp_destroy,
	.now = dp_now,
	.open = dp_open,
	.attach = dp_attach,
	.release = dp_release,
	.local_addr = dp_local,
	.peer_addr = dp_peer,
	.dgram_connect = dp_dgram_connect,
	.submit = dp_submit,
	.cancel = dp_cancel,
	.poll = dp_poll,
	.lease_returned = dp_lease_returned,
	.pause = dp_pause,
	.stats = dp_stats,
};

int tl__dpdk_stats(tl_loop *loop, struct tl_dpdk_stats *out)
{
	struct tl_drv *d = tl__drv_self(loop, &tl__driver_dpdk);
	if (!d)
		return -ENOTSUP;
	*out = d->st;
	out->link_up = d->link_up;
	return 0;
}
