/* turnloop/proc.h: child processes: spawn, stdio, exit, kill (contract 5: processes). */
#ifndef TURNLOOP_PROC_H
#define TURNLOOP_PROC_H

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a child's stdin, stdout or stderr is (tl_spawn_stdio.mode). */
enum tl_spawn_stdio_mode {
	TL_SPAWN_INHERIT = 0, /* the parent's own descriptor of that number */
	TL_SPAWN_IGNORE,      /* /dev/null */
	/* A new connected pair: the child gets one end, the parent the other
	 * as a stream handle of the loop (a Unix-domain stream socket, as
	 * libuv gives), returned in pipes[i]: tl_read / tl_read_start it,
	 * tl_write it, tl_shutdown it to give the child its end of input,
	 * tl_close it. */
	TL_SPAWN_PIPE,
	TL_SPAWN_HANDLE,      /* the OS descriptor of an existing handle of the loop */
	TL_SPAWN_FD,          /* a descriptor of the parent (fd) */
};

typedef struct tl_spawn_stdio {
	int mode;         /* enum tl_spawn_stdio_mode */
	tl_handle handle; /* TL_SPAWN_HANDLE: a stream, UDP socket, listener or stdio handle */
	int fd;           /* TL_SPAWN_FD */
} tl_spawn_stdio;

#define TL_SPAWN_PGROUP 0x1 /* tl_spawn_opts.flags: the child leads a new process group */

/* How to spawn. Zeroed fields take the defaults given. Everything is read
 * during tl_spawn() only. */
typedef struct tl_spawn_opts {
	const char *file;     /* the program: a path, or a name looked up in PATH
			       * (as execvp) when it has no '/'; required */
	char *const *argv;    /* NULL-terminated; NULL: { file, NULL } */
	char *const *envp;    /* NULL-terminated; NULL: the parent's environ */
	const char *cwd;      /* the child's working directory; NULL: the parent's */
	tl_spawn_stdio stdio[3]; /* stdin, stdout, stderr; zeroed: inherited */
	uint32_t flags;       /* TL_SPAWN_PGROUP */
	int term_signal;      /* what closing a live child sends first; 0: SIGTERM */
	/* How long after term_signal a child still alive gets SIGKILL;
	 * 0: 5 s; UINT64_MAX: never (the close then waits for the child as
	 * long as it lives). */
	uint64_t kill_after_ns;
} tl_spawn_opts;

/*
 * Spawn a child process. Sets *proc (the child's handle) and *exit_op, and
 * pipes[0..2] (TL_HANDLE_NONE for a stdio that is not TL_SPAWN_PIPE; pipes
 * may be NULL when none is). The child starts with an empty signal mask and
 * every signal at its default action (the shard threads of a sharded
 * runtime block SIGINT and SIGTERM, and a parent's ignored signals would
 * stay ignored across exec), and inherits no descriptor of the loop's (all
 * are close-on-exec) beyond its stdio.
 *
 * exit_op ends with exactly one terminal TL_K_EXIT completion, once the
 * child was reaped: result 0 and u.exit.pid, and u.exit.status (the exit
 * status) or u.exit.signal (the signal that ended it, u.exit.core 1 if it
 * dumped core). The child is watched through a pidfd and reaped with
 * waitid(P_PIDFD), so the loop never reaps a child it did not spawn, and a
 * host that reaps children itself (waitpid(-1, ...), SIGCHLD set to
 * SIG_IGN) takes this one too: the exit op then ends with -ECHILD. Where
 * the kernel has no pidfds, the loop holds the process's SIGCHLD handler
 * (turnloop/signal.h) while such children live and reaps each with
 * waitid(P_PID) when SIGCHLD comes.
 *
 * Closing the handle (or cancelling exit_op) of a live child starts its
 * termination: term_signal now, SIGKILL after kill_after_ns if it still
 * lives, and the exit op still ends only once the child was reaped: then
 * its terminal is -ECANCELED (u.exit filled all the same), then Closed.
 * tl_loop_destroy does the same, and so waits up to kill_after_ns for such
 * a child. Closing the handle of a child that was reaped delivers Closed
 * at once. The process handle keeps its loop alive until it is closed (as
 * libuv's does), reaped or not. Pipe handles are independent of it: close them
 * too (reading a child's stdout to its EOF is the usual way to know it is
 * done writing).
 *
 * Across fork(): a forked child (without exec) inherits the loop's
 * descriptors but must not use the loop (as with every loop: only the
 * thread that created it, in the process that created it); it cannot wait
 * for its parent's children (waitid says ECHILD), and must not kill them
 * through the loop. The children of the loop stay the parent's.
 *
 * Returns 0, or -EINVAL (opts, file, proc or exit_op NULL, file empty, a
 * stdio mode unknown, a TL_SPAWN_HANDLE that has no OS descriptor, a
 * TL_SPAWN_FD < 0, pipes NULL with a TL_SPAWN_PIPE, flags unknown,
 * term_signal out of range), -ENOENT (a stale or foreign TL_SPAWN_HANDLE),
 * -ENOBUFS (handle or op table full), -ENOTSUP (no TL_CAP_POLL: the
 * simulation driver), or the OS error of the spawn, unchanged: -ENOENT for
 * a program (or cwd) that does not exist, -EACCES, -ENOEXEC, -EMFILE, ...
 * A refused spawn leaves no process, descriptor or handle behind.
 */
int tl_spawn(tl_loop *loop, const tl_spawn_opts *opts, uint64_t token, tl_handle *proc,
	     tl_op *exit_op, tl_handle pipes[3]);

/* The child's process id (> 0), -ENOENT (stale or foreign), -EINVAL (not
 * a process handle). The id may name another process once the exit op's
 * terminal was handed out. */
int tl_proc_pid(tl_loop *loop, tl_handle proc);

/* Send signal sig (0: only check) to the child, through its pidfd (never
 * to a process that reused its id): 0, -ESRCH (it was reaped), -ENOENT,
 * -EINVAL (not a process handle, sig out of range), or the OS error. */
int tl_proc_kill(tl_loop *loop, tl_handle proc, int sig);

/* Send sig to the child's process group (spawned with TL_SPAWN_PGROUP): the
 * child and what it spawned there. 0, -ESRCH (the group is empty),
 * -EINVAL (no group of its own, sig out of range, not a process handle),
 * -ENOENT, or the OS error. Once the child was reaped, its id may lead
 * another group only after every member of this one is gone. */
int tl_proc_kill_group(tl_loop *loop, tl_handle proc, int sig);

#ifdef __cplusplus
}
#endif
#endif
