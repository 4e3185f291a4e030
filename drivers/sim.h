/* drivers/sim.h: internal controls of the simulation driver (faults, trace, stats) for tests. */
#ifndef TL_SIM_H
#define TL_SIM_H

#include <stdint.h>
#include "turnloop/loop.h"

/*
 * The simulation driver (drivers/sim/) runs loops in virtual time over an
 * in-memory network shared by every sim loop of the process. Every random
 * choice it makes (delivery latency, partial reads and writes, which
 * SO_REUSEPORT listener gets a connection, whether a write completes inside
 * submit, whether a cancellation is acknowledged at once or later, and every
 * injected fault) comes from one PRNG per loop, seeded from the config's
 * sim_seed (or $TL_SIM_SEED) and the loop's creation order. A single-threaded
 * program therefore replays exactly from its seed.
 *
 * Knobs are probabilities in [0, 1], drawn once per decision point. Two kinds:
 *  - scheduling (never an error; on by default so that the contract suite
 *    exercises partial I/O and asynchronous cancellation): short_io,
 *    sync_write, async_cancel;
 *  - faults (errors; all 0 by default): the rest. Each one names the
 *    decision where it is drawn and the error a host sees.
 *
 * $TL_SIM_FAULTS sets knobs for every new sim loop, as a comma-separated
 * list of name=value: "accept_emfile=0.01,short_io=0.3,latency_us=100".
 */
enum tl_sim_knob {
	/* connect (TCP or Unix) to a live listener: terminal -ECONNREFUSED. */
	TL_SIM_CONNECT_REFUSED = 0,
	/* each chunk a stream write moves: the connection is reset instead;
	 * the write and the peer's next read or write see -ECONNRESET. */
	TL_SIM_RESET,
	/* a stream closed by its host resets the peer (-ECONNRESET) instead of
	 * giving it EOF. */
	TL_SIM_CLOSE_RESET,
	/* (scheduling) a stream read returns fewer whole segments than are
	 * buffered (a segment is what one write moved, as TCP delivers), or a
	 * write longer than one MSS (1448 bytes) moves a shorter count first. */
	TL_SIM_SHORT_IO,
	/* each connection an accept would take: -EMFILE / -ENOMEM / -ENOBUFS
	 * instead (terminal for tl_accept, nonterminal for accept_start, which
	 * retries later); the connection stays queued. */
	TL_SIM_ACCEPT_EMFILE,
	TL_SIM_ACCEPT_ENOMEM,
	TL_SIM_ACCEPT_ENOBUFS,
	/* each submission (accept, connect, read, write, shutdown, send, recv):
	 * refused with -ENOMEM / -ENOBUFS (nothing happened, nothing is owed). */
	TL_SIM_SUBMIT_ENOMEM,
	TL_SIM_SUBMIT_ENOBUFS,
	/* each socket creation (listen, connect, udp_bind): -EMFILE. */
	TL_SIM_OPEN_EMFILE,
	/* each delivery (bytes, EOF, connection, datagram): it takes slow_us
	 * longer, a slow peer or a congested path. */
	TL_SIM_SLOW,
	/* each datagram sent: it is lost (the send still succeeds). */
	TL_SIM_UDP_DROP,
	/* each cancel() the core asks for: refused with -EAGAIN (the core
	 * reports it, and retries connect deadlines on the next turn). */
	TL_SIM_CANCEL_FAIL,
	/* (scheduling) a write, shutdown or send submitted to an idle queue runs
	 * inside submit() instead of at the next poll. */
	TL_SIM_SYNC_WRITE,
	/* (scheduling) a cancellation is acknowledged later, from poll(), as
	 * io_uring does, instead of inside cancel(); half of those race: the op
	 * runs once more first, as if nothing was asked (the core then drops
	 * its events, except a read's bytes, which it delivers before the
	 * terminal: contract 2.5). */
	TL_SIM_ASYNC_CANCEL,
	/* each datagram sent that is not lost: it arrives twice. */
	TL_SIM_UDP_DUP,
	/* each datagram sent that is not lost: it overtakes every datagram
	 * already waiting at the receiver. */
	TL_SIM_UDP_REORDER,
	TL_SIM_NKNOBS
};

struct tl_sim_faults {
	double p[TL_SIM_NKNOBS];
	uint32_t latency_us; /* each delivery takes 0..latency_us (default 20) */
	uint32_t slow_us;    /* extra latency of a TL_SIM_SLOW delivery (default 50000) */
	uint32_t rcvbuf;     /* receive buffer per socket, bytes (default 65536, >= 64) */
	/* Virtual time a poll that does not wait costs (default 5000): a loop
	 * that always has work, or spins on zero-timeout turns, still sees
	 * time pass and deliveries arrive. */
	uint32_t poll_ns;
	/* While another party holds a reference to the loop's poster (it may
	 * post from another thread), a virtual wait first waits this long in
	 * real time (bounded by the timeout) for a wake, so that threads get to
	 * run while the loop "waits" (default 1000; 0: never). Alone on its
	 * thread, the wait always runs out and advances the clock by exactly its
	 * length: the run stays deterministic, only slower. */
	uint32_t shared_wait_us;
};

/* Counters of what the simulation did for one loop. */
struct tl_sim_stats {
	uint64_t injected[TL_SIM_NKNOBS]; /* decisions that came out "yes" */
	uint64_t events;                  /* events reported to the core */
	uint64_t runs;                    /* scheduled socket runs */
	uint64_t advanced_ns;             /* virtual time this loop skipped */
	uint64_t real_waits;              /* polls that waited on the wake eventfd */
};

/* The name of a knob as TL_SIM_FAULTS spells it ("accept_emfile"). */
const char *tl__sim_knob_name(enum tl_sim_knob k);
/* The defaults: every fault 0, short_io 0.25, sync_write 0.5,
 * async_cancel 0.5, latency_us 20, slow_us 50000, rcvbuf 65536, poll_ns 5000,
 * shared_wait_us 1000. */
void tl__sim_faults_default(struct tl_sim_faults *f);
/* Apply a "name=value,..." spec on top of *f. 0, or -EINVAL naming the bad
 * entry on stderr (nothing is changed then). */
int tl__sim_faults_parse(struct tl_sim_faults *f, const char *spec);

/* Replace the knobs of a sim loop (from its thread). 0, -EINVAL (a value out
 * of range), -ENOTSUP (not a sim loop). */
int tl__sim_set_faults(tl_loop *loop, const struct tl_sim_faults *f);
int tl__sim_get_faults(tl_loop *loop, struct tl_sim_faults *out);

/* A 64-bit FNV-1a hash of every event the driver reported to the core, with
 * its virtual time: equal for two runs of the same program and seed. 0 for a
 * loop that is not a sim loop. */
uint64_t tl__sim_trace(tl_loop *loop);
/* The seed the loop's PRNG started from (after $TL_SIM_SEED and the loop's
 * creation order were mixed in), for messages. */
uint64_t tl__sim_seed(tl_loop *loop);
int tl__sim_stats(tl_loop *loop, struct tl_sim_stats *out);

#endif
