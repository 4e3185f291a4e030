/* tools/tlhttp/server.h: tlhttp's shards: connections, requests and responses on the sharded runtime. */
#ifndef TLHTTP_SERVER_H
#define TLHTTP_SERVER_H

#include <stdint.h>

#include "turnloop.h"
#include "tlhttp/alog.h"
#include "tlhttp/args.h"
#include "tlhttp/parse.h"

/* What one shard did, for the summary at exit (written by the shard,
 * read once the runtime has stopped). */
struct tlhttp_totals {
	uint64_t conns, refused, requests, status[6]; /* status[k]: kxx answers */
	uint64_t log_dropped;
	uint64_t tls_failed;        /* TLS handshakes that failed */
};

/* The top byte of the TLS layer's tokens, and the runtime handler that
 * hands them to the shard's TLS context (with --tls-cert). */
#define TLHTTP_TLS_TAG 1

/* Shared by every shard, read-only once the runtime starts. */
struct tlhttp_server {
	const struct tlhttp_opts *o;
	int root;                  /* tlhttp_root_open(--root), or -1 with --body */
	struct tlhttp_alog *alog;  /* NULL without --access-log */
	struct tlhttp_limits lim;  /* the parser's limits */
	int st_resp;               /* counter family "responses", rows 2xx 3xx 4xx 5xx */
	int st_conns;              /* gauge "conns": open connections */
	int st_refused;            /* counter "conns_refused": accepted over --max-conns */
	int st_dropped;            /* counter "log_dropped": access-log lines dropped */
	int st_tls_failed;         /* counter "tls_failed": handshakes that failed */
	tl_tls_config *tls;        /* with --tls-cert: the certificate, shared by every shard */
	uint32_t nshards;
	struct tlhttp_shard **shards;   /* nshards, set by each shard's start */
	struct tlhttp_totals *totals;   /* nshards */
};

/* The loop configuration every shard needs for o's limits. */
void tlhttp_loop_config(const struct tlhttp_opts *o, tl_config *cfg);

/*
 * The runtime's callbacks (tl_runtime_config: on_launch, on_drain, on_stop,
 * on_pass, on_completion), with arg the struct tlhttp_server. Launch
 * allocates the shard's whole state (connection slots, buffers) and
 * listens; a negative return stops the runtime (-ENOTSUP: --root on a
 * driver without tl_sendfile). Drain (the first SIGTERM or SIGINT) ends the
 * connections with nothing under way and lets the others finish their
 * request. Stop closes the listener, the timer and every connection.
 */
int tlhttp_shard_launch(tl_shard *s, void *arg);
void tlhttp_shard_drain(tl_shard *s, void *arg);
void tlhttp_shard_stop(tl_shard *s, void *arg);
int tlhttp_shard_pass(tl_shard *s, void *arg);
void tlhttp_shard_completion(tl_shard *s, const tl_completion *c);
/* The handler of tokens tl_token(TLHTTP_TLS_TAG, ...): the TLS layer's. */
void tlhttp_shard_tls(tl_shard *s, const tl_completion *c);

/* Frees what shard start allocated, once the runtime is destroyed (its
 * loops are gone, so nothing writes into the buffers any more). */
void tlhttp_shards_free(struct tlhttp_server *srv);

#endif
