/* shards/arena.c: each shard thread allocates from a jemalloc arena of its own, one per CPU for the life of the process (contract 9.3). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"

#if TL_ARENAS
#include <jemalloc/jemalloc.h>

/* One arena per CPU for the life of the process: jemalloc cannot give an
 * arena's memory back while user allocations from it live on, so runtimes
 * created one after another reuse the arena of the CPU rather than leaking
 * one per shard per runtime. */
static tl__os_mutex arena_mu = TL__OS_MUTEX_INIT;
static unsigned *arena_of_cpu; /* arena + 1, 0 = none yet */
static size_t arena_cap;

static int arena_for_cpu(int cpu, unsigned *out)
{
	int rc = 0;

	if (cpu < 0)
		cpu = 0;
	tl__os_mutex_lock(&arena_mu);
	if ((size_t)cpu >= arena_cap) {
		size_t cap = (size_t)cpu + 64;
		unsigned *v = realloc(arena_of_cpu, cap * sizeof *v);

		if (!v) {
			rc = -ENOMEM;
			goto out;
		}
		memset(v + arena_cap, 0, (cap - arena_cap) * sizeof *v);
		arena_of_cpu = v;
		arena_cap = cap;
	}
	if (!arena_of_cpu[cpu]) {
		unsigned a;
		size_t sz = sizeof a;

		rc = mallctl("arenas.create", &a, &sz, NULL, 0);
		if (rc) {
			rc = -rc;
			goto out;
		}
		arena_of_cpu[cpu] = a + 1;
	}
	*out = arena_of_cpu[cpu] - 1;
out:
	tl__os_mutex_unlock(&arena_mu);
	return rc;
}
#endif

const char *tl__rt_arenas_build_why(void)
{
#if TL_ARENAS
	return "";
#elif TL_HAVE_JEMALLOC
	return "this is a sanitizer build (jemalloc arenas would hold nothing)";
#elif defined(_WIN32)
	return "the Windows build has no jemalloc (Debian builds none for mingw-w64)";
#else
	return "built with -Djemalloc=disabled";
#endif
}

/* Not being able to is not a reason to refuse to run: the stats say that
 * arenas are off, and why. */
void tl__rt_arena_setup(tl_shard *s)
{
	tl_runtime *rt = s->rt;

	s->st.arena = UINT32_MAX;
#if TL_ARENAS
	uint64_t *ap, *dp;
	size_t sz = sizeof ap;
	unsigned a;

	if (mallctl("thread.allocatedp", &ap, &sz, NULL, 0) ||
	    mallctl("thread.deallocatedp", &dp, &sz, NULL, 0)) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc was built without statistics";
		return;
	}
	/* If another malloc won the symbol lookup, jemalloc's counters do
	 * not move: then its arenas would hold nothing of ours. */
	volatile uint64_t *vap = ap;
	uint64_t before = *vap;
	void *volatile probe = malloc(256);
	uint64_t after = *vap;

	free(probe);
	if (after == before) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc is linked but is not the process allocator";
		return;
	}
	s->je_alloc = ap;
	s->je_freed = dp;
	if (arena_for_cpu(s->rt->plan.shards[s->id].pu_os_index, &a) < 0 ||
	    mallctl("thread.arena", NULL, NULL, &a, sizeof a)) {
		atomic_store(&rt->arenas, 0);
		rt->arenas_why = "jemalloc refused to create or bind an arena";
		return;
	}
	s->st.arena = a;
#else
	atomic_store(&rt->arenas, 0);
#endif
}
