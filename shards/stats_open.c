/* shards/stats_open.c: the stats reader's POSIX part (stats_reader.h): a process's region found in /dev/shm/turnloop-<uid>/ and trusted only after its directory's and its own owner, type and mode are checked and its header names the live process (pid, uid, start time from /proc); the writer held by a pidfd; bytes copied with pread. The format is stats.c's; Windows' part is stats_open_win.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "stats_reader.h"

#define say tl__stats_say

/* pread all of len bytes at off: 0, -EPROTO when the file is shorter (it
 * shrank or was never that long), or the OS error. Each pread is a
 * separate copy by the kernel, and the system calls order the reads. */
int tl__stats_os_read(const tl_stats_reader *r, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(r->fd, (char *)buf + got, len - got, (off_t)off + (off_t)got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPROTO;
		got += (size_t)n;
	}
	return 0;
}

/* ---- the process behind a pid ---- */

/* Read a small /proc file whole (NUL-terminated); its length or -errno. */
static int read_proc(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	size_t got = 0;

	if (fd < 0)
		return -errno;
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			close(fd);
			return rc;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return (int)got;
}

int tl__proc_stat(int pid, uint64_t *start_time, char *state)
{
	char path[64], buf[1024], *p, *end;
	unsigned long long v;
	int n;

	if (pid)
		snprintf(path, sizeof path, "/proc/%d/stat", pid);
	else
		snprintf(path, sizeof path, "/proc/self/stat");
	n = read_proc(path, buf, sizeof buf);
	if (n < 0)
		return n == -ENOENT ? -ESRCH : n;
	/* The command name (field 2) may hold spaces and parentheses; the
	 * fields after it start after its last ')'. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EPROTO;
	p += 2;
	if (state)
		*state = *p;
	/* Field 3 is the state; field 22 is 19 fields further on. */
	for (int f = 3; f < 22; f++) {
		p = strchr(p, ' ');
		if (!p)
			return -EPROTO;
		p++;
	}
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno || end == p || (*end != ' ' && *end != '\n' && *end))
		return -EPROTO;
	*start_time = v;
	return 0;
}

/* The effective uid of pid (second number of the Uid: line). */
static int proc_euid(int pid, uint32_t *uid)
{
	char path[64], buf[4096], *p;
	unsigned long r, e;
	int n;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	n = read_proc(path, buf, sizeof buf);
	if (n < 0)
		return n == -ENOENT ? -ESRCH : n;
	p = strstr(buf, "\nUid:");
	if (!p || sscanf(p + 5, "%lu %lu", &r, &e) != 2)
		return -EPROTO;
	*uid = (uint32_t)e;
	return 0;
}

static int pidfd_of(int pid)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFD);

		if (fl >= 0)
			fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	}
	return fd;
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Is the reader's process still the one it opened? 0 or -ESRCH. */
int tl__stats_os_alive(const tl_stats_reader *r)
{
	uint64_t start;
	char state;

	if (!r->pid)
		return 0;
	if (r->pidfd >= 0) {
		struct pollfd p = {.fd = r->pidfd, .events = POLLIN};

		/* A pidfd polls readable once its whole process has exited,
		 * even if its pid is in use again by then. */
		if (poll(&p, 1, 0) > 0)
			return -ESRCH;
	}
	/* The leader of a killed process is a zombie while its other threads
	 * still finish exiting: already no writer. Without a pidfd, the start
	 * time tells a reused pid. */
	if (tl__proc_stat(r->pid, &start, &state) < 0 || start != r->start_time ||
	    state == 'Z' || state == 'X')
		return -ESRCH;
	return 0;
}

/* ---- the region ---- */

void tl__stats_os_init(tl_stats_reader *r)
{
	r->fd = -1;
	r->pidfd = -1;
}

/* The file's size, once it is known to be a regular file; gone: a pid
 * reader's region was unlinked (tl_runtime_destroy unlinks it). */
int tl__stats_os_size(tl_stats_reader *r, uint64_t *size, int *gone, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	if (fstat(r->fd, &st) < 0) {
		rc = -errno;
		say(err, errlen, "%s: %s", r->name, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		say(err, errlen, "%s: not a stats region (not a regular file)", r->name);
		return -EPROTO;
	}
	*size = (uint64_t)st.st_size;
	if (gone)
		*gone = st.st_nlink == 0;
	return 0;
}

int tl__stats_os_open_path(tl_stats_reader *r, const char *path, char *err, size_t errlen)
{
	int rc;

	/* O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It
	 * changes nothing for the regular file tl__stats_load insists on. */
	r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (r->fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			say(err, errlen, "%s: no such stats region", r->name);
		else
			say(err, errlen, "%s: %s", r->name, strerror(-rc));
		return rc;
	}
	return 0;
}

/* Open /dev/shm/turnloop-<uid> and check it is what the runtime makes. */
static int open_dir(tl_stats_reader *r, uint32_t uid, char *err, size_t errlen)
{
	char dir[TL__STATS_DIR_MAX];
	struct stat st;
	int dfd, rc;

	snprintf(dir, sizeof dir, TL__STATS_DIR_FMT, uid);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			say(err, errlen, "%s: no stats region (no %s: not a turnloop process, or "
					 "its stats are off)", r->name, dir);
		else if (rc == -ELOOP || rc == -ENOTDIR) {
			say(err, errlen, "%s: %s is not a directory (a symbolic link or a file "
					 "put there by someone else): not trusted", r->name, dir);
			rc = -EPERM;
		} else if (rc == -EACCES)
			say(err, errlen, "%s: permission denied: the stats of uid %u's processes "
					 "are readable by that user only", r->name, uid);
		else
			say(err, errlen, "%s: %s: %s", r->name, dir, strerror(-rc));
		return rc;
	}
	if (fstat(dfd, &st) < 0) {
		rc = -errno;
		say(err, errlen, "%s: %s: %s", r->name, dir, strerror(-rc));
		close(dfd);
		return rc;
	}
	if (st.st_uid != uid) {
		say(err, errlen, "%s: %s belongs to uid %u, not to uid %u (the process's "
				 "user): not trusted", r->name, dir, (unsigned)st.st_uid, uid);
		close(dfd);
		return -EPERM;
	}
	if ((st.st_mode & 07777) != 0700) {
		say(err, errlen, "%s: %s has mode %04o, not 0700: not trusted", r->name, dir,
		    (unsigned)(st.st_mode & 07777));
		close(dfd);
		return -EPERM;
	}
	return dfd;
}

/* Open the region in dfd and check its type, owner and mode. */
static int open_region(tl_stats_reader *r, int dfd, uint32_t uid, char *err, size_t errlen)
{
	char name[16];
	struct stat st;
	int rc;

	snprintf(name, sizeof name, "%d", r->pid);
	r->fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (r->fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			say(err, errlen, "%s: no stats region (not a turnloop process, or its "
					 "stats are off)", r->name);
		else if (rc == -ELOOP) {
			say(err, errlen, "%s: the region is a symbolic link: not trusted", r->name);
			rc = -EPERM;
		} else
			say(err, errlen, "%s: %s", r->name, strerror(-rc));
		return rc;
	}
	if (fstat(r->fd, &st) < 0) {
		rc = -errno;
		say(err, errlen, "%s: %s", r->name, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		say(err, errlen, "%s: the region is not a regular file: not trusted", r->name);
		return -EPERM;
	}
	if (st.st_uid != uid) {
		say(err, errlen, "%s: the region belongs to uid %u, not to uid %u (the "
				 "process's user): not trusted", r->name, (unsigned)st.st_uid, uid);
		return -EPERM;
	}
	if (st.st_mode & 077) {
		say(err, errlen, "%s: the region has mode %04o (others may write or read it): "
				 "not trusted", r->name, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int tl__stats_os_open_pid(tl_stats_reader *r, int pid, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
	uint64_t start, again;
	uint32_t uid;
	char state;
	int dfd, rc;

	r->pid = pid;
	snprintf(r->name, sizeof r->name, "pid %d", pid);
	rc = tl__proc_stat(pid, &start, &state);
	if (rc == 0 && (state == 'Z' || state == 'X'))
		rc = -ESRCH;
	if (rc == 0)
		rc = proc_euid(pid, &uid);
	if (rc < 0) {
		if (rc == -ESRCH)
			say(err, errlen, "%s: no such process (it has exited)", r->name);
		else
			say(err, errlen, "%s: cannot read /proc/%d: %s", r->name, pid, strerror(-rc));
		return rc;
	}
	r->start_time = start;
	dfd = open_dir(r, uid, err, errlen);
	if (dfd < 0)
		return dfd;
	rc = open_region(r, dfd, uid, err, errlen);
	close(dfd);
	if (rc < 0)
		return rc;
	rc = tl__stats_load(r, &h, NULL, err, errlen);
	if (rc < 0)
		return rc;
	if (h.pid != pid || h.uid != uid) {
		say(err, errlen, "%s: the region names pid %d of uid %u: not trusted", r->name,
		    (int)h.pid, (unsigned)h.uid);
		return -EPERM;
	}
	if (h.start_time != start) {
		say(err, errlen, "%s: the region was left by an earlier process with this pid "
				 "(started at tick %llu, this one at tick %llu); that one has exited",
		    r->name, (unsigned long long)h.start_time, (unsigned long long)start);
		return -ESRCH;
	}
	/* Hold the process itself from now on: its exit, even if its pid is
	 * reused at once, then shows on the pidfd. Check the start time again
	 * after opening it, so that the pidfd is of the process checked. */
	r->pidfd = pidfd_of(pid);
	if (tl__proc_stat(pid, &again, &state) < 0 || again != start || state == 'Z' ||
	    state == 'X' || tl__stats_os_alive(r) < 0) {
		say(err, errlen, "%s: the process has exited", r->name);
		return -ESRCH;
	}
	return 0;
}

void tl__stats_os_close(tl_stats_reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->fd = r->pidfd = -1;
}
