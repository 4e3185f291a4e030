/* tests/model_core.h: the model-based randomized test of the public API, shared by tests/model.c and the fuzzer. */
#ifndef TL_MODEL_CORE_H
#define TL_MODEL_CORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * One run: two loops in one thread and a sequence of random public API
 * calls (listen, accept, connect, read, write, shutdown, UDP, timers,
 * cancel, stop, close, set_ref, leases, posts, turns),
 * including calls with stale, foreign and never-issued ids. A model of what
 * is live is kept beside the loops, and every return code and completion is
 * checked against it (exactly one terminal per accepted op, Closed last,
 * nothing after Closed, ids never reused while live, alive() right, no leaks).
 * The run ends by closing everything, turning until !alive and closing the
 * loops, which must return 0 with no lease out.
 *
 * The loops run on the sim driver (sharing the sim network) or on a kernel
 * driver (epoll, io_uring) over real loopback sockets: TCP on IPv4 and IPv6,
 * Unix-domain sockets in a fresh directory, UDP.
 *
 * The choices come from the seed (a PRNG) or, for the fuzzer, from the input
 * bytes. On sim the run is a pure function of them and replays exactly; on a
 * kernel driver they fix the sequence of API calls the model tries, while
 * what the kernel does (and so which results, and which later calls are
 * possible) follows real timing.
 */

struct model_params {
	uint64_t seed;        /* the run's seed: choices, config, sim seeds */
	int driver;           /* TL_DRIVER_SIM (or 0), TL_DRIVER_EPOLL, TL_DRIVER_URING */
	uint32_t steps;       /* API calls to make (0: 300) */
	const char *faults;   /* sim knobs on top of the seed's profile, or NULL */
	int verbose;          /* print every call and completion on stderr */
	const uint8_t *data;  /* fuzzer input: choices from these bytes, not the seed */
	size_t size;
};

struct model_result {
	int failed;           /* 1 when an invariant broke */
	uint32_t step;        /* the step where it broke */
	char what[512];       /* what broke */
	uint64_t trace;       /* the two loops' sim traces, mixed (0 on a kernel driver) */
	uint32_t calls, completions, turns;
};

/* Run one sequence. Returns 0 when every check held, -1 otherwise (r says
 * what and where). After a failure the loops are abandoned, not closed. */
int model_run(const struct model_params *p, struct model_result *r);

#endif
