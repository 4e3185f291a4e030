/* shards/stats_shm.c: the live stats region's home on POSIX (contract 9.7): the per-user directory under /dev/shm it checks, stale regions of dead writers it sweeps, the region file it makes, locks, maps and removes, and the writer's identity (pid, uid, start time). Windows' is stats_shm_win.c; what goes into the region is stats_writer.c's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "runtime_int.h"

/*
 * Open this user's stats directory, creating it if needed, and check it: a
 * directory (O_DIRECTORY|O_NOFOLLOW: not a symbolic link) that belongs to
 * the effective user, with mode 0700. Every check is on the descriptor, so
 * what was checked is what is used. /dev/shm is sticky: nobody but its owner
 * (and root) can remove or rename the directory once it is there.
 */
static int stats_dir(tl_runtime *rt)
{
	uid_t uid = geteuid();
	struct stat st;
	int dfd, rc;

	snprintf(rt->stats_dir, sizeof rt->stats_dir, TL__STATS_DIR_FMT, (unsigned)uid);
	if (mkdir(rt->stats_dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot create %s: %s", rt->stats_dir, strerror(-rc));
		return rc;
	}
	dfd = open(rt->stats_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		rc = -errno;
		if ((rc == -ELOOP || rc == -ENOTDIR) && lstat(rt->stats_dir, &st) == 0) {
			tl__rt_stats_off(rt, "%s is not a directory but a %s of uid %u; it was not "
				      "made by turnloop (remove it as root or as its owner)",
				  rt->stats_dir, S_ISLNK(st.st_mode) ? "symbolic link" : "file",
				  (unsigned)st.st_uid);
			return -EPERM;
		}
		tl__rt_stats_off(rt, "cannot open %s: %s", rt->stats_dir, strerror(-rc));
		return rc;
	}
	if (fstat(dfd, &st) < 0) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot check %s: %s", rt->stats_dir, strerror(-rc));
		close(dfd);
		return rc;
	}
	if (st.st_uid != uid) {
		tl__rt_stats_off(rt, "%s belongs to uid %u, not to this process's user (uid %u): its "
			      "regions could be read or forged by that user (remove it as root "
			      "or as its owner)",
			  rt->stats_dir, (unsigned)st.st_uid, (unsigned)uid);
		close(dfd);
		return -EPERM;
	}
	/* Ours: a mode the umask or a user's chmod left is set back. */
	if ((st.st_mode & 07777) != 0700 && fchmod(dfd, 0700) < 0) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot set %s to mode 0700: %s", rt->stats_dir, strerror(-rc));
		close(dfd);
		return rc;
	}
	return dfd;
}

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/*
 * Remove the regions of this user's processes that died without cleaning up
 * (SIGKILL, a crash). A writer holds an exclusive flock on its region from
 * the moment it creates it until it exits (TL_STATS_F_LOCKED), and the
 * kernel drops the lock with the process, however it ends: a region this
 * process can lock has no live writer. That holds across PID namespaces
 * sharing /dev/shm (containers, `unshare -p`), where a pid this process
 * cannot see in its /proc may still be alive: judging by pid would remove
 * live regions there. A region of an older writer without the flag is
 * judged by pid and start time, as before: gone, a zombie, or another start
 * time than the live process with that pid. A region still being made (no
 * magic yet) is left alone. Bounded: a start looks at 1024 entries at most.
 */
static void sweep_stale(int dfd)
{
	int fd = dup(dfd), seen = 0;
	struct dirent *e;
	DIR *d;

	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	while ((e = readdir(d)) && seen++ < 1024) {
		struct tl__stats_hdr h;
		uint64_t start;
		char state;
		long pid;
		int rfd, dead, rc;

		if (!all_digits(e->d_name) || strlen(e->d_name) > 10)
			continue;
		pid = strtol(e->d_name, NULL, 10);
		if (pid <= 0 || pid > 0x7fffffff || pid == (long)getpid())
			continue;
		rfd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (rfd < 0)
			continue;
		if (pread(rfd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
		    __atomic_load_n(&h.magic, __ATOMIC_ACQUIRE) != TL_STATS_MAGIC) {
			close(rfd); /* being made, or not a region of ours */
			continue;
		}
		if (h.version == TL_STATS_VERSION && (h.flags & TL_STATS_F_LOCKED)) {
			/* Kept locked while unlinking: a lock taken means no writer. */
			dead = flock(rfd, LOCK_EX | LOCK_NB) == 0;
		} else {
			rc = tl__proc_stat((int)pid, &start, &state);
			dead = rc == -ESRCH || (rc == 0 && (state == 'Z' || state == 'X')) ||
			       (rc == 0 && h.version == TL_STATS_VERSION && h.start_time != start);
		}
		if (dead)
			unlinkat(dfd, e->d_name, 0);
		close(rfd);
	}
	closedir(d);
}

int tl__rt_shm_create(tl_runtime *rt, size_t size)
{
	int fd = -1, dfd, rc;
	void *mem;

	dfd = stats_dir(rt);
	if (dfd < 0)
		return dfd;
	sweep_stale(dfd);
	snprintf(rt->region_name, sizeof rt->region_name, "%d", (int)getpid());
	for (int tries = 0; tries < 2; tries++) {
		fd = openat(dfd, rt->region_name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC,
			    0600);
		if (fd >= 0 || errno != EEXIST)
			break;
		/* Only this user can create entries in the directory, and this
		 * process owns no region yet: one with our pid is a dead
		 * process's. */
		unlinkat(dfd, rt->region_name, 0);
	}
	if (fd < 0) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot create %s/%s: %s", rt->stats_dir, rt->region_name,
				 strerror(-rc));
		goto private_dir;
	}
	/* Held until the process ends (sweep_stale): before the magic is
	 * written, so a region with a magic and no lock has no writer. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot lock %s/%s: %s", rt->stats_dir, rt->region_name,
				 strerror(-rc));
		goto unlink;
	}
	/* openat applies the umask; the mode must be exactly 0600. */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot size %s/%s: %s", rt->stats_dir, rt->region_name,
				 strerror(-rc));
		goto unlink;
	}
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		rc = -errno;
		tl__rt_stats_off(rt, "cannot map %s/%s: %s", rt->stats_dir, rt->region_name,
				 strerror(-rc));
		goto unlink;
	}
	rt->region = mem;
	rt->region_size = size;
	rt->region_shm = 1;
	rt->region_fd = fd; /* holds the lock */
	rt->stats_dfd = dfd;
	return 0;
unlink:
	close(fd);
	unlinkat(dfd, rt->region_name, 0);
private_dir:
	close(dfd);
	return rc;
}

void tl__rt_shm_destroy(tl_runtime *rt)
{
	munmap(rt->region, rt->region_size);
	unlinkat(rt->stats_dfd, rt->region_name, 0);
	close(rt->region_fd); /* the lock goes after the name */
	rt->region_fd = -1;
	close(rt->stats_dfd);
	rt->stats_dfd = -1;
}

void tl__rt_shm_identity(int32_t *pid, uint32_t *uid, uint64_t *start)
{
	*start = 0;
	tl__proc_stat(0, start, NULL);
	*pid = (int32_t)getpid();
	*uid = (uint32_t)geteuid();
}
