/* drivers/sim/sim_int.h: the simulation driver's private structures, seen only by its own files. */
#ifndef TL_SIM_INT_H
#define TL_SIM_INT_H

#include <stdatomic.h>
#include <stdint.h>
#include "driver.h"
#include "os.h" /* the world lock; struct sockaddr_un */
#include "heap.h"
#include "sim.h"

/*
 * The world. Every sim loop of the process shares one network (a registry of
 * bound listeners and datagram sockets, and the connections between them) and
 * one virtual clock. Both are guarded by one recursive mutex: loops on
 * different threads can talk to each other, and the driver's entry points may
 * nest (a lease dropped by the core inside poll() comes back through
 * lease_returned()). The world resets (clock, ports, creation order) when its
 * last loop goes away, so consecutive tests in one process each start from the
 * same state and replay alike.
 *
 * Time. The clock starts at SIM_T0 and moves only inside poll(). A poll that
 * does not wait costs poll_ns (busy loops and zero-timeout spinning still see
 * time pass and deliveries arrive). A poll that may wait and finds nothing due
 * jumps to the loop's next scheduled event, or by the whole timeout when there
 * is none; no real time passes. With no timeout and nothing scheduled the
 * loop really blocks on the core's wake eventfd, so posts and sim traffic from
 * other threads still wake it. While another party holds the loop's poster
 * (it may post from another thread), a jump is preceded by a short real wait
 * (shared_wait_us) so that such threads get to run.
 *
 * Scheduling. A socket whose state changes (bytes arrived, room freed, a
 * connection queued, EOF, reset, an op submitted or cancelled) is scheduled to
 * run on its owner loop at now + a seeded delivery latency; the owner's poll()
 * runs due sockets in (time, sequence) order, each running its write queue,
 * then its read queue, in submission order per direction, as the epoll driver
 * does. Bytes are copied into the peer's bounded receive buffer at once; the
 * latency only delays when the peer notices. Partial I/O follows TCP: a short
 * read ends on a write's boundary, a short write moves at least one MSS.
 *
 * Determinism. Every choice is drawn from the acting loop's PRNG (splitmix64),
 * seeded from sim_seed ($TL_SIM_SEED wins) and the loop's creation order; no
 * choice depends on real time, addresses or thread timing. One thread, one
 * seed: one run, and tl__sim_trace() proves it.
 */


#define SIM_T0 (1000ull * 1000000000ull) /* virtual time of a fresh world: 1000 s */
#define PORT_LO 32768
#define PORT_HI 60999
#define UDP_MAX 65507
#define CONN_PENDING 1 /* conn_res before the connect's outcome is known */
#define SIM_MSS 1448   /* a short write still moves one segment's worth */
#define SEGS 16        /* write boundaries a receive ring remembers */
#define FNV_OFF 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

enum { SK_FREE = 0, SK_LISTEN, SK_STREAM, SK_UDP };
/* Stream connection states. */
enum { CS_NEW = 0, CS_WAITING, CS_CONNECTED, CS_FAILED };

struct sim_sock {
	uint8_t type, cs;
	uint8_t is_unix, reuseport, v6only;
	uint8_t rd_eof;    /* nothing more will arrive: EOF once the buffer is read */
	uint8_t wr_shut;   /* our write side is shut down */
	uint8_t broken;    /* reset: writes fail with EPIPE from now on */
	uint8_t lease_wait;
	uint8_t in_accq;   /* a server socket on its listener's accept queue */
	uint8_t src_bound; /* a stream to connect: local holds the source it was bound to */
	uint8_t aborting;  /* released by tl_close_abort: the peer is reset */
	uint8_t dg_conn;   /* a datagram socket connected to remote (tl_udp_connect) */
	int err;           /* a pending error, reported once by the next read or write */
	int conn_res;      /* the connect's outcome: CONN_PENDING, 0 or -errno */
	struct tl_drv *d;  /* owner */
	uint32_t idx, hidx, next_free;
	struct sim_sock *peer;
	struct sim_sock *listener;     /* while waiting for, or queued on, a listener */
	struct sim_sock *qnext, *qprev;/* on a listener's accept queue or wait list */
	struct sim_sock *reg_next;     /* the world's registry of bound sockets */
	/* listeners */
	struct sim_sock *acc_head, *acc_tail, *wait_head, *wait_tail;
	uint32_t acc_n, backlog;
	tl_addr local, remote;
	/* Socket options as tl_sockopt_get reports them (enum tl_sockopt):
	 * kept and reported the way Linux reports them, their effects not
	 * modelled (see drivers/sim/driver.c). */
	uint32_t so[TL_SO_COUNT_];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* receive ring: stream bytes, or datagram records (struct dg_hdr + bytes) */
	uint8_t *buf;
	uint32_t bufcap, cap, head, len, ndgram;
	/* Stream segments in the ring: what each write put there. A short read
	 * ends on a segment boundary, as TCP delivers; beyond SEGS, new
	 * segments coalesce into the last one, as TCP does too. */
	uint32_t seg[SEGS];
	uint8_t segh, segn;
	/* op queues, oldest first (linked through the ops' drv words) */
	uint32_t rhead, rtail, whead, wtail;
	uint32_t spl;      /* a splice waiting to read this socket (splice.c), TL_NIL */
};

struct dg_hdr {
	uint32_t len;
	tl_addr from;
	tl_addr to; /* the address it was sent to (packet info) */
};

struct sim_o {
	uint32_t qnext;
	uint32_t cancel; /* CX_*: cancellation asked, acknowledgement pending */
};

/* An asynchronous cancellation is acknowledged by the next run of the socket
 * (CX_ACK), or races: the op runs once more as if nothing was asked, then the
 * run after acknowledges it (CX_RACE), as io_uring completions that were in
 * flight when the cancel request went in. */
enum { CX_NONE = 0, CX_ACK, CX_RACE };
_Static_assert(sizeof(struct sim_o) <= sizeof(((struct tl_opslot *)0)->drv), "sim_o fits");

struct tl_drv {
	tl_loop *loop;
	tl__os_notifier *wake; /* the loop's notifier */
	uint32_t order;
	uint64_t seed, rng, trace, seq;
	struct tl_sim_faults f;
	struct tl_sim_stats st;
	struct sim_sock *socks;
	uint32_t nsocks, sfree;
	uint32_t nqueued, maxqueued; /* server sockets on accept queues, and their cap */
	struct tl_heap sched; /* sockets to run, by (virtual time, sequence) */
	uint32_t *lwait, nlwait;
	uint8_t **pipes;      /* splice pipes by pool slot, made on first use (splice.c) */
	uint32_t npipes;
};

/* The world every sim loop of the process shares (see above). */
struct tl__sim_world {
	tl__os_rmutex mu;
	_Atomic uint64_t clock;
	uint32_t nloops, created, next_port;
	struct sim_sock *bound;
};
extern struct tl__sim_world tl__sim_w;

static inline void lock(void) { tl__os_rmutex_lock(&tl__sim_w.mu); }
static inline void unlock(void) { tl__os_rmutex_unlock(&tl__sim_w.mu); }

static inline uint64_t now_ns(void)
{
	return atomic_load_explicit(&tl__sim_w.clock, memory_order_acquire);
}

static inline void advance(uint64_t t)
{
	uint64_t c = now_ns();
	while (c < t && !atomic_compare_exchange_weak(&tl__sim_w.clock, &c, t))
		;
}


static inline struct sim_o *SO(struct tl_opslot *o) { return (struct sim_o *)o->drv; }

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ || o->code == TL_OP_RECV;
}

/* Shared between the driver's files (each defined in one of them). */
int tl__sim_faults_valid(const struct tl_sim_faults *f);
uint32_t tl__sim_below(struct tl_drv *d, uint32_t n);
int tl__sim_draw(struct tl_drv *d, enum tl_sim_knob k);
void tl__sim_hash_u64(struct tl_drv *d, uint64_t v);
void tl__sim_report(struct tl_drv *d, struct tl_opslot *o, int64_t res, uint32_t flags,
		   uint32_t lease);
void tl__sim_sched_at(struct tl_drv *a, struct sim_sock *s, uint64_t at);
void tl__sim_sched(struct tl_drv *a, struct sim_sock *s);
struct sim_sock *tl__sim_sock_new(struct tl_drv *d, uint8_t type);
void tl__sim_sock_free(struct sim_sock *s);
int tl__sim_ring_init(struct sim_sock *s);
void tl__sim_seg_add(struct sim_sock *s, uint32_t n);
void tl__sim_seg_take(struct sim_sock *s, uint32_t n);
uint32_t tl__sim_seg_prefix(const struct sim_sock *s, uint32_t k);
void tl__sim_ring_put(struct sim_sock *s, const void *src, uint32_t n);
void tl__sim_ring_get(struct sim_sock *s, void *dst, uint32_t n);
uint16_t tl__sim_port_of(const tl_addr *a);
void tl__sim_set_port(tl_addr *a, uint16_t p);
int tl__sim_ip_any(const tl_addr *a);
tl_addr tl__sim_dest_of(const tl_addr *a);
tl_addr tl__sim_as_family(const tl_addr *a, int family);
tl_addr tl__sim_unmapped(const tl_addr *a);
void tl__sim_so_defaults(struct sim_sock *s);
int tl__sim_pick_port(uint8_t type);
void tl__sim_reg_add(struct sim_sock *s);
int tl__sim_bind_ip(struct sim_sock *s, const tl_addr *addr, int reuseport, int v6only);
struct sim_sock *tl__sim_find_listener(struct tl_drv *a, const tl_addr *dst, const char *path);
struct sim_sock *tl__sim_find_udp(const tl_addr *dst);
/* Put n bytes before what the ring holds (a datagram record that
 * overtakes the others); the room is the caller's to check. */
void tl__sim_ring_put_front(struct sim_sock *s, const void *src, uint32_t n);
void tl__sim_q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o);
int tl__sim_q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o);
int tl__sim_q_has(tl_loop *l, uint32_t head, const struct tl_opslot *o);
void tl__sim_list_append(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s);
void tl__sim_list_unlink(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s);
void tl__sim_abort_side(struct tl_drv *a, struct sim_sock *s, int err);
void tl__sim_reset_conn(struct tl_drv *a, struct sim_sock *s);
int tl__sim_can_establish(const struct sim_sock *L);
int tl__sim_establish(struct tl_drv *a, struct sim_sock *L, struct sim_sock *c);
void tl__sim_promote(struct tl_drv *a, struct sim_sock *L);
void tl__sim_close_sock(struct tl_drv *a, struct sim_sock *s);
void tl__sim_ack_cancel(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o);
void tl__sim_run_queue(struct tl_drv *d, struct sim_sock *s, uint32_t *head, uint32_t *tail);
int64_t tl__sim_try_write(struct tl_drv *d, struct sim_sock *s, const void *buf, uint32_t len);
void tl__sim_run_due(struct tl_drv *d, uint64_t now);
/* splice.c */
int tl__sim_run_splice(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o);
void tl__sim_splice_wake(struct tl_drv *d, struct sim_sock *s);
int tl__sim_splice_cancel(struct tl_drv *d, struct sim_sock *s, struct tl_hslot *h,
			  struct tl_opslot *o);
void tl__sim_splice_unpark(struct tl_drv *d, struct tl_opslot *o);

#endif
