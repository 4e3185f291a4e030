/* tests/win_smoke.c: the loop core on the simulation driver, run as a Windows program under wine (the platform layer's clocks, locks, notifier and mappings at work), and the Windows error table against real Winsock calls; until the IOCP driver's contract suite replaces it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <turnloop.h>
#ifdef _WIN32
#include <winsock2.h>
#include <windows.h>
#include "os.h" /* tl__os_win_error */
#else
#include <pthread.h>
#include <unistd.h>
#endif

/* No CUnit here: Debian has none for mingw-w64. Each check prints what it
 * saw and counts; the program exits 1 if any failed. */
static int failures;
#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			failures++;                                       \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                     \
			fputc('\n', stderr);                              \
		}                                                         \
	} while (0)

/* Completions that came while another was awaited (the leases of reads
 * are given back at once). */
static tl_completion saved[64];
static int nsaved;

/* The completion of kind with token, from those saved or from turns of at
 * most 10 ms each, 5 s at most; copied to *out. */
static int wait_for(tl_loop *l, uint16_t kind, uint64_t token, tl_completion *out)
{
	tl_completion c[16];
	for (int i = 0; i < nsaved; i++) {
		if (saved[i].kind == kind && saved[i].token == token) {
			*out = saved[i];
			saved[i] = saved[--nsaved];
			return 0;
		}
	}
	for (int spins = 0; spins < 500; spins++) {
		int n = tl_turn(l, 10000000, c, 16, NULL), found = 0;
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			if (c[i].kind == TL_K_READ && (c[i].flags & TL_F_LEASE))
				tl_lease_release(l, c[i].u.read.lease.id);
			if (!found && c[i].kind == kind && c[i].token == token) {
				*out = c[i];
				found = 1;
			} else if (nsaved < 64) {
				saved[nsaved++] = c[i];
			}
		}
		if (found)
			return 0;
	}
	return -ETIMEDOUT;
}

struct poster_arg {
	tl_poster *p;
	int slept_ms;
	int rc;
};

/* Another thread posts into the loop while it sleeps in tl_turn: the
 * notifier must end the wait. */
#ifdef _WIN32
static DWORD WINAPI poster_main(LPVOID v)
#else
static void *poster_main(void *v)
#endif
{
	struct poster_arg *a = v;
#ifdef _WIN32
	Sleep((DWORD)a->slept_ms);
#else
	usleep((useconds_t)a->slept_ms * 1000);
#endif
	a->rc = tl_post(a->p, 77, 0xfeed);
	return 0;
}

static void test_driver_choice(void)
{
	tl_config cfg;
	tl_loop *l = NULL;
	tl_config_init(&cfg);
	int r = tl_loop_new(&l, &cfg);
	CHECK(r == 0, "default driver: %d (%s)", r, tl_strerror(r));
	if (r)
		return;
	tl_driver_info info;
	tl_driver_info_get(&info);
#ifdef _WIN32
	CHECK(strcmp(tl_loop_driver(l), "iocp") == 0 && info.kind == TL_DRIVER_IOCP,
	      "default driver %s (%s)", tl_loop_driver(l), info.reason);
#else
	CHECK(info.kind == TL_DRIVER_URING || info.kind == TL_DRIVER_EPOLL, "default: %s", info.reason);
#endif
	tl_loop_destroy(l);
	/* Linux's drivers are not in a Windows build, nor IOCP in a Linux one. */
	tl_config_init(&cfg);
#ifdef _WIN32
	cfg.driver = TL_DRIVER_EPOLL;
#else
	cfg.driver = TL_DRIVER_IOCP;
#endif
	r = tl_loop_new(&l, &cfg);
	CHECK(r == -ENOTSUP, "the other OS's driver: %d (%s)", r, tl_strerror(r));
	if (r == 0)
		tl_loop_destroy(l);
	tl_driver_info_get(&info);
	CHECK(strstr(info.last_error, "is unavailable") && !strstr(info.last_error, "Unknown error"),
	      "why: '%s'", info.last_error);
}

static void test_timer_and_post(int kind)
{
	tl_config cfg;
	tl_loop *l;
	tl_completion c;
	tl_handle th;
	tl_op op;
	tl_config_init(&cfg);
	cfg.driver = kind;
	int r = tl_loop_new(&l, &cfg);
	CHECK(r == 0, "tl_loop_new(%d): %d", kind, r);
	if (r)
		return;

	/* A timer 20 ms ahead fires, not before. */
	uint64_t t0 = tl_now(l);
	r = tl_timer_start(l, t0 + 20000000, 0, 5, &th, &op);
	CHECK(r == 0, "tl_timer_start: %d", r);
	r = wait_for(l, TL_K_TIMER, 5, &c);
	CHECK(r == 0 && c.result == 0, "timer: %d, result %lld", r, (long long)c.result);
	CHECK(tl_now(l) >= t0 + 20000000, "the timer fired %llu ns early",
	      (unsigned long long)(t0 + 20000000 - tl_now(l)));
	tl_close(l, th, 6);
	CHECK(wait_for(l, TL_K_CLOSED, 6, &c) == 0, "the timer's Closed");

	/* A post from another thread wakes a loop parked in its OS wait. */
	struct poster_arg a = {tl_poster_get(l), 50, -1};
#ifdef _WIN32
	HANDLE t = CreateThread(NULL, 0, poster_main, &a, 0, NULL);
	CHECK(t != NULL, "CreateThread");
#else
	pthread_t t;
	pthread_create(&t, NULL, poster_main, &a);
#endif
	tl_completion cs[4];
	/* No timeout: the simulation driver jumps virtual time over a finite
	 * one, but with none and nothing scheduled it blocks for real on the
	 * notifier (IOCP: on its port, where the notifier posts). A notifier
	 * that does not fire hangs here: the suite's timeout fails it. */
	int n = tl_turn(l, -1, cs, 4, NULL);
	CHECK(n == 1 && cs[0].kind == TL_K_POST && cs[0].token == 77 && cs[0].u.post.payload == 0xfeed,
	      "the post: n %d kind %u token %llu", n, n > 0 ? cs[0].kind : 0,
	      n > 0 ? (unsigned long long)cs[0].token : 0ull);
#ifdef _WIN32
	WaitForSingleObject(t, INFINITE);
	CloseHandle(t);
#else
	pthread_join(t, NULL);
#endif
	CHECK(a.rc == 0, "tl_post: %d", a.rc);
	tl_loop_stats st;
	tl_loop_stats_get(l, &st);
	CHECK(st.wakes_sent >= 1, "wakes sent %llu", (unsigned long long)st.wakes_sent);
	tl_poster_put(a.p);

	/* What this platform lacks says so. */
	tl_handle h;
	r = tl_signal_start(l, 2, 0, &h, &op);
#ifdef _WIN32
	CHECK(r == -ENOTSUP, "tl_signal_start: %d", r);
#else
	CHECK(r != -ENOTSUP, "tl_signal_start: %d", r);
	if (r == 0) {
		tl_close(l, h, 9);
		wait_for(l, TL_K_CLOSED, 9, &c);
	}
#endif
	r = tl_loop_close(l); /* frees it when nothing is open */
	CHECK(r == 0, "tl_loop_close: %d (something still open)", r);
	if (r)
		tl_loop_destroy(l);
	nsaved = 0;
}

/* TCP on the simulated network: listen, connect, accept, 64 KiB each way
 * in pooled reads, half-close, close. */
static void test_stream(int kind)
{
	tl_config cfg;
	tl_loop *l;
	tl_completion c;
	tl_handle lh, ch, sh;
	tl_op op;
	tl_addr addr;
	static uint8_t out[65536];
	tl_config_init(&cfg);
	cfg.driver = kind;
	if (tl_loop_new(&l, &cfg) != 0) {
		CHECK(0, "tl_loop_new(%d)", kind);
		return;
	}
	CHECK(strcmp(tl_loop_driver(l), kind == TL_DRIVER_SIM ? "sim" : "iocp") == 0, "driver %s",
	      tl_loop_driver(l));
	tl_addr_parse(&addr, "127.0.0.1", 0);
	int r = tl_tcp_listen(l, &addr, NULL, &lh);
	CHECK(r == 0, "tl_tcp_listen: %d", r);
	CHECK(tl_local_addr(l, lh, &addr) == 0, "tl_local_addr");
	CHECK(tl_accept(l, lh, 1, &op) == 0, "tl_accept");
	CHECK(tl_tcp_connect(l, &addr, 0, 2, &ch, &op) == 0, "tl_tcp_connect");
	CHECK(wait_for(l, TL_K_CONNECT, 2, &c) == 0 && c.result == 0, "connect: %lld", (long long)c.result);
	CHECK(wait_for(l, TL_K_ACCEPT, 1, &c) == 0 && c.result == 0, "accept: %lld", (long long)c.result);
	sh = c.u.accept.conn;

	/* Socket options, where the driver has them: TCP_NODELAY on by
	 * default (accepted streams too), keep-alive and a buffer set and
	 * read back. */
	if (kind != TL_DRIVER_SIM) {
		int64_t v = 0;
		CHECK(tl_sockopt_get(l, sh, TL_SO_NODELAY, &v) == 0 && v == 1, "NODELAY on accepted: %lld",
		      (long long)v);
		CHECK(tl_sockopt_get(l, ch, TL_SO_NODELAY, &v) == 0 && v == 1, "NODELAY on connected: %lld",
		      (long long)v);
		CHECK(tl_sockopt_set(l, ch, TL_SO_KEEPALIVE, 1) == 0 &&
			      tl_sockopt_get(l, ch, TL_SO_KEEPALIVE, &v) == 0 && v == 1,
		      "KEEPALIVE: %lld", (long long)v);
		CHECK(tl_sockopt_set(l, ch, TL_SO_RCVBUF, 131072) == 0 &&
			      tl_sockopt_get(l, ch, TL_SO_RCVBUF, &v) == 0 && v >= 131072,
		      "RCVBUF: %lld", (long long)v);
		r = tl_sockopt_set(l, ch, TL_SO_MARK, 1);
		CHECK(r == -ENOTSUP, "SO_MARK on Windows: %d", r);

		/* tl_try_write: taken at once, no completion; read back. */
		char hello[8] = {0};
		int64_t w = tl_try_write(l, ch, "hello", 5);
		CHECK(w == 5, "tl_try_write: %lld", (long long)w);
		CHECK(tl_read(l, sh, hello, sizeof hello, 60, &op) == 0, "tl_read");
		CHECK(wait_for(l, TL_K_READ, 60, &c) == 0 && c.result == 5 && !memcmp(hello, "hello", 5),
		      "read what tl_try_write sent: %lld", (long long)c.result);
		CHECK(nsaved == 0, "completions besides the read: %d (kind %d)", nsaved, nsaved ? saved[0].kind : 0);

		/* An IPv6 listener takes IPv4 clients too unless v6only says
		 * not (Windows' default is the other way). */
		tl_addr any6, to4;
		tl_handle l6, c4;
		tl_addr_parse(&any6, "::", 0);
		CHECK(tl_tcp_listen(l, &any6, NULL, &l6) == 0 && tl_local_addr(l, l6, &any6) == 0, "listen on [::]");
		tl_addr_parse(&to4, "127.0.0.1", ntohs(any6.in6.sin6_port));
		CHECK(tl_tcp_connect(l, &to4, 0, 50, &c4, &op) == 0, "connect over IPv4");
		CHECK(wait_for(l, TL_K_CONNECT, 50, &c) == 0 && c.result == 0,
		      "an IPv4 client of an IPv6 listener: %lld (%s)", (long long)c.result, tl_strerror((int)c.result));
		tl_close(l, c4, 51);
		tl_close(l, l6, 52);
		CHECK(wait_for(l, TL_K_CLOSED, 51, &c) == 0 && wait_for(l, TL_K_CLOSED, 52, &c) == 0, "closed");
	}

	for (size_t i = 0; i < sizeof out; i++)
		out[i] = (uint8_t)(i * 7 + 3);
	CHECK(tl_write(l, ch, out, sizeof out, 3, &op) == 0, "tl_write");
	CHECK(tl_shutdown(l, ch, 4, &op) == 0, "tl_shutdown");
	CHECK(tl_read_start(l, sh, 10, &op) == 0, "tl_read_start");
	size_t got = 0;
	int bad = 0, eof = 0, wrote = 0, shut = 0;
	tl_completion cs[16];
	for (int spins = 0; spins < 1000 && !(eof && wrote && shut); spins++) {
		int n = tl_turn(l, 10000000, cs, 16, NULL);
		CHECK(n >= 0, "tl_turn: %d", n);
		for (int i = 0; i < n; i++) {
			tl_completion *x = &cs[i];
			if (x->kind == TL_K_WRITE)
				wrote = x->result == (int64_t)sizeof out;
			else if (x->kind == TL_K_SHUTDOWN)
				shut = x->result == 0;
			else if (x->kind == TL_K_READ) {
				if (x->flags & TL_F_LEASE) {
					for (int64_t k = 0; k < x->result; k++)
						bad += x->u.read.lease.data[k] != (uint8_t)((got + (size_t)k) * 7 + 3);
					got += (size_t)x->result;
					tl_lease_release(l, x->u.read.lease.id);
				}
				eof |= (x->flags & TL_F_EOF) != 0;
			}
		}
	}
	CHECK(wrote && shut, "write %d, shutdown %d", wrote, shut);
	CHECK(eof && got == sizeof out && bad == 0, "read %zu of %zu bytes, %d wrong, eof %d", got,
	      sizeof out, bad, eof);
	printf("%s: %zu bytes over a stream on 127.0.0.1:%u\n", tl_loop_driver(l), got,
	       ntohs(addr.in.sin_port));

	/* A read that waits is cancelled by its own completion; a connect to
	 * a port nobody listens on is refused. */
	CHECK(tl_read(l, ch, out, 16, 30, &op) == 0, "tl_read");
	CHECK(tl_cancel(l, op) == 0, "tl_cancel");
	CHECK(wait_for(l, TL_K_READ, 30, &c) == 0 && c.result == -ECANCELED && (c.flags & TL_F_TERMINAL),
	      "cancelled read: %lld", (long long)c.result);
	tl_handle xh;
	tl_addr gone = addr;
	tl_close(l, lh, 22);
	CHECK(wait_for(l, TL_K_CLOSED, 22, &c) == 0, "the listener's Closed");
	CHECK(tl_tcp_connect(l, &gone, 0, 31, &xh, &op) == 0, "tl_tcp_connect");
	CHECK(wait_for(l, TL_K_CONNECT, 31, &c) == 0 && c.result == -ECONNREFUSED,
	      "connect to a closed port: %lld (%s)", (long long)c.result, tl_strerror((int)c.result));
	tl_close(l, xh, 32);
	tl_close(l, sh, 20);
	tl_close(l, ch, 21);
	for (int i = 0; i < 50 && tl_alive(l); i++)
		tl_turn(l, 1000000, cs, 16, NULL);
	CHECK(!tl_alive(l), "handles left open");
	r = tl_loop_close(l);
	CHECK(r == 0, "tl_loop_close: %d", r);
	if (r)
		tl_loop_destroy(l);
	nsaved = 0;
}

#ifdef _WIN32
/* Winsock's and Win32's codes as the contract's (lib/os_win.c): the codes
 * real sockets give under wine, then a few the table must hold. */
static void test_errors(void)
{
	WSADATA wd;
	CHECK(WSAStartup(MAKEWORD(2, 2), &wd) == 0, "WSAStartup");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int alen = sizeof a;

	/* A port nobody listens on: bound, named, closed. */
	SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	CHECK(s != INVALID_SOCKET && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
		      getsockname(s, (struct sockaddr *)&a, &alen) == 0,
	      "a socket to find a free port: %d", WSAGetLastError());
	closesocket(s);
	s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	int r = connect(s, (struct sockaddr *)&a, sizeof a);
	int e = r ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
	CHECK(e == -ECONNREFUSED, "connect to a closed port: %d (%s)", e, tl_strerror(e));
	closesocket(s);

	/* Two sockets on one port. */
	SOCKET l1 = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP), l2 = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	a.sin_port = 0;
	alen = sizeof a;
	CHECK(bind(l1, (struct sockaddr *)&a, sizeof a) == 0 && listen(l1, 1) == 0 &&
		      getsockname(l1, (struct sockaddr *)&a, &alen) == 0,
	      "a listener: %d", WSAGetLastError());
	r = bind(l2, (struct sockaddr *)&a, sizeof a);
	e = r ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
	CHECK(e == -EADDRINUSE, "a second bind to port %u: %d (%s)", ntohs(a.sin_port), e, tl_strerror(e));

	/* A receive on a socket that never connected. (CancelIoEx with nothing
	 * to cancel is ERROR_NOT_FOUND on Windows but succeeds under wine 8:
	 * the IOCP driver must not rely on either; the table's entry is
	 * checked below.) */
	char b[4];
	r = recv(l2, b, sizeof b, 0);
	e = r < 0 ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
	CHECK(e == -ENOTCONN, "recv unconnected: %d (%s)", e, tl_strerror(e));
	closesocket(l1);
	closesocket(l2);
	WSACleanup();

	/* What overlapped completions report, and a code the table lacks. */
	CHECK(tl__os_win_error(ERROR_OPERATION_ABORTED) == -ECANCELED, "ERROR_OPERATION_ABORTED");
	CHECK(tl__os_win_error(ERROR_NOT_FOUND) == -ENOENT, "ERROR_NOT_FOUND");
	CHECK(tl__os_win_error(ERROR_NETNAME_DELETED) == -ECONNRESET, "ERROR_NETNAME_DELETED");
	CHECK(tl__os_win_error(ERROR_CONNECTION_REFUSED) == -ECONNREFUSED, "ERROR_CONNECTION_REFUSED");
	CHECK(tl__os_win_error(WSAEWOULDBLOCK) == -EAGAIN, "WSAEWOULDBLOCK");
	CHECK(tl__os_win_error(WSAECONNRESET) == -ECONNRESET, "WSAECONNRESET");
	CHECK(tl__os_win_error(0xdeadbeef) == -EIO, "an unknown code");

	/* Every code the table gives has a name (the C runtime's strerror
	 * knows none of the network ones). */
	static const unsigned long some[] = {WSAEADDRINUSE, WSAEADDRNOTAVAIL, WSAEAFNOSUPPORT,
		WSAECONNABORTED, WSAECONNREFUSED, WSAECONNRESET, WSAEDESTADDRREQ, WSAEHOSTUNREACH,
		WSAEISCONN, WSAEMSGSIZE, WSAENETDOWN, WSAENETUNREACH, WSAENOPROTOOPT, WSAENOTCONN,
		WSAENOTSOCK, WSAEOPNOTSUPP, WSAETIMEDOUT, WSAENOBUFS, WSAEWOULDBLOCK, ERROR_NOT_SUPPORTED};
	for (size_t i = 0; i < sizeof some / sizeof *some; i++) {
		const char *n = tl_strerror(tl__os_win_error(some[i]));
		CHECK(!strstr(n, "Unknown") && !strstr(n, "not an error"), "code %lu named '%s'", some[i], n);
	}
}
#endif

/* Datagrams (the contract's D-rules in brief): sends and a pooled
 * multishot receive on loopback, several datagrams in one turn and in the
 * order sent, a cut datagram flagged TL_F_TRUNC, the destination address
 * with TL_UDP_PKTINFO, a send without an address refused until the handle
 * is connected, and a cancelled receive's one terminal. */
static void test_udp(int kind)
{
	tl_config cfg;
	tl_loop *l;
	tl_completion c, cs[16];
	tl_handle a, b;
	tl_op op;
	tl_addr aa, ba;
	tl_udp_opts uo = {.flags = TL_UDP_PKTINFO};
	char small[8], msg[32];
	tl_config_init(&cfg);
	cfg.driver = kind;
	if (tl_loop_new(&l, &cfg) != 0) {
		CHECK(0, "tl_loop_new(%d)", kind);
		return;
	}
	CHECK(tl_loop_caps(l) & TL_CAP_UDP, "TL_CAP_UDP on %s", tl_loop_driver(l));
	tl_addr_parse(&aa, "127.0.0.1", 0);
	tl_addr_parse(&ba, "127.0.0.1", 0);
	CHECK(tl_udp_bind_opts(l, &aa, &uo, &a) == 0, "bind a");
	CHECK(tl_udp_bind(l, &ba, &b) == 0, "bind b");
	CHECK(tl_local_addr(l, a, &aa) == 0 && tl_local_addr(l, b, &ba) == 0, "local addresses");
	if (kind != TL_DRIVER_SIM) {
		tl_udp_opts rp = {.flags = TL_UDP_REUSEPORT};
		tl_handle x;
		int r = tl_udp_bind_opts(l, &ba, &rp, &x);
		CHECK(r == -ENOTSUP, "TL_UDP_REUSEPORT on Windows: %d (%s)", r, tl_strerror(r));
	}

	/* Unconnected: a send without an address has nowhere to go. */
	CHECK(tl_udp_send(l, b, "x", 1, NULL, 10, &op) == 0, "send without address");
	CHECK(wait_for(l, TL_K_SEND, 10, &c) == 0 && c.result == -EDESTADDRREQ, "unconnected send: %lld",
	      (long long)c.result);

	/* A cut datagram: 8 of its 20 bytes, flagged. */
	CHECK(tl_udp_recv(l, a, small, sizeof small, 11, &op) == 0, "recv small");
	CHECK(tl_udp_send(l, b, "0123456789abcdefghij", 20, &aa, 12, &op) == 0, "send 20");
	CHECK(wait_for(l, TL_K_SEND, 12, &c) == 0 && c.result == 20, "send 20: %lld", (long long)c.result);
	CHECK(wait_for(l, TL_K_RECV, 11, &c) == 0 && c.result == 8 && (c.flags & TL_F_TRUNC) && c.aux > 8 &&
		      !memcmp(small, "01234567", 8),
	      "cut datagram: %lld, flags %x, aux %llu", (long long)c.result, c.flags, (unsigned long long)c.aux);
	CHECK(c.u.recv.from.in.sin_port == ba.in.sin_port, "its source is b");
	CHECK(c.u.recv.to.sa.sa_family == AF_INET && c.u.recv.to.in.sin_addr.s_addr == htonl(0x7f000001),
	      "PKTINFO: the destination 127.0.0.1 (family %d)", c.u.recv.to.sa.sa_family);

	/* 12 datagrams queued before the multishot receive starts: they come
	 * in order, more than one in some turn. */
	for (int i = 0; i < 12; i++) {
		snprintf(msg, sizeof msg, "dgram %02d", i);
		CHECK(tl_udp_send(l, b, msg, 8, &aa, 100 + (uint64_t)i, &op) == 0, "send %d", i);
		CHECK(wait_for(l, TL_K_SEND, 100 + (uint64_t)i, &c) == 0 && c.result == 8, "sent %d", i);
	}
	tl_op rop;
	CHECK(tl_udp_recv_start(l, a, 20, &rop) == 0, "recv_start");
	int got = 0, most = 0, in_order = 1;
	for (int spins = 0; got < 12 && spins < 500; spins++) {
		int n = tl_turn(l, 10000000, cs, 16, NULL), here = 0;
		for (int i = 0; i < n; i++) {
			if (cs[i].kind != TL_K_RECV || cs[i].token != 20)
				continue;
			CHECK(!(cs[i].flags & TL_F_TERMINAL), "a nonterminal datagram: %lld", (long long)cs[i].result);
			if (cs[i].result == 8 && (cs[i].flags & TL_F_LEASE)) {
				const char *p = (const char *)cs[i].u.recv.lease.data;
				snprintf(msg, sizeof msg, "dgram %02d", got);
				in_order &= !memcmp(p, msg, 8);
				tl_lease_release(l, cs[i].u.recv.lease.id);
			}
			got++, here++;
		}
		most = here > most ? here : most;
	}
	CHECK(got == 12 && in_order, "12 datagrams in order: %d, in order %d", got, in_order);
	if (kind != TL_DRIVER_SIM)
		CHECK(most > 1, "several datagrams in one turn: at most %d", most);
	printf("%s: %d datagrams received in order, at most %d in one turn\n", tl_loop_driver(l), got, most);

	/* Cancelled: one terminal, -ECANCELED. */
	CHECK(tl_cancel(l, rop) == 0, "cancel the receive");
	CHECK(wait_for(l, TL_K_RECV, 20, &c) == 0 && (c.flags & TL_F_TERMINAL) && c.result == -ECANCELED,
	      "cancelled receive: %lld", (long long)c.result);

	/* Connected: a send without an address goes to the peer. */
	CHECK(tl_udp_connect(l, b, &aa) == 0, "connect b to a");
	CHECK(tl_udp_recv(l, a, msg, sizeof msg, 30, &op) == 0, "recv");
	CHECK(tl_udp_send(l, b, "peer", 4, NULL, 31, &op) == 0, "send to the peer");
	CHECK(wait_for(l, TL_K_SEND, 31, &c) == 0 && c.result == 4, "send to the peer: %lld", (long long)c.result);
	CHECK(wait_for(l, TL_K_RECV, 30, &c) == 0 && c.result == 4 && !memcmp(msg, "peer", 4),
	      "received from the peer: %lld", (long long)c.result);

	CHECK(tl_close(l, a, 40) == 0 && tl_close(l, b, 41) == 0, "close");
	CHECK(wait_for(l, TL_K_CLOSED, 40, &c) == 0 && wait_for(l, TL_K_CLOSED, 41, &c) == 0, "closed");
	tl_loop_stats st;
	tl_loop_stats_get(l, &st);
	CHECK(st.leases_out == 0 && !tl_alive(l), "leases held at the end: %u", (unsigned)st.leases_out);
	int r = tl_loop_close(l);
	CHECK(r == 0, "tl_loop_close: %d", r);
	if (r)
		tl_loop_destroy(l);
	nsaved = 0;
}

#ifdef _WIN32
/* tl_adopt on the IOCP driver: a listener and a UDP socket made with
 * Winsock join the loop and work; a socket of a kind it does not take,
 * and a number that is no socket, are refused and stay the caller's. */
static void test_adopt(void)
{
	tl_config cfg;
	tl_loop *l;
	tl_completion c;
	tl_handle lh, uh, ch;
	tl_op op;
	tl_addr a;
	int alen = sizeof a;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_IOCP;
	if (tl_loop_new(&l, &cfg) != 0) {
		CHECK(0, "tl_loop_new");
		return;
	}
	SOCKET ls = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	SOCKET us = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
	SOCKET bare = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	tl_addr_parse(&a, "127.0.0.1", 0);
	CHECK(bind(ls, &a.sa, sizeof a.in) == 0 && listen(ls, 16) == 0, "a Winsock listener");
	CHECK(bind(us, &a.sa, sizeof a.in) == 0, "a Winsock UDP socket");
	int r = tl_adopt(l, (int)(intptr_t)bare, &ch);
	CHECK(r == -EINVAL, "a stream neither listening nor connected: %d", r);
	r = tl_adopt(l, 0x7ffff0, &ch);
	CHECK(r == -ENOTSOCK || r == -EBADF, "no socket: %d", r);
	CHECK(tl_adopt(l, (int)(intptr_t)ls, &lh) == 0, "adopt the listener");
	CHECK(tl_adopt(l, (int)(intptr_t)us, &uh) == 0, "adopt the UDP socket");
	CHECK(getsockname(ls, &a.sa, &alen) == 0, "its port");
	CHECK(tl_accept(l, lh, 1, &op) == 0, "tl_accept on the adopted listener");
	CHECK(tl_tcp_connect(l, &a, 0, 2, &ch, &op) == 0, "connect to it");
	CHECK(wait_for(l, TL_K_ACCEPT, 1, &c) == 0 && c.result == 0, "accepted: %lld", (long long)c.result);
	tl_handle sh = c.u.accept.conn;
	CHECK(wait_for(l, TL_K_CONNECT, 2, &c) == 0 && c.result == 0, "connected: %lld", (long long)c.result);
	alen = sizeof a;
	CHECK(getsockname(us, &a.sa, &alen) == 0, "its port");
	char buf[8];
	CHECK(tl_udp_recv(l, uh, buf, sizeof buf, 3, &op) == 0, "recv on the adopted UDP socket");
	CHECK(tl_udp_send(l, uh, "self", 4, &a, 4, &op) == 0, "send to itself");
	CHECK(wait_for(l, TL_K_RECV, 3, &c) == 0 && c.result == 4 && !memcmp(buf, "self", 4), "received: %lld",
	      (long long)c.result);
	/* An adopted stream is non-blocking: tl_try_write of more than the
	 * socket takes returns what it took, and does not wait for a peer that
	 * reads nothing (a blocking one would hang here). */
	SOCKET raw = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	alen = sizeof a;
	CHECK(getsockname(ls, &a.sa, &alen) == 0, "the listener's port");
	CHECK(connect(raw, &a.sa, sizeof a.in) == 0, "a Winsock stream to the listener");
	tl_handle ah = TL_HANDLE_NONE;
	CHECK(tl_adopt(l, (int)(intptr_t)raw, &ah) == 0, "adopt the stream");
	static uint8_t big[8 << 20];
	int64_t took = tl_try_write(l, ah, big, sizeof big);
	CHECK((took > 0 && took < (int64_t)sizeof big) || took == -EAGAIN,
	      "tl_try_write of 8 MiB to a peer that reads nothing: %lld", (long long)took);
	tl_close(l, ah, 14);
	tl_close(l, sh, 10);
	tl_close(l, ch, 11);
	tl_close(l, lh, 12);
	tl_close(l, uh, 13);
	for (int i = 0; i < 100 && tl_alive(l); i++) {
		tl_completion cs[16];
		tl_turn(l, 1000000, cs, 16, NULL);
	}
	CHECK(!tl_alive(l), "handles left open");
	/* The refused socket is still the caller's, and open. */
	CHECK(closesocket(bare) == 0, "the refused socket was left open");
	r = tl_loop_close(l);
	CHECK(r == 0, "tl_loop_close: %d", r);
	if (r)
		tl_loop_destroy(l);
	nsaved = 0;
}
#endif

#ifdef _WIN32
/* Read exactly n bytes of h on l into buf (a read of the caller's buffer,
 * token tok): 0 or the failing result. */
static int read_n(tl_loop *l, tl_handle h, char *buf, uint32_t n, uint64_t tok)
{
	tl_completion c;
	tl_op op;
	for (uint32_t got = 0; got < n;) {
		int r = tl_read(l, h, buf + got, n - got, tok, &op);
		if (r == 0)
			r = wait_for(l, TL_K_READ, tok, &c);
		if (r == 0 && c.result <= 0)
			r = c.result < 0 ? (int)c.result : -EPIPE;
		if (r)
			return r;
		got += (uint32_t)c.result;
	}
	return 0;
}

/* tl_detach on IOCP (drivers/iocp/driver.c): a connection just accepted
 * has not joined the port and moves to another loop, where it serves;
 * once it has joined, detach either takes it off the port (Windows 8.1
 * and later) or answers -ENOTSUP and leaves it working where it is. */
static void test_detach(void)
{
	tl_config cfg;
	tl_loop *a = NULL, *b = NULL;
	tl_handle lh, ch, sh, sh2;
	tl_addr addr;
	tl_completion c;
	tl_op op;
	char buf[8];
	int fd = -1, r;

	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_IOCP;
	if (tl_loop_new(&a, &cfg) || tl_loop_new(&b, &cfg)) {
		CHECK(0, "two IOCP loops");
		return;
	}
	CHECK(tl_loop_caps(a) & TL_CAP_DETACH, "IOCP has TL_CAP_DETACH");
	tl_addr_parse(&addr, "127.0.0.1", 0);
	CHECK(tl_tcp_listen(a, &addr, NULL, &lh) == 0 && tl_local_addr(a, lh, &addr) == 0, "listen");
	CHECK(tl_accept(a, lh, 1, &op) == 0 && tl_tcp_connect(a, &addr, 0, 2, &ch, &op) == 0, "connect");
	CHECK(wait_for(a, TL_K_CONNECT, 2, &c) == 0 && c.result == 0, "connected");
	CHECK(wait_for(a, TL_K_ACCEPT, 1, &c) == 0 && c.result == 0, "accepted");
	sh = c.u.accept.conn;
	r = tl_detach(a, sh, &fd);
	CHECK(r == 0 && fd != -1, "detach of a connection that never read or wrote: %d", r);
	if (r) {
		nsaved = 0;
		tl_loop_destroy(a);
		tl_loop_destroy(b);
		return;
	}
	CHECK(tl_adopt(b, fd, &sh2) == 0, "adopted on the other loop");
	CHECK(tl_write(a, ch, "ping", 4, 3, &op) == 0 && wait_for(a, TL_K_WRITE, 3, &c) == 0 && c.result == 4,
	      "the client wrote");
	CHECK(read_n(b, sh2, buf, 4, 4) == 0 && !memcmp(buf, "ping", 4), "the other loop read it");
	/* sh2 has joined b's port now. */
	r = tl_detach(b, sh2, &fd);
	CHECK(r == 0 || r == -ENOTSUP, "detach of a joined socket: %d", r);
	tl_loop *home = b;
	tl_handle at = sh2;
	if (r == 0) { /* the OS took it off the port: it serves on a again */
		CHECK(tl_adopt(a, fd, &at) == 0, "adopted back");
		home = a;
	} else {
		printf("win_smoke: a socket that joined the port stays (-ENOTSUP: this OS cannot take it off)\n");
	}
	CHECK(tl_write(home, at, "pong", 4, 5, &op) == 0 && wait_for(home, TL_K_WRITE, 5, &c) == 0 &&
		      c.result == 4,
	      "a write after the detach answer");
	CHECK(read_n(a, ch, buf, 4, 6) == 0 && !memcmp(buf, "pong", 4), "the client read it");
	tl_close(a, ch, 0);
	tl_close(a, lh, 0);
	tl_close(home, at, 0);
	for (int i = 0; i < 100 && (tl_alive(a) || tl_alive(b)); i++) {
		tl_completion cs[16];
		tl_turn(a, 1000000, cs, 16, NULL);
		tl_turn(b, 1000000, cs, 16, NULL);
	}
	CHECK(tl_loop_close(a) == 0 && tl_loop_close(b) == 0, "both loops close with nothing open");
	nsaved = 0;
}
#endif

#ifdef _WIN32
/* A crash fails the run (under wine the process may exit 0 otherwise). */
static LONG WINAPI on_crash(EXCEPTION_POINTERS *e)
{
	fprintf(stderr, "win_smoke: CRASH: exception 0x%08lx at %p\n",
		(unsigned long)e->ExceptionRecord->ExceptionCode, e->ExceptionRecord->ExceptionAddress);
	fflush(stderr);
	TerminateProcess(GetCurrentProcess(), 3);
	return EXCEPTION_EXECUTE_HANDLER;
}
#endif

int main(void)
{
#ifdef _WIN32
	SetUnhandledExceptionFilter(on_crash);
	test_errors();
#endif
	test_driver_choice();
	test_timer_and_post(TL_DRIVER_SIM);
	test_stream(TL_DRIVER_SIM);
	test_udp(TL_DRIVER_SIM);
#ifdef _WIN32
	test_timer_and_post(TL_DRIVER_IOCP);
	test_stream(TL_DRIVER_IOCP);
	test_udp(TL_DRIVER_IOCP);
	test_adopt();
	test_detach();
#endif
	if (failures) {
		fprintf(stderr, "win_smoke: %d checks failed\n", failures);
		return 1;
	}
	printf("win_smoke: the error table, and the loop core on the simulation and IOCP drivers (on Windows; the simulation driver elsewhere): driver choice, timer, a post across threads, a TCP stream, a cancelled read, a refused connect, datagrams, adopted and detached sockets: all passed\n");
	return 0;
}
