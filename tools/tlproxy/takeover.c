/* tools/tlproxy/takeover.c: the process side of a live takeover: the old process's handover socket and its thread, the new process's receiving of the listening sockets and of the connections, and the messages between those threads and the shards. */
/* Calls: takeover -> world (the process side calls no shard code: the
 * shards answer its messages through tlp_ho_answer). */
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
#include "takeover_sides.h"
#include "world.h"

struct tlp_to tlp_to = {
	.deadline_ns = 10000000000ull,
	.lfd = -1,
	.tfd = -1,
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};
_Thread_local int tlp_to_in_session;

uint64_t tlp_to_now_ns(void)
{
	return tlp_mono_ns();
}

/* ---- options ---- */


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
			tlp_to.deadline_ns = (uint64_t)(d * 1e9);
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
			tlp_to.serve_path = v;
		else
			tlp_to.take_path = v;
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
	return tlp_to.take_path != NULL;
}

int tlp_takeover_serving(void)
{
	return tlp_to.serve_path != NULL;
}

/* ---- blocking I/O of the conversation ---- */

/* Wait for fd to be readable (events POLLIN) or writable until deadline
 * (CLOCK_MONOTONIC ns, 0 none). 0, -ETIMEDOUT, or -ECANCELED on stop. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int r;

		if (atomic_load(&tlp_to.stop))
			return -ECANCELED;
		if (deadline && tlp_to_now_ns() >= deadline)
			return -ETIMEDOUT;
		if (tlp_to_in_session)
			tlp_to_refuse_newcomers();
		r = poll(&p, 1, tlp_to_in_session ? 20 : 100);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Read exactly n bytes (the first read may bring descriptors: up to
 * *nfds into fds, their count back in *nfds). 0, -EPIPE at the end, or a
 * negative errno. */
int tlp_to_read_full(int fd, void *buf, size_t n, int *fds, int *nfds, uint64_t deadline)
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

int tlp_to_send_msg(int fd, const struct tlp_ho_msg *m)
{
	uint8_t b[TLP_HO_HDR + 4 + TLP_HO_TEXT_MAX + sizeof(struct sockaddr_storage)];
	int n = tlp_ho_encode(b, sizeof b, m);

	return n < 0 ? n : write_full(fd, b, (size_t)n, NULL, 0);
}

/* Read one record (not a CONN: its body is small). 0, -EPROTONOSUPPORT
 * with h->version set, or a negative errno. */
int tlp_to_recv_msg(int fd, struct tlp_ho_hdr *h, struct tlp_ho_msg *m, int *fds, int *nfds,
		    uint64_t deadline)
{
	uint8_t hb[TLP_HO_HDR], body[4 + TLP_HO_TEXT_MAX + sizeof(struct sockaddr_storage)];
	int r = tlp_to_read_full(fd, hb, sizeof hb, fds, nfds, deadline);

	if (r < 0)
		return r;
	r = tlp_ho_hdr_decode(hb, sizeof hb, h);
	if (r < 0)
		return r;
	if (h->len > sizeof body || (nfds && *nfds != h->nfds))
		return -EPROTO;
	if (h->len && (r = tlp_to_read_full(fd, body, h->len, NULL, NULL, deadline)) < 0)
		return r;
	return tlp_ho_decode(h, body, h->len, m);
}

void tlp_to_close_fds(int *fds, int n)
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
struct tlp_ho_in *tlp_to_in_new(const struct tlp_ho_hdr *h, const uint8_t *b, const int fds[2])
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
int tlp_to_post_in(struct tlp_ho_in *in)
{
	int r;

	for (;;) {
		r = tl_post(tlp_w.post0, tlp_ctl_token(TLP_MSG_HO_CONN, TLP_HO_FROM_THREAD),
			    (uint64_t)(uintptr_t)in);
		if (r != -ENOBUFS || atomic_load(&tlp_to.stop))
			return r;
		struct timespec t = {0, 1000000};

		nanosleep(&t, NULL);
	}
}

/* Wait (bounded) until the shards have carried on or cut n of the
 * records posted since the counters were zero; how many they cut. */
uint32_t tlp_to_wait_adopted(uint32_t n)
{
	uint64_t dl = tlp_to_now_ns() + 10000000000ull;

	while (atomic_load(&tlp_to.adopted) + atomic_load(&tlp_to.cut) < n && tlp_to_now_ns() < dl &&
	       !atomic_load(&tlp_to.stop)) {
		struct timespec t = {0, 2000000};

		nanosleep(&t, NULL);
	}
	return atomic_load(&tlp_to.cut);
}

/* ---- old side: what the shards hand the thread ---- */

static void enqueue(struct qrec *q)
{
	pthread_mutex_lock(&tlp_to.mu);
	q->next = NULL;
	if (tlp_to.tail)
		tlp_to.tail->next = q;
	else
		tlp_to.head = q;
	tlp_to.tail = q;
	pthread_cond_signal(&tlp_to.cv);
	pthread_mutex_unlock(&tlp_to.mu);
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
		atomic_fetch_add(&tlp_to.carried, (uint64_t)m->u.conn.carry_len[0] + m->u.conn.carry_len[1]);
		atomic_fetch_sub(&tlp_to.pending, 1);
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
	atomic_fetch_sub(&tlp_to.pending, 1);
	pthread_mutex_lock(&tlp_to.mu);
	pthread_cond_signal(&tlp_to.cv);
	pthread_mutex_unlock(&tlp_to.mu);
}

static void ack(uint32_t *count)
{
	pthread_mutex_lock(&tlp_to.mu);
	(*count)++;
	pthread_cond_signal(&tlp_to.cv);
	pthread_mutex_unlock(&tlp_to.mu);
}

void tlp_ho_answer(uint32_t type, int64_t n)
{
	switch (type) {
	case TLP_MSG_HO_LISTEN:
		ack(&tlp_to.listen_acks);
		return;
	case TLP_MSG_HO_GO:
		atomic_fetch_add(&tlp_to.pending, n);
		ack(&tlp_to.go_acks);
		return;
	case TLP_MSG_HO_STOP:
		atomic_fetch_add(&tlp_to.left, (uint32_t)n);
		ack(&tlp_to.stop_acks);
		return;
	case TLP_MSG_HO_FIN:
		ack(&tlp_to.fin_acks);
		return;
	case TLP_MSG_HO_CONN:
		atomic_fetch_add(n ? &tlp_to.adopted : &tlp_to.cut, 1);
		return;
	default:
		return;
	}
}

/* ---- new side ---- */

int tlp_takeover_begin(void)
{
	struct tlp_world *w = &tlp_w;
	struct sockaddr_un su;
	struct tlp_ho_msg m;
	struct tlp_ho_hdr h;
	uint64_t dl = tlp_to_now_ns() + 30000000000ull;
	uint32_t n = 0;
	int fd, r;

	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	memcpy(su.sun_path, tlp_to.take_path, strlen(tlp_to.take_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&su, sizeof su) < 0) {
		fprintf(stderr, "tlproxy: --takeover %s: %s\n", tlp_to.take_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	m.u.hello.pid = (uint32_t)getpid();
	r = tlp_to_send_msg(fd, &m);
	/* Refused at once (another user, a takeover under way): the answer
	 * is there to read even if our HELLO found the socket closed. */
	if (r == 0 || r == -EPIPE || r == -ECONNRESET)
		r = tlp_to_recv_msg(fd, &h, &m, NULL, NULL, dl);
	if (r == -EPROTONOSUPPORT) {
		fprintf(stderr, "tlproxy: --takeover %s: the running process speaks handover format "
				"version %u, this one %d: refused (it keeps serving)\n",
			tlp_to.take_path, h.version, TLP_HO_VERSION);
		goto fail;
	}
	if (r == 0 && m.type == TLP_HO_REFUSE) {
		fprintf(stderr, "tlproxy: --takeover %s: refused: %s%s\n", tlp_to.take_path,
			m.u.refuse.text,
			m.u.refuse.reason == TLP_HO_R_BUSY ? "; this one gives up" : " (it keeps serving)");
		goto fail;
	}
	if (r < 0 || m.type != TLP_HO_HELLO) {
		fprintf(stderr, "tlproxy: --takeover %s: no valid answer (%s)\n", tlp_to.take_path,
			r < 0 ? tl_strerror(r) : "not HELLO");
		goto fail;
	}
	for (;;) {
		int fds[1], nfds = 1;

		r = tlp_to_recv_msg(fd, &h, &m, fds, &nfds, dl);
		if (r < 0) {
			tlp_to_close_fds(fds, nfds);
			fprintf(stderr, "tlproxy: --takeover %s: receiving the listeners: %s\n",
				tlp_to.take_path, tl_strerror(r));
			goto fail;
		}
		if (m.type == TLP_HO_LISTENERS_END)
			break;
		if (m.type != TLP_HO_LISTENER || w->ninh >= TLP_MAX_INHERIT) {
			tlp_to_close_fds(fds, nfds);
			fprintf(stderr, "tlproxy: --takeover %s: %s\n", tlp_to.take_path,
				m.type != TLP_HO_LISTENER ? "unexpected record" : "too many listeners");
			goto fail;
		}
		struct tlp_inherit *in = &w->inh[w->ninh++];
		const struct sockaddr_storage *a = &m.u.listener.addr;

		int type = 0;
		socklen_t tl = sizeof type;

		memset(in, 0, sizeof *in);
		in->fd = fds[0];
		in->used = 1;
		/* A UDP listener's socket, or a listening stream one. */
		in->dgram = getsockopt(fds[0], SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
			    type == SOCK_DGRAM;
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
			tlp_to.take_path, m.u.lend.count, n);
		goto fail;
	}
	fprintf(stderr, "tlproxy: takeover: %u listening socket%s from the running process\n", n,
		n == 1 ? "" : "s");
	tlp_to.tfd = fd;
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
	return tlp_to_send_msg(fd, &m);
}

/* Receive CONN records, acknowledge each and pass it to shard 0, until
 * END. */
static void *receive(void *arg)
{
	uint32_t got = 0, lost = 0, cut;
	int fd = tlp_to.tfd, end = 0;
	struct tlp_ho_msg em;

	(void)arg;
	atomic_store(&tlp_to.adopted, 0);
	atomic_store(&tlp_to.cut, 0);
	for (;;) {
		uint8_t hb[TLP_HO_HDR];
		struct tlp_ho_hdr h;
		uint8_t *body;
		struct tlp_ho_in *in;
		int fds[2] = {-1, -1}, nfds = 2, r;

		r = tlp_to_read_full(fd, hb, sizeof hb, fds, &nfds, 0);
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
			r = tlp_to_read_full(fd, body, h.len, NULL, NULL, 0);
		if (r < 0) {
			/* Not acknowledged: the old process keeps them. */
			tlp_to_close_fds(fds, nfds);
			free(body);
			tlp_log("takeover: the old process's stream ended early (%s) after %u "
				"connections",
				tl_strerror(r), got);
			break;
		}
		if (h.type == TLP_HO_END) {
			end = tlp_ho_decode(&h, body, h.len, &em) == 0;
			free(body);
			/* END's acknowledgement (one past the CONN records): without
			 * it the old process takes its listeners back. */
			if (end && (r = send_ack(fd, got + 1)) < 0) {
				tlp_log("takeover: the old process went away before END was "
					"acknowledged (%s): it keeps its listeners",
					tl_strerror(r));
				end = 0;
			}
			break;
		}
		/* Ours once the old process knows it, and only then: touched
		 * before, it might go on there too. */
		if ((r = send_ack(fd, got + 1)) < 0) {
			tlp_to_close_fds(fds, nfds);
			free(body);
			tlp_log("takeover: the old process stopped listening (%s) after %u "
				"connections: it keeps the rest",
				tl_strerror(r), got);
			break;
		}
		got++;
		in = tlp_to_in_new(&h, body, fds);
		free(body);
		if (!in || tlp_to_post_in(in) < 0) {
			tlp_ho_fd_abort(fds[0]);
			tlp_ho_fd_abort(fds[1]);
			free(in);
			lost++;
		}
	}
	/* Nothing more comes from the old process, nor goes to it: the
	 * conversation's socket is not kept for the life of this process. */
	pthread_mutex_lock(&tlp_to.mu);
	close(fd);
	tlp_to.tfd = -1;
	pthread_mutex_unlock(&tlp_to.mu);
	cut = tlp_to_wait_adopted(got - lost) + lost;
	if (end) {
		tlp_log("takeover done: %u connection%s carried on, %u cut, %u left to drain in the "
			"old process, %.1f ms after READY",
			got - cut, got - cut == 1 ? "" : "s", cut, em.u.end.left,
			(tlp_to_now_ns() - tlp_to.t_ready) / 1e6);
		tlp_to_publish();
	}
	return NULL;
}

int tlp_takeover_ready(void)
{
	struct tlp_ho_msg m;
	int r;

	if (tlp_to.tfd < 0)
		return 0;
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_READY;
	tlp_to.t_ready = tlp_to_now_ns();
	r = tlp_to_send_msg(tlp_to.tfd, &m);
	if (r < 0)
		return r;
	r = pthread_create(&tlp_to.th_rx, NULL, receive, NULL);
	if (r)
		return -r;
	tlp_to.rx_started = 1;
	return 0;
}

void tlp_takeover_stop(void)
{
	struct stat st;
	const char *mine;

	atomic_store(&tlp_to.stop, 1);
	if (tlp_to.srv_started)
		pthread_join(tlp_to.th_srv, NULL);
	/* Under mu: the receiver closes it when it is done. */
	pthread_mutex_lock(&tlp_to.mu);
	if (tlp_to.rx_started && tlp_to.tfd >= 0)
		shutdown(tlp_to.tfd, SHUT_RDWR); /* its blocking reads end */
	pthread_mutex_unlock(&tlp_to.mu);
	if (tlp_to.rx_started)
		pthread_join(tlp_to.th_rx, NULL);
	tlp_to.srv_started = tlp_to.rx_started = 0;
	if (tlp_to.tfd >= 0)
		close(tlp_to.tfd);
	tlp_to.tfd = -1;
	mine = tlp_to.published ? tlp_to.serve_path : tlp_to.tmp_path;
	if (tlp_to.lfd >= 0) {
		close(tlp_to.lfd);
		/* A successor may have put its own socket there. */
		if (stat(mine, &st) == 0 && st.st_ino == tlp_to.lino)
			unlink(mine);
	}
	tlp_to.lfd = -1;
	/* Records nobody will send: nobody forwards them any more. */
	for (struct qrec *q = tlp_to.head; q;) {
		struct qrec *next = q->next;

		if (q->nfds == 2) {
			tlp_ho_fd_abort(q->fds[0]);
			tlp_ho_fd_abort(q->fds[1]);
			free(q);
		} else {
			tlp_to_qrec_free(q, 1);
		}
		q = next;
	}
	tlp_to.head = tlp_to.tail = NULL;
}
