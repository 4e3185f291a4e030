/* tests/contract_streams.c: contract rules of streams that need the peer's end in a set state (4.7 stream end and resets). */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
	if (!h_need_cap(l, TL_CAP_TCP))
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

const struct test_def tl_contract_streams[] = {
	T("4.2 connect", test_local_addr_while_connecting),
	T("4.7 stream end", test_end_with_data_read),
	T("4.7 stream end", test_end_with_data_read_pooled),
	T("4.7 stream end", test_end_with_data_read_start),
	T("4.7 stream end", test_reset_with_data_read),
	T("4.7 stream end", test_reset_with_data_read_pooled),
	T("4.7 stream end", test_reset_with_data_read_start),
	{ NULL, NULL, NULL },
};
