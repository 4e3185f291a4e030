/* shards/stats.c: the reader of a process's live stats region (tlshard stats, tests); it never writes the region. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "stats_region.h"

struct tl_stats_reader {
	int fd;
	uint32_t shards, stride, header_size;
	char name[64]; /* for messages: "turnloop.<pid>" or the path's last part */
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
	if (h->header_size < sizeof *h || h->header_size % 64 || h->header_size > (1u << 20) ||
	    h->stride < sizeof(struct tl__stats_rec) || h->stride % 64 || h->stride > (1u << 20) ||
	    h->record_size != sizeof(tl_stats_shard) || h->shards == 0 ||
	    h->shards > TL_PLAN_MAX_SHARDS || h->named > TL_STATS_NAMED) {
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
	return 0;
}

static int load(tl_stats_reader *r, struct tl__stats_hdr *h, char *err, size_t errlen)
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
	if ((size_t)st.st_size < sizeof *h) {
		/* A region still being created is this short for an instant;
		 * anything else this short is not ours. */
		say(err, errlen, "%s: too short for a stats region (%lld bytes)", r->name,
		    (long long)st.st_size);
		return -EPROTO;
	}
	rc = read_at(r->fd, h, sizeof *h, 0);
	if (rc < 0) {
		say(err, errlen, "%s: cannot read the header: %s", r->name, strerror(-rc));
		return rc;
	}
	return check_header(r, h, st.st_size, err, errlen);
}

int tl_stats_open_path(tl_stats_reader **out, const char *path, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
	tl_stats_reader *r;
	const char *base;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out || !path || !*path) {
		say(err, errlen, "no region given");
		return -EINVAL;
	}
	*out = NULL;
	r = calloc(1, sizeof *r);
	if (!r) {
		say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	base = strrchr(path, '/');
	snprintf(r->name, sizeof r->name, "%s", base ? base + 1 : path);
	/* O_NONBLOCK: anyone may create /dev/shm/turnloop.<pid>, and opening
	 * a FIFO left there would otherwise wait forever for a writer. It
	 * changes nothing for the regular file load() insists on. */
	r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (r->fd < 0) {
		rc = -errno;
		if (rc == -ENOENT)
			say(err, errlen, "%s: no such stats region (not a turnloop process, or "
					 "its stats are off)", r->name);
		else if (rc == -EACCES)
			say(err, errlen, "%s: permission denied (the region is readable only by "
					 "the user that runs the process)", r->name);
		else
			say(err, errlen, "%s: %s", r->name, strerror(-rc));
		free(r);
		return rc;
	}
	rc = load(r, &h, err, errlen);
	if (rc < 0) {
		tl_stats_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

int tl_stats_open(tl_stats_reader **out, int pid, char *err, size_t errlen)
{
	char path[64];

	if (pid <= 0) {
		say(err, errlen, "bad pid %d", pid);
		if (out)
			*out = NULL;
		return -EINVAL;
	}
	snprintf(path, sizeof path, "/dev/shm/turnloop.%d", pid);
	return tl_stats_open_path(out, path, err, errlen);
}

int tl_stats_info_get(tl_stats_reader *r, tl_stats_info *out)
{
	struct tl__stats_hdr h;
	int rc;

	if (!r || !out)
		return -EINVAL;
	rc = load(r, &h, NULL, 0);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof *out);
	out->version = h.version;
	out->shards = h.shards;
	out->flags = h.flags;
	out->state = atomic_load_explicit(&h.state, memory_order_relaxed);
	out->pid = h.pid;
	out->named = h.named;
	out->stall_ns = h.stall_ns;
	out->period_ns = h.period_ns;
	/* Strings from another process are forced to end inside their arrays. */
	memcpy(out->driver, h.driver, sizeof out->driver);
	out->driver[sizeof out->driver - 1] = '\0';
	for (uint32_t i = 0; i < TL_STATS_NAMED; i++) {
		memcpy(out->names[i], h.names[i], TL_STATS_NAME_MAX);
		out->names[i][TL_STATS_NAME_MAX - 1] = '\0';
	}
	return 0;
}

int tl_stats_read(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out)
{
	struct tl__stats_rec rec;
	off_t off;

	if (!r || !out || shard >= r->shards)
		return -EINVAL;
	off = (off_t)r->header_size + (off_t)shard * r->stride;
	/* Each pread is a separate copy by the kernel, and the system calls
	 * order the three reads: seq, then the data, then seq again. */
	for (int tries = 0; tries < 1000; tries++) {
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

void tl_stats_close(tl_stats_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}
