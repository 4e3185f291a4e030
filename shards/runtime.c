/* shards/runtime.c: the sharded runtime: pinned shard threads with their own arenas, the mesh, lifecycle, live stats, stall detector (contract 9.2-9.7). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "tl_config.h"
#include "spsc.h"
#include "stats_region.h"
#include "turnloop/error.h"
#include "turnloop/pool.h"
#include "turnloop/shard.h"
#include "turnloop/signal.h"

#define tl_likely(x) __builtin_expect(!!(x), 1)
#define tl_unlikely(x) __builtin_expect(!!(x), 0)

/* Sanitizers replace malloc; jemalloc's arenas would then hold nothing. */
#if TL_HAVE_JEMALLOC && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define TL_ARENAS 1
#include <jemalloc/jemalloc.h>
#else
#define TL_ARENAS 0
#endif

#define TL_RT_MAX_SHARDS 1024u
/* Publish staged messages every this many, so a busy consumer can start
 * before the producer's pass ends; the wake still waits for the pass end. */
#define PUBLISH_EVERY 32u

/* What a ring slot carries: the low 32 bits of tl_mesh_msg.b. A migration
 * (tl_shard_migrate) carries the payload in a and, in the high 32 bits of
 * b, the descriptor (MSG_MIGRATE) or the target's result (MSG_MIGRATED). */
enum { MSG_POST = 0, MSG_CALL = 1, MSG_RESULT = 2, MSG_MIGRATE = 3, MSG_MIGRATED = 4 };
#define MSG_TYPE(b) ((uint32_t)(b))
#define MSG_WORD(b) ((int32_t)((b) >> 32))
#define MSG_MAKE(type, word) ((uint64_t)(type) | (uint64_t)(uint32_t)(word) << 32)

/* Shard phases (see shard_run). */
/* A shard's life: running, letting connections finish (tl_runtime_drain),
 * closing what is left (bounded by drain_ns), waiting for the others. */
enum { PH_RUN = 0, PH_GRACE, PH_DRAIN, PH_WAIT };

/* The ring from one shard to another, shared by its producer and consumer:
 * rt->pairs[src * n + dst]. */
struct pair {
	struct tl__spsc ring;
	/* The producer wants a wake when the consumer frees room. */
	alignas(TL__CACHE_LINE) _Atomic int want_room;
};

/* The producer's private state for one target: on the producer's node, in
 * the producer's cache. */
struct out {
	size_t head;      /* next slot to fill: published head + staged */
	size_t published; /* the head value last stored in the ring */
	uint32_t inflight;/* submit_to calls waiting for their result */
	uint32_t room_wait;
	uint64_t room_token;
	int dirty;        /* listed in shard.dirty */
	/* Results that found the ring full wait here, in order; the credit
	 * rule (inflight <= mesh_inflight) bounds them. */
	struct tl_mesh_msg *backlog;
	uint32_t bl_head, bl_len;
};

struct tl_shard {
	/* Read-mostly, set up before the shard runs. */
	tl_runtime *rt;
	uint32_t id, n;
	pthread_t thread;
	tl_loop *loop;
	tl_poster *poster;
	void *data;        /* tl_shard_set_data */
	struct pair *in;   /* column of rt->pairs: in[src * n] is src's ring to us */
	struct pair *outp; /* row: outp[t] is our ring to t */
	struct tl__stats_rec *rec;
	uint64_t *rec_values; /* the record's program values */
	volatile uint64_t *je_alloc, *je_freed;

	/* The shard thread's own. */
	alignas(TL__CACHE_LINE) struct out *out;
	uint32_t *dirty;
	uint32_t ndirty, nroom_wait, nbacklog;
	uint64_t inflight_total;
	tl_completion *batch;
	uint32_t bat_i, bat_n; /* the batch entry being handled, and how many (0: none) */
	int phase, mesh_closed, pass_busy;
	uint32_t last_nhandles;
	uint64_t drain_deadline, last_pub, pass_end;
	uint64_t mesh_comp[TL_STATS_KINDS];
	uint64_t cpu_read;  /* when cpu_ns was last read */
	uint64_t *vals;     /* the program's values (tl_shard_counter_add, ...) */
	uint32_t nvals;
	tl_stats_shard st;
	int setup_rc;
};

struct tl_runtime {
	tl_runtime_config cfg;
	tl_plan plan;
	uint32_t n;
	struct pair *pairs;
	tl_shard *shards;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t nready, ncreated;
	int go, started, joined, barrier_ok;
	pthread_barrier_t barrier;
	_Atomic int stop;
	_Atomic int drain;          /* tl_runtime_drain asked */
	_Atomic int signals_seen;   /* SIGINT/SIGTERM so far: the first drains */
	_Atomic uint32_t ndone;
	int result;
	char why[256];

	/* Live stats: the region (shared memory, or plain memory when stats
	 * are off or cannot be published, so that the code path is the
	 * same), its directory and name in it. */
	void *region;
	size_t region_size;
	int region_shm;
	int stats_dfd;
	int region_fd; /* the region's descriptor, holding its flock */
	char stats_dir[TL__STATS_DIR_MAX];
	char region_name[16];
	char stats_why[320];
	struct tl__stats_hdr *hdr;
	struct tl__stats_fam *fams; /* the region's family table */
	char (*labels)[TL_STATS_LABEL_MAX];
	uint8_t *vkind;             /* TL_STAT_* of each value slot in use */
	uint32_t nfams, nvals;
	pthread_mutex_t meta_mu;    /* label changes from any thread */

	int sig_installed;
	_Atomic int arenas;
	const char *arenas_why;
};

static _Atomic(tl_runtime *) sig_target;
static atomic_int region_owned; /* this process publishes a region */

/* ---- small helpers ---- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(tl_runtime *rt, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record the first failure: its code and a one-line reason. */
static void fail(tl_runtime *rt, int rc, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&rt->mu);
	if (!rt->result) {
		rt->result = rc < 0 ? rc : -EINVAL;
		va_start(ap, fmt);
		vsnprintf(rt->why, sizeof rt->why, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&rt->mu);
}

static void set_state(tl_runtime *rt, uint32_t state)
{
	if (rt->hdr)
		atomic_store_explicit(&rt->hdr->state, state, memory_order_release);
}

void tl_runtime_config_init(tl_runtime_config *c)
{
	memset(c, 0, sizeof *c);
	c->bind = 1;
	tl_config_init(&c->loop);
	c->mesh_capacity = 1024;
	c->mesh_budget = 256;
	c->mesh_inflight = 64;
	c->batch = 256;
	c->stall_ns = 25 * 1000000ull;
	c->drain_ns = 5 * 1000000000ull;
	c->grace_ns = 30 * 1000000000ull;
	c->stats_period_ns = 1000000ull;
	c->stats = 1;
	c->stats_values = 64;
	c->signals = 1;
}

static int valid_config(const tl_runtime_config *c)
{
	return c->mesh_capacity && c->mesh_capacity <= TL__SPSC_MAX_CAP && c->mesh_budget &&
	       c->mesh_budget <= 65536 && c->mesh_inflight && c->mesh_inflight <= 65536 &&
	       c->batch && c->batch <= 65536 && c->drain_ns && c->grace_ns && c->stats_period_ns &&
	       c->stats_period_ns <= 1000000000ull && c->stats_values &&
	       c->stats_values <= TL_STATS_VALUES_MAX && !c->handlers[0];
}

/* ---- jemalloc arenas ---- */

#if TL_ARENAS
/* One arena per CPU for the life of the process: jemalloc cannot give an
 * arena's memory back while user allocations from it live on, so runtimes
 * created one after another reuse the arena of the CPU rather than leaking
 * one per shard per runtime. */
static pthread_mutex_t arena_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned *arena_of_cpu; /* arena + 1, 0 = none yet */
static size_t arena_cap;

static int arena_for_cpu(int cpu, unsigned *out)
{
	int rc = 0;

	if (cpu < 0)
		cpu = 0;
	pthread_mutex_lock(&arena_mu);
	if ((size_t)cpu >= arena_cap) {
		size_t cap = (size_t)cpu + 64;
		unsigned *v = realloc(arena_of_cpu, cap * sizeof *v);

		if (!v) {
			rc = -ENOMEM;
			goto out;
		}
		memset(v + arena_cap, 0, (cap - arena_cap) * sizeof *v);
		arena_of_cpu = v;
		arena_cap = cap;
	}
	if (!arena_of_cpu[cpu]) {
		unsigned a;
		size_t sz = sizeof a;

		rc = mallctl("arenas.create", &a, &sz, NULL, 0);
		if (rc) {
			rc = -rc;
			goto out;
		}
		arena_of_cpu[cpu] = a + 1;
	}
	*out = arena_of_cpu[cpu] - 1;
out:
	pthread_mutex_unlock(&arena_mu);
	return rc;
}
#endif

/* Bind the calling shard thread to its own arena. Not being able to is not
 * a reason to refuse to run: the stats say that arenas are off, and why. */
static void arena_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->st.arena = UINT32_MAX;
#if TL_ARENAS
	uint64_t *ap, *dp;
	size_t sz = sizeof ap;
	unsigned a;

	if (mallctl("thread.allocatedp", &ap, &sz, NULL, 0) ||
	    mallctl("thread.deallocatedp", &dp, &sz, NULL, 0)) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc was built without statistics";
		return;
	}
	/* If another malloc won the symbol lookup, jemalloc's counters do
	 * not move: then its arenas would hold nothing of ours. */
	volatile uint64_t *vap = ap;
	uint64_t before = *vap;
	void *volatile probe = malloc(256);
	uint64_t after = *vap;

	free(probe);
	if (after == before) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc is linked but is not the process allocator";
		return;
	}
	s->je_alloc = ap;
	s->je_freed = dp;
	if (arena_for_cpu(s->rt->plan.shards[s->id].pu_os_index, &a) < 0 ||
	    mallctl("thread.arena", NULL, NULL, &a, sizeof a)) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc refused to create or bind an arena";
		return;
	}
	s->st.arena = a;
#else
	atomic_store(&rt->arenas, 0);
#endif
}

/* ---- the stats region ---- */

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
		if ((rc == -ELOOP || rc == -ENOTDIR) && lstat(rt->stats_dir, &st) == 0)
			stats_off(rt, "%s is not a directory but a %s of uid %u; it was not "
				      "made by turnloop (remove it as root or as its owner)",
				  rt->stats_dir, S_ISLNK(st.st_mode) ? "symbolic link" : "file",
				  (unsigned)st.st_uid);
		else
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
	if (dfd < 0)
		goto private;
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
	h->started_ns = mono_ns();
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

static void region_destroy(tl_runtime *rt)
{
	if (!rt->region)
		return;
	if (rt->region_shm) {
		set_state(rt, TL_STATS_STOPPED);
		munmap(rt->region, rt->region_size);
		unlinkat(rt->stats_dfd, rt->region_name, 0);
		close(rt->region_fd); /* the lock goes after the name */
		rt->region_fd = -1;
		close(rt->stats_dfd);
		rt->stats_dfd = -1;
	rt->region_fd = -1;
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

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Copy the shard's counters into its record under the sequence lock. Uses
 * the loop's public stats only (a constant-time copy). */
static void publish(tl_shard *s, uint64_t now)
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
		st->cpu_ns = thread_cpu_ns();
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
	for (uint32_t i = 0; i < s->n; i++) {
		inbound += tl__spsc_size_approx(&s->in[(size_t)i * s->n].ring);
		backlog += s->out[i].bl_len;
	}
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

/* ---- the mesh: producer side ---- */

/* Free slots toward t as this producer knows them; rereads the consumer's
 * index only when the cached one says full. */
static inline size_t ring_room(tl_shard *s, struct out *o, struct tl__spsc *r)
{
	size_t cap = r->mask + 1;
	size_t room = cap - (o->head - r->tail_cache);

	if (!room) {
		r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
		room = cap - (o->head - r->tail_cache);
	}
	(void)s;
	return room;
}

static inline void ring_publish(struct out *o, struct tl__spsc *r)
{
	atomic_store_explicit(&r->head, o->head, memory_order_release);
	o->published = o->head;
}

/* Write one message into the next free slot (room already checked). */
static inline void stage(tl_shard *s, uint32_t t, const struct tl_mesh_msg *m)
{
	struct out *o = &s->out[t];
	struct tl__spsc *r = &s->outp[t].ring;

	r->slots[o->head & r->mask] = *m;
	o->head++;
	s->st.mesh_out++;
	if (!o->dirty) {
		o->dirty = 1;
		s->dirty[s->ndirty++] = t;
	}
	if (o->head - o->published >= PUBLISH_EVERY)
		ring_publish(o, r);
}

/* Can a new message (not a result) go to t now? 0, or the refusal code. */
static inline int can_send(tl_shard *s, uint32_t t)
{
	struct out *o;

	if (tl_unlikely(t >= s->n))
		return -EINVAL;
	if (tl_unlikely(s->mesh_closed))
		return -EPIPE;
	o = &s->out[t];
	if (tl_unlikely(o->bl_len || !ring_room(s, o, &s->outp[t].ring))) {
		s->st.mesh_refused++;
		return -ENOBUFS;
	}
	return 0;
}

int tl_shard_post(tl_shard *s, uint32_t target, uint64_t token, uint64_t payload)
{
	int rc = can_send(s, target);

	if (tl_unlikely(rc))
		return rc;
	stage(s, target, &(struct tl_mesh_msg){.token = token, .a = payload, .b = MSG_POST});
	return 0;
}

/* Can a call (it holds a credit until its result) go to t now? */
static int can_call(tl_shard *s, uint32_t t)
{
	if (t < s->n && s->out[t].inflight >= s->rt->cfg.mesh_inflight && !s->mesh_closed) {
		s->st.mesh_refused++;
		return -ENOBUFS;
	}
	return can_send(s, t);
}

int tl_shard_migrate(tl_shard *s, tl_handle h, uint32_t target, uint64_t payload,
		     uint64_t token)
{
	int fd, rc = can_call(s, target);

	if (rc)
		return rc;
	/* Completions of h that the loop handed out this pass but the program
	 * has not seen yet (later in the batch) hold it as the loop's queued
	 * ones hold tl_detach: their bytes are the program's to handle first. */
	for (uint32_t k = s->bat_i + 1; k < s->bat_n; k++)
		if (s->batch[k].handle.v == h.v)
			return -EAGAIN;
	/* The ring has room and a credit is free: once detached, the
	 * descriptor is sure to go. */
	rc = tl_detach(s->loop, h, &fd);
	if (rc)
		return rc;
	stage(s, target,
	      &(struct tl_mesh_msg){.token = token, .a = payload, .b = MSG_MAKE(MSG_MIGRATE, fd)});
	s->out[target].inflight++;
	s->inflight_total++;
	return 0;
}

int tl_shard_submit_to(tl_shard *s, uint32_t target, tl_mesh_fn fn, void *arg, uint64_t token)
{
	int rc;

	if (!fn)
		return -EINVAL;
	if (target < s->n && s->out[target].inflight >= s->rt->cfg.mesh_inflight &&
	    !s->mesh_closed) {
		s->st.mesh_refused++;
		return -ENOBUFS;
	}
	rc = can_send(s, target);
	if (rc)
		return rc;
	stage(s, target,
	      &(struct tl_mesh_msg){.token = token, .a = (uint64_t)(uintptr_t)arg, .b = MSG_CALL,
				    .fn = (void *)fn});
	s->out[target].inflight++;
	s->inflight_total++;
	return 0;
}

/* All-or-nothing check for a message to every shard. */
static int can_send_all(tl_shard *s, int call)
{
	for (uint32_t t = 0; t < s->n; t++) {
		int rc;

		if (call && s->out[t].inflight >= s->rt->cfg.mesh_inflight && !s->mesh_closed) {
			s->st.mesh_refused++;
			return -ENOBUFS;
		}
		rc = can_send(s, t);
		if (rc)
			return rc;
	}
	return 0;
}

int tl_shard_broadcast(tl_shard *s, uint64_t token, uint64_t payload)
{
	int rc = can_send_all(s, 0);

	if (rc)
		return rc;
	for (uint32_t t = 0; t < s->n; t++)
		stage(s, t, &(struct tl_mesh_msg){.token = token, .a = payload, .b = MSG_POST});
	return (int)s->n;
}

int tl_shard_submit_all(tl_shard *s, tl_mesh_fn fn, void *arg, uint64_t token)
{
	int rc;

	if (!fn)
		return -EINVAL;
	rc = can_send_all(s, 1);
	if (rc)
		return rc;
	for (uint32_t t = 0; t < s->n; t++) {
		stage(s, t,
		      &(struct tl_mesh_msg){.token = token, .a = (uint64_t)(uintptr_t)arg,
					    .b = MSG_CALL, .fn = (void *)fn});
		s->out[t].inflight++;
		s->inflight_total++;
	}
	return (int)s->n;
}

int tl_shard_wait_room(tl_shard *s, uint32_t target, uint64_t token)
{
	struct out *o;

	if (target >= s->n)
		return -EINVAL;
	if (s->mesh_closed)
		return -EPIPE;
	o = &s->out[target];
	if (o->room_wait)
		return -ENOBUFS;
	o->room_wait = 1;
	o->room_token = token;
	s->nroom_wait++;
	return 0;
}

/* A function's result for shard t: into the ring if it has room and nothing
 * waits before it, else into the backlog (never refused: the caller's credit
 * reserved its place). */
static void send_result(tl_shard *s, uint32_t t, const struct tl_mesh_msg *m)
{
	struct out *o = &s->out[t];
	uint32_t cap = s->rt->cfg.mesh_inflight;

	if (s->mesh_closed) {
		s->st.mesh_dropped++;
		return;
	}
	if (!o->bl_len && ring_room(s, o, &s->outp[t].ring)) {
		stage(s, t, m);
		return;
	}
	if (o->bl_len == cap) { /* only a broken credit count gets here */
		s->st.mesh_dropped++;
		return;
	}
	if (!o->bl_len)
		s->nbacklog++;
	o->backlog[(o->bl_head + o->bl_len) % cap] = *m;
	o->bl_len++;
}

/* Move backlogged results into their rings while there is room. */
static void push_backlogs(tl_shard *s)
{
	uint32_t cap = s->rt->cfg.mesh_inflight;

	for (uint32_t t = 0; t < s->n && s->nbacklog; t++) {
		struct out *o = &s->out[t];

		while (o->bl_len && ring_room(s, o, &s->outp[t].ring)) {
			stage(s, t, &o->backlog[o->bl_head]);
			o->bl_head = (o->bl_head + 1) % cap;
			if (!--o->bl_len)
				s->nbacklog--;
		}
	}
}

/* Publish what was staged this pass and wake each target once. The wake
 * costs a system call only if that target is parked (tl_poster_wake). */
static void flush(tl_shard *s)
{
	for (uint32_t i = 0; i < s->ndirty; i++) {
		uint32_t t = s->dirty[i];
		struct out *o = &s->out[t];

		if (o->head != o->published)
			ring_publish(o, &s->outp[t].ring);
		o->dirty = 0;
		if (t != s->id)
			tl_poster_wake(s->rt->shards[t].poster);
	}
	s->ndirty = 0;
}

/* ---- dispatch ---- */

static inline void dispatch(tl_shard *s, const tl_completion *c)
{
	const tl_runtime_config *cfg = &s->rt->cfg;
	unsigned h = tl_token_handler(c->token);
	tl_shard_handler fn = h < TL_RT_HANDLERS ? cfg->handlers[h] : NULL;

	if (!fn)
		fn = cfg->on_completion;
	if (fn)
		fn(s, c);
}

static void deliver_mesh(tl_shard *s, uint64_t token, int64_t result, uint32_t aux,
			 uint64_t value, void *ptr, uint16_t kind)
{
	tl_completion c;

	c.token = token;
	c.op = TL_OP_NONE;
	c.handle = TL_HANDLE_NONE;
	c.result = result;
	c.kind = kind;
	c.flags = TL_F_TERMINAL;
	c.aux = aux;
	c.u.mesh.payload = value;
	c.u.mesh.arg = ptr;
	c.u.mesh.conn = TL_HANDLE_NONE;
	s->mesh_comp[kind]++;
	dispatch(s, &c);
}

/* A connection migrated from src: adopt it and tell the program, or close
 * it; either way src hears how it went. */
static void run_migrate(tl_shard *s, uint32_t src, const struct tl_mesh_msg *m)
{
	tl_completion c;
	int fd = MSG_WORD(m->b);
	int rc = tl_adopt(s->loop, fd, &c.u.mesh.conn);

	if (rc < 0) {
		close(fd);
	} else {
		c.token = m->token;
		c.op = TL_OP_NONE;
		c.handle = TL_HANDLE_NONE;
		c.result = 0;
		c.kind = TL_K_MESH;
		c.flags = TL_F_TERMINAL;
		c.aux = src | TL_MESH_MIGRATED;
		c.u.mesh.payload = m->a;
		c.u.mesh.arg = NULL;
		s->mesh_comp[TL_K_MESH]++;
		dispatch(s, &c);
	}
	send_result(s, src,
		    &(struct tl_mesh_msg){.token = m->token, .a = m->a,
					  .b = MSG_MAKE(MSG_MIGRATED, rc)});
}

/* ---- the mesh: consumer side ---- */

static inline void run_msg(tl_shard *s, uint32_t src, const struct tl_mesh_msg *m)
{
	switch (MSG_TYPE(m->b)) {
	case MSG_POST:
		deliver_mesh(s, m->token, 0, src, m->a, NULL, TL_K_MESH);
		break;
	case MSG_CALL: {
		tl_mesh_fn fn = (tl_mesh_fn)m->fn;
		int64_t res = fn(s, (void *)(uintptr_t)m->a);

		send_result(s, src,
			    &(struct tl_mesh_msg){.token = m->token, .a = (uint64_t)res,
						  .b = MSG_RESULT, .fn = (void *)(uintptr_t)m->a});
		break;
	}
	case MSG_MIGRATE:
		run_migrate(s, src, m);
		break;
	case MSG_MIGRATED:
		s->out[src].inflight--;
		s->inflight_total--;
		deliver_mesh(s, m->token, MSG_WORD(m->b), src | TL_MESH_RESULT | TL_MESH_MIGRATED,
			     m->a, NULL, TL_K_MESH);
		break;
	default: /* MSG_RESULT */
		s->out[src].inflight--;
		s->inflight_total--;
		deliver_mesh(s, m->token, (int64_t)m->a, src | TL_MESH_RESULT, 0, m->fn, TL_K_MESH);
		break;
	}
}

/* Take up to budget messages from each inbound ring, running them in place.
 * Returns 1 if some ring still holds messages. */
static int receive(tl_shard *s, uint32_t budget)
{
	tl_completion c;
	uint64_t posts = 0;
	int more = 0;

	c.op = TL_OP_NONE;
	c.handle = TL_HANDLE_NONE;
	c.u.mesh.conn = TL_HANDLE_NONE;
	for (uint32_t src = 0; src < s->n; src++) {
		struct pair *p = &s->in[(size_t)src * s->n];
		struct tl__spsc *r = &p->ring;
		size_t left = budget;

		/* Chunk by chunk: a producer that keeps publishing keeps this
		 * loop going (up to the budget) instead of paying a whole pass
		 * per chunk, and each chunk's slots go back to it at once. */
		while (left) {
			size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
			size_t avail, take;

			r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
			avail = r->head_cache - tail;
			if (!avail)
				break;
			take = avail < left ? avail : left;
			left -= take;
			more |= avail > take;
			/* The slots stay ours until tail moves below, so posts
			 * are read in place; the record handed out is reused. */
			for (size_t k = 0; k < take; k++) {
				const struct tl_mesh_msg *m = &r->slots[(tail + k) & r->mask];

				if (tl_likely(m->b == MSG_POST)) {
					c.token = m->token;
					c.result = 0;
					c.kind = TL_K_MESH;
					c.flags = TL_F_TERMINAL;
					c.aux = src;
					c.u.mesh.payload = m->a;
					c.u.mesh.arg = NULL;
					posts++;
					dispatch(s, &c);
				} else {
					struct tl_mesh_msg copy = *m;

					run_msg(s, src, &copy);
				}
			}
			s->st.mesh_in += take;
			/* Release the slots. Sequentially consistent, like the
			 * load of want_room after it and the producer's store of
			 * want_room before its reload of tail (Dekker): one of
			 * the two sides sees the other, so a producer waiting
			 * for room is never missed. */
			atomic_exchange_explicit(&r->tail, tail + take, memory_order_seq_cst);
			if (atomic_load_explicit(&p->want_room, memory_order_seq_cst) &&
			    atomic_exchange_explicit(&p->want_room, 0, memory_order_relaxed))
				tl_poster_wake(s->rt->shards[src].poster);
		}
	}
	s->mesh_comp[TL_K_MESH] += posts;
	return more;
}

/* Something in an inbound ring? Exact for this (the consuming) thread. */
static int inbound_ready(tl_shard *s)
{
	for (uint32_t src = 0; src < s->n; src++) {
		struct tl__spsc *r = &s->in[(size_t)src * s->n].ring;

		if (atomic_load_explicit(&r->head, memory_order_acquire) !=
		    atomic_load_explicit(&r->tail, memory_order_relaxed))
			return 1;
	}
	return 0;
}

/*
 * Without arm (inside a pass): move backlogged results into their rings and
 * deliver the room completions that are due. With arm (before parking, after
 * the pass's flush, so nothing may be staged or delivered here): ask the
 * consumers of still-waiting pairs for a wake, and say whether room turned
 * up meanwhile (then the shard must not park).
 */
static int room_check(tl_shard *s, int arm)
{
	int ready = 0;

	if (!arm && s->nbacklog)
		push_backlogs(s);
	if (!s->nroom_wait && !s->nbacklog)
		return 0;
	for (uint32_t t = 0; t < s->n; t++) {
		struct out *o = &s->out[t];
		struct tl__spsc *r = &s->outp[t].ring;

		if (!o->room_wait && !o->bl_len)
			continue;
		if (!arm) {
			if (o->room_wait && !o->bl_len && !s->mesh_closed && ring_room(s, o, r)) {
				o->room_wait = 0;
				s->nroom_wait--;
				deliver_mesh(s, o->room_token, 0, t, 0, NULL, TL_K_ROOM);
			}
			continue;
		}
		atomic_exchange_explicit(&s->outp[t].want_room, 1, memory_order_seq_cst);
		r->tail_cache = atomic_load_explicit(&r->tail, memory_order_seq_cst);
		if (r->mask + 1 - (o->head - r->tail_cache))
			ready = 1;
	}
	return ready;
}

/* ---- shard threads ---- */

static uint32_t nhandles(tl_shard *s)
{
	tl_loop_stats st;
	tl_loop_stats_get(s->loop, &st);
	return st.handles;
}

static void close_all(tl_shard *s)
{
	tl_close_all(s->loop, TL_RT_CLOSE_TOKEN);
	s->last_nhandles = nhandles(s);
}

/* One pass: turn, hand out completions, run arrived messages, let the
 * program poll, publish the mesh, account. Returns the turn's error. */
static int pass(tl_shard *s, int64_t timeout)
{
	tl_runtime *rt = s->rt;
	tl_loop *l = s->loop;
	/* A pass starts where the previous one ended (what happens between
	 * two passes is the runtime's own work): one clock read per pass. */
	uint64_t t0 = s->pass_end, t1, busy;
	tl_turn_info ti;
	int n, rc = 0, more;

	ti.idle_ns = 0;
	n = tl_turn(l, timeout, s->batch, rt->cfg.batch, &ti);
	if (n < 0) {
		if (n != -EINTR)
			rc = n;
		n = 0;
	}
	s->bat_n = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		s->bat_i = (uint32_t)i;
		dispatch(s, &s->batch[i]);
	}
	s->bat_n = 0;
	more = receive(s, rt->cfg.mesh_budget);
	if (s->nroom_wait || s->nbacklog)
		room_check(s, 0);
	if (rt->cfg.on_pass)
		more |= rt->cfg.on_pass(s, rt->cfg.arg) != 0;
	flush(s);
	s->pass_busy = more;

	t1 = mono_ns();
	s->pass_end = t1;
	busy = t1 - t0;
	busy = busy > ti.idle_ns ? busy - ti.idle_ns : 0;
	s->st.busy_ns += busy;
	s->st.pass_hist[hist_bucket(busy)]++;
	if (busy > s->st.max_pass_ns)
		s->st.max_pass_ns = busy;
	if (rt->cfg.stall_ns && busy > rt->cfg.stall_ns) {
		s->st.stalls++;
		s->st.last_stall_ns = busy;
		fprintf(stderr, "turnloop: stall on shard %u (cpu %d): a pass took %.3f ms (threshold %.3f ms)\n",
			s->id, rt->plan.shards[s->id].pu_os_index, (double)busy / 1e6,
			(double)rt->cfg.stall_ns / 1e6);
	}
	if (t1 - s->last_pub >= rt->cfg.stats_period_ns)
		publish(s, t1);
	return rc;
}

/* Work is waiting that must not wait for an OS event. Also arms the
 * room wakes, so that it is safe to park when it says 0. */
static int has_work(tl_shard *s)
{
	return s->pass_busy || inbound_ready(s) || room_check(s, 1);
}

/* Nothing left in the loop: no live handle, op or queued completion. */
static int loop_empty(tl_shard *s)
{
	tl_loop_stats st;
	tl_loop_stats_get(s->loop, &st);
	return !tl_alive(s->loop) && !st.handles && !st.queued;
}

static int drained(tl_shard *s)
{
	return loop_empty(s) && !s->ndirty && !s->nbacklog && !s->inflight_total;
}

static void wake_all(tl_runtime *rt)
{
	for (uint32_t i = 0; i < rt->n; i++)
		if (rt->shards[i].poster)
			tl_poster_wake(rt->shards[i].poster);
}

/* A graceful drain begins: listeners go, the program is told, its
 * connections may finish until the loop is no longer alive or grace_ns. */
static void begin_grace(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->phase = PH_GRACE;
	set_state(rt, TL_STATS_STOPPING);
	tl_close_listeners(s->loop, TL_RT_CLOSE_TOKEN);
	if (rt->cfg.on_drain)
		rt->cfg.on_drain(s, rt->cfg.arg);
	s->drain_deadline = mono_ns() + rt->cfg.grace_ns;
}

static void begin_drain(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->phase = PH_DRAIN;
	set_state(rt, TL_STATS_STOPPING);
	if (rt->cfg.on_stop)
		rt->cfg.on_stop(s, rt->cfg.arg);
	close_all(s);
	s->drain_deadline = mono_ns() + rt->cfg.drain_ns;
}

/* The last phase, once every shard has drained: close the mesh, wait until
 * no shard can send any more, deliver what is still in the inbound rings,
 * finish the loop. */
static void finish(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	uint64_t dl;

	s->mesh_closed = 1;
	push_backlogs(s);
	for (uint32_t t = 0; t < s->n; t++) {
		s->st.mesh_dropped += s->out[t].bl_len;
		s->out[t].bl_len = 0;
	}
	s->nbacklog = 0;
	flush(s);
	pthread_barrier_wait(&rt->barrier);
	s->pass_end = mono_ns(); /* waiting for the others is no stall */
	while (receive(s, UINT32_MAX))
		;
	close_all(s);
	dl = mono_ns() + rt->cfg.drain_ns;
	while (!loop_empty(s) && mono_ns() < dl) {
		if (pass(s, 10 * 1000000) < 0)
			break;
		if (nhandles(s) > s->last_nhandles)
			close_all(s);
		s->last_nhandles = nhandles(s);
	}
	publish(s, mono_ns());
}

static void shard_run(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	int rc;

	if (rt->cfg.on_start) {
		rc = rt->cfg.on_start(s, rt->cfg.arg);
		if (rc < 0) {
			fail(rt, rc, "shard %u (cpu %d) failed to start: on_start returned %s", s->id,
			     rt->plan.shards[s->id].pu_os_index, tl_strerror(rc));
			tl_runtime_stop(rt);
		}
	}
	flush(s);
	publish(s, mono_ns());
	/* The first turn must not park: on_pass has not run yet. */
	s->pass_busy = 1;
	s->pass_end = mono_ns();
	for (;;) {
		int64_t timeout = -1;

		if (s->phase == PH_RUN && atomic_load_explicit(&rt->drain, memory_order_acquire) &&
		    !atomic_load_explicit(&rt->stop, memory_order_acquire))
			begin_grace(s);
		if (s->phase == PH_GRACE) {
			uint64_t now = mono_ns();

			if (atomic_load_explicit(&rt->stop, memory_order_acquire) ||
			    (!tl_alive(s->loop) && !has_work(s)) || now >= s->drain_deadline)
				begin_drain(s);
			else
				timeout = (int64_t)(s->drain_deadline - now);
		}
		if (s->phase == PH_RUN && atomic_load_explicit(&rt->stop, memory_order_acquire))
			begin_drain(s);
		if (s->phase == PH_DRAIN) {
			uint64_t now = mono_ns();

			if (nhandles(s) > s->last_nhandles)
				close_all(s);
			s->last_nhandles = nhandles(s);
			if (drained(s) || now >= s->drain_deadline) {
				s->phase = PH_WAIT;
				if (atomic_fetch_add(&rt->ndone, 1) + 1 == rt->n)
					wake_all(rt);
			} else {
				timeout = (int64_t)(s->drain_deadline - now);
			}
		}
		if (s->phase == PH_WAIT && atomic_load(&rt->ndone) == rt->n)
			break;
		if (has_work(s))
			timeout = 0;
		else if (timeout != 0)
			publish(s, s->pass_end); /* about to park: leave fresh numbers */
		rc = pass(s, timeout);
		if (rc < 0) {
			fail(rt, rc, "shard %u (cpu %d): turn failed: %s", s->id,
			     rt->plan.shards[s->id].pu_os_index, tl_strerror(rc));
			tl_runtime_stop(rt);
			if (s->phase == PH_DRAIN)
				s->drain_deadline = 0;
		}
	}
	finish(s);
}

static int shard_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;
	const tl_shard_place *p = &rt->plan.shards[s->id];
	char name[16];
	int rc;

	snprintf(name, sizeof name, "tl-shard-%u", s->id);
	pthread_setname_np(pthread_self(), name);
	if (rt->cfg.bind) {
		rc = tl_plan_bind_thread(&rt->plan, s->id);
		if (rc < 0) {
			fail(rt, rc, "shard %u cannot bind to cpu %d (numa %d): %s", s->id,
			     p->pu_os_index, p->numa_node, tl_strerror(rc));
			return rc;
		}
	}
	/* After the binding, so that the arena's first pages are touched
	 * on the shard's node. */
	arena_setup(s);
	s->st.tid = (int32_t)gettid();
	s->batch = malloc((size_t)rt->cfg.batch * sizeof *s->batch);
	s->out = calloc(s->n, sizeof *s->out);
	s->dirty = malloc((size_t)s->n * sizeof *s->dirty);
	/* The families are final now (declared before start); the values are
	 * this thread's own, on its node. */
	s->nvals = rt->nvals;
	s->vals = calloc(s->nvals ? s->nvals : 1, sizeof *s->vals);
	if (!s->batch || !s->out || !s->dirty || !s->vals)
		goto nomem;
	for (uint32_t t = 0; t < s->n; t++) {
		s->out[t].backlog = malloc((size_t)rt->cfg.mesh_inflight * sizeof(struct tl_mesh_msg));
		if (!s->out[t].backlog)
			goto nomem;
	}
	/* The consumer allocates its inbound rings, on its own node. */
	for (uint32_t src = 0; src < s->n; src++) {
		rc = tl__spsc_init(&s->in[(size_t)src * s->n].ring, rt->cfg.mesh_capacity);
		if (rc < 0)
			goto nomem;
	}
	rc = tl_loop_new(&s->loop, &rt->cfg.loop);
	if (rc < 0) {
		tl_driver_info di;
		tl_driver_info_get(&di);
		fail(rt, rc, "shard %u (cpu %d) cannot create its loop: %s%s%s", s->id,
		     p->pu_os_index, tl_strerror(rc), di.last_error[0] ? ": " : "", di.last_error);
		return rc;
	}
	if (!(tl_loop_caps(s->loop) & TL_CAP_OS)) {
		/* A server on the simulation driver would listen where nobody
		 * can reach it. */
		fail(rt, -ENOTSUP, "shard %u: the %s driver has no operating-system sockets "
				   "(it runs tests, not servers)", s->id, tl_loop_driver(s->loop));
		return -ENOTSUP;
	}
	s->poster = tl_poster_get(s->loop);
	if (s->id == 0 && rt->hdr)
		snprintf(rt->hdr->driver, sizeof rt->hdr->driver, "%s", tl_loop_driver(s->loop));
	return 0;
nomem:
	fail(rt, -ENOMEM, "shard %u (cpu %d): out of memory at setup", s->id, p->pu_os_index);
	return -ENOMEM;
}

static void shard_teardown(tl_shard *s)
{
	if (s->loop) {
		if (tl_loop_close(s->loop) < 0)
			tl_loop_destroy(s->loop);
		s->loop = NULL;
	}
	if (s->out)
		for (uint32_t t = 0; t < s->n; t++)
			free(s->out[t].backlog);
	free(s->out);
	free(s->dirty);
	free(s->batch);
	free(s->vals);
	s->out = NULL;
	s->dirty = NULL;
	s->batch = NULL;
	s->vals = NULL;
}

static void *shard_main(void *arg)
{
	tl_shard *s = arg;
	tl_runtime *rt = s->rt;
	int rc = shard_setup(s), go;

	pthread_mutex_lock(&rt->mu);
	s->setup_rc = rc;
	rt->nready++;
	pthread_cond_broadcast(&rt->cv);
	while (!rt->go)
		pthread_cond_wait(&rt->cv, &rt->mu);
	go = rt->go;
	pthread_mutex_unlock(&rt->mu);
	if (rc == 0 && go > 0)
		shard_run(s);
	shard_teardown(s);
	return NULL;
}

/* ---- the runtime ---- */

int tl_runtime_new(tl_runtime **out, const tl_runtime_config *cfg)
{
	tl_runtime_config defaults;
	tl_plan_request req;
	tl_runtime *rt;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg) {
		tl_runtime_config_init(&defaults);
		cfg = &defaults;
	}
	if (!valid_config(cfg))
		return -EINVAL;
	req = cfg->plan;
	if (!cfg->no_env && tl_plan_from_env(&req) < 0)
		return -EINVAL;
	rt = calloc(1, sizeof *rt);
	if (!rt)
		return -ENOMEM;
	rt->cfg = *cfg;
	rt->stats_dfd = -1;
	pthread_mutex_init(&rt->mu, NULL);
	pthread_mutex_init(&rt->meta_mu, NULL);
	pthread_cond_init(&rt->cv, NULL);
	atomic_init(&rt->arenas, TL_ARENAS);
	rt->arenas_why = TL_ARENAS ? "" :
#if TL_HAVE_JEMALLOC
		"this is a sanitizer build (jemalloc arenas would hold nothing)";
#else
		"built with -Djemalloc=disabled";
#endif
	rc = tl_plan_compute(&rt->plan, &req, NULL);
	if (rc < 0)
		goto fail;
	rt->n = rt->plan.count;
	if (rt->n > TL_RT_MAX_SHARDS) {
		rc = -EINVAL;
		goto fail;
	}
	rt->pairs = aligned_alloc(TL__CACHE_LINE, (size_t)rt->n * rt->n * sizeof *rt->pairs);
	rt->shards = aligned_alloc(TL__CACHE_LINE, (size_t)rt->n * sizeof *rt->shards);
	rt->vkind = calloc(cfg->stats_values, 1);
	if (!rt->pairs || !rt->shards || !rt->vkind) {
		rc = -ENOMEM;
		goto fail;
	}
	memset(rt->pairs, 0, (size_t)rt->n * rt->n * sizeof *rt->pairs);
	memset(rt->shards, 0, (size_t)rt->n * sizeof *rt->shards);
	for (uint32_t i = 0; i < rt->n; i++) {
		tl_shard *s = &rt->shards[i];

		s->rt = rt;
		s->id = i;
		s->n = rt->n;
		s->in = &rt->pairs[i];
		s->outp = &rt->pairs[(size_t)i * rt->n];
		s->st.shard = i;
		s->st.cpu = rt->plan.shards[i].pu_os_index;
		s->st.numa = rt->plan.shards[i].numa_node;
		s->st.arena = UINT32_MAX;
		for (uint32_t j = 0; j < rt->n; j++)
			atomic_init(&rt->pairs[(size_t)i * rt->n + j].want_room, 0);
	}
	rc = region_create(rt);
	if (rc < 0)
		goto fail;
	region_init(rt);
	*out = rt;
	return 0;
fail:
	tl_plan_free(&rt->plan);
	free(rt->pairs);
	free(rt->shards);
	free(rt->vkind);
	pthread_mutex_destroy(&rt->mu);
	pthread_mutex_destroy(&rt->meta_mu);
	pthread_cond_destroy(&rt->cv);
	free(rt);
	return rc;
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
	pthread_mutex_lock(&rt->meta_mu);
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
	pthread_mutex_unlock(&rt->meta_mu);
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
	pthread_mutex_lock(&rt->meta_mu);
	if ((uint32_t)id >= rt->nvals) {
		pthread_mutex_unlock(&rt->meta_mu);
		return -EINVAL;
	}
	meta_begin(rt);
	memset(rt->labels[id], 0, TL_STATS_LABEL_MAX);
	memcpy(rt->labels[id], label, n);
	meta_end(rt);
	pthread_mutex_unlock(&rt->meta_mu);
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

static void on_signal(int sig)
{
	tl_runtime *rt = atomic_load(&sig_target);

	(void)sig;
	if (!rt)
		return;
	if (atomic_fetch_add(&rt->signals_seen, 1) == 0)
		tl_runtime_drain(rt);
	else
		tl_runtime_stop(rt);
}

/* The runtime's SIGINT/SIGTERM handling is a hook on the process's one
 * handler for them (turnloop/signal.h): loops subscribed to those signals
 * are told too, and the action the first of us replaced comes back when
 * the last lets go. */
static void signals_install(tl_runtime *rt)
{
	tl_runtime *none = NULL;

	if (!rt->cfg.signals || !atomic_compare_exchange_strong(&sig_target, &none, rt))
		return;
	tl_signal_hook(SIGINT, on_signal);
	tl_signal_hook(SIGTERM, on_signal);
	rt->sig_installed = 1;
}

static void signals_restore(tl_runtime *rt)
{
	if (!rt->sig_installed)
		return;
	tl_signal_hook(SIGINT, NULL);
	tl_signal_hook(SIGTERM, NULL);
	atomic_store(&sig_target, NULL);
	rt->sig_installed = 0;
}

static void join_all(tl_runtime *rt)
{
	for (uint32_t i = 0; i < rt->ncreated; i++)
		pthread_join(rt->shards[i].thread, NULL);
	rt->joined = 1;
}

int tl_runtime_start(tl_runtime *rt)
{
	sigset_t block, old;
	int rc = 0;

	if (!rt || rt->started)
		return -EINVAL;
	rt->started = 1;
	if (pthread_barrier_init(&rt->barrier, NULL, rt->n)) {
		fail(rt, -ENOMEM, "cannot create the stop barrier");
		rt->joined = 1;
		return rt->result;
	}
	rt->barrier_ok = 1;
	/* Shard threads inherit a mask without SIGINT/SIGTERM, so those
	 * signals reach the controlling thread's handler instead of
	 * interrupting a shard's OS wait. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (uint32_t i = 0; i < rt->n; i++) {
		rc = pthread_create(&rt->shards[i].thread, NULL, shard_main, &rt->shards[i]);
		if (rc) {
			fail(rt, -rc, "cannot start the thread of shard %u: %s", i, strerror(rc));
			break;
		}
		rt->ncreated++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	pthread_mutex_lock(&rt->mu);
	while (rt->nready < rt->ncreated)
		pthread_cond_wait(&rt->cv, &rt->mu);
	rc = rt->ncreated < rt->n ? -EAGAIN : 0;
	for (uint32_t i = 0; i < rt->ncreated && !rc; i++)
		rc = rt->shards[i].setup_rc;
	if (rc && rt->result)
		rc = rt->result;
	rt->go = rc ? -1 : 1;
	pthread_cond_broadcast(&rt->cv);
	pthread_mutex_unlock(&rt->mu);
	if (rc) {
		join_all(rt);
		set_state(rt, TL_STATS_STOPPED);
		return rc;
	}
	if (rt->hdr && atomic_load(&rt->arenas))
		rt->hdr->flags |= TL_STATS_F_ARENAS;
	signals_install(rt);
	set_state(rt, TL_STATS_RUNNING);
	return 0;
}

int tl_runtime_run(tl_runtime *rt)
{
	int rc;

	if (!rt)
		return -EINVAL;
	if (!rt->started) {
		rc = tl_runtime_start(rt);
		if (rc < 0)
			return rc;
	}
	if (!rt->joined) {
		join_all(rt);
		set_state(rt, TL_STATS_STOPPED);
	}
	pthread_mutex_lock(&rt->mu);
	rc = rt->result;
	pthread_mutex_unlock(&rt->mu);
	return rc;
}

void tl_runtime_stop(tl_runtime *rt)
{
	if (!rt)
		return;
	atomic_store_explicit(&rt->stop, 1, memory_order_release);
	wake_all(rt);
}

void tl_runtime_drain(tl_runtime *rt)
{
	if (!rt)
		return;
	atomic_store_explicit(&rt->drain, 1, memory_order_release);
	wake_all(rt);
}

void tl_runtime_destroy(tl_runtime *rt)
{
	if (!rt)
		return;
	if (rt->started && !rt->joined) {
		tl_runtime_stop(rt);
		join_all(rt);
	}
	signals_restore(rt);
	for (uint32_t i = 0; i < rt->n; i++) {
		tl_poster_put(rt->shards[i].poster);
		rt->shards[i].poster = NULL;
	}
	for (size_t i = 0; i < (size_t)rt->n * rt->n; i++)
		tl__spsc_free(&rt->pairs[i].ring);
	if (rt->barrier_ok)
		pthread_barrier_destroy(&rt->barrier);
	region_destroy(rt);
	tl_plan_free(&rt->plan);
	free(rt->pairs);
	free(rt->shards);
	free(rt->vkind);
	pthread_mutex_destroy(&rt->mu);
	pthread_mutex_destroy(&rt->meta_mu);
	pthread_cond_destroy(&rt->cv);
	free(rt);
}

uint32_t tl_runtime_shards(const tl_runtime *rt) { return rt ? rt->n : 0; }
const tl_plan *tl_runtime_plan(const tl_runtime *rt) { return rt ? &rt->plan : NULL; }

const char *tl_runtime_strerror(const tl_runtime *rt)
{
	return rt ? rt->why : "";
}

const char *tl_runtime_stats_error(const tl_runtime *rt)
{
	return rt ? rt->stats_why : "";
}

int tl_runtime_arenas(const tl_runtime *rt, const char **why)
{
	int on = rt && atomic_load(&((tl_runtime *)rt)->arenas);

	if (why)
		*why = on || !rt ? "" : rt->arenas_why;
	return on;
}

tl_loop *tl_shard_loop(tl_shard *s) { return s->loop; }
uint32_t tl_shard_id(const tl_shard *s) { return s->id; }
uint32_t tl_shard_count(const tl_shard *s) { return s->n; }
tl_runtime *tl_shard_runtime(tl_shard *s) { return s->rt; }
const tl_shard_place *tl_shard_place_of(const tl_shard *s) { return &s->rt->plan.shards[s->id]; }
void *tl_shard_arg(const tl_shard *s) { return s->rt->cfg.arg; }
void tl_shard_set_data(tl_shard *s, void *data) { s->data = data; }
void *tl_shard_data(const tl_shard *s) { return s->data; }
