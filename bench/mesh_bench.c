/* bench/mesh_bench.c: cross-shard message rate between two busy shards, round trips between two parked (and two busy) shards, and what polling before parking (mesh_spin_ns) does to calls and costs idle shards. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "turnloop.h"

/*
 *   mesh_bench [-n MESSAGES] [-r ROUNDTRIPS] [-a CPU_A] [-b CPU_B]
 *              [-c RING_CAPACITY] [-B BUDGET] [-m MODE] [-s SPIN_NS] [-d MS]
 *
 * Two shards of the runtime, pinned to CPU_A (sender) and CPU_B (receiver):
 *   stream:          shard A posts MESSAGES to B as fast as the ring takes
 *                    them; both shards poll (on_pass says "busy"), so neither
 *                    parks                                   -> msgs/s
 *   pingpong_parked: one message in flight, echoed back; nothing else to do,
 *                    so each side parks in its OS wait and is woken by the
 *                    other's post                            -> ns per round trip
 *   pingpong_busy:   the same with both shards polling       -> ns per round trip
 * Last lines: "mesh_bench stream msgs_per_s=N", "mesh_bench pingpong_parked
 * rtt_ns=N", "mesh_bench pingpong_busy rtt_ns=N" (bench/mesh-compare reads them).
 *
 * Every mode runs with cfg.mesh_spin_ns = SPIN_NS (-s; 0 by default here,
 * so the shards above park). Other modes (-m), each printing one line, with
 * the process's CPU time (both shard threads) measured:
 *   calls:  ROUNDTRIPS tl_shard_submit_to calls from shard 0 to shard 1,
 *           one at a time, after 1000 unmeasured ones; a call is two hops
 *           (the function there, its result back)  -> calls/s, hops/s, CPU
 *           us per hop, OS waits (parks) per call on each shard
 *   idle:   both shards with nothing to do for MS ms  -> CPU %
 *   tick:   shard 0 posts one message to shard 1 every ms for MS ms
 *           -> CPU %, parks of shard 1 per message
 */

enum { STREAM, PINGPONG, CALLS, IDLE, TICK };

#define CALLS_WARMUP 1000u

static struct {
	int mode, busy;
	uint64_t total, sent, got;
	uint64_t t0, t1;
	uint64_t refused;
	uint64_t cpu0, cpu1;        /* process CPU time at t0 and t1 */
	uint64_t waits0[2], waits1[2]; /* each shard's OS waits at t0 and t1 */
	uint64_t spin_ns, dur_ns;
	tl_handle timer;
	tl_op timer_op;
} B;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t os_waits(tl_shard *s)
{
	tl_loop_stats st;

	tl_loop_stats_get(tl_shard_loop(s), &st);
	return st.os_waits;
}

/* The function of a call: shard 1 notes its OS waits at the marks. */
static int64_t call_fn(tl_shard *s, void *arg)
{
	uint64_t k = (uint64_t)(uintptr_t)arg;

	if (k == CALLS_WARMUP + 1)
		B.waits0[1] = os_waits(s);
	else if (k == CALLS_WARMUP + B.total)
		B.waits1[1] = os_waits(s);
	return (int64_t)k;
}

static void call_next(tl_shard *s)
{
	if (B.sent == CALLS_WARMUP) {
		B.t0 = now_ns();
		B.cpu0 = cpu_ns();
		B.waits0[0] = os_waits(s);
	}
	if (B.sent == CALLS_WARMUP + B.total) {
		B.t1 = now_ns();
		B.cpu1 = cpu_ns();
		B.waits1[0] = os_waits(s);
		tl_runtime_stop(tl_shard_runtime(s));
		return;
	}
	if (tl_shard_submit_to(s, 1, call_fn, (void *)(uintptr_t)(B.sent + 1), B.sent) < 0)
		exit(1);
	B.sent++;
}

/* idle and tick: the measured span is a timer's; tick's timer posts. */
static void timed_completion(tl_shard *s, const tl_completion *c)
{
	if (c->kind == TL_K_MESH) {
		if (tl_shard_id(s) == 1 && B.got++ == 0)
			B.waits0[1] = os_waits(s);
		B.waits1[1] = os_waits(s);
		return;
	}
	if (c->kind != TL_K_TIMER || tl_shard_id(s) != 0)
		return;
	if (now_ns() >= B.t0 + B.dur_ns) {
		B.t1 = now_ns();
		B.cpu1 = cpu_ns();
		tl_runtime_stop(tl_shard_runtime(s));
		return;
	}
	if (B.mode == TICK && tl_shard_post(s, 1, 0, 0) == 0)
		B.sent++;
}

static int on_pass(tl_shard *s, void *arg)
{
	(void)arg;
	if (B.mode == STREAM && tl_shard_id(s) == 0) {
		if (!B.t0)
			B.t0 = now_ns();
		while (B.sent < B.total) {
			if (tl_shard_post(s, 1, B.sent, B.sent) < 0) {
				B.refused++;
				break;
			}
			B.sent++;
		}
	}
	return B.busy;
}

static void on_completion(tl_shard *s, const tl_completion *c)
{
	if (B.mode == IDLE || B.mode == TICK) {
		timed_completion(s, c);
		return;
	}
	if (c->kind != TL_K_MESH)
		return;
	if (B.mode == CALLS) {
		if (c->result != (int64_t)c->token + 1)
			exit(1);
		call_next(s);
		return;
	}
	if (B.mode == STREAM) {
		/* Shard 1 only: count, and check the order on the way. */
		if (c->token != B.got) {
			fprintf(stderr, "mesh_bench: message %llu arrived as %llu\n",
				(unsigned long long)B.got, (unsigned long long)c->token);
			exit(1);
		}
		if (++B.got == B.total) {
			B.t1 = now_ns();
			tl_runtime_stop(tl_shard_runtime(s));
		}
		return;
	}
	if (tl_shard_id(s) == 1) {
		if (tl_shard_post(s, 0, c->token, 0) < 0)
			exit(1);
		return;
	}
	if (++B.got == B.total) {
		B.t1 = now_ns();
		tl_runtime_stop(tl_shard_runtime(s));
		return;
	}
	if (tl_shard_post(s, 1, B.got, 0) < 0)
		exit(1);
}

static int shard_launch(tl_shard *s, void *arg)
{
	(void)arg;
	if (B.mode == PINGPONG && tl_shard_id(s) == 0) {
		B.t0 = now_ns();
		return tl_shard_post(s, 1, 0, 0);
	}
	if (B.mode == CALLS && tl_shard_id(s) == 0)
		call_next(s);
	if ((B.mode == IDLE || B.mode == TICK) && tl_shard_id(s) == 0) {
		tl_loop *l = tl_shard_loop(s);

		/* Let shard 1 reach its first park before the span begins. */
		usleep(20000);
		B.t0 = now_ns();
		B.cpu0 = cpu_ns();
		if (B.mode == IDLE) /* one expiry, at the end */
			return tl_timer_start(l, tl_now(l) + B.dur_ns, 0, 1, &B.timer, &B.timer_op);
		return tl_timer_start(l, tl_now(l) + 1000000, 1000000, 1, &B.timer, &B.timer_op);
	}
	return 0;
}

static double run(const char *cpus, int mode, int busy, uint64_t total, uint32_t cap,
		  uint32_t budget)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int rc;

	uint64_t spin_ns = B.spin_ns, dur_ns = B.dur_ns;

	memset(&B, 0, sizeof B);
	B.spin_ns = spin_ns;
	B.dur_ns = dur_ns;
	B.mode = mode;
	B.busy = busy;
	B.total = total;
	tl_runtime_config_init(&cfg);
	cfg.mesh_spin_ns = B.spin_ns;
	cfg.plan.cpus = cpus;
	cfg.no_env = 1;
	cfg.signals = 0;
	cfg.mesh_capacity = cap;
	cfg.mesh_budget = budget;
	cfg.on_launch = shard_launch;
	cfg.on_pass = on_pass;
	cfg.on_completion = on_completion;
	rc = tl_runtime_new(&rt, &cfg);
	if (rc < 0) {
		fprintf(stderr, "mesh_bench: cannot set up shards on cpus %s: %s\n", cpus,
			tl_strerror(rc));
		exit(2);
	}
	if (tl_runtime_shards(rt) != 2) {
		fprintf(stderr, "mesh_bench: cpus %s gave %u shards, need 2 (two cores)\n", cpus,
			tl_runtime_shards(rt));
		exit(2);
	}
	rc = tl_runtime_run(rt);
	if (rc < 0) {
		fprintf(stderr, "mesh_bench: %s\n", tl_error_detail());
		exit(1);
	}
	tl_runtime_destroy(rt);
	return (double)(B.t1 - B.t0);
}

static unsigned long num(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || !v) {
		fprintf(stderr, "mesh_bench: bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	uint64_t total = 20000000, rounds = 20000;
	unsigned long a = 0, b = 1, cap = 4096, budget = 1024;
	const char *mode = "all";
	char cpus[64];
	double ns;
	int opt;

	B.dur_ns = 2000000000ull;
	while ((opt = getopt(argc, argv, "n:r:a:b:c:B:m:s:d:")) != -1) {
		switch (opt) {
		case 'n': total = num(optarg, "message count"); break;
		case 'r': rounds = num(optarg, "round trips"); break;
		case 'a': a = strtoul(optarg, NULL, 10); break;
		case 'b': b = strtoul(optarg, NULL, 10); break;
		case 'c': cap = num(optarg, "ring capacity"); break;
		case 'B': budget = num(optarg, "budget"); break;
		case 'm': mode = optarg; break;
		case 's': B.spin_ns = strtoull(optarg, NULL, 10); break;
		case 'd': B.dur_ns = num(optarg, "duration") * 1000000ull; break;
		default:
			fprintf(stderr, "usage: mesh_bench [-n MESSAGES] [-r ROUNDTRIPS] [-a CPU] "
					"[-b CPU] [-c RING_CAPACITY] [-B BUDGET] [-m all|calls|idle|tick] "
					"[-s SPIN_NS] [-d MS]\n");
			return 2;
		}
	}
	if (a == b) {
		fprintf(stderr, "mesh_bench: -a and -b must differ\n");
		return 2;
	}
	/* The plan orders shards by topology; with a > b shard 0 would be on
	 * b, so the roles are named by shard and the CPUs listed in order. */
	snprintf(cpus, sizeof cpus, "%lu,%lu", a < b ? a : b, a < b ? b : a);

	if (!strcmp(mode, "calls")) {
		ns = run(cpus, CALLS, 0, rounds, (uint32_t)cap, (uint32_t)budget);
		printf("mesh_bench calls spin_ns=%llu calls=%llu calls_per_s=%.0f hops_per_s=%.0f "
		       "cpu_us_per_hop=%.3f waits_per_call_a=%.3f waits_per_call_b=%.3f\n",
		       (unsigned long long)B.spin_ns, (unsigned long long)rounds,
		       (double)rounds / (ns / 1e9), 2.0 * (double)rounds / (ns / 1e9),
		       (double)(B.cpu1 - B.cpu0) / 1e3 / (2.0 * (double)rounds),
		       (double)(B.waits1[0] - B.waits0[0]) / (double)rounds,
		       (double)(B.waits1[1] - B.waits0[1]) / (double)rounds);
		return 0;
	}
	if (!strcmp(mode, "idle") || !strcmp(mode, "tick")) {
		int tick = !strcmp(mode, "tick");

		ns = run(cpus, tick ? TICK : IDLE, 0, 0, (uint32_t)cap, (uint32_t)budget);
		printf("mesh_bench %s spin_ns=%llu ms=%.0f messages=%llu cpu_pct=%.3f "
		       "waits_per_msg_b=%.3f\n",
		       mode, (unsigned long long)B.spin_ns, ns / 1e6, (unsigned long long)B.sent,
		       100.0 * (double)(B.cpu1 - B.cpu0) / ns,
		       B.got > 1 ? (double)(B.waits1[1] - B.waits0[1]) / (double)(B.got - 1) : 0.0);
		return 0;
	}
	if (strcmp(mode, "all")) {
		fprintf(stderr, "mesh_bench: no mode '%s' (all, calls, idle, tick)\n", mode);
		return 2;
	}

	ns = run(cpus, STREAM, 1, total, (uint32_t)cap, (uint32_t)budget);
	printf("mesh_bench stream msgs=%llu refused_posts=%llu ring=%lu budget=%lu\n",
	       (unsigned long long)total, (unsigned long long)B.refused, cap, budget);
	printf("mesh_bench stream msgs_per_s=%.0f\n", (double)total / (ns / 1e9));
	ns = run(cpus, PINGPONG, 0, rounds, (uint32_t)cap, (uint32_t)budget);
	printf("mesh_bench pingpong_parked rtt_ns=%.0f\n", ns / (double)rounds);
	ns = run(cpus, PINGPONG, 1, rounds * 10, (uint32_t)cap, (uint32_t)budget);
	printf("mesh_bench pingpong_busy rtt_ns=%.0f\n", ns / (double)(rounds * 10));
	return 0;
}
