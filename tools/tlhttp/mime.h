/* tools/tlhttp/mime.h: the Content-Type of a file, from its name's extension. */
#ifndef TLHTTP_MIME_H
#define TLHTTP_MIME_H

#include <stddef.h>

/*
 * The media type for the file name name[0..n) (a path or a last component),
 * from the extension after its last '.', matched ASCII case-insensitively:
 * html htm css js mjs json txt xml svg png jpg jpeg gif webp ico wasm pdf
 * woff woff2 mp4 webm. The text types (html, css, js, txt) carry
 * "; charset=utf-8": served files are taken to be UTF-8, which is what a
 * browser would otherwise have to guess. Anything else, a name without an
 * extension (a '.' in a directory part does not count, nor a leading '.'),
 * or a NULL name, gives "application/octet-stream". Returns a static string,
 * never NULL.
 */
const char *tlhttp_mime_type(const char *name, size_t n);

#endif
