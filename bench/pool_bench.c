/* bench/pool_bench.c: blocking-pool throughput (empty jobs, K in flight) and single-job round trip, shaped like bench/peers/uv_work.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "turnloop.h"
#include "turnloop/pool.h"

/*
 *   pool_bench [-k 64] [-d 3] [-w 4] [-s spin_us] [-m both|tput|rtt]
 *
 * The same two measurements as uv_work, on one loop and the default pool
 * (w bounded workers on the loop's node, 4 like libuv's default):
 *   1. keep k empty jobs in flight for d seconds, resubmitting each one as
 *      its completion comes back: jobs per second;
 *   2. one job at a time for d seconds: the round trip.
 * Last lines: "pool_bench inflight=K jobs_per_s=N" and "pool_bench rtt_ns=N".
 */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t empty_job(void *arg, tl_cancel_flag *c)
{
	(void)arg;
	(void)c;
	return 0;
}

static void submit(tl_loop *l)
{
	tl_op op;
	int r = tl_blocking(l, empty_job, NULL, TL_POOL_BOUNDED, 0, &op);
	if (r) {
		fprintf(stderr, "pool_bench: tl_blocking: %s\n", tl_strerror(r));
		exit(1);
	}
}

/* Turn until every job in flight came back; resubmit while before deadline. */
static uint64_t run(tl_loop *l, int k, uint64_t deadline)
{
	tl_completion out[256];
	uint64_t done = 0;
	int inflight = 0;
	for (int i = 0; i < k; i++, inflight++)
		submit(l);
	while (inflight) {
		int n = tl_turn(l, -1, out, 256, NULL);
		if (n < 0) {
			fprintf(stderr, "pool_bench: tl_turn: %s\n", tl_strerror(n));
			exit(1);
		}
		for (int i = 0; i < n; i++) {
			done++;
			inflight--;
			if (now_ns() < deadline) {
				submit(l);
				inflight++;
			}
		}
	}
	return done;
}

int main(int argc, char **argv)
{
	int k = 64, opt;
	double secs = 3;
	const char *mode = "both";
	tl_pool_config pc;
	tl_pool_config_init(&pc);
	while ((opt = getopt(argc, argv, "k:d:w:s:m:")) != -1) {
		if (opt == 'k')
			k = atoi(optarg);
		else if (opt == 'd')
			secs = atof(optarg);
		else if (opt == 'w')
			pc.workers_per_node = (uint32_t)atoi(optarg);
		else if (opt == 's')
			pc.spin_us = (uint32_t)atoi(optarg);
		else if (opt == 'm')
			mode = optarg;
	}
	if (k < 1 || k > 4096 || secs <= 0) {
		fprintf(stderr, "usage: pool_bench [-k 64] [-d 3] [-w 4] [-s spin_us] "
				"[-m both|tput|rtt]\n");
		return 2;
	}
	int r = tl_pool_launch(&pc);
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.max_undelivered = 4096;
	tl_loop *l;
	if (r || (r = tl_loop_new(&l, &cfg))) {
		fprintf(stderr, "pool_bench: %s\n", tl_strerror(r));
		return 1;
	}
	/* Warm up: the loop's pool state and every worker's first job. */
	run(l, k, 0);

	if (strcmp(mode, "rtt")) {
		uint64_t t0 = now_ns();
		uint64_t done = run(l, k, t0 + (uint64_t)(secs * 1e9));
		double s = (double)(now_ns() - t0) / 1e9;
		printf("pool_bench inflight=%d jobs_per_s=%.0f\n", k, (double)done / s);
	}
	if (strcmp(mode, "tput")) {
		uint64_t t0 = now_ns();
		uint64_t done = run(l, 1, t0 + (uint64_t)(secs * 1e9));
		printf("pool_bench rtt_ns=%.0f\n", (double)(now_ns() - t0) / (double)done);
	}

	tl_loop_destroy(l);
	tl_pool_shutdown();
	return 0;
}
