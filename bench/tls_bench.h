/* bench/tls_bench.h: what bench/tls_handshake.c needs from each TLS library's backend (tls_hs_openssl.c, tls_hs_gnutls.c, tls_hs_wolfssl.c). */
#ifndef TLS_BENCH_H
#define TLS_BENCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * The two sides of one connection talk through two in-memory byte queues,
 * one per direction, that the harness owns: a backend's transport callbacks
 * read their session's `in` queue and append to its `out` queue, and a read
 * from an empty queue is "would block". No socket, no kernel: what is
 * measured is the library and nothing else.
 */
struct bq {
	uint8_t *buf;
	size_t cap, head, tail; /* bytes buf[head..tail) are queued */
};

/* Take up to n bytes from q into p: the count, 0 when q is empty. */
size_t bq_get(struct bq *q, void *p, size_t n);
/* Append p[0..n) to q (the harness sizes queues so this never fails). */
void bq_put(struct bq *q, const void *p, size_t n);

/* How the server (and the client that measures it) is set up. */
struct bk_opts {
	const char *cert, *key; /* server certificate (P-256 ECDSA) and key, PEM */
	const char *ca;         /* CA file loaded into the server's store (0: none) */
	const char *suite;      /* TLS 1.3 suite, IANA name: TLS_AES_128_GCM_SHA256 ... */
	int version;            /* 13 or 12 */
	int tickets;            /* session tickets the server sends (TLS 1.3; -1: library default) */
	int cache;              /* server-side session cache on (1) or off (0) */
	int reuse;              /* reuse one server session object (OpenSSL: SSL_clear) */
	int libctx;             /* OpenSSL: a library context of our own, not the default one */
	int no_chain;           /* OpenSSL: SSL_MODE_NO_AUTO_CHAIN (no chain built per handshake) */
	int verbose;
};

/* One backend per library: each bench executable links exactly one. */
extern const char *const bk_name;
/* Load the certificate and key and make the contexts (setup, not measured). 0 or -1. */
int bk_init(const struct bk_opts *o);
/* A server session reading from `in`, writing to `out`. */
void *bk_server_new(struct bq *in, struct bq *out);
void *bk_client_new(struct bq *in, struct bq *out);
void bk_free(void *s);
/* Advance the handshake: 1 when it is complete, 0 when it waits for input,
 * -1 on failure (printed). */
int bk_handshake(void *s);
/* Application data: bytes moved, 0 when it would block, -1 on failure. */
long bk_write(void *s, const void *p, size_t n);
long bk_read(void *s, void *p, size_t n);
/* The handshake's outcome, for the report: "TLSv1.3 TLS_AES_128_GCM_SHA256 x25519". */
void bk_describe(void *s, char *buf, size_t len);

/* The cryptography of one full handshake on the server's side, through the
 * library's own primitives: one ECDSA P-256 signature over a SHA-256
 * digest and two X25519 operations (a key pair made, a shared secret
 * derived). 0 or -1. */
int bk_floor_init(void);
int bk_floor_once(void);
/* Seal (AES-GCM, key of key_bits) n bytes at p in place, with a 16-byte tag
 * at tag: the AEAD floor of a record. 0 or -1. */
int bk_aead_init(int key_bits);
int bk_aead_seal(uint8_t *p, size_t n, uint8_t tag[16], uint64_t seq);

#endif
