/* tests/contract_deadlines.c: contract 4.9 (an idle deadline per stream, a deadline per read, no timer per connection), on every driver; the sim driver runs them in virtual time. */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>

/* The idle duration of these tests: long enough that a loaded host turns
 * well within it (x TL_TEST_SLOW). */
#define IDLE_MS ((uint64_t)H_SLOW_MS(60))

/* Completions of handle h in c's log from index `from` on. */
static uint32_t on_handle(h_ctx *c, tl_handle h, uint32_t from)
{
	return h_count_handle(&c->log, h, from);
}

/* Wait for op's terminal, expecting -ETIMEDOUT no earlier than not_before
 * and not much later (the simulation driver's clock runs far ahead of the
 * wall clock: a deadline missed would fire much later, not never): its
 * index or -1. */
static int expect_timeout(h_ctx *c, tl_op op, uint64_t not_before, int ms)
{
	int i = h_wait_op_ms(c, op, ms);
	if (i < 0)
		return -1;
	uint64_t now = tl_now(c->loop);
	H_EQ(c->log.v[i].result, -ETIMEDOUT);
	H_TRUE(now >= not_before, "-ETIMEDOUT %llu ns before its deadline",
	       (unsigned long long)(not_before - now));
	H_TRUE(now <= not_before + (uint64_t)H_WAIT_MS * H_MS, "-ETIMEDOUT %llu ms late",
	       (unsigned long long)((now - not_before) / H_MS));
	return i;
}

/* Rule 4.9: a stream with a read and a write pending (the peer reads
 * nothing, so the write cannot finish) and no progress: when its idle
 * deadline passes, each op ends with -ETIMEDOUT, once, not before the
 * deadline. Then nothing more is reported; the stream still works (a new
 * read gets new bytes), and a later read with no data times out again, a
 * full period after it was submitted. */
static void test_idle_fires_once(void)
{
	enum { BIG = 32 << 20 };
	int fds = h_begin();
	h_ctx c;
	tl_config cfg = cfg_default();
	cfg.handle_write_bytes = 1ull << 40; /* the big write must not pause the read */
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	uint8_t *big = malloc(BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	fill_pattern(big, BIG, 0);
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t buf[64];
	tl_op rd, wr;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rd), 0);
	H_EQ(tl_write(l, srv, big, BIG, 2, &wr), 0);
	uint64_t t0 = tl_now(l);
	H_EQ(tl_idle_deadline(l, srv, IDLE_MS * H_MS), 0);
	int ir = expect_timeout(&c, rd, t0 + IDLE_MS * H_MS, H_WAIT_MS);
	int iw = expect_timeout(&c, wr, t0 + IDLE_MS * H_MS, H_WAIT_MS);
	H_TRUE(ir >= 0 && iw >= 0, "the idle deadline did not end both ops");
	H_EQ(h_count_op(&c.log, rd, 0), 1);
	H_EQ(h_count_op(&c.log, wr, 0), 1);
	/* Reported once: three more periods pass with nothing pending. */
	uint32_t mark = c.log.n;
	h_idle(&c, (int)(3 * IDLE_MS));
	H_EQ(on_handle(&c, srv, mark), 0);
	/* Still usable. */
	static const uint8_t hello[5] = {'h', 'e', 'l', 'l', 'o'};
	H_EQ(h_write_all(&c, cli, hello, sizeof hello), (int64_t)sizeof hello);
	H_EQ(tl_read(l, srv, buf, sizeof buf, 3, &rd), 0);
	int i = h_wait_op(&c, rd);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, (int64_t)sizeof hello);
		H_EQ(memcmp(buf, hello, sizeof hello), 0);
	}
	/* The next op starts a new period: it ends a full period after its
	 * submission. */
	uint64_t t1 = tl_now(l);
	H_EQ(tl_read(l, srv, buf, sizeof buf, 4, &rd), 0);
	H_TRUE(expect_timeout(&c, rd, t1 + IDLE_MS * H_MS, H_WAIT_MS) >= 0,
	       "the deadline did not re-arm for the next read");
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	free(big);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Copy the bytes of op's lease completions in c's log from *from on into
 * stream (its first *got bytes are there already) and release the leases. */
static void collect(h_ctx *c, tl_op op, uint32_t *from, uint8_t *stream, uint64_t cap,
		    uint64_t *got)
{
	for (; *from < c->log.n; (*from)++) {
		tl_completion *x = &c->log.v[*from];
		if (x->op.v != op.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
			continue;
		if (*got + (uint64_t)x->result <= cap)
			memcpy(stream + *got, x->u.read.lease.data, (size_t)x->result);
		*got += (uint64_t)x->result;
		H_EQ(tl_lease_release(c->loop, x->u.read.lease.id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
}

/* Rule 4.9: progress re-arms the idle deadline. Bytes arrive every few ms
 * for six periods and the reading stream's deadline never fires; once they
 * stop, it fires, a full period after the last bytes were sent, and every
 * byte came before its terminal, in order. */
static void test_idle_busy_does_not_fire(void)
{
	enum { CAP = 1 << 16 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	uint8_t *stream = malloc(CAP);
	CU_ASSERT_PTR_NOT_NULL_FATAL(stream);
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op rs;
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	H_EQ(tl_idle_deadline(l, srv, IDLE_MS * H_MS), 0);
	uint64_t start = tl_now(l), last_sent = start, sent = 0, got = 0;
	uint64_t wall = h_wall_ns() + (uint64_t)(6 * IDLE_MS + H_WAIT_MS) * H_MS;
	uint32_t from = 0;
	uint8_t msg[8];
	while (tl_now(l) < start + 6 * IDLE_MS * H_MS && h_wall_ns() < wall &&
	       h_find_term(&c.log, rs) < 0 && sent + sizeof msg <= CAP) {
		if (tl_now(l) >= last_sent + 5 * H_MS) {
			fill_pattern(msg, sizeof msg, sent);
			tl_op w;
			H_EQ_FATAL(tl_write(l, cli, msg, sizeof msg, 2, &w), 0);
			last_sent = tl_now(l);
			sent += sizeof msg;
		}
		h_turn(&c, (int64_t)H_MS);
		collect(&c, rs, &from, stream, CAP, &got);
	}
	H_TRUE(h_find_term(&c.log, rs) < 0, "the idle deadline fired on a busy stream");
	H_TRUE(tl_now(l) >= start + 6 * IDLE_MS * H_MS, "the traffic did not run six periods");
	H_TRUE(sent >= 6 * IDLE_MS / 5 * sizeof msg / 2, "only %llu bytes sent",
	       (unsigned long long)sent);
	/* Silence: it fires now. */
	int i = expect_timeout(&c, rs, last_sent + IDLE_MS * H_MS, H_WAIT_MS);
	H_TRUE(i >= 0, "the idle deadline did not fire once the traffic stopped");
	collect(&c, rs, &from, stream, CAP, &got);
	H_EQ(got, sent);
	if (got == sent)
		H_EQ(check_pattern(stream, (size_t)sent, 0), -1);
	if (i >= 0)
		H_EQ(h_count_op(&c.log, rs, (uint32_t)i + 1), 0);
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	free(stream);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9: tl_idle_deadline(h, 0) clears the deadline (a pending read
 * then waits as long as it takes), and arming again replaces the duration:
 * a long deadline replaced by a short one fires at the short one. */
static void test_idle_cleared_and_replaced(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t buf[16];
	tl_op rd;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rd), 0);
	H_EQ(tl_idle_deadline(l, srv, IDLE_MS * H_MS), 0);
	H_EQ(tl_idle_deadline(l, srv, 0), 0);
	H_EQ(tl_idle_deadline(l, srv, 0), 0); /* clearing nothing */
	h_idle(&c, (int)(3 * IDLE_MS));
	H_EQ(h_count_op(&c.log, rd, 0), 0);
	static const uint8_t m[3] = {7, 8, 9};
	H_EQ(h_write_all(&c, cli, m, sizeof m), (int64_t)sizeof m);
	int i = h_wait_op(&c, rd);
	if (i >= 0)
		H_EQ(c.log.v[i].result, (int64_t)sizeof m);
	/* An hour, then the short duration: the short one counts. */
	H_EQ(tl_read(l, srv, buf, sizeof buf, 2, &rd), 0);
	H_EQ(tl_idle_deadline(l, srv, 3600ull * 1000 * H_MS), 0);
	uint64_t t0 = tl_now(l);
	H_EQ(tl_idle_deadline(l, srv, IDLE_MS * H_MS), 0);
	H_TRUE(expect_timeout(&c, rd, t0 + IDLE_MS * H_MS, H_WAIT_MS) >= 0,
	       "the shorter duration did not replace the longer one");
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9: an idle period that passes with nothing pending reports
 * nothing, and the next op starts a new one: it ends a full period after
 * that op's submission, not after the arming. */
static void test_idle_nothing_pending(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	H_EQ(tl_idle_deadline(l, srv, IDLE_MS * H_MS), 0);
	uint32_t mark = c.log.n;
	h_idle(&c, (int)(2 * IDLE_MS));
	H_EQ(on_handle(&c, srv, mark), 0);
	uint64_t t1 = tl_now(l);
	tl_op rd;
	H_EQ(tl_read_pooled(l, srv, 1, &rd), 0);
	H_TRUE(expect_timeout(&c, rd, t1 + IDLE_MS * H_MS, H_WAIT_MS) >= 0,
	       "the read submitted after the period lapsed was not covered");
	H_EQ(h_count_op(&c.log, rd, 0), 1);
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9: a read deadline ends a read that got nothing by then with
 * -ETIMEDOUT, not before it, once; the stream stays usable. A read that
 * gets its bytes in time completes once and the deadline passes silently;
 * a cleared deadline never fires. */
static void test_read_deadline(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t buf[16];
	tl_op rd;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rd), 0);
	uint64_t at = in_ms(l, IDLE_MS);
	H_EQ(tl_read_deadline(l, rd, at), 0);
	H_TRUE(expect_timeout(&c, rd, at, H_WAIT_MS) >= 0, "the read deadline did not fire");
	h_idle(&c, (int)IDLE_MS);
	H_EQ(h_count_op(&c.log, rd, 0), 1);
	/* In time: the bytes win, the deadline passes without a word. */
	H_EQ(tl_read(l, srv, buf, sizeof buf, 2, &rd), 0);
	at = in_ms(l, 2 * IDLE_MS);
	H_EQ(tl_read_deadline(l, rd, at), 0);
	static const uint8_t m[4] = {1, 2, 3, 4};
	H_EQ(h_write_all(&c, cli, m, sizeof m), (int64_t)sizeof m);
	int i = h_wait_op(&c, rd);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, (int64_t)sizeof m);
		H_EQ(memcmp(buf, m, sizeof m), 0);
	}
	/* Past the deadline, and a period more. */
	h_idle(&c, (int)(3 * IDLE_MS));
	H_TRUE(tl_now(l) > at, "the loop's clock did not pass the deadline");
	H_EQ(h_count_op(&c.log, rd, 0), 1);
	/* Moved later, then cleared: it never fires. */
	H_EQ(tl_read_pooled(l, srv, 3, &rd), 0);
	H_EQ(tl_read_deadline(l, rd, in_ms(l, IDLE_MS)), 0);
	H_EQ(tl_read_deadline(l, rd, in_ms(l, 2 * IDLE_MS)), 0);
	H_EQ(tl_read_deadline(l, rd, 0), 0);
	h_idle(&c, (int)(3 * IDLE_MS));
	H_EQ(h_count_op(&c.log, rd, 0), 0);
	H_EQ(h_write_all(&c, cli, m, sizeof m), (int64_t)sizeof m);
	i = h_wait_op(&c, rd);
	if (i >= 0)
		H_EQ(c.log.v[i].result, (int64_t)sizeof m);
	h_release_leases(&c, 0);
	/* A deadline already past acts at the next turn. */
	H_EQ(tl_read(l, srv, buf, sizeof buf, 4, &rd), 0);
	H_EQ(tl_read_deadline(l, rd, 1), 0);
	H_TRUE(expect_timeout(&c, rd, tl_now(l), H_WAIT_MS) >= 0, "a past deadline did not fire");
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9 with 2.5: a read deadline does not move with data. A
 * tl_read_start read that gets bytes every few ms ends with -ETIMEDOUT at
 * its deadline; every byte the kernel had taken before came first, in
 * order, and the rest is read afterwards: nothing is lost. */
static void test_read_deadline_multishot(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	uint8_t *stream = malloc(1 << 16);
	CU_ASSERT_PTR_NOT_NULL_FATAL(stream);
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op rs;
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	uint64_t at = in_ms(l, 2 * IDLE_MS);
	H_EQ(tl_read_deadline(l, rs, at), 0);
	uint64_t sent = 0, got = 0, last = 0;
	uint8_t msg[16];
	uint32_t from = 0;
	uint64_t wall = h_wall_ns() + (uint64_t)(2 * IDLE_MS + H_WAIT_MS) * H_MS;
	while (h_find_term(&c.log, rs) < 0 && h_wall_ns() < wall && sent + sizeof msg <= 1 << 16) {
		if (tl_now(l) >= last + 5 * H_MS) {
			fill_pattern(msg, sizeof msg, sent);
			tl_op w;
			H_EQ_FATAL(tl_write(l, cli, msg, sizeof msg, 2, &w), 0);
			last = tl_now(l);
			sent += sizeof msg;
		}
		h_turn(&c, (int64_t)H_MS);
		collect(&c, rs, &from, stream, 1 << 16, &got);
	}
	collect(&c, rs, &from, stream, 1 << 16, &got);
	int i = h_find_term(&c.log, rs);
	H_TRUE_FATAL(i >= 0, "the multishot read outlived its deadline");
	H_EQ(c.log.v[i].result, -ETIMEDOUT);
	H_TRUE(tl_now(l) >= at, "ended before its deadline");
	H_TRUE(got > 0, "no data came before the deadline");
	H_EQ(h_count_op(&c.log, rs, (uint32_t)i + 1), 0);
	/* The rest is still in the socket. */
	H_TRUE(got <= sent, "read %llu of %llu bytes sent", (unsigned long long)got,
	       (unsigned long long)sent);
	if (got < sent && sent <= 1 << 16)
		H_EQ(h_read_exact(&c, srv, stream + got, (uint32_t)(sent - got), NULL),
		     (int64_t)(sent - got));
	if (sent <= 1 << 16)
		H_EQ(check_pattern(stream, (size_t)sent, 0), -1);
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	free(stream);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9: tl_udp_recv takes a read deadline too; the socket receives
 * the next datagram afterwards. */
static void test_read_deadline_udp(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_addr a, b;
	h_loopback(&a, AF_INET, 0);
	tl_handle ua, ub;
	H_EQ_FATAL(tl_udp_bind(l, &a, &ua), 0);
	H_EQ_FATAL(tl_udp_bind(l, &a, &ub), 0);
	H_EQ_FATAL(tl_local_addr(l, ua, &a), 0);
	H_EQ_FATAL(tl_local_addr(l, ub, &b), 0);
	uint8_t buf[32];
	tl_op rv;
	H_EQ(tl_udp_recv(l, ua, buf, sizeof buf, 1, &rv), 0);
	uint64_t at = in_ms(l, IDLE_MS);
	H_EQ(tl_read_deadline(l, rv, at), 0);
	H_TRUE(expect_timeout(&c, rv, at, H_WAIT_MS) >= 0, "the receive deadline did not fire");
	H_EQ(tl_udp_recv(l, ua, buf, sizeof buf, 2, &rv), 0);
	H_EQ(tl_read_deadline(l, rv, in_ms(l, 20 * IDLE_MS)), 0);
	static const uint8_t m[6] = {6, 5, 4, 3, 2, 1};
	tl_op sd;
	H_EQ(tl_udp_send(l, ub, m, sizeof m, &a, 3, &sd), 0);
	int i = h_wait_op(&c, rv);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, (int64_t)sizeof m);
		H_EQ(memcmp(buf, m, sizeof m), 0);
		H_TRUE(h_addr_eq(&c.log.v[i].u.recv.from, &b), "wrong source");
	}
	h_wait_op(&c, sd);
	h_close(&c, ua, 4);
	h_close(&c, ub, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.9 (error table): stale, foreign and never-issued ids are -ENOENT;
 * a handle that is not a stream, a closing stream, an absurd duration and
 * an op that is not a read are -EINVAL; a read whose end was already asked
 * for is -EALREADY, and -ENOENT once its terminal was delivered. */
static void test_deadline_errors(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_loop *other = h_loop();
	H_EQ(tl_idle_deadline(l, TL_HANDLE_NONE, 1), -ENOENT);
	H_EQ(tl_read_deadline(l, TL_OP_NONE, 1), -ENOENT);
	tl_handle t;
	tl_op top;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600 * 1000), 0, 1, &t, &top), 0);
	H_EQ(tl_idle_deadline(l, t, H_MS), -EINVAL);
	H_EQ(tl_read_deadline(l, top, in_ms(l, 1)), -EINVAL);
	h_close(&c, t, 2);
	H_EQ(tl_idle_deadline(l, t, H_MS), -ENOENT);
	H_EQ(tl_read_deadline(l, top, 1), -ENOENT);
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, srv, cli;
	tl_addr la;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_idle_deadline(l, lis, H_MS), -EINVAL);
	h_close(&c, lis, 3);
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	/* Foreign: the other loop refuses ids of this one. */
	H_EQ(tl_idle_deadline(other, srv, H_MS), -ENOENT);
	H_EQ(tl_idle_deadline(l, srv, (1ull << 62) + 1), -EINVAL);
	H_EQ(tl_idle_deadline(l, srv, 1ull << 62), 0);
	H_EQ(tl_idle_deadline(l, srv, 0), 0);
	uint8_t buf[8] = {0};
	tl_op rd, wr, sh;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 4, &rd), 0);
	H_EQ(tl_read_deadline(other, rd, 1), -ENOENT);
	H_EQ(tl_write(l, cli, buf, sizeof buf, 5, &wr), 0);
	H_EQ(tl_read_deadline(l, wr, in_ms(l, 1000)), -EINVAL);
	int i = h_wait_op(&c, wr);
	if (i >= 0)
		H_EQ(c.log.v[i].result, (int64_t)sizeof buf);
	H_EQ(tl_read_deadline(l, wr, 1), -ENOENT); /* delivered */
	/* The read completes with the bytes. */
	i = h_wait_op(&c, rd);
	if (i >= 0)
		H_EQ(c.log.v[i].result, (int64_t)sizeof buf);
	/* A cancelled read: -EALREADY until its terminal is delivered (some
	 * drivers acknowledge at once: the terminal is queued, not handed
	 * out), -ENOENT after. */
	H_EQ(tl_read(l, srv, buf, sizeof buf, 7, &rd), 0);
	H_EQ(tl_cancel(l, rd), 0);
	H_EQ(tl_read_deadline(l, rd, in_ms(l, 1000)), -EALREADY);
	i = h_wait_op(&c, rd);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	H_EQ(tl_read_deadline(l, rd, 1), -ENOENT);
	H_EQ(tl_shutdown(l, cli, 6, &sh), 0);
	H_EQ(tl_read_deadline(l, sh, in_ms(l, 1000)), -EINVAL);
	h_wait_op(&c, sh);
	/* Closing: refused. */
	H_EQ(tl_close(l, srv, 8), 0);
	H_EQ(tl_idle_deadline(l, srv, H_MS), -EINVAL);
	h_wait_closed(&c, srv);
	H_EQ(tl_idle_deadline(l, srv, H_MS), -ENOENT);
	h_close(&c, cli, 9);
out:
	h_drain_close(other);
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_deadlines[] = {
	T("4.9 deadlines", test_idle_fires_once),
	T("4.9 deadlines", test_idle_busy_does_not_fire),
	T("4.9 deadlines", test_idle_cleared_and_replaced),
	T("4.9 deadlines", test_idle_nothing_pending),
	T("4.9 deadlines", test_read_deadline),
	T("4.9 deadlines", test_read_deadline_multishot),
	T("4.9 deadlines", test_read_deadline_udp),
	T("4.9 deadlines", test_deadline_errors),
	{ NULL, NULL, NULL },
};
