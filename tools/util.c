/* tools/util.c: small things the programs share that touch the system (see util.h). */
#include <errno.h>
#include <unistd.h>
#include <sys/socket.h>
#include "util.h"

int tl_tool_port_taken(const tl_addr *addr)
{
	int one = 1;
	int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r = 0;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, &addr->sa, tl_addr_len(addr)) < 0)
		r = errno == EADDRINUSE ? 1 : -errno;
	close(fd);
	return r;
}
