/* turnloop/resp.h: the Redis protocol's requests (RESP arrays of bulk strings) read from a tl_rbuf without copying, found in a command table, and the number lines and bulk strings of its replies (docs/BUFIO.md, "The Redis protocol's requests"). */
#ifndef TURNLOOP_RESP_H
#define TURNLOOP_RESP_H

#include <stddef.h>
#include <stdint.h>
#include "turnloop/bufio.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every Redis client sends a command as an array of bulk strings:
 * "*<count>\r\n" and then, per argument, "$<length>\r\n<bytes>\r\n". A
 * tl_resp reads such commands from a connection's reader (tl_rbuf) and
 * gives each as views of its arguments: an argument inside one lease points
 * into it, and a command spanning leases is assembled once by the reader
 * (tl_rbuf_peek, asked for the bytes the command is known to need, so a long
 * command is not re-parsed byte by byte). The commands of one read are
 * parsed from one view and the reader is told once, at tl_resp_consume,
 * how many bytes they used. Inline commands (a bare line) are not taken.
 * An empty line ("\r\n", which redis-cli --pipe sends) is skipped.
 *
 * A tl_resp lives in the host's per-connection state, on the reader's
 * thread; it allocates nothing and submits nothing.
 *
 * The loop of a host:
 *
 *     while ((rc = tl_resp_next(&s, av, &ac)) > 0) {
 *         if (!run(av, ac)) break;  // stalled: the same command comes again
 *         tl_resp_done(&s);
 *     }
 *     tl_resp_consume(&s);          // the done commands' bytes go back
 *     if (rc < 0) ... close, after tl_resp_error_reply(rc) if not NULL
 */

/* An argument: n bytes at p, in the reader's memory. */
typedef struct tl_resp_arg {
	const uint8_t *p;
	uint32_t n;
} tl_resp_arg;

/* A request reader. Fields are the library's; the host only embeds it. */
typedef struct tl_resp {
	tl_rbuf *rd;
	const uint8_t *p;   /* the reader's view */
	uint32_t n;         /* its length */
	uint32_t off;       /* of it, the bytes of the commands done */
	uint32_t used;      /* the command given last: its length (0: none given) */
	uint32_t need;      /* bytes the next command needs at least, once off is consumed */
	uint32_t max_args, max_len;
	int err;            /* sticky error, 0 while none */
} tl_resp;

/*
 * Make s a reader of commands from rd (a reader made by tl_rbuf_init, whose
 * max is the longest command taken; no framing set on it): commands of at
 * most max_args arguments (1 .. 2^20) of at most max_len bytes each (0 ..
 * 2^30). s keeps rd until it is made again. 0, -EINVAL (s or rd NULL,
 * max_args or max_len out of range).
 */
int tl_resp_init(tl_resp *s, tl_rbuf *rd, uint32_t max_args, uint32_t max_len);

/*
 * The next command: av[0 .. *ac) get views of its arguments (av holds
 * max_args). The views stay valid until tl_resp_consume, or the next
 * tl_resp_next after tl_resp_done. Until tl_resp_done, each call gives the
 * same command again (a host that could not finish it asks for it later).
 * Returns 1 with a command; 0 when no whole one is held (after
 * tl_resp_consume, wait for the next read: the reader then holds no
 * lease); or a negative errno, after which s gives the same error each
 * call (send tl_resp_error_reply's line if it has one, then close):
 *   -EBADMSG   the bytes are no array: an inline command, or noise
 *   -ERANGE    the array's count is not a number of 1 .. max_args
 *   -EILSEQ    an argument's length is not a number of 0 .. max_len, or its
 *              bytes do not end in "\r\n"
 *   -EMSGSIZE  the command is longer than the reader's max
 *   -EPROTO    the stream ended inside a command
 *   (other)    the reader's own error (tl_rbuf_peek)
 *   -EINVAL    (not sticky) s, av or ac NULL, or s not made.
 */
int tl_resp_next(tl_resp *s, tl_resp_arg *av, uint32_t *ac);

/* The command tl_resp_next gave last is finished: the next call gives the
 * one after it. Its bytes stay in the reader until tl_resp_consume. No
 * command given: a no-op. NULL: a no-op. */
void tl_resp_done(tl_resp *s);

/* Give the reader back the bytes of the commands done (tl_rbuf_consume);
 * every view ends. Call it when leaving the loop, whatever ended it: a
 * command not done stays in the reader, and a lease all of whose bytes were
 * done goes back to the loop now. NULL: a no-op. */
void tl_resp_consume(tl_resp *s);

/* The error line a Redis server sends its client for an error code of
 * tl_resp_next ("-ERR Protocol error: ...\r\n") or tl_resp_command_find
 * ("-ERR unknown command\r\n", "-ERR wrong number of arguments\r\n"), or
 * NULL for a code with no one to tell (-EPROTO: the client is gone) or one
 * that is neither's. */
const char *tl_resp_error_reply(int code);

/* An entry of a command table: a host's table begins each of its entries
 * with one (see tl_resp_command_find). */
typedef struct tl_resp_command {
	char name[16];      /* in lower case, 1 to 15 bytes, none 0, then 0s: "get" */
	int32_t arity;      /* the arguments, the name included: exactly arity, or
	                     * (negative) at least -arity; Redis's own convention */
} tl_resp_command;

/*
 * Which command of table av[0 .. ac) is: table holds n entries of stride
 * bytes each (the host's struct, a tl_resp_command first), av[0] its name,
 * compared without case (A-Z as a-z) as two words against each entry's 16
 * bytes. Returns the entry's index; -ENOENT when no entry has that name
 * (ac 0, or a name of 16 bytes or more, too), -EDOM when one has but ac is
 * not its arity (tl_resp_error_reply gives each its line); -EINVAL when av
 * or table is NULL, or stride is below sizeof(tl_resp_command).
 */
int tl_resp_command_find(const tl_resp_arg *av, uint32_t ac, const void *table, uint32_t n, size_t stride);

/* Write the bulk string "$<n>\r\n<p[0..n)>\r\n" at out (n + 15 bytes at
 * most). Returns its length. */
uint32_t tl_resp_bulk(uint8_t *out, const void *p, uint32_t n);

/* Write "<type><v>\r\n" at out (23 bytes or fewer: a RESP integer ':',
 * a bulk length '$', an array count '*'). Returns its length. */
uint32_t tl_resp_num(uint8_t *out, char type, int64_t v);

/* Read the whole of p[0..n) as a decimal int64 (an optional '-', then
 * digits: what INCR takes): 0 and *v, or -EINVAL (not such a number, or
 * p or v NULL), -ERANGE (outside int64). */
int tl_resp_num_parse(const uint8_t *p, uint32_t n, int64_t *v);

#ifdef __cplusplus
}
#endif

#endif
