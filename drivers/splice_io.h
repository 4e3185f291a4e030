/* drivers/splice_io.h: the system calls of splices for the OS drivers (epoll, io_uring): errno converted once, EINTR retried, no SIGPIPE. */
#ifndef TL_SPLICE_IO_H
#define TL_SPLICE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Move up to len bytes from stream fd into pipe wfd, without blocking: the
 * count, 0 at the stream's end, or -errno (-EAGAIN: nothing there now). */
ssize_t tl__splice_in(int fd, int wfd, size_t len);
/* Move up to len bytes from pipe rfd to stream fd, without blocking: the
 * count or -errno (-EAGAIN: no room now, -EPIPE, -ECONNRESET). */
ssize_t tl__splice_out(int rfd, int fd, size_t len);
/* sendfile(2) of up to len bytes of file from *off to stream fd, without
 * blocking on fd: the count (*off advanced), 0 at the file's end, or
 * -errno. */
ssize_t tl__sendfile_out(int fd, int file, uint64_t *off, size_t len);

#endif
