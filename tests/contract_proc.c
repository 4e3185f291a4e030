/* tests/contract_proc.c: contract 5 processes: spawn, stdio, exit exactly once, kill, termination on close, on every driver. */
#include "contract.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <turnloop/proc.h>
#include <CUnit/CUnit.h>

/* The driver polls descriptors, or tl_spawn says -ENOTSUP and the test is
 * a skip. */
static int need_spawn(tl_loop *l)
{
	if (tl_loop_caps(l) & TL_CAP_POLL)
		return 1;
	char *argv[] = {"true", NULL};
	tl_spawn_opts o = {.file = "true", .argv = argv};
	tl_handle h;
	tl_op op;
	H_EQ(tl_spawn(l, &o, 0, &h, &op, NULL), -ENOTSUP);
	h_skip("driver %s lacks TL_CAP_POLL (no processes)", tl_loop_driver(l));
	return 0;
}

/* Run `sh -c script` with stdout (and stderr if err) piped; read stdout to
 * EOF into buf (NUL-terminated); return the exit completion's index. */
struct run {
	tl_handle proc, pipes[3];
	tl_op exit;
	char out[131072];
	size_t nout;
	int eof;
};

static void spawn_sh(h_ctx *c, const char *script, struct run *r, const tl_spawn_opts *base)
{
	static char *argv[4];
	argv[0] = "sh";
	argv[1] = "-c";
	argv[2] = (char *)script;
	argv[3] = NULL;
	tl_spawn_opts o;
	if (base)
		o = *base;
	else
		memset(&o, 0, sizeof o);
	o.file = "/bin/sh";
	o.argv = argv;
	if (!base)
		o.stdio[1].mode = TL_SPAWN_PIPE;
	memset(r, 0, sizeof *r);
	H_EQ_FATAL(tl_spawn(c->loop, &o, 0xe0, &r->proc, &r->exit, r->pipes), 0);
}

/* Read stream h to EOF with tl_read_start into r->out. */
static void read_to_eof(h_ctx *c, tl_handle h, struct run *r)
{
	tl_op op;
	H_EQ_FATAL(tl_read_start(c->loop, h, 0x5d, &op), 0);
	uint32_t i = c->log.n;
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (h_find_term(&c->log, op) < 0 && h_wall_ns() < dl) {
		h_turn(c, 10 * (int64_t)H_MS);
		/* Leases go back as they come: a stream holding too many pauses. */
		for (; i < c->log.n; i++) {
			tl_completion *x = &c->log.v[i];
			if (x->op.v != op.v)
				continue;
			if (x->result > 0 && (x->flags & TL_F_LEASE)) {
				size_t n = (size_t)x->result;
				if (r->nout + n < sizeof r->out) {
					memcpy(r->out + r->nout, x->u.read.lease.data, n);
					r->nout += n;
				}
				H_EQ(tl_lease_release(c->loop, x->u.read.lease.id), 0);
				x->flags &= (uint16_t)~TL_F_LEASE;
			}
			if ((x->flags & TL_F_TERMINAL) && (x->flags & TL_F_EOF))
				r->eof = 1;
		}
	}
	r->out[r->nout] = 0;
}

/* Rule: a child whose stdout is read to EOF: every byte arrives in order,
 * then EOF; its exit is one terminal TL_K_EXIT with status 0 and its pid,
 * exactly once. */
static void test_spawn_stdout_eof(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	struct run r;
	spawn_sh(&c, "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done", &r, NULL);
	int pid = tl_proc_pid(l, r.proc);
	H_TRUE(pid > 0, "pid %d", pid);
	H_TRUE(r.pipes[0].v == 0 && r.pipes[2].v == 0 && r.pipes[1].v != 0, "pipes");
	read_to_eof(&c, r.pipes[1], &r);
	H_TRUE(r.eof, "no EOF on the child's stdout");
	/* Every line, in order. */
	char *p = r.out;
	int ok = 1;
	for (int i = 0; i < 2000 && ok; i++) {
		char want[32];
		int n = snprintf(want, sizeof want, "line%d\n", i);
		ok = strncmp(p, want, (size_t)n) == 0;
		p += n;
	}
	H_TRUE(ok && *p == 0, "stdout differs (%zu bytes)", r.nout);
	int i = h_wait_op(&c, r.exit);
	H_TRUE_FATAL(i >= 0, "no exit");
	tl_completion *x = &c.log.v[i];
	H_EQ(x->kind, TL_K_EXIT);
	H_EQ(x->result, 0);
	H_EQ(x->flags & TL_F_TERMINAL, TL_F_TERMINAL);
	H_EQ(x->token, 0xe0);
	H_EQ(x->u.exit.pid, pid);
	H_EQ(x->u.exit.status, 0);
	H_EQ(x->u.exit.signal, 0);
	h_idle(&c, 20);
	H_EQ(h_count_op(&c.log, r.exit, 0), 1);
	/* Reaped: nothing more to signal. */
	H_EQ(tl_proc_kill(l, r.proc, SIGTERM), -ESRCH);
	H_EQ(waitpid(pid, NULL, WNOHANG), -1);
	H_TRUE(h_close(&c, r.pipes[1], 0) >= 0, "pipe Closed");
	H_TRUE(h_close(&c, r.proc, 0) >= 0, "proc Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: the exit reports a status, or the signal that killed the child: a
 * child that kills itself with SIGUSR1, one killed through tl_proc_kill,
 * one that exits 7. */
static void test_spawn_status_and_signal(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	tl_spawn_opts quiet = {0};
	struct run a, b, d;
	spawn_sh(&c, "exit 7", &a, &quiet);
	spawn_sh(&c, "kill -USR1 $$; sleep 5", &b, &quiet);
	spawn_sh(&c, "exec sleep 30", &d, &quiet);
	H_EQ(tl_proc_kill(l, d.proc, 0), 0);
	H_EQ(tl_proc_kill(l, d.proc, SIGKILL), 0);
	int ia = h_wait_op(&c, a.exit), ib = h_wait_op(&c, b.exit), id = h_wait_op(&c, d.exit);
	H_TRUE_FATAL(ia >= 0 && ib >= 0 && id >= 0, "exits %d %d %d", ia, ib, id);
	H_EQ(c.log.v[ia].result, 0);
	H_EQ(c.log.v[ia].u.exit.status, 7);
	H_EQ(c.log.v[ia].u.exit.signal, 0);
	H_EQ(c.log.v[ib].result, 0);
	H_EQ(c.log.v[ib].u.exit.signal, SIGUSR1);
	H_EQ(c.log.v[ib].u.exit.status, 0);
	H_EQ(c.log.v[id].u.exit.signal, SIGKILL);
	H_TRUE(h_close(&c, a.proc, 0) >= 0 && h_close(&c, b.proc, 0) >= 0 &&
	       h_close(&c, d.proc, 0) >= 0, "Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a program that does not exist fails the spawn with its errno
 * (-ENOENT, by path and through PATH; a missing cwd too) and leaves no
 * process, handle, op or descriptor behind. */
static void test_spawn_missing(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	tl_handle h = {0x1234}, pipes[3];
	tl_op op;
	int fds_loop = h_fd_count(); /* with the loop's own */
	tl_spawn_opts o = {.file = "/nonexistent/tl-no-such-program"};
	o.stdio[0].mode = TL_SPAWN_PIPE;
	o.stdio[1].mode = TL_SPAWN_PIPE;
	o.stdio[2].mode = TL_SPAWN_IGNORE;
	H_EQ(tl_spawn(l, &o, 0, &h, &op, pipes), -ENOENT);
	o.file = "tl-no-such-program-anywhere";
	H_EQ(tl_spawn(l, &o, 0, &h, &op, pipes), -ENOENT);
	o.file = "/bin/sh";
	o.cwd = "/nonexistent-dir-of-turnloop";
	H_EQ(tl_spawn(l, &o, 0, &h, &op, pipes), -ENOENT);
	tl_loop_stats st = stats(l);
	H_EQ(st.handles, 0);
	H_EQ(st.ops, 0);
	H_TRUE(!tl_alive(l), "alive after a refused spawn");
	H_EQ(h_fd_count(), fds_loop);
	H_EQ(waitpid(-1, NULL, WNOHANG), -1); /* no child of ours at all */
	H_EQ(errno, ECHILD);
	/* Bad arguments. */
	H_EQ(tl_spawn(l, NULL, 0, &h, &op, pipes), -EINVAL);
	tl_spawn_opts bad = {.file = ""};
	H_EQ(tl_spawn(l, &bad, 0, &h, &op, pipes), -EINVAL);
	bad.file = "true";
	bad.stdio[1].mode = 42;
	H_EQ(tl_spawn(l, &bad, 0, &h, &op, pipes), -EINVAL);
	bad.stdio[1].mode = TL_SPAWN_PIPE;
	H_EQ(tl_spawn(l, &bad, 0, &h, &op, NULL), -EINVAL);
	bad.stdio[1].mode = TL_SPAWN_HANDLE;
	bad.stdio[1].handle = (tl_handle){0x77};
	H_EQ(tl_spawn(l, &bad, 0, &h, &op, pipes), -ENOENT);
	bad.stdio[1].mode = TL_SPAWN_FD;
	bad.stdio[1].fd = -1;
	H_EQ(tl_spawn(l, &bad, 0, &h, &op, pipes), -EINVAL);
	H_EQ(tl_proc_pid(l, (tl_handle){0x77}), -ENOENT);
	H_EQ(stats(l).handles, 0);
	h_end(l, fds);
}

/* Rule: stdin piped and written, shut down for EOF, the child's echo read
 * back; argv, env and cwd as given; stderr attached to an existing handle
 * of the loop (a TCP stream) and stdout to a plain descriptor; stdin
 * ignored reads EOF. */
static void test_spawn_stdio_modes(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	/* cat: stdin and stdout piped. */
	char *cat_argv[] = {"cat", NULL};
	tl_spawn_opts o = {.file = "cat", .argv = cat_argv};
	o.stdio[0].mode = TL_SPAWN_PIPE;
	o.stdio[1].mode = TL_SPAWN_PIPE;
	struct run r;
	memset(&r, 0, sizeof r);
	H_EQ_FATAL(tl_spawn(l, &o, 1, &r.proc, &r.exit, r.pipes), 0);
	static char msg[100000];
	fill_pattern(msg, sizeof msg, 0);
	tl_op wop, sop;
	H_EQ(tl_write(l, r.pipes[0], msg, sizeof msg, 2, &wop), 0);
	H_EQ(tl_shutdown(l, r.pipes[0], 3, &sop), 0);
	read_to_eof(&c, r.pipes[1], &r);
	H_EQ(r.nout, sizeof msg);
	H_EQ(check_pattern(r.out, r.nout < sizeof msg ? r.nout : sizeof msg, 0), -1);
	int i = h_wait_op(&c, r.exit);
	H_TRUE(i >= 0 && c.log.v[i].u.exit.status == 0, "cat's exit");
	H_TRUE(h_close(&c, r.pipes[0], 0) >= 0 && h_close(&c, r.pipes[1], 0) >= 0 &&
	       h_close(&c, r.proc, 0) >= 0, "Closed");
	/* env, cwd, stdin ignored, stdout to a plain pipe, stderr to a TCP
	 * stream handle. */
	tl_handle srv, cli;
	int have_tcp = (tl_loop_caps(l) & TL_CAP_TCP) && h_pair(&c, &c, AF_INET, &srv, &cli) == 0;
	int p[2];
	H_EQ_FATAL(pipe2(p, O_CLOEXEC), 0);
	char *env[] = {"TLX=42", NULL};
	static char *argv[] = {"sh", "-c",
			       "read x; printf '%s:%s:%s' \"$TLX\" \"$(pwd)\" \"$x\"; printf oops >&2",
			       NULL};
	tl_spawn_opts e = {.file = "sh", .argv = argv, .envp = env, .cwd = "/"};
	e.stdio[0].mode = TL_SPAWN_IGNORE;
	e.stdio[1].mode = TL_SPAWN_FD;
	e.stdio[1].fd = p[1];
	if (have_tcp) {
		e.stdio[2].mode = TL_SPAWN_HANDLE;
		e.stdio[2].handle = cli;
	} else {
		e.stdio[2].mode = TL_SPAWN_IGNORE;
	}
	tl_handle pipes[3];
	H_EQ_FATAL(tl_spawn(l, &e, 4, &r.proc, &r.exit, pipes), 0);
	H_TRUE(pipes[0].v == 0 && pipes[1].v == 0 && pipes[2].v == 0, "no pipes asked");
	close(p[1]);
	i = h_wait_op(&c, r.exit);
	H_TRUE(i >= 0 && c.log.v[i].u.exit.status == 0, "sh's exit");
	char buf[256];
	ssize_t n = read(p[0], buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	H_TRUE(strcmp(buf, "42:/:") == 0, "stdout: \"%s\"", buf);
	close(p[0]);
	if (have_tcp) {
		char eb[8] = {0};
		H_EQ(h_read_exact(&c, srv, eb, 4, NULL), 4);
		H_TRUE(memcmp(eb, "oops", 4) == 0, "stderr through the handle: \"%.4s\"", eb);
		H_TRUE(h_close(&c, srv, 0) >= 0 && h_close(&c, cli, 0) >= 0, "TCP Closed");
	}
	H_TRUE(h_close(&c, r.proc, 0) >= 0, "Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: closing a live child starts its termination (SIGTERM) and still
 * waits for the reap: Cancelled (with the signal that ended it) before
 * Closed. A child that ignores SIGTERM is killed after kill_after_ns. */
static void test_close_terminates(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	tl_spawn_opts quiet = {0};
	struct run r;
	spawn_sh(&c, "exec sleep 30", &r, &quiet);
	h_idle(&c, 20);
	H_EQ(tl_close(l, r.proc, 0xc1), 0);
	H_EQ(tl_close(l, r.proc, 0xc1), -EINVAL);
	int t = h_wait_op(&c, r.exit);
	int cl = h_wait_closed(&c, r.proc);
	H_TRUE_FATAL(t >= 0 && cl > t, "exit %d before Closed %d", t, cl);
	H_EQ(c.log.v[t].result, -ECANCELED);
	H_EQ(c.log.v[t].u.exit.signal, SIGTERM);
	H_EQ(c.log.v[cl].token, 0xc1);
	/* Ignoring SIGTERM: SIGKILL after 200 ms. */
	tl_spawn_opts stubborn = {.kill_after_ns = 200 * H_MS};
	stubborn.stdio[1].mode = TL_SPAWN_PIPE;
	spawn_sh(&c, "trap '' TERM; echo ready; exec sleep 30", &r, &stubborn);
	char ready[8] = {0};
	H_EQ(h_read_exact(&c, r.pipes[1], ready, 6, NULL), 6);
	uint64_t t0 = h_wall_ns();
	H_EQ(tl_cancel(l, r.exit), 0);
	H_EQ(tl_cancel(l, r.exit), -EALREADY);
	t = h_wait_op(&c, r.exit);
	uint64_t took = h_wall_ns() - t0;
	H_TRUE_FATAL(t >= 0, "no exit");
	H_EQ(c.log.v[t].result, -ECANCELED);
	H_EQ(c.log.v[t].u.exit.signal, SIGKILL);
	H_TRUE(took >= 180 * H_MS, "killed after %llu ms", (unsigned long long)(took / H_MS));
	H_TRUE(h_close(&c, r.pipes[1], 0) >= 0 && h_close(&c, r.proc, 0) >= 0, "Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* pid runs (exists and is no zombie: its reaper may be slow). */
static int alive(int pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* Rule: a child in a new process group: tl_proc_kill_group reaches the
 * child and what it spawned there; without a group it is -EINVAL. The
 * loop reaps only its own children: one the host forked itself is still
 * there for the host's waitpid. */
static void test_group_and_not_stolen(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	pid_t host_child = fork();
	if (host_child == 0)
		_exit(3);
	H_TRUE_FATAL(host_child > 0, "fork");
	tl_spawn_opts g = {.flags = TL_SPAWN_PGROUP};
	g.stdio[1].mode = TL_SPAWN_PIPE;
	struct run r;
	spawn_sh(&c, "sleep 30 & echo $!; wait", &r, &g);
	char line[32] = {0};
	uint32_t got = 0;
	while (got < sizeof line - 1 && !strchr(line, '\n')) {
		int64_t n = h_read_exact(&c, r.pipes[1], line + got, 1, NULL);
		if (n != 1)
			break;
		got++;
	}
	int grandchild = atoi(line);
	H_TRUE_FATAL(grandchild > 0, "grandchild pid \"%s\"", line);
	H_EQ(kill(grandchild, 0), 0);
	H_EQ(tl_proc_kill_group(l, r.proc, SIGTERM), 0);
	int i = h_wait_op(&c, r.exit);
	H_TRUE(i >= 0 && c.log.v[i].u.exit.signal == SIGTERM, "the group's leader got SIGTERM");
	/* The grandchild got it too (whoever reaps it now: dead soon). */
	uint64_t dl = h_wall_ns() + (uint64_t)H_WAIT_MS * H_MS;
	while (alive(grandchild) && h_wall_ns() < dl)
		h_sleep_ms(5);
	H_TRUE(!alive(grandchild), "the grandchild outlived its group's SIGTERM");
	struct run n;
	tl_spawn_opts plain = {0};
	spawn_sh(&c, "exit 0", &n, &plain);
	H_EQ(tl_proc_kill_group(l, n.proc, SIGTERM), -EINVAL);
	H_EQ(tl_proc_kill(l, n.proc, 99), -EINVAL);
	i = h_wait_op(&c, n.exit);
	H_TRUE(i >= 0, "exit");
	/* The host's own child was left alone. */
	int status = 0;
	H_EQ(waitpid(host_child, &status, 0), host_child);
	H_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3, "host child status %#x", status);
	H_TRUE(h_close(&c, r.pipes[1], 0) >= 0 && h_close(&c, r.proc, 0) >= 0 &&
	       h_close(&c, n.proc, 0) >= 0, "Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: destroying a loop with a live child terminates and reaps it (no
 * zombie, no descriptor left). */
static void test_destroy_reaps(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!need_spawn(l)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	struct run r;
	tl_spawn_opts quiet = {0};
	spawn_sh(&c, "exec sleep 30", &r, &quiet);
	int pid = tl_proc_pid(l, r.proc);
	h_ctx_fini(&c);
	tl_loop_destroy(l);
	H_EQ(waitpid(pid, NULL, WNOHANG), -1);
	H_EQ(errno, ECHILD);
	H_EQ(kill(pid, 0), -1);
	h_end(NULL, fds);
}

const struct test_def tl_contract_proc[] = {
	T("5 processes", test_spawn_stdout_eof),
	T("5 processes", test_spawn_status_and_signal),
	T("5 processes", test_spawn_missing),
	T("5 processes", test_spawn_stdio_modes),
	T("5 processes", test_close_terminates),
	T("5 processes", test_group_and_not_stolen),
	T("5 processes", test_destroy_reaps),
	{ NULL, NULL, NULL },
};
