/* turnloop/pool.h: the process-wide NUMA-aware blocking pool, file requests and name lookups (contract sections 6, 7). */
#ifndef TURNLOOP_POOL_H
#define TURNLOOP_POOL_H

#include <stdint.h>
#include <sys/stat.h>
#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One pool serves the whole process. It is launched by tl_pool_launch() or, with
 * the defaults, by the first submission of any loop, and it runs two classes
 * of work that share no thread, no queue and no reservation:
 *
 *  - TL_POOL_BOUNDED: short work (CPU-bound jobs, file requests, lookups). One
 *    set of workers per NUMA node, each set with its own bounded queue. A
 *    submission goes to the set of the submitting loop's node; when that
 *    queue (queued + reserved) is full it is refused with -ENOBUFS.
 *  - TL_POOL_LONG: work that holds a thread as long as a connection lives.
 *    No queue: the job is handed to a parked long worker, or a new one is
 *    started (placed on the loop's node), or -ENOBUFS at the ceiling. Idle
 *    long workers retire after the idle timeout.
 *
 * From a loop's side every submission follows the loop's rules (loop.h): it is
 * refused (negative return, nothing happened, no completion owed) or accepted
 * (an op id) and then yields exactly one terminal completion, delivered by
 * tl_turn(). tl_cancel() works on every op here: a job that has not started
 * never runs and its terminal -ECANCELED comes at once (the next tl_turn); a
 * running job sees tl_pool_cancelled() become true and its terminal, once it
 * returns, reports -ECANCELED. Each loop has at most cfg.max_undelivered pool
 * ops (of every kind here) accepted and not yet delivered; one more is
 * refused with -ENOBUFS. (A job cancelled before it started keeps its place
 * in that count, and in its node's queue, until a worker has taken it off
 * the queue and dropped it, which takes no time unless every worker of the
 * node is busy.) The loop's result ring is sized by that bound, so a
 * worker never finds it full. Setting up a loop's pool state (at its first
 * submission) allocates about 600 bytes per max_undelivered; after that,
 * submitting and completing allocate nothing.
 *
 * tl_loop_destroy() with pool ops in flight: jobs not started never run;
 * running jobs see tl_pool_cancelled() and their results are discarded (a
 * file opened for a destroyed loop is closed by the pool). Running file
 * requests that use caller memory (read, write, pread, pwrite, readdir, and
 * paths longer than TL_FS_INLINE_PATH) are waited for, because the kernel may
 * be writing into that memory; tl_blocking() jobs are not waited for.
 *
 * Functions that take a loop must be called on that loop's thread. The
 * others (tl_pool_launch, tl_pool_shutdown, tl_pool_stats_get, and the
 * tl_pool_cancelled / tl_pool_set_ptr pair inside a job) may be called from
 * any thread.
 */

/* Job classes (the `cls` argument of tl_blocking). */
enum tl_pool_class {
	TL_POOL_BOUNDED = 0,
	TL_POOL_LONG = 1,
};

/*
 * Process-wide configuration, fixed when the pool launches. tl_pool_config_init()
 * fills the defaults shown; tl_pool_launch() validates every field (-EINVAL
 * for zero or out-of-range values). Bounded sizes apply per NUMA node.
 */
typedef struct tl_pool_config {
	uint32_t workers_per_node; /* bounded workers per node          4, 1..1024 */
	uint32_t queue_per_node;   /* queued + reserved jobs per node   1024, 1..2^20 */
	uint32_t long_max;         /* long workers, whole process       64, 1..65536 */
	uint32_t long_idle_ms;     /* idle long worker retires after    10000, 1..86400000 */
	uint32_t spin_us;          /* an idle bounded worker polls this
	                            * long before it sleeps (one per node
	                            * at a time, and not while the CPUs
	                            * are contended); 0 = sleep at once 50, <= 10000 */
	/* NULL: this machine's topology (workers bound to their node's CPUs).
	 * Otherwise a hwloc synthetic description ("pack:2 numa:1 core:2 pu:1")
	 * or the path of a hwloc XML export (ends in ".xml"): the per-node sets,
	 * queues and stats exist, but no thread is bound (for tests and for
	 * planning on another machine's shape). The string is copied. On
	 * Windows, where no hwloc is built, a synthetic description is read
	 * by the runtime's own parser ("type:count" levels) and an XML path
	 * is -ENOTSUP. */
	const char *topology;
} tl_pool_config;

/* Fill *cfg with the defaults above. */
void tl_pool_config_init(tl_pool_config *cfg);

/*
 * Launch the pool with *cfg (NULL: the defaults; *cfg and its topology
 * string are copied): loads the topology, starts every bounded worker and
 * returns once all of them run (long workers start on demand). Any thread.
 * Returns 0 when launched, or when the pool already runs with an equal
 * configuration; -EINVAL for an invalid configuration, a topology
 * description hwloc rejects, or one that differs from the running pool's;
 * -ENOMEM; -ENOTSUP (an XML topology on Windows); or the negated error of
 * hwloc or of starting a thread.
 */
int tl_pool_launch(const tl_pool_config *cfg);

/* The old name of tl_pool_launch(): "start" names operations that run
 * until stopped (turnloop.h, rule 2). Deprecated, kept for one release. */
TL_DEPRECATED("renamed tl_pool_launch")
int tl_pool_start(const tl_pool_config *cfg);

/*
 * Stop the pool and join all its threads, so that a later launch may use
 * another configuration (tests) and a process can end cleanly. Returns 0 (or
 * 0 when not running), or -EBUSY, and nothing changes, while a loop that
 * submitted to the pool is still alive, or any job (including one of a
 * destroyed loop that is still running, or a cancelled one not yet discarded
 * by a worker) or reservation is still in the pool: retry later.
 */
int tl_pool_shutdown(void);

/* ---- Blocking jobs ---- */

/* What a running job sees: its cancellation flag and its pointer result. */
typedef struct tl_cancel_flag tl_cancel_flag;

/* A job: runs on a pool thread with the arg given to tl_blocking(); returns
 * the completion's result (by convention a negative errno on failure). */
typedef int64_t (*tl_job_fn)(void *arg, tl_cancel_flag *c);

/* Inside a job: 1 once tl_cancel() was called for it or its loop is gone,
 * else 0. Nothing stops a job that does not look. */
int tl_pool_cancelled(const tl_cancel_flag *c);

/* Inside a job: the pointer the completion carries in u.pool.ptr. */
void tl_pool_set_ptr(tl_cancel_flag *c, void *ptr);

/*
 * Run fn(arg, c) on the pool in class cls (TL_POOL_BOUNDED or TL_POOL_LONG).
 * The terminal completion is TL_K_POOL with aux = cls, result = fn's return,
 * u.pool.value = fn's return as uint64_t and u.pool.ptr = what the job set
 * (NULL if none). Cancelled: result -ECANCELED; value and ptr still say what
 * the job returned and set if it ran (value = (uint64_t)-ECANCELED and ptr
 * NULL if it never ran), so that the caller can free what it made. A job
 * whose loop is gone has its result discarded: it should check
 * tl_pool_cancelled() before making anything only the loop could free.
 *
 * arg stays the caller's; fn may run until its terminal completion is
 * delivered, or after tl_loop_destroy() returns if the loop is destroyed
 * while fn runs. Launches the pool with the defaults if it is not running.
 * Returns 0 and sets *op; -EINVAL (fn or op NULL, bad cls); -ENOBUFS (the
 * node's queue is full, the long ceiling is reached, the loop's
 * max_undelivered or op table is full); -ENOMEM (first use); or the error of
 * launching the pool or a long worker's thread.
 */
int tl_blocking(tl_loop *loop, tl_job_fn fn, void *arg, int cls, uint64_t token, tl_op *op);

/*
 * Place the loop's future submissions on the bounded set of NUMA node `node`
 * (the OS number, as in tl_shard_place.numa_node); -1 goes back to the
 * automatic choice, which is the node of the CPU the loop's thread runs on
 * at its first pool use. Jobs already accepted stay where they are. Starts
 * the pool with the defaults if it is not running. Returns 0, -EINVAL (no
 * set for that node), -ENOMEM, or the error of launching the pool.
 */
int tl_pool_loop_node(tl_loop *loop, int node);

/* ---- Statistics ---- */

/*
 * A snapshot read without any lock: each field is read separately, so they
 * may belong to slightly different instants. For shedding load, not for
 * invariants. All zero before the pool launches.
 */
typedef struct tl_pool_stats {
	int node;              /* NUMA node (OS number); -1 in the total */
	uint32_t threads;      /* bounded workers */
	uint32_t busy;         /* bounded workers running a job */
	uint32_t queued;       /* bounded jobs waiting (incl. cancelled ones not yet discarded) */
	uint32_t reserved;     /* queue slots promised to accepted requests */
	uint32_t long_threads; /* live long workers, idle ones included */
	uint32_t long_busy;    /* long workers running a job */
} tl_pool_stats;

/*
 * Fill *total (may be NULL) with the sums and per_node[0..cap) with the
 * first cap nodes, in hwloc order. Returns the number of nodes (0 before the
 * pool launches, when *total is zeroed and total->node = -1). Any thread.
 */
int tl_pool_stats_get(tl_pool_stats *total, tl_pool_stats *per_node, uint32_t cap);

/* What one loop did with the pool (the per-shard view). */
typedef struct tl_pool_loop_stats {
	int node;               /* node its submissions go to; -1 before first use */
	uint32_t in_flight;     /* counted against max_undelivered: accepted and
	                         * not yet delivered, and jobs cancelled before
	                         * they started that no worker has discarded yet */
	uint64_t submitted;     /* accepted submissions */
	uint64_t refused;       /* submissions refused for capacity (-ENOBUFS) */
	uint64_t completed;     /* terminal completions produced */
	uint64_t cancelled;     /* ... of which -ECANCELED */
	uint64_t queue_wait_ns; /* sum over jobs that ran: accepted -> started */
	uint64_t run_ns;        /* sum over jobs that ran: started -> finished */
} tl_pool_loop_stats;

/* Fill *out for loop (zeros and node -1 if it never used the pool). */
void tl_pool_loop_stats_get(const tl_loop *loop, tl_pool_loop_stats *out);

/* ---- File requests (contract section 6) ---- */

/*
 * Each request below runs the named system call on a bounded pool worker and
 * delivers one terminal TL_K_FS completion with aux = its TL_FS_* code and
 * result = the call's result (a count, 0, or a negative errno). u.pool.value
 * holds the same result as uint64_t, or (uint64_t)-ECANCELED if the request
 * never ran; a request cancelled while it ran reports -ECANCELED as result
 * and what the call returned in value (except open: see tl_fs_open).
 *
 * On a loop that runs on io_uring, every request but readdir runs instead as
 * the matching io_uring opcode when the kernel has it (probed once per
 * loop), with the same completion; it does not take a pool worker, and
 * tl_loop_destroy() waits for it like any native op. A native request
 * cancelled in the kernel reports in value what the kernel returned (often
 * -ECANCELED or -EINTR). A blocking open takes one bounded queue slot while
 * it runs natively (its fallback: io_uring tries opens with O_NONBLOCK first,
 * so a FIFO's write side answers -ENXIO where open(2) would wait for a
 * reader; such an open then runs on the pool). One difference remains: the
 * read side of a FIFO opened natively does not wait for a writer.
 *
 * Paths of up to TL_FS_INLINE_PATH bytes in total (both of rename's, NULs
 * included) are copied at submission; longer ones, and every buffer, stay the
 * caller's and must stay valid until the terminal completion (loop.h's rule).
 * Submission returns 0 and sets *op; -EINVAL (NULL or empty path, NULL
 * buffer, NULL op); -ENOBUFS (as tl_blocking); or the error of launching the
 * pool. Errors of the call itself come in the completion.
 */
#define TL_FS_INLINE_PATH 256

enum tl_fs_req {
	TL_FS_OPEN = 1,
	TL_FS_CLOSE,
	TL_FS_READ,
	TL_FS_WRITE,
	TL_FS_PREAD,
	TL_FS_PWRITE,
	TL_FS_STAT,
	TL_FS_FSTAT,
	TL_FS_FSYNC,
	TL_FS_UNLINK,
	TL_FS_RENAME,
	TL_FS_MKDIR,
	TL_FS_RMDIR,
	TL_FS_READDIR,
	TL_FS_REQ_COUNT_
};

/*
 * open(path, flags | O_CLOEXEC, mode). The descriptor is the result (and
 * value) of the Opened completion, and the caller owns it from then on
 * (close it with tl_fs_close or close(2)). Until that completion it is
 * invisible: a failed open has none, and a cancelled open, or one whose loop
 * was destroyed, never exposes it: the pool closes it (value is then
 * (uint64_t)-ECANCELED).
 */
int tl_fs_open(tl_loop *loop, const char *path, int flags, unsigned mode, uint64_t token,
	       tl_op *op);
/* close(fd). */
int tl_fs_close(tl_loop *loop, int fd, uint64_t token, tl_op *op);
/* One read(fd, buf, len) / write(fd, buf, len): result = bytes (a short
 * count is not an error). len > 0 for reads. */
int tl_fs_read(tl_loop *loop, int fd, void *buf, uint32_t len, uint64_t token, tl_op *op);
int tl_fs_write(tl_loop *loop, int fd, const void *buf, uint32_t len, uint64_t token, tl_op *op);
/* pread / pwrite at offset off. */
int tl_fs_pread(tl_loop *loop, int fd, void *buf, uint32_t len, uint64_t off, uint64_t token,
		tl_op *op);
int tl_fs_pwrite(tl_loop *loop, int fd, const void *buf, uint32_t len, uint64_t off,
		 uint64_t token, tl_op *op);
/* stat(path) / fstat(fd): result 0, and *out is written on the loop's thread
 * while the completion is produced, only when the result is 0 (never for a
 * cancelled request). */
int tl_fs_stat(tl_loop *loop, const char *path, struct stat *out, uint64_t token, tl_op *op);
int tl_fs_fstat(tl_loop *loop, int fd, struct stat *out, uint64_t token, tl_op *op);
/* fsync(fd). */
int tl_fs_fsync(tl_loop *loop, int fd, uint64_t token, tl_op *op);
/* unlink(path), rename(from, to), mkdir(path, mode), rmdir(path). */
int tl_fs_unlink(tl_loop *loop, const char *path, uint64_t token, tl_op *op);
int tl_fs_rename(tl_loop *loop, const char *from, const char *to, uint64_t token, tl_op *op);
int tl_fs_mkdir(tl_loop *loop, const char *path, unsigned mode, uint64_t token, tl_op *op);
int tl_fs_rmdir(tl_loop *loop, const char *path, uint64_t token, tl_op *op);

/* One directory entry ("." and ".." are left out). */
typedef struct tl_dirent {
	char name[256];
	uint8_t type; /* DT_REG, DT_DIR, ... as getdents reports (DT_UNKNOWN possible) */
} tl_dirent;

/*
 * Read the entries of directory path into out[0..cap) (cap >= 1), in the
 * order the file system gives them: result = entries stored, value = entries
 * the directory has (more than cap: the listing was cut).
 */
int tl_fs_readdir(tl_loop *loop, const char *path, tl_dirent *out, uint32_t cap,
		  uint64_t token, tl_op *op);

/* ---- Name lookups ---- */

/* Declared here too: strict ISO modes hide it in <netdb.h>. */
struct addrinfo;

/* At most this many addresses are delivered per lookup. */
#define TL_RESOLVE_MAX 8

/*
 * getaddrinfo(host, service, hints) on a bounded worker. host (<= 255 bytes)
 * and service (<= 31 bytes) are copied; at least one must be non-NULL. From
 * hints (NULL: AF_UNSPEC, SOCK_STREAM, no flags) only ai_family, ai_socktype,
 * ai_protocol and ai_flags are used. The terminal TL_K_RESOLVE completion
 * has result = addresses written to out[0..min(cap, TL_RESOLVE_MAX)), value =
 * addresses found (up to TL_RESOLVE_MAX), ptr = out. out is written on the
 * loop's thread while the completion is produced, and only on success. No
 * match is -ENOENT (EAI_NONAME, EAI_NODATA, EAI_ADDRFAMILY, or no IPv4/IPv6
 * address); the other
 * failures: EAI_AGAIN -EAGAIN, EAI_MEMORY -ENOMEM, EAI_SYSTEM the errno,
 * EAI_FAMILY / EAI_SOCKTYPE / EAI_SERVICE / EAI_BADFLAGS -EINVAL, others
 * -EIO. Submission returns 0 and sets *op, -EINVAL (names missing or too
 * long, out NULL, cap 0, op NULL) or -ENOBUFS as tl_blocking.
 */
int tl_resolve(tl_loop *loop, const char *host, const char *service,
	       const struct addrinfo *hints, tl_addr *out, uint32_t cap, uint64_t token,
	       tl_op *op);

#ifdef __cplusplus
}
#endif
#endif
