/* tools/tlhttp/fcache.h: a shard's cache of open files beneath the root, so that a file served again costs an fstat instead of openat2, fstat and close. */
#ifndef TLHTTP_FCACHE_H
#define TLHTTP_FCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "tlhttp/path.h"

/*
 * Used by one thread (a shard's). A name (from tlhttp_path_normalize) maps
 * to a descriptor opened with tlhttp_path_open, kept open between
 * requests:
 *  - every lookup fstats the descriptor, so size and modification time are
 *    the file's as it is now (a file written in place is served with its
 *    new length);
 *  - a name found more than TLHTTP_FCACHE_VALID_NS after it was opened is
 *    opened again, so that a file renamed over, removed or replaced (by a
 *    symbolic link too: the new open refuses it) is seen within that long;
 *  - an entry not used for a while (TLHTTP_FCACHE_IDLE_NS by default) is
 *    closed by tlhttp_fcache_sweep, so idle servers hold no descriptors
 *    for long.
 * Failed opens are not cached: a file that appears is found at once.
 * Names of TLHTTP_FCACHE_NAME_MAX bytes or more, and lookups whose slot is
 * taken by files being sent, bypass the cache (opened and closed as
 * before).
 */
#define TLHTTP_FCACHE_VALID_NS (1000000000ull)
#define TLHTTP_FCACHE_IDLE_NS (2000000000ull)
#define TLHTTP_FCACHE_NAME_MAX 232
#define TLHTTP_FCACHE_WAYS 4

struct tlhttp_fcache;

/* A cache of `sets` (a power of two, 1 .. 65536) times TLHTTP_FCACHE_WAYS
 * entries over root (the caller's, kept open by the caller). Returns 0 and
 * *out, -EINVAL or -ENOMEM. */
int tlhttp_fcache_new(struct tlhttp_fcache **out, int root, uint32_t sets);

/* Closes every descriptor the cache holds (none may be in use) and frees
 * it. NULL is a no-op. */
void tlhttp_fcache_free(struct tlhttp_fcache *c);

/*
 * tlhttp_path_open(root, name, f) through the cache; now is the caller's
 * monotonic clock in ns. On success *ref is what tlhttp_fcache_put takes
 * when the caller is done with f->fd (which it must not close itself).
 * Returns 0, or the negative errno of tlhttp_path_open or fstat (nothing
 * is then held).
 */
int tlhttp_fcache_get(struct tlhttp_fcache *c, const char *name, uint64_t now,
		      struct tlhttp_file *f, uint32_t *ref);

/* Done with the descriptor of a get: the cache keeps it, or closes it. */
void tlhttp_fcache_put(struct tlhttp_fcache *c, uint32_t ref, int fd);

/* Closes the entries not in use and unused for idle_ns or more by now
 * (tlhttp's --file-cache-idle; TLHTTP_FCACHE_IDLE_NS by default). Returns
 * how many it closed. */
uint32_t tlhttp_fcache_sweep(struct tlhttp_fcache *c, uint64_t now, uint64_t idle_ns);

/* Descriptors the cache holds open now. */
uint32_t tlhttp_fcache_open(const struct tlhttp_fcache *c);

#endif
