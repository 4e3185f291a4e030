/* shards/runtime_int.h: what the runtime's files share: the runtime and shard structs and the calls between the arena, stats writer, mesh, shard-thread and lifecycle files (internal). */
#ifndef TL_SHARDS_RUNTIME_INT_H
#define TL_SHARDS_RUNTIME_INT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "tl_config.h"
#include "os.h"
#include "spsc.h"
#include "stats_region.h"
#include "turnloop/plan.h"
#include "turnloop/runtime.h"
#include "turnloop/sched.h"
#include "turnloop/stats.h"

/*
 * The runtime in seven parts, each one part of a shard's life:
 *
 *   arena.c         a shard thread's own jemalloc arena
 *   stats_writer.c  the live stats region: made, published into, removed;
 *                   the program's own stats (stats.c reads it); its home
 *                   on the OS: stats_shm.c (POSIX), stats_shm_win.c
 *   mesh.c          the rings between shards: staging, publishing,
 *                   receiving, results, room, migration
 *   shard.c         a shard's thread: setup, the pass, the phases of a
 *                   stop (run, grace, drain, wait, finish), teardown
 *   sched.c         tasks and scheduling groups between turns, and the
 *                   stall detector's report of where a slow pass went
 *   foreign.c       blocks freed on the shard that allocated them
 *                   (tl_shard_alloc, tl_shard_free)
 *   runtime.c       the runtime object: config, new, launch, run, stop,
 *                   drain, signals, destroy (its one teardown), getters
 *
 * The structs below are the only state; each file touches the fields of
 * its own part and calls the others through the tl__rt_* and tl__mesh_*
 * functions declared here.
 */

#define tl_likely(x) __builtin_expect(!!(x), 1)
#define tl_unlikely(x) __builtin_expect(!!(x), 0)

/* Sanitizers replace malloc; jemalloc's arenas would then hold nothing. */
#if TL_HAVE_JEMALLOC && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define TL_ARENAS 1
#else
#define TL_ARENAS 0
#endif

#define TL_RT_MAX_SHARDS 1024u

/* A shard's life: running, letting connections finish (tl_runtime_drain),
 * closing what is left (bounded by drain_ns), waiting for the others
 * (shard.c). */
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
	uint32_t room_credit; /* the room wait also waits for a credit */
	uint64_t room_token;
	int dirty;        /* listed in shard.dirty */
	/* Results that found the ring full wait here, in order; the credit
	 * rule (inflight <= mesh_inflight) bounds them. */
	struct tl_mesh_msg *backlog;
	uint32_t bl_head, bl_len;
	/* The gates of gated calls to this target, by slot: a gated call
	 * carries its slot + 1 in its word and its result brings it back
	 * (results need not come in the order sent: a deferred reply may be
	 * overtaken). gq_free is the stack of free slots; the credits bound
	 * the calls, so mesh_inflight slots always suffice. */
	tl_mesh_gate **gq;
	uint32_t *gq_free;
	uint32_t gq_nfree;
	/* Blocks to free on this target were refused (foreign.c): wake
	 * when the ring has room. */
	uint32_t free_wait;
	/* A batch's chain or a waiting gather found no room to this target
	 * at the last pass's end: wake when the ring has room and a credit
	 * is free (marked afresh each pass: tl__mesh_batches_flush). */
	uint32_t batch_wait;
};

/* Blocks this shard freed that wait to go to one owner (foreign.c),
 * linked through their headers. */
struct tl__freeq {
	void *head;
	uint32_t n;
	uint32_t listed; /* in shard.fdirty */
};

struct tl_shard {
	/* Read-mostly, set up before the shard runs. */
	tl_runtime *rt;
	uint32_t id, n;
	tl__os_thread_handle thread;
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
	uint32_t ndirty, nroom_wait, nbacklog, nfree_wait, nbatch_wait;
	tl_mesh_batcher *batchers; /* with chains not sent yet, for the pass's end */
	tl_mesh_gather *gwait, *gwait_tail; /* tl_shard_gather_wait's, not sent yet, in order */
	uint64_t inflight_total;
	tl_mesh_gather *gathers; /* in flight from this shard (tl_shard_gather) */
	tl_mesh_gate *gates_due; /* closed gates with nothing in flight, to deliver */
	tl_completion *batch;
	uint32_t bat_i, bat_n; /* the batch entry being handled, and how many (0: none) */
	/* The call whose fn runs now (NULL: none), from shard call_src, and
	 * whether fn deferred its result (tl_shard_defer). */
	const struct tl_mesh_msg *call;
	uint32_t call_src, call_deferred;
	int phase, mesh_closed, pass_busy;
	uint32_t last_nhandles;
	uint64_t drain_deadline, last_pub, pass_end;
	uint64_t mesh_comp[TL_STATS_KINDS];
	uint64_t cpu_read;  /* when cpu_ns was last read */
	/* cfg.mesh_spin_ns (0 on a CPU shared with another shard), the end
	 * of the current polling window (0: none), and whether the last pass
	 * took mesh messages. */
	uint64_t spin_ns, spin_until;
	int mesh_got;
	/* foreign.c: per owner, the blocks freed here that wait to go to it
	 * (fq[t]; read by t at the stop, freed by the runtime's teardown),
	 * and the owners that have some (fdirty). */
	struct tl__freeq *fq;
	uint32_t *fdirty;
	uint32_t nfdirty;
	uint64_t *vals;     /* the program's values (tl_shard_counter_add, ...) */
	uint32_t nvals;
	tl_stats_shard st;
	int setup_rc;
	/* sched.c's: its state, and its runnable tasks (0: it has none to run). */
	struct tl__sched *sched;
	uint32_t tasks;
};

struct tl_runtime {
	tl_runtime_config cfg;
	tl_plan plan;
	uint32_t n;
	struct pair *pairs;
	tl_shard *shards;

	tl__os_mutex mu;
	tl__os_cond cv;
	uint32_t nready, ncreated;
	int go, started, joined, barrier_ok;
	tl__os_barrier barrier;
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
	void *region_map; /* Windows: the mapping's handle */
	char stats_dir[TL__STATS_DIR_MAX];
	char region_name[16];
	char stats_why[320];
	int stats_rc;  /* why cfg.stats asked for a region and got none, or 0 */
	struct tl__stats_hdr *hdr;
	struct tl__stats_fam *fams; /* the region's family table */
	char (*labels)[TL_STATS_LABEL_MAX];
	uint8_t *vkind;             /* TL_STAT_* of each value slot in use */
	uint32_t nfams, nvals;
	tl__os_mutex meta_mu;    /* label changes from any thread */

	int sig_installed;
	_Atomic int arenas;
	const char *arenas_why;

	/* Scheduling groups declared (sched.c): [0] is main once any is,
	 * each with the id of its stats family's row 0. */
	struct tl__sched_decl {
		char name[TL_SCHED_NAME_MAX];
		uint32_t shares;
		int stat;
	} sgroups[TL_SCHED_GROUPS];
	uint32_t nsgroups;
};

/* Hand a completion to the handler its token names, else on_completion:
 * the one place a shard runs the program's handlers (turn batches in
 * shard.c, mesh messages in mesh.c). */
static inline void tl__rt_dispatch(tl_shard *s, const tl_completion *c)
{
	const tl_runtime_config *cfg = &s->rt->cfg;
	unsigned h = tl_token_handler(c->token);
	tl_shard_handler fn = h < TL_RT_HANDLERS ? cfg->handlers[h] : NULL;

	if (!fn)
		fn = cfg->on_completion;
	if (fn)
		fn(s, c);
}

/* ---- runtime.c ---- */

/* Record the runtime's first failure: its code and a one-line reason. */
void tl__rt_fail(tl_runtime *rt, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Wake every shard that has a poster (any thread). */
void tl__rt_wake_all(tl_runtime *rt);

/* ---- arena.c ---- */

/* Bind the calling shard thread to its own arena (or record why not in
 * rt->arenas / rt->arenas_why): never a reason to refuse to run. */
void tl__rt_arena_setup(tl_shard *s);
/* Why arenas are off in this build ("" when they are built in). */
const char *tl__rt_arenas_build_why(void);

/* ---- stats_writer.c ---- */

/* The region cannot be published: say why on stderr, once, and keep the
 * reason in rt->stats_why. */
void tl__rt_stats_off(tl_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Make the region (shared memory, or plain memory when stats are off or
 * cannot be published: rt->stats_why says why), then fill its header and
 * point each shard at its record. 0, -EBUSY (this process already
 * publishes one) or -ENOMEM. */
int tl__rt_region_create(tl_runtime *rt);
/* Unmap and unlink it (or free it); safe when there is none. */
void tl__rt_region_destroy(tl_runtime *rt);
/* The runtime's state in the header (TL_STATS_*). */
void tl__rt_set_state(tl_runtime *rt, uint32_t state);
/* Copy the shard's counters into its record (shard thread). */
void tl__rt_publish(tl_shard *s, uint64_t now);
/* Account one pass of busy ns: histogram, longest, stalls. */
void tl__rt_account_pass(tl_shard *s, uint64_t busy);

/* ---- stats_shm.c (POSIX), stats_shm_win.c (Windows): the region's home ---- */

/* Make the shared region of size bytes (zeroed) where this user's readers
 * find it: rt->region, region_size and region_shm set, with what the
 * platform holds for it. 0, or a negative errno with the reason given to
 * tl__rt_stats_off. */
int tl__rt_shm_create(tl_runtime *rt, size_t size);
/* Unmap it and take its name away (readers that hold it keep their view). */
void tl__rt_shm_destroy(tl_runtime *rt);
/* This process as the region's header names it: pid, user, start time
 * (the units the platform's reader checks: /proc's ticks, FILETIME). */
void tl__rt_shm_identity(int32_t *pid, uint32_t *uid, uint64_t *start);

/* ---- mesh.c ---- */

/* The shard's private mesh state and its inbound rings (on its node);
 * freed by tl__mesh_teardown (also after a failed setup). 0 or -ENOMEM. */
int tl__mesh_setup(tl_shard *s);
void tl__mesh_teardown(tl_shard *s);
/* Take up to budget messages from each inbound ring, running them in
 * place. Returns 1 if some ring still holds messages. */
int tl__mesh_receive(tl_shard *s, uint32_t budget);
/* Something in an inbound ring? Exact for the consuming thread. */
int tl__mesh_inbound_ready(tl_shard *s);
/* Without arm: push backlogged results, deliver due room completions.
 * With arm (before parking): ask for room wakes; 1 if room turned up. */
int tl__mesh_room_check(tl_shard *s, int arm);
/* Publish what was staged this pass and wake each target once. */
void tl__mesh_flush(tl_shard *s);
/* Close the shard's side of the mesh for good: results still waiting are
 * dropped (counted), staged messages published. */
void tl__mesh_close(tl_shard *s);
/* At the stop, once no message can arrive any more: end the gathers still
 * in flight (their parts not back are lost) with -EPIPE completions, and
 * count the gated calls still out as dropped, delivering the gates due. */
void tl__mesh_end_gathers(tl_shard *s);
/* Deliver the completions of closed gates with nothing in flight. */
void tl__mesh_gates_due(tl_shard *s);
/* At a pass's end: send the waiting gathers and every batcher's chains
 * that can go (mesh.c). */
void tl__mesh_batches_flush(tl_shard *s);
/* Messages waiting in this shard's inbound rings, results in its backlogs. */
void tl__mesh_depths(tl_shard *s, uint64_t *inbound, uint64_t *backlog);

/* ---- sched.c ---- */

/* Where a pass's time went, for the stall report: the turn (exact, from
 * tl_turn_info) and coarse marks after the handlers, the mesh and on_pass
 * (0: that part did nothing, no mark was taken). */
struct tl__pass_marks {
	uint64_t turn_end;  /* the pass's start + the turn's waited_ns */
	uint64_t turn_ns;   /* the turn outside its OS wait */
	uint64_t handlers_end, mesh_end, on_pass_end;
};

/* The config's scheduling defaults, and the first bad field (or NULL). */
void tl__sched_config_init(tl_runtime_config *c);
const char *tl__sched_bad_field(const tl_runtime_config *c);
/* The shard's scheduler: task records, groups (after its values exist).
 * 0 or -ENOMEM; tl__sched_teardown copes with a failed setup. */
int tl__sched_setup(tl_shard *s);
void tl__sched_teardown(tl_shard *s);
/* Run tasks for this pass (s->tasks != 0): t0 is the pass's start, idle
 * its OS wait, active whether its handlers had work. 1 while tasks remain
 * runnable. */
int tl__sched_run(tl_shard *s, uint64_t t0, uint64_t idle, int active);
/* The pass is over (busy ns outside OS waits): charge main, and report a
 * stall naming where it went. */
void tl__sched_pass_end(tl_shard *s, uint64_t busy, const struct tl__pass_marks *pm);
/* The stop begins: end every task with -ECANCELED, refuse new ones. */
void tl__sched_stop(tl_shard *s);
/* Send a list of blocks (foreign.c) to their owner t as one message: 0,
 * -ENOBUFS (refused: the shard is woken when there is room), -EPIPE. */
int tl__mesh_post_free(tl_shard *s, uint32_t t, void *head);

/* ---- foreign.c ---- */

/* The shard's queues of blocks for their owners (shard thread, at setup):
 * 0 or -ENOMEM. */
int tl__foreign_setup(tl_shard *s);
/* Send each owner what waits for it (the end of a pass). */
void tl__foreign_flush(tl_shard *s);
/* A list of blocks another shard freed, which this shard allocated: free
 * them. */
void tl__foreign_take(tl_shard *s, void *head);
/* At the stop, after the last handlers ran and with every shard here:
 * free the blocks the others still hold for this shard. */
void tl__foreign_finish(tl_shard *s);
/* Free what is still queued anywhere, and the queues (teardown, once the
 * threads are gone). */
void tl__foreign_destroy(tl_runtime *rt);

/* ---- shard.c ---- */

/* A shard thread: set up, wait for the go, run, tear down. */
TL__OS_THREAD_FN tl__shard_main(void *arg);

#endif /* TL_SHARDS_RUNTIME_INT_H */
