/* tests/test_tlhttp.c: the tlhttp server driven over loopback by real clients (curl, wrk, h2load, raw sockets): whole replies compared byte by byte, pipelining, files, ranges, 304s, every refusal, escapes, timeouts, stats, the access log, descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "shard_test.h"
#include "tlhttp/date.h"

/*
 * Usage: test_tlhttp TLHTTP TLSHARD [CERTS]: CERTS is tests/tls-certs.sh,
 * given by builds with TLS (the https case runs then). Every test starts its own tlhttp (one
 * shard, on a port nothing listens on) and stops it with SIGTERM, checking
 * that it exits 0 and that its descriptor count is back to what it was
 * once it listened. TLHTTP_TEST_WRAP, if set, is a command put in front of
 * tlhttp (valgrind, say), split at spaces. The clients are the programs
 * themselves; a missing one is a failure, not a skip (tools/setup.sh
 * installs them).
 */

static const char *tlhttp_path, *tlshard_path;
static char tree[256];  /* the served directory */
static char outside[300]; /* a file beside it */

/* ---- processes ---- */

struct srv {
	pid_t pid;
	uint16_t port;
	int fds; /* its descriptors once it listens */
	char err[300];
};

static uint16_t free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t l = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint16_t p = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		p = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return p;
}

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

static int proc_fds(pid_t pid)
{
	char path[64];
	DIR *d;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Start tlhttp --listen 127.0.0.1:PORT --shards 1 --file-cache-idle 100ms and the NULL-ended
 * arguments; 0 once it accepts connections. */
static int srv_start(struct srv *s, ...)
{
	char listen[32];
	const char *argv[64];
	int argc = 0;
	char wrapbuf[512];
	va_list ap;

	memset(s, 0, sizeof *s);
	s->port = free_port();
	snprintf(listen, sizeof listen, "127.0.0.1:%u", s->port);
	snprintf(s->err, sizeof s->err, "%s/../tlhttp-%d-%u.err", tree, (int)getpid(), s->port);
	const char *wrap = getenv("TLHTTP_TEST_WRAP");
	if (wrap && *wrap) {
		snprintf(wrapbuf, sizeof wrapbuf, "%s", wrap);
		for (char *t = strtok(wrapbuf, " "); t && argc < 32; t = strtok(NULL, " "))
			argv[argc++] = t;
	}
	argv[argc++] = tlhttp_path;
	argv[argc++] = "--listen";
	argv[argc++] = listen;
	argv[argc++] = "--shards";
	argv[argc++] = "1";
	/* Served files' descriptors closed soon after, so that srv_stop's
	 * count of them settles at once (a test's own option comes later and
	 * wins). */
	argv[argc++] = "--file-cache-idle";
	argv[argc++] = "100ms";
	va_start(ap, s);
	for (const char *a; argc < 62 && (a = va_arg(ap, const char *));)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	s->pid = fork();
	if (s->pid < 0)
		return -1;
	if (s->pid == 0) {
		/* A test killed by its timeout takes its server with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(s->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0)
			dup2(fd, 2);
		execvp(argv[0], (char **)argv);
		_exit(127);
	}
	/* Under valgrind it takes a while. */
	for (int i = 0; i < 1000; i++) {
		int fd = connect_to(s->port);
		if (fd >= 0) {
			close(fd);
			/* The probe connection is closed on the server's side
			 * once it has seen our FIN: the count that then holds
			 * for 200 ms is the baseline. */
			for (int k = 0, same = 0; k < 500 && same < 20; k++) {
				usleep(10000);
				int n = proc_fds(s->pid);
				same = n == s->fds ? same + 1 : 0;
				s->fds = n;
			}
			return 0;
		}
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

/* Wait (up to 6 s: the open-file cache closes what was idle for
 * --file-cache-idle, at the next sweep) until the server holds exactly its listening-time
 * descriptors again; returns the count it ended with. */
static int srv_fds_settle(struct srv *s)
{
	int n = -1;

	for (int i = 0; i < 600; i++) {
		n = proc_fds(s->pid);
		if (n == s->fds)
			break;
		usleep(10000);
	}
	return n;
}

/* SIGTERM, wait, check the exit status and that nothing leaked. */
static void srv_stop(struct srv *s)
{
	int status = -1, n;

	if (s->pid <= 0)
		return;
	n = srv_fds_settle(s);
	if (n != s->fds) {
		char cmd[200];
		fprintf(stderr, "  tlhttp descriptors: %d once listening, %d at the end:\n", s->fds,
			n);
		snprintf(cmd, sizeof cmd, "ls -l /proc/%d/fd | sed 's/.*-> /    /' | sort | uniq -c >&2; "
			 "ss -tn state all | grep -c :%u >&2", (int)s->pid, s->port);
		if (system(cmd)) {}
	}
	CU_ASSERT_EQUAL(n, s->fds);
	kill(s->pid, SIGTERM);
	CU_ASSERT_EQUAL(waitpid(s->pid, &status, 0), s->pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char cmd[400];
		fprintf(stderr, "  tlhttp ended with status 0x%x; its stderr:\n", status);
		snprintf(cmd, sizeof cmd, "cat %s >&2", s->err);
		if (system(cmd)) {}
	}
	CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(s->err);
	s->pid = 0;
}

/* Run argv with stdout (and stderr, when both) into out[0..cap-1] (NUL
 * ended), killed after secs. Returns the exit status, -1 if it did not
 * exit by itself. */
static int run(const char *const argv[], char *out, size_t cap, size_t *len, int both, int secs)
{
	int p[2], status = -1;
	size_t n = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		if (both)
			dup2(p[1], 2);
		else {
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, 2);
		}
		execvp(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[1]);
	uint64_t end = st_now_ns() + (uint64_t)secs * 1000000000ull;
	for (;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int64_t left = (int64_t)(end - st_now_ns()) / 1000000;
		if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
			break;
		char tmp[8192];
		ssize_t r = read(p[0], tmp, sizeof tmp);
		if (r <= 0)
			break;
		if (n + (size_t)r < cap) {
			memcpy(out + n, tmp, (size_t)r);
			n += (size_t)r;
		}
	}
	close(p[0]);
	out[n < cap ? n : cap - 1] = '\0';
	if (len)
		*len = n;
	if (waitpid(pid, &status, WNOHANG) != pid) {
		for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) != pid; i++)
			usleep(10000);
		if (waitpid(pid, &status, WNOHANG) == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- raw connections ---- */

static int send_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read until EOF, cap bytes, or ms of silence. *closed: EOF (or a reset)
 * came. Returns the bytes read. */
static size_t recv_some(int fd, char *buf, size_t cap, int ms, int *closed)
{
	size_t n = 0;

	*closed = 0;
	while (n < cap) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, ms) <= 0)
			break;
		ssize_t r = recv(fd, buf + n, cap - n, 0);
		if (r <= 0) {
			*closed = 1;
			break;
		}
		n += (size_t)r;
	}
	buf[n < cap ? n : cap - 1] = '\0';
	return n;
}

/* Read exactly n bytes (or fewer on EOF or 3 s without any). */
static size_t recv_n(int fd, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 10000) <= 0) /* 10 s: over 3 s seen on a loaded machine */
			break;
		ssize_t r = recv(fd, buf + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* One exchange on a new connection: send req, read until the server
 * closes (or 2 s of silence). */
static size_t exchange(uint16_t port, const char *req, size_t reqlen, char *buf, size_t cap,
		       int *closed)
{
	int fd = connect_to(port);
	size_t n;

	*closed = 0;
	if (fd < 0 || send_all(fd, req, reqlen) < 0) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	n = recv_some(fd, buf, cap, 2000, closed);
	close(fd);
	return n;
}

/* ---- expected replies ---- */

static void show(const char *what, const char *p, size_t n)
{
	fprintf(stderr, "  %s (%zu bytes): \"", what, n);
	for (size_t i = 0; i < n && i < 600; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '\r')
			fputs("\\r", stderr);
		else if (c == '\n')
			fputs("\\n", stderr);
		else if (c < 32 || c > 126)
			fprintf(stderr, "\\x%02x", c);
		else
			fputc(c, stderr);
	}
	fputs(n > 600 ? "...\"\n" : "\"\n", stderr);
}

/*
 * got must equal want[0..wl) with every "@DATE@" in it replaced by the Date
 * the reply carries, and that Date must be now's (within 2 s). Prints both
 * on a mismatch. Returns 1 when equal.
 */
static int same_reply_n(const char *got, size_t gotlen, const char *want, size_t wl)
{
	char *exp = malloc(wl * 2 + 64);
	const char *d = memmem(got, gotlen, "\r\nDate: ", 8);
	char date[TLHTTP_DATE_LEN + 1] = "(none)";
	size_t n = 0;
	int ok = 1;

	if (!exp)
		return 0;
	if (d && (size_t)(d - got) + 8 + TLHTTP_DATE_LEN <= gotlen) {
		int64_t t;
		memcpy(date, d + 8, TLHTTP_DATE_LEN);
		date[TLHTTP_DATE_LEN] = '\0';
		if (tlhttp_date_parse(date, TLHTTP_DATE_LEN, time(NULL), &t) < 0 ||
		    llabs((long long)(t - time(NULL))) > 2) {
			fprintf(stderr, "  Date is not now's: %s\n", date);
			ok = 0;
		}
	}
	for (size_t i = 0; i < wl;) {
		if (i + 6 <= wl && !memcmp(want + i, "@DATE@", 6)) {
			memcpy(exp + n, date, strlen(date));
			n += strlen(date);
			i += 6;
		} else {
			exp[n++] = want[i++];
		}
	}
	if (n != gotlen || memcmp(exp, got, n))
		ok = 0;
	if (!ok) {
		show("expected", exp, n);
		show("received", got, gotlen);
	}
	free(exp);
	return ok;
}

static int same_reply(const char *got, size_t gotlen, const char *want)
{
	return same_reply_n(got, gotlen, want, strlen(want));
}

static const char *phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 206: return "Partial Content";
	case 304: return "Not Modified";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 412: return "Precondition Failed";
	case 414: return "URI Too Long";
	case 416: return "Range Not Satisfiable";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "?";
	}
}

/* The reply tlhttp gives for a status with its text body. */
static void status_reply(char *out, size_t cap, int status, const char *conn, int head)
{
	char body[80];
	int bl = snprintf(body, sizeof body, "%d %s\n", status, phrase(status));

	snprintf(out, cap,
		 "HTTP/1.1 %d %s\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
		 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n%s%s\r\n%s",
		 status, phrase(status), bl, status == 405 ? "Allow: GET, HEAD\r\n" : "", conn,
		 head ? "" : body);
}

#define BODY_REPLY(conn, body)                                                               \
	"HTTP/1.1 200 OK\r\nDate: @DATE@\r\nServer: tlhttp\r\n"                              \
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n" conn "\r\n" body

/* ---- the tests ---- */

static void test_cli(void)
{
	int fds = st_begin("tlhttp/cli");
	static const char *const bad[][8] = {
		{"--body", "x", NULL},                                          /* no --listen */
		{"--listen", "127.0.0.1:80", NULL},                             /* no --body/--root */
		{"--listen", "127.0.0.1:80", "--body", "x", "--root", "/", NULL},
		{"--listen", "localhost:80", "--body", "x", NULL},
		{"--listen", "127.0.0.1:0", "--body", "x", NULL},
		{"--listen", "::1:80", "--body", "x", NULL},
		{"--listen", "127.0.0.1:80", "--body", "x", "--idle-timeout", "5h", NULL},
		{"--listen", "127.0.0.1:80", "--body", "x", "--header-timeout", "1ms", NULL},
		{"--listen", "127.0.0.1:80", "--root", "/", "--file-cache-idle", "2x", NULL},
		{"--listen", "127.0.0.1:80", "--body", "x", "--shards", "0", NULL},
		{"--listen", "127.0.0.1:80", "--body", "x", "--cpus", "1-x", NULL},
		{"--listen", "127.0.0.1:80", "--body", "x", "--frob", NULL},
		{"--listen", "127.0.0.1:80", "--body", NULL},
	};
	char out[4096];
	size_t n;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *argv[10] = {tlhttp_path};
		int k = 1;
		for (; bad[i][k - 1]; k++)
			argv[k] = bad[i][k - 1];
		argv[k] = NULL;
		int rc = run(argv, out, sizeof out, &n, 1, 10);
		int lines = 0;
		for (size_t j = 0; j < n; j++)
			lines += out[j] == '\n';
		if (rc != 2 || lines != 1 || strncmp(out, "tlhttp: ", 8))
			fprintf(stderr, "  case %zu: status %d, output: %s", i, rc, out);
		CU_ASSERT_EQUAL(rc, 2);
		CU_ASSERT_EQUAL(lines, 1);
	}
	const char *help[] = {tlhttp_path, "--help", NULL};
	CU_ASSERT_EQUAL(run(help, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(strstr(out, "usage: tlhttp --listen") != NULL);
	/* A port already listened on is refused unless shared. */
	struct srv s;
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	char listen[32];
	snprintf(listen, sizeof listen, "127.0.0.1:%u", s.port);
	const char *again[] = {tlhttp_path, "--listen", listen, "--body", "x", NULL};
	CU_ASSERT_EQUAL(run(again, out, sizeof out, &n, 1, 10), 1);
	CU_ASSERT_TRUE(strstr(out, "already in use") != NULL);
	srv_stop(&s);
	st_end(fds);
}

static void test_body_curl(void)
{
	int fds = st_begin("tlhttp/body_curl");
	struct srv s;
	char url[64], out[8192];
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/", s.port);
	const char *get[] = {"curl", "-s", "-i", "--raw", url, NULL};
	CU_ASSERT_EQUAL(run(get, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(same_reply(out, n, BODY_REPLY("", "hello")));
	const char *head[] = {"curl", "-s", "-i", "--raw", "-I", url, NULL};
	CU_ASSERT_EQUAL(run(head, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(same_reply(out, n, BODY_REPLY("", "")));
	const char *h10[] = {"curl", "-s", "-i", "--raw", "--http1.0", url, NULL};
	CU_ASSERT_EQUAL(run(h10, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(same_reply(out, n, BODY_REPLY("Connection: close\r\n", "hello")));
	const char *cl[] = {"curl", "-s", "-i", "--raw", "-H", "Connection: close", url, NULL};
	CU_ASSERT_EQUAL(run(cl, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(same_reply(out, n, BODY_REPLY("Connection: close\r\n", "hello")));
	/* Two URLs on one connection: keep-alive. */
	const char *two[] = {"curl", "-s", "-i", "--raw", url, url, NULL};
	CU_ASSERT_EQUAL(run(two, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(n % 2 == 0 && same_reply(out, n / 2, BODY_REPLY("", "hello")) &&
		       same_reply(out + n / 2, n / 2, BODY_REPLY("", "hello")));
	srv_stop(&s);
	st_end(fds);
}

/* Several requests in one write: every answer, in order, then the close
 * the last one asked for. */
static void test_pipelined(void)
{
	int fds = st_begin("tlhttp/pipelined");
	struct srv s;
	static const char req[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
				  "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n"
				  "GET /y?z HTTP/1.1\r\nHost: a\r\n\r\n"
				  "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
				  "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	char buf[8192], want[2048];
	int closed;
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	n = exchange(s.port, req, sizeof req - 1, buf, sizeof buf, &closed);
	snprintf(want, sizeof want, "%s%s%s%s", BODY_REPLY("", "hello"), BODY_REPLY("", ""),
		 BODY_REPLY("", "hello"), BODY_REPLY("Connection: close\r\n", "hello"));
	CU_ASSERT_TRUE(same_reply(buf, n, want));
	CU_ASSERT_TRUE(closed);

	/* 200 requests in one write, the same number of answers. */
	char big[200 * 40];
	size_t bl = 0;
	for (int i = 0; i < 200; i++)
		bl += (size_t)snprintf(big + bl, sizeof big - bl, "GET /%03d HTTP/1.1\r\nHost: a\r\n\r\n", i);
	int fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(send_all(fd, big, bl), 0);
	static char in[200 * 200];
	size_t one = strlen(BODY_REPLY("", "hello")) - 6 + TLHTTP_DATE_LEN;
	size_t got = recv_n(fd, in, 200 * one);
	CU_ASSERT_EQUAL(got, 200 * one);
	int ok = 1;
	for (int i = 0; i < 200 && got == 200 * one; i++)
		ok &= same_reply(in + (size_t)i * one, one, BODY_REPLY("", "hello"));
	CU_ASSERT_TRUE(ok);
	/* A head cut across writes, pipelined behind a whole one. */
	static const char part1[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HT";
	static const char part2[] = "TP/1.1\r\nHo";
	static const char part3[] = "st: a\r\n\r\n";
	CU_ASSERT_EQUAL(send_all(fd, part1, sizeof part1 - 1), 0);
	usleep(50000);
	CU_ASSERT_EQUAL(send_all(fd, part2, sizeof part2 - 1), 0);
	usleep(50000);
	CU_ASSERT_EQUAL(send_all(fd, part3, sizeof part3 - 1), 0);
	got = recv_n(fd, in, 2 * one);
	CU_ASSERT_TRUE(got == 2 * one && same_reply(in, one, BODY_REPLY("", "hello")) &&
		       same_reply(in + one, one, BODY_REPLY("", "hello")));
	close(fd);
	srv_stop(&s);
	st_end(fds);
}

static void test_http10(void)
{
	int fds = st_begin("tlhttp/http10");
	struct srv s;
	char buf[4096];
	int closed;
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	static const char plain[] = "GET / HTTP/1.0\r\n\r\n";
	n = exchange(s.port, plain, sizeof plain - 1, buf, sizeof buf, &closed);
	CU_ASSERT_TRUE(same_reply(buf, n, BODY_REPLY("Connection: close\r\n", "hello")));
	CU_ASSERT_TRUE(closed);
	/* keep-alive asked: the connection stays and takes the next request. */
	static const char ka[] = "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
	int fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	size_t one = strlen(BODY_REPLY("Connection: keep-alive\r\n", "hello")) - 6 + TLHTTP_DATE_LEN;
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(send_all(fd, ka, sizeof ka - 1), 0);
		n = recv_n(fd, buf, one);
		CU_ASSERT_TRUE(same_reply(buf, n, BODY_REPLY("Connection: keep-alive\r\n", "hello")));
	}
	/* And a 1.0 request without it then ends the connection. */
	CU_ASSERT_EQUAL(send_all(fd, plain, sizeof plain - 1), 0);
	n = recv_some(fd, buf, sizeof buf, 2000, &closed);
	CU_ASSERT_TRUE(same_reply(buf, n, BODY_REPLY("Connection: close\r\n", "hello")));
	CU_ASSERT_TRUE(closed);
	close(fd);
	srv_stop(&s);
	st_end(fds);
}

/* Every refusal of the parser, over the wire: its status, Connection:
 * close, the close, and nothing for the request pipelined behind it. */
static void test_refusals(void)
{
	int fds = st_begin("tlhttp/refusals");
	static char line414[9100], hdr431[17100], many431[2000];
	struct {
		const char *name, *req;
		int status, head;
	} cases[] = {
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, 0},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 400, 0},
		{"bare CR", "GET / HTTP/1.1\rHost: a\r\n\r\n", 400, 0},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400, 0},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, 0},
		{"no Host in 1.1", "GET / HTTP/1.1\r\n\r\n", 400, 0},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, 0},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"bad target", "GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n", 400, 0},
		{"HEAD refused: no body", "HEAD / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n", 400, 1},
		{"POST", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", 405, 0},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 405, 0},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, 0},
		{"HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 505, 0},
		{"bad version", "GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400, 0},
		{"CL and TE", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
			      "Transfer-Encoding: chunked\r\n\r\n", 400, 0},
		{"CL twice, different", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
					"Content-Length: 5\r\n\r\n", 400, 0},
		{"CL twice, same", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
				   "Content-Length: 0\r\n\r\n", 400, 0},
		{"CL not digits", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400, 0},
		{"CL list", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400, 0},
		{"TE in 1.0", "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, 0},
		{"TE not chunked", "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400, 0},
		{"TE chunked twice", "GET / HTTP/1.1\r\nHost: a\r\n"
				     "Transfer-Encoding: chunked, chunked\r\n\r\n", 400, 0},
		{"GET with a body", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 400, 0},
		{"GET chunked", "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
				"0\r\n\r\n", 400, 0},
		{"414", line414, 414, 0},
		{"431 bytes", hdr431, 431, 0},
		{"431 lines", many431, 431, 0},
	};
	struct srv s;
	char want[1024];
	static char buf[65536];
	int closed;

	size_t k = (size_t)snprintf(line414, sizeof line414, "GET /");
	memset(line414 + k, 'a', 9000);
	snprintf(line414 + k + 9000, sizeof line414 - k - 9000, " HTTP/1.1\r\nHost: a\r\n\r\n");
	k = (size_t)snprintf(hdr431, sizeof hdr431, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
	memset(hdr431 + k, 'b', 17000);
	snprintf(hdr431 + k + 17000, sizeof hdr431 - k - 17000, "\r\n\r\n");
	k = (size_t)snprintf(many431, sizeof many431, "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < 101; i++)
		k += (size_t)snprintf(many431 + k, sizeof many431 - k, "X%d: v\r\n", i);
	snprintf(many431 + k, sizeof many431 - k, "\r\n");

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		static char req[20000];
		int n = snprintf(req, sizeof req, "%sGET / HTTP/1.1\r\nHost: a\r\n\r\n", cases[i].req);
		size_t got = exchange(s.port, req, (size_t)n, buf, sizeof buf, &closed);
		status_reply(want, sizeof want, cases[i].status, "Connection: close\r\n", cases[i].head);
		int ok = same_reply(buf, got, want);
		if (!ok || !closed)
			fprintf(stderr, "  case '%s': %s\n", cases[i].name, closed ? "" : "not closed");
		CU_ASSERT_TRUE(ok);
		CU_ASSERT_TRUE(closed);
	}
	srv_stop(&s);
	st_end(fds);
}

/* A refused request whose body keeps coming (a POST of 4 MiB): the
 * answer arrives whole and the connection ends with a FIN, not a reset,
 * because the server reads and drops what follows before it closes. */
static void test_linger(void)
{
	int fds = st_begin("tlhttp/linger");
	struct srv s;
	static char body[4 << 20];
	char buf[4096], want[1024];
	int closed;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	for (int round = 0; round < 3; round++) {
		static const char head[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4194304\r\n\r\n";
		int fd = connect_to(s.port);
		CU_ASSERT_TRUE_FATAL(fd >= 0);
		CU_ASSERT_EQUAL(send_all(fd, head, sizeof head - 1), 0);
		usleep(20000); /* answered and shut before the body comes */
		memset(body, 'x', sizeof body);
		int sent = send_all(fd, body, sizeof body);
		size_t n = recv_some(fd, buf, sizeof buf, 3000, &closed);
		status_reply(want, sizeof want, 405, "Connection: close\r\n", 0);
		CU_ASSERT_EQUAL(sent, 0);
		CU_ASSERT_TRUE(same_reply(buf, n, want));
		CU_ASSERT_TRUE(closed);
		close(fd);
	}
	srv_stop(&s);
	st_end(fds);
}

/* ---- files ---- */

static const char a_txt[] = "the file a.txt\n";
static const char index_html[] = "<p>index</p>\n";
static const char sub_index[] = "<p>sub</p>\n";
#define BIG_SIZE (300 * 1024 + 17)
static char big[BIG_SIZE];

/* Before the tests run: failures end the program. */
static void put_file(const char *rel, const void *p, size_t n, time_t mtime)
{
	char path[512];
	int fd;

	snprintf(path, sizeof path, "%s/%s", tree, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || (size_t)write(fd, p, n) != n) {
		perror(path);
		exit(1);
	}
	close(fd);
	struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
	if (utimensat(AT_FDCWD, path, ts, 0) < 0) {
		perror(path);
		exit(1);
	}
}

#define MTIME 1700000000 /* Tue, 14 Nov 2023 22:13:20 GMT */
#define MTIME_TEXT "Tue, 14 Nov 2023 22:13:20 GMT"

static void make_tree(void)
{
	char p[600];

	snprintf(tree, sizeof tree, "/tmp/tlhttp-test-%d/root", (int)getpid());
	snprintf(p, sizeof p, "/tmp/tlhttp-test-%d", (int)getpid());
	mkdir(p, 0700);
	mkdir(tree, 0755);
	snprintf(p, sizeof p, "%s/sub", tree);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/empty-dir", tree);
	mkdir(p, 0755);
	put_file("a.txt", a_txt, sizeof a_txt - 1, MTIME);
	put_file("index.html", index_html, sizeof index_html - 1, MTIME);
	put_file("sub/index.html", sub_index, sizeof sub_index - 1, MTIME);
	for (size_t i = 0; i < BIG_SIZE; i++)
		big[i] = (char)(i * 7 + i / 251);
	put_file("big.bin", big, BIG_SIZE, MTIME);
	/* Around the size up to which bodies are copied behind their head
	 * (16 KiB; larger ones go by sendfile). */
	put_file("s16k.bin", big, 16384, MTIME);
	put_file("s16k1.bin", big, 16385, MTIME);
	put_file("empty.txt", "", 0, MTIME);
	/* Beside the root: what an escape would reach. */
	snprintf(outside, sizeof outside, "/tmp/tlhttp-test-%d/secret", (int)getpid());
	int fd = open(outside, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0) {
		if (write(fd, "secret\n", 7)) {}
		close(fd);
	}
	snprintf(p, sizeof p, "%s/link-out", tree);
	if (symlink(outside, p)) {}
	snprintf(p, sizeof p, "%s/link-in", tree);
	if (symlink("a.txt", p)) {}
	snprintf(p, sizeof p, "%s/link-dir", tree);
	if (symlink("sub", p)) {}
}

static void remove_tree(void)
{
	char cmd[400];

	snprintf(cmd, sizeof cmd, "rm -rf /tmp/tlhttp-test-%d", (int)getpid());
	if (system(cmd)) {}
}

/* The ETag tlhttp sends for a file of the test tree (all have MTIME):
 * nginx's form, the modification time and the size in hex. */
#define MTIME_HEX "6553f100"
#define A_TAG "\"" MTIME_HEX "-f\"" /* a.txt, 15 bytes */

/* A whole file's reply: len is its size (and Content-Length). */
static void file_reply(char *out, size_t cap, int status, const char *type, size_t len,
		       const char *extra, const void *body, size_t bl)
{
	int n = snprintf(out, cap,
			 "HTTP/1.1 %d %s\r\nDate: @DATE@\r\nServer: tlhttp\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nLast-Modified: " MTIME_TEXT "\r\n"
			 "ETag: \"" MTIME_HEX "-%zx\"\r\n%s\r\n",
			 status, phrase(status), type, len, len, extra);
	memcpy(out + n, body, bl);
	out[n + (int)bl] = '\0';
}

/* GET path over a raw connection; the whole reply (the server closes). */
static size_t get_raw(uint16_t port, const char *path, const char *headers, char *buf, size_t cap)
{
	char req[1024];
	int closed;
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: a\r\n%sConnection: close\r\n\r\n",
			 path, headers);

	return exchange(port, req, (size_t)n, buf, cap, &closed);
}

static void test_files(void)
{
	int fds = st_begin("tlhttp/files");
	struct srv s;
	char url[128], want[4096];
	static char out[BIG_SIZE + 4096];
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/a.txt", s.port);
	const char *get[] = {"curl", "-s", "-i", "--raw", url, NULL};
	CU_ASSERT_EQUAL(run(get, out, sizeof out, &n, 0, 10), 0);
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1, "", a_txt,
		   sizeof a_txt - 1);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	const char *head[] = {"curl", "-s", "-i", "--raw", "-I", url, NULL};
	CU_ASSERT_EQUAL(run(head, out, sizeof out, &n, 0, 10), 0);
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1, "", "", 0);
	CU_ASSERT_TRUE(same_reply(out, n, want));

	/* A directory gives its index.html, with or without the slash. */
	static const char *const dirs[][2] = {{"/", index_html}, {"/sub/", sub_index},
					      {"/sub", sub_index}, {"/sub/./", sub_index}};
	for (size_t i = 0; i < 4; i++) {
		n = get_raw(s.port, dirs[i][0], "", out, sizeof out);
		file_reply(want, sizeof want, 200, "text/html; charset=utf-8", strlen(dirs[i][1]),
			   "Connection: close\r\n", dirs[i][1], strlen(dirs[i][1]));
		CU_ASSERT_TRUE(same_reply(out, n, want));
	}
	n = get_raw(s.port, "/empty.txt", "", out, sizeof out);
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", 0, "Connection: close\r\n",
		   "", 0);
	CU_ASSERT_TRUE(same_reply(out, n, want));

	/* A body of several chunks, byte for byte, and through curl. */
	snprintf(url, sizeof url, "http://127.0.0.1:%u/big.bin", s.port);
	const char *gb[] = {"curl", "-s", "--raw", url, NULL};
	CU_ASSERT_EQUAL(run(gb, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_TRUE(n == BIG_SIZE && !memcmp(out, big, BIG_SIZE));

	/* Pipelined files: in order, each whole. */
	static const char pipe_req[] = "GET /a.txt HTTP/1.1\r\nHost: a\r\n\r\n"
				       "GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n"
				       "HEAD /sub/ HTTP/1.1\r\nHost: a\r\n\r\n"
				       "GET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
	int closed;
	n = exchange(s.port, pipe_req, sizeof pipe_req - 1, out, sizeof out, &closed);
	static char wantall[BIG_SIZE + 4096];
	size_t wl = 0;
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1, "", a_txt,
		   sizeof a_txt - 1);
	wl += (size_t)sprintf(wantall + wl, "%s", want);
	file_reply(want, sizeof want, 200, "application/octet-stream", BIG_SIZE, "", "", 0);
	wl += (size_t)sprintf(wantall + wl, "%s", want);
	memcpy(wantall + wl, big, BIG_SIZE);
	wl += BIG_SIZE;
	file_reply(want, sizeof want, 200, "text/html; charset=utf-8", sizeof sub_index - 1, "", "", 0);
	wl += (size_t)sprintf(wantall + wl, "%s", want);
	file_reply(want, sizeof want, 200, "text/html; charset=utf-8", sizeof index_html - 1,
		   "Connection: close\r\n", index_html, sizeof index_html - 1);
	wl += (size_t)sprintf(wantall + wl, "%s", want);
	CU_ASSERT_TRUE(same_reply_n(out, n, wantall, wl));
	CU_ASSERT_TRUE(closed);

	/* Bodies just under and over the copy size, pipelined so that the
	 * later ones find the out buffer full and go by sendfile. */
	static const char pipe2[] = "GET /s16k.bin HTTP/1.1\r\nHost: a\r\n\r\n"
				    "GET /s16k.bin HTTP/1.1\r\nHost: a\r\n\r\n"
				    "GET /s16k1.bin HTTP/1.1\r\nHost: a\r\n\r\n"
				    "GET /s16k.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
	n = exchange(s.port, pipe2, sizeof pipe2 - 1, out, sizeof out, &closed);
	wl = 0;
	static const size_t sizes[4] = {16384, 16384, 16385, 16384};
	for (int i = 0; i < 4; i++) {
		file_reply(want, sizeof want, 200, "application/octet-stream", sizes[i],
			   i == 3 ? "Connection: close\r\n" : "", "", 0);
		wl += (size_t)sprintf(wantall + wl, "%s", want);
		memcpy(wantall + wl, big, sizes[i]);
		wl += sizes[i];
	}
	CU_ASSERT_TRUE(same_reply_n(out, n, wantall, wl));
	CU_ASSERT_TRUE(closed);

	/* Not found, and every escape: ".." plain and encoded, symbolic
	 * links out of the root and within it. */
	static const char *const nf[] = {
		"/nope", "/../secret", "/%2e%2e/secret", "/sub/%2e%2e/%2E%2E/secret", "/sub/../../secret",
		"/..%2fsecret", "/link-out", "/link-in", "/link-dir/index.html", "/link-dir/",
		"/a.txt/", "/empty-dir/", "http://a/../secret",
	};
	for (size_t i = 0; i < sizeof nf / sizeof nf[0]; i++) {
		n = get_raw(s.port, nf[i], "", out, sizeof out);
		status_reply(want, sizeof want, 404, "Connection: close\r\n", 0);
		if (!same_reply(out, n, want))
			fprintf(stderr, "  path %s\n", nf[i]);
		CU_ASSERT_TRUE(same_reply(out, n, want));
	}
	/* curl normalises "..", unless told not to. */
	snprintf(url, sizeof url, "http://127.0.0.1:%u/sub/../../secret", s.port);
	const char *esc[] = {"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--path-as-is", url, NULL};
	CU_ASSERT_EQUAL(run(esc, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "404");
	/* A ".." that stays inside is fine; a bad escape is 400. */
	n = get_raw(s.port, "/sub/../a.txt", "", out, sizeof out);
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1,
		   "Connection: close\r\n", a_txt, sizeof a_txt - 1);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	n = get_raw(s.port, "/%zz", "", out, sizeof out);
	status_reply(want, sizeof want, 400, "Connection: close\r\n", 0);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* The files served are closed once unused for --file-cache-idle
	 * (100 ms here: the default of 2 s would take over a second). */
	uint64_t t0 = st_now_ns();
	CU_ASSERT_EQUAL(srv_fds_settle(&s), s.fds);
	CU_ASSERT_TRUE(st_now_ns() - t0 < 1000000000ull);
	srv_stop(&s);
	st_end(fds);
}

/* The body of GET path (the whole reply kept in buf), or NULL. */
static const char *get_body(uint16_t port, const char *path, char *buf, size_t cap)
{
	size_t n = get_raw(port, path, "", buf, cap);
	char *b = memmem(buf, n, "\r\n\r\n", 4);
	return b ? b + 4 : NULL;
}

/* Files served again come from the shard's open-file cache: a change in
 * place shows at once, a replacement, a removal or a symbolic link put in
 * a file's place within about a second. */
static void test_file_changes(void)
{
	int fds = st_begin("tlhttp/file_changes");
	struct srv s;
	char buf[4096], p[400], tmp[420];
	const char *b;

	put_file("c.txt", "one", 3, MTIME);
	/* The default idle time: the cache keeps what it opened. */
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, "--file-cache-idle", "2s", NULL), 0);
	b = get_body(s.port, "/c.txt", buf, sizeof buf);
	CU_ASSERT_TRUE(b && !strcmp(b, "one"));
	/* Written in place: the new length at once. */
	snprintf(p, sizeof p, "%s/c.txt", tree);
	int fd = open(p, O_WRONLY | O_TRUNC);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "three", 5), 5);
	close(fd);
	b = get_body(s.port, "/c.txt", buf, sizeof buf);
	CU_ASSERT_TRUE(b && !strcmp(b, "three") && strstr(buf, "Content-Length: 5\r\n"));
	/* Renamed over. */
	snprintf(tmp, sizeof tmp, "%s/c.new", tree);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(write(fd, "second", 6), 6);
	close(fd);
	CU_ASSERT_EQUAL(rename(tmp, p), 0);
	uint64_t t0 = st_now_ns();
	int seen = 0;
	while (!seen && st_now_ns() - t0 < 3000000000ull) {
		b = get_body(s.port, "/c.txt", buf, sizeof buf);
		seen = b && !strcmp(b, "second");
		CU_ASSERT_TRUE(seen || (b && !strcmp(b, "three")));
		if (!seen)
			usleep(50000);
	}
	printf("\n  renamed over: served after %.2f s", (double)(st_now_ns() - t0) / 1e9);
	CU_ASSERT_TRUE(seen && st_now_ns() - t0 < 1500000000ull);
	/* A symbolic link to outside in its place: never followed. */
	CU_ASSERT_EQUAL(unlink(p), 0);
	CU_ASSERT_EQUAL(symlink(outside, p), 0);
	char want[1024];
	status_reply(want, sizeof want, 404, "Connection: close\r\n", 0);
	t0 = st_now_ns();
	seen = 0;
	size_t n = 0;
	while (!seen && st_now_ns() - t0 < 3000000000ull) {
		n = get_raw(s.port, "/c.txt", "", buf, sizeof buf);
		CU_ASSERT_TRUE(!memmem(buf, n, "secret", 6));
		seen = !strncmp(buf, "HTTP/1.1 404 ", 13);
		if (!seen) {
			b = memmem(buf, n, "\r\n\r\n", 4);
			CU_ASSERT_TRUE(b && !strcmp(b + 4, "second"));
			usleep(50000);
		}
	}
	printf(", a link in its place: 404 after %.2f s", (double)(st_now_ns() - t0) / 1e9);
	CU_ASSERT_TRUE(seen && st_now_ns() - t0 < 1500000000ull);
	CU_ASSERT_TRUE(same_reply(buf, n, want));
	/* Removed. */
	CU_ASSERT_EQUAL(unlink(p), 0);
	put_file("c.txt", "four", 4, MTIME);
	b = get_body(s.port, "/c.txt", buf, sizeof buf);
	CU_ASSERT_TRUE(b && !strcmp(b, "four")); /* not cached while it was missing */
	CU_ASSERT_EQUAL(unlink(p), 0);
	t0 = st_now_ns();
	seen = 0;
	while (!seen && st_now_ns() - t0 < 3000000000ull) {
		get_raw(s.port, "/c.txt", "", buf, sizeof buf);
		seen = !strncmp(buf, "HTTP/1.1 404 ", 13);
		if (!seen)
			usleep(50000);
	}
	printf(", removed: 404 after %.2f s\n", (double)(st_now_ns() - t0) / 1e9);
	CU_ASSERT_TRUE(seen && st_now_ns() - t0 < 1500000000ull);
	srv_stop(&s); /* the cache's descriptors closed once idle */
	st_end(fds);
}

static void test_ranges(void)
{
	int fds = st_begin("tlhttp/ranges");
	struct srv s;
	char url[128], want[4096], out[8192];
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/a.txt", s.port);
	const char *r1[] = {"curl", "-s", "-i", "--raw", "-r", "4-7", url, NULL};
	CU_ASSERT_EQUAL(run(r1, out, sizeof out, &n, 0, 10), 0);
	snprintf(want, sizeof want,
		 "HTTP/1.1 206 Partial Content\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
		 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 4\r\n"
		 "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\nContent-Range: bytes 4-7/%zu\r\n\r\nfile",
		 sizeof a_txt - 1);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* A suffix, and a last-pos past the end. */
	n = get_raw(s.port, "/a.txt", "Range: bytes=-4\r\n", out, sizeof out);
	snprintf(want, sizeof want,
		 "HTTP/1.1 206 Partial Content\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
		 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 4\r\n"
		 "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\nContent-Range: bytes 11-14/15\r\n"
		 "Connection: close\r\n\r\ntxt\n");
	CU_ASSERT_TRUE(same_reply(out, n, want));
	n = get_raw(s.port, "/a.txt", "Range: bytes=10-100\r\n", out, sizeof out);
	snprintf(want, sizeof want,
		 "HTTP/1.1 206 Partial Content\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
		 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n"
		 "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\nContent-Range: bytes 10-14/15\r\n"
		 "Connection: close\r\n\r\n.txt\n");
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* Not satisfiable. */
	n = get_raw(s.port, "/a.txt", "Range: bytes=15-\r\n", out, sizeof out);
	snprintf(want, sizeof want,
		 "HTTP/1.1 416 Range Not Satisfiable\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
		 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n"
		 "Content-Range: bytes */15\r\nConnection: close\r\n\r\n416 Range Not Satisfiable\n");
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* Several ranges, or If-Range that does not match: the whole file. */
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1,
		   "Connection: close\r\n", a_txt, sizeof a_txt - 1);
	n = get_raw(s.port, "/a.txt", "Range: bytes=0-1,4-5\r\n", out, sizeof out);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	n = get_raw(s.port, "/a.txt", "Range: bytes=0-1\r\nIf-Range: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
		    out, sizeof out);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* A range across chunks of a large file. */
	snprintf(url, sizeof url, "http://127.0.0.1:%u/big.bin", s.port);
	static char body[BIG_SIZE];
	const char *r2[] = {"curl", "-s", "-r", "65000-200000", url, NULL};
	CU_ASSERT_EQUAL(run(r2, body, sizeof body, &n, 0, 10), 0);
	CU_ASSERT_TRUE(n == 135001 && !memcmp(body, big + 65000, 135001));
	srv_stop(&s);
	st_end(fds);
}

static void test_not_modified(void)
{
	int fds = st_begin("tlhttp/not_modified");
	struct srv s;
	char want[4096], out[8192];
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	n = get_raw(s.port, "/a.txt", "If-Modified-Since: " MTIME_TEXT "\r\n", out, sizeof out);
	snprintf(want, sizeof want, "HTTP/1.1 304 Not Modified\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
				    "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\nConnection: close\r\n\r\n");
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* A later date, in an obsolete form, too; 304 beats Range. */
	n = get_raw(s.port, "/a.txt", "If-Modified-Since: Sunday, 07-Jan-24 00:00:00 GMT\r\n"
		    "Range: bytes=0-1\r\n", out, sizeof out);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* Earlier, in the future, or not a date: the file. */
	file_reply(want, sizeof want, 200, "text/plain; charset=utf-8", sizeof a_txt - 1,
		   "Connection: close\r\n", a_txt, sizeof a_txt - 1);
	static const char *const ims[] = {"Tue, 14 Nov 2023 22:13:19 GMT", "Fri, 01 Jan 9999 00:00:00 GMT",
					  "yesterday"};
	for (int i = 0; i < 3; i++) {
		char h[128];
		snprintf(h, sizeof h, "If-Modified-Since: %s\r\n", ims[i]);
		n = get_raw(s.port, "/a.txt", h, out, sizeof out);
		CU_ASSERT_TRUE(same_reply(out, n, want));
	}
	srv_stop(&s);
	st_end(fds);
}

/* One request for a.txt with extra header lines, and what tlhttp must
 * answer: the whole file (200), its first two bytes (206 of
 * "Range: bytes=0-1"), 304 or 412. */
struct pc_case {
	const char *name, *method, *headers;
	int status;
};

/* The reply to a pc_case, to compare byte for byte. */
static void pc_reply(char *want, size_t cap, int status, int head)
{
	switch (status) {
	case 200:
		file_reply(want, cap, 200, "text/plain; charset=utf-8", sizeof a_txt - 1,
			   "Connection: close\r\n", a_txt, head ? 0 : sizeof a_txt - 1);
		break;
	case 206:
		snprintf(want, cap,
			 "HTTP/1.1 206 Partial Content\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
			 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n"
			 "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\n"
			 "Content-Range: bytes 0-1/15\r\nConnection: close\r\n\r\n%s", head ? "" : "th");
		break;
	case 304:
		snprintf(want, cap, "HTTP/1.1 304 Not Modified\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
				    "Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\n"
				    "Connection: close\r\n\r\n");
		break;
	default:
		status_reply(want, cap, status, "Connection: close\r\n", head);
	}
}

#define OLDER "Tue, 14 Nov 2023 22:13:19 GMT" /* a second before MTIME */
#define LATER "Wed, 15 Nov 2023 00:00:00 GMT"
#define R01 "Range: bytes=0-1\r\n"

/*
 * RFC 9110 13.2: If-Match, If-Unmodified-Since, If-None-Match and
 * If-Modified-Since evaluated in 13.2.2's order, then If-Range; strong
 * entity-tags as nginx makes them, compared strongly for If-Match and
 * If-Range and weakly for If-None-Match; lists, repeated lines, "*" and
 * bad syntax.
 */
static void test_preconditions(void)
{
	static const struct pc_case cases[] = {
		/* The issue's cases. */
		{"If-None-Match * on a file: 304", "GET", "If-None-Match: *\r\n", 304},
		{"If-None-Match * on HEAD: 304", "HEAD", "If-None-Match: *\r\n", 304},
		{"If-Match list, no tag of it: 412", "GET", "If-Match: \"a\", \"b\"\r\n", 412},
		{"If-Match list with Range: 412, not 206", "GET", "If-Match: \"a\", \"b\"\r\n" R01, 412},
		{"If-Unmodified-Since older than the file: 412", "GET",
		 "If-Unmodified-Since: " OLDER "\r\n", 412},
		{"If-Unmodified-Since older with Range: 412, not 206", "GET",
		 "If-Unmodified-Since: " OLDER "\r\n" R01, 412},
		{"If-None-Match with If-Modified-Since: the date is ignored", "GET",
		 "If-None-Match: \"a\"\r\nIf-Modified-Since: " MTIME_TEXT "\r\n", 200},
		/* If-None-Match: weak comparison. */
		{"If-None-Match the tag: 304", "GET", "If-None-Match: " A_TAG "\r\n", 304},
		{"If-None-Match the tag, weak: 304", "GET", "If-None-Match: W/" A_TAG "\r\n", 304},
		{"If-None-Match a list holding it: 304", "HEAD", "If-None-Match: \"x\" ,, W/\"y\"," A_TAG "\r\n", 304},
		{"If-None-Match over two lines: 304", "GET",
		 "If-None-Match: \"x\"\r\nIf-None-Match: " A_TAG "\r\n", 304},
		{"If-None-Match another tag: 200", "GET", "If-None-Match: \"6553f100-e\"\r\n", 200},
		{"If-None-Match the tag beats an older If-Modified-Since: 304", "GET",
		 "If-Modified-Since: " OLDER "\r\nIf-None-Match: " A_TAG "\r\n", 304},
		{"If-None-Match no match, with Range: 206", "GET", "If-None-Match: \"x\"\r\n" R01, 206},
		/* If-Match: strong comparison. */
		{"If-Match the tag: 200", "GET", "If-Match: " A_TAG "\r\n", 200},
		{"If-Match *: 200", "GET", "If-Match: *\r\n", 200},
		{"If-Match a list holding it: 200", "GET", "If-Match: \"x\", " A_TAG "\r\n", 200},
		{"If-Match over two lines: 200", "GET", "If-Match: \"x\"\r\nIf-Match: " A_TAG "\r\n", 200},
		{"If-Match the tag, weak: 412", "GET", "If-Match: W/" A_TAG "\r\n", 412},
		{"If-Match the tag with Range: 206", "GET", "If-Match: " A_TAG "\r\n" R01, 206},
		{"If-Match failing on HEAD: 412", "HEAD", "If-Match: \"x\"\r\n", 412},
		{"If-Match empty: 412", "GET", "If-Match: \r\n", 412},
		/* If-Unmodified-Since: only without If-Match. */
		{"If-Unmodified-Since the file's date: 200", "GET", "If-Unmodified-Since: " MTIME_TEXT "\r\n", 200},
		{"If-Unmodified-Since later with Range: 206", "GET", "If-Unmodified-Since: " LATER "\r\n" R01, 206},
		{"If-Unmodified-Since not a date: ignored", "GET", "If-Unmodified-Since: yesterday\r\n", 200},
		{"If-Unmodified-Since twice: ignored (a list of dates)", "GET",
		 "If-Unmodified-Since: " OLDER "\r\nIf-Unmodified-Since: " OLDER "\r\n", 200},
		{"If-Match passing: If-Unmodified-Since ignored", "GET",
		 "If-Match: " A_TAG "\r\nIf-Unmodified-Since: " OLDER "\r\n", 200},
		/* The order of 13.2.2. */
		{"If-Match fails before If-None-Match: 412", "GET", "If-None-Match: *\r\nIf-Match: \"x\"\r\n", 412},
		{"If-Unmodified-Since fails before If-None-Match: 412", "GET",
		 "If-None-Match: " A_TAG "\r\nIf-Unmodified-Since: " OLDER "\r\n", 412},
		{"If-Match passes, If-None-Match fails: 304", "GET",
		 "If-Match: " A_TAG "\r\nIf-None-Match: " A_TAG "\r\n", 304},
		{"If-Modified-Since at the date beats Range: 304", "GET", "If-Modified-Since: " MTIME_TEXT "\r\n" R01, 304},
		/* If-Range: strong comparison, or the exact date. */
		{"If-Range the tag: 206", "GET", "If-Range: " A_TAG "\r\n" R01, 206},
		{"If-Range the tag, weak: 200", "GET", "If-Range: W/" A_TAG "\r\n" R01, 200},
		{"If-Range another tag: 200", "GET", "If-Range: \"x\"\r\n" R01, 200},
		{"If-Range a list: 200", "GET", "If-Range: " A_TAG ", " A_TAG "\r\n" R01, 200},
		{"If-Range the date: 206", "GET", "If-Range: " MTIME_TEXT "\r\n" R01, 206},
		{"If-Range without Range: 200", "GET", "If-Range: \"x\"\r\n", 200},
		/* Bad syntax: If-Match fails, If-None-Match holds (and still
		 * makes If-Modified-Since ignored). */
		{"If-Match unquoted: 412", "GET", "If-Match: " MTIME_HEX "-f\r\n", 412},
		{"If-Match * with a tag: 412", "GET", "If-Match: *, " A_TAG "\r\n", 412},
		{"If-Match the tag and junk: 412", "GET", "If-Match: " A_TAG ", junk\r\n", 412},
		{"If-Match * on two lines: 412", "GET", "If-Match: *\r\nIf-Match: *\r\n", 412},
		{"If-None-Match unquoted: 200", "GET", "If-None-Match: " MTIME_HEX "-f\r\n", 200},
		{"If-None-Match unterminated: 200", "GET", "If-None-Match: \"" MTIME_HEX "-f\r\n", 200},
		{"If-None-Match two tags without a comma: 200", "GET", "If-None-Match: \"x\" " A_TAG "\r\n", 200},
		{"If-None-Match lowercase w/: 200", "GET", "If-None-Match: w/" A_TAG "\r\n", 200},
		{"If-None-Match * with a tag: 200", "GET", "If-None-Match: *, " A_TAG "\r\n", 200},
		{"If-None-Match bad, If-Modified-Since still ignored: 200", "GET",
		 "If-None-Match: junk\r\nIf-Modified-Since: " MTIME_TEXT "\r\n", 200},
	};
	int fds = st_begin("tlhttp/preconditions");
	struct srv s;
	char req[1024], want[4096], out[8192];
	int closed, bad = 0;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct pc_case *k = &cases[i];
		int head = !strcmp(k->method, "HEAD");
		int rl = snprintf(req, sizeof req, "%s /a.txt HTTP/1.1\r\nHost: a\r\n%sConnection: close\r\n\r\n",
				  k->method, k->headers);
		size_t n = exchange(s.port, req, (size_t)rl, out, sizeof out, &closed);
		pc_reply(want, sizeof want, k->status, head);
		if (!same_reply(out, n, want)) {
			fprintf(stderr, "  case \"%s\" fails\n", k->name);
			bad++;
		}
	}
	CU_ASSERT_EQUAL(bad, 0);
	/* A missing file stays 404 whatever the preconditions say
	 * (RFC 9110 13.2.1: they apply only to a 2xx or 412 answer). */
	size_t n = get_raw(s.port, "/nope", "If-Match: \"x\"\r\nIf-None-Match: *\r\n", out, sizeof out);
	status_reply(want, sizeof want, 404, "Connection: close\r\n", 0);
	CU_ASSERT_TRUE(same_reply(out, n, want));
	/* A body sent by sendfile: its own tag, 304 on it. */
	n = get_raw(s.port, "/big.bin", "If-None-Match: \"" MTIME_HEX "-4b011\"\r\n", out, sizeof out);
	CU_ASSERT_TRUE(n > 13 && !strncmp(out, "HTTP/1.1 304 ", 13));
	static const char big_tag[] = "\r\nETag: \"" MTIME_HEX "-4b011\"\r\n";
	CU_ASSERT_TRUE(memmem(out, n, big_tag, sizeof big_tag - 1) != NULL);
	/* Pipelined on one connection: each answer, in order, keeps it open. */
	static const char pipe_req[] = "GET /a.txt HTTP/1.1\r\nHost: a\r\nIf-Match: \"x\"\r\n\r\n"
				       "GET /a.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: " A_TAG "\r\n\r\n"
				       "GET /a.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
	n = exchange(s.port, pipe_req, sizeof pipe_req - 1, out, sizeof out, &closed);
	char all[8192];
	size_t wl = 0;
	status_reply(want, sizeof want, 412, "", 0);
	wl += (size_t)sprintf(all + wl, "%s", want);
	wl += (size_t)sprintf(all + wl, "HTTP/1.1 304 Not Modified\r\nDate: @DATE@\r\nServer: tlhttp\r\n"
					"Last-Modified: " MTIME_TEXT "\r\nETag: " A_TAG "\r\n\r\n");
	pc_reply(want, sizeof want, 200, 0);
	wl += (size_t)sprintf(all + wl, "%s", want);
	CU_ASSERT_TRUE(same_reply_n(out, n, all, wl));
	CU_ASSERT_TRUE(closed);
	srv_stop(&s);
	st_end(fds);
}

/* The same through curl, a real client: -z DATE (If-Modified-Since),
 * -z -DATE (If-Unmodified-Since), --etag-save and --etag-compare. */
static void test_preconditions_curl(void)
{
	int fds = st_begin("tlhttp/preconditions_curl");
	struct srv s;
	char url[128], out[8192], etag[300], path[320];
	size_t n;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/a.txt", s.port);
	snprintf(etag, sizeof etag, "%s/../etag-%d", tree, (int)getpid());
	/* The status curl saw, with the body it wrote after it. */
#define CURL_CODE "-s", "-w", "%{http_code}"
	const char *ims[] = {"curl", CURL_CODE, "-o", "/dev/null", "-z", MTIME_TEXT, url, NULL};
	CU_ASSERT_EQUAL(run(ims, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "304");
	const char *ims_old[] = {"curl", CURL_CODE, "-z", OLDER, url, NULL};
	CU_ASSERT_EQUAL(run(ims_old, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "the file a.txt\n200");
	/* A resumed download of a file changed since: refused, not a piece
	 * of the new version. */
	const char *ius[] = {"curl", CURL_CODE, "-o", "/dev/null", "-r", "5-", "-z", "-" OLDER, url, NULL};
	CU_ASSERT_EQUAL(run(ius, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "412");
	const char *ius_ok[] = {"curl", CURL_CODE, "-r", "4-7", "-z", "-" MTIME_TEXT, url, NULL};
	CU_ASSERT_EQUAL(run(ius_ok, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "file206");
	/* The tag curl saves is the one tlhttp sends, and sent back it
	 * gives 304. */
	unlink(etag);
	const char *save[] = {"curl", CURL_CODE, "-o", "/dev/null", "--etag-save", etag, url, NULL};
	CU_ASSERT_EQUAL(run(save, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "200");
	snprintf(path, sizeof path, "cat %s", etag);
	FILE *f = popen(path, "r");
	char saved[64] = "";
	if (f) {
		if (!fgets(saved, sizeof saved, f))
			saved[0] = '\0';
		pclose(f);
	}
	CU_ASSERT_STRING_EQUAL(saved, A_TAG "\n");
	const char *cmp[] = {"curl", CURL_CODE, "-o", "/dev/null", "--etag-compare", etag, url, NULL};
	CU_ASSERT_EQUAL(run(cmp, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "304");
	/* Once the file changes, the tag no longer matches. */
	put_file("a.txt", "the file a.txt, longer\n", 23, MTIME);
	CU_ASSERT_EQUAL(run(cmp, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "200");
	put_file("a.txt", a_txt, sizeof a_txt - 1, MTIME);
	CU_ASSERT_EQUAL(run(cmp, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "304");
	/* If-Match through curl: a stale tag is 412. */
	const char *im[] = {"curl", CURL_CODE, "-o", "/dev/null", "-H", "If-Match: \"" MTIME_HEX "-e\"", url, NULL};
	CU_ASSERT_EQUAL(run(im, out, sizeof out, &n, 0, 10), 0);
	CU_ASSERT_STRING_EQUAL(out, "412");
#undef CURL_CODE
	unlink(etag);
	srv_stop(&s);
	st_end(fds);
}

/* --body: the body has no date and no tag, so only "*" can match. */
static void test_preconditions_body(void)
{
	int fds = st_begin("tlhttp/preconditions_body");
	struct srv s;
	char req[512], want[2048], out[4096];
	int closed;
	static const struct {
		const char *headers, *method;
		int status;
	} cases[] = {
		{"If-None-Match: *\r\n", "GET", 304},
		{"If-None-Match: *\r\n", "HEAD", 304},
		{"If-None-Match: \"x\"\r\n", "GET", 200},
		{"If-Match: *\r\n", "GET", 200},
		{"If-Match: \"x\"\r\n", "GET", 412},
		{"If-Match: \"x\"\r\n", "HEAD", 412},
		{"If-Unmodified-Since: " OLDER "\r\n", "GET", 200}, /* no date: ignored */
		{"If-Modified-Since: " LATER "\r\n", "GET", 200},
	};

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int head = !strcmp(cases[i].method, "HEAD");
		int rl = snprintf(req, sizeof req, "%s / HTTP/1.1\r\nHost: a\r\n%sConnection: close\r\n\r\n",
				  cases[i].method, cases[i].headers);
		size_t n = exchange(s.port, req, (size_t)rl, out, sizeof out, &closed);
		if (cases[i].status == 200)
			snprintf(want, sizeof want, "%s",
				 head ? BODY_REPLY("Connection: close\r\n", "")
				      : BODY_REPLY("Connection: close\r\n", "hello"));
		else if (cases[i].status == 304)
			snprintf(want, sizeof want, "HTTP/1.1 304 Not Modified\r\nDate: @DATE@\r\n"
						    "Server: tlhttp\r\nConnection: close\r\n\r\n");
		else
			status_reply(want, sizeof want, cases[i].status, "Connection: close\r\n", head);
		if (!same_reply(out, n, want))
			fprintf(stderr, "  case %s %s", cases[i].method, cases[i].headers);
		CU_ASSERT_TRUE(same_reply(out, n, want));
	}
	srv_stop(&s);
	st_end(fds);
}

/* How long until the server closes fd (ms), reading what it sends into
 * buf; -1 if it did not within limit_ms. */
static long ms_to_close(int fd, char *buf, size_t cap, size_t *got, long limit_ms)
{
	uint64_t t0 = st_now_ns();
	size_t n = 0;

	for (;;) {
		long left = limit_ms - (long)((st_now_ns() - t0) / 1000000);
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
			return -1;
		ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
		if (r <= 0) {
			buf[n] = '\0';
			*got = n;
			return (long)((st_now_ns() - t0) / 1000000);
		}
		n += (size_t)r;
	}
}

static void test_timeouts(void)
{
	int fds = st_begin("tlhttp/timeouts");
	struct srv s;
	char buf[4096], want[1024];
	size_t n;
	long ms;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", "--header-timeout", "400ms",
					"--idle-timeout", "800ms", NULL), 0);
	/* Half a request: 408 and the close, after the header deadline. */
	int fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(send_all(fd, "GET / HTTP/1.1\r\nHo", 18), 0);
	ms = ms_to_close(fd, buf, sizeof buf, &n, 3000);
	printf("\n  half a request: closed after %ld ms", ms);
	CU_ASSERT_TRUE(ms >= 380 && ms < 1500);
	status_reply(want, sizeof want, 408, "Connection: close\r\n", 0);
	CU_ASSERT_TRUE(ms >= 0 && same_reply(buf, n, want));
	close(fd);
	/* A client that trickles a byte every 100 ms does not stretch it. */
	fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	uint64_t t0 = st_now_ns();
	int closed = 0;
	for (int i = 0; i < 30 && !closed; i++) {
		if (send_all(fd, &"GET / HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaa"[i], 1) < 0)
			closed = 1;
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 100) > 0)
			closed = 1;
	}
	ms = (long)((st_now_ns() - t0) / 1000000);
	printf(", trickling: answered after %ld ms", ms);
	CU_ASSERT_TRUE(closed && ms < 1500);
	close(fd);
	/* Nothing at all: closed without a word. */
	fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	ms = ms_to_close(fd, buf, sizeof buf, &n, 3000);
	printf(", silent: %ld ms", ms);
	CU_ASSERT_TRUE(ms >= 380 && ms < 1500);
	CU_ASSERT_EQUAL(n, 0);
	close(fd);
	/* Idle after an answer: closed after the idle timeout, not the
	 * header one. */
	fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(send_all(fd, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27), 0);
	size_t one = strlen(BODY_REPLY("", "hello")) - 6 + TLHTTP_DATE_LEN;
	CU_ASSERT_EQUAL(recv_n(fd, buf, one), one);
	ms = ms_to_close(fd, buf, sizeof buf, &n, 4000);
	printf(", idle: %ld ms\n", ms);
	CU_ASSERT_TRUE(ms >= 780 && ms < 2500);
	CU_ASSERT_EQUAL(n, 0);
	close(fd);
	/* Kept busy, a connection outlives both timeouts. */
	fd = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(fd >= 0);
	int ok = 1;
	for (int i = 0; i < 12 && ok; i++) {
		usleep(200000);
		ok = send_all(fd, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27) == 0 && recv_n(fd, buf, one) == one;
	}
	CU_ASSERT_TRUE(ok);
	close(fd);
	srv_stop(&s);
	st_end(fds);
}

/* Wait up to ms for pid to exit; its status, or -1. */
static int wait_exit(pid_t pid, int ms)
{
	int status;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		usleep(10000);
	}
	return -1;
}

/* SIGTERM drains: the listener goes, connections with nothing under way
 * end at once, a request being received is answered (with Connection:
 * close) and then the server exits; a second SIGTERM stops it at once. */
static void test_drain(void)
{
	int fds = st_begin("tlhttp/drain");
	struct srv s;
	char buf[4096], want[1024];
	int closed;
	size_t one = strlen(BODY_REPLY("", "hello")) - 6 + TLHTTP_DATE_LEN;

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	int idle = connect_to(s.port), part = connect_to(s.port), fresh = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(idle >= 0 && part >= 0 && fresh >= 0);
	CU_ASSERT_EQUAL(send_all(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27), 0);
	CU_ASSERT_EQUAL(recv_n(idle, buf, one), one);
	CU_ASSERT_EQUAL(send_all(part, "GET / HTTP/1.1\r\nHost: a\r\n", 25), 0);
	usleep(100000);
	kill(s.pid, SIGTERM);
	/* The idle and the silent connection end without a word. */
	CU_ASSERT_EQUAL(recv_some(idle, buf, sizeof buf, 1000, &closed), 0);
	CU_ASSERT_TRUE(closed);
	CU_ASSERT_EQUAL(recv_some(fresh, buf, sizeof buf, 1000, &closed), 0);
	CU_ASSERT_TRUE(closed);
	/* Nobody listens any more; the server waits for the request. */
	int late = connect_to(s.port);
	CU_ASSERT_EQUAL(late, -1);
	if (late >= 0)
		close(late);
	CU_ASSERT_EQUAL(wait_exit(s.pid, 200), -1);
	CU_ASSERT_EQUAL(send_all(part, "\r\n", 2), 0);
	size_t n = recv_some(part, buf, sizeof buf, 2000, &closed);
	snprintf(want, sizeof want, "%s", BODY_REPLY("Connection: close\r\n", "hello"));
	CU_ASSERT_TRUE(same_reply(buf, n, want));
	CU_ASSERT_TRUE(closed);
	close(idle);
	close(part);
	close(fresh);
	int status = wait_exit(s.pid, 3000);
	CU_ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (status == -1)
		kill(s.pid, SIGKILL), waitpid(s.pid, NULL, 0);
	unlink(s.err);

	/* A second SIGTERM does not wait for the request. */
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	part = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(part >= 0);
	CU_ASSERT_EQUAL(send_all(part, "GET / HT", 8), 0);
	usleep(100000);
	kill(s.pid, SIGTERM);
	CU_ASSERT_EQUAL(wait_exit(s.pid, 300), -1);
	kill(s.pid, SIGTERM);
	status = wait_exit(s.pid, 3000);
	CU_ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (status == -1)
		kill(s.pid, SIGKILL), waitpid(s.pid, NULL, 0);
	CU_ASSERT_EQUAL(recv_some(part, buf, sizeof buf, 1000, &closed), 0);
	CU_ASSERT_TRUE(closed);
	close(part);
	unlink(s.err);
	st_end(fds);
}

/* ---- load ---- */

static int wrk_ok(const char *url, const char *what)
{
	char out[8192];
	size_t n;
	const char *argv[] = {"wrk", "-t1", "-c16", "-d1s", url, NULL};
	int rc = run(argv, out, sizeof out, &n, 1, 20);
	const char *rq = strstr(out, " requests in ");
	int ok = rc == 0 && rq && !strstr(out, "Non-2xx") && !strstr(out, "Socket errors");

	if (!ok)
		fprintf(stderr, "  wrk on %s: status %d:\n%s\n", what, rc, out);
	else {
		const char *ls = rq;
		while (ls > out && ls[-1] != '\n')
			ls--;
		while (*ls == ' ')
			ls++;
		printf("\n  wrk on %s: %.*s", what, (int)(strcspn(ls, ",\n")), ls);
	}
	return ok;
}

/* h2load's HTTP/1.1 mode: reqs requests over conns connections, each
 * with up to depth pipelined; all must succeed with 2xx. */
static int h2load_ok(const char *url, const char *reqs, const char *conns, const char *depth)
{
	char out[8192], want1[128], want2[128];
	size_t n;
	const char *argv[] = {"h2load", "--h1", "-n", reqs, "-c", conns, "-m", depth, url, NULL};
	int rc = run(argv, out, sizeof out, &n, 1, 30);
	snprintf(want1, sizeof want1, "%s succeeded, 0 failed, 0 errored, 0 timeout", reqs);
	snprintf(want2, sizeof want2, "status codes: %s 2xx, 0 3xx, 0 4xx, 0 5xx", reqs);
	int ok = rc == 0 && strstr(out, want1) && strstr(out, want2);

	if (!ok)
		fprintf(stderr, "  h2load: status %d:\n%s\n", rc, out);
	return ok;
}

static void test_load(void)
{
	int fds = st_begin("tlhttp/load");
	struct srv s;
	char url[128];

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/", s.port);
	CU_ASSERT_TRUE(wrk_ok(url, "a body"));
	/* h2load's HTTP/1.1 mode pipelines -m requests per connection. */
	CU_ASSERT_TRUE(h2load_ok(url, "4000", "8", "8"));
	srv_stop(&s);
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	snprintf(url, sizeof url, "http://127.0.0.1:%u/a.txt", s.port);
	CU_ASSERT_TRUE(wrk_ok(url, "a file"));
	CU_ASSERT_TRUE(h2load_ok(url, "4000", "8", "8"));
	snprintf(url, sizeof url, "http://127.0.0.1:%u/big.bin", s.port);
	CU_ASSERT_TRUE(wrk_ok(url, "a 300 KiB file"));
	/* Many bodies at once, two pipelined on each connection. */
	CU_ASSERT_TRUE(h2load_ok(url, "400", "100", "2"));
	printf("\n");
	srv_stop(&s);
	st_end(fds);
}

/* ---- stats ---- */

/* The program family `name` in tlshard's JSON: row `row`'s total. */
static double prog_total(cJSON *j, const char *name, int row)
{
	cJSON *prog = cJSON_GetObjectItem(j, "program"), *f;

	cJSON_ArrayForEach(f, prog)
	{
		cJSON *nm = cJSON_GetObjectItem(f, "name");
		if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) {
			cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(f, "rows"), row);
			cJSON *t = r ? cJSON_GetObjectItem(r, "total") : NULL;
			return cJSON_IsNumber(t) ? t->valuedouble : -1;
		}
	}
	return -1;
}

static const char *row_label(cJSON *j, const char *name, int row)
{
	cJSON *prog = cJSON_GetObjectItem(j, "program"), *f;

	cJSON_ArrayForEach(f, prog)
	{
		cJSON *nm = cJSON_GetObjectItem(f, "name");
		if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) {
			cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(f, "rows"), row);
			cJSON *l = r ? cJSON_GetObjectItem(r, "label") : NULL;
			return cJSON_IsString(l) ? l->valuestring : "";
		}
	}
	return "";
}

static cJSON *stats_json(pid_t pid)
{
	static char out[1 << 20];
	char ps[16];
	size_t n;

	snprintf(ps, sizeof ps, "%d", (int)pid);
	usleep(30000); /* a shard publishes before it parks */
	const char *argv[] = {tlshard_path, "stats", ps, "--json", NULL};
	int rc = run(argv, out, sizeof out, &n, 0, 20);
	if (rc != 0) {
		/* Say why: the same again with its stderr. */
		rc = run(argv, out, sizeof out, &n, 1, 20);
		fprintf(stderr, "  tlshard stats %s --json: status %d: %.300s\n", ps, rc, out);
		return NULL;
	}
	return cJSON_Parse(out);
}

/* The shard's allocator total, from the region itself. */
static uint64_t alloc_bytes(pid_t pid, int *arenas)
{
	tl_stats_reader *r;
	tl_stats_info info;
	tl_stats_shard st;

	usleep(30000);
	if (tl_stats_open(&r, (int)pid) < 0)
		return 0;
	if (tl_stats_info_get(r, &info) < 0 || tl_stats_shard_get(r, 0, &st, NULL, 0) < 0)
		st.alloc_bytes = 0;
	*arenas = (info.flags & TL_STATS_F_ARENAS) != 0;
	tl_stats_close(r);
	return st.alloc_bytes;
}

static void test_stats(void)
{
	int fds = st_begin("tlhttp/stats");
	struct srv s;
	char buf[4096], url[128];
	int closed, held[3];

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, NULL), 0);
	/* 5 answers of 2xx, 2 of 3xx, 3 of 4xx. */
	for (int i = 0; i < 5; i++)
		get_raw(s.port, "/a.txt", "", buf, sizeof buf);
	for (int i = 0; i < 2; i++)
		get_raw(s.port, "/a.txt", "If-Modified-Since: " MTIME_TEXT "\r\n", buf, sizeof buf);
	get_raw(s.port, "/nope", "", buf, sizeof buf);
	exchange(s.port, "GET / HTTP/1.1\r\n\r\n", 18, buf, sizeof buf, &closed);
	exchange(s.port, "PUT / HTTP/1.1\r\n\r\n", 18, buf, sizeof buf, &closed);
	/* Three connections held open. */
	for (int i = 0; i < 3; i++)
		held[i] = connect_to(s.port);
	usleep(100000);
	cJSON *j = stats_json(s.pid);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL(prog_total(j, "responses", 0), 5);
	CU_ASSERT_EQUAL(prog_total(j, "responses", 1), 2);
	CU_ASSERT_EQUAL(prog_total(j, "responses", 2), 3);
	CU_ASSERT_EQUAL(prog_total(j, "responses", 3), 0);
	CU_ASSERT_STRING_EQUAL(row_label(j, "responses", 0), "2xx");
	CU_ASSERT_STRING_EQUAL(row_label(j, "responses", 3), "5xx");
	CU_ASSERT_EQUAL(prog_total(j, "conns", 0), 3);
	CU_ASSERT_EQUAL(prog_total(j, "conns_refused", 0), 0);
	cJSON_Delete(j);
	for (int i = 0; i < 3; i++)
		if (held[i] >= 0)
			close(held[i]);
	usleep(100000);
	j = stats_json(s.pid);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL(prog_total(j, "conns", 0), 0);
	cJSON_Delete(j);

	/* Steady state allocates nothing: after a warm-up, a load run leaves
	 * the shard's allocation total where it was. */
	int arenas = 0;
	snprintf(url, sizeof url, "http://127.0.0.1:%u/a.txt", s.port);
	CU_ASSERT_TRUE(wrk_ok(url, "a file (warm-up)"));
	uint64_t a0 = alloc_bytes(s.pid, &arenas);
	CU_ASSERT_TRUE(wrk_ok(url, "a file (measured)"));
	uint64_t a1 = alloc_bytes(s.pid, &arenas);
	if (a0 == 0 && a1 == 0) {
		/* Without jemalloc (sanitizer builds) there is no total to read. */
		printf("\n  shard allocations: not measured (no jemalloc totals: %s)\n",
		       arenas ? "?" : "per-shard arenas off");
	} else {
		printf("\n  shard allocations over the run: %llu bytes\n",
		       (unsigned long long)(a1 - a0));
		CU_ASSERT_EQUAL(a1, a0);
	}
	srv_stop(&s);

	/* Over --max-conns: closed at once, counted; the others are served. */
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", "--max-conns", "2", NULL), 0);
	for (int i = 0; i < 3; i++)
		held[i] = connect_to(s.port);
	CU_ASSERT_TRUE_FATAL(held[0] >= 0 && held[1] >= 0 && held[2] >= 0);
	usleep(100000);
	/* The kernel accepts in order: the third is the one over. */
	int over = recv_some(held[2], buf, sizeof buf, 2000, &closed) == 0 && closed;
	CU_ASSERT_TRUE(over);
	size_t one = strlen(BODY_REPLY("", "hello")) - 6 + TLHTTP_DATE_LEN;
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(send_all(held[i], "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27), 0);
		CU_ASSERT_EQUAL(recv_n(held[i], buf, one), one);
	}
	usleep(100000); /* a shard publishes its counters when it parks */
	j = stats_json(s.pid);
	CU_ASSERT_PTR_NOT_NULL_FATAL(j);
	CU_ASSERT_EQUAL(prog_total(j, "conns", 0), 2);
	CU_ASSERT_EQUAL(prog_total(j, "conns_refused", 0), 1);
	CU_ASSERT_EQUAL(prog_total(j, "responses", 0), 2);
	cJSON_Delete(j);
	for (int i = 0; i < 3; i++)
		close(held[i]);
	srv_stop(&s);
	st_end(fds);
}

/* ---- access log ---- */

static void test_access_log(void)
{
	int fds = st_begin("tlhttp/access_log");
	struct srv s;
	char logp[400], buf[8192];
	int closed;

	snprintf(logp, sizeof logp, "%s/../access.log", tree);
	unlink(logp);
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, "--access-log", logp, NULL), 0);
	get_raw(s.port, "/a.txt", "", buf, sizeof buf);
	get_raw(s.port, "/nope?q=1", "", buf, sizeof buf);
	exchange(s.port, "HEAD /a.txt HTTP/1.0\r\n\r\n", 24, buf, sizeof buf, &closed);
	exchange(s.port, "BREW / HTTP/1.1\r\n\r\n", 19, buf, sizeof buf, &closed);
	srv_stop(&s);
	FILE *f = fopen(logp, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	static const char *const want[] = {
		"\"GET /a.txt HTTP/1.1\" 200 15", "\"GET /nope?q=1 HTTP/1.1\" 404 14",
		"\"HEAD /a.txt HTTP/1.0\" 200 0", "\"-\" 405 23",
	};
	char line[1024];
	int i = 0;
	while (fgets(line, sizeof line, f)) {
		int dd, yy, hh, mi, ss;
		char mon[4];
		/* 127.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "GET / HTTP/1.1" 200 5 */
		int ok = sscanf(line, "127.0.0.1 - - [%2d/%3s/%4d:%2d:%2d:%2d +0000] ", &dd, mon, &yy,
				&hh, &mi, &ss) == 6;
		if (i < 4)
			ok = ok && strstr(line, want[i]) && line[strlen(line) - 1] == '\n';
		if (!ok)
			fprintf(stderr, "  line %d: %s", i, line);
		CU_ASSERT_TRUE(ok);
		i++;
	}
	CU_ASSERT_EQUAL(i, 4);
	fclose(f);
	unlink(logp);

	/* A log that takes nothing (a FIFO nobody reads while the load runs):
	 * serving goes on, and every line is either written or dropped and
	 * counted. 50,000 answers are over 3 MB of log; the ring (1 MiB) and
	 * the pipe (64 KiB) hold a third of that. */
	CU_ASSERT_EQUAL(mkfifo(logp, 0600), 0);
	int rd = open(logp, O_RDONLY | O_NONBLOCK);
	CU_ASSERT_TRUE_FATAL(rd >= 0);
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello", "--access-log", logp, NULL), 0);
	char url[128], out[8192];
	size_t n;
	snprintf(url, sizeof url, "http://127.0.0.1:%u/", s.port);
	const char *h2[] = {"h2load", "--h1", "-n", "50000", "-c", "4", "-m", "32", url, NULL};
	CU_ASSERT_EQUAL(run(h2, out, sizeof out, &n, 1, 60), 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "50000 succeeded, 0 failed"));
	cJSON *j = stats_json(s.pid);
	CU_ASSERT_PTR_NOT_NULL(j);
	double dropped = j ? prog_total(j, "log_dropped", 0) : -1;
	double served = j ? prog_total(j, "responses", 0) : -1;
	cJSON_Delete(j);
	/* Now read it all: what the rings still hold reaches the file once
	 * the server stops, and then the writer closes it (EOF). */
	CU_ASSERT_EQUAL(srv_fds_settle(&s), s.fds);
	kill(s.pid, SIGTERM);
	uint64_t lines = 0;
	for (;;) {
		struct pollfd pf = {.fd = rd, .events = POLLIN};
		if (poll(&pf, 1, 10000) <= 0)
			break;
		ssize_t r = read(rd, buf, sizeof buf);
		if (r == 0 || (r < 0 && errno != EAGAIN))
			break;
		for (ssize_t k = 0; k < r; k++)
			lines += buf[k] == '\n';
	}
	int status = -1;
	CU_ASSERT_EQUAL(waitpid(s.pid, &status, 0), s.pid);
	CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(s.err);
	printf("\n  stuck log: %.0f answers, %.0f lines dropped, %llu written\n", served, dropped,
	       (unsigned long long)lines);
	CU_ASSERT_TRUE(served >= 50000 && dropped >= served - 17000);
	CU_ASSERT_EQUAL((double)lines + dropped, served);
	close(rd);
	unlink(logp);
	st_end(fds);
}


/* ---- HTTPS (--tls-cert, --tls-key) ---- */

static const char *certs_script; /* tests/tls-certs.sh, or NULL */
static char certs_dir[300];

static void make_certs(void)
{
	char cmd[800];

	snprintf(certs_dir, sizeof certs_dir, "/tmp/tlhttp-test-%d/certs", (int)getpid());
	snprintf(cmd, sizeof cmd, "sh '%s' '%s' >/dev/null 2>&1", certs_script, certs_dir);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
}

/* One line and exit status want, naming what: tlhttp refusing a TLS
 * option before it listens. */
static void tls_refused(const char *cert, const char *key, int want, const char *what)
{
	const char *argv[10] = {tlhttp_path, "--listen", "127.0.0.1:1", "--body", "x"};
	char out[4096];
	size_t n;
	int k = 5, lines = 0;

	if (cert) {
		argv[k++] = "--tls-cert";
		argv[k++] = cert;
	}
	if (key) {
		argv[k++] = "--tls-key";
		argv[k++] = key;
	}
	argv[k] = NULL;
	int rc = run(argv, out, sizeof out, &n, 1, 10);
	for (size_t j = 0; j < n; j++)
		lines += out[j] == '\n';
	if (rc != want || lines != 1 || strncmp(out, "tlhttp: ", 8) || !strstr(out, what))
		fprintf(stderr, "  --tls-cert %s --tls-key %s: status %d (want %d), output: %s", cert ? cert : "-",
			key ? key : "-", rc, want, out);
	CU_ASSERT_EQUAL(rc, want);
	CU_ASSERT_EQUAL(lines, 1);
	CU_ASSERT_TRUE(strncmp(out, "tlhttp: ", 8) == 0 && strstr(out, what) != NULL);
}

/* The certificate options refused with one line: one without the other
 * (usage, 2), and files that cannot serve (1, naming the file). */
static void test_https_refusals(const char *crt, const char *key)
{
	char bad[400], other[400], dir[400];
	FILE *f;

	tls_refused(crt, NULL, 2, "--tls-key");
	tls_refused(NULL, key, 2, "--tls-cert");
	snprintf(bad, sizeof bad, "%s/missing.pem", certs_dir);
	tls_refused(bad, key, 1, "missing.pem: No such file");
	tls_refused(crt, bad, 1, "missing.pem: No such file");
	snprintf(other, sizeof other, "%s/other.key", certs_dir);
	tls_refused(crt, other, 1, "the key does not match the certificate");
	snprintf(bad, sizeof bad, "%s/garbage.pem", certs_dir);
	f = fopen(bad, "w");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	fputs("not a certificate\n", f);
	fclose(f);
	tls_refused(bad, key, 1, "garbage.pem: no PEM certificate");
	tls_refused(crt, bad, 1, "garbage.pem: no PEM private key");
	tls_refused(key, key, 1, "server.key: no PEM certificate");
	snprintf(dir, sizeof dir, "%s", certs_dir);
	tls_refused(dir, key, 1, "not a regular file");
}

/* openssl s_client: TLS 1.3 and 1.2, the certificate verified, ALPN
 * http/1.1, two pipelined requests answered, the second with
 * Connection: close, and then the session's close. */
static void test_https_s_client(uint16_t port, const char *ca)
{
	char cmd[1200], out[1 << 16];
	size_t n;

	for (int v12 = 0; v12 < 2; v12++) {
		/* s_client's own time, from its start to its exit. A sleep
		 * keeps s_client's input open (so only the server's close
		 * ends it early), and is killed once s_client has left, so
		 * that the pipeline need not wait it out. */
		snprintf(cmd, sizeof cmd,
			 "p=$(mktemp); (printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
			 "GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'; "
			 "sleep 3 & echo $! >\"$p\"; wait) | "
			 "{ t0=$(date +%%s%%N); openssl s_client -connect 127.0.0.1:%u -servername localhost "
			 "-CAfile '%s' -verify_return_error -alpn http/1.1 %s 2>&1; rc=$?; "
			 "echo \"s_client rc=$rc ms=$(( ($(date +%%s%%N) - t0) / 1000000 ))\"; "
			 "kill $(cat \"$p\") 2>/dev/null; rm -f \"$p\"; }",
			 port, ca, v12 ? "-tls1_2" : "-tls1_3");
		const char *sh[] = {"sh", "-c", cmd, NULL};
		int rc = run(sh, out, sizeof out, &n, 1, 20);
		const char *tail = strstr(out, "s_client rc=");
		int src = -1;
		long ms = -1;
		if (tail && sscanf(tail, "s_client rc=%d ms=%ld", &src, &ms) != 2)
			src = -1;
		int answers = 0;
		for (const char *p = out; (p = strstr(p, "HTTP/1.1 200 OK\r\n")) != NULL; p++)
			answers++;
		int ok = rc == 0 && src == 0 && answers == 2 && strstr(out, "hello over tls") &&
			 strstr(out, "Verify return code: 0 (ok)") && strstr(out, "ALPN protocol: http/1.1") &&
			 strstr(out, v12 ? "Protocol  : TLSv1.2" : "TLSv1.3") && ms >= 0 && ms < 2500;
		if (!ok)
			fprintf(stderr, "  s_client %s: status %d, %d answers: %.2000s\n",
				v12 ? "-tls1_2" : "-tls1_3", rc, answers, out);
		CU_ASSERT_EQUAL(src, 0);
		CU_ASSERT_EQUAL(answers, 2);
		CU_ASSERT_TRUE(strstr(out, "hello over tls") != NULL);
		CU_ASSERT_TRUE(strstr(out, "Verify return code: 0 (ok)") != NULL);
		CU_ASSERT_TRUE(strstr(out, "ALPN protocol: http/1.1") != NULL);
		CU_ASSERT_TRUE(strstr(out, v12 ? "Protocol  : TLSv1.2" : "TLSv1.3") != NULL);
		/* the server closed after the second answer: s_client left
		 * before its input's end (the sleep) */
		CU_ASSERT_TRUE(ms >= 0 && ms < 2500);
	}
}

/* curl --cacert over HTTPS: bodies, files byte for byte, a range,
 * keep-alive, plain HTTP refused, a client that does not trust the
 * certificate counted as a failed handshake; openssl s_client; wrk over
 * HTTPS; the certificate options' refusals. */
static void test_https(void)
{
	int fds = st_begin("tlhttp/https");
	struct srv s;
	char url[128], url2[128], ca[400], crt[400], key[400], out[1 << 19], fmt[64];
	size_t n;

	if (!certs_script) {
		CU_FAIL("test_tlhttp was given no certificate script (its third argument)");
		st_end(fds);
		return;
	}
	make_certs();
	snprintf(ca, sizeof ca, "%s/ca.pem", certs_dir);
	snprintf(crt, sizeof crt, "%s/server.pem", certs_dir);
	snprintf(key, sizeof key, "%s/server.key", certs_dir);
	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--body", "hello over tls", "--tls-cert", crt, "--tls-key", key, NULL), 0);
	snprintf(url, sizeof url, "https://localhost:%u/", s.port);
	const char *get[] = {"curl", "-sS", "--cacert", ca, url, NULL};
	CU_ASSERT_EQUAL(run(get, out, sizeof out, &n, 1, 20), 0);
	CU_ASSERT_TRUE(n == 14 && !memcmp(out, "hello over tls", 14));
	/* two requests on one connection (curl reuses it: one connect) */
	snprintf(fmt, sizeof fmt, "%%{num_connects}\\n");
	const char *two[] = {"curl", "-sS", "--cacert", ca, "-o", "/dev/null", "-o", "/dev/null", "-w", fmt,
			     url, url, NULL};
	CU_ASSERT_EQUAL(run(two, out, sizeof out, &n, 1, 20), 0);
	CU_ASSERT_TRUE(strstr(out, "1\n0\n") != NULL);
	/* plain HTTP to it is no TLS: refused */
	snprintf(url2, sizeof url2, "http://localhost:%u/", s.port);
	const char *plain[] = {"curl", "-sS", url2, NULL};
	CU_ASSERT_NOT_EQUAL(run(plain, out, sizeof out, &n, 1, 20), 0);
	/* a client that does not trust the certificate ends the handshake */
	const char *untrusting[] = {"curl", "-sS", url, NULL};
	CU_ASSERT_NOT_EQUAL(run(untrusting, out, sizeof out, &n, 1, 20), 0);
	CU_ASSERT_TRUE(strstr(out, "certificate") != NULL);
	cJSON *j = stats_json(s.pid);
	CU_ASSERT_PTR_NOT_NULL(j);
	if (j) {
		/* srv_start's probe (a connection closed before any byte),
		 * the plain request and the untrusting client */
		double tf = prog_total(j, "tls_failed", 0);
		if (tf != 3)
			fprintf(stderr, "  tls_failed %g, want 3\n", tf);
		CU_ASSERT_EQUAL(tf, 3);
		cJSON_Delete(j);
	}
	test_https_s_client(s.port, ca);
	CU_ASSERT_TRUE(wrk_ok(url, "a body over HTTPS"));
	srv_stop(&s);
	test_https_refusals(crt, key);

	CU_ASSERT_EQUAL_FATAL(srv_start(&s, "--root", tree, "--tls-cert", crt, "--tls-key", key, NULL), 0);
	/* 300 KiB: read and written through TLS in records, not spliced */
	snprintf(url, sizeof url, "https://localhost:%u/big.bin", s.port);
	const char *gb[] = {"curl", "-sS", "--cacert", ca, url, NULL};
	CU_ASSERT_EQUAL(run(gb, out, sizeof out, &n, 0, 20), 0);
	CU_ASSERT_TRUE(n == BIG_SIZE && !memcmp(out, big, BIG_SIZE));
	const char *rg[] = {"curl", "-sS", "--cacert", ca, "-r", "65000-200000", url, NULL};
	CU_ASSERT_EQUAL(run(rg, out, sizeof out, &n, 0, 20), 0);
	CU_ASSERT_TRUE(n == 135001 && !memcmp(out, big + 65000, 135001));
	snprintf(url2, sizeof url2, "https://localhost:%u/a.txt", s.port);
	const char *ga[] = {"curl", "-sS", "--cacert", ca, url2, NULL};
	CU_ASSERT_EQUAL(run(ga, out, sizeof out, &n, 0, 20), 0);
	CU_ASSERT_TRUE(n == sizeof a_txt - 1 && !memcmp(out, a_txt, n));
	CU_ASSERT_TRUE(wrk_ok(url2, "a file over HTTPS"));
	CU_ASSERT_TRUE(wrk_ok(url, "a 300 KiB file over HTTPS"));
	printf("\n");
	srv_stop(&s);
	st_end(fds);
}

int main(int argc, char **argv)
{
	CU_pSuite s;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: test_tlhttp PATH-TO-TLHTTP PATH-TO-TLSHARD [TLS-CERTS-SCRIPT]\n");
		return 2;
	}
	tlhttp_path = argv[1];
	tlshard_path = argv[2];
	certs_script = argc > 3 ? argv[3] : NULL;
	signal(SIGPIPE, SIG_IGN);
	make_tree();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("tlhttp", NULL, NULL);
	st_add(s, "cli", test_cli);
	st_add(s, "body_curl", test_body_curl);
	st_add(s, "pipelined", test_pipelined);
	st_add(s, "http10", test_http10);
	st_add(s, "refusals", test_refusals);
	st_add(s, "linger", test_linger);
	st_add(s, "files", test_files);
	st_add(s, "file_changes", test_file_changes);
	st_add(s, "ranges", test_ranges);
	st_add(s, "not_modified", test_not_modified);
	st_add(s, "preconditions", test_preconditions);
	st_add(s, "preconditions_curl", test_preconditions_curl);
	st_add(s, "preconditions_body", test_preconditions_body);
	st_add(s, "timeouts", test_timeouts);
	st_add(s, "drain", test_drain);
	st_add(s, "load", test_load);
	st_add(s, "stats", test_stats);
	st_add(s, "access_log", test_access_log);
	if (certs_script)
		st_add(s, "https", test_https);
	rc = st_run();
	remove_tree();
	return rc;
}
