/* tests/test_mesh.c: CUnit tests of the cross-shard mesh: per-pair order, full rings, no loss or duplicates under stress, submit_to, broadcast, room completions; on Linux and, as win-mesh, on Windows. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shard_test.h"
#include "os.h" /* thread identity on both OSes */
#include "tl_config.h"

#define MAXS 4

/* ---- order, no loss, no duplicates: every shard streams to every shard ---- */

/* Token layout of the stress: [63..56] handler (0), [55..48] sender, [47..0] seq. */
struct stress {
	uint64_t count;                    /* messages per ordered pair */
	uint64_t sent[MAXS][MAXS];         /* [src][dst], written by src only */
	uint64_t next[MAXS][MAXS];         /* [dst][src] expected seq, by dst only */
	uint64_t refused[MAXS];
	atomic_uint_fast64_t bad, done_pairs;
	uint32_t n;
};

static struct stress S;

static void stress_handler(tl_shard *s, const tl_completion *c)
{
	uint32_t me = tl_shard_id(s);

	if (c->kind != TL_K_MESH)
		return;
	uint32_t src = (uint32_t)(c->token >> 48) & 0xff;
	uint64_t seq = c->token & 0xffffffffffffull;

	if (src != c->aux || src >= S.n || seq != S.next[me][src] || c->u.mesh.payload != ~seq ||
	    c->result != 0 || !(c->flags & TL_F_TERMINAL)) {
		if (atomic_fetch_add(&S.bad, 1) < 5)
			fprintf(stderr, "  shard %u from %u: seq %llu want %llu (aux %u)\n", me, src,
				(unsigned long long)seq, (unsigned long long)S.next[me][src], c->aux);
		return;
	}
	if (++S.next[me][src] == S.count &&
	    atomic_fetch_add(&S.done_pairs, 1) + 1 == (uint64_t)S.n * S.n)
		tl_runtime_stop(tl_shard_runtime(s));
}

/* Busy producer: post to every target until its ring refuses. */
static int stress_pass(tl_shard *s, void *arg)
{
	uint32_t me = tl_shard_id(s);
	int more = 0;

	(void)arg;
	for (uint32_t t = 0; t < S.n; t++) {
		uint64_t *k = &S.sent[me][t];

		while (*k < S.count) {
			int rc = tl_shard_post(s, t, ((uint64_t)me << 48) | *k, ~*k);

			if (rc == -ENOBUFS) {
				S.refused[me]++;
				break;
			}
			if (rc != 0) {
				atomic_fetch_add(&S.bad, 1);
				break;
			}
			++*k;
		}
		more |= *k < S.count;
	}
	return more;
}

static void run_stress(uint32_t n, uint64_t count, uint32_t cap)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/stress");

	memset(&S, 0, sizeof S);
	S.n = n;
	S.count = count;
	st_config(&cfg, n);
	cfg.mesh_capacity = cap;
	cfg.on_completion = stress_handler;
	cfg.on_pass = stress_pass;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&S.bad), 0);
	CU_ASSERT_EQUAL(atomic_load(&S.done_pairs), (uint64_t)n * n);
	for (uint32_t d = 0; d < n; d++)
		for (uint32_t src = 0; src < n; src++)
			CU_ASSERT_EQUAL(S.next[d][src], count);
	/* With a small ring the producers must have been refused now and then. */
	if (cap <= 16) {
		uint64_t r = 0;

		for (uint32_t i = 0; i < n; i++)
			r += S.refused[i];
		CU_ASSERT_TRUE(r > 0);
	}
	st_end(fds);
}

static uint64_t stress_count(void)
{
	const char *e = getenv("TL_STRESS_COUNT");

	return e && atoll(e) > 0 ? (uint64_t)atoll(e) : 200000;
}

static void test_order_two_shards(void)
{
	run_stress(2, stress_count(), 1024);
}

static void test_order_small_ring(void)
{
	run_stress(2, stress_count() / 4, 4);
}

static void test_order_three_shards(void)
{
	run_stress(3, stress_count() / 4, 64);
}

/* ---- a full ring refuses; the room completion resumes without loss ---- */

struct fullring {
	uint32_t cap, first_burst;
	uint64_t total, sent, got, rooms, bad;
	int second_wait_rc, bad_target_rc;
};

static struct fullring F;

static void full_send(tl_shard *s)
{
	int rc;

	while (F.sent < F.total && (rc = tl_shard_post(s, 1, F.sent, F.sent * 3)) == 0)
		F.sent++;
	if (F.sent < F.total) {
		rc = tl_shard_wait_room(s, 1, 0x700d);
		if (rc != 0)
			F.bad++;
	}
}

static int full_start(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	F.bad_target_rc = tl_shard_post(s, 2, 0, 0);
	/* Nothing is published before the pass ends, so exactly the ring's
	 * capacity goes in and then -ENOBUFS. */
	while (tl_shard_post(s, 1, F.sent, F.sent * 3) == 0)
		F.sent++;
	F.first_burst = (uint32_t)F.sent;
	ST_CHECK(tl_shard_wait_room(s, 1, 0x700d) == 0);
	F.second_wait_rc = tl_shard_wait_room(s, 1, 0x700d);
	return 0;
}

static void full_handler(tl_shard *s, const tl_completion *c)
{
	if (tl_shard_id(s) == 0 && c->kind == TL_K_ROOM) {
		F.rooms++;
		if (c->token != 0x700d || c->aux != 1 || c->result != 0)
			F.bad++;
		full_send(s);
	} else if (tl_shard_id(s) == 1 && c->kind == TL_K_MESH) {
		if (c->token != F.got || c->u.mesh.payload != F.got * 3 || c->aux != 0)
			F.bad++;
		if (++F.got == F.total)
			tl_runtime_stop(tl_shard_runtime(s));
	}
}

static void test_full_ring(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/full_ring");

	memset(&F, 0, sizeof F);
	F.total = 5000;
	st_config(&cfg, 2);
	cfg.mesh_capacity = 8;
	cfg.on_launch = full_start;
	cfg.on_completion = full_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(F.first_burst, 8);
	CU_ASSERT_EQUAL(F.second_wait_rc, -ENOBUFS);
	CU_ASSERT_EQUAL(F.bad_target_rc, -EINVAL);
	CU_ASSERT_EQUAL(F.bad, 0);
	CU_ASSERT_EQUAL(F.got, F.total);
	CU_ASSERT_EQUAL(F.sent, F.total);
	CU_ASSERT_TRUE(F.rooms > 0);
	st_end(fds);
}

/* ---- submit_to: runs on the target, result comes back; credits ---- */

struct call {
	tl__os_thread thread[MAXS];
	uint64_t calls, results, bad, refused;
	int null_rc;
	uint64_t arg_cells[128];
};

static struct call C;

static int64_t on_target(tl_shard *s, void *arg)
{
	uint64_t *cell = arg;

	if (!tl__os_thread_is(C.thread[tl_shard_id(s)]) && C.bad++ < 3)
		fprintf(stderr, "  call ran on shard %u: not its thread\n", tl_shard_id(s));
	return (int64_t)(tl_shard_id(s) * 1000000 + *cell);
}

static int call_start(tl_shard *s, void *arg)
{
	(void)arg;
	C.thread[tl_shard_id(s)] = tl__os_thread_self();
	return 0;
}

static int call_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0 || C.calls >= 2000)
		return 0;
	if (!C.null_rc)
		C.null_rc = tl_shard_submit_to(s, 1, NULL, NULL, 0);
	while (C.calls < 2000) {
		uint64_t *cell = &C.arg_cells[C.calls % 128];
		int rc;

		/* Cell k % 128 belongs to call k - 128 before, which is back:
		 * the credit limit (64) bounds the calls in flight. It is
		 * written even when the call is then refused. */
		*cell = C.calls;
		rc = tl_shard_submit_to(s, 1, on_target, cell, C.calls);
		if (rc == -ENOBUFS) {
			C.refused++;
			break;
		}
		ST_CHECK(rc == 0);
		C.calls++;
	}
	return 0;
}

static void call_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || tl_shard_id(s) != 0)
		return;
	if (c->aux != (1 | TL_MESH_RESULT) || c->result != (int64_t)(1000000 + c->token) ||
	    c->u.mesh.arg != &C.arg_cells[c->token % 128] || c->token != C.results) {
		if (C.bad++ < 3)
			fprintf(stderr, "  result: aux %#x result %lld token %llu (want %llu)\n", c->aux,
				(long long)c->result, (unsigned long long)c->token,
				(unsigned long long)C.results);
	}
	if (++C.results == 2000)
		tl_runtime_stop(tl_shard_runtime(s));
}

static void test_submit_to(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/submit_to");

	memset(&C, 0, sizeof C);
	st_config(&cfg, 2);
	cfg.on_launch = call_start;
	cfg.on_pass = call_pass;
	cfg.on_completion = call_handler;
	cfg.mesh_inflight = 64; /* the credit limit this test reaches */
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(C.null_rc, -EINVAL);
	CU_ASSERT_EQUAL(C.bad, 0);
	CU_ASSERT_EQUAL(C.results, 2000);
	CU_ASSERT_TRUE(C.refused > 0); /* the credit limit was reached */
	st_end(fds);
}

/* Results that find the reverse ring full wait in a backlog: shard 1 fills
 * its ring to 0 with posts while shard 0 calls it. */
struct backlog {
	uint64_t posts_got, results, bad;
	int phase;
};

static struct backlog B;

static int64_t bl_fn(tl_shard *s, void *arg)
{
	/* Fill the ring back to the caller so the result cannot go in. */
	while (tl_shard_post(s, 0, 7, 7) == 0)
		;
	return (int64_t)(uintptr_t)arg;
}

static int bl_start(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0)
		for (uintptr_t i = 0; i < 8; i++)
			ST_CHECK(tl_shard_submit_to(s, 1, bl_fn, (void *)i, i) == 0);
	return 0;
}

static void bl_handler(tl_shard *s, const tl_completion *c)
{
	if (tl_shard_id(s) != 0 || c->kind != TL_K_MESH)
		return;
	if (c->aux & TL_MESH_RESULT) {
		if (c->result != (int64_t)c->token || c->token != B.results)
			B.bad++;
		if (++B.results == 8)
			tl_runtime_stop(tl_shard_runtime(s));
	} else {
		B.posts_got++;
	}
}

static void test_result_backlog(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/result_backlog");

	memset(&B, 0, sizeof B);
	st_config(&cfg, 2);
	cfg.mesh_capacity = 8;
	cfg.on_launch = bl_start;
	cfg.on_completion = bl_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(B.bad, 0);
	CU_ASSERT_EQUAL(B.results, 8);
	CU_ASSERT_TRUE(B.posts_got >= 4);
	st_end(fds);
}

/* ---- broadcast and submit_all ---- */

struct bcast {
	atomic_uint got[MAXS], bad;
	atomic_uint results, bye;
	uint32_t n;
};

static struct bcast BC;

static int64_t bc_fn(tl_shard *s, void *arg)
{
	(void)arg;
	return 100 + tl_shard_id(s);
}

static int bc_start(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0) {
		ST_CHECK(tl_shard_broadcast(s, 0xb0, 42) == (int)BC.n);
		ST_CHECK(tl_shard_submit_all(s, bc_fn, NULL, 0xca11) == (int)BC.n);
	}
	return 0;
}

static void bc_stop(tl_shard *s, void *arg)
{
	(void)arg;
	/* Messages sent while stopping are still delivered. */
	if (tl_shard_id(s) != 0)
		ST_CHECK(tl_shard_post(s, 0, 0xb7e, tl_shard_id(s)) == 0);
}

static void bc_handler(tl_shard *s, const tl_completion *c)
{
	uint32_t me = tl_shard_id(s);

	if (c->kind != TL_K_MESH)
		return;
	if (c->token == 0xb0) {
		if (c->aux != 0 || c->u.mesh.payload != 42)
			atomic_fetch_add(&BC.bad, 1);
		atomic_fetch_add(&BC.got[me], 1);
	} else if (c->token == 0xca11) {
		uint32_t from = TL_MESH_SHARD(c->aux);

		if (me != 0 || !(c->aux & TL_MESH_RESULT) || c->result != 100 + (int64_t)from)
			atomic_fetch_add(&BC.bad, 1);
		if (atomic_fetch_add(&BC.results, 1) + 1 == BC.n)
			tl_runtime_stop(tl_shard_runtime(s));
	} else if (c->token == 0xb7e) {
		atomic_fetch_add(&BC.bye, 1);
	}
}

static void test_broadcast(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/broadcast");

	memset(&BC, 0, sizeof BC);
	BC.n = 3;
	st_config(&cfg, BC.n);
	cfg.on_launch = bc_start;
	cfg.on_stop = bc_stop;
	cfg.on_completion = bc_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	for (uint32_t i = 0; i < BC.n; i++)
		CU_ASSERT_EQUAL(atomic_load(&BC.got[i]), 1);
	CU_ASSERT_EQUAL(atomic_load(&BC.bad), 0);
	CU_ASSERT_EQUAL(atomic_load(&BC.results), BC.n);
	CU_ASSERT_EQUAL(atomic_load(&BC.bye), BC.n - 1);
	st_end(fds);
}

/* ---- tokens can name handlers ---- */

static atomic_uint named_hits, default_hits;

static void named_handler(tl_shard *s, const tl_completion *c)
{
	(void)s;
	if (c->kind == TL_K_MESH && tl_token_handler(c->token) == 3 &&
	    tl_token_data(c->token) == 0x1234)
		atomic_fetch_add(&named_hits, 1);
	tl_runtime_stop(tl_shard_runtime(s));
}

static void default_handler(tl_shard *s, const tl_completion *c)
{
	(void)s;
	if (c->kind == TL_K_MESH)
		atomic_fetch_add(&default_hits, 1);
}

static int named_start(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0) {
		ST_CHECK(tl_shard_post(s, 1, tl_token(5, 1), 0) == 0); /* unset: default */
		ST_CHECK(tl_shard_post(s, 1, tl_token(3, 0x1234), 0) == 0);
	}
	return 0;
}

static void test_named_handler(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/named_handler");

	atomic_store(&named_hits, 0);
	atomic_store(&default_hits, 0);
	st_config(&cfg, 2);
	cfg.on_launch = named_start;
	cfg.on_completion = default_handler;
	cfg.handlers[3] = named_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&named_hits), 1);
	CU_ASSERT_EQUAL(atomic_load(&default_hits), 1);
	/* handlers[0] is reserved. */
	cfg.handlers[0] = default_handler;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	st_end(fds);
}

/* ---- steady state allocates nothing (contract 1.2) ---- */

#if TL_HAVE_JEMALLOC && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#include <jemalloc/jemalloc.h>

/* Bytes the calling thread ever allocated (jemalloc's own count). */
static uint64_t thread_allocated(void)
{
	uint64_t v = 0;
	size_t sz = sizeof v;

	mallctl("thread.allocated", &v, &sz, NULL, 0);
	return v;
}

struct noalloc {
	uint64_t total, sent, got, calls, results, gathers;
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	tl_mesh_gate gate;
	uint64_t gated;
	int gbusy;
	uint64_t mark[2][2]; /* [shard][0 at warm-up end, 1 at the end] */
};

static struct noalloc NA;
#define NA_GATHERS 25

static int64_t na_fn(tl_shard *s, void *arg)
{
	(void)s;
	return (int64_t)(uintptr_t)arg;
}

static int na_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	if (NA.sent == NA.total / 10 && !NA.mark[0][0])
		NA.mark[0][0] = thread_allocated();
	/* The last post waits until NA_GATHERS gathers have come back, and a
	 * call or gated call refused for want of credits is made again in a
	 * later pass before the posts go on, so how many of each run does not
	 * depend on how fast shard 1 drains the mesh. */
	while (NA.sent < NA.total && !(NA.sent == NA.total - 1 && NA.gathers < NA_GATHERS)) {
		if (NA.sent % 16 == 0 && NA.calls * 16 == NA.sent) {
			if (tl_shard_submit_to(s, 1, na_fn, NULL, 0) != 0)
				break;
			NA.calls++;
		}
		if (NA.sent % 16 == 4 && NA.gated * 16 + 4 == NA.sent) {
			if (tl_shard_submit_gated(s, &NA.gate, 1, na_fn, NULL, 0) != 0)
				break;
			NA.gated++;
		}
		if (tl_shard_post(s, 1, NA.sent, 0) != 0)
			break;
		if (++NA.sent == NA.total / 10)
			break;
	}
	/* One gather in flight at all times. */
	if (NA.sent < NA.total && !NA.gbusy &&
	    tl_shard_gather(s, &NA.g, NULL, 0, na_fn, NULL, 0) == 2)
		NA.gbusy = 1;
	return NA.sent < NA.total;
}

static void na_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH)
		return;
	if (tl_shard_id(s) == 0) {
		if (c->aux & TL_MESH_GATHER) {
			NA.gbusy = 0;
			NA.gathers++;
		}
		NA.results++;
		return;
	}
	if (++NA.got == NA.total / 10)
		NA.mark[1][0] = thread_allocated();
	if (NA.got == NA.total) {
		NA.mark[1][1] = thread_allocated();
		tl_runtime_stop(tl_shard_runtime(s));
	}
}

static void na_stop(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0)
		NA.mark[0][1] = thread_allocated();
}

static void test_no_alloc(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("mesh/no_alloc");

	memset(&NA, 0, sizeof NA);
	NA.total = 100000;
	CU_ASSERT_EQUAL_FATAL(tl_mesh_gather_init(&NA.g, NA.parts, 2), 0);
	CU_ASSERT_EQUAL_FATAL(tl_mesh_gate_init(&NA.gate), 0);
	st_config(&cfg, 2);
	cfg.stats = 1; /* publication included */
	cfg.on_pass = na_pass;
	cfg.on_stop = na_stop;
	cfg.on_completion = na_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(NA.got, NA.total);
	CU_ASSERT_EQUAL(NA.calls, NA.total / 16); /* one before each 16th post */
	CU_ASSERT_TRUE(NA.gathers >= NA_GATHERS);
	CU_ASSERT_EQUAL(NA.gated, NA.total / 16);
	/* Posting, running functions, results, gathers, gated calls, publishing
	 * stats: nothing
	 * allocated on either shard once warm. */
	CU_ASSERT_TRUE(NA.mark[0][0] != 0 && NA.mark[1][0] != 0);
	CU_ASSERT_EQUAL(NA.mark[0][1] - NA.mark[0][0], 0);
	CU_ASSERT_EQUAL(NA.mark[1][1] - NA.mark[1][0], 0);
	st_end(fds);
}
#elif defined(_WIN32)
static void test_no_alloc(void)
{
	int fds = st_begin("mesh/no_alloc");

	st_skip("no jemalloc in the Windows build: the test reads its per-thread count of bytes "
		"allocated (thread.allocated)");
	st_end(fds);
}
#endif

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("mesh", NULL, NULL);
	st_add(s, "order_two_shards", test_order_two_shards);
	st_add(s, "order_small_ring", test_order_small_ring);
	st_add(s, "order_three_shards", test_order_three_shards);
	st_add(s, "full_ring", test_full_ring);
	st_add(s, "submit_to", test_submit_to);
	st_add(s, "result_backlog", test_result_backlog);
	st_add(s, "broadcast", test_broadcast);
	st_add(s, "named_handler", test_named_handler);
#if (TL_HAVE_JEMALLOC && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)) || \
	defined(_WIN32)
	st_add(s, "no_alloc", test_no_alloc);
#endif
	return st_run();
}
