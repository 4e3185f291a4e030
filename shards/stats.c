/* shards/stats.c: the reader of a process's live stats region (tlshard stats, tests): the region's format, the same on every platform (its header checked before a byte of it is trusted, snapshots under the shards' sequence locks, the program's families and labels); finding, checking and reading a process's region is the platform's (stats_open.c, stats_open_win.c: stats_reader.h). It never writes the region. Its writer is stats_writer.c; their shared layout is stats_region.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "detail.h"
#include "stats_reader.h"

/* Retries of a sequence-locked copy before -EAGAIN: a shard holds its lock
 * for one memcpy, so only a descheduled writer makes this many. */
#define SEQ_TRIES 1000

void tl__stats_say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

#define say tl__stats_say

/* ---- the header ---- */

/* Check a header copy against the region's size; on success fill the
 * reader's shape. Every number is compared before it is used in
 * arithmetic, so a hostile header cannot make the reader overflow or read
 * out of bounds. */
static int check_header(tl_stats_reader *r, const struct tl__stats_hdr *h, uint64_t size,
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
	if (size < need) {
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

int tl__stats_load(tl_stats_reader *r, struct tl__stats_hdr *h, int *gone, char *err,
		   size_t errlen)
{
	uint64_t size;
	int rc = tl__stats_os_size(r, &size, gone, err, errlen);

	if (rc < 0)
		return rc;
	if (size < sizeof *h) {
		say(err, errlen, "%s: too short for a stats region (%lld bytes)", r->name,
		    (long long)size);
		return -EPROTO;
	}
	rc = tl__stats_os_read(r, h, sizeof *h, 0);
	if (rc < 0) {
		say(err, errlen, "%s: cannot read the header: %s", r->name, strerror(-rc));
		return rc;
	}
	return check_header(r, h, size, err, errlen);
}

static tl_stats_reader *reader_new(void)
{
	tl_stats_reader *r = calloc(1, sizeof *r);

	if (r)
		tl__stats_os_init(r);
	return r;
}

/* ---- opening ---- */

/* The reader's checks say what failed into err; the public calls pass it
 * on as the thread's detail (tl_error_detail). */
static int open_path(tl_stats_reader **out, const char *path, char *err, size_t errlen)
{
	struct tl__stats_hdr h;
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
	rc = tl__stats_os_open_path(r, path, err, errlen);
	if (rc < 0) {
		tl_stats_close(r);
		return rc;
	}
	rc = tl__stats_load(r, &h, NULL, err, errlen);
	if (rc < 0) {
		tl_stats_close(r);
		return rc;
	}
	*out = r;
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
	rc = tl__stats_os_open_pid(r, pid, err, errlen);
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

/* ---- reading ---- */

int tl_stats_info_get(tl_stats_reader *r, tl_stats_info *out)
{
	struct tl__stats_hdr h;
	char err[320];
	int rc, gone = 0;

	tl__detail_clear();
	if (!r || !out)
		return -EINVAL;
	rc = tl__stats_os_alive(r);
	if (rc == -ESRCH)
		tl__detail_set("%s: the process has exited", r->name);
	if (rc < 0)
		return rc;
	for (int tries = 0;; tries++) {
		rc = tl__stats_load(r, &h, &gone, err, sizeof err);
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
	/* tl_runtime_destroy takes the region away before it goes. */
	if (r->pid && gone) {
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
static int meta_copy(tl_stats_reader *r, void *buf, size_t len, uint64_t off, struct meta *m)
{
	const uint64_t moff = offsetof(struct tl__stats_hdr, meta_seq);

	for (int tries = 0; tries < SEQ_TRIES; tries++) {
		uint64_t s2;
		int rc = tl__stats_os_read(r, m, sizeof *m, moff);

		if (rc < 0)
			return rc;
		if (m->seq & 1) {
			if (tries > 10)
				usleep(10);
			continue;
		}
		rc = tl__stats_os_read(r, buf, len, off);
		if (rc < 0)
			return rc;
		rc = tl__stats_os_read(r, &s2, sizeof s2, moff);
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
	rc = meta_copy(r, &f, sizeof f, (uint64_t)r->families_off + (uint64_t)idx * sizeof f, &m);
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
		       (uint64_t)r->labels_off + (uint64_t)value * TL_STATS_LABEL_MAX, &m);
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
	uint64_t off;

	if (!r || !out || shard >= r->shards || nvalues > r->capacity || (nvalues && !values))
		return -EINVAL;
	off = (uint64_t)r->header_size + (uint64_t)shard * r->stride;
	/* Each copy is ordered after the one before it (tl__stats_os_read):
	 * seq, then the data, then seq again. */
	for (int tries = 0; tries < SEQ_TRIES; tries++) {
		uint64_t s1, s2;
		int rc = tl__stats_os_read(r, &s1, sizeof s1, off);

		if (rc < 0)
			return rc;
		if (s1 & 1) {
			if (tries > 10)
				usleep(10);
			continue;
		}
		rc = tl__stats_os_read(r, &rec, sizeof rec, off);
		if (rc == 0 && nvalues)
			rc = tl__stats_os_read(r, values, (size_t)nvalues * sizeof *values,
					       off + sizeof rec);
		if (rc < 0)
			return rc;
		rc = tl__stats_os_read(r, &s2, sizeof s2, off);
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
	tl__stats_os_close(r);
	free(r);
}
