/* drivers/dpdk/nd.c: the DPDK driver's IPv6 neighbour discovery: Neighbour Solicitations answered for the port's addresses and sent for its peers, Advertisements learnt from (RFC 4861). */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <rte_ip.h>
#include <rte_ethdev.h>
#include "dpdk_int.h"

/* ICMPv6 types and ND options (RFC 4861 4.3, 4.4, 4.6.1). */
enum { ND_NS = 135, ND_NA = 136, ND_OPT_SLLA = 1, ND_OPT_TLLA = 2 };
/* Neighbour Advertisement flags (the first byte after the checksum). */
enum { NA_ROUTER = 0x80, NA_SOLICITED = 0x40, NA_OVERRIDE = 0x20 };

/* A solicitation or an advertisement with one link-layer option: the
 * message is 24 bytes, the option 8. */
struct nd_msg {
	uint8_t type, code;
	uint16_t cksum;
	uint8_t flags, rsv[3];
	uint8_t target[16];
	uint8_t opt_type, opt_len; /* opt_len in units of 8 bytes */
	struct rte_ether_addr lladdr;
};
_Static_assert(sizeof(struct nd_msg) == 32, "an ND message with its option");

static const dp_ip all_nodes = {.b = {0xff, 0x02, [15] = 1}};

uint16_t tl__dp_sum6(const struct rte_ipv6_hdr *ip, const void *l4, uint32_t len, uint8_t nh)
{
	/* The pseudo-header: both addresses (adjacent in the header), the
	 * upper-layer length as 32 bits and the next header as 32 bits. The
	 * raw sum takes 16-bit words as they lie in memory, so each field is
	 * added as it would lie there (big-endian). */
	uint64_t s = tl__dp_sum(ip->src_addr, 32, 0);
	s += rte_cpu_to_be_16((uint16_t)(len >> 16)) + rte_cpu_to_be_16((uint16_t)len);
	s += rte_cpu_to_be_16(nh);
	return tl__dp_fold(tl__dp_sum(l4, len, s));
}

void tl__dp_snm(const dp_ip *a, dp_ip *group, struct rte_ether_addr *mac)
{
	static const uint8_t pre[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff};
	memcpy(group->b, pre, sizeof pre);
	memcpy(group->b + 13, a->b + 13, 3);
	/* RFC 2464 7: 33:33 and the group's last four bytes. */
	mac->addr_bytes[0] = 0x33;
	mac->addr_bytes[1] = 0x33;
	memcpy(mac->addr_bytes + 2, group->b + 12, 4);
}

int tl__dp_nd_mac(const struct tl_drv *d, const struct rte_ether_addr *mac)
{
	const uint8_t *b = mac->addr_bytes;
	if (b[0] != 0x33 || b[1] != 0x33 || !d->nip6)
		return 0;
	if (b[2] == 0 && b[3] == 0 && b[4] == 0 && b[5] == 1)
		return 1; /* all-nodes */
	if (b[2] != 0xff)
		return 0;
	for (uint32_t i = 0; i < d->nip6; i++)
		if (!memcmp(d->ip6[i].b + 13, b + 3, 3))
			return 1;
	return 0;
}

int tl__dp_nd_group(const struct tl_drv *d, const uint8_t *ip)
{
	dp_ip a, g;
	memcpy(a.b, ip, 16);
	if (dp_ip_eq(&a, &all_nodes))
		return d->nip6 != 0;
	struct rte_ether_addr mac;
	for (uint32_t i = 0; i < d->nip6; i++) {
		tl__dp_snm(&d->ip6[i], &g, &mac);
		if (dp_ip_eq(&a, &g))
			return 1;
	}
	return 0;
}

/* An ND message from src to dst (eth dst dmac): the frame, with its
 * ICMPv6 checksum, queued on the control frames. */
static void nd_send(struct tl_drv *d, const struct rte_ether_addr *dmac, const dp_ip *src,
		    const dp_ip *dst, uint8_t type, uint8_t flags, const dp_ip *target)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(d->mp);
	if (!m)
		return; /* the pool is empty now: the next try asks, the peer asks again */
	struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(
		m, sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv6_hdr) + sizeof(struct nd_msg));
	struct rte_ipv6_hdr *ip = (struct rte_ipv6_hdr *)(eh + 1);
	struct nd_msg *nd = (struct nd_msg *)(ip + 1);
	eh->src_addr = d->mac;
	eh->dst_addr = *dmac;
	eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
	ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
	ip->payload_len = rte_cpu_to_be_16(sizeof *nd);
	ip->proto = IPPROTO_ICMPV6;
	ip->hop_limits = 255; /* RFC 4861: a receiver checks that no router forwarded it */
	memcpy(ip->src_addr, src->b, 16);
	memcpy(ip->dst_addr, dst->b, 16);
	memset(nd, 0, sizeof *nd);
	nd->type = type;
	nd->flags = flags;
	memcpy(nd->target, target->b, 16);
	nd->opt_type = type == ND_NS ? ND_OPT_SLLA : ND_OPT_TLLA;
	nd->opt_len = 1;
	nd->lladdr = d->mac;
	nd->cksum = (uint16_t)~tl__dp_sum6(ip, nd, sizeof *nd, IPPROTO_ICMPV6);
	d->st.nd_out++;
	tl__dp_ctl_push(d, m);
}

void tl__dp_nd_ask(struct tl_drv *d, const dp_ip *target, const dp_ip *src)
{
	dp_ip group;
	struct rte_ether_addr mac;
	tl__dp_snm(target, &group, &mac);
	nd_send(d, &mac, src, &group, ND_NS, 0, target);
}

/* The link-layer address option of type want in an ND message's options
 * opt[0..len): 1 and *mac, 0 if there is none, -1 if the options are
 * malformed (a zero length, or one past the end). */
static int nd_option(const uint8_t *opt, uint32_t len, uint8_t want, struct rte_ether_addr *mac)
{
	int found = 0;
	while (len) {
		if (len < 2 || opt[1] == 0 || (uint32_t)opt[1] * 8 > len)
			return -1;
		uint32_t ol = (uint32_t)opt[1] * 8;
		if (opt[0] == want && ol >= 8 && !found) {
			memcpy(mac, opt + 2, sizeof *mac);
			found = 1;
		}
		opt += ol;
		len -= ol;
	}
	return found;
}

void tl__dp_icmp6_input(struct tl_drv *d, struct rte_ether_hdr *eh, struct rte_ipv6_hdr *ip, int mc)
{
	uint32_t len = rte_be_to_cpu_16(ip->payload_len);
	const uint8_t *p = (const uint8_t *)(ip + 1);
	if (len < 4 || tl__dp_sum6(ip, p, len, IPPROTO_ICMPV6) != 0xffff) {
		d->st.drop_bad++;
		return;
	}
	if (p[0] != ND_NS && p[0] != ND_NA) {
		d->st.drop_proto++; /* echo, router discovery, MLD: not served */
		return;
	}
	d->st.nd_in++;
	/* RFC 4861 7.1.1 and 7.1.2: hop limit 255, code 0, 24 bytes at
	 * least, a unicast target, well-formed options. The target is read
	 * once the message is known to hold it. */
	if (ip->hop_limits != 255 || p[1] != 0 || len < 24 || p[8] == 0xff) {
		d->st.drop_bad++;
		return;
	}
	dp_ip target, src;
	memcpy(target.b, p + 8, 16);
	memcpy(src.b, ip->src_addr, 16);
	struct rte_ether_addr ll;
	int has = nd_option(p + 24, len - 24, p[0] == ND_NS ? ND_OPT_SLLA : ND_OPT_TLLA, &ll);
	if (has < 0) {
		d->st.drop_bad++;
		return;
	}
	static const dp_ip unspec;
	int from_unspec = dp_ip_eq(&src, &unspec);
	if (p[0] == ND_NA) {
		/* A solicited advertisement is never multicast. */
		if (mc && (p[4] & NA_SOLICITED)) {
			d->st.drop_bad++;
			return;
		}
		if (tl__dp_mine6(d, target.b)) {
			d->st.drop_not_ours++; /* another node claims our address */
			return;
		}
		tl__dp_learn(d, &target, has ? &ll : &eh->src_addr);
		return;
	}
	/* A solicitation: for one of ours? From :: (duplicate address
	 * detection) it goes to the solicited-node group and carries no
	 * source link-layer option. */
	if (!tl__dp_mine6(d, target.b)) {
		d->st.drop_not_ours++;
		return;
	}
	if (from_unspec && (!mc || has)) {
		d->st.drop_bad++;
		return;
	}
	if (from_unspec) {
		/* Another node would take our address: tell every node it is
		 * ours (RFC 4861 7.2.4), unsolicited. */
		struct rte_ether_addr mac = {{0x33, 0x33, 0, 0, 0, 1}};
		nd_send(d, &mac, &target, &all_nodes, ND_NA, NA_OVERRIDE, &target);
		return;
	}
	if (has)
		tl__dp_learn(d, &src, &ll);
	/* The answer goes to the asker's link-layer address: its option's,
	 * else the frame's source. */
	nd_send(d, has ? &ll : &eh->src_addr, &target, &src, ND_NA, NA_SOLICITED | NA_OVERRIDE,
		&target);
}
