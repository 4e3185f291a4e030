/* tests/test_read_policy.c: CUnit tests of the io_uring stream-read policy (drivers/uring/read_policy.h) as a pure function, without io_uring. */
#include <stdint.h>
#include <stdio.h>

#include <CUnit/Basic.h>

#include "uring/read_policy.h"

/*
 * tests/test_uring.c drives these sequences over real sockets; here they are
 * replayed as the events the driver would report, and each answer is
 * checked. step() is the driver's side: it applies what the policy answered
 * and checks the act was the one expected.
 */

static const char *act_name(int a)
{
	static const char *n[] = {"GO_ON", "ISSUE", "HOLD", "DEFER"};
	return a >= 0 && a < 4 ? n[a] : "?";
}

static int step_at(struct tl_rp *s, enum tl_rp_event ev, int want, int line)
{
	struct tl_rp_step r = tl__rp_step(*s, ev);
	if (r.act != want) {
		printf("\n  line %d: event %d in mode %d: act %s, expected %s\n", line, (int)ev,
		       s->mode, act_name(r.act), act_name(want));
		CU_FAIL("unexpected act");
	}
	*s = r.rp;
	return r.act == want;
}
#define step(s, ev, want) step_at((s), (ev), (want), __LINE__)

/* One round with a peer that answers within the loop's turns: the deferred
 * try finds the message, the host answers it, the read is deferred again. */
static void fast_round(struct tl_rp *s)
{
	CU_ASSERT_EQUAL(s->mode, TL_RP_TRY);
	step(s, TL_RP_EV_HIT, TL_RP_GO_ON);
	step(s, TL_RP_EV_SHORT, TL_RP_HOLD);
	CU_ASSERT_EQUAL(s->mode, TL_RP_HELD);
	step(s, TL_RP_EV_ANSWERED, TL_RP_DEFER);
	CU_ASSERT_EQUAL(s->mode, TL_RP_TRY);
}

/* One round with a peer slower than the turns, while the read tries: the
 * try misses, an armed recv (poll-first: the socket was empty) waits for
 * the message, the host answers it. Returns 1 when the miss made the read
 * SLOW instead. */
static int slow_round(struct tl_rp *s)
{
	CU_ASSERT_EQUAL(s->mode, TL_RP_TRY);
	step(s, TL_RP_EV_MISS, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s->pf, 1);
	if (s->mode == TL_RP_SLOW)
		return 1;
	CU_ASSERT_EQUAL(s->mode, TL_RP_WAIT);
	step(s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(s, TL_RP_EV_ANSWERED, TL_RP_DEFER);
	return 0;
}

/* Slow rounds from s until the read is SLOW: how many misses. */
static int misses_to_slow(struct tl_rp *s)
{
	int n = 1;
	while (!slow_round(s) && n < 100)
		n++;
	CU_ASSERT_EQUAL(s->mode, TL_RP_SLOW);
	return n;
}

/* One message of a SLOW read: its gap, then its end; the next armed recv
 * goes at once, poll-first after a short one. */
static void slow_message(struct tl_rp *s, enum tl_rp_event gap, int full)
{
	CU_ASSERT_EQUAL(s->mode, TL_RP_SLOW);
	step(s, gap, TL_RP_GO_ON);
	if (s->mode != TL_RP_SLOW)
		return;
	step(s, full ? TL_RP_EV_FULL : TL_RP_EV_SHORT, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s->mode, TL_RP_SLOW);
	CU_ASSERT_EQUAL(s->pf, !full);
}

/* A peer that answers every message at once: deferred, try after try, and
 * never switched (test_uring's read_modes echo). */
static void test_fast_peer_stays_deferred(void)
{
	struct tl_rp s = tl__rp_new(0);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_NEW);
	CU_ASSERT_TRUE(tl__rp_try(s.mode));
	for (int i = 0; i < 200; i++)
		fast_round(&s);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_MAX);
}

/* A peer slower than the turns: a run of misses, seven from a new read
 * (28 down by 4 a miss to below 4), makes it SLOW, and it stays so as long
 * as the peer is slow: an armed recv after each message, poll-first after
 * a short one (test_uring's read_slow_peer, first half). */
static void test_slow_peer_turns_slow(void)
{
	struct tl_rp s = tl__rp_new(0);
	int n = misses_to_slow(&s);
	CU_ASSERT_EQUAL(n, 7);
	CU_ASSERT_EQUAL(n, (TL_RP_SCORE_NEW - TL_RP_SCORE_MISS) / TL_RP_SCORE_MISS + 1);
	CU_ASSERT_EQUAL(s.fast, 0);
	CU_ASSERT_FALSE(tl__rp_try(s.mode));
	for (int i = 0; i < 200; i++)
		slow_message(&s, TL_RP_EV_FAR, i % 7 == 3);
	CU_ASSERT_EQUAL(s.mode, TL_RP_SLOW);
	/* Messages within the gap, but never a run of them: still slow. */
	for (int i = 0; i < 200; i++)
		slow_message(&s, i % TL_RP_FAST_RUN == TL_RP_FAST_RUN - 1 ? TL_RP_EV_FAR
									  : TL_RP_EV_NEAR,
			     0);
	CU_ASSERT_EQUAL(s.mode, TL_RP_SLOW);
}

/* A fast peer's misses come in short bursts: after a run of hits, a burst
 * of seven misses does not switch the read (the eighth would), and bursts
 * of three with hits between never do. */
static void test_fast_burst_does_not_switch(void)
{
	struct tl_rp s = tl__rp_new(0);
	for (int i = 0; i < 10; i++)
		fast_round(&s);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_MAX);
	struct tl_rp before = s;
	for (int i = 0; i < 7; i++)
		CU_ASSERT_EQUAL(slow_round(&s), 0);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(slow_round(&s), 1); /* the eighth */

	s = before;
	for (int b = 0; b < 100; b++) {
		for (int i = 0; i < 3; i++)
			CU_ASSERT_EQUAL_FATAL(slow_round(&s), 0);
		for (int i = 0; i < 12; i++)
			fast_round(&s);
	}
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
}

/* A slow read whose peer catches up: TL_RP_FAST_RUN messages in a row
 * within the gap make it a try again (score TL_RP_SCORE_START), a late
 * message breaks the run. The message that ends the run ends as a try's:
 * short, it is held and deferred once answered, and the tries hit; (from
 * TL_RP_SCORE_START) six misses in a row would make it slow again; full,
 * it goes again at once as a try (test_uring's read_slow_peer, second
 * half). */
static void test_slow_peer_catches_up(void)
{
	struct tl_rp s = tl__rp_new(0);
	misses_to_slow(&s);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		slow_message(&s, TL_RP_EV_NEAR, 0);
	slow_message(&s, TL_RP_EV_FAR, 0); /* a late one: the run starts over */
	CU_ASSERT_EQUAL(s.fast, 0);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		slow_message(&s, TL_RP_EV_NEAR, 0);
	CU_ASSERT_EQUAL(s.mode, TL_RP_SLOW);
	struct tl_rp last = s;
	step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_START);
	CU_ASSERT_EQUAL(s.fast, 0);
	step(&s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(&s, TL_RP_EV_ANSWERED, TL_RP_DEFER);
	struct tl_rp deferred = s;
	for (int i = 0; i < 16; i++)
		fast_round(&s);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);

	s = deferred;
	CU_ASSERT_EQUAL(misses_to_slow(&s), 6);

	s = last;
	step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
}

/* A stream the host does not answer is fed for good: an armed recv after
 * each message (poll-first after a short one, not after a full one), and
 * nothing turns it back (test_uring's read_modes, one way). */
static void test_unanswered_fed_for_good(void)
{
	struct tl_rp s = tl__rp_new(0);
	step(&s, TL_RP_EV_HIT, TL_RP_GO_ON);
	step(&s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(&s, TL_RP_EV_UNANSWERED, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_FED);
	CU_ASSERT_EQUAL(s.pf, 1);
	CU_ASSERT_FALSE(tl__rp_try(s.mode));
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.pf, 0);
	step(&s, TL_RP_EV_SHORT, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.pf, 1);
	struct tl_rp m = s;
	for (int ev = 0; ev < TL_RP_EVENTS_; ev++) {
		if (ev == TL_RP_EV_SHORT || ev == TL_RP_EV_FULL)
			continue;
		for (int i = 0; i < 3 * TL_RP_FAST_RUN; i++)
			step(&s, (enum tl_rp_event)ev, TL_RP_GO_ON);
	}
	CU_ASSERT_EQUAL(s.mode, m.mode);
	CU_ASSERT_EQUAL(s.score, m.score);
	CU_ASSERT_EQUAL(s.fast, m.fast);
	CU_ASSERT_EQUAL(s.pf, m.pf);
}

/* A recv that filled its buffer goes again at once, as a try: a try's or
 * an armed one's (test_uring's read_modes, full buffers). */
static void test_full_buffer_goes_again(void)
{
	struct tl_rp s = tl__rp_new(0);
	step(&s, TL_RP_EV_HIT, TL_RP_GO_ON);
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	step(&s, TL_RP_EV_MISS, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_WAIT);
	CU_ASSERT_EQUAL(s.pf, 1);
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
}

/* Embedded loops read fed from the start, the first recv not poll-first
 * (data may be waiting), and are never held or deferred to a later poll. */
static void test_embedded_fed(void)
{
	struct tl_rp s = tl__rp_new(1);
	CU_ASSERT_EQUAL(s.mode, TL_RP_FED);
	CU_ASSERT_EQUAL(s.pf, 0);
	for (int i = 0; i < 10 * TL_RP_FAST_RUN; i++) {
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
		step(&s, i & 1 ? TL_RP_EV_FULL : TL_RP_EV_SHORT, TL_RP_ISSUE);
	}
	CU_ASSERT_EQUAL(s.mode, TL_RP_FED);
}

/* Fast means within TL_RP_FAST_GAP polls of the last answer's; a stream
 * never written to (its last send "long ago", any difference) is not. */
static void test_gap(void)
{
	for (uint32_t p = 0; p <= TL_RP_FAST_GAP; p++)
		CU_ASSERT_EQUAL(tl__rp_gap(p), TL_RP_EV_NEAR);
	CU_ASSERT_EQUAL(tl__rp_gap(TL_RP_FAST_GAP + 1), TL_RP_EV_FAR);
	CU_ASSERT_EQUAL(tl__rp_gap(1000), TL_RP_EV_FAR);
	CU_ASSERT_EQUAL(tl__rp_gap(UINT32_MAX), TL_RP_EV_FAR);
}

/*
 * One request at a time, whatever the peer does: the driver of this model
 * issues a request when the policy says ISSUE (or DEFER, at the next poll),
 * holds the read on HOLD, and sends the events a real request can end with.
 * A seeded random walk over every event the driver can report checks that
 * the policy never asks for a request while one is out, always asks for
 * one (or a hold) when one ends, never leaves the read with neither, and
 * stays within its modes. This is what keeps a stream's leases within its
 * cap (lib/caps.c): each request takes one buffer at most.
 */
static void test_one_request_at_a_time(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int embedded = 0; embedded < 2; embedded++) {
		struct tl_rp s = tl__rp_new(embedded);
		enum { OUT, HELD_, DEFERRED } where = OUT; /* a request is out at first */
		int bad = 0;
		for (int n = 0; n < 200000 && !bad; n++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			enum tl_rp_event ev;
			struct tl_rp_step r;
			if (where == HELD_) {
				ev = (x & 1) ? TL_RP_EV_ANSWERED : TL_RP_EV_UNANSWERED;
			} else if (where == DEFERRED) {
				where = OUT; /* issued at the poll */
				continue;
			} else if (tl__rp_try(s.mode) && (x & 3) == 0) {
				ev = TL_RP_EV_MISS;
			} else {
				/* Data: a try's hit, a slow read's gap, then the end. */
				if (tl__rp_try(s.mode)) {
					r = tl__rp_step(s, TL_RP_EV_HIT);
					bad |= r.act != TL_RP_GO_ON;
					s = r.rp;
				}
				if (s.mode == TL_RP_SLOW) {
					r = tl__rp_step(s, (x & 8) ? TL_RP_EV_NEAR : TL_RP_EV_FAR);
					bad |= r.act != TL_RP_GO_ON;
					s = r.rp;
				}
				ev = (x & 4) ? TL_RP_EV_FULL : TL_RP_EV_SHORT;
			}
			r = tl__rp_step(s, ev);
			if (r.act == TL_RP_ISSUE)
				where = OUT;
			else if (r.act == TL_RP_DEFER)
				where = DEFERRED;
			else if (r.act == TL_RP_HOLD)
				where = HELD_;
			else
				bad = 1; /* the request ended, and nothing follows */
			if (embedded && r.act != TL_RP_ISSUE)
				bad = 1;
			if (r.rp.mode == TL_RP_OFF || r.rp.mode >= TL_RP_MODES_)
				bad = 1;
			if (bad)
				printf("\n  step %d: event %d in mode %d: act %s, mode %d\n", n, (int)ev,
				       s.mode, act_name(r.act), r.rp.mode);
			s = r.rp;
		}
		CU_ASSERT_EQUAL(bad, 0);
	}
}

/* Every mode against every event: the new mode and the act, as the
 * header's comment describes them; everything else leaves the state
 * exactly as it was. */
static void test_every_transition(void)
{
	enum { M = TL_RP_MODES_, E = TL_RP_EVENTS_ };
	struct want {
		uint8_t mode, act;
	} w[M][E];
	for (int m = 0; m < M; m++)
		for (int e = 0; e < E; e++)
			w[m][e] = (struct want){(uint8_t)m, TL_RP_GO_ON};
	w[TL_RP_TRY][TL_RP_EV_MISS] = (struct want){TL_RP_WAIT, TL_RP_ISSUE};
	w[TL_RP_TRY][TL_RP_EV_SHORT] = (struct want){TL_RP_HELD, TL_RP_HOLD};
	w[TL_RP_TRY][TL_RP_EV_FULL] = (struct want){TL_RP_TRY, TL_RP_ISSUE};
	w[TL_RP_WAIT][TL_RP_EV_SHORT] = (struct want){TL_RP_HELD, TL_RP_HOLD};
	w[TL_RP_WAIT][TL_RP_EV_FULL] = (struct want){TL_RP_TRY, TL_RP_ISSUE};
	w[TL_RP_HELD][TL_RP_EV_ANSWERED] = (struct want){TL_RP_TRY, TL_RP_DEFER};
	w[TL_RP_HELD][TL_RP_EV_UNANSWERED] = (struct want){TL_RP_FED, TL_RP_ISSUE};
	w[TL_RP_FED][TL_RP_EV_SHORT] = (struct want){TL_RP_FED, TL_RP_ISSUE};
	w[TL_RP_FED][TL_RP_EV_FULL] = (struct want){TL_RP_FED, TL_RP_ISSUE};
	w[TL_RP_SLOW][TL_RP_EV_SHORT] = (struct want){TL_RP_SLOW, TL_RP_ISSUE};
	w[TL_RP_SLOW][TL_RP_EV_FULL] = (struct want){TL_RP_SLOW, TL_RP_ISSUE};
	/* From score 16, 3 fast messages and pf 0: no switch. */
	int changes_counters[M][E] = {{0}};
	changes_counters[TL_RP_TRY][TL_RP_EV_HIT] = 1;
	changes_counters[TL_RP_TRY][TL_RP_EV_MISS] = 1;
	changes_counters[TL_RP_HELD][TL_RP_EV_UNANSWERED] = 1;
	changes_counters[TL_RP_FED][TL_RP_EV_SHORT] = 1;
	changes_counters[TL_RP_SLOW][TL_RP_EV_NEAR] = 1;
	changes_counters[TL_RP_SLOW][TL_RP_EV_FAR] = 1;
	changes_counters[TL_RP_SLOW][TL_RP_EV_SHORT] = 1;
	for (int m = 0; m < M; m++) {
		for (int e = 0; e < E; e++) {
			struct tl_rp s = {(uint8_t)m, 16, 3, 0};
			struct tl_rp_step r = tl__rp_step(s, (enum tl_rp_event)e);
			if (r.rp.mode != w[m][e].mode || r.act != w[m][e].act)
				printf("\n  mode %d event %d: mode %d act %s, expected mode %d act %s\n",
				       m, e, r.rp.mode, act_name(r.act), w[m][e].mode,
				       act_name(w[m][e].act));
			CU_ASSERT_EQUAL(r.rp.mode, w[m][e].mode);
			CU_ASSERT_EQUAL(r.act, w[m][e].act);
			if (!changes_counters[m][e]) {
				CU_ASSERT_EQUAL(r.rp.score, s.score);
				CU_ASSERT_EQUAL(r.rp.fast, s.fast);
				CU_ASSERT_EQUAL(r.rp.pf, s.pf);
			}
		}
	}
	/* The counters of those that change them. */
	struct tl_rp_step r = tl__rp_step((struct tl_rp){TL_RP_TRY, 16, 3, 0}, TL_RP_EV_HIT);
	CU_ASSERT_EQUAL(r.rp.score, 17);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, TL_RP_SCORE_MAX, 0, 0}, TL_RP_EV_HIT);
	CU_ASSERT_EQUAL(r.rp.score, TL_RP_SCORE_MAX);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, 16, 3, 0}, TL_RP_EV_MISS);
	CU_ASSERT_EQUAL(r.rp.score, 16 - TL_RP_SCORE_MISS);
	CU_ASSERT_EQUAL(r.rp.pf, 1);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, TL_RP_SCORE_MISS, 0, 0}, TL_RP_EV_MISS);
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_SLOW);
	CU_ASSERT_EQUAL(r.rp.score, 0);
	CU_ASSERT_EQUAL(r.rp.pf, 1);
	CU_ASSERT_EQUAL(r.act, TL_RP_ISSUE);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, 1, 0, 0}, TL_RP_EV_MISS); /* no wrap below 0 */
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_SLOW);
	CU_ASSERT_EQUAL(r.rp.score, 0);
	r = tl__rp_step((struct tl_rp){TL_RP_HELD, 16, 3, 0}, TL_RP_EV_UNANSWERED);
	CU_ASSERT_EQUAL(r.rp.pf, 1);
	r = tl__rp_step((struct tl_rp){TL_RP_FED, 16, 3, 0}, TL_RP_EV_SHORT);
	CU_ASSERT_EQUAL(r.rp.pf, 1);
	r = tl__rp_step((struct tl_rp){TL_RP_FED, 16, 3, 1}, TL_RP_EV_FULL);
	CU_ASSERT_EQUAL(r.rp.pf, 0);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 3, 0}, TL_RP_EV_NEAR);
	CU_ASSERT_EQUAL(r.rp.fast, 4);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 3, 0}, TL_RP_EV_FAR);
	CU_ASSERT_EQUAL(r.rp.fast, 0);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 3, 0}, TL_RP_EV_SHORT);
	CU_ASSERT_EQUAL(r.rp.pf, 1);
	CU_ASSERT_EQUAL(r.rp.fast, 3);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, TL_RP_FAST_RUN - 1, 0}, TL_RP_EV_NEAR);
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(r.rp.score, TL_RP_SCORE_START);
	CU_ASSERT_EQUAL(r.rp.fast, 0);
	CU_ASSERT_EQUAL(r.act, TL_RP_GO_ON);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 255, 0}, TL_RP_EV_NEAR); /* no wrap above */
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_TRY);
	/* Which modes issue what. */
	CU_ASSERT_TRUE(tl__rp_try(TL_RP_TRY));
	for (int m = 0; m < M; m++)
		if (m != TL_RP_TRY)
			CU_ASSERT_FALSE(tl__rp_try((uint8_t)m));
}

int main(void)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{"fast peer stays deferred", test_fast_peer_stays_deferred},
		{"slow peer turns slow", test_slow_peer_turns_slow},
		{"fast burst does not switch", test_fast_burst_does_not_switch},
		{"slow peer catches up", test_slow_peer_catches_up},
		{"unanswered fed for good", test_unanswered_fed_for_good},
		{"full buffer goes again", test_full_buffer_goes_again},
		{"embedded fed", test_embedded_fed},
		{"gap", test_gap},
		{"one request at a time", test_one_request_at_a_time},
		{"every transition", test_every_transition},
	};
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite suite = CU_add_suite("read_policy", NULL, NULL);
	if (!suite)
		goto fail;
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (!CU_add_test(suite, tests[i].name, tests[i].fn))
			goto fail;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS)
		goto fail;
	failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	return failures ? 1 : 0;
fail:
	CU_cleanup_registry();
	return 1;
}
