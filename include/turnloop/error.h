/* turnloop/error.h: error codes, their text, and the one-line detail of a failed call. */
#ifndef TURNLOOP_ERROR_H
#define TURNLOOP_ERROR_H

#include <errno.h>

/* The key codes that tls.h returns for certificates (-ENOKEY, -EKEYEXPIRED,
 * -EKEYREVOKED, -EKEYREJECTED) are Linux's; where <errno.h> has none of them
 * (Windows, the BSDs) they get values of turnloop's own, above every errno
 * there, and tl_strerror names them. */
#if !defined(ENOKEY) && !defined(EKEYEXPIRED) && !defined(EKEYREVOKED) && !defined(EKEYREJECTED)
#define TL_OWN_KEY_CODES 1
#define ENOKEY 32001
#define EKEYEXPIRED 32002
#define EKEYREVOKED 32003
#define EKEYREJECTED 32004
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every turnloop function that can fail returns a negative errno on failure
 * (turnloop.h lists the few that cannot fail), converted once where the
 * system call is made. What the codes mean when turnloop returns them:
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
 *
 * The text of a code is tl_strerror(code). Where a call can say more than
 * its code (which CPU of a plan is not allowed, which check a stats region
 * failed, which shard stopped a runtime and why), its declaration says
 * "Detail": the call leaves one line for the calling thread, read with
 * tl_error_detail() right after it.
 */

/* Text for a code returned by turnloop (negative errno); never NULL. Any
 * thread. */
const char *tl_strerror(int code);

/*
 * The calling thread's error detail: one line (no newline) that the last
 * call marked "Detail" left when it failed, "" when it did not fail or had
 * nothing to add. Each such call clears it on entry, so a detail never
 * belongs to an older failure of that call; calls without "Detail" leave it
 * alone. The string is the thread's, valid until its next call marked
 * "Detail"; never NULL. Any thread.
 */
const char *tl_error_detail(void);

#ifdef __cplusplus
}
#endif
#endif
