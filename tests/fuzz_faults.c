/* tests/fuzz_faults.c: libFuzzer target for the TL_SIM_FAULTS parser (tl__sim_faults_parse), checked against a reference and a round trip. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * The input, up to its first NUL, is the spec. The parser names a bad entry
 * on stderr, which fuzz-short closes (-close_fd_mask=2) so the log stays
 * small; this target's own findings go to a copy of stderr taken before.
 */

static int report_fd = 2;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return;
	va_start(ap, fmt);
	dprintf(report_fd, "fuzz_faults: ");
	vdprintf(report_fd, fmt, ap);
	dprintf(report_fd, "\n");
	va_end(ap);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Runs before libFuzzer reads its flags, so before it closes stderr. */
	report_fd = dup(2);
	if (report_fd < 0)
		report_fd = 2;
	return 0;
}

/* ---- reference: the documented language, parsed another way ---- */

static int ref_valid(const struct tl_sim_faults *f)
{
	for (int k = 0; k < TL_SIM_NKNOBS; k++)
		if (!(f->p[k] >= 0.0 && f->p[k] <= 1.0))
			return 0;
	return f->rcvbuf >= 64 && f->rcvbuf <= (64u << 20) && f->latency_us <= 10000000 &&
	       f->slow_us <= 1000000000 && f->poll_ns <= 1000000000 &&
	       f->shared_wait_us <= 1000000;
}

/* One "name=value" entry onto *f; -1 if it is not one. */
static int ref_entry(struct tl_sim_faults *f, const char *item, size_t len)
{
	static const char *const ints[5] = {"latency_us", "slow_us", "rcvbuf", "poll_ns",
					    "shared_wait_us"};
	uint32_t *const slot[5] = {&f->latency_us, &f->slow_us, &f->rcvbuf, &f->poll_ns,
				   &f->shared_wait_us};
	char name[1024], val[1024], *end;
	const char *eq = memchr(item, '=', len);

	if (!eq)
		return -1;
	memcpy(name, item, (size_t)(eq - item));
	name[eq - item] = '\0';
	memcpy(val, eq + 1, len - (size_t)(eq - item) - 1);
	val[len - (size_t)(eq - item) - 1] = '\0';
	for (int i = 0; i < 5; i++) {
		if (strcmp(name, ints[i]))
			continue;
		/* Counts are unsigned: no sign, no leading blanks. */
		if (val[0] < '0' || val[0] > '9')
			return -1;
		errno = 0;
		unsigned long v = strtoul(val, &end, 0);
		if (errno || end == val || *end || v > UINT32_MAX)
			return -1;
		*slot[i] = (uint32_t)v;
		return 0;
	}
	for (int k = 0; k < TL_SIM_NKNOBS; k++) {
		if (strcmp(name, tl__sim_knob_name((enum tl_sim_knob)k)))
			continue;
		errno = 0;
		double p = strtod(val, &end);
		if (errno || end == val || *end)
			return -1;
		f->p[k] = p;
		return 0;
	}
	return -1;
}

/* Entries are separated by any run of commas and spaces. */
static int ref_parse(struct tl_sim_faults *f, const char *spec)
{
	struct tl_sim_faults t = *f;
	const char *p = spec;

	if (strlen(spec) >= 1024)
		return -EINVAL;
	for (;;) {
		size_t len;

		p += strspn(p, ", ");
		if (!*p)
			break;
		len = strcspn(p, ", ");
		if (ref_entry(&t, p, len))
			return -EINVAL;
		p += len;
	}
	if (!ref_valid(&t))
		return -EINVAL;
	*f = t;
	return 0;
}

/* Field by field: struct padding is not part of the value. */
static int same(const struct tl_sim_faults *a, const struct tl_sim_faults *b)
{
	return !memcmp(a->p, b->p, sizeof a->p) && a->latency_us == b->latency_us &&
	       a->slow_us == b->slow_us && a->rcvbuf == b->rcvbuf && a->poll_ns == b->poll_ns &&
	       a->shared_wait_us == b->shared_wait_us;
}

/* Every knob as a spec, doubles in hex so they come back bit for bit. */
static void format(const struct tl_sim_faults *f, char *buf, size_t len)
{
	size_t off = 0;

	for (int k = 0; k < TL_SIM_NKNOBS; k++)
		off += (size_t)snprintf(buf + off, len - off, "%s=%a,",
					tl__sim_knob_name((enum tl_sim_knob)k), f->p[k]);
	snprintf(buf + off, len - off, "latency_us=%u slow_us=%u rcvbuf=%u poll_ns=%u shared_wait_us=%u",
		 f->latency_us, f->slow_us, f->rcvbuf, f->poll_ns, f->shared_wait_us);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tl_sim_faults f, before, ref, back, again;
	const uint8_t *nul = memchr(data, 0, size);
	size_t len = nul ? (size_t)(nul - data) : size;
	char *spec = malloc(len + 1), out[2048];
	int r, rr;

	check(spec != NULL, "out of memory");
	memcpy(spec, data, len);
	spec[len] = '\0';

	tl__sim_faults_default(&f);
	before = f;
	ref = f;
	r = tl__sim_faults_parse(&f, spec);
	rr = ref_parse(&ref, spec);
	check(r == 0 || r == -EINVAL, "unexpected return %d", r);
	check(r == rr, "parser says %d, the reference %d, for \"%s\"", r, rr, spec);
	if (r < 0) {
		check(same(&f, &before), "a refused spec changed the knobs: \"%s\"", spec);
		free(spec);
		return 0;
	}
	check(ref_valid(&f), "accepted values out of range: \"%s\"", spec);
	check(same(&f, &ref), "parser and reference set different knobs: \"%s\"", spec);

	/* The same spec twice is the same as once. */
	again = f;
	check(tl__sim_faults_parse(&again, spec) == 0 && same(&again, &f),
	      "not idempotent: \"%s\"", spec);
	/* What it set, written out and read back, is what it set. */
	format(&f, out, sizeof out);
	memset(&back, 0, sizeof back);
	back.rcvbuf = 64;
	check(tl__sim_faults_parse(&back, out) == 0 && same(&back, &f),
	      "round trip through \"%s\" fails (from \"%s\")", out, spec);
	free(spec);
	return 0;
}
