/* drivers/dgram_io.h: datagram socket helpers shared by the kernel drivers (epoll, io_uring): options at bind, probes, and the control messages of each datagram. */
#ifndef TL_DGRAM_IO_H
#define TL_DGRAM_IO_H

#include <sys/socket.h>
#include "driver.h"

/* Receives of up to this many datagrams per system call or enter. */
#define TL_DG_BATCH 16

/* Control data of one datagram: a packet-info message (IPv4 or IPv6) and a
 * UDP_GRO or UDP_SEGMENT one, with room to spare. Aligned for cmsghdr. */
#define TL__DG_CTL 128
union tl__dg_ctl {
	char buf[TL__DG_CTL];
	uint64_t align;
};

/* Apply the TL_UDP_* flags that must come before bind(2) (SO_REUSEPORT)
 * or may come any time (packet info, UDP_GRO) to fd of family v6: 0 or
 * the OS error. */
int tl__dg_opts(int fd, int v6, uint32_t flags);
/* TL_CAP_UDP_GSO | TL_CAP_UDP_GRO as the running kernel has them (probed
 * once per process, with a throwaway socket). */
uint32_t tl__dg_probe(void);
/* connect(2) fd to peer: 0 or the OS error. */
int tl__dg_connect(int fd, const tl_addr *peer);
/* Fill mh for sending op's datagram (u.dg: addr, local, seg) from iov
 * (already pointing at the payload), with its control data in ctl. */
void tl__dg_send_msg(struct msghdr *mh, struct iovec *iov, union tl__dg_ctl *ctl,
		     struct tl_opslot *op, int v6);
/* Fill mh for receiving into iov with the source into op's u.dg.addr and
 * control data into ctl. */
void tl__dg_recv_msg(struct msghdr *mh, struct iovec *iov, union tl__dg_ctl *ctl,
		     struct tl_opslot *op);
/* A recvmsg into mh (made by tl__dg_recv_msg, flags MSG_TRUNC) returned
 * n > = 0 for a buffer of cap bytes: set op's u.dg.full, u.dg.local and
 * u.dg.seg from it and return the bytes that are in the buffer. */
uint32_t tl__dg_recv_done(const struct msghdr *mh, struct tl_opslot *op, uint32_t n,
			  uint32_t cap);
#endif
