/* tests/test_dpdk.c: the DPDK driver on a port made of two rings: frames put on the wire by hand and read off it: ARP, IPv6 neighbour discovery, neighbours, every drop counted, a full TX ring as backpressure, a full handle queue. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <CUnit/Basic.h>
#include <rte_arp.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_eth_ring.h>
#include <rte_eal.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <rte_udp.h>
#include "harness.h"
#include "dpdk_frames.h"
#include "dpdk.h"
#include "turnloop/runtime.h"
#include "turnloop/stats.h"

/*
 * The test sets the EAL up itself and makes its port from two rings
 * (rte_eth_from_rings): what it puts on `in` the loop receives, and what
 * the loop sends waits on `out` until the test takes it. The loops use
 * that EAL and port (TL_DPDK unset, TL_DPDK_PORT set here), one queue
 * pair, so one loop at a time.
 */

static struct rte_ring *in, *out;
static uint16_t port_id;
static struct rte_mempool *tp; /* the test's own frames */
static struct rte_ether_addr port_mac;
static const struct rte_ether_addr peer_mac = {{0x02, 0, 0, 0, 0x42, 0x01}};
static struct dpf_wire wire; /* tp, port_mac and peer_mac, once set up */
#define LOOP_IP 0x7f000001u /* TL_DPDK_ADDR's first address */
#define PEER_IP 0x0a090909u

static tl_loop *new_loop(h_ctx *c)
{
	tl_loop *l = h_loop();
	h_ctx_init(c, l);
	return l;
}

static struct tl_dpdk_stats st(tl_loop *l)
{
	struct tl_dpdk_stats s;
	memset(&s, 0, sizeof s);
	H_EQ(tl__dpdk_stats(l, &s), 0);
	return s;
}

/* Take every frame off the wire (what the loop sent since its last poll). */
static unsigned take(struct rte_mbuf **m, unsigned max)
{
	return rte_ring_dequeue_burst(out, (void **)m, max, NULL);
}

static void put(struct rte_mbuf *m)
{
	H_EQ(rte_ring_enqueue(in, m), 0);
}

/* A UDP frame from PEER_IP:sport to dip:dport with payload pay[0..len);
 * how spoils it (dpf_udp4 says how). */
static struct rte_mbuf *udp_frame(uint32_t dip, uint16_t sport, uint16_t dport, const void *pay,
				  uint16_t len, int how)
{
	return dpf_udp4(&wire, PEER_IP, dip, sport, dport, pay, len, how);
}

static struct rte_mbuf *arp_frame(uint16_t op, uint32_t sip, uint32_t tip)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(tp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(m, 14 + 28);
	struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
	eh->src_addr = peer_mac;
	if (op == RTE_ARP_OP_REQUEST)
		memset(&eh->dst_addr, 0xff, 6);
	else
		eh->dst_addr = port_mac;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
	ah->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
	ah->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ah->arp_hlen = 6;
	ah->arp_plen = 4;
	ah->arp_opcode = rte_cpu_to_be_16(op);
	ah->arp_data.arp_sha = peer_mac;
	ah->arp_data.arp_sip = htonl(sip);
	ah->arp_data.arp_tha = op == RTE_ARP_OP_REQUEST ? (struct rte_ether_addr){{0}} : port_mac;
	ah->arp_data.arp_tip = htonl(tip);
	return m;
}

static tl_handle bind_port(tl_loop *l, uint16_t port)
{
	tl_addr a;
	memset(&a, 0, sizeof a);
	a.in.sin_family = AF_INET;
	a.in.sin_addr.s_addr = htonl(LOOP_IP);
	a.in.sin_port = htons(port);
	tl_handle h = TL_HANDLE_NONE;
	H_EQ(tl_udp_bind(l, &a, &h), 0);
	return h;
}

static tl_addr peer_addr(uint32_t ip, uint16_t port)
{
	tl_addr a;
	memset(&a, 0, sizeof a);
	a.in.sin_family = AF_INET;
	a.in.sin_addr.s_addr = htonl(ip);
	a.in.sin_port = htons(port);
	return a;
}

/* The loop answers an ARP request for its address; the answer is on the
 * wire, addressed to the asker, and a later send to the asker needs no
 * question of its own. */
static void test_arp_answered(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	put(arp_frame(RTE_ARP_OP_REQUEST, PEER_IP, LOOP_IP));
	h_turn(&c, 0);
	struct rte_mbuf *m[8];
	unsigned n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[0], struct rte_ether_hdr *);
		struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
		H_EQ(rte_be_to_cpu_16(eh->ether_type), RTE_ETHER_TYPE_ARP);
		H_EQ(rte_be_to_cpu_16(ah->arp_opcode), RTE_ARP_OP_REPLY);
		H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &peer_mac), "reply to the asker");
		H_TRUE(rte_is_same_ether_addr(&ah->arp_data.arp_sha, &port_mac), "the port's MAC");
		H_EQ(ntohl(ah->arp_data.arp_sip), LOOP_IP);
		H_EQ(ntohl(ah->arp_data.arp_tip), PEER_IP);
	}
	rte_pktmbuf_free_bulk(m, n);
	/* The asker was learnt: a datagram to it goes out at once, to its MAC. */
	tl_handle h = bind_port(l, 5300);
	tl_addr to = peer_addr(PEER_IP, 9);
	tl_op op;
	H_EQ(tl_udp_send(l, h, "hi", 2, &to, 1, &op), 0);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 2);
	n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[0], struct rte_ether_hdr *);
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
		struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
		H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &peer_mac), "sent to the learnt MAC");
		H_EQ(ntohl(ip->src_addr), LOOP_IP);
		H_EQ(ntohs(u->src_port), 5300);
		H_EQ(ntohs(u->dst_port), 9);
		H_EQ(rte_raw_cksum(ip, 20), 0xffff);
		H_EQ(rte_ipv4_udptcp_cksum(ip, u), 0xffff);
		H_TRUE(!memcmp(u + 1, "hi", 2), "payload");
	}
	rte_pktmbuf_free_bulk(m, n);
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.arp_in, 1);
	H_EQ(s.arp_out, 1);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A send to an address not learnt yet asks by ARP and waits; the answer
 * sends it. One never answered ends with -EHOSTUNREACH after the tries. */
static void test_neighbour_wait(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle h = bind_port(l, 5301);
	tl_addr to = peer_addr(PEER_IP, 7), lost = peer_addr(0x0a060606u, 7);
	tl_op op, op2;
	H_EQ(tl_udp_send(l, h, "abc", 3, &to, 1, &op), 0);
	H_EQ(tl_udp_send(l, h, "x", 1, &lost, 2, &op2), 0);
	h_turn(&c, 0);
	struct rte_mbuf *m[8];
	unsigned n = take(m, 8);
	H_EQ(n, 2); /* two questions, no datagram */
	for (unsigned k = 0; k < n; k++) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
		H_EQ(rte_be_to_cpu_16(eh->ether_type), RTE_ETHER_TYPE_ARP);
		H_TRUE(rte_is_broadcast_ether_addr(&eh->dst_addr), "asked to everyone");
	}
	rte_pktmbuf_free_bulk(m, n);
	H_EQ(h_find_term(&c.log, op), -1);
	put(arp_frame(RTE_ARP_OP_REPLY, PEER_IP, LOOP_IP));
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 3);
	/* Only the answered one went out; the other keeps asking. */
	uint64_t t0 = h_wall_ns();
	i = h_wait_op_ms(&c, op2, 3000);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -EHOSTUNREACH);
	H_TRUE(h_wall_ns() - t0 > 500 * H_MS, "gave up only after its tries");
	n = take(m, 8);
	unsigned udp = 0, arp = 0;
	for (unsigned k = 0; k < n; k++) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
		if (rte_be_to_cpu_16(eh->ether_type) == RTE_ETHER_TYPE_ARP)
			arp++;
		else
			udp++;
	}
	rte_pktmbuf_free_bulk(m, n);
	/* The loop's own poll may have taken some of its frames back off the
	 * ring (dropped as not its own): count them through the stats too. */
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.unreachable, 1);
	H_TRUE(s.arp_out >= 5, "%llu ARP requests", (unsigned long long)s.arp_out);
	H_TRUE(udp <= 1, "%u datagrams", udp);
	(void)arp;
	h_close(&c, h, 3);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Each kind of bad frame is dropped and counted under its reason, none
 * reaches the handle; a good one after them does, with its source. */
static void test_drops_counted(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle h = bind_port(l, 5302);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, h, 1, &r), 0);
	struct tl_dpdk_stats s0 = st(l);
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 1)); /* IPv4 checksum */
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 2)); /* UDP checksum */
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 3)); /* a fragment */
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 4)); /* another MAC */
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 5)); /* UDP length too long */
	put(udp_frame(LOOP_IP, 40000, 5302, "bad", 3, 6)); /* another EtherType */
	put(udp_frame(0x0a000001u, 40000, 5302, "bad", 3, 0)); /* another IP */
	put(udp_frame(LOOP_IP, 40000, 5399, "bad", 3, 0)); /* no handle */
	put(udp_frame(LOOP_IP, 40001, 5302, "good", 4, 0));
	H_TRUE(h_wait_count(&c, 1, 2000), "the good datagram arrived");
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, r, 0), 1);
	int i = h_find_op(&c.log, r, 0);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 4);
		H_EQ(ntohl(c.log.v[i].u.recv.from.in.sin_addr.s_addr), PEER_IP);
		H_EQ(ntohs(c.log.v[i].u.recv.from.in.sin_port), 40001);
	}
	h_release_leases(&c, 0);
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.drop_bad - s0.drop_bad, 3);
	H_EQ(s.drop_frag - s0.drop_frag, 1);
	H_EQ(s.drop_not_ours - s0.drop_not_ours, 2);
	H_EQ(s.drop_proto - s0.drop_proto, 1);
	H_EQ(s.drop_no_port - s0.drop_no_port, 1);
	H_EQ(s.rx_datagrams - s0.rx_datagrams, 1);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Checksums over every length of payload 0..40 (so every tail the
 * driver's sum has: 8-byte steps, then 4, 2 and an odd byte): received
 * datagrams whose IPv4 and UDP checksums are right are taken with their
 * bytes, those with either spoiled are dropped and counted; a datagram of
 * each length sent back carries checksums that DPDK's own functions
 * accept. */
static void test_checksums_every_length(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle h = bind_port(l, 5303);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, h, 1, &r), 0);
	struct tl_dpdk_stats s0 = st(l);
	uint8_t pay[41];
	for (int i = 0; i < 41; i++)
		pay[i] = (uint8_t)(0xf1 - i * 37);
	for (uint16_t n = 0; n <= 40; n++) {
		uint32_t from = c.log.n;
		put(udp_frame(LOOP_IP, 40000, 5303, pay, n, 1));
		put(udp_frame(LOOP_IP, 40000, 5303, pay, n, 2));
		put(udp_frame(LOOP_IP, 40000 + n, 5303, pay, n, 0));
		if (!h_wait_count(&c, from + 1, 2000)) {
			H_TRUE(0, "the right datagram arrived");
			break;
		}
		h_idle(&c, 2);
		H_EQ(h_count_op(&c.log, r, from), 1);
		const tl_completion *x = &c.log.v[from];
		H_EQ(x->result, n);
		H_EQ(ntohs(x->u.recv.from.in.sin_port), 40000 + n);
		if (n) { /* a pooled receive: the payload in a lease */
			H_TRUE(x->flags & TL_F_LEASE, "a lease");
			if (x->flags & TL_F_LEASE)
				H_TRUE(!memcmp(x->u.recv.lease.data, pay, n), "the payload");
		}
		h_release_leases(&c, from);
	}
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.drop_bad - s0.drop_bad, 82);
	H_EQ(s.rx_datagrams - s0.rx_datagrams, 41);
	/* The sender was learnt from its datagrams: each send goes at once. */
	tl_addr to = peer_addr(PEER_IP, 9);
	for (uint16_t n = 0; n <= 40; n++) {
		tl_op op;
		H_EQ(tl_udp_send(l, h, pay, n, &to, 100 + n, &op), 0);
		int i = h_wait_op(&c, op);
		if (i >= 0)
			H_EQ(c.log.v[i].result, n);
		struct rte_mbuf *m[4];
		unsigned got = take(m, 4);
		H_EQ(got, 1);
		if (got == 1) {
			struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[0], struct rte_ether_hdr *);
			struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
			struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
			H_EQ(rte_raw_cksum(ip, 20), 0xffff);
			H_EQ(rte_ipv4_udptcp_cksum(ip, u), 0xffff);
			H_EQ(rte_be_to_cpu_16(u->dgram_len), 8 + n);
			H_TRUE(!memcmp(u + 1, pay, n), "the payload sent");
		}
		rte_pktmbuf_free_bulk(m, got);
	}
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A full TX ring holds sends back (counted) and they go, in order, when it
 * has room: none is lost. */
static void test_tx_full_is_backpressure(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle a = bind_port(l, 5303);
	put(arp_frame(RTE_ARP_OP_REPLY, PEER_IP, LOOP_IP)); /* the peer is known */
	h_turn(&c, 0);
	/* Fill the TX ring, as a port whose wire is busy. */
	unsigned filled = 0;
	for (;;) {
		struct rte_mbuf *m = udp_frame(PEER_IP, 1, 1, "x", 1, 0);
		if (rte_ring_enqueue(out, m) != 0) {
			rte_pktmbuf_free(m);
			break;
		}
		filled++;
	}
	H_TRUE(filled > 100, "ring filled with %u", filled);
	tl_addr to = peer_addr(PEER_IP, 9);
	enum { N = 40 };
	tl_op s[N];
	static uint32_t pay[N];
	for (int k = 0; k < N; k++) {
		pay[k] = (uint32_t)k;
		H_EQ(tl_udp_send(l, a, &pay[k], 4, &to, 100 + (uint64_t)k, &s[k]), 0);
	}
	h_idle(&c, 20);
	H_TRUE(st(l).tx_full >= 1, "the ring refused a burst");
	for (int k = 0; k < N; k++)
		H_EQ(h_find_term(&c.log, s[k]), -1);
	/* The wire drains: every send completes, and the frames are on the
	 * ring in the order sent. */
	struct rte_mbuf *m[64];
	unsigned n, junk = 0;
	while ((n = take(m, 64)) > 0) {
		junk += n;
		rte_pktmbuf_free_bulk(m, n);
	}
	H_EQ(junk, filled);
	for (int k = 0; k < N; k++) {
		int i = h_wait_op(&c, s[k]);
		if (i >= 0)
			H_EQ(c.log.v[i].result, 4);
	}
	uint32_t want = 0;
	while ((n = take(m, 64)) > 0) {
		for (unsigned k = 0; k < n; k++) {
			uint32_t got;
			memcpy(&got, rte_pktmbuf_mtod_offset(m[k], uint8_t *, 42), 4);
			H_EQ(got, want);
			want++;
		}
		rte_pktmbuf_free_bulk(m, n);
	}
	H_EQ(want, N);
	h_close(&c, a, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* The link goes down: the loop stops polling the port (frames stay in the
 * RX ring, sends wait); back up, both go on and nothing was lost. */
static void test_link_down_stops_polling(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle h = bind_port(l, 5306);
	put(arp_frame(RTE_ARP_OP_REPLY, PEER_IP, LOOP_IP));
	h_turn(&c, 0);
	struct rte_mbuf *m[8];
	rte_pktmbuf_free_bulk(m, take(m, 8));
	H_EQ(rte_eth_dev_set_link_down(port_id), 0);
	h_idle(&c, 250); /* the loop looks at the link every 100 ms */
	H_EQ(st(l).link_up, 0);
	tl_op r, s;
	H_EQ(tl_udp_recv_start(l, h, 1, &r), 0);
	put(udp_frame(LOOP_IP, 40003, 5306, "down", 4, 0));
	tl_addr to = peer_addr(PEER_IP, 9);
	H_EQ(tl_udp_send(l, h, "out", 3, &to, 2, &s), 0);
	h_idle(&c, 50);
	H_EQ(h_count_op(&c.log, r, 0), 0);
	H_EQ(h_find_term(&c.log, s), -1);
	H_EQ(rte_ring_count(in), 1);
	H_EQ(take(m, 8), 0);
	H_EQ(rte_eth_dev_set_link_up(port_id), 0);
	int i = h_wait_op(&c, s);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 3);
	uint64_t t0 = h_wall_ns();
	while (h_count_op(&c.log, r, 0) < 1 && h_wall_ns() - t0 < 2000 * H_MS)
		h_turn(&c, 10 * H_MS);
	H_EQ(h_count_op(&c.log, r, 0), 1);
	h_release_leases(&c, 0);
	unsigned n = take(m, 8);
	H_EQ(n, 1);
	rte_pktmbuf_free_bulk(m, n);
	h_close(&c, h, 3);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A handle with no receive keeps 512 datagrams, as a socket buffer does;
 * more are dropped and counted, and a receive then gets the first ones. */
static void test_handle_queue_full(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_handle h = bind_port(l, 5305);
	for (int round = 0; round < 3; round++) {
		for (int k = 0; k < 200; k++) {
			uint16_t v = (uint16_t)(round * 200 + k);
			put(udp_frame(LOOP_IP, 40000, 5305, &v, 2, 0));
		}
		h_turn(&c, 0);
		h_turn(&c, 0);
	}
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.drop_rcvq, 600 - 512);
	uint8_t buf[8];
	tl_op r;
	H_EQ(tl_udp_recv(l, h, buf, sizeof buf, 1, &r), 0);
	int i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 2);
		uint16_t v;
		memcpy(&v, buf, 2);
		H_EQ(v, 0);
	}
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- IPv6 and neighbour discovery ---- */

/* TL_DPDK_ADDR's IPv6 address, a peer, and one nobody answers for. */
static const uint8_t LOOP6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
static const uint8_t PEER6[16] = {0x20, 0x01, 0x0d, 0xb8, [14] = 0x12, [15] = 0x34};
static const uint8_t LOST6[16] = {0x20, 0x01, 0x0d, 0xb8, [14] = 0x66, [15] = 0x66};

/* The ones' complement sum of IPv6's pseudo-header and l4[0..len), byte
 * by byte (the test's own, not the driver's): 0xffff over a message
 * whose checksum is right. */
static uint16_t sum6(const uint8_t *src, const uint8_t *dst, uint8_t nh, const uint8_t *l4,
		     uint32_t len)
{
	uint32_t s = 0;
	for (int k = 0; k < 16; k += 2)
		s += (uint32_t)(src[k] << 8 | src[k + 1]) + (uint32_t)(dst[k] << 8 | dst[k + 1]);
	s += (len >> 16) + (len & 0xffff) + nh;
	for (uint32_t k = 0; k < len; k += 2)
		s += (uint32_t)l4[k] << 8 | (k + 1 < len ? l4[k + 1] : 0);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* Set the checksum at l4[at] (big-endian) so that the sum comes right. */
static void seal6(const uint8_t *src, const uint8_t *dst, uint8_t nh, uint8_t *l4, uint32_t len,
		  uint32_t at)
{
	l4[at] = l4[at + 1] = 0;
	uint16_t c = (uint16_t)~sum6(src, dst, nh, l4, len);
	if (nh == IPPROTO_UDP && !c)
		c = 0xffff;
	l4[at] = (uint8_t)(c >> 8);
	l4[at + 1] = (uint8_t)c;
}

/* An IPv6 frame from src to dst (eth destination edst): dpf_ip6. */
static struct rte_mbuf *ip6_frame(const uint8_t *src, const uint8_t *dst,
				  const struct rte_ether_addr *edst, uint8_t nh, uint8_t hop,
				  const uint8_t *l4, uint16_t len)
{
	return dpf_ip6(&wire, src, dst, edst, nh, hop, l4, len);
}

/* The solicited-node group of a (ff02::1:ffXX:XXXX) and its MAC. */
static void snm(const uint8_t *a, uint8_t *g, struct rte_ether_addr *mac)
{
	static const uint8_t pre[13] = {0xff, 0x02, [11] = 1, [12] = 0xff};
	memcpy(g, pre, 13);
	memcpy(g + 13, a + 13, 3);
	*mac = (struct rte_ether_addr){{0x33, 0x33, g[12], g[13], g[14], g[15]}};
}

/* A UDP datagram from [PEER6]:sport to [dst]:dport; how spoils it: 1 the
 * checksum, 2 a zero checksum (len even), 3 a hop-by-hop options header before it,
 * 4 a fragment header before it. */
static struct rte_mbuf *udp6_frame(const uint8_t *dst, uint16_t sport, uint16_t dport,
				   const void *pay, uint16_t len, int how)
{
	uint8_t b[1600];
	uint32_t ext = how >= 3 ? 8 : 0;
	uint8_t *u = b + ext;
	u[0] = (uint8_t)(sport >> 8), u[1] = (uint8_t)sport;
	u[2] = (uint8_t)(dport >> 8), u[3] = (uint8_t)dport;
	u[4] = (uint8_t)((8 + len) >> 8), u[5] = (uint8_t)(8 + len);
	memcpy(u + 8, pay, len);
	seal6(PEER6, dst, IPPROTO_UDP, u, 8 + len, 6);
	if (how == 1)
		u[6] ^= 0x01;
	if (how == 2) {
		/* No checksum, on a datagram whose checksum would be 0xffff
		 * (its last two bytes set so): the sum over it comes right
		 * with the field 0 too, so only the rule that IPv6 has no
		 * "no checksum" drops it. len is even. */
		u[6] = u[7] = 0;
		u[8 + len - 2] = u[8 + len - 1] = 0;
		uint16_t adj = (uint16_t)(0xffff - sum6(PEER6, dst, IPPROTO_UDP, u, 8u + len));
		u[8 + len - 2] = (uint8_t)(adj >> 8);
		u[8 + len - 1] = (uint8_t)adj;
		CU_ASSERT_EQUAL(sum6(PEER6, dst, IPPROTO_UDP, u, 8u + len), 0xffff);
	}
	uint8_t nh = IPPROTO_UDP;
	if (how == 3) { /* hop-by-hop: next UDP, length 0 (8 bytes), PadN */
		const uint8_t hbh[8] = {IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0};
		memcpy(b, hbh, 8);
		nh = 0;
	} else if (how == 4) { /* a fragment header, offset 0, more fragments */
		const uint8_t fr[8] = {IPPROTO_UDP, 0, 0, 1, 0, 0, 0, 7};
		memcpy(b, fr, 8);
		nh = 44;
	}
	return ip6_frame(PEER6, dst, &port_mac, nh, 64, b, (uint16_t)(ext + 8 + len));
}

/* A Neighbour Solicitation for target from src (with a source link-layer
 * option unless src is ::), to dst (eth edst); hop limit hop; bad 1: a
 * wrong checksum. */
static struct rte_mbuf *ns_frame(const uint8_t *src, const uint8_t *dst,
				 const struct rte_ether_addr *edst, const uint8_t *target,
				 uint8_t hop, int bad)
{
	static const uint8_t unspec[16];
	uint8_t b[32] = {135, 0};
	memcpy(b + 8, target, 16);
	uint16_t len = 24;
	if (memcmp(src, unspec, 16)) {
		b[24] = 1, b[25] = 1;
		memcpy(b + 26, peer_mac.addr_bytes, 6);
		len = 32;
	}
	seal6(src, dst, IPPROTO_ICMPV6, b, len, 2);
	if (bad)
		b[3] ^= 0x10;
	return ip6_frame(src, dst, edst, IPPROTO_ICMPV6, hop, b, len);
}

/* A solicited Neighbour Advertisement for target (at peer_mac) to LOOP6. */
static struct rte_mbuf *na_frame(const uint8_t *target)
{
	uint8_t b[32] = {136, 0, 0, 0, 0x60};
	memcpy(b + 8, target, 16);
	b[24] = 2, b[25] = 1;
	memcpy(b + 26, peer_mac.addr_bytes, 6);
	seal6(target, LOOP6, IPPROTO_ICMPV6, b, 32, 2);
	return ip6_frame(target, LOOP6, &port_mac, IPPROTO_ICMPV6, 255, b, 32);
}

static tl_addr addr6_of(const uint8_t *ip, uint16_t port)
{
	tl_addr a;
	memset(&a, 0, sizeof a);
	a.in6.sin6_family = AF_INET6;
	memcpy(&a.in6.sin6_addr, ip, 16);
	a.in6.sin6_port = htons(port);
	return a;
}

/* The IPv6 header and ICMPv6 message of frame m: NULL unless it is one. */
static struct rte_ipv6_hdr *icmp6_of(struct rte_mbuf *m, uint8_t **msg)
{
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	if (rte_be_to_cpu_16(eh->ether_type) != RTE_ETHER_TYPE_IPV6)
		return NULL;
	struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
	if (ip->proto != IPPROTO_ICMPV6)
		return NULL;
	*msg = (uint8_t *)(ip + 1);
	return ip;
}

/* Check that m is the loop's Neighbour Advertisement for LOOP6 to PEER6,
 * solicited: addresses, hop limit 255, checksum, flags, target and the
 * target link-layer option. */
static void check_na(struct rte_mbuf *m)
{
	uint8_t *na = NULL;
	struct rte_ipv6_hdr *ip = icmp6_of(m, &na);
	H_TRUE_FATAL(ip != NULL, "not an ICMPv6 frame");
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	uint32_t len = ntohs(ip->payload_len);
	H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &peer_mac), "to the asker's MAC");
	H_TRUE(rte_is_same_ether_addr(&eh->src_addr, &port_mac), "from the port's MAC");
	H_TRUE(!memcmp(ip->src_addr, LOOP6, 16) && !memcmp(ip->dst_addr, PEER6, 16),
	       "from the target to the asker");
	H_EQ(ip->hop_limits, 255);
	H_EQ(len, 32);
	H_EQ(sum6(ip->src_addr, ip->dst_addr, IPPROTO_ICMPV6, na, len), 0xffff);
	H_EQ(na[0], 136);
	H_EQ(na[1], 0);
	H_EQ(na[4], 0x60); /* solicited, override, not a router */
	H_TRUE(!memcmp(na + 8, LOOP6, 16), "target: the port's address");
	H_EQ(na[24], 2);
	H_EQ(na[25], 1);
	H_TRUE(!memcmp(na + 26, port_mac.addr_bytes, 6), "target link-layer: the port's MAC");
}

/* Neighbour Solicitations for the port's IPv6 address, to its
 * solicited-node group and to the address itself, are answered with a
 * right Advertisement; the asker is learnt from its source link-layer
 * option, so a datagram to it goes out at once, to its MAC, with hop
 * limit 64 and a right UDP checksum. One for another address, one with a
 * bad checksum and one with a hop limit under 255 are dropped, counted,
 * unanswered; from :: (duplicate address detection) the answer goes to
 * all nodes. */
static void test_nd_answered(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	struct tl_dpdk_stats s0 = st(l);
	uint8_t g[16];
	struct rte_ether_addr gmac;
	snm(LOOP6, g, &gmac);
	put(ns_frame(PEER6, g, &gmac, LOOP6, 255, 0));
	h_turn(&c, 0);
	struct rte_mbuf *m[8];
	unsigned n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1)
		check_na(m[0]);
	rte_pktmbuf_free_bulk(m, n);
	put(ns_frame(PEER6, LOOP6, &port_mac, LOOP6, 255, 0));
	h_turn(&c, 0);
	n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1)
		check_na(m[0]);
	rte_pktmbuf_free_bulk(m, n);
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.nd_in - s0.nd_in, 2);
	H_EQ(s.nd_out - s0.nd_out, 2);
	/* Not answered: another target, a bad checksum, a hop limit of 254
	 * (a router passed it on). */
	uint8_t g2[16];
	struct rte_ether_addr gmac2;
	snm(LOST6, g2, &gmac2);
	put(ns_frame(PEER6, LOOP6, &port_mac, LOST6, 255, 0));
	put(ns_frame(PEER6, g, &gmac, LOOP6, 255, 1));
	put(ns_frame(PEER6, g, &gmac, LOOP6, 254, 0));
	put(ns_frame(PEER6, g2, &gmac2, LOST6, 255, 0)); /* another group: not ours */
	h_turn(&c, 0);
	h_turn(&c, 0);
	n = take(m, 8);
	H_EQ(n, 0);
	rte_pktmbuf_free_bulk(m, n);
	struct tl_dpdk_stats s1 = st(l);
	H_EQ(s1.drop_not_ours - s.drop_not_ours, 2);
	H_EQ(s1.drop_bad - s.drop_bad, 2);
	H_EQ(s1.nd_out, s.nd_out);
	/* Duplicate address detection: from ::, to the group, no option. */
	static const uint8_t unspec[16];
	put(ns_frame(unspec, g, &gmac, LOOP6, 255, 0));
	h_turn(&c, 0);
	n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1) {
		uint8_t *na = NULL;
		struct rte_ipv6_hdr *ip = icmp6_of(m[0], &na);
		static const uint8_t all[16] = {0xff, 0x02, [15] = 1};
		H_TRUE_FATAL(ip != NULL, "an ICMPv6 frame");
		H_TRUE(!memcmp(ip->dst_addr, all, 16), "to all nodes");
		H_EQ(na[0], 136);
		H_EQ(na[4], 0x20); /* override, not solicited */
		H_EQ(sum6(ip->src_addr, ip->dst_addr, IPPROTO_ICMPV6, na, ntohs(ip->payload_len)),
		     0xffff);
	}
	rte_pktmbuf_free_bulk(m, n);
	/* The asker was learnt from its option. */
	tl_addr me = addr6_of(LOOP6, 5310), to = addr6_of(PEER6, 9);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l, &me, &h), 0);
	tl_op op;
	H_EQ(tl_udp_send(l, h, "six", 3, &to, 1, &op), 0);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 3);
	n = take(m, 8);
	H_EQ(n, 1);
	if (n == 1) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[0], struct rte_ether_hdr *);
		struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
		uint8_t *u = (uint8_t *)(ip + 1);
		H_EQ(rte_be_to_cpu_16(eh->ether_type), RTE_ETHER_TYPE_IPV6);
		H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &peer_mac), "sent to the learnt MAC");
		H_EQ(ntohl(ip->vtc_flow) >> 28, 6);
		H_EQ(ip->proto, IPPROTO_UDP);
		H_EQ(ip->hop_limits, 64);
		H_EQ(ntohs(ip->payload_len), 11);
		H_TRUE(!memcmp(ip->src_addr, LOOP6, 16) && !memcmp(ip->dst_addr, PEER6, 16),
		       "addresses");
		H_EQ(u[0] << 8 | u[1], 5310);
		H_EQ(u[2] << 8 | u[3], 9);
		H_EQ(u[4] << 8 | u[5], 11);
		H_TRUE(u[6] || u[7], "a UDP checksum (mandatory in IPv6)");
		H_EQ(sum6(ip->src_addr, ip->dst_addr, IPPROTO_UDP, u, 11), 0xffff);
		H_TRUE(!memcmp(u + 8, "six", 3), "payload");
	}
	rte_pktmbuf_free_bulk(m, n);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A send to an IPv6 address not learnt yet asks by a Neighbour
 * Solicitation (to the target's solicited-node group, from the send's
 * source, with the port's link-layer address, a right checksum) and
 * waits; the Advertisement sends it. One never answered asks again and
 * ends with -EHOSTUNREACH after the tries, as ARP's do. */
static void test_nd_learned(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	struct tl_dpdk_stats s0 = st(l);
	tl_addr any = addr6_of((const uint8_t[16]){0}, 5311);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l, &any, &h), 0);
	uint8_t peer[16];
	memcpy(peer, PEER6, 16);
	peer[13] = 0x77; /* not learnt by another test */
	tl_addr to = addr6_of(peer, 7), lost = addr6_of(LOST6, 7);
	tl_op op, op2;
	H_EQ(tl_udp_send(l, h, "abc", 3, &to, 1, &op), 0);
	H_EQ(tl_udp_send(l, h, "x", 1, &lost, 2, &op2), 0);
	h_turn(&c, 0);
	struct rte_mbuf *m[8];
	unsigned n = take(m, 8);
	H_EQ(n, 2); /* two solicitations, no datagram */
	for (unsigned k = 0; k < n; k++) {
		uint8_t *ns = NULL;
		struct rte_ipv6_hdr *ip = icmp6_of(m[k], &ns);
		H_TRUE_FATAL(ip != NULL, "an ICMPv6 frame");
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
		const uint8_t *target = k == 0 ? peer : LOST6;
		uint8_t g[16];
		struct rte_ether_addr gmac;
		snm(target, g, &gmac);
		H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &gmac), "to the group's MAC");
		H_TRUE(!memcmp(ip->dst_addr, g, 16), "to the solicited-node group");
		H_TRUE(!memcmp(ip->src_addr, LOOP6, 16), "from the port's address");
		H_EQ(ip->hop_limits, 255);
		H_EQ(ns[0], 135);
		H_TRUE(!memcmp(ns + 8, target, 16), "the target asked");
		H_EQ(ns[24], 1);
		H_TRUE(!memcmp(ns + 26, port_mac.addr_bytes, 6), "source link-layer: the port's MAC");
		H_EQ(sum6(ip->src_addr, ip->dst_addr, IPPROTO_ICMPV6, ns, ntohs(ip->payload_len)),
		     0xffff);
	}
	rte_pktmbuf_free_bulk(m, n);
	H_EQ(h_find_term(&c.log, op), -1);
	put(na_frame(peer));
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 3);
	n = take(m, 8);
	unsigned udp = 0;
	for (unsigned k = 0; k < n; k++) {
		struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
		struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
		if (ip->proto != IPPROTO_UDP)
			continue;
		udp++;
		H_TRUE(rte_is_same_ether_addr(&eh->dst_addr, &peer_mac), "to the advertised MAC");
		H_TRUE(!memcmp(ip->dst_addr, peer, 16), "to the peer");
	}
	H_EQ(udp, 1);
	rte_pktmbuf_free_bulk(m, n);
	uint64_t t0 = h_wall_ns();
	i = h_wait_op_ms(&c, op2, 3000);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -EHOSTUNREACH);
	H_TRUE(h_wall_ns() - t0 > 500 * H_MS, "gave up only after its tries");
	rte_pktmbuf_free_bulk(m, take(m, 8));
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.unreachable - s0.unreachable, 1);
	H_TRUE(s.nd_out - s0.nd_out >= 6, "%llu solicitations",
	       (unsigned long long)(s.nd_out - s0.nd_out));
	H_EQ(s.nd_in - s0.nd_in, 1);
	h_close(&c, h, 3);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* IPv6 datagrams: a good one reaches an IPv6 handle with its source and
 * (TL_UDP_PKTINFO) the address it was sent to; a bad UDP checksum and a
 * zero one (invalid in IPv6) are dropped as malformed, a hop-by-hop
 * options header and a fragment header under drop_ext6, another address
 * and a port nobody bound under their reasons. */
static void test_ipv6_drops_counted(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	tl_addr any = addr6_of((const uint8_t[16]){0}, 5312);
	tl_udp_opts pi = {.flags = TL_UDP_PKTINFO};
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind_opts(l, &any, &pi, &h), 0);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, h, 1, &r), 0);
	struct tl_dpdk_stats s0 = st(l);
	put(udp6_frame(LOOP6, 40000, 5312, "bad", 3, 1)); /* UDP checksum */
	put(udp6_frame(LOOP6, 40000, 5312, "bad!", 4, 2)); /* no checksum */
	put(udp6_frame(LOOP6, 40000, 5312, "bad", 3, 3)); /* hop-by-hop options */
	put(udp6_frame(LOOP6, 40000, 5312, "bad", 3, 4)); /* a fragment */
	put(udp6_frame(LOST6, 40000, 5312, "bad", 3, 0)); /* another address */
	put(udp6_frame(LOOP6, 40000, 5399, "bad", 3, 0)); /* no handle */
	put(udp6_frame(LOOP6, 40001, 5312, "good", 4, 0));
	H_TRUE(h_wait_count(&c, 1, 2000), "the good datagram arrived");
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, r, 0), 1);
	int i = h_find_op(&c.log, r, 0);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->result, 4);
		H_EQ(x->u.recv.from.sa.sa_family, AF_INET6);
		H_TRUE(!memcmp(&x->u.recv.from.in6.sin6_addr, PEER6, 16), "from the peer");
		H_EQ(ntohs(x->u.recv.from.in6.sin6_port), 40001);
		H_EQ(x->u.recv.to.sa.sa_family, AF_INET6);
		H_TRUE(!memcmp(&x->u.recv.to.in6.sin6_addr, LOOP6, 16), "to the port's address");
		H_TRUE(x->flags & TL_F_LEASE, "in a lease");
		if (x->flags & TL_F_LEASE)
			H_TRUE(!memcmp(x->u.recv.lease.data, "good", 4), "payload");
	}
	h_release_leases(&c, 0);
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.drop_bad - s0.drop_bad, 2);
	H_EQ(s.drop_ext6 - s0.drop_ext6, 2);
	H_EQ(s.drop_not_ours - s0.drop_not_ours, 1);
	H_EQ(s.drop_no_port - s0.drop_no_port, 1);
	H_EQ(s.rx_datagrams - s0.rx_datagrams, 1);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Frames of a pool with no private area for the driver's notes (a ring
 * port that another program fills), one of them laid at the very start of
 * its buffer: each is copied into an mbuf of the driver's (rx_copied) and
 * comes with its own source and payload, not with the notes written over
 * them. */
static void test_foreign_pool(void)
{
	int fds = h_begin();
	h_ctx c;
	tl_loop *l = new_loop(&c);
	struct rte_mempool *bare = rte_mempool_lookup("bare_frames");
	if (!bare)
		bare = rte_pktmbuf_pool_create("bare_frames", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	CU_ASSERT_PTR_NOT_NULL_FATAL(bare);
	unsigned avail = rte_mempool_avail_count(bare);
	tl_addr any = addr6_of((const uint8_t[16]){0}, 5313);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l, &any, &h), 0);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, h, 1, &r), 0);
	struct tl_dpdk_stats s0 = st(l);
	for (int k = 0; k < 2; k++) {
		struct rte_mbuf *t = udp6_frame(LOOP6, (uint16_t)(40002 + k), 5313, k ? "tail" : "head", 4, 0);
		struct rte_mbuf *m = rte_pktmbuf_alloc(bare);
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		if (k)
			m->data_off = 0; /* the frame where the notes would go */
		char *p = rte_pktmbuf_append(m, t->data_len);
		CU_ASSERT_PTR_NOT_NULL_FATAL(p);
		memcpy(p, rte_pktmbuf_mtod(t, void *), t->data_len);
		rte_pktmbuf_free(t);
		put(m);
	}
	H_TRUE(h_wait_count(&c, 2, 2000), "both datagrams arrived");
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, r, 0), 2);
	for (int k = 0, i = -1; k < 2; k++) {
		i = h_find_op(&c.log, r, (uint32_t)(i + 1));
		if (i < 0)
			break;
		tl_completion *x = &c.log.v[i];
		H_EQ(x->result, 4);
		H_TRUE(!memcmp(&x->u.recv.from.in6.sin6_addr, PEER6, 16), "datagram %d from the peer", k);
		H_EQ(ntohs(x->u.recv.from.in6.sin6_port), 40002 + k);
		if (x->flags & TL_F_LEASE)
			H_TRUE(!memcmp(x->u.recv.lease.data, k ? "tail" : "head", 4), "datagram %d's payload", k);
	}
	h_release_leases(&c, 0);
	struct tl_dpdk_stats s = st(l);
	H_EQ(s.rx_copied - s0.rx_copied, 2);
	H_EQ(s.rx_datagrams - s0.rx_datagrams, 2);
	H_EQ(rte_mempool_avail_count(bare), avail); /* the originals went back */
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- the sharded runtime on the DPDK driver ---- */

static tl_handle rt_h;

static int rt_launch(tl_shard *s, void *arg)
{
	(void)arg;
	tl_loop *l = tl_shard_loop(s);
	tl_addr a = peer_addr(LOOP_IP, 5400);
	tl_op op;
	int r = tl_udp_bind(l, &a, &rt_h);
	return r < 0 ? r : tl_udp_recv_start(l, rt_h, 1, &op);
}

/* Echo each datagram to its sender (the lease goes back when the send
 * ends: its token carries the lease's id). */
static void rt_completion(tl_shard *s, const tl_completion *c)
{
	dpf_echo(tl_shard_loop(s), rt_h, c);
}

/* The sharded runtime runs a shard on the DPDK driver (it has TL_CAP_NET):
 * a datagram put on the wire comes back echoed by the shard, and the
 * shard's frames in, out and dropped reach the live stats region. */
static void test_runtime_shard(void)
{
	int fds = h_begin();
	tl_runtime_config cfg;
	dpf_runtime_config(&cfg, 1);
	cfg.on_launch = rt_launch;
	cfg.on_completion = rt_completion;
	tl_runtime *rt = NULL;
	H_EQ_FATAL(tl_runtime_new(&rt, &cfg), 0);
	H_EQ(tl_runtime_launch(rt), 0);
	put(arp_frame(RTE_ARP_OP_REPLY, PEER_IP, LOOP_IP));
	put(udp_frame(LOOP_IP, 40002, 5400, "shard", 5, 0));
	struct rte_mbuf *m[8];
	unsigned got = 0, arp = 0;
	uint64_t t0 = h_wall_ns();
	while (!got && h_wall_ns() - t0 < 3000 * H_MS) {
		unsigned n = take(m, 8);
		for (unsigned k = 0; k < n; k++) {
			struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
			if (rte_be_to_cpu_16(eh->ether_type) != RTE_ETHER_TYPE_IPV4) {
				arp++;
				continue;
			}
			struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
			struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
			H_EQ(ntohs(u->src_port), 5400);
			H_EQ(ntohs(u->dst_port), 40002);
			H_TRUE(!memcmp(u + 1, "shard", 5), "echoed payload");
			got++;
		}
		rte_pktmbuf_free_bulk(m, n);
		if (!got)
			h_sleep_ms(1);
	}
	H_EQ(got, 1);
	/* One frame for nobody, to be counted as dropped. */
	put(udp_frame(LOOP_IP, 40002, 5999, "lost", 4, 0));
	tl_stats_reader *sr = NULL;
	H_EQ(tl_stats_open(&sr, getpid()), 0);
	tl_stats_shard sh;
	memset(&sh, 0, sizeof sh);
	t0 = h_wall_ns();
	while (sr && h_wall_ns() - t0 < 3000 * H_MS) {
		H_EQ(tl_stats_shard_get(sr, 0, &sh, NULL, 0), 0);
		if (sh.nic_rx >= 3 && sh.nic_tx >= 1 && sh.nic_drops >= 1)
			break;
		h_sleep_ms(5);
	}
	H_TRUE(sh.nic_rx >= 3, "%llu frames in", (unsigned long long)sh.nic_rx);
	H_TRUE(sh.nic_tx >= 1, "%llu frames out", (unsigned long long)sh.nic_tx);
	H_EQ(sh.nic_drops, 1);
	tl_stats_close(sr);
	tl_runtime_stop(rt);
	H_EQ(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	h_end(NULL, fds);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
	/* The EAL on ordinary memory, and a port made of two rings. */
	if (dpf_eal_init("test_dpdk") < 0)
		return 1;
	in = rte_ring_create("t_in", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	out = rte_ring_create("t_out", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	int port = in && out ? rte_eth_from_rings("tl_test", &in, 1, &out, 1, 0) : -1;
	tp = rte_pktmbuf_pool_create("test_frames", 4095, 0, TL_DPDK_MBUF_PRIV, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	if (port < 0 || !tp) {
		fprintf(stderr, "test_dpdk: cannot make the ring port or the pool\n");
		return 1;
	}
	char pn[16];
	snprintf(pn, sizeof pn, "%d", port);
	setenv("TL_DPDK_PORT", pn, 1);
	setenv("TL_DPDK_QUEUES", "1", 1);
	unsetenv("TL_DPDK");
	if (dpf_driver_check("test_dpdk") < 0)
		return 1;
	port_id = (uint16_t)port;
	rte_eth_macaddr_get(port_id, &port_mac);
	wire = (struct dpf_wire){tp, port_mac, peer_mac};
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("dpdk", NULL, NULL);
	CU_add_test(s, "arp_answered", test_arp_answered);
	CU_add_test(s, "neighbour_wait", test_neighbour_wait);
	CU_add_test(s, "drops_counted", test_drops_counted);
	CU_add_test(s, "checksums_every_length", test_checksums_every_length);
	CU_add_test(s, "tx_full_is_backpressure", test_tx_full_is_backpressure);
	CU_add_test(s, "handle_queue_full", test_handle_queue_full);
	CU_add_test(s, "nd_answered", test_nd_answered);
	CU_add_test(s, "nd_learned", test_nd_learned);
	CU_add_test(s, "ipv6_drops_counted", test_ipv6_drops_counted);
	CU_add_test(s, "foreign_pool", test_foreign_pool);
	CU_add_test(s, "link_down_stops_polling", test_link_down_stops_polling);
	CU_add_test(s, "runtime_shard", test_runtime_shard);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
