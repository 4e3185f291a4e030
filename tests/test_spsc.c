/* tests/test_spsc.c: CUnit tests of the mesh ring (shards/spsc.h): limits, FIFO, all-or-nothing batches, two-thread stress; on Linux and, as win-spsc, on Windows. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <CUnit/Basic.h>

#include "spsc.h" /* and os.h: the stress threads on both OSes */

/* A message whose every field is derived from its sequence number, so the
 * consumer can tell a torn or misplaced copy from a correct one. */
static struct tl_mesh_msg msg_of(uint64_t seq)
{
	struct tl_mesh_msg m = {
		.token = seq,
		.a = ~seq,
		.b = seq * UINT64_C(0x9e3779b97f4a7c15),
		.fn = (void *)(uintptr_t)(seq ^ 0x5a5a5a5au),
	};
	return m;
}

static int msg_ok(const struct tl_mesh_msg *m, uint64_t seq)
{
	struct tl_mesh_msg want = msg_of(seq);

	return m->token == want.token && m->a == want.a && m->b == want.b &&
	       m->fn == want.fn;
}

static void test_init_limits(void)
{
	struct tl__spsc r;

	CU_ASSERT_EQUAL(tl__spsc_init(&r, 0), -EINVAL);
	CU_ASSERT_EQUAL(tl__spsc_init(&r, TL__SPSC_MAX_CAP + 1), -EINVAL);
	CU_ASSERT_EQUAL(tl__spsc_init(&r, UINT32_MAX), -EINVAL);
	CU_ASSERT_EQUAL(tl__spsc_init(NULL, 8), -EINVAL);

	static const struct { uint32_t ask, got; } cases[] = {
		{ 1, 1 }, { 2, 2 }, { 3, 4 }, { 5, 8 }, { 8, 8 }, { 1000, 1024 },
		{ TL__SPSC_MAX_CAP - 1, TL__SPSC_MAX_CAP }, { TL__SPSC_MAX_CAP, TL__SPSC_MAX_CAP },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CU_ASSERT_EQUAL_FATAL(tl__spsc_init(&r, cases[i].ask), 0);
		CU_ASSERT_EQUAL(tl__spsc_capacity(&r), cases[i].got);
		CU_ASSERT_PTR_NOT_NULL(r.slots);
		CU_ASSERT_EQUAL((uintptr_t)r.slots % TL__CACHE_LINE, 0);
		CU_ASSERT_TRUE(tl__spsc_empty(&r));
		CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 0);
		tl__spsc_free(&r);
		CU_ASSERT_PTR_NULL(r.slots);
		tl__spsc_free(&r); /* a second free is harmless */
	}
}

static void test_layout(void)
{
	CU_ASSERT_EQUAL(sizeof(struct tl_mesh_msg), 32);
	/* The two indexes and the shared read-only part on separate lines. */
	CU_ASSERT_TRUE(offsetof(struct tl__spsc, tail) - offsetof(struct tl__spsc, head) >= TL__CACHE_LINE);
	CU_ASSERT_TRUE(offsetof(struct tl__spsc, slots) - offsetof(struct tl__spsc, tail) >= TL__CACHE_LINE);
	CU_ASSERT_EQUAL(offsetof(struct tl__spsc, tail) % TL__CACHE_LINE, 0);
	CU_ASSERT_EQUAL(offsetof(struct tl__spsc, slots) % TL__CACHE_LINE, 0);
	CU_ASSERT_EQUAL(_Alignof(struct tl__spsc), TL__CACHE_LINE);
}

static void test_fill_to_capacity(void)
{
	struct tl__spsc r;
	struct tl_mesh_msg m, out[16];

	CU_ASSERT_EQUAL_FATAL(tl__spsc_init(&r, 8), 0);
	for (uint64_t i = 0; i < 8; i++) {
		m = msg_of(i);
		CU_ASSERT_EQUAL(tl__spsc_push(&r, &m), 0);
	}
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 8);
	m = msg_of(99);
	CU_ASSERT_EQUAL(tl__spsc_push(&r, &m), -ENOBUFS);
	CU_ASSERT_EQUAL(tl__spsc_push(&r, &m), -ENOBUFS);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 8);
	CU_ASSERT_FALSE(tl__spsc_empty(&r));

	/* Nothing lost and nothing of the refused message slipped in. */
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 16), 8);
	for (uint64_t i = 0; i < 8; i++)
		CU_ASSERT_TRUE(msg_ok(&out[i], i));
	CU_ASSERT_TRUE(tl__spsc_empty(&r));
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 16), 0);

	/* Room again after the pop. */
	m = msg_of(8);
	CU_ASSERT_EQUAL(tl__spsc_push(&r, &m), 0);
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 1), 1);
	CU_ASSERT_TRUE(msg_ok(&out[0], 8));
	tl__spsc_free(&r);
}

static void test_fifo_wraparound(void)
{
	struct tl__spsc r;
	struct tl_mesh_msg m, out[4];
	uint64_t next_in = 0, next_out = 0;
	int bad = 0;

	CU_ASSERT_EQUAL_FATAL(tl__spsc_init(&r, 4), 0);
	/* Push 3, pop 2: the indexes walk around the ring many times and the
	 * fill level oscillates, so every slot is used at every offset. */
	for (int round = 0; round < 1000; round++) {
		for (int k = 0; k < 3; k++) {
			m = msg_of(next_in);
			if (tl__spsc_push(&r, &m) == 0)
				next_in++;
		}
		size_t got = tl__spsc_pop_n(&r, out, 2);
		for (size_t k = 0; k < got; k++)
			bad += !msg_ok(&out[k], next_out++);
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_TRUE(next_in > 1000);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), next_in - next_out);
	size_t got;
	while ((got = tl__spsc_pop_n(&r, out, 4)) > 0)
		for (size_t k = 0; k < got; k++)
			bad += !msg_ok(&out[k], next_out++);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(next_out, next_in);
	CU_ASSERT_TRUE(tl__spsc_empty(&r));
	tl__spsc_free(&r);
}

static void test_push_n_all_or_nothing(void)
{
	struct tl__spsc r;
	struct tl_mesh_msg in[16], out[16];

	for (uint64_t i = 0; i < 16; i++)
		in[i] = msg_of(i);
	CU_ASSERT_EQUAL_FATAL(tl__spsc_init(&r, 8), 0);

	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in, 0), 0);
	CU_ASSERT_TRUE(tl__spsc_empty(&r));
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in, 9), -EINVAL);
	CU_ASSERT_TRUE(tl__spsc_empty(&r));

	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in, 5), 0);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 5);
	/* 4 do not fit in the 3 free slots: none of them goes in. */
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in + 5, 4), -ENOBUFS);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 5);
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in + 5, 3), 0);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 8);
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in + 8, 1), -ENOBUFS);

	/* A partial pop returns exactly what was asked, oldest first. */
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 0), 0);
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 6), 6);
	for (uint64_t i = 0; i < 6; i++)
		CU_ASSERT_TRUE(msg_ok(&out[i], i));

	/* This batch starts at slot 0 (head 8) and the next one straddles
	 * the end of the slot array. */
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in + 8, 5), 0);
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out, 5), 5);
	CU_ASSERT_EQUAL(tl__spsc_push_n(&r, in + 13, 3), 0);
	CU_ASSERT_EQUAL(tl__spsc_size_approx(&r), 5);
	/* Ask for more than is there: get what is there. */
	CU_ASSERT_EQUAL(tl__spsc_pop_n(&r, out + 5, 16), 5);
	for (uint64_t i = 0; i < 10; i++)
		CU_ASSERT_TRUE(msg_ok(&out[i], i + 6));
	CU_ASSERT_TRUE(tl__spsc_empty(&r));
	tl__spsc_free(&r);
}

/* ---- two-thread stress ---- */

struct stress {
	struct tl__spsc ring;
	uint64_t count;
	unsigned max_batch;
	/* Written by the consumer, read by main after the join. */
	uint64_t received;
	uint64_t bad;
	uint64_t first_bad;
};

/* Deterministic batch sizes; xorshift is enough to vary them. */
static unsigned next_batch(uint64_t *x, unsigned max)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return 1 + (unsigned)(*x % max);
}

static TL__OS_THREAD_FN producer(void *arg)
{
	struct stress *s = arg;
	struct tl_mesh_msg batch[64];
	uint64_t seq = 0, x = 0x1234567;

	while (seq < s->count) {
		unsigned n = next_batch(&x, s->max_batch);

		if (n > s->count - seq)
			n = (unsigned)(s->count - seq);
		/* Alternate single pushes and batches so both paths race
		 * against the consumer. */
		if (n == 1 || (x & 4)) {
			struct tl_mesh_msg m = msg_of(seq);

			if (tl__spsc_push(&s->ring, &m) == 0)
				seq++;
			else
				tl__os_yield();
			continue;
		}
		for (unsigned k = 0; k < n; k++)
			batch[k] = msg_of(seq + k);
		if (tl__spsc_push_n(&s->ring, batch, n) == 0)
			seq += n;
		else
			tl__os_yield();
	}
	return 0;
}

static TL__OS_THREAD_FN consumer(void *arg)
{
	struct stress *s = arg;
	struct tl_mesh_msg out[64];
	uint64_t x = 0x7654321;

	while (s->received < s->count) {
		size_t got = tl__spsc_pop_n(&s->ring, out, next_batch(&x, 64));

		if (got == 0) {
			tl__os_yield();
			continue;
		}
		for (size_t k = 0; k < got; k++) {
			if (!msg_ok(&out[k], s->received)) {
				if (!s->bad)
					s->first_bad = s->received;
				s->bad++;
			}
			s->received++;
		}
	}
	return 0;
}

static void run_stress(uint32_t cap, uint64_t count, unsigned max_batch)
{
	/* Static: the ring wants 64-byte alignment and a large stack frame
	 * is not needed for that. */
	static struct stress s;
	tl__os_thread_handle p = 0, c = 0;

	s.count = count;
	s.max_batch = max_batch;
	s.received = 0;
	s.bad = 0;
	s.first_bad = 0;
	CU_ASSERT_EQUAL_FATAL(tl__spsc_init(&s.ring, cap), 0);
	CU_ASSERT_EQUAL_FATAL(tl__os_thread_start(&c, consumer, &s), 0);
	CU_ASSERT_EQUAL_FATAL(tl__os_thread_start(&p, producer, &s), 0);
	tl__os_thread_join(p);
	tl__os_thread_join(c);
	CU_ASSERT_EQUAL(s.received, count);
	CU_ASSERT_EQUAL(s.bad, 0);
	if (s.bad)
		fprintf(stderr, "cap %u: %llu bad, first at %llu\n", cap,
			(unsigned long long)s.bad, (unsigned long long)s.first_bad);
	CU_ASSERT_TRUE(tl__spsc_empty(&s.ring));
	tl__spsc_free(&s.ring);
}

/* TL_STRESS_COUNT overrides the message count, for slow sanitizers. */
static uint64_t stress_count(void)
{
	const char *v = getenv("TL_STRESS_COUNT");
	unsigned long long n;

	if (v && sscanf(v, "%llu", &n) == 1 && n > 0)
		return n;
	return 2000000;
}

static void test_stress_1024(void)
{
	run_stress(1024, stress_count(), 64);
}

static void test_stress_tiny(void)
{
	/* Capacity 8 with batches up to 8: full and empty all the time. */
	run_stress(8, stress_count(), 8);
}

static void test_stress_one(void)
{
	run_stress(1, stress_count() / 10, 1);
}

int main(void)
{
	static const struct {
		const char *name;
		CU_TestFunc fn;
	} tests[] = {
		{ "init limits", test_init_limits },
		{ "layout", test_layout },
		{ "fill to capacity", test_fill_to_capacity },
		{ "fifo wraparound", test_fifo_wraparound },
		{ "push_n all or nothing", test_push_n_all_or_nothing },
		{ "stress cap 1024", test_stress_1024 },
		{ "stress cap 8", test_stress_tiny },
		{ "stress cap 1", test_stress_one },
	};
	CU_pSuite suite;
	unsigned failures;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	suite = CU_add_suite("spsc", NULL, NULL);
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
