/* tests/fuzz_bufio.c: libFuzzer target for the buffered-stream reader (turnloop/bufio.h): a stream the input makes, sent over the simulation driver and read through tl_rbuf, checked against a reference framer. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turnloop/bufio.h>
#include <turnloop/loop.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/*
 * The input (a byte past its end reads as 0):
 *
 *   0      mode: bits 0-1 the host (0: tl_rbuf_next by a delimiter, 1: by a
 *          length prefix, 2: tl_rbuf_peek and tl_rbuf_consume with no
 *          framing, 3: all of them mixed, the framing changing between
 *          messages); bit 2: the stream ends with the peer's shutdown (EOF),
 *          else the read is stopped once every byte came; bit 3: the reader
 *          allocates its buffer (else it is a heap block of the target's,
 *          exactly max bytes); bits 4-7: the simulation's seed
 *   1      framing: bits 0-1 delimiter length - 1; bits 2-3 prefix width
 *          (1, 2, 4, 1); bit 4 TL_RBUF_PREFIX_COUNTED; bit 5 mixed mode
 *          starts with the prefix
 *   2-5    the delimiter's bytes
 *   6-7    max = 1 + (big-endian value % 512): the largest frame
 *   8      the pooled buffers' size (lease_sizes[value % 18])
 *   9      bits 0-1: writes in flight at once (1 + value % 3); bit 2: the
 *          stream's lease cap is 20, above TL_RBUF_LEASES (feeds are refused)
 *   10     K = value % 16, then K bytes: the writes' sizes (1 + value each,
 *          in turn); K = 0: one write of the whole stream
 *   then   S = value % 32, then S bytes: the host's script, used in turn by
 *          every choice below (none: every choice reads 0)
 *   rest   the stream, up to 64 KiB
 *
 * Choices: after each turn's completions are fed, the host takes messages
 * unless the script's byte has bit 7 (a host that lets leases pile up; it
 * takes them anyway when the stream stalls or a feed is refused). A peek
 * asks for min = byte & 15 (0 means 1), or (byte & 63) * 9 + 1 when both
 * top bits are set; with the view of n bytes, the next byte either asks for
 * more (bit 7: min = n + 1 + (byte & 7)) or consumes 1 + (byte & 63) * n /
 * 64, after trying n + 1 when bit 6 is set (-EINVAL). In mixed mode a byte
 * picks each step: & 3 is 0 or 1 next, 2 a peek, 3 a new framing (bit 2:
 * a prefix of width (1, 2, 4, 1)[byte >> 3 & 3], counted with bit 5; else
 * the delimiter's first 1 + (byte >> 3 & 3) bytes) and then a next.
 *
 * Checked, with abort() on any violation:
 *  - every message and every peeked view has the stream's bytes at the
 *    position the reference says, messages in order, none longer than max;
 *  - tl_rbuf_next returns a message, 0 or -EMSGSIZE / -EBADMSG / -EPROTO
 *    exactly when the reference framer (below, on the bytes fed so far and
 *    whether the end was fed) says so; peek the same for its min;
 *  - where a view lies: a frame wholly inside the lease that holds the
 *    stream's next byte, with nothing in the reader's buffer, is a view
 *    into that lease at its offset (no copy), anything else lies in the
 *    reader's buffer; a peek's length is what bufio.h says (the lease's
 *    rest, or what the buffer holds: the bytes asked for, or more);
 *  - a view keeps its bytes while more leases are fed and the framing
 *    changes, until the next call on the reader;
 *  - tl_rbuf_buffered is the bytes fed and not consumed; tl_rbuf_leases
 *    is the leases with bytes neither consumed nor copied, and the one
 *    whose last bytes a view of tl_rbuf_next just gave, until the next call
 *    (none after 0 or an error); errors are sticky; a feed is refused
 *    (-ENOBUFS) only with TL_RBUF_LEASES leases held;
 *  - with a delimiter or a prefix, the messages and how they end are those
 *    of the whole stream framed in one go by the reference;
 *  - at the end the reader holds no lease, the loop has none out
 *    (tl_loop_stats.leases_out 0), every handle closes and the loop closes
 *    (LeakSanitizer reports a leak as a finding).
 * Only the reader (lib/bufio/bufio.c) and this file are instrumented: the
 * fuzzer's feedback is theirs, and ASan watches the reader's buffer.
 * BUFIO_VERBOSE=1 prints every call on the reader.
 */

#define STREAM_MAX (64u * 1024)
#define TURN_OUT 64
#define NO_ERR 1 /* "no error yet": errors are negative */

static const uint32_t lease_sizes[18] = {1,  2,   3,   4,   5,   7,    8,    13,   16,
					 31, 64, 100, 128, 256, 512, 1000, 4096, 16384};

enum { MODE_DELIM, MODE_PREFIX, MODE_PEEK, MODE_MIXED };
enum { TOK_LISTEN = 1, TOK_ACCEPT, TOK_CONNECT, TOK_READ, TOK_WRITE, TOK_SHUT, TOK_CLOSE };

static int verbose;

#define EXPECT(cond, ...)                                                                        \
	do {                                                                                     \
		if (!(cond))                                                                     \
			fail_at(__LINE__, #cond, __VA_ARGS__);                                   \
	} while (0)

__attribute__((noreturn, format(printf, 3, 4))) static void fail_at(int line, const char *cond,
								      const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "fuzz_bufio: line %d: not (%s): ", line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	abort(); /* libFuzzer saves the input as a crash file */
}

/* ---- The reference framer: the stream's bytes and nothing else ---- */

struct framing {
	int kind;      /* 0 none, 1 delimiter, 2 prefix */
	uint32_t fix;  /* delimiter or prefix bytes */
	uint8_t delim[4];
	int counted;
};

/* The last delimiter search, for the same question again (a host asks at
 * each read until its frame is whole); the stream does not change during a
 * run. Zeroed at the start of each. */
struct ref_memo {
	int valid;
	uint32_t pos, max, fix, at;
	uint8_t delim[4];
};

/* Where the delimiter first occurs in s[pos..total), if the frame it ends
 * is at most max bytes long: its offset, or UINT32_MAX. */
static uint32_t ref_delim(struct ref_memo *m, const struct framing *f, const uint8_t *s,
			  uint32_t total, uint32_t pos, uint32_t max)
{
	if (m->valid && m->pos == pos && m->max == max && m->fix == f->fix &&
	    memcmp(m->delim, f->delim, 4) == 0)
		return m->at;
	uint32_t at = UINT32_MAX;
	for (uint32_t i = pos; i + f->fix <= total && i + f->fix - pos <= max; i++) {
		uint32_t k = 0;
		while (k < f->fix && s[i + k] == f->delim[k])
			k++;
		if (k == f->fix) {
			at = i;
			break;
		}
	}
	*m = (struct ref_memo){1, pos, max, f->fix, at, {0}};
	memcpy(m->delim, f->delim, 4);
	return at;
}

/* What the frame at pos is, given the stream's bytes s[0..end) of
 * s[0..total), and whether end is the stream's end: a message (*off,
 * *len: its bytes, *flen: the whole frame), 0 (not whole yet), or the
 * error. */
static int ref_frame(struct ref_memo *m, const struct framing *f, const uint8_t *s, uint32_t total,
		     uint32_t pos, uint32_t end, int eof, uint32_t max, uint32_t *off, uint32_t *len,
		     uint32_t *flen)
{
	uint32_t avail = end - pos;
	if (f->kind == 1) {
		uint32_t i = ref_delim(m, f, s, total, pos, max);
		if (i != UINT32_MAX && i + f->fix <= end) {
			*off = pos;
			*len = i - pos;
			*flen = i - pos + f->fix;
			return 1;
		}
		if (avail >= max)
			return -EMSGSIZE; /* max bytes came, and no delimiter in them */
	} else if (avail >= f->fix) {
		uint64_t n = 0;
		for (uint32_t i = 0; i < f->fix; i++)
			n = n << 8 | s[pos + i];
		if (f->counted && n < f->fix)
			return -EBADMSG;
		uint64_t whole = f->counted ? n : n + f->fix;
		if (whole > max)
			return -EMSGSIZE;
		if (avail >= whole) {
			*off = pos + f->fix;
			*len = (uint32_t)whole - f->fix;
			*flen = (uint32_t)whole;
			return 1;
		}
	}
	return eof && avail ? -EPROTO : 0;
}

/* ---- One run ---- */

struct fed_lease {
	const uint8_t *data;
	uint32_t start, len; /* the stream's bytes start .. start + len */
};

static struct fed_lease leases[STREAM_MAX + 1];

struct run {
	/* From the input. */
	const uint8_t *s;
	uint32_t total;
	const uint8_t *sizes, *script;
	uint32_t nsizes, nscript, ki, si;
	int mode, eof_mode;
	uint32_t max, inflight_max, lease_cap;
	struct framing hdr_frame; /* the header's delimiter and prefix */
	/* The loop and the pair. */
	tl_loop *loop;
	tl_handle srv, cli;
	tl_op rd;
	uint32_t woff, wlen[3], winflight;
	tl_op wop[3];
	int shut_sent, rd_term, srv_closing, srv_closed, cli_closed;
	/* The reader and what it was fed. */
	tl_rbuf r;
	uint8_t *mem; /* its buffer when the target gives it */
	struct framing fr;
	uint32_t fed, nfed, lc;
	int eof;
	/* The host's side: the next byte to take, the reader's buffer as the
	 * bytes pos .. bend of the stream, the last view, the sticky error. */
	uint32_t pos, bend;
	int pend; /* the last next emptied its lease: held until the next call */
	const uint8_t *vp;
	uint32_t vlen, voff;
	int err;
	uint32_t msgs;
	struct ref_memo memo;
};

static uint8_t script_byte(struct run *u)
{
	if (!u->nscript)
		return 0;
	uint8_t b = u->script[u->si];
	u->si = (u->si + 1) % u->nscript;
	return b;
}

static uint32_t avail(const struct run *u)
{
	return u->fed - u->pos;
}

/* The lease that holds the stream's byte pos (u->lc afterwards), or NULL. */
static const struct fed_lease *lease_at(struct run *u, uint32_t pos)
{
	while (u->lc < u->nfed && leases[u->lc].start + leases[u->lc].len <= pos)
		u->lc++;
	return u->lc < u->nfed && leases[u->lc].start <= pos ? &leases[u->lc] : NULL;
}

static int in_mem(const struct run *u, const uint8_t *p, uint32_t len)
{
	return u->mem && p >= u->mem && p + len <= u->mem + u->max;
}

/* The last view still has its bytes (checked before the call that ends it). */
static void check_view(const struct run *u)
{
	if (!u->vp)
		return;
	EXPECT(memcmp(u->vp, u->s + u->voff, u->vlen) == 0,
	       "the view of stream bytes %u..%u changed before the next call on the reader", u->voff,
	       u->voff + u->vlen);
}

static void set_view(struct run *u, const uint8_t *p, uint32_t len, uint32_t off)
{
	u->vp = len ? p : NULL;
	u->vlen = len;
	u->voff = off;
}

/*
 * The reader's counts. Bytes: those fed and not consumed. Leases: those
 * with bytes neither consumed nor copied into its buffer (the stream's
 * bytes bend .. fed), and the one whose last bytes the last tl_rbuf_next
 * handed out as a view, until the next call (bufio.h: a lease goes back
 * at the first call after the one that returned its last bytes, at once
 * when they were copied or consumed).
 */
static void check_counts(struct run *u)
{
	uint32_t bytes = u->err == NO_ERR ? avail(u) : 0, n = 0;
	EXPECT(tl_rbuf_buffered(&u->r) == bytes, "tl_rbuf_buffered %u, fed %u and consumed %u",
	       tl_rbuf_buffered(&u->r), u->fed, u->pos);
	if (u->err == NO_ERR) {
		uint32_t j = u->lc;
		while (j < u->nfed && leases[j].start + leases[j].len <= u->bend)
			j++;
		n = u->nfed - j + u->pend;
	}
	EXPECT(tl_rbuf_leases(&u->r) == n,
	       "tl_rbuf_leases %u, want %u (stream bytes %u..%u in leases%s)",
	       tl_rbuf_leases(&u->r), n, u->bend, u->fed, u->pend ? ", one emptied by a view" : "");
}

/* A call returned 0 or an error: the reader holds no lease, its buffer the
 * bytes fed and not consumed (none after an error). */
static void check_waiting(struct run *u, int rc)
{
	EXPECT(tl_rbuf_leases(&u->r) == 0, "%u leases held after %d", tl_rbuf_leases(&u->r), rc);
	if (rc < 0)
		u->err = rc;
	else
		u->bend = u->fed;
	u->vp = NULL;
	check_counts(u);
}

/* The reader's error is sticky: the same from next and peek again. */
static void check_sticky(struct run *u)
{
	const uint8_t *m;
	uint32_t len;
	int rc = tl_rbuf_next(&u->r, &m, &len);
	EXPECT(rc == (u->fr.kind ? u->err : -EINVAL), "next after error %d returned %d", u->err, rc);
	rc = tl_rbuf_peek(&u->r, 1, &m);
	EXPECT(rc == u->err, "peek after error %d returned %d", u->err, rc);
	EXPECT(tl_rbuf_leases(&u->r) == 0 && tl_rbuf_buffered(&u->r) == 0,
	       "after error %d: %u leases, %u bytes held", u->err, tl_rbuf_leases(&u->r),
	       tl_rbuf_buffered(&u->r));
}

/* One tl_rbuf_next against the reference: 1 (a message), 0 or the error. */
static int step_next(struct run *u)
{
	const uint8_t *m = NULL;
	uint32_t len = 0, off = 0, rlen = 0, flen = 0;
	check_view(u);
	int want = ref_frame(&u->memo, &u->fr, u->s, u->total, u->pos, u->fed, u->eof, u->max, &off,
			     &rlen, &flen);
	/* Where the frame must be: in the lease of its first byte when it
	 * lies wholly there and the reader's buffer is empty. */
	const struct fed_lease *l = lease_at(u, u->pos);
	int in_lease = want == 1 && u->bend == u->pos && l && u->pos + flen <= l->start + l->len;
	u->pend = 0;
	int rc = tl_rbuf_next(&u->r, &m, &len);
	if (verbose)
		fprintf(stderr, "next at %u (fed %u%s): %d len %u, reference %d len %u\n", u->pos,
			u->fed, u->eof ? ", end" : "", rc, len, want, rlen);
	EXPECT(rc == want, "next at stream byte %u (%u fed%s): %d, the reference says %d", u->pos,
	       u->fed, u->eof ? ", the end" : "", rc, want);
	if (rc != 1) {
		check_waiting(u, rc);
		return rc;
	}
	EXPECT(len == rlen && len <= u->max, "message %u: %u bytes, the reference says %u", u->msgs,
	       len, rlen);
	EXPECT(len == 0 || memcmp(m, u->s + off, len) == 0,
	       "message %u (stream bytes %u..%u): its bytes differ", u->msgs, off, off + len);
	if (in_lease) {
		EXPECT(m == l->data + (off - l->start),
		       "message %u lies in one lease (stream %u..%u) but its view is not there",
		       u->msgs, l->start, l->start + l->len);
		u->pend = u->pos + flen == l->start + l->len;
	} else {
		EXPECT(!u->mem || len == 0 || in_mem(u, m, len),
		       "message %u spans leases (or follows bytes held) but is not in the reader's "
		       "buffer",
		       u->msgs);
		if (u->bend < u->pos + flen)
			u->bend = u->pos + flen;
	}
	u->pos += flen;
	if (u->bend < u->pos)
		u->bend = u->pos;
	u->msgs++;
	set_view(u, m, len, off);
	check_counts(u);
	return 1;
}

/* One peek and what the host does with it: 1 (progress), 0 or the error. */
static int step_peek(struct run *u)
{
	uint8_t b = script_byte(u);
	uint32_t min = (b & 0xc0) == 0xc0 ? (b & 63) * 9u + 1 : b & 15u;
	for (;;) {
		const uint8_t *p = NULL;
		check_view(u);
		uint32_t need = min ? min : 1, h = u->bend - u->pos;
		const struct fed_lease *l = lease_at(u, u->pos);
		u->pend = 0;
		int rc = tl_rbuf_peek(&u->r, min, &p);
		if (verbose)
			fprintf(stderr, "peek %u at %u (fed %u%s, %u held): %d\n", min, u->pos, u->fed,
				u->eof ? ", end" : "", h, rc);
		if (need > u->max) {
			EXPECT(rc == -EMSGSIZE, "peek of %u, max %u: %d", need, u->max, rc);
			check_waiting(u, rc);
			return rc;
		}
		if (avail(u) < need) {
			int want = u->eof && avail(u) ? -EPROTO : 0;
			EXPECT(rc == want, "peek of %u with %u bytes fed and not consumed%s: %d", need,
			       avail(u), u->eof ? " at the end" : "", rc);
			check_waiting(u, rc);
			return rc;
		}
		/* bufio.h: the rest of the lease when the buffer is empty and
		 * the lease has min bytes; else the buffer, with what it holds
		 * if that is min or more, or exactly min bytes assembled. */
		int lease_view = h == 0 && l && l->start + l->len - u->pos >= need;
		uint32_t n = lease_view ? l->start + l->len - u->pos : h >= need ? h : need;
		EXPECT(rc > 0 && (uint32_t)rc == n, "peek of %u at %u (%u held, %u fed): %d, want %u",
		       need, u->pos, h, u->fed, rc, n);
		EXPECT(memcmp(p, u->s + u->pos, n) == 0, "peek at %u: the %u bytes differ", u->pos, n);
		if (lease_view)
			EXPECT(p == l->data + (u->pos - l->start), "peek at %u: not a view into the lease",
			       u->pos);
		else
			EXPECT(!u->mem || in_mem(u, p, n), "peek at %u: not in the reader's buffer",
			       u->pos);
		u->bend = lease_view ? u->pos : u->pos + n;
		set_view(u, p, n, u->pos);
		check_counts(u);
		uint8_t c = script_byte(u);
		if (c & 0x80) { /* no whole message in the n bytes: ask for more */
			min = n + 1 + (c & 7);
			continue;
		}
		if (c & 0x40)
			EXPECT(tl_rbuf_consume(&u->r, n + 1) == -EINVAL, "consume %u of a view of %u",
			       n + 1, n);
		uint32_t k = 1 + (c & 63) * n / 64;
		check_view(u);
		int cr = tl_rbuf_consume(&u->r, k);
		EXPECT(cr == 0, "consume %u of %u: %d", k, n, cr);
		if (verbose)
			fprintf(stderr, "consume %u of %u\n", k, n);
		u->pos += k;
		if (u->bend < u->pos)
			u->bend = u->pos;
		u->vp = NULL;
		check_counts(u);
		return 1;
	}
}

static void set_framing(struct run *u, const struct framing *f)
{
	int rc, want = 0;
	if (f->kind == 1) {
		rc = tl_rbuf_set_delim(&u->r, f->delim, f->fix);
	} else {
		rc = tl_rbuf_set_prefix(&u->r, f->fix, f->counted ? TL_RBUF_PREFIX_COUNTED : 0);
		if (u->max < f->fix)
			want = -EINVAL;
	}
	EXPECT(rc == want, "setting framing %d/%u with max %u: %d", f->kind, f->fix, u->max, rc);
	if (rc == 0)
		u->fr = *f;
	if (verbose)
		fprintf(stderr, "framing %d/%u%s: %d\n", f->kind, f->fix, f->counted ? " counted" : "",
			rc);
}

static const uint32_t widths[4] = {1, 2, 4, 1};

/* One step of the host; 1 while there may be more to take. */
static int step(struct run *u)
{
	if (u->mode == MODE_PEEK)
		return step_peek(u);
	if (u->mode != MODE_MIXED)
		return step_next(u);
	uint8_t b = script_byte(u);
	if ((b & 3) == 2)
		return step_peek(u);
	if ((b & 3) == 3) {
		struct framing f = u->hdr_frame;
		if (b & 4) {
			f.kind = 2;
			f.fix = widths[b >> 3 & 3];
			f.counted = b >> 5 & 1;
		} else {
			f.kind = 1;
			f.fix = 1 + (b >> 3 & 3);
		}
		set_framing(u, &f);
		check_view(u); /* the setters leave the view be */
	}
	return step_next(u);
}

/* Take what the reader has until it says 0 or fails. */
static void drain(struct run *u)
{
	if (u->err != NO_ERR) {
		check_sticky(u);
		return;
	}
	uint32_t guard = 0;
	while (step(u) == 1)
		EXPECT(++guard < 4 * STREAM_MAX, "the host's steps do not end (%u)", guard);
	if (u->err != NO_ERR)
		check_sticky(u);
}

/* Hand the reader one completion of its read; drains and feeds again when
 * it holds TL_RBUF_LEASES leases. */
static void feed(struct run *u, const tl_completion *x)
{
	int lease = (x->flags & TL_F_LEASE) != 0;
	if (lease) {
		EXPECT(x->result > 0 && u->fed + (uint32_t)x->result <= u->woff,
		       "a read of %lld bytes after %u of %u written", (long long)x->result, u->fed,
		       u->woff);
		EXPECT(memcmp(x->u.read.lease.data, u->s + u->fed, (size_t)x->result) == 0,
		       "the read's bytes are not the stream's at %u", u->fed);
	}
	int rc = tl_rbuf_feed(&u->r, x);
	if (rc == -ENOBUFS) {
		EXPECT(lease && u->lease_cap > TL_RBUF_LEASES &&
			       tl_rbuf_leases(&u->r) == TL_RBUF_LEASES && u->err == NO_ERR,
		       "feed refused with %u leases held, lease cap %u", tl_rbuf_leases(&u->r),
		       u->lease_cap);
		drain(u);
		rc = tl_rbuf_feed(&u->r, x);
	}
	EXPECT(rc == 0, "feed of a read (result %lld, flags %#x): %d", (long long)x->result,
	       x->flags, rc);
	if (x->flags & TL_F_EOF)
		u->eof = 1;
	if (verbose)
		fprintf(stderr, "feed %lld%s%s\n", (long long)x->result, lease ? " lease" : "",
			x->flags & TL_F_EOF ? " eof" : "");
	if (lease) {
		if (u->err == NO_ERR) {
			leases[u->nfed++] = (struct fed_lease){x->u.read.lease.data, u->fed,
							       (uint32_t)x->result};
		} else {
			EXPECT(tl_rbuf_leases(&u->r) == 0, "a reader after its error keeps a lease");
		}
		u->fed += (uint32_t)x->result;
	}
	check_view(u); /* feeding leaves the view be */
	check_counts(u);
}

static void on_completion(struct run *u, const tl_completion *x)
{
	switch (x->kind) {
	case TL_K_READ:
		EXPECT(tl_op_eq(x->op, u->rd), "a read of another op");
		feed(u, x);
		if (x->flags & TL_F_TERMINAL) {
			u->rd_term = 1;
			EXPECT(x->result == 0 || (u->srv_closing && x->result == -ECANCELED),
			       "the read ended with %lld", (long long)x->result);
		}
		break;
	case TL_K_WRITE: {
		int i = 0;
		while (i < 3 && !(u->wlen[i] && tl_op_eq(x->op, u->wop[i])))
			i++;
		EXPECT(i < 3, "a write completion of no write in flight");
		EXPECT(x->result == u->wlen[i] || (u->srv_closing && x->result < 0),
		       "a write of %u ended with %lld", u->wlen[i], (long long)x->result);
		u->wlen[i] = 0;
		u->winflight--;
		break;
	}
	case TL_K_SHUTDOWN:
		EXPECT(x->result == 0 || u->srv_closing, "shutdown: %lld", (long long)x->result);
		break;
	case TL_K_CLOSED:
		if (tl_handle_eq(x->handle, u->srv))
			u->srv_closed = 1;
		else if (tl_handle_eq(x->handle, u->cli))
			u->cli_closed = 1;
		break;
	default:
		EXPECT(0, "an unexpected completion of kind %u", x->kind);
	}
}

/* One turn; the number of completions. */
static int turn(struct run *u)
{
	tl_completion out[TURN_OUT];
	int n = tl_turn(u->loop, 1000000000, out, TURN_OUT, NULL);
	EXPECT(n >= 0, "tl_turn: %d", n);
	for (int i = 0; i < n; i++)
		on_completion(u, &out[i]);
	return n;
}

/* Submit the next writes of the stream, then the shutdown at its end. */
static void send_more(struct run *u)
{
	while (!u->srv_closing && u->winflight < u->inflight_max && u->woff < u->total) {
		uint32_t len = u->nsizes ? 1u + u->sizes[u->ki++ % u->nsizes] : u->total;
		if (len > u->total - u->woff)
			len = u->total - u->woff;
		int i = 0;
		while (u->wlen[i])
			i++;
		int rc = tl_write(u->loop, u->cli, u->s + u->woff, len, TOK_WRITE, &u->wop[i]);
		EXPECT(rc == 0, "tl_write: %d", rc);
		u->wlen[i] = len;
		u->winflight++;
		u->woff += len;
	}
	if (!u->srv_closing && u->eof_mode && !u->shut_sent && u->woff == u->total &&
	    !u->winflight) {
		tl_op op;
		EXPECT(tl_shutdown(u->loop, u->cli, TOK_SHUT, &op) == 0, "tl_shutdown");
		u->shut_sent = 1;
	}
}

/* A turn of the pair's setup: the kinds of what it returned, or'ed. */
static uint32_t setup_turn(struct run *u)
{
	tl_completion out[8];
	uint32_t kinds = 0;
	int n = tl_turn(u->loop, 1000000000, out, 8, NULL);
	EXPECT(n >= 0, "tl_turn: %d", n);
	for (int i = 0; i < n; i++) {
		EXPECT(out[i].result >= 0, "setup: kind %u ended with %lld", out[i].kind,
		       (long long)out[i].result);
		if (out[i].kind == TL_K_ACCEPT)
			u->srv = out[i].u.accept.conn;
		kinds |= 1u << out[i].kind;
	}
	return kinds;
}

/* A listener, a connection to it, the accepted end; the listener closed. */
static void connect_pair(struct run *u)
{
	tl_addr a, bound;
	tl_handle lis;
	tl_op aop, cop;
	EXPECT(tl_addr_parse(&a, "127.0.0.1", 0) == 0, "address");
	EXPECT(tl_tcp_listen(u->loop, &a, NULL, &lis) == 0, "listen");
	EXPECT(tl_local_addr(u->loop, lis, &bound) == 0, "listener's address");
	EXPECT(tl_accept(u->loop, lis, TOK_ACCEPT, &aop) == 0, "accept");
	EXPECT(tl_tcp_connect(u->loop, &bound, 0, TOK_CONNECT, &u->cli, &cop) == 0, "connect");
	uint32_t want = 1u << TL_K_ACCEPT | 1u << TL_K_CONNECT, seen = 0;
	for (int t = 0; t < 16 && (seen & want) != want; t++)
		seen |= setup_turn(u);
	EXPECT((seen & want) == want, "the pair did not connect");
	EXPECT(tl_close(u->loop, lis, TOK_LISTEN) == 0, "closing the listener");
	seen = 0;
	for (int t = 0; t < 16 && !(seen & 1u << TL_K_CLOSED); t++)
		seen |= setup_turn(u);
	EXPECT(seen & 1u << TL_K_CLOSED, "the listener did not close");
}

/* The whole stream through the reference alone: the frames a host taking
 * messages until the end finds, and how that ends (0 or the error). */
static int ref_whole(const struct run *u, uint32_t *frames, uint32_t *pos)
{
	struct ref_memo memo = {0};
	uint32_t off, len, flen;
	int rc;
	*frames = 0;
	*pos = 0;
	while ((rc = ref_frame(&memo, &u->fr, u->s, u->total, *pos, u->total, u->eof_mode, u->max,
			       &off, &len, &flen)) == 1) {
		*pos += flen;
		(*frames)++;
	}
	return rc;
}

static uint8_t byte_at(const uint8_t *d, size_t size, size_t i)
{
	return i < size ? d[i] : 0;
}

/* Cut the input into its parts (the layout above). */
static void parse(struct run *u, const uint8_t *d, size_t size)
{
	uint8_t b0 = byte_at(d, size, 0), b1 = byte_at(d, size, 1), host = byte_at(d, size, 9);
	u->mode = b0 & 3;
	u->eof_mode = b0 >> 2 & 1;
	u->max = 1 + ((uint32_t)byte_at(d, size, 6) << 8 | byte_at(d, size, 7)) % 512;
	u->inflight_max = 1 + (host & 3) % 3;
	u->lease_cap = host & 4 ? TL_RBUF_LEASES + 4 : TL_RBUF_LEASES;
	struct framing *f = &u->hdr_frame;
	f->kind = u->mode == MODE_PREFIX || (u->mode == MODE_MIXED && (b1 & 0x20)) ? 2 : 1;
	for (int i = 0; i < 4; i++)
		f->delim[i] = byte_at(d, size, 2 + (size_t)i);
	f->fix = f->kind == 1 ? 1 + (b1 & 3u) : widths[b1 >> 2 & 3];
	f->counted = f->kind == 2 && (b1 & 0x10);
	size_t i = 10;
	u->nsizes = byte_at(d, size, i++) % 16;
	u->sizes = d + (i < size ? i : size);
	i += u->nsizes;
	u->nscript = byte_at(d, size, i++) % 32;
	u->script = d + (i < size ? i : size);
	i += u->nscript;
	/* Parts cut short by the input's end read as zeroes: keep them inside it. */
	if (i > size) {
		u->nsizes = u->sizes + u->nsizes <= d + size ? u->nsizes : 0;
		u->nscript = u->script + u->nscript <= d + size ? u->nscript : 0;
		i = size;
	}
	u->s = d + i;
	u->total = (uint32_t)(size - i < STREAM_MAX ? size - i : STREAM_MAX);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Every run must be a function of its input alone. */
	unsetenv("TL_SIM_SEED");
	unsetenv("TL_SIM_FAULTS");
	verbose = getenv("BUFIO_VERBOSE") != NULL;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run u;
	memset(&u, 0, sizeof u);
	u.err = NO_ERR;
	parse(&u, data, size);
	uint8_t b0 = byte_at(data, size, 0);

	tl_config cfg;
	tl_config_init(&cfg);
	cfg.driver = TL_DRIVER_SIM;
	cfg.sim_seed = 1 + (b0 >> 4);
	cfg.max_handles = 8;
	cfg.max_ops = 16;
	cfg.post_capacity = 1;
	cfg.max_undelivered = 1;
	cfg.events_per_turn = 16;
	cfg.room_waiters = 1;
	cfg.pipes = 1;
	cfg.pipe_size = 4096;
	cfg.pooled_buffers = 32;
	cfg.pooled_buffer_size = lease_sizes[byte_at(data, size, 8) % 18];
	cfg.handle_leases = u.lease_cap;
	int rc = tl_loop_new(&u.loop, &cfg);
	EXPECT(rc == 0, "tl_loop_new: %d", rc);
	connect_pair(&u);

	if (!(b0 & 8)) {
		u.mem = malloc(u.max); /* exactly max bytes: ASan sees a byte past them */
		EXPECT(u.mem, "malloc");
	}
	EXPECT(tl_rbuf_init(&u.r, u.loop, u.mem, u.max) == 0, "tl_rbuf_init");
	if (u.mode == MODE_PEEK) {
		const uint8_t *m;
		uint32_t len;
		EXPECT(tl_rbuf_next(&u.r, &m, &len) == -EINVAL, "next without framing");
	} else {
		set_framing(&u, &u.hdr_frame);
		if (u.fr.kind == 0) { /* a prefix wider than max: refused; use a delimiter */
			u.hdr_frame.kind = 1;
			u.hdr_frame.fix = 1 + (byte_at(data, size, 1) & 3u);
			set_framing(&u, &u.hdr_frame);
		}
	}
	EXPECT(tl_read_start(u.loop, u.srv, TOK_READ, &u.rd) == 0, "tl_read_start");

	int stop_sent = 0, idle = 0;
	for (;;) {
		send_more(&u);
		if (u.srv_closing ? u.rd_term && !u.winflight && u.srv_closed
				  : u.rd_term && !u.winflight)
			break;
		if (!u.eof_mode && !stop_sent && !u.srv_closing && u.woff == u.total &&
		    !u.winflight && u.fed == u.total) {
			EXPECT(tl_stop(u.loop, u.rd) == 0, "tl_stop");
			stop_sent = 1;
		}
		int n = turn(&u);
		/* A host that lets leases pile up takes messages anyway when
		 * nothing else happens (its stream paused at its lease cap). */
		if (n == 0 && verbose) {
			tl_loop_stats st;
			tl_loop_stats_get(u.loop, &st);
			fprintf(stderr, "idle turn: leases out %u, paused %u, held %u\n", st.leases_out,
				st.paused, tl_rbuf_leases(&u.r));
		}
		if (n == 0)
			idle++;
		else
			idle = 0;
		EXPECT(idle < 4, "the stream stalled: %u of %u bytes written, %u fed, %u leases held",
		       u.woff, u.total, u.fed, tl_rbuf_leases(&u.r));
		if (n == 0 || !(script_byte(&u) & 0x80))
			drain(&u);
		if (u.err != NO_ERR && !u.srv_closing) {
			/* The host closes a stream whose reader failed. */
			EXPECT(tl_close(u.loop, u.srv, TOK_CLOSE) == 0, "closing the stream");
			u.srv_closing = 1;
		}
	}

	if (!u.srv_closing) {
		drain(&u);
		EXPECT(u.fed == u.total && u.eof == u.eof_mode, "%u of %u bytes fed, end %d", u.fed,
		       u.total, u.eof);
	}
	if (u.mode == MODE_DELIM || u.mode == MODE_PREFIX) {
		/* The whole stream framed in one go: the same messages, and the
		 * same end (an error comes where its frame starts, whenever the
		 * bytes that show it arrived). */
		uint32_t frames, pos;
		int end = ref_whole(&u, &frames, &pos);
		EXPECT(frames == u.msgs && pos == u.pos && end == (u.err == NO_ERR ? 0 : u.err),
		       "%u messages up to %u then %d; the reference: %u up to %u then %d", u.msgs,
		       u.pos, u.err, frames, pos, end);
	}
	EXPECT(tl_rbuf_leases(&u.r) == 0, "%u leases held at the end", tl_rbuf_leases(&u.r));

	/* Close both ends; nothing may be left. */
	if (!u.srv_closing) {
		EXPECT(tl_close(u.loop, u.srv, TOK_CLOSE) == 0, "closing the stream");
		u.srv_closing = 1;
	}
	EXPECT(tl_close(u.loop, u.cli, TOK_CLOSE) == 0, "closing the client");
	for (int t = 0; t < 64 && (!u.srv_closed || !u.cli_closed || tl_alive(u.loop)); t++)
		turn(&u);
	EXPECT(u.srv_closed && u.cli_closed && !tl_alive(u.loop), "the pair did not close");
	tl_rbuf_fini(&u.r);
	EXPECT(tl_rbuf_leases(&u.r) == 0, "leases after tl_rbuf_fini");
	tl_loop_stats st;
	tl_loop_stats_get(u.loop, &st);
	EXPECT(st.leases_out == 0, "%u leases out after the end", st.leases_out);
	rc = tl_loop_close(u.loop);
	EXPECT(rc == 0, "tl_loop_close: %d", rc);
	free(u.mem);
	return 0;
}
