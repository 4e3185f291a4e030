/* tests/test_server.c: the stream server (turnloop/server.h) on each driver: a line-upper-casing host and its clients, tl_conn_end, the slot limit and reuse, references and tl_conn_ready, drain, close, completion routing, argument checks, tl_server_free and tl_server_size. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CUnit/Basic.h>

#include <turnloop/server.h>
#include "harness.h"

/*
 * Each test makes a plain loop (sized by tl_server_size) with a server on
 * 127.0.0.1 port 0 and turns it itself: completions to the server first,
 * the rest to the test, then tl_server_pass. The host answers each line
 * upper-cased. Clients are real TCP sockets, read without blocking between
 * turns; but the simulation driver's listener is on its in-memory network,
 * which no OS socket reaches, so there (as in test_bufio) clients are
 * connections on the same loop (tl_tcp_connect, tl_read_start). Each test
 * ends with the listener closed, nothing alive, no handle, op or lease
 * left, one on_free per on_open, the loop closed and no descriptor left.
 */

enum { NCLI = 8 };

struct cli {
	int fd;          /* the OS socket, or -1 (simulation) */
	tl_handle h;     /* the simulation's client connection */
	int used, wdone, eof;
	uint32_t n, off; /* bytes received; of them, checked */
	char in[12288], out[256];
};

struct host { /* a slot: tl_conn first */
	tl_conn c;
	int live, gen, drains, ended;
};

static struct {
	tl_loop *loop;
	tl_server *srv;
	tl_addr addr;
	int sim;
	int opens, frees, readies, drains, bad, timers, stray; /* stray: a Closed the server left with no data */
	uint32_t claimed[TL_K_COUNT_]; /* completions the server took, by kind */
	tl_conn *held, *last_open, *last_free;
	tl_completion timer;           /* the last timer completion the server refused */
	struct cli cl[NCLI];           /* never reused within a test: late completions name them */
} S;

/* ---- The host ---- */

static char longlast[10001]; /* a last line of 10,000 bytes, against a 4096-byte writer */

static void on_open(tl_conn *c, void *arg)
{
	struct host *s = (struct host *)c;
	S.bad += arg != (void *)&S || s->live; /* the slot's last use was freed first */
	s->live = 1;
	s->gen++; /* the host's fields hold what on_free left */
	s->drains = s->ended = 0;
	S.opens++, S.last_open = c;
	H_EQ(tl_rbuf_set_delim(&c->rd, "\n", 1), 0);
}

static void on_free(tl_conn *c, void *arg)
{
	S.bad += arg != (void *)&S || !((struct host *)c)->live;
	((struct host *)c)->live = 0;
	S.frees++, S.last_free = c;
}

static void end(tl_conn *c, const char *last)
{
	((struct host *)c)->ended = 1;
	tl_conn_end(c, last, last ? (uint32_t)strlen(last) : 0);
}

static void on_ready(tl_conn *c, void *arg)
{
	struct host *s = (struct host *)c;
	const uint8_t *m;
	uint32_t n;
	int rc;
	(void)arg;
	S.readies++;
	S.bad += c->closed || s->ended; /* not called once closed or ending */
	while ((rc = tl_rbuf_next(&c->rd, &m, &n)) == 1) {
		char up[300];
		if (n == 4 && !memcmp(m, "QUIT", 4)) {
			end(c, "BYE\n");
			return;
		}
		if (n == 5 && !memcmp(m, "CLOSE", 5)) {
			/* Appended, never flushed: tl_conn_close drops it. */
			H_EQ(tl_wbuf_append(&c->wr, "UNSENT\n", 7), 0);
			tl_conn_close(c);
			return;
		}
		if (n == 4 && !memcmp(m, "LONG", 4)) {
			end(c, longlast); /* more than the writer's ring holds */
			return;
		}
		if (n == 4 && !memcmp(m, "HOLD", 4))
			tl_conn_hold(S.held = c);
		for (uint32_t i = 0; i < n; i++)
			up[i] = (char)toupper(m[i]);
		up[n] = '\n';
		H_EQ(tl_wbuf_append(&c->wr, up, n + 1), 0);
	}
	H_EQ(rc, 0);
	if (c->draining) {
		s->drains++, S.drains++;
		end(c, "DRAIN\n");
	} else if (c->eof && !tl_rbuf_buffered(&c->rd))
		end(c, NULL);
}

static void config(tl_server_config *cfg, uint32_t conns)
{
	*cfg = (tl_server_config){.conns = conns, .conn_size = sizeof(struct host),
				  .read_max = 256, .write_cap = 4096, .on_open = on_open,
				  .on_ready = on_ready, .on_free = on_free, .arg = &S};
	h_loopback(&cfg->addr, AF_INET, 0);
}

/* ---- Turning, and the clients ---- */

/* A simulation client's completion. */
static void cli_feed(struct cli *k, const tl_completion *x)
{
	if (x->kind == TL_K_CONNECT)
		H_EQ(x->result, 0);
	k->wdone |= x->kind == TL_K_WRITE;
	if (x->kind != TL_K_READ)
		return;
	if (x->flags & TL_F_LEASE) {
		uint32_t len = (uint32_t)x->result;
		H_TRUE_FATAL(len <= sizeof k->in - k->n, "client got %u bytes too many", len);
		memcpy(k->in + k->n, x->u.read.lease.data, len);
		k->n += len;
		H_EQ(tl_lease_release(S.loop, x->u.read.lease.id), 0);
	}
	k->eof |= (x->flags & TL_F_EOF) || x->result < 0; /* the end, or a reset */
}

static void cli_poll(struct cli *k)
{
	while (k->used && k->fd >= 0 && !k->eof) {
		ssize_t r = recv(k->fd, k->in + k->n, sizeof k->in - k->n, MSG_DONTWAIT);
		if (r > 0) {
			k->n += (uint32_t)r;
			continue;
		}
		k->eof = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK); /* or a reset */
		break;
	}
}

/* One turn: the server's completions to it, the test's to the test, the
 * pass's writes flushed, the OS clients read. */
static void step(void)
{
	tl_completion x[64];
	int n = tl_turn(S.loop, H_MS, x, 64, NULL);
	H_TRUE(n >= 0, "tl_turn: %d%s", n, h_errname(n));
	for (int i = 0; i < n; i++) {
		if (tl_server_completion(S.srv, &x[i])) {
			S.claimed[x[i].kind]++;
			continue;
		}
		if (x[i].kind == TL_K_TIMER)
			S.timers++, S.timer = x[i];
		else if (x[i].kind == TL_K_CLOSED && !x[i].data)
			S.stray++;
		else if (x[i].data && x[i].data != (void *)&S) /* &S: the timer's */
			cli_feed(x[i].data, &x[i]);
		else
			H_TRUE(!(x[i].flags & TL_F_LEASE), "a lease for no one (kind %u)", x[i].kind);
	}
	tl_server_pass(S.srv);
	for (int i = 0; i < NCLI; i++)
		cli_poll(&S.cl[i]);
}

/* Turn until cond holds, or fail after H_WAIT_MS of wall time. */
#define WAIT(cond) do { \
	uint64_t dl_ = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS; \
	while (!(cond) && h_wall_ns() < dl_) \
		step(); \
	H_TRUE(cond, "waited %d ms for %s", H_WAIT_MS, #cond); \
} while (0)

static uint32_t handles(void)
{
	tl_loop_stats s;
	tl_loop_stats_get(S.loop, &s);
	return s.handles;
}

static struct cli *cli_open(void)
{
	struct cli *k = NULL;
	for (int i = 0; i < NCLI && !k; i++)
		if (!S.cl[i].used)
			k = &S.cl[i];
	CU_ASSERT_PTR_NOT_NULL_FATAL(k);
	*k = (struct cli){.used = 1, .fd = -1};
	if (S.sim) {
		tl_op op;
		H_EQ_FATAL(tl_tcp_connect(S.loop, &S.addr, 0, 0, &k->h, &op), 0);
		H_EQ(tl_handle_set_data(S.loop, k->h, k), 0);
		H_EQ(tl_read_start(S.loop, k->h, 0, &op), 0);
		return k;
	}
	k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_TRUE_FATAL(k->fd >= 0, "socket: %d", errno);
	/* Blocking is fine: on loopback the handshake completes in the
	 * listener's backlog, before (or without) any accept. */
	H_EQ_FATAL(connect(k->fd, &S.addr.sa, tl_addr_len(&S.addr)), 0);
	return k;
}

static void cli_send(struct cli *k, const char *s)
{
	uint32_t len = (uint32_t)strlen(s);
	if (!S.sim) {
		H_EQ(send(k->fd, s, len, MSG_NOSIGNAL), (ssize_t)len);
		return;
	}
	tl_op op;
	memcpy(k->out, s, len); /* stays until the write's completion, waited for */
	k->wdone = 0;
	H_EQ(tl_write(S.loop, k->h, k->out, len, 0, &op), 0);
	WAIT(k->wdone);
}

/* The client's next bytes are s. */
static void expect(struct cli *k, const char *s)
{
	uint32_t len = (uint32_t)strlen(s);
	WAIT(k->n - k->off >= len || k->eof);
	H_TRUE(k->n - k->off >= len && !memcmp(k->in + k->off, s, len),
	       "client got \"%.*s\", wanted \"%s\"", (int)(k->n - k->off), k->in + k->off, s);
	k->off = k->n - k->off >= len ? k->off + len : k->n;
}

static void ask(struct cli *k, const char *s, const char *want)
{
	cli_send(k, s);
	expect(k, want);
}

/* The client sees the end (EOF or a reset) and no byte it did not expect. */
static void cli_eof(struct cli *k)
{
	WAIT(k->eof);
	H_TRUE(k->n == k->off, "client got \"%.*s\" more before the end", (int)(k->n - k->off),
	       k->in + k->off);
}

static void cli_close(struct cli *k)
{
	if (k->fd >= 0)
		close(k->fd);
	else if (k->h.v)
		H_EQ(tl_close(S.loop, k->h, 0), 0);
	k->fd = -1, k->h = TL_HANDLE_NONE, k->eof = 1;
}

/* ---- Frame ---- */

static int begin(uint32_t conns)
{
	int fds = h_begin();
	tl_server_config cfg;
	tl_config lc;
	memset(&S, 0, sizeof S);
	tl_config_init(&lc);
	tl_server_size(&lc, conns);
	S.loop = h_loop_cfg(&lc);
	S.sim = !(tl_loop_caps(S.loop) & TL_CAP_OS);
	config(&cfg, conns);
	H_EQ_FATAL(tl_server_start(&S.srv, S.loop, &cfg), 0);
	H_EQ_FATAL(tl_local_addr(S.loop, tl_server_listener(S.srv), &S.addr), 0);
	return fds;
}

static void fin(int fds)
{
	tl_loop_stats st;
	for (int i = 0; i < NCLI; i++)
		if (S.cl[i].used)
			cli_close(&S.cl[i]);
	H_EQ(tl_close(S.loop, tl_server_listener(S.srv), 0), 0);
	WAIT(!tl_alive(S.loop));
	tl_loop_stats_get(S.loop, &st);
	H_TRUE(!st.handles && !st.ops && !st.leases_out, "left: %u handles, %u ops, %u leases",
	       st.handles, st.ops, st.leases_out);
	H_EQ(S.frees, S.opens);
	H_EQ(S.bad, 0);
	H_EQ(S.stray, 0); /* a connection turned away at accept is the server's to the end */
	h_end(S.loop, fds);
	tl_server_free(S.srv); /* after the loop, as documented: no slot still in use */
	H_EQ(S.frees, S.opens);
}

/* ---- Tests ---- */

/* Several clients; lines whole, split across two sends, several in one send. */
static void echo(void)
{
	int fds = begin(4);
	struct cli *a = cli_open(), *b = cli_open(), *c = cli_open();
	cli_send(a, "hello\n");
	cli_send(b, "one\ntwo\nthree\n");
	expect(a, "HELLO\n");
	expect(b, "ONE\nTWO\nTHREE\n");
	int r = S.readies;
	cli_send(c, "spl");
	WAIT(S.readies > r); /* the first half was read before the second is sent */
	ask(c, "it\n", "SPLIT\n");
	cli_send(a, "again\n");
	cli_send(b, "four\n");
	expect(a, "AGAIN\n");
	expect(b, "FOUR\n");
	H_EQ(S.opens, 3);
	H_EQ(S.frees, 0);
	cli_close(a), cli_close(b), cli_close(c);
	WAIT(S.frees == 3); /* each at its eof: tl_conn_end(c, NULL, 0), then freed */
	fin(fds);
}

/* tl_conn_end: every earlier reply, the last line, then the end. */
static void quit(void)
{
	int fds = begin(2);
	struct cli *a = cli_open();
	ask(a, "one\ntwo\n", "ONE\nTWO\n");
	ask(a, "three\nQUIT\nafter\n", "THREE\nBYE\n"); /* nothing after QUIT is answered */
	cli_eof(a);
	WAIT(S.frees == 1);
	fin(fds);
}

/* tl_conn_end with more bytes than the writer holds: they go in pieces, then the end. */
static void long_last(void)
{
	int fds = begin(2);
	struct cli *a = cli_open();
	for (int i = 0; i < 9999; i++)
		longlast[i] = (char)('a' + i % 26);
	longlast[9999] = '\n';
	ask(a, "x\nLONG\n", "X\n");
	expect(a, longlast);
	cli_eof(a);
	WAIT(S.frees == 1);
	fin(fds);
}

/* One connection over cfg.conns is closed at accept; a freed slot serves again. */
static void slot_limit(void)
{
	int fds = begin(2);
	struct cli *a = cli_open();
	ask(a, "a\n", "A\n");
	tl_conn *sa = S.last_open; /* b not connected yet: a's slot */
	struct cli *b = cli_open();
	ask(b, "b\n", "B\n");
	struct cli *c = cli_open();
	cli_eof(c); /* no byte, and no on_open */
	H_EQ(S.opens, 2);
	cli_close(a);
	WAIT(S.frees == 1);
	H_TRUE(S.last_free == sa, "a's slot freed");
	ask(cli_open(), "d\n", "D\n");
	H_EQ(S.opens, 3);
	H_TRUE(S.last_open == sa, "the new connection is in a's freed slot");
	H_EQ(((struct host *)sa)->gen, 2);
	ask(b, "b2\n", "B2\n");
	fin(fds);
}

/* A held connection's slot outlives its close until the last release;
 * tl_conn_ready calls on_ready while it is open, and not once closed. */
static void hold_release(void)
{
	int fds = begin(1);
	struct cli *a = cli_open();
	ask(a, "x\nHOLD\n", "X\nHOLD\n");
	tl_conn *held = S.held;
	CU_ASSERT_PTR_NOT_NULL_FATAL(held);
	tl_conn_hold(held); /* a second reference: two releases needed */
	int r0 = S.readies;
	tl_conn_ready(held); /* open: its on_ready now, as when bytes came */
	H_EQ(S.readies, r0 + 1);
	tl_conn_ready(NULL);
	uint32_t h0 = handles();
	cli_close(a);
	/* Ended by the server at its eof; the Closed drops only the handle's reference. */
	WAIT(handles() <= h0 - (S.sim ? 2 : 1));
	for (int i = 0; i < 10; i++)
		step();
	H_EQ(held->closed, 1);
	H_EQ(S.frees, 0);
	r0 = S.readies;
	tl_conn_ready(held); /* closed: nothing */
	H_EQ(S.readies, r0);
	/* The only slot is neither freed nor reused: a new connection is turned away. */
	cli_eof(cli_open());
	H_EQ(S.opens, 1);
	tl_conn_release(held);
	H_EQ(S.frees, 0);
	tl_conn_release(held);
	H_EQ(S.frees, 1); /* inside the last release */
	H_TRUE(S.last_free == held, "the held slot freed");
	ask(cli_open(), "c\n", "C\n");
	H_EQ(S.opens, 2);
	fin(fds);
}

/* tl_server_drain: one on_ready with draining set per open connection. */
static void drain(void)
{
	int fds = begin(4);
	struct cli *a = cli_open();
	ask(a, "a\n", "A\n");
	struct host *sa = (struct host *)S.last_open;
	struct cli *b = cli_open();
	ask(b, "b\n", "B\n");
	struct host *sb = (struct host *)S.last_open;
	tl_server_drain(S.srv);
	H_EQ(S.drains, 2);
	tl_server_drain(S.srv); /* both ending now: no on_ready again */
	tl_server_drain(NULL);
	H_EQ(S.drains, 2);
	H_EQ(sa->drains, 1);
	H_EQ(sb->drains, 1);
	expect(a, "DRAIN\n");
	expect(b, "DRAIN\n");
	cli_eof(a), cli_eof(b);
	WAIT(S.frees == 2);
	fin(fds);
}

/* tl_conn_close: bytes not yet written are dropped, the connection closed. */
static void conn_close(void)
{
	int fds = begin(2);
	struct cli *a = cli_open();
	ask(a, "a\n", "A\n");
	cli_send(a, "CLOSE\n");
	cli_eof(a); /* no "UNSENT" */
	WAIT(S.frees == 1);
	fin(fds);
}

/* The server takes its own completions and no other. */
static void completions(void)
{
	int fds = begin(2);
	tl_handle th;
	tl_op op;
	tl_completion z = {0};
	H_EQ_FATAL(tl_timer_start(S.loop, tl_now(S.loop) + H_MS, 0, 0x71, &th, &op), 0);
	H_EQ(tl_handle_set_data(S.loop, th, &S), 0); /* a pointer outside the slots */
	WAIT(S.timers == 1); /* counted only when the server refused it */
	H_EQ(S.timer.token, 0x71);
	H_EQ(tl_server_completion(S.srv, &S.timer), 0);
	H_EQ(tl_close(S.loop, th, 0), 0);
	z.kind = TL_K_READ;
	H_EQ(tl_server_completion(S.srv, &z), 0); /* data NULL */
	H_EQ(tl_server_completion(NULL, &S.timer), 0);
	H_EQ(tl_server_completion(S.srv, NULL), 0);
	H_EQ(tl_server_pass(NULL), 0);
	/* A connection's whole life: every completion of it the server's. */
	struct cli *a = cli_open();
	ask(a, "a\n", "A\n");
	cli_close(a);
	WAIT(S.frees == 1);
	H_EQ(S.claimed[TL_K_ACCEPT], 1);
	H_TRUE(S.claimed[TL_K_READ] >= 2, "reads: %u (bytes, eof)", S.claimed[TL_K_READ]);
	H_TRUE(S.claimed[TL_K_WRITE] >= 1, "writes: %u", S.claimed[TL_K_WRITE]);
	H_EQ(S.claimed[TL_K_CLOSED], 1);
	H_EQ(S.claimed[TL_K_TIMER], 0);
	fin(fds);
}

/* tl_server_start's refusals, *out NULL after each; a listen error. */
static void arguments(void)
{
	int fds = begin(2);
	tl_server_config cfg, b;
	tl_server *s, *bogus = (tl_server *)&cfg;
	config(&cfg, 2);
	for (int i = 0; i < 13; i++) {
		b = cfg;
		switch (i) {
		case 0: b.on_ready = NULL; break;
		case 1: b.conns = 0; break;
		case 2: b.conns = (1u << 20) + 1; break;
		case 3: b.conn_size = sizeof(tl_conn) - 1; break;
		case 4: b.read_max = 0; break;
		case 5: b.write_cap = 0; break;
		case 6: b.read_max = (1u << 30) + 1; break;
		case 7: b.write_cap = (1u << 30) + 1; break;
		case 11: b.conn_size = (1u << 24) + 1; break;
		case 12: b.conn_size = UINT32_MAX; break; /* rounded up to 64 bytes, it would wrap to 0 */
		}
		s = bogus;
		int rc = tl_server_start(i == 8 ? NULL : &s, i == 9 ? NULL : S.loop, i == 10 ? NULL : &b);
		if (rc == 0) /* a server that should not be: taken down again, the test fails */
			tl_close(S.loop, tl_server_listener(s), 0), tl_server_free(s), s = NULL;
		H_TRUE(rc == -EINVAL && (i == 8 || !s), "case %d: %d%s, *out %p", i, rc, h_errname(rc), (void *)s);
	}
	H_EQ(tl_server_listener(NULL).v, 0);
	cfg.addr = S.addr; /* where this test's server listens, without reuseport */
	s = bogus;
	H_EQ(tl_server_start(&s, S.loop, &cfg), -EADDRINUSE);
	H_TRUE(s == NULL, "listen error: *out not NULL");
	H_EQ(handles(), 1); /* only the first server's listener: nothing kept */
	fin(fds);
}

/* tl_server_free after tl_loop_destroy: on_free for the slots still in use. */
static void free_after_destroy(void)
{
	int fds = begin(4);
	struct cli *a = cli_open(), *b = cli_open();
	ask(a, "HOLD\n", "HOLD\n");
	ask(b, "b\n", "B\n");
	uint32_t h0 = handles();
	cli_close(a);
	WAIT(handles() <= h0 - (S.sim ? 2 : 1)); /* a closed, still held */
	H_EQ(S.frees, 0);
	tl_loop_destroy(S.loop); /* b still open: its Closed never comes */
	H_EQ(S.frees, 0);
	tl_server_free(S.srv);
	H_EQ(S.frees, 2); /* a (held) and b (open), once each */
	H_EQ(S.bad, 0);
	if (b->fd >= 0)
		close(b->fd);
	h_end(NULL, fds);
}

/* tl_server_size raises what is below a server's needs and keeps the rest. */
static void sizing(void)
{
	int fds = h_begin();
	tl_config lc, d;
	tl_config_init(&d);
	lc = d;
	tl_server_size(&lc, 1000); /* 1064 handles and 5024 ops: the defaults are larger */
	H_TRUE(lc.max_handles == d.max_handles && lc.max_ops == d.max_ops, "raised at 1000");
	H_EQ(lc.pooled_buffers, 2048); /* 2 a connection, a power of 2 */
	tl_server_size(&lc, 10000);
	H_EQ(lc.max_handles, 10064);
	H_EQ(lc.max_ops, 41024);
	H_EQ(lc.pooled_buffers, 32768);
	lc.max_handles = 1u << 20;
	lc.max_ops = 1u << 21;
	tl_server_size(&lc, 300000); /* pooled buffers: at most 32768 */
	H_TRUE(lc.max_handles == 1u << 20 && lc.max_ops == 1u << 21, "larger values not kept");
	H_EQ(lc.pooled_buffers, 32768);
	lc = d;
	lc.pooled_buffers = 20000; /* a size the loop takes: doubled, it must stop at the most */
	tl_server_size(&lc, 15000);
	H_EQ(lc.pooled_buffers, 32768);
	tl_server_size(NULL, 10);
	h_end(NULL, fds);
}

static const h_test tests[] = {
#define T(s, f) {s, #f, f}
	T("conn", echo), T("conn", quit), T("conn", long_last), T("conn", slot_limit), T("conn", hold_release),
	T("conn", drain), T("conn", conn_close), T("server", completions), T("server", arguments),
	T("server", free_after_destroy), T("server", sizing),
#undef T
	{NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
	return h_main_table(argc, argv, "server", tests);
}
