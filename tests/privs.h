/* tests/privs.h: what the environment lets a test do (other users, namespaces, mounts), and users of a test's own for per-user budgets. */
#ifndef TL_TESTS_PRIVS_H
#define TL_TESTS_PRIVS_H

#include <stddef.h>
#include <stdint.h>

/* 1 when err (a positive errno from a privileged step) is the environment
 * refusing it, which a test records as a skip with the reason: EPERM and
 * EACCES (no capability, a seccomp filter, a security module), EINVAL (the
 * kernel lacks the namespace kind, the id is not mapped in this user
 * namespace, the path is no mount point as a chroot's root is not), ENOSPC
 * and EUSERS (a namespace limit), ENOSYS (no such system call). Any other
 * error is the test's failure. tests/test_tlproxy.py keeps the same list. */
int tp_refused(int err);

/* Find n consecutive user ids that belong to nobody: mapped in this user
 * namespace, no passwd or group entry, no process of this PID namespace
 * holding any of them, no stats directory of theirs in /dev/shm. Picked at
 * random among high ids, so that runs at the same time (in other PID
 * namespaces too) do not meet. A per-user budget (pipe pages, locked
 * memory) measured as one of them counts only what the test itself holds.
 * Returns 0 and *first, or -ENOENT when none was found (why says so). */
int tp_own_uids(uint32_t n, uint32_t *first, char *why, size_t len);

/* Become uid in this process, with gid uid and no supplementary groups.
 * 0, or -errno of the step that failed. */
int tp_become(uint32_t uid);

/* Whether this process could become uid (tries it in a child): 1 yes; 0
 * when the environment refuses it (why gets the reason); -errno when the
 * attempt failed for another reason. */
int tp_can_become(uint32_t uid, char *why, size_t len);

#endif
