/* lib/tty.c: terminals, pipes and files of the process as handles: classification, reads and writes on readiness, raw mode restored on close and at exit, window size. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include "sysmod.h"
#include "turnloop/tty.h"

/*
 * Reads and writes of a stdio handle are poll ops the core runs itself
 * (lib/sysmod.h): an op first tries its read or write at once (from the
 * ready list, after the turn's wait), and on EAGAIN hands a one-shot poll
 * of the descriptor to the driver, then tries again when it is ready. The
 * oldest op of each direction is the only one active; the next starts when
 * it ends. A file never returns EAGAIN, so its ops never reach the driver.
 */

/* A stdio handle's state (its u.sys words). */
struct stdio_h {
	uint8_t kind;    /* enum tl_stdio_kind */
	uint8_t flags;
	int16_t saved;   /* its entry in the table of saved terminal settings, or -1 */
	int32_t orig_fl; /* SF_RESTORE_FL: the open file's flags before we set O_NONBLOCK */
};
_Static_assert(sizeof(struct stdio_h) <= sizeof(((struct tl_hslot *)0)->u.sys), "stdio_h fits");
#define SF_SOCK 0x1       /* a socket: recv/send with MSG_DONTWAIT */
#define SF_RESTORE_FL 0x2 /* a shared open file we made non-blocking */

static inline struct stdio_h *SH(struct tl_hslot *h) { return (struct stdio_h *)h->u.sys; }

/* ---- saved terminal settings (process-wide) ---- */

#define TSAVE_MAX 16
static struct {
	int used, fd;
	pid_t pid;
	struct termios t;
} tsave[TSAVE_MAX];
static pthread_mutex_t tmu = PTHREAD_MUTEX_INITIALIZER;
static int atexit_done;

static void restore_at_exit(void)
{
	pid_t me = getpid();
	pthread_mutex_lock(&tmu);
	for (int i = 0; i < TSAVE_MAX; i++)
		if (tsave[i].used && tsave[i].pid == me)
			tcsetattr(tsave[i].fd, TCSANOW, &tsave[i].t);
	pthread_mutex_unlock(&tmu);
}

/* Save fd's settings (the handle's first mode change): the entry, or -1
 * with errno. */
static int tsave_add(int fd)
{
	struct termios t;
	if (tcgetattr(fd, &t) < 0)
		return -1;
	pthread_mutex_lock(&tmu);
	int i = 0;
	while (i < TSAVE_MAX && tsave[i].used)
		i++;
	if (i == TSAVE_MAX) {
		pthread_mutex_unlock(&tmu);
		errno = ENOBUFS;
		return -1;
	}
	tsave[i].used = 1;
	tsave[i].fd = fd;
	tsave[i].pid = getpid();
	tsave[i].t = t;
	if (!atexit_done)
		atexit_done = atexit(restore_at_exit) == 0;
	pthread_mutex_unlock(&tmu);
	return i;
}

static void tsave_restore(int i, int drop)
{
	pthread_mutex_lock(&tmu);
	if (tsave[i].used) {
		tcsetattr(tsave[i].fd, TCSANOW, &tsave[i].t);
		if (drop)
			tsave[i].used = 0;
	}
	pthread_mutex_unlock(&tmu);
}

/* ---- open ---- */

/* A descriptor of our own for fd: a new open of the same file where /proc
 * can make one (its own, non-blocking, open file), else a duplicate made
 * non-blocking (flags restored at release) or, for a socket, left alone. */
static int own_fd(int fd, int kind, int is_sock, struct stdio_h *s)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (kind != TL_STDIO_FILE && !is_sock) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		int acc = kind == TL_STDIO_TTY ? O_RDWR : (fl & O_ACCMODE);
		int nfd = open(path, acc | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		if (nfd >= 0)
			return nfd;
	}
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	if (is_sock) {
		s->flags |= SF_SOCK;
	} else if (kind != TL_STDIO_FILE && !(fl & O_NONBLOCK)) {
		if (fcntl(dfd, F_SETFL, fl | O_NONBLOCK) < 0) {
			int e = -errno;
			close(dfd);
			return e;
		}
		s->flags |= SF_RESTORE_FL;
		s->orig_fl = fl;
	}
	return dfd;
}

int tl_stdio_open(tl_loop *l, int fd, tl_handle *hid)
{
	if (fd < 0 || !hid)
		return -EINVAL;
	if (!tl__can_poll(l))
		return -ENOTSUP;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	int kind, is_sock = S_ISSOCK(st.st_mode);
	if (isatty(fd))
		kind = TL_STDIO_TTY;
	else if (S_ISFIFO(st.st_mode) || is_sock)
		kind = TL_STDIO_PIPE;
	else if (S_ISDIR(st.st_mode))
		return -EINVAL;
	else
		kind = TL_STDIO_FILE;
	if (l->nhandles == l->cfg.max_handles)
		return -ENOBUFS;
	struct stdio_h s = {.kind = (uint8_t)kind, .saved = -1};
	int own = own_fd(fd, kind, is_sock, &s);
	if (own < 0)
		return own;
	struct tl_hslot *h = tl__handle_new(l, TL_H_STDIO);
	h->fd = own;
	*SH(h) = s;
	*hid = tl__h_id(l, h);
	return kind;
}

void tl__tty_release(tl_loop *l, struct tl_hslot *h)
{
	struct stdio_h *s = SH(h);
	if (s->saved >= 0)
		tsave_restore(s->saved, 1);
	if (s->flags & SF_RESTORE_FL)
		fcntl(h->fd, F_SETFL, s->orig_fl);
	close(h->fd);
}

/* ---- reads and writes ---- */

/* The oldest live op of kind on h, or NULL. */
static struct tl_opslot *head_of(tl_loop *l, struct tl_hslot *h, uint8_t kind)
{
	for (uint32_t i = h->head; i != TL_NIL; i = l->o[i].next)
		if (l->o[i].kind == kind)
			return &l->o[i];
	return NULL;
}

/* An op of kind ended: the next one of that direction starts. */
static void kick(tl_loop *l, struct tl_hslot *h, uint8_t kind)
{
	struct tl_opslot *n = head_of(l, h, kind);
	if (n && !(n->flags & TL_OPF_NATIVE) && n->poll.where == TL_PW_NONE)
		tl__poll_ready(l, n, 0);
}

static void finish(tl_loop *l, struct tl_opslot *o, int64_t res, uint32_t flags)
{
	struct tl_hslot *h = &l->h[o->hidx];
	uint8_t kind = o->kind;
	tl__op_event(l, o, res, TL_F_TERMINAL | flags, TL_NO_LEASE);
	kick(l, h, kind);
}

/* Wait for readiness: the driver's poll, or (a file) the next run. */
static void wait_ready(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o)
{
	if (SH(h)->kind == TL_STDIO_FILE) {
		tl__poll_ready(l, o, 0);
		return;
	}
	int r = tl__poll_arm(l, o);
	if (r < 0)
		finish(l, o, r, 0);
}

static void do_read(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	if (multi && !tl__drv_room(l)) {
		tl__poll_ready(l, o, 0); /* the next turn */
		return;
	}
	uint32_t lease = TL_NO_LEASE, len = o->u.rw.len;
	uint8_t *buf = o->u.rw.buf;
	if (o->flags & TL_OPF_POOLED) {
		lease = tl__lease_take(l);
		if (lease == TL_NO_LEASE) {
			tl__poll_lease_wait(l, o); /* never reported: a lease wakes it */
			return;
		}
		uint32_t cnt;
		buf = tl__drv_lease_base(l, &len, &cnt) + (size_t)lease * len;
	}
	ssize_t n;
	do
		n = (SH(h)->flags & SF_SOCK) ? recv(h->fd, buf, len, MSG_DONTWAIT)
					     : read(h->fd, buf, len);
	while (n < 0 && errno == EINTR);
	int e = errno;
	if (n <= 0 && lease != TL_NO_LEASE)
		tl__drv_lease_drop(l, lease);
	if (n > 0) {
		tl__op_event(l, o, n, multi ? 0 : TL_F_TERMINAL, lease);
		if (!multi) {
			kick(l, h, TL_K_READ);
			return;
		}
		/* A full read may have left more: try again next turn; a short
		 * one drained it. */
		if ((uint32_t)n == len || SH(h)->kind == TL_STDIO_FILE)
			tl__poll_ready(l, o, 0);
		else
			wait_ready(l, h, o);
		return;
	}
	if (n == 0)
		finish(l, o, 0, TL_F_EOF);
	else if (e == EAGAIN || e == EWOULDBLOCK)
		wait_ready(l, h, o);
	else
		finish(l, o, -e, 0);
}

static void do_write(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o)
{
	for (;;) {
		ssize_t n;
		struct iovec *v = &o->u.wv.iov[o->u.wv.cur];
		int cnt = (int)(o->u.wv.n - o->u.wv.cur);
		if (SH(h)->flags & SF_SOCK) {
			struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)cnt};
			n = sendmsg(h->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		} else {
			n = writev(h->fd, v, cnt);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				wait_ready(l, h, o);
			else
				finish(l, o, -errno, 0);
			return;
		}
		o->u.wv.off += (size_t)n;
		while (n > 0 && o->u.wv.cur < o->u.wv.n) {
			struct iovec *c = &o->u.wv.iov[o->u.wv.cur];
			if ((size_t)n >= c->iov_len) {
				n -= (ssize_t)c->iov_len;
				o->u.wv.cur++;
			} else {
				c->iov_base = (uint8_t *)c->iov_base + n;
				c->iov_len -= (size_t)n;
				n = 0;
			}
		}
		while (o->u.wv.cur < o->u.wv.n && o->u.wv.iov[o->u.wv.cur].iov_len == 0)
			o->u.wv.cur++;
		if (o->u.wv.cur == o->u.wv.n) {
			finish(l, o, (int64_t)o->u.wv.total, 0);
			return;
		}
		/* Short: the pipe or terminal is full for now. */
		wait_ready(l, h, o);
		return;
	}
}

static void stdio_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	if (o->flags & TL_OPF_CANCEL) {
		finish(l, o, 0, 0); /* reported as Cancelled or Stopped */
		return;
	}
	struct tl_hslot *h = &l->h[o->hidx];
	if (res < 0) { /* the driver could not poll it */
		finish(l, o, res, 0);
		return;
	}
	if (o->kind == TL_K_READ)
		do_read(l, h, o);
	else
		do_write(l, h, o);
}

const struct tl_pollkind tl__tty_kind = {.ready = stdio_ready};

/* Start o (the handle's newest op) if it is the oldest of its direction. */
static void start(tl_loop *l, struct tl_hslot *h, struct tl_opslot *o)
{
	if (head_of(l, h, o->kind) == o)
		tl__poll_ready(l, o, 0);
}

int tl__stdio_read(tl_loop *l, struct tl_hslot *h, void *buf, uint32_t len, uint16_t flags,
		   uint64_t token, tl_op *oid)
{
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_POLL, TL_K_READ, token, &o);
	if (r < 0)
		return r;
	o->flags |= flags;
	o->u.rw.buf = buf;
	o->u.rw.len = len;
	o->poll.fd = h->fd;
	o->poll.events = POLLIN;
	*oid = tl__op_id(l, o);
	start(l, h, o);
	return 0;
}

int tl__stdio_writev(tl_loop *l, struct tl_hslot *h, const tl_iovec *iov, int n,
		     uint64_t token, tl_op *oid)
{
	if (h->flags & TL_HF_CLOSING)
		return -EINVAL;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_POLL, TL_K_WRITE, token, &o);
	if (r < 0)
		return r;
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	memcpy(o->u.wv.iov, iov, (size_t)n * sizeof *iov);
	o->u.wv.n = (uint32_t)n;
	o->u.wv.cur = 0;
	o->u.wv.off = 0;
	o->u.wv.total = total;
	o->poll.fd = h->fd;
	o->poll.events = POLLOUT;
	*oid = tl__op_id(l, o);
	start(l, h, o);
	return 0;
}

/* ---- terminal control ---- */

static struct tl_hslot *tty_get(tl_loop *l, tl_handle id, int *err)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	*err = !h ? -ENOENT : (h->type != TL_H_STDIO || SH(h)->kind != TL_STDIO_TTY) ? -EINVAL : 0;
	return *err ? NULL : h;
}

int tl_tty_mode(tl_loop *l, tl_handle id, int mode)
{
	int err;
	struct tl_hslot *h = tty_get(l, id, &err);
	if (!h)
		return err;
	if ((h->flags & TL_HF_CLOSING) || (mode != TL_TTY_NORMAL && mode != TL_TTY_RAW))
		return -EINVAL;
	struct stdio_h *s = SH(h);
	if (s->saved < 0) {
		if (mode == TL_TTY_NORMAL)
			return 0; /* never changed */
		int i = tsave_add(h->fd);
		if (i < 0)
			return -errno;
		s->saved = (int16_t)i;
	}
	if (mode == TL_TTY_NORMAL) {
		tsave_restore(s->saved, 0);
		return 0;
	}
	pthread_mutex_lock(&tmu);
	struct termios t = tsave[s->saved].t;
	pthread_mutex_unlock(&tmu);
	t.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON | INLCR | IGNCR | PARMRK);
	t.c_oflag |= OPOST | ONLCR;
	t.c_cflag = (t.c_cflag & ~(tcflag_t)(CSIZE | PARENB)) | CS8;
	t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | IEXTEN | ISIG);
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	return tcsetattr(h->fd, TCSANOW, &t) < 0 ? -errno : 0;
}

int tl_tty_winsize(tl_loop *l, tl_handle id, uint16_t *cols, uint16_t *rows)
{
	int err;
	struct tl_hslot *h = tty_get(l, id, &err);
	if (!h)
		return err;
	if (!cols || !rows)
		return -EINVAL;
	struct winsize ws;
	if (ioctl(h->fd, TIOCGWINSZ, &ws) < 0)
		return -errno;
	*cols = ws.ws_col;
	*rows = ws.ws_row;
	return 0;
}
