/* shards/stats_region.h: the layout of the live stats region, shared by its writer (stats_writer.c) and reader (stats.c) (internal). */
#ifndef TL_SHARDS_STATS_REGION_H
#define TL_SHARDS_STATS_REGION_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "turnloop/plan.h"
#include "turnloop/stats.h"

/*
 * Layout version 5 of /dev/shm/turnloop-<uid>/<pid> (on Windows, of the mapping
 * Local\turnloop-stats-<pid>):
 *
 *   [0, sizeof hdr)                        struct tl__stats_hdr
 *   [families_off, + capacity * 48)        struct tl__stats_fam, one per family
 *   [labels_off, + capacity * LABEL_MAX)   one label per value slot
 *   [header_size + i * stride, ...)        shard i: struct tl__stats_rec,
 *                                          then capacity uint64_t values
 *
 * Every size and offset the reader needs is in the header, so a reader checks
 * the region's shape from the header alone and never trusts a length it has
 * not compared with the file size. A change of any struct below is a new
 * version: readers refuse versions they do not know instead of guessing.
 *
 * Each record is guarded by a sequence lock: the shard makes seq odd, copies
 * its counters and values in, and makes seq even again; a reader that sees
 * the same even value before and after its copy has a consistent snapshot.
 * Only the shard writes its record, so the writer never waits. The family
 * table and the labels have one sequence lock of their own (meta_seq),
 * taken by whichever thread sets a label (under the runtime's mutex).
 */

/* The per-user directory and the region's name in it. */
#define TL__STATS_DIR_FMT "/dev/shm/turnloop-%u"
#define TL__STATS_DIR_MAX 64
/* Windows: the named mapping of the process whose id is %s (stats_shm_win.c). */
#define TL__STATS_WIN_NAME_FMT "Local\\turnloop-stats-%s"

struct tl__stats_hdr {
	uint64_t magic;          /* TL_STATS_MAGIC, written last at creation */
	uint32_t version;        /* TL_STATS_VERSION */
	uint32_t header_size;    /* bytes before record 0 (multiple of 64), tables included */
	uint32_t shards;         /* records */
	uint32_t stride;         /* bytes per record, values included (multiple of 64) */
	uint32_t record_size;    /* sizeof(tl_stats_shard) of the writer */
	uint32_t flags;          /* TL_STATS_F_* */
	_Atomic uint32_t state;  /* TL_STATS_* */
	int32_t pid;             /* the writer */
	uint32_t uid;            /* its effective uid (Windows: its user's RID) */
	uint32_t capacity;       /* value slots per record (stats_values) */
	uint64_t start_time;     /* the writer's start: /proc/<pid>/stat field 22; on
	                          * Windows its creation time (FILETIME units) */
	uint64_t started_ns;     /* CLOCK_MONOTONIC at creation */
	uint64_t stall_ns;
	uint64_t period_ns;
	char driver[16];
	uint32_t families_off;   /* offset of the family table */
	uint32_t labels_off;     /* offset of the label table */
	/* Under meta_seq: */
	_Atomic uint64_t meta_seq;
	uint32_t families;       /* entries of the family table in use */
	uint32_t values;         /* value slots in use (sum of the families' rows) */
};

struct tl__stats_fam {
	char name[TL_STATS_NAME_MAX];
	uint32_t kind;           /* TL_STAT_COUNTER, TL_STAT_GAUGE */
	uint32_t rows;
	uint32_t first;          /* value slot of row 0 */
	uint32_t reserved;
};

struct tl__stats_rec {
	alignas(64) _Atomic uint64_t seq;
	alignas(64) tl_stats_shard data;
	/* capacity uint64_t values follow, from sizeof(struct tl__stats_rec) */
};

#define TL__ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* The shape of a region with n shards and capacity value slots. */
static inline size_t tl__stats_families_off(void)
{
	return TL__ALIGN64(sizeof(struct tl__stats_hdr));
}
static inline size_t tl__stats_labels_off(uint32_t capacity)
{
	return TL__ALIGN64(tl__stats_families_off() + (size_t)capacity * sizeof(struct tl__stats_fam));
}
static inline size_t tl__stats_header_size(uint32_t capacity)
{
	return TL__ALIGN64(tl__stats_labels_off(capacity) + (size_t)capacity * TL_STATS_LABEL_MAX);
}
static inline size_t tl__stats_stride(uint32_t capacity)
{
	return TL__ALIGN64(sizeof(struct tl__stats_rec) + (size_t)capacity * sizeof(uint64_t));
}

_Static_assert(TL_STATS_KINDS >= TL_K_COUNT_ + 0, "more completion kinds than stats slots");
_Static_assert(sizeof(tl_stats_shard) % 8 == 0, "stats record must be whole words");
/* Version 5's record: a field added or moved is a new TL_STATS_VERSION
 * (and this size with it), so that no reader takes one layout for the
 * other. */
_Static_assert(sizeof(tl_stats_shard) == 864, "tl_stats_shard changed: a new layout version");
_Static_assert(sizeof(struct tl__stats_fam) == 48, "family entries are 48 bytes");
_Static_assert(sizeof(struct tl__stats_rec) % 64 == 0, "values start on a line of their own");

/*
 * /proc/<pid>/stat of a process (pid 0: this one): its start time (field 22,
 * clock ticks after boot) and its state letter (field 3). 0, -ESRCH (no such
 * process), -EPROTO (a line that does not parse), or the OS error.
 */
int tl__proc_stat(int pid, uint64_t *start_time, char *state);

#ifdef _WIN32
/* stats_shm_win.c, for the writer's identity and the reader's checks: a
 * process's user (free it; NULL with GetLastError's reason), its creation
 * time in FILETIME units (0 or a negative errno), and a SID's relative id
 * (its last part: the header's uid; 0 for none). */
TOKEN_USER *tl__win_process_user(HANDLE process);
int tl__win_process_created(HANDLE process, uint64_t *out);
uint32_t tl__win_rid(PSID sid);
#endif

#endif /* TL_SHARDS_STATS_REGION_H */
