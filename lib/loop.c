/* lib/loop.c: the loop core: config, ids and tables, exactly-once completions, teardown (the leases are lib/lease.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sysmod.h"
#include "tl_config.h"
#if TL_HAVE_VALGRIND
#include <valgrind/memcheck.h>
#endif

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
	c->handle_leases = 16;
	c->handle_write_bytes = 1u << 20;
	c->pipes = 4;
	c->pipe_size = 1u << 20;
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
	if (!c->handle_leases || c->handle_leases > 32768)
		return 0;
	if (!c->handle_write_bytes || c->handle_write_bytes > TL_MAX_WRITE_CAP)
		return 0;
	if (c->driver < TL_DRIVER_DEFAULT || c->driver > TL_DRIVER_IOCP)
		return 0;
	/* The kernel rounds a pipe up to a power of two pages; 1 MiB is its
	 * default fs.pipe-max-size, past which only privileged users go. */
	if (!c->pipes || c->pipes > 4096 || c->pipe_size < 4096 || c->pipe_size > (1u << 20) ||
	    (c->pipe_size & (c->pipe_size - 1)))
		return 0;
	/* The pooled buffers must fit one allocation comfortably. */
	if ((uint64_t)c->pooled_buffers * c->pooled_buffer_size > (1ull << 32))
		return 0;
	if (c->spin_ns > 1000000 || c->nap_ns > 1000000)
		return 0;
	return 1;
}

/* Loop identities are 23 bits of the id's 24 (the top one, TL_ID_LAYER_BIT,
 * is the TLS layer's); 0 is never used so that no id is 0. */
static atomic_uint next_owner = 1;

static uint32_t new_owner(void)
{
	for (;;) {
		uint32_t o = atomic_fetch_add(&next_owner, 1) & 0x7fffffu;
		if (o)
			return o;
	}
}

/* The pooled buffers' bytes, rounded up to whole pages. */
static size_t lease_bytes(const tl_loop *l)
{
	return ((size_t)l->lease_size * l->lease_count + 4095) & ~(size_t)4095;
}

/*
 * The pooled buffers are mapped, not allocated: a pool is sized for the
 * most streams a loop may hold (tlproxy's reaches 512 MiB a shard) and only
 * the buffers in use are touched, which a mapping keeps true under any
 * allocator. AddressSanitizer's allocator touched its shadow of the whole
 * block (about 60 MiB of resident memory for tlproxy's 512 MiB, and more
 * than twice the CPU time of its start). Under valgrind the buffers are
 * marked undefined until written, as allocated memory would be, so that
 * reading a lease past its bytes is still reported.
 */
static uint8_t *lease_map(size_t n)
{
	void *p = tl__os_map(n);
	if (!p)
		return NULL;
#if TL_HAVE_VALGRIND
	(void)VALGRIND_MAKE_MEM_UNDEFINED(p, n);
#endif
	return p;
}

static void free_tables(tl_loop *l)
{
	free(l->h);
	free(l->o);
	free(l->q);
	free(l->qm);
	if (l->lease_mem)
		tl__os_unmap(l->lease_mem, lease_bytes(l));
	free(l->lease_free);
	free(l->lease_out);
	free(l->lease_owner);
	tl__pipes_free(l);
	tl__heap_free(&l->timers);
	tl__dl_free(l);
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
	l->thread = tl__os_thread_self();
	l->h = calloc(cfg->max_handles, sizeof *l->h);
	l->o = calloc(cfg->max_ops, sizeof *l->o);
	/* Every terminal completion and every Closed has a reserved place, and
	 * each nonterminal source has its own budget: the queue never fills. */
	l->qcap = cfg->max_ops + cfg->max_handles + TL_CLS_N * cfg->events_per_turn;
	l->q = malloc((size_t)l->qcap * sizeof *l->q);
	l->qm = malloc((size_t)l->qcap * sizeof *l->qm);
	l->lease_size = cfg->pooled_buffer_size;
	l->lease_count = cfg->pooled_buffers;
	l->lpool.count = cfg->pooled_buffers;
	l->lease_mem = lease_map(lease_bytes(l));
	l->lease_free = malloc(l->lease_count * sizeof *l->lease_free);
	l->lease_out = calloc(l->lease_count, 1);
	l->lease_owner = calloc(l->lease_count, sizeof *l->lease_owner);
	int r = -ENOMEM;
	if (!l->h || !l->o || !l->q || !l->qm || !l->lease_mem || !l->lease_free || !l->lease_out ||
	    !l->lease_owner ||
	    tl__heap_init(&l->timers, cfg->max_handles) < 0 || tl__dl_init(l) < 0)
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
	l->pready_head = l->pready_tail = l->plwait_head = l->plwait_tail = TL_NIL;
	r = tl__poster_new(cfg->post_capacity, cfg->room_waiters, &l->poster);
	if (r < 0)
		goto fail;
	r = tl__driver_start(l, cfg, &l->poster->wake, &l->dv, &l->d);
	if (r == 0 && l->dv->probed_caps)
		l->probed = l->dv->probed_caps(l->d);
	if (r < 0)
		goto fail_poster;
	/* The simulation's clock stands still while it polls: no spin there. */
	if ((l->dv->caps & TL_CAP_OS) && !l->cfg.embed)
		l->spin = l->cfg.spin_ns;
#ifndef _WIN32
	/* Nor a nap, which sleeps on the OS clock (not Windows': milliseconds). */
	if ((l->dv->caps & TL_CAP_OS) && !l->cfg.embed)
		l->nap = l->cfg.nap_ns;
#endif
	/* After the driver: whether pipes are OS pipes depends on it. */
	if ((r = tl__pipes_init(l)) < 0)
		goto fail_driver;
	*out = l;
	return 0;
fail_driver:
	l->dv->destroy(l->d);
fail_poster:
	tl_poster_put(l->poster);
fail:
	free_tables(l);
	free(l);
	return r;
}

uint64_t tl_now(const tl_loop *l) { return l->dv->now(l->d); }
const char *tl_loop_driver(const tl_loop *l) { return l->dv->name; }
/* Capabilities whose library half this build lacks, whatever the driver
 * has: on Windows splicing is not built (lib/sys_absent.c refuses it), so
 * the simulation driver's TL_CAP_SPLICE is not the loop's there. */
#ifdef _WIN32
#define TL_CAPS_ABSENT TL_CAP_SPLICE
#else
#define TL_CAPS_ABSENT 0u
#endif
uint32_t tl_loop_caps(const tl_loop *l) { return (l->dv->caps | l->probed) & 0xffffu & ~TL_CAPS_ABSENT; }
int tl_alive(const tl_loop *l) { return l->refs != 0; }

/* ---- handles and ops ---- */

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

struct tl_drv *tl__drv_self(const tl_loop *l, const struct tl_driver *dv)
{
	return l && l->dv == dv ? l->d : NULL;
}

uint32_t tl__drv_queued(const tl_loop *l) { return l->qlen; }

int tl__drv_shared(const tl_loop *l)
{
	return atomic_load(&l->poster->refs) > 1;
}

void tl__drv_wake(tl_loop *l)
{
	if (!tl__os_thread_is(l->thread))
		tl_poster_wake(l->poster);
}


struct tl_hslot *tl__handle_new(tl_loop *l, uint8_t type)
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
	h->data = NULL;
	h->spl_head = TL_NIL;
	memset(&h->u, 0, sizeof h->u);
	tl__caps_init(l, h, NULL);
	l->refs += tl__hweight(h);
	return h;
}

void tl__handle_free(tl_loop *l, struct tl_hslot *h)
{
	tl__caps_release(l, h);
	tl__dl_release(l, h);
	if (h->flags & TL_HF_REF)
		l->refs -= tl__hweight(h);
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
	o->poll.where = TL_PW_NONE;
	o->poll.multi = 0;
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
	tl__dl_op_disarm(l, o);
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
		if (o->code == TL_OP_CONNECT)
			h->flags &= (uint8_t)~TL_HF_CONNECTING;
		else if (o->code == TL_OP_WRITE)
			tl__caps_write(l, h, -(int64_t)o->u.wv.total);
		else if (o->code == TL_OP_SPLICE)
			tl__splice_retire(l, o);
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
void tl__op_refuse(tl_loop *l, struct tl_opslot *o)
{
	/* op_retire gives back the native_pending count submit() took. */
	op_retire(l, o);
	op_free(l, o);
	l->outstanding--;
}

static inline struct tl_qmeta *qmeta_of(tl_loop *l, tl_completion *c)
{
	return &l->qm[c - l->q];
}

static void maybe_closed(tl_loop *l, struct tl_hslot *h)
{
	/* A splice reading h (its source) holds h's descriptor too. */
	if (h->pending || h->spl_head != TL_NIL || !(h->flags & TL_HF_CLOSING) ||
	    (h->flags & TL_HF_CLOSED_QUEUED))
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

void tl__maybe_closed(tl_loop *l, struct tl_hslot *h)
{
	maybe_closed(l, h);
}

static inline void lease_fill(tl_loop *l, tl_lease *ls, uint32_t id)
{
	ls->data = l->lease_mem + (size_t)id * l->lease_size;
	ls->id = id;
	ls->cap = l->lease_size;
}

/* A datagram's record: its lease (counted against h's cap like a
 * stream's, lib/caps.c), source, destination, segment size, and
 * truncation (the driver's u.dg.full beyond the bytes delivered). */
static void recv_fill(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o, tl_completion *c,
		      int64_t res, uint32_t lease)
{
	if (lease != TL_NO_LEASE) {
		c->flags |= TL_F_LEASE;
		lease_fill(l, &c->u.recv.lease, lease);
		tl__caps_lease(l, h, lease);
	} else {
		c->u.recv.lease = (tl_lease){0};
	}
	c->u.recv.from = o->u.dg.addr;
	c->u.recv.to = o->u.dg.local;
	c->u.recv.segment = o->u.dg.seg;
	if (res >= 0 && o->u.dg.full > (uint64_t)res) {
		c->flags |= TL_F_TRUNC;
		c->aux = o->u.dg.full;
	}
	o->u.dg.full = o->u.dg.seg = 0;
}

/* A read or receive that brought bytes (the cancellation rules below keep
 * them; the nap counts them, turn.c). */
static int carries_data(const struct tl_opslot *o, int64_t res)
{
	return res > 0 &&
	       (o->code == TL_OP_READ || o->code == TL_OP_RECV || o->code == TL_OP_RECV_FDS);
}

/* Queue one record of op as given (no cancellation rules). */
static tl_completion *record(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags,
			     uint32_t lease)
{
	int terminal = flags & TL_F_TERMINAL;
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
	if (carries_data(o, res)) {
		l->in_reads++;
		l->in_bytes += (uint64_t)res;
	}
	if (o->code == TL_OP_RECV) {
		recv_fill(l, h, o, c, res, lease);
	} else if (lease != TL_NO_LEASE) {
		c->flags |= TL_F_LEASE;
		lease_fill(l, &c->u.read.lease, lease);
		tl__caps_lease(l, h, lease);
	} else if (tl_unlikely(o->code == TL_OP_RECV_FDS) && o->u.fd.got) {
		/* The descriptors go out with the record that carries their
		 * bytes (the terminal after a cancel carries none). */
		memcpy(o->u.fd.out, o->u.fd.fds, o->u.fd.got * sizeof *o->u.fd.fds);
		c->aux = o->u.fd.got;
		o->u.fd.got = 0;
	} else if (o->kind == TL_K_WRITE) {
		/* What the drivers counted as sent (u.wv.off, u.fd.done): after a
		 * cancel the host may need the rest (loop.h, u.write). */
		c->u.write.written = o->code == TL_OP_SEND_FDS ? o->u.fd.done : o->u.wv.off;
	} else if (o->code == TL_OP_SPLICE) {
		/* Before op_retire, which drops what the pipe still holds. */
		c->u.splice.taken = o->u.sp.taken;
		c->u.splice.moved = o->u.sp.moved;
	}
	l->st.completions[o->kind]++;
	/* Progress for the handle's idle deadline (deadline.c). */
	if (h && tl_unlikely(l->dl.nidle) && res >= 0 && !(flags & TL_F_STOPPED))
		tl__dl_touch(l, h);
	if (terminal) {
		op_retire(l, o);
		if (h && tl__sys_one_op(h) && !(h->flags & TL_HF_CLOSING)) {
			/* Its one op ended: the handle closes after it. */
			h->flags |= TL_HF_CLOSING;
			h->close_token = o->token;
		}
		if (h)
			maybe_closed(l, h);
	}
	return c;
}

void tl__op_retire_silent(tl_loop *l, struct tl_opslot *o)
{
	struct tl_hslot *h = o->hidx != TL_NIL ? &l->h[o->hidx] : NULL;
	op_retire(l, o);
	op_free(l, o);
	l->outstanding--;
	if (h)
		maybe_closed(l, h);
}

/* Descriptors a receive took that will never reach the host: close them. */
static void drop_fds(const int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * The cancellation rule (contract 2.1, 2.5), in one place. After a cancel
 * or stop was accepted, an op's events are dropped and its terminal reports
 * the cancellation (-ECANCELED, Stopped, or -ETIMEDOUT for a deadline:
 * deadline.c) instead of what the driver saw; with one exception: bytes a
 * read (stream or datagram) had already taken off the socket. Dropping them
 * would lose them for good (a proxy would forward a stream with a hole), so
 * they reach the host as ordinary nonterminal read completions, in order,
 * before the terminal, even when the driver reported them with the terminal
 * itself (a one-shot read that completed as the cancel went in).
 *
 * Such a record takes a place of the native class. Drivers count it against
 * tl__drv_room() like any nonterminal event; should one not, the queue's
 * spare share (TL_CLS_NONE's budget, which no record uses) still holds up
 * to events_per_turn more, and beyond that the bytes are dropped and
 * counted (late_dropped) rather than overflowing the queue.
 */
tl_completion *tl__op_event(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags,
			    uint32_t lease)
{
	int terminal = flags & TL_F_TERMINAL;
	if (tl_likely(!(o->flags & TL_OPF_CANCEL)))
		return record(l, o, res, flags, lease);
	tl_completion *data = NULL;
	if (carries_data(o, res) && l->buffered[TL_CLS_NATIVE] < 2 * l->cfg.events_per_turn)
		data = record(l, o, res, flags & ~(uint32_t)TL_F_TERMINAL, lease);
	else if (carries_data(o, res))
		l->late_dropped++;
	if (!data && lease != TL_NO_LEASE)
		tl__drv_lease_drop(l, lease);
	if (!data && o->code == TL_OP_RECV_FDS) {
		drop_fds(o->u.fd.fds, o->u.fd.got);
		o->u.fd.got = 0;
	}
	if (!terminal)
		return data;
	flags = TL_F_TERMINAL;
	if (o->flags & TL_OPF_TIMEDOUT)
		res = -ETIMEDOUT;
	else if (o->flags & TL_OPF_STOP) {
		res = 0;
		flags |= TL_F_STOPPED;
	} else
		res = -ECANCELED;
	return record(l, o, res, flags, TL_NO_LEASE);
}

tl_completion *tl__op_finish(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags)
{
	return tl__op_event(l, o, res, flags, TL_NO_LEASE);
}

void tl__drv_event(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags, uint32_t lease)
{
	if (tl_unlikely(o->code == TL_OP_POOL) && l->pool_native_retry &&
	    l->pool_native_retry(l, o, res))
		return;
	/* A module's poll: the module acts on it after the OS wait. */
	if (tl_unlikely(tl__poll_intercepted(o))) {
		tl__poll_native_event(l, o, res);
		return;
	}
	tl_completion *c = tl__op_event(l, o, res, flags, lease);
	/* A native file request: its payload (aux, value, stat copy) is the
	 * pool module's, exactly as for a request a worker ran. op_event kept
	 * o->u.pool.job and the cancel flag. */
	if (tl_unlikely(o->code == TL_OP_POOL) && c && l->pool_native)
		l->pool_native(l, o, c, res);
}

uint32_t tl__drv_room(const tl_loop *l)
{
	uint32_t used = l->buffered[TL_CLS_NATIVE];
	return used < l->cfg.events_per_turn ? l->cfg.events_per_turn - used : 0;
}

int tl__drv_accept(tl_loop *l, struct tl_opslot *o, int fd, const tl_addr *peer, int terminal)
{
	uint32_t tf = terminal ? TL_F_TERMINAL : 0;
	if (o->flags & TL_OPF_CANCEL) {
		/* The connection raced with the cancellation: refuse it. */
		if (terminal)
			tl__op_event(l, o, -ECANCELED, tf, TL_NO_LEASE);
		return -ECANCELED;
	}
	struct tl_hslot *lh = &l->h[o->hidx];
	struct tl_hslot *h = tl__handle_new(l, TL_H_STREAM);
	if (!h) {
		tl__op_event(l, o, -ENOBUFS, tf, TL_NO_LEASE);
		return -ENOBUFS;
	}
	h->fd = fd;
	h->flags |= lh->flags & (TL_HF_UNIX | TL_HF_V6);
	tl__caps_init(l, h, lh);
	int r = l->dv->attach(l->d, h);
	if (r < 0) {
		tl__handle_free(l, h);
		tl__op_event(l, o, r, tf, TL_NO_LEASE);
		return r;
	}
	tl_completion *c = tl__op_event(l, o, 0, tf, TL_NO_LEASE);
	c->u.accept.conn = tl__h_id(l, h);
	if (peer)
		c->u.accept.peer = *peer;
	else
		memset(&c->u.accept.peer, 0, sizeof c->u.accept.peer);
	return 0;
}

/* tl__drain copies every record it hands out: keep one within two cache
 * lines (it is exactly 128 bytes on 64-bit targets). */
_Static_assert(sizeof(tl_completion) <= 128, "a completion fits two cache lines");

/* Hand out up to cap queued completions, oldest first: a delivered
 * terminal frees its op slot and credit, a delivered Closed releases the
 * handle's OS object and slot. */
uint32_t tl__drain(tl_loop *l, tl_completion *out, uint32_t cap)
{
	uint32_t n = 0;
	while (n < cap && l->qlen) {
		uint32_t i = l->qhead;
		struct tl_qmeta m = l->qm[i];
		out[n++] = l->q[i];
		/* The handle's pointer as it is now (loop.h, tl_handle_set_data):
		 * its slot lives until its Closed, the last record naming it, has
		 * been handed out, just below. */
		out[n - 1].data = m.hidx != TL_NIL ? l->h[m.hidx].data : NULL;
		l->qhead = i + 1 == l->qcap ? 0 : i + 1;
		l->qlen--;
		l->buffered[m.cls]--;
		l->refs -= m.referenced;
		/* tl_loop_destroy drops what it drains: descriptors a receive
		 * handed out in it would leak (the op slot is intact until its
		 * terminal is drained). */
		if (tl_unlikely(l->destroying) && out[n - 1].aux && m.oidx < l->cfg.max_ops &&
		    out[n - 1].kind == TL_K_READ && l->o[m.oidx].code == TL_OP_RECV_FDS &&
		    out[n - 1].op.v == tl__op_id(l, &l->o[m.oidx]).v)
			drop_fds(l->o[m.oidx].u.fd.fds, out[n - 1].aux);
		if (m.op_terminal) {
			op_free(l, &l->o[m.oidx]);
			l->outstanding--;
		}
		if (m.closed) {
			struct tl_hslot *h = &l->h[m.hidx];
			if (h->type == TL_H_LISTEN || h->type == TL_H_STREAM || h->type == TL_H_UDP)
				l->dv->release(l->d, h);
			else if (h->type != TL_H_TIMER)
				tl__sys_release(l, h);
			tl__handle_free(l, h);
		}
	}
	/* Empty: start again at the front. The queue is sized for every op and
	 * handle at once, but a loop in steady state holds a few records at a
	 * time; left to walk round, each record would land on a line (and now
	 * and then a page) nothing touched for a whole lap of many megabytes. */
	if (!l->qlen)
		l->qhead = 0;
	return n;
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
	out->leases_out = l->lpool.out;
	if (l->dv->stats)
		l->dv->stats(l->d, out);
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
	tl_close_all(l, 0);
	/* Ops without a handle: room waits and pool jobs. */
	for (uint32_t i = 0; i < l->cfg.max_ops; i++) {
		struct tl_opslot *o = &l->o[i];
		if ((o->flags & TL_OPF_LIVE) && o->hidx == TL_NIL && !(o->flags & TL_OPF_CANCEL))
			tl__op_cancel(l, o, 0);
	}
	/* Wait for the driver to acknowledge every cancellation before any
	 * memory is freed: the kernel may own buffers until then. */
	for (;;) {
		if (l->close_retry)
			tl__retry_closes(l);
		/* Modules finish what they hold off the driver (cancelled ops on
		 * their lists) and fire their deadlines (a child that ignores
		 * its termination signal is killed after its bound). */
		tl__sys_run(l, l->dv->now(l->d));
		tl__drain(l, scratch, 64);
		tl__run_room(l);
		int busy = tl__sys_busy(l);
		if (!l->native_pending && !l->qlen && !busy)
			break;
		if (l->native_pending || busy) {
			/* Wait a little (a signal or the driver wakes it), unless a
			 * module has work ready now. */
			struct tl_poll_info pi;
			int64_t t = l->pready_head != TL_NIL ? 0 : 10 * 1000 * 1000;
			l->dv->poll(l->d, t, &pi);
		}
	}
	/* Pool jobs still running see their cancellation flag; their results
	 * are discarded by the pool (the port belongs to the poster). */
	if (l->pool_detach)
		l->pool_detach(l);
	tl__sys_destroy(l);
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

