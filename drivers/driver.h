/* drivers/driver.h: the one interface every backend (epoll, io_uring, sim) fills. */
#ifndef TL_DRIVER_H
#define TL_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include "turnloop/loop.h"
#include "tl_config.h"
#include "os.h"

/* ---- The core's slots, as drivers see them ---- */

#define tl_likely(x) __builtin_expect(!!(x), 1)
#define tl_unlikely(x) __builtin_expect(!!(x), 0)
#define tl_container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

#define TL_NIL UINT32_MAX

/* Id layout: [63..40] loop identity (24 bits), [39..24] generation (16 bits),
 * [23..0] slot (24 bits). Generation 0 is never used, so no valid id is 0.
 * A loop identity never has its top bit (TL_ID_LAYER_BIT, bit 63) set: the
 * ids layers above the loop issue in the same layout carry it (tls.h). */
#define TL_ID_SLOT_BITS 24u
#define TL_ID_GEN_BITS 16u
#define TL_ID_MAX_SLOTS (1u << TL_ID_SLOT_BITS)

static inline uint64_t tl__id_make(uint32_t owner, uint32_t gen, uint32_t slot)
{
	return ((uint64_t)owner << 40) | ((uint64_t)(gen & 0xffffu) << 24) | slot;
}
static inline uint32_t tl__id_owner(uint64_t v) { return (uint32_t)(v >> 40); }
static inline uint32_t tl__id_gen(uint64_t v) { return (uint32_t)(v >> 24) & 0xffffu; }
static inline uint32_t tl__id_slot(uint64_t v) { return (uint32_t)v & (TL_ID_MAX_SLOTS - 1); }

/* Handle types. */
enum tl_htype {
	TL_H_FREE = 0,
	TL_H_LISTEN,   /* TCP or Unix listener */
	TL_H_STREAM,   /* TCP or Unix connection */
	TL_H_UDP,
	TL_H_TIMER,
	/* Contract 5 (lib/sysmod.h): no driver object behind them; the core
	 * owns (or, for TL_H_POLL, only borrows) the descriptor in fd, and
	 * their operations reach a driver only as TL_OP_POLL. */
	TL_H_POLL,     /* a foreign descriptor (lib/poll.c) */
	TL_H_SIGNAL,   /* a signal subscription (lib/signal.c) */
	TL_H_PROC,     /* a child process: fd is its pidfd (lib/proc.c) */
	TL_H_STDIO,    /* a terminal, pipe or file of the process (lib/tty.c) */
	TL_H_WATCH,    /* an inotify instance (lib/watch.c) */
	TL_H_DNS,      /* a c-ares resolver (lib/dns.c) */
};

/* Handle flags. */
#define TL_HF_REF 0x01          /* counts toward alive() */
#define TL_HF_CLOSING 0x02
#define TL_HF_CLOSED_QUEUED 0x04
#define TL_HF_UNIX 0x08
#define TL_HF_V6 0x10
#define TL_HF_CONNECTING 0x20   /* its connect op has not finished yet */
#define TL_HF_PAUSED 0x40       /* over a cap: its reads take nothing from the socket */
#define TL_HF_ABORT 0x80        /* tl_close_abort: release() resets the peer */
/* (TL_H_UDP reuses TL_HF_CONNECTING, which only streams use, as
 * TL_HF_PKTINFO: its receives report the local address.) */
#define TL_HF_PKTINFO TL_HF_CONNECTING

struct tl_hslot {
	uint16_t gen;
	uint8_t type;    /* enum tl_htype */
	uint8_t flags;   /* TL_HF_* */
	uint32_t idx;
	int fd;          /* the OS object (driver-defined for the sim driver); with
			  * TL_CAP_OS the descriptor tl_handle_fd() hands out */
	uint32_t pending;/* ops of this handle not yet terminal */
	uint32_t head, tail; /* its ops, oldest first */
	uint32_t next_free;
	uint64_t close_token;
	/* The host's pointer (tl_handle_set_data), the core's alone: tl_turn
	 * copies it into every record naming this handle as it hands the
	 * record out. Drivers never touch it. */
	void *data;
	/* Per-handle caps (contract 4.10, lib/caps.c): leases read from this
	 * stream that the host holds, write bytes queued, and their limits.
	 * Over either limit the core sets TL_HF_PAUSED and calls pause(). */
	uint32_t leases, lim_leases;
	uint64_t wbytes, lim_wbytes;
	/* Splices reading this stream (their source), linked through their
	 * u.sp.snext; TL_NIL: none. Its Closed waits until none is left. */
	uint32_t spl_head;
	/* The pool's share of this stream (lib/caps.c): a pooled read request
	 * of it the driver has in the kernel (tl__drv_read_armed), and whether
	 * it has read into pooled buffers (then a lease is reserved for it). */
	uint8_t armed, reader;
	union {
		uint64_t drv[6];      /* driver private state */
		struct {              /* timers use no driver */
			uint64_t at, repeat, seq;
			uint32_t op;
		} t;
		uint64_t sys[6];      /* contract 5 handles: their module's state */
	} u;
};

/* Op flags. */
#define TL_OPF_CANCEL 0x0001   /* cancellation requested */
#define TL_OPF_STOP 0x0002     /* ... as a stop */
#define TL_OPF_TIMEDOUT 0x0004 /* ... by a deadline (idle, read or connect) */
#define TL_OPF_MULTI 0x0008    /* multishot */
#define TL_OPF_NATIVE 0x0010   /* submitted to the driver */
#define TL_OPF_POOLED 0x0020   /* reads into leases */
#define TL_OPF_DEADLINE 0x0040 /* has a read or connect deadline in the loop's heap */
#define TL_OPF_LIVE 0x0080     /* active: its terminal is not yet queued */
#define TL_OPF_OWED 0x0100     /* terminal queued, slot held until delivered */

struct tl_opslot {
	uint16_t gen;
	uint8_t code;     /* enum tl_opcode, or a core-only kind (timer, room, pool) */
	uint8_t kind;     /* enum tl_kind of its completions */
	uint16_t flags;   /* TL_OPF_* */
	uint16_t _pad;
	uint32_t idx;
	uint32_t hidx;    /* handle slot or TL_NIL */
	uint32_t prev, next; /* the handle's op list; next doubles as free link */
	uint64_t token;
	union {
		struct { uint8_t *buf; uint32_t len; } rw;
		struct { tl_iovec iov[TL_IOV_MAX]; uint32_t n, cur; size_t off, total; } wv;
		/* Datagrams (turnloop/dgram.h). Send: addr (family 0: the
		 * connected peer), local (family 0: the kernel's choice), seg
		 * (UDP_SEGMENT, 0: none). Receive: the driver fills addr (the
		 * source), local (the destination, with TL_HF_PKTINFO, else
		 * family 0), full (the datagram's length: more than the buffer
		 * means truncated) and seg (UDP_GRO's segment size, 0: none)
		 * before each event. */
		struct {
			uint8_t *buf;
			uint32_t len;
			uint32_t alen;
			tl_addr addr;
			tl_addr local;
			uint32_t full;
			uint32_t seg;
		} dg;
		struct { tl_addr addr; uint64_t deadline; const char *path; } conn;
		struct { uint32_t bit; struct tl_poster *target; } room;
		struct { void *job; } pool;
		struct {              /* TL_OP_SEND_FDS, TL_OP_RECV_FDS */
			uint8_t *buf;      /* the payload (the caller's) */
			uint32_t len;
			uint32_t done;     /* SEND_FDS: payload bytes sent so far (the
					    * descriptors went with the first ones) */
			uint32_t nfds;     /* SEND_FDS: descriptors in fds; RECV_FDS: the
					    * most the caller takes */
			uint32_t got;      /* RECV_FDS: descriptors the driver put in fds */
			int *out;          /* RECV_FDS: the caller's array (the core copies
					    * fds[0..got) there with the completion) */
			int fds[TL_FDS_MAX];
		} fd;
		/* Contract 5 modules (lib/sysmod.h). */
		struct { uint32_t next, prev, pend; int32_t signo; } sig;
		struct { const _Atomic uint64_t *addr; uint64_t expected; uint32_t next, prev; } ew;
		struct { tl_addr *out; uint32_t cap; } dns;
		struct {              /* TL_OP_SPLICE (lib/splice.c) */
			uint32_t src;    /* source stream's slot while the splice may read it,
					  * else TL_NIL (always for sendfile) */
			uint32_t sprev, snext; /* the source's list of splices */
			uint32_t pipe;   /* pool slot, TL_NIL for sendfile */
			int rfd, wfd;    /* the pipe's ends (-1: a driver without OS pipes) */
			uint32_t pipe_size; /* what the pipe holds */
			uint32_t max;    /* splice: at most this much; sendfile: len */
			int file;        /* sendfile: the file, else -1 */
			uint64_t off;    /* sendfile: offset of its next byte */
			uint64_t taken, moved; /* into the pipe, out to dst (tl__drv_splice_io) */
		} sp;
	} u;
	/* TL_OP_POLL: the descriptor and poll(2) events the driver waits for
	 * (read by the driver), then the core's own bookkeeping of the op
	 * between readinesses (lib/poll.c; drivers never touch it). */
	struct {
		int32_t fd;
		uint16_t events;
		uint8_t multi;      /* 1: level-triggered multishot; 0: one-shot */
		uint8_t where;      /* which of the core's lists it is on (lib/poll.c) */
		int32_t res;        /* the readiness (revents) or error last reported */
		uint32_t next, prev;
		uint8_t flags;      /* the module's own */
	} poll;
	uint64_t drv[4]; /* driver private state */
};

/* Core-only op codes (never submitted to a driver). */
#define TL_OP_TIMER 100
#define TL_OP_ROOM 101
#define TL_OP_POOL 102
#define TL_OP_SIGNAL 103 /* lib/signal.c */
#define TL_OP_EWAIT 104  /* lib/ewait.c */
#define TL_OP_DNS 105    /* lib/dns.c: a lookup */

/*
 * The split of work between the core (lib/loop.c) and a driver:
 *
 * The core owns every table: handles, operations, timers, deadlines,
 * the completion queue, the pooled buffers and their leases, the poster. It
 * validates every call, decides when a turn may wait and for how long, and
 * turns driver events into completions (applying cancel/stop/timeout, the
 * exactly-once terminal rule and the per-source budgets).
 *
 * A driver owns the OS objects behind handles and performs operations the
 * core hands it. It reports progress by calling the tl__drv_* functions below,
 * from inside its submit/cancel/poll callbacks only (the loop's thread), and
 * never calls user code. A driver may complete an operation synchronously
 * inside submit() (epoll writes do); the completion is queued all the same.
 *
 * Per-handle and per-operation private state lives in the `drv` words of the
 * core's slots (struct tl_hslot / tl_opslot in lib/internal.h), so a driver
 * allocates nothing per operation.
 *
 * Rules every driver keeps, and the contract suite checks:
 *  - submit() returning < 0 means nothing happened and no event will follow.
 *  - After submit() returned 0 the driver reports exactly one terminal event
 *    for the op (tl__drv_event with TL_F_TERMINAL, or tl__drv_accept with
 *    terminal=1), preceded by any number of nonterminal ones.
 *  - cancel() only asks. The op's terminal event still comes from the driver,
 *    once the OS no longer touches the op's memory; its result does not
 *    matter (the core reports -ECANCELED / Stopped / -ETIMEDOUT). A cancel()
 *    that fails (< 0) changes nothing; the core may retry it.
 *  - Nonterminal events respect tl__drv_room(): when it is 0 the driver keeps
 *    the readiness or CQE for a later turn instead of reporting it.
 *  - release() is called once per handle, after its last event, and closes
 *    the OS object; abortively when the handle has TL_HF_ABORT (a stream
 *    closed by tl_close_abort): the peer sees a reset, not an end of
 *    stream (a kernel socket gets SO_LINGER {1, 0} right before close).
 *  - Socket options (sockopt) are checked by the core (lib/sockopt.c)
 *    before a driver sees them: opt is taken by the handle's kind and the
 *    value is in range, so a driver only applies or reads them. The same
 *    holds for the option lists and connect setup of struct tl_open_spec.
 */

struct tl_drv; /* a driver instance: one per loop, the driver's own type */

struct statx;

/* A typed file request handed to a driver's fs_submit (see there). code is
 * an enum tl_fs_req (turnloop/pool.h). Every pointer stays valid until the
 * op's terminal event: paths and stx live in the op's job record, buf is the
 * caller's (who keeps it, as for the pool). */
struct tl_fs_native_req {
	uint8_t code;
	int fd;              /* CLOSE, READ/WRITE, PREAD/PWRITE, FSTAT, FSYNC */
	int flags;           /* OPEN: open(2) flags (O_CLOEXEC included) */
	unsigned mode;       /* OPEN, MKDIR */
	const char *path, *path2;
	void *buf;           /* READ/WRITE/PREAD/PWRITE */
	uint32_t len;
	uint64_t off;        /* PREAD/PWRITE */
	struct statx *stx;   /* STAT/FSTAT: where the kernel writes */
};

/* Operation codes the core submits (tl_opslot.code). */
enum tl_opcode {
	TL_OP_ACCEPT = 1,  /* multishot if TL_OPF_MULTI */
	TL_OP_CONNECT,     /* u.conn.addr (or the Unix path given to open) */
	TL_OP_READ,        /* u.rw.buf/len, or pooled if TL_OPF_POOLED; multishot if TL_OPF_MULTI */
	TL_OP_WRITE,       /* u.wv: iovecs, progress kept in u.wv.cur/off */
	TL_OP_SHUTDOWN,
	TL_OP_SEND,        /* u.dg: one datagram to u.dg.addr */
	/* u.dg: one datagram, source into u.dg.addr; pooled if buf NULL. With
	 * TL_OPF_MULTI (always pooled): one nonterminal event per datagram
	 * until cancelled, within tl__drv_room(), taking buffers only while h
	 * is not TL_HF_PAUSED and never more at once than h's lease cap leaves
	 * (tl__drv_dgram_room), so the cap holds by construction. */
	TL_OP_RECV,
	/* Unix-domain streams (TL_CAP_DETACH): SEND_FDS joins the write queue
	 * and sends all of u.fd.buf, with u.fd.fds[0..nfds) as SCM_RIGHTS on
	 * the first sendmsg that moves bytes (u.fd.done says how far it got;
	 * its terminal's res is len). RECV_FDS joins the read queue: one
	 * recvmsg (MSG_CMSG_CLOEXEC) into u.fd.buf, whose descriptors go to
	 * u.fd.fds, their count to u.fd.got, before the event
	 * (tl__sock_take_fds does both, and closes them all with -EMSGSIZE
	 * when the control data was cut or carries more than u.fd.nfds);
	 * res is the bytes, 0 with TL_F_EOF at the end. A driver never closes
	 * descriptors it reported: the core hands them out or closes them. */
	TL_OP_SEND_FDS,
	TL_OP_RECV_FDS,
	/* Wait until poll.fd is ready for poll.events (POLLIN, POLLOUT,
	 * POLLPRI, POLLRDHUP); the event's res is the revents (with POLLERR
	 * and POLLHUP as poll(2) adds them), or a negative errno. One-shot: the
	 * first readiness is the terminal event. With poll.multi (not
	 * TL_OPF_MULTI, which says what the core makes of the op): level-
	 * triggered, one nonterminal event per poll() while the descriptor is
	 * ready (respecting tl__drv_room()), until cancelled. The driver never
	 * reads, writes or closes poll.fd, and keeps no per-handle state for
	 * it (h may be a handle no driver opened; h->fd is not poll.fd). Only
	 * drivers with TL_CAP_POLL are given it. On Windows poll.fd is a
	 * SOCKET (the core refused any other handle) and the events are
	 * Winsock's POLL* values (drivers/iocp/poll.c). */
	TL_OP_POLL,
	TL_OP_SPLICE,      /* u.sp: src stream -> pipe -> the op's stream, or a file
			    * (u.sp.file >= 0) -> the op's stream; see below */
	TL_OP_CODES_
};

/* What to create in open(). */
enum tl_open_kind {
	TL_OPEN_TCP_LISTEN = 1,
	TL_OPEN_UNIX_LISTEN,
	TL_OPEN_TCP_STREAM,   /* a socket that will be connected */
	TL_OPEN_UNIX_STREAM,
	TL_OPEN_UDP,
};

struct tl_open_spec {
	enum tl_open_kind kind;
	const tl_addr *addr;          /* TCP/UDP */
	const char *path;             /* Unix */
	const tl_listen_opts *opts;   /* listeners; never NULL */
	/* TL_OPEN_TCP_STREAM: source address, bind flags (never NULL there;
	 * NULL for the other kinds). Apply in this order: the options of so[],
	 * then freebind / transparent / bind_no_port, then bind to source if
	 * its family is set; the core checked all of it. */
	const tl_connect_opts *conn;
	/* TL_OPEN_UDP: TL_UDP_* of turnloop/dgram.h (checked by the core). */
	uint32_t udp_flags;
	/* Options to apply before listen(2) (listeners: opts->sockopts, and
	 * defer_accept / fastopen of opts after them) or connect(2) (TCP
	 * streams: conn->sockopts), valid during open() only. */
	const tl_sockopt_val *so;
	uint32_t nso;
};

/* What one poll did, for tl_turn_info. */
struct tl_poll_info {
	uint32_t waits;           /* OS waits that could block */
	uint32_t discovery_polls; /* zero-timeout OS polls */
	uint32_t zero_event_waits;
};

/* A driver's own capability bits, above the public TL_CAP_* ones
 * (tl_loop_caps() shows only the low 16 bits). */
#define TL_DRV_CAP_KBUF (1u << 16) /* the kernel picks pooled buffers (a provided-buffer ring) */

struct tl_driver {
	const char *name;
	uint32_t caps; /* TL_CAP_* */

	/* Set up one instance for loop. wake is the loop's notifier, owned by
	 * the core (it outlives the driver): the driver waits for it beside its
	 * own events (on POSIX, its descriptor's readability) and drains it when
	 * it fires (lib/shared/os.h). Returns 0 or a negative errno (then the
	 * core may fall back to another driver). */
	int (*init)(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out);
	/* Why init failed with err, in words the core appends to the reason
	 * it records (tl_proc_info.last_error): "; ..." written to buf (len
	 * bytes, NUL-terminated), or "" when there is nothing to add. May be
	 * NULL: nothing is added. */
	void (*init_hint)(int err, char *buf, size_t len);
	/* Free the instance. Called after every handle was released and every
	 * submitted op reported its terminal event. */
	void (*destroy)(struct tl_drv *d);
	/* The loop's monotonic clock, ns. */
	uint64_t (*now)(struct tl_drv *d);

	/* Create the OS object for a new handle (h->fd and h->drv). */
	int (*open)(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *spec);
	/* Adopt an OS object the driver itself produced (an accepted socket) or
	 * one attached from elsewhere: h->fd is set. */
	int (*attach)(struct tl_drv *d, struct tl_hslot *h);
	/* Close the handle's OS object; no event of it may follow. */
	void (*release)(struct tl_drv *d, struct tl_hslot *h);
	/* Take over the socket descriptor fd for h (tl_adopt): find its kind
	 * (set h->type to TL_H_LISTEN, TL_H_STREAM or TL_H_UDP, and TL_HF_UNIX
	 * or TL_HF_V6 in h->flags), make it non-blocking and close-on-exec, set
	 * h->fd and attach it. 0, or -ENOTSOCK, -EINVAL (a kind the loop does
	 * not take) or another negative errno, with fd and its flags as they
	 * were and h's type, flags and fd unchanged. NULL: tl_adopt is
	 * -ENOTSUP (also without TL_CAP_OS). */
	int (*adopt)(struct tl_drv *d, struct tl_hslot *h, int fd);
	/* Let go of h's OS object without closing it (tl_detach: h has no op
	 * left, none of its events may follow): forget it in the OS wait set
	 * and in the driver's lists. 0, and the core then frees h; or a
	 * negative errno when the OS cannot let this one go (IOCP: a socket
	 * that joined the port, where Windows cannot take it off), with h as
	 * it was. Needed with TL_CAP_DETACH. */
	int (*detach)(struct tl_drv *d, struct tl_hslot *h);
	int (*local_addr)(struct tl_drv *d, struct tl_hslot *h, tl_addr *out);
	/* Connect datagram handle h to peer (tl_udp_connect): 0 or a negative
	 * errno. NULL: -ENOTSUP. */
	int (*dgram_connect)(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer);
	/* Capability flags found when the instance was set up (TL_CAP_UDP_GSO,
	 * TL_CAP_UDP_GRO), added to caps. May be NULL. */
	uint32_t (*probed_caps)(struct tl_drv *d);
	/* The peer of a connected stream (the core has ruled out a pending
	 * connect); a Unix-domain peer as sa_family AF_UNIX only. 0, or
	 * -ENOTCONN (the connect failed, the connection was reset) or another
	 * negative errno. NULL: tl_peer_addr is -ENOTSUP. */
	int (*peer_addr)(struct tl_drv *d, struct tl_hslot *h, tl_addr *out);
	/* Apply (set 1: *value is the value) or read (set 0: fill *value)
	 * option opt (enum tl_sockopt) of h's OS object. TL_HF_V6 tells the
	 * family (TL_SO_TCLASS differs). What is read is what the OS reports
	 * (Linux doubles buffer sizes; a driver without an OS models the
	 * same). 0 or a negative errno. NULL: the tl_sockopt_* calls, and opens
	 * whose spec has options (nso > 0), are -ENOTSUP. */
	int (*sockopt)(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value);

	/* Start an operation (see the rules above). */
	int (*submit)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *op);
	/* Ask for the op's cancellation. */
	int (*cancel)(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *op);
	/* tl_try_write on stream h (not closing): send what the OS takes of
	 * buf[0..len) now, without an op and without an event; the bytes
	 * taken (1..len), -EAGAIN when none (the OS buffer is full, a connect
	 * is pending, or h's write queue holds anything: order is kept), or
	 * the OS error, reported once as a write would report it. May be NULL
	 * (tl_try_write is then -ENOTSUP). */
	int64_t (*try_write)(struct tl_drv *d, struct tl_hslot *h, const void *buf, uint32_t len);

	/* Flush submissions and wait at most timeout_ns (< 0: no limit) for events,
	 * in at most one OS wait; report events through tl__drv_*. timeout 0 is a
	 * discovery poll. */
	int (*poll)(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info);

	/* Hand the OS the submissions that wait for the next poll, gathering
	 * nothing (a nap, lib/turn.c, sleeps after it: what the turn's handlers
	 * sent must not wait out the nap). May be NULL where submissions go out
	 * as they are made. */
	void (*flush)(struct tl_drv *d);

	/* A lease went back to the core's free list (the host released it);
	 * drivers with kernel-side buffer rings re-provide it, readiness drivers
	 * resume reads that waited for a buffer. id TL_NO_LEASE: none came back,
	 * but the pool has room again for reads tl__drv_lease_may refused
	 * (lib/caps.c); resume them. May be NULL. */
	void (*lease_returned)(struct tl_drv *d, uint32_t id);
	/* A free lease for a read the core makes itself (a terminal's, an
	 * inotify queue's: lib/tty.c, lib/watch.c), or TL_NO_LEASE if none is
	 * free now (lease_returned follows when one is). Drivers with
	 * TL_DRV_CAP_KBUF keep the free leases, so they must have it, and keep
	 * at least one free lease off the kernel's ring whenever the host holds
	 * none (else such a read could wait for good); NULL for the others: the
	 * core takes from its own free list. */
	uint32_t (*lease_take)(struct tl_drv *d);

	/* h (a stream) went over one of its caps (paused = 1: TL_HF_PAUSED is
	 * set) or back under both (0: cleared). While paused a driver issues
	 * no read of h's socket (a request already in the kernel may still
	 * complete, with one buffer at most: see tl__drv_lease_may) and reads
	 * wait; on 0 they go on. Other handles are not
	 * affected. Called from the core, possibly from inside one of this
	 * driver's callbacks (an event that took a lease, a write that
	 * completed). May be NULL: then only the flag tells. */
	void (*pause)(struct tl_drv *d, struct tl_hslot *h, int paused);

	/* A descriptor readable when the driver has events (TL_CAP_EMBED). */
	int (*embed_fd)(struct tl_drv *d);
	/* Embedded loops only: make embed_fd readable at at_ns (the next timer
	 * or deadline; UINT64_MAX: none), since nobody waits in poll(). */
	void (*embed_deadline)(struct tl_drv *d, uint64_t at_ns);

	/* Where a typed file request (lib/pool/fs.c) runs: 1 natively
	 * (fs_submit), 0 on the blocking pool. The driver alone decides, from
	 * req (which it does not keep). For 1, *redo is 0, or the negative
	 * errno of a native result that must not reach the caller: the core
	 * then keeps room on the pool from the start and runs the request
	 * there again when the driver reports that result. May be NULL (with
	 * fs_submit): every request runs on the pool. */
	int (*fs_route)(struct tl_drv *d, const struct tl_fs_native_req *req, int *redo);
	/* Run a typed file request natively (fs_route said 1). op is a core op with
	 * no handle (code TL_OP_POOL, TL_OPF_NATIVE already set); req points at
	 * memory that stays valid until op's terminal (the job record), except
	 * req itself, which the driver copies what it needs from. Returns 0 when
	 * taken (exactly one terminal tl__drv_event follows, with the raw
	 * result: the core's pool_native hook turns it into the TL_K_FS
	 * payload), -ENOTSUP to let fs.c run it on the blocking pool (nothing
	 * happened), or another negative errno (refused). cancel() is then
	 * called with h == NULL. NULL exactly when fs_route is. */
	int (*fs_submit)(struct tl_drv *d, struct tl_opslot *op, const struct tl_fs_native_req *req);

	/* Add the driver's own counters to *out (tl_loop_stats_get: the nic_*
	 * fields). May be NULL. */
	void (*stats)(struct tl_drv *d, tl_loop_stats *out);
};

/* The built-in drivers (NULL where not compiled in). */
extern const struct tl_driver tl__driver_epoll;
extern const struct tl_driver tl__driver_uring;
extern const struct tl_driver tl__driver_sim;
#if TL_HAVE_DPDK
extern const struct tl_driver tl__driver_dpdk;
#endif
#ifdef _WIN32
extern const struct tl_driver tl__driver_iocp; /* drivers/iocp/ */
#endif

/* ---- What the core offers drivers (lib/loop.c) ---- */

/* Report an event of op: res is a count or -errno; flags TL_F_TERMINAL,
 * TL_F_EOF; lease is a pooled buffer id or TL_NO_LEASE. For TL_OP_RECV the
 * source address must be in op->u.dg.addr. */
#define TL_NO_LEASE UINT32_MAX
void tl__drv_event(tl_loop *loop, struct tl_opslot *op, int64_t res, uint32_t flags,
		   uint32_t lease);

/* Report an accepted connection fd with its peer. The core makes a handle and
 * calls attach(). Returns 0, or a negative errno when no handle could be made:
 * then the core has reported that error as the event and the driver closes fd. */
int tl__drv_accept(tl_loop *loop, struct tl_opslot *op, int fd, const tl_addr *peer,
		   int terminal);

/*
 * Splices (TL_OP_SPLICE, TL_CAP_SPLICE; the rules are tl_splice()'s in
 * turnloop/loop.h). The op belongs to dst (op->hidx) and joins dst's write
 * queue like a write; u.sp.src names its source while it may read it. At
 * the head it waits for src readable (and not TL_HF_PAUSED) and dst
 * writable, takes once from src into the pipe (at most u.sp.max and
 * u.sp.pipe_size), calls tl__drv_splice_src_done, then writes the pipe out
 * to dst; its terminal's res is u.sp.moved (0 with TL_F_EOF at src's end),
 * or an errno. A sendfile (u.sp.file >= 0) writes u.sp.max bytes of the
 * file from u.sp.off, advancing u.sp.off; a short file ends it with
 * TL_F_EOF and res = u.sp.moved.
 * cancel(): a splice with nothing in its pipe is acknowledged as any op;
 * one with bytes in its pipe goes on writing them and reports its terminal
 * when they are out (flush), unless dst is TL_HF_CLOSING or the op has
 * TL_OPF_TIMEDOUT (dst's idle deadline: dst made no progress, a flush could
 * wait for ever): then it ends as soon as the OS no longer holds it. The
 * core calls cancel() again on an already cancelled splice when dst starts
 * closing. A sendfile is cancelled as a write.
 */
/* Bytes moved by splice op: in entered its pipe from the source, out left
 * it for dst (a sendfile reports out only). Keeps u.sp.taken/moved and
 * dst's queued write bytes (lib/caps.c; may call pause()). */
void tl__drv_splice_io(tl_loop *loop, struct tl_opslot *op, uint32_t in, uint32_t out);
/* Splice op will not touch its source again: the source may close now.
 * (Its terminal implies it.) */
void tl__drv_splice_src_done(tl_loop *loop, struct tl_opslot *op);

/* How many more nonterminal events this turn may take. */
uint32_t tl__drv_room(const tl_loop *loop);

/* Pooled buffers: the base address, the size of one buffer and their number;
 * take a free one (TL_NO_LEASE if none), or mark one the kernel picked as
 * handed out. */
uint8_t *tl__drv_lease_base(const tl_loop *loop, uint32_t *size, uint32_t *count);
uint32_t tl__drv_lease_take(tl_loop *loop);
void tl__drv_lease_mark(tl_loop *loop, uint32_t id);
/* Give back a lease that never reached the host (an event that was dropped). */
void tl__drv_lease_drop(tl_loop *loop, uint32_t id);

/*
 * Pooled stream reads and the pool's reservations (lib/caps.c explains the
 * rule; these are its checks, inline because every pooled stream read
 * makes them). A driver makes a pooled read of stream h take a buffer (or
 * puts into the kernel a request that may take one) only while h is not
 * TL_HF_PAUSED and tl__drv_lease_may says so, and never has two such
 * requests of h out at once: that keeps h within its lease cap by
 * construction. The loop's counts are in its struct tl_lease_pool, which stays in
 * place for the loop's life (tl__drv_lease_pool).
 */
struct tl_lease_pool {
	uint32_t count;  /* pooled buffers */
	uint32_t out;    /* handed out: to the host, or to an event dropped since */
	uint32_t armed;  /* pooled stream read requests in the kernel: one buffer each, at most */
	uint32_t owed;   /* reading streams with no lease and no request out: one reserved each */
	uint8_t starved; /* tl__drv_lease_may refused a read since the surplus last grew */
};
struct tl_lease_pool *tl__drv_lease_pool(tl_loop *loop);
/* The surplus grew while reads were refused it (lib/caps.c): resume them. */
void tl__caps_room(tl_loop *loop);

/* May a pooled read of stream h take one more buffer now? 1 yes; 0 no: h
 * has its reserved lease and the pool has nothing beyond the reservations.
 * The read waits as for a lease when none is free; lease_returned follows
 * when it may try again. */
static inline int tl__drv_lease_may(struct tl_lease_pool *p, const struct tl_hslot *h)
{
	if (h->leases + h->armed == 0 || (int64_t)p->count - p->out - p->armed - p->owed >= 1)
		return 1;
	p->starved = 1;
	return 0;
}

/* A pooled read request of stream h went into the kernel, where it may
 * take a buffer (which counts against h until the request comes back). */
static inline void tl__drv_read_armed(struct tl_lease_pool *p, struct tl_hslot *h)
{
	p->owed -= h->reader && h->leases + h->armed == 0;
	h->armed++;
	p->armed++;
}

/* It came back, before the event that hands out the lease it took, if any
 * (took); one that took none may have made room for refused reads. */
static inline void tl__drv_read_disarmed(tl_loop *loop, struct tl_lease_pool *p, struct tl_hslot *h,
					 int took)
{
	h->armed--;
	p->armed--;
	p->owed += h->reader && h->leases + h->armed == 0;
	if (!took && __builtin_expect(p->starved, 0))
		tl__caps_room(loop);
}

/* How many pooled datagrams a receive of h may take now, at most max: what
 * h's lease cap leaves (0 while TL_HF_PAUSED), counting those its requests
 * in the kernel may take (armed). A driver takes no more at once, so a
 * datagram handle never holds more leases than its cap. */
static inline uint32_t tl__drv_dgram_room(const struct tl_hslot *h, uint32_t max)
{
	if (h->flags & TL_HF_PAUSED)
		return 0;
	uint32_t used = h->leases + h->armed;
	uint32_t left = h->lim_leases > used ? h->lim_leases - used : 0;
	return left < max ? left : max;
}

/* Slot lookup for drivers that carry an op index in kernel user data. Each
 * table is one array that stays in place for the loop's life, so a driver
 * may keep tl__drv_op(loop, 0) and index it below cfg->max_ops (handles:
 * cfg->max_handles). */
struct tl_opslot *tl__drv_op(tl_loop *loop, uint32_t idx);
struct tl_hslot *tl__drv_handle(tl_loop *loop, uint32_t idx);

/* The driver instance loop runs on, if that is driver dv (NULL otherwise,
 * or when loop is NULL): for a driver's own diagnostic hooks, which are
 * handed a loop. Any thread, as long as loop lives. */
struct tl_drv *tl__drv_self(const tl_loop *loop, const struct tl_driver *dv);

/* Completions queued in the loop and not yet handed out: a poll compares it
 * before and after its work to tell whether it produced any. */
uint32_t tl__drv_queued(const tl_loop *loop);

/* 1 when a party other than the loop holds its poster, and so may post or
 * wake from another thread (a virtual-time driver then waits for real). */
int tl__drv_shared(const tl_loop *loop);

/* Wake loop from another thread: a system call only if it is parked. A call
 * from loop's own thread does nothing (it is not waiting). */
void tl__drv_wake(tl_loop *loop);

#endif
