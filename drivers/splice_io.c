/* drivers/splice_io.c: splice(2) and sendfile(2) for the OS drivers, without the SIGPIPE they would raise. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <sys/sendfile.h>
#include "splice_io.h"

/*
 * Writing to a socket whose peer is gone raises SIGPIPE, which kills a
 * program that did not ask for it. send() takes MSG_NOSIGNAL; splice(2)
 * and sendfile(2) have no such flag (both raise it: a splice into a reset
 * connection does). So the calls that write to a stream run with SIGPIPE
 * blocked in the calling thread, and one they raised is taken off the
 * thread (sigtimedwait, no wait) before the mask is restored. That is two
 * sigprocmask calls per write, next to one that moves up to a pipe's worth
 * of bytes.
 */

static const struct timespec zero;

static ssize_t quiet(ssize_t (*call)(void *), void *arg)
{
	sigset_t pipe_set, old;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	ssize_t n;
	do
		n = call(arg);
	while (n < 0 && errno == EINTR);
	int e = errno;
	if (n < 0 && e == EPIPE && !sigismember(&old, SIGPIPE))
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return n < 0 ? -e : n;
}

struct out_arg {
	int from, fd;
	size_t len;
	off_t off;
};

static ssize_t call_splice(void *p)
{
	struct out_arg *a = p;
	return splice(a->from, NULL, a->fd, NULL, a->len, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
}

static ssize_t call_sendfile(void *p)
{
	struct out_arg *a = p;
	return sendfile(a->fd, a->from, &a->off, a->len);
}

ssize_t tl__splice_in(int fd, int wfd, size_t len)
{
	ssize_t n;
	do
		n = splice(fd, NULL, wfd, NULL, len, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t tl__splice_out(int rfd, int fd, size_t len)
{
	struct out_arg a = {.from = rfd, .fd = fd, .len = len};
	return quiet(call_splice, &a);
}

ssize_t tl__sendfile_out(int fd, int file, uint64_t *off, size_t len)
{
	struct out_arg a = {.from = file, .fd = fd, .len = len, .off = (off_t)*off};
	ssize_t n = quiet(call_sendfile, &a);
	if (n > 0)
		*off = (uint64_t)a.off;
	return n;
}
