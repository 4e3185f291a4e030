/* tools/tlproxy/takeover.h: live takeover of a running tlproxy by a new process: the old side's handover socket (--handover-socket) and the new side (--takeover), between the process and its shards. */
#ifndef TLP_TAKEOVER_H
#define TLP_TAKEOVER_H

#include <stddef.h>
#include <stdint.h>

#include "handover.h"
#include "turnloop.h"

/* Calls: takeover -> world. The shards (ho.c) call in; the process side
 * calls no shard code. */

/*
 * The old process: a thread serves the handover socket. A peer of another
 * user is refused (SO_PEERCRED), as is a HELLO of another format version;
 * either way the process keeps serving. Peers wait for their HELLO side by
 * side (a silent one holds up none); the first whole HELLO is served and
 * every other peer is refused as busy while that lasts, and for good once
 * it succeeded. With a peer accepted, every shard sends a descriptor of
 * each of its listening sockets; once the peer says READY (it accepts on
 * them), every shard closes its own descriptors (the sockets stay open in
 * the new process, with their queued connections) and hands over each
 * forwarding connection: both handles are detached at once, what the
 * cancelled reads still bring and what the cancelled writes did not write
 * is kept as carry, and the pair goes as a CONN record. The thread keeps
 * the descriptors of each record it sent until the peer acknowledges it;
 * if the peer goes away, every connection it did not acknowledge goes
 * back to a shard here. Connections not yet forwarding (peeking, queued,
 * connecting) and any left at the deadline drain here; then the process
 * drains and exits.
 *
 * The new process: before its shards start it takes the listening sockets
 * (they become its inherited ones, as with LISTEN_FDS: shard k adopts the
 * k-th socket of an address), once they accept it says READY, and a thread
 * acknowledges each CONN record and passes it to shard 0, which spreads
 * them over the shards in turn. Its own handover socket takes its name
 * only once the takeover is done.
 */

/* The unwritten end of a write to one side that the handover cut short:
 * seq orders it among the others (the shard numbers its writes). */
struct tlp_ho_piece {
	uint8_t *p;
	uint32_t len, seq;
};

/* What a connection being handed over still owes each side (old side):
 * the bytes read from side s and not written to side s^1 are, in order,
 * the unwritten ends of the writes to s^1 that the handover cancelled
 * (w[s^1], by seq), then b[s], what its reads brought after. */
struct tlp_ho_out {
	uint8_t *b[2];
	uint32_t len[2], cap[2];
	struct tlp_ho_piece *w[2];
	uint32_t nw[2], capw[2];
	int fd[2];                /* detached descriptors, -1 not yet */
	struct tlp_ho_in *in;     /* the record it came in by, while its carry is written */
	/* A TLS side: its session's record state once released (tl_tls_release),
	 * and the sides whose release is under way. */
	uint8_t *st[2];
	uint32_t st_len[2];
	uint8_t rel;
	uint8_t posted;           /* a TLP_MSG_HO_STEP for a release is on its way */
};

/* A connection record received (new side), or taken back (old side):
 * freed once its carry is out. */
struct tlp_ho_in {
	struct tlp_ho_conn c;     /* carry[] points into body */
	int fd[2];
	uint32_t nwrites;         /* carry writes in flight */
	uint32_t wseq[2];         /* the carry write to side d: its number */
	uint8_t body[];
};

/* Take --handover-socket PATH, --handover-deadline SECONDS and --takeover
 * PATH out of argv (argc updated), so that the rest parses as before.
 * 0, or -EINVAL with a reason in err. */
int tlp_takeover_args(int *argc, char **argv, char *err, size_t errlen);
/* The usage lines of those options (static). */
const char *tlp_takeover_usage(void);
/* 1 when --takeover was given. */
int tlp_takeover_wanted(void);
/* 1 when --handover-socket was given. */
int tlp_takeover_serving(void);

/* New side, before the shards start: connect, say HELLO, take the
 * listening sockets into the inherited table. 0, or -1 with a line on
 * stderr (refused: version, user; the old process keeps serving). */
int tlp_takeover_begin(void);
/* New side, once every shard accepts: READY, and the thread that takes the
 * connections. 0 or a negative errno. */
int tlp_takeover_ready(void);

/* Before the shards start: bind the handover socket, under a temporary
 * name (renamed at once, or once this process's own takeover is done). 0,
 * or -1 with a line on stderr. No socket asked for: 0. */
int tlp_handover_listen(void);
/* Old side, once the shards run: serve it. 0 or a negative errno. */
int tlp_handover_start(void);

/* Both: stop the threads, close and remove the socket (main thread, after
 * the runtime stopped running). */
void tlp_takeover_stop(void);

/* The arg bits of a TLP_MSG_HO_* message: FROM_THREAD, sent by the thread
 * to shard 0, which passes it on to every shard (or, for HO_CONN, spreads
 * the connections); HO_FAILED, on HO_FIN: the successor went away. */
#define TLP_HO_FROM_THREAD 1u
#define TLP_HO_FAILED 2u

/* A shard's answer to a TLP_MSG_HO_* message from the thread (ho.c): for
 * HO_GO n is how many connections it marked, for HO_STOP how many carry on
 * here, for HO_CONN 1 (carried on) or 0 (cut); the others ignore n. */
void tlp_ho_answer(uint32_t type, int64_t n);

/* From the shards (ho.c), old side: a descriptor of a listening socket
 * of shard `shard` (the callee owns fd from then on); the connection pair m
 * with descriptors fds (owned likewise), ready to go; a connection marked
 * for handover ended here instead. */
void tlp_ho_push_listener(uint32_t shard, int fd);
int tlp_ho_push_conn(const struct tlp_ho_msg *m, const int fds[2]);
void tlp_ho_gone(void);
/* Close a descriptor of a connection that is cut, so that its peer sees a
 * reset rather than an end that looks complete (nothing if fd < 0). */
void tlp_ho_fd_abort(int fd);

#endif /* TLP_TAKEOVER_H */
