/* tests/test_tools.c: tlecho and tlload as a user runs them: the port tlecho refuses to share, the simulation driver it refuses, stream ends it must never lose, tlload's one line for a closed port. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <CUnit/Basic.h>
#include "harness.h"

static const char *tlecho_path, *tlload_path;

/* A tlecho child and the end of a pipe carrying its stderr. */
struct child {
	pid_t pid;
	int err; /* read end of its stderr, or -1 */
};

/* A TCP port that was free a moment ago, below the ephemeral range (32768
 * and up) so that no other process's outgoing connection takes it in the
 * meantime; the same k gives the same port within a run. */
static uint16_t ports[8];
static uint16_t test_port(int k)
{
	if (ports[k])
		return ports[k];
	for (int tries = 0; tries < 1000 && !ports[k]; tries++) {
		uint16_t p = (uint16_t)(20000 + (getpid() * 131 + k * 1009 + tries * 7) % 12000);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0)
			ports[k] = p;
		if (fd >= 0)
			close(fd);
	}
	return ports[k];
}

/* Start prog with args (NULL-terminated, after the program name). */
static struct child start_prog(const char *prog, const char *const *args, const char *env_driver)
{
	struct child c = {.pid = -1, .err = -1};
	const char *argv[16];
	int n = 0, p[2];
	argv[n++] = prog;
	for (; *args && n < 15; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0)
		return c;
	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		dup2(p[1], 2);
		if (env_driver)
			setenv("TL_DRIVER", env_driver, 1);
		else
			unsetenv("TL_DRIVER");
		execv(prog, (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	c.err = p[0];
	return c;
}

static struct child start(const char *const *args, const char *env_driver)
{
	return start_prog(tlecho_path, args, env_driver);
}

/* Read what the child wrote on stderr until it closes it or ms pass. */
static size_t read_err(struct child *c, char *buf, size_t cap, int ms)
{
	size_t n = 0;
	uint64_t end = h_wall_ns() + (uint64_t)ms * H_MS;
	while (n + 1 < cap) {
		int64_t left = (int64_t)(end - h_wall_ns()) / (int64_t)H_MS;
		if (left <= 0)
			break;
		struct pollfd pf = {.fd = c->err, .events = POLLIN};
		if (poll(&pf, 1, (int)left) <= 0)
			break;
		ssize_t k = read(c->err, buf + n, cap - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	buf[n] = 0;
	return n;
}

/* Read the child's stderr until it holds needle (1) or ms pass or it
 * closes (0). What was read stays in buf. */
static int wait_said(struct child *c, char *buf, size_t cap, const char *needle, int ms)
{
	size_t n = 0;
	uint64_t end = h_wall_ns() + (uint64_t)ms * H_MS;
	buf[0] = 0;
	while (!strstr(buf, needle) && n + 1 < cap) {
		int64_t left = (int64_t)(end - h_wall_ns()) / (int64_t)H_MS;
		if (left <= 0)
			return 0;
		struct pollfd pf = {.fd = c->err, .events = POLLIN};
		if (poll(&pf, 1, (int)left) <= 0)
			return 0;
		ssize_t k = read(c->err, buf + n, cap - 1 - n);
		if (k <= 0)
			return 0;
		n += (size_t)k;
		buf[n] = 0;
	}
	return strstr(buf, needle) != NULL;
}

/* Wait for the child's exit (ms at most; then it is killed): its status. */
static int wait_exit(struct child *c, int ms)
{
	int st = 0;
	for (int i = 0; i < ms / 10; i++) {
		pid_t r = waitpid(c->pid, &st, WNOHANG);
		if (r == c->pid)
			goto done;
		h_sleep_ms(10);
	}
	kill(c->pid, SIGKILL);
	waitpid(c->pid, &st, 0);
	st = -1;
done:
	if (c->err >= 0)
		close(c->err);
	c->err = -1;
	return st < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void stop(struct child *c)
{
	kill(c->pid, SIGTERM);
	H_EQ(wait_exit(c, 5000), 0);
}

static int connect_to(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Wait until something accepts on port: 1, or 0 after 3 s. */
static int wait_listening(uint16_t port)
{
	for (int i = 0; i < 300; i++) {
		int fd = connect_to(port);
		if (fd >= 0) {
			close(fd);
			return 1;
		}
		h_sleep_ms(10);
	}
	return 0;
}

/* Count the lines of s. */
static int lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* A second tlecho on a port another process listens on refuses to start,
 * with one line and a non-zero status, instead of taking a share of the
 * first one's connections. */
static void test_port_in_use_refused(void)
{
	int fds = h_begin();
	char port[16], buf[1024];
	snprintf(port, sizeof port, "%u", test_port(1));
	const char *a1[] = {"-p", port, NULL};
	struct child first = start(a1, NULL);
	H_TRUE_FATAL(wait_listening(test_port(1)), "tlecho did not listen");
	const char *a2[] = {"-p", port, "--shards", "1", NULL};
	struct child second = start(a2, NULL);
	read_err(&second, buf, sizeof buf, 10000 * h_slow());
	H_EQ(wait_exit(&second, 3000), 1);
	H_TRUE(strstr(buf, "already in use by another process") != NULL, "said: %s", buf);
	H_EQ(lines(buf), 1);
	stop(&first);
	h_end(NULL, fds);
}

/* With --reuseport on both, two tlechos share a port, and the kernel gives
 * each some of the connections. */
static void test_reuseport_shares(void)
{
	int fds = h_begin();
	char port[16];
	snprintf(port, sizeof port, "%u", test_port(2));
	const char *a[] = {"-p", port, "--reuseport", NULL};
	struct child one = start(a, NULL);
	H_TRUE_FATAL(wait_listening(test_port(2)), "first tlecho did not listen");
	struct child two = start(a, NULL);
	/* The second must be listening before the clients come (a fixed wait
	 * was too short on a busy machine: it got none of them). */
	char said[1024];
	H_TRUE(wait_said(&two, said, sizeof said, "listening on", 10000 * h_slow()),
	       "the second tlecho did not say it listens: %s", said);
	H_EQ(waitpid(two.pid, NULL, WNOHANG), 0); /* still running */
	for (int i = 0; i < 64; i++) {
		int fd = connect_to(test_port(2));
		H_TRUE(fd >= 0, "connect %d failed", i);
		if (fd >= 0) {
			char c = 'x', back = 0;
			H_EQ(write(fd, &c, 1), 1);
			H_EQ(read(fd, &back, 1), 1);
			H_EQ(back, 'x');
			close(fd);
		}
	}
	/* Both served: each counts its connections at exit. */
	char b1[1024], b2[1024];
	kill(one.pid, SIGTERM);
	kill(two.pid, SIGTERM);
	read_err(&one, b1, sizeof b1, 10000 * h_slow());
	read_err(&two, b2, sizeof b2, 10000 * h_slow());
	H_EQ(wait_exit(&one, 3000), 0);
	H_EQ(wait_exit(&two, 3000), 0);
	unsigned long long n1 = 0, n2 = 0;
	const char *s1 = strstr(b1, "tlecho: "), *s2;
	while (s1 && (s2 = strstr(s1 + 1, "tlecho: ")))
		s1 = s2;
	if (s1)
		sscanf(s1, "tlecho: %llu connections", &n1);
	s1 = strstr(b2, "tlecho: ");
	while (s1 && (s2 = strstr(s1 + 1, "tlecho: ")))
		s1 = s2;
	if (s1)
		sscanf(s1, "tlecho: %llu connections", &n2);
	H_EQ(n1 + n2, 64 + 1); /* and the probe of wait_listening */
	H_TRUE(n1 > 0 && n2 > 0, "one instance got nothing: %llu and %llu", n1, n2);
	h_end(NULL, fds);
}

/* TL_DRIVER=sim: a server on the simulation driver would listen where no
 * client can reach it; tlecho (one loop, and sharded) refuses to start. */
static void test_sim_driver_refused(void)
{
	int fds = h_begin();
	char port[16], buf[1024];
	snprintf(port, sizeof port, "%u", test_port(3));
	const char *single[] = {"-p", port, NULL};
	const char *sharded[] = {"-p", port, "--shards", "1", NULL};
	const char *const *cases[] = {single, sharded};
	for (int k = 0; k < 2; k++) {
		struct child c = start(cases[k], "sim");
		read_err(&c, buf, sizeof buf, 10000 * h_slow());
		H_EQ(wait_exit(&c, 3000), 1);
		H_TRUE(strstr(buf, "reaches no network") != NULL, "said: %s", buf);
	}
	h_end(NULL, fds);
}

/* The peer sends one byte and its FIN at once, then waits for tlecho's EOF:
 * every try gets the byte back and then EOF (the epoll driver used to lose
 * the FIN that came in the same edge as the data, in 20-70% of tries). */
static void eof_after_byte(const char *driver)
{
	int fds = h_begin();
	char port[16];
	snprintf(port, sizeof port, "%u", test_port(4));
	const char *a[] = {"-p", port, "--driver", driver, NULL};
	struct child c = start(a, NULL);
	H_TRUE_FATAL(wait_listening(test_port(4)), "tlecho did not listen");
	int lost = 0;
	for (int i = 0; i < 100; i++) {
		int fd = connect_to(test_port(4));
		H_TRUE_FATAL(fd >= 0, "connect failed");
		char ch = 'e';
		H_EQ(write(fd, &ch, 1), 1);
		shutdown(fd, SHUT_WR);
		char got[4];
		size_t n = 0;
		int eof = 0;
		for (;;) {
			struct pollfd pf = {.fd = fd, .events = POLLIN};
			if (poll(&pf, 1, 1000 * h_slow()) <= 0)
				break;
			ssize_t k = read(fd, got + n, sizeof got - n);
			if (k == 0) {
				eof = 1;
				break;
			}
			if (k < 0)
				break;
			n += (size_t)k;
		}
		if (!eof || n != 1)
			lost++;
		close(fd);
	}
	H_EQ(lost, 0);
	stop(&c);
	h_end(NULL, fds);
}

/* tlload against a port nobody listens on: every connect fails, and it says
 * so in one line (not one per connection) and exits non-zero. */
static void test_tlload_closed_port(void)
{
	int fds = h_begin();
	char port[16], buf[4096];
	/* A port just bound and closed again is free, and nobody listens. */
	snprintf(port, sizeof port, "%u", test_port(5));
	const char *args[] = {"-p", port, "-c", "50", "-d", "1", NULL};
	struct child c = start_prog(tlload_path, args, NULL);
	read_err(&c, buf, sizeof buf, 10000 * h_slow());
	H_EQ(wait_exit(&c, 5000), 1);
	H_EQ(lines(buf), 1);
	H_TRUE(strstr(buf, "50 of 50 connects failed") != NULL, "said: %s", buf);
	h_end(NULL, fds);
}

/* A client that sends and never reads (a tiny receive buffer, so tlecho's
 * replies back up at once) writes from a thread while a second client does
 * 200 ping-pong round trips: each must come back within a second, on each
 * driver. Without per-stream caps the slow client's queued replies held all
 * of tlecho's 4096 leases and the second client got nothing. */
struct flood {
	int fd;
	volatile int stop;
	uint64_t sent;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	static char buf[65536];
	memset(buf, 'f', sizeof buf);
	while (!f->stop) {
		ssize_t k = send(f->fd, buf, sizeof buf, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k > 0)
			f->sent += (uint64_t)k;
		else
			h_sleep_ms(1);
	}
	return NULL;
}

static void slow_reader(const char *driver)
{
	int fds = h_begin();
	char port[16];
	snprintf(port, sizeof port, "%u", test_port(6));
	const char *a[] = {"-p", port, "--driver", driver, NULL};
	struct child c = start(a, NULL);
	H_TRUE_FATAL(wait_listening(test_port(6)), "tlecho did not listen");
	struct flood f = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
	int small = 4096;
	setsockopt(f.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(test_port(6))};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	H_EQ_FATAL(connect(f.fd, (struct sockaddr *)&sa, sizeof sa), 0);
	pthread_t t;
	H_EQ_FATAL(pthread_create(&t, NULL, flood_main, &f), 0);
	h_sleep_ms(500 * h_slow()); /* its replies back up, tlecho's leases would go */
	int fd = connect_to(test_port(6));
	H_TRUE_FATAL(fd >= 0, "connect");
	int done = 0;
	uint64_t worst = 0;
	for (int i = 0; i < 200; i++) {
		char msg[64], got[64];
		memset(msg, 'a' + i % 26, sizeof msg);
		uint64_t t0 = h_wall_ns();
		if (write(fd, msg, sizeof msg) != (ssize_t)sizeof msg)
			break;
		size_t n = 0;
		while (n < sizeof got) {
			struct pollfd pf = {.fd = fd, .events = POLLIN};
			if (poll(&pf, 1, 1000 * h_slow()) <= 0)
				break;
			ssize_t k = read(fd, got + n, sizeof got - n);
			if (k <= 0)
				break;
			n += (size_t)k;
		}
		if (n != sizeof got || memcmp(got, msg, sizeof msg))
			break;
		uint64_t dt = h_wall_ns() - t0;
		worst = dt > worst ? dt : worst;
		done++;
	}
	f.stop = 1;
	pthread_join(t, NULL);
	H_EQ(done, 200);
	H_TRUE(f.sent > (64u << 20) / 16, "the slow client sent only %llu bytes",
	       (unsigned long long)f.sent);
	printf("\n  %s: slow client sent %.1f MB; 200 round trips beside it, the slowest %.2f ms\n",
	       driver, (double)f.sent / 1e6, (double)worst / 1e6);
	close(fd);
	close(f.fd);
	stop(&c);
	h_end(NULL, fds);
}

static void test_slow_reader_epoll(void) { slow_reader("epoll"); }
static void test_slow_reader_uring(void) { slow_reader("uring"); }

static void test_eof_after_byte_epoll(void) { eof_after_byte("epoll"); }
static void test_eof_after_byte_uring(void) { eof_after_byte("uring"); }

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_tools PATH-TO-TLECHO PATH-TO-TLLOAD\n");
		return 2;
	}
	tlecho_path = argv[1];
	tlload_path = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	h_init();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("tools", NULL, NULL);
	if (!s || !CU_add_test(s, "port_in_use_refused", test_port_in_use_refused) ||
	    !CU_add_test(s, "reuseport_shares", test_reuseport_shares) ||
	    !CU_add_test(s, "sim_driver_refused", test_sim_driver_refused) ||
	    !CU_add_test(s, "eof_after_byte_epoll", test_eof_after_byte_epoll) ||
	    !CU_add_test(s, "eof_after_byte_uring", test_eof_after_byte_uring) ||
	    !CU_add_test(s, "tlload_closed_port", test_tlload_closed_port) ||
	    !CU_add_test(s, "slow_reader_epoll", test_slow_reader_epoll) ||
	    !CU_add_test(s, "slow_reader_uring", test_slow_reader_uring)) {
		CU_cleanup_registry();
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
