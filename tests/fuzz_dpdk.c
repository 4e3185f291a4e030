/* tests/fuzz_dpdk.c: libFuzzer target for the DPDK driver's reading of frames off the wire (drivers/dpdk/wire.c, nd.c): the input's frames put on a ring port's receive ring and taken by a loop with IPv4 and IPv6 UDP handles bound, its sends waiting for neighbours, every frame's fate checked. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_udp.h>
#include <sanitizer/asan_interface.h>
#include <turnloop/dgram.h>
#include <turnloop/loop.h>
#include "dpdk.h"
#include "dpdk_eal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * The input is a list of frames, at most MAX_FRAMES; each is
 *
 *   flags(1) length(2, big-endian, at most FRAME_MAX) bytes(length; fewer
 *   where the input ends)
 *
 * put on the wire as they are, except as the flags ask, so that the
 * fuzzer gets past the checks a mutation breaks at once:
 *   bit 0: the destination MAC is the port's;
 *   bit 1: an IPv4 header's checksum is made right (where its length
 *          lies inside the frame);
 *   bit 2: an IPv4 UDP datagram's or an IPv6 UDP or ICMPv6 packet's
 *          checksum is made right (where the lengths lie inside the frame);
 *   bit 3: the frame comes in an mbuf of a pool without the driver's
 *          private area (which the driver copies into one of its own),
 *          laid at the start of its buffer; else in one of a pool with it
 *          (as a port's receive queue has), after the usual headroom;
 *   bit 4: the frame's second half comes in a second segment (made after
 *          the checksums);
 *   bit 5: the bytes are not the frame but a recipe for one (build(),
 *          below): a kind of frame (UDP over IPv4 or IPv6, ARP, a
 *          Neighbour Solicitation or Advertisement, other ICMPv6, another
 *          IPv4 protocol, an IPv6 extension header), its addresses and
 *          port from short lists (ours, the peer's, another host's,
 *          unspecified, groups), a length field made longer or shorter,
 *          the frame cut short, ND options right or malformed, a hop
 *          limit, and a payload, with every checksum right for what is
 *          there: deep paths a byte-level mutation seldom reaches.
 *
 * The loop (the DPDK driver on a port of two rings, one queue pair; the
 * port's addresses 127.0.0.1 and 2001:db8::1) has a UDP handle on
 * 127.0.0.1:53 and one on [2001:db8::1]:54 (one port number is one
 * handle's), each receiving into leases,
 * and a send from each to a neighbour it does not know yet (10.9.9.9,
 * 2001:db8::9): an ARP reply or a Neighbour Advertisement among the
 * frames lets it go. Checked, with abort() on any violation:
 *  - every frame is taken off the ring (rx_frames) and has a fate the
 *    driver counts: the sum of its counters of delivered, dropped and
 *    answered frames is at least the frames' number and at most twice it
 *    (an ARP or ND frame counts as such and, if bad, as dropped too);
 *  - each datagram queued on a handle (rx_datagrams) comes to the host as
 *    a receive completion with its source, no longer than the frame;
 *  - what the driver sends (ARP and ND answers and questions, the two
 *    datagrams) is a frame of 42 to 1514 bytes from the port's MAC, in
 *    one segment, its lengths agreeing with its size and its checksums
 *    right (check_sent);
 *  - the loop closes with nothing left (tl_loop_close 0), and every mbuf
 *    of the target's pools is back in its pool.
 * Sanitizers see the driver's code. An mbuf is DPDK's memory, which ASan
 * does not watch by itself: the target poisons each frame's buffer around
 * it (the headroom before, the rest of the room after), so that the
 * driver's reading a byte outside the frame is an ASan report too.
 */

#define MAX_FRAMES 32
#define FRAME_MAX 1600
#define NMBUF 1023

static struct rte_ring *in, *out;
static struct rte_mempool *tp, *tp0; /* with the driver's private area, and without */
static struct rte_ether_addr port_mac;
static int ready;

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_dpdk: %s\n", what);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (dpf_eal_init("fuzz_dpdk") < 0)
		abort();
	in = rte_ring_create("f_in", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	out = rte_ring_create("f_out", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
	int port = in && out ? rte_eth_from_rings("tl_fuzz", &in, 1, &out, 1, 0) : -1;
	tp = rte_pktmbuf_pool_create("fuzz_frames", NMBUF, 0, TL_DPDK_MBUF_PRIV, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	tp0 = rte_pktmbuf_pool_create("fuzz_bare", NMBUF, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	if (port < 0 || !tp || !tp0)
		fail("cannot make the ring port or the pool");
	char pn[16];
	snprintf(pn, sizeof pn, "%d", port);
	setenv("TL_DRIVER", "dpdk", 1);
	setenv("TL_DPDK_PORT", pn, 1);
	setenv("TL_DPDK_QUEUES", "1", 1);
	setenv("TL_DPDK_ADDR", "127.0.0.1,2001:db8::1", 1);
	unsetenv("TL_DPDK");
	rte_eth_macaddr_get((uint16_t)port, &port_mac);
	ready = 1;
	return 0;
}

/* ---- the input's frames ---- */

static uint16_t fold(uint32_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static uint32_t sum(const uint8_t *p, size_t n, uint32_t s)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		s += (uint32_t)p[n - 1] << 8;
	return s;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Make the checksums the flags ask for right, in frame f[0..n). */
static void fix(uint8_t *f, uint32_t n, unsigned flags)
{
	if (n < 14)
		return;
	unsigned type = (unsigned)(f[12] << 8 | f[13]);
	uint8_t *ip = f + 14;
	uint32_t have = n - 14;
	if (type == 0x0800 && have >= 20) {
		uint32_t ihl = (ip[0] & 15) * 4u, tot = (uint32_t)(ip[2] << 8 | ip[3]);
		if (ihl < 20 || ihl > have)
			return;
		if (flags & 2) {
			put16(ip + 10, 0);
			put16(ip + 10, (uint16_t)~fold(sum(ip, ihl, 0)));
		}
		if ((flags & 4) && ip[9] == 17 && tot >= ihl + 8 && tot <= have) {
			uint8_t *u = ip + ihl;
			uint32_t ul = (uint32_t)(u[4] << 8 | u[5]);
			if (ul < 8 || ul > tot - ihl)
				return;
			put16(u + 6, 0);
			uint32_t s = sum(ip + 12, 8, 17 + ul);
			uint16_t c = (uint16_t)~fold(sum(u, ul, s));
			put16(u + 6, c ? c : 0xffff);
		}
	} else if (type == 0x86dd && have >= 40 && (flags & 4)) {
		uint32_t pl = (uint32_t)(ip[4] << 8 | ip[5]);
		uint8_t nh = ip[6], *l4 = ip + 40;
		if (pl > have - 40)
			return;
		uint32_t len = pl;
		int at;
		if (nh == 17 && pl >= 8) {
			len = (uint32_t)(l4[4] << 8 | l4[5]);
			if (len < 8 || len > pl)
				return;
			at = 6;
		} else if (nh == 58 && pl >= 4) {
			at = 2;
		} else {
			return;
		}
		put16(l4 + at, 0);
		uint32_t s = sum(ip + 8, 32, len + nh);
		uint16_t c = (uint16_t)~fold(sum(l4, len, s));
		put16(l4 + at, c || nh != 17 ? c : 0xffff);
	}
}

/* A frame from a recipe r[0..n) into f (room FRAME_MAX): its length.
 *   r[0] kind (% 8): 0 UDP/IPv4, 1 UDP/IPv6, 2 ARP (r[7] & 1: a reply),
 *        3 Neighbour Solicitation, 4 Neighbour Advertisement, 5 ICMPv6
 *        echo request, 6 IPv4 with protocol r[7], 7 UDP/IPv6 behind a
 *        hop-by-hop header
 *   r[1] destination (% 4): ours, another host's, a group (broadcast;
 *        our solicited-node group), all-nodes (broadcast for IPv4)
 *   r[2] source (% 4): the peer, unspecified, ours, a group
 *   r[3] UDP destination port: 0 the bound one, else r[3]
 *   r[4] added to the IP length field (signed; 0: right)
 *   r[5] bytes cut off the frame's end
 *   r[6] ND option (% 4): none, the link-layer address, a zero length, a
 *        length past the end
 *   r[7] hop limit or TTL (0: 255)
 *   r[8..n) the payload (UDP, ICMPv6 echo) */
static uint32_t build(const uint8_t *r, uint32_t n, uint8_t *f)
{
	static const uint8_t peer_mac[6] = {2, 0, 0, 0, 0x42, 1};
	static const uint8_t ip4[4][4] = {{127, 0, 0, 1}, {10, 1, 2, 3}, {255, 255, 255, 255}, {255, 255, 255, 255}};
	static const uint8_t src4[4][4] = {{10, 9, 9, 9}, {0, 0, 0, 0}, {127, 0, 0, 1}, {224, 0, 0, 1}};
	static const uint8_t ip6[4][16] = {
		{0x20, 0x01, 0x0d, 0xb8, [15] = 1},
		{0x20, 0x01, 0x0d, 0xb8, [15] = 0x77},
		{0xff, 0x02, [11] = 1, [12] = 0xff, [15] = 1},
		{0xff, 0x02, [15] = 1}};
	static const uint8_t src6[4][16] = {
		{0x20, 0x01, 0x0d, 0xb8, [15] = 9}, {0}, {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, {0xff, 0x02, [15] = 1}};
	uint8_t q[8] = {0};
	memcpy(q, r, n < 8 ? n : 8);
	const uint8_t *pay = n > 8 ? r + 8 : r;
	uint32_t plen = n > 8 ? n - 8 : 0;
	if (plen > 1400)
		plen = 1400;
	unsigned kind = q[0] % 8, dst = q[1] % 4, src = q[2] % 4, hop = q[7] ? q[7] : 255;
	int v6 = kind == 1 || kind == 3 || kind == 4 || kind == 5 || kind == 7;
	uint8_t *ip = f + 14, *l4;
	uint32_t len;
	memset(f, 0, 14 + 40 + 8 + 8 + 32);
	memcpy(f, port_mac.addr_bytes, 6);
	if (dst >= 2) { /* broadcast, or the IPv6 group's MAC */
		static const uint8_t bc[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
		uint8_t g[6] = {0x33, 0x33, ip6[dst][12], ip6[dst][13], ip6[dst][14], ip6[dst][15]};
		memcpy(f, v6 ? g : bc, 6);
	}
	memcpy(f + 6, peer_mac, 6);
	if (kind == 2) { /* ARP */
		put16(f + 12, 0x0806);
		put16(ip, 1), put16(ip + 2, 0x0800), ip[4] = 6, ip[5] = 4;
		put16(ip + 6, (q[7] & 1) ? 2 : 1);
		memcpy(ip + 8, peer_mac, 6);
		memcpy(ip + 14, src4[src], 4);
		memcpy(ip + 24, ip4[dst], 4);
		len = 14 + 28;
	} else if (!v6) {
		put16(f + 12, 0x0800);
		l4 = ip + 20;
		uint32_t l4len = 8 + plen;
		if (kind == 0) {
			put16(l4, 40000), put16(l4 + 2, q[3] ? q[3] : 53), put16(l4 + 4, (uint16_t)l4len);
			memcpy(l4 + 8, pay, plen);
		} else {
			memcpy(l4, pay, plen), l4len = plen;
		}
		ip[0] = 0x45, ip[8] = (uint8_t)hop, ip[9] = kind == 0 ? 17 : q[7];
		put16(ip + 2, (uint16_t)(20 + l4len + (int8_t)q[4]));
		memcpy(ip + 12, src4[src], 4);
		memcpy(ip + 16, ip4[dst], 4);
		len = 14 + 20 + l4len;
	} else {
		put16(f + 12, 0x86dd);
		ip[0] = 0x60, ip[7] = (uint8_t)hop;
		memcpy(ip + 8, src6[src], 16);
		memcpy(ip + 24, ip6[dst], 16);
		l4 = ip + 40;
		uint32_t l4len;
		if (kind == 7) { /* hop-by-hop: next UDP, 8 bytes, PadN */
			l4[0] = 17, l4[2] = 1, l4[3] = 4;
			l4 += 8;
		}
		if (kind == 1 || kind == 7) {
			ip[6] = kind == 7 ? 0 : 17;
			put16(l4, 40000), put16(l4 + 2, q[3] ? q[3] : 54), put16(l4 + 4, (uint16_t)(8 + plen));
			memcpy(l4 + 8, pay, plen);
			l4len = 8 + plen;
		} else if (kind == 5) {
			ip[6] = 58, l4[0] = 128;
			memcpy(l4 + 8, pay, plen);
			l4len = 8 + plen;
		} else { /* NS (target: ours, or another host's) or NA (target: the peer) */
			ip[6] = 58, l4[0] = kind == 3 ? 135 : 136;
			if (kind == 4)
				l4[4] = 0x60;
			memcpy(l4 + 8, kind == 3 ? ip6[dst == 1 ? 1 : 0] : src6[0], 16);
			l4len = 24;
			unsigned opt = q[6] % 4;
			if (opt) {
				l4[24] = kind == 3 ? 1 : 2;
				l4[25] = opt == 1 ? 1 : opt == 2 ? 0 : 2;
				memcpy(l4 + 26, peer_mac, 6);
				l4len = 32;
			}
		}
		uint32_t pl = (kind == 7 ? 8 : 0) + l4len;
		put16(ip + 4, (uint16_t)(pl + (int8_t)q[4]));
		len = 14 + 40 + pl;
	}
	fix(f, len, 6); /* checksums right for the lengths the fields say, where they fit */
	return q[5] < len ? len - q[5] : 0;
}

/* ---- the loop ---- */

struct tally {
	uint64_t recvs, sends_done;
};

static void take(tl_loop *l, struct tally *t, const tl_completion *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++, c++) {
		if (c->kind == TL_K_RECV && c->result >= 0 && !(c->flags & TL_F_TERMINAL)) {
			t->recvs++;
			if (c->result > FRAME_MAX)
				fail("a datagram longer than its frame");
			int fam = c->u.recv.from.sa.sa_family;
			if (fam != AF_INET && fam != AF_INET6)
				fail("a datagram with no source address");
		}
		if (c->flags & TL_F_LEASE)
			tl_lease_release(l, c->u.recv.lease.id);
		if (c->kind == TL_K_SEND && (c->flags & TL_F_TERMINAL))
			t->sends_done++;
	}
}

/* A frame the driver sent (the ring port has no checksum offload, so
 * the driver made them all): its lengths agree with its size, its
 * checksums are right, an ARP frame is an Ethernet/IPv4 request or reply
 * from the port. */
static void check_sent(const uint8_t *f, uint32_t n)
{
	unsigned type = (unsigned)(f[12] << 8 | f[13]);
	const uint8_t *ip = f + 14;
	if (type == 0x0806) {
		unsigned op = (unsigned)(ip[6] << 8 | ip[7]);
		if (n < 42 || ip[0] != 0 || ip[1] != 1 || ip[2] != 8 || ip[3] != 0 || ip[4] != 6 || ip[5] != 4 ||
		    (op != 1 && op != 2) || memcmp(ip + 8, port_mac.addr_bytes, 6))
			fail("an ARP frame sent malformed");
	} else if (type == 0x0800) {
		uint32_t tot = (uint32_t)(ip[2] << 8 | ip[3]);
		if (ip[0] != 0x45 || tot != n - 14 || fold(sum(ip, 20, 0)) != 0xffff)
			fail("an IPv4 header sent with a wrong length or checksum");
		if (ip[9] == 17) {
			const uint8_t *u = ip + 20;
			uint32_t ul = (uint32_t)(u[4] << 8 | u[5]);
			if (ul != tot - 20 || fold(sum(u, ul, sum(ip + 12, 8, 17 + ul))) != 0xffff)
				fail("a UDP datagram sent over IPv4 with a wrong length or checksum");
		}
	} else if (type == 0x86dd) {
		uint32_t pl = (uint32_t)(ip[4] << 8 | ip[5]);
		uint8_t nh = ip[6];
		if (n < 54 || pl != n - 54 || (nh != 17 && nh != 58))
			fail("an IPv6 packet sent with a wrong length or an unknown next header");
		if (fold(sum(ip + 40, pl, sum(ip + 8, 32, pl + nh))) != 0xffff)
			fail("a UDP or ICMPv6 message sent over IPv6 with a wrong checksum");
	} else {
		fail("a frame sent of a type the driver does not send");
	}
}

/* What the driver put on the wire: checked, then freed. */
static void drain_out(void)
{
	struct rte_mbuf *m[64];
	unsigned k;
	while ((k = rte_ring_dequeue_burst(out, (void **)m, 64, NULL)) > 0)
		for (unsigned i = 0; i < k; i++) {
			const struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[i], const struct rte_ether_hdr *);
			if (m[i]->pkt_len < 42 || m[i]->pkt_len > 1514)
				fail("a frame sent of a size no Ethernet frame has");
			if (!rte_is_same_ether_addr(&eh->src_addr, &port_mac))
				fail("a frame sent from another MAC");
			if (m[i]->nb_segs != 1)
				fail("a frame sent in several segments");
			check_sent(rte_pktmbuf_mtod(m[i], const uint8_t *), m[i]->data_len);
			rte_pktmbuf_free(m[i]);
		}
}

static uint64_t fates(const struct tl_dpdk_stats *s)
{
	return s->rx_datagrams + s->drop_bad + s->drop_frag + s->drop_proto + s->drop_not_ours +
	       s->drop_no_port + s->drop_rcvq + s->arp_in + s->drop_ext6 + s->nd_in + s->handed_out +
	       s->drop_handoff + s->drop_nombuf;
}

static tl_handle bind_to(tl_loop *l, const char *ip, uint16_t port)
{
	tl_addr a;
	tl_handle h = TL_HANDLE_NONE;
	tl_op op;
	int r = tl_addr_parse(&a, ip, port);
	if (r >= 0)
		r = tl_udp_bind(l, &a, &h);
	if (r >= 0)
		r = tl_udp_recv_start(l, h, 1, &op);
	if (r < 0) {
		fprintf(stderr, "fuzz_dpdk: %s: %s\n", ip, tl_strerror(r));
		fail("cannot bind and receive");
	}
	return h;
}

static void send_to(tl_loop *l, tl_handle h, const char *ip)
{
	tl_addr a;
	tl_op op;
	if (tl_addr_parse(&a, ip, 9) < 0 || tl_udp_send(l, h, "q", 1, &a, 2, &op) < 0)
		fail("cannot send");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready)
		return 0;
	unsigned pool0 = rte_mempool_avail_count(tp), bare0 = rte_mempool_avail_count(tp0);
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.max_handles = 16;
	cfg.max_ops = 64;
	tl_loop *l = NULL;
	if (tl_loop_new(&l, &cfg) != 0 || strcmp(tl_loop_driver(l), "dpdk"))
		fail("no DPDK loop");
	tl_handle h4 = bind_to(l, "127.0.0.1", 53), h6 = bind_to(l, "2001:db8::1", 54);
	send_to(l, h4, "10.9.9.9");
	send_to(l, h6, "2001:db8::9");
	tl_completion c[64];
	struct tally t = {0, 0};
	int n;
	while ((n = tl_turn(l, 0, c, 64, NULL)) > 0) /* the questions for the neighbours go out */
		take(l, &t, c, (uint32_t)n);
	drain_out();
	struct tl_dpdk_stats s0, s1;
	if (tl__dpdk_stats(l, &s0) != 0)
		fail("no stats");

	uint32_t frames = 0;
	for (size_t at = 0; at + 3 <= size && frames < MAX_FRAMES; frames++) {
		unsigned flags = data[at];
		uint32_t len = (uint32_t)(data[at + 1] << 8 | data[at + 2]) % (FRAME_MAX + 1);
		at += 3;
		if (len > size - at)
			len = (uint32_t)(size - at);
		struct rte_mbuf *m = rte_pktmbuf_alloc(flags & 8 ? tp0 : tp);
		if (m && (flags & 8))
			m->data_off = 0;
		uint8_t recipe[FRAME_MAX];
		if (flags & 32) { /* the bytes are a recipe: the frame is built from it */
			uint8_t built[FRAME_MAX];
			uint32_t rl = len < sizeof recipe ? len : (uint32_t)sizeof recipe;
			memcpy(recipe, data + at, rl);
			at += len;
			len = build(recipe, rl, built);
			memcpy(recipe, built, len);
		}
		uint8_t *f = m ? (uint8_t *)rte_pktmbuf_append(m, (uint16_t)len) : NULL;
		if (!m || (len && !f))
			fail("no mbuf for a frame");
		/* Only the frame's bytes may be read: the buffer around them is
		 * poisoned (and the whole buffer unpoisoned first, the mbuf
		 * having been another frame's). */
		uint8_t *room = (uint8_t *)m->buf_addr;
		ASAN_UNPOISON_MEMORY_REGION(room, m->buf_len);
		if (len)
			memcpy(f, flags & 32 ? recipe : data + at, len);
		ASAN_POISON_MEMORY_REGION(room, m->data_off);
		ASAN_POISON_MEMORY_REGION(room + m->data_off + len, m->buf_len - m->data_off - len);
		if (!(flags & 32))
			at += len;
		if ((flags & 1) && len >= 6)
			memcpy(f, port_mac.addr_bytes, 6);
		fix(f, len, flags);
		if ((flags & 16) && len >= 2) { /* its second half in a segment of its own */
			uint32_t k = len / 2;
			struct rte_mbuf *m2 = rte_pktmbuf_alloc(m->pool);
			uint8_t *f2 = m2 ? (uint8_t *)rte_pktmbuf_append(m2, (uint16_t)(len - k)) : NULL;
			if (!f2)
				fail("no mbuf for a segment");
			uint8_t *room2 = (uint8_t *)m2->buf_addr;
			ASAN_UNPOISON_MEMORY_REGION(room2, m2->buf_len);
			memcpy(f2, f + k, len - k);
			rte_pktmbuf_trim(m, (uint16_t)(len - k));
			ASAN_POISON_MEMORY_REGION(room + m->data_off + k, m->buf_len - m->data_off - k);
			ASAN_POISON_MEMORY_REGION(room2, m2->data_off);
			ASAN_POISON_MEMORY_REGION(room2 + m2->data_off + len - k, m2->buf_len - m2->data_off - (len - k));
			if (rte_pktmbuf_chain(m, m2) != 0)
				fail("cannot chain a segment");
		}
		if (rte_ring_enqueue(in, m) != 0)
			fail("the receive ring is full");
	}
	for (int idle = 0; idle < 3;) {
		n = tl_turn(l, 0, c, 64, NULL);
		if (n < 0)
			fail("tl_turn failed");
		take(l, &t, c, (uint32_t)n);
		drain_out();
		idle = n == 0 && rte_ring_count(in) == 0 ? idle + 1 : 0;
	}
	if (tl__dpdk_stats(l, &s1) != 0)
		fail("no stats");
	uint64_t got = s1.rx_frames - s0.rx_frames, fate = fates(&s1) - fates(&s0);
	if (got != frames)
		fail("a frame was not taken off the ring");
	if (fate < frames || fate > 2 * (uint64_t)frames)
		fail("a frame's fate is not counted, or counted more than twice");
	if (getenv("FUZZ_DPDK_SAY")) /* what an input did, for a corpus's maker */
		fprintf(stderr, "fuzz_dpdk: %u frames: %llu datagrams, %llu ARP, %llu ND, %llu dropped, %llu sends ended\n",
			frames, (unsigned long long)t.recvs, (unsigned long long)(s1.arp_in - s0.arp_in),
			(unsigned long long)(s1.nd_in - s0.nd_in),
			(unsigned long long)(fate - (s1.rx_datagrams - s0.rx_datagrams) - (s1.arp_in - s0.arp_in) - (s1.nd_in - s0.nd_in)),
			(unsigned long long)t.sends_done);
	if (t.recvs != s1.rx_datagrams - s0.rx_datagrams)
		fail("a datagram queued on a handle did not come to the host");

	tl_close_all(l, 3);
	for (int k = 0; k < 2000 && tl_alive(l); k++) {
		n = tl_turn(l, 1000000, c, 64, NULL);
		take(l, &t, c, n > 0 ? (uint32_t)n : 0);
	}
	drain_out();
	if (tl_alive(l) || tl_loop_close(l) != 0)
		fail("the loop did not close clean");
	drain_out();
	if (rte_mempool_avail_count(tp) != pool0 || rte_mempool_avail_count(tp0) != bare0)
		fail("an mbuf of the target's pool was not given back");
	return 0;
}
