/* shards/cpulist.c: the CPU-list language ("0-3,8,10-11") of TL_CPUS, the plan's requests and tl_cpulist_parse, parsed in one place; no topology library needed. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cpulist.h"
#include "turnloop/plan.h"

/* One decimal number below limit. Capping while reading keeps the
 * arithmetic far from overflow (limit <= TL_PLAN_MAX_CPU). */
static int read_num(const char **pp, unsigned limit, unsigned *out)
{
	const char *p = *pp;
	unsigned v = 0;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (unsigned)(*p - '0');
		if (v >= limit)
			return -EINVAL;
		p++;
	}
	*pp = p;
	*out = v;
	return 0;
}

int tl__parse_count(const char *s, uint32_t max, uint32_t *out)
{
	unsigned v;

	if (!s || max == UINT32_MAX || read_num(&s, max + 1, &v) < 0 || *s)
		return -EINVAL;
	*out = v;
	return 0;
}

int tl__cpulist_walk(const char *s, unsigned limit, tl__cpu_range_fn fn, void *ctx)
{
	const char *p = s;

	if (!s || !*s)
		return -EINVAL;
	for (;;) {
		unsigned lo, hi;
		int rc;

		if (read_num(&p, limit, &lo))
			return -EINVAL;
		hi = lo;
		if (*p == '-') {
			p++;
			if (read_num(&p, limit, &hi) || hi < lo)
				return -EINVAL;
		}
		rc = fn(ctx, lo, hi);
		if (rc)
			return rc;
		if (*p == '\0')
			return 0;
		if (*p != ',')
			return -EINVAL;
		p++;
	}
}

static int words_add(void *ctx, unsigned lo, unsigned hi)
{
	uint64_t *w = ctx;

	for (unsigned c = lo; c <= hi; c++)
		w[c / 64] |= UINT64_C(1) << (c % 64);
	return 0;
}

int tl_cpulist_parse(const char *s, uint64_t *mask_words, size_t nwords)
{
	unsigned limit = TL_PLAN_MAX_CPU;
	int rc;

	if (!s || !mask_words || nwords == 0)
		return -EINVAL;
	if (nwords < TL_PLAN_MAX_CPU / 64)
		limit = (unsigned)nwords * 64;
	memset(mask_words, 0, nwords * sizeof *mask_words);
	rc = tl__cpulist_walk(s, limit, words_add, mask_words);
	if (rc)
		memset(mask_words, 0, nwords * sizeof *mask_words);
	return rc;
}
