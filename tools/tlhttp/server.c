/* tools/tlhttp/server.c: tlhttp's shards: connection slots, request pipelines, responses, file bodies, deadlines and the graceful drain. */
#include "tlhttp/server_int.h"

/*
 * One shard serves its own connections from slots allocated at start: the
 * steady state (accept, read, parse, answer, close) allocates nothing.
 *
 * Input. The stream is read with tl_read_start into pooled leases, and a
 * request is parsed where it lies, in the lease. Only a head that a read
 * cut in two is copied, into the connection's head buffer (sized to the
 * parser's limits, so a head that does not fit has already been refused),
 * and the next lease's bytes are appended to it until the head is whole.
 * Bytes of later requests read along with a head stay in their lease.
 *
 * Output. Answers are copied into the connection's out buffer one after the
 * other and leave in one write at the end of the read that asked for them,
 * however many pipelined requests it held. A write covers out[a..b) and the
 * buffer is only appended to while writes are in flight; it starts again at
 * 0 once none is. With too little room left, the requests still unread wait
 * (their leases held; the stream's lease cap then pauses its reads) until
 * the writes drain. Bodies that are not copied (a --body over
 * BODY_COPY_MAX) are iovec entries beside the copied bytes.
 *
 * Files. A body of up to SMALL_BODY bytes is read (pread, from the page
 * cache) into the out buffer behind its head and leaves with it in one
 * write: cheaper than a second operation below about 32 KiB. A larger one
 * leaves by tl_sendfile after its head, which the loop keeps in order with
 * the stream's writes, so it never passes through user space; both read
 * on the shard's thread, as a hot static file is meant to be. It goes in
 * pieces of PIECE bytes: a
 * piece's completion is progress for the idle deadline, so a slow client
 * of a large file is not cut off while it keeps reading. Opening is
 * openat2 and fstat on the shard's thread, through the shard's open-file
 * cache (fcache.h): see docs/TLHTTP.md for why, and for what the cache
 * saves.
 *
 * TLS (--tls-cert, --tls-key). The same connection code over the TLS
 * layer (turnloop/tls.h): the io_* functions (server_io.c) are the one place that
 * chooses between the stream's calls and the session's. A connection's
 * handshake runs first, under the header deadline; the layer's loop
 * completions reach it through the runtime handler TLHTTP_TLS_TAG, and its
 * own completions, which carry this file's tokens, come back through the
 * same handler as the loop's (tlhttp_shard_pass polls them). A file body
 * over TLS cannot be spliced: it is read (pread, PIECE_TLS at a time) into
 * the connection's body buffer and written through the session.
 *
 * Timeouts. The runtime's deadlines, with no timer per connection
 * (docs/DEADLINES.md): an idle deadline on every stream (no progress for
 * --idle-timeout ends its ops), and a deadline on its read while a request
 * head is awaited (the first one, or one that has begun and has no answer
 * to wait behind): armed when the wait begins and not moved by bytes that
 * trickle in, so a slow client cannot stretch it. tlhttp__conn_deadline() is the
 * one place that arms and clears it. After the last answer of a
 * connection the write side is shut and the read goes on, with a deadline
 * of LINGER_NS, until the client closes (tlhttp__linger()): closing at once would
 * let unread request bytes turn the close into a reset that can destroy
 * the answer in flight.
 */

/* ---- input ---- */

/*
 * Parse and answer every whole request that has arrived, in order, until
 * the input runs out, the connection ends, or it must wait (a body being
 * sent, or no room left for answers).
 */
void tlhttp__conn_run(struct tlhttp_shard *sh, struct conn *c)
{
	while (c->state == C_OPEN && !c->blocked) {
		const char *buf;
		uint32_t len;
		struct lent *e = c->lq_n ? &c->lq[c->lq_first] : NULL;
		int r;

		if (sh->out_cap - c->olen < RESP_ROOM) {
			tlhttp__flush(sh, c);
			if (c->state != C_OPEN)
				return;
			if (c->writes) {
				c->blocked = B_OUT;
				break;
			}
		}
		if (c->hlen) {
			/* A head begun in an earlier read: lend it the front
			 * lease's bytes, up to the buffer's end. */
			uint32_t room, n;
			if (!e)
				break;
			room = sh->head_cap - (c->hlen - c->borrowed);
			n = e->len - e->off < room ? e->len - e->off : room;
			memcpy(c->head + c->hlen - c->borrowed, e->data + e->off, n);
			c->hlen = c->hlen - c->borrowed + n;
			c->borrowed = n;
			buf = c->head;
			len = c->hlen;
		} else if (e) {
			buf = (const char *)e->data + e->off;
			len = e->len - e->off;
		} else {
			break;
		}
		if (!c->parsing) {
			tlhttp_req_init(&c->req, &sh->srv->lim);
			c->parsing = 1;
		}
		r = tlhttp_parse(&c->req, buf, len);
		if (r == 0) {
			if (c->hlen) {
				if (c->borrowed < e->len - e->off) {
					/* Cannot happen: a head as long as the
					 * buffer is over the parser's limits. */
					tlhttp__conn_close(sh, c);
					return;
				}
				c->borrowed = 0; /* the whole lease is the head's now */
			} else {
				if (len > sh->head_cap) { /* as above */
					tlhttp__conn_close(sh, c);
					return;
				}
				memcpy(c->head, buf, len);
				c->hlen = len;
			}
			tlhttp__lq_pop(sh, c);
			continue;
		}
		c->parsing = 0;
		c->fresh = 0;
		if (r < 0) {
			tlhttp__answer_status(sh, c, &c->req, c->req.status, TLHTTP_CONN_CLOSE, 0, 0);
			tlhttp__linger(sh, c);
			return;
		}
		tlhttp__answer(sh, c, &c->req);
		if (c->state != C_OPEN)
			return;
		/* The head is answered: take it off its lease. */
		if (c->hlen) {
			e->off += (uint32_t)r - (c->hlen - c->borrowed);
			c->hlen = c->borrowed = 0;
		} else {
			e->off += (uint32_t)r;
		}
		if (e->off == e->len)
			tlhttp__lq_pop(sh, c);
	}
	if (c->state == C_OPEN && c->blocked != B_BODY)
		tlhttp__flush(sh, c);
}

/* After the peer's EOF: close once nothing is left to answer or send. */
static void eof_check(struct tlhttp_shard *sh, struct conn *c)
{
	if (c->eof && c->state == C_OPEN && !c->blocked && !c->writes &&
	    (!c->lq_n || c->hlen))
		tlhttp__conn_close(sh, c);
}

static void on_read(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	if (cp->result > 0 && (cp->flags & TL_F_LEASE)) {
		if (c->state != C_OPEN || c->lq_n == LQ) {
			tlhttp__io_release(sh, cp->u.read.lease.id);
			/* More than LQ while waiting: past the lease cap by
			 * more than a read in flight can be; not a client to
			 * keep. */
			if (c->state == C_OPEN)
				tlhttp__conn_close(sh, c);
		} else {
			struct lent *e = &c->lq[(c->lq_first + c->lq_n) % LQ];
			e->data = cp->u.read.lease.data;
			e->id = cp->u.read.lease.id;
			e->len = (uint32_t)cp->result;
			e->off = 0;
			c->lq_n++;
			tlhttp__conn_run(sh, c);
		}
	}
	if (cp->flags & TL_F_TERMINAL) {
		c->reading = 0;
		if (cp->result == 0 && !(cp->flags & TL_F_STOPPED)) {
			c->eof = 1;
			if (c->state == C_LINGER && c->shut_done)
				tlhttp__conn_close(sh, c);
			eof_check(sh, c);
		} else if (cp->result == -ETIMEDOUT && c->state == C_OPEN && c->hlen && c->rd_at &&
			   sh->now >= c->rd_at) {
			/* The header deadline: part of a head came and the
			 * rest did not. (Nothing is being written: the
			 * deadline is armed only then.) */
			struct tlhttp_req none;
			tlhttp_req_init(&none, NULL);
			c->rd_at = 0;
			tlhttp__answer_status(sh, c, &none, 408, TLHTTP_CONN_CLOSE, 0, 0);
			tlhttp__linger(sh, c);
		} else if (c->state == C_OPEN || c->state == C_LINGER) {
			/* An error, the idle deadline, the header deadline of
			 * a connection that sent nothing, or the linger's. */
			tlhttp__conn_close(sh, c);
		}
	}
	tlhttp__conn_deadline(sh, c);
}

static void on_write(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	c->writes--;
	/* Nothing reads the out buffer any more: start it again. */
	if (!c->writes && c->ostart == c->olen && !c->niov)
		c->olen = c->ostart = 0;
	if (c->state != C_OPEN && c->state != C_LINGER)
		return;
	if (cp->result < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	if (c->state == C_OPEN && !c->writes) {
		if (c->blocked == B_OUT) {
			c->blocked = B_NONE;
			tlhttp__conn_run(sh, c);
		}
		eof_check(sh, c);
	}
	tlhttp__conn_deadline(sh, c);
}

/* The connection is ready for requests: read them. */
static void conn_reading(struct tlhttp_shard *sh, struct conn *c)
{
	if (tlhttp__io_read_start(sh, c) < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	c->reading = 1;
	tlhttp__conn_deadline(sh, c);
}

static void on_handshake(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	c->handshake = 0;
	if (c->state != C_OPEN)
		return;
	if (cp->result < 0) {
		sh->tot->tls_failed++;
		tl_shard_counter_add(sh->s, sh->srv->st_tls_failed, 1);
		tlhttp__conn_close(sh, c);
		return;
	}
	conn_reading(sh, c);
}

static void on_accept(struct tlhttp_shard *sh, const tl_completion *cp)
{
	tl_handle h = cp->u.accept.conn;
	struct conn *c;

	if (cp->result < 0)
		return; /* accepting resumes by itself (EMFILE...) */
	if (sh->stopping || sh->free_first == NONE) {
		tl_close(sh->loop, h, tok(TK_OTHER, 0));
		sh->tot->refused++;
		tl_shard_counter_add(sh->s, sh->srv->st_refused, 1);
		return;
	}
	c = &sh->conns[sh->free_first];
	sh->free_first = c->next;
	c->h = h;
	c->state = C_OPEN;
	c->blocked = B_NONE;
	c->fresh = 1;
	c->parsing = c->eof = c->after_close = c->shut_done = c->fs_pending = c->closed = 0;
	c->reading = 0;
	c->rd_at = 0;
	c->lq_first = c->lq_n = 0;
	c->next = NONE;
	c->writes = c->olen = c->ostart = c->hlen = c->borrowed = 0;
	c->niov = 0;
	c->fd = -1;
	c->peer[0] = '-';
	c->peer[1] = '\0';
	if (sh->srv->alog) {
		const tl_addr *a = &cp->u.accept.peer;
		if (a->sa.sa_family == AF_INET)
			inet_ntop(AF_INET, &a->in.sin_addr, c->peer, sizeof c->peer);
		else if (a->sa.sa_family == AF_INET6)
			inet_ntop(AF_INET6, &a->in6.sin6_addr, c->peer, sizeof c->peer);
	}
	sh->tot->conns++;
	tl_shard_gauge_add(sh->s, sh->srv->st_conns, 1);
	c->tid.v = 0;
	c->handshake = 0;
	if (tl_idle_deadline(sh->loop, h, sh->srv->o->idle_timeout_ns) < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	if (sh->tls) {
		/* the handshake first, under the header deadline */
		tl_op op;
		if (tl_tls_server(sh->tls, sh->srv->tls, h, tok(TK_CLOSE, c->idx), &c->tid) < 0) {
			tlhttp__conn_close(sh, c);
			return;
		}
		if (tl_tls_handshake(sh->tls, c->tid, sh->now + sh->srv->o->header_timeout_ns,
				     tok(TK_HS, c->idx), &op) < 0) {
			tlhttp__conn_close(sh, c);
			return;
		}
		c->handshake = 1;
		return;
	}
	conn_reading(sh, c);
}

static void on_sendfile(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	c->fs_pending = 0;
	if (c->state != C_OPEN) {
		if (c->closed)
			tlhttp__conn_free(sh, c);
		return;
	}
	tlhttp__body_step(sh, c, cp);
	tlhttp__conn_deadline(sh, c);
}

/* The graceful drain (SIGTERM; the runtime has closed the listeners):
 * connections with nothing under way end now, the others once their
 * request is answered (with Connection: close, as sh->stopping says). */
void tlhttp_shard_drain(tl_shard *s, void *arg)
{
	struct tlhttp_shard *sh = tl_shard_data(s);

	(void)arg;
	if (!sh)
		return;
	sh->stopping = 1;
	if (sh->fc)
		tl_set_ref(sh->loop, sh->sweep, 0); /* the drain does not wait for it */
	for (uint32_t i = 0; i < sh->nconns; i++) {
		struct conn *c = &sh->conns[i];
		if (c->state == C_OPEN && !c->hlen && !c->lq_n && !c->writes && !c->blocked)
			tlhttp__conn_close(sh, c);
	}
}

void tlhttp_shard_completion(tl_shard *s, const tl_completion *cp)
{
	struct tlhttp_shard *sh = tl_shard_data(s);
	uint64_t d = tl_token_data(cp->token);
	unsigned kind = (unsigned)(d >> 32);
	uint32_t idx = (uint32_t)d;
	struct conn *c = idx < sh->nconns ? &sh->conns[idx] : NULL;

	if (sh->stale)
		tlhttp__refresh(sh);
	if (cp->token == TL_RT_CLOSE_TOKEN)
		return; /* a handle the runtime closed for us (the listener) */
	switch (kind) {
	case TK_ACCEPT:
		if (cp->kind == TL_K_ACCEPT)
			on_accept(sh, cp);
		break;
	case TK_READ:
		if (c)
			on_read(sh, c, cp);
		break;
	case TK_WRITE:
		if (c)
			on_write(sh, c, cp);
		break;
	case TK_SHUT:
		if (c && c->state == C_LINGER) {
			c->shut_done = 1;
			if (cp->result < 0 || c->eof)
				tlhttp__conn_close(sh, c);
		}
		break;
	case TK_CLOSE:
		if (c) {
			c->closed = 1;
			if (!c->fs_pending)
				tlhttp__conn_free(sh, c);
		}
		break;
	case TK_FS:
		if (c && (cp->kind == TL_K_SPLICE || (cp->kind == TL_K_WRITE && sh->tls)))
			on_sendfile(sh, c, cp);
		break;
	case TK_HS:
		if (c && cp->kind == TL_K_TLS_HANDSHAKE)
			on_handshake(sh, c, cp);
		break;
	case TK_SWEEP:
		if (cp->kind == TL_K_TIMER && cp->result == 0 && sh->fc)
			tlhttp_fcache_sweep(sh->fc, sh->now, sh->srv->o->file_idle_ns);
		break;
	default:
		break;
	}
}

int tlhttp_shard_pass(tl_shard *s, void *arg)
{
	struct tlhttp_shard *sh = tl_shard_data(s);
	tl_completion out[64];
	int n;

	(void)arg;
	if (!sh)
		return 0;
	sh->stale = 1;
	if (!sh->tls)
		return 0;
	/* the TLS completions of this pass: they carry this file's tokens */
	while ((n = tl_tls_poll(sh->tls, out, 64)) > 0)
		for (int i = 0; i < n; i++)
			tlhttp_shard_completion(s, &out[i]);
	return tl_tls_pending(sh->tls) != 0;
}

void tlhttp_shard_tls(tl_shard *s, const tl_completion *c)
{
	struct tlhttp_shard *sh = tl_shard_data(s);

	if (sh && sh->tls)
		tl_tls_complete(sh->tls, c);
}

/* ---- setup ---- */

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* Pooled read buffers per loop: what a connection holds only while it
 * waits is LEASE_CAP; the rest are parsed and given back in the same pass. */
static uint32_t loop_buffers(const struct tlhttp_opts *o)
{
	uint64_t conns = o->max_conns;
	return pow2_at_least(conns < 256 ? 256 : conns > 32768 ? 32768 : (uint32_t)conns);
}

void tlhttp_loop_config(const struct tlhttp_opts *o, tl_config *cfg)
{
	uint64_t conns = o->max_conns;

	tl_config_init(cfg);
	/* A connection has a read, a few writes, a shutdown and a sendfile
	 * in flight at most; the timer and the listener need a few more. */
	cfg->max_handles = (uint32_t)(conns + 64 < (1u << 24) ? conns + 64 : (1u << 24));
	cfg->max_ops = (uint32_t)(conns * 6 + 256 < (1u << 24) ? conns * 6 + 256 : (1u << 24));
	cfg->pooled_buffers = loop_buffers(o);
	cfg->pooled_buffer_size = 4096;
}

int tlhttp_shard_launch(tl_shard *s, void *arg)
{
	struct tlhttp_server *srv = arg;
	const struct tlhttp_opts *o = srv->o;
	struct tlhttp_shard *sh;
	tl_listen_opts lo = {.backlog = 4096, .reuseport = 1};
	tl_op op;
	int r;

	sh = calloc(1, sizeof *sh);
	if (!sh)
		return -ENOMEM;
	sh->s = s;
	sh->loop = tl_shard_loop(s);
	sh->srv = srv;
	sh->id = tl_shard_id(s);
	sh->tot = &srv->totals[sh->id];
	srv->shards[sh->id] = sh;
	sh->nconns = o->max_conns;
	/* A head is at most its line, that line's CRLF and the header section. */
	sh->head_cap = srv->lim.max_line + 2 + srv->lim.max_header_bytes;
	sh->out_cap = srv->root >= 0 ? OUT_CAP_FILES : OUT_CAP;
	sh->conns = calloc(sh->nconns, sizeof *sh->conns);
	sh->heads = malloc((size_t)sh->nconns * sh->head_cap);
	sh->outs = malloc((size_t)sh->nconns * sh->out_cap);
	if (!sh->conns || !sh->heads || !sh->outs)
		return -ENOMEM;
	if (srv->tls) {
		tl_tls_ctx_config cc;
		tl_tls_ctx_config_init(&cc);
		cc.token_tag = TLHTTP_TLS_TAG;
		cc.max_sessions = sh->nconns;
		cc.max_ops = sh->nconns * 4 < (1u << 24) ? sh->nconns * 4 : (1u << 24);
		cc.loop_leases = loop_buffers(o);
		if ((r = tl_tls_ctx_new(sh->loop, &cc, &sh->tls)) < 0)
			return r;
		if (srv->root >= 0 && !(sh->bodies = malloc((size_t)sh->nconns * PIECE_TLS)))
			return -ENOMEM;
	}
	if (srv->root >= 0) {
		if (!srv->tls && !(tl_loop_caps(sh->loop) & TL_CAP_SPLICE))
			return -ENOTSUP; /* files are sent with tl_sendfile */
		if ((r = tlhttp_fcache_new(&sh->fc, srv->root, FCACHE_SETS)) < 0)
			return r;
	}
	for (uint32_t i = 0; i < sh->nconns; i++) {
		struct conn *c = &sh->conns[i];
		c->idx = i;
		c->next = i + 1 < sh->nconns ? i + 1 : NONE;
		c->head = sh->heads + (size_t)i * sh->head_cap;
		c->out = sh->outs + (size_t)i * sh->out_cap;
		c->body = sh->bodies ? sh->bodies + (size_t)i * PIECE_TLS : NULL;
		c->fd = -1;
	}
	sh->free_first = 0;
	tlhttp_date_cache_init(&sh->date);
	sh->sec = INT64_MIN;
	tlhttp__refresh(sh);
	if (sh->sec == INT64_MIN)
		return -EINVAL; /* a wall clock outside years 1..9999 */
	if ((r = tlhttp__build_templates(sh)) < 0)
		return r;
	tl_shard_set_data(s, sh);

	/* Each shard owns a listener on the same address; the kernel spreads
	 * connections across them (SO_REUSEPORT). */
	if ((r = tl_tcp_listen(sh->loop, &o->addr, &lo, &sh->listener)) < 0 ||
	    (r = tl_handle_caps(sh->loop, sh->listener, LEASE_CAP, 0)) < 0 ||
	    (r = tl_accept_start(sh->loop, sh->listener, tok(TK_ACCEPT, 0), &op)) < 0)
		return r;
	/* The open-file cache closes idle descriptors once a second, or as
	 * often as --file-cache-idle when that is shorter. */
	uint64_t every = o->file_idle_ns < 1000000000ull ? o->file_idle_ns : 1000000000ull;
	if (sh->fc && (r = tl_timer_start(sh->loop, tl_now(sh->loop) + every, every,
					  tok(TK_SWEEP, 0), &sh->sweep, &op)) < 0)
		return r;
	return 0;
}

void tlhttp_shard_stop(tl_shard *s, void *arg)
{
	struct tlhttp_shard *sh = tl_shard_data(s);

	(void)arg;
	if (!sh)
		return;
	sh->stopping = 1;
	tl_close(sh->loop, sh->listener, tok(TK_OTHER, 0)); /* -EINVAL after a drain */
	if (sh->fc)
		tl_close(sh->loop, sh->sweep, tok(TK_OTHER, 0));
	for (uint32_t i = 0; i < sh->nconns; i++)
		if (sh->conns[i].state == C_OPEN || sh->conns[i].state == C_LINGER)
			tlhttp__conn_close(sh, &sh->conns[i]);
}

void tlhttp_shards_free(struct tlhttp_server *srv)
{
	for (uint32_t i = 0; i < srv->nshards; i++) {
		struct tlhttp_shard *sh = srv->shards[i];
		if (!sh)
			continue;
		if (sh->conns)
			for (uint32_t k = 0; k < sh->nconns; k++)
				if (sh->conns[k].fd >= 0)
					tlhttp_fcache_put(sh->fc, sh->conns[k].fref, sh->conns[k].fd);
		tlhttp_fcache_free(sh->fc);
		tl_tls_ctx_destroy(sh->tls); /* the loops are gone: nothing reads its buffers */
		free(sh->bodies);
		free(sh->conns);
		free(sh->heads);
		free(sh->outs);
		free(sh);
		srv->shards[i] = NULL;
	}
}
