/* shards/stats_writer.c: the writer of the live stats region (contract 9.7): the per-user directory it checks, stale regions it sweeps, the region it makes, publishes into under a sequence lock per shard and removes; the program's own counters and gauges. Its reader is shards/stats.c; their shared layout is stats_region.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "detail.h"
#include "runtime_int.h"
#include "turnloop/pool.h"

static atomic_int region_owned; /* this process publishes a region */

void tl__rt_set_state(tl_runtime *rt, uint32_t state)
{
	if (rt->hdr)
		atomic_store_explicit(&rt->hdr->state, state, memory_order_release);
}

static void *region_at(tl_runtime *rt, size_t off)
{
	return (char *)rt->region + off;
}

static void stats_off(tl_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The region cannot be published: say why, once, and keep the reason. */
static void stats_off(tl_runtime *rt, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rt->stats_why, sizeof rt->stats_why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "turnloop: live stats off: %s\n", rt->stats_why);
}

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
		stats_off(rt, "cannot create %s: %s", rt->stats_dir, strerror(-rc));
		return rc;
	}
	dfd = open(rt->stats_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		rc = -errno;
		if ((rc == -ELOOP || rc == -ENOTDIR) && lstat(rt->stats_dir, &st) == 0) {
			stats_off(rt, "%s is not a directory but a %s of uid %u; it was not "
				      "made by turnloop (remove it as root or as its owner)",
				  rt->stats_dir, S_ISLNK(st.st_mode) ? "symbolic link" : "file",
				  (unsigned)st.st_uid);
			return -EPERM;
		}
		stats_off(rt, "cannot open %s: %s", rt->stats_dir, strerror(-rc));
		return rc;
	}
	if (fstat(dfd, &st) < 0) {
		rc = -errno;
		stats_off(rt, "cannot check %s: %s", rt->stats_dir, strerror(-rc));
		close(dfd);
		return rc;
	}
	if (st.st_uid != uid) {
		stats_off(rt, "%s belongs to uid %u, not to this process's user (uid %u): its "
			      "regions could be read or forged by that user (remove it as root "
			      "or as its owner)",
			  rt->stats_dir, (unsigned)st.st_uid, (unsigned)uid);
		close(dfd);
		return -EPERM;
	}
	/* Ours: a mode the umask or a user's chmod left is set back. */
	if ((st.st_mode & 07777) != 0700 && fchmod(dfd, 0700) < 0) {
		rc = -errno;
		stats_off(rt, "cannot set %s to mode 0700: %s", rt->stats_dir, strerror(-rc));
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

/* Plain memory in place of the region (stats off, or not publishable), so
 * that the code path stays the same. */
static int region_private(tl_runtime *rt, size_t size)
{
	void *mem = aligned_alloc(64, size);

	if (!mem)
		return -ENOMEM;
	memset(mem, 0, size);
	rt->region = mem;
	rt->region_size = size;
	return 0;
}

static int region_create(tl_runtime *rt)
{
	size_t size = tl__stats_header_size(rt->cfg.stats_values) +
		      (size_t)rt->n * tl__stats_stride(rt->cfg.stats_values);
	int fd = -1, dfd, rc;
	void *mem;

	if (!rt->cfg.stats)
		return region_private(rt, size);
	if (atomic_exchange(&region_owned, 1))
		return -EBUSY;
	dfd = stats_dir(rt);
	if (dfd < 0) {
		rc = dfd;
		goto private;
	}
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
		stats_off(rt, "cannot create %s/%s: %s", rt->stats_dir, rt->region_name,
			  strerror(-rc));
		goto private_dir;
	}
	/* Held until the process ends (sweep_stale): before the magic is
	 * written, so a region with a magic and no lock has no writer. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		stats_off(rt, "cannot lock %s/%s: %s", rt->stats_dir, rt->region_name,
			  strerror(-rc));
		goto unlink;
	}
	/* openat applies the umask; the mode must be exactly 0600. */
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		stats_off(rt, "cannot size %s/%s: %s", rt->stats_dir, rt->region_name,
			  strerror(-rc));
		goto unlink;
	}
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		rc = -errno;
		stats_off(rt, "cannot map %s/%s: %s", rt->stats_dir, rt->region_name,
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
private:
	rt->stats_rc = rc;
	rt->region_name[0] = '\0';
	atomic_store(&region_owned, 0);
	return region_private(rt, size);
}

static void region_init(tl_runtime *rt)
{
	struct tl__stats_hdr *h = rt->region;
	uint32_t cap = rt->cfg.stats_values;
	uint64_t start = 0;

	tl__proc_stat(0, &start, NULL);
	h->version = TL_STATS_VERSION;
	h->header_size = (uint32_t)tl__stats_header_size(cap);
	h->shards = rt->n;
	h->stride = (uint32_t)tl__stats_stride(cap);
	h->record_size = sizeof(tl_stats_shard);
	h->flags = TL_STATS_F_POOL | TL_STATS_F_CPU | (rt->region_shm ? TL_STATS_F_LOCKED : 0);
	atomic_init(&h->state, TL_STATS_STARTING);
	h->pid = (int32_t)getpid();
	h->uid = (uint32_t)geteuid();
	h->capacity = cap;
	h->start_time = start;
	h->started_ns = tl__os_mono_ns();
	h->stall_ns = rt->cfg.stall_ns;
	h->period_ns = rt->cfg.stats_period_ns;
	h->families_off = (uint32_t)tl__stats_families_off();
	h->labels_off = (uint32_t)tl__stats_labels_off(cap);
	atomic_init(&h->meta_seq, 0);
	rt->fams = region_at(rt, h->families_off);
	rt->labels = region_at(rt, h->labels_off);
	for (uint32_t i = 0; i < rt->n; i++) {
		struct tl__stats_rec *r = region_at(rt, h->header_size + (size_t)i * h->stride);
		const tl_shard_place *p = &rt->plan.shards[i];

		atomic_init(&r->seq, 0);
		r->data.shard = i;
		r->data.cpu = p->pu_os_index;
		r->data.numa = p->numa_node;
		r->data.arena = UINT32_MAX;
		r->data.node_id = -1;
		rt->shards[i].rec = r;
		rt->shards[i].rec_values = (uint64_t *)(r + 1);
	}
	/* The magic goes last: a reader that sees it sees a whole header. */
	__atomic_store_n(&h->magic, TL_STATS_MAGIC, __ATOMIC_RELEASE);
	rt->hdr = h;
}


int tl__rt_region_create(tl_runtime *rt)
{
	int rc = region_create(rt);

	if (rc < 0)
		return rc;
	region_init(rt);
	return 0;
}

void tl__rt_region_destroy(tl_runtime *rt)
{
	if (!rt->region)
		return;
	if (rt->region_shm) {
		tl__rt_set_state(rt, TL_STATS_STOPPED);
		munmap(rt->region, rt->region_size);
		unlinkat(rt->stats_dfd, rt->region_name, 0);
		close(rt->region_fd); /* the lock goes after the name */
		rt->region_fd = -1;
		close(rt->stats_dfd);
		rt->stats_dfd = -1;
		atomic_store(&region_owned, 0);
	} else {
		free(rt->region);
	}
	rt->region = NULL;
	rt->hdr = NULL;
}

/* Begin and end a change of the family table or the labels (meta_seq odd
 * while it lasts); under rt->meta_mu, since labels come from any thread. */
static void meta_begin(tl_runtime *rt)
{
	uint64_t seq = atomic_load_explicit(&rt->hdr->meta_seq, memory_order_relaxed);

	atomic_exchange_explicit(&rt->hdr->meta_seq, seq + 1, memory_order_acq_rel);
}

static void meta_end(tl_runtime *rt)
{
	uint64_t seq = atomic_load_explicit(&rt->hdr->meta_seq, memory_order_relaxed);

	atomic_store_explicit(&rt->hdr->meta_seq, seq + 1, memory_order_release);
}

static uint32_t hist_bucket(uint64_t ns)
{
	uint32_t b = ns ? 64u - (uint32_t)__builtin_clzll(ns) : 0;

	return b < TL_STATS_HIST ? b : TL_STATS_HIST - 1;
}

void tl__rt_account_pass(tl_shard *s, uint64_t busy)
{
	s->st.busy_ns += busy;
	s->st.pass_hist[hist_bucket(busy)]++;
	if (busy > s->st.max_pass_ns)
		s->st.max_pass_ns = busy;
}

/* The pool's view of this shard and of its node's worker set (lock-free
 * snapshots, cheap at the publication rate). */
static void pool_publish(tl_shard *s, tl_stats_shard *st)
{
	tl_pool_loop_stats pl;
	tl_pool_stats nodes[64];
	int n, node;

	tl_pool_loop_stats_get(s->loop, &pl);
	st->pool_submitted = pl.submitted;
	st->pool_refused = pl.refused;
	st->pool_completed = pl.completed;
	st->pool_cancelled = pl.cancelled;
	st->pool_in_flight = pl.in_flight;
	st->pool_wait_ns = pl.queue_wait_ns;
	st->pool_run_ns = pl.run_ns;
	/* The node this shard's jobs go to, its own before its first job. */
	node = pl.node >= 0 ? pl.node : st->numa;
	n = tl_pool_stats_get(NULL, nodes, 64);
	for (int i = 0; i < n && i < 64; i++) {
		if (nodes[i].node != node)
			continue;
		st->node_id = node;
		st->node_threads = nodes[i].threads;
		st->node_busy = nodes[i].busy;
		st->node_queued = nodes[i].queued;
		st->node_reserved = nodes[i].reserved;
		st->node_long_threads = nodes[i].long_threads;
		st->node_long_busy = nodes[i].long_busy;
	}
}

/* Copy the shard's counters into its record under the sequence lock. Uses
 * the loop's public stats only (a constant-time copy). */
void tl__rt_publish(tl_shard *s, uint64_t now)
{
	tl_stats_shard *st = &s->st;
	struct tl__stats_rec *rec = s->rec;
	uint64_t inbound = 0, backlog = 0;
	tl_loop_stats ls;

	tl_loop_stats_get(s->loop, &ls);
	st->updated_ns = now;
	/* The thread's CPU clock is a system call: read it at most once per
	 * period, so a shard that parks often pays for it once per period and
	 * a parked one's figure is at most one period behind. */
	if (now - s->cpu_read >= s->rt->cfg.stats_period_ns || !s->cpu_read) {
		st->cpu_ns = tl__os_thread_cpu_ns();
		s->cpu_read = now;
	}
	st->turns = ls.turns;
	st->os_waits = ls.os_waits;
	st->discovery_polls = ls.discovery_polls;
	st->zero_event_waits = ls.zero_event_waits;
	for (uint32_t k = 0; k < TL_K_COUNT_; k++)
		st->completions[k] = ls.completions[k] + s->mesh_comp[k];
	st->idle_ns = ls.idle_ns;
	st->handles = ls.handles;
	st->ops = ls.ops;
	st->queued = ls.queued;
	st->timers = ls.timers;
	st->leases_out = ls.leases_out;
	st->nic_rx = ls.nic_rx;
	st->nic_tx = ls.nic_tx;
	st->nic_drops = ls.nic_drops;
	st->nic_tx_full = ls.nic_tx_full;
	tl__mesh_depths(s, &inbound, &backlog);
	st->mesh_inbound = inbound;
	st->mesh_backlog = backlog;
	if (s->je_alloc) {
		st->alloc_bytes = *s->je_alloc;
		st->freed_bytes = *s->je_freed;
	}
	pool_publish(s, st);
	/* Odd while copying. The exchange's acquire half keeps the copy's
	 * stores from moving above it (what a release fence after a plain
	 * store would do; sanitizers understand this form). */
	uint64_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed);

	atomic_exchange_explicit(&rec->seq, seq + 1, memory_order_acq_rel);
	memcpy(&rec->data, st, sizeof *st);
	if (s->nvals)
		memcpy(s->rec_values, s->vals, (size_t)s->nvals * sizeof *s->vals);
	atomic_store_explicit(&rec->seq, seq + 2, memory_order_release);
	s->last_pub = now;
}


/* ---- the program's own stats ---- */

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

static int valid_name(const char *name)
{
	size_t n = 0;

	if (!name || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
		return 0;
	for (; name[n]; n++)
		if (n + 1 >= TL_STATS_NAME_MAX || !name_char(name[n]))
			return 0;
	return 1;
}

/* Equal once '.' and '-' read as '_' (they map to one Prometheus name). */
static int same_metric(const char *a, const char *b)
{
	for (;; a++, b++) {
		char x = *a == '.' || *a == '-' ? '_' : *a, y = *b == '.' || *b == '-' ? '_' : *b;

		if (x != y)
			return 0;
		if (!x)
			return 1;
	}
}

int tl_runtime_stat(tl_runtime *rt, const char *name, int kind, uint32_t rows)
{
	struct tl__stats_fam *f;

	if (!rt || rt->started || !valid_name(name) ||
	    (kind != TL_STAT_COUNTER && kind != TL_STAT_GAUGE) || rows == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < rt->nfams; i++) {
		f = &rt->fams[i];
		if (!strcmp(f->name, name))
			return f->kind == (uint32_t)kind && f->rows == rows ? (int)f->first : -EINVAL;
		if (same_metric(f->name, name))
			return -EINVAL;
	}
	if (rows > rt->cfg.stats_values - rt->nvals)
		return -ENOBUFS;
	tl__os_mutex_lock(&rt->meta_mu);
	meta_begin(rt);
	f = &rt->fams[rt->nfams];
	memset(f, 0, sizeof *f);
	snprintf(f->name, sizeof f->name, "%s", name);
	f->kind = (uint32_t)kind;
	f->rows = rows;
	f->first = rt->nvals;
	memset(rt->vkind + rt->nvals, kind, rows);
	rt->nfams++;
	rt->nvals += rows;
	rt->hdr->families = rt->nfams;
	rt->hdr->values = rt->nvals;
	meta_end(rt);
	tl__os_mutex_unlock(&rt->meta_mu);
	return (int)f->first;
}

int tl_runtime_counter(tl_runtime *rt, const char *name)
{
	return tl_runtime_stat(rt, name, TL_STAT_COUNTER, 1);
}

int tl_runtime_gauge(tl_runtime *rt, const char *name)
{
	return tl_runtime_stat(rt, name, TL_STAT_GAUGE, 1);
}

static int label_char(char c)
{
	return name_char(c) || c == ':' || c == '/' || c == '@' || c == '+' || c == '=' ||
	       c == '[' || c == ']';
}

int tl_runtime_stat_label(tl_runtime *rt, int id, const char *label)
{
	size_t n = 0;

	if (!rt || !label || id < 0)
		return -EINVAL;
	for (; label[n]; n++)
		if (n + 1 >= TL_STATS_LABEL_MAX || !label_char(label[n]))
			return -EINVAL;
	tl__os_mutex_lock(&rt->meta_mu);
	if ((uint32_t)id >= rt->nvals) {
		tl__os_mutex_unlock(&rt->meta_mu);
		return -EINVAL;
	}
	meta_begin(rt);
	memset(rt->labels[id], 0, TL_STATS_LABEL_MAX);
	memcpy(rt->labels[id], label, n);
	meta_end(rt);
	tl__os_mutex_unlock(&rt->meta_mu);
	return 0;
}

int tl_shard_counter_add(tl_shard *s, int id, uint64_t delta)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_COUNTER))
		return -EINVAL;
	s->vals[id] += delta;
	return 0;
}

int tl_shard_gauge_set(tl_shard *s, int id, int64_t value)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_GAUGE))
		return -EINVAL;
	s->vals[id] = (uint64_t)value;
	return 0;
}

int tl_shard_gauge_add(tl_shard *s, int id, int64_t delta)
{
	if (tl_unlikely((uint32_t)id >= s->nvals || s->rt->vkind[id] != TL_STAT_GAUGE))
		return -EINVAL;
	/* Unsigned arithmetic wraps where int64_t would overflow; the word is
	 * read back as int64_t. */
	s->vals[id] += (uint64_t)delta;
	return 0;
}

int tl_runtime_stats_published(const tl_runtime *rt)
{
	tl__detail_clear();
	if (!rt)
		return -EINVAL;
	if (rt->stats_rc < 0) {
		tl__detail_set("%s", rt->stats_why);
		return rt->stats_rc;
	}
	return rt->region_shm;
}

/* Deprecated (turnloop.h): tl_runtime_stats_published and its detail. */
const char *tl_runtime_stats_error(const tl_runtime *rt)
{
	return rt ? rt->stats_why : "";
}
