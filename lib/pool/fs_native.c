/* lib/pool/fs_native.c: typed file requests run by the loop's driver (io_uring opcodes) instead of a pool worker. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sysmacros.h>
#include "core.h"
#include "fs.h"

int tl__fs_native_submit(tl_loop *l, struct tl_pool_loop *pl, struct tl_job *j,
			 uint64_t token, tl_op *op)
{
	struct tl_fs_job *f = tl__fs_job(j);
	if (!l->dv->fs_route)
		return -ENOTSUP;
	j->rsv = -1;
	f->redo = 0;
	struct tl_fs_native_req q = {
		.code = f->code,
		.fd = f->fd,
		.flags = f->flags | O_CLOEXEC, /* as the pool's open does */
		.mode = f->mode,
		.path = f->path,
		.path2 = f->path2,
		.buf = f->buf,
		.len = f->len,
		.off = f->off,
		.stx = &f->stx,
	};
	/* The driver decides (io_uring: the opcodes its kernel has). A result
	 * it cannot give the caller goes to the pool through a reservation
	 * taken now, keeping its op (and id). */
	int redo;
	if (!l->dv->fs_route(l->d, &q, &redo))
		return -ENOTSUP;
	if (redo) {
		/* No room for the fallback: the pool path now (and its refusal). */
		int set = tl__pool_reserve(l);
		if (set < 0)
			return -ENOTSUP;
		j->rsv = set;
		f->redo = (int16_t)redo;
	}
	struct tl_opslot *o;
	int r = tl__pool_native_begin(l, pl, j, TL_K_FS, token, &o);
	if (r < 0)
		return r;
	tl_op id = tl__op_id(l, o);
	r = tl__pool_native_end(pl, j, tl__op_fs_submit(l, o, &q));
	if (r == 0)
		*op = id;
	return r;
}

int tl__fs_native_retry(tl_loop *l, struct tl_opslot *o, struct tl_job *j, int64_t res)
{
	if (!tl__fs_job(j)->redo || res != tl__fs_job(j)->redo || j->rsv < 0 ||
	    (o->flags & TL_OPF_CANCEL))
		return 0;
	/* Out of the kernel: no longer native. */
	tl__op_native_end(l, o);
	tl__pool_requeue(l, j);
	return 1;
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
	struct tl_fs_job *f = tl__fs_job(j);
	if ((f->code == TL_FS_STAT || f->code == TL_FS_FSTAT) && res == 0) {
		/* st and stx share storage: convert from a copy. */
		struct statx x = f->stx;
		stat_from_statx(&f->st, &x);
	}
	j->res = res;
	j->value = (uint64_t)res;
}
