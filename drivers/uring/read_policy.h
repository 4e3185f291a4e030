/* drivers/uring/read_policy.h: how an io_uring stream read chooses its next request (a try into a lease of ours, or a recv armed in the kernel) and when: one state machine, one pure function. */
#ifndef TL_READ_POLICY_H
#define TL_READ_POLICY_H

#include <stdint.h>

/*
 * The policy of stream reads (tl_read_start on a stream; the core makes
 * them pooled and repeating). The driver tells it what happened (an event)
 * and does what it answers (an act); tl__rp_step touches neither the ring
 * nor the driver, and tests/test_read_policy.c replays it without either.
 * This is the one place the policy is explained.
 *
 * Every request takes at most one pooled buffer. That is what keeps a
 * stream within its lease cap by construction (lib/caps.c): the driver
 * issues a stream's next request only while the stream holds fewer leases
 * than its cap, and a request can add one lease at most. A multishot
 * receive cannot promise that: it goes on taking buffers from the shared
 * ring until the driver's cancel lands, and the kernel's limits on one
 * (IORING_OP_RECV's per-receive length in sqe->len and total byte limit in
 * sqe->optlen, Linux 6.17) bound bytes, not buffers: a peer that sends
 * while the receive drains makes it take a buffer per short receive, as
 * many as it likes below the byte limit. So stream reads are never
 * multishot; each request is one of two kinds:
 *  - a try: a recv with MSG_DONTWAIT into a lease the driver picks, which
 *    usually completes inline, with neither a parked poll nor the kernel's
 *    buffer selection, and comes back -EAGAIN when the socket is empty;
 *  - an armed recv: buffer selection from the provided-buffer ring, so the
 *    recv holds no buffer while it waits in the kernel (an idle stream
 *    holds none) and completes when data comes. When the socket is known
 *    to be empty (the last recv ended short, or a try missed) it is armed
 *    with IORING_RECVSEND_POLL_FIRST, which skips the recv the kernel would
 *    otherwise try first and find nothing.
 *
 * One request per message while the host answers (TRY, WAIT, HELD). A
 * recv that ended with less than a full buffer is HELD until the start of
 * the next poll, when the driver sees what the host did with the data:
 *  - it wrote on the same stream (an answer: echo, RPC, HTTP). The peer's
 *    next message cannot come before it has the answer, so a recv issued
 *    at once would find the socket empty and park a poll. The read is
 *    deferred one poll instead (DEFER: issued after the answer's send) as
 *    a try (TRY). The poll that defers a read never blocks, so the try is
 *    in the kernel a turn later whatever becomes of the write;
 *  - it did not (a proxy's stream, a one-way feed): the read is FED for
 *    good, an armed recv issued at once after each message, so it is in
 *    the kernel before the next one comes.
 * A recv that filled its buffer means more is waiting: it goes again at
 * once, as a try (FED and SLOW reads: armed, without poll-first). A new
 * read starts as a try (data may be waiting).
 *
 * Slow peers. A try that misses (-EAGAIN) costs a CQE, a second request
 * (WAIT: an armed recv) and a poll of latency. A peer slower than the
 * loop's turns (a loaded client, a person, a long path) makes tries miss,
 * and its messages are best caught by recvs armed ahead of them: no miss
 * to come back for, and the kernel completes armed recvs in the order
 * their messages arrive, so the peer's streams are answered first come,
 * first served (tries complete in the order they were issued, which
 * reorders a slow client's streams and stretches its tail latency). So a
 * read keeps a score: a new read has TL_RP_SCORE_NEW (its first try may
 * well miss), a hit gains 1 up to TL_RP_SCORE_MAX, a miss loses
 * TL_RP_SCORE_MISS, and below TL_RP_SCORE_MISS the read is SLOW: armed
 * recvs, each issued at once after the last message. That takes a run of
 * misses (seven in a row from the start): a fast peer's misses come in
 * short bursts (a scheduling hiccup), and reads that switched on those
 * switched back and forth, each switch costing misses of its own.
 *
 * The peer may catch up. A SLOW read's message is fast (NEAR) when it comes
 * within TL_RP_FAST_GAP polls of the poll that sent the stream's last
 * answer (a try goes one poll after it). After TL_RP_FAST_RUN fast
 * messages in a row the read answers the host like a new one again (TRY,
 * with TL_RP_SCORE_START): the message's own end decides what follows, as
 * for any try (a short one is HELD, and deferred if answered).
 *
 * Embedded loops read FED from the start: their host polls the ring's
 * descriptor, and a read held or deferred to a later poll would leave
 * nothing to make it readable.
 *
 * The host's own cancellation, the stream's caps and a shortage of buffers
 * are not the policy's business: the driver ends a cancelled read instead
 * of issuing it again, and parks a request its stream may not make yet
 * (lib/caps.c) whatever the act.
 */

#define TL_RP_SCORE_START 24 /* after a SLOW read's peer caught up */
#define TL_RP_SCORE_MISS 4   /* lost per missed try; below it: SLOW */
#define TL_RP_SCORE_MAX 32   /* a hit gains 1 up to this */
#define TL_RP_SCORE_NEW (TL_RP_SCORE_START + TL_RP_SCORE_MISS) /* a new read */
#define TL_RP_FAST_RUN 16    /* fast messages in a row that end a SLOW read's slowness */
#define TL_RP_FAST_GAP 2     /* polls after the last answer's within which a message is fast */

/* What the read's next request is. */
enum tl_rp_mode {
	TL_RP_OFF = 0, /* not a repeating stream read: one request per op, no policy */
	TL_RP_TRY,     /* one request per message; the next one a try, into a lease of ours */
	TL_RP_WAIT,    /* one request per message; the next one armed, after a miss */
	TL_RP_HELD,    /* its recv ended short: waits for the next poll to see an answer */
	TL_RP_FED,     /* armed recvs, each issued after the last message, for good */
	TL_RP_SLOW,    /* armed recvs because its tries kept missing */
	TL_RP_MODES_
};

/* What happened to the read. */
enum tl_rp_event {
	TL_RP_EV_HIT,        /* a try found data (the data's own event follows) */
	TL_RP_EV_MISS,       /* a try found the socket empty */
	TL_RP_EV_SHORT,      /* a recv ended with less than a full buffer */
	TL_RP_EV_FULL,       /* a recv filled its buffer */
	TL_RP_EV_ANSWERED,   /* next poll: the host wrote on the stream (HELD) */
	TL_RP_EV_UNANSWERED, /* next poll: it did not (HELD) */
	TL_RP_EV_NEAR,       /* a SLOW read's message, fast (see tl__rp_gap; its end follows) */
	TL_RP_EV_FAR,        /* a SLOW read's message, not fast (its end follows) */
	TL_RP_EVENTS_
};

/* What the driver does. */
enum tl_rp_act {
	TL_RP_GO_ON = 0, /* nothing: another event of the same message follows */
	TL_RP_ISSUE,     /* issue the next request now (start list) */
	TL_RP_HOLD,      /* hold the read until the next poll (later list) */
	TL_RP_DEFER,     /* issue it at the next poll, which must not block (defer list) */
};

struct tl_rp {
	uint8_t mode;  /* enum tl_rp_mode */
	uint8_t score; /* TRY, WAIT, HELD: how its tries have been doing */
	uint8_t fast;  /* SLOW: fast messages in a row */
	uint8_t pf;    /* WAIT, FED, SLOW: arm the next recv poll-first (socket empty) */
};

struct tl_rp_step {
	struct tl_rp rp; /* the new state */
	uint8_t act;     /* enum tl_rp_act */
};

/* A new repeating stream read's state; embedded: on an embedded loop. */
static inline struct tl_rp tl__rp_new(int embedded)
{
	if (embedded)
		return (struct tl_rp){.mode = TL_RP_FED};
	return (struct tl_rp){.mode = TL_RP_TRY, .score = TL_RP_SCORE_NEW};
}

/* The event for a SLOW read's message that came `polls` polls after the
 * one that sent the stream's last answer. */
static inline enum tl_rp_event tl__rp_gap(uint32_t polls)
{
	return polls > TL_RP_FAST_GAP ? TL_RP_EV_FAR : TL_RP_EV_NEAR;
}

/* Whether mode's next request is a try (else an armed recv). */
static inline int tl__rp_try(uint8_t mode)
{
	return mode == TL_RP_TRY;
}

/* The policy: the state after ev in state s, and what the driver does. An
 * event that cannot happen in s's mode leaves s as it is, with TL_RP_GO_ON. */
static inline struct tl_rp_step tl__rp_step(struct tl_rp s, enum tl_rp_event ev)
{
	struct tl_rp_step r = {s, TL_RP_GO_ON};
	switch (s.mode) {
	case TL_RP_TRY:
	case TL_RP_WAIT:
		if (ev == TL_RP_EV_HIT && s.mode == TL_RP_TRY) {
			if (r.rp.score < TL_RP_SCORE_MAX)
				r.rp.score++;
		} else if (ev == TL_RP_EV_MISS && s.mode == TL_RP_TRY) {
			r.rp.score = s.score > TL_RP_SCORE_MISS ? s.score - TL_RP_SCORE_MISS : 0;
			r.rp.mode = r.rp.score < TL_RP_SCORE_MISS ? TL_RP_SLOW : TL_RP_WAIT;
			r.rp.fast = 0;
			r.rp.pf = 1;
			r.act = TL_RP_ISSUE;
		} else if (ev == TL_RP_EV_SHORT) {
			r.rp.mode = TL_RP_HELD;
			r.act = TL_RP_HOLD;
		} else if (ev == TL_RP_EV_FULL) {
			r.rp.mode = TL_RP_TRY;
			r.act = TL_RP_ISSUE;
		}
		break;
	case TL_RP_HELD:
		if (ev == TL_RP_EV_ANSWERED) {
			r.rp.mode = TL_RP_TRY;
			r.act = TL_RP_DEFER;
		} else if (ev == TL_RP_EV_UNANSWERED) {
			r.rp.mode = TL_RP_FED;
			r.rp.pf = 1;
			r.act = TL_RP_ISSUE;
		}
		break;
	case TL_RP_SLOW:
	case TL_RP_FED:
		if (ev == TL_RP_EV_SHORT || ev == TL_RP_EV_FULL) {
			r.rp.pf = ev == TL_RP_EV_SHORT;
			r.act = TL_RP_ISSUE;
		} else if (s.mode == TL_RP_SLOW && ev == TL_RP_EV_FAR) {
			r.rp.fast = 0;
		} else if (s.mode == TL_RP_SLOW && ev == TL_RP_EV_NEAR) {
			if (r.rp.fast < TL_RP_FAST_RUN)
				r.rp.fast++;
			if (r.rp.fast >= TL_RP_FAST_RUN) {
				r.rp.mode = TL_RP_TRY;
				r.rp.score = TL_RP_SCORE_START;
				r.rp.fast = 0;
			}
		}
		break;
	default: /* OFF */
		break;
	}
	return r;
}

#endif
