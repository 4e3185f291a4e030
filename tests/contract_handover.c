/* tests/contract_handover.c: contract rules of handing sockets over (4.6): adopting descriptors, detaching handles, passing descriptors over Unix-domain streams. */
#include "contract.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _WIN32
/* Winsock's names (turnloop/platform.h includes its headers). A socket is
 * held in an int, as the runtime carries it (tl_adopt, tl_detach). */
#include <windows.h>
#define SOCK_CLOEXEC 0
#else
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#endif
#include <CUnit/CUnit.h>

/*
 * The other end of every socket here is a plain OS socket the test drives
 * itself (blocking, bounded by poll), so what the loop does is seen from
 * outside: a descriptor it adopted answers a plain peer, one it gave back
 * works with read(2) and write(2), one it passed works in another process.
 * The simulation driver's handles are no OS sockets: each test checks that
 * its entry points refuse with -ENOTSUP there and records a skip.
 */

/* ---- Plain sockets ---- */

#ifdef _WIN32
/* The text of the last Winsock error, for messages. */
static const char *sock_err(void)
{
	static char buf[32];
	snprintf(buf, sizeof buf, "Winsock error %d", WSAGetLastError());
	return buf;
}

#else
#define sock_err() strerror(errno)
#endif

/* A blocking TCP listener on 127.0.0.1 (no close-on-exec, as systemd or a
 * parent would hand one over); *a gets its address. */
static int raw_listener(tl_addr *a)
{
#ifdef _WIN32
	int fd = (int)(intptr_t)socket(AF_INET, SOCK_STREAM, 0);
	H_TRUE_FATAL(fd != (int)(intptr_t)INVALID_SOCKET, "socket: %s", sock_err());
#else
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	H_TRUE_FATAL(fd >= 0, "socket: %s", strerror(errno));
#endif
	h_loopback(a, AF_INET, 0);
	H_EQ_FATAL(bind(fd, &a->sa, tl_addr_len(a)), 0);
	H_EQ_FATAL(listen(fd, 16), 0);
	socklen_t len = sizeof *a;
	H_EQ_FATAL(getsockname(fd, &a->sa, &len), 0);
	return fd;
}

static int raw_connect(const tl_addr *a)
{
#ifdef _WIN32
	int fd = (int)(intptr_t)socket(a->sa.sa_family, SOCK_STREAM, 0);
	H_TRUE_FATAL(fd != (int)(intptr_t)INVALID_SOCKET, "socket: %s", sock_err());
#else
	int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_TRUE_FATAL(fd >= 0, "socket: %s", strerror(errno));
#endif
	H_EQ_FATAL(connect(fd, &a->sa, tl_addr_len(a)), 0);
	return fd;
}

/* A connected plain TCP pair: *srv accepted, *cli connected. */
static void raw_tcp_pair(int *srv, int *cli)
{
	tl_addr a;
	int l = raw_listener(&a);
	*cli = raw_connect(&a);
#ifdef _WIN32
	*srv = (int)(intptr_t)accept((SOCKET)(intptr_t)l, NULL, NULL);
	H_TRUE_FATAL(*srv != (int)(intptr_t)INVALID_SOCKET, "accept: %s", sock_err());
#else
	*srv = accept(l, NULL, NULL);
	H_TRUE_FATAL(*srv >= 0, "accept: %s", strerror(errno));
#endif
	h_sock_close(l);
}

/* A plain socket of family and type: the value, or -1. */
static int raw_socket(int family, int type)
{
#ifdef _WIN32
	SOCKET s = socket(family, type, 0);
	return s == INVALID_SOCKET ? -1 : (int)(intptr_t)s;
#else
	return socket(family, type, 0);
#endif
}

#ifdef _WIN32
/* Wait until fd polls for events (bounded): 1, or 0 after H_WAIT_MS. */
static int raw_wait(int fd, short events)
{
	WSAPOLLFD p = {.fd = (SOCKET)(intptr_t)fd, .events = events};
	return WSAPoll(&p, 1, H_WAIT_MS) == 1;
}

/* Whether the last call would have blocked (a non-blocking socket). */
static int would_block(void)
{
	int e = WSAGetLastError();
	return e == WSAEWOULDBLOCK || e == WSAEINTR;
}

/* Write all of buf to a plain socket: 0 or -1. The socket may be
 * blocking or not (one tl_detach gave back is non-blocking). */
static int raw_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		if (!raw_wait(fd, POLLOUT))
			return -1;
		int n = send((SOCKET)(intptr_t)fd, p, (int)len, 0);
		if (n < 0 && would_block())
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes from a plain socket: len, fewer at EOF, -1. */
static long raw_recv(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;
	while (got < len) {
		if (!raw_wait(fd, POLLIN))
			return -1;
		int n = recv((SOCKET)(intptr_t)fd, p + got, (int)(len - got), 0);
		if (n < 0 && would_block())
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long)got;
}

/* One read of what raw_wait found waiting: its length or -1. */
static long raw_recv_now(int fd, void *buf, size_t len)
{
	return recv((SOCKET)(intptr_t)fd, buf, (int)len, 0);
}

/* What tl_adopt makes of a socket, as far as Windows shows it. Windows has
 * no reading of a socket's blocking mode (FIONBIO is set, never read): a
 * non-blocking stream with nothing waiting shows it as a recv failing with
 * WSAEWOULDBLOCK, checked when the caller knows the stream is empty; a
 * listener and a UDP socket stay as they came (the IOCP driver's
 * overlapped operations do not need them non-blocking). Close-on-exec is
 * not checked: the IOCP driver leaves an adopted socket's inheritance as
 * the caller made it (docs/WINDOWS.md). That it is a socket still open
 * is checked. */
static void expect_adopted_flags_win(int fd, int stream_empty)
{
	SOCKET s = (SOCKET)(intptr_t)fd;
	int type = 0, len = sizeof type;
	H_TRUE(getsockopt(s, SOL_SOCKET, SO_TYPE, (char *)&type, &len) == 0,
	       "socket %d: not open (%s)", fd, sock_err());
	if (stream_empty) {
		/* A receive timeout for the probe, so that a blocking socket
		 * fails it (WSAETIMEDOUT) rather than hanging the test. */
		DWORD ms = 1000, none = 0;
		H_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, (char *)&ms, sizeof ms), 0);
		char b;
		int n = recv(s, &b, 1, MSG_PEEK);
		int e = WSAGetLastError();
		H_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, (char *)&none, sizeof none), 0);
		WSASetLastError(e);
		H_TRUE(n < 0 && e == WSAEWOULDBLOCK,
		       "socket %d: a recv on the empty stream gave %d (%s), not WSAEWOULDBLOCK: "
		       "not non-blocking",
		       fd, n, n < 0 ? sock_err() : "bytes");
	}
}
#define expect_adopted_flags(fd) expect_adopted_flags_win(fd, 0)

/* Closed: no socket under that value any more (Windows has no reading of
 * a descriptor table: getsockopt says WSAENOTSOCK). */
static int fd_closed(int fd)
{
	int type = 0, len = sizeof type;
	return getsockopt((SOCKET)(intptr_t)fd, SOL_SOCKET, SO_TYPE, (char *)&type, &len) != 0 &&
	       WSAGetLastError() == WSAENOTSOCK;
}
#else
/* Wait until fd polls for events (bounded): 1, or 0 after H_WAIT_MS. */
static int raw_wait(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	return poll(&p, 1, H_WAIT_MS) == 1;
}

/* Write all of buf to a plain socket: 0 or -1. */
static int raw_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		if (!raw_wait(fd, POLLOUT))
			return -1;
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes from a plain socket: len, fewer at EOF, -1. */
static long raw_recv(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < len) {
		if (!raw_wait(fd, POLLIN))
			return -1;
		ssize_t n = recv(fd, p + got, len - got, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (long)got;
}

/* fd is open, non-blocking and close-on-exec (what tl_adopt makes of it). */
static void expect_adopted_flags(int fd)
{
	int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
	H_TRUE(fl >= 0 && (fl & O_NONBLOCK), "fd %d: flags %#x, not non-blocking", fd, fl);
	H_TRUE(fdfl >= 0 && (fdfl & FD_CLOEXEC), "fd %d: not close-on-exec (%#x)", fd, fdfl);
}

/* fd is open with exactly the flags it had (a refused adopt changed none). */
static void expect_flags(int fd, int fl0, int fdfl0)
{
	H_EQ(fcntl(fd, F_GETFL), fl0);
	H_EQ(fcntl(fd, F_GETFD), fdfl0);
}

/* One read of what raw_wait found waiting: its length or -1. */
static long raw_recv_now(int fd, void *buf, size_t len)
{
	return recv(fd, buf, len, MSG_DONTWAIT);
}

static int fd_closed(int fd)
{
	return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}
#endif

/* ---- Capability gates ---- */

/* 1 when the loop adopts descriptors; otherwise checks tl_adopt refuses
 * with -ENOTSUP, leaving the descriptor alone, and records a skip. */
static int need_adopt(tl_loop *l)
{
	if (tl_loop_caps(l) & TL_CAP_OS)
		return 1;
#ifdef _WIN32
	int fd = (int)(intptr_t)socket(AF_INET, SOCK_DGRAM, 0);
	H_TRUE_FATAL(fd != (int)(intptr_t)INVALID_SOCKET, "socket: %s", sock_err());
	tl_handle h = TL_HANDLE_NONE;
	H_EQ(tl_adopt(l, fd, &h), -ENOTSUP);
	H_EQ(h.v, 0);
	H_TRUE(!fd_closed(fd), "a refused adopt closed the socket");
	h_sock_close(fd);
#else
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	H_TRUE_FATAL(fd >= 0, "socket: %s", strerror(errno));
	int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
	tl_handle h = TL_HANDLE_NONE;
	H_EQ(tl_adopt(l, fd, &h), -ENOTSUP);
	H_EQ(h.v, 0);
	expect_flags(fd, fl, fdfl);
	close(fd);
#endif
	return h_need_cap(l, TL_CAP_OS);
}

/* 1 when the loop detaches handles and passes descriptors (the adopt gate
 * included: every test here needs both). */
static int need_handover(tl_loop *l)
{
	int detach = h_need_cap(l, TL_CAP_DETACH); /* checks tl_detach says -ENOTSUP */
	return need_adopt(l) && detach;
}

#ifndef _WIN32
/* A Unix-domain pair of loop handles from a plain socketpair: *a and *b
 * adopted into their loops (one loop may be both). */
static void adopt_unix_pair(tl_loop *la, tl_loop *lb, tl_handle *a, tl_handle *b)
{
	int sv[2];
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	H_EQ_FATAL(tl_adopt(la, sv[0], a), 0);
	H_EQ_FATAL(tl_adopt(lb, sv[1], b), 0);
}
#endif

/* The terminal of op, which must have succeeded: its index or -1. */
static int wait_ok(h_ctx *c, tl_op op)
{
	int i = h_wait_op(c, op);
	if (i < 0)
		return -1;
	H_TRUE(c->log.v[i].result >= 0, "op ended with %lld%s", (long long)c->log.v[i].result,
	       h_errname(c->log.v[i].result));
	return c->log.v[i].result >= 0 ? i : -1;
}

#ifdef _WIN32
/* Whether rc, a tl_detach's answer, is the IOCP driver's refusal under
 * wine: a socket that has joined the loop's completion port is taken off
 * it with FileReplaceCompletionInformation (Windows 8.1 and later), which
 * wine 8 lacks, so the driver answers -ENOTSUP and the handle stays the
 * loop's. Then a skip is recorded and 1 returned: the caller checks the
 * handle still works. On Windows itself, and on every other driver, 0. */
static int detach_refused_here(tl_loop *l, int rc)
{
	if (rc != -ENOTSUP || strcmp(tl_loop_driver(l), "iocp") != 0 || !h_under_wine())
		return 0;
	h_skip("tl_detach of a socket that joined the completion port: -ENOTSUP under wine, "
	       "which lacks FileReplaceCompletionInformation (the handle was checked to still work)");
	return 1;
}

/* A plain accept on a listener: the new socket, or -1. */
static int raw_accept(int fd)
{
	SOCKET s = accept((SOCKET)(intptr_t)fd, NULL, NULL);
	return s == INVALID_SOCKET ? -1 : (int)(intptr_t)s;
}
#else
#define detach_refused_here(l, rc) 0
#define raw_accept(fd) accept(fd, NULL, NULL)
#endif

/* tl_detach until it gives the descriptor (turning in between): the
 * descriptor, or -1 with a failure recorded, or -2 when the driver
 * cannot detach it here (detach_refused_here). */
static int detach_wait(h_ctx *c, tl_handle h)
{
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	for (;;) {
		int fd = -1, rc = tl_detach(c->loop, h, &fd);
		if (rc == 0) {
			H_TRUE(fd >= 0, "tl_detach gave fd %d", fd);
			return fd;
		}
		if (detach_refused_here(c->loop, rc))
			return -2;
		H_EQ(rc, -EAGAIN);
		if (rc != -EAGAIN || h_wall_ns() > dl) {
			H_TRUE(0, "tl_detach did not finish: %d%s", rc, h_errname(rc));
			return -1;
		}
		h_turn(c, 10 * (int64_t)H_MS);
	}
}

/* ---- Adopt ---- */

/* Rule 4.6: a listening TCP socket and a listening Unix-domain socket made
 * outside the loop are adopted (non-blocking and close-on-exec from then
 * on), accept through the loop, and the streams they accept echo; the loop
 * closes the adopted descriptor when the listener's Closed is handed out. */
static void test_adopt_listener(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
#ifndef _WIN32
	char dir[] = "/tmp/tl-adopt-XXXXXX", path[96];
#endif
	if (!need_adopt(l))
		goto out;
	/* TCP */
	tl_addr a, la;
	int lfd = raw_listener(&a);
	tl_handle lis, conn;
	tl_op aop, rop;
	H_EQ_FATAL(tl_adopt(l, lfd, &lis), 0);
	expect_adopted_flags(lfd);
	H_EQ(tl_handle_fd(l, lis), lfd);
	H_EQ(tl_local_addr(l, lis, &la), 0);
	H_TRUE(h_addr_eq(&la, &a), "the adopted listener's address changed");
	/* A listener is not a stream: no reads on it. */
	H_EQ(tl_read_pooled(l, lis, 1, &rop), -EINVAL);
	H_EQ_FATAL(tl_accept(l, lis, 1, &aop), 0);
	int cfd = raw_connect(&a);
	int i = wait_ok(&c, aop);
	H_TRUE_FATAL(i >= 0, "no accept on the adopted listener");
	conn = c.log.v[i].u.accept.conn;
	H_EQ(raw_send(cfd, "ping", 4), 0);
	char got[8] = {0};
	H_EQ(h_read_exact(&c, conn, got, 4, NULL), 4);
	H_EQ(memcmp(got, "ping", 4), 0);
	H_EQ(h_write_all(&c, conn, "pong", 4), 4);
	H_EQ(raw_recv(cfd, got, 4), 4);
	H_EQ(memcmp(got, "pong", 4), 0);
	h_sock_close(cfd);
	h_close(&c, conn, 2);
	h_close(&c, lis, 3);
	H_TRUE(fd_closed(lfd), "the loop did not close the adopted listener");

#ifdef _WIN32
	/* The Unix-domain half: the IOCP driver has no Unix-domain sockets and
	 * wine's Winsock no AF_UNIX (harness.c's TL_CAP_UNIX says which). */
	h_skip("a listening Unix-domain socket: no AF_UNIX here (the TCP half ran)");
#else
	/* Unix-domain: a plain listener at a path, the loop's connect to it. */
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/sock", dir);
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
	int ufd = socket(AF_UNIX, SOCK_STREAM, 0);
	H_EQ_FATAL(bind(ufd, (struct sockaddr *)&sun, sizeof sun), 0);
	H_EQ_FATAL(listen(ufd, 4), 0);
	tl_handle ulis, ucli, usrv;
	tl_op cop;
	H_EQ_FATAL(tl_adopt(l, ufd, &ulis), 0);
	expect_adopted_flags(ufd);
	H_EQ(tl_local_addr(l, ulis, &la), -EINVAL); /* Unix-domain, as a loop's own */
	H_EQ_FATAL(tl_accept(l, ulis, 4, &aop), 0);
	H_EQ_FATAL(tl_unix_connect(l, path, 0, 5, &ucli, &cop), 0);
	i = wait_ok(&c, aop);
	H_TRUE_FATAL(i >= 0 && wait_ok(&c, cop) >= 0, "no Unix-domain connection");
	usrv = c.log.v[i].u.accept.conn;
	H_EQ(h_write_all(&c, ucli, "unix", 4), 4);
	H_EQ(h_read_exact(&c, usrv, got, 4, NULL), 4);
	H_EQ(memcmp(got, "unix", 4), 0);
	h_close(&c, ucli, 6);
	h_close(&c, usrv, 7);
	h_close(&c, ulis, 8);
	H_TRUE(fd_closed(ufd), "the loop did not close the adopted Unix listener");
	H_EQ(unlink(path), 0);
	H_EQ(rmdir(dir), 0);
#endif
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: closing a listener whose socket lives on in another
 * descriptor (a copy kept by the program, or sent to another process)
 * leaves nothing of it in the loop: the copy, even under the closed
 * descriptor's own number, is adopted again and accepts. (epoll keeps a
 * registration while any descriptor of the file is open, so without taking
 * it out at the close, adopting the copy under that number was -EEXIST:
 * tlproxy lost its listeners after a third failed takeover.) */
static void test_adopt_after_close_of_copy(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_adopt(l))
		goto out;
#ifdef _WIN32
	/* A copy of a socket under a number of the program's choosing (dup3)
	 * has no Winsock counterpart, nor does epoll's registration that
	 * outlives a descriptor (what this test is about): a completion port
	 * holds a socket, not a number. */
	h_skip("no copy of a socket under a chosen number on Windows (dup3), nor epoll's stale "
	       "registration to guard against");
	goto out;
#else
	for (int round = 0; round < 2; round++) {
		tl_addr a;
		int lfd = raw_listener(&a);
		tl_handle lis, conn;
		tl_op aop;
		H_EQ_FATAL(tl_adopt(l, lfd, &lis), 0);
		/* Registered with the loop's poller once an accept waits. */
		H_EQ_FATAL(tl_accept(l, lis, 1, &aop), 0);
		h_turn(&c, 0);
		int copy = fcntl(lfd, F_DUPFD_CLOEXEC, 3);
		H_TRUE_FATAL(copy >= 0, "dup: %s", strerror(errno));
		h_close(&c, lis, 2);
		H_TRUE_FATAL(fd_closed(lfd), "the loop did not close the listener");
		/* Round 0: the copy under a number of its own; round 1: under the
		 * number the closed descriptor had. */
		int fd = copy;
		if (round == 1) {
			H_EQ_FATAL(dup3(copy, lfd, O_CLOEXEC), lfd);
			close(copy);
			fd = lfd;
		}
		int r = tl_adopt(l, fd, &lis);
		H_TRUE_FATAL(r == 0, "round %d: the copy of a closed listener: tl_adopt %d%s", round, r,
			     h_errname(r));
		H_EQ_FATAL(tl_accept(l, lis, 3, &aop), 0);
		int cfd = raw_connect(&a);
		int i = wait_ok(&c, aop);
		H_TRUE_FATAL(i >= 0, "round %d: no accept on the copy", round);
		conn = c.log.v[i].u.accept.conn;
		close(cfd);
		h_close(&c, conn, 4);
		h_close(&c, lis, 5);
		H_TRUE(fd_closed(fd), "the loop did not close the adopted copy");
	}
#endif
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: connected streams made outside the loop (TCP, and a Unix-domain
 * socketpair end) are adopted as streams: bytes the peer sent before the
 * adoption are what the first read gets, writes reach the plain peer, the
 * socket keeps its own options (no TCP_NODELAY forced on), and the loop
 * closes it at Closed (the peer sees the end of stream). */
static void test_adopt_stream(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_adopt(l))
		goto out;
	int s, p;
	raw_tcp_pair(&s, &p);
	int zero = 0;
	H_EQ(setsockopt(s, IPPROTO_TCP, TCP_NODELAY, (void *)&zero, sizeof zero), 0);
	/* Before the adoption: the loop must notice bytes already there. */
	H_EQ(raw_send(p, "early", 5), 0);
	h_sleep_ms(20);
	tl_handle h;
	H_EQ_FATAL(tl_adopt(l, s, &h), 0);
	expect_adopted_flags(s);
	int64_t v = -1;
	H_EQ(tl_sockopt_get(l, h, TL_SO_NODELAY, &v), 0);
	H_EQ(v, 0);
	tl_addr peer, pa;
	socklen_t plen = sizeof pa;
	H_EQ(getsockname(p, &pa.sa, &plen), 0);
	H_EQ(tl_peer_addr(l, h, &peer), 0);
	H_TRUE(h_addr_eq(&peer, &pa), "the adopted stream's peer is not the plain socket");
	char got[16] = {0};
	H_EQ(h_read_exact(&c, h, got, 5, NULL), 5);
	H_EQ(memcmp(got, "early", 5), 0);
	H_EQ(raw_send(p, "later", 5), 0);
	H_EQ(h_read_exact(&c, h, got, 5, NULL), 5);
	H_EQ(memcmp(got, "later", 5), 0);
	H_EQ(h_write_all(&c, h, "reply", 5), 5);
	H_EQ(raw_recv(p, got, 5), 5);
	H_EQ(memcmp(got, "reply", 5), 0);
	h_close(&c, h, 1);
	H_TRUE(fd_closed(s), "the loop did not close the adopted stream");
	H_EQ(raw_recv(p, got, 1), 0); /* end of stream */
	h_sock_close(p);

#ifdef _WIN32
	h_skip("a Unix-domain socketpair end: no AF_UNIX here (the TCP half ran)");
#else
	/* A Unix-domain socketpair end. */
	int sv[2];
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	H_EQ(raw_send(sv[1], "u1", 2), 0);
	H_EQ_FATAL(tl_adopt(l, sv[0], &h), 0);
	H_EQ(tl_sockopt_get(l, h, TL_SO_NODELAY, &v), -EINVAL); /* a Unix stream's options */
	H_EQ(tl_peer_addr(l, h, &peer), 0);
	H_EQ(peer.sa.sa_family, AF_UNIX);
	H_EQ(h_read_exact(&c, h, got, 2, NULL), 2);
	H_EQ(memcmp(got, "u1", 2), 0);
	H_EQ(h_write_all(&c, h, "u2", 2), 2);
	H_EQ(raw_recv(sv[1], got, 2), 2);
	H_EQ(memcmp(got, "u2", 2), 0);
	/* The peer's end reaches the loop as EOF. */
	close(sv[1]);
	int eof = 0;
	H_EQ(h_read_exact(&c, h, got, 1, &eof), 0);
	H_TRUE(eof, "no EOF on the adopted Unix stream");
	h_close(&c, h, 2);
	H_TRUE(fd_closed(sv[0]), "the loop did not close the adopted Unix stream");
#endif
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: a bound UDP socket and an unbound one are adopted as datagram
 * handles: the bound one receives a plain socket's datagram with its
 * source and answers it; the unbound one sends (the kernel binds it). */
static void test_adopt_udp(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_adopt(l))
		goto out;
	tl_addr a, pa;
	h_loopback(&a, AF_INET, 0);
	int u = raw_socket(AF_INET, SOCK_DGRAM), p = raw_socket(AF_INET, SOCK_DGRAM);
	H_TRUE_FATAL(u >= 0 && p >= 0, "socket: %s", sock_err());
	H_EQ_FATAL(bind(u, &a.sa, tl_addr_len(&a)), 0);
	H_EQ_FATAL(bind(p, &a.sa, tl_addr_len(&a)), 0);
	socklen_t len = sizeof a;
	H_EQ(getsockname(u, &a.sa, &len), 0);
	len = sizeof pa;
	H_EQ(getsockname(p, &pa.sa, &len), 0);
	tl_handle h, h2;
	tl_op op;
	H_EQ_FATAL(tl_adopt(l, u, &h), 0);
	expect_adopted_flags(u);
	tl_addr la;
	H_EQ(tl_local_addr(l, h, &la), 0);
	H_TRUE(h_addr_eq(&la, &a), "the adopted UDP socket's address changed");
	char buf[16] = {0};
	H_EQ_FATAL(tl_udp_recv(l, h, buf, sizeof buf, 1, &op), 0);
	H_EQ(sendto(p, "dgram", 5, 0, &a.sa, tl_addr_len(&a)), 5);
	int i = wait_ok(&c, op);
	H_TRUE_FATAL(i >= 0, "no datagram");
	H_EQ(c.log.v[i].result, 5);
	H_EQ(memcmp(buf, "dgram", 5), 0);
	H_TRUE(h_addr_eq(&c.log.v[i].u.recv.from, &pa), "wrong datagram source");
	H_EQ_FATAL(tl_udp_send(l, h, "back", 4, &pa, 2, &op), 0);
	H_TRUE(wait_ok(&c, op) >= 0, "send failed");
	H_TRUE(raw_wait(p, POLLIN), "no answer");
	H_EQ(raw_recv_now(p, buf, sizeof buf), 4);
	H_EQ(memcmp(buf, "back", 4), 0);
	/* Unbound: sending binds it. */
	int u2 = raw_socket(AF_INET, SOCK_DGRAM);
	H_EQ_FATAL(tl_adopt(l, u2, &h2), 0);
	H_EQ_FATAL(tl_udp_send(l, h2, "x", 1, &pa, 3, &op), 0);
	H_TRUE(wait_ok(&c, op) >= 0, "send from the unbound socket failed");
	H_TRUE(raw_wait(p, POLLIN), "no datagram from the unbound socket");
	H_EQ(raw_recv_now(p, buf, sizeof buf), 1);
	h_close(&c, h, 4);
	h_close(&c, h2, 5);
	H_TRUE(fd_closed(u) && fd_closed(u2), "the loop did not close the adopted UDP sockets");
	h_sock_close(p);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

#ifdef _WIN32
/* One refused adoption: rc, and no handle. (The socket stays the
 * caller's: the test closes each with closesocket at the end.) */
static void refuse(tl_loop *l, int fd, int want, const char *what)
{
	tl_handle h = TL_HANDLE_NONE;
	int rc = tl_adopt(l, fd, &h);
	H_TRUE(rc == want, "%s: tl_adopt %d%s, want %d%s", what, rc, h_errname(rc), want,
	       h_errname(want));
	H_EQ(h.v, 0);
}

/* Rule 4.6 and the error table, as Windows has them: a handle that is no
 * socket (a file, a pipe) is -ENOTSOCK, and so is a closed one (Winsock
 * tells a closed socket from a file by neither: WSAENOTSOCK for both,
 * where Linux says -EBADF); -1 and a missing place for the handle are
 * -EINVAL, and so is a TCP socket that neither listens nor is connected
 * (one whose connect was refused included); a full handle table is
 * -ENOBUFS; every socket stays the caller's (closesocket succeeds), and
 * nothing is left behind (h_end). The Unix-domain, SEQPACKET and netlink
 * kinds Linux refuses do not exist here. */
static void test_adopt_refused(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = 2;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	if (!need_adopt(l))
		goto out;
	HANDLE pr, pw;
	H_TRUE_FATAL(CreatePipe(&pr, &pw, NULL, 0), "CreatePipe: %lu", GetLastError());
	refuse(l, (int)(intptr_t)pr, -ENOTSOCK, "a pipe");
	char dir[MAX_PATH], name[MAX_PATH];
	H_TRUE_FATAL(GetTempPathA(sizeof dir, dir) && GetTempFileNameA(dir, "tla", 0, name),
		     "GetTempFileName: %lu", GetLastError());
	HANDLE file = CreateFileA(name, GENERIC_READ | GENERIC_WRITE, 0, NULL, CREATE_ALWAYS,
				  FILE_FLAG_DELETE_ON_CLOSE, NULL);
	H_TRUE_FATAL(file != INVALID_HANDLE_VALUE, "CreateFile: %lu", GetLastError());
	refuse(l, (int)(intptr_t)file, -ENOTSOCK, "a file");
	int dead = raw_socket(AF_INET, SOCK_DGRAM);
	h_sock_close(dead);
	tl_handle h;
	H_EQ(tl_adopt(l, dead, &h), -ENOTSOCK);
	H_EQ(tl_adopt(l, -1, &h), -EINVAL);
	int ok = raw_socket(AF_INET, SOCK_DGRAM);
	H_TRUE_FATAL(ok >= 0, "socket: %s", sock_err());
	H_EQ(tl_adopt(l, ok, NULL), -EINVAL);
	int st = raw_socket(AF_INET, SOCK_STREAM);
	refuse(l, st, -EINVAL, "an unconnected TCP socket");
	tl_addr a;
	int lfd = raw_listener(&a);
	int nb = raw_socket(AF_INET, SOCK_STREAM);
	h_sock_close(lfd);
	H_TRUE(connect((SOCKET)(intptr_t)nb, &a.sa, tl_addr_len(&a)) != 0,
	       "connect to a closed port succeeded");
	refuse(l, nb, -EINVAL, "a stream whose connect failed");
	tl_handle t1, t2;
	tl_op o1, o2;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 1, &t1, &o1), 0);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 2, &t2, &o2), 0);
	refuse(l, ok, -ENOBUFS, "with the handle table full");
	H_EQ(stats(l).handles, 2);
	h_close(&c, t1, 3);
	H_EQ(tl_adopt(l, ok, &h), 0);
	h_close(&c, h, 4);
	h_close(&c, t2, 5);
	H_EQ(h_sock_close(st), 0);
	H_EQ(h_sock_close(nb), 0);
	H_TRUE(CloseHandle(pr) && CloseHandle(pw) && CloseHandle(file), "the handles were not the caller's");
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}
#else
/* One refused adoption: rc, and fd untouched (open, flags as they were). */
static void refuse(tl_loop *l, int fd, int want, const char *what)
{
	int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
	tl_handle h = TL_HANDLE_NONE;
	int rc = tl_adopt(l, fd, &h);
	H_TRUE(rc == want, "%s: tl_adopt %d%s, want %d%s", what, rc, h_errname(rc), want,
	       h_errname(want));
	H_EQ(h.v, 0);
	expect_flags(fd, fl, fdfl);
}

/* Rule 4.6 and the error table: what the loop does not take is refused
 * with its code (not a socket: -ENOTSOCK; not open: -EBADF; a socket of a
 * kind it does not take: -EINVAL; a full handle table: -ENOBUFS), and the
 * descriptor stays the caller's, open and unchanged; nothing is left
 * behind (h_end). */
static void test_adopt_refused(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.max_handles = 2;
	h_ctx c;
	h_ctx_init(&c, h_loop_cfg(&cfg));
	tl_loop *l = c.loop;
	if (!need_adopt(l))
		goto out;
	int pfd[2];
	H_EQ_FATAL(pipe(pfd), 0);
	refuse(l, pfd[0], -ENOTSOCK, "a pipe");
	char tmpl[] = "/tmp/tl-adopt-file-XXXXXX";
	int file = mkstemp(tmpl);
	H_TRUE_FATAL(file >= 0, "mkstemp: %s", strerror(errno));
	unlink(tmpl);
	refuse(l, file, -ENOTSOCK, "a file");
	int dead = dup(file);
	close(dead);
	tl_handle h;
	H_EQ(tl_adopt(l, dead, &h), -EBADF);
	H_EQ(tl_adopt(l, -1, &h), -EINVAL);
	int ok = socket(AF_INET, SOCK_DGRAM, 0);
	H_EQ(tl_adopt(l, ok, NULL), -EINVAL);
	/* Stream sockets that neither listen nor are connected. */
	int st = socket(AF_INET, SOCK_STREAM, 0);
	refuse(l, st, -EINVAL, "an unconnected TCP socket");
	tl_addr a;
	int lfd = raw_listener(&a);
	int nb = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	/* A connect in progress to a listener that never accepts... may
	 * already be connected on loopback; only a refused one is certain. */
	close(lfd);
	int rc = connect(nb, &a.sa, tl_addr_len(&a));
	H_TRUE(rc < 0, "connect to a closed port succeeded");
	h_sleep_ms(10);
	refuse(l, nb, -EINVAL, "a stream whose connect failed");
	int us = socket(AF_UNIX, SOCK_STREAM, 0);
	refuse(l, us, -EINVAL, "an unconnected Unix stream");
	/* Kinds the loop has no handle for. */
	int ud = socket(AF_UNIX, SOCK_DGRAM, 0);
	refuse(l, ud, -EINVAL, "a Unix datagram socket");
	int sp[2];
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
	refuse(l, sp[0], -EINVAL, "a SEQPACKET socket");
	int nl = socket(AF_NETLINK, SOCK_RAW, 0);
	if (nl >= 0)
		refuse(l, nl, -EINVAL, "a netlink socket");
	/* The table is full: two handles are all there is. */
	tl_handle t1, t2;
	tl_op o1, o2;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 1, &t1, &o1), 0);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 2, &t2, &o2), 0);
	refuse(l, ok, -ENOBUFS, "with the handle table full");
	H_EQ(stats(l).handles, 2);
	h_close(&c, t1, 3);
	/* ... and the same socket is taken once there is room. */
	H_EQ(tl_adopt(l, ok, &h), 0);
	h_close(&c, h, 4);
	h_close(&c, t2, 5);
	int all[] = {pfd[0], pfd[1], file, st, nb, us, ud, sp[0], sp[1], nl};
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
		if (all[k] >= 0)
			H_EQ(close(all[k]), 0); /* each still the caller's */
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}
#endif

/* ---- Detach ---- */

/* Rule 4.6: detach is -EAGAIN while the handle has operations, cancelling
 * them (a pending read ends -ECANCELED), then 0 once the host saw their
 * terminals; the descriptor then works as a plain socket (read and write
 * with the OS calls, the loop's peer on the other end), the handle is
 * stale, no Closed ever comes for it, and the same loop can adopt it
 * again. */
static void test_detach_pending_reads(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle srv, cli;
	if (!need_handover(l))
		goto out;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	uint32_t handles0 = stats(l).handles;
	char buf[64];
	tl_op r1, r2;
	H_EQ_FATAL(tl_read(l, srv, buf, sizeof buf, 1, &r1), 0);
	H_EQ_FATAL(tl_read_start(l, srv, 2, &r2), 0);
	int fd = -7;
	H_EQ(tl_detach(l, srv, &fd), -EAGAIN);
	H_EQ(fd, -7);
	/* Its reads were cancelled by it: a cancel now finds them asked. */
	H_EQ(tl_cancel(l, r1), -EALREADY);
	int i1 = h_wait_op(&c, r1), i2 = h_wait_op(&c, r2);
	H_TRUE_FATAL(i1 >= 0 && i2 >= 0, "no terminals");
	H_EQ(c.log.v[i1].result, -ECANCELED);
	H_EQ(c.log.v[i2].result, -ECANCELED);
	int rc = tl_detach(l, srv, &fd);
	if (detach_refused_here(l, rc)) {
		/* Still the loop's, and it works both ways. */
		H_EQ(fd, -7);
		H_EQ(h_write_all(&c, cli, "to srv", 6), 6);
		H_EQ(h_read_exact(&c, srv, buf, 6, NULL), 6);
		H_EQ(memcmp(buf, "to srv", 6), 0);
		H_EQ(h_write_all(&c, srv, "to cli", 6), 6);
		H_EQ(h_read_exact(&c, cli, buf, 6, NULL), 6);
		H_EQ(memcmp(buf, "to cli", 6), 0);
		h_close(&c, srv, 4);
		h_close(&c, cli, 3);
		goto out;
	}
	H_EQ(rc, 0);
	H_TRUE_FATAL(fd >= 0, "fd %d", fd);
#ifdef _WIN32
	expect_adopted_flags_win(fd, 1); /* nothing sent to it yet */
#else
	expect_adopted_flags(fd);
#endif
	H_EQ(stats(l).handles, handles0 - 1);
	/* Stale from now on. */
	H_EQ(tl_detach(l, srv, &fd), -ENOENT);
	H_EQ(tl_close(l, srv, 9), -ENOENT);
	H_EQ(tl_read(l, srv, buf, sizeof buf, 1, &r1), -ENOENT);
	H_EQ(tl_handle_fd(l, srv), -ENOENT);
	/* A plain socket now: the loop's peer talks to it. */
	H_EQ(h_write_all(&c, cli, "to raw", 6), 6);
	H_EQ(raw_recv(fd, buf, 6), 6);
	H_EQ(memcmp(buf, "to raw", 6), 0);
	H_EQ(raw_send(fd, "from raw", 8), 0);
	H_EQ(h_read_exact(&c, cli, buf, 8, NULL), 8);
	H_EQ(memcmp(buf, "from raw", 8), 0);
	h_idle(&c, 20);
	H_EQ(h_find_closed(&c.log, srv), -1);
	/* Attached again, to the same loop: the loop forgot it entirely. */
	tl_handle again;
	H_EQ_FATAL(tl_adopt(l, fd, &again), 0);
	H_EQ(h_write_all(&c, cli, "back", 4), 4);
	H_EQ(h_read_exact(&c, again, buf, 4, NULL), 4);
	H_EQ(memcmp(buf, "back", 4), 0);
	h_close(&c, again, 4);
	H_TRUE(fd_closed(fd), "the loop did not close the re-adopted descriptor");
	int eof = 0;
	H_EQ(h_read_exact(&c, cli, buf, 1, &eof), 0);
	H_TRUE(eof, "no EOF after the re-adopted stream was closed");
	h_close(&c, cli, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: an accepted stream that has had no operation yet detaches
 * (turning while the driver asks for it): a plain socket from then on,
 * non-blocking, the loop's peer's bytes reach it and its bytes the peer,
 * its close is the peer's end of stream, and the handle is stale. On the
 * IOCP driver this is the detach that needs nothing of Windows 8.1: the
 * socket never joined the loop's completion port, so it passes under wine
 * too. */
static void test_detach_before_io(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle srv, cli;
	if (!need_handover(l))
		goto out;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	int fd = detach_wait(&c, srv);
	H_TRUE_FATAL(fd >= 0, "no descriptor for a stream that had no operation (%d)", fd);
#ifdef _WIN32
	expect_adopted_flags_win(fd, 1); /* nothing sent to it yet */
#else
	expect_adopted_flags(fd);
#endif
	H_EQ(tl_handle_fd(l, srv), -ENOENT);
	char buf[8];
	H_EQ(h_write_all(&c, cli, "plain", 5), 5);
	H_EQ(raw_recv(fd, buf, 5), 5);
	H_EQ(memcmp(buf, "plain", 5), 0);
	H_EQ(raw_send(fd, "back", 4), 0);
	H_EQ(h_read_exact(&c, cli, buf, 4, NULL), 4);
	H_EQ(memcmp(buf, "back", 4), 0);
	h_sock_close(fd);
	int eof = 0;
	H_EQ(h_read_exact(&c, cli, buf, 1, &eof), 0);
	H_TRUE(eof, "no EOF after the detached stream was closed");
	h_idle(&c, 20);
	H_EQ(h_find_closed(&c.log, srv), -1);
	h_close(&c, cli, 2);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: completions that name the handle and are still queued keep it
 * (-EAGAIN, and nothing is cancelled: the op had finished); once the host
 * has them, detach gives the descriptor. Also a listener and a UDP socket
 * detach and keep working as plain sockets. */
static void test_detach_queued_completions(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	tl_handle srv, cli;
	if (!need_handover(l))
		goto out;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op w1, w2;
	H_EQ_FATAL(tl_write(l, srv, "ab", 2, 1, &w1), 0);
	H_EQ_FATAL(tl_write(l, srv, "cd", 2, 2, &w2), 0);
	/* One completion per turn until the first write's is out. */
	tl_completion one;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	int first = 0;
	while (!first && h_wall_ns() < dl) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, &one, 1, NULL);
		H_TRUE_FATAL(n >= 0, "tl_turn %d", n);
		if (n == 1) {
			H_EQ(one.op.v, w1.v); /* writes complete in order */
			first = 1;
		}
	}
	H_TRUE_FATAL(first, "the first write did not complete");
	/* Both drivers finish the two writes together (epoll at submit, io_uring
	 * in one gathered send): the second's terminal waits in the queue. */
	int fd = -1, queued = 1;
#ifdef _WIN32
	/* The IOCP driver sends a stream's writes one after the other: the
	 * second's terminal comes at a later turn, none waits queued here. */
	if (!stats(l).queued && strcmp(tl_loop_driver(l), "iocp") == 0) {
		queued = 0;
		h_skip("a detach while a terminal waits queued: the IOCP driver ends a stream's two "
		       "writes one after the other (the rest of the test ran)");
	}
#endif
	if (queued) {
		H_TRUE_FATAL(stats(l).queued > 0, "the second write's terminal is not queued");
		H_EQ(tl_detach(l, srv, &fd), -EAGAIN);
		H_EQ(fd, -1);
	}
	int i = h_wait_op(&c, w2);
	H_TRUE_FATAL(i >= 0, "no terminal for the second write");
	H_EQ(c.log.v[i].result, 2); /* finished, not cancelled by the detach */
	fd = detach_wait(&c, srv);
	H_TRUE_FATAL(fd >= 0 || fd == -2, "no descriptor");
	char buf[8];
	H_EQ(h_read_exact(&c, cli, buf, 4, NULL), 4);
	H_EQ(memcmp(buf, "abcd", 4), 0);
	if (fd == -2) { /* not detached here: still the loop's, and it works */
		H_EQ(h_write_all(&c, srv, "ef", 2), 2);
		H_EQ(h_read_exact(&c, cli, buf, 2, NULL), 2);
		H_EQ(memcmp(buf, "ef", 2), 0);
		h_close(&c, srv, 8);
	} else {
		h_sock_close(fd);
	}
	h_close(&c, cli, 6);

	/* A listener with a multishot accept, and a UDP socket. */
	tl_handle lis, u;
	tl_addr la, ua;
	tl_op aop;
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ_FATAL(tl_accept_start(l, lis, 7, &aop), 0);
	int lfd = detach_wait(&c, lis);
	i = h_find_term(&c.log, aop);
	H_TRUE(i >= 0 && c.log.v[i].result == -ECANCELED, "the accept did not end cancelled");
	int cfd = raw_connect(&la);
	if (lfd == -2) { /* not detached here: the loop's listener still accepts */
		H_EQ_FATAL(tl_accept(l, lis, 9, &aop), 0);
		i = wait_ok(&c, aop);
		H_TRUE(i >= 0, "no accept on the listener after the refused detach");
		if (i >= 0)
			h_close(&c, c.log.v[i].u.accept.conn, 10);
		h_close(&c, lis, 11);
	} else {
		H_TRUE(raw_wait(lfd, POLLIN), "the detached listener has no connection");
		int afd = raw_accept(lfd);
		H_TRUE(afd >= 0, "accept on the detached listener: %s", sock_err());
		h_sock_close(afd);
		h_sock_close(lfd);
	}
	h_sock_close(cfd);
	h_loopback(&ua, AF_INET, 0);
	H_EQ_FATAL(tl_udp_bind(l, &ua, &u), 0);
	H_EQ(tl_local_addr(l, u, &ua), 0);
	int ufd = detach_wait(&c, u);
	int p = raw_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC);
	H_EQ(sendto(p, "q", 1, 0, &ua.sa, tl_addr_len(&ua)), 1);
	if (ufd == -2) { /* not detached here: the loop's UDP socket still receives */
		tl_op rop;
		H_EQ_FATAL(tl_udp_recv(l, u, buf, sizeof buf, 12, &rop), 0);
		i = wait_ok(&c, rop);
		H_TRUE(i >= 0 && c.log.v[i].result == 1, "no datagram after the refused detach");
		h_close(&c, u, 13);
	} else {
		H_TRUE(raw_wait(ufd, POLLIN), "the detached UDP socket got nothing");
		H_EQ(raw_recv_now(ufd, buf, sizeof buf), 1);
		h_sock_close(ufd);
	}
	h_sock_close(p);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6 and the error table: detach of a timer, of a closing handle and
 * without a place for the descriptor is -EINVAL; a stale or foreign handle
 * is -ENOENT; none of them changes anything. */
static void test_detach_refused(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop, *other = h_loop();
	tl_handle srv, cli, tm, otm;
	tl_op top, otop;
	int fd = -1;
	if (!need_handover(l))
		goto out;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	H_EQ(tl_detach(l, srv, NULL), -EINVAL);
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 1, &tm, &top), 0);
	H_EQ(tl_detach(l, tm, &fd), -EINVAL);
	H_EQ_FATAL(tl_timer_start(other, tl_now(other) + 3600000 * H_MS, 0, 1, &otm, &otop), 0);
	H_EQ(tl_detach(l, otm, &fd), -ENOENT);
	H_EQ(tl_detach(l, (tl_handle){srv.v ^ (1ull << 24)}, &fd), -ENOENT);
	H_EQ(tl_close(other, otm, 0), 0);
	H_EQ(tl_close(l, srv, 2), 0);
	H_EQ(tl_detach(l, srv, &fd), -EINVAL);
	H_EQ(fd, -1);
	H_TRUE(h_wait_closed(&c, srv) >= 0, "no Closed"); /* closing went on as usual */
	H_EQ(tl_detach(l, srv, &fd), -ENOENT);
	h_close(&c, tm, 3);
	h_close(&c, cli, 4);
out:
	h_drain_close(other);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- A stream moved between loops mid-stream ---- */

#define MOVE_TOTAL (3u << 20)
#define MOVE_AT (1u << 20)
#define MOVE_CHUNK (64u << 10)

struct mover {
	h_ctx *c;
	tl_handle h;
	uint64_t off; /* bytes checked so far */
	uint32_t from;
	int bad, eof;
};

/* Check the reads of m->h in m->c's log since m->from against the pattern
 * and release their leases. */
static void mover_scan(struct mover *m)
{
	for (; m->from < m->c->log.n; m->from++) {
		tl_completion *x = &m->c->log.v[m->from];
		if (x->handle.v != m->h.v || x->kind != TL_K_READ)
			continue;
		if (x->result > 0) {
			const uint8_t *d = x->u.read.lease.data;
			long k = check_pattern(d, (size_t)x->result, m->off);
			if (k >= 0 && m->bad++ == 0)
				fprintf(stderr, "  byte %llu differs\n",
					(unsigned long long)(m->off + (uint64_t)k));
			m->off += (uint64_t)x->result;
		}
		if (x->flags & TL_F_LEASE) {
			H_EQ(tl_lease_release(m->c->loop, x->u.read.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
		if (x->flags & TL_F_EOF)
			m->eof = 1;
	}
}

static int pred_moved_enough(void *p)
{
	struct mover *m = p;
	mover_scan(m);
	return m->off >= MOVE_AT || m->bad;
}

static int pred_mover_eof(void *p)
{
	struct mover *m = p;
	mover_scan(m);
	return m->eof || m->bad;
}

/* Rule 4.6: a stream that has carried a megabyte is detached from one loop
 * mid-stream (its read stopped, its bytes still arriving), adopted by a
 * second loop, and read there to the end: every byte of the pattern
 * arrives once and in order across the move, and the second loop's answer
 * reaches the peer. */
static void test_detach_adopt_mid_stream(void)
{
	int fds = h_begin();
	h_ctx a, b;
	h_ctx_init(&a, h_loop());
	h_ctx_init(&b, h_loop());
	h_ctx_link(&a, &b);
	tl_loop *la = a.loop, *lb = b.loop;
	uint8_t *src = NULL;
	if (!need_handover(la))
		goto out;
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&a, &a, AF_INET, &srv, &cli), 0);
	src = malloc(MOVE_TOTAL);
	H_TRUE_FATAL(src != NULL, "malloc");
	fill_pattern(src, MOVE_TOTAL, 0);
	/* The client queues the whole stream, then its end. */
	tl_op w, sh, rop;
	for (uint32_t off = 0; off < MOVE_TOTAL; off += MOVE_CHUNK)
		H_EQ_FATAL(tl_write(la, cli, src + off, MOVE_CHUNK, 10, &w), 0);
	H_EQ_FATAL(tl_shutdown(la, cli, 11, &sh), 0);
	struct mover m = {.c = &a, .h = srv};
	H_EQ_FATAL(tl_read_start(la, srv, 12, &rop), 0);
	H_TRUE_FATAL(h_until(&a, pred_moved_enough, &m, H_SLOW_MS(10000)) && !m.bad,
		     "the first loop read %llu bytes", (unsigned long long)m.off);
	/* Move it: stop the read, take what it had read, detach. */
	H_EQ(tl_stop(la, rop), 0);
	int fd = detach_wait(&a, srv);
	H_TRUE_FATAL(fd >= 0 || fd == -2, "no descriptor");
	mover_scan(&m);
	if (fd == -2) {
		/* Not detached here: still the first loop's, which reads on to
		 * the end, every byte once and in order, and answers. */
		H_TRUE(h_find_term(&a.log, rop) >= 0, "the read's terminal came after the detach");
		H_EQ_FATAL(tl_read_start(la, srv, 13, &rop), 0);
		H_TRUE(h_until(&a, pred_mover_eof, &m, H_SLOW_MS(20000)), "no EOF after the refused detach");
		H_EQ(m.bad, 0);
		H_EQ(m.off, MOVE_TOTAL);
		H_EQ(h_write_all(&a, srv, "done", 4), 4);
		char got[4];
		H_EQ(h_read_exact(&a, cli, got, 4, NULL), 4);
		H_EQ(memcmp(got, "done", 4), 0);
		H_TRUE(h_wait_op(&a, sh) >= 0, "no shutdown");
		h_close(&a, srv, 14);
		h_close(&a, cli, 15);
		h_release_leases(&a, 0);
		goto out;
	}
	H_TRUE(h_find_term(&a.log, rop) >= 0, "the read's terminal came after the detach");
	uint64_t moved_at = m.off;
	H_TRUE(moved_at < MOVE_TOTAL, "everything was read before the move (%llu)",
	       (unsigned long long)moved_at);
	tl_handle h2;
	H_EQ_FATAL(tl_adopt(lb, fd, &h2), 0);
	struct mover m2 = {.c = &b, .h = h2, .off = moved_at};
	H_EQ_FATAL(tl_read_start(lb, h2, 13, &rop), 0);
	H_TRUE(h_until(&b, pred_mover_eof, &m2, H_SLOW_MS(20000)), "no EOF on the second loop");
	H_EQ(m2.bad, 0);
	H_EQ(m2.off, MOVE_TOTAL);
	/* The answer goes back from the second loop. */
	H_EQ(h_write_all(&b, h2, "done", 4), 4);
	char got[4];
	H_EQ(h_read_exact(&a, cli, got, 4, NULL), 4);
	H_EQ(memcmp(got, "done", 4), 0);
	H_TRUE(h_wait_op(&a, sh) >= 0, "no shutdown");
	h_close(&b, h2, 14);
	h_close(&a, cli, 15);
	h_release_leases(&a, 0);
	h_release_leases(&b, 0);
out:
	free(src);
	h_drain_close(lb);
	h_ctx_fini(&b);
	h_ctx_fini(&a);
	h_end(la, fds);
}

/* Passing descriptors (SCM_RIGHTS over Unix-domain streams, child
 * processes) and a listening socket shared by two loops through a copy of
 * its descriptor have no Windows counterpart in the runtime (no AF_UNIX
 * under wine, no tl_send_fds on the IOCP driver): Linux only. */
#ifndef _WIN32
/* ---- Passing descriptors ---- */

/* The descriptor count of a received message of op in c's log, with its
 * terminal's result checked: the index, or -1. */
static int wait_recv_fds(h_ctx *c, tl_op op, int64_t want_bytes, uint32_t want_fds)
{
	int i = h_wait_op(c, op);
	if (i < 0)
		return -1;
	const tl_completion *x = &c->log.v[i];
	H_EQ(x->kind, TL_K_READ);
	H_EQ(x->result, want_bytes);
	H_EQ(x->aux, want_fds);
	return i;
}

/* Same open file (device and inode)? */
static int same_file(int a, int b)
{
	struct stat sa, sb;
	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/* Rule 4.6: descriptors sent with tl_send_fds arrive with tl_recv_fds as
 * new close-on-exec descriptors of the same files, with their payload, in
 * order with the stream's plain writes and reads on either side; the
 * sender's descriptors stay its own; TL_FDS_MAX of them go in one message;
 * a plain write between carries none. */
static void test_pass_fds_in_order(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_handover(l))
		goto out;
	tl_handle a, b;
	adopt_unix_pair(l, l, &a, &b);
	int pfd[2];
	H_EQ_FATAL(pipe(pfd), 0);
	tl_op w1, s1, w2, r1, r2, r3;
	H_EQ_FATAL(tl_write(l, a, "A", 1, 1, &w1), 0);
	int sendv[1] = {pfd[1]};
	H_EQ_FATAL(tl_send_fds(l, a, sendv, 1, "BB", 2, 2, &s1), 0);
	sendv[0] = -1; /* the array was copied */
	H_EQ_FATAL(tl_write(l, a, "C", 1, 3, &w2), 0);
	int got[TL_FDS_MAX];
	char buf[8] = {0}, buf2[8] = {0}, buf3[8] = {0};
	H_EQ_FATAL(tl_recv_fds(l, b, got, TL_FDS_MAX, buf, 1, 4, &r1), 0);
	H_EQ_FATAL(tl_recv_fds(l, b, got + 4, 4, buf2, 2, 5, &r2), 0);
	H_EQ_FATAL(tl_recv_fds(l, b, got + 8, 4, buf3, 8, 6, &r3), 0);
	H_TRUE(wait_recv_fds(&c, r1, 1, 0) >= 0, "first");
	int i = wait_recv_fds(&c, r2, 2, 1);
	H_TRUE(wait_recv_fds(&c, r3, 1, 0) >= 0, "third");
	H_EQ(memcmp(buf, "A", 1), 0);
	H_EQ(memcmp(buf2, "BB", 2), 0);
	H_EQ(memcmp(buf3, "C", 1), 0);
	int ws = h_find_term(&c.log, s1);
	H_TRUE(ws >= 0 && c.log.v[ws].kind == TL_K_WRITE && c.log.v[ws].result == 2,
	       "send_fds terminal");
	H_TRUE(h_find_term(&c.log, w1) < ws && ws < h_find_term(&c.log, w2),
	       "the writes and the send did not complete in order");
	if (i >= 0) {
		int r = got[4];
		H_TRUE(r >= 0 && r != pfd[1], "received descriptor %d", r);
		H_TRUE(same_file(r, pfd[1]), "the received descriptor is another file");
		H_TRUE(fcntl(r, F_GETFD) & FD_CLOEXEC, "the received descriptor is not close-on-exec");
		/* It works: write into the pipe through it. */
		H_EQ(write(r, "z", 1), 1);
		char z = 0;
		H_EQ(read(pfd[0], &z, 1), 1);
		H_EQ(z, 'z');
		close(r);
	}
	H_TRUE(!fd_closed(pfd[1]), "the sender's descriptor was closed");

	/* TL_FDS_MAX descriptors in one message. */
	int many[TL_FDS_MAX];
	for (int k = 0; k < TL_FDS_MAX; k++)
		many[k] = k & 1 ? pfd[0] : pfd[1];
	tl_op s2, r4;
	H_EQ_FATAL(tl_send_fds(l, a, many, TL_FDS_MAX, "M", 1, 7, &s2), 0);
	H_EQ_FATAL(tl_recv_fds(l, b, got, TL_FDS_MAX, buf, sizeof buf, 8, &r4), 0);
	i = wait_recv_fds(&c, r4, 1, TL_FDS_MAX);
	if (i >= 0)
		for (int k = 0; k < TL_FDS_MAX; k++) {
			H_TRUE(same_file(got[k], many[k]), "descriptor %d is another file", k);
			close(got[k]);
		}
	H_TRUE(wait_ok(&c, s2) >= 0, "send of %d", TL_FDS_MAX);
	/* The end of the stream: 0 with TL_F_EOF and no descriptor. */
	h_close(&c, a, 9);
	H_EQ_FATAL(tl_recv_fds(l, b, got, 1, buf, sizeof buf, 10, &r4), 0);
	i = wait_recv_fds(&c, r4, 0, 0);
	H_TRUE(i >= 0 && (c.log.v[i].flags & TL_F_EOF), "no EOF");
	h_close(&c, b, 11);
	close(pfd[0]);
	close(pfd[1]);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: with plain bytes, descriptors and more plain bytes all waiting,
 * a receive reads the plain bytes before the descriptors' payload and ends
 * with it, and the bytes after come with the next receive, on every read
 * form: descriptors sent to a plain tl_read are closed by the kernel and
 * the stream goes on. */
static void test_pass_fds_glued(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_handover(l))
		goto out;
	tl_handle a, b;
	adopt_unix_pair(l, l, &a, &b);
	int one[1] = {STDERR_FILENO}, got[4];
	char buf[16];
	tl_op r;
	for (int round = 0; round < 2; round++) {
		const char *m = round ? "DEEF" : "ABBC";
		tl_op w1, s, w2;
		H_EQ_FATAL(tl_write(l, a, m, 1, 1, &w1), 0);
		H_EQ_FATAL(tl_send_fds(l, a, one, 1, m + 1, 2, 2, &s), 0);
		H_EQ_FATAL(tl_write(l, a, m + 3, 1, 3, &w2), 0);
		H_TRUE(wait_ok(&c, w1) >= 0 && wait_ok(&c, s) >= 0 && wait_ok(&c, w2) >= 0,
		       "writes");
		h_idle(&c, 5);
		int fds_sent = h_fd_count();
		memset(buf, 0, sizeof buf);
		if (round == 0) {
			H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 4, &r), 0);
			int i = wait_recv_fds(&c, r, 3, 1);
			if (i >= 0)
				close(got[0]);
			H_EQ(memcmp(buf, "ABB", 3), 0);
			H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 5, &r), 0);
			H_TRUE(wait_recv_fds(&c, r, 1, 0) >= 0, "the byte after");
			H_EQ(buf[0], 'C');
		} else {
			/* A stream that had a descriptor receive, read plainly:
			 * the first read is short with a byte still waiting. */
			tl_op p1, p2;
			H_EQ_FATAL(tl_read(l, b, buf, sizeof buf, 8, &p1), 0);
			int i = h_wait_op(&c, p1);
			H_TRUE(i >= 0 && c.log.v[i].result == 3 && c.log.v[i].aux == 0,
			       "plain read of the descriptors' payload");
			H_EQ(memcmp(buf, "DEE", 3), 0);
			H_EQ_FATAL(tl_read(l, b, buf, sizeof buf, 9, &p2), 0);
			i = h_wait_op(&c, p2);
			H_TRUE(i >= 0 && c.log.v[i].result == 1, "the byte after a plain read");
			H_EQ(buf[0], 'F');
		}
		H_EQ(h_fd_count(), fds_sent);
	}
	h_close(&c, a, 6);
	h_close(&c, b, 7);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6 and the error table: descriptor passing on what is not a
 * Unix-domain stream, with bad arguments, on stale or closing handles is
 * refused with its code; a descriptor that is not open fails the send
 * (-EBADF) and sends nothing; more descriptors than the receive takes, or
 * more than the kernel could hand over, are closed, -EMSGSIZE (h_end:
 * none leaks). On the simulation driver both calls are -ENOTSUP. */
static void test_pass_fds_refused(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	int one[1] = {0}, got[TL_FDS_MAX];
	char buf[8];
	tl_op op;
	if (!(tl_loop_caps(l) & TL_CAP_DETACH) && (tl_loop_caps(l) & TL_CAP_UNIX)) {
		/* A Unix-domain pair of the driver's own. */
		char dir[] = "/tmp/tl-fds-XXXXXX", path[96];
		H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
		snprintf(path, sizeof path, "%s/s", dir);
		tl_handle lis, cli, srv;
		tl_op aop, cop;
		H_EQ_FATAL(tl_unix_listen(l, path, NULL, &lis), 0);
		H_EQ_FATAL(tl_accept(l, lis, 1, &aop), 0);
		H_EQ_FATAL(tl_unix_connect(l, path, 0, 2, &cli, &cop), 0);
		int ia = wait_ok(&c, aop);
		H_TRUE_FATAL(ia >= 0 && wait_ok(&c, cop) >= 0, "no Unix pair");
		srv = c.log.v[ia].u.accept.conn;
		H_EQ(tl_send_fds(l, cli, one, 1, "x", 1, 3, &op), -ENOTSUP);
		H_EQ(tl_recv_fds(l, srv, got, 1, buf, 1, 4, &op), -ENOTSUP);
		h_close(&c, cli, 5);
		h_close(&c, srv, 6);
		h_close(&c, lis, 7);
		if (unlink(path) != 0)
			H_EQ(errno, ENOENT); /* the simulation driver makes no file */
		H_EQ(rmdir(dir), 0);
	}
	if (!need_handover(l))
		goto out;
	tl_handle a, b, tsrv, tcli, u, tm;
	adopt_unix_pair(l, l, &a, &b);
	one[0] = STDERR_FILENO;
	/* Arguments. */
	H_EQ(tl_send_fds(l, a, one, 1, "x", 1, 1, NULL), -EINVAL);
	H_EQ(tl_send_fds(l, a, NULL, 1, "x", 1, 1, &op), -EINVAL);
	H_EQ(tl_send_fds(l, a, one, 0, "x", 1, 1, &op), -EINVAL);
	H_EQ(tl_send_fds(l, a, one, TL_FDS_MAX + 1, "x", 1, 1, &op), -EINVAL);
	H_EQ(tl_send_fds(l, a, one, 1, NULL, 1, 1, &op), -EINVAL);
	H_EQ(tl_send_fds(l, a, one, 1, "x", 0, 1, &op), -EINVAL);
	int neg[2] = {STDERR_FILENO, -1};
	H_EQ(tl_send_fds(l, a, neg, 2, "x", 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, b, got, 1, buf, 1, 1, NULL), -EINVAL);
	H_EQ(tl_recv_fds(l, b, NULL, 1, buf, 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, b, got, 0, buf, 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, b, got, TL_FDS_MAX + 1, buf, 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, b, got, 1, NULL, 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, b, got, 1, buf, 0, 1, &op), -EINVAL);
	/* Handles that are not Unix-domain streams, stale, foreign. */
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &tsrv, &tcli), 0);
	H_EQ(tl_send_fds(l, tcli, one, 1, "x", 1, 1, &op), -EINVAL);
	H_EQ(tl_recv_fds(l, tsrv, got, 1, buf, 1, 1, &op), -EINVAL);
	tl_addr ua;
	h_loopback(&ua, AF_INET, 0);
	H_EQ_FATAL(tl_udp_bind(l, &ua, &u), 0);
	H_EQ(tl_send_fds(l, u, one, 1, "x", 1, 1, &op), -EINVAL);
	tl_op top;
	H_EQ_FATAL(tl_timer_start(l, in_ms(l, 3600000), 0, 1, &tm, &top), 0);
	H_EQ(tl_recv_fds(l, tm, got, 1, buf, 1, 1, &op), -EINVAL);
	H_EQ(tl_send_fds(l, (tl_handle){a.v ^ (1ull << 40)}, one, 1, "x", 1, 1, &op), -ENOENT);
	h_close(&c, tsrv, 2);
	h_close(&c, tcli, 3);
	h_close(&c, u, 4);
	h_close(&c, tm, 5);
	/* A descriptor that is not open: the send fails, nothing went. */
	int dead = dup(STDERR_FILENO);
	close(dead);
	int bad[2] = {STDERR_FILENO, dead};
	tl_op s, r;
	H_EQ_FATAL(tl_send_fds(l, a, bad, 2, "bad", 3, 6, &s), 0);
	int i = h_wait_op(&c, s);
	H_TRUE(i >= 0 && c.log.v[i].result == -EBADF, "send with a closed descriptor: %lld",
	       i >= 0 ? (long long)c.log.v[i].result : 0ll);
	/* More descriptors than the receive takes: closed, -EMSGSIZE. */
	int three[3] = {STDERR_FILENO, STDERR_FILENO, STDERR_FILENO};
	int fds_before = h_fd_count();
	H_EQ_FATAL(tl_send_fds(l, a, three, 3, "3", 1, 7, &s), 0);
	H_EQ_FATAL(tl_recv_fds(l, b, got, 2, buf, sizeof buf, 8, &r), 0);
	H_TRUE(wait_ok(&c, s) >= 0, "send of three");
	i = h_wait_op(&c, r);
	H_TRUE(i >= 0 && c.log.v[i].result == -EMSGSIZE && c.log.v[i].aux == 0,
	       "three descriptors into room for two: %lld",
	       i >= 0 ? (long long)c.log.v[i].result : 0ll);
	H_EQ(h_fd_count(), fds_before);
	/* Far more than TL_FDS_MAX from a plain sendmsg: more than the control
	 * buffer holds, so the kernel cuts them (MSG_CTRUNC); the loop closes
	 * what came. */
	int x[2];
	tl_handle bx;
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x), 0);
	H_EQ_FATAL(tl_adopt(l, x[0], &bx), 0);
	int raw = x[1];
	int lots[64];
	for (int k = 0; k < 64; k++)
		lots[k] = STDERR_FILENO;
	union {
		char b[CMSG_SPACE(sizeof lots)];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec v = {"L", 1};
	struct msghdr mh = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b,
			    .msg_controllen = sizeof ctl.b};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof lots);
	memcpy(CMSG_DATA(cm), lots, sizeof lots);
	int fds_pair = h_fd_count();
	H_EQ(sendmsg(raw, &mh, MSG_NOSIGNAL), 1);
	H_EQ_FATAL(tl_recv_fds(l, bx, got, TL_FDS_MAX, buf, sizeof buf, 9, &r), 0);
	i = h_wait_op(&c, r);
	H_TRUE(i >= 0 && c.log.v[i].result == -EMSGSIZE, "a cut message: %lld",
	       i >= 0 ? (long long)c.log.v[i].result : 0ll);
	H_EQ(h_fd_count(), fds_pair);
	h_close(&c, bx, 12);
	close(raw);
	/* Closing: refused. */
	H_EQ(tl_close(l, a, 10), 0);
	H_EQ(tl_send_fds(l, a, one, 1, "x", 1, 1, &op), -EINVAL);
	H_TRUE(h_wait_closed(&c, a) >= 0, "no Closed");
	H_EQ(tl_send_fds(l, a, one, 1, "x", 1, 1, &op), -ENOENT);
	h_close(&c, b, 11);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6 with 2.1 and 2.3: a pending receive of descriptors that is
 * cancelled, or whose handle closes, ends -ECANCELED with none, and the
 * message it would have taken stays for the next receive; descriptors of a
 * completion the loop never hands out (destroyed with it queued) are
 * closed by the loop: the descriptor count comes back to where it started. */
static void test_recv_fds_cancel_no_leak(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_handover(l))
		goto out;
	tl_handle a, b;
	adopt_unix_pair(l, l, &a, &b);
	int got[4] = {-1, -1, -1, -1};
	char buf[8];
	tl_op r, s;
	H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 1, &r), 0);
	h_idle(&c, 5); /* into the kernel where the driver does that */
	H_EQ(tl_cancel(l, r), 0);
	int i = h_wait_op(&c, r);
	H_TRUE(i >= 0 && c.log.v[i].result == -ECANCELED && c.log.v[i].aux == 0,
	       "cancelled receive");
	int one[1] = {STDERR_FILENO};
	H_EQ_FATAL(tl_send_fds(l, a, one, 1, "k", 1, 2, &s), 0);
	H_TRUE(wait_ok(&c, s) >= 0, "send");
	H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 3, &r), 0);
	i = wait_recv_fds(&c, r, 1, 1);
	if (i >= 0) {
		H_TRUE(same_file(got[0], STDERR_FILENO), "not the file sent");
		close(got[0]);
	}
	/* Closed with a receive pending. */
	H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 4, &r), 0);
	h_idle(&c, 5);
	H_EQ(tl_close(l, b, 5), 0);
	i = h_wait_op(&c, r);
	H_TRUE(i >= 0 && c.log.v[i].result == -ECANCELED && c.log.v[i].aux == 0,
	       "receive of a closed handle");
	H_TRUE(h_wait_closed(&c, b) >= 0, "no Closed");
	h_close(&c, a, 6);
	h_ctx_fini(&c);
	h_end(l, fds);

	/* A completion with a descriptor, still queued when the loop goes. */
	fds = h_begin();
	l = h_loop();
	h_ctx_init(&c, l);
	adopt_unix_pair(l, l, &a, &b);
	H_EQ_FATAL(tl_send_fds(l, a, one, 1, "q", 1, 7, &s), 0);
	tl_completion x;
	int seen_send = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!seen_send && h_wall_ns() < dl) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, &x, 1, NULL);
		seen_send = n == 1 && x.op.v == s.v;
	}
	H_TRUE_FATAL(seen_send, "the send did not complete");
	/* A write queued first, then the receive: one completion out, the
	 * receive's (with its descriptor) left queued. */
	tl_op w;
	H_EQ_FATAL(tl_write(l, b, "w", 1, 8, &w), 0);
	H_EQ_FATAL(tl_recv_fds(l, b, got, 4, buf, sizeof buf, 9, &r), 0);
	int out1 = 0;
	dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (h_wall_ns() < dl && out1 == 0) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, &x, 1, NULL);
		if (n == 1) {
			out1++;
			H_TRUE(x.op.v == w.v, "the receive came out first (op %#llx)",
			       (unsigned long long)x.op.v);
			if (x.op.v == r.v)
				for (uint32_t k = 0; k < x.aux; k++)
					close(got[k]);
		}
	}
	H_EQ(out1, 1);
	H_TRUE(stats(l).queued >= 1, "nothing left queued");
	tl_loop_destroy(l);
	h_ctx_fini(&c);
	h_end(NULL, fds);
	return;
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- Between processes ---- */

/* What the child does with the socket it receives. */
enum { CHILD_ECHO_STREAM = 1, CHILD_GREET_LISTENER = 2 };

/* The child: its own loop; receive one descriptor over sock (a Unix
 * stream), adopt it, and serve it as mode says. Returns the exit status:
 * 0, or the step that failed. */
static int child_main(int sock, int mode)
{
	alarm(30);
	tl_loop *l;
	if (tl_loop_new(&l, NULL) != 0)
		return 10;
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle us, h;
	if (tl_adopt(l, sock, &us) != 0)
		return 11;
	int got[2] = {-1, -1};
	char tag[1];
	tl_op op;
	if (tl_recv_fds(l, us, got, 2, tag, 1, 1, &op) != 0)
		return 12;
	int i = h_wait_op(&c, op);
	if (i < 0 || c.log.v[i].result != 1 || c.log.v[i].aux != 1)
		return 13;
	if (!(fcntl(got[0], F_GETFD) & FD_CLOEXEC))
		return 14;
	if (tl_adopt(l, got[0], &h) != 0)
		return 15;
	char buf[16];
	if (mode == CHILD_ECHO_STREAM) {
		if (tag[0] != 'S' || h_read_exact(&c, h, buf, 4, NULL) != 4 ||
		    memcmp(buf, "ping", 4) != 0)
			return 16;
		if (h_write_all(&c, h, "child:pong", 10) != 10)
			return 17;
	} else {
		tl_op aop;
		if (tag[0] != 'L' || tl_accept(l, h, 2, &aop) != 0)
			return 18;
		i = h_wait_op(&c, aop);
		if (i < 0 || c.log.v[i].result < 0)
			return 19;
		tl_handle conn = c.log.v[i].u.accept.conn;
		if (h_write_all(&c, conn, "child:hello", 11) != 11)
			return 20;
		if (tl_close(l, conn, 3) != 0 || h_wait_closed(&c, conn) < 0)
			return 21;
	}
	if (tl_close(l, h, 4) != 0 || h_wait_closed(&c, h) < 0 || tl_close(l, us, 5) != 0 ||
	    h_wait_closed(&c, us) < 0)
		return 22;
	if (tl_loop_close(l) != 0)
		return 23;
	return 0;
}

/* Fork a child that runs child_main on the other end of a socketpair;
 * *ours is adopted into c's loop. Returns the child's pid. */
static pid_t start_child(h_ctx *c, int mode, tl_handle *ours)
{
	int sv[2];
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fflush(NULL);
	pid_t pid = fork();
	H_TRUE_FATAL(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		_exit(child_main(sv[1], mode));
	}
	close(sv[1]);
	H_EQ_FATAL(tl_adopt(c->loop, sv[0], ours), 0);
	return pid;
}

static void expect_child_ok(pid_t pid)
{
	int st = 0;
	H_EQ(waitpid(pid, &st, 0), pid);
	H_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed: status %#x (step %d)",
	       st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Pass descriptor fd (then closed here) with tag over us. */
static void pass(h_ctx *c, tl_handle us, int fd, char tag)
{
	tl_op op;
	int one[1] = {fd};
	H_EQ_FATAL(tl_send_fds(c->loop, us, one, 1, &tag, 1, 0x5e, &op), 0);
	int i = h_wait_op(c, op);
	H_TRUE(i >= 0 && c->log.v[i].result == 1, "send_fds");
	H_EQ(close(fd), 0); /* ours to close once it went */
}

/* Rule 4.6: a connected TCP stream accepted by this process's loop is
 * detached and passed over a Unix-domain socket to another process, which
 * receives it with tl_recv_fds, adopts it and answers on it: the peer here
 * gets the answer. */
static void test_pass_stream_to_child(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_handover(l))
		goto out;
	tl_handle lis, conn, us;
	tl_addr la;
	tl_op aop;
	/* The child first: it inherits none of the sockets below. */
	pid_t pid = start_child(&c, CHILD_ECHO_STREAM, &us);
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	H_EQ_FATAL(tl_accept(l, lis, 1, &aop), 0);
	int cfd = raw_connect(&la);
	int i = wait_ok(&c, aop);
	H_TRUE_FATAL(i >= 0, "no accept");
	conn = c.log.v[i].u.accept.conn;
	h_close(&c, lis, 2);
	int fd = detach_wait(&c, conn);
	H_TRUE_FATAL(fd >= 0, "no descriptor");
	pass(&c, us, fd, 'S');
	H_EQ(raw_send(cfd, "ping", 4), 0);
	char got[16] = {0};
	H_EQ(raw_recv(cfd, got, 10), 10);
	H_EQ(memcmp(got, "child:pong", 10), 0);
	H_EQ(raw_recv(cfd, got, 1), 0); /* the child closed it: nobody holds it now */
	close(cfd);
	expect_child_ok(pid);
	h_close(&c, us, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule 4.6: a listener is detached and passed to another process (a
 * restart handing its listener over), which adopts it and accepts there: a
 * client of the same address is served by the child. */
static void test_pass_listener_to_child(void)
{
	int fds = h_begin();
	h_ctx c;
	h_ctx_init(&c, h_loop());
	tl_loop *l = c.loop;
	if (!need_handover(l))
		goto out;
	tl_handle lis, us;
	tl_addr la;
	pid_t pid = start_child(&c, CHILD_GREET_LISTENER, &us);
	H_EQ_FATAL(h_listen(&c, AF_INET, NULL, &lis, &la), 0);
	int fd = detach_wait(&c, lis);
	H_TRUE_FATAL(fd >= 0, "no descriptor");
	pass(&c, us, fd, 'L');
	int cfd = raw_connect(&la);
	char got[16] = {0};
	H_EQ(raw_recv(cfd, got, 11), 11);
	H_EQ(memcmp(got, "child:hello", 11), 0);
	close(cfd);
	expect_child_ok(pid);
	h_close(&c, us, 3);
out:
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- A listening socket shared by two loops (or processes) ---- */

/* How the first loop's accept ends in test_shared_listener_accept_end. */
enum accept_end { END_STOP, END_CANCEL, END_CANCEL_ONE, END_CLOSE, END_DETACH, END_COUNT };
static const char *const accept_end_name[END_COUNT] = {
	[END_STOP] = "stop", [END_CANCEL] = "cancel", [END_CANCEL_ONE] = "cancel of a one-shot accept",
	[END_CLOSE] = "close", [END_DETACH] = "detach",
};

/* Connections op took (accept completions with a result >= 0 that are no
 * Stopped terminal). */
static uint32_t accepted_by(const h_log *lg, tl_op op)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < lg->n; i++)
		if (lg->v[i].op.v == op.v && lg->v[i].kind == TL_K_ACCEPT && lg->v[i].result >= 0 &&
		    !(lg->v[i].flags & TL_F_STOPPED))
			n++;
	return n;
}

/* One round: loop a listens (TCP, or Unix-domain at path), loop b accepts
 * on a descriptor of the same socket; a's accept is armed first, so the
 * kernel offers it each new connection first. A client connects while a
 * does not turn, a ends its accept as `how` says, and b must take the
 * connection without any other arriving. */
static void shared_listener_round(h_ctx *a, h_ctx *b, const char *path, enum accept_end how)
{
	tl_loop *la = a->loop, *lb = b->loop;
	tl_handle lis, lis_b, conn;
	tl_addr addr;
	tl_op aop, bop;
	int cfd;
	if (path) {
		H_EQ_FATAL(tl_unix_listen(la, path, NULL, &lis), 0);
	} else {
		H_EQ_FATAL(h_listen(a, AF_INET, NULL, &lis, &addr), 0);
	}
	int dup = fcntl(tl_handle_fd(la, lis), F_DUPFD_CLOEXEC, 3);
	H_TRUE_FATAL(dup >= 0, "dup: %s", strerror(errno));
	H_EQ_FATAL(tl_adopt(lb, dup, &lis_b), 0);
	if (how == END_CANCEL_ONE)
		H_EQ_FATAL(tl_accept(la, lis, 1, &aop), 0);
	else
		H_EQ_FATAL(tl_accept_start(la, lis, 1, &aop), 0);
	h_turn(a, 0);
	H_EQ_FATAL(tl_accept_start(lb, lis_b, 2, &bop), 0);
	h_turn(b, 0);
	if (path) {
		struct sockaddr_un sun = {.sun_family = AF_UNIX};
		snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
		cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		H_TRUE_FATAL(cfd >= 0, "socket: %s", strerror(errno));
		H_EQ_FATAL(connect(cfd, (struct sockaddr *)&sun, sizeof sun), 0);
	} else {
		cfd = raw_connect(&addr);
	}
	h_sleep_ms(20); /* the connection is queued, a has not turned since */
	int rc, fd = -1;
	switch (how) {
	case END_STOP:
		H_EQ(tl_stop(la, aop), 0);
		break;
	case END_CANCEL:
	case END_CANCEL_ONE:
		H_EQ(tl_cancel(la, aop), 0);
		break;
	case END_CLOSE:
		H_EQ(tl_close(la, lis, 3), 0);
		break;
	case END_DETACH:
		rc = tl_detach(la, lis, &fd);
		H_TRUE(rc == -EAGAIN, "tl_detach with an accept pending: %d%s", rc, h_errname(rc));
		fd = detach_wait(a, lis);
		break;
	default:
		break;
	}
	H_TRUE(h_wait_op(a, aop) >= 0, "%s: the first loop's accept did not end", accept_end_name[how]);
	if (how == END_CLOSE)
		H_TRUE(h_wait_closed(a, lis) >= 0, "no Closed for the listener");
	uint32_t took_a = accepted_by(&a->log, aop);
	/* The connection is b's now (or a's, had a's accept taken it before
	 * its end: then there is nothing left to strand, and the round
	 * proves nothing, so it must not happen here: a never turned). */
	H_EQ(took_a, 0);
	int got = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!got && h_wall_ns() < dl) {
		h_turn(b, 10 * (int64_t)H_MS);
		got = (int)accepted_by(&b->log, bop);
	}
	H_TRUE(got == 1, "%s %s: the second loop did not get the connection queued when the "
			 "first loop's accept ended (%d)",
	       path ? "Unix" : "TCP", accept_end_name[how], got);
	for (uint32_t i = 0; i < b->log.n; i++)
		if (b->log.v[i].op.v == bop.v && b->log.v[i].kind == TL_K_ACCEPT &&
		    b->log.v[i].result >= 0 && !(b->log.v[i].flags & TL_F_TERMINAL)) {
			conn = b->log.v[i].u.accept.conn;
			h_close(b, conn, 4);
		}
	close(cfd);
	H_EQ(tl_stop(lb, bop), 0);
	H_TRUE(h_wait_op(b, bop) >= 0, "the second loop's accept did not stop");
	h_close(b, lis_b, 5);
	if (how == END_DETACH)
		close(fd);
	else if (how != END_CLOSE)
		h_close(a, lis, 6);
	if (path)
		unlink(path);
}

/* Rule (DECISIONS, "Streams"): an accept that ends (stopped, cancelled,
 * its listener closed or detached) strands no connection: one queued on a
 * listening socket that stays open elsewhere (another loop here, another
 * process after a handover) goes to an accept waiting there, at once, with
 * no other connection arriving first. On io_uring the kernel hands each
 * new connection to the oldest accept on the socket alone, and an end
 * between that hand-off and the accept itself used to leave it queued
 * until the next client came. TCP and Unix-domain listeners, one-shot and
 * multishot accepts. */
static void test_shared_listener_accept_end(void)
{
	int fds = h_begin();
	h_ctx a, b;
	h_ctx_init(&a, h_loop());
	h_ctx_init(&b, h_loop());
	tl_loop *la = a.loop, *lb = b.loop;
	char dir[] = "/tmp/tl-shared-XXXXXX", path[96];
	int made = 0;
	if (!need_adopt(la))
		goto out;
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	made = 1;
	snprintf(path, sizeof path, "%s/l.sock", dir);
	for (int how = 0; how < END_COUNT; how++) {
		shared_listener_round(&a, &b, NULL, (enum accept_end)how);
		shared_listener_round(&a, &b, path, (enum accept_end)how);
	}
out:
	if (made)
		H_EQ(rmdir(dir), 0);
	h_drain_close(lb);
	h_ctx_fini(&b);
	h_ctx_fini(&a);
	h_end(la, fds);
}

#endif /* !_WIN32 */

const struct test_def tl_contract_handover[] = {
	T("4.6 adopt", test_adopt_listener),
	T("4.6 adopt", test_adopt_after_close_of_copy),
	T("4.6 adopt", test_adopt_stream),
	T("4.6 adopt", test_adopt_udp),
	T("4.6 adopt", test_adopt_refused),
	T("4.6 detach", test_detach_pending_reads),
	T("4.6 detach", test_detach_before_io),
	T("4.6 detach", test_detach_queued_completions),
	T("4.6 detach", test_detach_refused),
	T("4.6 detach", test_detach_adopt_mid_stream),
#ifndef _WIN32
	T("4.6 pass descriptors", test_pass_fds_in_order),
	T("4.6 pass descriptors", test_pass_fds_glued),
	T("4.6 pass descriptors", test_pass_fds_refused),
	T("4.6 pass descriptors", test_recv_fds_cancel_no_leak),
	T("4.6 pass descriptors", test_pass_stream_to_child),
	T("4.6 pass descriptors", test_pass_listener_to_child),
	T("4.1 accept, shared listener", test_shared_listener_accept_end),
#endif
	{ NULL, NULL, NULL },
};
