/* tests/test_stats.c: CUnit tests of the live stats region: mode 0600, magic and version checks, live values, named counters, allocator bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "shard_test.h"
#include "stats_region.h"
#include "turnloop/pool.h"

static char region_path[64];

static void set_path(void)
{
	snprintf(region_path, sizeof region_path, "/dev/shm/turnloop.%d", (int)getpid());
}

/* ---- the region: where, who may read it, gone after destroy ---- */

static void test_region_mode(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt, *rt2;
	struct stat st;
	int fds = st_begin("stats/region_mode");
	mode_t old = umask(0);

	set_path();
	st_config(&cfg, 2);
	cfg.stats = 1;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	umask(old);
	CU_ASSERT_EQUAL_FATAL(stat(region_path, &st), 0);
	CU_ASSERT_EQUAL(st.st_mode & 07777, 0600);
	CU_ASSERT_EQUAL(st.st_uid, geteuid());
	/* One region per process: a second runtime with stats is refused. */
	CU_ASSERT_EQUAL(tl_runtime_new(&rt2, &cfg), -EBUSY);
	cfg.stats = 0;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt2, &cfg), 0);
	tl_runtime_destroy(rt2);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(stat(region_path, &st), -1);
	CU_ASSERT_EQUAL(errno, ENOENT);
	st_end(fds);
}

/* ---- the reader refuses what it does not know ---- */

static void write_region(const char *path, const struct tl__stats_hdr *h, size_t total)
{
	char *buf = calloc(1, total);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	memcpy(buf, h, total < sizeof *h ? total : sizeof *h);
	CU_ASSERT_EQUAL(write(fd, buf, total), (ssize_t)total);
	close(fd);
	free(buf);
}

static void good_header(struct tl__stats_hdr *h, uint32_t shards)
{
	memset(h, 0, sizeof *h);
	h->magic = TL_STATS_MAGIC;
	h->version = TL_STATS_VERSION;
	h->header_size = TL__STATS_HDR_SIZE;
	h->shards = shards;
	h->stride = TL__STATS_STRIDE;
	h->record_size = sizeof(tl_stats_shard);
	h->pid = 1;
	snprintf(h->driver, sizeof h->driver, "epoll");
}

static void test_reader_checks(void)
{
	char path[] = "/tmp/tl-stats-test-XXXXXX", err[256];
	struct tl__stats_hdr h;
	tl_stats_reader *r = (tl_stats_reader *)&h;
	tl_stats_info info;
	tl_stats_shard sh;
	size_t full = TL__STATS_HDR_SIZE + 2 * (size_t)TL__STATS_STRIDE;
	int fd, fds = st_begin("stats/reader_checks");

	fd = mkstemp(path);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	close(fd);

	/* A good one opens and reads (all zeros). */
	good_header(&h, 2);
	memset(h.driver, 'x', sizeof h.driver); /* no NUL: the reader adds one */
	write_region(path, &h, full);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open_path(&r, path, err, sizeof err), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
	CU_ASSERT_EQUAL(info.shards, 2);
	CU_ASSERT_EQUAL(strlen(info.driver), sizeof info.driver - 1);
	CU_ASSERT_EQUAL(tl_stats_read(r, 1, &sh), 0);
	CU_ASSERT_EQUAL(tl_stats_read(r, 2, &sh), -EINVAL);
	/* The region shrinks under the reader: an error, not a crash. */
	CU_ASSERT_EQUAL(truncate(path, TL__STATS_HDR_SIZE + 8), 0);
	CU_ASSERT_EQUAL(tl_stats_read(r, 1, &sh), -EPROTO);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), -EPROTO);
	tl_stats_close(r);

	/* An unknown version is refused with a message that says so. */
	good_header(&h, 2);
	h.version = 7;
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "version 7"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "knows 1"));

	good_header(&h, 2);
	h.magic ^= 1;
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "magic"));

	/* Shapes that do not add up. */
	good_header(&h, 3);
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	good_header(&h, 2);
	h.stride = 8;
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	good_header(&h, 0xffffffffu);
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	good_header(&h, 2);
	h.record_size = 8;
	write_region(path, &h, full);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	good_header(&h, 2);
	write_region(path, &h, 16);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	unlink(path);

	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -ENOENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "no such stats region"));

	/* Anyone can create the region's name in /dev/shm: a FIFO there must
	 * be refused at once, not block the reader waiting for a writer. */
	CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
	CU_ASSERT_EQUAL(tl_stats_open_path(&r, path, err, sizeof err), -EPROTO);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a regular file"));
	unlink(path);
	CU_ASSERT_EQUAL(tl_stats_open(&r, 0, err, sizeof err), -EINVAL);
	CU_ASSERT_EQUAL(tl_stats_open(&r, -5, NULL, 0), -EINVAL);
	CU_ASSERT_EQUAL(tl_stats_open_path(NULL, path, NULL, 0), -EINVAL);
	tl_stats_close(NULL);
	st_end(fds);
}

/* ---- values move while the runtime runs; named counters ---- */

static int idx_msgs, idx_bytes;
static void *volatile keep[64];

static int live_start(tl_shard *s, void *arg)
{
	(void)arg;
	/* Allocate on the shard: its arena's bytes count for it. */
	for (int i = 0; i < 8; i++)
		keep[tl_shard_id(s) * 8 + i] = malloc(100000);
	return 0;
}

static void live_stop(tl_shard *s, void *arg)
{
	(void)arg;
	for (int i = 0; i < 8; i++)
		free(keep[tl_shard_id(s) * 8 + i]);
}

/* Shard 0 keeps shard 1 busy with a message now and then. */
static int live_pass(tl_shard *s, void *arg)
{
	static _Thread_local uint64_t last;
	uint64_t now = st_now_ns();

	(void)arg;
	if (tl_shard_id(s) == 0 && now - last > 200000) {
		if (tl_shard_post(s, 1, 1, 2) == 0)
			ST_CHECK(tl_shard_counter_add(s, idx_msgs, 1) == 0);
		last = now;
	}
	return tl_shard_id(s) == 0;
}

static void live_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind == TL_K_MESH)
		ST_CHECK(tl_shard_counter_add(s, idx_bytes, 10) == 0);
}

static void test_live_values(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	tl_stats_info info;
	tl_stats_shard a[2], b[2];
	char err[200];
	const char *why;
	int fds = st_begin("stats/live_values");

	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.on_start = live_start;
	cfg.on_stop = live_stop;
	cfg.on_pass = live_pass;
	cfg.on_completion = live_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	idx_msgs = tl_runtime_counter(rt, "msgs");
	idx_bytes = tl_runtime_counter(rt, "bytes.in");
	CU_ASSERT_EQUAL(idx_msgs, 0);
	CU_ASSERT_EQUAL(idx_bytes, 1);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, "msgs"), 0);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, ""), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, "has space"), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, "a_name_that_is_far_too_long"), -EINVAL);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, NULL), -EINVAL);
	for (int i = 2; i < (int)TL_STATS_NAMED; i++) {
		char n[8];

		snprintf(n, sizeof n, "c%d", i);
		CU_ASSERT_EQUAL(tl_runtime_counter(rt, n), i);
	}
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, "one.more"), -ENOBUFS);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_start(rt), 0);
	CU_ASSERT_EQUAL(tl_runtime_counter(rt, "late"), -EINVAL);

	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid(), err, sizeof err), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
	CU_ASSERT_EQUAL(info.version, TL_STATS_VERSION);
	CU_ASSERT_EQUAL(info.shards, 2);
	CU_ASSERT_EQUAL(info.state, TL_STATS_RUNNING);
	CU_ASSERT_EQUAL(info.pid, getpid());
	CU_ASSERT_EQUAL(info.named, TL_STATS_NAMED);
	CU_ASSERT_STRING_EQUAL(info.names[0], "msgs");
	CU_ASSERT_STRING_EQUAL(info.names[1], "bytes.in");
	CU_ASSERT_EQUAL(info.stall_ns, 0);
	CU_ASSERT_TRUE(info.driver[0] != '\0');
	CU_ASSERT_EQUAL(!!(info.flags & TL_STATS_F_ARENAS), tl_runtime_arenas(rt, &why));
	usleep(30000);
	for (uint32_t i = 0; i < 2; i++)
		CU_ASSERT_EQUAL(tl_stats_read(r, i, &a[i]), 0);
	usleep(50000);
	for (uint32_t i = 0; i < 2; i++)
		CU_ASSERT_EQUAL(tl_stats_read(r, i, &b[i]), 0);
	for (uint32_t i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(b[i].shard, i);
		CU_ASSERT_EQUAL(b[i].cpu, tl_runtime_plan(rt)->shards[i].pu_os_index);
		CU_ASSERT_TRUE(b[i].turns > a[i].turns);
		CU_ASSERT_TRUE(b[i].updated_ns > a[i].updated_ns);
		CU_ASSERT_TRUE(b[i].busy_ns > 0);
	}
	/* Shard 1 parks between messages; shard 0 never does. */
	CU_ASSERT_TRUE(b[1].os_waits > a[1].os_waits);
	CU_ASSERT_TRUE(b[0].mesh_out > a[0].mesh_out);
	CU_ASSERT_TRUE(b[1].mesh_in > a[1].mesh_in);
	CU_ASSERT_TRUE(b[1].completions[TL_K_MESH] > a[1].completions[TL_K_MESH]);
	CU_ASSERT_TRUE(b[0].named[0] > a[0].named[0]);
	CU_ASSERT_TRUE(b[1].named[1] > a[1].named[1]);
	CU_ASSERT_EQUAL(b[1].named[0], 0);
	if (tl_runtime_arenas(rt, &why)) {
		CU_ASSERT_NOT_EQUAL(b[0].arena, UINT32_MAX);
		CU_ASSERT_NOT_EQUAL(b[0].arena, b[1].arena);
		CU_ASSERT_TRUE(b[0].alloc_bytes >= 800000);
	} else {
		printf("\n  (per-shard arenas off: %s)\n", why);
		CU_ASSERT_TRUE(why[0] != '\0');
		CU_ASSERT_EQUAL(b[0].arena, UINT32_MAX);
	}
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
	CU_ASSERT_EQUAL(info.state, TL_STATS_STOPPED);
	tl_stats_close(r);
	tl_runtime_destroy(rt);
	st_end(fds);
}

/* ---- the pool's per-shard and per-node stats ---- */

static atomic_uint pool_done;

static int64_t pool_job(void *arg, tl_cancel_flag *c)
{
	(void)c;
	usleep(2000);
	return (int64_t)(uintptr_t)arg;
}

static int pool_start(tl_shard *s, void *arg)
{
	tl_op op;

	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	for (uintptr_t i = 0; i < 4; i++)
		ST_CHECK(tl_blocking(tl_shard_loop(s), pool_job, (void *)i, TL_POOL_BOUNDED, i, &op) == 0);
	return 0;
}

static void pool_handler(tl_shard *s, const tl_completion *c)
{
	(void)s;
	if (c->kind == TL_K_POOL) {
		ST_CHECK(c->result == (int64_t)c->token);
		atomic_fetch_add(&pool_done, 1);
	}
}

static void test_pool_stats(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	tl_stats_info info;
	tl_stats_shard a, b;
	char err[200];
	int fds = st_begin("stats/pool_stats");

	atomic_store(&pool_done, 0);
	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.on_start = pool_start;
	cfg.on_completion = pool_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_start(rt), 0);
	for (int i = 0; i < 500 && atomic_load(&pool_done) < 4; i++)
		usleep(2000);
	CU_ASSERT_EQUAL(atomic_load(&pool_done), 4);
	usleep(20000);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid(), err, sizeof err), 0);
	CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
	CU_ASSERT_TRUE(info.flags & TL_STATS_F_POOL);
	CU_ASSERT_EQUAL(tl_stats_read(r, 0, &a), 0);
	CU_ASSERT_EQUAL(tl_stats_read(r, 1, &b), 0);
	CU_ASSERT_EQUAL(a.pool_submitted, 4);
	CU_ASSERT_EQUAL(a.pool_completed, 4);
	CU_ASSERT_EQUAL(a.pool_refused, 0);
	CU_ASSERT_EQUAL(a.pool_in_flight, 0);
	CU_ASSERT_TRUE(a.pool_run_ns >= 4 * 2000000ull);
	CU_ASSERT_TRUE(a.node_threads > 0);
	CU_ASSERT_EQUAL(a.completions[TL_K_POOL], 4);
	CU_ASSERT_EQUAL(b.pool_submitted, 0);
	tl_stats_close(r);
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	/* The pool is process-wide; stop it so its threads' descriptors (if
	 * any) do not count against this test. */
	CU_ASSERT_EQUAL(tl_pool_shutdown(), 0);
	st_end(fds);
}

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("stats", NULL, NULL);
	st_add(s, "region_mode", test_region_mode);
	st_add(s, "reader_checks", test_reader_checks);
	st_add(s, "live_values", test_live_values);
	st_add(s, "pool_stats", test_pool_stats);
	return st_run();
}
