/* tests/test_tlp_proxyproto.c: CUnit tests of tlproxy's PROXY protocol v1/v2 parser and builders (tools/tlproxy/proxyproto.c): every malformed shape, incremental input, round trips. */
#include <arpa/inet.h>
#include <stdint.h>

#include "proxyproto.h"
#include "tlp_test.h"

static const uint8_t SIG[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
				0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

/* Parse a heap copy of exactly len bytes, so that ASan sees any read past it. */
static int pp(const void *b, size_t len, struct tlp_pp_header *h, int *why)
{
	uint8_t *copy = malloc(len ? len : 1);
	int r;

	memcpy(copy, b, len);
	r = tlp_pp_parse(len ? copy : NULL, len, h, why);
	free(copy);
	return r;
}

/* Every prefix shorter than the decisive byte is "need more"; from there
 * on the answer is the whole input's. Returns the number of prefixes that
 * broke the rule. */
static int prefixes_agree(const void *b, size_t len)
{
	struct tlp_pp_header h;
	int final = pp(b, len, &h, NULL), decided = 0, bad = 0;

	for (size_t k = 0; k <= len; k++) {
		int r = pp(b, k, &h, NULL);

		if (r == -EAGAIN && !decided)
			continue;
		decided = 1;
		if (r != final)
			bad++;
	}
	return bad;
}

static void v1_bad(const char *line, int want)
{
	struct tlp_pp_header h;
	int why = -1, r = pp(line, strlen(line), &h, &why);

	T_TRUE(r == -EPROTO && why == want, "\"%s\": got %d why %d (%s), want why %d (%s)", line, r,
	       why, tlp_pp_strerror(why), want, tlp_pp_strerror(want));
	T_EQ(h.len, 0);
	T_EQ(prefixes_agree(line, strlen(line)), 0);
}

static void test_v1_ok(void)
{
	struct tlp_pp_header h;
	const char *s;
	char a[INET6_ADDRSTRLEN];
	int why = -1;

	s = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n";
	T_EQ(pp(s, strlen(s), &h, &why), 47);
	T_EQ(why, TLP_PP_OK);
	T_EQ(h.len, 47);
	T_EQ(h.version, 1);
	T_EQ(h.command, TLP_PP_CMD_PROXY);
	T_EQ(h.transport, TLP_PP_STREAM);
	T_EQ(h.family, AF_INET);
	T_EQ(h.src.in.sin_family, AF_INET);
	T_STR(inet_ntop(AF_INET, &h.src.in.sin_addr, a, sizeof a), "192.168.0.1");
	T_STR(inet_ntop(AF_INET, &h.dst.in.sin_addr, a, sizeof a), "192.168.0.11");
	T_EQ(ntohs(h.src.in.sin_port), 56324);
	T_EQ(ntohs(h.dst.in.sin_port), 443);
	T_EQ(prefixes_agree(s, strlen(s)), 0);

	s = "PROXY TCP6 2001:db8::1 ::1 0 65535\r\n";
	T_EQ(pp(s, strlen(s), &h, NULL), (long long)strlen(s));
	T_EQ(h.family, AF_INET6);
	T_STR(inet_ntop(AF_INET6, &h.src.in6.sin6_addr, a, sizeof a), "2001:db8::1");
	T_STR(inet_ntop(AF_INET6, &h.dst.in6.sin6_addr, a, sizeof a), "::1");
	T_EQ(ntohs(h.src.in6.sin6_port), 0);
	T_EQ(ntohs(h.dst.in6.sin6_port), 65535);

	s = "PROXY TCP6 ::ffff:10.0.0.1 ::ffff:10.0.0.2 1 2\r\n";
	T_EQ(pp(s, strlen(s), &h, NULL), (long long)strlen(s));
	T_EQ(h.family, AF_INET6);

	/* UNKNOWN: the rest of the line is ignored. */
	s = "PROXY UNKNOWN\r\n";
	T_EQ(pp(s, strlen(s), &h, NULL), 15);
	T_EQ(h.family, AF_UNSPEC);
	T_EQ(h.version, 1);
	s = "PROXY UNKNOWN ffff::1 whatever 1 2\r\nxyz";
	T_EQ(pp(s, strlen(s), &h, NULL), (long long)strlen(s) - 3);
	T_EQ(h.family, AF_UNSPEC);

	/* The longest line: 107 bytes with its CRLF. */
	char line[200];

	memset(line, 'x', sizeof line);
	memcpy(line, "PROXY UNKNOWN ", 14);
	line[105] = '\r';
	line[106] = '\n';
	T_EQ(pp(line, 107, &h, NULL), 107);
	T_EQ(prefixes_agree(line, 107), 0);
	/* Payload bytes that follow are not looked at. */
	line[107] = '\0';
	T_EQ(pp(line, 108, &h, NULL), 107);
}

static void test_v1_bad(void)
{
	char line[200];

	v1_bad("P\x01", TLP_PP_E_SIGNATURE);
	v1_bad("GET / HTTP/1.1\r\n", TLP_PP_E_SIGNATURE);
	v1_bad("PROXZ TCP4", TLP_PP_E_SIGNATURE);
	v1_bad("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_SIGNATURE);
	v1_bad("PROXY\tTCP4", TLP_PP_E_SIGNATURE);
	v1_bad("\x16\x03\x01", TLP_PP_E_SIGNATURE);

	/* Without CRLF, or with CR and LF out of place. */
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", TLP_PP_E_V1_CRLF);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", TLP_PP_E_V1_CRLF);
	v1_bad("PROXY TCP4 1.2.3.4\r\r\n", TLP_PP_E_V1_CRLF);
	v1_bad("PROXY \r\n", TLP_PP_E_V1_PROTO);
	memset(line, 'x', sizeof line);
	memcpy(line, "PROXY UNKNOWN ", 14);
	line[106] = '\0'; /* 106 bytes without a CR: the CR cannot be in time */
	v1_bad(line, TLP_PP_E_V1_TOO_LONG);
	line[106] = '\r';
	line[107] = '\n';
	line[108] = '\0';
	v1_bad(line, TLP_PP_E_V1_TOO_LONG);

	/* Bytes outside printable ASCII. */
	v1_bad("PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n", TLP_PP_E_V1_CHAR);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\x7f\r\n", TLP_PP_E_V1_CHAR);
	v1_bad("PROXY \xc3\xa9", TLP_PP_E_V1_CHAR);
	{
		struct tlp_pp_header h;
		int why;
		static const char nul[] = "PROXY TCP4 1.2.3.4\0 5.6.7.8 1 2\r\n";

		T_EQ(pp(nul, sizeof nul - 1, &h, &why), -EPROTO);
		T_EQ(why, TLP_PP_E_V1_CHAR);
	}

	/* Protocols. */
	v1_bad("PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY TCP44 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY UNKNOWNX\r\n", TLP_PP_E_V1_PROTO);
	v1_bad("PROXY UNKNOW\r\n", TLP_PP_E_V1_PROTO);

	/* Fields: count and spacing. */
	v1_bad("PROXY TCP4\r\n", TLP_PP_E_V1_FIELDS);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", TLP_PP_E_V1_FIELDS);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", TLP_PP_E_V1_FIELDS);
	v1_bad("PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", TLP_PP_E_V1_FIELDS);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", TLP_PP_E_V1_FIELDS);
	v1_bad("PROXY TCP4 \r\n", TLP_PP_E_V1_FIELDS);

	/* Addresses not of the protocol's family, or not addresses. */
	v1_bad("PROXY TCP4 ::1 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 host 5.6.7.8 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP6 1.2.3.4 ::1 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n", TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP6 0000:0000:0000:0000:0000:0000:0000:0000:1 ::1 1 2\r\n",
	       TLP_PP_E_V1_SRC_ADDR);
	v1_bad("PROXY TCP4 1.2.3.4 ::1 1 2\r\n", TLP_PP_E_V1_DST_ADDR);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7 1 2\r\n", TLP_PP_E_V1_DST_ADDR);
	v1_bad("PROXY TCP6 ::1 5.6.7.8 1 2\r\n", TLP_PP_E_V1_DST_ADDR);
	v1_bad("PROXY TCP6 ::1 [::2] 1 2\r\n", TLP_PP_E_V1_DST_ADDR);

	/* Ports: range, leading zeros, signs, digits only. */
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 123456 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1a 2\r\n", TLP_PP_E_V1_SRC_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", TLP_PP_E_V1_DST_PORT);
	v1_bad("PROXY TCP4 1.2.3.4 5.6.7.8 1 0x10\r\n", TLP_PP_E_V1_DST_PORT);
	v1_bad("PROXY TCP6 ::1 ::2 1 02\r\n", TLP_PP_E_V1_DST_PORT);
}

static void test_v1_incremental(void)
{
	static const char *const lines[] = {
		"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
		"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
		"PROXY UNKNOWN\r\n",
	};
	struct tlp_pp_header h;

	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		size_t n = strlen(lines[i]);

		T_TRUE(n <= TLP_PP_V1_MAX, "%zu", n);
		for (size_t k = 0; k < n; k++)
			T_EQ(pp(lines[i], k, &h, NULL), -EAGAIN);
		T_EQ(pp(lines[i], n, &h, NULL), (long long)n);
	}
	/* Bad bytes are refused as soon as they are in. */
	int why;

	T_EQ(pp("PROXY TCP4 1.2.3.4\x01", 19, &h, &why), -EPROTO);
	T_EQ(why, TLP_PP_E_V1_CHAR);
	T_EQ(pp("PROXY TCP4 1.2.3.4\rx", 20, &h, &why), -EPROTO);
	T_EQ(why, TLP_PP_E_V1_CRLF);
	T_EQ(pp("PROXY TCP4 1.2.3.4\r", 19, &h, &why), -EAGAIN);
	T_EQ(why, TLP_PP_OK);
	T_EQ(pp("PRO", 3, &h, NULL), -EAGAIN);
	T_EQ(pp("", 0, &h, NULL), -EAGAIN);
	T_EQ(tlp_pp_parse(NULL, 0, &h, NULL), -EAGAIN);
	T_EQ(tlp_pp_parse(NULL, 1, &h, NULL), -EINVAL);
	T_EQ(tlp_pp_parse("PROXY", 5, NULL, NULL), -EINVAL);
}

/* s is refused from its at-th byte on with why, and needs more before. */
static void refused_at(const char *s, size_t at, int want)
{
	struct tlp_pp_header h;
	size_t n = strlen(s);

	for (size_t k = 0; k <= n; k++) {
		int why = -1, r = pp(s, k, &h, &why);

		if (k < at)
			T_TRUE(r == -EAGAIN, "\"%.*s\" (%zu bytes): %d, want -EAGAIN", (int)k, s, k, r);
		else
			T_TRUE(r == -EPROTO && why == want,
			       "\"%.*s\" (%zu bytes): %d why %s, want %s", (int)k, s, k, r,
			       tlp_pp_strerror(why), tlp_pp_strerror(want));
	}
}

/* Every proper prefix of a valid line needs more: none is refused early. */
static void prefixes_wait(const char *line)
{
	struct tlp_pp_header h;
	size_t n = strlen(line);

	for (size_t k = 0; k < n; k++) {
		int r = pp(line, k, &h, NULL);

		T_TRUE(r == -EAGAIN, "\"%.*s\" (%zu of %zu bytes): %d, want -EAGAIN", (int)k, line,
		       k, n, r);
	}
	T_EQ(pp(line, n, &h, NULL), (long long)n);
}

static void test_v1_prefix(void)
{
	/* Refused at the byte that no ending can fix, not at the CRLF. */
	refused_at("PROXY INVALID", 7, TLP_PP_E_V1_PROTO);
	refused_at("PROXY TCP5 1.2.3.4", 10, TLP_PP_E_V1_PROTO);
	refused_at("PROXY TCP44", 11, TLP_PP_E_V1_PROTO);
	refused_at("PROXY UNKNOWNX", 14, TLP_PP_E_V1_PROTO);
	refused_at("PROXY  TCP4", 7, TLP_PP_E_V1_PROTO);
	refused_at("PROXY TCP4  1.2.3.4", 12, TLP_PP_E_V1_FIELDS);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ", 31, TLP_PP_E_V1_FIELDS);
	refused_at("PROXY TCP4 host 5.6.7.8 1 2", 12, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 ::1", 12, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 1.2.3 5.6.7.8", 17, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 256.1.1.1", 14, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 1.2.3.4.5", 19, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 1..2", 14, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.x", 26, TLP_PP_E_V1_DST_ADDR);
	refused_at("PROXY TCP6 1:::", 15, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP6 1::2::3", 17, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP6 12345", 16, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP6 ::1 [::2]", 16, TLP_PP_E_V1_DST_ADDR);
	refused_at("PROXY TCP6 ::g", 14, TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP6 0000:0000:0000:0000:0000:0000:0000:0000:1", 57,
		   TLP_PP_E_V1_SRC_ADDR);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.8 65536", 32, TLP_PP_E_V1_SRC_PORT);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.8 08", 29, TLP_PP_E_V1_SRC_PORT);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.8 -1", 28, TLP_PP_E_V1_SRC_PORT);
	refused_at("PROXY TCP4 1.2.3.4 5.6.7.8 1 0x10", 31, TLP_PP_E_V1_DST_PORT);

	/* UNKNOWN's rest is anything printable: only the length decides. */
	prefixes_wait("PROXY UNKNOWN 1:::1 garbage \"here\" 99999999\r\n");

	/* Valid lines of every address shape: no prefix is refused. */
	static const char *const ok[] = {
		"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n",
		"PROXY TCP4 10.20.30.40 1.2.3.4 1 22\r\n",
		"PROXY TCP6 :: ::1 1 2\r\n",
		"PROXY TCP6 1:: 1::2 1 2\r\n",
		"PROXY TCP6 1:2:3:4:5:6:7:: ::1:2:3:4:5:6:7 1 2\r\n",
		"PROXY TCP6 ABCD:ef01:2345:6789:abcd:EF01:2345:6789 fe80::1 443 65535\r\n",
		"PROXY TCP6 ::ffff:10.0.0.1 ::FFFF:192.168.100.200 1 2\r\n",
		"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255 ::1 1 2\r\n",
		"PROXY TCP6 1:2:3:4:5:6:1.2.3.4 2001:db8::1.2.3.4 1 2\r\n",
		"PROXY UNKNOWN\r\n",
		"PROXY UNKNOWN ffff::1 whatever 1 2\r\n",
	};

	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		prefixes_wait(ok[i]);

	/* Random addresses as inet_ntop writes them, built into lines. */
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (int i = 0; i < 2000; i++) {
		struct sockaddr_in6 a[2];
		char line[TLP_PP_V1_MAX + 1];

		for (int k = 0; k < 2; k++) {
			memset(&a[k], 0, sizeof a[k]);
			a[k].sin6_family = AF_INET6;
			for (int j = 0; j < 16; j++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				/* Zero runs often, so that "::" shows up. */
				a[k].sin6_addr.s6_addr[j] = (x & 3) ? 0 : (uint8_t)(x >> 8);
			}
			if (x & 0x10000) { /* IPv4-mapped: "::ffff:a.b.c.d" */
				memset(a[k].sin6_addr.s6_addr, 0, 10);
				a[k].sin6_addr.s6_addr[10] = a[k].sin6_addr.s6_addr[11] = 0xff;
			}
			a[k].sin6_port = (uint16_t)(x >> 20);
		}
		int n = tlp_pp_build_v1(line, sizeof line - 1, (struct sockaddr *)&a[0],
					(struct sockaddr *)&a[1]);

		T_TRUE(n > 0, "%d", n);
		if (n <= 0)
			continue;
		line[n] = '\0';
		prefixes_wait(line);
	}
}

/* ---- v2 ---- */

struct v2 {
	uint8_t b[TLP_PP_V2_MAX + 64];
	size_t n;
};

/* A v2 header: ver_cmd, fam, announced length, then body bytes. */
static void v2_make(struct v2 *o, unsigned ver_cmd, unsigned fam, size_t len, const void *body,
		    size_t body_len)
{
	memcpy(o->b, SIG, 12);
	o->b[12] = (uint8_t)ver_cmd;
	o->b[13] = (uint8_t)fam;
	o->b[14] = (uint8_t)(len >> 8);
	o->b[15] = (uint8_t)len;
	memcpy(o->b + 16, body, body_len);
	o->n = 16 + body_len;
}

static void v2_bad(const struct v2 *o, int want, const char *what)
{
	struct tlp_pp_header h;
	int why = -1, r = pp(o->b, o->n, &h, &why);

	T_TRUE(r == -EPROTO && why == want, "%s: got %d why %d (%s), want why %d (%s)", what, r,
	       why, tlp_pp_strerror(why), want, tlp_pp_strerror(want));
	T_EQ(prefixes_agree(o->b, o->n), 0);
}

static void test_v2_ok(void)
{
	static struct v2 o;
	struct tlp_pp_header h;
	uint8_t body[300];
	char a[INET6_ADDRSTRLEN];

	/* IPv4, stream, with a payload after the header. */
	memset(body, 0, sizeof body);
	memcpy(body, "\x0a\x00\x00\x01\x0a\x00\x00\x02\x1f\x90\x01\xbb", 12);
	memcpy(body + 12, "payload", 7);
	v2_make(&o, 0x21, 0x11, 12, body, 19);
	T_EQ(pp(o.b, o.n, &h, NULL), 28);
	T_EQ(h.version, 2);
	T_EQ(h.command, TLP_PP_CMD_PROXY);
	T_EQ(h.transport, TLP_PP_STREAM);
	T_EQ(h.family, AF_INET);
	T_STR(inet_ntop(AF_INET, &h.src.in.sin_addr, a, sizeof a), "10.0.0.1");
	T_STR(inet_ntop(AF_INET, &h.dst.in.sin_addr, a, sizeof a), "10.0.0.2");
	T_EQ(ntohs(h.src.in.sin_port), 8080);
	T_EQ(ntohs(h.dst.in.sin_port), 443);
	T_EQ(h.tlv_count, 0);
	T_EQ(h.tlv_len, 0);
	T_EQ(prefixes_agree(o.b, o.n), 0);

	/* IPv4 datagram: reported, not refused (the caller decides). */
	v2_make(&o, 0x21, 0x12, 12, body, 12);
	T_EQ(pp(o.b, o.n, &h, NULL), 28);
	T_EQ(h.transport, TLP_PP_DGRAM);

	/* IPv6 with two TLVs (ALPN "h2", an empty NOOP). */
	memset(body, 0, sizeof body);
	body[15] = 1;  /* src ::1 */
	body[31] = 2;  /* dst ::2 */
	body[32] = 0x30;
	body[33] = 0x39; /* src port 12345 */
	body[35] = 80;
	memcpy(body + 36, "\x01\x00\x02h2\x04\x00\x00", 8);
	v2_make(&o, 0x21, 0x21, 44, body, 44);
	T_EQ(pp(o.b, o.n, &h, NULL), 60);
	T_EQ(h.family, AF_INET6);
	T_STR(inet_ntop(AF_INET6, &h.src.in6.sin6_addr, a, sizeof a), "::1");
	T_STR(inet_ntop(AF_INET6, &h.dst.in6.sin6_addr, a, sizeof a), "::2");
	T_EQ(ntohs(h.src.in6.sin6_port), 12345);
	T_EQ(ntohs(h.dst.in6.sin6_port), 80);
	T_EQ(h.tlv_off, 52);
	T_EQ(h.tlv_len, 8);
	T_EQ(h.tlv_count, 2);
	T_EQ(memcmp(o.b + h.tlv_off, "\x01\x00\x02h2", 5), 0);
	T_EQ(prefixes_agree(o.b, o.n), 0);

	/* Unix paths, one filling all 108 bytes. */
	memset(body, 0, sizeof body);
	strcpy((char *)body, "/run/client.sock");
	memset(body + 108, 'p', 108);
	v2_make(&o, 0x21, 0x31, 216, body, 216);
	T_EQ(pp(o.b, o.n, &h, NULL), 232);
	T_EQ(h.family, AF_UNIX);
	T_STR(h.src.un.sun_path, "/run/client.sock");
	T_EQ(memcmp(h.dst.un.sun_path, body + 108, 108), 0);

	/* PROXY with UNSPEC: no addresses, body skipped. */
	v2_make(&o, 0x21, 0x00, 5, "\x01\x02\x03\x04\x05", 5);
	T_EQ(pp(o.b, o.n, &h, NULL), 21);
	T_EQ(h.family, AF_UNSPEC);
	T_EQ(h.command, TLP_PP_CMD_PROXY);

	/* LOCAL: family and body ignored, whatever they hold. */
	v2_make(&o, 0x20, 0xff, 3, "\xff\xff\xff", 3);
	T_EQ(pp(o.b, o.n, &h, NULL), 19);
	T_EQ(h.command, TLP_PP_CMD_LOCAL);
	T_EQ(h.family, AF_UNSPEC);
	T_EQ(h.transport, TLP_PP_TRANSPORT_UNSPEC);
	v2_make(&o, 0x20, 0x11, 0, "", 0);
	T_EQ(pp(o.b, o.n, &h, NULL), 16);
	T_EQ(h.family, AF_UNSPEC);

	/* The longest header: TLVs up to TLP_PP_V2_MAX. */
	static uint8_t big[TLP_PP_V2_MAX];
	size_t blen = TLP_PP_V2_MAX - 16, at = 12;

	memset(big, 0, sizeof big);
	while (at < blen) {
		size_t v = blen - at - 3 < 1000 ? blen - at - 3 : 1000;

		big[at] = 0xe0;
		big[at + 1] = (uint8_t)(v >> 8);
		big[at + 2] = (uint8_t)v;
		at += 3 + v;
	}
	v2_make(&o, 0x21, 0x11, blen, big, blen);
	T_EQ(pp(o.b, o.n, &h, NULL), TLP_PP_V2_MAX);
	T_EQ(h.tlv_count, 5);
}

static void test_v2_bad(void)
{
	static struct v2 o;
	uint8_t body[300] = {0};

	/* Each signature byte, wrong: refused with that byte. */
	for (int i = 0; i < 12; i++) {
		memcpy(o.b, SIG, 12);
		o.b[i] ^= 0x40;
		o.n = (size_t)i + 1;
		if (i == 0)
			continue; /* a wrong first byte is a v1 question */
		v2_bad(&o, TLP_PP_E_SIGNATURE, "signature");
	}
	v2_make(&o, 0x11, 0x11, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_VERSION, "version 1");
	v2_make(&o, 0x31, 0x11, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_VERSION, "version 3");
	v2_make(&o, 0x01, 0x11, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_VERSION, "version 0");
	v2_make(&o, 0x22, 0x11, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_COMMAND, "command 2");
	v2_make(&o, 0x2f, 0x11, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_COMMAND, "command 15");
	v2_make(&o, 0x21, 0x41, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_FAMILY, "family 4");
	v2_make(&o, 0x21, 0xf1, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_FAMILY, "family 15");
	v2_make(&o, 0x21, 0x01, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_FAMILY, "UNSPEC with STREAM");
	v2_make(&o, 0x21, 0x13, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_TRANSPORT, "transport 3");
	v2_make(&o, 0x21, 0x10, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_TRANSPORT, "INET without transport");
	v2_make(&o, 0x21, 0x30, 216, body, 216);
	v2_bad(&o, TLP_PP_E_V2_TRANSPORT, "UNIX without transport");

	/* Lengths: past the bound, short of the family's addresses. */
	v2_make(&o, 0x21, 0x11, TLP_PP_V2_MAX - 15, body, 0);
	v2_bad(&o, TLP_PP_E_V2_TOO_LONG, "4081 bytes of body");
	v2_make(&o, 0x21, 0x11, 0xffff, body, 0);
	v2_bad(&o, TLP_PP_E_V2_TOO_LONG, "65535 bytes of body");
	v2_make(&o, 0x20, 0x11, 0xffff, body, 0);
	v2_bad(&o, TLP_PP_E_V2_TOO_LONG, "LOCAL, 65535 bytes");
	v2_make(&o, 0x21, 0x11, 11, body, 11);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "INET in 11 bytes");
	v2_make(&o, 0x21, 0x11, 0, body, 0);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "INET in 0 bytes");
	v2_make(&o, 0x21, 0x21, 35, body, 35);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "INET6 in 35 bytes");
	v2_make(&o, 0x21, 0x21, 12, body, 12);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "INET6 in INET's 12 bytes");
	v2_make(&o, 0x21, 0x31, 215, body, 215);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "UNIX in 215 bytes");
	v2_make(&o, 0x21, 0x32, 36, body, 36);
	v2_bad(&o, TLP_PP_E_V2_ADDR_LEN, "UNIX dgram in INET6's 36 bytes");

	/* TLVs running past the header. */
	memset(body, 0, sizeof body);
	v2_make(&o, 0x21, 0x11, 13, body, 13);
	v2_bad(&o, TLP_PP_E_V2_TLV, "1 byte of TLV");
	v2_make(&o, 0x21, 0x11, 14, body, 14);
	v2_bad(&o, TLP_PP_E_V2_TLV, "2 bytes of TLV");
	memcpy(body + 12, "\x01\x00\x05" "abcd", 7); /* 5 announced, 4 there */
	v2_make(&o, 0x21, 0x11, 19, body, 19);
	v2_bad(&o, TLP_PP_E_V2_TLV, "TLV value cut");
	memcpy(body + 12, "\x01\x00\x01" "a\x02\x00", 6); /* good TLV, then a cut header */
	v2_make(&o, 0x21, 0x11, 18, body, 18);
	v2_bad(&o, TLP_PP_E_V2_TLV, "second TLV header cut");
	memcpy(body + 12, "\x01\xff\xff", 3);
	v2_make(&o, 0x21, 0x11, 15, body, 15);
	v2_bad(&o, TLP_PP_E_V2_TLV, "TLV of 65535");
}

static void test_v2_incremental(void)
{
	static struct v2 o;
	struct tlp_pp_header h;
	uint8_t body[64] = {0};
	int why;

	v2_make(&o, 0x21, 0x21, 36 + 4, body, 40);
	o.b[16 + 36] = 1; /* a TLV of length 1 */
	o.b[16 + 38] = 1;
	for (size_t k = 0; k < o.n; k++)
		T_EQ(pp(o.b, k, &h, NULL), -EAGAIN);
	T_EQ(pp(o.b, o.n, &h, NULL), 56);
	/* The verdict on each fixed byte comes with that byte. */
	v2_make(&o, 0x31, 0x11, 12, body, 12);
	T_EQ(pp(o.b, 12, &h, &why), -EAGAIN);
	T_EQ(pp(o.b, 13, &h, &why), -EPROTO);
	T_EQ(why, TLP_PP_E_V2_VERSION);
	v2_make(&o, 0x21, 0x51, 12, body, 12);
	T_EQ(pp(o.b, 13, &h, &why), -EAGAIN);
	T_EQ(pp(o.b, 14, &h, &why), -EPROTO);
	T_EQ(why, TLP_PP_E_V2_FAMILY);
	v2_make(&o, 0x21, 0x11, 5, body, 5);
	T_EQ(pp(o.b, 15, &h, &why), -EAGAIN);
	T_EQ(pp(o.b, 16, &h, &why), -EPROTO);
	T_EQ(why, TLP_PP_E_V2_ADDR_LEN);
	T_STR(tlp_pp_strerror(TLP_PP_E_V2_TLV), "v2 TLV running past the header");
	T_STR(tlp_pp_strerror(TLP_PP_E_COUNT), "unknown");
	T_STR(tlp_pp_strerror(-3), "unknown");
	for (int i = 0; i < TLP_PP_E_COUNT; i++)
		T_TRUE(strcmp(tlp_pp_strerror(i), "unknown"), "code %d has no text", i);
}

/* ---- building ---- */

static struct sockaddr_in in4(const char *ip, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct sockaddr_in6 in6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};

	inet_pton(AF_INET6, ip, &a.sin6_addr);
	return a;
}

static void test_build_v1(void)
{
	struct sockaddr_in s4 = in4("192.168.0.1", 56324), d4 = in4("192.168.0.11", 443);
	struct sockaddr_in6 s6 = in6("2001:db8::1", 1), d6 = in6("::1", 65535);
	struct sockaddr_un u = {.sun_family = AF_UNIX, .sun_path = "/x"};
	struct tlp_pp_header h;
	char buf[TLP_PP_V1_MAX + 1], a[INET6_ADDRSTRLEN];
	int n;

	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_EQ(n, 47);
	buf[n > 0 ? n : 0] = '\0';
	T_STR(buf, "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
	T_EQ(pp(buf, (size_t)n, &h, NULL), n);
	T_EQ(h.src.in.sin_addr.s_addr, s4.sin_addr.s_addr);
	T_EQ(h.dst.in.sin_port, d4.sin_port);

	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&s6, (struct sockaddr *)&d6);
	buf[n > 0 ? n : 0] = '\0';
	T_STR(buf, "PROXY TCP6 2001:db8::1 ::1 1 65535\r\n");
	T_EQ(pp(buf, (size_t)n, &h, NULL), n);
	T_EQ(memcmp(&h.src.in6.sin6_addr, &s6.sin6_addr, 16), 0);

	/* Mixed families: the IPv4 side is written mapped. */
	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d6);
	buf[n > 0 ? n : 0] = '\0';
	T_STR(buf, "PROXY TCP6 ::ffff:192.168.0.1 ::1 56324 65535\r\n");
	T_EQ(pp(buf, (size_t)n, &h, NULL), n);
	T_STR(inet_ntop(AF_INET6, &h.src.in6.sin6_addr, a, sizeof a), "::ffff:192.168.0.1");

	/* What v1 cannot say: UNKNOWN. */
	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&u, (struct sockaddr *)&u);
	buf[n > 0 ? n : 0] = '\0';
	T_STR(buf, "PROXY UNKNOWN\r\n");
	n = tlp_pp_build_v1(buf, sizeof buf, NULL, (struct sockaddr *)&d4);
	T_EQ(n, 15);
	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&u);
	T_EQ(n, 15);

	/* The longest line still fits its bound. */
	struct sockaddr_in6 f = in6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);

	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&f, (struct sockaddr *)&f);
	T_EQ(n, 104);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 104);

	/* Room: exactly enough works, one byte less is -ENOBUFS. */
	T_EQ(tlp_pp_build_v1(buf, 47, (struct sockaddr *)&s4, (struct sockaddr *)&d4), 47);
	T_EQ(tlp_pp_build_v1(buf, 46, (struct sockaddr *)&s4, (struct sockaddr *)&d4), -ENOBUFS);
	T_EQ(tlp_pp_build_v1(buf, 0, NULL, NULL), -ENOBUFS);
	T_EQ(tlp_pp_build_v1(NULL, 100, NULL, NULL), -EINVAL);
}

static void test_build_v2(void)
{
	struct sockaddr_in s4 = in4("10.1.2.3", 40000), d4 = in4("10.9.8.7", 443);
	struct sockaddr_in6 s6 = in6("2001:db8::5", 1234), d6 = in6("2001:db8::6", 80);
	struct sockaddr_un su = {.sun_family = AF_UNIX}, du = {.sun_family = AF_UNIX};
	struct tlp_pp_header h;
	uint8_t buf[TLP_PP_BUILD_MAX];
	int n;

	n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_EQ(n, 28);
	T_EQ(memcmp(buf, SIG, 12), 0);
	T_EQ(buf[12], 0x21);
	T_EQ(buf[13], 0x11);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 28);
	T_EQ(h.family, AF_INET);
	T_EQ(h.src.in.sin_addr.s_addr, s4.sin_addr.s_addr);
	T_EQ(h.dst.in.sin_addr.s_addr, d4.sin_addr.s_addr);
	T_EQ(h.src.in.sin_port, s4.sin_port);
	T_EQ(h.dst.in.sin_port, d4.sin_port);

	n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s6, (struct sockaddr *)&d6);
	T_EQ(n, 52);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 52);
	T_EQ(h.family, AF_INET6);
	T_EQ(memcmp(&h.src.in6.sin6_addr, &s6.sin6_addr, 16), 0);
	T_EQ(memcmp(&h.dst.in6.sin6_addr, &d6.sin6_addr, 16), 0);
	T_EQ(h.src.in6.sin6_port, s6.sin6_port);
	T_EQ(h.dst.in6.sin6_port, d6.sin6_port);

	/* Mixed: IPv6 with the IPv4 side mapped. */
	n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d6);
	T_EQ(n, 52);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 52);
	T_EQ(h.src.in6.sin6_addr.s6_addr[10], 0xff);
	T_EQ(memcmp(&h.src.in6.sin6_addr.s6_addr[12], &s4.sin_addr, 4), 0);
	T_EQ(h.src.in6.sin6_port, s4.sin_port);

	/* Unix: the path up to its NUL, the rest sent as zeros. */
	strcpy(su.sun_path, "/run/c.sock");
	memset(su.sun_path + 12, 'J', sizeof su.sun_path - 12); /* junk after the NUL */
	memset(du.sun_path, 'd', sizeof du.sun_path);          /* no NUL at all */
	n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&su, (struct sockaddr *)&du);
	T_EQ(n, 232);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 232);
	T_EQ(h.family, AF_UNIX);
	T_STR(h.src.un.sun_path, "/run/c.sock");
	T_EQ(h.src.un.sun_path[50], 0);
	T_EQ(memcmp(h.dst.un.sun_path, du.sun_path, sizeof du.sun_path), 0);

	/* A connection of the proxy's own: LOCAL. */
	n = tlp_pp_build_v2(buf, sizeof buf, NULL, NULL);
	T_EQ(n, 16);
	T_EQ(buf[12], 0x20);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 16);
	T_EQ(h.command, TLP_PP_CMD_LOCAL);
	/* Families that do not pair: PROXY with UNSPEC. */
	n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&su, (struct sockaddr *)&d4);
	T_EQ(n, 16);
	T_EQ(buf[12], 0x21);
	T_EQ(buf[13], 0x00);
	T_EQ(pp(buf, (size_t)n, &h, NULL), 16);
	T_EQ(h.command, TLP_PP_CMD_PROXY);
	T_EQ(h.family, AF_UNSPEC);

	T_EQ(tlp_pp_build_v2(buf, 28, (struct sockaddr *)&s4, (struct sockaddr *)&d4), 28);
	T_EQ(tlp_pp_build_v2(buf, 27, (struct sockaddr *)&s4, (struct sockaddr *)&d4), -ENOBUFS);
	T_EQ(tlp_pp_build_v2(buf, 231, (struct sockaddr *)&su, (struct sockaddr *)&du), -ENOBUFS);
	T_EQ(tlp_pp_build_v2(NULL, 100, NULL, NULL), -EINVAL);
}

/* The TLS TLVs: appended after the addresses, the length updated, and
 * what the parser walks back is exactly ALPN, AUTHORITY and SSL with its
 * client bits, verify and the version and cipher sub-TLVs. */
static void test_add_tls(void)
{
	struct sockaddr_in s4 = in4("10.1.2.3", 40000), d4 = in4("10.9.8.7", 443);
	struct tlp_pp_tls t = {.version = "TLSv1.3", .cipher = "TLS_AES_128_GCM_SHA256",
			       .sni = "www.example.test", .alpn = "h2"};
	static const uint8_t want[] = "\x01\x00\x02h2"
				      "\x02\x00\x10www.example.test"
				      "\x20\x00\x28\x01\x00\x00\x00\x01"
				      "\x21\x00\x07TLSv1.3"
				      "\x23\x00\x16TLS_AES_128_GCM_SHA256";
	struct tlp_pp_header h;
	uint8_t buf[TLP_PP_BUILD_MAX + TLP_PP_TLS_TLV_MAX];
	int n = tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);

	T_EQ(n, 28);
	n = tlp_pp_add_tls(buf, 28, sizeof buf, &t);
	T_EQ(n, 28 + (int)sizeof want - 1);
	T_EQ(memcmp(buf + 28, want, sizeof want - 1), 0);
	T_EQ(buf[14] << 8 | buf[15], n - 16);
	T_EQ(pp(buf, (size_t)n, &h, NULL), n);
	T_EQ(h.tlv_off, 28);
	T_EQ(h.tlv_len, (uint32_t)(n - 28));
	T_EQ(h.tlv_count, 3);
	T_EQ(h.src.in.sin_addr.s_addr, s4.sin_addr.s_addr);

	/* A client certificate that verified: CERT_CONN and verify 0; one
	 * that did not: verify 1. No SNI, no ALPN: only the SSL TLV. */
	t.sni = t.alpn = "";
	t.client_cert = t.verified = 1;
	tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	n = tlp_pp_add_tls(buf, 28, sizeof buf, &t);
	T_TRUE(n > 28);
	T_EQ(buf[28], 0x20);
	T_EQ(buf[31], 0x03);
	T_EQ(buf[35], 0);
	T_EQ(pp(buf, (size_t)n, &h, NULL), n);
	T_EQ(h.tlv_count, 1);
	t.verified = 0;
	tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_TRUE(tlp_pp_add_tls(buf, 28, sizeof buf, &t) > 28);
	T_EQ(buf[35], 1);

	/* Room: exactly enough, then one byte less (buf left as it was). */
	t = (struct tlp_pp_tls){.version = "TLSv1.2", .cipher = "X"};
	tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_EQ(tlp_pp_add_tls(buf, 28, 28 + 8 + 10 + 4, &t), 28 + 22);
	tlp_pp_build_v2(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_EQ(tlp_pp_add_tls(buf, 28, 28 + 21, &t), -ENOBUFS);
	T_EQ(buf[15], 12);
	/* Not a v2 header, a length that is not its own, a field too long. */
	T_EQ(tlp_pp_add_tls(buf, 27, sizeof buf, &t), -EINVAL);
	T_EQ(tlp_pp_add_tls(NULL, 28, sizeof buf, &t), -EINVAL);
	T_EQ(tlp_pp_add_tls(buf, 28, sizeof buf, NULL), -EINVAL);
	{
		char big[300];

		memset(big, 'a', sizeof big - 1);
		big[sizeof big - 1] = 0;
		t.sni = big;
		T_EQ(tlp_pp_add_tls(buf, 28, sizeof buf, &t), -EINVAL);
		t.sni = "";
	}
	n = tlp_pp_build_v1(buf, sizeof buf, (struct sockaddr *)&s4, (struct sockaddr *)&d4);
	T_EQ(tlp_pp_add_tls(buf, (size_t)n, sizeof buf, &t), -EINVAL);
	/* LOCAL and UNSPEC headers have no addresses: no TLVs, unchanged. */
	n = tlp_pp_build_v2(buf, sizeof buf, NULL, NULL);
	T_EQ(tlp_pp_add_tls(buf, (size_t)n, sizeof buf, &t), n);
	T_EQ(buf[15], 0);
}

int main(void)
{
	static const struct tlp_case cases[] = {
		{"v1: valid headers", test_v1_ok},
		{"v1: every malformed shape", test_v1_bad},
		{"v1: incremental input", test_v1_incremental},
		{"v1: a line that cannot become valid is refused at once", test_v1_prefix},
		{"v2: valid headers", test_v2_ok},
		{"v2: every malformed shape", test_v2_bad},
		{"v2: incremental input", test_v2_incremental},
		{"build v1 and parse it back", test_build_v1},
		{"build v2 and parse it back", test_build_v2},
		{"v2 with the TLS TLVs, parsed back", test_add_tls},
	};

	return tlp_test_main("tlproxy-proxyproto", cases, sizeof cases / sizeof cases[0]);
}
