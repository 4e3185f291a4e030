/* drivers/sock.h: socket setup shared by the kernel drivers (epoll, io_uring). */
#ifndef TL_SOCK_H
#define TL_SOCK_H

#include <sys/socket.h>
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
/* Wake every waiter on listening socket fd (in any loop or process), so
 * that one of them accepts what is queued: for an accept that leaves the
 * socket's wait queue after it may have taken the wake-up of a queued
 * connection (nothing if fd < 0; the socket is left as it was). */
void tl__sock_listen_wake(int fd);

/* ---- Handing sockets over (tl_adopt, tl_send_fds, tl_recv_fds) ---- */

/* A descriptor's flags before tl__sock_adopt changed them. */
struct tl__sock_prev {
	int fl, fdfl;
};
/* Find the kind of socket fd for tl_adopt (*type: TL_H_LISTEN, TL_H_STREAM
 * or TL_H_UDP; *hflags: TL_HF_UNIX or TL_HF_V6 or 0) and make it
 * non-blocking and close-on-exec, keeping its old flags in *prev. 0, or
 * -ENOTSOCK, -EBADF, -EINVAL (a kind the loop does not take) or another OS
 * error, with fd unchanged. */
int tl__sock_adopt(int fd, uint8_t *type, uint8_t *hflags, struct tl__sock_prev *prev);
/* Put fd's flags back as they were before tl__sock_adopt (its attach failed). */
void tl__sock_unadopt(int fd, const struct tl__sock_prev *prev);

/* Control buffer of one descriptor message: SCM_RIGHTS for TL_FDS_MAX
 * descriptors, and room for the credentials and pidfd messages that an
 * adopted socket may have asked for (SO_PASSCRED, SO_PASSPIDFD), so that
 * those do not cut the descriptors off. Aligned for struct cmsghdr. */
#define TL__FDS_CTL (64 + 32 + 32 + 16 * TL_FDS_MAX)
union tl__fds_ctl {
	char buf[TL__FDS_CTL];
	uint64_t align;
};
/* Fill ctl with an SCM_RIGHTS message of fds[0..n) (n <= TL_FDS_MAX);
 * returns its length for msg_controllen. */
unsigned tl__sock_fds_ctl(union tl__fds_ctl *ctl, const int *fds, uint32_t n);
/* The descriptors a recvmsg (MSG_CMSG_CLOEXEC) received, per mh's control
 * data, into fds (room for max): their count, or -EMSGSIZE when the control
 * data was cut (MSG_CTRUNC) or carried more than max, after closing every
 * descriptor that arrived. A pidfd that SO_PASSPIDFD added is closed. */
int tl__sock_take_fds(const struct msghdr *mh, int *fds, uint32_t max);
#endif
