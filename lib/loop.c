/* lib/loop.c: the loop core: tables, ids, exactly-once completions, cancel/close, timers, the turn. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include "internal.h"

#define MAX_LIMIT (1u << 24)

void tl_config_init(tl_config *c)
{
	memset(c, 0, sizeof *c);
	c->max_handles = 4096;
	c->max_ops = 8192;
	c->events_per_turn = 256;
	c->post_capacity = 1024;
	c->pooled_buffers = 256;
	c->pooled_buffer_size = 16384;
	c->max_undelivered = 256;
	c->room_waiters = 16;
	c->driver = TL_DRIVER_DEFAULT;
	c->sim_seed = 1;
}

static int valid_config(const tl_config *c)
{
	if (!c->max_handles || c->max_handles >= MAX_LIMIT)
		return 0;
	if (!c->max_ops || c->max_ops >= MAX_LIMIT)
		return 0;
	if (!c->events_per_turn || c->events_per_turn > 65536)
		return 0;
	if (!c->post_capacity || c->post_capacity > (1u << 20))
		return 0;
	if (!c->pooled_buffers || c->pooled_buffers > 32768)
		return 0;
	if (!c->pooled_buffer_size || c->pooled_buffer_size > (16u << 20))
		return 0;
	if (!c->max_undelivered || c->max_undelivered > (1u << 20))
		return 0;
	if (!c->room_waiters || c->room_waiters > 64)
		return 0;
	if (c->driver < TL_DRIVER_DEFAULT || c->driver > TL_DRIVER_SIM)
		return 0;
	/* The pooled buffers must fit one allocation comfortably. */
	if ((uint64_t)c->pooled_buffers * c->pooled_buffer_size > (1ull << 32))
		return 0;
	return 1;
}

/* Loop identities are 24 bits; 0 is never used so that no id is 0. */
static atomic_uint next_owner = 1;

static uint32_t new_owner(void)
{
	for (;;) {
		uint32_t o = atomic_fetch_add(&next_owner, 1) & 0xffffffu;
		if (o)
			return o;
	}
}

static void free_tables(tl_loop *l)
{
	free(l->h);
	free(l->o);
	free(l->q);
	free(l->qm);
	free(l->lease_mem);
	free(l->lease_free);
	free(l->lease_out);
	tl__heap_free(&l->timers);
	tl__heap_free(&l->deadlines);
}

int tl_loop_new(tl_loop **out, const tl_config *cfg)
{
	tl_config defaults;
	if (!out)
		return -EINVAL;
	if (!cfg) {
		tl_config_init(&defaults);
		cfg = &defaults;
	}
	if (!valid_config(cfg))
		return -EINVAL;
	tl_loop *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->cfg = *cfg;
	l->owner = new_owner();
	l->thread = pthread_self();
	l->h = calloc(cfg->max_handles, sizeof *l->h);
	l->o = calloc(cfg->max_ops, sizeof *l->o);
	/* Every terminal completion and every Closed has a reserved place, and
	 * each nonterminal source has its own budget: the queue never fills. */
	l->qcap = cfg->max_ops + cfg->max_handles + TL_CLS_N * cfg->events_per_turn;
	l->q = malloc((size_t)l->qcap * sizeof *l->q);
	l->qm = malloc((size_t)l->qcap * sizeof *l->qm);
	l->lease_size = cfg->pooled_buffer_size;
	l->lease_count = cfg->pooled_buffers;
	l->lease_mem = aligned_alloc(4096, (((size_t)l->lease_size * l->lease_count) + 4095) &
						   ~(size_t)4095);
	l->lease_free = malloc(l->lease_count * sizeof *l->lease_free);
	l->lease_out = calloc(l->lease_count, 1);
	int r = -ENOMEM;
	if (!l->h || !l->o || !l->q || !l->qm || !l->lease_mem || !l->lease_free || !l->lease_out ||
	    tl__heap_init(&l->timers, cfg->max_handles) < 0 ||
	    tl__heap_init(&l->deadlines, cfg->max_ops) < 0)
		goto fail;
	for (uint32_t i = 0; i < cfg->max_handles; i++) {
		l->h[i].idx = i;
		l->h[i].gen = 1;
		l->h[i].next_free = i + 1 < cfg->max_handles ? i + 1 : TL_NIL;
	}
	for (uint32_t i = 0; i < cfg->max_ops; i++) {
		l->o[i].idx = i;
		l->o[i].gen = 1;
		l->o[i].next = i + 1 < cfg->max_ops ? i + 1 : TL_NIL;
	}
	/* Hand out low ids first: the stack pops from the end. */
	for (uint32_t i = 0; i < l->lease_count; i++)
		l->lease_free[i] = l->lease_count - 1 - i;
	l->lease_nfree = l->lease_count;
	for (int i = 0; i < 64; i++)
		l->room_ops[i] = TL_NIL;
	r = tl__poster_new(cfg->post_capacity, cfg->room_waiters, &l->poster);
	if (r < 0)
		goto fail;
	int forced = 0, uring_err = 0;
	r = tl__driver_pick(cfg, &l->dv, &forced);
	if (r < 0)
		goto fail_poster;
	r = l->dv->init(l, cfg, l->poster->efd, &l->d);
	if (r < 0 && !forced && l->dv == &tl__driver_uring) {
		/* io_uring refused at setup time (seccomp, sysctl, memlock, an
		 * old kernel): the default choice falls back to epoll. */
		uring_err = r;
		l->dv = &tl__driver_epoll;
		r = l->dv->init(l, cfg, l->poster->efd, &l->d);
	}
	tl__driver_note(l->dv, forced, uring_err, r);
	/* A forced io_uring that cannot start is "unavailable" to the caller;
	 * the note above gave the OS's reason. */
	if (r < 0 && forced && l->dv == &tl__driver_uring)
		r = -ENOTSUP;
	if (r < 0)
		goto fail_poster;
	*out = l;
	return 0;
fail_poster:
	tl_poster_put(l->poster);
fail:
	free_tables(l);
	free(l);
	return r;
}

uint64_t tl_now(const tl_loop *l) { return l->dv->now(l->d); }
const char *tl_loop_driver(const tl_loop *l) { return l->dv->name; }
uint32_t tl_loop_caps(const tl_loop *l) { return l->dv->caps & 0xffffu; }
int tl_alive(const tl_loop *l) { return l->refs != 0; }

/* ---- handles and ops ---- */

static struct tl_hslot *handle_get(tl_loop *l, tl_handle id)
{
	uint32_t s = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || s >= l->cfg.max_handles)
		return NULL;
	struct tl_hslot *h = &l->h[s];
	if (h->type == TL_H_FREE || h->gen != tl__id_gen(id.v))
		return NULL;
	return h;
}

struct tl_opslot *tl__op_lookup(tl_loop *l, tl_op id)
{
	uint32_t s = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || s >= l->cfg.max_ops)
		return NULL;
	struct tl_opslot *o = &l->o[s];
	if (!(o->flags & TL_OPF_LIVE) || o->gen != tl__id_gen(id.v))
		return NULL;
	return o;
}

struct tl_opslot *tl__drv_op(tl_loop *l, uint32_t idx) { return &l->o[idx]; }
struct tl_hslot *tl__drv_handle(tl_loop *l, uint32_t idx) { return &l->h[idx]; }

/* Weight of a handle itself in alive(): sockets always, timers only while
 * closing (an idle timer handle does not keep the loop alive). */
static inline uint32_t hweight(const struct tl_hslot *h)
{
	return h->type != TL_H_TIMER || (h->flags & TL_HF_CLOSING);
}

static struct tl_hslot *handle_new(tl_loop *l, uint8_t type)
{
	if (l->hfree == TL_NIL || l->nhandles == l->cfg.max_handles)
		return NULL;
	struct tl_hslot *h = &l->h[l->hfree];
	l->hfree = h->next_free;
	l->nhandles++;
	h->type = type;
	h->flags = TL_HF_REF;
	h->fd = -1;
	h->pending = 0;
	h->head = h->tail = TL_NIL;
	h->close_token = 0;
	memset(&h->u, 0, sizeof h->u);
	l->refs += hweight(h);
	return h;
}

static void handle_free(tl_loop *l, struct tl_hslot *h)
{
	if (h->flags & TL_HF_REF)
		l->refs -= hweight(h);
	h->type = TL_H_FREE;
	h->flags = 0;
	/* Skip generation 0 so that no id is ever 0. */
	h->gen = (uint16_t)(h->gen + 1) ? (uint16_t)(h->gen + 1) : 1;
	h->next_free = l->hfree;
	l->hfree = h->idx;
	l->nhandles--;
}

int tl__op_new(tl_loop *l, struct tl_hslot *h, uint8_t code, uint8_t kind, uint64_t token,
	       struct tl_opslot **out)
{
	if (l->outstanding == l->cfg.max_ops || l->ofree == TL_NIL)
		return -ENOBUFS;
	struct tl_opslot *o = &l->o[l->ofree];
	l->ofree = o->next;
	l->nops++;
	l->outstanding++;
	o->code = code;
	o->kind = kind;
	o->flags = TL_OPF_LIVE;
	o->token = token;
	o->hidx = h ? h->idx : TL_NIL;
	o->next = TL_NIL;
	o->prev = TL_NIL;
	if (h) {
		o->prev = h->tail;
		if (h->tail != TL_NIL)
			l->o[h->tail].next = o->idx;
		else
			h->head = o->idx;
		h->tail = o->idx;
		h->pending++;
		if (h->flags & TL_HF_REF)
			l->refs++;
	} else {
		l->refs++;
	}
	*out = o;
	return 0;
}

/* Take an op out of the active table (its terminal is queued or it was
 * refused). The outstanding credit stays until delivery. */
static void op_retire(tl_loop *l, struct tl_opslot *o)
{
	if (o->flags & TL_OPF_DEADLINE)
		tl__heap_remove(&l->deadlines, o->idx);
	if (o->flags & TL_OPF_NATIVE)
		l->native_pending--;
	if (o->hidx != TL_NIL) {
		struct tl_hslot *h = &l->h[o->hidx];
		if (o->prev != TL_NIL)
			l->o[o->prev].next = o->next;
		else
			h->head = o->next;
		if (o->next != TL_NIL)
			l->o[o->next].prev = o->prev;
		else
			h->tail = o->prev;
		h->pending--;
		if (h->flags & TL_HF_REF)
			l->refs--;
		if (h->type == TL_H_TIMER)
			h->u.t.op = TL_NIL;
	} else {
		l->refs--;
	}
	/* The slot stays owed until the terminal is delivered, so that the id
	 * answers -EALREADY (cancel asked) or -ENOENT (finished) the same way on
	 * every driver, whether it acknowledged at once or later. */
	o->flags = TL_OPF_OWED | (o->flags & TL_OPF_CANCEL);
}

/* Give the slot back once its terminal was handed out (or never owed). */
static void op_free(tl_loop *l, struct tl_opslot *o)
{
	o->flags = 0;
	o->gen = (uint16_t)(o->gen + 1) ? (uint16_t)(o->gen + 1) : 1;
	o->next = l->ofree;
	l->ofree = o->idx;
	l->nops--;
}

/* Undo a submission the driver refused: nothing happened, nothing is owed. */
static void op_refuse(tl_loop *l, struct tl_opslot *o)
{
	/* op_retire gives back the native_pending count submit() took. */
	op_retire(l, o);
	op_free(l, o);
	l->outstanding--;
}

void tl__op_refuse(tl_loop *l, struct tl_opslot *o)
{
	op_refuse(l, o);
}

tl_completion *tl__enqueue(tl_loop *l, int cls, int referenced)
{
	uint32_t i = l->qhead + l->qlen;
	if (i >= l->qcap)
		i -= l->qcap;
	l->qlen++;
	l->buffered[cls]++;
	l->refs += (uint64_t)referenced;
	l->qm[i] = (struct tl_qmeta){.cls = (uint8_t)cls, .referenced = (uint8_t)referenced};
	tl_completion *c = &l->q[i];
	c->aux = 0;
	return c;
}

static inline struct tl_qmeta *qmeta_of(tl_loop *l, tl_completion *c)
{
	return &l->qm[c - l->q];
}

static void maybe_closed(tl_loop *l, struct tl_hslot *h)
{
	if (h->pending || !(h->flags & TL_HF_CLOSING) || (h->flags & TL_HF_CLOSED_QUEUED))
		return;
	h->flags |= TL_HF_CLOSED_QUEUED;
	tl_completion *c = tl__enqueue(l, TL_CLS_NONE, 0);
	struct tl_qmeta *m = qmeta_of(l, c);
	m->closed = 1;
	m->hidx = h->idx;
	c->token = h->close_token;
	c->op = TL_OP_NONE;
	c->handle = tl__h_id(l, h);
	c->result = 0;
	c->kind = TL_K_CLOSED;
	c->flags = TL_F_TERMINAL;
}

static inline void lease_fill(tl_loop *l, tl_lease *ls, uint32_t id)
{
	ls->data = l->lease_mem + (size_t)id * l->lease_size;
	ls->id = id;
	ls->cap = l->lease_size;
}

/* Queue one event of an op, applying the cancellation rules: after a cancel
 * request, nonterminal events are dropped and the terminal one reports the
 * cancellation instead of what the driver saw. */
static tl_completion *op_event(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags,
			       uint32_t lease)
{
	int terminal = flags & TL_F_TERMINAL;
	if (o->flags & TL_OPF_CANCEL) {
		if (lease != TL_NO_LEASE)
			tl__drv_lease_drop(l, lease);
		if (!terminal)
			return NULL;
		lease = TL_NO_LEASE;
		flags = TL_F_TERMINAL;
		if (o->flags & TL_OPF_TIMEDOUT)
			res = -ETIMEDOUT;
		else if (o->flags & TL_OPF_STOP) {
			res = 0;
			flags |= TL_F_STOPPED;
		} else
			res = -ECANCELED;
	}
	struct tl_hslot *h = o->hidx != TL_NIL ? &l->h[o->hidx] : NULL;
	int referenced = terminal && (!h || (h->flags & TL_HF_REF));
	int cls = TL_CLS_NONE;
	if (!terminal)
		cls = o->code == TL_OP_TIMER ? TL_CLS_TIMER : TL_CLS_NATIVE;
	tl_completion *c = tl__enqueue(l, cls, referenced);
	struct tl_qmeta *m = qmeta_of(l, c);
	m->op_terminal = (uint8_t)(terminal != 0);
	m->hidx = o->hidx;
	m->oidx = o->idx;
	c->token = o->token;
	c->op = tl__op_id(l, o);
	c->handle = h ? tl__h_id(l, h) : TL_HANDLE_NONE;
	c->result = res;
	c->kind = o->kind;
	c->flags = (uint16_t)(flags & (TL_F_TERMINAL | TL_F_STOPPED | TL_F_EOF));
	if (lease != TL_NO_LEASE) {
		c->flags |= TL_F_LEASE;
		if (o->code == TL_OP_RECV) {
			lease_fill(l, &c->u.recv.lease, lease);
			c->u.recv.from = o->u.dg.addr;
		} else {
			lease_fill(l, &c->u.read.lease, lease);
		}
	} else if (o->code == TL_OP_RECV) {
		c->u.recv.lease = (tl_lease){0};
		c->u.recv.from = o->u.dg.addr;
	}
	l->st.completions[o->kind]++;
	if (terminal) {
		op_retire(l, o);
		if (h)
			maybe_closed(l, h);
	}
	return c;
}

tl_completion *tl__op_finish(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags)
{
	return op_event(l, o, res, flags, TL_NO_LEASE);
}

void tl__drv_event(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags, uint32_t lease)
{
	if (tl_unlikely(o->code == TL_OP_POOL) && l->pool_native_retry &&
	    l->pool_native_retry(l, o, res))
		return;
	tl_completion *c = op_event(l, o, res, flags, lease);
	/* A native file request: its payload (aux, value, stat copy) is the
	 * pool module's, exactly as for a request a worker ran. op_event kept
	 * o->u.pool.job and the cancel flag. */
	if (tl_unlikely(o->code == TL_OP_POOL) && c && l->pool_native)
		l->pool_native(l, o, c, res);
}

uint32_t tl__drv_room(const tl_loop *l)
{
	return l->cfg.events_per_turn - l->buffered[TL_CLS_NATIVE];
}

int tl__drv_accept(tl_loop *l, struct tl_opslot *o, int fd, const tl_addr *peer, int terminal)
{
	uint32_t tf = terminal ? TL_F_TERMINAL : 0;
	if (o->flags & TL_OPF_CANCEL) {
		/* The connection raced with the cancellation: refuse it. */
		if (terminal)
			op_event(l, o, -ECANCELED, tf, TL_NO_LEASE);
		return -ECANCELED;
	}
	struct tl_hslot *lh = &l->h[o->hidx];
	struct tl_hslot *h = handle_new(l, TL_H_STREAM);
	if (!h) {
		op_event(l, o, -ENOBUFS, tf, TL_NO_LEASE);
		return -ENOBUFS;
	}
	h->fd = fd;
	h->flags |= lh->flags & (TL_HF_UNIX | TL_HF_V6);
	int r = l->dv->attach(l->d, h);
	if (r < 0) {
		handle_free(l, h);
		op_event(l, o, r, tf, TL_NO_LEASE);
		return r;
	}
	tl_completion *c = op_event(l, o, 0, tf, TL_NO_LEASE);
	c->u.accept.conn = tl__h_id(l, h);
	if (peer)
		c->u.accept.peer = *peer;
	else
		memset(&c->u.accept.peer, 0, sizeof c->u.accept.peer);
	return 0;
}

/* ---- leases ---- */

uint8_t *tl__drv_lease_base(const tl_loop *l, uint32_t *size, uint32_t *count)
{
	*size = l->lease_size;
	*count = l->lease_count;
	return l->lease_mem;
}

uint32_t tl__drv_lease_take(tl_loop *l)
{
	if (!l->lease_nfree)
		return TL_NO_LEASE;
	uint32_t id = l->lease_free[--l->lease_nfree];
	l->lease_nout += !l->lease_out[id];
	l->lease_out[id] = 1;
	return id;
}

void tl__drv_lease_mark(tl_loop *l, uint32_t id)
{
	l->lease_nout += !l->lease_out[id];
	l->lease_out[id] = 1;
}

static void lease_back(tl_loop *l, uint32_t id)
{
	l->lease_nout -= l->lease_out[id];
	l->lease_out[id] = 0;
	if (!(l->dv->caps & TL_CAP_KBUF))
		l->lease_free[l->lease_nfree++] = id;
	if (l->dv->lease_returned)
		l->dv->lease_returned(l->d, id);
}

void tl__drv_lease_drop(tl_loop *l, uint32_t id)
{
	lease_back(l, id);
}

int tl_lease_release(tl_loop *l, uint32_t id)
{
	if (id >= l->lease_count || !l->lease_out[id])
		return -ENOENT;
	lease_back(l, id);
	return 0;
}

/* ---- cancel, stop, close ---- */

static int cancel_op(tl_loop *l, struct tl_opslot *o, int stop)
{
	if (o->flags & TL_OPF_CANCEL)
		return -EALREADY;
	uint16_t add = TL_OPF_CANCEL | (stop ? TL_OPF_STOP : 0);
	switch (o->code) {
	case TL_OP_TIMER:
		tl__heap_remove(&l->timers, o->hidx);
		o->flags |= add;
		op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	case TL_OP_ROOM:
		o->flags |= add;
		if (tl__poster_del_waiter(o->u.room.target, l->poster, o->u.room.bit)) {
			l->room_ops[o->u.room.bit] = TL_NIL;
			l->room_used &= ~((uint64_t)1 << o->u.room.bit);
			tl_poster_put(o->u.room.target);
			op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		}
		/* else the room bit is already on its way and finishes the op. */
		return 0;
	case TL_OP_POOL:
		o->flags |= add;
		if (l->pool_cancel)
			l->pool_cancel(l, o);
		return 0;
	default:
		break;
	}
	/* Set the flags first: a driver may acknowledge synchronously. */
	o->flags |= add;
	uint16_t had_deadline = o->flags & TL_OPF_DEADLINE;
	if (had_deadline) {
		o->flags &= (uint16_t)~TL_OPF_DEADLINE;
		tl__heap_remove(&l->deadlines, o->idx);
	}
	int r = l->dv->cancel(l->d, &l->h[o->hidx], o);
	if (r < 0 && (o->flags & TL_OPF_LIVE)) {
		/* Nothing changed: the op keeps its deadline (contract 2.4). */
		o->flags &= (uint16_t)~add;
		if (had_deadline) {
			o->flags |= TL_OPF_DEADLINE;
			tl__heap_push(&l->deadlines, o->idx, o->u.conn.deadline, 0);
		}
	}
	return r < 0 ? r : 0;
}

/* Cancel every op of a closing handle that is not cancelled yet. A driver
 * that cannot take a cancellation now (no submission slot) gets asked again
 * at the start of the next turn: Closed must come in the end. */
static void close_ops(tl_loop *l, struct tl_hslot *h)
{
	for (uint32_t i = h->head; i != TL_NIL;) {
		uint32_t next = l->o[i].next;
		if (!(l->o[i].flags & TL_OPF_CANCEL) && cancel_op(l, &l->o[i], 0) < 0)
			l->close_retry = 1;
		i = next;
	}
}

static void retry_closes(tl_loop *l)
{
	l->close_retry = 0;
	for (uint32_t i = 0; i < l->cfg.max_handles; i++) {
		struct tl_hslot *h = &l->h[i];
		if (h->type != TL_H_FREE && (h->flags & TL_HF_CLOSING) && h->pending)
			close_ops(l, h);
	}
}

/* Cancel or stop by id. An op whose terminal is queued but not yet
 * delivered answers -EALREADY if its cancellation was asked, else -ENOENT. */
static int cancel_id(tl_loop *l, tl_op id, int stop)
{
	uint32_t s = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || s >= l->cfg.max_ops)
		return -ENOENT;
	struct tl_opslot *o = &l->o[s];
	if (o->gen != tl__id_gen(id.v))
		return -ENOENT;
	if (o->flags & TL_OPF_LIVE)
		return cancel_op(l, o, stop);
	if (o->flags & TL_OPF_OWED)
		return (o->flags & TL_OPF_CANCEL) ? -EALREADY : -ENOENT;
	return -ENOENT;
}

int tl_cancel(tl_loop *l, tl_op id)
{
	return cancel_id(l, id, 0);
}

int tl_stop(tl_loop *l, tl_op id)
{
	return cancel_id(l, id, 1);
}

int tl_close(tl_loop *l, tl_handle id, uint64_t token)
{
	struct tl_hslot *h = handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	uint32_t w0 = hweight(h);
	h->flags |= TL_HF_CLOSING;
	h->close_token = token;
	if ((h->flags & TL_HF_REF) && hweight(h) > w0)
		l->refs++;
	close_ops(l, h);
	maybe_closed(l, h);
	return 0;
}

int tl_set_ref(tl_loop *l, tl_handle id, int ref)
{
	struct tl_hslot *h = handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	ref = !!ref;
	if (!!(h->flags & TL_HF_REF) == ref)
		return 0;
	uint64_t w = h->pending + hweight(h);
	for (uint32_t k = 0, i = l->qhead; k < l->qlen; k++, i = i + 1 == l->qcap ? 0 : i + 1) {
		struct tl_qmeta *m = &l->qm[i];
		if (m->op_terminal && m->hidx == h->idx && m->referenced != ref) {
			m->referenced = (uint8_t)ref;
			w++;
		}
	}
	if (ref) {
		h->flags |= TL_HF_REF;
		l->refs += w;
	} else {
		h->flags &= (uint8_t)~TL_HF_REF;
		l->refs -= w;
	}
	return 0;
}

/* ---- timers ---- */

int tl_timer_start(tl_loop *l, uint64_t at, uint64_t repeat, uint64_t token, tl_handle *hid,
		   tl_op *oid)
{
	if (!hid || !oid)
		return -EINVAL;
	struct tl_hslot *h = handle_new(l, TL_H_TIMER);
	if (!h)
		return -ENOBUFS;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_TIMER, TL_K_TIMER, token, &o);
	if (r < 0) {
		handle_free(l, h);
		return r;
	}
	h->u.t.at = at;
	h->u.t.repeat = repeat;
	h->u.t.seq = l->timer_seq++;
	h->u.t.op = o->idx;
	tl__heap_push(&l->timers, h->idx, at, h->u.t.seq);
	*hid = tl__h_id(l, h);
	*oid = tl__op_id(l, o);
	return 0;
}

int tl_timer_reset(tl_loop *l, tl_handle id, uint64_t at)
{
	struct tl_hslot *h = handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_TIMER || (h->flags & TL_HF_CLOSING) || h->u.t.op == TL_NIL ||
	    (l->o[h->u.t.op].flags & TL_OPF_CANCEL))
		return -EINVAL;
	tl__heap_remove(&l->timers, h->idx);
	h->u.t.at = at;
	tl__heap_push(&l->timers, h->idx, at, h->u.t.seq);
	return 0;
}

static void run_timers(tl_loop *l, uint64_t now)
{
	for (uint32_t n = 0; n < l->cfg.events_per_turn; n++) {
		const struct tl_heap_ent *e = tl__heap_top(&l->timers);
		if (!e || e->at > now)
			break;
		struct tl_hslot *h = &l->h[e->slot];
		struct tl_opslot *o = &l->o[h->u.t.op];
		tl__heap_remove(&l->timers, h->idx);
		if (h->u.t.repeat) {
			if (l->buffered[TL_CLS_TIMER] == l->cfg.events_per_turn) {
				tl__heap_push(&l->timers, h->idx, h->u.t.at, h->u.t.seq);
				break;
			}
			/* Keep the phase; intervals missed while the loop was busy
			 * collapse into this one completion. */
			uint64_t r = h->u.t.repeat, next = h->u.t.at + r;
			if (next <= now)
				next = now + r - (now - h->u.t.at) % r;
			h->u.t.at = next;
			tl__heap_push(&l->timers, h->idx, next, h->u.t.seq);
			op_event(l, o, 0, 0, TL_NO_LEASE);
		} else {
			op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		}
	}
}

/* ---- connect deadlines ---- */

static int expire_connects(tl_loop *l, uint64_t now)
{
	for (;;) {
		const struct tl_heap_ent *e = tl__heap_top(&l->deadlines);
		if (!e || e->at > now)
			return 0;
		struct tl_opslot *o = &l->o[e->slot];
		uint16_t add = TL_OPF_CANCEL | TL_OPF_TIMEDOUT;
		o->flags |= add;
		int r = l->dv->cancel(l->d, &l->h[o->hidx], o);
		if (r < 0) {
			/* Keep the deadline: nothing may be reported before the
			 * native connect is acknowledged. The next turn retries. */
			if (o->flags & TL_OPF_LIVE)
				o->flags &= (uint16_t)~add;
			return r;
		}
		if ((o->flags & TL_OPF_LIVE) && (o->flags & TL_OPF_DEADLINE)) {
			o->flags &= (uint16_t)~TL_OPF_DEADLINE;
			tl__heap_remove(&l->deadlines, o->idx);
		}
	}
}

static uint64_t next_deadline(tl_loop *l)
{
	uint64_t d = UINT64_MAX;
	const struct tl_heap_ent *e = tl__heap_top(&l->timers);
	if (e)
		d = e->at;
	e = tl__heap_top(&l->deadlines);
	if (e && e->at < d)
		d = e->at;
	return d;
}

/* ---- room waits ---- */

int tl_post_wait_room(tl_loop *l, tl_poster *p, uint64_t token, tl_op *oid)
{
	if (!p || !oid || p == l->poster)
		return -EINVAL;
	uint64_t freebits = ~l->room_used;
	if (l->cfg.room_waiters < 64)
		freebits &= ((uint64_t)1 << l->cfg.room_waiters) - 1;
	if (!freebits)
		return -ENOBUFS;
	uint32_t bit = (uint32_t)__builtin_ctzll(freebits);
	struct tl_opslot *o;
	int r = tl__op_new(l, NULL, TL_OP_ROOM, TL_K_ROOM, token, &o);
	if (r < 0)
		return r;
	r = tl__poster_add_waiter(p, l->poster, bit);
	if (r < 0) {
		op_refuse(l, o);
		return r;
	}
	if (r == 1) {
		/* The target drained since the refused post: room now. */
		*oid = tl__op_id(l, o);
		op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		return 0;
	}
	atomic_fetch_add(&p->refs, 1);
	o->u.room.bit = bit;
	o->u.room.target = p;
	l->room_used |= (uint64_t)1 << bit;
	l->room_ops[bit] = o->idx;
	*oid = tl__op_id(l, o);
	return 0;
}

static void run_room(tl_loop *l)
{
	uint64_t bits = atomic_exchange(&l->poster->room_bits, 0);
	while (bits) {
		uint32_t bit = (uint32_t)__builtin_ctzll(bits);
		bits &= bits - 1;
		uint32_t i = l->room_ops[bit];
		if (i == TL_NIL)
			continue;
		struct tl_opslot *o = &l->o[i];
		l->room_ops[bit] = TL_NIL;
		l->room_used &= ~((uint64_t)1 << bit);
		tl_poster_put(o->u.room.target);
		op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
	}
}

/* ---- the turn ---- */

static void run_posts(tl_loop *l)
{
	struct tl_post_msg m;
	int took = 0;
	while (l->buffered[TL_CLS_POST] < l->cfg.events_per_turn &&
	       tl__mpsc_pop(&l->poster->posts, &m, sizeof m)) {
		tl_completion *c = tl__enqueue(l, TL_CLS_POST, 0);
		c->token = m.token;
		c->op = TL_OP_NONE;
		c->handle = TL_HANDLE_NONE;
		c->result = 0;
		c->kind = TL_K_POST;
		c->flags = TL_F_TERMINAL;
		c->u.post.payload = m.payload;
		l->st.completions[TL_K_POST]++;
		took = 1;
	}
	if (took)
		tl__poster_room_check(l->poster);
}

static uint32_t drain(tl_loop *l, tl_completion *out, uint32_t cap)
{
	uint32_t n = 0;
	while (n < cap && l->qlen) {
		uint32_t i = l->qhead;
		struct tl_qmeta m = l->qm[i];
		out[n++] = l->q[i];
		l->qhead = i + 1 == l->qcap ? 0 : i + 1;
		l->qlen--;
		l->buffered[m.cls]--;
		l->refs -= m.referenced;
		if (m.op_terminal) {
			op_free(l, &l->o[m.oidx]);
			l->outstanding--;
		}
		if (m.closed) {
			struct tl_hslot *h = &l->h[m.hidx];
			if (h->type != TL_H_TIMER)
				l->dv->release(l->d, h);
			handle_free(l, h);
		}
	}
	return n;
}

static int work_ready(tl_loop *l)
{
	return l->qlen || tl__mpsc_ready(&l->poster->posts) ||
	       atomic_load_explicit(&l->poster->room_bits, memory_order_relaxed) ||
	       (l->pool_ready && l->pool_ready(l));
}

/* An embedded loop is parked whenever the host is not inside tl_turn: keep
 * its descriptor readable while work waits, let wakes make it readable, and
 * have the driver make it readable when the next timer is due. */
static void embed_park(tl_loop *l)
{
	if (work_ready(l) || tl__poster_park(l->poster)) {
		tl__poster_running(l->poster);
		tl__poster_signal(l->poster);
	}
	if (l->dv->embed_deadline)
		l->dv->embed_deadline(l->d, next_deadline(l));
}

int tl_turn(tl_loop *l, int64_t timeout_ns, tl_completion *out, uint32_t cap,
	    tl_turn_info *info)
{
	if (!out || !cap)
		return -EINVAL;
	struct tl_poll_info pi = {0};
	int notified = tl__poster_begin(l->poster);
	if (tl_unlikely(l->close_retry))
		retry_closes(l);
	uint64_t start = l->dv->now(l->d);
	int r = expire_connects(l, start);
	if (r < 0)
		return r;
	int queued = work_ready(l);
	/* Queued work forbids blocking and allows one zero-timeout discovery
	 * poll, only while native operations are pending (contract 1.6). */
	int native_step = !queued || l->native_pending;
	uint64_t idle = 0;
	if (l->buffered[TL_CLS_NATIVE] < l->cfg.events_per_turn && native_step) {
		int64_t t = timeout_ns;
		uint64_t dl = next_deadline(l);
		if (dl != UINT64_MAX) {
			int64_t until = dl > start ? (int64_t)(dl - start) : 0;
			if (t < 0 || until < t)
				t = until;
		}
		if (t != 0 && (queued || notified || tl__poster_park(l->poster)))
			t = 0;
		r = l->dv->poll(l->d, t, &pi);
		tl__poster_running(l->poster);
		if (r < 0)
			return r;
		if (pi.waits)
			idle = l->dv->now(l->d) - start;
	}
	uint64_t now = l->dv->now(l->d);
	r = expire_connects(l, now);
	run_timers(l, now);
	if (l->pool_drain)
		l->pool_drain(l, l->cfg.events_per_turn);
	run_room(l);
	run_posts(l);
	uint32_t n = drain(l, out, cap);
	if (l->cfg.embed)
		embed_park(l);
	l->st.turns++;
	l->st.os_waits += pi.waits;
	l->st.discovery_polls += pi.discovery_polls;
	l->st.zero_event_waits += pi.zero_event_waits;
	l->st.idle_ns += idle;
	uint64_t end = now;
	l->st.busy_ns += end - start - (idle < end - start ? idle : end - start);
	if (info) {
		info->completions = n;
		info->os_waits = pi.waits;
		info->discovery_polls = pi.discovery_polls;
		info->zero_event_waits = pi.zero_event_waits;
		info->waited_ns = end - start;
		info->idle_ns = idle;
		info->alive = l->refs != 0;
	}
	if (r < 0 && !n)
		return r;
	return (int)n;
}

/* ---- sockets ---- */

static struct tl_hslot *stream_get(tl_loop *l, tl_handle id, int type, int *err)
{
	struct tl_hslot *h = handle_get(l, id);
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
static int submit(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o, tl_op *oid)
{
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	tl_op id = tl__op_id(l, o);
	int r = l->dv->submit(l->d, h, o);
	if (r < 0) {
		op_refuse(l, o);
		return r;
	}
	/* The driver may already have completed it; the id stays valid for
	 * the caller (stale once the terminal is delivered). */
	*oid = id;
	return 0;
}

static int open_handle(tl_loop *l, uint8_t type, const struct tl_open_spec *spec,
		       struct tl_hslot **out)
{
	struct tl_hslot *h = handle_new(l, type);
	if (!h)
		return -ENOBUFS;
	int r = l->dv->open(l->d, h, spec);
	if (r < 0) {
		handle_free(l, h);
		return r;
	}
	*out = h;
	return 0;
}

static int valid_addr(const tl_addr *a)
{
	return a && (a->sa.sa_family == AF_INET || a->sa.sa_family == AF_INET6);
}

/* Open a handle that needs no operation to exist (listener, UDP socket):
 * its family flag set, its id returned. */
static int open_bound(tl_loop *l, uint8_t type, const struct tl_open_spec *s, tl_handle *out)
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
	if (!valid_addr(addr) || !out)
		return -EINVAL;
	struct tl_open_spec s = {TL_OPEN_TCP_LISTEN, addr, NULL, opts ? opts : &def};
	return open_bound(l, TL_H_LISTEN, &s, out);
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
	struct tl_open_spec s = {TL_OPEN_UNIX_LISTEN, NULL, path, opts ? opts : &def};
	return open_bound(l, TL_H_LISTEN, &s, out);
}

int tl_local_addr(tl_loop *l, tl_handle id, tl_addr *out)
{
	struct tl_hslot *h = handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (!out || h->type == TL_H_TIMER || (h->flags & TL_HF_UNIX))
		return -EINVAL;
	return l->dv->local_addr(l->d, h, out);
}

static int accept_common(tl_loop *l, tl_handle lid, uint64_t token, tl_op *oid, int multi)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *h = stream_get(l, lid, TL_H_LISTEN, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_ACCEPT, TL_K_ACCEPT, token, &o);
	if (r < 0)
		return r;
	if (multi)
		o->flags |= TL_OPF_MULTI;
	return submit(l, h, o, oid);
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
	r = submit(l, h, o, oid);
	if (r < 0)
		goto undo;
	if (deadline && (o->flags & TL_OPF_LIVE) && o->gen == tl__id_gen(oid->v)) {
		o->flags |= TL_OPF_DEADLINE;
		tl__heap_push(&l->deadlines, o->idx, deadline, 0);
	}
	*hid = id;
	return 0;
undo:
	l->dv->release(l->d, h);
	handle_free(l, h);
	return r;
}

int tl_tcp_connect(tl_loop *l, const tl_addr *addr, uint64_t deadline, uint64_t token,
		   tl_handle *h, tl_op *op)
{
	tl_listen_opts def = {0};
	if (!valid_addr(addr))
		return -EINVAL;
	struct tl_open_spec s = {TL_OPEN_TCP_STREAM, addr, NULL, &def};
	return connect_common(l, &s, deadline, token, h, op);
}

int tl_unix_connect(tl_loop *l, const char *path, uint64_t deadline, uint64_t token,
		    tl_handle *h, tl_op *op)
{
	tl_listen_opts def = {0};
	if (!valid_path(path))
		return -EINVAL;
	struct tl_open_spec s = {TL_OPEN_UNIX_STREAM, NULL, path, &def};
	return connect_common(l, &s, deadline, token, h, op);
}

static int read_common(tl_loop *l, tl_handle hid, void *buf, uint32_t len, uint16_t flags,
		       uint64_t token, tl_op *oid)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *h = stream_get(l, hid, TL_H_STREAM, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_READ, TL_K_READ, token, &o);
	if (r < 0)
		return r;
	o->flags |= flags;
	o->u.rw.buf = buf;
	o->u.rw.len = len;
	return submit(l, h, o, oid);
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

int tl_writev(tl_loop *l, tl_handle hid, const struct iovec *iov, int n, uint64_t token,
	      tl_op *oid)
{
	int err;
	if (!iov || n < 1 || n > TL_IOV_MAX || !oid)
		return -EINVAL;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len && !iov[i].iov_base)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	struct tl_hslot *h = stream_get(l, hid, TL_H_STREAM, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_WRITE, TL_K_WRITE, token, &o);
	if (r < 0)
		return r;
	memcpy(o->u.wv.iov, iov, (size_t)n * sizeof *iov);
	o->u.wv.n = (uint32_t)n;
	o->u.wv.cur = 0;
	o->u.wv.off = 0;
	o->u.wv.total = total;
	return submit(l, h, o, oid);
}

int tl_write(tl_loop *l, tl_handle h, const void *buf, uint32_t len, uint64_t token, tl_op *op)
{
	if (!buf && len)
		return -EINVAL;
	struct iovec v = {(void *)(uintptr_t)buf, len};
	return tl_writev(l, h, &v, 1, token, op);
}

int tl_shutdown(tl_loop *l, tl_handle hid, uint64_t token, tl_op *oid)
{
	int err;
	if (!oid)
		return -EINVAL;
	struct tl_hslot *h = stream_get(l, hid, TL_H_STREAM, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_SHUTDOWN, TL_K_SHUTDOWN, token, &o);
	if (r < 0)
		return r;
	return submit(l, h, o, oid);
}

int tl_udp_bind(tl_loop *l, const tl_addr *addr, tl_handle *out)
{
	tl_listen_opts def = {0};
	if (!valid_addr(addr) || !out)
		return -EINVAL;
	struct tl_open_spec s = {TL_OPEN_UDP, addr, NULL, &def};
	return open_bound(l, TL_H_UDP, &s, out);
}

int tl_udp_send(tl_loop *l, tl_handle hid, const void *buf, uint32_t len, const tl_addr *to,
		uint64_t token, tl_op *oid)
{
	int err;
	if ((!buf && len) || !valid_addr(to) || !oid)
		return -EINVAL;
	struct tl_hslot *h = stream_get(l, hid, TL_H_UDP, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_SEND, TL_K_SEND, token, &o);
	if (r < 0)
		return r;
	o->u.dg.buf = (uint8_t *)(uintptr_t)buf;
	o->u.dg.len = len;
	o->u.dg.addr = *to;
	return submit(l, h, o, oid);
}

int tl_udp_recv(tl_loop *l, tl_handle hid, void *buf, uint32_t len, uint64_t token, tl_op *oid)
{
	int err;
	if ((buf && !len) || !oid)
		return -EINVAL;
	struct tl_hslot *h = stream_get(l, hid, TL_H_UDP, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_RECV, TL_K_RECV, token, &o);
	if (r < 0)
		return r;
	if (!buf)
		o->flags |= TL_OPF_POOLED;
	o->u.dg.buf = buf;
	o->u.dg.len = len;
	memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	return submit(l, h, o, oid);
}

/* ---- embedding, stats, teardown ---- */

int tl_loop_fd(tl_loop *l)
{
	if (!l->cfg.embed || !(l->dv->caps & TL_CAP_EMBED) || !l->dv->embed_fd)
		return -ENOTSUP;
	return l->dv->embed_fd(l->d);
}

void tl_loop_stats_get(const tl_loop *l, tl_loop_stats *out)
{
	*out = l->st;
	out->wakes_sent = atomic_load(&l->poster->wakes_sent);
	out->wakes_coalesced = atomic_load(&l->poster->wakes_coalesced);
	out->handles = l->nhandles;
	out->ops = l->nops;
	out->queued = l->qlen;
	out->timers = l->timers.n;
	out->leases_out = l->lease_nout;
}

void tl_loop_destroy(tl_loop *l)
{
	if (!l)
		return;
	l->destroying = 1;
	/* Posts fail with -EPIPE from now on; the poster itself lives on while
	 * other threads hold references. */
	atomic_store(&l->poster->closed, 1);
	tl_completion scratch[64];
	for (uint32_t i = 0; i < l->cfg.max_handles; i++) {
		struct tl_hslot *h = &l->h[i];
		if (h->type != TL_H_FREE && !(h->flags & TL_HF_CLOSING))
			tl_close(l, tl__h_id(l, h), 0);
	}
	/* Ops without a handle: room waits and pool jobs. */
	for (uint32_t i = 0; i < l->cfg.max_ops; i++) {
		struct tl_opslot *o = &l->o[i];
		if ((o->flags & TL_OPF_LIVE) && o->hidx == TL_NIL && !(o->flags & TL_OPF_CANCEL))
			cancel_op(l, o, 0);
	}
	/* Wait for the driver to acknowledge every cancellation before any
	 * memory is freed: the kernel may own buffers until then. */
	for (;;) {
		if (l->close_retry)
			retry_closes(l);
		drain(l, scratch, 64);
		run_room(l);
		if (!l->native_pending && !l->qlen)
			break;
		if (l->native_pending) {
			struct tl_poll_info pi;
			l->dv->poll(l->d, 10 * 1000 * 1000, &pi);
		}
	}
	/* Pool jobs still running see their cancellation flag; their results
	 * are discarded by the pool (the port belongs to the poster). */
	if (l->pool_detach)
		l->pool_detach(l);
	/* Room waits whose target already fired: that bit never comes now. */
	for (int b = 0; b < 64; b++)
		if (l->room_ops[b] != TL_NIL)
			tl_poster_put(l->o[l->room_ops[b]].u.room.target);
	l->dv->destroy(l->d);
	tl__poster_close(l->poster);
	free_tables(l);
	free(l);
}

int tl_loop_close(tl_loop *l)
{
	if (!l)
		return -EINVAL;
	if (l->nhandles || l->outstanding || l->qlen)
		return -EBUSY;
	tl_loop_destroy(l);
	return 0;
}
