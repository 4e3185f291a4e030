/* lib/poll.c: foreign descriptors (tl_poll_start), and the lists that carry the modules' poll ops between readinesses. */
#include <errno.h>
#ifndef _WIN32
#include <poll.h>
#include <sys/stat.h>
#endif
#include "sysmod.h"
#include "turnloop/poll.h"

#define POLL_EVENTS (POLLIN | POLLOUT | POLLPRI | POLLRDHUP)

/* Which module owns an intercepted poll op, by its kind. Windows has the
 * resolver's kind only (its build without c-ares): processes, terminals
 * and watches are not ported there yet (lib/sys_absent.c). */
static const struct tl_pollkind *const kinds[TL_K_COUNT_] = {
#ifndef _WIN32
	[TL_K_READ] = &tl__tty_kind,
	[TL_K_WRITE] = &tl__tty_kind,
	[TL_K_EXIT] = &tl__proc_kind,
	[TL_K_WATCH] = &tl__watch_kind,
#endif
	[TL_K_RESOLVE] = &tl__dns_kind,
};

/* ---- the two lists (ready, waiting for a lease), through o->poll ---- */

static void lpush(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	o->poll.next = TL_NIL;
	o->poll.prev = *tail;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		l->o[*tail].poll.next = o->idx;
	*tail = o->idx;
}

static void lunlink(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	if (o->poll.prev == TL_NIL)
		*head = o->poll.next;
	else
		l->o[o->poll.prev].poll.next = o->poll.next;
	if (o->poll.next == TL_NIL)
		*tail = o->poll.prev;
	else
		l->o[o->poll.next].poll.prev = o->poll.prev;
}

void tl__poll_unlist(tl_loop *l, struct tl_opslot *o)
{
	if (o->poll.where == TL_PW_READY)
		lunlink(l, &l->pready_head, &l->pready_tail, o);
	else if (o->poll.where == TL_PW_LEASE)
		lunlink(l, &l->plwait_head, &l->plwait_tail, o);
	o->poll.where = TL_PW_NONE;
}

void tl__poll_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	tl__poll_unlist(l, o);
	o->poll.res = res;
	o->poll.where = TL_PW_READY;
	lpush(l, &l->pready_head, &l->pready_tail, o);
}

void tl__poll_lease_wait(tl_loop *l, struct tl_opslot *o)
{
	tl__poll_unlist(l, o);
	o->poll.where = TL_PW_LEASE;
	lpush(l, &l->plwait_head, &l->plwait_tail, o);
}

void tl__poll_lease_back(tl_loop *l)
{
	while (l->plwait_head != TL_NIL)
		tl__poll_ready(l, &l->o[l->plwait_head], 0);
}

/* ---- arming, readiness, cancellation ---- */

int tl__poll_arm(tl_loop *l, struct tl_opslot *o)
{
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	int r = l->dv->submit(l->d, &l->h[o->hidx], o);
	if (r < 0)
		tl__op_native_end(l, o);
	return r;
}

void tl__poll_native_event(tl_loop *l, struct tl_opslot *o, int64_t res)
{
	/* Intercepted polls are one-shot: this event was the driver's last. */
	tl__op_native_end(l, o);
	tl__poll_ready(l, o, (int32_t)res);
}

int tl__poll_cancel(tl_loop *l, struct tl_opslot *o)
{
	const struct tl_pollkind *k = kinds[o->kind];
	if (k->cancel)
		return k->cancel(l, o);
	if (o->flags & TL_OPF_NATIVE)
		return l->dv->cancel(l->d, &l->h[o->hidx], o);
	/* Off the driver (queued, waiting for a lease, or ready): its module
	 * finishes it at the next run. */
	if (o->poll.where != TL_PW_READY)
		tl__poll_ready(l, o, 0);
	return 0;
}

void tl__poll_run(tl_loop *l)
{
	/* Only the entries there now: what their modules put back (no room,
	 * a try that goes on) waits for the next turn. */
	uint32_t n = 0;
	for (uint32_t i = l->pready_head; i != TL_NIL; i = l->o[i].poll.next)
		n++;
	while (n-- && l->pready_head != TL_NIL) {
		struct tl_opslot *o = &l->o[l->pready_head];
		tl__poll_unlist(l, o);
		kinds[o->kind]->ready(l, o, o->poll.res);
	}
}

/* ---- foreign descriptors ---- */

/* Can fd be polled: 0, or tl_poll_start's refusal. */
static int pollable(int fd)
{
#ifdef _WIN32
	/* A socket (the IOCP driver polls sockets only); else a handle that
	 * is not open, a file or directory (always ready, refused as on
	 * Linux), or another kind of handle (a pipe, a console). */
	SOCKET s = (SOCKET)(intptr_t)fd;
	int type = 0, len = sizeof type;
	DWORD hf;
	if (getsockopt(s, SOL_SOCKET, SO_TYPE, (char *)&type, &len) == 0)
		return 0;
	if (!GetHandleInformation((HANDLE)s, &hf))
		return -EBADF;
	return GetFileType((HANDLE)s) == FILE_TYPE_DISK ? -EPERM : -ENOTSOCK;
#else
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
		return -EPERM;
	return 0;
#endif
}

int tl_poll_start(tl_loop *l, int fd, uint32_t events, uint64_t token, tl_handle *hid,
		  tl_op *oid)
{
	if (fd < 0 || !events || (events & ~(uint32_t)POLL_EVENTS) || !hid || !oid)
		return -EINVAL;
	if (!tl__can_poll(l))
		return -ENOTSUP;
	int r = pollable(fd);
	if (r < 0)
		return r;
	if (l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	struct tl_hslot *h = tl__handle_new(l, TL_H_POLL);
	if (!h)
		return -ENOBUFS;
	h->fd = fd;
	struct tl_opslot *o;
	r = tl__op_new(l, h, TL_OP_POLL, TL_K_POLL, token, &o);
	if (r < 0) {
		tl__handle_free(l, h);
		return r;
	}
	o->flags |= TL_OPF_MULTI;
	o->poll.multi = 1; /* the driver's own multishot: no module between */
	o->poll.fd = fd;
	o->poll.events = (uint16_t)events;
	o->poll.where = TL_PW_NONE;
	tl_op id = tl__op_id(l, o);
	r = tl__poll_arm(l, o);
	if (r < 0) {
		tl__op_refuse(l, o);
		tl__handle_free(l, h);
		return r;
	}
	*hid = tl__h_id(l, h);
	*oid = id;
	return 0;
}
