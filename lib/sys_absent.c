/* lib/sys_absent.c: the contract 5 modules and splicing in a build for an OS that does not have them yet (Windows): every call says -ENOTSUP, every hook of the turn is empty. */
#include <errno.h>
#include <stdint.h>
#include "sysmod.h"
#include "turnloop/proc.h"
#include "turnloop/signal.h"
#include "turnloop/tty.h"
#include "turnloop/watch.h"

/*
 * Compiled instead of signal.c, proc.c, tty.c, watch.c and splice.c
 * where those do not build (lib/meson.build's Windows block; poll.c is
 * built there: the IOCP driver polls foreign sockets). Their public calls
 * exist and refuse with -ENOTSUP, so a program links and learns at run
 * time what the platform lacks (docs/WINDOWS.md names each). No handle or
 * op of theirs can exist, so the core's hooks into them find nothing to
 * do (the few that are handed an op end it, should one ever come).
 */

/* ---- public calls ---- */

int tl_signal_start(tl_loop *loop, int signo, uint64_t token, tl_handle *h, tl_op *op)
{
	return -ENOTSUP;
}

int tl_spawn(tl_loop *loop, const tl_spawn_opts *opts, uint64_t token, tl_handle *proc,
	     tl_op *exit_op, tl_handle pipes[3])
{
	return -ENOTSUP;
}

int tl_proc_pid(tl_loop *loop, tl_handle proc)
{
	return -ENOTSUP;
}

int tl_proc_kill(tl_loop *loop, tl_handle proc, int sig)
{
	return -ENOTSUP;
}

int tl_proc_kill_group(tl_loop *loop, tl_handle proc, int sig)
{
	return -ENOTSUP;
}

int tl_stdio_open(tl_loop *loop, int fd, tl_handle *h)
{
	return -ENOTSUP;
}

int tl_tty_mode(tl_loop *loop, tl_handle h, int mode)
{
	return -ENOTSUP;
}

int tl_tty_winsize(tl_loop *loop, tl_handle h, uint16_t *cols, uint16_t *rows)
{
	return -ENOTSUP;
}

int tl_watch_start(tl_loop *loop, const char *path, uint32_t mask, uint64_t token, tl_handle *h,
		   tl_op *op)
{
	return -ENOTSUP;
}

int tl_watch_next(const tl_completion *c, uint32_t *off, tl_watch_event *ev)
{
	return -ENOTSUP;
}

int tl_splice(tl_loop *loop, tl_handle src, tl_handle dst, uint32_t max, uint64_t token, tl_op *op)
{
	return -ENOTSUP;
}

int tl_sendfile(tl_loop *loop, int file_fd, uint64_t off, uint32_t len, tl_handle dst,
		uint64_t token, tl_op *op)
{
	return -ENOTSUP;
}

/* ---- the core's hooks: nothing of these modules ever exists ---- */

int tl__pipes_init(tl_loop *l)
{
	return 0;
}

void tl__pipes_free(tl_loop *l)
{
}

void tl__splice_retire(tl_loop *l, struct tl_opslot *o)
{
}

int tl__signal_inner(tl_loop *l, int signo, int on)
{
	return -ENOTSUP;
}

int tl__signal_inner_hit(tl_loop *l, int signo)
{
	return 0;
}

int tl__signal_ready(tl_loop *l)
{
	return 0;
}

void tl__signal_run(tl_loop *l)
{
}

void tl__signal_destroy(tl_loop *l)
{
}

void tl__signal_cancel(tl_loop *l, struct tl_opslot *o)
{
	tl__op_event(l, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
}

uint64_t tl__proc_deadline(tl_loop *l)
{
	return UINT64_MAX;
}

void tl__proc_run(tl_loop *l, uint64_t now)
{
}

void tl__proc_destroy(tl_loop *l)
{
}

void tl__proc_release(tl_loop *l, struct tl_hslot *h)
{
}

int tl__proc_waiting(const tl_loop *l)
{
	return 0;
}

void tl__tty_release(tl_loop *l, struct tl_hslot *h)
{
}

void tl__watch_release(tl_loop *l, struct tl_hslot *h)
{
}

int tl__stdio_read(tl_loop *l, struct tl_hslot *h, void *buf, uint32_t len, uint16_t flags,
		   uint64_t token, tl_op *oid)
{
	return -ENOTSUP;
}

int tl__stdio_writev(tl_loop *l, struct tl_hslot *h, const tl_iovec *iov, int n, uint64_t token,
		     tl_op *oid)
{
	return -ENOTSUP;
}

/* What a driver reports of a splice op, of which there are none. */
void tl__drv_splice_io(tl_loop *l, struct tl_opslot *o, uint32_t in, uint32_t out)
{
}

void tl__drv_splice_src_done(tl_loop *l, struct tl_opslot *o)
{
}
