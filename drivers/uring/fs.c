/* drivers/uring/fs.c: typed file requests (tl_fs_*) run as io_uring opcodes instead of on the blocking pool. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "uring_int.h"
#include "turnloop/pool.h"

/*
 * Typed file requests (lib/pool/fs.c) come through fs_submit as handle-less ops
 * (TL_OP_POOL) whose paths and statx buffer live in the pool's job record;
 * their SQE is prepared at once, like a connect's, and submitted by the
 * turn's enter. Which of them run here rather than on the pool is
 * decided in opdef.c (tl__ur_fs_route), with their opcodes.
 */

/* Prepare the request's SQE now (like a connect): everything it points at
 * lives in the op's job record or the caller's buffer until the terminal,
 * and the turn's single enter submits it with the rest. */
int tl__ur_fs_submit(struct tl_drv *d, struct tl_opslot *o, const struct tl_fs_native_req *q)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	struct ur_o *u = UO(o);
	memset(u, 0, sizeof *u);
	u->qnext = u->lnext = u->lprev = TL_NIL;
	u->fs_code = q->code; /* for tl__ur_fs_done */
	switch (q->code) {
	case TL_FS_OPEN:
		io_uring_prep_openat(s, AT_FDCWD, q->path, q->flags, (mode_t)q->mode);
		break;
	case TL_FS_CLOSE:
		io_uring_prep_close(s, q->fd);
		break;
	case TL_FS_READ:
	case TL_FS_PREAD:
		/* Offset -1: the file's current position, as read(2). */
		io_uring_prep_read(s, q->fd, q->buf, q->len,
				   q->code == TL_FS_READ ? (uint64_t)-1 : q->off);
		u->kbuf = q->buf;
		u->klen = q->len;
		break;
	case TL_FS_WRITE:
	case TL_FS_PWRITE:
		io_uring_prep_write(s, q->fd, q->buf, q->len,
				    q->code == TL_FS_WRITE ? (uint64_t)-1 : q->off);
		break;
	case TL_FS_STAT:
		io_uring_prep_statx(s, AT_FDCWD, q->path, 0, STATX_BASIC_STATS, q->stx);
		u->kbuf = q->stx;
		u->klen = sizeof *q->stx;
		break;
	case TL_FS_FSTAT:
		io_uring_prep_statx(s, q->fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, q->stx);
		u->kbuf = q->stx;
		u->klen = sizeof *q->stx;
		break;
	case TL_FS_FSYNC:
		io_uring_prep_fsync(s, q->fd, 0);
		break;
	case TL_FS_UNLINK:
		io_uring_prep_unlinkat(s, AT_FDCWD, q->path, 0);
		break;
	case TL_FS_RMDIR:
		io_uring_prep_unlinkat(s, AT_FDCWD, q->path, AT_REMOVEDIR);
		break;
	case TL_FS_RENAME:
		io_uring_prep_renameat(s, AT_FDCWD, q->path, AT_FDCWD, q->path2, 0);
		break;
	default: /* TL_FS_MKDIR: tl__ur_fs_route let nothing else through */
		io_uring_prep_mkdirat(s, AT_FDCWD, q->path, (mode_t)q->mode);
		break;
	}
	io_uring_sqe_set_data64(s, ud_op(o));
	u->st = ST_KERNEL;
	d->st.fs_native++;
	if (d->embed)
		tl__ur_flush_embed(d);
	return 0;
}

/* An open that succeeded after its cancellation was asked for gives its
 * descriptor back here: the host gets -ECANCELED and must never see (or
 * leak) it. */
void tl__ur_fs_done(struct tl_drv *d, struct tl_opslot *o, int64_t res)
{
	struct ur_o *u = UO(o);
	u->st = ST_IDLE;
	if (res > 0 && u->kbuf)
		kernel_wrote(d, u->kbuf, (size_t)res < u->klen ? (size_t)res : u->klen);
	else if (res == 0 && u->kbuf && u->klen == sizeof(struct statx))
		kernel_wrote(d, u->kbuf, u->klen);
	if (res >= 0 && (o->flags & TL_OPF_CANCEL) && u->fs_code == TL_FS_OPEN) {
		close((int)res);
		res = -ECANCELED;
		d->st.fs_open_closed++;
	}
	tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
}

/* The row's CQE: no handle. */
void tl__ur_fs_complete(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int res,
			unsigned cf)
{
	tl__ur_fs_done(d, o, res);
}

int tl__ur_fs_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (UO(o)->st != ST_KERNEL) {
		/* Not reached today (fs_submit prepares the SQE at once), but a
		 * request the kernel does not hold is acknowledged at once. */
		tl__ur_fs_done(d, o, -ECANCELED);
		return 0;
	}
	return tl__ur_cancel_sqe(d, o);
}
