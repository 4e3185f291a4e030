/* turnloop/shard.h: the sharded runtime, starting with its shard plan (contract section 9). */
#ifndef TURNLOOP_SHARD_H
#define TURNLOOP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Plan ---- */

/*
 * A plan says which PU (hardware thread) each shard runs on. It is computed
 * once at setup from the hwloc topology and then only read; every function
 * below returns 0 (or a count) or a negative errno.
 *
 * Numbering: "cpu" (pu_os_index) and "numa" are the operating system's
 * numbers, the ones taskset, numactl and sched_getcpu() use. "core" and
 * "package" are hwloc logical indexes (dense, in topology order), because
 * the OS core id repeats across packages and so names nothing on its own.
 */

/* Largest shard count a request may ask for. */
#define TL_PLAN_MAX_SHARDS 65536u
/* CPU numbers in a CPU list must be below this. */
#define TL_PLAN_MAX_CPU 65536u

/*
 * What the program wants. All-zero is the default: one shard per physical
 * core of the allowed cpuset, SMT siblings left out.
 */
typedef struct tl_plan_request {
	const char *cpus;   /* CPU list like "0-3,6" to narrow to, or NULL (all allowed) */
	uint32_t shards;    /* shard count; 0 = one per core (or per PU with smt) */
	int smt;            /* 1: use every allowed PU of a core, not just the first */
	int overcommit;     /* 1: more shards than usable PUs wrap around the PUs */
	/*
	 * A CPU list that further restricts the allowed set, as if it were the
	 * process's cgroup cpuset; NULL = no extra restriction. It is
	 * intersected with what the machine (or synthetic topology) allows, so
	 * it may name CPUs that do not exist; an empty intersection is -EINVAL.
	 * Tests use it to model a cpuset with holes on a synthetic topology;
	 * tlshard uses it to plan for a set it is about to apply.
	 */
	const char *allowed;
} tl_plan_request;

/* Where one shard runs. numa_node and package are -1 when the topology has
 * no such object above the PU. */
typedef struct tl_shard_place {
	uint32_t shard;   /* index of this shard, 0..count-1 */
	int pu_os_index;  /* OS CPU number */
	int core;         /* core, hwloc logical index (the PU's own index if no core level) */
	int numa_node;    /* NUMA node, OS index (first node local to the PU) */
	int package;      /* package (socket), hwloc logical index */
} tl_shard_place;

typedef struct tl_plan {
	uint32_t count;          /* number of shards, >= 1 in a computed plan */
	uint32_t numa_nodes;     /* distinct NUMA nodes the shards are on */
	tl_shard_place *shards;  /* count entries, owned by the plan */
	void *topo;              /* the hwloc topology, owned by the plan; opaque */
} tl_plan;

/*
 * Compute a plan for req (NULL means all defaults) and store it in *out.
 *
 * synthetic NULL: the real machine, restricted to what this process may use:
 * hwloc leaves out PUs the cgroup cpuset forbids, and the plan keeps only
 * PUs in the process's CPU binding (sched_setaffinity, taskset).
 * Otherwise a hwloc synthetic description ("pack:2 numa:2 core:4 pu:2") or,
 * when the string ends in ".xml", the path of a hwloc XML export. Plans of
 * synthetic or XML topologies are for planning only: they cannot bind.
 *
 * Order: shards of one NUMA node are adjacent, nodes in hwloc order, cores in
 * hwloc order within a node, and with smt the PUs of one core adjacent.
 * req->cpus narrows the usable PUs (still one per core unless smt, taking
 * the first listed-and-allowed PU of each core); req->shards takes a prefix
 * of that order, so whole NUMA nodes are used before the next one starts.
 * A shard count above the number of usable PUs (one per core without smt)
 * is -EINVAL unless overcommit, which assigns shard i to usable PU i mod n.
 * The environment is not read here; see tl_plan_from_env().
 *
 * Ownership: on success *out holds memory and the topology; release both
 * with tl_plan_free(). On failure *out is zeroed and owns nothing.
 * Returns 0; -EINVAL for out NULL, an empty or unparsable CPU list, a CPU
 * in req->cpus that is not allowed, an empty allowed set, shards above
 * TL_PLAN_MAX_SHARDS, too many shards without overcommit, or a synthetic
 * description hwloc rejects; -ENOMEM; or the negated errno hwloc reports
 * when the topology cannot be loaded (e.g. -ENOENT for a missing XML file).
 */
int tl_plan_compute(tl_plan *out, const tl_plan_request *req, const char *synthetic);

/* Release what tl_plan_compute() stored in *p and zero it. Safe on a zeroed
 * plan, on a plan already freed, and with p NULL. Shard threads must have
 * stopped using p (tl_plan_bind_thread) before it is freed. */
void tl_plan_free(tl_plan *p);

/*
 * Fill the fields of *req that the program left unset from the environment
 * (contract 9.8): TL_CPUS (a CPU list) when req->cpus is NULL, TL_SHARDS
 * (decimal 0..TL_PLAN_MAX_SHARDS, 0 = one per core) when req->shards is 0,
 * TL_SMT ("0" or "1") when req->smt is 0. A field the program set wins and
 * the variable is then not even parsed. Because 0 means "unset", a program
 * cannot force smt off against TL_SMT=1. An empty variable counts as unset.
 *
 * Ownership: req->cpus may be left pointing into the environment (getenv),
 * valid until TL_CPUS is changed; compute the plan before changing it.
 * Returns 0, or -EINVAL (req NULL or a bad value, which includes a TL_CPUS
 * that is not a valid CPU list); on -EINVAL *req is unchanged.
 */
int tl_plan_from_env(tl_plan_request *req);

/*
 * Say in one line why tl_plan_compute(&plan, req, synthetic) fails: which
 * CPU of req->cpus (or TL_CPUS, once tl_plan_from_env filled it in) is
 * wrong and why (no such CPU on the machine; outside the cgroup cpuset;
 * outside the CPU affinity of the process, as taskset sets it; outside
 * req->allowed), or how many shards were asked against how many usable cores
 * or PUs, or what the topology could not load. The line goes to buf of len
 * bytes, NUL-terminated and cut to fit, with no trailing newline.
 * Returns the reason's length, 0 when the request can be met (buf then
 * holds ""), or -EINVAL (buf NULL or len 0).
 */
int tl_plan_explain(const tl_plan_request *req, const char *synthetic, char *buf, size_t len);

/*
 * Print the plan, one line per shard:
 *   "shard 0: cpu 2 core 1 numa 0 package 0\n"
 * into buf of len bytes, NUL-terminated. Returns the number of bytes written,
 * not counting the NUL; -EINVAL if p or buf is NULL; -ENOBUFS if len cannot
 * hold all of it and the NUL (len 0 included; buf then holds an empty string
 * when len > 0, never a truncated plan).
 */
int tl_plan_format(const tl_plan *p, char *buf, size_t len);

/*
 * Parse a CPU list ("0-3,6,8-9": decimal CPUs and inclusive ranges, comma
 * separated, no spaces) into a bit mask: CPU n is bit n % 64 of
 * mask_words[n / 64]. The nwords words are cleared first. Returns 0, or
 * -EINVAL for s or mask_words NULL, nwords 0, an empty string, an empty
 * item, anything but digits, '-' and ',', a reversed range ("3-1"), or a CPU
 * at or beyond nwords * 64 or TL_PLAN_MAX_CPU; on -EINVAL all words are 0.
 */
int tl_cpulist_parse(const char *s, uint64_t *mask_words, size_t nwords);

/*
 * Bind the calling thread to shard's PU and its memory allocations to that
 * PU's NUMA node (hwloc thread CPU binding and HWLOC_MEMBIND_BIND thread
 * memory binding). Different shard threads may call it concurrently on the
 * same plan. On a single-node machine a memory binding refused with ENOSYS
 * or EXDEV is not an error (there is nothing to choose there).
 * Returns 0; -EINVAL (p NULL, not computed, or shard >= count); -ENOTSUP
 * for a plan of a synthetic or XML topology; or the negated errno of the
 * failed binding. If the memory binding fails the CPU binding stays.
 */
int tl_plan_bind_thread(const tl_plan *p, uint32_t shard);

/* ---- Runtime ---- */

/*
 * The sharded runtime (contract 9.2-9.7): one thread per shard of a plan,
 * pinned to its PU with its memory bound to its NUMA node and its own
 * jemalloc arena, each running one loop that the runtime drives:
 *
 *     for (;;) {
 *         tl_turn(loop, ...);              // no user code inside
 *         handler(s, c) for each completion;
 *         run mesh messages that arrived;   // posts, submit_to functions, results
 *         on_pass(s, arg) if set;           // "pollers": busy user work
 *         publish staged mesh messages, wake parked targets once each;
 *         publish live stats (at most every stats_period_ns).
 *     }
 *
 * User code runs only in the callbacks, between turns, on the shard's thread.
 * Everything tl_shard_* below is called from the shard's own thread (from
 * inside a callback) unless it says otherwise; tl_shard_loop(s) is an ordinary
 * loop that the callbacks use for sockets and timers.
 *
 * Threading of the runtime object: tl_runtime_new/start/run/destroy from one
 * controlling thread; tl_runtime_stop from anywhere, including a signal
 * handler.
 */

typedef struct tl_runtime tl_runtime;
typedef struct tl_shard tl_shard;

/* Handles every completion of a shard whose token names no handler. */
typedef void (*tl_shard_handler)(tl_shard *s, const tl_completion *c);
/* A function that runs on a shard (on_start, submit_to). */
typedef int (*tl_shard_start_fn)(tl_shard *s, void *arg);
typedef int64_t (*tl_mesh_fn)(tl_shard *s, void *arg);

/* Named handlers: up to TL_RT_HANDLERS - 1 extra handlers, numbered 1..15. */
#define TL_RT_HANDLERS 16u

/*
 * A token that names handler h (1..15 of tl_runtime_config.handlers) and
 * carries 56 bits of data (enough for a user-space pointer on x86-64 and
 * arm64). The runtime hands a completion whose token's top byte is h, with
 * handlers[h] set, to that handler instead of on_completion. Tokens whose top
 * byte is 0, or names an unset handler, go to on_completion.
 */
static inline uint64_t tl_token(unsigned h, uint64_t data)
{
	return ((uint64_t)(h & 0xffu) << 56) | (data & UINT64_C(0x00ffffffffffffff));
}
/* The 56 data bits of a tl_token(). */
static inline uint64_t tl_token_data(uint64_t token)
{
	return token & UINT64_C(0x00ffffffffffffff);
}
/* The handler number of a token (0: none). */
static inline unsigned tl_token_handler(uint64_t token)
{
	return (unsigned)(token >> 56);
}

/*
 * Mesh completions (kind TL_K_MESH), delivered to the target's handler:
 *  - a tl_shard_post() message: token and u.mesh.payload as posted, result 0,
 *    u.mesh.arg NULL, aux = the sending shard's id;
 *  - the result of a tl_shard_submit_to() on the caller: token as submitted,
 *    result = what fn returned, u.mesh.arg = fn's arg (u.mesh.payload 0),
 *    aux = the shard fn ran on | TL_MESH_RESULT.
 *  - a connection tl_shard_migrate() moved here: token and u.mesh.payload
 *    as given, result 0, u.mesh.conn = its new handle on this shard's loop,
 *    aux = the sending shard's id | TL_MESH_MIGRATED;
 *  - the result of a tl_shard_migrate() on the caller: token and
 *    u.mesh.payload as given, result 0 (adopted there) or the target's
 *    tl_adopt error, aux = the target shard | TL_MESH_RESULT |
 *    TL_MESH_MIGRATED.
 * Room completions (kind TL_K_ROOM, tl_shard_wait_room): token, result 0,
 * aux = the target shard. All are terminal (TL_F_TERMINAL), op and handle
 * are TL_OP_NONE / TL_HANDLE_NONE, u.mesh.conn is TL_HANDLE_NONE unless
 * said otherwise.
 */
#define TL_MESH_RESULT 0x80000000u
#define TL_MESH_MIGRATED 0x40000000u
#define TL_MESH_SHARD(aux) ((uint32_t)(aux) & 0xffffu)

/*
 * Runtime configuration; tl_runtime_config_init() fills the defaults in the
 * right-hand column. tl_runtime_new() validates every field (-EINVAL).
 */
typedef struct tl_runtime_config {
	/* Which shards. Fields left 0/NULL are filled from TL_CPUS, TL_SHARDS
	 * and TL_SMT (tl_plan_from_env) unless no_env.          all 0 */
	tl_plan_request plan;
	int no_env;                   /* 1: ignore the environment         0 */
	int bind;                     /* pin threads, bind memory            1 */
	tl_config loop;               /* template of every shard's loop  tl_config_init */
	uint32_t mesh_capacity;       /* messages per ring (2^k, <= 2^20)    1024 */
	uint32_t mesh_budget;         /* messages taken per ring per pass    256, <= 65536 */
	uint32_t mesh_inflight;       /* submit_to in flight per pair        64, <= 65536 */
	uint32_t batch;               /* completions per turn                256, <= 65536 */
	uint64_t stall_ns;            /* a pass slower than this is a stall  25 ms; 0 = off */
	uint64_t drain_ns;            /* drain bound before handles are destroyed  5 s */
	uint64_t grace_ns;            /* a graceful drain (tl_runtime_drain, SIGTERM)
	                               * lets connections finish this long    30 s */
	uint64_t stats_period_ns;     /* a busy shard publishes its stats once per
	                               * period, a shard about to park first   1 ms, <= 1 s */
	int stats;                    /* publish the live stats region (see
	                               * "Live stats" below)                  1 */
	uint32_t stats_values;        /* value slots per shard for the program's
	                               * own counters and gauges   64, 1..TL_STATS_VALUES_MAX */
	int signals;                  /* SIGINT/SIGTERM drain the runtime (a second
	                               * one stops it at once)                 1 */
	tl_shard_handler on_completion;            /* NULL: completions are dropped */
	tl_shard_handler handlers[TL_RT_HANDLERS]; /* [0] unused; see tl_token() */
	/* On each shard after its loop exists, before any completion: a
	 * negative return stops the whole runtime with that error. */
	tl_shard_start_fn on_start;
	/* On each shard when a stop begins, before the runtime closes the
	 * handles still open (so a program can close its own with its own
	 * tokens and say goodbye to peers). */
	void (*on_stop)(tl_shard *s, void *arg);
	/* On each shard when a graceful drain begins, after the runtime closed
	 * the shard's listeners: the program lets its connections finish (or
	 * ends idle ones). The shard leaves the grace period when its loop is
	 * no longer alive (tl_alive: no referenced socket or pending op; the
	 * program can tl_set_ref(h, 0) what it does not want waited for) or
	 * after grace_ns; then the stop of tl_runtime_stop follows. May be
	 * NULL. */
	void (*on_drain)(tl_shard *s, void *arg);
	/* On each shard once per pass; return nonzero while it has more work
	 * (the next turn then does not block). */
	int (*on_pass)(tl_shard *s, void *arg);
	void *arg;                    /* passed to on_start/on_stop/on_drain/on_pass */
} tl_runtime_config;

/* Fill *cfg with the defaults above. */
void tl_runtime_config_init(tl_runtime_config *cfg);

/*
 * Create a runtime: computes the plan (from cfg->plan and, unless no_env, the
 * environment), allocates every shard's mesh rings and, with cfg->stats, the
 * live stats region (see "Live stats" below). No thread starts.
 * A region that cannot be published does not stop the runtime: it runs
 * without one, one line on stderr says why (for instance a per-user
 * directory that another user planted), and tl_runtime_stats_error() keeps
 * the reason.
 * Returns 0 and sets *out; -EINVAL (bad config or plan request, or a bad
 * TL_CPUS/TL_SHARDS/TL_SMT; tl_plan_explain() says which part), -EBUSY (this
 * process already publishes a stats region), or -ENOMEM. A reason is printed
 * nowhere; tl_runtime_strerror() is not available without a runtime.
 */
int tl_runtime_new(tl_runtime **out, const tl_runtime_config *cfg);

/* Why the runtime publishes no stats region although cfg.stats asked for
 * one (one line, owned by the runtime); "" when it publishes one or stats
 * are off by configuration. */
const char *tl_runtime_stats_error(const tl_runtime *rt);

/*
 * The program's own stats (contract 9.7): families of per-shard values
 * declared before tl_runtime_start(), each `rows` values wide, published
 * with the shard's other counters and shown by tlshard stats after the
 * runtime's own. A counter only grows (tlshard shows its rate); a gauge is
 * set, raised and lowered (tlshard shows its value). Every shard has its own
 * copy of every value, written only by that shard's thread, so an update
 * costs one add to shard-local memory and no atomic operation.
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
 * rows >= 1. Only before tl_runtime_start(), from the controlling thread.
 * Declaring the same name again with the same kind and rows returns the
 * same id.
 * Returns the id of row 0 (>= 0); -EINVAL (rt NULL, bad name, kind or rows,
 * a clash with another family, or already started); -ENOBUFS (fewer than
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
 * shows the row number). The label is shared by every shard. Any thread, at
 * any time between tl_runtime_new() and tl_runtime_destroy(); readers see the
 * old or the new label, never a mix. Returns 0, or -EINVAL (rt NULL, id not
 * a declared row, bad label).
 */
int tl_runtime_stat_label(tl_runtime *rt, int id, const char *label);

/*
 * Start every shard thread and wait until each is set up (bound, arena,
 * loop). If any shard fails to set up, the others are torn down without
 * running any user code and the error is returned (the reason is in
 * tl_runtime_strerror). Otherwise each shard runs cfg.on_start and starts
 * turning; with cfg.signals, SIGINT and SIGTERM now stop the runtime (the
 * shard threads block them; the previous actions come back at destroy; only
 * one runtime of a process at a time takes the signals, a second one runs
 * without them).
 * Returns 0, -EINVAL (already started), or the first shard's error.
 */
int tl_runtime_start(tl_runtime *rt);

/*
 * Block until every shard has stopped and drained (starting the runtime
 * first if needed). Returns 0 after a requested stop, or the first error
 * that stopped it (an on_start failure, a turn error), negative; the reason
 * is in tl_runtime_strerror(). A second call returns the same value at once.
 */
int tl_runtime_run(tl_runtime *rt);

/*
 * Stop at once (the hard stop): each shard calls on_stop, closes its remaining
 * handles (their Closed completions carry TL_RT_CLOSE_TOKEN),
 * delivers their completions and the mesh messages already sent, then its
 * thread exits (bounded by drain_ns, after which leftover operations are
 * cancelled by tl_loop_destroy). Any thread; async-signal-safe (atomic
 * stores and at most one eventfd write per shard). Idempotent.
 */
void tl_runtime_stop(tl_runtime *rt);

/*
 * Drain gracefully (contract 9.6): every shard closes its listeners (new
 * connections are refused: another process or shard takes them), calls
 * on_drain, and lets its connections finish for up to grace_ns, until its
 * loop is no longer alive; then it stops as tl_runtime_stop says. A
 * tl_runtime_stop() during the grace period cuts it short. Any thread;
 * async-signal-safe; idempotent. With cfg.signals the first SIGINT or
 * SIGTERM drains and a second one stops.
 */
void tl_runtime_drain(tl_runtime *rt);

/* The token of the Closed completions of handles the runtime closes when a
 * shard stops (those the program had not closed itself); its handler byte
 * is 0, so they go to on_completion. */
#define TL_RT_CLOSE_TOKEN UINT64_C(0x00c105edc105ed00)

/*
 * Stop (if running), join the threads, free the rings and the plan, unlink the
 * stats region and restore the signal actions. NULL is a no-op.
 */
void tl_runtime_destroy(tl_runtime *rt);

/* Number of shards in the runtime's plan. */
uint32_t tl_runtime_shards(const tl_runtime *rt);
/* The plan the runtime runs (owned by the runtime). */
const tl_plan *tl_runtime_plan(const tl_runtime *rt);
/* Why the runtime stopped or failed to start ("" when it did not fail). The
 * string belongs to the runtime. */
const char *tl_runtime_strerror(const tl_runtime *rt);
/* 1 when shard threads use their own jemalloc arenas; 0 when that is off
 * (build option, sanitizer build, or jemalloc is not the process allocator:
 * then *why, if why is not NULL, says which). Meaningful after start. */
int tl_runtime_arenas(const tl_runtime *rt, const char **why);

/* The shard's loop (use it from the shard's thread only). */
tl_loop *tl_shard_loop(tl_shard *s);
/* The shard's id, 0..count-1 (its index in the plan). */
uint32_t tl_shard_id(const tl_shard *s);
/* The number of shards. */
uint32_t tl_shard_count(const tl_shard *s);
/* The runtime the shard belongs to. */
tl_runtime *tl_shard_runtime(tl_shard *s);
/* The runtime config's arg (what on_start/on_stop/on_pass receive), for
 * handlers. */
void *tl_shard_arg(const tl_shard *s);
/* A pointer of the program's own per shard (NULL until set); any use. */
void tl_shard_set_data(tl_shard *s, void *data);
void *tl_shard_data(const tl_shard *s);
/* The shard's place in the plan (cpu, core, NUMA node). */
const tl_shard_place *tl_shard_place_of(const tl_shard *s);

/*
 * Send (token, payload) to shard target (itself included): delivered there as
 * a TL_K_MESH completion (see above), in order per pair of shards, exactly
 * once. The message is published and a parked target woken when the current
 * pass ends (or earlier, every 32 messages), never from inside this call.
 * Returns 0; -EINVAL (target out of range); -ENOBUFS (the ring to target is
 * full, or replies to target are backed up: nothing was queued, see
 * tl_shard_wait_room); -EPIPE (the mesh closed: the runtime is stopping).
 * Allocates nothing.
 */
int tl_shard_post(tl_shard *s, uint32_t target, uint64_t token, uint64_t payload);

/*
 * Run fn(target_shard, arg) on shard target between its turns, and deliver
 * fn's return value to this shard as a TL_K_MESH completion with token and
 * aux = target | TL_MESH_RESULT. At most mesh_inflight calls per pair are in
 * flight. Same returns as tl_shard_post, -EINVAL also for fn NULL, and
 * -ENOBUFS also when mesh_inflight calls to target await their result. If
 * the runtime stops before the result comes back, fn still runs but its
 * result may be dropped (the stats count it).
 */
int tl_shard_submit_to(tl_shard *s, uint32_t target, tl_mesh_fn fn, void *arg, uint64_t token);

/*
 * Move the connection h of this shard's loop to shard target (contract 4.6;
 * docs/SOCKETS.md, "Handing sockets over"): h is detached (tl_detach), its
 * descriptor travels over the mesh, and target adopts it (tl_adopt) between
 * its turns and hands its program a TL_K_MESH completion naming the new
 * handle (see "Mesh completions" above: u.mesh.conn, aux |
 * TL_MESH_MIGRATED) with token and payload; token names the handler on
 * target as for tl_shard_post, and on this shard for the result. This
 * shard then gets the result (0, or the error of tl_adopt there, in which
 * case target has closed the descriptor: it is never leaked, but the
 * connection is gone). Bytes not read yet stay in the kernel's socket and
 * are read by the new owner, and it succeeds only once the program has
 * been handed every completion of h, so a stream moves without losing a
 * byte.
 *
 * Returns 0 (h is stale from now on); -EAGAIN while completions of h are
 * still to reach the program: later in the batch of this pass that it is
 * being handed (nothing is done then: call again from the handler of the
 * last of them), or queued in the loop, or owed by operations still
 * pending (as tl_detach: those operations are cancelled now). Stop h's
 * reads, let its writes finish, and call again from the handler of their
 * terminals. -ENOENT, -EINVAL (target out of range, h a timer or
 * closing), -ENOTSUP as tl_detach; -ENOBUFS and -EPIPE as
 * tl_shard_submit_to (it takes one of the mesh_inflight credits to target
 * until the result is back). On any error h stays where it is, nothing was
 * sent. If the runtime stops before target ran it, target still adopts and
 * then closes the connection with its other handles; the result may be
 * dropped (as for tl_shard_submit_to). Allocates nothing.
 */
int tl_shard_migrate(tl_shard *s, tl_handle h, uint32_t target, uint64_t payload,
		     uint64_t token);

/*
 * tl_shard_post() to every shard, this one included, all or nothing.
 * Returns the number of shards posted to, or -ENOBUFS (some ring is full:
 * nothing was sent), -EPIPE.
 */
int tl_shard_broadcast(tl_shard *s, uint64_t token, uint64_t payload);

/*
 * tl_shard_submit_to() on every shard, this one included, all or nothing:
 * one result completion per shard. Returns the count or the first refusal's
 * code (then nothing was sent).
 */
int tl_shard_submit_all(tl_shard *s, tl_mesh_fn fn, void *arg, uint64_t token);

/*
 * After a refusal with -ENOBUFS: ask for one TL_K_ROOM completion (token,
 * aux = target) once the ring to target can take a message again (it may
 * come at the next pass if it already can). One request per target at a
 * time. Returns 0, -EINVAL (target out of range), -ENOBUFS (a request for
 * target is already pending), -EPIPE (mesh closed).
 */
int tl_shard_wait_room(tl_shard *s, uint32_t target, uint64_t token);

/* Add delta to this shard's copy of counter row id (tl_runtime_stat).
 * Published with the shard's other counters. 0, or -EINVAL when id is not
 * a counter row. Allocates nothing. */
int tl_shard_counter_add(tl_shard *s, int id, uint64_t delta);

/* Set this shard's copy of gauge row id to value. 0, or -EINVAL when id is
 * not a gauge row. */
int tl_shard_gauge_set(tl_shard *s, int id, int64_t value);

/* Add delta (negative: subtract) to this shard's copy of gauge row id.
 * 0, or -EINVAL when id is not a gauge row. */
int tl_shard_gauge_add(tl_shard *s, int id, int64_t delta);

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
#define TL_STATS_VERSION 2u
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
	uint32_t uid;            /* its effective user */
	uint64_t start_time;     /* its start, clock ticks after boot (field 22
	                          * of /proc/<pid>/stat) */
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
	uint64_t mesh_refused;            /* posts and submits refused with -ENOBUFS */
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
 * process's exit. On failure err (if not NULL) gets a one-line reason, e.g.
 * "pid 123: layout version 7 is not known to this reader (knows 2)".
 * Returns 0 and *out; -EINVAL (bad arguments); -ESRCH (no such process, a
 * zombie, or the region was written by an earlier process with this pid);
 * -ENOENT (no region: not a turnloop process, or its stats are off);
 * -EACCES (another user's: this reader may not look); -EPERM (the directory
 * or the region is not what the runtime makes: wrong owner, mode or type,
 * so not trusted); -EPROTO (not a stats region, an unknown version or an
 * inconsistent header); -ENOMEM; or the OS error of open/read.
 */
int tl_stats_open(tl_stats_reader **out, int pid, char *err, size_t errlen);

/*
 * Open the region file at path with the layout checks of tl_stats_open but
 * none of its process or ownership checks: for tests, fuzzing and copies of
 * a region. Same returns, never -ESRCH.
 */
int tl_stats_open_path(tl_stats_reader **out, const char *path, char *err, size_t errlen);

/*
 * Reread and check the header. For a reader opened by pid, first check that
 * the process still lives: -ESRCH once it has exited, -ENOENT once its
 * runtime removed the region (tl_runtime_destroy). Otherwise 0 or the codes
 * of tl_stats_open.
 */
int tl_stats_info_get(tl_stats_reader *r, tl_stats_info *out);

/* Copy family idx (0..info.families-1) into *out. 0; -EINVAL (bad
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
int tl_stats_read(tl_stats_reader *r, uint32_t shard, tl_stats_shard *out, uint64_t *values,
		  uint32_t nvalues);

/* Close the reader. NULL is a no-op. */
void tl_stats_close(tl_stats_reader *r);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_SHARD_H */
