/* drivers/uring.h: diagnostic and test hooks of the io_uring driver (internal, never installed). */
#ifndef TL_URING_H
#define TL_URING_H

#include <stdint.h>
#include "turnloop/loop.h"

/* What one loop's io_uring instance did, for tests and tuning. */
struct tl_uring_stats {
	uint32_t sq_entries, cq_entries; /* ring sizes the kernel granted */
	uint32_t buf_entries;            /* provided-buffer ring size */
	uint64_t enters;           /* io_uring_enter calls made by poll() */
	uint64_t sq_full_flushes;  /* submissions forced because the SQ was full */
	uint64_t overflow_flushes; /* enters made to pull overflowed CQEs in */
	uint64_t room_stops;       /* reaps stopped with CQEs left for the next turn */
	uint64_t rearms;           /* multishot accepts the kernel ended and we re-armed */
	/* Stream reads (drivers/uring/read_policy.h says when each happens): */
	uint64_t deferred_reads;   /* issued one poll late, the host having answered */
	uint64_t fed_reads;        /* turned to armed recvs for good, the host not having
				    * answered */
	uint64_t read_tries_missed; /* tries (recvs into a lease of ours) that found no data */
	uint64_t slow_reads;       /* turned to armed recvs because their tries kept missing */
	uint64_t slow_retries;     /* such reads back to tries, their peer fast again */
	uint64_t enobufs;          /* reads parked because the buffer ring was empty */
	uint64_t pool_waits;       /* reads parked because their stream had its share of
				    * the pool and the surplus was gone (lib/caps.c) */
	uint64_t cancels;          /* IORING_OP_ASYNC_CANCEL requests issued */
	uint64_t kernel_acks;      /* ops ended by their own CQE after a cancel targeted them */
	uint64_t short_sends;      /* sends that moved fewer bytes than asked */
	uint64_t gathered;         /* write ops that shared a send with the op before them */
	uint64_t inline_shutdowns; /* half-closes made by shutdown(2) at the write queue's head */
	uint64_t fs_native;        /* typed file requests (tl_fs_*) run as io_uring opcodes */
	uint64_t fs_open_closed;   /* native opens that succeeded after their cancellation:
				    * the driver closed the descriptor */
	uint64_t splice_polls;     /* IORING_OP_POLL_ADDs splices waited in (uring/splice.c) */
	uint64_t splice_ins;       /* splice(2) calls that took bytes from a source */
};

/* Overrides for loops created afterwards, process-wide (tests only; not
 * thread-safe against concurrent tl_loop_new). Zero fields keep the default.
 * NULL restores every default. */
struct tl_uring_debug {
	uint32_t sq_entries, cq_entries;
	uint32_t extra_flags; /* setup flags tried first (e.g. an unknown bit, to see it dropped) */
	int no_waitall;       /* send without MSG_WAITALL: every short send comes back to us */
	int no_fs_native;     /* typed file requests stay on the blocking pool (tests that
			       * need a worker blocked inside a system call) */
};
void tl__uring_debug(const struct tl_uring_debug *dbg);

/* The IORING_SETUP_* flags the kernel accepted for loop's ring, and (through
 * dropped, may be NULL) those it refused and the driver gave up. 0 when loop
 * does not run on io_uring. */
uint32_t tl__uring_flags(const tl_loop *loop, uint32_t *dropped);

/* Copy loop's counters: 0, or -ENOTSUP when loop does not run on io_uring. */
int tl__uring_stats(const tl_loop *loop, struct tl_uring_stats *out);

#endif
