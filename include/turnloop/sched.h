/* turnloop/sched.h: cooperative scheduling on the shards of the runtime: tasks that do long work in slices between turns, and scheduling groups that share a shard's CPU by shares. */
#ifndef TURNLOOP_SCHED_H
#define TURNLOOP_SCHED_H

#include <stdint.h>

#include "turnloop/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Work too long for one handler (writing out a large table, a compaction,
 * a scan) runs as a task: a function the runtime calls again and again
 * between turns, each call doing a slice of the work and returning
 * TL_TASK_MORE until the work is done. A C function cannot be suspended
 * mid-stack, so to yield is to return: the task keeps its place in its own
 * state (arg) and carries on from there at its next call. A call should
 * check tl_shard_should_yield() after each small unit of work (every few
 * microseconds' worth: the check reads the clock) and return TL_TASK_MORE
 * once it says 1.
 *
 * Each task belongs to a scheduling group. Groups are declared on the
 * runtime before launch (tl_runtime_sched_group: a name and CPU shares)
 * and exist on every shard; each shard schedules its own tasks, and a task
 * runs on the shard that spawned it. Group 0, TL_SCHED_MAIN ("main"),
 * stands for the handlers' own work: each pass's turn, handlers, mesh
 * messages and on_pass are charged to it, with cfg.sched_shares shares
 * (runtime.h). Tasks go into the declared groups, never into main.
 *
 * Where tasks run: in each pass, after the handlers, the mesh and on_pass,
 * before the pass's mesh messages are published (so what a task posts
 * leaves with them):
 *
 *     for (;;) {
 *         tl_turn(...); handlers; mesh messages; on_pass;
 *         tasks, at most cfg.sched_quantum_ns in all;
 *         publish mesh messages; stats.
 *     }
 *
 * How much time: in a pass where the handlers had work (a completion, a
 * mesh message, on_pass asking for more), the groups with runnable tasks
 * get time in proportion to their shares against main's, main's being what
 * the pass's handlers used: with main at 1000 and a group at 250, a shard
 * whose handlers are always busy gives the group a fifth of its time. In a
 * pass where the handlers had nothing, the tasks get the whole quantum: the
 * CPU is not left idle while a task can use it. Among groups, each slice
 * goes to the runnable group that has had the least time for its shares
 * (a virtual clock per group, as in weighted fair queueing), for a slice
 * of the quantum in proportion to its shares among the runnable groups;
 * the tasks of one group take turns. A group (main included) that had
 * nothing to run gets no credit for the time it sat idle. A task that
 * overruns its slice is charged what it used, and its group waits longer
 * for its next one.
 *
 * Bounds: a pass spends at most cfg.sched_quantum_ns in tasks (plus what a
 * task overruns its slice by), so a request that arrives while tasks run
 * waits about that long at most for its turn. While any task is runnable
 * the next turn does not block. A task that never yields holds the shard
 * for as long as its call lasts; the stall detector (cfg.stall_ns) then
 * names its group (below).
 *
 * The end of a task: one terminal TL_K_MESH completion, delivered right
 * after the task's last call in the same pass, to the handler its token
 * names (tl_token): token as given, u.mesh.arg = arg, u.mesh.payload = the
 * group, aux = this shard's id | TL_MESH_RESULT | TL_MESH_TASK, op and
 * handle TL_OP_NONE / TL_HANDLE_NONE, and result:
 *  - 0 (the task returned TL_TASK_DONE) or the negative errno it returned;
 *  - -ECANCELED when the runtime stopped first.
 * From the completion on, arg is the program's again and may be freed.
 *
 * Stops: tasks keep running through a graceful drain's grace period (the
 * shard counts as busy while any is runnable, so it waits for them, up to
 * cfg.grace_ns). When the stop begins (after on_stop), every task not
 * ended yet, those on_stop spawned included, ends with -ECANCELED; from
 * then tl_shard_task_spawn() returns -EPIPE.
 *
 * Stalls: a pass longer than cfg.stall_ns is reported on stderr (one line,
 * runtime.h) naming where most of it went: a task group ("task group
 * \"save\""), or "handlers", "mesh" (the functions and messages of the
 * mesh), "on_pass" or "the turn". Task time is measured exactly; the other
 * parts with the coarse clock (a tick, 1 to 4 ms), which is plenty to tell
 * apart a stall's parts but may misname one of a few ms.
 *
 * Memory: every task record is allocated when the shard sets up
 * (cfg.sched_tasks per shard); spawning, running and ending a task
 * allocate nothing.
 */

#define TL_SCHED_GROUPS 16u       /* groups per runtime, TL_SCHED_MAIN included */
#define TL_SCHED_MAIN 0u          /* the handlers' group */
#define TL_SCHED_SHARES_MAX 10000u
#define TL_SCHED_NAME_MAX 24u     /* bytes of a group's name, NUL included */

/* What a task's call returns (or a negative errno: the task ended with that
 * error, which its completion carries). Any other positive value is taken
 * as TL_TASK_MORE. */
enum { TL_TASK_DONE = 0, TL_TASK_MORE = 1 };

/* A task: do a slice of the work on shard s, then return TL_TASK_MORE (call
 * again later), TL_TASK_DONE, or a negative errno. Runs on the shard's
 * thread between turns, like a handler, and may use everything a handler
 * may (tl_shard_post, tl_shard_task_spawn, the loop). */
typedef int (*tl_task_fn)(tl_shard *s, void *arg);

/*
 * Declare a scheduling group on every shard of rt: name is 1..23
 * characters of [A-Za-z0-9_-], not "main"; shares 1..TL_SCHED_SHARES_MAX
 * (relative to the other groups' and to cfg.sched_shares, main's). Only
 * before tl_runtime_launch(), from the controlling thread; name is copied.
 * The group's stats are also published with the program's own stats
 * (turnloop/stats.h): a counter family "sched.<name>" of 4 rows, labelled
 * "ns", "runs", "tasks" and "stalls" (tl_group_stats below), per shard;
 * the first group declared also declares "sched.main". They take 4 of the
 * cfg.stats_values slots each (8 for the first).
 * Returns the group's id (1..TL_SCHED_GROUPS-1, in the order declared);
 * -EINVAL (rt or name NULL, a bad name or shares, already launched);
 * -EEXIST (a group or a program family of that name exists); -ENOBUFS
 * (TL_SCHED_GROUPS - 1 groups already, or too few stats_values slots
 * left). Detail (tl_error_detail) on failure.
 */
int tl_runtime_sched_group(tl_runtime *rt, const char *name, uint32_t shares);

/*
 * Spawn a task on this shard: fn(s, arg) is called in group's share of
 * the passes to come (the first time in this pass, if the group's turn
 * comes) until it returns TL_TASK_DONE or an error, then its completion
 * (see "The end of a task" above) goes to the handler token names. arg
 * stays the caller's, and must live until that completion. From the
 * shard's thread (a handler, a task, on_launch, on_drain, on_stop).
 * Returns 0; -EINVAL (fn NULL, group TL_SCHED_MAIN or not declared);
 * -ENOBUFS (cfg.sched_tasks tasks of this shard have not ended: a record
 * is free again before the completion of the task that held it is
 * handled, so that handler may spawn the next); -EPIPE (the shard is
 * stopping). Allocates nothing.
 */
int tl_shard_task_spawn(tl_shard *s, uint32_t group, tl_task_fn fn, void *arg, uint64_t token);

/*
 * From inside a task's call: 1 once its slice is used up (return
 * TL_TASK_MORE now and carry on at the next call), else 0. Outside a
 * task's call (a handler, on_pass): 0. Reads the clock: call it after
 * each unit of work, not in a tight inner loop.
 */
int tl_shard_should_yield(const tl_shard *s);

/* One group's figures on one shard. Counters are totals since the shard
 * started. */
typedef struct tl_group_stats {
	char name[TL_SCHED_NAME_MAX]; /* "main" for TL_SCHED_MAIN */
	uint32_t shares;
	uint32_t runnable;   /* tasks spawned and not ended yet */
	uint64_t runtime_ns; /* time charged (CLOCK_MONOTONIC): its tasks' calls
	                      * and the handlers of their completions; main's:
	                      * the passes' time outside tasks */
	uint64_t runs;       /* task calls (main: passes) */
	uint64_t spawned;    /* tasks accepted */
	uint64_t tasks;      /* tasks ended: done, failed or cancelled */
	uint64_t stalls;     /* stall reports naming the group (main: naming
	                      * the handlers, the mesh, on_pass or the turn) */
} tl_group_stats;

/*
 * Copy group's figures on this shard into *out (from the shard's thread).
 * Returns 0, or -EINVAL (s or out NULL, group not declared; TL_SCHED_MAIN
 * always is).
 */
int tl_shard_group_stats_get(const tl_shard *s, uint32_t group, tl_group_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TURNLOOP_SCHED_H */
