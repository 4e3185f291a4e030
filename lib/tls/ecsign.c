/* lib/tls/ecsign.c: signatures with an ECDSA P-256 key made by libcrypto (OpenSSL) instead of GnuTLS's Nettle: the one signature of every full handshake, at about half its cost. */
#include <string.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include "tls_int.h"

/*
 * Why: a full TLS 1.3 handshake signs once (CertificateVerify). Nettle's
 * P-256 signature costs about 53 us on this project's benchmark machine,
 * libcrypto's about 31 us with a context made per signature (measured side
 * by side; docs/PERFORMANCE.md, "A cheaper signature"): some 7% of a
 * server's full handshake. Everything else (the key exchange, the record
 * layer, the protocol) stays GnuTLS's.
 *
 * How: the key is read by libcrypto as well and handed to GnuTLS as an
 * external key (gnutls_privkey_import_ext4) whose callbacks sign with it.
 * GnuTLS checks at load that key and certificate match by signing and
 * verifying with them, so a wrong signature cannot go unnoticed. Only
 * ECDSA keys on P-256 take this path; any other key (RSA, Ed25519, other
 * curves, an encrypted PEM) is loaded by GnuTLS as before.
 *
 * Threads: a config, and so its keys, is shared by every shard. Each
 * signature makes its own EVP_PKEY_CTX (libcrypto's keys are safe to use
 * from several threads at once; a context is not), so no state is shared
 * but the key.
 *
 * Memory: GnuTLS frees the signature it is handed, so the library makes
 * it (gnutls_encode_rs_value, from the r and s libcrypto computed): the
 * layer itself allocates nothing per handshake (tests/noalloc_tls.c).
 */

/* The signature algorithms a P-256 ECDSA key can make: TLS 1.2's (any
 * hash) and TLS 1.3's one for this curve. */
static int have_algo(unsigned a)
{
	switch (a) {
	case GNUTLS_SIGN_ECDSA_SHA1:
	case GNUTLS_SIGN_ECDSA_SHA224:
	case GNUTLS_SIGN_ECDSA_SHA256:
	case GNUTLS_SIGN_ECDSA_SHA384:
	case GNUTLS_SIGN_ECDSA_SHA512:
	case GNUTLS_SIGN_ECDSA_SECP256R1_SHA256:
		return 1;
	}
	return 0;
}

static int sign_hash(gnutls_privkey_t key, gnutls_sign_algorithm_t algo, void *ud, unsigned flags,
		     const gnutls_datum_t *hash, gnutls_datum_t *sig)
{
	uint8_t der[80], rb[32], sb[32];
	size_t n = sizeof der;
	const uint8_t *p = der;
	const BIGNUM *r, *s;
	ECDSA_SIG *es = NULL;
	int g = GNUTLS_E_PK_SIGN_FAILED;

	(void)key;
	(void)flags;
	if (!have_algo(algo))
		return GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM;
	EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(ud, NULL);
	if (c && EVP_PKEY_sign_init(c) > 0 && EVP_PKEY_sign(c, der, &n, hash->data, hash->size) > 0 &&
	    (es = d2i_ECDSA_SIG(NULL, &p, (long)n)) != NULL) {
		ECDSA_SIG_get0(es, &r, &s);
		gnutls_datum_t rd = {rb, sizeof rb}, sd = {sb, sizeof sb};
		if (BN_bn2binpad(r, rb, sizeof rb) == sizeof rb && BN_bn2binpad(s, sb, sizeof sb) == sizeof sb)
			g = gnutls_encode_rs_value(sig, &rd, &sd);
	}
	ECDSA_SIG_free(es);
	EVP_PKEY_CTX_free(c);
	ERR_clear_error();
	return g;
}

static int sign_data(gnutls_privkey_t key, gnutls_sign_algorithm_t algo, void *ud, unsigned flags,
		     const gnutls_datum_t *data, gnutls_datum_t *sig)
{
	uint8_t h[64];
	gnutls_digest_algorithm_t d = gnutls_sign_get_hash_algorithm(algo);

	if (!have_algo(algo) || d == GNUTLS_DIG_UNKNOWN || gnutls_hash_get_len(d) > (unsigned)sizeof h)
		return GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM;
	if (gnutls_hash_fast(d, data->data, data->size, h) < 0)
		return GNUTLS_E_HASH_FAILED;
	gnutls_datum_t hd = {h, (unsigned)gnutls_hash_get_len(d)};
	return sign_hash(key, algo, ud, flags, &hd, sig);
}

static int info(gnutls_privkey_t key, unsigned flags, void *ud)
{
	(void)key;
	(void)ud;
	if (flags & GNUTLS_PRIVKEY_INFO_HAVE_SIGN_ALGO)
		return have_algo(GNUTLS_FLAGS_TO_SIGN_ALGO(flags));
	if (flags & GNUTLS_PRIVKEY_INFO_PK_ALGO)
		return GNUTLS_PK_ECDSA;
	if (flags & GNUTLS_PRIVKEY_INFO_PK_ALGO_BITS)
		return 256;
	if (flags & GNUTLS_PRIVKEY_INFO_SIGN_ALGO)
		return GNUTLS_SIGN_ECDSA_SECP256R1_SHA256;
	return GNUTLS_E_UNKNOWN_ALGORITHM;
}

static void deinit(gnutls_privkey_t key, void *ud)
{
	(void)key;
	EVP_PKEY_free(ud);
}

/* No passphrase is ever asked (libcrypto would ask the terminal): an
 * encrypted key fails here and GnuTLS's path says why. */
static int no_pass(char *buf, int size, int rw, void *u)
{
	(void)buf;
	(void)size;
	(void)rw;
	(void)u;
	return 0;
}

/* The key in key_pem as libcrypto's, if it is ECDSA on P-256; else NULL. */
static EVP_PKEY *p256_key(const gnutls_datum_t *key_pem)
{
	char group[32];
	size_t glen = 0;
	BIO *b = BIO_new_mem_buf(key_pem->data, (int)key_pem->size);
	EVP_PKEY *pk = b ? PEM_read_bio_PrivateKey(b, NULL, no_pass, NULL) : NULL;

	BIO_free(b);
	if (pk && (EVP_PKEY_get_base_id(pk) != EVP_PKEY_EC ||
		   !EVP_PKEY_get_group_name(pk, group, sizeof group, &glen) || strcmp(group, "prime256v1"))) {
		EVP_PKEY_free(pk);
		pk = NULL;
	}
	ERR_clear_error();
	return pk;
}

int tls_set_p256_key(gnutls_certificate_credentials_t cred, const gnutls_datum_t *crt,
		     const gnutls_datum_t *key_pem)
{
	gnutls_pcert_st pc[16];
	unsigned npc = sizeof pc / sizeof pc[0];
	gnutls_privkey_t k = NULL;
	EVP_PKEY *pk = p256_key(key_pem);
	int g;

	if (!pk)
		return 0;
	g = gnutls_pcert_list_import_x509_raw(pc, &npc, crt, GNUTLS_X509_FMT_PEM, 0);
	if (g < 0) {
		EVP_PKEY_free(pk);
		return g == GNUTLS_E_SHORT_MEMORY_BUFFER ? 0 : g; /* a longer chain: GnuTLS's path */
	}
	if ((g = gnutls_privkey_init(&k)) < 0) {
		EVP_PKEY_free(pk);
		goto fail;
	}
	g = gnutls_privkey_import_ext4(k, pk, sign_data, sign_hash, NULL, deinit, info,
				       GNUTLS_PRIVKEY_IMPORT_AUTO_RELEASE);
	if (g < 0) {
		EVP_PKEY_free(pk);
		goto fail;
	}
	/* On success the credentials own the certificates and the key. */
	g = gnutls_certificate_set_key(cred, NULL, 0, pc, (int)npc, k);
	if (g >= 0)
		return 1;
fail:
	gnutls_privkey_deinit(k); /* frees pk once imported (AUTO_RELEASE) */
	for (unsigned i = 0; i < npc; i++)
		gnutls_pcert_deinit(&pc[i]);
	return g;
}
