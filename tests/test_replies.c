/* tests/test_replies.c: a connection's replies in request order (turnloop/replies.h) on the sharded runtime of two shards, each with its tl_server, on each kernel driver: pipelined replies made here, on the other shard and later by the host, in order; long replies; sums by cfg.out; a full ring; a kept reader view; a client gone while records are away; the stop's -EPIPE; argument checks; tl_replies_fini. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CUnit/Basic.h>

#include <turnloop/replies.h>
#include <turnloop/stats.h>
#include "harness.h"

/*
 * Each test runs a runtime of two shards in a thread of its own, each
 * shard with a server on one 127.0.0.1 port (SO_REUSEPORT: the kernel
 * picks the shard of each connection), wired as tools/tlkv.c wires its
 * own, and drives it with real TCP clients from the test's thread. The
 * host reads lines "<op> <arg>" and answers each in order; k is the
 * connection's shard, o the other one:
 *
 *   D w    "k:w": straight into the writer when nothing is owed
 *          (tl_replies_direct), else a record made here
 *   L w    "k:w", a record made here
 *   R w    "o:w", made on o (tl_replies_send)
 *   O w    "k:w", sent to k itself over the mesh
 *   K w    "o:w", made on o from the reader's view (keep); the run waits
 *          for the test's gate
 *   Z w    "o:w", made on o once the test opens the gate
 *   B n    n bytes made on o: "o:", letters, "\n" (a block of o's when n > 64)
 *   b n    the same made here
 *   S v    a part of a sum made on o (no bytes, result v); E v the last
 *          part: cfg.out says "=<sum>"; s v a part made here
 *   W w    "o:w", made later: tl_replies_wait, a call to o, then
 *          tl_replies_made in its result's handler
 *   P w    "k:w", after a call to o that o never answers (tl_shard_defer):
 *          with mesh_inflight 1, every later batch to o waits for ever
 *
 * A record with no bytes and a negative result leaves as "!<result>".
 * The shards' own checks count their failures (CUnit is not thread-safe)
 * and the test asserts the count is 0. Each test ends with the runtime
 * stopped and destroyed, every server freed, one on_free per on_open, no
 * block left in a ring after tl_replies_fini, and no descriptor left.
 * Not on the simulation driver: its network has no OS socket to reach.
 */

enum { NSH = 2, CONNS = 8, NRECS = 64, RMAX = 4096, WCAP = 16384, OUT_MAX = 24, EVN = 4096, NCLI = 4 };
enum { F_SUM = 1, F_EMIT = 2 };
enum { EV_OPEN = 1, EV_CLOSED, EV_BACK, EV_MADE, EV_FREE };
#define PLUG_TOKEN UINT64_C(0x9106)

/* A reply owed, in its connection's ring. */
struct rec {
	tl_reply r; /* first */
	char op;
	uint32_t home;       /* the connection's shard */
	uint32_t n;          /* B, b: the reply's length */
	int64_t v;           /* S, E: the part's value */
	const uint8_t *word; /* in w (copied), or, for K, in the reader's view */
	uint32_t wlen;
	uint8_t w[32];
};

struct conn { /* a slot of a shard's server: tl_conn first */
	tl_conn b;
	struct shard *sh;
	uint32_t gen;    /* the connection's number in the test, in on_open's order */
	int live;
	uint32_t need;   /* tl_rbuf_peek's min */
	uint32_t kept_n; /* the line a kept record reads: consumed once it is back */
	int64_t sum;     /* cfg.out's */
	tl_replies q;    /* from here on: set up at open */
	tl_mesh_chain chains[NSH];
	struct rec rec[NRECS];
};

struct shard {
	tl_shard *s; /* NULL once the runtime is gone */
	tl_server *srv;
	uint32_t id;
	tl_mesh_reply plug; /* P's call, on this shard: never answered */
};

struct ev {
	uint32_t gen;
	int kind;
	int64_t v;
};

/* What the argument test's shard found (written on shard 0, read after the join). */
struct args {
	int init_rc[17], good_rc[4], bad_send_rc, bad_send_result, bad_send_done, bad_send_away;
	int new_ok, full_null, buf_inline, buf_block, flush_rc, flush_bytes, flush_freed, direct_ok;
	int compl_null, compl_kind, compl_nobatch, compl_other, compl_noarg, other_seen, plain_seen;
	int fini_ok;
};

static struct {
	tl_runtime_config cfg;
	tl_runtime *rt;
	pthread_t th;
	int new_rc, launch_rc, run_rc, started;
	atomic_int stopping, listening, up_failed;
	tl_addr addr;
	int port_fd;
	int cl[NCLI];
	uint32_t nrecs;
	int stats, stats_ok, arenas;
	uint64_t alloc[NSH], freed[NSH];
	struct shard sh[NSH];
	atomic_int gate;
	atomic_uint opens, frees, closeds, backs, mades, runs, sends, outs, out_errs, fails;
	atomic_uint ring_full, ready_kept, kept_sent, gated, directs, epipe_backs;
	atomic_uint fini_owed, fini_blocks, fini_epipe, fini_left, frees_in_rt;
	atomic_int kept_bad; /* a kept record's batch: kept before or after its completion wrong */
	int dummy_epipe;    /* tl_replies_send after the mesh closed, on a queue of a dummy connection: 1 when right */
	struct args a;
	tl_mesh_batcher ob; /* the argument test's own batcher (another token) */
	tl_mesh_chain och[NSH];
	/* The argument test's call's arg and its own batch's item: no records
	 * of a queue, but ones that a tl_replies_completion taking them would
	 * end as such (of a queue of a closed dummy connection) rather than
	 * crash on. */
	tl_reply fake, fake_item;
	tl_replies fake_q;
	tl_conn fake_c;
	struct ev ev[EVN];
	atomic_uint nev;
} R;

/* A counter's value, for the test's thread. */
static unsigned n_(atomic_uint *p)
{
	return atomic_load(p);
}
#define N(f) n_(&R.f)

/* A check on a shard's thread: counted, and the test asserts the count. */
#define SH_CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "  %s:%d: [%s] shard check failed: %s\n", __FILE__, __LINE__, h_test_name(), #cond); \
		atomic_fetch_add(&R.fails, 1); \
	} \
} while (0)

static void ev(uint32_t gen, int kind, int64_t v)
{
	uint32_t i = atomic_fetch_add(&R.nev, 1);
	if (i < EVN)
		R.ev[i] = (struct ev){gen, kind, v};
}

/* The index of connection gen's first event of kind (after the join), or -1. */
static int ev_find(uint32_t gen, int kind)
{
	uint32_t n = atomic_load(&R.nev);
	for (uint32_t i = 0; i < n && i < EVN; i++)
		if (R.ev[i].gen == gen && R.ev[i].kind == kind)
			return (int)i;
	return -1;
}

/* Connection gen's events of kinds a, then b, both there (after the join). */
static void ev_order(uint32_t gen, int a, int b)
{
	int i = ev_find(gen, a), j = ev_find(gen, b);
	H_TRUE(i >= 0 && j > i, "connection %u: event %d at %d, event %d at %d", gen, a, i, b, j);
}

/* The byte i of B's and b's reply of n bytes made on shard id. */
static char long_byte(uint32_t id, uint32_t i, uint32_t n)
{
	return i == 0 ? (char)('0' + id) : i == 1 ? ':' : i == n - 1 ? '\n' : (char)('a' + (i * 7 + id) % 26);
}

/* ---- The host: replies made ---- */

/* "<id>:<word>\n" as r's reply, made on s. */
static void say_word(tl_shard *s, tl_reply *r, uint32_t id, const uint8_t *w, uint32_t n)
{
	uint8_t *p = tl_reply_buf(s, r, n + 3);
	SH_CHECK(p != NULL);
	if (!p)
		return;
	p[0] = (uint8_t)('0' + id);
	p[1] = ':';
	memcpy(p + 2, w, n);
	p[n + 2] = '\n';
}

static void say_long(tl_shard *s, tl_reply *r, uint32_t id, uint32_t n)
{
	uint8_t *p = tl_reply_buf(s, r, n);
	SH_CHECK(p != NULL);
	SH_CHECK(p == NULL || (n <= TL_REPLY_INLINE) == (p == r->out));
	for (uint32_t i = 0; p && i < n; i++)
		p[i] = (uint8_t)long_byte(id, i, n);
}

/* The run: record x on the shard that makes it. */
static int64_t run(tl_shard *s, tl_reply *x)
{
	struct rec *r = (struct rec *)x;
	uint32_t id = tl_shard_id(s);
	uint64_t dl;
	atomic_fetch_add(&R.runs, 1);
	/* O goes to the connection's own shard, everything else to the other. */
	SH_CHECK((r->op == 'O') == (id == r->home));
	SH_CHECK(x->data == NULL && !x->done);
	switch (r->op) {
	case 'K':
	case 'Z': /* held until the test opens the gate */
		atomic_fetch_add(&R.gated, 1);
		dl = h_wall_ns() + 20ull * 1000 * H_MS;
		while (!atomic_load(&R.gate) && h_wall_ns() < dl)
			usleep(200);
		SH_CHECK(atomic_load(&R.gate));
		/* fall through */
	case 'R':
	case 'O':
		say_word(s, x, id, r->word, r->wlen);
		return 0;
	case 'B':
		say_long(s, x, id, r->n);
		return 0;
	case 'S':
	case 'E':
		return r->v;
	}
	SH_CHECK(!"a record of no remote op");
	return 0;
}

/* A reply with no bytes as it leaves: parts add up, the last says the sum;
 * a refused one says its error. */
static uint32_t out(tl_reply *r, uint8_t *p, void *arg)
{
	int64_t *sum = arg;
	char b[32];
	int n = 0;
	atomic_fetch_add(&R.outs, 1);
	SH_CHECK(r->data == NULL && r->done);
	if (r->result < 0) {
		atomic_fetch_add(&R.out_errs, 1);
		n = snprintf(b, sizeof b, "!%lld\n", (long long)r->result);
	} else {
		*sum += r->result;
		if (r->flags & F_EMIT)
			n = snprintf(b, sizeof b, "=%lld\n", (long long)*sum), *sum = 0;
	}
	SH_CHECK(n >= 0 && n <= OUT_MAX);
	memcpy(p, b, (size_t)n);
	return (uint32_t)n;
}

/* W's call on the other shard: a while, then its shard's id. */
static int64_t later(tl_shard *s, void *arg)
{
	(void)arg;
	usleep(30000);
	return tl_shard_id(s);
}

/* W's result, on the connection's shard (handler 1): the reply made, in its turn. */
static void made(tl_shard *s, const tl_completion *x)
{
	struct rec *r = x->u.mesh.arg;
	struct conn *c = (struct conn *)r->r.q->c;
	SH_CHECK(x->kind == TL_K_MESH && x->result >= 0 && tl_shard_id(s) == r->home);
	ev(c->gen, EV_MADE, x->result);
	atomic_fetch_add(&R.mades, 1);
	SH_CHECK(!r->r.done && r->r.data == NULL);
	if (x->result >= 0)
		say_word(s, &r->r, (uint32_t)x->result, r->word, r->wlen);
	tl_replies_made(&c->q, &r->r); /* may free c */
}

/* P's call: answered never, so its credit stays taken. */
static int64_t plug(tl_shard *s, void *arg)
{
	(void)arg;
	SH_CHECK(tl_shard_defer(s, &R.sh[tl_shard_id(s)].plug) == 0);
	return 0;
}

/* One line p[0..n): 1 when answered or sent, 0 when the ring is full (the
 * line is read again at the next on_ready). */
static int command(struct conn *c, const uint8_t *p, uint32_t n)
{
	tl_shard *s = c->sh->s;
	uint32_t me = c->sh->id, other = (me + 1) % NSH, an = n > 2 ? n - 2 : 0;
	const uint8_t *a = p + 2;
	char num[24] = {0};
	struct rec *r;
	uint8_t line[64];
	int rc;
	memcpy(num, a, an < sizeof num - 1 ? an : sizeof num - 1);
	if (p[0] == 'D' && an + 3 <= sizeof line && tl_replies_direct(&c->q, an + 3)) {
		line[0] = (uint8_t)('0' + me), line[1] = ':';
		memcpy(line + 2, a, an);
		line[an + 2] = '\n';
		SH_CHECK(tl_wbuf_append(&c->b.wr, line, an + 3) == 0);
		atomic_fetch_add(&R.directs, 1);
		return 1;
	}
	if (!(r = (struct rec *)tl_replies_add(&c->q))) {
		atomic_fetch_add(&R.ring_full, 1);
		return 0;
	}
	SH_CHECK(r->r.done && r->r.data == NULL && r->r.len == 0 && r->r.flags == 0 && r->r.result == 0);
	r->op = (char)p[0];
	r->home = me;
	r->wlen = an < sizeof r->w ? an : (uint32_t)sizeof r->w;
	r->word = memcpy(r->w, a, r->wlen);
	switch (p[0]) {
	case 'D':
	case 'L':
		say_word(s, &r->r, me, r->word, r->wlen);
		return 1;
	case 'b':
		say_long(s, &r->r, me, (uint32_t)strtoul(num, NULL, 10));
		return 1;
	case 's':
		r->r.flags = F_SUM;
		r->r.result = strtoll(num, NULL, 10);
		return 1;
	case 'P':
		SH_CHECK(tl_shard_submit_to(s, other, plug, NULL, PLUG_TOKEN) == 0);
		say_word(s, &r->r, me, r->word, r->wlen);
		return 1;
	case 'W':
		tl_replies_wait(&c->q, &r->r);
		SH_CHECK(tl_shard_submit_to(s, other, later, r, tl_token(1, 0)) == 0);
		return 1;
	case 'K':
		r->word = a, r->wlen = an; /* the reader's bytes, not consumed while kept */
		break;
	case 'B':
		r->n = (uint32_t)strtoul(num, NULL, 10);
		break;
	case 'E':
		r->r.flags = F_EMIT;
		/* fall through */
	case 'S':
		r->r.flags |= F_SUM;
		r->v = strtoll(num, NULL, 10);
		break;
	case 'R':
	case 'O':
	case 'Z':
		break;
	default:
		SH_CHECK(!"an unknown op");
		return 1;
	}
	rc = tl_replies_send(&c->q, &r->r, p[0] == 'O' ? me : other, p[0] == 'K');
	SH_CHECK(rc == 0);
	atomic_fetch_add(&R.sends, 1);
	if (p[0] == 'K') {
		SH_CHECK(tl_replies_kept(&c->q) == 1);
		atomic_fetch_add(&R.kept_sent, 1);
	}
	return 1;
}

/* The lines c has read, as far as they go now. */
static void serve(struct conn *c)
{
	const uint8_t *p, *nl;
	int n;
	if (tl_replies_kept(&c->q)) { /* the view is the run's: neither peek nor consume */
		atomic_fetch_add(&R.ready_kept, 1);
		SH_CHECK(tl_rbuf_buffered(&c->b.rd) >= c->kept_n);
		return;
	}
	if (c->kept_n) { /* the kept line, its record back */
		SH_CHECK(tl_rbuf_consume(&c->b.rd, c->kept_n) == 0);
		c->kept_n = 0;
	}
	for (;;) {
		if ((n = tl_rbuf_peek(&c->b.rd, c->need, &p)) <= 0) {
			if (n < 0) /* a line too long, or the stream cut in one */
				tl_conn_close(&c->b);
			return;
		}
		if (!(nl = memchr(p, '\n', (size_t)n))) {
			c->need = (uint32_t)n + 1;
			continue;
		}
		if (!command(c, p, (uint32_t)(nl - p)))
			return; /* the ring is full: on_ready comes when a reply is out */
		c->need = 1;
		if (tl_replies_kept(&c->q)) {
			c->kept_n = (uint32_t)(nl - p) + 1;
			return;
		}
		SH_CHECK(tl_rbuf_consume(&c->b.rd, (uint32_t)(nl - p) + 1) == 0);
	}
}

/* ---- The host: the server's callbacks, and the runtime's ---- */

static void on_ready(tl_conn *b, void *arg)
{
	struct conn *c = (struct conn *)b;
	SH_CHECK(arg == c->sh && c->live && !b->closed); /* nothing for a closed connection */
	/* Nothing owed, nothing away: a completion's on_ready sees its records
	 * no longer counted away (a gather after them may go). */
	SH_CHECK(!tl_replies_flush(&c->q) || !tl_replies_away(&c->q));
	serve(c);
	if (tl_replies_flush(&c->q) && !b->closed &&
	    (b->draining || (b->eof && !tl_rbuf_buffered(&b->rd))))
		tl_conn_end(b, NULL, 0);
}

static void on_open(tl_conn *b, void *arg)
{
	struct conn *c = (struct conn *)b;
	struct shard *sh = arg;
	SH_CHECK(!c->live);
	memset(&c->sh, 0, offsetof(struct conn, q) - offsetof(struct conn, sh));
	c->sh = sh;
	c->live = 1;
	c->need = 1;
	c->gen = atomic_fetch_add(&R.opens, 1) + 1;
	ev(c->gen, EV_OPEN, sh->id);
	tl_replies_config qc = {c->rec, R.nrecs, sizeof *c->rec, c->chains, NSH, run, out, OUT_MAX, &c->sum};
	SH_CHECK(tl_replies_init(&c->q, b, sh->s, &qc) == 0);
}

static void on_free(tl_conn *b, void *arg)
{
	struct conn *c = (struct conn *)b;
	SH_CHECK(arg == c->sh && c->live);
	c->live = 0;
	ev(c->gen, EV_FREE, c->sh->s != NULL);
	/* What is still owed: every record back (or the runtime gone), some with blocks. */
	for (uint32_t i = c->q.head; i != c->q.tail; i++) {
		tl_reply *r = &c->rec[i & (R.nrecs - 1)].r;
		SH_CHECK(r->done || !c->sh->s);
		atomic_fetch_add(&R.fini_owed, 1);
		atomic_fetch_add(&R.fini_blocks, r->data && r->data != r->out);
		atomic_fetch_add(&R.fini_epipe, r->result == -EPIPE);
	}
	SH_CHECK(c->q.away == 0 || !c->sh->s);
	tl_replies_fini(&c->q, c->sh->s);
	/* Nothing left: every block freed, the ring empty. */
	for (uint32_t i = 0; i < R.nrecs; i++)
		if (c->rec[i].r.data && c->rec[i].r.data != c->rec[i].r.out)
			atomic_fetch_add(&R.fini_left, 1);
	if (c->q.head != c->q.tail)
		atomic_fetch_add(&R.fini_left, 1);
	atomic_fetch_add(&R.frees_in_rt, c->sh->s != NULL);
	atomic_fetch_add(&R.frees, 1);
}

/* tl_replies_send after the mesh closed, on a queue of a dummy connection
 * (closed, its writer never flushed): -EPIPE, the record done with result
 * -EPIPE and no bytes, cfg.out says so, nothing held. On the last
 * handlers of a stop. */
static void dummy_epipe(tl_shard *s)
{
	static uint8_t wmem[256];
	struct rec recs[2];
	tl_mesh_chain ch[NSH];
	tl_replies q;
	tl_conn d;
	tl_reply *r;
	int64_t sum = 0;
	int ok = 1;
	memset(&d, 0, sizeof d);
	memset(recs, 0, sizeof recs);
	d.closed = 1;
	ok &= tl_wbuf_init(&d.wr, tl_shard_loop(s), (tl_handle){1}, wmem, sizeof wmem, 0) == 0;
	tl_replies_config qc = {recs, 2, sizeof *recs, ch, NSH, run, out, OUT_MAX, &sum};
	ok &= tl_replies_init(&q, &d, s, &qc) == 0;
	ok &= (r = tl_replies_add(&q)) != NULL;
	if (ok) {
		ok &= tl_replies_send(&q, r, (tl_shard_id(s) + 1) % NSH, 0) == -EPIPE;
		ok &= r->done == 1 && r->result == -EPIPE && r->data == NULL && q.away == 0 && d.refs_ == 0;
		char want[16];
		int n = snprintf(want, sizeof want, "!%d\n", -EPIPE);
		ok &= tl_replies_flush(&q) == 1 && tl_wbuf_pending(&d.wr) == (uint32_t)n && !memcmp(wmem, want, (size_t)n);
	}
	tl_wbuf_fini(&d.wr);
	R.dummy_epipe = ok;
}

static void on_completion(tl_shard *s, const tl_completion *x)
{
	struct shard *sh = tl_shard_data(s);
	if (x->kind == TL_K_CLOSED && x->data && x->data != (void *)sh->srv) {
		ev(((struct conn *)x->data)->gen, EV_CLOSED, 0);
		atomic_fetch_add(&R.closeds, 1);
	}
	if (x->kind == TL_K_MESH && (x->aux & TL_MESH_BATCH) && x->token == TL_REPLIES_TOKEN) {
		tl_reply *r = x->u.mesh.arg;
		struct conn *c = (struct conn *)r->q->c;
		uint32_t frees = atomic_load(&R.frees), kept = 0;
		for (tl_reply *i = r; i; i = (tl_reply *)(void *)i->link.next)
			kept += i->keep;
		/* Its target: the connection's shard for O, the other for the rest. */
		SH_CHECK(TL_MESH_SHARD(x->aux) == (((struct rec *)r)->op == 'O' ? tl_shard_id(s) : (tl_shard_id(s) + 1) % NSH));
		ev(c->gen, EV_BACK, x->result);
		atomic_fetch_add(&R.backs, 1);
		if (x->result < 0) {
			atomic_fetch_add(&R.epipe_backs, 1);
			dummy_epipe(s);
		}
		if (kept && c->q.kept < kept)
			atomic_store(&R.kept_bad, 1);
		SH_CHECK(tl_replies_completion(x) == 1);
		/* c may be freed by now (on_free counted): read it only when not. */
		if (kept && atomic_load(&R.frees) == frees && c->q.kept != 0)
			atomic_store(&R.kept_bad, 1);
		return;
	}
	if (tl_server_completion(sh->srv, x))
		return;
	SH_CHECK(tl_replies_completion(x) == 0);
	SH_CHECK(!"a completion for no one");
}

static int on_pass(tl_shard *s, void *arg)
{
	(void)arg;
	return tl_server_pass(((struct shard *)tl_shard_data(s))->srv);
}

static void on_drain(tl_shard *s, void *arg)
{
	(void)arg;
	tl_server_drain(((struct shard *)tl_shard_data(s))->srv);
}

static int on_launch(tl_shard *s, void *arg)
{
	struct shard *sh = &R.sh[tl_shard_id(s)];
	tl_server_config sc = {.addr = R.addr, .reuseport = 1, .conns = CONNS, .conn_size = sizeof(struct conn),
			       .read_max = RMAX, .write_cap = WCAP, .on_open = on_open, .on_ready = on_ready,
			       .on_free = on_free, .arg = sh};
	int rc;
	(void)arg;
	sh->s = s;
	sh->id = tl_shard_id(s);
	tl_shard_set_data(s, sh);
	if ((rc = tl_server_start(&sh->srv, tl_shard_loop(s), &sc)) < 0) {
		fprintf(stderr, "  [%s] shard %u: tl_server_start: %d%s\n", h_test_name(), sh->id, rc, h_errname(rc));
		atomic_store(&R.up_failed, 1);
		return rc;
	}
	atomic_fetch_add(&R.listening, 1);
	return 0;
}

/* ---- The runtime's thread, and each test's frame ---- */

/* new, launch, run and destroy on one thread (runtime.h): this one. The
 * last waits for the test's stop, so that rt outlives its tl_runtime_stop. */
static void *runner(void *arg)
{
	tl_stats_reader *sr;
	tl_stats_shard st;
	(void)arg;
	if ((R.new_rc = tl_runtime_new(&R.rt, &R.cfg)) != 0) {
		atomic_store(&R.up_failed, 1);
		return NULL;
	}
	if ((R.launch_rc = tl_runtime_launch(R.rt)) != 0)
		atomic_store(&R.up_failed, 1);
	else
		R.run_rc = tl_runtime_run(R.rt);
	R.arenas = tl_runtime_arenas(R.rt, NULL);
	if (R.stats && tl_stats_open(&sr, getpid()) == 0) { /* the shards' last totals */
		R.stats_ok = 1;
		for (uint32_t i = 0; i < NSH; i++) {
			memset(&st, 0, sizeof st);
			R.stats_ok &= tl_stats_shard_get(sr, i, &st, NULL, 0) == 0;
			R.alloc[i] = st.alloc_bytes, R.freed[i] = st.freed_bytes;
		}
		tl_stats_close(sr);
	}
	while (!atomic_load(&R.stopping))
		usleep(1000);
	tl_runtime_destroy(R.rt);
	return NULL;
}

/* Set up a test: R cleared, a port reserved (a bound socket with
 * SO_REUSEPORT, kept until the end: no one else takes the port meanwhile,
 * and it takes no connection), the runtime's config. */
static int begin(uint32_t nrecs)
{
	int fds = h_begin(), one = 1;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sin;
	memset(&R, 0, sizeof R);
	for (int i = 0; i < NCLI; i++)
		R.cl[i] = -1;
	R.nrecs = nrecs;
	R.port_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_TRUE_FATAL(R.port_fd >= 0, "socket: %d", errno);
	H_EQ(setsockopt(R.port_fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
	H_EQ(bind(R.port_fd, (struct sockaddr *)&sin, sizeof sin), 0);
	H_EQ(getsockname(R.port_fd, (struct sockaddr *)&sin, &len), 0);
	h_loopback(&R.addr, AF_INET, ntohs(sin.sin_port));
	tl_runtime_config_init(&R.cfg);
	R.cfg.plan.shards = NSH;
	R.cfg.plan.overcommit = 1; /* more shards than CPUs is fine */
	R.cfg.no_env = 1;
	R.cfg.signals = 0;
	R.cfg.stats = 0;
	R.cfg.stall_ns = 0;
	R.cfg.mesh_spin_ns = 0;
	R.cfg.drain_ns = 3000000000ull;
	R.cfg.grace_ns = 3000000000ull;
	tl_server_size(&R.cfg.loop, CONNS);
	R.cfg.on_launch = on_launch;
	R.cfg.on_completion = on_completion;
	R.cfg.handlers[1] = made;
	R.cfg.on_pass = on_pass;
	R.cfg.on_drain = on_drain;
	return fds;
}

/* Start the runtime's thread; 1 once both shards listen. */
static int launch(void)
{
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	H_EQ_FATAL(pthread_create(&R.th, NULL, runner, NULL), 0);
	R.started = 1;
	while (atomic_load(&R.listening) < NSH && !atomic_load(&R.up_failed) && h_wall_ns() < dl)
		usleep(500);
	H_EQ(atomic_load(&R.listening), NSH);
	return atomic_load(&R.listening) == NSH;
}

/* Ask for the end: a graceful drain (on_drain: every connection ends once
 * its replies are out) or the hard stop; runs held at the gate go on. */
static void stop(int graceful)
{
	atomic_store(&R.gate, 1); /* a run held by a test that failed: let it go */
	if (R.rt && !atomic_load(&R.up_failed))
		graceful ? tl_runtime_drain(R.rt) : tl_runtime_stop(R.rt);
	atomic_store(&R.stopping, 1);
}

static void cli_close(int i)
{
	if (R.cl[i] >= 0)
		close(R.cl[i]);
	R.cl[i] = -1;
}

/* The end of a test: the runtime stopped (if the test has not) and
 * joined, the servers freed, what every test checks. */
static void fin(int fds)
{
	if (!atomic_load(&R.stopping))
		stop(0);
	if (R.started)
		H_EQ(pthread_join(R.th, NULL), 0);
	H_EQ(R.new_rc, 0);
	H_EQ(R.launch_rc, 0);
	H_EQ(R.run_rc, 0);
	for (int i = 0; i < NSH; i++) {
		R.sh[i].s = NULL; /* on_free frees here: the shards are gone */
		tl_server_free(R.sh[i].srv);
	}
	for (int i = 0; i < NCLI; i++)
		cli_close(i);
	close(R.port_fd);
	H_EQ(N(opens), N(frees));
	H_EQ(N(fini_left), 0);
	H_EQ(N(fails), 0);
	H_TRUE(N(nev) <= EVN, "%u events, %u kept", N(nev), EVN);
	h_end(NULL, fds);
}

/* Wait (bounded) until cond, from the test's thread. */
#define WAIT(cond) do { \
	uint64_t dl_ = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS; \
	while (!(cond) && h_wall_ns() < dl_) \
		usleep(500); \
	H_TRUE(cond, "waited %d ms for %s", H_WAIT_MS, #cond); \
} while (0)

/* ---- Clients ---- */

/* A growing buffer: requests, or the replies a client expects. */
struct buf {
	char *p;
	size_t n, cap;
};

static void add(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	if (b->cap - b->n < 256) {
		b->cap = b->cap ? 2 * b->cap : 4096;
		b->p = realloc(b->p, b->cap);
		CU_ASSERT_PTR_NOT_NULL_FATAL(b->p);
	}
	va_start(ap, fmt);
	n = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
	va_end(ap);
	H_TRUE_FATAL(n >= 0 && (size_t)n < b->cap - b->n, "add: %d", n);
	b->n += (size_t)n;
}

/* B's and b's reply of n bytes made on shard id. */
static void add_long(struct buf *b, uint32_t id, uint32_t n)
{
	if (b->cap - b->n < (size_t)n + 256) {
		while (b->cap - b->n < (size_t)n + 256)
			b->cap = b->cap ? 2 * b->cap : 4096;
		b->p = realloc(b->p, b->cap);
		CU_ASSERT_PTR_NOT_NULL_FATAL(b->p);
	}
	for (uint32_t i = 0; i < n; i++)
		b->p[b->n++] = long_byte(id, i, n);
}

/* A connected client (slot i of R.cl). */
static int cli_open(int i)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_TRUE_FATAL(fd >= 0, "socket: %d", errno);
	/* Blocking: on loopback the handshake completes in the backlog. */
	H_EQ_FATAL(connect(fd, &R.addr.sa, tl_addr_len(&R.addr)), 0);
	return R.cl[i] = fd;
}

static void cli_send(int fd, const void *p, size_t n)
{
	size_t off = 0;
	while (off < n) {
		ssize_t r = send(fd, (const char *)p + off, n - off, MSG_NOSIGNAL);
		H_TRUE_FATAL(r > 0, "send: %zd, errno %d", r, errno);
		off += (size_t)r;
	}
}

static void cli_says(int fd, const char *s)
{
	cli_send(fd, s, strlen(s));
}

/* Up to n bytes into p within ms: the count (less at the end, a reset, or the time). */
static size_t cli_recv(int fd, char *p, size_t n, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	size_t got = 0;
	while (got < n) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		uint64_t now = h_wall_ns();
		ssize_t r;
		if (now >= dl || poll(&pf, 1, (int)((dl - now) / H_MS) + 1) <= 0)
			break;
		if ((r = recv(fd, p + got, n - got, MSG_DONTWAIT)) <= 0) {
			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				continue;
			break;
		}
		got += (size_t)r;
	}
	return got;
}

/* The client's next bytes are want[0..n): 1, or 0 with a failure saying where they differ. */
static int expect(int fd, const char *want, size_t n)
{
	char *got = malloc(n + 1);
	size_t k = 0, i = 0;
	CU_ASSERT_PTR_NOT_NULL_FATAL(got);
	k = cli_recv(fd, got, n, H_WAIT_MS * 2);
	while (i < k && got[i] == want[i])
		i++;
	H_TRUE(k == n && i == n, "got %zu of %zu bytes, the first difference at %zu: \"%.*s\", wanted \"%.*s\"",
	       k, n, i, (int)(k - i < 40 ? k - i : 40), got + i, (int)(n - i < 40 ? n - i : 40), want + i);
	free(got);
	return k == n && i == n;
}

/* Nothing more comes for ms: 1 (a failure otherwise). */
static int quiet(int fd, int ms)
{
	char b[64];
	size_t k = cli_recv(fd, b, sizeof b, ms);
	H_TRUE(k == 0, "got \"%.*s\", wanted nothing yet", (int)k, b);
	return k == 0;
}

/* The client sees the end (EOF) and no more bytes. */
static void cli_eof(int fd)
{
	char b[64];
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	ssize_t r = -1;
	H_TRUE(poll(&pf, 1, H_WAIT_MS) == 1, "no end in %d ms", H_WAIT_MS);
	if (pf.revents)
		r = recv(fd, b, sizeof b, MSG_DONTWAIT);
	H_TRUE(r == 0, "at the end: %zd (%.*s), errno %d", r, (int)(r > 0 ? r : 0), b, errno);
}

/* The connection's shard, from "L who". */
static uint32_t cli_home(int fd)
{
	char b[6] = {0};
	cli_send(fd, "L who\n", 6);
	H_EQ(cli_recv(fd, b, 6, H_WAIT_MS), 6);
	H_TRUE(b[0] >= '0' && b[0] < '0' + NSH && !memcmp(b + 1, ":who\n", 5), "\"%.6s\"", b);
	return b[0] >= '0' && b[0] < '0' + NSH ? (uint32_t)(b[0] - '0') : 0;
}

/* Reset the connection (SO_LINGER 0): the server's read fails, it closes c at once. */
static void cli_reset(int i)
{
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	H_EQ(setsockopt(R.cl[i], SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
	cli_close(i);
}

/* ---- Tests ---- */

/* 1. A thousand pipelined requests in one write, made here (straight into
 * the writer, or a record), on the other shard, and on this shard over the
 * mesh: every reply, in request order, made where it says; two clients at
 * once; the drain ends the one still open. */
static void order(void)
{
	int fds = begin(NRECS);
	struct buf q[2] = {{0}}, want[2] = {{0}};
	uint32_t home[2], remote = 0;
	if (launch()) {
		for (int c = 0; c < 2; c++)
			home[c] = cli_home(cli_open(c));
		for (int c = 0; c < 2; c++)
			for (uint32_t i = 0; i < 1000; i++) {
				static const char ops[] = "DLRORRDL";
				char op = ops[(h_pattern(i + 7 * c) + i) % 8];
				add(&q[c], "%c w%u.%d\n", op, i, c);
				add(&want[c], "%u:w%u.%d\n", op == 'R' ? 1 - home[c] : home[c], i, c);
				remote += op == 'R' || op == 'O';
			}
		cli_send(R.cl[0], q[0].p, q[0].n);
		cli_send(R.cl[1], q[1].p, q[1].n);
		expect(R.cl[0], want[0].p, want[0].n);
		expect(R.cl[1], want[1].p, want[1].n);
		H_EQ(N(runs), remote);
		H_TRUE(N(directs) > 0, "no reply went straight into the writer");
		H_TRUE(N(backs) > 0 && N(backs) < remote, "%u batches for %u records",
		       N(backs), remote);
		cli_close(0);
		WAIT(N(frees) == 1);
		H_EQ(N(opens), 2);
	}
	stop(1); /* the drain: the open one ends */
	if (R.cl[1] >= 0)
		cli_eof(R.cl[1]);
	fin(fds);
	for (int c = 0; c < 2; c++)
		free(q[c].p), free(want[c].p);
}

/* The blocks (bytes in all) that shard 1 - home made for the replies of
 * a connection on home were freed, on 1 - home: from the shards' last
 * published totals (per-shard arenas), 1 - home holds no more than home
 * (both run the same server) but a quarter of those bytes. Without
 * arenas (sanitizer and valgrind builds) the leak check is theirs. */
static void blocks_freed(uint32_t home, uint64_t bytes)
{
	uint32_t o = 1 - home;
	int64_t held_o = (int64_t)(R.alloc[o] - R.freed[o]), held_h = (int64_t)(R.alloc[home] - R.freed[home]);
	if (!R.arenas || !R.stats_ok) {
		h_skip("per-shard arenas or the stats region off: the blocks' frees are the leak checker's");
		return;
	}
	H_TRUE(R.alloc[o] >= bytes, "shard %u allocated %llu bytes, less than its replies' %llu", o,
	       (unsigned long long)R.alloc[o], (unsigned long long)bytes);
	H_TRUE(held_o < held_h + (int64_t)bytes / 4,
	       "shard %u holds %lld bytes, shard %u %lld: its %llu bytes of replies not freed", o,
	       (long long)held_o, home, (long long)held_h, (unsigned long long)bytes);
}

/* 2. Replies longer than a record's room, made on the other shard (a block
 * of its tl_shard_alloc) and here, up to more than twice the writer's ring
 * (those go in pieces): each
 * whole and right, in order with short ones; each block freed, on the
 * shard that made it: with per-shard arenas the shard that made 1.5 MB of
 * them holds no more than the other. */
static void long_replies(void)
{
	int fds = begin(NRECS);
	struct buf q = {0}, want = {0};
	static const uint32_t sizes[] = {3, 64, 65, 200, 5000, WCAP - 1, WCAP, WCAP + 1, 2 * WCAP + 3000, 4096, 5000};
	uint32_t home = 0, other = 0, n = 0;
	R.stats = 1;
	R.cfg.stats = 1;
	if (launch()) {
		home = cli_home(cli_open(0)), other = 1 - home;
		for (uint32_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			add(&q, "B %u\nL x%u\nb %u\n", sizes[i], i, sizes[i]);
			add_long(&want, other, sizes[i]);
			add(&want, "%u:x%u\n", home, i);
			add_long(&want, home, sizes[i]);
		}
		cli_send(R.cl[0], q.p, q.n);
		expect(R.cl[0], want.p, want.n);
		/* Volume: 300 replies of 5000 bytes made on the other shard. */
		q.n = want.n = 0;
		for (uint32_t i = 0; i < 300; i++) {
			add(&q, "B 5000\n");
			add_long(&want, other, 5000);
			n += 5000;
		}
		cli_send(R.cl[0], q.p, q.n);
		expect(R.cl[0], want.p, want.n);
		cli_close(0);
		WAIT(N(frees) == 1);
		H_EQ(N(fini_owed), 0);
	}
	stop(0);
	fin(fds);
	blocks_freed(home, n);
	free(q.p), free(want.p);
}

/* 3. Records with no bytes (a sum's parts, made here and on the other
 * shard) go through cfg.out in their turn: each sum said by its last
 * part, in order with the replies around it. */
static void out_hook(void)
{
	int fds = begin(NRECS);
	if (launch()) {
		uint32_t home = cli_home(cli_open(0)), o = 1 - home;
		char want[256];
		cli_says(R.cl[0], "L a\nS 1\nS 2\ns 3\nE 4\nL b\nS 10\nR c\nE 20\ns 5\nS 6\nE 4\nD d\n");
		snprintf(want, sizeof want, "%u:a\n=10\n%u:b\n%u:c\n=30\n=15\n%u:d\n", home, home, o, home);
		expect(R.cl[0], want, strlen(want));
		H_EQ(N(outs), 9); /* one per part, none for a reply with bytes */
		H_EQ(N(out_errs), 0);
		cli_close(0);
		WAIT(N(frees) == 1);
	}
	fin(fds);
}

/* 4. A ring of 4 records and 200 pipelined requests: tl_replies_add says
 * wait, the host stops, and goes on at the next on_ready; every reply
 * right, in order. */
static void ring_full(void)
{
	int fds = begin(4);
	struct buf q = {0}, want = {0};
	if (launch()) {
		uint32_t home = cli_home(cli_open(0));
		for (uint32_t i = 0; i < 200; i++) {
			char op = i % 5 == 4 ? 'L' : i % 7 == 3 ? 'S' : 'R';
			add(&q, "%c %u\n", op, i);
			if (op == 'S')
				add(&q, "E 1\n"), add(&want, "=%u\n", i + 1);
			else
				add(&want, "%u:%u\n", op == 'R' ? 1 - home : home, i);
		}
		cli_send(R.cl[0], q.p, q.n);
		expect(R.cl[0], want.p, want.n);
		H_TRUE(N(ring_full) > 0, "the ring of 4 was never full");
		cli_close(0);
		WAIT(N(frees) == 1);
	}
	fin(fds);
	free(q.p), free(want.p);
}

/* 5. A record sent with keep reads its word in the reader's view on the
 * other shard: tl_replies_kept is 1 until its batch is back, and the host
 * neither peeks nor consumes meanwhile, though more bytes came. */
static void keep(void)
{
	int fds = begin(NRECS);
	if (launch()) {
		uint32_t home = cli_home(cli_open(0));
		char want[128];
		cli_says(R.cl[0], "K kept-word-0123456789\n");
		WAIT(N(gated) == 1);
		H_EQ(N(kept_sent), 1);
		cli_says(R.cl[0], "L after\n"); /* on_ready while kept: nothing read */
		WAIT(N(ready_kept) >= 1);
		quiet(R.cl[0], 20);
		atomic_store(&R.gate, 1);
		snprintf(want, sizeof want, "%u:kept-word-0123456789\n%u:after\n", 1 - home, home);
		expect(R.cl[0], want, strlen(want));
		H_EQ(atomic_load(&R.kept_bad), 0);
		cli_close(0);
		WAIT(N(frees) == 1);
	}
	fin(fds);
}

/* 6. Clients gone while their records are away on the other shard: one
 * resets (the server closes it at once), its slot freed only once the
 * batch is back, and nothing written to it; one half-closes, and still
 * gets its replies, then the end. */
static void gone(void)
{
	int fds = begin(NRECS);
	if (launch()) {
		uint32_t home = cli_home(cli_open(0));
		cli_says(R.cl[0], "Z a\nL b\nZ c\n");
		WAIT(N(gated) == 1);
		cli_reset(0);
		WAIT(N(closeds) == 1);
		usleep(20000);
		H_EQ(N(frees), 0); /* closed, but its records are away */
		H_EQ(N(backs), 0);
		atomic_store(&R.gate, 1);
		WAIT(N(frees) == 1);
		H_EQ(N(frees_in_rt), 1);
		/* The half-closed one: its replies, then the end. */
		atomic_store(&R.gate, 0);
		home = cli_home(cli_open(1));
		cli_says(R.cl[1], "Z d\nL e\n");
		H_EQ(shutdown(R.cl[1], SHUT_WR), 0);
		WAIT(N(gated) == 3);
		quiet(R.cl[1], 20);
		atomic_store(&R.gate, 1);
		char want[64];
		snprintf(want, sizeof want, "%u:d\n%u:e\n", 1 - home, home);
		expect(R.cl[1], want, strlen(want));
		cli_eof(R.cl[1]);
		WAIT(N(frees) == 2);
	}
	stop(0);
	fin(fds);
	/* Connection 1: closed, then its batch back, then freed. */
	ev_order(1, EV_CLOSED, EV_BACK);
	ev_order(1, EV_BACK, EV_FREE);
	ev_order(2, EV_BACK, EV_FREE);
}

/* 7. A reply made later by the host (tl_replies_wait, then
 * tl_replies_made in the result's handler of a call to the other shard):
 * the replies made here after it wait for it, and tl_replies_made's
 * tl_conn_ready sends them on. */
static void wait_made(void)
{
	int fds = begin(NRECS);
	if (launch()) {
		uint32_t home = cli_home(cli_open(0)), o = 1 - home;
		char want[128];
		cli_says(R.cl[0], "W w1\nL x\nD y\nb 100\nW w2\nD z\n");
		snprintf(want, sizeof want, "%u:w1\n%u:x\n%u:y\n", o, home, home);
		expect(R.cl[0], want, strlen(want));
		struct buf b = {0};
		add_long(&b, home, 100);
		add(&b, "%u:w2\n%u:z\n", o, home);
		expect(R.cl[0], b.p, b.n);
		free(b.p);
		H_EQ(N(mades), 2);
		H_EQ(N(backs), 0);
		cli_close(0);
		WAIT(N(frees) == 1);
	}
	fin(fds);
	ev_order(1, EV_MADE, EV_FREE);
}

/* 8. A record whose batch the stop refused: its only credit to the other
 * shard taken by a call never answered, the batch waits; at the stop it
 * completes with -EPIPE and the record gets result -EPIPE, done, no bytes
 * (the connection is closed by then: cfg.out never sees it); on a queue
 * of a dummy connection, tl_replies_send after the mesh closed returns
 * -EPIPE and cfg.out says so. */
static void refused(void)
{
	int fds = begin(NRECS);
	R.cfg.mesh_inflight = 1;
	R.cfg.drain_ns = 300000000ull; /* the plug is never answered: the stop waits this long for it */
	if (launch()) {
		uint32_t home = cli_home(cli_open(0));
		char want[32];
		cli_says(R.cl[0], "P plug\nR b\n");
		snprintf(want, sizeof want, "%u:plug\n", home);
		expect(R.cl[0], want, strlen(want));
		WAIT(N(sends) == 1);
		quiet(R.cl[0], 50); /* R b waits for a credit */
		H_EQ(N(backs), 0);
	}
	stop(0);
	fin(fds);
	H_EQ(N(epipe_backs), 1);
	H_EQ(N(runs), 0); /* b never ran (the plug's call is no record) */
	H_EQ(N(frees_in_rt), 1);  /* freed at the -EPIPE completion */
	H_EQ(N(fini_epipe), 1);   /* b: done, -EPIPE, owed at on_free */
	H_EQ(R.dummy_epipe, 1);
	ev_order(1, EV_BACK, EV_FREE);
	if (N(out_errs) == 1)
		printf("\n  (the refused record reached no cfg.out: its connection was closed by the stop first)\n");
}

/* 9's shard: tl_replies_init's refusals, a queue of a dummy connection at
 * work, and tl_replies_completion on what is not a queue's. */
static int64_t other_batch(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	return 5;
}

static int64_t plain_call(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	return 6;
}

static int args_launch(tl_shard *s, void *arg)
{
	static uint8_t wmem[512];
	struct args *a = &R.a;
	struct rec recs[4];
	tl_reply *big, *r, *r2;
	tl_mesh_chain ch[NSH];
	tl_replies q;
	tl_conn d;
	int64_t sum = 0;
	tl_replies_config good = {recs, 4, sizeof *recs, ch, NSH, run, out, OUT_MAX, &sum}, b;
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	big = calloc(1u << 16, sizeof *big);
	memset(&d, 0, sizeof d);
	memset(recs, 0, sizeof recs);
	d.closed = 1; /* tl_conn_ready: nothing */
	SH_CHECK(tl_wbuf_init(&d.wr, tl_shard_loop(s), (tl_handle){1}, wmem, sizeof wmem, 0) == 0);
	for (int i = 0; i < 17; i++) {
		b = good;
		switch (i) {
		case 4: b.recs = NULL; break;
		case 5: b.chains = NULL; break;
		case 6: b.run = NULL; break;
		case 7: b.nrecs = 0; break;
		case 8: b.nrecs = 3; break;
		case 9: b.nrecs = 6; break;
		case 10: b.nrecs = 1u << 17; break;
		case 11: b.nrecs = (1u << 16) + 1; break;
		case 12: b.rec_size = sizeof(tl_reply) - 1; break;
		case 13: b.rec_size = 0; break;
		case 14: b.nchains = 0; break;
		case 15: b.nrecs = UINT32_MAX; break;
		case 16: b.rec_size = sizeof(tl_reply) + 1; break; /* misaligned records */
		}
		a->init_rc[i] = tl_replies_init(i == 0 ? NULL : &q, i == 1 ? NULL : &d, i == 2 ? NULL : s,
						i == 3 ? NULL : &b);
	}
	/* The edges that are fine: 1 and 2^16 records, records of sizeof(tl_reply), no out. */
	b = good, b.nrecs = 1;
	a->good_rc[0] = tl_replies_init(&q, &d, s, &b);
	b = good, b.recs = big, b.nrecs = 1u << 16, b.rec_size = sizeof(tl_reply);
	a->good_rc[1] = big ? tl_replies_init(&q, &d, s, &b) : -ENOMEM;
	b = good, b.out = NULL, b.out_max = 0;
	a->good_rc[2] = tl_replies_init(&q, &d, s, &b);
	a->good_rc[3] = tl_replies_init(&q, &d, s, &good);
	free(big);
	/* The queue at work, on the dummy: nothing owed, a record, the ring full. */
	a->direct_ok = tl_replies_direct(&q, 100) && !tl_replies_direct(&q, sizeof wmem + 1) && !tl_replies_owed(&q);
	r = tl_replies_add(&q);
	a->new_ok = r == &recs[0].r && r->done && r->q == &q && tl_replies_owed(&q) && !tl_replies_direct(&q, 1);
	/* A target out of range: -EINVAL, the record done, nothing held. */
	a->bad_send_rc = tl_replies_send(&q, r, NSH + 3, 0);
	a->bad_send_result = (int)r->result;
	a->bad_send_done = r->done;
	a->bad_send_away = (int)(q.away + q.kept + d.refs_);
	r->result = 0;
	a->buf_inline = tl_reply_buf(s, r, TL_REPLY_INLINE) == r->out && r->len == TL_REPLY_INLINE;
	memset(r->out, 'i', TL_REPLY_INLINE);
	for (int i = 0; i < 3; i++)
		SH_CHECK(tl_replies_add(&q) != NULL);
	a->full_null = tl_replies_add(&q) == NULL;
	r2 = &recs[1].r;
	a->buf_block = tl_reply_buf(s, r2, TL_REPLY_INLINE + 1) != r2->out && r2->data != NULL &&
		       r2->len == TL_REPLY_INLINE + 1;
	if (r2->data)
		memset(r2->data, 'k', TL_REPLY_INLINE + 1);
	recs[2].r.flags = F_SUM | F_EMIT, recs[2].r.result = 7; /* no bytes: out says "=7" */
	say_word(s, &recs[3].r, 9, (const uint8_t *)"z", 1);
	a->flush_rc = tl_replies_flush(&q);
	a->flush_bytes = tl_wbuf_pending(&d.wr) == 64 + 65 + 3 + 4 && !memcmp(wmem + 129, "=7\n9:z\n", 7) &&
			 wmem[0] == 'i' && wmem[63] == 'i' && wmem[64] == 'k' && wmem[128] == 'k';
	a->flush_freed = r->data == NULL && r2->data == NULL && !tl_replies_owed(&q);
	/* tl_replies_fini: a block owed, freed; NULL, nothing. */
	r = tl_replies_add(&q);
	a->fini_ok = r && tl_reply_buf(s, r, 1000) != NULL;
	tl_replies_fini(&q, s);
	a->fini_ok &= r && r->data == NULL && !tl_replies_owed(&q);
	tl_replies_fini(NULL, s);
	tl_wbuf_fini(&d.wr);
	/* tl_replies_completion on what is not a queue's. */
	tl_completion z;
	R.fake_c.closed = 1;
	R.fake_q.c = &R.fake_c;
	R.fake.q = R.fake_item.q = &R.fake_q;
	memset(&z, 0, sizeof z);
	a->compl_null = tl_replies_completion(NULL);
	z.kind = TL_K_TIMER, z.token = TL_REPLIES_TOKEN, z.aux = TL_MESH_RESULT | TL_MESH_BATCH, z.u.mesh.arg = &R.fake;
	a->compl_kind = tl_replies_completion(&z);
	z.kind = TL_K_MESH, z.u.mesh.arg = NULL;
	a->compl_noarg = tl_replies_completion(&z);
	/* And real ones: a batch of another batcher, a call with the queues' token. */
	SH_CHECK(tl_mesh_batcher_init(&R.ob, R.och, NSH, other_batch, 0x77) == 0);
	SH_CHECK(tl_shard_batch_add(s, &R.ob, 1, &R.fake_item.link) == 0);
	SH_CHECK(tl_shard_submit_to(s, 1, plain_call, &R.fake, TL_REPLIES_TOKEN) == 0);
	return 0;
}

static void args_completion(tl_shard *s, const tl_completion *x)
{
	struct args *a = &R.a;
	SH_CHECK(tl_shard_id(s) == 0 && x->kind == TL_K_MESH);
	if (x->aux & TL_MESH_BATCH) {
		SH_CHECK(x->token == 0x77 && x->result == 5 && x->u.mesh.arg == &R.fake_item.link);
		a->compl_other = tl_replies_completion(x);
		a->other_seen = 1;
	} else {
		SH_CHECK(x->token == TL_REPLIES_TOKEN && x->result == 6 && x->u.mesh.arg == &R.fake);
		a->compl_nobatch = tl_replies_completion(x);
		a->plain_seen = 1;
	}
	if (a->other_seen && a->plain_seen)
		tl_runtime_stop(tl_shard_runtime(s));
}

/* 9. tl_replies_init refuses each bad argument; the edges pass; a queue at
 * work on a dummy connection (tl_replies_add, tl_reply_buf, the ring
 * full, a target out of range, tl_replies_flush, tl_replies_fini);
 * tl_replies_completion takes nothing but a queue's batch. */
static void arguments(void)
{
	int fds = begin(NRECS);
	struct args *a = &R.a;
	R.cfg.on_launch = args_launch;
	R.cfg.on_completion = args_completion;
	R.cfg.on_pass = NULL;
	R.cfg.on_drain = NULL;
	H_EQ_FATAL(pthread_create(&R.th, NULL, runner, NULL), 0);
	R.started = 1;
	atomic_store(&R.stopping, 1); /* it stops itself */
	H_EQ(pthread_join(R.th, NULL), 0);
	R.started = 0;
	for (int i = 0; i < 17; i++)
		H_TRUE(a->init_rc[i] == -EINVAL, "tl_replies_init's case %d: %d%s", i, a->init_rc[i],
		       h_errname(a->init_rc[i]));
	for (int i = 0; i < 4; i++)
		H_TRUE(a->good_rc[i] == 0, "tl_replies_init's good case %d: %d%s", i, a->good_rc[i],
		       h_errname(a->good_rc[i]));
	H_EQ(a->direct_ok, 1);
	H_EQ(a->new_ok, 1);
	H_EQ(a->bad_send_rc, -EINVAL);
	H_EQ(a->bad_send_result, -EINVAL);
	H_EQ(a->bad_send_done, 1);
	H_EQ(a->bad_send_away, 0);
	H_EQ(a->full_null, 1);
	H_EQ(a->buf_inline, 1);
	H_EQ(a->buf_block, 1);
	H_EQ(a->flush_rc, 1);
	H_EQ(a->flush_bytes, 1);
	H_EQ(a->flush_freed, 1);
	H_EQ(a->fini_ok, 1);
	H_EQ(a->compl_null, 0);
	H_EQ(a->compl_kind, 0);
	H_EQ(a->compl_noarg, 0);
	H_EQ(a->other_seen, 1);
	H_EQ(a->compl_other, 0);
	H_EQ(a->plain_seen, 1);
	H_EQ(a->compl_nobatch, 0);
	fin(fds);
}

/* 10. A client gone at once after requests whose long replies are made on
 * the other shard (and one made here, owed behind them): the records come
 * back to a closed connection, and tl_replies_fini in its on_free frees
 * every block never written, on the shard that made it. */
static void fini_blocks(void)
{
	int fds = begin(NRECS);
	struct buf q = {0};
	uint32_t home = 0, n = 0;
	R.stats = 1;
	R.cfg.stats = 1;
	if (launch()) {
		home = cli_home(cli_open(0));
		add(&q, "Z a\nB 70\nb 3000\n");
		for (uint32_t i = 0; i < 40; i++)
			add(&q, "B %u\n", WCAP - i), n += WCAP - i;
		add(&q, "L c\n");
		cli_send(R.cl[0], q.p, q.n);
		WAIT(N(gated) == 1 && N(sends) == 42);
		cli_reset(0);
		WAIT(N(closeds) == 1);
		atomic_store(&R.gate, 1);
		WAIT(N(frees) == 1);
		H_EQ(N(fini_owed), 44);
		H_EQ(N(fini_blocks), 42); /* B 70, b 3000 and the 40 of B */
		H_EQ(N(frees_in_rt), 1);
	}
	fin(fds);
	ev_order(1, EV_CLOSED, EV_BACK);
	ev_order(1, EV_BACK, EV_FREE);
	blocks_freed(home, n);
	free(q.p);
}

static const h_test tests[] = {
#define T(s, f) {s, #f, f}
	T("replies", order), T("replies", long_replies), T("replies", out_hook), T("replies", ring_full),
	T("replies", keep), T("replies", gone), T("replies", wait_made), T("replies", refused),
	T("replies", arguments), T("replies", fini_blocks),
#undef T
	{NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
	return h_main_table(argc, argv, "replies", tests);
}
