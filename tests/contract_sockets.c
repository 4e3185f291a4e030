/* tests/contract_sockets.c: contract rules of socket control (4.8): typed options, listener and connect setup, peer addresses, abortive close, the OS descriptor. */
#include "contract.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#ifdef _WIN32
/* Winsock's names (turnloop/platform.h includes its headers; the
 * platform layer gives the keep-alive timing options' values, which
 * mingw-w64 10 lacks). Windows has no counterpart of TCP_USER_TIMEOUT
 * (TCP_MAXRT counts seconds), SO_MARK or TCP_DEFER_ACCEPT: level 0, never
 * asked (the IOCP driver refuses them). */
#include "os.h"
#ifndef TCP_FASTOPEN
#define TCP_FASTOPEN 15
#endif
#define TCP_USER_TIMEOUT 0
#define SO_MARK 0
#define TCP_DEFER_ACCEPT 0
#define IP_BIND_ADDRESS_NO_PORT 0
#define IP_FREEBIND 0
#define IP_TRANSPARENT 0
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#endif
#include <CUnit/CUnit.h>

/*
 * Every option is set through the loop and read back with tl_sockopt_get on
 * every driver; where handles are OS sockets (TL_CAP_OS) the kernel's own
 * view is read too, with getsockopt(2) on tl_handle_fd, so a typed call that
 * only pretended would fail. The simulation driver keeps and reports the
 * values as Linux does; what it cannot model (a kernel to ask, addresses
 * that are not local, capabilities) is recorded as a skip.
 */

/* ---- Helpers ---- */

static int os_sockets(tl_loop *l)
{
	return (tl_loop_caps(l) & TL_CAP_OS) != 0;
}

/* getsockopt(2) of an int option on h's descriptor: the kernel's view. */
static int64_t kget(tl_loop *l, tl_handle h, int level, int name)
{
	int fd = tl_handle_fd(l, h);
	H_TRUE_FATAL(fd >= 0, "tl_handle_fd: %d%s", fd, h_errname(fd));
	int v = 0;
	socklen_t len = sizeof v;
#ifdef _WIN32
	H_TRUE_FATAL(name != 0, "option (level %d) has no Windows counterpart", level);
	H_EQ_FATAL(getsockopt((SOCKET)(intptr_t)fd, level, name, (char *)&v, &len), 0);
#else
	H_EQ_FATAL(getsockopt(fd, level, name, &v, &len), 0);
#endif
	return level == SOL_SOCKET && name == SO_MARK ? (int64_t)(uint32_t)v : (int64_t)v;
}

/* Capability bit cap in the effective set of this process. */
static int has_cap(int cap)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long eff = 0;
	int found = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1) {
			found = 1;
			break;
		}
	fclose(f);
	return found && ((eff >> cap) & 1);
}
#define CAP_NET_ADMIN_BIT 12
#define CAP_NET_RAW_BIT 13

/* The IOCP driver (Windows): an option Windows lacks is refused with
 * -ENOTSUP (docs/WINDOWS.md), and a buffer size reads back as set. */
static int iocp(tl_loop *l)
{
	return strcmp(tl_loop_driver(l), "iocp") == 0;
}

/* A buffer size set to set as the OS reports it: Linux (and the simulation
 * driver, which reports as Linux does) twice the size, Windows the size. */
static int64_t bufsize(tl_loop *l, int64_t set)
{
	return iocp(l) ? set : 2 * set;
}

/* On the IOCP driver, opt (which Windows lacks) is refused on h, set and
 * read, with -ENOTSUP: checked, a skip recorded, 1. Elsewhere 0. */
static int win_lacks(tl_loop *l, tl_handle h, int opt, int64_t set, const char *why)
{
	if (!iocp(l))
		return 0;
	int64_t v = -12345;
	H_EQ(tl_sockopt_set(l, h, opt, set), -ENOTSUP);
	H_EQ(tl_sockopt_get(l, h, opt, &v), -ENOTSUP);
	H_EQ(v, -12345);
	h_skip("%s: no Windows counterpart (-ENOTSUP checked)", why);
	return 1;
}

/* Options wine 8's setsockopt lacks and Windows has (TCP_KEEPIDLE,
 * TCP_KEEPINTVL and TCP_KEEPCNT since Windows 10 1709; IPV6_TCLASS): on
 * the IOCP driver under wine only, 1 (docs/WINDOWS.md). */
static int wine_refuses(tl_loop *l, int opt, int v6)
{
	if (!iocp(l) || !h_under_wine())
		return 0;
	return opt == TL_SO_KEEPIDLE || opt == TL_SO_KEEPINTVL || opt == TL_SO_KEEPCNT ||
	       (opt == TL_SO_TCLASS && v6);
}

static const char *opt_name(int opt)
{
	switch (opt) {
	case TL_SO_KEEPIDLE: return "TCP_KEEPIDLE";
	case TL_SO_KEEPINTVL: return "TCP_KEEPINTVL";
	case TL_SO_KEEPCNT: return "TCP_KEEPCNT";
	case TL_SO_TCLASS: return "IPV6_TCLASS";
	}
	return "an option";
}

/* The refusal wine gives for such an option (set, or read if set < 0):
 * checked, and a skip recorded. */
static void wine_refusal(tl_loop *l, tl_handle h, int opt, int64_t set)
{
	int64_t v = -12345;
	if (set >= 0)
		H_EQ(tl_sockopt_set(l, h, opt, set), -ENOPROTOOPT);
	else
		H_EQ(tl_sockopt_get(l, h, opt, &v), -ENOPROTOOPT);
	h_skip("%s: wine 8's setsockopt lacks it (-ENOPROTOOPT checked); Windows has it",
	       opt_name(opt));
}

/* so[0..n) without the options wine lacks (a skip recorded for each), in
 * out; the count kept. */
static size_t wine_filter(tl_loop *l, const tl_sockopt_val *so, size_t n, int v6,
			  tl_sockopt_val *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (wine_refuses(l, so[i].opt, v6))
			h_skip("%s left out of the list: wine 8 lacks it; Windows has it",
			       opt_name(so[i].opt));
		else
			out[k++] = so[i];
	}
	return k;
}

static int64_t get_ok(tl_loop *l, tl_handle h, int opt)
{
	int64_t v = -12345;
	H_EQ(tl_sockopt_get(l, h, opt, &v), 0);
	return v;
}

/* Where an option lives in the kernel, for the check through the fd. */
struct kwhere {
	int level, name;
};

static struct kwhere kwhere(int opt, int v6)
{
	switch (opt) {
	case TL_SO_NODELAY: return (struct kwhere){IPPROTO_TCP, TCP_NODELAY};
	case TL_SO_KEEPALIVE: return (struct kwhere){SOL_SOCKET, SO_KEEPALIVE};
	case TL_SO_KEEPIDLE: return (struct kwhere){IPPROTO_TCP, TCP_KEEPIDLE};
	case TL_SO_KEEPINTVL: return (struct kwhere){IPPROTO_TCP, TCP_KEEPINTVL};
	case TL_SO_KEEPCNT: return (struct kwhere){IPPROTO_TCP, TCP_KEEPCNT};
	case TL_SO_USER_TIMEOUT: return (struct kwhere){IPPROTO_TCP, TCP_USER_TIMEOUT};
	case TL_SO_RCVBUF: return (struct kwhere){SOL_SOCKET, SO_RCVBUF};
	case TL_SO_SNDBUF: return (struct kwhere){SOL_SOCKET, SO_SNDBUF};
	case TL_SO_MARK: return (struct kwhere){SOL_SOCKET, SO_MARK};
	case TL_SO_TCLASS:
		return v6 ? (struct kwhere){IPPROTO_IPV6, IPV6_TCLASS}
			  : (struct kwhere){IPPROTO_IP, IP_TOS};
	case TL_SO_DEFER_ACCEPT: return (struct kwhere){IPPROTO_TCP, TCP_DEFER_ACCEPT};
	case TL_SO_FASTOPEN: return (struct kwhere){IPPROTO_TCP, TCP_FASTOPEN};
	}
	return (struct kwhere){0, 0};
}

/* h reports want for opt, through the loop and (OS sockets) the kernel. */
static void expect_opt(tl_loop *l, tl_handle h, int opt, int v6, int64_t want, const char *who)
{
	if (wine_refuses(l, opt, v6)) {
		wine_refusal(l, h, opt, -1);
		return;
	}
	int64_t v = get_ok(l, h, opt);
	H_TRUE(v == want, "%s: option %d reads %lld, want %lld", who, opt, (long long)v,
	       (long long)want);
	if (os_sockets(l)) {
		struct kwhere w = kwhere(opt, v6);
		int64_t k = kget(l, h, w.level, w.name);
		H_TRUE(k == want, "%s: option %d is %lld in the kernel, want %lld", who, opt,
		       (long long)k, (long long)want);
		/* A dual-stack socket carries the class to IPv4 peers too. */
		if (opt == TL_SO_TCLASS && v6)
			H_EQ(kget(l, h, IPPROTO_IP, IP_TOS), want);
	}
}

/* Set opt to set and expect it to read want. */
static void set_expect(tl_loop *l, tl_handle h, int opt, int v6, int64_t set, int64_t want,
		       const char *who)
{
	if (wine_refuses(l, opt, v6)) {
		wine_refusal(l, h, opt, set);
		return;
	}
	int rc = tl_sockopt_set(l, h, opt, set);
	H_TRUE(rc == 0, "%s: set option %d to %lld: %d%s", who, opt, (long long)set, rc,
	       h_errname(rc));
	if (rc == 0)
		expect_opt(l, h, opt, v6, want, who);
}

/* SO_MARK needs CAP_NET_ADMIN (or CAP_NET_RAW since Linux 5.17) on a kernel
 * socket; the simulation driver has no capabilities and keeps it. */
static void mark_case(tl_loop *l, tl_handle h, int v6, const char *who)
{
	if (win_lacks(l, h, TL_SO_MARK, 0x1234, "SO_MARK"))
		return;
	int rc = tl_sockopt_set(l, h, TL_SO_MARK, 0x1234);
	if (rc == -EPERM && os_sockets(l) && !has_cap(CAP_NET_ADMIN_BIT)) {
		h_skip("SO_MARK needs CAP_NET_ADMIN, which this process lacks (-EPERM seen)");
		return;
	}
	H_TRUE(rc == 0, "%s: set SO_MARK: %d%s", who, rc, h_errname(rc));
	if (rc == 0) {
		if (os_sockets(l))
			H_TRUE(has_cap(CAP_NET_ADMIN_BIT) || has_cap(CAP_NET_RAW_BIT),
			       "SO_MARK set without either capability");
		expect_opt(l, h, TL_SO_MARK, v6, 0x1234, who);
		set_expect(l, h, TL_SO_MARK, v6, UINT32_MAX, UINT32_MAX, who);
		set_expect(l, h, TL_SO_MARK, v6, 0, 0, who);
	}
}

/* The options of a TCP stream, one after the other (contract 4.8). */
static void tcp_stream_cases(tl_loop *l, tl_handle h, int v6, const char *who)
{
	/* The loop's defaults: NODELAY on, keepalive off. */
	expect_opt(l, h, TL_SO_NODELAY, v6, 1, who);
	expect_opt(l, h, TL_SO_KEEPALIVE, v6, 0, who);
	/* NODELAY turned off and on again. */
	set_expect(l, h, TL_SO_NODELAY, v6, 0, 0, who);
	set_expect(l, h, TL_SO_NODELAY, v6, 1, 1, who);
	set_expect(l, h, TL_SO_KEEPALIVE, v6, 1, 1, who);
	set_expect(l, h, TL_SO_KEEPIDLE, v6, 30, 30, who);
	set_expect(l, h, TL_SO_KEEPINTVL, v6, 5, 5, who);
	set_expect(l, h, TL_SO_KEEPCNT, v6, 4, 4, who);
	int no_user_timeout = win_lacks(l, h, TL_SO_USER_TIMEOUT, 15000,
					"TCP_USER_TIMEOUT (TCP_MAXRT counts seconds)");
	if (!no_user_timeout)
		set_expect(l, h, TL_SO_USER_TIMEOUT, v6, 15000, 15000, who);
	/* Linux reports twice the buffer size set, Windows the size. */
	set_expect(l, h, TL_SO_RCVBUF, v6, 8192, bufsize(l, 8192), who);
	set_expect(l, h, TL_SO_SNDBUF, v6, 8192, bufsize(l, 8192), who);
	set_expect(l, h, TL_SO_TCLASS, v6, 0x28, 0x28, who); /* DSCP AF11 */
	set_expect(l, h, TL_SO_TCLASS, v6, 0, 0, who);
	set_expect(l, h, TL_SO_KEEPALIVE, v6, 0, 0, who);
	if (!no_user_timeout)
		set_expect(l, h, TL_SO_USER_TIMEOUT, v6, 0, 0, who);
	mark_case(l, h, v6, who);
}

/* The completion of op in c's log (after a wait): its index, or -1. */
static int wait_ok(h_ctx *c, tl_op op)
{
	int i = h_wait_op(c, op);
	if (i >= 0)
		H_TRUE(c->log.v[i].result >= 0, "op ended with %lld%s", (long long)c->log.v[i].result,
		       h_errname(c->log.v[i].result));
	return i >= 0 && c->log.v[i].result >= 0 ? i : -1;
}

/* A TCP pair on one loop with the listener's and connect's options given:
 * *srv accepted, *cli connected, *peer the accept's peer address. 0 or -1
 * (failures recorded). The listener is closed before returning. */
static int pair_with(h_ctx *c, int family, const tl_listen_opts *lo, const tl_connect_opts *co,
		     tl_handle *srv, tl_handle *cli, tl_addr *peer)
{
	tl_handle lis;
	tl_addr la;
	tl_op aop, cop;
	int rc = h_listen(c, family, lo, &lis, &la);
	H_EQ(rc, 0);
	if (rc != 0)
		return -1;
	H_EQ_FATAL(tl_accept(c->loop, lis, 1, &aop), 0);
	rc = tl_tcp_connect_opts(c->loop, &la, co, 0, 2, cli, &cop);
	H_EQ(rc, 0);
	int ok = -1;
	if (rc == 0) {
		int ia = wait_ok(c, aop), ic = wait_ok(c, cop);
		if (ia >= 0 && ic >= 0) {
			*srv = c->log.v[ia].u.accept.conn;
			if (peer)
				*peer = c->log.v[ia].u.accept.peer;
			ok = 0;
		} else {
			if (ia >= 0)
				h_close(c, c->log.v[ia].u.accept.conn, 3);
			h_close(c, *cli, 4);
		}
	}
	h_close(c, lis, 5);
	return ok;
}

/* A Unix-domain pair at dir/sock (dir made here). 0 or -1. */
static int unix_pair(h_ctx *c, char *dir, char *path, size_t plen, tl_handle *srv,
		     tl_handle *cli)
{
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(path, plen, "%s/sock", dir);
	tl_handle lis;
	tl_op aop, cop;
	H_EQ_FATAL(tl_unix_listen(c->loop, path, NULL, &lis), 0);
	H_EQ_FATAL(tl_accept(c->loop, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_unix_connect(c->loop, path, 0, 2, cli, &cop), 0);
	int ia = wait_ok(c, aop), ic = wait_ok(c, cop);
	h_close(c, lis, 5);
	if (ia < 0 || ic < 0)
		return -1;
	*srv = c->log.v[ia].u.accept.conn;
	return 0;
}

static void unix_cleanup(const char *dir, const char *path)
{
	if (unlink(path) != 0)
		H_EQ(errno, ENOENT); /* the simulation driver makes no file */
	H_EQ(rmdir(dir), 0);
}

static void addr_of(tl_addr *a, const char *ip, uint16_t port)
{
	H_EQ_FATAL(tl_addr_parse(a, ip, port), 0);
}

static int same_ip(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET6)
		return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
	return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
}

static uint16_t port_of(const tl_addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

static const char *ip_text(const tl_addr *a, char *buf, size_t n)
{
	const void *p = a->sa.sa_family == AF_INET6 ? (const void *)&a->in6.sin6_addr
						    : (const void *)&a->in.sin_addr;
	if (!inet_ntop(a->sa.sa_family, p, buf, (socklen_t)n))
		snprintf(buf, n, "(family %d)", a->sa.sa_family);
	return buf;
}

/* ---- Typed options on streams ---- */

/* Rule 4.8: every stream option set on a connected and on an accepted TCP
 * stream reads back as Linux reports it (buffer sizes doubled), through the
 * loop and in the kernel; NODELAY starts on and can be turned off and on. */
static void stream_options(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle srv, cli;
	if (!h_need_cap(l, TL_CAP_TCP) || (family == AF_INET6 && !h_need_ipv6()))
		goto out;
	H_EQ_FATAL(pair_with(&c, family, NULL, NULL, &srv, &cli, NULL), 0);
	tcp_stream_cases(l, cli, family == AF_INET6, "connected");
	tcp_stream_cases(l, srv, family == AF_INET6, "accepted");
	/* The stream still works with its options changed. */
	char got[4] = {0};
	H_EQ(h_write_all(&c, cli, "abc", 3), 3);
	H_EQ(h_read_exact(&c, srv, got, 3, NULL), 3);
	H_EQ(memcmp(got, "abc", 3), 0);
	h_close(&c, srv, 6);
	h_close(&c, cli, 7);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_sockopt_stream_v4(void) { stream_options(AF_INET); }
static void test_sockopt_stream_v6(void) { stream_options(AF_INET6); }

/* Rule 4.8: Unix-domain streams take the buffer sizes only; UDP sockets the
 * buffer sizes, mark and traffic class; each reads back (doubled buffers). */
static void test_sockopt_unix_and_udp(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	char dir[] = "/tmp/tl-sockopt-XXXXXX", path[64];
	tl_handle srv, cli, u;
	/* On IOCP, without Unix-domain sockets (a skip), the UDP half still
	 * runs; a driver without either (DPDK: no socket options at all) skips
	 * the test as before. */
	int unix_ok = h_need_cap(l, TL_CAP_UNIX);
	if (!unix_ok && !iocp(l))
		goto out;
	if (!h_need_cap(l, TL_CAP_UDP))
		goto out;
	if (!unix_ok)
		goto udp;
	H_EQ_FATAL(unix_pair(&c, dir, path, sizeof path, &srv, &cli), 0);
	tl_handle us[2] = {srv, cli};
	for (int k = 0; k < 2; k++) {
		const char *who = k ? "unix connected" : "unix accepted";
		set_expect(l, us[k], TL_SO_RCVBUF, 0, 8192, bufsize(l, 8192), who);
		set_expect(l, us[k], TL_SO_SNDBUF, 0, 8192, bufsize(l, 8192), who);
		static const int no[] = {TL_SO_NODELAY, TL_SO_KEEPALIVE, TL_SO_KEEPIDLE,
					 TL_SO_USER_TIMEOUT, TL_SO_MARK, TL_SO_TCLASS,
					 TL_SO_DEFER_ACCEPT, TL_SO_FASTOPEN};
		for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
			int64_t v;
			H_EQ(tl_sockopt_set(l, us[k], no[i], 1), -EINVAL);
			H_EQ(tl_sockopt_get(l, us[k], no[i], &v), -EINVAL);
		}
	}
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
	unix_cleanup(dir, path);

udp:;
	tl_addr a;
	h_loopback(&a, AF_INET, 0);
	H_EQ_FATAL(tl_udp_bind(l, &a, &u), 0);
	set_expect(l, u, TL_SO_RCVBUF, 0, 8192, bufsize(l, 8192), "udp");
	set_expect(l, u, TL_SO_SNDBUF, 0, 8192, bufsize(l, 8192), "udp");
	set_expect(l, u, TL_SO_TCLASS, 0, 0xb8, 0xb8, "udp"); /* DSCP EF */
	mark_case(l, u, 0, "udp");
	static const int uno[] = {TL_SO_NODELAY, TL_SO_KEEPALIVE, TL_SO_KEEPCNT,
				  TL_SO_USER_TIMEOUT, TL_SO_DEFER_ACCEPT, TL_SO_FASTOPEN};
	for (size_t i = 0; i < sizeof uno / sizeof uno[0]; i++)
		H_EQ(tl_sockopt_set(l, u, uno[i], 1), -EINVAL);
	h_close(&c, u, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.8 and the error table: options a handle does not take, unknown
 * options, values out of range, closing, stale and foreign handles, and bad
 * option lists in listen and connect setups are refused with their codes,
 * and a refused setup leaves nothing behind (h_end). */
static void test_sockopt_refused(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop, *other = h_loop();
	tl_handle srv, cli, lis, tm, otm;
	tl_op top, otop;
	tl_addr la;
	int64_t v;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	H_EQ_FATAL(pair_with(&c, AF_INET, NULL, NULL, &srv, &cli, NULL), 0);
	/* Unknown options. */
	static const int unknown[] = {0, -1, TL_SO_COUNT_, 999};
	for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
		H_EQ(tl_sockopt_set(l, cli, unknown[i], 1), -EINVAL);
		H_EQ(tl_sockopt_get(l, cli, unknown[i], &v), -EINVAL);
	}
	/* Listener options on a stream. */
	H_EQ(tl_sockopt_set(l, cli, TL_SO_DEFER_ACCEPT, 1), -EINVAL);
	H_EQ(tl_sockopt_set(l, srv, TL_SO_FASTOPEN, 1), -EINVAL);
	H_EQ(tl_sockopt_get(l, srv, TL_SO_FASTOPEN, &v), -EINVAL);
	/* Values out of range, each at both edges. */
	static const struct { int opt; int64_t v; } bad[] = {
		{TL_SO_NODELAY, 2},         {TL_SO_NODELAY, -1},
		{TL_SO_KEEPALIVE, 2},       {TL_SO_KEEPIDLE, 0},
		{TL_SO_KEEPIDLE, 32768},    {TL_SO_KEEPINTVL, 0},
		{TL_SO_KEEPINTVL, 32768},   {TL_SO_KEEPCNT, 0},
		{TL_SO_KEEPCNT, 128},       {TL_SO_USER_TIMEOUT, -1},
		{TL_SO_USER_TIMEOUT, (int64_t)INT32_MAX + 1},
		{TL_SO_RCVBUF, 0},          {TL_SO_RCVBUF, 1 << 30},
		{TL_SO_SNDBUF, -5},         {TL_SO_MARK, -1},
		{TL_SO_MARK, (int64_t)UINT32_MAX + 1},
		{TL_SO_TCLASS, 256},        {TL_SO_TCLASS, -4},
		{TL_SO_TCLASS, 0x29},       {TL_SO_TCLASS, 0x2a}, /* ECN bits */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = tl_sockopt_set(l, cli, bad[i].opt, bad[i].v);
		H_TRUE(rc == -EINVAL, "option %d value %lld: %d%s", bad[i].opt,
		       (long long)bad[i].v, rc, h_errname(rc));
	}
	/* Nothing changed: NODELAY is still on. */
	expect_opt(l, cli, TL_SO_NODELAY, 0, 1, "after refusals");
	H_EQ(tl_sockopt_get(l, cli, TL_SO_NODELAY, NULL), -EINVAL);
	/* A timer takes no option; a foreign handle is unknown here. */
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 9, &tm, &top), 0);
	H_EQ(tl_sockopt_set(l, tm, TL_SO_NODELAY, 1), -EINVAL);
	H_EQ(tl_sockopt_get(l, tm, TL_SO_RCVBUF, &v), -EINVAL);
	H_EQ_FATAL(tl_timer_start(other, tl_now(other) + 3600000 * H_MS, 0, 9, &otm, &otop), 0);
	H_EQ(tl_sockopt_set(l, otm, TL_SO_NODELAY, 1), -ENOENT);
	H_EQ(tl_sockopt_set(l, (tl_handle){srv.v ^ (1ull << 40)}, TL_SO_NODELAY, 1), -ENOENT);
	H_EQ(tl_close(other, otm, 0), 0);
	h_close(&c, tm, 10);
	/* Closing: no more changes, reads until Closed; stale after it. */
	H_EQ(tl_close(l, srv, 11), 0);
	H_EQ(tl_sockopt_set(l, srv, TL_SO_NODELAY, 0), -EINVAL);
	expect_opt(l, srv, TL_SO_NODELAY, 0, 1, "closing");
	H_TRUE(h_wait_closed(&c, srv) >= 0, "no Closed");
	H_EQ(tl_sockopt_set(l, srv, TL_SO_NODELAY, 0), -ENOENT);
	H_EQ(tl_sockopt_get(l, srv, TL_SO_NODELAY, &v), -ENOENT);
	h_close(&c, cli, 12);

	/* Listener setups. */
	tl_addr lo;
	h_loopback(&lo, AF_INET, 0);
	tl_sockopt_val ok1 = {TL_SO_NODELAY, 0}, badv = {TL_SO_KEEPCNT, 500},
		       streamonly = {TL_SO_DEFER_ACCEPT, 1}, list[TL_SOCKOPTS_MAX + 1];
	for (int i = 0; i <= TL_SOCKOPTS_MAX; i++)
		list[i] = ok1;
	const tl_listen_opts lbad[] = {
		{.sockopts = &badv, .nsockopts = 1},
		{.sockopts = list, .nsockopts = TL_SOCKOPTS_MAX + 1},
		{.sockopts = NULL, .nsockopts = 1},
		{.defer_accept = -1},
		{.fastopen = -1},
		{.sockopts = &(tl_sockopt_val){0, 1}, .nsockopts = 1},
	};
	for (size_t i = 0; i < sizeof lbad / sizeof lbad[0]; i++) {
		int rc = tl_tcp_listen(l, &lo, &lbad[i], &lis);
		H_TRUE(rc == -EINVAL, "listen setup %zu: %d%s", i, rc, h_errname(rc));
	}
	/* A full list of the maximum length is fine. */
	tl_listen_opts lfull = {.sockopts = list, .nsockopts = TL_SOCKOPTS_MAX};
	H_EQ(tl_tcp_listen(l, &lo, &lfull, &lis), 0);
	H_EQ(tl_local_addr(l, lis, &la), 0);
	/* A Unix-domain listener takes no option at all. */
	char upath[64];
	snprintf(upath, sizeof upath, "/tmp/tl-sockopt-refused-%d", (int)getpid());
	tl_handle ul;
	H_EQ(tl_unix_listen(l, upath, &(tl_listen_opts){.defer_accept = 1}, &ul), -EINVAL);
	H_EQ(tl_unix_listen(l, upath, &(tl_listen_opts){.fastopen = 1}, &ul), -EINVAL);
	H_EQ(tl_unix_listen(l, upath, &(tl_listen_opts){.sockopts = &ok1, .nsockopts = 1}, &ul),
	     -EINVAL);
	if (tl_loop_caps(l) & TL_CAP_UNIX) {
		H_EQ_FATAL(tl_unix_listen(l, upath, NULL, &ul), 0);
		H_EQ(tl_sockopt_set(l, ul, TL_SO_RCVBUF, 8192), -EINVAL);
		H_EQ(tl_sockopt_set(l, ul, TL_SO_DEFER_ACCEPT, 1), -EINVAL);
		h_close(&c, ul, 13);
		unlink(upath);
	}

	/* Connect setups. */
	tl_addr src6, src4;
	h_loopback(&src6, AF_INET6, 0);
	h_loopback(&src4, AF_INET, 0);
	const tl_connect_opts cbad[] = {
		{.source = src6},                    /* another family */
		{.bind_no_port = 1},                 /* no source */
		{.freebind = 1},
		{.transparent = 1},
		{.sockopts = &streamonly, .nsockopts = 1}, /* a listener's option */
		{.sockopts = &badv, .nsockopts = 1},
		{.sockopts = list, .nsockopts = TL_SOCKOPTS_MAX + 1},
		{.source = src4, .sockopts = NULL, .nsockopts = 2},
	};
	for (size_t i = 0; i < sizeof cbad / sizeof cbad[0]; i++) {
		tl_handle h = TL_HANDLE_NONE;
		tl_op op = TL_OP_NONE;
		int rc = tl_tcp_connect_opts(l, &la, &cbad[i], 0, 14, &h, &op);
		H_TRUE(rc == -EINVAL, "connect setup %zu: %d%s", i, rc, h_errname(rc));
		H_EQ(h.v, 0);
	}
	h_close(&c, lis, 15);
out:
	h_ctx_fini(&c);
	h_drain_close(other);
	h_end(l, fds);
}

/* ---- Listeners ---- */

/* Rule 4.8 on listeners: TCP_DEFER_ACCEPT and TCP_FASTOPEN from
 * tl_listen_opts are set before listen(2) and read back (DEFER_ACCEPT
 * rounded up to Linux's retransmission schedule: 5 s reads 7), can be
 * changed on the listening socket, and a listener's option list reaches the
 * streams it accepts (NODELAY off, keepalive on, a receive buffer), while a
 * plain listener's accepted streams have NODELAY on. */
static void test_listener_options(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, srv, cli;
	tl_addr la;
	tl_listen_opts lo = {.defer_accept = 5, .fastopen = 16};
	if (iocp(l)) {
		/* Neither has a Windows counterpart: refused at the setup and
		 * on a listening socket; the inheritance below still runs. */
		H_EQ(h_listen(&c, AF_INET, &(tl_listen_opts){.defer_accept = 5}, &lis, &la), -ENOTSUP);
		H_EQ(h_listen(&c, AF_INET, &(tl_listen_opts){.fastopen = 16}, &lis, &la), -ENOTSUP);
		H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
		expect_opt(l, lis, TL_SO_NODELAY, 0, 1, "listener");
		win_lacks(l, lis, TL_SO_DEFER_ACCEPT, 1, "TCP_DEFER_ACCEPT");
		win_lacks(l, lis, TL_SO_FASTOPEN, 8, "TCP_FASTOPEN on a listener");
		h_close(&c, lis, 1);
		goto inherit;
	}
	H_EQ_FATAL(h_listen(&c, AF_INET, &lo, &lis, &la), 0);
	expect_opt(l, lis, TL_SO_DEFER_ACCEPT, 0, 7, "listener");
	expect_opt(l, lis, TL_SO_FASTOPEN, 0, 16, "listener");
	expect_opt(l, lis, TL_SO_NODELAY, 0, 1, "listener");
	set_expect(l, lis, TL_SO_DEFER_ACCEPT, 0, 1, 1, "listening");
	set_expect(l, lis, TL_SO_DEFER_ACCEPT, 0, 3, 3, "listening");
	set_expect(l, lis, TL_SO_DEFER_ACCEPT, 0, 0, 0, "listening");
	set_expect(l, lis, TL_SO_FASTOPEN, 0, 8, 8, "listening");
	h_close(&c, lis, 1);

inherit:;
	/* Accepted streams inherit the listener's options. */
	const tl_sockopt_val so[] = {
		{TL_SO_NODELAY, 0}, {TL_SO_KEEPALIVE, 1}, {TL_SO_KEEPIDLE, 40},
		{TL_SO_RCVBUF, 16384}, {TL_SO_TCLASS, 0x20},
	};
	tl_sockopt_val so_run[sizeof so / sizeof so[0]];
	tl_listen_opts lo2 = {.sockopts = so_run,
			      .nsockopts = wine_filter(l, so, sizeof so / sizeof so[0], 0, so_run)};
	H_EQ_FATAL(pair_with(&c, AF_INET, &lo2, NULL, &srv, &cli, NULL), 0);
	expect_opt(l, srv, TL_SO_NODELAY, 0, 0, "inherited");
	expect_opt(l, srv, TL_SO_KEEPALIVE, 0, 1, "inherited");
	expect_opt(l, srv, TL_SO_KEEPIDLE, 0, 40, "inherited");
	if (iocp(l) && h_under_wine() && get_ok(l, srv, TL_SO_RCVBUF) != bufsize(l, 16384))
		h_skip("the listener's SO_RCVBUF on an accepted socket: wine 8 reports its "
		       "default after SO_UPDATE_ACCEPT_CONTEXT; Windows passes it on");
	else
		expect_opt(l, srv, TL_SO_RCVBUF, 0, bufsize(l, 16384), "inherited");
	expect_opt(l, srv, TL_SO_TCLASS, 0, 0x20, "inherited");
	/* The connecting side kept the defaults. */
	expect_opt(l, cli, TL_SO_NODELAY, 0, 1, "connected");
	expect_opt(l, cli, TL_SO_KEEPALIVE, 0, 0, "connected");
	h_close(&c, srv, 2);
	h_close(&c, cli, 3);

	/* A plain listener: its streams get NODELAY from it. */
	H_EQ_FATAL(pair_with(&c, AF_INET, NULL, NULL, &srv, &cli, NULL), 0);
	expect_opt(l, srv, TL_SO_NODELAY, 0, 1, "accepted");
	h_close(&c, srv, 4);
	h_close(&c, cli, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* A connect to addr from a fresh socket: its terminal result (the handle is
 * closed). */
static int64_t connect_result(h_ctx *c, const tl_addr *addr)
{
	tl_handle h;
	tl_op op;
	int rc = tl_tcp_connect(c->loop, addr, in_ms(c->loop, 5000), 7, &h, &op);
	if (rc < 0)
		return rc; /* refused at once */
	int i = h_wait_op(c, op);
	int64_t r = i >= 0 ? c->log.v[i].result : -ETIMEDOUT;
	h_close(c, h, 8);
	return r;
}

/* Rule 4.1 (IPV6_V6ONLY kept): a v6only listener on the IPv6 wildcard
 * refuses IPv4 connects, plain and IPv4-mapped (::ffff:127.0.0.1), and takes
 * IPv6 ones; a dual-stack listener takes the mapped connect and sees its
 * peer as ::ffff:127.0.0.1. */
static void test_v6only_refuses_mapped(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || !h_need_ipv6())
		goto out;
	for (int v6only = 1; v6only >= 0; v6only--) {
		tl_handle lis;
		tl_addr any, la, v4, mapped, six;
		tl_op aop;
		addr_of(&any, "::", 0);
		H_EQ_FATAL(tl_tcp_listen(l, &any, &(tl_listen_opts){.v6only = v6only}, &lis), 0);
		H_EQ_FATAL(tl_local_addr(l, lis, &la), 0);
		uint16_t port = port_of(&la);
		addr_of(&v4, "127.0.0.1", port);
		addr_of(&mapped, "::ffff:127.0.0.1", port);
		addr_of(&six, "::1", port);
		H_EQ(tl_accept_start(l, lis, 1, &aop), 0);
		uint32_t mark = c.log.n;
		int64_t r4 = connect_result(&c, &v4), rm = connect_result(&c, &mapped);
		int64_t r6 = connect_result(&c, &six);
		if (v6only) {
			H_EQ(r4, -ECONNREFUSED);
			H_EQ(rm, -ECONNREFUSED);
		} else {
			H_EQ(r4, 0);
			H_EQ(rm, 0);
		}
		H_EQ(r6, 0);
		uint32_t want_n = v6only ? 1 : 3;
		for (int w = 0; w < 200 && h_count_op(&c.log, aop, mark) < want_n; w++)
			h_turn(&c, (int64_t)H_MS);
		h_idle(&c, 2); /* and nothing more comes */
		uint32_t accepted = 0, mapped_peers = 0;
		for (uint32_t k = mark; k < c.log.n; k++) {
			tl_completion *x = &c.log.v[k];
			if (x->op.v != aop.v || x->result < 0)
				continue;
			accepted++;
			tl_addr want;
			addr_of(&want, "::ffff:127.0.0.1", 0);
			mapped_peers += same_ip(&x->u.accept.peer, &want);
			h_close(&c, x->u.accept.conn, 9);
		}
		H_EQ(accepted, want_n);
		H_EQ(mapped_peers, v6only ? 0 : 2);
		h_close(&c, lis, 10);
	}
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- Connect setups ---- */

/* Rule 4.8 on connects: a source address is bound before the connect (the
 * accepted side's peer and the connector's local address show it, with the
 * same port), and the option list is applied before connect(2) and reads
 * back. IPv4 from 127.0.0.2 (Linux routes all of 127/8 to loopback), port 0;
 * IPv6 from ::1 (its only loopback address, which an unbound socket would
 * get too) with a fixed port, which only the bind can give. */
static void connect_source(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	int v6 = family == AF_INET6;
	if (!h_need_cap(l, TL_CAP_TCP) || (v6 && !h_need_ipv6()))
		goto out;
	tl_handle srv, cli;
	tl_addr peer, loc, got;
	char b1[64], b2[64];
	tl_connect_opts co = {0};
	addr_of(&co.source, v6 ? "::1" : "127.0.0.2", 0);
	uint16_t fixed = 0;
	if (v6) {
		/* A port nothing uses: a listener's, closed again. */
		tl_handle probe;
		tl_addr pa;
		H_EQ_FATAL(h_listen(&c, AF_INET6, NULL, &probe, &pa), 0);
		fixed = port_of(&pa);
		h_close(&c, probe, 9);
		addr_of(&co.source, "::1", fixed);
	}
	const tl_sockopt_val so[] = {
		{TL_SO_NODELAY, 0}, {TL_SO_KEEPALIVE, 1}, {TL_SO_KEEPCNT, 3},
		{TL_SO_RCVBUF, 16384}, {TL_SO_TCLASS, 0x48}, {TL_SO_USER_TIMEOUT, 7000},
	};
	tl_sockopt_val so_run[sizeof so / sizeof so[0]];
	co.sockopts = so_run;
	co.nsockopts = wine_filter(l, so, sizeof so / sizeof so[0], v6, so_run);
	int no_user_timeout = iocp(l);
	if (no_user_timeout) {
		/* Refused at the setup (nothing left behind: h_end); the rest
		 * of the list, without it, still applies. */
		tl_handle h = TL_HANDLE_NONE;
		tl_op op;
		tl_addr to;
		h_loopback(&to, family, 9);
		const tl_connect_opts ut = {.sockopts = &so_run[co.nsockopts - 1], .nsockopts = 1};
		H_EQ(tl_tcp_connect_opts(l, &to, &ut, 0, 3, &h, &op), -ENOTSUP);
		H_EQ(h.v, 0);
		co.nsockopts--; /* TL_SO_USER_TIMEOUT, last */
		h_skip("TCP_USER_TIMEOUT: no Windows counterpart (-ENOTSUP checked)");
	}
	H_EQ_FATAL(pair_with(&c, family, NULL, &co, &srv, &cli, &peer), 0);
	H_TRUE(same_ip(&peer, &co.source), "accepted peer %s, want %s",
	       ip_text(&peer, b1, sizeof b1), ip_text(&co.source, b2, sizeof b2));
	H_EQ(tl_peer_addr(l, srv, &got), 0);
	H_TRUE(h_addr_eq(&got, &peer), "tl_peer_addr %s:%u, accept said %s:%u",
	       ip_text(&got, b1, sizeof b1), port_of(&got), ip_text(&peer, b2, sizeof b2),
	       port_of(&peer));
	H_EQ(tl_local_addr(l, cli, &loc), 0);
	H_TRUE(h_addr_eq(&loc, &peer), "connector's local %s:%u, peer seen as %s:%u",
	       ip_text(&loc, b1, sizeof b1), port_of(&loc), ip_text(&peer, b2, sizeof b2),
	       port_of(&peer));
	H_TRUE(port_of(&loc) != 0, "no port");
	if (fixed)
		H_EQ(port_of(&peer), fixed);
	expect_opt(l, cli, TL_SO_NODELAY, v6, 0, "connect opts");
	expect_opt(l, cli, TL_SO_KEEPALIVE, v6, 1, "connect opts");
	expect_opt(l, cli, TL_SO_KEEPCNT, v6, 3, "connect opts");
	expect_opt(l, cli, TL_SO_RCVBUF, v6, bufsize(l, 16384), "connect opts");
	expect_opt(l, cli, TL_SO_TCLASS, v6, 0x48, "connect opts");
	if (no_user_timeout) {
		int64_t v;
		H_EQ(tl_sockopt_get(l, cli, TL_SO_USER_TIMEOUT, &v), -ENOTSUP);
	} else {
		expect_opt(l, cli, TL_SO_USER_TIMEOUT, v6, 7000, "connect opts");
	}
	char got3[3];
	H_EQ(h_write_all(&c, cli, "src", 3), 3);
	H_EQ(h_read_exact(&c, srv, got3, 3, NULL), 3);
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_connect_source_v4(void) { connect_source(AF_INET); }
static void test_connect_source_v6(void) { connect_source(AF_INET6); }

/* Rule 4.8: with IP_BIND_ADDRESS_NO_PORT, many connects from one source IP
 * (port 0) all succeed, each accepted with that source and its own port,
 * and the kernel shows the option set on each socket. */
static void test_connect_bind_no_port_many(void)
{
	enum { N = 128 };
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	tl_handle lis, cli[N];
	tl_op aop, cop[N];
	tl_addr la;
	H_EQ_FATAL(h_listen(&c, AF_INET, &(tl_listen_opts){.backlog = N}, &lis, &la), 0);
	H_EQ_FATAL(tl_accept_start(l, lis, 1, &aop), 0);
	tl_connect_opts co = {.bind_no_port = 1};
	addr_of(&co.source, "127.0.0.2", 0);
	uint32_t mark = c.log.n;
	int made = 0;
	if (iocp(l)) {
		/* Refused at the setup: no handle, no op (h_end checks nothing
		 * is left). */
		cli[0] = TL_HANDLE_NONE;
		H_EQ(tl_tcp_connect_opts(l, &la, &co, 0, 100, &cli[0], &cop[0]), -ENOTSUP);
		H_EQ(cli[0].v, 0);
		h_skip("IP_BIND_ADDRESS_NO_PORT: no Windows counterpart (-ENOTSUP checked)");
		h_close(&c, lis, 5);
		goto out;
	}
	for (int k = 0; k < N; k++) {
		int rc = tl_tcp_connect_opts(l, &la, &co, 0, 100 + (uint64_t)k, &cli[k], &cop[k]);
		H_EQ(rc, 0);
		if (rc != 0)
			break;
		made++;
		if (os_sockets(l))
			H_EQ(kget(l, cli[k], IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT), 1);
	}
	int connected = 0;
	for (int k = 0; k < made; k++) {
		int i = h_wait_op(&c, cop[k]);
		connected += i >= 0 && c.log.v[i].result == 0;
	}
	H_EQ(connected, N);
	for (int w = 0; w < 200 && h_count_op(&c.log, aop, mark) < (uint32_t)made; w++)
		h_turn(&c, (int64_t)H_MS);
	uint32_t accepted = 0, from_src = 0, dup = 0;
	uint16_t ports[N];
	for (uint32_t k = mark; k < c.log.n; k++) {
		tl_completion *x = &c.log.v[k];
		if (x->op.v != aop.v || x->result < 0)
			continue;
		from_src += same_ip(&x->u.accept.peer, &co.source);
		uint16_t p = port_of(&x->u.accept.peer);
		for (uint32_t j = 0; j < accepted && j < N; j++)
			dup += ports[j] == p;
		if (accepted < N)
			ports[accepted] = p;
		accepted++;
		h_close(&c, x->u.accept.conn, 3);
	}
	H_EQ(accepted, N);
	H_EQ(from_src, N);
	H_EQ(dup, 0);
	for (int k = 0; k < made; k++)
		h_close(&c, cli[k], 4);
	h_close(&c, lis, 5);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* 192.0.2.1 (TEST-NET-1) is no address of this host. */
#define FOREIGN_SRC "192.0.2.1"

/* Rule 4.8: a source that is not local is refused (-EADDRNOTAVAIL) unless
 * IP_FREEBIND is asked; with it the bind succeeds (what the connect then
 * does depends on routes: its result is not checked). */
static void test_connect_freebind(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	if (!os_sockets(l)) {
		/* Still taken (and harmless) on the simulation driver. */
		h_skip("every address is this host's in the simulation: freebind has nothing "
		       "to show");
		goto out;
	}
	tl_handle lis, h;
	tl_op op;
	tl_addr la;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	tl_connect_opts co = {0};
	addr_of(&co.source, FOREIGN_SRC, 0);
	H_EQ(tl_tcp_connect_opts(l, &la, &co, 0, 1, &h, &op), -EADDRNOTAVAIL);
	co.freebind = 1;
	int rc = tl_tcp_connect_opts(l, &la, &co, in_ms(l, 1000), 2, &h, &op);
	if (iocp(l)) {
		H_EQ(rc, -ENOTSUP);
		h_skip("IP_FREEBIND: no Windows counterpart (-ENOTSUP checked)");
		h_close(&c, lis, 4);
		goto out;
	}
	/* epoll connects inside the call and may hear the route's answer
	 * there (-ENETUNREACH); the bind itself went through. */
	H_TRUE(rc != -EADDRNOTAVAIL, "freebind did not reach the bind");
	if (rc == 0) {
		int fd = tl_handle_fd(l, h);
		H_TRUE_FATAL(fd >= 0, "tl_handle_fd: %d", fd);
		tl_addr bound;
		socklen_t len = sizeof bound;
		H_EQ(getsockname(fd, &bound.sa, &len), 0);
		H_TRUE(same_ip(&bound, &co.source), "bound elsewhere");
		H_EQ(kget(l, h, IPPROTO_IP, IP_FREEBIND), 1);
		h_wait_op(&c, op);
		h_close(&c, h, 3);
	}
	h_close(&c, lis, 4);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.8: IP_TRANSPARENT needs CAP_NET_ADMIN: with it, a foreign source is
 * bound and the connect starts (it cannot finish: nothing routes the answer
 * back), without it the setup is -EPERM. */
static void test_connect_transparent(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP))
		goto out;
	if (!os_sockets(l)) {
		h_skip("the simulation has no capabilities and every address is local: "
		       "transparent has nothing to show");
		goto out;
	}
	tl_handle lis, h;
	tl_op op;
	tl_addr la;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	tl_connect_opts co = {.transparent = 1};
	addr_of(&co.source, FOREIGN_SRC, 0);
	int rc = tl_tcp_connect_opts(l, &la, &co, 0, 1, &h, &op);
	if (iocp(l)) {
		H_EQ(rc, -ENOTSUP);
		h_skip("IP_TRANSPARENT: no Windows counterpart (-ENOTSUP checked)");
	} else if (!has_cap(CAP_NET_ADMIN_BIT)) {
		H_EQ(rc, -EPERM);
		h_skip("IP_TRANSPARENT needs CAP_NET_ADMIN, which this process lacks");
	} else {
		H_EQ(rc, 0);
		if (rc == 0) {
			H_EQ(kget(l, h, IPPROTO_IP, IP_TRANSPARENT), 1);
			int fd = tl_handle_fd(l, h);
			tl_addr bound;
			socklen_t len = sizeof bound;
			H_EQ(getsockname(fd, &bound.sa, &len), 0);
			H_TRUE(same_ip(&bound, &co.source), "bound elsewhere");
			h_close(&c, h, 2); /* cancels the connect */
		}
	}
	h_close(&c, lis, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- Peer addresses ---- */

/* Rule 4.8: tl_peer_addr of an accepted stream is the connector's local
 * address (as the accept reported), of a connected one the listener's;
 * -EAGAIN while the connect is pending (options can be set meanwhile),
 * -ENOTCONN after a refused connect, -EINVAL for other kinds and a NULL
 * out, -ENOENT once stale. */
static void peer_addr(int family)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) || (family == AF_INET6 && !h_need_ipv6()))
		goto out;
	tl_handle lis, srv, cli, tm, u;
	tl_addr la, got, loc;
	tl_op aop, cop, top;
	char b1[64], b2[64];
	H_EQ_FATAL(h_listen(&c, family, NULL, &lis, &la), 0);
	H_EQ_FATAL(tl_accept(l, lis, 1, &aop), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 2, &cli, &cop), 0);
	H_EQ(tl_peer_addr(l, cli, &got), -EAGAIN);
	set_expect(l, cli, TL_SO_KEEPALIVE, family == AF_INET6, 1, 1, "connecting");
	int ia = wait_ok(&c, aop), ic = wait_ok(&c, cop);
	H_TRUE_FATAL(ia >= 0 && ic >= 0, "no pair");
	srv = c.log.v[ia].u.accept.conn;
	memset(&got, 0, sizeof got);
	H_EQ(tl_peer_addr(l, cli, &got), 0);
	H_TRUE(h_addr_eq(&got, &la), "connected's peer %s:%u, listener %s:%u",
	       ip_text(&got, b1, sizeof b1), port_of(&got), ip_text(&la, b2, sizeof b2),
	       port_of(&la));
	memset(&got, 0, sizeof got);
	H_EQ(tl_peer_addr(l, srv, &got), 0);
	H_TRUE(h_addr_eq(&got, &c.log.v[ia].u.accept.peer), "accepted's peer differs from accept's");
	H_EQ(tl_local_addr(l, cli, &loc), 0);
	H_TRUE(h_addr_eq(&got, &loc), "accepted's peer %s:%u, connector's local %s:%u",
	       ip_text(&got, b1, sizeof b1), port_of(&got), ip_text(&loc, b2, sizeof b2),
	       port_of(&loc));
	H_EQ(tl_peer_addr(l, srv, NULL), -EINVAL);
	H_EQ(tl_peer_addr(l, lis, &got), -EINVAL);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 3, &tm, &top), 0);
	H_EQ(tl_peer_addr(l, tm, &got), -EINVAL);
	h_close(&c, tm, 4);
	if (tl_loop_caps(l) & TL_CAP_UDP) {
		tl_addr ua;
		h_loopback(&ua, family, 0);
		H_EQ_FATAL(tl_udp_bind(l, &ua, &u), 0);
		H_EQ(tl_peer_addr(l, u, &got), -EINVAL);
		h_close(&c, u, 5);
	}
	/* Works until Closed. */
	H_EQ(tl_close(l, srv, 6), 0);
	H_EQ(tl_peer_addr(l, srv, &got), 0);
	H_TRUE(h_wait_closed(&c, srv) >= 0, "no Closed");
	H_EQ(tl_peer_addr(l, srv, &got), -ENOENT);
	h_close(&c, cli, 7);
	h_close(&c, lis, 8);
	/* A refused connect: nothing listens at la any more. */
	tl_handle bad;
	tl_op bop;
	int rc = tl_tcp_connect(l, &la, 0, 9, &bad, &bop);
	if (rc == 0) {
		int i = h_wait_op(&c, bop);
		if (i >= 0)
			H_EQ(c.log.v[i].result, -ECONNREFUSED);
		H_EQ(tl_peer_addr(l, bad, &got), -ENOTCONN);
		h_close(&c, bad, 10);
	} else {
		H_EQ(rc, -ECONNREFUSED); /* refused inside the call */
	}
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

static void test_peer_addr_v4(void) { peer_addr(AF_INET); }
static void test_peer_addr_v6(void) { peer_addr(AF_INET6); }

/* Rule 4.8: Unix-domain peers are AF_UNIX with nothing else, on both sides
 * (as accept reports them). */
static void test_peer_addr_unix(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	char dir[] = "/tmp/tl-peer-XXXXXX", path[64];
	tl_handle srv, cli;
	if (!h_need_cap(l, TL_CAP_UNIX))
		goto out;
	H_EQ_FATAL(unix_pair(&c, dir, path, sizeof path, &srv, &cli), 0);
	tl_addr zero, got;
	memset(&zero, 0, sizeof zero);
	zero.sa.sa_family = AF_UNIX;
	for (int k = 0; k < 2; k++) {
		memset(&got, 0xa5, sizeof got);
		H_EQ(tl_peer_addr(l, k ? cli : srv, &got), 0);
		H_EQ(got.sa.sa_family, AF_UNIX);
		H_TRUE(!memcmp(&got, &zero, sizeof got), "more than the family reported");
	}
	h_close(&c, srv, 1);
	h_close(&c, cli, 2);
	unix_cleanup(dir, path);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- Abortive close ---- */

/* Read h once (after the peer's end arrived): the terminal result, flags in
 * *flags. */
static int64_t read_end(h_ctx *c, tl_handle h, uint16_t *flags)
{
	uint8_t buf[64];
	tl_op op;
	H_EQ_FATAL(tl_read(c->loop, h, buf, sizeof buf, 0x4e, &op), 0);
	int i = h_wait_op(c, op);
	if (i < 0)
		return INT64_MIN;
	*flags = c->log.v[i].flags;
	return c->log.v[i].result;
}

/* Rule 4.8: after tl_close_abort the peer's read gets -ECONNRESET (its
 * bytes exchanged before had all been read, so only the abort can reset);
 * after tl_close, in the same setup, it gets EOF. The abort refuses what
 * tl_close refuses, and every handle but a stream. */
static void test_close_abort_resets_peer(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) ||
	    h_wine_differs(l, "a peer's reset (wine 8 reads it as the end of the stream)"))
		goto out;
	for (int abort = 1; abort >= 0; abort--) {
		tl_handle srv, cli;
		char got[2];
		uint16_t fl = 0;
		H_EQ_FATAL(pair_with(&c, AF_INET, NULL, NULL, &srv, &cli, NULL), 0);
		H_EQ(h_write_all(&c, cli, "hi", 2), 2);
		H_EQ(h_read_exact(&c, srv, got, 2, NULL), 2);
		H_EQ(h_write_all(&c, srv, "ok", 2), 2);
		H_EQ(h_read_exact(&c, cli, got, 2, NULL), 2);
		if (abort) {
			H_EQ(tl_close_abort(l, cli, 1), 0);
			H_EQ(tl_close_abort(l, cli, 1), -EINVAL); /* already closing */
			H_EQ(tl_close(l, cli, 1), -EINVAL);
			H_TRUE(h_wait_closed(&c, cli) >= 0, "no Closed");
			H_EQ(tl_close_abort(l, cli, 1), -ENOENT);
		} else {
			h_close(&c, cli, 1);
		}
		int64_t r = read_end(&c, srv, &fl);
		if (abort) {
			H_EQ(r, -ECONNRESET);
		} else {
			H_EQ(r, 0);
			H_TRUE(fl & TL_F_EOF, "no EOF flag");
		}
		h_close(&c, srv, 2);
	}
	/* Streams only. */
	tl_handle lis, tm, u;
	tl_addr la;
	tl_op top;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ(tl_close_abort(l, lis, 3), -EINVAL);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 3, &tm, &top), 0);
	H_EQ(tl_close_abort(l, tm, 3), -EINVAL);
	if (tl_loop_caps(l) & TL_CAP_UDP) {
		tl_addr ua;
		h_loopback(&ua, AF_INET, 0);
		H_EQ_FATAL(tl_udp_bind(l, &ua, &u), 0);
		H_EQ(tl_close_abort(l, u, 3), -EINVAL);
		h_close(&c, u, 4);
	}
	h_close(&c, tm, 5);
	h_close(&c, lis, 6);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.8: an abortive close of a stream whose connect is still pending
 * or that has reads and writes pending delivers every op's terminal and
 * Closed like tl_close (nothing leaks). */
static void test_close_abort_with_ops(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!h_need_cap(l, TL_CAP_TCP) ||
	    h_wine_differs(l, "a peer's reset (wine 8 reads it as the end of the stream)"))
		goto out;
	tl_handle srv, cli, lis, h;
	tl_op rop, aop, cop;
	tl_addr la;
	uint8_t buf[16];
	H_EQ_FATAL(pair_with(&c, AF_INET, NULL, NULL, &srv, &cli, NULL), 0);
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &rop), 0);
	H_EQ(tl_close_abort(l, srv, 2), 0);
	int ir = h_wait_op(&c, rop), iz = h_wait_closed(&c, srv);
	H_TRUE(ir >= 0 && iz > ir, "read terminal %d, Closed %d", ir, iz);
	if (ir >= 0)
		H_EQ(c.log.v[ir].result, -ECANCELED);
	uint16_t fl;
	H_EQ(read_end(&c, cli, &fl), -ECONNRESET);
	h_close(&c, cli, 3);
	/* A connect still pending (not yet accepted, nor reported). */
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ_FATAL(tl_tcp_connect(l, &la, 0, 4, &h, &cop), 0);
	H_EQ(tl_close_abort(l, h, 5), 0);
	int ic = h_wait_op(&c, cop), ih = h_wait_closed(&c, h);
	H_TRUE(ic >= 0 && ih > ic, "connect terminal %d, Closed %d", ic, ih);
	/* Accept what made it to the queue, so the listener closes clean. */
	H_EQ(tl_accept_start(l, lis, 6, &aop), 0);
	h_idle(&c, 5);
	for (uint32_t k = 0; k < c.log.n; k++)
		if (c.log.v[k].op.v == aop.v && c.log.v[k].result >= 0 &&
		    !(c.log.v[k].flags & TL_F_TERMINAL))
			h_close(&c, c.log.v[k].u.accept.conn, 7);
	h_close(&c, lis, 8);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.8 on Unix-domain streams (docs/SOCKETS.md): the OS has no reset
 * for them, so after tl_close_abort the peer reads an end of stream, as
 * after tl_close. */
static void test_close_abort_unix_is_eof(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	char dir[] = "/tmp/tl-abort-XXXXXX", path[64];
	tl_handle srv, cli;
	if (!h_need_cap(l, TL_CAP_UNIX))
		goto out;
	H_EQ_FATAL(unix_pair(&c, dir, path, sizeof path, &srv, &cli), 0);
	H_EQ(tl_close_abort(l, cli, 1), 0);
	H_TRUE(h_wait_closed(&c, cli) >= 0, "no Closed");
	uint16_t fl = 0;
	H_EQ(read_end(&c, srv, &fl), 0);
	H_TRUE(fl & TL_F_EOF, "no EOF flag");
	h_close(&c, srv, 2);
	unix_cleanup(dir, path);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- The OS descriptor ---- */

/* Rule 4.8: tl_handle_fd gives each socket handle's own descriptor (a
 * socket of the right type: a listening stream, a stream, a datagram
 * socket), until Closed also while closing; -EINVAL for a timer, -ENOENT
 * once stale; on a driver without OS sockets -ENOTSUP (and the skip). */
static void test_handle_fd(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle lis, srv, cli, tm, u;
	tl_addr la, ua;
	tl_op top;
	if (!h_need_cap(l, TL_CAP_TCP) || !h_need_cap(l, TL_CAP_UDP))
		goto out;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 1, &tm, &top), 0);
	H_EQ(tl_handle_fd(l, tm), -EINVAL);
	h_close(&c, tm, 2);
	H_EQ(tl_handle_fd(l, tm), -ENOENT);
	H_EQ_FATAL(pair_with(&c, AF_INET, NULL, NULL, &srv, &cli, NULL), 0);
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	h_loopback(&ua, AF_INET, 0);
	H_EQ_FATAL(tl_udp_bind(l, &ua, &u), 0);
	if (!h_need_cap(l, TL_CAP_OS)) {
		/* h_need_cap checked -ENOTSUP on a UDP handle; streams too. */
		H_EQ(tl_handle_fd(l, srv), -ENOTSUP);
		H_EQ(tl_handle_fd(l, lis), -ENOTSUP);
	} else {
		const struct { tl_handle h; int type, listening; } want[] = {
			{lis, SOCK_STREAM, 1}, {srv, SOCK_STREAM, 0}, {cli, SOCK_STREAM, 0},
			{u, SOCK_DGRAM, 0},
		};
		int seen[4];
		for (int k = 0; k < 4; k++) {
			int fd = tl_handle_fd(l, want[k].h);
			seen[k] = fd;
			H_TRUE_FATAL(fd >= 0, "handle %d: %d%s", k, fd, h_errname(fd));
#ifndef _WIN32 /* a SOCKET is no C runtime descriptor: SO_TYPE below says it is a socket */
			struct stat st;
			H_EQ(fstat(fd, &st), 0);
			H_TRUE(S_ISSOCK(st.st_mode), "handle %d: not a socket", k);
#endif
			H_EQ(kget(l, want[k].h, SOL_SOCKET, SO_TYPE), want[k].type);
			H_EQ(kget(l, want[k].h, SOL_SOCKET, SO_ACCEPTCONN), want[k].listening);
			for (int j = 0; j < k; j++)
				H_TRUE(seen[j] != fd, "handles %d and %d share a descriptor", j, k);
		}
		/* The escape hatch reaches the same socket the typed calls do. */
		int one = 1, fd = tl_handle_fd(l, cli);
#ifdef _WIN32
		H_EQ(setsockopt((SOCKET)(intptr_t)fd, SOL_SOCKET, SO_KEEPALIVE, (const char *)&one, sizeof one), 0);
#else
		H_EQ(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), 0);
#endif
		expect_opt(l, cli, TL_SO_KEEPALIVE, 0, 1, "set through the descriptor");
		/* Until Closed, also while closing. */
		H_EQ(tl_close(l, cli, 3), 0);
		H_EQ(tl_handle_fd(l, cli), fd);
		H_TRUE(h_wait_closed(&c, cli) >= 0, "no Closed");
		H_EQ(tl_handle_fd(l, cli), -ENOENT);
	}
	if (tl_handle_fd(l, cli) != -ENOENT)
		h_close(&c, cli, 4);
	h_close(&c, srv, 5);
	h_close(&c, lis, 6);
	h_close(&c, u, 7);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_sockets[] = {
	T("4.8 socket options", test_sockopt_stream_v4),
	T("4.8 socket options", test_sockopt_stream_v6),
	T("4.8 socket options", test_sockopt_unix_and_udp),
	T("4.8 socket options", test_sockopt_refused),
	T("4.8 listener options", test_listener_options),
	T("4.8 listener options", test_v6only_refuses_mapped),
	T("4.8 connect options", test_connect_source_v4),
	T("4.8 connect options", test_connect_source_v6),
	T("4.8 connect options", test_connect_bind_no_port_many),
	T("4.8 connect options", test_connect_freebind),
	T("4.8 connect options", test_connect_transparent),
	T("4.8 peer address", test_peer_addr_v4),
	T("4.8 peer address", test_peer_addr_v6),
	T("4.8 peer address", test_peer_addr_unix),
	T("4.8 abortive close", test_close_abort_resets_peer),
	T("4.8 abortive close", test_close_abort_with_ops),
	T("4.8 abortive close", test_close_abort_unix_is_eof),
	T("4.8 descriptor", test_handle_fd),
	{ NULL, NULL, NULL },
};
