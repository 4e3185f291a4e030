/* bench/deadline_bench.c: what deadlines cost with a million armed (contract 4.9): arming, moving, firing, and the progress of busy streams with idle deadlines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include "turnloop.h"

/*
 *   deadline_bench [-n reads] [-p busy_pairs] [-t turns]
 *
 * On one loop (the simulation driver unless TL_DRIVER says otherwise):
 *   1. n reads wait on 1024 quiet streams; each gets a read deadline far
 *      ahead, at spread times: ns per arm, the heap growing to n;
 *   2. each is moved to another far time: ns per move;
 *   3. beside the n armed, p busy stream pairs exchange one message per
 *      stream per turn for t turns, first with an idle deadline on every
 *      stream, then with none (7 rounds each, in turn, the best of each
 *      kept): ns per turn each way, and the difference
 *      per completion, which is what progress costs (the lazy re-arm adds
 *      one move per stream per idle period: see 2);
 *   4. the n deadlines are moved to the past and one turn at a time ends
 *      every read with -ETIMEDOUT: ns per read ended, compared with ending
 *      n reads by tl_cancel.
 * Wall clock (CLOCK_MONOTONIC); one run prints one line per measurement.
 */

#define QUIET 1024
#define ROUNDS 7

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int r)
{
	fprintf(stderr, "deadline_bench: %s: %s\n", what, tl_strerror(r));
	exit(1);
}

static tl_completion out[4096];

/* Turn until want terminals of kind arrived (releasing leases): ns spent. */
static uint64_t drain_terms(tl_loop *l, uint64_t want, uint16_t kind, int64_t expect)
{
	uint64_t got = 0, t0 = wall_ns();
	while (got < want) {
		int n = tl_turn(l, 0, out, 4096, NULL);
		if (n < 0)
			die("tl_turn", n);
		for (int i = 0; i < n; i++) {
			if (out[i].flags & TL_F_LEASE)
				tl_lease_release(l, out[i].u.read.lease.id);
			if (out[i].kind == kind && (out[i].flags & TL_F_TERMINAL)) {
				if (out[i].result != expect) {
					fprintf(stderr, "deadline_bench: a read ended with %lld\n",
						(long long)out[i].result);
					exit(1);
				}
				got++;
			}
		}
	}
	return wall_ns() - t0;
}

/* npairs connected pairs: srv[i] accepted, cli[i] connected. */
static void pairs(tl_loop *l, int npairs, tl_handle *srv, tl_handle *cli)
{
	tl_addr a;
	tl_handle lis;
	tl_op aop, cop;
	int r;
	if ((r = tl_addr_parse(&a, "127.0.0.1", 0)) || (r = tl_tcp_listen(l, &a, NULL, &lis)) ||
	    (r = tl_local_addr(l, lis, &a)) || (r = tl_accept_start(l, lis, 1, &aop)))
		die("listen", r);
	int accepted = 0, connected = 0;
	for (int i = 0; i < npairs; i++)
		if ((r = tl_tcp_connect(l, &a, 0, 2, &cli[i], &cop)))
			die("connect", r);
	while (accepted < npairs || connected < npairs) {
		int n = tl_turn(l, 1000000, out, 4096, NULL);
		if (n < 0)
			die("tl_turn", n);
		for (int i = 0; i < n; i++) {
			if (out[i].kind == TL_K_ACCEPT && out[i].result == 0)
				srv[accepted++] = out[i].u.accept.conn;
			else if (out[i].kind == TL_K_CONNECT && out[i].result == 0)
				connected++;
			else if ((out[i].kind == TL_K_ACCEPT || out[i].kind == TL_K_CONNECT) &&
				 out[i].result != -ECANCELED) /* an earlier listener's */
				die("pair", (int)out[i].result);
		}
	}
	tl_close(l, lis, 3);
}

/* t turns of one message each way on every busy pair: ns per turn. */
static double busy_turns(tl_loop *l, int p, const tl_handle *srv, const tl_handle *cli, int t,
			 uint64_t *completions)
{
	static const uint8_t msg[64];
	tl_op op;
	uint64_t c = 0, t0 = wall_ns();
	for (int k = 0; k < t; k++) {
		for (int i = 0; i < p; i++)
			if (tl_write(l, cli[i], msg, sizeof msg, 4, &op) < 0)
				die("write", -EIO);
		int n = tl_turn(l, 0, out, 4096, NULL);
		if (n < 0)
			die("tl_turn", n);
		for (int i = 0; i < n; i++) {
			if (out[i].flags & TL_F_LEASE)
				tl_lease_release(l, out[i].u.read.lease.id);
			if (out[i].result == -ETIMEDOUT) {
				fprintf(stderr, "deadline_bench: a busy stream timed out\n");
				exit(1);
			}
		}
		c += (uint64_t)n;
	}
	*completions = c;
	(void)srv;
	return (double)(wall_ns() - t0) / t;
}

int main(int argc, char **argv)
{
	uint32_t n = 1u << 20;
	int p = 256, t = 2000, opt;
	while ((opt = getopt(argc, argv, "n:p:t:")) != -1) {
		if (opt == 'n')
			n = (uint32_t)strtoul(optarg, NULL, 10);
		else if (opt == 'p')
			p = atoi(optarg);
		else if (opt == 't')
			t = atoi(optarg);
		else {
			fprintf(stderr, "usage: deadline_bench [-n reads] [-p busy_pairs] [-t turns]\n");
			return 2;
		}
	}
	if (n < QUIET || p < 1 || p > 2048 || t < 1) {
		fprintf(stderr, "deadline_bench: -n >= %d, 1 <= -p <= 2048, -t >= 1\n", QUIET);
		return 2;
	}
	n -= n % QUIET;
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.max_ops = n + 8u * (uint32_t)p + 4096;
	cfg.max_handles = 2u * (QUIET + (uint32_t)p) + 64;
	cfg.events_per_turn = 4096;
	cfg.pooled_buffers = 4096;
	cfg.pooled_buffer_size = 256;
	if (!getenv("TL_DRIVER"))
		cfg.driver = TL_DRIVER_SIM;
	tl_loop *l;
	int r = tl_loop_new(&l, &cfg);
	if (r)
		die("tl_loop_new", r);
	tl_handle *qs = calloc(QUIET, sizeof *qs), *qc = calloc(QUIET, sizeof *qc);
	tl_handle *bs = calloc((size_t)p, sizeof *bs), *bc = calloc((size_t)p, sizeof *bc);
	tl_op *ops = calloc(n, sizeof *ops);
	static uint8_t sink[16];
	if (!qs || !qc || !bs || !bc || !ops)
		die("calloc", -ENOMEM);
	pairs(l, QUIET, qs, qc);
	pairs(l, p, bs, bc);
	printf("deadline_bench: driver %s, %u reads on %d quiet streams, %d busy pairs\n",
	       tl_loop_driver(l), n, QUIET, p);

	/* 1. arm */
	for (uint32_t i = 0; i < n; i++)
		if ((r = tl_read(l, qs[i % QUIET], sink, sizeof sink, 5, &ops[i])))
			die("tl_read", r);
	uint64_t far = tl_now(l) + 3600ull * 1000000000ull, seed = 88172645463325252ull;
	uint64_t t0 = wall_ns();
	for (uint32_t i = 0; i < n; i++) {
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		if ((r = tl_read_deadline(l, ops[i], far + seed % (3600ull * 1000000000ull))))
			die("tl_read_deadline", r);
	}
	double arm = (double)(wall_ns() - t0) / n;
	printf("deadline_bench arm_ns=%.1f (heap grows to %u)\n", arm, n);

	/* 2. move */
	t0 = wall_ns();
	for (uint32_t i = 0; i < n; i++) {
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		if ((r = tl_read_deadline(l, ops[i], far + seed % (3600ull * 1000000000ull))))
			die("tl_read_deadline", r);
	}
	printf("deadline_bench move_ns=%.1f (%u armed)\n", (double)(wall_ns() - t0) / n, n);

	/* 3. progress of busy streams, beside the n armed */
	tl_op op;
	for (int i = 0; i < p; i++)
		if ((r = tl_read_start(l, bs[i], 6, &op)) || (r = tl_read_start(l, bc[i], 6, &op)))
			die("tl_read_start", r);
	uint64_t warm, with_c, without_c;
	busy_turns(l, p, bs, bc, t / 4 + 1, &warm);
	/* Longer than the run: what every completion pays. The lazy re-arm
	 * adds one heap move (move_ns) per stream per period. */
	uint64_t idle = 3600ull * 1000000000ull;
	double with = 1e300, without = 1e300;
	/* Rounds in turn, the best of each: the difference is small beside
	 * the noise of one round. */
	for (int round = 0; round < 2 * ROUNDS; round++) {
		int on = !(round & 1);
		for (int i = 0; i < p; i++)
			if ((r = tl_idle_deadline(l, bs[i], on ? idle : 0)) ||
			    (r = tl_idle_deadline(l, bc[i], on ? idle : 0)))
				die("tl_idle_deadline", r);
		double x = busy_turns(l, p, bs, bc, t, on ? &with_c : &without_c);
		if (on && x < with)
			with = x;
		if (!on && x < without)
			without = x;
	}
	double per_c = (with - without) / ((double)(with_c + without_c) / 2 / t);
	printf("deadline_bench busy_turn_ns with_idle=%.0f without=%.0f (%.1f completions a turn)"
	       " progress_ns=%.1f per completion\n",
	       with, without, (double)with_c / t, per_c);

	/* 4. fire every one, then the same number of cancels */
	uint64_t past = tl_now(l);
	for (uint32_t i = 0; i < n; i++)
		if ((r = tl_read_deadline(l, ops[i], past)))
			die("tl_read_deadline", r);
	uint64_t fire = drain_terms(l, n, TL_K_READ, -ETIMEDOUT);
	printf("deadline_bench fire_ns=%.1f per read ended by its deadline (turns only)\n",
	       (double)fire / n);
	for (uint32_t i = 0; i < n; i++)
		if ((r = tl_read(l, qs[i % QUIET], sink, sizeof sink, 5, &ops[i])))
			die("tl_read", r);
	t0 = wall_ns();
	for (uint32_t i = 0; i < n; i++)
		if ((r = tl_cancel(l, ops[i])))
			die("tl_cancel", r);
	uint64_t calls = wall_ns() - t0;
	uint64_t cancel = drain_terms(l, n, TL_K_READ, -ECANCELED);
	printf("deadline_bench cancel_ns=%.1f per read ended by tl_cancel (calls %.1f + turns %.1f)\n",
	       (double)(calls + cancel) / n, (double)calls / n, (double)cancel / n);

	tl_loop_destroy(l);
	free(qs);
	free(qc);
	free(bs);
	free(bc);
	free(ops);
	return 0;
}
