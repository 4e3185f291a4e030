/* lib/pool/fs.c: typed file requests (tl_fs_*), run natively by the driver where it can, else on the bounded pool. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#ifdef _WIN32
#include <direct.h> /* _mkdir, _rmdir */
#include <io.h>
#else
#include <dirent.h>
#include <unistd.h>
#endif
#include "os.h"
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

#ifdef _WIN32
/*
 * The C runtime's names for what POSIX calls the same: read, write, close,
 * stat, fstat, unlink, rmdir, and fsync as _commit (FlushFileBuffers).
 * Win32 where the runtime's call differs from POSIX's: open is CreateFile
 * sharing read, write and delete (the runtime's _open shares no delete,
 * so a file it holds open could not be renamed or unlinked, which POSIX
 * allows), made a runtime descriptor by _open_osfhandle; rename replaces
 * an existing target as POSIX's does (MoveFileEx); mkdir has no mode
 * (_mkdir: Windows' ACLs, not mode bits, guard a directory); and a
 * directory is listed with FindFirstFile. Positioned reads and writes are
 * the platform layer's (ReadFile and WriteFile at an OVERLAPPED offset).
 */
#define FS_OPEN(p, fl, m) win_open(p, fl, m)
#define FS_CLOSE(fd) _close(fd)
#define FS_READ(fd, b, n) _read(fd, b, n)
#define FS_WRITE(fd, b, n) _write(fd, b, n)
#define FS_FSYNC(fd) _commit(fd)
#define FS_UNLINK(p) _unlink(p)
#define FS_MKDIR(p, m) ((void)(m), _mkdir(p))
#define FS_RMDIR(p) _rmdir(p)

/* A Win32 failure as -1 with errno set, as the C runtime's calls report. */
static long win_fail(DWORD e)
{
	errno = -tl__os_win_error(e);
	return -1;
}

/* open(2)'s flags as CreateFile's: the access of O_RDONLY, O_WRONLY or
 * O_RDWR; O_CREAT, O_EXCL and O_TRUNC as the disposition; O_APPEND and
 * O_TEXT kept by the runtime's descriptor (binary otherwise: no newline
 * translation, as on POSIX). The handle is never inherited (O_CLOEXEC's
 * counterpart). A file created without the owner's write bit (0200) is
 * read-only, as _open makes it; the other mode bits have no counterpart. */
static long win_open(const char *path, int flags, unsigned mode)
{
	DWORD access = (flags & _O_ACCMODE) == _O_WRONLY ? GENERIC_WRITE
		       : (flags & _O_ACCMODE) == _O_RDWR ? GENERIC_READ | GENERIC_WRITE
							  : GENERIC_READ;
	DWORD disp = flags & _O_CREAT ? (flags & _O_EXCL    ? CREATE_NEW
					 : flags & _O_TRUNC ? CREATE_ALWAYS
							    : OPEN_ALWAYS)
				       : flags & _O_TRUNC ? TRUNCATE_EXISTING
							  : OPEN_EXISTING;
	DWORD attr = (flags & _O_CREAT) && !(mode & _S_IWRITE) ? FILE_ATTRIBUTE_READONLY
							       : FILE_ATTRIBUTE_NORMAL;
	HANDLE h = CreateFileA(path, access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
			       NULL, disp, attr, NULL);
	if (h == INVALID_HANDLE_VALUE)
		return win_fail(GetLastError());
	int fd = _open_osfhandle((intptr_t)h, flags & (_O_APPEND | _O_TEXT));
	if (fd < 0) {
		CloseHandle(h);
		errno = EMFILE;
		return -1;
	}
	return fd;
}

static long fs_rename(const char *from, const char *to)
{
	return MoveFileExA(from, to, MOVEFILE_REPLACE_EXISTING) ? 0 : win_fail(GetLastError());
}

/* FindFirstFile's listing, as getdents64's: entries with DT_DIR, DT_LNK
 * (a reparse point: a symbolic link or a junction) or DT_REG; -ENOTDIR for
 * a path that is not a directory. The cancellation flag is looked at
 * between entries. */
static int64_t list_dir(struct tl_job *j)
{
	struct tl_fs_job *f = tl__fs_job(j);
	DWORD attr = GetFileAttributesA(f->path);
	if (attr == INVALID_FILE_ATTRIBUTES)
		return tl__os_win_error(GetLastError());
	if (!(attr & FILE_ATTRIBUTE_DIRECTORY))
		return -ENOTDIR;
	char pat[MAX_PATH + 3];
	size_t pl = strlen(f->path);
	if (pl + 3 > sizeof pat)
		return -ENAMETOOLONG;
	memcpy(pat, f->path, pl);
	if (pl && pat[pl - 1] != '/' && pat[pl - 1] != '\\')
		pat[pl++] = '\\';
	pat[pl++] = '*';
	pat[pl] = 0;
	WIN32_FIND_DATAA d;
	HANDLE h = FindFirstFileA(pat, &d);
	if (h == INVALID_HANDLE_VALUE)
		return GetLastError() == ERROR_FILE_NOT_FOUND ? 0 : tl__os_win_error(GetLastError());
	tl_dirent *out = f->buf;
	uint32_t cap = f->len, stored = 0;
	uint64_t total = 0;
	int64_t res = 0;
	do {
		if (tl_pool_cancelled((tl_cancel_flag *)j))
			break;
		const char *nm = d.cFileName;
		if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2])))
			continue;
		total++;
		if (stored < cap) {
			size_t len = strnlen(nm, sizeof out->name - 1);
			memcpy(out[stored].name, nm, len);
			out[stored].name[len] = 0;
			out[stored].type = d.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT ? DT_LNK
					   : d.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY  ? DT_DIR
											    : DT_REG;
			stored++;
		}
	} while (FindNextFileA(h, &d));
	if (GetLastError() != ERROR_NO_MORE_FILES && !tl_pool_cancelled((tl_cancel_flag *)j))
		res = tl__os_win_error(GetLastError());
	FindClose(h);
	if (res < 0)
		return res;
	j->value = total;
	return stored;
}
#else
#define FS_OPEN(p, fl, m) open(p, (fl) | O_CLOEXEC, (mode_t)(m))
#define FS_CLOSE(fd) close(fd)
#define FS_READ(fd, b, n) read(fd, b, n)
#define FS_WRITE(fd, b, n) write(fd, b, n)
#define FS_FSYNC(fd) fsync(fd)
#define FS_UNLINK(p) unlink(p)
#define FS_MKDIR(p, m) mkdir(p, (mode_t)(m))
#define FS_RMDIR(p) rmdir(p)
#define fs_rename(a, b) rename(a, b)

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
#endif

static void fs_run(struct tl_job *j)
{
	struct tl_fs_job *f = tl__fs_job(j);
	long r = 0;
	int64_t res;
	const char *p = f->path;
	int fd = f->fd;
	switch (f->code) {
	case TL_FS_OPEN:
		r = FS_OPEN(p, f->flags, f->mode);
		/* Loop already gone: nobody will ever see this descriptor. */
		if (r >= 0 && tl__pool_loop_gone(j)) {
			FS_CLOSE((int)r);
			errno = ECANCELED;
			r = -1;
		}
		break;
	case TL_FS_CLOSE:
		r = FS_CLOSE(fd);
		break;
	case TL_FS_READ:
		r = FS_READ(fd, f->buf, f->len);
		break;
	case TL_FS_WRITE:
		r = FS_WRITE(fd, f->buf, f->len);
		break;
	case TL_FS_PREAD:
		r = tl__os_pread(fd, f->buf, f->len, f->off);
		break;
	case TL_FS_PWRITE:
		r = tl__os_pwrite(fd, f->buf, f->len, f->off);
		break;
	case TL_FS_STAT:
		r = stat(p, &f->st);
		break;
	case TL_FS_FSTAT:
		r = fstat(fd, &f->st);
		break;
	case TL_FS_FSYNC:
		r = FS_FSYNC(fd);
		break;
	case TL_FS_UNLINK:
		r = FS_UNLINK(p);
		break;
	case TL_FS_RENAME:
		r = fs_rename(p, f->path2);
		break;
	case TL_FS_MKDIR:
		r = FS_MKDIR(p, f->mode);
		break;
	case TL_FS_RMDIR:
		r = FS_RMDIR(p);
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
			FS_CLOSE((int)j->res);
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
		FS_CLOSE((int)j->res);
}

static const struct tl_job_ops fs_ops = {
	.run = fs_run,
	.deliver = fs_deliver,
	.discard = fs_discard,
#ifndef _WIN32
	.native_result = tl__fs_native_result,
	.native_retry = tl__fs_native_retry,
#endif
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
#ifndef _WIN32
	/* The driver's native path first, where it has one (its fs_route
	 * decides). */
	r = tl__fs_native_submit(l, pl, j, token, op);
	if (r != -ENOTSUP)
		return r;
#endif
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
