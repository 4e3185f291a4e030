/* tools/tlproxy/handover.h: the versioned wire format of a live takeover (tlproxy --takeover): framed records for the hello, the listening sockets and each connection pair with its in-flight state; pure encode/decode that never trusts its input. */
#ifndef TLP_HANDOVER_H
#define TLP_HANDOVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * A takeover is one conversation over a Unix-domain stream. Every record is
 * a 16-byte header and a body:
 *
 *   0  "TLHO"            magic
 *   4  u16 version       TLP_HO_VERSION; anything else is refused
 *   6  u16 type          enum tlp_ho_type
 *   8  u32 length        of the body, at most the type's maximum
 *  12  u8  nfds          descriptors sent with the record (SCM_RIGHTS): the
 *                        type fixes how many
 *  13  3 bytes of zero
 *
 * Integers are little-endian. The descriptors travel with the header's
 * bytes, so a receiver that reads exactly the header gets exactly that
 * record's descriptors.
 *
 * The conversation: the new process sends HELLO; the old one answers HELLO
 * (same version, same user) or REFUSE and closes; then LISTENER records
 * (one listening socket each) and LISTENERS_END; the new process starts
 * accepting on them and sends READY; the old one stops accepting and sends
 * a CONN record per connection pair it hands over, then END. The new
 * process answers every CONN record it read with an ACK (how many it has
 * read so far) before it touches the connection: those are its own from
 * then on, and any the old process sent but never saw acknowledged (the
 * new process died, or stopped reading) go back to forwarding there. The
 * old process closes its descriptors of a connection only once it is
 * acknowledged, and when it gives up on the new process it first shuts
 * its side of the conversation for reading, so an ACK comes either before
 * that (it counts) or not at all (the new process drops the connection).
 *
 * After END the new process sends one more ACK, of one past the CONN
 * records: the old process lets go (drains, exits) only once it has read
 * it, so a new process gone after READY is seen even with no connection
 * in flight, and the old one takes its listeners back.
 *
 * Version 2 added ACK, and the carry of a CONN record may hold what the
 * writes the handover cut short had not written (a connection moves with
 * writes in flight to a slow reader). Version 3 added a side's TLS record
 * state (tl_tls_release's, opaque here), so a TLS connection moves too,
 * and END's acknowledgement. Version 4 added UDP sessions: a CONN record
 * with TLP_HO_UDP, whose descriptors are the listening socket the session
 * came in on (so the new process finds which of its sockets, and so which
 * shard, serves the client: the same socket) and the session's socket
 * connected to its server, with its datagram counts and the replies it
 * still expects; a UDP record carries no bytes, no TLS state and no
 * half-close flags.
 */

#define TLP_HO_MAGIC "TLHO"
#define TLP_HO_VERSION 4
#define TLP_HO_HDR 16
#define TLP_HO_NAME_MAX 255        /* listener, pool and server names */
#define TLP_HO_TEXT_MAX 255        /* a refusal's reason */
/* Bytes carried one way of a connection: the writes in flight and the
 * reads of a stream (its lease cap), each time it moves while its reader
 * reads nothing, on top of a carry it may still be writing. */
#define TLP_HO_CARRY_MAX (8u << 20)
/* A side's TLS record state (turnloop/tls.h's TL_TLS_STATE_MAX, which a
 * test checks this is at least). */
#define TLP_HO_TLS_MAX 20480u
#define TLP_HO_CONN_FIXED 76       /* a CONN body before its names and bytes */
#define TLP_HO_BODY_MAX                                                                    \
	(TLP_HO_CONN_FIXED + 3 * TLP_HO_NAME_MAX + 128 + 2 * TLP_HO_CARRY_MAX + 2 * TLP_HO_TLS_MAX)

enum tlp_ho_type {
	TLP_HO_HELLO = 1,         /* u32 pid, u32 0 */
	TLP_HO_REFUSE = 2,        /* u16 reason, u16 text length, text */
	TLP_HO_LISTENER = 3,      /* 1 fd; u16 shard, u16 address length, sockaddr */
	TLP_HO_LISTENERS_END = 4, /* u32 count */
	TLP_HO_READY = 5,         /* empty: the new process accepts */
	TLP_HO_CONN = 6,          /* 2 fds (client, server); see struct tlp_ho_conn. A
				   * side that finished before (EOF and SHUT set) and
				   * whose socket is gone: an unconnected socket. A
				   * UDP session: (listening socket, session socket) */
	TLP_HO_END = 7,           /* u32 handed over, u32 left to drain */
	TLP_HO_ACK = 8,           /* u32 CONN records read so far (new process to old) */
	TLP_HO_TYPE_COUNT
};

/* Why a takeover was refused: another format version, another user,
 * another takeover under way (or done), not a HELLO first. */
enum { TLP_HO_R_VERSION = 1, TLP_HO_R_USER = 2, TLP_HO_R_BUSY = 3, TLP_HO_R_PROTO = 4 };

/* CONN flags: the half-close state. */
#define TLP_HO_EOF(s) (1u << (s))      /* side s (0 client, 1 server) sent its FIN */
#define TLP_HO_SHUT(s) (4u << (s))     /* our FIN to side s was sent */
#define TLP_HO_UDP 0x10u               /* a UDP session, not a connection pair */
#define TLP_HO_FLAGS_ALL 0x1fu

struct tlp_ho_hdr {
	uint16_t version, type;
	uint32_t len;
	uint8_t nfds;
};

/* One connection pair. Decoding fills the names (NUL-terminated, no NUL
 * inside) and points carry[] into the body it decoded. */
struct tlp_ho_conn {
	uint32_t flags;           /* TLP_HO_EOF / TLP_HO_SHUT */
	uint32_t server;          /* index of its server in the pool's view */
	uint64_t bytes[2];        /* forwarded so far: from the client, from the server */
	uint64_t age_ns;          /* since it was accepted */
	char listener[TLP_HO_NAME_MAX + 1];
	char pool[TLP_HO_NAME_MAX + 1];
	char srv[TLP_HO_NAME_MAX + 1]; /* the server's address, as its stat label */
	struct sockaddr_storage peer;  /* the client */
	uint16_t peer_len;        /* 0 (unknown), or that of an AF_INET/AF_INET6/AF_UNIX address */
	/* Bytes read from side s that side s^1 has not been sent yet: the new
	 * process writes them first. */
	const uint8_t *carry[2];
	uint32_t carry_len[2];
	/* Side s's TLS record state (tl_tls_release), tls_len[s] bytes; 0: a
	 * plain side. Decoding points tls[] into the body too. */
	const uint8_t *tls[2];
	uint32_t tls_len[2];
	/* A UDP session (TLP_HO_UDP): datagrams from the client and from the
	 * server so far, and the replies it still expects; 0 otherwise. */
	uint64_t dgrams[2];
	uint32_t pending;
};

struct tlp_ho_msg {
	uint16_t type;
	union {
		struct { uint32_t pid; } hello;
		struct { uint16_t reason; char text[TLP_HO_TEXT_MAX + 1]; } refuse;
		struct { uint16_t shard, addr_len; struct sockaddr_storage addr; } listener;
		struct { uint32_t count; } lend;
		struct { uint32_t handed, left; } end;
		struct { uint32_t count; } ack;
		struct tlp_ho_conn conn;
	} u;
};

/* The descriptors a record of this type carries (0, 1 or 2), or -1 for an
 * unknown type. */
int tlp_ho_type_fds(uint32_t type);

/*
 * Decode a record's header from b[0..n). Returns TLP_HO_HDR and fills *h;
 * -EAGAIN (n < TLP_HO_HDR); -EPROTONOSUPPORT (another version: h->version
 * says which, nothing else is read); -EPROTO (bad magic, reserved bytes not
 * zero, unknown type, a length above the type's maximum, or nfds not the
 * type's); -EINVAL (b or h NULL).
 */
int tlp_ho_hdr_decode(const uint8_t *b, size_t n, struct tlp_ho_hdr *h);

/*
 * Decode the body b[0..n) of a record whose header is h into *m. Every
 * length is checked against n and the type's rules; the body must be used
 * exactly. Returns 0, -EPROTO (malformed), -EINVAL (an argument NULL, or n
 * differs from h->len). m->u.conn.carry points into b.
 */
int tlp_ho_decode(const struct tlp_ho_hdr *h, const uint8_t *b, size_t n, struct tlp_ho_msg *m);

/*
 * Encode m as a whole record (header and body) into b[0..cap). Returns the
 * record's length; -ENOSPC (cap too small: nothing useful is in b);
 * -EINVAL (an unknown type, a name too long or holding a NUL, a carry above
 * TLP_HO_CARRY_MAX or with a NULL pointer, an address length that does not
 * fit its family, flags out of TLP_HO_FLAGS_ALL or inconsistent, a UDP
 * session with half-close flags, bytes carried or TLS state, or datagram
 * fields on a connection pair). What it
 * writes decodes back to m.
 */
int tlp_ho_encode(uint8_t *b, size_t cap, const struct tlp_ho_msg *m);

/* The length tlp_ho_encode would return for m, or -EINVAL. */
long tlp_ho_size(const struct tlp_ho_msg *m);

#endif /* TLP_HANDOVER_H */
