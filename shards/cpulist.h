/* shards/cpulist.h: the one parser behind every CPU list (cpulist.c), for the shard plan, and its number reader for the counts of TL_SHARDS and the runtime's options. */
#ifndef TL_CPULIST_H
#define TL_CPULIST_H

#include <stdint.h>

/* Called for each range lo..hi (inclusive) of a list, in order: 0 goes on,
 * anything else stops the walk and is its result. */
typedef int (*tl__cpu_range_fn)(void *ctx, unsigned lo, unsigned hi);

/* Walk CPU list s ("0-3,8,10-11": numbers below limit, ranges ascending
 * within themselves, no spaces), so that TL_CPUS, the plan request's cpus
 * and allowed, and tl_cpulist_parse() accept exactly the same language:
 * 0, -EINVAL (s NULL, empty or malformed), or what fn returned. */
int tl__cpulist_walk(const char *s, unsigned limit, tl__cpu_range_fn fn, void *ctx);

/* s as a whole decimal number, digits only, at most max (< UINT32_MAX):
 * 0 and *out, or -EINVAL (s NULL or empty, another character, too large). */
int tl__parse_count(const char *s, uint32_t max, uint32_t *out);

#endif
