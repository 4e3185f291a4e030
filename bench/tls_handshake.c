/* bench/tls_handshake.c: a TLS library's server-side cost per full handshake and per MiB, in memory, against the floor of its own cryptography. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <valgrind/callgrind.h>
#include "tls_bench.h"

/*
 * One executable per library (tls_handshake_openssl, _gnutls, _wolfssl),
 * the same harness in each:
 *
 *   tls_handshake_LIB [options] hs N      N full handshakes (after a warm-up)
 *   tls_handshake_LIB [options] bulk MIB  MIB MiB each way over one session
 *   tls_handshake_LIB floor N             N x (P-256 sign + 2 X25519) by the library
 *   tls_handshake_LIB aead MIB [BITS]     AES-GCM sealing of 16 KiB records
 *
 * Options: --cert F --key F (P-256 ECDSA, PEM; required for hs and bulk),
 * --ca F (loaded into the server's store), --suite NAME (TLS 1.3 suite,
 * default TLS_AES_128_GCM_SHA256), --tls12, --tickets N (default: the
 * library's), --cache (server session cache on), --reuse (one server
 * session object reused), --libctx (OpenSSL: a library context of our
 * own), --no-chain (OpenSSL: SSL_MODE_NO_AUTO_CHAIN), --rec BYTES (bulk
 * write size, default 16384), -v.
 *
 * Both sides run in this thread over in-memory queues; only the server's
 * calls count. Each of them runs inside a function whose name starts with
 * srv_, so that
 *
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='srv_*' \
 *       tls_handshake_openssl --cert c.pem --key k.pem hs 200
 *
 * counts the server's instructions alone (the warm-up is zeroed with a
 * client request, so the total is for the N measured handshakes); floor
 * and aead wrap their work in srv_ functions too. Printed: the server's
 * thread CPU time per handshake (or per MiB each way) and its allocator
 * calls per handshake (malloc, calloc, realloc; counted by interposing
 * them, server calls only). bench/tls-compare runs every library and
 * variant and prints the table of docs/PERFORMANCE.md.
 */

/* ---- allocator calls, counted while a server call runs ---- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static int counting;
static unsigned long n_alloc, n_free;

void *malloc(size_t n)
{
	n_alloc += counting;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	n_alloc += counting;
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	n_alloc += counting;
	return __libc_realloc(p, n);
}

void free(void *p)
{
	n_free += counting && p;
	__libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	n_alloc += counting;
	void *p = __libc_memalign(align, n);
	if (!p)
		return 12; /* ENOMEM */
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	n_alloc += counting;
	return __libc_memalign(align, n);
}

/* ---- queues ---- */

size_t bq_get(struct bq *q, void *p, size_t n)
{
	size_t have = q->tail - q->head;
	if (n > have)
		n = have;
	memcpy(p, q->buf + q->head, n);
	q->head += n;
	if (q->head == q->tail)
		q->head = q->tail = 0;
	return n;
}

void bq_put(struct bq *q, const void *p, size_t n)
{
	if (q->tail + n > q->cap) {
		memmove(q->buf, q->buf + q->head, q->tail - q->head);
		q->tail -= q->head;
		q->head = 0;
		if (q->tail + n > q->cap) {
			fprintf(stderr, "tls_handshake: queue overflow\n");
			exit(2);
		}
	}
	memcpy(q->buf + q->tail, p, n);
	q->tail += n;
}

static struct bq c2s, s2c;

/* ---- the server's calls: timed, counted, and the only ones callgrind sees ---- */

static double srv_ns, srv_read_ns, srv_write_ns;

static double thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

__attribute__((noinline)) static void *srv_new(void)
{
	counting = 1;
	double t = thread_ns();
	void *s = bk_server_new(&c2s, &s2c);
	srv_ns += thread_ns() - t;
	counting = 0;
	return s;
}

__attribute__((noinline)) static int srv_handshake(void *s)
{
	counting = 1;
	double t = thread_ns();
	int rc = bk_handshake(s);
	srv_ns += thread_ns() - t;
	counting = 0;
	return rc;
}

__attribute__((noinline)) static long srv_read(void *s, void *p, size_t n)
{
	counting = 1;
	double t = thread_ns();
	long rc = bk_read(s, p, n);
	double d = thread_ns() - t;
	srv_ns += d;
	srv_read_ns += d;
	counting = 0;
	return rc;
}

__attribute__((noinline)) static long srv_write(void *s, const void *p, size_t n)
{
	counting = 1;
	double t = thread_ns();
	long rc = bk_write(s, p, n);
	double d = thread_ns() - t;
	srv_ns += d;
	srv_write_ns += d;
	counting = 0;
	return rc;
}

__attribute__((noinline)) static void srv_free(void *s)
{
	counting = 1;
	double t = thread_ns();
	bk_free(s);
	srv_ns += thread_ns() - t;
	counting = 0;
}

__attribute__((noinline)) static int srv_floor(void)
{
	return bk_floor_once();
}

__attribute__((noinline)) static int srv_aead(uint8_t *p, size_t n, uint8_t *tag, uint64_t seq)
{
	return bk_aead_seal(p, n, tag, seq);
}

static void die(const char *what)
{
	fprintf(stderr, "tls_handshake %s: %s\n", bk_name, what);
	exit(1);
}

/* Both sides until the handshake is done on both; the server sends its
 * answer of 64 bytes and reads the client's 64 (a request and a response,
 * as openssl s_time does), which also takes the server's tickets through
 * the client. */
static void *connect_pair(void **client, int verbose)
{
	void *c = bk_client_new(&s2c, &c2s);
	void *s = srv_new();
	if (!c || !s)
		die("session");
	int cd = 0, sd = 0;
	for (int i = 0; i < 100 && !(cd && sd); i++) {
		if (!cd && (cd = bk_handshake(c)) < 0)
			die("client handshake failed");
		if (!sd && (sd = srv_handshake(s)) < 0)
			die("server handshake failed");
	}
	if (!cd || !sd)
		die("handshake did not finish");
	uint8_t msg[64], got[64];
	memset(msg, 'q', sizeof msg);
	if (bk_write(c, msg, sizeof msg) != sizeof msg)
		die("client write");
	long n = 0;
	for (int i = 0; i < 10 && n == 0; i++)
		n = srv_read(s, got, sizeof got);
	if (n != sizeof got)
		die("server read");
	if (srv_write(s, msg, sizeof msg) != sizeof msg)
		die("server write");
	n = 0;
	for (int i = 0; i < 10 && n == 0; i++)
		n = bk_read(c, got, sizeof got);
	if (n != sizeof got)
		die("client read");
	if (verbose) {
		char d[160];
		bk_describe(s, d, sizeof d);
		fprintf(stderr, "%s: %s\n", bk_name, d);
	}
	*client = c;
	return s;
}

static void run_hs(long n, int verbose)
{
	long warm = n / 10 + 5;
	unsigned long allocs = 0, frees = 0;
	for (long i = 0; i < warm + n; i++) {
		if (i == warm) {
			CALLGRIND_ZERO_STATS;
			srv_ns = 0;
			n_alloc = n_free = 0;
		}
		void *c, *s = connect_pair(&c, verbose && i == 0);
		bk_free(c);
		srv_free(s);
		if (c2s.tail != c2s.head || s2c.tail != s2c.head)
			die("bytes left over");
	}
	allocs = n_alloc, frees = n_free;
	CALLGRIND_DUMP_STATS_AT("handshakes");
	printf("%s hs n=%ld server_cpu_us=%.1f allocs=%.1f frees=%.1f\n", bk_name, n,
	       srv_ns / n / 1e3, (double)allocs / n, (double)frees / n);
}

static void run_bulk(long mib, size_t rec, int verbose)
{
	void *c, *s = connect_pair(&c, verbose);
	uint8_t *out = malloc(rec), *in = malloc(1 << 20);
	for (size_t i = 0; i < rec; i++)
		out[i] = (uint8_t)(i * 7);
	CALLGRIND_ZERO_STATS;
	srv_ns = srv_read_ns = srv_write_ns = 0;
	n_alloc = n_free = 0;
	unsigned long recs = 0;
	uint64_t total = (uint64_t)mib << 20;
	for (uint64_t done = 0; done < total; done += rec) {
		if (bk_write(c, out, rec) != (long)rec)
			die("client write");
		size_t got = 0;
		while (got < rec) {
			long r = srv_read(s, in, 1 << 20);
			if (r <= 0)
				die("server read");
			got += (size_t)r;
		}
		if (srv_write(s, in, rec) != (long)rec)
			die("server write");
		got = 0;
		while (got < rec) {
			long r = bk_read(c, in, 1 << 20);
			if (r <= 0)
				die("client read");
			got += (size_t)r;
		}
		recs++;
	}
	CALLGRIND_DUMP_STATS_AT("bulk");
	printf("%s bulk mib=%ld rec=%zu server_read_us_per_mib=%.1f server_write_us_per_mib=%.1f "
	       "allocs_per_rec=%.2f\n",
	       bk_name, mib, rec, srv_read_ns / mib / 1e3, srv_write_ns / mib / 1e3,
	       (double)n_alloc / recs / 2);
	bk_free(c);
	bk_free(s);
	free(out);
	free(in);
}

static void run_floor(long n)
{
	if (bk_floor_init() < 0)
		die("floor setup");
	for (long i = 0; i < 20; i++)
		if (srv_floor() < 0)
			die("floor");
	CALLGRIND_ZERO_STATS;
	double t = thread_ns();
	for (long i = 0; i < n; i++)
		if (srv_floor() < 0)
			die("floor");
	t = thread_ns() - t;
	CALLGRIND_DUMP_STATS_AT("floor");
	printf("%s floor n=%ld us_per_handshake_crypto=%.1f\n", bk_name, n, t / n / 1e3);
}

static void run_aead(long mib, int bits)
{
	if (bk_aead_init(bits) < 0)
		die("aead setup");
	size_t rec = 16384;
	uint8_t *p = calloc(1, rec), tag[16];
	CALLGRIND_ZERO_STATS;
	double t = thread_ns();
	uint64_t n = ((uint64_t)mib << 20) / rec;
	for (uint64_t i = 0; i < n; i++)
		if (srv_aead(p, rec, tag, i) < 0)
			die("aead");
	t = thread_ns() - t;
	CALLGRIND_DUMP_STATS_AT("aead");
	printf("%s aead aes-%d-gcm mib=%ld us_per_mib=%.1f\n", bk_name, bits, mib, t / mib / 1e3);
	free(p);
}

int main(int argc, char **argv)
{
	struct bk_opts o = {.suite = "TLS_AES_128_GCM_SHA256", .version = 13, .tickets = -1};
	size_t rec = 16384;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--cert") && i + 1 < argc)
			o.cert = argv[++i];
		else if (!strcmp(a, "--key") && i + 1 < argc)
			o.key = argv[++i];
		else if (!strcmp(a, "--ca") && i + 1 < argc)
			o.ca = argv[++i];
		else if (!strcmp(a, "--suite") && i + 1 < argc)
			o.suite = argv[++i];
		else if (!strcmp(a, "--tickets") && i + 1 < argc)
			o.tickets = atoi(argv[++i]);
		else if (!strcmp(a, "--rec") && i + 1 < argc)
			rec = (size_t)atol(argv[++i]);
		else if (!strcmp(a, "--tls12"))
			o.version = 12;
		else if (!strcmp(a, "--cache"))
			o.cache = 1;
		else if (!strcmp(a, "--reuse"))
			o.reuse = 1;
		else if (!strcmp(a, "--libctx"))
			o.libctx = 1;
		else if (!strcmp(a, "--no-chain"))
			o.no_chain = 1;
		else if (!strcmp(a, "-v"))
			o.verbose = 1;
		else
			break;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: tls_handshake_%s [options] hs N | bulk MIB | floor N | aead MIB [BITS]\n",
			bk_name);
		return 2;
	}
	const char *mode = argv[i];
	long n = i + 1 < argc ? atol(argv[i + 1]) : 100;
	if (n <= 0 || rec == 0 || rec > (1 << 20))
		die("bad count");
	if (!strcmp(mode, "floor")) {
		run_floor(n);
		return 0;
	}
	if (!strcmp(mode, "aead")) {
		run_aead(n, i + 2 < argc ? atoi(argv[i + 2]) : 128);
		return 0;
	}
	if (!o.cert || !o.key)
		die("--cert and --key are needed");
	static uint8_t b1[4 << 20], b2[4 << 20];
	c2s = (struct bq){.buf = b1, .cap = sizeof b1};
	s2c = (struct bq){.buf = b2, .cap = sizeof b2};
	if (bk_init(&o) < 0)
		die("setup");
	if (!strcmp(mode, "hs"))
		run_hs(n, o.verbose);
	else if (!strcmp(mode, "bulk"))
		run_bulk(n, rec, o.verbose);
	else
		die("unknown mode");
	return 0;
}
