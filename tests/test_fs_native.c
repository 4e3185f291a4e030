/* tests/test_fs_native.c: typed file requests run as io_uring opcodes give the pool path's results. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <CUnit/Basic.h>
#include "turnloop/loop.h"
#include "turnloop/pool.h"
#include "uring.h" /* tl__uring_stats (fs_native), tl__uring_debug (pool twin) */
#include "check.h"

/*
 * Each scenario runs on two io_uring loops: one that takes file requests
 * natively and a twin created with no_fs_native, whose requests run on the
 * blocking pool. Every completion (result, aux, value, stat fields) must be
 * the same on both, and the native loop's fs_native counter proves the
 * requests did not quietly fall back to the pool.
 */

#define WAIT_MS 5000
#define MS 1000000ll


static char tmpdir[256];

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Open descriptors of this process, to see that no open leaks one. */
static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* The descriptor count once it is back to want, or after WAIT_MS: a loop
 * whose pool jobs ran keeps its eventfd until the worker that pushed the
 * last result drops its poster reference, a moment after destroy. */
static int fd_settle(int want)
{
	uint64_t end = wall_ms() + WAIT_MS;
	int n;
	while ((n = fd_count()) != want && wall_ms() < end)
		usleep(1000);
	return n;
}

/* Turn until op's terminal arrives; 1 and *out filled, or 0 after WAIT_MS. */
static int wait_term(tl_loop *l, tl_op op, tl_completion *out)
{
	uint64_t end = wall_ms() + WAIT_MS;
	while (wall_ms() < end) {
		tl_completion v[16];
		int n = tl_turn(l, 10 * MS, v, 16, NULL);
		for (int i = 0; i < n; i++)
			if (v[i].op.v == op.v && (v[i].flags & TL_F_TERMINAL)) {
				*out = v[i];
				return 1;
			}
	}
	CU_FAIL("no terminal completion");
	return 0;
}

/* Submit result r of a request on l and wait for it: its completion, with
 * result -1000 if the submission failed or nothing came. */
static tl_completion fs_wait(tl_loop *l, int r, tl_op op)
{
	tl_completion c;
	memset(&c, 0, sizeof c);
	c.result = -1000;
	CHECK_EQ(r, 0);
	if (r == 0 && wait_term(l, op, &c))
		CHECK_EQ(c.kind, TL_K_FS);
	return c;
}

/* A native loop (native = 1) or its pool-only twin. */
static tl_loop *loop_new(int native)
{
	tl_loop *l = NULL;
	if (!native)
		tl__uring_debug(&(struct tl_uring_debug){.no_fs_native = 1});
	int r = tl_loop_new(&l, NULL);
	tl__uring_debug(NULL);
	CU_ASSERT_EQUAL_FATAL(r, 0);
	return l;
}

static uint64_t fs_native(tl_loop *l)
{
	struct tl_uring_stats st;
	if (tl__uring_stats(l, &st) < 0)
		return 0;
	return st.fs_native;
}

/* What one round trip saw, compared between the two loops. */
struct trace {
	int n;
	int64_t res[32];
	uint64_t val[32];
	uint32_t aux[32];
	char data[32];
	struct stat st, st2;
};

static void rec(struct trace *t, const tl_completion *c)
{
	t->res[t->n] = c->result;
	t->val[t->n] = c->u.pool.value;
	t->aux[t->n] = c->aux;
	t->n++;
}

/* open/write/write/pread/read/fstat/stat/fsync/rename/unlink/mkdir/rmdir/close,
 * with the errors a second unlink/mkdir/open of a missing file give. */
static void round_trip(tl_loop *l, const char *tag, struct trace *t)
{
	char f[512], g[512], sub[512], missing[512];
	snprintf(f, sizeof f, "%s/%s-f", tmpdir, tag);
	snprintf(g, sizeof g, "%s/%s-g", tmpdir, tag);
	snprintf(sub, sizeof sub, "%s/%s-sub", tmpdir, tag);
	snprintf(missing, sizeof missing, "%s/%s-missing", tmpdir, tag);
	tl_op op;
	tl_completion c;
	memset(t, 0, sizeof *t);

	c = fs_wait(l, tl_fs_open(l, f, O_CREAT | O_EXCL | O_RDWR, 0600, 1, &op), op);
	int fd = (int)c.result;
	CU_ASSERT_TRUE(fd >= 0);
	CHECK_EQ(c.u.pool.value, (uint64_t)c.result);
	CHECK_EQ(fcntl(fd, F_GETFD), FD_CLOEXEC);
	t->res[t->n] = c.result >= 0; /* descriptor numbers differ */
	t->aux[t->n++] = c.aux;
	/* Two writes at the current position append; pread then reads it back
	 * from 0 without moving the position, read at the position finds EOF. */
	rec(t, (c = fs_wait(l, tl_fs_write(l, fd, "hello world", 11, 2, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_write(l, fd, "!!", 2, 3, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_pread(l, fd, t->data, 13, 0, 4, &op), op), &c));
	char more[4];
	rec(t, (c = fs_wait(l, tl_fs_read(l, fd, more, sizeof more, 5, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_pwrite(l, fd, "H", 1, 0, 6, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_fstat(l, fd, &t->st, 7, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_stat(l, f, &t->st2, 8, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_fsync(l, fd, 9, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_rename(l, f, g, 10, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_stat(l, f, &t->st2, 11, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_unlink(l, g, 12, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_unlink(l, g, 13, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_mkdir(l, sub, 0700, 14, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_mkdir(l, sub, 0700, 15, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_rmdir(l, sub, 16, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_rmdir(l, sub, 17, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_open(l, missing, O_RDONLY, 0, 18, &op), op), &c));
	rec(t, (c = fs_wait(l, tl_fs_close(l, fd, 19, &op), op), &c));
}

static void test_round_trip_matches_pool(void)
{
	int fds = fd_count(); /* before the loops' own descriptors */
	tl_loop *nat = loop_new(1), *pool = loop_new(0);
	struct trace a, b;
	round_trip(nat, "n", &a);
	round_trip(pool, "p", &b);
	/* Every request but readdir ran natively on one loop, none on the other. */
	CHECK_EQ(fs_native(nat), (uint64_t)a.n);
	CHECK_EQ(fs_native(pool), 0);
	CHECK_EQ(a.n, b.n);
	for (int i = 0; i < a.n && i < b.n; i++) {
		if (a.res[i] != b.res[i] || a.val[i] != b.val[i] || a.aux[i] != b.aux[i])
			fprintf(stderr, "  step %d: native %lld/%llu/%u, pool %lld/%llu/%u\n", i,
				(long long)a.res[i], (unsigned long long)a.val[i], a.aux[i],
				(long long)b.res[i], (unsigned long long)b.val[i], b.aux[i]);
		CHECK_EQ(a.res[i], b.res[i]);
		CHECK_EQ(a.val[i], b.val[i]);
		CHECK_EQ(a.aux[i], b.aux[i]);
	}
	/* The expected values themselves (the pool's are those of the libc calls). */
	CHECK_EQ(a.res[1], 11);
	CHECK_EQ(a.res[3], 13);
	CHECK_EQ(a.res[4], 0);
	CHECK_EQ(a.res[10], -ENOENT);
	CHECK_EQ(a.res[12], -ENOENT);
	CHECK_EQ(a.res[14], -EEXIST);
	CHECK_EQ(a.res[16], -ENOENT);
	CHECK_EQ(a.res[17], -ENOENT);
	CU_ASSERT_TRUE(!memcmp(a.data, "hello world!!", 13));
	CU_ASSERT_TRUE(!memcmp(b.data, "hello world!!", 13));
	/* fstat through statx converted as fstat(2) fills it. */
	CHECK_EQ(a.st.st_size, 13);
	CHECK_EQ(a.st.st_mode, S_IFREG | 0600);
	CHECK_EQ(a.st.st_nlink, 1);
	CHECK_EQ(a.st.st_uid, getuid());
	CHECK_EQ(a.st.st_ino, a.st2.st_ino);
	CHECK_EQ(a.st.st_dev, a.st2.st_dev);
	CHECK_EQ(a.st.st_dev, b.st.st_dev);
	CHECK_EQ(a.st.st_blksize, b.st.st_blksize);
	CHECK_EQ(a.st.st_blocks, b.st.st_blocks);
	CU_ASSERT_TRUE(a.st.st_mtim.tv_sec > 0);
	tl_loop_destroy(nat);
	tl_loop_destroy(pool);
	CHECK_EQ(fd_settle(fds), fds);
}

/* Cancelled opens never hand out a descriptor: whether ASYNC_CANCEL caught
 * the open or it completed first (the driver closes the descriptor then),
 * the host sees -ECANCELED and /proc/self/fd is back where it was. */
static void test_cancelled_open_exposes_no_fd(void)
{
	int base = fd_count();
	tl_loop *l = loop_new(1);
	char f[512];
	snprintf(f, sizeof f, "%s/c", tmpdir);
	int w = open(f, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	CU_ASSERT_TRUE(w >= 0);
	close(w);
	int before = fd_count();
	uint64_t n0 = fs_native(l);
	for (int i = 0; i < 64; i++) {
		tl_op op;
		/* Alternate an open the kernel finishes inline with one that
		 * goes to its worker threads (O_CREAT never completes inline). */
		int flags = i & 1 ? O_RDONLY : O_RDWR | O_CREAT;
		CHECK_EQ(tl_fs_open(l, f, flags, 0600, (uint64_t)i, &op), 0);
		if (i & 2) /* let the SQE reach the kernel first, sometimes */
			tl_turn(l, 0, NULL, 0, NULL);
		tl_cancel(l, op);
		tl_completion c;
		if (wait_term(l, op, &c)) {
			CHECK_EQ(c.result, -ECANCELED);
			CU_ASSERT_TRUE((int64_t)c.u.pool.value < 0);
			CHECK_EQ(c.aux, TL_FS_OPEN);
		}
	}
	CHECK_EQ(fs_native(l) - n0, 64);
	CHECK_EQ(fd_count(), before);
	/* Opens the kernel finished inline, ahead of the ASYNC_CANCEL behind
	 * them, took the driver's close path. */
	struct tl_uring_stats st;
	CHECK_EQ(tl__uring_stats(l, &st), 0);
	CU_ASSERT_TRUE(st.fs_open_closed > 0);
	/* Destroyed with opens in flight: destroy waits for them and closes
	 * what they opened. */
	for (int i = 0; i < 8; i++) {
		tl_op op;
		CHECK_EQ(tl_fs_open(l, f, O_RDONLY, 0, 100, &op), 0);
	}
	tl_turn(l, 0, NULL, 0, NULL);
	tl_loop_destroy(l);
	CHECK_EQ(fd_settle(base), base);
	unlink(f);
}

/* A blocking write-side open of a FIFO waits for a reader, as open(2) does:
 * the kernel's -ENXIO (io_uring tries O_NONBLOCK first) sends it to the pool
 * through its reservation, under the same op. With O_NONBLOCK the -ENXIO is
 * the real answer. */
static void test_fifo_open_waits(void)
{
	int base = fd_count();
	tl_loop *l = loop_new(1);
	char ff[512];
	snprintf(ff, sizeof ff, "%s/fifo", tmpdir);
	CU_ASSERT_EQUAL_FATAL(mkfifo(ff, 0600), 0);
	tl_op op;
	tl_completion c = fs_wait(l, tl_fs_open(l, ff, O_WRONLY | O_NONBLOCK, 0, 1, &op), op);
	CHECK_EQ(c.result, -ENXIO);
	CHECK_EQ(tl_fs_open(l, ff, O_WRONLY, 0, 2, &op), 0);
	uint64_t end = wall_ms() + 100;
	int early = 0;
	while (wall_ms() < end) {
		tl_completion v[4];
		int n = tl_turn(l, 10 * MS, v, 4, NULL);
		for (int i = 0; i < n; i++)
			early |= v[i].op.v == op.v;
	}
	CHECK_EQ(early, 0); /* still waiting for a reader */
	int r = open(ff, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	CU_ASSERT_TRUE(r >= 0);
	if (wait_term(l, op, &c)) {
		CU_ASSERT_TRUE(c.result >= 0);
		CHECK_EQ(c.aux, TL_FS_OPEN);
		if (c.result >= 0)
			close((int)c.result);
	}
	close(r);
	/* Cancelled while it waits on the pool: no descriptor either. */
	CHECK_EQ(tl_fs_open(l, ff, O_WRONLY, 0, 3, &op), 0);
	for (int i = 0; i < 5; i++)
		tl_turn(l, 10 * MS, NULL, 0, NULL);
	CHECK_EQ(tl_cancel(l, op), 0);
	r = open(ff, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (wait_term(l, op, &c))
		CHECK_EQ(c.result, -ECANCELED);
	close(r);
	tl_loop_destroy(l);
	unlink(ff);
	CHECK_EQ(fd_settle(base), base);
}

/* readdir has no opcode: it stays on the pool, and works. */
static void test_readdir_on_pool(void)
{
	tl_loop *l = loop_new(1);
	uint64_t n0 = fs_native(l);
	tl_dirent ents[4];
	tl_op op;
	tl_completion c = fs_wait(l, tl_fs_readdir(l, tmpdir, ents, 4, 1, &op), op);
	CU_ASSERT_TRUE(c.result >= 0);
	CHECK_EQ(fs_native(l), n0);
	tl_loop_destroy(l);
}

int main(void)
{
	const char *drv = getenv("TL_DRIVER");
	if (!drv || strcmp(drv, "uring") != 0) {
		fprintf(stderr, "test_fs_native: needs TL_DRIVER=uring\n");
		return 77;
	}
	snprintf(tmpdir, sizeof tmpdir, "/tmp/tl_fsn_XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	{
		/* No io_uring here (a sandbox): nothing to test. */
		tl_loop *l = NULL;
		if (tl_loop_new(&l, NULL) < 0) {
			rmdir(tmpdir);
			return 77;
		}
		struct tl_uring_stats st;
		int r = tl__uring_stats(l, &st);
		tl_loop_destroy(l);
		if (r < 0) {
			rmdir(tmpdir);
			return 77;
		}
	}
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("fs_native", NULL, NULL);
	if (!s || !CU_add_test(s, "round_trip_matches_pool", test_round_trip_matches_pool) ||
	    !CU_add_test(s, "cancelled_open_exposes_no_fd", test_cancelled_open_exposes_no_fd) ||
	    !CU_add_test(s, "fifo_open_waits", test_fifo_open_waits) ||
	    !CU_add_test(s, "readdir_on_pool", test_readdir_on_pool))
		return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned fails = CU_get_number_of_failures();
	CU_cleanup_registry();
	rmdir(tmpdir);
	tl_pool_shutdown();
	return fails ? 1 : 0;
}
