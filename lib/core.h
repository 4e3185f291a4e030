/* lib/core.h: what the files of the loop core (loop.c, turn.c, stream.c, sockopt.c) share, and lib/'s file requests use; never seen by drivers. */
#ifndef TL_CORE_H
#define TL_CORE_H

#include "internal.h"

/* Weight of a handle itself in alive(): sockets always, timers only while
 * closing (an idle timer handle does not keep the loop alive). */
static inline uint32_t tl__hweight(const struct tl_hslot *h)
{
	return h->type != TL_H_TIMER || (h->flags & TL_HF_CLOSING);
}

/* Tables (loop.c; the lookup is here, inline: every call on a handle and
 * every lease given back starts with it). A handle lookup by id: NULL when
 * stale, foreign or free. */
static inline struct tl_hslot *tl__handle_get(tl_loop *l, tl_handle id)
{
	uint32_t s = tl__id_slot(id.v);
	if (tl__id_owner(id.v) != l->owner || s >= l->cfg.max_handles)
		return NULL;
	struct tl_hslot *h = &l->h[s];
	if (h->type == TL_H_FREE || h->gen != tl__id_gen(id.v))
		return NULL;
	return h;
}
/* Take a free handle slot of type (referenced, no OS object yet); NULL when
 * the table is full. */
struct tl_hslot *tl__handle_new(tl_loop *loop, uint8_t type);
/* Give a handle slot back (its OS object already released). */
void tl__handle_free(tl_loop *loop, struct tl_hslot *h);

/* Queue one event of op with the cancellation rules applied (loop.c); NULL
 * when the event was dropped. Terminal events retire the op. */
tl_completion *tl__op_event(tl_loop *loop, struct tl_opslot *op, int64_t res, uint32_t flags,
			    uint32_t lease);

/* Ask again for the cancellations a closing handle could not get (loop.c). */
void tl__retry_closes(tl_loop *loop);

/* Ask for the cancellation of a live op (loop.c), as tl_cancel (why 0),
 * tl_stop (TL_OPF_STOP) or a deadline (TL_OPF_TIMEDOUT: its terminal is
 * -ETIMEDOUT). 0, -EALREADY, or the driver's refusal: then nothing changed
 * and the op keeps its deadline. */
int tl__op_cancel(tl_loop *loop, struct tl_opslot *op, uint16_t why);

/* Hand out up to cap queued completions, releasing what delivered terminals
 * and Closed records hold (loop.c). */
uint32_t tl__drain(tl_loop *loop, tl_completion *out, uint32_t cap);
/* Finish room waits whose target signalled (turn.c). */
void tl__run_room(tl_loop *loop);

/* Socket control (sockopt.c). The kinds of socket handle options are
 * checked against; tl__sok_of(h) is h's (0 for a timer). */
#define TL_SOK_TCP 0x01
#define TL_SOK_UNIX 0x02
#define TL_SOK_TCP_LISTEN 0x04
#define TL_SOK_UNIX_LISTEN 0x08
#define TL_SOK_UDP 0x10
unsigned tl__sok_of(const struct tl_hslot *h);
/* A list of options for a socket of kind: 0 or -EINVAL. */
int tl__sockopts_check(unsigned kind, const tl_sockopt_val *v, uint32_t n);
/* Check a listener's options (is_unix: a Unix-domain one) and put its
 * option list into s: 0, -EINVAL, -ENOTSUP (the driver sets no options). */
int tl__listen_opts_check(tl_loop *loop, const tl_listen_opts *o, int is_unix,
			  struct tl_open_spec *s);
/* Check the setup of a TCP connect to dst and put it into s: 0, -EINVAL,
 * -ENOTSUP. */
int tl__connect_opts_check(tl_loop *loop, const tl_addr *dst, const tl_connect_opts *o,
			   struct tl_open_spec *s);

/* Start l's driver (select.c): the one cfg names, else the process's
 * driver, chosen by the first such loop (contract 10). Sets *dv and *d.
 * 0, -EINVAL, -ENOTSUP or the driver's error. */
int tl__driver_start(tl_loop *l, const tl_config *cfg, tl__os_notifier *wake, const struct tl_driver **dv,
		     struct tl_drv **d);

/*
 * An op the driver holds is counted in native_pending: turns poll for it and
 * tl_loop_destroy waits for it; its retirement gives the count back. Hand a
 * handle-less op (tl__op_new) to the driver as a native file request
 * (driver fs_submit): 0, or the driver's refusal, after which the op is
 * undone (tl__op_refuse) and nothing is owed.
 */
static inline int tl__op_fs_submit(tl_loop *l, struct tl_opslot *o,
				   const struct tl_fs_native_req *req)
{
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	int r = l->dv->fs_submit(l->d, o, req);
	if (r < 0)
		tl__op_refuse(l, o);
	return r;
}

/* The driver gave such an op back before its terminal (the pool runs it
 * now): it is no longer the driver's. */
static inline void tl__op_native_end(tl_loop *l, struct tl_opslot *o)
{
	o->flags &= (uint16_t)~TL_OPF_NATIVE;
	l->native_pending--;
}

/* Queue h's Closed if it is closing and nothing of it is left (loop.c). */
void tl__maybe_closed(tl_loop *loop, struct tl_hslot *h);

/* Splices (splice.c, contract 4.11). */
/* Set up the pipe pool's slots (none is made yet): 0 or -ENOMEM. */
int tl__pipes_init(tl_loop *loop);
/* Close every pipe and free the slots. */
void tl__pipes_free(tl_loop *loop);
/* A splice op leaves the active table: give back its pipe, its queued
 * write bytes and its hold on the source. */
void tl__splice_retire(tl_loop *loop, struct tl_opslot *op);

/* Shared by streams (stream.c) and datagrams (dgram.c). */
/* h if id is a live handle of type that is not closing; else NULL and
 * *err -ENOENT (stale, foreign) or -EINVAL. */
struct tl_hslot *tl__stream_get(tl_loop *loop, tl_handle id, int type, int *err);
/* Hand a prepared op to the driver, undoing it if refused: 0 and *oid, or
 * the driver's error. */
int tl__stream_submit(tl_loop *loop, struct tl_hslot *h, struct tl_opslot *o, tl_op *oid);
/* Open a handle that needs no operation to exist (listener, UDP socket). */
int tl__open_bound(tl_loop *loop, uint8_t type, const struct tl_open_spec *s, tl_handle *out);
/* 1 if a is an IPv4 or IPv6 address. */
int tl__valid_addr(const tl_addr *a);

/* Per-stream caps (caps.c, contract 4.10). */
#define TL_MAX_WRITE_CAP (1ull << 40)
/* Set a new handle's caps: the config's, or those of from (its listener). */
void tl__caps_init(tl_loop *loop, struct tl_hslot *h, const struct tl_hslot *from);
/* Stream h reads into pooled buffers from now on: a lease is reserved for
 * it until it is freed. */
void tl__caps_reader(tl_loop *loop, struct tl_hslot *h);
/* A read record of stream h carries lease: it counts against h. */
void tl__caps_lease(tl_loop *loop, struct tl_hslot *h, uint32_t lease);
/* lease came back from the host: uncount it from its stream, if any. */
void tl__caps_lease_back(tl_loop *loop, uint32_t lease);
/* Write bytes queued on h grew (delta > 0) or completed (delta < 0). */
void tl__caps_write(tl_loop *loop, struct tl_hslot *h, int64_t delta);
/* h is being freed: forget its pause and its reservation. */
void tl__caps_release(tl_loop *loop, struct tl_hslot *h);
/* (tl__caps_room, in drivers/driver.h: tl_turn calls it before its poll
 * while reads wait for the surplus.) */

/* Deadlines (deadline.c: idle deadlines per stream, deadlines per read and
 * per connect; contract 2.4, 4.9). */
int tl__dl_init(tl_loop *loop);
void tl__dl_free(tl_loop *loop);
/* Give live op the deadline at (absolute), replacing any it had. */
void tl__dl_op_arm(tl_loop *loop, struct tl_opslot *op, uint64_t at);
/* A handle slot is being freed: forget its idle deadline. */
void tl__dl_release(tl_loop *loop, struct tl_hslot *h);
/* Start the idle periods the restart list holds at now (a clock reading
 * no earlier than any of the events that put them there). */
void tl__dl_resolve(tl_loop *loop, uint64_t now);
/* Act on every deadline due at now. 0, or the driver's refusal of a
 * cancellation (that deadline stays due and the next turn retries). */
int tl__dl_expire(tl_loop *loop, uint64_t now);
/* The earliest deadline in the heap (UINT64_MAX: none). */
uint64_t tl__dl_next(const tl_loop *loop);

/* A turn's deadline work at now: tl__dl_resolve, then tl__dl_expire (its
 * result), each only when there is something for it (idle periods to
 * start, an entry due), so that most turns make neither call. */
static inline int tl__dl_step(tl_loop *l, uint64_t now)
{
	if (l->dl.restart != TL_NIL)
		tl__dl_resolve(l, now);
	const struct tl_heap_ent *e = tl__heap_top(&l->dl.heap);
	return e && e->at <= now ? tl__dl_expire(l, now) : 0;
}

/* The op no longer has a deadline (it ended, or its end was asked for). */
static inline void tl__dl_op_disarm(tl_loop *l, struct tl_opslot *o)
{
	if (o->flags & TL_OPF_DEADLINE) {
		o->flags &= (uint16_t)~TL_OPF_DEADLINE;
		tl__heap_remove(&l->dl.heap, l->dl.hbase + o->idx);
	}
}

/* A new idle period of h starts at the loop's next clock reading: one
 * store when h is already on the restart list, three when it is not. */
static inline void tl__dl_touch(tl_loop *l, const struct tl_hslot *h)
{
	struct tl_idle *s = &l->dl.h[h->idx];
	if (s->idle_ns && !(s->flags & TL_IDLE_RESTART)) {
		s->flags |= TL_IDLE_RESTART;
		s->next = l->dl.restart;
		l->dl.restart = h->idx;
	}
}

/* An op of h was accepted by the driver; first: h had no op pending
 * before it. A period starts if none was running. */
static inline void tl__dl_submitted(tl_loop *l, const struct tl_hslot *h, int first)
{
	if (tl_unlikely(l->dl.nidle) &&
	    (first || (l->dl.h[h->idx].flags & TL_IDLE_LAPSED)))
		tl__dl_touch(l, h);
}

/* Hand an op of handle h (tl__op_new) to the driver, as stream.c's own
 * submissions go: 0 and *id, or the driver's refusal, after which the op is
 * undone and nothing is owed. The driver may complete it at once; the id
 * stays valid for the caller. */
static inline int tl__op_submit(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o, tl_op *id)
{
	o->flags |= TL_OPF_NATIVE;
	l->native_pending++;
	tl_op oid = tl__op_id(l, o);
	int first = h->pending == 1; /* o is the only op of h */
	int r = l->dv->submit(l->d, h, o);
	if (r < 0) {
		tl__op_refuse(l, o);
		return r;
	}
	tl__dl_submitted(l, h, first);
	*id = oid;
	return 0;
}

#endif
