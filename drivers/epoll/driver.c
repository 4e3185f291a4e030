/* drivers/epoll/driver.c: the epoll driver's instance, handles, the poll and its table of operations. */
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
#include "os.h"
#include "../dgram_io.h"

uint64_t tl__ep_now(struct tl_drv *d)
{
	(void)d;
	return tl__os_mono_ns();
}

static int ep_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out)
{
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->hs = tl__drv_handle(loop, 0);
	d->os = tl__drv_op(loop, 0);
	d->wake = wake;
	d->rcap = 2 * cfg->max_handles + 1;
	d->ready = malloc(d->rcap * sizeof *d->ready);
	d->lwait = malloc(cfg->max_handles * sizeof *d->lwait);
	d->emfile = malloc(cfg->max_handles * sizeof *d->emfile);
	d->maxev = cfg->events_per_turn < MAX_EVENTS ? cfg->events_per_turn : MAX_EVENTS;
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	int r = -errno;
	if (d->epfd < 0 || !d->ready || !d->lwait || !d->emfile)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, tl__os_notifier_fd(wake), &ev) < 0) {
		r = -errno;
		goto fail;
	}
	d->tfd = -1;
	d->tfd_at = UINT64_MAX;
	if (cfg->embed) {
		struct epoll_event tev = {.events = EPOLLIN, .data.u64 = EV_TIMER};
		d->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (d->tfd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->tfd, &tev) < 0) {
			r = -errno;
			if (d->tfd >= 0)
				close(d->tfd);
			goto fail;
		}
	}
	*out = d;
	return 0;
fail:
	if (r == 0)
		r = -ENOMEM;
	if (d->epfd >= 0)
		close(d->epfd);
	free(d->ready);
	free(d->lwait);
	free(d->emfile);
	free(d);
	return r;
}

static void ep_destroy(struct tl_drv *d)
{
	if (d->tfd >= 0)
		close(d->tfd);
	close(d->epfd);
	free(d->ready);
	free(d->lwait);
	free(d->emfile);
	free(d);
}

void tl__ep_mark_ready(struct tl_drv *d, struct tl_hslot *h)
{
	struct ep_h *e = EH(h);
	if (e->queued)
		return;
	e->queued = 1;
	uint32_t i = d->rhead + d->rlen;
	if (i >= d->rcap)
		i -= d->rcap;
	d->ready[i] = h->idx;
	d->rlen++;
}

int tl__ep_do_register(struct tl_drv *d, struct tl_hslot *h)
{
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
		.data.u64 = ((uint64_t)h->gen << 32) | h->idx,
	};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, h->fd, &ev) < 0)
		return -errno;
	EH(h)->registered = 1;
	return 0;
}

static void reset_h(struct tl_hslot *h)
{
	struct ep_h *e = EH(h);
	memset(e, 0, sizeof *e);
	e->rhead = e->rtail = e->whead = e->wtail = TL_NIL;
	e->spl = TL_NIL;
}

static int ep_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *s)
{
	int fd = tl__sock_open(s);
	if (fd < 0)
		return fd;
	h->fd = fd;
	reset_h(h);
	/* Streams register when they connect (a fresh socket reports
	 * hang-up, which must not look like a finished connect). */
	if (s->kind == TL_OPEN_TCP_STREAM || s->kind == TL_OPEN_UNIX_STREAM)
		return 0;
	int r = tl__ep_do_register(d, h);
	if (r < 0) {
		close(fd);
		h->fd = -1;
	}
	if (s->kind == TL_OPEN_UDP)
		EH(h)->writable = 1;
	return r;
}

static int ep_attach(struct tl_drv *d, struct tl_hslot *h)
{
	reset_h(h);
	EH(h)->writable = 1;
	return tl__ep_do_register(d, h);
}

static int ep_adopt(struct tl_drv *d, struct tl_hslot *h, int fd)
{
	uint8_t type, fl;
	struct tl__sock_prev prev;
	int r = tl__sock_adopt(fd, &type, &fl, &prev);
	if (r < 0)
		return r;
	uint8_t type0 = h->type, flags0 = h->flags;
	h->type = type;
	h->flags |= fl;
	h->fd = fd;
	/* Registering reports what is already there (bytes, connections, the
	 * peer's end) as the first edge. */
	r = ep_attach(d, h);
	if (r < 0) {
		h->type = type0;
		h->flags = flags0;
		h->fd = -1;
		tl__sock_unadopt(fd, &prev);
	}
	return r;
}

/* The descriptor goes on living elsewhere: an epoll registration outlives
 * our descriptor while any other refers to the same file, so take it out. */
static int ep_detach(struct tl_drv *d, struct tl_hslot *h)
{
	if (EH(h)->registered)
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	EH(h)->registered = 0;
	EH(h)->queued = 0; /* a stale ring entry is skipped */
	h->fd = -1;
	return 0;
}


static void retry_emfile(struct tl_drv *d)
{
	while (d->nemfile) {
		struct tl_hslot *lh = tl__drv_handle(d->loop, d->emfile[--d->nemfile]);
		if (lh->type == TL_H_LISTEN && EH(lh)->emfile) {
			EH(lh)->emfile = 0;
			EH(lh)->readable = 1;
			tl__ep_mark_ready(d, lh);
		}
	}
}

static void ep_release(struct tl_drv *d, struct tl_hslot *h)
{
	/* A registration lives as long as the file, not the descriptor: a
	 * listener or datagram socket is often open elsewhere too (a copy the
	 * program kept, another process it was handed to), and its entry
	 * would stay behind, so that adopting that copy again under this
	 * number is -EEXIST. Streams are left to close(): the loop made their
	 * only descriptor, and one handed on goes by tl_detach (ep_detach). */
	if (EH(h)->registered && h->type != TL_H_STREAM)
		epoll_ctl(d->epfd, EPOLL_CTL_DEL, h->fd, NULL);
	EH(h)->registered = 0;
	tl__sock_release(h->fd, h->flags & TL_HF_ABORT);
	h->fd = -1;
	EH(h)->queued = 0; /* a stale ring entry is skipped */
	/* A descriptor came free: listeners that hit EMFILE may go on. */
	retry_emfile(d);
}

static int ep_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_local(h->fd, out);
}

static int ep_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	return tl__sock_peer(h->fd, h->flags & TL_HF_UNIX, out);
}

static int ep_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value)
{
	return tl__sock_opt(h->fd, !!(h->flags & TL_HF_V6), set, opt, value);
}

static int ep_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	struct ep_h *e = EH(h);
	tl_loop *l = d->loop;
	if (o->code == TL_OP_POLL)
		return tl__ep_poll_submit(d, o);
	if (o->code == TL_OP_CONNECT)
		return tl__ep_start_connect(d, h, o);
	if (is_rside(o)) {
		if (o->code == TL_OP_RECV_FDS)
			e->fdpass = 1;
		tl__ep_q_push(l, &e->rhead, &e->rtail, o);
		if (e->readable && e->rhead == o->idx)
			tl__ep_mark_ready(d, h);
		return 0;
	}
	/* Try a write at once when nothing is queued ahead of it: most writes
	 * finish here, never queued and never waiting for an edge; one that
	 * must wait joins the queue now (nothing runs in between). */
	if (e->whead == TL_NIL && e->writable && !e->connecting && o->code != TL_OP_SEND) {
		if (!tl__ep_run_wop(d, h, o))
			tl__ep_q_push(l, &e->whead, &e->wtail, o);
		return 0;
	}
	tl__ep_q_push(l, &e->whead, &e->wtail, o);
	/* A datagram waits for the poll, so that every send the host queues
	 * in one turn goes out in one sendmmsg (dgram.c). */
	if (o->code == TL_OP_SEND && e->writable && e->whead == o->idx)
		tl__ep_mark_ready(d, h);
	return 0;
}

static int ep_dgram_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer)
{
	(void)d;
	return tl__dg_connect(h->fd, peer);
}

static uint32_t ep_probed_caps(struct tl_drv *d)
{
	(void)d;
	return tl__dg_probe();
}

static int ep_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	if (o->code == TL_OP_POLL)
		return tl__ep_poll_cancel(d, o);
	struct ep_h *e = EH(h);
	if (o->code == TL_OP_SPLICE)
		return tl__ep_splice_cancel(d, h, o);
	int found = is_rside(o) ? tl__ep_q_remove(d->loop, &e->rhead, &e->rtail, o)
				: tl__ep_q_remove(d->loop, &e->whead, &e->wtail, o);
	if (!found)
		return -ENOENT;
	if (o->code == TL_OP_CONNECT)
		e->connecting = 0;
	/* Nothing is in flight in the kernel: acknowledge at once. */
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	/* Ops queued behind a cancelled one may run now. */
	if ((e->readable && e->rhead != TL_NIL) || (e->writable && e->whead != TL_NIL))
		tl__ep_mark_ready(d, h);
	return 0;
}

static void ep_lease_returned(struct tl_drv *d, uint32_t id)
{
	while (d->nlwait) {
		struct tl_hslot *h = tl__drv_handle(d->loop, d->lwait[--d->nlwait]);
		if (h->type == TL_H_FREE)
			continue;
		EH(h)->lease_wait = 0;
		tl__ep_mark_ready(d, h);
	}
}

static void ep_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	if (!paused && EH(h)->readable && EH(h)->rhead != TL_NIL)
		tl__ep_mark_ready(d, h);
	/* Possibly inside one of our own calls (driver.h): run it later. */
	struct tl_hslot *dst = paused ? NULL : tl__ep_splice_waiter(d, h);
	if (dst)
		tl__ep_mark_ready(d, dst);
}

static void run_ready(struct tl_drv *d)
{
	/* Only the entries present now: handles re-queued while running wait
	 * for the next poll (their room or lease ran out). */
	for (uint32_t n = d->rlen; n; n--) {
		uint32_t idx = d->ready[d->rhead];
		d->rhead = d->rhead + 1 == d->rcap ? 0 : d->rhead + 1;
		d->rlen--;
		struct tl_hslot *h = ep_handle(d, idx);
		if (h->type == TL_H_FREE || h->type == TL_H_TIMER || !EH(h)->queued)
			continue;
		EH(h)->queued = 0;
		tl__ep_run_handle(d, h);
	}
}

/* What the ready list holds (datagram sends gathered for one sendmmsg, and
 * reads and writes found ready) runs now, before the loop naps. */
static void ep_flush(struct tl_drv *d)
{
	if (d->rlen)
		run_ready(d);
}

static int ep_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	tl_loop *l = d->loop;
	uint32_t before = tl__drv_queued(l);
	if (tl_unlikely(d->nemfile)) {
		uint64_t now = tl__ep_now(d);
		if (now >= d->emfile_retry_at)
			retry_emfile(d);
		else if (timeout_ns < 0 || (uint64_t)timeout_ns > d->emfile_retry_at - now)
			timeout_ns = (int64_t)(d->emfile_retry_at - now);
	}
	if (d->rlen)
		run_ready(d);
	if (tl__drv_queued(l) != before || d->rlen)
		timeout_ns = 0; /* results are ready: do not block */
	/* Completions queued before this poll (writes finish at submission
	 * here) make it a discovery poll, which contract 1.6 allows and does
	 * not owe. Right after an OS wait it is a system call a plain epoll
	 * loop never makes, and mostly finds nothing: skip it then. So a busy
	 * loop polls at least every other turn, and an event waits at most one
	 * turn more, one with no OS wait in it. */
	if (timeout_ns == 0 && before && d->waited) {
		d->waited = 0;
		return 0;
	}
	d->waited = 1;
	uint32_t room = tl__drv_room(l);
	int maxev = (int)(room < d->maxev ? room : d->maxev);
	if (maxev < 1)
		maxev = 1;
	int n;
	if (timeout_ns == 0) {
		n = epoll_wait(d->epfd, d->ev, maxev, 0);
		info->discovery_polls++;
	} else {
		struct timespec ts, *tp = NULL;
		if (timeout_ns > 0) {
			ts.tv_sec = timeout_ns / 1000000000;
			ts.tv_nsec = timeout_ns % 1000000000;
			tp = &ts;
		}
		n = -1;
		if (tl_likely(!d->no_pwait2)) {
			n = epoll_pwait2(d->epfd, d->ev, maxev, tp, NULL);
			/* Missing (Linux before 5.11) or refused by a seccomp
			 * profile that predates it (EPERM, which the call itself
			 * never returns): epoll_wait from now on, so that each
			 * wait stays one system call. */
			if (n < 0 && (errno == ENOSYS || errno == EPERM))
				d->no_pwait2 = 1;
		}
		if (d->no_pwait2) {
			int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
			n = epoll_wait(d->epfd, d->ev, maxev, ms);
		}
		info->waits++;
	}
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (n == 0 && timeout_ns != 0)
		info->zero_event_waits++;
	for (int i = 0; i < n; i++) {
		uint64_t tag = d->ev[i].data.u64;
		uint32_t ev = d->ev[i].events;
		if (tag == EV_WAKE) {
			tl__os_notifier_drain(d->wake);
			continue;
		}
		if (tag == EV_TIMER) {
			uint64_t v;
			ssize_t r = read(d->tfd, &v, sizeof v);
			(void)r;
			continue;
		}
		if (tag & EV_POLL) {
			tl__ep_poll_event(d, tag, ev);
			continue;
		}
		struct tl_hslot *h = ep_handle(d, (uint32_t)tag);
		/* Closed earlier in this batch, or the slot was reused. */
		if (h->type == TL_H_FREE || h->gen != (uint16_t)(tag >> 32) || h->fd < 0)
			continue;
		struct ep_h *e = EH(h);
		if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			e->readable = 1;
		if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			e->peer_end = 1;
		if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
			e->writable = 1;
			e->connecting = 0;
		}
		tl__ep_run_handle(d, h);
		if (tl_unlikely(e->spl != TL_NIL)) {
			struct tl_hslot *dst = tl__ep_splice_waiter(d, h);
			if (dst)
				tl__ep_run_handle(d, dst);
		}
	}
	return 0;
}

static int ep_embed_fd(struct tl_drv *d)
{
	return d->epfd;
}

static void ep_embed_deadline(struct tl_drv *d, uint64_t at)
{
	if (at == d->tfd_at)
		return;
	struct itimerspec its = {0};
	if (at != UINT64_MAX) {
		/* 0 would disarm: a deadline already due fires at once. */
		uint64_t t = at ? at : 1;
		its.it_value.tv_sec = (time_t)(t / 1000000000u);
		its.it_value.tv_nsec = (long)(t % 1000000000u);
	}
	if (timerfd_settime(d->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		d->tfd_at = at;
}

const struct tl_driver tl__driver_epoll = {
	.name = "epoll",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX | TL_CAP_EMBED | TL_CAP_OS | TL_CAP_NET | TL_CAP_DETACH |
		TL_CAP_POLL | TL_CAP_SPLICE | TL_CAP_WRITE_AT_ONCE,
	.init = ep_init,
	.destroy = ep_destroy,
	.now = tl__ep_now,
	.open = ep_open,
	.attach = ep_attach,
	.release = ep_release,
	.adopt = ep_adopt,
	.detach = ep_detach,
	.local_addr = ep_local,
	.peer_addr = ep_peer,
	.sockopt = ep_sockopt,
	.dgram_connect = ep_dgram_connect,
	.probed_caps = ep_probed_caps,
	.submit = ep_submit,
	.cancel = ep_cancel,
	.try_write = tl__ep_try_write,
	.poll = ep_poll,
	.flush = ep_flush,
	.lease_returned = ep_lease_returned,
	.pause = ep_pause,
	.embed_fd = ep_embed_fd,
	.embed_deadline = ep_embed_deadline,
};
