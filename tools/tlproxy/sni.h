/* tools/tlproxy/sni.h: the server name (SNI) of a TLS ClientHello, read incrementally from a connection's first bytes, and the first-match SNI routing table. */
#ifndef TLP_SNI_H
#define TLP_SNI_H

#include <stddef.h>
#include <stdint.h>

/* A host name is at most 253 characters (DNS); buffers take one more for
 * the NUL. */
#define TLP_SNI_HOST_MAX 253
/* The parser never needs a byte at or past this offset of the input: a
 * caller that keeps this many bytes always gets an answer other than
 * -EAGAIN. */
#define TLP_SNI_INPUT_MAX 32768
/* TLS records carry at most 2^14 bytes (RFC 8446, 5.1). */
#define TLP_SNI_RECORD_MAX 16384

/* Why the bytes were refused (tlp_sni_parse's *why when it returns -EPROTO). */
enum tlp_sni_error {
	TLP_SNI_OK = 0,
	TLP_SNI_E_NOT_TLS,      /* first record not a TLS handshake (type 22, version 3.0-3.3) */
	TLP_SNI_E_RECORD,       /* a record of length 0 or past 2^14, or a later record that
				 * is not handshake */
	TLP_SNI_E_NOT_HELLO,    /* the first handshake message is not a ClientHello */
	TLP_SNI_E_TOO_LONG,     /* the ClientHello announces more than TLP_SNI_INPUT_MAX bytes,
				 * or reading it would go past that offset */
	TLP_SNI_E_VERSION,      /* ClientHello version major not 3 */
	TLP_SNI_E_SESSION_ID,   /* session id longer than 32 bytes */
	TLP_SNI_E_CIPHERS,      /* cipher suites empty or of odd length */
	TLP_SNI_E_COMPRESSION,  /* no compression method */
	TLP_SNI_E_LENGTH,       /* a field runs past the end of the ClientHello */
	TLP_SNI_E_EXTENSIONS,   /* extensions length not the rest of the ClientHello, or an
				 * extension running past them */
	TLP_SNI_E_SNI,          /* server_name extension whose list length is wrong or empty,
				 * or an entry running past it */
	TLP_SNI_E_DUPLICATE,    /* two host_name entries in the server_name extension */
	TLP_SNI_E_HOST,         /* the host name is empty, too long or not a DNS name */
	TLP_SNI_E_SNI_TWICE,    /* two server_name extensions in the ClientHello */
	TLP_SNI_E_COUNT
};

/* A short English phrase for why (enum tlp_sni_error); "unknown" for
 * others. The string is static. */
const char *tlp_sni_strerror(int why);

/*
 * Read the SNI host name from the first bytes a client sent, buf[0..len).
 * Call again from the start with more bytes after -EAGAIN (no state is
 * kept). The ClientHello may span several handshake records (clients that
 * fragment it, as some do to dodge filters, are handled). Every extension
 * header is read to the end of the hello, so that a second server_name
 * extension is refused (a server that read the other name would be reached
 * around the routing rules); the other extensions' contents are not
 * checked (the server's TLS stack checks the whole hello). Bytes are judged in the order they
 * come, so a malformed or non-TLS start is refused as soon as it is in, and
 * an answer other than -EAGAIN never changes with more bytes. Never reads
 * at or past buf + len. Allocation-free.
 *
 * The host name (letters, digits, '-' and '_' in dot-separated labels of
 * 1..63 characters, at most TLP_SNI_HOST_MAX in all, no trailing dot) is
 * written lowercased and NUL-terminated into host, which must hold
 * hostcap >= TLP_SNI_HOST_MAX + 1 bytes.
 *
 * Returns the host name's length (> 0); 0 for a whole ClientHello that has
 * no host name (no server_name extension, or one with entries of other name
 * types only); -EAGAIN when more bytes are needed; -EPROTO with the reason
 * in *why (why may be NULL) for input that is not TLS or is malformed;
 * -EINVAL if host is NULL, hostcap too small, or buf NULL with len > 0.
 * host is an empty string unless the return is > 0. *why is TLP_SNI_OK
 * unless -EPROTO.
 */
int tlp_sni_parse(const void *buf, size_t len, char *host, size_t hostcap, int *why);

/*
 * Is s[0..len) a host name as tlp_sni_parse accepts it (any case)?
 * Returns 0 or -EINVAL.
 */
int tlp_sni_host_check(const char *s, size_t len);

/* One routing rule: an exact name ("a.example.com") or a wildcard
 * ("*.example.com", matching any name that ends in ".example.com" with at
 * least one label before it, but not "example.com" itself). */
struct tlp_sni_rule {
	const char *name; /* the pattern as written, not owned; must outlive the rule */
	uint32_t len;     /* its length */
	uint32_t target;  /* the caller's value for a match (a pool index) */
};

/*
 * Is s[0..len) a valid pattern: a host name, or "*." and a host name?
 * Returns 0 or -EINVAL.
 */
int tlp_sni_pattern_check(const char *s, size_t len);

/*
 * The first rule of rules[0..n) matching host[0..len), comparing without
 * regard to ASCII case. Rules are not checked here (tlp_sni_pattern_check
 * at load). Allocation-free.
 * Returns the index of the rule (0..n-1); -ENOENT when none matches (len 0
 * included); -EINVAL if rules is NULL with n > 0, or host NULL with len > 0.
 */
int tlp_sni_match(const struct tlp_sni_rule *rules, uint32_t n, const char *host, size_t len);

#endif /* TLP_SNI_H */
