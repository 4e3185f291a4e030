/* drivers/uring/read_policy.h: how an io_uring stream read chooses between one recv per message and a multishot receive: one state machine, one pure function. */
#ifndef TL_READ_POLICY_H
#define TL_READ_POLICY_H

#include <stdint.h>

/*
 * The policy of stream reads (tl_read_start on a stream; the core makes
 * them pooled and multishot). The driver tells it what happened (an event)
 * and does what it answers (an act); tl__rp_step touches neither the ring
 * nor the driver, and tests/test_read_policy.c replays it without either.
 * This is the one place the policy is explained.
 *
 * One recv per message while the host answers (TRY, WAIT, HELD). A recv
 * that ended with less than a full buffer is HELD until the start of the
 * next poll, when the driver sees what the host did with the data:
 *  - it wrote on the same stream (an answer: echo, RPC, HTTP). The peer's
 *    next message cannot come before it has the answer, so a recv issued
 *    at once would find the socket empty, park a poll in the kernel and
 *    come back through task work. The read is deferred one poll instead
 *    (DEFER: issued after the answer's send) as a try (TRY): a recv into a
 *    lease the driver picks, with MSG_DONTWAIT, which usually completes
 *    inline with neither a parked poll nor the kernel's buffer selection.
 *    The poll that defers a read never blocks, so the try is in the kernel
 *    a turn later whatever becomes of the write;
 *  - it did not (a proxy's stream, a one-way feed): the read turns
 *    multishot for good (MULTI), its receive staying armed between
 *    messages.
 * A recv that filled its buffer means more is waiting: it goes again at
 * once, as a try. A new read starts as a try (data may be waiting).
 *
 * Slow peers. A try that misses (-EAGAIN) costs a CQE, a second recv (WAIT:
 * one the kernel completes into a buffer it picks when data comes) and a
 * poll of latency. A peer slower than the loop's turns (a loaded client, a
 * person, a long path) makes tries miss, and its messages are best caught
 * by a receive that stays armed: no SQE per message, no miss to come back
 * for, and the kernel completes the peer's streams in the order their
 * messages arrive, so they are answered first come, first served (tries
 * complete in the order they were issued, which reorders a slow client's
 * streams and stretches its tail latency). So a read keeps a score: a new
 * read has TL_RP_SCORE_NEW (its first try may well miss), a hit gains 1 up
 * to TL_RP_SCORE_MAX, a miss loses TL_RP_SCORE_MISS, and below
 * TL_RP_SCORE_MISS the read turns multishot (SLOW). That takes a run of
 * misses (seven in a row from the start): a fast peer's misses come in
 * short bursts (a scheduling hiccup), and reads that switched on those
 * switched back and forth, each switch costing misses of its own.
 *
 * The peer may catch up. A SLOW read's message is fast when it comes within
 * TL_RP_FAST_GAP polls of the poll that sent the stream's last answer (a
 * try goes one poll after it). After TL_RP_FAST_RUN fast messages in a row
 * the driver cancels the read's receive itself (RETRY); once that receive
 * ends, cancelled, the read is deferred again with TL_RP_SCORE_START. If it
 * ended by itself first (an error, or data that ended it), the read waits
 * for its next message the one-shot way (WAIT) with that score.
 *
 * Embedded loops read multishot from the start (MULTI): their host polls
 * the ring's descriptor, and a deferred read would leave nothing to make it
 * readable.
 *
 * The host's own cancellation is not the policy's business: the driver ends
 * a cancelled read instead of issuing it again, whatever the act.
 */

#define TL_RP_SCORE_START 24 /* after the driver's own cancel (RETRY) */
#define TL_RP_SCORE_MISS 4   /* lost per missed try; below it: SLOW */
#define TL_RP_SCORE_MAX 32   /* a hit gains 1 up to this */
#define TL_RP_SCORE_NEW (TL_RP_SCORE_START + TL_RP_SCORE_MISS) /* a new read */
#define TL_RP_FAST_RUN 16    /* fast messages in a row that make a SLOW read RETRY */
#define TL_RP_FAST_GAP 2     /* polls after the last answer's within which a message is fast */

/* What the read's next request is. */
enum tl_rp_mode {
	TL_RP_OFF = 0, /* not a multishot stream read: one request per op, no policy */
	TL_RP_TRY,     /* one recv per message; the next one a try, into a lease of ours */
	TL_RP_WAIT,    /* one recv per message, into a buffer the kernel picks */
	TL_RP_HELD,    /* its recv ended short: waits for the next poll to see an answer */
	TL_RP_MULTI,   /* multishot for good */
	TL_RP_SLOW,    /* multishot because its tries kept missing */
	TL_RP_RETRY,   /* a SLOW read whose receive the driver is cancelling */
};

/* What happened to the read. */
enum tl_rp_event {
	TL_RP_EV_HIT,        /* a try found data (the data's own event follows) */
	TL_RP_EV_MISS,       /* a try found the socket empty */
	TL_RP_EV_SHORT,      /* a one-shot recv ended with less than a full buffer */
	TL_RP_EV_FULL,       /* a one-shot recv filled its buffer */
	TL_RP_EV_ANSWERED,   /* next poll: the host wrote on the stream (HELD) */
	TL_RP_EV_UNANSWERED, /* next poll: it did not (HELD) */
	TL_RP_EV_NEAR,       /* a multishot message, fast (see tl__rp_gap) */
	TL_RP_EV_FAR,        /* a multishot message, not fast */
	TL_RP_EV_ENDED,      /* the multishot receive ended, not by the policy's cancel */
	TL_RP_EV_CANCELLED,  /* it ended by the policy's cancel (-ECANCELED, the host
			      * asked for none) */
};

/* What the driver does. */
enum tl_rp_act {
	TL_RP_GO_ON = 0, /* nothing: the request goes on, or the driver handles
			  * the CQE as it would anyway (data, re-arm, errors) */
	TL_RP_ISSUE,     /* issue the next request now (start list) */
	TL_RP_HOLD,      /* hold the read until the next poll (later list) */
	TL_RP_DEFER,     /* issue it at the next poll, which must not block (defer list) */
	TL_RP_CANCEL,    /* cancel the read's own receive. If the driver cannot (no SQE,
			  * or a cancel of it in flight) it keeps the state it had,
			  * and the next fast message asks again. */
};

struct tl_rp {
	uint8_t mode;  /* enum tl_rp_mode */
	uint8_t score; /* TRY, WAIT, HELD: how its tries have been doing */
	uint8_t fast;  /* SLOW: fast messages in a row */
};

struct tl_rp_step {
	struct tl_rp rp; /* the new state */
	uint8_t act;     /* enum tl_rp_act */
};

/* A new multishot stream read's state; embedded: on an embedded loop. */
static inline struct tl_rp tl__rp_new(int embedded)
{
	if (embedded)
		return (struct tl_rp){.mode = TL_RP_MULTI};
	return (struct tl_rp){.mode = TL_RP_TRY, .score = TL_RP_SCORE_NEW};
}

/* The event for a multishot message that came `polls` polls after the one
 * that sent the stream's last answer. */
static inline enum tl_rp_event tl__rp_gap(uint32_t polls)
{
	return polls > TL_RP_FAST_GAP ? TL_RP_EV_FAR : TL_RP_EV_NEAR;
}

/* Whether mode's request is a multishot receive (else a one-shot recv). */
static inline int tl__rp_multishot(uint8_t mode)
{
	return mode == TL_RP_MULTI || mode == TL_RP_SLOW || mode == TL_RP_RETRY;
}

/* Whether mode takes one recv per message (TRY, WAIT, HELD). */
static inline int tl__rp_oneshot(uint8_t mode)
{
	return mode == TL_RP_TRY || mode == TL_RP_WAIT || mode == TL_RP_HELD;
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
			r.rp.mode = TL_RP_MULTI;
			r.act = TL_RP_ISSUE;
		}
		break;
	case TL_RP_SLOW:
		if (ev == TL_RP_EV_FAR) {
			r.rp.fast = 0;
		} else if (ev == TL_RP_EV_NEAR) {
			if (r.rp.fast < TL_RP_FAST_RUN)
				r.rp.fast++;
			if (r.rp.fast >= TL_RP_FAST_RUN) {
				r.rp.mode = TL_RP_RETRY;
				r.rp.fast = 0;
				r.act = TL_RP_CANCEL;
			}
		}
		break;
	case TL_RP_RETRY:
		if (ev == TL_RP_EV_CANCELLED || ev == TL_RP_EV_ENDED) {
			r.rp.mode = ev == TL_RP_EV_CANCELLED ? TL_RP_TRY : TL_RP_WAIT;
			r.rp.score = TL_RP_SCORE_START;
			r.act = ev == TL_RP_EV_CANCELLED ? TL_RP_DEFER : TL_RP_GO_ON;
		}
		break;
	default: /* OFF, MULTI: nothing changes them */
		break;
	}
	return r;
}

#endif
