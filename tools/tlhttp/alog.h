/* tools/tlhttp/alog.h: the access log: one bounded ring per shard, written to the file by a thread of its own. */
#ifndef TLHTTP_ALOG_H
#define TLHTTP_ALOG_H

#include <stddef.h>
#include <stdint.h>

/*
 * A shard never waits for the disk: it copies a formatted line into its own
 * single-producer ring (no lock, no system call), and the writer thread
 * takes what the rings hold and writes it with writev. When a ring has no
 * room for a line, the line is dropped and counted; a slow or stuck file
 * therefore costs the shards nothing but lost lines. The writer sleeps
 * 20 ms after a round that found nothing (no shard ever wakes it), so a
 * line reaches the file within about that long and an idle server costs
 * fifty short wake-ups a second.
 */
struct tlhttp_alog;

/* Opens path for appending (created with mode 0644) and makes one ring of
 * ring_bytes (a power of two, 4 KiB .. 1 GiB) per shard. Starts nothing.
 * Returns 0 and *out, -EINVAL, -ENOMEM, or the error of open(2). */
int tlhttp_alog_open(struct tlhttp_alog **out, const char *path, uint32_t shards,
		     uint32_t ring_bytes);

/* Starts the writer thread. 0, or the error of pthread_create. */
int tlhttp_alog_start(struct tlhttp_alog *a);

/* On shard `ring`'s thread only: append line[0..n). 0, or -ENOBUFS (no room:
 * dropped and counted) or -EINVAL (n above a quarter of the ring). */
int tlhttp_alog_put(struct tlhttp_alog *a, uint32_t ring, const char *line, uint32_t n);

/* Lines dropped on ring (read on its shard's thread, or after stop). */
uint64_t tlhttp_alog_dropped(const struct tlhttp_alog *a, uint32_t ring);

/*
 * After the shards stopped putting: the writer writes what the rings hold
 * and exits, waited for at most wait_ms. Returns 0 and frees everything, or
 * -ETIMEDOUT when the writer is still stuck in a write: then nothing is
 * freed (the thread may still read the rings) and *unwritten, if not NULL,
 * says how many bytes the rings still hold. Call once.
 */
int tlhttp_alog_stop(struct tlhttp_alog *a, unsigned wait_ms, uint64_t *unwritten);

#endif
