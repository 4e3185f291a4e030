/* bench/mesh_bench.c: cross-shard message rate between two busy shards, and round trips between two parked (and two busy) shards. */
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
 *              [-c RING_CAPACITY] [-B BUDGET]
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
 */

enum { STREAM, PINGPONG };

static struct {
	int mode, busy;
	uint64_t total, sent, got;
	uint64_t t0, t1;
	uint64_t refused;
} B;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
	if (c->kind != TL_K_MESH)
		return;
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
	return 0;
}

static double run(const char *cpus, int mode, int busy, uint64_t total, uint32_t cap,
		  uint32_t budget)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	int rc;

	memset(&B, 0, sizeof B);
	B.mode = mode;
	B.busy = busy;
	B.total = total;
	tl_runtime_config_init(&cfg);
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
	char cpus[64];
	double ns;
	int opt;

	while ((opt = getopt(argc, argv, "n:r:a:b:c:B:")) != -1) {
		switch (opt) {
		case 'n': total = num(optarg, "message count"); break;
		case 'r': rounds = num(optarg, "round trips"); break;
		case 'a': a = strtoul(optarg, NULL, 10); break;
		case 'b': b = strtoul(optarg, NULL, 10); break;
		case 'c': cap = num(optarg, "ring capacity"); break;
		case 'B': budget = num(optarg, "budget"); break;
		default:
			fprintf(stderr, "usage: mesh_bench [-n MESSAGES] [-r ROUNDTRIPS] [-a CPU] "
					"[-b CPU] [-c RING_CAPACITY] [-B BUDGET]\n");
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
