/* turnloop/error.h: error codes and their text. */
#ifndef TURNLOOP_ERROR_H
#define TURNLOOP_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every turnloop function returns 0 or a count on success and a negative
 * errno on failure, converted once where the system call is made:
 *
 *   -EINVAL     bad argument, zero/oversized limit, wrong handle kind,
 *               operation on a closing handle (including a second close)
 *   -ENOENT     handle or op id from another loop, stale, or never issued
 *   -EALREADY   cancel/stop of an op whose cancellation was already asked
 *   -ENOBUFS    a fixed table, ring, queue or ceiling is full
 *   -EAGAIN     would block: retry after a turn
 *   -ECANCELED  the terminal result of a cancelled op
 *   -ETIMEDOUT  a deadline passed
 *   -ENOTSUP    not supported by this driver or platform
 *   -EPIPE      loop, poster or pool endpoint closed
 *   -EBUSY      the loop still has live handles
 *   other       the OS errno, negated, unchanged
 */

/* Text for a code returned by turnloop (negative errno); never NULL. */
const char *tl_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
