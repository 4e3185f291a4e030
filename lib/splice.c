/* lib/splice.c: splices from stream to stream and from file to stream (contract 4.11): the loop's pipe pool, submission, and what drivers report. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "core.h"

/*
 * A splice is a write to dst whose bytes come from src through a kernel
 * pipe, so it lives where writes live: in dst's op list and dst's write
 * queue in the driver, ordered with dst's writes. While it may still read
 * src it is also on src's list of splices (h->spl_head): closing src
 * cancels it, and src's Closed waits until it let go of src's descriptor
 * (tl__drv_splice_src_done, or its terminal). Until then it is src's only
 * reader: reads and splices to other streams are refused, because two
 * readers of one socket would split its bytes between them in no order
 * anybody could rely on.
 *
 * The pool. Each loop has up to cfg.pipes pipes of cfg.pipe_size bytes.
 * A slot's pipe is made the first time a splice needs one and no made
 * pipe is free, and kept until the loop is destroyed: a loop that never
 * splices holds no pipe and no descriptor, and one that does stops
 * creating pipes once it has as many as its busiest moment needed. A
 * splice takes a pipe at submission and gives it back at its terminal,
 * empty; a pipe that still holds bytes then (dst closed or failed while
 * they were in it) is closed instead and its slot made again later, which
 * is cheaper than reading it empty and rare.
 *
 * The kernel charges pipe pages to their user, and an unprivileged user
 * over fs.pipe-user-pages-soft (16384 pages, 64 MiB) gets new pipes of two
 * pages and may not grow any (F_SETPIPE_SZ is -EPERM). So, not as root, a
 * loop uses only as many slots as that budget holds, and a pipe that
 * cannot grow to cfg.pipe_size is tried at half the size, down to
 * PIPE_MIN; one that cannot have even that is closed, the splice is
 * refused with -ENOBUFS (and counted) and the slot is tried again by a
 * later splice. Root is not limited by the kernel, and the pool is not
 * either then. Several loops of a process (or other programs of the user)
 * share the budget, which no loop can see: the fallback is what keeps
 * them working at the limit.
 */

#define PIPE_MIN (16u << 10)

static int os_pipes(const tl_loop *l)
{
	return (l->dv->caps & TL_CAP_OS) != 0;
}

/* The user's pipe budget in pages (fs.pipe-user-pages-soft), 0 if none
 * applies (root, no such file, or the limit is off). */
static uint64_t pipe_budget_pages(void)
{
	if (geteuid() == 0)
		return 0;
	FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "re");
	unsigned long long v = 0;
	if (f) {
		if (fscanf(f, "%llu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

int tl__pipes_init(tl_loop *l)
{
	uint32_t n = l->cfg.pipes;
	l->pipe = calloc(n, sizeof *l->pipe);
	if (!l->pipe)
		return -ENOMEM;
	l->pipe_slots = n;
	if (os_pipes(l)) {
		uint64_t pages = pipe_budget_pages();
		long pg = sysconf(_SC_PAGESIZE);
		uint64_t per = (l->cfg.pipe_size + (uint64_t)(pg > 0 ? pg : 4096) - 1) /
			       (uint64_t)(pg > 0 ? pg : 4096);
		if (pages && (uint64_t)n * per > pages)
			l->pipe_slots = (uint32_t)(pages / per);
	}
	l->pipe_free = TL_NIL;
	l->pipe_unmade = TL_NIL;
	/* Low slots first, as everywhere else. */
	for (uint32_t i = n; i-- > 0;) {
		l->pipe[i].rfd = l->pipe[i].wfd = -1;
		if (i < l->pipe_slots) {
			l->pipe[i].next = l->pipe_unmade;
			l->pipe_unmade = i;
		}
	}
	return 0;
}

static void pipe_close(tl_loop *l, struct tl_pipe *p)
{
	if (p->rfd >= 0) {
		close(p->rfd);
		close(p->wfd);
	}
	p->rfd = p->wfd = -1;
}

void tl__pipes_free(tl_loop *l)
{
	if (!l->pipe)
		return;
	for (uint32_t i = 0; i < l->cfg.pipes; i++)
		pipe_close(l, &l->pipe[i]);
	free(l->pipe);
	l->pipe = NULL;
}

/* Make slot p's pipe: 0, -ENOBUFS (the user's pipe budget does not allow
 * even PIPE_MIN) or the OS error (-EMFILE, ...). */
static int pipe_make(tl_loop *l, struct tl_pipe *p)
{
	if (!os_pipes(l)) {
		/* The simulation driver models the pipe itself. */
		p->size = l->cfg.pipe_size;
		return 0;
	}
	int fds[2];
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
		return -errno;
	uint32_t want = l->cfg.pipe_size;
	int got;
	for (;;) {
		got = fcntl(fds[1], F_SETPIPE_SZ, (int)want);
		if (got >= 0 || errno != EPERM || want / 2 < PIPE_MIN)
			break;
		want /= 2;
	}
	if (got < 0)
		got = fcntl(fds[1], F_GETPIPE_SZ);
	/* Too small to be worth a slot, unless that is what was asked for. */
	if (got < 0 || ((uint32_t)got < PIPE_MIN && (uint32_t)got < l->cfg.pipe_size)) {
		close(fds[0]);
		close(fds[1]);
		return -ENOBUFS;
	}
	p->rfd = fds[0];
	p->wfd = fds[1];
	p->size = (uint32_t)got;
	if (p->size < l->cfg.pipe_size)
		l->st.pipes_small++;
	return 0;
}

/* A free pipe for a new splice: its slot, or the refusal. */
static int pipe_take(tl_loop *l, uint32_t *out)
{
	uint32_t i = l->pipe_free;
	if (i != TL_NIL) {
		l->pipe_free = l->pipe[i].next;
	} else {
		i = l->pipe_unmade;
		int r = i == TL_NIL ? -ENOBUFS : pipe_make(l, &l->pipe[i]);
		if (r < 0) {
			if (r == -ENOBUFS)
				l->st.pipe_refusals++;
			return r;
		}
		l->pipe_unmade = l->pipe[i].next;
		l->st.pipes++;
	}
	l->st.pipes_busy++;
	*out = i;
	return 0;
}

/* Give a pipe back; one that still holds bytes is closed (see above). */
static void pipe_put(tl_loop *l, uint32_t i, uint64_t left)
{
	struct tl_pipe *p = &l->pipe[i];
	l->st.pipes_busy--;
	if (left && p->rfd >= 0) {
		pipe_close(l, p);
		l->st.pipes--;
		p->next = l->pipe_unmade;
		l->pipe_unmade = i;
		return;
	}
	p->next = l->pipe_free;
	l->pipe_free = i;
}

/* ---- the source's list ---- */

static void src_link(tl_loop *l, struct tl_hslot *s, struct tl_opslot *o)
{
	/* Appended, so that closing s cancels its splices oldest first. */
	uint32_t *at = &s->spl_head, prev = TL_NIL;
	while (*at != TL_NIL) {
		prev = *at;
		at = &l->o[*at].u.sp.snext;
	}
	*at = o->idx;
	o->u.sp.sprev = prev;
	o->u.sp.snext = TL_NIL;
	o->u.sp.src = s->idx;
}

static void src_unlink(tl_loop *l, struct tl_opslot *o)
{
	uint32_t si = o->u.sp.src;
	if (si == TL_NIL)
		return;
	struct tl_hslot *s = &l->h[si];
	if (o->u.sp.sprev == TL_NIL)
		s->spl_head = o->u.sp.snext;
	else
		l->o[o->u.sp.sprev].u.sp.snext = o->u.sp.snext;
	if (o->u.sp.snext != TL_NIL)
		l->o[o->u.sp.snext].u.sp.sprev = o->u.sp.sprev;
	o->u.sp.src = TL_NIL;
	tl__maybe_closed(l, s);
}

/* Bytes of op counted as its stream's queued write bytes now. */
static uint64_t queued(const struct tl_opslot *o)
{
	return o->u.sp.file >= 0 ? o->u.sp.max - o->u.sp.moved : o->u.sp.taken - o->u.sp.moved;
}

void tl__drv_splice_io(tl_loop *l, struct tl_opslot *o, uint32_t in, uint32_t out)
{
	uint64_t before = queued(o);
	if (o->u.sp.file >= 0)
		in = out;
	o->u.sp.taken += in;
	o->u.sp.moved += out;
	int64_t delta = (int64_t)queued(o) - (int64_t)before;
	if (delta)
		tl__caps_write(l, &l->h[o->hidx], delta);
}

void tl__drv_splice_src_done(tl_loop *l, struct tl_opslot *o)
{
	src_unlink(l, o);
}

void tl__splice_retire(tl_loop *l, struct tl_opslot *o)
{
	uint64_t q = queued(o);
	if (q)
		tl__caps_write(l, &l->h[o->hidx], -(int64_t)q);
	src_unlink(l, o);
	if (o->u.sp.pipe != TL_NIL) {
		uint64_t left = o->u.sp.taken - o->u.sp.moved;
		l->st.splice_dropped += left;
		pipe_put(l, o->u.sp.pipe, left);
		o->u.sp.pipe = TL_NIL;
	}
}

/* ---- submission ---- */

static int dst_get(tl_loop *l, tl_handle id, struct tl_hslot **out)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_STREAM || (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	*out = h;
	return 0;
}

/* May a new splice from s to d read s? Not while a read of s is pending,
 * nor while a splice from s to another stream may read it. */
static int src_free(tl_loop *l, const struct tl_hslot *s, const struct tl_hslot *d)
{
	for (uint32_t i = s->head; i != TL_NIL; i = l->o[i].next)
		if (l->o[i].code == TL_OP_READ || l->o[i].code == TL_OP_RECV_FDS)
			return 0;
	for (uint32_t i = s->spl_head; i != TL_NIL; i = l->o[i].u.sp.snext)
		if (l->o[i].hidx != d->idx)
			return 0;
	return 1;
}

int tl_splice(tl_loop *l, tl_handle sid, tl_handle did, uint32_t max, uint64_t token, tl_op *oid)
{
	if (!oid || !max)
		return -EINVAL;
	if (!(l->dv->caps & TL_CAP_SPLICE))
		return -ENOTSUP;
	struct tl_hslot *s, *d;
	int r = dst_get(l, sid, &s);
	if (r == 0)
		r = dst_get(l, did, &d);
	if (r < 0)
		return r;
	if (s == d || !src_free(l, s, d))
		return -EINVAL;
	/* A full op table is not the pool's refusal: check it first. */
	if (l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	uint32_t pi;
	if ((r = pipe_take(l, &pi)) < 0)
		return r;
	struct tl_opslot *o;
	if ((r = tl__op_new(l, d, TL_OP_SPLICE, TL_K_SPLICE, token, &o)) < 0) {
		pipe_put(l, pi, 0);
		return r;
	}
	const struct tl_pipe *p = &l->pipe[pi];
	o->u.sp.pipe = pi;
	o->u.sp.rfd = p->rfd;
	o->u.sp.wfd = p->wfd;
	o->u.sp.pipe_size = p->size;
	o->u.sp.max = max;
	o->u.sp.file = -1;
	o->u.sp.off = 0;
	o->u.sp.taken = o->u.sp.moved = 0;
	src_link(l, s, o);
	/* A refusal retires the op: the pipe and s go back (tl__splice_retire). */
	return tl__op_submit(l, d, o, oid);
}

int tl_sendfile(tl_loop *l, int file_fd, uint64_t off, uint32_t len, tl_handle did,
		uint64_t token, tl_op *oid)
{
	if (!oid || !len || file_fd < 0 || off > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (!(l->dv->caps & TL_CAP_SPLICE))
		return -ENOTSUP;
	struct tl_hslot *d;
	int r = dst_get(l, did, &d);
	if (r < 0)
		return r;
	struct tl_opslot *o;
	if ((r = tl__op_new(l, d, TL_OP_SPLICE, TL_K_SPLICE, token, &o)) < 0)
		return r;
	o->u.sp.src = o->u.sp.sprev = o->u.sp.snext = TL_NIL;
	o->u.sp.pipe = TL_NIL;
	o->u.sp.rfd = o->u.sp.wfd = -1;
	o->u.sp.pipe_size = 0;
	o->u.sp.max = len;
	o->u.sp.file = file_fd;
	o->u.sp.off = off;
	o->u.sp.taken = o->u.sp.moved = 0;
	/* What is left to send is queued for dst, as a write's bytes are. */
	tl__caps_write(l, d, (int64_t)len);
	return tl__op_submit(l, d, o, oid);
}
