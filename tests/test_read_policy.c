/* tests/test_read_policy.c: CUnit tests of the io_uring stream-read policy (drivers/uring/read_policy.h) as a pure function, without io_uring. */
#include <stdint.h>
#include <stdio.h>

#include <CUnit/Basic.h>

#include "uring/read_policy.h"

/*
 * tests/test_uring.c drives these sequences over real sockets; here they are
 * replayed as the events the driver would report, and each answer is
 * checked. step() is the driver's side: it applies what the policy answered
 * (every act but a CANCEL the driver could not take, see test_cancel_refused)
 * and checks the act was the one expected.
 */

static const char *act_name(int a)
{
	static const char *n[] = {"GO_ON", "ISSUE", "HOLD", "DEFER", "CANCEL"};
	return a >= 0 && a < 5 ? n[a] : "?";
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

/* One round with a peer slower than the turns, while the read is one-shot:
 * the try misses, a recv waits for the message, the host answers it.
 * Returns 1 when the miss turned the read multishot instead. */
static int slow_round(struct tl_rp *s)
{
	CU_ASSERT_EQUAL(s->mode, TL_RP_TRY);
	step(s, TL_RP_EV_MISS, TL_RP_ISSUE);
	if (s->mode == TL_RP_SLOW)
		return 1;
	CU_ASSERT_EQUAL(s->mode, TL_RP_WAIT);
	step(s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(s, TL_RP_EV_ANSWERED, TL_RP_DEFER);
	return 0;
}

/* Slow rounds from s until the read turns multishot: how many misses. */
static int misses_to_slow(struct tl_rp *s)
{
	int n = 1;
	while (!slow_round(s) && n < 100)
		n++;
	CU_ASSERT_EQUAL(s->mode, TL_RP_SLOW);
	return n;
}

/* A peer that answers every message at once: deferred, try after try, and
 * never switched (test_uring's read_modes echo). */
static void test_fast_peer_stays_deferred(void)
{
	struct tl_rp s = tl__rp_new(0);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_NEW);
	for (int i = 0; i < 200; i++)
		fast_round(&s);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_MAX);
}

/* A peer slower than the turns: a run of misses, seven from a new read
 * (28 down by 4 a miss to below 4), turns it multishot, and it stays so as
 * long as the peer is slow, across kernel-ended receives (test_uring's
 * read_slow_peer, first half). */
static void test_slow_peer_turns_multishot(void)
{
	struct tl_rp s = tl__rp_new(0);
	int n = misses_to_slow(&s);
	CU_ASSERT_EQUAL(n, 7);
	CU_ASSERT_EQUAL(n, (TL_RP_SCORE_NEW - TL_RP_SCORE_MISS) / TL_RP_SCORE_MISS + 1);
	CU_ASSERT_EQUAL(s.fast, 0);
	for (int i = 0; i < 200; i++) {
		step(&s, TL_RP_EV_FAR, TL_RP_GO_ON);
		if (i % 50 == 49) /* the kernel ended the receive; the driver re-arms */
			step(&s, TL_RP_EV_ENDED, TL_RP_GO_ON);
	}
	CU_ASSERT_EQUAL(s.mode, TL_RP_SLOW);
	/* Messages within the gap, but never a run of them: still slow. */
	for (int i = 0; i < 200; i++)
		step(&s, i % TL_RP_FAST_RUN == TL_RP_FAST_RUN - 1 ? TL_RP_EV_FAR : TL_RP_EV_NEAR,
		     TL_RP_GO_ON);
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
 * within the gap make the policy cancel its receive; a late message breaks
 * the run. Once the receive ends cancelled the read is deferred again, its
 * tries hit, and (its score now TL_RP_SCORE_START) six misses in a row
 * would make it slow again (test_uring's read_slow_peer, second half, and
 * read_retry_stop). */
static void test_slow_peer_catches_up(void)
{
	struct tl_rp s = tl__rp_new(0);
	misses_to_slow(&s);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_FAR, TL_RP_GO_ON); /* a late one: the run starts over */
	CU_ASSERT_EQUAL(s.fast, 0);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, TL_RP_SLOW);
	step(&s, TL_RP_EV_NEAR, TL_RP_CANCEL);
	CU_ASSERT_EQUAL(s.mode, TL_RP_RETRY);
	/* Messages the receive still carries before the cancel lands. */
	step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_FAR, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, TL_RP_RETRY);
	step(&s, TL_RP_EV_CANCELLED, TL_RP_DEFER);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_START);
	struct tl_rp deferred = s;
	for (int i = 0; i < 16; i++)
		fast_round(&s);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);

	s = deferred;
	CU_ASSERT_EQUAL(misses_to_slow(&s), 6);
}

/* A retried receive that ends before the cancel does (an error, data that
 * ended it, or the host's own stop meeting the policy's cancel): the read
 * waits for its next message one-shot, with the retry's score. */
static void test_retry_ended_by_itself(void)
{
	struct tl_rp s = tl__rp_new(0);
	misses_to_slow(&s);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_NEAR, TL_RP_CANCEL);
	step(&s, TL_RP_EV_ENDED, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, TL_RP_WAIT);
	CU_ASSERT_EQUAL(s.score, TL_RP_SCORE_START);
	step(&s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(&s, TL_RP_EV_ANSWERED, TL_RP_DEFER);
	fast_round(&s);
}

/* A CANCEL the driver cannot take (no SQE, or a cancel in flight) leaves
 * the state as it was: the next fast message asks again, a late one starts
 * the run over. */
static void test_cancel_refused(void)
{
	struct tl_rp s = tl__rp_new(0);
	misses_to_slow(&s);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	for (int i = 0; i < 3; i++) {
		struct tl_rp_step r = tl__rp_step(s, TL_RP_EV_NEAR);
		CU_ASSERT_EQUAL(r.act, TL_RP_CANCEL); /* refused: s stays */
	}
	step(&s, TL_RP_EV_FAR, TL_RP_GO_ON);
	for (int i = 0; i < TL_RP_FAST_RUN - 1; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_NEAR, TL_RP_CANCEL);
}

/* A stream the host does not answer turns multishot for good: nothing
 * turns it back (test_uring's read_modes, one way). */
static void test_unanswered_multishot_for_good(void)
{
	struct tl_rp s = tl__rp_new(0);
	step(&s, TL_RP_EV_HIT, TL_RP_GO_ON);
	step(&s, TL_RP_EV_SHORT, TL_RP_HOLD);
	step(&s, TL_RP_EV_UNANSWERED, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_MULTI);
	struct tl_rp m = s;
	for (int ev = TL_RP_EV_HIT; ev <= TL_RP_EV_CANCELLED; ev++)
		for (int i = 0; i < 3 * TL_RP_FAST_RUN; i++)
			step(&s, (enum tl_rp_event)ev, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, m.mode);
	CU_ASSERT_EQUAL(s.score, m.score);
	CU_ASSERT_EQUAL(s.fast, m.fast);
}

/* A recv that filled its buffer goes again at once, as a try: a try's or
 * one the kernel chose the buffer for (test_uring's read_modes, full
 * buffers). */
static void test_full_buffer_goes_again(void)
{
	struct tl_rp s = tl__rp_new(0);
	step(&s, TL_RP_EV_HIT, TL_RP_GO_ON);
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
	step(&s, TL_RP_EV_MISS, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_WAIT);
	step(&s, TL_RP_EV_FULL, TL_RP_ISSUE);
	CU_ASSERT_EQUAL(s.mode, TL_RP_TRY);
}

/* Embedded loops read multishot from the start, whatever comes. */
static void test_embedded_multishot(void)
{
	struct tl_rp s = tl__rp_new(1);
	CU_ASSERT_EQUAL(s.mode, TL_RP_MULTI);
	CU_ASSERT_TRUE(tl__rp_multishot(s.mode));
	for (int i = 0; i < 10 * TL_RP_FAST_RUN; i++)
		step(&s, TL_RP_EV_NEAR, TL_RP_GO_ON);
	step(&s, TL_RP_EV_ENDED, TL_RP_GO_ON);
	CU_ASSERT_EQUAL(s.mode, TL_RP_MULTI);
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

/* Every mode against every event: the new mode and the act, as the
 * header's comment describes them; everything else leaves the state
 * exactly as it was. */
static void test_every_transition(void)
{
	enum { M = TL_RP_RETRY + 1, E = TL_RP_EV_CANCELLED + 1 };
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
	w[TL_RP_HELD][TL_RP_EV_UNANSWERED] = (struct want){TL_RP_MULTI, TL_RP_ISSUE};
	w[TL_RP_RETRY][TL_RP_EV_CANCELLED] = (struct want){TL_RP_TRY, TL_RP_DEFER};
	w[TL_RP_RETRY][TL_RP_EV_ENDED] = (struct want){TL_RP_WAIT, TL_RP_GO_ON};
	/* From score 16 and 3 fast messages: no switch, no cancel. */
	int changes_counters[M][E] = {{0}};
	changes_counters[TL_RP_TRY][TL_RP_EV_HIT] = 1;
	changes_counters[TL_RP_TRY][TL_RP_EV_MISS] = 1;
	changes_counters[TL_RP_SLOW][TL_RP_EV_NEAR] = 1;
	changes_counters[TL_RP_SLOW][TL_RP_EV_FAR] = 1;
	changes_counters[TL_RP_RETRY][TL_RP_EV_CANCELLED] = 1;
	changes_counters[TL_RP_RETRY][TL_RP_EV_ENDED] = 1;
	for (int m = 0; m < M; m++) {
		for (int e = 0; e < E; e++) {
			struct tl_rp s = {(uint8_t)m, 16, 3};
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
			}
		}
	}
	/* The counters of those that change them. */
	struct tl_rp_step r = tl__rp_step((struct tl_rp){TL_RP_TRY, 16, 3}, TL_RP_EV_HIT);
	CU_ASSERT_EQUAL(r.rp.score, 17);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, TL_RP_SCORE_MAX, 0}, TL_RP_EV_HIT);
	CU_ASSERT_EQUAL(r.rp.score, TL_RP_SCORE_MAX);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, 16, 3}, TL_RP_EV_MISS);
	CU_ASSERT_EQUAL(r.rp.score, 16 - TL_RP_SCORE_MISS);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, TL_RP_SCORE_MISS, 0}, TL_RP_EV_MISS);
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_SLOW);
	CU_ASSERT_EQUAL(r.rp.score, 0);
	CU_ASSERT_EQUAL(r.act, TL_RP_ISSUE);
	r = tl__rp_step((struct tl_rp){TL_RP_TRY, 1, 0}, TL_RP_EV_MISS); /* no wrap below 0 */
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_SLOW);
	CU_ASSERT_EQUAL(r.rp.score, 0);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 3}, TL_RP_EV_NEAR);
	CU_ASSERT_EQUAL(r.rp.fast, 4);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 3}, TL_RP_EV_FAR);
	CU_ASSERT_EQUAL(r.rp.fast, 0);
	r = tl__rp_step((struct tl_rp){TL_RP_SLOW, 0, 255}, TL_RP_EV_NEAR); /* no wrap above */
	CU_ASSERT_EQUAL(r.act, TL_RP_CANCEL);
	CU_ASSERT_EQUAL(r.rp.mode, TL_RP_RETRY);
	r = tl__rp_step((struct tl_rp){TL_RP_RETRY, 0, 0}, TL_RP_EV_CANCELLED);
	CU_ASSERT_EQUAL(r.rp.score, TL_RP_SCORE_START);
	r = tl__rp_step((struct tl_rp){TL_RP_RETRY, 0, 0}, TL_RP_EV_ENDED);
	CU_ASSERT_EQUAL(r.rp.score, TL_RP_SCORE_START);
	/* Which modes issue what. */
	CU_ASSERT_TRUE(tl__rp_oneshot(TL_RP_TRY) && tl__rp_oneshot(TL_RP_WAIT) &&
		       tl__rp_oneshot(TL_RP_HELD));
	CU_ASSERT_TRUE(tl__rp_multishot(TL_RP_MULTI) && tl__rp_multishot(TL_RP_SLOW) &&
		       tl__rp_multishot(TL_RP_RETRY));
	for (int m = 0; m < M; m++)
		CU_ASSERT_FALSE(tl__rp_oneshot((uint8_t)m) && tl__rp_multishot((uint8_t)m));
	CU_ASSERT_FALSE(tl__rp_oneshot(TL_RP_OFF) || tl__rp_multishot(TL_RP_OFF));
}

int main(void)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{"fast peer stays deferred", test_fast_peer_stays_deferred},
		{"slow peer turns multishot", test_slow_peer_turns_multishot},
		{"fast burst does not switch", test_fast_burst_does_not_switch},
		{"slow peer catches up", test_slow_peer_catches_up},
		{"retry ended by itself", test_retry_ended_by_itself},
		{"cancel refused", test_cancel_refused},
		{"unanswered multishot for good", test_unanswered_multishot_for_good},
		{"full buffer goes again", test_full_buffer_goes_again},
		{"embedded multishot", test_embedded_multishot},
		{"gap", test_gap},
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
