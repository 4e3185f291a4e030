/* tools/tlhttp/server_int.h: what tlhttp's server files share (server.c, server_io.c, server_answer.c): the shard and connection structures, their sizes and tokens, and the functions one file calls in another; seen only by them. */
#ifndef TLHTTP_SERVER_INT_H
#define TLHTTP_SERVER_INT_H

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

/* n bytes the caller made room for (RESP_ROOM). */
static inline void emit(struct conn *c, const void *p, uint32_t n)
{
	memcpy(c->out + c->olen, p, n);
	c->olen += n;
}


/* ---- server_io.c ---- */
void tlhttp__answered(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
		      int status, uint64_t bytes);
int tlhttp__build_templates(struct tlhttp_shard *sh);
void tlhttp__conn_close(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__conn_deadline(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__conn_free(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__emit_ref(struct tlhttp_shard *sh, struct conn *c, const void *p, uint32_t n);
void tlhttp__flush(struct tlhttp_shard *sh, struct conn *c);
int tlhttp__io_read_start(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__io_release(struct tlhttp_shard *sh, uint32_t lease);
void tlhttp__linger(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__lq_pop(struct tlhttp_shard *sh, struct conn *c);
void tlhttp__refresh(struct tlhttp_shard *sh);

/* ---- server_answer.c ---- */
void tlhttp__answer(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req);
void tlhttp__answer_status(struct tlhttp_shard *sh, struct conn *c, const struct tlhttp_req *req,
			   int status, int connection, uint64_t range_size, int crange);
void tlhttp__body_step(struct tlhttp_shard *sh, struct conn *c, const tl_completion *cp);

/* ---- server.c ---- */
void tlhttp__conn_run(struct tlhttp_shard *sh, struct conn *c);

#endif
