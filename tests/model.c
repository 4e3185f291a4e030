/* tests/model.c: run the model-based test (tests/model_core.c) over many seeds on one driver; a failure prints its replay command. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turnloop/loop.h>
#include "model_core.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: model [--driver D] [--seeds N] [--start S] [--seed S] [--steps K]\n"
		"             [--long] [--secs T] [--keep-going] [--faults SPEC] [--twice]\n"
		"             [--traces] [-v]\n"
		"  --driver D   sim, epoll or uring (default: $TL_DRIVER, else sim)\n"
		"  --seeds N    run N seeds (default 1000), starting at --start (default 1)\n"
		"  --seed S     run seed S only (replay a failure)\n"
		"  --steps K    API calls per seed (default 300)\n"
		"  --long       the manual soak: 5000 seeds of 1000 steps from 1000001\n"
		"               (each still settable with --seeds, --start, --steps)\n"
		"  --secs T     start no new seed after T seconds (a time budget)\n"
		"  --keep-going go on after a failure (its loops are abandoned, not closed)\n"
		"               and list every failing seed\n"
		"  --faults S   sim only: knobs on top of each seed's own (drivers/sim.h names)\n"
		"  --twice      sim only: run each seed twice and require the same trace\n"
		"  --traces     sim only: print each seed's trace (compare runs of one seed)\n"
		"  -v           print every call and completion\n");
}

/* A decimal or 0x count: strtoull alone would read "-1" as 2^64-1. */
static uint64_t num(const char *s)
{
	char *end;
	errno = 0;
	uint64_t v = strtoull(s, &end, 0);
	if (*s < '0' || *s > '9' || *end || errno) {
		fprintf(stderr, "model: not a count: %s (a number 0..2^64-1, no sign)\n", s);
		exit(2);
	}
	return v;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const driver_names[] = {
	[TL_DRIVER_EPOLL] = "epoll", [TL_DRIVER_URING] = "uring", [TL_DRIVER_SIM] = "sim"};

static int driver_of(const char *s)
{
	for (int d = TL_DRIVER_EPOLL; d <= TL_DRIVER_SIM; d++)
		if (!strcmp(s, driver_names[d]))
			return d;
	fprintf(stderr, "model: not a driver: %s (sim, epoll, uring)\n", s);
	exit(2);
}

/* A forced kernel driver that cannot run here (io_uring disabled, say) is a
 * skip, said once with the reason; anything after this is a failure. */
static void need_driver(int driver)
{
	tl_config c;
	tl_loop *l;
	tl_config_init(&c);
	c.driver = driver;
	int rc = tl_loop_new(&l, &c);
	if (rc < 0) {
		printf("model: the %s driver is not available here (%s): skipped\n",
		       driver_names[driver], strerror(-rc));
		exit(77);
	}
	tl_loop_close(l);
}

int main(int argc, char **argv)
{
	uint64_t start = 1, count = 1000;
	struct model_params p = {.steps = 300};
	int twice = 0, one = 0, traces = 0, is_long = 0, set_start = 0, set_count = 0;
	int set_steps = 0, keep_going = 0;
	double secs = 0;
	const char *env = getenv("TL_DRIVER");
	p.driver = env && *env ? driver_of(env) : TL_DRIVER_SIM;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-v")) {
			p.verbose = 1;
		} else if (!strcmp(a, "--twice")) {
			twice = 1;
		} else if (!strcmp(a, "--traces")) {
			traces = 1;
		} else if (!strcmp(a, "--long")) {
			is_long = 1;
		} else if (!strcmp(a, "--keep-going")) {
			keep_going = 1;
		} else if (v && !strcmp(a, "--driver")) {
			p.driver = driver_of(v), i++;
		} else if (v && !strcmp(a, "--secs")) {
			secs = (double)num(v), i++;
		} else if (v && !strcmp(a, "--seeds")) {
			count = num(v), set_count = 1, i++;
		} else if (v && !strcmp(a, "--start")) {
			start = num(v), set_start = 1, i++;
		} else if (v && !strcmp(a, "--seed")) {
			start = num(v), count = 1, one = 1, set_start = set_count = 1, i++;
		} else if (v && !strcmp(a, "--steps")) {
			p.steps = (uint32_t)num(v), set_steps = 1, i++;
		} else if (v && !strcmp(a, "--faults")) {
			p.faults = v, i++;
		} else {
			usage();
			return 2;
		}
	}
	if (is_long) {
		start = set_start ? start : 1000001;
		count = set_count ? count : 5000;
		p.steps = set_steps ? p.steps : 1000;
	}
	const char *dname = driver_names[p.driver];
	if (p.driver != TL_DRIVER_SIM && (twice || traces || p.faults)) {
		/* A kernel driver's run follows real timing: no trace to
		 * compare, no knobs to set. */
		fprintf(stderr, "model: --twice, --traces and --faults need the sim driver\n");
		return 2;
	}
	/* The model picks every loop's seed and knobs itself: the variables
	 * that override them for other programs would make all seeds one. */
	unsetenv("TL_SIM_SEED");
	unsetenv("TL_SIM_FAULTS");
	if (p.driver != TL_DRIVER_SIM)
		need_driver(p.driver);
	double t0 = wall();
	uint64_t calls = 0, completions = 0, ran = 0, failures = 0;
	for (uint64_t s = start; s < start + count; s++) {
		if (secs > 0 && ran && wall() - t0 > secs)
			break;
		ran++;
		struct model_result r, r2;
		p.seed = s;
		int rc = model_run(&p, &r);
		if (rc == 0 && twice) {
			rc = model_run(&p, &r2);
			if (rc == 0 && r2.trace != r.trace) {
				snprintf(r.what, sizeof r.what,
					 "the same seed gave another trace (%#" PRIx64 " then %#" PRIx64 ")",
					 r.trace, r2.trace);
				r.step = p.steps;
				rc = -1;
			} else if (rc) {
				r = r2;
			}
		}
		if (rc) {
			if (r.step == UINT32_MAX)
				printf("model: FAILED seed=%" PRIu64 " step=end: %s\n", s, r.what);
			else
				printf("model: FAILED seed=%" PRIu64 " step=%u: %s\n", s, r.step, r.what);
			printf("replay: TL_DRIVER=%s build/tests/model --seed %" PRIu64 " --steps %u%s%s%s -v\n",
			       dname, s, p.steps, p.faults ? " --faults '" : "", p.faults ? p.faults : "",
			       p.faults ? "'" : "");
			if (p.driver != TL_DRIVER_SIM)
				printf("(on %s a seed replays its API calls, not the kernel's timing: "
				       "see docs/REPLAY.md)\n", dname);
			fflush(stdout);
			if (!keep_going)
				return 1;
			failures++;
			continue;
		}
		calls += r.calls;
		completions += r.completions;
		if (traces && !one)
			printf("seed %" PRIu64 " trace %#" PRIx64 "\n", s, r.trace);
		if (one)
			printf("model: seed %" PRIu64 ": ok, %u calls, %u turns, %u completions, trace %#" PRIx64 "\n",
			       s, r.calls, r.turns, r.completions, r.trace);
	}
	if (failures) {
		printf("model: %s: %" PRIu64 " of %" PRIu64 " seeds from %" PRIu64 " FAILED, %.2f s\n",
		       dname, failures, ran, start, wall() - t0);
		return 1;
	}
	printf("model: %s: %" PRIu64 " seeds from %" PRIu64 " passed (%u steps each%s): %" PRIu64
	       " calls, %" PRIu64 " completions, %.2f s\n",
	       dname, ran, start, p.steps, twice ? ", each twice" : "", calls, completions,
	       wall() - t0);
	return 0;
}
