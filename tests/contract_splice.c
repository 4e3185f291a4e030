/* tests/contract_splice.c: contract 4.11 (splice stream to stream, sendfile file to stream: order with writes, end, cancel, close, the pipe pool) on every driver. */
#include "contract.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <CUnit/CUnit.h>
#include "tl_config.h"
#include "privs.h"
#if TL_HAVE_VALGRIND
#include <valgrind/valgrind.h>
#endif

/*
 * The rig of every test here: the loop under test (L) splices from a
 * stream it accepted (a, whose peer prod is on a second loop P of the same
 * driver) to a stream it connected (b, accepted on P as cons). Both loops
 * turn together (linked contexts). Bytes are the test pattern by stream
 * offset, so every check of what arrived also checks its order.
 */

#define FNV_OFF 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= FNV_PRIME;
	}
	return h;
}

/* The 256 MiB of the big transfer, less where the build is slow:
 * $TL_SPLICE_MIB, else 16 MiB under TL_TEST_SLOW, ASan or valgrind. */
static uint64_t big_bytes(void)
{
	const char *e = getenv("TL_SPLICE_MIB");
	if (e && atoi(e) > 0)
		return (uint64_t)atoi(e) << 20;
	int slow = h_slow() > 1;
#if defined(__SANITIZE_ADDRESS__)
	slow = 1;
#endif
#if TL_HAVE_VALGRIND
	if (RUNNING_ON_VALGRIND)
		slow = 1;
#endif
	return (slow ? 16ull : 256ull) << 20;
}

struct rig {
	h_ctx cl, cp;       /* L (under test) and P (the peers) */
	tl_handle a, b;     /* on L: accepted from prod, connected to cons */
	tl_handle prod, cons;
	int up;
	/* The consumer on P (consume()): reads cons into leases when on. */
	tl_op crd;
	int reading, ceof;
	int64_t cend;       /* the consumer read's terminal result */
	uint64_t cgot, coff, chash; /* bytes, pattern offset of the first, FNV */
	int cwrong;         /* bytes off the pattern (when coff is not NO_CHECK) */
	uint8_t *keep;      /* when set, the bytes are copied here too */
	size_t keep_cap;
	uint32_t pfrom;
};
#define NO_CHECK UINT64_MAX

static int rig_up(struct rig *r, const tl_config *lcfg)
{
	memset(r, 0, sizeof *r);
	h_ctx_init(&r->cl, lcfg ? h_loop_cfg(lcfg) : h_loop());
	h_ctx_init(&r->cp, h_loop());
	h_ctx_link(&r->cl, &r->cp);
	r->chash = FNV_OFF;
	if (!h_need_cap(r->cl.loop, TL_CAP_SPLICE))
		return 0;
	if (h_pair(&r->cl, &r->cp, AF_INET, &r->a, &r->prod) < 0 ||
	    h_pair(&r->cp, &r->cl, AF_INET, &r->cons, &r->b) < 0)
		return 0;
	r->up = 1;
	return 1;
}

/* Close what is open and check the two loops leak nothing. */
static void rig_down(struct rig *r, int fds)
{
	tl_loop *l = r->cl.loop, *p = r->cp.loop;
	if (r->up) {
		if (r->reading) {
			tl_stop(p, r->crd);
			h_wait_op(&r->cp, r->crd);
		}
		h_release_leases(&r->cp, 0);
		h_release_leases(&r->cl, 0);
		tl_close_all(l, 0xdead);
		tl_close_all(p, 0xdead);
	}
	r->cl.peer = r->cp.peer = NULL;
	h_ctx_fini(&r->cl);
	h_ctx_fini(&r->cp);
	h_drain_close(p);
	h_end(l, fds);
}

/* Take what the consumer's read brought (call after every turn). */
static void consume(struct rig *r)
{
	for (; r->pfrom < r->cp.log.n; r->pfrom++) {
		tl_completion *x = &r->cp.log.v[r->pfrom];
		if (!r->reading || x->op.v != r->crd.v)
			continue;
		if (x->result > 0 && (x->flags & TL_F_LEASE)) {
			const uint8_t *data = x->u.read.lease.data;
			size_t n = (size_t)x->result;
			r->chash = fnv(r->chash, data, n);
			if (r->coff != NO_CHECK && check_pattern(data, n, r->coff + r->cgot) >= 0)
				r->cwrong++;
			if (r->keep && r->cgot + n <= r->keep_cap)
				memcpy(r->keep + r->cgot, data, n);
			r->cgot += n;
			H_EQ(tl_lease_release(r->cp.loop, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
		if (x->flags & TL_F_TERMINAL) {
			r->reading = 0;
			r->ceof = (x->flags & TL_F_EOF) != 0;
			r->cend = x->result;
		}
	}
}

static void consumer_start(struct rig *r, uint64_t off)
{
	H_EQ_FATAL(tl_read_start(r->cp.loop, r->cons, 0xc0, &r->crd), 0);
	r->reading = 1;
	r->coff = off;
}

static void consumer_stop(struct rig *r)
{
	if (!r->reading)
		return;
	H_EQ(tl_stop(r->cp.loop, r->crd), 0);
	for (int k = 0; k < 200 && r->reading; k++) {
		h_turn(&r->cl, (int64_t)H_MS);
		consume(r);
	}
	H_EQ(r->reading, 0);
}

static void pump(struct rig *r, int64_t timeout_ns)
{
	h_turn(&r->cl, timeout_ns);
	consume(r);
}

/* Turn until op's terminal is in L's log (consuming meanwhile): its index
 * or -1 after ms (no failure recorded: callers say what they expected). */
static int wait_l(struct rig *r, tl_op op, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	for (;;) {
		int i = h_find_term(&r->cl.log, op);
		if (i >= 0 || h_wall_ns() >= dl)
			return i;
		pump(r, (int64_t)H_MS);
	}
}

/* The same for an op of P. */
static int wait_p(struct rig *r, tl_op op, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	for (;;) {
		int i = h_find_term(&r->cp.log, op);
		if (i >= 0 || h_wall_ns() >= dl)
			return i;
		pump(r, (int64_t)H_MS);
	}
}

/* Turn for ms of wall time, consuming. */
static void pump_ms(struct rig *r, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	while (h_wall_ns() < dl)
		pump(r, (int64_t)H_MS);
}

/* Consume until the consumer has want bytes or ms pass. */
static void consume_until(struct rig *r, uint64_t want, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	while (r->cgot < want && h_wall_ns() < dl)
		pump(r, (int64_t)H_MS);
}

static const tl_completion *term_of(struct rig *r, int i)
{
	return i >= 0 ? &r->cl.log.v[i] : NULL;
}

/* A completed splice or sendfile: kind, terminal, and the payload agreeing
 * with the result. */
static void check_done(const tl_completion *x, int64_t result)
{
	H_EQ(x->kind, TL_K_SPLICE);
	H_TRUE(x->flags & TL_F_TERMINAL, "not terminal");
	H_EQ(x->result, result);
	if (result >= 0) {
		H_EQ(x->u.splice.moved, (uint64_t)result);
		H_EQ(x->u.splice.taken, (uint64_t)result);
	}
}

/* ---- the big transfer ---- */

/* Rule 4.11: 256 MiB from an accepted stream to a connected one (16 MiB
 * under sanitizers and valgrind), spliced a MiB at most at a time and
 * hashed on both ends; every splice's result is what it moved, the last
 * one finds src's end (0, TL_F_EOF) and the pool never grew past one
 * pipe. */
static void test_splice_big_hashed(void)
{
	enum { CHUNK = 1 << 20, NBUF = 4 };
	int fds = h_begin();
	struct rig r;
	uint8_t *buf[NBUF] = {0};
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop, *p = r.cp.loop;
	const uint64_t total = big_bytes();
	for (int k = 0; k < NBUF; k++) {
		buf[k] = malloc(CHUNK);
		CU_ASSERT_PTR_NOT_NULL_FATAL(buf[k]);
	}
	consumer_start(&r, NO_CHECK);
	uint64_t sent = 0, hash_out = FNV_OFF, moved = 0, splices = 0;
	tl_op w[NBUF], sp = TL_OP_NONE, sh = TL_OP_NONE;
	int wlive[NBUF] = {0}, splive = 0, speof = 0, bad = 0, shut = 0;
	uint32_t lfrom = r.cl.log.n, pfrom = r.cp.log.n;
	uint64_t dl = h_wall_ns() + (uint64_t)H_SLOW_MS(120000) * H_MS;
	while (!r.ceof && r.reading && h_wall_ns() < dl && !bad) {
		/* The producer keeps NBUF writes in flight. */
		for (int k = 0; k < NBUF && sent < total; k++) {
			if (wlive[k])
				continue;
			uint32_t n = total - sent < CHUNK ? (uint32_t)(total - sent) : CHUNK;
			fill_pattern(buf[k], n, sent);
			hash_out = fnv(hash_out, buf[k], n);
			H_EQ_FATAL(tl_write(p, r.prod, buf[k], n, (uint64_t)k, &w[k]), 0);
			wlive[k] = 1;
			sent += n;
		}
		if (sent == total && !shut && !wlive[0] && !wlive[1] && !wlive[2] && !wlive[3]) {
			H_EQ(tl_shutdown(p, r.prod, 9, &sh), 0);
			shut = 1;
		}
		if (!splive && !speof) {
			H_EQ_FATAL(tl_splice(l, r.a, r.b, CHUNK, 0x5b, &sp), 0);
			splive = 1;
		}
		pump(&r, (int64_t)H_MS);
		for (; pfrom < r.cp.log.n; pfrom++) {
			tl_completion *x = &r.cp.log.v[pfrom];
			for (int k = 0; k < NBUF; k++)
				if (wlive[k] && x->op.v == w[k].v) {
					wlive[k] = 0;
					if (x->result <= 0)
						bad = 1;
				}
		}
		for (; lfrom < r.cl.log.n; lfrom++) {
			tl_completion *x = &r.cl.log.v[lfrom];
			if (!splive || x->op.v != sp.v)
				continue;
			H_TRUE(x->flags & TL_F_TERMINAL, "a nonterminal splice completion");
			splive = 0;
			splices++;
			if (x->result > 0) {
				check_done(x, x->result);
				H_TRUE(x->result <= CHUNK, "moved %lld > max", (long long)x->result);
				moved += (uint64_t)x->result;
			} else if (x->result == 0) {
				check_done(x, 0);
				H_TRUE(x->flags & TL_F_EOF, "0 without TL_F_EOF");
				speof = 1;
				tl_op s2;
				H_EQ(tl_shutdown(l, r.b, 10, &s2), 0);
			} else {
				H_EQ(x->result, 0);
				bad = 1;
			}
		}
	}
	consume(&r);
	H_EQ(bad, 0);
	H_TRUE(r.ceof, "the consumer saw no end of stream (%llu of %llu bytes)",
	       (unsigned long long)r.cgot, (unsigned long long)total);
	H_EQ(moved, total);
	H_EQ(r.cgot, total);
	H_TRUE(r.chash == hash_out, "hashes differ: sent %016llx, received %016llx",
	       (unsigned long long)hash_out, (unsigned long long)r.chash);
	tl_loop_stats st = stats(l);
	H_EQ(st.pipes, 1);
	H_EQ(st.pipes_busy, 0);
	H_EQ(st.splice_dropped, 0);
	printf("\n  %llu MiB in %llu splices\n", (unsigned long long)(total >> 20),
	       (unsigned long long)splices);
out:
	for (int k = 0; k < NBUF; k++)
		free(buf[k]);
	rig_down(&r, fds);
}

/* Rule 4.11 on Unix-domain streams: a stream accepted on a Unix listener
 * is the source, another connected to one the destination, and 4 MiB
 * cross them hashed on both ends. */
static void test_splice_unix(void)
{
	enum { N = 4 << 20, CH = 256 << 10 };
	int fds = h_begin();
	h_ctx cl, cp;
	h_ctx_init(&cl, h_loop());
	h_ctx_init(&cp, h_loop());
	h_ctx_link(&cl, &cp);
	tl_loop *l = cl.loop, *p = cp.loop;
	char dir[] = "/tmp/tl-splice-XXXXXX", p1[64], p2[64];
	uint8_t *data = NULL;
	tl_handle l1, l2, a = TL_HANDLE_NONE, b = TL_HANDLE_NONE, prod, cons = TL_HANDLE_NONE;
	if (!h_need_cap(l, TL_CAP_SPLICE) || !h_need_cap(l, TL_CAP_UNIX))
		goto out;
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(p1, sizeof p1, "%s/in", dir);
	snprintf(p2, sizeof p2, "%s/out", dir);
	tl_op o1, o2, c1, c2;
	H_EQ_FATAL(tl_unix_listen(l, p1, NULL, &l1), 0);
	H_EQ_FATAL(tl_unix_listen(p, p2, NULL, &l2), 0);
	H_EQ(tl_accept(l, l1, 1, &o1), 0);
	H_EQ(tl_accept(p, l2, 2, &o2), 0);
	H_EQ_FATAL(tl_unix_connect(p, p1, 0, 3, &prod, &c1), 0);
	H_EQ_FATAL(tl_unix_connect(l, p2, 0, 4, &b, &c2), 0);
	int i1 = h_wait_op(&cl, o1), i2 = h_wait_op(&cp, o2);
	H_TRUE_FATAL(i1 >= 0 && i2 >= 0 && h_wait_op(&cp, c1) >= 0 && h_wait_op(&cl, c2) >= 0,
		     "Unix pairs");
	a = cl.log.v[i1].u.accept.conn;
	cons = cp.log.v[i2].u.accept.conn;
	data = malloc(N);
	CU_ASSERT_PTR_NOT_NULL_FATAL(data);
	fill_pattern(data, N, 0);
	tl_op w, rs, sp = TL_OP_NONE;
	/* The first splice waits for src: src has its one reader. */
	H_EQ_FATAL(tl_splice(l, a, b, CH, 7, &sp), 0);
	if (tl_loop_caps(l) & TL_CAP_DETACH) {
		int fdv[1];
		uint8_t one[1];
		tl_op ro;
		H_EQ(tl_recv_fds(l, a, fdv, 1, one, 1, 8, &ro), -EINVAL);
	}
	H_EQ(tl_write(p, prod, data, N, 5, &w), 0);
	H_EQ(tl_read_start(p, cons, 6, &rs), 0);
	uint64_t moved = 0, got = 0, hash_in = FNV_OFF;
	uint32_t pf = cp.log.n;
	int live = 1;
	uint64_t dl = h_wall_ns() + (uint64_t)H_SLOW_MS(20000) * H_MS;
	while (got < N && h_wall_ns() < dl) {
		if (!live && moved < N) {
			H_EQ_FATAL(tl_splice(l, a, b, CH, 7, &sp), 0);
			live = 1;
		}
		h_turn(&cl, (int64_t)H_MS);
		int i = live ? h_find_term(&cl.log, sp) : -1;
		if (i >= 0) {
			H_TRUE_FATAL(cl.log.v[i].result > 0, "splice %lld%s",
				     (long long)cl.log.v[i].result, h_errname(cl.log.v[i].result));
			check_done(&cl.log.v[i], cl.log.v[i].result);
			moved += (uint64_t)cl.log.v[i].result;
			live = 0;
		}
		for (; pf < cp.log.n; pf++) {
			tl_completion *x = &cp.log.v[pf];
			if (x->op.v != rs.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
				continue;
			hash_in = fnv(hash_in, x->u.read.lease.data, (size_t)x->result);
			got += (uint64_t)x->result;
			H_EQ(tl_lease_release(p, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	H_EQ(moved, N);
	H_EQ(got, N);
	H_TRUE(hash_in == fnv(FNV_OFF, data, N), "hashes differ");
	H_TRUE(h_wait_op(&cp, w) >= 0, "the producer's write");
	H_EQ(tl_stop(p, rs), 0);
	h_wait_op(&cp, rs);
	h_release_leases(&cp, 0);
	tl_close_all(l, 9);
	tl_close_all(p, 9);
	unlink(p1);
	unlink(p2);
	rmdir(dir);
out:
	cl.peer = cp.peer = NULL;
	h_ctx_fini(&cl);
	h_ctx_fini(&cp);
	h_drain_close(p);
	h_end(l, fds);
	free(data);
}

/* ---- order, end ---- */

/* Rule 4.11: a splice is in order with dst's writes. write, splice, write
 * are submitted together, before src has data, then with src's data
 * already waiting: dst's peer gets the first write, exactly the bytes the
 * splice says it moved (the start of src's stream), then the second
 * write. */
static void test_splice_in_order_with_writes(void)
{
	enum { W = 1000, S = 3000 };
	int fds = h_begin();
	struct rig r;
	uint8_t *got = malloc(2 * (2 * W + S));
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	uint8_t w1[W], w2[W], src[2 * S];
	memset(w1, 0xa1, W);
	memset(w2, 0xc3, W);
	fill_pattern(src, sizeof src, 0);
	r.keep = got;
	r.keep_cap = 2 * (2 * W + S);
	consumer_start(&r, NO_CHECK);
	uint64_t soff = 0, at = 0;
	for (int round = 0; round < 2; round++) {
		tl_op o1, o2, o3;
		if (round == 1) {
			/* src's bytes are there before the splice is. */
			H_EQ(h_write_all(&r.cp, r.prod, src + S, S), S);
			pump_ms(&r, 20);
		}
		H_EQ(tl_write(l, r.b, w1, W, 1, &o1), 0);
		H_EQ(tl_splice(l, r.a, r.b, S, 2, &o2), 0);
		H_EQ(tl_write(l, r.b, w2, W, 3, &o3), 0);
		if (round == 0) {
			pump_ms(&r, 10);
			/* Neither the splice nor the write behind it went on. */
			H_EQ(h_find_term(&r.cl.log, o2), -1);
			H_EQ(h_find_term(&r.cl.log, o3), -1);
			H_EQ(h_write_all(&r.cp, r.prod, src, S), S);
		}
		int i2 = wait_l(&r, o2, H_WAIT_MS), i3 = wait_l(&r, o3, H_WAIT_MS);
		int i1 = h_find_term(&r.cl.log, o1);
		H_TRUE_FATAL(i1 >= 0 && i2 >= 0 && i3 >= 0, "a terminal is missing");
		H_TRUE(i1 < i2 && i2 < i3, "completions out of order: %d %d %d", i1, i2, i3);
		const tl_completion *x = term_of(&r, i2);
		H_TRUE_FATAL(x->result > 0, "splice result %lld%s", (long long)x->result,
			     h_errname(x->result));
		check_done(x, x->result);
		uint64_t k = (uint64_t)x->result;
		consume_until(&r, at + 2 * W + k, H_WAIT_MS);
		H_EQ(r.cgot, at + 2 * W + k);
		H_TRUE(all_bytes(got + at, W, 0xa1), "the first write is not first");
		H_EQ(check_pattern(got + at + W, (size_t)k, soff), -1);
		H_TRUE(all_bytes(got + at + W + k, W, 0xc3), "the second write is not after the splice");
		at += 2 * W + k;
		soff += k;
		/* What the splice did not take is still src's: the next round's
		 * splice moves it before anything else, so drain it here. */
		while (soff < (uint64_t)S * (round + 1)) {
			tl_op o4;
			H_EQ_FATAL(tl_splice(l, r.a, r.b, S, 4, &o4), 0);
			int i4 = wait_l(&r, o4, H_WAIT_MS);
			H_TRUE_FATAL(i4 >= 0 && r.cl.log.v[i4].result > 0, "the rest of src");
			soff += (uint64_t)r.cl.log.v[i4].result;
			consume_until(&r, at + (uint64_t)r.cl.log.v[i4].result, H_WAIT_MS);
			H_EQ(check_pattern(got + at, (size_t)r.cl.log.v[i4].result, soff - (uint64_t)r.cl.log.v[i4].result), -1);
			at += (uint64_t)r.cl.log.v[i4].result;
		}
		H_EQ(soff, (uint64_t)S * (round + 1));
	}
out:
	r.keep = NULL;
	free(got);
	rig_down(&r, fds);
}

/* Rule 4.11 (and 4.7): src's end reaches a splice as 0 with TL_F_EOF after
 * the bytes before it, and again for a splice submitted after that; a
 * second splice queued behind the first on the same pair runs after it. */
static void test_splice_eof(void)
{
	enum { N = 700 };
	int fds = h_begin();
	struct rig r;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	uint8_t m[N];
	fill_pattern(m, N, 0);
	consumer_start(&r, 0);
	tl_op o1, o2, sh;
	/* Two splices queued on one pair: the second waits for the first. */
	H_EQ(tl_splice(l, r.a, r.b, N, 1, &o1), 0);
	H_EQ(tl_splice(l, r.a, r.b, N, 2, &o2), 0);
	H_EQ(h_write_all(&r.cp, r.prod, m, N), N);
	H_EQ(tl_shutdown(r.cp.loop, r.prod, 3, &sh), 0);
	uint64_t moved = 0;
	tl_op cur = o1;
	int eofs = 0, last = -1;
	for (int k = 0; k < 64; k++) {
		int i = wait_l(&r, cur, H_WAIT_MS);
		H_TRUE_FATAL(i >= 0, "no terminal for splice %d", k);
		H_TRUE(i > last, "splices completed out of order");
		last = i;
		const tl_completion *x = term_of(&r, i);
		if (x->result > 0) {
			check_done(x, x->result);
			H_EQ(eofs, 0);
			moved += (uint64_t)x->result;
		} else {
			check_done(x, 0);
			H_TRUE(x->flags & TL_F_EOF, "result 0 without TL_F_EOF");
			eofs++;
		}
		if (eofs == 2)
			break;
		if (cur.v == o1.v)
			cur = o2;
		else
			H_EQ_FATAL(tl_splice(l, r.a, r.b, N, 4, &cur), 0);
	}
	H_EQ(eofs, 2);
	H_EQ(moved, N);
	consume_until(&r, N, H_WAIT_MS);
	H_EQ(r.cgot, N);
	H_EQ(r.cwrong, 0);
out:
	rig_down(&r, fds);
}

/* Rule 4.11 with a one-page pipe: several segments wait in src, each
 * splice takes what fits (as little as one segment: a pipe slot holds one
 * piece of one page, and the peer's writes alternate with writes to
 * another socket, so that its segments do not merge in the kernel), and
 * the rest is still found by the next splice without new data arriving. */
static void test_splice_small_pipe(void)
{
	enum { SEG = 1000, NSEG = 6 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pipe_size = 4096;
	struct rig r;
	if (!rig_up(&r, &cfg))
		goto out;
	tl_loop *l = r.cl.loop;
	uint8_t m[SEG * NSEG];
	fill_pattern(m, sizeof m, 0);
	for (int k = 0; k < NSEG; k++) {
		H_EQ(h_write_all(&r.cp, r.prod, m + k * SEG, SEG), SEG);
		H_EQ(h_write_all(&r.cp, r.cons, m, 100), 100);
		pump_ms(&r, 2);
	}
	consumer_start(&r, 0);
	uint64_t moved = 0;
	int n = 0;
	while (moved < sizeof m && n++ < 4 * NSEG) {
		tl_op o;
		H_EQ_FATAL(tl_splice(l, r.a, r.b, sizeof m, 1, &o), 0);
		int i = wait_l(&r, o, H_WAIT_MS);
		H_TRUE_FATAL(i >= 0, "splice %d waits with %llu bytes still in src", n,
			     (unsigned long long)(sizeof m - moved));
		H_TRUE_FATAL(r.cl.log.v[i].result > 0, "splice %d: %lld", n,
			     (long long)r.cl.log.v[i].result);
		moved += (uint64_t)r.cl.log.v[i].result;
	}
	H_EQ(moved, sizeof m);
	consume_until(&r, sizeof m, H_WAIT_MS);
	H_EQ(r.cgot, sizeof m);
	H_EQ(r.cwrong, 0);
	printf("\n  %d splices for %d segments\n", n, NSEG);
out:
	rig_down(&r, fds);
}

/* Rule 1.6 with 4.11: a splice the driver can finish as the turn starts
 * (src has data, dst has room) is handed out by that turn: the turn does
 * not wait out its timeout on top of a completion it just made. */
static void test_splice_turn_does_not_wait(void)
{
	enum { N = 2000 };
	int fds = h_begin();
	struct rig r;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	uint8_t m[N];
	fill_pattern(m, N, 0);
	consumer_start(&r, 0);
	for (int round = 0; round < 5; round++) {
		H_EQ(h_write_all(&r.cp, r.prod, m, N), N);
		pump_ms(&r, 20); /* in src now */
		tl_op o;
		H_EQ_FATAL(tl_splice(l, r.a, r.b, N, 1, &o), 0);
		uint64_t t0 = h_wall_ns();
		int found = 0;
		for (int k = 0; k < 4 && !found; k++) {
			tl_completion out[16];
			int n = tl_turn(l, 2000 * (int64_t)H_MS, out, 16, NULL);
			H_TRUE_FATAL(n >= 0, "tl_turn %d", n);
			for (int i = 0; i < n; i++)
				if (out[i].op.v == o.v) {
					found = 1;
					check_done(&out[i], out[i].result);
				}
		}
		uint64_t ms = (h_wall_ns() - t0) / H_MS;
		H_TRUE(found, "no completion in four turns");
		H_TRUE(ms < 1000, "round %d: the turns took %llu ms for a splice that was done", round,
		       (unsigned long long)ms);
	}
out:
	rig_down(&r, fds);
}

/* ---- cancel and close ---- */

/* Rule 2.1 for a splice waiting for src: cancel is 0, then -EALREADY; the
 * terminal -ECANCELED (nothing taken or moved) comes once; the bytes src
 * gets afterwards are still src's, for a read. Closing src cancels a
 * waiting splice the same way, before src's Closed. */
static void test_splice_cancel_waiting(void)
{
	enum { N = 500 };
	int fds = h_begin();
	struct rig r;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	tl_op o;
	H_EQ(tl_splice(l, r.a, r.b, 4096, 1, &o), 0);
	pump_ms(&r, 5);
	H_EQ(h_find_term(&r.cl.log, o), -1);
	H_EQ(tl_cancel(l, o), 0);
	int rc = tl_cancel(l, o);
	H_TRUE(rc == -EALREADY || rc == -ENOENT, "second cancel %d", rc);
	int i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "no terminal");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->kind, TL_K_SPLICE);
	H_EQ(x->result, -ECANCELED);
	H_EQ(x->u.splice.taken, 0);
	H_EQ(x->u.splice.moved, 0);
	H_EQ(h_count_op(&r.cl.log, o, 0), 1);
	H_EQ(tl_cancel(l, o), -ENOENT);
	/* src's bytes are a read's now. */
	uint8_t m[N], back[N];
	fill_pattern(m, N, 0);
	H_EQ(h_write_all(&r.cp, r.prod, m, N), N);
	H_EQ(h_read_exact(&r.cl, r.a, back, N, NULL), N);
	H_EQ(memcmp(back, m, N), 0);
	H_EQ(stats(l).pipes_busy, 0);
	/* Closing src cancels the splice waiting for it. */
	H_EQ(tl_splice(l, r.a, r.b, 4096, 2, &o), 0);
	pump_ms(&r, 5);
	H_EQ(tl_close(l, r.a, 7), 0);
	int ic = h_wait_closed(&r.cl, r.a);
	i = h_find_term(&r.cl.log, o);
	H_TRUE_FATAL(i >= 0 && ic >= 0, "terminal %d, Closed %d", i, ic);
	H_EQ(r.cl.log.v[i].result, -ECANCELED);
	H_TRUE(i < ic, "src's Closed came before the splice's terminal");
	H_EQ(stats(l).pipes_busy, 0);
out:
	rig_down(&r, fds);
}

/*
 * Splice src to dst while dst's peer reads nothing, until a splice stays
 * pending: dst is full. prod sends one big write meanwhile (kept so the
 * rest of src can be checked later). f->sp is the pending splice, f->moved
 * what the completed ones moved (the consumer may have read some of it).
 * That the pending splice has bytes in its pipe is seen through dst's
 * write cap, set to one byte: those bytes are dst's queued write bytes, so
 * dst is paused. If it took nothing (its predecessor happened to fill dst
 * exactly), the consumer reads a little to make room and it goes on.
 */
struct fill {
	uint8_t *data;
	uint64_t total, moved; /* prod's write, what completed splices moved */
	tl_op w, sp;
};

/* The splicing half of fill_dst: src has plenty already. */
static int fill_more(struct rig *r, struct fill *f)
{
	tl_loop *l = r->cl.loop;
	H_EQ(tl_handle_caps(l, r->b, 0, 1), 0);
	uint64_t dl = h_wall_ns() + (uint64_t)H_SLOW_MS(20000) * H_MS;
	int pending = 0;
	while (h_wall_ns() < dl) {
		if (!pending)
			H_EQ_FATAL(tl_splice(l, r->a, r->b, 256u << 10, 0x5f, &f->sp), 0);
		int i = wait_l(r, f->sp, 100);
		if (i >= 0) {
			const tl_completion *x = term_of(r, i);
			H_TRUE_FATAL(x->result > 0, "filling: %lld%s", (long long)x->result,
				     h_errname(x->result));
			f->moved += (uint64_t)x->result;
			pending = 0;
			continue;
		}
		pending = 1;
		if (stats(l).paused == 1)
			return 1;
		/* Pending with an empty pipe: make dst some room. */
		consumer_start(r, 0);
		uint64_t c0 = r->cgot;
		consume_until(r, c0 + 1, H_WAIT_MS);
		consumer_stop(r);
	}
	H_TRUE(0, "dst never filled with bytes in the pipe (%llu bytes moved)",
	       (unsigned long long)f->moved);
	return 0;
}

static int fill_dst(struct rig *r, struct fill *f)
{
	f->total = 48u << 20;
	f->data = malloc(f->total);
	CU_ASSERT_PTR_NOT_NULL_FATAL(f->data);
	fill_pattern(f->data, f->total, 0);
	f->moved = 0;
	H_EQ_FATAL(tl_write(r->cp.loop, r->prod, f->data, (uint32_t)f->total, 0x77, &f->w), 0);
	return fill_more(r, f);
}

/* After a fill: what is left in src, read with a read: it must start
 * right after the bytes the splices took (the pattern says). */
static uint64_t rest_of_src(struct rig *r, uint64_t off, uint64_t want, int *wrong)
{
	tl_op op;
	H_EQ_FATAL(tl_read_start(r->cl.loop, r->a, 0x4e57, &op), 0);
	uint32_t from = r->cl.log.n;
	uint64_t got = 0, dl = h_wall_ns() + (uint64_t)H_SLOW_MS(20000) * H_MS;
	while (got < want && h_wall_ns() < dl) {
		pump(r, (int64_t)H_MS);
		for (; from < r->cl.log.n; from++) {
			tl_completion *x = &r->cl.log.v[from];
			if (x->op.v != op.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
				continue;
			if (check_pattern(x->u.read.lease.data, (size_t)x->result, off + got) >= 0)
				(*wrong)++;
			got += (uint64_t)x->result;
			H_EQ(tl_lease_release(r->cl.loop, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	H_EQ(tl_stop(r->cl.loop, op), 0);
	wait_l(r, op, H_WAIT_MS);
	h_release_leases(&r->cl, from);
	return got;
}

/* Rules 2.1 and 4.11: a splice cancelled with bytes in its pipe writes
 * them to dst before its terminal, which is -ECANCELED with taken ==
 * moved; meanwhile those bytes count against dst's write cap (a cap of one
 * byte pauses dst). dst's peer then has every byte the splices moved, in
 * order, and src the rest, from the next offset: nothing lost or doubled. */
static void test_splice_cancel_flushes(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL) || !fill_dst(&r, &f))
		goto out;
	tl_loop *l = r.cl.loop;
	H_EQ(stats(l).paused, 1); /* the pending splice's bytes are b's */
	H_EQ(tl_cancel(l, f.sp), 0);
	pump_ms(&r, 30);
	/* Its bytes wait for room: no terminal yet. */
	H_EQ(h_find_term(&r.cl.log, f.sp), -1);
	consumer_start(&r, 0);
	int i = wait_l(&r, f.sp, H_SLOW_MS(20000));
	H_TRUE_FATAL(i >= 0, "the cancelled splice never ended");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->kind, TL_K_SPLICE);
	H_EQ(x->result, -ECANCELED);
	H_EQ(x->u.splice.taken, x->u.splice.moved);
	H_TRUE(x->u.splice.taken > 0, "the cancelled splice had taken nothing");
	H_EQ(h_count_op(&r.cl.log, f.sp, 0), 1);
	uint64_t moved = f.moved + x->u.splice.moved;
	consume_until(&r, moved, H_SLOW_MS(20000));
	pump_ms(&r, 20);
	H_EQ(r.cgot, moved);
	H_EQ(r.cwrong, 0);
	H_EQ(stats(l).paused, 0);
	H_EQ(stats(l).splice_dropped, 0);
	int wrong = 0;
	uint64_t rest = rest_of_src(&r, moved, f.total - moved, &wrong);
	H_EQ(rest, f.total - moved);
	H_EQ(wrong, 0);
	H_TRUE(wait_p(&r, f.w, H_WAIT_MS) >= 0, "prod's write never completed");
out:
	rig_down(&r, fds);
	free(f.data);
}

/* Rules 2.3 and 4.11: closing dst ends its splice at once, with bytes
 * still in the pipe: -ECANCELED, taken - moved bytes dropped (and counted
 * in splice_dropped), exactly one terminal, then dst's Closed. src then
 * goes on from right after what was taken. */
static void test_splice_close_dst_drops(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL) || !fill_dst(&r, &f))
		goto out;
	tl_loop *l = r.cl.loop;
	H_EQ(tl_close(l, r.b, 8), 0);
	int ic = h_wait_closed(&r.cl, r.b);
	int i = h_find_term(&r.cl.log, f.sp);
	H_TRUE_FATAL(i >= 0 && ic >= 0, "terminal %d, Closed %d", i, ic);
	H_TRUE(i < ic, "dst's Closed came before its splice's terminal");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->result, -ECANCELED);
	H_TRUE(x->u.splice.moved < x->u.splice.taken, "moved %llu, taken %llu: nothing dropped",
	       (unsigned long long)x->u.splice.moved, (unsigned long long)x->u.splice.taken);
	H_EQ(stats(l).splice_dropped, x->u.splice.taken - x->u.splice.moved);
	H_EQ(h_count_op(&r.cl.log, f.sp, 0), 1);
	H_EQ(stats(l).pipes_busy, 0);
	uint64_t taken = f.moved + x->u.splice.taken;
	int wrong = 0;
	uint64_t rest = rest_of_src(&r, taken, f.total - taken, &wrong);
	H_EQ(rest, f.total - taken);
	H_EQ(wrong, 0);
	/* The pool still works after a pipe had to go. */
	tl_handle b2, c2;
	H_EQ_FATAL(h_pair(&r.cp, &r.cl, AF_INET, &c2, &b2), 0);
	uint8_t m[100];
	fill_pattern(m, sizeof m, 5);
	H_EQ(h_write_all(&r.cp, r.prod, m, sizeof m), (int64_t)sizeof m);
	tl_op o;
	H_EQ(tl_splice(l, r.a, b2, 4096, 9, &o), 0);
	i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE(i >= 0 && r.cl.log.v[i].result > 0, "a splice after the drop");
	H_TRUE(wait_p(&r, f.w, H_WAIT_MS) >= 0, "prod's write never completed");
out:
	rig_down(&r, fds);
	free(f.data);
}

/* Rules 2.3 and 4.11: a splice cancelled with bytes in its pipe flushes
 * them, but closing dst meanwhile ends the flush at once: one terminal,
 * -ECANCELED, the rest of the pipe dropped and counted, then dst's Closed.
 * Destroying the loop in the middle of another flush returns (nothing
 * waits for room that will never come) and leaves no descriptor behind. */
static void test_splice_cancel_then_close_dst(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL) || !fill_dst(&r, &f))
		goto out;
	tl_loop *l = r.cl.loop;
	H_EQ(tl_cancel(l, f.sp), 0);
	pump_ms(&r, 20);
	H_EQ_FATAL(h_find_term(&r.cl.log, f.sp), -1); /* flushing */
	H_EQ(tl_close(l, r.b, 8), 0);
	int ic = h_wait_closed(&r.cl, r.b);
	int i = h_find_term(&r.cl.log, f.sp);
	H_TRUE_FATAL(i >= 0 && ic >= 0 && i < ic, "terminal %d, Closed %d", i, ic);
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->result, -ECANCELED);
	H_TRUE(x->u.splice.moved < x->u.splice.taken, "nothing dropped");
	H_EQ(stats(l).splice_dropped, x->u.splice.taken - x->u.splice.moved);
	H_EQ(h_count_op(&r.cl.log, f.sp, 0), 1);
	/* Another flush (into a new dst; src still has plenty), then the
	 * loop goes. */
	tl_handle b2, c2;
	H_EQ_FATAL(h_pair(&r.cp, &r.cl, AF_INET, &c2, &b2), 0);
	r.b = b2;
	r.cons = c2;
	if (!fill_more(&r, &f))
		goto out;
	H_EQ(tl_cancel(l, f.sp), 0);
	pump_ms(&r, 10);
	H_EQ(h_find_term(&r.cl.log, f.sp), -1);
	tl_loop_destroy(l);
	r.cl.loop = NULL;
	r.cl.peer = r.cp.peer = NULL;
	r.up = 0;
	/* P's write into src ends (reset or cancelled) before its buffer goes. */
	tl_close_all(r.cp.loop, 0);
	h_ctx_fini(&r.cl);
	h_ctx_fini(&r.cp);
	h_drain_close(r.cp.loop);
	h_end(NULL, fds);
	free(f.data);
	return;
out:
	rig_down(&r, fds);
	free(f.data);
}

/* Rules 4.9 and 4.11: dst's idle deadline ends a splice stuck with bytes
 * in its pipe (dst's peer reads nothing) as closing dst would, once:
 * -ETIMEDOUT, the rest of its pipe dropped and counted, no flush; src goes
 * on right after what was taken. */
static void test_splice_idle_deadline(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL) || !fill_dst(&r, &f))
		goto out;
	tl_loop *l = r.cl.loop;
	H_EQ(tl_idle_deadline(l, r.b, 30 * H_MS), 0);
	int i = wait_l(&r, f.sp, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "the deadline did not end the flushing splice");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->result, -ETIMEDOUT);
	H_TRUE(x->u.splice.moved < x->u.splice.taken, "nothing dropped");
	H_EQ(stats(l).splice_dropped, x->u.splice.taken - x->u.splice.moved);
	H_EQ(h_count_op(&r.cl.log, f.sp, 0), 1);
	H_EQ(tl_idle_deadline(l, r.b, 0), 0);
	uint64_t taken = f.moved + x->u.splice.taken;
	int wrong = 0;
	uint64_t rest = rest_of_src(&r, taken, f.total - taken, &wrong);
	H_EQ(rest, f.total - taken);
	H_EQ(wrong, 0);
	H_TRUE(wait_p(&r, f.w, H_WAIT_MS) >= 0, "prod's write never completed");
out:
	rig_down(&r, fds);
	free(f.data);
}

/* Rules 4.6 and 4.11: detaching a splice's source while the splice waits
 * for it cancels the splice and is -EAGAIN until the splice ended (it held
 * the descriptor too); then the descriptor goes. */
static void test_splice_detach_src(void)
{
	int fds = h_begin();
	struct rig r;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	if (!h_need_cap(l, TL_CAP_DETACH))
		goto out;
	tl_op o;
	H_EQ(tl_splice(l, r.a, r.b, 100, 1, &o), 0);
	int fd = -1;
	H_EQ(tl_detach(l, r.a, &fd), -EAGAIN);
	int i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "the splice did not end");
	H_EQ(r.cl.log.v[i].result, -ECANCELED);
	int rc = -EAGAIN;
	for (int k = 0; k < 100 && rc == -EAGAIN; k++) {
		rc = tl_detach(l, r.a, &fd);
		if (rc == -EAGAIN)
			pump(&r, (int64_t)H_MS);
	}
	H_EQ(rc, 0);
	if (rc == 0)
		close(fd);
out:
	rig_down(&r, fds);
}

/* Rules 4.6 and 4.11: detaching dst while its splice has bytes in its pipe
 * cancels the splice, which flushes them first: tl_detach is -EAGAIN until
 * the terminal (-ECANCELED, taken == moved), and dst's peer has every byte
 * the splices took. */
static void test_splice_detach_dst(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	if (!h_need_cap(l, TL_CAP_DETACH) || !fill_dst(&r, &f))
		goto out;
	int fd = -1;
	H_EQ(tl_detach(l, r.b, &fd), -EAGAIN);
	pump_ms(&r, 20);
	H_EQ(tl_detach(l, r.b, &fd), -EAGAIN); /* still flushing */
	consumer_start(&r, 0);
	int i = wait_l(&r, f.sp, H_SLOW_MS(20000));
	H_TRUE_FATAL(i >= 0, "the splice never ended");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->result, -ECANCELED);
	H_EQ(x->u.splice.taken, x->u.splice.moved);
	H_TRUE(x->u.splice.taken > 0, "nothing was flushed");
	int rc = -EAGAIN;
	for (int k = 0; k < 100 && rc == -EAGAIN; k++) {
		rc = tl_detach(l, r.b, &fd);
		if (rc == -EAGAIN)
			pump(&r, (int64_t)H_MS);
	}
	H_EQ(rc, 0);
	uint64_t moved = f.moved + x->u.splice.moved;
	consume_until(&r, moved, H_SLOW_MS(20000));
	pump_ms(&r, 20);
	H_EQ(r.cgot, moved);
	H_EQ(r.cwrong, 0);
	if (rc == 0)
		close(fd);
out:
	rig_down(&r, fds);
	free(f.data);
}

/* Rules 2.3 and 4.11: closing src while its splice flushes into a full dst
 * does not cancel that splice nor wait for it: src's Closed arrives while
 * the splice is pending, and the splice then completes with what it took,
 * all of it in dst's peer. */
static void test_splice_close_src_flushing(void)
{
	int fds = h_begin();
	struct rig r;
	struct fill f = {0};
	if (!rig_up(&r, NULL) || !fill_dst(&r, &f))
		goto out;
	tl_loop *l = r.cl.loop;
	H_EQ(tl_close(l, r.a, 6), 0);
	int ic = h_wait_closed(&r.cl, r.a);
	H_TRUE(ic >= 0, "src's Closed waited for the flush");
	H_EQ(h_find_term(&r.cl.log, f.sp), -1);
	consumer_start(&r, 0);
	int i = wait_l(&r, f.sp, H_SLOW_MS(20000));
	H_TRUE_FATAL(i >= 0, "the splice never ended");
	const tl_completion *x = term_of(&r, i);
	H_TRUE(x->u.splice.taken > 0, "the pending splice had taken nothing");
	check_done(x, (int64_t)x->u.splice.taken);
	H_TRUE(ic < i, "src's Closed came after the splice");
	uint64_t moved = f.moved + x->u.splice.moved;
	consume_until(&r, moved, H_SLOW_MS(20000));
	pump_ms(&r, 20);
	H_EQ(r.cgot, moved);
	H_EQ(r.cwrong, 0);
	/* prod's write fails or completes: src is gone; either way it ends. */
	H_TRUE(wait_p(&r, f.w, H_WAIT_MS) >= 0, "prod's write never ended");
out:
	rig_down(&r, fds);
	free(f.data);
}

/* ---- the pool, caps, arguments ---- */

/* Rule 4.11: a loop with a pool of one pipe: a second splice while the
 * first holds it is -ENOBUFS (counted), nothing happened; once the first
 * ends, the pipe serves again and the pool never made a second one. */
static void test_splice_pool_empty(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pipes = 1;
	cfg.pipe_size = 64u << 10;
	struct rig r;
	if (!rig_up(&r, &cfg))
		goto out;
	tl_loop *l = r.cl.loop;
	tl_op o1, o2;
	H_EQ(tl_splice(l, r.a, r.b, 100, 1, &o1), 0);
	H_EQ(stats(l).pipes_busy, 1);
	uint32_t ops = stats(l).ops;
	H_EQ(tl_splice(l, r.b, r.a, 100, 2, &o2), -ENOBUFS);
	H_EQ(stats(l).pipe_refusals, 1);
	H_EQ(stats(l).ops, ops);
	H_EQ(tl_cancel(l, o1), 0);
	H_TRUE(wait_l(&r, o1, H_WAIT_MS) >= 0, "cancel");
	H_EQ(tl_splice(l, r.b, r.a, 100, 3, &o2), 0);
	uint8_t m[50];
	fill_pattern(m, sizeof m, 0);
	H_EQ(h_write_all(&r.cp, r.cons, m, sizeof m), (int64_t)sizeof m);
	int i = wait_l(&r, o2, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "the second splice");
	check_done(term_of(&r, i), sizeof m);
	tl_loop_stats st = stats(l);
	H_EQ(st.pipes, 1);
	H_EQ(st.pipe_refusals, 1);
	H_EQ(st.pipes_busy, 0);
out:
	rig_down(&r, fds);
}

/* Rule 4.10 with 4.11: a splice reads src like a read does, so over src's
 * write cap (a pending write that its peer does not read) the splice
 * waits, and goes on once the cap is lifted. */
static void test_splice_waits_on_paused_src(void)
{
	enum { N = 300 };
	int fds = h_begin();
	struct rig r;
	uint8_t *big = NULL;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	/* a's own write backs up: prod reads nothing. */
	const uint32_t BIG = 32u << 20;
	big = malloc(BIG);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	memset(big, 1, BIG);
	tl_op wb, o;
	H_EQ(tl_handle_caps(l, r.a, 0, 4096), 0);
	H_EQ(tl_write(l, r.a, big, BIG, 1, &wb), 0);
	pump_ms(&r, 10);
	H_EQ_FATAL(stats(l).paused, 1);
	uint8_t m[N];
	fill_pattern(m, N, 0);
	H_EQ(h_write_all(&r.cp, r.prod, m, N), N);
	H_EQ(tl_splice(l, r.a, r.b, N, 2, &o), 0);
	pump_ms(&r, 30);
	H_EQ(h_find_term(&r.cl.log, o), -1);
	H_EQ(tl_handle_caps(l, r.a, 0, 1ull << 40), 0);
	int i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "the splice never went on");
	check_done(term_of(&r, i), r.cl.log.v[i].result);
	H_TRUE(r.cl.log.v[i].result > 0, "moved nothing");
	H_EQ(tl_cancel(l, wb), 0);
	wait_l(&r, wb, H_WAIT_MS);
out:
	rig_down(&r, fds);
	free(big);
}

/* The calls' refusals: each returns its code and changes nothing. */
static void test_splice_refusals(void)
{
	int fds = h_begin();
	struct rig r;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	tl_op o, o2, rd;
	uint32_t ops = stats(l).ops;
	H_EQ(tl_splice(l, r.a, r.b, 0, 1, &o), -EINVAL);
	H_EQ(tl_splice(l, r.a, r.b, 10, 1, NULL), -EINVAL);
	H_EQ(tl_splice(l, r.a, r.a, 10, 1, &o), -EINVAL);
	H_EQ(tl_splice(l, TL_HANDLE_NONE, r.b, 10, 1, &o), -ENOENT);
	H_EQ(tl_splice(l, r.a, TL_HANDLE_NONE, 10, 1, &o), -ENOENT);
	/* Another loop's handle. */
	H_EQ(tl_splice(l, r.a, r.prod, 10, 1, &o), -ENOENT);
	tl_handle lis, tm;
	tl_addr la;
	tl_op top;
	H_EQ_FATAL(h_listen(&r.cl, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_splice(l, lis, r.b, 10, 1, &o), -EINVAL);
	H_EQ(tl_splice(l, r.a, lis, 10, 1, &o), -EINVAL);
	H_EQ(tl_timer_start(l, tl_now(l) + 3600 * H_MS * 1000, 0, 1, &tm, &top), 0);
	H_EQ(tl_splice(l, tm, r.b, 10, 1, &o), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 0, 0, r.b, 1, &o), -EINVAL);
	H_EQ(tl_sendfile(l, -1, 0, 10, r.b, 1, &o), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 1ull << 63, 10, r.b, 1, &o), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 0, 10, r.b, 1, NULL), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 0, 10, lis, 1, &o), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 0, 10, TL_HANDLE_NONE, 1, &o), -ENOENT);
	H_EQ(stats(l).ops, ops + 1); /* the timer's */
	/* src has one reader: a splice, or a read. */
	uint8_t buf[16];
	H_EQ(tl_splice(l, r.a, r.b, 10, 2, &o), 0);
	H_EQ(tl_read(l, r.a, buf, sizeof buf, 3, &rd), -EINVAL);
	H_EQ(tl_read_pooled(l, r.a, 3, &rd), -EINVAL);
	H_EQ(tl_read_start(l, r.a, 3, &rd), -EINVAL);
	tl_handle c2, b2;
	H_EQ_FATAL(h_pair(&r.cp, &r.cl, AF_INET, &c2, &b2), 0);
	H_EQ(tl_splice(l, r.a, b2, 10, 4, &o2), -EINVAL);
	/* The other direction is another source: fine. */
	H_EQ(tl_splice(l, r.b, r.a, 10, 5, &o2), 0);
	H_EQ(tl_cancel(l, o), 0);
	H_EQ(tl_cancel(l, o2), 0);
	H_TRUE(wait_l(&r, o, H_WAIT_MS) >= 0 && wait_l(&r, o2, H_WAIT_MS) >= 0, "cancels");
	H_EQ(tl_read(l, r.a, buf, sizeof buf, 6, &rd), 0);
	H_EQ(tl_splice(l, r.a, r.b, 10, 7, &o), -EINVAL);
	H_EQ(tl_cancel(l, rd), 0);
	H_TRUE(wait_l(&r, rd, H_WAIT_MS) >= 0, "read cancel");
	/* A closing handle. */
	H_EQ(tl_close(l, b2, 1), 0);
	H_EQ(tl_splice(l, r.a, b2, 10, 8, &o), -EINVAL);
	H_EQ(tl_sendfile(l, 0, 0, 10, b2, 8, &o), -EINVAL);
	h_wait_closed(&r.cl, b2);
	h_close(&r.cl, tm, 2);
	h_close(&r.cl, lis, 3);
out:
	rig_down(&r, fds);
}

/* ---- sendfile ---- */

/* A temporary file of n pattern bytes, unlinked at once: its descriptor. */
static int pattern_file(uint64_t n)
{
	char path[] = "/tmp/tl-sendfile-XXXXXX";
	int fd = mkstemp(path);
	H_TRUE_FATAL(fd >= 0, "mkstemp");
	unlink(path);
	uint8_t buf[65536];
	for (uint64_t off = 0; off < n;) {
		size_t k = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
		fill_pattern(buf, k, off);
		H_EQ_FATAL(pwrite(fd, buf, k, (off_t)off), (ssize_t)k);
		off += k;
	}
	return fd;
}

/* Rule 4.11 for files: a 24 MiB file sent whole arrives hashed equal; a
 * sendfile is in order with writes (write, part of the file, write); at
 * the file's end it is short with TL_F_EOF, and 0 with TL_F_EOF past it;
 * the file's own offset is not moved. */
static void test_sendfile(void)
{
	enum { W = 700, OFF = 12345, PART = 5000 };
	int fds = h_begin();
	struct rig r;
	int fd = -1;
	uint8_t *keep = NULL;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	const uint64_t N = 24u << 20;
	fd = pattern_file(N);
	uint64_t want = FNV_OFF;
	{
		uint8_t buf[65536];
		for (uint64_t off = 0; off < N; off += sizeof buf) {
			fill_pattern(buf, sizeof buf, off);
			want = fnv(want, buf, sizeof buf);
		}
	}
	consumer_start(&r, 0);
	tl_op o;
	H_EQ(tl_sendfile(l, fd, 0, (uint32_t)N, r.b, 1, &o), 0);
	int i = wait_l(&r, o, H_SLOW_MS(30000));
	H_TRUE_FATAL(i >= 0, "the sendfile never ended");
	check_done(term_of(&r, i), (int64_t)N);
	H_EQ(r.cl.log.v[i].flags & TL_F_EOF, 0);
	consume_until(&r, N, H_SLOW_MS(30000));
	H_EQ(r.cgot, N);
	H_EQ(r.cwrong, 0);
	H_TRUE(r.chash == want, "hashes differ");
	H_EQ(lseek(fd, 0, SEEK_CUR), 0);
	consumer_stop(&r);
	/* In order with writes. */
	keep = malloc(2 * W + PART);
	r.keep = keep;
	r.keep_cap = 2 * W + PART;
	r.cgot = 0;
	consumer_start(&r, NO_CHECK);
	uint8_t w1[W], w2[W];
	memset(w1, 0x11, W);
	memset(w2, 0x22, W);
	tl_op o1, o2, o3;
	H_EQ(tl_write(l, r.b, w1, W, 1, &o1), 0);
	H_EQ(tl_sendfile(l, fd, OFF, PART, r.b, 2, &o2), 0);
	H_EQ(tl_write(l, r.b, w2, W, 3, &o3), 0);
	int i3 = wait_l(&r, o3, H_WAIT_MS), i2 = h_find_term(&r.cl.log, o2),
	    i1 = h_find_term(&r.cl.log, o1);
	H_TRUE_FATAL(i1 >= 0 && i2 >= 0 && i3 >= 0, "a terminal is missing");
	H_TRUE(i1 < i2 && i2 < i3, "out of order: %d %d %d", i1, i2, i3);
	check_done(term_of(&r, i2), PART);
	consume_until(&r, 2 * W + PART, H_WAIT_MS);
	H_EQ(r.cgot, 2 * W + PART);
	H_TRUE(all_bytes(keep, W, 0x11), "first write");
	H_EQ(check_pattern(keep + W, PART, OFF), -1);
	H_TRUE(all_bytes(keep + W + PART, W, 0x22), "second write");
	/* The end of the file. */
	H_EQ(tl_sendfile(l, fd, N - 10, 100, r.b, 4, &o), 0);
	i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "short sendfile");
	check_done(term_of(&r, i), 10);
	H_TRUE(r.cl.log.v[i].flags & TL_F_EOF, "no TL_F_EOF at the file's end");
	H_EQ(tl_sendfile(l, fd, N + 5, 100, r.b, 5, &o), 0);
	i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "sendfile past the end");
	check_done(term_of(&r, i), 0);
	H_TRUE(r.cl.log.v[i].flags & TL_F_EOF, "no TL_F_EOF past the file's end");
	consume_until(&r, 2 * W + PART + 10, H_WAIT_MS);
	H_EQ(r.cgot, 2 * W + PART + 10);
	r.keep = NULL;
out:
	if (fd >= 0)
		close(fd);
	free(keep);
	rig_down(&r, fds);
}

/* Rules 2.1 and 4.11 for files: a sendfile cancelled while dst is full ends
 * with -ECANCELED and u.splice.moved says how far it got: dst's peer has
 * exactly that much of the file, in order. */
static void test_sendfile_cancel(void)
{
	int fds = h_begin();
	struct rig r;
	int fd = -1;
	if (!rig_up(&r, NULL))
		goto out;
	tl_loop *l = r.cl.loop;
	const uint64_t N = 40u << 20;
	fd = pattern_file(N);
	tl_op o;
	H_EQ(tl_sendfile(l, fd, 0, (uint32_t)N, r.b, 1, &o), 0);
	pump_ms(&r, 50);
	H_EQ_FATAL(h_find_term(&r.cl.log, o), -1);
	H_EQ(tl_cancel(l, o), 0);
	int i = wait_l(&r, o, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "no terminal");
	const tl_completion *x = term_of(&r, i);
	H_EQ(x->result, -ECANCELED);
	H_TRUE(x->u.splice.moved > 0 && x->u.splice.moved < N, "moved %llu",
	       (unsigned long long)x->u.splice.moved);
	H_EQ(x->u.splice.taken, x->u.splice.moved);
	H_EQ(h_count_op(&r.cl.log, o, 0), 1);
	consumer_start(&r, 0);
	consume_until(&r, x->u.splice.moved, H_SLOW_MS(20000));
	pump_ms(&r, 20);
	H_EQ(r.cgot, x->u.splice.moved);
	H_EQ(r.cwrong, 0);
out:
	if (fd >= 0)
		close(fd);
	rig_down(&r, fds);
}

/* ---- the pipe budget ---- */

/* Rule 4.11 at the kernel's pipe budget: an unprivileged user over
 * fs.pipe-user-pages-soft cannot have pipes bigger than two pages, so the
 * pool refuses a splice with -ENOBUFS (counted) rather than use a useless
 * pipe; with a little budget back it makes a smaller pipe (pipes_small)
 * and splices through it. The budget is per user: the child runs as a user
 * of its own (an id no other process has, tests/privs.h), since any other
 * process of its user holding pipes (another test, a proxy dropped to
 * nobody) would change what it measures. */
static void budget_child(uint32_t uid)
{
	if (tp_become(uid) < 0)
		_exit(78);
	/* Take the whole budget with 1 MiB pipes (and whatever is left). */
	static int hog[4096][2];
	int nh = 0;
	for (; nh < 4096; nh++) {
		if (pipe2(hog[nh], O_CLOEXEC) < 0)
			_exit(79);
		if (fcntl(hog[nh][1], F_SETPIPE_SZ, 1 << 20) < 0)
			break;
	}
	int fails = 0;
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.pipes = 2;
	cfg.pipe_size = 1u << 20;
	tl_loop *l;
	if (tl_loop_new(&l, &cfg))
		_exit(80);
	/* A pair on l; the splice's src has no data: only the pipe matters. */
	tl_handle lis, a, b;
	tl_addr la;
	tl_op ao, co, o;
	tl_completion c[16];
	tl_addr_parse(&la, "127.0.0.1", 0);
	if (tl_tcp_listen(l, &la, NULL, &lis) || tl_local_addr(l, lis, &la) ||
	    tl_accept(l, lis, 1, &ao) || tl_tcp_connect(l, &la, 0, 2, &b, &co))
		_exit(81);
	a = TL_HANDLE_NONE;
	for (int k = 0; k < 2000 && !a.v; k++) {
		int n = tl_turn(l, 1000000, c, 16, NULL);
		for (int j = 0; j < n; j++)
			if (c[j].kind == TL_K_ACCEPT && c[j].result == 0)
				a = c[j].u.accept.conn;
	}
	if (!a.v)
		_exit(82);
	tl_loop_stats st;
	int rc = tl_splice(l, a, b, 100, 3, &o);
	tl_loop_stats_get(l, &st);
	if (rc != -ENOBUFS || st.pipe_refusals != 1 || st.pipes != 0) {
		fprintf(stderr, "  over the budget: splice %d, refusals %llu, pipes %u\n", rc,
			(unsigned long long)st.pipe_refusals, st.pipes);
		fails++;
	}
	/* Give back a little over 256 KiB of budget. */
	close(hog[0][0]);
	close(hog[0][1]);
	rc = tl_splice(l, a, b, 100, 4, &o);
	tl_loop_stats_get(l, &st);
	if (rc != 0 || st.pipes != 1 || st.pipes_small != 1) {
		fprintf(stderr, "  with budget back: splice %d, pipes %u, small %llu\n", rc, st.pipes,
			(unsigned long long)st.pipes_small);
		fails++;
	}
	tl_loop_destroy(l);
	_exit(fails ? 1 : 0);
}

/* fs.pipe-user-pages-soft, or -1 when it cannot be read. */
static long pipe_soft_limit(void)
{
	long soft = -1;
	FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "re");

	if (f) {
		if (fscanf(f, "%ld", &soft) != 1)
			soft = -1;
		fclose(f);
	}
	return soft;
}

static void test_splice_pipe_budget(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	long soft;
	uint32_t uid;
	char why[256];
	int can;
	if (!h_need_cap(l, TL_CAP_SPLICE))
		goto out;
	if (!(tl_loop_caps(l) & TL_CAP_OS)) {
		h_skip("driver %s has no OS pipes (it models them in memory)", tl_loop_driver(l));
		goto out;
	}
	soft = pipe_soft_limit();
	if (soft <= 0) {
		h_skip("fs.pipe-user-pages-soft is %s: no budget to test",
		       soft == 0 ? "0 (no limit)" : "unreadable");
		goto out;
	}
	if (tp_own_uids(1, &uid, why, sizeof why) < 0) {
		h_skip("%s: the pipe budget is per user, and only a user of its own keeps other "
		       "processes' pipes out of the measurement", why);
		goto out;
	}
	can = tp_can_become(uid, why, sizeof why);
	H_TRUE(can >= 0, "becoming user %u failed: %s", uid, strerror(-can));
	if (can == 0)
		h_skip("%s: the pipe budget is per user, and only a user of its own keeps other "
		       "processes' pipes out of the measurement", why);
	if (can <= 0)
		goto out;
	fflush(NULL);
	pid_t pid = fork();
	H_TRUE_FATAL(pid >= 0, "fork");
	if (pid == 0)
		budget_child(uid);
	int st = 0;
	H_EQ(waitpid(pid, &st, 0), pid);
	H_TRUE_FATAL(WIFEXITED(st), "the child died (status %#x)", st);
	H_EQ(WEXITSTATUS(st), 0);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_splice[] = {
	T("4.11 splice", test_splice_big_hashed),
	T("4.11 splice", test_splice_unix),
	T("4.11 splice", test_splice_in_order_with_writes),
	T("4.11 splice", test_splice_eof),
	T("4.11 splice", test_splice_small_pipe),
	T("4.11 splice", test_splice_turn_does_not_wait),
	T("4.11 splice", test_splice_cancel_waiting),
	T("4.11 splice", test_splice_cancel_flushes),
	T("4.11 splice", test_splice_close_dst_drops),
	T("4.11 splice", test_splice_cancel_then_close_dst),
	T("4.11 splice", test_splice_close_src_flushing),
	T("4.11 splice", test_splice_idle_deadline),
	T("4.11 splice", test_splice_detach_src),
	T("4.11 splice", test_splice_detach_dst),
	T("4.11 splice", test_splice_pool_empty),
	T("4.11 splice", test_splice_waits_on_paused_src),
	T("4.11 splice", test_splice_refusals),
	T("4.11 splice", test_sendfile),
	T("4.11 splice", test_sendfile_cancel),
	T("4.11 splice", test_splice_pipe_budget),
	{ NULL, NULL, NULL },
};
