/* turnloop/poll.h: readiness of descriptors the loop does not own (contract 5: foreign descriptors). */
#ifndef TURNLOOP_POLL_H
#define TURNLOOP_POLL_H

#include "turnloop/loop.h"

/* Windows: POLLIN, POLLOUT, POLLPRI, POLLERR and POLLHUP are Winsock's
 * (WSAPoll's values, from <winsock2.h>); POLLRDHUP, which Winsock lacks, is
 * given here (Linux's value). */
#if defined(_WIN32) && !defined(POLLRDHUP)
#define POLLRDHUP 0x2000
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Poll a descriptor the loop does not own (a c-ares or libpq socket, a
 * pipe, an eventfd) for readiness, until stopped. On Windows, sockets only
 * (a SOCKET in the int, as tl_adopt takes it), on the IOCP driver. events is a nonzero set
 * of POLLIN, POLLOUT, POLLPRI and POLLRDHUP (<poll.h>). Each readiness is a
 * nonterminal TL_K_POLL completion with result = the revents: the events
 * asked that hold, plus POLLERR and POLLHUP when they do (as poll(2)
 * reports them).
 *
 * Level-triggered, on every driver: while the descriptor is ready, every
 * turn reports it once (as poll(2) and libuv's uv_poll do), so a host that
 * does not consume what made it ready keeps being told, turn after turn;
 * stop the poll (or read until EAGAIN) to quiet it. Completions of one
 * turn are bounded by the loop's per-turn budget like any native event.
 *
 * The loop never reads, writes or closes fd, and leaves its flags alone.
 * The caller keeps it open until the poll's terminal completion: to close
 * it, stop first. (Closing it earlier is safe for the loop, which polls a
 * duplicate on epoll and holds a kernel reference on io_uring, but the
 * poll then never reports again and keeps the file open until stopped.)
 *
 * The handle lives as long as its one op: tl_stop(op) ends it with a
 * terminal Stopped (result 0, TL_F_STOPPED) and then the handle's Closed
 * (token: the op's token); tl_close(h, token) ends it with Cancelled and
 * then Closed (the close token); an error the driver reports (rare: the
 * descriptor cannot be polled any more) is terminal too and is followed by
 * Closed. To change events, stop and start again.
 *
 * Returns 0 and sets *h and *op, or -EINVAL (fd < 0, events 0 or with
 * other bits, h or op NULL), -EBADF (fd is not open), -EPERM (a regular
 * file or a directory: always ready, so epoll(7) refuses them and so do we
 * on every driver), -ENOTSOCK (Windows: a handle that is no socket nor a
 * file, such as a pipe or a console), -ENOBUFS (handle or op table full),
 * -ENOTSUP (the driver lacks TL_CAP_POLL: the simulation driver), or the
 * driver's OS error (-EMFILE: the epoll driver polls a duplicate of fd).
 *
 * Windows reports what WSAPoll would: a peer's end of the stream is
 * POLLIN with POLLHUP (and POLLRDHUP if asked), a reset POLLHUP and
 * POLLERR, a failed connect POLLOUT, POLLHUP and POLLERR.
 */
int tl_poll_start(tl_loop *loop, int fd, uint32_t events, uint64_t token, tl_handle *h,
		  tl_op *op);

#ifdef __cplusplus
}
#endif
#endif
