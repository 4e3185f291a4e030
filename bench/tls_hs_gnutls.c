/* bench/tls_hs_gnutls.c: the GnuTLS 3.7 backend of bench/tls_handshake.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <nettle/curve25519.h>
#include "tls_bench.h"

const char *const bk_name = "gnutls";

static gnutls_certificate_credentials_t scred, ccred;
static gnutls_priority_t prio;
static gnutls_datum_t ticket_key;
static int tickets = -1;

struct ends {
	struct bq *in, *out;
};
static struct ends srv_ends, cli_ends;

static ssize_t push(gnutls_transport_ptr_t p, const void *b, size_t n)
{
	struct ends *e = p;
	bq_put(e->out, b, n);
	return (ssize_t)n;
}

static ssize_t pull(gnutls_transport_ptr_t p, void *b, size_t n)
{
	struct ends *e = p;
	size_t r = bq_get(e->in, b, n);
	if (r == 0) {
		errno = EAGAIN;
		return -1;
	}
	return (ssize_t)r;
}

int bk_init(const struct bk_opts *o)
{
	char pr[256];
	const char *err = NULL;
	int rc;
	if (gnutls_global_init() < 0)
		return -1;
	const char *cipher = strstr(o->suite, "256_GCM")	? "AES-256-GCM"
			     : strstr(o->suite, "CHACHA20") ? "CHACHA20-POLY1305"
							    : "AES-128-GCM";
	snprintf(pr, sizeof pr,
		 "NORMAL:-VERS-ALL:+VERS-TLS1.%d:-CIPHER-ALL:+%s:-GROUP-ALL:+GROUP-X25519%s",
		 o->version == 12 ? 2 : 3, cipher, o->version == 12 ? ":-KX-ALL:+ECDHE-ECDSA" : "");
	if ((rc = gnutls_priority_init(&prio, pr, &err)) < 0) {
		fprintf(stderr, "gnutls: priority %s: %s at %s\n", pr, gnutls_strerror(rc), err);
		return -1;
	}
	if (gnutls_certificate_allocate_credentials(&scred) < 0 ||
	    gnutls_certificate_allocate_credentials(&ccred) < 0)
		return -1;
	if ((rc = gnutls_certificate_set_x509_key_file(scred, o->cert, o->key,
						       GNUTLS_X509_FMT_PEM)) < 0) {
		fprintf(stderr, "gnutls: key file: %s\n", gnutls_strerror(rc));
		return -1;
	}
	if (o->ca && gnutls_certificate_set_x509_trust_file(scred, o->ca, GNUTLS_X509_FMT_PEM) < 0)
		return -1;
	if (gnutls_session_ticket_key_generate(&ticket_key) < 0)
		return -1;
	tickets = o->tickets;
	return 0;
}

static void *session(unsigned flags, struct ends *e)
{
	gnutls_session_t s;
	if (gnutls_init(&s, flags | GNUTLS_NONBLOCK) < 0)
		return NULL;
	gnutls_priority_set(s, prio);
	gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, (flags & GNUTLS_SERVER) ? scred : ccred);
	gnutls_transport_set_push_function(s, push);
	gnutls_transport_set_pull_function(s, pull);
	gnutls_transport_set_ptr(s, e);
	return s;
}

void *bk_server_new(struct bq *in, struct bq *out)
{
	srv_ends = (struct ends){in, out};
	unsigned f = GNUTLS_SERVER;
	if (tickets == 0)
		f |= GNUTLS_NO_TICKETS;
	else if (tickets > 0)
		f |= GNUTLS_NO_AUTO_SEND_TICKET;
	gnutls_session_t s = session(f, &srv_ends);
	if (s && tickets != 0)
		gnutls_session_ticket_enable_server(s, &ticket_key);
	return s;
}

void *bk_client_new(struct bq *in, struct bq *out)
{
	cli_ends = (struct ends){in, out};
	return session(GNUTLS_CLIENT, &cli_ends);
}

void bk_free(void *s)
{
	gnutls_deinit(s);
}

int bk_handshake(void *s)
{
	int rc = gnutls_handshake(s);
	if (rc == 0) {
		/* --tickets N: the server (made with GNUTLS_NO_AUTO_SEND_TICKET)
		 * sends exactly N after its handshake */
		if (tickets > 0 && gnutls_transport_get_ptr(s) == &srv_ends &&
		    gnutls_protocol_get_version(s) == GNUTLS_TLS1_3 &&
		    gnutls_session_ticket_send(s, (unsigned)tickets, 0) < 0)
			return -1;
		return 1;
	}
	if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
		return 0;
	fprintf(stderr, "gnutls: handshake: %s\n", gnutls_strerror(rc));
	return -1;
}

long bk_write(void *s, const void *p, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = gnutls_record_send(s, (const char *)p + done, n - done);
		if (w < 0) {
			fprintf(stderr, "gnutls: send: %s\n", gnutls_strerror((int)w));
			return -1;
		}
		done += (size_t)w;
	}
	return (long)done;
}

long bk_read(void *s, void *p, size_t n)
{
	ssize_t r = gnutls_record_recv(s, p, n);
	if (r >= 0)
		return (long)r;
	if (r == GNUTLS_E_AGAIN)
		return 0;
	fprintf(stderr, "gnutls: recv: %s\n", gnutls_strerror((int)r));
	return -1;
}

void bk_describe(void *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s %s", gnutls_protocol_get_name(gnutls_protocol_get_version(s)),
		 gnutls_ciphersuite_get(s), gnutls_group_get_name(gnutls_group_get(s)));
}

/* ---- the floor: GnuTLS's signature and nettle's X25519, as the library calls them ---- */

static gnutls_privkey_t ec_key;
static uint8_t peer_pub[CURVE25519_SIZE];
static uint8_t digest[32];

int bk_floor_init(void)
{
	if (gnutls_global_init() < 0 || gnutls_privkey_init(&ec_key) < 0 ||
	    gnutls_privkey_generate2(ec_key, GNUTLS_PK_ECDSA,
				     GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0, NULL, 0) < 0)
		return -1;
	uint8_t sk[CURVE25519_SIZE];
	gnutls_rnd(GNUTLS_RND_KEY, sk, sizeof sk);
	curve25519_mul_g(peer_pub, sk);
	memset(digest, 7, sizeof digest);
	return 0;
}

int bk_floor_once(void)
{
	gnutls_datum_t h = {digest, sizeof digest}, sig;
	if (gnutls_privkey_sign_hash2(ec_key, GNUTLS_SIGN_ECDSA_SECP256R1_SHA256, 0, &h, &sig) < 0)
		return -1;
	gnutls_free(sig.data);
	uint8_t sk[CURVE25519_SIZE], pub[CURVE25519_SIZE], secret[CURVE25519_SIZE];
	gnutls_rnd(GNUTLS_RND_KEY, sk, sizeof sk);
	curve25519_mul_g(pub, sk);
	curve25519_mul(secret, sk, peer_pub);
	return 0;
}

static gnutls_aead_cipher_hd_t aead;

int bk_aead_init(int key_bits)
{
	static uint8_t k[32] = {1};
	gnutls_datum_t key = {k, (unsigned)key_bits / 8};
	if (gnutls_global_init() < 0)
		return -1;
	return gnutls_aead_cipher_init(&aead,
				       key_bits == 256 ? GNUTLS_CIPHER_AES_256_GCM
						       : GNUTLS_CIPHER_AES_128_GCM,
				       &key) < 0
		       ? -1
		       : 0;
}

int bk_aead_seal(uint8_t *p, size_t n, uint8_t tag[16], uint64_t seq)
{
	uint8_t nonce[12] = {0}, aad[5] = {23, 3, 3, 0, 0};
	memcpy(nonce + 4, &seq, 8);
	giovec_t a = {aad, sizeof aad}, d = {p, n};
	size_t tl = 16;
	return gnutls_aead_cipher_encryptv2(aead, nonce, sizeof nonce, &a, 1, &d, 1, tag, &tl) < 0
		       ? -1
		       : 0;
}
