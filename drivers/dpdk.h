/* drivers/dpdk.h: the DPDK driver's counters, for tests and tools (docs/DPDK.md). */
#ifndef TL_DPDK_H
#define TL_DPDK_H

#include <stdint.h>
#include "turnloop/loop.h"

/* The private area (rte_pktmbuf_priv_size) a received mbuf's pool must
 * have for the driver to keep its notes on the frame in place: the pools
 * the driver gives its queues have it; a frame of a pool without it (a
 * ring port another program fills) is copied into one of the driver's
 * first (rx_copied). */
#define TL_DPDK_MBUF_PRIV 32

/* One loop's queue pair: frames in and out, and every frame dropped, by
 * reason. Nothing is dropped without being counted here. */
struct tl_dpdk_stats {
	uint64_t rx_frames, rx_bursts, tx_frames, tx_bursts;
	uint64_t rx_datagrams;   /* queued on a handle */
	uint64_t tx_full;        /* bursts the TX ring took only part of (the rest waited) */
	uint64_t drop_bad;       /* malformed: short, bad lengths or checksums */
	uint64_t drop_frag;      /* IPv4 fragments (not reassembled) */
	uint64_t drop_proto;     /* not ARP, IPv4, IPv6, UDP or ND */
	uint64_t drop_not_ours;  /* for another MAC or IP address */
	uint64_t drop_no_port;   /* no handle bound to the destination port */
	uint64_t drop_rcvq;      /* the handle's queue was full */
	uint64_t arp_in, arp_out;
	uint64_t unreachable;    /* sends ended: no ARP or ND answer */
	uint64_t naps, spins;    /* idle sleeps, and polls of the port while spinning */
	uint64_t drop_ext6;      /* IPv6 packets with an extension header (none is followed) */
	uint64_t nd_in, nd_out;  /* Neighbour Solicitations and Advertisements in and out */
	/* The hand-off between the port's pairs (docs/DPDK.md): datagrams
	 * this pair's loop had no handle for and gave to the loop that has
	 * one, those it took from other pairs, and those dropped because the
	 * ring to the other loop was full. */
	uint64_t handed_out, handed_in, drop_handoff;
	/* Frames from a pool without the driver's private area (a ring port
	 * fed by another program: the driver's own pools have it), copied
	 * into an mbuf of the driver's first; and those dropped because no
	 * mbuf was free for the copy. */
	uint64_t rx_copied, drop_nombuf;
	uint32_t queue;          /* the queue pair's number */
	uint8_t link_up;
	uint8_t nd_mc;           /* how the port takes ND's multicast frames: TL_DPDK_MC_* */
};

/* How the port receives the multicast frames of IPv6 neighbour discovery
 * (solicited-node groups, all-nodes): none asked (no IPv6 address), its
 * multicast list holds them (net_tap), all multicast on (it has no list:
 * net_ring), or as it passes frames (it has neither: net_memif). */
enum { TL_DPDK_MC_NONE = 0, TL_DPDK_MC_LIST, TL_DPDK_MC_ALL, TL_DPDK_MC_PORT };

/* Copy loop's counters to *out: 0, or -ENOTSUP when loop does not run on
 * the DPDK driver. */
int tl__dpdk_stats(tl_loop *loop, struct tl_dpdk_stats *out);

#endif
