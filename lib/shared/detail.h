/* lib/shared/detail.h: set the calling thread's error detail (tl_error_detail, turnloop/error.h); the core's one interface below the public API that the runtime (shards/) also uses, so it sits in the folder other layers may see. */
#ifndef TL_LIB_DETAIL_H
#define TL_LIB_DETAIL_H

/* Clear the detail: every call marked "Detail" starts with this. */
void tl__detail_clear(void);
/* Set the detail to one formatted line (cut to the buffer, newlines kept
 * out by the callers). */
void tl__detail_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
