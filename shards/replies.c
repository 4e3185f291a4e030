/* shards/replies.c: a connection's replies in request order, made here or on the shard that owns their data (turnloop/replies.h), on the public API only (the mesh's batches, tl_server's connections). */
#include <errno.h>
#include <string.h>

#include "turnloop/replies.h"

static tl_reply *rec(const tl_replies *q, uint32_t i)
{
	return (tl_reply *)(void *)((uint8_t *)q->cfg.recs + (size_t)(i & (q->cfg.nrecs - 1)) * q->cfg.rec_size);
}

/* A batch on the shard that owns its records' data: each record's reply. */
static int64_t run_batch(tl_shard *s, void *arg)
{
	for (tl_reply *r = arg; r; r = (tl_reply *)(void *)r->link.next)
		r->result = r->q->cfg.run(s, r);
	return 0;
}

int tl_replies_init(tl_replies *q, tl_conn *c, tl_shard *s, const tl_replies_config *cfg)
{
	if (!q || !c || !s || !cfg || !cfg->recs || !cfg->chains || !cfg->run || !cfg->nrecs ||
	    cfg->nrecs > (1u << 16) || (cfg->nrecs & (cfg->nrecs - 1)) || cfg->rec_size < sizeof(tl_reply) ||
	    cfg->rec_size % _Alignof(tl_reply) || !cfg->nchains)
		return -EINVAL;
	memset(q, 0, sizeof *q);
	q->c = c;
	q->s = s;
	q->cfg = *cfg;
	return tl_mesh_batcher_init(&q->b, cfg->chains, cfg->nchains, run_batch, TL_REPLIES_TOKEN);
}

void tl_replies_fini(tl_replies *q, tl_shard *s)
{
	for (; q && q->head != q->tail; q->head++) {
		tl_reply *r = rec(q, q->head);
		if (r->data != r->out) tl_shard_free(s, r->data);
		r->data = NULL;
	}
}

tl_reply *tl_replies_add(tl_replies *q)
{
	tl_reply *r;
	if (q->tail - q->head >= q->cfg.nrecs) return NULL;
	r = rec(q, q->tail++);
	r->q = q;
	r->data = NULL;
	r->len = 0;
	r->done = 1;
	r->keep = 0;
	r->flags = 0;
	r->result = 0;
	return r;
}

uint8_t *tl_reply_buf(tl_shard *s, tl_reply *r, uint32_t n)
{
	uint8_t *p = n <= TL_REPLY_INLINE ? r->out : tl_shard_alloc(s, n);
	if (p) r->data = p, r->len = n;
	return p;
}

int tl_replies_send(tl_replies *q, tl_reply *r, uint32_t target, int keep)
{
	int rc = tl_shard_batch_add(q->s, &q->b, target, &r->link);
	if (rc < 0) return (int)(r->result = rc); /* done, no bytes: cfg.out tells the client */
	/* The batch goes at the pass's end: nothing reads these before then. */
	r->done = 0;
	r->keep = keep != 0;
	q->kept += r->keep;
	if (!q->away++) tl_conn_hold(q->c); /* one hold while records are away */
	return 0;
}

void tl_replies_wait(tl_replies *q, tl_reply *r)
{
	r->done = 0;
	if (!q->away++) tl_conn_hold(q->c);
}

/* n records are back: on_ready sees them made and the away count without
 * them; the hold goes after it (on_ready may take a new one). */
static void back(tl_replies *q, uint32_t n)
{
	int last = !(q->away -= n);
	tl_conn_ready(q->c);
	if (last) tl_conn_release(q->c); /* may free c */
}

void tl_replies_made(tl_replies *q, tl_reply *r)
{
	r->done = 1;
	back(q, 1);
}

/* A reply with no run of its length free (longer than the ring, or the
 * free bytes in two pieces): what the writer takes of the rest now. 1 when
 * all of it is in. */
static int piece(tl_replies *q, tl_wbuf *w, const tl_reply *r)
{
	uint32_t k = tl_wbuf_room(w), left = r->len - q->off;
	if (k > left) k = left;
	if (k && tl_wbuf_append(w, r->data + q->off, k) < 0) return 0;
	return (q->off += k) == r->len;
}

int tl_replies_flush(tl_replies *q)
{
	tl_wbuf *w = &q->c->wr;
	uint8_t *p = NULL;
	uint32_t run = 0, used = 0, n;
	for (int rc; q->head != q->tail; q->head++) {
		tl_reply *r = rec(q, q->head);
		if (!r->done) break;
		if ((n = r->data ? r->len - q->off : q->cfg.out_max) > run - used || !p) { /* another run */
			tl_wbuf_commit(w, used);
			used = run = 0;
			if ((rc = tl_wbuf_reserve(w, n ? n : 1, &p)) >= 0) run = (uint32_t)rc;
			else p = NULL;
		}
		if (!p) {
			if (!r->data || !piece(q, w, r)) break; /* the rest after a write */
		} else if (r->data) {
			used = (uint32_t)((uint8_t *)memcpy(p + used, r->data + q->off, n) - p) + n;
		} else if (q->cfg.out) {
			used += q->cfg.out(r, p + used, q->cfg.arg);
		}
		q->off = 0;
		if (r->data != r->out) tl_shard_free(q->s, r->data); /* on the shard that made it */
		r->data = NULL;
	}
	tl_wbuf_commit(w, used);
	return q->head == q->tail;
}

int tl_replies_completion(const tl_completion *x)
{
	tl_reply *r;
	tl_replies *q;
	uint32_t n = 0;
	if (!x || x->kind != TL_K_MESH || !(x->aux & TL_MESH_BATCH) || x->token != TL_REPLIES_TOKEN ||
	    !(r = x->u.mesh.arg))
		return 0;
	for (q = r->q; r; r = (tl_reply *)(void *)r->link.next, n++) {
		if (x->result < 0) r->result = x->result; /* refused by the stop: the run never saw it */
		r->done = 1;
		q->kept -= r->keep;
		r->keep = 0;
	}
	back(q, n);
	return 1;
}
