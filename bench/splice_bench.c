/* bench/splice_bench.c: CPU per GiB forwarded between two TCP sockets: copy through user space, splice(2) on readiness, IORING_OP_SPLICE, and io_uring polls with splice(2). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <liburing.h>
#include <turnloop/loop.h>

/*
 * A producer thread writes BYTES into a loopback TCP connection, a
 * forwarder moves them from the accepted socket (src) to a second
 * connection (dst), and a consumer thread reads that one and checks the
 * count. Only the forwarder changes between modes:
 *
 *   rw          read(2) into a buffer of SIZE, write(2) it out; poll(2) on EAGAIN
 *   splice      splice(2) src -> pipe -> dst, SPLICE_F_NONBLOCK | SPLICE_F_MOVE,
 *               poll(2) on EAGAIN (what a readiness driver does; the write
 *               into dst with SIGPIPE blocked around it, as the drivers do)
 *   uring-rw    IORING_OP_RECV into a buffer, IORING_OP_SEND of what came
 *   uring-splice IORING_OP_SPLICE src -> pipe, then IORING_OP_SPLICE pipe -> dst
 *               (not linked: a short first half would cancel the second); the
 *               sockets are non-blocking, as the driver's, so the splice
 *               answers -EAGAIN when there is nothing and a poll follows
 *   uring-poll  splice(2) as in "splice", but EAGAIN waits in an
 *               IORING_OP_POLL_ADD (what the io_uring driver does)
 *   loop-rw     a turnloop loop (TL_DRIVER picks its driver): tl_read_start
 *               into leases of SIZE, each written out with tl_write
 *   loop-splice the same loop with tl_splice of SIZE at a time, pipes of SIZE
 *
 * The pipe (or buffer) is SIZE bytes. For each mode and size it prints the
 * throughput and the CPU time per GiB: the whole process's (io_uring's
 * io-wq workers are threads of the process and count there), and the
 * forwarder's share (process minus the producer and consumer threads),
 * and those two threads' own. The best of ROUNDS runs (least process CPU)
 * counts.
 *
 *   splice_bench [-g GIB] [-r ROUNDS] [-m MODE] [-s SIZE]
 *
 * Built by meson (build/bench/splice_bench), as it links turnloop.
 */

enum { M_RW, M_SPLICE, M_URW, M_USPLICE, M_UPOLL, M_LRW, M_LSPLICE, M_N };
static const char *const mode_names[M_N] = {"rw",         "splice",  "uring-rw",   "uring-splice",
					    "uring-poll", "loop-rw", "loop-splice"};

static double now_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double proc_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what)
{
	fprintf(stderr, "splice_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

struct side {
	int fd;
	unsigned long long bytes;
	double cpu; /* the thread's CPU seconds */
};

static void *produce(void *arg)
{
	struct side *s = arg;
	static char buf[1 << 20];
	memset(buf, 0x5a, sizeof buf);
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	unsigned long long left = s->bytes;
	while (left) {
		size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
		ssize_t n = send(s->fd, buf, k, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("producer send");
		left -= (unsigned long long)n;
	}
	s->cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	shutdown(s->fd, SHUT_WR);
	return NULL;
}

static void *consume(void *arg)
{
	struct side *s = arg;
	static char buf[1 << 20];
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	for (;;) {
		ssize_t n = recv(s->fd, buf, sizeof buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("consumer recv");
		if (n == 0)
			break;
		s->bytes += (unsigned long long)n;
	}
	s->cpu = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

/* splice(2) into a socket, as the drivers make it: with SIGPIPE blocked
 * around the call (drivers/splice_io.c), which costs two sigprocmask calls. */
static ssize_t splice_out(int rfd, int fd, size_t len)
{
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	ssize_t n = splice(rfd, NULL, fd, NULL, len, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return n;
}

static void wait_fd(int fd, short ev)
{
	struct pollfd p = {.fd = fd, .events = ev};
	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			die("poll");
}

/* ---- forwarders: move everything from src to dst, return the bytes ---- */

static unsigned long long fwd_rw(int src, int dst, size_t size)
{
	static char *buf;
	static size_t cap;
	if (cap < size) {
		free(buf);
		buf = malloc(size);
		cap = size;
		memset(buf, 0, size);
	}
	unsigned long long total = 0;
	for (;;) {
		ssize_t n = read(src, buf, size);
		if (n < 0 && errno == EAGAIN) {
			wait_fd(src, POLLIN);
			continue;
		}
		if (n < 0)
			die("read");
		if (n == 0)
			return total;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(dst, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EAGAIN) {
				wait_fd(dst, POLLOUT);
				continue;
			}
			if (w < 0)
				die("write");
			off += w;
		}
		total += (unsigned long long)n;
	}
}

static unsigned long long fwd_splice(int src, int dst, const int p[2], size_t size)
{
	unsigned long long total = 0;
	const unsigned fl = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
	for (;;) {
		ssize_t n = splice(src, NULL, p[1], NULL, size, fl);
		if (n < 0 && errno == EAGAIN) {
			wait_fd(src, POLLIN);
			continue;
		}
		if (n < 0)
			die("splice in");
		if (n == 0)
			return total;
		for (ssize_t left = n; left > 0;) {
			ssize_t w = splice_out(p[0], dst, (size_t)left);
			if (w < 0 && errno == EAGAIN) {
				wait_fd(dst, POLLOUT);
				continue;
			}
			if (w <= 0)
				die("splice out");
			left -= w;
		}
		total += (unsigned long long)n;
	}
}

static struct io_uring_cqe *wait_one(struct io_uring *r)
{
	struct io_uring_cqe *c;
	int e;
	while ((e = io_uring_wait_cqe(r, &c)) == -EINTR)
		;
	if (e < 0) {
		errno = -e;
		die("io_uring_wait_cqe");
	}
	return c;
}

/* Submit one SQE and return its CQE's result. */
static int uring_one(struct io_uring *r)
{
	io_uring_submit(r);
	struct io_uring_cqe *c = wait_one(r);
	int res = c->res;
	io_uring_cqe_seen(r, c);
	return res;
}

static unsigned long long fwd_urw(struct io_uring *r, int src, int dst, size_t size)
{
	static char *buf;
	static size_t cap;
	if (cap < size) {
		free(buf);
		buf = malloc(size);
		cap = size;
		memset(buf, 0, size);
	}
	unsigned long long total = 0;
	for (;;) {
		io_uring_prep_recv(io_uring_get_sqe(r), src, buf, size, 0);
		int n = uring_one(r);
		if (n < 0) {
			errno = -n;
			die("uring recv");
		}
		if (n == 0)
			return total;
		io_uring_prep_send(io_uring_get_sqe(r), dst, buf, (size_t)n, MSG_WAITALL | MSG_NOSIGNAL);
		int w = uring_one(r);
		if (w != n) {
			errno = w < 0 ? -w : EIO;
			die("uring send");
		}
		total += (unsigned long long)n;
	}
}

static unsigned long long fwd_usplice(struct io_uring *r, int src, int dst, const int p[2],
				      size_t size)
{
	unsigned long long total = 0;
	for (;;) {
		/* Not linked: a short splice (the usual case) would cancel
		 * the second half of the link. */
		io_uring_prep_splice(io_uring_get_sqe(r), src, -1, p[1], -1, (unsigned)size,
				     SPLICE_F_MOVE);
		int in = uring_one(r);
		if (in == -EAGAIN) {
			/* Our sockets are non-blocking, as the driver's are. */
			io_uring_prep_poll_add(io_uring_get_sqe(r), src, POLLIN);
			uring_one(r);
			continue;
		}
		if (in < 0) {
			errno = -in;
			die("uring splice in");
		}
		if (in == 0)
			return total;
		for (int left = in; left > 0;) {
			io_uring_prep_splice(io_uring_get_sqe(r), p[0], -1, dst, -1, (unsigned)left,
					     SPLICE_F_MOVE);
			int w = uring_one(r);
			if (w == -EAGAIN) {
				io_uring_prep_poll_add(io_uring_get_sqe(r), dst, POLLOUT);
				uring_one(r);
				continue;
			}
			if (w <= 0) {
				errno = w < 0 ? -w : EIO;
				die("uring splice out");
			}
			left -= w;
		}
		total += (unsigned long long)in;
	}
}

/* splice(2) first; on EAGAIN a poll through the ring, then splice again. */
static unsigned long long fwd_upoll(struct io_uring *r, int src, int dst, const int p[2],
				    size_t size)
{
	unsigned long long total = 0;
	const unsigned fl = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
	for (;;) {
		ssize_t n = splice(src, NULL, p[1], NULL, size, fl);
		if (n < 0 && errno == EAGAIN) {
			io_uring_prep_poll_add(io_uring_get_sqe(r), src, POLLIN);
			uring_one(r);
			continue;
		}
		if (n < 0)
			die("splice in");
		if (n == 0)
			return total;
		for (ssize_t left = n; left > 0;) {
			ssize_t w = splice_out(p[0], dst, (size_t)left);
			if (w < 0 && errno == EAGAIN) {
				io_uring_prep_poll_add(io_uring_get_sqe(r), dst, POLLOUT);
				uring_one(r);
				continue;
			}
			if (w <= 0)
				die("splice out");
			left -= w;
		}
		total += (unsigned long long)n;
	}
}

/* ---- one run ---- */

static int listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof *a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(a, 0, sizeof *a);
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof *a) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)a, &len))
		die("listen");
	return fd;
}

static int dial(const struct sockaddr_in *a)
{
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)a, sizeof *a))
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* ---- the same through a turnloop loop ---- */

static void must(int rc, const char *what)
{
	if (rc < 0) {
		errno = -rc;
		die(what);
	}
}

struct lrig {
	tl_loop *l;
	tl_handle lis, src, dst;
};

/* Turn until op's terminal: its result. */
static int64_t turn_for(tl_loop *l, tl_op op, tl_completion *c)
{
	for (;;) {
		tl_completion out[16];
		int n = tl_turn(l, -1, out, 16, NULL);
		must(n, "tl_turn");
		for (int i = 0; i < n; i++)
			if (out[i].op.v == op.v && (out[i].flags & TL_F_TERMINAL)) {
				if (c)
					*c = out[i];
				return out[i].result;
			}
	}
}

/* The loop's two streams: src accepted from the producer (dialled by the
 * caller once *a1 is set), dst connected to the consumer's listener a2. */
static void lrig_up(struct lrig *r, size_t size, struct sockaddr_in *a1, int *prod_fd,
		    const struct sockaddr_in *a2, int l2, int *cons_fd)
{
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.pooled_buffers = 16;
	cfg.pooled_buffer_size = (uint32_t)size;
	cfg.pipes = 1;
	cfg.pipe_size = (uint32_t)size;
	must(tl_loop_new(&r->l, &cfg), "tl_loop_new");
	tl_addr a, la, ca;
	tl_addr_parse(&a, "127.0.0.1", 0);
	must(tl_tcp_listen(r->l, &a, NULL, &r->lis), "tl_tcp_listen");
	must(tl_local_addr(r->l, r->lis, &la), "tl_local_addr");
	memcpy(a1, &la.in, sizeof *a1);
	*prod_fd = dial(a1);
	tl_op op;
	tl_completion c;
	must(tl_accept(r->l, r->lis, 1, &op), "tl_accept");
	must((int)turn_for(r->l, op, &c), "accept");
	r->src = c.u.accept.conn;
	memset(&ca, 0, sizeof ca);
	memcpy(&ca.in, a2, sizeof *a2);
	must(tl_tcp_connect(r->l, &ca, 0, 2, &r->dst, &op), "tl_tcp_connect");
	must((int)turn_for(r->l, op, NULL), "connect");
	*cons_fd = accept4(l2, NULL, NULL, SOCK_CLOEXEC);
	if (*cons_fd < 0)
		die("accept");
}

static void lrig_down(struct lrig *r)
{
	tl_close_all(r->l, 0);
	tl_completion out[16];
	while (tl_alive(r->l))
		tl_turn(r->l, 10000000, out, 16, NULL);
	must(tl_loop_close(r->l), "tl_loop_close");
}

/* Forward src to dst until src's end, then shut dst down: the bytes. */
static unsigned long long fwd_loop(struct lrig *r, int splicing, size_t size)
{
	tl_loop *l = r->l;
	unsigned long long total = 0;
	tl_op op, sh = TL_OP_NONE;
	int ended = 0;
	if (splicing)
		must(tl_splice(l, r->src, r->dst, (uint32_t)size, 0, &op), "tl_splice");
	else
		must(tl_read_start(l, r->src, 0, &op), "tl_read_start");
	for (;;) {
		tl_completion out[64];
		int n = tl_turn(l, -1, out, 64, NULL);
		must(n, "tl_turn");
		for (int i = 0; i < n; i++) {
			tl_completion *x = &out[i];
			if (sh.v && x->op.v == sh.v)
				return total;
			if (x->kind == TL_K_WRITE) {
				must((int)x->result, "tl_write");
				total += (unsigned long long)x->result;
				tl_lease_release(l, (uint32_t)x->token);
				continue;
			}
			must((int)x->result, splicing ? "splice" : "read");
			if (x->result > 0 && splicing) {
				total += (unsigned long long)x->result;
				must(tl_splice(l, r->src, r->dst, (uint32_t)size, 0, &op), "tl_splice");
			} else if (x->result > 0) {
				must(tl_write(l, r->dst, x->u.read.lease.data, (uint32_t)x->result,
					      x->u.read.lease.id, &op),
				     "tl_write");
			} else if (!ended && (x->flags & TL_F_TERMINAL)) {
				/* src's end: after the writes queued before it. */
				ended = 1;
				must(tl_shutdown(l, r->dst, 0, &sh), "tl_shutdown");
			}
		}
	}
}

struct result {
	double gib_s, proc_s_gib, fwd_s_gib, prod_s_gib, cons_s_gib;
};

static void run(int mode, size_t size, unsigned long long bytes, struct result *out)
{
	struct sockaddr_in a1, a2;
	int l1 = -1, l2 = listener(&a2), src = -1, dst = -1;
	struct side prod = {.bytes = bytes}, cons = {0};
	struct lrig lr;
	if (mode >= M_LRW) {
		lrig_up(&lr, size, &a1, &prod.fd, &a2, l2, &cons.fd);
	} else {
		l1 = listener(&a1);
		prod.fd = dial(&a1);
		cons.fd = dial(&a2);
		src = accept4(l1, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		dst = accept4(l2, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (src < 0 || dst < 0)
			die("accept");
	}
	int p[2] = {-1, -1};
	if (mode == M_SPLICE || mode == M_USPLICE || mode == M_UPOLL) {
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
			die("pipe2");
		if (fcntl(p[1], F_SETPIPE_SZ, (int)size) < 0)
			die("F_SETPIPE_SZ");
	}
	struct io_uring ring;
	int uring = mode == M_URW || mode == M_USPLICE || mode == M_UPOLL;
	if (uring) {
		struct io_uring_params prm;
		memset(&prm, 0, sizeof prm);
		prm.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
		int e = io_uring_queue_init_params(8, &ring, &prm);
		if (e < 0) {
			errno = -e;
			die("io_uring_queue_init");
		}
	}
	pthread_t tp, tc;
	double w0 = now_s(CLOCK_MONOTONIC), c0 = proc_cpu_s();
	pthread_create(&tc, NULL, consume, &cons);
	pthread_create(&tp, NULL, produce, &prod);
	unsigned long long moved = 0;
	switch (mode) {
	case M_RW:
		moved = fwd_rw(src, dst, size);
		break;
	case M_SPLICE:
		moved = fwd_splice(src, dst, p, size);
		break;
	case M_URW:
		moved = fwd_urw(&ring, src, dst, size);
		break;
	case M_USPLICE:
		moved = fwd_usplice(&ring, src, dst, p, size);
		break;
	case M_UPOLL:
		moved = fwd_upoll(&ring, src, dst, p, size);
		break;
	default:
		moved = fwd_loop(&lr, mode == M_LSPLICE, size);
		break;
	}
	if (dst >= 0)
		shutdown(dst, SHUT_WR);
	pthread_join(tp, NULL);
	pthread_join(tc, NULL);
	double w1 = now_s(CLOCK_MONOTONIC), c1 = proc_cpu_s();
	if (uring)
		io_uring_queue_exit(&ring);
	if (mode >= M_LRW)
		lrig_down(&lr);
	if (moved != bytes || cons.bytes != bytes) {
		fprintf(stderr, "splice_bench: %s moved %llu, consumer got %llu, want %llu\n",
			mode_names[mode], moved, cons.bytes, bytes);
		exit(1);
	}
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0)
			close(p[i]);
	if (src >= 0) {
		close(src);
		close(dst);
		close(l1);
	}
	close(prod.fd);
	close(cons.fd);
	close(l2);
	double gib = (double)bytes / (double)(1ull << 30);
	out->gib_s = gib / (w1 - w0);
	out->proc_s_gib = (c1 - c0) / gib;
	out->fwd_s_gib = (c1 - c0 - prod.cpu - cons.cpu) / gib;
	out->prod_s_gib = prod.cpu / gib;
	out->cons_s_gib = cons.cpu / gib;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {65536, 262144, 1048576};
	double gib = 1.0;
	int rounds = 3, only = -1, opt;
	size_t only_size = 0;
	while ((opt = getopt(argc, argv, "g:r:m:s:")) != -1) {
		switch (opt) {
		case 'g': gib = atof(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 's': only_size = (size_t)strtoul(optarg, NULL, 0); break;
		case 'm':
			for (int m = 0; m < M_N; m++)
				if (!strcmp(optarg, mode_names[m]))
					only = m;
			if (only < 0) {
				fprintf(stderr, "splice_bench: no mode %s\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: splice_bench [-g GIB] [-r ROUNDS] [-m MODE] [-s SIZE]\n");
			return 2;
		}
	}
	if (gib <= 0 || rounds < 1) {
		fprintf(stderr, "splice_bench: -g and -r must be positive\n");
		return 2;
	}
	unsigned long long bytes = (unsigned long long)(gib * (double)(1ull << 30));
	{
		tl_loop *probe;
		if (tl_loop_new(&probe, NULL) == 0) {
			printf("loop modes on the %s driver\n", tl_loop_driver(probe));
			tl_loop_close(probe);
		}
	}
	printf("%-13s %8s %8s %14s %14s %9s %9s\n", "mode", "size", "GiB/s", "proc CPU s/GiB",
	       "fwd CPU s/GiB", "producer", "consumer");
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		if (only_size && sizes[i] != only_size)
			continue;
		for (int m = 0; m < M_N; m++) {
			if (only >= 0 && m != only)
				continue;
			struct result best = {0}, r;
			/* Rounds of one mode interleave with nothing else; the best
			 * (least CPU) run is the one least disturbed. */
			for (int k = 0; k < rounds; k++) {
				run(m, sizes[i], bytes, &r);
				if (k == 0 || r.proc_s_gib < best.proc_s_gib)
					best = r;
			}
			printf("%-13s %7zuK %8.2f %14.3f %14.3f %9.3f %9.3f\n", mode_names[m],
			       sizes[i] / 1024, best.gib_s, best.proc_s_gib, best.fwd_s_gib,
			       best.prod_s_gib, best.cons_s_gib);
		}
	}
	return 0;
}
