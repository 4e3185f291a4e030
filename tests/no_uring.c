/* tests/no_uring.c: run a program with io_uring_setup refused (EPERM, as a container's seccomp profile does), and with --container epoll_pwait2 too, and check its exit status. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/*
 * Usage: no_uring [--container] [--expect STATUS] PROGRAM ARGS...
 * Without --expect, exits with PROGRAM's status. With it, exits 0 when
 * PROGRAM exited with STATUS and 1 otherwise: a test that must skip (77)
 * when io_uring is refused can then be asserted, not merely tolerated.
 * Then PROGRAM's output (stdout and stderr) is passed on with each line
 * behind "no_uring: child: ": its SKIP lines are the result under test,
 * not skips of this test, and tools/check must not list them as such.
 * --container refuses epoll_pwait2 as well, with EPERM: what a seccomp
 * profile written before that call existed (Linux 5.11) does with it, as
 * Docker's default profile refuses io_uring (an unlisted call gets EPERM).
 */

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char **argv)
{
	int expect = -1, container = 0, i = 1;
	if (argc > i && !strcmp(argv[i], "--container")) {
		container = 1;
		i++;
	}
	if (argc > i + 1 && !strcmp(argv[i], "--expect")) {
		expect = atoi(argv[i + 1]);
		i += 2;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: no_uring [--container] [--expect STATUS] PROGRAM ARGS...\n");
		return 2;
	}
#ifdef ARCH
	/* Without --container the second test matches nothing (no call has
	 * number -1). */
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, container ? __NR_epoll_pwait2 : (uint32_t)-1, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
		perror("no_uring: seccomp");
		return 2;
	}
#else
	fprintf(stderr, "no_uring: no seccomp architecture constant for this CPU\n");
	return 2;
#endif
	int out[2] = {-1, -1};
	if (expect >= 0 && pipe(out) < 0)
		return 2;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		if (out[1] >= 0 && (dup2(out[1], 1) < 0 || dup2(out[1], 2) < 0))
			_exit(126);
		if (out[1] >= 0) {
			close(out[0]);
			close(out[1]);
		}
		execv(argv[i], argv + i);
		perror("no_uring: exec");
		_exit(127);
	}
	if (out[0] >= 0) {
		close(out[1]);
		FILE *in = fdopen(out[0], "r");
		char *line = NULL;
		size_t cap = 0;
		if (!in)
			return 2;
		while (getline(&line, &cap, in) > 0)
			printf("no_uring: child: %s", line);
		free(line);
		fclose(in);
		fflush(stdout);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 2;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (expect < 0)
		return code;
	if (code != expect)
		fprintf(stderr, "no_uring: %s exited %d, expected %d\n", argv[i], code, expect);
	return code == expect ? 0 : 1;
}
