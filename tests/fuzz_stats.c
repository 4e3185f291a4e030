/* tests/fuzz_stats.c: libFuzzer target for the live stats reader (shards/stats.c): the input is a stats region file. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats_region.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * Each input is written to one file (on tmpfs when /dev/shm is there) and
 * opened with tl_stats_open_path; whatever it holds, the reader must refuse
 * it with -EPROTO and a reason, or accept exactly what the layout allows and
 * return each record's bytes (and values) as they are in the file, each
 * family the table holds or -EPROTO for one that breaks the rules, and each
 * label cut inside its slot. Then the file shrinks under the open reader,
 * which must answer with errors, not crash.
 *
 * Every record's sequence word, and the header's meta_seq, is made even
 * first: on a file nobody writes, an odd one only makes the reader retry
 * 1000 times and sleep (-EAGAIN), a path that costs ~50 ms and has nothing
 * to parse.
 */

static char dir[64], path[96];
static int fd = -1;

static void check(int ok, const char *what)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_stats: %s\n", what);
	abort();
}

static void cleanup(void)
{
	if (fd >= 0)
		close(fd);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(dir, sizeof dir, "/dev/shm/tl-fuzz-stats-XXXXXX");
	if (!mkdtemp(dir)) {
		snprintf(dir, sizeof dir, "/tmp/tl-fuzz-stats-XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
	snprintf(path, sizeof path, "%s/turnloop.1", dir);
	fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	atexit(cleanup);
	return 0;
}

static void put_file(const uint8_t *buf, size_t len)
{
	check(ftruncate(fd, 0) == 0, "ftruncate");
	check(pwrite(fd, buf, len, 0) == (ssize_t)len, "pwrite");
}

/* What the layout allows, computed from the bytes (the reader's rules):
 * version 5's shape follows from the capacity alone. */
static int acceptable(const struct tl__stats_hdr *h, size_t size)
{
	uint64_t cap = h->capacity, fam_end, lab_end, hdr, stride;

	if (size < sizeof *h || h->magic != TL_STATS_MAGIC || h->version != TL_STATS_VERSION)
		return 0;
	if (cap > TL_STATS_VALUES_MAX)
		return 0;
	/* The offsets, computed here the long way. */
	fam_end = (sizeof *h + 63) / 64 * 64 + cap * 48;
	lab_end = (fam_end + 63) / 64 * 64 + cap * TL_STATS_LABEL_MAX;
	hdr = (lab_end + 63) / 64 * 64;
	stride = (sizeof(struct tl__stats_rec) + cap * 8 + 63) / 64 * 64;
	if (h->families_off != (sizeof *h + 63) / 64 * 64 ||
	    h->labels_off != (fam_end + 63) / 64 * 64 || h->header_size != hdr ||
	    h->stride != stride)
		return 0;
	if (h->record_size != sizeof(tl_stats_shard) || h->shards < 1 ||
	    h->shards > TL_PLAN_MAX_SHARDS || h->families > cap || h->values > cap)
		return 0;
	return (uint64_t)size >= (uint64_t)h->header_size + (uint64_t)h->shards * h->stride;
}

static void check_info(tl_stats_reader *r, const struct tl__stats_hdr *h)
{
	tl_stats_info in;

	check(tl_stats_info_get(r, &in) == 0, "info_get on an unchanged file");
	check(in.version == h->version && in.shards == h->shards && in.flags == h->flags &&
		      in.pid == h->pid && in.uid == h->uid && in.start_time == h->start_time &&
		      in.families == h->families && in.values == h->values &&
		      in.capacity == h->capacity && in.stall_ns == h->stall_ns &&
		      in.period_ns == h->period_ns,
	      "info differs from the header");
	check(memchr(in.driver, '\0', sizeof in.driver) != NULL, "driver not terminated");
	check(tl_stats_info_get(r, NULL) == -EINVAL, "info_get(NULL)");
}

/* Families and labels: what the table holds, or -EPROTO for an entry that
 * breaks the rules (the rules computed here again). */
static void check_meta(tl_stats_reader *r, const struct tl__stats_hdr *h, const uint8_t *buf)
{
	char label[TL_STATS_LABEL_MAX];
	tl_stats_family f;

	for (uint32_t i = 0; i < h->families + 1 && i < h->capacity + 1; i++) {
		const struct tl__stats_fam *e = (const void *)(buf + h->families_off + (size_t)i * 48);
		int rc = tl_stats_family_get(r, i, &f);

		if (i >= h->families) {
			check(rc == -EINVAL, "family past the table");
			break;
		}
		if ((e->kind != TL_STAT_COUNTER && e->kind != TL_STAT_GAUGE) || e->rows == 0 ||
		    (uint64_t)e->first + e->rows > h->values) {
			check(rc == -EPROTO, "a family that breaks the rules accepted");
			continue;
		}
		check(rc == 0, "a good family refused");
		check(f.kind == e->kind && f.rows == e->rows && f.first == e->first &&
			      !strncmp(f.name, e->name, sizeof f.name - 1) &&
			      memchr(f.name, '\0', sizeof f.name),
		      "family differs from the file");
		if (i == 16 && h->families > 17)
			i = h->families - 2;
	}
	for (uint32_t v = 0; v <= h->values && v < h->capacity; v++) {
		int rc = tl_stats_label_get(r, v, label, sizeof label);

		if (v >= h->values) {
			check(rc == -EINVAL, "label past the slots in use");
			break;
		}
		check(rc >= 0 && rc < (int)TL_STATS_LABEL_MAX && strlen(label) == (size_t)rc &&
			      !strncmp(label, (const char *)buf + h->labels_off +
						      (size_t)v * TL_STATS_LABEL_MAX, (size_t)rc),
		      "label differs from the file");
		if (v == 16 && h->values > 17)
			v = h->values - 2;
	}
	check(tl_stats_family_get(r, UINT32_MAX, &f) == -EINVAL, "family 2^32-1");
	check(tl_stats_label_get(r, UINT32_MAX, label, sizeof label) == -EINVAL, "label 2^32-1");
}

static void check_records(tl_stats_reader *r, const struct tl__stats_hdr *h, const uint8_t *buf)
{
	static uint64_t vals[TL_STATS_VALUES_MAX];
	tl_stats_shard got;

	for (uint32_t i = 0; i < h->shards; i++) {
		size_t off;

		/* The first few and the last: enough for the arithmetic. */
		if (i == 8 && h->shards > 9)
			i = h->shards - 1;
		off = (size_t)h->header_size + (size_t)i * h->stride +
		      offsetof(struct tl__stats_rec, data);
		check(tl_stats_shard_get(r, i, &got, vals, h->capacity) == 0,
		      "read of a record inside the file");
		check(!memcmp(&got, buf + off, sizeof got), "record differs from the file");
		off += sizeof(struct tl__stats_rec) - offsetof(struct tl__stats_rec, data);
		check(!memcmp(vals, buf + off, (size_t)h->capacity * 8), "values differ from the file");
	}
	check(tl_stats_shard_get(r, h->shards, &got, NULL, 0) == -EINVAL, "read past the last shard");
	check(tl_stats_shard_get(r, UINT32_MAX, &got, NULL, 0) == -EINVAL, "read of shard 2^32-1");
	check(tl_stats_shard_get(r, 0, &got, vals, h->capacity + 1) == -EINVAL, "values past capacity");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tl__stats_hdr h;
	tl_stats_reader *r = (tl_stats_reader *)&h;
	tl_stats_shard got;
	uint8_t *buf;
	int rc, ok;

	buf = malloc(size ? size : 1);
	check(buf != NULL, "out of memory");
	memcpy(buf, data, size);
	memset(&h, 0, sizeof h);
	if (size >= sizeof h) {
		memcpy(&h, buf, sizeof h);
		/* Even sequence words wherever the header puts records. */
		buf[offsetof(struct tl__stats_hdr, meta_seq)] &= (uint8_t)~1u;
		memcpy(&h, buf, sizeof h);
		for (uint64_t i = 0; h.stride >= 8 && i < 4096; i++) {
			uint64_t off = (uint64_t)h.header_size + i * h.stride;

			if (off + 8 > size)
				break;
			buf[off] &= (uint8_t)~1u;
		}
	}
	put_file(buf, size);
	ok = acceptable(&h, size);

	rc = tl_stats_open_path(&r, path);
	check(rc == 0 || rc == -EPROTO, "open: unexpected return");
	check((rc == 0) == ok, "open disagrees with the layout rules");
	if (rc < 0) {
		check(r == NULL, "failed open left a reader");
		check(tl_error_detail()[0] != '\0' && !strchr(tl_error_detail(), '\n'),
		      "failed open without a one-line reason");
		/* The same refusal again: the same code and reason. */
		char first[400];

		snprintf(first, sizeof first, "%s", tl_error_detail());
		r = (tl_stats_reader *)&h;
		check(tl_stats_open_path(&r, path) == rc && r == NULL, "second open differs");
		check(strcmp(first, tl_error_detail()) == 0, "second open gives another reason");
		free(buf);
		return 0;
	}
	check(tl_error_detail()[0] == '\0', "successful open left a reason");
	check_info(r, &h);
	check_meta(r, &h, buf);
	check_records(r, &h, buf);

	/* The region shrinks under the reader (a process that died and a new
	 * one that reused its pid): errors, never a crash or a stale read. */
	put_file(buf, size / 2);
	rc = tl_stats_info_get(r, &(tl_stats_info){0});
	check(rc == (acceptable(&h, size / 2) ? 0 : -EPROTO), "info_get on a shrunk region");
	for (uint32_t i = 0; i < h.shards && i < 8; i++) {
		rc = tl_stats_shard_get(r, i, &got, NULL, 0);
		check(rc == 0 || rc == -EPROTO, "read of a shrunk region: unexpected return");
		if (rc == 0) {
			size_t end = (size_t)h.header_size + (size_t)i * h.stride +
				     sizeof(struct tl__stats_rec);

			check(end <= size / 2, "read a record the file no longer holds");
		}
	}
	tl_stats_close(r);
	free(buf);
	return 0;
}
