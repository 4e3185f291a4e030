/* lib/os_win.c: the part of the Windows platform layer that is not inline: Winsock's and Win32's error codes as the contract's negative errno values, in one table. */
#ifdef _WIN32
#include <errno.h>
#include "os.h"

/*
 * Every error a Windows driver, the pool or the platform layer reports
 * goes through tl__os_win_error, so a host sees the codes the contract
 * names on every OS: a refused connect is -ECONNREFUSED whether Winsock
 * said WSAECONNREFUSED (a blocking call) or ERROR_CONNECTION_REFUSED (an
 * overlapped one's completion status). Codes not listed become -EIO, the
 * contract's "the OS failed it" (tests/win_smoke.c checks the table and,
 * with real sockets under wine, the codes Winsock gives).
 */

static const struct {
	unsigned long code;
	int err;
} table[] = {
	/* Winsock */
	{WSAEINTR, EINTR},
	{WSAEBADF, EBADF},
	{WSAEACCES, EACCES},
	{WSAEFAULT, EINVAL},         /* a bad pointer or length: the caller's */
	{WSAEINVAL, EINVAL},
	{WSAEMFILE, EMFILE},
	{WSAEWOULDBLOCK, EAGAIN},
	{WSAEINPROGRESS, EAGAIN},    /* a blocking call already runs on the thread */
	{WSAEALREADY, EALREADY},
	{WSAENOTSOCK, ENOTSOCK},
	{WSAEDESTADDRREQ, EDESTADDRREQ},
	{WSAEMSGSIZE, EMSGSIZE},
	{WSAEPROTOTYPE, EINVAL},
	{WSAENOPROTOOPT, ENOPROTOOPT},
	{WSAEPROTONOSUPPORT, EAFNOSUPPORT},
	{WSAESOCKTNOSUPPORT, EAFNOSUPPORT},
	{WSAEOPNOTSUPP, EOPNOTSUPP},
	{WSAEPFNOSUPPORT, EAFNOSUPPORT},
	{WSAEAFNOSUPPORT, EAFNOSUPPORT},
	{WSAEADDRINUSE, EADDRINUSE},
	{WSAEADDRNOTAVAIL, EADDRNOTAVAIL},
	{WSAENETDOWN, ENETDOWN},
	{WSAENETUNREACH, ENETUNREACH},
	{WSAENETRESET, ECONNRESET},  /* keep-alive found the connection dead */
	{WSAECONNABORTED, ECONNABORTED},
	{WSAECONNRESET, ECONNRESET},
	{WSAENOBUFS, ENOBUFS},
	{WSAEISCONN, EISCONN},
	{WSAENOTCONN, ENOTCONN},
	{WSAESHUTDOWN, EPIPE},       /* a send after our own shutdown */
	{WSAETIMEDOUT, ETIMEDOUT},
	{WSAECONNREFUSED, ECONNREFUSED},
	{WSAEHOSTDOWN, EHOSTUNREACH},
	{WSAEHOSTUNREACH, EHOSTUNREACH},
	{WSA_OPERATION_ABORTED, ECANCELED},
	{WSANOTINITIALISED, EINVAL},
	/* Win32, as overlapped completions and file calls report them */
	{ERROR_FILE_NOT_FOUND, ENOENT},
	{ERROR_PATH_NOT_FOUND, ENOENT},
	{ERROR_TOO_MANY_OPEN_FILES, EMFILE},
	{ERROR_ACCESS_DENIED, EACCES},
	{ERROR_INVALID_HANDLE, EBADF},
	{ERROR_NOT_ENOUGH_MEMORY, ENOMEM},
	{ERROR_OUTOFMEMORY, ENOMEM},
	{ERROR_NOT_SUPPORTED, ENOTSUP},
	{ERROR_FILE_EXISTS, EEXIST},
	{ERROR_ALREADY_EXISTS, EEXIST},
	{ERROR_INVALID_PARAMETER, EINVAL},
	{ERROR_BROKEN_PIPE, EPIPE},
	{ERROR_DISK_FULL, ENOSPC},
	{ERROR_DIRECTORY, ENOTDIR},
	{ERROR_DIR_NOT_EMPTY, ENOTEMPTY},
	{ERROR_SHARING_VIOLATION, EBUSY}, /* another handle shares no access: POSIX never refuses so */
	{ERROR_FILENAME_EXCED_RANGE, ENAMETOOLONG},
	{ERROR_BUSY, EBUSY},
	{ERROR_SEM_TIMEOUT, ETIMEDOUT},
	{ERROR_MORE_DATA, EMSGSIZE},  /* a datagram longer than the buffer */
	{ERROR_NOT_FOUND, ENOENT},    /* CancelIoEx: nothing of that left to cancel */
	{ERROR_OPERATION_ABORTED, ECANCELED},
	{ERROR_NETNAME_DELETED, ECONNRESET},
	{ERROR_CONNECTION_REFUSED, ECONNREFUSED},
	{ERROR_CONNECTION_ABORTED, ECONNABORTED},
	{ERROR_NETWORK_UNREACHABLE, ENETUNREACH},
	{ERROR_HOST_UNREACHABLE, EHOSTUNREACH},
	{ERROR_PORT_UNREACHABLE, ECONNREFUSED},
	{ERROR_ADDRESS_ALREADY_ASSOCIATED, EADDRINUSE},
	{ERROR_CONNECTION_INVALID, ENOTCONN},
	{ERROR_GRACEFUL_DISCONNECT, EPIPE},
};

int tl__os_win_error(unsigned long code)
{
	for (size_t i = 0; i < sizeof table / sizeof *table; i++)
		if (table[i].code == code)
			return -table[i].err;
	return -EIO;
}
#endif
