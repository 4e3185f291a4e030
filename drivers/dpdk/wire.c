/* drivers/dpdk/wire.c: the DPDK driver's frames: Ethernet, ARP, IPv4 and UDP checked on the way in and built on the way out. */
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

static uint32_t nslot(uint32_t ip)
{
	return (ntohl(ip) * 2654435761u) >> 24 & (DP_NEIGH - 1);
}

struct dp_neigh *tl__dp_neigh(struct tl_drv *d, uint32_t ip)
{
	for (uint32_t i = 0, s = nslot(ip); i < DP_NEIGH; i++, s = (s + 1) & (DP_NEIGH - 1)) {
		if (d->neigh[s].ip == ip)
			return &d->neigh[s];
		if (!d->neigh[s].ip)
			return NULL;
	}
	return NULL;
}

/* ip is at mac: learn it (a full table replaces the entry at ip's slot). */
static void learn(struct tl_drv *d, uint32_t ip, const struct rte_ether_addr *mac)
{
	if (!ip || rte_is_multicast_ether_addr(mac) || rte_is_zero_ether_addr(mac))
		return;
	struct dp_neigh *n = tl__dp_neigh(d, ip);
	if (n && n->state && rte_is_same_ether_addr(&n->mac, mac))
		return; /* known, as most senders are */
	if (!n) {
		uint32_t s = nslot(ip);
		for (uint32_t i = 0; i < DP_NEIGH && d->neigh[s].ip; i++)
			s = (s + 1) & (DP_NEIGH - 1);
		n = &d->neigh[s];
		n->ip = ip;
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

static void ctl_push(struct tl_drv *d, struct rte_mbuf *m)
{
	if (d->nctl < DP_BURST) {
		d->ctl[d->nctl++] = m;
		d->st.arp_out++;
	} else {
		rte_pktmbuf_free(m); /* a burst of ARP beyond what one poll sends */
	}
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

void tl__dp_arp_ask(struct tl_drv *d, uint32_t ip)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(d->mp);
	if (!m)
		return; /* the pool is empty now: the next try asks */
	arp_fill(d, m, RTE_ARP_OP_REQUEST, NULL, ip, d->ip);
	ctl_push(d, m);
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
	learn(d, ah->arp_data.arp_sip, &ah->arp_data.arp_sha);
	if (ah->arp_opcode == rte_cpu_to_be_16(RTE_ARP_OP_REQUEST)) {
		struct rte_mbuf *r = rte_pktmbuf_alloc(d->mp);
		if (r) {
			arp_fill(d, r, RTE_ARP_OP_REPLY, &ah->arp_data.arp_sha, ah->arp_data.arp_sip,
				 ah->arp_data.arp_tip);
			ctl_push(d, r);
		}
	}
}

/* ---- receive ---- */

/* The handle bound to port p (network order) that takes a datagram from
 * sip:sport: a handle connected to that peer first, else one not
 * connected; with several (SO_REUSEPORT), the source picks one. */
static struct tl_hslot *demux(struct tl_drv *d, uint16_t p, uint32_t mine, uint32_t sip,
			      uint16_t sport)
{
	uint32_t first = d->bound[rte_be_to_cpu_16(p)];
	struct tl_hslot *pick = NULL;
	uint32_t nfree = 0;
	for (uint32_t i = first; i != TL_NIL; i = DPH(&d->hs[i])->chain) {
		struct tl_hslot *h = &d->hs[i];
		struct dp_h *e = DPH(h);
		if (e->addr && e->addr != mine)
			continue; /* bound to another of the port's addresses */
		if (e->peer_port) {
			if (e->peer_port == sport && e->peer_ip == sip)
				return h;
			continue;
		}
		nfree++;
		if (!pick)
			pick = h;
	}
	if (nfree > 1) {
		uint32_t k = (rte_be_to_cpu_32(sip) ^ sport) % nfree;
		for (uint32_t i = first; i != TL_NIL; i = DPH(&d->hs[i])->chain) {
			struct tl_hslot *h = &d->hs[i];
			if (DPH(h)->peer_port || (DPH(h)->addr && DPH(h)->addr != mine))
				continue;
			if (k-- == 0)
				return h;
		}
	}
	return pick;
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
	if (!(m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_GOOD) && rte_raw_cksum(ip, hl) != 0xffff) {
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
	/* A UDP checksum summed with itself comes to 0xffff (returned as
	 * such: UDP never sends 0 for a computed sum). */
	if (u->dgram_cksum && !(m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_GOOD) &&
	    rte_ipv4_udptcp_cksum(ip, u) != 0xffff) {
		d->st.drop_bad++;
		return;
	}
	learn(d, ip->src_addr, &eh->src_addr);
	struct tl_hslot *h = demux(d, u->dst_port, mine, ip->src_addr, u->src_port);
	if (!h) {
		d->st.drop_no_port++;
		return;
	}
	struct dp_h *e = DPH(h);
	if (e->qlen >= DP_RCVQ) {
		d->st.drop_rcvq++;
		return;
	}
	struct dp_meta *mt = dp_meta(m);
	mt->next = NULL;
	mt->sip = ip->src_addr;
	mt->dip = ip->dst_addr;
	mt->sport = u->src_port;
	mt->dport = u->dst_port;
	mt->off = (uint16_t)((uint8_t *)(u + 1) - rte_pktmbuf_mtod(m, uint8_t *));
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

void tl__dp_input(struct tl_drv *d, struct rte_mbuf *m)
{
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	/* One segment: the pools' buffers hold a whole standard frame. */
	if (m->nb_segs != 1 || m->data_len < sizeof *eh) {
		d->st.drop_bad++;
		goto free;
	}
	if (!rte_is_same_ether_addr(&eh->dst_addr, &d->mac) &&
	    !rte_is_broadcast_ether_addr(&eh->dst_addr)) {
		d->st.drop_not_ours++;
		goto free;
	}
	uint16_t t = rte_be_to_cpu_16(eh->ether_type);
	if (t == RTE_ETHER_TYPE_IPV4) {
		uint64_t q = d->st.rx_datagrams;
		ipv4_input(d, m, eh);
		if (d->st.rx_datagrams != q)
			return; /* queued on its handle */
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
 * in either byte order), and a sum folded to 16 bits. */
static inline uint32_t halves(uint32_t v)
{
	return (v & 0xffff) + (v >> 16);
}

static inline uint16_t fold(uint32_t s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

int tl__dp_build(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, struct rte_mbuf *m)
{
	struct dp_h *e = DPH(h);
	uint32_t dip, sip = e->addr ? d->ips[e->addr - 1] : d->ip;
	uint16_t dport;
	if (o->u.dg.addr.sa.sa_family == AF_INET) {
		dip = o->u.dg.addr.in.sin_addr.s_addr;
		dport = o->u.dg.addr.in.sin_port;
	} else if (o->u.dg.addr.sa.sa_family == AF_INET6) {
		return -EAFNOSUPPORT;
	} else if (e->peer_port) {
		dip = e->peer_ip;
		dport = e->peer_port;
	} else {
		return -EDESTADDRREQ;
	}
	if (o->u.dg.local.sa.sa_family == AF_INET6)
		return -EINVAL;
	if (o->u.dg.local.sa.sa_family == AF_INET &&
	    o->u.dg.local.in.sin_addr.s_addr != INADDR_ANY) {
		if (!tl__dp_mine(d, o->u.dg.local.in.sin_addr.s_addr))
			return -EADDRNOTAVAIL;
		sip = o->u.dg.local.in.sin_addr.s_addr;
	}
	if (o->u.dg.len > DP_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (!dport)
		return -EINVAL;
	struct rte_ether_addr dmac;
	if (tl__dp_mine(d, dip)) {
		dmac = d->mac;
	} else if (dip == 0xffffffffu) {
		memset(&dmac, 0xff, sizeof dmac);
	} else {
		struct dp_neigh *n = tl__dp_neigh(d, dip);
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
	ip->hdr_checksum = (uint16_t)~fold(w_vt + ip->total_length + w_tp + addrs);
	uint32_t s = addrs + w_pr + 2u * u->dgram_len + u->src_port + u->dst_port;
	if (len)
		s += rte_raw_cksum(o->u.dg.buf, len);
	uint16_t c = (uint16_t)~fold(s);
	u->dgram_cksum = c ? c : 0xffff;
	return 0;
}
