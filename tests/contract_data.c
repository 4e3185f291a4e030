/* tests/contract_data.c: the host's pointer per handle (tl_handle_set_data): carried by every completion naming the handle, its Closed included, read when tl_turn hands a record out; on every driver. */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifndef _WIN32
#include <poll.h>
#include <sys/socket.h>
#endif
#include <turnloop/poll.h>
#include <CUnit/CUnit.h>

/* Distinct addresses to set; the loop never reads through them. */
static char obj[8];
#define P(i) ((void *)&obj[i])

/* Every record of c's log from index `from` on that names h carries p;
 * returns how many name h. */
static uint32_t carried(h_ctx *c, tl_handle h, void *p, uint32_t from)
{
	uint32_t n = 0;
	for (uint32_t i = from; i < c->log.n; i++) {
		const tl_completion *x = &c->log.v[i];
		if (x->handle.v != h.v)
			continue;
		n++;
		H_TRUE(x->data == p, "record %u (kind %u) of handle %#llx carries %p, not %p", i,
		       x->kind, (unsigned long long)h.v, x->data, p);
	}
	return n;
}

/* Every record of c's log that names no handle carries NULL. */
static void none_carry(h_ctx *c)
{
	for (uint32_t i = 0; i < c->log.n; i++) {
		const tl_completion *x = &c->log.v[i];
		if (!x->handle.v)
			H_TRUE(x->data == NULL, "record %u (kind %u, no handle) carries %p", i,
			       x->kind, x->data);
	}
}

/* The data of the record at index i (NULL with a failure if i < 0). */
static void *data_at(h_ctx *c, int i)
{
	H_TRUE(i >= 0, "no such record");
	return i >= 0 ? c->log.v[i].data : NULL;
}

/* Turn until a record of op at or after index from has a result >= min:
 * its index, or -1 (a failure). */
struct rec_arg {
	h_ctx *c;
	tl_op op;
	uint32_t from;
	int64_t min;
	int at;
};

static int pred_rec(void *p)
{
	struct rec_arg *a = p;
	for (uint32_t i = a->from; i < a->c->log.n; i++)
		if (a->c->log.v[i].op.v == a->op.v && a->c->log.v[i].result >= a->min) {
			a->at = (int)i;
			return 1;
		}
	return 0;
}

static int wait_rec(h_ctx *c, tl_op op, uint32_t from, int64_t min)
{
	struct rec_arg a = { .c = c, .op = op, .from = from, .min = min, .at = -1 };
	if (!h_until(c, pred_rec, &a, H_WAIT_MS))
		CU_FAIL("the record waited for did not come");
	return a.at;
}

/* The pointer is NULL until set, set and read back, and carried by each
 * expiry of a timer, by its Stopped and its Closed; a set between two
 * expiries is seen by the next. After the Closed the handle is stale for
 * both calls; the slot's next handle starts with NULL. Posts carry NULL. */
static void test_data_timer(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle t;
	tl_op op;
	void *got = P(7);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 2), 2 * H_MS, 0x71, &t, &op), 0);
	H_EQ(tl_handle_data_get(l, t, &got), 0);
	H_TRUE(got == NULL, "a new handle's pointer is %p", got);
	H_EQ(tl_handle_data_get(l, t, NULL), -EINVAL);
	H_EQ(tl_handle_set_data(l, t, P(1)), 0);
	H_EQ(tl_handle_data_get(l, t, &got), 0);
	H_TRUE(got == P(1), "read back %p", got);
	/* A post, while the timer's slot has a pointer: it names no handle. */
	tl_poster *ps = tl_poster_get(l);
	H_EQ(tl_post(ps, 0x90, 1), 0);
	tl_poster_put(ps);
	int i = wait_rec(&c, op, 0, 0);
	H_TRUE(i < 0 || c.log.v[i].kind == TL_K_TIMER, "kind %u", i < 0 ? 0 : c.log.v[i].kind);
	H_TRUE(data_at(&c, i) == P(1), "first expiry carries %p", data_at(&c, i));
	uint32_t mark = c.log.n;
	H_EQ(tl_handle_set_data(l, t, P(2)), 0);
	wait_rec(&c, op, mark, 0);
	/* Every expiry after the set carries the new pointer. */
	H_TRUE(carried(&c, t, P(2), mark) >= 1, "no expiry after the set");
	H_EQ(tl_stop(l, op), 0);
	i = h_wait_op(&c, op);
	H_TRUE(i < 0 || (c.log.v[i].flags & TL_F_STOPPED), "not stopped");
	H_TRUE(data_at(&c, i) == P(2), "Stopped carries %p", data_at(&c, i));
	/* Closing: still set and read back until the Closed is handed out. */
	H_EQ(tl_close(l, t, 0xc1), 0);
	H_EQ(tl_handle_set_data(l, t, P(3)), 0);
	i = h_wait_closed(&c, t);
	H_TRUE(data_at(&c, i) == P(3), "Closed carries %p", data_at(&c, i));
	H_EQ(tl_handle_set_data(l, t, P(4)), -ENOENT);
	H_EQ(tl_handle_data_get(l, t, &got), -ENOENT);
	H_EQ(tl_handle_set_data(l, TL_HANDLE_NONE, P(4)), -ENOENT);
	H_EQ(tl_handle_data_get(l, TL_HANDLE_NONE, &got), -ENOENT);
	/* The slot's next handle (the free list gives the last freed first)
	 * does not inherit the pointer. */
	tl_handle t2;
	tl_op op2;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 0x72, &t2, &op2), 0);
	got = P(7);
	H_EQ(tl_handle_data_get(l, t2, &got), 0);
	H_TRUE(got == NULL, "the slot's next handle starts with %p", got);
	h_close(&c, t2, 0xc2);
	H_TRUE(h_count_kind(&c.log, TL_K_POST, 0) == 1, "the post did not come");
	none_carry(&c);
	H_EQ(carried(&c, t, P(3), (uint32_t)h_find_closed(&c.log, t)), 1);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* The pointer is read when tl_turn hands a record out: a record queued
 * before a set (a turn's cap left it in the queue) carries the new one. */
static void test_data_read_at_handout(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle t1, t2;
	tl_op o1, o2;
	uint64_t at = tl_now(l);
	H_EQ_FATAL(tl_timer_start(l, at, 0, 1, &t1, &o1), 0);
	H_EQ_FATAL(tl_timer_start(l, at, 0, 2, &t2, &o2), 0);
	H_EQ(tl_handle_set_data(l, t1, P(1)), 0);
	H_EQ(tl_handle_set_data(l, t2, P(2)), 0);
	tl_completion out[1];
	int n = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (n == 0 && h_wall_ns() < dl)
		n = tl_turn(l, 10 * (int64_t)H_MS, out, 1, NULL);
	H_EQ_FATAL(n, 1);
	H_EQ(out[0].handle.v, t1.v);
	H_TRUE(out[0].data == P(1), "t1's expiry carries %p", out[0].data);
	/* t2's expiry is queued already: the set comes after its event. */
	H_EQ_FATAL(stats(l).queued, 1);
	H_EQ(tl_handle_set_data(l, t2, P(3)), 0);
	H_EQ(tl_turn(l, 0, out, 1, NULL), 1);
	H_EQ(out[0].handle.v, t2.v);
	H_TRUE(out[0].data == P(3), "t2's queued expiry carries %p, not the pointer set since",
	       out[0].data);
	H_EQ(tl_close(l, t1, 0), 0);
	H_EQ(tl_close(l, t2, 0), 0);
	h_end(l, fds);
}

/* Streams: an accept carries the listener's pointer and the connection
 * starts with NULL; a connect carries the pointer set right after
 * tl_tcp_connect returned; reads, writes and shutdown carry their
 * stream's; a multishot read's records follow a set between them; every
 * Closed carries its handle's, and the Stopped accept the listener's. */
static void test_data_stream(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli, conn;
	tl_addr la;
	tl_op aop, cop, rop, wop, sop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_handle_set_data(l, lis, P(0)), 0);
	H_EQ_FATAL(tl_accept_start(l, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	H_EQ(tl_handle_set_data(l, cli, P(1)), 0);
	int i = h_wait_op(&c, cop);
	H_TRUE(i < 0 || c.log.v[i].result == 0, "connect failed");
	H_TRUE(data_at(&c, i) == P(1), "connect carries %p", data_at(&c, i));
	i = wait_rec(&c, aop, 0, 0);
	H_TRUE_FATAL(i >= 0, "no accept");
	H_EQ(c.log.v[i].kind, TL_K_ACCEPT);
	H_TRUE(c.log.v[i].data == P(0), "accept carries %p", c.log.v[i].data);
	conn = c.log.v[i].u.accept.conn;
	void *got = P(7);
	H_EQ(tl_handle_data_get(l, conn, &got), 0);
	H_TRUE(got == NULL, "the accepted connection starts with %p", got);
	H_EQ(tl_handle_set_data(l, conn, P(2)), 0);
	H_EQ_FATAL(tl_read_start(l, conn, 3, &rop), 0);
	H_EQ(tl_write(l, cli, "abc", 3, 4, &wop), 0);
	i = h_wait_op(&c, wop);
	H_TRUE(i < 0 || c.log.v[i].result == 3, "write");
	H_TRUE(data_at(&c, i) == P(1), "write carries %p", data_at(&c, i));
	i = wait_rec(&c, rop, 0, 1);
	H_TRUE(data_at(&c, i) == P(2), "read carries %p", data_at(&c, i));
	h_release_leases(&c, 0);
	uint32_t mark = c.log.n;
	H_EQ(tl_handle_set_data(l, conn, P(3)), 0);
	H_EQ(tl_write(l, cli, "de", 2, 5, &wop), 0);
	i = wait_rec(&c, rop, mark, 1);
	H_TRUE(data_at(&c, i) == P(3), "a read after the set carries %p", data_at(&c, i));
	h_release_leases(&c, 0);
	H_EQ(tl_shutdown(l, cli, 6, &sop), 0);
	i = h_wait_op(&c, sop);
	H_TRUE(data_at(&c, i) == P(1), "shutdown carries %p", data_at(&c, i));
	i = h_wait_op(&c, rop); /* the end of stream ends the read */
	H_TRUE(i < 0 || (c.log.v[i].flags & TL_F_EOF), "no end of stream");
	H_TRUE(data_at(&c, i) == P(3), "the read's end carries %p", data_at(&c, i));
	i = h_close(&c, conn, 7);
	H_TRUE(data_at(&c, i) == P(3), "conn's Closed carries %p", data_at(&c, i));
	i = h_close(&c, cli, 8);
	H_TRUE(data_at(&c, i) == P(1), "cli's Closed carries %p", data_at(&c, i));
	H_EQ(tl_stop(l, aop), 0);
	i = h_wait_op(&c, aop);
	H_TRUE(data_at(&c, i) == P(0), "the Stopped accept carries %p", data_at(&c, i));
	i = h_close(&c, lis, 9);
	H_TRUE(data_at(&c, i) == P(0), "the listener's Closed carries %p", data_at(&c, i));
	/* And nothing of theirs carried anything else. */
	H_TRUE(carried(&c, lis, P(0), 0) >= 3, "listener records");
	H_TRUE(carried(&c, cli, P(1), 0) >= 4, "client records");
	H_TRUE(carried(&c, conn, P(3), mark) >= 3, "connection records");
	none_carry(&c);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Datagrams: a send carries its socket's pointer, a receive (one-shot,
 * into the caller's buffer or pooled) its socket's. */
static void test_data_dgram(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr any, aa;
	h_loopback(&any, AF_INET, 0);
	H_EQ_FATAL(tl_udp_bind(l, &any, &a), 0);
	H_EQ_FATAL(tl_udp_bind(l, &any, &b), 0);
	H_EQ(tl_local_addr(l, a, &aa), 0);
	H_EQ(tl_handle_set_data(l, a, P(1)), 0);
	H_EQ(tl_handle_set_data(l, b, P(2)), 0);
	uint8_t buf[64];
	tl_op r1, r2, s1, s2;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &r1), 0);
	H_EQ(tl_udp_send(l, b, "one", 3, &aa, 2, &s1), 0);
	int i = h_wait_op(&c, s1);
	H_TRUE(i < 0 || c.log.v[i].kind == TL_K_SEND, "send");
	H_TRUE(data_at(&c, i) == P(2), "send carries %p", data_at(&c, i));
	i = h_wait_op(&c, r1);
	H_TRUE(i < 0 || c.log.v[i].result == 3, "receive");
	H_TRUE(data_at(&c, i) == P(1), "receive carries %p", data_at(&c, i));
	H_EQ(tl_udp_recv_pooled(l, a, 3, &r2), 0);
	H_EQ(tl_udp_send(l, b, "two", 3, &aa, 4, &s2), 0);
	i = h_wait_op(&c, r2);
	H_TRUE(i < 0 || c.log.v[i].kind == TL_K_RECV, "pooled receive");
	H_TRUE(data_at(&c, i) == P(1), "pooled receive carries %p", data_at(&c, i));
	h_wait_op(&c, s2);
	h_release_leases(&c, 0);
	i = h_close(&c, a, 5);
	H_TRUE(data_at(&c, i) == P(1), "a's Closed carries %p", data_at(&c, i));
	i = h_close(&c, b, 6);
	H_TRUE(data_at(&c, i) == P(2), "b's Closed carries %p", data_at(&c, i));
	H_EQ(carried(&c, a, P(1), 0), 3);
	H_EQ(carried(&c, b, P(2), 0), 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* State that lives as long as its handle, freed at its Closed. */
struct state {
	tl_handle h;
	int closed;
};

/* tl_close_all: the terminals of pending ops and every Closed carry their
 * handle's pointer, so a host frees each handle's state at its Closed and
 * nothing is left. */
static void test_data_close_all(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	enum { N = 6 };
	struct state *st[N];
	int live = 0, n = 0;
	for (int k = 0; k < N; k++) {
		st[k] = calloc(1, sizeof *st[k]);
		H_TRUE_FATAL(st[k] != NULL, "calloc");
	}
	for (int k = 0; k < 3; k++) {
		tl_op op;
		H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 0x10 + k, &st[n]->h, &op), 0);
		n++;
	}
	tl_addr a;
	tl_op aop;
	if (tl_loop_caps(l) & TL_CAP_TCP) {
		H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &st[n]->h, &a), 0);
		H_EQ(tl_accept_start(l, st[n]->h, 0x20, &aop), 0);
		n++;
	}
	if (tl_loop_caps(l) & TL_CAP_UDP) {
		tl_op rop;
		h_loopback(&a, AF_INET, 0);
		H_EQ_FATAL(tl_udp_bind(l, &a, &st[n]->h), 0);
		H_EQ(tl_udp_recv_pooled(l, st[n]->h, 0x30, &rop), 0);
		n++;
	}
	for (int k = 0; k < n; k++) {
		H_EQ(tl_handle_set_data(l, st[k]->h, st[k]), 0);
		live++;
	}
	uint32_t mark = c.log.n;
	H_EQ((int)tl_close_all(l, 0xa11), n);
	int closed = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	uint32_t seen = mark;
	while (closed < n && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		for (; seen < c.log.n; seen++) {
			tl_completion *x = &c.log.v[seen];
			struct state *s = x->data;
			H_TRUE_FATAL(s != NULL, "record %u (kind %u) carries no pointer", seen,
				     x->kind);
			H_EQ(s->h.v, x->handle.v);
			H_EQ(s->closed, 0);
			if (x->kind == TL_K_CLOSED) {
				H_EQ(x->token, 0xa11);
				s->closed = 1;
				closed++;
				live--;
			}
		}
	}
	H_EQ(closed, n);
	H_EQ(live, 0);
	for (int k = 0; k < N; k++) {
		H_TRUE(k >= n || st[k]->closed, "handle %d's state was never freed", k);
		free(st[k]);
	}
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* The pointer stays with the handle on its loop: tl_detach gives the
 * handle up (stale for both calls), and the handle tl_adopt makes of the
 * descriptor starts with NULL, then carries its own. */
static void test_data_detach_adopt(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || !h_need_cap(l, TL_CAP_DETACH))
		goto out;
	tl_handle srv, cli, h2;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	H_EQ(tl_handle_set_data(l, srv, P(1)), 0);
	int fd = -1, rc;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while ((rc = tl_detach(l, srv, &fd)) == -EAGAIN && h_wall_ns() < dl)
		h_turn(&c, 0);
	H_EQ_FATAL(rc, 0);
	void *got = P(7);
	H_EQ(tl_handle_data_get(l, srv, &got), -ENOENT);
	H_EQ(tl_handle_set_data(l, srv, P(2)), -ENOENT);
	H_EQ_FATAL(tl_adopt(l, fd, &h2), 0);
	H_EQ(tl_handle_data_get(l, h2, &got), 0);
	H_TRUE(got == NULL, "an adopted handle starts with %p", got);
	H_EQ(tl_handle_set_data(l, h2, P(3)), 0);
	uint8_t buf[8];
	tl_op rop;
	H_EQ(tl_read(l, h2, buf, sizeof buf, 1, &rop), 0);
	H_EQ(h_write_all(&c, cli, "x", 1), 1);
	int i = h_wait_op(&c, rop);
	H_TRUE(i < 0 || c.log.v[i].result == 1, "read on the adopted handle");
	H_TRUE(data_at(&c, i) == P(3), "adopted handle's read carries %p", data_at(&c, i));
	i = h_close(&c, h2, 2);
	H_TRUE(data_at(&c, i) == P(3), "adopted handle's Closed carries %p", data_at(&c, i));
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A foreign descriptor's poll: its readiness, its Stopped and the Closed
 * the loop queues by itself after the handle's one op carry the pointer. */
static void test_data_poll(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_POLL))
		goto out;
#ifdef _WIN32
	/* No pipes to poll (WSAPoll watches sockets): a UDP socket on
	 * loopback made readable by a datagram it sends itself. */
	SOCKET s = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
	H_TRUE_FATAL(s != INVALID_SOCKET, "socket: %d", WSAGetLastError());
	tl_addr sa;
	int slen = sizeof sa;
	h_loopback(&sa, AF_INET, 0);
	H_EQ_FATAL(bind(s, &sa.sa, (int)sizeof sa.in), 0);
	H_EQ_FATAL(getsockname(s, &sa.sa, &slen), 0);
	tl_handle ph;
	tl_op pop;
	H_EQ_FATAL(tl_poll_start(l, (int)(intptr_t)s, POLLIN, 1, &ph, &pop), 0);
	H_EQ(tl_handle_set_data(l, ph, P(1)), 0);
	H_EQ(sendto(s, "r", 1, 0, &sa.sa, slen), 1);
#else
	int p[2];
	H_EQ_FATAL(pipe(p), 0);
	tl_handle ph;
	tl_op pop;
	H_EQ_FATAL(tl_poll_start(l, p[0], POLLIN, 1, &ph, &pop), 0);
	H_EQ(tl_handle_set_data(l, ph, P(1)), 0);
	H_EQ(write(p[1], "r", 1), 1);
#endif
	int i = wait_rec(&c, pop, 0, 1);
	H_TRUE(i < 0 || c.log.v[i].kind == TL_K_POLL, "poll");
	H_TRUE(data_at(&c, i) == P(1), "readiness carries %p", data_at(&c, i));
	H_EQ(tl_stop(l, pop), 0);
	i = h_wait_op(&c, pop);
	H_TRUE(data_at(&c, i) == P(1), "Stopped carries %p", data_at(&c, i));
	i = h_wait_closed(&c, ph);
	H_TRUE(data_at(&c, i) == P(1), "Closed carries %p", data_at(&c, i));
#ifdef _WIN32
	closesocket(s);
#else
	close(p[0]);
	close(p[1]);
#endif
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A splice is an op of its destination: it carries dst's pointer. */
static void test_data_splice(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || !h_need_cap(l, TL_CAP_SPLICE))
		goto out;
	tl_handle a, prod, b, cons;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &a, &prod), 0);
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &cons, &b), 0);
	H_EQ(tl_handle_set_data(l, a, P(1)), 0);
	H_EQ(tl_handle_set_data(l, b, P(2)), 0);
	tl_op sp;
	H_EQ(h_write_all(&c, prod, "spl", 3), 3);
	H_EQ_FATAL(tl_splice(l, a, b, 64, 1, &sp), 0);
	int i = h_wait_op(&c, sp);
	H_TRUE(i < 0 || (c.log.v[i].kind == TL_K_SPLICE && c.log.v[i].result == 3), "splice");
	H_TRUE(data_at(&c, i) == P(2), "splice carries %p, not dst's", data_at(&c, i));
	char got[4] = { 0 };
	H_EQ(h_read_exact(&c, cons, got, 3, NULL), 3);
	H_EQ(memcmp(got, "spl", 3), 0);
	h_close(&c, a, 2);
	h_close(&c, b, 3);
	h_close(&c, prod, 4);
	h_close(&c, cons, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_data[] = {
	T("1.5 handle data", test_data_timer),
	T("1.5 handle data", test_data_read_at_handout),
	T("1.5 handle data", test_data_stream),
	T("1.5 handle data", test_data_dgram),
	T("1.5 handle data", test_data_close_all),
	T("1.5 handle data", test_data_detach_adopt),
	T("1.5 handle data", test_data_poll),
	T("1.5 handle data", test_data_splice),
	{ NULL, NULL, NULL },
};
