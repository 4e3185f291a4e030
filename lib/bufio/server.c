/* lib/bufio/server.c: a stream server on a loop: listener, connection slots with their readers and writers, and each connection's life (turnloop/server.h), on the public API only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "turnloop/server.h"

struct tl_server {
	tl_loop *loop;
	tl_server_config cfg;
	tl_handle lh;
	uint8_t *slots; /* cfg.conns slots of cfg.conn_size bytes, from 64-byte aligned */
	void *slots_mem; /* what calloc gave for them */
	uint8_t *mem;   /* each slot's reader and writer buffers, read_max + write_cap bytes a slot */
	uint32_t fresh; /* slots handed out at least once: [0, fresh) */
	tl_conn *free;  /* freed slots, reused first */
	tl_wbuf_list dirty;
};

static tl_conn *slot(tl_server *srv, uint32_t i)
{
	return (tl_conn *)(void *)(srv->slots + (size_t)i * srv->cfg.conn_size);
}

void tl_server_size(tl_config *lc, uint32_t conns)
{
	if (!lc) return;
	uint64_t h = (uint64_t)conns + 64, o = 4 * (uint64_t)conns + 1024;
	if (lc->max_handles < h) lc->max_handles = h > (1u << 24) ? 1u << 24 : (uint32_t)h;
	if (lc->max_ops < o) lc->max_ops = o > (1u << 24) ? 1u << 24 : (uint32_t)o;
	if (lc->pooled_buffers && lc->pooled_buffers < 2 * (uint64_t)conns && lc->pooled_buffers < 32768) {
		while (lc->pooled_buffers < 2 * (uint64_t)conns && lc->pooled_buffers < 32768)
			lc->pooled_buffers *= 2;
		if (lc->pooled_buffers > 32768)
			lc->pooled_buffers = 32768; /* the loop's most */
	}
}

int tl_server_start(tl_server **out, tl_loop *loop, const tl_server_config *cfg)
{
	tl_listen_opts lo = {0};
	tl_server *srv;
	tl_op op;
	int rc;
	if (out) *out = NULL;
	if (!out || !loop || !cfg || !cfg->on_ready || !cfg->conns || cfg->conns > (1u << 20) ||
	    cfg->conn_size < sizeof(tl_conn) || cfg->conn_size > (1u << 24) || !cfg->read_max ||
	    cfg->read_max > (1u << 30) || !cfg->write_cap || cfg->write_cap > (1u << 30))
		return -EINVAL;
	if (!(srv = calloc(1, sizeof *srv))) return -ENOMEM;
	srv->loop = loop;
	srv->cfg = *cfg;
	srv->cfg.conn_size = (cfg->conn_size + 63) & ~63u; /* each slot on its own cache lines */
	/* calloc, not an aligned allocator: large blocks come as untouched
	 * zero pages, so a slot costs memory only once a connection used it. */
	srv->slots_mem = calloc(1, (size_t)cfg->conns * srv->cfg.conn_size + 63);
	srv->slots = (uint8_t *)(((uintptr_t)srv->slots_mem + 63) & ~(uintptr_t)63);
	srv->mem = calloc(cfg->conns, (size_t)cfg->read_max + cfg->write_cap);
	if (!srv->slots_mem || !srv->mem) { rc = -ENOMEM; goto fail; }
	lo.backlog = cfg->backlog;
	lo.reuseport = cfg->reuseport;
	if ((rc = tl_tcp_listen(loop, &cfg->addr, &lo, &srv->lh)) < 0) goto fail;
	if ((rc = tl_accept_start(loop, srv->lh, 0, &op)) < 0) {
		tl_close(loop, srv->lh, 0); /* its Closed carries no data: the host's to ignore */
		goto fail;
	}
	tl_handle_set_data(loop, srv->lh, srv); /* cannot fail: the handle is new and ours */
	*out = srv;
	return 0;
fail:
	free(srv->slots_mem);
	free(srv->mem);
	free(srv);
	return rc;
}

tl_handle tl_server_listener(const tl_server *srv) { return srv ? srv->lh : TL_HANDLE_NONE; }

void tl_conn_close(tl_conn *c)
{
	if (c && !c->closed) { c->closed = 1; tl_close(c->srv->loop, c->h, 0); }
}

void tl_conn_hold(tl_conn *c)
{
	if (c) c->refs_++;
}

void tl_conn_release(tl_conn *c)
{
	tl_server *srv;
	if (!c || !c->refs_ || --c->refs_) return;
	srv = c->srv;
	if (srv->cfg.on_free) srv->cfg.on_free(c, srv->cfg.arg);
	tl_rbuf_fini(&c->rd); /* the leases it still held go back */
	tl_wbuf_fini(&c->wr); /* no write in flight: the stream's Closed came after it */
	c->next_ = srv->free;
	srv->free = c;
}

/* The end tl_conn_end asked for: the last bytes into the writer as room
 * comes (in pieces: they may be more than the ring holds), and the close
 * once the writer has nothing left to write. */
static void finish(tl_conn *c)
{
	uint32_t k;
	if (c->closed) return;
	while (c->lastn_ && (k = tl_wbuf_room(&c->wr)) > 0) {
		k = k < c->lastn_ ? k : c->lastn_;
		if (tl_wbuf_append(&c->wr, c->last_, k) < 0) { tl_conn_close(c); return; }
		c->last_ = (const uint8_t *)c->last_ + k;
		c->lastn_ -= k;
	}
	/* Bytes of last still out while nothing is pending: a broken writer. */
	if (!tl_wbuf_pending(&c->wr)) tl_conn_close(c);
}

void tl_conn_end(tl_conn *c, const void *last, uint32_t n)
{
	if (!c || c->closed || c->ending_) return;
	c->ending_ = 1;
	c->last_ = last;
	c->lastn_ = last ? n : 0;
	finish(c);
}

static void ready(tl_conn *c)
{
	if (c->closed) return;
	if (!c->ending_) c->srv->cfg.on_ready(c, c->srv->cfg.arg);
	else finish(c);
}

void tl_conn_ready(tl_conn *c)
{
	if (c) ready(c);
}

static void open_conn(tl_server *srv, tl_handle h)
{
	tl_conn *c = srv->free ? srv->free : srv->fresh < srv->cfg.conns ? slot(srv, srv->fresh++) : NULL;
	uint8_t *mem;
	tl_op op;
	if (!c) { /* every slot in use: closed, its Closed the server's too */
		tl_handle_set_data(srv->loop, h, srv);
		tl_close(srv->loop, h, 0);
		return;
	}
	if (c == srv->free) srv->free = c->next_;
	mem = srv->mem + (size_t)(((uint8_t *)c - srv->slots) / srv->cfg.conn_size) *
				 (srv->cfg.read_max + srv->cfg.write_cap);
	memset(c, 0, sizeof *c);
	c->srv = srv;
	c->h = h;
	c->refs_ = 1; /* the open handle's, dropped at its Closed */
	/* Neither can fail: the sizes were checked at start, the buffers are ours. */
	tl_rbuf_init(&c->rd, srv->loop, mem, srv->cfg.read_max);
	tl_wbuf_init(&c->wr, srv->loop, h, mem + srv->cfg.read_max, srv->cfg.write_cap, 0);
	tl_wbuf_set_list(&c->wr, &srv->dirty);
	tl_handle_set_data(srv->loop, h, c); /* every completion of h carries c */
	if (srv->cfg.on_open) srv->cfg.on_open(c, srv->cfg.arg);
	if (tl_read_start(srv->loop, h, 0, &op) < 0) tl_conn_close(c);
}

int tl_server_completion(tl_server *srv, const tl_completion *x)
{
	tl_conn *c;
	if (!srv || !x) return 0;
	if (x->data == srv) { /* the listener: a connection, or an error accepting resumes after */
		if (x->kind == TL_K_ACCEPT && x->result == 0) open_conn(srv, x->u.accept.conn);
		return 1;
	}
	c = x->data;
	if ((uint8_t *)x->data < srv->slots ||
	    (uint8_t *)x->data >= srv->slots + (size_t)srv->fresh * srv->cfg.conn_size)
		return 0;
	switch (x->kind) {
	case TL_K_READ:
		if ((x->flags & (TL_F_LEASE | TL_F_EOF)) && tl_rbuf_feed(&c->rd, x) < 0) {
			if (x->flags & TL_F_LEASE) tl_lease_release(srv->loop, x->u.read.lease.id);
			tl_conn_close(c);
		}
		c->eof |= !!(x->flags & TL_F_EOF);
		if ((x->flags & TL_F_TERMINAL) && !c->eof) tl_conn_close(c); /* an error, or our close */
		break;
	case TL_K_WRITE:
		if (tl_wbuf_on_write(&c->wr, x) < 0) tl_conn_close(c);
		break;
	case TL_K_CLOSED: /* ours, or the runtime's at a stop */
		c->closed = 1;
		tl_conn_release(c);
		return 1;
	default:
		return 1;
	}
	ready(c);
	return 1;
}

int tl_server_pass(tl_server *srv)
{
	if (!srv) return 0;
	tl_wbuf_flush_all(&srv->dirty);
	return srv->dirty.first != NULL;
}

void tl_server_drain(tl_server *srv)
{
	for (uint32_t i = 0; srv && i < srv->fresh; i++) {
		tl_conn *c = slot(srv, i);
		if (c->refs_ && !c->closed) { c->draining = 1; ready(c); }
	}
}

void tl_server_free(tl_server *srv)
{
	if (!srv) return;
	for (uint32_t i = 0; i < srv->fresh; i++)
		if (slot(srv, i)->refs_ && srv->cfg.on_free)
			srv->cfg.on_free(slot(srv, i), srv->cfg.arg);
	free(srv->slots_mem);
	free(srv->mem);
	free(srv);
}
