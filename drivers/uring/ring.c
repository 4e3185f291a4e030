/* drivers/uring/ring.c: the io_uring driver's ring: setup with the best flags the kernel takes, and the turn (one enter, then the CQEs). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "uring_int.h"
#include "os.h"

/*
 * Ops do not reach the kernel from submit(): they join a start list, and
 * poll() turns the list into SQEs right before its single io_uring_enter,
 * which submits them and waits in the same call. So every write a host
 * issues in one turn on one socket leaves in one send, and a turn costs one
 * system call however much it did. (Connects and file requests are the
 * exception: their SQE is prepared at submit, and the enter submits it.)
 *
 * The CQ is four times the SQ; what does not fit is kept by the kernel
 * (IORING_FEAT_NODROP) and poll() pulls it in. A multishot request that the
 * kernel ends (CQ full, an error that leaves the op usable) is re-armed
 * while its op is wanted. Nonterminal events wait in the CQ when the core
 * has no room for them this turn.
 */

uint64_t tl__ur_now(struct tl_drv *d)
{
	(void)d;
	return tl__os_mono_ns();
}

/* Make the SQEs prepared so far visible to the kernel; returns how many it
 * has not consumed yet.
 * Not liburing's own: 2.3 keeps this step (__io_uring_flush_sq) internal. */
static unsigned flush_sq(struct io_uring *r)
{
	unsigned tail = r->sq.sqe_tail;
	if (r->sq.sqe_head != tail) {
		r->sq.sqe_head = tail;
		io_uring_smp_store_release(r->sq.ktail, tail);
	}
	return tail - IO_URING_READ_ONCE(*r->sq.khead);
}

/* One io_uring_enter: submit, run deferred completions, and wait for
 * wait_nr CQEs at most until ts (NULL: no limit).
 * Not io_uring_submit_and_wait_timeout: it peeks the CQ and may enter twice. */
static int enter(struct tl_drv *d, unsigned submit, unsigned wait_nr,
		 const struct __kernel_timespec *ts)
{
	struct io_uring_getevents_arg arg = {.ts = (uint64_t)(uintptr_t)ts};
	unsigned flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
	int fd = d->ring.ring_fd;
	if (d->reg_ring) {
		fd = d->ring.enter_ring_fd;
		flags |= IORING_ENTER_REGISTERED_RING;
	}
	d->st.enters++;
	return io_uring_enter2((unsigned)fd, submit, wait_nr, flags, (sigset_t *)&arg, sizeof arg);
}

/* valgrind (3.19) holds its global lock across io_uring_enter, so a thread
 * blocked there freezes every other thread of the program (a waker, say) for
 * good. Under valgrind the blocking part of a wait is a ppoll on an eventfd
 * registered with the ring, which the kernel signals when completions or
 * deferred completion work arrive; enters around it never block. */
static int vg_wait(struct tl_drv *d, unsigned submit, const struct __kernel_timespec *ts)
{
	int r = enter(d, submit, 0, NULL);
	uint64_t v;
	ssize_t got = read(d->vg_efd, &v, sizeof v); /* forget signals already seen */
	(void)got;
	if (io_uring_cq_ready(&d->ring) ||
	    (IO_URING_READ_ONCE(*d->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)))
		return r;
	/* The wake eventfd too: another thread's wake must end the wait even
	 * where the kernel does not signal the ring's eventfd for the deferred
	 * task work of the wake poll (shards parked under valgrind hung). */
	struct pollfd pf[2] = {{.fd = d->vg_efd, .events = POLLIN},
			       {.fd = tl__os_notifier_fd(d->wake), .events = POLLIN}};
	struct timespec t;
	if (ts) {
		t.tv_sec = ts->tv_sec;
		t.tv_nsec = ts->tv_nsec;
	}
	if (ppoll(pf, 2, ts ? &t : NULL, NULL) < 0 && errno != EINTR)
		return -errno;
	return enter(d, 0, 0, NULL);
}

static int arm_wake(struct tl_drv *d)
{
	struct io_uring_sqe *s = sqe_get(d);
	if (!s)
		return -ENOBUFS;
	io_uring_prep_poll_multishot(s, tl__os_notifier_fd(d->wake), POLLIN);
	io_uring_sqe_set_data64(s, (uint64_t)TAG_WAKE << TAG_SHIFT);
	d->wake_armed = 1;
	return 0;
}

static void drain_wake(struct tl_drv *d, unsigned cf)
{
	tl__os_notifier_drain(d->wake);
	if (!(cf & IORING_CQE_F_MORE))
		d->wake_armed = 0; /* run_starts re-arms it */
}

/* Turn the start list into SQEs (and re-arm the wake poll if it ended). */
static void run_starts(struct tl_drv *d)
{
	if (!d->wake_armed && arm_wake(d) < 0)
		return;
	while (d->start.head != TL_NIL) {
		struct tl_opslot *o = OP(d, d->start.head);
		if (!opdef(o)->issue(d, HS(d, o->hidx), o))
			break;
	}
}

void tl__ur_flush_embed(struct tl_drv *d)
{
	run_starts(d);
	if (io_uring_sq_ready(&d->ring))
		io_uring_submit(&d->ring);
}

/* ---- completions ---- */

/* The op a CQE belongs to, or NULL when it is stale. */
static struct tl_opslot *op_of(struct tl_drv *d, uint64_t ud)
{
	uint32_t idx = (uint32_t)ud & (TL_ID_MAX_SLOTS - 1);
	if (idx >= d->max_ops)
		return NULL;
	struct tl_opslot *o = OP(d, idx);
	if (!(o->flags & TL_OPF_LIVE) || o->gen != (uint16_t)(ud >> TL_ID_SLOT_BITS) ||
	    UO(o)->st != ST_KERNEL)
		return NULL;
	return o;
}

/* Would this CQE of o become a nonterminal event (and so need room)? */
static int wants_room(const struct tl_opslot *o, int res)
{
	/* After a cancel, a read's bytes still become a nonterminal record
	 * (contract 2.5, tl__op_event); nothing else of the op does. */
	if (o->flags & TL_OPF_CANCEL)
		return res > 0 && opdef(o)->reads;
	if (o->code == TL_OP_POLL)
		return o->poll.multi && res >= 0;
	if (!(o->flags & TL_OPF_MULTI))
		return 0;
	if (o->code == TL_OP_READ)
		return res > 0;
	if (o->code == TL_OP_ACCEPT)
		return res >= 0 || accept_soft(-res);
	if (o->code == TL_OP_RECV)
		return res >= 0;
	return 0;
}

/* A CQE that belongs to no op: the wake poll, the embed timeout, an
 * ASYNC_CANCEL's own result, or an op's CQE whose op is gone. */
static void on_other(struct tl_drv *d, const struct io_uring_cqe *c)
{
	switch (c->user_data >> TAG_SHIFT) {
	case TAG_WAKE:
		drain_wake(d, c->flags);
		break;
	case TAG_TIMER:
		/* Fired or removed: either way the one we track is gone. */
		if ((c->user_data & 0xffffffffu) == (d->tmo_seq & 0xffffffffu)) {
			d->tmo_armed = 0;
			d->tmo_at = UINT64_MAX;
		}
		break;
	case TAG_OP:
		/* Stale: keep the buffer it may hold. */
		if (c->flags & IORING_CQE_F_BUFFER) {
			d->br_avail--;
			recycle(d, c->flags >> IORING_CQE_BUFFER_SHIFT);
		}
		break;
	default: /* ASYNC_CANCEL results: the target's own CQE is what counts */
		break;
	}
}

static void on_op(struct tl_drv *d, struct tl_opslot *o, const struct io_uring_cqe *c)
{
	if (!(c->flags & IORING_CQE_F_MORE) && UO(o)->cancel_sent) {
		UO(o)->cancel_sent = 0;
		d->st.kernel_acks++;
	}
	const struct ur_opdef *def = opdef(o);
	d->cqe_ud = c->user_data;
	def->complete(d, def->nohandle ? NULL : HS(d, o->hidx), o, c->res, c->flags);
}

/* Take CQEs in order until the CQ is empty or a nonterminal event finds no
 * room (then it and those behind it stay in the CQ for the next turn). */
static uint32_t reap(struct tl_drv *d, int *stopped)
{
	struct io_uring *r = &d->ring;
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	io_uring_for_each_cqe(r, head, cqe) {
		/* A copy: the head moves past it (one CQE at a time, as the
		 * walk may stop at any CQE) before the handler runs. */
		struct io_uring_cqe c = *cqe;
		struct tl_opslot *o = NULL;
		if (c.user_data >> TAG_SHIFT == TAG_OP) {
			o = op_of(d, c.user_data);
			if (o && wants_room(o, c.res) && !tl__drv_room(d->loop)) {
				d->st.room_stops++;
				*stopped = 1;
				return n;
			}
		}
		io_uring_cq_advance(r, 1);
		n++;
		if (o)
			on_op(d, o, &c);
		else
			on_other(d, &c);
	}
	return n;
}

/* What the turn queued goes to the kernel now; its completions are left
 * for the next poll to reap. */
void tl__ur_flush(struct tl_drv *d)
{
	run_starts(d);
	unsigned submit = flush_sq(&d->ring);
	if (submit)
		(void)enter(d, submit, 0, NULL);
}

int tl__ur_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	struct io_uring *r = &d->ring;
	if (tl_unlikely(d->fdwait.head != TL_NIL)) {
		uint64_t now = tl__ur_now(d);
		if (now >= d->fdwait_at)
			tl__ur_retry_fdwait(d);
		else if (timeout_ns < 0 || (uint64_t)timeout_ns > d->fdwait_at - now)
			timeout_ns = (int64_t)(d->fdwait_at - now);
	}
	d->polls++;
	uint32_t queued = tl__drv_queued(d->loop);
	int deferred = tl__ur_sort_reads(d);
	run_starts(d);
	unsigned submit = flush_sq(r);
	unsigned kf = IO_URING_READ_ONCE(*r->sq.kflags);
	/* CQEs already there (left by a turn that ran out of room, or
	 * overflowed), or ops that finished while being issued (a splice
	 * whose socket had room, splice.c): never block on top of them. */
	int block = timeout_ns != 0 && !deferred && tl__drv_queued(d->loop) == queued &&
		    !io_uring_cq_ready(r) && !(kf & IORING_SQ_CQ_OVERFLOW);
	int ret = 0;
	if (block) {
		struct __kernel_timespec ts;
		if (timeout_ns > 0) {
			ts.tv_sec = timeout_ns / 1000000000;
			ts.tv_nsec = timeout_ns % 1000000000;
		}
		info->waits++;
		if (d->vg_efd >= 0)
			ret = vg_wait(d, submit, timeout_ns > 0 ? &ts : NULL);
		else
			ret = enter(d, submit, 1, timeout_ns > 0 ? &ts : NULL);
	} else {
		info->discovery_polls++;
		/* With TASKRUN_FLAG the kernel says when deferred completions
		 * wait for us; otherwise a peek at the CQ is all it takes. */
		if (submit || (kf & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)))
			ret = enter(d, submit, 0, NULL);
	}
	if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY &&
	    ret != -ENOMEM)
		return ret;
	int stopped = 0;
	uint32_t n = reap(d, &stopped);
	/* The kernel kept CQEs that did not fit (IORING_FEAT_NODROP): pull them
	 * in while there is room, or they would wait for the next enter. */
	while (!stopped && io_uring_cq_has_overflow(r)) {
		d->st.overflow_flushes++;
		enter(d, flush_sq(r), 0, NULL);
		uint32_t k = reap(d, &stopped);
		n += k;
		if (!k)
			break;
	}
	if (block && !n)
		info->zero_event_waits++;
	if (d->embed)
		tl__ur_flush_embed(d);
	return 0;
}

/* ---- embedded loops ---- */

int tl__ur_embed_fd(struct tl_drv *d)
{
	return d->ring.ring_fd;
}

/* Nobody waits in poll() for an embedded loop: a timeout request posts a
 * CQE at the next deadline so that the ring fd turns readable then. Each
 * deadline gets a fresh request (its sequence number in user_data) and the
 * previous one is removed, so a late CQE of an old one is recognised. */
void tl__ur_embed_deadline(struct tl_drv *d, uint64_t at)
{
	if (at == d->tmo_at)
		return;
	if (d->tmo_armed) {
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			return;
		io_uring_prep_timeout_remove(s, (uint64_t)TAG_TIMER << TAG_SHIFT | (d->tmo_seq & 0xffffffffu),
					     0);
		io_uring_sqe_set_data64(s, (uint64_t)TAG_TIMER_CTL << TAG_SHIFT);
		d->tmo_armed = 0;
	}
	d->tmo_at = UINT64_MAX;
	if (at != UINT64_MAX) {
		struct io_uring_sqe *s = sqe_get(d);
		if (!s)
			return;
		union ur_scratch *sc = scratch_of(d, s);
		sc->ts.tv_sec = (long long)(at / 1000000000u);
		sc->ts.tv_nsec = (long long)(at % 1000000000u);
		io_uring_prep_timeout(s, &sc->ts, 0, IORING_TIMEOUT_ABS);
		d->tmo_seq++;
		io_uring_sqe_set_data64(s, (uint64_t)TAG_TIMER << TAG_SHIFT | (d->tmo_seq & 0xffffffffu));
		d->tmo_armed = 1;
		d->tmo_at = at;
	}
	tl__ur_flush_embed(d);
}

/* ---- setup ---- */

/* Set the ring up with the best flags the kernel takes. Each refusal
 * (-EINVAL: a flag it does not know) drops the newest flag still asked for
 * and tries again; other errors (EPERM from a sysctl or seccomp, ENOMEM,
 * ENOSYS) mean no io_uring at all. */
static int setup_ring(struct tl_drv *d, uint32_t sq, uint32_t cq, int embed)
{
	/* Newest first: a kernel that lacks one flag lacks every newer one. */
	uint32_t order[] = {
		tl__ur_debug.extra_flags,
		IORING_SETUP_DEFER_TASKRUN, /* 6.1: completions run only when we enter */
		IORING_SETUP_SINGLE_ISSUER, /* 6.0 */
		IORING_SETUP_TASKRUN_FLAG,  /* 5.19: lets a discovery poll skip the syscall */
		IORING_SETUP_COOP_TASKRUN,  /* 5.19: no IPI to run completions */
		IORING_SETUP_SUBMIT_ALL,    /* 5.18 */
		IORING_SETUP_CQSIZE,        /* 5.5 */
	};
	uint32_t flags = IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP | IORING_SETUP_SUBMIT_ALL |
			 IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
			 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			 tl__ur_debug.extra_flags;
	/* An embedded loop's ring fd must turn readable on its own while the
	 * host sleeps elsewhere: completions may not wait for our enter
	 * (DEFER_TASKRUN) nor for the next kernel entry (COOP_TASKRUN). */
	if (embed)
		flags &= ~(IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN |
			   IORING_SETUP_TASKRUN_FLAG);
	for (size_t k = 0;;) {
		struct io_uring_params p;
		memset(&p, 0, sizeof p);
		p.flags = flags;
		p.cq_entries = cq;
		int r = io_uring_queue_init_params(sq, &d->ring, &p);
		if (r == 0) {
			d->flags = flags;
			if ((p.features & (IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG |
					   IORING_FEAT_FAST_POLL | IORING_FEAT_SUBMIT_STABLE)) !=
			    (IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG | IORING_FEAT_FAST_POLL |
			     IORING_FEAT_SUBMIT_STABLE)) {
				io_uring_queue_exit(&d->ring);
				return -ENOTSUP;
			}
			return 0;
		}
		if (r != -EINVAL)
			return r;
		while (k < sizeof order / sizeof order[0] && !(flags & order[k]))
			k++;
		if (k == sizeof order / sizeof order[0])
			return r;
		flags &= ~order[k];
		d->dropped |= order[k];
		/* DEFER_TASKRUN needs SINGLE_ISSUER; TASKRUN_FLAG needs one of
		 * the two task-run modes. */
		if (!(flags & IORING_SETUP_SINGLE_ISSUER))
			flags &= ~IORING_SETUP_DEFER_TASKRUN;
		if (!(flags & (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN)))
			flags &= ~IORING_SETUP_TASKRUN_FLAG;
	}
}

/* Multishot receive (Linux 6.0) has no feature bit; IORING_OP_SEND_ZC came
 * in the same release, and the probe knows it. */
static int has_multishot_recv(struct io_uring *r)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(r);
	if (!p)
		return 0;
	int ok = io_uring_opcode_supported(p, IORING_OP_SEND_ZC);
	io_uring_free_probe(p);
	return ok;
}

void tl__ur_destroy(struct tl_drv *d)
{
	tl__ur_kbuf_exit(d);
	io_uring_queue_exit(&d->ring);
	if (d->vg_efd >= 0)
		close(d->vg_efd);
	free(d->br);
	free(d->scr);
	free(d->msg);
	free(d->fdm);
	tl__ur_dg_exit(d);
	free(d->spare);
	free(d);
}

int tl__ur_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out)
{
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->wake = wake;
	d->embed = cfg->embed;
	d->max_ops = cfg->max_ops;
	d->ops = tl__drv_op(loop, 0);
	d->hs = tl__drv_handle(loop, 0);
	d->lpool = tl__drv_lease_pool(loop);
	d->vg_efd = -1;
	d->tmo_at = UINT64_MAX;
	d->start = d->bufwait = d->fdwait = d->later = d->defer = d->paused = (struct ur_list){TL_NIL, TL_NIL};
	d->send_flags = MSG_NOSIGNAL | (tl__ur_debug.no_waitall ? 0 : MSG_WAITALL);
	/* The SQ holds what one turn prepares (it is flushed when full); the CQ
	 * absorbs multishot bursts between turns, and overflow beyond it is
	 * kept by the kernel (IORING_FEAT_NODROP) and pulled in by poll. */
	uint32_t sq = pow2_at_least(2 * cfg->events_per_turn);
	sq = sq < 128 ? 128 : sq > 4096 ? 4096 : sq;
	uint32_t cq = 4 * sq;
	if (tl__ur_debug.sq_entries)
		sq = tl__ur_debug.sq_entries;
	if (tl__ur_debug.cq_entries)
		cq = tl__ur_debug.cq_entries;
	int r = setup_ring(d, sq, cq, cfg->embed);
	if (r < 0) {
		free(d);
		return r;
	}
	r = -ENOTSUP;
	if (!has_multishot_recv(&d->ring))
		goto fail;
	d->fs_ok = tl__ur_debug.no_fs_native ? 0 : tl__ur_probe_fs(&d->ring);
	/* Enter by registered index: no file lookup per io_uring_enter. */
	d->reg_ring = io_uring_register_ring_fd(&d->ring) == 1;

	d->scr = calloc(d->ring.sq.ring_entries, sizeof *d->scr);
	d->msg = calloc(cfg->max_ops, sizeof *d->msg);
	d->fdm = calloc(cfg->max_ops, sizeof *d->fdm);
	r = -ENOMEM;
	if (!d->scr || !d->msg || !d->fdm)
		goto fail;
	if ((r = tl__ur_kbuf_init(d)) < 0)
		goto fail;
	if ((r = tl__ur_dg_init(d)) < 0)
		goto fail;
	if ((r = arm_wake(d)) < 0)
		goto fail;
	d->vg = under_valgrind() != 0;
	if (d->vg) {
		d->vg_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (d->vg_efd >= 0 && io_uring_register_eventfd(&d->ring, d->vg_efd) < 0) {
			close(d->vg_efd);
			d->vg_efd = -1;
		}
	}
	if (d->embed)
		io_uring_submit(&d->ring);
	d->st.sq_entries = d->ring.sq.ring_entries;
	d->st.cq_entries = d->ring.cq.ring_entries;
	d->st.buf_entries = d->br_entries;
	*out = d;
	return 0;
fail:
	tl__ur_destroy(d);
	return r;
}
