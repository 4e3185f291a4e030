/* drivers/epoll/poll.c: the epoll driver's readiness polls of descriptors the loop does not own (TL_OP_POLL). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "epoll_int.h"

/* ---- polls of descriptors the loop does not own ---- */

int tl__ep_poll_submit(struct tl_drv *d, struct tl_opslot *o)
{
	int dfd = fcntl(o->poll.fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	struct epoll_event ev = {
		/* poll(2)'s bits are epoll's on Linux. */
		.events = o->poll.events | (o->poll.multi ? 0 : EPOLLONESHOT),
		.data.u64 = EV_POLL | (uint64_t)o->gen << 32 | o->idx,
	};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, dfd, &ev) < 0) {
		int e = -errno;
		close(dfd);
		return e;
	}
	EO(o)->dfd = dfd;
	return 0;
}

static void poll_remove(struct tl_drv *d, struct tl_opslot *o)
{
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, EO(o)->dfd, NULL);
	close(EO(o)->dfd);
	EO(o)->dfd = -1;
}

int tl__ep_poll_cancel(struct tl_drv *d, struct tl_opslot *o)
{
	if (EO(o)->dfd < 0)
		return -ENOENT;
	poll_remove(d, o);
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	return 0;
}

void tl__ep_poll_event(struct tl_drv *d, uint64_t tag, uint32_t ev)
{
	struct tl_opslot *o = tl__drv_op(d->loop, (uint32_t)tag & (TL_ID_MAX_SLOTS - 1));
	/* Ended earlier in this batch, or the slot went to another op. */
	if (!(o->flags & TL_OPF_LIVE) || o->gen != (uint16_t)(tag >> 32) || o->code != TL_OP_POLL ||
	    EO(o)->dfd < 0)
		return;
	uint32_t res = ev & (o->poll.events | EPOLLERR | EPOLLHUP);
	if (!o->poll.multi) {
		poll_remove(d, o);
		tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	/* Level-triggered: without room now, the next epoll_wait reports it
	 * again. */
	if (tl__drv_room(d->loop))
		tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
}
