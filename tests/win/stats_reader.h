/* tests/win/stats_reader.h: a reader of the live stats region for the runtime's tests on Windows, where the library has none yet (shards/stats.c is POSIX): the named mapping shards/stats_shm_win.c makes, read through shards/stats_region.h's layout. */
#ifndef TL_TESTS_WIN_STATS_READER_H
#define TL_TESTS_WIN_STATS_READER_H

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "turnloop.h"
#include "stats_region.h"

/*
 * What the tests ask of the region on Linux through tl_stats_open,
 * tl_stats_info_get, tl_stats_family_get, tl_stats_shard_get and
 * tl_stats_close, read here from the mapping Local\turnloop-stats-<pid>
 * (read-only) under the same sequence locks: a record's seq, the family
 * table's meta_seq. shard_test.h names these for the tl_stats_* calls on
 * Windows, so a test's code is the same on both OSes. The header's magic,
 * version, record size and shape are checked as the library's reader checks
 * them; a region that fails is -EPROTO. Only the calls the tests use are
 * here; tlshard and tl_stats_label_get wait for the library's own port.
 */

typedef struct st_stats_reader {
	const unsigned char *base;
	size_t size;
	const struct tl__stats_hdr *h;
} st_stats_reader;

static inline void st_stats_close(st_stats_reader *r)
{
	if (!r)
		return;
	if (r->base)
		UnmapViewOfFile(r->base);
	free(r);
}

static inline int st_stats_open(st_stats_reader **out, int pid)
{
	char id[16], name[64];
	MEMORY_BASIC_INFORMATION mi;
	st_stats_reader *r;
	HANDLE map;

	*out = NULL;
	snprintf(id, sizeof id, "%d", pid);
	snprintf(name, sizeof name, TL__STATS_WIN_NAME_FMT, id);
	map = OpenFileMappingA(FILE_MAP_READ, FALSE, name);
	if (!map)
		return GetLastError() == ERROR_FILE_NOT_FOUND ? -ENOENT : -EACCES;
	r = calloc(1, sizeof *r);
	if (r)
		r->base = MapViewOfFile(map, FILE_MAP_READ, 0, 0, 0);
	CloseHandle(map); /* the view keeps the mapping */
	if (!r || !r->base || !VirtualQuery(r->base, &mi, sizeof mi)) {
		st_stats_close(r);
		return -ENOMEM;
	}
	r->size = mi.RegionSize;
	r->h = (const struct tl__stats_hdr *)(const void *)r->base;
	if (r->size < sizeof *r->h || r->h->magic != TL_STATS_MAGIC ||
	    r->h->version != TL_STATS_VERSION || r->h->record_size != sizeof(tl_stats_shard) ||
	    r->h->stride != tl__stats_stride(r->h->capacity) ||
	    r->h->header_size != tl__stats_header_size(r->h->capacity) ||
	    r->h->families_off != tl__stats_families_off() ||
	    (uint64_t)r->h->header_size + (uint64_t)r->h->shards * r->h->stride > r->size) {
		st_stats_close(r);
		return -EPROTO;
	}
	*out = r;
	return 0;
}

/* Copy len bytes at p under the family table's sequence lock; *families and
 * *values get the counts that held. */
static inline int st_stats_meta_copy(st_stats_reader *r, void *buf, const void *p, size_t len,
				     uint32_t *families, uint32_t *values)
{
	struct tl__stats_hdr *h = (struct tl__stats_hdr *)(uintptr_t)r->h;

	for (int tries = 0; tries < 10000; tries++) {
		uint64_t s1 = atomic_load_explicit(&h->meta_seq, memory_order_acquire);

		if (s1 & 1) {
			SwitchToThread();
			continue;
		}
		*families = h->families;
		*values = h->values;
		memcpy(buf, p, len);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&h->meta_seq, memory_order_relaxed) == s1)
			return 0;
	}
	return -EAGAIN;
}

static inline int st_stats_info_get(st_stats_reader *r, tl_stats_info *out)
{
	const struct tl__stats_hdr *h = r->h;
	uint32_t families, values;
	char none;
	int rc = st_stats_meta_copy(r, &none, &none, 0, &families, &values);

	if (rc < 0)
		return rc;
	memset(out, 0, sizeof *out);
	out->version = h->version;
	out->shards = h->shards;
	out->flags = h->flags;
	out->state = atomic_load_explicit(&((struct tl__stats_hdr *)(uintptr_t)h)->state,
					  memory_order_relaxed);
	out->pid = h->pid;
	out->uid = h->uid;
	out->start_time = h->start_time;
	out->started_ns = h->started_ns;
	out->stall_ns = h->stall_ns;
	out->period_ns = h->period_ns;
	out->families = families;
	out->values = values;
	out->capacity = h->capacity;
	memcpy(out->driver, h->driver, sizeof out->driver);
	out->driver[sizeof out->driver - 1] = '\0';
	return 0;
}

static inline int st_stats_family_get(st_stats_reader *r, uint32_t idx, tl_stats_family *out)
{
	struct tl__stats_fam f;
	uint32_t families, values;
	int rc;

	if (idx >= r->h->capacity)
		return -EINVAL;
	rc = st_stats_meta_copy(r, &f, r->base + r->h->families_off + (size_t)idx * sizeof f,
				sizeof f, &families, &values);
	if (rc < 0)
		return rc;
	if (idx >= families)
		return -EINVAL;
	if (families > r->h->capacity || values > r->h->capacity || f.rows == 0 ||
	    f.first >= values || f.rows > values - f.first)
		return -EPROTO;
	memset(out, 0, sizeof *out);
	memcpy(out->name, f.name, sizeof out->name);
	out->name[sizeof out->name - 1] = '\0';
	out->kind = f.kind;
	out->rows = f.rows;
	out->first = f.first;
	return 0;
}

static inline int st_stats_shard_get(st_stats_reader *r, uint32_t shard, tl_stats_shard *out,
				     uint64_t *values, uint32_t nvalues)
{
	struct tl__stats_rec *rec;

	if (!out || shard >= r->h->shards || nvalues > r->h->capacity || (nvalues && !values))
		return -EINVAL;
	rec = (struct tl__stats_rec *)(uintptr_t)(r->base + r->h->header_size +
						 (size_t)shard * r->h->stride);
	for (int tries = 0; tries < 10000; tries++) {
		uint64_t s1 = atomic_load_explicit(&rec->seq, memory_order_acquire);

		if (s1 & 1) {
			SwitchToThread();
			continue;
		}
		memcpy(out, &rec->data, sizeof *out);
		if (nvalues)
			memcpy(values, (const unsigned char *)rec + sizeof *rec,
			       (size_t)nvalues * sizeof *values);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&rec->seq, memory_order_relaxed) == s1)
			return 0;
	}
	return -EAGAIN;
}

#endif
