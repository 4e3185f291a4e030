/* bench/zc_threshold.c: where IORING_OP_SEND_ZC starts to beat IORING_OP_SEND on this machine's TCP path. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
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

/*
 * One TCP connection to HOST (default 127.0.0.1): a sender thread writes
 * SIZE-byte messages for SECS seconds through io_uring, one send in flight
 * (as the driver keeps one per socket), with IORING_OP_SEND or
 * IORING_OP_SEND_ZC; a receiver thread drains it. Zero-copy buffers rotate
 * and one is reused only after its notification CQE. For each size and mode
 * it prints throughput and CPU per MiB: the sender thread's, and the whole
 * process's (which also holds the receive side on loopback).
 *
 *   zc_threshold [-s SECS] [-c SENDER_CPU] [-r RECEIVER_CPU] [-h HOST -p PORT]
 *
 * With -h/-p it connects to a remote sink (e.g. `socat -u TCP-LISTEN:PORT,fork
 * /dev/null` on the other machine) instead of its own receiver.
 */

#define NBUF 16
/* Newer than liburing 2.3's header (Linux 6.2): ask the notification to say
 * whether the kernel had to copy after all. */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#define NOTIF_COPIED (1u << 31)

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

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

struct sink {
	int fd, cpu;
	unsigned long long bytes;
};

static void *drain(void *arg)
{
	struct sink *s = arg;
	pin(s->cpu);
	static char buf[1 << 20];
	for (;;) {
		ssize_t n = recv(s->fd, buf, sizeof buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		s->bytes += (unsigned long long)n;
	}
	return NULL;
}

struct result {
	double mib_s, send_cpu_us_per_mib, proc_cpu_us_per_mib;
	unsigned long long short_sends, copied;
};

static int run(const char *host, int port, int zc, size_t size, double secs, int scpu, int rcpu,
	       struct result *out)
{
	int one = 1, lfd = -1, cfd, sfd = -1;
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof a;
	pthread_t t;
	struct sink sk = {.cpu = rcpu};
	if (!host) {
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
		    getsockname(lfd, (struct sockaddr *)&a, &alen))
			return -errno;
	} else {
		inet_pton(AF_INET, host, &a.sin_addr);
		a.sin_port = htons((uint16_t)port);
	}
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(cfd, (struct sockaddr *)&a, sizeof a))
		return -errno;
	if (!host) {
		sfd = accept(lfd, NULL, NULL);
		sk.fd = sfd;
		pthread_create(&t, NULL, drain, &sk);
	}
	pin(scpu);

	struct io_uring ring;
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	int r = io_uring_queue_init_params(64, &ring, &p);
	if (r < 0)
		return r;
	uint8_t *bufs[NBUF];
	int notif_wait[NBUF] = {0};
	for (int i = 0; i < NBUF; i++) {
		bufs[i] = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
		memset(bufs[i], i, size); /* fault the pages in before timing */
	}
	unsigned long long sent = 0, short_sends = 0, copied = 0;
	double w0 = now_s(CLOCK_MONOTONIC), t0 = now_s(CLOCK_THREAD_CPUTIME_ID), p0 = proc_cpu_s();
	int b = 0, err = 0;
	while (!err && now_s(CLOCK_MONOTONIC) - w0 < secs) {
		/* The buffer the kernel may still read waits for its notification. */
		while (notif_wait[b] && !err) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&ring, &cqe) < 0)
				err = 1;
			else {
				if (cqe->flags & IORING_CQE_F_NOTIF) {
					notif_wait[cqe->user_data]--;
					if ((unsigned)cqe->res & NOTIF_COPIED)
						copied++;
				}
				io_uring_cqe_seen(&ring, cqe);
			}
		}
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		if (zc) {
			io_uring_prep_send_zc(sqe, cfd, bufs[b], size, MSG_WAITALL | MSG_NOSIGNAL,
					      IORING_SEND_ZC_REPORT_USAGE);
			notif_wait[b]++;
		} else {
			io_uring_prep_send(sqe, cfd, bufs[b], size, MSG_WAITALL | MSG_NOSIGNAL);
		}
		io_uring_sqe_set_data64(sqe, (uint64_t)b);
		io_uring_submit(&ring);
		/* Wait for the send's own CQE (notifications may come first). */
		for (int got = 0; !got && !err;) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&ring, &cqe) < 0) {
				err = 1;
				break;
			}
			if (cqe->flags & IORING_CQE_F_NOTIF) {
				notif_wait[cqe->user_data]--;
				if ((unsigned)cqe->res & NOTIF_COPIED)
					copied++;
			} else {
				got = 1;
				if (cqe->res < 0)
					err = 1;
				else {
					sent += (unsigned long long)cqe->res;
					short_sends += (size_t)cqe->res < size;
				}
				if (zc && !(cqe->flags & IORING_CQE_F_MORE))
					notif_wait[cqe->user_data]--; /* no notification follows */
			}
			io_uring_cqe_seen(&ring, cqe);
		}
		b = (b + 1) % NBUF;
	}
	for (int i = 0; i < NBUF; i++)
		while (notif_wait[i] > 0) {
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&ring, &cqe) < 0)
				break;
			if (cqe->flags & IORING_CQE_F_NOTIF)
				notif_wait[cqe->user_data]--;
			io_uring_cqe_seen(&ring, cqe);
		}
	double w1 = now_s(CLOCK_MONOTONIC), t1 = now_s(CLOCK_THREAD_CPUTIME_ID), p1 = proc_cpu_s();
	close(cfd);
	if (!host) {
		pthread_join(t, NULL);
		close(sfd);
		close(lfd);
	}
	io_uring_queue_exit(&ring);
	for (int i = 0; i < NBUF; i++)
		free(bufs[i]);
	if (err)
		return -EIO;
	double mib = (double)sent / (1024.0 * 1024.0);
	out->mib_s = mib / (w1 - w0);
	out->send_cpu_us_per_mib = (t1 - t0) * 1e6 / mib;
	out->proc_cpu_us_per_mib = (p1 - p0) * 1e6 / mib;
	out->short_sends = short_sends;
	out->copied = copied;
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
	double secs = 1.0;
	int scpu = -1, rcpu = -1, port = 0, opt;
	const char *host = NULL;
	while ((opt = getopt(argc, argv, "s:c:r:h:p:")) != -1) {
		switch (opt) {
		case 's': secs = atof(optarg); break;
		case 'c': scpu = atoi(optarg); break;
		case 'r': rcpu = atoi(optarg); break;
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: zc_threshold [-s SECS] [-c SENDER_CPU] [-r RECEIVER_CPU] "
					"[-h HOST -p PORT]\n");
			return 2;
		}
	}
	printf("%-8s %10s %10s %12s %12s %12s %12s %8s\n", "size", "send MiB/s", "zc MiB/s",
	       "send cpu/MiB", "zc cpu/MiB", "proc send", "proc zc", "zc/send");
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		struct result s, z;
		int r = run(host, port, 0, sizes[i], secs, scpu, rcpu, &s);
		if (r == 0)
			r = run(host, port, 1, sizes[i], secs, scpu, rcpu, &z);
		if (r < 0) {
			fprintf(stderr, "zc_threshold: %zu bytes: %s\n", sizes[i], strerror(-r));
			return 1;
		}
		/* The figure that decides: process CPU per MiB (lower is better). */
		printf("%-8zu %10.0f %10.0f %10.1fus %10.1fus %10.1fus %10.1fus %8.2f%s\n", sizes[i],
		       s.mib_s, z.mib_s, s.send_cpu_us_per_mib, z.send_cpu_us_per_mib,
		       s.proc_cpu_us_per_mib, z.proc_cpu_us_per_mib,
		       z.proc_cpu_us_per_mib / s.proc_cpu_us_per_mib,
		       z.copied ? "  (zc copied)" : "");
	}
	return 0;
}
