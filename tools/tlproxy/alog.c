/* tools/tlproxy/alog.c: the access log's per-shard rings and its writer thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alog.h"
#include "world.h"

/*
 * Each ring has one producer (its shard) and one consumer (the writer):
 * the producer fills the record at head and publishes it with a release
 * store; the consumer reads up to head with an acquire load and frees slots
 * with a release store of tail. A full ring drops the line instead of
 * waiting. The writer sleeps between batches (WRITER_NAP) rather than being
 * woken, so a shard never makes a system call for the log.
 */

#define WRITER_NAP_NS 20000000L
#define OUT_CAP 65536

struct tlp_alog_ring {
	_Atomic uint32_t head;
	char pad0[60];
	_Atomic uint32_t tail;
	char pad1[60];
	uint32_t mask;
	uint64_t dropped;
	struct tlp_alog_rec *rec;
};

struct tlp_alog {
	char *path;
	int fd;
	uint32_t n;
	struct tlp_alog_ring *rings;
	pthread_t th;
	int running;
	_Atomic int stop;
	volatile sig_atomic_t reopen;
	char out[OUT_CAP];
	size_t outlen;
};

int tlp_alog_new(const char *path, uint32_t shards, uint32_t slots, struct tlp_alog **out,
		 char *err, size_t errlen)
{
	struct tlp_alog *a = calloc(1, sizeof *a);
	int r;

	*out = NULL;
	if (!a || !(a->path = strdup(path)) || !(a->rings = calloc(shards, sizeof *a->rings))) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto fail;
	}
	a->n = shards;
	for (uint32_t i = 0; i < shards; i++) {
		a->rings[i].mask = slots - 1;
		a->rings[i].rec = calloc(slots, sizeof *a->rings[i].rec);
		if (!a->rings[i].rec) {
			snprintf(err, errlen, "out of memory");
			r = -ENOMEM;
			goto fail;
		}
	}
	a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (a->fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		goto fail;
	}
	*out = a;
	return 0;
fail:
	if (a) {
		for (uint32_t i = 0; a->rings && i < shards; i++)
			free(a->rings[i].rec);
		free(a->rings);
		free(a->path);
		free(a);
	}
	return r;
}

struct tlp_alog_ring *tlp_alog_ring(struct tlp_alog *a, uint32_t shard)
{
	return shard < a->n ? &a->rings[shard] : NULL;
}

struct tlp_alog_rec *tlp_alog_claim(struct tlp_alog_ring *r)
{
	uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

	if (h - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask) {
		r->dropped++;
		return NULL;
	}
	return &r->rec[h & r->mask];
}

void tlp_alog_commit(struct tlp_alog_ring *r)
{
	atomic_store_explicit(&r->head, atomic_load_explicit(&r->head, memory_order_relaxed) + 1,
			      memory_order_release);
}

uint64_t tlp_alog_dropped(struct tlp_alog_ring *r)
{
	uint64_t d = r->dropped;

	r->dropped = 0;
	return d;
}

void tlp_alog_reopen(struct tlp_alog *a)
{
	if (a)
		a->reopen = 1;
}

static void flush_out(struct tlp_alog *a)
{
	size_t off = 0;

	while (off < a->outlen) {
		ssize_t n = write(a->fd, a->out + off, a->outlen - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* a full disk: the lines are lost, the proxy goes on */
		off += (size_t)n;
	}
	a->outlen = 0;
}

static void fmt_peer(const tl_addr *p, char *buf, size_t cap)
{
	char ip[INET6_ADDRSTRLEN];

	if (p->sa.sa_family == AF_INET) {
		inet_ntop(AF_INET, &p->in.sin_addr, ip, sizeof ip);
		snprintf(buf, cap, "%s:%u", ip, ntohs(p->in.sin_port));
	} else if (p->sa.sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &p->in6.sin6_addr, ip, sizeof ip);
		snprintf(buf, cap, "[%s]:%u", ip, ntohs(p->in6.sin6_port));
	} else {
		snprintf(buf, cap, "unix");
	}
}

/* A name the client chose, printable: anything but graphic ASCII is '?'. */
static void clean(char *dst, size_t cap, const char *s)
{
	size_t i = 0;

	for (; s[i] && i + 1 < cap; i++)
		dst[i] = s[i] > ' ' && s[i] < 0x7f ? s[i] : '?';
	dst[i] = '\0';
	if (!i)
		snprintf(dst, cap, "-");
}

static const char *version(uint16_t v)
{
	return v == 0x0304 ? "1.3" : v == 0x0303 ? "1.2" : "?";
}

/* A TLS client's fields: " tls=1.3 cipher=... sni=... alpn=... resumed=0
 * hs_ms=..." once its handshake is done, " tls=failed reason=... sni=..."
 * when it failed; then a TLS server's " up_tls=1.3" (" up_resumed=1" after
 * it when that session resumed) or " up_tls=failed up_reason=..."; "" for
 * plain sides. */
static void fmt_tls(const struct tlp_alog_rec *r, char *buf, size_t cap)
{
	const struct tlp_alog_tls *t = &r->tls;
	char sni[64], alpn[16];

	int n = 0;

	buf[0] = '\0';
	if (t->sides & 1) {
		clean(sni, sizeof sni, t->sni);
		clean(alpn, sizeof alpn, t->alpn);
		if (t->reason || !t->version)
			n = snprintf(buf, cap, " tls=failed reason=%s sni=%s hs_ms=%.3f",
				     t->reason ? tl_tls_reason_name(t->reason) : "none", sni,
				     (double)t->hs_us / 1e3);
		else
			n = snprintf(buf, cap, " tls=%s cipher=%s sni=%s alpn=%s resumed=%u hs_ms=%.3f",
				     version(t->version), t->cipher[0] ? t->cipher : "-", sni, alpn,
				     t->resumed, (double)t->hs_us / 1e3);
	}
	if ((t->sides & 2) && n >= 0 && (size_t)n < cap) {
		if (t->up_reason || !t->up_version)
			snprintf(buf + n, cap - (size_t)n, " up_tls=failed up_reason=%s",
				 t->up_reason ? tl_tls_reason_name(t->up_reason) : "none");
		else
			snprintf(buf + n, cap - (size_t)n, " up_tls=%s%s", version(t->up_version),
				 t->up_resumed ? " up_resumed=1" : "");
	}
}

static void line(struct tlp_alog *a, const struct tlp_alog_rec *r)
{
	char ts[40], peer[64], err[40], tls[256];
	struct tm tm;
	int n;

	if (a->outlen + 1024 > OUT_CAP)
		flush_out(a);
	gmtime_r(&r->end.tv_sec, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
	fmt_peer(&r->peer, peer, sizeof peer);
	if (r->cerr) {
		const char *name = strerrorname_np(-r->cerr);

		if (name)
			snprintf(err, sizeof err, " err=%s", name);
		else
			snprintf(err, sizeof err, " err=%d", -r->cerr);
	} else {
		err[0] = '\0';
	}
	if (r->udp) {
		n = snprintf(a->out + a->outlen, OUT_CAP - a->outlen,
			     "%s.%03ldZ %s %s %s in=%llu out=%llu ms=%.3f end=%s udp dgrams_in=%llu "
			     "dgrams_out=%llu%s\n",
			     ts, r->end.tv_nsec / 1000000, r->listener ? r->listener->name : "-",
			     peer, r->server[0] ? r->server : "-", (unsigned long long)r->bytes[0],
			     (unsigned long long)r->bytes[1], (double)r->dur_ns / 1e6,
			     r->cause < TLP_END_COUNT ? tlp_cause_names[r->cause] : "?",
			     (unsigned long long)r->dgrams[0], (unsigned long long)r->dgrams[1], err);
		if (n > 0 && (size_t)n < OUT_CAP - a->outlen)
			a->outlen += (size_t)n;
		return;
	}
	fmt_tls(r, tls, sizeof tls);
	n = snprintf(a->out + a->outlen, OUT_CAP - a->outlen,
		     "%s.%03ldZ %s %s %s in=%llu out=%llu ms=%.3f end=%s retries=%u%s%s\n", ts,
		     r->end.tv_nsec / 1000000, r->listener ? r->listener->name : "-", peer,
		     r->server[0] ? r->server : "-", (unsigned long long)r->bytes[0],
		     (unsigned long long)r->bytes[1], (double)r->dur_ns / 1e6,
		     r->cause < TLP_END_COUNT ? tlp_cause_names[r->cause] : "?", r->retries, err, tls);
	if (n > 0 && (size_t)n < OUT_CAP - a->outlen)
		a->outlen += (size_t)n;
}

/* Take every committed record of every ring. Returns how many. */
static uint32_t drain(struct tlp_alog *a)
{
	uint32_t got = 0;

	for (uint32_t i = 0; i < a->n; i++) {
		struct tlp_alog_ring *r = &a->rings[i];
		uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
		uint32_t h = atomic_load_explicit(&r->head, memory_order_acquire);

		for (; t != h; t++, got++)
			line(a, &r->rec[t & r->mask]);
		atomic_store_explicit(&r->tail, t, memory_order_release);
	}
	flush_out(a);
	return got;
}

static void *writer(void *arg)
{
	struct tlp_alog *a = arg;
	struct timespec nap = {0, WRITER_NAP_NS};

	for (;;) {
		int stop = atomic_load(&a->stop);

		drain(a);
		if (a->reopen) {
			int fd;

			a->reopen = 0;
			fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
			if (fd < 0) {
				tlp_log("access log: cannot reopen %s: %s (still writing the old file)",
					a->path, strerror(errno));
			} else {
				close(a->fd);
				a->fd = fd;
			}
		}
		if (stop)
			break;
		nanosleep(&nap, NULL);
	}
	return NULL;
}

int tlp_alog_start(struct tlp_alog *a)
{
	int r = pthread_create(&a->th, NULL, writer, a);

	if (r)
		return -r;
	pthread_setname_np(a->th, "tlproxy-log");
	a->running = 1;
	return 0;
}

void tlp_alog_free(struct tlp_alog *a)
{
	if (!a)
		return;
	if (a->running) {
		atomic_store(&a->stop, 1);
		pthread_join(a->th, NULL);
	}
	drain(a);
	close(a->fd);
	for (uint32_t i = 0; i < a->n; i++)
		free(a->rings[i].rec);
	free(a->rings);
	free(a->path);
	free(a);
}
