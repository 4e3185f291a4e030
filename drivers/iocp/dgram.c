/* drivers/iocp/dgram.c: the IOCP driver's datagrams: UDP sockets, overlapped WSARecvMsg into the caller's buffer or a lease (a multishot one takes what else waits without waiting), WSASendMsg, packet info, connected sockets. */
#include <errno.h>
#include <string.h>
#include "iocp_int.h"

/* Windows reports an ICMP port-unreachable on UDP to a later receive,
 * connected or not (WSAECONNRESET); Linux only to a connected socket, as
 * ECONNREFUSED. Off while unconnected (SIO_UDP_CONNRESET), on once
 * connected: the contract's behaviour (D4, D7). */
#ifndef SIO_UDP_CONNRESET
#define SIO_UDP_CONNRESET _WSAIOW(IOC_VENDOR, 12)
#endif

static struct io_op *IO(struct tl_drv *d, const struct tl_opslot *o)
{
	return &d->ops[o->idx];
}

static int icmp_reports(SOCKET s, BOOL on)
{
	DWORD got = 0;
	return WSAIoctl(s, SIO_UDP_CONNRESET, &on, sizeof on, NULL, 0, &got, NULL, NULL) ? tl__io_last_error()
											   : 0;
}

static int set_int(SOCKET s, int level, int name, int v)
{
	return setsockopt(s, level, name, (char *)&v, sizeof v) ? tl__io_last_error() : 0;
}

/*
 * A UDP socket. An IPv6 one takes IPv4 too (Windows' default is the
 * other way). TL_UDP_PKTINFO: the destination address of each datagram
 * comes as IP_PKTINFO / IPV6_PKTINFO control data. TL_UDP_REUSEPORT has
 * no Windows counterpart (SO_REUSEADDR lets any socket take a port over,
 * and spreads nothing): -ENOTSUP. GRO never reaches here (no
 * TL_CAP_UDP_GRO). The socket is non-blocking: a multishot receive takes
 * what waits beyond its overlapped datagram without an OS wait.
 */
int tl__io_udp_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *sp)
{
	if (sp->udp_flags & TL_UDP_REUSEPORT)
		return -ENOTSUP;
	int fam = sp->addr->sa.sa_family, v6 = fam == AF_INET6, r = 0;
	u_long nb = 1;
	SOCKET s = WSASocketW(fam, SOCK_DGRAM, IPPROTO_UDP, NULL, 0, WSA_FLAG_OVERLAPPED);
	if (s == INVALID_SOCKET)
		return tl__io_last_error();
	if (v6)
		r = set_int(s, IPPROTO_IPV6, IPV6_V6ONLY, 0);
	if (!r && (sp->udp_flags & TL_UDP_PKTINFO)) {
		r = set_int(s, IPPROTO_IP, IP_PKTINFO, 1);
		if (v6 && (!r || r == -EINVAL)) /* a dual-stack socket: both kinds */
			r = set_int(s, IPPROTO_IPV6, IPV6_PKTINFO, 1);
	}
	if (!r)
		r = icmp_reports(s, FALSE);
	if (!r && ioctlsocket(s, FIONBIO, &nb))
		r = tl__io_last_error();
	if (!r && bind(s, &sp->addr->sa, (int)tl_addr_len(sp->addr)))
		r = tl__io_last_error();
	if (r) {
		closesocket(s);
		return r;
	}
	h->fd = (int)(intptr_t)s;
	if (v6)
		h->flags |= TL_HF_V6;
	return 0;
}

int tl__io_udp_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer)
{
	(void)d;
	/* An IPv6 peer on an IPv4 socket: the contract's code, which Windows
	 * and wine do not agree on (WSAEAFNOSUPPORT, WSAEOPNOTSUPP). */
	if (peer->sa.sa_family == AF_INET6 && !(h->flags & TL_HF_V6))
		return -EAFNOSUPPORT;
	if (connect(io_sock(h), &peer->sa, (int)tl_addr_len(peer)))
		return tl__io_last_error();
	IH(h)->connected = 1;
	return icmp_reports(io_sock(h), TRUE);
}

/* An adopted UDP socket: non-blocking as ours are, ICMP errors reported
 * only if it is connected. */
void tl__io_udp_adopted(struct tl_hslot *h, int connected)
{
	u_long nb = 1;
	IH(h)->connected = (uint8_t)!!connected;
	ioctlsocket(io_sock(h), FIONBIO, &nb);
	icmp_reports(io_sock(h), connected ? TRUE : FALSE);
}

/* ---- sends ---- */

/* The control data that sends from o->u.dg.local: its length (0: none). */
static ULONG send_ctl(struct io_op *io, const struct tl_opslot *o)
{
	WSAMSG *m = &io->u.dg.msg;
	WSACMSGHDR *c = (WSACMSGHDR *)io->u.dg.ctl;
	memset(io->u.dg.ctl, 0, sizeof io->u.dg.ctl);
	if (o->u.dg.local.sa.sa_family == AF_INET) {
		IN_PKTINFO pi = {.ipi_addr = o->u.dg.local.in.sin_addr};
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = WSA_CMSG_LEN(sizeof pi);
		memcpy(WSA_CMSG_DATA(c), &pi, sizeof pi);
		return (ULONG)WSA_CMSG_SPACE(sizeof pi);
	}
	if (o->u.dg.local.sa.sa_family == AF_INET6) {
		IN6_PKTINFO pi = {.ipi6_addr = o->u.dg.local.in6.sin6_addr};
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = WSA_CMSG_LEN(sizeof pi);
		memcpy(WSA_CMSG_DATA(c), &pi, sizeof pi);
		return (ULONG)WSA_CMSG_SPACE(sizeof pi);
	}
	(void)m;
	return 0;
}

/* One datagram, in the OS at once (each send has its own OVERLAPPED: no
 * queue). Its terminal comes by its completion, or here when the OS
 * refuses it outright. */
int tl__io_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	WSAMSG *m = &io->u.dg.msg;
	int r = !o->u.dg.addr.sa.sa_family && !IH(h)->connected ? -EDESTADDRREQ : tl__io_join(d, h);
	if (r) {
		tl__drv_event(d->loop, o, r, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	}
	memset(m, 0, sizeof *m);
	io->u.dg.buf.buf = (char *)o->u.dg.buf;
	io->u.dg.buf.len = o->u.dg.len;
	m->lpBuffers = &io->u.dg.buf;
	m->dwBufferCount = 1;
	if (o->u.dg.addr.sa.sa_family) {
		m->name = &o->u.dg.addr.sa;
		m->namelen = (INT)tl_addr_len(&o->u.dg.addr);
	}
	ULONG cl = send_ctl(io, o);
	if (cl) {
		m->Control.buf = (char *)io->u.dg.ctl;
		m->Control.len = cl;
	}
	memset(&io->ov, 0, sizeof io->ov);
	if (WSASendMsg(io_sock(h), m, 0, NULL, &io->ov, NULL) && WSAGetLastError() != WSA_IO_PENDING) {
		tl__drv_event(d->loop, o, tl__io_last_error(), TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	}
	io->inflight = 1;
	return 0;
}

void tl__io_send_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n)
{
	(void)h;
	(void)n;
	tl__drv_event(d->loop, o, err ? err : (int64_t)o->u.dg.len, TL_F_TERMINAL, TL_NO_LEASE);
}

/* ---- receives ---- */

/* Set up io's message for a receive into b[0..len), the source into
 * o->u.dg.addr, control data into io's own room. */
static void recv_msg(struct io_op *io, struct tl_opslot *o, uint8_t *b, uint32_t len)
{
	WSAMSG *m = &io->u.dg.msg;
	memset(m, 0, sizeof *m);
	memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	io->u.dg.buf.buf = (char *)b;
	io->u.dg.buf.len = len;
	m->name = &o->u.dg.addr.sa;
	m->namelen = sizeof o->u.dg.addr;
	m->lpBuffers = &io->u.dg.buf;
	m->dwBufferCount = 1;
	m->Control.buf = (char *)io->u.dg.ctl;
	m->Control.len = sizeof io->u.dg.ctl;
}

/* The buffer of a receive: the caller's, or a lease (TL_NO_LEASE in
 * *lease for the caller's). 0 when a pooled one cannot take one now: over
 * its cap (pause(0) kicks it) or none free (the lease-wait list does). */
static int recv_buf(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, uint8_t **b, uint32_t *len,
		    uint32_t *lease)
{
	uint32_t size, count;
	*lease = TL_NO_LEASE;
	if (!(o->flags & TL_OPF_POOLED)) {
		*b = o->u.dg.buf;
		*len = o->u.dg.len;
		return 1;
	}
	if (!tl__drv_dgram_room(h, 1))
		return 0;
	if ((*lease = tl__drv_lease_take(d->loop)) == TL_NO_LEASE) {
		if (!IH(h)->lease_wait) {
			IH(h)->lease_wait = 1;
			d->lwait[d->nlwait++] = h->idx;
		}
		return 0;
	}
	*b = tl__drv_lease_base(d->loop, &size, &count) + (size_t)*lease * size;
	*len = size;
	return 1;
}

/* Post receive o (the head of h's read queue): 1 posted, 0 waits for room
 * or a lease, or the error that ends it (tl__io_kick takes it off the
 * queue, then reports it). */
int tl__io_post_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	uint8_t *b;
	uint32_t len;
	int r = tl__io_join(d, h);
	if (r)
		return r;
	if (!recv_buf(d, h, o, &b, &len, &io->lease))
		return 0;
	recv_msg(io, o, b, len);
	memset(&io->ov, 0, sizeof io->ov);
	if (d->recvmsg(io_sock(h), &io->u.dg.msg, NULL, &io->ov, NULL) && WSAGetLastError() != WSA_IO_PENDING) {
		int e = tl__io_last_error();
		if (io->lease != TL_NO_LEASE)
			tl__drv_lease_drop(d->loop, io->lease);
		io->lease = TL_NO_LEASE;
		return e;
	}
	io->inflight = 1;
	return 1;
}

/* A receive's result in words of the contract: a datagram longer than
 * the buffer is its first len bytes (Windows does not say how long it
 * was: full is len + 1, a lower bound, and TL_F_TRUNC follows); an ICMP
 * error on a connected socket is -ECONNREFUSED, as on Linux. */
static int recv_result(int err, uint32_t cap, DWORD *n, uint32_t *full)
{
	*full = *n;
	if (err == -EMSGSIZE) {
		*n = cap;
		*full = cap + 1;
		return 0;
	}
	return err == -ECONNRESET ? -ECONNREFUSED : err;
}

/* Fill o's local address (with TL_HF_PKTINFO) from io's control data. */
static void recv_local(struct io_op *io, struct tl_opslot *o)
{
	WSAMSG *m = &io->u.dg.msg;
	memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
	o->u.dg.seg = 0;
	for (WSACMSGHDR *c = WSA_CMSG_FIRSTHDR(m); c; c = WSA_CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			IN_PKTINFO pi;
			memcpy(&pi, WSA_CMSG_DATA(c), sizeof pi);
			o->u.dg.local.in.sin_family = AF_INET;
			o->u.dg.local.in.sin_addr = pi.ipi_addr;
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			IN6_PKTINFO pi;
			memcpy(&pi, WSA_CMSG_DATA(c), sizeof pi);
			o->u.dg.local.in6.sin6_family = AF_INET6;
			o->u.dg.local.in6.sin6_addr = pi.ipi6_addr;
		}
	}
}

/* One datagram of n bytes (err 0) or an error into o, the head of h's
 * read queue: its event. Returns 1 when that was o's terminal (o is then
 * off the queue, taken off before the event as tl__io_kick says why). */
static int deliver(struct tl_drv *d, struct tl_hslot *h, struct io_op *io, struct tl_opslot *o, int err,
		   DWORD n, uint32_t lease, uint32_t cap, int last)
{
	uint32_t full;
	if ((err = recv_result(err, cap, &n, &full)) < 0) {
		if (lease != TL_NO_LEASE)
			tl__drv_lease_drop(d->loop, lease);
		tl__io_rpop(d, h);
		tl__drv_event(d->loop, o, err, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	recv_local(io, o);
	o->u.dg.full = full;
	if (lease != TL_NO_LEASE && n == 0) { /* an empty datagram carries no lease */
		tl__drv_lease_drop(d->loop, lease);
		lease = TL_NO_LEASE;
	}
	if (last)
		tl__io_rpop(d, h);
	tl__drv_event(d->loop, o, n, last ? TL_F_TERMINAL : 0, lease);
	return last;
}

/* A multishot receive's datagrams that wait beyond the one its overlapped
 * call brought, each taken without waiting (the socket is non-blocking),
 * while the turn and h's lease cap have room: several per turn (D11), in
 * order of arrival. Returns 1 when o ended (an error). */
static int recv_more(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	uint8_t *b;
	uint32_t len, lease;
	while ((o->flags & TL_OPF_LIVE) && !io->cancelled && tl__drv_room(d->loop) &&
	       recv_buf(d, h, o, &b, &len, &lease)) {
		DWORD n = 0;
		recv_msg(io, o, b, len);
		int err = d->recvmsg(io_sock(h), &io->u.dg.msg, &n, NULL, NULL) ? tl__io_last_error() : 0;
		if (err == -EAGAIN || err == -EWOULDBLOCK) {
			tl__drv_lease_drop(d->loop, lease);
			return 0;
		}
		if (deliver(d, h, io, o, err, n, lease, len, 0))
			return 1;
	}
	return 0;
}

void tl__io_recv_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n)
{
	struct io_op *io = IO(d, o);
	int multi = o->flags & TL_OPF_MULTI;
	uint32_t lease = io->lease, cap = io->u.dg.buf.len;
	io->lease = TL_NO_LEASE;
	if (io->cancelled && err == -ECANCELED) { /* aborted before a datagram came */
		if (lease != TL_NO_LEASE)
			tl__drv_lease_drop(d->loop, lease);
		goto cancelled;
	}
	if (deliver(d, h, io, o, err, n, lease, cap, !multi) || recv_more(d, h, o))
		return; /* its terminal reported, o off the queue */
	if (!(o->flags & TL_OPF_LIVE)) { /* its terminal queued by the core */
		tl__io_rpop(d, h);
		return;
	}
	if (!io->cancelled)
		return; /* posted again by the kick */
	/* Cancelled while its datagram was on the way: the datagram first
	 * (delivered above), then its end (contract 2.5). */
cancelled:
	tl__io_rpop(d, h);
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
}
