/* tests/contract_poll.c: contract 5 foreign descriptors (tl_poll_start) and the c-ares resolver built on them (tl_dns_*), on every driver. */
#include "contract.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <turnloop/dns.h>
#include <turnloop/poll.h>
#include <CUnit/CUnit.h>
#ifdef _WIN32
/*
 * Windows polls sockets only (the IOCP driver), so a test that polls an
 * eventfd or a pipe on Linux polls a UDP socket on loopback there, made
 * readable by a datagram it sends itself and consumed by a recv; the
 * Unix-domain socketpair is a TCP pair on loopback. The resolver's tests
 * check its refusal: the Windows build has no c-ares (docs/WINDOWS.md).
 */
#include <windows.h>
typedef SOCKET pfd;
#define PFD_INT(s) ((int)(intptr_t)(s))
#define PFD_BAD INVALID_SOCKET
#define pfd_close closesocket

static int nonblock(pfd s)
{
	u_long on = 1;
	return ioctlsocket(s, FIONBIO, &on);
}

#else
#include "dns_responder.h"
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
typedef int pfd;
#define PFD_INT(s) (s)
#define PFD_BAD (-1)
#define pfd_close close

static int nonblock(pfd s)
{
	return fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
}
#endif

/* A non-blocking UDP socket bound on loopback, sending to itself. */
static pfd udp_self(void)
{
	pfd s = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
	if (s == PFD_BAD)
		return s;
	tl_addr a;
	socklen_t len = sizeof a.in;
	h_loopback(&a, AF_INET, 0);
	if (bind(s, &a.sa, len) || getsockname(s, &a.sa, &len) || connect(s, &a.sa, len) ||
	    nonblock(s)) {
		pfd_close(s);
		return PFD_BAD;
	}
	return s;
}

#ifdef _WIN32
/* A connected TCP pair on loopback (blocking), [0] accepted, [1]
 * connected: 0 or -1 (Windows' stand-in for a Unix-domain socketpair). */
static int tcp_pair(pfd sv[2])
{
	pfd l = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	tl_addr a;
	socklen_t len = sizeof a.in;
	h_loopback(&a, AF_INET, 0);
	sv[0] = sv[1] = PFD_BAD;
	if (l == PFD_BAD)
		return -1;
	if (!bind(l, &a.sa, len) && !getsockname(l, &a.sa, &len) && !listen(l, 1) &&
	    (sv[1] = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP)) != PFD_BAD &&
	    !connect(sv[1], &a.sa, len))
		sv[0] = accept(l, NULL, NULL);
	pfd_close(l);
	if (sv[0] == PFD_BAD) {
		if (sv[1] != PFD_BAD)
			pfd_close(sv[1]);
		return -1;
	}
	return 0;
}
#endif

/* Completions of op in c->log from index from. */
static uint32_t polls_of(h_ctx *c, tl_op op, uint32_t from)
{
	return h_count_op(&c->log, op, from);
}

/* Rule: an eventfd polled for input reports nothing until it is readable,
 * then reports POLLIN every turn while it stays readable (level-triggered,
 * nonterminal), and nothing once it was read; the loop never read it (the
 * value is still there) nor closed it. Stop: Stopped, then Closed with the
 * op's token, last. */
static void test_poll_level(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
#ifdef _WIN32
	pfd efd = udp_self();
	H_TRUE_FATAL(efd != INVALID_SOCKET, "UDP socket: %d", WSAGetLastError());
#else
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	H_TRUE_FATAL(efd >= 0, "eventfd");
#endif
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(efd), POLLIN, 0x90, &h, &op), 0);
	h_idle(&c, 20);
	H_EQ(polls_of(&c, op, 0), 0);
	uint64_t v = 5;
#ifdef _WIN32
	H_EQ(send(efd, (const char *)&v, sizeof v, 0), (int)sizeof v);
#else
	H_EQ(write(efd, &v, sizeof v), (ssize_t)sizeof v);
#endif
	uint32_t from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness");
	int i = h_find_op(&c.log, op, from);
	H_TRUE_FATAL(i >= 0, "no TL_K_POLL");
	H_EQ(c.log.v[i].kind, TL_K_POLL);
	H_EQ(c.log.v[i].result, POLLIN);
	H_EQ(c.log.v[i].token, 0x90);
	H_EQ(c.log.v[i].flags & TL_F_TERMINAL, 0);
	H_TRUE(c.log.v[i].handle.v == h.v, "handle");
	/* Not consumed: told again in later turns, one each. */
	uint32_t t0 = c.log.n;
	for (int k = 0; k < 5; k++)
		h_turn(&c, 10 * (int64_t)H_MS);
	H_TRUE(polls_of(&c, op, t0) >= 3, "level-triggered: %u reports in 5 turns",
	       polls_of(&c, op, t0));
	/* Consumed (by us: the loop never read it, the value is intact). */
	uint64_t got = 0;
#ifdef _WIN32
	H_EQ(recv(efd, (char *)&got, sizeof got, 0), (int)sizeof got);
#else
	H_EQ(read(efd, &got, sizeof got), (ssize_t)sizeof got);
#endif
	H_EQ(got, 5);
	h_turn(&c, 0);
	uint32_t t1 = c.log.n;
	h_idle(&c, 20);
	H_EQ(polls_of(&c, op, t1), 0);
	H_EQ(tl_stop(l, op), 0);
	H_EQ(tl_stop(l, op), -EALREADY);
	int term = h_wait_op(&c, op);
	int closed = h_wait_closed(&c, h);
	H_TRUE_FATAL(term >= 0 && closed > term, "Stopped %d then Closed %d", term, closed);
	H_EQ(c.log.v[term].flags & (TL_F_TERMINAL | TL_F_STOPPED), TL_F_TERMINAL | TL_F_STOPPED);
	H_EQ(c.log.v[term].result, 0);
	H_EQ(c.log.v[closed].token, 0x90);
	H_EQ(h_count_handle(&c.log, h, (uint32_t)closed + 1), 0);
	H_EQ(tl_stop(l, op), -ENOENT);
	H_EQ(tl_close(l, h, 0), -ENOENT);
	/* Still open, still ours. */
#ifdef _WIN32
	H_EQ(send(efd, (const char *)&v, sizeof v, 0), (int)sizeof v);
	got = 0;
	H_EQ(recv(efd, (char *)&got, sizeof got, 0), (int)sizeof got);
	H_EQ(got, 5);
#else
	H_EQ(fcntl(efd, F_GETFD), FD_CLOEXEC);
	H_EQ(write(efd, &v, sizeof v), (ssize_t)sizeof v);
#endif
	pfd_close(efd);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: tl_close of a poll handle: Cancelled, then Closed with the close
 * token; two polls of one descriptor (input and output) are independent;
 * a peer's hang-up shows as POLLHUP. */
static void test_poll_close_two_hup(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	pfd sv[2];
#ifdef _WIN32
	H_EQ_FATAL(tcp_pair(sv), 0);
#else
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
#endif
	tl_handle hin, hout;
	tl_op oin, oout;
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(sv[0]), POLLIN | POLLRDHUP, 1, &hin, &oin), 0);
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(sv[0]), POLLOUT, 2, &hout, &oout), 0);
	/* Writable at once; not readable. */
	H_TRUE(h_wait_count(&c, 1, H_WAIT_MS), "no POLLOUT");
	int i = h_find_op(&c.log, oout, 0);
	H_TRUE(i >= 0 && c.log.v[i].result == POLLOUT, "POLLOUT: %lld",
	       i >= 0 ? (long long)c.log.v[i].result : -1ll);
	H_EQ(h_find_op(&c.log, oin, 0), -1);
	H_EQ(tl_close(l, hout, 0x77), 0);
	H_EQ(tl_close(l, hout, 0x77), -EINVAL);
	int t = h_wait_op(&c, oout);
	int cl = h_wait_closed(&c, hout);
	H_TRUE_FATAL(t >= 0 && cl > t, "Cancelled %d then Closed %d", t, cl);
	H_EQ(c.log.v[t].result, -ECANCELED);
	H_EQ(c.log.v[cl].token, 0x77);
	/* The peer goes: input reports the hang-up. */
	pfd_close(sv[1]);
	uint32_t from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness after the hang-up");
	i = h_find_op(&c.log, oin, from);
	H_TRUE(i >= 0 && (c.log.v[i].result & (POLLIN | POLLRDHUP)) && (c.log.v[i].result & POLLHUP),
	       "revents %#llx", i >= 0 ? (long long)c.log.v[i].result : -1ll);
	H_EQ(h_close(&c, hin, 3) >= 0, 1);
	pfd_close(sv[0]);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a descriptor closed before its poll is stopped (the caller's
 * mistake, turnloop/poll.h): the poll reports nothing more, and the stop
 * still ends it (Stopped, then Closed), leaving nothing behind. */
static void test_poll_closed_early(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	pfd s = udp_self();
	H_TRUE_FATAL(s != PFD_BAD, "UDP socket");
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(s), POLLIN, 0x31, &h, &op), 0);
	h_idle(&c, 20);
	pfd_close(s);
	h_idle(&c, 50);
	H_EQ(polls_of(&c, op, 0), 0);
	H_EQ(tl_stop(l, op), 0);
	int term = h_wait_op(&c, op);
	int closed = h_wait_closed(&c, h);
	H_TRUE_FATAL(term >= 0 && closed > term, "Stopped %d then Closed %d", term, closed);
	H_EQ(c.log.v[term].flags & (TL_F_TERMINAL | TL_F_STOPPED), TL_F_TERMINAL | TL_F_STOPPED);
	H_EQ(h_count_op(&c.log, op, 0), 1);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a listening socket polled for input is ready when a connection
 * waits to be accepted; a stream whose peer resets reports POLLHUP and
 * POLLERR (a hang-up and an error, which poll(2) reports unasked). */
static void test_poll_accept_and_reset(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	pfd ls = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	H_TRUE_FATAL(ls != PFD_BAD, "socket");
	tl_addr a;
	socklen_t len = sizeof a.in;
	h_loopback(&a, AF_INET, 0);
	H_EQ_FATAL(bind(ls, &a.sa, len) || getsockname(ls, &a.sa, &len) || listen(ls, 4), 0);
	tl_handle hl, hs;
	tl_op ol, os;
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(ls), POLLIN, 1, &hl, &ol), 0);
	h_idle(&c, 20);
	H_EQ(polls_of(&c, ol, 0), 0);
	pfd cs = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	H_TRUE_FATAL(cs != PFD_BAD, "socket");
	H_EQ_FATAL(connect(cs, &a.sa, len), 0);
	uint32_t from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness of the listener");
	int i = h_find_op(&c.log, ol, from);
	H_TRUE(i >= 0 && c.log.v[i].result == POLLIN, "listener revents %#llx",
	       i >= 0 ? (long long)c.log.v[i].result : -1ll);
	pfd ss = accept(ls, NULL, NULL);
	H_TRUE_FATAL(ss != PFD_BAD, "accept");
	H_TRUE(h_close(&c, hl, 2) >= 0, "Closed");
	H_EQ_FATAL(tl_poll_start(l, PFD_INT(ss), POLLIN, 3, &hs, &os), 0);
	h_idle(&c, 20);
	H_EQ(polls_of(&c, os, 0), 0);
	struct linger lg = {1, 0};
	H_EQ(setsockopt(cs, SOL_SOCKET, SO_LINGER, (const char *)&lg, sizeof lg), 0);
	pfd_close(cs);
	from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness after the reset");
	i = h_find_op(&c.log, os, from);
	H_TRUE(i >= 0 && (c.log.v[i].result & (POLLHUP | POLLERR)) == (POLLHUP | POLLERR),
	       "revents %#llx after the reset", i >= 0 ? (long long)c.log.v[i].result : -1ll);
	H_TRUE(h_close(&c, hs, 4) >= 0, "Closed");
	pfd_close(ss);
	pfd_close(ls);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: bad arguments are refused, and nothing is left behind. */
static void test_poll_refusals(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	tl_handle h;
	tl_op op;
#ifdef _WIN32
	/* p[0] a socket; a socket closed, a file and a pipe refused. */
	pfd s = udp_self();
	H_TRUE_FATAL(s != INVALID_SOCKET, "UDP socket: %d", WSAGetLastError());
	int p[1] = {PFD_INT(s)};
	pfd dead = udp_self();
	H_TRUE_FATAL(dead != INVALID_SOCKET, "UDP socket: %d", WSAGetLastError());
	closesocket(dead);
	H_EQ(tl_poll_start(l, PFD_INT(dead), POLLIN, 0, &h, &op), -EBADF);
	char dir[MAX_PATH], path[MAX_PATH];
	H_TRUE_FATAL(GetTempPathA(sizeof dir, dir) && GetTempFileNameA(dir, "tlp", 0, path), "temp file");
	HANDLE f = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, CREATE_ALWAYS,
			       FILE_ATTRIBUTE_TEMPORARY | FILE_FLAG_DELETE_ON_CLOSE, NULL);
	H_TRUE_FATAL(f != INVALID_HANDLE_VALUE, "CreateFile: %lu", GetLastError());
	H_EQ(tl_poll_start(l, (int)(intptr_t)f, POLLIN, 0, &h, &op), -EPERM);
	CloseHandle(f);
	HANDLE pr, pw;
	H_TRUE_FATAL(CreatePipe(&pr, &pw, NULL, 0), "CreatePipe: %lu", GetLastError());
	H_EQ(tl_poll_start(l, (int)(intptr_t)pr, POLLIN, 0, &h, &op), -ENOTSOCK);
	CloseHandle(pr);
	CloseHandle(pw);
#else
	int p[2];
	H_EQ_FATAL(pipe2(p, O_CLOEXEC), 0);
#endif
	H_EQ(tl_poll_start(l, -1, POLLIN, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], 0, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN | 0x8000, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN, 0, NULL, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN, 0, &h, NULL), -EINVAL);
#ifndef _WIN32
	int dead = dup(p[0]);
	close(dead);
	H_EQ(tl_poll_start(l, dead, POLLIN, 0, &h, &op), -EBADF);
	char path[] = "/tmp/tl-poll-XXXXXX";
	int f = mkstemp(path);
	H_TRUE_FATAL(f >= 0, "mkstemp");
	unlink(path);
	H_EQ(tl_poll_start(l, f, POLLIN, 0, &h, &op), -EPERM);
	close(f);
#endif
	tl_loop_stats st = stats(l);
	H_EQ(st.handles, 0);
	H_EQ(st.ops, 0);
	H_TRUE(!tl_alive(l), "alive after refusals");
#ifdef _WIN32
	closesocket(s);
#else
	close(p[0]);
	close(p[1]);
#endif
	h_end(l, fds);
}

/* ---- the resolver ---- */

#ifdef _WIN32
/* The Windows build's resolver has no c-ares (lib/dns.c without it):
 * tl_dns_open refuses, on every driver. */
static void dns_absent(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle r;
	H_EQ(tl_dns_open(l, NULL, &r), -ENOTSUP);
	h_skip("the Windows build has no c-ares (tl_dns_open: -ENOTSUP checked)");
	h_end(l, fds);
}
#define test_dns_lookups dns_absent
#define test_dns_timeout_cancel dns_absent
#else

struct lookup {
	tl_addr out[TL_RESOLVE_MAX];
	tl_op op;
};

static int resolve(h_ctx *c, tl_handle r, const char *name, int family, struct lookup *lk,
		   tl_completion *res)
{
	memset(lk->out, 0, sizeof lk->out);
	int rc = tl_dns_resolve(c->loop, r, name, family, lk->out, TL_RESOLVE_MAX, 0x5e, &lk->op);
	if (rc)
		return rc;
	int i = h_wait_op(c, lk->op);
	if (i < 0)
		return -1;
	*res = c->log.v[i];
	return 0;
}

static int has_addr(const struct lookup *lk, int n, int fam, const char *text)
{
	uint8_t want[16];
	inet_pton(fam, text, want);
	for (int i = 0; i < n; i++) {
		const tl_addr *a = &lk->out[i];
		if (a->sa.sa_family != fam)
			continue;
		if (fam == AF_INET && !memcmp(&a->in.sin_addr, want, 4))
			return 1;
		if (fam == AF_INET6 && !memcmp(&a->in6.sin6_addr, want, 16))
			return 1;
	}
	return 0;
}

static tl_handle open_resolver(tl_loop *l, uint16_t port, uint32_t timeout_ms, uint32_t tries)
{
	tl_addr srv;
	h_loopback(&srv, AF_INET, port);
	tl_dns_config cfg = {.servers = &srv, .nservers = 1, .timeout_ms = timeout_ms,
			     .tries = tries, .flags = TL_DNS_NO_HOSTS | TL_DNS_NO_SEARCH};
	tl_handle r = TL_HANDLE_NONE;
	H_EQ(tl_dns_open(l, &cfg, &r), 0);
	return r;
}

/* Rule (foreign descriptors, shown with c-ares): lookups of A, AAAA and
 * both are answered through the loop by a DNS server on loopback (which
 * saw the queries: no other source answered), an unknown name is -ENOENT,
 * a known name without the family asked is -ENOENT; closing the resolver
 * delivers Closed and leaves no descriptor behind. */
static void test_dns_lookups(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle r;
	if (!(tl_loop_caps(l) & TL_CAP_POLL)) {
		H_EQ(tl_dns_open(l, NULL, &r), -ENOTSUP);
		h_skip("driver %s lacks TL_CAP_POLL", tl_loop_driver(l));
		h_end(l, fds);
		return;
	}
	struct dnsr d;
	H_EQ_FATAL(dnsr_start(&d, 0), 0);
	h_ctx c;
	h_ctx_init(&c, l);
	r = open_resolver(l, d.port, 500, 2);
	struct lookup lk;
	tl_completion res;
	H_EQ(resolve(&c, r, "one.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.kind, TL_K_RESOLVE);
	H_EQ(res.result, 1);
	H_EQ(res.u.pool.value, 1);
	H_TRUE(res.u.pool.ptr == lk.out, "ptr");
	H_TRUE(has_addr(&lk, 1, AF_INET, "192.0.2.1"), "192.0.2.1");
	H_EQ(resolve(&c, r, "TWO.tl.test", AF_UNSPEC, &lk, &res), 0);
	H_EQ(res.result, 2);
	H_TRUE(has_addr(&lk, 2, AF_INET, "192.0.2.2") && has_addr(&lk, 2, AF_INET6, "2001:db8::2"),
	       "both families of two.tl.test");
	H_EQ(resolve(&c, r, "six.tl.test", AF_INET6, &lk, &res), 0);
	H_EQ(res.result, 1);
	H_TRUE(has_addr(&lk, 1, AF_INET6, "2001:db8::6"), "2001:db8::6");
	H_EQ(resolve(&c, r, "six.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.result, -ENOENT);
	H_EQ(resolve(&c, r, "nope.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.result, -ENOENT);
	H_TRUE(atomic_load(&d.queries) >= 6, "the responder saw %u queries",
	       atomic_load(&d.queries));
	/* Refusals. */
	tl_op op;
	H_EQ(tl_dns_resolve(l, r, NULL, AF_INET, lk.out, 1, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, r, "x", AF_UNIX, lk.out, 1, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, r, "x", AF_INET, lk.out, 0, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, (tl_handle){r.v + 1}, "x", AF_INET, lk.out, 1, 0, &op), -ENOENT);
	H_TRUE(h_close(&c, r, 9) >= 0, "Closed");
	dnsr_stop(&d);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a server that never answers: the lookup ends -ETIMEDOUT after its
 * tries (the timeout runs as a loop deadline: the loop does not spin); a
 * lookup cancelled while waiting ends -ECANCELED and its out is not
 * written; closing the resolver with a lookup in flight cancels it. */
static void test_dns_timeout_cancel(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	struct dnsr d;
	H_EQ_FATAL(dnsr_start(&d, 1), 0);
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle r = open_resolver(l, d.port, 100, 1);
	struct lookup lk;
	tl_completion res;
	uint64_t t0 = h_wall_ns();
	tl_loop_stats s0 = stats(l);
	H_EQ(resolve(&c, r, "one.tl.test", AF_INET, &lk, &res), 0);
	uint64_t took = h_wall_ns() - t0;
	tl_loop_stats s1 = stats(l);
	H_EQ(res.result, -ETIMEDOUT);
	H_TRUE(took >= 80 * H_MS, "timed out after %llu ms", (unsigned long long)(took / H_MS));
	H_TRUE(s1.turns - s0.turns < 100, "%llu turns to time out: the loop spun",
	       (unsigned long long)(s1.turns - s0.turns));
	/* Cancel one in flight. */
	tl_addr sentinel;
	memset(&sentinel, 0xab, sizeof sentinel);
	lk.out[0] = sentinel;
	tl_op op;
	H_EQ(tl_dns_resolve(l, r, "one.tl.test", AF_INET, lk.out, 1, 7, &op), 0);
	h_turn(&c, 0);
	H_EQ(tl_cancel(l, op), 0);
	H_EQ(tl_cancel(l, op), -EALREADY);
	int i = h_wait_op(&c, op);
	H_TRUE_FATAL(i >= 0, "no terminal");
	H_EQ(c.log.v[i].result, -ECANCELED);
	h_idle(&c, 300); /* c-ares gives up on it meanwhile: nothing more comes */
	H_EQ(h_count_op(&c.log, op, 0), 1);
	H_TRUE(!memcmp(&lk.out[0], &sentinel, sizeof sentinel), "out written after the cancel");
	/* Close with one in flight. */
	H_EQ(tl_dns_resolve(l, r, "two.tl.test", AF_INET, lk.out, 1, 8, &op), 0);
	h_turn(&c, 0);
	H_EQ(tl_close(l, r, 4), 0);
	i = h_wait_op(&c, op);
	int cl = h_wait_closed(&c, r);
	H_TRUE(i >= 0 && cl > i, "lookup %d before Closed %d", i, cl);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	dnsr_stop(&d);
	h_ctx_fini(&c);
	h_end(l, fds);
}

#endif /* !_WIN32 */

const struct test_def tl_contract_poll[] = {
	T("5 foreign descriptors", test_poll_level),
	T("5 foreign descriptors", test_poll_close_two_hup),
	T("5 foreign descriptors", test_poll_refusals),
	T("5 foreign descriptors", test_poll_closed_early),
	T("5 foreign descriptors", test_poll_accept_and_reset),
	T("5 foreign descriptors", test_dns_lookups),
	T("5 foreign descriptors", test_dns_timeout_cancel),
	{ NULL, NULL, NULL },
};
