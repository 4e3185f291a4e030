/* tools/tlproxy/splice.h: when a forwarding direction of tlproxy switches between copying through leases and splicing through a kernel pipe (the rule), its per-direction state, its stat rows and the size of the pipe pool. */
#ifndef TLP_SPLICE_H
#define TLP_SPLICE_H

#include <stdint.h>

#include "turnloop.h"
#include "config.h"

/*
 * The rule, in one place (docs/TLPROXY.md, "Splice"). Each direction of a
 * connection on a listener with splice on starts by copying (tl_read_start
 * leases written to the other side), because most connections carry small
 * messages, for which a splice costs more system calls than a copy and
 * would hold a pipe of the pool while the connection waits.
 *  - copy -> splice: after TLP_SPL_ENTER bytes came in reads that each
 *    filled their lease, one after the other (the source had more waiting
 *    than a lease holds, again and again: a bulk flow), the direction
 *    stops its read and splices from then on.
 *  - splice -> copy: TLP_SPL_BACK_N splices in a row that each moved less
 *    than TLP_SPL_BACK bytes (the source had less than a lease waiting:
 *    the flow went interactive) give the pipe back and the direction
 *    copies again. One short splice is not enough: the tail of every
 *    burst is one, and a direction that stays in splicing mode between
 *    bursts does not pay for two switches per burst. So
 *    does a splice of a direction that ended at the idle deadline without
 *    taking anything while the other direction was still moving.
 *  - refused (the pool had no free pipe, -ENOBUFS): the direction copies,
 *    the refusal is counted (stat row splice[refused]), and it tries again
 *    only after TLP_SPL_RETRY more bytes were copied.
 */
#define TLP_SPL_ENTER (64u << 10)
#define TLP_SPL_BACK (16u << 10)
#define TLP_SPL_BACK_N 2
#define TLP_SPL_RETRY (8u << 20)
/* Most one splice takes (the pipe's size bounds it too). */
#define TLP_SPL_MAX (1u << 20)

/* The pipe size when not set otherwise: the runtime's default, where the
 * measurements found splicing cheapest (docs/PERFORMANCE.md). */
#define TLP_SPL_PIPE_SIZE (1u << 20)
/* Pipes per shard as root (no kernel budget): slots are descriptors made
 * only when needed, a pipe's memory is only the bytes in it. */
#define TLP_SPL_PIPES_ROOT 1024u

enum {
	TLP_SPL_OFF = 0,      /* this direction never splices (listener off, or no driver support) */
	TLP_SPL_COPY,         /* copying, counting full reads */
	TLP_SPL_STOPPING,     /* its read was stopped to splice: waiting for that read's end */
	TLP_SPL_SPLICING,     /* a splice is in flight */
};

/* One direction's state (source side s of a connection). */
struct tlp_spl {
	uint8_t mode;         /* TLP_SPL_* */
	uint8_t shorts;       /* short splices in a row */
	uint32_t streak;      /* bytes of full-lease reads in a row */
	uint64_t wait;        /* after a refusal: bytes to copy before trying again */
};

/* The stat rows of family "splice" (tlshard stats). */
enum {
	TLP_SPL_ST_TO_SPLICE = 0, /* directions switched from copying to splicing */
	TLP_SPL_ST_TO_COPY,       /* ... and back */
	TLP_SPL_ST_BYTES,         /* bytes moved by splices */
	TLP_SPL_ST_REFUSED,       /* splices the pipe pool refused (the direction copied) */
	TLP_SPL_ST_ROWS
};

/* Start a direction: copying if on, never splicing if not. */
static inline void tlp_spl_init(struct tlp_spl *d, int on)
{
	d->mode = on ? TLP_SPL_COPY : TLP_SPL_OFF;
	d->shorts = 0;
	d->streak = 0;
	d->wait = 0;
}

/* A read of n bytes into a lease of cap bytes while copying: 1 when the
 * direction is to switch to splicing now, else 0. */
int tlp_spl_after_read(struct tlp_spl *d, uint32_t n, uint32_t cap);
/* A splice moved `moved` bytes: 1 to splice on, 0 to go back to copying. */
int tlp_spl_after_splice(struct tlp_spl *d, uint64_t moved);
/* The pool refused a splice: copy until TLP_SPL_RETRY more bytes came. */
void tlp_spl_refused(struct tlp_spl *d);

/* Declare the "splice" family on rt (before the shards start); its first
 * value's index goes to *id. 0, or the runtime's negative errno. */
int tlp_spl_declare(tl_runtime *rt, int *id);

/* The pipe pool for the loops of nshards shards: *pipes and *pipe_size for
 * tl_config, from cfg's splice_pipes or, when 0, from the kernel's budget
 * (fs.pipe-user-pages-soft shared by the shards when not root). Sets
 * nothing when no listener of cfg splices. Returns how many pipes the
 * whole process may hold (for the descriptor limit). */
uint64_t tlp_spl_pool(const struct tlp_config *cfg, uint32_t nshards, uint32_t *pipes,
		      uint32_t *pipe_size);

#endif /* TLP_SPLICE_H */
