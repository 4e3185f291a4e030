/* shards/stats_reader.h: the live stats reader's two halves (internal): stats.c reads the region's format on every platform; stats_open.c (POSIX) and stats_open_win.c (Windows) find a process's region, check whose it is and that its writer lives, copy bytes out of it and let it go. */
#ifndef TL_SHARDS_STATS_READER_H
#define TL_SHARDS_STATS_READER_H

#include <stddef.h>
#include <stdint.h>

#include "stats_region.h"

struct tl_stats_reader {
#ifdef _WIN32
	const unsigned char *view; /* the region, mapped read-only (NULL: none) */
	uint64_t size;             /* bytes of the view */
	HANDLE proc;               /* the writer, held from the open on (NULL: none) */
	char map_name[64];         /* its mapping's name (TL__STATS_WIN_NAME_FMT) */
#else
	int fd;
	int pidfd;            /* -1: none (a path reader, or no pidfd support) */
#endif
	int pid;              /* 0 for a path reader */
	uint64_t start_time;  /* the target's, checked against the header */
	uint32_t shards, stride, header_size, capacity, families_off, labels_off;
	char name[64];        /* for messages: "pid <pid>" or the path's last part */
};

/* ---- stats.c: the format, the same everywhere ---- */

/* Write a message into err (if any). */
void tl__stats_say(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Read the header into *h and check it against the region's size; on
 * success the reader's shape is set from it. *gone (if asked): the
 * platform's word that a pid reader's process has taken its region away.
 * 0 or a negative errno, with err saying what failed. */
int tl__stats_load(tl_stats_reader *r, struct tl__stats_hdr *h, int *gone, char *err,
		   size_t errlen);

/* ---- stats_open.c, stats_open_win.c: the platform's part ---- */

/* A reader that holds nothing yet. */
void tl__stats_os_init(tl_stats_reader *r);
/* Find pid's region, check whose it is, that pid wrote it and still lives
 * (tl_stats_open's checks; the header through tl__stats_load); r->name is
 * set. 0 or a negative errno, with err saying why. */
int tl__stats_os_open_pid(tl_stats_reader *r, int pid, char *err, size_t errlen);
/* Open the region copy at path (tl_stats_open_path); r->name is set. The
 * caller loads the header. */
int tl__stats_os_open_path(tl_stats_reader *r, const char *path, char *err, size_t errlen);
/* The region's size now; -EPROTO when what is open is not a region (not a
 * regular file), or the OS error. gone as tl__stats_load's. */
int tl__stats_os_size(tl_stats_reader *r, uint64_t *size, int *gone, char *err, size_t errlen);
/* Copy all of len bytes at off: 0, -EPROTO when the region is shorter,
 * or the OS error. Copies are ordered: what one copy reads is read
 * before anything the next reads (a sequence lock's rule). */
int tl__stats_os_read(const tl_stats_reader *r, void *buf, size_t len, uint64_t off);
/* Is a pid reader's process still the one it opened? 0 or -ESRCH (a path
 * reader: 0). */
int tl__stats_os_alive(const tl_stats_reader *r);
/* Let go of whatever the reader holds (not r itself). */
void tl__stats_os_close(tl_stats_reader *r);

#endif /* TL_SHARDS_STATS_READER_H */
