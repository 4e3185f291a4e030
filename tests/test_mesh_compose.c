/* tests/test_mesh_compose.c: CUnit tests of cross-shard composition: gathers (one completion for many parts, all or nothing, the end at a stop), order per target, credit waits, fn's writes seen on the result (a TSan test), gates (one completion once every call under one is over, at a stop too), deferred replies (a call answered later by its shard, at a stop too), batched calls (a pass's items for one target in one call, kept in order while the mesh has no room, ended at a stop), and gathers that wait for room (all parts at once, in order, ended at a stop); on Linux and, as win-mesh-compose, on Windows. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shard_test.h"
#include "os.h" /* yields on both OSes */

#define NS 3
#define ROUNDS 200
#define CELLS 64

/* ---- gathers: every part's result, fn's plain writes seen on the completion ---- */

struct gat {
	tl_mesh_gather g;
	tl_mesh_part parts[NS];
	/* Plain memory: fn writes its shard's row, the caller reads it on the
	 * completion with no lock. Only the mesh's release/acquire orders the
	 * two; TSan reports a race if it did not. */
	uint64_t cells[NS][CELLS];
	uint32_t round;
	int list_rc, dup_rc, busy_rc, refused_rc, blocked, credits_after, nones;
	int done;
};

static struct gat G;

static int64_t gat_fn(tl_shard *s, void *arg)
{
	struct gat *g = arg;
	uint32_t me = tl_shard_id(s);

	for (int i = 0; i < CELLS; i++)
		g->cells[me][i] = (uint64_t)g->round * 1000 + me * 100 + (uint64_t)i;
	return 100 + me;
}

static void gat_next(tl_shard *s)
{
	static const uint32_t some[] = {2, 0};
	int rc;

	/* Even rounds go to every shard, odd ones to the list {2, 0}. */
	if (G.round & 1)
		rc = tl_shard_gather(s, &G.g, some, 2, gat_fn, &G, G.round);
	else
		rc = tl_shard_gather(s, &G.g, NULL, 0, gat_fn, &G, G.round);
	ST_CHECK(rc == ((G.round & 1) ? 2 : NS));
	if (G.round == 1) {
		G.list_rc = rc;
		/* In flight: the gather is the runtime's until its completion. */
		G.busy_rc = tl_shard_gather(s, &G.g, NULL, 0, gat_fn, &G, 0);
	}
}

static int gat_launch(tl_shard *s, void *arg)
{
	static const uint32_t dup[] = {1, 1};
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	ST_CHECK(tl_mesh_gather_init(&G.g, G.parts, NS) == 0);
	G.dup_rc = tl_shard_gather(s, &G.g, dup, 2, gat_fn, &G, 0);
	/* All or nothing: with the only credit to 1 taken, a gather to all is
	 * refused, names 1, and takes no credit from 0 or 2. */
	ST_CHECK(tl_shard_submit_to(s, 1, gat_fn, &G, 0x5eed) == 0);
	G.refused_rc = tl_shard_gather(s, &G.g, NULL, 0, gat_fn, &G, 0);
	G.blocked = (int)G.g.blocked;
	G.credits_after = tl_shard_credits(s, 0) + tl_shard_credits(s, 2);
	for (int t = 0; t < NS; t++)
		G.nones += G.parts[t].state == TL_PART_NONE;
	return 0;
}

static void gat_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || tl_shard_id(s) != 0)
		return;
	if (!(c->aux & TL_MESH_GATHER)) {
		/* The lone submit_to: its credit is back, the gathers begin. */
		ST_CHECK(c->token == 0x5eed);
		gat_next(s);
		return;
	}
	ST_CHECK(c->aux == (0 | TL_MESH_RESULT | TL_MESH_GATHER));
	ST_CHECK(c->u.mesh.arg == &G.g && c->token == G.round && !G.g.busy);
	for (uint32_t t = 0; t < NS; t++) {
		int target = !(G.round & 1) || t != 1;

		if (!target) {
			ST_CHECK(G.parts[t].state == TL_PART_NONE);
			continue;
		}
		ST_CHECK(G.parts[t].state == TL_PART_DONE);
		ST_CHECK(G.parts[t].result == 100 + (int64_t)t);
		for (int i = 0; i < CELLS; i++)
			ST_CHECK(G.cells[t][i] == (uint64_t)G.round * 1000 + t * 100 + (uint64_t)i);
	}
	ST_CHECK(c->result == ((G.round & 1) ? 2 : NS) && c->u.mesh.payload == (uint64_t)c->result);
	if (++G.round == ROUNDS) {
		G.done = 1;
		tl_runtime_stop(tl_shard_runtime(s));
		return;
	}
	gat_next(s);
}

static void test_gather(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gather");

	memset(&G, 0, sizeof G);
	st_config(&cfg, NS);
	cfg.mesh_inflight = 1;
	cfg.on_launch = gat_launch;
	cfg.on_completion = gat_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(G.done, 1);
	CU_ASSERT_EQUAL(G.round, ROUNDS);
	CU_ASSERT_EQUAL(G.dup_rc, -EINVAL);
	CU_ASSERT_EQUAL(G.refused_rc, -ENOBUFS);
	CU_ASSERT_EQUAL(G.blocked, 1);
	CU_ASSERT_EQUAL(G.credits_after, 2);
	CU_ASSERT_EQUAL(G.nones, NS);
	CU_ASSERT_EQUAL(G.list_rc, 2);
	CU_ASSERT_EQUAL(G.busy_rc, -EBUSY);
	st_end(fds);
}

/* ---- a gather outstanding when the runtime stops ---- */

struct gstop {
	struct st_stop_dance stop;
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	atomic_int ran[2];
	int64_t result;
	uint32_t st[2];
	int ended, sent_rc;
};

static struct gstop GS;

static int64_t gs_fn(tl_shard *s, void *arg)
{
	(void)arg;
	atomic_store(&GS.ran[tl_shard_id(s)], 1);
	return 7;
}

/* The part on 1 runs at the last delivery, after 1's mesh closed: its
 * result is lost. */
static void gs_send(tl_shard *s)
{
	static const uint32_t both[] = {0, 1};

	ST_CHECK(tl_mesh_gather_init(&GS.g, GS.parts, 2) == 0);
	GS.sent_rc = tl_shard_gather(s, &GS.g, both, 2, gs_fn, NULL, 0x57);
}

static void gs_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_GATHER))
		return;
	ST_CHECK(tl_shard_id(s) == 0 && c->u.mesh.arg == &GS.g && c->token == 0x57);
	/* Every part's fn has run by now: arg and g may go. */
	ST_CHECK(atomic_load(&GS.ran[0]) && atomic_load(&GS.ran[1]));
	GS.result = c->result;
	GS.st[0] = GS.parts[0].state;
	GS.st[1] = GS.parts[1].state;
	GS.ended++;
	/* The mesh is closed: a new gather is refused. */
	ST_CHECK(tl_shard_gather(s, &GS.g, NULL, 0, gs_fn, NULL, 0) == -EPIPE);
}

static void test_gather_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gather_stop");

	memset(&GS, 0, sizeof GS);
	st_config(&cfg, 2);
	st_stop_dance_config(&cfg, &GS.stop, gs_send);
	cfg.on_completion = gs_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(GS.sent_rc, 2);
	CU_ASSERT_EQUAL(GS.ended, 1);
	CU_ASSERT_EQUAL(GS.result, -EPIPE);
	CU_ASSERT_EQUAL(GS.st[1], TL_PART_LOST);
	/* The part on shard 0 itself may have come back before the stop. */
	CU_ASSERT_TRUE(GS.st[0] == TL_PART_DONE || GS.st[0] == TL_PART_LOST);
	CU_ASSERT_FALSE(GS.g.busy);
	st_end(fds);
}

/* ---- order per target: calls, gather parts and posts run as sent ---- */

#define ORD_N 3000

struct ord {
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	uint64_t next_seen;  /* shard 1's */
	uint64_t sent, back; /* shard 0's */
	int bad;
	int gather_busy;
};

static struct ord O;

static void ord_see(uint64_t seq)
{
	if (seq != O.next_seen && O.bad++ < 3)
		fprintf(stderr, "  order: ran %llu, expected %llu\n", (unsigned long long)seq,
			(unsigned long long)O.next_seen);
	O.next_seen = seq + 1;
}

static int64_t ord_fn(tl_shard *s, void *arg)
{
	(void)s;
	ord_see((uint64_t)(uintptr_t)arg);
	return 0;
}

static int ord_pass(tl_shard *s, void *arg)
{
	static const uint32_t one[] = {1};
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	while (O.sent < ORD_N) {
		void *a = (void *)(uintptr_t)O.sent;
		int rc;

		switch (O.sent % 3) {
		case 0:
			rc = tl_shard_submit_to(s, 1, ord_fn, a, 1);
			break;
		case 1:
			if (O.gather_busy)
				return 1;
			rc = tl_shard_gather(s, &O.g, one, 1, ord_fn, a, 2);
			O.gather_busy = rc == 1;
			break;
		default:
			rc = tl_shard_post(s, 1, 3, O.sent);
			break;
		}
		if (rc == -ENOBUFS)
			return 1;
		ST_CHECK(rc >= 0);
		O.sent++;
	}
	return 0;
}

static void ord_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH)
		return;
	if (tl_shard_id(s) == 1) {
		if (c->token == 3)
			ord_see(c->u.mesh.payload);
		return;
	}
	if (c->token == 2)
		O.gather_busy = 0;
	if (++O.back == ORD_N - ORD_N / 3)
		tl_runtime_stop(tl_shard_runtime(s));
}

static int ord_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0)
		ST_CHECK(tl_mesh_gather_init(&O.g, O.parts, 2) == 0);
	return 0;
}

static void test_order(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/order");

	memset(&O, 0, sizeof O);
	st_config(&cfg, 2);
	cfg.mesh_capacity = 16; /* refusals on the way */
	cfg.on_launch = ord_launch;
	cfg.on_pass = ord_pass;
	cfg.on_completion = ord_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(O.bad, 0);
	CU_ASSERT_EQUAL(O.next_seen, ORD_N);
	st_end(fds);
}

/* ---- a wait after a credit refusal fires only once a result is back ---- */

struct cw {
	atomic_int release;
	int refused_rc, credits, wait_rc, room_results, after_rc;
	uint32_t passes, results, rooms;
	int waiting;
};

static struct cw W;

static int64_t cw_fn(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	/* Hold the result until shard 0 has had its passes. */
	ST_CHECK(st_spin_until(&W.release));
	return 0;
}

static int cw_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	ST_CHECK(tl_shard_submit_to(s, 1, cw_fn, NULL, 1) == 0);
	ST_CHECK(tl_shard_submit_to(s, 1, cw_fn, NULL, 1) == 0);
	/* The ring has room; the credits (2) are used up. */
	W.refused_rc = tl_shard_submit_to(s, 1, cw_fn, NULL, 1);
	W.credits = tl_shard_credits(s, 1);
	W.wait_rc = tl_shard_wait_room(s, 1, 0x3a17);
	W.waiting = 1;
	return 0;
}

static int cw_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0 || !W.waiting)
		return 0;
	/* Passes go by with the room wait pending and no result back: a
	 * wait for ring room alone would fire in the first of them. */
	if (++W.passes == 50)
		atomic_store(&W.release, 1);
	return 1;
}

static void cw_handler(tl_shard *s, const tl_completion *c)
{
	if (tl_shard_id(s) != 0)
		return;
	if (c->kind == TL_K_ROOM) {
		ST_CHECK(c->token == 0x3a17 && c->aux == 1);
		W.rooms++;
		W.room_results = (int)W.results;
		W.waiting = 0;
		atomic_store(&W.release, 1); /* early only if the wait is wrong */
		W.after_rc = tl_shard_submit_to(s, 1, cw_fn, NULL, 2);
		if (W.after_rc)
			tl_runtime_stop(tl_shard_runtime(s));
	} else if (c->kind == TL_K_MESH && c->token == 2) {
		tl_runtime_stop(tl_shard_runtime(s));
	} else if (c->kind == TL_K_MESH) {
		W.results++;
	}
}

static void test_credit_wait(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/credit_wait");

	memset(&W, 0, sizeof W);
	st_config(&cfg, 2);
	cfg.mesh_inflight = 2;
	cfg.on_launch = cw_launch;
	cfg.on_pass = cw_pass;
	cfg.on_completion = cw_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(W.refused_rc, -ENOBUFS);
	CU_ASSERT_EQUAL(W.credits, 0);
	CU_ASSERT_EQUAL(W.wait_rc, 0);
	CU_ASSERT_EQUAL(W.rooms, 1);
	CU_ASSERT_TRUE(W.passes >= 50);
	CU_ASSERT_TRUE(W.room_results >= 1); /* the wake came after a result */
	CU_ASSERT_EQUAL(W.after_rc, 0);      /* and the call then went */
	st_end(fds);
}

/* ---- gates: one completion once every call under the gate is over ---- */

#define GATE_CALLS 12

struct gt {
	tl_mesh_gate g, empty;
	uint32_t round, gated_results, plain_results, gate_done, empty_done;
	int in_close, bad, close_busy, submit_busy, reinit;
};

static struct gt T;

static int64_t gt_fn(tl_shard *s, void *arg)
{
	(void)arg;
	return tl_shard_id(s);
}

static void gt_round(tl_shard *s)
{
	for (uint32_t i = 0; i < GATE_CALLS; i++) {
		uint32_t t = i % NS;

		ST_CHECK(tl_shard_submit_gated(s, &T.g, t, gt_fn, NULL, 1) == 0);
		/* Ungated calls in between must not count for the gate. */
		ST_CHECK(tl_shard_submit_to(s, t, gt_fn, NULL, 2) == 0);
	}
	ST_CHECK(T.g.inflight == GATE_CALLS);
	T.in_close = 1;
	ST_CHECK(tl_shard_gate_close(s, &T.g, 0x9a7e) == 0);
	T.in_close = 0;
	if (T.round == 0) {
		T.close_busy = tl_shard_gate_close(s, &T.g, 0x9a7e);
		T.submit_busy = tl_shard_submit_gated(s, &T.g, 1, gt_fn, NULL, 1);
		/* A gate with nothing in flight completes too, later. */
		ST_CHECK(tl_mesh_gate_init(&T.empty) == 0);
		T.in_close = 1;
		ST_CHECK(tl_shard_gate_close(s, &T.empty, 0xe4) == 0);
		T.in_close = 0;
	}
}

static int gt_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) == 0) {
		ST_CHECK(tl_mesh_gate_init(&T.g) == 0);
		gt_round(s);
	}
	return 0;
}

static void gt_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || tl_shard_id(s) != 0)
		return;
	if (T.in_close)
		T.bad++; /* nothing is delivered from inside tl_shard_gate_close */
	if (!(c->aux & TL_MESH_GATE)) {
		if (c->result != (int64_t)TL_MESH_SHARD(c->aux))
			T.bad++;
		if (c->token == 1)
			T.gated_results++;
		else
			T.plain_results++;
		return;
	}
	ST_CHECK(c->aux == (0 | TL_MESH_RESULT | TL_MESH_GATE) && c->result == 0);
	if (c->u.mesh.arg == &T.empty) {
		ST_CHECK(c->token == 0xe4 && !T.empty.closing);
		T.empty_done++;
		return;
	}
	ST_CHECK(c->u.mesh.arg == &T.g && c->token == 0x9a7e);
	/* After the result of every call under it. */
	ST_CHECK(T.gated_results == (T.round + 1) * GATE_CALLS);
	ST_CHECK(T.g.inflight == 0 && !T.g.closing && T.g.dropped == 0);
	T.gate_done++;
	if (++T.round == 2) {
		tl_runtime_stop(tl_shard_runtime(s));
		return;
	}
	/* Done: the gate may be set up again and reused. */
	T.reinit = tl_mesh_gate_init(&T.g);
	gt_round(s);
}

static void test_gate(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gate");

	memset(&T, 0, sizeof T);
	st_config(&cfg, NS);
	cfg.on_launch = gt_launch;
	cfg.on_completion = gt_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(T.bad, 0);
	CU_ASSERT_EQUAL(T.gate_done, 2);
	CU_ASSERT_EQUAL(T.empty_done, 1);
	CU_ASSERT_EQUAL(T.gated_results, 2 * GATE_CALLS);
	CU_ASSERT_TRUE(T.plain_results >= GATE_CALLS);
	CU_ASSERT_EQUAL(T.close_busy, -EBUSY);
	CU_ASSERT_EQUAL(T.submit_busy, -EBUSY);
	CU_ASSERT_EQUAL(T.reinit, 0);
	st_end(fds);
}

/* A gate with a call out when the runtime stops: the call's result is
 * dropped, the gate still completes, once fn has run. */
struct gtstop {
	struct st_stop_dance stop;
	tl_mesh_gate g;
	atomic_int ran;
	int64_t result;
	int done;
};

static struct gtstop TS;

static int64_t ts_fn(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_store(&TS.ran, 1);
	return 0;
}

static void ts_send(tl_shard *s)
{
	ST_CHECK(tl_mesh_gate_init(&TS.g) == 0);
	ST_CHECK(tl_shard_submit_gated(s, &TS.g, 1, ts_fn, NULL, 1) == 0);
	ST_CHECK(tl_shard_gate_close(s, &TS.g, 0x6a7e) == 0);
}

static void ts_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_GATE))
		return;
	ST_CHECK(tl_shard_id(s) == 0 && c->u.mesh.arg == &TS.g && c->token == 0x6a7e);
	ST_CHECK(atomic_load(&TS.ran));
	TS.result = c->result;
	TS.done++;
}

static void test_gate_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gate_stop");

	memset(&TS, 0, sizeof TS);
	st_config(&cfg, 2);
	st_stop_dance_config(&cfg, &TS.stop, ts_send);
	cfg.on_completion = ts_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(TS.done, 1);
	CU_ASSERT_EQUAL(TS.result, 1); /* one call, its result dropped */
	CU_ASSERT_EQUAL(TS.g.inflight, 0);
	CU_ASSERT_EQUAL(TS.g.dropped, 1);
	st_end(fds);
}

/* ---- deferred replies: a call answered later by the shard it ran on ---- */

enum { DF_SLOW = 1, DF_FAST, DF_GATED, DF_FAST2, DF_GATE, DF_GATE2, DF_GATHER, DF_ANSWER };

struct dfr {
	tl_mesh_reply r[3]; /* the plain call's and the gated call's (on 1), the gather part's (on 2) */
	tl_mesh_gather g;
	tl_mesh_part parts[NS];
	tl_mesh_gate gate, gate2; /* gate2's call overtakes gate's deferred one */
	uint64_t cell;      /* shard 1 writes it before its reply; 0 reads it on the result */
	atomic_int answered[3];
	int outside_rc, twice_rc, again_rc, stranger_rc, reply_rc[3];
	int credits_at_fast, fast_first, results, gate_done, gate_after_result, gate2_done, gate2_first, done;
};

static struct dfr D;

/* Defer into r[i] and answer from a later handler: a post to itself. */
static int64_t df_later(tl_shard *s, int i)
{
	ST_CHECK(tl_shard_defer(s, &D.r[i]) == 0);
	if (i == 0)
		D.twice_rc = tl_shard_defer(s, &D.r[0]);
	ST_CHECK(tl_shard_post(s, tl_shard_id(s), DF_ANSWER, (uint64_t)i) == 0);
	return 999; /* ignored: the reply is the result */
}

static int64_t df_slow(tl_shard *s, void *arg) { (void)arg; return df_later(s, 0); }
static int64_t df_gated(tl_shard *s, void *arg) { (void)arg; return df_later(s, 1); }
static int64_t df_fast(tl_shard *s, void *arg) { (void)s; (void)arg; return 5; }

static int64_t df_part(tl_shard *s, void *arg)
{
	(void)arg;
	return tl_shard_id(s) == 2 ? df_later(s, 2) : 100 + tl_shard_id(s);
}

static int df_launch(tl_shard *s, void *arg)
{
	tl_mesh_reply r;

	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	D.outside_rc = tl_shard_defer(s, &r); /* not inside a mesh function */
	ST_CHECK(tl_mesh_gather_init(&D.g, D.parts, NS) == 0);
	ST_CHECK(tl_mesh_gate_init(&D.gate) == 0);
	ST_CHECK(tl_mesh_gate_init(&D.gate2) == 0);
	ST_CHECK(tl_shard_submit_to(s, 1, df_slow, &D, DF_SLOW) == 0);
	ST_CHECK(tl_shard_submit_to(s, 1, df_fast, &D, DF_FAST) == 0);
	return 0;
}

static void df_handler(tl_shard *s, const tl_completion *c)
{
	tl_mesh_reply stranger = {0};

	if (c->kind != TL_K_MESH)
		return;
	if (c->token == DF_ANSWER) { /* on 1 or 2: the deferred call's answer */
		int i = (int)c->u.mesh.payload;

		if (i == 0)
			D.cell = 4242;
		atomic_store(&D.answered[i], 1);
		D.reply_rc[i] = tl_shard_reply(s, &D.r[i], 77 + i);
		if (i == 0) {
			D.again_rc = tl_shard_reply(s, &D.r[0], 1);
			D.stranger_rc = tl_shard_reply(s, &stranger, 1);
		}
		return;
	}
	ST_CHECK(tl_shard_id(s) == 0);
	switch (c->token) {
	case DF_FAST: /* answered at once: overtakes the deferred call before it */
		D.fast_first = D.results == 0;
		D.credits_at_fast = tl_shard_credits(s, 1); /* the deferred call holds one */
		ST_CHECK(c->result == 5);
		D.results++;
		break;
	case DF_SLOW:
		ST_CHECK(c->result == 77 && c->u.mesh.arg == &D && c->aux == (1 | TL_MESH_RESULT));
		ST_CHECK(D.cell == 4242); /* the replier's plain write, seen (TSan checks how) */
		D.results++;
		/* Two gates on one target: gate's call is deferred, gate2's is
		 * answered at once and overtakes it. Each result counts for its
		 * own gate. */
		ST_CHECK(tl_shard_submit_gated(s, &D.gate, 1, df_gated, &D, DF_GATED) == 0);
		ST_CHECK(tl_shard_submit_gated(s, &D.gate2, 1, df_fast, &D, DF_FAST2) == 0);
		ST_CHECK(tl_shard_gate_close(s, &D.gate, DF_GATE) == 0);
		ST_CHECK(tl_shard_gate_close(s, &D.gate2, DF_GATE2) == 0);
		break;
	case DF_FAST2:
		ST_CHECK(c->result == 5);
		break;
	case DF_GATE2:
		D.gate2_first = !D.gate_done && D.results == 2; /* before gate's deferred result */
		D.gate2_done++;
		ST_CHECK(c->result == 0);
		break;
	case DF_GATED:
		ST_CHECK(c->result == 78 && atomic_load(&D.answered[1]));
		D.results++;
		break;
	case DF_GATE:
		D.gate_after_result = D.results == 3;
		D.gate_done++;
		ST_CHECK(c->result == 0);
		ST_CHECK(tl_shard_gather(s, &D.g, NULL, 0, df_part, &D, DF_GATHER) == NS);
		break;
	case DF_GATHER: /* not before the deferred part's reply */
		ST_CHECK(atomic_load(&D.answered[2]) && c->result == NS);
		ST_CHECK(D.parts[0].result == 100 && D.parts[1].result == 101 && D.parts[2].result == 79);
		D.done = 1;
		tl_runtime_stop(tl_shard_runtime(s));
		break;
	}
}

static void test_defer(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/defer");

	memset(&D, 0, sizeof D);
	st_config(&cfg, NS);
	cfg.mesh_inflight = 2;
	cfg.on_launch = df_launch;
	cfg.on_completion = df_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(D.done, 1);
	CU_ASSERT_EQUAL(D.outside_rc, -EINVAL);
	CU_ASSERT_EQUAL(D.twice_rc, -EINVAL);
	CU_ASSERT_EQUAL(D.reply_rc[0], 0);
	CU_ASSERT_EQUAL(D.reply_rc[1], 0);
	CU_ASSERT_EQUAL(D.reply_rc[2], 0);
	CU_ASSERT_EQUAL(D.again_rc, -EINVAL);
	CU_ASSERT_EQUAL(D.stranger_rc, -EINVAL);
	CU_ASSERT_EQUAL(D.fast_first, 1);
	CU_ASSERT_EQUAL(D.credits_at_fast, 1);
	CU_ASSERT_EQUAL(D.gate_done, 1);
	CU_ASSERT_EQUAL(D.gate_after_result, 1);
	CU_ASSERT_EQUAL(D.gate2_done, 1);
	CU_ASSERT_EQUAL(D.gate2_first, 1);
	CU_ASSERT_EQUAL(D.results, 3);
	st_end(fds);
}

/* A deferred call run after its shard's mesh closed: the reply is refused
 * with -EPIPE, the caller's gather ends with that part lost. */
struct dstop {
	struct st_stop_dance stop;
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	tl_mesh_reply r;
	atomic_int ran;
	int64_t result;
	uint32_t st1;
	int reply_rc, again_rc, ended;
};

static struct dstop DS;

static int64_t ds_fn(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 1)
		return 0;
	ST_CHECK(tl_shard_defer(s, &DS.r) == 0);
	DS.reply_rc = tl_shard_reply(s, &DS.r, 5); /* from inside fn, after defer: allowed */
	DS.again_rc = tl_shard_reply(s, &DS.r, 5);
	atomic_store(&DS.ran, 1);
	return 0;
}

/* As gather_stop's: shard 1 runs the part after its mesh closed. */
static void ds_send(tl_shard *s)
{
	static const uint32_t both[] = {0, 1};

	ST_CHECK(tl_mesh_gather_init(&DS.g, DS.parts, 2) == 0);
	ST_CHECK(tl_shard_gather(s, &DS.g, both, 2, ds_fn, NULL, 0xd5) == 2);
}

static void ds_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_GATHER))
		return;
	ST_CHECK(tl_shard_id(s) == 0 && atomic_load(&DS.ran));
	DS.result = c->result;
	DS.st1 = DS.parts[1].state;
	DS.ended++;
}

static void test_defer_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/defer_stop");

	memset(&DS, 0, sizeof DS);
	st_config(&cfg, 2);
	st_stop_dance_config(&cfg, &DS.stop, ds_send);
	cfg.on_completion = ds_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(DS.ended, 1);
	CU_ASSERT_EQUAL(DS.reply_rc, -EPIPE);
	CU_ASSERT_EQUAL(DS.again_rc, -EINVAL);
	CU_ASSERT_EQUAL(DS.result, -EPIPE);
	CU_ASSERT_EQUAL(DS.st1, TL_PART_LOST);
	st_end(fds);
}

/* ---- batched calls: a pass's items for one target in one call ---- */

#define BT_N 3000 /* items */
#define BT_STEP 50 /* added per pass, split between shards 1 and 2 */

struct bitem {
	tl_mesh_item link;
	uint32_t seq, target, ran_on;
};

struct bat {
	tl_mesh_batcher b;
	tl_mesh_chain chains[NS];
	struct bitem items[BT_N];
	uint32_t added, back, batches, biggest1;
	uint64_t last_seen[NS]; /* on each target: the last seq it ran, + 1 */
	atomic_int first_held, passes_held;
	atomic_int bad; /* shards 0, 1 and 2 count here */
	int init_rc[4], add_rc[2];
};

static struct bat B;

static int64_t bt_fn(tl_shard *s, void *arg)
{
	uint32_t me = tl_shard_id(s), n = 0;

	/* The first batch to 1 holds its shard until 0 has made three more
	 * passes: their items find no credit and must join one chain. */
	if (me == 1 && !atomic_exchange(&B.first_held, 1))
		ST_CHECK(st_spin_until_at_least(&B.passes_held, 3));
	for (tl_mesh_item *it = arg; it; it = it->next, n++) {
		struct bitem *bi = (struct bitem *)it;

		/* In the order added, each on its own target. */
		if (bi->target != me || bi->seq + 1 <= B.last_seen[me])
			atomic_fetch_add(&B.bad, 1);
		B.last_seen[me] = bi->seq + 1;
		bi->ran_on = me;
	}
	return n;
}

static void bt_add(tl_shard *s)
{
	for (int k = 0; k < BT_STEP && B.added < BT_N; k++, B.added++) {
		struct bitem *bi = &B.items[B.added];

		bi->seq = B.added;
		bi->target = 1 + (B.added & 1);
		ST_CHECK(tl_shard_batch_add(s, &B.b, bi->target, &bi->link) == 0);
	}
}

static int bt_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	B.init_rc[0] = tl_mesh_batcher_init(NULL, B.chains, NS, bt_fn, 1);
	B.init_rc[1] = tl_mesh_batcher_init(&B.b, NULL, NS, bt_fn, 1);
	B.init_rc[2] = tl_mesh_batcher_init(&B.b, B.chains, 0, bt_fn, 1);
	B.init_rc[3] = tl_mesh_batcher_init(&B.b, B.chains, NS, NULL, 1);
	ST_CHECK(tl_mesh_batcher_init(&B.b, B.chains, NS, bt_fn, 0xba7c) == 0);
	B.add_rc[0] = tl_shard_batch_add(s, &B.b, NS, &B.items[0].link);
	B.add_rc[1] = tl_shard_batch_add(s, &B.b, 1, NULL);
	bt_add(s);
	return 0;
}

static int bt_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	/* More items only once 1 holds the first batch: the passes of the
	 * hold each add some (no pass may park before it has begun). */
	if (!atomic_load(&B.first_held))
		return 1;
	atomic_fetch_add(&B.passes_held, 1);
	bt_add(s);
	return B.added < BT_N;
}

static void bt_handler(tl_shard *s, const tl_completion *c)
{
	uint32_t n = 0, t = TL_MESH_SHARD(c->aux);

	if (c->kind != TL_K_MESH || tl_shard_id(s) != 0)
		return;
	ST_CHECK(c->token == 0xba7c && c->aux == (t | TL_MESH_RESULT | TL_MESH_BATCH));
	for (tl_mesh_item *it = c->u.mesh.arg; it; it = it->next, n++)
		if (((struct bitem *)it)->ran_on != t) /* fn's writes, seen */
			atomic_fetch_add(&B.bad, 1);
	ST_CHECK(c->result == (int64_t)n && n > 0);
	if (t == 1 && n > B.biggest1)
		B.biggest1 = n;
	B.back += n;
	B.batches++;
	if (B.back == BT_N) {
		ST_CHECK(B.b.queued == 0 && B.b.inflight == 0);
		tl_runtime_stop(tl_shard_runtime(s));
	}
}

static void test_batch(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/batch");

	memset(&B, 0, sizeof B);
	st_config(&cfg, NS);
	cfg.mesh_inflight = 1; /* a batch at a time per target: the rest wait */
	cfg.on_launch = bt_launch;
	cfg.on_pass = bt_pass;
	cfg.on_completion = bt_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	for (int i = 0; i < 4; i++)
		CU_ASSERT_EQUAL(B.init_rc[i], -EINVAL);
	CU_ASSERT_EQUAL(B.add_rc[0], -EINVAL);
	CU_ASSERT_EQUAL(B.add_rc[1], -EINVAL);
	CU_ASSERT_EQUAL(B.back, BT_N);
	CU_ASSERT_EQUAL(atomic_load(&B.bad), 0);
	CU_ASSERT_EQUAL(B.last_seen[1], BT_N - 1);
	CU_ASSERT_EQUAL(B.last_seen[2], BT_N);
	/* Fewer calls than items, and the held target's next batch took the
	 * items of the three passes it could not go in (25 a pass). */
	CU_ASSERT_TRUE(B.batches < BT_N / 10);
	CU_ASSERT_TRUE(B.biggest1 >= 3 * BT_STEP / 2);
	st_end(fds);
}

/* A chain that never went (no credit) when the mesh closed: its completion
 * says -EPIPE, fn never ran on it; an add after that is refused. */
struct bstop {
	struct st_stop_dance stop;
	tl_mesh_batcher b;
	tl_mesh_chain chains[2];
	struct bitem it;
	atomic_int bran;
	int64_t result;
	int ended, add_rc, add_after, first_ok, next_cleared;
};

static struct bstop BS;

static int64_t bs_fn(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_store(&BS.bran, 1);
	return 0;
}

static int64_t bs_call(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	return 0;
}

static void bs_send(tl_shard *s)
{
	ST_CHECK(tl_mesh_batcher_init(&BS.b, BS.chains, 2, bs_fn, 0xb5) == 0);
	/* The one credit to 1 goes to a call that 1 runs only after its mesh
	 * closed: the batch never has room. */
	ST_CHECK(tl_shard_submit_to(s, 1, bs_call, NULL, 1) == 0);
	BS.add_rc = tl_shard_batch_add(s, &BS.b, 1, &BS.it.link);
}

static void bs_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_BATCH))
		return;
	ST_CHECK(tl_shard_id(s) == 0);
	BS.first_ok = c->u.mesh.arg == &BS.it.link && c->token == 0xb5 &&
		      c->aux == (1 | TL_MESH_RESULT | TL_MESH_BATCH);
	BS.result = c->result;
	BS.ended++;
	BS.it.link.next = (tl_mesh_item *)&BS; /* stale, as a reused record's is */
	BS.add_after = tl_shard_batch_add(s, &BS.b, 1, &BS.it.link);
	BS.next_cleared = BS.it.link.next == NULL; /* a walk of the refused item stops */
}

static void test_batch_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/batch_stop");

	memset(&BS, 0, sizeof BS);
	st_config(&cfg, 2);
	cfg.mesh_inflight = 1;
	st_stop_dance_config(&cfg, &BS.stop, bs_send);
	cfg.on_completion = bs_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(BS.add_rc, 0);
	CU_ASSERT_EQUAL(BS.ended, 1);
	CU_ASSERT_EQUAL(BS.first_ok, 1);
	CU_ASSERT_EQUAL(BS.result, -EPIPE);
	CU_ASSERT_EQUAL(atomic_load(&BS.bran), 0);
	CU_ASSERT_EQUAL(BS.add_after, -EPIPE);
	CU_ASSERT_EQUAL(BS.next_cleared, 1);
	CU_ASSERT_EQUAL(BS.b.queued, 0);
	st_end(fds);
}

/* ---- gathers that wait for room instead of being refused ---- */

struct gwt {
	tl_mesh_gather g1, g2;
	tl_mesh_part p1[NS], p2[NS];
	atomic_int held, passes, ran;
	int ran_during_hold, rc1, rc2, dup_rc, busy_rc, waiting1, waiting2, done1, done2;
};

static struct gwt GW;

static int64_t gw_fn(tl_shard *s, void *arg)
{
	(void)arg;
	atomic_fetch_add(&GW.ran, 1);
	return 10 + tl_shard_id(s);
}

/* Holds shard 1 (and the one credit to it) while shard 0 passes three times
 * with both gathers waiting. */
static int64_t gw_hold(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_store(&GW.held, 1);
	ST_CHECK(st_spin_until_at_least(&GW.passes, 3));
	GW.ran_during_hold = atomic_load(&GW.ran);
	return 0;
}

static int gw_launch(tl_shard *s, void *arg)
{
	static const uint32_t dup[] = {2, 2}, some[] = {2, 0};

	(void)arg;
	if (tl_shard_id(s) != 0)
		return 0;
	ST_CHECK(tl_mesh_gather_init(&GW.g1, GW.p1, NS) == 0);
	ST_CHECK(tl_mesh_gather_init(&GW.g2, GW.p2, NS) == 0);
	ST_CHECK(tl_shard_submit_to(s, 1, gw_hold, NULL, 0x401d) == 0);
	GW.rc1 = tl_shard_gather_wait(s, &GW.g1, NULL, 0, gw_fn, NULL, 1); /* 1 has no credit */
	GW.busy_rc = tl_shard_gather_wait(s, &GW.g1, NULL, 0, gw_fn, NULL, 1);
	GW.dup_rc = tl_shard_gather_wait(s, &GW.g2, dup, 2, gw_fn, NULL, 2);
	/* 0 and 2 have room, but g1 waits before it. */
	GW.rc2 = tl_shard_gather_wait(s, &GW.g2, some, 2, gw_fn, NULL, 2);
	GW.waiting1 = (int)GW.g1.waiting;
	GW.waiting2 = (int)GW.g2.waiting;
	return 0;
}

static int gw_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (tl_shard_id(s) != 0 || GW.done1 + GW.done2 == 2)
		return 0;
	if (atomic_load(&GW.held))
		atomic_fetch_add(&GW.passes, 1);
	return 1; /* keep passing while shard 1 holds */
}

static void gw_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || tl_shard_id(s) != 0 || !(c->aux & TL_MESH_GATHER))
		return;
	if (c->token == 1) {
		ST_CHECK(c->u.mesh.arg == &GW.g1 && c->result == NS && !GW.g1.busy && !GW.g1.waiting);
		for (uint32_t t = 0; t < NS; t++)
			ST_CHECK(GW.p1[t].state == TL_PART_DONE && GW.p1[t].result == 10 + (int64_t)t);
		GW.done1++;
	} else {
		ST_CHECK(c->token == 2 && c->u.mesh.arg == &GW.g2 && c->result == 2);
		ST_CHECK(GW.p2[0].result == 10 && GW.p2[2].result == 12 && GW.p2[1].state == TL_PART_NONE);
		GW.done2++;
	}
	if (GW.done1 + GW.done2 == 2)
		tl_runtime_stop(tl_shard_runtime(s));
}

static void test_gather_wait(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gather_wait");

	memset(&GW, 0, sizeof GW);
	st_config(&cfg, NS);
	cfg.mesh_inflight = 1;
	cfg.on_launch = gw_launch;
	cfg.on_pass = gw_pass;
	cfg.on_completion = gw_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(GW.rc1, NS);
	CU_ASSERT_EQUAL(GW.rc2, 2);
	CU_ASSERT_EQUAL(GW.busy_rc, -EBUSY);
	CU_ASSERT_EQUAL(GW.dup_rc, -EINVAL);
	CU_ASSERT_EQUAL(GW.waiting1, 1);
	CU_ASSERT_EQUAL(GW.waiting2, 1);
	CU_ASSERT_EQUAL(GW.ran_during_hold, 0); /* all or nothing, even waiting */
	CU_ASSERT_EQUAL(GW.done1, 1);
	CU_ASSERT_EQUAL(GW.done2, 1);
	CU_ASSERT_EQUAL(atomic_load(&GW.ran), NS + 2);
	st_end(fds);
}

/* A gather still waiting when the mesh closes: -EPIPE, no part ran. */
struct gwstop {
	struct st_stop_dance stop;
	tl_mesh_gather g;
	tl_mesh_part parts[2];
	atomic_int ran;
	int64_t result;
	uint64_t payload;
	int ended, rc, after_rc, nones;
};

static struct gwstop GWS;

static int64_t gws_fn(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_fetch_add(&GWS.ran, 1);
	return 0;
}

/* As batch_stop's: 1's only credit taken by a call it runs late. */
static void gws_send(tl_shard *s)
{
	ST_CHECK(tl_mesh_gather_init(&GWS.g, GWS.parts, 2) == 0);
	ST_CHECK(tl_shard_submit_to(s, 1, bs_call, NULL, 1) == 0);
	GWS.rc = tl_shard_gather_wait(s, &GWS.g, NULL, 0, gws_fn, NULL, 0x6a5);
}

static void gws_handler(tl_shard *s, const tl_completion *c)
{
	if (c->kind != TL_K_MESH || !(c->aux & TL_MESH_GATHER))
		return;
	ST_CHECK(tl_shard_id(s) == 0 && c->token == 0x6a5 && c->u.mesh.arg == &GWS.g);
	GWS.result = c->result;
	GWS.payload = c->u.mesh.payload;
	GWS.nones = (GWS.parts[0].state == TL_PART_NONE) + (GWS.parts[1].state == TL_PART_NONE);
	GWS.ended++;
	GWS.after_rc = tl_shard_gather_wait(s, &GWS.g, NULL, 0, gws_fn, NULL, 0);
}

static void test_gather_wait_stop(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int fds = st_begin("compose/gather_wait_stop");

	memset(&GWS, 0, sizeof GWS);
	st_config(&cfg, 2);
	cfg.mesh_inflight = 1;
	st_stop_dance_config(&cfg, &GWS.stop, gws_send);
	cfg.on_completion = gws_handler;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(GWS.rc, 2);
	CU_ASSERT_EQUAL(GWS.ended, 1);
	CU_ASSERT_EQUAL(GWS.result, -EPIPE);
	CU_ASSERT_EQUAL(GWS.payload, 0);
	CU_ASSERT_EQUAL(GWS.nones, 2);
	CU_ASSERT_EQUAL(atomic_load(&GWS.ran), 0);
	CU_ASSERT_EQUAL(GWS.after_rc, -EPIPE);
	CU_ASSERT_FALSE(GWS.g.busy);
	st_end(fds);
}

/* ---- the default credits and the setup's argument checks ---- */

static void test_defaults(void)
{
	tl_runtime_config cfg;
	tl_mesh_gather g;
	tl_mesh_part p[1];
	int fds = st_begin("compose/defaults");

	tl_runtime_config_init(&cfg);
	/* Sized for pipelined request/response (docs/DESIGN.md). */
	CU_ASSERT_EQUAL(cfg.mesh_inflight, 1024);
	CU_ASSERT_EQUAL(tl_mesh_gather_init(NULL, p, 1), -EINVAL);
	CU_ASSERT_EQUAL(tl_mesh_gather_init(&g, NULL, 1), -EINVAL);
	CU_ASSERT_EQUAL(tl_mesh_gather_init(&g, p, 0), -EINVAL);
	CU_ASSERT_EQUAL(tl_mesh_gather_init(&g, p, 1), 0);
	CU_ASSERT_EQUAL(g.busy, 0);
	st_end(fds);
}

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("compose", NULL, NULL);
	st_add(s, "defaults", test_defaults);
	st_add(s, "gather", test_gather);
	st_add(s, "gather_stop", test_gather_stop);
	st_add(s, "order", test_order);
	st_add(s, "credit_wait", test_credit_wait);
	st_add(s, "gate", test_gate);
	st_add(s, "gate_stop", test_gate_stop);
	st_add(s, "defer", test_defer);
	st_add(s, "defer_stop", test_defer_stop);
	st_add(s, "batch", test_batch);
	st_add(s, "batch_stop", test_batch_stop);
	st_add(s, "gather_wait", test_gather_wait);
	st_add(s, "gather_wait_stop", test_gather_wait_stop);
	return st_run();
}
