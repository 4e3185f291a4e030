/* tools/tlproxy/sni.c: the ClientHello SNI reader and the SNI routing matcher (see sni.h). */
#include <errno.h>
#include <string.h>

#include "sni.h"

static const char *const why_text[TLP_SNI_E_COUNT] = {
	[TLP_SNI_OK] = "ok",
	[TLP_SNI_E_NOT_TLS] = "not a TLS handshake",
	[TLP_SNI_E_RECORD] = "bad TLS record",
	[TLP_SNI_E_NOT_HELLO] = "first handshake message is not a ClientHello",
	[TLP_SNI_E_TOO_LONG] = "ClientHello too long",
	[TLP_SNI_E_VERSION] = "ClientHello version is not 3.x",
	[TLP_SNI_E_SESSION_ID] = "session id longer than 32 bytes",
	[TLP_SNI_E_CIPHERS] = "cipher suites empty or odd",
	[TLP_SNI_E_COMPRESSION] = "no compression method",
	[TLP_SNI_E_LENGTH] = "field past the end of the ClientHello",
	[TLP_SNI_E_EXTENSIONS] = "bad extensions length",
	[TLP_SNI_E_SNI] = "bad server_name extension",
	[TLP_SNI_E_DUPLICATE] = "two host names in server_name",
	[TLP_SNI_E_HOST] = "server name is not a host name",
	[TLP_SNI_E_SNI_TWICE] = "two server_name extensions",
};
_Static_assert(sizeof why_text / sizeof why_text[0] == TLP_SNI_E_COUNT, "one text per error");

const char *tlp_sni_strerror(int why)
{
	if (why < 0 || why >= TLP_SNI_E_COUNT || !why_text[why])
		return "unknown";
	return why_text[why];
}

/*
 * A cursor over the handshake byte stream: the payloads of consecutive
 * handshake records, their 5-byte headers skipped as they come. Every
 * read returns 0, -EAGAIN (the input ends first) or -EPROTO (c->why set).
 */
struct cur {
	const uint8_t *b;
	size_t len;  /* input bytes */
	size_t pos;  /* next input byte */
	size_t left; /* payload bytes left in the current record */
	int records; /* record headers read */
	int why;
};

static int fail(struct cur *c, int why)
{
	c->why = why;
	return -EPROTO;
}

/* Make sure the current record has a byte left, reading the next record's
 * header when it has none; each header byte is judged as it arrives. */
static int more(struct cur *c)
{
	size_t rl;

	/* Whatever byte is wanted next would sit at c->pos or later. */
	if (c->pos >= TLP_SNI_INPUT_MAX)
		return fail(c, TLP_SNI_E_TOO_LONG);
	if (c->left)
		return c->pos < c->len ? 0 : -EAGAIN;
	if (c->pos + 5 > TLP_SNI_INPUT_MAX)
		return fail(c, TLP_SNI_E_TOO_LONG);
	if (c->pos >= c->len)
		return -EAGAIN;
	if (c->b[c->pos] != 22)
		return fail(c, c->records ? TLP_SNI_E_RECORD : TLP_SNI_E_NOT_TLS);
	if (c->pos + 1 >= c->len)
		return -EAGAIN;
	if (c->b[c->pos + 1] != 3)
		return fail(c, c->records ? TLP_SNI_E_RECORD : TLP_SNI_E_NOT_TLS);
	if (c->pos + 2 >= c->len)
		return -EAGAIN;
	if (c->b[c->pos + 2] > 3)
		return fail(c, c->records ? TLP_SNI_E_RECORD : TLP_SNI_E_NOT_TLS);
	if (c->pos + 4 >= c->len)
		return -EAGAIN;
	rl = (size_t)c->b[c->pos + 3] << 8 | c->b[c->pos + 4];
	if (rl == 0 || rl > TLP_SNI_RECORD_MAX)
		return fail(c, TLP_SNI_E_RECORD);
	c->pos += 5;
	c->left = rl;
	c->records++;
	if (c->pos >= TLP_SNI_INPUT_MAX)
		return fail(c, TLP_SNI_E_TOO_LONG);
	return c->pos < c->len ? 0 : -EAGAIN;
}

static int get8(struct cur *c, uint8_t *v)
{
	int r = more(c);

	if (r)
		return r;
	*v = c->b[c->pos++];
	c->left--;
	return 0;
}

static int get16(struct cur *c, size_t *v)
{
	uint8_t h, l;
	int r;

	if ((r = get8(c, &h)) || (r = get8(c, &l)))
		return r;
	*v = (size_t)h << 8 | l;
	return 0;
}

static int skip(struct cur *c, size_t n)
{
	while (n) {
		size_t k;
		int r = more(c);

		if (r)
			return r;
		/* more() left pos below both len and the input cap. */
		k = n < c->left ? n : c->left;
		if (k > c->len - c->pos)
			k = c->len - c->pos;
		if (k > TLP_SNI_INPUT_MAX - c->pos)
			k = TLP_SNI_INPUT_MAX - c->pos;
		c->pos += k;
		c->left -= k;
		n -= k;
	}
	return 0;
}

/* The characters and label lengths of a host name. */
static int host_ok(const char *s, size_t len)
{
	size_t label = 0;

	if (len == 0 || len > TLP_SNI_HOST_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];

		if (ch == '.') {
			if (label == 0)
				return 0;
			label = 0;
			continue;
		}
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
			return 0;
		if (++label > 63)
			return 0;
	}
	return label > 0;
}

int tlp_sni_host_check(const char *s, size_t len)
{
	if (!s && len)
		return -EINVAL;
	return host_ok(s, len) ? 0 : -EINVAL;
}

int tlp_sni_pattern_check(const char *s, size_t len)
{
	if (!s && len)
		return -EINVAL;
	if (len > 2 && s[0] == '*' && s[1] == '.')
		return host_ok(s + 2, len - 2) ? 0 : -EINVAL;
	return host_ok(s, len) ? 0 : -EINVAL;
}

/* The server_name extension's data (ext bytes), cursor at its start. */
static int read_sni(struct cur *c, size_t ext, char *host, int *hlen)
{
	size_t list, done = 0;
	int r, found = 0;

	if (ext < 2)
		return fail(c, TLP_SNI_E_SNI);
	if ((r = get16(c, &list)))
		return r;
	if (list != ext - 2 || list == 0)
		return fail(c, TLP_SNI_E_SNI);
	while (done < list) {
		uint8_t type;
		size_t nl;

		if (list - done < 3)
			return fail(c, TLP_SNI_E_SNI);
		if ((r = get8(c, &type)) || (r = get16(c, &nl)))
			return r;
		done += 3;
		if (nl > list - done)
			return fail(c, TLP_SNI_E_SNI);
		if (type != 0) { /* only host_name (0) is defined; skip others */
			if ((r = skip(c, nl)))
				return r;
			done += nl;
			continue;
		}
		if (found)
			return fail(c, TLP_SNI_E_DUPLICATE);
		if (nl == 0 || nl > TLP_SNI_HOST_MAX)
			return fail(c, TLP_SNI_E_HOST);
		for (size_t i = 0; i < nl; i++) {
			uint8_t ch;

			if ((r = get8(c, &ch)))
				return r;
			host[i] = (char)ch;
		}
		host[nl] = '\0';
		if (!host_ok(host, nl))
			return fail(c, TLP_SNI_E_HOST);
		done += nl;
		found = 1;
		*hlen = (int)nl;
	}
	return 0;
}

static int parse(struct cur *c, char *host)
{
	uint8_t type, u8, maj;
	size_t body, used, n, ext_total, ext_done = 0;
	int r;

	if ((r = get8(c, &type)))
		return r;
	if (type != 1)
		return fail(c, TLP_SNI_E_NOT_HELLO);
	body = 0;
	for (int i = 0; i < 3; i++) {
		if ((r = get8(c, &u8)))
			return r;
		body = body << 8 | u8;
	}
	if (body > TLP_SNI_INPUT_MAX)
		return fail(c, TLP_SNI_E_TOO_LONG);
	/* version (2), random (32), session id length (1) */
	if (body < 35)
		return fail(c, TLP_SNI_E_LENGTH);
	if ((r = get8(c, &maj)))
		return r;
	if (maj != 3)
		return fail(c, TLP_SNI_E_VERSION);
	if ((r = skip(c, 1 + 32)) || (r = get8(c, &u8)))
		return r;
	used = 35;
	if (u8 > 32)
		return fail(c, TLP_SNI_E_SESSION_ID);
	if (body - used < (size_t)u8 + 2)
		return fail(c, TLP_SNI_E_LENGTH);
	if ((r = skip(c, u8)) || (r = get16(c, &n)))
		return r;
	used += u8 + 2;
	if (n == 0 || n % 2)
		return fail(c, TLP_SNI_E_CIPHERS);
	if (body - used < n + 1)
		return fail(c, TLP_SNI_E_LENGTH);
	if ((r = skip(c, n)) || (r = get8(c, &u8)))
		return r;
	used += n + 1;
	if (u8 == 0)
		return fail(c, TLP_SNI_E_COMPRESSION);
	if (body - used < u8)
		return fail(c, TLP_SNI_E_LENGTH);
	if ((r = skip(c, u8)))
		return r;
	used += u8;
	if (used == body)
		return 0; /* no extensions at all (allowed before TLS 1.3) */
	if (body - used < 2)
		return fail(c, TLP_SNI_E_EXTENSIONS);
	if ((r = get16(c, &ext_total)))
		return r;
	used += 2;
	if (ext_total != body - used)
		return fail(c, TLP_SNI_E_EXTENSIONS);
	int hlen = 0, seen = 0;

	while (ext_done < ext_total) {
		size_t et, el;

		if (ext_total - ext_done < 4)
			return fail(c, TLP_SNI_E_EXTENSIONS);
		if ((r = get16(c, &et)) || (r = get16(c, &el)))
			return r;
		ext_done += 4;
		if (el > ext_total - ext_done)
			return fail(c, TLP_SNI_E_EXTENSIONS);
		if (et != 0) {
			if ((r = skip(c, el)))
				return r;
			ext_done += el;
			continue;
		}
		/* A second server_name is forbidden (RFC 8446 4.2: one extension
		 * of a type per block), and a router that took the first while
		 * the server took the other would route around its rules: the
		 * extensions after the first are walked to refuse one. */
		if (seen)
			return fail(c, TLP_SNI_E_SNI_TWICE);
		if ((r = read_sni(c, el, host, &hlen)))
			return r;
		seen = 1;
		ext_done += el;
	}
	return hlen;
}

int tlp_sni_parse(const void *buf, size_t len, char *host, size_t hostcap, int *why)
{
	struct cur c = {.b = buf, .len = len};
	int r;

	if (why)
		*why = TLP_SNI_OK;
	if (!host || hostcap < TLP_SNI_HOST_MAX + 1 || (!buf && len)) {
		if (host && hostcap)
			host[0] = '\0';
		return -EINVAL;
	}
	host[0] = '\0';
	r = parse(&c, host);
	if (r <= 0) {
		host[0] = '\0';
		if (r == -EPROTO && why)
			*why = c.why;
		return r;
	}
	for (int i = 0; i < r; i++)
		if (host[i] >= 'A' && host[i] <= 'Z')
			host[i] = (char)(host[i] - 'A' + 'a');
	return r;
}

/* Equal without regard to ASCII case, n bytes each. */
static int ieq(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x - 'A' + 'a');
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y - 'A' + 'a');
		if (x != y)
			return 0;
	}
	return 1;
}

int tlp_sni_match(const struct tlp_sni_rule *rules, uint32_t n, const char *host, size_t len)
{
	if ((!rules && n) || (!host && len))
		return -EINVAL;
	if (len == 0)
		return -ENOENT;
	for (uint32_t i = 0; i < n; i++) {
		const char *p = rules[i].name;
		size_t pl = rules[i].len;

		if (!p)
			continue;
		if (pl >= 2 && p[0] == '*' && p[1] == '.') {
			/* "*.example.com": host ends in ".example.com", something before it. */
			size_t sl = pl - 1;

			if (len > sl && ieq(host + len - sl, p + 1, sl))
				return (int)i;
		} else if (pl == len && ieq(host, p, len)) {
			return (int)i;
		}
	}
	return -ENOENT;
}
