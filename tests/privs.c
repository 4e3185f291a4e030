/* tests/privs.c: what the environment lets a test do, and users of a test's own (see privs.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "privs.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>

int tp_refused(int err)
{
	switch (err) {
	case EPERM:
	case EACCES:
	case EINVAL:
	case ENOSPC:
	case EUSERS:
	case ENOSYS:
		return 1;
	default:
		return 0;
	}
}

/* The ids processes of this PID namespace hold (real, effective, saved,
 * filesystem), unsorted; *n of them. NULL if /proc cannot be read. */
static uint32_t *uids_in_use(size_t *n)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t cap = 1024, k = 0;
	uint32_t *v = malloc(cap * sizeof *v);

	if (!d || !v) {
		if (d)
			closedir(d);
		free(v);
		return NULL;
	}
	while ((e = readdir(d)) != NULL) {
		char path[300], line[256];
		FILE *f;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue; /* gone meanwhile */
		while (fgets(line, sizeof line, f)) {
			unsigned u[4];

			if (strncmp(line, "Uid:", 4) != 0)
				continue;
			if (sscanf(line + 4, "%u %u %u %u", &u[0], &u[1], &u[2], &u[3]) == 4) {
				if (k + 4 > cap) {
					uint32_t *w = realloc(v, 2 * cap * sizeof *v);

					if (!w)
						break;
					v = w;
					cap *= 2;
				}
				memcpy(v + k, u, sizeof u);
				k += 4;
			}
			break;
		}
		fclose(f);
	}
	closedir(d);
	*n = k;
	return v;
}

/* Nothing of uid's exists that we can see. */
static int uid_free(uint32_t uid, const uint32_t *used, size_t nused)
{
	char dir[64];
	struct stat st;

	for (size_t i = 0; i < nused; i++)
		if (used[i] == uid)
			return 0;
	if (getpwuid(uid) || getgrgid(uid))
		return 0;
	snprintf(dir, sizeof dir, "/dev/shm/turnloop-%u", uid);
	return lstat(dir, &st) < 0 && errno == ENOENT;
}

int tp_own_uids(uint32_t n, uint32_t *first, char *why, size_t len)
{
	/* Ids from here up: far above any distribution's ranges for system and
	 * human users (and above the 65536 a small user namespace maps, where
	 * the search falls back to what is mapped above 1000). */
	enum { HIGH = 0x40000000u, LOW = 1000u };
	uint32_t lo[16], hi[16]; /* mapped ranges [lo, hi) we may pick in */
	int nr = 0;
	FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long in, out, cnt;

	if (f) {
		while (nr < 16 && fscanf(f, "%lu %lu %lu", &in, &out, &cnt) == 3) {
			unsigned long a = in, b = in + cnt;

			if (b > 0x7ffffff0ul)
				b = 0x7ffffff0ul; /* ids that no tool reads as negative */
			if (b > HIGH + n && a < HIGH)
				a = HIGH;
			else if (a < LOW)
				a = LOW;
			if (b > a + n + 1) {
				lo[nr] = (uint32_t)a;
				hi[nr] = (uint32_t)(b - n);
				nr++;
			}
		}
		fclose(f);
	}
	if (nr == 0) {
		snprintf(why, len, "no block of %u unused user ids is mapped in this user namespace",
			 (unsigned)n);
		return -ENOENT;
	}
	size_t nused = 0;
	uint32_t *used = uids_in_use(&nused);
	for (int tries = 0; tries < 200; tries++) {
		uint64_t r;

		if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
			r = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull + (uint64_t)tries;
		int k = (int)(r % (uint64_t)nr);
		uint32_t span = hi[k] - lo[k];
		uint32_t u = lo[k] + (uint32_t)((r >> 8) % span);
		uint32_t j = 0;

		while (j < n && uid_free(u + j, used, nused))
			j++;
		if (j == n) {
			free(used);
			*first = u;
			return 0;
		}
	}
	free(used);
	snprintf(why, len, "found no block of %u user ids that nobody uses", (unsigned)n);
	return -ENOENT;
}

int tp_become(uint32_t uid)
{
	if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
		return -errno;
	return 0;
}

int tp_can_become(uint32_t uid, char *why, size_t len)
{
	int st;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0)
		_exit(-tp_become(uid) & 0xff);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -ECHILD;
	st = WEXITSTATUS(st);
	if (st == 0)
		return 1;
	if (!tp_refused(st))
		return -st;
	snprintf(why, len, "cannot become user %u (setgroups, setgid, setuid): %s", (unsigned)uid,
		 strerror(st));
	return 0;
}
