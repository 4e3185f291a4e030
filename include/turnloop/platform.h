/* turnloop/platform.h: the operating system's headers and types that the public API names, in one place per platform. */
#ifndef TURNLOOP_PLATFORM_H
#define TURNLOOP_PLATFORM_H

/*
 * The public headers name a few of the OS's types: socket addresses (tl_addr
 * holds struct sockaddr_in and sockaddr_in6), the segments of a gathered
 * write (tl_iovec) and struct addrinfo (tl_resolve's hints). This header is
 * the only public one that includes the OS's headers for them, so a new
 * platform touches it and nothing else in include/. It is included by
 * turnloop/loop.h; include turnloop.h, not this.
 *
 * POSIX: <sys/uio.h>, <sys/socket.h> and <netinet/in.h>; tl_iovec is struct
 * iovec itself, so code that passes struct iovec arrays keeps working.
 * Windows (mingw-w64 or MSVC): <winsock2.h> and <ws2tcpip.h>, which declare
 * the same socket address structs; tl_iovec has the two fields of struct
 * iovec by name, laid out as Winsock's WSABUF (length first, 32 bits).
 * Directory entry types (DT_*), which Windows' headers lack, are defined
 * here for tl_dirent. tests/test_headers_win.sh compiles every public
 * header with the mingw-w64 compiler; docs/WINDOWS.md says what of the
 * library builds and runs there.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>

/* One segment of a gathered write: iov_len bytes at iov_base. */
typedef struct tl_iovec {
	unsigned long iov_len;
	void *iov_base;
} tl_iovec;

/* A directory entry's type (tl_dirent.type, turnloop/pool.h): Windows'
 * headers have no d_type, so its values are named here, with Linux's
 * numbers. */
#ifndef DT_UNKNOWN
#define DT_UNKNOWN 0
#define DT_FIFO 1
#define DT_CHR 2
#define DT_DIR 4
#define DT_BLK 6
#define DT_REG 8
#define DT_LNK 10
#define DT_SOCK 12
#endif
#else
#include <sys/uio.h>
#include <sys/socket.h>
#include <netinet/in.h>

/* One segment of a gathered write: iov_len bytes at iov_base. */
typedef struct iovec tl_iovec;
#endif

#endif
