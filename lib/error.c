/* lib/error.c: tl_strerror, the per-thread error detail, and address helpers. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "detail.h"
#include "os.h"
#include "turnloop/error.h"
#include "turnloop/loop.h"

/* One line per thread: the details are about calls of that thread, and a
 * thread-local buffer needs no lock and no allocation. */
static _Thread_local char detail[320];

const char *tl_error_detail(void)
{
	return detail;
}

void tl__detail_clear(void)
{
	detail[0] = '\0';
}

void tl__detail_set(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof detail, fmt, ap);
	va_end(ap);
}

/* The codes turnloop gives a meaning of its own (turnloop/error.h): the OS's
 * meaning first, since the same code also comes straight from the OS (a
 * write's -EPIPE is a broken pipe), then turnloop's. */
const char *tl_strerror(int code)
{
	switch (code) {
	case 0: return "Success";
	case -EINVAL: return "Invalid argument (turnloop: bad argument, limit or handle state)";
	case -ENOENT: return "No such file or directory (turnloop: unknown, foreign or stale id)";
	case -EALREADY: return "Operation already in progress (turnloop: cancellation already requested)";
	case -ENOBUFS: return "No buffer space available (turnloop: a table, ring or queue is full)";
	case -EAGAIN: return "Resource temporarily unavailable (turnloop: would block, retry after a turn)";
	case -ECANCELED: return "Operation canceled";
	case -ETIMEDOUT: return "Connection timed out (turnloop: a deadline passed)";
	case -ENOTSUP: return "Operation not supported (turnloop: not supported by this driver or platform)";
	case -EPIPE: return "Broken pipe (turnloop: loop, poster or pool endpoint closed)";
	case -EBUSY: return "Device or resource busy (turnloop: the loop still has live handles)";
#ifdef TL_OWN_KEY_CODES
	case -ENOKEY: return "Required key not available";
	case -EKEYEXPIRED: return "Key has expired";
	case -EKEYREVOKED: return "Key has been revoked";
	case -EKEYREJECTED: return "Key was rejected by service";
#endif
#ifdef _WIN32
	/* The C runtime's strerror knows only the old C codes, not the POSIX
	 * network ones (mingw-w64 numbers them from 100). */
	case -EADDRINUSE: return "Address already in use";
	case -EADDRNOTAVAIL: return "Cannot assign requested address";
	case -EAFNOSUPPORT: return "Address family not supported by protocol";
	case -EBADMSG: return "Bad message";
	case -ECONNABORTED: return "Software caused connection abort";
	case -ECONNREFUSED: return "Connection refused";
	case -ECONNRESET: return "Connection reset by peer";
	case -EDESTADDRREQ: return "Destination address required";
	case -EHOSTUNREACH: return "No route to host";
	case -EINPROGRESS: return "Operation now in progress";
	case -EISCONN: return "Transport endpoint is already connected";
	case -EMSGSIZE: return "Message too long";
	case -ENETDOWN: return "Network is down";
	case -ENETRESET: return "Network dropped connection on reset";
	case -ENETUNREACH: return "Network is unreachable";
	case -ENOPROTOOPT: return "Protocol not available";
	case -ENOTCONN: return "Transport endpoint is not connected";
	case -ENOTSOCK: return "Socket operation on non-socket";
	case -EOPNOTSUPP: return "Operation not supported on socket";
	case -EPROTO: return "Protocol error";
	case -EWOULDBLOCK: return "Operation would block";
#endif
	default: return code < 0 ? strerror(-code) : "not an error code";
	}
}

int tl_addr_parse(tl_addr *out, const char *ip, uint16_t port)
{
	if (!out || !ip)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	if (inet_pton(AF_INET, ip, &out->in.sin_addr) == 1) {
		out->in.sin_family = AF_INET;
		out->in.sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &out->in6.sin6_addr) == 1) {
		out->in6.sin6_family = AF_INET6;
		out->in6.sin6_port = htons(port);
		return 0;
	}
	return -EINVAL;
}

unsigned tl_addr_len(const tl_addr *a)
{
	if (a->sa.sa_family == AF_INET)
		return sizeof a->in;
	if (a->sa.sa_family == AF_INET6)
		return sizeof a->in6;
	return 0;
}
