/* shards/stats.c: the reader of a process's live stats region (tlshard stats, tests): it checks whose region it is before trusting it, and never writes it. Its writer is stats_writer.c; their shared layout is stats_region.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "detail.h"
#include "stats_region.h"

/* Retries of a sequence-locked copy before -EAGAIN: a shard holds its lock
 * for one memcpy, so only a descheduled writer makes this many. */
#define SEQ_TRIES 1000

struct tl_stats_reader {
	int fd;
	int pidfd;            /* -1: none (a path reader, or no pidfd support) */
	int pid;              /* 0 for a path reader */
	uint64_t start_time;  /* the target's, checked against the header */
	uint32_t shards, stride, header_size, capacity, families_off, labels_off;
	char name[64];        /* for messages: "pid <pid>" or the path's last part */
};

static void say(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* pread all of len bytes at off: 0, -EPROTO when the file is shorter (it
 * shrank or was never that long), or the OS error. */
static int read_at(int fd, void *buf, size_t len, off_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);

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
static int still_alive(const tl_stats_reader *r)
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

/* ---- the header ---- */

/* Check a header copy against the file size; on success fill the reader's
 * shape. Every number is compared before it is used in arithmetic, so a
 * hostile header cannot make the reader overflow or read out of bounds. */
static int check_header(tl_stats_reader *r, const struct tl__stats_hdr *h, off_t size,
			char *err, size_t errlen)
{
	uint64_t need;

	if (h->magic != TL_STATS_MAGIC) {
		say(err, errlen, "%s: not a turnloop stats region (bad magic)", r->name);
		return -EPROTO;
	}
	if (h->version != TL_STATS_VERSION) {
		say(err, errlen,
		    "%s: layout version %u is not known to this reader (knows %u); "
		    "use the tlshard of the same turnloop version",
		    r->name, h->version, TL_STATS_VERSION);
		return -EPROTO;
	}
	/* The whole shape follows from the capacity; a region whose offsets
	 * say otherwise was not written by this version's runtime. */
	if (h->capacity > TL_STATS_VALUES_MAX || h->families_off != tl__stats_families_off() ||
	    h->labels_off != tl__stats_labels_off(h->capacity) ||
	    h->header_size != tl__stats_header_size(h->capacity) ||
	    h->stride != tl__stats_stride(h->capacity) || h->record_size != sizeof(tl_stats_shard) ||
	    h->shards == 0 || h->shards > TL_PLAN_MAX_SHARDS || h->families > h->capacity ||
	    h->values > h->capacity) {
		say(err, errlen, "%s: inconsistent header (version %u)", r->name, h->version);
		return -EPROTO;
	}
	need = (uint64_t)h->header_size + (uint64_t)h->shards * h->stride;
	if (size < 0 || (uint64_t)size < need) {
		say(err, errlen, "%s: region is %lld bytes, its header describes %llu", r->name,
		    (long long)size, (unsigned long long)need);
		return -EPROTO;
	}
	r->shards = h->shards;
	r->stride = h->stride;
	r->header_size = h->header_size;
	r->capacity = h->capacity;
	r->families_off = h->families_off;
	r->labels_off = h->labels_off;
	return 0;
}

static int load(tl_stats_reader *r, struct tl__stats_hdr *h, struct stat *st, char *err,
		size_t errlen)
{
	int rc;

	if (fstat(r->fd, st) < 0) {
		rc = -errno;
		say(err, errlen, "%s: %s", r->name, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st->st_mode)) {
		say(err, errlen, "%s: not a stats region (not a regular file)", r->name);
		return -EPROTO;
	}
	if ((size_t)st->st_size < sizeof *h) {
		say(err, errlen, "%s: too short for a stats region (%lld bytes)", r->name,
		    (long long)st->st_size);
		return -EPROTO;
	}
	rc = read_at(r->fd, h, sizeof *h, 0);
	if (rc < 0) {
		say(err, errlen, "%s: cannot read the header: %s", r->name, strerror(-rc));
		return rc;
	}
	return check_header(r, h, st->st_size, err, errlen);
}

static tl_stats_reader *reader_new(void)
{
	tl_stats_reader *r = calloc(1, sizeof *r);

	if (r) {
		r->fd = -1;
		r->pidfd = -1;
	}
	return r;
}

/* The reader's checks say what failed into err; the public calls pass it
 * on as the thread's detail (tl_error_detail). */
static int open_path(tl_stats_reader **out, const char *path, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
	struct stat st;
	tl_stats_reader *r;
	const char *base;
	int rc;

	if (out)
		*out = NULL;
	if (!out || !path || !*path) {
		say(err, errlen, "no region given");
		return -EINVAL;
	}
	r = reader_new();
	if (!r) {
		say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	base = strrchr(path, '/');
	snprintf(r->name, sizeof r->name, "%s", base ? base + 1 : path);
	/* O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It
	 * changes nothing for the regular file load() insists on. */
	r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (r->fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			say(err, errlen, "%s: no such stats region", r->name);
		else
			say(err, errlen, "%s: %s", r->name, strerror(-rc));
		free(r);
		return rc;
	}
	rc = load(r, &h, &st, err, errlen);
	if (rc < 0) {
		tl_stats_close(r);
		return rc;
	}
	*out = r;
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

static int open_pid(tl_stats_reader *r, int pid, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
	struct stat st;
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
	rc = load(r, &h, &st, err, errlen);
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
	    state == 'X' || still_alive(r) < 0) {
		say(err, errlen, "%s: the process has exited", r->name);
		return -ESRCH;
	}
	return 0;
}

int tl_stats_open_path(tl_stats_reader **out, const char *path)
{
	char err[320] = "";
	int rc;

	tl__detail_clear();
	rc = open_path(out, path, err, sizeof err);
	if (rc < 0)
		tl__detail_set("%s", err);
	return rc;
}

static int open_by_pid(tl_stats_reader **out, int pid, char *err, size_t errlen)
{
	tl_stats_reader *r;
	int rc;

	if (out)
		*out = NULL;
	if (!out || pid <= 0) {
		say(err, errlen, "bad pid %d", pid);
		return -EINVAL;
	}
	r = reader_new();
	if (!r) {
		say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = open_pid(r, pid, err, errlen);
	if (rc < 0) {
		tl_stats_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

int tl_stats_open(tl_stats_reader **out, int pid)
{
	char err[320] = "";
	int rc;

	tl__detail_clear();
	rc = open_by_pid(out, pid, err, sizeof err);
	if (rc < 0)
		tl__detail_set("%s", err);
	return rc;
}

int tl_stats_info_get(tl_stats_reader *r, tl_stats_info *out)
{
	struct tl__stats_hdr h;
	struct stat st;
	char err[320];
	int rc;

	tl__detail_clear();
	if (!r || !out)
		return -EINVAL;
	rc = still_alive(r);
	if (rc == -ESRCH)
		tl__detail_set("%s: the process has exited", r->name);
	if (rc < 0)
		return rc;
	for (int tries = 0;; tries++) {
		rc = load(r, &h, &st, err, sizeof err);
		if (rc < 0) {
			tl__detail_set("%s", err);
			return rc;
		}
		if (!(atomic_load_explicit(&h.meta_seq, memory_order_relaxed) & 1))
			break;
		if (tries == SEQ_TRIES)
			return -EAGAIN;
		if (tries > 10)
			usleep(10);
	}
	/* tl_runtime_destroy unlinks the region before it goes. */
	if (r->pid && st.st_nlink == 0) {
		tl__detail_set("%s: the process removed its stats region (its runtime stopped)",
			       r->name);
		return -ENOENT;
	}
	memset(out, 0, sizeof *out);
	out->version = h.version;
	out->shards = h.shards;
	out->flags = h.flags;
	out->state = atomic_load_explicit(&h.state, memory_order_relaxed);
	out->pid = h.pid;
	out->uid = h.uid;
	out->start_time = h.start_time;
	out->started_ns = h.started_ns;
	out->stall_ns = h.stall_ns;
	out->period_ns = h.period_ns;
	out->families = h.families;
	out->values = h.values;
	out->capacity = h.capacity;
	/* Strings from another process are forced to end inside their arrays. */
	memcpy(out->driver, h.driver, sizeof out->driver);
	out->driver[sizeof out->driver - 1] = '\0';
	return 0;
}

/* The meta fields as one block: meta_seq, families, values. */
struct meta {
	uint64_t seq;
	uint32_t families, values;
};
_Static_assert(offsetof(struct tl__stats_hdr, families) ==
		       offsetof(struct tl__stats_hdr, meta_seq) + 8 &&
		       offsetof(struct tl__stats_hdr, values) ==
		       offsetof(struct tl__stats_hdr, meta_seq) + 12,
	       "meta fields are contiguous");

/* Copy len bytes at off under meta_seq; m gets the counts that held. */
static int meta_copy(tl_stats_reader *r, void *buf, size_t len, off_t off, struct meta *m)
{
	const off_t moff = (off_t)offsetof(struct tl__stats_hdr, meta_seq);

	for (int tries = 0; tries < SEQ_TRIES; tries++) {
		uint64_t s2;
		int rc = read_at(r->fd, m, sizeof *m, moff);

		if (rc < 0)
			return rc;
		if (m->seq & 1) {
			if (tries > 10)
				usleep(10);
			continue;
		}
		rc = read_at(r->fd, buf, len, off);
		if (rc < 0)
			return rc;
		rc = read_at(r->fd, &s2, sizeof s2, moff);
		if (rc < 0)
			return rc;
		if (s2 == m->seq)
			return 0;
	}
	return -EAGAIN;
}

int tl_stats_family_get(tl_stats_reader *r, uint32_t idx, tl_stats_family *out)
{
	struct tl__stats_fam f;
	struct meta m;
	int rc;

	if (!r || !out || idx >= r->capacity)
		return -EINVAL;
	rc = meta_copy(r, &f, sizeof f, (off_t)r->families_off + (off_t)idx * (off_t)sizeof f, &m);
	if (rc < 0)
		return rc;
	if (idx >= m.families || m.families > r->capacity || m.values > r->capacity)
		return m.families > r->capacity || m.values > r->capacity ? -EPROTO : -EINVAL;
	/* Each family's rows lie inside the slots in use. */
	if ((f.kind != TL_STAT_COUNTER && f.kind != TL_STAT_GAUGE) || f.rows == 0 ||
	    f.first >= m.values || f.rows > m.values - f.first)
		return -EPROTO;
	memset(out, 0, sizeof *out);
	memcpy(out->name, f.name, sizeof out->name);
	out->name[sizeof out->name - 1] = '\0';
	out->kind = f.kind;
	out->rows = f.rows;
	out->first = f.first;
	return 0;
}

int tl_stats_label_get(tl_stats_reader *r, uint32_t value, char *buf, size_t len)
{
	char label[TL_STATS_LABEL_MAX];
	struct meta m;
	size_t n;
	int rc;

	if (!r || !buf || !len)
		return -EINVAL;
	buf[0] = '\0';
	if (value >= r->capacity)
		return -EINVAL;
	rc = meta_copy(r, label, sizeof label,
		       (off_t)r->labels_off + (off_t)value * (off_t)TL_STATS_LABEL_MAX, &m);
	if (rc < 0)
		return rc;
	if (value >= m.values)
		return -EINVAL;
	label[sizeof label - 1] = '\0';
	n = strlen(label);
	if (n >= len)
		return -ENOBUFS;
	memcpy(buf, label, n + 1);
	return (int)n;
}

int tl_stats_shard_get(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out,
		       uint64_t *values, uint32_t nvalues)
{
	struct tl__stats_rec rec;
	off_t off;

	if (!r || !out || shard >= r->shards || nvalues > r->capacity || (nvalues && !values))
		return -EINVAL;
	off = (off_t)r->header_size + (off_t)shard * r->stride;
	/* Each pread is a separate copy by the kernel, and the system calls
	 * order the reads: seq, then the data, then seq again. */
	for (int tries = 0; tries < SEQ_TRIES; tries++) {
		uint64_t s1, s2;
		int rc = read_at(r->fd, &s1, sizeof s1, off);

		if (rc < 0)
			return rc;
		if (s1 & 1) {
			if (tries > 10)
				usleep(10);
			continue;
		}
		rc = read_at(r->fd, &rec, sizeof rec, off);
		if (rc == 0 && nvalues)
			rc = read_at(r->fd, values, (size_t)nvalues * sizeof *values,
				     off + (off_t)sizeof rec);
		if (rc < 0)
			return rc;
		rc = read_at(r->fd, &s2, sizeof s2, off);
		if (rc < 0)
			return rc;
		if (s1 == s2) {
			*out = rec.data;
			return 0;
		}
	}
	return -EAGAIN;
}

/* Deprecated (turnloop.h): the old name of tl_stats_shard_get. */
int tl_stats_read(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out, uint64_t *values,
		  uint32_t nvalues)
{
	return tl_stats_shard_get(r, shard, out, values, nvalues);
}

void tl_stats_close(tl_stats_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	if (r->pidfd >= 0)
		close(r->pidfd);
	free(r);
}
