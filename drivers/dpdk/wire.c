/* drivers/dpdk/wire.c: the DPDK driver's frames: Ethernet, ARP, IPv4, IPv6 and UDP checked on the way in and built on the way out; the neighbour table. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <rte_arp.h>
#include <rte_ip.h>
#include <rte_udp.h>
#include <rte_ethdev.h>
#include "dpdk_int.h"

/* ---- neighbours ---- */

static const dp_ip unspec;

static uint32_t nslot(const dp_ip *ip)
{
	uint32_t x = ip->w[0] ^ ip->w[1] ^ ip->w[2] ^ ip->w[3];
	return (ntohl(x) * 2654435761u) >> 24 & (DP_NEIGH - 1);
}

struct dp_neigh *tl__dp_neigh(struct tl_drv *d, const dp_ip *ip)
{
	for (uint32_t i = 0, s = nslot(ip); i < DP_NEIGH; i++, s = (s + 1) & (DP_NEIGH - 1)) {
		if (dp_ip_eq(&d->neigh[s].ip, ip))
			return &d->neigh[s];
		if (dp_ip_eq(&d->neigh[s].ip, &unspec))
			return NULL;
	}
	return NULL;
}

void tl__dp_learn(struct tl_drv *d, const dp_ip *ip, const struct rte_ether_addr *mac)
{
	if (dp_ip_eq(ip, &unspec) || rte_is_multicast_ether_addr(mac) || rte_is_zero_ether_addr(mac))
		return;
	struct dp_neigh *n = tl__dp_neigh(d, ip);
	if (n && n->state && rte_is_same_ether_addr(&n->mac, mac))
		return; /* known, as most senders are */
	if (!n) {
		uint32_t s = nslot(ip);
		for (uint32_t i = 0; i < DP_NEIGH && !dp_ip_eq(&d->neigh[s].ip, &unspec); i++)
			s = (s + 1) & (DP_NEIGH - 1);
		n = &d->neigh[s];
		n->ip = *ip;
	}
	int was = n->state;
	n->mac = *mac;
	n->state = 1;
	if (!was && d->nw.head != TL_NIL) {
		/* Sends waiting for a neighbour try again (the transmit list
		 * keeps its order; those still unknown come back here). */
		struct dp_list *nw = &d->nw, *tx = &d->tx;
		if (tx->tail == TL_NIL)
			tx->head = nw->head;
		else
			DPO(&d->os[tx->tail])->next = nw->head;
		tx->tail = nw->tail;
		for (uint32_t i = nw->head; i != TL_NIL; i = DPO(&d->os[i])->next)
			DPO(&d->os[i])->where = DPO_TX;
		tx->n += nw->n;
		nw->head = nw->tail = TL_NIL;
		nw->n = 0;
	}
}

static void learn4(struct tl_drv *d, uint32_t ip, const struct rte_ether_addr *mac)
{
	if (!ip)
		return;
	dp_ip a = dp_ip4(ip);
	tl__dp_learn(d, &a, mac);
}

void tl__dp_ctl_push(struct tl_drv *d, struct rte_mbuf *m)
{
	if (d->nctl < DP_BURST)
		d->ctl[d->nctl++] = m;
	else
		rte_pktmbuf_free(m); /* a burst of ARP or ND beyond what one poll sends */
}

static void arp_fill(struct tl_drv *d, struct rte_mbuf *m, uint16_t op, const struct rte_ether_addr *tha,
		     uint32_t tip, uint32_t sip)
{
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(
		m, sizeof(struct rte_ether_hdr) + sizeof(struct rte_arp_hdr));
	struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
	eh->src_addr = d->mac;
	if (op == RTE_ARP_OP_REQUEST)
		memset(&eh->dst_addr, 0xff, sizeof eh->dst_addr);
	else
		eh->dst_addr = *tha;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
	ah->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
	ah->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ah->arp_hlen = RTE_ETHER_ADDR_LEN;
	ah->arp_plen = 4;
	ah->arp_opcode = rte_cpu_to_be_16(op);
	ah->arp_data.arp_sha = d->mac;
	ah->arp_data.arp_sip = sip;
	if (op == RTE_ARP_OP_REQUEST)
		memset(&ah->arp_data.arp_tha, 0, sizeof ah->arp_data.arp_tha);
	else
		ah->arp_data.arp_tha = *tha;
	ah->arp_data.arp_tip = tip;
}

static void arp_ask(struct tl_drv *d, uint32_t ip, uint32_t sip)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(d->mp);
	if (!m)
		return; /* the pool is empty now: the next try asks */
	arp_fill(d, m, RTE_ARP_OP_REQUEST, NULL, ip, sip);
	d->st.arp_out++;
	tl__dp_ctl_push(d, m);
}

static void arp_input(struct tl_drv *d, struct rte_mbuf *m, struct rte_ether_hdr *eh)
{
	d->st.arp_in++;
	if (m->data_len < sizeof *eh + sizeof(struct rte_arp_hdr)) {
		d->st.drop_bad++;
		return;
	}
	struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
	if (ah->arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
	    ah->arp_protocol != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) || ah->arp_hlen != 6 ||
	    ah->arp_plen != 4) {
		d->st.drop_bad++;
		return;
	}
	if (!tl__dp_mine(d, ah->arp_data.arp_tip)) {
		d->st.drop_not_ours++;
		return;
	}
	learn4(d, ah->arp_data.arp_sip, &ah->arp_data.arp_sha);
	if (ah->arp_opcode == rte_cpu_to_be_16(RTE_ARP_OP_REQUEST)) {
		struct rte_mbuf *r = rte_pktmbuf_alloc(d->mp);
		if (r) {
			arp_fill(d, r, RTE_ARP_OP_REPLY, &ah->arp_data.arp_sha, ah->arp_data.arp_sip,
				 ah->arp_data.arp_tip);
			d->st.arp_out++;
			tl__dp_ctl_push(d, r);
		}
	}
}

/* ---- receive ---- */

/* Whether handle e takes a datagram of family v6 sent to the port's
 * address mine (1 + its index among the family's addresses): an IPv4
 * handle takes IPv4 only; an IPv6 one bound to :: both (IPV6_V6ONLY off),
 * bound to an IPv6 address that one, bound to an IPv4-mapped address that
 * IPv4 one. */
static inline int takes(const struct dp_h *e, int v6, uint32_t mine)
{
	if (v6)
		return (e->flags & DPH_V6) && (!e->addr || ((e->flags & DPH_ADDR6) && e->addr == mine));
	return !(e->flags & DPH_ADDR6) && (!e->addr || e->addr == mine);
}

/* Whether connected handle h's peer is sip:sport (sip IPv4 in its last
 * word for an IPv4 datagram). */
static inline int from_peer(const struct tl_drv *d, struct tl_hslot *h, int v6,
			    const dp_ip *sip, uint16_t sport)
{
	const struct dp_h *e = DPH(h);
	if (e->peer_port != sport)
		return 0;
	if (v6)
		return (e->flags & DPH_PEER6) && dp_ip_eq(&d->peer6[h->idx], sip);
	return !(e->flags & DPH_PEER6) && e->peer_ip == sip->w[3];
}

/* The handle bound to port p (network order) that takes a datagram from
 * sip:sport: a handle connected to that peer first, else one not
 * connected; with several (SO_REUSEPORT), the source picks one. */
static struct tl_hslot *demux(struct tl_drv *d, uint16_t p, int v6, uint32_t mine,
			      const dp_ip *sip, uint16_t sport)
{
	uint32_t first = d->bound[rte_be_to_cpu_16(p)];
	struct tl_hslot *pick = NULL;
	uint32_t nfree = 0;
	for (uint32_t i = first; i != TL_NIL; i = DPH(&d->hs[i])->chain) {
		struct tl_hslot *h = &d->hs[i];
		struct dp_h *e = DPH(h);
		if (!takes(e, v6, mine))
			continue; /* another family, or another of the port's addresses */
		if (e->peer_port) {
			if (from_peer(d, h, v6, sip, sport))
				return h;
			continue;
		}
		nfree++;
		if (!pick)
			pick = h;
	}
	if (nfree > 1) {
		uint32_t x = sip->w[0] ^ sip->w[1] ^ sip->w[2] ^ sip->w[3];
		if (!v6)
			x = sip->w[3];
		uint32_t k = (rte_be_to_cpu_32(x) ^ sport) % nfree;
		for (uint32_t i = first; i != TL_NIL; i = DPH(&d->hs[i])->chain) {
			struct tl_hslot *h = &d->hs[i];
			if (DPH(h)->peer_port || !takes(DPH(h), v6, mine))
				continue;
			if (k-- == 0)
				return h;
		}
	}
	return pick;
}

/* Queue datagram m (its UDP header u, payload dl - 8 bytes) on handle h. */
static void enqueue(struct tl_drv *d, struct tl_hslot *h, struct rte_mbuf *m,
		    const struct rte_udp_hdr *u, uint32_t dl)
{
	struct dp_h *e = DPH(h);
	struct dp_meta *mt = dp_meta(m);
	mt->next = NULL;
	mt->off = (uint16_t)((const uint8_t *)(u + 1) - rte_pktmbuf_mtod(m, uint8_t *));
	mt->len = mt->full = (uint16_t)(dl - sizeof *u);
	if (e->qtail)
		dp_meta(e->qtail)->next = m;
	else
		e->qhead = m;
	e->qtail = m;
	e->qlen++;
	d->st.rx_datagrams++;
	tl__dp_ready(d, h);
}

/* A checked UDP datagram (u, dl bytes with its header) to its handle:
 * this loop's (queued, its meta's family part filled by the caller), or,
 * with the hand-off, the loop that has one; else dropped and counted. The
 * two families' last step (src and dst in demux's form). */
static void deliver(struct tl_drv *d, struct rte_mbuf *m, struct rte_udp_hdr *u, uint32_t dl,
		    uint32_t mine, const dp_ip *src, const dp_ip *dst)
{
	int v6 = dp_meta(m)->v6;
	struct tl_hslot *h = demux(d, u->dst_port, v6, mine, src, u->src_port);
	if (!h) {
		if (!d->sh || !tl__dp_hand_out(d, v6, src, dst, u->src_port, u->dst_port, u + 1,
						 (uint16_t)(dl - sizeof *u)))
			d->st.drop_no_port++;
		return;
	}
	if (DPH(h)->qlen >= DP_RCVQ) {
		d->st.drop_rcvq++;
		return;
	}
	dp_meta(m)->sport = u->src_port;
	dp_meta(m)->dport = u->dst_port;
	enqueue(d, h, m, u, dl);
}

static void ipv4_input(struct tl_drv *d, struct rte_mbuf *m, struct rte_ether_hdr *eh)
{
	uint32_t have = m->data_len - (uint32_t)sizeof *eh;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
	if (have < sizeof *ip || (ip->version_ihl >> 4) != 4) {
		d->st.drop_bad++;
		return;
	}
	uint32_t hl = (uint32_t)(ip->version_ihl & 0xf) * 4;
	uint32_t tot = rte_be_to_cpu_16(ip->total_length);
	if (hl < sizeof *ip || tot < hl || tot > have) {
		d->st.drop_bad++;
		return;
	}
	if (!(m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_GOOD) && tl__dp_fold(tl__dp_sum(ip, hl, 0)) != 0xffff) {
		d->st.drop_bad++;
		return;
	}
	uint32_t mine = tl__dp_mine(d, ip->dst_addr);
	if (!mine && ip->dst_addr != 0xffffffffu) {
		d->st.drop_not_ours++;
		return;
	}
	if (ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) {
		d->st.drop_frag++;
		return;
	}
	if (ip->next_proto_id != IPPROTO_UDP) {
		d->st.drop_proto++;
		return;
	}
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)((uint8_t *)ip + hl);
	uint32_t ul = tot - hl;
	uint32_t dl = ul >= sizeof *u ? rte_be_to_cpu_16(u->dgram_len) : 0;
	if (ul < sizeof *u || dl < sizeof *u || dl > ul) {
		d->st.drop_bad++;
		return;
	}
	/* A UDP checksum summed with itself and the pseudo-header (the
	 * addresses, adjacent in the header, the protocol and the UDP length
	 * as the IP header gives it) comes to 0xffff. */
	if (u->dgram_cksum && !(m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_GOOD) &&
	    tl__dp_fold(tl__dp_sum(u, ul, tl__dp_sum(&ip->src_addr, 8, 0) + rte_cpu_to_be_16(IPPROTO_UDP) +
					      rte_cpu_to_be_16((uint16_t)ul))) != 0xffff) {
		d->st.drop_bad++;
		return;
	}
	learn4(d, ip->src_addr, &eh->src_addr);
	dp_ip src = {.w = {0, 0, 0, ip->src_addr}}, dst = dp_ip4(ip->dst_addr);
	struct dp_meta *mt = dp_meta(m);
	mt->v6 = 0;
	mt->sip = ip->src_addr;
	mt->dip = ip->dst_addr;
	deliver(d, m, u, dl, mine, &src, &dst);
}

/* IPv6's extension headers (RFC 8200 4, and those IANA lists as such):
 * the driver follows none, so a packet with one is dropped. */
static int ext_header(uint8_t nh)
{
	switch (nh) {
	case 0:   /* hop-by-hop options */
	case 43:  /* routing */
	case 44:  /* fragment */
	case 50:  /* ESP */
	case 51:  /* AH */
	case 60:  /* destination options */
	case 135: /* mobility */
	case 139: /* HIP */
	case 140: /* shim6 */
	case 253:
	case 254: /* experiments */
		return 1;
	}
	return 0;
}

static void ipv6_input(struct tl_drv *d, struct rte_mbuf *m, struct rte_ether_hdr *eh)
{
	uint32_t have = m->data_len - (uint32_t)sizeof *eh;
	struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
	if (have < sizeof *ip || (rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6) {
		d->st.drop_bad++;
		return;
	}
	uint32_t pl = rte_be_to_cpu_16(ip->payload_len);
	if (pl > have - sizeof *ip) {
		d->st.drop_bad++; /* a jumbogram's 0 comes with a hop-by-hop option: not here */
		return;
	}
	uint32_t mine = tl__dp_mine6(d, ip->dst_addr);
	int mc = 0;
	if (!mine) {
		/* A group of ours (all-nodes, a solicited-node group of one
		 * of our addresses) takes neighbour discovery only. */
		mc = ip->proto == IPPROTO_ICMPV6 && tl__dp_nd_group(d, ip->dst_addr);
		if (!mc) {
			d->st.drop_not_ours++;
			return;
		}
	}
	if (ext_header(ip->proto)) {
		d->st.drop_ext6++;
		return;
	}
	if (ip->proto == IPPROTO_ICMPV6) {
		tl__dp_icmp6_input(d, eh, ip, mc);
		return;
	}
	if (ip->proto != IPPROTO_UDP) {
		d->st.drop_proto++;
		return;
	}
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	uint32_t dl = pl >= sizeof *u ? rte_be_to_cpu_16(u->dgram_len) : 0;
	if (pl < sizeof *u || dl < sizeof *u || dl > pl) {
		d->st.drop_bad++;
		return;
	}
	/* IPv6 makes the UDP checksum mandatory: 0 is no checksum, refused
	 * (RFC 8200 8.1); a datagram the port did not check is checked here. */
	if (!u->dgram_cksum) {
		d->st.drop_bad++;
		return;
	}
	if (!(m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_GOOD) &&
	    tl__dp_sum6(ip, u, dl, IPPROTO_UDP) != 0xffff) {
		d->st.drop_bad++;
		return;
	}
	/* No learning from data frames: IPv6 finds neighbours by ND only. */
	dp_ip src, dst;
	memcpy(src.b, ip->src_addr, 16);
	memcpy(dst.b, ip->dst_addr, 16);
	struct dp_meta *mt = dp_meta(m);
	mt->v6 = 1;
	mt->l3 = (uint16_t)((uint8_t *)ip - rte_pktmbuf_mtod(m, uint8_t *));
	deliver(d, m, u, dl, mine, &src, &dst);
}

/* ---- the hand-off between pairs ---- */

/* One flow's loop among n: a hash of the source address and port (an
 * IPv4 source in sip's last word, as demux has it). */
static uint32_t flow_pick(const dp_ip *sip, uint16_t sport, uint32_t n)
{
	uint64_t x = (sip->q[0] ^ sip->q[1]) * 0x9e3779b97f4a7c15ull;
	x ^= (uint64_t)sport * 0xff51afd7ed558ccdull;
	x ^= x >> 29;
	return (uint32_t)((x >> 32) % n);
}

int tl__dp_hand_out(struct tl_drv *d, int v6, const dp_ip *sip, const dp_ip *dip, uint16_t sport,
		    uint16_t dport, const void *pay, uint16_t len)
{
	struct dp_shared *sh = d->sh;
	uint64_t who = atomic_load_explicit(&sh->owners[rte_be_to_cpu_16(dport)], memory_order_acquire) &
		       ~(1ull << d->queue);
	if (!who)
		return 0;
	/* With several loops on the port (TL_UDP_REUSEPORT), the flow picks
	 * one, as demux picks among one loop's handles. */
	uint32_t k = flow_pick(sip, sport, (uint32_t)__builtin_popcountll(who));
	while (k--)
		who &= who - 1;
	uint32_t t = (uint32_t)__builtin_ctzll(who);
	struct dp_ring *r = &sh->rings[d->queue * sh->nq + t];
	uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (head - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask ||
	    len > sizeof r->s[0].data) {
		/* The target's ring is full: dropped, as a full socket drops.
		 * (Or longer than a slot holds, the most the driver sends: only
		 * a virtual port with no MTU brings such a frame.) */
		d->st.drop_handoff++;
		return 1;
	}
	struct dp_slot *sl = &r->s[head & r->mask];
	sl->sip = *sip;
	sl->dip = *dip;
	sl->sport = sport;
	sl->dport = dport;
	sl->len = len;
	sl->v6 = (uint8_t)v6;
	if (len)
		memcpy(sl->data, pay, len);
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
	d->st.handed_out++;
	d->handed_to |= 1ull << t;
	return 1;
}

int tl__dp_hand_pending(const struct tl_drv *d)
{
	const struct dp_shared *sh = d->sh;
	for (uint32_t s = 0; s < sh->nq; s++) {
		if (s == d->queue)
			continue;
		struct dp_ring *r = &sh->rings[s * sh->nq + d->queue];
		if (atomic_load_explicit(&r->head, memory_order_relaxed) !=
		    atomic_load_explicit(&r->tail, memory_order_relaxed))
			return 1;
	}
	return 0;
}

/* One handed-in datagram: its handle found as for a frame of this pair's
 * (demux), then copied into an mbuf of this pair's pool, laid out as
 * deliver() reads a received one (IPv6: the header's addresses at l3),
 * and queued on the handle. 0 if it must wait: the pool is empty. */
static int hand_in_one(struct tl_drv *d, const struct dp_slot *sl)
{
	uint32_t mine = sl->v6 ? tl__dp_mine6(d, sl->dip.b) : tl__dp_mine(d, sl->dip.w[3]);
	struct tl_hslot *h = demux(d, sl->dport, sl->v6, mine, &sl->sip, sl->sport);
	if (!h) {
		d->st.drop_no_port++; /* its handle closed since, or none takes it */
		return 1;
	}
	if (DPH(h)->qlen >= DP_RCVQ) {
		d->st.drop_rcvq++;
		return 1;
	}
	struct rte_mbuf *m = rte_pktmbuf_alloc(d->mp);
	if (!m)
		return 0;
	uint32_t l3 = sl->v6 ? sizeof(struct rte_ipv6_hdr) : 0;
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(l3 + sizeof(struct rte_udp_hdr) + sl->len));
	if (!p) { /* cannot be: a slot's payload fits an mbuf */
		rte_pktmbuf_free(m);
		d->st.drop_handoff++;
		return 1;
	}
	struct dp_meta *mt = dp_meta(m);
	if (sl->v6) {
		struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)p;
		memcpy(ip->src_addr, sl->sip.b, 16);
		memcpy(ip->dst_addr, sl->dip.b, 16);
		mt->l3 = 0;
	} else {
		mt->sip = sl->sip.w[3];
		mt->dip = sl->dip.w[3];
	}
	mt->v6 = sl->v6;
	mt->sport = sl->sport;
	mt->dport = sl->dport;
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(p + l3);
	if (sl->len)
		memcpy(u + 1, sl->data, sl->len);
	d->st.handed_in++;
	enqueue(d, h, m, u, sizeof *u + (uint32_t)sl->len);
	return 1;
}

void tl__dp_hand_in(struct tl_drv *d)
{
	const struct dp_shared *sh = d->sh;
	for (uint32_t s = 0; s < sh->nq; s++) {
		if (s == d->queue)
			continue;
		struct dp_ring *r = &sh->rings[s * sh->nq + d->queue];
		uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
		uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
		/* At most a ring's worth a poll from each pair, so one busy
		 * pair cannot hold the loop in here. */
		uint32_t n = 0;
		while (tail != head && n++ <= r->mask) {
			if (!hand_in_one(d, &r->s[tail & r->mask]))
				break; /* this pair's pool is empty: the next poll */
			tail++;
		}
		atomic_store_explicit(&r->tail, tail, memory_order_release);
	}
}

void tl__dp_input(struct tl_drv *d, struct rte_mbuf *m)
{
	/* The driver notes a datagram's parts in its mbuf's private area
	 * (dp_meta), which the pools it gives its queues have. A port may
	 * hand over frames of another pool (a ring port that another
	 * program fills): one with no room for the notes is copied into an
	 * mbuf of ours, or they would land in its headroom, or on the frame. */
	if (m->pool != d->mp && rte_pktmbuf_priv_size(m->pool) < TL_DPDK_MBUF_PRIV) {
		struct rte_mbuf *c = rte_pktmbuf_copy(m, d->mp, 0, UINT32_MAX);
		rte_pktmbuf_free(m);
		if (!c) {
			d->st.drop_nombuf++;
			return;
		}
		d->st.rx_copied++;
		m = c;
	}
	/* One segment: the pools' buffers hold a whole standard frame. */
	if (m->nb_segs != 1 || m->data_len < sizeof(struct rte_ether_hdr)) {
		d->st.drop_bad++;
		goto free;
	}
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	if (!rte_is_same_ether_addr(&eh->dst_addr, &d->mac) &&
	    !rte_is_broadcast_ether_addr(&eh->dst_addr) && !tl__dp_nd_mac(d, &eh->dst_addr)) {
		d->st.drop_not_ours++;
		goto free;
	}
	uint16_t t = rte_be_to_cpu_16(eh->ether_type);
	if (t == RTE_ETHER_TYPE_IPV4) {
		uint64_t q = d->st.rx_datagrams;
		ipv4_input(d, m, eh);
		if (d->st.rx_datagrams != q)
			return; /* queued on its handle */
	} else if (t == RTE_ETHER_TYPE_IPV6) {
		uint64_t q = d->st.rx_datagrams;
		ipv6_input(d, m, eh);
		if (d->st.rx_datagrams != q)
			return;
	} else if (t == RTE_ETHER_TYPE_ARP) {
		arp_input(d, m, eh);
	} else {
		d->st.drop_proto++;
	}
free:
	rte_pktmbuf_free(m);
}

/* ---- send ---- */

/* The 16-bit halves of a 32-bit word, summed (ones' complement sums are
 * taken over words as they lie in memory, which gives the same checksum
 * in either byte order; tl__dp_fold folds a sum to 16 bits). */
static inline uint32_t halves(uint32_t v)
{
	return (v & 0xffff) + (v >> 16);
}

/* Where send op o on handle h goes and from: *v6 the frame's family, *dip
 * and *sip the addresses (IPv4 ones mapped), *dport. 0 or a negative
 * errno for the op's terminal. An IPv6 handle sends IPv4 to an IPv4 or
 * IPv4-mapped destination unless bound to an IPv6 address; bound to an
 * IPv4-mapped address it sends IPv4 only (-ENETUNREACH otherwise, as
 * for a family the port has no address of). */
static int route(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int *v6, dp_ip *dip,
		 dp_ip *sip, uint16_t *dport)
{
	struct dp_h *e = DPH(h);
	int hv6 = !!(e->flags & DPH_V6);
	const tl_addr *to = &o->u.dg.addr, *from = &o->u.dg.local;
	if (to->sa.sa_family == AF_INET) {
		*dip = dp_ip4(to->in.sin_addr.s_addr);
		*dport = to->in.sin_port;
	} else if (to->sa.sa_family == AF_INET6) {
		if (!hv6)
			return -EAFNOSUPPORT;
		memcpy(dip->b, &to->in6.sin6_addr, 16);
		*dport = to->in6.sin6_port;
	} else if (e->peer_port) {
		*dip = (e->flags & DPH_PEER6) ? d->peer6[h->idx] : dp_ip4(e->peer_ip);
		*dport = e->peer_port;
	} else {
		return -EDESTADDRREQ;
	}
	if (from->sa.sa_family == AF_INET6 && !hv6)
		return -EINVAL;
	int f6 = !dp_ip_is4(dip);
	if (f6 ? (e->addr && !(e->flags & DPH_ADDR6)) : !!(e->flags & DPH_ADDR6))
		return -ENETUNREACH;
	if (f6) {
		if (e->flags & DPH_ADDR6)
			*sip = d->ip6[e->addr - 1];
		else if (d->nip6)
			*sip = d->ip6[0];
		else
			return -ENETUNREACH;
	} else {
		if (e->addr)
			*sip = dp_ip4(d->ips[e->addr - 1]);
		else if (d->nips)
			*sip = dp_ip4(d->ip);
		else
			return -ENETUNREACH;
	}
	if (from->sa.sa_family == AF_INET || from->sa.sa_family == AF_INET6) {
		dp_ip f;
		if (from->sa.sa_family == AF_INET)
			f = dp_ip4(from->in.sin_addr.s_addr);
		else
			memcpy(f.b, &from->in6.sin6_addr, 16);
		if (!dp_ip_eq(&f, &unspec) && !(dp_ip_is4(&f) && !f.w[3])) {
			if (dp_ip_is4(&f) == f6)
				return -EINVAL; /* a source of the other family */
			if (f6 ? !tl__dp_mine6(d, f.b) : !tl__dp_mine(d, f.w[3]))
				return -EADDRNOTAVAIL;
			*sip = f;
		}
	}
	*v6 = f6;
	return 0;
}

void tl__dp_ask(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int v6;
	dp_ip dip, sip;
	uint16_t dport;
	if (route(d, h, o, &v6, &dip, &sip, &dport) < 0)
		return;
	if (v6)
		tl__dp_nd_ask(d, &dip, &sip);
	else
		arp_ask(d, dip.w[3], sip.w[3]);
}

/* The IPv6 frame of a send: the headers, the payload and the UDP checksum
 * (the port's offload, else computed). */
static void build6(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, struct rte_mbuf *m,
		   const struct rte_ether_addr *dmac, const dp_ip *dip, const dp_ip *sip,
		   uint16_t dport)
{
	uint32_t len = o->u.dg.len;
	uint32_t hdr = sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv6_hdr) +
		       sizeof(struct rte_udp_hdr);
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(hdr + len));
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)p;
	struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	eh->src_addr = d->mac;
	eh->dst_addr = *dmac;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
	ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
	ip->payload_len = rte_cpu_to_be_16((uint16_t)(len + 8));
	ip->proto = IPPROTO_UDP;
	ip->hop_limits = 64;
	memcpy(ip->src_addr, sip->b, 16);
	memcpy(ip->dst_addr, dip->b, 16);
	u->src_port = DPH(h)->lport;
	u->dst_port = dport;
	u->dgram_len = ip->payload_len;
	u->dgram_cksum = 0;
	if (len)
		memcpy(u + 1, o->u.dg.buf, len);
	if (d->tx_offload) {
		m->l2_len = sizeof *eh;
		m->l3_len = sizeof *ip;
		m->ol_flags |= RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_UDP_CKSUM;
		u->dgram_cksum = rte_ipv6_phdr_cksum(ip, m->ol_flags);
		return;
	}
	/* From the values, as for IPv4: the pseudo-header (addresses, length,
	 * next header), the UDP header (its length again, the ports) and the
	 * payload where the host has it. */
	const uint8_t pr[2] = {0, IPPROTO_UDP};
	uint16_t w_pr;
	memcpy(&w_pr, pr, 2);
	uint64_t s = tl__dp_sum(dip->b, 16, tl__dp_sum(sip->b, 16, 0));
	s += w_pr + 2u * u->dgram_len + u->src_port + u->dst_port;
	s = tl__dp_sum(o->u.dg.buf, len, s);
	uint16_t c = (uint16_t)~tl__dp_fold(s);
	u->dgram_cksum = c ? c : 0xffff;
}

int tl__dp_build(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, struct rte_mbuf *m)
{
	struct dp_h *e = DPH(h);
	int v6;
	dp_ip dipa, sipa;
	uint16_t dport;
	int r = route(d, h, o, &v6, &dipa, &sipa, &dport);
	if (r < 0)
		return r;
	if (o->u.dg.len > (v6 ? DP_MAX_PAYLOAD6 : DP_MAX_PAYLOAD))
		return -EMSGSIZE;
	if (!dport)
		return -EINVAL;
	struct rte_ether_addr dmac;
	if (v6) {
		if (tl__dp_mine6(d, dipa.b)) {
			dmac = d->mac;
		} else if (dipa.b[0] == 0xff) {
			/* A group: RFC 2464 7's MAC, no neighbour to find. */
			dmac = (struct rte_ether_addr){{0x33, 0x33, dipa.b[12], dipa.b[13], dipa.b[14],
							dipa.b[15]}};
		} else {
			struct dp_neigh *n = tl__dp_neigh(d, &dipa);
			if (!n || !n->state)
				return 1;
			dmac = n->mac;
		}
		build6(d, h, o, m, &dmac, &dipa, &sipa, dport);
		return 0;
	}
	uint32_t dip = dipa.w[3], sip = sipa.w[3];
	if (tl__dp_mine(d, dip)) {
		dmac = d->mac;
	} else if (dip == 0xffffffffu) {
		memset(&dmac, 0xff, sizeof dmac);
	} else {
		struct dp_neigh *n = tl__dp_neigh(d, &dipa);
		if (!n || !n->state)
			return 1;
		dmac = n->mac;
	}
	uint32_t len = o->u.dg.len;
	uint32_t hdr = sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr) +
		       sizeof(struct rte_udp_hdr);
	uint8_t *p = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(hdr + len));
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)p;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	eh->src_addr = d->mac;
	eh->dst_addr = dmac;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	memset(ip, 0, sizeof *ip);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->total_length = rte_cpu_to_be_16((uint16_t)(len + 28));
	ip->src_addr = sip;
	ip->dst_addr = dip;
	u->src_port = e->lport;
	u->dst_port = dport;
	u->dgram_len = rte_cpu_to_be_16((uint16_t)(len + 8));
	u->dgram_cksum = 0;
	if (len)
		memcpy(u + 1, o->u.dg.buf, len);
	if (d->tx_offload) {
		m->l2_len = sizeof *eh;
		m->l3_len = sizeof *ip;
		m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
		u->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
		return 0;
	}
	/* In software, from the values rather than from the frame: reading
	 * back the header just written in small stores as whole words stalls
	 * on every frame. The IPv4 header's words: 0x45 0x00, the length, a
	 * zero identification and fragment offset, TTL 64 and UDP (0x40 0x11),
	 * the addresses. The UDP checksum: the pseudo-header (addresses,
	 * protocol, length), the UDP header, and the payload where the host
	 * has it. */
	const uint8_t vt[2] = {0x45, 0}, tp[2] = {64, IPPROTO_UDP}, pr[2] = {0, IPPROTO_UDP};
	uint16_t w_vt, w_tp, w_pr;
	memcpy(&w_vt, vt, 2);
	memcpy(&w_tp, tp, 2);
	memcpy(&w_pr, pr, 2);
	uint32_t addrs = halves(sip) + halves(dip);
	ip->hdr_checksum = (uint16_t)~tl__dp_fold(w_vt + ip->total_length + w_tp + addrs);
	uint64_t s = addrs + w_pr + 2u * u->dgram_len + u->src_port + u->dst_port;
	s = tl__dp_sum(o->u.dg.buf, len, s);
	uint16_t c = (uint16_t)~tl__dp_fold(s);
	u->dgram_cksum = c ? c : 0xffff;
	return 0;
}
