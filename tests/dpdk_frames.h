/* tests/dpdk_frames.h: what the DPDK driver's tests share: the frames they put on a port's receive ring (IPv4 and IPv6 UDP, spoilt on request) and the echo their runtime shards run. */
#ifndef TL_TESTS_DPDK_FRAMES_H
#define TL_TESTS_DPDK_FRAMES_H

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <CUnit/Basic.h>
#include <rte_eal.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>
#include "turnloop/runtime.h"
#include "dpdk_eal.h"

/* The wire a test builds frames for: its own pool, the port's MAC (the
 * frames' destination) and the peer's (their source). */
struct dpf_wire {
	struct rte_mempool *mp;
	struct rte_ether_addr port, peer;
};

/* A UDP frame from sip:sport to dip:dport with payload pay[0..len), both
 * checksums right; how spoils it: 1 the IPv4 checksum, 2 the UDP checksum,
 * 3 a fragment, 4 another destination MAC, 5 a UDP length past the IP
 * packet's end, 6 a protocol the driver has not (an experimental
 * EtherType); 0 leaves it whole. */
static inline struct rte_mbuf *dpf_udp4(const struct dpf_wire *w, uint32_t sip, uint32_t dip,
					uint16_t sport, uint16_t dport, const void *pay,
					uint16_t len, int how)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(w->mp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(m, 14 + 20 + 8 + len);
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
	eh->src_addr = w->peer;
	eh->dst_addr = w->port;
	if (how == 4)
		eh->dst_addr.addr_bytes[5] ^= 1;
	eh->ether_type = rte_cpu_to_be_16(how == 6 ? 0x88b5 : RTE_ETHER_TYPE_IPV4);
	memset(ip, 0, sizeof *ip);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->total_length = rte_cpu_to_be_16((uint16_t)(20 + 8 + len));
	ip->src_addr = htonl(sip);
	ip->dst_addr = htonl(dip);
	if (how == 3)
		ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG);
	u->src_port = htons(sport);
	u->dst_port = htons(dport);
	u->dgram_len = rte_cpu_to_be_16((uint16_t)(8 + len + (how == 5 ? 10 : 0)));
	u->dgram_cksum = 0;
	memcpy(u + 1, pay, len);
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	u->dgram_cksum = rte_ipv4_udptcp_cksum(ip, u);
	if (how == 1)
		ip->hdr_checksum ^= 0x0101;
	if (how == 2)
		u->dgram_cksum ^= 0x0101;
	return m;
}

/* An IPv6 frame from src to dst (Ethernet destination edst), next header
 * nh, hop limit hop, carrying l4[0..len) as it is (checksums are the
 * caller's). */
static inline struct rte_mbuf *dpf_ip6(const struct dpf_wire *w, const uint8_t *src,
				       const uint8_t *dst, const struct rte_ether_addr *edst,
				       uint8_t nh, uint8_t hop, const uint8_t *l4, uint16_t len)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(w->mp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(m, 14 + 40 + len);
	struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
	eh->src_addr = w->peer;
	eh->dst_addr = *edst;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
	ip->vtc_flow = htonl(6u << 28);
	ip->payload_len = htons(len);
	ip->proto = nh;
	ip->hop_limits = hop;
	memcpy(ip->src_addr, src, 16);
	memcpy(ip->dst_addr, dst, 16);
	memcpy(ip + 1, l4, len);
	return m;
}

/* A whole UDP datagram over IPv6, [src]:sport to [dst]:dport, to the
 * port's MAC, its checksum right. */
static inline struct rte_mbuf *dpf_udp6(const struct dpf_wire *w, const uint8_t *src,
					const uint8_t *dst, uint16_t sport, uint16_t dport,
					const void *pay, uint16_t len)
{
	uint8_t b[1600];
	CU_ASSERT_FATAL(8u + len <= sizeof b);
	struct rte_udp_hdr *u = (struct rte_udp_hdr *)b;
	u->src_port = htons(sport);
	u->dst_port = htons(dport);
	u->dgram_len = htons((uint16_t)(8 + len));
	u->dgram_cksum = 0;
	memcpy(b + 8, pay, len);
	struct rte_mbuf *m = dpf_ip6(w, src, dst, &w->port, IPPROTO_UDP, 64, b, (uint16_t)(8 + len));
	struct rte_ipv6_hdr *ip = rte_pktmbuf_mtod_offset(m, struct rte_ipv6_hdr *, 14);
	struct rte_udp_hdr *mu = (struct rte_udp_hdr *)(ip + 1);
	mu->dgram_cksum = rte_ipv6_udptcp_cksum(ip, mu);
	return m;
}

/* The echo of the runtime tests' shards: each datagram received on h goes
 * back to its sender from the lease it came in, and the lease is given back
 * when the send ends (its token carries the lease's id past 1000). */
static inline void dpf_echo(tl_loop *l, tl_handle h, const tl_completion *c)
{
	tl_op op;
	if (c->kind == TL_K_RECV && (c->flags & TL_F_LEASE)) {
		tl_udp_msg m = {.buf = c->u.recv.lease.data, .len = (uint32_t)c->result,
				.to = &c->u.recv.from};
		if (tl_udp_sendmsg(l, h, &m, 1000 + c->u.recv.lease.id, &op) < 0)
			tl_lease_release(l, c->u.recv.lease.id);
	} else if (c->kind == TL_K_SEND && c->token >= 1000) {
		tl_lease_release(l, (uint32_t)(c->token - 1000));
	}
}

/* A runtime's settings for a test: shards of its own (overcommitted, not
 * bound to CPUs), no signals, nothing from the environment. */
static inline void dpf_runtime_config(tl_runtime_config *cfg, uint32_t shards)
{
	tl_runtime_config_init(cfg);
	cfg->no_env = 1;
	cfg->bind = 0;
	cfg->signals = 0;
	cfg->plan.shards = shards;
	cfg->plan.overcommit = 1;
}

/* After the port's TL_DPDK_* settings: a loop made with the defaults must
 * be the DPDK driver's (the first claims the port). 0, or -1 (said on
 * stderr, with the driver's last error). */
static inline int dpf_driver_check(const char *name)
{
	tl_config cfg;
	tl_loop *l = NULL;
	tl_config_init(&cfg);
	int rc = tl_loop_new(&l, &cfg);
	if (rc != 0 || strcmp(tl_loop_driver(l), "dpdk") != 0) {
		tl_driver_info di;
		tl_driver_info_get(&di);
		fprintf(stderr, "%s: no DPDK loop (%d): %s\n", name, rc, di.last_error);
		if (rc == 0)
			tl_loop_close(l);
		return -1;
	}
	tl_loop_close(l);
	return 0;
}

#endif
