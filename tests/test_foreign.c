/* tests/test_foreign.c: CUnit tests of blocks freed on the shard that allocated them (tl_shard_alloc, tl_shard_free): the per-shard allocation stays flat when one shard allocates and another frees, a batch the mesh refuses waits for room, blocks freed by the last handlers of a stop reach their owner, and the API's edges; on Linux and, as win-foreign, on Windows. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shard_test.h"
#include "os.h" /* yields and sleeps on both OSes */

/* Shard i's bytes allocated and freed by its thread, from the live stats
 * region (the last record it published). */
static void shard_bytes(tl_stats_reader *r, uint32_t i, uint64_t *alloc, uint64_t *freed)
{
	tl_stats_shard st;

	memset(&st, 0, sizeof st);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, i, &st, NULL, 0), 0);
	*alloc = st.alloc_bytes;
	*freed = st.freed_bytes;
}

static int arenas_on(tl_runtime *rt)
{
	const char *why;

	if (tl_runtime_arenas(rt, &why))
		return 1;
	printf("\n  (per-shard arenas off: %s; tl_shard_free is a plain free)\n", why);
	return 0;
}

#define MiB (1024ull * 1024ull)

/* ---- one shard allocates, the other frees: both ALLOC columns stay flat ---- */

#define ROUNDS 100u
#define PER 256u
#define SIZE 4000u
enum { TOK_BLOCK = 1, TOK_ROUND = 2 };

static struct {
	uint32_t round, freed_in_round;
	uint64_t queued, here, bad;
	void *keep; /* freed after the run, off any shard */
	int api_ok;
} F;

/* The API's edges, on shard 0 at launch. */
static int api_checks(tl_shard *s)
{
	char fake[64] = {0};
	void *p = tl_shard_alloc(s, 100), *z = tl_shard_alloc(s, 0);
	int ok = 1;

	ok &= p != NULL && z != NULL && (uintptr_t)p % _Alignof(max_align_t) == 0;
	ok &= tl_shard_alloc(s, SIZE_MAX) == NULL && tl_shard_alloc(s, SIZE_MAX - 8) == NULL;
	ok &= tl_shard_free(s, NULL) == 0;
	/* Not a block of tl_shard_alloc: refused, nothing done. */
	ok &= tl_shard_free(s, fake + 32) == -EINVAL;
	/* This shard's own block: freed at once. */
	ok &= tl_shard_free(s, z) == 0;
	memset(p, 0x5a, 100);
	F.keep = p;
	return ok;
}

static void send_round(tl_shard *s)
{
	for (uint32_t i = 0; i < PER; i++) {
		unsigned char *b = tl_shard_alloc(s, SIZE);

		ST_CHECK(b != NULL);
		b[0] = (unsigned char)F.round;
		b[SIZE - 1] = (unsigned char)i;
		ST_CHECK(tl_shard_post(s, 1, TOK_BLOCK, (uint64_t)(uintptr_t)b) == 0);
	}
}

static int flat_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	F.api_ok = api_checks(s);
	send_round(s);
	return 0;
}

static void flat_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH)
		return;
	if (c->token == TOK_BLOCK) {
		unsigned char *b = (void *)(uintptr_t)c->u.mesh.payload;
		int rc;

		/* Shard 1 frees what shard 0 wrote: the block's bytes came
		 * with the message. */
		ST_CHECK(tl_shard_id(s) == 1 && b[0] == (unsigned char)F.round &&
			 b[SIZE - 1] == (unsigned char)F.freed_in_round);
		rc = tl_shard_free(s, b);
		F.queued += rc == 1;
		F.here += rc == 0;
		F.bad += rc < 0;
		if (++F.freed_in_round == PER) {
			F.freed_in_round = 0;
			ST_CHECK(tl_shard_post(s, 0, TOK_ROUND, 0) == 0);
		}
		return;
	}
	if (c->token == TOK_ROUND) {
		if (++F.round == ROUNDS)
			tl_runtime_stop(tl_shard_runtime(s));
		else
			send_round(s);
	}
}

static void test_flat(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	uint64_t a0, f0, a1, f1, churn = (uint64_t)ROUNDS * PER * SIZE;
	int fds = st_begin("foreign/flat");

	memset(&F, 0, sizeof F);
	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.on_launch = flat_launch;
	cfg.on_completion = flat_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_EQUAL(F.round, ROUNDS);
	CU_ASSERT_EQUAL(F.api_ok, 1);
	CU_ASSERT_EQUAL(F.bad, 0);
	CU_ASSERT_EQUAL(F.queued + F.here, (uint64_t)ROUNDS * PER);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid()), 0);
	shard_bytes(r, 0, &a0, &f0);
	shard_bytes(r, 1, &a1, &f1);
	printf("\n  %llu MiB through: shard 0 allocated %.1f MiB, freed %.1f; shard 1 %.1f, %.1f\n",
	       (unsigned long long)(churn / MiB), (double)a0 / MiB, (double)f0 / MiB,
	       (double)a1 / MiB, (double)f1 / MiB);
	if (arenas_on(rt)) {
		CU_ASSERT_EQUAL(F.queued, (uint64_t)ROUNDS * PER);
		/* Shard 0 freed what it allocated: its ALLOC (allocated less
		 * freed) is what its setup holds, as shard 1's, not that and
		 * the 98 MiB that went through. */
		CU_ASSERT_TRUE(a0 >= churn && f0 >= churn);
		CU_ASSERT_TRUE((int64_t)(a0 - f0) < (int64_t)(a1 - f1) + (int64_t)(4 * MiB));
		/* And shard 1 freed none of it. */
		CU_ASSERT_TRUE(f1 < 8 * MiB);
	} else {
		CU_ASSERT_EQUAL(F.here, (uint64_t)ROUNDS * PER);
		st_skip("per-shard arenas off: frees are plain, no owner to reach");
	}
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	/* Off any shard (the runtime is gone): freed here and now. */
	CU_ASSERT_EQUAL(((unsigned char *)F.keep)[99], 0x5a);
	CU_ASSERT_EQUAL(tl_shard_free(NULL, F.keep), 0);
	st_end(fds);
}

/* ---- a batch the mesh refuses waits, and goes once there is room ---- */

#define RK 200u
#define RSIZE (16u * 1024u)
enum { TOK_GO = 1, TOK_HOLD = 2, TOK_FILL = 3 };

static struct {
	void *blocks[RK];
	atomic_int freed, release;
	int filled, still_full, held;
	uint64_t queued;
} R;

static int refuse_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	for (uint32_t i = 0; i < RK; i++) {
		R.blocks[i] = tl_shard_alloc(s, RSIZE);
		ST_CHECK(R.blocks[i] != NULL);
		memset(R.blocks[i], (int)i, 64);
	}
	ST_CHECK(tl_shard_post(s, 1, TOK_GO, 0) == 0);
	/* Its first pass holds shard 0 in a handler: its rings fill up. */
	ST_CHECK(tl_shard_post(s, 0, TOK_HOLD, 0) == 0);
	return 0;
}

static void refuse_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH)
		return;
	if (c->token == TOK_HOLD) {
		/* Until the test's thread lets go: shard 1's batches to
		 * shard 0 find the ring full meanwhile. */
		R.held = st_spin_until(&R.release);
		return;
	}
	if (c->token != TOK_GO)
		return;
	/* Shard 1: fill the ring to shard 0, which is held. */
	while (tl_shard_post(s, 0, TOK_FILL, 0) == 0)
		R.filled++;
	for (uint32_t i = 0; i < RK; i++) {
		ST_CHECK(((unsigned char *)R.blocks[i])[63] == (unsigned char)i);
		R.queued += tl_shard_free(s, R.blocks[i]) == 1;
	}
	/* The ring is still full, so every batch of 64 was refused and is
	 * still here; the end of this pass is refused too, and shard 1
	 * parks waiting for room. */
	R.still_full = tl_shard_post(s, 0, TOK_FILL, 0) == -ENOBUFS;
	atomic_store(&R.freed, 1);
}

static void test_refused(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	uint64_t a0, f0 = 0, f_before = 0, a1, f1, total = (uint64_t)RK * RSIZE;
	int fds = st_begin("foreign/refused"), on, reached = 0;

	memset(&R, 0, sizeof R);
	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.mesh_capacity = 4;
	cfg.on_launch = refuse_launch;
	cfg.on_completion = refuse_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_launch(rt), 0);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid()), 0);
	on = arenas_on(rt);
	CU_ASSERT_TRUE(st_spin_until(&R.freed));
	/* Time for shard 1 to end its pass and park. */
	tl__os_sleep_us(20000);
	shard_bytes(r, 0, &a0, &f_before);
	atomic_store(&R.release, 1);
	/* Shard 0 takes the posts that filled its ring; shard 1, woken for
	 * the room, sends its blocks, and shard 0 frees them: all before
	 * any stop. */
	for (int i = 0; on && i < 500 && !reached; i++) {
		tl__os_sleep_us(10000);
		shard_bytes(r, 0, &a0, &f0);
		reached = f0 - f_before >= total;
	}
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_EQUAL(R.held, 1);
	CU_ASSERT_TRUE(R.filled >= 1);
	if (on) {
		CU_ASSERT_EQUAL(R.queued, RK);
		CU_ASSERT_EQUAL(R.still_full, 1);
		CU_ASSERT_EQUAL(reached, 1);
		shard_bytes(r, 1, &a1, &f1);
		CU_ASSERT_TRUE(f1 < total / 2);
		printf("\n  shard 0 freed %.1f MiB once the ring had room (before the stop: %s)\n",
		       (double)(f0 - f_before) / MiB, reached ? "yes" : "no");
	} else {
		CU_ASSERT_EQUAL(R.queued, 0);
		st_skip("per-shard arenas off: frees are plain, the mesh is not asked");
	}
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	st_end(fds);
}

/* ---- blocks freed after the mesh closed reach their owner at the stop ---- */

#define SK 150u
#define SSIZE (64u * 1024u)

static struct {
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	void *blocks[SK];
	struct st_stop_dance stop;
	int ended, closed, sent_rc;
	uint64_t queued;
} T;

static int64_t stop_fn(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	return 1;
}

static int stop_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 1)
		return 0;
	for (uint32_t i = 0; i < SK; i++) {
		T.blocks[i] = tl_shard_alloc(s, SSIZE);
		ST_CHECK(T.blocks[i] != NULL);
	}
	return 0;
}

/* As in test_mesh_compose's gather_stop: shard 0 sends a gather after
 * shard 1 is inside its on_stop, so the part on shard 1 runs only at the
 * last delivery, its result is lost, and the gather ends with -EPIPE on
 * shard 0 after the mesh closed. */
static void stop_send(tl_shard *s)
{
	static const uint32_t both[] = {0, 1};

	ST_CHECK(tl_mesh_gather_init(&T.g, T.parts, 2) == 0);
	T.sent_rc = tl_shard_gather(s, &T.g, both, 2, stop_fn, NULL, 0x5f);
}

static void stop_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_GATHER))
		return;
	T.ended++;
	/* The mesh is closed: nothing can be sent any more... */
	T.closed = tl_shard_post(s, 1, 0, 0) == -EPIPE;
	/* ...yet shard 1's blocks are queued for it, not freed here. */
	for (uint32_t i = 0; i < SK; i++)
		T.queued += tl_shard_free(s, T.blocks[i]) == 1;
}

static void test_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	uint64_t a0, f0, a1, f1, total = (uint64_t)SK * SSIZE;
	int fds = st_begin("foreign/stop");

	memset(&T, 0, sizeof T);
	st_config(&cfg, 2);
	cfg.stats = 1;
	st_stop_dance_config(&cfg, &T.stop, stop_send);
	cfg.on_launch = stop_launch;
	cfg.on_completion = stop_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_EQUAL(T.sent_rc, 2);
	CU_ASSERT_EQUAL(T.ended, 1);
	CU_ASSERT_EQUAL(T.closed, 1);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid()), 0);
	shard_bytes(r, 0, &a0, &f0);
	shard_bytes(r, 1, &a1, &f1);
	printf("\n  %.1f MiB freed after the mesh closed: shard 1 (owner) allocated %.1f, freed "
	       "%.1f; shard 0 freed %.1f\n", (double)total / MiB, (double)a1 / MiB,
	       (double)f1 / MiB, (double)f0 / MiB);
	if (arenas_on(rt)) {
		CU_ASSERT_EQUAL(T.queued, SK);
		/* The owner freed them before its last record: its ALLOC is
		 * what its setup holds, as shard 0's. */
		CU_ASSERT_TRUE(f1 >= total);
		CU_ASSERT_TRUE((int64_t)(a1 - f1) < (int64_t)(a0 - f0) + (int64_t)(total / 2));
		CU_ASSERT_TRUE(f0 < total / 2);
	} else {
		CU_ASSERT_EQUAL(T.queued, 0);
		st_skip("per-shard arenas off: frees are plain, nothing waits at the stop");
	}
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	st_end(fds);
}

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("foreign", NULL, NULL);
	st_add(s, "flat", test_flat);
	st_add(s, "refused", test_refused);
	st_add(s, "stop", test_stop);
	return st_run();
}
