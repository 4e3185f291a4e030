/* tests/test_tlp_handover.c: CUnit tests of tlproxy's takeover wire format (tools/tlproxy/handover.c): round trips of every record type, version refusal, and every malformed header and body. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/un.h>

#include "handover.h"
#include "tlp_test.h"

static uint8_t buf[TLP_HO_HDR + TLP_HO_BODY_MAX];

/* Decode b[0..n) as one whole record from a heap copy of exactly n bytes. */
static int decode_all(const uint8_t *b, size_t n, struct tlp_ho_msg *m)
{
	struct tlp_ho_hdr h;
	uint8_t *copy = malloc(n ? n : 1);
	int r;

	memcpy(copy, b, n);
	r = tlp_ho_hdr_decode(copy, n, &h);
	if (r == TLP_HO_HDR)
		r = n - TLP_HO_HDR == h.len ? tlp_ho_decode(&h, copy + TLP_HO_HDR, h.len, m) : -EMSGSIZE;
	free(copy);
	return r;
}

static struct tlp_ho_msg conn_msg(void)
{
	static const uint8_t a[] = "GET / HTTP/1.1\r\n", z[] = "tail";
	struct tlp_ho_msg m;
	struct sockaddr_in6 *p = (struct sockaddr_in6 *)&m.u.conn.peer;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_CONN;
	m.u.conn.flags = TLP_HO_EOF(0) | TLP_HO_SHUT(1);
	m.u.conn.server = 3;
	m.u.conn.bytes[0] = 1ull << 40;
	m.u.conn.bytes[1] = 12345;
	m.u.conn.age_ns = 987654321;
	strcpy(m.u.conn.listener, "web");
	strcpy(m.u.conn.pool, "backends");
	strcpy(m.u.conn.srv, "[::1]:8080");
	p->sin6_family = AF_INET6;
	p->sin6_port = htons(4000);
	inet_pton(AF_INET6, "2001:db8::7", &p->sin6_addr);
	m.u.conn.peer_len = sizeof *p;
	m.u.conn.carry[0] = a;
	m.u.conn.carry_len[0] = sizeof a - 1;
	m.u.conn.carry[1] = z;
	m.u.conn.carry_len[1] = 4;
	m.u.conn.tls[0] = (const uint8_t *)"STATE0";
	m.u.conn.tls_len[0] = 6;
	return m;
}

static void test_roundtrip_conn(void)
{
	struct tlp_ho_msg m = conn_msg(), g;
	int n = tlp_ho_encode(buf, sizeof buf, &m);

	T_EQ(n, tlp_ho_size(&m));
	T_EQ(n, TLP_HO_HDR + TLP_HO_CONN_FIXED + 3 + 8 + 10 + (int)sizeof(struct sockaddr_in6) + 16 + 4 + 6);
	T_EQ(buf[12], 2);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.type, TLP_HO_CONN);
	T_EQ(g.u.conn.flags, m.u.conn.flags);
	T_EQ(g.u.conn.server, 3);
	T_EQ(g.u.conn.bytes[0], 1ull << 40);
	T_EQ(g.u.conn.bytes[1], 12345);
	T_EQ(g.u.conn.age_ns, 987654321);
	T_STR(g.u.conn.listener, "web");
	T_STR(g.u.conn.pool, "backends");
	T_STR(g.u.conn.srv, "[::1]:8080");
	T_EQ(g.u.conn.peer_len, sizeof(struct sockaddr_in6));
	T_EQ(memcmp(&g.u.conn.peer, &m.u.conn.peer, sizeof(struct sockaddr_in6)), 0);
	T_EQ(g.u.conn.carry_len[0], 16);
	T_EQ(g.u.conn.carry_len[1], 4);
	/* decode_all's copy is gone: compare against the encoded buffer. */
	struct tlp_ho_hdr h;

	T_EQ(tlp_ho_hdr_decode(buf, (size_t)n, &h), TLP_HO_HDR);
	T_EQ(tlp_ho_decode(&h, buf + TLP_HO_HDR, h.len, &g), 0);
	T_EQ(memcmp(g.u.conn.carry[0], "GET / HTTP/1.1\r\n", 16), 0);
	T_EQ(memcmp(g.u.conn.carry[1], "tail", 4), 0);
	/* A side's TLS state, after the carries; none on the other side. */
	T_EQ(g.u.conn.tls_len[0], 6);
	T_EQ(memcmp(g.u.conn.tls[0], "STATE0", 6), 0);
	T_EQ(g.u.conn.tls_len[1], 0);
	T_TRUE(!g.u.conn.tls[1], "a TLS state pointer for a plain side");
	/* Too small a buffer: -ENOSPC at every size below. */
	for (int k = 0; k < n; k++)
		T_EQ(tlp_ho_encode(buf, (size_t)k, &m), -ENOSPC);
	/* No carry at all: NULL pointers back. */
	m.u.conn.carry_len[0] = m.u.conn.carry_len[1] = 0;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_TRUE(!g.u.conn.carry[0] && !g.u.conn.carry[1], "carry pointers set");
	/* The biggest carry both ways fits TLP_HO_BODY_MAX. */
	static uint8_t big[TLP_HO_CARRY_MAX];

	m = conn_msg();
	memset(m.u.conn.listener, 'l', TLP_HO_NAME_MAX);
	memset(m.u.conn.pool, 'p', TLP_HO_NAME_MAX);
	memset(m.u.conn.srv, 's', TLP_HO_NAME_MAX);
	m.u.conn.carry[0] = m.u.conn.carry[1] = big;
	m.u.conn.carry_len[0] = m.u.conn.carry_len[1] = TLP_HO_CARRY_MAX;
	m.u.conn.tls[0] = m.u.conn.tls[1] = big;
	m.u.conn.tls_len[0] = m.u.conn.tls_len[1] = TLP_HO_TLS_MAX;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_TRUE(n > 0, "encode of the largest record: %d", n);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
}

/* A UDP session: its counters and the replies it owes go and come back;
 * what a UDP record cannot hold is refused both ways. */
static void test_udp_session(void)
{
	struct tlp_ho_msg m, g;
	struct sockaddr_in *p = (struct sockaddr_in *)&m.u.conn.peer;
	int n;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_CONN;
	m.u.conn.flags = TLP_HO_UDP;
	m.u.conn.bytes[0] = 340;
	m.u.conn.bytes[1] = 810;
	m.u.conn.dgrams[0] = 10;
	m.u.conn.dgrams[1] = 9;
	m.u.conn.pending = 1;
	m.u.conn.age_ns = 5000000;
	strcpy(m.u.conn.listener, "dns");
	strcpy(m.u.conn.pool, "resolvers");
	strcpy(m.u.conn.srv, "127.0.0.1:53");
	p->sin_family = AF_INET;
	p->sin_port = htons(40000);
	inet_pton(AF_INET, "192.0.2.7", &p->sin_addr);
	m.u.conn.peer_len = sizeof *p;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(n, TLP_HO_HDR + TLP_HO_CONN_FIXED + 3 + 9 + 12 + (int)sizeof *p);
	T_EQ(buf[12], 2);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.conn.flags, TLP_HO_UDP);
	T_EQ(g.u.conn.dgrams[0], 10);
	T_EQ(g.u.conn.dgrams[1], 9);
	T_EQ(g.u.conn.pending, 1);
	T_EQ(g.u.conn.bytes[1], 810);
	T_EQ(g.u.conn.carry_len[0] + g.u.conn.carry_len[1] + g.u.conn.tls_len[0], 0);
	T_EQ(memcmp(&g.u.conn.peer, p, sizeof *p), 0);
	/* Half-close flags with it. */
	buf[TLP_HO_HDR] = TLP_HO_UDP | TLP_HO_EOF(0);
	T_EQ(decode_all(buf, (size_t)n, &g), -EPROTO);
	m.u.conn.flags = TLP_HO_UDP | TLP_HO_EOF(1);
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	/* Bytes to carry, or TLS state, with it. */
	m.u.conn.flags = TLP_HO_UDP;
	m.u.conn.carry[0] = (const uint8_t *)"x";
	m.u.conn.carry_len[0] = 1;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m.u.conn.carry_len[0] = 0;
	m.u.conn.tls[1] = (const uint8_t *)"x";
	m.u.conn.tls_len[1] = 1;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	/* Datagram fields on a connection pair. */
	m = conn_msg();
	m.u.conn.pending = 1;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	n = tlp_ho_encode(buf, sizeof buf, &m);
	buf[TLP_HO_HDR + 56] = 1; /* dgrams[0] of a connection pair */
	T_EQ(decode_all(buf, (size_t)n, &g), -EPROTO);
	buf[TLP_HO_HDR + 56] = 0;
	buf[TLP_HO_HDR + 72] = 1; /* pending */
	T_EQ(decode_all(buf, (size_t)n, &g), -EPROTO);
}

static void test_roundtrip_others(void)
{
	struct tlp_ho_msg m, g;
	struct sockaddr_un *su = (struct sockaddr_un *)&m.u.listener.addr;
	int n;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	m.u.hello.pid = 4242;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(n, TLP_HO_HDR + 8);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.hello.pid, 4242);

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_REFUSE;
	m.u.refuse.reason = TLP_HO_R_VERSION;
	strcpy(m.u.refuse.text, "version 1 here");
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.refuse.reason, TLP_HO_R_VERSION);
	T_STR(g.u.refuse.text, "version 1 here");

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_LISTENER;
	m.u.listener.shard = 7;
	su->sun_family = AF_UNIX;
	strcpy(su->sun_path, "/run/x.sock");
	m.u.listener.addr_len = (uint16_t)(offsetof(struct sockaddr_un, sun_path) + 12);
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(buf[12], 1);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.listener.shard, 7);
	T_STR(((struct sockaddr_un *)&g.u.listener.addr)->sun_path, "/run/x.sock");
	m.u.listener.addr_len = 0; /* a listener has an address */
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_LISTENERS_END;
	m.u.lend.count = 5;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.lend.count, 5);

	m.type = TLP_HO_READY;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(n, TLP_HO_HDR);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);

	m.type = TLP_HO_END;
	m.u.end.handed = 100;
	m.u.end.left = 2;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.end.handed, 100);
	T_EQ(g.u.end.left, 2);

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_ACK;
	m.u.ack.count = 123456;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(n, TLP_HO_HDR + 4);
	T_EQ(buf[12], 0); /* no descriptors */
	T_EQ(decode_all(buf, (size_t)n, &g), 0);
	T_EQ(g.u.ack.count, 123456);

	m.type = 99;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	T_EQ(tlp_ho_size(NULL), -EINVAL);
}

static void test_bad_header(void)
{
	struct tlp_ho_msg m;
	struct tlp_ho_hdr h;
	uint8_t b[TLP_HO_HDR];
	int n;

	memset(&m, 0, sizeof m);
	m.type = TLP_HO_HELLO;
	n = tlp_ho_encode(buf, sizeof buf, &m);
	T_EQ(n, 24);
	for (size_t k = 0; k < TLP_HO_HDR; k++)
		T_EQ(tlp_ho_hdr_decode(buf, k, &h), -EAGAIN);
	memcpy(b, buf, sizeof b);
	b[0] = 'X';
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	/* Another version: refused, and which one is said. */
	memcpy(b, buf, sizeof b);
	b[4] = TLP_HO_VERSION + 1;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTONOSUPPORT);
	T_EQ(h.version, TLP_HO_VERSION + 1);
	b[4] = 1; /* version 1 (no ACK, carries no unwritten bytes): refused too */
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTONOSUPPORT);
	T_EQ(h.version, 1);
	b[4] = 0;
	b[5] = 1;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTONOSUPPORT);
	T_EQ(h.version, 256);
	/* Unknown type, reserved bytes, nfds not the type's, length too big. */
	memcpy(b, buf, sizeof b);
	b[6] = 0;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	b[6] = TLP_HO_TYPE_COUNT;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	for (int k = 13; k < 16; k++) {
		memcpy(b, buf, sizeof b);
		b[k] = 1;
		T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	}
	memcpy(b, buf, sizeof b);
	b[12] = 1;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	memcpy(b, buf, sizeof b);
	b[8] = 9; /* a HELLO body is 8 bytes */
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	memcpy(b, buf, sizeof b);
	b[6] = TLP_HO_CONN;
	b[12] = 2;
	b[8] = b[9] = b[10] = b[11] = 0xff;
	T_EQ(tlp_ho_hdr_decode(b, sizeof b, &h), -EPROTO);
	T_EQ(tlp_ho_hdr_decode(NULL, 16, &h), -EINVAL);
	T_EQ(tlp_ho_hdr_decode(buf, 16, NULL), -EINVAL);
}

/* Decode a CONN body after changing byte off to v. */
static int conn_poked(size_t off, uint8_t v, size_t *len)
{
	struct tlp_ho_msg m = conn_msg();
	int n = tlp_ho_encode(buf, sizeof buf, &m);

	*len = (size_t)n;
	buf[TLP_HO_HDR + off] = v;
	return decode_all(buf, (size_t)n, &m);
}

static void test_bad_conn(void)
{
	struct tlp_ho_msg m = conn_msg(), g;
	struct tlp_ho_hdr h;
	size_t n;
	int len = tlp_ho_encode(buf, sizeof buf, &m);

	/* Every truncation of the body is refused. */
	T_EQ(tlp_ho_hdr_decode(buf, (size_t)len, &h), TLP_HO_HDR);
	for (uint32_t k = 0; k < h.len; k++) {
		struct tlp_ho_hdr hk = h;

		hk.len = k;
		T_EQ(tlp_ho_decode(&hk, buf + TLP_HO_HDR, k, &g), -EPROTO);
	}
	T_EQ(tlp_ho_decode(&h, buf + TLP_HO_HDR, h.len - 1, &g), -EINVAL);
	/* Unknown flags; a SHUT without the other side's FIN. */
	T_EQ(conn_poked(0, 0x20, &n), -EPROTO);
	T_EQ(conn_poked(0, TLP_HO_UDP, &n), -EPROTO); /* a UDP session carries no bytes */
	T_EQ(conn_poked(0, TLP_HO_SHUT(0), &n), -EPROTO);
	T_EQ(conn_poked(0, TLP_HO_EOF(1) | TLP_HO_SHUT(0), &n), 0);
	/* Lengths that do not add up, or past the limits. */
	T_EQ(conn_poked(32, 4, &n), -EPROTO);       /* listener name one longer */
	T_EQ(conn_poked(38, 3, &n), -EPROTO);       /* a peer address of 3 bytes */
	T_EQ(conn_poked(43, 0x7f, &n), -EPROTO);    /* a carry above TLP_HO_CARRY_MAX */
	T_EQ(conn_poked(40, 15, &n), -EPROTO);      /* carry lengths not the body's */
	T_EQ(conn_poked(51, 0x7f, &n), -EPROTO);    /* a TLS state above TLP_HO_TLS_MAX */
	T_EQ(conn_poked(48, 7, &n), -EPROTO);       /* TLS state lengths not the body's */
	T_EQ(conn_poked(52, 1, &n), -EPROTO);
	/* A NUL inside a name. */
	T_EQ(conn_poked(TLP_HO_CONN_FIXED + 1, 0, &n), -EPROTO);
	/* The peer's family: another one is refused. */
	T_EQ(conn_poked(TLP_HO_CONN_FIXED + 21, 0, &n), -EPROTO);
	T_EQ(conn_poked(TLP_HO_CONN_FIXED + 21, 0xff, &n), -EPROTO);

	/* Encoding refuses what decoding would. */
	m = conn_msg();
	m.u.conn.flags = TLP_HO_SHUT(1);
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	m.u.conn.carry_len[1] = TLP_HO_CARRY_MAX + 1;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	m.u.conn.carry[1] = NULL;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	m.u.conn.tls_len[1] = TLP_HO_TLS_MAX + 1;
	m.u.conn.tls[1] = m.u.conn.tls[0];
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	m.u.conn.tls[0] = NULL;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	memset(m.u.conn.pool, 'p', sizeof m.u.conn.pool);
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
	m = conn_msg();
	m.u.conn.peer_len = 7;
	T_EQ(tlp_ho_encode(buf, sizeof buf, &m), -EINVAL);
}

static void test_bad_others(void)
{
	struct tlp_ho_msg g;
	struct tlp_ho_hdr h = {.version = TLP_HO_VERSION};
	uint8_t b[300] = {0};

	h.type = TLP_HO_HELLO;
	h.len = 8;
	b[4] = 1; /* reserved not zero */
	T_EQ(tlp_ho_decode(&h, b, 8, &g), -EPROTO);
	h.len = 4;
	T_EQ(tlp_ho_decode(&h, b, 4, &g), -EPROTO);
	h.type = TLP_HO_REFUSE;
	memset(b, 0, sizeof b);
	b[2] = 5;
	memcpy(b + 4, "ab\0cd", 5);
	h.len = 9;
	T_EQ(tlp_ho_decode(&h, b, 9, &g), -EPROTO);
	h.len = 8;
	T_EQ(tlp_ho_decode(&h, b, 8, &g), -EPROTO);
	h.type = TLP_HO_LISTENER;
	memset(b, 0, sizeof b);
	b[2] = 2;
	h.len = 6;
	T_EQ(tlp_ho_decode(&h, b, 6, &g), -EPROTO);
	b[2] = 0;
	h.len = 4;
	T_EQ(tlp_ho_decode(&h, b, 4, &g), -EPROTO);
	h.type = TLP_HO_READY;
	h.len = 1;
	T_EQ(tlp_ho_decode(&h, b, 1, &g), -EPROTO);
	h.type = TLP_HO_ACK; /* a count, exactly */
	h.len = 3;
	T_EQ(tlp_ho_decode(&h, b, 3, &g), -EPROTO);
	h.len = 8;
	T_EQ(tlp_ho_decode(&h, b, 8, &g), -EPROTO);
	T_EQ(tlp_ho_type_fds(TLP_HO_ACK), 0);
	h.type = 0;
	h.len = 0;
	T_EQ(tlp_ho_decode(&h, b, 0, &g), -EPROTO);
	T_EQ(tlp_ho_decode(NULL, b, 0, &g), -EINVAL);
	T_EQ(tlp_ho_type_fds(0), -1);
	T_EQ(tlp_ho_type_fds(TLP_HO_CONN), 2);
}

int main(void)
{
	static const struct tlp_case cases[] = {
		{"conn: round trip, sizes", test_roundtrip_conn},
		{"hello, refuse, listener, ends, ack: round trip", test_roundtrip_others},
		{"header: version refused, malformed", test_bad_header},
		{"conn: malformed bodies refused", test_bad_conn},
		{"udp session: round trip, what it cannot hold refused", test_udp_session},
		{"other bodies: malformed refused", test_bad_others},
	};

	return tlp_test_main("tlproxy-handover", cases, sizeof cases / sizeof cases[0]);
}
