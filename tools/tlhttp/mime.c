/* tools/tlhttp/mime.c: the extension table behind tlhttp_mime_type. */
#include <string.h>

#include "tlhttp/mime.h"

static const struct {
	const char *ext, *type;
} types[] = {
	{ "html", "text/html; charset=utf-8" },
	{ "htm", "text/html; charset=utf-8" },
	{ "css", "text/css; charset=utf-8" },
	{ "js", "text/javascript; charset=utf-8" }, /* RFC 9239 */
	{ "mjs", "text/javascript; charset=utf-8" },
	{ "json", "application/json" },
	{ "txt", "text/plain; charset=utf-8" },
	{ "xml", "application/xml" }, /* RFC 7303 */
	{ "svg", "image/svg+xml" },
	{ "png", "image/png" },
	{ "jpg", "image/jpeg" },
	{ "jpeg", "image/jpeg" },
	{ "gif", "image/gif" },
	{ "webp", "image/webp" },
	{ "ico", "image/x-icon" },
	{ "wasm", "application/wasm" },
	{ "pdf", "application/pdf" },
	{ "woff", "font/woff" },
	{ "woff2", "font/woff2" },
	{ "mp4", "video/mp4" },
	{ "webm", "video/webm" },
};

#define OCTET "application/octet-stream"
#define EXT_MAX 5

const char *tlhttp_mime_type(const char *name, size_t n)
{
	char low[EXT_MAX];
	size_t i, dot, len;

	if (!name)
		return OCTET;
	for (i = n; i > 0 && name[i - 1] != '.' && name[i - 1] != '/'; i--)
		;
	/* No dot, a dot ending a directory part, or a leading dot (".htaccess"). */
	if (i == 0 || name[i - 1] != '.' || i == 1 || name[i - 2] == '/')
		return OCTET;
	dot = i - 1;
	len = n - dot - 1;
	if (len == 0 || len > EXT_MAX)
		return OCTET;
	for (i = 0; i < len; i++) {
		char c = name[dot + 1 + i];
		low[i] = c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
	}
	for (i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strlen(types[i].ext) == len && !memcmp(types[i].ext, low, len))
			return types[i].type;
	return OCTET;
}
