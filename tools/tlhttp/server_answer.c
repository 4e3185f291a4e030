/* tools/tlhttp/server_answer.c: tlhttp's answers: status answers, --body, and files (small ones read behind their head, large ones by tl_sendfile in pieces, over TLS through the session), with their conditional and range rules. */
#include "tlhttp/server_int.h"

/* ---- answers ---- */

/* enum tlhttp_conn for an answer to req: keep-alive is HTTP/1.1's default. */
static int conn_line(const struct tlhttp_req *req, int close)
{
	if (close)
		return TLHTTP_CONN_CLOSE;
	return req->minor == 0 ? TLHTTP_CONN_KEEP_ALIVE : TLHTTP_CONN_NONE;
}

/* An answer with a short text body naming the status (or none for HEAD). */
void tlhttp__answer_status(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
			   int status, int connection, uint64_t range_size, int crange)
{
	char body[80];
	int bl = snprintf(body, sizeof body, "%d %s\n", status, tlhttp_status_text(status));
	int head_only = req->method == TLHTTP_HEAD;
	struct tlhttp_resp r = {
		.status = status, .date = &sh->date, .server = server_name,
		.content_type = "text/plain; charset=utf-8", .content_length = bl,
		.connection = (uint8_t)connection, .allow = status == 405,
		.content_range = (uint8_t)crange, .range_size = range_size,
	};
	int n = tlhttp_head_format(c->out + c->olen, sh->out_cap - c->olen, &r);

	if (n < 0) { /* cannot happen: room was made and every field is known */
		tlhttp__conn_close(sh, c);
		return;
	}
	c->olen += (uint32_t)n;
	if (!head_only)
		emit(c, body, (uint32_t)bl);
	tlhttp__answered(sh, c, req, status, head_only ? 0 : (uint64_t)bl);
}

static void body_send(struct tlhttp_shard *sh, struct conn *c)
{
	if (sh->tls) {
		/* no splice through TLS: read a piece, write it as one record */
		c->piece = c->bleft < PIECE_TLS ? (uint32_t)c->bleft : PIECE_TLS;
		if (pread(c->fd, c->body, c->piece, (off_t)c->boff) != (ssize_t)c->piece ||
		    tl_tls_write(sh->tls, c->tid, c->body, c->piece, tok(TK_FS, c->idx), &c->fs_op) < 0) {
			tlhttp__conn_close(sh, c);
			return;
		}
		c->fs_pending = 1;
		return;
	}
	c->piece = c->bleft < PIECE ? (uint32_t)c->bleft : PIECE;
	if (tl_sendfile(sh->loop, c->fd, c->boff, c->piece, c->h, tok(TK_FS, c->idx), &c->fs_op) < 0) {
		tlhttp__conn_close(sh, c);
		return;
	}
	c->fs_pending = 1;
}

/* The head is in out: it leaves now, and the body after it. */
static void body_start(struct tlhttp_shard *sh, struct conn *c, int fd, uint32_t ref,
		       uint64_t off, uint64_t len)
{
	c->fd = fd;
	c->fref = ref;
	c->boff = off;
	c->bleft = len;
	c->blocked = B_BODY;
	tlhttp__flush(sh, c);
	if (c->state == C_OPEN)
		body_send(sh, c);
}


/* A piece is sent: the next one, or the next request. */
void tlhttp__body_step(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	if (cp->result < 0 || (uint64_t)cp->result < c->piece) {
		/* The stream failed, or the file shrank under us: the
		 * promised length cannot be kept, so the connection ends. */
		tlhttp__conn_close(sh, c);
		return;
	}
	c->boff += c->piece;
	c->bleft -= c->piece;
	if (c->bleft) {
		body_send(sh, c);
		return;
	}
	tlhttp_fcache_put(sh->fc, c->fref, c->fd);
	c->fd = -1;
	c->blocked = B_NONE;
	if (c->after_close)
		tlhttp__linger(sh, c);
	else
		tlhttp__conn_run(sh, c);
}

/* Whether req carries a precondition (RFC 9110 13.1): they are rare, and
 * the common request skips their evaluation. */
static inline int conditional(const struct tlhttp_req *req)
{
	return req->if_match.p || req->if_none_match.p || req->if_unmodified_since.p ||
	       req->if_modified_since.p || req->if_range.p;
}

static void answer_file(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
			int connection)
{
	char name[PATH_MAX];
	struct tlhttp_file f;
	uint32_t ref;
	int n = tlhttp_path_normalize(req->path.p, req->path.len, name, sizeof name), rc;
	int head_only = req->method == TLHTTP_HEAD;

	if (n < 0) {
		tlhttp__answer_status(sh, c, req, tlhttp_path_status(n), connection, 0, 0);
		return;
	}
	rc = tlhttp_fcache_get(sh->fc, name, sh->now, &f, &ref);
	if (rc < 0) {
		tlhttp__answer_status(sh, c, req, tlhttp_path_status(rc), connection, 0, 0);
		return;
	}
	struct tlhttp_resp r = {
		.status = 200, .date = &sh->date, .server = server_name,
		.content_type = f.index ? tlhttp_mime_type("index.html", 10)
					: tlhttp_mime_type(name, (size_t)n),
		.content_length = (int64_t)f.size, .connection = (uint8_t)connection,
		.last_modified = f.mtime,
		.has_last_modified = f.mtime >= TLHTTP_TIME_MIN && f.mtime <= TLHTTP_TIME_MAX,
	};
	uint64_t first = 0, len = f.size;
	char etag[TLHTTP_ETAG_MAX];
	struct tlhttp_validators val = { .etag = etag, .mtime = f.mtime,
					 .has_mtime = r.has_last_modified };
	int range_ok = 1, pc = 200;

	tlhttp_etag_format(f.mtime, f.size, etag);
	r.etag = etag;
	if (conditional(req))
		pc = tlhttp_preconditions(req, &val, sh->sec, &range_ok);
	if (pc == 412) {
		tlhttp_fcache_put(sh->fc, ref, f.fd);
		tlhttp__answer_status(sh, c, req, 412, connection, 0, 0);
		return;
	}
	if (pc == 304) {
		r.status = 304;
		r.content_type = NULL;
		r.content_length = -1;
		len = 0;
	} else if (req->range.p && range_ok) {
		uint64_t a, b;
		int rr = tlhttp_range_parse(req->range.p, req->range.len, f.size, &a, &b);
		if (rr == 416) {
			tlhttp_fcache_put(sh->fc, ref, f.fd);
			tlhttp__answer_status(sh, c, req, 416, connection, f.size, TLHTTP_CRANGE_UNSATISFIED);
			return;
		}
		if (rr == 206) {
			r.status = 206;
			r.content_range = TLHTTP_CRANGE_BYTES;
			r.range_first = a;
			r.range_last = b;
			r.range_size = f.size;
			first = a;
			len = b - a + 1;
			r.content_length = (int64_t)len;
		}
	}
	n = tlhttp_head_format(c->out + c->olen, sh->out_cap - c->olen, &r);
	if (n < 0) {
		tlhttp_fcache_put(sh->fc, ref, f.fd);
		tlhttp__answer_status(sh, c, req, 500, TLHTTP_CONN_CLOSE, 0, 0);
		c->after_close = 1;
		return;
	}
	if (!head_only && len && len <= SMALL_BODY && len <= sh->out_cap - c->olen - (uint32_t)n) {
		/* A small body: copied behind its head, read on the shard's
		 * thread from the page cache, as tl_sendfile would. */
		ssize_t got = pread(f.fd, c->out + c->olen + n, len, (off_t)first);
		tlhttp_fcache_put(sh->fc, ref, f.fd);
		if (got != (ssize_t)len) {
			/* The file shrank (or failed) since its fstat: the
			 * head cannot be kept. */
			tlhttp__answer_status(sh, c, req, 500, TLHTTP_CONN_CLOSE, 0, 0);
			c->after_close = 1;
			return;
		}
		c->olen += (uint32_t)n + (uint32_t)len;
		tlhttp__answered(sh, c, req, r.status, len);
		return;
	}
	c->olen += (uint32_t)n;
	tlhttp__answered(sh, c, req, r.status, head_only ? 0 : len);
	if (head_only || !len) {
		tlhttp_fcache_put(sh->fc, ref, f.fd);
		return;
	}
	body_start(sh, c, f.fd, ref, first, len);
}

/* The fixed body's preconditions: it has neither a tag nor a date, so
 * only "*" matches (If-None-Match: * is 304, If-Match with tags 412).
 * Returns 1 if it answered. */
static int answer_body_cond(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
			    int connection)
{
	static const struct tlhttp_validators none = { 0 };
	int range_ok, pc = tlhttp_preconditions(req, &none, sh->sec, &range_ok);

	if (pc == 412) {
		tlhttp__answer_status(sh, c, req, 412, connection, 0, 0);
		return 1;
	}
	if (pc != 304)
		return 0;
	struct tlhttp_resp r = { .status = 304, .date = &sh->date, .server = server_name,
				 .content_length = -1, .connection = (uint8_t)connection };
	int n = tlhttp_head_format(c->out + c->olen, sh->out_cap - c->olen, &r);
	if (n < 0) { /* cannot happen: room was made and every field is known */
		tlhttp__conn_close(sh, c);
		return 1;
	}
	c->olen += (uint32_t)n;
	tlhttp__answered(sh, c, req, 304, 0);
	return 1;
}

/* The answer to a whole, accepted head. */
void tlhttp__answer(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req)
{
	int close = !req->keep_alive || sh->stopping;
	int connection = conn_line(req, close);

	if (sh->srv->root >= 0) {
		answer_file(sh, c, req, connection);
	} else if (conditional(req) && answer_body_cond(sh, c, req, connection)) {
		/* answered: 304 or 412 */
	} else {
		const struct tmpl *t = &sh->tmpl[connection];
		uint32_t bl = sh->srv->o->body_len;
		if (req->method == TLHTTP_HEAD) {
			emit(c, t->buf, t->head_len);
		} else if (t->len > t->head_len || !bl) {
			emit(c, t->buf, t->len);
		} else {
			emit(c, t->buf, t->head_len);
			tlhttp__emit_ref(sh, c, sh->srv->o->body, bl);
		}
		tlhttp__answered(sh, c, req, 200, req->method == TLHTTP_HEAD ? 0 : bl);
	}
	if (close || c->after_close) {
		if (c->blocked == B_BODY)
			c->after_close = 1;
		else
			tlhttp__linger(sh, c);
	}
}
