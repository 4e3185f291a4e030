/* drivers/dpdk.h: the DPDK driver's counters, for tests and tools (docs/DPDK.md). */
#ifndef TL_DPDK_H
#define TL_DPDK_H

#include <stdint.h>
#include "turnloop/loop.h"

/* One loop's queue pair: frames in and out, and every frame dropped, by
 * reason. Nothing is dropped without being counted here. */
struct tl_dpdk_stats {
	uint64_t rx_frames, rx_bursts, tx_frames, tx_bursts;
	uint64_t rx_datagrams;   /* queued on a handle */
	uint64_t tx_full;        /* bursts the TX ring took only part of (the rest waited) */
	uint64_t drop_bad;       /* malformed: short, bad lengths or checksums */
	uint64_t drop_frag;      /* IPv4 fragments (not reassembled) */
	uint64_t drop_proto;     /* not ARP, IPv4 or UDP (IPv6 among them) */
	uint64_t drop_not_ours;  /* for another MAC or IP address */
	uint64_t drop_no_port;   /* no handle bound to the destination port */
	uint64_t drop_rcvq;      /* the handle's queue was full */
	uint64_t arp_in, arp_out;
	uint64_t unreachable;    /* sends ended: no ARP answer */
	uint64_t naps, spins;    /* idle sleeps, and polls of the port while spinning */
	uint32_t queue;          /* the queue pair's number */
	uint8_t link_up;
};

/* Copy loop's counters to *out: 0, or -ENOTSUP when loop does not run on
 * the DPDK driver. */
int tl__dpdk_stats(tl_loop *loop, struct tl_dpdk_stats *out);

#endif
