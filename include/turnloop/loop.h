/* turnloop/loop.h: the per-thread completion loop (contract sections 1-4, 8). */
#ifndef TURNLOOP_LOOP_H
#define TURNLOOP_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop/error.h"
#include "turnloop/platform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a name kept for one release after it was replaced (turnloop.h lists
 * them): using it still works and draws a compiler warning naming the new
 * one. */
#if defined(__GNUC__) || defined(__clang__)
#define TL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define TL_DEPRECATED(msg)
#endif

/*
 * Ownership in one paragraph: a loop belongs to the thread that created it and
 * every function here must be called from that thread, except the poster
 * functions (tl_post*, tl_poster_wake), which any thread may call. The loop
 * never calls user code: work is submitted with the functions below and its
 * results come back as tl_completion records from tl_turn(). Memory handed to
 * a submission (a read buffer, the bytes of a write, an iovec's buffers) stays
 * the caller's and must stay valid and untouched until that operation's
 * terminal completion has been returned by tl_turn().
 *
 * Every function keeps the rules at the top of turnloop.h: 0 (or a value
 * the declaration names) on success, a negative errno on failure
 * (turnloop/error.h has the table).
 */

typedef struct tl_loop tl_loop;
typedef struct tl_poster tl_poster;

/* A handle (socket, listener, timer) or an operation id. The 64 bits hold the
 * owning loop's identity, a generation and a slot; 0 is never issued. Treat
 * them as opaque values: compare with tl_handle_eq / tl_op_eq, copy freely.
 * A loop's ids never have TL_ID_LAYER_BIT set; layers built on the loop that
 * issue ids of the same shape (tls.h) set it in theirs, so that no id of one
 * can pass the other's check. */
typedef struct tl_handle { uint64_t v; } tl_handle;
typedef struct tl_op { uint64_t v; } tl_op;

#define TL_HANDLE_NONE ((tl_handle){0})
#define TL_OP_NONE ((tl_op){0})
/* The top bit of an id: never set in a loop's ids, always in a layer's (tls.h). */
#define TL_ID_LAYER_BIT (1ull << 63)

/* 1 when a and b name the same handle (or are both TL_HANDLE_NONE), else 0. */
static inline int tl_handle_eq(tl_handle a, tl_handle b)
{
	return a.v == b.v;
}
/* 1 when a and b name the same operation (or are both TL_OP_NONE), else 0. */
static inline int tl_op_eq(tl_op a, tl_op b)
{
	return a.v == b.v;
}

/* An IPv4 or IPv6 socket address (sa.sa_family tells which); AF_UNIX peers
 * are reported with sa_family == AF_UNIX and no path. */
typedef union tl_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
} tl_addr;

/* Build an address from text ("127.0.0.1", "::1") and a port. Returns 0 or
 * -EINVAL when the text is not a numeric IPv4/IPv6 address. */
int tl_addr_parse(tl_addr *out, const char *ip, uint16_t port);
/* Length of the sockaddr inside (sizeof sockaddr_in or _in6), 0 if unknown. */
unsigned tl_addr_len(const tl_addr *a);

/* Driver kinds. TL_DRIVER_DEFAULT uses the process's driver: the first loop
 * created with it decides that once for the whole process (TL_DRIVER=uring|
 * epoll|sim|dpdk in the environment if set, else io_uring, else epoll when
 * io_uring cannot be set up); see tl_driver_info_get(). TL_DRIVER_DPDK
 * serves datagrams only, on a DPDK port, in a build with -Ddpdk=enabled
 * (else it is -ENOTSUP); docs/DPDK.md sets it up. TL_DRIVER_IOCP is
 * Windows' completion ports, the default there (TL_DRIVER=iocp), TCP
 * streams so far (docs/WINDOWS.md); -ENOTSUP on other systems. */
enum tl_driver_kind {
	TL_DRIVER_DEFAULT = 0,
	TL_DRIVER_EPOLL = 1,
	TL_DRIVER_URING = 2,
	TL_DRIVER_SIM = 3,
	TL_DRIVER_DPDK = 4,
	TL_DRIVER_IOCP = 5,
};

/*
 * Loop configuration. tl_config_init() fills the documented defaults; every
 * field is validated by tl_loop_new(): zero or absurd values are -EINVAL.
 */
typedef struct tl_config {
	uint32_t max_handles;        /* handle table (sockets, timers)     4096, <= 2^24 */
	uint32_t max_ops;            /* operation table                    8192, <= 2^24 */
	uint32_t events_per_turn;    /* per-source budget per turn         256, <= 65536 */
	uint32_t post_capacity;      /* poster ring (rounded up to 2^k)    1024, <= 2^20 */
	uint32_t pooled_buffers;     /* pooled read buffers (2^k)          256, <= 32768 */
	uint32_t pooled_buffer_size; /* bytes per pooled buffer            16384, <= 16 MiB */
	uint32_t max_undelivered;    /* pool results in flight (2^k)       256, <= 2^20 */
	uint32_t room_waiters;       /* poster "room again" waiters        16, <= 64 */
	/* Per-stream caps (contract 4.10; tl_handle_caps() changes them for one
	 * handle): the pooled leases a stream's reads hold (released or not
	 * yet), and the write bytes queued on it. Over either, that stream's
	 * reads pause, and only its own, until it is back under both; a write
	 * is never refused for a cap. A stream never holds more leases than
	 * its cap. Each stream that reads into pooled buffers has one of them
	 * reserved, and takes more only while the pool has leases beyond every
	 * reservation: with pooled_buffers at least the number of such streams,
	 * streams whose peers stop reading cannot starve the others. A stream
	 * that writes more than handle_write_bytes at once while its peer
	 * writes too can deadlock with it: see tl_handle_caps(). */
	uint32_t handle_leases;      /* leases per stream (at most pooled_buffers
	                              * take effect)                       16, <= 32768 */
	uint64_t handle_write_bytes; /* queued write bytes per stream      1 MiB, <= 2^40 */
	/* The pipe pool of tl_splice() (docs/SPLICE.md): at most `pipes` pipes
	 * of pipe_size bytes each (a power of two), each created the first
	 * time a splice needs it and kept until the loop is destroyed, so a
	 * loop that never splices holds none. Not as root, a loop asks for at
	 * most fs.pipe-user-pages-soft worth (64 MiB per user by default),
	 * and a pipe the kernel will not grow that far (the user is over that
	 * budget) is made smaller, down to 16 KiB, or not made at all. */
	uint32_t pipes;              /* pipes in the pool                  4, <= 4096 */
	uint32_t pipe_size;          /* bytes per pipe, 2^k                1 MiB, 4 KiB .. 1 MiB */
	int driver;                  /* enum tl_driver_kind                 TL_DRIVER_DEFAULT */
	int embed;                   /* 1: tl_loop_fd() will be used (see below)    0 */
	uint64_t sim_seed;           /* simulation driver only: the run's seed      1 */
	/* A turn about to park in the OS (a blocking wait) first polls without
	 * blocking for up to spin_ns (and no longer than it would have
	 * waited), and does not park if work comes meanwhile. On loopback and
	 * on a busy host this spares the peers that send to this thread the
	 * cost of waking it (docs/PERFORMANCE.md, "Spinning before parking");
	 * the price is up to spin_ns of CPU each time the loop would park.
	 * Only drivers with OS objects spin (TL_CAP_OS: not the simulation),
	 * and not an embedded loop. 0 (default): park at once.   0, <= 1 ms */
	uint64_t spin_ns;
	/* While events come in batches (the turn's last poll gathered two
	 * records or more), a turn about to park first hands the OS what the
	 * turn submitted, sleeps nap_ns on a timer, as no waiter of its
	 * handles, then polls once without blocking, and parks only if
	 * nothing came. Whoever sends to the loop meanwhile pays no wake-up,
	 * and the loop takes what came as one batch: less CPU on both sides
	 * for streams at high rates (docs/PERFORMANCE.md, "Napping before
	 * parking"), at up to nap_ns (plus the kernel's timer slack, 50 us by
	 * default) more latency for the first event of a batch. A client that
	 * waits for each answer gathers no batches and meets no naps, nor
	 * does a loop with a handle paused at its caps, nor a batch of bulk
	 * reads (over 4 KiB a read on average: such a batch pays for its
	 * turn, and a bigger one cost TLS bulk more CPU). A datagram receive
	 * takes no more a turn than its handle's lease cap leaves, and on
	 * io_uring the completions of the sends that hold those leases wait
	 * out the nap: give a busy datagram socket a cap of several batches
	 * (tl_handle_caps; at a cap of 8 a DNS proxy took 3 queries a turn
	 * and served a fifth of its rate). After the spin when both are set.
	 * Only drivers with OS objects nap (TL_CAP_OS), not an embedded
	 * loop, not on Windows (whose sleeps are whole milliseconds).
	 * 0 (default): never.                                 0, <= 1 ms */
	uint64_t nap_ns;
} tl_config;

/* Fill *cfg with the defaults above. */
void tl_config_init(tl_config *cfg);

/* How the process's driver was chosen (tl_driver_info.how). */
enum tl_driver_how {
	TL_HOW_NONE = 0,  /* no loop has asked for the process's driver yet */
	TL_HOW_DEFAULT,   /* io_uring, the default */
	TL_HOW_FALLBACK,  /* epoll, because io_uring could not be set up */
	TL_HOW_ENV,       /* forced by TL_DRIVER */
};

/* The process's driver and why (contract 10). The library prints nothing
 * about it; a program prints this if it wants to. */
typedef struct tl_driver_info {
	int kind;             /* enum tl_driver_kind; TL_DRIVER_DEFAULT while how is TL_HOW_NONE */
	int how;              /* enum tl_driver_how */
	int uring_error;      /* TL_HOW_FALLBACK: why io_uring could not start (negative errno) */
	char reason[192];     /* one line: "uring (default)", "epoll (io_uring unavailable:
			       * Operation not permitted; refused by seccomp or a security policy)" */
	char last_error[192]; /* why the most recent loop that failed to start its driver failed
			       * (any loop of the process, named drivers included); "" if none did */
} tl_driver_info;

/* Copy the process's driver choice into *out (any thread; out NULL: nothing).
 * The choice is made by the first tl_loop_new() whose config leaves driver
 * at TL_DRIVER_DEFAULT and held for the life of the process: a later such
 * loop that cannot start that driver fails with its error instead of
 * switching. A loop whose config names a driver (tests) neither makes nor
 * follows the choice. */
void tl_driver_info_get(tl_driver_info *out);

/* Create a loop owned by the calling thread, with all of its storage
 * allocated now. Returns 0 and sets *out, or -EINVAL (bad config, or
 * TL_DRIVER names no driver), -ENOMEM, -ENOTSUP (io_uring forced by the
 * config or TL_DRIVER but unavailable, or a driver not built in) or the OS
 * error of the driver (the process's driver could not start for this loop).
 * Prints nothing; tl_driver_info_get() says why a driver did not start. */
int tl_loop_new(tl_loop **out, const tl_config *cfg);

/* Close a loop that has no live handles: -EBUSY (and nothing changes) while
 * any handle exists, else 0 and the loop is freed. */
int tl_loop_close(tl_loop *loop);

/* Destroy a loop whatever it holds: cancels everything, waits for the driver
 * to acknowledge every cancellation (so the kernel no longer writes into any
 * buffer the user gave), closes every handle and frees the loop. Undelivered
 * completions are dropped. Posters see -EPIPE from then on. */
void tl_loop_destroy(tl_loop *loop);

/* The driver's monotonic clock, in nanoseconds (virtual time on the
 * simulation driver). Deadlines use this clock. */
uint64_t tl_now(const tl_loop *loop);

/* The name of the loop's driver ("epoll", "uring", "sim"): a string of the
 * library's, valid for the life of the process. */
const char *tl_loop_driver(const tl_loop *loop);

/* Capability flags of the loop's driver (TL_CAP_*). */
#define TL_CAP_TCP       (1u << 0)
#define TL_CAP_UDP       (1u << 1)
#define TL_CAP_UNIX      (1u << 2)
#define TL_CAP_EMBED     (1u << 3) /* tl_loop_fd() */
/* tl_detach, tl_send_fds, tl_recv_fds: a handle's descriptor can leave the
 * loop, and descriptors can travel over Unix-domain streams (tl_adopt, which
 * takes one in, needs TL_CAP_OS); docs/SOCKETS.md, "Handing sockets over". */
#define TL_CAP_DETACH    (1u << 4)
#define TL_CAP_SPLICE    (1u << 5) /* tl_splice/tl_sendfile */
/* Handles are the operating system's sockets, reachable from other processes
 * (the simulation driver's are not: a server must refuse to run without it;
 * the sharded runtime does). */
#define TL_CAP_OS        (1u << 6)
/* The driver waits for readiness of OS descriptors: foreign descriptors
 * (turnloop/poll.h), and what is built on them: processes, terminals and
 * stdio, file watches, the c-ares resolver (turnloop/proc.h, tty.h,
 * watch.h, dns.h). Without it those calls are -ENOTSUP. On Windows (the
 * IOCP driver) it means foreign sockets: the other modules are not ported
 * there yet and answer -ENOTSUP. Signals and external waits need no
 * driver and work everywhere. */
#define TL_CAP_POLL      (1u << 7)
/* UDP generic segmentation and receive offload (turnloop/dgram.h): probed
 * when the loop is made; without them tl_udp_sendmsg with a segment size
 * and tl_udp_bind_opts with TL_UDP_GRO are -EOPNOTSUPP. */
#define TL_CAP_UDP_GSO   (1u << 8)
#define TL_CAP_UDP_GRO   (1u << 9)
/* Handles reach the network: through the kernel's sockets (TL_CAP_OS) or
 * through a NIC the driver owns (DPDK). A server needs it (the sharded
 * runtime refuses a driver without it); the simulation driver lacks it. */
#define TL_CAP_NET       (1u << 10)
/* tl_write sends at once, inside the call, when nothing is queued ahead
 * of it, and tl_try_write works (epoll): each write is a system call of
 * its own, so tl_try_write costs the same call and saves the operation
 * and its completion. The simulation driver has tl_try_write too (as a
 * model) but not this flag. */
#define TL_CAP_WRITE_AT_ONCE (1u << 11)
/* The capability flags (TL_CAP_*) of the loop's driver. */
uint32_t tl_loop_caps(const tl_loop *loop);

/* 1 while a referenced handle, a pending operation of a referenced handle,
 * or an undelivered terminal completion exists; else 0. */
int tl_alive(const tl_loop *loop);

/* Take a handle and its operations out of (ref=0) or back into (ref=1) the
 * alive() count. 0, -ENOENT (stale/foreign), -EINVAL (closing). */
int tl_set_ref(tl_loop *loop, tl_handle h, int ref);

/*
 * A pointer of the host's own per handle, which every completion naming
 * the handle carries (tl_completion.data), its Closed included: state kept
 * per connection, timer or listener is found from the completion, and
 * freed at the Closed, whoever closed the handle (tl_close, tl_close_all,
 * the sharded runtime at a stop: turnloop/runtime.h, TL_RT_CLOSE_TOKEN).
 *
 * The pointer is read when tl_turn hands a record out, not when its event
 * happened: every record handed out after a set carries the new value,
 * also records queued before it. A handle that tl_turn has not named yet
 * (a connection just accepted, one tl_tcp_connect or tl_adopt just made,
 * a new timer) carries it on every completion when it is set before the
 * next tl_turn. A record is named by its handle field: an accept carries
 * the listener's pointer (the accepted connection's is NULL until set),
 * a splice or sendfile dst's, a connect the new stream's. Records naming
 * no handle (posts, room, pool jobs and file requests, the runtime's mesh
 * completions, the TLS layer's) carry NULL.
 *
 * A handle's pointer is NULL until set. It stays with the handle on its
 * loop: tl_detach gives it up (read it first), a handle made by tl_adopt
 * starts with NULL, and so does a connection tl_shard_migrate moved
 * (turnloop/runtime.h). tl_loop_destroy drops the completions it has not
 * handed out, Closed records too: a host that frees its state at Closed
 * closes its handles and turns until they are gone first.
 *
 * The loop never reads through the pointer. Set it (NULL clears it) any
 * time until h's Closed has been handed out, also while h is closing.
 * 0, or -ENOENT (stale, foreign, or h's Closed already handed out).
 * Allocates nothing.
 */
int tl_handle_set_data(tl_loop *loop, tl_handle h, void *data);

/* Copy h's pointer (tl_handle_set_data; NULL if never set) into *data.
 * 0, -ENOENT (stale, foreign, or h's Closed already handed out), -EINVAL
 * (data NULL). */
int tl_handle_data_get(tl_loop *loop, tl_handle h, void **data);

/* ---- Completions ---- */

enum tl_kind {
	TL_K_NONE = 0,
	TL_K_ACCEPT,   /* u.accept: the new connection handle and peer */
	TL_K_CONNECT,  /* result 0 once connected */
	TL_K_READ,     /* result = bytes (0 = EOF); u.read for pooled reads */
	TL_K_WRITE,    /* result = bytes written (all of them); u.write */
	TL_K_SHUTDOWN, /* result 0 */
	TL_K_SEND,     /* UDP datagram sent: result = bytes */
	TL_K_RECV,     /* UDP datagram: result = bytes; u.recv */
	TL_K_TIMER,    /* result 0 each expiry */
	TL_K_POST,     /* a tl_post() message: u.post */
	TL_K_ROOM,     /* poster has room again (tl_post_wait_room) */
	TL_K_CLOSED,   /* last completion of a handle; token = close token */
	TL_K_POOL,     /* a blocking-pool job's result (turnloop/pool.h) */
	TL_K_FS,       /* a filesystem request (turnloop/pool.h) */
	TL_K_RESOLVE,  /* a name lookup (turnloop/pool.h) */
	TL_K_MESH,     /* a cross-shard message (turnloop/runtime.h) */
	TL_K_POLL,     /* a foreign descriptor is ready: result = revents (turnloop/poll.h) */
	TL_K_SIGNAL,   /* a signal arrived: result = its number, aux = how many (turnloop/signal.h) */
	TL_K_EXIT,     /* a child was reaped: u.exit (turnloop/proc.h) */
	TL_K_WATCH,    /* a batch of file events: u.watch (turnloop/watch.h) */
	TL_K_EWAIT,    /* an external wait ended: u.ewait (turnloop/ewait.h) */
	TL_K_SPLICE,   /* tl_splice/tl_sendfile: result = bytes moved; u.splice */
	TL_K_COUNT_
};

/* Completion flags. */
#define TL_F_TERMINAL (1u << 0) /* last completion of this op */
#define TL_F_STOPPED  (1u << 1) /* terminal after tl_stop(): result 0 */
#define TL_F_EOF      (1u << 2) /* a read found the peer's EOF: result 0 */
#define TL_F_LEASE    (1u << 3) /* u.read.lease / u.recv.lease / u.watch.lease is valid */
#define TL_F_TRUNC    (1u << 4) /* a datagram longer than its buffer: aux = its full length */

/* A pooled buffer lease: data[0..result) is the caller's until it calls
 * tl_lease_release(loop, id). */
typedef struct tl_lease {
	uint8_t *data;
	uint32_t id;
	uint32_t cap;
} tl_lease;

typedef struct tl_completion {
	uint64_t token;   /* the submitter's token */
	tl_op op;         /* the operation (TL_OP_NONE for Closed and posts) */
	tl_handle handle; /* the handle it ran on (TL_HANDLE_NONE for posts) */
	int64_t result;   /* count or negative errno (-ECANCELED once cancelled) */
	uint16_t kind;    /* enum tl_kind */
	uint16_t flags;   /* TL_F_* */
	uint32_t aux;     /* kind-specific small value (pool: job class; tl_recv_fds:
			   * descriptors received; mesh: turnloop/runtime.h;
			   * TL_K_RECV with TL_F_TRUNC: the datagram's length) */
	void *data;       /* the pointer of the handle it names (tl_handle_set_data)
			   * when tl_turn handed it out; NULL when it names none */
	union {
		struct { tl_handle conn; tl_addr peer; } accept;
		struct { tl_lease lease; } read;
		/* TL_K_RECV (turnloop/dgram.h): the source; the local address it
		 * was sent to (with TL_UDP_PKTINFO, else family 0); the segment
		 * size of a coalesced receive (TL_UDP_GRO; 0: one datagram). */
		struct { tl_lease lease; tl_addr from; tl_addr to; uint32_t segment; } recv;
		struct { uint64_t payload; } post;
		struct { uint64_t value; void *ptr; } pool;
		struct { uint64_t payload; void *arg; tl_handle conn; } mesh; /* turnloop/runtime.h */
		/* turnloop/watch.h: the batch is lease.data[0..result) */
		struct { tl_lease lease; uint32_t events; uint32_t overflow; } watch;
		/* turnloop/proc.h: exit status, or the terminating signal */
		struct { int32_t pid; int32_t status; int32_t signal; int32_t core; } exit;
		struct { uint64_t value; } ewait; /* turnloop/ewait.h: *addr as last read */
		/* TL_K_SPLICE, whatever the result: bytes taken from the source
		 * (into the pipe; a file's for tl_sendfile) and bytes of them
		 * written to dst. taken > moved only when they were dropped
		 * (dst closed or failed): see tl_splice(). */
		struct { uint64_t taken, moved; } splice;
		/* TL_K_WRITE, whatever the result: how many of the write's bytes
		 * reached the socket, always a prefix of them. All of them when
		 * it succeeded; after a cancel, a close or detach of its handle,
		 * or an error, those that went before it ended, so a host that
		 * must lose no byte (a proxy handing a connection to another
		 * process) sends the rest, from that offset, another way. */
		struct { uint64_t written; } write;
	} u;
} tl_completion;

/* What a turn did. */
typedef struct tl_turn_info {
	uint32_t completions;     /* records written to out */
	uint32_t os_waits;        /* OS waits that may block (0 or 1) */
	uint32_t discovery_polls; /* zero-timeout native polls (0 or 1; more while
				   * spinning before a park, tl_config.spin_ns) */
	uint32_t zero_event_waits;/* OS waits that returned no event */
	uint64_t waited_ns;       /* time spent in the turn, driver clock */
	uint64_t idle_ns;         /* of which inside the OS wait (0 without one) */
	int alive;                /* tl_alive() after the turn */
} tl_turn_info;

/*
 * Run one turn: make at most one OS wait (none if completions are already
 * queued; then at most one zero-timeout discovery poll, and only while native
 * operations are pending), collect due timers, pool results and posts under
 * their per-turn budgets, and copy at most cap completions, oldest first, into
 * out. The rest stay queued for the next turn. No user code runs.
 * timeout_ns < 0 waits without limit (until a completion or a wake), 0 never
 * blocks. Returns the number of completions, or -EINVAL (out NULL, cap 0), or
 * the driver's OS error. info may be NULL.
 */
int tl_turn(tl_loop *loop, int64_t timeout_ns, tl_completion *out, uint32_t cap,
	    tl_turn_info *info);

/* ---- Cancel, stop, close (contract section 2) ---- */

/* Ask for cancellation of op: 0 (its terminal -ECANCELED follows once the
 * driver acknowledged it), -EALREADY (already asked), -ENOENT (unknown,
 * foreign or already terminal). */
int tl_cancel(tl_loop *loop, tl_op op);

/* End a multishot op (accept_start, read_start, repeating timer) with a
 * terminal TL_F_STOPPED completion. Same return codes as tl_cancel. */
int tl_stop(tl_loop *loop, tl_op op);

/* Cancel every pending op of h (each delivers its own terminal -ECANCELED)
 * and then deliver TL_K_CLOSED with token, last of everything for h. The OS
 * object is released when Closed is handed out by tl_turn(); h is stale
 * (-ENOENT) from then on. -EINVAL if h is already closing. */
int tl_close(tl_loop *loop, tl_handle h, uint64_t token);

/* tl_close(h, token) for every handle of loop that is not closing yet
 * (timers included); each delivers its own completions and its Closed as
 * tl_close() says. Returns how many handles it started closing. */
uint32_t tl_close_all(tl_loop *loop, uint64_t token);

/* tl_close(h, token) for every listener of loop not closing yet (a server
 * that stops accepting). Returns how many it started closing. */
uint32_t tl_close_listeners(tl_loop *loop, uint64_t token);

/* ---- Submitting an operation ----
 *
 * Every call below that sets *op submits one operation: it is refused
 * (a negative return: nothing happened and no completion follows) or
 * accepted (0 and *op set: exactly one terminal completion follows, after
 * any nonterminal ones). A refusal is -EINVAL (op or another out-parameter
 * NULL, a bad argument, a handle of the wrong kind or one already closing),
 * -ENOENT (a stale or foreign handle), -ENOBUFS (the op table is full, or
 * the handle table for a call that makes a handle), or the driver's OS
 * error; each declaration adds what is particular to it. Buffers handed in
 * stay the caller's, and untouched, until the terminal. */

/* ---- Timers (contract section 3) ---- */

/* Create a timer that first expires at the absolute time at_ns (tl_now()
 * clock) and then every repeat_ns if repeat_ns > 0 (missed intervals are
 * coalesced). Sets *h and *op. Each expiry is a TL_K_TIMER completion; a
 * one-shot timer's single expiry is terminal. Returns as any submission:
 * 0, -EINVAL (h or op NULL), -ENOBUFS (the handle or op table is full). */
int tl_timer_start(tl_loop *loop, uint64_t at_ns, uint64_t repeat_ns, uint64_t token,
		   tl_handle *h, tl_op *op);

/* Move an armed timer to at_ns: 0, -EINVAL (closing or already expired),
 * -ENOENT (stale or foreign). */
int tl_timer_reset(tl_loop *loop, tl_handle h, uint64_t at_ns);

/* ---- Streams and datagrams (contract section 4) ---- */

/*
 * Typed socket options (contract 4.8; docs/SOCKETS.md), for tl_sockopt_set()
 * and tl_sockopt_get() and the option lists of tl_listen_opts and
 * tl_connect_opts. Which handles take which option (anything else is
 * -EINVAL):
 *  - TCP streams (accepted, connected or still connecting) and TCP listeners:
 *    TL_SO_NODELAY .. TL_SO_TCLASS. The streams a listener accepts inherit
 *    its values (as Linux copies them), so set an option on the listener
 *    once instead of on every connection.
 *  - TCP listeners also: TL_SO_DEFER_ACCEPT, TL_SO_FASTOPEN.
 *  - Unix-domain streams: TL_SO_RCVBUF, TL_SO_SNDBUF.
 *  - UDP sockets: TL_SO_RCVBUF, TL_SO_SNDBUF, TL_SO_MARK, TL_SO_TCLASS.
 *  - Unix-domain listeners and timers: none.
 * A value outside the range given is -EINVAL.
 */
enum tl_sockopt {
	TL_SO_NODELAY = 1,  /* TCP_NODELAY, 0 or 1; 1 by default (replies must not wait
			     * for Nagle's algorithm) */
	TL_SO_KEEPALIVE,    /* SO_KEEPALIVE, 0 or 1; 0 by default */
	TL_SO_KEEPIDLE,     /* TCP_KEEPIDLE: idle seconds before the first probe, 1..32767 */
	TL_SO_KEEPINTVL,    /* TCP_KEEPINTVL: seconds between probes, 1..32767 */
	TL_SO_KEEPCNT,      /* TCP_KEEPCNT: unanswered probes before the reset, 1..127 */
	TL_SO_USER_TIMEOUT, /* TCP_USER_TIMEOUT: ms sent data may stay unacknowledged
			     * before the connection fails (-ETIMEDOUT); 0 (the system's
			     * default) .. INT32_MAX */
	TL_SO_RCVBUF,       /* SO_RCVBUF bytes, 1..2^30-1; read back doubled (see below) */
	TL_SO_SNDBUF,       /* SO_SNDBUF bytes, 1..2^30-1; read back doubled */
	TL_SO_MARK,         /* SO_MARK (routing and filtering mark), 0..UINT32_MAX; setting it
			     * needs CAP_NET_ADMIN or CAP_NET_RAW (-EPERM) */
	TL_SO_TCLASS,       /* traffic class: IP_TOS on IPv4 sockets, IPV6_TCLASS on IPv6 ones
			     * (and IP_TOS too, for the IPv4 peers of a dual-stack socket);
			     * 0..255 with the two ECN bits clear (they are the kernel's) */
	TL_SO_DEFER_ACCEPT, /* TCP listeners: TCP_DEFER_ACCEPT, seconds a connection may wait
			     * for its first bytes before accept sees it; 0 (off) .. INT32_MAX */
	TL_SO_FASTOPEN,     /* TCP listeners: TCP_FASTOPEN, the queue of pending TFO
			     * requests; 0 (off) .. INT32_MAX */
	TL_SO_COUNT_
};

/* One option and its value, for the lists of tl_listen_opts and
 * tl_connect_opts (read during the call only). */
typedef struct tl_sockopt_val {
	int opt;       /* enum tl_sockopt */
	int64_t value;
} tl_sockopt_val;
#define TL_SOCKOPTS_MAX 16 /* entries a list may have */

typedef struct tl_listen_opts {
	int backlog;      /* default 511 when 0 */
	int reuseport;    /* SO_REUSEPORT: several loops listen on one address */
	int v6only;       /* IPv6 listeners: IPV6_V6ONLY */
	int defer_accept; /* TCP: TL_SO_DEFER_ACCEPT seconds (0: off); Unix: must be 0 */
	int fastopen;     /* TCP: TL_SO_FASTOPEN queue length (0: off); Unix: must be 0 */
	/* More options, applied in order before listen(2) (a buffer size set
	 * then also shapes the window the accepted streams advertise); each
	 * must be one a listener of this kind takes. NULL with 0: none. */
	const tl_sockopt_val *sockopts;
	uint32_t nsockopts; /* <= TL_SOCKOPTS_MAX */
} tl_listen_opts;

/* Bind and listen on addr (IPv4 or IPv6). opts may be NULL. 0 and *out, or
 * -EINVAL (addr or out NULL, addr not IPv4/IPv6, a bad option, value or
 * list in opts), -ENOBUFS (handle table full), the OS error (-EADDRINUSE,
 * ...). */
int tl_tcp_listen(tl_loop *loop, const tl_addr *addr, const tl_listen_opts *opts,
		  tl_handle *out);
/* Listen on a Unix-domain stream socket at path (unlinked first if it is a
 * stale socket). Return codes as tl_tcp_listen (opts may carry no socket
 * option: a Unix-domain listener takes none). */
int tl_unix_listen(tl_loop *loop, const char *path, const tl_listen_opts *opts,
		   tl_handle *out);
/* The bound local address of a TCP/UDP handle: 0, -ENOENT (stale or
 * foreign), -EINVAL (out NULL, not a socket handle, or a Unix-domain one), -EAGAIN
 * while the handle's connect has not completed (drivers bind at different
 * moments; ask again once TL_K_CONNECT arrived), or the OS error. */
int tl_local_addr(tl_loop *loop, tl_handle h, tl_addr *out);

/* Accept one connection: a terminal TL_K_ACCEPT with u.accept.conn (a new
 * stream handle, the host's to close) and u.accept.peer. Returns as any
 * submission (-EINVAL: listener is not a listener). */
int tl_accept(tl_loop *loop, tl_handle listener, uint64_t token, tl_op *op);
/* Accept until stopped: each connection is a nonterminal TL_K_ACCEPT; errors
 * that leave the listener usable (-EMFILE, -ENOBUFS: handle table full, ...)
 * are nonterminal too and accepting resumes. Returns as tl_accept. */
int tl_accept_start(tl_loop *loop, tl_handle listener, uint64_t token, tl_op *op);

/* Connect a new TCP socket to addr (*addr is copied). deadline_ns
 * (absolute, tl_now() clock, 0 = none) ends a connect still pending with
 * -ETIMEDOUT, reported only after the native connect was acknowledged
 * cancelled. Sets *h (a stream handle, the host's to close; usable for
 * reads and writes submitted right away) and *op, whose terminal
 * TL_K_CONNECT has result 0 once connected. Returns as any submission
 * (-EINVAL: addr not IPv4/IPv6). */
int tl_tcp_connect(tl_loop *loop, const tl_addr *addr, uint64_t deadline_ns, uint64_t token,
		   tl_handle *h, tl_op *op);

/* How tl_tcp_connect_opts() sets up its socket before connecting. Zeroed:
 * as tl_tcp_connect. */
typedef struct tl_connect_opts {
	/* Bind here before connecting: sa_family 0 (AF_UNSPEC) for no bind,
	 * else the destination's family; port 0 lets the kernel pick one. */
	tl_addr source;
	/* Nonzero, with a source of port 0: IP_BIND_ADDRESS_NO_PORT, so the
	 * port is picked at connect for the whole 4-tuple instead of reserved
	 * at bind. Many connections from one source IP (a proxy's upstream
	 * side) then share local ports across destinations instead of
	 * exhausting and serialising on the local port table. */
	int bind_no_port;
	/* Nonzero: IP_FREEBIND, the source need not be an address of this
	 * host (yet). */
	int freebind;
	/* Nonzero: IP_TRANSPARENT (a transparent proxy's foreign source);
	 * needs CAP_NET_ADMIN (-EPERM). */
	int transparent;
	/* Stream options applied before connect(2), in order, so that the
	 * SYN already carries them (mark, traffic class, buffer sizes and
	 * the window they give): options a TCP stream takes. NULL with 0:
	 * none. */
	const tl_sockopt_val *sockopts;
	uint32_t nsockopts; /* <= TL_SOCKOPTS_MAX */
} tl_connect_opts;

/* tl_tcp_connect with the socket set up by opts first (NULL: none). 0 with
 * *h and *op set, or -EINVAL (addr not IPv4/IPv6; a source of another
 * family; bind_no_port, freebind or transparent without a source; a bad
 * option, value or list), -ENOBUFS (a table is full), -ENOTSUP (the driver
 * cannot set socket options), or the OS error of the setup (-EPERM for
 * transparent or a mark without the capability, -EADDRNOTAVAIL for a
 * source that is not local without freebind, -EADDRINUSE, ...). On the
 * simulation driver every address is local (freebind changes nothing) and
 * nothing needs a capability. */
int tl_tcp_connect_opts(tl_loop *loop, const tl_addr *addr, const tl_connect_opts *opts,
			uint64_t deadline_ns, uint64_t token, tl_handle *h, tl_op *op);
/* Connect a new Unix-domain stream socket to path (copied), as
 * tl_tcp_connect; a full listen queue or nobody listening is the
 * terminal's error (-EAGAIN, -ECONNREFUSED). Returns as any submission
 * (-EINVAL: path NULL, empty or too long for a socket address). */
int tl_unix_connect(tl_loop *loop, const char *path, uint64_t deadline_ns, uint64_t token,
		    tl_handle *h, tl_op *op);

/* Read once into buf[0..len) (buf not NULL, len > 0): a terminal TL_K_READ
 * with result = bytes, 0 with TL_F_EOF at end of stream. The three reads
 * below return as any submission, -EINVAL also while a splice is reading
 * h (tl_splice). */
int tl_read(tl_loop *loop, tl_handle h, void *buf, uint32_t len, uint64_t token, tl_op *op);
/* Read once into a pooled buffer lease: result = bytes, TL_F_LEASE and
 * u.read.lease when result > 0 (the host's until tl_lease_release). */
int tl_read_pooled(tl_loop *loop, tl_handle h, uint64_t token, tl_op *op);
/* Read repeatedly into pooled leases until EOF (terminal, result 0), stop,
 * cancel or an error: each read is a nonterminal TL_K_READ as for
 * tl_read_pooled. A shortage of leases pauses the read until some are
 * released; it is never reported. */
int tl_read_start(tl_loop *loop, tl_handle h, uint64_t token, tl_op *op);
/* Give lease id (u.read.lease.id, ...) back to the loop; its bytes are not
 * the host's any more. Returns 0, or -ENOENT if id is not an outstanding
 * lease (never issued, or given back already). */
int tl_lease_release(tl_loop *loop, uint32_t id);

/* Change the caps of one stream (or of a listener: the streams it accepts
 * from then on inherit them; or of a datagram handle, whose lease cap
 * bounds its pooled receives and whose sends count no write bytes;
 * contract 4.10, see tl_config.handle_leases): leases 0 or write_bytes 0
 * keep that cap. 0, -ENOENT (stale or foreign), -EINVAL (not a stream,
 * listener or datagram handle, closing, leases above the loop's
 * pooled buffers, write_bytes above 2^40). A stream already over a new cap
 * pauses at once; one under both resumes.
 *
 * The full-duplex deadlock, and how to avoid it. Writes queued on a stream
 * count against its write cap until they complete, and while they are at
 * or over it the stream reads nothing. If the stream queues more than its
 * cap and its peer, instead of reading, is itself writing (a tunnel, a
 * proxy, any protocol with both directions in flight), neither side's
 * writes can complete, since each waits for the other to read: both stop
 * for good. A stream that may write more than its cap at once while its
 * peer writes must do one of two things: raise the cap above the most it
 * ever has queued, with tl_handle_caps(loop, h, 0, bytes) on that stream
 * (on a listener: every stream it accepts) or with
 * tl_config.handle_write_bytes for the loop; or queue its writes in pieces
 * that together stay under the cap, queuing the next as one completes, so
 * that its reads never pause. A forwarder that writes what it read from
 * one stream to another has the same choice for the stream written to
 * (tlproxy raises the cap past its whole pool: its lease caps already
 * bound what it queues). */
int tl_handle_caps(tl_loop *loop, tl_handle h, uint32_t leases, uint64_t write_bytes);

/* Write all of buf[0..len) in submission order per handle (partial writes are
 * continued inside the loop): a terminal TL_K_WRITE with result = len.
 * Whatever the result, the terminal's u.write.written is how many of the
 * bytes reached the socket (a prefix; len on success). Returns as any
 * submission (-EINVAL: buf NULL with len > 0). */
int tl_write(tl_loop *loop, tl_handle h, const void *buf, uint32_t len, uint64_t token,
	     tl_op *op);
#define TL_IOV_MAX 8
/* Write every segment of iov[0..n) (1 <= n <= TL_IOV_MAX; the iovec array
 * is copied, the buffers are not), as tl_write: result = the bytes of all
 * segments. Returns as any submission (-EINVAL: iov NULL, n out of range,
 * a segment with a length and no base). */
int tl_writev(tl_loop *loop, tl_handle h, const tl_iovec *iov, int n, uint64_t token,
	      tl_op *op);
/*
 * Write what stream h's socket takes of buf[0..len) now, without an
 * operation: no completion follows, and buf is the caller's again when
 * the call returns. Order is kept: while h has a write, shutdown, splice
 * or connect queued, nothing is taken. Returns the bytes taken, 1..len
 * (fewer than len when the socket's buffer filled: write the rest with
 * tl_write), 0 when len is 0, -EAGAIN when none were taken (write them
 * with tl_write, which completes once the socket has room), or the error
 * a write's completion would carry (-EPIPE, -ECONNRESET, ...; reported
 * once, as there); -ENOENT (stale or foreign), -EINVAL (buf NULL with
 * len > 0, h not a stream, h closing), -ENOTSUP where the driver has no
 * such path (io_uring: its writes ride the turn's one io_uring_enter, and
 * which of a stream's are still in the ring is the ring's to know; DPDK).
 * Bytes taken are progress for h's idle deadline, as a write's completion
 * is. No callback runs inside it. Contract 4.4a (docs/DECISIONS.md).
 *
 * What it is for: a forwarder that writes each lease it read (a proxy)
 * gives the lease back at once instead of at a completion, and saves the
 * operation, its completion and the dispatch to its handler. Drivers that
 * have it send at once in tl_write too (TL_CAP_WRITE_AT_ONCE): the same
 * system call, less work around it (docs/PERFORMANCE.md).
 */
int64_t tl_try_write(tl_loop *loop, tl_handle h, const void *buf, uint32_t len);
/* Half-close the write side once all earlier writes are out: a terminal
 * TL_K_SHUTDOWN with result 0. Returns as any submission. */
int tl_shutdown(tl_loop *loop, tl_handle h, uint64_t token, tl_op *op);

/* ---- Socket control (contract 4.8; docs/SOCKETS.md) ---- */

/* Set option opt (enum tl_sockopt) of socket handle h to value, at once
 * (also while h's connect is pending). 0, -ENOENT (stale or foreign),
 * -EINVAL (opt unknown or not taken by h's kind, value out of range, h
 * closing), -ENOTSUP (the driver cannot set socket options), or the OS
 * error unchanged (-EPERM: TL_SO_MARK without the capability). */
int tl_sockopt_set(tl_loop *loop, tl_handle h, int opt, int64_t value);

/* Read option opt of h into *value: what the OS reports, which is not
 * always what was set. Linux reports TL_SO_RCVBUF / TL_SO_SNDBUF as twice
 * the value set (its bookkeeping overhead, counted in the buffer), after
 * clamping that value to net.core.rmem_max / wmem_max; it rounds
 * TL_SO_DEFER_ACCEPT up to its SYN-ACK retransmission schedule (1, 3, 7, 15,
 * 31, 63, 127, 247, ... seconds) and caps TL_SO_FASTOPEN at
 * net.core.somaxconn. Works until h's Closed (also while closing). 0,
 * -ENOENT, -EINVAL (value NULL, opt unknown or not taken by h's kind),
 * -ENOTSUP, or the OS error. */
int tl_sockopt_get(tl_loop *loop, tl_handle h, int opt, int64_t *value);

/* The peer address of a connected stream: accepted, or connected (its
 * TL_K_CONNECT arrived with 0). A Unix-domain peer is reported as
 * sa_family AF_UNIX and nothing else, as accept reports it. Works until h's
 * Closed. 0, -ENOENT (stale or foreign), -EINVAL (out NULL, h not a stream),
 * -EAGAIN while h's connect is pending (as tl_local_addr), -ENOTCONN (the
 * connect failed, or the connection was reset), -ENOTSUP, or another OS
 * error. */
int tl_peer_addr(tl_loop *loop, tl_handle h, tl_addr *out);

/* Like tl_close(h, token) (the same completions, rules and return codes),
 * but abortive: right before the OS object is released (when Closed is
 * handed out) the socket gets SO_LINGER {1, 0}, so the peer sees a reset
 * (-ECONNRESET) instead of an end of stream, and bytes not yet sent are
 * dropped: how a proxy passes a reset on. A Unix-domain stream has no
 * reset: its peer sees an end of stream, as after tl_close (or -ECONNRESET
 * if it had left bytes unread, as after tl_close too). Streams only:
 * -EINVAL for any other handle (and, as tl_close, when h is already
 * closing). */
int tl_close_abort(tl_loop *loop, tl_handle h, uint64_t token);

/* The OS descriptor of socket handle h, for what the typed calls do not
 * cover. The loop still owns it: never close, read, write or shut it down,
 * never change its O_NONBLOCK or O_CLOEXEC flags, and hand it to nobody who
 * might. setsockopt(2), getsockopt(2) and other queries (getsockname,
 * fstat, ...) are fine. It is valid until h's TL_K_CLOSED completion has
 * been returned by tl_turn(); after that the number may name anything.
 * Returns the descriptor (>= 0), -ENOENT (stale or foreign), -EINVAL (not
 * a socket handle: a timer, a process, ...), or -ENOTSUP when the driver's handles are no OS sockets (no
 * TL_CAP_OS: the simulation driver). */
int tl_handle_fd(tl_loop *loop, tl_handle h);

/* ---- Handing sockets over (contract 4.6; docs/SOCKETS.md) ---- */

/*
 * Adopt the socket descriptor fd into loop: socket activation, sockets
 * handed over by a restart, and the way back in for a descriptor that
 * tl_detach gave out (attaching it to another loop of this process, or of
 * another process that received it with tl_recv_fds, is tl_adopt). The
 * loop takes, and makes of it:
 *  - a listening TCP (IPv4, IPv6) or Unix-domain stream socket: a listener;
 *  - a connected TCP or Unix-domain stream socket: a stream (bytes already
 *    waiting in it are what its first read gets);
 *  - a UDP socket (IPv4, IPv6), bound or not: a datagram handle.
 * The kind is read from the socket (getsockopt SO_DOMAIN, SO_TYPE,
 * SO_PROTOCOL, SO_ACCEPTCONN; getpeername for a stream). The descriptor is
 * made non-blocking (O_NONBLOCK belongs to the open file, so other
 * descriptors of it, in other processes too, see it as well) and
 * close-on-exec. Its socket options stay as they are: an adopted TCP
 * stream keeps its TCP_NODELAY setting (tl_sockopt_set changes it).
 *
 * On success the loop owns fd, as if it had made the socket itself: it is
 * closed when the handle's Closed is handed out (or given back by
 * tl_detach), and the caller uses it only as tl_handle_fd allows. fd must
 * be the caller's to give: a descriptor that a loop still owns is not
 * (nothing can tell which descriptors another loop owns).
 *
 * Returns 0 and sets *out, or -EINVAL (out NULL, fd < 0, or a socket of a
 * kind the loop does not take: a stream socket neither listening nor
 * connected, such as one whose connect is still in progress or was reset;
 * a datagram socket that is not UDP; another family or type), -ENOTSOCK
 * (fd is no socket: a file, a pipe), -EBADF (fd is not open), -ENOBUFS
 * (the handle table is full), -ENOTSUP (no TL_CAP_OS: the simulation
 * driver's handles are no OS sockets), or the OS error of registering it.
 * On every error fd stays the caller's, open, with its flags as they were.
 * Setup, not steady state (contract 1.2): a few system calls; it allocates
 * no memory.
 */
int tl_adopt(tl_loop *loop, int fd, tl_handle *out);

/*
 * Detach socket handle h from loop and give its descriptor to the caller,
 * who owns it from then on (attach it to a loop with tl_adopt, pass it on
 * with tl_send_fds, or close it). The loop lets h go only once it holds
 * nothing more of it:
 *  - while h has operations whose terminal the driver has not reported,
 *    -EAGAIN, and each of them whose cancellation was not asked yet is
 *    cancelled now. As for tl_close, each delivers its own terminal
 *    (-ECANCELED; Stopped after tl_stop), and bytes a read had already
 *    taken off the socket come before it as ordinary read completions
 *    (contract 2.5).
 *  - while completions that name h are queued (not yet handed out by
 *    tl_turn), -EAGAIN.
 *  - then 0: *fd is the descriptor (still non-blocking and close-on-exec;
 *    what the kernel holds, unread bytes, queued connections, unsent
 *    bytes, stays in it), h is stale (-ENOENT) from now on, and no Closed
 *    completion follows.
 * So once it returns 0 every completion of h, and with them every byte the
 * loop took off the socket, has been handed out by tl_turn: a stream moved
 * this way loses nothing (a host that detaches h while it works through a
 * turn's completions finds the rest of h's there, later in the array).
 * Call it again after a turn until it returns 0. Writes
 * cancelled by it may have sent part of their bytes (as with tl_close),
 * as many as each terminal's u.write.written says: let a stream's writes
 * finish before detaching it when its peer must see a whole stream, or
 * have the rest sent from there by whoever takes the descriptor. A splice into h that was cancelled with bytes in its
 * pipe writes them first (tl_splice), and a splice reading h (its source)
 * is cancelled and waited for like h's own ops. Leases read from h stay
 * the host's to release; h's idle deadline (tl_idle_deadline) ends with
 * it: an adopted handle has none.
 * Returns 0, -ENOENT (stale or foreign), -EINVAL (fd NULL, not a socket
 * handle: a timer, a process, ...; h closing), -EAGAIN (see above), -ENOTSUP (no TL_CAP_DETACH: the
 * simulation driver). Setup, not steady state, as tl_adopt.
 */
int tl_detach(tl_loop *loop, tl_handle h, int *fd);

#define TL_FDS_MAX 16 /* descriptors one tl_send_fds / tl_recv_fds carries */

/*
 * Send descriptors fds[0..nfds) (1 <= nfds <= TL_FDS_MAX) over the
 * connected Unix-domain stream h as SCM_RIGHTS, with the payload
 * buf[0..len) (len >= 1: a stream carries descriptors only along with
 * bytes). A write: it joins h's write queue, in order with h's writes,
 * other sends and shutdown, writes every byte of buf (the descriptors go
 * with the first bytes that leave), and its terminal is TL_K_WRITE with
 * result = len. The fds array is copied at the call; the descriptors stay
 * the caller's (the receiver gets its own): keep each open until the
 * terminal, and close it whenever you like after. buf must stay valid
 * until the terminal, as for tl_write. Its bytes do not count against h's
 * write cap (tl_handle_caps). Cancel and close follow contract 2; a send
 * cancelled after it started has sent its descriptors and part of its
 * bytes. 0 and *op, or -EINVAL (op, fds or buf NULL, nfds or len out of
 * range, a descriptor < 0, h not a Unix-domain stream, h closing),
 * -ENOENT (stale or foreign), -ENOBUFS (op table full), -ENOTSUP (no
 * TL_CAP_DETACH). A descriptor that is not open is the terminal's -EBADF
 * (nothing was sent). Allocates nothing.
 */
int tl_send_fds(tl_loop *loop, tl_handle h, const int *fds, uint32_t nfds, const void *buf,
		uint32_t len, uint64_t token, tl_op *op);

/*
 * Receive once from the connected Unix-domain stream h into buf[0..len)
 * (len >= 1), and the descriptors sent with those bytes into fds (room for
 * cap, 1 <= cap <= TL_FDS_MAX). A read: it joins h's read queue, in order
 * with h's other reads. Its terminal is TL_K_READ with result = payload
 * bytes (0 with TL_F_EOF at end of stream) and aux = the number of
 * descriptors received, in fds[0..aux) (0 when those bytes carried none).
 * They are new descriptors of this process, close-on-exec
 * (MSG_CMSG_CLOEXEC), the host's to close or to tl_adopt.
 *
 * The descriptors of one tl_send_fds (or sendmsg) arrive with the receive
 * that reads the first bytes of its payload; that receive ends within that
 * payload, so one receive carries at most one send's descriptors (it may
 * read plain bytes sent before them). A protocol that sends a payload of a
 * known size with its descriptors and receives it with that len gets them
 * one message at a time. Descriptors sent to a plain tl_read are closed
 * by the kernel.
 *
 * When the bytes carry more descriptors than cap, or more than the kernel
 * could hand over (MSG_CTRUNC), every descriptor that arrived is closed and
 * the terminal is -EMSGSIZE; the payload bytes read with them are dropped
 * too, so treat the stream as broken. A receive cancelled (or its handle
 * closed) after the kernel had taken bytes and descriptors delivers them
 * first, as an ordinary nonterminal TL_K_READ completion as above
 * (contract 2.5): the host owns those descriptors, nothing leaks. The loop
 * closes the descriptors of a completion that it never hands out (the
 * completions tl_loop_destroy drops).
 *
 * buf and fds must stay valid until the terminal. Not paused by h's caps
 * (it takes no pooled lease). It is progress for h's idle deadline, which
 * ends it as any op of h; tl_read_deadline does not take it (-EINVAL). 0 and *op, or -EINVAL (op, fds or buf NULL,
 * len 0, cap out of range, h not a Unix-domain stream, h closing, a splice
 * reading h),
 * -ENOENT, -ENOBUFS (op table full), -ENOTSUP (no TL_CAP_DETACH).
 * Allocates nothing.
 */
int tl_recv_fds(tl_loop *loop, tl_handle h, int *fds, uint32_t cap, void *buf, uint32_t len,
		uint64_t token, tl_op *op);

/* ---- Deadlines without a timer per connection (contract 4.9) ----
 *
 * Both kinds live in one heap per loop, sized by tl_loop_new (no allocation,
 * no timer handle), and end an op the way tl_cancel does: its terminal is
 * -ETIMEDOUT instead of -ECANCELED, delivered only after the driver
 * acknowledged the cancellation, and bytes a read had already taken come
 * first as ordinary read completions (contract 2.5). A write it ends may
 * have been partly written, as with tl_cancel. The handle stays open and
 * usable. docs/DEADLINES.md has the rules with examples. */

/* Arm (idle_ns > 0, at most 2^62) or clear (0) the idle deadline of stream
 * h (a TCP or Unix connection). An idle period starts now, at every
 * progress of h, and when an op is submitted to h while none was pending
 * (or after a period lapsed); it ends idle_ns later. Progress is every
 * completion of an op of h that succeeded: a read that moved bytes or saw
 * the end of stream, a write (when it completes: a write that takes longer
 * than idle_ns ends even if its bytes trickle out), a shutdown or a
 * connect. A stream paused by its caps (tl_handle_caps) makes no read
 * progress. When a period ends, every op of h not already cancelled or
 * stopped ends with -ETIMEDOUT, each reported once; the period then lapses
 * and nothing more happens until the next submission or progress starts
 * another. A period that ends with nothing pending reports nothing. Arming
 * again replaces the duration and restarts the period. The times used are
 * the loop's clock readings at the turn that saw each event, never earlier
 * than the event: a deadline never fires early, and may fire late by as
 * long as the host spent between turns. Progress costs O(1) and reads no
 * clock. 0, -ENOENT (stale or foreign), -EINVAL (not a stream, closing,
 * idle_ns above 2^62). The deadline goes with the handle's Closed. */
int tl_idle_deadline(tl_loop *loop, tl_handle h, uint64_t idle_ns);

/* Give a pending read (tl_read, tl_read_pooled, tl_read_start or
 * tl_udp_recv) the absolute deadline deadline_ns (tl_now() clock; one in
 * the past acts at the next turn), replacing any it had, or clear it (0).
 * If the op has not ended by then it ends with -ETIMEDOUT. The deadline
 * does not move with data: a tl_read_start read ends at deadline_ns even
 * while bytes arrive, unless the host moves or clears it first (for a
 * limit on silence, use tl_idle_deadline). 0, -ENOENT (stale, foreign,
 * never issued, or already terminal), -EINVAL (op is not a read, whatever
 * its state), -EALREADY (its cancel, stop or timeout was already asked
 * for). */
int tl_read_deadline(tl_loop *loop, tl_op op, uint64_t deadline_ns);

/* ---- Splice: stream to stream and file to stream (contract 4.11) ---- */

/*
 * Move up to max bytes from stream src to stream dst through a pipe of the
 * loop's pool, without copying them to user space (TL_CAP_SPLICE;
 * docs/SPLICE.md). A splice is a write to dst whose bytes come from src: it
 * joins dst's write queue and runs in order with dst's writes, shutdown
 * and other splices. At the head of that queue it waits until src has
 * data and dst has room, takes what src has (at least one byte, at most
 * max and the pipe's size) and writes all of it to dst. Its one completion
 * (TL_K_SPLICE, terminal) has result = the bytes moved (> 0), or 0 with
 * TL_F_EOF when src had reached its end, or a negative errno (src's or
 * dst's: -ECONNRESET, -EPIPE, ...); u.splice.taken and u.splice.moved say
 * in every case how many bytes left src and how many of them reached dst.
 *
 * Until it has taken its bytes, the splice is src's reader: a read of src
 * (tl_read*, tl_recv_fds), or a splice from src to another stream,
 * submitted meanwhile is -EINVAL, as is a splice from a src that has a read
 * pending (splices from src to the same dst queue up, in order). The
 * splice is dst's op for deadlines too: its completion is progress for
 * dst's idle deadline, which ends it as it ends a write (below); src's
 * idle deadline neither sees nor ends it. Over one of src's caps the splice
 * waits like a read (tl_handle_caps); the bytes in its pipe count as
 * dst's queued write bytes.
 *
 * Cancel and close (contract 2), exactly one terminal in every case:
 *  - tl_cancel(op), or closing src: the splice takes nothing more from
 *    src. Bytes already in its pipe are still written to dst (waiting for
 *    room as a write does), then the terminal is -ECANCELED with
 *    taken == moved: nothing is lost. Closing src only waits for a splice
 *    that is still reading it: src's Closed does not wait for the flush.
 *  - closing dst (cancelled or not): as dst's queued writes, the splice
 *    ends at once with -ECANCELED; bytes in its pipe are dropped, and
 *    taken - moved says how many (tl_loop_stats.splice_dropped). dst's
 *    idle deadline does the same with -ETIMEDOUT (dst made no progress for
 *    that long: a flush would wait for ever); like every deadline it
 *    leaves alone a splice already cancelled, which closing dst ends.
 *  - tl_detach(src) cancels a splice still reading src and returns -EAGAIN
 *    until it ended; tl_detach(dst) waits (-EAGAIN) for the flush of a
 *    cancelled splice, so the bytes it took reach dst before the socket
 *    moves on.
 *
 * 0 with *op set, or -EINVAL (op NULL, max 0, src == dst, either not a
 * stream or closing, src being read as above), -ENOENT (a stale or foreign
 * handle), -ENOTSUP (the driver lacks TL_CAP_SPLICE), -ENOBUFS (no free
 * pipe in the pool: copy instead; counted in tl_loop_stats.pipe_refusals;
 * or the op table is full), or the OS error of creating a pipe (-EMFILE).
 */
int tl_splice(tl_loop *loop, tl_handle src, tl_handle dst, uint32_t max, uint64_t token,
	      tl_op *op);

/*
 * Send len bytes of the file file_fd, from offset off, to stream dst
 * without copying them to user space (sendfile(2); no pipe of the pool is
 * used). Like tl_splice, a write to dst: in order with its writes and
 * splices. file_fd stays the caller's and must stay open until the
 * terminal; the file's own offset is neither used nor moved. The file is
 * read on the loop's thread, so pages not in the page cache make the turn
 * wait for the disk: this is for hot static files (cold ones read through
 * the pool's file requests). The completion (TL_K_SPLICE, terminal) has
 * result = len, or fewer bytes with TL_F_EOF when the file ended first (0
 * with TL_F_EOF from its end on), or a negative errno (-EINVAL for a
 * file_fd sendfile(2) cannot read from, -EBADF, dst's error);
 * u.splice.moved is what reached dst, u.splice.taken the same. The bytes
 * not yet sent count as dst's queued write bytes. tl_cancel and closing
 * dst end it at once with -ECANCELED (u.splice.moved tells how far it
 * got).
 *
 * 0 with *op set, or -EINVAL (op NULL, len 0, file_fd < 0, off above
 * INT64_MAX, dst not a stream or closing), -ENOENT (a stale or foreign
 * handle), -ENOTSUP (no TL_CAP_SPLICE), -ENOBUFS (the op table is full).
 */
int tl_sendfile(tl_loop *loop, int file_fd, uint64_t off, uint32_t len, tl_handle dst,
		uint64_t token, tl_op *op);

/* ---- Waking and posting from other threads (contract section 8) ---- */

/* The loop's poster: a bounded multi-producer queue into the loop that any
 * thread may use; it also carries the notifier. The returned reference stays
 * valid after the loop is destroyed (posts then fail with -EPIPE) until
 * tl_poster_put(). tl_poster_get() never fails (the loop's thread). */
tl_poster *tl_poster_get(tl_loop *loop);
/* Drop a reference tl_poster_get() gave; the last one frees the poster.
 * Any thread; NULL is a no-op. */
void tl_poster_put(tl_poster *p);

/* Post (token, payload) into the loop: delivered as TL_K_POST, in order per
 * producer. 0, -ENOBUFS (full: nothing was queued), -EPIPE (loop gone). Any
 * thread. Wakes the loop with a system call only if it is parked. */
int tl_post(tl_poster *p, uint64_t token, uint64_t payload);

/* Wake the loop (its current or next turn returns without waiting). Costs a
 * system call only when the loop is parked; wakes are coalesced. Any thread.
 * 0 or -EPIPE. */
int tl_poster_wake(tl_poster *p);

/* From a loop whose post to p failed with -ENOBUFS: ask for one TL_K_ROOM
 * completion on `loop` once p's loop has drained it. Returns 0 and sets
 * *op, or -EINVAL (p or op NULL, p the loop's own poster), -ENOBUFS (a
 * waiter table, loop's cfg.room_waiters or p's, or loop's op table is
 * full), -EPIPE (p's loop is gone). */
int tl_post_wait_room(tl_loop *loop, tl_poster *p, uint64_t token, tl_op *op);

/* A descriptor that polls readable whenever the loop has work (for embedding
 * the loop in another event loop): call tl_turn(loop, 0, ...) when it does.
 * The loop owns the descriptor (never close it). Returns it (>= 0), or
 * -ENOTSUP without cfg.embed = 1 or when the driver lacks TL_CAP_EMBED. */
int tl_loop_fd(tl_loop *loop);

/* Per-loop counters, read from the loop's thread in constant time (no walk
 * over any table), so a runtime may publish them often. leases_out: pooled
 * buffers not in the free set (held by the host, or by the driver for a read
 * it has in flight). busy_ns/idle_ns: time in turns outside/inside the OS
 * wait, driver clock. */
typedef struct tl_loop_stats {
	uint64_t turns, os_waits, discovery_polls, zero_event_waits;
	uint64_t completions[TL_K_COUNT_];
	uint64_t wakes_sent, wakes_coalesced;
	uint32_t handles, ops, queued, timers, leases_out;
	uint32_t paused;          /* streams and datagram handles whose reads are paused by a cap now */
	uint64_t pauses;          /* times one went over a cap (contract 4.10) */
	uint64_t busy_ns, idle_ns;
	/* The splice pipe pool (tl_splice): pipes open now and how many of
	 * them splices hold; splices refused for want of a pipe (-ENOBUFS);
	 * pipes made smaller than cfg.pipe_size because the user was over the
	 * kernel's pipe budget; bytes splices took from a source and dropped
	 * because dst closed or failed. */
	uint32_t pipes, pipes_busy;
	uint64_t pipe_refusals, pipes_small, splice_dropped;
	/* Spinning before a park (tl_config.spin_ns): turns that spun, and
	 * of them those that found nothing and parked after all (or used up
	 * their wait). */
	uint64_t spins, spin_parks;
	/* Napping before a park (tl_config.nap_ns): turns that napped, and of
	 * them those that found nothing after the nap and parked after all. */
	uint64_t naps, nap_parks;
	/* A driver that owns a NIC (DPDK, docs/DPDK.md): frames its queue
	 * pair received and sent, frames it dropped (every reason: malformed,
	 * fragments, other protocols or hosts, no handle on the port, a
	 * handle's queue full), and TX bursts the ring took only part of (the
	 * rest waited: backpressure, not a drop). 0 on the other drivers. */
	uint64_t nic_rx, nic_tx, nic_drops, nic_tx_full;
	/* The same driver's hand-off between the port's queue pairs
	 * (docs/DPDK.md, "Hand-off between queue pairs"): datagrams this
	 * loop had no handle for and gave to the loop that has one,
	 * datagrams other loops gave this one, and datagrams dropped because
	 * a hand-off ring was full (these are in nic_drops too). Datagrams, not frames: a handed datagram was
	 * counted in nic_rx once, by the pair it came in on. 0 on the other
	 * drivers, and without a port shared by several loops. */
	uint64_t nic_handed_out, nic_handed_in, nic_handoff_drops;
} tl_loop_stats;
/* Copy the loop's counters into *out (the loop's thread; out not NULL). */
void tl_loop_stats_get(const tl_loop *loop, tl_loop_stats *out);

#ifdef __cplusplus
}
#endif

/* The datagram calls (tl_udp_*) moved to turnloop/dgram.h; loop.h still
 * brings them in for one release (turnloop.h, "Deprecated names"). */
#include "turnloop/dgram.h"
#endif
