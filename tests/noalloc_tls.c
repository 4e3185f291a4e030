/* tests/noalloc_tls.c: the TLS layer's steady state allocates nothing of its own; what GnuTLS allocates per handshake and per record is counted and printed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <turnloop/loop.h>
#include <turnloop/tls.h>

/*
 * Usage: noalloc_tls CERTS_SCRIPT  (TL_DRIVER picks the driver)
 *
 * Exit 0 when the measured phases made no allocator call of ours (and
 * none that libc made for us), 1 otherwise or on an error, 77 in
 * sanitizer builds (the sanitizer owns malloc).
 *
 * Every allocator call is attributed by its call stack: to the first frame
 * that is neither this file's wrapper nor libc. A frame in this executable
 * (the layer, the loop and the test are linked in statically) is ours; a
 * frame in a shared library other than libc (libgnutls, libnettle,
 * libhogweed, libgmp, libtasn1, ...) is the TLS library's; a call whose
 * whole stack is libc is libc's. Only the library's may be nonzero.
 *
 * Phase 1: 300 full TLS 1.3 handshakes, each a new loopback connection
 * between a client and a server session of ours on one loop, with a
 * request and an answer, close_notify both ways, and both closes (so a
 * handshake's count covers both of its sides). Phase 2: one session pair,
 * 20,000 round trips of 1 KiB (one record each way) and 200 writes of
 * 256 KiB (16 records each way).
 */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#ifdef SANITIZED
int main(void)
{
	printf("SKIP noalloc_tls: sanitizer build (the sanitizer owns the allocator)\n");
	return 77;
}
#else

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern char __executable_start[], etext[];

enum { WHO_OURS, WHO_LIB, WHO_LIBC, WHO_N };
static int counting;
static __thread int inside;
static unsigned long calls[WHO_N];
static void *libc_base;
static char where_ours[512]; /* the first stack of ours, for the message */

/* Attribute a call whose direct caller is ra: most come straight from the
 * library or from us; only what libc allocates for someone (strdup, ...)
 * needs the stack walked. */
static int who(void *ra)
{
	Dl_info d0;
	if (!((uintptr_t)ra >= (uintptr_t)__executable_start && (uintptr_t)ra < (uintptr_t)etext) &&
	    dladdr(ra, &d0) && d0.dli_fbase != libc_base)
		return WHO_LIB;
	void *bt[16];
	int n = backtrace(bt, 16);
	for (int i = 2; i < n; i++) { /* 0: who, 1: the wrapper */
		uintptr_t a = (uintptr_t)bt[i];
		if (a >= (uintptr_t)__executable_start && a < (uintptr_t)etext) {
			if (!where_ours[0]) {
				char **s = backtrace_symbols(bt, n);
				size_t k = 0;
				for (int j = 2; s && j < n && k < sizeof where_ours - 80; j++)
					k += (size_t)snprintf(where_ours + k, sizeof where_ours - k, "  %s\n", s[j]);
				__libc_free(s);
			}
			return WHO_OURS;
		}
		Dl_info d;
		if (dladdr(bt[i], &d) && d.dli_fbase != libc_base)
			return WHO_LIB;
	}
	return WHO_LIBC;
}

static void count(void *ra)
{
	if (!counting || inside)
		return;
	inside = 1;
	calls[who(ra)]++;
	inside = 0;
}

void *malloc(size_t n)
{
	count(__builtin_return_address(0));
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	count(__builtin_return_address(0));
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	count(__builtin_return_address(0));
	return __libc_realloc(p, n);
}

void free(void *p)
{
	__libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	count(__builtin_return_address(0));
	void *p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	count(__builtin_return_address(0));
	return __libc_memalign(align, n);
}

/* ---- a small host ---- */

#define TAG 0x5a
static tl_loop *loop;
static tl_tls_ctx *x;
static tl_completion tls_done[4096];
static uint32_t ntls;
static tl_completion loop_done[256];
static uint32_t nloop;

static _Noreturn void die(const char *what, long long v)
{
	fprintf(stderr, "noalloc_tls: %s: %lld\n", what, v);
	exit(1);
}

/* One turn; the layer's completions into tls_done, the others into loop_done. */
static void turn(void)
{
	tl_completion out[128];
	int n = tl_turn(loop, tl_tls_pending(x) ? 0 : 5000000, out, 128, NULL);
	if (n < 0 && n != -EINTR)
		die("turn", n);
	for (int i = 0; i < n; i++)
		if (!tl_tls_complete(x, &out[i])) {
			if (nloop == 256)
				die("loop log full", 0);
			loop_done[nloop++] = out[i];
		}
	int m;
	while ((m = tl_tls_poll(x, out, 128)) > 0)
		for (int i = 0; i < m; i++) {
			if (ntls == 4096)
				die("tls log full", 0);
			tls_done[ntls++] = out[i];
		}
}

/* What the sessions' reads delivered so far (by session id). */
static uint64_t got_s, got_c, sid_s, sid_c;

static void account(void)
{
	for (uint32_t i = 0; i < ntls; i++) {
		tl_completion *c = &tls_done[i];
		if (c->kind == TL_K_READ && (c->flags & TL_F_LEASE) && c->u.read.lease.data) {
			if (c->handle.v == sid_s)
				got_s += (uint64_t)c->result;
			else if (c->handle.v == sid_c)
				got_c += (uint64_t)c->result;
			tl_tls_lease_release(x, c->u.read.lease.id);
			c->u.read.lease.data = NULL;
		}
	}
}

/* The terminal of op in tls_done (turning until it comes), taken out of
 * the log; the reads' leases are accounted for on the way. */
static int64_t wait_op(tl_op op)
{
	for (int k = 0; k < 20000; k++) {
		account();
		for (uint32_t i = 0; i < ntls; i++) {
			tl_completion *c = &tls_done[i];
			if (c->op.v == op.v && (c->flags & TL_F_TERMINAL)) {
				int64_t r = c->result;
				memmove(tls_done + i, tls_done + i + 1, (ntls - i - 1) * sizeof *tls_done);
				ntls--;
				return r;
			}
		}
		turn();
	}
	die("an op did not end", 0);
	return 0;
}

/* Turn until *bytes (got_s or got_c) reaches n, leases given back as they
 * come. */
static void read_bytes(uint64_t *bytes, uint64_t n)
{
	for (int k = 0; k < 200000 && *bytes < n; k++) {
		turn();
		account();
		/* keep the log short: reads are accounted for, writes that
		 * completed need nothing more */
		uint32_t j = 0;
		for (uint32_t i = 0; i < ntls; i++) {
			tl_completion *c = &tls_done[i];
			if (c->kind == TL_K_WRITE && c->result < 0)
				die("write", c->result);
			if ((c->kind == TL_K_READ && !(c->flags & TL_F_TERMINAL)) || c->kind == TL_K_WRITE)
				continue;
			tls_done[j++] = *c;
		}
		ntls = j;
	}
	if (*bytes < n) {
		for (uint32_t i = 0; i < ntls; i++)
			fprintf(stderr, "  left: kind %u result %lld flags %#x\n", tls_done[i].kind,
				(long long)tls_done[i].result, tls_done[i].flags);
		tl_tls_info in;
		tl_tls_id ids[2] = {{sid_s}, {sid_c}};
		for (int k = 0; k < 2; k++)
			if (tl_tls_info_get(x, ids[k], &in) == 0)
				fprintf(stderr, "  session %d: error %d reason %d\n", k, in.error, in.reason);
		tl_tls_stats st;
		tl_tls_stats_get(x, &st);
		fprintf(stderr, "  stats: plain_held %u out_busy %u waits %llu\n", st.plain_held, st.out_busy,
			(unsigned long long)st.waits);
		tl_loop_stats ls;
		tl_loop_stats_get(loop, &ls);
		fprintf(stderr, "  loop: paused %u leases_out %u ops %u handles %u\n", ls.paused, ls.leases_out, ls.ops, ls.handles);
		die("bytes missing", (long long)(n - *bytes));
	}
}

static tl_handle listener;
static uint16_t port;

static void connect_pair(tl_handle *srv, tl_handle *cli)
{
	tl_addr a;
	tl_op cop, aop;
	tl_addr_parse(&a, "127.0.0.1", port);
	nloop = 0;
	if (tl_accept(loop, listener, 1, &aop) < 0 || tl_tcp_connect(loop, &a, 0, 2, cli, &cop) < 0)
		die("connect", 0);
	int got = 0;
	for (int k = 0; k < 20000 && got < 2; k++) {
		turn();
		got = 0;
		for (uint32_t i = 0; i < nloop; i++) {
			if (loop_done[i].kind == TL_K_ACCEPT) {
				if (loop_done[i].result < 0)
					die("accept", loop_done[i].result);
				*srv = loop_done[i].u.accept.conn;
				got++;
			}
			if (loop_done[i].kind == TL_K_CONNECT) {
				if (loop_done[i].result < 0)
					die("connect", loop_done[i].result);
				got++;
			}
		}
	}
	if (got < 2)
		die("no connection", 0);
	nloop = 0;
}

static int closed_count(void)
{
	int n = 0;
	for (uint32_t i = 0; i < ntls; i++)
		n += tls_done[i].kind == TL_K_CLOSED;
	return n;
}

/* One connection: handshake, a request and an answer, close_notify each
 * way, both closed. */
static void one_connection(tl_tls_config *sc, tl_tls_config *cc, tl_tls_id *keep_s, tl_tls_id *keep_c)
{
	tl_handle hs, hc;
	tl_tls_id s, c;
	tl_op os, oc, w, rs, rc;
	static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
	static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
	tl_tls_client_opts co = {.server_name = "localhost"};

	connect_pair(&hs, &hc);
	if (tl_tls_server(x, sc, hs, 10, &s) < 0 || tl_tls_client(x, cc, hc, &co, 11, &c) < 0 ||
	    tl_tls_handshake(x, s, 0, 20, &os) < 0 || tl_tls_handshake(x, c, 0, 21, &oc) < 0)
		die("session start", 0);
	if (wait_op(os) != 0 || wait_op(oc) != 0)
		die("handshake", 0);
	sid_s = s.v;
	sid_c = c.v;
	got_s = got_c = 0;
	if (tl_tls_read_start(x, s, 30, &rs) < 0 || tl_tls_read_start(x, c, 31, &rc) < 0)
		die("read start", 0);
	if (keep_s) {
		*keep_s = s;
		*keep_c = c;
		return;
	}
	if (tl_tls_write(x, c, req, sizeof req - 1, 40, &w) < 0 || wait_op(w) != (int64_t)sizeof req - 1)
		die("request", 0);
	read_bytes(&got_s, sizeof req - 1);
	if (tl_tls_write(x, s, ans, sizeof ans - 1, 41, &w) < 0 || wait_op(w) != (int64_t)sizeof ans - 1)
		die("answer", 0);
	read_bytes(&got_c, sizeof ans - 1);
	if (tl_tls_shutdown(x, c, 42, &w) < 0 || wait_op(w) != 0 || wait_op(rs) != 0)
		die("client close_notify", 0);
	if (tl_tls_shutdown(x, s, 43, &w) < 0 || wait_op(w) != 0 || wait_op(rc) != 0)
		die("server close_notify", 0);
	if (tl_tls_close(x, s, 0, 50) < 0 || tl_tls_close(x, c, 0, 51) < 0)
		die("close", 0);
	for (int k = 0; k < 20000 && closed_count() < 2; k++)
		turn();
	if (closed_count() < 2)
		die("not closed", 0);
	ntls = 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: noalloc_tls CERTS_SCRIPT\n");
		return 2;
	}
	Dl_info d;
	void *bt[4];
	backtrace(bt, 4); /* loads the unwinder before counting starts */
	if (!dladdr((void *)__libc_malloc, &d))
		die("dladdr", 0);
	libc_base = d.dli_fbase;

	char dir[] = "/tmp/turnloop-noalloc-tls-XXXXXX", cmd[1200];
	if (!mkdtemp(dir))
		die("mkdtemp", errno);
	snprintf(cmd, sizeof cmd, "sh '%s' '%s' >/dev/null 2>&1", argv[1], dir);
	if (system(cmd) != 0)
		die("certificates", 0);

	tl_config lc;
	tl_config_init(&lc);
	int r = tl_loop_new(&loop, &lc);
	if (r == -ENOTSUP) {
		printf("SKIP noalloc_tls: driver unavailable\n");
		return 77;
	}
	if (r < 0)
		die("loop", r);
	tl_tls_ctx_config cc;
	tl_tls_ctx_config_init(&cc);
	cc.token_tag = TAG;
	cc.loop_leases = lc.pooled_buffers;
	if ((r = tl_tls_ctx_new(loop, &cc, &x)) < 0)
		die("ctx", r);
	char crt[600], key[600], ca[600], err[256];
	snprintf(crt, sizeof crt, "%s/server.pem", dir);
	snprintf(key, sizeof key, "%s/server.key", dir);
	snprintf(ca, sizeof ca, "%s/ca.pem", dir);
	tl_tls_cert c1 = {.cert_file = crt, .key_file = key};
	tl_tls_settings ss = {.role = TL_TLS_SERVER, .certs = &c1, .ncerts = 1};
	tl_tls_settings cs = {.role = TL_TLS_CLIENT, .ca_file = ca, .flags = TL_TLS_NO_SYSTEM_CA};
	tl_tls_config *sc, *ccfg;
	if (tl_tls_config_new(&ss, &sc, err, sizeof err) < 0 || tl_tls_config_new(&cs, &ccfg, err, sizeof err) < 0) {
		fprintf(stderr, "noalloc_tls: %s\n", err);
		return 1;
	}
	tl_addr a;
	tl_addr_parse(&a, "127.0.0.1", 0);
	if (tl_tcp_listen(loop, &a, NULL, &listener) < 0 || tl_local_addr(loop, listener, &a) < 0)
		die("listen", 0);
	port = ntohs(a.in.sin_port);

	/* warm-up: every lazy first (the library's per-thread state, the
	 * context's priority cache of each config) */
	for (int i = 0; i < 5; i++)
		one_connection(sc, ccfg, NULL, NULL);

	const int hs = 300;
	memset(calls, 0, sizeof calls);
	counting = 1;
	for (int i = 0; i < hs; i++)
		one_connection(sc, ccfg, NULL, NULL);
	counting = 0;
	unsigned long hs_calls[WHO_N];
	memcpy(hs_calls, calls, sizeof calls);

	tl_tls_id s, c;
	one_connection(sc, ccfg, &s, &c);
	static uint8_t small[1024], big[256 << 10];
	memset(small, 's', sizeof small);
	memset(big, 'b', sizeof big);
	uint64_t want = 0;
	tl_op w;
	const int rts = 20000, bigs = 200;
	memset(calls, 0, sizeof calls);
	counting = 1;
	for (int i = 0; i < rts; i++) {
		if (tl_tls_write(x, c, small, sizeof small, 40, &w) < 0)
			die("write", i);
		want += sizeof small;
		read_bytes(&got_s, want);
		if (tl_tls_write(x, s, small, sizeof small, 41, &w) < 0)
			die("write", i);
		read_bytes(&got_c, want);
	}
	for (int i = 0; i < bigs; i++) {
		if (tl_tls_write(x, c, big, sizeof big, 42, &w) < 0 || tl_tls_write(x, s, big, sizeof big, 43, &w) < 0)
			die("write", i);
		want += sizeof big;
		read_bytes(&got_s, want);
		read_bytes(&got_c, want);
	}
	counting = 0;
	uint64_t records = 2ull * rts + 2ull * bigs * (sizeof big / 16384);

	printf("noalloc_tls (%s): ours %lu, libc %lu in %d handshakes and %llu records; "
	       "GnuTLS: %.1f allocations per handshake (client and server), %.2f per record (sealed and opened)\n",
	       tl_loop_driver(loop), hs_calls[WHO_OURS] + calls[WHO_OURS], hs_calls[WHO_LIBC] + calls[WHO_LIBC], hs,
	       (unsigned long long)records, (double)hs_calls[WHO_LIB] / hs, (double)calls[WHO_LIB] / (double)records);
	if (where_ours[0])
		fprintf(stderr, "noalloc_tls: an allocation of ours, from:\n%s", where_ours);
	int bad = hs_calls[WHO_OURS] + calls[WHO_OURS] + hs_calls[WHO_LIBC] + calls[WHO_LIBC] != 0;
	tl_tls_close(x, s, 0, 60);
	tl_tls_close(x, c, 0, 61);
	for (int k = 0; k < 20000 && closed_count() < 2; k++)
		turn();
	tl_loop_destroy(loop);
	tl_tls_ctx_destroy(x);
	tl_tls_config_unref(sc);
	tl_tls_config_unref(ccfg);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "noalloc_tls: could not remove %s\n", dir);
	return bad;
}
#endif
