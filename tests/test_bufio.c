/* tests/test_bufio.c: buffered streams (turnloop/bufio.h) on a real connection of each driver: framing across leases, no copy inside one, limits, the peer's end, the Redis protocol's requests (turnloop/resp.h), coalesced writes, the ring, backpressure, errors; and files written whole (tl_fout: put in place at the end, left untouched after a failed write or rename, dropped). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CUnit/Basic.h>

#include <turnloop/bufio.h>
#include <turnloop/resp.h>
#include "harness.h"

/*
 * Every test makes a loop (with small pooled buffers where it says so),
 * connects a pair on it (TCP on loopback on the kernel drivers, the
 * in-memory network on the simulation), reads the server side with
 * tl_read_start into a reader, or writes it through a writer, and ends
 * with the reader and writer gone, no lease outstanding
 * (tl_loop_stats.leases_out 0), the loop closed and no descriptor left.
 */

enum { TOK_RD = 0x100, TOK_W = 0x200 };

static tl_loop_stats lstats(tl_loop *l)
{
	tl_loop_stats s;
	tl_loop_stats_get(l, &s);
	return s;
}

/* ---- The read side: a read_start whose completions go to a reader ---- */

struct rd {
	h_ctx c;
	tl_handle srv, cli;
	tl_op op;
	uint32_t seen;       /* log entries handed on */
	tl_rbuf r;
	uint8_t *mem;        /* the reader's buffer (the test's) */
	uint32_t max;
	uint32_t fed;        /* leases fed */
	int eof, term;
	/* The leases fed, newest last, for "this view lies in that lease". */
	struct {
		const uint8_t *data;
		uint32_t len;
	} lease[64];
};

/* A loop with pooled buffers of lease_size bytes (0: the default) and a pair. */
static int rd_open(struct rd *d, uint32_t lease_size, uint32_t max)
{
	memset(d, 0, sizeof *d);
	tl_config cfg;
	tl_config_init(&cfg);
	if (lease_size)
		cfg.pooled_buffer_size = lease_size;
	h_ctx_init(&d->c, h_loop_cfg(&cfg));
	if (h_pair(&d->c, &d->c, AF_INET, &d->srv, &d->cli) != 0)
		return -1;
	d->max = max;
	d->mem = malloc(max);
	CU_ASSERT_PTR_NOT_NULL_FATAL(d->mem);
	H_EQ(tl_rbuf_init(&d->r, d->c.loop, d->mem, max), 0);
	int rc = tl_read_start(d->c.loop, d->srv, TOK_RD, &d->op);
	H_EQ(rc, 0);
	return rc;
}

/* Hand the reader every completion of its read logged since the last call. */
static void pump(struct rd *d)
{
	for (; d->seen < d->c.log.n; d->seen++) {
		const tl_completion *x = &d->c.log.v[d->seen];
		if (!tl_op_eq(x->op, d->op))
			continue;
		if (x->flags & TL_F_LEASE) {
			memmove(d->lease, d->lease + 1, sizeof d->lease - sizeof d->lease[0]);
			d->lease[63].data = x->u.read.lease.data;
			d->lease[63].len = (uint32_t)x->result;
			d->fed++;
		}
		H_EQ(tl_rbuf_feed(&d->r, x), 0);
		if (x->flags & TL_F_EOF)
			d->eof = 1;
		if (x->flags & TL_F_TERMINAL)
			d->term = 1;
	}
}

struct want {
	struct rd *d;
	uint32_t bytes;
};

static int pred_buffered(void *p)
{
	struct want *w = p;
	pump(w->d);
	return tl_rbuf_buffered(&w->d->r) >= w->bytes;
}

/* The reader was fed at least w->bytes leases in all. */
static int pred_fed(void *p)
{
	struct want *w = p;
	pump(w->d);
	return w->d->fed >= w->bytes;
}

static int pred_term(void *p)
{
	struct rd *d = p;
	pump(d);
	return d->term;
}

/* Turn until the reader holds at least n bytes: 1, or 0 with a failure. */
static int rd_wait(struct rd *d, uint32_t n)
{
	struct want w = {d, n};
	int ok = h_until(&d->c, pred_buffered, &w, H_WAIT_MS);
	H_TRUE(ok, "the reader holds %u bytes, waited for %u", tl_rbuf_buffered(&d->r), n);
	return ok;
}

/* Calls next as a host would, as bytes come: done when it returns nonzero
 * (rc, m, len), or, with bytes set, once the reader holds that many. */
struct nx {
	struct rd *d;
	uint32_t bytes;
	int rc;
	const uint8_t *m;
	uint32_t len;
};

static int pred_next(void *p)
{
	struct nx *a = p;
	pump(a->d);
	a->rc = tl_rbuf_next(&a->d->r, &a->m, &a->len);
	return a->rc != 0 || (a->bytes && tl_rbuf_buffered(&a->d->r) >= a->bytes);
}

/* Write buf[0..len) from the client side and wait until it is written. */
static void cli_write(struct rd *d, const void *buf, uint32_t len)
{
	H_EQ(h_write_all(&d->c, d->cli, buf, len), (int64_t)len);
}

/* Index in d->lease of the lease that holds p[0..len), or -1. */
static int in_lease(const struct rd *d, const uint8_t *p, uint32_t len)
{
	for (int i = 63; i >= 0; i--)
		if (d->lease[i].data && p >= d->lease[i].data &&
		    p + len <= d->lease[i].data + d->lease[i].len)
			return i;
	return -1;
}

static int in_rbuf(const struct rd *d, const uint8_t *p, uint32_t len)
{
	return p >= d->mem && p + len <= d->mem + d->max;
}

/* End: stop the read (its last bytes to the reader), end the reader,
 * check that no lease is out, close the pair and the loop. */
static void rd_close(struct rd *d, int fds)
{
	if (!d->term && d->op.v) {
		H_EQ(tl_stop(d->c.loop, d->op), 0);
		H_TRUE(h_until(&d->c, pred_term, d, H_WAIT_MS), "the read did not end");
	}
	pump(d);
	tl_rbuf_fini(&d->r);
	H_EQ(tl_rbuf_leases(&d->r), 0);
	if (d->srv.v)
		h_close(&d->c, d->srv, 1);
	if (d->cli.v)
		h_close(&d->c, d->cli, 2);
	H_EQ(lstats(d->c.loop).leases_out, 0);
	free(d->mem);
	tl_loop *l = d->c.loop;
	h_ctx_fini(&d->c);
	h_end(l, fds);
}

/* ---- Framing split at every byte ---- */

struct framing {
	int prefix;              /* 0: delimiter; else its bytes */
	uint32_t flags;          /* prefix flags */
	const char *delim;
	uint32_t dlen;
};

/* The frame of payload msg[0..n) under f, into out: its length. */
static uint32_t make_frame(const struct framing *f, const void *msg, uint32_t n, uint8_t *out)
{
	if (!f->prefix) {
		memcpy(out, msg, n);
		memcpy(out + n, f->delim, f->dlen);
		return n + f->dlen;
	}
	uint32_t len = n + ((f->flags & TL_RBUF_PREFIX_COUNTED) ? (uint32_t)f->prefix : 0);
	for (int i = 0; i < f->prefix; i++)
		out[i] = (uint8_t)(len >> (8 * (f->prefix - 1 - i)));
	memcpy(out + f->prefix, msg, n);
	return n + (uint32_t)f->prefix;
}

static void set_framing(tl_rbuf *r, const struct framing *f)
{
	if (f->prefix)
		H_EQ(tl_rbuf_set_prefix(r, (uint32_t)f->prefix, f->flags), 0);
	else
		H_EQ(tl_rbuf_set_delim(r, f->delim, f->dlen), 0);
}

/*
 * One frame, sent in two writes split at k, for every k: the first part
 * arrives alone (the reader holds its bytes and no lease, and yields
 * nothing), then the rest completes it. With leases of lease_size bytes
 * each part is cut further. The message comes out whole, assembled in the
 * reader's buffer; nothing is left after it.
 */
static void split_every_byte(const struct framing *f, const char *msg, uint32_t lease_size)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, lease_size, 64) != 0) {
		rd_close(&d, fds);
		return;
	}
	set_framing(&d.r, f);
	uint8_t frame[64];
	uint32_t n = (uint32_t)strlen(msg), flen = make_frame(f, msg, n, frame);
	for (uint32_t k = 1; k < flen; k++) {
		struct nx a = {&d, k, 0, NULL, 0};
		cli_write(&d, frame, k);
		H_TRUE(h_until(&d.c, pred_next, &a, H_WAIT_MS), "split at %u: the reader holds %u",
		       k, tl_rbuf_buffered(&d.r));
		H_EQ(a.rc, 0);
		H_EQ(tl_rbuf_buffered(&d.r), k);
		H_EQ(tl_rbuf_leases(&d.r), 0);
		cli_write(&d, frame + k, flen - k);
		a.bytes = 0;
		h_until(&d.c, pred_next, &a, H_WAIT_MS);
		H_TRUE(a.rc == 1, "split at %u of %u: next = %d%s", k, flen, a.rc, h_errname(a.rc));
		if (a.rc != 1)
			break;
		const uint8_t *m = a.m;
		uint32_t len = a.len;
		H_EQ(len, n);
		H_TRUE(len == n && memcmp(m, msg, n) == 0, "split at %u: the message differs", k);
		H_TRUE(in_rbuf(&d, m, len), "split at %u: a spanning message not in the reader's buffer",
		       k);
		H_EQ(tl_rbuf_next(&d.r, &m, &len), 0);
		H_EQ(tl_rbuf_buffered(&d.r), 0);
		H_EQ(tl_rbuf_leases(&d.r), 0);
	}
	rd_close(&d, fds);
}

static const struct framing CRLF = {0, 0, "\r\n", 2};
static const struct framing BLANK = {0, 0, "\r\n\r\n", 4};

static void split_delim_crlf(void)
{
	split_every_byte(&CRLF, "SET key value-0123", 0);
	split_every_byte(&CRLF, "SET key value-0123", 3);
}

/* A 4-byte delimiter whose own prefixes come earlier in the message (a
 * false start at each), cut between any two of its bytes. */
static void split_delim_4byte(void)
{
	split_every_byte(&BLANK, "Host: a\r\nX: \r\n\rb", 0);
	split_every_byte(&BLANK, "Host: a\r\nX: \r\n\rb", 3);
}

static void split_delim_1byte(void)
{
	const struct framing nul = {0, 0, "", 1};
	split_every_byte(&nul, "zero-terminated words", 0);
	split_every_byte(&nul, "zero-terminated words", 1);
}

static void split_prefix_1(void)
{
	const struct framing f = {1, 0, NULL, 0};
	split_every_byte(&f, "a payload of 23 bytes..", 0);
	split_every_byte(&f, "a payload of 23 bytes..", 3);
}

static void split_prefix_2_counted(void)
{
	const struct framing f = {2, TL_RBUF_PREFIX_COUNTED, NULL, 0};
	split_every_byte(&f, "counted, prefix and all", 0);
	split_every_byte(&f, "counted, prefix and all", 3);
}

static void split_prefix_4(void)
{
	const struct framing f = {4, 0, NULL, 0};
	const struct framing fc = {4, TL_RBUF_PREFIX_COUNTED, NULL, 0};
	split_every_byte(&f, "four bytes of length", 0);
	split_every_byte(&f, "four bytes of length", 3);
	split_every_byte(&fc, "four bytes, counted", 1);
}

/* ---- No copy inside one lease ---- */

/* Three frames and the start of a fourth in one write (one lease): each of
 * the three points into that lease; the fourth, completed by a second
 * write with a fifth, is assembled in the reader's buffer; the fifth,
 * whole in the second lease, points into it. */
static void no_copy_inside_lease(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 0, 256) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_delim(&d.r, "\n", 1), 0);
	const char *a = "one\ntwo\nthree\nfou", *b = "r\nfive\n";
	cli_write(&d, a, (uint32_t)strlen(a));
	if (!rd_wait(&d, (uint32_t)strlen(a)))
		goto out;
	H_EQ_FATAL(d.fed, 1); /* one small write is one read on every driver */
	const char *want[] = {"one", "two", "three"};
	for (int i = 0; i < 3; i++) {
		const uint8_t *m;
		uint32_t len;
		H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
		H_TRUE(len == strlen(want[i]) && memcmp(m, want[i], len) == 0, "message %d differs",
		       i);
		H_EQ(in_lease(&d, m, len), 63);
		H_EQ(tl_rbuf_leases(&d.r), 1);
	}
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0); /* "fou" copied, the lease given back */
	H_EQ(tl_rbuf_buffered(&d.r), 3);
	cli_write(&d, b, (uint32_t)strlen(b));
	if (!rd_wait(&d, 3 + (uint32_t)strlen(b)))
		goto out;
	H_EQ(d.fed, 2);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_TRUE(len == 4 && memcmp(m, "four", 4) == 0, "the spanning message differs");
	H_TRUE(in_rbuf(&d, m, len), "the spanning message is not in the reader's buffer");
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_TRUE(len == 4 && memcmp(m, "five", 4) == 0, "the fifth message differs");
	H_EQ(in_lease(&d, m, len), 63);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0);
out:
	rd_close(&d, fds);
}

/* ---- Limits ---- */

/* A delimited frame of exactly max bytes passes, one of max + 1 is
 * -EMSGSIZE, sticky, with every lease given back, and a lease fed after
 * it is given back at once. In one lease (lease_size 0) and across leases
 * of 5 bytes. */
static void delim_max(uint32_t lease_size)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, lease_size, 32) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_delim(&d.r, "\r\n", 2), 0);
	uint8_t f[40];
	memset(f, 'x', sizeof f);
	memcpy(f + 30, "\r\n", 2); /* 32 bytes */
	cli_write(&d, f, 32);
	if (!rd_wait(&d, 32))
		goto out;
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_EQ(len, 30);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 0);
	memset(f, 'y', sizeof f);
	memcpy(f + 31, "\r\n", 2); /* 33 bytes: refused as soon as 32 came */
	cli_write(&d, f, 32);
	struct nx a = {&d, 0, 0, NULL, 0};
	H_TRUE(h_until(&d.c, pred_next, &a, H_WAIT_MS), "32 bytes with no delimiter: next = 0");
	H_EQ(a.rc, -EMSGSIZE);
	cli_write(&d, f + 32, 1);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), -EMSGSIZE);
	H_EQ(tl_rbuf_peek(&d.r, 1, &m), -EMSGSIZE);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	H_EQ(tl_rbuf_buffered(&d.r), 0);
	uint32_t fed = d.fed;
	cli_write(&d, "more\r\n", 6);
	struct want w = {&d, fed + 1};
	H_TRUE(h_until(&d.c, pred_fed, &w, H_WAIT_MS), "the bytes after the error were not read");
	H_EQ(tl_rbuf_leases(&d.r), 0);
	H_EQ(lstats(d.c.loop).leases_out <= 1, 1); /* none of the reader's (one may be the driver's) */
	H_EQ(tl_rbuf_buffered(&d.r), 0);
out:
	rd_close(&d, fds);
}

static void delim_max_in_lease(void)
{
	delim_max(0);
}

static void delim_max_across_leases(void)
{
	delim_max(5);
}

/* A prefix frame of exactly max bytes passes; a prefix announcing one
 * byte more is -EMSGSIZE as soon as the prefix is in, before its payload
 * is sent; a counted length below the prefix's own size is -EBADMSG. */
static void prefix_max_and_bad(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 3, 32) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_prefix(&d.r, 2, 0), 0);
	uint8_t f[32] = {0, 30};
	memset(f + 2, 'p', 30);
	cli_write(&d, f, 32);
	if (!rd_wait(&d, 32))
		goto out;
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_EQ(len, 30);
	H_TRUE(len == 30 && m[0] == 'p' && m[29] == 'p', "the largest frame differs");
	cli_write(&d, "\0\x1f", 2); /* 2 + 31 bytes: one over */
	if (!rd_wait(&d, 2))
		goto out;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), -EMSGSIZE);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	/* A new reader on the same stream: a counted length of 1 in a
	 * 2-byte prefix. */
	tl_rbuf_fini(&d.r);
	H_EQ(tl_rbuf_init(&d.r, d.c.loop, d.mem, d.max), 0);
	H_EQ(tl_rbuf_set_prefix(&d.r, 2, TL_RBUF_PREFIX_COUNTED), 0);
	cli_write(&d, "\0\x01", 2);
	if (!rd_wait(&d, 2))
		goto out;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), -EBADMSG);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	/* Arguments: the framings a reader refuses. */
	H_EQ(tl_rbuf_set_prefix(&d.r, 3, 0), -EINVAL);
	H_EQ(tl_rbuf_set_prefix(&d.r, 4, 0x2), -EINVAL);
	H_EQ(tl_rbuf_set_delim(&d.r, "abcde", 5), -EINVAL);
	H_EQ(tl_rbuf_set_delim(&d.r, "", 0), -EINVAL);
out:
	rd_close(&d, fds);
}

/* ---- Many frames, cut anywhere ---- */

static uint32_t rng(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

/* 300 frames of 0..60 payload bytes under each framing, written in chunks
 * of 1..97 bytes and read into leases of 7 bytes: every message comes out
 * in order, some inside one lease and some assembled. */
static void stream_random(void)
{
	static const struct framing fs[] = {
		{0, 0, "\r\n", 2}, {0, 0, "\r\n\r\n", 4}, {1, 0, NULL, 0},
		{2, TL_RBUF_PREFIX_COUNTED, NULL, 0}, {4, 0, NULL, 0},
	};
	enum { FRAMES = 300 };
	for (unsigned v = 0; v < sizeof fs / sizeof fs[0]; v++) {
		int fds = h_begin();
		struct rd d;
		if (rd_open(&d, 7, 80) != 0) {
			rd_close(&d, fds);
			return;
		}
		set_framing(&d.r, &fs[v]);
		static uint8_t wire[FRAMES * 70];
		static uint8_t msgs[FRAMES][64];
		static uint32_t lens[FRAMES];
		uint64_t seed = 42 + v;
		uint32_t total = 0;
		for (int i = 0; i < FRAMES; i++) {
			lens[i] = rng(&seed) % 61;
			for (uint32_t j = 0; j < lens[i]; j++)
				msgs[i][j] = (uint8_t)('a' + rng(&seed) % 26); /* no delimiter byte */
			total += make_frame(&fs[v], msgs[i], lens[i], wire + total);
		}
		uint32_t sent = 0;
		int got = 0, copied = 0, inplace = 0;
		while (got < FRAMES) {
			if (sent < total) {
				uint32_t n = 1 + rng(&seed) % 97;
				if (n > total - sent)
					n = total - sent;
				cli_write(&d, wire + sent, n);
				sent += n;
			}
			h_turn(&d.c, sent < total ? 0 : 10 * (int64_t)H_MS);
			pump(&d);
			const uint8_t *m;
			uint32_t len;
			int rc;
			while ((rc = tl_rbuf_next(&d.r, &m, &len)) == 1 && got < FRAMES) {
				H_TRUE(len == lens[got] && memcmp(m, msgs[got], len) == 0,
				       "variant %u: message %d differs (%u bytes, want %u)", v, got, len,
				       lens[got]);
				if (in_rbuf(&d, m, len) && len)
					copied++;
				else if (len)
					inplace += in_lease(&d, m, len) >= 0;
				got++;
			}
			H_TRUE(rc >= 0, "variant %u: next = %d%s", v, rc, h_errname(rc));
			if (rc < 0)
				break;
			if (sent == total && got < FRAMES && tl_rbuf_buffered(&d.r) < total) {
				struct want w = {&d, tl_rbuf_buffered(&d.r) + 1};
				if (!h_until(&d.c, pred_buffered, &w, H_WAIT_MS))
					break;
			}
		}
		H_EQ(got, FRAMES);
		H_TRUE(copied > 0 && inplace > 0, "variant %u: %d assembled, %d in place", v, copied,
		       inplace);
		rd_close(&d, fds);
	}
}

/* ---- Raw: a parser that frames its own messages ---- */

/* RESP bulk strings ("$<n>\r\n<n bytes>\r\n") parsed through peek and
 * consume: the parser asks for one byte more while it has no whole header,
 * then for the whole frame. Every string comes out; with 16 KiB leases and
 * one write, every view lies in the lease (no copy). */
static void raw_resp(uint32_t lease_size)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, lease_size, 128) != 0) {
		rd_close(&d, fds);
		return;
	}
	enum { N = 60 };
	static char wire[N * 80];
	uint32_t total = 0;
	for (int i = 0; i < N; i++) {
		total += (uint32_t)sprintf(wire + total, "$%d\r\n", i);
		memset(wire + total, 'A' + i % 26, (size_t)i);
		total += (uint32_t)i;
		total += (uint32_t)sprintf(wire + total, "\r\n");
	}
	cli_write(&d, wire, total);
	int got = 0, outside = 0;
	uint32_t need = 1;
	while (got < N) {
		const uint8_t *p;
		int n = tl_rbuf_peek(&d.r, need, &p);
		if (n == 0) {
			H_EQ(tl_rbuf_leases(&d.r), 0);
			if (!rd_wait(&d, need))
				break;
			continue;
		}
		H_TRUE(n >= (int)need, "peek(%u) = %d%s", need, n, h_errname(n));
		if (n < (int)need)
			break;
		const uint8_t *nl = memchr(p, '\n', (size_t)n);
		if (!nl) {
			need = (uint32_t)n + 1;
			continue;
		}
		uint32_t hdr = (uint32_t)(nl - p) + 1, blen = (uint32_t)atoi((const char *)p + 1);
		uint32_t flen = hdr + blen + 2;
		if ((uint32_t)n < flen) {
			need = flen;
			continue;
		}
		H_TRUE(p[0] == '$' && blen == (uint32_t)got, "string %d: header says %u", got, blen);
		H_TRUE(blen == 0 || (p[hdr] == 'A' + got % 26 && p[hdr + blen - 1] == 'A' + got % 26),
		       "string %d differs", got);
		if (in_lease(&d, p, flen) < 0)
			outside++;
		H_EQ(tl_rbuf_consume(&d.r, flen), 0);
		need = 1;
		got++;
	}
	H_EQ(got, N);
	if (!lease_size) {
		H_EQ(d.fed, 1);
		H_EQ(outside, 0);
	} else {
		H_TRUE(outside > 0, "no string was assembled across %u-byte leases", lease_size);
	}
	const uint8_t *p;
	H_EQ(tl_rbuf_peek(&d.r, 1, &p), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	H_EQ(tl_rbuf_consume(&d.r, 1), -EINVAL);
	H_EQ(tl_rbuf_peek(&d.r, 129, &p), -EMSGSIZE);
	rd_close(&d, fds);
}

static void raw_resp_one_lease(void)
{
	raw_resp(0);
}

static void raw_resp_small_leases(void)
{
	raw_resp(6);
}

/* ---- The peer's end ---- */

/* A whole frame, then half of one, then the peer closes: the whole one
 * comes out, then -EPROTO, sticky, with nothing held and no lease out. */
static void peer_closes_mid_frame(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 4, 64) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_delim(&d.r, "\r\n", 2), 0);
	cli_write(&d, "ok\r\nhalf a fra", 14);
	H_EQ(h_close(&d.c, d.cli, 2) >= 0, 1);
	d.cli = TL_HANDLE_NONE;
	H_TRUE(h_until(&d.c, pred_term, &d, H_WAIT_MS), "the read did not end");
	H_EQ(d.eof, 1);
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_TRUE(len == 2 && memcmp(m, "ok", 2) == 0, "the whole frame differs");
	H_EQ(tl_rbuf_buffered(&d.r), 10);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), -EPROTO);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), -EPROTO);
	H_EQ(tl_rbuf_buffered(&d.r), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	H_EQ(lstats(d.c.loop).leases_out, 0);
	rd_close(&d, fds);
}

/* The peer closes between frames: 0, not an error. */
static void peer_closes_between_frames(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 0, 64) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_prefix(&d.r, 1, 0), 0);
	cli_write(&d, "\x03" "abc", 4);
	h_close(&d.c, d.cli, 2);
	d.cli = TL_HANDLE_NONE;
	H_TRUE(h_until(&d.c, pred_term, &d, H_WAIT_MS), "the read did not end");
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 1);
	H_EQ(tl_rbuf_next(&d.r, &m, &len), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	rd_close(&d, fds);
}

/* A reader holds TL_RBUF_LEASES leases at most: on a stream whose lease
 * cap is above that, a host that reads no message meets -ENOBUFS, and the
 * lease stays its own. */
static void feed_refuses_past_queue(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 1, 64) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_handle_caps(d.c.loop, d.srv, 2 * TL_RBUF_LEASES, 0), 0);
	cli_write(&d, "0123456789abcdefghij", 20);
	uint32_t taken = 0, refused = 0;
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while (taken + refused < 20 && h_wall_ns() < dl) {
		h_turn(&d.c, 10 * (int64_t)H_MS);
		for (; d.seen < d.c.log.n; d.seen++) {
			const tl_completion *x = &d.c.log.v[d.seen];
			if (!tl_op_eq(x->op, d.op) || !(x->flags & TL_F_LEASE))
				continue;
			int rc = tl_rbuf_feed(&d.r, x);
			if (rc == 0) {
				taken += (uint32_t)x->result;
				continue;
			}
			H_EQ(rc, -ENOBUFS);
			refused += (uint32_t)x->result;
			H_EQ(tl_lease_release(d.c.loop, x->u.read.lease.id), 0); /* still ours */
		}
	}
	H_EQ(taken, TL_RBUF_LEASES);
	H_EQ(refused, 20 - TL_RBUF_LEASES);
	H_EQ(tl_rbuf_leases(&d.r), TL_RBUF_LEASES);
	const uint8_t *p;
	H_EQ(tl_rbuf_peek(&d.r, TL_RBUF_LEASES, &p), TL_RBUF_LEASES); /* assembled, all given back */
	H_TRUE(memcmp(p, "0123456789abcdef", TL_RBUF_LEASES) == 0, "the bytes taken differ");
	H_EQ(tl_rbuf_leases(&d.r), 0);
	rd_close(&d, fds);
}

/* ---- Writer ---- */

struct wr {
	h_ctx c;
	tl_handle srv, cli;
	tl_wbuf w;
	tl_wbuf_list dirty;
	uint8_t mem[4096];
	uint32_t seen;
	int writes;          /* TL_K_WRITE completions of w */
	int64_t last;        /* the last one's result */
	int room;            /* the last tl_wbuf_on_write's return */
};

static int wr_open(struct wr *t, uint32_t cap)
{
	memset(t, 0, sizeof *t);
	h_ctx_init(&t->c, h_loop());
	if (h_pair(&t->c, &t->c, AF_INET, &t->srv, &t->cli) != 0)
		return -1;
	H_EQ(tl_wbuf_init(&t->w, t->c.loop, t->srv, t->mem, cap, TOK_W), 0);
	H_EQ(tl_wbuf_set_list(&t->w, &t->dirty), 0);
	return 0;
}

/* Hand w its write completions logged since the last call. */
static void wpump(struct wr *t)
{
	for (; t->seen < t->c.log.n; t->seen++) {
		const tl_completion *x = &t->c.log.v[t->seen];
		if (x->kind != TL_K_WRITE || x->token != TOK_W)
			continue;
		t->writes++;
		t->last = x->result;
		t->room = tl_wbuf_on_write(&t->w, x);
	}
}

struct wwant {
	struct wr *t;
	int writes;
};

static int pred_writes(void *p)
{
	struct wwant *a = p;
	wpump(a->t);
	return a->t->writes >= a->writes;
}

static int wr_wait(struct wr *t, int writes)
{
	struct wwant a = {t, writes};
	int ok = h_until(&t->c, pred_writes, &a, H_WAIT_MS);
	H_TRUE(ok, "%d write completions, waited for %d", t->writes, writes);
	return ok;
}

/* The client reads exactly len bytes and compares them with want. */
static void cli_expect(struct wr *t, const char *want, uint32_t len)
{
	char got[512];
	CU_ASSERT_FATAL(len <= sizeof got);
	H_EQ(h_read_exact(&t->c, t->cli, got, len, NULL), (int64_t)len);
	H_TRUE(memcmp(got, want, len) == 0, "the peer read \"%.*s\", want \"%.*s\"", (int)len, got,
	       (int)len, want);
}

static void wr_close(struct wr *t, int fds)
{
	wpump(t);
	H_EQ(tl_wbuf_fini(&t->w), 0);
	H_TRUE(t->dirty.first == NULL, "the dirty list still holds a writer");
	if (t->srv.v)
		h_close(&t->c, t->srv, 1);
	if (t->cli.v)
		h_close(&t->c, t->cli, 2);
	H_EQ(lstats(t->c.loop).leases_out, 0);
	tl_loop *l = t->c.loop;
	h_ctx_fini(&t->c);
	h_end(l, fds);
}

/* Sixteen appends of one pass (bytes, printf, reserve and commit) leave in
 * one write, issued by one flush_all; a second flush_all has nothing to do. */
static void coalesce_one_write(void)
{
	int fds = h_begin();
	struct wr t;
	if (wr_open(&t, 1024) != 0) {
		wr_close(&t, fds);
		return;
	}
	char want[512];
	uint32_t n = 0;
	for (int i = 0; i < 16; i++) {
		if (i % 3 == 0) {
			H_EQ(tl_wbuf_append(&t.w, "+OK\r\n", 5), 0);
			n += (uint32_t)sprintf(want + n, "+OK\r\n");
		} else if (i % 3 == 1) {
			H_EQ(tl_wbuf_printf(&t.w, ":%d\r\n", i * 1000), i >= 10 ? 8 : 7);
			n += (uint32_t)sprintf(want + n, ":%d\r\n", i * 1000);
		} else {
			uint8_t *p;
			H_TRUE(tl_wbuf_reserve(&t.w, 4, &p) >= 4, "reserve refused");
			memcpy(p, "$0\r\n", 4);
			H_EQ(tl_wbuf_commit(&t.w, 4), 0);
			n += (uint32_t)sprintf(want + n, "$0\r\n");
		}
	}
	H_EQ(tl_wbuf_pending(&t.w), n);
	H_TRUE(t.dirty.first == &t.w, "the writer is not on its dirty list");
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 0);
	if (wr_wait(&t, 1)) {
		H_EQ(t.last, (int64_t)n);
		H_EQ(t.room, 1024);
	}
	cli_expect(&t, want, n);
	h_idle(&t.c, 5);
	wpump(&t);
	H_EQ(t.writes, 1);
	H_EQ(tl_wbuf_pending(&t.w), 0);
	wr_close(&t, fds);
}

/* Appends while a write is out wait for it, then leave together in the
 * next flush: three appends, two writes. fini refuses while one is out. */
static void inflight_accumulates(void)
{
	int fds = h_begin();
	struct wr t;
	if (wr_open(&t, 256) != 0) {
		wr_close(&t, fds);
		return;
	}
	H_EQ(tl_wbuf_append(&t.w, "first;", 6), 0);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	H_EQ(tl_wbuf_append(&t.w, "second;", 7), 0);
	H_EQ(tl_wbuf_append(&t.w, "third;", 6), 0);
	H_TRUE(t.dirty.first == NULL, "a writer with a write out went on the dirty list");
	H_EQ(tl_wbuf_flush_all(&t.dirty), 0);
	H_EQ(tl_wbuf_flush(&t.w), 0);
	H_EQ(tl_wbuf_fini(&t.w), -EBUSY);
	if (wr_wait(&t, 1)) {
		H_EQ(t.last, 6);
		H_EQ(t.room, 256 - 13);
		H_TRUE(t.dirty.first == &t.w, "the write's completion left the rest off the list");
	}
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	if (wr_wait(&t, 2))
		H_EQ(t.last, 13);
	cli_expect(&t, "first;second;third;", 19);
	H_EQ(t.writes, 2);
	wr_close(&t, fds);
}

/* A full writer refuses an append whole (-ENOBUFS), and the write's
 * completion gives the room back. */
static void backpressure(void)
{
	int fds = h_begin();
	struct wr t;
	if (wr_open(&t, 64) != 0) {
		wr_close(&t, fds);
		return;
	}
	char a[40], b[30];
	memset(a, 'a', sizeof a);
	memset(b, 'b', sizeof b);
	H_EQ(tl_wbuf_append(&t.w, a, 40), 0);
	H_EQ(tl_wbuf_append(&t.w, b, 30), -ENOBUFS);
	H_EQ(tl_wbuf_pending(&t.w), 40);
	H_EQ(tl_wbuf_room(&t.w), 24);
	H_EQ(tl_wbuf_printf(&t.w, "%030d", 0), -ENOBUFS);
	uint8_t *p;
	H_EQ(tl_wbuf_reserve(&t.w, 25, &p), -ENOBUFS);
	H_EQ(tl_wbuf_flush(&t.w), 1);
	H_EQ(tl_wbuf_append(&t.w, b, 30), -ENOBUFS); /* still out */
	if (wr_wait(&t, 1))
		H_EQ(t.room, 64);
	H_EQ(tl_wbuf_append(&t.w, b, 30), 0);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	if (wr_wait(&t, 2))
		H_EQ(t.room, 64);
	char want[70];
	memcpy(want, a, 40);
	memcpy(want + 40, b, 30);
	cli_expect(&t, want, 70);
	wr_close(&t, fds);
}

/* The ring wraps: bytes at its end and at its start leave in one write
 * (two segments, one completion), in order. */
static void ring_wraps_one_write(void)
{
	int fds = h_begin();
	struct wr t;
	if (wr_open(&t, 16) != 0) {
		wr_close(&t, fds);
		return;
	}
	H_EQ(tl_wbuf_append(&t.w, "0123456789", 10), 0);
	H_EQ(tl_wbuf_flush(&t.w), 1);
	H_EQ(tl_wbuf_append(&t.w, "abcdef", 6), 0); /* the ring's end */
	H_EQ(tl_wbuf_room(&t.w), 0);
	if (wr_wait(&t, 1))
		H_EQ(t.room, 10);
	H_EQ(tl_wbuf_append(&t.w, "ABCDEFGH", 8), 0); /* its start: 2 left */
	H_EQ(tl_wbuf_printf(&t.w, "%s", "xy"), -ENOBUFS); /* "xy" and its 0 */
	H_EQ(tl_wbuf_printf(&t.w, "%s", "x"), 1);
	H_EQ(tl_wbuf_append(&t.w, "y", 1), 0);
	H_EQ(tl_wbuf_pending(&t.w), 16);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	if (wr_wait(&t, 2)) {
		H_EQ(t.last, 16);
		H_EQ(t.room, 16);
	}
	cli_expect(&t, "0123456789abcdefABCDEFGHxy", 26);
	/* An append split over the end and the start, then printf and a
	 * reservation that need one run each. */
	H_EQ(tl_wbuf_append(&t.w, "0123456789", 10), 0);
	H_EQ(tl_wbuf_flush(&t.w), 1);
	H_EQ(tl_wbuf_append(&t.w, "abcd", 4), 0); /* 10..14 */
	if (wr_wait(&t, 3))
		H_EQ(t.room, 12);
	H_EQ(tl_wbuf_append(&t.w, "ghijklmn", 8), 0); /* 14..16, then 0..6 */
	H_EQ(tl_wbuf_printf(&t.w, "%d", 1234), -ENOBUFS); /* 4 free in one run */
	H_EQ(tl_wbuf_printf(&t.w, "%d", 123), 3);
	uint8_t *p;
	H_EQ(tl_wbuf_reserve(&t.w, 2, &p), -ENOBUFS);
	H_EQ(tl_wbuf_reserve(&t.w, 1, &p), 1);
	*p = '!';
	H_EQ(tl_wbuf_commit(&t.w, 1), 0);
	H_EQ(tl_wbuf_commit(&t.w, 1), -EINVAL); /* no reservation */
	H_EQ(tl_wbuf_room(&t.w), 0);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 1);
	if (wr_wait(&t, 4))
		H_EQ(t.last, 16);
	cli_expect(&t, "0123456789abcdghijklmn123!", 26);
	wr_close(&t, fds);
}

/* A write that fails is reported once, by the completion's handler; every
 * later call is -EPIPE. A flush refused inside flush_all (the stream is
 * closing) is reported once, by the writer's next call. */
static void write_error_once(void)
{
	int fds = h_begin();
	struct wr t;
	if (wr_open(&t, 64) != 0) {
		wr_close(&t, fds);
		return;
	}
	/* The peer resets the stream; writes then fail. */
	H_EQ(tl_close_abort(t.c.loop, t.cli, 2) == 0 && h_wait_closed(&t.c, t.cli) >= 0, 1);
	t.cli = TL_HANDLE_NONE;
	int rc = 0;
	for (int i = 0; i < 50 && rc >= 0; i++) {
		H_EQ(tl_wbuf_append(&t.w, "ping", 4), 0);
		H_EQ(tl_wbuf_flush(&t.w), 1);
		if (!wr_wait(&t, i + 1))
			break;
		rc = t.room;
		if (rc >= 0)
			h_idle(&t.c, 2);
	}
	H_TRUE(rc < 0 && rc != -EPIPE && rc == t.last, "the failed write reported %d%s (result %lld)",
	       rc, h_errname(rc), (long long)t.last);
	H_EQ(tl_wbuf_append(&t.w, "x", 1), -EPIPE);
	H_EQ(tl_wbuf_flush(&t.w), -EPIPE);
	H_EQ(tl_wbuf_printf(&t.w, "x"), -EPIPE);
	H_EQ(tl_wbuf_room(&t.w), 0);
	H_EQ(tl_wbuf_pending(&t.w), 0);
	H_EQ(tl_wbuf_fini(&t.w), 0);

	/* A refusal inside flush_all. */
	H_EQ(tl_wbuf_init(&t.w, t.c.loop, t.srv, t.mem, 64, TOK_W), 0);
	H_EQ(tl_wbuf_set_list(&t.w, &t.dirty), 0);
	H_EQ(tl_wbuf_append(&t.w, "late", 4), 0);
	H_EQ(tl_close(t.c.loop, t.srv, 1), 0);
	H_EQ(tl_wbuf_flush_all(&t.dirty), 0);
	H_TRUE(t.dirty.first == NULL, "a broken writer stayed on the list");
	H_EQ(tl_wbuf_append(&t.w, "x", 1), -EINVAL);
	H_EQ(tl_wbuf_append(&t.w, "x", 1), -EPIPE);
	H_TRUE(h_wait_closed(&t.c, t.srv) >= 0, "no Closed");
	t.srv = TL_HANDLE_NONE;
	wr_close(&t, fds);
}

/* ---- Both together: an echo of framed requests ---- */

/* A server answers each line with its length, replies coalesced per pass:
 * 200 requests pipelined in chunks over 9-byte leases, replies checked in
 * order; fewer writes than requests. */
static void echo_lines(void)
{
	int fds = h_begin();
	struct rd d;
	if (rd_open(&d, 9, 64) != 0) {
		rd_close(&d, fds);
		return;
	}
	H_EQ(tl_rbuf_set_delim(&d.r, "\n", 1), 0);
	tl_wbuf w;
	tl_wbuf_list dirty = {NULL};
	static uint8_t wmem[8192];
	H_EQ(tl_wbuf_init(&w, d.c.loop, d.srv, wmem, sizeof wmem, TOK_W), 0);
	H_EQ(tl_wbuf_set_list(&w, &dirty), 0);
	enum { N = 200 };
	static char req[N * 40], want[N * 8];
	uint32_t rn = 0, wn = 0;
	for (int i = 0; i < N; i++) {
		int len = i % 30;
		memset(req + rn, 'q', (size_t)len);
		rn += (uint32_t)len;
		req[rn++] = '\n';
		wn += (uint32_t)sprintf(want + wn, "%d\n", len);
	}
	uint32_t sent = 0, wseen = 0;
	int answered = 0, writes = 0;
	uint64_t dl = h_wall_ns() + H_WAIT_MS * H_MS;
	while ((answered < N || tl_wbuf_pending(&w)) && h_wall_ns() < dl) {
		if (sent < rn) {
			uint32_t n = rn - sent < 300 ? rn - sent : 300;
			tl_op op;
			H_EQ(tl_write(d.c.loop, d.cli, req + sent, n, 7, &op), 0);
			sent += n;
		}
		h_turn(&d.c, 5 * (int64_t)H_MS);
		for (; wseen < d.c.log.n; wseen++) {
			const tl_completion *x = &d.c.log.v[wseen];
			if (x->kind == TL_K_WRITE && x->token == TOK_W) {
				writes++;
				H_TRUE(tl_wbuf_on_write(&w, x) > 0, "a reply write failed");
			}
		}
		pump(&d);
		const uint8_t *m;
		uint32_t len;
		while (tl_rbuf_next(&d.r, &m, &len) == 1) {
			H_TRUE(tl_wbuf_printf(&w, "%u\n", len) > 0, "the reply did not fit");
			answered++;
		}
		tl_wbuf_flush_all(&dirty);
	}
	H_EQ(answered, N);
	H_TRUE(writes > 0 && writes < N, "%d writes for %d replies", writes, N);
	static char got[N * 8];
	H_EQ(h_read_exact(&d.c, d.cli, got, wn, NULL), (int64_t)wn);
	H_TRUE(memcmp(got, want, wn) == 0, "the replies differ");
	for (; wseen < d.c.log.n; wseen++) /* none left: all were handed on */
		H_TRUE(!(d.c.log.v[wseen].kind == TL_K_WRITE && d.c.log.v[wseen].token == TOK_W),
		       "a reply write was not handed on");
	H_EQ(tl_wbuf_fini(&w), 0);
	rd_close(&d, fds);
}

/* ---- A file written whole (tl_fout) ---- */

enum { TOK_F = 0x300 };

/* A test's frame: its loop, a folder of its own with "old" at path
 * (d/f), and tmp, the name of path's temporary file. */
struct fx {
	int fds;
	h_ctx c;
	char d[64], path[128], tmp[160];
};

static void fx_begin(struct fx *x)
{
	x->fds = h_begin();
	h_ctx_init(&x->c, h_loop());
	snprintf(x->d, sizeof x->d, "/tmp/tlfoutXXXXXX");
	H_TRUE_FATAL(mkdtemp(x->d) != NULL);
	snprintf(x->path, sizeof x->path, "%s/f", x->d);
	snprintf(x->tmp, sizeof x->tmp, "%s.tmp", x->path);
	FILE *o = fopen(x->path, "w");
	H_TRUE_FATAL(o != NULL);
	fputs("old", o);
	fclose(o);
}

/* path's bytes into buf (at most cap): how many, or -1 when it is absent. */
static long f_read(const char *path, char *buf, size_t cap)
{
	FILE *i = fopen(path, "rb");
	if (!i)
		return -1;
	size_t n = fread(buf, 1, cap, i);
	fclose(i);
	return (long)n;
}

/* The folder gone (path may be a file or, in rename_fails, a folder),
 * then the loop and the leak checks. */
static void fx_end(struct fx *x)
{
	unlink(x->tmp);
	unlink(x->path);
	rmdir(x->path);
	H_EQ(rmdir(x->d), 0);
	h_ctx_fini(&x->c);
	h_end(x->c.loop, x->fds);
}

/* Run finish and wait for its completion: its result. */
static int64_t f_finish(h_ctx *c, tl_fout *f)
{
	tl_op op;
	H_EQ_FATAL(tl_fout_finish(f, c->loop, TOK_F, &op), 0);
	int i = h_wait_op(c, op);
	H_TRUE_FATAL(i >= 0);
	H_EQ(c->log.v[i].kind, TL_K_POOL);
	H_EQ(c->log.v[i].token, TOK_F);
	return c->log.v[i].result;
}

/* Many pieces through a 1000-byte buffer (so written in several writes):
 * the old file stays whole until the finish, then the new one is whole,
 * and the temporary file is gone. */
static void fout_whole(void)
{
	struct fx x;
	fx_begin(&x);
	char got[64000];
	uint8_t mem[1000], *p;
	tl_fout f;
	H_EQ_FATAL(tl_fout_open(&f, x.path, mem, sizeof mem), 0);
	uint32_t total = 0;
	for (uint32_t i = 0; i < 400; i++) {
		uint32_t n = 1 + i % 300;
		int rc = tl_fout_reserve(&f, n, &p);
		H_TRUE_FATAL(rc >= (int)n);
		for (uint32_t k = 0; k < n; k++)
			p[k] = (uint8_t)(total + k);
		H_EQ(tl_fout_commit(&f, n), 0);
		total += n;
	}
	H_EQ(tl_fout_commit(&f, 1), -EINVAL); /* no reservation */
	H_EQ(f_read(x.path, got, sizeof got), 3); /* still the old file */
	H_TRUE(f_read(x.tmp, got, sizeof got) > 0);
	H_EQ(f_finish(&x.c, &f), 0);
	H_EQ(f_read(x.tmp, got, sizeof got), -1);
	H_EQ(f_read(x.path, got, sizeof got), (long)total);
	int same = 1;
	for (uint32_t k = 0; k < total; k++)
		same &= (uint8_t)got[k] == (uint8_t)k;
	H_TRUE(same);
	H_EQ(f.bytes, total);
	tl_fout_abort(&f); /* finished: nothing to do */
	fx_end(&x);
}

/* A write that fails (the file size limit: -EFBIG) sticks: later calls
 * return it, the finish ends with it, the temporary file is removed and
 * the old file is untouched. */
static void fout_write_fails(void)
{
	struct fx x;
	fx_begin(&x);
	char got[16];
	uint8_t mem[4096], *p;
	tl_fout f;
	struct rlimit old, small = {2048, 2048};
	H_EQ_FATAL(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	H_EQ_FATAL(tl_fout_open(&f, x.path, mem, sizeof mem), 0);
	H_EQ_FATAL(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = 0;
	for (int i = 0; i < 4 && rc >= 0; i++)
		if ((rc = tl_fout_reserve(&f, 3000, &p)) >= 0)
			memset(p, 'x', 3000), tl_fout_commit(&f, 3000);
	H_EQ(rc, -EFBIG);
	H_EQ(tl_fout_reserve(&f, 1, &p), -EFBIG); /* sticky */
	H_EQ(f_finish(&x.c, &f), -EFBIG);
	setrlimit(RLIMIT_FSIZE, &old);
	H_EQ(f_read(x.tmp, got, sizeof got), -1);
	H_EQ(f_read(x.path, got, sizeof got), 3);
	H_TRUE(memcmp(got, "old", 3) == 0);
	fx_end(&x);
}

/* A rename that fails (path is a folder: -EISDIR): the finish ends with
 * it and the temporary file is removed. */
static void fout_rename_fails(void)
{
	struct fx x;
	fx_begin(&x);
	char got[16], sub[160];
	uint8_t mem[64], *p;
	tl_fout f;
	unlink(x.path);
	H_EQ_FATAL(mkdir(x.path, 0755), 0);
	snprintf(sub, sizeof sub, "%s/x", x.path);
	H_EQ_FATAL(mkdir(sub, 0755), 0); /* not empty: no rename over it */
	H_EQ_FATAL(tl_fout_open(&f, x.path, mem, sizeof mem), 0);
	H_TRUE(tl_fout_reserve(&f, 5, &p) >= 5);
	memcpy(p, "hello", 5);
	H_EQ(tl_fout_commit(&f, 5), 0);
	int64_t r = f_finish(&x.c, &f);
	H_TRUE(r == -EISDIR || r == -ENOTEMPTY || r == -EEXIST);
	H_EQ(f_read(x.tmp, got, sizeof got), -1);
	H_EQ(rmdir(sub), 0);
	fx_end(&x);
}

/* Dropped: the temporary file removed, the old file untouched; bad
 * arguments refused; an open that fails leaves nothing to drop. */
static void fout_abort_and_arguments(void)
{
	struct fx x;
	fx_begin(&x);
	char got[16], missing[160], lng[4200];
	uint8_t mem[64], *p;
	tl_fout f, z;
	tl_op op;
	memset(&z, 0, sizeof z);
	snprintf(missing, sizeof missing, "%s/no/f", x.d);
	memset(lng, 'a', sizeof lng - 1);
	lng[sizeof lng - 1] = 0;
	H_EQ(tl_fout_open(NULL, x.path, mem, sizeof mem), -EINVAL);
	H_EQ(tl_fout_open(&f, NULL, mem, sizeof mem), -EINVAL);
	H_EQ(tl_fout_open(&f, x.path, NULL, sizeof mem), -EINVAL);
	H_EQ(tl_fout_open(&f, x.path, mem, 0), -EINVAL);
	H_EQ(tl_fout_open(&f, "", mem, sizeof mem), -EINVAL);
	H_EQ(tl_fout_open(&f, lng, mem, sizeof mem), -EINVAL);
	H_EQ(tl_fout_open(&f, missing, mem, sizeof mem), -ENOENT);
	H_EQ(tl_fout_reserve(&f, 1, &p), -EINVAL); /* no file */
	H_EQ(tl_fout_finish(&f, x.c.loop, TOK_F, &op), -EINVAL);
	tl_fout_abort(&f);
	tl_fout_abort(&z); /* zeroed: holds none (its fd 0 is not closed) */
	tl_fout_abort(NULL);
	H_EQ(tl_fout_reserve(&z, 1, &p), -EINVAL);
	H_EQ_FATAL(tl_fout_open(&f, x.path, mem, sizeof mem), 0);
	H_EQ(tl_fout_reserve(&f, sizeof mem + 1, &p), -EINVAL);
	H_EQ(tl_fout_reserve(&f, 1, NULL), -EINVAL);
	H_EQ(tl_fout_finish(&f, NULL, TOK_F, &op), -EINVAL);
	H_EQ(tl_fout_finish(&f, x.c.loop, TOK_F, NULL), -EINVAL);
	H_TRUE(tl_fout_reserve(&f, 3, &p) >= 3);
	memcpy(p, "new", 3);
	H_EQ(tl_fout_commit(&f, sizeof mem + 1), -EINVAL); /* above the run */
	H_EQ(tl_fout_commit(&f, 3), 0);
	H_TRUE(f_read(x.tmp, got, sizeof got) >= 0);
	tl_fout_abort(&f);
	H_EQ(f_read(x.tmp, got, sizeof got), -1);
	H_EQ(f_read(x.path, got, sizeof got), 3);
	H_TRUE(memcmp(got, "old", 3) == 0);
	H_EQ(tl_fout_finish(&f, x.c.loop, TOK_F, &op), -EINVAL); /* dropped */
	fx_end(&x);
}

/* ---- The Redis protocol's requests (turnloop/resp.h) ---- */

enum { RESP_ARGS = 8 };

struct rx {
	struct rd *d;
	tl_resp *s;
	tl_resp_arg av[RESP_ARGS];
	uint32_t ac;
	int rc;
};

static int pred_resp(void *p)
{
	struct rx *x = p;
	pump(x->d);
	x->rc = tl_resp_next(x->s, x->av, &x->ac);
	return x->rc != 0 || x->d->term;
}

/* The next command as a host waits for it: tl_resp_next's return. */
static int resp_wait(struct rx *x)
{
	if (!h_until(&x->d->c, pred_resp, x, H_WAIT_MS))
		H_TRUE(0, "no command came: the reader holds %u bytes", tl_rbuf_buffered(&x->d->r));
	return x->rc;
}

/* rd_open, then s a request reader of it (RESP_ARGS arguments of max_len
 * bytes at most): 0, or -1 with everything closed (the case ends). */
static int resp_open(struct rd *d, tl_resp *s, uint32_t lease_size, uint32_t max, uint32_t max_len, int fds)
{
	if (rd_open(d, lease_size, max) != 0) {
		rd_close(d, fds);
		return -1;
	}
	H_EQ(tl_resp_init(s, &d->r, RESP_ARGS, max_len), 0);
	return 0;
}

/* Command i of the stream resp_stream writes: i % 4 + 1 arguments, the
 * first "c<i>", the others i * 7 % 90 bytes of one letter (0 bytes too). */
static uint32_t resp_cmd(uint32_t i, char *out)
{
	uint32_t n = (uint32_t)sprintf(out, "*%u\r\n", i % 4 + 1), len = i * 7 % 90;
	char name[16];
	int nl = sprintf(name, "c%u", i);
	n += (uint32_t)sprintf(out + n, "$%d\r\n%s\r\n", nl, name);
	for (uint32_t a = 1; a <= i % 4; a++) {
		n += (uint32_t)sprintf(out + n, "$%u\r\n", len);
		memset(out + n, 'a' + (int)(i % 26), len);
		n += len;
		n += (uint32_t)sprintf(out + n, "\r\n");
	}
	if (i % 5 == 0) /* an empty line between commands: skipped */
		n += (uint32_t)sprintf(out + n, "\r\n");
	return n;
}

/* 200 commands in one write, read as a host does (a command asked for
 * twice before it is done gives the same command; the done ones consumed
 * every few): every argument is the one sent; with the default leases a
 * command lies in its lease (no copy) unless it spans two, with 6-byte
 * leases commands are assembled; at the end no lease is held. */
static void resp_commands(uint32_t lease_size)
{
	int fds = h_begin();
	struct rd d;
	tl_resp s;
	if (resp_open(&d, &s, lease_size, 512, 100, fds) != 0)
		return;
	enum { N = 200 };
	static char wire[N * 400];
	uint32_t total = 0, outside = 0, got = 0; /* outside: commands not all in one lease */
	for (uint32_t i = 0; i < N; i++)
		total += resp_cmd(i, wire + total);
	cli_write(&d, wire, total);
	struct rx x = {&d, &s, {{0}}, 0, 0};
	for (; got < N && resp_wait(&x) == 1; got++) {
		char want[16];
		int nl = sprintf(want, "c%u", got);
		uint32_t len = got * 7 % 90, bad = 0;
		H_EQ(x.ac, got % 4 + 1);
		if (x.ac != got % 4 + 1)
			break;
		bad |= x.av[0].n != (uint32_t)nl || memcmp(x.av[0].p, want, (size_t)nl) != 0;
		for (uint32_t a = 1; a < x.ac; a++)
			bad |= x.av[a].n != len || (len && (x.av[a].p[0] != 'a' + got % 26 || x.av[a].p[len - 1] != 'a' + got % 26));
		H_TRUE(!bad, "command %u differs", got);
		uint32_t out = 0;
		for (uint32_t a = 0; a < x.ac; a++)
			out |= in_lease(&d, x.av[a].p, x.av[a].n) < 0;
		outside += out;
		if (got % 3 == 0) { /* not done: the same command again */
			const uint8_t *p0 = x.av[0].p;
			H_EQ(tl_resp_next(&s, x.av, &x.ac), 1);
			H_TRUE(x.av[0].p == p0 && x.ac == got % 4 + 1, "the command not done did not come again");
		}
		tl_resp_done(&s);
		if (got % 7 == 0)
			tl_resp_consume(&s);
	}
	H_EQ(got, N);
	if (!lease_size) /* assembled: only a command across two leases, one a lease's end at most */
		H_TRUE(outside < d.fed, "%u commands assembled from %u leases", outside, d.fed);
	else
		H_TRUE(outside > 0, "no command was assembled across %u-byte leases", lease_size);
	uint32_t ac;
	H_EQ(tl_resp_next(&s, x.av, &ac), 0);
	tl_resp_consume(&s);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	H_EQ(tl_rbuf_buffered(&d.r), 0);
	rd_close(&d, fds);
}

static void resp_one_lease(void)
{
	resp_commands(0);
}

static void resp_small_leases(void)
{
	resp_commands(6);
}

/* A command not done stays in the reader across tl_resp_consume, and comes
 * again; done and consumed, its bytes are gone. */
static void resp_undone_stays(void)
{
	int fds = h_begin();
	struct rd d;
	tl_resp s;
	if (resp_open(&d, &s, 0, 64, 32, fds) != 0)
		return;
	cli_write(&d, "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", 34);
	struct rx x = {&d, &s, {{0}}, 0, 0};
	H_EQ(resp_wait(&x), 1);
	H_TRUE(x.ac == 1 && x.av[0].n == 4 && memcmp(x.av[0].p, "PING", 4) == 0, "PING differs");
	tl_resp_consume(&s);
	H_EQ(tl_rbuf_buffered(&d.r), 34); /* not done: nothing consumed */
	H_EQ(tl_resp_next(&s, x.av, &x.ac), 1);
	H_TRUE(x.ac == 1 && x.av[0].n == 4, "PING did not come again");
	tl_resp_done(&s);
	tl_resp_done(&s); /* once only: no command given since */
	H_EQ(tl_resp_next(&s, x.av, &x.ac), 1);
	H_TRUE(x.ac == 2 && x.av[1].n == 1 && x.av[1].p[0] == 'k', "GET k differs");
	tl_resp_consume(&s);
	H_EQ(tl_rbuf_buffered(&d.r), 20); /* PING's 14 bytes gone */
	tl_resp_done(&s); /* GET k was given before the consume: its view ended, and so did it */
	H_EQ(tl_resp_next(&s, x.av, &x.ac), 1);
	tl_resp_done(&s);
	H_EQ(tl_resp_next(&s, x.av, &x.ac), 0);
	tl_resp_consume(&s);
	H_EQ(tl_rbuf_buffered(&d.r), 0);
	H_EQ(tl_rbuf_leases(&d.r), 0);
	rd_close(&d, fds);
}

/* A long command assembled from small leases asks the reader for many
 * bytes; once it is done, a short one after it comes whole, though it is
 * shorter than what the long one asked for. */
static void resp_short_after_long(void)
{
	int fds = h_begin();
	struct rd d;
	tl_resp s;
	if (resp_open(&d, &s, 8, 128, 100, fds) != 0)
		return;
	cli_write(&d, "*1\r\n$60\r\n000000000000000000000000000000000000000000000000000000000000\r\n", 71);
	struct rx x = {&d, &s, {{0}}, 0, 0};
	H_EQ(resp_wait(&x), 1);
	H_TRUE(x.ac == 1 && x.av[0].n == 60, "the long command differs");
	tl_resp_done(&s);
	H_EQ(tl_resp_next(&s, x.av, &x.ac), 0);
	tl_resp_consume(&s);
	cli_write(&d, "*1\r\n$1\r\nx\r\n", 11);
	H_EQ(resp_wait(&x), 1);
	H_TRUE(x.ac == 1 && x.av[0].n == 1 && x.av[0].p[0] == 'x', "the short command differs");
	tl_resp_done(&s);
	tl_resp_consume(&s);
	rd_close(&d, fds);
}

/* Each bad request: its code, sticky, and the line a client gets; a command
 * longer than the reader's max, cut by small leases, is -EMSGSIZE. */
static void resp_errors(void)
{
	static const struct {
		const char *in;
		int code;
		const char *line;
	} cases[] = {
		{"PING\r\n", -EBADMSG, "-ERR Protocol error: expected '*' (no inline commands)\r\n"},
		{"*0\r\n", -ERANGE, "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*9\r\n", -ERANGE, "-ERR Protocol error: invalid multibulk length\r\n"}, /* above max_args */
		{"*x\r\n", -ERANGE, "-ERR Protocol error: invalid multibulk length\r\n"},
		{"*1\r\n$33\r\n", -EILSEQ, "-ERR Protocol error: invalid bulk length\r\n"}, /* above max_len */
		{"*1\r\n$3\r\nPINGX\r\n", -EILSEQ, "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n+3\r\n", -EILSEQ, "-ERR Protocol error: invalid bulk length\r\n"},
		{"*1\r\n$4\r\nPING\rX", -EILSEQ, "-ERR Protocol error: invalid bulk length\r\n"}, /* "\r" then not "\n" */
		{"*8\r\n$30\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n$30\r\nxxxxx", -EMSGSIZE, /* 114 bytes at least: the reader takes 64 */
		 "-ERR Protocol error: command too long\r\n"},
	};
	for (size_t i = 0; i < 2 * sizeof cases / sizeof *cases; i++) {
		int fds = h_begin();
		struct rd d;
		tl_resp s;
		if (resp_open(&d, &s, i & 1 ? 8 : 0, 64, 32, fds) != 0) /* in one lease, and cut into 8-byte ones */
			return;
		cli_write(&d, cases[i / 2].in, (uint32_t)strlen(cases[i / 2].in));
		struct rx x = {&d, &s, {{0}}, 0, 0};
		int rc = resp_wait(&x);
		H_TRUE(rc == cases[i / 2].code, "case %zu: %d%s, wanted %d%s", i, rc, h_errname(rc), cases[i / 2].code,
		       h_errname(cases[i / 2].code));
		H_EQ(tl_resp_next(&s, x.av, &x.ac), cases[i / 2].code);
		H_TRUE(tl_resp_error_reply(rc) && strcmp(tl_resp_error_reply(rc), cases[i / 2].line) == 0, "case %zu: line", i);
		tl_resp_consume(&s);
		rd_close(&d, fds);
	}
	H_TRUE(tl_resp_error_reply(-EPROTO) == NULL && tl_resp_error_reply(0) == NULL &&
	       tl_resp_error_reply(-EINVAL) == NULL);
}

/* The peer closes inside a command: the whole one first, then -EPROTO
 * (no one to tell: no line); on a command's boundary: 0. */
static void resp_peer_closes(void)
{
	for (int mid = 0; mid < 2; mid++) {
		int fds = h_begin();
		struct rd d;
		tl_resp s;
		if (resp_open(&d, &s, 0, 64, 32, fds) != 0)
			return;
		cli_write(&d, "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1", mid ? 29 : 14);
		h_close(&d.c, d.cli, 2);
		d.cli = TL_HANDLE_NONE;
		H_TRUE(h_until(&d.c, pred_term, &d, H_WAIT_MS), "the read did not end");
		struct rx x = {&d, &s, {{0}}, 0, 0};
		H_EQ(tl_resp_next(&s, x.av, &x.ac), 1);
		tl_resp_done(&s);
		H_EQ(tl_resp_next(&s, x.av, &x.ac), mid ? -EPROTO : 0);
		H_EQ(tl_resp_next(&s, x.av, &x.ac), mid ? -EPROTO : 0);
		tl_resp_consume(&s);
		H_EQ(tl_rbuf_leases(&d.r), 0);
		rd_close(&d, fds);
	}
}

/* Number lines, and whole decimal numbers. */
static void resp_numbers(void)
{
	uint8_t b[32];
	int64_t v = 7;
	H_TRUE(tl_resp_num(b, ':', 0) == 4 && memcmp(b, ":0\r\n", 4) == 0);
	H_TRUE(tl_resp_num(b, '$', 512) == 6 && memcmp(b, "$512\r\n", 6) == 0);
	H_TRUE(tl_resp_num(b, ':', -42) == 6 && memcmp(b, ":-42\r\n", 6) == 0);
	H_TRUE(tl_resp_num(b, ':', INT64_MIN) == 23 && memcmp(b, ":-9223372036854775808\r\n", 23) == 0);
	H_TRUE(tl_resp_num(b, '*', INT64_MAX) == 22 && memcmp(b, "*9223372036854775807\r\n", 22) == 0);
	H_TRUE(tl_resp_num_parse((const uint8_t *)"9223372036854775807", 19, &v) == 0 && v == INT64_MAX);
	H_TRUE(tl_resp_num_parse((const uint8_t *)"-9223372036854775808", 20, &v) == 0 && v == INT64_MIN);
	H_TRUE(tl_resp_num_parse((const uint8_t *)"-17", 3, &v) == 0 && v == -17);
	H_TRUE(tl_resp_num_parse((const uint8_t *)"0", 1, &v) == 0 && v == 0);
	v = 7;
	H_EQ(tl_resp_num_parse((const uint8_t *)"9223372036854775808", 19, &v), -ERANGE);
	H_EQ(tl_resp_num_parse((const uint8_t *)"-9223372036854775809", 20, &v), -ERANGE);
	H_EQ(tl_resp_num_parse((const uint8_t *)"", 0, &v), -EINVAL);
	H_EQ(tl_resp_num_parse((const uint8_t *)"-", 1, &v), -EINVAL);
	H_EQ(tl_resp_num_parse((const uint8_t *)"+1", 2, &v), -EINVAL);
	H_EQ(tl_resp_num_parse((const uint8_t *)"1 ", 2, &v), -EINVAL);
	H_EQ(tl_resp_num_parse(NULL, 1, &v), -EINVAL);
	H_EQ(tl_resp_num_parse((const uint8_t *)"1", 1, NULL), -EINVAL);
	H_EQ(v, 7); /* untouched by every refusal */
}

/* A command table: names without case, Redis's arities (exact, at
 * least), the host's own entries after the tl_resp_command; and bulk
 * strings. */
static void resp_commands_table(void)
{
	static const struct ent {
		tl_resp_command c;
		int op;
	} t[] = {{{"get", 2}, 10}, {{"del", -2}, 11}, {{"ping", -1}, 12}, {{"config|get", 3}, 13}};
	const uint32_t n = sizeof t / sizeof *t;
	struct {
		const char *name;
		uint32_t ac;
		int want;
	} cases[] = {
		{"get", 2, 0}, {"GET", 2, 0}, {"gEt", 2, 0}, {"get", 1, -EDOM}, {"get", 3, -EDOM},
		{"del", 2, 1}, {"DEL", 9, 1}, {"del", 1, -EDOM}, {"ping", 1, 2}, {"PING", 2, 2},
		{"config|get", 3, 3}, {"CONFIG|GET", 3, 3}, {"config\\get", 3, -ENOENT}, /* '\\' is not '|' */
		{"ge", 2, -ENOENT}, {"gets", 2, -ENOENT}, {"", 1, -ENOENT}, {"g\rt", 2, -ENOENT}, {"get", 0, -ENOENT},
		{"Config|Get", 3, 3}, {"0123456789abcdef", 1, -ENOENT}, /* 16 bytes: longer than any name */
	};
	tl_resp_arg av[9];
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		for (uint32_t a = 0; a < 9; a++)
			av[a] = (tl_resp_arg){(const uint8_t *)"x", 1};
		av[0] = (tl_resp_arg){(const uint8_t *)cases[i].name, (uint32_t)strlen(cases[i].name)};
		int rc = tl_resp_command_find(av, cases[i].ac, t, n, sizeof *t);
		H_TRUE(rc == cases[i].want, "%s with %u: %d, wanted %d", cases[i].name, cases[i].ac, rc, cases[i].want);
		if (rc >= 0)
			H_EQ(t[rc].op, 10 + rc);
	}
	H_TRUE(strcmp(tl_resp_error_reply(-ENOENT), "-ERR unknown command\r\n") == 0);
	H_TRUE(strcmp(tl_resp_error_reply(-EDOM), "-ERR wrong number of arguments\r\n") == 0);
	av[0] = (tl_resp_arg){(const uint8_t *)"get\0", 4}; /* a 0 byte: no name has one */
	H_EQ(tl_resp_command_find(av, 2, t, n, sizeof *t), -ENOENT);
	av[0] = (tl_resp_arg){(const uint8_t *)"get", 3};
	H_EQ(tl_resp_command_find(av, 2, t, 0, sizeof *t), -ENOENT);
	H_EQ(tl_resp_command_find(NULL, 2, t, n, sizeof *t), -EINVAL);
	H_EQ(tl_resp_command_find(av, 2, NULL, n, sizeof *t), -EINVAL);
	H_EQ(tl_resp_command_find(av, 2, t, n, sizeof(tl_resp_command) - 1), -EINVAL);
	uint8_t b[64];
	H_TRUE(tl_resp_bulk(b, "hello", 5) == 11 && memcmp(b, "$5\r\nhello\r\n", 11) == 0);
	H_TRUE(tl_resp_bulk(b, "", 0) == 6 && memcmp(b, "$0\r\n\r\n", 6) == 0);
	static uint8_t big[1000];
	uint8_t *out = malloc(1100);
	CU_ASSERT_PTR_NOT_NULL_FATAL(out);
	memset(big, 'v', sizeof big);
	H_TRUE(tl_resp_bulk(out, big, 1000) == 1009 && memcmp(out, "$1000\r\n", 7) == 0 && out[7] == 'v' &&
	       out[1006] == 'v' && memcmp(out + 1007, "\r\n", 2) == 0);
	free(out);
}

/* Refusals: init's ranges, next's NULLs and an unmade reader; done and
 * consume on NULL do nothing. */
static void resp_arguments(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_rbuf r;
	tl_resp s;
	tl_resp_arg av[1];
	uint32_t ac;
	memset(&s, 0, sizeof s);
	H_EQ(tl_resp_next(&s, av, &ac), -EINVAL); /* not made */
	H_EQ(tl_rbuf_init(&r, l, NULL, 64), 0);
	H_EQ(tl_resp_init(NULL, &r, 1, 1), -EINVAL);
	H_EQ(tl_resp_init(&s, NULL, 1, 1), -EINVAL);
	H_EQ(tl_resp_init(&s, &r, 0, 1), -EINVAL);
	H_EQ(tl_resp_init(&s, &r, (1u << 20) + 1, 1), -EINVAL);
	H_EQ(tl_resp_init(&s, &r, 1, (1u << 30) + 1), -EINVAL);
	H_EQ(tl_resp_init(&s, &r, 1u << 20, 1u << 30), 0);
	H_EQ(tl_resp_next(NULL, av, &ac), -EINVAL);
	H_EQ(tl_resp_next(&s, NULL, &ac), -EINVAL);
	H_EQ(tl_resp_next(&s, av, NULL), -EINVAL);
	H_EQ(tl_resp_next(&s, av, &ac), 0); /* nothing read yet */
	tl_resp_done(NULL);
	tl_resp_consume(NULL);
	tl_resp_consume(&s);
	tl_rbuf_fini(&r);
	h_end(l, fds);
}

/* ---- Arguments ---- */

static void arguments(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_rbuf r;
	uint8_t mem[8];
	H_EQ(tl_rbuf_init(&r, NULL, mem, 8), -EINVAL);
	H_EQ(tl_rbuf_init(&r, l, mem, 0), -EINVAL);
	H_EQ(tl_rbuf_init(&r, l, NULL, (1u << 30) + 1), -EINVAL);
	H_EQ(tl_rbuf_init(&r, l, NULL, 100), 0); /* allocated, freed by fini */
	const uint8_t *m;
	uint32_t len;
	H_EQ(tl_rbuf_next(&r, &m, &len), -EINVAL); /* no framing */
	H_EQ(tl_rbuf_peek(&r, 1, &m), 0);
	H_EQ(tl_rbuf_consume(&r, 0), 0);
	H_EQ(tl_rbuf_consume(&r, 1), -EINVAL);
	tl_completion c;
	memset(&c, 0, sizeof c);
	c.kind = TL_K_WRITE;
	H_EQ(tl_rbuf_feed(&r, &c), -EINVAL);
	c.kind = TL_K_READ;
	c.flags = TL_F_LEASE;
	H_EQ(tl_rbuf_feed(&r, &c), -EINVAL); /* a lease with no bytes */
	c.flags = 0;
	c.result = 5;
	H_EQ(tl_rbuf_feed(&r, &c), -EINVAL); /* bytes with no lease */
	c.result = 0;
	c.flags = TL_F_TERMINAL | TL_F_STOPPED;
	H_EQ(tl_rbuf_feed(&r, &c), 0); /* the host's to act on */
	H_EQ(tl_rbuf_set_prefix(&r, 4, 0), 0);
	tl_rbuf_fini(&r);
	tl_rbuf_fini(&r);
	H_EQ(tl_rbuf_init(&r, l, mem, 3), 0);
	H_EQ(tl_rbuf_set_prefix(&r, 4, 0), -EINVAL); /* max below the prefix */
	tl_rbuf_fini(&r);
	tl_wbuf w;
	tl_handle h = {1};
	H_EQ(tl_wbuf_init(&w, l, TL_HANDLE_NONE, mem, 8, 0), -EINVAL);
	H_EQ(tl_wbuf_init(&w, l, h, mem, 0, 0), -EINVAL);
	H_EQ(tl_wbuf_init(&w, l, h, NULL, 64, 0), 0);
	H_EQ(tl_wbuf_on_write(&w, &c), -EINVAL);
	H_EQ(tl_wbuf_append(&w, NULL, 1), -EINVAL);
	H_EQ(tl_wbuf_flush(&w), 0); /* nothing to send */
	H_EQ(tl_wbuf_append(&w, "abc", 3), 0);
	H_EQ(tl_wbuf_flush(&w), -ENOENT); /* a handle this loop never made: broken, told */
	H_EQ(tl_wbuf_flush(&w), -EPIPE);
	H_EQ(tl_wbuf_fini(&w), 0);
	H_EQ(tl_wbuf_fini(&w), 0);
	H_EQ(tl_wbuf_flush_all(NULL), -EINVAL);
	h_end(l, fds);
}

static const h_test tests[] = {
#define T(s, f) {s, #f, f}
	T("reader", split_delim_crlf),
	T("reader", split_delim_4byte),
	T("reader", split_delim_1byte),
	T("reader", split_prefix_1),
	T("reader", split_prefix_2_counted),
	T("reader", split_prefix_4),
	T("reader", no_copy_inside_lease),
	T("reader", delim_max_in_lease),
	T("reader", delim_max_across_leases),
	T("reader", prefix_max_and_bad),
	T("reader", stream_random),
	T("reader", raw_resp_one_lease),
	T("reader", raw_resp_small_leases),
	T("reader", peer_closes_mid_frame),
	T("reader", peer_closes_between_frames),
	T("reader", feed_refuses_past_queue),
	T("resp", resp_one_lease),
	T("resp", resp_small_leases),
	T("resp", resp_undone_stays),
	T("resp", resp_short_after_long),
	T("resp", resp_errors),
	T("resp", resp_peer_closes),
	T("resp", resp_numbers),
	T("resp", resp_commands_table),
	T("resp", resp_arguments),
	T("writer", coalesce_one_write),
	T("writer", inflight_accumulates),
	T("writer", backpressure),
	T("writer", ring_wraps_one_write),
	T("writer", write_error_once),
	T("both", echo_lines),
	T("both", arguments),
	T("file", fout_whole),
	T("file", fout_write_fails),
	T("file", fout_rename_fails),
	T("file", fout_abort_and_arguments),
#undef T
	{NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
	return h_main_table(argc, argv, "bufio", tests);
}
