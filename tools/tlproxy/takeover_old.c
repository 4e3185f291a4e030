/* tools/tlproxy/takeover_old.c: the old process's side of a live takeover: the thread that serves the handover socket, refuses the peers it must, and runs a session (listeners, READY, the connections, the deadline). */
/* Calls: takeover -> world, as takeover.c. */
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

	if (tlp_to.taken)
		snprintf(why, sizeof why, "this process was taken over by pid %d", (int)tlp_to.taker);
	else
		snprintf(why, sizeof why, "another takeover (pid %d) is under way", (int)tlp_to.taker);
	refuse(fd, TLP_HO_R_BUSY, why);
	close(fd);
}

/* While a takeover is under way (or done): every other peer, waiting or
 * new, is refused at once rather than left to wait for it. */
void tlp_to_refuse_newcomers(void)
{
	int fd;

	for (uint32_t i = 0; i < tlp_to.npeers; i++)
		refuse_busy(tlp_to.peers[i].fd);
	tlp_to.npeers = 0;
	while (tlp_to.lfd >= 0 && (fd = accept4(tlp_to.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
		refuse_busy(fd);
}

/* Ask every shard (through shard 0) for type, and wait until all have
 * answered in *acks or the deadline. 0 or -ETIMEDOUT. */
static int ask_all(uint32_t type, uint32_t flags, uint32_t *acks, uint64_t deadline)
{
	int r = 0;

	pthread_mutex_lock(&tlp_to.mu);
	*acks = 0;
	pthread_mutex_unlock(&tlp_to.mu);
	for (int k = 0;
	     (r = tl_post(tlp_w.post0, tlp_ctl_token(type, TLP_HO_FROM_THREAD | flags), 0)) < 0;
	     k++) {
		struct timespec t = {0, 1000000};

		if (r != -ENOBUFS || k > 5000 || atomic_load(&tlp_to.stop))
			return r;
		nanosleep(&t, NULL);
	}
	pthread_mutex_lock(&tlp_to.mu);
	while (*acks < tlp_w.nshards) {
		struct timespec t;

		if (tlp_to_now_ns() >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += 20000000;
		if (t.tv_nsec >= 1000000000) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&tlp_to.cv, &tlp_to.mu, &t);
		pthread_mutex_unlock(&tlp_to.mu);
		tlp_to_refuse_newcomers();
		pthread_mutex_lock(&tlp_to.mu);
	}
	pthread_mutex_unlock(&tlp_to.mu);
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
		if (tlp_to_in_session)
			tlp_to_refuse_newcomers();
		if (!cancelled && (atomic_load(&tlp_to.stop) || (deadline && tlp_to_now_ns() >= deadline))) {
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
	r = out_wait(1, op, tlp_to_now_ns() + tlp_to.deadline_ns + 5000000000ull);
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

void tlp_to_qrec_free(struct qrec *q, int close_them)
{
	if (close_them)
		tlp_to_close_fds(q->fds, q->nfds);
	free(q);
}

/* The peer's ACKs that have arrived on fd (never waiting): each releases
 * the records it acknowledges (their descriptors are the peer's now).
 * 0, -EPIPE once the peer has gone, -EPROTO for anything but an ACK. */
static int read_acks(int fd)
{
	for (;;) {
		ssize_t k = recv(fd, tlp_to.ackbuf + tlp_to.ackgot, sizeof tlp_to.ackbuf - tlp_to.ackgot, MSG_DONTWAIT);
		struct tlp_ho_hdr h;
		struct tlp_ho_msg m;

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		if (k == 0)
			return -EPIPE;
		tlp_to.ackgot += (uint32_t)k;
		if (tlp_to.ackgot < sizeof tlp_to.ackbuf)
			continue;
		tlp_to.ackgot = 0;
		if (tlp_ho_hdr_decode(tlp_to.ackbuf, TLP_HO_HDR, &h) < 0 || h.type != TLP_HO_ACK ||
		    h.len != 4 || tlp_ho_decode(&h, tlp_to.ackbuf + TLP_HO_HDR, 4, &m) < 0 ||
		    m.u.ack.count > tlp_to.sent + tlp_to.end_sent)
			return -EPROTO;
		if (m.u.ack.count == tlp_to.sent + 1) {
			/* one past the CONN records: END read, and every one before */
			tlp_to.end_acked = 1;
			m.u.ack.count = tlp_to.sent;
		}
		while (tlp_to.acked < m.u.ack.count && tlp_to.unacked) {
			struct qrec *q = tlp_to.unacked;

			tlp_to.unacked = q->next;
			if (!tlp_to.unacked)
				tlp_to.unacked_tail = &tlp_to.unacked;
			tlp_to_qrec_free(q, 1);
			tlp_to.acked++;
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

	pthread_mutex_lock(&tlp_to.mu);
	q = tlp_to.head;
	tlp_to.head = tlp_to.tail = NULL;
	pthread_mutex_unlock(&tlp_to.mu);
	while (q && !err) {
		struct qrec *next = q->next;

		err = out_send(q->data, q->len, q->fds, q->nfds);
		if (err)
			break;
		n++;
		if (q->nfds == 2) {
			q->next = NULL;
			*tlp_to.unacked_tail = q;
			tlp_to.unacked_tail = &q->next;
			tlp_to.sent++;
			err = read_acks(fd);
		} else {
			tlp_to_qrec_free(q, 1);
		}
		q = next;
	}
	if (q) {
		/* Back at the head, before what the shards pushed since. */
		struct qrec *last = q;

		while (last->next)
			last = last->next;
		pthread_mutex_lock(&tlp_to.mu);
		last->next = tlp_to.head;
		tlp_to.head = q;
		if (!tlp_to.tail)
			tlp_to.tail = last;
		pthread_mutex_unlock(&tlp_to.mu);
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
	pthread_mutex_lock(&tlp_to.mu);
	list = tlp_to.head;
	tlp_to.head = tlp_to.tail = NULL;
	pthread_mutex_unlock(&tlp_to.mu);
	/* Unacknowledged first: they were pushed earlier. */
	if (tlp_to.unacked) {
		*tlp_to.unacked_tail = list;
		list = tlp_to.unacked;
	}
	tlp_to.unacked = NULL;
	tlp_to.unacked_tail = &tlp_to.unacked;
	atomic_store(&tlp_to.adopted, 0);
	atomic_store(&tlp_to.cut, 0);
	for (q = list; q;) {
		struct qrec *next = q->next;
		struct tlp_ho_hdr h;
		struct tlp_ho_in *in = NULL;

		if (q->nfds == 2 && tlp_ho_hdr_decode(q->data, q->len, &h) == TLP_HO_HDR &&
		    (in = tlp_to_in_new(&h, q->data + TLP_HO_HDR, q->fds)) && tlp_to_post_in(in) == 0) {
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
				atomic_fetch_add(&tlp_to.cut, 1);
			} else {
				tlp_to_qrec_free(q, 1);
			}
		}
		q = next;
	}
	*cut = tlp_to_wait_adopted(n);
	return n;
}

/* One takeover conversation on fd with peer pid, whose HELLO was read. 1
 * when everything was handed over (the process then drains), 0 when it
 * failed (it keeps serving). */
static int session(int fd, pid_t pid)
{
	struct tlp_ho_msg m;
	struct tlp_ho_hdr h;
	uint64_t t0 = tlp_to_now_ns(), t_ready, dl;
	long sent;
	uint32_t back = 0, cut = 0;
	int r, failed = 0;
	const char *why = NULL;

	tlp_to.taker = pid;
	tlp_to.sent = tlp_to.acked = 0;
	tlp_to.unacked = NULL;
	tlp_to.unacked_tail = &tlp_to.unacked;
	tlp_to.ackgot = 0;
	tlp_to.end_sent = tlp_to.end_acked = 0;
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	m.u.hello.pid = (uint32_t)getpid();
	if (tlp_to_send_msg(fd, &m) < 0) {
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
	if (ask_all(TLP_MSG_HO_LISTEN, 0, &tlp_to.listen_acks, tlp_to_now_ns() + 5000000000ull) < 0 ||
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
	r = tlp_to_recv_msg(fd, &h, &m, NULL, NULL, tlp_to_now_ns() + tlp_to.deadline_ns + 30000000000ull);
	if (r < 0 || m.type != TLP_HO_READY) {
		tlp_log("takeover by pid %d failed before it accepted (%s); still serving", (int)pid,
			r < 0 ? tl_strerror(r) : "not READY");
		return 0;
	}
	t_ready = tlp_to_now_ns();
	dl = t_ready + tlp_to.deadline_ns;
	atomic_store(&tlp_to.pending, 0);
	ask_all(TLP_MSG_HO_GO, 0, &tlp_to.go_acks, dl);
	for (;;) {
		int done;

		r = 0;
		pthread_mutex_lock(&tlp_to.mu);
		while (!tlp_to.head && !(tlp_to.go_acks == tlp_w.nshards && atomic_load(&tlp_to.pending) <= 0) &&
		       tlp_to_now_ns() < dl) {
			struct timespec t;

			clock_gettime(CLOCK_REALTIME, &t);
			t.tv_nsec += 20000000;
			if (t.tv_nsec >= 1000000000) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&tlp_to.cv, &tlp_to.mu, &t);
			pthread_mutex_unlock(&tlp_to.mu);
			tlp_to_refuse_newcomers();
			r = read_acks(fd);
			pthread_mutex_lock(&tlp_to.mu);
			if (r < 0)
				break;
		}
		done = !tlp_to.head && tlp_to.go_acks == tlp_w.nshards && atomic_load(&tlp_to.pending) <= 0;
		pthread_mutex_unlock(&tlp_to.mu);
		sent = r < 0 ? r : flush_queue(fd);
		if (sent < 0) {
			why = tl_strerror((int)sent);
			failed = 1;
			break;
		}
		if (done || tlp_to_now_ns() >= dl)
			break;
	}
	/* What is still on its way goes back to forwarding here and drains. */
	atomic_store(&tlp_to.left, 0);
	ask_all(TLP_MSG_HO_STOP, 0, &tlp_to.stop_acks, tlp_to_now_ns() + 5000000000ull);
	if (!failed) {
		sent = flush_queue(fd);
		if (sent < 0) {
			why = tl_strerror((int)sent);
			failed = 1;
		}
	}
	memset(&m, 0, sizeof m);
	m.type = TLP_HO_END;
	m.u.end.handed = tlp_to.sent;
	m.u.end.left = atomic_load(&tlp_to.left);
	if (!failed && (r = out_msg(&m)) < 0) {
		why = tl_strerror(r);
		failed = 1;
	}
	tlp_to.end_sent = !failed;
	/* Every connection sent must be acknowledged before this process lets
	 * go of it, and END too: a successor gone after READY is seen even
	 * when no connection was in flight to miss its acknowledgement. */
	for (uint64_t adl = tlp_to_now_ns() + 5000000000ull; !failed && !tlp_to.end_acked;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (tlp_to_now_ns() >= adl || atomic_load(&tlp_to.stop)) {
			why = tlp_to.acked < tlp_to.sent ? "no acknowledgement of every connection"
							 : "no acknowledgement of END";
			failed = 1;
			break;
		}
		tlp_to_refuse_newcomers();
		if (poll(&p, 1, 20) > 0 && (r = read_acks(fd)) < 0 && !tlp_to.end_acked) {
			why = tl_strerror(r);
			failed = 1;
		}
	}
	if (failed)
		back = take_back(fd, &cut);
	/* Gone: this process takes its listening sockets back. */
	ask_all(TLP_MSG_HO_FIN, failed ? TLP_HO_FAILED : 0, &tlp_to.fin_acks, tlp_to_now_ns() + 5000000000ull);
	if (failed) {
		tlp_log("takeover by pid %d failed (%s): %u connection%s it had taken go%s with it, "
			"%u taken back and carried on here (%u of them cut); still serving",
			(int)pid, why, tlp_to.acked, tlp_to.acked == 1 ? "" : "s", tlp_to.acked == 1 ? "es" : "",
			back, cut);
		return 0;
	}
	tlp_log("takeover by pid %d: %u connection%s handed over in %.1f ms (listeners %.1f ms "
		"before), %u left to drain here, %llu bytes carried",
		(int)pid, tlp_to.sent, tlp_to.sent == 1 ? "" : "s", (tlp_to_now_ns() - t_ready) / 1e6,
		(t_ready - t0) / 1e6, m.u.end.left, (unsigned long long)atomic_load(&tlp_to.carried));
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
	if (tlp_to.taken) {
		refuse_busy(fd);
		return;
	}
	if (tlp_to.npeers == MAX_PEERS) {
		refuse(fd, TLP_HO_R_BUSY, "too many takeovers at once");
		tlp_log("takeover refused (pid %d): %u others have not said HELLO yet", (int)uc.pid,
			tlp_to.npeers);
		close(fd);
		return;
	}
	tlp_to.peers[tlp_to.npeers++] = (struct peer){.fd = fd, .pid = uc.pid, .t0 = tlp_to_now_ns()};
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
	while (!atomic_load(&tlp_to.stop)) {
		struct pollfd p[1 + MAX_PEERS];
		uint32_t n = 0;
		int fd, r;

		p[n++] = (struct pollfd){.fd = tlp_to.lfd, .events = POLLIN};
		for (uint32_t i = 0; i < tlp_to.npeers; i++)
			p[n++] = (struct pollfd){.fd = tlp_to.peers[i].fd, .events = POLLIN};
		if (poll(p, n, 100) < 0 && errno != EINTR)
			break;
		while ((fd = accept4(tlp_to.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
			peer_new(fd);
		for (uint32_t i = 0; i < tlp_to.npeers;) {
			struct peer *pe = &tlp_to.peers[i];

			r = peer_read(pe);
			if (r == 0 && tlp_to_now_ns() - pe->t0 > 5000000000ull) {
				refuse(pe->fd, TLP_HO_R_PROTO, "a HELLO first, please");
				tlp_log("takeover refused (pid %d): no valid HELLO (%s); still serving",
					(int)pe->pid, tl_strerror(-ETIMEDOUT));
				close(pe->fd);
				r = -1;
			}
			if (r < 0) {
				tlp_to.peers[i] = tlp_to.peers[--tlp_to.npeers];
				continue;
			}
			if (r == 0) {
				i++;
				continue;
			}
			/* The first whole HELLO: its takeover. */
			struct peer won = *pe;

			tlp_to.peers[i] = tlp_to.peers[--tlp_to.npeers];
			tlp_to.taker = won.pid;
			tlp_to_in_session = 1;
			tlp_to_refuse_newcomers();
			r = session(won.fd, won.pid);
			tlp_to_in_session = 0;
			out_close();
			close(won.fd);
			if (r == 1) {
				tlp_to.taken = 1;
				tlp_log("draining: the new process has the listeners and the connections");
				tl_runtime_drain(tlp_w.rt);
			}
			break;
		}
		if (tlp_to.taken)
			tlp_to_refuse_newcomers();
	}
	for (uint32_t i = 0; i < tlp_to.npeers; i++)
		close(tlp_to.peers[i].fd);
	tlp_to.npeers = 0;
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

	if (!tlp_to.serve_path)
		return 0;
	/* Made under a temporary name and renamed over serve_path only once
	 * this process serves on it for good (at once, or once its own
	 * takeover is done): a successor that dies halfway never takes the
	 * name from the process it was taking over. */
	snprintf(tlp_to.tmp_path, sizeof tlp_to.tmp_path, "%s" TMP_SUFFIX, tlp_to.serve_path, (long)getpid());
	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	memcpy(su.sun_path, tlp_to.tmp_path, strlen(tlp_to.tmp_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto fail;
	/* One left by a process of our pid that died: replaced. */
	if (lstat(tlp_to.tmp_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(tlp_to.tmp_path);
	if (bind(fd, (struct sockaddr *)&su, sizeof su) < 0 || listen(fd, 16) < 0 ||
	    stat(tlp_to.tmp_path, &st) < 0)
		goto fail;
	chmod(tlp_to.tmp_path, 0600);
	tlp_to.lfd = fd;
	tlp_to.lino = st.st_ino;
	if (!tlp_takeover_wanted() && rename(tlp_to.tmp_path, tlp_to.serve_path) < 0) {
		int e = errno;

		unlink(tlp_to.tmp_path);
		tlp_to.lfd = -1;
		errno = e;
		goto fail;
	}
	tlp_to.published = !tlp_takeover_wanted();
	return 0;
fail:
	fprintf(stderr, "tlproxy: --handover-socket %s: %s\n", tlp_to.serve_path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* The takeover is done: the handover socket takes its name. */
void tlp_to_publish(void)
{
	if (tlp_to.lfd < 0 || tlp_to.published)
		return;
	if (rename(tlp_to.tmp_path, tlp_to.serve_path) < 0) {
		tlp_log("takeover: cannot name the handover socket %s (%s): it stays %s",
			tlp_to.serve_path, strerror(errno), tlp_to.tmp_path);
		return;
	}
	tlp_to.published = 1;
}

int tlp_handover_start(void)
{
	int r;

	if (tlp_to.lfd < 0)
		return 0;
	r = pthread_create(&tlp_to.th_srv, NULL, serve, NULL);
	if (r)
		return -r;
	tlp_to.srv_started = 1;
	return 0;
}

