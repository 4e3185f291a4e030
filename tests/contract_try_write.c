/* tests/contract_try_write.c: contract 4.4a (tl_try_write: a write taken at once, with no operation and no completion, in order with the stream's queued writes), on every driver; io_uring and DPDK have no such path and must say -ENOTSUP. */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>

/* Whether the loop's driver takes tl_try_write (loop.h: every driver but
 * io_uring here). On io_uring every call on a live stream is -ENOTSUP,
 * checked here, and the test ends as a skip that says so. */
static int have_try_write(tl_loop *l, tl_handle h)
{
	static const uint8_t one = 'x';
	if (strcmp(tl_loop_driver(l), "uring") != 0)
		return 1;
	H_EQ(tl_try_write(l, h, &one, 1), -ENOTSUP);
	h_skip("driver %s lacks tl_try_write", tl_loop_driver(l));
	return 0;
}

/* A receive that never waits on a socket of the loop's (recv with
 * MSG_DONTWAIT; on Windows, which lacks the flag, only what FIONREAD says
 * is there): the bytes, 0 for none, or -1. */
static long recv_nowait(int fd, uint8_t *buf, size_t len)
{
#ifdef _WIN32
	u_long ready = 0;
	if (ioctlsocket((SOCKET)(intptr_t)fd, FIONREAD, &ready) != 0)
		return -1;
	if (!ready)
		return 0;
	int r = recv((SOCKET)(intptr_t)fd, (char *)buf, (int)(ready < len ? ready : len), 0);
	return r < 0 ? -1 : r;
#else
	return (long)recv(fd, buf, len, MSG_DONTWAIT);
#endif
}

/* Rule 4.4a: on an idle connected stream the bytes are taken at once
 * (all of a small write), the peer reads exactly them, and no completion
 * of any kind comes for the writer; the call's errors are the documented
 * ones. */
static void test_try_write_takes_at_once(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli, lis;
	tl_addr a;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	if (!have_try_write(l, srv))
		goto close;
	uint8_t msg[1000], got[1000];
	fill_pattern(msg, sizeof msg, 0);
	uint32_t mark = c.log.n;
	H_EQ(tl_try_write(l, srv, msg, sizeof msg), (int64_t)sizeof msg);
	memset(msg, 0, sizeof msg); /* the caller's again at return */
	int eof = 0;
	H_EQ(h_read_exact(&c, cli, got, sizeof got, &eof), (int64_t)sizeof got);
	H_EQ(check_pattern(got, sizeof got, 0), -1);
	H_EQ(h_count_handle(&c.log, srv, mark), 0);
	H_EQ(h_count_kind(&c.log, TL_K_WRITE, mark), 0);
	/* The errors. */
	H_EQ(tl_try_write(l, srv, msg, 0), 0);
	H_EQ(tl_try_write(l, srv, NULL, 0), 0);
	H_EQ(tl_try_write(l, srv, NULL, 5), -EINVAL);
	H_EQ(tl_try_write(l, TL_HANDLE_NONE, msg, 5), -ENOENT);
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &a), 0);
	H_EQ(tl_try_write(l, lis, msg, 5), -EINVAL);
	h_close(&c, lis, 7);
	H_EQ(tl_close(l, srv, 8), 0);
	H_EQ(tl_try_write(l, srv, msg, 5), -EINVAL); /* closing */
	H_TRUE(h_wait_closed(&c, srv) >= 0, "no Closed");
	H_EQ(tl_try_write(l, srv, msg, 5), -ENOENT); /* stale */
	h_close(&c, cli, 9);
	goto out;
close:
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/*
 * Rule 4.4a: order. A write queued on the stream (a large one the peer does
 * not read yet, small buffers) makes every tl_try_write -EAGAIN, taking
 * nothing; with nothing queued, a write larger than the buffers is taken
 * in part (fewer bytes than asked), after which the socket is full
 * (-EAGAIN) and the rest goes by tl_write. The peer reads the queued
 * write, then what was taken, then the rest: the stream in order, each
 * byte once.
 */
static void test_try_write_keeps_order(void)
{
	enum { Q = 1 << 20, BIG = 4 << 20 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	uint8_t *src = malloc(Q + BIG), *got = malloc(Q + BIG + 1);
	H_TRUE_FATAL(src && got, "malloc");
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	if (!have_try_write(l, srv))
		goto close;
	H_EQ(tl_sockopt_set(l, srv, TL_SO_SNDBUF, 32768), 0);
	H_EQ(tl_sockopt_set(l, cli, TL_SO_RCVBUF, 32768), 0);
	fill_pattern(src, Q + BIG, 0);
	/* Queued first: while it is, nothing is taken. */
	tl_op w1, w2;
	H_EQ_FATAL(tl_write(l, srv, src, Q, 1, &w1), 0);
	h_idle(&c, 20);
	H_TRUE(h_find_term(&c.log, w1) < 0, "the queued write finished: the test proves nothing");
	H_EQ(tl_try_write(l, srv, src + Q, 100), -EAGAIN);
	/* The peer reads the queued write; then nothing is queued. */
	int eof = 0;
	H_EQ(h_read_exact(&c, cli, got, Q, &eof), (int64_t)Q);
	int i = h_wait_op(&c, w1);
	H_TRUE_FATAL(i >= 0, "the queued write did not end");
	H_EQ(c.log.v[i].result, (int64_t)Q);
	/* Larger than the buffers: taken in part, then the socket is full. */
	int64_t n = tl_try_write(l, srv, src + Q, BIG);
	H_TRUE(n > 0 && n < BIG, "tl_try_write of %d bytes took %lld", BIG, (long long)n);
	if (n <= 0 || n >= BIG)
		goto close;
	H_EQ(tl_try_write(l, srv, src + Q + n, BIG - (uint32_t)n), -EAGAIN);
	H_EQ_FATAL(tl_write(l, srv, src + Q + n, BIG - (uint32_t)n, 2, &w2), 0);
	H_EQ(tl_try_write(l, srv, src, 1), -EAGAIN); /* behind w2 */
	H_EQ_FATAL(tl_shutdown(l, srv, 3, &w1), 0);
	int64_t m = h_read_exact(&c, cli, got + Q, BIG + 1, &eof);
	H_EQ(m, (int64_t)BIG);
	H_TRUE(eof, "no end of stream");
	H_EQ(check_pattern(got, Q + (size_t)(m > 0 ? m : 0), 0), -1);
	i = h_wait_op(&c, w2);
	H_TRUE(i >= 0 && c.log.v[i].result == BIG - n, "the rest's write did not end with its length");
close:
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	free(src);
	free(got);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/*
 * Rule 4.4a: order, where the socket has room but a write is still queued.
 * The peer's bytes are read straight from its OS socket (recv, the loop
 * not turning), so the writer's socket gets room while its queued write
 * waits for the loop to see that: tl_try_write must take nothing then, or
 * its bytes would pass the queued write's. Needs TL_CAP_OS (the simulation
 * driver's sockets have no descriptor; its queued writes are checked by
 * test_try_write_keeps_order).
 */
static void test_try_write_waits_for_queue_with_room(void)
{
	enum { Q = 1 << 20 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	uint8_t *src = malloc(Q + 100), *got = malloc(Q + 101);
	H_TRUE_FATAL(src && got, "malloc");
	if (!h_need_cap(l, TL_CAP_TCP) || !h_need_cap(l, TL_CAP_OS))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	if (!have_try_write(l, srv))
		goto close;
	H_EQ(tl_sockopt_set(l, srv, TL_SO_SNDBUF, 32768), 0);
	H_EQ(tl_sockopt_set(l, cli, TL_SO_RCVBUF, 32768), 0);
	fill_pattern(src, Q + 100, 0);
	tl_op w;
	H_EQ_FATAL(tl_write(l, srv, src, Q, 1, &w), 0);
	h_idle(&c, 20);
	H_TRUE(h_find_term(&c.log, w) < 0, "the queued write finished: the test proves nothing");
	int fd = tl_handle_fd(l, cli);
	H_TRUE_FATAL(fd >= 0, "no descriptor for the peer");
	size_t off = 0;
	for (int k = 0; k < 100 && off < 200000; k++) { /* room for the writer, the loop still */
		long r = recv_nowait(fd, got + off, Q - off);
		if (r > 0)
			off += (size_t)r;
		else
			h_sleep_ms(1);
	}
	H_TRUE(off > 0, "the peer read nothing");
	H_EQ(tl_try_write(l, srv, src + Q, 100), -EAGAIN);
	H_TRUE(h_find_term(&c.log, w) < 0, "the write ended without the loop turning");
	/* The rest by the loop: the stream is the queued write alone. */
	int eof = 0;
	H_EQ_FATAL(tl_shutdown(l, srv, 2, &w), 0);
	int64_t m = h_read_exact(&c, cli, got + off, (uint32_t)(Q + 1 - off), &eof);
	H_EQ(m, (int64_t)(Q - off));
	H_TRUE(eof, "no end of stream");
	H_EQ(check_pattern(got, Q, 0), -1);
close:
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	free(src);
	free(got);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.4a: a peer's reset is reported as a write's completion reports
 * it: a negative error, not -EAGAIN, and never a silent success forever. */
static void test_try_write_reset(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	if (!have_try_write(l, srv))
		goto close;
	H_EQ(tl_close_abort(l, cli, 7), 0);
	H_TRUE(h_wait_closed(&c, cli) >= 0, "no Closed");
	uint8_t msg[100];
	fill_pattern(msg, sizeof msg, 0);
	int64_t r = 0;
	for (uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS; h_wall_ns() < dl;) {
		if ((r = tl_try_write(l, srv, msg, sizeof msg)) < 0 && r != -EAGAIN)
			break;
		h_turn(&c, 5 * (int64_t)H_MS);
	}
	H_TRUE(r == -ECONNRESET || r == -EPIPE, "tl_try_write after a reset: %lld", (long long)r);
	h_close(&c, srv, 5);
	goto out;
close:
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.4a with 4.9: bytes taken are progress. A stream whose only
 * activity is tl_try_write, a few bytes every IDLE/6, keeps a pending read
 * alive for six periods; once the writes stop, the read ends with
 * -ETIMEDOUT a period after the last. */
static void test_try_write_is_progress(void)
{
	const uint64_t idle = (uint64_t)H_SLOW_MS(60) * H_MS;
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	if (!have_try_write(l, srv))
		goto close;
	uint8_t buf[16], msg[8] = "progress";
	tl_op rd;
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rd), 0);
	H_EQ(tl_idle_deadline(l, srv, idle), 0);
	uint64_t start = tl_now(l), last = start, sent = 0;
	uint64_t wall = h_wall_ns() + 6 * idle + (uint64_t)H_WAIT_MS * H_MS;
	while (tl_now(l) < start + 6 * idle && h_wall_ns() < wall && h_find_term(&c.log, rd) < 0) {
		if (tl_now(l) >= last + idle / 6) {
			H_EQ(tl_try_write(l, srv, msg, sizeof msg), (int64_t)sizeof msg);
			last = tl_now(l);
			sent += sizeof msg;
		}
		h_turn(&c, (int64_t)H_MS);
	}
	H_TRUE(h_find_term(&c.log, rd) < 0, "the idle deadline fired while tl_try_write moved bytes");
	H_TRUE(sent >= 6 * 8 * 3, "only %llu bytes sent", (unsigned long long)sent);
	int i = h_wait_op(&c, rd);
	H_TRUE(i >= 0, "the idle deadline did not fire once the writes stopped");
	if (i >= 0) {
		H_EQ(c.log.v[i].result, -ETIMEDOUT);
		H_TRUE(tl_now(l) >= last + idle, "fired before a period after the last write");
	}
close:
	h_close(&c, srv, 5);
	h_close(&c, cli, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_try_write[] = {
	T("4.4a try write", test_try_write_takes_at_once),
	T("4.4a try write", test_try_write_keeps_order),
	T("4.4a try write", test_try_write_waits_for_queue_with_room),
	T("4.4a try write", test_try_write_reset),
	T("4.4a try write", test_try_write_is_progress),
	{NULL, NULL, NULL},
};
