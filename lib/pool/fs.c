/* lib/pool/fs.c: typed file requests and getaddrinfo lookups, run on the bounded pool. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include "pool_int.h"

/*
 * Every request here is one bounded pool job. What a worker writes goes into
 * the job record (stat buffers, addresses), and the loop copies it to the
 * caller while it produces the completion, so that only the requests that
 * must touch caller memory from the worker (read/write buffers, directory
 * listings, long paths) do, and only those make tl_loop_destroy wait.
 *
 * A driver with a native path (fs_submit: io_uring, for the opcodes its
 * kernel has) gets every request but readdir first, using the same job
 * record for its paths and statx buffer so that nothing it points at lives
 * on the caller's stack; its result goes through the same tl__fs_deliver.
 * A request the driver does not take (-ENOTSUP) runs here as before.
 */

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
	size_t la = a ? strlen(a) + 1 : 0, lb = b ? strlen(b) + 1 : 0;
	if (la + lb <= sizeof j->u.fs.inl) {
		char *d = j->u.fs.inl;
		j->u.fs.path = a ? memcpy(d, a, la) : NULL;
		j->u.fs.path2 = b ? memcpy(d + la, b, lb) : NULL;
	} else {
		j->u.fs.path = a;
		j->u.fs.path2 = b;
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
	j->type = TL_JT_FS;
	j->fs_code = code;
	set_paths(j, a->path, a->path2);
	j->u.fs.fd = a->fd;
	j->u.fs.flags = a->flags;
	j->u.fs.mode = a->mode;
	j->u.fs.buf = a->buf;
	j->u.fs.len = a->len;
	j->u.fs.off = a->off;
	j->u.fs.user_out = a->out;
	if (a->buf)
		j->user_mem = 1;
	if (code != TL_FS_READDIR && l->dv->fs_submit) {
		struct tl_fs_native_req q = {
			.code = code,
			.fd = a->fd,
			.flags = a->flags | O_CLOEXEC, /* as tl__fs_exec opens */
			.mode = a->mode,
			.path = j->u.fs.path,
			.path2 = j->u.fs.path2,
			.buf = a->buf,
			.len = a->len,
			.off = a->off,
			.stx = &j->u.fs.stx,
		};
		r = tl__pool_native_submit(l, pl, j, &q, token, op);
		if (r != -ENOTSUP)
			return r;
	}
	return tl__pool_submit(l, pl, j, TL_POOL_BOUNDED, TL_K_FS, token, -1, op);
}

/* statx's answer in the struct stat the pool path's stat(2) would have
 * filled (glibc's fstatat does the same conversion on statx-only ports). */
static void stat_from_statx(struct stat *st, const struct statx *x)
{
	memset(st, 0, sizeof *st);
	st->st_dev = makedev(x->stx_dev_major, x->stx_dev_minor);
	st->st_ino = x->stx_ino;
	st->st_mode = x->stx_mode;
	st->st_nlink = x->stx_nlink;
	st->st_uid = x->stx_uid;
	st->st_gid = x->stx_gid;
	st->st_rdev = makedev(x->stx_rdev_major, x->stx_rdev_minor);
	st->st_size = (off_t)x->stx_size;
	st->st_blksize = (blksize_t)x->stx_blksize;
	st->st_blocks = (blkcnt_t)x->stx_blocks;
	st->st_atim.tv_sec = x->stx_atime.tv_sec;
	st->st_atim.tv_nsec = x->stx_atime.tv_nsec;
	st->st_mtim.tv_sec = x->stx_mtime.tv_sec;
	st->st_mtim.tv_nsec = x->stx_mtime.tv_nsec;
	st->st_ctim.tv_sec = x->stx_ctime.tv_sec;
	st->st_ctim.tv_nsec = x->stx_ctime.tv_nsec;
}

void tl__fs_native_result(struct tl_job *j, int64_t res)
{
	if ((j->fs_code == TL_FS_STAT || j->fs_code == TL_FS_FSTAT) && res == 0) {
		/* st and stx share storage: convert from a copy. */
		struct statx x = j->u.fs.stx;
		stat_from_statx(&j->u.fs.st, &x);
	}
	j->res = res;
	j->value = (uint64_t)res;
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

/* ---- worker side ---- */

/* getdents64 into a stack buffer: no allocation, unlike opendir(). The
 * cancellation flag is looked at between batches. */
static int64_t list_dir(struct tl_job *j)
{
	int fd = open(j->u.fs.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	tl_dirent *out = j->u.fs.buf;
	uint32_t cap = j->u.fs.len, stored = 0;
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

void tl__fs_exec(struct tl_job *j)
{
	long r = 0;
	int64_t res;
	const char *p = j->u.fs.path;
	int fd = j->u.fs.fd;
	switch (j->fs_code) {
	case TL_FS_OPEN:
		r = open(p, j->u.fs.flags | O_CLOEXEC, (mode_t)j->u.fs.mode);
		/* Loop already gone: nobody will ever see this descriptor. */
		if (r >= 0 && atomic_load(&j->port->poster->closed)) {
			close((int)r);
			errno = ECANCELED;
			r = -1;
		}
		break;
	case TL_FS_CLOSE:
		r = close(fd);
		break;
	case TL_FS_READ:
		r = read(fd, j->u.fs.buf, j->u.fs.len);
		break;
	case TL_FS_WRITE:
		r = write(fd, j->u.fs.buf, j->u.fs.len);
		break;
	case TL_FS_PREAD:
		r = pread(fd, j->u.fs.buf, j->u.fs.len, (off_t)j->u.fs.off);
		break;
	case TL_FS_PWRITE:
		r = pwrite(fd, j->u.fs.buf, j->u.fs.len, (off_t)j->u.fs.off);
		break;
	case TL_FS_STAT:
		r = stat(p, &j->u.fs.st);
		break;
	case TL_FS_FSTAT:
		r = fstat(fd, &j->u.fs.st);
		break;
	case TL_FS_FSYNC:
		r = fsync(fd);
		break;
	case TL_FS_UNLINK:
		r = unlink(p);
		break;
	case TL_FS_RENAME:
		r = rename(p, j->u.fs.path2);
		break;
	case TL_FS_MKDIR:
		r = mkdir(p, (mode_t)j->u.fs.mode);
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

/* Map getaddrinfo's codes to the project's errno convention (pool.h). */
static int64_t eai_errno(int e)
{
	switch (e) {
	case EAI_NONAME:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -ENOENT;
	case EAI_AGAIN:
		return -EAGAIN;
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_SYSTEM:
		return errno ? -(int64_t)errno : -EIO;
	case EAI_FAMILY:
	case EAI_SOCKTYPE:
	case EAI_SERVICE:
	case EAI_BADFLAGS:
		return -EINVAL;
	default:
		return -EIO;
	}
}

void tl__resolve_exec(struct tl_job *j)
{
	struct addrinfo h, *res = NULL;
	memset(&h, 0, sizeof h);
	h.ai_family = j->u.rs.family;
	h.ai_socktype = j->u.rs.socktype;
	h.ai_protocol = j->u.rs.protocol;
	h.ai_flags = j->u.rs.flags;
	const char *host = j->u.rs.has_host ? j->u.rs.io.in.host : NULL;
	const char *svc = j->u.rs.has_service ? j->u.rs.io.in.service : NULL;
	errno = 0;
	int e = getaddrinfo(host, svc, &h, &res);
	if (e) {
		j->res = eai_errno(e);
		j->value = (uint64_t)j->res;
		return;
	}
	/* The names are dead now; their space takes the addresses. */
	uint32_t n = 0;
	for (struct addrinfo *ai = res; ai && n < TL_RESOLVE_MAX; ai = ai->ai_next) {
		tl_addr *a = &j->u.rs.io.addrs[n];
		if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof a->in) {
			memset(a, 0, sizeof *a);
			memcpy(&a->in, ai->ai_addr, sizeof a->in);
			n++;
		} else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof a->in6) {
			memset(a, 0, sizeof *a);
			memcpy(&a->in6, ai->ai_addr, sizeof a->in6);
			n++;
		}
	}
	freeaddrinfo(res);
	j->u.rs.n = n;
	if (!n) {
		j->res = -ENOENT;
		j->value = (uint64_t)j->res;
		return;
	}
	j->res = n < j->u.rs.cap ? n : j->u.rs.cap;
	j->value = n;
}

int tl_resolve(tl_loop *l, const char *host, const char *service,
	       const struct addrinfo *hints, tl_addr *out, uint32_t cap, uint64_t token,
	       tl_op *op)
{
	if ((!host && !service) || !out || !cap || !op)
		return -EINVAL;
	size_t hl = host ? strlen(host) : 0, sl = service ? strlen(service) : 0;
	if (hl > 255 || sl > 31)
		return -EINVAL;
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_job *j = tl__pool_job_new(l, pl);
	if (!j)
		return -ENOBUFS;
	j->type = TL_JT_RESOLVE;
	j->u.rs.out = out;
	j->u.rs.cap = cap < TL_RESOLVE_MAX ? cap : TL_RESOLVE_MAX;
	j->u.rs.n = 0;
	j->u.rs.family = hints ? hints->ai_family : AF_UNSPEC;
	j->u.rs.socktype = hints ? hints->ai_socktype : SOCK_STREAM;
	j->u.rs.protocol = hints ? hints->ai_protocol : 0;
	j->u.rs.flags = hints ? hints->ai_flags : 0;
	j->u.rs.has_host = host != NULL;
	j->u.rs.has_service = service != NULL;
	if (host)
		memcpy(j->u.rs.io.in.host, host, hl + 1);
	if (service)
		memcpy(j->u.rs.io.in.service, service, sl + 1);
	return tl__pool_submit(l, pl, j, TL_POOL_BOUNDED, TL_K_RESOLVE, token, -1, op);
}

/* ---- loop side ---- */

void tl__fs_deliver(struct tl_job *j, tl_completion *c, int cancelled)
{
	if (j->type == TL_JT_RESOLVE) {
		c->aux = 0;
		c->u.pool.ptr = j->u.rs.out;
		if (!cancelled && j->res > 0)
			memcpy(j->u.rs.out, j->u.rs.io.addrs, (size_t)j->res * sizeof(tl_addr));
		return;
	}
	c->u.pool.ptr = NULL;
	switch (j->fs_code) {
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
			memcpy(j->u.fs.user_out, &j->u.fs.st, sizeof j->u.fs.st);
		break;
	default:
		break;
	}
}

void tl__fs_discard(struct tl_job *j)
{
	if (j->type == TL_JT_FS && j->fs_code == TL_FS_OPEN && j->res >= 0)
		close((int)j->res);
}
