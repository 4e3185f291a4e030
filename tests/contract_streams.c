/* tests/contract_streams.c: contract rules of streams that need the peer's end in a set state (4.7 stream end and resets). */
#include "contract.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#ifndef _WIN32
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>

/* The three read forms of contract 4.3. */
enum rform { R_PROVIDED, R_POOLED, R_START };

/* What a reader saw: the stream's bytes (checked against the pattern) and
 * how it ended. */
struct seen {
	uint64_t bytes;
	int wrong;       /* bytes that did not match the pattern */
	int64_t end;     /* the terminal result */
	uint16_t flags;  /* the terminal's flags */
	int ended;       /* a terminal arrived */
};

/* Take the data of completion x (a read of the stream at s->bytes). */
static void take(h_ctx *c, tl_completion *x, const uint8_t *buf, struct seen *s)
{
	if (x->result <= 0)
		return;
	const uint8_t *data = buf;
	if (x->flags & TL_F_LEASE)
		data = x->u.read.lease.data;
	if (check_pattern(data, (size_t)x->result, s->bytes) >= 0)
		s->wrong++;
	s->bytes += (uint64_t)x->result;
	if (x->flags & TL_F_LEASE) {
		H_EQ(tl_lease_release(c->loop, x->u.read.lease.id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
}

/* Read h with form until a read ends the stream (EOF or an error) or
 * max_reads one-shot reads came back with data; every wait is bounded. */
static void read_to_end(h_ctx *c, tl_handle h, enum rform form, struct seen *s)
{
	uint8_t buf[256];
	memset(s, 0, sizeof *s);
	if (form == R_START) {
		tl_op op;
		H_EQ_FATAL(tl_read_start(c->loop, h, 0x57a, &op), 0);
		uint32_t from = c->log.n;
		int i = h_wait_op(c, op);
		for (uint32_t k = from; k < c->log.n; k++)
			if (c->log.v[k].op.v == op.v)
				take(c, &c->log.v[k], NULL, s);
		if (i >= 0) {
			s->ended = 1;
			s->end = c->log.v[i].result;
			s->flags = c->log.v[i].flags;
		}
		return;
	}
	for (int n = 0; n < 64; n++) {
		tl_op op;
		int rc = form == R_PROVIDED ? tl_read(c->loop, h, buf, sizeof buf, 0x4ead, &op)
					    : tl_read_pooled(c->loop, h, 0x4ead, &op);
		H_EQ_FATAL(rc, 0);
		int i = h_wait_op(c, op);
		if (i < 0)
			return; /* h_wait_op recorded the failure: the end was lost */
		tl_completion *x = &c->log.v[i];
		H_TRUE(x->flags & TL_F_TERMINAL, "one-shot read not terminal");
		if (x->result > 0) {
			take(c, x, buf, s);
			continue;
		}
		s->ended = 1;
		s->end = x->result;
		s->flags = x->flags;
		return;
	}
	H_TRUE(0, "64 reads and no end of stream");
}

/* Rule 4.7: one byte and the peer's end (FIN, or a reset when rst) are both
 * queued at the reader before its first read is submitted (and, on a
 * readiness driver, after the edge that announced them was taken). The
 * reader gets the byte, then EOF (result 0, TL_F_EOF) or -ECONNRESET,
 * terminal, for every read form. */
static void end_together(enum rform form, int rst)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) ||
	    (rst && h_wine_differs(l, "a peer's reset (wine 8 reads it as the end of the stream)")))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint8_t one;
	fill_pattern(&one, 1, 0);
	if (rst) {
		/* A socket closed with unread bytes resets its peer (TCP, and
		 * the simulation driver models it): give cli a byte it never
		 * reads. */
		uint8_t unread = 0x55;
		H_EQ(h_write_all(&c, srv, &unread, 1), 1);
		h_idle(&c, 5);
	}
	H_EQ(h_write_all(&c, cli, &one, 1), 1);
	if (rst) {
		h_close(&c, cli, 0xc105e);
	} else {
		tl_op sop;
		H_EQ(tl_shutdown(l, cli, 0x5d, &sop), 0);
		int i = h_wait_op(&c, sop);
		if (i >= 0)
			H_EQ(c.log.v[i].result, 0);
	}
	/* Let the driver see the arrival before any read asks for it. */
	h_idle(&c, 10);
	struct seen s;
	read_to_end(&c, srv, form, &s);
	H_EQ(s.bytes, 1);
	H_EQ(s.wrong, 0);
	H_TRUE(s.ended, "the %s was never reported", rst ? "reset" : "end of stream");
	if (s.ended) {
		if (rst) {
			H_EQ(s.end, -ECONNRESET);
		} else {
			H_EQ(s.end, 0);
			H_EQ(s.flags & (TL_F_EOF | TL_F_LEASE), TL_F_EOF);
		}
		H_TRUE(s.flags & TL_F_TERMINAL, "end not terminal");
	}
	h_close(&c, srv, 0x5e);
	if (!rst)
		h_close(&c, cli, 0xc1);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_end_with_data_read(void) { end_together(R_PROVIDED, 0); }
static void test_end_with_data_read_pooled(void) { end_together(R_POOLED, 0); }
static void test_end_with_data_read_start(void) { end_together(R_START, 0); }
static void test_reset_with_data_read(void) { end_together(R_PROVIDED, 1); }
static void test_reset_with_data_read_pooled(void) { end_together(R_POOLED, 1); }
static void test_reset_with_data_read_start(void) { end_together(R_START, 1); }

/* Rule 4.2 (a decision where drivers differed): tl_local_addr of a handle
 * whose connect is pending is -EAGAIN on every driver, and the bound
 * loopback address with a port once TL_K_CONNECT arrived. */
static void test_local_addr_while_connecting(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli;
	tl_addr la, got;
	tl_op aop, cop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept(l, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	H_EQ(tl_local_addr(l, cli, &got), -EAGAIN);
	int i = h_wait_op(&c, cop);
	if (i >= 0)
		H_EQ(c.log.v[i].result, 0);
	memset(&got, 0, sizeof got);
	H_EQ(tl_local_addr(l, cli, &got), 0);
	H_EQ(got.sa.sa_family, AF_INET);
	H_TRUE(got.in.sin_port != 0, "no port");
	H_EQ(got.in.sin_addr.s_addr, la.in.sin_addr.s_addr);
	i = h_wait_op(&c, aop);
	if (i >= 0 && c.log.v[i].result == 0)
		h_close(&c, c.log.v[i].u.accept.conn, 3);
	h_close(&c, cli, 4);
	h_close(&c, lis, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Read h (on c) with tl_read_start until want bytes of the pattern from
 * *off arrived or the stream ended; checks order. Returns the bytes read. */
static uint64_t drain_rest(h_ctx *c, tl_handle h, uint64_t off, uint64_t want, int *wrong)
{
	tl_op op;
	H_EQ_FATAL(tl_read_start(c->loop, h, 0x4e57, &op), 0);
	uint32_t from = c->log.n;
	uint64_t got = 0, dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (got < want && h_wall_ns() < dl && h_find_term(&c->log, op) < 0) {
		h_turn(c, (int64_t)H_MS);
		for (; from < c->log.n; from++) {
			tl_completion *x = &c->log.v[from];
			if (x->op.v != op.v || x->result <= 0 || !(x->flags & TL_F_LEASE))
				continue;
			if (check_pattern(x->u.read.lease.data, (size_t)x->result, off + got) >= 0)
				(*wrong)++;
			got += (uint64_t)x->result;
			H_EQ(tl_lease_release(c->loop, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	if (h_find_term(&c->log, op) < 0) {
		H_EQ(tl_stop(c->loop, op), 0);
		h_wait_op(c, op);
		h_release_leases(c, from);
	}
	return got;
}

/* Rule 2.5: a read is stopped or cancelled while its data is in flight:
 * the peer's bytes reached the socket after the read was armed, and (for
 * read_start) the reader's last turn took only part of what the driver had
 * for it (two events per turn, 1 KiB leases), so the rest is in the driver
 * or the kernel (io_uring: CQEs left in the CQ for want of room; the
 * simulation driver: a run racing the cancel). Whatever the driver had already taken
 * off the socket arrives, in order, as nonterminal read completions before
 * the terminal, and nothing after it; a new read then gets the rest: no
 * byte is lost. Twenty rounds. */
static void in_flight(enum rform form, int stop)
{
	enum { N = 32 * 1024, ROUNDS = 20 };
	int fds = h_begin();
	h_ctx ca, cb;
	tl_config cfg = cfg_default();
	cfg.events_per_turn = 2;
	cfg.pooled_buffer_size = 1024;
	h_ctx_init(&ca, h_loop_cfg(&cfg));
	h_ctx_init(&cb, h_loop());
	tl_loop *a = ca.loop, *b = cb.loop;
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	h_ctx_link(&ca, &cb);
	H_EQ_FATAL(h_pair(&ca, &cb, AF_INET, &srv, &cli), 0);
	ca.peer = cb.peer = NULL; /* from now on each side turns alone */
	uint8_t *msg = malloc(N), buf[N];
	CU_ASSERT_PTR_NOT_NULL_FATAL(msg);
	uint64_t off = 0;
	int wrong = 0, after = 0;
	for (int r = 0; r < ROUNDS; r++) {
		tl_op op;
		int rc = form == R_START    ? tl_read_start(a, srv, 0x1f, &op)
			 : form == R_POOLED ? tl_read_pooled(a, srv, 0x1f, &op)
					    : tl_read(a, srv, buf, sizeof buf, 0x1f, &op);
		H_EQ_FATAL(rc, 0);
		h_turn(&ca, 0); /* the read is armed in the driver */
		fill_pattern(msg, N, off);
		uint32_t mark = ca.log.n;
		int w0 = 0;
		if (form == R_START) {
			/* A first message the host does not answer: the io_uring
			 * driver's read then stays armed in the kernel (multishot),
			 * where the rest piles up as CQEs. */
			H_EQ(h_write_all(&cb, cli, msg, 2048), 2048);
			for (int w = 0; w < 50 && h_count_op(&ca.log, op, mark) == 0; w++)
				h_turn(&ca, (int64_t)H_MS);
			h_turn(&ca, 0);
			w0 = 1;
		}
		for (int w = w0; w < N / 2048; w++)
			H_EQ(h_write_all(&cb, cli, msg + w * 2048, 2048), 2048);
		if (form == R_START)
			h_turn(&ca, 0); /* takes part of it; a one-shot read would end */
		H_EQ(stop ? tl_stop(a, op) : tl_cancel(a, op), 0);
		int i = h_wait_op(&ca, op);
		H_TRUE_FATAL(i >= 0, "no terminal");
		uint64_t got = 0;
		for (uint32_t k = mark; k < ca.log.n; k++) {
			tl_completion *x = &ca.log.v[k];
			if (x->op.v != op.v)
				continue;
			if ((int)k > i) {
				after++;
				continue;
			}
			if ((int)k == i) {
				H_EQ(x->result, stop ? 0 : -ECANCELED);
				break;
			}
			H_EQ(x->flags & TL_F_TERMINAL, 0);
			H_TRUE(x->result > 0, "a nonterminal read without data: %lld", (long long)x->result);
			if (x->result <= 0)
				continue;
			const uint8_t *data = (x->flags & TL_F_LEASE) ? x->u.read.lease.data : buf;
			if (check_pattern(data, (size_t)x->result, off + got) >= 0)
				wrong++;
			got += (uint64_t)x->result;
			if (x->flags & TL_F_LEASE) {
				H_EQ(tl_lease_release(a, x->u.read.lease.id), 0);
				x->flags &= (uint16_t)~TL_F_LEASE;
			}
		}
		/* What the driver had not taken is still in the socket. */
		if (got < N)
			got += drain_rest(&ca, srv, off + got, N - got, &wrong);
		H_EQ(got, N);
		off += N;
	}
	H_EQ(wrong, 0);
	H_EQ(after, 0);
	free(msg);
	h_close(&ca, srv, 1);
	h_close(&cb, cli, 2);
out:
	ca.peer = cb.peer = NULL;
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

static void test_stop_read_start_in_flight(void) { in_flight(R_START, 1); }
static void test_cancel_read_start_in_flight(void) { in_flight(R_START, 0); }
static void test_cancel_read_in_flight(void) { in_flight(R_PROVIDED, 0); }
static void test_cancel_read_pooled_in_flight(void) { in_flight(R_POOLED, 0); }

/* Rule 2.5, the other half: no operation but a read produces a nonterminal
 * completion after its stop was accepted. Connections the kernel completed
 * are waiting for a multishot accept, and a repeating timer is due, when
 * both are stopped without a turn in between: each ends with Stopped and
 * nothing else. */
static void test_stop_accept_and_timer_in_flight(void)
{
	enum { NC = 8 };
	int fds = h_begin();
	h_ctx ca, cb;
	h_ctx_init(&ca, h_loop());
	h_ctx_init(&cb, h_loop());
	tl_loop *a = ca.loop, *b = cb.loop;
	if (!h_need_cap(a, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[NC], th;
	tl_addr la;
	tl_op aop, cop[NC], top;
	H_EQ_FATAL(h_listen(&ca, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_accept_start(a, lis, 7, &aop), 0);
	H_EQ_FATAL(tl_timer_start(a, tl_now(a), 1000 * H_MS, 8, &th, &top), 0);
	h_turn(&ca, 0); /* armed; the timer's first expiry came */
	for (int k = 0; k < NC; k++)
		H_EQ_FATAL(tl_tcp_connect(b, &la, 0, 10 + (uint64_t)k, &cli[k], &cop[k]), 0);
	for (int k = 0; k < NC; k++)
		h_wait_op(&cb, cop[k]);
	H_EQ(tl_timer_reset(a, th, tl_now(a)), 0); /* due again */
	uint32_t mark = ca.log.n;
	H_EQ(tl_stop(a, aop), 0);
	H_EQ(tl_stop(a, top), 0);
	int ia = h_wait_op(&ca, aop), it = h_wait_op(&ca, top);
	for (uint32_t k = mark; k < ca.log.n; k++) {
		tl_completion *x = &ca.log.v[k];
		if (x->op.v != aop.v && x->op.v != top.v)
			continue;
		H_TRUE(x->flags & TL_F_TERMINAL, "a nonterminal %s after its stop (result %lld)",
		       x->op.v == aop.v ? "accept" : "timer", (long long)x->result);
		H_TRUE(x->flags & TL_F_STOPPED, "terminal not Stopped");
	}
	H_TRUE(ia >= 0 && it >= 0, "a terminal is missing");
	for (uint32_t k = 0; k < ca.log.n; k++)
		if (ca.log.v[k].op.v == aop.v && ca.log.v[k].result >= 0 &&
		    !(ca.log.v[k].flags & TL_F_TERMINAL))
			h_close(&ca, ca.log.v[k].u.accept.conn, 3);
	h_close(&ca, th, 4);
	for (int k = 0; k < NC; k++)
		h_close(&cb, cli[k], 5);
	h_close(&ca, lis, 6);
out:
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule 4.2: a Unix connect to a listener whose queue is full (backlog 1,
 * nothing accepted) either connects, and the socket then takes a write, or
 * ends with the error the kernel gave (-EAGAIN); never "connected" on a
 * socket that is not (epoll used to take the kernel's EAGAIN for "in
 * progress" and report 0). */
static void test_unix_connect_queue_full(void)
{
	enum { N = 4 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UNIX))
		goto out;
	char dir[] = "/tmp/tl-cq-XXXXXX", path[64];
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof path, "%s/sock", dir);
	tl_listen_opts lo = {.backlog = 1};
	tl_handle lis, cli[N];
	tl_op cop[N];
	H_EQ_FATAL(tl_unix_listen(l, path, &lo, &lis), 0);
	int refused = 0, connected = 0;
	for (int k = 0; k < N; k++) {
		int rc = tl_unix_connect(l, path, 0, 10 + (uint64_t)k, &cli[k], &cop[k]);
		H_EQ_FATAL(rc, 0);
		int i = h_wait_op(&c, cop[k]);
		H_TRUE_FATAL(i >= 0, "connect %d never ended", k);
		int64_t r = c.log.v[i].result;
		if (r == 0) {
			connected++;
			tl_op w;
			H_EQ(tl_write(l, cli[k], "x", 1, 20, &w), 0);
			int j = h_wait_op(&c, w);
			if (j >= 0)
				H_EQ(c.log.v[j].result, 1);
		} else {
			H_EQ(r, -EAGAIN);
			refused++;
		}
	}
	H_TRUE(connected >= 1, "no connect succeeded");
	H_TRUE(refused >= 1, "a backlog of 1 took %d connects", connected);
	for (int k = 0; k < N; k++)
		h_close(&c, cli[k], 30);
	h_close(&c, lis, 31);
	if (unlink(path) != 0)
		H_EQ(errno, ENOENT); /* the simulation driver makes no file */
	H_EQ(rmdir(dir), 0);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- How much of a write reached the socket (u.write.written) ---- */

enum { WW_N = 4, WW_LEN = 1 << 20 };
enum ww_end { WW_CANCEL_ALL, WW_CANCEL_FIRST, WW_CLOSE, WW_DETACH };

/* Four 1 MiB writes of the pattern on a stream whose peer reads nothing
 * (small buffers: the first write is under way, the others wait), then
 * ended as `how` says. Each write's terminal says how many of its bytes
 * reached the socket (u.write.written: all of a write that succeeded, a
 * prefix of one that did not), and the peer, reading to the end, gets
 * exactly those bytes of each write in order, nothing else. */
static void write_written(enum ww_end how)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	uint8_t *src = malloc((size_t)WW_N * WW_LEN), *got = malloc((size_t)WW_N * WW_LEN + 1);
	H_TRUE_FATAL(src && got, "malloc");
	if (!h_need_cap(l, TL_CAP_TCP) || (how == WW_DETACH && !h_need_cap(l, TL_CAP_DETACH)) ||
	    h_wine_differs(l, "a cancelled or cut-short send to a peer that reads nothing "
			      "(wine 8 never completes it)"))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	H_EQ(tl_sockopt_set(l, srv, TL_SO_SNDBUF, 32768), 0);
	H_EQ(tl_sockopt_set(l, cli, TL_SO_RCVBUF, 32768), 0);
	fill_pattern(src, (size_t)WW_N * WW_LEN, 0);
	tl_op w[WW_N], sh;
	for (int i = 0; i < WW_N; i++)
		H_EQ_FATAL(tl_write(l, srv, src + (size_t)i * WW_LEN, WW_LEN, 10 + i, &w[i]), 0);
	h_idle(&c, 50); /* the socket takes what fits */
	int fd = -1;
	switch (how) {
	case WW_CANCEL_ALL:
		for (int i = WW_N - 1; i >= 0; i--)
			H_EQ(tl_cancel(l, w[i]), 0);
		break;
	case WW_CANCEL_FIRST:
		H_EQ(tl_cancel(l, w[0]), 0);
		break;
	case WW_CLOSE:
		H_EQ(tl_close(l, srv, 20), 0);
		break;
	case WW_DETACH:
		for (uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
		     tl_detach(l, srv, &fd) == -EAGAIN && h_wall_ns() < dl;)
			h_turn(&c, 10 * (int64_t)H_MS);
		H_TRUE(fd >= 0, "no descriptor from tl_detach");
		break;
	}
	/* The peer reads everything that reached the socket, to its end;
	 * the writes not cancelled complete meanwhile. */
	if (how == WW_CANCEL_ALL || how == WW_CANCEL_FIRST) {
		H_EQ(h_wait_op(&c, w[0]) >= 0, 1);
		H_EQ_FATAL(tl_shutdown(l, srv, 21, &sh), 0);
	}
	if (how == WW_DETACH && fd >= 0)
		h_sock_close(fd);
	int eof = 0;
	int64_t n = h_read_exact(&c, cli, got, (uint32_t)WW_N * WW_LEN + 1, &eof);
	H_TRUE(eof, "no end of stream after %lld bytes", (long long)n);
	uint64_t want = 0, off = 0;
	int partial = 0, cut = 0;
	for (int i = 0; i < WW_N; i++) {
		int k = h_wait_op(&c, w[i]);
		H_TRUE_FATAL(k >= 0, "write %d did not end", i);
		const tl_completion *x = &c.log.v[k];
		uint64_t wr = x->u.write.written;
		int cancelled = how == WW_CLOSE || how == WW_DETACH || how == WW_CANCEL_ALL || i == 0;
		H_EQ(x->kind, TL_K_WRITE);
		if (x->result == WW_LEN) {
			H_EQ(wr, WW_LEN);
		} else {
			H_EQ(x->result, -ECANCELED);
			H_TRUE(cancelled, "write %d ended with %lld", i, (long long)x->result);
			H_TRUE(wr <= WW_LEN, "write %d: %llu written", i, (unsigned long long)wr);
			cut++;
		}
		if (wr > 0 && wr < WW_LEN)
			partial++;
		/* Its bytes are the next ones the peer got. */
		H_TRUE(n >= 0 && off + wr <= (uint64_t)n &&
			       !memcmp(got + off, src + (size_t)i * WW_LEN, (size_t)wr),
		       "write %d: its %llu bytes are not the peer's bytes at %llu", i,
		       (unsigned long long)wr, (unsigned long long)off);
		off += wr;
		want += wr;
	}
	H_EQ(n, (int64_t)want);
	H_TRUE(cut > 0, "no write was cut: the test proves nothing");
	H_TRUE(partial > 0, "no write was cut part way: the test proves nothing");
	if (how == WW_CANCEL_ALL || how == WW_CANCEL_FIRST) {
		H_TRUE(h_wait_op(&c, sh) >= 0, "no shutdown");
		h_close(&c, srv, 22);
	} else if (how == WW_CLOSE) {
		H_TRUE(h_wait_closed(&c, srv) >= 0, "no Closed");
	}
	h_close(&c, cli, 23);
out:
	free(src);
	free(got);
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_write_written_cancel_all(void) { write_written(WW_CANCEL_ALL); }
static void test_write_written_cancel_first(void) { write_written(WW_CANCEL_FIRST); }
static void test_write_written_close(void) { write_written(WW_CLOSE); }
static void test_write_written_detach(void) { write_written(WW_DETACH); }

const struct test_def tl_contract_streams[] = {
	T("4.2 connect", test_unix_connect_queue_full),
	T("2.5 cancel in flight", test_stop_read_start_in_flight),
	T("2.5 cancel in flight", test_cancel_read_start_in_flight),
	T("2.5 cancel in flight", test_cancel_read_in_flight),
	T("2.5 cancel in flight", test_cancel_read_pooled_in_flight),
	T("2.5 cancel in flight", test_stop_accept_and_timer_in_flight),
	T("4.2 connect", test_local_addr_while_connecting),
	T("4.4 bytes written", test_write_written_cancel_all),
	T("4.4 bytes written", test_write_written_cancel_first),
	T("4.4 bytes written", test_write_written_close),
	T("4.4 bytes written", test_write_written_detach),
	T("4.7 stream end", test_end_with_data_read),
	T("4.7 stream end", test_end_with_data_read_pooled),
	T("4.7 stream end", test_end_with_data_read_start),
	T("4.7 stream end", test_reset_with_data_read),
	T("4.7 stream end", test_reset_with_data_read_pooled),
	T("4.7 stream end", test_reset_with_data_read_start),
	{ NULL, NULL, NULL },
};
