/* bench/tls_hs_openssl.c: the OpenSSL 3.0 backend of bench/tls_handshake.c. */
#include <stdio.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include "tls_bench.h"

const char *const bk_name = "openssl";

static SSL_CTX *sctx, *cctx;
static BIO_METHOD *meth;
static int reuse;
static SSL *kept; /* --reuse: the one server session, SSL_clear'ed between handshakes */

struct ends {
	struct bq *in, *out;
};
static struct ends srv_ends, cli_ends;

static int bio_write(BIO *b, const char *p, int n)
{
	struct ends *e = BIO_get_data(b);
	bq_put(e->out, p, (size_t)n);
	return n;
}

static int bio_read(BIO *b, char *p, int n)
{
	struct ends *e = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	size_t r = bq_get(e->in, p, (size_t)n);
	if (r == 0) {
		BIO_set_retry_read(b);
		return -1;
	}
	return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	return cmd == BIO_CTRL_FLUSH;
}

static int bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static void errors(const char *what)
{
	fprintf(stderr, "openssl: %s\n", what);
	ERR_print_errors_fp(stderr);
}

static SSL_CTX *make_ctx(const struct bk_opts *o, OSSL_LIB_CTX *lib, int server)
{
	SSL_CTX *c = SSL_CTX_new_ex(lib, NULL, server ? TLS_server_method() : TLS_client_method());
	if (!c)
		return NULL;
	int v = o->version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION;
	SSL_CTX_set_min_proto_version(c, v);
	SSL_CTX_set_max_proto_version(c, v);
	/* TLS 1.2 names the certificate's curve among the groups too */
	if (!SSL_CTX_set1_groups_list(c, o->version == 12 ? "X25519:P-256" : "X25519"))
		return NULL;
	if (o->version == 13) {
		if (!SSL_CTX_set_ciphersuites(c, o->suite))
			return NULL;
	} else {
		const char *l = strstr(o->suite, "256_GCM") ? "ECDHE-ECDSA-AES256-GCM-SHA384"
							    : "ECDHE-ECDSA-AES128-GCM-SHA256";
		if (!SSL_CTX_set_cipher_list(c, l))
			return NULL;
	}
	SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION);
	if (!server) {
		SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
		SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
		return c;
	}
	if (SSL_CTX_use_certificate_chain_file(c, o->cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(c, o->key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(c) != 1)
		return NULL;
	if (o->ca && SSL_CTX_load_verify_locations(c, o->ca, NULL) != 1)
		return NULL;
	if (o->no_chain)
		SSL_CTX_set_mode(c, SSL_MODE_NO_AUTO_CHAIN);
	if (o->tickets >= 0) {
		SSL_CTX_set_num_tickets(c, (size_t)o->tickets);
		if (o->tickets == 0)
			SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
	}
	SSL_CTX_set_session_cache_mode(c, o->cache ? SSL_SESS_CACHE_SERVER : SSL_SESS_CACHE_OFF);
	return c;
}

int bk_init(const struct bk_opts *o)
{
	meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "bq");
	BIO_meth_set_write(meth, bio_write);
	BIO_meth_set_read(meth, bio_read);
	BIO_meth_set_ctrl(meth, bio_ctrl);
	BIO_meth_set_create(meth, bio_create);
	OSSL_LIB_CTX *lib = o->libctx ? OSSL_LIB_CTX_new() : NULL;
	sctx = make_ctx(o, lib, 1);
	cctx = make_ctx(o, lib, 0);
	if (!sctx || !cctx) {
		errors("context setup failed");
		return -1;
	}
	reuse = o->reuse;
	return 0;
}

static SSL *session(SSL_CTX *c, struct ends *e, int server)
{
	SSL *s = SSL_new(c);
	BIO *b = BIO_new(meth);
	if (!s || !b)
		return NULL;
	BIO_set_data(b, e);
	SSL_set_bio(s, b, b);
	if (server)
		SSL_set_accept_state(s);
	else
		SSL_set_connect_state(s);
	return s;
}

void *bk_server_new(struct bq *in, struct bq *out)
{
	srv_ends = (struct ends){in, out};
	if (reuse && kept)
		return kept;
	SSL *s = session(sctx, &srv_ends, 1);
	if (reuse)
		kept = s;
	return s;
}

void *bk_client_new(struct bq *in, struct bq *out)
{
	cli_ends = (struct ends){in, out};
	return session(cctx, &cli_ends, 0);
}

void bk_free(void *s)
{
	if (s == kept) {
		SSL_clear(s);
		SSL_set_accept_state(s);
		return;
	}
	SSL_free(s);
}

int bk_handshake(void *s)
{
	int rc = SSL_do_handshake(s);
	if (rc == 1)
		return 1;
	int e = SSL_get_error(s, rc);
	if (e == SSL_ERROR_WANT_READ)
		return 0;
	errors("handshake");
	return -1;
}

long bk_write(void *s, const void *p, size_t n)
{
	size_t w;
	if (SSL_write_ex(s, p, n, &w) == 1)
		return (long)w;
	errors("write");
	return -1;
}

long bk_read(void *s, void *p, size_t n)
{
	size_t r;
	if (SSL_read_ex(s, p, n, &r) == 1)
		return (long)r;
	if (SSL_get_error(s, 0) == SSL_ERROR_WANT_READ)
		return 0;
	errors("read");
	return -1;
}

void bk_describe(void *s, char *buf, size_t len)
{
	char g[64] = "?";
	int nid = SSL_get_negotiated_group(s);
	if (nid)
		snprintf(g, sizeof g, "%s", OBJ_nid2sn(nid));
	snprintf(buf, len, "%s %s %s", SSL_get_version(s), SSL_get_cipher_name(s), g);
}

/* ---- the floor: what OpenSSL's own primitives cost, through EVP as the library calls them ---- */

static EVP_PKEY *ec_key, *peer_x;
static EVP_PKEY_CTX *sign_ctx, *x_gen;
static unsigned char digest[32];

int bk_floor_init(void)
{
	EVP_PKEY_CTX *g = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (!g || EVP_PKEY_keygen_init(g) <= 0 ||
	    EVP_PKEY_CTX_set_group_name(g, "P-256") <= 0 || EVP_PKEY_keygen(g, &ec_key) <= 0)
		return -1;
	EVP_PKEY_CTX_free(g);
	sign_ctx = EVP_PKEY_CTX_new_from_pkey(NULL, ec_key, NULL);
	x_gen = EVP_PKEY_CTX_new_from_name(NULL, "X25519", NULL);
	if (!sign_ctx || !x_gen || EVP_PKEY_keygen_init(x_gen) <= 0 ||
	    EVP_PKEY_keygen(x_gen, &peer_x) <= 0)
		return -1;
	memset(digest, 7, sizeof digest);
	return 0;
}

int bk_floor_once(void)
{
	unsigned char sig[80], secret[32];
	size_t sl = sizeof sig, xl = sizeof secret;
	if (EVP_PKEY_sign_init(sign_ctx) <= 0 ||
	    EVP_PKEY_sign(sign_ctx, sig, &sl, digest, sizeof digest) <= 0)
		return -1;
	EVP_PKEY *mine = NULL;
	if (EVP_PKEY_keygen(x_gen, &mine) <= 0)
		return -1;
	EVP_PKEY_CTX *d = EVP_PKEY_CTX_new_from_pkey(NULL, mine, NULL);
	int ok = d && EVP_PKEY_derive_init(d) > 0 && EVP_PKEY_derive_set_peer(d, peer_x) > 0 &&
		 EVP_PKEY_derive(d, secret, &xl) > 0;
	EVP_PKEY_CTX_free(d);
	EVP_PKEY_free(mine);
	return ok ? 0 : -1;
}

static EVP_CIPHER_CTX *aead;

int bk_aead_init(int key_bits)
{
	unsigned char key[32] = {1}, iv[12] = {2};
	EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, key_bits == 256 ? "AES-256-GCM" : "AES-128-GCM", NULL);
	aead = EVP_CIPHER_CTX_new();
	return c && aead && EVP_EncryptInit_ex2(aead, c, key, iv, NULL) == 1 ? 0 : -1;
}

int bk_aead_seal(uint8_t *p, size_t n, uint8_t tag[16], uint64_t seq)
{
	unsigned char iv[12] = {0}, aad[5] = {23, 3, 3, 0, 0};
	int l;
	memcpy(iv + 4, &seq, 8);
	if (EVP_EncryptInit_ex2(aead, NULL, NULL, iv, NULL) != 1 ||
	    EVP_EncryptUpdate(aead, NULL, &l, aad, sizeof aad) != 1 ||
	    EVP_EncryptUpdate(aead, p, &l, p, (int)n) != 1 || EVP_EncryptFinal_ex(aead, p + l, &l) != 1 ||
	    EVP_CIPHER_CTX_ctrl(aead, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1)
		return -1;
	return 0;
}
