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
/* Per-connection options for accepted and connected TCP streams (TCP_NODELAY). */
void tl__sock_stream_opts(int fd, int is_unix);
#endif
