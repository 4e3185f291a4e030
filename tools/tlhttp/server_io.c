/* tools/tlhttp/server_io.c: tlhttp's connection plumbing: the stream's calls or the TLS session's (io_*), the fixed answers and the Date, stats and the access log, the header deadline, leases, closing, and the out buffer with its writes and the linger after the last answer (server.c says how the pieces fit). */
#include "tlhttp/server_int.h"

/* ---- the stream's calls, or the TLS session's ---- */

int tlhttp__io_read_start(struct tlhttp_shard *sh, struct conn *c)
{
	return sh->tls ? tl_tls_read_start(sh->tls, c->tid, tok(TK_READ, c->idx), &c->rop)
		       : tl_read_start(sh->loop, c->h, tok(TK_READ, c->idx), &c->rop);
}

static void io_read_deadline(struct tlhttp_shard *sh, struct conn *c, uint64_t at)
{
	if (sh->tls)
		tl_tls_read_deadline(sh->tls, c->rop, at);
	else
		tl_read_deadline(sh->loop, c->rop, at);
}

void tlhttp__io_release(struct tlhttp_shard *sh, uint32_t lease)
{
	if (sh->tls)
		tl_tls_lease_release(sh->tls, lease);
	else
		tl_lease_release(sh->loop, lease);
}

static int io_writev(struct tlhttp_shard *sh, struct conn *c, const struct iovec *iov, int n,
		     uint64_t token, tl_op *op)
{
	if (sh->tls)
		return tl_tls_writev(sh->tls, c->tid, iov, n, token, op);
	return n == 1 ? tl_write(sh->loop, c->h, iov[0].iov_base, (uint32_t)iov[0].iov_len, token, op)
		      : tl_writev(sh->loop, c->h, iov, n, token, op);
}

static int io_shutdown(struct tlhttp_shard *sh, struct conn *c, tl_op *op)
{
	return sh->tls ? tl_tls_shutdown(sh->tls, c->tid, tok(TK_SHUT, c->idx), op)
		       : tl_shutdown(sh->loop, c->h, tok(TK_SHUT, c->idx), op);
}

/* A session's close sends close_notify and ends with the session's
 * Closed; a connection without one closes its stream. */
static int io_close(struct tlhttp_shard *sh, struct conn *c)
{
	return sh->tls && c->tid.v ? tl_tls_close(sh->tls, c->tid, 0, tok(TK_CLOSE, c->idx))
				   : tl_close(sh->loop, c->h, tok(TK_CLOSE, c->idx));
}

/* ---- time, Date and the fixed answers ---- */

int tlhttp__build_templates(struct tlhttp_shard *sh)
{
	const struct tlhttp_opts *o = sh->srv->o;

	if (!o->body)
		return 0;
	for (int v = 0; v < V_COUNT; v++) {
		struct tmpl *t = &sh->tmpl[v];
		struct tlhttp_resp r = {
			.status = 200, .date = &sh->date, .server = server_name,
			.content_type = "text/plain; charset=utf-8",
			.content_length = o->body_len, .connection = (uint8_t)v,
		};
		int n = tlhttp_head_format(t->buf, sizeof t->buf - BODY_COPY_MAX, &r);
		if (n < 0)
			return n;
		t->head_len = t->len = (uint32_t)n;
		if (o->body_len <= BODY_COPY_MAX) {
			memcpy(t->buf + n, o->body, o->body_len);
			t->len += o->body_len;
		}
	}
	return 0;
}

/* The clocks, once per pass: the loop's for the timeouts, the wall clock's
 * second for Date (its coarse reading costs no system call). */
void tlhttp__refresh(struct tlhttp_shard *sh)
{
	struct timespec ts;

	sh->stale = 0;
	sh->now = tl_now(sh->loop);
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	if (ts.tv_sec == sh->sec || tlhttp_date_cache_update(&sh->date, ts.tv_sec) < 0)
		return;
	sh->sec = ts.tv_sec;
	tlhttp__build_templates(sh);
	if (sh->srv->alog) {
		/* "Sun, 06 Nov 1994 08:49:37 GMT" -> "[06/Nov/1994:08:49:37 +0000]" */
		const char *d = sh->date.line + 6;
		snprintf(sh->clf, sizeof sh->clf, "[%.2s/%.3s/%.4s:%.8s +0000]", d + 5, d + 8,
			 d + 12, d + 17);
	}
}

/* ---- stats and the access log ---- */

static void count(struct tlhttp_shard *sh, int status)
{
	int k = status / 100;

	sh->tot->requests++;
	if (k >= 1 && k <= 5)
		sh->tot->status[k]++;
	if (k >= 2 && k <= 5)
		tl_shard_counter_add(sh->s, sh->srv->st_resp + k - 2, 1);
}

static void log_line(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
		     int status, uint64_t bytes)
{
	char line[1200];
	const char *m = req->method == TLHTTP_GET ? "GET" : req->method == TLHTTP_HEAD ? "HEAD" : NULL;
	uint32_t tl = req->target.len > 1000 ? 1000 : req->target.len;
	int n;

	if (m && req->target.p && req->status == 0)
		n = snprintf(line, sizeof line, "%s - - %s \"%s %.*s HTTP/1.%u\" %d %llu\n", c->peer,
			     sh->clf, m, (int)tl, req->target.p, req->minor, status,
			     (unsigned long long)bytes);
	else
		n = snprintf(line, sizeof line, "%s - - %s \"-\" %d %llu\n", c->peer, sh->clf, status,
			     (unsigned long long)bytes);
	if (n > 0 && tlhttp_alog_put(sh->srv->alog, sh->id, line, (uint32_t)n) == -ENOBUFS) {
		sh->tot->log_dropped++;
		tl_shard_counter_add(sh->s, sh->srv->st_dropped, 1);
	}
}

void tlhttp__answered(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
		      int status, uint64_t bytes)
{
	count(sh, status);
	if (sh->srv->alog)
		log_line(sh, c, req, status, bytes);
}

/* ---- the header deadline ---- */

/* Arm the read's deadline while a head is awaited and nothing is owed to
 * the client first; clear it otherwise. Armed once per wait: bytes that
 * arrive do not move it. */
void tlhttp__conn_deadline(struct tlhttp_shard *sh, struct conn *c)
{
	int want;

	if (c->state != C_OPEN || !c->reading)
		return;
	want = (c->hlen || c->fresh) && !c->writes && !c->blocked;
	if (want == (c->rd_at != 0))
		return;
	c->rd_at = want ? sh->now + sh->srv->o->header_timeout_ns : 0;
	io_read_deadline(sh, c, c->rd_at);
}

/* ---- leases ---- */

void tlhttp__lq_pop(struct tlhttp_shard *sh, struct conn *c)
{
	tlhttp__io_release(sh, c->lq[c->lq_first].id);
	c->lq_first = (uint8_t)((c->lq_first + 1) % LQ);
	c->lq_n--;
}

static void lq_drop(struct tlhttp_shard *sh, struct conn *c)
{
	while (c->lq_n)
		tlhttp__lq_pop(sh, c);
	c->hlen = c->borrowed = 0;
	c->parsing = 0;
}

/* ---- closing ---- */

void tlhttp__conn_free(struct tlhttp_shard *sh, struct conn *c)
{
	if (c->fd >= 0) {
		tlhttp_fcache_put(sh->fc, c->fref, c->fd);
		c->fd = -1;
	}
	c->state = C_FREE;
	c->next = sh->free_first;
	sh->free_first = c->idx;
	tl_shard_gauge_add(sh->s, sh->srv->st_conns, -1);
}

void tlhttp__conn_close(struct tlhttp_shard *sh, struct conn *c)
{
	if (c->state == C_CLOSING || c->state == C_FREE)
		return;
	lq_drop(sh, c);
	c->state = C_CLOSING;
	/* A TLS body write is the session's op, which the session's close
	 * ends; given to the loop, its id could name a loop op (the two
	 * number their ids alike). */
	if (c->fs_pending && !sh->tls)
		tl_cancel(sh->loop, c->fs_op);
	if (io_close(sh, c) < 0) {
		c->closed = 1; /* not ours to close any more: nothing will come */
		if (!c->fs_pending)
			tlhttp__conn_free(sh, c);
	}
}

/* ---- output ---- */

static void submit(struct tlhttp_shard *sh, struct conn *c)
{
	tl_op op;
	int r = io_writev(sh, c, c->iov, c->niov, tok(TK_WRITE, c->idx), &op);
	c->niov = 0;
	if (r < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	c->writes++;
}

void tlhttp__flush(struct tlhttp_shard *sh, struct conn *c)
{
	if (c->olen > c->ostart) {
		if (c->niov == TL_IOV_MAX)
			submit(sh, c);
		c->iov[c->niov].iov_base = c->out + c->ostart;
		c->iov[c->niov++].iov_len = c->olen - c->ostart;
		c->ostart = c->olen;
	}
	if (c->niov && c->state != C_CLOSING)
		submit(sh, c);
	c->niov = 0;
}


/* Bytes that stay where they are until the write is done. */
void tlhttp__emit_ref(struct tlhttp_shard *sh, struct conn *c, const void *p, uint32_t n)
{
	if (c->niov + 2 > TL_IOV_MAX)
		tlhttp__flush(sh, c);
	if (c->olen > c->ostart) {
		c->iov[c->niov].iov_base = c->out + c->ostart;
		c->iov[c->niov++].iov_len = c->olen - c->ostart;
		c->ostart = c->olen;
	}
	c->iov[c->niov].iov_base = (void *)p;
	c->iov[c->niov++].iov_len = n;
}

/* The last answer is queued: shut the write side after it and read (and
 * drop) what comes until the client closes, for LINGER_NS at most. */
void tlhttp__linger(struct tlhttp_shard *sh, struct conn *c)
{
	tl_op op;

	lq_drop(sh, c);
	tlhttp__flush(sh, c);
	if (c->state != C_OPEN)
		return;
	c->state = C_LINGER;
	if (io_shutdown(sh, c, &op) < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	if (c->eof)
		return; /* closed once the shutdown is done */
	if (!c->reading) {
		/* A deadline ended the read: one more, to see the close. */
		if (tlhttp__io_read_start(sh, c) < 0) {
			tlhttp__conn_close(sh, c);
			return;
		}
		c->reading = 1;
	}
	c->rd_at = sh->now + LINGER_NS;
	io_read_deadline(sh, c, c->rd_at);
}
