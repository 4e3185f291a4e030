/* tools/tlproxy/udp.h: UDP listeners: sessions by client address, each forwarding to one server of the listener's pool over a connected socket of its own. */
#ifndef TLP_UDP_H
#define TLP_UDP_H

/* Calls: shard, ho -> udp -> backend, state, world, takeover (see udp.c). */
#include "state.h"

/* Rows of the "udp" stat family (counters). */
enum {
	TLP_UDP_ST_DGRAMS_IN = 0, /* datagrams from clients */
	TLP_UDP_ST_DGRAMS_OUT,    /* datagrams from servers, passed to clients */
	TLP_UDP_ST_BYTES_IN,
	TLP_UDP_ST_BYTES_OUT,
	TLP_UDP_ST_SESSIONS,      /* sessions started */
	TLP_UDP_ST_DROP_LIMIT,    /* a new client over its listener's sessions */
	TLP_UDP_ST_DROP_NO_SERVER, /* no server up in the pool (or full) */
	TLP_UDP_ST_DROP_ERROR,    /* a socket for the session, or a send, failed */
	TLP_UDP_ST_DROP_LATE,     /* a reply past the responses expected */
	TLP_UDP_ST_DROP_TRUNC,    /* longer than the listener's max_datagram: never sent cut */
	TLP_UDP_ST_DROP_CLOSING,  /* a new client on a socket closing (drain, or a reload dropped it) */
	TLP_UDP_ST_ROWS
};

/* Declare the "udp" counters and the "udp_sessions" gauge (main, before
 * the launch). 0 or a negative errno. */
int tlp_udp_declare(tl_runtime *rt);
/* Stat values the declaration takes. */
#define TLP_UDP_ST_VALUES (TLP_UDP_ST_ROWS + 1)
/* The shard's UDP listeners become generation g's (at launch, and at each
 * reload): a socket per address with SO_REUSEPORT, kept across the reload
 * where g keeps the listener (by name) and the address, bound where g adds
 * one, retired (no new client; closed once its sessions end) where g drops
 * one; the session table grown to g's sessions limits; the idle sweep.
 * Sessions keep the settings and server they began with; a listener's
 * max_datagram (and, over a pooled buffer, its sessions) stay as first set
 * up until a restart, logged once. 0 (also when g has none) or the first
 * negative errno (a bind that failed is logged and the rest goes on). */
int tlp_udp_use(struct tlp_shard *sh, struct tlp_gen *g);
/* Handler TLP_H_UDP: every completion of the UDP listeners and sessions. */
void tlp_on_udp(tl_shard *s, const tl_completion *c);
/* Publish the shard's UDP stats (each pass). */
void tlp_udp_pass(struct tlp_shard *sh);
/* Drain: close the listening sockets; sessions that expect no reply end
 * now, the others when their replies come or they go idle. */
void tlp_udp_drain(struct tlp_shard *sh);
/* Stop: every session ends (shutdown), the sockets close. */
void tlp_udp_stop(struct tlp_shard *sh);
/* Is UDP address a bound by another socket (main, before the start)? 1
 * yes, 0 no, or a negative errno of the probe. */
int tlp_udp_port_taken(const tl_addr *a);
/* Live takeover, old side (ho.c): push a descriptor of each listening
 * socket (TLP_MSG_HO_LISTEN); stop receiving on them and mark their
 * sessions, each handed over by a later pass once its sends are done (or
 * counted gone if it ends first): how many were marked (TLP_MSG_HO_GO);
 * at the deadline, end those still marked: how many (TLP_MSG_HO_STOP); at
 * the end, receive again if the successor went away (ok 0). */
void tlp_udp_ho_listeners(struct tlp_shard *sh);
uint32_t tlp_udp_handover(struct tlp_shard *sh);
uint32_t tlp_udp_ho_stop(struct tlp_shard *sh);
void tlp_udp_ho_end(struct tlp_shard *sh, int ok);
/* The shard that receives on the listening socket fd is a descriptor of,
 * or -1 (any thread). */
int tlp_udp_owner(int fd);
/* Carry on a UDP session handed in (a CONN record with TLP_HO_UDP, on the
 * shard tlp_udp_owner names): 0, or a negative errno (-ENOENT: no socket
 * or listener of ours for it; -ENOBUFS: no room; ...). in is freed and its
 * descriptors taken either way. A session of ours with the same client
 * leaves the table to it. */
int tlp_udp_adopt(struct tlp_shard *sh, struct tlp_ho_in *in);
/* Free the shard's UDP state (main thread, the loop gone). */
void tlp_udp_free(struct tlp_shard *sh);

#endif /* TLP_UDP_H */
