/* lib/turn.c: the turn: timers, deadlines (deadline.c), room waits, posts, and handing completions out. */
#include <errno.h>
#include <string.h>
#include "sysmod.h"

/* ---- timers ---- */

int tl_timer_start(tl_loop *l, uint64_t at, uint64_t repeat, uint64_t token, tl_handle *hid,
		   tl_op *oid)
{
	if (!hid || !oid)
		return -EINVAL;
	struct tl_hslot *h = tl__handle_new(l, TL_H_TIMER);
	if (!h)
		return -ENOBUFS;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_TIMER, TL_K_TIMER, token, &o);
	if (r < 0) {
		tl__handle_free(l, h);
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
	struct tl_hslot *h = tl__handle_get(l, id);
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
			tl__op_event(l, o, 0, 0, TL_NO_LEASE);
		} else {
			tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
		}
	}
}

static uint64_t next_deadline(tl_loop *l)
{
	uint64_t d = UINT64_MAX;
	const struct tl_heap_ent *e = tl__heap_top(&l->timers);
	if (e)
		d = e->at;
	uint64_t dd = tl__dl_next(l);
	if (dd < d)
		d = dd;
	uint64_t m = tl__sys_deadline(l);
	return m < d ? m : d;
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
		tl__op_refuse(l, o);
		return r;
	}
	if (r == 1) {
		/* The target drained since the refused post: room now. */
		*oid = tl__op_id(l, o);
		tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
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

void tl__run_room(tl_loop *l)
{
	/* Most turns have no room signal: a plain load, no locked exchange. */
	if (!atomic_load_explicit(&l->poster->room_bits, memory_order_relaxed))
		return;
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
		tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
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

static int work_ready(tl_loop *l)
{
	return l->qlen || tl__mpsc_ready(&l->poster->posts) ||
	       atomic_load_explicit(&l->poster->room_bits, memory_order_relaxed) ||
	       (l->pool_ready && l->pool_ready(l)) || tl__sys_ready(l);
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

/* The spin before a park (tl_config.spin_ns): discovery polls until
 * native events come, other work is ready, a wake came (the loop is parked
 * meanwhile: a poll takes the notifier's event, so the poster's state is
 * what says so) or spin_ns (or the wait t, if shorter) has passed since
 * start. Returns SPUN when the loop must not
 * park (work came, or the spin used up t), else what is left of t for the
 * OS wait. */
#define SPUN INT64_MIN
static int64_t spin(tl_loop *l, uint64_t start, int64_t t, struct tl_poll_info *pi)
{
	uint32_t before = l->buffered[TL_CLS_NATIVE];
	uint64_t until = start + l->spin;

	l->st.spins++;
	if (t > 0 && (uint64_t)t < l->spin)
		until = start + (uint64_t)t;
	for (;;) {
		if (l->dv->poll(l->d, 0, pi) < 0)
			return 0; /* the OS wait says the error again */
		if (l->buffered[TL_CLS_NATIVE] != before || work_ready(l) ||
		    tl__poster_woken(l->poster))
			return SPUN;
		uint64_t now = l->dv->now(l->d);
		if (now >= until) {
			l->st.spin_parks++;
			if (t < 0)
				return -1;
			return now - start >= (uint64_t)t ? SPUN : (int64_t)(start + (uint64_t)t - now);
		}
	}
}

/* The nap before a park (tl_config.nap_ns): while events come in batches
 * (the turn's last poll gathered at least NAP_BATCH native records) of
 * small reads (NAP_READ_BYTES or fewer on average), a turn
 * about to park hands the OS what its handlers submitted (the driver's
 * flush: io_uring submits at its poll, and a nap before that would hold
 * their sends back), sleeps nap_ns (or t, if shorter) on a timer, as no
 * waiter of its OS objects, then polls once without blocking (a wake that
 * came meanwhile ends the turn, as in the spin). A sender of native events
 * finds nobody to wake, and what came meanwhile is taken as one batch. The
 * batch that poll gathers (or, if it found nothing, the OS wait after it)
 * decides the next nap: a client that waits for each answer, one record at
 * a time, is not made to wait a nap for it. Nor is a loop with a handle
 * paused at its caps (contract 4.10) or a pool with no lease to spare, whose
 * leases come back as the loop's own sends complete. (A datagram receive
 * kept under its cap with fewer requests in the kernel is not paused, and
 * on io_uring its sends' completions wait out the nap: loopback DNS through
 * tlproxy served a fifth of its rate while its listening sockets had a cap
 * of 8; with 64 it serves 0.8-0.9 of it, docs/PERFORMANCE.md.) Bulk
 * transfers gain nothing from a nap: a batch of full reads already carries
 * enough work to pay for its turn, and a bigger one costs more to process
 * (TLS through tlproxy, 1 MiB answers: naps of 10-50 us took 43 records a
 * turn instead of 6 and 5-10% more CPU per MiB; no nap after such batches
 * gave back the CPU of not napping at all, while small requests kept their
 * naps' savings; docs/PERFORMANCE.md). Returns
 * SPUN when the loop must not park (work came, or the nap used up t), else
 * what is left of t for the OS wait; *napped is the time slept. */
#define NAP_BATCH 2
#define NAP_READ_BYTES 4096
static int64_t nap(tl_loop *l, uint64_t start, int64_t t, struct tl_poll_info *pi,
		   uint64_t *napped)
{
	uint64_t ns = t > 0 && (uint64_t)t < l->nap ? (uint64_t)t : l->nap;
	uint32_t before = l->buffered[TL_CLS_NATIVE];

	/* First what this turn's handlers asked for goes out (io_uring submits
	 * at its poll): sends do not wait out the nap. */
	if (l->dv->flush)
		l->dv->flush(l->d);
	if (work_ready(l))
		return SPUN; /* the flush finished something */
	l->st.naps++;
	uint64_t t0 = l->dv->now(l->d);
#ifndef _WIN32
	tl__os_nap_ns(ns);
#else
	(void)ns; /* never: loops do not nap on Windows (lib/loop.c) */
#endif
	uint64_t now = l->dv->now(l->d);
	*napped = now - t0;
	if (l->dv->poll(l->d, 0, pi) < 0)
		return t; /* the OS wait says the error again */
	if (l->buffered[TL_CLS_NATIVE] != before || work_ready(l) ||
	    tl__poster_woken(l->poster))
		return SPUN;
	l->st.nap_parks++;
	if (t < 0)
		return -1;
	return now - start >= (uint64_t)t ? SPUN : (int64_t)(start + (uint64_t)t - now);
}

int tl_turn(tl_loop *l, int64_t timeout_ns, tl_completion *out, uint32_t cap,
	    tl_turn_info *info)
{
	if (!out || !cap)
		return -EINVAL;
	struct tl_poll_info pi = {0};
	int notified = tl__poster_begin(l->poster);
	if (tl_unlikely(l->close_retry))
		tl__retry_closes(l);
	if (tl_unlikely(l->lpool.starved))
		tl__caps_room(l);
	uint64_t start = l->dv->now(l->d);
	int r = tl__dl_step(l, start);
	if (r < 0)
		return r;
	int queued = work_ready(l);
	/* Queued work forbids blocking and allows one zero-timeout discovery
	 * poll, only while native operations are pending (contract 1.6). */
	int native_step = !queued || l->native_pending;
	uint64_t idle = 0, napped = 0;
	if (l->buffered[TL_CLS_NATIVE] < l->cfg.events_per_turn && native_step) {
		uint32_t mark = l->buffered[TL_CLS_NATIVE], rmark = l->in_reads;
		uint64_t bmark = l->in_bytes;
		int64_t t = timeout_ns;
		uint64_t dl = next_deadline(l);
		if (dl != UINT64_MAX) {
			int64_t until = dl > start ? (int64_t)(dl - start) : 0;
			if (t < 0 || until < t)
				t = until;
		}
		if (t != 0 && (queued || notified || tl__poster_park(l->poster)))
			t = 0;
		if (t != 0 && l->spin)
			t = spin(l, start, t, &pi);
		if (t != 0 && t != SPUN && l->nap && l->batch >= NAP_BATCH &&
		    l->batch_bytes <= (uint64_t)NAP_READ_BYTES * l->batch_reads &&
		    !l->st.paused && !l->lpool.starved &&
		    (t = nap(l, start, t, &pi, &napped)) != SPUN) {
			/* the park's batch counts */
			mark = l->buffered[TL_CLS_NATIVE];
			rmark = l->in_reads;
			bmark = l->in_bytes;
		}
		r = t == SPUN ? 0 : l->dv->poll(l->d, t, &pi);
		tl__poster_running(l->poster);
		if (r < 0)
			return r;
		l->batch = l->buffered[TL_CLS_NATIVE] - mark;
		l->batch_reads = l->in_reads - rmark;
		l->batch_bytes = l->in_bytes - bmark;
	}
	/* One reading after the poll: where its wait ended, and the turn's now.
	 * Progress the poll reported happened before it. */
	uint64_t now = l->dv->now(l->d);
	if (pi.waits)
		idle = now - start;
	else
		idle = napped;
	r = tl__dl_step(l, now);
	run_timers(l, now);
	tl__sys_run(l, now);
	if (l->pool_drain)
		l->pool_drain(l, l->cfg.events_per_turn);
	tl__run_room(l);
	run_posts(l);
	uint32_t n = tl__drain(l, out, cap);
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

