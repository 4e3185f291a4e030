/* tools/tlhttp/path.h: from a request path to an open regular file strictly beneath the served root. */
#ifndef TLHTTP_PATH_H
#define TLHTTP_PATH_H

#include <stddef.h>
#include <stdint.h>

struct open_how;

/*
 * Decodes and normalises a request path (tlhttp_req.path, or a whole
 * origin-form target: it stops at the first '?') into the relative name to
 * open beneath the root, NUL-terminated, in out[0..cap).
 *
 * The path must start with '/'. Percent-escapes are decoded; a '%' not
 * followed by two hex digits, and %00, are invalid. An encoded slash (%2F) is
 * refused as not found: no file name holds a '/', and decoding it into a
 * separator would give one file two names. Then, on the decoded segments,
 * as RFC 3986 5.2.4 does: "." is dropped, ".." removes the segment before it,
 * and empty segments ("//") are dropped; a ".." with nothing before it, which
 * would leave the root, is refused as not found, not clamped. So "%2e%2e" is
 * "..", judged here, before the kernel sees the name. The result has no
 * leading '/', keeps a trailing '/' when the path ends in '/', "." or ".."
 * (so that only a directory matches it), and is "." for the root itself.
 *
 * Returns the length of out (without the NUL), or
 *   -EINVAL        not a path: no leading '/', a bad escape, %00, a raw NUL
 *                  (answer 400), or path or out NULL.
 *   -ENOENT        an encoded slash, or ".." above the root (answer 404).
 *   -ENAMETOOLONG  the result, its NUL and one byte of room for building it
 *                  do not fit in cap bytes (answer 404).
 */
int tlhttp_path_normalize(const char *path, size_t n, char *out, size_t cap);

/*
 * Fills how with what every open beneath the root uses: O_RDONLY |
 * O_CLOEXEC | O_NOCTTY | O_NONBLOCK (a FIFO opens at once instead of waiting
 * for a writer, a terminal never becomes the controlling one), resolved with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS. So ".." that
 * would leave the root fails (EXDEV) and so does every symbolic link, even
 * one pointing inside the root (ELOOP): by design, one rule that needs no
 * reasoning about where a link points. For an io_uring IORING_OP_OPENAT2 that
 * must behave like tlhttp_path_open. Returns 0, -EINVAL if how is NULL.
 */
int tlhttp_open_how(struct open_how *how);

/*
 * Opens the directory to serve, for tlhttp_path_open (O_PATH | O_DIRECTORY |
 * O_CLOEXEC), and checks that openat2(2) works beneath it. Returns the
 * descriptor (the caller closes it), or a negative errno: -ENOSYS when the
 * kernel has no openat2 (Linux before 5.6) or a filter refuses it: there is
 * no fallback, since no other call can promise the same; serve nothing then.
 * -ENOTDIR, -ENOENT, -EACCES ... from opening dir; -EINVAL if dir is NULL.
 */
int tlhttp_root_open(const char *dir);

/* An opened file. */
struct tlhttp_file {
	int fd;        /* regular file, opened as tlhttp_open_how says; the caller closes it */
	int index;     /* 1: the name was a directory and this is its index.html */
	uint64_t size; /* bytes */
	int64_t mtime; /* last modification, whole seconds since the epoch */
};

/*
 * Opens name (from tlhttp_path_normalize) beneath root (from
 * tlhttp_root_open) with openat2 and fstat: a regular file is returned as it
 * is; a directory gives its index.html (itself opened the same way, and
 * required to be a regular file; there is no listing), with or without a
 * trailing '/' (no redirect is made: relative links in an index served for
 * "/dir" resolve against "/"); anything else is refused. A device node beneath the root is opened before fstat refuses it:
 * keep none there.
 *
 * Returns 0 with *f filled, or a negative errno, nothing left open:
 *   -ENOENT, -ENOTDIR   no such file (or a trailing '/' on a file)
 *   -EXDEV              the name leaves the root
 *   -ELOOP              a symbolic link on the way, inside or outside
 *   -ENODEV             not a regular file: FIFO, device, socket, or a
 *                       directory's index.html that is not a regular file
 *   -EACCES             permission denied
 *   -ENOSYS             no openat2 (see tlhttp_root_open)
 *   -EINVAL             name or f NULL, or root negative
 *   or any other error of openat2 or fstat.
 * tlhttp_path_status gives the status for each.
 */
int tlhttp_path_open(int root, const char *name, struct tlhttp_file *f);

/*
 * The status to answer a negative errno of this module with: 400 for
 * -EINVAL; 404 for -ENOENT, -ENOTDIR, -EXDEV, -ELOOP, -ENODEV, -ENXIO,
 * -EISDIR, -ENAMETOOLONG; 403 for -EACCES and -EPERM; 503 for -EMFILE,
 * -ENFILE, -ENOMEM; 500 for anything else (-ENOSYS included). Returns 200 for
 * err >= 0.
 */
int tlhttp_path_status(int err);

#endif
