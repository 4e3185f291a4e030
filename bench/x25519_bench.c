/* bench/x25519_bench.c: X25519 timed in Nettle (what GnuTLS uses) and in libcrypto through EVP_PKEY, in one thread: a key pair (the base point times a scalar) and a shared secret (a peer's point times a scalar), microseconds each (docs/PERFORMANCE.md, "System calls per full handshake"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <nettle/curve25519.h>
#include <openssl/evp.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	uint8_t k[32], peer[32], out[32];
	double t0, t1, t2, t3, t4;

	if (n <= 0) {
		fprintf(stderr, "usage: x25519_bench [COUNT]\n");
		return 2;
	}
	memset(k, 0x5a, sizeof k);
	/* Each result feeds the next scalar, so no call can be skipped. */
	t0 = now_s();
	for (int i = 0; i < n; i++) {
		nettle_curve25519_mul_g(out, k);
		k[0] ^= out[0];
	}
	memcpy(peer, out, sizeof peer);
	t1 = now_s();
	for (int i = 0; i < n; i++) {
		nettle_curve25519_mul(out, k, peer);
		k[1] ^= out[1];
	}
	t2 = now_s();
	for (int i = 0; i < n; i++) {
		size_t len = sizeof out;
		EVP_PKEY *p = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, k, sizeof k);
		if (!p || EVP_PKEY_get_raw_public_key(p, out, &len) != 1) {
			fprintf(stderr, "x25519_bench: libcrypto refused a key\n");
			return 1;
		}
		k[0] ^= out[0];
		EVP_PKEY_free(p);
	}
	t3 = now_s();
	EVP_PKEY *pp = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer, sizeof peer);
	for (int i = 0; i < n; i++) {
		size_t len = sizeof out;
		EVP_PKEY *p = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, k, sizeof k);
		EVP_PKEY_CTX *c = p ? EVP_PKEY_CTX_new(p, NULL) : NULL;
		if (!pp || !c || EVP_PKEY_derive_init(c) != 1 || EVP_PKEY_derive_set_peer(c, pp) != 1 ||
		    EVP_PKEY_derive(c, out, &len) != 1) {
			fprintf(stderr, "x25519_bench: libcrypto refused a derivation\n");
			return 1;
		}
		k[1] ^= out[1];
		EVP_PKEY_CTX_free(c);
		EVP_PKEY_free(p);
	}
	t4 = now_s();
	EVP_PKEY_free(pp);
	printf("nettle   key pair %.1f us, shared secret %.1f us\n", (t1 - t0) / n * 1e6,
	       (t2 - t1) / n * 1e6);
	printf("libcrypto key pair %.1f us, shared secret %.1f us (EVP_PKEY, a key made each time)\n",
	       (t3 - t2) / n * 1e6, (t4 - t3) / n * 1e6);
	return 0;
}
