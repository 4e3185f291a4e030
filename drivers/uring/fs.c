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
 * turn's enter. Which of them the kernel has is probed once per ring; the
 * rest stay on the pool.
 */

/* Opcodes for the native file requests (0: none, stays on the pool). */
static const uint8_t fs_opcode[TL_FS_REQ_COUNT_] = {
	[TL_FS_OPEN] = IORING_OP_OPENAT,   [TL_FS_CLOSE] = IORING_OP_CLOSE,
	[TL_FS_READ] = IORING_OP_READ,     [TL_FS_WRITE] = IORING_OP_WRITE,
	[TL_FS_PREAD] = IORING_OP_READ,    [TL_FS_PWRITE] = IORING_OP_WRITE,
	[TL_FS_STAT] = IORING_OP_STATX,    [TL_FS_FSTAT] = IORING_OP_STATX,
	[TL_FS_FSYNC] = IORING_OP_FSYNC,   [TL_FS_UNLINK] = IORING_OP_UNLINKAT,
	[TL_FS_RENAME] = IORING_OP_RENAMEAT, [TL_FS_MKDIR] = IORING_OP_MKDIRAT,
	[TL_FS_RMDIR] = IORING_OP_UNLINKAT,
};

/* Once per ring, at init: a kernel without an opcode leaves that request
 * on the pool rather than failing it with -EINVAL. */
uint32_t tl__ur_probe_fs(struct io_uring *r)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(r);
	uint32_t ok = 0;
	if (!p)
		return 0;
	for (unsigned c = 1; c < TL_FS_REQ_COUNT_; c++)
		if (fs_opcode[c] && io_uring_opcode_supported(p, fs_opcode[c]))
			ok |= 1u << c;
	io_uring_free_probe(p);
	return ok;
}

/* Prepare the request's SQE now (like a connect): everything it points at
 * lives in the op's job record or the caller's buffer until the terminal,
 * and the turn's single enter submits it with the rest. */
int tl__ur_fs_submit(struct tl_drv *d, struct tl_opslot *o, const struct tl_fs_native_req *q)
{
	if (q->code >= TL_FS_REQ_COUNT_ || !(d->fs_ok & (1u << q->code)))
		return -ENOTSUP;
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
	default: /* TL_FS_MKDIR: the probe let nothing else through */
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
