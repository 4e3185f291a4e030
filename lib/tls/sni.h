/* lib/tls/sni.h: the server's map from an SNI name to the certificate that answers it (pure code: tests/fuzz_tls.c drives it). */
#ifndef TL_TLS_SNI_H
#define TL_TLS_SNI_H

#include <stddef.h>
#include <stdint.h>

/*
 * Names are compared without case and without a trailing dot. A name is
 * exact ("www.example.com") or a wildcard ("*.example.com", which answers
 * exactly one more label: "a.example.com", not "example.com" nor
 * "a.b.example.com", as RFC 6125 reads a certificate's wildcard). An exact
 * name wins over a wildcard; a name two certificates claim goes to the
 * first of them. The map is built once (a config's setup) into two sorted
 * arrays and is read-only after: a lookup is two binary searches over a
 * name copied to the stack, with no allocation.
 */

#define TLS_SNI_NAME_MAX 253

struct tls_sni_entry {
	uint32_t off;  /* in names: exact, the name; wildcard, what follows "*." */
	uint32_t len;
	uint32_t cert;
};

struct tls_sni_map {
	struct tls_sni_entry *exact, *wild;
	uint32_t nexact, nwild, cap_exact, cap_wild;
	char *names; /* every name, lowercased, one allocation */
	size_t used, size;
};

/*
 * Add the names of list (comma separated, spaces around names ignored) for
 * certificate cert. Returns 0, or -EINVAL when a name is empty, longer than
 * TLS_SNI_NAME_MAX, has a character other than letters, digits, '-', '_'
 * and the dots between labels, an empty label or one over 63 bytes, or a
 * '*' anywhere but as a
 * whole first label; bad (may be NULL, room for TLS_SNI_NAME_MAX + 1
 * bytes) then receives the offending name, cut to fit. -ENOMEM. A list
 * that fails adds none of its names.
 */
int tls_sni_add(struct tls_sni_map *m, const char *list, size_t len, uint32_t cert, char *bad);

/* Sort what was added; call once after the last tls_sni_add. */
void tls_sni_seal(struct tls_sni_map *m);

/* The certificate for name[0..len), or -1 when none claims it. */
int64_t tls_sni_lookup(const struct tls_sni_map *m, const char *name, size_t len);

void tls_sni_free(struct tls_sni_map *m);

#endif
