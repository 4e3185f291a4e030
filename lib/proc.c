/* lib/proc.c: child processes: vfork and exec with piped or attached stdio, the exit through a pidfd poll, kill, and termination on close. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "sysmod.h"
#include "turnloop/proc.h"

/*
 * The spawn is a vfork and an exec (do_spawn says why not posix_spawn): an
 * exec that fails comes back as tl_spawn's error (ENOENT for a missing
 * program) with the failed child already reaped, and nothing of the child
 * is left to clean up. Everything the loop makes for the child
 * (pipe handles, duplicates of attached descriptors) exists before the
 * spawn; after it only the pidfd and its poll can fail, and then the child
 * is killed and reaped at once, so a refused spawn leaves nothing behind.
 *
 * The exit is the process handle's one op, a one-shot poll of the pidfd
 * (readable once the child exits), then waitid(P_PIDFD): only this child
 * is ever reaped. Its cancellation (tl_cancel, tl_close, tl_loop_destroy)
 * does not stop the poll: it sends term_signal and arms a SIGKILL deadline,
 * and the op still ends when the child is reaped.
 *
 * Without pidfds (pidfd_open is ENOSYS: Linux before 5.3, or valgrind,
 * which does not know it) the exit op is never handed to a driver: the
 * loop holds the process's SIGCHLD handler (an interest of its own, like a
 * subscription, lib/signal.c) while such children live, and on each
 * SIGCHLD tries waitid(P_PID, WNOHANG) for each of them: still only its own
 * children, and a pid cannot be reused before its child is reaped.
 */

#define DEFAULT_KILL_AFTER (5ull * 1000 * 1000 * 1000)

/* A process handle's state (its u.sys words). */
struct proc_h {
	int32_t pid;
	uint32_t flags;
	int32_t term_signal;
	uint32_t _pad;
	uint64_t kill_after;
};
_Static_assert(sizeof(struct proc_h) <= sizeof(((struct tl_hslot *)0)->u.sys), "proc_h fits");
#define PF_PGROUP 0x1
#define PF_REAPED 0x2
#define PF_TERMINATING 0x4
#define PF_NOPIDFD 0x8 /* watched through SIGCHLD (see above) */

static inline struct proc_h *PH(struct tl_hslot *h) { return (struct proc_h *)h->u.sys; }

struct tl_procloc {
	struct tl_heap kills; /* SIGKILL deadlines, over handle slots */
	uint64_t seq;
	uint32_t nopidfd;     /* live children without a pidfd */
};

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_kill(int pidfd, int sig)
{
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

/* Signal the child of h: through its pidfd, or (without) its pid, which
 * is still its own while it is unreaped. */
static int proc_signal(struct tl_hslot *h, int sig)
{
	struct proc_h *p = (struct proc_h *)h->u.sys;
	return (p->flags & PF_NOPIDFD) ? kill(p->pid, sig) : pidfd_kill(h->fd, sig);
}

static int loc_get(tl_loop *l)
{
	if (l->proc)
		return 0;
	struct tl_procloc *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	if (tl__heap_init(&p->kills, l->cfg.max_handles) < 0) {
		free(p);
		return -ENOMEM;
	}
	l->proc = p;
	return 0;
}

/* The descriptor behind handle id for a child's stdio (TL_SPAWN_HANDLE). */
static int handle_os_fd(tl_loop *l, tl_handle id)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	switch (h->type) {
	case TL_H_LISTEN:
	case TL_H_STREAM:
	case TL_H_UDP:
		if (!(l->dv->caps & TL_CAP_OS))
			return -EINVAL;
		return h->fd;
	case TL_H_STDIO:
		return h->fd;
	}
	return -EINVAL;
}

/* fd, moved to a number above stdio's (the child's dup2s into 0..2 must
 * not clobber a source): fd itself, or a close-on-exec duplicate. */
static int above_stdio(int fd)
{
	if (fd > 2)
		return fd;
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int e = errno;
	close(fd);
	errno = e;
	return d;
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* Take the child back at once (the spawn could not be completed). */
static void reap_now(pid_t pid, int pidfd)
{
	siginfo_t si;
	if (pidfd >= 0) {
		pidfd_kill(pidfd, SIGKILL);
		while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
	} else {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

/* The program to exec: file itself when it names a path, else the first
 * executable file of that name along PATH (as execvp looks, "/bin:/usr/bin"
 * without PATH): 0, or -ENOENT (none), -EACCES (one was found but is not
 * executable), -ENAMETOOLONG. Done before the fork: the child only execs. */
static int find_program(const char *file, char *out, size_t cap)
{
	if (strchr(file, '/')) {
		if (strlen(file) >= cap)
			return -ENAMETOOLONG;
		strcpy(out, file);
		return 0;
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/bin:/usr/bin";
	int err = -ENOENT;
	size_t fl = strlen(file);
	for (const char *p = path;; p++) {
		const char *e = strchrnul(p, ':');
		size_t dl = (size_t)(e - p);
		/* An empty entry is the working directory. */
		if (dl + 1 + fl + 1 <= cap) {
			memcpy(out, p, dl);
			if (!dl)
				out[dl++] = '.';
			out[dl] = '/';
			memcpy(out + dl + 1, file, fl + 1);
			struct stat st;
			if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
				if (access(out, X_OK) == 0)
					return 0;
				err = -EACCES;
			}
		}
		if (!*e)
			return err;
		p = e;
	}
}

/* Fork (vfork: the parent's pages are not copied), set the child up and
 * exec. A step that fails in the child writes its errno into a
 * close-on-exec pipe, which the parent reads: the exec closes it unread on
 * success. glibc's posix_spawn reports a failed exec through memory it
 * shares with its CLONE_VFORK child instead, which valgrind (whose vfork is
 * a fork) never sees: a missing program would look spawned there. Every
 * signal is blocked around the fork, so that no handler of the parent runs
 * in the child before the child has put every signal back to its default.
 * 0 and *pid, or -errno. */
static int do_spawn(const tl_spawn_opts *o, const int child_fd[3], pid_t *pid)
{
	extern char **environ;
	char prog[4096];
	int r = find_program(o->file, prog, sizeof prog);
	if (r < 0)
		return r;
	char *def_argv[2] = {(char *)o->file, NULL};
	char *const *argv = o->argv ? o->argv : def_argv;
	char *const *envp = o->envp ? o->envp : environ;
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0)
		return -errno;
	int ignore[3];
	for (int i = 0; i < 3; i++)
		ignore[i] = child_fd[i] < 0 && o->stdio[i].mode == TL_SPAWN_IGNORE;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t c = vfork();
	if (c == 0) {
		int e = 0;
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		for (int sig = 1; sig < NSIG; sig++)
			sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP, glibc's own: refused, fine */
		if ((o->flags & TL_SPAWN_PGROUP) && setpgid(0, 0) < 0)
			e = errno;
		for (int i = 0; i < 3 && !e; i++) {
			if (child_fd[i] >= 0) {
				if (dup2(child_fd[i], i) < 0)
					e = errno;
			} else if (ignore[i]) {
				int fd = open("/dev/null", i == 0 ? O_RDONLY : O_WRONLY);
				if (fd < 0 || (fd != i && dup2(fd, i) < 0))
					e = errno;
				if (fd > i)
					close(fd);
			}
		}
		if (!e && o->cwd && chdir(o->cwd) < 0)
			e = errno;
		if (!e) {
			sigset_t none;
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			execve(prog, argv, envp);
			e = errno;
		}
		ssize_t w = write(ep[1], &e, sizeof e);
		(void)w;
		_exit(127);
	}
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(ep[1]);
	if (c < 0) {
		close(ep[0]);
		return -e;
	}
	int cerr = 0;
	ssize_t n;
	do
		n = read(ep[0], &cerr, sizeof cerr);
	while (n < 0 && errno == EINTR);
	close(ep[0]);
	if (n == (ssize_t)sizeof cerr) {
		/* It never ran: take it back now (only this pid). */
		while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
			;
		return -cerr;
	}
	*pid = c;
	return 0;
}

static int valid_opts(const tl_spawn_opts *o, tl_handle pipes[3])
{
	if (!o->file || !*o->file || (o->flags & ~(uint32_t)TL_SPAWN_PGROUP) ||
	    o->term_signal < 0 || o->term_signal > 64)
		return 0;
	for (int i = 0; i < 3; i++) {
		int m = o->stdio[i].mode;
		if (m < TL_SPAWN_INHERIT || m > TL_SPAWN_FD)
			return 0;
		if (m == TL_SPAWN_PIPE && !pipes)
			return 0;
		if (m == TL_SPAWN_FD && o->stdio[i].fd < 0)
			return 0;
	}
	return 1;
}

int tl_spawn(tl_loop *l, const tl_spawn_opts *o, uint64_t token, tl_handle *pid_h,
	     tl_op *exit_op, tl_handle pipes[3])
{
	if (!o || !pid_h || !exit_op || !valid_opts(o, pipes))
		return -EINVAL;
	if (!tl__can_poll(l))
		return -ENOTSUP;
	uint32_t need = 1;
	for (int i = 0; i < 3; i++)
		need += o->stdio[i].mode == TL_SPAWN_PIPE;
	if (l->cfg.max_handles - l->nhandles < need || l->outstanding == l->cfg.max_ops)
		return -ENOBUFS;
	int r = loc_get(l);
	if (r < 0)
		return r;
	int child_fd[3] = {-1, -1, -1};
	struct tl_hslot *ph[3] = {NULL, NULL, NULL};
	if (pipes)
		for (int i = 0; i < 3; i++)
			pipes[i] = TL_HANDLE_NONE;
	/* Everything the child gets, before it exists. */
	for (int i = 0; i < 3 && r == 0; i++) {
		int fd = -1;
		switch (o->stdio[i].mode) {
		case TL_SPAWN_HANDLE:
		case TL_SPAWN_FD:
			fd = o->stdio[i].mode == TL_SPAWN_FD ? o->stdio[i].fd
							     : handle_os_fd(l, o->stdio[i].handle);
			if (fd < 0) {
				r = fd;
				break;
			}
			/* A duplicate above stdio's numbers (see above_stdio). */
			child_fd[i] = fcntl(fd, F_DUPFD_CLOEXEC, 3);
			if (child_fd[i] < 0)
				r = -errno;
			break;
		case TL_SPAWN_PIPE: {
			int sv[2];
			if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
				r = -errno;
				break;
			}
			child_fd[i] = above_stdio(sv[1]);
			int fl = fcntl(sv[0], F_GETFL);
			if (child_fd[i] < 0 || fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0) {
				r = -errno;
				close(sv[0]);
				break;
			}
			struct tl_hslot *h = tl__handle_new(l, TL_H_STREAM);
			h->fd = sv[0];
			h->flags |= TL_HF_UNIX;
			r = l->dv->attach(l->d, h);
			if (r < 0) {
				close(sv[0]);
				tl__handle_free(l, h);
				break;
			}
			ph[i] = h;
			break;
		}
		}
	}
	pid_t pid = -1;
	if (r == 0)
		r = do_spawn(o, child_fd, &pid);
	close_all(child_fd, 3);
	int pidfd = -1, nopidfd = 0;
	if (r == 0 && (pidfd = pidfd_open_(pid)) < 0) {
		if (errno == ENOSYS) {
			nopidfd = 1;
			r = tl__signal_inner(l, SIGCHLD, 1);
			if (r < 0)
				reap_now(pid, -1);
		} else {
			/* ESRCH: someone else reaped it already (a host's
			 * waitpid(-1)). */
			r = errno == ESRCH ? -ECHILD : -errno;
			if (errno != ESRCH)
				reap_now(pid, -1);
		}
	}
	struct tl_hslot *h = NULL;
	struct tl_opslot *op = NULL;
	if (r == 0) {
		h = tl__handle_new(l, TL_H_PROC);
		h->fd = pidfd;
		struct proc_h *p = PH(h);
		p->pid = pid;
		p->flags = (o->flags & TL_SPAWN_PGROUP) ? PF_PGROUP : 0;
		if (nopidfd)
			p->flags |= PF_NOPIDFD;
		p->term_signal = o->term_signal ? o->term_signal : SIGTERM;
		p->kill_after = o->kill_after_ns ? o->kill_after_ns : DEFAULT_KILL_AFTER;
		r = tl__op_new(l, h, TL_OP_POLL, TL_K_EXIT, token, &op);
		if (r == 0) {
			op->poll.fd = pidfd;
			op->poll.events = POLLIN;
			op->poll.where = TL_PW_NONE;
			if (nopidfd) /* it may have exited already: look once */
				tl__poll_ready(l, op, 0);
			else if ((r = tl__poll_arm(l, op)) < 0)
				tl__op_refuse(l, op);
		}
		if (r < 0) {
			reap_now(pid, pidfd);
			if (pidfd >= 0)
				close(pidfd);
			tl__handle_free(l, h);
			if (nopidfd)
				tl__signal_inner(l, SIGCHLD, 0);
		} else if (nopidfd) {
			l->proc->nopidfd++;
		}
	}
	if (r < 0) {
		for (int i = 0; i < 3; i++)
			if (ph[i]) {
				l->dv->release(l->d, ph[i]);
				tl__handle_free(l, ph[i]);
			}
		return r;
	}
	for (int i = 0; i < 3; i++)
		if (ph[i])
			pipes[i] = tl__h_id(l, ph[i]);
	*pid_h = tl__h_id(l, h);
	*exit_op = tl__op_id(l, op);
	return 0;
}

/* ---- the exit ---- */

static void exit_finish(tl_loop *l, struct tl_opslot *o, int64_t res, const siginfo_t *si)
{
	struct tl_hslot *h = &l->h[o->hidx];
	struct proc_h *p = PH(h);
	p->flags |= PF_REAPED;
	tl__heap_remove(&l->proc->kills, h->idx);
	if ((p->flags & PF_NOPIDFD) && --l->proc->nopidfd == 0)
		tl__signal_inner(l, SIGCHLD, 0);
	tl_completion *c = tl__op_event(l, o, res, TL_F_TERMINAL, TL_NO_LEASE);
	if (!c)
		return;
	memset(&c->u.exit, 0, sizeof c->u.exit);
	c->u.exit.pid = p->pid;
	if (si && si->si_code == CLD_EXITED)
		c->u.exit.status = si->si_status;
	else if (si) {
		c->u.exit.signal = si->si_status;
		c->u.exit.core = si->si_code == CLD_DUMPED;
	}
}

static void exit_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	struct tl_hslot *h = &l->h[o->hidx];
	int nopidfd = PH(h)->flags & PF_NOPIDFD;
	siginfo_t si;
	memset(&si, 0, sizeof si);
	int r;
	do
		r = nopidfd ? waitid(P_PID, (id_t)PH(h)->pid, &si, WEXITED | WNOHANG)
			    : waitid(P_PIDFD, (id_t)h->fd, &si, WEXITED | WNOHANG);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		exit_finish(l, o, -errno, NULL);
		return;
	}
	if (si.si_pid != 0) {
		exit_finish(l, o, 0, &si);
		return;
	}
	/* Not exited: a readiness that was not the exit, or the driver's own
	 * error. Wait again (for the next SIGCHLD, without a pidfd); a poll
	 * that cannot be armed any more ends the op with that error (and the
	 * child is left to the host). */
	if (nopidfd)
		return;
	r = tl__poll_arm(l, o);
	if (r < 0)
		exit_finish(l, o, r, NULL);
	(void)res;
}

/* Cancel or close: terminate, and keep waiting for the reap. */
static int exit_cancel(tl_loop *l, struct tl_opslot *o)
{
	struct tl_hslot *h = &l->h[o->hidx];
	struct proc_h *p = PH(h);
	if (p->flags & (PF_TERMINATING | PF_REAPED))
		return 0;
	p->flags |= PF_TERMINATING;
	proc_signal(h, p->term_signal);
	if (p->kill_after != UINT64_MAX)
		tl__heap_push(&l->proc->kills, h->idx, tl_now(l) + p->kill_after, l->proc->seq++);
	return 0;
}

const struct tl_pollkind tl__proc_kind = {.ready = exit_ready, .cancel = exit_cancel};

uint64_t tl__proc_deadline(tl_loop *l)
{
	const struct tl_heap_ent *t = tl__heap_top(&l->proc->kills);
	return t ? t->at : UINT64_MAX;
}

void tl__proc_run(tl_loop *l, uint64_t now)
{
	const struct tl_heap_ent *t;
	while ((t = tl__heap_top(&l->proc->kills)) && t->at <= now) {
		struct tl_hslot *h = &l->h[t->slot];
		tl__heap_remove(&l->proc->kills, h->idx);
		if (!(PH(h)->flags & PF_REAPED))
			proc_signal(h, SIGKILL);
	}
	/* Children without a pidfd: a SIGCHLD came, look at each. */
	if (!l->proc->nopidfd || !tl__signal_inner_hit(l, SIGCHLD))
		return;
	for (uint32_t i = 0; i < l->cfg.max_handles; i++) {
		struct tl_hslot *h = &l->h[i];
		if (h->type != TL_H_PROC || (PH(h)->flags & (PF_NOPIDFD | PF_REAPED)) != PF_NOPIDFD ||
		    h->head == TL_NIL)
			continue;
		struct tl_opslot *o = &l->o[h->head];
		if (o->poll.where == TL_PW_NONE)
			tl__poll_ready(l, o, 0);
	}
}

int tl__proc_waiting(const tl_loop *l)
{
	return l->proc->nopidfd != 0;
}

void tl__proc_release(tl_loop *l, struct tl_hslot *h)
{
	tl__heap_remove(&l->proc->kills, h->idx);
	if (h->fd >= 0)
		close(h->fd);
}

void tl__proc_destroy(tl_loop *l)
{
	tl__heap_free(&l->proc->kills);
	free(l->proc);
	l->proc = NULL;
}

/* ---- queries and signals ---- */

static struct tl_hslot *proc_get(tl_loop *l, tl_handle id, int *err)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	*err = !h ? -ENOENT : h->type != TL_H_PROC ? -EINVAL : 0;
	return *err ? NULL : h;
}

int tl_proc_pid(tl_loop *l, tl_handle id)
{
	int err;
	struct tl_hslot *h = proc_get(l, id, &err);
	return h ? PH(h)->pid : err;
}

int tl_proc_kill(tl_loop *l, tl_handle id, int sig)
{
	int err;
	struct tl_hslot *h = proc_get(l, id, &err);
	if (!h)
		return err;
	if (sig < 0 || sig > 64)
		return -EINVAL;
	if (PH(h)->flags & PF_REAPED)
		return -ESRCH;
	return proc_signal(h, sig) < 0 ? -errno : 0;
}

int tl_proc_kill_group(tl_loop *l, tl_handle id, int sig)
{
	int err;
	struct tl_hslot *h = proc_get(l, id, &err);
	if (!h)
		return err;
	if (sig < 0 || sig > 64 || !(PH(h)->flags & PF_PGROUP))
		return -EINVAL;
	return kill(-PH(h)->pid, sig) < 0 ? -errno : 0;
}
