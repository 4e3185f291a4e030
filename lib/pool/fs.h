/* lib/pool/fs.h: a typed file request as the pool and the driver carry it, shared by fs.c and fs_native.c. */
#ifndef TL_POOL_FS_H
#define TL_POOL_FS_H

#include <stdint.h>
#include <sys/stat.h>
#include "job.h"

/* A file request, in its job record's data words. */
struct tl_fs_job {
	const char *path, *path2; /* into inl, or the caller's */
	void *buf;                /* caller's buffer or out array */
	void *user_out;           /* stat: where the loop copies st */
	uint64_t off;
	uint32_t len;
	int fd;
	int flags;
	unsigned mode;
	uint8_t code;             /* enum tl_fs_req */
	int16_t redo;             /* native: the result the pool runs again (driver fs_route), or 0 */
	char inl[TL_FS_INLINE_PATH];
	union {
		struct stat st;    /* pool: what stat/fstat wrote */
#ifndef _WIN32
		struct statx stx;  /* native: what the kernel wrote */
#endif
	};
};
_Static_assert(sizeof(struct tl_fs_job) <= sizeof(((struct tl_job *)0)->data), "tl_fs_job fits");

static inline struct tl_fs_job *tl__fs_job(struct tl_job *j)
{
	return (struct tl_fs_job *)j->data;
}

#ifndef _WIN32
/* The driver's path (fs_native.c, io_uring's opcodes): not in the Windows
 * build, whose requests all run on the pool. */

/* Run the filled request j (its ops already the file requests') natively
 * through the loop's driver: 0 accepted (*op set, the record is the op's
 * until its terminal), -ENOTSUP when the driver has no native path for it
 * (nothing happened: the caller submits j to the pool as usual), or another
 * negative errno (refused; the record is given back). */
int tl__fs_native_submit(tl_loop *loop, struct tl_pool_loop *pl, struct tl_job *j,
			 uint64_t token, tl_op *op);
/* The file requests' tl_job_ops entries for the driver's path. */
void tl__fs_native_result(struct tl_job *j, int64_t res);
int tl__fs_native_retry(tl_loop *loop, struct tl_opslot *op, struct tl_job *j, int64_t res);
#endif

#endif
