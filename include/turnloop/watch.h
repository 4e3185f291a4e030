/* turnloop/watch.h: watching a file or directory for changes, with batched events (contract 5: watches). */
#ifndef TURNLOOP_WATCH_H
#define TURNLOOP_WATCH_H

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Watch path (a file or a directory) for the inotify(7) events in mask
 * (IN_CREATE, IN_DELETE, IN_MODIFY, IN_MOVED_FROM, ..., IN_ALL_EVENTS from
 * <sys/inotify.h>, optionally with IN_ONLYDIR, IN_DONT_FOLLOW,
 * IN_EXCL_UNLINK), until stopped. Each watch has an inotify instance of its
 * own (the kernel's default limit is 128 per user).
 *
 * Events come in batches: each nonterminal TL_K_WATCH completion carries,
 * in a pooled lease (TL_F_LEASE, u.watch.lease; release it with
 * tl_lease_release), the kernel's records as read: result = their bytes,
 * u.watch.events = how many, and u.watch.overflow = 1 when the kernel's
 * queue overflowed (IN_Q_OVERFLOW: events were lost; rescan what you
 * watch). Walk a batch with tl_watch_next(). The records are read only
 * into a lease, so a steady watch allocates nothing; with no lease free,
 * reading waits until one is released (the kernel queues meanwhile, and
 * may overflow). Batches count against the turn's budget of native events.
 *
 * When the watched file or directory is deleted or unmounted, the kernel
 * reports IN_DELETE_SELF or IN_UNMOUNT and then IN_IGNORED: nothing more
 * comes; stop the watch.
 *
 * The handle lives as long as its one op: tl_stop(op) delivers Stopped,
 * then the handle's Closed (token: the op's token); tl_close(h, token)
 * delivers Cancelled, then Closed.
 *
 * Returns 0 and sets *h and *op, or -EINVAL (path, h or op NULL, mask 0 or
 * with other bits, or IN_ONESHOT / IN_MASK_ADD; the loop's pooled buffers
 * smaller than one record with the longest name, 272 bytes), -ENOBUFS
 * (handle or op table full), -ENOTSUP (the driver lacks TL_CAP_POLL), or
 * the OS error (-ENOENT: no such path, -ENOTDIR with IN_ONLYDIR, -EMFILE:
 * too many inotify instances, -ENOSPC: too many watches).
 */
int tl_watch_start(tl_loop *loop, const char *path, uint32_t mask, uint64_t token,
		   tl_handle *h, tl_op *op);

/* One event of a batch. */
typedef struct tl_watch_event {
	uint32_t mask;    /* IN_* bits (IN_ISDIR: the name is a directory) */
	uint32_t cookie;  /* pairs IN_MOVED_FROM with IN_MOVED_TO */
	const char *name; /* an entry of a watched directory, NUL-terminated, inside
			   * the lease; NULL for the watched path itself */
} tl_watch_event;

/*
 * Walk the batch of TL_K_WATCH completion c: *off starts at 0; each call
 * fills *ev with the next event and returns 1, or returns 0 at the end (or
 * for a completion that carries no batch). IN_Q_OVERFLOW shows as an event
 * of its own (mask IN_Q_OVERFLOW, name NULL).
 */
int tl_watch_next(const tl_completion *c, uint32_t *off, tl_watch_event *ev);

#ifdef __cplusplus
}
#endif
#endif
