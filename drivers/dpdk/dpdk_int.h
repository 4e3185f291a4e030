/* drivers/dpdk/dpdk_int.h: the DPDK driver's private structures, seen only by its own files. */
#ifndef TL_DPDK_INT_H
#define TL_DPDK_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include "driver.h"
#include "os.h"
#include "dpdk.h"

/*
 * The DPDK driver (docs/DPDK.md) serves the runtime's datagram operations
 * on a DPDK port instead of kernel sockets. The process sets up the EAL
 * and one port once (port.c), with one RX and one TX queue per loop that
 * may run on it; each loop claims a queue pair when it starts and gives it
 * back when it is destroyed, and owns that pair alone, so no queue or mbuf
 * pool of the driver is shared between threads; only the hand-off's table
 * and rings (below) are, through atomics.
 *
 * A datagram handle is a UDP port number of this loop (a table of 65,536
 * entries maps a destination port to its handles). A received frame is
 * checked (wire.c), then its mbuf waits on the handle's queue (at most
 * DP_RCVQ, the socket buffer's part: beyond it the frame is dropped and
 * counted, as a full socket drops) until a receive of the handle takes it:
 * the payload is copied into the op's buffer or a pooled lease and the
 * mbuf goes back to the pool. Sends queue on the loop's transmit list in
 * submission order; the poll turns each into a frame (headers and
 * checksums in software unless the port offloads them) and hands them to
 * the TX ring in one burst. A send completes when the ring took its frame;
 * what the ring refuses stays queued, in order, for the next poll: a full
 * ring is backpressure, never a drop.
 *
 * IPv4 and IPv6 both (wire.c): an IPv6 handle bound to :: also takes
 * IPv4 datagrams, reported IPv4-mapped (::ffff:a.b.c.d), as a kernel
 * socket with IPV6_V6ONLY off does; addresses of either family are kept
 * as 16 bytes (dp_ip), IPv4 ones mapped so.
 *
 * Neighbours: one table for both families. The loop answers ARP for its
 * IPv4 addresses and learns the sender of every ARP and IPv4 frame
 * addressed to it; it answers Neighbour Solicitations for its IPv6
 * addresses (nd.c) and learns from Advertisements and from solicitations'
 * source link-layer option (not from IPv6 data frames, as IPv6 hosts do).
 * A send to an address not learnt yet waits (off the transmit list) while
 * the driver asks, by ARP or a Neighbour Solicitation, up to DP_ARP_TRIES
 * times DP_ARP_EVERY_NS; then it ends with -EHOSTUNREACH. A send to the
 * port's own address goes out of the port like any other (a net_ring port
 * brings it back; a NIC does not).
 *
 * Hand-off (port.c's dp_shared, wire.c): a datagram that comes in on a
 * pair whose loop has no handle on its UDP port goes to a loop of the
 * process that has one, when the port has more than one pair. A
 * process-wide table says, for each UDP port, which pairs' loops have a
 * handle bound there (binds and closes keep it); the receiving loop picks
 * one of them by a hash of the source address and port (one flow, one
 * loop) and copies the datagram's parsed parts (addresses, ports, payload)
 * into a slot of the single-producer, single-consumer ring from its pair
 * to that one. The target takes it in its poll as if it had come in on its
 * own pair: its own handles' checks, queue, receives and leases. A full
 * ring drops (counted, drop_handoff): the receive side, where the kernel
 * drops too. No mbuf crosses threads: each pool keeps one owner.
 */

/* Datagrams a handle's queue holds before the next ones are dropped. */
#define DP_RCVQ 512
/* Frames per RX or TX burst. */
#define DP_BURST 32
/* Neighbour table entries (a power of two) and the ARP schedule. */
#define DP_NEIGH 256
#define DP_ARP_EVERY_NS (200ull * 1000 * 1000)
#define DP_ARP_TRIES 5
/* Addresses of each family a port may have (TL_DPDK_ADDR lists them). */
#define DP_ADDRS 8
/* The largest UDP payload one frame carries (no IP fragmentation). */
#define DP_MTU 1500
#define DP_MAX_PAYLOAD (DP_MTU - 20 - 8)
#define DP_MAX_PAYLOAD6 (DP_MTU - 40 - 8)

/* An IP address of either family: IPv6, or IPv4 as ::ffff:a.b.c.d. */
typedef union dp_ip {
	uint8_t b[16];
	uint32_t w[4];
	uint64_t q[2];
} dp_ip;

static inline int dp_ip_eq(const dp_ip *a, const dp_ip *b)
{
	return a->q[0] == b->q[0] && a->q[1] == b->q[1];
}

static inline int dp_ip_is4(const dp_ip *a)
{
	return a->q[0] == 0 && a->w[2] == rte_cpu_to_be_32(0xffff);
}

static inline dp_ip dp_ip4(uint32_t v4)
{
	dp_ip a = {.q = {0, 0}};
	a.w[2] = rte_cpu_to_be_32(0xffff);
	a.w[3] = v4;
	return a;
}

/* The ones' complement sum (RFC 1071) of p[0..n) added to s, not folded:
 * 16-bit words as they lie in memory, which gives the checksum in either
 * byte order. Eight bytes a step into 64 bits (rte_raw_cksum takes two, and
 * was the driver's largest single cost per datagram: docs/PERFORMANCE.md,
 * "Where a datagram's instructions go on the DPDK driver"). */
static inline uint64_t tl__dp_sum(const void *p, uint32_t n, uint64_t s)
{
	const uint8_t *b = (const uint8_t *)p;
	uint64_t q;
	uint32_t w;
	uint16_t h = 0;
	for (; n >= 8; b += 8, n -= 8) {
		memcpy(&q, b, 8);
		s += (q & 0xffffffffu) + (q >> 32);
	}
	if (n >= 4) {
		memcpy(&w, b, 4);
		s += w;
		b += 4;
		n -= 4;
	}
	if (n >= 2) {
		memcpy(&h, b, 2);
		s += h;
		b += 2;
		n -= 2;
	}
	if (n) {
		h = 0;
		memcpy(&h, b, 1); /* the odd byte, as the first of a word */
		s += h;
	}
	return s;
}

/* A sum of tl__dp_sum folded to 16 bits (not complemented). */
static inline uint16_t tl__dp_fold(uint64_t s)
{
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

/* A hand-off ring's slot: a datagram's parsed parts (wire.c). */
struct dp_slot {
	dp_ip sip, dip;        /* IPv4: sip as {0, 0, 0, a}, dip mapped */
	uint16_t sport, dport; /* network order */
	uint16_t len;          /* payload bytes */
	uint8_t v6;
	uint8_t _pad[64 - 39];
	uint8_t data[DP_MAX_PAYLOAD];
};
_Static_assert(sizeof(struct dp_slot) == 64 + DP_MAX_PAYLOAD, "a slot is its header line and the largest payload");

/* One single-producer, single-consumer ring of slots: the producer is the
 * loop of pair src, the consumer that of pair dst. */
struct dp_ring {
	_Alignas(64) _Atomic uint32_t head; /* written by the producer */
	_Alignas(64) _Atomic uint32_t tail; /* written by the consumer */
	_Alignas(64) uint32_t mask;
	struct dp_slot *s;
};

/* A pair's wake-up for hand-offs: its loop naps on w beside its own
 * notifier, after saying so in napping. */
struct dp_qwake {
	_Alignas(64) _Atomic uint32_t napping;
	tl__os_notifier w;
};

/* The hand-off's process-wide state (port.c makes it with the port when
 * it has more than one pair and TL_DPDK_HANDOFF is not 0; it lives as
 * long as the process). */
struct dp_shared {
	uint32_t nq;               /* queue pairs */
	uint32_t slots;            /* per ring, a power of two */
	_Atomic uint64_t *owners;  /* UDP port (host order) -> bit q: pair q's loop has a handle there */
	struct dp_ring *rings;     /* [src * nq + dst] */
	struct dp_qwake *wake;     /* [q] */
};

/* What the driver keeps in each mbuf's private area (port.c sizes it). */
struct dp_meta {
	struct rte_mbuf *next; /* the handle's receive queue */
	uint32_t sip, dip;     /* source and destination (network order) */
	uint16_t sport, dport; /* network order */
	uint16_t off, len;     /* the UDP payload in the mbuf's data */
	uint16_t full;         /* the payload's length as the UDP header says */
	uint16_t l3;           /* IPv6: its header's offset (the addresses are read there) */
	uint8_t v6;            /* an IPv6 datagram (sip, dip unused) */
};

_Static_assert(sizeof(struct dp_meta) <= TL_DPDK_MBUF_PRIV && TL_DPDK_MBUF_PRIV % RTE_MBUF_PRIV_ALIGN == 0,
	       "the notes fit the private area the driver asks of a pool");

static inline struct dp_meta *dp_meta(struct rte_mbuf *m)
{
	return (struct dp_meta *)rte_mbuf_to_priv(m);
}

/* A datagram handle's state, in its slot's drv words. */
struct dp_h {
	struct rte_mbuf *qhead, *qtail; /* received, not yet taken */
	uint32_t rhead, rtail;          /* its receives, oldest first */
	uint32_t rdy_next, rdy_prev;    /* the loop's ready list (TL_NIL ends) */
	uint32_t chain;                 /* next handle bound to the same port */
	uint32_t peer_ip;               /* connected to IPv4: the peer (network order) */
	uint16_t peer_port, lport;      /* network order; peer_port 0: not connected */
	uint16_t qlen;
	uint8_t flags;                  /* DPH_* */
	uint8_t addr;                   /* bound to: 0 any, else ips[addr - 1] (ip6 with DPH_ADDR6) */
};
_Static_assert(sizeof(struct dp_h) <= sizeof(((struct tl_hslot *)0)->u.drv), "dp_h fits");
static inline struct dp_h *DPH(struct tl_hslot *h) { return (struct dp_h *)h->u.drv; }

#define DPH_READY 0x01     /* on the ready list */
#define DPH_REUSEPORT 0x02
#define DPH_LEASE_WAIT 0x04 /* waits for a pooled buffer */
#define DPH_BOUND 0x08     /* in the port table */
#define DPH_V6 0x10        /* an IPv6 handle (addresses reported as IPv6) */
#define DPH_ADDR6 0x20     /* bound to an IPv6 address: addr indexes ip6 */
#define DPH_PEER6 0x40     /* connected to an IPv6 peer: tl_drv.peer6[its slot] */

/* An operation's state, in its slot's drv words. */
struct dp_o {
	uint32_t next;     /* the list it is on */
	uint8_t where;     /* DPO_* */
	uint8_t tries;     /* ARP requests or solicitations sent for it */
	uint16_t _pad;
	uint64_t due;      /* waiting for a neighbour: next question */
};
_Static_assert(sizeof(struct dp_o) <= sizeof(((struct tl_opslot *)0)->drv), "dp_o fits");
static inline struct dp_o *DPO(struct tl_opslot *o) { return (struct dp_o *)o->drv; }

enum { DPO_NONE = 0, DPO_RECV, DPO_TX, DPO_NEIGH };

struct dp_neigh {
	dp_ip ip;     /* all zero: free */
	struct rte_ether_addr mac;
	uint8_t state; /* 1: known */
};

/* A list of ops linked through dp_o.next. */
struct dp_list {
	uint32_t head, tail;
	uint32_t n;
};

struct tl_drv {
	tl_loop *loop;
	struct tl_hslot *hs;
	struct tl_opslot *os;
	tl__os_notifier *wake; /* the loop's notifier */
	uint16_t port, queue;
	struct rte_mempool *mp;
	struct rte_ether_addr mac;
	uint32_t ip;           /* the port's first IPv4 address (network order) */
	uint32_t ips[DP_ADDRS];/* all of them */
	uint32_t nips;
	dp_ip ip6[DP_ADDRS];   /* its IPv6 addresses, the first the default source */
	uint32_t nip6;
	dp_ip *peer6;          /* handle slot -> its IPv6 peer (DPH_PEER6) */
	uint64_t tx_offload;   /* RTE_ETH_TX_OFFLOAD_* the port has that the driver uses */
	uint32_t *bound;       /* UDP port (host order) -> first handle slot, TL_NIL */
	uint16_t next_port;    /* the next ephemeral port to try */
	struct dp_list tx;     /* sends waiting for the TX ring */
	struct dp_list nw;     /* sends waiting for a neighbour */
	uint32_t rdy_head, rdy_tail; /* handles with datagrams and receives to match */
	uint32_t *lwait, nlwait;     /* handles waiting for a pooled buffer */
	uint64_t spin_ns, nap_ns;    /* the idle policy (dp_poll) */
	uint64_t last_work;          /* when a poll last found work */
	uint64_t link_at;            /* when to look at the link next */
	uint8_t link_up;
	uint8_t registered;          /* tl__dp_claim made this thread an lcore */
	struct rte_mbuf *ctl[DP_BURST]; /* ARP and ND frames to send before the sends */
	uint32_t nctl;
	struct dp_neigh neigh[DP_NEIGH];
	struct dp_shared *sh;        /* the hand-off, or NULL (one pair, or TL_DPDK_HANDOFF=0) */
	uint64_t handed_to;          /* pairs this poll handed datagrams to (to wake) */
	struct tl_dpdk_stats st;
};

/* port.c: the process's EAL and port. */
struct dp_port_info {
	uint16_t port;
	struct rte_ether_addr mac;
	uint32_t ips[DP_ADDRS], nips;
	dp_ip ip6[DP_ADDRS];
	uint32_t nip6;
	uint8_t nd_mc; /* TL_DPDK_MC_*: how ND's multicast frames reach the port */
	uint64_t tx_offload;
	uint64_t rx_offload;
	struct dp_shared *sh; /* the hand-off between pairs, or NULL */
};
/* Set the EAL and the port up if not yet (TL_DPDK, TL_DPDK_ADDR,
 * TL_DPDK_PORT, TL_DPDK_QUEUES), then claim a free queue pair: 0 and *q,
 * *mp, *info; or a negative errno (-EINVAL: a setting is missing or bad,
 * -EBUSY: every queue pair is taken, or the EAL's error). A calling thread
 * the EAL did not start is registered as an lcore (*registered 1). */
int tl__dp_claim(uint16_t *q, struct rte_mempool **mp, struct dp_port_info *info,
		 int *registered);
/* Give queue pair q back (its RX ring drained first, this lcore's cached
 * mbufs back in the pool) and unregister the thread if the claim did.
 * Called on the thread that claimed it. */
void tl__dp_unclaim(uint16_t q, int registered);
/* Why the last tl__dp_claim failed, in words ("" if it did not). */
const char *tl__dp_why(void);

/* wire.c: frames. */
/* One received frame: checked, counted, and queued on its handle, answered
 * (ARP, ND), or freed. */
void tl__dp_input(struct tl_drv *d, struct rte_mbuf *m);
/* Build the frame of send op o on handle h into m: 0, 1 when the
 * neighbour is not known yet (m untouched), or a negative errno for the
 * op's terminal. */
int tl__dp_build(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, struct rte_mbuf *m);
/* Ask for the neighbour send op o waits for (ARP or a solicitation). */
void tl__dp_ask(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
/* Queue a control frame (ARP, ND) to go out before the sends. */
void tl__dp_ctl_push(struct tl_drv *d, struct rte_mbuf *m);
/* ip is at mac: learn it (a full table replaces the entry at ip's slot);
 * sends waiting for a neighbour try again. */
void tl__dp_learn(struct tl_drv *d, const dp_ip *ip, const struct rte_ether_addr *mac);
/* 1 + the index of ip among the port's addresses, or 0. */
static inline uint32_t tl__dp_mine(const struct tl_drv *d, uint32_t ip)
{
	for (uint32_t i = 0; i < d->nips; i++)
		if (d->ips[i] == ip)
			return i + 1;
	return 0;
}
/* 1 + the index of ip among the port's IPv6 addresses, or 0. */
static inline uint32_t tl__dp_mine6(const struct tl_drv *d, const void *ip)
{
	dp_ip a;
	memcpy(&a, ip, 16);
	for (uint32_t i = 0; i < d->nip6; i++)
		if (dp_ip_eq(&d->ip6[i], &a))
			return i + 1;
	return 0;
}
/* The neighbour entry of ip, or NULL. */
struct dp_neigh *tl__dp_neigh(struct tl_drv *d, const dp_ip *ip);

/* nd.c: IPv6 neighbour discovery (RFC 4861) for the port's addresses. */
/* An ICMPv6 message in IPv6 packet ip (no extension headers), addressed
 * to one of the port's addresses or to a multicast group of theirs
 * (mc): Neighbour Solicitations answered, Advertisements learnt from,
 * the rest dropped and counted. */
void tl__dp_icmp6_input(struct tl_drv *d, struct rte_ether_hdr *eh, struct rte_ipv6_hdr *ip, int mc);
/* Queue a Neighbour Solicitation for target from src (one of the port's
 * addresses) on the control frames. */
void tl__dp_nd_ask(struct tl_drv *d, const dp_ip *target, const dp_ip *src);
/* 1 if mac is a multicast MAC the port listens on for IPv6: all-nodes
 * (33:33:00:00:00:01) or the solicited-node group of one of its
 * addresses. */
int tl__dp_nd_mac(const struct tl_drv *d, const struct rte_ether_addr *mac);
/* 1 if IPv6 address ip is a group the port takes ND on: all-nodes
 * (ff02::1) or the solicited-node group of one of its addresses. */
int tl__dp_nd_group(const struct tl_drv *d, const uint8_t *ip);
/* The solicited-node multicast address of a (ff02::1:ffXX:XXXX) and its
 * MAC (33:33:ff:XX:XX:XX). */
void tl__dp_snm(const dp_ip *a, dp_ip *group, struct rte_ether_addr *mac);
/* The ones' complement sum (folded, not complemented) of IPv6's
 * pseudo-header for ip (upper-layer length len, next header nh) and
 * l4[0..len). */
uint16_t tl__dp_sum6(const struct rte_ipv6_hdr *ip, const void *l4, uint32_t len, uint8_t nh);

/* A datagram for UDP port dport (network order) that no handle of this
 * loop takes: 1 if it went to another pair's loop (or was dropped for a
 * full ring: counted), 0 if no other loop has a handle on the port. */
int tl__dp_hand_out(struct tl_drv *d, int v6, const dp_ip *sip, const dp_ip *dip, uint16_t sport,
		    uint16_t dport, const void *pay, uint16_t len);
/* Take what other pairs handed this one, as received here. */
void tl__dp_hand_in(struct tl_drv *d);
/* 1 if some other pair handed this one a datagram not taken yet. */
int tl__dp_hand_pending(const struct tl_drv *d);

/* driver.c: a handle got a datagram (put it on the ready list). */
void tl__dp_ready(struct tl_drv *d, struct tl_hslot *h);

#endif
