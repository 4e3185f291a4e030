/* tests/model.c: run the model-based test (tests/model_core.c) over many seeds; a failure prints its replay command. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model_core.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: model [--seeds N] [--start S] [--seed S] [--steps K] [--faults SPEC]\n"
		"             [--twice] [--traces] [-v]\n"
		"  --seeds N    run N seeds (default 1000), starting at --start (default 1)\n"
		"  --seed S     run seed S only (replay a failure)\n"
		"  --steps K    API calls per seed (default 300)\n"
		"  --faults S   sim knobs on top of each seed's own (drivers/sim.h names)\n"
		"  --twice      run each seed twice and require the same trace\n"
		"  --traces     print each seed's trace (compare runs of one seed)\n"
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

int main(int argc, char **argv)
{
	uint64_t start = 1, count = 1000;
	struct model_params p = {.steps = 300};
	int twice = 0, one = 0, traces = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-v")) {
			p.verbose = 1;
		} else if (!strcmp(a, "--twice")) {
			twice = 1;
		} else if (!strcmp(a, "--traces")) {
			traces = 1;
		} else if (v && !strcmp(a, "--seeds")) {
			count = num(v), i++;
		} else if (v && !strcmp(a, "--start")) {
			start = num(v), i++;
		} else if (v && !strcmp(a, "--seed")) {
			start = num(v), count = 1, one = 1, i++;
		} else if (v && !strcmp(a, "--steps")) {
			p.steps = (uint32_t)num(v), i++;
		} else if (v && !strcmp(a, "--faults")) {
			p.faults = v, i++;
		} else {
			usage();
			return 2;
		}
	}
	/* The model picks every loop's seed and knobs itself: the variables
	 * that override them for other programs would make all seeds one. */
	unsetenv("TL_SIM_SEED");
	unsetenv("TL_SIM_FAULTS");
	double t0 = wall();
	uint64_t calls = 0, completions = 0;
	for (uint64_t s = start; s < start + count; s++) {
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
			printf("replay: TL_DRIVER=sim build/tests/model --seed %" PRIu64 " --steps %u%s%s%s -v\n",
			       s, p.steps, p.faults ? " --faults '" : "", p.faults ? p.faults : "",
			       p.faults ? "'" : "");
			fflush(stdout);
			return 1;
		}
		calls += r.calls;
		completions += r.completions;
		if (traces && !one)
			printf("seed %" PRIu64 " trace %#" PRIx64 "\n", s, r.trace);
		if (one)
			printf("model: seed %" PRIu64 ": ok, %u calls, %u turns, %u completions, trace %#" PRIx64 "\n",
			       s, r.calls, r.turns, r.completions, r.trace);
	}
	printf("model: %" PRIu64 " seeds from %" PRIu64 " passed (%u steps each%s): %" PRIu64
	       " calls, %" PRIu64 " completions, %.2f s\n",
	       count, start, p.steps, twice ? ", each twice" : "", calls, completions, wall() - t0);
	return 0;
}
