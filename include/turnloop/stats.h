/* turnloop/stats.h: live stats: the program's own counters and gauges, and the shared region a runtime publishes and a reader (tlshard) reads (contract 9.7). */
#ifndef TURNLOOP_STATS_H
#define TURNLOOP_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The program's own stats ---- */

/*
 * Families of per-shard values the program declares before
 * tl_runtime_launch(), each `rows` values wide, published with the shard's
 * other counters and shown by tlshard stats after the runtime's own. A
 * counter only grows (tlshard shows its rate); a gauge is set, raised and
 * lowered (tlshard shows its value). Every shard has its own copy of every
 * value, written only by that shard's thread, so an update costs one add
 * to shard-local memory and no atomic operation.
 *
 * The values of all families share cfg.stats_values slots per shard: a
 * family takes `rows` consecutive slots and tl_runtime_stat() returns the
 * id of its row 0; row r is id + r. A family whose rows stand for things
 * that appear at run time (the servers a name lookup adds, say) is declared
 * with room for as many as the program will track, and each row is named
 * with tl_runtime_stat_label() when it comes into use.
 */
enum { TL_STAT_COUNTER = 1, TL_STAT_GAUGE = 2 };

/*
 * Declare a family: name is 1..TL_STATS_NAME_MAX-1 characters of
 * [A-Za-z0-9_.-], starting with a letter, and must not equal an existing
 * name once '.' and '-' are read as '_' (so that every name maps to a
 * Prometheus metric of its own); kind is TL_STAT_COUNTER or TL_STAT_GAUGE;
 * rows >= 1. Only before tl_runtime_launch(), from the controlling thread.
 * Declaring the same name again with the same kind and rows returns the
 * same id. name is copied.
 * Returns the id of row 0 (>= 0); -EINVAL (rt NULL, bad name, kind or rows,
 * a clash with another family, or already launched); -ENOBUFS (fewer than
 * rows of the cfg.stats_values slots are left).
 */
int tl_runtime_stat(tl_runtime *rt, const char *name, int kind, uint32_t rows);

/* tl_runtime_stat(rt, name, TL_STAT_COUNTER, 1): one counter per shard. */
int tl_runtime_counter(tl_runtime *rt, const char *name);
/* tl_runtime_stat(rt, name, TL_STAT_GAUGE, 1): one gauge per shard. */
int tl_runtime_gauge(tl_runtime *rt, const char *name);

/*
 * Name row `id` (the id of a family's row 0 plus a row number): label is
 * 0..TL_STATS_LABEL_MAX-1 characters of [A-Za-z0-9_.:/@+=-] and brackets,
 * enough for a host name or an "[IPv6]:port"; "" clears it (tlshard then
 * shows the row number). The label is copied and shared by every shard. Any
 * thread, at any time between tl_runtime_new() and tl_runtime_destroy();
 * readers see the old or the new label, never a mix. Returns 0, or -EINVAL
 * (rt NULL, id not a declared row, bad label).
 */
int tl_runtime_stat_label(tl_runtime *rt, int id, const char *label);

/* Add delta to this shard's copy of counter row id (tl_runtime_stat).
 * Published with the shard's other counters. Returns 0, or -EINVAL when id
 * is not a counter row. Allocates nothing. */
int tl_shard_counter_add(tl_shard *s, int id, uint64_t delta);

/* Set this shard's copy of gauge row id to value. Returns 0, or -EINVAL
 * when id is not a gauge row. */
int tl_shard_gauge_set(tl_shard *s, int id, int64_t value);

/* Add delta (negative: subtract) to this shard's copy of gauge row id.
 * Returns 0, or -EINVAL when id is not a gauge row. */
int tl_shard_gauge_add(tl_shard *s, int id, int64_t delta);

/*
 * Whether the runtime publishes its live stats region (see below). Returns
 * 1 when it does; 0 when cfg.stats is off; -EINVAL (rt NULL); or, when
 * cfg.stats asked for a region that could not be published (the runtime
 * then runs without one), the error that prevented it: -EPERM (the per-user
 * directory is not this user's, or not a directory), or the OS error of
 * making or mapping it. Detail (tl_error_detail) for a negative return:
 * the reason, as the runtime printed it on stderr.
 */
int tl_runtime_stats_published(const tl_runtime *rt);

/* ---- Live stats (contract 9.7) ---- */

/*
 * Where: /dev/shm/turnloop-<uid>/<pid>, uid being the effective user of the
 * process. The runtime creates the per-user directory with mode 0700 (or
 * checks it: a directory, not a symbolic link, owned by that user; a mode
 * other than 0700 is set back) and the region inside it with
 * O_EXCL|O_NOFOLLOW, mode 0600, relative to the directory it checked. Only
 * that user (and root) can therefore create, replace or read a region; one
 * left by a dead process of the user with the same pid is replaced, and
 * regions of the user's dead processes are removed when a runtime creates
 * its own. The writer holds an exclusive flock(2) on its region for as long
 * as it lives (TL_STATS_F_LOCKED), so "dead" means "its lock is free": a
 * runtime in another PID namespace sharing /dev/shm, which cannot see the
 * writer's pid, leaves a live region alone. The path does not follow XDG_RUNTIME_DIR: a reader must find a
 * process's region from its pid alone, from any session, and a service often
 * has no such variable, or another one than the shell that reads its stats.
 * On Windows: the named mapping Local\turnloop-stats-<pid> (the Windows
 * process id), owned by the process's user and open to that user alone;
 * docs/WINDOWS.md says what the reader checks there.
 *
 * What: a header (magic, layout version, shard count, the writer's pid,
 * user and start time, the program's stat families and row labels) and one
 * record per shard, each behind its own sequence lock that the shard updates
 * at most once per stats_period_ns and before it parks. The reader below
 * copies with pread, never writes, and takes no lock the shard waits on:
 * reading costs the shard nothing but a shared cache line now and then, and
 * a region that shrinks or changes under the reader yields errors, never a
 * crash.
 */

#define TL_STATS_MAGIC UINT64_C(0x31535441544c5254) /* "TRLTATS1" little-endian */
#define TL_STATS_VERSION 5u
#define TL_STATS_NAME_MAX 32u     /* bytes per family name, NUL included */
#define TL_STATS_LABEL_MAX 48u    /* bytes per row label, NUL included */
#define TL_STATS_VALUES_MAX 4096u /* most value slots per shard */
#define TL_STATS_HIST 32u         /* log2 buckets of pass durations */
#define TL_STATS_KINDS 24u        /* completion-kind slots (>= TL_K_COUNT_) */

/* Header flags. */
#define TL_STATS_F_ARENAS 0x1u  /* per-shard jemalloc arenas on */
#define TL_STATS_F_POOL 0x2u    /* the pool fields are filled */
#define TL_STATS_F_CPU 0x4u     /* cpu_ns holds the shard threads' CPU time */
#define TL_STATS_F_LOCKED 0x8u  /* the writer holds flock(LOCK_EX) on the region while it
				 * lives: a region no one can lock has a live writer,
				 * whatever PID namespace looks at it */

/* Runtime states in the header. */
enum { TL_STATS_STARTING = 0, TL_STATS_RUNNING = 1, TL_STATS_STOPPING = 2, TL_STATS_STOPPED = 3 };

/* What the header says, as the reader returns it. Strings are NUL-terminated
 * but otherwise as the writer left them: escape them before printing. */
typedef struct tl_stats_info {
	uint32_t version;        /* layout version (TL_STATS_VERSION) */
	uint32_t shards;         /* shard count */
	uint32_t flags;          /* TL_STATS_F_* */
	uint32_t state;          /* TL_STATS_* */
	int32_t pid;             /* the process that publishes it */
	uint32_t uid;            /* its effective user (Windows: the relative id,
	                          * the last part, of its user's SID) */
	uint64_t start_time;     /* its start, clock ticks after boot (field 22
	                          * of /proc/<pid>/stat; Windows: its creation
	                          * time, FILETIME units) */
	uint64_t started_ns;     /* CLOCK_MONOTONIC when the region was made */
	uint64_t stall_ns;       /* the stall threshold (0: off) */
	uint64_t period_ns;      /* publication period */
	uint32_t families;       /* program stat families declared */
	uint32_t values;         /* value slots they use, per shard */
	uint32_t capacity;       /* value slots the region has, per shard */
	char driver[16];         /* "uring", "epoll", ... */
} tl_stats_info;

/* One family of the program's stats (tl_runtime_stat). */
typedef struct tl_stats_family {
	char name[TL_STATS_NAME_MAX]; /* NUL-terminated, as the writer left it */
	uint32_t kind;                /* TL_STAT_COUNTER or TL_STAT_GAUGE */
	uint32_t rows;                /* values, >= 1 */
	uint32_t first;               /* index of row 0 in a record's values */
} tl_stats_family;

/*
 * One shard's counters, a consistent snapshot. Counters are totals since the
 * shard started; "gauges" are current values. Histogram bucket 0 counts
 * passes of 0 ns, bucket i >= 1 passes of [2^(i-1), 2^i) ns, the last one
 * everything longer. A pass is one turn of the loop and the user code the
 * runtime runs after it, less the time inside the OS wait.
 */
typedef struct tl_stats_shard {
	uint32_t shard;
	int32_t cpu, numa;
	uint32_t arena;                   /* jemalloc arena, UINT32_MAX when off */
	int32_t tid;                      /* the shard thread's id (gettid) */
	uint32_t reserved0;
	uint64_t updated_ns;              /* CLOCK_MONOTONIC of this snapshot */
	/* CPU time of the shard's thread, user and kernel (the work its
	 * io_uring_enter or epoll_wait does for it included), read from the
	 * thread's CPU clock at most once per period and before it parks, so
	 * at most one period's worth behind. A reader's "busy" is its growth
	 * over the reader's own interval of CLOCK_MONOTONIC. */
	uint64_t cpu_ns;
	uint64_t turns, os_waits, discovery_polls, zero_event_waits;
	uint64_t completions[TL_STATS_KINDS]; /* by enum tl_kind (mesh and room included) */
	uint64_t busy_ns;                 /* in passes, outside OS waits */
	uint64_t idle_ns;                 /* in OS waits (a wait counts once it ends) */
	uint64_t handles, ops, queued, timers; /* gauges of the loop */
	uint64_t leases_out;              /* gauge: pooled buffers held (tl_loop_stats) */
	uint64_t mesh_in, mesh_out;       /* messages received / sent (results included) */
	uint64_t mesh_refused;            /* posts and calls refused with -ENOBUFS, and waits of
	                                   * batches and waiting gathers for room (one a wait) */
	uint64_t mesh_inbound;            /* gauge: messages waiting in inbound rings */
	uint64_t mesh_backlog;            /* gauge: results waiting for ring room */
	uint64_t mesh_dropped;            /* results dropped because the mesh closed */
	uint64_t alloc_bytes, freed_bytes;/* by the shard thread (jemalloc), totals */
	uint64_t stalls, max_pass_ns, last_stall_ns;
	uint64_t pass_hist[TL_STATS_HIST];
	/* Pool (turnloop/pool.h): what this shard's loop submitted, had
	 * refused, got back (of which cancelled), has in flight, the summed
	 * queue wait and run time of its jobs (contract 7.6). */
	uint64_t pool_submitted, pool_refused, pool_completed, pool_cancelled, pool_in_flight;
	uint64_t pool_wait_ns, pool_run_ns;
	/* The bounded worker set of the shard's NUMA node (node_id; -1 when
	 * the pool has none for it) and that node's long workers, all zero
	 * until the pool starts. */
	int64_t node_id;
	uint64_t node_threads, node_busy, node_queued, node_reserved, node_long_threads,
		node_long_busy;
	/* A shard on a driver that owns a NIC (DPDK): its queue pair's frames
	 * in and out, frames dropped, TX bursts held back (tl_loop_stats). */
	uint64_t nic_rx, nic_tx, nic_drops, nic_tx_full;
	/* The same shard's hand-off between the port's queue pairs:
	 * datagrams given to another shard's loop, taken from other shards'
	 * loops, and dropped because a hand-off ring was full, these also
	 * in nic_drops (tl_loop_stats; new in layout version 4). */
	uint64_t nic_handed_out, nic_handed_in, nic_handoff_drops;
	/* How the loop waited when it found no work (tl_config.spin_ns and
	 * nap_ns; tl_loop_stats): turns that spun, and of them those that
	 * parked after all; turns that napped, and of them those that parked
	 * after the nap (new in layout version 5). */
	uint64_t spins, spin_parks, naps, nap_parks;
} tl_stats_shard;

typedef struct tl_stats_reader tl_stats_reader;

/*
 * Open the live stats of process pid. Before it trusts a byte it checks that
 * pid is a live process (not a zombie), finds its effective user U, and that
 * /dev/shm/turnloop-U is a directory (not a symbolic link) of U with mode
 * 0700, that the region in it is a regular file of U without group or other
 * permissions, and that its header names pid, U and the process's start
 * time (so a region left by an earlier process with the same pid is
 * refused). It holds a pidfd (where the kernel has them) to notice the
 * process's exit. Ownership: *out is the caller's until tl_stats_close().
 * Returns 0 and *out (NULL on failure); -EINVAL (out NULL, pid <= 0); -ESRCH (no such process, a
 * zombie, or the region was written by an earlier process with this pid);
 * -ENOENT (no region: not a turnloop process, or its stats are off);
 * -EACCES (another user's: this reader may not look); -EPERM (the directory
 * or the region is not what the runtime makes: wrong owner, mode or type,
 * so not trusted); -EPROTO (not a stats region, an unknown version or an
 * inconsistent header); -ENOMEM; or the OS error of open/read. Detail
 * (tl_error_detail) on failure: the check that failed, e.g. "pid 123:
 * layout version 7 is not known to this reader (knows 4)".
 */
int tl_stats_open(tl_stats_reader **out, int pid);

/*
 * Open the region file at path with the layout checks of tl_stats_open but
 * none of its process or ownership checks: for tests, fuzzing and copies of
 * a region. Same returns and detail, never -ESRCH; -EINVAL also for path
 * NULL or "". On Windows -ENOTSUP (a region there is no file).
 */
int tl_stats_open_path(tl_stats_reader **out, const char *path);

/*
 * Reread and check the header. For a reader opened by pid, first check that
 * the process still lives: -ESRCH once it has exited, -ENOENT once its
 * runtime removed the region (tl_runtime_destroy). Otherwise 0, -EINVAL (r
 * or out NULL), -EAGAIN (the header kept changing), or the codes and
 * detail of tl_stats_open.
 */
int tl_stats_info_get(tl_stats_reader *r, tl_stats_info *out);

/* Copy family idx (0..info.families-1) into *out. Returns 0; -EINVAL (bad
 * arguments, idx out of range); -EPROTO (an inconsistent entry); -EAGAIN (no
 * consistent copy after many tries); or the OS error of pread. */
int tl_stats_family_get(tl_stats_reader *r, uint32_t idx, tl_stats_family *out);

/* Copy the label of value slot `value` (a family's first + row) into buf,
 * NUL-terminated, "" when unset; a buf of TL_STATS_LABEL_MAX bytes always
 * holds it. Returns its length; -EINVAL (bad arguments, value beyond the
 * slots in use); -ENOBUFS (len too small: buf holds ""); -EAGAIN; or the OS
 * error of pread. */
int tl_stats_label_get(tl_stats_reader *r, uint32_t value, char *buf, size_t len);

/*
 * Copy shard's current record into *out and its first nvalues program values
 * (raw 64-bit words; a gauge's is an int64_t) into values, together and
 * consistently (retrying while the shard is publishing). values may be NULL
 * with nvalues 0. Returns 0; -EINVAL (r or out NULL, shard out of range,
 * nvalues above the region's capacity, values NULL with nvalues > 0);
 * -EAGAIN (no consistent copy after many tries); -EPROTO (the region changed
 * shape); or the OS error of pread.
 */
int tl_stats_shard_get(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out,
		       uint64_t *values, uint32_t nvalues);

/* Close the reader. NULL is a no-op. */
void tl_stats_close(tl_stats_reader *r);

/* ---- Deprecated names (kept for one release; turnloop.h lists them) ---- */

/* The old name of tl_stats_shard_get(). */
TL_DEPRECATED("renamed tl_stats_shard_get")
int tl_stats_read(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out, uint64_t *values,
		  uint32_t nvalues);
/* Why the runtime publishes no stats region although cfg.stats asked for
 * one (one line, owned by the runtime); "" when it publishes one or stats
 * are off by configuration. */
TL_DEPRECATED("use tl_runtime_stats_published() and tl_error_detail()")
const char *tl_runtime_stats_error(const tl_runtime *rt);


#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_STATS_H */
