/* tests/test_echo_shards.c: tlecho --shards 2 serves on both shards, as its live stats show from outside the process. */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "shard_test.h"

/* Set by main from argv[1]: the tlecho to run. */
static const char *tlecho_path;

static int connect_to(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A loopback port that is free now (0 if none could be had). */
static uint16_t free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint16_t port = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return 0;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* One connection: send a message, read the echo, close. 0 or -1. */
static int echo_once(uint16_t port, int i)
{
	char out[32], in[32];
	int fd = connect_to(port), n, got = 0;

	if (fd < 0)
		return -1;
	n = snprintf(out, sizeof out, "hello %d", i);
	if (write(fd, out, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	while (got < n) {
		ssize_t r = read(fd, in + got, (size_t)(n - got));

		if (r <= 0)
			break;
		got += (int)r;
	}
	close(fd);
	return got == n && memcmp(in, out, (size_t)n) == 0 ? 0 : -1;
}

/* The value slot of the program's counter called name, or -1. */
static int find_counter(tl_stats_reader *r, const tl_stats_info *info, const char *name)
{
	tl_stats_family f;

	for (uint32_t i = 0; i < info->families; i++)
		if (tl_stats_family_get(r, i, &f) == 0 && !strcmp(f.name, name))
			return (int)f.first;
	return -1;
}

static void test_both_shards_serve(void)
{
	int fds = st_begin("echo_shards/both_shards_serve");
	uint16_t port = 0;
	char portstr[16], err[200];
	tl_stats_reader *r = NULL;
	tl_stats_info info;
	tl_stats_shard st[2];
	uint64_t vals[2][TL_STATS_VALUES_MAX];
	int status, ok = 0, idx, rc = -1;
	pid_t pid = -1;

	/* A port the kernel just found free; if another process takes it
	 * before tlecho binds it, tlecho exits and the next port is tried
	 * (a fixed port collided with other programs' connections). */
	for (int attempt = 0; attempt < 5 && !ok; attempt++) {
		port = free_port();
		CU_ASSERT_TRUE_FATAL(port != 0);
		snprintf(portstr, sizeof portstr, "%u", port);
		pid = fork();
		CU_ASSERT_TRUE_FATAL(pid >= 0);
		if (pid == 0) {
			execl(tlecho_path, tlecho_path, "-p", portstr, "--shards", "2", (char *)NULL);
			_exit(127);
		}
		/* Wait until it listens (or has exited). */
		for (int i = 0; i < 500 && !ok; i++) {
			if (waitpid(pid, &status, WNOHANG) == pid)
				break;
			int fd = connect_to(port);
			if (fd >= 0) {
				close(fd);
				ok = 1;
			} else {
				usleep(10000);
			}
		}
		if (!ok) { /* exited (reaped above) or never listened */
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		}
	}
	CU_ASSERT_TRUE(ok);
	/* One shard listening is not both: the runtime says RUNNING once every
	 * shard has set up (its listener made); connections made before that
	 * all go to the first shard (seen on a loaded machine). */
	int running = 0;
	for (int i = 0; ok && i < 500 && !running; i++) {
		if (tl_stats_open(&r, pid) == 0) {
			running = tl_stats_info_get(r, &info) == 0 && info.state == TL_STATS_RUNNING;
			tl_stats_close(r);
			r = NULL;
		}
		if (!running)
			usleep(10000);
	}
	CU_ASSERT_TRUE(running);
	ok = ok && running;
	/* The kernel picks a listener by a hash of the connection's
	 * addresses: 200 connections leave each shard out with odds 2^-199. */
	for (int i = 0; ok && i < 200; i++)
		if (echo_once(port, i) < 0) {
			fprintf(stderr, "  echo %d failed\n", i);
			ok = 0;
		}
	CU_ASSERT_TRUE(ok);
	usleep(50000); /* a parked shard publishes before it parks */
	if (ok)
		rc = tl_stats_open(&r, pid);
	if (rc < 0)
		fprintf(stderr, "  stats: %s\n", tl_error_detail());
	CU_ASSERT_EQUAL(rc, 0);
	if (rc == 0) {
		CU_ASSERT_EQUAL(tl_stats_info_get(r, &info), 0);
		CU_ASSERT_EQUAL(info.shards, 2);
		CU_ASSERT_EQUAL(info.state, TL_STATS_RUNNING);
		idx = find_counter(r, &info, "conns");
		CU_ASSERT_TRUE(idx >= 0);
		for (uint32_t i = 0; i < 2 && idx >= 0; i++) {
			CU_ASSERT_EQUAL(tl_stats_shard_get(r, i, &st[i], vals[i], info.values), 0);
			printf("\n  shard %u (cpu %d): %llu connections, %llu accepts, %llu turns",
			       i, st[i].cpu, (unsigned long long)vals[i][idx],
			       (unsigned long long)st[i].completions[TL_K_ACCEPT],
			       (unsigned long long)st[i].turns);
			CU_ASSERT_TRUE(vals[i][idx] > 0);
			/* Per shard, not only in sum: the counter in shard i's
			 * slots is the connections shard i accepted, as its own
			 * record counts them (published together). */
			CU_ASSERT_EQUAL(vals[i][idx], st[i].completions[TL_K_ACCEPT]);
		}
		if (idx >= 0)
			CU_ASSERT_EQUAL(vals[0][idx] + vals[1][idx], 201);
		printf("\n");
		tl_stats_close(r);
	}
	kill(pid, SIGTERM);
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Its region is gone with it, and so is the process. */
	snprintf(err, sizeof err, "/dev/shm/turnloop-%u/%d", (unsigned)geteuid(), (int)pid);
	CU_ASSERT_EQUAL(access(err, F_OK), -1);
	CU_ASSERT_EQUAL(tl_stats_open(&r, pid), -ESRCH);
	st_end(fds);
}

int main(int argc, char **argv)
{
	CU_pSuite s;

	if (argc < 2) {
		fprintf(stderr, "usage: test_echo_shards PATH-TO-TLECHO\n");
		return 2;
	}
	tlecho_path = argv[1];
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("echo_shards", NULL, NULL);
	st_add(s, "both_shards_serve", test_both_shards_serve);
	return st_run();
}
