/* tests/test_fallback.c: with io_uring_setup refused by seccomp, the default driver falls back to epoll (and tells why), a forced io_uring fails clearly, a DPDK driver that cannot start says why, and a process never mixes drivers. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include "tl_config.h"
#include <sys/syscall.h>
#include <sys/wait.h>
#include <CUnit/Basic.h>
#include "harness.h"

/*
 * Each case runs in a child process, because a seccomp filter cannot be
 * removed and the process's driver is chosen once. The child reports through
 * its exit status (0, or the line of the first check that failed) and its
 * stderr, which the parent captures: the library must print nothing there.
 */

#if defined(__x86_64__)
#define AUDIT_ARCH_HERE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_HERE AUDIT_ARCH_AARCH64
#endif

#ifdef AUDIT_ARCH_HERE

/* Make io_uring_setup fail with EPERM, as a container's seccomp profile
 * does; every other system call is allowed. */
static int refuse_io_uring(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_HERE, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return -errno;
	/* The filter works: the system call itself now says EPERM. */
	if (syscall(__NR_io_uring_setup, 4, NULL) != -1 || errno != EPERM)
		return -EINVAL;
	return 0;
}

/* ---- in the child ---- */

/* A failed CHECK returns the child's exit code: the line (mod 256, never 0),
 * which the parent reports. */
#undef CHECK_FAILED
#define CHECK_FAILED(...) return __LINE__ & 0xff ? __LINE__ & 0xff : 1

/* Every completion the child's loop returned, so that a wait for one op
 * does not lose another that came in the same turn. */
static tl_completion seen[256];
static int nseen;

static const tl_completion *find_term(tl_op op)
{
	for (int i = 0; i < nseen; i++)
		if (seen[i].op.v == op.v && (seen[i].flags & TL_F_TERMINAL))
			return &seen[i];
	return NULL;
}

/* Turn l until op's terminal completion came (1 s at most); it goes to *out. */
static int wait_op(tl_loop *l, tl_op op, tl_completion *out)
{
	uint64_t dl = h_wall_ns() + 1000 * H_MS;
	for (;;) {
		const tl_completion *c = find_term(op);
		if (c) {
			*out = *c;
			return 0;
		}
		if (h_wall_ns() >= dl || nseen > 200)
			return -ETIMEDOUT;
		int n = tl_turn(l, 10 * (int64_t)H_MS, &seen[nseen], 16, NULL);
		if (n < 0)
			return n;
		nseen += n;
	}
}

static int close_wait(tl_loop *l, tl_handle h)
{
	if (tl_close(l, h, 0) < 0)
		return -1;
	uint64_t dl = h_wall_ns() + 1000 * H_MS;
	while (h_wall_ns() < dl) {
		tl_completion c[16];
		int n = tl_turn(l, 10 * (int64_t)H_MS, c, 16, NULL);
		for (int i = 0; i < n; i++)
			if (c[i].kind == TL_K_CLOSED && c[i].handle.v == h.v)
				return 0;
	}
	return -1;
}

/* The default driver under the filter: epoll, and an echo on one loop. */
static int child_default(void)
{
	unsetenv("TL_DRIVER");
	CHECK(refuse_io_uring() == 0);
	int fds = h_fd_count();
	tl_driver_info info;
	tl_driver_info_get(&info);
	CHECK(info.how == TL_HOW_NONE && info.kind == TL_DRIVER_DEFAULT);
	tl_loop *l = NULL;
	CHECK(tl_loop_new(&l, NULL) == 0);
	CHECK(strcmp(tl_loop_driver(l), "epoll") == 0);
	tl_driver_info_get(&info);
	CHECK(info.how == TL_HOW_FALLBACK && info.kind == TL_DRIVER_EPOLL);
	CHECK(info.uring_error == -EPERM);
	CHECK(strstr(info.reason, "epoll (io_uring unavailable: ") == info.reason);
	CHECK(strstr(info.reason, strerror(EPERM)) != NULL);
	tl_addr a, la;
	tl_addr_parse(&a, "127.0.0.1", 0);
	tl_handle lis, cli, srv;
	tl_op aop, cop, op;
	tl_completion x;
	CHECK(tl_tcp_listen(l, &a, NULL, &lis) == 0);
	CHECK(tl_local_addr(l, lis, &la) == 0);
	CHECK(tl_accept(l, lis, 1, &aop) == 0);
	CHECK(tl_tcp_connect(l, &la, 0, 2, &cli, &cop) == 0);
	CHECK(wait_op(l, cop, &x) == 0 && x.result == 0);
	CHECK(wait_op(l, aop, &x) == 0 && x.result == 0);
	srv = x.u.accept.conn;
	char buf[16] = {0};
	CHECK(tl_write(l, cli, "ping", 4, 3, &op) == 0);
	CHECK(wait_op(l, op, &x) == 0 && x.result == 4);
	CHECK(tl_read(l, srv, buf, sizeof buf, 4, &op) == 0);
	CHECK(wait_op(l, op, &x) == 0 && x.result == 4 && !memcmp(buf, "ping", 4));
	CHECK(tl_write(l, srv, buf, 4, 5, &op) == 0);
	CHECK(wait_op(l, op, &x) == 0 && x.result == 4);
	memset(buf, 0, sizeof buf);
	CHECK(tl_read(l, cli, buf, sizeof buf, 6, &op) == 0);
	CHECK(wait_op(l, op, &x) == 0 && x.result == 4 && !memcmp(buf, "ping", 4));
	CHECK(close_wait(l, srv) == 0);
	CHECK(close_wait(l, cli) == 0);
	CHECK(close_wait(l, lis) == 0);
	CHECK(tl_loop_close(l) == 0);
	CHECK(h_fd_count() == fds);
	return 0;
}

/* io_uring forced (by TL_DRIVER or by the config) under the filter: a clear
 * error, nothing left open. */
static int child_forced(int by_env)
{
	if (by_env)
		setenv("TL_DRIVER", "uring", 1);
	else
		unsetenv("TL_DRIVER");
	CHECK(refuse_io_uring() == 0);
	int fds = h_fd_count();
	tl_config cfg;
	tl_config_init(&cfg);
	if (!by_env)
		cfg.driver = TL_DRIVER_URING;
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, &cfg);
	CHECK(rc == -ENOTSUP);
	CHECK(l == NULL);
	CHECK(h_fd_count() == fds);
	tl_driver_info info;
	tl_driver_info_get(&info);
	CHECK(strstr(info.last_error, "driver uring") == info.last_error);
	CHECK(strstr(info.last_error, by_env ? "forced by TL_DRIVER" : "named by the loop's config"));
	CHECK(strstr(info.last_error, strerror(EPERM)) != NULL);
	/* The process's choice is not made by a failed forced loop. */
	CHECK(info.how == TL_HOW_NONE);
	return 0;
}

/* TL_DRIVER=dpdk: a build without the driver refuses it (-ENOTSUP) and
 * says so; a build with it, given no EAL arguments (TL_DPDK unset),
 * refuses with -EINVAL and names the setting. Nothing is left open. */
static int child_dpdk(int unused)
{
	(void)unused;
	setenv("TL_DRIVER", "dpdk", 1);
	unsetenv("TL_DPDK");
	int fds = h_fd_count();
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, NULL);
	CHECK(l == NULL);
	tl_driver_info info;
	tl_driver_info_get(&info);
#if TL_HAVE_DPDK
	CHECK(rc == -EINVAL);
	CHECK(strstr(info.last_error, "TL_DPDK") != NULL);
#else
	CHECK(rc == -ENOTSUP);
	CHECK(strstr(info.last_error, "-Ddpdk=enabled") != NULL);
#endif
	CHECK(strstr(info.last_error, "driver dpdk (forced by TL_DRIVER)") == info.last_error);
	CHECK(info.how == TL_HOW_NONE);
	CHECK(h_fd_count() == fds);
	return 0;
}

/* TL_DRIVER=iocp on Linux: Windows' driver is refused (-ENOTSUP) with the
 * reason, and nothing is decided or left open. */
static int child_iocp(int unused)
{
	(void)unused;
	setenv("TL_DRIVER", "iocp", 1);
	int fds = h_fd_count();
	tl_loop *l = NULL;
	int rc = tl_loop_new(&l, NULL);
	CHECK(l == NULL);
	CHECK(rc == -ENOTSUP);
	tl_driver_info info;
	tl_driver_info_get(&info);
	CHECK(strstr(info.last_error, "driver iocp (forced by TL_DRIVER)") == info.last_error);
	CHECK(strstr(info.last_error, "IOCP is Windows' driver") != NULL);
	CHECK(info.how == TL_HOW_NONE);
	CHECK(h_fd_count() == fds);
	return 0;
}

/* One driver kind per process (contract 10): the first default loop came up
 * on io_uring; io_uring is refused afterwards (as RLIMIT_MEMLOCK can do for a
 * later shard): the next default loop fails with the driver's error instead
 * of coming up on epoll, and a loop that names epoll is exempt. Returns 77
 * when io_uring is not available here at all. */
static int child_one_kind(int unused)
{
	(void)unused;
	unsetenv("TL_DRIVER");
	tl_loop *first = NULL;
	if (tl_loop_new(&first, NULL) != 0)
		return 1;
	if (strcmp(tl_loop_driver(first), "uring") != 0) {
		tl_loop_destroy(first);
		return 77;
	}
	CHECK(refuse_io_uring() == 0);
	int fds = h_fd_count();
	tl_loop *l = NULL;
	CHECK(tl_loop_new(&l, NULL) == -EPERM);
	CHECK(l == NULL);
	CHECK(h_fd_count() == fds);
	tl_driver_info info;
	tl_driver_info_get(&info);
	CHECK(info.kind == TL_DRIVER_URING && info.how == TL_HOW_DEFAULT);
	CHECK(strstr(info.last_error, "driver uring (the process's driver) could not start"));
	CHECK(strstr(info.last_error, strerror(EPERM)) != NULL);
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_EPOLL;
	CHECK(tl_loop_new(&l, &cfg) == 0);
	CHECK(strcmp(tl_loop_driver(l), "epoll") == 0);
	CHECK(tl_loop_close(l) == 0);
	CHECK(tl_loop_close(first) == 0);
	return 0;
}

/* A second default loop after an epoll fallback is on epoll too. */
static int child_fallback_holds(int unused)
{
	(void)unused;
	unsetenv("TL_DRIVER");
	CHECK(refuse_io_uring() == 0);
	tl_loop *a = NULL, *b = NULL;
	CHECK(tl_loop_new(&a, NULL) == 0);
	CHECK(tl_loop_new(&b, NULL) == 0);
	CHECK(strcmp(tl_loop_driver(a), "epoll") == 0);
	CHECK(strcmp(tl_loop_driver(b), "epoll") == 0);
	CHECK(tl_loop_close(b) == 0);
	CHECK(tl_loop_close(a) == 0);
	return 0;
}

/* ---- in the parent ---- */

/* Run fn in a child with its stderr captured into err (NUL-terminated);
 * returns the child's exit status, or -1. */
static int run_child(int (*fn)(int), int arg, char *err, size_t cap)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], 2);
		close(p[1]);
		_exit(fn(arg));
	}
	close(p[1]);
	size_t n = 0;
	for (;;) {
		ssize_t k = read(p[0], err + n, cap - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == cap - 1)
			break;
	}
	err[n] = 0;
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	fprintf(stderr, "%s", err);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_default(int unused)
{
	(void)unused;
	return child_default();
}

/* The child passed and the library printed nothing on its stderr. */
static void quiet_child(int (*fn)(int), int arg)
{
	int fds = h_begin();
	char err[4096];
	int st = run_child(fn, arg, err, sizeof err);
	if (st == 77) {
		h_skip("io_uring is not available on this host");
	} else {
		H_EQ(st, 0);
		H_TRUE(err[0] == 0, "the library printed on stderr: %s", err);
	}
	h_end(NULL, fds);
}

static void test_default_falls_back(void) { quiet_child(run_default, 0); }
static void test_forced_env_fails(void) { quiet_child(child_forced, 1); }
static void test_forced_config_fails(void) { quiet_child(child_forced, 0); }
static void test_one_kind_per_process(void) { quiet_child(child_one_kind, 0); }
static void test_fallback_holds(void) { quiet_child(child_fallback_holds, 0); }
static void test_dpdk_refused(void) { quiet_child(child_dpdk, 0); }
static void test_iocp_refused(void) { quiet_child(child_iocp, 0); }

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("fallback", NULL, NULL);
	if (!s || !CU_add_test(s, "default_falls_back_to_epoll", test_default_falls_back) ||
	    !CU_add_test(s, "forced_by_env_fails", test_forced_env_fails) ||
	    !CU_add_test(s, "forced_by_config_fails", test_forced_config_fails) ||
	    !CU_add_test(s, "one_kind_per_process", test_one_kind_per_process) ||
	    !CU_add_test(s, "fallback_holds", test_fallback_holds) ||
	    !CU_add_test(s, "dpdk_refused_with_reason", test_dpdk_refused) ||
	    !CU_add_test(s, "iocp_refused_with_reason", test_iocp_refused)) {
		CU_cleanup_registry();
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}

#else

int main(void)
{
	printf("SKIP test_fallback: no seccomp architecture constant for this CPU\n");
	return 77;
}

#endif
