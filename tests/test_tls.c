/* tests/test_tls.c: the TLS layer (turnloop/tls.h) on every driver: our server and client against each other, and on drivers with OS sockets against openssl s_client and s_server and curl. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <strings.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turnloop/loop.h>
#include <turnloop/pool.h>
#include <turnloop/tls.h>
#include <CUnit/Basic.h>
#include "harness.h"

/*
 * Usage: test_tls CERTS_SCRIPT [FILTER...]  (TL_DRIVER picks the driver)
 *
 * The certificates are made at start by CERTS_SCRIPT (tests/tls-certs.sh)
 * in a temporary folder that is removed at exit. Each test runs one loop
 * with one TLS context; sessions of ours talk to each other through the
 * driver's own streams, or (drivers with TL_CAP_OS) to openssl and curl
 * started on loopback and stopped by pid. On the simulation driver the
 * real-peer tests record a skip (its streams reach no other process), and
 * every other test runs in its virtual time.
 *
 * Every test ends by closing what it opened, checking that the context
 * holds no session, no buffer and no lease, and that the loop closes with
 * the process's descriptors back where they were.
 */

#define TAG 0x7e
static char certs[512];
static int have_os;

static void cert(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", certs, name);
}

/* ---- a loop with a TLS context, and logs of both kinds of completion ---- */

struct tlog {
	tl_completion *v;
	uint32_t n, cap;
};

struct tt {
	tl_loop *loop;
	tl_tls_ctx *x;
	struct tlog tls;  /* the layer's completions */
	struct tlog loop_log; /* the loop's completions that are not the layer's */
	struct tt *sib;   /* another context on the same loop (a second shard's) */
	int used_pool;    /* the loop submitted to the blocking pool */
	struct rd *rds[8]; /* readers scanned at every turn (their leases go back) */
	int nrd;
	struct echo *echos[4]; /* echo servers run at every turn */
	int necho;
};

struct rd;
struct echo;
static void rd_scan(struct tt *t, struct rd *r);
static void echo_scan(struct tt *t, struct echo *e);

static void log_add(struct tlog *l, const tl_completion *c)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 256;
		l->v = realloc(l->v, l->cap * sizeof *l->v);
		if (!l->v)
			abort();
	}
	l->v[l->n++] = *c;
}

static struct tt *turning;

static void tt_init_cc(struct tt *t, tl_loop *loop, const tl_tls_ctx_config *cc)
{
	memset(t, 0, sizeof *t);
	t->loop = loop;
	H_EQ_FATAL(tl_tls_ctx_new(loop, cc, &t->x), 0);
	turning = t;
}

static void tt_init(struct tt *t, tl_loop *loop)
{
	tl_tls_ctx_config cc;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TAG;
	tt_init_cc(t, loop, &cc);
}

/* One turn: loop completions to the layer (or the log), then the layer's. */
static int tt_turn(struct tt *t, int64_t timeout_ns)
{
	tl_completion out[128];
	int busy = tl_tls_pending(t->x) || (t->sib && tl_tls_pending(t->sib->x));
	int n = tl_turn(t->loop, busy ? 0 : timeout_ns, out, 128, NULL);
	if (n < 0 && n != -EINTR) {
		H_EQ(n, 0);
		return n;
	}
	for (int i = 0; i < n; i++)
		if (!tl_tls_complete(t->x, &out[i]) && !(t->sib && tl_tls_complete(t->sib->x, &out[i])))
			log_add(&t->loop_log, &out[i]);
	int m;
	while ((m = tl_tls_poll(t->x, out, 128)) > 0)
		for (int i = 0; i < m; i++)
			log_add(&t->tls, &out[i]);
	while (t->sib && (m = tl_tls_poll(t->sib->x, out, 128)) > 0)
		for (int i = 0; i < m; i++)
			log_add(&t->sib->tls, &out[i]);
	for (int i = 0; i < t->nrd; i++)
		rd_scan(t, t->rds[i]);
	for (int i = 0; i < t->necho; i++)
		echo_scan(t, t->echos[i]);
	return n;
}

typedef int (*pred_fn)(struct tt *t, void *arg);

static int tt_until(struct tt *t, pred_fn p, void *arg, int ms)
{
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	while (!p(t, arg)) {
		if (h_wall_ns() >= dl)
			return 0;
		tt_turn(t, 5 * (int64_t)H_MS);
	}
	return 1;
}

static int find_term(const struct tlog *l, tl_op op, uint32_t from)
{
	for (uint32_t i = from; i < l->n; i++)
		if (l->v[i].op.v == op.v && (l->v[i].flags & TL_F_TERMINAL))
			return (int)i;
	return -1;
}

struct opw {
	tl_op op;
	int loop; /* a loop op: in loop_log */
};

static int pred_op(struct tt *t, void *arg)
{
	struct opw *w = arg;
	return find_term(w->loop ? &t->loop_log : &t->tls, w->op, 0) >= 0;
}

/* The terminal of a TLS op (its index in t->tls), or -1 after ms (failing). */
static int wait_tls(struct tt *t, tl_op op, int ms)
{
	struct opw w = {op, 0};
	if (!tt_until(t, pred_op, &w, ms)) {
		H_TRUE(0, "TLS op %#llx did not end in %d ms", (unsigned long long)op.v, ms);
		return -1;
	}
	return find_term(&t->tls, op, 0);
}

static int wait_loop_op(struct tt *t, tl_op op, int ms)
{
	struct opw w = {op, 1};
	if (!tt_until(t, pred_op, &w, ms)) {
		H_TRUE(0, "loop op did not end in %d ms", ms);
		return -1;
	}
	return find_term(&t->loop_log, op, 0);
}

struct closedw {
	uint64_t v;
};

static int pred_closed(struct tt *t, void *arg)
{
	struct closedw *w = arg;
	for (uint32_t i = 0; i < t->tls.n; i++)
		if (t->tls.v[i].kind == TL_K_CLOSED && t->tls.v[i].handle.v == w->v)
			return 1;
	return 0;
}

/* Close a session (flags), wait for its Closed: 0 or -1. */
static int close_wait(struct tt *t, tl_tls_id id, uint32_t flags)
{
	struct closedw w = {id.v};
	H_EQ(tl_tls_close(t->x, id, flags, 0), 0);
	if (!tt_until(t, pred_closed, &w, H_WAIT_MS)) {
		H_TRUE(0, "session did not close");
		return -1;
	}
	return 0;
}

/* Give back every plaintext lease of the log that is still held. */
static void release_all(struct tt *t, uint32_t from)
{
	for (uint32_t i = from; i < t->tls.n; i++) {
		tl_completion *c = &t->tls.v[i];
		if (c->kind == TL_K_READ && (c->flags & TL_F_LEASE) && c->u.read.lease.data) {
			tl_tls_lease_release(t->x, c->u.read.lease.id);
			c->u.read.lease.data = NULL;
		}
	}
}

/* End a test's context: nothing held, nothing open; the loop drained. */
static void tt_fini(struct tt *t, int fds0)
{
	tl_tls_stats st;
	t->nrd = t->necho = 0;
	turning = NULL;
	release_all(t, 0);
	for (int i = 0; i < 50 && tl_tls_pending(t->x); i++)
		tt_turn(t, 0);
	tl_tls_stats_get(t->x, &st);
	H_EQ(st.sessions, 0);
	H_EQ(st.plain_held, 0);
	H_EQ(st.out_busy, 0);
	H_EQ(tl_tls_pending(t->x), 0);
	h_drain_close(t->loop);
	/* A pool worker lets go of the loop's result port (and with it the
	 * loop's wake-up descriptor) just after it posted its result: that
	 * descriptor may outlive the loop by a moment. */
	for (int k = 0; t->used_pool && k < 400 && h_fd_count() != fds0; k++)
		h_sleep_ms(5);
	tl_tls_ctx_destroy(t->x);
	free(t->tls.v);
	free(t->loop_log.v);
	h_end(NULL, fds0);
}

/* ---- configs ---- */

struct srv_opts {
	const char *cert, *key;   /* default server.pem */
	const char *ocsp;         /* a staple for the first certificate */
	const char *cert2, *key2; /* a second certificate (SNI) */
	int verify;
	const char *alpn;
	uint16_t minv, maxv;
	uint32_t flags;
	const uint8_t *ticket_key;
	const char *ciphers;
};

static tl_tls_config *server_config(const struct srv_opts *o)
{
	char c1[600], k1[600], c2[600], k2[600], ca[600];
	tl_tls_cert cs[2] = {{0}};
	tl_tls_settings s = {0};
	tl_tls_config *cfg = NULL;
	char err[256];

	cert(c1, sizeof c1, o && o->cert ? o->cert : "server.pem");
	cert(k1, sizeof k1, o && o->key ? o->key : "server.key");
	cert(ca, sizeof ca, "ca.pem");
	cs[0].cert_file = c1;
	cs[0].key_file = k1;
	char oc[600];
	if (o && o->ocsp) {
		cert(oc, sizeof oc, o->ocsp);
		cs[0].ocsp_file = oc;
	}
	s.role = TL_TLS_SERVER;
	s.certs = cs;
	s.ncerts = 1;
	if (o && o->cert2) {
		cert(c2, sizeof c2, o->cert2);
		cert(k2, sizeof k2, o->key2);
		cs[1].cert_file = c2;
		cs[1].key_file = k2;
		s.ncerts = 2;
	}
	if (o && o->verify) {
		s.verify = o->verify;
		s.ca_file = ca;
	}
	if (o) {
		s.alpn = o->alpn;
		s.min_version = o->minv;
		s.max_version = o->maxv;
		s.flags = o->flags;
		s.ticket_key = o->ticket_key;
		s.ciphers = o->ciphers;
	}
	int rc = tl_tls_config_new(&s, &cfg, err, sizeof err);
	if (rc)
		fprintf(stderr, "  server config: %s\n", err);
	H_EQ_FATAL(rc, 0);
	return cfg;
}

struct cli_opts {
	const char *cert, *key; /* a client certificate */
	int verify;             /* default REQUIRE against ca.pem */
	const char *alpn;
	uint16_t minv, maxv;
	const char *ca;         /* default ca.pem */
};

static tl_tls_config *client_config(const struct cli_opts *o)
{
	char c1[600], k1[600], ca[600];
	tl_tls_cert cs = {0};
	tl_tls_settings s = {0};
	tl_tls_config *cfg = NULL;
	char err[256];

	cert(ca, sizeof ca, o && o->ca ? o->ca : "ca.pem");
	s.role = TL_TLS_CLIENT;
	s.ca_file = ca;
	s.flags = TL_TLS_NO_SYSTEM_CA;
	if (o && o->cert) {
		cert(c1, sizeof c1, o->cert);
		cert(k1, sizeof k1, o->key);
		cs.cert_file = c1;
		cs.key_file = k1;
		s.certs = &cs;
		s.ncerts = 1;
	}
	if (o) {
		s.verify = o->verify;
		s.alpn = o->alpn;
		s.min_version = o->minv;
		s.max_version = o->maxv;
	}
	int rc = tl_tls_config_new(&s, &cfg, err, sizeof err);
	if (rc)
		fprintf(stderr, "  client config: %s\n", err);
	H_EQ_FATAL(rc, 0);
	return cfg;
}

/* ---- streams ---- */

/* A listener on 127.0.0.1, port chosen by the kernel (or the simulation). */
static tl_handle listen_any(struct tt *t, uint16_t *port)
{
	tl_addr a;
	tl_handle lh;
	tl_addr_parse(&a, "127.0.0.1", 0);
	H_EQ_FATAL(tl_tcp_listen(t->loop, &a, NULL, &lh), 0);
	tl_addr b;
	H_EQ_FATAL(tl_local_addr(t->loop, lh, &b), 0);
	*port = ntohs(b.in.sin_port);
	return lh;
}

static int pred_accept(struct tt *t, void *arg)
{
	uint32_t *from = arg;
	for (uint32_t i = *from; i < t->loop_log.n; i++)
		if (t->loop_log.v[i].kind == TL_K_ACCEPT && t->loop_log.v[i].result == 0)
			return 1;
	return 0;
}

/* Accept one connection on lh: its handle (TL_HANDLE_NONE on failure). */
static tl_handle accept_one(struct tt *t, tl_handle lh, int ms)
{
	tl_op op;
	uint32_t from = t->loop_log.n;
	H_EQ(tl_accept(t->loop, lh, 1, &op), 0);
	if (!tt_until(t, pred_accept, &from, ms)) {
		H_TRUE(0, "no connection accepted in %d ms", ms);
		tl_cancel(t->loop, op);
		wait_loop_op(t, op, H_WAIT_MS);
		return TL_HANDLE_NONE;
	}
	for (uint32_t i = from; i < t->loop_log.n; i++)
		if (t->loop_log.v[i].kind == TL_K_ACCEPT && t->loop_log.v[i].result == 0)
			return t->loop_log.v[i].u.accept.conn;
	return TL_HANDLE_NONE;
}

/* A connected pair on one loop: *srv accepted, *cli connected. */
static void pair(struct tt *t, tl_handle *srv, tl_handle *cli)
{
	uint16_t port;
	tl_handle lh = listen_any(t, &port);
	tl_addr a;
	tl_op op;
	tl_addr_parse(&a, "127.0.0.1", port);
	H_EQ_FATAL(tl_tcp_connect(t->loop, &a, 0, 2, cli, &op), 0);
	*srv = accept_one(t, lh, H_WAIT_MS);
	int i = wait_loop_op(t, op, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0 && t->loop_log.v[i].result == 0, "connect failed");
	H_TRUE_FATAL(srv->v != 0, "accept failed");
	tl_close(t->loop, lh, 3);
}

/* ---- sessions of ours on both ends ---- */

struct duo {
	tl_tls_id s, c;     /* server and client sessions */
	int hs_s, hs_c;     /* handshake results */
	tl_tls_info is, ic; /* their infos after the handshake */
};

/* Connect, start both sessions (client options co) and run both
 * handshakes to their end (deadline 0). */
static void duo_start(struct tt *t, struct tt *tc, tl_tls_config *scfg, tl_tls_config *ccfg,
		      const tl_tls_client_opts *co, struct duo *d)
{
	tl_handle hs, hc;
	tl_op os, oc;
	pair(t, &hs, &hc);
	H_EQ_FATAL(tl_tls_server(t->x, scfg, hs, 10, &d->s), 0);
	H_EQ_FATAL(tl_tls_client(tc->x, ccfg, hc, co, 11, &d->c), 0);
	H_EQ_FATAL(tl_tls_handshake(t->x, d->s, 0, 20, &os), 0);
	H_EQ_FATAL(tl_tls_handshake(tc->x, d->c, 0, 21, &oc), 0);
	int is = wait_tls(t, os, H_WAIT_MS * 2);
	int ic = tc == t ? wait_tls(t, oc, H_WAIT_MS * 2) : wait_tls(tc, oc, H_WAIT_MS * 2);
	d->hs_s = is >= 0 ? (int)t->tls.v[is].result : -9999;
	d->hs_c = ic >= 0 ? (int)tc->tls.v[ic].result : -9999;
	if (is >= 0)
		H_EQ(t->tls.v[is].kind, TL_K_TLS_HANDSHAKE);
	tl_tls_info_get(t->x, d->s, &d->is);
	tl_tls_info_get(tc->x, d->c, &d->ic);
}

/* ---- moving data ---- */

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}
#define FNV0 0xcbf29ce484222325ull

/* A reader that collects what a session's read delivers. */
struct rd {
	tl_op op;
	uint64_t bytes, hash;
	uint32_t from;    /* log index scanned up to */
	int64_t end;      /* terminal result, or 1 while running */
	uint16_t end_flags;
	uint8_t *keep;    /* the bytes themselves, when wanted */
	size_t keep_cap;
	int hold;         /* keep leases instead of giving them back */
};

static void rd_start(struct tt *t, tl_tls_id id, struct rd *r)
{
	uint64_t hash = FNV0;
	uint8_t *keep = r->keep;
	size_t cap = r->keep_cap;
	int hold = r->hold;
	memset(r, 0, sizeof *r);
	r->hash = hash;
	r->keep = keep;
	r->keep_cap = cap;
	r->hold = hold;
	r->end = 1;
	r->from = t->tls.n;
	H_EQ(tl_tls_read_start(t->x, id, 30, &r->op), 0);
	int known = 0;
	for (int i = 0; i < t->nrd; i++)
		known |= t->rds[i] == r;
	if (!known && t->nrd < 8)
		t->rds[t->nrd++] = r;
}

static void rd_scan(struct tt *t, struct rd *r)
{
	for (; r->from < t->tls.n; r->from++) {
		tl_completion *c = &t->tls.v[r->from];
		if (c->op.v != r->op.v)
			continue;
		if (c->kind == TL_K_READ && c->result > 0 && (c->flags & TL_F_LEASE)) {
			if (r->keep && r->bytes + (uint64_t)c->result <= r->keep_cap)
				memcpy(r->keep + r->bytes, c->u.read.lease.data, (size_t)c->result);
			r->hash = fnv(r->hash, c->u.read.lease.data, (size_t)c->result);
			r->bytes += (uint64_t)c->result;
			if (!r->hold) {
				H_EQ(tl_tls_lease_release(t->x, c->u.read.lease.id), 0);
				c->u.read.lease.data = NULL;
			}
		}
		if (c->flags & TL_F_TERMINAL) {
			r->end = c->result;
			r->end_flags = c->flags;
		}
	}
}

struct rdw {
	struct rd *r;
	uint64_t bytes;
};

static int pred_rd(struct tt *t, void *arg)
{
	struct rdw *w = arg;
	rd_scan(t, w->r);
	return w->r->end != 1 || (w->bytes && w->r->bytes >= w->bytes);
}

/* Turn until r has bytes (0: until its terminal). */
static int rd_wait(struct tt *t, struct rd *r, uint64_t bytes, int ms)
{
	struct rdw w = {r, bytes};
	return tt_until(t, pred_rd, &w, ms);
}

static uint8_t *pattern(size_t n, uint64_t seed)
{
	uint8_t *p = malloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = h_pattern(i + seed);
	return p;
}

/* ---- real peers ---- */

struct peer {
	pid_t pid;
	int in;            /* its stdin (a pipe), or -1 */
	char out[600];     /* its stdout and stderr */
};

/* Start argv with stdin a pipe (in_file NULL) or in_file, stdout and
 * stderr into a file of the certs folder. 0 or -1. */
static int peer_start2(struct peer *p, char *const argv[], const char *in_file, const char *tag,
		       int own_err)
{
	posix_spawn_file_actions_t fa;
	int pfd[2] = {-1, -1};
	static int seq;

	snprintf(p->out, sizeof p->out, "%s/peer-%s-%d.out", certs, tag, seq++);
	p->in = -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addchdir_np(&fa, certs); /* s_server -WWW serves files from there */
	if (in_file) {
		posix_spawn_file_actions_addopen(&fa, 0, in_file, O_RDONLY, 0);
	} else {
		if (pipe2(pfd, O_CLOEXEC) < 0)
			return -1;
		posix_spawn_file_actions_adddup2(&fa, pfd[0], 0);
	}
	posix_spawn_file_actions_addopen(&fa, 1, p->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (own_err) {
		char e[620];
		snprintf(e, sizeof e, "%s.err", p->out);
		posix_spawn_file_actions_addopen(&fa, 2, e, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	} else {
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	}
	extern char **environ;
	int rc = posix_spawnp(&p->pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (rc != 0) {
		if (pfd[1] >= 0)
			close(pfd[1]);
		fprintf(stderr, "  cannot start %s: %s\n", argv[0], strerror(rc));
		return -1;
	}
	p->in = pfd[1];
	return 0;
}

static int peer_start(struct peer *p, char *const argv[], const char *in_file, const char *tag)
{
	return peer_start2(p, argv, in_file, tag, 0);
}

static void peer_write(struct peer *p, const char *s)
{
	if (p->in >= 0 && write(p->in, s, strlen(s)) < 0)
		fprintf(stderr, "  peer stdin: %s\n", strerror(errno));
}

static void peer_close_in(struct peer *p)
{
	if (p->in >= 0)
		close(p->in);
	p->in = -1;
}


/* Reap the peer within ms (then kill it): its exit status, or -1. The
 * test's loop keeps turning meanwhile (what it still writes to the peer,
 * an alert say, must go out for the peer to end). */
static int peer_wait(struct peer *p, int ms)
{
	int st;
	uint64_t dl = h_wall_ns() + (uint64_t)ms * H_MS;
	while (waitpid(p->pid, &st, WNOHANG) == 0) {
		if (h_wall_ns() >= dl) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			peer_close_in(p);
			return -1;
		}
		if (turning)
			tt_turn(turning, 5 * (int64_t)H_MS);
		else
			h_sleep_ms(5);
	}
	peer_close_in(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The peer's output (NUL-terminated, malloc'd). */
static char *peer_output(const struct peer *p)
{
	FILE *f = fopen(p->out, "r");
	if (!f)
		return strdup("");
	char *b = malloc(1 << 20);
	size_t n = fread(b, 1, (1 << 20) - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

static int output_has(const struct peer *p, const char *s)
{
	char *o = peer_output(p);
	int r = strstr(o, s) != NULL;
	if (!r)
		fprintf(stderr, "  [%s] peer output lacks \"%s\":\n----\n%.3000s\n----\n", h_test_name(), s, o);
	free(o);
	return r;
}

/* Turn the loop until the peer's output has s (or ms passed). */
struct outw {
	const struct peer *p;
	const char *s;
};

static int pred_out(struct tt *t, void *arg)
{
	struct outw *w = arg;
	(void)t;
	char *o = peer_output(w->p);
	int r = strstr(o, w->s) != NULL;
	free(o);
	return r;
}

static int wait_output(struct tt *t, const struct peer *p, const char *s, int ms)
{
	struct outw w = {p, s};
	int r = tt_until(t, pred_out, &w, ms);
	if (!r)
		output_has(p, s); /* prints what it has */
	return r;
}

/* A free TCP port on 127.0.0.1 (for a peer that listens). */
static uint16_t free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof a;
	bind(fd, (struct sockaddr *)&a, sizeof a);
	getsockname(fd, (struct sockaddr *)&a, &l);
	close(fd);
	return ntohs(a.sin_port);
}

static int need_os(struct tt *t)
{
	if (have_os)
		return 1;
	(void)t;
	h_skip("the simulation driver's streams reach no other process (openssl, curl)");
	return 0;
}

/* A connected stream from our loop to 127.0.0.1:port (a peer that
 * listens, which may need a moment to start). */
static tl_handle connect_to(struct tt *t, uint16_t port)
{
	tl_addr a;
	tl_addr_parse(&a, "127.0.0.1", port);
	for (int k = 0; k < 200 * h_slow(); k++) {
		tl_handle h;
		tl_op op;
		H_EQ_FATAL(tl_tcp_connect(t->loop, &a, 0, 4, &h, &op), 0);
		int i = wait_loop_op(t, op, H_WAIT_MS);
		if (i >= 0 && t->loop_log.v[i].result == 0)
			return h;
		struct closedw w = {0};
		(void)w;
		tl_close(t->loop, h, 5);
		h_sleep_ms(10);
	}
	H_TRUE(0, "could not connect to port %u", port);
	return TL_HANDLE_NONE;
}

/* =====================================================================
 * Our server and our client
 * ===================================================================== */

static void basic(uint16_t v)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	struct srv_opts so = {.alpn = "h2,http/1.1", .minv = v, .maxv = v};
	struct cli_opts cop = {.alpn = "http/1.1,h2", .minv = v, .maxv = v};
	tl_tls_config *sc = server_config(&so), *cc = client_config(&cop);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;

	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ(d.hs_s, 0);
	H_EQ(d.hs_c, 0);
	H_EQ(d.is.version, v);
	H_EQ(d.ic.version, v);
	H_TRUE(strcmp(d.is.alpn, "h2") == 0, "server ALPN '%s': its own first choice", d.is.alpn);
	H_TRUE(strcmp(d.ic.alpn, "h2") == 0, "client ALPN '%s'", d.ic.alpn);
	H_TRUE(strstr(d.is.cipher, "AES_128_GCM") != NULL, "cipher '%s'", d.is.cipher);
	H_TRUE(strcmp(d.is.group, "X25519") == 0, "group '%s'", d.is.group);
	H_TRUE(strcmp(d.is.sni, "localhost") == 0, "sni '%s'", d.is.sni);
	H_EQ(d.is.resumed, 0);
	H_EQ(d.ic.peer_cert, 1);
	H_EQ(d.is.peer_cert, 0);

	uint8_t kept_s[64], kept_c[64];
	struct rd rs = {.keep = kept_s, .keep_cap = sizeof kept_s}, rc = {.keep = kept_c, .keep_cap = sizeof kept_c};
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	tl_op w1, w2;
	static const char hello[] = "hello from the client";
	H_EQ(tl_tls_write(t.x, d.c, hello, sizeof hello - 1, 40, &w1), 0);
	int i = wait_tls(&t, w1, H_WAIT_MS);
	H_TRUE(i >= 0 && t.tls.v[i].kind == TL_K_WRITE && t.tls.v[i].result == (int64_t)sizeof hello - 1,
	       "write result");
	rd_wait(&t, &rs, sizeof hello - 1, H_WAIT_MS);
	H_EQ(rs.bytes, sizeof hello - 1);
	H_TRUE(memcmp(kept_s, hello, sizeof hello - 1) == 0, "the server read what the client wrote");
	struct iovec iov[3] = {{"and ", 4}, {"hello ", 6}, {"back", 4}};
	H_EQ(tl_tls_writev(t.x, d.s, iov, 3, 41, &w2), 0);
	i = wait_tls(&t, w2, H_WAIT_MS);
	H_TRUE(i >= 0 && t.tls.v[i].result == 14, "writev result");
	rd_wait(&t, &rc, 14, H_WAIT_MS);
	H_EQ(rc.bytes, 14);
	H_TRUE(memcmp(kept_c, "and hello back", 14) == 0, "the client read the three segments in order");

	/* close_notify each way: a clean end of each read, not a truncation */
	tl_op sh;
	H_EQ(tl_tls_shutdown(t.x, d.c, 42, &sh), 0);
	H_EQ(tl_tls_write(t.x, d.c, "x", 1, 43, &w1), -EINVAL); /* nothing after a shutdown */
	i = wait_tls(&t, sh, H_WAIT_MS);
	H_TRUE(i >= 0 && t.tls.v[i].kind == TL_K_SHUTDOWN && t.tls.v[i].result == 0, "shutdown");
	rd_wait(&t, &rs, 0, H_WAIT_MS);
	H_EQ(rs.end, 0);
	H_TRUE(rs.end_flags & TL_F_EOF, "close_notify ends the server's read with TL_F_EOF");
	/* the other direction still works after the peer's close_notify */
	H_EQ(tl_tls_write(t.x, d.s, "late", 4, 44, &w1), 0);
	rd_wait(&t, &rc, 18, H_WAIT_MS);
	H_EQ(rc.bytes, 18);
	H_EQ(tl_tls_shutdown(t.x, d.s, 45, &sh), 0);
	rd_wait(&t, &rc, 0, H_WAIT_MS);
	H_EQ(rc.end, 0);
	H_TRUE(rc.end_flags & TL_F_EOF, "and the client's");
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	H_EQ(tl_tls_close(t.x, d.s, 0, 0), -ENOENT); /* stale once closed */
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.handshakes, 2);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

static void test_basic_13(void) { basic(TL_TLS_1_3); }
static void test_basic_12(void) { basic(TL_TLS_1_2); }

/* 16 MiB each way at once, in writes of odd sizes and writevs, checked by
 * hash; both sides read and write at the same time. */
static void test_large(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	const size_t n = (size_t)16 << 20;
	uint8_t *a = pattern(n, 1), *b = pattern(n, 7);
	struct rd rs = {0}, rc = {0};
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	/* writes of sizes that do not divide records: 1, 7, 100, 16383,
	 * 16384, 16385, 70000 ... cycling; the server's in pairs by writev */
	static const uint32_t sizes[] = {1, 7, 100, 16383, 16384, 16385, 70000, 300000};
	size_t off_c = 0, off_s = 0;
	uint32_t k = 0, inflight = 0;
	tl_op last_c = TL_OP_NONE, last_s = TL_OP_NONE;
	while (off_c < n || off_s < n) {
		if (off_c < n) {
			uint32_t z = sizes[k % 8];
			if (z > n - off_c)
				z = (uint32_t)(n - off_c);
			H_EQ_FATAL(tl_tls_write(t.x, d.c, a + off_c, z, 50, &last_c), 0);
			off_c += z;
		}
		if (off_s < n) {
			uint32_t z = sizes[(k + 3) % 8], z2 = sizes[(k + 5) % 8];
			if (z > n - off_s)
				z = (uint32_t)(n - off_s);
			if (z2 > n - off_s - z)
				z2 = (uint32_t)(n - off_s - z);
			struct iovec v[2] = {{b + off_s, z}, {b + off_s + z, z2}};
			H_EQ_FATAL(tl_tls_writev(t.x, d.s, v, z2 ? 2 : 1, 51, &last_s), 0);
			off_s += z + z2;
		}
		k++;
		if (++inflight == 64) { /* keep the op table and memory bounded */
			inflight = 0;
			if (last_c.v)
				wait_tls(&t, last_c, H_WAIT_MS * 5);
			if (last_s.v)
				wait_tls(&t, last_s, H_WAIT_MS * 5);
			rd_scan(&t, &rs);
			rd_scan(&t, &rc);
		}
	}
	rd_wait(&t, &rs, n, H_WAIT_MS * 10);
	rd_wait(&t, &rc, n, H_WAIT_MS * 10);
	H_EQ(rs.bytes, n);
	H_EQ(rc.bytes, n);
	H_TRUE(rs.hash == fnv(FNV0, a, n), "the server got the client's 16 MiB, in order");
	H_TRUE(rc.hash == fnv(FNV0, b, n), "the client got the server's 16 MiB, in order");
	/* every write ended with its own length */
	uint32_t writes = 0, bad = 0;
	for (uint32_t i = 0; i < t.tls.n; i++)
		if (t.tls.v[i].kind == TL_K_WRITE) {
			writes++;
			bad += t.tls.v[i].result <= 0;
		}
	H_EQ(bad, 0);
	H_TRUE(writes > 0, "writes ended");
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	free(a);
	free(b);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* A session resumed from a ticket: on the same context, and on another
 * context (a second shard) made from the same config. */
static void resume(uint16_t v)
{
	int fds = h_begin();
	tl_loop *loop = h_loop();
	struct tt t, t2;
	tt_init(&t, loop);
	tl_tls_ctx_config cc2;
	tl_tls_ctx_config_init(&cc2);
	cc2.token_tag = TAG + 1;
	memset(&t2, 0, sizeof t2);
	t2.loop = loop;
	H_EQ_FATAL(tl_tls_ctx_new(loop, &cc2, &t2.x), 0);
	t.sib = &t2;
	t2.sib = &t;
	struct srv_opts so = {.minv = v, .maxv = v};
	struct cli_opts cop = {.minv = v, .maxv = v};
	tl_tls_config *sc = server_config(&so), *cc = client_config(&cop);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_c, 0);
	/* a TLS 1.3 ticket comes after the handshake: read for it */
	struct rd rc = {0};
	rd_start(&t, d.c, &rc);
	uint8_t ticket[8192];
	int tl = -EAGAIN;
	for (int k = 0; k < 200 && tl == -EAGAIN; k++) {
		tt_turn(&t, 5 * (int64_t)H_MS);
		tl = tl_tls_resume_data(t.x, d.c, ticket, sizeof ticket);
	}
	H_TRUE_FATAL(tl > 0, "resume data: %d%s", tl, h_errname(tl));
	H_EQ(tl_tls_resume_data(t.x, d.c, ticket, 8), -ENOBUFS);
	H_EQ(tl_tls_resume_data(t.x, d.s, ticket, sizeof ticket), -EINVAL);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);

	tl_tls_client_opts cr = {.server_name = "localhost", .resume = ticket, .resume_len = (uint32_t)tl};
	struct duo d2;
	duo_start(&t, &t, sc, cc, &cr, &d2);
	H_EQ(d2.hs_s, 0);
	H_EQ(d2.is.resumed, 1);
	H_EQ(d2.ic.resumed, 1);
	close_wait(&t, d2.s, 0);
	close_wait(&t, d2.c, 0);
	/* the other context: its own priority cache and tables, the config's
	 * ticket key */
	struct duo d3;
	duo_start(&t2, &t, sc, cc, &cr, &d3);
	H_EQ(d3.hs_s, 0);
	H_EQ(d3.is.resumed, 1);
	close_wait(&t2, d3.s, 0);
	close_wait(&t, d3.c, 0);
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.resumed, 3); /* the second connection's two sides, the third's client */
	tl_tls_stats_get(t2.x, &st);
	H_EQ(st.resumed, 1);
	H_EQ(st.handshakes, 1);
	/* a config with another ticket key does not resume it */
	tl_tls_config *other = server_config(&so);
	struct duo d4;
	duo_start(&t, &t, other, cc, &cr, &d4);
	H_EQ(d4.hs_s, 0);
	H_EQ(d4.is.resumed, 0);
	close_wait(&t, d4.s, 0);
	close_wait(&t, d4.c, 0);
	tl_tls_config_unref(other);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	/* t2 shares the loop: its context goes after the loop is drained */
	for (int i = 0; i < 20; i++)
		tt_turn(&t2, 0);
	release_all(&t2, 0);
	tl_tls_stats_get(t2.x, &st);
	H_EQ(st.sessions, 0);
	t.sib = NULL;
	tt_fini(&t, fds);
	tl_tls_ctx_destroy(t2.x);
	free(t2.tls.v);
	free(t2.loop_log.v);
}

static void test_resume_13(void) { resume(TL_TLS_1_3); }
static void test_resume_12(void) { resume(TL_TLS_1_2); }

/* The client refuses a bad server certificate, with the reason; the
 * server hears of it by the client's alert. */
static void refused(struct tt *t, const char *crt, const char *key, const char *name, int want,
		    uint32_t vbit, int reason)
{
	struct srv_opts so = {.cert = crt, .key = key};
	tl_tls_config *sc = server_config(&so), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = name};
	struct duo d;
	duo_start(t, t, sc, cc, &co, &d);
	H_EQ(d.hs_c, want);
	H_TRUE(d.ic.verify & vbit, "%s for %s: verify bits %#x, want %#x", crt, name, d.ic.verify, vbit);
	H_EQ(d.ic.reason, reason);
	H_EQ(d.ic.error, want);
	char why[200];
	tl_tls_verify_text(d.ic.verify, why, sizeof why);
	H_TRUE(why[0] != '\0', "a reason to print");
	/* the client told the server why, with an alert */
	H_EQ(d.hs_s, -ECONNABORTED);
	H_EQ(d.is.reason, TL_TLS_R_ALERT);
	H_TRUE(d.is.alert_received > 0, "alert %d", d.is.alert_received);
	H_TRUE(d.ic.alert_sent > 0, "alert sent %d", d.ic.alert_sent);
	close_wait(t, d.s, 0);
	close_wait(t, d.c, 0);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
}

static void test_verify_refused(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	refused(&t, "expired.pem", "expired.key", "localhost", -EKEYEXPIRED, TL_TLS_V_EXPIRED,
		TL_TLS_R_CERT_EXPIRED);
	refused(&t, "wrong.pem", "wrong.key", "localhost", -EKEYREJECTED, TL_TLS_V_NAME, TL_TLS_R_CERT_NAME);
	refused(&t, "self.pem", "self.key", "localhost", -EKEYREJECTED, TL_TLS_V_UNTRUSTED,
		TL_TLS_R_CERT_UNTRUSTED);
	refused(&t, "server.pem", "server.key", "other.test", -EKEYREJECTED, TL_TLS_V_NAME,
		TL_TLS_R_CERT_NAME);
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.failed[TL_TLS_R_CERT_EXPIRED], 1);
	H_EQ(st.failed[TL_TLS_R_CERT_NAME], 2);
	H_EQ(st.failed[TL_TLS_R_CERT_UNTRUSTED], 1);
	H_EQ(st.failed[TL_TLS_R_ALERT], 4);
	tt_fini(&t, fds);
}

/* The server name a client is given is copied: a buffer the host reuses
 * right after tl_tls_client does not change the name checked (GnuTLS
 * keeps the pointer it is given). A DNS name and an IP address. */
static void test_name_copied(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	static const char *const names[] = {"localhost", "127.0.0.1"};
	for (int i = 0; i < 2; i++) {
		char name[64];
		tl_handle hs, hc;
		tl_op os, oc;
		tl_tls_id s, c;
		snprintf(name, sizeof name, "%s", names[i]);
		tl_tls_client_opts co = {.server_name = name};
		pair(&t, &hs, &hc);
		H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
		H_EQ_FATAL(tl_tls_client(t.x, cc, hc, &co, 11, &c), 0);
		snprintf(name, sizeof name, "wrong.test"); /* the host's buffer, reused */
		H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &os), 0);
		H_EQ_FATAL(tl_tls_handshake(t.x, c, 0, 21, &oc), 0);
		int is = wait_tls(&t, os, H_WAIT_MS * 2), ic = wait_tls(&t, oc, H_WAIT_MS * 2);
		H_TRUE(ic >= 0 && t.tls.v[ic].result == 0, "%s: client handshake %lld", names[i],
		       ic >= 0 ? (long long)t.tls.v[ic].result : -1ll);
		H_TRUE(is >= 0 && t.tls.v[is].result == 0, "%s: server handshake", names[i]);
		close_wait(&t, s, 0);
		close_wait(&t, c, 0);
	}
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Two certificates: SNI picks, exact names, a wildcard, and the default. */
static void test_sni(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	struct srv_opts so = {.cert2 = "other.pem", .key2 = "other.key"};
	tl_tls_config *sc = server_config(&so), *cc = client_config(NULL);
	static const struct {
		const char *name;
		int ok;
	} cases[] = {{"other.test", 1}, {"a.wild.test", 1}, {"OTHER.TEST", 1}, {"localhost", 1},
		     {"b.a.wild.test", 0}, {"nope.test", 0}};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		tl_tls_client_opts co = {.server_name = cases[k].name};
		struct duo d;
		duo_start(&t, &t, sc, cc, &co, &d);
		if (cases[k].ok) {
			H_TRUE(d.hs_c == 0, "%s: the certificate for it (got %d)", cases[k].name, d.hs_c);
			H_TRUE(strcasecmp(d.is.sni, cases[k].name) == 0, "server saw '%s'", d.is.sni);
		} else {
			/* the default certificate (localhost), which does not name it */
			H_TRUE(d.hs_c == -EKEYREJECTED && (d.ic.verify & TL_TLS_V_NAME),
			       "%s: refused by name (got %d, verify %#x)", cases[k].name, d.hs_c, d.ic.verify);
		}
		close_wait(&t, d.s, 0);
		close_wait(&t, d.c, 0);
	}
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Client certificates: required and good, missing, from another CA; and
 * optional. */
static void test_mtls(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	struct srv_opts so = {.verify = TL_TLS_VERIFY_REQUIRE};
	tl_tls_config *sc = server_config(&so);
	struct cli_opts good = {.cert = "client.pem", .key = "client.key"};
	struct cli_opts rogue = {.cert = "rogue.pem", .key = "rogue.key"};
	tl_tls_config *cg = client_config(&good), *cr = client_config(&rogue), *cn = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;

	duo_start(&t, &t, sc, cg, &co, &d);
	H_EQ(d.hs_s, 0);
	H_EQ(d.hs_c, 0);
	H_EQ(d.is.peer_cert, 1);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);

	duo_start(&t, &t, sc, cn, &co, &d);
	H_EQ(d.hs_s, -ENOKEY);
	H_EQ(d.is.reason, TL_TLS_R_NO_CERT);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);

	/* our client does not offer a certificate the server's CA list does
	 * not name: the server sees none (the real-peer test sends one) */
	duo_start(&t, &t, sc, cr, &co, &d);
	H_EQ(d.hs_s, -ENOKEY);
	H_EQ(d.is.reason, TL_TLS_R_NO_CERT);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);

	struct srv_opts oo = {.verify = TL_TLS_VERIFY_OPTIONAL};
	tl_tls_config *so2 = server_config(&oo);
	duo_start(&t, &t, so2, cn, &co, &d);
	H_EQ(d.hs_s, 0);
	H_EQ(d.is.peer_cert, 0);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	tl_tls_config_unref(so2);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cg);
	tl_tls_config_unref(cr);
	tl_tls_config_unref(cn);
	tt_fini(&t, fds);
}

/* A client that sends its hello one byte a second: the handshake ends at
 * its deadline, not later for the bytes that keep coming, not earlier. */
static void test_slow_handshake(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL);
	tl_handle hs, hc;
	pair(&t, &hs, &hc);
	tl_tls_id s;
	tl_op hop, wop, top;
	tl_handle timer;
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
	uint64_t t0 = tl_now(t.loop), dl = t0 + 2500 * H_MS;
	H_EQ_FATAL(tl_tls_handshake(t.x, s, dl, 20, &hop), 0);
	static const uint8_t hello[] = {0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03};
	uint32_t sent = 0;
	H_EQ_FATAL(tl_timer_start(t.loop, t0 + 1000 * H_MS, 1000 * H_MS, 60, &timer, &top), 0);
	H_EQ_FATAL(tl_write(t.loop, hc, hello, 1, 61, &wop), 0);
	sent++;
	uint32_t seen = 0;
	uint64_t wall_dl = h_wall_ns() + 10000 * H_MS * (uint64_t)h_slow();
	while (find_term(&t.tls, hop, 0) < 0 && h_wall_ns() < wall_dl &&
	       tl_now(t.loop) < t0 + 6000 * H_MS) {
		tt_turn(&t, 50 * (int64_t)H_MS);
		for (; seen < t.loop_log.n; seen++)
			if (t.loop_log.v[seen].kind == TL_K_TIMER && sent < sizeof hello) {
				H_EQ(tl_write(t.loop, hc, hello + sent, 1, 61, &wop), 0);
				sent++;
			}
	}
	int i = find_term(&t.tls, hop, 0);
	uint64_t end = tl_now(t.loop);
	H_TRUE_FATAL(i >= 0, "the handshake did not end");
	H_EQ(t.tls.v[i].result, -ETIMEDOUT);
	H_TRUE(end >= dl, "ended %.3f s after the start, before its deadline", (end - t0) / 1e9);
	H_TRUE(end < dl + 1000 * H_MS * (uint64_t)h_slow(), "ended %.3f s after the start",
	       (end - t0) / 1e9);
	H_TRUE(sent >= 3, "bytes kept coming (%u) and did not move the deadline", sent);
	tl_tls_info in;
	tl_tls_info_get(t.x, s, &in);
	H_EQ(in.reason, TL_TLS_R_TIMEOUT);
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.failed[TL_TLS_R_TIMEOUT], 1);
	tl_close(t.loop, timer, 62);
	tl_close(t.loop, hc, 63);
	close_wait(&t, s, 0);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* The stream ends without close_notify: the read says -EPROTO, never a
 * clean end (test_basic has the clean end). During the handshake too. */
static void test_truncation(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	struct rd rs = {0};
	rd_start(&t, d.s, &rs);
	tl_op w, sh;
	H_EQ(tl_tls_write(t.x, d.c, "before the cut", 14, 40, &w), 0);
	wait_tls(&t, w, H_WAIT_MS);
	/* a peer that half-closes TCP without close_notify (the test goes
	 * behind its own session's back) */
	tl_handle ch;
	H_EQ(tl_tls_stream(t.x, d.c, &ch), 0);
	H_EQ(tl_shutdown(t.loop, ch, 70, &sh), 0);
	rd_wait(&t, &rs, 0, H_WAIT_MS);
	H_EQ(rs.bytes, 14); /* what came before the cut is delivered first */
	H_EQ(rs.end, -EPROTO);
	H_TRUE(!(rs.end_flags & TL_F_EOF), "a truncation is not an end of stream");
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);

	/* half a hello, then the end */
	tl_handle hs, hc;
	pair(&t, &hs, &hc);
	tl_tls_id s;
	tl_op hop, wop;
	static const uint8_t half[] = {0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00};
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &hop), 0);
	H_EQ(tl_write(t.loop, hc, half, sizeof half, 71, &wop), 0);
	H_EQ(tl_shutdown(t.loop, hc, 72, &sh), 0);
	int i = wait_tls(&t, hop, H_WAIT_MS);
	H_TRUE(i >= 0 && t.tls.v[i].result == -EPROTO, "a handshake cut short: %lld",
	       i >= 0 ? (long long)t.tls.v[i].result : 0);
	tl_tls_info in;
	tl_tls_info_get(t.x, s, &in);
	H_EQ(in.reason, TL_TLS_R_TRUNCATED);
	tl_close(t.loop, hc, 73);
	close_wait(&t, s, 0);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Bytes that are no TLS: refused as a protocol error, at once. */
static void test_not_tls(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL);
	tl_handle hs, hc;
	pair(&t, &hs, &hc);
	tl_tls_id s;
	tl_op hop, wop;
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &hop), 0);
	H_EQ(tl_write(t.loop, hc, "GET / HTTP/1.1\r\n\r\n", 18, 71, &wop), 0);
	int i = wait_tls(&t, hop, H_WAIT_MS);
	H_TRUE(i >= 0 && t.tls.v[i].result == -EBADMSG, "plain HTTP to a TLS server: %lld",
	       i >= 0 ? (long long)t.tls.v[i].result : 0);
	tl_tls_info in;
	tl_tls_info_get(t.x, s, &in);
	H_EQ(in.reason, TL_TLS_R_PROTOCOL);
	tl_close(t.loop, hc, 73);
	close_wait(&t, s, 0);

	/* after the handshake: records, then a header that is no TLS, in one
	 * read: the records' plaintext comes first, then the refusal */
	tl_tls_config *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	tl_handle raw;
	H_EQ(tl_tls_stream(t.x, d.c, &raw), 0);
	tl_op w;
	H_EQ(tl_tls_write(t.x, d.c, "good", 4, 40, &w), 0);
	wait_tls(&t, w, H_WAIT_MS);
	H_EQ(tl_tls_write(t.x, d.c, "data", 4, 41, &w), 0);
	H_EQ(tl_write(t.loop, raw, "\x05junk", 5, 74, &wop), 0); /* behind the session's back */
	struct rd rs = {0};
	rd_start(&t, d.s, &rs);
	rd_wait(&t, &rs, 0, H_WAIT_MS);
	H_EQ(rs.bytes, 8);
	H_EQ(rs.end, -EBADMSG);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	tl_tls_config_unref(cc);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* KeyUpdate both ways on TLS 1.3, data after each; none on TLS 1.2. */
static void test_key_update(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	struct rd rs = {0}, rc = {0};
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	tl_op w;
	for (int k = 0; k < 3; k++) {
		H_EQ(tl_tls_key_update(t.x, d.c, k == 1), 0); /* the second asks the server too */
		H_EQ(tl_tls_write(t.x, d.c, "after", 5, 40, &w), 0);
		rd_wait(&t, &rs, 5 * (uint64_t)(k + 1), H_WAIT_MS);
		H_EQ(tl_tls_key_update(t.x, d.s, 0), 0);
		H_EQ(tl_tls_write(t.x, d.s, "back", 4, 41, &w), 0);
		rd_wait(&t, &rc, 4 * (uint64_t)(k + 1), H_WAIT_MS);
	}
	H_EQ(rs.bytes, 15);
	H_EQ(rc.bytes, 12);
	H_EQ(rs.end, 1);
	H_EQ(rc.end, 1);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	struct srv_opts so12 = {.maxv = TL_TLS_1_2};
	tl_tls_config *s12 = server_config(&so12);
	duo_start(&t, &t, s12, cc, &co, &d);
	H_EQ(d.hs_s, 0);
	H_EQ(tl_tls_key_update(t.x, d.c, 0), -ENOTSUP);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	tl_tls_config_unref(s12);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Release server session *id from t (its reads into r, or NULL), import it into
 * to with cfg: the new session's id, after checking what the release
 * says while it waits. */
static tl_tls_id move_session(struct tt *t, struct tt *to, tl_tls_config *cfg, tl_tls_id id, struct rd *r)
{
	static uint8_t st[TL_TLS_STATE_MAX];
	tl_handle h;
	tl_tls_id nid = {0};
	uint8_t small[64];
	int n;

	H_EQ(tl_tls_release(t->x, id, small, sizeof small, &h), -ENOBUFS);
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while ((n = tl_tls_release(t->x, id, st, sizeof st, &h)) == -EAGAIN && h_wall_ns() < dl) {
		tl_op w;
		H_EQ(tl_tls_write(t->x, id, "x", 1, 1, &w), -EINVAL); /* no new writes */
		tt_turn(t, 5 * (int64_t)H_MS);
	}
	H_TRUE_FATAL(n > 0, "release: %d", n);
	if (r) { /* (NULL: no read was under way) */
		rd_scan(t, r);
		H_EQ(r->end, -ECANCELED);
	}
	H_EQ(tl_tls_release(t->x, id, st, sizeof st, &h), -ENOENT);
	/* cut short, or of another version: refused, nothing made */
	H_EQ(tl_tls_import(to->x, cfg, h, st, (uint32_t)n - 1 > 200 ? 200 : 1, 12, &nid), -EINVAL);
	st[4] ^= 0x40;
	H_EQ(tl_tls_import(to->x, cfg, h, st, (uint32_t)n, 12, &nid), -EINVAL);
	st[4] ^= 0x40;
	H_EQ_FATAL(tl_tls_import(to->x, cfg, h, st, (uint32_t)n, 12, &nid), 0);
	memset(st, 0, sizeof st);
	return nid;
}

/* Two contexts of one loop for a move: t the first, t2 the second (its
 * plaintext buffers plain_size bytes, 0: the default), each turning the
 * other. */
static void move_ctxs_init(struct tt *t, struct tt *t2, uint32_t plain_size)
{
	tt_init(t, h_loop());
	tl_tls_ctx_config cc2;
	tl_tls_ctx_config_init(&cc2);
	cc2.token_tag = TAG + 1;
	if (plain_size)
		cc2.plain_buffer_size = plain_size;
	tt_init_cc(t2, t->loop, &cc2);
	turning = t;
	t->sib = t2;
	t2->sib = t;
}

/* ... and their end: t2 holds nothing (no session, lease, buffer or
 * completion), then both go, nothing leaked (fds: h_begin's). */
static void move_ctxs_fini(struct tt *t, struct tt *t2, int fds)
{
	release_all(t2, 0);
	tl_tls_stats st2;
	tl_tls_stats_get(t2->x, &st2);
	H_EQ(st2.sessions, 0);
	H_EQ(st2.plain_held, 0);
	H_EQ(st2.out_busy, 0);
	H_EQ(tl_tls_pending(t2->x), 0);
	t->sib = NULL;
	tt_fini(t, fds);
	tl_tls_ctx_destroy(t2->x);
	free(t2->tls.v);
	free(t2->loop_log.v);
}

/* A session moved between contexts after its handshake (tl_tls_release,
 * tl_tls_import) carries on with the peer, which sees nothing: data both
 * ways in small and full records (the importing ctx's plaintext buffers
 * are 1 KiB: a record's plaintext waits there in parts), a KeyUpdate
 * from the peer that asks for ours, one of ours, a second move (from an
 * imported session), and close_notify at the end; for each suite a move
 * can carry. A session mid-handshake cannot be moved. */
static void move(uint16_t v, const char *cipher)
{
	int fds = h_begin();
	struct tt t, t2;
	move_ctxs_init(&t, &t2, 1024);
	struct srv_opts so = {.minv = v, .maxv = v, .ciphers = cipher};
	tl_tls_config *sc = server_config(&so), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	H_EQ(d.is.version, v);
	struct rd rs = {0}, rc = {0}, rs2 = {0}, rs3 = {0};
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	tl_op w;
	H_EQ(tl_tls_write(t.x, d.c, "before", 6, 40, &w), 0);
	rd_wait(&t, &rs, 6, H_WAIT_MS);
	/* a release begun and abandoned: the session goes on as before */
	{
		static uint8_t st0[TL_TLS_STATE_MAX];
		tl_handle h0;
		H_EQ(tl_tls_release(t.x, d.s, NULL, 0, NULL), -EINVAL);
		H_EQ(tl_tls_release(t.x, d.s, st0, sizeof st0, &h0), -EAGAIN);
		H_EQ(tl_tls_release(t.x, d.s, NULL, 0, NULL), 0);
		H_EQ(tl_tls_release(t.x, d.s, NULL, 0, NULL), -EINVAL);
		H_EQ(tl_tls_write(t.x, d.c, "kept", 4, 40, &w), 0);
		rd_wait(&t, &rs, 10, H_WAIT_MS);
		H_EQ(rs.bytes, 10);
		H_EQ(tl_tls_write(t.x, d.s, "kept", 4, 40, &w), 0);
		rd_wait(&t, &rc, 4, H_WAIT_MS);
		H_EQ(rc.bytes, 4);
	}
	/* bytes in flight at the release: the old session opens them */
	H_EQ(tl_tls_write(t.x, d.c, "flight", 6, 40, &w), 0);
	tl_tls_id s2 = move_session(&t, &t2, sc, d.s, &rs);
	tl_tls_info in;
	H_EQ(tl_tls_info_get(t2.x, s2, &in), 0);
	H_EQ(in.version, v);
	H_TRUE(strcmp(in.cipher, d.is.cipher) == 0, "cipher %s, was %s", in.cipher, d.is.cipher);
	H_TRUE(strcmp(in.sni, "localhost") == 0, "sni %s", in.sni);
	H_EQ(tl_tls_handshake(t2.x, s2, 0, 1, &w), -EINVAL);
	rd_start(&t2, s2, &rs2);
	rd_wait(&t2, &rs2, 16 - rs.bytes, H_WAIT_MS);
	H_EQ(rs.bytes + rs2.bytes, 16);
	/* both ways, small and whole records */
	size_t big = 200000;
	uint8_t *pa = pattern(big, 7), *pb = pattern(big, 9);
	tl_op wb;
	H_EQ(tl_tls_write(t2.x, s2, pa, (uint32_t)big, 41, &wb), 0);
	H_EQ(tl_tls_write(t.x, d.c, pb, (uint32_t)big, 42, &w), 0);
	rd_wait(&t, &rc, 4 + big, H_WAIT_MS);
	rd_wait(&t2, &rs2, 16 - rs.bytes + big, H_WAIT_MS);
	H_EQ(rc.hash, fnv(fnv(FNV0, (const uint8_t *)"kept", 4), pa, big));
	{
		/* a write's terminal says how much of it went into records */
		int wi = wait_tls(&t2, wb, H_WAIT_MS);
		H_TRUE_FATAL(wi >= 0, "no terminal of the big write");
		H_EQ(t2.tls.v[wi].result, (int64_t)big);
		H_EQ(t2.tls.v[wi].u.write.written, big);
	}
	H_EQ(rc.bytes, 4 + big);
	if (v == TL_TLS_1_3) {
		/* the peer's KeyUpdate asking for ours, then ours */
		H_EQ(tl_tls_key_update(t.x, d.c, 1), 0);
		H_EQ(tl_tls_write(t.x, d.c, "upd", 3, 43, &w), 0);
		rd_wait(&t2, &rs2, 16 - rs.bytes + big + 3, H_WAIT_MS);
		H_EQ(tl_tls_write(t2.x, s2, "ack", 3, 44, &w), 0);
		rd_wait(&t, &rc, big + 7, H_WAIT_MS);
		H_EQ(tl_tls_key_update(t2.x, s2, 0), 0);
		H_EQ(tl_tls_write(t2.x, s2, "two", 3, 45, &w), 0);
		rd_wait(&t, &rc, big + 10, H_WAIT_MS);
	} else {
		H_EQ(tl_tls_key_update(t2.x, s2, 0), -ENOTSUP);
		H_EQ(tl_tls_write(t2.x, s2, "ackTWO", 6, 44, &w), 0);
		rd_wait(&t, &rc, big + 10, H_WAIT_MS);
	}
	H_EQ(rc.bytes, big + 10);
	H_EQ(rc.end, 1);
	/* and once more, from the imported session back */
	tl_tls_id s3 = move_session(&t2, &t, sc, s2, &rs2);
	rd_start(&t, s3, &rs3);
	H_EQ(tl_tls_write(t.x, s3, "third", 5, 46, &w), 0);
	rd_wait(&t, &rc, big + 15, H_WAIT_MS);
	H_EQ(tl_tls_write(t.x, d.c, "end", 3, 47, &w), 0);
	rd_wait(&t, &rs3, 3, H_WAIT_MS);
	H_EQ(rs3.bytes, 3);
	/* the client moves too (a library session's state, the client's
	 * secrets), with a KeyUpdate of its own after the move */
	struct rd rc2 = {0};
	rd_wait(&t, &rc, big + 15, H_WAIT_MS);
	tl_tls_id c2 = move_session(&t, &t2, cc, d.c, &rc);
	H_EQ(rc.bytes, big + 15);
	rd_start(&t2, c2, &rc2);
	if (v == TL_TLS_1_3)
		H_EQ(tl_tls_key_update(t2.x, c2, 1), 0);
	H_EQ(tl_tls_write(t2.x, c2, "from c2", 7, 48, &w), 0);
	rd_wait(&t, &rs3, 10, H_WAIT_MS);
	H_EQ(rs3.bytes, 10);
	H_EQ(tl_tls_write(t.x, s3, "to c2", 5, 49, &w), 0);
	rd_wait(&t2, &rc2, 5, H_WAIT_MS);
	H_EQ(rc2.bytes, 5);
	/* close_notify from the moved server: a clean end at the moved client */
	close_wait(&t, s3, 0);
	rd_wait(&t2, &rc2, 0, H_WAIT_MS);
	H_EQ(rc2.end, 0);
	H_TRUE(rc2.end_flags & TL_F_EOF, "the client's read ended without close_notify");
	H_EQ(rc2.bytes, 5);
	{
		struct closedw cw = {c2.v};
		H_EQ(tl_tls_close(t2.x, c2, 0, 0), 0);
		H_TRUE(tt_until(&t2, pred_closed, &cw, H_WAIT_MS), "the moved client did not close");
	}
	/* mid-handshake: not movable */
	tl_handle hs, hc;
	tl_tls_id a, b;
	uint8_t st[TL_TLS_STATE_MAX];
	tl_handle hh;
	pair(&t, &hs, &hc);
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &a), 0);
	H_EQ_FATAL(tl_tls_client(t.x, cc, hc, &co, 11, &b), 0);
	H_EQ(tl_tls_release(t.x, a, st, sizeof st, &hh), -EOPNOTSUPP);
	close_wait(&t, a, 0);
	close_wait(&t, b, 0);
	free(pa);
	free(pb);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	move_ctxs_fini(&t, &t2, fds);
}

/* A half-closed session moves as it is. Ours sent (a shutdown under way
 * when the release begins, which waits for it): the imported session
 * still reads what the peer sends, refuses a second shutdown, and moves
 * again; the peer's read had ended with our close_notify after the last
 * bytes. The peer's read (its close_notify before the move): the imported
 * session's read ends at once with TL_F_EOF and no bytes, and it still
 * writes, which the peer reads up to our close_notify. */
static void half_closed(uint16_t v)
{
	int fds = h_begin();
	struct tt t, t2;
	move_ctxs_init(&t, &t2, 0);
	struct srv_opts so = {.minv = v, .maxv = v};
	tl_tls_config *sc = server_config(&so), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	tl_op w, sh;
	/* ours sent */
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	H_EQ(d.is.version, v);
	struct rd rs = {0}, rc = {0}, rs2 = {0}, rs3 = {0};
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	H_EQ(tl_tls_write(t.x, d.s, "last", 4, 40, &w), 0);
	H_EQ(tl_tls_shutdown(t.x, d.s, 50, &sh), 0);
	tl_tls_id s2 = move_session(&t, &t2, sc, d.s, &rs);
	int i = wait_tls(&t, sh, H_WAIT_MS);
	H_TRUE_FATAL(i >= 0, "no terminal of the shutdown");
	H_EQ(t.tls.v[i].result, 0);
	rd_wait(&t, &rc, 0, H_WAIT_MS);
	H_EQ(rc.bytes, 4);
	H_EQ(rc.end, 0);
	H_TRUE(rc.end_flags & TL_F_EOF, "the client's read ended without close_notify");
	H_EQ(tl_tls_shutdown(t2.x, s2, 51, &sh), -EINVAL);
	rd_start(&t2, s2, &rs2);
	H_EQ(tl_tls_write(t.x, d.c, "more", 4, 41, &w), 0);
	rd_wait(&t2, &rs2, 4, H_WAIT_MS);
	H_EQ(rs2.bytes, 4);
	tl_tls_id s3 = move_session(&t2, &t, sc, s2, &rs2); /* a version 2 state */
	H_EQ(tl_tls_shutdown(t.x, s3, 52, &sh), -EINVAL);
	rd_start(&t, s3, &rs3);
	H_EQ(tl_tls_write(t.x, d.c, "again", 5, 42, &w), 0);
	rd_wait(&t, &rs3, 5, H_WAIT_MS);
	H_EQ(rs3.bytes, 5);
	close_wait(&t, d.c, 0); /* its close_notify: the moved read's clean end */
	rd_wait(&t, &rs3, 6, H_WAIT_MS);
	H_EQ(rs3.end, 0);
	H_TRUE(rs3.end_flags & TL_F_EOF, "the moved server's read ended without close_notify");
	close_wait(&t, s3, 0);
	/* the peer's read */
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	memset(&rs, 0, sizeof rs);
	memset(&rc, 0, sizeof rc);
	memset(&rs2, 0, sizeof rs2);
	rd_start(&t, d.s, &rs);
	rd_start(&t, d.c, &rc);
	H_EQ(tl_tls_write(t.x, d.c, "bye", 3, 43, &w), 0);
	H_EQ(tl_tls_shutdown(t.x, d.c, 53, &sh), 0);
	rd_wait(&t, &rs, 4, H_WAIT_MS);
	H_EQ(rs.bytes, 3);
	H_EQ(rs.end, 0);
	H_TRUE(rs.end_flags & TL_F_EOF, "the server's read ended without close_notify");
	s2 = move_session(&t, &t2, sc, d.s, NULL);
	rd_start(&t2, s2, &rs2);
	rd_wait(&t2, &rs2, 1, H_WAIT_MS);
	H_EQ(rs2.bytes, 0);
	H_EQ(rs2.end, 0);
	H_TRUE(rs2.end_flags & TL_F_EOF, "the imported session's read did not end with close_notify");
	H_EQ(tl_tls_write(t2.x, s2, "reply", 5, 44, &w), 0);
	rd_wait(&t, &rc, 5, H_WAIT_MS);
	H_EQ(rc.bytes, 5);
	close_wait(&t2, s2, 0);
	rd_wait(&t, &rc, 6, H_WAIT_MS);
	H_EQ(rc.end, 0);
	H_TRUE(rc.end_flags & TL_F_EOF, "the client's read ended without close_notify");
	close_wait(&t, d.c, 0);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	move_ctxs_fini(&t, &t2, fds);
}

static void test_move_half_closed_13(void) { half_closed(TL_TLS_1_3); }
static void test_move_half_closed_12(void) { half_closed(TL_TLS_1_2); }

static void test_move_13_aes128(void) { move(TL_TLS_1_3, "AES-128-GCM"); }
static void test_move_13_aes256(void) { move(TL_TLS_1_3, "AES-256-GCM"); }
static void test_move_13_chacha(void) { move(TL_TLS_1_3, "CHACHA20-POLY1305"); }
static void test_move_12_aes128(void) { move(TL_TLS_1_2, "AES-128-GCM"); }
static void test_move_12_chacha(void) { move(TL_TLS_1_2, "CHACHA20-POLY1305"); }

/* A stream that brings records in 7-byte pieces, each read on its own:
 * a record fills the session's lease cap long before it is whole, and its
 * bytes move to a spill buffer so that the rest can come (without that the
 * stream would stay paused for ever). */
struct relay {
	tl_handle in, out;  /* raw streams: read in, write out in pieces */
	tl_op rop, wop;
	uint8_t *q;
	size_t head, tail, cap;
	int writing;
	uint32_t from;
};

static void relay_scan(struct tt *t, struct relay *r, uint32_t piece)
{
	for (; r->from < t->loop_log.n; r->from++) {
		tl_completion *c = &t->loop_log.v[r->from];
		if (c->op.v == r->rop.v && c->result > 0 && (c->flags & TL_F_LEASE)) {
			if (r->tail + (size_t)c->result > r->cap) {
				memmove(r->q, r->q + r->head, r->tail - r->head);
				r->tail -= r->head;
				r->head = 0;
			}
			H_TRUE_FATAL(r->tail + (size_t)c->result <= r->cap, "relay buffer");
			memcpy(r->q + r->tail, c->u.read.lease.data, (size_t)c->result);
			r->tail += (size_t)c->result;
			tl_lease_release(t->loop, c->u.read.lease.id);
		} else if (r->writing && c->op.v == r->wop.v && (c->flags & TL_F_TERMINAL)) {
			H_TRUE(c->result > 0, "relay write %lld", (long long)c->result);
			r->head += (size_t)c->result;
			r->writing = 0;
		}
	}
	if (!r->writing && r->tail > r->head) {
		uint32_t n = r->tail - r->head < piece ? (uint32_t)(r->tail - r->head) : piece;
		H_EQ(tl_write(t->loop, r->out, r->q + r->head, n, 77, &r->wop), 0);
		r->writing = 1;
	}
}

static void test_fragmented(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	tl_handle hc, ha, hb, hs;
	pair(&t, &ha, &hc); /* client hc -> relay ha */
	pair(&t, &hs, &hb); /* relay hb -> server hs */
	struct relay up = {.in = ha, .out = hb, .cap = 1 << 20}, down = {.in = hb, .out = ha, .cap = 1 << 20};
	up.q = malloc(up.cap);
	down.q = malloc(down.cap);
	up.from = down.from = t.loop_log.n;
	H_EQ_FATAL(tl_read_start(t.loop, ha, 78, &up.rop), 0);
	H_EQ_FATAL(tl_read_start(t.loop, hb, 79, &down.rop), 0);
	tl_tls_id s, c;
	tl_op os, oc, w;
	tl_tls_client_opts co = {.server_name = "localhost"};
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
	H_EQ_FATAL(tl_tls_client(t.x, cc, hc, &co, 11, &c), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &os), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, c, 0, 21, &oc), 0);
	const size_t n = 96 << 10;
	uint8_t *a = pattern(n, 5);
	struct rd rs = {0};
	rd_start(&t, s, &rs);
	H_EQ(tl_tls_write(t.x, c, a, (uint32_t)n, 40, &w), 0);
	uint64_t dl = h_wall_ns() + 60000 * H_MS * (uint64_t)h_slow();
	while (rs.bytes < n && rs.end == 1 && h_wall_ns() < dl) {
		tt_turn(&t, 2 * (int64_t)H_MS);
		relay_scan(&t, &up, 7);       /* client to server: 7 bytes a turn */
		relay_scan(&t, &down, 65536); /* and back: as it comes */
	}
	H_EQ(rs.bytes, n);
	H_TRUE(rs.hash == fnv(FNV0, a, n), "96 KiB in 7-byte pieces, in order");
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_TRUE(st.spills > 0, "records went through spill buffers (%llu)", (unsigned long long)st.spills);
	close_wait(&t, s, TL_TLS_CLOSE_ABORT);
	close_wait(&t, c, TL_TLS_CLOSE_ABORT);
	tl_close(t.loop, ha, 80);
	tl_close(t.loop, hb, 81);
	free(up.q);
	free(down.q);
	free(a);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Close with a handshake under way: its op ends -ECANCELED, then the
 * session's Closed, last; the id is stale after. */
static void test_close_during_handshake(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL);
	tl_handle hs, hc;
	pair(&t, &hs, &hc);
	tl_tls_id s;
	tl_op hop, rop;
	H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &hop), 0);
	H_EQ(tl_tls_handshake(t.x, s, 0, 20, &rop), -EINVAL); /* one handshake */
	H_EQ(tl_tls_read_start(t.x, s, 21, &rop), 0);
	H_EQ(tl_tls_read_start(t.x, s, 21, &rop), -EINVAL); /* one read */
	tt_turn(&t, 0);
	H_EQ(tl_tls_close(t.x, s, 0, 99), 0);
	H_EQ(tl_tls_close(t.x, s, 0, 99), -EINVAL); /* already closing */
	struct closedw w = {s.v};
	H_TRUE(tt_until(&t, pred_closed, &w, H_WAIT_MS), "closed");
	int ih = find_term(&t.tls, hop, 0), ir = find_term(&t.tls, rop, 0), ic = -1;
	for (uint32_t i = 0; i < t.tls.n; i++)
		if (t.tls.v[i].kind == TL_K_CLOSED && t.tls.v[i].handle.v == s.v)
			ic = (int)i;
	H_TRUE(ih >= 0 && t.tls.v[ih].result == -ECANCELED, "handshake cancelled");
	H_TRUE(ir >= 0 && t.tls.v[ir].result == -ECANCELED, "read cancelled");
	H_TRUE(ic > ih && ic > ir, "Closed last (%d after %d, %d)", ic, ih, ir);
	H_EQ(t.tls.v[ic].token, 99);
	tl_tls_info in;
	H_EQ(tl_tls_info_get(t.x, s, &in), -ENOENT);
	H_EQ(tl_tls_cancel(t.x, hop), -ENOENT);
	tl_close(t.loop, hc, 73);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* The identity bits of an id (23 of them: the layer bit aside). */
static uint32_t id_ident(uint64_t v)
{
	return (uint32_t)(v >> 40) & 0x7fffffu;
}

/*
 * A loop's ids and a ctx's have the same layout (identity, generation,
 * slot) and their identities count from 1 each: a loop and a ctx whose
 * counters meet must still refuse each other's ids. The counters are made
 * to meet first (throwaway ctxs or loops for the one behind), so that only
 * the layer bit tells the ids apart.
 */
static void test_ids_disjoint(void)
{
	int fds = h_begin();
	tl_tls_ctx_config small;
	tl_tls_ctx_config_init(&small);
	small.token_tag = TAG;
	small.max_sessions = small.max_ops = 8;
	small.plain_buffers = small.out_buffers = 4;
	small.session_leases = 1;
	small.spill_buffers = 1;
	tl_tls_config *sc = server_config(NULL);
	tl_loop *loop = NULL;
	struct tt t;
	tl_handle hs = {0}, hc = {0};
	tl_tls_id s = {0};
	for (int tries = 0;; tries++) {
		H_TRUE_FATAL(tries < 4, "the counters did not meet");
		loop = h_loop();
		tt_init_cc(&t, loop, &small);
		pair(&t, &hs, &hc);
		H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
		uint32_t own = id_ident(hs.v), ctx = id_ident(s.v);
		if (own == ctx)
			break;
		/* Not started: destroying the ctx leaves the stream the host's. */
		tl_tls_ctx_destroy(t.x);
		if (ctx < own) {
			/* The next ctx made gets the loop's number. */
			for (uint32_t k = ctx + 1; k < own; k++) {
				tl_tls_ctx *y;
				H_EQ_FATAL(tl_tls_ctx_new(loop, &small, &y), 0);
				tl_tls_ctx_destroy(y);
			}
			tt_init_cc(&t, loop, &small);
			H_EQ_FATAL(tl_tls_server(t.x, sc, hs, 10, &s), 0);
			H_EQ_FATAL(id_ident(s.v), own);
			break;
		}
		/* The loop is behind: throwaway loops until the next loop made
		 * gets the number the next ctx gets. */
		tl_close(loop, hs, 0);
		tl_close(loop, hc, 0);
		free(t.tls.v);
		free(t.loop_log.v);
		h_drain_close(loop);
		for (uint32_t k = own + 1; k <= ctx; k++) {
			tl_loop *z = h_loop();
			H_EQ(tl_loop_close(z), 0);
		}
	}
	tl_op hop, lop;
	H_EQ_FATAL(tl_tls_handshake(t.x, s, 0, 20, &hop), 0);
	H_EQ_FATAL(tl_read_start(loop, hc, 30, &lop), 0);
	/* The loop's own ids, and ids of the loop's layout with the TLS ids'
	 * generation and slot, are refused by the layer, and the reverse. */
	tl_tls_id as_sess = {(uint64_t)id_ident(hs.v) << 40 | (s.v & 0xffffffffffull)};
	tl_op as_op = {(uint64_t)id_ident(hs.v) << 40 | (hop.v & 0xffffffffffull)};
	tl_tls_info in;
	tl_handle hh;
	H_EQ(tl_tls_info_get(t.x, as_sess, &in), -ENOENT);
	H_EQ(tl_tls_stream(t.x, as_sess, &hh), -ENOENT);
	H_EQ(tl_tls_info_get(t.x, (tl_tls_id){hs.v}, &in), -ENOENT);
	H_EQ(tl_tls_info_get(t.x, (tl_tls_id){hc.v}, &in), -ENOENT);
	H_EQ(tl_tls_cancel(t.x, as_op), -ENOENT);
	H_EQ(tl_tls_cancel(t.x, lop), -ENOENT);
	H_EQ(tl_tls_read_deadline(t.x, lop, 1), -ENOENT);
	H_EQ(tl_cancel(loop, hop), -ENOENT);
	H_EQ(tl_tls_info_get(t.x, s, &in), 0); /* the real ones still work */
	H_EQ(tl_tls_stream(t.x, s, &hh), 0);
	H_TRUE(tl_handle_eq(hh, hs), "the session's stream");
	H_EQ(close_wait(&t, s, TL_TLS_CLOSE_ABORT), 0);
	H_EQ(tl_cancel(loop, lop), 0);
	H_TRUE(wait_loop_op(&t, lop, H_WAIT_MS) >= 0, "loop read ended");
	tl_close(loop, hc, 73);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* A host that keeps its plaintext leases: reads stop at the session's
 * quota and go on when leases come back; nothing lost. */
static void test_lease_quota(void)
{
	int fds = h_begin();
	struct tt t;
	tl_tls_ctx_config cc;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TAG;
	cc.plain_buffers = 8;
	cc.plain_buffer_size = 4096;
	cc.session_leases = 2;
	tt_init_cc(&t, h_loop(), &cc);
	tl_tls_config *sc = server_config(NULL), *ccfg = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, ccfg, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	const size_t n = 1 << 20;
	uint8_t *a = pattern(n, 3);
	tl_op w;
	H_EQ(tl_tls_write(t.x, d.c, a, (uint32_t)n, 40, &w), 0);
	struct rd rs = {.hold = 1};
	rd_start(&t, d.s, &rs);
	for (int k = 0; k < 100; k++)
		tt_turn(&t, 2 * (int64_t)H_MS);
	rd_scan(&t, &rs);
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.plain_held, 2);
	H_TRUE(rs.bytes <= 2 * 4096 && rs.bytes > 0, "held at the quota: %llu bytes",
	       (unsigned long long)rs.bytes);
	rs.hold = 0;
	release_all(&t, 0);
	rd_wait(&t, &rs, n, H_WAIT_MS * 5);
	H_EQ(rs.bytes, n);
	H_EQ(rs.end, 1);
	H_TRUE(rs.hash == fnv(FNV0, a, n), "all of it, in order");
	H_EQ(tl_tls_lease_release(t.x, 0x80000000u), -ENOENT); /* not held */
	H_EQ(tl_tls_lease_release(t.x, 3), -ENOENT);           /* not one of ours */
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	free(a);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(ccfg);
	tt_fini(&t, fds);
}

/* A read stopped and started again, a read deadline, a cancelled write. */
static void test_read_stop_deadline(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);
	tl_tls_client_opts co = {.server_name = "localhost"};
	struct duo d;
	duo_start(&t, &t, sc, cc, &co, &d);
	H_EQ_FATAL(d.hs_s, 0);
	struct rd rs = {0};
	rd_start(&t, d.s, &rs);
	H_EQ(tl_tls_stop(t.x, rs.op), 0);
	H_EQ(tl_tls_stop(t.x, rs.op), -ENOENT); /* ended at once */
	rd_scan(&t, &rs);
	tt_turn(&t, 0);
	rd_scan(&t, &rs);
	H_EQ(rs.end, 0);
	H_TRUE(rs.end_flags & TL_F_STOPPED, "stopped");
	/* bytes that come while no read runs wait for the next one */
	tl_op w;
	H_EQ(tl_tls_write(t.x, d.c, "queued", 6, 40, &w), 0);
	wait_tls(&t, w, H_WAIT_MS);
	rd_start(&t, d.s, &rs);
	rd_wait(&t, &rs, 6, H_WAIT_MS);
	H_EQ(rs.bytes, 6);
	/* a read deadline with nothing coming */
	uint64_t t0 = tl_now(t.loop);
	H_EQ(tl_tls_read_deadline(t.x, rs.op, t0 + 200 * H_MS), 0);
	rd_wait(&t, &rs, 0, H_WAIT_MS * 2);
	H_EQ(rs.end, -ETIMEDOUT);
	H_TRUE(tl_now(t.loop) >= t0 + 200 * H_MS, "not before its deadline");
	/* the session goes on after it */
	rd_start(&t, d.s, &rs);
	H_EQ(tl_tls_write(t.x, d.c, "more", 4, 41, &w), 0);
	rd_wait(&t, &rs, 4, H_WAIT_MS);
	H_EQ(rs.bytes, 4);
	H_EQ(tl_tls_read_deadline(t.x, w, 1), -ENOENT);
	close_wait(&t, d.s, 0);
	close_wait(&t, d.c, 0);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* Settings refused with a reason; a config made on the pool. */
static void test_config(void)
{
	int fds = h_begin();
	char err[256], c1[600], k1[600], k2[600];
	tl_tls_config *cfg = NULL;
	cert(c1, sizeof c1, "server.pem");
	cert(k1, sizeof k1, "server.key");
	cert(k2, sizeof k2, "other.key");
	tl_tls_cert good = {.cert_file = c1, .key_file = k1};
	tl_tls_settings s = {.role = TL_TLS_SERVER, .certs = &good, .ncerts = 1};

	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), 0);
	H_EQ(tl_tls_config_role(cfg), TL_TLS_SERVER);
	tl_tls_config_unref(cfg);
	tl_tls_cert missing = {.cert_file = "/nonexistent/cert.pem", .key_file = k1};
	s.certs = &missing;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -ENOENT);
	H_TRUE(strstr(err, "/nonexistent/cert.pem") != NULL, "err names the file: %s", err);
	tl_tls_cert dir = {.cert_file = "/", .key_file = k1};
	s.certs = &dir;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	H_TRUE(strstr(err, "not a regular file") != NULL, "err says why: %s", err);
	char big[] = "/tmp/tl-tls-big-XXXXXX";
	int bfd = mkstemp(big);
	H_TRUE(bfd >= 0, "mkstemp");
	H_EQ(ftruncate(bfd, 5 << 20), 0); /* sparse: past the 4 MiB a PEM file may have */
	close(bfd);
	tl_tls_cert huge = {.cert_file = big, .key_file = k1};
	s.certs = &huge;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	H_TRUE(strstr(err, "larger than") != NULL, "err says why: %s", err);
	unlink(big);
	tl_tls_cert mismatch = {.cert_file = c1, .key_file = k2};
	s.certs = &mismatch;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EBADMSG);
	H_TRUE(strstr(err, "does not match") != NULL, "err says why: %s", err);
	s.certs = &good;
	s.ciphers = "AES-128-GCM:RC4";
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	H_TRUE(strstr(err, "RC4") != NULL, "err names the cipher: %s", err);
	s.ciphers = NULL;
	s.groups = "X25519:P-999";
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.groups = NULL;
	s.tickets = 9;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.tickets = 0;
	s.min_version = TL_TLS_1_3;
	s.max_version = TL_TLS_1_2;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.min_version = s.max_version = 0;
	s.verify = TL_TLS_VERIFY_REQUIRE; /* without ca_file */
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.verify = 0;
	s.alpn = "h2,,http/1.1";
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.alpn = NULL;
	tl_tls_cert badname = {.cert_file = c1, .key_file = k1, .names = "ok.test,bad name"};
	s.certs = &badname;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	H_TRUE(strstr(err, "bad name") != NULL, "err names the name: %s", err);
	s.certs = &good;
	s.ncerts = 0;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.ncerts = 1;
	s.role = 7;
	H_EQ(tl_tls_config_new(&s, &cfg, err, sizeof err), -EINVAL);
	s.role = TL_TLS_SERVER;

	/* on the pool, with a context using the result */
	struct tt t;
	tt_init(&t, h_loop());
	tl_tls_load req = {.settings = &s};
	tl_op op;
	H_EQ_FATAL(tl_tls_config_load(t.loop, &req, 80, &op), 0);
	int i = wait_loop_op(&t, op, H_WAIT_MS * 2);
	H_TRUE_FATAL(i >= 0 && t.loop_log.v[i].kind == TL_K_POOL && t.loop_log.v[i].result == 0,
		     "loaded on the pool: %s", req.err);
	cfg = t.loop_log.v[i].u.pool.ptr;
	H_TRUE_FATAL(cfg != NULL, "a config");
	tl_tls_config *cc = client_config(NULL);
	/* a server session needs a server config, on a stream of the loop */
	tl_handle hs, hc;
	pair(&t, &hs, &hc);
	tl_tls_id id;
	H_EQ(tl_tls_server(t.x, cc, hs, 1, &id), -EINVAL);
	H_EQ(tl_tls_server(t.x, cfg, (tl_handle){12345}, 1, &id), -ENOENT);
	H_EQ(tl_tls_server(t.x, cfg, hs, 1, &id), 0);
	close_wait(&t, id, 0);
	tl_close(t.loop, hc, 5);
	missing.key_file = k1;
	s.certs = &missing;
	H_EQ_FATAL(tl_tls_config_load(t.loop, &req, 81, &op), 0);
	i = wait_loop_op(&t, op, H_WAIT_MS * 2);
	H_TRUE(i >= 0 && t.loop_log.v[i].result == -ENOENT && strstr(req.err, "nonexistent"),
	       "a load that fails says why: %s", req.err);
	tl_tls_config_unref(cfg);
	tl_tls_config_unref(cc);
	t.used_pool = 1;
	tt_fini(&t, fds);
}

/* =====================================================================
 * Real peers: openssl s_client and s_server, curl
 * ===================================================================== */

/* An echo server on a session of ours: every plaintext lease is written
 * back, and given back when its write is done. */
struct echo {
	tl_tls_id s;
	tl_op rop;
	uint32_t from;
	uint64_t bytes;
	int64_t end;      /* the read's terminal, 1 while it runs */
	uint16_t end_flags;
	uint32_t writes;  /* in flight */
};

#define ECHO_TOK 0xec00000000ull

static void echo_start(struct tt *t, struct echo *e, tl_tls_id s)
{
	memset(e, 0, sizeof *e);
	e->s = s;
	e->end = 1;
	e->from = t->tls.n;
	H_EQ(tl_tls_read_start(t->x, s, 90, &e->rop), 0);
	if (t->necho < 4)
		t->echos[t->necho++] = e;
}

static void echo_scan(struct tt *t, struct echo *e)
{
	for (; e->from < t->tls.n; e->from++) {
		tl_completion *c = &t->tls.v[e->from];
		if (c->handle.v != e->s.v)
			continue;
		if (c->op.v == e->rop.v) {
			if (c->kind == TL_K_READ && c->result > 0 && (c->flags & TL_F_LEASE)) {
				tl_op w;
				e->bytes += (uint64_t)c->result;
				if (tl_tls_write(t->x, e->s, c->u.read.lease.data, (uint32_t)c->result,
						 ECHO_TOK | c->u.read.lease.id, &w) == 0) {
					e->writes++;
				} else {
					tl_tls_lease_release(t->x, c->u.read.lease.id);
				}
				c->u.read.lease.data = NULL; /* the write gives it back */
			}
			if (c->flags & TL_F_TERMINAL) {
				e->end = c->result;
				e->end_flags = c->flags;
			}
		} else if (c->kind == TL_K_WRITE && (c->token & ~0xffffffffull) == ECHO_TOK) {
			tl_tls_lease_release(t->x, (uint32_t)c->token);
			e->writes--;
		}
	}
}

static int pred_echo_end(struct tt *t, void *arg)
{
	struct echo *e = arg;
	(void)t;
	return e->end != 1 && e->writes == 0;
}

/* Accept one connection, run a server session's handshake on it (deadline
 * 10 s): the handshake's result, *id and *info. */
static int serve_one(struct tt *t, tl_handle lh, tl_tls_config *sc, tl_tls_id *id, tl_tls_info *info)
{
	tl_handle h = accept_one(t, lh, H_WAIT_MS * 5);
	if (!h.v)
		return -9999;
	tl_op op;
	H_EQ_FATAL(tl_tls_server(t->x, sc, h, 10, id), 0);
	H_EQ_FATAL(tl_tls_handshake(t->x, *id, tl_now(t->loop) + 10000 * H_MS * (uint64_t)h_slow(), 20, &op), 0);
	int i = wait_tls(t, op, H_WAIT_MS * 5);
	tl_tls_info_get(t->x, *id, info);
	return i >= 0 ? (int)t->tls.v[i].result : -9999;
}

#define MAXARGS 32

/* s_client to 127.0.0.1:port with the CA, the name, and more arguments
 * (NULL-terminated); stdin a pipe, or in_file. */
static int s_client(struct peer *p, uint16_t port, const char *in_file, int own_err, ...)
{
	char *argv[MAXARGS], conn[32], ca[600];
	int n = 0;
	va_list ap;
	snprintf(conn, sizeof conn, "127.0.0.1:%u", port);
	cert(ca, sizeof ca, "ca.pem");
	argv[n++] = "openssl";
	argv[n++] = "s_client";
	argv[n++] = "-connect";
	argv[n++] = conn;
	argv[n++] = "-CAfile";
	argv[n++] = ca;
	argv[n++] = "-verify_return_error";
	va_start(ap, own_err);
	for (char *a; (a = va_arg(ap, char *)) && n < MAXARGS - 1;)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return peer_start2(p, argv, in_file, "s_client", own_err);
}

/* s_server on a free port with a certificate and more arguments. */
static int s_server(struct peer *p, uint16_t *port, const char *crt, const char *key,
		    const char *in_file, ...)
{
	char *argv[MAXARGS], acc[16], c[600], k[600];
	int n = 0;
	va_list ap;
	*port = free_port();
	snprintf(acc, sizeof acc, "%u", *port);
	cert(c, sizeof c, crt);
	cert(k, sizeof k, key);
	argv[n++] = "openssl";
	argv[n++] = "s_server";
	argv[n++] = "-accept";
	argv[n++] = acc;
	argv[n++] = "-cert";
	argv[n++] = c;
	argv[n++] = "-key";
	argv[n++] = k;
	argv[n++] = "-naccept";
	argv[n++] = "1";
	va_start(ap, in_file);
	for (char *a; (a = va_arg(ap, char *)) && n < MAXARGS - 1;)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return peer_start2(p, argv, in_file, "s_server", 0);
}

/* s_client to our echo server, TLS 1.3 or 1.2: what it sends comes back;
 * its close (stdin's end) is a close_notify: a clean end of our read. */
static void sclient_echo_opts(const struct srv_opts *o, const char *ver, uint16_t want)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *sc = server_config(o);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", (char *)ver, NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	H_EQ(in.version, want);
	H_TRUE(strcmp(in.sni, "localhost") == 0, "sni '%s'", in.sni);
	struct echo e;
	echo_start(&t, &e, id);
	peer_write(&p, "hello through TLS\n");
	H_TRUE(wait_output(&t, &p, "hello through TLS", H_WAIT_MS * 5), "echoed");
	peer_close_in(&p); /* s_client sends close_notify and leaves */
	H_TRUE(tt_until(&t, pred_echo_end, &e, H_WAIT_MS * 5), "the read ended");
	H_EQ(e.end, 0);
	H_TRUE(e.end_flags & TL_F_EOF, "the peer's close_notify: TL_F_EOF");
	H_EQ(peer_wait(&p, H_WAIT_MS * 5), 0);
	H_TRUE(output_has(&p, want == TL_TLS_1_3 ? "TLSv1.3" : "TLSv1.2"), "version");
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

static void sclient_echo(const char *ver, uint16_t want) { sclient_echo_opts(NULL, ver, want); }
static void test_sclient_13(void) { sclient_echo("-tls1_3", TL_TLS_1_3); }
static void test_sclient_12(void) { sclient_echo("-tls1_2", TL_TLS_1_2); }

/* The certificates above are all ECDSA P-256, whose signatures libcrypto
 * makes (lib/tls/ecsign.c); an RSA and a P-384 key stay GnuTLS's: both
 * sign for s_client in TLS 1.3 and 1.2 (s_client checks the signature). */
static void test_sclient_other_keys(void)
{
	static const struct srv_opts rsa = {.cert = "rsa.pem", .key = "rsa.key"};
	static const struct srv_opts p384 = {.cert = "p384.pem", .key = "p384.key"};
	sclient_echo_opts(&rsa, "-tls1_3", TL_TLS_1_3);
	sclient_echo_opts(&rsa, "-tls1_2", TL_TLS_1_2);
	sclient_echo_opts(&p384, "-tls1_3", TL_TLS_1_3);
	sclient_echo_opts(&p384, "-tls1_2", TL_TLS_1_2);
}

/* Our client to s_server: its certificate verified, bytes both ways. */
static void sserver(const char *ver, uint16_t want)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *cc = client_config(NULL);
	struct peer p;
	uint16_t port;
	H_EQ_FATAL(s_server(&p, &port, "server.pem", "server.key", NULL, (char *)ver, NULL), 0);
	tl_handle h = connect_to(&t, port);
	tl_tls_id id;
	tl_op op;
	tl_tls_client_opts co = {.server_name = "localhost"};
	H_EQ_FATAL(tl_tls_client(t.x, cc, h, &co, 10, &id), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, id, 0, 20, &op), 0);
	int i = wait_tls(&t, op, H_WAIT_MS * 5);
	H_TRUE_FATAL(i >= 0 && t.tls.v[i].result == 0, "handshake with s_server: %lld",
		     i >= 0 ? (long long)t.tls.v[i].result : 0);
	tl_tls_info in;
	tl_tls_info_get(t.x, id, &in);
	H_EQ(in.version, want);
	H_EQ(in.peer_cert, 1);
	uint8_t got[64];
	struct rd r = {.keep = got, .keep_cap = sizeof got};
	rd_start(&t, id, &r);
	H_EQ(tl_tls_write(t.x, id, "ping from turnloop\n", 19, 40, &op), 0);
	H_TRUE(wait_output(&t, &p, "ping from turnloop", H_WAIT_MS * 5), "s_server got it");
	peer_write(&p, "pong\n");
	rd_wait(&t, &r, 5, H_WAIT_MS * 5);
	H_TRUE(r.bytes == 5 && memcmp(got, "pong\n", 5) == 0, "our client got s_server's line");
	close_wait(&t, id, 0);
	peer_wait(&p, H_WAIT_MS * 5);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

static void test_sserver_13(void) { sserver("-tls1_3", TL_TLS_1_3); }
static void test_sserver_12(void) { sserver("-tls1_2", TL_TLS_1_2); }

/* s_client resumes a session from the ticket our server gave it; counted. */
static void test_sclient_resume(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *sc = server_config(NULL);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	char sess[600];
	cert(sess, sizeof sess, "sess.pem");
	for (int k = 0; k < 2; k++) {
		struct peer p;
		H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", k ? "-sess_in" : "-sess_out",
				    sess, NULL), 0);
		tl_tls_id id;
		tl_tls_info in;
		H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
		H_EQ(in.resumed, k);
		struct echo e;
		echo_start(&t, &e, id);
		/* (a line no certificate's base64 can begin: a lone "x" was
		 * found in one, and s_client was stopped before our echo and
		 * the ticket reached it) */
		peer_write(&p, "resume-echo\n");
		wait_output(&t, &p, k ? "Reused, TLSv1.3" : "New, TLSv1.3", H_WAIT_MS * 5);
		H_TRUE(wait_output(&t, &p, "\nresume-echo", H_WAIT_MS * 5), "echoed");
		peer_close_in(&p);
		tt_until(&t, pred_echo_end, &e, H_WAIT_MS * 5);
		peer_wait(&p, H_WAIT_MS * 5);
		t.necho = 0;
		close_wait(&t, id, 0);
		if (k == 0) {
			/* The first client saved the session it was given: the
			 * second one has nothing to resume otherwise (and then
			 * gives up before it connects). */
			struct stat sb;
			H_TRUE(stat(sess, &sb) == 0 && sb.st_size > 0,
			       "the first s_client saved no session (%s)", sess);
		}
	}
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.handshakes, 2);
	H_EQ(st.resumed, 1);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* ALPN: our server's choice among what s_client offers; strict refusal. */
static void test_sclient_alpn(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	struct srv_opts so = {.alpn = "http/1.1,h2"};
	struct srv_opts strict = {.alpn = "h2", .flags = TL_TLS_ALPN_STRICT};
	tl_tls_config *sc = server_config(&so), *ss = server_config(&strict);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-alpn", "h2,http/1.1", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	H_TRUE(strcmp(in.alpn, "http/1.1") == 0, "our preference wins: '%s'", in.alpn);
	H_TRUE(wait_output(&t, &p, "ALPN protocol: http/1.1", H_WAIT_MS * 5), "s_client agrees");
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-alpn", "spdy/3", NULL), 0);
	H_EQ(serve_one(&t, lh, ss, &id, &in), -ENOPROTOOPT);
	H_EQ(in.reason, TL_TLS_R_ALPN);
	H_EQ(peer_wait(&p, H_WAIT_MS * 5) != 0, 1);
	H_TRUE(output_has(&p, "no application protocol"), "s_client heard why");
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(ss);
	tt_fini(&t, fds);
}

/* Our client refuses s_server's expired, wrong-name and self-signed
 * certificates, each with its reason. */
static void test_sserver_refused(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *cc = client_config(NULL);
	static const struct {
		const char *crt, *key;
		int err, reason;
		uint32_t bit;
	} cases[] = {
		{"expired.pem", "expired.key", -EKEYEXPIRED, TL_TLS_R_CERT_EXPIRED, TL_TLS_V_EXPIRED},
		{"wrong.pem", "wrong.key", -EKEYREJECTED, TL_TLS_R_CERT_NAME, TL_TLS_V_NAME},
		{"self.pem", "self.key", -EKEYREJECTED, TL_TLS_R_CERT_UNTRUSTED, TL_TLS_V_UNTRUSTED},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct peer p;
		uint16_t port;
		H_EQ_FATAL(s_server(&p, &port, cases[k].crt, cases[k].key, NULL, NULL), 0);
		tl_handle h = connect_to(&t, port);
		tl_tls_id id;
		tl_op op;
		tl_tls_client_opts co = {.server_name = "localhost"};
		H_EQ_FATAL(tl_tls_client(t.x, cc, h, &co, 10, &id), 0);
		H_EQ_FATAL(tl_tls_handshake(t.x, id, 0, 20, &op), 0);
		int i = wait_tls(&t, op, H_WAIT_MS * 5);
		H_TRUE(i >= 0 && t.tls.v[i].result == cases[k].err, "%s: %lld, want %d", cases[k].crt,
		       i >= 0 ? (long long)t.tls.v[i].result : 0, cases[k].err);
		tl_tls_info in;
		tl_tls_info_get(t.x, id, &in);
		H_EQ(in.reason, cases[k].reason);
		H_TRUE(in.verify & cases[k].bit, "%s: verify %#x", cases[k].crt, in.verify);
		close_wait(&t, id, 0);
		peer_wait(&p, H_WAIT_MS * 5);
		/* s_server heard why: the alert our client sent */
		H_TRUE(output_has(&p, "alert"), "s_server got the alert");
	}
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* SNI picks the certificate: s_client verifies the name it asked for. */
static void test_sclient_sni(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	struct srv_opts so = {.cert2 = "other.pem", .key2 = "other.key"};
	tl_tls_config *sc = server_config(&so);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	static const char *const names[][2] = {{"other.test", "CN = other.test"},
					       {"x.wild.test", "CN = other.test"},
					       {"localhost", "CN = localhost"}};
	for (int k = 0; k < 3; k++) {
		struct peer p;
		H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", names[k][0], "-verify_hostname",
				    names[k][0], NULL), 0);
		tl_tls_id id;
		tl_tls_info in;
		H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
		H_TRUE(strcmp(in.sni, names[k][0]) == 0, "sni '%s'", in.sni);
		H_TRUE(wait_output(&t, &p, names[k][1], H_WAIT_MS * 5), "the certificate for %s", names[k][0]);
		H_TRUE(wait_output(&t, &p, "Verify return code: 0 (ok)", H_WAIT_MS * 5), "s_client verified it");
		peer_close_in(&p);
		peer_wait(&p, H_WAIT_MS * 5);
		close_wait(&t, id, 0);
	}
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* Client certificates from s_client: good, none, and one of another CA
 * (which s_client sends whatever the server asked for). */
static void test_sclient_mtls(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	struct srv_opts so = {.verify = TL_TLS_VERIFY_REQUIRE};
	tl_tls_config *sc = server_config(&so);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	char cc[600], ck[600], rc[600], rk[600];
	cert(cc, sizeof cc, "client.pem");
	cert(ck, sizeof ck, "client.key");
	cert(rc, sizeof rc, "rogue.pem");
	cert(rk, sizeof rk, "rogue.key");
	struct peer p;
	tl_tls_id id;
	tl_tls_info in;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-cert", cc, "-key", ck, NULL), 0);
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	H_EQ(in.peer_cert, 1);
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);

	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", NULL), 0);
	H_EQ(serve_one(&t, lh, sc, &id, &in), -ENOKEY);
	H_EQ(in.reason, TL_TLS_R_NO_CERT);
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);

	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-cert", rc, "-key", rk, NULL), 0);
	H_EQ(serve_one(&t, lh, sc, &id, &in), -EKEYREJECTED);
	H_EQ(in.reason, TL_TLS_R_CERT_UNTRUSTED);
	H_TRUE(in.verify & TL_TLS_V_UNTRUSTED, "verify %#x", in.verify);
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* s_client's KeyUpdate commands (k: update its keys; K: and ask ours to
 * follow) between lines: every line still comes back. */
static void test_sclient_key_update(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *sc = server_config(NULL);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	struct echo e;
	echo_start(&t, &e, id);
	peer_write(&p, "line-one\n");
	H_TRUE(wait_output(&t, &p, "\nline-one", H_WAIT_MS * 5), "before");
	peer_write(&p, "k\n");
	H_TRUE(wait_output(&t, &p, "KEYUPDATE", H_WAIT_MS * 5), "s_client updated its keys");
	peer_write(&p, "line-two\n");
	H_TRUE(wait_output(&t, &p, "\nline-two", H_WAIT_MS * 5), "after k");
	peer_write(&p, "K\n");
	/* s_client drops what comes with a command in one read: the next
	 * line goes once the command is done */
	H_TRUE(wait_output(&t, &p, "KEYUPDATE\nline-two\nKEYUPDATE", H_WAIT_MS * 5), "K done");
	peer_write(&p, "line-three\n");
	H_TRUE(wait_output(&t, &p, "\nline-three", H_WAIT_MS * 5), "after K (ours updated too)");
	peer_close_in(&p);
	H_TRUE(tt_until(&t, pred_echo_end, &e, H_WAIT_MS * 5), "ended");
	H_EQ(e.end, 0);
	H_EQ(peer_wait(&p, H_WAIT_MS * 5), 0);
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* A peer that dies (no close_notify): our read says -EPROTO. */
static void test_sclient_truncated(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *sc = server_config(NULL);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-quiet", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	struct echo e;
	echo_start(&t, &e, id);
	peer_write(&p, "last words\n");
	H_TRUE(wait_output(&t, &p, "last words", H_WAIT_MS * 5), "echoed");
	kill(p.pid, SIGKILL);
	peer_wait(&p, H_WAIT_MS * 5);
	H_TRUE(tt_until(&t, pred_echo_end, &e, H_WAIT_MS * 5), "ended");
	H_EQ(e.end, -EPROTO);
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* Write n bytes of pattern(seed) into a file of the certs folder. */
static void pattern_file(const char *name, size_t n, uint64_t seed, char *path, size_t len,
			 uint64_t *hash)
{
	cert(path, len, name);
	uint8_t *b = pattern(n, seed);
	FILE *f = fopen(path, "w");
	H_TRUE_FATAL(f && fwrite(b, 1, n, f) == n, "writing %s", path);
	fclose(f);
	*hash = fnv(FNV0, b, n);
	free(b);
}

static int file_hash(const char *path, size_t skip, uint64_t *h, size_t *n)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	uint8_t buf[65536];
	size_t r;
	*h = FNV0;
	*n = 0;
	if (skip && fseek(f, (long)skip, SEEK_SET) != 0) {
		fclose(f);
		return -1;
	}
	while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
		*h = fnv(*h, buf, r);
		*n += r;
	}
	fclose(f);
	return 0;
}

struct sizew {
	const char *path;
	size_t n;
};

static int pred_size(struct tt *t, void *arg)
{
	struct sizew *w = arg;
	struct stat st;
	(void)t;
	return stat(w->path, &st) == 0 && (size_t)st.st_size >= w->n;
}

/* 16 MiB from s_client through our echo and back; 16 MiB from s_server to
 * our client; each checked by hash. */
static void test_peer_large(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	const size_t n = (size_t)16 << 20;
	char up[600], down[600];
	uint64_t hup, hdown, h;
	size_t got;
	pattern_file("up.bin", n, 11, up, sizeof up, &hup);
	pattern_file("down.bin", n, 13, down, sizeof down, &hdown);
	tl_tls_config *sc = server_config(NULL), *cc = client_config(NULL);

	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, up, 1, "-servername", "localhost", "-quiet", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	struct echo e;
	echo_start(&t, &e, id);
	struct sizew w = {p.out, n};
	H_TRUE(tt_until(&t, pred_size, &w, H_WAIT_MS * 30), "s_client got 16 MiB back");
	close_wait(&t, id, 0); /* close_notify: s_client (-quiet ignores its stdin's end) leaves */
	peer_wait(&p, H_WAIT_MS * 5);
	H_EQ(e.bytes, n);
	H_EQ(file_hash(p.out, 0, &h, &got), 0);
	H_EQ(got, n);
	H_TRUE(h == hup, "the echo of 16 MiB is what s_client sent");
	tl_close(t.loop, lh, 3);
	t.necho = 0;

	/* s_server -WWW answers a GET with a file of its folder (its plain
	 * mode, stdin to the socket, is no steady source: it sends in fits) */
	H_EQ_FATAL(s_server(&p, &port, "server.pem", "server.key", NULL, "-quiet", "-WWW", NULL), 0);
	tl_handle hc = connect_to(&t, port);
	tl_op op;
	tl_tls_client_opts co = {.server_name = "localhost"};
	H_EQ_FATAL(tl_tls_client(t.x, cc, hc, &co, 10, &id), 0);
	H_EQ_FATAL(tl_tls_handshake(t.x, id, 0, 20, &op), 0);
	int i = wait_tls(&t, op, H_WAIT_MS * 5);
	H_TRUE_FATAL(i >= 0 && t.tls.v[i].result == 0, "handshake");
	uint8_t *all = malloc(n + 4096);
	struct rd r = {.keep = all, .keep_cap = n + 4096};
	rd_start(&t, id, &r);
	H_EQ(tl_tls_write(t.x, id, "GET /down.bin HTTP/1.0\r\n\r\n", 27, 40, &op), 0);
	rd_wait(&t, &r, 0, H_WAIT_MS * 30);
	uint8_t *body = r.bytes <= n + 4096 ? memmem(all, r.bytes, "\r\n\r\n", 4) : NULL;
	H_TRUE_FATAL(body != NULL, "an HTTP answer (%llu bytes, the read's end %lld)", (unsigned long long)r.bytes,
		     (long long)r.end);
	body += 4;
	H_EQ((size_t)(all + r.bytes - body), n);
	H_TRUE(fnv(FNV0, body, n) == hdown, "our client got s_server's 16 MiB");
	H_TRUE(r.end == 0 || r.end == -EPROTO, "the answer's end: %lld", (long long)r.end);
	free(all);
	close_wait(&t, id, 0);
	peer_wait(&p, H_WAIT_MS * 5);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(cc);
	tt_fini(&t, fds);
}

/* The OCSP staple our server was given reaches s_client -status. */
static void test_sclient_ocsp(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	struct srv_opts so = {.ocsp = "server.ocsp"};
	tl_tls_config *sc = server_config(&so);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-status", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	H_TRUE(wait_output(&t, &p, "Cert Status: good", H_WAIT_MS * 5), "stapled");
	H_TRUE(output_has(&p, "OCSP Response Status: successful"), "OCSP");
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* TLS 1.2 renegotiation asked by s_client ('R') is refused: the library
 * takes the ClientHello for what it is here, an unexpected message, and
 * ends the session with that alert (a record cannot be skipped: the next
 * one's sequence number depends on it). */
static void test_sclient_no_renegotiation(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	tl_tls_config *sc = server_config(NULL);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	struct peer p;
	H_EQ_FATAL(s_client(&p, port, NULL, 0, "-servername", "localhost", "-tls1_2", NULL), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	struct echo e;
	echo_start(&t, &e, id);
	peer_write(&p, "first\n");
	H_TRUE(wait_output(&t, &p, "\nfirst", H_WAIT_MS * 5), "echoed");
	peer_write(&p, "R\n");
	H_TRUE(wait_output(&t, &p, "RENEGOTIATING", H_WAIT_MS * 5), "s_client asked");
	H_TRUE(tt_until(&t, pred_echo_end, &e, H_WAIT_MS * 5), "the session ended");
	H_EQ(e.end, -EBADMSG);
	tl_tls_info_get(t.x, id, &in);
	H_EQ(in.reason, TL_TLS_R_PROTOCOL);
	H_EQ(in.alert_sent, 10); /* unexpected_message */
	tl_tls_stats st;
	tl_tls_stats_get(t.x, &st);
	H_EQ(st.handshakes, 1); /* no second one */
	peer_close_in(&p);
	peer_wait(&p, H_WAIT_MS * 5);
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* curl over HTTPS to a small HTTP/1.1 answer of ours: 4 MiB, by hash. */
static void test_curl(void)
{
	int fds = h_begin();
	struct tt t;
	tt_init(&t, h_loop());
	if (!need_os(&t)) {
		tt_fini(&t, fds);
		return;
	}
	struct srv_opts so = {.alpn = "http/1.1"};
	tl_tls_config *sc = server_config(&so);
	uint16_t port;
	tl_handle lh = listen_any(&t, &port);
	const size_t n = (size_t)4 << 20;
	uint8_t *body = pattern(n, 17);
	char url[64], ca[600], out[600];
	snprintf(url, sizeof url, "https://localhost:%u/", port);
	cert(ca, sizeof ca, "ca.pem");
	cert(out, sizeof out, "curl.out");
	char *argv[] = {"curl", "-sS", "--http1.1", "--cacert", ca, "-o", out, url, NULL};
	struct peer p;
	H_EQ_FATAL(peer_start(&p, argv, "/dev/null", "curl"), 0);
	tl_tls_id id;
	tl_tls_info in;
	H_EQ(serve_one(&t, lh, sc, &id, &in), 0);
	H_TRUE(strcmp(in.alpn, "http/1.1") == 0, "alpn '%s'", in.alpn);
	uint8_t req[4096];
	struct rd r = {.keep = req, .keep_cap = sizeof req};
	rd_start(&t, id, &r);
	struct outw dummy = {0};
	(void)dummy;
	uint64_t dl = h_wall_ns() + H_WAIT_MS * 5 * H_MS;
	while (h_wall_ns() < dl && !(r.bytes >= 4 && r.bytes <= sizeof req && memmem(req, r.bytes, "\r\n\r\n", 4)))
		tt_turn(&t, 5 * (int64_t)H_MS);
	H_TRUE(r.bytes <= sizeof req && memmem(req, r.bytes, "GET / HTTP/1.1\r\n", 16), "curl's request");
	char head[128];
	int hl = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", n);
	struct iovec v[2] = {{head, (size_t)hl}, {body, n}};
	tl_op w;
	H_EQ(tl_tls_writev(t.x, id, v, 2, 40, &w), 0);
	int i = wait_tls(&t, w, H_WAIT_MS * 10);
	H_TRUE(i >= 0 && t.tls.v[i].result == (int64_t)(hl + n), "answer written");
	H_EQ(peer_wait(&p, H_WAIT_MS * 10), 0);
	uint64_t h;
	size_t got;
	H_EQ(file_hash(out, 0, &h, &got), 0);
	H_EQ(got, n);
	H_TRUE(h == fnv(FNV0, body, n), "curl got the 4 MiB body");
	close_wait(&t, id, 0);
	tl_close(t.loop, lh, 3);
	free(body);
	tl_tls_config_unref(sc);
	tt_fini(&t, fds);
}

/* =====================================================================
 * Registration and main
 * ===================================================================== */

struct test_def {
	const char *suite, *name;
	void (*fn)(void);
};
#define T(s, f) {s, #f, f}

static const struct test_def tests[] = {
	T("own", test_basic_13),
	T("own", test_basic_12),
	T("own", test_large),
	T("own", test_resume_13),
	T("own", test_resume_12),
	T("own", test_verify_refused),
	T("own", test_sni),
	T("own", test_mtls),
	T("own", test_slow_handshake),
	T("own", test_truncation),
	T("own", test_not_tls),
	T("own", test_key_update),
	T("own", test_close_during_handshake),
	T("own", test_ids_disjoint),
	T("own", test_name_copied),
	T("own", test_lease_quota),
	T("own", test_fragmented),
	T("own", test_read_stop_deadline),
	T("own", test_config),
	T("own", test_move_13_aes128),
	T("own", test_move_13_aes256),
	T("own", test_move_13_chacha),
	T("own", test_move_12_aes128),
	T("own", test_move_12_chacha),
	T("own", test_move_half_closed_13),
	T("own", test_move_half_closed_12),
	T("peer", test_sclient_13),
	T("peer", test_sclient_12),
	T("peer", test_sclient_other_keys),
	T("peer", test_sserver_13),
	T("peer", test_sserver_12),
	T("peer", test_sclient_resume),
	T("peer", test_sclient_alpn),
	T("peer", test_sserver_refused),
	T("peer", test_sclient_sni),
	T("peer", test_sclient_mtls),
	T("peer", test_sclient_key_update),
	T("peer", test_sclient_truncated),
	T("peer", test_peer_large),
	T("peer", test_sclient_ocsp),
	T("peer", test_sclient_no_renegotiation),
	T("peer", test_curl),
	{NULL, NULL, NULL},
};

static void remove_certs(void)
{
	char cmd[700];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
	if (certs[0] && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", certs);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
	if (argc < 2) {
		fprintf(stderr, "usage: test_tls CERTS_SCRIPT [FILTER...]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	tl_loop *l = NULL;
	tl_config cfg;
	tl_config_init(&cfg);
	int rc = tl_loop_new(&l, &cfg);
	const char *env = getenv("TL_DRIVER");
	if (rc == -ENOTSUP) {
		printf("SKIP all: driver %s unavailable (-ENOTSUP)\n", env ? env : "(default)");
		return 77;
	}
	if (rc != 0) {
		fprintf(stderr, "tl_loop_new failed: %d%s\n", rc, h_errname(rc));
		return 1;
	}
	have_os = (tl_loop_caps(l) & TL_CAP_OS) != 0;
	/* The pool's threads and the library's lazy state exist before the
	 * first descriptor count (a config load starts the pool). */
	tl_tls_ctx *x = NULL;
	tl_tls_ctx_config cc;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TAG;
	if (tl_tls_ctx_new(l, &cc, &x) == -ENOTSUP) {
		printf("SKIP all: built without TLS (-Dtls=disabled)\n");
		tl_loop_close(l);
		return 77;
	}
	tl_tls_ctx_destroy(x);
	tl_pool_launch(NULL);
	printf("tls suite: driver %s (TL_DRIVER=%s)\n", tl_loop_driver(l), env ? env : "unset");
	tl_loop_close(l);

	char tmpl[] = "/tmp/turnloop-tls-XXXXXX";
	const char *tmp = mkdtemp(tmpl);
	if (!tmp) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(certs, sizeof certs, "%s", tmp);
	atexit(remove_certs);
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "sh '%s' '%s' >'%s/certs.log' 2>&1", argv[1], certs, certs);
	if (system(cmd) != 0) {
		snprintf(cmd, sizeof cmd, "cat '%s/certs.log' >&2", certs);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log)\n");
		fprintf(stderr, "test_tls: %s could not make the certificates\n", argv[1]);
		return 1;
	}

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite suite = NULL;
	const char *cur = NULL;
	int registered = 0;
	for (const struct test_def *td = tests; td->fn; td++) {
		char full[160];
		snprintf(full, sizeof full, "%s/%s", td->suite, td->name);
		int sel = argc < 3;
		for (int i = 2; i < argc; i++)
			sel |= strstr(full, argv[i]) != NULL;
		if (!sel)
			continue;
		if (!cur || strcmp(cur, td->suite) != 0) {
			suite = CU_add_suite(td->suite, NULL, NULL);
			cur = td->suite;
		}
		if (!suite || !CU_add_test(suite, td->name, td->fn))
			return 1;
		registered++;
	}
	if (!registered) {
		fprintf(stderr, "no test matches the filter\n");
		return 1;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned run = CU_get_number_of_tests_run();
	unsigned failed = CU_get_number_of_tests_failed();
	unsigned failures = CU_get_number_of_failures();
	CU_cleanup_registry();
	alarm(0);
	printf("\ntls suite (%s): %u run, %u failed (%u failed assertions), %d skipped\n",
	       env ? env : "default driver", run, failed, failures, h_skip_count());
	if (failed || failures)
		return 1;
	if (run > 0 && (unsigned)h_skip_count() == run)
		return 77;
	return 0;
}
