/* tests/contract_tty.c: contract 5 terminals and stdio handles (under a pseudo-terminal), and file watches, on every driver. */
#include "contract.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turnloop/signal.h>
#include <turnloop/tty.h>
#include <turnloop/watch.h>
#include <CUnit/CUnit.h>

static int need_poll(tl_loop *l)
{
	if (tl_loop_caps(l) & TL_CAP_POLL)
		return 1;
	tl_handle h;
	tl_op op;
	H_EQ(tl_stdio_open(l, 0, &h), -ENOTSUP);
	H_EQ(tl_watch_start(l, "/", IN_CREATE, 0, &h, &op), -ENOTSUP);
	h_skip("driver %s lacks TL_CAP_POLL (no terminals, stdio handles or watches)",
	       tl_loop_driver(l));
	return 0;
}

/* Rule: descriptors are classified as terminal, pipe (pipes and sockets)
 * or file (regular files, /dev/null); a directory or a closed descriptor is
 * refused; the caller's descriptor stays open and its flags unchanged
 * (the handle works on its own descriptor, closed at Closed). */
static void test_stdio_classify(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	int m, s, p[2], sv[2];
	H_EQ_FATAL(openpty(&m, &s, NULL, NULL, NULL), 0);
	H_EQ_FATAL(pipe2(p, O_CLOEXEC), 0);
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int dn = open("/dev/null", O_RDWR | O_CLOEXEC);
	char path[] = "/tmp/tl-stdio-XXXXXX";
	int f = mkstemp(path);
	H_TRUE_FATAL(dn >= 0 && f >= 0, "open");
	unlink(path);
	int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct { int fd, kind; } cases[] = {
		{s, TL_STDIO_TTY},   {p[0], TL_STDIO_PIPE}, {p[1], TL_STDIO_PIPE},
		{sv[0], TL_STDIO_PIPE}, {dn, TL_STDIO_FILE}, {f, TL_STDIO_FILE},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int fl = fcntl(cases[k].fd, F_GETFL);
		tl_handle h;
		H_EQ(tl_stdio_open(l, cases[k].fd, &h), cases[k].kind);
		H_EQ(fcntl(cases[k].fd, F_GETFL), fl);
		H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
		H_EQ(fcntl(cases[k].fd, F_GETFL), fl);
	}
	tl_handle h;
	H_EQ(tl_stdio_open(l, dir, &h), -EINVAL);
	H_EQ(tl_stdio_open(l, -1, &h), -EINVAL);
	int dead = dup(dn);
	close(dead);
	H_EQ(tl_stdio_open(l, dead, &h), -EBADF);
	H_EQ(tl_tty_mode(l, (tl_handle){0x99}, TL_TTY_RAW), -ENOENT);
	/* Terminal calls on a pipe handle are refused. */
	H_EQ(tl_stdio_open(l, p[0], &h), TL_STDIO_PIPE);
	uint16_t cols, rows;
	H_EQ(tl_tty_mode(l, h, TL_TTY_RAW), -EINVAL);
	H_EQ(tl_tty_winsize(l, h, &cols, &rows), -EINVAL);
	tl_op op;
	H_EQ(tl_shutdown(l, h, 0, &op), -EINVAL);
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	int all[] = {m, s, p[0], p[1], sv[0], sv[1], dn, f, dir};
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
		close(all[k]);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule (under a pseudo-terminal): the window size is read; raw mode is set
 * (no echo, no line discipline: a byte typed is read at once) and normal
 * mode restores the settings found; closing the handle restores them too;
 * reads and writes pass through the terminal. */
static void test_tty_raw_restore(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	int m, s;
	struct winsize ws = {.ws_row = 24, .ws_col = 80};
	H_EQ_FATAL(openpty(&m, &s, NULL, NULL, &ws), 0);
	fcntl(m, F_SETFD, FD_CLOEXEC);
	fcntl(s, F_SETFD, FD_CLOEXEC);
	struct termios orig, now;
	H_EQ_FATAL(tcgetattr(s, &orig), 0);
	H_TRUE_FATAL(orig.c_lflag & ICANON, "a new pty is canonical");
	tl_handle h;
	H_EQ_FATAL(tl_stdio_open(l, s, &h), TL_STDIO_TTY);
	uint16_t cols = 0, rows = 0;
	H_EQ(tl_tty_winsize(l, h, &cols, &rows), 0);
	H_EQ(cols, 80);
	H_EQ(rows, 24);
	H_EQ(tl_tty_winsize(l, h, NULL, &rows), -EINVAL);
	H_EQ(tl_tty_mode(l, h, 7), -EINVAL);
	H_EQ(tl_tty_mode(l, h, TL_TTY_RAW), 0);
	H_EQ(tcgetattr(s, &now), 0);
	H_TRUE(!(now.c_lflag & (ICANON | ECHO | ISIG)), "raw: lflag %#x", (unsigned)now.c_lflag);
	/* Raw: one byte, no newline, is readable at once. */
	tl_op rop;
	char buf[16] = {0};
	H_EQ(tl_read(l, h, buf, sizeof buf, 0x1, &rop), 0);
	h_idle(&c, 10);
	H_EQ(h_find_op(&c.log, rop, 0), -1);
	H_EQ(write(m, "x", 1), 1);
	int i = h_wait_op(&c, rop);
	H_TRUE(i >= 0 && c.log.v[i].result == 1 && buf[0] == 'x', "raw read");
	/* No echo: nothing came back on the master. */
	struct pollfd pf = {.fd = m, .events = POLLIN};
	H_EQ(poll(&pf, 1, 20), 0);
	/* A write reaches the master, "\n" as "\r\n" (output kept cooked). */
	tl_op wop;
	H_EQ(tl_write(l, h, "hi\n", 3, 0x2, &wop), 0);
	i = h_wait_op(&c, wop);
	H_TRUE(i >= 0 && c.log.v[i].result == 3, "write");
	char got[8] = {0};
	H_EQ(poll(&pf, 1, H_WAIT_MS), 1);
	H_EQ(read(m, got, sizeof got), 4);
	H_TRUE(memcmp(got, "hi\r\n", 4) == 0, "on the master: %.4s", got);
	/* Normal: the settings found. */
	H_EQ(tl_tty_mode(l, h, TL_TTY_NORMAL), 0);
	H_EQ(tcgetattr(s, &now), 0);
	H_EQ(now.c_lflag, orig.c_lflag);
	H_EQ(now.c_iflag, orig.c_iflag);
	/* Raw again, then close: restored. */
	H_EQ(tl_tty_mode(l, h, TL_TTY_RAW), 0);
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	H_EQ(tcgetattr(s, &now), 0);
	H_EQ(now.c_lflag, orig.c_lflag);
	H_EQ(now.c_iflag, orig.c_iflag);
	H_EQ(now.c_oflag, orig.c_oflag);
	close(m);
	close(s);
	h_ctx_fini(&c);
	h_end(l, fds);
}

static int resize_steps(int slave_name_fd, int sync_w, int res_w, tl_loop **lp);

/* In a child that has the pty as its controlling terminal: open it, take
 * SIGWINCH, tell the parent, and report the size seen after a resize. Its
 * exit status is 0 or the step that failed. */
static int resize_child(int slave_name_fd, int sync_w, int res_w)
{
	tl_loop *l = NULL;
	int r = resize_steps(slave_name_fd, sync_w, res_w, &l);
	if (l)
		tl_loop_destroy(l); /* leave nothing for a leak checker */
	return r;
}

static int resize_steps(int slave_name_fd, int sync_w, int res_w, tl_loop **lp)
{
	setsid();
	char name[64];
	if (ptsname_r(slave_name_fd, name, sizeof name) != 0)
		return 10;
	int s = open(name, O_RDWR); /* the first terminal opened: controlling */
	if (s < 0 || ioctl(s, TIOCSCTTY, 0) < 0)
		return 11;
	tl_loop *l;
	if (tl_loop_new(&l, NULL) != 0)
		return 12;
	*lp = l;
	tl_handle h, sh;
	tl_op sop;
	if (tl_stdio_open(l, s, &h) != TL_STDIO_TTY)
		return 13;
	if (tl_signal_start(l, SIGWINCH, 0, &sh, &sop) != 0)
		return 14;
	if (write(sync_w, "R", 1) != 1)
		return 15;
	tl_completion out[8];
	for (int k = 0; k < 500; k++) {
		int n = tl_turn(l, 10 * (int64_t)H_MS, out, 8, NULL);
		for (int i = 0; i < n; i++) {
			if (out[i].kind != TL_K_SIGNAL || out[i].result != SIGWINCH)
				continue;
			uint16_t wh[2];
			if (tl_tty_winsize(l, h, &wh[0], &wh[1]) != 0)
				return 16;
			if (write(res_w, wh, sizeof wh) != sizeof wh)
				return 17;
			return 0;
		}
	}
	return 18;
}

/* Rule (under a pseudo-terminal that is the controlling terminal of a
 * child): a resize of the terminal is seen (SIGWINCH through a signal
 * subscription) and the window size read then is the new one. */
static void test_tty_resize_seen(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	tl_loop_close(l);
	int m, s, sync[2], res[2];
	H_EQ_FATAL(openpty(&m, &s, NULL, NULL, NULL), 0);
	H_EQ_FATAL(pipe(sync), 0);
	H_EQ_FATAL(pipe(res), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(sync[0]);
		close(res[0]);
		close(s);
		_exit(resize_child(m, sync[1], res[1]));
	}
	H_TRUE_FATAL(pid > 0, "fork");
	close(sync[1]);
	close(res[1]);
	char r = 0;
	struct pollfd pf = {.fd = sync[0], .events = POLLIN};
	H_EQ(poll(&pf, 1, H_WAIT_MS), 1);
	H_EQ(read(sync[0], &r, 1), 1);
	struct winsize ws = {.ws_row = 40, .ws_col = 100};
	H_EQ(ioctl(m, TIOCSWINSZ, &ws), 0);
	uint16_t wh[2] = {0, 0};
	pf.fd = res[0];
	H_EQ(poll(&pf, 1, 5 * H_WAIT_MS), 1);
	H_EQ(read(res[0], wh, sizeof wh), (ssize_t)sizeof wh);
	int st = 0;
	H_EQ(waitpid(pid, &st, 0), pid);
	H_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x (its step %d failed)", st,
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	H_EQ(wh[0], 100);
	H_EQ(wh[1], 40);
	close(m);
	close(s);
	close(sync[0]);
	close(res[0]);
	h_end(NULL, fds);
}

struct drip {
	int fd;
	size_t total;
	uint64_t sum;
};

/* Read everything from fd slowly, to its end. */
static void *drain_slowly(void *arg)
{
	struct drip *d = arg;
	char buf[4096];
	for (;;) {
		ssize_t n = read(d->fd, buf, sizeof buf);
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			d->sum = d->sum * 31 + (uint8_t)buf[i];
		d->total += (size_t)n;
		if (d->total < 65536)
			h_sleep_ms(1);
	}
	return NULL;
}

/* Rule: a pipe handle reads what the other end writes, in order, then EOF
 * (read_start with leases); a write bigger than the pipe holds completes
 * once a slow reader took it all, in order; reads and writes on the
 * caller's own descriptors stay blocking (not made non-blocking); a read
 * cancelled while waiting ends -ECANCELED. */
static void test_stdio_pipe_io(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	int in[2], out[2];
	H_EQ_FATAL(pipe2(in, O_CLOEXEC), 0);
	H_EQ_FATAL(pipe2(out, O_CLOEXEC), 0);
	tl_handle hi, ho;
	H_EQ_FATAL(tl_stdio_open(l, in[0], &hi), TL_STDIO_PIPE);
	H_EQ_FATAL(tl_stdio_open(l, out[1], &ho), TL_STDIO_PIPE);
	/* Cancel a read that waits. */
	tl_op op;
	char b1[8];
	H_EQ(tl_read(l, hi, b1, sizeof b1, 0, &op), 0);
	h_idle(&c, 10);
	H_EQ(tl_cancel(l, op), 0);
	int i = h_wait_op(&c, op);
	H_TRUE(i >= 0 && c.log.v[i].result == -ECANCELED, "cancelled read");
	/* Read to EOF. */
	H_EQ(tl_read_start(l, hi, 0x11, &op), 0);
	static char msg[30000];
	fill_pattern(msg, sizeof msg, 0);
	H_EQ(write(in[1], msg, sizeof msg), (ssize_t)sizeof msg);
	close(in[1]);
	static char got[sizeof msg];
	size_t n = 0;
	int eof = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	for (uint32_t k = c.log.n; !eof && h_wall_ns() < dl;) {
		h_turn(&c, 10 * (int64_t)H_MS);
		for (; k < c.log.n; k++) {
			tl_completion *x = &c.log.v[k];
			if (x->op.v != op.v)
				continue;
			if (x->result > 0 && (x->flags & TL_F_LEASE)) {
				if (n + (size_t)x->result <= sizeof got)
					memcpy(got + n, x->u.read.lease.data, (size_t)x->result);
				n += (size_t)x->result;
				H_EQ(tl_lease_release(l, x->u.read.lease.id), 0);
				x->flags &= (uint16_t)~TL_F_LEASE;
			}
			if (x->flags & TL_F_TERMINAL)
				eof = (x->flags & TL_F_EOF) != 0;
		}
	}
	H_TRUE(eof, "no EOF");
	H_EQ(n, sizeof msg);
	H_EQ(check_pattern(got, n < sizeof got ? n : sizeof got, 0), -1);
	/* A big write and a slow reader. */
	static char big[1 << 20];
	fill_pattern(big, sizeof big, 7);
	uint64_t want = 0;
	for (size_t k = 0; k < sizeof big; k++)
		want = want * 31 + (uint8_t)big[k];
	struct drip d = {.fd = out[0]};
	pthread_t t;
	H_EQ_FATAL(pthread_create(&t, NULL, drain_slowly, &d), 0);
	tl_op w1, w2;
	H_EQ(tl_write(l, ho, big, sizeof big / 2, 1, &w1), 0);
	H_EQ(tl_write(l, ho, big + sizeof big / 2, sizeof big / 2, 2, &w2), 0);
	int i1 = h_wait_op_ms(&c, w1, 5 * H_WAIT_MS), i2 = h_wait_op_ms(&c, w2, 5 * H_WAIT_MS);
	H_TRUE(i1 >= 0 && i2 > i1, "writes in order: %d %d", i1, i2);
	if (i1 >= 0 && i2 >= 0)
		H_EQ(c.log.v[i1].result + c.log.v[i2].result, (int64_t)sizeof big);
	H_TRUE(h_close(&c, ho, 0) >= 0, "Closed");
	close(out[1]);
	pthread_join(t, NULL);
	H_EQ(d.total, sizeof big);
	H_TRUE(d.sum == want, "bytes differ");
	H_EQ(fcntl(in[0], F_GETFL) & O_NONBLOCK, 0);
	H_TRUE(h_close(&c, hi, 0) >= 0, "Closed");
	close(in[0]);
	close(out[0]);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a file handle reads and writes at once (the file's offset moves as
 * with write(2)); writes stay in order. */
static void test_stdio_file_io(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	char path[] = "/tmp/tl-stdio-file-XXXXXX";
	int f = mkstemp(path);
	H_TRUE_FATAL(f >= 0, "mkstemp");
	unlink(path);
	tl_handle h;
	H_EQ_FATAL(tl_stdio_open(l, f, &h), TL_STDIO_FILE);
	tl_op a, b;
	H_EQ(tl_write(l, h, "hello ", 6, 1, &a), 0);
	H_EQ(tl_write(l, h, "world", 5, 2, &b), 0);
	int ia = h_wait_op(&c, a), ib = h_wait_op(&c, b);
	H_TRUE(ia >= 0 && ib > ia, "in order");
	char buf[16] = {0};
	H_EQ(pread(f, buf, sizeof buf, 0), 11);
	H_TRUE(strcmp(buf, "hello world") == 0, "file: %s", buf);
	H_EQ(lseek(f, 0, SEEK_SET), 0);
	memset(buf, 0, sizeof buf);
	H_EQ(tl_read(l, h, buf, sizeof buf, 3, &a), 0);
	ia = h_wait_op(&c, a);
	H_TRUE(ia >= 0 && c.log.v[ia].result == 11, "read");
	H_EQ(tl_read(l, h, buf, sizeof buf, 4, &a), 0);
	ia = h_wait_op(&c, a);
	H_TRUE(ia >= 0 && c.log.v[ia].result == 0 && (c.log.v[ia].flags & TL_F_EOF), "EOF");
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	close(f);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- watches ---- */

struct seen {
	int created, modified, deleted, overflow, batches, ignored;
	uint32_t events;
};

/* Walk c's watch batches from *from, releasing their leases. */
static void tally(h_ctx *c, tl_op op, uint32_t *from, struct seen *s, const char *name)
{
	for (; *from < c->log.n; (*from)++) {
		tl_completion *x = &c->log.v[*from];
		if (x->op.v != op.v || x->kind != TL_K_WATCH || (x->flags & TL_F_TERMINAL))
			continue;
		s->batches++;
		s->overflow |= x->u.watch.overflow != 0;
		uint32_t off = 0, n = 0;
		tl_watch_event ev;
		while (tl_watch_next(x, &off, &ev)) {
			n++;
			int ours = !name || (ev.name && strcmp(ev.name, name) == 0);
			if ((ev.mask & IN_CREATE) && ours)
				s->created++;
			if ((ev.mask & IN_MODIFY) && ours)
				s->modified++;
			if ((ev.mask & (IN_DELETE | IN_DELETE_SELF)) && ours)
				s->deleted++;
			if (ev.mask & IN_IGNORED)
				s->ignored++;
			if (ev.mask & IN_Q_OVERFLOW)
				s->overflow |= 2;
		}
		H_EQ(n, x->u.watch.events);
		s->events += n;
		if (x->flags & TL_F_LEASE) {
			H_EQ(tl_lease_release(c->loop, x->u.watch.lease.id), 0);
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
}

/* Rule: a directory watch sees a file created, modified and deleted, in
 * batches walked with tl_watch_next; a file watch sees its own deletion,
 * then IN_IGNORED; stop delivers Stopped, then Closed (the op's token). */
static void test_watch_events(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	char dir[] = "/tmp/tl-watch-XXXXXX";
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	char file[64];
	snprintf(file, sizeof file, "%s/a", dir);
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_watch_start(l, dir, IN_CREATE | IN_MODIFY | IN_DELETE, 0x3a, &h, &op), 0);
	int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	H_TRUE_FATAL(fd >= 0, "create");
	H_EQ(write(fd, "x", 1), 1);
	close(fd);
	H_EQ(unlink(file), 0);
	struct seen s = {0};
	uint32_t from = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!(s.created && s.modified && s.deleted) && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		tally(&c, op, &from, &s, "a");
	}
	H_EQ(s.created, 1);
	H_TRUE(s.modified >= 1, "no IN_MODIFY");
	H_EQ(s.deleted, 1);
	H_EQ(s.overflow, 0);
	H_EQ(tl_stop(l, op), 0);
	int t = h_wait_op(&c, op);
	int cl = h_wait_closed(&c, h);
	H_TRUE_FATAL(t >= 0 && cl > t, "Stopped %d, Closed %d", t, cl);
	H_EQ(c.log.v[t].flags & TL_F_STOPPED, TL_F_STOPPED);
	H_EQ(c.log.v[cl].token, 0x3a);
	tally(&c, op, &from, &s, "a");
	/* A file watch: its own deletion. */
	fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	close(fd);
	H_EQ_FATAL(tl_watch_start(l, file, IN_DELETE_SELF, 0x3b, &h, &op), 0);
	H_EQ(unlink(file), 0);
	memset(&s, 0, sizeof s);
	dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!s.ignored && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		tally(&c, op, &from, &s, NULL);
	}
	H_EQ(s.deleted, 1);
	H_EQ(s.ignored, 1);
	H_TRUE(h_close(&c, h, 0x3c) >= 0, "Closed");
	rmdir(dir);
	/* Refusals. */
	H_EQ(tl_watch_start(l, "/nonexistent-of-turnloop", IN_CREATE, 0, &h, &op), -ENOENT);
	H_EQ(tl_watch_start(l, "/", 0, 0, &h, &op), -EINVAL);
	H_EQ(tl_watch_start(l, "/", IN_CREATE | IN_ONESHOT, 0, &h, &op), -EINVAL);
	H_EQ(tl_watch_start(l, NULL, IN_CREATE, 0, &h, &op), -EINVAL);
	H_EQ(stats(l).handles, 0);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: more events than the kernel queues (fs.inotify.max_queued_events)
 * before the loop reads: a batch carries the overflow flag and an
 * IN_Q_OVERFLOW event. The flood is made by creating and removing one file
 * (each pair two events that never coalesce) more times than the queue
 * holds. */
static void test_watch_overflow(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_poll(l)) {
		h_end(l, fds);
		return;
	}
	long max = 16384;
	FILE *pf = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
	if (pf) {
		if (fscanf(pf, "%ld", &max) != 1)
			max = 16384;
		fclose(pf);
	}
	if (max > 200000) {
		h_skip("fs.inotify.max_queued_events is %ld: too many events to flood", max);
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	char dir[] = "/tmp/tl-watchq-XXXXXX";
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	char file[64];
	snprintf(file, sizeof file, "%s/f", dir);
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_watch_start(l, dir, IN_CREATE | IN_DELETE, 0, &h, &op), 0);
	for (long k = 0; k < max / 2 + 64; k++) {
		int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		close(fd);
		unlink(file);
	}
	struct seen s = {0};
	uint32_t from = 0;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (s.overflow != 3 && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		tally(&c, op, &from, &s, NULL);
	}
	H_EQ(s.overflow, 3); /* the flag, and the event */
	H_TRUE(s.events >= (uint32_t)max, "%u events of a queue of %ld", s.events, max);
	H_TRUE(s.batches > 1, "one batch");
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	rmdir(dir);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a watch and stream reads share the loop's pooled buffers without
 * ever holding one lease twice: with only 4 buffers, a stream read by
 * read_start (its bytes checked against the pattern) and a watch on a
 * directory where files come and go (their names checked) run together;
 * every lease is released exactly once. (On io_uring the kernel picks the
 * stream's buffers: a watch must take its own from the driver.) */
static void test_watch_shares_leases(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = 4;
	cfg.handle_leases = 2;
	tl_loop *l = h_loop_cfg(&cfg);
	if (!need_poll(l) || !h_need_cap(l, TL_CAP_TCP)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	char dir[] = "/tmp/tl-watchl-XXXXXX";
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	tl_handle wh;
	tl_op wop, rop;
	H_EQ_FATAL(tl_watch_start(l, dir, IN_CREATE, 0, &wh, &wop), 0);
	H_EQ_FATAL(tl_read_start(l, srv, 0, &rop), 0);
	enum { CHUNK = 4096, CHUNKS = 64, FILES = 64 };
	static char chunk[CHUNK];
	uint64_t sent = 0, got = 0;
	int created = 0, named = 0, bad = 0;
	uint32_t from = c.log.n;
	uint64_t dl = h_wall_ns() + 5ull * H_WAIT_MS * H_MS;
	tl_op w = TL_OP_NONE;
	while ((got < (uint64_t)CHUNK * CHUNKS || named < FILES) && h_wall_ns() < dl) {
		if (sent < (uint64_t)CHUNK * CHUNKS && (w.v == 0 || h_find_term(&c.log, w) >= 0)) {
			fill_pattern(chunk, CHUNK, sent);
			H_EQ(tl_write(l, cli, chunk, CHUNK, 0, &w), 0);
			sent += CHUNK;
		}
		if (created < FILES) {
			char f[96];
			snprintf(f, sizeof f, "%s/f%d", dir, created++);
			int fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
			close(fd);
			unlink(f);
		}
		h_turn(&c, (int64_t)H_MS);
		for (; from < c.log.n; from++) {
			tl_completion *x = &c.log.v[from];
			if (!(x->flags & TL_F_LEASE))
				continue;
			if (x->op.v == rop.v) {
				bad += check_pattern(x->u.read.lease.data, (size_t)x->result, got) != -1;
				got += (uint64_t)x->result;
				H_EQ(tl_lease_release(l, x->u.read.lease.id), 0);
			} else if (x->op.v == wop.v) {
				uint32_t off = 0;
				tl_watch_event ev;
				while (tl_watch_next(x, &off, &ev)) {
					int k;
					if (ev.name && sscanf(ev.name, "f%d", &k) == 1 && k == named)
						named++;
					else
						bad++;
				}
				H_EQ(tl_lease_release(l, x->u.watch.lease.id), 0);
			}
			x->flags &= (uint16_t)~TL_F_LEASE;
		}
	}
	H_EQ(bad, 0);
	H_EQ(got, (uint64_t)CHUNK * CHUNKS);
	H_EQ(named, FILES);
	H_TRUE(h_close(&c, wh, 0) >= 0 && h_close(&c, srv, 0) >= 0 && h_close(&c, cli, 0) >= 0,
	       "Closed");
	rmdir(dir);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a watch gets its batches even when the stream reads before it
 * had made the driver hand the kernel every buffer it could (4 buffers,
 * all held by the host at once, then all released, the stream gone): a
 * lease stays free for reads the loop makes itself. */
static void test_watch_after_busy_stream(void)
{
	int fds = h_begin();
	tl_config cfg = cfg_default();
	cfg.pooled_buffers = 4;
	cfg.handle_leases = 4;
	tl_loop *l = h_loop_cfg(&cfg);
	if (!need_poll(l) || !h_need_cap(l, TL_CAP_TCP)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle srv, cli;
	H_EQ_FATAL(h_pair(&c, &c, AF_INET, &srv, &cli), 0);
	tl_op rop, wop;
	H_EQ_FATAL(tl_read_start(l, srv, 0, &rop), 0);
	static char chunk[8 * 16384];
	fill_pattern(chunk, sizeof chunk, 0);
	H_EQ(tl_write(l, cli, chunk, sizeof chunk, 0, &wop), 0);
	/* Hold every lease the reads fill for a while: the kernel runs out
	 * with spare leases waiting, and the driver gives it more. */
	h_idle(&c, 100);
	H_TRUE(stats(l).leases_out >= 3, "leases out: %u", stats(l).leases_out);
	h_release_leases(&c, 0);
	H_TRUE(h_close(&c, srv, 0) >= 0 && h_close(&c, cli, 0) >= 0, "Closed");
	h_release_leases(&c, 0);
	char dir[] = "/tmp/tl-watchb-XXXXXX";
	H_TRUE_FATAL(mkdtemp(dir) != NULL, "mkdtemp");
	tl_handle wh;
	tl_op op;
	H_EQ_FATAL(tl_watch_start(l, dir, IN_CREATE | IN_DELETE, 0, &wh, &op), 0);
	char f[96];
	snprintf(f, sizeof f, "%s/x", dir);
	int fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	close(fd);
	unlink(f);
	struct seen sn = {0};
	uint32_t from = c.log.n;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (!(sn.created && sn.deleted) && h_wall_ns() < dl) {
		h_turn(&c, 10 * (int64_t)H_MS);
		tally(&c, op, &from, &sn, "x");
	}
	H_EQ(sn.created, 1);
	H_EQ(sn.deleted, 1);
	H_TRUE(h_close(&c, wh, 0) >= 0, "Closed");
	rmdir(dir);
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_tty[] = {
	T("5 terminals", test_stdio_classify),
	T("5 terminals", test_tty_raw_restore),
	T("5 terminals", test_tty_resize_seen),
	T("5 terminals", test_stdio_pipe_io),
	T("5 terminals", test_stdio_file_io),
	T("5 watches", test_watch_events),
	T("5 watches", test_watch_overflow),
	T("5 watches", test_watch_shares_leases),
	T("5 watches", test_watch_after_busy_stream),
	{ NULL, NULL, NULL },
};
