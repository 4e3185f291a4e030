/* lib/handover.c: handing sockets over (contract 4.6): adopt a descriptor, detach a handle, pass descriptors over Unix-domain streams. */
#include <errno.h>
#include <string.h>
#include "core.h"

/*
 * A socket leaves a loop only when the loop holds nothing more of it: no op
 * the driver still has, and no completion naming it still queued. Then
 * every completion of the handle, every byte the loop read from it among
 * them, has been handed to the host, and the descriptor carries the rest
 * (what the kernel holds) to its next owner. That owner takes it with tl_adopt, which reads
 * the socket's kind from the kernel instead of trusting the caller, so the
 * same call serves a socket from systemd, a restarted server's listener
 * and a connection moved from another shard or process.
 */

int tl_adopt(tl_loop *l, int fd, tl_handle *out)
{
	if (!out || fd < 0)
		return -EINVAL;
	if (!(l->dv->caps & TL_CAP_OS) || !l->dv->adopt)
		return -ENOTSUP;
	/* The driver sets the type it finds; a socket type until then. */
	struct tl_hslot *h = tl__handle_new(l, TL_H_STREAM);
	if (!h)
		return -ENOBUFS;
	int r = l->dv->adopt(l->d, h, fd);
	if (r < 0) {
		tl__handle_free(l, h);
		return r;
	}
	*out = tl__h_id(l, h);
	return 0;
}

/* Is a completion naming h still queued? */
static int queued_for(const tl_loop *l, tl_handle id)
{
	for (uint32_t k = 0, i = l->qhead; k < l->qlen; k++, i = i + 1 == l->qcap ? 0 : i + 1)
		if (l->q[i].handle.v == id.v)
			return 1;
	return 0;
}

int tl_detach(tl_loop *l, tl_handle id, int *fd)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (!fd || (h->type != TL_H_LISTEN && h->type != TL_H_STREAM && h->type != TL_H_UDP) ||
	    (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	if (!(l->dv->caps & TL_CAP_DETACH) || !l->dv->detach)
		return -ENOTSUP;
	if (h->pending || h->spl_head != TL_NIL) {
		/* A driver that cannot take a cancellation now (no submission
		 * slot) is asked again by the next call. Splices reading h (its
		 * source, lib/splice.c) hold its descriptor too. */
		for (uint32_t i = h->head; i != TL_NIL;) {
			struct tl_opslot *o = &l->o[i];
			i = o->next;
			if (!(o->flags & TL_OPF_CANCEL))
				tl__op_cancel(l, o, 0);
		}
		for (uint32_t i = h->spl_head; i != TL_NIL;) {
			struct tl_opslot *o = &l->o[i];
			i = o->u.sp.snext;
			if (!(o->flags & TL_OPF_CANCEL))
				tl__op_cancel(l, o, 0);
		}
		return -EAGAIN;
	}
	if (queued_for(l, id))
		return -EAGAIN;
	int fdv = h->fd, rc = l->dv->detach(l->d, h);
	if (rc < 0)
		return rc;
	*fd = fdv;
	h->fd = -1;
	tl__handle_free(l, h);
	return 0;
}

/* A connected Unix-domain stream for a descriptor op: NULL with *err. */
static struct tl_hslot *unix_stream(tl_loop *l, tl_handle id, int *err)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h) {
		*err = -ENOENT;
		return NULL;
	}
	if (h->type != TL_H_STREAM || !(h->flags & TL_HF_UNIX) || (h->flags & TL_HF_CLOSING)) {
		*err = -EINVAL;
		return NULL;
	}
	if (!(l->dv->caps & TL_CAP_DETACH)) {
		*err = -ENOTSUP;
		return NULL;
	}
	return h;
}

int tl_send_fds(tl_loop *l, tl_handle id, const int *fds, uint32_t nfds, const void *buf,
		uint32_t len, uint64_t token, tl_op *oid)
{
	int err;
	if (!oid || !fds || !buf || !nfds || nfds > TL_FDS_MAX || !len)
		return -EINVAL;
	for (uint32_t i = 0; i < nfds; i++)
		if (fds[i] < 0)
			return -EINVAL;
	struct tl_hslot *h = unix_stream(l, id, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_SEND_FDS, TL_K_WRITE, token, &o);
	if (r < 0)
		return r;
	o->u.fd.buf = (uint8_t *)(uintptr_t)buf;
	o->u.fd.len = len;
	o->u.fd.done = 0;
	o->u.fd.nfds = nfds;
	o->u.fd.got = 0;
	o->u.fd.out = NULL;
	memcpy(o->u.fd.fds, fds, nfds * sizeof *fds);
	return tl__op_submit(l, h, o, oid);
}

int tl_recv_fds(tl_loop *l, tl_handle id, int *fds, uint32_t cap, void *buf, uint32_t len,
		uint64_t token, tl_op *oid)
{
	int err;
	if (!oid || !fds || !buf || !cap || cap > TL_FDS_MAX || !len)
		return -EINVAL;
	struct tl_hslot *h = unix_stream(l, id, &err);
	if (!h)
		return err;
	if (h->spl_head != TL_NIL)
		return -EINVAL; /* a splice reads h (lib/splice.c) */
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_RECV_FDS, TL_K_READ, token, &o);
	if (r < 0)
		return r;
	o->u.fd.buf = buf;
	o->u.fd.len = len;
	o->u.fd.done = 0;
	o->u.fd.nfds = cap;
	o->u.fd.got = 0;
	o->u.fd.out = fds;
	return tl__op_submit(l, h, o, oid);
}
