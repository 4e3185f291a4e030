/* lib/pool/fs.c: typed file requests (tl_fs_*), run natively by the driver where it can, else on the bounded pool. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "fs.h"

/*
 * Every request here is one pool job of the bounded class. What a worker
 * writes goes into the job record (the stat buffer), and the loop copies it
 * to the caller while it produces the completion, so that only the requests
 * that must touch caller memory from the worker (read/write buffers,
 * directory listings, long paths) do, and only those make tl_loop_destroy
 * wait.
 *
 * A driver with a native path (fs_route and fs_submit: io_uring, for the
 * opcodes its kernel has) is asked first (fs_native.c), using the
 * same job record for its paths and statx buffer so that nothing it points
 * at lives on the caller's stack; its result goes through the same
 * fs_deliver. A request the driver does not take (-ENOTSUP) runs here as
 * before.
 */

/* ---- worker side ---- */

/* getdents64 into a stack buffer: no allocation, unlike opendir(). The
 * cancellation flag is looked at between batches. */
static int64_t list_dir(struct tl_job *j)
{
	struct tl_fs_job *f = tl__fs_job(j);
	int fd = open(f->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	tl_dirent *out = f->buf;
	uint32_t cap = f->len, stored = 0;
	uint64_t total = 0;
	_Alignas(8) char buf[8192];
	int64_t res = 0;
	for (;;) {
		if (tl_pool_cancelled((tl_cancel_flag *)j))
			break;
		ssize_t n = getdents64(fd, buf, sizeof buf);
		if (n < 0) {
			res = -errno;
			break;
		}
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->d_reclen;
			const char *nm = d->d_name;
			if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
				continue;
			total++;
			if (stored < cap) {
				size_t len = strnlen(nm, sizeof out->name - 1);
				memcpy(out[stored].name, nm, len);
				out[stored].name[len] = 0;
				out[stored].type = d->d_type;
				stored++;
			}
		}
	}
	close(fd);
	if (res < 0)
		return res;
	j->value = total;
	return stored;
}

static void fs_run(struct tl_job *j)
{
	struct tl_fs_job *f = tl__fs_job(j);
	long r = 0;
	int64_t res;
	const char *p = f->path;
	int fd = f->fd;
	switch (f->code) {
	case TL_FS_OPEN:
		r = open(p, f->flags | O_CLOEXEC, (mode_t)f->mode);
		/* Loop already gone: nobody will ever see this descriptor. */
		if (r >= 0 && tl__pool_loop_gone(j)) {
			close((int)r);
			errno = ECANCELED;
			r = -1;
		}
		break;
	case TL_FS_CLOSE:
		r = close(fd);
		break;
	case TL_FS_READ:
		r = read(fd, f->buf, f->len);
		break;
	case TL_FS_WRITE:
		r = write(fd, f->buf, f->len);
		break;
	case TL_FS_PREAD:
		r = pread(fd, f->buf, f->len, (off_t)f->off);
		break;
	case TL_FS_PWRITE:
		r = pwrite(fd, f->buf, f->len, (off_t)f->off);
		break;
	case TL_FS_STAT:
		r = stat(p, &f->st);
		break;
	case TL_FS_FSTAT:
		r = fstat(fd, &f->st);
		break;
	case TL_FS_FSYNC:
		r = fsync(fd);
		break;
	case TL_FS_UNLINK:
		r = unlink(p);
		break;
	case TL_FS_RENAME:
		r = rename(p, f->path2);
		break;
	case TL_FS_MKDIR:
		r = mkdir(p, (mode_t)f->mode);
		break;
	case TL_FS_RMDIR:
		r = rmdir(p);
		break;
	case TL_FS_READDIR:
		res = list_dir(j);
		j->res = res;
		if (res < 0)
			j->value = (uint64_t)res;
		return;
	default:
		errno = EINVAL;
		r = -1;
		break;
	}
	res = r < 0 ? -(int64_t)errno : (int64_t)r;
	j->res = res;
	j->value = (uint64_t)res;
}

/* ---- loop side ---- */

static void fs_deliver(struct tl_job *j, tl_completion *c, int cancelled)
{
	struct tl_fs_job *f = tl__fs_job(j);
	switch (f->code) {
	case TL_FS_OPEN:
		/* Never expose a descriptor the host did not get an Opened for. */
		if (cancelled && j->res >= 0) {
			close((int)j->res);
			c->u.pool.value = (uint64_t)(int64_t)-ECANCELED;
		}
		break;
	case TL_FS_STAT:
	case TL_FS_FSTAT:
		if (!cancelled && j->res == 0)
			memcpy(f->user_out, &f->st, sizeof f->st);
		break;
	default:
		break;
	}
}

static void fs_discard(struct tl_job *j)
{
	if (tl__fs_job(j)->code == TL_FS_OPEN && j->res >= 0)
		close((int)j->res);
}

static const struct tl_job_ops fs_ops = {
	.run = fs_run,
	.deliver = fs_deliver,
	.discard = fs_discard,
	.native_result = tl__fs_native_result,
	.native_retry = tl__fs_native_retry,
};

/* ---- the requests ---- */

struct fs_args {
	const char *path, *path2;
	int fd, flags;
	unsigned mode;
	void *buf;
	uint32_t len;
	uint64_t off;
	void *out;
};

/* Short paths are copied (so a destroyed loop need not wait for them); long
 * ones stay the caller's, like buffers. */
static void set_paths(struct tl_job *j, const char *a, const char *b)
{
	struct tl_fs_job *f = tl__fs_job(j);
	size_t la = a ? strlen(a) + 1 : 0, lb = b ? strlen(b) + 1 : 0;
	if (la + lb <= sizeof f->inl) {
		char *d = f->inl;
		f->path = a ? memcpy(d, a, la) : NULL;
		f->path2 = b ? memcpy(d + la, b, lb) : NULL;
	} else {
		f->path = a;
		f->path2 = b;
		j->user_mem = 1;
	}
}

static int fs_submit(tl_loop *l, uint8_t code, const struct fs_args *a, uint64_t token,
		     tl_op *op)
{
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_job *j = tl__pool_job_new(l, pl);
	if (!j)
		return -ENOBUFS;
	struct tl_fs_job *f = tl__fs_job(j);
	j->ops = &fs_ops;
	j->aux = code;
	f->code = code;
	set_paths(j, a->path, a->path2);
	f->fd = a->fd;
	f->flags = a->flags;
	f->mode = a->mode;
	f->buf = a->buf;
	f->len = a->len;
	f->off = a->off;
	f->user_out = a->out;
	if (a->buf)
		j->user_mem = 1;
	/* The driver's native path first, where it has one (its fs_route
	 * decides). */
	r = tl__fs_native_submit(l, pl, j, token, op);
	if (r != -ENOTSUP)
		return r;
	return tl__pool_submit(l, pl, j, TL_POOL_BOUNDED, TL_K_FS, token, -1, op);
}

static int path_ok(const char *p)
{
	return p && *p;
}

int tl_fs_open(tl_loop *l, const char *path, int flags, unsigned mode, uint64_t token,
	       tl_op *op)
{
	if (!path_ok(path) || !op)
		return -EINVAL;
	struct fs_args a = {.path = path, .flags = flags, .mode = mode, .fd = -1};
	return fs_submit(l, TL_FS_OPEN, &a, token, op);
}

int tl_fs_close(tl_loop *l, int fd, uint64_t token, tl_op *op)
{
	if (!op)
		return -EINVAL;
	struct fs_args a = {.fd = fd};
	return fs_submit(l, TL_FS_CLOSE, &a, token, op);
}

static int rw(tl_loop *l, uint8_t code, int fd, const void *buf, uint32_t len, uint64_t off,
	      uint64_t token, tl_op *op)
{
	if (!buf || !op || (!len && (code == TL_FS_READ || code == TL_FS_PREAD)))
		return -EINVAL;
	struct fs_args a = {.fd = fd, .buf = (void *)(uintptr_t)buf, .len = len, .off = off};
	return fs_submit(l, code, &a, token, op);
}

int tl_fs_read(tl_loop *l, int fd, void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	return rw(l, TL_FS_READ, fd, buf, len, 0, token, op);
}

int tl_fs_write(tl_loop *l, int fd, const void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	return rw(l, TL_FS_WRITE, fd, buf, len, 0, token, op);
}

int tl_fs_pread(tl_loop *l, int fd, void *buf, uint32_t len, uint64_t off, uint64_t token,
		tl_op *op)
{
	return rw(l, TL_FS_PREAD, fd, buf, len, off, token, op);
}

int tl_fs_pwrite(tl_loop *l, int fd, const void *buf, uint32_t len, uint64_t off,
		 uint64_t token, tl_op *op)
{
	return rw(l, TL_FS_PWRITE, fd, buf, len, off, token, op);
}

int tl_fs_stat(tl_loop *l, const char *path, struct stat *out, uint64_t token, tl_op *op)
{
	if (!path_ok(path) || !out || !op)
		return -EINVAL;
	struct fs_args a = {.path = path, .out = out, .fd = -1};
	return fs_submit(l, TL_FS_STAT, &a, token, op);
}

int tl_fs_fstat(tl_loop *l, int fd, struct stat *out, uint64_t token, tl_op *op)
{
	if (!out || !op)
		return -EINVAL;
	struct fs_args a = {.fd = fd, .out = out};
	return fs_submit(l, TL_FS_FSTAT, &a, token, op);
}

int tl_fs_fsync(tl_loop *l, int fd, uint64_t token, tl_op *op)
{
	if (!op)
		return -EINVAL;
	struct fs_args a = {.fd = fd};
	return fs_submit(l, TL_FS_FSYNC, &a, token, op);
}

static int path_req(tl_loop *l, uint8_t code, const char *p, const char *p2, unsigned mode,
		    uint64_t token, tl_op *op)
{
	if (!path_ok(p) || (code == TL_FS_RENAME && !path_ok(p2)) || !op)
		return -EINVAL;
	struct fs_args a = {.path = p, .path2 = p2, .mode = mode, .fd = -1};
	return fs_submit(l, code, &a, token, op);
}

int tl_fs_unlink(tl_loop *l, const char *path, uint64_t token, tl_op *op)
{
	return path_req(l, TL_FS_UNLINK, path, NULL, 0, token, op);
}

int tl_fs_rename(tl_loop *l, const char *from, const char *to, uint64_t token, tl_op *op)
{
	return path_req(l, TL_FS_RENAME, from, to, 0, token, op);
}

int tl_fs_mkdir(tl_loop *l, const char *path, unsigned mode, uint64_t token, tl_op *op)
{
	return path_req(l, TL_FS_MKDIR, path, NULL, mode, token, op);
}

int tl_fs_rmdir(tl_loop *l, const char *path, uint64_t token, tl_op *op)
{
	return path_req(l, TL_FS_RMDIR, path, NULL, 0, token, op);
}

int tl_fs_readdir(tl_loop *l, const char *path, tl_dirent *out, uint32_t cap, uint64_t token,
		  tl_op *op)
{
	if (!path_ok(path) || !out || !cap || !op)
		return -EINVAL;
	struct fs_args a = {.path = path, .buf = out, .len = cap, .fd = -1};
	return fs_submit(l, TL_FS_READDIR, &a, token, op);
}
