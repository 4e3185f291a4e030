/* bench/tls_hs_wolfssl.c: the wolfSSL 5.5 backend of bench/tls_handshake.c (Debian's build: no AES-NI, generic big-number ECC). */
#include <stdio.h>
#include <string.h>
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfcrypt/aes.h>
#include <wolfssl/wolfcrypt/curve25519.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/random.h>
#include "tls_bench.h"

const char *const bk_name = "wolfssl";

static WOLFSSL_CTX *sctx, *cctx;

struct ends {
	struct bq *in, *out;
};
static struct ends srv_ends, cli_ends;

static int io_recv(WOLFSSL *s, char *b, int n, void *ctx)
{
	struct ends *e = ctx;
	size_t r = bq_get(e->in, b, (size_t)n);
	return r ? (int)r : WOLFSSL_CBIO_ERR_WANT_READ;
}

static int io_send(WOLFSSL *s, char *b, int n, void *ctx)
{
	struct ends *e = ctx;
	bq_put(e->out, b, (size_t)n);
	return n;
}

static WOLFSSL_CTX *make_ctx(const struct bk_opts *o, int server)
{
	WOLFSSL_METHOD *m = o->version == 12 ? (server ? wolfTLSv1_2_server_method()
						       : wolfTLSv1_2_client_method())
					     : (server ? wolfTLSv1_3_server_method()
						       : wolfTLSv1_3_client_method());
	WOLFSSL_CTX *c = wolfSSL_CTX_new(m);
	if (!c)
		return NULL;
	const char *list;
	if (o->version == 13)
		list = strstr(o->suite, "256_GCM")    ? "TLS13-AES256-GCM-SHA384"
		       : strstr(o->suite, "CHACHA20") ? "TLS13-CHACHA20-POLY1305-SHA256"
						      : "TLS13-AES128-GCM-SHA256";
	else
		list = strstr(o->suite, "256_GCM") ? "ECDHE-ECDSA-AES256-GCM-SHA384"
						   : "ECDHE-ECDSA-AES128-GCM-SHA256";
	if (wolfSSL_CTX_set_cipher_list(c, list) != WOLFSSL_SUCCESS)
		return NULL;
	/* TLS 1.2 names the certificate's curve among the groups too */
	if (o->version == 12 ? wolfSSL_CTX_UseSupportedCurve(c, WOLFSSL_ECC_X25519) != WOLFSSL_SUCCESS ||
				       wolfSSL_CTX_UseSupportedCurve(c, WOLFSSL_ECC_SECP256R1) !=
					       WOLFSSL_SUCCESS
			     : wolfSSL_CTX_set_groups(c, (int[]){WOLFSSL_ECC_X25519}, 1) != WOLFSSL_SUCCESS)
		return NULL;
	wolfSSL_CTX_SetIORecv(c, io_recv);
	wolfSSL_CTX_SetIOSend(c, io_send);
	if (!server) {
		wolfSSL_CTX_set_verify(c, WOLFSSL_VERIFY_NONE, NULL);
		return c;
	}
	if (wolfSSL_CTX_use_certificate_chain_file(c, o->cert) != WOLFSSL_SUCCESS ||
	    wolfSSL_CTX_use_PrivateKey_file(c, o->key, WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS)
		return NULL;
	if (o->ca && wolfSSL_CTX_load_verify_locations(c, o->ca, NULL) != WOLFSSL_SUCCESS)
		return NULL;
	if (o->tickets == 0)
		wolfSSL_CTX_set_options(c, WOLFSSL_OP_NO_TICKET);
	else if (o->tickets > 0)
		wolfSSL_CTX_set_num_tickets(c, (size_t)o->tickets);
	wolfSSL_CTX_set_session_cache_mode(c, o->cache ? WOLFSSL_SESS_CACHE_SERVER
						       : WOLFSSL_SESS_CACHE_OFF);
	return c;
}

int bk_init(const struct bk_opts *o)
{
	if (wolfSSL_Init() != WOLFSSL_SUCCESS)
		return -1;
	sctx = make_ctx(o, 1);
	cctx = make_ctx(o, 0);
	if (!sctx || !cctx) {
		fprintf(stderr, "wolfssl: context setup failed\n");
		return -1;
	}
	return 0;
}

static WOLFSSL *session(WOLFSSL_CTX *c, struct ends *e, int server)
{
	WOLFSSL *s = wolfSSL_new(c);
	if (!s)
		return NULL;
	wolfSSL_SetIOReadCtx(s, e);
	wolfSSL_SetIOWriteCtx(s, e);
	if (!server && wolfSSL_UseKeyShare(s, WOLFSSL_ECC_X25519) != WOLFSSL_SUCCESS &&
	    wolfSSL_version(s) == TLS1_3_VERSION)
		return NULL;
	if (server)
		wolfSSL_set_accept_state(s);
	else
		wolfSSL_set_connect_state(s);
	return s;
}

void *bk_server_new(struct bq *in, struct bq *out)
{
	srv_ends = (struct ends){in, out};
	return session(sctx, &srv_ends, 1);
}

void *bk_client_new(struct bq *in, struct bq *out)
{
	cli_ends = (struct ends){in, out};
	return session(cctx, &cli_ends, 0);
}

void bk_free(void *s)
{
	wolfSSL_free(s);
}

int bk_handshake(void *s)
{
	int rc = wolfSSL_negotiate(s);
	if (rc == WOLFSSL_SUCCESS)
		return 1;
	int e = wolfSSL_get_error(s, rc);
	if (e == WOLFSSL_ERROR_WANT_READ)
		return 0;
	char msg[WOLFSSL_MAX_ERROR_SZ];
	fprintf(stderr, "wolfssl: handshake: %s\n", wolfSSL_ERR_error_string((unsigned long)e, msg));
	return -1;
}

long bk_write(void *s, const void *p, size_t n)
{
	int w = wolfSSL_write(s, p, (int)n);
	return w > 0 ? w : -1;
}

long bk_read(void *s, void *p, size_t n)
{
	int r = wolfSSL_read(s, p, (int)n);
	if (r > 0)
		return r;
	if (wolfSSL_get_error(s, r) == WOLFSSL_ERROR_WANT_READ)
		return 0;
	return -1;
}

void bk_describe(void *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s %s", wolfSSL_get_version(s), wolfSSL_get_cipher(s),
		 wolfSSL_get_curve_name(s));
}

/* ---- the floor: wolfCrypt's own ECDSA and X25519 ---- */

static WC_RNG rng;
static ecc_key ec;
static curve25519_key peer;
static uint8_t digest[32];

int bk_floor_init(void)
{
	if (wolfSSL_Init() != WOLFSSL_SUCCESS || wc_InitRng(&rng) != 0 || wc_ecc_init(&ec) != 0 ||
	    wc_ecc_make_key_ex(&rng, 32, &ec, ECC_SECP256R1) != 0 || wc_curve25519_init(&peer) != 0 ||
	    wc_curve25519_make_key(&rng, 32, &peer) != 0)
		return -1;
	memset(digest, 7, sizeof digest);
	return 0;
}

int bk_floor_once(void)
{
	uint8_t sig[80], secret[32];
	word32 sl = sizeof sig, xl = sizeof secret;
	if (wc_ecc_sign_hash(digest, sizeof digest, sig, &sl, &rng, &ec) != 0)
		return -1;
	curve25519_key k;
	int rc = wc_curve25519_init(&k) != 0 || wc_curve25519_make_key(&rng, 32, &k) != 0 ||
		 wc_curve25519_shared_secret(&k, &peer, secret, &xl) != 0;
	wc_curve25519_free(&k);
	return rc ? -1 : 0;
}

static Aes aes;

int bk_aead_init(int key_bits)
{
	static const uint8_t key[32] = {1};
	return wc_AesInit(&aes, NULL, INVALID_DEVID) == 0 &&
			       wc_AesGcmSetKey(&aes, key, (word32)key_bits / 8) == 0
		       ? 0
		       : -1;
}

int bk_aead_seal(uint8_t *p, size_t n, uint8_t tag[16], uint64_t seq)
{
	uint8_t iv[12] = {0}, aad[5] = {23, 3, 3, 0, 0};
	memcpy(iv + 4, &seq, 8);
	return wc_AesGcmEncrypt(&aes, p, p, (word32)n, iv, sizeof iv, tag, 16, aad, sizeof aad) == 0
		       ? 0
		       : -1;
}
