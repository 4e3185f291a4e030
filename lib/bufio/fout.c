/* lib/bufio/fout.c: a file written whole (turnloop/bufio.h's tl_fout): bytes gathered in the caller's buffer, written to a temporary file, and put in place by fsync and rename on the blocking pool. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "turnloop/bufio.h"
#include "turnloop/pool.h"

/* f holds a file: opened, not yet finished or dropped (a zeroed f holds none). */
static int holds(const tl_fout *f)
{
	return f && f->buf && f->fd >= 0;
}

/* Write what the buffer holds, all of it (write(2) may take part): 0 or
 * the error, which sticks. */
static int out(tl_fout *f)
{
	uint32_t off = 0;

	while (!f->err && off < f->len) {
		ssize_t w = write(f->fd, f->buf + off, f->len - off);

		if (w > 0)
			off += (uint32_t)w, f->bytes += (uint64_t)w;
		else if (w < 0 && errno != EINTR)
			f->err = -errno;
		else if (w == 0)
			f->err = -EIO;
	}
	f->len = 0;
	return f->err;
}

int tl_fout_open(tl_fout *f, const char *path, void *buf, uint32_t cap)
{
	size_t n = path ? strlen(path) : 0;

	if (!f || !path || !buf || !cap || !n || n >= sizeof f->path)
		return -EINVAL;
	memset(f, 0, offsetof(tl_fout, path));
	memcpy(f->path, path, n + 1);
	snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
	f->buf = buf;
	f->cap = cap;
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	return f->fd < 0 ? -errno : 0;
}

int tl_fout_reserve(tl_fout *f, uint32_t min, uint8_t **outp)
{
	if (!holds(f) || !outp || min > f->cap)
		return -EINVAL;
	if (f->err || (f->cap - f->len < min && out(f)))
		return f->err;
	*outp = f->buf + f->len;
	f->resv = f->cap - f->len;
	return (int)(f->resv > (uint32_t)0x7fffffff ? 0x7fffffff : f->resv);
}

int tl_fout_commit(tl_fout *f, uint32_t len)
{
	if (!f || len > f->resv)
		return -EINVAL;
	f->len += len;
	f->resv = 0;
	return 0;
}

/* On the pool: the rest written, fsync, close, rename; or, after an error,
 * the temporary file removed. */
static int64_t finish(void *arg, tl_cancel_flag *c)
{
	tl_fout *f = arg;

	(void)c;
	if (!out(f) && fsync(f->fd) < 0)
		f->err = -errno;
	if (close(f->fd) < 0 && !f->err)
		f->err = -errno;
	f->fd = -1;
	if (!f->err && rename(f->tmp, f->path) < 0)
		f->err = -errno;
	if (f->err)
		unlink(f->tmp);
	return f->err;
}

int tl_fout_finish(tl_fout *f, tl_loop *loop, uint64_t token, tl_op *op)
{
	if (!holds(f) || !loop || !op)
		return -EINVAL;
	return tl_blocking(loop, finish, f, TL_POOL_BOUNDED, token, op);
}

void tl_fout_abort(tl_fout *f)
{
	if (!holds(f))
		return;
	close(f->fd);
	f->fd = -1;
	unlink(f->tmp);
}
