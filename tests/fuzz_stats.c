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
 * return each record's bytes as they are in the file. Then the file shrinks
 * under the open reader, which must answer with errors, not crash.
 *
 * Every record's sequence word is made even first: on a file nobody writes,
 * an odd one only makes the reader retry 1000 times and sleep (-EAGAIN), a
 * path that costs ~50 ms and has nothing to parse.
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

/* What the layout allows, computed from the bytes (the reader's rules). */
static int acceptable(const struct tl__stats_hdr *h, size_t size)
{
	if (size < sizeof *h || h->magic != TL_STATS_MAGIC || h->version != TL_STATS_VERSION)
		return 0;
	if (h->header_size < sizeof *h || h->header_size % 64 || h->header_size > (1u << 20))
		return 0;
	if (h->stride < sizeof(struct tl__stats_rec) || h->stride % 64 || h->stride > (1u << 20))
		return 0;
	if (h->record_size != sizeof(tl_stats_shard) || h->shards < 1 ||
	    h->shards > TL_PLAN_MAX_SHARDS || h->named > TL_STATS_NAMED)
		return 0;
	return (uint64_t)size >= (uint64_t)h->header_size + (uint64_t)h->shards * h->stride;
}

static void check_info(tl_stats_reader *r, const struct tl__stats_hdr *h)
{
	tl_stats_info in;

	check(tl_stats_info_get(r, &in) == 0, "info_get on an unchanged file");
	check(in.version == h->version && in.shards == h->shards && in.flags == h->flags &&
		      in.pid == h->pid && in.named == h->named && in.stall_ns == h->stall_ns &&
		      in.period_ns == h->period_ns,
	      "info differs from the header");
	check(memchr(in.driver, '\0', sizeof in.driver) != NULL, "driver not terminated");
	for (uint32_t k = 0; k < TL_STATS_NAMED; k++)
		check(memchr(in.names[k], '\0', TL_STATS_NAME_MAX) != NULL, "name not terminated");
	check(tl_stats_info_get(r, NULL) == -EINVAL, "info_get(NULL)");
}

static void check_records(tl_stats_reader *r, const struct tl__stats_hdr *h, const uint8_t *buf)
{
	tl_stats_shard got;

	for (uint32_t i = 0; i < h->shards; i++) {
		size_t off;

		/* The first few and the last: enough for the arithmetic. */
		if (i == 8 && h->shards > 9)
			i = h->shards - 1;
		off = (size_t)h->header_size + (size_t)i * h->stride +
		      offsetof(struct tl__stats_rec, data);
		check(tl_stats_read(r, i, &got) == 0, "read of a record inside the file");
		check(!memcmp(&got, buf + off, sizeof got), "record differs from the file");
	}
	check(tl_stats_read(r, h->shards, &got) == -EINVAL, "read past the last shard");
	check(tl_stats_read(r, UINT32_MAX, &got) == -EINVAL, "read of shard 2^32-1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tl__stats_hdr h;
	tl_stats_reader *r = (tl_stats_reader *)&h;
	tl_stats_shard got;
	size_t errlen = 1 + size % 48;
	char err[256], *small;
	uint8_t *buf;
	int rc, ok;

	buf = malloc(size ? size : 1);
	check(buf != NULL, "out of memory");
	memcpy(buf, data, size);
	memset(&h, 0, sizeof h);
	if (size >= sizeof h) {
		memcpy(&h, buf, sizeof h);
		/* Even sequence words wherever the header puts records. */
		for (uint64_t i = 0; h.stride >= 8 && i < 4096; i++) {
			uint64_t off = (uint64_t)h.header_size + i * h.stride;

			if (off + 8 > size)
				break;
			buf[off] &= (uint8_t)~1u;
		}
	}
	put_file(buf, size);
	ok = acceptable(&h, size);

	rc = tl_stats_open_path(&r, path, err, sizeof err);
	check(rc == 0 || rc == -EPROTO, "open: unexpected return");
	check((rc == 0) == ok, "open disagrees with the layout rules");
	if (rc < 0) {
		check(r == NULL, "failed open left a reader");
		check(err[0] != '\0' && strlen(err) < sizeof err, "failed open without a reason");
		/* The same refusal into a short buffer: cut, terminated. */
		small = malloc(errlen);
		check(small != NULL, "out of memory");
		r = (tl_stats_reader *)&h;
		check(tl_stats_open_path(&r, path, small, errlen) == rc && r == NULL,
		      "second open differs");
		check(strlen(small) < errlen, "short error buffer overrun");
		free(small);
		free(buf);
		return 0;
	}
	check(err[0] == '\0', "successful open left a reason");
	check_info(r, &h);
	check_records(r, &h, buf);

	/* The region shrinks under the reader (a process that died and a new
	 * one that reused its pid): errors, never a crash or a stale read. */
	put_file(buf, size / 2);
	rc = tl_stats_info_get(r, &(tl_stats_info){0});
	check(rc == (acceptable(&h, size / 2) ? 0 : -EPROTO), "info_get on a shrunk region");
	for (uint32_t i = 0; i < h.shards && i < 8; i++) {
		rc = tl_stats_read(r, i, &got);
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
