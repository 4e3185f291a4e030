/* tools/tlproxy/config_int.h: what the config's files share (config.c, config_yaml.c, config_values.c, config_schema.c, config_args.c): ranges and defaults, the arena, the YAML tree and the readers of its values; seen only by them. */
#ifndef TLP_CONFIG_INT_H
#define TLP_CONFIG_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config.h"

#define MS 1000000ull
#define SEC (1000 * MS)
#define MIN (60 * SEC)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)

/* Ranges and defaults; docs/TLPROXY.md lists the same. */
struct dur_range {
	uint64_t lo, hi, dflt;
};
static const struct dur_range R_SNI_TIMEOUT = {1 * MS, 10 * MIN, 3 * SEC};
static const struct dur_range R_QUEUE_TIMEOUT = {1 * MS, 1 * HOUR, 5 * SEC};
static const struct dur_range R_CONNECT = {1 * MS, 10 * MIN, 5 * SEC};
static const struct dur_range R_TLS_HANDSHAKE = {1 * MS, 10 * MIN, 10 * SEC};
static const struct dur_range R_IDLE = {100 * MS, 30 * DAY, 300 * SEC};
static const struct dur_range R_FIN = {1 * MS, 1 * DAY, 30 * SEC};
/* timeouts.idle of a UDP listener: a session's (the range is R_IDLE's). */
static const uint64_t UDP_IDLE_DFLT = 30 * SEC;
static const struct dur_range R_RESOLVE = {1 * SEC, 1 * DAY, 10 * SEC};
static const struct dur_range R_HEALTH_INTERVAL = {100 * MS, 1 * HOUR, 2 * SEC};
static const struct dur_range R_HEALTH_TIMEOUT = {1 * MS, 1 * HOUR, 1 * SEC};
static const struct dur_range R_DOWN_FOR = {1 * SEC, 1 * HOUR, 10 * SEC};
static const struct dur_range R_KA_IDLE = {1 * SEC, 32767 * SEC, 60 * SEC};
static const struct dur_range R_KA_INTERVAL = {1 * SEC, 32767 * SEC, 10 * SEC};
static const struct dur_range R_ADMIN_TIMEOUT = {100 * MS, 1 * DAY, 60 * SEC};
static const struct dur_range R_DRAIN = {100 * MS, 1 * DAY, 30 * SEC};

#define MAX_DEPTH 32
#define SHOW 48 /* characters of a bad value quoted in a message */

/* ---- arena (config_yaml.c) ---- */

struct block {
	struct block *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
};

struct tlp_arena {
	struct block *head;
};

/* ---- errors (config_yaml.c) ---- */

struct ctx {
	struct tlp_diag *diag;
	const char *name;
	struct tlp_arena *tree, *model;
	unsigned errors;
	int nomem;
};

void tlp__errat(struct ctx *c, uint32_t line, uint32_t col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- the YAML tree (config_yaml.c) ---- */

enum { YN_SCALAR, YN_MAP, YN_SEQ, YN_ALIAS };

struct ynode {
	int kind;
	uint32_t line, col; /* 1-based */
	char *s;            /* scalar: the value, NUL-terminated (may hold NULs) */
	size_t len;
	int plain;          /* scalar written without quotes */
	struct ynode *child, *last, *next;
	uint32_t count;     /* children (a map has two per entry) */
};

/* Paths name keys in messages ("listeners[0].timeouts.idle"); a path too
 * long for its buffer is cut, which only shortens a message. */
void tlp__mkpath(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define PATH(buf, ...) tlp__mkpath(buf, sizeof buf, __VA_ARGS__)


/* ---- config_yaml.c ---- */
void *tlp__arena_alloc(struct tlp_arena *a, size_t n);
void tlp__arena_free(struct tlp_arena *a);
const struct ynode *tlp__first_item(const struct ynode *n);
const char *tlp__fmt_dur(uint64_t ns, char *buf, size_t cap);
int tlp__get_bool(struct ctx *c, const struct ynode *n, const char *path, int *out);
int tlp__get_dur(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		 uint64_t *out);
int tlp__get_enum(struct ctx *c, const struct ynode *n, const char *path,
		  const char *(*name)(int), int count, int *out);
int tlp__get_name(struct ctx *c, const struct ynode *n, const char *path, const char **out);
int tlp__get_secs(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		  uint32_t *out);
int tlp__get_size(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		  uint64_t hi, uint32_t *out);
int tlp__get_text(struct ctx *c, const struct ynode *n, const char *path, size_t max,
		  int allow_nul, const char **out, uint32_t *outlen);
int tlp__get_uint(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		  uint64_t hi, uint32_t *out);
int tlp__is_list(struct ctx *c, const struct ynode *n, const char *path);
uint32_t tlp__item_count(const struct ynode *n);
struct ynode *tlp__load_tree(struct ctx *c, const char *text, size_t len, int *empty);
int tlp__name_ok(const char *s, size_t len);
const struct ynode *tlp__next_item(const struct ynode *list, const struct ynode *it);
int tlp__scalar(struct ctx *c, const struct ynode *n, const char *path);
const char *tlp__shown(const struct ynode *n, char *buf, size_t cap);
int tlp__take(struct ctx *c, const struct ynode *n, const char *path, const char *const *keys,
	      size_t nk, const struct ynode **vals);
void *tlp__zalloc(struct ctx *c, struct tlp_arena *a, size_t n);

/* ---- config_values.c ---- */
const char *tlp__clip(const char *s, size_t len, char *buf, size_t cap);
uint64_t tlp__ep_id(const struct tlp_endpoint *ep);
int tlp__ep_own(struct ctx *c, struct tlp_endpoint *ep, const char *s, size_t len);
int tlp__get_ep(struct ctx *c, const struct ynode *n, const char *path, int allow_host,
		struct tlp_endpoint *ep);
int tlp__get_nets(struct ctx *c, const struct ynode *n, const char *path, struct tlp_netset *set);

/* ---- config_schema.c ---- */
void tlp__listener_defaults(struct tlp_listener_cfg *l);
void tlp__parse_top(struct ctx *c, const struct ynode *root, struct tlp_config *cfg);
void tlp__pool_defaults(struct tlp_pool_cfg *p);

/* ---- config_tls.c ---- */
/* A listener's tls: mapping into *t (errors reported against path). */
void tlp__parse_tls(struct ctx *c, const struct ynode *n, const char *path, struct tlp_tls_cfg *t);
/* A pool's tls: mapping into *t. */
void tlp__parse_pool_tls(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_pool_tls_cfg *t);
/* What a listener with tls: cannot also have (splice, proxy_protocol_from):
 * reported against n. */
void tlp__check_tls(struct ctx *c, const struct ynode *n, const char *path,
		    const struct tlp_listener_cfg *l);

/* ---- config.c ---- */
struct tlp_config *tlp__new_config(struct tlp_arena **arena);
/* The PROXY header versions by enum tlp_pp_send, as the config and the command line name them. */
extern const char *const tlp__pp_names[TLP_PP_SEND_V2 + 1];

#endif
