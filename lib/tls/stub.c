/* lib/tls/stub.c: the TLS layer of a build without GnuTLS (-Dtls=disabled, and the Windows build): every entry point says -ENOTSUP. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "turnloop/tls.h"

static int none(char *err, size_t errlen)
{
	if (err && errlen)
#ifdef _WIN32
		snprintf(err, errlen, "the Windows build has no TLS yet");
#else
		snprintf(err, errlen, "this build has no TLS (configured with -Dtls=disabled)");
#endif
	return -ENOTSUP;
}

int tl_tls_config_new(const tl_tls_settings *s, tl_tls_config **out, char *err, size_t errlen)
{
	(void)s, (void)out;
	return none(err, errlen);
}

int tl_tls_config_load(tl_loop *loop, tl_tls_load *req, uint64_t token, tl_op *op)
{
	(void)loop, (void)token, (void)op;
	return req ? none(req->err, sizeof req->err) : -ENOTSUP;
}

void tl_tls_config_ref(tl_tls_config *cfg) { (void)cfg; }
void tl_tls_config_unref(tl_tls_config *cfg) { (void)cfg; }
int tl_tls_config_role(const tl_tls_config *cfg) { (void)cfg; return 0; }
int tl_tls_config_ticket_key(const tl_tls_config *cfg, uint8_t key[TL_TLS_TICKET_KEY_SIZE])
{
	(void)cfg, (void)key;
	return -ENOTSUP;
}

void tl_tls_ctx_config_init(tl_tls_ctx_config *cc) { memset(cc, 0, sizeof *cc); }
int tl_tls_ctx_new(tl_loop *loop, const tl_tls_ctx_config *cc, tl_tls_ctx **out)
{
	(void)loop, (void)cc, (void)out;
	return -ENOTSUP;
}
void tl_tls_ctx_destroy(tl_tls_ctx *ctx) { (void)ctx; }
int tl_tls_complete(tl_tls_ctx *ctx, const tl_completion *c) { (void)ctx, (void)c; return 0; }
int tl_tls_poll(tl_tls_ctx *ctx, tl_completion *out, uint32_t cap) { (void)ctx, (void)out, (void)cap; return 0; }
uint32_t tl_tls_pending(const tl_tls_ctx *ctx) { (void)ctx; return 0; }
int tl_tls_server(tl_tls_ctx *x, tl_tls_config *c, tl_handle h, uint64_t t, tl_tls_id *id)
{
	(void)x, (void)c, (void)h, (void)t, (void)id;
	return -ENOTSUP;
}
int tl_tls_client(tl_tls_ctx *x, tl_tls_config *c, tl_handle h, const tl_tls_client_opts *o,
		  uint64_t t, tl_tls_id *id)
{
	(void)x, (void)c, (void)h, (void)o, (void)t, (void)id;
	return -ENOTSUP;
}
int tl_tls_handshake(tl_tls_ctx *x, tl_tls_id id, uint64_t d, uint64_t t, tl_op *op)
{
	(void)x, (void)id, (void)d, (void)t, (void)op;
	return -ENOTSUP;
}
int tl_tls_read_start(tl_tls_ctx *x, tl_tls_id id, uint64_t t, tl_op *op)
{
	(void)x, (void)id, (void)t, (void)op;
	return -ENOTSUP;
}
int tl_tls_read_deadline(tl_tls_ctx *x, tl_op op, uint64_t d) { (void)x, (void)op, (void)d; return -ENOTSUP; }
int tl_tls_lease_release(tl_tls_ctx *x, uint32_t id) { (void)x, (void)id; return -ENOTSUP; }
int tl_tls_write(tl_tls_ctx *x, tl_tls_id id, const void *b, uint32_t l, uint64_t t, tl_op *op)
{
	(void)x, (void)id, (void)b, (void)l, (void)t, (void)op;
	return -ENOTSUP;
}
int tl_tls_writev(tl_tls_ctx *x, tl_tls_id id, const tl_iovec *v, int n, uint64_t t, tl_op *op)
{
	(void)x, (void)id, (void)v, (void)n, (void)t, (void)op;
	return -ENOTSUP;
}
int tl_tls_shutdown(tl_tls_ctx *x, tl_tls_id id, uint64_t t, tl_op *op)
{
	(void)x, (void)id, (void)t, (void)op;
	return -ENOTSUP;
}
int tl_tls_key_update(tl_tls_ctx *x, tl_tls_id id, int r) { (void)x, (void)id, (void)r; return -ENOTSUP; }
int tl_tls_cancel(tl_tls_ctx *x, tl_op op) { (void)x, (void)op; return -ENOTSUP; }
int tl_tls_stop(tl_tls_ctx *x, tl_op op) { (void)x, (void)op; return -ENOTSUP; }
int tl_tls_close(tl_tls_ctx *x, tl_tls_id id, uint32_t f, uint64_t t)
{
	(void)x, (void)id, (void)f, (void)t;
	return -ENOTSUP;
}
int tl_tls_stream(tl_tls_ctx *x, tl_tls_id id, tl_handle *h) { (void)x, (void)id, (void)h; return -ENOTSUP; }
int tl_tls_release(tl_tls_ctx *x, tl_tls_id id, void *state, uint32_t cap, tl_handle *h)
{
	(void)x, (void)id, (void)state, (void)cap, (void)h;
	return -ENOTSUP;
}
int tl_tls_import(tl_tls_ctx *x, tl_tls_config *cfg, tl_handle h, const void *state, uint32_t len,
		  uint64_t token, tl_tls_id *id)
{
	(void)x, (void)cfg, (void)h, (void)state, (void)len, (void)token, (void)id;
	return -ENOTSUP;
}
const char *tl_tls_reason_name(int reason) { (void)reason; return "?"; }
int tl_tls_info_get(tl_tls_ctx *x, tl_tls_id id, tl_tls_info *o) { (void)x, (void)id, (void)o; return -ENOTSUP; }
int tl_tls_verify_text(uint32_t v, char *buf, size_t len)
{
	(void)v;
	if (buf && len)
		buf[0] = '\0';
	return 0;
}
int tl_tls_resume_data(tl_tls_ctx *x, tl_tls_id id, void *b, uint32_t c)
{
	(void)x, (void)id, (void)b, (void)c;
	return -ENOTSUP;
}
void tl_tls_stats_get(const tl_tls_ctx *x, tl_tls_stats *out) { (void)x; memset(out, 0, sizeof *out); }
