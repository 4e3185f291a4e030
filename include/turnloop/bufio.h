/* turnloop/bufio.h: buffered streams on leases: a reader that frames messages without copying them, a writer that coalesces a pass's replies into one write; and a file written whole, put in place by one rename (docs/BUFIO.md). */
#ifndef TURNLOOP_BUFIO_H
#define TURNLOOP_BUFIO_H

#include <stdint.h>
#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Two small objects on a loop's public calls, each embedded in the host's
 * own per-connection state (their structs are here for that; read and write
 * their fields only through the functions below):
 *
 *  - tl_rbuf, a reader. The host starts the stream's reads itself
 *    (tl_read_start, or tl_read_pooled) and hands each of their
 *    completions to tl_rbuf_feed(). The reader yields whole messages, framed
 *    by a delimiter or by a length prefix, as views (a pointer and a
 *    length): a message inside one lease points into that lease (no copy);
 *    only a message that spans leases is assembled, into the reader's one
 *    buffer, whose size is the largest message it takes. A parser that
 *    frames its own messages (RESP, HTTP) uses tl_rbuf_peek() and
 *    tl_rbuf_consume() instead: "what is there?", "I used k bytes".
 *  - tl_wbuf, a writer. Appends go into a fixed ring; tl_wbuf_flush() sends
 *    everything appended since the last flush with one tl_write (or one
 *    tl_writev of the ring's two halves); bytes appended while that write
 *    is out wait for the next flush after its completion. A full ring is
 *    -ENOBUFS, and the write's completion, handed to tl_wbuf_on_write(),
 *    says how much room came back. Writers on a dirty list (tl_wbuf_list,
 *    one per loop or shard) are all flushed by one tl_wbuf_flush_all() at
 *    the end of a pass: every handler appends, and at most one write per
 *    connection per pass goes out.
 *
 * Neither allocates after its init, and neither allocates at all when the
 * host gives it its memory: a server gives each connection's reader and
 * writer their buffers from a table it made at setup. Both belong to the
 * loop's thread. No user code runs inside them, and they submit nothing
 * but the writer's writes (with the host's token).
 */

/* ---- Reader ---- */

/* Leases a reader holds at most: the default per-stream lease cap
 * (tl_config.handle_leases), so a stream whose reader is full pauses
 * (contract 4.10) before tl_rbuf_feed() would refuse a lease. */
#define TL_RBUF_LEASES 16

/* tl_rbuf_set_prefix() flag: the length counts the prefix's own bytes too
 * (a frame is `length` bytes on the wire, not prefix + length). */
#define TL_RBUF_PREFIX_COUNTED 0x1

/* A reader. Fields are the library's; the host only embeds it. */
typedef struct tl_rbuf {
	tl_loop *loop;
	uint8_t *buf;         /* the assembly buffer: cap bytes */
	uint32_t cap;         /* the largest frame (and the most bytes peek assembles) */
	uint32_t aoff, alen;  /* buf[aoff..alen): bytes held, the stream's next ones */
	uint32_t scan;        /* of those, how many are known to end no delimited frame */
	uint32_t qbytes;      /* unconsumed bytes of the leases held */
	uint8_t kind;         /* framing: 0 none, 1 delimiter, 2 prefix */
	uint8_t fixlen;       /* delimiter or prefix bytes */
	uint8_t flags;        /* TL_RBUF_PREFIX_COUNTED */
	uint8_t own;          /* buf was allocated by tl_rbuf_init */
	uint8_t delim[4];
	uint8_t ended;        /* the stream's end (TL_F_EOF) was fed */
	int err;              /* sticky error, 0 while none */
	uint32_t qhead, nq;   /* the leases held, oldest first (a ring) */
	uint32_t soff;        /* bytes of the oldest lease consumed */
	struct {
		uint8_t *data;
		uint32_t id, len;
	} q[TL_RBUF_LEASES];
} tl_rbuf;

/*
 * Make r a reader of max bytes (1 .. 2^30) for the stream reads of loop,
 * with no framing yet (tl_rbuf_set_delim or tl_rbuf_set_prefix set one;
 * peek and consume work without). buf: max bytes of the caller's, kept
 * until tl_rbuf_fini (the reader allocates nothing); NULL: the reader
 * allocates max bytes now, once, and frees them at tl_rbuf_fini. max is the
 * largest frame the reader takes, delimiter or prefix included, and the
 * most bytes tl_rbuf_peek() hands out at once. 0, -EINVAL (r or loop NULL,
 * max out of range), -ENOMEM (buf NULL and the allocation failed).
 */
int tl_rbuf_init(tl_rbuf *r, tl_loop *loop, void *buf, uint32_t max);

/* Release every lease r holds, free its buffer if tl_rbuf_init allocated
 * it; r is then no reader until tl_rbuf_init. Views r gave end with it.
 * NULL, or a zeroed tl_rbuf, is a no-op. */
void tl_rbuf_fini(tl_rbuf *r);

/*
 * Frame the messages of r from now on by the delimiter delim[0..len) (1 to
 * 4 bytes, copied: "\n", "\r\n", "\r\n\r\n", a 0 byte). A message is the
 * bytes before the delimiter's first occurrence; tl_rbuf_next() gives it
 * without the delimiter, which it consumes. A frame (message and
 * delimiter) longer than r's max is -EMSGSIZE. The framing may change
 * between messages (a head by lines, then raw bytes): the bytes held are
 * framed by the new one. 0, -EINVAL (r or delim NULL, len 0 or above 4).
 */
int tl_rbuf_set_delim(tl_rbuf *r, const void *delim, uint32_t len);

/*
 * Frame the messages of r from now on by a length prefix of bytes (1, 2 or
 * 4) bytes, big-endian: a frame is the prefix and then length bytes, or,
 * with TL_RBUF_PREFIX_COUNTED in flags, length bytes in all, the prefix
 * included. tl_rbuf_next() gives the bytes after the prefix. A frame longer
 * than r's max is -EMSGSIZE as soon as its prefix has arrived; a counted
 * length shorter than the prefix itself is -EBADMSG. May change between
 * messages, as tl_rbuf_set_delim. 0, -EINVAL (r NULL, bytes not 1, 2 or 4,
 * an unknown flag, max below bytes).
 */
int tl_rbuf_set_prefix(tl_rbuf *r, uint32_t bytes, uint32_t flags);

/*
 * Hand r one completion of its stream's pooled reads (tl_read_start,
 * tl_read_pooled), in the order tl_turn returned them: r takes the lease
 * of one with TL_F_LEASE (its bytes become the stream's next, after those
 * r holds) and gives it back to the loop with tl_lease_release once every
 * byte of it is consumed; one with TL_F_EOF marks the stream's end. Other
 * read completions without bytes (a stop, a cancel, an error) change
 * nothing: they are the host's to act on. Views already given stay valid.
 * After r's error (below) a lease is given back at once. Returns 0 when r
 * took the completion (the lease is r's now, whatever comes), or, the
 * lease staying the caller's: -EINVAL (r or c NULL, c not TL_K_READ, a
 * lease with result <= 0, bytes without a lease: a read into the host's
 * own buffer), -ENOBUFS (r holds TL_RBUF_LEASES leases: only on a stream
 * whose lease cap is above that, while its host takes no message).
 */
int tl_rbuf_feed(tl_rbuf *r, const tl_completion *c);

/*
 * The next whole message, by r's framing: *msg and *len get a view of it.
 * It points into the lease that holds it when one does (no copy), else
 * into r's buffer, where the message was assembled from the leases it
 * spans (as few bytes as that takes: only that message's). The view stays
 * valid until the next tl_rbuf_next, tl_rbuf_peek, tl_rbuf_consume or
 * tl_rbuf_fini on r (tl_rbuf_feed and the framing setters leave it be);
 * its bytes are r's, not to be changed.
 *
 * Returns 1 with a message; 0 when r holds no whole one (feed the next
 * read; after the stream's end, none will come); or a negative errno, after
 * which r is done: it has given back its leases and dropped its bytes, and
 * every later call returns the same error (close the stream, then
 * tl_rbuf_fini):
 *   -EMSGSIZE  a frame longer than r's max (delimiter or prefix included)
 *   -EBADMSG   a counted length prefix shorter than the prefix
 *   -EPROTO    the stream ended inside a message (the peer closed mid-frame;
 *              the bytes held, tl_rbuf_buffered() of them before this call,
 *              are dropped)
 *   -EINVAL    (not sticky) r, msg or len NULL, or r has no framing.
 * Once it returns 0 or an error, r holds no lease: a stream waiting for the
 * rest of a message pins none of the loop's pooled buffers, and a lease
 * goes back to the loop at the first call on r after the one that returned
 * its last bytes, or at once when they were copied.
 */
int tl_rbuf_next(tl_rbuf *r, const uint8_t **msg, uint32_t *len);

/*
 * Raw access, for a parser that frames its own messages: *data gets a view
 * of n >= min contiguous bytes, the stream's next unconsumed ones, and n is
 * returned. They lie in a lease when the lease holds min of them (no copy;
 * n is then what that lease has left), else r assembles exactly min bytes
 * into its buffer (n is at least min: what that buffer holds). min 0 is 1.
 * The view is valid as tl_rbuf_next's. A parser that finds no whole message
 * in the n bytes asks again for more: the size it now knows the message
 * needs, or a lower bound of it. Asking for n + 1 works too, but while r
 * assembles (its buffer holds the message's start) each such call copies
 * one more byte, so a parser that re-parses from the start on each call
 * goes quadratic in the message's length; 0 means r holds fewer than min
 * bytes (feed the next read),
 * and r then holds no lease. Errors as tl_rbuf_next's: -EMSGSIZE for min
 * above r's max, -EPROTO for fewer than min bytes at the stream's end when
 * some are held; -EINVAL (not sticky) for r or data NULL. With framing set,
 * peek and tl_rbuf_next may be mixed: both take the stream's next bytes.
 */
int tl_rbuf_peek(tl_rbuf *r, uint32_t min, const uint8_t **data);

/* Consume the first n bytes of the last view tl_rbuf_peek gave (n <= its
 * length); a lease whose bytes are all consumed goes back to the loop now.
 * The view ends. 0, -EINVAL (r NULL, n above the bytes the view had). */
int tl_rbuf_consume(tl_rbuf *r, uint32_t n);

/* The stream's bytes r holds and has not handed out as consumed: those of
 * its buffer and of its leases. 0 for NULL. */
uint32_t tl_rbuf_buffered(const tl_rbuf *r);

/* How many leases r holds now (0 .. TL_RBUF_LEASES). 0 for NULL. */
uint32_t tl_rbuf_leases(const tl_rbuf *r);

/* ---- Writer ---- */

typedef struct tl_wbuf tl_wbuf;

/* A dirty list: the writers with bytes to send, for one tl_wbuf_flush_all
 * per pass. Zeroed, it is empty. One per loop (per shard with the sharded
 * runtime), on that loop's thread. */
typedef struct tl_wbuf_list {
	tl_wbuf *first;
} tl_wbuf_list;

/* A writer. Fields are the library's; the host only embeds it. Its bytes
 * are the ring's region A, buf[a0..a1), then, once it wrapped, region B,
 * buf[0..b1), which grows toward a0. */
struct tl_wbuf {
	tl_loop *loop;
	tl_handle h;
	uint64_t token;
	uint8_t *buf;
	uint32_t cap;
	uint32_t a0, a1, b1;
	uint8_t wrapped, own, told;
	int err;              /* sticky error, 0 while none */
	uint32_t flight;      /* bytes of the write in flight (0: none) */
	uint32_t flight_b;    /* of which region B's */
	uint32_t resv;        /* bytes the last tl_wbuf_reserve offered */
	tl_op op;             /* the write in flight */
	tl_wbuf_list *list;
	tl_wbuf *next, **pprev; /* on list while pprev is set */
};

/*
 * Make w a writer of cap bytes (1 .. 2^30) on stream h of loop. buf: cap
 * bytes of the caller's, kept until tl_wbuf_fini (nothing is allocated);
 * NULL: w allocates cap bytes now, once. Its writes carry token (their
 * completions are TL_K_WRITE with it: hand each to tl_wbuf_on_write). Keep
 * cap at or below the stream's write cap (tl_config.handle_write_bytes,
 * 1 MiB by default) so that its writes never pause the stream's reads. w is
 * on no dirty list (tl_wbuf_set_list). 0, -EINVAL (w or loop NULL, h
 * TL_HANDLE_NONE, cap out of range), -ENOMEM.
 */
int tl_wbuf_init(tl_wbuf *w, tl_loop *loop, tl_handle h, void *buf, uint32_t cap,
		 uint64_t token);

/*
 * End w: off its dirty list, its buffer freed if tl_wbuf_init allocated it,
 * bytes not yet written dropped (tl_wbuf_pending says how many). Not while
 * its write is in flight, since the write's bytes are in w's buffer: close
 * (or cancel) and hand the write's terminal to tl_wbuf_on_write first; a
 * stream's Closed comes after it. 0, -EBUSY (a write in flight: nothing
 * changed). NULL, or a zeroed tl_wbuf, is 0.
 */
int tl_wbuf_fini(tl_wbuf *w);

/* Put w on dirty list l (NULL: on none; it leaves the one it was on). While
 * on one, every append with no write in flight, and every write completion
 * that leaves bytes behind, puts w on l for the next tl_wbuf_flush_all.
 * 0, -EINVAL (w NULL). */
int tl_wbuf_set_list(tl_wbuf *w, tl_wbuf_list *l);

/*
 * Append data[0..len) to w, all of it or none of it (copied; w's bytes go
 * out at the next flush). 0; -ENOBUFS when fewer than len bytes are free
 * (nothing appended: wait for tl_wbuf_on_write's room); -EINVAL (w NULL,
 * data NULL with len > 0); or w's error (below).
 *
 * Errors. A write of w that fails (its terminal's result, -ECANCELED
 * included) or a flush the loop refuses for another reason than -ENOBUFS
 * breaks w: its bytes are dropped, it writes no more, and the error is
 * returned once, by the call that met it or, when that was
 * tl_wbuf_flush_all, by w's next append, reserve, printf or flush; every
 * call after that returns -EPIPE. The same holds for tl_wbuf_reserve,
 * tl_wbuf_printf and tl_wbuf_flush.
 */
int tl_wbuf_append(tl_wbuf *w, const void *data, uint32_t len);

/*
 * Format into w as snprintf would, without the terminating 0: the bytes
 * appended (>= 0), all or nothing. The text goes in one piece: it needs one
 * byte more than its length free in one run of the ring (-ENOBUFS
 * otherwise). -EINVAL (w or fmt NULL, a format snprintf refuses). Formats
 * that make the C library allocate (floating point with a large
 * precision) do so here too.
 */
int tl_wbuf_printf(tl_wbuf *w, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
	__attribute__((format(printf, 2, 3)))
#endif
	;

/*
 * Reserve at least min contiguous bytes of w (for a serialiser that writes
 * in place): *out gets where, and the size of that run (>= min) is
 * returned. Nothing is appended until tl_wbuf_commit, which must come
 * before any other call on w. -ENOBUFS when no run of min bytes is free
 * (the ring may have that many free in two pieces: tl_wbuf_append takes
 * those), -EINVAL (w or out NULL), or w's error as tl_wbuf_append.
 */
int tl_wbuf_reserve(tl_wbuf *w, uint32_t min, uint8_t **out);

/* Append the first len bytes of the run the last tl_wbuf_reserve gave
 * (len <= its size; 0 appends nothing). The reservation ends. 0, -EINVAL
 * (w NULL, len above the reservation, no reservation). */
int tl_wbuf_commit(tl_wbuf *w, uint32_t len);

/*
 * Send every byte appended to w and not yet sent: one tl_write, or one
 * tl_writev of two segments when they wrap around the ring. Returns 1 (a
 * write went out: its completion is TL_K_WRITE with w's token), 0 (nothing
 * to send, or a write already in flight: what was appended meanwhile goes
 * at the next flush after its completion), -ENOBUFS (the loop's op table
 * is full: nothing changed, flush again later), -EINVAL (w NULL), or w's
 * error as tl_wbuf_append (the loop's refusal of the write breaks w).
 */
int tl_wbuf_flush(tl_wbuf *w);

/*
 * Flush every writer on l, each with one write at most (tl_wbuf_flush),
 * and empty l. A writer the loop refused with -ENOBUFS stays on l for the
 * next call; one it refused otherwise is broken, its error kept for its
 * next call. Returns the number of writes issued (>= 0), -EINVAL (l NULL).
 *
 * Where to call it: after handling a batch of completions (a plain loop:
 * after each tl_turn's batch; the sharded runtime: in cfg.on_pass, which
 * runs once per pass after the handlers, with a tl_wbuf_list per shard,
 * tl_shard_set_data's pointer a good home). Every handler of the pass
 * appends; each connection's replies of the pass leave in one write.
 */
int tl_wbuf_flush_all(tl_wbuf_list *l);

/*
 * Hand w the terminal of its write (TL_K_WRITE, w's token). On success the
 * written bytes' room comes back, and if bytes were appended meanwhile w
 * goes on its dirty list (flush it yourself without one). Returns the bytes
 * now free for tl_wbuf_append (what tl_wbuf_room says: > 0 after a write,
 * so a host that met -ENOBUFS may go on), or the write's error, once, as
 * tl_wbuf_append says (-ECANCELED after a close, -EPIPE, -ECONNRESET,
 * ...); -EINVAL (w or c NULL, c not the terminal of w's write in flight:
 * nothing changed).
 */
int tl_wbuf_on_write(tl_wbuf *w, const tl_completion *c);

/* Bytes tl_wbuf_append would take now (0 for NULL or a broken w). */
uint32_t tl_wbuf_room(const tl_wbuf *w);

/* Bytes appended to w and not yet known written (in flight included); 0
 * for NULL. 0 after a write's completion means every byte is out: a host
 * may shut the stream down. */
uint32_t tl_wbuf_pending(const tl_wbuf *w);

/*
 * A file written whole: tl_fout. Its bytes go to a temporary file beside
 * path ("<path>.tmp"); tl_fout_finish() writes the rest, fsyncs, closes and
 * renames it over path on the blocking pool, so that a reader of path
 * sees the old file or the whole new one, never a part (a snapshot, a
 * SAVE). The bytes gather in the caller's buffer and go to the file with
 * write(2) on the caller's thread whenever tl_fout_reserve() finds too
 * little room: a copy into the page cache, some microseconds a megabyte
 * (on a filesystem where writes block, write from a pool job instead).
 * Nothing is allocated. Not on Windows (buffered streams are not built
 * there, docs/WINDOWS.md).
 */
typedef struct tl_fout {
	int fd;         /* the temporary file; -1 when none is open (or buf NULL: zeroed) */
	int err;        /* sticky: the first error (negative errno), 0 while none */
	uint8_t *buf;
	uint32_t cap, len, resv;
	uint64_t bytes; /* written to the file so far */
	char path[4096], tmp[4100];
} tl_fout;

/*
 * Begin a file that will replace path (below 4096 bytes): "<path>.tmp" is
 * created or truncated now, with one open(2) on the caller's thread (mode
 * 0644, close-on-exec). buf: cap bytes (at least 1) of the caller's, kept
 * until the end; the largest piece tl_fout_reserve() hands out. 0,
 * -EINVAL (f, path or buf NULL, cap 0, path too long), or open's error
 * (-ENOENT for a missing folder, -EACCES, ...; f then holds no file).
 */
int tl_fout_open(tl_fout *f, const char *path, void *buf, uint32_t cap);

/*
 * At least min contiguous bytes for the caller to write in place at *out,
 * the size of that run returned (>= min); the buffer's bytes are written
 * to the file first if fewer than min are free. Nothing is added until
 * tl_fout_commit(). -EINVAL (f or out NULL, min above cap, no file open),
 * or the first write error, sticky (-ENOSPC, -EIO, ...: every later call
 * returns it, and tl_fout_finish() removes the temporary file).
 */
int tl_fout_reserve(tl_fout *f, uint32_t min, uint8_t **out);

/* Add the first len bytes of the run the last tl_fout_reserve() gave.
 * 0, -EINVAL (f NULL, len above that run). */
int tl_fout_commit(tl_fout *f, uint32_t len);

/*
 * End the file on the pool (tl_blocking, TL_POOL_BOUNDED): the buffer's
 * bytes written, fsync, close, and the rename over path; after an error
 * (the sticky one, or any of these), the temporary file is removed and
 * path left as it was. Its completion is TL_K_POOL with token: result 0,
 * or the first error. f and its buffer must stay until then, untouched.
 * Returns 0 (*op set), -EINVAL (f, loop or op NULL, no file open), or
 * tl_blocking's refusal (nothing started: tl_fout_abort() ends the file).
 */
int tl_fout_finish(tl_fout *f, tl_loop *loop, uint64_t token, tl_op *op);

/* Drop the file: closed and the temporary file removed, path untouched
 * (not while a tl_fout_finish() job runs). A no-op on a finished f, one
 * whose open failed, a zeroed one, or NULL. */
void tl_fout_abort(tl_fout *f);

#ifdef __cplusplus
}
#endif

#endif
