/* tests/contract.c: the contract suite (CONTRACT.md sections 1-4, 8), run unchanged once per driver (TL_DRIVER). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "contract.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#ifdef _WIN32
/* The test's own sockets are Winsock's: send and recv, not write and read;
 * WSAPoll for poll. */
#define SOCK_CLOEXEC 0
#define sock_write(fd, b, n) send((SOCKET)(intptr_t)(fd), (const char *)(b), (int)(n), 0)
#define sock_read(fd, b, n) recv((SOCKET)(intptr_t)(fd), (char *)(b), (int)(n), 0)
#define poll WSAPoll
#include <windows.h>
#include <psapi.h>
#else
#include <poll.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#define sock_write write
#define sock_read read
#endif
#include <CUnit/Basic.h>

#define FAR_MS 3600000ull /* an hour: a timer that never fires during a test */

/* ---- Small local helpers ---- */

static void timer_ok(h_ctx *c, uint64_t at, uint64_t repeat, uint64_t token, tl_handle *h,
		     tl_op *op)
{
	int rc = tl_timer_start(c->loop, at, repeat, token, h, op);
	H_EQ_FATAL(rc, 0);
}

static uint16_t addr_port(const tl_addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

/* A thread that wakes a loop after first_ms, then (a safety net, so that a
 * lost wake fails a test instead of hanging it) every 500 ms until stopped. */
struct waker {
	tl_poster *p;
	int first_ms;
	atomic_int stop;
	atomic_int first_rc;
	atomic_int wakes;
	pthread_t t;
};

static void *waker_main(void *arg)
{
	struct waker *w = arg;
	int waited = 0;
	while (waited < w->first_ms && !atomic_load(&w->stop)) {
		h_sleep_ms(5);
		waited += 5;
	}
	if (atomic_load(&w->stop))
		return NULL;
	atomic_store(&w->first_rc, tl_poster_wake(w->p));
	atomic_fetch_add(&w->wakes, 1);
	for (int i = 0; i < 40 && !atomic_load(&w->stop); i++) {
		for (int k = 0; k < 100 && !atomic_load(&w->stop); k++)
			h_sleep_ms(5);
		if (!atomic_load(&w->stop)) {
			tl_poster_wake(w->p);
			atomic_fetch_add(&w->wakes, 1);
		}
	}
	return NULL;
}

static void waker_start(struct waker *w, tl_loop *loop, int first_ms)
{
	memset(w, 0, sizeof *w);
	w->p = tl_poster_get(loop);
	w->first_ms = first_ms;
	atomic_store(&w->first_rc, 1);
	H_EQ_FATAL(pthread_create(&w->t, NULL, waker_main, w), 0);
}

static void waker_stop(struct waker *w)
{
	atomic_store(&w->stop, 1);
	pthread_join(w->t, NULL);
	tl_poster_put(w->p);
}

/* Keeps a loop alive without a timer (a timer would let a simulated clock jump
 * forward): a TCP listener when the driver has TCP, else a far timer. */
static tl_handle keepalive(h_ctx *c)
{
	tl_handle h;
	tl_addr a;
	if (tl_loop_caps(c->loop) & TL_CAP_TCP) {
		H_EQ_FATAL(h_listen(c, AF_INET, NULL, &h, &a), 0);
	} else {
		tl_op op;
		timer_ok(c, in_ms(c->loop, FAR_MS), 0, 0, &h, &op);
	}
	return h;
}

/* =====================================================================
 * 1.2 Config validation
 * ===================================================================== */

#define CFG_FIELD(f) { #f, offsetof(tl_config, f) }
static const struct {
	const char *name;
	size_t off;
} cfg_limits[] = {
	CFG_FIELD(max_handles),     CFG_FIELD(max_ops),        CFG_FIELD(events_per_turn),
	CFG_FIELD(post_capacity),   CFG_FIELD(pooled_buffers), CFG_FIELD(pooled_buffer_size),
	CFG_FIELD(max_undelivered), CFG_FIELD(room_waiters),    CFG_FIELD(pipes),
	CFG_FIELD(pipe_size),
};

static int try_config(const tl_config *c)
{
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, c);
	if (rc == 0)
		tl_loop_destroy(l);
	return rc;
}

/* Rule 1.2: every limit set to zero is -EINVAL, and nothing leaks. */
static void test_config_zero_limits(void)
{
	int fds = h_begin();
	for (size_t i = 0; i < sizeof cfg_limits / sizeof cfg_limits[0]; i++) {
		tl_config c = cfg_default();
		*(uint32_t *)((char *)&c + cfg_limits[i].off) = 0;
		int rc = try_config(&c);
		H_TRUE(rc == -EINVAL, "%s = 0: tl_loop_new returned %d%s", cfg_limits[i].name, rc,
		       h_errname(rc));
	}
	h_end(NULL, fds);
}

/* Rule 1.2: absurd values (above the documented ceilings) are -EINVAL. */
static void test_config_absurd_limits(void)
{
	int fds = h_begin();
	static const struct {
		const char *name;
		size_t off;
		uint32_t v;
	} bad[] = {
		{ "max_handles", offsetof(tl_config, max_handles), UINT32_MAX },
		{ "max_handles", offsetof(tl_config, max_handles), (1u << 24) + 1 },
		{ "max_ops", offsetof(tl_config, max_ops), UINT32_MAX },
		{ "max_ops", offsetof(tl_config, max_ops), (1u << 24) + 1 },
		{ "events_per_turn", offsetof(tl_config, events_per_turn), 65537 },
		{ "events_per_turn", offsetof(tl_config, events_per_turn), UINT32_MAX },
		{ "post_capacity", offsetof(tl_config, post_capacity), (1u << 20) + 1 },
		{ "post_capacity", offsetof(tl_config, post_capacity), UINT32_MAX },
		{ "pooled_buffers", offsetof(tl_config, pooled_buffers), 32769 },
		{ "pooled_buffers", offsetof(tl_config, pooled_buffers), UINT32_MAX },
		{ "pooled_buffer_size", offsetof(tl_config, pooled_buffer_size), 1u << 30 },
		{ "pooled_buffer_size", offsetof(tl_config, pooled_buffer_size), (16u << 20) + 1 },
		{ "pooled_buffer_size", offsetof(tl_config, pooled_buffer_size), UINT32_MAX },
		{ "max_undelivered", offsetof(tl_config, max_undelivered), (1u << 20) + 1 },
		{ "max_undelivered", offsetof(tl_config, max_undelivered), UINT32_MAX },
		{ "room_waiters", offsetof(tl_config, room_waiters), 65 },
		{ "room_waiters", offsetof(tl_config, room_waiters), UINT32_MAX },
		{ "pipes", offsetof(tl_config, pipes), 4097 },
		{ "pipes", offsetof(tl_config, pipes), UINT32_MAX },
		{ "pipe_size", offsetof(tl_config, pipe_size), 2048 },
		{ "pipe_size", offsetof(tl_config, pipe_size), 3u << 16 },  /* not a power of two */
		{ "pipe_size", offsetof(tl_config, pipe_size), 2u << 20 },
		{ "pipe_size", offsetof(tl_config, pipe_size), UINT32_MAX },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tl_config c = cfg_default();
		*(uint32_t *)((char *)&c + bad[i].off) = bad[i].v;
		int rc = try_config(&c);
		H_TRUE(rc == -EINVAL, "%s = %u: tl_loop_new returned %d%s", bad[i].name, bad[i].v,
		       rc, h_errname(rc));
	}
	/* An unknown driver kind is a bad argument too. */
	static const int bad_driver[] = { 99, -1 };
	for (size_t i = 0; i < 2; i++) {
		tl_config c = cfg_default();
		c.driver = bad_driver[i];
		int rc = try_config(&c);
		H_TRUE(rc == -EINVAL, "driver = %d: tl_loop_new returned %d%s", bad_driver[i], rc,
		       h_errname(rc));
	}
	h_end(NULL, fds);
}

/* Rule 1.2 (the other side): the smallest limits (1) and the documented
 * ceilings that are cheap to allocate are accepted, and such a loop works. */
static void test_config_edges_accepted(void)
{
	int fds = h_begin();
	tl_config c = cfg_default();
	c.max_handles = 1;
	c.max_ops = 1;
	c.events_per_turn = 1;
	c.post_capacity = 1;
	c.pooled_buffers = 1;
	c.pooled_buffer_size = 1;
	c.max_undelivered = 1;
	c.room_waiters = 1;
	c.pipes = 1;
	c.pipe_size = 4096;
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, &c);
	H_EQ(rc, 0);
	if (rc == 0) {
		h_ctx x;
		h_ctx_init(&x, l);
		tl_handle h;
		tl_op op;
		timer_ok(&x, in_ms(l, 1), 0, 5, &h, &op);
		int i = h_wait_op(&x, op);
		if (i >= 0)
			H_EQ(x.log.v[i].result, 0);
		h_close(&x, h, 6);
		h_ctx_fini(&x);
		h_drain_close(l);
	}
	c = cfg_default();
	c.events_per_turn = 65536;
	c.room_waiters = 64;
	c.pooled_buffers = 1;
	c.pooled_buffer_size = 16u << 20;
	c.pipes = 4096;
	c.pipe_size = 1u << 20;
	rc = try_config(&c);
	H_EQ(rc, 0);
	h_end(NULL, fds);
}

/* Resident memory of this process in KiB (/proc/self/statm; on Windows
 * the working set), -1 if unknown. */
#ifdef _WIN32
static long resident_kib(void)
{
	PROCESS_MEMORY_COUNTERS m;
	if (!GetProcessMemoryInfo(GetCurrentProcess(), &m, sizeof m))
		return -1;
	return (long)(m.WorkingSetSize / 1024);
}
#else
static long resident_kib(void)
{
	long pages = -1, size;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &pages) != 2)
		pages = -1;
	fclose(f);
	return pages < 0 ? -1 : pages * (sysconf(_SC_PAGESIZE) / 1024);
}
#endif

/* Rule 1.2 (steady state): the completion queue is sized for the worst
 * case (every op and handle at once: here 256 Ki records, about 30 MiB of
 * address space), but a steady stream of completions keeps to its first
 * slots. Walking round the whole queue would touch memory the loop never
 * touched before, a page fault every 34 records and a cache miss on every
 * one: 100,000 completions through a queue that wrapped would make about
 * 12 MiB resident. */
static void test_steady_queue_stays_hot(void)
{
	enum { TIMERS = 64, WANT = 100000 };
	int fds = h_begin();
	tl_config c = cfg_default();
	c.max_ops = 1u << 18;
	tl_loop *l = NULL;
	H_EQ(tl_loop_new(&l, &c), 0);
	if (!l) {
		h_end(NULL, fds);
		return;
	}
	tl_handle t[TIMERS];
	tl_op op[TIMERS];
	static tl_completion out[256];
	for (int i = 0; i < TIMERS; i++)
		H_EQ(tl_timer_start(l, tl_now(l), 1000, (uint64_t)i, &t[i], &op[i]), 0);
	long got = 0, r0 = -1, r1;
	for (int turns = 0; got < 2 * WANT && turns < 10 * WANT; turns++) {
		int n = tl_turn(l, 1000000, out, 256, NULL);
		H_EQ(n >= 0 ? 0 : n, 0);
		if (n < 0)
			break;
		got += n;
		if (r0 < 0 && got >= WANT)
			r0 = resident_kib(); /* the first WANT were the warm-up */
	}
	r1 = resident_kib();
	H_TRUE(got >= 2 * WANT, "%ld timer completions in %d turns", got, 10 * WANT);
	H_TRUE(r0 > 0 && r1 > 0, "no resident size from /proc/self/statm");
	H_TRUE(r1 - r0 < 2048, "%ld completions made %ld KiB resident: the queue walked new memory",
	       got - WANT, r1 - r0);
	for (int i = 0; i < TIMERS; i++)
		tl_close(l, t[i], 100 + (uint64_t)i);
	h_drain_close(l);
	h_end(NULL, fds);
}

/* =====================================================================
 * 1.3 Ids: loop identity, slot and generation
 * ===================================================================== */

/* Every handle-taking entry point with a foreign/stale/unknown handle. */
static void expect_handle_enoent(tl_loop *l, tl_handle h, const char *what)
{
	uint8_t buf[16] = { 0 };
	tl_op op;
	tl_addr a;
	tl_iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
	h_loopback(&a, AF_INET, 9);
	struct {
		const char *fn;
		int rc;
	} r[] = {
		{ "tl_close", tl_close(l, h, 1) },
		{ "tl_set_ref", tl_set_ref(l, h, 0) },
		{ "tl_timer_reset", tl_timer_reset(l, h, tl_now(l)) },
		{ "tl_read", tl_read(l, h, buf, sizeof buf, 1, &op) },
		{ "tl_read_pooled", tl_read_pooled(l, h, 1, &op) },
		{ "tl_read_start", tl_read_start(l, h, 1, &op) },
		{ "tl_write", tl_write(l, h, buf, sizeof buf, 1, &op) },
		{ "tl_writev", tl_writev(l, h, &iov, 1, 1, &op) },
		{ "tl_shutdown", tl_shutdown(l, h, 1, &op) },
		{ "tl_accept", tl_accept(l, h, 1, &op) },
		{ "tl_accept_start", tl_accept_start(l, h, 1, &op) },
		{ "tl_local_addr", tl_local_addr(l, h, &a) },
		{ "tl_udp_send", tl_udp_send(l, h, buf, sizeof buf, &a, 1, &op) },
		{ "tl_udp_recv", tl_udp_recv(l, h, buf, sizeof buf, 1, &op) },
		{ "tl_udp_recv_pooled", tl_udp_recv_pooled(l, h, 1, &op) },
		{ "tl_splice", tl_splice(l, h, h, sizeof buf, 1, &op) },
		{ "tl_sendfile", tl_sendfile(l, 0, 0, sizeof buf, h, 1, &op) },
	};
	/* A driver without splices refuses them before it looks at handles
	 * (turnloop/loop.h, tl_splice). */
	int nosplice = !(tl_loop_caps(l) & TL_CAP_SPLICE);
	for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
		int want = nosplice && (!strcmp(r[i].fn, "tl_splice") || !strcmp(r[i].fn, "tl_sendfile"))
				   ? -ENOTSUP
				   : -ENOENT;
		H_TRUE(r[i].rc == want, "%s(%s handle %#llx) returned %d%s", r[i].fn, what,
		       (unsigned long long)h.v, r[i].rc, h_errname(r[i].rc));
	}
}

static void expect_op_enoent(tl_loop *l, tl_op op, const char *what)
{
	int rc = tl_cancel(l, op);
	H_TRUE(rc == -ENOENT, "tl_cancel(%s op %#llx) returned %d%s", what,
	       (unsigned long long)op.v, rc, h_errname(rc));
	rc = tl_stop(l, op);
	H_TRUE(rc == -ENOENT, "tl_stop(%s op %#llx) returned %d%s", what, (unsigned long long)op.v,
	       rc, h_errname(rc));
}

/* Rule 1.3: ids from another loop are -ENOENT and never touch this loop's
 * slot (the two loops' first timers sit in the same slot). */
static void test_ids_foreign(void)
{
	int fds = h_begin();
	tl_loop *a = h_loop(), *b = h_loop();
	h_ctx ca, cb;
	h_ctx_init(&ca, a);
	h_ctx_init(&cb, b);
	tl_handle ha, hb;
	tl_op oa, ob;
	timer_ok(&ca, in_ms(a, FAR_MS), 0, 1, &ha, &oa);
	timer_ok(&cb, in_ms(b, FAR_MS), 0, 2, &hb, &ob);
	H_TRUE(ha.v != hb.v, "two loops issued the same handle id %#llx", (unsigned long long)ha.v);
	H_TRUE(oa.v != ob.v, "two loops issued the same op id %#llx", (unsigned long long)oa.v);

	expect_handle_enoent(b, ha, "foreign");
	expect_op_enoent(b, oa, "foreign");
	expect_handle_enoent(a, hb, "foreign");
	expect_op_enoent(a, ob, "foreign");

	/* b's own timer is untouched: still armed (the foreign reset to "now" did
	 * not move it), still referenced, still cancellable exactly once. */
	H_EQ(tl_alive(b), 1);
	tl_loop_stats s = stats(b);
	H_EQ(s.handles, 1);
	H_EQ(s.ops, 1);
	h_idle(&cb, 20);
	H_EQ(cb.log.n, 0);
	H_EQ(tl_cancel(b, ob), 0);
	int i = h_wait_op(&cb, ob);
	if (i >= 0)
		H_EQ(cb.log.v[i].result, -ECANCELED);
	h_close(&cb, hb, 3);
	/* Same for a. */
	h_idle(&ca, 5);
	H_EQ(ca.log.n, 0);
	H_EQ(tl_cancel(a, oa), 0);
	i = h_wait_op(&ca, oa);
	if (i >= 0)
		H_EQ(ca.log.v[i].result, -ECANCELED);
	h_close(&ca, ha, 4);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 1.3: ids are stale (-ENOENT) once their terminal / Closed completion
 * was delivered. */
static void test_ids_stale(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_handle h, h2;
	tl_op op, op2;
	/* A one-shot timer that fired: its op is stale, the handle is not. */
	timer_ok(&c, in_ms(c.loop, 1), 0, 1, &h, &op);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	expect_op_enoent(c.loop, op, "terminal");
	/* A cancelled timer: its op is stale after the -ECANCELED terminal. */
	timer_ok(&c, in_ms(c.loop, FAR_MS), 0, 2, &h2, &op2);
	H_EQ(tl_cancel(c.loop, op2), 0);
	h_wait_op(&c, op2);
	expect_op_enoent(c.loop, op2, "cancelled");
	/* Closed: the handles are stale. */
	h_close(&c, h, 3);
	h_close(&c, h2, 4);
	expect_handle_enoent(c.loop, h, "closed");
	expect_handle_enoent(c.loop, h2, "closed");
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* Rule 1.3: ids never issued (TL_HANDLE_NONE, variations of a live id,
 * random values) are -ENOENT and leave the live handle alone. */
static void test_ids_never_issued(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(c.loop, FAR_MS), 0, 1, &h, &op);
	uint64_t hv[] = { 0, h.v + 1, h.v - 1, h.v ^ (1ull << 63), h.v ^ (1ull << 40),
			  h.v ^ 0xffff, ~0ull, 0x0123456789abcdefull, 0xdeadbeefull };
	uint64_t ov[] = { 0, op.v + 1, op.v - 1, op.v ^ (1ull << 63), op.v ^ (1ull << 40),
			  op.v ^ 0xffff, ~0ull, 0x0123456789abcdefull, 0xdeadbeefull };
	for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++) {
		if (hv[i] != h.v)
			expect_handle_enoent(c.loop, (tl_handle){ hv[i] }, "never-issued");
		if (ov[i] != op.v)
			expect_op_enoent(c.loop, (tl_op){ ov[i] }, "never-issued");
	}
	H_EQ(tl_alive(c.loop), 1);
	h_idle(&c, 10);
	H_EQ(c.log.n, 0);
	H_EQ(tl_cancel(c.loop, op), 0);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Rule 1.3: with one slot of each table, every new timer reuses the slot and
 * gets a new id; every old id stays -ENOENT and cannot reach the new one. */
static void test_ids_slot_reuse(void)
{
	enum { N = 1000 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = 1;
	cfg.max_ops = 1;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	uint64_t *hs = calloc(N, sizeof *hs), *os = calloc(N, sizeof *os);
	CU_ASSERT_PTR_NOT_NULL_FATAL(hs);
	CU_ASSERT_PTR_NOT_NULL_FATAL(os);
	int bad = 0;
	for (int k = 0; k < N && !bad; k++) {
		tl_handle h;
		tl_op op;
		int rc = tl_timer_start(c.loop, in_ms(c.loop, FAR_MS), 0, (uint64_t)k, &h, &op);
		H_EQ(rc, 0);
		if (rc != 0)
			break;
		hs[k] = h.v;
		os[k] = op.v;
		if (k > 0) {
			tl_handle old = { hs[k - 1] };
			tl_op oldop = { os[k - 1] };
			int r1 = tl_close(c.loop, old, 1);
			int r2 = tl_timer_reset(c.loop, old, tl_now(c.loop));
			int r3 = tl_cancel(c.loop, oldop);
			int r4 = tl_set_ref(c.loop, old, 0);
			if (r1 != -ENOENT || r2 != -ENOENT || r3 != -ENOENT || r4 != -ENOENT) {
				fprintf(stderr, "  round %d: stale id accepted: close %d reset %d cancel %d set_ref %d\n",
					k, r1, r2, r3, r4);
				bad = 1;
			}
		}
		/* The new timer is intact: still armed and referenced. */
		if (!tl_alive(c.loop)) {
			fprintf(stderr, "  round %d: the live timer lost its reference\n", k);
			bad = 1;
		}
		uint32_t n0 = c.log.n;
		int ci = h_close(&c, h, 2);
		if (ci < 0) {
			bad = 1;
			break;
		}
		/* Exactly the cancel of its op and Closed (no expiry from a stale reset). */
		long long r0 = c.log.n > n0 ? (long long)c.log.v[n0].result : 1;
		if (c.log.n - n0 != 2 || r0 != -ECANCELED) {
			fprintf(stderr, "  round %d: %u completions after close, first result %lld\n", k,
				c.log.n - n0, r0);
			bad = 1;
		}
	}
	CU_ASSERT(!bad);
	qsort(hs, N, sizeof *hs, cmp_u64);
	qsort(os, N, sizeof *os, cmp_u64);
	int dup_h = 0, dup_o = 0;
	for (int k = 1; k < N; k++) {
		dup_h += hs[k] == hs[k - 1];
		dup_o += os[k] == os[k - 1];
	}
	H_EQ(dup_h, 0);
	H_EQ(dup_o, 0);
	free(hs);
	free(os);
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* =====================================================================
 * 1.4 Refused submissions
 * ===================================================================== */

/* Rule 1.4: a wrong handle kind is -EINVAL; nothing happened: alive()
 * unchanged, no op or handle reserved, no completion. */
static void test_refused_wrong_kind(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	int tcp = tl_loop_caps(l) & TL_CAP_TCP;
	tl_handle t, lis = TL_HANDLE_NONE;
	tl_op top, op;
	tl_addr la;
	uint8_t buf[32] = { 0 };
	tl_iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
	timer_ok(&c, in_ms(l, FAR_MS), 0, 1, &t, &top);
	H_EQ(tl_set_ref(l, t, 0), 0);
	if (tcp) {
		H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
		H_EQ(tl_set_ref(l, lis, 0), 0);
	}
	H_EQ(tl_alive(l), 0);
	tl_loop_stats s0 = stats(l);

	/* Stream, listener and datagram operations on a timer. */
	H_EQ(tl_accept(l, t, 1, &op), -EINVAL);
	H_EQ(tl_accept_start(l, t, 1, &op), -EINVAL);
	H_EQ(tl_read(l, t, buf, sizeof buf, 1, &op), -EINVAL);
	H_EQ(tl_read_pooled(l, t, 1, &op), -EINVAL);
	H_EQ(tl_read_start(l, t, 1, &op), -EINVAL);
	H_EQ(tl_write(l, t, buf, sizeof buf, 1, &op), -EINVAL);
	H_EQ(tl_writev(l, t, &iov, 1, 1, &op), -EINVAL);
	H_EQ(tl_shutdown(l, t, 1, &op), -EINVAL);
	H_EQ(tl_udp_recv(l, t, buf, sizeof buf, 1, &op), -EINVAL);
	H_EQ(tl_udp_recv_pooled(l, t, 1, &op), -EINVAL);
	if (tcp) {
		H_EQ(tl_udp_send(l, t, buf, sizeof buf, &la, 1, &op), -EINVAL);
		/* Stream and timer operations on a listener. */
		H_EQ(tl_read(l, lis, buf, sizeof buf, 1, &op), -EINVAL);
		H_EQ(tl_read_pooled(l, lis, 1, &op), -EINVAL);
		H_EQ(tl_read_start(l, lis, 1, &op), -EINVAL);
		H_EQ(tl_write(l, lis, buf, sizeof buf, 1, &op), -EINVAL);
		H_EQ(tl_writev(l, lis, &iov, 1, 1, &op), -EINVAL);
		H_EQ(tl_shutdown(l, lis, 1, &op), -EINVAL);
		H_EQ(tl_timer_reset(l, lis, tl_now(l)), -EINVAL);
		H_EQ(tl_udp_send(l, lis, buf, sizeof buf, &la, 1, &op), -EINVAL);
		H_EQ(tl_udp_recv(l, lis, buf, sizeof buf, 1, &op), -EINVAL);
		H_EQ(tl_udp_recv_pooled(l, lis, 1, &op), -EINVAL);
	}
	H_EQ(tl_alive(l), 0);
	tl_loop_stats s1 = stats(l);
	H_EQ(s1.ops, s0.ops);
	H_EQ(s1.handles, s0.handles);
	h_idle(&c, 20);
	H_EQ(c.log.n, 0);
	h_close(&c, t, 2);
	if (tcp)
		h_close(&c, lis, 3);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.4: bad arguments on a connected stream (zero length, NULL buffer,
 * listener-only and datagram-only operations) are -EINVAL and leave nothing. */
static void test_refused_bad_args(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint32_t n0 = c.log.n;
	tl_loop_stats s0 = stats(l);
	uint8_t buf[16];
	tl_op op;
	tl_addr a;
	h_loopback(&a, AF_INET, 9);
	H_EQ(tl_read(l, srv, buf, 0, 1, &op), -EINVAL);
	H_EQ(tl_read(l, srv, NULL, 16, 1, &op), -EINVAL);
	H_EQ(tl_accept(l, srv, 1, &op), -EINVAL);
	H_EQ(tl_accept_start(l, srv, 1, &op), -EINVAL);
	H_EQ(tl_udp_send(l, srv, buf, sizeof buf, &a, 1, &op), -EINVAL);
	H_EQ(tl_udp_recv(l, srv, buf, sizeof buf, 1, &op), -EINVAL);
	H_EQ(tl_timer_reset(l, srv, tl_now(l)), -EINVAL);
	tl_loop_stats s1 = stats(l);
	H_EQ(s1.ops, s0.ops);
	H_EQ(s1.handles, s0.handles);
	h_idle(&c, 20);
	H_EQ(c.log.n, n0);
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.4: a full op table is -ENOBUFS; the refused submission reserves no
 * handle or op and leaves alive() alone; freed ops can be used again. */
static void test_refused_op_table_full(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_ops = 4;
	cfg.max_handles = 16;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	tl_handle h[6];
	tl_op op[6];
	for (int i = 0; i < 4; i++) {
		timer_ok(&c, in_ms(l, FAR_MS), 0, (uint64_t)i, &h[i], &op[i]);
		H_EQ(tl_set_ref(l, h[i], 0), 0);
	}
	H_EQ(tl_alive(l), 0);
	for (int k = 0; k < 100; k++) {
		int rc = tl_timer_start(l, in_ms(l, 1), 0, 99, &h[5], &op[5]);
		if (rc != -ENOBUFS) {
			H_EQ(rc, -ENOBUFS);
			break;
		}
	}
	tl_loop_stats s = stats(l);
	H_EQ(s.handles, 4);
	H_EQ(s.ops, 4);
	H_EQ(tl_alive(l), 0);
	if (tl_loop_caps(l) & TL_CAP_TCP) {
		tl_handle lis;
		tl_addr la;
		H_EQ(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
		H_EQ(tl_set_ref(l, lis, 0), 0);
		tl_op aop;
		H_EQ(tl_accept(l, lis, 1, &aop), -ENOBUFS);
		H_EQ(tl_accept_start(l, lis, 1, &aop), -ENOBUFS);
		H_EQ(stats(l).ops, 4);
		h_close(&c, lis, 1);
	}
	h_idle(&c, 20);
	H_EQ(h_count_kind(&c.log, TL_K_TIMER, 0), 0); /* the refused timers never fired */
	/* Free one op: one submission fits again, the next is refused again. */
	H_EQ(tl_cancel(l, op[0]), 0);
	h_wait_op(&c, op[0]);
	H_EQ(tl_timer_start(l, in_ms(l, FAR_MS), 0, 4, &h[4], &op[4]), 0);
	H_EQ(tl_timer_start(l, in_ms(l, FAR_MS), 0, 5, &h[5], &op[5]), -ENOBUFS);
	for (int i = 0; i < 5; i++)
		h_close(&c, h[i], 10 + (uint64_t)i);
	/* Everything back: the whole table is usable. */
	for (int i = 0; i < 4; i++)
		H_EQ(tl_timer_start(l, in_ms(l, FAR_MS), 0, (uint64_t)i, &h[i], &op[i]), 0);
	for (int i = 0; i < 4; i++)
		h_close(&c, h[i], 20 + (uint64_t)i);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.4: a full handle table is -ENOBUFS for timers and sockets, without
 * leaking an op or a descriptor. */
static void test_refused_handle_table_full(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = 4;
	cfg.max_ops = 16;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	tl_handle h[5];
	tl_op op[5];
	for (int i = 0; i < 4; i++)
		timer_ok(&c, in_ms(l, FAR_MS), 0, (uint64_t)i, &h[i], &op[i]);
	int fd0 = h_fd_count();
	H_EQ(tl_timer_start(l, in_ms(l, 1), 0, 9, &h[4], &op[4]), -ENOBUFS);
	uint32_t caps = tl_loop_caps(l);
	tl_addr a;
	tl_handle x;
	tl_op xop;
	if (caps & TL_CAP_TCP) {
		h_loopback(&a, AF_INET, 0);
		H_EQ(tl_tcp_listen(l, &a, NULL, &x), -ENOBUFS);
		h_loopback(&a, AF_INET, 9);
		H_EQ(tl_tcp_connect(l, &a, 0, 1, &x, &xop), -ENOBUFS);
	}
	if (caps & TL_CAP_UDP) {
		h_loopback(&a, AF_INET, 0);
		H_EQ(tl_udp_bind(l, &a, &x), -ENOBUFS);
	}
	H_EQ(h_fd_count(), fd0);
	tl_loop_stats s = stats(l);
	H_EQ(s.handles, 4);
	H_EQ(s.ops, 4);
	h_idle(&c, 10);
	H_EQ(c.log.n, 0);
	h_close(&c, h[0], 1);
	timer_ok(&c, in_ms(l, FAR_MS), 0, 5, &h[0], &op[0]);
	H_EQ(tl_timer_start(l, in_ms(l, 1), 0, 9, &h[4], &op[4]), -ENOBUFS);
	for (int i = 0; i < 4; i++)
		h_close(&c, h[i], 2 + (uint64_t)i);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 1.5 / 1.6 Completions and turns
 * ===================================================================== */

/* Rule 1.5: a completion carries token, op, handle, terminal flag, kind and
 * result; Closed and posts carry theirs. */
static void test_completion_fields(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(c.loop, 2), 0, 0x1122334455667788ull, &h, &op);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->token, 0x1122334455667788ull);
		H_EQ(x->op.v, op.v);
		H_EQ(x->handle.v, h.v);
		H_EQ(x->kind, TL_K_TIMER);
		H_EQ(x->result, 0);
		H_EQ(x->flags & (TL_F_TERMINAL | TL_F_STOPPED | TL_F_EOF | TL_F_LEASE), TL_F_TERMINAL);
	}
	i = h_close(&c, h, 0xc105edull);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->kind, TL_K_CLOSED);
		H_EQ(x->token, 0xc105edull);
		H_EQ(x->handle.v, h.v);
		H_EQ(x->op.v, TL_OP_NONE.v);
	}
	tl_poster *p = tl_poster_get(c.loop);
	H_EQ(tl_post(p, 0xabcull, 0xdeadbeefcafef00dull), 0);
	uint32_t n0 = c.log.n;
	if (h_wait_count(&c, n0 + 1, H_WAIT_MS)) {
		tl_completion *x = &c.log.v[n0];
		H_EQ(x->kind, TL_K_POST);
		H_EQ(x->token, 0xabcull);
		H_EQ(x->u.post.payload, 0xdeadbeefcafef00dull);
		H_EQ(x->handle.v, TL_HANDLE_NONE.v);
		H_EQ(x->op.v, TL_OP_NONE.v);
	} else {
		CU_FAIL("post not delivered");
	}
	tl_poster_put(p);
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* Rule 1.6: with N completions queued, turns with cap 1 return exactly one
 * each, oldest first, and then none. */
static void test_turn_cap_one(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_poster *p = tl_poster_get(l);
	tl_completion out[4];
	tl_turn_info info;
	for (uint64_t k = 1; k <= 5; k++)
		H_EQ(tl_post(p, k, 100 + k), 0);
	for (uint64_t k = 1; k <= 5; k++) {
		memset(&info, 0xff, sizeof info);
		int n = tl_turn(l, 0, out, 1, &info);
		H_EQ(n, 1);
		H_EQ(info.completions, 1);
		if (n == 1) {
			H_EQ(out[0].token, k);
			H_EQ(out[0].u.post.payload, 100 + k);
		}
	}
	H_EQ(tl_turn(l, 0, out, 1, NULL), 0);

	/* Same with timers that are all due: deadline then creation order. */
	tl_handle h[3];
	tl_op op[3];
	uint64_t at = tl_now(l);
	for (int k = 0; k < 3; k++)
		H_EQ_FATAL(tl_timer_start(l, at, 0, 10 + (uint64_t)k, &h[k], &op[k]), 0);
	for (int k = 0; k < 3; k++) {
		int n = tl_turn(l, 50 * (int64_t)H_MS, out, 1, NULL);
		H_EQ(n, 1);
		if (n == 1) {
			H_EQ(out[0].token, 10 + (uint64_t)k);
			H_EQ(out[0].kind, TL_K_TIMER);
			H_TRUE(out[0].flags & TL_F_TERMINAL, "one-shot expiry not terminal");
		}
	}
	H_EQ(tl_turn(l, 0, out, 1, NULL), 0);
	h_ctx c;
	h_ctx_init(&c, l);
	for (int k = 0; k < 3; k++)
		h_close(&c, h[k], 20 + (uint64_t)k);
	h_ctx_fini(&c);
	tl_poster_put(p);
	h_end(l, fds);
}

/* Rule 1.6: out NULL or cap 0 is -EINVAL and consumes nothing. */
static void test_turn_bad_args(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_poster *p = tl_poster_get(l);
	tl_completion out[4];
	H_EQ(tl_post(p, 7, 8), 0);
	H_EQ(tl_turn(l, 0, NULL, 4, NULL), -EINVAL);
	H_EQ(tl_turn(l, 0, out, 0, NULL), -EINVAL);
	H_EQ(tl_turn(l, -1, NULL, 0, NULL), -EINVAL);
	int n = tl_turn(l, 0, out, 4, NULL);
	H_EQ(n, 1);
	if (n == 1)
		H_EQ(out[0].token, 7);
	tl_poster_put(p);
	h_end(l, fds);
}

/* Rule 1.6: a turn with work queued never blocks, whatever its timeout, and
 * makes no OS wait (no discovery poll either without native ops). */
static void test_turn_never_blocks_with_work(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	struct waker w; /* safety net: a blocked turn fails instead of hanging */
	waker_start(&w, l, 3000);
	tl_poster *p = tl_poster_get(l);
	tl_completion out[4];
	tl_turn_info info;
	static const int64_t timeouts[] = { -1, 10000 * (int64_t)H_MS };
	for (int k = 0; k < 2; k++) {
		H_EQ(tl_post(p, 1, 1), 0);
		H_EQ(tl_post(p, 2, 2), 0);
		for (int j = 0; j < 2; j++) { /* posted work, then a queued completion */
			uint64_t t0 = h_wall_ns();
			int n = tl_turn(l, timeouts[k], out, 1, &info);
			uint64_t dt = h_wall_ns() - t0;
			H_EQ(n, 1);
			H_TRUE(dt < 1000 * H_MS, "turn with work took %llu ms",
			       (unsigned long long)(dt / H_MS));
			H_EQ(info.os_waits, 0);
			H_EQ(info.discovery_polls, 0);
		}
	}
	/* A due timer is work too. */
	tl_handle h;
	tl_op op;
	timer_ok(&c, tl_now(l), 0, 3, &h, &op);
	uint64_t t0 = h_wall_ns();
	int n = tl_turn(l, -1, out, 4, &info);
	H_EQ(n, 1);
	H_TRUE(h_wall_ns() - t0 < 1000 * H_MS, "turn with a due timer blocked");
	h_close(&c, h, 4);
	/* With a native op pending: still no blocking wait, at most one poll. */
	if (tl_loop_caps(l) & TL_CAP_TCP) {
		tl_handle srv, cli;
		if (h_pair(&c, &c, AF_INET, &srv, &cli) == 0) {
			uint8_t buf[8];
			tl_op rop;
			H_EQ(tl_read(l, srv, buf, sizeof buf, 5, &rop), 0);
			H_EQ(tl_post(p, 6, 6), 0);
			t0 = h_wall_ns();
			n = tl_turn(l, -1, out, 4, &info);
			H_TRUE(n >= 1, "turn returned %d", n);
			H_TRUE(h_wall_ns() - t0 < 1000 * H_MS, "turn with a post and a pending read blocked");
			H_EQ(info.os_waits, 0);
			H_TRUE(info.discovery_polls <= 1, "%u discovery polls", info.discovery_polls);
			h_close(&c, srv, 7);
			h_close(&c, cli, 8);
		}
	}
	waker_stop(&w);
	tl_poster_put(p);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.6 and 1.7: a driver may skip the discovery poll of a turn with
 * work queued (the epoll driver does, right after an OS wait), but never so
 * often that socket events wait: with a write submitted before every turn
 * (on epoll each completes at submission, so every turn has work queued),
 * a read's data still comes out within two turns of its arrival. */
static void test_turn_queued_work_events_flow(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	if (!(tl_loop_caps(l) & TL_CAP_OS)) {
		h_skip("the simulation driver delivers after its simulated network's delay, "
		       "not within a number of turns");
		goto out;
	}
	tl_handle s1, c1, s2, c2;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &s1, &c1), 0);
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &s2, &c2), 0);
	tl_op rop, wop, pop;
	uint8_t rbuf[16];
	int got = -1;
	for (int round = 0; round < 20; round++) {
		/* The data arrives at a different turn of the alternation each
		 * round. */
		H_EQ(tl_read(l, s2, rbuf, sizeof rbuf, 2, &rop), 0);
		for (int t = 0; t < round % 3; t++) {
			H_EQ(tl_write(l, c1, "x", 1, 1, &wop), 0);
			H_TRUE(h_turn(&c, 10 * (int64_t)H_MS) >= 0, "turn failed");
		}
		H_EQ(tl_write(l, c2, "ping", 4, 6, &pop), 0);
		got = -1;
		for (int t = 1; t <= 4 && got < 0; t++) {
			H_EQ(tl_write(l, c1, "x", 1, 1, &wop), 0);
			H_TRUE(h_turn(&c, 10 * (int64_t)H_MS) >= 0, "turn failed");
			if (h_find_term(&c.log, rop) >= 0)
				got = t;
		}
		H_TRUE(got >= 1 && got <= 2, "round %d: the read came out in turn %d (-1: not in 4)",
		       round, got);
		if (got < 0)
			break;
	}
	h_close(&c, s1, 3);
	h_close(&c, c1, 4);
	h_close(&c, s2, 5);
	h_close(&c, c2, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* The epoll driver's cost of an echo round trip, one per turn, in OS waits:
 * one, as a plain epoll loop's (epoll_wait, read, write). The host's write
 * completes at submission, so the next turn has work queued; its discovery
 * poll, right after the wait, would find nothing a system call's worth, and
 * is skipped. (Other drivers count their waits differently: io_uring
 * submits the write in the next turn's enter.) */
static void test_turn_echo_one_wait(void)
{
	enum { N = 200 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (strcmp(tl_loop_driver(l), "epoll") != 0) {
		h_skip("the count per round trip is the epoll driver's (%s waits otherwise)",
		       tl_loop_driver(l));
		goto out;
	}
	tl_handle lh, srv = TL_HANDLE_NONE;
	tl_addr a;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lh, &a), 0);
	tl_op op;
	H_EQ_FATAL(tl_accept(l, lh, 1, &op), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_TRUE_FATAL(fd >= 0 && connect(fd, &a.sa, tl_addr_len(&a)) == 0, "connect");
	int i = h_wait_op(&c, op);
	H_TRUE_FATAL(i >= 0 && c.log.v[i].result == 0, "accept");
	srv = c.log.v[i].u.accept.conn;
	h_close(&c, lh, 2);
	H_EQ_FATAL(tl_read_start(l, srv, 3, &op), 0);
	tl_completion out[8];
	tl_turn_info info;
	uint64_t polls = 0, turns = 0, rts = 0;
	char msg[64], back[64];
	memset(msg, 'e', sizeof msg);
	for (int k = 0; k < N; k++) {
		H_EQ(sock_write(fd, msg, sizeof msg), (ssize_t)sizeof msg);
		/* Turn until the echo's write has completed: read, echo, done. */
		int done = 0;
		for (int t = 0; t < 10 && !done; t++) {
			int n = tl_turn(l, 1000 * (int64_t)H_MS, out, 8, &info);
			H_TRUE_FATAL(n >= 0, "turn: %d", n);
			turns++;
			polls += info.os_waits + info.discovery_polls;
			for (int j = 0; j < n; j++) {
				if (out[j].kind == TL_K_READ && out[j].result > 0) {
					tl_op w;
					H_EQ(tl_write(l, srv, out[j].u.read.lease.data,
						      (uint32_t)out[j].result, out[j].u.read.lease.id, &w), 0);
				} else if (out[j].kind == TL_K_WRITE) {
					H_EQ(tl_lease_release(l, (uint32_t)out[j].token), 0);
					done = 1;
				}
			}
		}
		H_TRUE_FATAL(done, "round trip %d: no echo in 10 turns", k);
		H_EQ(sock_read(fd, back, sizeof back), (ssize_t)sizeof back);
		rts++;
	}
	/* Exactly one OS wait or poll per round trip, in two turns each. */
	H_EQ(polls, rts);
	H_EQ(turns, 2 * rts);
	h_sock_close(fd);
	h_close(&c, srv, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.6: a turn reports what it did. */
static void test_turn_info(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h = keepalive(&c);
	tl_completion out[8];
	tl_turn_info info;
	tl_loop_stats s0 = stats(l);
	uint64_t n0 = tl_now(l);
	memset(&info, 0xff, sizeof info);
	int n = tl_turn(l, 20 * (int64_t)H_MS, out, 8, &info);
	H_EQ(n, 0);
	H_EQ(info.completions, 0);
	H_EQ(info.os_waits, 1);
	H_TRUE(info.os_waits + info.discovery_polls <= 1, "os_waits %u + discovery_polls %u",
	       info.os_waits, info.discovery_polls);
	H_TRUE(info.zero_event_waits <= info.os_waits + info.discovery_polls,
	       "zero_event_waits %u", info.zero_event_waits);
	H_TRUE(info.waited_ns >= 10 * H_MS && info.waited_ns < 1000 * H_MS, "waited %llu ns",
	       (unsigned long long)info.waited_ns);
	H_TRUE(tl_now(l) - n0 >= 10 * H_MS, "clock advanced %llu ns over a 20 ms wait",
	       (unsigned long long)(tl_now(l) - n0));
	H_TRUE(info.idle_ns >= 10 * H_MS && info.idle_ns <= info.waited_ns,
	       "idle %llu ns of %llu", (unsigned long long)info.idle_ns,
	       (unsigned long long)info.waited_ns);
	uint64_t idle1 = info.idle_ns;
	H_EQ(info.alive, 1);
	H_EQ(info.alive, tl_alive(l));

	tl_poster *p = tl_poster_get(l);
	H_EQ(tl_post(p, 1, 1), 0);
	H_EQ(tl_post(p, 2, 2), 0);
	n = tl_turn(l, 0, out, 8, &info);
	H_EQ(n, 2);
	H_EQ(info.completions, 2);
	H_EQ(info.os_waits, 0);
	H_EQ(info.discovery_polls, 0);
	H_EQ(info.idle_ns, 0);
	H_EQ(info.alive, tl_alive(l));
	tl_loop_stats s1 = stats(l);
	H_EQ(s1.idle_ns - s0.idle_ns, idle1);
	H_EQ(s1.turns - s0.turns, 2);
	H_TRUE(s1.os_waits - s0.os_waits == 1, "stats os_waits +%llu",
	       (unsigned long long)(s1.os_waits - s0.os_waits));
	H_EQ(s1.completions[TL_K_POST] - s0.completions[TL_K_POST], 2);
	tl_poster_put(p);
	h_close(&c, h, 3);
	n = tl_turn(l, 0, out, 8, &info);
	H_EQ(n, 0);
	H_EQ(info.alive, 0);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A wake from another thread delay_ns after the start: a busy wait, since
 * a sleeping thread can be woken later than the spins and naps it aims at
 * last (struct waker, the safety net above, sleeps in 5 ms steps). */
struct late_wake {
	tl_poster *p;
	uint64_t at;
	pthread_t t;
};

static void *late_wake_main(void *arg)
{
	struct late_wake *w = arg;
	while (h_wall_ns() < w->at)
		;
	tl_poster_wake(w->p);
	return NULL;
}

static void late_wake_start(struct late_wake *w, tl_loop *l, uint64_t delay_ns)
{
	w->p = tl_poster_get(l);
	w->at = h_wall_ns() + delay_ns;
	H_EQ_FATAL(pthread_create(&w->t, NULL, late_wake_main, w), 0);
}

static void late_wake_join(struct late_wake *w)
{
	pthread_join(w->t, NULL);
	tl_poster_put(w->p);
}

/* tl_config.spin_ns: a turn about to park polls first, and a wait the
 * spin covers (a turn's own timeout under the spin) ends without an OS
 * wait; a longer wait parks after the spin; the simulation driver never
 * spins (its clock stands still while it polls). Over 1 ms is refused.
 * Nothing here depends on how fast the host runs (valgrind included): the
 * waits are measured from the turn's own start. A wake from another
 * thread during the spin ends the turn (the spin's polls take the
 * notifier's event and must ask the poster after each). */
static void test_turn_spin(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	tl_loop *bad = NULL;
	cfg.spin_ns = 1000001;
	H_EQ(tl_loop_new(&bad, &cfg), -EINVAL);
	cfg.spin_ns = 1000000;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	int os = !!(tl_loop_caps(l) & TL_CAP_OS);
	tl_handle ka = keepalive(&c);
	tl_completion out[4];
	tl_turn_info info;

	/* A 200 us wait: spun whole, no OS wait. */
	tl_loop_stats s0 = stats(l);
	int n = tl_turn(l, 200 * 1000, out, 4, &info);
	H_EQ(n, 0);
	tl_loop_stats s1 = stats(l);
	if (os) {
		H_EQ(info.os_waits, 0);
		H_TRUE(info.discovery_polls >= 1, "discovery polls %u", info.discovery_polls);
		H_EQ(s1.os_waits - s0.os_waits, 0);
		H_EQ(s1.spins - s0.spins, 1);
		H_EQ(s1.spin_parks - s0.spin_parks, 1);
		H_TRUE(info.waited_ns >= 200 * 1000, "the turn took %llu ns of its 200 us",
		       (unsigned long long)info.waited_ns);
	} else {
		H_EQ(s1.spins - s0.spins, 0);
	}
	/* A 20 ms wait: the spin finds nothing, and the turn parks. */
	n = tl_turn(l, 20 * (int64_t)H_MS, out, 4, &info);
	H_EQ(n, 0);
	tl_loop_stats s2 = stats(l);
	H_EQ(info.os_waits, 1);
	H_EQ(s2.os_waits - s1.os_waits, 1);
	H_EQ(s2.spins - s1.spins, os ? 1 : 0);
	H_EQ(s2.spin_parks - s1.spin_parks, os ? 1 : 0);
	/* A wake from another thread during the spin ends the turn (the
	 * spin's polls take the notifier's event: they must not lose it).
	 * Only where loops spin: the simulation driver does not, and a timed
	 * wait there may move its clock instead of waiting (its wakes are
	 * test_wake_parked's). */
	for (int k = 0; os && k < 5; k++) {
		struct late_wake w;
		late_wake_start(&w, l, 200 * 1000);
		n = tl_turn(l, 2000 * (int64_t)H_MS, out, 4, &info);
		late_wake_join(&w);
		H_EQ(n, 0);
		H_TRUE(info.waited_ns < 1000 * (uint64_t)H_MS,
		       "a wake 200 us into the turn ended it after %llu ms",
		       (unsigned long long)(info.waited_ns / H_MS));
	}
	h_close(&c, ka, 17);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A turn of the nap test's loop: its records, leases given back (but for
 * one of the stream with token 20 while nap_hold asks, kept in nap_kept). */
static int nap_hold;
static uint32_t nap_kept = UINT32_MAX;
static uint64_t nap_bytes; /* the bytes of the leases nap_turn saw */

static int nap_turn(tl_loop *l, int64_t t, tl_turn_info *info)
{
	tl_completion out[8];
	int n = tl_turn(l, t, out, 8, info);
	for (int i = 0; i < n; i++) {
		if (!(out[i].flags & TL_F_LEASE))
			continue;
		nap_bytes += (uint64_t)out[i].result;
		if (nap_hold && out[i].token == 20 && nap_kept == UINT32_MAX)
			nap_kept = out[i].u.read.lease.id;
		else
			H_EQ(tl_lease_release(l, out[i].u.read.lease.id), 0);
	}
	return n;
}

#ifndef _WIN32
/* The peer of the nap test: a byte on each of its two sockets, after a
 * delay if asked. */
struct nap_peer {
	int fd[2];
	int delay_us;
	pthread_t t;
};

static void *nap_peer_main(void *arg)
{
	struct nap_peer *p = arg;
	if (p->delay_us)
		usleep((useconds_t)p->delay_us);
	for (int i = 0; i < 2; i++)
		if (write(p->fd[i], "n", 1) != 1)
			return (void *)1;
	return NULL;
}

static void nap_send(struct nap_peer *p, int delay_us)
{
	p->delay_us = delay_us;
	if (!delay_us) {
		H_TRUE(nap_peer_main(p) == NULL, "the peer's write failed");
		return;
	}
	H_EQ_FATAL(pthread_create(&p->t, NULL, nap_peer_main, p), 0);
}

/* A time of day (CLOCK_REALTIME, the clock of the kernel's stamps) in ns. */
static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t real_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return ts_ns(&t);
}

/* The kernel's arrival stamp of the datagram rx has next (0: none). */
static int64_t nap_stamp(int rx, char *got)
{
	char cbuf[CMSG_SPACE(sizeof(struct timespec))];
	struct iovec iov = {.iov_base = got, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf};
	if (recvmsg(rx, &mh, 0) != 1)
		return 0;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	struct timespec at;
	if (!cm || cm->cmsg_type != SCM_TIMESTAMPNS)
		return 0;
	memcpy(&at, CMSG_DATA(cm), sizeof at);
	return ts_ns(&at);
}

/* 1 once a probe sent to rx (at *sin) is stamped when it arrived, not when
 * it was read 2 ms later; 0 if none is in a second. */
static int nap_stamps_on_arrival(int rx, const struct sockaddr_in *sin)
{
	int tx = socket(AF_INET, SOCK_DGRAM, 0), ok = 0;
	for (int k = 0; k < 200 && !ok && tx >= 0; k++) {
		char got;
		if (sendto(tx, "p", 1, 0, (const struct sockaddr *)sin, sizeof *sin) != 1)
			break;
		h_sleep_ms(2);
		int64_t now = real_ns(), at = nap_stamp(rx, &got);
		ok = at && at < now - 1000000;
		if (!ok)
			h_sleep_ms(3);
	}
	if (tx >= 0)
		close(tx);
	return ok;
}

/* Turns until n records came (or 2 s): how many came. */
static int nap_take(tl_loop *l, int n)
{
	int got = 0;
	for (int k = 0; k < 200 && got < n; k++)
		got += nap_turn(l, 10 * (int64_t)H_MS, NULL);
	return got;
}
#endif

/* tl_config.nap_ns: a turn about to park naps first only while the last
 * poll gathered a batch (two records or more); what the turn sent goes out
 * before the nap; a nap that finds work ends the turn without an
 * OS wait, one that
 * finds nothing parks for the rest of the wait; records one at a time (a
 * client that waits for each answer) never meet a nap, nor do batches of
 * bulk reads (over 4 KiB a read on average); the simulation
 * driver and Windows never nap; nor does a loop with a stream paused at its
 * caps. Over 1 ms is refused. The loop's two
 * streams are socketpair ends, whose bytes are in the socket when write(2)
 * returns. Two cases depend on time: bytes that come during a nap (one such
 * nap in 20 tries is needed), and a datagram of a napping turn reaching its
 * peer in the turn's first half, by the kernel's stamp (at full speed only,
 * not under valgrind). */
static void test_turn_nap(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	tl_loop *bad = NULL;
	cfg.nap_ns = 1000001;
	H_EQ(tl_loop_new(&bad, &cfg), -EINVAL);
	cfg.nap_ns = 1000000;
	cfg.handle_leases = 1;
	h_ctx ca;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	tl_loop *a = ca.loop;
#ifdef _WIN32
	int naps = 0;
#else
	int naps = !!(tl_loop_caps(a) & TL_CAP_OS);
#endif
	if (!naps) {
		/* Nothing to nap on: a turn that would park parks. */
		tl_handle ka = keepalive(&ca);
		tl_loop_stats z = stats(a);
		tl_turn_info info;
		for (int k = 0; k < 3; k++)
			nap_turn(a, 5 * (int64_t)H_MS, &info);
		H_EQ(stats(a).naps - z.naps, 0);
		h_close(&ca, ka, 17);
		h_ctx_fini(&ca);
		h_end(a, fds);
		return;
	}
#ifndef _WIN32
	struct nap_peer p;
	tl_handle s[2];
	tl_op rd[2];
	tl_turn_info info;
	for (int i = 0; i < 2; i++) {
		int sv[2];
		H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		H_EQ_FATAL(tl_adopt(a, sv[0], &s[i]), 0);
		p.fd[i] = sv[1];
		H_EQ(tl_read_start(a, s[i], 20 + (uint64_t)i, &rd[i]), 0);
	}
	for (int k = 0; k < 3; k++)
		nap_turn(a, 0, NULL); /* the reads armed, nothing gathered */

	/* A batch: a byte on each stream, gathered by one poll. */
	nap_send(&p, 0);
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	/* After a batch, a write just asked for goes out and completes. */
	nap_send(&p, 0);
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	tl_op w;
	char got = 0;
	H_EQ(tl_write(a, s[0], "w", 1, 25, &w), 0);
	H_EQ(nap_take(a, 1), 1);
	H_EQ(read(p.fd[0], &got, 1), 1);
	H_EQ(got, 'w');
	/* A datagram sent in a turn that then naps reaches its peer before the
	 * nap, not after it (io_uring submits at its polls, epoll sends a
	 * turn's datagrams in one sendmmsg at its poll: the driver's flush).
	 * The kernel stamps its arrival (SO_TIMESTAMPNS, the real-time clock):
	 * in the first half of a turn that napped 1 ms. Timed at full speed
	 * only, not under valgrind. */
	if (tl_loop_caps(a) & TL_CAP_UDP) {
		int rx = socket(AF_INET, SOCK_DGRAM, 0), one = 1;
		struct sockaddr_in sin = {.sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t sl = sizeof sin;
		H_EQ_FATAL(bind(rx, (struct sockaddr *)&sin, sizeof sin), 0);
		H_EQ_FATAL(getsockname(rx, (struct sockaddr *)&sin, &sl), 0);
		H_EQ(setsockopt(rx, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one), 0);
		/* The kernel stamps arrivals only once the first socket that
		 * asks has turned stamping on, which it does from a work queue a
		 * little later; until then a datagram is stamped when it is
		 * read. Wait for a probe stamped on arrival. */
		H_TRUE(nap_stamps_on_arrival(rx, &sin), "the kernel stamps datagrams only when read");
		tl_addr to, lo;
		tl_handle u;
		h_loopback(&to, AF_INET, ntohs(sin.sin_port));
		h_loopback(&lo, AF_INET, 0);
		H_EQ_FATAL(tl_udp_bind(a, &lo, &u), 0);
		nap_send(&p, 0);
		H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
		int64_t t0 = real_ns();
		uint64_t n0 = stats(a).naps;
		H_EQ(tl_udp_send(a, u, "d", 1, &to, 26, &w), 0);
		int n = nap_turn(a, 100 * (int64_t)H_MS, &info);
		int64_t t1 = real_ns();
		int timed = stats(a).naps - n0 == 1 && h_slow() == 1;
		H_EQ(n + nap_take(a, 1 - n), 1);
		int64_t ta = nap_stamp(rx, &got);
		H_EQ(got, 'd');
		H_TRUE(ta != 0, "no arrival stamp");
		if (ta && timed) {
			H_TRUE(ta - t0 < (t1 - t0) / 2,
			       "the datagram reached the peer %lld us into a %lld us turn",
			       (long long)((ta - t0) / 1000), (long long)((t1 - t0) / 1000));
		}
		H_EQ(tl_close(a, u, 27), 0);
		H_EQ(nap_take(a, 1), 1);
		close(rx);
	}
	nap_send(&p, 0);
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	tl_loop_stats s1 = stats(a);
	/* After a batch, a nap that finds nothing, then the wait's rest. */
	H_EQ(nap_turn(a, 50 * (int64_t)H_MS, &info), 0);
	tl_loop_stats s2 = stats(a);
	H_EQ(info.os_waits, 1);
	H_EQ(s2.naps - s1.naps, 1);
	H_EQ(s2.nap_parks - s1.nap_parks, 1);
	H_TRUE(info.idle_ns >= 1000 * 1000, "idle %llu ns, the nap was 1 ms",
	       (unsigned long long)info.idle_ns);
	/* That wait gathered nothing: no nap before the next one. */
	H_EQ(nap_turn(a, 20 * (int64_t)H_MS, &info), 0);
	/* One record at a time: no nap either. */
	for (int k = 0; k < 3; k++) {
		H_EQ(write(p.fd[0], "1", 1), 1);
		H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 1);
		H_EQ(info.os_waits, 1);
	}
	tl_loop_stats s3 = stats(a);
	H_EQ(s3.naps - s2.naps, 0);
	H_EQ(s3.nap_parks - s2.nap_parks, 0);
	/* A batch of bulk reads (8 KiB on each stream, more than the nap's 4
	 * KiB a read on average): the park after it is not napped. Then a
	 * batch of small reads naps again. */
	static char bulk[8192];
	memset(bulk, 'b', sizeof bulk);
	for (int i = 0; i < 2; i++)
		H_EQ(write(p.fd[i], bulk, sizeof bulk), (ssize_t)sizeof bulk);
	nap_bytes = 0;
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	H_EQ(nap_bytes, 2 * sizeof bulk);
	H_EQ(nap_turn(a, 20 * (int64_t)H_MS, &info), 0);
	H_EQ(info.os_waits, 1);
	H_EQ(stats(a).naps - s3.naps, 0);
	nap_send(&p, 0);
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	H_EQ(nap_turn(a, 20 * (int64_t)H_MS, &info), 0);
	H_EQ(stats(a).naps - s3.naps, 1);
	/* A batch that comes during the nap (300 us into a 1 ms one): taken
	 * without an OS wait. */
	int found = 0;
	for (int k = 0; k < 20 && !found; k++) {
		nap_send(&p, 0);
		H_EQ(nap_take(a, 2), 2); /* a batch again */
		tl_loop_stats b0 = stats(a);
		nap_send(&p, 300);
		int n = nap_turn(a, 1000 * (int64_t)H_MS, &info);
		tl_loop_stats b1 = stats(a);
		H_EQ(pthread_join(p.t, NULL), 0);
		found = b1.naps - b0.naps == 1 && b1.nap_parks == b0.nap_parks &&
			info.os_waits == 0 && n >= 1;
		H_EQ(n + nap_take(a, 2 - n), 2);
	}
	H_TRUE(found, "no nap found the batch that came during it in 20 tries");
	/* A wake from another thread during a nap (300 us into 1 ms) ends the
	 * turn: the poll after the nap takes the notifier's event, and the
	 * turn must not park on top of it. */
	tl_loop_stats w0 = stats(a);
	for (int k = 0; k < 5; k++) {
		struct late_wake lw;
		nap_send(&p, 0);
		H_EQ(nap_take(a, 2), 2);
		late_wake_start(&lw, a, 300 * 1000);
		int n = nap_turn(a, 2000 * (int64_t)H_MS, &info);
		late_wake_join(&lw);
		H_EQ(n, 0);
		H_TRUE(info.waited_ns < 1000 * (uint64_t)H_MS,
		       "a wake 300 us into a napping turn ended it after %llu ms",
		       (unsigned long long)(info.waited_ns / H_MS));
	}
	H_TRUE(stats(a).naps - w0.naps >= 1, "no turn napped");
	/* A stream paused at its cap (one lease here, kept): no nap, since
	 * what frees a paused handle is the loop's own work. */
	nap_hold = 1;
	nap_send(&p, 0);
	H_EQ(nap_turn(a, 100 * (int64_t)H_MS, &info), 2);
	H_TRUE(nap_kept != UINT32_MAX && stats(a).paused == 1, "stream not paused (%u)",
	       stats(a).paused);
	tl_loop_stats c0 = stats(a);
	H_EQ(nap_turn(a, 20 * (int64_t)H_MS, &info), 0);
	H_EQ(stats(a).naps - c0.naps, 0);
	nap_hold = 0;
	if (nap_kept != UINT32_MAX)
		H_EQ(tl_lease_release(a, nap_kept), 0);
	nap_kept = UINT32_MAX;
	for (int i = 0; i < 2; i++) {
		H_EQ(tl_close(a, s[i], 30), 0);
		close(p.fd[i]);
	}
	for (int k = 0; k < 100 && tl_alive(a); k++)
		nap_turn(a, (int64_t)H_MS, NULL);
	h_ctx_fini(&ca);
	h_end(a, fds);
#endif
}

/* =====================================================================
 * 1.7 Fairness
 * ===================================================================== */

/* Rule 1.7: 1000 queued posts do not starve a due timer; posts come in
 * batches of at most events_per_turn, all of them, in order. */
static void test_fair_posts_vs_timer(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 1024;
	cfg.events_per_turn = 16;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	tl_poster *p = tl_poster_get(l);
	for (uint64_t k = 0; k < 1000; k++) {
		int rc = tl_post(p, 1, k);
		if (rc != 0) {
			H_EQ(rc, 0);
			break;
		}
	}
	tl_handle h;
	tl_op op;
	timer_ok(&c, tl_now(l), 0, 777, &h, &op);
	tl_completion out[256];
	int timer_turn = -1, turns = 0;
	uint64_t next = 0, bad_order = 0, max_batch = 0;
	uint64_t dl = h_wall_ns() + 5000 * H_MS;
	while ((next < 1000 || timer_turn < 0) && h_wall_ns() < dl) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, out, 256, NULL);
		if (n < 0) {
			H_EQ(n, 0);
			break;
		}
		turns++;
		uint64_t batch = 0;
		for (int i = 0; i < n; i++) {
			if (out[i].kind == TL_K_POST) {
				batch++;
				if (out[i].u.post.payload != next)
					bad_order++;
				next = out[i].u.post.payload + 1;
			} else if (out[i].op.v == op.v && timer_turn < 0) {
				timer_turn = turns;
			}
		}
		if (batch > max_batch)
			max_batch = batch;
	}
	H_EQ(next, 1000);
	H_EQ(bad_order, 0);
	H_TRUE(timer_turn >= 1 && timer_turn <= 2, "the due timer came in turn %d", timer_turn);
	H_TRUE(max_batch <= 16, "a turn delivered %llu posts with events_per_turn 16",
	       (unsigned long long)max_batch);
	h_close(&c, h, 1);
	tl_poster_put(p);
	h_ctx_fini(&c);
	h_end(l, fds);
}

struct flooder {
	tl_poster *p;
	atomic_int stop;
	atomic_ulong sent;
	atomic_ulong full; /* times tl_post found the queue full */
	pthread_t t;
};

static void *flood_main(void *arg)
{
	struct flooder *f = arg;
	uint64_t k = 0;
	while (!atomic_load(&f->stop)) {
		int rc = tl_post(f->p, 0xf100d, k);
		if (rc == 0) {
			k++;
			atomic_store(&f->sent, k);
		} else if (rc == -ENOBUFS) {
			atomic_fetch_add(&f->full, 1);
			sched_yield();
		} else {
			break;
		}
	}
	return NULL;
}

/* Rule 1.7: while posts and repeating timers flood, a cancellation, a Closed,
 * a due one-shot timer and a socket read still get out within a few turns. */
static void test_fair_terminal_under_flood(void)
{
	enum { NREP = 50 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 1024;
	cfg.events_per_turn = 16;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	int tcp = tl_loop_caps(l) & TL_CAP_TCP;
	tl_handle srv = TL_HANDLE_NONE, cli = TL_HANDLE_NONE;
	if (tcp)
		H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_handle rep[NREP], v, w, d;
	tl_op rop[NREP], vop, wop, dop, readop = TL_OP_NONE, wrop;
	for (int i = 0; i < NREP; i++)
		timer_ok(&c, in_ms(l, 1), 1 * H_MS, 100 + (uint64_t)i, &rep[i], &rop[i]);
	timer_ok(&c, in_ms(l, FAR_MS), 0, 1, &v, &vop);
	timer_ok(&c, in_ms(l, FAR_MS), 0, 2, &w, &wop);
	uint8_t rbuf[64];
	if (tcp)
		H_EQ(tl_read(l, srv, rbuf, sizeof rbuf, 3, &readop), 0);
	struct flooder f;
	memset(&f, 0, sizeof f);
	f.p = tl_poster_get(l);
	H_EQ_FATAL(pthread_create(&f.t, NULL, flood_main, &f), 0);
	for (int i = 0; i < 20; i++)
		h_turn(&c, (int64_t)H_MS);
	/* The flood must be under way before the things that must get out are
	 * asked, however the threads are scheduled: let the flooder fill the
	 * post queue (the loop does not turn meanwhile), so a full queue's
	 * backlog, far more than 10 turns' share, stands ahead of them. */
	for (int i = 0; i < 10000 && atomic_load(&f.full) == 0; i++)
		h_sleep_ms(1);
	H_TRUE_FATAL(atomic_load(&f.full) > 0, "the flooder never filled the post queue");

	/* Now ask for the things that must get out. */
	uint32_t from = c.log.n;
	H_EQ(tl_cancel(l, vop), 0);
	H_EQ(tl_close(l, w, 0xc1), 0);
	timer_ok(&c, tl_now(l), 0, 4, &d, &dop);
	if (tcp)
		H_EQ(tl_write(l, cli, "flood", 5, 5, &wrop), 0);
	int got_v = -1, got_w = -1, got_d = -1, got_r = tcp ? -1 : 0;
	for (int t = 1; t <= 10 && (got_v < 0 || got_w < 0 || got_d < 0 || got_r < 0); t++) {
		h_turn(&c, (int64_t)H_MS);
		if (got_v < 0 && h_find_term(&c.log, vop) >= 0)
			got_v = t;
		if (got_w < 0 && h_find_closed(&c.log, w) >= 0)
			got_w = t;
		if (got_d < 0 && h_find_term(&c.log, dop) >= 0)
			got_d = t;
		if (got_r < 0 && h_find_term(&c.log, readop) >= 0)
			got_r = t;
	}
	atomic_store(&f.stop, 1);
	pthread_join(f.t, NULL);
	H_TRUE(got_v > 0, "cancelled timer's terminal not out within 10 turns");
	H_TRUE(got_w > 0, "Closed not out within 10 turns");
	H_TRUE(got_d > 0, "due timer not out within 10 turns");
	H_TRUE(got_r >= 0, "socket read not out within 10 turns");
	if (got_v > 0)
		H_EQ(c.log.v[h_find_term(&c.log, vop)].result, -ECANCELED);
	/* The flood really was a flood. */
	H_TRUE(h_count_kind(&c.log, TL_K_POST, from) > 0, "no posts during the flood");
	H_TRUE(atomic_load(&f.sent) > 100, "only %lu posts sent", atomic_load(&f.sent));
	for (int i = 0; i < NREP; i++)
		H_EQ(tl_stop(l, rop[i]), 0);
	for (int i = 0; i < NREP; i++)
		h_close(&c, rep[i], 200 + (uint64_t)i);
	h_close(&c, v, 5);
	h_close(&c, d, 6);
	if (tcp) {
		h_close(&c, srv, 7);
		h_close(&c, cli, 8);
	}
	tl_poster_put(f.p);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 1.8 alive() and set_ref
 * ===================================================================== */

/* Rule 1.8: a referenced timer keeps the loop alive; set_ref(0) takes it and
 * its pending op out of the count, set_ref(1) puts them back. */
static void test_alive_set_ref_timer(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	H_EQ(tl_alive(l), 0);
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, FAR_MS), 0, 1, &h, &op);
	H_EQ(tl_alive(l), 1);
	H_EQ(tl_set_ref(l, h, 0), 0);
	H_EQ(tl_alive(l), 0);
	H_EQ(tl_set_ref(l, h, 0), 0);
	H_EQ(tl_alive(l), 0);
	H_EQ(tl_set_ref(l, h, 1), 0);
	H_EQ(tl_alive(l), 1);
	H_EQ(tl_set_ref(l, h, 1), 0);
	H_EQ(tl_alive(l), 1);
	H_EQ(tl_set_ref(l, h, 0), 0);
	tl_completion out[4];
	tl_turn_info info;
	H_EQ(tl_turn(l, 0, out, 4, &info), 0);
	H_EQ(info.alive, 0);
	h_close(&c, h, 2);
	H_EQ(tl_alive(l), 0);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.8: a listener keeps the loop alive; an accept pending on an
 * unreferenced listener does not count. */
static void test_alive_listener(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis;
	tl_addr la;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_alive(l), 1);
	H_EQ(tl_set_ref(l, lis, 0), 0);
	H_EQ(tl_alive(l), 0);
	tl_op aop;
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	H_EQ(tl_alive(l), 0);
	h_idle(&c, 5);
	H_EQ(tl_alive(l), 0);
	H_EQ(tl_set_ref(l, lis, 1), 0);
	H_EQ(tl_alive(l), 1);
	H_EQ(tl_cancel(l, aop), 0);
	int i = h_wait_op(&c, aop);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	H_EQ(tl_alive(l), 1); /* the referenced listener itself */
	h_close(&c, lis, 2);
	H_EQ(tl_alive(l), 0);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 1.8: an undelivered terminal completion (here Closed, queued behind
 * the cancelled timer's terminal) keeps the loop alive until delivered. */
static void test_alive_undelivered_terminal(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, FAR_MS), 0, 1, &h, &op), 0);
	H_EQ(tl_close(l, h, 2), 0);
	H_EQ(tl_alive(l), 1);
	tl_completion out[1];
	tl_turn_info info;
	int n = tl_turn(l, 0, out, 1, &info);
	H_EQ(n, 1);
	if (n == 1) {
		H_EQ(out[0].op.v, op.v);
		H_EQ(out[0].result, -ECANCELED);
	}
	H_EQ(info.alive, 1);
	H_EQ(tl_alive(l), 1);
	n = tl_turn(l, 0, out, 1, &info);
	H_EQ(n, 1);
	if (n == 1)
		H_EQ(out[0].kind, TL_K_CLOSED);
	H_EQ(info.alive, 0);
	H_EQ(tl_alive(l), 0);
	h_end(l, fds);
}

/* =====================================================================
 * 1.9 Closing and destroying the loop
 * ===================================================================== */

/* Rule 1.9: closing a loop with a live handle is -EBUSY (referenced or not)
 * and changes nothing: the loop keeps working. */
static void test_loop_close_busy(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, 30), 0, 1, &h, &op);
	H_EQ(tl_loop_close(l), -EBUSY);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	H_EQ(tl_loop_close(l), -EBUSY); /* expired, but the handle is still open */
	H_EQ(tl_set_ref(l, h, 0), 0);
	H_EQ(tl_loop_close(l), -EBUSY);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds); /* tl_loop_close() == 0 now */
}

/* Rule 1.9: destroying a loop with pending reads, accepts, writes, timers
 * and posts releases everything, and the kernel never writes into a read
 * buffer afterwards (the peer's later data does not land in it). */
static void test_loop_destroy_pending(void)
{
	int fds = h_begin();
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop());
	h_ctx_init(&cb, h_loop());
	tl_loop *a = ca.loop, *b = cb.loop;
	int tcp = tl_loop_caps(a) & TL_CAP_TCP;
	tl_handle t1, t2, srv1, srv2, srv3, cli1, cli2, cli3, l1, l2;
	tl_op op;
	uint8_t *rbuf = malloc(4096);
	uint8_t *big = malloc(32u << 20);
	CU_ASSERT_PTR_NOT_NULL_FATAL(rbuf);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	memset(rbuf, 0xa5, 4096);
	memset(big, 0x5a, 32u << 20);
	timer_ok(&ca, in_ms(a, FAR_MS), 0, 1, &t1, &op);
	timer_ok(&ca, in_ms(a, 1), 1 * H_MS, 2, &t2, &op);
	if (tcp) {
		h_ctx_link(&ca, &cb);
		H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &srv1, &cli1), 0);
		H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &srv2, &cli2), 0);
		H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &srv3, &cli3), 0);
		tl_addr la;
		H_EQ(h_listen(&ca, AF_INET, NULL, &l1, &la), 0);
		H_EQ(h_listen(&ca, AF_INET, NULL, &l2, &la), 0);
		H_EQ(tl_accept(a, l1, 3, &op), 0);
		H_EQ(tl_accept_start(a, l2, 4, &op), 0);
		H_EQ(tl_read(a, srv1, rbuf, 4096, 5, &op), 0);
		H_EQ(tl_read_start(a, srv2, 6, &op), 0);
		H_EQ(tl_write(a, srv3, big, 32u << 20, 7, &op), 0); /* peer never reads */
		H_EQ(tl_read_pooled(a, srv3, 8, &op), 0);
	}
	tl_poster *p = tl_poster_get(a);
	for (uint64_t k = 0; k < 10; k++)
		H_EQ(tl_post(p, 9, k), 0);
	for (int i = 0; i < 5; i++) /* get the native operations really started */
		h_turn(&ca, (int64_t)H_MS);
	tl_loop_destroy(a);
	H_EQ(tl_post(p, 9, 99), -EPIPE);
	tl_poster_put(p);
	if (tcp) {
		/* The peer now writes: the destroyed loop's read buffer stays as it was. */
		cb.peer = NULL; /* a is gone */
		uint8_t msg[100];
		fill_pattern(msg, sizeof msg, 0);
		tl_op wop;
		H_EQ(tl_write(b, cli1, msg, sizeof msg, 10, &wop), 0);
		h_wait_op(&cb, wop);
		h_idle(&cb, 50);
		H_TRUE(all_bytes(rbuf, 4096, 0xa5), "a destroyed loop's read buffer was written");
		h_close(&cb, cli1, 11);
		h_close(&cb, cli2, 12);
		h_close(&cb, cli3, 13);
	}
	free(rbuf);
	free(big);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_end(b, fds); /* every descriptor of a is gone too */
}

/* =====================================================================
 * 2.1 Cancel
 * ===================================================================== */

/* Rule 2.1: cancel is 0, then -EALREADY (cancel or stop), the -ECANCELED
 * terminal arrives exactly once, and the op is -ENOENT afterwards. */
static void test_cancel_once(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, FAR_MS), 0, 0xca, &h, &op);
	H_EQ(tl_cancel(l, op), 0);
	H_EQ(tl_cancel(l, op), -EALREADY);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->result, -ECANCELED);
		H_EQ(x->kind, TL_K_TIMER);
		H_EQ(x->token, 0xca);
		H_EQ(x->handle.v, h.v);
		H_EQ(x->flags & TL_F_STOPPED, 0);
	}
	h_idle(&c, 30);
	H_EQ(h_count_op(&c.log, op, 0), 1);
	H_EQ(tl_cancel(l, op), -ENOENT);
	H_EQ(tl_stop(l, op), -ENOENT);
	h_close(&c, h, 1);
	/* A multishot op (repeating timer): after cancel, stop is -EALREADY too,
	 * and the terminal is Cancelled, not Stopped. */
	timer_ok(&c, in_ms(l, 5), 5 * H_MS, 0xcb, &h, &op);
	H_EQ(tl_cancel(l, op), 0);
	H_EQ(tl_stop(l, op), -EALREADY);
	H_EQ(tl_cancel(l, op), -EALREADY);
	i = h_wait_op(&c, op);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, -ECANCELED);
		H_EQ(c.log.v[i].flags & TL_F_STOPPED, 0);
	}
	h_idle(&c, 20);
	H_EQ(h_count_term(&c.log, op), 1);
	H_EQ(h_count_op(&c.log, op, (uint32_t)(i >= 0 ? i + 1 : 0)), 0);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.1: cancel of a finished op is -ENOENT. */
static void test_cancel_finished(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_handle h;
	tl_op op;
	timer_ok(&c, tl_now(c.loop), 0, 1, &h, &op);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	H_EQ(tl_cancel(c.loop, op), -ENOENT);
	H_EQ(tl_stop(c.loop, op), -ENOENT);
	h_close(&c, h, 2);
	H_EQ(h_count_op(&c.log, op, 0), 1);
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* Rules 1.4/2.1: cancel of an op whose terminal is already queued (not yet
 * delivered) must not produce a second terminal: either the cancel is
 * refused and the expiry stands, or it is accepted and -ECANCELED is the one
 * terminal. */
static void test_cancel_queued_terminal(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle ha, hb;
	tl_op oa, ob;
	uint64_t at = tl_now(l);
	timer_ok(&c, at, 0, 1, &ha, &oa);
	timer_ok(&c, at, 0, 2, &hb, &ob);
	tl_completion out[1];
	int n = tl_turn(l, 50 * (int64_t)H_MS, out, 1, NULL);
	H_EQ(n, 1);
	if (n == 1)
		H_EQ(out[0].op.v, oa.v);
	int rc = tl_cancel(l, ob);
	H_TRUE(rc == 0 || rc == -ENOENT || rc == -EALREADY, "cancel returned %d%s", rc,
	       h_errname(rc));
	int i = h_wait_op(&c, ob);
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, ob, 0), 1);
	if (i >= 0)
		H_TRUE(c.log.v[i].result == (rc == 0 ? -ECANCELED : 0),
		       "cancel returned %d but the terminal result is %lld", rc,
		       (long long)c.log.v[i].result);
	h_close(&c, ha, 3);
	h_close(&c, hb, 4);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.1: a cancelled read's buffer is never written after its -ECANCELED
 * terminal, and the cancelled read consumed nothing. */
static void test_cancel_read_buffer(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t buf[256], msg[100], got[100];
	memset(buf, 0xaa, sizeof buf);
	tl_op rop;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rop), 0);
	h_turn(&c, 0); /* in flight in the driver */
	H_EQ(tl_cancel(l, rop), 0);
	int i = h_wait_op(&c, rop);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, -ECANCELED);
		H_EQ(c.log.v[i].kind, TL_K_READ);
	}
	fill_pattern(msg, sizeof msg, 0);
	H_EQ(h_write_all(&c, cli, msg, sizeof msg), 100);
	h_idle(&c, 50);
	H_TRUE(all_bytes(buf, sizeof buf, 0xaa), "cancelled read's buffer was written");
	H_EQ(h_count_op(&c.log, rop, 0), 1);
	memset(got, 0, sizeof got);
	H_EQ(h_read_exact(&c, srv, got, sizeof got, NULL), 100);
	H_EQ(check_pattern(got, sizeof got, 0), -1);
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.1: a cancelled accept does not swallow a connection, and a cancelled
 * read_start ends with -ECANCELED (not Stopped). */
static void test_cancel_accept_and_read_start(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli, conn;
	tl_addr la;
	tl_op aop, cop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	h_turn(&c, 0);
	H_EQ(tl_cancel(l, aop), 0);
	int i = h_wait_op(&c, aop);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, -ECANCELED);
		H_EQ(c.log.v[i].kind, TL_K_ACCEPT);
	}
	H_EQ(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	i = h_wait_op(&c, cop);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, aop, 0), 1);
	H_EQ(tl_accept(l, lis, 3, &aop), 0);
	i = h_wait_op(&c, aop);
	H_TRUE_FATAL(i >= 0 && c.log.v[i].result >= 0, "the connection was lost");
	conn = c.log.v[i].u.accept.conn;
	tl_op rs;
	H_EQ(tl_read_start(l, conn, 4, &rs), 0);
	h_turn(&c, 0);
	H_EQ(tl_cancel(l, rs), 0);
	H_EQ(tl_stop(l, rs), -EALREADY);
	i = h_wait_op(&c, rs);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, -ECANCELED);
		H_EQ(c.log.v[i].flags & TL_F_STOPPED, 0);
	}
	uint8_t msg[10], got[10];
	fill_pattern(msg, sizeof msg, 7);
	H_EQ(h_write_all(&c, cli, msg, sizeof msg), 10);
	H_EQ(h_read_exact(&c, conn, got, sizeof got, NULL), 10);
	H_EQ(check_pattern(got, sizeof got, 7), -1);
	h_close(&c, conn, 5);
	h_close(&c, cli, 6);
	h_close(&c, lis, 7);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 2.2 Stop
 * ===================================================================== */

/* Rule 2.2: a repeating timer's expiries are nonterminal; stop ends it with
 * one TL_F_STOPPED terminal (result 0), a second stop is -EALREADY, and no
 * expiry follows the terminal. */
static void test_stop_repeating_timer(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, 5), 5 * H_MS, 0x57, &h, &op);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&c.log, op, 0) < 2 && h_wall_ns() < dl)
		h_turn(&c, 10 * (int64_t)H_MS);
	H_TRUE(h_count_op(&c.log, op, 0) >= 2, "repeating timer expired %u times",
	       h_count_op(&c.log, op, 0));
	for (uint32_t i = 0; i < c.log.n; i++) {
		if (c.log.v[i].op.v != op.v)
			continue;
		H_EQ(c.log.v[i].flags & TL_F_TERMINAL, 0);
		H_EQ(c.log.v[i].result, 0);
		H_EQ(c.log.v[i].kind, TL_K_TIMER);
	}
	H_EQ(tl_stop(l, op), 0);
	H_EQ(tl_stop(l, op), -EALREADY);
	H_EQ(tl_cancel(l, op), -EALREADY);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_STOPPED, "terminal without TL_F_STOPPED (flags %#x)",
		       c.log.v[i].flags);
		h_idle(&c, 30);
		H_EQ(h_count_op(&c.log, op, (uint32_t)i + 1), 0);
	}
	H_EQ(h_count_term(&c.log, op), 1);
	H_EQ(tl_stop(l, op), -ENOENT);
	uint32_t n0 = c.log.n;
	int ci = h_close(&c, h, 1);
	H_EQ(ci, (int)n0); /* nothing pending: Closed alone */
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.2 + 4.1: accept_start delivers each connection as a nonterminal
 * ACCEPT; stop ends it with a STOPPED terminal; later connections wait for a
 * new accept (none is delivered to the stopped op, none is lost). */
static void test_stop_accept_start(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[3], conn[3];
	tl_addr la;
	tl_op aop, cop[3];
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept_start(l, lis, 1, &aop), 0);
	for (int k = 0; k < 2; k++)
		H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 10 + (uint64_t)k, &cli[k], &cop[k]), 0);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&c.log, aop, 0) < 2 && h_wall_ns() < dl)
		h_turn(&c, 10 * (int64_t)H_MS);
	H_EQ_FATAL(h_count_op(&c.log, aop, 0), 2);
	int k = 0;
	for (uint32_t i = 0; i < c.log.n; i++) {
		if (c.log.v[i].op.v != aop.v)
			continue;
		H_EQ(c.log.v[i].flags & TL_F_TERMINAL, 0);
		H_TRUE(c.log.v[i].result >= 0, "accept result %lld", (long long)c.log.v[i].result);
		conn[k++] = c.log.v[i].u.accept.conn;
	}
	H_EQ(tl_stop(l, aop), 0);
	H_EQ(tl_stop(l, aop), -EALREADY);
	int i = h_wait_op(&c, aop);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_STOPPED, "flags %#x", c.log.v[i].flags);
	}
	H_EQ(tl_tcp_connect(l, &la, 0, 12, &cli[2], &cop[2]), 0);
	h_wait_op(&c, cop[2]);
	h_idle(&c, 30);
	H_EQ(h_count_op(&c.log, aop, 0), 3);
	tl_op a2;
	H_EQ(tl_accept(l, lis, 2, &a2), 0);
	i = h_wait_op(&c, a2);
	H_TRUE_FATAL(i >= 0 && c.log.v[i].result >= 0, "connection after stop lost");
	conn[2] = c.log.v[i].u.accept.conn;
	for (k = 0; k < 3; k++) {
		h_close(&c, conn[k], 20 + (uint64_t)k);
		h_close(&c, cli[k], 30 + (uint64_t)k);
	}
	h_close(&c, lis, 40);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.2 + 4.3: read_start stopped: STOPPED terminal, no completion after,
 * and data sent afterwards is there for the next read. */
static void test_stop_read_start(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op rs;
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	H_EQ(h_write_all(&c, cli, "hello", 5), 5);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&c.log, rs, 0) < 1 && h_wall_ns() < dl)
		h_turn(&c, 10 * (int64_t)H_MS);
	int i = h_find_op(&c.log, rs, 0);
	H_TRUE_FATAL(i >= 0, "read_start delivered nothing");
	H_EQ(c.log.v[i].flags & (TL_F_TERMINAL | TL_F_LEASE), TL_F_LEASE);
	H_EQ(c.log.v[i].result, 5);
	if (c.log.v[i].result == 5)
		H_EQ(memcmp(c.log.v[i].u.read.lease.data, "hello", 5), 0);
	h_release_leases(&c, 0);
	H_EQ(tl_stop(l, rs), 0);
	H_EQ(tl_stop(l, rs), -EALREADY);
	i = h_wait_op(&c, rs);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_STOPPED, "flags %#x", c.log.v[i].flags);
	}
	H_EQ(h_write_all(&c, cli, "world", 5), 5);
	h_idle(&c, 30);
	H_EQ(h_count_term(&c.log, rs), 1);
	H_EQ(h_count_op(&c.log, rs, (uint32_t)i + 1), 0);
	char got[6] = { 0 };
	H_EQ(h_read_exact(&c, srv, got, 5, NULL), 5);
	H_EQ(memcmp(got, "world", 5), 0);
	h_release_leases(&c, 0);
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 2.3 Close
 * ===================================================================== */

/* Rule 2.3: close with pending ops: each op gets its own -ECANCELED terminal,
 * then Closed with the close token, last; a second close is -EINVAL; the
 * handle is -ENOENT after Closed and nothing follows it. */
static void test_close_pending_ops(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	const uint32_t big_len = 32u << 20;
	uint8_t *big = malloc(big_len), rbuf[64];
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	memset(big, 0x42, big_len);
	tl_op r, w1, w2;
	H_EQ(tl_read(l, srv, rbuf, sizeof rbuf, 1, &r), 0);
	H_EQ(tl_write(l, srv, big, big_len, 2, &w1), 0);
	H_EQ(tl_write(l, srv, "tail", 4, 3, &w2), 0);
	h_idle(&c, 50);
	H_TRUE(h_find_term(&c.log, w1) < 0, "a 32 MiB write to a peer that does not read finished");
	uint32_t from = c.log.n;
	H_EQ(tl_close(l, srv, 0xc105e), 0);
	H_EQ(tl_close(l, srv, 0xc105f), -EINVAL);
	tl_op x;
	H_EQ(tl_read(l, srv, rbuf, sizeof rbuf, 4, &x), -EINVAL);
	H_EQ(tl_write(l, srv, "x", 1, 4, &x), -EINVAL);
	H_EQ(tl_set_ref(l, srv, 0), -EINVAL);
	int ci = h_wait_closed(&c, srv);
	if (ci >= 0) {
		H_EQ(c.log.v[ci].token, 0xc105e);
		const tl_op ops[3] = { r, w1, w2 };
		for (int k = 0; k < 3; k++) {
			int i = h_find_term(&c.log, ops[k]);
			H_TRUE(i >= 0 && i < ci, "op %d: terminal at %d, Closed at %d", k, i, ci);
			if (i >= 0)
				H_EQ(c.log.v[i].result, -ECANCELED);
			H_EQ(h_count_op(&c.log, ops[k], from), 1);
		}
		h_idle(&c, 50);
		H_EQ(h_count_handle(&c.log, srv, (uint32_t)ci + 1), 0);
	}
	H_EQ(tl_close(l, srv, 1), -ENOENT);
	H_EQ(tl_read(l, srv, rbuf, sizeof rbuf, 4, &x), -ENOENT);
	h_close(&c, cli, 5);
	free(big); /* only now: after every terminal of the writes */
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.3 with a timer and a multishot accept: Cancelled first, Closed last. */
static void test_close_order(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, FAR_MS), 0, 1, &h, &op);
	uint32_t n0 = c.log.n;
	H_EQ(tl_close(l, h, 2), 0);
	H_EQ(tl_timer_reset(l, h, in_ms(l, 1)), -EINVAL); /* closing */
	int ci = h_wait_closed(&c, h);
	h_idle(&c, 10);
	H_EQ(c.log.n - n0, 2);
	if (ci >= 0 && c.log.n - n0 == 2) {
		H_EQ(c.log.v[n0].op.v, op.v);
		H_EQ(c.log.v[n0].result, -ECANCELED);
		H_TRUE(c.log.v[n0].flags & TL_F_TERMINAL, "cancelled timer not terminal");
		H_EQ(ci, (int)n0 + 1);
	}
	if (tl_loop_caps(l) & TL_CAP_TCP) {
		tl_handle lis;
		tl_addr la;
		tl_op aop;
		H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
		H_EQ(tl_accept_start(l, lis, 3, &aop), 0);
		h_turn(&c, 0);
		n0 = c.log.n;
		ci = h_close(&c, lis, 4);
		if (ci >= 0) {
			H_EQ(ci, (int)n0 + 1);
			H_EQ(c.log.v[n0].op.v, aop.v);
			H_EQ(c.log.v[n0].result, -ECANCELED);
			H_EQ(c.log.v[n0].flags & TL_F_STOPPED, 0);
		}
	}
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 2.4 Connect with a deadline
 * ===================================================================== */

/* Rule 2.4: a connect that stays pending (the listener's accept queue is full,
 * so Linux drops further SYNs) ends with one -ETIMEDOUT terminal, not before
 * its deadline; the handle then closes normally. */
static void test_connect_deadline_timeout(void)
{
	enum { MAXC = 8 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[MAXC];
	tl_addr la;
	tl_op cop[MAXC];
	tl_listen_opts o = { .backlog = 1 };
	H_EQ_FATAL(h_listen(&c, AF_INET, &o, &lis, &la), 0);
	int n = 0, timed_out = -1;
	for (; n < MAXC && timed_out < 0; n++) {
		uint64_t at = in_ms(l, 100);
		H_EQ_FATAL(tl_tcp_connect(l, &la, at, 10 + (uint64_t)n, &cli[n], &cop[n]), 0);
		int i = h_wait_op(&c, cop[n]);
		if (i < 0)
			break;
		uint64_t now = tl_now(l);
		tl_completion *x = &c.log.v[i];
		H_EQ(x->kind, TL_K_CONNECT);
		if (x->result == -ETIMEDOUT) {
			timed_out = n;
			H_TRUE(now >= at, "-ETIMEDOUT %llu ns before the deadline",
			       (unsigned long long)(at - now));
			H_EQ(x->token, 10 + (uint64_t)n);
			H_EQ(x->handle.v, cli[n].v);
		} else {
			H_TRUE(x->result == 0, "connect %d: %lld%s", n, (long long)x->result,
			       h_errname(x->result));
		}
	}
	H_TRUE(timed_out >= 0, "no connect stayed pending in %d attempts", n);
	if (timed_out >= 0) {
		h_idle(&c, 200);
		H_EQ(h_count_op(&c.log, cop[timed_out], 0), 1);
	}
	for (int k = 0; k < n; k++)
		h_close(&c, cli[k], 100 + (uint64_t)k);
	h_close(&c, lis, 1);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 2.4: a connect that succeeds before its deadline reports 0 once and
 * nothing when the deadline passes. */
static void test_connect_deadline_success(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli;
	tl_addr la;
	tl_op aop, cop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	uint64_t at = in_ms(l, 150);
	H_EQ_FATAL(tl_tcp_connect(l, &la, at, 2, &cli, &cop), 0);
	int i = h_wait_op(&c, cop);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (tl_now(l) < at + 100 * H_MS && h_wall_ns() < dl)
		h_turn(&c, 10 * (int64_t)H_MS);
	H_EQ(h_count_op(&c.log, cop, 0), 1);
	i = h_wait_op(&c, aop);
	if (i >= 0 && c.log.v[i].result >= 0)
		h_close(&c, c.log.v[i].u.accept.conn, 3);
	h_close(&c, cli, 4);
	h_close(&c, lis, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 3 Timers
 * ===================================================================== */

/* Collect the tokens of the first n TIMER completions into tok[]; also checks
 * that none came before its deadline (at[] indexed by token). */
static int collect_timer_tokens(h_ctx *c, int n, uint64_t *tok, const uint64_t *at, int ntok)
{
	int got = 0;
	uint32_t seen = c->log.n;
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (got < n && h_wall_ns() < dl) {
		h_turn(c, 10 * (int64_t)H_MS);
		uint64_t now = tl_now(c->loop);
		for (; seen < c->log.n; seen++) {
			tl_completion *x = &c->log.v[seen];
			if (x->kind != TL_K_TIMER || got >= n)
				continue;
			tok[got++] = x->token;
			if (at && x->token < (uint64_t)ntok)
				H_TRUE(now >= at[x->token], "timer %llu fired %llu ns early",
				       (unsigned long long)x->token,
				       (unsigned long long)(at[x->token] - now));
		}
	}
	return got;
}

/* Rule 3: due timers complete in deadline order. */
static void test_timer_deadline_order(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	static const uint64_t offs[5] = { 30, 10, 20, 50, 40 };
	uint64_t at[51] = { 0 }, tok[5] = { 0 };
	tl_handle h[5];
	tl_op op[5];
	uint64_t base = tl_now(l);
	for (int k = 0; k < 5; k++) {
		at[offs[k]] = base + offs[k] * H_MS;
		timer_ok(&c, at[offs[k]], 0, offs[k], &h[k], &op[k]);
	}
	H_EQ(collect_timer_tokens(&c, 5, tok, at, 51), 5);
	for (int k = 0; k < 5; k++)
		H_EQ(tok[k], 10 * (uint64_t)(k + 1));
	for (int k = 0; k < 5; k++)
		h_close(&c, h[k], 100 + (uint64_t)k);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: equal deadlines complete in creation order (and after earlier
 * deadlines created later). */
static void test_timer_equal_deadlines(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	static const uint64_t order[5] = { 3, 1, 4, 0, 2 };
	tl_handle h[7];
	tl_op op[7];
	uint64_t at = in_ms(l, 20), tok[7] = { 0 };
	for (int k = 0; k < 5; k++)
		timer_ok(&c, at, 0, order[k], &h[k], &op[k]);
	uint64_t early = tl_now(l);
	timer_ok(&c, early, 0, 7, &h[5], &op[5]);
	timer_ok(&c, early, 0, 8, &h[6], &op[6]);
	H_EQ(collect_timer_tokens(&c, 7, tok, NULL, 0), 7);
	static const uint64_t want[7] = { 7, 8, 3, 1, 4, 0, 2 };
	for (int k = 0; k < 7; k++)
		H_TRUE(tok[k] == want[k], "position %d: token %llu, want %llu", k,
		       (unsigned long long)tok[k], (unsigned long long)want[k]);
	for (int k = 0; k < 7; k++)
		h_close(&c, h[k], 100 + (uint64_t)k);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: a one-shot timer's single expiry is terminal; afterwards reset is
 * -EINVAL (expired), cancel -ENOENT, and close delivers Closed alone. */
static void test_timer_oneshot(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	uint64_t at = in_ms(l, 5);
	timer_ok(&c, at, 0, 1, &h, &op);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		H_TRUE(tl_now(l) >= at, "fired before its deadline");
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_TERMINAL, "flags %#x", c.log.v[i].flags);
	}
	h_idle(&c, 30);
	H_EQ(h_count_op(&c.log, op, 0), 1);
	H_EQ(tl_timer_reset(l, h, in_ms(l, 5)), -EINVAL);
	H_EQ(tl_cancel(l, op), -ENOENT);
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, op, 0), 1); /* the refused reset re-armed nothing */
	uint32_t n0 = c.log.n;
	H_EQ(h_close(&c, h, 2), (int)n0);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3 (header: repeat_ns 0 is a one-shot): one terminal expiry only. */
static void test_timer_zero_repeat(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_handle h;
	tl_op op;
	int rc = tl_timer_start(c.loop, in_ms(c.loop, 2), 0, 1, &h, &op);
	H_EQ_FATAL(rc, 0);
	int i = h_wait_op(&c, op);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	h_idle(&c, 30);
	H_EQ(h_count_op(&c.log, op, 0), 1);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* Rule 3: a repeating timer is nonterminal and expires about once per
 * interval, never more. */
static void test_timer_repeating(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	uint64_t t0 = tl_now(l);
	timer_ok(&c, t0 + 10 * H_MS, 10 * H_MS, 1, &h, &op);
	h_idle(&c, 105);
	uint64_t span = tl_now(l) - t0;
	uint32_t n = h_count_op(&c.log, op, 0);
	H_TRUE(n >= 3, "%u expiries in %llu ms with a 10 ms interval", n,
	       (unsigned long long)(span / H_MS));
	H_TRUE(n <= span / (10 * H_MS), "%u expiries in %llu ms with a 10 ms interval", n,
	       (unsigned long long)(span / H_MS));
	H_EQ(h_count_term(&c.log, op), 0);
	H_EQ(tl_stop(l, op), 0);
	h_wait_op(&c, op);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: a repeating timer coalesces missed intervals: after 50 ms without
 * turning (50 missed 1 ms intervals), one turn yields one expiry, and no turn
 * yields more than one. */
static void test_timer_coalesce(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, 1), 1 * H_MS, 1, &h, &op);
	h_sleep_ms(50);
	uint32_t n0 = c.log.n;
	h_turn(&c, 100 * (int64_t)H_MS);
	H_EQ(h_count_op(&c.log, op, n0), 1);
	for (int k = 0; k < 5; k++) {
		n0 = c.log.n;
		h_turn(&c, 0);
		H_TRUE(h_count_op(&c.log, op, n0) <= 1, "turn %d: %u expiries", k,
		       h_count_op(&c.log, op, n0));
	}
	h_sleep_ms(20);
	n0 = c.log.n;
	h_turn(&c, 100 * (int64_t)H_MS);
	H_EQ(h_count_op(&c.log, op, n0), 1);
	H_EQ(h_count_term(&c.log, op), 0);
	H_EQ(tl_stop(l, op), 0);
	h_wait_op(&c, op);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: reset to a later time: no expiry at the old time, one at the new. */
static void test_timer_reset_later(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, 20), 0, 1, &h, &op);
	uint64_t at = in_ms(l, 150);
	H_EQ(tl_timer_reset(l, h, at), 0);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		uint64_t now = tl_now(l);
		H_TRUE(now >= at, "fired %llu ms before the reset deadline",
		       (unsigned long long)((at - now) / H_MS));
		H_EQ(c.log.v[i].result, 0);
	}
	H_EQ(h_count_op(&c.log, op, 0), 1);
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: reset to an earlier time fires at the earlier time. */
static void test_timer_reset_earlier(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h;
	tl_op op;
	timer_ok(&c, in_ms(l, FAR_MS), 0, 1, &h, &op);
	uint64_t at = in_ms(l, 20);
	H_EQ(tl_timer_reset(l, h, at), 0);
	int i = h_wait_op(&c, op);
	if (i >= 0) {
		H_TRUE(tl_now(l) >= at, "fired before the reset deadline");
		H_EQ(c.log.v[i].result, 0);
	}
	h_close(&c, h, 2);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3: reset is -EINVAL on an expired one-shot and on a closing timer,
 * -ENOENT on a stale one. */
static void test_timer_reset_errors(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle h1, h2;
	tl_op o1, o2;
	timer_ok(&c, tl_now(l), 0, 1, &h1, &o1);
	h_wait_op(&c, o1);
	H_EQ(tl_timer_reset(l, h1, in_ms(l, 10)), -EINVAL);
	timer_ok(&c, in_ms(l, FAR_MS), 0, 2, &h2, &o2);
	H_EQ(tl_close(l, h2, 3), 0);
	H_EQ(tl_timer_reset(l, h2, in_ms(l, 10)), -EINVAL);
	h_wait_closed(&c, h2);
	H_EQ(tl_timer_reset(l, h2, in_ms(l, 10)), -ENOENT);
	h_close(&c, h1, 4);
	H_EQ(tl_timer_reset(l, h1, in_ms(l, 10)), -ENOENT);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 3 (load): 100,000 armed timers with random deadlines within 200 ms
 * (1 ms granularity, so many ties) all fire, none early, in (deadline,
 * creation) order, in bounded time. */
static void test_timer_load_100k(void)
{
	enum { N = 100000 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = N + 64;
	cfg.max_ops = N + 64;
	tl_loop *l = h_loop_cfg(&cfg);
	uint64_t *at = malloc(N * sizeof *at);
	tl_handle *h = malloc(N * sizeof *h);
	uint8_t *seen = calloc(N, 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(at);
	CU_ASSERT_PTR_NOT_NULL_FATAL(h);
	CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
	uint64_t w0 = h_wall_ns();
	uint64_t base = tl_now(l);
	uint32_t rnd = 12345;
	for (int i = 0; i < N; i++) {
		rnd = rnd * 1103515245u + 12345u;
		at[i] = base + ((rnd >> 8) % 200) * H_MS;
		tl_op op;
		int rc = tl_timer_start(l, at[i], 0, (uint64_t)i, &h[i], &op);
		if (rc != 0) {
			H_EQ_FATAL(rc, 0);
		}
	}
	tl_completion out[1024];
	int got = 0, dup = 0, early = 0, misorder = 0, bad = 0;
	uint64_t prev_at = 0;
	long prev_tok = -1;
	uint64_t dl = h_wall_ns() + H_SLOW_MS(20000) * H_MS;
	while (got < N && h_wall_ns() < dl) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, out, 1024, NULL);
		if (n < 0) {
			H_EQ(n, 0);
			break;
		}
		uint64_t now = tl_now(l);
		for (int k = 0; k < n; k++) {
			uint64_t t = out[k].token;
			if (out[k].kind != TL_K_TIMER || t >= N || out[k].result != 0 ||
			    !(out[k].flags & TL_F_TERMINAL)) {
				bad++;
				continue;
			}
			if (seen[t]++)
				dup++;
			if (now < at[t])
				early++;
			if (at[t] < prev_at || (at[t] == prev_at && (long)t < prev_tok))
				misorder++;
			prev_at = at[t];
			prev_tok = (long)t;
			got++;
		}
	}
	uint64_t took = h_wall_ns() - w0;
	H_EQ(got, N);
	H_EQ(dup, 0);
	H_EQ(early, 0);
	H_EQ(misorder, 0);
	H_EQ(bad, 0);
	H_TRUE(took < H_SLOW_MS(10000) * H_MS, "100k timers took %llu ms", (unsigned long long)(took / H_MS));
	/* Close them all, in batches so that Closed completions never pile up. */
	int closed = 0;
	for (int i = 0; i < N; i += 4096) {
		int end = i + 4096 < N ? i + 4096 : N;
		int want = closed + (end - i);
		for (int k = i; k < end; k++)
			if (tl_close(l, h[k], 1) != 0)
				bad++;
		uint64_t dl2 = h_wall_ns() + H_WAIT_MS * H_MS;
		while (closed < want && h_wall_ns() < dl2) {
			int n = tl_turn(l, 10 * (int64_t)H_MS, out, 1024, NULL);
			if (n < 0)
				break;
			for (int k = 0; k < n; k++)
				closed += out[k].kind == TL_K_CLOSED;
		}
	}
	H_EQ(closed, N);
	H_EQ(bad, 0);
	free(at);
	free(h);
	free(seen);
	h_end(l, fds);
}

/* =====================================================================
 * 4.1 / 4.2 TCP listen, accept, connect
 * ===================================================================== */

/* Accept one connection; the peer address is the client's local address;
 * data flows both ways. */
static void accept_one(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || (family == AF_INET6 && !h_need_ipv6()))
		goto out;
	tl_handle lis, cli, conn;
	tl_addr la, ca;
	tl_op aop, cop;
	H_EQ_FATAL(h_listen(&c, family, NULL, &lis, &la), 0);
	H_EQ(tl_accept(l, lis, 11, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 12, &cli, &cop), 0);
	int ia = h_wait_op(&c, aop), ic = h_wait_op(&c, cop);
	H_TRUE_FATAL(ia >= 0 && ic >= 0, "accept/connect did not complete");
	tl_completion a = c.log.v[ia], k = c.log.v[ic];
	H_EQ(a.kind, TL_K_ACCEPT);
	H_EQ(a.token, 11);
	H_EQ(a.handle.v, lis.v);
	H_EQ(a.op.v, aop.v);
	H_TRUE(a.flags & TL_F_TERMINAL, "accept not terminal");
	H_TRUE_FATAL(a.result >= 0, "accept: %lld%s", (long long)a.result, h_errname(a.result));
	conn = a.u.accept.conn;
	H_TRUE(conn.v != 0 && conn.v != lis.v && conn.v != cli.v, "accepted handle %#llx",
	       (unsigned long long)conn.v);
	H_EQ(k.kind, TL_K_CONNECT);
	H_EQ(k.result, 0);
	H_EQ(k.token, 12);
	H_EQ(k.handle.v, cli.v);
	H_EQ(tl_local_addr(l, cli, &ca), 0);
	H_EQ(a.u.accept.peer.sa.sa_family, family);
	H_TRUE(h_addr_eq(&a.u.accept.peer, &ca), "peer port %u, client port %u",
	       addr_port(&a.u.accept.peer), addr_port(&ca));
	char got[8] = { 0 };
	H_EQ(h_write_all(&c, cli, "ping", 4), 4);
	H_EQ(h_read_exact(&c, conn, got, 4, NULL), 4);
	H_EQ(memcmp(got, "ping", 4), 0);
	H_EQ(h_write_all(&c, conn, "pong", 4), 4);
	H_EQ(h_read_exact(&c, cli, got, 4, NULL), 4);
	H_EQ(memcmp(got, "pong", 4), 0);
	h_close(&c, conn, 1);
	h_close(&c, cli, 2);
	h_close(&c, lis, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_tcp_accept_v4(void)
{
	accept_one(AF_INET);
}

static void test_tcp_accept_v6(void)
{
	accept_one(AF_INET6);
}

/* Rule 4.1: accept_start: 10 clients, 10 nonterminal ACCEPTs with distinct
 * handles and the clients' addresses, then stop: STOPPED terminal. */
static void test_tcp_accept_multishot(void)
{
	enum { N = 10 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[N], conn[N];
	tl_addr la, ca[N];
	tl_op aop, cop[N];
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept_start(l, lis, 21, &aop), 0);
	for (int k = 0; k < N; k++)
		H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 100 + (uint64_t)k, &cli[k], &cop[k]), 0);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&c.log, aop, 0) < N && h_wall_ns() < dl)
		h_turn(&c, 10 * (int64_t)H_MS);
	for (int k = 0; k < N; k++) {
		int i = h_wait_op(&c, cop[k]);
		if (i >= 0)
			H_EQ(c.log.v[i].result, 0);
		H_EQ(tl_local_addr(l, cli[k], &ca[k]), 0);
	}
	H_EQ_FATAL(h_count_op(&c.log, aop, 0), N);
	int n = 0, matched[N] = { 0 };
	for (uint32_t i = 0; i < c.log.n; i++) {
		tl_completion *x = &c.log.v[i];
		if (x->op.v != aop.v)
			continue;
		H_EQ(x->kind, TL_K_ACCEPT);
		H_EQ(x->token, 21);
		H_EQ(x->flags & TL_F_TERMINAL, 0);
		H_TRUE(x->result >= 0, "accept %lld%s", (long long)x->result, h_errname(x->result));
		conn[n] = x->u.accept.conn;
		for (int j = 0; j < n; j++)
			H_TRUE(conn[j].v != conn[n].v, "handle accepted twice");
		for (int j = 0; j < N; j++)
			if (h_addr_eq(&x->u.accept.peer, &ca[j]))
				matched[j]++;
		n++;
	}
	for (int j = 0; j < N; j++)
		H_TRUE(matched[j] == 1, "client %d matched %d accepted peers", j, matched[j]);
	H_EQ(tl_stop(l, aop), 0);
	int i = h_wait_op(&c, aop);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_STOPPED, "flags %#x", c.log.v[i].flags);
	}
	for (int k = 0; k < N; k++) {
		h_close(&c, conn[k], 1);
		h_close(&c, cli[k], 2);
	}
	h_close(&c, lis, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rules 1.4 + 4.1 (header): while the handle table is full, accept_start
 * reports -ENOBUFS as a nonterminal completion and keeps accepting once a
 * handle is free again. */
static void test_tcp_accept_multishot_table_full(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = 2; /* the listener and one connection */
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	h_ctx_link(&ca, &cb);
	tl_loop *a = ca.loop, *b = cb.loop;
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[3], conn1;
	tl_addr la;
	tl_op aop, cop[3];
	H_EQ_FATAL(h_listen(&ca, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept_start(a, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 10, &cli[0], &cop[0]), 0);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&ca.log, aop, 0) < 1 && h_wall_ns() < dl)
		h_turn(&ca, (int64_t)H_MS);
	int i = h_find_op(&ca.log, aop, 0);
	H_TRUE_FATAL(i >= 0 && ca.log.v[i].result >= 0, "first connection not accepted");
	conn1 = ca.log.v[i].u.accept.conn;
	uint32_t mark = ca.log.n;
	H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 11, &cli[1], &cop[1]), 0);
	h_idle(&ca, 100);
	int refused = 0;
	for (uint32_t k = mark; k < ca.log.n; k++) {
		tl_completion *x = &ca.log.v[k];
		if (x->op.v != aop.v)
			continue;
		H_EQ(x->flags & TL_F_TERMINAL, 0);
		H_TRUE(x->result == -ENOBUFS, "accept with a full handle table: %lld%s",
		       (long long)x->result, h_errname(x->result));
		refused += x->result == -ENOBUFS;
	}
	/* The connection that found the table full is reported, not dropped
	 * in silence. */
	H_TRUE(refused >= 1, "no -ENOBUFS for the connection that found the table full");
	H_EQ(h_count_term(&ca.log, aop), 0);
	h_close(&ca, conn1, 2);
	mark = ca.log.n;
	H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 12, &cli[2], &cop[2]), 0);
	int ok = -1;
	dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (ok < 0 && h_wall_ns() < dl) {
		h_turn(&ca, (int64_t)H_MS);
		for (uint32_t k = mark; k < ca.log.n && ok < 0; k++)
			if (ca.log.v[k].op.v == aop.v && ca.log.v[k].result >= 0)
				ok = (int)k;
	}
	H_TRUE(ok >= 0, "accepting did not resume after a handle was freed");
	H_EQ(tl_stop(a, aop), 0);
	h_wait_op(&ca, aop);
	if (ok >= 0)
		h_close(&ca, ca.log.v[ok].u.accept.conn, 3);
	for (int k = 0; k < 3; k++)
		h_close(&cb, cli[k], 20 + (uint64_t)k);
	h_close(&ca, lis, 4);
out:
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 4.1: SO_REUSEPORT: two loops listen on one address when both ask for
 * it; without it the second listen is -EADDRINUSE (and leaks nothing). */
static void test_tcp_reuseport(void)
{
	int fds = h_begin();
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop());
	h_ctx_init(&cb, h_loop());
	tl_loop *a = ca.loop, *b = cb.loop;
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	tl_listen_opts on = { .reuseport = 1 }, off = { .reuseport = 0 };
	tl_handle la, lb, x;
	tl_addr aa, ab;
	int rc = h_listen(&ca, AF_INET, &on, &la, &aa);
	if (rc == -ENOTSUP) { /* an OS without it (Windows: docs/WINDOWS.md) */
		h_skip("driver %s has no SO_REUSEPORT (-ENOTSUP)", tl_loop_driver(a));
		goto out;
	}
	H_EQ_FATAL(rc, 0);
	H_EQ(tl_tcp_listen(b, &aa, &on, &lb), 0);
	H_EQ(tl_local_addr(b, lb, &ab), 0);
	H_TRUE(h_addr_eq(&aa, &ab), "ports %u and %u", addr_port(&aa), addr_port(&ab));
	int fd0 = h_fd_count();
	H_EQ(tl_tcp_listen(b, &aa, &off, &x), -EADDRINUSE);
	H_EQ(tl_tcp_listen(b, &aa, NULL, &x), -EADDRINUSE);
	H_EQ(h_fd_count(), fd0);
	/* Both listeners accept: the kernel (or the simulation) spreads
	 * connections over them; 32 all landing on one listener would take
	 * odds of 2^-31. */
	enum { NC = 32 };
	tl_op o1, o2, cop[NC];
	tl_handle cli[NC];
	h_ctx_link(&ca, &cb);
	H_EQ(tl_accept_start(a, la, 1, &o1), 0);
	H_EQ(tl_accept_start(b, lb, 2, &o2), 0);
	for (int k = 0; k < NC; k++)
		H_EQ_FATAL(tl_tcp_connect(b, &aa, 0, 100 + (uint64_t)k, &cli[k], &cop[k]), 0);
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (h_count_op(&ca.log, o1, 0) + h_count_op(&cb.log, o2, 0) < NC && h_wall_ns() < dl)
		h_turn(&ca, (int64_t)H_MS);
	uint32_t na = h_count_op(&ca.log, o1, 0), nb = h_count_op(&cb.log, o2, 0);
	H_EQ(na + nb, NC);
	H_TRUE(na > 0 && nb > 0, "one listener got every connection: %u and %u", na, nb);
	for (uint32_t i = 0; i < ca.log.n; i++)
		if (ca.log.v[i].op.v == o1.v && ca.log.v[i].result >= 0)
			h_close(&ca, ca.log.v[i].u.accept.conn, 6);
	for (uint32_t i = 0; i < cb.log.n; i++)
		if (cb.log.v[i].op.v == o2.v && cb.log.v[i].result >= 0 &&
		    !(cb.log.v[i].flags & TL_F_TERMINAL))
			h_close(&cb, cb.log.v[i].u.accept.conn, 7);
	for (int k = 0; k < NC; k++)
		h_close(&cb, cli[k], 8);
	h_close(&ca, la, 3);
	h_close(&cb, lb, 4);

	H_EQ_FATAL(h_listen(&ca, AF_INET, &off, &la, &aa), 0);
	fd0 = h_fd_count();
	H_EQ(tl_tcp_listen(b, &aa, &off, &x), -EADDRINUSE);
	H_EQ(tl_tcp_listen(b, &aa, &on, &x), -EADDRINUSE);
	H_EQ(h_fd_count(), fd0);
	h_close(&ca, la, 5);
out:
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 4.2: connect, with a write and a read submitted before it completes
 * (the header promises the handle is usable right away). */
static void connect_one(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || (family == AF_INET6 && !h_need_ipv6()))
		goto out;
	tl_handle lis, cli;
	tl_addr la;
	tl_op aop, cop, wop, rop;
	char rbuf[8] = { 0 }, got[8] = { 0 };
	H_EQ_FATAL(h_listen(&c, family, NULL, &lis, &la), 0);
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	H_EQ(tl_write(l, cli, "early", 5, 3, &wop), 0);
	H_EQ(tl_read(l, cli, rbuf, 5, 4, &rop), 0);
	int ic = h_wait_op(&c, cop), iw = h_wait_op(&c, wop), ia = h_wait_op(&c, aop);
	H_TRUE_FATAL(ic >= 0 && iw >= 0 && ia >= 0, "connect/write/accept missing");
	H_EQ(c.log.v[ic].kind, TL_K_CONNECT);
	H_EQ(c.log.v[ic].result, 0);
	H_TRUE(c.log.v[ic].flags & TL_F_TERMINAL, "connect not terminal");
	H_EQ(c.log.v[iw].result, 5);
	H_TRUE(ic < iw, "write completed (at %d) before its connect (at %d)", iw, ic);
	H_TRUE_FATAL(c.log.v[ia].result >= 0, "accept failed");
	tl_handle conn = c.log.v[ia].u.accept.conn;
	H_EQ(h_read_exact(&c, conn, got, 5, NULL), 5);
	H_EQ(memcmp(got, "early", 5), 0);
	H_EQ(h_write_all(&c, conn, "reply", 5), 5);
	int ir = h_wait_op(&c, rop);
	if (ir >= 0) {
		H_EQ(c.log.v[ir].result, 5);
		H_EQ(memcmp(rbuf, "reply", 5), 0);
	}
	h_close(&c, conn, 5);
	h_close(&c, cli, 6);
	h_close(&c, lis, 7);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_tcp_connect_v4(void)
{
	connect_one(AF_INET);
}

static void test_tcp_connect_v6(void)
{
	connect_one(AF_INET6);
}

/* Rule 4.2: connect to a port nobody listens on: one -ECONNREFUSED terminal. */
static void test_tcp_connect_refused(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli;
	tl_addr la;
	tl_op cop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	h_close(&c, lis, 1); /* the port is free again */
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	int i = h_wait_op(&c, cop);
	if (i >= 0) {
		H_EQ(c.log.v[i].kind, TL_K_CONNECT);
		H_EQ(c.log.v[i].result, -ECONNREFUSED);
	}
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, cop, 0), 1);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 4.3 Reads
 * ===================================================================== */

/* Rule 4.3: a read into a provided buffer writes only result bytes. */
static void test_read_provided(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t buf[64], msg[10];
	memset(buf, 0xee, sizeof buf);
	fill_pattern(msg, sizeof msg, 0);
	tl_op rop;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 0x4ead, &rop), 0);
	H_EQ(h_write_all(&c, cli, msg, sizeof msg), 10);
	int i = h_wait_op(&c, rop);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->kind, TL_K_READ);
		H_EQ(x->token, 0x4ead);
		H_EQ(x->handle.v, srv.v);
		H_EQ(x->flags & (TL_F_TERMINAL | TL_F_LEASE | TL_F_EOF), TL_F_TERMINAL);
		H_TRUE(x->result >= 1 && x->result <= 10, "read %lld", (long long)x->result);
		if (x->result >= 1 && x->result <= 10) {
			uint32_t n = (uint32_t)x->result;
			H_EQ(check_pattern(buf, n, 0), -1);
			H_TRUE(all_bytes(buf + n, sizeof buf - n, 0xee), "bytes past the result written");
			if (n < 10)
				H_EQ(h_read_exact(&c, srv, buf + n, 10 - n, NULL), 10 - n);
			H_EQ(check_pattern(buf, 10, 0), -1);
		}
	}
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.3: tl_read_pooled gives a lease with the data; release is 0, then
 * -ENOENT. */
static void test_read_pooled(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t msg[1000];
	fill_pattern(msg, sizeof msg, 0);
	tl_op rop;
	H_EQ(tl_read_pooled(l, srv, 1, &rop), 0);
	H_EQ(h_write_all(&c, cli, msg, sizeof msg), 1000);
	int i = h_wait_op(&c, rop);
	uint32_t got = 0;
	if (i >= 0) {
		tl_completion x = c.log.v[i];
		H_EQ(x.kind, TL_K_READ);
		H_TRUE(x.flags & TL_F_TERMINAL, "not terminal");
		H_TRUE_FATAL(x.flags & TL_F_LEASE, "no lease (flags %#x, result %lld)", x.flags,
			     (long long)x.result);
		H_TRUE(x.result >= 1 && x.result <= 1000, "read %lld", (long long)x.result);
		CU_ASSERT_PTR_NOT_NULL_FATAL(x.u.read.lease.data);
		H_TRUE(x.u.read.lease.cap >= x.result, "lease cap %u < %lld", x.u.read.lease.cap,
		       (long long)x.result);
		if (x.result >= 1 && x.result <= 1000) {
			got = (uint32_t)x.result;
			H_EQ(check_pattern(x.u.read.lease.data, got, 0), -1);
		}
		H_EQ(stats(l).leases_out, 1);
		H_EQ(tl_lease_release(l, x.u.read.lease.id), 0);
		H_EQ(tl_lease_release(l, x.u.read.lease.id), -ENOENT);
		H_EQ(stats(l).leases_out, 0);
		c.log.v[i].flags &= (uint16_t)~TL_F_LEASE;
	}
	H_EQ(tl_lease_release(l, 0xfffffff0u), -ENOENT);
	uint8_t rest[1000];
	if (got < 1000) {
		H_EQ(h_read_exact(&c, srv, rest, 1000 - got, NULL), 1000 - got);
		H_EQ(check_pattern(rest, 1000 - got, got), -1);
	}
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Check the leases of op in c->log[*from..] against the pattern stream at
 * *off, releasing them; returns the number of nonterminal data completions
 * that were wrong. */
static int consume_stream(h_ctx *c, tl_op op, uint32_t *from, uint64_t *off)
{
	int wrong = 0;
	for (; *from < c->log.n; (*from)++) {
		tl_completion *x = &c->log.v[*from];
		if (x->op.v != op.v || x->kind != TL_K_READ || x->result <= 0)
			continue;
		if (!(x->flags & TL_F_LEASE)) {
			wrong++;
			continue;
		}
		long bad = check_pattern(x->u.read.lease.data, (size_t)x->result, *off);
		if (bad >= 0) {
			if (!wrong)
				fprintf(stderr, "  [%s] byte %llu of the stream is wrong\n",
					h_test_name(), (unsigned long long)(*off + (uint64_t)bad));
			wrong++;
		}
		*off += (uint64_t)x->result;
		H_EQ(tl_lease_release(c->loop, x->u.read.lease.id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
	return wrong;
}

/* Rule 4.3: read_start delivers every byte of several writes in nonterminal
 * lease completions; EOF ends it (TL_F_EOF, result 0, terminal). */
static void test_read_start_eof(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	static const uint32_t chunk[3] = { 300, 5000, 70000 };
	uint8_t *msg = malloc(75300);
	CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
	fill_pattern(msg, 75300, 0);
	tl_op rs, sop;
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	uint32_t off = 0, from = 0;
	uint64_t seen = 0;
	int wrong = 0;
	for (int k = 0; k < 3; k++) {
		H_EQ(h_write_all(&c, cli, msg + off, chunk[k]), chunk[k]);
		off += chunk[k];
		h_idle(&c, 5);
		wrong += consume_stream(&c, rs, &from, &seen);
	}
	H_EQ(tl_shutdown(l, cli, 2, &sop), 0);
	int i = h_wait_op(&c, rs);
	wrong += consume_stream(&c, rs, &from, &seen);
	H_EQ(wrong, 0);
	H_EQ(seen, 75300);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->result, 0);
		H_EQ(x->flags & (TL_F_EOF | TL_F_TERMINAL | TL_F_LEASE), TL_F_EOF | TL_F_TERMINAL);
		for (int k = 0; k < i; k++)
			if (c.log.v[k].op.v == rs.v) {
				H_EQ(c.log.v[k].flags & TL_F_TERMINAL, 0);
				H_TRUE(c.log.v[k].result > 0, "result %lld", (long long)c.log.v[k].result);
			}
	}
	H_EQ(h_count_term(&c.log, rs), 1);
	h_wait_op(&c, sop);
	free(msg);
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.3: after the peer's EOF, a read (provided or pooled) completes with
 * result 0, TL_F_EOF, terminal, and no lease. */
static void test_read_eof(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op sop, r1, r2;
	uint8_t buf[16];
	H_EQ(tl_shutdown(l, cli, 1, &sop), 0);
	H_EQ(tl_read(l, srv, buf, sizeof buf, 2, &r1), 0);
	int i = h_wait_op(&c, r1);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_EQ(c.log.v[i].flags & (TL_F_EOF | TL_F_TERMINAL | TL_F_LEASE),
		     TL_F_EOF | TL_F_TERMINAL);
	}
	H_EQ(tl_read_pooled(l, srv, 3, &r2), 0);
	i = h_wait_op(&c, r2);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_EQ(c.log.v[i].flags & (TL_F_EOF | TL_F_TERMINAL | TL_F_LEASE),
		     TL_F_EOF | TL_F_TERMINAL);
	}
	i = h_wait_op(&c, sop);
	if (i >= 0) {
		H_EQ(c.log.v[i].kind, TL_K_SHUTDOWN);
		H_EQ(c.log.v[i].result, 0);
	}
	h_close(&c, srv, 4);
	h_close(&c, cli, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.3: a shortage of pooled buffers is never an error: with 2 buffers
 * held by the test, reads pause (no error, no terminal), then resume when
 * leases come back, and every byte arrives in order. */
static void test_read_lease_shortage(void)
{
	enum { TOTAL = 256 * 1024, WR = 16 * 1024 };
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = 2;
	cfg.pooled_buffer_size = 4096;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t *msg = malloc(TOTAL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
	fill_pattern(msg, TOTAL, 0);
	tl_op rs, w[TOTAL / WR];
	uint32_t start = c.log.n;
	for (int k = 0; k < TOTAL / WR; k++)
		H_EQ(tl_write(l, cli, msg + k * WR, WR, 100 + (uint64_t)k, &w[k]), 0);
	H_EQ(tl_read_start(l, srv, 1, &rs), 0);
	h_idle(&c, 300); /* leases are not released meanwhile */
	uint32_t held = 0;
	for (uint32_t i = start; i < c.log.n; i++) {
		tl_completion *x = &c.log.v[i];
		H_TRUE(x->result >= 0, "completion kind %u result %lld%s during the shortage",
		       x->kind, (long long)x->result, h_errname(x->result));
		if (x->op.v == rs.v) {
			H_EQ(x->flags & TL_F_TERMINAL, 0);
			held += (x->flags & TL_F_LEASE) != 0;
		}
	}
	H_TRUE(held >= 1 && held <= 2, "%u leases out with a pool of 2", held);
	H_TRUE(stats(l).leases_out <= 2, "stats leases_out %u", stats(l).leases_out);
	/* Release as they come: everything arrives. */
	uint32_t from = start;
	uint64_t seen = 0;
	int wrong = 0;
	uint64_t dl = h_wall_ns() + H_SLOW_MS(10000) * H_MS;
	while (seen < TOTAL && h_wall_ns() < dl) {
		wrong += consume_stream(&c, rs, &from, &seen);
		if (seen < TOTAL)
			h_turn(&c, 10 * (int64_t)H_MS);
	}
	H_EQ(wrong, 0);
	H_EQ(seen, TOTAL);
	for (int k = 0; k < TOTAL / WR; k++) {
		int i = h_wait_op(&c, w[k]);
		if (i >= 0)
			H_EQ(c.log.v[i].result, WR);
	}
	for (uint32_t i = start; i < c.log.n; i++)
		if (c.log.v[i].op.v == rs.v)
			H_TRUE(c.log.v[i].result >= 0, "read_start reported %lld%s",
			       (long long)c.log.v[i].result, h_errname(c.log.v[i].result));
	H_EQ(h_count_term(&c.log, rs), 0);
	tl_op sop;
	H_EQ(tl_shutdown(l, cli, 2, &sop), 0);
	int i = h_wait_op(&c, rs);
	consume_stream(&c, rs, &from, &seen);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_TRUE(c.log.v[i].flags & TL_F_EOF, "flags %#x", c.log.v[i].flags);
	}
	free(msg);
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 4.4 Writes
 * ===================================================================== */

/* Rule 4.4: 64 writes of 64 KiB submitted back to back: every byte arrives,
 * in order, and the writes complete in submission order with full results. */
static void test_write_many_in_order(void)
{
	enum { NW = 64, WR = 64 * 1024, TOTAL = NW * WR };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t *msg = malloc(TOTAL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
	fill_pattern(msg, TOTAL, 0);
	tl_op w[NW], rs;
	uint32_t start = c.log.n;
	for (int k = 0; k < NW; k++)
		H_EQ(tl_write(l, cli, msg + (size_t)k * WR, WR, (uint64_t)k, &w[k]), 0);
	H_EQ(tl_read_start(l, srv, 1000, &rs), 0);
	uint32_t from = start;
	uint64_t seen = 0;
	int wrong = 0;
	uint64_t dl = h_wall_ns() + H_SLOW_MS(20000) * H_MS;
	while (seen < TOTAL && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		wrong += consume_stream(&c, rs, &from, &seen);
	}
	H_EQ(wrong, 0);
	H_EQ(seen, TOTAL);
	int last = -1, disorder = 0;
	for (int k = 0; k < NW; k++) {
		int i = h_wait_op(&c, w[k]);
		if (i < 0)
			continue;
		H_EQ(c.log.v[i].kind, TL_K_WRITE);
		H_EQ(c.log.v[i].result, WR);
		disorder += i < last;
		last = i;
	}
	H_EQ(disorder, 0);
	tl_op sop;
	H_EQ(tl_shutdown(l, cli, 2, &sop), 0);
	int i = h_wait_op(&c, rs);
	consume_stream(&c, rs, &from, &seen);
	H_EQ(seen, TOTAL);
	if (i >= 0)
		H_TRUE(c.log.v[i].flags & TL_F_EOF, "flags %#x", c.log.v[i].flags);
	free(msg);
	h_close(&c, srv, 3);
	h_close(&c, cli, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.4: writev with 8 segments writes them all in order; the iovec
 * array itself is copied at submission. */
static void test_writev_8(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	static const uint32_t len[TL_IOV_MAX] = { 1, 7, 100, 1000, 4096, 3, 65536, 20 };
	uint8_t *seg[TL_IOV_MAX];
	tl_iovec iov[TL_IOV_MAX];
	uint32_t total = 0;
	for (int k = 0; k < TL_IOV_MAX; k++) {
		seg[k] = malloc(len[k]);
		CU_ASSERT_PTR_NOT_NULL_FATAL(seg[k]);
		fill_pattern(seg[k], len[k], total);
		iov[k].iov_base = seg[k];
		iov[k].iov_len = len[k];
		total += len[k];
	}
	tl_op wop;
	H_EQ(tl_writev(l, cli, iov, TL_IOV_MAX, 7, &wop), 0);
	memset(iov, 0, sizeof iov); /* the loop copied the array */
	uint8_t *got = malloc(total);
	CU_ASSERT_PTR_NOT_NULL_FATAL(got);
	H_EQ(h_read_exact(&c, srv, got, total, NULL), total);
	H_EQ(check_pattern(got, total, 0), -1);
	int i = h_wait_op(&c, wop);
	if (i >= 0) {
		H_EQ(c.log.v[i].kind, TL_K_WRITE);
		H_EQ(c.log.v[i].result, total);
		H_EQ(c.log.v[i].token, 7);
	}
	free(got);
	for (int k = 0; k < TL_IOV_MAX; k++)
		free(seg[k]);
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.4 / 1.4: writev with 0, -1 or TL_IOV_MAX + 1 segments (or a NULL
 * array) is -EINVAL and leaves nothing behind. */
static void test_writev_bad_count(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t b[TL_IOV_MAX + 1];
	tl_iovec iov[TL_IOV_MAX + 1];
	for (int k = 0; k <= TL_IOV_MAX; k++) {
		iov[k].iov_base = &b[k];
		iov[k].iov_len = 1;
	}
	uint32_t n0 = c.log.n;
	tl_loop_stats s0 = stats(l);
	tl_op op;
	H_EQ(tl_writev(l, cli, iov, 0, 1, &op), -EINVAL);
	H_EQ(tl_writev(l, cli, iov, -1, 1, &op), -EINVAL);
	H_EQ(tl_writev(l, cli, iov, TL_IOV_MAX + 1, 1, &op), -EINVAL);
	H_EQ(tl_writev(l, cli, NULL, 1, 1, &op), -EINVAL);
	H_EQ(stats(l).ops, s0.ops);
	h_idle(&c, 20);
	H_EQ(c.log.n, n0);
	/* Nothing was written either. */
	tl_op rop;
	uint8_t r[4];
	H_EQ(tl_read(l, srv, r, sizeof r, 2, &rop), 0);
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, rop, 0), 0);
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.4: shutdown after writes: the peer sees every byte then EOF, the
 * shutdown completes after the writes, and reads on the half-closed side
 * still work until the peer's own EOF. */
static void test_shutdown_after_writes(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t msg[3000], got[3001];
	fill_pattern(msg, sizeof msg, 0);
	tl_op w[3], sop;
	for (int k = 0; k < 3; k++)
		H_EQ(tl_write(l, cli, msg + k * 1000, 1000, (uint64_t)k, &w[k]), 0);
	H_EQ(tl_shutdown(l, cli, 9, &sop), 0);
	int eof = 0;
	H_EQ(h_read_exact(&c, srv, got, 3000, &eof), 3000);
	H_EQ(eof, 0);
	H_EQ(check_pattern(got, 3000, 0), -1);
	H_EQ(h_read_exact(&c, srv, got, 1, &eof), 0);
	H_EQ(eof, 1);
	int is = h_wait_op(&c, sop);
	if (is >= 0) {
		H_EQ(c.log.v[is].kind, TL_K_SHUTDOWN);
		H_EQ(c.log.v[is].result, 0);
		for (int k = 0; k < 3; k++) {
			int i = h_find_term(&c.log, w[k]);
			H_TRUE(i >= 0 && i < is, "write %d at %d, shutdown at %d", k, i, is);
		}
	}
	char r[32] = { 0 };
	H_EQ(h_write_all(&c, srv, "after-shutdown", 14), 14);
	H_EQ(h_read_exact(&c, cli, r, 14, NULL), 14);
	H_EQ(memcmp(r, "after-shutdown", 14), 0);
	tl_op s2;
	H_EQ(tl_shutdown(l, srv, 10, &s2), 0);
	H_EQ(h_read_exact(&c, cli, r, 1, &eof), 0);
	H_EQ(eof, 1);
	h_wait_op(&c, s2);
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 4.5 UDP, and Unix-domain streams
 * ===================================================================== */

static void udp_round_trip(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP) || (family == AF_INET6 && !h_need_ipv6()))
		goto out;
	tl_handle a, b;
	tl_addr any, aa, ba;
	h_loopback(&any, family, 0);
	H_EQ_FATAL(tl_udp_bind(l, &any, &a), 0);
	H_EQ_FATAL(tl_udp_bind(l, &any, &b), 0);
	H_EQ(tl_local_addr(l, a, &aa), 0);
	H_EQ(tl_local_addr(l, b, &ba), 0);
	H_EQ(aa.sa.sa_family, family);
	H_TRUE(addr_port(&aa) != 0 && addr_port(&ba) != 0, "ports %u %u", addr_port(&aa),
	       addr_port(&ba));
	uint8_t buf[2048];
	memset(buf, 0xee, sizeof buf);
	tl_op ra, sb, rb, sa;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &ra), 0);
	H_EQ(tl_udp_send(l, b, "ping", 4, &aa, 2, &sb), 0);
	int i = h_wait_op(&c, sb);
	if (i >= 0) {
		H_EQ(c.log.v[i].kind, TL_K_SEND);
		H_EQ(c.log.v[i].result, 4);
	}
	i = h_wait_op(&c, ra);
	tl_addr from;
	memset(&from, 0, sizeof from);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->kind, TL_K_RECV);
		H_EQ(x->result, 4);
		H_EQ(x->flags & TL_F_LEASE, 0);
		H_EQ(memcmp(buf, "ping", 4), 0);
		H_TRUE(all_bytes(buf + 4, sizeof buf - 4, 0xee), "bytes past the datagram written");
		from = x->u.recv.from;
		H_TRUE(h_addr_eq(&from, &ba), "from port %u, sender port %u", addr_port(&from),
		       addr_port(&ba));
	}
	/* Reply to `from`, received into a pooled lease. */
	H_EQ(tl_udp_recv_pooled(l, b, 3, &rb), 0);
	H_EQ(tl_udp_send(l, a, "pong!", 5, from.sa.sa_family ? &from : &ba, 4, &sa), 0);
	i = h_wait_op(&c, rb);
	if (i >= 0) {
		tl_completion x = c.log.v[i];
		H_EQ(x.kind, TL_K_RECV);
		H_EQ(x.result, 5);
		H_TRUE_FATAL(x.flags & TL_F_LEASE, "no lease (flags %#x)", x.flags);
		H_EQ(memcmp(x.u.recv.lease.data, "pong!", 5), 0);
		H_TRUE(h_addr_eq(&x.u.recv.from, &aa), "from port %u, sender port %u",
		       addr_port(&x.u.recv.from), addr_port(&aa));
		H_EQ(tl_lease_release(l, x.u.recv.lease.id), 0);
		H_EQ(tl_lease_release(l, x.u.recv.lease.id), -ENOENT);
		c.log.v[i].flags &= (uint16_t)~TL_F_LEASE;
	}
	h_wait_op(&c, sa);
	/* The deprecated form of a pooled receive (a NULL buffer) still
	 * works for one release (turnloop.h, rule 8). */
	H_EQ(tl_udp_recv(l, b, NULL, 0, 7, &rb), 0);
	H_EQ(tl_udp_send(l, a, "old", 3, from.sa.sa_family ? &from : &ba, 8, &sa), 0);
	i = h_wait_op(&c, rb);
	if (i >= 0) {
		tl_completion x = c.log.v[i];
		H_EQ(x.result, 3);
		H_TRUE_FATAL(x.flags & TL_F_LEASE, "no lease (flags %#x)", x.flags);
		H_EQ(tl_lease_release(l, x.u.recv.lease.id), 0);
		c.log.v[i].flags &= (uint16_t)~TL_F_LEASE;
	}
	h_wait_op(&c, sa);
	h_close(&c, a, 5);
	h_close(&c, b, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_udp_v4(void)
{
	udp_round_trip(AF_INET);
}

static void test_udp_v6(void)
{
	udp_round_trip(AF_INET6);
}

/* Rule 4.1-4.4 on Unix-domain streams: listen, accept (peer AF_UNIX),
 * connect, echo. */
static void test_unix_echo(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	char dir[] = "/tmp/tl-contract-XXXXXX", path[64];
	if (!h_need_cap(l, TL_CAP_UNIX))
		goto out;
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/sock", dir);
	tl_handle lis, cli, conn;
	tl_op aop, cop;
	H_EQ_FATAL(tl_unix_listen(l, path, NULL, &lis), 0);
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_unix_connect(l, path, 0, 2, &cli, &cop), 0);
	int ia = h_wait_op(&c, aop), ic = h_wait_op(&c, cop);
	H_TRUE_FATAL(ia >= 0 && ic >= 0 && c.log.v[ia].result >= 0, "accept/connect failed");
	H_EQ(c.log.v[ic].result, 0);
	H_EQ(c.log.v[ic].kind, TL_K_CONNECT);
	H_EQ(c.log.v[ia].u.accept.peer.sa.sa_family, AF_UNIX);
	conn = c.log.v[ia].u.accept.conn;
	char got[16] = { 0 };
	H_EQ(h_write_all(&c, cli, "hello unix", 10), 10);
	H_EQ(h_read_exact(&c, conn, got, 10, NULL), 10);
	H_EQ(h_write_all(&c, conn, got, 10), 10);
	memset(got, 0, sizeof got);
	H_EQ(h_read_exact(&c, cli, got, 10, NULL), 10);
	H_EQ(memcmp(got, "hello unix", 10), 0);
	h_close(&c, conn, 3);
	h_close(&c, cli, 4);
	h_close(&c, lis, 5);
	if (unlink(path) != 0)
		H_EQ(errno, ENOENT);
	H_EQ(rmdir(dir), 0);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 8.1 Notifier
 * ===================================================================== */

/* Rule 8.1: a wake from another thread ends a turn parked without limit; a
 * wake sent before the turn makes it return without waiting. */
static void test_wake_parked(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle keep = keepalive(&c);
	tl_completion out[8];
	tl_turn_info info;
	struct waker w;
	waker_start(&w, l, 100);
	uint64_t t0 = h_wall_ns();
	int n = tl_turn(l, -1, out, 8, &info);
	uint64_t dt = h_wall_ns() - t0;
	atomic_store(&w.stop, 1);
	waker_stop(&w);
	H_TRUE(n >= 0, "turn %d%s", n, h_errname(n));
	H_TRUE(dt >= 50 * H_MS, "turn(-1) returned after %llu ms, before the wake",
	       (unsigned long long)(dt / H_MS));
	H_TRUE(dt < 1000 * H_MS, "woken turn returned after %llu ms",
	       (unsigned long long)(dt / H_MS));
	H_EQ(atomic_load(&w.first_rc), 0);
	H_EQ(atomic_load(&w.wakes), 1);
	if (n >= 0)
		H_EQ(info.os_waits, 1);

	tl_poster *p = tl_poster_get(l);
	struct waker safety;
	waker_start(&safety, l, 3000);
	H_EQ(tl_poster_wake(p), 0);
	t0 = h_wall_ns();
	n = tl_turn(l, -1, out, 8, NULL);
	dt = h_wall_ns() - t0;
	waker_stop(&safety);
	H_TRUE(n >= 0, "turn %d", n);
	H_TRUE(dt < 1000 * H_MS, "a turn after a wake blocked %llu ms",
	       (unsigned long long)(dt / H_MS));
	tl_poster_put(p);
	h_close(&c, keep, 1);
	h_ctx_fini(&c);
	h_end(l, fds);
}

struct spam {
	tl_poster *p;
	int wakes, posts;
	int bad;
};

static void *spam_main(void *arg)
{
	struct spam *s = arg;
	for (int i = 0; i < s->wakes; i++)
		if (tl_poster_wake(s->p) != 0)
			s->bad++;
	for (int i = 0; i < s->posts; i++)
		if (tl_post(s->p, 5, (uint64_t)i) != 0)
			s->bad++;
	return NULL;
}

/* Rule 8.1: wakes (and posts) while the loop is not parked cost no system
 * call: they are coalesced; the next turn still does not wait. */
static void test_wake_coalesced(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle keep = keepalive(&c);
	h_turn(&c, 0);
	tl_loop_stats s0 = stats(l);
	struct spam s = { tl_poster_get(l), 10000, 500, 0 };
	pthread_t t;
	H_EQ_FATAL(pthread_create(&t, NULL, spam_main, &s), 0);
	pthread_join(t, NULL);
	H_EQ(s.bad, 0);
	tl_loop_stats s1 = stats(l);
	uint64_t sent = s1.wakes_sent - s0.wakes_sent;
	uint64_t coal = s1.wakes_coalesced - s0.wakes_coalesced;
	H_TRUE(sent <= 1, "%llu wake system calls for a loop that never parked",
	       (unsigned long long)sent);
	H_TRUE(coal >= 9000, "only %llu of 10000 wakes coalesced", (unsigned long long)coal);
	struct waker safety;
	waker_start(&safety, l, 3000);
	tl_completion out[16];
	uint64_t t0 = h_wall_ns();
	int n = tl_turn(l, -1, out, 16, NULL);
	uint64_t dt = h_wall_ns() - t0;
	waker_stop(&safety);
	H_TRUE(n >= 1, "turn %d", n);
	H_TRUE(dt < 1000 * H_MS, "turn after wakes and posts blocked %llu ms",
	       (unsigned long long)(dt / H_MS));
	uint32_t first = n > 0 ? (uint32_t)n : 0;
	h_wait_count(&c, 500 - first, H_WAIT_MS);
	H_EQ(h_count_kind(&c.log, TL_K_POST, 0) + first, 500);
	tl_poster_put(s.p);
	h_close(&c, keep, 1);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* =====================================================================
 * 8.2 Poster
 * ===================================================================== */

struct producer {
	tl_poster *p;
	uint64_t id;
	int n;
	int err;
	pthread_t t;
};

static void *producer_main(void *arg)
{
	struct producer *pr = arg;
	for (int s = 0; s < pr->n; s++) {
		int rc;
		while ((rc = tl_post(pr->p, 1000 + pr->id, pr->id << 32 | (uint64_t)s)) == -ENOBUFS)
			sched_yield();
		if (rc != 0) {
			pr->err = rc;
			break;
		}
	}
	return NULL;
}

/* Rule 8.2: 4 threads x 10,000 posts: each arrives exactly once, in order per
 * producer. */
static void test_post_mpsc(void)
{
	enum { P = 4, M = 10000 };
	int fds = h_begin();
	tl_loop *l = h_loop();
	struct producer pr[P];
	for (int k = 0; k < P; k++) {
		pr[k] = (struct producer){ .p = tl_poster_get(l), .id = (uint64_t)k, .n = M };
		H_EQ_FATAL(pthread_create(&pr[k].t, NULL, producer_main, &pr[k]), 0);
	}
	uint64_t next[P] = { 0 };
	int got = 0, bad = 0;
	tl_completion out[256];
	uint64_t dl = h_wall_ns() + H_SLOW_MS(30000) * H_MS;
	while (got < P * M && h_wall_ns() < dl) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, out, 256, NULL);
		if (n < 0) {
			H_EQ(n, 0);
			break;
		}
		for (int i = 0; i < n; i++) {
			uint64_t id = out[i].u.post.payload >> 32, seq = out[i].u.post.payload & 0xffffffffu;
			if (out[i].kind != TL_K_POST || id >= P || out[i].token != 1000 + id ||
			    seq != next[id]) {
				if (bad++ == 0)
					fprintf(stderr, "  first bad post: kind %u token %llu payload %#llx\n",
						out[i].kind, (unsigned long long)out[i].token,
						(unsigned long long)out[i].u.post.payload);
				continue;
			}
			next[id]++;
			got++;
		}
	}
	for (int k = 0; k < P; k++) {
		pthread_join(pr[k].t, NULL);
		H_EQ(pr[k].err, 0);
		H_EQ(next[k], M);
		tl_poster_put(pr[k].p);
	}
	H_EQ(got, P * M);
	H_EQ(bad, 0);
	tl_completion extra[4];
	H_EQ(tl_turn(l, 0, extra, 4, NULL), 0);
	h_end(l, fds);
}

/* Rule 8.2: a full poster refuses with -ENOBUFS and keeps nothing: exactly
 * the accepted posts are delivered. The capacity is rounded up to 2^k. */
static void test_post_full(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 6; /* rounded up to 8 */
	tl_loop *l = h_loop_cfg(&cfg);
	tl_poster *p = tl_poster_get(l);
	int accepted = 0, rc = 0;
	while (accepted < 1000 && (rc = tl_post(p, 1, (uint64_t)accepted)) == 0)
		accepted++;
	H_EQ(rc, -ENOBUFS);
	H_EQ(accepted, 8);
	for (int k = 0; k < 10; k++)
		H_EQ(tl_post(p, 1, 5000 + (uint64_t)k), -ENOBUFS);
	tl_completion out[64];
	int got = 0, bad = 0;
	for (int t = 0; t < 5; t++) {
		int n = tl_turn(l, 0, out, 64, NULL);
		for (int i = 0; i < n; i++) {
			if (out[i].kind != TL_K_POST || out[i].u.post.payload != (uint64_t)got)
				bad++;
			got++;
		}
	}
	H_EQ(got, accepted);
	H_EQ(bad, 0);
	H_EQ(tl_post(p, 2, 77), 0);
	int n = tl_turn(l, 0, out, 64, NULL);
	H_EQ(n, 1);
	if (n == 1)
		H_EQ(out[0].u.post.payload, 77);
	tl_poster_put(p);
	h_end(l, fds);
}

/* Rule 8.2 + 1.9: after tl_loop_destroy, the poster refuses with -EPIPE
 * (posts, wakes, room waits) until tl_poster_put frees it. */
static void test_post_after_destroy(void)
{
	int fds = h_begin();
	tl_loop *a = h_loop();
	h_ctx cb;
	h_ctx_init(&cb, h_loop());
	tl_poster *p = tl_poster_get(a), *p2 = tl_poster_get(a);
	H_EQ(tl_post(p, 1, 1), 0); /* undelivered when the loop goes */
	tl_loop_destroy(a);
	H_EQ(tl_post(p, 1, 2), -EPIPE);
	H_EQ(tl_post(p2, 1, 3), -EPIPE);
	H_EQ(tl_poster_wake(p), -EPIPE);
	tl_op op;
	H_EQ(tl_post_wait_room(cb.loop, p, 4, &op), -EPIPE);
	h_idle(&cb, 10);
	H_EQ(cb.log.n, 0);
	tl_poster_put(p);
	tl_poster_put(p2);
	h_ctx_fini(&cb);
	h_end(cb.loop, fds);
}

/* Fill p (the poster of a loop nobody turns): the count accepted. */
static int fill_poster(tl_poster *p)
{
	int k = 0, rc;
	while (k < 100000 && (rc = tl_post(p, 1, (uint64_t)k)) == 0)
		k++;
	H_EQ(rc, -ENOBUFS);
	return k;
}

/* Rule 8.2: loop B fills A's poster, asks for room, and gets exactly one
 * TL_K_ROOM after A drained, none before. */
static void test_post_wait_room(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 8;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	tl_poster *pa = tl_poster_get(ca.loop);
	int k = fill_poster(pa);
	tl_op wop;
	H_EQ_FATAL(tl_post_wait_room(cb.loop, pa, 0x700, &wop), 0);
	h_idle(&cb, 20);
	H_EQ(h_count_op(&cb.log, wop, 0), 0);
	H_TRUE(h_wait_count(&ca, (uint32_t)k, H_WAIT_MS), "A got %u of %d posts", ca.log.n, k);
	int i = h_wait_op(&cb, wop);
	if (i >= 0) {
		tl_completion *x = &cb.log.v[i];
		H_EQ(x->kind, TL_K_ROOM);
		H_EQ(x->token, 0x700);
		H_EQ(x->result, 0);
	}
	h_idle(&ca, 10);
	h_idle(&cb, 20);
	H_EQ(h_count_op(&cb.log, wop, 0), 1);
	H_EQ(h_count_kind(&cb.log, TL_K_ROOM, 0), 1);
	H_EQ(tl_post(pa, 2, 2), 0);
	tl_poster_put(pa);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(cb.loop);
	h_end(ca.loop, fds);
}

/* Rule 8.2: a waiter that registers after the target already drained (the
 * race between a refused post and the registration) still gets its one
 * TL_K_ROOM: room that is already there is reported at once. */
static void test_post_wait_room_after_drain(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 8;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	tl_poster *pa = tl_poster_get(ca.loop);
	int k = fill_poster(pa);
	H_TRUE(h_wait_count(&ca, (uint32_t)k, H_WAIT_MS), "A got %u of %d posts", ca.log.n, k);
	tl_op wop;
	H_EQ_FATAL(tl_post_wait_room(cb.loop, pa, 0x701, &wop), 0);
	int i = h_wait_op(&cb, wop);
	H_TRUE(i >= 0, "no TL_K_ROOM for a waiter that registered after the drain");
	if (i >= 0) {
		H_EQ(cb.log.v[i].kind, TL_K_ROOM);
		H_EQ(cb.log.v[i].token, 0x701);
	}
	h_idle(&cb, 20);
	H_EQ(h_count_kind(&cb.log, TL_K_ROOM, 0), 1);
	tl_poster_put(pa);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(cb.loop);
	h_end(ca.loop, fds);
}

/* Rule 8.2: the room-waiter table is bounded (-ENOBUFS), and a waiter whose
 * target loop is destroyed still ends with exactly one terminal. */
static void test_post_wait_room_limits(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.post_capacity = 8;
	cfg.room_waiters = 1;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	tl_poster *pa = tl_poster_get(ca.loop);
	fill_poster(pa);
	tl_op w1, w2;
	H_EQ_FATAL(tl_post_wait_room(cb.loop, pa, 1, &w1), 0);
	H_EQ(tl_post_wait_room(cb.loop, pa, 2, &w2), -ENOBUFS);
	h_wait_count(&ca, 8, H_WAIT_MS);
	int i = h_wait_op(&cb, w1);
	if (i >= 0)
		H_EQ(cb.log.v[i].kind, TL_K_ROOM);
	h_idle(&cb, 20);
	H_EQ(h_count_kind(&cb.log, TL_K_ROOM, 0), 1);
	/* Target destroyed while a waiter is registered. */
	fill_poster(pa);
	tl_op w3;
	H_EQ_FATAL(tl_post_wait_room(cb.loop, pa, 3, &w3), 0);
	tl_loop_destroy(ca.loop);
	i = h_wait_op(&cb, w3);
	if (i >= 0)
		H_TRUE(cb.log.v[i].result == 0 || cb.log.v[i].result == -EPIPE,
		       "room wait on a destroyed loop ended with %lld%s",
		       (long long)cb.log.v[i].result, h_errname(cb.log.v[i].result));
	h_idle(&cb, 20);
	H_EQ(h_count_op(&cb.log, w3, 0), 1);
	tl_poster_put(pa);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_end(cb.loop, fds);
}

/* =====================================================================
 * 8.3 Embedding
 * ===================================================================== */

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, ms);
	return n == 1 && (p.revents & POLLIN);
}

/* Turn until a turn returns nothing (at most 5 turns): the loop is idle. */
static void drain_idle(h_ctx *c)
{
	for (int k = 0; k < 5; k++)
		if (h_turn(c, 0) <= 0)
			break;
}

/* Rule 8.3: without cfg.embed, tl_loop_fd is -ENOTSUP. */
static void test_embed_needs_config(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	H_EQ(tl_loop_fd(l), -ENOTSUP);
	h_end(l, fds);
}

/* Rule 8.3: the embedding descriptor is readable after a post, a timer expiry
 * and data arriving, and not readable once the loop is drained and idle. */
static void test_embed_fd(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.embed = 1;
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	tl_loop *a = ca.loop;
	if (!h_need_cap(a, TL_CAP_EMBED))
		goto out;
	int fd = tl_loop_fd(a);
	H_TRUE_FATAL(fd >= 0, "tl_loop_fd: %d%s", fd, h_errname(fd));
	H_EQ(tl_loop_fd(a), fd);
	drain_idle(&ca);
	H_EQ(readable(fd, 0), 0);
	/* A post. */
	tl_poster *p = tl_poster_get(a);
	H_EQ(tl_post(p, 1, 1), 0);
	H_EQ(readable(fd, 1000), 1);
	uint32_t n0 = ca.log.n;
	drain_idle(&ca);
	H_EQ(h_count_kind(&ca.log, TL_K_POST, n0), 1);
	H_EQ(readable(fd, 0), 0);
	tl_poster_put(p);
	/* A timer. */
	tl_handle t;
	tl_op top;
	timer_ok(&ca, in_ms(a, 50), 0, 2, &t, &top);
	drain_idle(&ca);
	H_EQ(readable(fd, 0), 0);
	uint64_t t0 = h_wall_ns();
	H_EQ(readable(fd, 1000), 1);
	H_TRUE(h_wall_ns() - t0 >= 30 * H_MS, "readable %llu ms before a 50 ms timer",
	       (unsigned long long)((h_wall_ns() - t0) / H_MS));
	h_turn(&ca, 0);
	H_TRUE(h_find_term(&ca.log, top) >= 0, "readable, but the timer did not come");
	h_close(&ca, t, 3);
	drain_idle(&ca);
	H_EQ(readable(fd, 0), 0);
	/* Data arriving from another loop. */
	if (tl_loop_caps(a) & TL_CAP_TCP) {
		tl_handle srv, cli;
		h_ctx_link(&ca, &cb);
		H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &srv, &cli), 0);
		ca.peer = cb.peer = NULL;
		uint8_t buf[8] = { 0 };
		tl_op rop, wop;
		H_EQ(tl_read(a, srv, buf, sizeof buf, 4, &rop), 0);
		drain_idle(&ca);
		drain_idle(&cb);
		H_EQ(readable(fd, 0), 0);
		H_EQ(tl_write(cb.loop, cli, "x", 1, 5, &wop), 0);
		h_wait_op(&cb, wop);
		H_EQ(readable(fd, 1000), 1);
		for (int k = 0; k < 3 && h_find_term(&ca.log, rop) < 0; k++)
			h_turn(&ca, 0);
		int i = h_find_term(&ca.log, rop);
		H_TRUE(i >= 0, "readable, but the read did not complete");
		if (i >= 0) {
			H_EQ(ca.log.v[i].result, 1);
			H_EQ(buf[0], 'x');
		}
		drain_idle(&ca);
		H_EQ(readable(fd, 0), 0);
		h_close(&ca, srv, 6);
		h_close(&cb, cli, 7);
	}
out:
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(cb.loop);
	h_end(a, fds);
}

/* =====================================================================
 * Registration and main
 * ===================================================================== */

static const struct test_def tests[] = {
	T("1.2 config", test_config_zero_limits),
	T("1.2 config", test_config_absurd_limits),
	T("1.2 config", test_config_edges_accepted),
	T("1.2 config", test_steady_queue_stays_hot),
	T("1.3 ids", test_ids_foreign),
	T("1.3 ids", test_ids_stale),
	T("1.3 ids", test_ids_never_issued),
	T("1.3 ids", test_ids_slot_reuse),
	T("1.4 refused", test_refused_wrong_kind),
	T("1.4 refused", test_refused_bad_args),
	T("1.4 refused", test_refused_op_table_full),
	T("1.4 refused", test_refused_handle_table_full),
	T("1.5-1.6 completions and turns", test_completion_fields),
	T("1.5-1.6 completions and turns", test_turn_cap_one),
	T("1.5-1.6 completions and turns", test_turn_bad_args),
	T("1.5-1.6 completions and turns", test_turn_never_blocks_with_work),
	T("1.5-1.6 completions and turns", test_turn_info),
	T("1.6 a turn spins before it parks (spin_ns)", test_turn_spin),
	T("1.6 a turn naps before it parks while events come in batches (nap_ns)", test_turn_nap),
	T("1.5-1.6 completions and turns", test_turn_queued_work_events_flow),
	T("1.5-1.6 completions and turns", test_turn_echo_one_wait),
	T("1.7 fairness", test_fair_posts_vs_timer),
	T("1.7 fairness", test_fair_terminal_under_flood),
	T("1.8 alive", test_alive_set_ref_timer),
	T("1.8 alive", test_alive_listener),
	T("1.8 alive", test_alive_undelivered_terminal),
	T("1.9 loop close", test_loop_close_busy),
	T("1.9 loop close", test_loop_destroy_pending),
	T("2.1 cancel", test_cancel_once),
	T("2.1 cancel", test_cancel_finished),
	T("2.1 cancel", test_cancel_queued_terminal),
	T("2.1 cancel", test_cancel_read_buffer),
	T("2.1 cancel", test_cancel_accept_and_read_start),
	T("2.2 stop", test_stop_repeating_timer),
	T("2.2 stop", test_stop_accept_start),
	T("2.2 stop", test_stop_read_start),
	T("2.3 close", test_close_pending_ops),
	T("2.3 close", test_close_order),
	T("2.4 connect deadline", test_connect_deadline_timeout),
	T("2.4 connect deadline", test_connect_deadline_success),
	T("3 timers", test_timer_deadline_order),
	T("3 timers", test_timer_equal_deadlines),
	T("3 timers", test_timer_oneshot),
	T("3 timers", test_timer_zero_repeat),
	T("3 timers", test_timer_repeating),
	T("3 timers", test_timer_coalesce),
	T("3 timers", test_timer_reset_later),
	T("3 timers", test_timer_reset_earlier),
	T("3 timers", test_timer_reset_errors),
	T("3 timers", test_timer_load_100k),
	T("4.1 listen and accept", test_tcp_accept_v4),
	T("4.1 listen and accept", test_tcp_accept_v6),
	T("4.1 listen and accept", test_tcp_accept_multishot),
	T("4.1 listen and accept", test_tcp_accept_multishot_table_full),
	T("4.1 listen and accept", test_tcp_reuseport),
	T("4.2 connect", test_tcp_connect_v4),
	T("4.2 connect", test_tcp_connect_v6),
	T("4.2 connect", test_tcp_connect_refused),
	T("4.3 read", test_read_provided),
	T("4.3 read", test_read_pooled),
	T("4.3 read", test_read_start_eof),
	T("4.3 read", test_read_eof),
	T("4.3 read", test_read_lease_shortage),
	T("4.4 write", test_write_many_in_order),
	T("4.4 write", test_writev_8),
	T("4.4 write", test_writev_bad_count),
	T("4.4 write", test_shutdown_after_writes),
	T("4.5 udp", test_udp_v4),
	T("4.5 udp", test_udp_v6),
	T("4 unix", test_unix_echo),
	T("8.1 notifier", test_wake_parked),
	T("8.1 notifier", test_wake_coalesced),
	T("8.2 poster", test_post_mpsc),
	T("8.2 poster", test_post_full),
	T("8.2 poster", test_post_after_destroy),
	T("8.2 poster", test_post_wait_room),
	T("8.2 poster", test_post_wait_room_after_drain),
	T("8.2 poster", test_post_wait_room_limits),
	T("8.3 embed", test_embed_needs_config),
	T("8.3 embed", test_embed_fd),
	{ NULL, NULL, NULL },
};

/* Every table of the suite, in the order they run. */
#ifdef _WIN32
/* Windows: the files whose rules its drivers can serve (docs/WINDOWS.md);
 * not the signal, proc, tty and splice test modules that are -ENOTSUP
 * there (lib/sys_absent.c) or not yet in the IOCP driver. The handover
 * module builds its adopt and detach tests there (not passing
 * descriptors); the poll module polls sockets (the IOCP driver's). */
static const struct test_def *const tables[] = { tests, tl_contract_streams, tl_contract_caps,
							 tl_contract_sockets, tl_contract_deadlines,
							 tl_contract_handover, tl_contract_poll, tl_contract_dgram,
							 tl_contract_data, tl_contract_try_write };
#else
static const struct test_def *const tables[] = { tests, tl_contract_streams, tl_contract_caps,
							 tl_contract_sockets, tl_contract_deadlines,
							 tl_contract_handover, tl_contract_poll, tl_contract_signal, tl_contract_proc, tl_contract_tty,
							 tl_contract_splice, tl_contract_dgram, tl_contract_data, tl_contract_try_write };
#endif

/* A test is selected when no filter is given or "suite/name" contains one. */
static int selected(const struct test_def *t, int argc, char **argv)
{
	if (argc < 2)
		return 1;
	char full[160];
	snprintf(full, sizeof full, "%s/%s", t->suite, t->name);
	for (int i = 1; i < argc; i++)
		if (strstr(full, argv[i]))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
	/* Create one loop first: it says which driver runs, and any process-wide
	 * state the library sets up lazily exists before the first leak check. */
	tl_config cfg;
	tl_config_init(&cfg);
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, &cfg);
	const char *env = getenv("TL_DRIVER");
	if (rc == -ENOTSUP) {
		printf("SKIP all: driver %s unavailable (-ENOTSUP)\n", env ? env : "(default)");
		return 77;
	}
	if (rc != 0) {
		fprintf(stderr, "tl_loop_new failed: %d%s\n", rc, h_errname(rc));
		return 1;
	}
	printf("contract suite: driver %s (TL_DRIVER=%s), caps %#x\n", tl_loop_driver(l),
	       env ? env : "unset", tl_loop_caps(l));
	tl_loop_close(l);

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite suite = NULL;
	const char *cur = NULL;
	int registered = 0;
	for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
	for (const struct test_def *td = tables[k]; td->fn; td++) {
		if (!selected(td, argc, argv))
			continue;
		if (!cur || strcmp(cur, td->suite) != 0) {
			suite = CU_add_suite(td->suite, NULL, NULL);
			cur = td->suite;
		}
		if (!suite || !CU_add_test(suite, td->name, td->fn)) {
			fprintf(stderr, "CUnit registration failed\n");
			CU_cleanup_registry();
			return 1;
		}
		registered++;
	}
	if (!registered) {
		fprintf(stderr, "no test matches the filter\n");
		CU_cleanup_registry();
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned run = CU_get_number_of_tests_run();
	unsigned failed = CU_get_number_of_tests_failed();
	unsigned failures = CU_get_number_of_failures();
	CU_cleanup_registry();
#ifndef _WIN32
	alarm(0);
#endif
	printf("\ncontract suite (%s): %u run, %u failed (%u failed assertions), %d skipped\n",
	       env ? env : "default driver", run, failed, failures, h_skip_count());
	if (failed || failures)
		return 1;
	if (run > 0 && (unsigned)h_skip_count() == run)
		return 77;
	return 0;
}
