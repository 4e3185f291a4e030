/* tools/tlhttp/alog.c: access-log rings (one producer each: a shard) and the writer thread that empties them into the file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>

#include "tlhttp/alog.h"

#define NAP_NS (20 * 1000000L)

/* head is written by the shard, tail by the writer; each on a cache line of
 * its own so that neither side's stores move the other's line. */
struct ring {
	_Alignas(64) _Atomic uint64_t head;
	uint64_t tail_seen; /* the shard's last look at tail */
	uint64_t dropped;
	_Alignas(64) _Atomic uint64_t tail;
	char *buf;
	uint64_t mask;
};

struct tlhttp_alog {
	int fd;
	uint32_t n;
	struct ring *rings;
	pthread_t thread;
	int started;
	_Atomic int stop;
	int reported; /* a write error was reported */
};

int tlhttp_alog_open(struct tlhttp_alog **out, const char *path, uint32_t shards,
		     uint32_t ring_bytes)
{
	struct tlhttp_alog *a;

	if (!out || !path || !shards || ring_bytes < 4096 || ring_bytes > (1u << 30) ||
	    (ring_bytes & (ring_bytes - 1)))
		return -EINVAL;
	a = calloc(1, sizeof *a);
	if (!a)
		return -ENOMEM;
	a->rings = aligned_alloc(64, sizeof *a->rings * shards);
	if (!a->rings) {
		free(a);
		return -ENOMEM;
	}
	memset(a->rings, 0, sizeof *a->rings * shards);
	a->n = shards;
	for (uint32_t i = 0; i < shards; i++) {
		a->rings[i].buf = malloc(ring_bytes);
		a->rings[i].mask = ring_bytes - 1;
		if (!a->rings[i].buf) {
			while (i--)
				free(a->rings[i].buf);
			free(a->rings);
			free(a);
			return -ENOMEM;
		}
	}
	a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
	if (a->fd < 0) {
		int e = -errno;
		for (uint32_t i = 0; i < shards; i++)
			free(a->rings[i].buf);
		free(a->rings);
		free(a);
		return e;
	}
	*out = a;
	return 0;
}

int tlhttp_alog_put(struct tlhttp_alog *a, uint32_t ring, const char *line, uint32_t n)
{
	struct ring *r = &a->rings[ring];
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t cap = r->mask + 1;

	if (n > cap / 4)
		return -EINVAL;
	if (head + n - r->tail_seen > cap) {
		r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (head + n - r->tail_seen > cap) {
			r->dropped++;
			return -ENOBUFS;
		}
	}
	uint64_t at = head & r->mask, first = cap - at < n ? cap - at : n;
	memcpy(r->buf + at, line, first);
	memcpy(r->buf, line + first, n - first);
	atomic_store_explicit(&r->head, head + n, memory_order_release);
	return 0;
}

uint64_t tlhttp_alog_dropped(const struct tlhttp_alog *a, uint32_t ring)
{
	return a->rings[ring].dropped;
}

/* Writes what ring r holds now; returns the bytes taken off it. */
static uint64_t drain(struct tlhttp_alog *a, struct ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t cap = r->mask + 1, n = head - tail, at = tail & r->mask;
	struct iovec iov[2];
	int niov = 1;
	ssize_t w;

	if (!n)
		return 0;
	iov[0].iov_base = r->buf + at;
	iov[0].iov_len = cap - at < n ? cap - at : n;
	if (iov[0].iov_len < n) {
		iov[1].iov_base = r->buf;
		iov[1].iov_len = n - iov[0].iov_len;
		niov = 2;
	}
	do
		w = writev(a->fd, iov, niov);
	while (w < 0 && errno == EINTR);
	if (w < 0) {
		/* A full disk or a broken file: what could not be written is
		 * dropped, not retried forever, so the rings keep moving. */
		if (!a->reported) {
			fprintf(stderr, "tlhttp: access log: write failed: %s (lines are dropped "
					"while it fails)\n", strerror(errno));
			a->reported = 1;
		}
		w = (ssize_t)n;
	}
	atomic_store_explicit(&r->tail, tail + (uint64_t)w, memory_order_release);
	return (uint64_t)w;
}

static void *writer(void *arg)
{
	struct tlhttp_alog *a = arg;

	for (;;) {
		/* Read stop before the round: a round that starts after it
		 * saw stop sees every line put before stop was set. */
		int stopping = atomic_load_explicit(&a->stop, memory_order_acquire);
		uint64_t got = 0;

		for (uint32_t i = 0; i < a->n; i++)
			got += drain(a, &a->rings[i]);
		if (got)
			continue;
		if (stopping)
			break;
		struct timespec ts = {0, NAP_NS};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int tlhttp_alog_start(struct tlhttp_alog *a)
{
	int rc = pthread_create(&a->thread, NULL, writer, a);

	if (rc)
		return -rc;
	a->started = 1;
	return 0;
}

int tlhttp_alog_stop(struct tlhttp_alog *a, unsigned wait_ms, uint64_t *unwritten)
{
	if (unwritten)
		*unwritten = 0;
	if (!a)
		return 0;
	atomic_store_explicit(&a->stop, 1, memory_order_release);
	if (a->started) {
		struct timespec ts;
		int rc;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += wait_ms / 1000;
		ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		rc = pthread_timedjoin_np(a->thread, NULL, &ts);
		if (rc) {
			uint64_t left = 0;
			for (uint32_t i = 0; i < a->n; i++)
				left += atomic_load(&a->rings[i].head) - atomic_load(&a->rings[i].tail);
			if (unwritten)
				*unwritten = left;
			return -ETIMEDOUT;
		}
	}
	close(a->fd);
	for (uint32_t i = 0; i < a->n; i++)
		free(a->rings[i].buf);
	free(a->rings);
	free(a);
	return 0;
}
