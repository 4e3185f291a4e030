/* lib/watch.c: file and directory watches (inotify): batches read into pooled leases on readiness, overflow flagged. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>
#include "sysmod.h"
#include "turnloop/watch.h"

/*
 * A watch is an inotify instance with one watch descriptor, polled for
 * input through the driver (a one-shot poll the core owns, lib/sysmod.h).
 * When it is ready the core reads the queue into a free lease, as many
 * records as fit, and hands that lease to the host as one batch; then it
 * polls again (a queue with more left is ready at once). No lease free:
 * the op waits for one (tl__poll_lease_wait), reading nothing meanwhile.
 */

#define REC_MAX (sizeof(struct inotify_event) + NAME_MAX + 1)
#define MASK_OK (IN_ALL_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

int tl_watch_start(tl_loop *l, const char *path, uint32_t mask, uint64_t token, tl_handle *hid,
		   tl_op *oid)
{
	if (!path || !hid || !oid || !mask || (mask & ~(uint32_t)MASK_OK) ||
	    !(mask & IN_ALL_EVENTS) || l->lease_size < REC_MAX)
		return -EINVAL;
	if (!tl__can_poll(l))
		return -ENOTSUP;
	if (l->nhandles == l->cfg.max_handles || l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (inotify_add_watch(fd, path, mask) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	struct tl_hslot *h = tl__handle_new(l, TL_H_WATCH);
	h->fd = fd;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_POLL, TL_K_WATCH, token, &o);
	if (r == 0) {
		o->flags |= TL_OPF_MULTI;
		o->poll.fd = fd;
		o->poll.events = POLLIN;
		r = tl__poll_arm(l, o);
		if (r < 0)
			tl__op_refuse(l, o);
	}
	if (r < 0) {
		close(fd);
		tl__handle_free(l, h);
		return r;
	}
	*hid = tl__h_id(l, h);
	*oid = tl__op_id(l, o);
	return 0;
}

static void finish(tl_loop *l, struct tl_opslot *o, int64_t res)
{
	tl__op_event(l, o, res, TL_F_TERMINAL, TL_NO_LEASE);
}

static void watch_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	if (o->flags & TL_OPF_CANCEL) {
		finish(l, o, 0); /* reported as Stopped or Cancelled */
		return;
	}
	if (res < 0) {
		finish(l, o, res);
		return;
	}
	if (!tl__drv_room(l)) {
		tl__poll_ready(l, o, 0); /* the next turn */
		return;
	}
	uint32_t lease = tl__lease_take(l);
	if (lease == TL_NO_LEASE) {
		tl__poll_lease_wait(l, o);
		return;
	}
	uint32_t size, cnt;
	uint8_t *buf = tl__drv_lease_base(l, &size, &cnt) + (size_t)lease * size;
	struct tl_hslot *h = &l->h[o->hidx];
	ssize_t n;
	do
		n = read(h->fd, buf, size);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		int e = errno;
		tl__drv_lease_drop(l, lease);
		if (n < 0 && e != EAGAIN) {
			finish(l, o, -e);
			return;
		}
	} else {
		uint32_t events = 0, overflow = 0;
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			events++;
			overflow |= (ev->mask & IN_Q_OVERFLOW) != 0;
			off += (ssize_t)(sizeof *ev + ev->len);
		}
		tl_completion *c = tl__op_event(l, o, n, 0, lease);
		if (c) {
			c->u.watch.events = events;
			c->u.watch.overflow = overflow;
		}
	}
	int r = tl__poll_arm(l, o);
	if (r < 0)
		finish(l, o, r);
}

const struct tl_pollkind tl__watch_kind = {.ready = watch_ready};

void tl__watch_release(tl_loop *l, struct tl_hslot *h)
{
	close(h->fd);
}

int tl_watch_next(const tl_completion *c, uint32_t *off, tl_watch_event *out)
{
	if (!c || !off || !out || c->kind != TL_K_WATCH || !(c->flags & TL_F_LEASE) ||
	    c->result <= 0)
		return 0;
	uint64_t n = (uint64_t)c->result;
	if ((uint64_t)*off + sizeof(struct inotify_event) > n)
		return 0;
	struct inotify_event ev;
	memcpy(&ev, c->u.watch.lease.data + *off, sizeof ev);
	if ((uint64_t)*off + sizeof ev + ev.len > n)
		return 0;
	out->mask = ev.mask;
	out->cookie = ev.cookie;
	const char *name = (const char *)(c->u.watch.lease.data + *off + sizeof ev);
	out->name = ev.len && name[0] ? name : NULL;
	*off += (uint32_t)(sizeof ev + ev.len);
	return 1;
}
