/* tests/contract_dgram.c: the datagram rules D1-D11 of docs/CONTRACT-DGRAM.md, one test each, on every driver (sim where it models the rule). */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32 /* Winsock's names come with turnloop/platform.h */
#include <arpa/inet.h>
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>
#include "sim.h"

/* The IOCP driver (Windows): what Windows cannot give that Linux does is
 * checked as the driver's refusal or bound, and recorded as a skip. */
static int iocp(tl_loop *l)
{
	return strcmp(tl_loop_driver(l), "iocp") == 0;
}

static uint16_t port_of(const tl_addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

/* The family the rules run in: IPv4, or IPv6 with TL_TEST_UDP_FAMILY=6
 * (the loopback address ::1, and TL_TEST_UDP_ADDR2 the second address
 * of this host that D6 sends to). */
static int fam(void)
{
	const char *e = getenv("TL_TEST_UDP_FAMILY");
	return e && !strcmp(e, "6") ? AF_INET6 : AF_INET;
}

/* Whether a and b hold the same IP address (ports not compared). */
static int same_ip(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET6)
		return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
	return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
}

/* Two datagram handles on the loopback address of fam() (opts for the
 * first), their addresses in *aa and *ba. 0 or -1 (failures recorded). */
static int two(tl_loop *l, const tl_udp_opts *o, tl_handle *a, tl_addr *aa, tl_handle *b,
	       tl_addr *ba)
{
	tl_addr lo;
	h_loopback(&lo, fam(), 0);
	H_EQ_FATAL(tl_udp_bind_opts(l, &lo, o, a), 0);
	H_EQ_FATAL(tl_udp_bind(l, &lo, b), 0);
	H_EQ(tl_local_addr(l, *a, aa), 0);
	H_EQ(tl_local_addr(l, *b, ba), 0);
	return 0;
}

/* Send len bytes of byte v from h to `to` and wait for the send's terminal. */
static void send_wait(h_ctx *c, tl_handle h, const tl_addr *to, uint8_t v, uint32_t len)
{
	static uint8_t buf[4096];
	memset(buf, v, len);
	tl_op op;
	H_EQ(tl_udp_send(c->loop, h, buf, len, to, 0x5e, &op), 0);
	int i = h_wait_op(c, op);
	if (i >= 0)
		H_EQ(c->log.v[i].result, len);
}

/* Nonterminal receive completions of op in the log from index from. */
static uint32_t recvs(const h_ctx *c, tl_op op, uint32_t from)
{
	uint32_t n = 0;
	for (uint32_t i = from; i < c->log.n; i++)
		if (tl_op_eq(c->log.v[i].op, op) && c->log.v[i].kind == TL_K_RECV &&
		    !(c->log.v[i].flags & TL_F_TERMINAL))
			n++;
	return n;
}

struct want {
	h_ctx *c;
	tl_op op;
	uint32_t n;
};

static int got_n(void *arg)
{
	struct want *w = arg;
	return recvs(w->c, w->op, 0) >= w->n;
}

/* Leases the log holds (not released yet). */
static uint32_t held(const h_ctx *c)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < c->log.n; i++)
		if (c->log.v[i].kind == TL_K_RECV && (c->log.v[i].flags & TL_F_LEASE))
			n++;
	return n;
}

/* D1: options at bind: unknown flags and GRO without the capability are
 * refused; SO_REUSEPORT lets a second handle bind the same port. */
static void test_d1_bind_options(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_addr lo, a1;
	h_loopback(&lo, fam(), 0);
	tl_handle h1, h2, h3;
	tl_udp_opts bad = {.flags = 1u << 30}, rp = {.flags = TL_UDP_REUSEPORT},
		    gro = {.flags = TL_UDP_GRO};
	H_EQ(tl_udp_bind_opts(l, &lo, &bad, &h1), -EINVAL);
	if (!(tl_loop_caps(l) & TL_CAP_UDP_GRO))
		H_EQ(tl_udp_bind_opts(l, &lo, &gro, &h1), -EOPNOTSUPP);
	if (iocp(l)) {
		/* Windows cannot spread one port's datagrams over sockets. */
		H_EQ(tl_udp_bind_opts(l, &lo, &rp, &h1), -ENOTSUP);
		H_EQ_FATAL(tl_udp_bind(l, &lo, &h1), 0);
		H_EQ(tl_local_addr(l, h1, &a1), 0);
		H_EQ(tl_udp_bind(l, &a1, &h3), -EADDRINUSE);
		H_EQ(tl_udp_bind_opts(l, &a1, &rp, &h2), -ENOTSUP);
		h_close(&c, h1, 1);
		h_skip("TL_UDP_REUSEPORT has no Windows counterpart (-ENOTSUP checked)");
		goto out;
	}
	H_EQ_FATAL(tl_udp_bind_opts(l, &lo, &rp, &h1), 0);
	H_EQ(tl_local_addr(l, h1, &a1), 0);
	H_EQ(tl_udp_bind(l, &a1, &h3), -EADDRINUSE);
	H_EQ_FATAL(tl_udp_bind_opts(l, &a1, &rp, &h2), 0);
	h_close(&c, h1, 1);
	h_close(&c, h2, 2);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D2: a send completes once with its length; a one-shot receive once with
 * the datagram and its source; an empty datagram is a result of 0. */
static void test_d2_send_recv_once(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	uint8_t buf[64];
	tl_op r;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &r), 0);
	send_wait(&c, b, &aa, 0x11, 10);
	int i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 10);
		H_EQ(c.log.v[i].flags & TL_F_TRUNC, 0);
		H_TRUE(h_addr_eq(&c.log.v[i].u.recv.from, &ba), "source port %u",
		       port_of(&c.log.v[i].u.recv.from));
		H_EQ(c.log.v[i].u.recv.to.sa.sa_family, 0);
	}
	H_EQ(h_count_op(&c.log, r, 0), 1);
	H_EQ(tl_udp_recv_pooled(l, a, 2, &r), 0);
	send_wait(&c, b, &aa, 0, 0);
	i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 0);
		H_EQ(c.log.v[i].flags & TL_F_LEASE, 0);
	}
	h_close(&c, a, 3);
	h_close(&c, b, 4);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D3: a datagram longer than the buffer: the buffer's worth, TL_F_TRUNC,
 * aux = the full length; the next datagram is whole. */
static void test_d3_truncation(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	uint8_t buf[16];
	tl_op r;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &r), 0);
	send_wait(&c, b, &aa, 0x22, 100);
	int i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 16);
		H_TRUE(c.log.v[i].flags & TL_F_TRUNC, "flags %#x", c.log.v[i].flags);
		if (iocp(l)) {
			/* Windows does not report a cut datagram's length: the
			 * driver's aux is a lower bound, the buffer's length + 1. */
			H_EQ(c.log.v[i].aux, sizeof buf + 1);
			H_EQ(buf[15], 0x22);
			h_skip("Windows does not report a truncated datagram's full length "
			       "(aux = buffer length + 1 checked)");
		} else {
			H_EQ(c.log.v[i].aux, 100);
		}
	}
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 2, &r), 0);
	send_wait(&c, b, &aa, 0x23, 16);
	i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 16);
		H_EQ(c.log.v[i].flags & TL_F_TRUNC, 0);
		H_EQ(buf[15], 0x23);
	}
	h_close(&c, a, 3);
	h_close(&c, b, 4);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D4: a multishot receive delivers every datagram as its own nonterminal
 * completion, in the order one sender sent them, and ends only when
 * stopped, with one terminal. */
static void test_d4_multishot_order(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	tl_op r, s[12];
	uint8_t msg[12];
	H_EQ(tl_udp_recv_start(l, a, 1, &r), 0);
	for (int k = 0; k < 12; k++) {
		msg[k] = (uint8_t)k;
		H_EQ(tl_udp_send(l, b, &msg[k], 1, &aa, 10 + (uint64_t)k, &s[k]), 0);
	}
	struct want w = {&c, r, 12};
	H_TRUE(h_until(&c, got_n, &w, H_WAIT_MS), "%u of 12 datagrams", recvs(&c, r, 0));
	int next = 0;
	for (uint32_t i = 0; i < c.log.n; i++) {
		tl_completion *x = &c.log.v[i];
		if (!tl_op_eq(x->op, r))
			continue;
		H_EQ(x->result, 1);
		H_TRUE_FATAL(x->flags & TL_F_LEASE, "flags %#x", x->flags);
		H_EQ(x->u.recv.lease.data[0], next);
		next++;
	}
	H_EQ(next, 12);
	h_release_leases(&c, 0);
	H_EQ(tl_stop(l, r), 0);
	int i = h_wait_op(&c, r);
	if (i >= 0)
		H_TRUE(c.log.v[i].flags & TL_F_STOPPED, "flags %#x", c.log.v[i].flags);
	H_EQ(h_count_term(&c.log, r), 1);
	h_close(&c, a, 3);
	h_close(&c, b, 4);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D5: a multishot receive never holds more leases than the handle's cap,
 * however many datagrams wait; releasing them lets the rest in. */
static void test_d5_lease_cap(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	H_EQ(tl_handle_caps(l, a, 3, 0), 0);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, a, 1, &r), 0);
	for (int k = 0; k < 10; k++)
		send_wait(&c, b, &aa, (uint8_t)k, 32);
	h_idle(&c, 20);
	H_EQ(held(&c), 3);
	H_EQ(recvs(&c, r, 0), 3);
	/* Released, the next three come in, and so on. */
	for (int round = 0; round < 3; round++) {
		h_release_leases(&c, 0);
		struct want w = {&c, r, 3u * (uint32_t)round + 6u > 10 ? 10 : 3u * (uint32_t)round + 6u};
		H_TRUE(h_until(&c, got_n, &w, H_WAIT_MS), "round %d: %u", round, recvs(&c, r, 0));
		H_TRUE(held(&c) <= 3, "holds %u leases, cap 3", held(&c));
	}
	H_EQ(recvs(&c, r, 0), 10);
	h_release_leases(&c, 0);
	H_EQ(tl_stop(l, r), 0);
	h_wait_op(&c, r);
	h_close(&c, a, 3);
	h_close(&c, b, 4);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D6: with TL_UDP_PKTINFO a receive reports the local address the
 * datagram was sent to; a send from a chosen local address carries it as
 * its source. */
static void test_d6_pktinfo_and_source(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	/* The second address: 127.0.0.2 is this host too (all of 127/8 is
	 * loopback); IPv6 has one loopback address, so the test is told
	 * another (a DPDK port's second address). */
	tl_addr lo, lo2;
	h_loopback(&lo, fam(), 0);
	const char *a2 = fam() == AF_INET6 ? getenv("TL_TEST_UDP_ADDR2") : "127.0.0.2";
	if (!a2 || tl_addr_parse(&lo2, a2, 0) != 0 || lo2.sa.sa_family != fam()) {
		h_skip("IPv6: no second address of this host to send to (TL_TEST_UDP_ADDR2)");
		goto out;
	}
	tl_addr any;
	H_EQ_FATAL(tl_addr_parse(&any, fam() == AF_INET6 ? "::" : "0.0.0.0", 0), 0);
	tl_udp_opts pi = {.flags = TL_UDP_PKTINFO};
	tl_handle a, b;
	H_EQ_FATAL(tl_udp_bind_opts(l, &any, &pi, &a), 0);
	tl_addr aa;
	H_EQ(tl_local_addr(l, a, &aa), 0);
	H_EQ_FATAL(tl_udp_bind(l, &lo, &b), 0);
	tl_addr to = lo2;
	if (fam() == AF_INET6)
		to.in6.sin6_port = aa.in6.sin6_port;
	else
		to.in.sin_port = aa.in.sin_port;
	uint8_t buf[64];
	tl_op r;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &r), 0);
	send_wait(&c, b, &to, 0x33, 8);
	tl_addr from;
	memset(&from, 0, sizeof from);
	int i = h_wait_op(&c, r);
	if (i >= 0) {
		tl_addr got = c.log.v[i].u.recv.to;
		H_EQ(got.sa.sa_family, fam());
		H_TRUE(same_ip(&got, &lo2), "u.recv.to is not the address sent to (%s)", a2);
		from = c.log.v[i].u.recv.from;
	}
	/* Answer from the address asked (the second), not the kernel's pick. */
	H_EQ(tl_udp_recv(l, b, buf, sizeof buf, 2, &r), 0);
	tl_op s;
	tl_udp_msg m = {.buf = "re", .len = 2, .to = &from, .from = &lo2};
	H_EQ(tl_udp_sendmsg(l, a, &m, 3, &s), 0);
	h_wait_op(&c, s);
	i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 2);
		/* wine 8's WSASendMsg ignores IP_PKTINFO (a bare Winsock
		 * program shows it): the answer comes from the socket's pick
		 * there; Windows honours it. */
		if (iocp(l) && h_under_wine() && !same_ip(&c.log.v[i].u.recv.from, &lo2))
			h_skip("the answer's source address: wine 8's WSASendMsg ignores "
			       "IP_PKTINFO; Windows honours it");
		else
			H_TRUE(same_ip(&c.log.v[i].u.recv.from, &lo2), "the answer is not from %s",
			       a2);
		H_EQ(port_of(&c.log.v[i].u.recv.from), port_of(&aa));
	}
	h_close(&c, a, 4);
	h_close(&c, b, 5);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D6 (dual stack): an IPv6 handle bound to :: takes IPv4 datagrams too,
 * their source IPv4-mapped (::ffff:127.0.0.1), the address they were
 * sent to (TL_UDP_PKTINFO) IPv4 as the kernel gives it, and a send to an
 * address goes out as IPv4: the IPv4 handle gets it from the IPv6
 * handle's port. */
static void test_d6_dual_stack(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP) || !h_need_ipv6())
		goto out;
	tl_addr any6, lo4, a6, b4;
	H_EQ_FATAL(tl_addr_parse(&any6, "::", 0), 0);
	h_loopback(&lo4, AF_INET, 0);
	tl_udp_opts pi = {.flags = TL_UDP_PKTINFO};
	tl_handle a, b;
	H_EQ_FATAL(tl_udp_bind_opts(l, &any6, &pi, &a), 0);
	H_EQ_FATAL(tl_udp_bind(l, &lo4, &b), 0);
	H_EQ(tl_local_addr(l, a, &a6), 0);
	H_EQ(tl_local_addr(l, b, &b4), 0);
	H_EQ(a6.sa.sa_family, AF_INET6);
	tl_addr to = lo4;
	to.in.sin_port = a6.in6.sin6_port;
	uint8_t buf[16];
	tl_op r, s;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 1, &r), 0);
	send_wait(&c, b, &to, 0x66, 6);
	tl_addr from;
	memset(&from, 0, sizeof from);
	int i = h_wait_op(&c, r);
	if (i >= 0) {
		tl_completion *x = &c.log.v[i];
		H_EQ(x->result, 6);
		from = x->u.recv.from;
		tl_addr want;
		H_EQ(tl_addr_parse(&want, "::ffff:127.0.0.1", 0), 0);
		H_TRUE(same_ip(&from, &want) && port_of(&from) == port_of(&b4),
		       "from is not [::ffff:127.0.0.1]:%u (family %d, port %u)", port_of(&b4),
		       from.sa.sa_family, port_of(&from));
		/* The kernel's IP_PKTINFO on such a socket: IPv4. */
		H_EQ(x->u.recv.to.sa.sa_family, AF_INET);
		H_TRUE(same_ip(&x->u.recv.to, &lo4), "u.recv.to is not 127.0.0.1");
	}
	/* The answer to the mapped address reaches the IPv4 handle. */
	H_EQ(tl_udp_recv(l, b, buf, sizeof buf, 2, &r), 0);
	if (from.sa.sa_family) {
		H_EQ(tl_udp_send(l, a, "v4", 2, &from, 3, &s), 0);
		h_wait_op(&c, s);
		i = h_wait_op(&c, r);
		if (i >= 0) {
			H_EQ(c.log.v[i].result, 2);
			H_EQ(c.log.v[i].u.recv.from.sa.sa_family, AF_INET);
			H_TRUE(same_ip(&c.log.v[i].u.recv.from, &lo4), "not from 127.0.0.1");
			H_EQ(port_of(&c.log.v[i].u.recv.from), port_of(&a6));
		}
	}
	h_close(&c, a, 4);
	h_close(&c, b, 5);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D7: a connected handle sends without an address and receives only from
 * its peer; a send without an address on an unconnected handle ends with
 * -EDESTADDRREQ. */
static void test_d7_connected(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b, x;
	tl_addr aa, ba, lo;
	two(l, NULL, &a, &aa, &b, &ba);
	h_loopback(&lo, fam(), 0);
	H_EQ_FATAL(tl_udp_bind(l, &lo, &x), 0);
	tl_op s;
	H_EQ(tl_udp_send(l, b, "?", 1, NULL, 1, &s), 0);
	int i = h_wait_op(&c, s);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -EDESTADDRREQ);
	H_EQ(tl_udp_connect(l, a, &ba), 0);
	if (fam() == AF_INET) {
		tl_addr v6;
		h_loopback(&v6, AF_INET6, 1);
		H_EQ(tl_udp_connect(l, a, &v6), -EAFNOSUPPORT);
	}
	H_EQ(tl_udp_connect(l, TL_HANDLE_NONE, &ba), -ENOENT);
	uint8_t buf[16];
	tl_op r;
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 2, &r), 0);
	send_wait(&c, x, &aa, 0x44, 4); /* not the peer: never delivered */
	send_wait(&c, b, &aa, 0x55, 5);
	i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 5);
		H_EQ(buf[0], 0x55);
	}
	H_EQ(tl_udp_recv(l, b, buf, sizeof buf, 3, &r), 0);
	H_EQ(tl_udp_send(l, a, "ok", 2, NULL, 4, &s), 0);
	h_wait_op(&c, s);
	i = h_wait_op(&c, r);
	if (i >= 0) {
		H_EQ(c.log.v[i].result, 2);
		H_TRUE(h_addr_eq(&c.log.v[i].u.recv.from, &aa), "from port %u",
		       port_of(&c.log.v[i].u.recv.from));
	}
	h_close(&c, a, 5);
	h_close(&c, b, 6);
	h_close(&c, x, 7);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D8: one send of many equal segments (UDP_SEGMENT) arrives as that many
 * datagrams; with TL_UDP_GRO a receive may hold several, each
 * u.recv.segment long. Without the capability both are -EOPNOTSUPP. */
static void test_d8_gso_gro(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	uint32_t caps = tl_loop_caps(l);
	tl_addr lo;
	h_loopback(&lo, fam(), 0);
	tl_udp_opts gro = {.flags = TL_UDP_GRO};
	tl_handle a, b, g;
	tl_addr aa, ba, ga;
	two(l, NULL, &a, &aa, &b, &ba);
	static uint8_t big[4000];
	for (uint32_t k = 0; k < sizeof big; k++)
		big[k] = (uint8_t)(k / 1000);
	tl_udp_msg m = {.buf = big, .len = sizeof big, .segment = 1000, .to = &aa};
	tl_op s, r;
	if (!(caps & TL_CAP_UDP_GSO)) {
		H_EQ(tl_udp_sendmsg(l, b, &m, 1, &s), -EOPNOTSUPP);
		H_EQ(tl_udp_bind_opts(l, &lo, &gro, &g), -EOPNOTSUPP);
		h_skip("no UDP GSO on this driver or kernel (-EOPNOTSUPP checked)");
		goto done;
	}
	H_EQ(tl_udp_recv_start(l, a, 1, &r), 0);
	H_EQ(tl_udp_sendmsg(l, b, &m, 2, &s), 0);
	int i = h_wait_op(&c, s);
	if (i >= 0)
		H_EQ(c.log.v[i].result, sizeof big);
	struct want w = {&c, r, 4};
	H_TRUE(h_until(&c, got_n, &w, H_WAIT_MS), "%u of 4 segments", recvs(&c, r, 0));
	for (uint32_t k = 0; k < c.log.n; k++)
		if (tl_op_eq(c.log.v[k].op, r) && !(c.log.v[k].flags & TL_F_TERMINAL))
			H_EQ(c.log.v[k].result, 1000);
	h_release_leases(&c, 0);
	H_EQ(tl_stop(l, r), 0);
	h_wait_op(&c, r);
	if (caps & TL_CAP_UDP_GRO) {
		H_EQ_FATAL(tl_udp_bind_opts(l, &lo, &gro, &g), 0);
		H_EQ(tl_local_addr(l, g, &ga), 0);
		uint32_t from = c.log.n;
		H_EQ(tl_udp_recv_start(l, g, 3, &r), 0);
		m.to = &ga;
		H_EQ(tl_udp_sendmsg(l, b, &m, 4, &s), 0);
		h_wait_op(&c, s);
		uint32_t bytes = 0;
		uint64_t t0 = h_wall_ns();
		while (bytes < sizeof big && h_wall_ns() - t0 < (uint64_t)H_WAIT_MS * H_MS) {
			h_turn(&c, 10 * (int64_t)H_MS);
			bytes = 0;
			for (uint32_t k = from; k < c.log.n; k++) {
				tl_completion *x = &c.log.v[k];
				if (!tl_op_eq(x->op, r) || x->result <= 0)
					continue;
				bytes += (uint32_t)x->result;
				if (x->result > 1000)
					H_EQ(x->u.recv.segment, 1000);
			}
		}
		H_EQ(bytes, sizeof big);
		h_release_leases(&c, 0);
		H_EQ(tl_stop(l, r), 0);
		h_wait_op(&c, r);
		h_close(&c, g, 5);
	}
done:
	h_close(&c, a, 6);
	h_close(&c, b, 7);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D9: closing a handle ends each of its pending receives and sends with
 * exactly one terminal before its Closed; a cancelled multishot receive
 * delivers what it had taken first. */
static void test_d9_close_and_cancel(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	tl_op r1, r2, r3;
	uint8_t buf[16];
	H_EQ(tl_udp_recv_start(l, a, 1, &r1), 0);
	H_EQ(tl_udp_recv(l, a, buf, sizeof buf, 2, &r2), 0);
	H_EQ(tl_udp_recv_start(l, b, 3, &r3), 0);
	H_EQ(tl_cancel(l, r3), 0);
	int i = h_wait_op(&c, r3);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	H_EQ(tl_close(l, a, 9), 0);
	int ci = h_wait_closed(&c, a);
	H_EQ(h_count_term(&c.log, r1), 1);
	H_EQ(h_count_term(&c.log, r2), 1);
	int t1 = h_find_term(&c.log, r1), t2 = h_find_term(&c.log, r2);
	H_TRUE(t1 >= 0 && t1 < ci && t2 >= 0 && t2 < ci, "terminals %d %d, Closed %d", t1, t2,
	       ci);
	h_idle(&c, 5);
	H_EQ(h_count_term(&c.log, r1), 1);
	h_close(&c, b, 10);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D10 (sim): the seeded faults lose, duplicate and reorder datagrams; a
 * receiver sees each datagram once without them. */
static void test_d10_sim_faults(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	struct tl_sim_faults f;
	if (tl__sim_get_faults(l, &f) == -ENOTSUP) {
		h_skip("the kernel's loopback neither loses, duplicates nor reorders on demand");
		goto out;
	}
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	/* Each knob at certainty: one datagram each way. */
	enum tl_sim_knob knob[3] = {TL_SIM_UDP_DROP, TL_SIM_UDP_DUP, TL_SIM_UDP_REORDER};
	uint32_t want[3] = {0, 2, 2};
	for (int k = 0; k < 3; k++) {
		struct tl_sim_faults g = f;
		tl_op r;
		uint32_t from = c.log.n;
		if (k == 2) /* something to overtake */
			send_wait(&c, b, &aa, 1, 1);
		g.p[knob[k]] = 1.0;
		H_EQ(tl__sim_set_faults(l, &g), 0);
		send_wait(&c, b, &aa, 2, 1);
		H_EQ(tl__sim_set_faults(l, &f), 0);
		H_EQ(tl_udp_recv_start(l, a, 1, &r), 0);
		h_idle(&c, 5);
		H_EQ(recvs(&c, r, from), want[k]);
		if (k == 2) {
			int first = h_find_op(&c.log, r, from);
			if (first >= 0 && (c.log.v[first].flags & TL_F_LEASE))
				H_EQ(c.log.v[first].u.recv.lease.data[0], 2);
		}
		h_release_leases(&c, 0);
		H_EQ(tl_stop(l, r), 0);
		h_wait_op(&c, r);
	}
	h_close(&c, a, 2);
	h_close(&c, b, 3);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

/* D11: a multishot receive takes a batch of datagrams per turn from one
 * handle (not one per turn), no more at once than the handle's lease cap
 * leaves, and delivers every queued datagram in order of arrival; with its
 * batch armed and datagrams coming one at a time it goes on taking them. */
static void test_d11_batch(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	tl_handle a, b;
	tl_addr aa, ba;
	two(l, NULL, &a, &aa, &b, &ba);
	enum { N = 48, CAP = 8 };
	H_EQ(tl_handle_caps(l, a, CAP, 0), 0);
	for (int k = 0; k < N; k++)
		send_wait(&c, b, &aa, (uint8_t)k, 32);
	tl_op r;
	H_EQ(tl_udp_recv_start(l, a, 1, &r), 0);
	uint32_t next = 0, most = 0;
	uint64_t until = h_wall_ns() + (uint64_t)H_WAIT_MS * 1000000u;
	while (next < N && h_wall_ns() < until) {
		uint32_t from = c.log.n;
		h_turn(&c, 10 * (int64_t)H_MS);
		uint32_t got = recvs(&c, r, from);
		H_TRUE(held(&c) <= CAP, "holds %u leases, cap %d", held(&c), CAP);
		most = got > most ? got : most;
		for (uint32_t i = from; i < c.log.n; i++) {
			tl_completion *x = &c.log.v[i];
			if (!tl_op_eq(x->op, r) || (x->flags & TL_F_TERMINAL))
				continue;
			H_EQ(x->result, 32);
			H_TRUE_FATAL(x->flags & TL_F_LEASE, "flags %#x", x->flags);
			H_EQ(x->u.recv.lease.data[0], next);
			next++;
		}
		h_release_leases(&c, from);
	}
	H_EQ(next, N);
	H_TRUE(most > 1 && most <= CAP, "at most %u datagrams a turn (cap %d)", most, CAP);
	/* One datagram at a time to a receive that waits with its batch
	 * armed: each wakes every request and one takes it, hundreds of
	 * times; the receive goes on, and takes each. */
	enum { ONE_BY_ONE = 600 };
	for (uint32_t k = 0; k < ONE_BY_ONE && h_find_term(&c.log, r) < 0; k++) {
		send_wait(&c, b, &aa, (uint8_t)k, 8);
		struct want w = {&c, r, N + k + 1};
		H_TRUE_FATAL(h_until(&c, got_n, &w, H_WAIT_MS), "datagram %u of %d", k,
			     ONE_BY_ONE);
		h_release_leases(&c, 0);
	}
	H_TRUE(h_find_term(&c.log, r) < 0, "the receive ended: %s",
	       h_find_term(&c.log, r) < 0 ? "" : h_errname(c.log.v[h_find_term(&c.log, r)].result));
	H_EQ(tl_stop(l, r), 0);
	h_wait_op(&c, r);
	H_EQ(h_count_term(&c.log, r), 1);
	h_close(&c, a, 3);
	h_close(&c, b, 4);
out:
	h_ctx_fini(&c);
	h_end(c.loop, fds);
}

const struct test_def tl_contract_dgram[] = {
	T("D datagrams", test_d1_bind_options),
	T("D datagrams", test_d2_send_recv_once),
	T("D datagrams", test_d3_truncation),
	T("D datagrams", test_d4_multishot_order),
	T("D datagrams", test_d5_lease_cap),
	T("D datagrams", test_d6_pktinfo_and_source),
	T("D datagrams", test_d6_dual_stack),
	T("D datagrams", test_d7_connected),
	T("D datagrams", test_d8_gso_gro),
	T("D datagrams", test_d9_close_and_cancel),
	T("D datagrams", test_d10_sim_faults),
	T("D datagrams", test_d11_batch),
	{ NULL, NULL, NULL },
};
