/* tests/test_tlp_sni.c: CUnit tests of tlproxy's ClientHello SNI reader and SNI matcher (tools/tlproxy/sni.c), on hellos captured from openssl s_client and on built malformed ones. */
#include <stdint.h>

#include "sni.h"
#include "tlp_test.h"

static const char *srcdir = ".";

/* Parse a heap copy of exactly len bytes, so that ASan sees any read past it. */
static int sni_exact(const uint8_t *b, size_t len, char *host, int *why)
{
	uint8_t *copy = malloc(len ? len : 1);
	int r;

	memcpy(copy, b, len);
	r = tlp_sni_parse(len ? copy : NULL, len, host, TLP_SNI_HOST_MAX + 1, why);
	free(copy);
	return r;
}

/* ---- building hellos ---- */

struct buf {
	uint8_t b[80000];
	size_t n;
};

static void put8(struct buf *o, unsigned v)
{
	o->b[o->n++] = (uint8_t)v;
}

static void put16(struct buf *o, unsigned v)
{
	put8(o, v >> 8);
	put8(o, v);
}

static void put(struct buf *o, const void *p, size_t n)
{
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

struct hello {
	unsigned major;     /* client_version major; 3 */
	unsigned sid;       /* session id length; 32 */
	unsigned ciphers;   /* cipher suites length; 4 */
	unsigned comp;      /* compression methods; 1 */
	int no_ext;         /* no extensions block at all */
	const struct buf *ext; /* the extensions, raw */
	long body_delta;    /* added to the handshake length */
	long ext_delta;     /* added to the extensions length */
	unsigned hs_type;   /* handshake type; 1 */
};

static const struct hello H = {.major = 3, .sid = 32, .ciphers = 4, .comp = 1, .hs_type = 1};

/* The handshake message (no record header). */
static void build_hs(struct buf *o, const struct hello *h)
{
	size_t body_at;
	unsigned ciphers = h->ciphers;

	o->n = 0;
	put8(o, h->hs_type);
	put8(o, 0);
	put16(o, 0); /* length, filled below */
	body_at = o->n;
	put8(o, h->major);
	put8(o, 3);
	for (int i = 0; i < 32; i++)
		put8(o, 0xa0 + i);
	put8(o, h->sid);
	for (unsigned i = 0; i < h->sid && i < 64; i++)
		put8(o, i);
	put16(o, ciphers);
	for (unsigned i = 0; i < ciphers && i < 64; i++)
		put8(o, i % 2 ? 0x01 : 0x13);
	put8(o, h->comp);
	for (unsigned i = 0; i < h->comp && i < 8; i++)
		put8(o, 0);
	if (!h->no_ext) {
		size_t el = h->ext ? h->ext->n : 0;

		put16(o, (unsigned)((long)el + h->ext_delta));
		if (h->ext)
			put(o, h->ext->b, h->ext->n);
	}
	long body = (long)(o->n - body_at) + h->body_delta;

	o->b[1] = (uint8_t)(body >> 16);
	o->b[2] = (uint8_t)(body >> 8);
	o->b[3] = (uint8_t)body;
}

/* Wrap a handshake stream in handshake records of at most per bytes. */
static void records(struct buf *o, const uint8_t *hs, size_t n, size_t per)
{
	o->n = 0;
	for (size_t at = 0; at < n; at += per) {
		size_t k = n - at < per ? n - at : per;

		put8(o, 22);
		put8(o, 3);
		put8(o, 1);
		put16(o, (unsigned)k);
		put(o, hs + at, k);
	}
}

static void one_record(struct buf *o, const struct hello *h)
{
	static struct buf hs;

	build_hs(&hs, h);
	records(o, hs.b, hs.n, TLP_SNI_RECORD_MAX);
}

/* A server_name extension with one host_name entry. */
static void ext_sni(struct buf *e, const char *host)
{
	size_t l = strlen(host);

	put16(e, 0);
	put16(e, (unsigned)(l + 5));
	put16(e, (unsigned)(l + 3));
	put8(e, 0);
	put16(e, (unsigned)l);
	put(e, host, l);
}

/* Some other extension of len bytes. */
static void ext_other(struct buf *e, unsigned type, unsigned len)
{
	put16(e, type);
	put16(e, len);
	for (unsigned i = 0; i < len; i++)
		put8(e, i);
}

static int parse_buf(const struct buf *o, char *host, int *why)
{
	return sni_exact(o->b, o->n, host, why);
}

/* ---- the captured hellos ---- */

static const struct {
	const char *file, *host;
} vectors[] = {
	{"tls13-www.example.com.bin", "www.example.com"},
	{"tls12-a.example.com.bin", "a.example.com"},
	{"alpn-api.example.org.bin", "api.example.org"},
	{"mixed-case.bin", "mixed.example.com"},
	{"no-sni.bin", NULL},
};

static uint8_t *vector(size_t i, size_t *len)
{
	char path[512];
	uint8_t *b;

	snprintf(path, sizeof path, "%s/tlproxy/hello/%s", srcdir, vectors[i].file);
	b = tlp_read_file(path, len);
	T_TRUE(b != NULL, "cannot read %s", path);
	return b;
}

static void test_vectors(void)
{
	char host[TLP_SNI_HOST_MAX + 1];

	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		size_t len;
		uint8_t *b = vector(i, &len);
		int why = -1, r;

		if (!b)
			continue;
		r = sni_exact(b, len, host, &why);
		if (vectors[i].host) {
			T_EQ(r, (long long)strlen(vectors[i].host));
			T_STR(host, vectors[i].host);
		} else {
			T_EQ(r, 0);
			T_STR(host, "");
		}
		T_EQ(why, TLP_SNI_OK);
		free(b);
	}
}

/* Every prefix is either "need more" or the final answer, and once it is
 * an answer it stays the same. */
static void test_vector_prefixes(void)
{
	char host[TLP_SNI_HOST_MAX + 1];

	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		size_t len, first = 0;
		uint8_t *b = vector(i, &len);
		int final, bad = 0;

		if (!b)
			continue;
		final = sni_exact(b, len, host, NULL);
		for (size_t k = 0; k <= len; k++) {
			int r = sni_exact(b, k, host, NULL);

			if (r == -EAGAIN && !first)
				continue;
			if (!first)
				first = k;
			if (r != final)
				bad++;
		}
		T_EQ(bad, 0);
		T_TRUE(first > 5 && first <= len, "%s: answer from byte %zu of %zu",
		       vectors[i].file, first, len);
		free(b);
	}
}

/* The same hellos cut into many small records, as some clients send them. */
static void test_fragmented(void)
{
	static struct buf rec;
	static const size_t sizes[] = {1, 2, 7, 64, 100, 1000};
	char host[TLP_SNI_HOST_MAX + 1];

	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		size_t len;
		uint8_t *b = vector(i, &len);

		if (!b)
			continue;
		/* The captures are one record each: the payload is the handshake. */
		T_EQ(b[0], 22);
		T_EQ((size_t)(b[3] << 8 | b[4]) + 5, len);
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			records(&rec, b + 5, len - 5, sizes[s]);
			int r = parse_buf(&rec, host, NULL);

			if (vectors[i].host) {
				T_EQ(r, (long long)strlen(vectors[i].host));
				T_STR(host, vectors[i].host);
			} else {
				T_EQ(r, 0);
			}
			/* Cut short inside the last record read: more is needed. */
			T_EQ(sni_exact(rec.b, rec.n / 3, host, NULL), -EAGAIN);
		}
		free(b);
	}
}

/* ---- built hellos ---- */

static void expect(const struct buf *o, int want_r, int want_why, const char *what)
{
	char host[TLP_SNI_HOST_MAX + 1];
	int why = -1, r = parse_buf(o, host, &why);

	T_TRUE(r == want_r && why == want_why, "%s: got %d why %d (%s), want %d why %d (%s)", what,
	       r, why, tlp_sni_strerror(why), want_r, want_why, tlp_sni_strerror(want_why));
	if (r <= 0)
		T_STR(host, "");
}

static void test_built_ok(void)
{
	static struct buf e, o;
	char host[TLP_SNI_HOST_MAX + 1];
	struct hello h = H;

	/* SNI among other extensions. */
	e.n = 0;
	ext_other(&e, 10, 8);
	ext_sni(&e, "Example.COM");
	ext_other(&e, 16, 5);
	h.ext = &e;
	one_record(&o, &h);
	T_EQ(parse_buf(&o, host, NULL), 11);
	T_STR(host, "example.com");

	/* No extensions block (allowed before TLS 1.3): no SNI. */
	h = H;
	h.no_ext = 1;
	one_record(&o, &h);
	expect(&o, 0, TLP_SNI_OK, "no extensions");
	/* An empty extensions block. */
	h = H;
	e.n = 0;
	h.ext = &e;
	one_record(&o, &h);
	expect(&o, 0, TLP_SNI_OK, "empty extensions");
	/* Extensions without server_name. */
	e.n = 0;
	ext_other(&e, 10, 8);
	ext_other(&e, 43, 3);
	one_record(&o, &h);
	expect(&o, 0, TLP_SNI_OK, "no server_name");
	/* A server_name with an unknown name type only: no host name. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 3 + 4);
	put16(&e, 3 + 4);
	put8(&e, 7);
	put16(&e, 4);
	put(&e, "abcd", 4);
	one_record(&o, &h);
	expect(&o, 0, TLP_SNI_OK, "other name type");
	/* Unknown name type, then a host name: the host name. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 3 + 4 + 3 + 5);
	put16(&e, 3 + 4 + 3 + 5);
	put8(&e, 7);
	put16(&e, 4);
	put(&e, "abcd", 4);
	put8(&e, 0);
	put16(&e, 5);
	put(&e, "a.b.c", 5);
	one_record(&o, &h);
	T_EQ(parse_buf(&o, host, NULL), 5);
	T_STR(host, "a.b.c");
	/* Session id of 0 bytes and of 32, SSL 3.0 record version. */
	h = H;
	e.n = 0;
	ext_sni(&e, "x.y");
	h.ext = &e;
	h.sid = 0;
	one_record(&o, &h);
	o.b[2] = 0;
	T_EQ(parse_buf(&o, host, NULL), 3);
	/* The longest host name: 253 characters in labels of 63. */
	char longest[254];

	memset(longest, 'a', 253);
	longest[63] = longest[127] = longest[191] = '.';
	longest[253] = '\0';
	e.n = 0;
	ext_sni(&e, longest);
	h = H;
	h.ext = &e;
	one_record(&o, &h);
	T_EQ(parse_buf(&o, host, NULL), 253);
	T_STR(host, longest);
	/* After server_name the other extensions' contents are the server's
	 * TLS stack's business: only their headers are read. */
	e.n = 0;
	ext_sni(&e, "first.example");
	put16(&e, 99);
	put16(&e, 4);
	put(&e, "\xff\x00\xff\x00", 4);
	h.ext = &e;
	h.ext_delta = 0;
	one_record(&o, &h);
	T_EQ(parse_buf(&o, host, NULL), 13);
	T_STR(host, "first.example");
}

/* Two server_name extensions (RFC 6066 3, RFC 8446 4.2: one extension of a
 * type per hello): refused, wherever the second one is and whatever it
 * holds, so that no server reads a name the routing did not. */
static void test_sni_twice(void)
{
	static struct buf e, hs, o;
	char host[TLP_SNI_HOST_MAX + 1];
	struct hello h = H;
	int why;

	h.ext = &e;
	e.n = 0;
	ext_sni(&e, "a.example.com");
	ext_sni(&e, "b.example.com");
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI_TWICE, "two server_name, different names");
	e.n = 0;
	ext_sni(&e, "a.example.com");
	ext_sni(&e, "a.example.com");
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI_TWICE, "two server_name, the same name");
	e.n = 0;
	ext_other(&e, 10, 8);
	ext_sni(&e, "a.example.com");
	ext_other(&e, 16, 300);
	ext_other(&e, 43, 3);
	ext_sni(&e, "evil.example.net");
	ext_other(&e, 51, 40);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI_TWICE, "the second after others");
	/* The second empty or broken: refused for being there. */
	e.n = 0;
	ext_sni(&e, "a.example.com");
	put16(&e, 0);
	put16(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI_TWICE, "an empty second server_name");
	/* Refused once the second extension's header (type and length) is in,
	 * whatever comes after, and in records of any size. */
	e.n = 0;
	ext_sni(&e, "a.example.com");
	ext_other(&e, 21, 100);
	size_t at_ext = e.n;

	ext_sni(&e, "b.example.com");
	build_hs(&hs, &h);
	size_t hdr_end = hs.n - (e.n - at_ext) + 4; /* past the second header */

	records(&o, hs.b, hs.n, TLP_SNI_RECORD_MAX);
	for (size_t k = 0; k <= o.n; k++) {
		int r = sni_exact(o.b, k, host, &why);

		if (k < hdr_end + 5)
			T_TRUE(r == -EAGAIN, "%zu of %zu bytes: %d", k, o.n, r);
		else
			T_TRUE(r == -EPROTO && why == TLP_SNI_E_SNI_TWICE,
			       "%zu of %zu bytes: %d why %d", k, o.n, r, why);
	}
	records(&o, hs.b, hs.n, 7);
	expect(&o, -EPROTO, TLP_SNI_E_SNI_TWICE, "in 7-byte records");
	T_STR(tlp_sni_strerror(TLP_SNI_E_SNI_TWICE), "two server_name extensions");
}

static void test_not_tls(void)
{
	static struct buf o;
	char host[TLP_SNI_HOST_MAX + 1];
	int why;

	/* Refused from the first byte that says so. */
	T_EQ(sni_exact((const uint8_t *)"G", 1, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	T_EQ(sni_exact((const uint8_t *)"GET / HTTP/1.1\r\n", 16, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	/* SSLv2-style hello. */
	T_EQ(sni_exact((const uint8_t *)"\x80\x2e\x01\x03\x01", 5, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	/* Application data, alert, change_cipher_spec records. */
	T_EQ(sni_exact((const uint8_t *)"\x17\x03\x03\x00\x10", 5, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	T_EQ(sni_exact((const uint8_t *)"\x15\x03\x03", 3, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	/* Handshake type, but version 2.x or 3.4+. */
	T_EQ(sni_exact((const uint8_t *)"\x16\x02", 2, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	T_EQ(sni_exact((const uint8_t *)"\x16\x03\x04", 3, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_TLS);
	/* A valid start is "need more", down to nothing at all. */
	T_EQ(sni_exact((const uint8_t *)"", 0, host, &why), -EAGAIN);
	T_EQ(why, TLP_SNI_OK);
	T_EQ(sni_exact((const uint8_t *)"\x16\x03\x01\x00", 4, host, &why), -EAGAIN);
	/* Record lengths: 0 and past 2^14. */
	T_EQ(sni_exact((const uint8_t *)"\x16\x03\x01\x00\x00", 5, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_RECORD);
	T_EQ(sni_exact((const uint8_t *)"\x16\x03\x01\x40\x01", 5, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_RECORD);
	T_EQ(sni_exact((const uint8_t *)"\x16\x03\x01\x40\x00", 5, host, &why), -EAGAIN);
	/* Not a ClientHello (a ServerHello, type 2). */
	struct hello h = H;

	h.hs_type = 2;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_NOT_HELLO, "server hello");
	T_EQ(sni_exact(o.b, 6, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_NOT_HELLO);
}

static void test_records_bad(void)
{
	static struct buf e, hs, o;
	struct hello h = H;

	e.n = 0;
	ext_other(&e, 10, 20);
	ext_sni(&e, "late.example");
	h.ext = &e;
	build_hs(&hs, &h);
	records(&o, hs.b, hs.n, 50);
	expect(&o, 12, TLP_SNI_OK, "fragmented");
	/* The second record is an alert: the hello was interrupted. */
	o.b[5 + 50] = 21;
	expect(&o, -EPROTO, TLP_SNI_E_RECORD, "alert in the middle");
	o.b[5 + 50] = 22;
	o.b[5 + 50 + 1] = 2;
	expect(&o, -EPROTO, TLP_SNI_E_RECORD, "version 2 in the middle");
	o.b[5 + 50 + 1] = 3;
	o.b[5 + 50 + 3] = 0;
	o.b[5 + 50 + 4] = 0;
	expect(&o, -EPROTO, TLP_SNI_E_RECORD, "empty record in the middle");
}

static void test_hello_bad(void)
{
	static struct buf e, o;
	struct hello h;

	e.n = 0;
	ext_sni(&e, "a.example");

	h = H;
	h.ext = &e;
	h.major = 2;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_VERSION, "client version 2");

	h = H;
	h.ext = &e;
	h.sid = 33;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SESSION_ID, "session id 33");

	h = H;
	h.ext = &e;
	h.ciphers = 0;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_CIPHERS, "no ciphers");
	h.ciphers = 3;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_CIPHERS, "odd ciphers");

	h = H;
	h.ext = &e;
	h.comp = 0;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_COMPRESSION, "no compression");

	/* Lengths that run past the hello. */
	h = H;
	h.no_ext = 1;
	h.body_delta = -(2 + 32 + 1 + 32 + 2 + 4 + 1 + 1) + 10;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_LENGTH, "body of 10 bytes");
	h.body_delta = -(2 + 4 + 1 + 1) - 10; /* ends inside the session id */
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_LENGTH, "session id past the end");
	h.body_delta = -(4 + 1 + 1) + 1; /* ends inside the ciphers */
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_LENGTH, "ciphers past the end");
	h.body_delta = -1; /* ends before the compression method */
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_LENGTH, "compression past the end");

	/* Extensions. */
	h = H;
	h.ext = &e;
	h.ext_delta = 1;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_EXTENSIONS, "extensions longer than the rest");
	h.ext_delta = -1;
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_EXTENSIONS, "extensions shorter than the rest");
	h = H;
	h.no_ext = 1;
	h.body_delta = 1; /* one byte where the extensions length would be */
	one_record(&o, &h);
	o.b[o.n] = 0;
	o.n++;
	o.b[3] = (uint8_t)((o.n - 5) >> 8);
	o.b[4] = (uint8_t)(o.n - 5);
	expect(&o, -EPROTO, TLP_SNI_E_EXTENSIONS, "one stray byte");
	{
		static struct buf x;

		x.n = 0;
		ext_other(&x, 10, 4);
		put16(&x, 10);
		put8(&x, 0); /* 3 bytes: not a whole extension header */
		h = H;
		h.ext = &x;
		one_record(&o, &h);
		expect(&o, -EPROTO, TLP_SNI_E_EXTENSIONS, "extension header cut");
		x.n = 0;
		put16(&x, 10);
		put16(&x, 9); /* 9 bytes announced, 2 there */
		put16(&x, 0);
		one_record(&o, &h);
		expect(&o, -EPROTO, TLP_SNI_E_EXTENSIONS, "extension past the block");
	}
}

static void test_sni_ext_bad(void)
{
	static struct buf e, o;
	struct hello h = H;
	char name64[70], name254[260];

	h.ext = &e;
	/* server_name of 0 and 1 bytes (a server sends it empty, not a client). */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "empty server_name");
	e.n = 0;
	put16(&e, 0);
	put16(&e, 1);
	put8(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "1-byte server_name");
	/* List length not the extension's length less 2: a whole entry, and
	 * two bytes in the extension after the list. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 6 + 2);
	put16(&e, 6);
	put8(&e, 0);
	put16(&e, 3);
	put(&e, "abc", 3);
	put16(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "list shorter than the extension");
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 6);
	put16(&e, 7);
	put8(&e, 0);
	put16(&e, 3);
	put(&e, "abc", 3);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "list longer than the extension");
	/* Empty list. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2);
	put16(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "empty list");
	/* Entry header cut (2 bytes in the list). */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 4);
	put16(&e, 2);
	put8(&e, 0);
	put8(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "entry header cut");
	/* Name longer than the list. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 3 + 3);
	put16(&e, 3 + 3);
	put8(&e, 0);
	put16(&e, 4);
	put(&e, "abc", 3);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_SNI, "name past the list");
	/* Two host names. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 6 + 6);
	put16(&e, 6 + 6);
	put8(&e, 0);
	put16(&e, 3);
	put(&e, "a.b", 3);
	put8(&e, 0);
	put16(&e, 3);
	put(&e, "c.d", 3);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_DUPLICATE, "two host names");

	/* Host names that are not. */
	static const char *const bad_hosts[] = {"a b.com", "a..b", ".a.b", "a.b.", "a/b", "a:443",
						"caf\xc3\xa9.fr", ("a\x01" "b"), "*.example.com"};
	for (size_t i = 0; i < sizeof bad_hosts / sizeof bad_hosts[0]; i++) {
		e.n = 0;
		ext_sni(&e, bad_hosts[i]);
		one_record(&o, &h);
		expect(&o, -EPROTO, TLP_SNI_E_HOST, bad_hosts[i]);
	}
	memset(name64, 'b', 64);
	name64[64] = '\0';
	e.n = 0;
	ext_sni(&e, name64);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_HOST, "label of 64");
	memset(name254, 'c', 254);
	for (int i = 50; i < 254; i += 50)
		name254[i] = '.';
	name254[254] = '\0';
	e.n = 0;
	ext_sni(&e, name254);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_HOST, "254 characters");
	/* Empty name, and one holding a NUL. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 5);
	put16(&e, 3);
	put8(&e, 0);
	put16(&e, 0);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_HOST, "empty name");
	e.n = 0;
	put16(&e, 0);
	put16(&e, 8);
	put16(&e, 6);
	put8(&e, 0);
	put16(&e, 3);
	put(&e, "a\0b", 3);
	one_record(&o, &h);
	expect(&o, -EPROTO, TLP_SNI_E_HOST, "NUL in the name");
}

static void test_bounds(void)
{
	static struct buf e, hs, o;
	char host[TLP_SNI_HOST_MAX + 1];
	struct hello h = H;
	int why;

	/* A hello announcing more than the input cap. */
	uint8_t big[9] = {22, 3, 1, 0x40, 0x00, 1, 0x00, 0x80, 0x01};

	T_EQ(sni_exact(big, sizeof big, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_TOO_LONG);
	/* A hello of about 8 KiB, SNI last, in 1-byte records: 48 KiB of
	 * input. The parser gives up at the cap, not later. */
	e.n = 0;
	ext_other(&e, 21, 8000);
	ext_sni(&e, "far.example");
	h.ext = &e;
	build_hs(&hs, &h);
	records(&o, hs.b, hs.n, 1);
	T_TRUE(o.n > TLP_SNI_INPUT_MAX, "%zu bytes", o.n);
	T_EQ(sni_exact(o.b, TLP_SNI_INPUT_MAX - 100, host, &why), -EAGAIN);
	T_EQ(sni_exact(o.b, TLP_SNI_INPUT_MAX, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_TOO_LONG);
	T_EQ(parse_buf(&o, host, &why), -EPROTO);
	T_EQ(why, TLP_SNI_E_TOO_LONG);
	/* The same in 16-byte records fits: about 11 KiB. */
	records(&o, hs.b, hs.n, 16);
	T_EQ(parse_buf(&o, host, &why), 11);
	T_STR(host, "far.example");
	/* A hello larger than one record, in full-size records. */
	e.n = 0;
	ext_other(&e, 21, 20000);
	ext_sni(&e, "big.example");
	build_hs(&hs, &h);
	records(&o, hs.b, hs.n, TLP_SNI_RECORD_MAX);
	T_EQ(parse_buf(&o, host, &why), 11);
	T_STR(host, "big.example");

	/* Arguments. */
	T_EQ(tlp_sni_parse(o.b, o.n, NULL, 300, NULL), -EINVAL);
	T_EQ(tlp_sni_parse(o.b, o.n, host, TLP_SNI_HOST_MAX, NULL), -EINVAL);
	T_STR(host, "");
	T_EQ(tlp_sni_parse(NULL, 5, host, sizeof host, NULL), -EINVAL);
	T_EQ(tlp_sni_parse(NULL, 0, host, sizeof host, NULL), -EAGAIN);
	T_STR(tlp_sni_strerror(TLP_SNI_E_HOST), "server name is not a host name");
	T_STR(tlp_sni_strerror(-1), "unknown");
	T_STR(tlp_sni_strerror(TLP_SNI_E_COUNT), "unknown");
}

static void test_match(void)
{
	struct tlp_sni_rule rules[] = {
		{"a.example.com", 13, 10},
		{"*.example.com", 13, 20},
		{"*.b.example.com", 15, 30}, /* after the wider wildcard: never first */
		{"example.com", 11, 40},
		{"*.org", 5, 50},
	};
	const uint32_t n = sizeof rules / sizeof rules[0];

#define M(host) tlp_sni_match(rules, n, host, strlen(host))
	T_EQ(M("a.example.com"), 0);
	T_EQ(M("A.EXAMPLE.com"), 0);
	T_EQ(M("b.example.com"), 1);
	T_EQ(M("x.b.example.com"), 1); /* first match wins */
	T_EQ(M("deep.er.example.com"), 1);
	T_EQ(M("example.com"), 3);     /* the wildcard does not take the apex */
	T_EQ(M("Example.Com"), 3);
	T_EQ(M("xexample.com"), -ENOENT);
	T_EQ(M("a.example.co"), -ENOENT);
	T_EQ(M("example.org"), 4);
	T_EQ(M("org"), -ENOENT);
	T_EQ(M(".org"), -ENOENT); /* nothing before the suffix */
	T_EQ(M("a.example.com.evil"), -ENOENT);
	T_EQ(M(""), -ENOENT);
	/* Lengths, not NULs, bound the names. */
	T_EQ(tlp_sni_match(rules, n, "a.example.comXXX", 13), 0);
	T_EQ(tlp_sni_match(rules, n, "a.example.co", 13), -ENOENT); /* with its NUL */
	T_EQ(tlp_sni_match(rules, 1, "b.example.com", 13), -ENOENT);
	T_EQ(tlp_sni_match(NULL, 0, "b.example.com", 13), -ENOENT);
	T_EQ(tlp_sni_match(NULL, 1, "b.example.com", 13), -EINVAL);
	T_EQ(tlp_sni_match(rules, n, NULL, 3), -EINVAL);
	/* Reordered, the narrow wildcard wins for its names. */
	struct tlp_sni_rule two[] = {{"*.b.example.com", 15, 1}, {"*.example.com", 13, 2}};

	T_EQ(tlp_sni_match(two, 2, "x.b.example.com", 15), 0);
	T_EQ(tlp_sni_match(two, 2, "b.example.com", 13), 1);
#undef M
}

static void test_checks(void)
{
	T_EQ(tlp_sni_pattern_check("a.example.com", 13), 0);
	T_EQ(tlp_sni_pattern_check("*.example.com", 13), 0);
	T_EQ(tlp_sni_pattern_check("*.com", 5), 0);
	T_EQ(tlp_sni_pattern_check("*", 1), -EINVAL);
	T_EQ(tlp_sni_pattern_check("*.", 2), -EINVAL);
	T_EQ(tlp_sni_pattern_check("a.*.com", 7), -EINVAL);
	T_EQ(tlp_sni_pattern_check("*a.com", 6), -EINVAL);
	T_EQ(tlp_sni_pattern_check("", 0), -EINVAL);
	T_EQ(tlp_sni_host_check("under_score.example", 19), 0);
	T_EQ(tlp_sni_host_check("*.example", 9), -EINVAL);
	T_EQ(tlp_sni_host_check(NULL, 3), -EINVAL);
}

int main(int argc, char **argv)
{
	static const struct tlp_case cases[] = {
		{"captured hellos", test_vectors},
		{"every prefix of the captures", test_vector_prefixes},
		{"captures in small records", test_fragmented},
		{"built hellos that are fine", test_built_ok},
		{"not TLS, not a hello, bad records", test_not_tls},
		{"bad later records", test_records_bad},
		{"bad hello fields", test_hello_bad},
		{"bad server_name extensions", test_sni_ext_bad},
		{"two server_name extensions", test_sni_twice},
		{"input bounds and arguments", test_bounds},
		{"matcher: exact, wildcard, first wins", test_match},
		{"pattern and host checks", test_checks},
	};

	if (argc > 1)
		srcdir = argv[1];
	return tlp_test_main("tlproxy-sni", cases, sizeof cases / sizeof cases[0]);
}
