/* drivers/sock.h: socket setup shared by the kernel drivers (epoll, io_uring). */
#ifndef TL_SOCK_H
#define TL_SOCK_H

#include "driver.h"

struct tl_hslot;

/* Create the socket that a spec asks for, non-blocking and close-on-exec:
 * bound and listening for listeners, bound for UDP, unconnected for streams.
 * Returns the descriptor or a negative errno (nothing left open). */
int tl__sock_open(const struct tl_open_spec *spec);
/* The local address of a socket. */
int tl__sock_local(int fd, tl_addr *out);
/* Fill a sockaddr_un for path; -EINVAL if it does not fit. */
int tl__sock_unix_addr(const char *path, void *sun, unsigned *len);
/* The default options of a new TCP stream (TCP_NODELAY). Listeners get
 * them in tl__sock_open and the streams they accept inherit them. */
void tl__sock_stream_opts(int fd, int is_unix);
/* Set (set 1) or read (set 0) a checked option (enum tl_sockopt) of a socket
 * of the family v6 tells: 0 or the OS error. */
int tl__sock_opt(int fd, int v6, int set, int opt, int64_t *value);
/* The peer of a connected socket (a Unix-domain one as AF_UNIX only). */
int tl__sock_peer(int fd, int is_unix, tl_addr *out);
/* Close fd (nothing if < 0); abort: SO_LINGER {1, 0} first, so the peer
 * sees a reset. */
void tl__sock_release(int fd, int abort);
#endif
