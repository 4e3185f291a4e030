/* tools/util.c: small things the programs share that touch the system (see util.h). */
#include <errno.h>
#include "util.h"
#ifdef _WIN32
#include <winsock2.h>
#else
#include <unistd.h>
#include <sys/socket.h>
#endif

#ifdef _WIN32
/* Windows: SO_EXCLUSIVEADDRUSE, since its SO_REUSEADDR would let the probe
 * bind over a live listener; Winsock is started for the probe (the loop
 * starts its own). */
int tl_tool_port_taken(const tl_addr *addr)
{
	WSADATA wd;
	BOOL one = TRUE;
	int r = 0;
	if (WSAStartup(MAKEWORD(2, 2), &wd))
		return -ENOTSUP;
	SOCKET s = socket(addr->sa.sa_family, SOCK_STREAM, IPPROTO_TCP);
	if (s == INVALID_SOCKET) {
		WSACleanup();
		return -EAFNOSUPPORT;
	}
	if (setsockopt(s, SOL_SOCKET, SO_EXCLUSIVEADDRUSE, (const char *)&one, sizeof one) ||
	    bind(s, &addr->sa, (int)tl_addr_len(addr))) {
		int e = WSAGetLastError();
		r = e == WSAEADDRINUSE || e == WSAEACCES ? 1 : e == WSAEADDRNOTAVAIL ? -EADDRNOTAVAIL : -EINVAL;
	}
	closesocket(s);
	WSACleanup();
	return r;
}
#else
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
#endif

unsigned long tl_tool_pid(void)
{
#ifdef _WIN32
	return GetCurrentProcessId();
#else
	return (unsigned long)getpid();
#endif
}
