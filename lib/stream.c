/* lib/stream.c: streams: listen, accept, connect, read, write, shutdown (datagrams: lib/dgram.c). */
#include <errno.h>
#include <string.h>
#include "sysmod.h"

/* ---- sockets ---- */

struct tl_hslot *tl__stream_get(tl_loop *l, tl_handle id, int type, int *err)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h) {
		*err = -ENOENT;
		return NULL;
	}
	if (h->type != type || (h->flags & TL_HF_CLOSING)) {
		*err = -EINVAL;
		return NULL;
	}
	return h;
}

/* Hand a prepared op to the driver; undo it if refused. */
int tl__stream_submit(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o, tl_op *oid)
{
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	tl_op id = tl__op_id(l, o);
	int first = h->pending == 1; /* o is the only op of h */
	int r = l->dv->submit(l->d, h, o);
	if (r < 0) {
		tl__op_refuse(l, o);
		return r;
	}
	tl__dl_submitted(l, h, first);
	/* The driver may already have completed it; the id stays valid for
	 * the caller (stale once the terminal is delivered). */
	*oid = id;
	return 0;
}

static int open_handle(tl_loop *l, uint8_t type, const struct tl_open_spec *spec,
		       struct tl_hslot **out)
{
	struct tl_hslot *h = tl__handle_new(l, type);
	if (!h)
		return -ENOBUFS;
	int r = l->dv->open(l->d, h, spec);
	if (r < 0) {
		tl__handle_free(l, h);
		return r;
	}
	*out = h;
	return 0;
}

int tl__valid_addr(const tl_addr *a)
{
	return a && (a->sa.sa_family == AF_INET || a->sa.sa_family == AF_INET6);
}

/* Open a handle that needs no operation to exist (listener, UDP socket):
 * its family flag set, its id returned. */
int tl__open_bound(tl_loop *l, uint8_t type, const struct tl_open_spec *s, tl_handle *out)
{
	struct tl_hslot *h;
	int r = open_handle(l, type, s, &h);
	if (r < 0)
		return r;
	if (s->path)
		h->flags |= TL_HF_UNIX;
	else if (s->addr->sa.sa_family == AF_INET6)
		h->flags |= TL_HF_V6;
	*out = tl__h_id(l, h);
	return 0;
}

int tl_tcp_listen(tl_loop *l, const tl_addr *addr, const tl_listen_opts *opts, tl_handle *out)
{
	tl_listen_opts def = {0};
	if (!tl__valid_addr(addr) || !out)
		return -EINVAL;
	struct tl_open_spec s = {.kind = TL_OPEN_TCP_LISTEN, .addr = addr,
				 .opts = opts ? opts : &def};
	int r = tl__listen_opts_check(l, s.opts, 0, &s);
	if (r < 0)
		return r;
	return tl__open_bound(l, TL_H_LISTEN, &s, out);
}

static int valid_path(const char *path)
{
	return path && *path && strlen(path) < sizeof(((struct sockaddr_un *)0)->sun_path);
}

int tl_unix_listen(tl_loop *l, const char *path, const tl_listen_opts *opts, tl_handle *out)
{
	tl_listen_opts def = {0};
	if (!valid_path(path) || !out)
		return -EINVAL;
	struct tl_open_spec s = {.kind = TL_OPEN_UNIX_LISTEN, .path = path,
				 .opts = opts ? opts : &def};
	int r = tl__listen_opts_check(l, s.opts, 1, &s);
	if (r < 0)
		return r;
	return tl__open_bound(l, TL_H_LISTEN, &s, out);
}

int tl_local_addr(tl_loop *l, tl_handle id, tl_addr *out)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (!out || (h->type != TL_H_LISTEN && h->type != TL_H_STREAM && h->type != TL_H_UDP) ||
	    (h->flags & TL_HF_UNIX))
		return -EINVAL;
	/* Drivers bind a connecting socket at different moments (epoll at
	 * submit, io_uring when the SQE runs): say "not yet" on every one. */
	if (h->type == TL_H_STREAM && (h->flags & TL_HF_CONNECTING))
		return -EAGAIN;
	return l->dv->local_addr(l->d, h, out);
}

static int accept_common(tl_loop *l, tl_handle lid, uint64_t token, tl_op *oid, int multi)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *h = tl__stream_get(l, lid, TL_H_LISTEN, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_ACCEPT, TL_K_ACCEPT, token, &o);
	if (r < 0)
		return r;
	if (multi)
		o->flags |= TL_OPF_MULTI;
	return tl__stream_submit(l, h, o, oid);
}

int tl_accept(tl_loop *l, tl_handle h, uint64_t token, tl_op *op)
{
	return accept_common(l, h, token, op, 0);
}

int tl_accept_start(tl_loop *l, tl_handle h, uint64_t token, tl_op *op)
{
	return accept_common(l, h, token, op, 1);
}

static int connect_common(tl_loop *l, const struct tl_open_spec *s, uint64_t deadline,
			  uint64_t token, tl_handle *hid, tl_op *oid)
{
	struct tl_hslot *h;
	if (!hid || !oid)
		return -EINVAL;
	if (l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	int r = open_handle(l, TL_H_STREAM, s, &h);
	if (r < 0)
		return r;
	if (s->kind == TL_OPEN_UNIX_STREAM)
		h->flags |= TL_HF_UNIX;
	else if (s->addr->sa.sa_family == AF_INET6)
		h->flags |= TL_HF_V6;
	struct tl_opslot *o;
	r = tl__op_new(l, h, TL_OP_CONNECT, TL_K_CONNECT, token, &o);
	if (r < 0)
		goto undo;
	if (s->addr)
		o->u.conn.addr = *s->addr;
	else
		memset(&o->u.conn.addr, 0, sizeof o->u.conn.addr);
	o->u.conn.deadline = deadline;
	o->u.conn.path = s->path; /* valid during submit() only */
	tl_handle id = tl__h_id(l, h);
	h->flags |= TL_HF_CONNECTING;
	r = tl__stream_submit(l, h, o, oid);
	if (r < 0)
		goto undo;
	if (deadline && (o->flags & TL_OPF_LIVE) && o->gen == tl__id_gen(oid->v))
		tl__dl_op_arm(l, o, deadline);
	*hid = id;
	return 0;
undo:
	l->dv->release(l->d, h);
	tl__handle_free(l, h);
	return r;
}

int tl_tcp_connect_opts(tl_loop *l, const tl_addr *addr, const tl_connect_opts *opts,
			uint64_t deadline, uint64_t token, tl_handle *h, tl_op *op)
{
	tl_listen_opts def = {0};
	tl_connect_opts cdef = {0};
	if (!tl__valid_addr(addr))
		return -EINVAL;
	struct tl_open_spec s = {.kind = TL_OPEN_TCP_STREAM, .addr = addr, .opts = &def};
	int r = tl__connect_opts_check(l, addr, opts ? opts : &cdef, &s);
	if (r < 0)
		return r;
	return connect_common(l, &s, deadline, token, h, op);
}

int tl_tcp_connect(tl_loop *l, const tl_addr *addr, uint64_t deadline, uint64_t token,
		   tl_handle *h, tl_op *op)
{
	return tl_tcp_connect_opts(l, addr, NULL, deadline, token, h, op);
}

int tl_unix_connect(tl_loop *l, const char *path, uint64_t deadline, uint64_t token,
		    tl_handle *h, tl_op *op)
{
	tl_listen_opts def = {0};
	if (!valid_path(path))
		return -EINVAL;
	struct tl_open_spec s = {.kind = TL_OPEN_UNIX_STREAM, .path = path, .opts = &def};
	return connect_common(l, &s, deadline, token, h, op);
}

static int read_common(tl_loop *l, tl_handle hid, void *buf, uint32_t len, uint16_t flags,
		       uint64_t token, tl_op *oid)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *sh = tl__handle_get(l, hid);
	if (sh && sh->type == TL_H_STDIO)
		return tl__stdio_read(l, sh, buf, len, flags, token, oid);
	struct tl_hslot *h = tl__stream_get(l, hid, TL_H_STREAM, &err);
	if (!h)
		return err;
	if (h->spl_head != TL_NIL)
		return -EINVAL; /* a splice reads h (lib/splice.c) */
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_READ, TL_K_READ, token, &o);
	if (r < 0)
		return r;
	o->flags |= flags;
	o->u.rw.buf = buf;
	o->u.rw.len = len;
	if (flags & TL_OPF_POOLED)
		tl__caps_reader(l, h);
	return tl__stream_submit(l, h, o, oid);
}

int tl_read(tl_loop *l, tl_handle h, void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	if (!buf || !len)
		return -EINVAL;
	return read_common(l, h, buf, len, 0, token, op);
}

int tl_read_pooled(tl_loop *l, tl_handle h, uint64_t token, tl_op *op)
{
	return read_common(l, h, NULL, 0, TL_OPF_POOLED, token, op);
}

int tl_read_start(tl_loop *l, tl_handle h, uint64_t token, tl_op *op)
{
	return read_common(l, h, NULL, 0, TL_OPF_POOLED | TL_OPF_MULTI, token, op);
}

int tl_writev(tl_loop *l, tl_handle hid, const tl_iovec *iov, int n, uint64_t token,
	      tl_op *oid)
{
	if (!iov || n < 1 || n > TL_IOV_MAX || !oid)
		return -EINVAL;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len && !iov[i].iov_base)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	/* One lookup: a stream, else a terminal or pipe of the process. */
	struct tl_hslot *h = tl__handle_get(l, hid);
	if (!h)
		return -ENOENT;
	if (tl_unlikely(h->type == TL_H_STDIO))
		return tl__stdio_writev(l, h, iov, n, token, oid);
	if (h->type != TL_H_STREAM || (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_WRITE, TL_K_WRITE, token, &o);
	if (r < 0)
		return r;
	memcpy(o->u.wv.iov, iov, (size_t)n * sizeof *iov);
	o->u.wv.n = (uint32_t)n;
	o->u.wv.cur = 0;
	o->u.wv.off = 0;
	o->u.wv.total = total;
	tl__caps_write(l, h, (int64_t)total); /* op_retire takes it back */
	return tl__stream_submit(l, h, o, oid);
}

int tl_write(tl_loop *l, tl_handle h, const void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	if (!buf && len)
		return -EINVAL;
	tl_iovec v = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
	return tl_writev(l, h, &v, 1, token, op);
}

int64_t tl_try_write(tl_loop *l, tl_handle hid, const void *buf, uint32_t len)
{
	if (!buf && len)
		return -EINVAL;
	struct tl_hslot *h = tl__handle_get(l, hid);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_STREAM || (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	if (!l->dv->try_write)
		return -ENOTSUP;
	if (!len)
		return 0;
	int64_t n = l->dv->try_write(l->d, h, buf, len);
	/* Bytes taken are a write's progress for h's idle deadline, as a
	 * write's completion would be (deadline.c). */
	if (n > 0 && tl_unlikely(l->dl.nidle))
		tl__dl_touch(l, h);
	return n;
}

int tl_shutdown(tl_loop *l, tl_handle hid, uint64_t token, tl_op *oid)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *h = tl__stream_get(l, hid, TL_H_STREAM, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_SHUTDOWN, TL_K_SHUTDOWN, token, &o);
	if (r < 0)
		return r;
	return tl__stream_submit(l, h, o, oid);
}
