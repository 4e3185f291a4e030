/* tests/contract_caps.c: contract 4.10 (per-stream caps: one stream never holds the loop's leases hostage) and the backpressure of 14.5, on every driver. */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>

/* An echo server written the usual way: each read's lease is written back
 * and released when its write completes (tlecho's shape). */
struct echo {
	h_ctx *c;
	uint32_t from;
	tl_handle conns[4];
	int nconns;
	uint64_t echoed;
};

static void serve(struct echo *e)
{
	tl_loop *l = e->c->loop;
	for (; e->from < e->c->log.n; e->from++) {
		tl_completion *x = &e->c->log.v[e->from];
		tl_op op;
		switch (x->kind) {
		case TL_K_ACCEPT:
			if (x->result >= 0 && !(x->flags & TL_F_TERMINAL) && e->nconns < 4) {
				e->conns[e->nconns++] = x->u.accept.conn;
				H_EQ(tl_read_start(l, x->u.accept.conn, 0xec, &op), 0);
			}
			break;
		case TL_K_READ:
			if (x->result > 0 && (x->flags & TL_F_LEASE)) {
				x->flags &= (uint16_t)~TL_F_LEASE; /* the write's now */
				if (tl_write(l, x->handle, x->u.read.lease.data, (uint32_t)x->result,
					     x->u.read.lease.id, &op) < 0)
					H_EQ(tl_lease_release(l, x->u.read.lease.id), 0);
			}
			break;
		case TL_K_WRITE:
			if (x->result > 0)
				e->echoed += (uint64_t)x->result;
			H_EQ(tl_lease_release(l, (uint32_t)x->token), 0);
			break;
		default:
			break;
		}
	}
}

/* Turn both sides (cb turns ca too: linked) and serve, until op's terminal
 * is in cb's log or ms pass: its index or -1. */
static int wait_serving(h_ctx *cb, struct echo *e, tl_op op, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	for (;;) {
		int i = h_find_term(&cb->log, op);
		if (i >= 0)
			return i;
		if (h_wall_ns() >= dl)
			return -1;
		h_turn(cb, (int64_t)H_MS);
		serve(e);
	}
}

/* Rule 4.10: a peer that sends but never reads, and a ping-pong client, on
 * one loop with 32 pooled buffers and a cap of 8 leases per stream. The slow
 * peer's echoes back up and its stream pauses at its cap; the other client's
 * round trips keep coming, each within a bound; the pause shows in the
 * stats; and once the slow peer reads, its stream resumes and every byte of
 * it comes back in order. (Without caps the slow stream held every lease and
 * the other client got nothing.) */
static void test_slow_reader_slows_only_itself(void)
{
	/* More than loopback's socket buffers (a few MiB each way) absorb. */
	enum { BIG = 24 << 20, RT = 100, MSG = 64 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = 32;
	cfg.pooled_buffer_size = 4096;
	cfg.handle_leases = 8;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	/* The peers' loop writes more than its write cap in one go and must
	 * go on reading meanwhile (a full-duplex peer): it lifts the cap. */
	tl_config pcfg = cfg_default();
	pcfg.handle_write_bytes = 1ull << 40;
	h_ctx_init(&cb, h_loop_cfg(&pcfg));
	h_ctx_link(&cb, &ca);
	tl_loop *a = ca.loop, *b = cb.loop;
	struct echo e = {.c = &ca};
	uint8_t *big = malloc(BIG), *back = malloc(BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	CU_ASSERT_PTR_NOT_NULL_FATAL(back);
	fill_pattern(big, BIG, 0);
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	tl_handle lis, slow, fast;
	tl_addr la;
	tl_op aop, c1, c2, wbig;
	H_EQ_FATAL(h_listen(&ca, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept_start(a, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 2, &slow, &c1), 0);
	H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 3, &fast, &c2), 0);
	H_TRUE_FATAL(wait_serving(&cb, &e, c1, H_WAIT_MS) >= 0, "slow connect");
	H_TRUE_FATAL(wait_serving(&cb, &e, c2, H_WAIT_MS) >= 0, "fast connect");
	/* The slow peer sends a lot and reads nothing. */
	H_EQ(tl_write(b, slow, big, BIG, 4, &wbig), 0);
	/* Until the kernel's buffers are full and the slow stream stays
	 * paused at its cap (it pauses and resumes while they fill). */
	/* Still means 50 turns and 200 ms with the stream paused and nothing
	 * more echoed: on a loaded machine 50 turns can pass while the
	 * buffers are still growing with the connection's window. */
	int still = 0;
	uint64_t until = h_wall_ns() + 10000 * H_MS * (uint64_t)h_slow();
	uint64_t quiet = h_wall_ns(), seen = e.echoed;
	while ((still < 50 || h_wall_ns() - quiet < 200 * H_MS) && h_wall_ns() < until) {
		h_turn(&cb, (int64_t)H_MS);
		serve(&e);
		int paused = stats(a).paused != 0;
		still = paused && e.echoed == seen ? still + 1 : 0;
		if (!still)
			quiet = h_wall_ns();
		seen = e.echoed;
	}
	H_TRUE(still >= 50, "the slow stream never stayed paused (echoed %llu bytes)",
	       (unsigned long long)e.echoed);
	uint8_t msg[MSG], got[MSG];
	int done = 0;
	uint64_t worst = 0;
	for (int r = 0; r < RT; r++) {
		fill_pattern(msg, MSG, (uint64_t)r);
		uint64_t t0 = h_wall_ns();
		tl_op w, rd;
		H_EQ_FATAL(tl_write(b, fast, msg, MSG, 5, &w), 0);
		uint32_t have = 0;
		int ok = 1;
		while (have < MSG && ok) {
			H_EQ_FATAL(tl_read(b, fast, got + have, MSG - have, 6, &rd), 0);
			int i = wait_serving(&cb, &e, rd, 2000 * h_slow());
			if (i < 0 || cb.log.v[i].result <= 0)
				ok = 0;
			else
				have += (uint32_t)cb.log.v[i].result;
		}
		if (!ok || wait_serving(&cb, &e, w, 1000) < 0)
			break;
		H_EQ(memcmp(got, msg, MSG), 0);
		uint64_t dt = h_wall_ns() - t0;
		worst = dt > worst ? dt : worst;
		done++;
	}
	H_EQ(done, RT);
	printf("\n  %d round trips beside a slow reader, the slowest %.2f ms\n", done,
	       (double)worst / 1e6);
	/* The kernel may still have taken some of the echo meanwhile (a
	 * stream resumes for as long as it does), but with its peer reading
	 * nothing the slow stream is at its cap again within a wait. */
	uint64_t pdl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!stats(a).paused && h_wall_ns() < pdl) {
		h_turn(&cb, (int64_t)H_MS);
		serve(&e);
	}
	tl_loop_stats st = stats(a);
	H_TRUE(st.pauses >= 1, "the slow stream was never paused");
	H_TRUE(st.paused >= 1, "no stream is paused while the slow peer reads nothing");
	H_TRUE(st.leases_out <= cfg.handle_leases,
	       "%u leases out: the slow stream holds more than its cap", st.leases_out);
	/* The slow peer reads at last: its stream resumes, every byte returns. */
	uint64_t n = 0;
	int wrong = 0;
	tl_op rs;
	H_EQ(tl_read_start(b, slow, 7, &rs), 0);
	uint32_t from = cb.log.n;
	uint64_t dl = h_wall_ns() + 20000 * H_MS * (uint64_t)h_slow();
	while (n < BIG && h_wall_ns() < dl) {
		h_turn(&cb, (int64_t)H_MS);
		serve(&e);
		for (; from < cb.log.n; from++) {
			tl_completion *x = &cb.log.v[from];
			if (x->op.v != rs.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
				continue;
			if (n + (uint64_t)x->result > BIG ||
			    check_pattern(x->u.read.lease.data, (size_t)x->result, n) >= 0)
				wrong++;
			else
				memcpy(back + n, x->u.read.lease.data, (size_t)x->result);
			n += (uint64_t)x->result;
			H_EQ(tl_lease_release(b, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	H_EQ(n, BIG);
	H_EQ(wrong, 0);
	H_TRUE(wait_serving(&cb, &e, wbig, H_WAIT_MS) >= 0, "the slow peer's write never completed");
	H_EQ(stats(a).paused, 0);
	H_EQ(tl_stop(b, rs), 0);
	wait_serving(&cb, &e, rs, H_WAIT_MS);
	h_release_leases(&cb, 0);
	/* Close everything, still serving so that cancelled writes give their
	 * leases back. */
	for (int k = 0; k < e.nconns; k++)
		H_EQ(tl_close(a, e.conns[k], 10), 0);
	H_EQ(tl_close(a, lis, 11), 0);
	H_EQ(tl_close(b, slow, 12), 0);
	H_EQ(tl_close(b, fast, 13), 0);
	for (int k = 0; k < 200 && (tl_alive(a) || tl_alive(b)); k++) {
		h_turn(&cb, (int64_t)H_MS);
		serve(&e);
	}
out:
	free(big);
	free(back);
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 4.10 (14.5): a lease counts against the stream it was read from until
 * the host releases it, and queued write bytes count against the stream
 * they are written to. Over either cap the stream's reads pause, a write is
 * never refused, and releasing (or the write completing) resumes them. */
static void test_caps_count_and_resume(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.handle_leases = 2;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op rs;
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	/* Two messages, two leases held: the stream is at its cap. */
	uint8_t m[3] = {1, 2, 3};
	uint32_t held[2];
	int nheld = 0;
	for (int k = 0; k < 2; k++) {
		uint32_t from = c.log.n;
		H_EQ(h_write_all(&c, cli, &m[k], 1), 1);
		for (int w = 0; w < 200 && nheld == k; w++) {
			h_turn(&c, (int64_t)H_MS);
			for (uint32_t j = from; j < c.log.n; j++)
				if (c.log.v[j].op.v == rs.v && (c.log.v[j].flags & TL_F_LEASE)) {
					held[nheld++] = c.log.v[j].u.read.lease.id;
					c.log.v[j].flags &= (uint16_t)~TL_F_LEASE;
				}
			from = c.log.n;
		}
	}
	H_EQ_FATAL(nheld, 2);
	H_EQ(stats(l).paused, 1);
	/* A third message stays in the socket while the stream is paused. */
	uint32_t mark = c.log.n;
	H_EQ(h_write_all(&c, cli, &m[2], 1), 1);
	h_idle(&c, 30);
	H_EQ(h_count_op(&c.log, rs, mark), 0);
	/* A write is never refused for a cap. */
	tl_op w;
	H_EQ(tl_write(l, srv, m, 1, 9, &w), 0);
	H_TRUE(h_wait_op(&c, w) >= 0, "write");
	/* One release: under the cap again, the third byte arrives. */
	H_EQ(tl_lease_release(l, held[0]), 0);
	for (int k = 0; k < 200 && h_count_op(&c.log, rs, mark) == 0; k++)
		h_turn(&c, (int64_t)H_MS);
	H_EQ(h_count_op(&c.log, rs, mark), 1);
	H_EQ(tl_lease_release(l, held[1]), 0);
	h_release_leases(&c, mark);
	/* Write bytes: a cap of 1 byte, a write queued behind a full socket
	 * would hold it; a plain small write completes at once and the stream
	 * stays readable, so check the accounting through tl_handle_caps. */
	H_EQ(tl_handle_caps(l, srv, 0, 1), 0);
	H_EQ(tl_handle_caps(l, srv, 100000, 0), -EINVAL);
	H_EQ(tl_handle_caps(l, TL_HANDLE_NONE, 1, 1), -ENOENT);
	H_EQ(stats(l).paused, 0);
	H_EQ(tl_stop(l, rs), 0);
	h_wait_op(&c, rs);
	h_release_leases(&c, 0);
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- Caps by construction, and the pool's reservations ---- */

enum { NS = 8 };

/* A server of tests below on one loop: stream i's reads (read_start) go to
 * dst[i] (a forwarder, tlproxy's shape: the read side is never answered) or
 * back to src[i] itself (an echo: dst[i] == src[i]). Each lease is held
 * until its write completes; the leases each source holds are counted here
 * at every completion, and the most it ever held is kept. */
struct srv {
	h_ctx *c;
	uint32_t from;
	int n;
	tl_handle src[NS], dst[NS];
	uint32_t held[NS], max_held[NS];
	uint64_t moved[NS];
	int errors;
};

static int srv_index(const struct srv *s, tl_handle h)
{
	for (int i = 0; i < s->n; i++)
		if (s->src[i].v == h.v)
			return i;
	return -1;
}

static void srv_run(struct srv *s)
{
	tl_loop *l = s->c->loop;
	for (; s->from < s->c->log.n; s->from++) {
		tl_completion *x = &s->c->log.v[s->from];
		tl_op op;
		if (x->kind == TL_K_READ && (x->flags & TL_F_LEASE)) {
			int i = srv_index(s, x->handle);
			if (i < 0) {
				s->errors++;
				continue;
			}
			x->flags &= (uint16_t)~TL_F_LEASE; /* the write's now */
			if (++s->held[i] > s->max_held[i])
				s->max_held[i] = s->held[i];
			if (tl_write(l, s->dst[i], x->u.read.lease.data, (uint32_t)x->result,
				     (uint64_t)i << 32 | x->u.read.lease.id, &op) < 0) {
				s->errors++;
				s->held[i]--;
				H_EQ(tl_lease_release(l, x->u.read.lease.id), 0);
			}
		} else if (x->kind == TL_K_WRITE && (x->token >> 32) < (uint64_t)s->n) {
			int i = (int)(x->token >> 32);
			if (x->result > 0)
				s->moved[i] += (uint64_t)x->result;
			s->held[i]--;
			H_EQ(tl_lease_release(l, (uint32_t)x->token), 0);
		}
	}
}

/* Turn (both linked loops) and serve for about ms. */
static void srv_for(struct srv *s, int ms)
{
	uint64_t until = h_wall_ns() + (uint64_t)ms * H_MS;
	while (h_wall_ns() < until) {
		h_turn(s->c->peer, (int64_t)H_MS);
		srv_run(s);
	}
}

/* Small socket buffers on both ends of a pair, so that a few MiB wedge a
 * stream whose peer does not read (where the driver has socket options). */
static void small_buffers(tl_loop *a, tl_handle x, tl_loop *b, tl_handle y)
{
	tl_sockopt_set(a, x, TL_SO_RCVBUF, 65536);
	tl_sockopt_set(a, x, TL_SO_SNDBUF, 65536);
	tl_sockopt_set(b, y, TL_SO_RCVBUF, 65536);
	tl_sockopt_set(b, y, TL_SO_SNDBUF, 65536);
}

/* Rule 4.10, by construction: a stream never holds more leases than its
 * cap, even when its peer floods and its reads have nowhere to go. A
 * forwarder (the read side is never answered, so on io_uring its read is
 * fed: a recv armed after each message) copies a peer's 8 MiB to a second
 * peer that does not read; the source's held leases, counted at every
 * completion, never pass the cap of 8, though the pool has 64. Then the
 * second peer reads and every byte arrives in order. (Before, io_uring's
 * multishot receive drained the socket into the shared buffer ring before
 * the cap's pause could cancel it, and the source held most of the pool.) */
static void test_cap_holds_when_peer_floods(void)
{
	enum { CAP = 8, FIRST = 10, BIG = 8 << 20 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = 64;
	cfg.pooled_buffer_size = 4096;
	cfg.handle_leases = CAP;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	tl_config pcfg = cfg_default();
	pcfg.handle_write_bytes = 1ull << 40; /* the peers write BIG in one go */
	h_ctx_init(&cb, h_loop_cfg(&pcfg));
	h_ctx_link(&cb, &ca);
	tl_loop *a = ca.loop, *b = cb.loop;
	struct srv s = {.c = &ca, .n = 1};
	uint8_t *big = malloc(FIRST + BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	fill_pattern(big, FIRST + BIG, 0);
	tl_handle srcC = TL_HANDLE_NONE, dstC = TL_HANDLE_NONE;
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &s.src[0], &srcC), 0);
	H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &s.dst[0], &dstC), 0);
	small_buffers(a, s.src[0], b, srcC);
	small_buffers(a, s.dst[0], b, dstC);
	s.from = ca.log.n;
	tl_op rs, w1, w2;
	H_EQ(tl_read_start(a, s.src[0], 1, &rs), 0);
	/* A short message first: the read is not answered, so it is fed. */
	H_EQ(tl_write(b, srcC, big, FIRST, 2, &w1), 0);
	for (int k = 0; k < 200 && s.moved[0] < FIRST; k++)
		srv_for(&s, 1);
	H_EQ_FATAL(s.moved[0], FIRST);
	srv_for(&s, 20);
	/* The flood, to a peer that reads nothing. */
	H_EQ(tl_write(b, srcC, big + FIRST, BIG, 3, &w2), 0);
	int still = 0;
	uint64_t until = h_wall_ns() + 10000 * H_MS * (uint64_t)h_slow();
	while (still < 50 && h_wall_ns() < until) {
		h_turn(&cb, (int64_t)H_MS);
		srv_run(&s);
		still = stats(a).paused ? still + 1 : 0;
	}
	H_TRUE(still >= 50, "the source never stayed paused (moved %llu bytes)",
	       (unsigned long long)s.moved[0]);
	printf("\n  flooded source: held at most %u leases (cap %d, pool %u), %u held now\n",
	       s.max_held[0], CAP, cfg.pooled_buffers, s.held[0]);
	H_TRUE(s.max_held[0] <= CAP, "the source held %u leases, its cap is %d", s.max_held[0],
	       CAP);
	H_TRUE(stats(a).leases_out <= CAP, "%u leases out", stats(a).leases_out);
	/* The second peer reads: everything arrives, in order. */
	tl_op rd;
	H_EQ(tl_read_start(b, dstC, 4, &rd), 0);
	uint64_t got = 0;
	int wrong = 0;
	uint32_t from = cb.log.n;
	until = h_wall_ns() + 20000 * H_MS * (uint64_t)h_slow();
	while (got < FIRST + BIG && h_wall_ns() < until) {
		h_turn(&cb, (int64_t)H_MS);
		srv_run(&s);
		for (; from < cb.log.n; from++) {
			tl_completion *x = &cb.log.v[from];
			if (x->op.v != rd.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
				continue;
			if (got + (uint64_t)x->result > FIRST + BIG ||
			    check_pattern(x->u.read.lease.data, (size_t)x->result, got) >= 0)
				wrong++;
			got += (uint64_t)x->result;
			H_EQ(tl_lease_release(b, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	H_EQ(got, FIRST + BIG);
	H_EQ(wrong, 0);
	H_EQ(s.errors, 0);
	H_TRUE(s.max_held[0] <= CAP, "the source held %u leases, its cap is %d", s.max_held[0],
	       CAP);
	H_TRUE(h_wait_op(&cb, w2) >= 0, "the flood's write never completed");
	H_EQ(tl_stop(b, rd), 0);
	h_wait_op(&cb, rd);
	H_EQ(tl_stop(a, rs), 0);
	h_wait_op(&ca, rs);
	srv_run(&s);
	h_release_leases(&cb, 0);
	H_EQ(tl_close(a, s.src[0], 10), 0);
	H_EQ(tl_close(a, s.dst[0], 11), 0);
	H_EQ(tl_close(b, srcC, 12), 0);
	H_EQ(tl_close(b, dstC, 13), 0);
	for (int k = 0; k < 200 && (tl_alive(a) || tl_alive(b)); k++)
		srv_for(&s, 1);
out:
	free(big);
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 4.10, the pool: stalled streams cannot starve the others. An echo
 * server on a loop with 16 pooled buffers and a cap of 8; four peers send
 * 4 MiB each and read nothing (each would hold its cap of 8: two of them
 * would hold the whole pool), one peer does round trips. Every stream that
 * reads has a lease reserved, and the stalled ones share what is left
 * beyond the reservations, so the round trips keep coming, each within a
 * bound, while the stalled streams hold all the pool can spare and none
 * more than its cap. */
static void test_stalled_streams_cannot_starve(void)
{
	enum { CAP = 8, POOL = 16, STALLED = 4, BIG = 4 << 20, RT = 50, MSG = 64 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = POOL;
	cfg.pooled_buffer_size = 4096;
	cfg.handle_leases = CAP;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	tl_config pcfg = cfg_default();
	pcfg.handle_write_bytes = 1ull << 40;
	h_ctx_init(&cb, h_loop_cfg(&pcfg));
	h_ctx_link(&cb, &ca);
	tl_loop *a = ca.loop, *b = cb.loop;
	struct srv s = {.c = &ca, .n = STALLED + 1};
	tl_handle cli[STALLED + 1];
	tl_op rs[STALLED + 1], wbig[STALLED];
	uint8_t *big = malloc(BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	fill_pattern(big, BIG, 0);
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	for (int i = 0; i <= STALLED; i++) {
		H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &s.src[i], &cli[i]), 0);
		s.dst[i] = s.src[i];
		small_buffers(a, s.src[i], b, cli[i]);
	}
	s.from = ca.log.n;
	for (int i = 0; i <= STALLED; i++)
		H_EQ(tl_read_start(a, s.src[i], 1, &rs[i]), 0);
	for (int i = 0; i < STALLED; i++)
		H_EQ(tl_write(b, cli[i], big, BIG, 2, &wbig[i]), 0);
	/* Until the stalled streams hold what the pool can spare: all of it
	 * but the lease reserved for the one that does round trips. */
	int still = 0;
	uint64_t until = h_wall_ns() + 10000 * H_MS * (uint64_t)h_slow();
	while (still < 50 && h_wall_ns() < until) {
		h_turn(&cb, (int64_t)H_MS);
		srv_run(&s);
		still = stats(a).leases_out >= POOL - 1 ? still + 1 : 0;
	}
	H_TRUE(still >= 50, "the stalled streams never took the pool (%u leases out)",
	       stats(a).leases_out);
	uint8_t msg[MSG], got[MSG];
	int done = 0;
	uint64_t worst = 0;
	tl_handle fast = cli[STALLED];
	for (int r = 0; r < RT; r++) {
		fill_pattern(msg, MSG, (uint64_t)r);
		uint64_t t0 = h_wall_ns();
		tl_op w, rd;
		H_EQ_FATAL(tl_write(b, fast, msg, MSG, 5, &w), 0);
		uint32_t have = 0;
		int ok = 1;
		while (have < MSG && ok) {
			H_EQ_FATAL(tl_read(b, fast, got + have, MSG - have, 6, &rd), 0);
			uint64_t dl = h_wall_ns() + 2000 * H_MS * (uint64_t)h_slow();
			int i = -1;
			while ((i = h_find_term(&cb.log, rd)) < 0 && h_wall_ns() < dl) {
				h_turn(&cb, (int64_t)H_MS);
				srv_run(&s);
			}
			if (i < 0) {
				tl_cancel(b, rd);
				h_wait_op(&cb, rd);
				ok = 0;
			} else if (cb.log.v[i].result <= 0) {
				ok = 0;
			} else {
				have += (uint32_t)cb.log.v[i].result;
			}
		}
		if (!ok || h_wait_op_ms(&cb, w, 1000) < 0)
			break;
		H_EQ(memcmp(got, msg, MSG), 0);
		uint64_t dt = h_wall_ns() - t0;
		worst = dt > worst ? dt : worst;
		done++;
	}
	uint32_t most = 0;
	for (int i = 0; i < STALLED; i++)
		most = s.max_held[i] > most ? s.max_held[i] : most;
	printf("\n  %d round trips beside %d stalled streams (the most one held: %u, %u out), "
	       "the slowest %.2f ms\n",
	       done, STALLED, most, stats(a).leases_out, (double)worst / 1e6);
	H_EQ(done, RT);
	for (int i = 0; i <= STALLED; i++)
		H_TRUE(s.max_held[i] <= CAP, "stream %d held %u leases, its cap is %d", i,
		       s.max_held[i], CAP);
	H_EQ(s.errors, 0);
	/* Close everything, still serving so that cancelled writes give their
	 * leases back. */
	for (int i = 0; i <= STALLED; i++) {
		H_EQ(tl_close(a, s.src[i], 10), 0);
		H_EQ(tl_close(b, cli[i], 11), 0);
	}
	for (int k = 0; k < 400 && (tl_alive(a) || tl_alive(b)); k++)
		srv_for(&s, 1);
out:
	free(big);
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

const struct test_def tl_contract_caps[] = {
	T("4.10 caps", test_slow_reader_slows_only_itself),
	T("4.10 caps", test_caps_count_and_resume),
	T("4.10 caps", test_cap_holds_when_peer_floods),
	T("4.10 caps", test_stalled_streams_cannot_starve),
	{ NULL, NULL, NULL },
};
