/* drivers/sock.c: socket creation and options, shared by the kernel drivers. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "sock.h"

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
		if (bind(fd, &s->addr->sa, tl_addr_len(s->addr)) < 0)
			goto fail;
		return fd;
	case TL_OPEN_TCP_STREAM:
		tl__sock_stream_opts(fd, 0);
		return fd;
	case TL_OPEN_UNIX_STREAM:
		return fd;
	}
	errno = EINVAL;
fail:
	r = -errno;
	close(fd);
	return r;
}

int tl__sock_local(int fd, tl_addr *out)
{
	socklen_t len = sizeof *out;
	memset(out, 0, sizeof *out);
	if (getsockname(fd, &out->sa, &len) < 0)
		return -errno;
	return 0;
}
