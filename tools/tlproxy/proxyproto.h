/* tools/tlproxy/proxyproto.h: the PROXY protocol (v1 text, v2 binary): an incremental header parser for what clients send, and builders of the headers sent to servers. */
#ifndef TLP_PROXYPROTO_H
#define TLP_PROXYPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

/* A v1 header is at most 107 bytes, CRLF included (the protocol's limit). */
#define TLP_PP_V1_MAX 107
/* A v2 header is 16 fixed bytes and a body of the length they announce; a
 * header longer than this in all is refused (TLP_PP_E_V2_TOO_LONG). The
 * addresses take at most 216 bytes, so this leaves room for TLVs. */
#define TLP_PP_V2_MAX 4096
/* The builders never write more than this (a v2 header of AF_UNIX paths). */
#define TLP_PP_BUILD_MAX 232
/* tlp_pp_add_tls appends at most this (every field at its longest). */
#define TLP_PP_TLS_TLV_MAX (3 + 255 + 3 + 255 + 3 + 5 + 3 + 255 + 3 + 255)

/* Why a header was refused (tlp_pp_parse's *why when it returns -EPROTO). */
enum tlp_pp_error {
	TLP_PP_OK = 0,
	TLP_PP_E_SIGNATURE,     /* neither "PROXY " nor the 12-byte v2 signature */
	TLP_PP_E_V1_TOO_LONG,   /* no CRLF within the first 107 bytes */
	TLP_PP_E_V1_CRLF,       /* a CR not followed by LF, or a LF alone */
	TLP_PP_E_V1_CHAR,       /* a byte outside printable ASCII before the CRLF */
	TLP_PP_E_V1_PROTO,      /* protocol not TCP4, TCP6 or UNKNOWN */
	TLP_PP_E_V1_FIELDS,     /* not exactly 4 fields after TCP4/TCP6, or not single spaces */
	TLP_PP_E_V1_SRC_ADDR,   /* source address not of the protocol's family */
	TLP_PP_E_V1_DST_ADDR,   /* destination address likewise */
	TLP_PP_E_V1_SRC_PORT,   /* source port: not decimal, a leading zero, or past 65535 */
	TLP_PP_E_V1_DST_PORT,   /* destination port likewise */
	TLP_PP_E_V2_VERSION,    /* version nibble not 2 */
	TLP_PP_E_V2_COMMAND,    /* command nibble neither LOCAL (0) nor PROXY (1) */
	TLP_PP_E_V2_FAMILY,     /* family nibble past 3 (UNIX), or UNSPEC with a transport */
	TLP_PP_E_V2_TRANSPORT,  /* transport nibble past 2 (DGRAM), or a family without one */
	TLP_PP_E_V2_TOO_LONG,   /* 16 + announced length > TLP_PP_V2_MAX */
	TLP_PP_E_V2_ADDR_LEN,   /* announced length shorter than the family's addresses */
	TLP_PP_E_V2_TLV,        /* a TLV header or value running past the announced length */
	TLP_PP_E_COUNT
};

/* A short English phrase for why (enum tlp_pp_error); "unknown" for others.
 * The string is static. */
const char *tlp_pp_strerror(int why);

enum { TLP_PP_CMD_LOCAL = 0, TLP_PP_CMD_PROXY = 1 };
enum { TLP_PP_TRANSPORT_UNSPEC = 0, TLP_PP_STREAM = 1, TLP_PP_DGRAM = 2 };

union tlp_pp_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
	struct sockaddr_un un; /* sun_path: the 108 bytes as sent; the path ends
				* at the first NUL or after all 108 */
};

/* A parsed header. */
struct tlp_pp_header {
	uint32_t len;       /* bytes of the header: the client's payload starts at buf + len */
	uint8_t version;    /* 1 or 2 */
	uint8_t command;    /* TLP_PP_CMD_PROXY, or TLP_PP_CMD_LOCAL (v2 only) */
	uint8_t transport;  /* TLP_PP_STREAM (v1 always), TLP_PP_DGRAM, TLP_PP_TRANSPORT_UNSPEC */
	uint16_t family;    /* AF_INET, AF_INET6, AF_UNIX; AF_UNSPEC when the header carries
			     * no addresses to use (v1 UNKNOWN, v2 UNSPEC, v2 LOCAL): the
			     * connection's own endpoints stand */
	union tlp_pp_addr src, dst; /* valid (zeroed otherwise) when family != AF_UNSPEC */
	uint32_t tlv_off;   /* v2 with addresses: offset of the TLVs in buf, and their */
	uint32_t tlv_len;   /* total length; every TLV inside was bounds-checked */
	uint32_t tlv_count; /* how many TLVs */
};

/*
 * Parse a PROXY header at the start of buf[0..len): the bytes a client sent
 * so far. Call again with more bytes after -EAGAIN (from the start; the
 * parser keeps no state). A malformed header is refused as soon as the bytes
 * that make it malformed are in: a client that sends something else than a
 * PROXY header is told from its first byte. The answer depends only on the
 * bytes read: once it is not -EAGAIN, more bytes never change it. A v1
 * line is judged byte by byte as it comes (the signature, its characters,
 * the protocol word, the number and spacing of the fields, each field's
 * characters and lengths, the ports' values, the 107-byte limit), so one
 * that no ending could make valid, such as "PROXY INVALID", is refused
 * without waiting for its CRLF; what only the whole line can decide (the
 * addresses themselves) is judged when the CRLF is in. LOCAL and UNSPEC
 * headers' bodies are skipped unread (the protocol says to ignore them);
 * TLVs of v2 headers with addresses are walked and bounds-checked, not
 * interpreted (a CRC32C TLV is not verified). Allocation-free.
 *
 * Returns the header length (> 0) with *out filled; -EAGAIN when the bytes
 * are a valid beginning but not a whole header; -EPROTO when malformed, with
 * the reason in *why (why may be NULL); -EINVAL if out is NULL or buf is
 * NULL with len > 0. *why is TLP_PP_OK unless -EPROTO.
 */
int tlp_pp_parse(const void *buf, size_t len, struct tlp_pp_header *out, int *why);

/*
 * Build a v1 header for a connection from src (the client) to dst (the
 * address it reached) into buf of cap bytes; no NUL is added. AF_INET and
 * AF_INET6 addresses give "PROXY TCP4 ..." or "PROXY TCP6 ..."; when one is
 * IPv4 and the other IPv6, the IPv4 one is written IPv4-mapped (the protocol
 * wants one family); anything else (AF_UNIX, a NULL address) gives
 * "PROXY UNKNOWN\r\n". Allocation-free.
 * Returns the length written (<= TLP_PP_V1_MAX); -ENOBUFS if cap is too
 * small (buf then unspecified); -EINVAL if buf is NULL.
 */
int tlp_pp_build_v1(void *buf, size_t cap, const struct sockaddr *src, const struct sockaddr *dst);

/*
 * Build a v2 header (PROXY command, STREAM transport) likewise: AF_INET or
 * AF_INET6 pairs (mixed ones IPv4-mapped), AF_UNIX pairs (struct sockaddr_un,
 * whose sun_path is read up to its first NUL or its 108 bytes and sent
 * NUL-padded; or a runtime's tl_addr of family AF_UNIX, zero past the
 * family, so an empty path), no TLVs. A NULL src or dst gives a LOCAL header (a connection
 * of the proxy's own, such as a health check); other family pairs give a
 * PROXY header of family UNSPEC, which tells the server to use the
 * connection's own endpoints. Allocation-free.
 * Returns the length written (<= TLP_PP_BUILD_MAX); -ENOBUFS if cap is too
 * small (buf then unspecified); -EINVAL if buf is NULL.
 */
int tlp_pp_build_v2(void *buf, size_t cap, const struct sockaddr *src, const struct sockaddr *dst);

/* The TLS a client's connection was terminated with (tlp_pp_add_tls).
 * Strings are NUL-terminated; "" (or NULL) leaves a field out. */
struct tlp_pp_tls {
	const char *version;  /* "TLSv1.3", "TLSv1.2" */
	const char *cipher;   /* "TLS_AES_128_GCM_SHA256" */
	const char *sni;      /* the name the client sent */
	const char *alpn;     /* the protocol agreed */
	int client_cert;      /* the client presented a certificate */
	int verified;         /* ... and it verified */
};

/*
 * Append the TLVs of a connection that came over TLS to the v2 header of
 * len bytes at buf (cap bytes of room), as the PROXY protocol defines
 * them: PP2_TYPE_ALPN (0x01) and PP2_TYPE_AUTHORITY (0x02, the SNI) when
 * there are; PP2_TYPE_SSL (0x20) with its client bits (PP2_CLIENT_SSL,
 * and PP2_CLIENT_CERT_CONN with a client certificate), its verify field
 * (0 only for a client certificate that verified, 1 otherwise, as the
 * protocol says) and the sub-TLVs PP2_SUBTYPE_SSL_VERSION (0x21) and
 * PP2_SUBTYPE_SSL_CIPHER (0x23). The header's length field is updated.
 * A header with no addresses (LOCAL, or family UNSPEC) gets none: its
 * receiver uses the connection's own endpoints and may skip the body.
 * Returns the new length (<= len + TLP_PP_TLS_TLV_MAX); -ENOBUFS (cap too
 * small; buf unchanged); -EINVAL (buf or t NULL, not a v2 header, len not
 * its announced length, or a field over 255 bytes). Allocation-free.
 */
int tlp_pp_add_tls(void *buf, size_t len, size_t cap, const struct tlp_pp_tls *t);

#endif /* TLP_PROXYPROTO_H */
