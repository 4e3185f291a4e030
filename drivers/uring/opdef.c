/* drivers/uring/opdef.c: the io_uring driver's opcode table, one row per operation family, and the file requests' native-or-pool rule. */
#include <fcntl.h>
#include "uring_int.h"
#include "turnloop/pool.h"

/*
 * Every place the driver treats operations differently asks this table
 * (opdef() in uring_int.h): submit and cancel (queue.c), the start list and
 * the CQEs (ring.c), the handle queues. A new operation is a row here and
 * the file that holds its hooks. Row 0 is no opcode.
 */
const struct ur_opdef tl__ur_opdefs[UR_ROWS_] = {
	[TL_OP_ACCEPT] = {
		.name = "accept",
		.rside = 1,
		.issue = tl__ur_issue_accept,
		.complete = tl__ur_on_accept,
	},
	[TL_OP_CONNECT] = {
		/* The SQE is prepared at submission (its Unix path is only
		 * valid then): the start entry has nothing left to do. */
		.name = "connect",
		.issue = tl__ur_issue_nop,
		.complete = tl__ur_on_connect,
	},
	[TL_OP_READ] = {
		.name = "read",
		.rside = 1,
		.reads = 1,
		.issue = tl__ur_issue_read,
		.complete = tl__ur_on_read,
	},
	[TL_OP_WRITE] = {
		.name = "write",
		.issue = tl__ur_issue_write,
		.complete = tl__ur_on_write,
	},
	[TL_OP_SHUTDOWN] = {
		/* Queued behind the writes, and issued as one of them. */
		.name = "shutdown",
		.issue = tl__ur_issue_write,
		.complete = tl__ur_on_write,
	},
	[TL_OP_SEND] = {
		.name = "send",
		.issue = tl__ur_dg_issue_send, /* dgram.c */
		.complete = tl__ur_dg_on_send,
	},
	[TL_OP_RECV] = {
		.name = "recv",
		.reads = 1,
		.issue = tl__ur_dg_issue_recv,
		.complete = tl__ur_dg_on_recv,
		.cancel = tl__ur_dg_cancel,
	},
	[TL_OP_SEND_FDS] = {
		.name = "send_fds",
		.issue = tl__ur_issue_send_fds,
		.complete = tl__ur_on_send_fds,
	},
	[TL_OP_RECV_FDS] = {
		.name = "recv_fds",
		.rside = 1,
		.reads = 1,
		.issue = tl__ur_issue_recv_fds,
		.complete = tl__ur_on_recv_fds,
	},
	[TL_OP_POLL] = { /* poll.c */
		.name = "poll",
		.submit = tl__ur_poll_submit,
		.issue = tl__ur_issue_poll,
		.complete = tl__ur_on_poll,
		.cancel = tl__ur_poll_cancel,
	},
	[TL_OP_SPLICE] = { /* splice.c: a pipe with bytes in it is flushed first */
		.name = "splice",
		.issue = tl__ur_splice_issue,
		.complete = tl__ur_splice_complete,
		.cancel = tl__ur_splice_cancel,
	},
	[UR_ROW_FS] = { /* fs.c: the core's TL_OP_POOL ops, through fs_submit */
		.name = "fs",
		.nohandle = 1,
		.complete = tl__ur_fs_complete,
		.cancel = tl__ur_fs_cancel,
	},
};
_Static_assert(sizeof tl__ur_opdefs / sizeof tl__ur_opdefs[0] == TL_OP_CODES_ + 1,
	       "one row per enum tl_opcode, and the file requests' row");

/* The io_uring opcode of each typed file request (0: none, it stays on the
 * pool). */
static const uint8_t fs_opcode[TL_FS_REQ_COUNT_] = {
	[TL_FS_OPEN] = IORING_OP_OPENAT,
	[TL_FS_CLOSE] = IORING_OP_CLOSE,
	[TL_FS_READ] = IORING_OP_READ,
	[TL_FS_WRITE] = IORING_OP_WRITE,
	[TL_FS_PREAD] = IORING_OP_READ,
	[TL_FS_PWRITE] = IORING_OP_WRITE,
	[TL_FS_STAT] = IORING_OP_STATX,
	[TL_FS_FSTAT] = IORING_OP_STATX,
	[TL_FS_FSYNC] = IORING_OP_FSYNC,
	[TL_FS_UNLINK] = IORING_OP_UNLINKAT,
	[TL_FS_RENAME] = IORING_OP_RENAMEAT,
	[TL_FS_MKDIR] = IORING_OP_MKDIRAT,
	[TL_FS_RMDIR] = IORING_OP_UNLINKAT,
};
_Static_assert(sizeof fs_opcode / sizeof fs_opcode[0] == TL_FS_REQ_COUNT_,
	       "one entry per enum tl_fs_req");

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

/* Native when the ring has the request's opcode; readdir has none. A
 * blocking open(2) never fails with ENXIO on a FIFO that has no reader yet
 * (it waits for one), but OPENAT tries the open with O_NONBLOCK first and
 * passes that ENXIO on: such an open runs here, and goes to the pool when
 * the kernel answers -ENXIO. */
int tl__ur_fs_route(struct tl_drv *d, const struct tl_fs_native_req *q, int *redo)
{
	*redo = 0;
	if (q->code >= TL_FS_REQ_COUNT_ || !(d->fs_ok & (1u << q->code)))
		return 0;
	if (q->code == TL_FS_OPEN && !(q->flags & O_NONBLOCK))
		*redo = -ENXIO;
	return 1;
}
