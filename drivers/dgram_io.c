/* drivers/dgram_io.c: datagram socket helpers shared by the kernel drivers: bind options, GSO/GRO probes, and building and parsing each datagram's control messages. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include "dgram_io.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

static int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof v) < 0 ? -errno : 0;
}

int tl__dg_opts(int fd, int v6, uint32_t flags)
{
	int r = 0;
	if ((flags & TL_UDP_REUSEPORT) && (r = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1)) < 0)
		return r;
	if (flags & TL_UDP_PKTINFO) {
		/* A dual-stack socket gets IPv4 datagrams' info as IP_PKTINFO. */
		if ((r = set_int(fd, IPPROTO_IP, IP_PKTINFO, 1)) < 0 && !v6)
			return r;
		if (v6 && (r = set_int(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)) < 0)
			return r;
	}
	if ((flags & TL_UDP_GRO) && (r = set_int(fd, SOL_UDP, UDP_GRO, 1)) < 0)
		return r;
	return 0;
}

uint32_t tl__dg_probe(void)
{
	/* 0: not probed yet; bit 31 marks a probe done. Racing loops compute
	 * the same answer. */
	static uint32_t cached;
	uint32_t c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (c)
		return c & ~(1u << 31);
	c = 1u << 31;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		int v = 0;
		socklen_t len = sizeof v;
		if (getsockopt(fd, SOL_UDP, UDP_SEGMENT, &v, &len) == 0)
			c |= TL_CAP_UDP_GSO;
		if (set_int(fd, SOL_UDP, UDP_GRO, 1) == 0)
			c |= TL_CAP_UDP_GRO;
		close(fd);
	}
	__atomic_store_n(&cached, c, __ATOMIC_RELAXED);
	return c & ~(1u << 31);
}

int tl__dg_connect(int fd, const tl_addr *peer)
{
	return connect(fd, &peer->sa, tl_addr_len(peer)) < 0 ? -errno : 0;
}

void tl__dg_send_msg(struct msghdr *mh, struct iovec *iov, union tl__dg_ctl *ctl,
		     struct tl_opslot *o, int v6)
{
	memset(mh, 0, sizeof *mh);
	mh->msg_iov = iov;
	mh->msg_iovlen = 1;
	if (o->u.dg.addr.sa.sa_family) {
		mh->msg_name = &o->u.dg.addr;
		mh->msg_namelen = tl_addr_len(&o->u.dg.addr);
	}
	sa_family_t lf = o->u.dg.local.sa.sa_family;
	if (!lf && !o->u.dg.seg)
		return;
	memset(ctl->buf, 0, sizeof ctl->buf);
	mh->msg_control = ctl->buf;
	mh->msg_controllen = sizeof ctl->buf;
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	size_t used = 0;
	if (lf == AF_INET) {
		struct in_pktinfo pi = {.ipi_spec_dst = o->u.dg.local.in.sin_addr};
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof pi);
		memcpy(CMSG_DATA(c), &pi, sizeof pi);
		used += CMSG_SPACE(sizeof pi);
		c = CMSG_NXTHDR(mh, c);
	} else if (lf == AF_INET6) {
		struct in6_pktinfo pi = {.ipi6_addr = o->u.dg.local.in6.sin6_addr};
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof pi);
		memcpy(CMSG_DATA(c), &pi, sizeof pi);
		used += CMSG_SPACE(sizeof pi);
		c = CMSG_NXTHDR(mh, c);
	}
	(void)v6;
	if (o->u.dg.seg) {
		uint16_t seg = (uint16_t)o->u.dg.seg;
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof seg);
		memcpy(CMSG_DATA(c), &seg, sizeof seg);
		used += CMSG_SPACE(sizeof seg);
	}
	mh->msg_controllen = used;
}

void tl__dg_recv_msg(struct msghdr *mh, struct iovec *iov, union tl__dg_ctl *ctl,
		     struct tl_opslot *o)
{
	memset(mh, 0, sizeof *mh);
	mh->msg_name = &o->u.dg.addr;
	mh->msg_namelen = sizeof o->u.dg.addr;
	mh->msg_iov = iov;
	mh->msg_iovlen = 1;
	mh->msg_control = ctl->buf;
	mh->msg_controllen = sizeof ctl->buf;
}

uint32_t tl__dg_recv_done(const struct msghdr *mh, struct tl_opslot *o, uint32_t n,
			  uint32_t cap)
{
	memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
	o->u.dg.seg = 0;
	o->u.dg.full = n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof pi);
			o->u.dg.local.in.sin_family = AF_INET;
			o->u.dg.local.in.sin_addr = pi.ipi_addr;
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof pi);
			o->u.dg.local.in6.sin6_family = AF_INET6;
			o->u.dg.local.in6.sin6_addr = pi.ipi6_addr;
		} else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int seg;
			memcpy(&seg, CMSG_DATA(c), sizeof seg);
			o->u.dg.seg = (uint32_t)seg;
		}
	}
	/* A source the kernel did not name (an unbound peer on a connected
	 * socket never happens for UDP; keep the family honest anyway). */
	if (mh->msg_namelen == 0)
		memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	return n < cap ? n : cap;
}
