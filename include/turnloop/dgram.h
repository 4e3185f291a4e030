/* turnloop/dgram.h: UDP sockets on a loop: bind, connect, batched receives and sends, per-datagram metadata (docs/DATAGRAMS.md, rules in docs/CONTRACT-DGRAM.md). */
#ifndef TURNLOOP_DGRAM_H
#define TURNLOOP_DGRAM_H

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A datagram handle is a UDP socket (IPv4, or IPv6 that also takes IPv4).
 * Receives complete as TL_K_RECV: result = the bytes in the buffer,
 * u.recv.from the source; TL_F_TRUNC when the datagram was longer than the
 * buffer (aux = its full length, the rest is lost, as UDP does). Sends
 * complete as TL_K_SEND with result = the bytes sent. Operations on one
 * handle need no order among themselves: the drivers batch them
 * (recvmmsg/sendmmsg on epoll, several datagrams per enter on io_uring).
 * Pooled receives count against the handle's lease cap (tl_handle_caps,
 * contract 4.10) as a stream's reads do: over it, the handle's receives
 * take nothing off the socket until the host releases leases.
 */

/* Options of tl_udp_bind_opts (flags). */
#define TL_UDP_REUSEPORT (1u << 0) /* SO_REUSEPORT: one socket per shard on one port */
/* IP_PKTINFO / IPV6_RECVPKTINFO: each receive reports the local address
 * the datagram was sent to in u.recv.to (a socket bound to a wildcard
 * learns which of the host's addresses a client used). */
#define TL_UDP_PKTINFO   (1u << 1)
/* UDP_GRO: a pooled receive may hold several datagrams of one sender, each
 * u.recv.segment bytes (the last may be shorter). Needs TL_CAP_UDP_GRO. */
#define TL_UDP_GRO       (1u << 2)
#define TL_UDP_FLAGS_ALL (TL_UDP_REUSEPORT | TL_UDP_PKTINFO | TL_UDP_GRO)

typedef struct tl_udp_opts {
	uint32_t flags; /* TL_UDP_* */
} tl_udp_opts;

/* UDP: bind a datagram socket to addr (IPv4 or IPv6; port 0 picks one).
 * Returns 0 and sets *out; -EINVAL (addr not IPv4/IPv6, out NULL),
 * -ENOBUFS (handle table full), or the OS error (-EADDRINUSE, ...). */
int tl_udp_bind(tl_loop *loop, const tl_addr *addr, tl_handle *out);
/* tl_udp_bind with options (opts NULL: none). 0 and *out; the errors of
 * tl_udp_bind, -EINVAL also for an unknown flag, -EOPNOTSUPP for
 * TL_UDP_GRO without TL_CAP_UDP_GRO. */
int tl_udp_bind_opts(tl_loop *loop, const tl_addr *addr, const tl_udp_opts *opts,
		     tl_handle *out);
/* Connect datagram handle h to peer (synchronous, no completion): sends
 * may then leave out the address, and receives take only the peer's
 * datagrams. Connecting again replaces the peer. 0, -ENOENT (stale or
 * foreign), -EINVAL (not a datagram handle, closing, peer not IPv4/IPv6),
 * or the OS error (-EAFNOSUPPORT: an IPv6 peer on an IPv4 socket). */
int tl_udp_connect(tl_loop *loop, tl_handle h, const tl_addr *peer);
/* Send one datagram buf[0..len) to addr (len 0: an empty datagram; buf
 * stays the caller's until the terminal, *to is copied; to NULL on a
 * connected handle: its peer). The terminal is TL_K_SEND with
 * result = len, or the OS error (-EDESTADDRREQ: to NULL, not connected;
 * -EMSGSIZE: over 65,507 bytes). The submission returns (see "Submitting
 * an operation"); -EINVAL also for buf NULL with len > 0 or to not
 * IPv4/IPv6. */
int tl_udp_send(tl_loop *loop, tl_handle h, const void *buf, uint32_t len, const tl_addr *to,
		uint64_t token, tl_op *op);

/* One datagram to send with tl_udp_sendmsg. */
typedef struct tl_udp_msg {
	const void *buf;    /* the payload, the caller's until the terminal */
	uint32_t len;
	/* > 0: send buf as len / segment datagrams of segment bytes each (the
	 * last may be shorter) in one call (UDP_SEGMENT, TL_CAP_UDP_GSO). */
	uint16_t segment;
	const tl_addr *to;   /* NULL: the connected peer */
	/* Not NULL: send from this local address (its port is ignored: the
	 * socket's), e.g. u.recv.to of the request being answered. */
	const tl_addr *from;
} tl_udp_msg;
/* Send m (copied; m->buf is not) as tl_udp_send does: TL_K_SEND, result =
 * m->len. The submission returns as tl_udp_send's, and -EOPNOTSUPP for a
 * segment size without TL_CAP_UDP_GSO, -EINVAL for from not the family of
 * to. A source address the host does not have ends the op with the OS
 * error (-EINVAL or -EADDRNOTAVAIL). */
int tl_udp_sendmsg(tl_loop *loop, tl_handle h, const tl_udp_msg *m, uint64_t token,
		   tl_op *op);

/* Receive one datagram into buf[0..len) (len > 0; buf stays the caller's
 * until the terminal): TL_K_RECV, result = its bytes (a longer datagram is
 * cut: TL_F_TRUNC, aux its length), u.recv.from its source. The submission
 * returns (see "Submitting an operation"); -EINVAL also for len 0 with a
 * buffer. buf NULL asks for a pooled lease as tl_udp_recv_pooled does:
 * deprecated (turnloop.h, rule 8), kept for one release. */
int tl_udp_recv(tl_loop *loop, tl_handle h, void *buf, uint32_t len, uint64_t token,
		tl_op *op);
/* Receive one datagram into a pooled buffer lease: TL_K_RECV, result = its
 * bytes, TL_F_LEASE and u.recv.lease when result > 0 (the host's until
 * tl_lease_release), u.recv.from its source. Returns as tl_udp_recv. */
int tl_udp_recv_pooled(tl_loop *loop, tl_handle h, uint64_t token, tl_op *op);
/* Receive datagrams into pooled leases until stopped (tl_stop) or
 * cancelled: one nonterminal TL_K_RECV per datagram (as
 * tl_udp_recv_pooled's), many per turn. A datagram with no bytes has no
 * lease. The handle's lease cap holds: at the cap, datagrams wait in the
 * socket (and the OS drops what overflows it). Returns as tl_udp_recv. */
int tl_udp_recv_start(tl_loop *loop, tl_handle h, uint64_t token, tl_op *op);

#ifdef __cplusplus
}
#endif
#endif
