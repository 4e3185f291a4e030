/* drivers/sock.c: socket creation, options, peer addresses, abortive release and handing sockets over, shared by the kernel drivers. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "sock.h"
#include "dgram_io.h"

int tl__sock_unix_addr(const char *path, void *p, unsigned *len)
{
	struct sockaddr_un *sun = p;
	size_t n = strlen(path);
	if (!n || n >= sizeof sun->sun_path)
		return -EINVAL;
	memset(sun, 0, sizeof *sun);
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path, path, n);
	*len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	return 0;
}

void tl__sock_stream_opts(int fd, int is_unix)
{
	int one = 1;
	/* A server runtime answers requests: small replies must not wait for
	 * Nagle's algorithm. */
	if (!is_unix)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Where option opt lives on a socket of the family v6 tells: 0 if nowhere. */
static int opt_where(int opt, int v6, int *level, int *name)
{
	static const struct { int level, name; } where[] = {
		[TL_SO_NODELAY] = {IPPROTO_TCP, TCP_NODELAY},
		[TL_SO_KEEPALIVE] = {SOL_SOCKET, SO_KEEPALIVE},
		[TL_SO_KEEPIDLE] = {IPPROTO_TCP, TCP_KEEPIDLE},
		[TL_SO_KEEPINTVL] = {IPPROTO_TCP, TCP_KEEPINTVL},
		[TL_SO_KEEPCNT] = {IPPROTO_TCP, TCP_KEEPCNT},
		[TL_SO_USER_TIMEOUT] = {IPPROTO_TCP, TCP_USER_TIMEOUT},
		[TL_SO_RCVBUF] = {SOL_SOCKET, SO_RCVBUF},
		[TL_SO_SNDBUF] = {SOL_SOCKET, SO_SNDBUF},
		[TL_SO_MARK] = {SOL_SOCKET, SO_MARK},
		[TL_SO_TCLASS] = {IPPROTO_IP, IP_TOS},
		[TL_SO_DEFER_ACCEPT] = {IPPROTO_TCP, TCP_DEFER_ACCEPT},
		[TL_SO_FASTOPEN] = {IPPROTO_TCP, TCP_FASTOPEN},
	};
	_Static_assert(sizeof where / sizeof where[0] == TL_SO_COUNT_, "one entry per option");
	/* Levels may be 0 (IPPROTO_IP); no option name is. */
	if (opt <= 0 || opt >= TL_SO_COUNT_ || !where[opt].name)
		return 0;
	*level = where[opt].level;
	*name = where[opt].name;
	if (opt == TL_SO_TCLASS && v6) {
		*level = IPPROTO_IPV6;
		*name = IPV6_TCLASS;
	}
	return 1;
}

int tl__sock_opt(int fd, int v6, int set, int opt, int64_t *value)
{
	int level, name;
	if (!opt_where(opt, v6, &level, &name))
		return -EINVAL;
	if (set) {
		/* Every value fits an int; SO_MARK's 32 bits go as they are. */
		int v = (int)(uint32_t)*value;
		if (setsockopt(fd, level, name, &v, sizeof v) < 0)
			return -errno;
		/* A dual-stack IPv6 socket talks to IPv4 peers with IPv4's TOS. */
		if (opt == TL_SO_TCLASS && v6 &&
		    setsockopt(fd, IPPROTO_IP, IP_TOS, &v, sizeof v) < 0)
			return -errno;
		return 0;
	}
	int v = 0;
	socklen_t len = sizeof v;
	if (getsockopt(fd, level, name, &v, &len) < 0)
		return -errno;
	*value = opt == TL_SO_MARK ? (int64_t)(uint32_t)v : (int64_t)v;
	return 0;
}

/* Apply a checked option list: 0 or the first error. */
static int apply_opts(int fd, int v6, const tl_sockopt_val *so, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int64_t v = so[i].value;
		int r = tl__sock_opt(fd, v6, 1, so[i].opt, &v);
		if (r < 0)
			return r;
	}
	return 0;
}

static int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof v) < 0 ? -errno : 0;
}

/* A listener's options before listen(2): NODELAY on (the streams it accepts
 * inherit it, as every other option of the list), the list, then
 * TCP_DEFER_ACCEPT and TCP_FASTOPEN. */
static int listen_opts(int fd, int v6, const struct tl_open_spec *s)
{
	int r = set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	if (r == 0)
		r = apply_opts(fd, v6, s->so, s->nso);
	if (r == 0 && s->opts->defer_accept)
		r = set_int(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, s->opts->defer_accept);
	if (r == 0 && s->opts->fastopen)
		r = set_int(fd, IPPROTO_TCP, TCP_FASTOPEN, s->opts->fastopen);
	return r;
}

/* A stream to connect: NODELAY, the list, then the bind flags and the bind.
 * The three flags are IP-level options that Linux takes on IPv6 sockets
 * too (IPV6_FREEBIND and IPV6_TRANSPARENT name the same bits). */
static int connect_setup(int fd, int v6, const struct tl_open_spec *s)
{
	const tl_connect_opts *c = s->conn;
	tl__sock_stream_opts(fd, 0);
	int r = apply_opts(fd, v6, s->so, s->nso);
	if (r < 0 || !c || c->source.sa.sa_family == AF_UNSPEC)
		return r;
	if (c->freebind && (r = set_int(fd, IPPROTO_IP, IP_FREEBIND, 1)) < 0)
		return r;
	if (c->transparent && (r = set_int(fd, IPPROTO_IP, IP_TRANSPARENT, 1)) < 0)
		return r;
	if (c->bind_no_port && (r = set_int(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)) < 0)
		return r;
	if (bind(fd, &c->source.sa, tl_addr_len(&c->source)) < 0)
		return -errno;
	return 0;
}

int tl__sock_open(const struct tl_open_spec *s)
{
	int one = 1, fd, r;
	int is_unix = s->kind == TL_OPEN_UNIX_LISTEN || s->kind == TL_OPEN_UNIX_STREAM;
	int family = is_unix ? AF_UNIX : s->addr->sa.sa_family;
	int type = s->kind == TL_OPEN_UDP ? SOCK_DGRAM : SOCK_STREAM;
	fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	switch (s->kind) {
	case TL_OPEN_TCP_LISTEN:
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (s->opts->reuseport &&
		    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
			goto fail;
		if (family == AF_INET6) {
			int v6 = !!s->opts->v6only;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
		}
		if ((r = listen_opts(fd, family == AF_INET6, s)) < 0)
			goto fail_r;
		if (bind(fd, &s->addr->sa, tl_addr_len(s->addr)) < 0)
			goto fail;
		if (listen(fd, s->opts->backlog > 0 ? s->opts->backlog : 511) < 0)
			goto fail;
		return fd;
	case TL_OPEN_UNIX_LISTEN: {
		struct sockaddr_un sun;
		unsigned len;
		struct stat st;
		if ((r = tl__sock_unix_addr(s->path, &sun, &len)) < 0) {
			close(fd);
			return r;
		}
		/* A socket file left by an earlier run would make bind fail. */
		if (stat(s->path, &st) == 0 && S_ISSOCK(st.st_mode))
			unlink(s->path);
		if (bind(fd, (struct sockaddr *)&sun, len) < 0)
			goto fail;
		if (listen(fd, s->opts->backlog > 0 ? s->opts->backlog : 511) < 0)
			goto fail;
		return fd;
	}
	case TL_OPEN_UDP:
		if (family == AF_INET6) {
			int v6 = 0;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
		}
		if ((r = tl__dg_opts(fd, family == AF_INET6, s->udp_flags)) < 0)
			goto fail_r;
		if (bind(fd, &s->addr->sa, tl_addr_len(s->addr)) < 0)
			goto fail;
		return fd;
	case TL_OPEN_TCP_STREAM:
		if ((r = connect_setup(fd, family == AF_INET6, s)) < 0)
			goto fail_r;
		return fd;
	case TL_OPEN_UNIX_STREAM:
		return fd;
	}
	errno = EINVAL;
fail:
	r = -errno;
fail_r:
	close(fd);
	return r;
}

void tl__sock_release(int fd, int abort)
{
	if (fd < 0)
		return;
	if (abort) {
		/* Linger on, timeout 0: close(2) sends a reset and drops what
		 * was not sent. Nobody is left to hear a failure here. */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	close(fd);
}

/*
 * Linux has no call that only wakes a socket's waiters, but shutdown(2) of
 * the write side of a listening socket is one in effect: for TCP (IPv4 and
 * IPv6) inet_shutdown changes nothing on a listener for SHUT_WR and then
 * calls the socket's state-change callback, which wakes every waiter,
 * exclusive ones included; a Unix-domain listener records the send
 * shutdown, which neither its accepts nor its connects ever look at, and
 * wakes them the same way. Each woken waiter looks again: one with a
 * connection queued accepts it, the others go back to waiting.
 */
void tl__sock_listen_wake(int fd)
{
	if (fd >= 0)
		(void)shutdown(fd, SHUT_WR);
}

int tl__sock_peer(int fd, int is_unix, tl_addr *out)
{
	/* Large enough for any family getpeername may report. */
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	memset(out, 0, sizeof *out);
	if (is_unix)
		out->sa.sa_family = AF_UNIX;
	else
		memcpy(out, &ss, len < sizeof *out ? len : sizeof *out);
	return 0;
}

int tl__sock_local(int fd, tl_addr *out)
{
	socklen_t len = sizeof *out;
	memset(out, 0, sizeof *out);
	if (getsockname(fd, &out->sa, &len) < 0)
		return -errno;
	return 0;
}

/* ---- Handing sockets over ---- */

static int sockopt_int(int fd, int name, int *v)
{
	socklen_t len = sizeof *v;
	return getsockopt(fd, SOL_SOCKET, name, v, &len) < 0 ? -errno : 0;
}

int tl__sock_adopt(int fd, uint8_t *type, uint8_t *hflags, struct tl__sock_prev *prev)
{
	int domain, stype, proto, listening = 0, r;
	/* A file or a pipe answers ENOTSOCK, a closed descriptor EBADF. */
	if ((r = sockopt_int(fd, SO_DOMAIN, &domain)) < 0 ||
	    (r = sockopt_int(fd, SO_TYPE, &stype)) < 0 ||
	    (r = sockopt_int(fd, SO_PROTOCOL, &proto)) < 0)
		return r;
	if (domain != AF_INET && domain != AF_INET6 && domain != AF_UNIX)
		return -EINVAL;
	if (stype == SOCK_STREAM) {
		/* SCTP and MPTCP have stream sockets too: only TCP is TCP. */
		if (domain != AF_UNIX && proto != IPPROTO_TCP)
			return -EINVAL;
		if ((r = sockopt_int(fd, SO_ACCEPTCONN, &listening)) < 0)
			return r;
		if (listening) {
			*type = TL_H_LISTEN;
		} else {
			/* Neither listening nor connected (never connected, a
			 * connect in progress, reset): nothing the loop can
			 * read, write or accept on. */
			struct sockaddr_storage ss;
			socklen_t len = sizeof ss;
			if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
				return errno == ENOTCONN ? -EINVAL : -errno;
			*type = TL_H_STREAM;
		}
	} else if (stype == SOCK_DGRAM && domain != AF_UNIX && proto == IPPROTO_UDP) {
		*type = TL_H_UDP;
	} else {
		return -EINVAL; /* ICMP datagrams, SEQPACKET, Unix datagrams, raw */
	}
	*hflags = domain == AF_UNIX ? TL_HF_UNIX : domain == AF_INET6 ? TL_HF_V6 : 0;
	prev->fl = fcntl(fd, F_GETFL);
	prev->fdfl = fcntl(fd, F_GETFD);
	if (prev->fl < 0 || prev->fdfl < 0)
		return -errno;
	if (!(prev->fl & O_NONBLOCK) && fcntl(fd, F_SETFL, prev->fl | O_NONBLOCK) < 0)
		return -errno;
	if (!(prev->fdfl & FD_CLOEXEC) && fcntl(fd, F_SETFD, prev->fdfl | FD_CLOEXEC) < 0) {
		r = -errno;
		tl__sock_unadopt(fd, prev);
		return r;
	}
	return 0;
}

void tl__sock_unadopt(int fd, const struct tl__sock_prev *prev)
{
	fcntl(fd, F_SETFL, prev->fl);
	fcntl(fd, F_SETFD, prev->fdfl);
}

#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04 /* Linux 6.5; older headers lack the name */
#endif

_Static_assert(CMSG_SPACE(sizeof(int) * TL_FDS_MAX) + CMSG_SPACE(3 * sizeof(int)) +
		       CMSG_SPACE(sizeof(int)) <= TL__FDS_CTL,
	       "the control buffer holds the descriptors, credentials and a pidfd");

unsigned tl__sock_fds_ctl(union tl__fds_ctl *ctl, const int *fds, uint32_t n)
{
	struct msghdr mh = {.msg_control = ctl->buf,
			    .msg_controllen = CMSG_SPACE(n * sizeof(int))};
	memset(ctl->buf, 0, mh.msg_controllen);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	return (unsigned)mh.msg_controllen;
}

int tl__sock_take_fds(const struct msghdr *mh, int *fds, uint32_t max)
{
	uint32_t n = 0;
	int cut = (mh->msg_flags & MSG_CTRUNC) != 0;
	if (!mh->msg_control || mh->msg_controllen < sizeof(struct cmsghdr))
		return cut ? -EMSGSIZE : 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_len < CMSG_LEN(0))
			continue;
		if (c->cmsg_type != SCM_RIGHTS && c->cmsg_type != SCM_PIDFD)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *p = CMSG_DATA(c);
		for (size_t i = 0; i < k; i++) {
			int v;
			memcpy(&v, p + i * sizeof v, sizeof v);
			if (c->cmsg_type == SCM_RIGHTS && n < max) {
				fds[n++] = v;
			} else {
				if (c->cmsg_type == SCM_RIGHTS)
					cut = 1;
				close(v);
			}
		}
	}
	if (!cut)
		return (int)n;
	while (n)
		close(fds[--n]);
	return -EMSGSIZE;
}
