/* tools/tlhttp/server.c: tlhttp's shards: connection slots, request pipelines, responses, file bodies, deadlines and the graceful drain. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "tlhttp/cond.h"
#include "tlhttp/date.h"
#include "tlhttp/fcache.h"
#include "tlhttp/mime.h"
#include "tlhttp/path.h"
#include "tlhttp/range.h"
#include "tlhttp/resp.h"
#include "tlhttp/server.h"

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
 * layer (turnloop/tls.h): the io_* functions below are the one place that
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
 * trickle in, so a slow client cannot stretch it. conn_deadline() is the
 * one place that arms and clears it. After the last answer of a
 * connection the write side is shut and the read goes on, with a deadline
 * of LINGER_NS, until the client closes (linger()): closing at once would
 * let unread request bytes turn the close into a reset that can destroy
 * the answer in flight.
 */

#define OUT_CAP 4096   /* a connection's out buffer with --body */
/* With --root: bodies up to SMALL_BODY are read (pread) into the out
 * buffer behind their head and leave with it in one write; larger ones go
 * by tl_sendfile. Below about 32 KiB copying costs less CPU per request
 * than sendfile (docs/EXPERIMENTS.md, "tlhttp against nginx"). */
#define SMALL_BODY (16u * 1024)
#define OUT_CAP_FILES (OUT_CAP + SMALL_BODY)
/* Room an answer may need in the out buffer (a head and a copied body). */
#define RESP_ROOM 1024
#define BODY_COPY_MAX 512
#define LQ 8          /* leases a connection can hold while it waits */
#define LEASE_CAP 2   /* the stream's lease cap: reads pause past it */
#define PIECE (256u * 1024) /* bytes of a file per tl_sendfile */
#define PIECE_TLS (16u * 1024) /* bytes of a file per write over TLS: one record */
#define LINGER_NS (5 * 1000000000ull)
#define FCACHE_SETS 128 /* times TLHTTP_FCACHE_WAYS open files per shard */
#define NONE UINT32_MAX

enum { TK_ACCEPT = 1, TK_READ, TK_WRITE, TK_SHUT, TK_CLOSE, TK_FS, TK_SWEEP, TK_OTHER, TK_HS };
enum { C_FREE = 0, C_OPEN, C_LINGER, C_CLOSING };
enum { B_NONE = 0, B_OUT, B_BODY };
/* Fixed-body answers by their Connection line (enum tlhttp_conn). */
enum { V_COUNT = 3 };

struct lent {
	const uint8_t *data;
	uint32_t id, len, off;
};

struct conn {
	tl_handle h;
	uint32_t idx;
	uint8_t state, blocked;
	uint8_t reading;    /* the tl_read_start op rop is pending */
	uint8_t fresh;      /* no request answered yet: the header timeout applies */
	uint8_t parsing;    /* req holds a head begun in the head buffer */
	uint8_t eof;        /* the peer's EOF arrived */
	uint8_t after_close;/* linger once the body in progress is sent */
	uint8_t shut_done;  /* the shutdown completed (linger) */
	uint8_t fs_pending; /* a tl_sendfile is in flight */
	uint8_t closed;     /* Closed was delivered */
	uint8_t handshake;  /* TLS: the handshake runs */
	uint8_t lq_first, lq_n;
	uint32_t next;         /* free list */
	tl_op rop;             /* the read */
	uint64_t rd_at;        /* its deadline, 0: none */
	uint32_t writes;       /* writes in flight */
	uint32_t olen, ostart; /* out[ostart..olen) not yet handed to a write */
	int niov;
	uint32_t hlen;         /* bytes in the head buffer */
	uint32_t borrowed;     /* of which copied from the front lease, still in it */
	char *head;            /* the head buffer */
	int fd;                /* the file being sent, or -1 */
	uint32_t fref;         /* its fcache reference */
	uint32_t piece;        /* bytes of the tl_sendfile in flight */
	uint64_t boff, bleft;
	tl_op fs_op;
	tl_tls_id tid;         /* TLS: the session, 0 before it exists */
	uint8_t *body;         /* TLS with --root: PIECE_TLS bytes for file bodies */
	struct lent lq[LQ];
	struct iovec iov[TL_IOV_MAX];
	struct tlhttp_req req;
	char peer[48];         /* for the access log */
	char *out;             /* out_cap bytes: OUT_CAP, or OUT_CAP_FILES with --root */
};

struct tmpl {
	uint32_t head_len, len; /* head, and head with the body when copied */
	char buf[RESP_ROOM];
};

struct tlhttp_shard {
	tl_shard *s;
	tl_loop *loop;
	struct tlhttp_server *srv;
	struct tlhttp_totals *tot;
	uint32_t id, nconns, free_first, head_cap, out_cap;
	struct conn *conns;
	char *heads, *outs;
	tl_tls_ctx *tls;              /* with --tls-cert: this shard's TLS context */
	uint8_t *bodies;
	struct tlhttp_fcache *fc;
	tl_handle listener, sweep;
	int stopping, stale;
	uint64_t now;                 /* tl_now, read once per pass */
	int64_t sec;                  /* wall-clock second of date */
	struct tlhttp_date_cache date;
	char clf[32];                 /* the access log's time, "[06/Nov/1994:08:49:37 +0000]" */
	struct tmpl tmpl[V_COUNT];
};

static const char server_name[] = "tlhttp";

static inline uint64_t tok(unsigned kind, uint32_t idx)
{
	return tl_token(0, ((uint64_t)kind << 32) | idx);
}

/* ---- the stream's calls, or the TLS session's ---- */

static int io_read_start(struct tlhttp_shard *sh, struct conn *c)
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

static void io_release(struct tlhttp_shard *sh, uint32_t lease)
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

static int build_templates(struct tlhttp_shard *sh)
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
static void refresh(struct tlhttp_shard *sh)
{
	struct timespec ts;

	sh->stale = 0;
	sh->now = tl_now(sh->loop);
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	if (ts.tv_sec == sh->sec || tlhttp_date_cache_update(&sh->date, ts.tv_sec) < 0)
		return;
	sh->sec = ts.tv_sec;
	build_templates(sh);
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

static void answered(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
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
static void conn_deadline(struct tlhttp_shard *sh, struct conn *c)
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

static void lq_pop(struct tlhttp_shard *sh, struct conn *c)
{
	io_release(sh, c->lq[c->lq_first].id);
	c->lq_first = (uint8_t)((c->lq_first + 1) % LQ);
	c->lq_n--;
}

static void lq_drop(struct tlhttp_shard *sh, struct conn *c)
{
	while (c->lq_n)
		lq_pop(sh, c);
	c->hlen = c->borrowed = 0;
	c->parsing = 0;
}

/* ---- closing ---- */

static void conn_free(struct tlhttp_shard *sh, struct conn *c)
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

static void conn_close(struct tlhttp_shard *sh, struct conn *c)
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
			conn_free(sh, c);
	}
}

/* ---- output ---- */

static void submit(struct tlhttp_shard *sh, struct conn *c)
{
	tl_op op;
	int r = io_writev(sh, c, c->iov, c->niov, tok(TK_WRITE, c->idx), &op);
	c->niov = 0;
	if (r < 0) {
		conn_close(sh, c);
		return;
	}
	c->writes++;
}

static void flush(struct tlhttp_shard *sh, struct conn *c)
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

/* n bytes the caller made room for (RESP_ROOM). */
static inline void emit(struct conn *c, const void *p, uint32_t n)
{
	memcpy(c->out + c->olen, p, n);
	c->olen += n;
}

/* Bytes that stay where they are until the write is done. */
static void emit_ref(struct tlhttp_shard *sh, struct conn *c, const void *p, uint32_t n)
{
	if (c->niov + 2 > TL_IOV_MAX)
		flush(sh, c);
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
static void linger(struct tlhttp_shard *sh, struct conn *c)
{
	tl_op op;

	lq_drop(sh, c);
	flush(sh, c);
	if (c->state != C_OPEN)
		return;
	c->state = C_LINGER;
	if (io_shutdown(sh, c, &op) < 0) {
		conn_close(sh, c);
		return;
	}
	if (c->eof)
		return; /* closed once the shutdown is done */
	if (!c->reading) {
		/* A deadline ended the read: one more, to see the close. */
		if (io_read_start(sh, c) < 0) {
			conn_close(sh, c);
			return;
		}
		c->reading = 1;
	}
	c->rd_at = sh->now + LINGER_NS;
	io_read_deadline(sh, c, c->rd_at);
}

/* ---- answers ---- */

/* enum tlhttp_conn for an answer to req: keep-alive is HTTP/1.1's default. */
static int conn_line(const struct tlhttp_req *req, int close)
{
	if (close)
		return TLHTTP_CONN_CLOSE;
	return req->minor == 0 ? TLHTTP_CONN_KEEP_ALIVE : TLHTTP_CONN_NONE;
}

/* An answer with a short text body naming the status (or none for HEAD). */
static void answer_status(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
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
		conn_close(sh, c);
		return;
	}
	c->olen += (uint32_t)n;
	if (!head_only)
		emit(c, body, (uint32_t)bl);
	answered(sh, c, req, status, head_only ? 0 : (uint64_t)bl);
}

static void body_send(struct tlhttp_shard *sh, struct conn *c)
{
	if (sh->tls) {
		/* no splice through TLS: read a piece, write it as one record */
		c->piece = c->bleft < PIECE_TLS ? (uint32_t)c->bleft : PIECE_TLS;
		if (pread(c->fd, c->body, c->piece, (off_t)c->boff) != (ssize_t)c->piece ||
		    tl_tls_write(sh->tls, c->tid, c->body, c->piece, tok(TK_FS, c->idx), &c->fs_op) < 0) {
			conn_close(sh, c);
			return;
		}
		c->fs_pending = 1;
		return;
	}
	c->piece = c->bleft < PIECE ? (uint32_t)c->bleft : PIECE;
	if (tl_sendfile(sh->loop, c->fd, c->boff, c->piece, c->h, tok(TK_FS, c->idx), &c->fs_op) < 0) {
		conn_close(sh, c);
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
	flush(sh, c);
	if (c->state == C_OPEN)
		body_send(sh, c);
}

static void conn_run(struct tlhttp_shard *sh, struct conn *c);

/* A piece is sent: the next one, or the next request. */
static void body_step(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	if (cp->result < 0 || (uint64_t)cp->result < c->piece) {
		/* The stream failed, or the file shrank under us: the
		 * promised length cannot be kept, so the connection ends. */
		conn_close(sh, c);
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
		linger(sh, c);
	else
		conn_run(sh, c);
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
		answer_status(sh, c, req, tlhttp_path_status(n), connection, 0, 0);
		return;
	}
	rc = tlhttp_fcache_get(sh->fc, name, sh->now, &f, &ref);
	if (rc < 0) {
		answer_status(sh, c, req, tlhttp_path_status(rc), connection, 0, 0);
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
		answer_status(sh, c, req, 412, connection, 0, 0);
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
			answer_status(sh, c, req, 416, connection, f.size, TLHTTP_CRANGE_UNSATISFIED);
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
		answer_status(sh, c, req, 500, TLHTTP_CONN_CLOSE, 0, 0);
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
			answer_status(sh, c, req, 500, TLHTTP_CONN_CLOSE, 0, 0);
			c->after_close = 1;
			return;
		}
		c->olen += (uint32_t)n + (uint32_t)len;
		answered(sh, c, req, r.status, len);
		return;
	}
	c->olen += (uint32_t)n;
	answered(sh, c, req, r.status, head_only ? 0 : len);
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
		answer_status(sh, c, req, 412, connection, 0, 0);
		return 1;
	}
	if (pc != 304)
		return 0;
	struct tlhttp_resp r = { .status = 304, .date = &sh->date, .server = server_name,
				 .content_length = -1, .connection = (uint8_t)connection };
	int n = tlhttp_head_format(c->out + c->olen, sh->out_cap - c->olen, &r);
	if (n < 0) { /* cannot happen: room was made and every field is known */
		conn_close(sh, c);
		return 1;
	}
	c->olen += (uint32_t)n;
	answered(sh, c, req, 304, 0);
	return 1;
}

/* The answer to a whole, accepted head. */
static void answer(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req)
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
			emit_ref(sh, c, sh->srv->o->body, bl);
		}
		answered(sh, c, req, 200, req->method == TLHTTP_HEAD ? 0 : bl);
	}
	if (close || c->after_close) {
		if (c->blocked == B_BODY)
			c->after_close = 1;
		else
			linger(sh, c);
	}
}

/* ---- input ---- */

/*
 * Parse and answer every whole request that has arrived, in order, until
 * the input runs out, the connection ends, or it must wait (a body being
 * sent, or no room left for answers).
 */
static void conn_run(struct tlhttp_shard *sh, struct conn *c)
{
	while (c->state == C_OPEN && !c->blocked) {
		const char *buf;
		uint32_t len;
		struct lent *e = c->lq_n ? &c->lq[c->lq_first] : NULL;
		int r;

		if (sh->out_cap - c->olen < RESP_ROOM) {
			flush(sh, c);
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
					conn_close(sh, c);
					return;
				}
				c->borrowed = 0; /* the whole lease is the head's now */
			} else {
				if (len > sh->head_cap) { /* as above */
					conn_close(sh, c);
					return;
				}
				memcpy(c->head, buf, len);
				c->hlen = len;
			}
			lq_pop(sh, c);
			continue;
		}
		c->parsing = 0;
		c->fresh = 0;
		if (r < 0) {
			answer_status(sh, c, &c->req, c->req.status, TLHTTP_CONN_CLOSE, 0, 0);
			linger(sh, c);
			return;
		}
		answer(sh, c, &c->req);
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
			lq_pop(sh, c);
	}
	if (c->state == C_OPEN && c->blocked != B_BODY)
		flush(sh, c);
}

/* After the peer's EOF: close once nothing is left to answer or send. */
static void eof_check(struct tlhttp_shard *sh, struct conn *c)
{
	if (c->eof && c->state == C_OPEN && !c->blocked && !c->writes &&
	    (!c->lq_n || c->hlen))
		conn_close(sh, c);
}

static void on_read(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	if (cp->result > 0 && (cp->flags & TL_F_LEASE)) {
		if (c->state != C_OPEN || c->lq_n == LQ) {
			io_release(sh, cp->u.read.lease.id);
			/* More than LQ while waiting: past the lease cap by
			 * more than a read in flight can be; not a client to
			 * keep. */
			if (c->state == C_OPEN)
				conn_close(sh, c);
		} else {
			struct lent *e = &c->lq[(c->lq_first + c->lq_n) % LQ];
			e->data = cp->u.read.lease.data;
			e->id = cp->u.read.lease.id;
			e->len = (uint32_t)cp->result;
			e->off = 0;
			c->lq_n++;
			conn_run(sh, c);
		}
	}
	if (cp->flags & TL_F_TERMINAL) {
		c->reading = 0;
		if (cp->result == 0 && !(cp->flags & TL_F_STOPPED)) {
			c->eof = 1;
			if (c->state == C_LINGER && c->shut_done)
				conn_close(sh, c);
			eof_check(sh, c);
		} else if (cp->result == -ETIMEDOUT && c->state == C_OPEN && c->hlen && c->rd_at &&
			   sh->now >= c->rd_at) {
			/* The header deadline: part of a head came and the
			 * rest did not. (Nothing is being written: the
			 * deadline is armed only then.) */
			struct tlhttp_req none;
			tlhttp_req_init(&none, NULL);
			c->rd_at = 0;
			answer_status(sh, c, &none, 408, TLHTTP_CONN_CLOSE, 0, 0);
			linger(sh, c);
		} else if (c->state == C_OPEN || c->state == C_LINGER) {
			/* An error, the idle deadline, the header deadline of
			 * a connection that sent nothing, or the linger's. */
			conn_close(sh, c);
		}
	}
	conn_deadline(sh, c);
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
		conn_close(sh, c);
		return;
	}
	if (c->state == C_OPEN && !c->writes) {
		if (c->blocked == B_OUT) {
			c->blocked = B_NONE;
			conn_run(sh, c);
		}
		eof_check(sh, c);
	}
	conn_deadline(sh, c);
}

/* The connection is ready for requests: read them. */
static void conn_reading(struct tlhttp_shard *sh, struct conn *c)
{
	if (io_read_start(sh, c) < 0) {
		conn_close(sh, c);
		return;
	}
	c->reading = 1;
	conn_deadline(sh, c);
}

static void on_handshake(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp)
{
	c->handshake = 0;
	if (c->state != C_OPEN)
		return;
	if (cp->result < 0) {
		sh->tot->tls_failed++;
		tl_shard_counter_add(sh->s, sh->srv->st_tls_failed, 1);
		conn_close(sh, c);
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
		conn_close(sh, c);
		return;
	}
	if (sh->tls) {
		/* the handshake first, under the header deadline */
		tl_op op;
		if (tl_tls_server(sh->tls, sh->srv->tls, h, tok(TK_CLOSE, c->idx), &c->tid) < 0) {
			conn_close(sh, c);
			return;
		}
		if (tl_tls_handshake(sh->tls, c->tid, sh->now + sh->srv->o->header_timeout_ns,
				     tok(TK_HS, c->idx), &op) < 0) {
			conn_close(sh, c);
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
			conn_free(sh, c);
		return;
	}
	body_step(sh, c, cp);
	conn_deadline(sh, c);
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
			conn_close(sh, c);
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
		refresh(sh);
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
				conn_close(sh, c);
		}
		break;
	case TK_CLOSE:
		if (c) {
			c->closed = 1;
			if (!c->fs_pending)
				conn_free(sh, c);
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
			tlhttp_fcache_sweep(sh->fc, sh->now);
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
	refresh(sh);
	if (sh->sec == INT64_MIN)
		return -EINVAL; /* a wall clock outside years 1..9999 */
	if ((r = build_templates(sh)) < 0)
		return r;
	tl_shard_set_data(s, sh);

	/* Each shard owns a listener on the same address; the kernel spreads
	 * connections across them (SO_REUSEPORT). */
	if ((r = tl_tcp_listen(sh->loop, &o->addr, &lo, &sh->listener)) < 0 ||
	    (r = tl_handle_caps(sh->loop, sh->listener, LEASE_CAP, 0)) < 0 ||
	    (r = tl_accept_start(sh->loop, sh->listener, tok(TK_ACCEPT, 0), &op)) < 0)
		return r;
	/* The open-file cache closes idle descriptors once a second. */
	if (sh->fc && (r = tl_timer_start(sh->loop, tl_now(sh->loop) + 1000000000ull, 1000000000ull,
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
			conn_close(sh, &sh->conns[i]);
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
