/* tests/test_sim.c: the simulation driver: determinism, virtual time, the in-memory network, each fault class. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <CUnit/Basic.h>
#include <turnloop/loop.h>
#include "sim.h"
#include "check.h"

/*
 * Each test builds its loops with cfg.driver = TL_DRIVER_SIM and ends by
 * closing every handle, turning until !tl_alive(), checking that no lease is
 * out and that tl_loop_close() returns 0. Waits are counted in turns, never in
 * wall time: the simulation cannot be slow, only stuck.
 */

#define MS 1000000ull
#define MAX_TURNS 200000

/* ---- a loop under test and the completions it returned ---- */

struct ctx {
	tl_loop *loop;
	tl_completion *log;
	uint32_t n, cap;
	struct ctx *peer; /* turned (timeout 0) after each turn of this one */
	uint64_t hash;    /* of every completion, in order */
};

static void ctx_init(struct ctx *c, tl_loop *loop)
{
	memset(c, 0, sizeof *c);
	c->loop = loop;
	c->hash = 0xcbf29ce484222325ull;
}

static void ctx_fini(struct ctx *c)
{
	free(c->log);
	c->log = NULL;
	c->n = c->cap = 0;
}

static void hash_in(struct ctx *c, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		c->hash ^= (v >> (8 * i)) & 0xff;
		c->hash *= 0x100000001b3ull;
	}
}

static int turn1(struct ctx *c, int64_t timeout)
{
	tl_completion out[64];
	int n = tl_turn(c->loop, timeout, out, 64, NULL);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (c->n == c->cap) {
			c->cap = c->cap ? 2 * c->cap : 1024;
			c->log = realloc(c->log, c->cap * sizeof *c->log);
			CU_ASSERT_FATAL(c->log != NULL);
		}
		c->log[c->n++] = out[i];
		hash_in(c, out[i].kind | (uint64_t)out[i].flags << 16);
		hash_in(c, (uint64_t)out[i].result);
		hash_in(c, out[i].token);
		hash_in(c, tl_now(c->loop));
	}
	return n;
}

static int turn(struct ctx *c, int64_t timeout)
{
	int n = turn1(c, timeout);
	if (c->peer)
		turn1(c->peer, 0);
	return n;
}

static tl_loop *sim_loop(uint64_t seed, const struct tl_sim_faults *f)
{
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_SIM;
	cfg.sim_seed = seed;
	tl_loop *l = NULL;
	CHECK_EQ_FATAL(tl_loop_new(&l, &cfg), 0);
	CHECK_EQ_FATAL(strcmp(tl_loop_driver(l), "sim"), 0);
	if (f)
		CHECK_EQ_FATAL(tl__sim_set_faults(l, f), 0);
	return l;
}

static struct tl_sim_faults quiet(void)
{
	struct tl_sim_faults f;
	tl__sim_faults_default(&f);
	return f;
}

static int find_term(const struct ctx *c, tl_op op)
{
	for (uint32_t i = 0; i < c->n; i++)
		if (c->log[i].op.v == op.v && (c->log[i].flags & TL_F_TERMINAL) &&
		    c->log[i].kind != TL_K_CLOSED)
			return (int)i;
	return -1;
}

static int find_closed(const struct ctx *c, tl_handle h)
{
	for (uint32_t i = 0; i < c->n; i++)
		if (c->log[i].kind == TL_K_CLOSED && c->log[i].handle.v == h.v)
			return (int)i;
	return -1;
}

/* Turn (1 ms timeouts, virtual) until op's terminal completion arrived. */
static tl_completion *wait_op(struct ctx *c, tl_op op)
{
	for (int t = 0; t < MAX_TURNS; t++) {
		int i = find_term(c, op);
		if (i >= 0)
			return &c->log[i];
		if (turn(c, (int64_t)MS) < 0)
			break;
	}
	fprintf(stderr, "  no terminal completion for op %#llx\n", (unsigned long long)op.v);
	CU_FAIL_FATAL("op did not finish");
	return NULL;
}

static void close_wait(struct ctx *c, tl_handle h)
{
	CHECK_EQ(tl_close(c->loop, h, 0xc105e), 0);
	for (int t = 0; t < MAX_TURNS && find_closed(c, h) < 0; t++)
		turn(c, (int64_t)MS);
	CU_ASSERT(find_closed(c, h) >= 0);
}

/* Release the leases c->log[from..] carries. */
static void release_leases(struct ctx *c, uint32_t from)
{
	for (uint32_t i = from; i < c->n; i++) {
		tl_completion *x = &c->log[i];
		if (!(x->flags & TL_F_LEASE))
			continue;
		uint32_t id = x->kind == TL_K_RECV ? x->u.recv.lease.id : x->u.read.lease.id;
		CHECK_EQ(tl_lease_release(c->loop, id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
}

/* The end of every test: drain, check leases and close the loop. */
static void finish(struct ctx *c)
{
	for (int t = 0; t < MAX_TURNS && tl_alive(c->loop); t++) {
		uint32_t from = c->n;
		turn1(c, (int64_t)MS);
		release_leases(c, from);
	}
	CU_ASSERT(!tl_alive(c->loop));
	tl_loop_stats st;
	tl_loop_stats_get(c->loop, &st);
	CHECK_EQ(st.leases_out, 0);
	CHECK_EQ(st.handles, 0);
	CHECK_EQ(st.ops, 0);
	CHECK_EQ(tl_loop_close(c->loop), 0);
	c->loop = NULL;
	ctx_fini(c);
}

static void addr4(tl_addr *a, uint16_t port)
{
	CHECK_EQ_FATAL(tl_addr_parse(a, "127.0.0.1", port), 0);
}

static tl_handle listen4(struct ctx *c, const tl_listen_opts *o, tl_addr *bound)
{
	tl_addr a;
	tl_handle h;
	addr4(&a, 0);
	CHECK_EQ_FATAL(tl_tcp_listen(c->loop, &a, o, &h), 0);
	CHECK_EQ_FATAL(tl_local_addr(c->loop, h, bound), 0);
	CU_ASSERT(ntohs(bound->in.sin_port) != 0);
	return h;
}

/* A connected pair: *srv accepted on sc, *cli connected from cc. */
static void pair(struct ctx *sc, struct ctx *cc, tl_handle *srv, tl_handle *cli)
{
	tl_addr a;
	tl_handle l = listen4(sc, NULL, &a);
	tl_op aop, cop;
	CHECK_EQ_FATAL(tl_accept(sc->loop, l, 1, &aop), 0);
	CHECK_EQ_FATAL(tl_tcp_connect(cc->loop, &a, 0, 2, cli, &cop), 0);
	tl_completion *x = wait_op(sc, aop);
	CHECK_EQ_FATAL(x->result, 0);
	*srv = x->u.accept.conn;
	CHECK_EQ_FATAL(wait_op(cc, cop)->result, 0);
	close_wait(sc, l);
}

static uint8_t pat(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13 ^ (i >> 16) ^ i);
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- determinism ---- */

#define ECHO_CONNS 4
#define ECHO_BYTES (150 * 1024)

struct echo_conn {
	tl_handle cli, srv;
	uint8_t *out, *in;
	uint32_t sent, got, echoed_eof;
	tl_op rop;      /* the client's read */
	int reading, done;
};

/* N clients each send ECHO_BYTES in uneven writev chunks; the server echoes
 * every pooled lease back and returns it when the write finished; the
 * clients check every byte and shut down; the server shuts down on EOF.
 * Returns the trace; *chash gets the hash of the completion stream. */
static uint64_t echo_run(uint64_t seed, uint64_t *chash, uint64_t *vtime)
{
	struct tl_sim_faults f = quiet();
	f.p[TL_SIM_SHORT_IO] = 0.5; /* plenty of partial reads and writes */
	f.rcvbuf = 8192;            /* and writers that block */
	struct ctx c;
	ctx_init(&c, sim_loop(seed, &f));
	uint64_t t0 = tl_now(c.loop);
	tl_addr a;
	tl_handle l = listen4(&c, NULL, &a);
	tl_op aop;
	CHECK_EQ_FATAL(tl_accept_start(c.loop, l, 0xacc, &aop), 0);
	struct echo_conn conn[ECHO_CONNS];
	memset(conn, 0, sizeof conn);
	for (int i = 0; i < ECHO_CONNS; i++) {
		tl_op op;
		conn[i].out = malloc(ECHO_BYTES);
		conn[i].in = malloc(ECHO_BYTES);
		for (uint32_t k = 0; k < ECHO_BYTES; k++)
			conn[i].out[k] = pat(k + 977u * (unsigned)i);
		CHECK_EQ_FATAL(tl_tcp_connect(c.loop, &a, 0, 0x100 + (unsigned)i, &conn[i].cli, &op), 0);
		/* Uneven chunks: 1, 7, 49, ... bytes per iovec. */
		uint32_t off = 0, k = 1;
		while (off < ECHO_BYTES) {
			struct iovec v[3];
			int nv = 0;
			for (; nv < 3 && off < ECHO_BYTES; nv++) {
				uint32_t len = (k * 7u) % 5000 + 1;
				k = k * 7u % 9973u;
				if (len > ECHO_BYTES - off)
					len = ECHO_BYTES - off;
				v[nv].iov_base = conn[i].out + off;
				v[nv].iov_len = len;
				off += len;
			}
			CHECK_EQ_FATAL(tl_writev(c.loop, conn[i].cli, v, nv, 0x200 + (unsigned)i, &op), 0);
		}
		CHECK_EQ_FATAL(tl_shutdown(c.loop, conn[i].cli, 0x300 + (unsigned)i, &op), 0);
	}
	/* Server side state, by accepted handle. */
	tl_handle srv[ECHO_CONNS];
	int nsrv = 0, finished = 0;
	for (int t = 0; t < MAX_TURNS && finished < ECHO_CONNS; t++) {
		uint32_t from = c.n;
		int n = turn(&c, (int64_t)MS);
		CU_ASSERT_FATAL(n >= 0);
		for (uint32_t i = from; i < c.n; i++) {
			tl_completion *x = &c.log[i];
			if (x->kind == TL_K_ACCEPT && x->op.v == aop.v) {
				CHECK_EQ_FATAL(x->result, 0);
				CU_ASSERT_FATAL(nsrv < ECHO_CONNS);
				srv[nsrv] = x->u.accept.conn;
				tl_op rop;
				CHECK_EQ_FATAL(tl_read_start(c.loop, srv[nsrv], 0x400 + (unsigned)nsrv, &rop), 0);
				nsrv++;
			} else if (x->kind == TL_K_READ && x->token >= 0x400 && x->token < 0x500) {
				tl_handle h = x->handle;
				tl_op op;
				if (x->result > 0) {
					/* Echo the lease; its id rides in the token. */
					CHECK_EQ_FATAL(tl_write(c.loop, h, x->u.read.lease.data,
							  (uint32_t)x->result,
							  0x10000 + x->u.read.lease.id, &op), 0);
				} else {
					CHECK_EQ(x->result, 0);
					CU_ASSERT(x->flags & TL_F_EOF);
					CHECK_EQ_FATAL(tl_shutdown(c.loop, h, 0x600, &op), 0);
				}
			} else if (x->kind == TL_K_WRITE && x->token >= 0x10000) {
				CU_ASSERT(x->result > 0);
				CHECK_EQ(tl_lease_release(c.loop, (uint32_t)(x->token - 0x10000)), 0);
			} else if (x->kind == TL_K_READ && x->token >= 0x700 && x->token < 0x800) {
				struct echo_conn *e = &conn[x->token - 0x700];
				e->reading = 0;
				if (x->result > 0) {
					e->got += (uint32_t)x->result;
				} else {
					CHECK_EQ(x->result, 0);
					e->done = 1;
					finished++;
				}
			} else if (x->kind == TL_K_WRITE || x->kind == TL_K_SHUTDOWN ||
				   x->kind == TL_K_CONNECT) {
				CHECK_EQ(x->result < 0 ? x->result : 0, 0);
			}
		}
		for (int i = 0; i < ECHO_CONNS; i++) {
			struct echo_conn *e = &conn[i];
			if (e->reading || e->done)
				continue;
			uint32_t want = ECHO_BYTES - e->got;
			CHECK_EQ_FATAL(tl_read(c.loop, e->cli, e->in + e->got, want ? want : 1,
					 0x700 + (unsigned)i, &e->rop), 0);
			e->reading = 1;
		}
	}
	CHECK_EQ(finished, ECHO_CONNS);
	for (int i = 0; i < ECHO_CONNS; i++) {
		CHECK_EQ(conn[i].got, ECHO_BYTES);
		CU_ASSERT(memcmp(conn[i].in, conn[i].out, ECHO_BYTES) == 0);
		free(conn[i].in);
		free(conn[i].out);
		CHECK_EQ(tl_close(c.loop, conn[i].cli, 0), 0);
	}
	for (int i = 0; i < nsrv; i++)
		CHECK_EQ(tl_close(c.loop, srv[i], 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	for (int t = 0; t < MAX_TURNS && tl_alive(c.loop); t++)
		turn(&c, (int64_t)MS);
	struct tl_sim_stats st;
	CHECK_EQ(tl__sim_stats(c.loop, &st), 0);
	CU_ASSERT(st.injected[TL_SIM_SHORT_IO] > 0); /* partial I/O did happen */
	uint64_t trace = tl__sim_trace(c.loop);
	*chash = c.hash;
	*vtime = tl_now(c.loop) - t0;
	finish(&c);
	return trace;
}

static void test_determinism(void)
{
	unsetenv("TL_SIM_SEED");
	uint64_t h1, h2, h3, v1, v2, v3;
	uint64_t t1 = echo_run(42, &h1, &v1);
	uint64_t t2 = echo_run(42, &h2, &v2);
	uint64_t t3 = echo_run(43, &h3, &v3);
	CHECK_EQ(t1 == t2, 1);
	CHECK_EQ(h1 == h2, 1);
	CHECK_EQ(v1, v2);
	CU_ASSERT(t1 != t3);
	CU_ASSERT(h1 != h3);
	/* $TL_SIM_SEED overrides the config's seed. */
	setenv("TL_SIM_SEED", "43", 1);
	uint64_t h4, v4;
	uint64_t t4 = echo_run(42, &h4, &v4);
	unsetenv("TL_SIM_SEED");
	CHECK_EQ(t4 == t3, 1);
}

/* ---- virtual time ---- */

static void test_virtual_time(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(7, NULL));
	uint64_t w0 = wall_ns(), t0 = tl_now(c.loop);
	tl_handle th;
	tl_op top;
	CHECK_EQ(tl_timer_start(c.loop, t0 + 10000 * MS, 0, 0x71, &th, &top), 0);
	tl_completion out[4];
	tl_turn_info info;
	int n = tl_turn(c.loop, -1, out, 4, &info);
	CHECK_EQ(n, 1);
	CHECK_EQ(out[0].kind, TL_K_TIMER);
	CHECK_EQ(out[0].op.v == top.v, 1);
	CU_ASSERT(tl_now(c.loop) >= t0 + 10000 * MS);
	CHECK_EQ(info.waited_ns, 10000 * MS);
	CU_ASSERT(wall_ns() - w0 < 100 * MS);
	/* A bounded turn with nothing to do moves the clock by its timeout. */
	uint64_t t1 = tl_now(c.loop);
	CHECK_EQ(tl_turn(c.loop, 5 * (int64_t)MS, out, 4, &info), 0);
	CHECK_EQ(tl_now(c.loop) - t1, 5 * MS);
	CHECK_EQ(info.os_waits, 1);
	/* A zero-timeout turn does not wait; it costs poll_ns, as a real poll
	 * takes a little time (so that spinning on turn(0) makes progress). */
	t1 = tl_now(c.loop);
	CHECK_EQ(tl_turn(c.loop, 0, out, 4, &info), 0);
	CHECK_EQ(tl_now(c.loop) - t1, quiet().poll_ns);
	CHECK_EQ(info.os_waits, 0);
	CHECK_EQ(tl_close(c.loop, th, 0), 0);
	finish(&c);
}

/* A fresh world starts at the same virtual time. */
static void test_time_restarts(void)
{
	tl_loop *a = sim_loop(1, NULL);
	uint64_t t = tl_now(a);
	tl_completion out[1];
	tl_turn(a, 1000 * (int64_t)MS, out, 1, NULL);
	CHECK_EQ(tl_now(a), t + 1000 * MS);
	CHECK_EQ(tl_loop_close(a), 0);
	a = sim_loop(1, NULL);
	CHECK_EQ(tl_now(a), t);
	CHECK_EQ(tl_loop_close(a), 0);
}

/* turn(-1) with nothing scheduled really blocks, and a post from another
 * thread wakes it. */
static void *post_later(void *arg)
{
	usleep(20000);
	tl_post(arg, 0x9057, 77);
	return NULL;
}

static void test_real_block(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(3, NULL));
	tl_poster *p = tl_poster_get(c.loop);
	pthread_t t;
	uint64_t w0 = wall_ns();
	pthread_create(&t, NULL, post_later, p);
	tl_completion out[2];
	int n = tl_turn(c.loop, -1, out, 2, NULL);
	CHECK_EQ(n, 1);
	CHECK_EQ(out[0].kind, TL_K_POST);
	CHECK_EQ(out[0].u.post.payload, 77);
	CU_ASSERT(wall_ns() - w0 >= 10 * MS);
	pthread_join(t, NULL);
	tl_poster_put(p);
	struct tl_sim_stats st;
	CHECK_EQ(tl__sim_stats(c.loop, &st), 0);
	CHECK_EQ(st.real_waits, 1);
	finish(&c);
}

/* ---- the network ---- */

static void test_echo_two_loops(void)
{
	struct ctx s, c;
	ctx_init(&s, sim_loop(11, NULL));
	ctx_init(&c, sim_loop(11, NULL));
	s.peer = &c;
	c.peer = &s;
	tl_handle srv, cli;
	pair(&s, &c, &srv, &cli);
	static uint8_t msg[100000], back[100000];
	for (uint32_t i = 0; i < sizeof msg; i++)
		msg[i] = pat(i);
	tl_op w, r;
	CHECK_EQ(tl_write(c.loop, cli, msg, sizeof msg, 1, &w), 0);
	uint32_t got = 0;
	while (got < sizeof back) {
		CHECK_EQ_FATAL(tl_read(s.loop, srv, back + got, (uint32_t)sizeof back - got, 2, &r), 0);
		tl_completion *x = wait_op(&s, r);
		CU_ASSERT_FATAL(x->result > 0);
		got += (uint32_t)x->result;
	}
	CHECK_EQ(wait_op(&c, w)->result, sizeof msg);
	CU_ASSERT(memcmp(msg, back, sizeof msg) == 0);
	/* Peer address of the accepted side = the client's local address. */
	tl_addr la;
	CHECK_EQ(tl_local_addr(c.loop, cli, &la), 0);
	CHECK_EQ(la.sa.sa_family, AF_INET);
	s.peer = c.peer = NULL;
	CHECK_EQ(tl_close(s.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&s);
	finish(&c);
}

static void test_refused(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(5, NULL));
	tl_addr a;
	addr4(&a, 9);
	tl_handle h;
	tl_op op;
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 1, &h, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -ECONNREFUSED);
	/* Reads behind a refused connect fail too, and nothing leaks. */
	uint8_t b[4];
	tl_op r;
	CHECK_EQ(tl_read(c.loop, h, b, 4, 2, &r), 0);
	CHECK_EQ(wait_op(&c, r)->result, -ENOTCONN);
	CHECK_EQ(tl_close(c.loop, h, 0), 0);
	/* A Unix path nobody listens on does not exist: refused at once. */
	CHECK_EQ(tl_unix_connect(c.loop, "/sim/nobody", 0, 3, &h, &op), -ENOENT);
	finish(&c);
}

static void test_eof_and_reset(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(6, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	tl_op op;
	uint8_t b[64];
	/* Shutdown: the peer reads the bytes, then EOF. */
	CHECK_EQ(tl_write(c.loop, cli, "hello", 5, 1, &op), 0);
	CHECK_EQ(tl_shutdown(c.loop, cli, 2, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 0);
	uint32_t got = 0;
	for (;;) {
		CHECK_EQ_FATAL(tl_read(c.loop, srv, b + got, sizeof b - got, 3, &op), 0);
		tl_completion *x = wait_op(&c, op);
		if (x->result == 0) {
			CU_ASSERT(x->flags & TL_F_EOF);
			break;
		}
		CU_ASSERT_FATAL(x->result > 0);
		got += (uint32_t)x->result;
	}
	CHECK_EQ(got, 5);
	CU_ASSERT(memcmp(b, "hello", 5) == 0);
	/* Writes after shutdown fail with EPIPE; the other direction works. */
	CHECK_EQ(tl_write(c.loop, cli, "x", 1, 4, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -EPIPE);
	CHECK_EQ(tl_write(c.loop, srv, "y", 1, 5, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 1);
	/* Closing the client with that byte unread resets the server. */
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	for (int t = 0; t < 100 && find_closed(&c, cli) < 0; t++)
		turn(&c, (int64_t)MS);
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 6, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -ECONNRESET);
	/* After the reset: EOF for reads, EPIPE for writes. */
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 7, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 0);
	CHECK_EQ(tl_write(c.loop, srv, "z", 1, 8, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -EPIPE);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);

	/* A clean close gives the peer EOF after the data. */
	pair(&c, &c, &srv, &cli);
	CHECK_EQ(tl_write(c.loop, srv, "bye", 3, 9, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 3);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_read(c.loop, cli, b, sizeof b, 10, &op), 0);
	tl_completion *x = wait_op(&c, op);
	CU_ASSERT(x->result >= 1 && x->result <= 3);
	got = (uint32_t)x->result;
	while (got < 3) {
		CHECK_EQ_FATAL(tl_read(c.loop, cli, b + got, sizeof b - got, 11, &op), 0);
		x = wait_op(&c, op);
		CU_ASSERT_FATAL(x->result > 0);
		got += (uint32_t)x->result;
	}
	CHECK_EQ(tl_read(c.loop, cli, b, sizeof b, 12, &op), 0);
	x = wait_op(&c, op);
	CHECK_EQ(x->result, 0);
	CU_ASSERT(x->flags & TL_F_EOF);
	/* The first write to a closed TCP peer goes out; the reset follows. */
	CHECK_EQ(tl_write(c.loop, cli, "a", 1, 13, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 1);
	CHECK_EQ(tl_write(c.loop, cli, "b", 1, 14, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -ECONNRESET);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

static void test_backlog_deadline(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(8, NULL));
	tl_listen_opts o = {.backlog = 1};
	tl_addr a;
	tl_handle l = listen4(&c, &o, &a);
	/* Fill the accept queue (backlog + 1, as Linux) without accepting. */
	tl_handle cli[4];
	tl_op cop[4];
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 0x10 + (unsigned)i, &cli[i], &cop[i]), 0);
		CHECK_EQ(wait_op(&c, cop[i])->result, 0);
	}
	uint64_t t0 = tl_now(c.loop), dl = t0 + 50 * MS;
	CHECK_EQ(tl_tcp_connect(c.loop, &a, dl, 0x12, &cli[2], &cop[2]), 0);
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 0x13, &cli[3], &cop[3]), 0);
	tl_completion *x = wait_op(&c, cop[2]);
	CHECK_EQ(x->result, -ETIMEDOUT);
	CU_ASSERT(tl_now(c.loop) >= dl);
	/* The one without a deadline still waits; an accept lets it in. */
	CU_ASSERT(find_term(&c, cop[3]) < 0);
	tl_op aop;
	CHECK_EQ(tl_accept(c.loop, l, 0x20, &aop), 0);
	x = wait_op(&c, aop);
	CHECK_EQ(x->result, 0);
	tl_handle s1 = x->u.accept.conn;
	CHECK_EQ(wait_op(&c, cop[3])->result, 0);
	CHECK_EQ(tl_close(c.loop, s1, 0), 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(tl_close(c.loop, cli[i], 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	finish(&c);
}

static void test_reuseport_and_ports(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(9, NULL));
	tl_addr a, b;
	tl_listen_opts ro = {.reuseport = 1};
	tl_handle l1 = listen4(&c, &ro, &a), l2, l3;
	CHECK_EQ(tl_tcp_listen(c.loop, &a, &ro, &l2), 0);
	CHECK_EQ(tl_tcp_listen(c.loop, &a, NULL, &l3), -EADDRINUSE);
	tl_addr any;
	CHECK_EQ(tl_addr_parse(&any, "0.0.0.0", ntohs(a.in.sin_port)), 0);
	CHECK_EQ(tl_tcp_listen(c.loop, &any, NULL, &l3), -EADDRINUSE);
	/* Connections spread over both listeners. */
	tl_op a1, a2;
	CHECK_EQ(tl_accept_start(c.loop, l1, 1, &a1), 0);
	CHECK_EQ(tl_accept_start(c.loop, l2, 2, &a2), 0);
	tl_handle cli[16];
	for (int i = 0; i < 16; i++) {
		tl_op op;
		CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 3, &cli[i], &op), 0);
		wait_op(&c, op);
	}
	for (int t = 0; t < 100; t++)
		turn(&c, (int64_t)MS);
	uint32_t n1 = 0, n2 = 0;
	for (uint32_t i = 0; i < c.n; i++) {
		if (c.log[i].kind != TL_K_ACCEPT)
			continue;
		CHECK_EQ(c.log[i].result, 0);
		n1 += c.log[i].op.v == a1.v;
		n2 += c.log[i].op.v == a2.v;
		CHECK_EQ(tl_close(c.loop, c.log[i].u.accept.conn, 0), 0);
	}
	CHECK_EQ(n1 + n2, 16);
	CU_ASSERT(n1 > 0 && n2 > 0);
	for (int i = 0; i < 16; i++)
		CHECK_EQ(tl_close(c.loop, cli[i], 0), 0);
	/* IPv6, port 0 and tl_local_addr. */
	tl_addr v6;
	tl_handle l6;
	CHECK_EQ(tl_addr_parse(&v6, "::1", 0), 0);
	CHECK_EQ(tl_tcp_listen(c.loop, &v6, NULL, &l6), 0);
	CHECK_EQ(tl_local_addr(c.loop, l6, &b), 0);
	CHECK_EQ(b.sa.sa_family, AF_INET6);
	CU_ASSERT(ntohs(b.in6.sin6_port) != 0);
	tl_handle c6;
	tl_op op6, acc6;
	CHECK_EQ(tl_accept(c.loop, l6, 4, &acc6), 0);
	CHECK_EQ(tl_tcp_connect(c.loop, &b, 0, 5, &c6, &op6), 0);
	CHECK_EQ(wait_op(&c, op6)->result, 0);
	tl_completion *x = wait_op(&c, acc6);
	CHECK_EQ(x->result, 0);
	CHECK_EQ(x->u.accept.peer.sa.sa_family, AF_INET6);
	tl_addr cl;
	CHECK_EQ(tl_local_addr(c.loop, c6, &cl), 0);
	CHECK_EQ(ntohs(cl.in6.sin6_port), ntohs(x->u.accept.peer.in6.sin6_port));
	CHECK_EQ(tl_close(c.loop, x->u.accept.conn, 0), 0);
	CHECK_EQ(tl_close(c.loop, c6, 0), 0);
	CHECK_EQ(tl_close(c.loop, l6, 0), 0);
	CHECK_EQ(tl_close(c.loop, l1, 0), 0);
	CHECK_EQ(tl_close(c.loop, l2, 0), 0);
	finish(&c);
}

static void test_unix(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(10, NULL));
	tl_handle l, l2, cli;
	CHECK_EQ(tl_unix_listen(c.loop, "/sim/u", NULL, &l), 0);
	CHECK_EQ(tl_unix_listen(c.loop, "/sim/u", NULL, &l2), -EADDRINUSE);
	tl_op aop, cop, op;
	CHECK_EQ(tl_accept(c.loop, l, 1, &aop), 0);
	CHECK_EQ(tl_unix_connect(c.loop, "/sim/u", 0, 2, &cli, &cop), 0);
	tl_completion *x = wait_op(&c, aop);
	CHECK_EQ(x->result, 0);
	CHECK_EQ(x->u.accept.peer.sa.sa_family, AF_UNIX);
	tl_handle srv = x->u.accept.conn;
	CHECK_EQ(wait_op(&c, cop)->result, 0);
	tl_addr la;
	CHECK_EQ(tl_local_addr(c.loop, cli, &la), -EINVAL);
	CHECK_EQ(tl_write(c.loop, srv, "unix", 4, 3, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 4);
	/* Read it all first: closing with unread bytes would reset the peer
	 * (as Linux does for Unix sockets too). */
	uint8_t b[4];
	uint32_t got = 0;
	while (got < 4) {
		CHECK_EQ_FATAL(tl_read(c.loop, cli, b + got, 4 - got, 5, &op), 0);
		tl_completion *y = wait_op(&c, op);
		CU_ASSERT_FATAL(y->result > 0);
		got += (uint32_t)y->result;
	}
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	for (int t = 0; t < 100 && find_closed(&c, cli) < 0; t++)
		turn(&c, (int64_t)MS);
	/* Unix: writing to a closed peer is EPIPE at once. */
	CHECK_EQ(tl_write(c.loop, srv, "x", 1, 4, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -EPIPE);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	finish(&c);
}

static void test_udp(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(12, NULL));
	tl_addr a, b, ba, bb;
	tl_handle ha, hb;
	addr4(&a, 0);
	CHECK_EQ(tl_udp_bind(c.loop, &a, &ha), 0);
	CHECK_EQ(tl_addr_parse(&b, "0.0.0.0", 0), 0);
	CHECK_EQ(tl_udp_bind(c.loop, &b, &hb), 0);
	CHECK_EQ(tl_local_addr(c.loop, ha, &ba), 0);
	CHECK_EQ(tl_local_addr(c.loop, hb, &bb), 0);
	tl_handle dup;
	CHECK_EQ(tl_udp_bind(c.loop, &ba, &dup), -EADDRINUSE);
	tl_addr to;
	addr4(&to, ntohs(bb.in.sin_port));
	tl_op s, r;
	uint8_t buf[8];
	CHECK_EQ(tl_udp_recv(c.loop, hb, buf, sizeof buf, 1, &r), 0);
	CHECK_EQ(tl_udp_send(c.loop, ha, "datagram!", 9, &to, 2, &s), 0);
	CHECK_EQ(wait_op(&c, s)->result, 9);
	tl_completion *x = wait_op(&c, r);
	CHECK_EQ(x->result, 8); /* truncated to the buffer, as UDP */
	CU_ASSERT(memcmp(buf, "datagram", 8) == 0);
	CHECK_EQ(ntohs(x->u.recv.from.in.sin_port), ntohs(ba.in.sin_port));
	/* Pooled receive. */
	CHECK_EQ(tl_udp_recv_pooled(c.loop, hb, 3, &r), 0);
	CHECK_EQ(tl_udp_send(c.loop, ha, "two", 3, &to, 4, &s), 0);
	x = wait_op(&c, r);
	CHECK_EQ(x->result, 3);
	CU_ASSERT(x->flags & TL_F_LEASE);
	CU_ASSERT(memcmp(x->u.recv.lease.data, "two", 3) == 0);
	CHECK_EQ(tl_lease_release(c.loop, x->u.recv.lease.id), 0);
	/* To a port nobody bound: sent, and lost. */
	tl_addr nowhere;
	addr4(&nowhere, 9);
	CHECK_EQ(tl_udp_send(c.loop, ha, "x", 1, &nowhere, 5, &s), 0);
	CHECK_EQ(wait_op(&c, s)->result, 1);
	/* IPv6 to IPv4 from an IPv4 socket. */
	tl_addr v6;
	CHECK_EQ(tl_addr_parse(&v6, "::1", 9), 0);
	CHECK_EQ(tl_udp_send(c.loop, ha, "x", 1, &v6, 6, &s), 0);
	CHECK_EQ(wait_op(&c, s)->result, -EAFNOSUPPORT);
	CHECK_EQ(tl_close(c.loop, ha, 0), 0);
	CHECK_EQ(tl_close(c.loop, hb, 0), 0);
	finish(&c);
}

/* Pooled reads wait for leases and resume when they come back. */
static void test_lease_wait(void)
{
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_SIM;
	cfg.pooled_buffers = 2;
	cfg.pooled_buffer_size = 64;
	tl_loop *l;
	CHECK_EQ_FATAL(tl_loop_new(&l, &cfg), 0);
	struct ctx c;
	ctx_init(&c, l);
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	static uint8_t msg[1000];
	for (uint32_t i = 0; i < sizeof msg; i++)
		msg[i] = pat(i);
	tl_op w, r;
	CHECK_EQ(tl_write(c.loop, cli, msg, sizeof msg, 1, &w), 0);
	CHECK_EQ(tl_shutdown(c.loop, cli, 2, &w), 0);
	CHECK_EQ(tl_read_start(c.loop, srv, 3, &r), 0);
	uint8_t back[sizeof msg];
	uint32_t got = 0;
	int eof = 0;
	for (int t = 0; t < 10000 && !eof; t++) {
		uint32_t from = c.n;
		turn(&c, (int64_t)MS);
		for (uint32_t i = from; i < c.n; i++) {
			tl_completion *x = &c.log[i];
			if (x->op.v != r.v)
				continue;
			if (x->flags & TL_F_TERMINAL) {
				CHECK_EQ(x->result, 0);
				eof = 1;
				continue;
			}
			CU_ASSERT_FATAL(x->result > 0 && got + (uint64_t)x->result <= sizeof back);
			memcpy(back + got, x->u.read.lease.data, (size_t)x->result);
			got += (uint32_t)x->result;
		}
		/* Hold both leases for a while: the read must wait, not fail. */
		tl_loop_stats st;
		tl_loop_stats_get(c.loop, &st);
		if (st.leases_out == 2 || t % 3 == 0)
			release_leases(&c, 0);
	}
	release_leases(&c, 0);
	CU_ASSERT(eof);
	CHECK_EQ(got, sizeof msg);
	CU_ASSERT(memcmp(back, msg, sizeof msg) == 0);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

/* Two loops on two threads: one blocks in turn(-1) until the other's bytes
 * arrive (the sim wakes it through its eventfd). */
struct xthread {
	tl_addr addr;
	int ok;
};

static void *client_thread(void *arg)
{
	struct xthread *x = arg;
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_SIM;
	tl_loop *l;
	if (tl_loop_new(&l, &cfg) < 0)
		return NULL;
	usleep(20000); /* the server is parked by now */
	tl_handle h;
	tl_op op;
	tl_completion out[8];
	int done = 0, closed = 0;
	if (tl_tcp_connect(l, &x->addr, 0, 1, &h, &op) == 0 &&
	    tl_write(l, h, "ping", 4, 2, &op) == 0) {
		for (int t = 0; t < 10000 && !closed; t++) {
			int n = tl_turn(l, (int64_t)MS, out, 8, NULL);
			for (int i = 0; i < n; i++) {
				if (out[i].kind == TL_K_WRITE && out[i].result == 4) {
					done = 1;
					tl_close(l, h, 0);
				}
				closed |= out[i].kind == TL_K_CLOSED;
			}
		}
	}
	x->ok = done && closed;
	tl_loop_close(l);
	return NULL;
}

static void test_cross_thread(void)
{
	struct ctx s;
	ctx_init(&s, sim_loop(13, NULL));
	struct xthread x = {.ok = 0};
	tl_handle l = listen4(&s, NULL, &x.addr);
	tl_op aop;
	CHECK_EQ(tl_accept(s.loop, l, 1, &aop), 0);
	pthread_t t;
	pthread_create(&t, NULL, client_thread, &x);
	tl_completion out[4];
	tl_handle srv = TL_HANDLE_NONE;
	for (int i = 0; i < 100 && !srv.v; i++) {
		int n = tl_turn(s.loop, -1, out, 4, NULL);
		for (int k = 0; k < n; k++)
			if (out[k].op.v == aop.v) {
				CHECK_EQ(out[k].result, 0);
				srv = out[k].u.accept.conn;
			}
	}
	CU_ASSERT_FATAL(srv.v != 0);
	uint8_t b[8];
	uint32_t got = 0;
	while (got < 4) {
		tl_op r;
		CHECK_EQ_FATAL(tl_read(s.loop, srv, b + got, 4 - got, 2, &r), 0);
		/* A turn without limit also ends at a wake with nothing to
		 * deliver (the client's earlier wake-ups can come late): only
		 * the read's completion may come. */
		int n, empty = 0;
		while ((n = tl_turn(s.loop, -1, out, 4, NULL)) == 0 && empty++ < 100) {
		}
		CHECK_EQ_FATAL(n, 1);
		CU_ASSERT_FATAL(out[0].result > 0);
		got += (uint32_t)out[0].result;
	}
	CU_ASSERT(memcmp(b, "ping", 4) == 0);
	pthread_join(t, NULL);
	CU_ASSERT(x.ok);
	CHECK_EQ(tl_close(s.loop, srv, 0), 0);
	CHECK_EQ(tl_close(s.loop, l, 0), 0);
	finish(&s);
}

/* ---- faults: one test per class, each ending leak-free ---- */

static struct tl_sim_faults with(enum tl_sim_knob k, double p)
{
	struct tl_sim_faults f = quiet();
	f.p[k] = p;
	return f;
}

static void test_fault_connect_refused(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(20, NULL));
	tl_addr a;
	tl_handle l = listen4(&c, NULL, &a), h;
	struct tl_sim_faults f = with(TL_SIM_CONNECT_REFUSED, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op op;
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 1, &h, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, -ECONNREFUSED);
	CHECK_EQ(tl_close(c.loop, h, 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	finish(&c);
}

static void test_fault_reset(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(21, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_RESET, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op w, r;
	uint8_t b[16];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_write(c.loop, cli, "data", 4, 2, &w), 0);
	CHECK_EQ(wait_op(&c, w)->result, -ECONNRESET);
	CHECK_EQ(wait_op(&c, r)->result, -ECONNRESET);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

static void test_fault_close_reset(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(22, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_CLOSE_RESET, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op r;
	uint8_t b[16];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	CHECK_EQ(wait_op(&c, r)->result, -ECONNRESET);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	finish(&c);
}

static void test_fault_short_io(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(23, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_SHORT_IO, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	static uint8_t msg[65536], back[65536];
	for (uint32_t i = 0; i < sizeof msg; i++)
		msg[i] = pat(i);
	tl_op w, r;
	CHECK_EQ(tl_write(c.loop, cli, msg, sizeof msg, 1, &w), 0);
	uint32_t got = 0, reads = 0;
	while (got < sizeof back) {
		CHECK_EQ_FATAL(tl_read(c.loop, srv, back + got, (uint32_t)sizeof back - got, 2, &r), 0);
		tl_completion *x = wait_op(&c, r);
		CU_ASSERT_FATAL(x->result > 0);
		got += (uint32_t)x->result;
		reads++;
	}
	/* Every read was short, and the write still wrote every byte. */
	CU_ASSERT(reads > 3);
	CHECK_EQ(wait_op(&c, w)->result, sizeof msg);
	CU_ASSERT(memcmp(msg, back, sizeof msg) == 0);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

static void accept_fault(enum tl_sim_knob k, int err)
{
	struct ctx c;
	ctx_init(&c, sim_loop(24 + (uint64_t)k, NULL));
	tl_addr a;
	tl_handle l = listen4(&c, NULL, &a), cli;
	tl_op cop, aop;
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 1, &cli, &cop), 0);
	CHECK_EQ(wait_op(&c, cop)->result, 0);
	struct tl_sim_faults f = with(k, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	/* One accept: the error is its terminal result. */
	CHECK_EQ(tl_accept(c.loop, l, 2, &aop), 0);
	CHECK_EQ(wait_op(&c, aop)->result, -err);
	/* Multishot: nonterminal errors, and accepting resumes. */
	CHECK_EQ(tl_accept_start(c.loop, l, 3, &aop), 0);
	for (int t = 0; t < 20; t++)
		turn(&c, (int64_t)MS);
	uint32_t errs = 0;
	for (uint32_t i = 0; i < c.n; i++)
		if (c.log[i].op.v == aop.v) {
			CHECK_EQ(c.log[i].result, -err);
			CHECK_EQ(c.log[i].flags & TL_F_TERMINAL, 0);
			errs++;
		}
	CU_ASSERT(errs > 0);
	f = quiet();
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_handle srv = TL_HANDLE_NONE;
	for (int t = 0; t < 100 && !srv.v; t++) {
		uint32_t from = c.n;
		turn(&c, (int64_t)MS);
		for (uint32_t i = from; i < c.n; i++)
			if (c.log[i].op.v == aop.v && c.log[i].result == 0)
				srv = c.log[i].u.accept.conn;
	}
	CU_ASSERT(srv.v != 0);
	CHECK_EQ(tl_stop(c.loop, aop), 0);
	tl_completion *x = wait_op(&c, aop);
	CU_ASSERT(x->flags & TL_F_STOPPED);
	if (srv.v)
		CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	finish(&c);
}

static void test_fault_accept_emfile(void) { accept_fault(TL_SIM_ACCEPT_EMFILE, EMFILE); }
static void test_fault_accept_enomem(void) { accept_fault(TL_SIM_ACCEPT_ENOMEM, ENOMEM); }
static void test_fault_accept_enobufs(void) { accept_fault(TL_SIM_ACCEPT_ENOBUFS, ENOBUFS); }

static void submit_fault(enum tl_sim_knob k, int err)
{
	struct ctx c;
	ctx_init(&c, sim_loop(40 + (uint64_t)k, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(k, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_loop_stats st0, st1;
	tl_loop_stats_get(c.loop, &st0);
	int alive = tl_alive(c.loop);
	tl_op op;
	uint8_t b[4];
	tl_addr a;
	tl_handle h;
	addr4(&a, 9);
	/* Refused: nothing happened, nothing is owed, nothing leaked. */
	CHECK_EQ(tl_read(c.loop, srv, b, 4, 1, &op), -err);
	CHECK_EQ(tl_read_start(c.loop, srv, 2, &op), -err);
	CHECK_EQ(tl_write(c.loop, cli, "x", 1, 3, &op), -err);
	CHECK_EQ(tl_shutdown(c.loop, cli, 4, &op), -err);
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 5, &h, &op), -err);
	tl_loop_stats_get(c.loop, &st1);
	CHECK_EQ(st1.ops, st0.ops);
	CHECK_EQ(st1.handles, st0.handles);
	CHECK_EQ(tl_alive(c.loop), alive);
	uint32_t from = c.n;
	for (int t = 0; t < 10; t++)
		turn(&c, (int64_t)MS);
	CHECK_EQ(c.n, from); /* no completion is owed for a refused submission */
	f = quiet();
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	CHECK_EQ(tl_write(c.loop, cli, "x", 1, 6, &op), 0);
	CHECK_EQ(wait_op(&c, op)->result, 1);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

static void test_fault_submit_enomem(void) { submit_fault(TL_SIM_SUBMIT_ENOMEM, ENOMEM); }
static void test_fault_submit_enobufs(void) { submit_fault(TL_SIM_SUBMIT_ENOBUFS, ENOBUFS); }

static void test_fault_open_emfile(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(50, NULL));
	struct tl_sim_faults f = with(TL_SIM_OPEN_EMFILE, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_addr a;
	tl_handle h;
	tl_op op;
	addr4(&a, 0);
	CHECK_EQ(tl_tcp_listen(c.loop, &a, NULL, &h), -EMFILE);
	CHECK_EQ(tl_udp_bind(c.loop, &a, &h), -EMFILE);
	CHECK_EQ(tl_unix_listen(c.loop, "/sim/x", NULL, &h), -EMFILE);
	addr4(&a, 80);
	CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 1, &h, &op), -EMFILE);
	tl_loop_stats st;
	tl_loop_stats_get(c.loop, &st);
	CHECK_EQ(st.handles, 0);
	CHECK_EQ(tl_alive(c.loop), 0);
	finish(&c);
}

static void test_fault_slow(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(51, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_SLOW, 1);
	f.slow_us = 200000;
	f.p[TL_SIM_SYNC_WRITE] = 1;
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	uint64_t t0 = tl_now(c.loop);
	tl_op w, r;
	uint8_t b[4];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_write(c.loop, cli, "slow", 4, 2, &w), 0);
	wait_op(&c, r);
	/* The bytes took at least slow_us of virtual time to be noticed. */
	CU_ASSERT(tl_now(c.loop) - t0 >= 200 * MS);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

static void test_fault_udp_drop(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(52, NULL));
	tl_addr a, ba;
	tl_handle h;
	addr4(&a, 0);
	CHECK_EQ(tl_udp_bind(c.loop, &a, &h), 0);
	CHECK_EQ(tl_local_addr(c.loop, h, &ba), 0);
	struct tl_sim_faults f = with(TL_SIM_UDP_DROP, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op s, r;
	uint8_t b[4];
	CHECK_EQ(tl_udp_recv(c.loop, h, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_udp_send(c.loop, h, "lost", 4, &ba, 2, &s), 0);
	CHECK_EQ(wait_op(&c, s)->result, 4);
	for (int t = 0; t < 50; t++)
		turn(&c, (int64_t)MS);
	CU_ASSERT(find_term(&c, r) < 0);
	CHECK_EQ(tl_cancel(c.loop, r), 0);
	CHECK_EQ(wait_op(&c, r)->result, -ECANCELED);
	CHECK_EQ(tl_close(c.loop, h, 0), 0);
	finish(&c);
}

/* A failing cancellation: tl_cancel reports it and the op goes on; a connect
 * deadline keeps trying (the turn reports the error) until it succeeds. */
static void test_fault_cancel_fail(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(53, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_CANCEL_FAIL, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op r, w, op;
	uint8_t b[4];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_cancel(c.loop, r), -EAGAIN);
	CHECK_EQ(tl_write(c.loop, cli, "ok", 2, 2, &w), 0);
	tl_completion *x = wait_op(&c, r);
	CU_ASSERT(x->result == 1 || x->result == 2); /* a short read is allowed */
	/* Deadline: a full backlog, a connect whose cancellation fails. */
	tl_listen_opts o = {.backlog = 1};
	tl_addr a;
	tl_handle l = listen4(&c, &o, &a), h[3];
	f = quiet();
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(tl_tcp_connect(c.loop, &a, 0, 3, &h[i], &op), 0);
		CHECK_EQ(wait_op(&c, op)->result, 0);
	}
	f = with(TL_SIM_CANCEL_FAIL, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	uint64_t dl = tl_now(c.loop) + 10 * MS;
	CHECK_EQ(tl_tcp_connect(c.loop, &a, dl, 4, &h[2], &op), 0);
	tl_completion out[4];
	int errs = 0;
	for (int t = 0; t < 50; t++)
		errs += tl_turn(c.loop, (int64_t)MS, out, 4, NULL) == -EAGAIN;
	CU_ASSERT(errs > 0);
	CU_ASSERT(find_term(&c, op) < 0);
	f = quiet();
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	CHECK_EQ(wait_op(&c, op)->result, -ETIMEDOUT);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(tl_close(c.loop, h[i], 0), 0);
	CHECK_EQ(tl_close(c.loop, l, 0), 0);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

/* Asynchronous cancellation: the terminal comes from a later poll, and the
 * op's buffer stays the caller's until then. */
static void test_async_cancel(void)
{
	struct ctx c;
	ctx_init(&c, sim_loop(54, NULL));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	struct tl_sim_faults f = with(TL_SIM_ASYNC_CANCEL, 1);
	CHECK_EQ(tl__sim_set_faults(c.loop, &f), 0);
	tl_op r;
	uint8_t b[4];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_cancel(c.loop, r), 0);
	CHECK_EQ(tl_cancel(c.loop, r), -EALREADY);
	CU_ASSERT(find_term(&c, r) < 0);
	tl_loop_stats st;
	tl_loop_stats_get(c.loop, &st);
	CHECK_EQ(st.queued, 0); /* not acknowledged yet */
	CHECK_EQ(wait_op(&c, r)->result, -ECANCELED);
	CHECK_EQ(tl_cancel(c.loop, r), -ENOENT);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

/* A host that only ever turns with timeout 0 still sees time pass (each
 * poll costs poll_ns), so deliveries scheduled in virtual time arrive. */
static void test_spin_progress(void)
{
	struct ctx c;
	struct tl_sim_faults f = quiet();
	f.latency_us = 500;
	ctx_init(&c, sim_loop(55, &f));
	tl_handle srv, cli;
	pair(&c, &c, &srv, &cli);
	tl_op w, r;
	uint8_t b[8];
	CHECK_EQ(tl_read(c.loop, srv, b, sizeof b, 1, &r), 0);
	CHECK_EQ(tl_write(c.loop, cli, "spin", 4, 2, &w), 0);
	int t;
	for (t = 0; t < 100000 && find_term(&c, r) < 0; t++)
		turn1(&c, 0);
	CU_ASSERT(find_term(&c, r) >= 0);
	CU_ASSERT(t > 1);
	CHECK_EQ(tl_close(c.loop, srv, 0), 0);
	CHECK_EQ(tl_close(c.loop, cli, 0), 0);
	finish(&c);
}

/* Cancelling a read_start while bytes keep coming, with every cancellation
 * acknowledged late (and half of them racing: the op runs once more): the
 * terminal is -ECANCELED, nothing arrives after it, no lease leaks. */
static void test_cancel_race(void)
{
	for (uint64_t seed = 60; seed < 80; seed++) {
		struct ctx c;
		struct tl_sim_faults f = with(TL_SIM_ASYNC_CANCEL, 1);
		ctx_init(&c, sim_loop(seed, &f));
		tl_handle srv, cli;
		pair(&c, &c, &srv, &cli);
		static uint8_t msg[32768];
		tl_op w, r;
		CHECK_EQ(tl_read_start(c.loop, srv, 1, &r), 0);
		CHECK_EQ(tl_write(c.loop, cli, msg, sizeof msg, 2, &w), 0);
		for (uint64_t k = 0; k < seed % 5; k++)
			turn(&c, 0);
		CHECK_EQ(tl_cancel(c.loop, r), 0);
		uint32_t from = c.n;
		tl_completion *x = wait_op(&c, r);
		CHECK_EQ(x->result, -ECANCELED);
		/* Only events queued before the cancel may come after it. */
		CU_ASSERT((uint32_t)(x - c.log) - from <= 64);
		for (uint32_t i = (uint32_t)(x - c.log) + 1; i < c.n; i++)
			CU_ASSERT(c.log[i].op.v != r.v);
		release_leases(&c, 0);
		CHECK_EQ(tl_close(c.loop, srv, 0), 0);
		CHECK_EQ(tl_close(c.loop, cli, 0), 0);
		finish(&c);
	}
}

static void test_fault_spec(void)
{
	struct tl_sim_faults f = quiet();
	CHECK_EQ(tl__sim_faults_parse(&f, "accept_emfile=0.01,short_io=0.3, latency_us=100"), 0);
	CU_ASSERT(f.p[TL_SIM_ACCEPT_EMFILE] == 0.01);
	CU_ASSERT(f.p[TL_SIM_SHORT_IO] == 0.3);
	CHECK_EQ(f.latency_us, 100);
	fprintf(stderr, "\n  (two messages about bad specs expected here)\n");
	CHECK_EQ(tl__sim_faults_parse(&f, "nonsense=1"), -EINVAL);
	CHECK_EQ(tl__sim_faults_parse(&f, "reset=2"), -EINVAL);
	CU_ASSERT(f.p[TL_SIM_RESET] == 0);
	/* $TL_SIM_FAULTS reaches new loops. */
	setenv("TL_SIM_FAULTS", "udp_drop=1", 1);
	tl_loop *l = sim_loop(1, NULL);
	unsetenv("TL_SIM_FAULTS");
	struct tl_sim_faults g;
	CHECK_EQ(tl__sim_get_faults(l, &g), 0);
	CU_ASSERT(g.p[TL_SIM_UDP_DROP] == 1);
	CHECK_EQ(tl_loop_close(l), 0);
	/* Not a sim loop: -ENOTSUP, trace 0. */
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_EPOLL;
	CHECK_EQ_FATAL(tl_loop_new(&l, &cfg), 0);
	CHECK_EQ(tl__sim_set_faults(l, &f), -ENOTSUP);
	CHECK_EQ(tl__sim_trace(l), 0);
	CHECK_EQ(tl_loop_close(l), 0);
}

int main(void)
{
	unsetenv("TL_SIM_FAULTS");
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("sim", NULL, NULL);
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"determinism", test_determinism},
		{"virtual_time", test_virtual_time},
		{"time_restarts", test_time_restarts},
		{"real_block", test_real_block},
		{"echo_two_loops", test_echo_two_loops},
		{"refused", test_refused},
		{"eof_and_reset", test_eof_and_reset},
		{"backlog_deadline", test_backlog_deadline},
		{"reuseport_and_ports", test_reuseport_and_ports},
		{"unix", test_unix},
		{"udp", test_udp},
		{"lease_wait", test_lease_wait},
		{"cross_thread", test_cross_thread},
		{"fault_connect_refused", test_fault_connect_refused},
		{"fault_reset", test_fault_reset},
		{"fault_close_reset", test_fault_close_reset},
		{"fault_short_io", test_fault_short_io},
		{"fault_accept_emfile", test_fault_accept_emfile},
		{"fault_accept_enomem", test_fault_accept_enomem},
		{"fault_accept_enobufs", test_fault_accept_enobufs},
		{"fault_submit_enomem", test_fault_submit_enomem},
		{"fault_submit_enobufs", test_fault_submit_enobufs},
		{"fault_open_emfile", test_fault_open_emfile},
		{"fault_slow", test_fault_slow},
		{"fault_udp_drop", test_fault_udp_drop},
		{"fault_cancel_fail", test_fault_cancel_fail},
		{"async_cancel", test_async_cancel},
		{"spin_progress", test_spin_progress},
		{"cancel_race", test_cancel_race},
		{"fault_spec", test_fault_spec},
	};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return 1;
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	return fails ? 1 : 0;
}
