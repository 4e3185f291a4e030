/* tools/tlproxy/takeover.c: the process side of a live takeover: the old process's handover socket and its thread, the new process's receiving of the listening sockets and of the connections, and the messages between those threads and the shards. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "takeover.h"
#include "world.h"

/* A record waiting for the old side's thread to send it, or sent and not
 * yet acknowledged (its descriptors stay open until then). */
struct qrec {
	struct qrec *next;
	int nfds, fds[2];
	uint32_t len;
	uint8_t data[];
};

/* A client of the handover socket that has not said HELLO yet. */
struct peer {
	int fd;
	pid_t pid;
	uint64_t t0;
	uint32_t got;
	uint8_t b[TLP_HO_HDR + 8];
};
#define MAX_PEERS 16

static struct {
	const char *serve_path;    /* --handover-socket */
	const char *take_path;     /* --takeover */
	uint64_t deadline_ns;      /* --handover-deadline */
	int lfd;                   /* the handover socket */
	ino_t lino;                /* its inode: removed only if still ours */
	char tmp_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* its name until published */
	int published;             /* renamed to serve_path */
	int tfd;                   /* new side: the conversation with the old process */
	pthread_t th_srv, th_rx;   /* old side's server, new side's receiver */
	int srv_started, rx_started;
	_Atomic int stop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct qrec *head, *tail;  /* under mu */
	uint32_t listen_acks, go_acks, stop_acks, fin_acks; /* shards that answered; under mu */
	_Atomic int64_t pending;   /* connections marked, not yet sent or ended */
	_Atomic uint64_t carried;  /* bytes carried in the CONN records */
	_Atomic uint32_t left;     /* connections that carry on here after the deadline */
	_Atomic uint32_t adopted, cut; /* records the shards carried on, or could not */
	uint64_t t_ready;          /* new side: READY sent */
	/* Old side, the server thread's own: */
	struct peer peers[MAX_PEERS];
	uint32_t npeers;
	pid_t taker;               /* the peer of the session under way, or that took over */
	int taken;                 /* taken over: every later peer is refused */
	struct qrec *unacked, **unacked_tail; /* sent CONN records, in order */
	uint32_t sent, acked;      /* CONN records sent, and acknowledged */
	uint8_t ackbuf[TLP_HO_HDR + 4];
	uint32_t ackgot;
} ho = {
	.deadline_ns = 10000000000ull,
	.lfd = -1,
	.tfd = -1,
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};

/* Set in the old side's thread while a takeover is under way: its waits
 * answer newcomers of the handover socket (refuse_newcomers). */
static _Thread_local int in_session;
static void refuse_newcomers(void);

static uint64_t now_ns(void)
{
	return tlp_mono_ns();
}

/* ---- options ---- */

/* The handover socket's temporary name: PATH.new-PID. */
#define TMP_SUFFIX ".new-%ld"
#define TMP_SUFFIX_MAX 16

int tlp_takeover_args(int *argc, char **argv, char *err, size_t errlen)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		int which = !strcmp(a, "--handover-socket") ? 1 : !strcmp(a, "--takeover") ? 2
			    : !strcmp(a, "--handover-deadline")       ? 3
								      : 0;

		if (!which) {
			argv[out++] = argv[i];
			continue;
		}
		if (i + 1 >= *argc) {
			snprintf(err, errlen, "%s needs a value", a);
			return -EINVAL;
		}
		const char *v = argv[++i];

		if (which == 3) {
			char *end;
			double d = strtod(v, &end);

			if (end == v || *end || !(d >= 0.1 && d <= 3600)) {
				snprintf(err, errlen, "--handover-deadline %s: seconds from 0.1 to 3600, please", v);
				return -EINVAL;
			}
			ho.deadline_ns = (uint64_t)(d * 1e9);
			continue;
		}
		/* The handover socket is made under a temporary name beside
		 * it (TMP_SUFFIX), which must fit too. */
		size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1 - (which == 1 ? TMP_SUFFIX_MAX : 0);

		if (!*v || strlen(v) > max) {
			snprintf(err, errlen, "%s %s: a Unix socket path of 1 to %zu bytes, please", a, v, max);
			return -EINVAL;
		}
		if (which == 1)
			ho.serve_path = v;
		else
			ho.take_path = v;
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

const char *tlp_takeover_usage(void)
{
	return "Live takeover (with either form above):\n"
	       "  --handover-socket PATH   serve a successor's takeover on this Unix socket\n"
	       "  --takeover PATH          take over the listeners and connections of the\n"
	       "                           tlproxy serving PATH, then run as configured\n"
	       "  --handover-deadline S    seconds the old process spends handing over\n"
	       "                           before the rest drains there (default 10)\n";
}

int tlp_takeover_wanted(void)
{
	return ho.take_path != NULL;
}

/* ---- blocking I/O of the conversation ---- */

/* Wait for fd to be readable (events POLLIN) or writable until deadline
 * (CLOCK_MONOTONIC ns, 0 none). 0, -ETIMEDOUT, or -ECANCELED on stop. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int r;

		if (atomic_load(&ho.stop))
			return -ECANCELED;
		if (deadline && now_ns() >= deadline)
			return -ETIMEDOUT;
		if (in_session)
			refuse_newcomers();
		r = poll(&p, 1, in_session ? 20 : 100);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Read exactly n bytes (the first read may bring descriptors: up to
 * *nfds into fds, their count back in *nfds). 0, -EPIPE at the end, or a
 * negative errno. */
static int read_full(int fd, void *buf, size_t n, int *fds, int *nfds, uint64_t deadline)
{
	size_t got = 0;
	int cap = nfds ? *nfds : 0;

	if (nfds)
		*nfds = 0;
	while (got < n) {
		union {
			char b[CMSG_SPACE(2 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = {(char *)buf + got, n - got};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t k;
		int r = wait_fd(fd, POLLIN, deadline);

		if (r < 0)
			return r;
		if (cap && got == 0) {
			mh.msg_control = u.b;
			mh.msg_controllen = sizeof u.b;
		}
		k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (k < 0)
			return -errno;
		for (struct cmsghdr *c = mh.msg_controllen ? CMSG_FIRSTHDR(&mh) : NULL; c;
		     c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int m = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

				for (int i = 0; i < m; i++) {
					int d;

					memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof d);
					if (*nfds < cap)
						fds[(*nfds)++] = d;
					else
						close(d); /* more than the record may carry */
				}
			}
		if (mh.msg_flags & MSG_CTRUNC)
			return -EPROTO;
		if (k == 0)
			return -EPIPE;
		got += (size_t)k;
	}
	return 0;
}

/* Write all of b[0..n), the descriptors with the first bytes. */
static int write_full(int fd, const void *b, size_t n, const int *fds, int nfds)
{
	size_t done = 0;

	while (done < n) {
		union {
			char b[CMSG_SPACE(2 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = {(char *)b + done, n - done};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t k;

		if (nfds && done == 0) {
			struct cmsghdr *c;

			memset(&u, 0, sizeof u);
			mh.msg_control = u.b;
			mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
			memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
		}
		k = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		done += (size_t)k;
	}
	return 0;
}

static int send_msg(int fd, const struct tlp_ho_msg *m)
{
	uint8_t b[TLP_HO_HDR + 4 + TLP_HO_TEXT_MAX + sizeof(struct sockaddr_storage)];
	int n = tlp_ho_encode(b, sizeof b, m);

	return n < 0 ? n : write_full(fd, b, (size_t)n, NULL, 0);
}

/* Read one record (not a CONN: its body is small). 0, -EPROTONOSUPPORT
 * with h->version set, or a negative errno. */
static int recv_msg(int fd, struct tlp_ho_hdr *h, struct tlp_ho_msg *m, int *fds, int *nfds,
		    uint64_t deadline)
{
	uint8_t hb[TLP_HO_HDR], body[4 + TLP_HO_TEXT_MAX + sizeof(struct sockaddr_storage)];
	int r = read_full(fd, hb, sizeof hb, fds, nfds, deadline);

	if (r < 0)
		return r;
	r = tlp_ho_hdr_decode(hb, sizeof hb, h);
	if (r < 0)
		return r;
	if (h->len > sizeof body || (nfds && *nfds != h->nfds))
		return -EPROTO;
	if (h->len && (r = read_full(fd, body, h->len, NULL, NULL, deadline)) < 0)
		return r;
	return tlp_ho_decode(h, body, h->len, m);
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* ---- descriptors of connections ---- */

void tlp_ho_fd_abort(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	if (fd < 0)
		return;
	/* Linger on, timeout 0: the last close sends a reset. */
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(fd);
}

/* A connection record (its header h and body b[0..h->len)) with its two
 * descriptors as a shard adopts it; NULL (nothing taken) if it does not
 * decode or there is no memory. */
static struct tlp_ho_in *in_new(const struct tlp_ho_hdr *h, const uint8_t *b, const int fds[2])
{
	struct tlp_ho_in *in = malloc(sizeof *in + h->len);
	struct tlp_ho_msg *m = malloc(sizeof *m);

	if (!in || !m || (memcpy(in->body, b, h->len), tlp_ho_decode(h, in->body, h->len, m)) < 0 ||
	    m->type != TLP_HO_CONN) {
		free(in);
		free(m);
		return NULL;
	}
	in->c = m->u.conn;
	free(m);
	in->fd[0] = fds[0];
	in->fd[1] = fds[1];
	in->nwrites = 0;
	in->wseq[0] = in->wseq[1] = 0;
	return in;
}

/* Hand in to shard 0, which spreads the connections over the shards: 0,
 * or a negative errno (in is still the caller's). */
static int post_in(struct tlp_ho_in *in)
{
	int r;

	for (;;) {
		r = tl_post(tlp_w.post0, tlp_ctl_token(TLP_MSG_HO_CONN, TLP_HO_FROM_THREAD),
			    (uint64_t)(uintptr_t)in);
		if (r != -ENOBUFS || atomic_load(&ho.stop))
			return r;
		struct timespec t = {0, 1000000};

		nanosleep(&t, NULL);
	}
}

/* Wait (bounded) until the shards have carried on or cut n of the
 * records posted since the counters were zero; how many they cut. */
static uint32_t wait_adopted(uint32_t n)
{
	uint64_t dl = now_ns() + 10000000000ull;

	while (atomic_load(&ho.adopted) + atomic_load(&ho.cut) < n && now_ns() < dl &&
	       !atomic_load(&ho.stop)) {
		struct timespec t = {0, 2000000};

		nanosleep(&t, NULL);
	}
	return atomic_load(&ho.cut);
}

/* ---- old side: what the shards hand the thread ---- */

static void enqueue(struct qrec *q)
{
	pthread_mutex_lock(&ho.mu);
	q->next = NULL;
	if (ho.tail)
		ho.tail->next = q;
	else
		ho.head = q;
	ho.tail = q;
	pthread_cond_signal(&ho.cv);
	pthread_mutex_unlock(&ho.mu);
}

void tlp_ho_push_listener(uint32_t shard, int fd)
{
	struct tlp_ho_msg m;
	socklen_t len = sizeof m.u.listener.addr;
	struct qrec *q = malloc(sizeof *q + TLP_HO_HDR + 4 + sizeof(struct sockaddr_storage));
	int n;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_LISTENER;
	m.u.listener.shard = (uint16_t)shard;
	if (!q || getsockname(fd, (struct sockaddr *)&m.u.listener.addr, &len) < 0 ||
	    len > sizeof m.u.listener.addr) {
		free(q);
		close(fd);
		return;
	}
	m.u.listener.addr_len = (uint16_t)len;
	n = tlp_ho_encode(q->data, TLP_HO_HDR + 4 + sizeof(struct sockaddr_storage), &m);
	if (n < 0) {
		free(q);
		close(fd);
		return;
	}
	q->len = (uint32_t)n;
	q->nfds = 1;
	q->fds[0] = fd;
	enqueue(q);
}

int tlp_ho_push_conn(const struct tlp_ho_msg *m, const int fds[2])
{
	long n = tlp_ho_size(m);
	struct qrec *q = n > 0 ? malloc(sizeof *q + (size_t)n) : NULL;
	int r = n < 0 ? (int)n : -ENOMEM;

	if (q && (r = tlp_ho_encode(q->data, (size_t)n, m)) > 0) {
		q->len = (uint32_t)r;
		q->nfds = 2;
		q->fds[0] = fds[0];
		q->fds[1] = fds[1];
		enqueue(q);
		atomic_fetch_add(&ho.carried, (uint64_t)m->u.conn.carry_len[0] + m->u.conn.carry_len[1]);
		atomic_fetch_sub(&ho.pending, 1);
		return 0;
	}
	tlp_log("takeover: cannot encode a connection (%s): it is cut", tl_strerror(r));
	free(q);
	tlp_ho_fd_abort(fds[0]);
	tlp_ho_fd_abort(fds[1]);
	tlp_ho_gone();
	return r;
}

void tlp_ho_gone(void)
{
	atomic_fetch_sub(&ho.pending, 1);
	pthread_mutex_lock(&ho.mu);
	pthread_cond_signal(&ho.cv);
	pthread_mutex_unlock(&ho.mu);
}

static void ack(uint32_t *count)
{
	pthread_mutex_lock(&ho.mu);
	(*count)++;
	pthread_cond_signal(&ho.cv);
	pthread_mutex_unlock(&ho.mu);
}

void tlp_ho_answer(uint32_t type, int64_t n)
{
	switch (type) {
	case TLP_MSG_HO_LISTEN:
		ack(&ho.listen_acks);
		return;
	case TLP_MSG_HO_GO:
		atomic_fetch_add(&ho.pending, n);
		ack(&ho.go_acks);
		return;
	case TLP_MSG_HO_STOP:
		atomic_fetch_add(&ho.left, (uint32_t)n);
		ack(&ho.stop_acks);
		return;
	case TLP_MSG_HO_FIN:
		ack(&ho.fin_acks);
		return;
	case TLP_MSG_HO_CONN:
		atomic_fetch_add(n ? &ho.adopted : &ho.cut, 1);
		return;
	default:
		return;
	}
}

/* ---- old side: the thread ---- */

static int refuse(int fd, int reason, const char *text)
{
	struct tlp_ho_msg m;
	uint8_t b[TLP_HO_HDR + 4 + TLP_HO_TEXT_MAX];
	int n;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_REFUSE;
	m.u.refuse.reason = (uint16_t)reason;
	snprintf(m.u.refuse.text, sizeof m.u.refuse.text, "%s", text);
	/* Never waits: a fresh socket has room for it, and a peer that does
	 * not read it is no concern of ours. */
	n = tlp_ho_encode(b, sizeof b, &m);
	if (n > 0)
		(void)send(fd, b, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	return 0;
}

/* Refuse peer fd as busy: another takeover is under way, or done. */
static void refuse_busy(int fd)
{
	char why[96];

	if (ho.taken)
		snprintf(why, sizeof why, "this process was taken over by pid %d", (int)ho.taker);
	else
		snprintf(why, sizeof why, "another takeover (pid %d) is under way", (int)ho.taker);
	refuse(fd, TLP_HO_R_BUSY, why);
	close(fd);
}

/* While a takeover is under way (or done): every other peer, waiting or
 * new, is refused at once rather than left to wait for it. */
static void refuse_newcomers(void)
{
	int fd;

	for (uint32_t i = 0; i < ho.npeers; i++)
		refuse_busy(ho.peers[i].fd);
	ho.npeers = 0;
	while (ho.lfd >= 0 && (fd = accept4(ho.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
		refuse_busy(fd);
}

/* Ask every shard (through shard 0) for type, and wait until all have
 * answered in *acks or the deadline. 0 or -ETIMEDOUT. */
static int ask_all(uint32_t type, uint32_t flags, uint32_t *acks, uint64_t deadline)
{
	int r = 0;

	pthread_mutex_lock(&ho.mu);
	*acks = 0;
	pthread_mutex_unlock(&ho.mu);
	for (int k = 0;
	     (r = tl_post(tlp_w.post0, tlp_ctl_token(type, TLP_HO_FROM_THREAD | flags), 0)) < 0;
	     k++) {
		struct timespec t = {0, 1000000};

		if (r != -ENOBUFS || k > 5000 || atomic_load(&ho.stop))
			return r;
		nanosleep(&t, NULL);
	}
	pthread_mutex_lock(&ho.mu);
	while (*acks < tlp_w.nshards) {
		struct timespec t;

		if (now_ns() >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += 20000000;
		if (t.tv_nsec >= 1000000000) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&ho.cv, &ho.mu, &t);
		pthread_mutex_unlock(&ho.mu);
		refuse_newcomers();
		pthread_mutex_lock(&ho.mu);
	}
	pthread_mutex_unlock(&ho.mu);
	return r;
}

/*
 * Once the peer is accepted, the old side's records go out through a loop
 * of the thread's own: tl_send_fds carries each record's descriptors
 * (SCM_RIGHTS) with its first bytes, tl_write the records without any. The
 * loop owns a duplicate of the conversation's descriptor and never reads
 * it; the thread reads the peer's few records on the original.
 */
static struct {
	tl_loop *loop;
	tl_handle h;
	int open;
} out;

static int out_open(int fd)
{
	tl_config cfg;
	int d, r;

	if (!out.loop) {
		tl_config_init(&cfg);
		cfg.max_handles = 16;
		cfg.max_ops = 64;
		cfg.pooled_buffers = 16;
		cfg.pooled_buffer_size = 4096;
		if ((r = tl_loop_new(&out.loop, &cfg)) < 0)
			return r;
	}
	d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (d < 0)
		return -errno;
	if ((r = tl_adopt(out.loop, d, &out.h)) < 0) {
		close(d);
		return r;
	}
	out.open = 1;
	return 0;
}

/* Turn the loop until the completion of token `want` that is terminal;
 * its result. Past the deadline (or on stop) op is cancelled first. */
static int out_wait(uint64_t want, tl_op op, uint64_t deadline)
{
	int cancelled = 0;

	for (;;) {
		tl_completion c[8];
		int n = tl_turn(out.loop, 20000000, c, 8, NULL);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			if (c[i].token == want && ((c[i].flags & TL_F_TERMINAL) || c[i].kind == TL_K_CLOSED))
				return cancelled ? -ETIMEDOUT : (int)c[i].result;
		if (in_session)
			refuse_newcomers();
		if (!cancelled && (atomic_load(&ho.stop) || (deadline && now_ns() >= deadline))) {
			if (tl_cancel(out.loop, op) == 0)
				cancelled = 1;
		}
	}
}

/* Send b[0..n) with descriptors fds[0..nfds): 0 or a negative errno. */
static int out_send(const void *b, uint32_t n, const int *fds, int nfds)
{
	tl_op op;
	int r;

	if (!out.open)
		return -ENOTCONN;
	if (nfds)
		r = tl_send_fds(out.loop, out.h, fds, (uint32_t)nfds, b, n, 1, &op);
	else
		r = tl_write(out.loop, out.h, b, n, 1, &op);
	if (r < 0)
		return r;
	/* A peer that reads nothing for that long is as good as gone. */
	r = out_wait(1, op, now_ns() + ho.deadline_ns + 5000000000ull);
	return r < 0 ? r : 0;
}

static int out_msg(const struct tlp_ho_msg *m)
{
	uint8_t b[TLP_HO_HDR + 4 + TLP_HO_TEXT_MAX + sizeof(struct sockaddr_storage)];
	int n = tlp_ho_encode(b, sizeof b, m);

	return n < 0 ? n : out_send(b, (uint32_t)n, NULL, 0);
}

static void out_close(void)
{
	tl_op none = {0};

	if (!out.open)
		return;
	out.open = 0;
	if (tl_close(out.loop, out.h, 2) == 0)
		out_wait(2, none, 0);
}

static void qrec_free(struct qrec *q, int close_them)
{
	if (close_them)
		close_fds(q->fds, q->nfds);
	free(q);
}

/* The peer's ACKs that have arrived on fd (never waiting): each releases
 * the records it acknowledges (their descriptors are the peer's now).
 * 0, -EPIPE once the peer has gone, -EPROTO for anything but an ACK. */
static int read_acks(int fd)
{
	for (;;) {
		ssize_t k = recv(fd, ho.ackbuf + ho.ackgot, sizeof ho.ackbuf - ho.ackgot, MSG_DONTWAIT);
		struct tlp_ho_hdr h;
		struct tlp_ho_msg m;

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		if (k == 0)
			return -EPIPE;
		ho.ackgot += (uint32_t)k;
		if (ho.ackgot < sizeof ho.ackbuf)
			continue;
		ho.ackgot = 0;
		if (tlp_ho_hdr_decode(ho.ackbuf, TLP_HO_HDR, &h) < 0 || h.type != TLP_HO_ACK ||
		    h.len != 4 || tlp_ho_decode(&h, ho.ackbuf + TLP_HO_HDR, 4, &m) < 0 ||
		    m.u.ack.count > ho.sent)
			return -EPROTO;
		while (ho.acked < m.u.ack.count && ho.unacked) {
			struct qrec *q = ho.unacked;

			ho.unacked = q->next;
			if (!ho.unacked)
				ho.unacked_tail = &ho.unacked;
			qrec_free(q, 1);
			ho.acked++;
		}
	}
}

/* Send what the queue holds: LISTENER records are done with once sent,
 * CONN records wait for their ACK. How many went, or a negative errno
 * (what did not go is back at the head of the queue, for take_back). */
static long flush_queue(int fd)
{
	struct qrec *q;
	long n = 0;
	int err = 0;

	pthread_mutex_lock(&ho.mu);
	q = ho.head;
	ho.head = ho.tail = NULL;
	pthread_mutex_unlock(&ho.mu);
	while (q && !err) {
		struct qrec *next = q->next;

		err = out_send(q->data, q->len, q->fds, q->nfds);
		if (err)
			break;
		n++;
		if (q->nfds == 2) {
			q->next = NULL;
			*ho.unacked_tail = q;
			ho.unacked_tail = &q->next;
			ho.sent++;
			err = read_acks(fd);
		} else {
			qrec_free(q, 1);
		}
		q = next;
	}
	if (q) {
		/* Back at the head, before what the shards pushed since. */
		struct qrec *last = q;

		while (last->next)
			last = last->next;
		pthread_mutex_lock(&ho.mu);
		last->next = ho.head;
		ho.head = q;
		if (!ho.tail)
			ho.tail = last;
		pthread_mutex_unlock(&ho.mu);
	}
	return err ? err : n;
}

/* The peer is given up on (it went away, or stopped reading): what it
 * acknowledged is its own, and every other connection comes back to
 * forwarding here, its records never sent included. Returns how many
 * were taken back; *cut says how many of those could not go on. */
static uint32_t take_back(int fd, uint32_t *cut)
{
	struct qrec *q, *list;
	uint32_t n = 0;

	/* From here no ACK can arrive (the peer's next one fails, and it
	 * then drops what it read without acknowledging it); the ones that
	 * came before are read. */
	shutdown(fd, SHUT_RD);
	read_acks(fd);
	pthread_mutex_lock(&ho.mu);
	list = ho.head;
	ho.head = ho.tail = NULL;
	pthread_mutex_unlock(&ho.mu);
	/* Unacknowledged first: they were pushed earlier. */
	if (ho.unacked) {
		*ho.unacked_tail = list;
		list = ho.unacked;
	}
	ho.unacked = NULL;
	ho.unacked_tail = &ho.unacked;
	atomic_store(&ho.adopted, 0);
	atomic_store(&ho.cut, 0);
	for (q = list; q;) {
		struct qrec *next = q->next;
		struct tlp_ho_hdr h;
		struct tlp_ho_in *in = NULL;

		if (q->nfds == 2 && tlp_ho_hdr_decode(q->data, q->len, &h) == TLP_HO_HDR &&
		    (in = in_new(&h, q->data + TLP_HO_HDR, q->fds)) && post_in(in) == 0) {
			n++;
			free(q);
		} else {
			if (q->nfds == 2)
				tlp_log("takeover: a connection cannot be taken back: it is cut");
			free(in);
			if (q->nfds == 2) {
				tlp_ho_fd_abort(q->fds[0]);
				tlp_ho_fd_abort(q->fds[1]);
				n++;
				atomic_fetch_add(&ho.cut, 1);
			} else {
				qrec_free(q, 1);
			}
		}
		q = next;
	}
	*cut = wait_adopted(n);
	return n;
}

/* One takeover conversation on fd with peer pid, whose HELLO was read. 1
 * when everything was handed over (the process then drains), 0 when it
 * failed (it keeps serving). */
static int session(int fd, pid_t pid)
{
	struct tlp_ho_msg m;
	struct tlp_ho_hdr h;
	uint64_t t0 = now_ns(), t_ready, dl;
	long sent;
	uint32_t back = 0, cut = 0;
	int r, failed = 0;
	const char *why = NULL;

	ho.taker = pid;
	ho.sent = ho.acked = 0;
	ho.unacked = NULL;
	ho.unacked_tail = &ho.unacked;
	ho.ackgot = 0;
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	m.u.hello.pid = (uint32_t)getpid();
	if (send_msg(fd, &m) < 0) {
		tlp_log("takeover by pid %d failed (hello); still serving", (int)pid);
		return 0;
	}
	if ((r = out_open(fd)) < 0) {
		tlp_log("takeover by pid %d failed: %s; still serving", (int)pid, tl_strerror(r));
		return 0;
	}
	tlp_log("takeover by pid %d: handing over the listening sockets", (int)pid);
	/* The listening sockets first: the new process accepts on them while
	 * this one still does, so no client is refused in between. */
	if (ask_all(TLP_MSG_HO_LISTEN, 0, &ho.listen_acks, now_ns() + 5000000000ull) < 0 ||
	    (sent = flush_queue(fd)) < 0) {
		take_back(fd, &cut);
		tlp_log("takeover by pid %d failed (listeners); still serving", (int)pid);
		return 0;
	}
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_LISTENERS_END;
	m.u.lend.count = (uint32_t)sent;
	if (out_msg(&m) < 0) {
		tlp_log("takeover by pid %d failed (listeners); still serving", (int)pid);
		return 0;
	}
	/* Its shards start: it has the deadline to say READY. */
	r = recv_msg(fd, &h, &m, NULL, NULL, now_ns() + ho.deadline_ns + 30000000000ull);
	if (r < 0 || m.type != TLP_HO_READY) {
		tlp_log("takeover by pid %d failed before it accepted (%s); still serving", (int)pid,
			r < 0 ? tl_strerror(r) : "not READY");
		return 0;
	}
	t_ready = now_ns();
	dl = t_ready + ho.deadline_ns;
	atomic_store(&ho.pending, 0);
	ask_all(TLP_MSG_HO_GO, 0, &ho.go_acks, dl);
	for (;;) {
		int done;

		r = 0;
		pthread_mutex_lock(&ho.mu);
		while (!ho.head && !(ho.go_acks == tlp_w.nshards && atomic_load(&ho.pending) <= 0) &&
		       now_ns() < dl) {
			struct timespec t;

			clock_gettime(CLOCK_REALTIME, &t);
			t.tv_nsec += 20000000;
			if (t.tv_nsec >= 1000000000) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&ho.cv, &ho.mu, &t);
			pthread_mutex_unlock(&ho.mu);
			refuse_newcomers();
			r = read_acks(fd);
			pthread_mutex_lock(&ho.mu);
			if (r < 0)
				break;
		}
		done = !ho.head && ho.go_acks == tlp_w.nshards && atomic_load(&ho.pending) <= 0;
		pthread_mutex_unlock(&ho.mu);
		sent = r < 0 ? r : flush_queue(fd);
		if (sent < 0) {
			why = tl_strerror((int)sent);
			failed = 1;
			break;
		}
		if (done || now_ns() >= dl)
			break;
	}
	/* What is still on its way goes back to forwarding here and drains. */
	atomic_store(&ho.left, 0);
	ask_all(TLP_MSG_HO_STOP, 0, &ho.stop_acks, now_ns() + 5000000000ull);
	if (!failed) {
		sent = flush_queue(fd);
		if (sent < 0) {
			why = tl_strerror((int)sent);
			failed = 1;
		}
	}
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_END;
	m.u.end.handed = ho.sent;
	m.u.end.left = atomic_load(&ho.left);
	if (!failed && (r = out_msg(&m)) < 0) {
		why = tl_strerror(r);
		failed = 1;
	}
	/* Every connection sent must be acknowledged before this process lets
	 * go of it. */
	for (uint64_t adl = now_ns() + 5000000000ull; !failed && ho.acked < ho.sent;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (now_ns() >= adl || atomic_load(&ho.stop)) {
			why = "no acknowledgement of every connection";
			failed = 1;
			break;
		}
		refuse_newcomers();
		if (poll(&p, 1, 20) > 0 && (r = read_acks(fd)) < 0 && ho.acked < ho.sent) {
			why = tl_strerror(r);
			failed = 1;
		}
	}
	if (failed)
		back = take_back(fd, &cut);
	/* Gone: this process takes its listening sockets back. */
	ask_all(TLP_MSG_HO_FIN, failed ? TLP_HO_FAILED : 0, &ho.fin_acks, now_ns() + 5000000000ull);
	if (failed) {
		tlp_log("takeover by pid %d failed (%s): %u connection%s it had taken go%s with it, "
			"%u taken back and carried on here (%u of them cut); still serving",
			(int)pid, why, ho.acked, ho.acked == 1 ? "" : "s", ho.acked == 1 ? "es" : "",
			back, cut);
		return 0;
	}
	tlp_log("takeover by pid %d: %u connection%s handed over in %.1f ms (listeners %.1f ms "
		"before), %u left to drain here, %llu bytes carried",
		(int)pid, ho.sent, ho.sent == 1 ? "" : "s", (now_ns() - t_ready) / 1e6,
		(t_ready - t0) / 1e6, m.u.end.left, (unsigned long long)atomic_load(&ho.carried));
	return 1;
}

/* A peer of the handover socket that has not said HELLO yet, or a new
 * one: take what it sent. 1 when its HELLO is complete and valid (it is
 * left in the table), 0 while it is incomplete, -1 when it was refused
 * or went away (it is closed). */
static int peer_read(struct peer *p)
{
	struct tlp_ho_hdr h;
	struct tlp_ho_msg m;
	char why[160];
	ssize_t k;
	int r;

	k = recv(p->fd, p->b + p->got, sizeof p->b - p->got, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (k <= 0) {
		close(p->fd);
		return -1;
	}
	p->got += (uint32_t)k;
	if (p->got < TLP_HO_HDR)
		return 0;
	r = tlp_ho_hdr_decode(p->b, TLP_HO_HDR, &h);
	if (r == -EPROTONOSUPPORT) {
		snprintf(why, sizeof why, "handover format version %d here, %u asked", TLP_HO_VERSION,
			 h.version);
		refuse(p->fd, TLP_HO_R_VERSION, why);
		tlp_log("takeover refused (pid %d): %s; still serving", (int)p->pid, why);
		close(p->fd);
		return -1;
	}
	if (r < 0 || h.type != TLP_HO_HELLO || h.len != 8) {
		refuse(p->fd, TLP_HO_R_PROTO, "a HELLO first, please");
		tlp_log("takeover refused (pid %d): no valid HELLO (%s); still serving", (int)p->pid,
			r < 0 ? tl_strerror(r) : "another record");
		close(p->fd);
		return -1;
	}
	if (p->got < sizeof p->b)
		return 0;
	if (tlp_ho_decode(&h, p->b + TLP_HO_HDR, 8, &m) < 0) {
		refuse(p->fd, TLP_HO_R_PROTO, "a HELLO first, please");
		tlp_log("takeover refused (pid %d): no valid HELLO (%s); still serving", (int)p->pid,
			tl_strerror(-EPROTO));
		close(p->fd);
		return -1;
	}
	return 1;
}

/* A new client of the handover socket: refused at once if it is another
 * user's, or if a takeover is done or the table is full; else it waits
 * in the table for its HELLO. */
static void peer_new(int fd)
{
	struct ucred uc;
	socklen_t len = sizeof uc;
	char why[160];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) {
		tlp_log("takeover: cannot tell who connected: %s; refused", strerror(errno));
		close(fd);
		return;
	}
	if (uc.uid != geteuid()) {
		snprintf(why, sizeof why, "only uid %u may take over", (unsigned)geteuid());
		refuse(fd, TLP_HO_R_USER, why);
		tlp_log("takeover refused: pid %d runs as uid %u, %s; still serving", (int)uc.pid,
			(unsigned)uc.uid, why);
		close(fd);
		return;
	}
	if (ho.taken) {
		refuse_busy(fd);
		return;
	}
	if (ho.npeers == MAX_PEERS) {
		refuse(fd, TLP_HO_R_BUSY, "too many takeovers at once");
		tlp_log("takeover refused (pid %d): %u others have not said HELLO yet", (int)uc.pid,
			ho.npeers);
		close(fd);
		return;
	}
	ho.peers[ho.npeers++] = (struct peer){.fd = fd, .pid = uc.pid, .t0 = now_ns()};
}

/*
 * The handover socket's thread. Clients that have not said HELLO yet wait
 * side by side (one that says nothing holds up no other, and is refused
 * after 5 s); the first complete HELLO starts the takeover, and every
 * other client, waiting or new, is refused as busy until it ends, and for
 * good once it succeeded.
 */
static void *serve(void *arg)
{
	(void)arg;
	while (!atomic_load(&ho.stop)) {
		struct pollfd p[1 + MAX_PEERS];
		uint32_t n = 0;
		int fd, r;

		p[n++] = (struct pollfd){.fd = ho.lfd, .events = POLLIN};
		for (uint32_t i = 0; i < ho.npeers; i++)
			p[n++] = (struct pollfd){.fd = ho.peers[i].fd, .events = POLLIN};
		if (poll(p, n, 100) < 0 && errno != EINTR)
			break;
		while ((fd = accept4(ho.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
			peer_new(fd);
		for (uint32_t i = 0; i < ho.npeers;) {
			struct peer *pe = &ho.peers[i];

			r = peer_read(pe);
			if (r == 0 && now_ns() - pe->t0 > 5000000000ull) {
				refuse(pe->fd, TLP_HO_R_PROTO, "a HELLO first, please");
				tlp_log("takeover refused (pid %d): no valid HELLO (%s); still serving",
					(int)pe->pid, tl_strerror(-ETIMEDOUT));
				close(pe->fd);
				r = -1;
			}
			if (r < 0) {
				ho.peers[i] = ho.peers[--ho.npeers];
				continue;
			}
			if (r == 0) {
				i++;
				continue;
			}
			/* The first whole HELLO: its takeover. */
			struct peer won = *pe;

			ho.peers[i] = ho.peers[--ho.npeers];
			ho.taker = won.pid;
			in_session = 1;
			refuse_newcomers();
			r = session(won.fd, won.pid);
			in_session = 0;
			out_close();
			close(won.fd);
			if (r == 1) {
				ho.taken = 1;
				tlp_log("draining: the new process has the listeners and the connections");
				tl_runtime_drain(tlp_w.rt);
			}
			break;
		}
		if (ho.taken)
			refuse_newcomers();
	}
	for (uint32_t i = 0; i < ho.npeers; i++)
		close(ho.peers[i].fd);
	ho.npeers = 0;
	if (out.loop)
		tl_loop_destroy(out.loop);
	out.loop = NULL;
	return NULL;
}

int tlp_handover_listen(void)
{
	struct sockaddr_un su;
	struct stat st;
	int fd;

	if (!ho.serve_path)
		return 0;
	/* Made under a temporary name and renamed over serve_path only once
	 * this process serves on it for good (at once, or once its own
	 * takeover is done): a successor that dies halfway never takes the
	 * name from the process it was taking over. */
	snprintf(ho.tmp_path, sizeof ho.tmp_path, "%s" TMP_SUFFIX, ho.serve_path, (long)getpid());
	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	memcpy(su.sun_path, ho.tmp_path, strlen(ho.tmp_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto fail;
	/* One left by a process of our pid that died: replaced. */
	if (lstat(ho.tmp_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(ho.tmp_path);
	if (bind(fd, (struct sockaddr *)&su, sizeof su) < 0 || listen(fd, 16) < 0 ||
	    stat(ho.tmp_path, &st) < 0)
		goto fail;
	chmod(ho.tmp_path, 0600);
	ho.lfd = fd;
	ho.lino = st.st_ino;
	if (!tlp_takeover_wanted() && rename(ho.tmp_path, ho.serve_path) < 0) {
		int e = errno;

		unlink(ho.tmp_path);
		ho.lfd = -1;
		errno = e;
		goto fail;
	}
	ho.published = !tlp_takeover_wanted();
	return 0;
fail:
	fprintf(stderr, "tlproxy: --handover-socket %s: %s\n", ho.serve_path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* The takeover is done: the handover socket takes its name. */
static void publish(void)
{
	if (ho.lfd < 0 || ho.published)
		return;
	if (rename(ho.tmp_path, ho.serve_path) < 0) {
		tlp_log("takeover: cannot name the handover socket %s (%s): it stays %s",
			ho.serve_path, strerror(errno), ho.tmp_path);
		return;
	}
	ho.published = 1;
}

int tlp_handover_start(void)
{
	int r;

	if (ho.lfd < 0)
		return 0;
	r = pthread_create(&ho.th_srv, NULL, serve, NULL);
	if (r)
		return -r;
	ho.srv_started = 1;
	return 0;
}

/* ---- new side ---- */

int tlp_takeover_begin(void)
{
	struct tlp_world *w = &tlp_w;
	struct sockaddr_un su;
	struct tlp_ho_msg m;
	struct tlp_ho_hdr h;
	uint64_t dl = now_ns() + 30000000000ull;
	uint32_t n = 0;
	int fd, r;

	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	memcpy(su.sun_path, ho.take_path, strlen(ho.take_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&su, sizeof su) < 0) {
		fprintf(stderr, "tlproxy: --takeover %s: %s\n", ho.take_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	m.u.hello.pid = (uint32_t)getpid();
	r = send_msg(fd, &m);
	/* Refused at once (another user, a takeover under way): the answer
	 * is there to read even if our HELLO found the socket closed. */
	if (r == 0 || r == -EPIPE || r == -ECONNRESET)
		r = recv_msg(fd, &h, &m, NULL, NULL, dl);
	if (r == -EPROTONOSUPPORT) {
		fprintf(stderr, "tlproxy: --takeover %s: the running process speaks handover format "
				"version %u, this one %d: refused (it keeps serving)\n",
			ho.take_path, h.version, TLP_HO_VERSION);
		goto fail;
	}
	if (r == 0 && m.type == TLP_HO_REFUSE) {
		fprintf(stderr, "tlproxy: --takeover %s: refused: %s%s\n", ho.take_path,
			m.u.refuse.text,
			m.u.refuse.reason == TLP_HO_R_BUSY ? "; this one gives up" : " (it keeps serving)");
		goto fail;
	}
	if (r < 0 || m.type != TLP_HO_HELLO) {
		fprintf(stderr, "tlproxy: --takeover %s: no valid answer (%s)\n", ho.take_path,
			r < 0 ? tl_strerror(r) : "not HELLO");
		goto fail;
	}
	for (;;) {
		int fds[1], nfds = 1;

		r = recv_msg(fd, &h, &m, fds, &nfds, dl);
		if (r < 0) {
			close_fds(fds, nfds);
			fprintf(stderr, "tlproxy: --takeover %s: receiving the listeners: %s\n",
				ho.take_path, tl_strerror(r));
			goto fail;
		}
		if (m.type == TLP_HO_LISTENERS_END)
			break;
		if (m.type != TLP_HO_LISTENER || w->ninh >= TLP_MAX_INHERIT) {
			close_fds(fds, nfds);
			fprintf(stderr, "tlproxy: --takeover %s: %s\n", ho.take_path,
				m.type != TLP_HO_LISTENER ? "unexpected record" : "too many listeners");
			goto fail;
		}
		struct tlp_inherit *in = &w->inh[w->ninh++];
		const struct sockaddr_storage *a = &m.u.listener.addr;

		memset(in, 0, sizeof *in);
		in->fd = fds[0];
		in->used = 1;
		if (a->ss_family == AF_UNIX) {
			in->unix_path = 1;
			memcpy(in->path, ((const struct sockaddr_un *)a)->sun_path, sizeof in->path - 1);
		} else {
			memcpy(&in->addr, a, a->ss_family == AF_INET ? sizeof in->addr.in
								      : sizeof in->addr.in6);
		}
		n++;
	}
	if (n != m.u.lend.count) {
		fprintf(stderr, "tlproxy: --takeover %s: %u listeners announced, %u came\n",
			ho.take_path, m.u.lend.count, n);
		goto fail;
	}
	fprintf(stderr, "tlproxy: takeover: %u listening socket%s from the running process\n", n,
		n == 1 ? "" : "s");
	ho.tfd = fd;
	return 0;
fail:
	close(fd);
	return -1;
}

/* Say that count CONN records have been read: 0, or a negative errno
 * (the old process no longer listens: the last ones are still its own). */
static int send_ack(int fd, uint32_t count)
{
	struct tlp_ho_msg m;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_ACK;
	m.u.ack.count = count;
	return send_msg(fd, &m);
}

/* Receive CONN records, acknowledge each and pass it to shard 0, until
 * END. */
static void *receive(void *arg)
{
	uint32_t got = 0, lost = 0, cut;
	int fd = ho.tfd, end = 0;
	struct tlp_ho_msg em;

	(void)arg;
	atomic_store(&ho.adopted, 0);
	atomic_store(&ho.cut, 0);
	for (;;) {
		uint8_t hb[TLP_HO_HDR];
		struct tlp_ho_hdr h;
		uint8_t *body;
		struct tlp_ho_in *in;
		int fds[2] = {-1, -1}, nfds = 2, r;

		r = read_full(fd, hb, sizeof hb, fds, &nfds, 0);
		if (r == 0)
			r = tlp_ho_hdr_decode(hb, sizeof hb, &h);
		if (r >= 0 && nfds != h.nfds)
			r = -EPROTO;
		if (r >= 0 && h.type != TLP_HO_CONN && h.type != TLP_HO_END)
			r = -EPROTO;
		body = r >= 0 ? malloc(h.len ? h.len : 1) : NULL;
		if (r >= 0 && !body)
			r = -ENOMEM;
		if (r >= 0)
			r = read_full(fd, body, h.len, NULL, NULL, 0);
		if (r < 0) {
			/* Not acknowledged: the old process keeps them. */
			close_fds(fds, nfds);
			free(body);
			tlp_log("takeover: the old process's stream ended early (%s) after %u "
				"connections",
				tl_strerror(r), got);
			break;
		}
		if (h.type == TLP_HO_END) {
			end = tlp_ho_decode(&h, body, h.len, &em) == 0;
			free(body);
			break;
		}
		/* Ours once the old process knows it, and only then: touched
		 * before, it might go on there too. */
		if ((r = send_ack(fd, got + 1)) < 0) {
			close_fds(fds, nfds);
			free(body);
			tlp_log("takeover: the old process stopped listening (%s) after %u "
				"connections: it keeps the rest",
				tl_strerror(r), got);
			break;
		}
		got++;
		in = in_new(&h, body, fds);
		free(body);
		if (!in || post_in(in) < 0) {
			tlp_ho_fd_abort(fds[0]);
			tlp_ho_fd_abort(fds[1]);
			free(in);
			lost++;
		}
	}
	/* Nothing more comes from the old process, nor goes to it: the
	 * conversation's socket is not kept for the life of this process. */
	pthread_mutex_lock(&ho.mu);
	close(fd);
	ho.tfd = -1;
	pthread_mutex_unlock(&ho.mu);
	cut = wait_adopted(got - lost) + lost;
	if (end) {
		tlp_log("takeover done: %u connection%s carried on, %u cut, %u left to drain in the "
			"old process, %.1f ms after READY",
			got - cut, got - cut == 1 ? "" : "s", cut, em.u.end.left,
			(now_ns() - ho.t_ready) / 1e6);
		publish();
	}
	return NULL;
}

int tlp_takeover_ready(void)
{
	struct tlp_ho_msg m;
	int r;

	if (ho.tfd < 0)
		return 0;
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_READY;
	ho.t_ready = now_ns();
	r = send_msg(ho.tfd, &m);
	if (r < 0)
		return r;
	r = pthread_create(&ho.th_rx, NULL, receive, NULL);
	if (r)
		return -r;
	ho.rx_started = 1;
	return 0;
}

void tlp_takeover_stop(void)
{
	struct stat st;
	const char *mine;

	atomic_store(&ho.stop, 1);
	if (ho.srv_started)
		pthread_join(ho.th_srv, NULL);
	/* Under mu: the receiver closes it when it is done. */
	pthread_mutex_lock(&ho.mu);
	if (ho.rx_started && ho.tfd >= 0)
		shutdown(ho.tfd, SHUT_RDWR); /* its blocking reads end */
	pthread_mutex_unlock(&ho.mu);
	if (ho.rx_started)
		pthread_join(ho.th_rx, NULL);
	ho.srv_started = ho.rx_started = 0;
	if (ho.tfd >= 0)
		close(ho.tfd);
	ho.tfd = -1;
	mine = ho.published ? ho.serve_path : ho.tmp_path;
	if (ho.lfd >= 0) {
		close(ho.lfd);
		/* A successor may have put its own socket there. */
		if (stat(mine, &st) == 0 && st.st_ino == ho.lino)
			unlink(mine);
	}
	ho.lfd = -1;
	/* Records nobody will send: nobody forwards them any more. */
	for (struct qrec *q = ho.head; q;) {
		struct qrec *next = q->next;

		if (q->nfds == 2) {
			tlp_ho_fd_abort(q->fds[0]);
			tlp_ho_fd_abort(q->fds[1]);
			free(q);
		} else {
			qrec_free(q, 1);
		}
		q = next;
	}
	ho.head = ho.tail = NULL;
}
