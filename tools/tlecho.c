/* tools/tlecho.c: a TCP echo server on one turnloop loop, or on one loop per shard with --shards/--cpus (the echo benchmark's subject); over TLS with --tls-cert/--tls-key; datagrams with --udp. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "turnloop.h"
#include "cli.h"
#include "util.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tlecho -p PORT [--host IP] [--driver epoll|uring] [--buffers N] "
		   "[--buffer-size BYTES] [--shards N] [--cpus LIST] [--reuseport]\n"
		   "              [--tls-cert FILE --tls-key FILE] [--udp]\n"
		   "  --reuseport  share the port with another process already listening on it\n"
		   "               (without it, tlecho refuses to start on a port in use)\n"
		   "  --tls-cert, --tls-key  echo over TLS (1.2 and 1.3) with this PEM certificate\n"
		   "               (its chain after it) and key\n"
		   "  --udp        echo UDP datagrams instead, each back to its sender from the\n"
		   "               address it was sent to (one loop; longer than --buffer-size: cut)\n");
}

/* What one completion asks of an echo server; shared by the single loop and
 * the shards. Returns 1 for a new connection. */
static inline int echo_one(tl_loop *loop, const tl_completion *c, uint64_t *bytes)
{
	tl_op op;
	int64_t k;

	switch (c->kind) {
	case TL_K_ACCEPT:
		if (c->result < 0)
			return 0; /* e.g. EMFILE: accepting resumes by itself */
		if (tl_read_start(loop, c->u.accept.conn, 0, &op) < 0)
			tl_close(loop, c->u.accept.conn, 0);
		return 1;
	case TL_K_READ:
		if (c->result > 0) {
			/* Echo straight from the lease. Where the driver sends
			 * inside tl_write anyway (epoll), tl_try_write first:
			 * the same send without an operation or a completion,
			 * and the lease is back at once. What the socket does
			 * not take goes by tl_write, whose completion gives the
			 * lease back (the token carries its id). */
			const uint8_t *p = c->u.read.lease.data;
			uint32_t n = (uint32_t)c->result;
			*bytes += n;
			k = (tl_loop_caps(loop) & TL_CAP_WRITE_AT_ONCE) ? tl_try_write(loop, c->handle, p, n)
									: 0;
			if (k == n || (k < 0 && k != -EAGAIN)) {
				tl_lease_release(loop, c->u.read.lease.id);
				if (k < 0)
					tl_close(loop, c->handle, 0);
				return 0;
			}
			k = k < 0 ? 0 : k;
			if (tl_write(loop, c->handle, p + k, n - (uint32_t)k, c->u.read.lease.id,
				     &op) < 0) {
				tl_lease_release(loop, c->u.read.lease.id);
				tl_close(loop, c->handle, 0);
			}
		} else if (c->flags & TL_F_TERMINAL) {
			tl_close(loop, c->handle, 0);
		}
		return 0;
	case TL_K_WRITE:
		tl_lease_release(loop, (uint32_t)c->token);
		if (c->result < 0)
			tl_close(loop, c->handle, 0);
		return 0;
	default:
		return 0;
	}
}

/* ---- datagrams (--udp) ---- */

/* A send's token: the lease it echoes, or none (an empty datagram). */
#define UDP_NO_LEASE 0xffffffffu

/* Echo every datagram of h from its lease, back to its sender from the
 * address it was sent to; the lease goes back when its send completes.
 * Returns the datagrams echoed. */
static uint64_t udp_one(tl_loop *loop, tl_handle h, const tl_completion *c, uint64_t *bytes)
{
	tl_op op;
	if (c->kind == TL_K_SEND) {
		if (c->token != UDP_NO_LEASE)
			tl_lease_release(loop, (uint32_t)c->token);
		return 0;
	}
	if (c->kind != TL_K_RECV)
		return 0;
	if (c->flags & TL_F_TERMINAL) {
		/* An error ended the receive (not a stop: tlecho never stops it). */
		if (!stop_flag && tl_udp_recv_start(loop, h, 0, &op) < 0)
			stop_flag = 1;
		return 0;
	}
	int leased = !!(c->flags & TL_F_LEASE);
	tl_udp_msg m = {.buf = leased ? c->u.recv.lease.data : (const uint8_t *)"",
			.len = (uint32_t)c->result, .to = &c->u.recv.from,
			.from = c->u.recv.to.sa.sa_family ? &c->u.recv.to : NULL};
	uint64_t tok = leased ? c->u.recv.lease.id : UDP_NO_LEASE;
	if (tl_udp_sendmsg(loop, h, &m, tok, &op) < 0) {
		if (leased)
			tl_lease_release(loop, c->u.recv.lease.id);
		return 0;
	}
	*bytes += (uint64_t)c->result;
	return 1;
}

static int run_udp(const tl_config *cfg, const struct tlecho_opts *o)
{
	tl_loop *loop;
	int r = tl_loop_new(&loop, cfg);
	if (r < 0) {
		fprintf(stderr, "tlecho: cannot create the loop: %s\n", tl_strerror(r));
		return 1;
	}
	tl_handle h;
	tl_op op;
	tl_udp_opts uo = {.flags = TL_UDP_PKTINFO | (o->reuseport ? TL_UDP_REUSEPORT : 0)};
	/* The socket is the loop's one handle, so its lease cap (which keeps
	 * one handle from starving the others) is the whole pool: with the
	 * default 16, a turn answered 16 datagrams at most and the DPDK
	 * driver sent them in bursts of 16 (docs/PERFORMANCE.md). */
	if ((r = tl_udp_bind_opts(loop, &o->addr, &uo, &h)) < 0 ||
	    (r = tl_handle_caps(loop, h, cfg->pooled_buffers, 0)) < 0 ||
	    (r = tl_udp_recv_start(loop, h, 0, &op)) < 0) {
		fprintf(stderr, "tlecho: cannot bind %s:%u (UDP): %s\n", o->host, o->port,
			tl_strerror(r));
		tl_loop_destroy(loop);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	fprintf(stderr, "tlecho: listening on %s:%u (UDP), driver %s\n", o->host, o->port,
		tl_loop_driver(loop));
	static tl_completion out[512];
	uint64_t dgrams = 0, bytes = 0;
	while (!stop_flag) {
		int n = tl_turn(loop, 100 * 1000000, out, 512, NULL);
		if (n < 0 && n != -EINTR) {
			fprintf(stderr, "tlecho: turn failed: %s\n", tl_strerror(n));
			break;
		}
		for (int i = 0; i < n; i++)
			dgrams += udp_one(loop, h, &out[i], &bytes);
	}
	fprintf(stderr, "tlecho: %llu datagrams, %llu bytes echoed\n", (unsigned long long)dgrams,
		(unsigned long long)bytes);
	tl_loop_destroy(loop);
	return 0;
}

/* ---- over TLS (--tls-cert, --tls-key): the TLS layer's simplest user ---- */

/* The layer's tokens on the loop carry this top byte (with the sharded
 * runtime, the index of the handler that hands them to the layer). */
#define TLS_TAG 1
#define HANDSHAKE_NS (10 * 1000000000ull)

/* One loop's TLS: its context and the config every loop shares. */
struct echo_tls {
	tl_tls_ctx *x;
	tl_tls_config *cfg;
};

static int tls_ctx(tl_loop *loop, struct echo_tls *t)
{
	tl_tls_ctx_config cc;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TLS_TAG;
	return tl_tls_ctx_new(loop, &cc, &t->x);
}

/* A new connection: its TLS session and handshake; a failure closes it. */
static void tls_accept(tl_loop *loop, struct echo_tls *t, tl_handle conn)
{
	tl_tls_id id;
	tl_op op;
	if (tl_tls_server(t->x, t->cfg, conn, 0, &id) < 0) {
		tl_close(loop, conn, 0);
		return;
	}
	if (tl_tls_handshake(t->x, id, tl_now(loop) + HANDSHAKE_NS, 0, &op) < 0)
		tl_tls_close(t->x, id, 0, 0);
}

/* What one TLS completion asks of the echo: start reading after the
 * handshake, write back each plaintext lease (given back once written),
 * close at the end of the input or on any error. */
static void tls_one(struct echo_tls *t, const tl_completion *c, uint64_t *bytes)
{
	tl_tls_id id = {c->handle.v};
	tl_op op;

	switch (c->kind) {
	case TL_K_TLS_HANDSHAKE:
		if (c->result < 0 || tl_tls_read_start(t->x, id, 0, &op) < 0)
			tl_tls_close(t->x, id, 0, 0);
		break;
	case TL_K_READ:
		if (c->result > 0) {
			*bytes += (uint64_t)c->result;
			if (tl_tls_write(t->x, id, c->u.read.lease.data, (uint32_t)c->result,
					 c->u.read.lease.id, &op) < 0) {
				tl_tls_lease_release(t->x, c->u.read.lease.id);
				tl_tls_close(t->x, id, 0, 0);
			}
		} else if (c->flags & TL_F_TERMINAL) {
			tl_tls_close(t->x, id, 0, 0); /* -EINVAL if an error closed it already */
		}
		break;
	case TL_K_WRITE:
		tl_tls_lease_release(t->x, (uint32_t)c->token);
		if (c->result < 0)
			tl_tls_close(t->x, id, 0, 0);
		break;
	default:
		break;
	}
}

/* Everything the layer has for the host, handed to tls_one. */
static void tls_drain(struct echo_tls *t, uint64_t *bytes)
{
	tl_completion out[64];
	int n;
	while ((n = tl_tls_poll(t->x, out, 64)) > 0)
		for (int i = 0; i < n; i++)
			tls_one(t, &out[i], bytes);
}

/* ---- one loop per shard (--shards, --cpus) ---- */

struct echo_shards {
	tl_addr addr;
	const char *host;
	uint32_t port;
	int idx_conns, idx_bytes;
	struct echo_count { uint64_t conns, bytes; char pad[48]; } *count;
	tl_tls_config *tls_cfg;      /* NULL without --tls-cert */
	struct echo_tls *tls;        /* one per shard */
	uint32_t next;               /* shard 0's: where the next connection goes */
};

/* Where the OS has no SO_REUSEPORT (Windows), shard 0 alone listens and
 * hands each accepted connection to the next shard in turn
 * (tl_shard_migrate: the socket moves before its first read); the others
 * serve what they are handed. */
#define HANDOFF_TAG 2

static int shard_launch(tl_shard *s, void *arg)
{
	struct echo_shards *e = arg;
	tl_loop *loop = tl_shard_loop(s);
	tl_listen_opts lo = {.backlog = 4096, .reuseport = 1};
	tl_handle lh;
	tl_op op;
	int r;

	/* Every shard owns a listener on the same address; the kernel
	 * spreads connections across them (SO_REUSEPORT). Without it, shard
	 * 0's listener is the one (HANDOFF_TAG). */
	r = tl_tcp_listen(loop, &e->addr, &lo, &lh);
	if (r == -ENOTSUP && tl_shard_id(s) != 0)
		r = 0;
	else if (r == -ENOTSUP && (lo.reuseport = 0, (r = tl_tcp_listen(loop, &e->addr, &lo, &lh)) == 0))
		r = tl_accept_start(loop, lh, tl_token(HANDOFF_TAG, 0), &op);
	else if (r == 0)
		r = tl_accept_start(loop, lh, 0, &op);
	if (r < 0)
		return r;
	if (e->tls_cfg) {
		e->tls[tl_shard_id(s)].cfg = e->tls_cfg;
		if ((r = tls_ctx(loop, &e->tls[tl_shard_id(s)])) < 0)
			return r;
	}
	return 0;
}

/* Counts what a completion did for the stats: a connection, bytes. */
static void shard_count(tl_shard *s, struct echo_shards *e, int conn, uint64_t before)
{
	struct echo_count *n = &e->count[tl_shard_id(s)];
	if (conn) {
		n->conns++;
		tl_shard_counter_add(s, e->idx_conns, 1);
	}
	if (n->bytes != before)
		tl_shard_counter_add(s, e->idx_bytes, n->bytes - before);
}

/* The layer's own loop completions (tokens tl_token(TLS_TAG, ...)). */
static void shard_tls_completion(tl_shard *s, const tl_completion *c)
{
	struct echo_shards *e = tl_shard_arg(s);
	tl_tls_complete(e->tls[tl_shard_id(s)].x, c);
}

/* After each pass's completions: the TLS completions they made. */
static int shard_tls_pass(tl_shard *s, void *arg)
{
	struct echo_shards *e = arg;
	struct echo_tls *t = &e->tls[tl_shard_id(s)];
	uint64_t before = e->count[tl_shard_id(s)].bytes;
	if (!t->x)
		return 0;
	tls_drain(t, &e->count[tl_shard_id(s)].bytes);
	shard_count(s, e, 0, before);
	return tl_tls_pending(t->x) != 0;
}

static void shard_completion(tl_shard *s, const tl_completion *c)
{
	struct echo_shards *e = tl_shard_arg(s);
	struct echo_count *n = &e->count[tl_shard_id(s)];
	uint64_t before;
	tl_completion acc;

	if (c->kind == TL_K_MESH) {
		/* A connection shard 0 handed here: served as if accepted here.
		 * (The hand-off's result, back on shard 0, needs nothing: a
		 * connection the target could not take it closed.) */
		if (!(c->aux & TL_MESH_MIGRATED) || (c->aux & TL_MESH_RESULT))
			return;
		memset(&acc, 0, sizeof acc);
		acc.kind = TL_K_ACCEPT;
		acc.u.accept.conn = c->u.mesh.conn;
		c = &acc;
	}
	before = n->bytes;
	if (e->tls_cfg) {
		if (c->kind == TL_K_ACCEPT && c->result == 0) {
			tls_accept(tl_shard_loop(s), &e->tls[tl_shard_id(s)], c->u.accept.conn);
			shard_count(s, e, 1, before);
		}
		return;
	}
	if (echo_one(tl_shard_loop(s), c, &n->bytes)) {
		n->conns++;
		tl_shard_counter_add(s, e->idx_conns, 1);
	}
	if (n->bytes != before)
		tl_shard_counter_add(s, e->idx_bytes, n->bytes - before);
}

/* Shard 0's accepts without SO_REUSEPORT (HANDOFF_TAG): of n connections
 * one stays, the others go to the next shards in turn; one the mesh cannot
 * take now (-ENOBUFS: a full ring or no credit) is served here. */
static void shard_handoff(tl_shard *s, const tl_completion *c)
{
	struct echo_shards *e = tl_shard_arg(s);
	uint32_t t = e->next++ % tl_runtime_shards(tl_shard_runtime(s));

	if (c->kind == TL_K_ACCEPT && c->result == 0 && t != 0 &&
	    tl_shard_migrate(s, c->u.accept.conn, t, 0, 0) == 0)
		return;
	shard_completion(s, c);
}

static int run_shards(const tl_config *cfg, const char *host, uint32_t port, uint32_t shards,
		      const char *cpus, tl_tls_config *tls_cfg)
{
	struct echo_shards e = {.host = host, .port = port, .tls_cfg = tls_cfg};
	tl_runtime_config rc;
	tl_runtime *rt;
	int r;

	if (tl_addr_parse(&e.addr, host, (uint16_t)port) < 0) {
		fprintf(stderr, "tlecho: bad address '%s'\n", host);
		return 2;
	}
	tl_runtime_config_init(&rc);
	rc.plan.shards = shards;
	rc.plan.cpus = cpus;
	rc.loop = *cfg;
	rc.on_launch = shard_launch;
	rc.on_completion = shard_completion;
	rc.handlers[HANDOFF_TAG] = shard_handoff;
	if (tls_cfg) {
		rc.handlers[TLS_TAG] = shard_tls_completion;
		rc.on_pass = shard_tls_pass;
	}
	rc.arg = &e;
	r = tl_runtime_new(&rt, &rc);
	if (r < 0) {
		/* Which part of the plan (the options or TL_CPUS, TL_SHARDS,
		 * TL_SMT) cannot be met, and why. */
		const char *why = tl_error_detail();

		if (shards)
			fprintf(stderr, "tlecho: cannot plan %u shard%s%s%s: %s\n", shards,
				shards == 1 ? "" : "s", cpus ? " on cpus " : "", cpus ? cpus : "",
				why[0] ? why : tl_strerror(r));
		else
			fprintf(stderr, "tlecho: cannot plan the shards%s%s: %s\n",
				cpus ? " on cpus " : "", cpus ? cpus : "", why[0] ? why : tl_strerror(r));
		return r == -EINVAL ? 2 : 1;
	}
	e.count = calloc(tl_runtime_shards(rt), sizeof *e.count);
	e.tls = calloc(tl_runtime_shards(rt), sizeof *e.tls);
	e.idx_conns = tl_runtime_counter(rt, "conns");
	e.idx_bytes = tl_runtime_counter(rt, "bytes");
	if (!e.count || !e.tls || e.idx_conns < 0 || e.idx_bytes < 0) {
		fprintf(stderr, "tlecho: out of memory\n");
		tl_runtime_destroy(rt);
		return 1;
	}
#ifdef SIGPIPE
	signal(SIGPIPE, SIG_IGN);
#endif
	r = tl_runtime_launch(rt);
	if (r < 0) {
		fprintf(stderr, "tlecho: cannot start: %s\n", tl_error_detail());
		tl_runtime_destroy(rt);
		free(e.count);
		free(e.tls);
		return 1;
	}
	tl_driver_info di;
	tl_driver_info_get(&di);
	/* The pid: what tlshard stats takes to read the shards' live stats. */
	fprintf(stderr, "tlecho: listening on %s:%u%s with %u shards, driver %s, pid %lu\n", host,
		port, tls_cfg ? " (TLS)" : "", tl_runtime_shards(rt), di.reason, tl_tool_pid());
	r = tl_runtime_run(rt);
	if (r < 0)
		fprintf(stderr, "tlecho: %s\n", tl_error_detail());
	for (uint32_t i = 0; i < tl_runtime_shards(rt); i++)
		fprintf(stderr, "tlecho: shard %u (cpu %d): %llu connections, %llu bytes echoed\n", i,
			tl_runtime_plan(rt)->shards[i].pu_os_index,
			(unsigned long long)e.count[i].conns, (unsigned long long)e.count[i].bytes);
	uint32_t nshards = tl_runtime_shards(rt);
	tl_runtime_destroy(rt);
	/* the loops are gone: nothing writes from the contexts' buffers now */
	for (uint32_t i = 0; i < nshards; i++)
		tl_tls_ctx_destroy(e.tls[i].x);
	free(e.count);
	free(e.tls);
	return r < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct tlecho_opts o;
	char err[1024];
	tl_config cfg;

	switch (tlecho_parse(argc, argv, &o, err, sizeof err)) {
	case 0:
		break;
	case 1:
		usage(stdout);
		return 0;
	default:
		fprintf(stderr, "tlecho: %s\n", err);
		return 2;
	}
	const char *host = o.host, *cpus = o.cpus;
	uint32_t port = o.port, shards = o.shards;
	tl_addr addr = o.addr;
	if (!o.reuseport && !o.udp) {
		int taken = tl_tool_port_taken(&addr);
		if (taken != 0) {
			if (taken > 0)
				fprintf(stderr, "tlecho: %s:%u is already in use by another process "
						"(--reuseport shares it)\n", host, port);
			else
				fprintf(stderr, "tlecho: cannot listen on %s:%u: %s\n", host, port,
					tl_strerror(taken));
			return 1;
		}
	}
	tl_config_init(&cfg);
	cfg.driver = o.driver;
	cfg.pooled_buffers = o.buffers;
	cfg.pooled_buffer_size = o.buffer_size;
	cfg.max_handles = 16384;
	cfg.max_ops = 65536;
	if (o.udp)
		return run_udp(&cfg, &o);
	struct echo_tls tls = {0};
	if (o.tls_cert) {
		/* read once at start (setup: the loops do not run yet) and
		 * shared by every shard */
		tl_tls_cert c = {.cert_file = o.tls_cert, .key_file = o.tls_key};
		tl_tls_settings ts = {.role = TL_TLS_SERVER, .certs = &c, .ncerts = 1};
		int r = tl_tls_config_new(&ts, &tls.cfg, err, sizeof err);
		if (r < 0) {
			fprintf(stderr, "tlecho: %s\n", err);
			return 1;
		}
	}
	if (shards || cpus) {
		int r = run_shards(&cfg, host, port, shards, cpus, tls.cfg);
		tl_tls_config_unref(tls.cfg);
		return r;
	}
	tl_loop *loop;
	int r = tl_loop_new(&loop, &cfg);
	if (r < 0) {
		tl_driver_info di;
		tl_driver_info_get(&di);
		fprintf(stderr, "tlecho: cannot create the loop: %s%s%s\n", tl_strerror(r),
			di.last_error[0] ? ": " : "", di.last_error);
		return 1;
	}
	if (!(tl_loop_caps(loop) & TL_CAP_NET)) {
		fprintf(stderr, "tlecho: the %s driver reaches no network "
				"(it runs tests, not servers)\n", tl_loop_driver(loop));
		tl_loop_destroy(loop);
		return 1;
	}
	if (tls.cfg && (r = tls_ctx(loop, &tls)) < 0) {
		fprintf(stderr, "tlecho: no TLS context: %s\n", tl_strerror(r));
		tl_loop_destroy(loop);
		return 1;
	}
	tl_handle lh;
	tl_op accept_op;
	tl_listen_opts lo = {.backlog = 4096, .reuseport = o.reuseport};
	if ((r = tl_tcp_listen(loop, &addr, &lo, &lh)) < 0 ||
	    (r = tl_accept_start(loop, lh, 0, &accept_op)) < 0) {
		fprintf(stderr, "tlecho: cannot listen on %s:%u: %s\n", host, port, tl_strerror(r));
		tl_loop_destroy(loop);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
#ifdef SIGPIPE
	signal(SIGPIPE, SIG_IGN);
#endif
	tl_driver_info di;
	tl_driver_info_get(&di);
	fprintf(stderr, "tlecho: listening on %s:%u%s, driver %s\n", host, port, tls.x ? " (TLS)" : "",
		cfg.driver ? tl_loop_driver(loop) : di.reason);
	static tl_completion out[512];
	uint64_t conns = 0, bytes = 0;
	while (!stop_flag) {
		int64_t wait = tls.x && tl_tls_pending(tls.x) ? 0 : 100 * 1000000;
		int n = tl_turn(loop, wait, out, 512, NULL);
		if (n < 0 && n != -EINTR) {
			fprintf(stderr, "tlecho: turn failed: %s\n", tl_strerror(n));
			break;
		}
		for (int i = 0; i < n; i++) {
			if (!tls.x) {
				conns += (uint64_t)echo_one(loop, &out[i], &bytes);
			} else if (!tl_tls_complete(tls.x, &out[i]) && out[i].kind == TL_K_ACCEPT &&
				   out[i].result == 0) {
				tls_accept(loop, &tls, out[i].u.accept.conn);
				conns++;
			}
		}
		if (tls.x)
			tls_drain(&tls, &bytes);
	}
	fprintf(stderr, "tlecho: %llu connections, %llu bytes echoed\n", (unsigned long long)conns,
		(unsigned long long)bytes);
	tl_loop_destroy(loop);
	tl_tls_ctx_destroy(tls.x);
	tl_tls_config_unref(tls.cfg);
	return 0;
}
