/* turnloop/runtime.h: the sharded runtime: a pinned thread and loop per shard of a plan, its lifecycle, and the mesh between shards (contract 9.2-9.6). */
#ifndef TURNLOOP_RUNTIME_H
#define TURNLOOP_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop/loop.h"
#include "turnloop/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 *         run tasks, by their groups' shares; // turnloop/sched.h
 *         publish staged mesh messages, wake parked targets once each;
 *         publish live stats (at most every stats_period_ns).
 *     }
 *
 * User code runs only in the callbacks, between turns, on the shard's thread.
 * Everything tl_shard_* below is called from the shard's own thread (from
 * inside a callback) unless it says otherwise; tl_shard_loop(s) is an ordinary
 * loop that the callbacks use for sockets and timers.
 *
 * Lifecycle: tl_runtime_new (nothing runs yet), tl_runtime_launch (the
 * threads start), tl_runtime_run (wait for the end), tl_runtime_drain or
 * tl_runtime_stop (ask for the end), tl_runtime_destroy. new, launch, run
 * and destroy from one controlling thread; drain and stop from anywhere,
 * including a signal handler. The program's own stats and the live stats
 * region are in turnloop/stats.h.
 */

typedef struct tl_runtime tl_runtime;
typedef struct tl_shard tl_shard;

/* Handles every completion of a shard whose token names no handler. */
typedef void (*tl_shard_handler)(tl_shard *s, const tl_completion *c);
/* What runs on each shard as the runtime launches (cfg.on_launch): 0 or a
 * negative errno, which stops the runtime. */
typedef int (*tl_shard_launch_fn)(tl_shard *s, void *arg);
/* A function that runs on another shard (tl_shard_submit_to): its return
 * value comes back to the caller as a mesh completion's result. */
typedef int64_t (*tl_mesh_fn)(tl_shard *s, void *arg);

/* Named handlers: up to TL_RT_HANDLERS - 1 extra handlers, numbered 1..15. */
#define TL_RT_HANDLERS 16u

/*
 * A token that names handler h (1..15 of tl_runtime_config.handlers) and
 * carries 56 bits of data (enough for a user-space pointer on x86-64 and
 * arm64). The runtime hands a completion whose token's top byte is h, with
 * handlers[h] set, to that handler instead of on_completion. Tokens whose top
 * byte is 0, or names an unset handler, go to on_completion. Returns the
 * token (no failure: h is cut to 8 bits, data to 56).
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
 *  - the end of a tl_shard_gather() on the caller: see "Gathers" below
 *    (aux = the caller's id | TL_MESH_RESULT | TL_MESH_GATHER).
 *  - the end of a task (turnloop/sched.h) on its shard: aux = the shard's
 *    id | TL_MESH_RESULT | TL_MESH_TASK.
 *  - the result of a batch (tl_shard_batch_add) on the caller: see
 *    "Batched calls" below (aux = the target | TL_MESH_RESULT |
 *    TL_MESH_BATCH).
 * Room completions (kind TL_K_ROOM, tl_shard_wait_room): token, result 0,
 * aux = the target shard. All are terminal (TL_F_TERMINAL), op and handle
 * are TL_OP_NONE / TL_HANDLE_NONE, data is NULL, u.mesh.conn is
 * TL_HANDLE_NONE unless said otherwise.
 */
#define TL_MESH_RESULT 0x80000000u
#define TL_MESH_MIGRATED 0x40000000u
#define TL_MESH_GATHER 0x20000000u
#define TL_MESH_GATE 0x10000000u
#define TL_MESH_TASK 0x08000000u
#define TL_MESH_BATCH 0x04000000u
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
	uint32_t mesh_inflight;       /* submit_to in flight per pair      1024, <= 65536
	                               * (docs/MESH.md, "Sizing the mesh") */
	/* A shard with calls awaiting their results, or that took mesh
	 * messages in its last pass, polls its rings and its loop without
	 * blocking for up to this long before it parks, so that a reply or
	 * the next message that comes meanwhile costs no wake-up on either
	 * side (docs/MESH.md, "Polling before parking"). A shard with nothing
	 * in flight, or on a CPU another shard shares, parks at once. The
	 * price: up to this much CPU each time such a shard would park.
	 * 0: park at once.                                   20 us, <= 1 ms */
	uint64_t mesh_spin_ns;
	uint32_t batch;               /* completions per turn                256, <= 65536 */
	uint64_t stall_ns;            /* a pass slower than this is a stall  25 ms; 0 = off */
	uint64_t drain_ns;            /* drain bound before handles are destroyed  5 s */
	uint64_t grace_ns;            /* a graceful drain (tl_runtime_drain, SIGTERM)
	                               * lets connections finish this long    30 s */
	uint64_t stats_period_ns;     /* a busy shard publishes its stats once per
	                               * period, a shard about to park first   1 ms, <= 1 s */
	int stats;                    /* publish the live stats region
	                               * (turnloop/stats.h)                   1 */
	uint32_t stats_values;        /* value slots per shard for the program's
	                               * own counters and gauges   64, 1..TL_STATS_VALUES_MAX */
	int signals;                  /* SIGINT/SIGTERM drain the runtime (a second
	                               * one stops it at once)                 1 */
	tl_shard_handler on_completion;            /* NULL: completions are dropped */
	tl_shard_handler handlers[TL_RT_HANDLERS]; /* [0] unused; see tl_token() */
	/* On each shard as the runtime launches, after its loop exists, before
	 * any completion: a negative return stops the whole runtime with that
	 * error. on_start is its old name (deprecated, the same field). */
	union {
		tl_shard_launch_fn on_launch;
		tl_shard_launch_fn on_start TL_DEPRECATED("renamed on_launch");
	};
	/* On each shard when a stop begins, before the runtime closes the
	 * handles still open (so a program can close its own with its own
	 * tokens and say goodbye to peers). */
	void (*on_stop)(tl_shard *s, void *arg);
	/* On each shard when a graceful drain begins, after the runtime closed
	 * the shard's listeners: the program lets its connections finish (or
	 * ends idle ones). The shard leaves the grace period when its loop is
	 * no longer alive (tl_alive: no referenced socket or pending op; the
	 * program can tl_set_ref(h, 0) what it does not want waited for) and
	 * no task is left (turnloop/sched.h), or after grace_ns; then the
	 * stop of tl_runtime_stop follows. May be NULL. */
	void (*on_drain)(tl_shard *s, void *arg);
	/* On each shard once per pass; return nonzero while it has more work
	 * (the next turn then does not block). */
	int (*on_pass)(tl_shard *s, void *arg);
	void *arg;                    /* passed to on_launch/on_stop/on_drain/on_pass */
	/* Cooperative scheduling (turnloop/sched.h). */
	uint32_t sched_tasks;         /* task records per shard           64, <= 65536 */
	uint32_t sched_shares;        /* shares of the handlers' group
	                               * (TL_SCHED_MAIN)               1000, 1..10000 */
	uint64_t sched_quantum_ns;    /* the most task time per pass
	                               * (and so a request's wait)      100 us, 1 us..1 s */
} tl_runtime_config;

/* Fill *cfg with the defaults above. */
void tl_runtime_config_init(tl_runtime_config *cfg);

/*
 * The runtime's command-line options, one spelling for every program:
 *   --shards N          plan.shards, 1..TL_PLAN_MAX_SHARDS (as TL_SHARDS)
 *   --cpus LIST         plan.cpus, a CPU list ("0-3,6"; kept, not copied)
 *   --mesh-inflight N   mesh_inflight, 1..65536
 *   --mesh-spin-us N    mesh_spin_ns, 0..1000 us
 *   --nap-us N          loop.nap_ns, 0..1000 us
 * Set the one named name on *cfg from value (the next argument; a number
 * is digits only). Returns 1 (name is one of them; set), 0 (it is not one
 * of them: nothing changed, the program's own), or -EINVAL (one of them
 * with a value that is NULL, empty, not digits only or out of range:
 * nothing changed; cfg or name NULL). A program parses its own options
 * and hands the rest here, so every tool says them the same way.
 */
int tl_runtime_config_option(tl_runtime_config *cfg, const char *name, const char *value);

/* A program's own option, for tl_runtime_config_args: a table of them ends
 * with a NULL name. */
typedef struct tl_runtime_option {
	const char *name;   /* as typed: "--port" */
	int kind;           /* TL_OPTION_FLAG, TL_OPTION_U32 or TL_OPTION_STR */
	void *dst;          /* where the value goes: int, uint32_t, const char * */
	uint32_t min, max;  /* TL_OPTION_U32: the range, inclusive */
} tl_runtime_option;

enum {
	TL_OPTION_FLAG = 1, /* no value: *(int *)dst = 1 */
	TL_OPTION_U32,      /* the next argument, digits only, min..max: *(uint32_t *)dst */
	TL_OPTION_STR       /* the next argument, not empty: *(const char **)dst (kept, not copied) */
};

/*
 * A program's whole command line, argv[1 .. argc): each argument is one of
 * opts or one of the runtime's options (tl_runtime_config_option: those set
 * *cfg), a value being the argument after its name; a later one wins. The
 * destinations keep what they held for options not given, so a program sets
 * its defaults first. Returns 0, or -EINVAL at the first argument that is
 * neither, or whose value is missing or bad (what came before it is set);
 * cfg or argv NULL, argc below 1, or an entry of opts with an unknown kind
 * or no destination: -EINVAL too. Detail: the argument, and what is wrong
 * with it.
 */
int tl_runtime_config_args(tl_runtime_config *cfg, int argc, char **argv, const tl_runtime_option *opts);

/*
 * Create a runtime: computes the plan (from cfg->plan and, unless no_env, the
 * environment; cfg NULL: the defaults), allocates every shard's mesh rings
 * and, with cfg->stats, the live stats region (turnloop/stats.h). No thread
 * starts. A region that cannot be published does not stop the runtime: it
 * runs without one, one line on stderr says why (for instance a per-user
 * directory that another user planted), and tl_runtime_stats_published()
 * tells.
 * Ownership: *out is the caller's until tl_runtime_destroy(); the runtime
 * keeps a copy of *cfg. Returns 0 and sets *out (NULL on failure); -EINVAL
 * (out NULL, a bad config field, plan request, TL_CPUS, TL_SHARDS or
 * TL_SMT), -EBUSY (this process already publishes a stats region), -ENOMEM,
 * or the plan's error (tl_plan_compute). Detail (tl_error_detail) on
 * failure: the field, variable or CPU at fault.
 */
int tl_runtime_new(tl_runtime **out, const tl_runtime_config *cfg);

/*
 * Launch the runtime: start every shard thread and wait until each is set
 * up (bound, arena, loop). If any shard fails to set up, the others are
 * torn down without running any user code and the error is returned.
 * Otherwise each shard runs cfg.on_launch and starts turning; with
 * cfg.signals, SIGINT and SIGTERM now stop the runtime (the shard threads
 * block them; the previous actions come back at destroy; only one runtime
 * of a process at a time takes the signals, a second one runs without
 * them).
 * Returns 0, -EINVAL (rt NULL, or launched before), or the first shard's
 * error. Detail (tl_error_detail) on failure: which shard failed and why.
 */
int tl_runtime_launch(tl_runtime *rt);

/*
 * Block until every shard has stopped and drained (launching the runtime
 * first if needed). Returns 0 after a requested stop; -EINVAL (rt NULL); or
 * the first error that stopped it (an on_launch failure, a turn error, a
 * launch that failed). A second call returns the same value at once.
 * Detail (tl_error_detail) on failure: which shard stopped it and why.
 */
int tl_runtime_run(tl_runtime *rt);

/*
 * Stop at once (the hard stop): each shard calls on_stop, closes its remaining
 * handles (their Closed completions carry TL_RT_CLOSE_TOKEN),
 * delivers their completions and the mesh messages already sent, then its
 * thread exits (bounded by drain_ns, after which leftover operations are
 * cancelled by tl_loop_destroy). Any thread; async-signal-safe (atomic
 * stores and at most one eventfd write per shard). Idempotent; rt NULL is a
 * no-op.
 */
void tl_runtime_stop(tl_runtime *rt);

/*
 * Drain gracefully (contract 9.6): every shard closes its listeners (new
 * connections are refused: another process or shard takes them), calls
 * on_drain, and lets its connections finish for up to grace_ns, until its
 * loop is no longer alive; then it stops as tl_runtime_stop says. A
 * tl_runtime_stop() during the grace period cuts it short. Any thread;
 * async-signal-safe; idempotent; rt NULL is a no-op. With cfg.signals the
 * first SIGINT or SIGTERM drains and a second one stops.
 */
void tl_runtime_drain(tl_runtime *rt);

/* The token of the Closed completions of handles the runtime closes when a
 * shard stops (those the program had not closed itself); its handler byte
 * is 0, so they go to on_completion. Like every completion of a handle,
 * each carries the handle's pointer (c->data, tl_handle_set_data in
 * turnloop/loop.h): the program frees its state per handle there, and
 * needs no list of its own to find it. A handle whose operations have not
 * ended within drain_ns is destroyed with the loop and its Closed is not
 * delivered. */
#define TL_RT_CLOSE_TOKEN UINT64_C(0x00c105edc105ed00)

/*
 * Stop (if running), join the threads, free the rings and the plan, unlink the
 * stats region and restore the signal actions. NULL is a no-op.
 */
void tl_runtime_destroy(tl_runtime *rt);

/* Number of shards in the runtime's plan (0 for rt NULL). */
uint32_t tl_runtime_shards(const tl_runtime *rt);
/* The plan the runtime runs (owned by the runtime; NULL for rt NULL). */
const tl_plan *tl_runtime_plan(const tl_runtime *rt);
/* 1 when shard threads use their own jemalloc arenas; 0 when that is off
 * (build option, sanitizer build, or jemalloc is not the process allocator:
 * then *why, if why is not NULL, says which, in a string of the library's).
 * Arenas are best effort, never an error: this is a state with its reason.
 * Meaningful after launch. A build with arenas that runs without them
 * (jemalloc linked behind libc: link as turnloop.pc says) also says why in
 * one line on stderr at launch. */
int tl_runtime_arenas(const tl_runtime *rt, const char **why);

/* The shard's loop (use it from the shard's thread only). */
tl_loop *tl_shard_loop(tl_shard *s);
/* The shard's id, 0..count-1 (its index in the plan). */
uint32_t tl_shard_id(const tl_shard *s);
/* The number of shards. */
uint32_t tl_shard_count(const tl_shard *s);
/* The runtime the shard belongs to. */
tl_runtime *tl_shard_runtime(tl_shard *s);
/* The runtime config's arg (what on_launch/on_stop/on_pass receive), for
 * handlers. */
void *tl_shard_arg(const tl_shard *s);
/* Set a pointer of the program's own per shard; any use, the runtime never
 * looks at it. */
void tl_shard_set_data(tl_shard *s, void *data);
/* The pointer tl_shard_set_data() set (NULL until then). */
void *tl_shard_data(const tl_shard *s);
/* Copy the shard's place in the plan (cpu, core, NUMA node) into *out.
 * Returns 0, or -EINVAL (s or out NULL). */
int tl_shard_place_get(const tl_shard *s, tl_shard_place *out);

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
 * flight (tl_shard_submit_to, tl_shard_migrate and the parts of
 * tl_shard_gather share them). Same returns as tl_shard_post, -EINVAL also
 * for fn NULL, and -ENOBUFS also when mesh_inflight calls to target await
 * their result (tl_shard_credits() says which of the two: 0 credits). If
 * the runtime stops before the result comes back, fn still runs but its
 * result may be dropped (the stats count it). arg stays the caller's: it
 * must live until the result comes back.
 *
 * Order: everything this shard sends to one target (posts, calls, gather
 * parts, migrations, batches) runs there in the order it was accepted,
 * one after the other on the target's thread; results come back in the
 * order the functions ran, but for deferred replies (tl_shard_defer),
 * which come when given. Nothing is ordered between different targets.
 *
 * Memory: what the caller wrote before an accepted call happens-before fn
 * runs, and what fn wrote before returning happens-before the caller's
 * handler gets the result (each message is published with a release
 * store of its ring's head, read with an acquire load; the result travels
 * the same way back). So fn may write plain memory that the caller reads
 * on the result, and the caller may reuse arg then, with no lock.
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
 * byte. h's pointer (tl_handle_set_data) stays behind: read it before the
 * call if the state should travel (in payload, say); the new handle starts
 * with NULL, and target's program sets its own.
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
 *
 * Token before payload, as in tl_shard_post and tl_post (turnloop.h, rule
 * 6). This call used to take payload first: both are uint64_t, so code
 * written for that order still compiles and must be changed by hand.
 */
int tl_shard_migrate(tl_shard *s, tl_handle h, uint32_t target, uint64_t token,
		     uint64_t payload);

/*
 * tl_shard_post() to every shard, this one included, all or nothing.
 * Returns the number of shards posted to, or -ENOBUFS (some ring is full:
 * nothing was sent), -EPIPE.
 */
int tl_shard_broadcast(tl_shard *s, uint64_t token, uint64_t payload);

/*
 * tl_shard_submit_to() on every shard, this one included, all or nothing:
 * one result completion per shard. Returns the count, -EINVAL (fn NULL) or
 * the first refusal's code (then nothing was sent).
 */
int tl_shard_submit_all(tl_shard *s, tl_mesh_fn fn, void *arg, uint64_t token);

/*
 * Gathers: one function run on several shards (or all) with ONE completion
 * when every part is back. The caller owns the tl_mesh_gather and its
 * parts array (parts[t] is shard t's part; nparts >= the shard count), sets
 * them up once with tl_mesh_gather_init() and reuses them: a gather
 * allocates nothing. Between an accepted tl_shard_gather() and its
 * completion the runtime owns g: do not touch or free it (or arg) then.
 *
 * The completion (kind TL_K_MESH, to the handler the token names): token
 * as given, u.mesh.arg = g, u.mesh.payload = the number of parts,
 * aux = this shard's id | TL_MESH_RESULT | TL_MESH_GATHER, and result:
 *  - the number of parts, every parts[t].state of a target TL_PART_DONE
 *    with parts[t].result what fn returned there;
 *  - -EPIPE when the runtime stopped before every part came back: it comes
 *    during the stop, after every shard has run every message sent to it,
 *    so fn has run on every target; a part whose result was dropped is
 *    TL_PART_LOST, the others TL_PART_DONE. g and arg may be freed then.
 * Shards that were not targets have state TL_PART_NONE. Every fn's writes
 * happen-before the completion (see tl_shard_submit_to, "Memory").
 */
enum {
	TL_PART_NONE = 0,    /* not a target of this gather */
	TL_PART_PENDING = 1, /* sent, result not back yet */
	TL_PART_DONE = 2,    /* result is fn's return value there */
	TL_PART_LOST = 3     /* fn ran, its result was dropped by the stop */
};

/* One part of a gather (the caller's memory, written by the runtime on the
 * calling shard's thread). */
typedef struct tl_mesh_part {
	int64_t result; /* fn's return on that shard (TL_PART_DONE) */
	uint32_t state; /* TL_PART_* */
	uint32_t pad_;
} tl_mesh_part;

/* A gather (caller-owned; fields are read-only for the caller). */
typedef struct tl_mesh_gather {
	tl_mesh_part *parts;  /* the caller's array, set by tl_mesh_gather_init */
	uint32_t nparts;      /* its length */
	uint32_t pending;     /* parts not back yet */
	uint32_t blocked;     /* after -ENOBUFS: the target that refused */
	uint32_t busy;        /* 1 from an accepted gather until its completion */
	uint32_t waiting;     /* 1 while a tl_shard_gather_wait waits for room */
	uint32_t pad_;
	uint64_t token;
	void *fn_, *arg_;     /* the runtime's: a waiting gather's */
	struct tl_mesh_gather *next_, *prev_; /* the runtime's */
} tl_mesh_gather;

/*
 * Set up g over the caller's parts array (nparts entries: at least the
 * shard count, to be usable on every shard). Neither is copied: both stay
 * the caller's and must live while a gather on g is in flight. Not while
 * a gather on g is in flight (g is the runtime's then). Returns 0, or
 * -EINVAL (g or parts NULL, nparts 0).
 */
int tl_mesh_gather_init(tl_mesh_gather *g, tl_mesh_part *parts, uint32_t nparts);

/*
 * Run fn(target_shard, arg) on each shard of targets[0..ntargets-1] (no
 * shard twice; targets NULL: every shard, this one included) and deliver
 * ONE completion with every part's result (see "Gathers" above). All or
 * nothing: a credit and a ring slot for every target are checked first,
 * and either every part is sent or none. Each part is a call in the sense
 * of tl_shard_submit_to: it holds one of the pair's mesh_inflight credits
 * until its result is back, runs in order with the other messages to its
 * target, and its writes happen-before the completion.
 *
 * Returns the number of parts sent (> 0); -EINVAL (g not set up, fn NULL,
 * ntargets 0 with targets given, a target out of range or listed twice, a
 * target >= g->nparts); -EBUSY (g is still in flight); -ENOBUFS (some
 * target's ring is full or its credits are used up: nothing was sent,
 * g->blocked names that target for tl_shard_wait_room); -EPIPE (the mesh
 * closed: the runtime is stopping). After a refusal every part is
 * TL_PART_NONE. Allocates nothing.
 */
int tl_shard_gather(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets, uint32_t ntargets,
		    tl_mesh_fn fn, void *arg, uint64_t token);

/*
 * tl_shard_gather(), but never refused for room. When some target cannot
 * take its part now (its ring is full, or no credit to it is free), the
 * gather waits in the runtime (g->busy and g->waiting are 1) and goes, all
 * its parts at once, at the first pass's end where every target has room;
 * the shard is woken for that. Gathers waiting on one shard go in the order
 * they were made, and before the batches of that pass's end (so a stream of
 * batched calls does not keep one waiting for ever). A waiting gather
 * takes its place in the order per target when it goes, not when this is
 * called. Its completion is a gather's (see "Gathers" above), and one
 * that had not gone when the mesh closed completes with -EPIPE,
 * u.mesh.payload 0 and every part TL_PART_NONE: fn ran nowhere. Returns
 * the number of parts (> 0), sent now or waiting; -EINVAL and -EBUSY as
 * tl_shard_gather; -EPIPE (the mesh closed: nothing was done). Allocates
 * nothing. g, its parts and arg must live until the completion (targets
 * is read during this call only).
 */
int tl_shard_gather_wait(tl_shard *s, tl_mesh_gather *g, const uint32_t *targets,
			 uint32_t ntargets, tl_mesh_fn fn, void *arg, uint64_t token);

/*
 * Gates: know when every call sent under a gate has finished or been
 * dropped, so that what those calls use (their arg, the program's state)
 * may be freed even if the runtime stops first. The caller owns the
 * tl_mesh_gate (tl_mesh_gate_init once); calls go under it with
 * tl_shard_submit_gated, and tl_shard_gate_close asks for ONE completion
 * once none is left in flight: kind TL_K_MESH, token as given to close,
 * u.mesh.arg = the gate, aux = this shard's id | TL_MESH_RESULT |
 * TL_MESH_GATE, result = the number of calls under the gate whose result
 * the stop dropped (0 when every result was delivered). It comes after
 * the results of every call under the gate, and never from inside
 * tl_shard_gate_close (at the earliest later in the same pass). At a stop it comes once
 * every shard has run every message sent to it, so no fn under the gate
 * runs any more. After it the gate may be freed or initialised again.
 * A gate that was never closed gets no completion: its counts are final
 * once tl_runtime_run() has returned.
 */
typedef struct tl_mesh_gate {
	uint32_t inflight; /* calls under the gate not finished yet */
	uint32_t dropped;  /* calls whose result the stop dropped */
	uint32_t closing;  /* 1 from tl_shard_gate_close until its completion */
	uint32_t pad_;
	uint64_t token;
	struct tl_mesh_gate *next_; /* the runtime's */
} tl_mesh_gate;

/* Set up g (or set it up again after its completion): no call in flight,
 * not closing. Not while calls under g are in flight or it is closing (g
 * is the runtime's then). Returns 0, or -EINVAL (g NULL). */
int tl_mesh_gate_init(tl_mesh_gate *g);

/*
 * tl_shard_submit_to() under gate g: the same call, result and returns,
 * and also -EINVAL for g NULL and -EBUSY when g is closing (nothing was
 * sent). The gate counts the call until its result has been handed to
 * the program (the gate's count drops just before that) or dropped by
 * the stop. Allocates nothing.
 */
int tl_shard_submit_gated(tl_shard *s, tl_mesh_gate *g, uint32_t target, tl_mesh_fn fn,
			  void *arg, uint64_t token);

/*
 * Close g: no new call may go under it, and ONE completion (see "Gates"
 * above) comes once none is in flight. Returns 0, -EINVAL (g NULL),
 * -EBUSY (g is already closing).
 */
int tl_shard_gate_close(tl_shard *s, tl_mesh_gate *g, uint64_t token);

/*
 * Deferred replies: a call answered later, by the shard it runs on (as
 * Seastar's submit_to with a function that returns a future). A mesh
 * function that cannot answer before it returns (it starts a task, a pool
 * job, a call of its own to a third shard) calls tl_shard_defer() with a
 * tl_mesh_reply of its own memory; its return value is then ignored, and
 * the caller's completion comes when that shard calls tl_shard_reply()
 * with the result, from any later handler of its own. It works for every
 * call that has a result: tl_shard_submit_to, tl_shard_submit_all, a
 * gated call, a gather's part (the gather completes once the last part
 * is answered).
 *
 * Until the reply, the call holds its credit on the caller (as any call
 * in flight: tl_shard_credits), so a reply always has its place in the
 * ring back, and tl_shard_reply never refuses for room. Results of calls
 * that ran after a deferred one may come back before it: only results
 * answered at once keep the order they ran in. What the shard wrote
 * before tl_shard_reply happens-before the caller's completion (the same
 * release and acquire as a result returned by fn). At a stop, a call not
 * answered before the mesh closed counts as a call whose result the stop
 * dropped (a gather's part is TL_PART_LOST, a gate counts it dropped); a
 * reply given after that is refused with -EPIPE.
 */
typedef struct tl_mesh_reply {
	uint64_t token, arg, word; /* the runtime's: the call's, kept for its result */
	uint32_t src;              /* the shard that made the call */
	uint32_t shard;            /* 1 + the replying shard while owed, 0 once answered */
} tl_mesh_reply;

/*
 * From inside a mesh function running on s (and only there), at most once
 * per call: the call's result will be tl_shard_reply()'s, not fn's return
 * value. r is the caller of tl_shard_defer's memory; it must live until
 * the reply. Returns 0, or -EINVAL (s or r NULL, not inside a mesh
 * function that has a result, already deferred). Allocates nothing.
 */
int tl_shard_defer(tl_shard *s, tl_mesh_reply *r);

/*
 * Answer the call r was deferred for, with result, on s, the shard whose
 * function deferred it (from any of its handlers, exactly once). The
 * caller gets the completion it would have had if fn had returned result.
 * Returns 0; -EINVAL (s or r NULL, r not owed by s: already answered, or
 * never deferred here); -EPIPE (the mesh closed: the stop dropped it, as
 * above; r is answered all the same). Never -ENOBUFS. Allocates nothing.
 */
int tl_shard_reply(tl_shard *s, tl_mesh_reply *r, int64_t result);

/*
 * Batched calls: items for one target gathered during a pass and sent as
 * ONE call at the pass's end. A call per item costs a message, a result
 * and a completion each (in tlkv, a quarter of the instructions a remote
 * command adds); a batch pays them once. The caller owns a
 * tl_mesh_batcher (one per stream of work whose order matters: a
 * connection, say) and an array of chains, one per shard, set up once by
 * tl_mesh_batcher_init(), and embeds a tl_mesh_item in each record it
 * sends. tl_shard_batch_add() queues an item for a target; at the end of
 * the pass (after on_pass), each target's chain goes as one call
 * fn(target_shard, first item), its items linked through next in the
 * order they were added, and fn walks them. The caller gets one TL_K_MESH
 * completion per batch: token as given to tl_mesh_batcher_init,
 * u.mesh.arg = the batch's first item (its chain still linked),
 * result = fn's return, aux = target | TL_MESH_RESULT | TL_MESH_BATCH.
 *
 * A batch is a call in the sense of tl_shard_submit_to: it takes one of
 * the pair's credits until its result is back, it runs in order with
 * everything else this shard sends to target, fn's writes happen-before
 * the completion, and fn may defer its reply (tl_shard_defer). When the
 * mesh has no room for it (ring full, or no credit free), the chain stays
 * queued, the items added meanwhile join it, and it goes at the first
 * pass's end where target has room (the shard is woken for that): the
 * caller never sees -ENOBUFS nor waits for room itself, and one
 * batcher's items for one target reach it in the order they were added.
 * A chain that had not gone when the mesh closed (a stop) completes with
 * result -EPIPE, and fn did not run on it; a batch that went and whose
 * result the stop dropped gets no completion (as a call's; inflight
 * below keeps counting it).
 */
typedef struct tl_mesh_item {
	struct tl_mesh_item *next; /* the next item of its batch; NULL after the last */
} tl_mesh_item;

/* One target's queued items (the caller's memory, the runtime's fields). */
typedef struct tl_mesh_chain {
	tl_mesh_item *first, *last;
} tl_mesh_chain;

/* A batcher (caller-owned; fields are read-only for the caller). */
typedef struct tl_mesh_batcher {
	tl_mesh_chain *chains; /* the caller's array, one per shard */
	uint32_t nchains;      /* its length */
	uint32_t queued;       /* targets with items not sent yet */
	uint32_t inflight;     /* batches sent whose result has not come */
	uint32_t listed_;      /* the runtime's */
	tl_mesh_fn fn;
	uint64_t token;
	struct tl_mesh_batcher *next_; /* the runtime's */
} tl_mesh_batcher;

/*
 * Set up b over the caller's chains (nchains: at least the shard count to
 * reach every shard; neither is copied, both must live while b has items
 * queued or batches in flight), with the function every batch runs and
 * the token of their completions. Not while items are queued or batches
 * in flight (queued or inflight non-zero: b is the runtime's then).
 * Returns 0, or -EINVAL (b, chains or fn NULL, nchains 0).
 */
int tl_mesh_batcher_init(tl_mesh_batcher *b, tl_mesh_chain *chains, uint32_t nchains,
			 tl_mesh_fn fn, uint64_t token);

/*
 * Queue item it (its next is the runtime's from now on) for target on
 * batcher b, from b's shard s: it goes with the other items queued for
 * target at this pass's end, or later when the mesh has no room (see
 * "Batched calls" above), and it is the caller's again with its batch's
 * completion. Returns 0; -EINVAL (s, b or it NULL, b not set up, target
 * out of range or >= b->nchains); -EPIPE (the mesh closed: the runtime is
 * stopping; nothing was queued, and it->next is NULL, so a walk of the
 * refused item as a chain of one ends there). Never -ENOBUFS. Allocates
 * nothing.
 */
int tl_shard_batch_add(tl_shard *s, tl_mesh_batcher *b, uint32_t target, tl_mesh_item *it);

/*
 * The mesh_inflight credits to target that are free now: a call
 * (tl_shard_submit_to, a gather part, tl_shard_migrate) to target is
 * refused with -ENOBUFS while this is 0, and accepted (if the ring has
 * room) while it is not. Returns the count (0..mesh_inflight), or -EINVAL
 * (target out of range).
 */
int tl_shard_credits(const tl_shard *s, uint32_t target);

/*
 * After a refusal with -ENOBUFS: ask for one TL_K_ROOM completion (token,
 * aux = target) once what refused is free again: the ring to target can
 * take a message and, if no credit to target was free when this was asked
 * (tl_shard_credits() 0), a credit is back too (a result from target came
 * in). So a caller refused for credits is not woken before a call can go.
 * It may come at the next pass if both already hold. One request per
 * target at a time. Returns 0, -EINVAL (target out of range), -ENOBUFS (a
 * request for target is already pending), -EPIPE (mesh closed).
 */
int tl_shard_wait_room(tl_shard *s, uint32_t target, uint64_t token);

/* ---- Memory handed back to the shard that allocated it ---- */

/*
 * Each shard allocates from its own jemalloc arena (tl_runtime_arenas), and
 * the stats count bytes per shard thread: a block one shard allocates and
 * another frees is counted as allocated on the first for good and freed
 * on the second, and takes the cross-arena path through the freeing
 * thread's cache. Blocks that travel between shards (a value stored on
 * its key's owner, a buffer handed over with a message) can instead be
 * allocated with tl_shard_alloc and freed with tl_shard_free from any
 * shard: the free is carried back to the allocating shard, which frees it
 * there (docs/MESH.md, "Freeing on the owner").
 */

/*
 * Allocate size bytes (0 is allowed) from this shard's allocator, aligned
 * as malloc aligns, and remember this shard as the block's owner in 16
 * bytes before it. Free it only with tl_shard_free (never free(): the
 * pointer is not malloc's). Call from s's own thread. Returns the block,
 * or NULL when out of memory (or size too large).
 */
void *tl_shard_alloc(tl_shard *s, size_t size);

/*
 * Free p, a block of tl_shard_alloc (NULL is a no-op), from shard s's
 * thread, on the shard that allocated it: at once when that is s, else
 * queued for its owner. Queued blocks are linked through their own 16
 * bytes (freeing never allocates) and go to the owner as one mesh message
 * per 64 blocks, and at the end of s's pass; the owner frees them between
 * its turns. What s wrote to the block before the call happens-before the
 * owner's free (the mesh's release and acquire). When the mesh refuses
 * (the ring to the owner full), the blocks stay queued and go once it
 * has room (s is woken for it): none is dropped or freed elsewhere. At a
 * stop, blocks queued before the mesh closed reach their owner as
 * messages; the rest (freed by the last handlers of the stop) are freed
 * by their owner after every shard has handled its last completion;
 * tl_runtime_destroy frees anything left (nothing, unless a shard never
 * reached its stop).
 *
 * The block is freed at once on this thread instead: with s NULL (any
 * thread: the way to free blocks once tl_runtime_run has returned, or a
 * block of a runtime already destroyed), when per-shard arenas are off
 * (tl_runtime_arenas 0: -Djemalloc=disabled, sanitizer builds; then this
 * is a plain free), or when the block comes from another runtime that
 * still runs.
 *
 * Returns 0 (freed now, or p NULL), 1 (queued for its owner), or -EINVAL
 * (the 16 bytes before p do not hold a live block's mark, e.g. a block
 * already freed here or a pointer into the middle of one: nothing was
 * done). That check is best effort: passing any pointer but one from
 * tl_shard_alloc (one from malloc, say) is undefined.
 */
int tl_shard_free(tl_shard *s, void *p);

/* ---- Deprecated names (kept for one release; turnloop.h lists them) ---- */

/* The old name of tl_shard_launch_fn. */
typedef tl_shard_launch_fn tl_shard_start_fn TL_DEPRECATED("renamed tl_shard_launch_fn");
/* The old name of tl_runtime_launch(): "start" names operations that run
 * until stopped (tl_read_start, tl_timer_start, ...). */
TL_DEPRECATED("renamed tl_runtime_launch")
int tl_runtime_start(tl_runtime *rt);
/* The runtime's failure reason ("" when it did not fail; owned by the
 * runtime): tl_runtime_launch and tl_runtime_run leave it as their detail
 * (tl_error_detail). */
TL_DEPRECATED("the reason is tl_error_detail() after tl_runtime_launch or tl_runtime_run")
const char *tl_runtime_strerror(const tl_runtime *rt);
/* The shard's place in the plan, owned by the runtime: tl_shard_place_get
 * copies it. */
TL_DEPRECATED("use tl_shard_place_get")
const tl_shard_place *tl_shard_place_of(const tl_shard *s);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_RUNTIME_H */
