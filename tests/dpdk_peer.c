/* tests/dpdk_peer.c: the client end of the DPDK end-to-end test (tests/test_dpdk_e2e.sh): a DPDK program on its own port (net_memif, client role) that asks the server's MAC by ARP, sends datagrams in windows and checks every echo, then sends bad frames and checks none comes back. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <rte_arp.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

/*
 * Usage: dpdk_peer EAL-ARGS -- [options]
 *   --count N        datagrams to send (2000)
 *   --window W       datagrams in flight at once (64)
 *   --ip A           this end's IPv4 address (198.18.0.1)
 *   --server-ip A    the server's (198.18.0.2)
 *   --server-mac M   the MAC the server's ARP answer must give (any)
 *   --dport P        the server's UDP port (9000)
 *   --sport P        this end's UDP port (40001)
 *
 * Datagram i has a payload of size(i) bytes, which over any 1,473
 * consecutive datagrams is every size from 0 to 1,472 once, so the sizes
 * in a window are distinct and a size names its datagram. The payload
 * starts with i (4 bytes, big-endian) if it has room, and a pattern of i
 * fills the rest. Every echo must be the datagram sent, from the server's
 * address and port to this end's, with valid checksums, and come back once.
 *
 * Exit: 0 every echo came back right and no bad frame was echoed; 1 a
 * check failed (the first failure is printed); 2 the program could not
 * run (arguments, the EAL, the port, no link).
 */

#define MAX_PAYLOAD 1472
#define SIZES (MAX_PAYLOAD + 1)
#define WINDOW_MAX 512
#define BURST 32
#define NS 1000000000ull

static struct {
	uint32_t count, window;
	uint32_t ip, server_ip; /* network order */
	uint16_t sport, dport;  /* host order */
	int check_mac;
	struct rte_ether_addr server_mac;
} opt = {.count = 2000, .window = 64, .sport = 40001, .dport = 9000};

static uint16_t port;
static struct rte_mempool *mp;
static struct rte_ether_addr my_mac, srv_mac;

/* What the run saw, for the summary and the failure's reason. */
static struct {
	uint64_t sent, echoed, bytes, bad_sent;
	uint16_t min_len, max_len; /* of the datagrams echoed */
	char why[256];
} R;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}

static void nap_us(long us)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = us * 1000};
	nanosleep(&ts, NULL);
}

/* Keep the first reason a check failed. */
static void failed(const char *fmt, ...)
{
	if (R.why[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(R.why, sizeof R.why, fmt, ap);
	va_end(ap);
}

static const char *mac_str(const struct rte_ether_addr *a)
{
	static char b[2][RTE_ETHER_ADDR_FMT_SIZE];
	static int k;
	k ^= 1;
	rte_ether_format_addr(b[k], sizeof b[k], a);
	return b[k];
}

static const char *ip_str(uint32_t ip)
{
	static char b[2][INET_ADDRSTRLEN];
	static int k;
	k ^= 1;
	inet_ntop(AF_INET, &ip, b[k], sizeof b[k]);
	return b[k];
}

/* ---- datagrams ---- */

/* 7919 is prime to 1473 (3 x 491): i -> size(i) is a bijection on any
 * 1,473 consecutive values of i. */
static uint16_t size_of(uint32_t i)
{
	return (uint16_t)(((uint64_t)i * 7919u) % SIZES);
}

static void fill(uint8_t *p, uint32_t i, uint16_t len)
{
	for (uint16_t k = 0; k < len; k++)
		p[k] = (uint8_t)(i * 7u + k * 13u + 0x5a);
	if (len >= 4) {
		uint32_t be = htonl(i);
		memcpy(p, &be, 4);
	}
}

/* A frame from this end to the server's port with payload size len; how
 * spoils it: 1 the UDP checksum, 2 the IPv4 header checksum. */
static struct rte_mbuf *udp_frame(uint32_t i, uint16_t len, int how)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
	if (!m)
		return NULL;
	uint16_t fl = (uint16_t)(sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr) +
				 sizeof(struct rte_udp_hdr) + len);
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(m, fl);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	eh->src_addr = my_mac;
	eh->dst_addr = srv_mac;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	memset(ip, 0, sizeof *ip);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->time_to_live = 64;
	ip->packet_id = rte_cpu_to_be_16((uint16_t)i);
	ip->next_proto_id = IPPROTO_UDP;
	ip->total_length = rte_cpu_to_be_16((uint16_t)(sizeof *ip + sizeof *u + len));
	ip->src_addr = opt.ip;
	ip->dst_addr = opt.server_ip;
	u->src_port = htons(opt.sport);
	u->dst_port = htons(opt.dport);
	u->dgram_len = rte_cpu_to_be_16((uint16_t)(sizeof *u + len));
	u->dgram_cksum = 0;
	fill((uint8_t *)(u + 1), i, len);
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	u->dgram_cksum = rte_ipv4_udptcp_cksum(ip, u);
	if (how == 1) /* wrong, and not 0 (which would mean "no checksum") */
		u->dgram_cksum ^= u->dgram_cksum == 0x0101 ? 0x0202 : 0x0101;
	if (how == 2)
		ip->hdr_checksum ^= 0x0101;
	return m;
}

/* Hand n frames to the TX ring, waiting while it is full (at most 2 s). */
static int send_all(struct rte_mbuf **m, uint16_t n)
{
	uint64_t until = now_ns() + 2 * NS;
	uint16_t done = 0;
	while (done < n) {
		done += rte_eth_tx_burst(port, 0, m + done, (uint16_t)(n - done));
		if (done < n) {
			if (now_ns() > until) {
				rte_pktmbuf_free_bulk(m + done, n - done);
				return -1;
			}
			nap_us(50);
		}
	}
	return 0;
}

/* ---- ARP ---- */

static struct rte_mbuf *arp_frame(uint16_t op, const struct rte_ether_addr *tha, uint32_t tip)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(mp);
	if (!m)
		return NULL;
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(
		m, sizeof(struct rte_ether_hdr) + sizeof(struct rte_arp_hdr));
	struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
	eh->src_addr = my_mac;
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
	ah->arp_data.arp_sha = my_mac;
	ah->arp_data.arp_sip = opt.ip;
	if (op == RTE_ARP_OP_REQUEST)
		memset(&ah->arp_data.arp_tha, 0, sizeof ah->arp_data.arp_tha);
	else
		ah->arp_data.arp_tha = *tha;
	ah->arp_data.arp_tip = tip;
	return m;
}

/* An ARP frame that came in: 1 if it is the server's answer (checked), 0
 * if not. A question for this end's address is answered. */
static int arp_in(struct rte_mbuf *m)
{
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
	if (m->data_len < sizeof *eh + sizeof *ah ||
	    ah->arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
	    ah->arp_protocol != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) || ah->arp_hlen != 6 ||
	    ah->arp_plen != 4)
		return 0;
	if (ah->arp_opcode == rte_cpu_to_be_16(RTE_ARP_OP_REQUEST)) {
		if (ah->arp_data.arp_tip == opt.ip) {
			struct rte_mbuf *r = arp_frame(RTE_ARP_OP_REPLY, &ah->arp_data.arp_sha,
						       ah->arp_data.arp_sip);
			if (r)
				send_all(&r, 1);
		}
		return 0;
	}
	if (ah->arp_opcode != rte_cpu_to_be_16(RTE_ARP_OP_REPLY) || ah->arp_data.arp_sip != opt.server_ip)
		return 0;
	if (!rte_is_same_ether_addr(&eh->dst_addr, &my_mac))
		failed("the ARP answer went to %s, not to this end (%s)", mac_str(&eh->dst_addr),
		       mac_str(&my_mac));
	else if (!rte_is_same_ether_addr(&eh->src_addr, &ah->arp_data.arp_sha))
		failed("the ARP answer came from %s but says %s is at %s", mac_str(&eh->src_addr),
		       ip_str(ah->arp_data.arp_sip), mac_str(&ah->arp_data.arp_sha));
	else if (opt.check_mac && !rte_is_same_ether_addr(&ah->arp_data.arp_sha, &opt.server_mac))
		failed("the ARP answer says %s is at %s, not %s", ip_str(opt.server_ip),
		       mac_str(&ah->arp_data.arp_sha), mac_str(&opt.server_mac));
	else if (ah->arp_data.arp_tip != opt.ip || !rte_is_same_ether_addr(&ah->arp_data.arp_tha, &my_mac))
		failed("the ARP answer is for %s at %s, not this end (%s at %s)",
		       ip_str(ah->arp_data.arp_tip), mac_str(&ah->arp_data.arp_tha), ip_str(opt.ip),
		       mac_str(&my_mac));
	srv_mac = ah->arp_data.arp_sha;
	return 1;
}

/* Ask the server's MAC until it answers: every 200 ms, at most 10 s (its
 * loop looks at the link every 100 ms and polls only while it is up). */
static int resolve(void)
{
	uint64_t start = now_ns(), next = 0;
	while (now_ns() - start < 10 * NS) {
		if (now_ns() >= next) {
			struct rte_mbuf *q = arp_frame(RTE_ARP_OP_REQUEST, NULL, opt.server_ip);
			if (!q || send_all(&q, 1) < 0) {
				failed("cannot send an ARP request");
				return -1;
			}
			next = now_ns() + NS / 5;
		}
		struct rte_mbuf *m[BURST];
		uint16_t n = rte_eth_rx_burst(port, 0, m, BURST);
		int got = 0;
		for (uint16_t k = 0; k < n; k++) {
			struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
			if (m[k]->data_len >= sizeof *eh &&
			    eh->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP))
				got |= arp_in(m[k]);
		}
		rte_pktmbuf_free_bulk(m, n);
		if (got)
			return R.why[0] ? -1 : 0;
		if (!n)
			nap_us(100);
	}
	failed("no answer to ARP for %s in 10 s", ip_str(opt.server_ip));
	return -1;
}

/* ---- echoes ---- */

/* The bad frames sent after the datagrams: a size, and how each is
 * spoilt (udp_frame's how). Datagram numbers count..count+NBAD-1 are
 * theirs, and count+NBAD the good datagram after them. */
static const struct {
	uint16_t len;
	int how;
} bad_frame[] = {{100, 1}, {0, 1}, {1472, 1}, {8, 1}, {200, 2}, {33, 2}};
#define NBAD ((uint32_t)(sizeof bad_frame / sizeof bad_frame[0]))

/* The datagrams of the window in flight, by size. */
static struct {
	uint32_t base, n;
	int32_t by_size[SIZES]; /* -1, or the index in the window */
	uint8_t back[WINDOW_MAX];
	uint32_t left;
} W;

/* A received frame: NULL if it is a valid UDP echo to this end, with *pay
 * and *len its payload; else why not. ARP is answered and ignored. */
static const char *parse_echo(struct rte_mbuf *m, const uint8_t **pay, uint16_t *len, int *arp)
{
	*arp = 0;
	if (m->nb_segs != 1)
		return "a frame in several segments";
	struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	if (m->data_len < sizeof *eh)
		return "a runt frame";
	if (eh->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP)) {
		*arp = 1;
		arp_in(m);
		return NULL;
	}
	if (eh->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4))
		return "a frame neither IPv4 nor ARP";
	if (!rte_is_same_ether_addr(&eh->dst_addr, &my_mac))
		return "a frame to another MAC";
	if (!rte_is_same_ether_addr(&eh->src_addr, &srv_mac))
		return "a frame from another MAC than the server's";
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
	uint32_t have = m->data_len - (uint32_t)sizeof *eh;
	if (have < sizeof *ip || ip->version_ihl != RTE_IPV4_VHL_DEF)
		return "not an IPv4 header of 20 bytes";
	uint32_t tot = rte_be_to_cpu_16(ip->total_length);
	if (tot < sizeof *ip + sizeof(struct rte_udp_hdr) || tot > have)
		return "an IPv4 total length past the frame";
	if (rte_raw_cksum(ip, sizeof *ip) != 0xffff)
		return "a bad IPv4 header checksum";
	if (ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK))
		return "an IPv4 fragment";
	if (ip->next_proto_id != IPPROTO_UDP)
		return "not UDP";
	if (ip->src_addr != opt.server_ip)
		return "an IPv4 source other than the server's";
	if (ip->dst_addr != opt.ip)
		return "an IPv4 destination other than this end";
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	if (rte_be_to_cpu_16(u->dgram_len) != tot - sizeof *ip)
		return "a UDP length that is not the IPv4 payload's";
	if (u->src_port != htons(opt.dport))
		return "a UDP source port other than the server's";
	if (u->dst_port != htons(opt.sport))
		return "a UDP destination port other than this end's";
	/* Summed with its checksum, a valid datagram comes to 0xffff, which
	 * rte_ipv4_udptcp_cksum gives back as 0xffff (its complement, 0, is
	 * sent as 0xffff). 0, "no checksum", is not valid from the server. */
	if (!u->dgram_cksum || rte_ipv4_udptcp_cksum(ip, u) != 0xffff)
		return "a bad UDP checksum";
	*pay = (const uint8_t *)(u + 1);
	*len = (uint16_t)(rte_be_to_cpu_16(u->dgram_len) - sizeof *u);
	return NULL;
}

/* Match an echo with the window's datagram of its size. */
static void echo_in(const uint8_t *pay, uint16_t len)
{
	uint8_t want[MAX_PAYLOAD];
	int32_t k = len <= MAX_PAYLOAD ? W.by_size[len] : -1;
	if (k < 0) {
		uint32_t seq = 0;
		if (len >= 4)
			memcpy(&seq, pay, 4);
		seq = ntohl(seq);
		if (W.base == opt.count + NBAD && len >= 4 && seq >= opt.count && seq < W.base)
			failed("a bad frame was echoed (%u bytes, %s)", len,
			       bad_frame[seq - opt.count].how == 1 ? "bad UDP checksum" : "bad IPv4 checksum");
		else
			failed("an echo of %u bytes that no datagram in flight has (datagrams %u-%u)%s",
			       len, W.base, W.base + W.n - 1, len >= 4 ? "" : ", too short to say which");
		return;
	}
	uint32_t i = W.base + (uint32_t)k;
	if (W.back[k]) {
		failed("datagram %u (%u bytes) echoed twice", i, len);
		return;
	}
	if (len >= 4) {
		uint32_t seq;
		memcpy(&seq, pay, 4);
		seq = ntohl(seq);
		if (seq != i && seq < W.base) {
			failed("datagram %u (%u bytes) echoed again, after its window", seq, len);
			return;
		}
	}
	fill(want, i, len);
	if (len && memcmp(want, pay, len)) {
		uint16_t at = 0;
		while (want[at] == pay[at])
			at++;
		failed("datagram %u (%u bytes) came back changed from byte %u", i, len, at);
		return;
	}
	W.back[k] = 1;
	W.left--;
	if (!R.echoed || len < R.min_len)
		R.min_len = len;
	if (len > R.max_len)
		R.max_len = len;
	R.echoed++;
	R.bytes += len;
}

/* Take what came in: echoes matched, anything else a failure. */
static uint16_t receive(void)
{
	struct rte_mbuf *m[BURST];
	uint16_t n = rte_eth_rx_burst(port, 0, m, BURST);
	for (uint16_t k = 0; k < n; k++) {
		const uint8_t *pay;
		uint16_t len;
		int arp;
		const char *bad = parse_echo(m[k], &pay, &len, &arp);
		if (bad) {
			failed("received %s (%u bytes)", bad, m[k]->pkt_len);
		} else if (!arp) {
			echo_in(pay, len);
		}
	}
	rte_pktmbuf_free_bulk(m, n);
	return n;
}

/* Send datagrams base..base+n-1 and wait (2 s at most) for their echoes. */
static int window(uint32_t base, uint32_t n)
{
	for (uint32_t k = 0; k < W.n; k++)
		W.by_size[size_of(W.base + k)] = -1;
	W.base = base;
	W.n = W.left = n;
	memset(W.back, 0, sizeof W.back);
	struct rte_mbuf *m[WINDOW_MAX];
	for (uint32_t k = 0; k < n; k++) {
		W.by_size[size_of(base + k)] = (int32_t)k;
		if (!(m[k] = udp_frame(base + k, size_of(base + k), 0))) {
			rte_pktmbuf_free_bulk(m, k);
			failed("the mbuf pool is empty");
			return -1;
		}
	}
	for (uint32_t k = 0; k < n; k += BURST) {
		uint16_t b = (uint16_t)(n - k < BURST ? n - k : BURST);
		if (send_all(m + k, b) < 0) {
			rte_pktmbuf_free_bulk(m + k + b, n - k - b);
			failed("the TX ring stayed full for 2 s");
			return -1;
		}
		R.sent += b;
		receive(); /* echoes may come while the window goes out */
	}
	uint64_t until = now_ns() + 2 * NS;
	while (W.left && !R.why[0] && now_ns() < until)
		if (!receive())
			nap_us(20);
	if (R.why[0])
		return -1;
	if (W.left) {
		uint32_t first = 0;
		while (W.back[first])
			first++;
		failed("%u of the %u datagrams %u-%u not echoed in 2 s (the first: %u, %u bytes)", W.left,
		       n, base, base + n - 1, base + first, size_of(base + first));
		return -1;
	}
	return 0;
}

/* Bad frames (bad UDP checksums, then a bad IPv4 header checksum), then a
 * good datagram: the good one comes back, the bad ones must not (each is
 * a size of its own, so its echo would be caught as no datagram's). */
static int bad_frames(void)
{
	for (uint32_t k = 0; k < W.n; k++)
		W.by_size[size_of(W.base + k)] = -1;
	uint32_t sentinel = opt.count + NBAD;
	W.base = sentinel;
	W.n = W.left = 1;
	W.back[0] = 0;
	W.by_size[size_of(sentinel)] = 0;
	for (unsigned k = 0; k < NBAD; k++) {
		if (bad_frame[k].len == size_of(sentinel))
			continue; /* it would pass for the sentinel's echo */
		struct rte_mbuf *m = udp_frame(opt.count + k, bad_frame[k].len, bad_frame[k].how);
		if (!m || send_all(&m, 1) < 0) {
			failed("cannot send a bad frame");
			return -1;
		}
		R.bad_sent++;
	}
	struct rte_mbuf *m = udp_frame(sentinel, size_of(sentinel), 0);
	if (!m || send_all(&m, 1) < 0) {
		failed("cannot send the datagram after the bad frames");
		return -1;
	}
	R.sent++;
	/* Echoes come back in order on this path; wait past the good one's
	 * for one that came late. */
	uint64_t until = now_ns() + 2 * NS;
	while (W.left && !R.why[0] && now_ns() < until)
		if (!receive())
			nap_us(20);
	until = now_ns() + NS / 5;
	while (!R.why[0] && now_ns() < until)
		if (!receive())
			nap_us(100);
	if (R.why[0])
		return -1;
	if (W.left) {
		failed("the datagram sent after the bad frames was not echoed in 2 s");
		return -1;
	}
	return 0;
}

/* ---- setup ---- */

static int port_up(void)
{
	if (rte_eth_dev_count_avail() < 1) {
		fprintf(stderr, "dpdk_peer: no DPDK port (a --vdev?)\n");
		return -1;
	}
	RTE_ETH_FOREACH_DEV(port)
		break;
	mp = rte_pktmbuf_pool_create("peer", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
				     (int)rte_socket_id());
	if (!mp) {
		fprintf(stderr, "dpdk_peer: cannot make the mbuf pool: %s\n", rte_strerror(rte_errno));
		return -1;
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof conf);
	int r;
	if ((r = rte_eth_dev_configure(port, 1, 1, &conf)) != 0 ||
	    (r = rte_eth_rx_queue_setup(port, 0, 1024, (unsigned)rte_eth_dev_socket_id(port), NULL,
					mp)) != 0 ||
	    (r = rte_eth_tx_queue_setup(port, 0, 1024, (unsigned)rte_eth_dev_socket_id(port), NULL)) != 0 ||
	    (r = rte_eth_dev_start(port)) != 0) {
		fprintf(stderr, "dpdk_peer: cannot set port %u up: %s\n", port, rte_strerror(-r));
		return -1;
	}
	rte_eth_macaddr_get(port, &my_mac);
	uint64_t start = now_ns();
	for (;;) {
		struct rte_eth_link lk;
		if (rte_eth_link_get_nowait(port, &lk) == 0 && lk.link_status == RTE_ETH_LINK_UP)
			return 0;
		if (now_ns() - start > 10 * NS) {
			fprintf(stderr, "dpdk_peer: the link of port %u is not up after 10 s (no server?)\n",
				port);
			return -2;
		}
		nap_us(10000);
	}
}

/* Stop the port after a quiet while, draining what comes: DPDK 22.11's
 * memif has crashed when one end went away while the other still polled. */
static void port_down(void)
{
	uint64_t until = now_ns() + 3 * NS / 10;
	while (now_ns() < until) {
		struct rte_mbuf *m[BURST];
		uint16_t n = rte_eth_rx_burst(port, 0, m, BURST);
		rte_pktmbuf_free_bulk(m, n);
		nap_us(1000);
	}
	rte_eth_dev_stop(port);
	rte_eth_dev_close(port);
}

static int parse_ip(const char *s, uint32_t *out)
{
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*out = a.s_addr;
	return 0;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || !*s || *end || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{"count", required_argument, NULL, 'n'},   {"window", required_argument, NULL, 'w'},
		{"ip", required_argument, NULL, 'a'},      {"server-ip", required_argument, NULL, 'A'},
		{"server-mac", required_argument, NULL, 'M'}, {"dport", required_argument, NULL, 'd'},
		{"sport", required_argument, NULL, 's'},   {NULL, 0, NULL, 0}};
	parse_ip("198.18.0.1", &opt.ip);
	parse_ip("198.18.0.2", &opt.server_ip);
	optind = 1;
	int c, li = 0;
	uint32_t v;
	while ((c = getopt_long(argc, argv, "", lo, &li)) != -1) {
		int bad = 0;
		switch (c) {
		case 'n':
			bad = parse_u32(optarg, 1, 10000000, &opt.count);
			break;
		case 'w':
			bad = parse_u32(optarg, 1, WINDOW_MAX, &opt.window);
			break;
		case 'a':
			bad = parse_ip(optarg, &opt.ip);
			break;
		case 'A':
			bad = parse_ip(optarg, &opt.server_ip);
			break;
		case 'M':
			bad = rte_ether_unformat_addr(optarg, &opt.server_mac);
			opt.check_mac = 1;
			break;
		case 'd':
		case 's':
			bad = parse_u32(optarg, 1, 65535, &v);
			*(c == 'd' ? &opt.dport : &opt.sport) = (uint16_t)v;
			break;
		default:
			return -1;
		}
		if (bad) {
			fprintf(stderr, "dpdk_peer: bad value for --%s: %s\n", lo[li].name, optarg);
			return -1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "dpdk_peer: unexpected argument %s\n", argv[optind]);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int n = rte_eal_init(argc, argv);
	if (n < 0) {
		fprintf(stderr, "dpdk_peer: rte_eal_init refused its arguments: %s\n",
			rte_strerror(rte_errno));
		return 2;
	}
	argv[n] = argv[0];
	if (parse_args(argc - n, argv + n) < 0) {
		fprintf(stderr, "usage: dpdk_peer EAL-ARGS -- [--count N] [--window W] [--ip A] "
				"[--server-ip A] [--server-mac M] [--dport P] [--sport P]\n");
		rte_eal_cleanup();
		return 2;
	}
	if (port_up() < 0) {
		rte_eal_cleanup();
		return 2;
	}
	for (uint32_t k = 0; k < SIZES; k++)
		W.by_size[k] = -1;
	uint64_t t0 = now_ns();
	int r = resolve();
	for (uint32_t i = 0; r == 0 && i < opt.count; i += opt.window)
		r = window(i, opt.count - i < opt.window ? opt.count - i : opt.window);
	if (r == 0)
		r = bad_frames();
	double secs = (double)(now_ns() - t0) / 1e9;
	port_down();
	rte_eal_cleanup();
	if (r < 0 || R.why[0]) {
		fprintf(stderr, "dpdk_peer: FAIL: %s (%lu of %lu datagrams sent were echoed)\n", R.why,
			(unsigned long)R.echoed, (unsigned long)R.sent);
		return 1;
	}
	printf("dpdk_peer: ok: %s is at %s; %lu of %lu datagrams echoed right (%lu payload bytes, "
	       "sizes %u-%u), %lu bad frames not echoed, in %.2f s\n",
	       ip_str(opt.server_ip), mac_str(&srv_mac), (unsigned long)R.echoed,
	       (unsigned long)R.sent, (unsigned long)R.bytes, R.min_len, R.max_len,
	       (unsigned long)R.bad_sent, secs);
	return 0;
}
