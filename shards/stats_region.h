/* shards/stats_region.h: the layout of the live stats region, shared by its writer (runtime.c) and reader (stats.c) (internal). */
#ifndef TL_SHARDS_STATS_REGION_H
#define TL_SHARDS_STATS_REGION_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "turnloop/shard.h"

/*
 * Layout version 1 of /dev/shm/turnloop.<pid>:
 *
 *   [0, header_size)                 struct tl__stats_hdr
 *   [header_size + i * stride, ...)  struct tl__stats_rec of shard i
 *
 * Every size the reader needs is in the header, so a reader checks the
 * region's shape from the header alone and never trusts a length it has not
 * compared with the file size. A change of any struct below is a new
 * version: readers refuse versions they do not know instead of guessing.
 *
 * Each record is guarded by a sequence lock: the shard makes seq odd, copies
 * its counters in, and makes seq even again; a reader that sees the same even
 * value before and after its copy has a consistent snapshot. Only the shard
 * writes its record, so the writer never waits, and a reader costs the
 * shard nothing but a shared cache line now and then.
 */

struct tl__stats_hdr {
	uint64_t magic;          /* TL_STATS_MAGIC, written last at creation */
	uint32_t version;        /* TL_STATS_VERSION */
	uint32_t header_size;    /* bytes before record 0 (multiple of 64) */
	uint32_t shards;         /* records */
	uint32_t stride;         /* bytes per record (multiple of 64) */
	uint32_t record_size;    /* sizeof(tl_stats_shard) of the writer */
	uint32_t flags;          /* TL_STATS_F_* */
	_Atomic uint32_t state;  /* TL_STATS_* */
	int32_t pid;
	uint32_t named;          /* named counters registered */
	uint32_t reserved0;
	uint64_t stall_ns;
	uint64_t period_ns;
	char driver[16];
	char names[TL_STATS_NAMED][TL_STATS_NAME_MAX];
};

struct tl__stats_rec {
	alignas(64) _Atomic uint64_t seq;
	alignas(64) tl_stats_shard data;
};

#define TL__STATS_HDR_SIZE ((uint32_t)((sizeof(struct tl__stats_hdr) + 63) & ~(size_t)63))
#define TL__STATS_STRIDE ((uint32_t)((sizeof(struct tl__stats_rec) + 63) & ~(size_t)63))

_Static_assert(TL_STATS_KINDS >= TL_K_COUNT_ + 0, "more completion kinds than stats slots");
_Static_assert(sizeof(tl_stats_shard) % 8 == 0, "stats record must be whole words");

#endif /* TL_SHARDS_STATS_REGION_H */
