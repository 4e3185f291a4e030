/* tools/tlproxy/proxyproto.c: PROXY protocol v1/v2 header parsing and building (see proxyproto.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proxyproto.h"

static const uint8_t v2sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
				  0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
static const char v1sig[6] = "PROXY ";

static const char *const why_text[TLP_PP_E_COUNT] = {
	[TLP_PP_OK] = "ok",
	[TLP_PP_E_SIGNATURE] = "not a PROXY protocol header",
	[TLP_PP_E_V1_TOO_LONG] = "v1 header without CRLF in 107 bytes",
	[TLP_PP_E_V1_CRLF] = "v1 header with a CR or LF out of place",
	[TLP_PP_E_V1_CHAR] = "v1 header with a byte that is not printable ASCII",
	[TLP_PP_E_V1_PROTO] = "v1 protocol not TCP4, TCP6 or UNKNOWN",
	[TLP_PP_E_V1_FIELDS] = "v1 header without exactly four single-spaced fields",
	[TLP_PP_E_V1_SRC_ADDR] = "v1 source address bad for its protocol",
	[TLP_PP_E_V1_DST_ADDR] = "v1 destination address bad for its protocol",
	[TLP_PP_E_V1_SRC_PORT] = "v1 source port not 0-65535 in plain decimal",
	[TLP_PP_E_V1_DST_PORT] = "v1 destination port not 0-65535 in plain decimal",
	[TLP_PP_E_V2_VERSION] = "v2 version not 2",
	[TLP_PP_E_V2_COMMAND] = "v2 command neither LOCAL nor PROXY",
	[TLP_PP_E_V2_FAMILY] = "v2 address family unknown or without transport",
	[TLP_PP_E_V2_TRANSPORT] = "v2 transport unknown or missing",
	[TLP_PP_E_V2_TOO_LONG] = "v2 header longer than 4096 bytes",
	[TLP_PP_E_V2_ADDR_LEN] = "v2 length too short for its addresses",
	[TLP_PP_E_V2_TLV] = "v2 TLV running past the header",
};
_Static_assert(sizeof why_text / sizeof why_text[0] == TLP_PP_E_COUNT, "one text per error");

const char *tlp_pp_strerror(int why)
{
	if (why < 0 || why >= TLP_PP_E_COUNT || !why_text[why])
		return "unknown";
	return why_text[why];
}

static int bad(int *why, int code)
{
	if (why)
		*why = code;
	return -EPROTO;
}

/* ---- v1 ---- */

/* A port: "0" or digits without a leading zero, at most 65535. */
static int v1_port(const char *s, size_t n, uint16_t *out)
{
	uint32_t v = 0;

	if (n == 0 || n > 5 || (s[0] == '0' && n > 1))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	if (v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* An address of family af, written into the sockaddr (port set later). */
static int v1_addr(int af, const char *s, size_t n, union tlp_pp_addr *a)
{
	char text[INET6_ADDRSTRLEN + 1];

	if (n == 0 || n >= sizeof text)
		return -1;
	memcpy(text, s, n);
	text[n] = '\0';
	if (af == AF_INET) {
		a->in.sin_family = AF_INET;
		return inet_pton(AF_INET, text, &a->in.sin_addr) == 1 ? 0 : -1;
	}
	a->in6.sin6_family = AF_INET6;
	return inet_pton(AF_INET6, text, &a->in6.sin6_addr) == 1 ? 0 : -1;
}

/* The line after "PROXY ", up to (not including) the CR. */
static int v1_fields(const char *s, size_t n, struct tlp_pp_header *out, int *why)
{
	const char *f[5];
	size_t fl[5], pos = 0;
	int af, k;
	uint16_t sport, dport;

	/* UNKNOWN: the rest of the line is to be ignored. */
	if (n >= 7 && !memcmp(s, "UNKNOWN", 7) && (n == 7 || s[7] == ' ')) {
		out->family = AF_UNSPEC;
		return 0;
	}
	if (n >= 4 && (!memcmp(s, "TCP4", 4) || !memcmp(s, "TCP6", 4)) && (n == 4 || s[4] == ' '))
		af = s[3] == '4' ? AF_INET : AF_INET6;
	else
		return bad(why, TLP_PP_E_V1_PROTO);
	pos = 4;
	for (k = 0; k < 5 && pos < n; k++) {
		size_t e;

		if (s[pos] != ' ')
			return bad(why, TLP_PP_E_V1_FIELDS);
		pos++;
		for (e = pos; e < n && s[e] != ' '; e++)
			;
		if (e == pos)
			return bad(why, TLP_PP_E_V1_FIELDS);
		f[k] = s + pos;
		fl[k] = e - pos;
		pos = e;
	}
	if (k != 4 || pos != n)
		return bad(why, TLP_PP_E_V1_FIELDS);
	if (v1_addr(af, f[0], fl[0], &out->src))
		return bad(why, TLP_PP_E_V1_SRC_ADDR);
	if (v1_addr(af, f[1], fl[1], &out->dst))
		return bad(why, TLP_PP_E_V1_DST_ADDR);
	if (v1_port(f[2], fl[2], &sport))
		return bad(why, TLP_PP_E_V1_SRC_PORT);
	if (v1_port(f[3], fl[3], &dport))
		return bad(why, TLP_PP_E_V1_DST_PORT);
	if (af == AF_INET) {
		out->src.in.sin_port = htons(sport);
		out->dst.in.sin_port = htons(dport);
	} else {
		out->src.in6.sin6_port = htons(sport);
		out->dst.in6.sin6_port = htons(dport);
	}
	out->family = (uint16_t)af;
	return 0;
}

/*
 * What the bytes of a v1 line after "PROXY " can still become, judged one
 * byte at a time: a line that no ending could make valid is refused at the
 * byte that makes it so ("PROXY I" cannot begin "TCP4", "TCP6" or
 * "UNKNOWN"), not when its CRLF or its 107th byte comes. The rules here
 * refuse only what no ending can fix; what they let through is judged
 * whole at the CRLF (v1_fields). For that they are looser than it: an IPv4
 * group's leading zero and the structure of an IPv6 address beyond its
 * characters, group lengths, "::" and length are left to the CRLF.
 */
struct v1_state {
	uint32_t pos;   /* bytes judged */
	uint8_t words;  /* while the protocol is read: TCP4 (1), TCP6 (2), UNKNOWN (4) still possible */
	uint8_t af;     /* 0 protocol, 4 or 6 fields, 1 UNKNOWN's rest (anything goes) */
	uint8_t field;  /* 0 source address, 1 destination, 2 source port, 3 destination port */
	uint8_t dots;   /* IPv4: dots so far */
	uint8_t colons; /* IPv6: ':' in a row */
	uint8_t dcolon; /* IPv6: "::" seen */
	uint8_t zero;   /* port: its first digit is 0 */
	uint32_t flen;  /* bytes of the current field */
	uint32_t run;   /* IPv4: digits of the group; IPv6: hex digits since ':' or '.' */
	uint32_t val;   /* IPv4 group or port value */
};

static int hexval(uint8_t ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* Judge the next byte (printable, not CR or LF): 0, or the error. */
static int v1_step(struct v1_state *st, uint8_t ch)
{
	static const char *const word[3] = {"TCP4", "TCP6", "UNKNOWN"};
	uint32_t p = st->pos++;
	int addr_err = st->field ? TLP_PP_E_V1_DST_ADDR : TLP_PP_E_V1_SRC_ADDR;
	int port_err = st->field == 2 ? TLP_PP_E_V1_SRC_PORT : TLP_PP_E_V1_DST_PORT;

	if (st->af == 1)
		return 0;
	if (st->af == 0) {
		uint8_t keep = 0;

		for (int w = 0; w < 3; w++) {
			size_t wl = strlen(word[w]);

			if (!(st->words & (1u << w)))
				continue;
			if (p < wl && (uint8_t)word[w][p] == ch)
				keep |= (uint8_t)(1u << w);
			else if (p == wl && ch == ' ')
				st->af = w == 2 ? 1 : w == 0 ? 4 : 6;
		}
		st->words = keep;
		return st->af || keep ? 0 : TLP_PP_E_V1_PROTO;
	}
	if (ch == ' ') {
		if (!st->flen || st->field == 3)
			return TLP_PP_E_V1_FIELDS;
		if (st->field < 2 && st->af == 4 && (st->dots != 3 || !st->run))
			return addr_err; /* an IPv4 address has four groups */
		st->field++;
		st->flen = st->run = st->val = 0;
		st->dots = st->colons = st->dcolon = st->zero = 0;
		return 0;
	}
	st->flen++;
	if (st->field >= 2) {
		if (ch < '0' || ch > '9')
			return port_err;
		if (st->flen == 1)
			st->zero = ch == '0';
		else if (st->zero)
			return port_err; /* a leading zero */
		st->val = st->val * 10 + (uint32_t)(ch - '0');
		return st->val > 65535 ? port_err : 0;
	}
	if (st->af == 4) {
		if (ch == '.') {
			if (!st->run || st->dots == 3)
				return addr_err;
			st->dots++;
			st->run = st->val = 0;
			return 0;
		}
		if (ch < '0' || ch > '9' || st->run == 3)
			return addr_err;
		st->run++;
		st->val = st->val * 10 + (uint32_t)(ch - '0');
		return st->val > 255 ? addr_err : 0;
	}
	if (st->flen > INET6_ADDRSTRLEN - 1)
		return addr_err;
	if (ch == ':') {
		st->run = 0;
		if (++st->colons == 2) {
			if (st->dcolon)
				return addr_err; /* "::" twice */
			st->dcolon = 1;
		}
		return st->colons > 2 ? addr_err : 0;
	}
	st->colons = 0;
	if (ch == '.') {
		st->run = 0; /* an IPv4 tail: "::ffff:10.0.0.1" */
		return 0;
	}
	if (!hexval(ch) || ++st->run > 4)
		return addr_err;
	return 0;
}

static int parse_v1(const uint8_t *b, size_t len, struct tlp_pp_header *out, int *why)
{
	size_t lim = len < TLP_PP_V1_MAX ? len : TLP_PP_V1_MAX;
	struct v1_state st = {.words = 7};
	int r;

	/* Bytes are judged in order, so that a verdict never depends on bytes
	 * past the one that decided it. */
	for (size_t i = 0; i < lim; i++) {
		if (i < sizeof v1sig) {
			if (b[i] != (uint8_t)v1sig[i])
				return bad(why, TLP_PP_E_SIGNATURE);
			continue;
		}
		if (b[i] == '\r') {
			if (i + 1 >= len)
				return -EAGAIN; /* i + 1 < 107 here, since i <= 105 */
			if (b[i + 1] != '\n')
				return bad(why, TLP_PP_E_V1_CRLF);
			r = v1_fields((const char *)b + 6, i - 6, out, why);
			if (r < 0)
				return r;
			out->version = 1;
			out->command = TLP_PP_CMD_PROXY;
			out->transport = TLP_PP_STREAM;
			out->len = (uint32_t)(i + 2);
			return (int)out->len;
		}
		if (b[i] == '\n')
			return bad(why, TLP_PP_E_V1_CRLF);
		if (b[i] < 0x20 || b[i] > 0x7e)
			return bad(why, TLP_PP_E_V1_CHAR);
		if ((r = v1_step(&st, b[i])))
			return bad(why, r);
		/* The CR must come by byte 106 so that its LF is byte 107. */
		if (i == TLP_PP_V1_MAX - 2)
			return bad(why, TLP_PP_E_V1_TOO_LONG);
	}
	return -EAGAIN;
}

/* ---- v2 ---- */

static int parse_v2(const uint8_t *b, size_t len, struct tlp_pp_header *out, int *why)
{
	size_t n = len < sizeof v2sig ? len : sizeof v2sig;
	unsigned fam = 0, tr = 0, cmd;
	size_t body, need_addr = 0, total;

	if (memcmp(b, v2sig, n))
		return bad(why, TLP_PP_E_SIGNATURE);
	if (len < 13)
		return -EAGAIN;
	if (b[12] >> 4 != 2)
		return bad(why, TLP_PP_E_V2_VERSION);
	cmd = b[12] & 0xf;
	if (cmd != TLP_PP_CMD_LOCAL && cmd != TLP_PP_CMD_PROXY)
		return bad(why, TLP_PP_E_V2_COMMAND);
	if (len < 14)
		return -EAGAIN;
	/* LOCAL: the protocol block, family included, is to be ignored. */
	if (cmd == TLP_PP_CMD_PROXY) {
		fam = b[13] >> 4;
		tr = b[13] & 0xf;
		if (fam > 3)
			return bad(why, TLP_PP_E_V2_FAMILY);
		if (tr > 2)
			return bad(why, TLP_PP_E_V2_TRANSPORT);
		if (fam == 0 && tr != 0)
			return bad(why, TLP_PP_E_V2_FAMILY);
		if (fam != 0 && tr == 0)
			return bad(why, TLP_PP_E_V2_TRANSPORT);
	}
	if (len < 16)
		return -EAGAIN;
	body = (size_t)b[14] << 8 | b[15];
	total = 16 + body;
	if (total > TLP_PP_V2_MAX)
		return bad(why, TLP_PP_E_V2_TOO_LONG);
	if (cmd == TLP_PP_CMD_PROXY)
		need_addr = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
	if (body < need_addr)
		return bad(why, TLP_PP_E_V2_ADDR_LEN);
	if (len < total)
		return -EAGAIN;

	out->version = 2;
	out->command = (uint8_t)cmd;
	out->transport = (uint8_t)tr;
	out->len = (uint32_t)total;
	if (cmd == TLP_PP_CMD_LOCAL || fam == 0) {
		out->family = AF_UNSPEC;
		return (int)total;
	}
	const uint8_t *a = b + 16;

	if (fam == 1) {
		out->family = AF_INET;
		out->src.in.sin_family = AF_INET;
		out->dst.in.sin_family = AF_INET;
		memcpy(&out->src.in.sin_addr, a, 4);
		memcpy(&out->dst.in.sin_addr, a + 4, 4);
		memcpy(&out->src.in.sin_port, a + 8, 2);
		memcpy(&out->dst.in.sin_port, a + 10, 2);
	} else if (fam == 2) {
		out->family = AF_INET6;
		out->src.in6.sin6_family = AF_INET6;
		out->dst.in6.sin6_family = AF_INET6;
		memcpy(&out->src.in6.sin6_addr, a, 16);
		memcpy(&out->dst.in6.sin6_addr, a + 16, 16);
		memcpy(&out->src.in6.sin6_port, a + 32, 2);
		memcpy(&out->dst.in6.sin6_port, a + 34, 2);
	} else {
		out->family = AF_UNIX;
		out->src.un.sun_family = AF_UNIX;
		out->dst.un.sun_family = AF_UNIX;
		memcpy(out->src.un.sun_path, a, 108);
		memcpy(out->dst.un.sun_path, a + 108, 108);
	}
	/* TLVs: type (1), length (2, big-endian), value. */
	size_t off = 16 + need_addr;

	out->tlv_off = (uint32_t)off;
	out->tlv_len = (uint32_t)(total - off);
	while (off < total) {
		size_t vl;

		if (total - off < 3)
			return bad(why, TLP_PP_E_V2_TLV);
		vl = (size_t)b[off + 1] << 8 | b[off + 2];
		if (vl > total - off - 3)
			return bad(why, TLP_PP_E_V2_TLV);
		off += 3 + vl;
		out->tlv_count++;
	}
	return (int)total;
}

int tlp_pp_parse(const void *buf, size_t len, struct tlp_pp_header *out, int *why)
{
	const uint8_t *b = buf;
	int r;

	if (why)
		*why = TLP_PP_OK;
	if (!out || (!buf && len))
		return -EINVAL;
	memset(out, 0, sizeof *out);
	if (len == 0)
		return -EAGAIN;
	if (b[0] == v2sig[0])
		r = parse_v2(b, len, out, why);
	else
		r = parse_v1(b, len, out, why);
	if (r < 0)
		memset(out, 0, sizeof *out);
	return r;
}

/* ---- building ---- */

/* The two addresses as a pair of one IP family: 4 (both IPv4), 6 (both
 * IPv6, an IPv4 one mapped), 0 (not an IP pair). */
static int ip_pair(const struct sockaddr *src, const struct sockaddr *dst, struct sockaddr_in6 *s6,
		   struct sockaddr_in6 *d6)
{
	const struct sockaddr *in[2] = {src, dst};
	struct sockaddr_in6 *o[2] = {s6, d6};

	if (!src || !dst)
		return 0;
	if ((src->sa_family != AF_INET && src->sa_family != AF_INET6) ||
	    (dst->sa_family != AF_INET && dst->sa_family != AF_INET6))
		return 0;
	if (src->sa_family == AF_INET && dst->sa_family == AF_INET)
		return 4;
	for (int i = 0; i < 2; i++) {
		memset(o[i], 0, sizeof *o[i]);
		if (in[i]->sa_family == AF_INET6) {
			memcpy(o[i], in[i], sizeof *o[i]);
		} else {
			const struct sockaddr_in *v4 = (const struct sockaddr_in *)in[i];

			o[i]->sin6_family = AF_INET6;
			o[i]->sin6_port = v4->sin_port;
			o[i]->sin6_addr.s6_addr[10] = 0xff;
			o[i]->sin6_addr.s6_addr[11] = 0xff;
			memcpy(&o[i]->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
		}
	}
	return 6;
}

int tlp_pp_build_v1(void *buf, size_t cap, const struct sockaddr *src, const struct sockaddr *dst)
{
	char sa[INET6_ADDRSTRLEN], da[INET6_ADDRSTRLEN], line[TLP_PP_V1_MAX + 1];
	struct sockaddr_in6 s6, d6;
	int n, kind;

	if (!buf)
		return -EINVAL;
	kind = ip_pair(src, dst, &s6, &d6);
	if (kind == 4) {
		const struct sockaddr_in *s = (const void *)src, *d = (const void *)dst;

		inet_ntop(AF_INET, &s->sin_addr, sa, sizeof sa);
		inet_ntop(AF_INET, &d->sin_addr, da, sizeof da);
		n = snprintf(line, sizeof line, "PROXY TCP4 %s %s %u %u\r\n", sa, da,
			     ntohs(s->sin_port), ntohs(d->sin_port));
	} else if (kind == 6) {
		inet_ntop(AF_INET6, &s6.sin6_addr, sa, sizeof sa);
		inet_ntop(AF_INET6, &d6.sin6_addr, da, sizeof da);
		n = snprintf(line, sizeof line, "PROXY TCP6 %s %s %u %u\r\n", sa, da,
			     ntohs(s6.sin6_port), ntohs(d6.sin6_port));
	} else {
		n = snprintf(line, sizeof line, "PROXY UNKNOWN\r\n");
	}
	/* At most 6 + 5 + 2 * 39 + 2 * 5 + 5 + 2 = 104 bytes: never cut. */
	if (n < 0 || n > TLP_PP_V1_MAX)
		return -EINVAL;
	if ((size_t)n > cap)
		return -ENOBUFS;
	memcpy(buf, line, (size_t)n);
	return n;
}

int tlp_pp_build_v2(void *buf, size_t cap, const struct sockaddr *src, const struct sockaddr *dst)
{
	uint8_t h[TLP_PP_BUILD_MAX];
	struct sockaddr_in6 s6, d6;
	size_t body = 0;
	int kind;

	if (!buf)
		return -EINVAL;
	memset(h, 0, sizeof h);
	memcpy(h, v2sig, sizeof v2sig);
	h[12] = 0x20 | TLP_PP_CMD_PROXY;
	kind = ip_pair(src, dst, &s6, &d6);
	if (!src || !dst) {
		h[12] = 0x20 | TLP_PP_CMD_LOCAL;
		h[13] = 0x00;
	} else if (kind == 4) {
		const struct sockaddr_in *s = (const void *)src, *d = (const void *)dst;

		h[13] = 0x11;
		memcpy(h + 16, &s->sin_addr, 4);
		memcpy(h + 20, &d->sin_addr, 4);
		memcpy(h + 24, &s->sin_port, 2);
		memcpy(h + 26, &d->sin_port, 2);
		body = 12;
	} else if (kind == 6) {
		h[13] = 0x21;
		memcpy(h + 16, &s6.sin6_addr, 16);
		memcpy(h + 32, &d6.sin6_addr, 16);
		memcpy(h + 48, &s6.sin6_port, 2);
		memcpy(h + 50, &d6.sin6_port, 2);
		body = 36;
	} else if (src->sa_family == AF_UNIX && dst->sa_family == AF_UNIX) {
		const struct sockaddr_un *s = (const void *)src, *d = (const void *)dst;

		h[13] = 0x31;
		/* Copy up to the NUL only: bytes after it are whatever the
		 * kernel or the caller left there. */
		memcpy(h + 16, s->sun_path, strnlen(s->sun_path, sizeof s->sun_path));
		memcpy(h + 124, d->sun_path, strnlen(d->sun_path, sizeof d->sun_path));
		body = 216;
	} else {
		h[13] = 0x00;
	}
	h[14] = (uint8_t)(body >> 8);
	h[15] = (uint8_t)body;
	if (16 + body > cap)
		return -ENOBUFS;
	memcpy(buf, h, 16 + body);
	return (int)(16 + body);
}

/* A TLV of type ty with n bytes of v at p; returns its length. */
static size_t put_tlv(uint8_t *p, uint8_t ty, const void *v, size_t n)
{
	p[0] = ty;
	p[1] = (uint8_t)(n >> 8);
	p[2] = (uint8_t)n;
	if (n)
		memcpy(p + 3, v, n);
	return 3 + n;
}

/* A field's length (a C string; over 255 bytes is refused by the caller). */
static size_t field(const char *s)
{
	return s ? strlen(s) : 0;
}

int tlp_pp_add_tls(void *buf, size_t len, size_t cap, const struct tlp_pp_tls *t)
{
	enum { PP2_TYPE_ALPN = 0x01, PP2_TYPE_AUTHORITY = 0x02, PP2_TYPE_SSL = 0x20,
	       PP2_SUBTYPE_SSL_VERSION = 0x21, PP2_SUBTYPE_SSL_CIPHER = 0x23,
	       PP2_CLIENT_SSL = 0x01, PP2_CLIENT_CERT_CONN = 0x02 };
	uint8_t *h = buf, tlv[TLP_PP_TLS_TLV_MAX];
	size_t na = field(t ? t->alpn : NULL), ns = field(t ? t->sni : NULL);
	size_t nv = field(t ? t->version : NULL), nc = field(t ? t->cipher : NULL);
	size_t n = 0, ssl, body;

	if (!buf || !t || len < 16 || memcmp(h, v2sig, sizeof v2sig) || (h[12] & 0xf0) != 0x20)
		return -EINVAL;
	body = (size_t)h[14] << 8 | h[15];
	if (16 + body != len || na > 255 || ns > 255 || nv > 255 || nc > 255)
		return -EINVAL;
	if ((h[12] & 0x0f) != TLP_PP_CMD_PROXY || (h[13] >> 4) == 0)
		return (int)len; /* no addresses: no TLVs */
	if (na)
		n += put_tlv(tlv + n, PP2_TYPE_ALPN, t->alpn, na);
	if (ns)
		n += put_tlv(tlv + n, PP2_TYPE_AUTHORITY, t->sni, ns);
	/* PP2_TYPE_SSL: client (1), verify (4, big-endian), its sub-TLVs. */
	ssl = n;
	n += 3;
	tlv[n++] = (uint8_t)(PP2_CLIENT_SSL | (t->client_cert ? PP2_CLIENT_CERT_CONN : 0));
	memset(tlv + n, 0, 4);
	tlv[n + 3] = t->client_cert && t->verified ? 0 : 1;
	n += 4;
	if (nv)
		n += put_tlv(tlv + n, PP2_SUBTYPE_SSL_VERSION, t->version, nv);
	if (nc)
		n += put_tlv(tlv + n, PP2_SUBTYPE_SSL_CIPHER, t->cipher, nc);
	tlv[ssl] = PP2_TYPE_SSL;
	tlv[ssl + 1] = (uint8_t)((n - ssl - 3) >> 8);
	tlv[ssl + 2] = (uint8_t)(n - ssl - 3);
	if (len + n > cap || body + n > 0xffff)
		return -ENOBUFS;
	memcpy(h + len, tlv, n);
	body += n;
	h[14] = (uint8_t)(body >> 8);
	h[15] = (uint8_t)body;
	return (int)(len + n);
}
