/* tools/tlproxy/config.c: tlproxy's config: YAML (through libyaml's event parser) into a tree, the tree checked against the schema into the model, and the command-line builder of the same model (see config.h and docs/TLPROXY.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "turnloop/plan.h"

#include "config.h"
#include "../reason.h"

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
static const struct dur_range R_IDLE = {100 * MS, 30 * DAY, 300 * SEC};
static const struct dur_range R_FIN = {1 * MS, 1 * DAY, 30 * SEC};
static const struct dur_range R_RESOLVE = {1 * SEC, 1 * DAY, 10 * SEC};
static const struct dur_range R_HEALTH_INTERVAL = {100 * MS, 1 * HOUR, 2 * SEC};
static const struct dur_range R_HEALTH_TIMEOUT = {1 * MS, 1 * HOUR, 1 * SEC};
static const struct dur_range R_DOWN_FOR = {1 * SEC, 1 * HOUR, 10 * SEC};
static const struct dur_range R_KA_IDLE = {1 * SEC, 32767 * SEC, 60 * SEC};
static const struct dur_range R_KA_INTERVAL = {1 * SEC, 32767 * SEC, 10 * SEC};
static const struct dur_range R_ADMIN_TIMEOUT = {100 * MS, 1 * DAY, 60 * SEC};

#define MAX_DEPTH 32
#define SHOW 48 /* characters of a bad value quoted in a message */

/* ---- arena ---- */

struct block {
	struct block *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
};

struct tlp_arena {
	struct block *head;
};

static void *arena_alloc(struct tlp_arena *a, size_t n)
{
	struct block *b = a->head;
	void *p;

	if (n > ((size_t)1 << 40))
		return NULL;
	n = (n + 15) & ~(size_t)15;
	if (!n)
		n = 16;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;

		b = malloc(sizeof *b + cap);
		if (!b)
			return NULL;
		b->next = a->head;
		b->cap = cap;
		b->used = 0;
		a->head = b;
	}
	p = b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

static void arena_free(struct tlp_arena *a)
{
	if (!a)
		return;
	for (struct block *b = a->head, *nx; b; b = nx) {
		nx = b->next;
		free(b);
	}
	free(a);
}

/* ---- errors ---- */

struct ctx {
	struct tlp_diag *diag;
	const char *name;
	struct tlp_arena *tree, *model;
	unsigned errors;
	int nomem;
};

static void errat(struct ctx *c, uint32_t line, uint32_t col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void errat(struct ctx *c, uint32_t line, uint32_t col, const char *fmt, ...)
{
	struct tlp_diag *d = c->diag;
	va_list ap;

	c->errors++;
	if (!d)
		return;
	d->total++;
	if (d->count >= TLP_CFG_MAX_ERRORS)
		return;
	struct tlp_diag_entry *e = &d->e[d->count++];
	int n;

	e->line = line;
	e->col = col;
	n = snprintf(e->text, sizeof e->text, "%s:%u:%u: ", c->name, line, col);
	if (n < 0 || (size_t)n >= sizeof e->text)
		return;
	va_start(ap, fmt);
	vsnprintf(e->text + n, sizeof e->text - (size_t)n, fmt, ap);
	va_end(ap);
}

static void *zalloc(struct ctx *c, struct tlp_arena *a, size_t n)
{
	void *p = arena_alloc(a, n);

	if (!p)
		c->nomem = 1;
	return p;
}

/* ---- the YAML tree ---- */

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

static struct ynode *new_node(struct ctx *c, int kind, yaml_mark_t m)
{
	struct ynode *n = zalloc(c, c->tree, sizeof *n);

	if (!n)
		return NULL;
	n->kind = kind;
	n->line = (uint32_t)m.line + 1;
	n->col = (uint32_t)m.column + 1;
	return n;
}

static void add_child(struct ynode *parent, struct ynode *n)
{
	if (parent->last)
		parent->last->next = n;
	else
		parent->child = n;
	parent->last = n;
	parent->count++;
}

static void no_anchor(struct ctx *c, const yaml_char_t *anchor, yaml_mark_t m)
{
	if (anchor)
		errat(c, (uint32_t)m.line + 1, (uint32_t)m.column + 1,
		      "anchors (&%.*s) are not supported: write the value out", SHOW,
		      (const char *)anchor);
}

/* Read the whole stream into a tree; NULL on a syntax error or no memory
 * (both reported) or an empty stream (*empty set). */
static struct ynode *load_tree(struct ctx *c, const char *text, size_t len, int *empty)
{
	yaml_parser_t p;
	yaml_event_t ev;
	struct ynode *stack[MAX_DEPTH], *root = NULL;
	int depth = 0, docs = 0, done = 0, ok = 1;

	*empty = 0;
	if (!yaml_parser_initialize(&p)) {
		c->nomem = 1;
		return NULL;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done) {
		struct ynode *n = NULL;

		if (!yaml_parser_parse(&p, &ev)) {
			if (p.error == YAML_MEMORY_ERROR) {
				c->nomem = 1;
			} else {
				yaml_mark_t m = p.problem_mark;

				errat(c, (uint32_t)m.line + 1, (uint32_t)m.column + 1,
				      "YAML syntax: %s%s%s", p.problem ? p.problem : "error",
				      p.context ? " " : "", p.context ? p.context : "");
			}
			ok = 0;
			break;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1) {
				errat(c, (uint32_t)ev.start_mark.line + 1,
				      (uint32_t)ev.start_mark.column + 1,
				      "a second YAML document: the config is one document");
				ok = 0;
				done = 1;
			}
			break;
		case YAML_ALIAS_EVENT:
			errat(c, (uint32_t)ev.start_mark.line + 1,
			      (uint32_t)ev.start_mark.column + 1,
			      "aliases (*%.*s) are not supported: write the value out", SHOW,
			      (const char *)ev.data.alias.anchor);
			n = new_node(c, YN_ALIAS, ev.start_mark);
			break;
		case YAML_SCALAR_EVENT:
			no_anchor(c, ev.data.scalar.anchor, ev.start_mark);
			n = new_node(c, YN_SCALAR, ev.start_mark);
			if (n) {
				n->len = ev.data.scalar.length;
				n->s = zalloc(c, c->tree, n->len + 1);
				if (n->s)
					memcpy(n->s, ev.data.scalar.value, n->len);
				n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
			}
			break;
		case YAML_SEQUENCE_START_EVENT:
			no_anchor(c, ev.data.sequence_start.anchor, ev.start_mark);
			n = new_node(c, YN_SEQ, ev.start_mark);
			break;
		case YAML_MAPPING_START_EVENT:
			no_anchor(c, ev.data.mapping_start.anchor, ev.start_mark);
			n = new_node(c, YN_MAP, ev.start_mark);
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
		if (n) {
			if (depth > 0)
				add_child(stack[depth - 1], n);
			else if (!root)
				root = n;
			if (n->kind == YN_SEQ || n->kind == YN_MAP) {
				if (depth == MAX_DEPTH) {
					errat(c, n->line, n->col, "nested deeper than %d levels",
					      MAX_DEPTH);
					ok = 0;
					done = 1;
				} else {
					stack[depth++] = n;
				}
			}
		}
		yaml_event_delete(&ev);
		if (c->nomem) {
			ok = 0;
			break;
		}
	}
	yaml_parser_delete(&p);
	if (!ok)
		return NULL;
	if (!root)
		*empty = 1;
	return root;
}

/* ---- reading values ---- */

/* v for a message: at most SHOW characters, anything unprintable as '?'. */
static const char *shown(const struct ynode *n, char *buf, size_t cap)
{
	size_t k = 0, lim = n->len < SHOW ? n->len : SHOW;

	for (size_t i = 0; i < lim && k + 1 < cap; i++) {
		unsigned char ch = (unsigned char)n->s[i];

		buf[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	if (n->len > lim && k + 4 < cap) {
		memcpy(buf + k, "...", 3);
		k += 3;
	}
	buf[k] = '\0';
	return buf;
}

/* A scalar with a value; reports and returns -1 otherwise. */
static int scalar(struct ctx *c, const struct ynode *n, const char *path)
{
	if (!n)
		return -1;
	if (n->kind == YN_ALIAS)
		return -1; /* already reported */
	if (n->kind != YN_SCALAR) {
		errat(c, n->line, n->col, "%s: expected a single value, not a %s", path,
		      n->kind == YN_MAP ? "mapping" : "list");
		return -1;
	}
	if (!n->s)
		return -1;
	if (n->len == 0) {
		errat(c, n->line, n->col, "%s: needs a value", path);
		return -1;
	}
	return 0;
}

static int get_uint(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		    uint64_t hi, uint32_t *out)
{
	char b[SHOW + 4];
	uint64_t v = 0;

	if (scalar(c, n, path))
		return -1;
	for (size_t i = 0; i < n->len; i++) {
		if (n->s[i] < '0' || n->s[i] > '9') {
			errat(c, n->line, n->col, "%s: '%s' is not a whole number", path,
			      shown(n, b, sizeof b));
			return -1;
		}
		v = v * 10 + (uint64_t)(n->s[i] - '0');
		if (v > hi)
			break;
	}
	if (v < lo || v > hi) {
		errat(c, n->line, n->col, "%s: %s is out of range (%llu to %llu)", path,
		      shown(n, b, sizeof b), (unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int get_bool(struct ctx *c, const struct ynode *n, const char *path, int *out)
{
	char b[SHOW + 4];

	if (scalar(c, n, path))
		return -1;
	if (n->len == 4 && !memcmp(n->s, "true", 4)) {
		*out = 1;
		return 0;
	}
	if (n->len == 5 && !memcmp(n->s, "false", 5)) {
		*out = 0;
		return 0;
	}
	errat(c, n->line, n->col, "%s: '%s' is not true or false", path, shown(n, b, sizeof b));
	return -1;
}

/* A duration for messages: the largest unit that divides it. */
static const char *fmt_dur(uint64_t ns, char *buf, size_t cap)
{
	static const struct {
		uint64_t ns;
		const char *unit;
	} u[] = {{DAY, "d"}, {HOUR, "h"}, {MIN, "m"}, {SEC, "s"}, {MS, "ms"}};

	for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
		if (ns >= u[i].ns && ns % u[i].ns == 0) {
			snprintf(buf, cap, "%llu%s", (unsigned long long)(ns / u[i].ns), u[i].unit);
			return buf;
		}
	snprintf(buf, cap, "%lluns", (unsigned long long)ns);
	return buf;
}

static int get_dur(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		   uint64_t *out)
{
	char why[160], a[32], b[32];
	uint64_t v;

	if (scalar(c, n, path))
		return -1;
	if (tlp_duration_parse(n->s, n->len, &v, why, sizeof why) < 0) {
		errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	if (v < r.lo || v > r.hi) {
		char s[SHOW + 4];

		errat(c, n->line, n->col, "%s: %s is out of range (%s to %s)", path,
		      shown(n, s, sizeof s), fmt_dur(r.lo, a, sizeof a),
		      fmt_dur(r.hi, b, sizeof b));
		return -1;
	}
	*out = v;
	return 0;
}

/* Keepalive times: whole seconds, since the socket options take seconds. */
static int get_secs(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		    uint32_t *out)
{
	uint64_t v;

	if (get_dur(c, n, path, r, &v))
		return -1;
	if (v % SEC) {
		char s[SHOW + 4];

		errat(c, n->line, n->col,
		      "%s: %s is not whole seconds (the socket option takes seconds)", path,
		      shown(n, s, sizeof s));
		return -1;
	}
	*out = (uint32_t)(v / SEC);
	return 0;
}

static int get_size(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		    uint64_t hi, uint32_t *out)
{
	char why[160], s[SHOW + 4];
	uint64_t v;

	if (scalar(c, n, path))
		return -1;
	if (tlp_size_parse(n->s, n->len, &v, why, sizeof why) < 0) {
		errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	if (v < lo || v > hi) {
		errat(c, n->line, n->col, "%s: %s is out of range (%lluk to %llum)", path,
		      shown(n, s, sizeof s), (unsigned long long)(lo >> 10),
		      (unsigned long long)(hi >> 20));
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* A string copied into the model; NUL bytes only if allow_nul. */
static int get_text(struct ctx *c, const struct ynode *n, const char *path, size_t max,
		    int allow_nul, const char **out, uint32_t *outlen)
{
	char *s;

	if (scalar(c, n, path))
		return -1;
	if (n->len > max) {
		errat(c, n->line, n->col, "%s: longer than %zu bytes", path, max);
		return -1;
	}
	if (!allow_nul && memchr(n->s, '\0', n->len)) {
		errat(c, n->line, n->col, "%s: contains a NUL byte", path);
		return -1;
	}
	s = zalloc(c, c->model, n->len + 1);
	if (!s)
		return -1;
	memcpy(s, n->s, n->len);
	*out = s;
	if (outlen)
		*outlen = (uint32_t)n->len;
	return 0;
}

static int name_ok(const char *s, size_t len)
{
	if (len == 0 || len > TLP_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

static int get_name(struct ctx *c, const struct ynode *n, const char *path, const char **out)
{
	char b[SHOW + 4];

	if (scalar(c, n, path))
		return -1;
	if (!name_ok(n->s, n->len)) {
		errat(c, n->line, n->col,
		      "%s: '%s' is not a name (1 to %d letters, digits, '_', '-', '.')", path,
		      shown(n, b, sizeof b), TLP_NAME_MAX);
		return -1;
	}
	return get_text(c, n, path, TLP_NAME_MAX, 0, out, NULL);
}

static int get_enum(struct ctx *c, const struct ynode *n, const char *path,
		    const char *(*name)(int), int count, int *out)
{
	char b[SHOW + 4], list[160];
	size_t k = 0;

	if (scalar(c, n, path))
		return -1;
	for (int i = 0; i < count; i++)
		if (strlen(name(i)) == n->len && !memcmp(name(i), n->s, n->len)) {
			*out = i;
			return 0;
		}
	list[0] = '\0';
	for (int i = 0; i < count && k < sizeof list; i++) {
		int w = snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", name(i));

		if (w < 0)
			break;
		k += (size_t)w;
	}
	errat(c, n->line, n->col, "%s: '%s' is not one of: %s", path, shown(n, b, sizeof b), list);
	return -1;
}

/*
 * The values of map n's keys, by the order of keys[], into vals[] (NULL
 * where absent); unknown, repeated and non-scalar keys are reported.
 * Returns 0, or -1 (reported) when n is not a mapping.
 */
static int take(struct ctx *c, const struct ynode *n, const char *path, const char *const *keys,
		size_t nk, const struct ynode **vals)
{
	for (size_t i = 0; i < nk; i++)
		vals[i] = NULL;
	if (!n || n->kind == YN_ALIAS)
		return -1;
	if (n->kind != YN_MAP) {
		errat(c, n->line, n->col, "%s: expected a mapping (key: value, ...)", path);
		return -1;
	}
	for (const struct ynode *k = n->child; k && k->next; k = k->next->next) {
		const struct ynode *v = k->next;
		char b[SHOW + 4], list[200];
		size_t i, w = 0;

		if (k->kind != YN_SCALAR || !k->s) {
			if (k->kind != YN_ALIAS)
				errat(c, k->line, k->col, "%s%sa key must be a plain word", path,
				      *path ? ": " : "");
			continue;
		}
		for (i = 0; i < nk; i++)
			if (strlen(keys[i]) == k->len && !memcmp(keys[i], k->s, k->len))
				break;
		if (i == nk) {
			list[0] = '\0';
			for (size_t j = 0; j < nk && w < sizeof list; j++) {
				int r = snprintf(list + w, sizeof list - w, "%s%s", j ? ", " : "",
						 keys[j]);

				if (r < 0)
					break;
				w += (size_t)r;
			}
			errat(c, k->line, k->col, "%s%sunknown key '%s' (known here: %s)", path,
			      *path ? ": " : "", shown(k, b, sizeof b), list);
			continue;
		}
		if (vals[i]) {
			errat(c, k->line, k->col, "%s%s%s: given twice (first on line %u)", path,
			      *path ? "." : "", keys[i], vals[i]->line);
			continue;
		}
		vals[i] = v;
	}
	return 0;
}

/* Items of a list; a single value counts as a list of one. */
static const struct ynode *first_item(const struct ynode *n)
{
	if (!n)
		return NULL;
	return n->kind == YN_SEQ ? n->child : n;
}

static uint32_t item_count(const struct ynode *n)
{
	if (!n)
		return 0;
	return n->kind == YN_SEQ ? n->count : 1;
}

static const struct ynode *next_item(const struct ynode *list, const struct ynode *it)
{
	return list->kind == YN_SEQ ? it->next : NULL;
}

/* A list's items must be lists of what was expected. */
static int is_list(struct ctx *c, const struct ynode *n, const char *path)
{
	if (n->kind == YN_SEQ)
		return 0;
	if (n->kind != YN_ALIAS)
		errat(c, n->line, n->col, "%s: expected a list", path);
	return -1;
}

/* Paths name keys in messages ("listeners[0].timeouts.idle"); a path too
 * long for its buffer is cut, which only shortens a message. */
static void mkpath(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void mkpath(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

#define PATH(buf, ...) mkpath(buf, sizeof buf, __VA_ARGS__)

/* ---- values with their own syntax ---- */

/* Text for a reason: the first bytes of s that fit (at most SHOW), the
 * unprintable ones as '?', "..." when cut. */
static const char *clip(const char *s, size_t len, char *buf, size_t cap)
{
	size_t k = 0, lim = len < SHOW ? len : SHOW;

	if (lim + 4 > cap)
		lim = cap > 4 ? cap - 4 : 0;

	for (size_t i = 0; i < lim && k + 1 < cap; i++)
		buf[k++] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	if (len > lim && k + 4 < cap) {
		memcpy(buf + k, "...", 3);
		k += 3;
	}
	buf[k] = '\0';
	return buf;
}

int tlp_duration_parse(const char *s, size_t len, uint64_t *ns, char *err, size_t errlen)
{
	static const struct {
		const char *unit;
		uint64_t ns;
	} units[] = {{"ms", MS}, {"s", SEC}, {"m", MIN}, {"h", HOUR}, {"d", DAY}};
	char b[SHOW + 4];
	uint64_t v = 0;
	size_t i = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!ns || (!s && len))
		return fail(err, errlen, "no duration");
	if (len == 0)
		return fail(err, errlen, "empty duration");
	clip(s, len, b, sizeof b);
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 15)
			return fail(err, errlen, "'%s' is too large a duration", b);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i == 0)
		return fail(err, errlen, "'%s' is not a duration (like 500ms, 2s, 1m, 1h)", b);
	if (i == len)
		return fail(
			err, errlen,
			"bare number '%s' has no unit: write %ss or %sms (units: ms, s, m, h, d)",
			b, b, b);
	if (s[i] == '.' || s[i] == ',')
		return fail(err, errlen, "'%s': fractions are not taken; use a smaller unit (ms)",
			    b);
	for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
		size_t ul = strlen(units[u].unit);

		if (len - i == ul && !memcmp(s + i, units[u].unit, ul)) {
			if (v > UINT64_MAX / units[u].ns)
				return fail(err, errlen, "'%s' is too large a duration", b);
			*ns = v * units[u].ns;
			return 0;
		}
	}
	return fail(err, errlen, "'%s' has an unknown unit (ms, s, m, h or d, as in 500ms, 2s)", b);
}

int tlp_size_parse(const char *s, size_t len, uint64_t *bytes, char *err, size_t errlen)
{
	char b[SHOW + 4];
	uint64_t v = 0, mult = 1;
	size_t i = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!bytes || (!s && len))
		return fail(err, errlen, "no size");
	if (len == 0)
		return fail(err, errlen, "empty size");
	clip(s, len, b, sizeof b);
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 15)
			return fail(err, errlen, "'%s' is too large a size", b);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i == 0)
		return fail(err, errlen, "'%s' is not a size (like 4096, 64k, 1m)", b);
	if (i < len) {
		if (len - i != 1)
			return fail(err, errlen, "'%s' has an unknown unit (k, m or g, as in 64k)",
				    b);
		switch (s[i]) {
		case 'k': case 'K': mult = 1ull << 10; break;
		case 'm': case 'M': mult = 1ull << 20; break;
		case 'g': case 'G': mult = 1ull << 30; break;
		default:
			return fail(err, errlen, "'%s' has an unknown unit (k, m or g, as in 64k)",
				    b);
		}
	}
	if (v > (1ull << 40) / mult)
		return fail(err, errlen, "'%s' is too large a size (at most 1024g)", b);
	*bytes = v * mult;
	return 0;
}

static int parse_port(const char *s, size_t len, uint16_t *out)
{
	uint32_t v = 0;

	if (len == 0 || len > 5 || s[0] == '0')
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int tlp_endpoint_parse(const char *s, size_t len, int allow_host, struct tlp_endpoint *ep,
		       char *err, size_t errlen)
{
	char b[SHOW + 4], host[INET6_ADDRSTRLEN + 1];
	const char *colon, *hs, *ps;
	size_t hl, pl;
	int bracket = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!ep || (!s && len))
		return fail(err, errlen, "no address");
	memset(ep, 0, sizeof *ep);
	if (len == 0)
		return fail(err, errlen, "empty address");
	clip(s, len, b, sizeof b);
	if (memchr(s, '\0', len))
		return fail(err, errlen, "address '%s' contains a NUL byte", b);
	if (len > 512)
		return fail(err, errlen, "address '%s' is too long", b);
	if (len >= 5 && !memcmp(s, "unix:", 5)) {
		if (len == 5)
			return fail(err, errlen, "empty Unix socket path in '%s'", b);
		if (len - 5 >= sizeof ep->addr.un.sun_path)
			return fail(err, errlen, "Unix socket path of %zu bytes: at most %zu",
				    len - 5, sizeof ep->addr.un.sun_path - 1);
		ep->kind = TLP_EP_UNIX;
		ep->addr.un.sun_family = AF_UNIX;
		memcpy(ep->addr.un.sun_path, s + 5, len - 5);
		return 0;
	}
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close)
			return fail(err, errlen, "'%s': no ']' after the IPv6 address", b);
		hs = s + 1;
		hl = (size_t)(close - hs);
		if ((size_t)(close - s) + 1 >= len || close[1] != ':')
			return fail(err, errlen, "'%s' needs :PORT after the ']'", b);
		ps = close + 2;
		pl = len - (size_t)(ps - s);
		bracket = 1;
	} else {
		colon = NULL;
		for (size_t i = 0; i < len; i++)
			if (s[i] == ':') {
				if (colon)
					return fail(err, errlen,
						    "'%s': an IPv6 address goes in brackets, as in [::1]:8080",
						    b);
				colon = s + i;
			}
		if (!colon)
			return fail(err, errlen, "'%s' needs a port (HOST:PORT)", b);
		hs = s;
		hl = (size_t)(colon - s);
		ps = colon + 1;
		pl = len - hl - 1;
	}
	if (hl == 0 || (hl == 1 && hs[0] == '*'))
		return fail(err, errlen,
			    "'%s' has no host: write 0.0.0.0:PORT or [::]:PORT for every address",
			    b);
	if (parse_port(ps, pl, &ep->port))
		return fail(err, errlen, "'%s': port must be 1 to 65535 (plain decimal)", b);
	if (bracket) {
		if (hl >= sizeof host)
			return fail(err, errlen, "'%s' is not an IPv6 address", b);
		memcpy(host, hs, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET6, host, &ep->addr.in6.sin6_addr) != 1)
			return fail(err, errlen, "'%s' is not an IPv6 address", b);
		ep->kind = TLP_EP_IP;
		ep->addr.in6.sin6_family = AF_INET6;
		ep->addr.in6.sin6_port = htons(ep->port);
		return 0;
	}
	if (hl < sizeof host) {
		memcpy(host, hs, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET, host, &ep->addr.in.sin_addr) == 1) {
			ep->kind = TLP_EP_IP;
			ep->addr.in.sin_family = AF_INET;
			ep->addr.in.sin_port = htons(ep->port);
			return 0;
		}
	}
	/* Digits and dots only is a mistyped IPv4 address, not a name. */
	int numeric = 1;

	for (size_t i = 0; i < hl; i++)
		if (!((hs[i] >= '0' && hs[i] <= '9') || hs[i] == '.'))
			numeric = 0;
	if (numeric)
		return fail(err, errlen, "'%s' is not an IPv4 address", b);
	if (tlp_sni_host_check(hs, hl) < 0)
		return fail(err, errlen, "'%s': the host is neither an IP address nor a host name",
			    b);
	if (!allow_host)
		return fail(err, errlen,
			    "'%s': listen on a numeric IP address (host names are for servers)", b);
	ep->kind = TLP_EP_HOST;
	return 0;
}

int tlp_endpoint_same(const struct tlp_endpoint *a, const struct tlp_endpoint *b)
{
	if (!a || !b || a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case TLP_EP_IP:
		if (a->addr.sa.sa_family != b->addr.sa.sa_family || a->port != b->port)
			return 0;
		if (a->addr.sa.sa_family == AF_INET)
			return a->addr.in.sin_addr.s_addr == b->addr.in.sin_addr.s_addr;
		return !memcmp(&a->addr.in6.sin6_addr, &b->addr.in6.sin6_addr, 16);
	case TLP_EP_UNIX:
		return !strcmp(a->addr.un.sun_path, b->addr.un.sun_path);
	case TLP_EP_HOST:
		return a->port == b->port && a->host && b->host && !strcmp(a->host, b->host);
	default:
		return 0;
	}
}

/* The identity Maglev places a server by: its canonical address. */
static uint64_t ep_id(const struct tlp_endpoint *ep)
{
	uint8_t k[2 + 16 + 2];

	switch (ep->kind) {
	case TLP_EP_IP:
		memset(k, 0, sizeof k);
		k[0] = (uint8_t)ep->addr.sa.sa_family;
		if (ep->addr.sa.sa_family == AF_INET)
			memcpy(k + 2, &ep->addr.in.sin_addr, 4);
		else
			memcpy(k + 2, &ep->addr.in6.sin6_addr, 16);
		k[18] = (uint8_t)(ep->port >> 8);
		k[19] = (uint8_t)ep->port;
		return tlp_hash64(k, sizeof k, 1);
	case TLP_EP_HOST:
		return tlp_hash64(ep->host, strlen(ep->host), 2) ^ ep->port;
	default:
		return tlp_hash64(ep->addr.un.sun_path, strlen(ep->addr.un.sun_path), 3);
	}
}

/* Complete ep (from tlp_endpoint_parse) with copies of text and host. */
static int ep_own(struct ctx *c, struct tlp_endpoint *ep, const char *s, size_t len)
{
	char *t = zalloc(c, c->model, len + 1);

	if (!t)
		return -1;
	memcpy(t, s, len);
	ep->text = t;
	if (ep->kind == TLP_EP_HOST) {
		const char *colon = strrchr(t, ':');
		size_t hl = (size_t)(colon - t);
		char *h = zalloc(c, c->model, hl + 1);

		if (!h)
			return -1;
		for (size_t i = 0; i < hl; i++)
			h[i] = t[i] >= 'A' && t[i] <= 'Z' ? (char)(t[i] - 'A' + 'a') : t[i];
		ep->host = h;
	}
	return 0;
}

static int get_ep(struct ctx *c, const struct ynode *n, const char *path, int allow_host,
		  struct tlp_endpoint *ep)
{
	char why[200];

	if (scalar(c, n, path))
		return -1;
	if (tlp_endpoint_parse(n->s, n->len, allow_host, ep, why, sizeof why) < 0) {
		errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	return ep_own(c, ep, n->s, n->len);
}

/* A list of networks into a set (storage in the model). */
static int get_nets(struct ctx *c, const struct ynode *n, const char *path, struct tlp_netset *set)
{
	uint32_t count = item_count(n), k = 0;
	struct tlp_cidr *cidr;
	struct tlp_range4 *r4;
	struct tlp_range6 *r6;
	int bad = 0;

	if (n->kind == YN_MAP) {
		errat(c, n->line, n->col, "%s: expected a list of networks", path);
		return -1;
	}
	if (count > TLP_MAX_CIDRS) {
		errat(c, n->line, n->col, "%s: more than %d networks", path, TLP_MAX_CIDRS);
		return -1;
	}
	cidr = zalloc(c, c->tree, (count ? count : 1) * sizeof *cidr);
	r4 = zalloc(c, c->model, (count ? count : 1) * sizeof *r4);
	r6 = zalloc(c, c->model, (count ? count : 1) * sizeof *r6);
	if (!cidr || !r4 || !r6)
		return -1;
	for (const struct ynode *it = first_item(n); it; it = next_item(n, it), k++) {
		char p[256], why[200];

		PATH(p, "%s[%u]", path, k);
		if (scalar(c, it, p)) {
			bad = 1;
			continue;
		}
		if (tlp_cidr_parse(it->s, it->len, &cidr[k], why, sizeof why) < 0) {
			errat(c, it->line, it->col, "%s: %s", p, why);
			bad = 1;
		}
	}
	if (bad)
		return -1;
	if (tlp_netset_build(set, cidr, count, r4, r6) < 0) {
		errat(c, n->line, n->col, "%s: cannot build the network set", path);
		return -1;
	}
	return 0;
}

/* ---- the schema ---- */

static const char *const pp_names[] = {
	[TLP_PP_SEND_NONE] = "none", [TLP_PP_SEND_V1] = "v1", [TLP_PP_SEND_V2] = "v2"};

static const char *pp_name(int i)
{
	return pp_names[i];
}

static void pool_defaults(struct tlp_pool_cfg *p)
{
	p->balance = TLP_BAL_ROUNDROBIN;
	p->proxy_protocol = TLP_PP_SEND_NONE;
	p->retries = 2;
	p->resolve_interval_ns = R_RESOLVE.dflt;
	p->health.interval_ns = R_HEALTH_INTERVAL.dflt;
	p->health.timeout_ns = R_HEALTH_TIMEOUT.dflt;
	p->health.rise = 2;
	p->health.fall = 3;
	p->passive.failures = 3;
	p->passive.down_for_ns = R_DOWN_FOR.dflt;
}

static void listener_defaults(struct tlp_listener_cfg *l)
{
	l->pool = -1;
	l->sni_default = -1;
	l->sni_timeout_ns = R_SNI_TIMEOUT.dflt;
	l->queue_timeout_ns = R_QUEUE_TIMEOUT.dflt;
	l->connect_timeout_ns = R_CONNECT.dflt;
	l->idle_timeout_ns = R_IDLE.dflt;
	l->client_fin_ns = R_FIN.dflt;
	l->server_fin_ns = R_FIN.dflt;
	l->half_close = 1;
	l->socket.nodelay = 1;
	l->socket.ka_idle_s = (uint32_t)(R_KA_IDLE.dflt / SEC);
	l->socket.ka_interval_s = (uint32_t)(R_KA_INTERVAL.dflt / SEC);
	l->socket.ka_count = 5;
}

static void parse_health(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_health_cfg *h)
{
	static const char *const keys[] = {"interval", "timeout", "rise", "fall", "send", "expect"};
	const struct ynode *v[6];
	char p[256];

	if (take(c, n, path, keys, 6, v))
		return;
	h->enabled = 1;
	if (v[0] && (PATH(p, "%s.interval", path), 1))
		get_dur(c, v[0], p, R_HEALTH_INTERVAL, &h->interval_ns);
	if (v[1] && (PATH(p, "%s.timeout", path), 1) &&
	    !get_dur(c, v[1], p, R_HEALTH_TIMEOUT, &h->timeout_ns) &&
	    h->timeout_ns > h->interval_ns) {
		char a[32], b[32];

		errat(c, v[1]->line, v[1]->col, "%s: %s is longer than the interval (%s)", p,
		      fmt_dur(h->timeout_ns, a, sizeof a), fmt_dur(h->interval_ns, b, sizeof b));
	}
	if (v[2] && (PATH(p, "%s.rise", path), 1))
		get_uint(c, v[2], p, 1, 100, &h->rise);
	if (v[3] && (PATH(p, "%s.fall", path), 1))
		get_uint(c, v[3], p, 1, 100, &h->fall);
	if (v[4] && (PATH(p, "%s.send", path), 1))
		get_text(c, v[4], p, TLP_HEALTH_DATA_MAX, 1, &h->send, &h->send_len);
	if (v[5] && (PATH(p, "%s.expect", path), 1))
		get_text(c, v[5], p, TLP_HEALTH_DATA_MAX, 1, &h->expect, &h->expect_len);
}

static void parse_passive(struct ctx *c, const struct ynode *n, const char *path,
			  struct tlp_passive_cfg *ps)
{
	static const char *const keys[] = {"failures", "down_for"};
	const struct ynode *v[2];
	char p[256];

	if (take(c, n, path, keys, 2, v))
		return;
	ps->enabled = 1;
	if (v[0] && (PATH(p, "%s.failures", path), 1))
		get_uint(c, v[0], p, 1, 1000, &ps->failures);
	if (v[1] && (PATH(p, "%s.down_for", path), 1))
		get_dur(c, v[1], p, R_DOWN_FOR, &ps->down_for_ns);
}

static void parse_servers(struct ctx *c, const struct ynode *n, const char *path,
			  struct tlp_pool_cfg *pool)
{
	static const char *const keys[] = {"address", "weight", "max_conns"};
	const struct ynode **addr_node;
	uint32_t k = 0;

	if (is_list(c, n, path))
		return;
	if (n->count == 0) {
		errat(c, n->line, n->col, "%s: needs at least one server", path);
		return;
	}
	if (n->count > TLP_MAX_SERVERS) {
		errat(c, n->line, n->col, "%s: more than %d servers", path, TLP_MAX_SERVERS);
		return;
	}
	pool->servers = zalloc(c, c->model, n->count * sizeof *pool->servers);
	addr_node = zalloc(c, c->tree, n->count * sizeof *addr_node);
	if (!pool->servers || !addr_node)
		return;
	for (const struct ynode *it = n->child; it; it = it->next, k++) {
		struct tlp_server_cfg *s = &pool->servers[k];
		const struct ynode *v[3];
		char p[256], q[300];

		PATH(p, "%s[%u]", path, k);
		s->weight = 1;
		if (take(c, it, p, keys, 3, v))
			continue;
		if (!v[0]) {
			errat(c, it->line, it->col, "%s: address is required", p);
		} else if ((PATH(q, "%s.address", p), 1) && !get_ep(c, v[0], q, 1, &s->ep)) {
			s->id = ep_id(&s->ep);
			addr_node[k] = v[0];
			for (uint32_t j = 0; j < k; j++)
				if (addr_node[j] &&
				    tlp_endpoint_same(&pool->servers[j].ep, &s->ep)) {
					errat(c, v[0]->line, v[0]->col,
					      "%s: the same address as %s[%u] (line %u)", q, path,
					      j, addr_node[j]->line);
					break;
				}
		}
		if (v[1]) {
			PATH(q, "%s.weight", p);
			get_uint(c, v[1], q, 1, TLP_WEIGHT_MAX, &s->weight);
		}
		if (v[2] && (PATH(q, "%s.max_conns", p), 1))
			get_uint(c, v[2], q, 1, TLP_MAX_CONNS_LIMIT, &s->max_conns);
	}
	pool->nservers = n->count;
}

static void parse_pool(struct ctx *c, const struct ynode *n, const char *path,
		       struct tlp_pool_cfg *pool, const struct ynode **name_node)
{
	static const char *const keys[] = {"name",   "balance", "proxy_protocol", "retries",
					   "resolve_interval", "health", "passive", "servers"};
	const struct ynode *v[8];
	char p[256];

	pool_defaults(pool);
	*name_node = n;
	if (take(c, n, path, keys, 8, v))
		return;
	if (v[0])
		*name_node = v[0];
	if (!v[0])
		errat(c, n->line, n->col, "%s: name is required", path);
	else if ((PATH(p, "%s.name", path), 1))
		get_name(c, v[0], p, &pool->name);
	if (v[1] && (PATH(p, "%s.balance", path), 1))
		get_enum(c, v[1], p, tlp_bal_name, TLP_BAL_COUNT, &pool->balance);
	if (v[2] && (PATH(p, "%s.proxy_protocol", path), 1))
		get_enum(c, v[2], p, pp_name, 3, &pool->proxy_protocol);
	if (v[3] && (PATH(p, "%s.retries", path), 1))
		get_uint(c, v[3], p, 0, TLP_RETRIES_MAX, &pool->retries);
	if (v[4] && (PATH(p, "%s.resolve_interval", path), 1))
		get_dur(c, v[4], p, R_RESOLVE, &pool->resolve_interval_ns);
	if (v[5] && (PATH(p, "%s.health", path), 1))
		parse_health(c, v[5], p, &pool->health);
	if (v[6] && (PATH(p, "%s.passive", path), 1))
		parse_passive(c, v[6], p, &pool->passive);
	if (!v[7])
		errat(c, n->line, n->col, "%s: servers is required", path);
	else if ((PATH(p, "%s.servers", path), 1))
		parse_servers(c, v[7], p, pool);
}

/* The index of the pool named by n, or -1 (reported). */
static int32_t pool_ref(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
			const char *path)
{
	char b[SHOW + 4];

	if (scalar(c, n, path))
		return -1;
	for (uint32_t i = 0; i < cfg->npools; i++)
		if (cfg->pools[i].name && strlen(cfg->pools[i].name) == n->len &&
		    !memcmp(cfg->pools[i].name, n->s, n->len))
			return (int32_t)i;
	errat(c, n->line, n->col, "%s: no pool named '%s'", path, shown(n, b, sizeof b));
	return -1;
}

static void parse_sni(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
		      const char *path, struct tlp_listener_cfg *l)
{
	static const char *const keys[] = {"name", "pool"};
	const struct ynode **name_node;
	uint32_t k = 0;

	if (is_list(c, n, path))
		return;
	if (n->count > TLP_MAX_SNI_RULES) {
		errat(c, n->line, n->col, "%s: more than %d rules", path, TLP_MAX_SNI_RULES);
		return;
	}
	l->sni = zalloc(c, c->model, (n->count ? n->count : 1) * sizeof *l->sni);
	name_node = zalloc(c, c->tree, (n->count ? n->count : 1) * sizeof *name_node);
	if (!l->sni || !name_node)
		return;
	for (const struct ynode *it = n->child; it; it = it->next, k++) {
		struct tlp_sni_rule *r = &l->sni[k];
		const struct ynode *v[2];
		char p[256], q[300], b[SHOW + 4];

		PATH(p, "%s[%u]", path, k);
		r->target = UINT32_MAX;
		if (take(c, it, p, keys, 2, v))
			continue;
		if (!v[0]) {
			errat(c, it->line, it->col, "%s: name is required", p);
		} else if (!scalar(c, v[0], (PATH(q, "%s.name", p), q))) {
			if (tlp_sni_pattern_check(v[0]->s, v[0]->len) < 0) {
				errat(c, v[0]->line, v[0]->col,
				      "%s: '%s' is neither a host name nor *.host.name", q,
				      shown(v[0], b, sizeof b));
			} else {
				char *lc = zalloc(c, c->model, v[0]->len + 1);

				if (!lc)
					return;
				for (size_t i = 0; i < v[0]->len; i++) {
					char ch = v[0]->s[i];

					lc[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a')
								       : ch;
				}
				r->name = lc;
				r->len = (uint32_t)v[0]->len;
				name_node[k] = v[0];
				for (uint32_t j = 0; j < k; j++)
					if (l->sni[j].name && l->sni[j].len == r->len &&
					    !memcmp(l->sni[j].name, lc, r->len)) {
						errat(c, v[0]->line, v[0]->col,
						      "%s: '%s' is already a rule (line %u): this one "
						      "would never match",
						      q, lc, name_node[j]->line);
						break;
					}
			}
		}
		if (!v[1]) {
			errat(c, it->line, it->col, "%s: pool is required", p);
		} else {
			int32_t pi = pool_ref(c, cfg, v[1], (PATH(q, "%s.pool", p), q));

			if (pi >= 0)
				r->target = (uint32_t)pi;
		}
	}
	l->nsni = n->count;
}

static void parse_socket(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_socket_cfg *s)
{
	static const char *const keys[] = {"nodelay", "keepalive", "rcvbuf", "sndbuf"};
	static const char *const ka_keys[] = {"idle", "interval", "count"};
	const struct ynode *v[4], *kv[3];
	char p[256], q[300];

	if (take(c, n, path, keys, 4, v))
		return;
	if (v[0] && (PATH(p, "%s.nodelay", path), 1))
		get_bool(c, v[0], p, &s->nodelay);
	if (v[1]) {
		PATH(p, "%s.keepalive", path);
		if (v[1]->kind == YN_SCALAR) {
			get_bool(c, v[1], p, &s->keepalive);
		} else if (!take(c, v[1], p, ka_keys, 3, kv)) {
			s->keepalive = 1;
			if (kv[0] && (PATH(q, "%s.idle", p), 1))
				get_secs(c, kv[0], q, R_KA_IDLE, &s->ka_idle_s);
			if (kv[1] && (PATH(q, "%s.interval", p), 1))
				get_secs(c, kv[1], q, R_KA_INTERVAL, &s->ka_interval_s);
			if (kv[2] && (PATH(q, "%s.count", p), 1))
				get_uint(c, kv[2], q, 1, 127, &s->ka_count);
		}
	}
	if (v[2] && (PATH(p, "%s.rcvbuf", path), 1))
		get_size(c, v[2], p, 1u << 10, 256u << 20, &s->rcvbuf);
	if (v[3] && (PATH(p, "%s.sndbuf", path), 1))
		get_size(c, v[3], p, 1u << 10, 256u << 20, &s->sndbuf);
}

/* Every listen address seen so far, to refuse one used twice. */
struct seen_ep {
	const struct tlp_endpoint *ep;
	const struct ynode *node;
};

static void parse_listener(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
			   const char *path, struct tlp_listener_cfg *l, struct seen_ep *seen,
			   uint32_t *nseen, const struct ynode **name_node)
{
	static const char *const keys[] = {"name", "listen", "pool", "max_conns", "allow", "deny",
					   "proxy_protocol_from", "sni", "sni_default",
					   "sni_timeout", "queue", "timeouts", "socket", "splice",
					   "half_close"};
	enum { NAME, LISTEN, POOL, MAXC, ALLOW, DENY, PPFROM, SNI, SNIDEF, SNITO, QUEUE, TIMEOUTS,
	       SOCKET, SPLICE, HALFC, NKEYS };
	const struct ynode *v[NKEYS];
	char p[256];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	listener_defaults(l);
	*name_node = n;
	if (take(c, n, path, keys, NKEYS, v))
		return;
	if (v[NAME])
		*name_node = v[NAME];
	if (!v[NAME])
		errat(c, n->line, n->col, "%s: name is required", path);
	else if ((PATH(p, "%s.name", path), 1))
		get_name(c, v[NAME], p, &l->name);
	if (!v[LISTEN]) {
		errat(c, n->line, n->col, "%s: listen is required", path);
	} else {
		uint32_t count = item_count(v[LISTEN]), k = 0;

		PATH(p, "%s.listen", path);
		if (v[LISTEN]->kind == YN_MAP) {
			errat(c, v[LISTEN]->line, v[LISTEN]->col,
			      "%s: expected a list of addresses", p);
		} else if (count == 0) {
			errat(c, v[LISTEN]->line, v[LISTEN]->col, "%s: needs at least one address",
			      p);
		} else if (count > TLP_MAX_LISTEN) {
			errat(c, v[LISTEN]->line, v[LISTEN]->col, "%s: more than %d addresses", p,
			      TLP_MAX_LISTEN);
		} else if ((l->listen = zalloc(c, c->model, count * sizeof *l->listen))) {
			for (const struct ynode *it = first_item(v[LISTEN]); it;
			     it = next_item(v[LISTEN], it), k++) {
				char q[300];

				PATH(q, "%s[%u]", p, k);
				if (get_ep(c, it, q, 0, &l->listen[k]))
					continue;
				for (uint32_t j = 0; j < *nseen; j++)
					if (tlp_endpoint_same(seen[j].ep, &l->listen[k])) {
						char b[SHOW + 4];

						errat(c, it->line, it->col,
						      "%s: %s is already listened on (line %u)", q,
						      shown(it, b, sizeof b), seen[j].node->line);
						break;
					}
				seen[*nseen].ep = &l->listen[k];
				seen[*nseen].node = it;
				(*nseen)++;
			}
			l->nlisten = count;
		}
	}
	if (v[POOL] && (PATH(p, "%s.pool", path), 1))
		l->pool = pool_ref(c, cfg, v[POOL], p);
	if (v[MAXC] && (PATH(p, "%s.max_conns", path), 1))
		get_uint(c, v[MAXC], p, 1, TLP_MAX_CONNS_LIMIT, &l->max_conns);
	if (v[ALLOW] && (PATH(p, "%s.allow", path), 1))
		get_nets(c, v[ALLOW], p, &l->allow);
	if (v[DENY] && (PATH(p, "%s.deny", path), 1))
		get_nets(c, v[DENY], p, &l->deny);
	if (v[PPFROM] && (PATH(p, "%s.proxy_protocol_from", path), 1))
		get_nets(c, v[PPFROM], p, &l->proxy_from);
	if (v[SNI] && (PATH(p, "%s.sni", path), 1))
		parse_sni(c, cfg, v[SNI], p, l);
	if (v[SNIDEF]) {
		PATH(p, "%s.sni_default", path);
		if (!v[SNI])
			errat(c, v[SNIDEF]->line, v[SNIDEF]->col,
			      "%s: there are no sni rules for it to be the default of", p);
		else
			l->sni_default = pool_ref(c, cfg, v[SNIDEF], p);
	}
	if (v[SNITO]) {
		PATH(p, "%s.sni_timeout", path);
		if (!v[SNI])
			errat(c, v[SNITO]->line, v[SNITO]->col,
			      "%s: there are no sni rules: nothing waits for a ClientHello", p);
		else
			get_dur(c, v[SNITO], p, R_SNI_TIMEOUT, &l->sni_timeout_ns);
	}
	if (v[QUEUE]) {
		static const char *const qk[] = {"max", "timeout"};
		const struct ynode *qv[2];
		char q[300];

		PATH(p, "%s.queue", path);
		if (!take(c, v[QUEUE], p, qk, 2, qv)) {
			if (qv[0] && (PATH(q, "%s.max", p), 1))
				get_uint(c, qv[0], q, 0, 1000000, &l->queue_max);
			if (qv[1] && (PATH(q, "%s.timeout", p), 1))
				get_dur(c, qv[1], q, R_QUEUE_TIMEOUT, &l->queue_timeout_ns);
		}
	}
	if (v[TIMEOUTS]) {
		static const char *const tk[] = {"connect", "idle", "client_fin", "server_fin"};
		const struct ynode *tv[4];
		char q[300];

		PATH(p, "%s.timeouts", path);
		if (!take(c, v[TIMEOUTS], p, tk, 4, tv)) {
			if (tv[0] && (PATH(q, "%s.connect", p), 1))
				get_dur(c, tv[0], q, R_CONNECT, &l->connect_timeout_ns);
			if (tv[1] && (PATH(q, "%s.idle", p), 1))
				get_dur(c, tv[1], q, R_IDLE, &l->idle_timeout_ns);
			if (tv[2] && (PATH(q, "%s.client_fin", p), 1))
				get_dur(c, tv[2], q, R_FIN, &l->client_fin_ns);
			if (tv[3] && (PATH(q, "%s.server_fin", p), 1))
				get_dur(c, tv[3], q, R_FIN, &l->server_fin_ns);
		}
	}
	if (v[SOCKET] && (PATH(p, "%s.socket", path), 1))
		parse_socket(c, v[SOCKET], p, &l->socket);
	if (v[SPLICE] && (PATH(p, "%s.splice", path), 1))
		get_bool(c, v[SPLICE], p, &l->splice);
	if (v[HALFC] && (PATH(p, "%s.half_close", path), 1))
		get_bool(c, v[HALFC], p, &l->half_close);
	if (!v[POOL] && !v[SNI])
		errat(c, n->line, n->col, "%s: needs a pool (or sni rules) to send connections to",
		      path);
}

static void parse_top(struct ctx *c, const struct ynode *root, struct tlp_config *cfg)
{
	static const char *const keys[] = {"shards",     "cpus",         "user",
					   "admin",      "access_log",   "max_conns",
					   "listeners",  "pools",        "splice_pipes",
					   "splice_pipe_size", "admin_timeout"};
	enum { SHARDS, CPUS, USER, ADMIN, LOG, MAXC, LISTENERS, POOLS, SPIPES, SPSIZE, ADMINTO,
	       NKEYS };
	const struct ynode *v[NKEYS];
	char p[64];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	if (root->kind != YN_MAP) {
		if (root->kind != YN_ALIAS)
			errat(c, root->line, root->col,
			      "the config must be a mapping of keys (listeners:, pools:, ...)");
		return;
	}
	if (take(c, root, "", keys, NKEYS, v))
		return;
	if (v[SHARDS])
		get_uint(c, v[SHARDS], "shards", 1, 1024, &cfg->shards);
	if (v[CPUS] && !get_text(c, v[CPUS], "cpus", 4096, 0, &cfg->cpus, NULL)) {
		uint64_t mask[16];

		if (tl_cpulist_parse(cfg->cpus, mask, 16) < 0) {
			char b[SHOW + 4];

			errat(c, v[CPUS]->line, v[CPUS]->col,
			      "cpus: '%s' is not a CPU list below 1024 (like 0-3,6)",
			      shown(v[CPUS], b, sizeof b));
		}
		if (v[SHARDS])
			errat(c, v[CPUS]->line, v[CPUS]->col,
			      "cpus: give shards or cpus, not both (cpus sets the count too)");
	}
	if (v[USER] && !scalar(c, v[USER], "user")) {
		char b[SHOW + 4];

		if (!name_ok(v[USER]->s, v[USER]->len) || v[USER]->len > 32)
			errat(c, v[USER]->line, v[USER]->col,
			      "user: '%s' is not a user name (1 to 32 letters, digits, '_', '-', '.')",
			      shown(v[USER], b, sizeof b));
		else
			get_text(c, v[USER], "user", 32, 0, &cfg->user, NULL);
	}
	if (v[ADMIN])
		get_text(c, v[ADMIN], "admin", sizeof(((struct sockaddr_un *)0)->sun_path) - 1, 0,
			 &cfg->admin, NULL);
	if (v[ADMINTO]) {
		if (!v[ADMIN])
			errat(c, v[ADMINTO]->line, v[ADMINTO]->col,
			      "admin_timeout: there is no admin socket for it to apply to");
		else
			get_dur(c, v[ADMINTO], "admin_timeout", R_ADMIN_TIMEOUT,
				&cfg->admin_timeout_ns);
	}
	if (v[LOG])
		get_text(c, v[LOG], "access_log", 4095, 0, &cfg->access_log, NULL);
	if (v[MAXC])
		get_uint(c, v[MAXC], "max_conns", 1, TLP_MAX_CONNS_LIMIT, &cfg->max_conns);
	if (v[SPIPES])
		get_uint(c, v[SPIPES], "splice_pipes", 1, 4096, &cfg->splice_pipes);
	if (v[SPSIZE] && !get_size(c, v[SPSIZE], "splice_pipe_size", 4u << 10, 1u << 20,
				   &cfg->splice_pipe_size) &&
	    (cfg->splice_pipe_size & (cfg->splice_pipe_size - 1)))
		errat(c, v[SPSIZE]->line, v[SPSIZE]->col,
		      "splice_pipe_size: %u is not a power of two (4k, 8k, ... 1m)",
		      cfg->splice_pipe_size);

	/* Pools first: listeners name them. */
	if (!v[POOLS]) {
		errat(c, root->line, root->col, "pools: at least one pool is required");
	} else if (!is_list(c, v[POOLS], "pools")) {
		const struct ynode *pn = v[POOLS];
		const struct ynode **name_node;
		uint32_t k = 0;

		if (pn->count == 0 || pn->count > TLP_MAX_POOLS) {
			errat(c, pn->line, pn->col, "pools: needs 1 to %d pools", TLP_MAX_POOLS);
		} else if ((cfg->pools = zalloc(c, c->model, pn->count * sizeof *cfg->pools)) &&
			   (name_node = zalloc(c, c->tree, pn->count * sizeof *name_node))) {
			cfg->npools = pn->count;
			for (const struct ynode *it = pn->child; it; it = it->next, k++) {
				PATH(p, "pools[%u]", k);
				parse_pool(c, it, p, &cfg->pools[k], &name_node[k]);
				if (!cfg->pools[k].name)
					continue;
				for (uint32_t j = 0; j < k; j++)
					if (cfg->pools[j].name &&
					    !strcmp(cfg->pools[j].name, cfg->pools[k].name)) {
						errat(c, name_node[k]->line, name_node[k]->col,
						      "pools[%u].name: '%s' is already the name of pools[%u] "
						      "(line %u)",
						      k, cfg->pools[k].name, j, name_node[j]->line);
						/* References find the first one. */
						cfg->pools[k].name = NULL;
						break;
					}
			}
		}
	}
	if (!v[LISTENERS]) {
		errat(c, root->line, root->col, "listeners: at least one listener is required");
	} else if (!is_list(c, v[LISTENERS], "listeners")) {
		const struct ynode *ln = v[LISTENERS], *name_node = NULL;
		struct seen_ep *seen;
		uint32_t k = 0, nseen = 0;

		if (ln->count == 0 || ln->count > TLP_MAX_LISTENERS) {
			errat(c, ln->line, ln->col, "listeners: needs 1 to %d listeners",
			      TLP_MAX_LISTENERS);
		} else if ((cfg->listeners =
				    zalloc(c, c->model, ln->count * sizeof *cfg->listeners)) &&
			   (seen = zalloc(c, c->tree,
					  (size_t)ln->count * TLP_MAX_LISTEN * sizeof *seen))) {
			cfg->nlisteners = ln->count;
			for (const struct ynode *it = ln->child; it; it = it->next, k++) {
				PATH(p, "listeners[%u]", k);
				parse_listener(c, cfg, it, p, &cfg->listeners[k], seen, &nseen,
					       &name_node);
				for (uint32_t j = 0; j < k; j++)
					if (cfg->listeners[k].name && cfg->listeners[j].name &&
					    !strcmp(cfg->listeners[j].name,
						    cfg->listeners[k].name)) {
						errat(c, name_node->line, name_node->col,
						      "listeners[%u].name: '%s' is already the name of "
						      "listeners[%u]",
						      k, cfg->listeners[k].name, j);
						break;
					}
			}
		}
	}
}

/* A file name for messages, which are one line each whatever the file is
 * called: unprintable bytes as '?', cut to cap - 1. */
static const char *clean_name(const char *s, char *buf, size_t cap)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < cap; i++)
		buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

static struct tlp_config *new_config(struct tlp_arena **arena)
{
	struct tlp_config *cfg;

	*arena = calloc(1, sizeof **arena);
	if (!*arena)
		return NULL;
	cfg = arena_alloc(*arena, sizeof *cfg);
	if (!cfg) {
		arena_free(*arena);
		*arena = NULL;
		return NULL;
	}
	cfg->arena = *arena;
	cfg->admin_timeout_ns = R_ADMIN_TIMEOUT.dflt;
	return cfg;
}

static void note_nomem(struct ctx *c)
{
	struct tlp_diag *d = c->diag;

	if (d && d->count < TLP_CFG_MAX_ERRORS) {
		struct tlp_diag_entry *e = &d->e[d->count++];

		e->line = 0;
		e->col = 0;
		snprintf(e->text, sizeof e->text, "%s: out of memory", c->name);
	}
	if (d)
		d->total++;
}

int tlp_config_parse(const char *text, size_t len, const char *name, struct tlp_config **out,
		     struct tlp_diag *diag)
{
	char clean[200];
	struct ctx c = {.diag = diag,
			.name = clean_name(name ? name : "config", clean, sizeof clean)};
	struct tlp_arena *model = NULL;
	struct tlp_config *cfg;
	struct ynode *root;
	int empty;

	if (diag)
		memset(diag, 0, sizeof *diag);
	if (out)
		*out = NULL;
	if (!out || (!text && len))
		return -EINVAL;
	c.tree = calloc(1, sizeof *c.tree);
	cfg = new_config(&model);
	if (!c.tree || !cfg) {
		free(c.tree);
		arena_free(model);
		note_nomem(&c);
		return -ENOMEM;
	}
	c.model = model;
	root = load_tree(&c, text ? text : "", len, &empty);
	/* "---" alone is a document holding one empty value. */
	if (root && root->kind == YN_SCALAR && root->len == 0) {
		root = NULL;
		empty = 1;
	}
	if (root)
		parse_top(&c, root, cfg);
	else if (empty && !c.errors && !c.nomem)
		errat(&c, 1, 1, "the config is empty (it needs listeners and pools)");
	arena_free(c.tree);
	if (c.nomem) {
		arena_free(model);
		note_nomem(&c);
		return -ENOMEM;
	}
	if (c.errors) {
		arena_free(model);
		return -EINVAL;
	}
	*out = cfg;
	return 0;
}

int tlp_config_load(const char *path, struct tlp_config **out, struct tlp_diag *diag)
{
	struct tlp_diag local;
	struct stat st;
	char *text, shown[200];
	size_t got = 0;
	int fd, r;

	if (!diag)
		diag = &local;
	memset(diag, 0, sizeof *diag);
	if (out)
		*out = NULL;
	if (!path || !out)
		return -EINVAL;
	clean_name(path, shown, sizeof shown);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown, strerror(-r));
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TLP_CONFIG_FILE_MAX) {
		close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown,
			 S_ISREG(st.st_mode) ? "larger than 4 MiB" : "not a regular file");
		return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: out of memory", shown);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			free(text);
			close(fd);
			diag->total = diag->count = 1;
			snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown,
				 n < 0 ? strerror(-r) : "file shrank while being read");
			return r;
		}
		got += (size_t)n;
	}
	close(fd);
	r = tlp_config_parse(text, got, path, out, diag);
	free(text);
	return r;
}

void tlp_config_free(struct tlp_config *c)
{
	if (c)
		arena_free(c->arena);
}

/* ---- the command line ---- */

const char *tlp_args_usage(void)
{
	/* The methods' names come from the balancer table; written once. */
	static char text[1024];
	char names[160];

	if (!text[0]) {
		tlp_bal_list(names, sizeof names, "|", "|");
		snprintf(text, sizeof text,
			 "usage: tlproxy --listen HOST:PORT --upstream HOST:PORT[,HOST:PORT...]\n"
			 "               [--shards N | --cpus LIST] [--balance %s]\n"
			 "               [--proxy-protocol none|v1|v2] [--splice] [--splice-pipes N]\n"
			 "               [--splice-pipe-size SIZE] [--max-conns N]\n"
			 "               [--connect-timeout D] [--idle-timeout D] [--half-close on|off]\n"
			 "       tlproxy --config FILE\n"
			 "       tlproxy --check FILE\n"
			 "durations D take a unit: 500ms, 2s, 1m, 1h\n",
			 names);
	}
	return text;
}

static int args_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -1;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > hi)
			return -1;
	}
	if (v < lo)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int args_dur(const char *opt, const char *s, struct dur_range r, uint64_t *out, char *err,
		    size_t errlen)
{
	char why[160], a[32], b[32];

	if (tlp_duration_parse(s, strlen(s), out, why, sizeof why) < 0)
		return fail(err, errlen, "%s: %s", opt, why);
	if (*out < r.lo || *out > r.hi)
		return fail(err, errlen, "%s: out of range (%s to %s)", opt,
			    fmt_dur(r.lo, a, sizeof a), fmt_dur(r.hi, b, sizeof b));
	return 0;
}

int tlp_args_parse(int argc, char **argv, struct tlp_args *a, char *err, size_t errlen)
{
	struct tlp_endpoint listen[TLP_MAX_LISTEN], *up = NULL;
	const char *listen_text[TLP_MAX_LISTEN];
	const char *path = NULL, *path_opt = NULL, *cpus = NULL;
	uint32_t nlisten = 0, nup = 0, shards = 0, max_conns = 0, spipes = 0, spsize = 0;
	int balance = TLP_BAL_ROUNDROBIN, pp = TLP_PP_SEND_NONE, splice = 0, other = 0, r;
	int half_close = 1;
	uint64_t connect = R_CONNECT.dflt, idle = R_IDLE.dflt;
	struct {
		const char *s;
		size_t len;
	} *up_text = NULL;
	char why[200], shown[SHOW + 4];

	if (err && errlen)
		err[0] = '\0';
	if (!a || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(a, 0, sizeof *a);
	up = calloc(TLP_MAX_SERVERS, sizeof *up);
	up_text = calloc(TLP_MAX_SERVERS, sizeof *up_text);
	if (!up || !up_text) {
		free(up);
		free(up_text);
		if (err && errlen)
			snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = -EINVAL;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v;

		if (!o) {
			fail(err, errlen, "missing argument %d", i);
			goto out;
		}
		if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
			r = 1;
			goto out;
		}
		if (!strcmp(o, "--splice")) {
			splice = 1;
			other = 1;
			continue;
		}
		v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fail(err, errlen, "%s needs a value",
			     clip(o, strlen(o), shown, sizeof shown));
			goto out;
		}
		i++;
		if (!strcmp(o, "--config") || !strcmp(o, "--check")) {
			if (path) {
				fail(err, errlen, "%s: only one of --config and --check, once", o);
				goto out;
			}
			if (!*v) {
				fail(err, errlen, "%s needs a file name", o);
				goto out;
			}
			path = v;
			path_opt = o;
			a->check = !strcmp(o, "--check");
			continue;
		}
		other = 1;
		if (!strcmp(o, "--listen")) {
			if (nlisten == TLP_MAX_LISTEN) {
				fail(err, errlen, "--listen: more than %d addresses",
				     TLP_MAX_LISTEN);
				goto out;
			}
			if (tlp_endpoint_parse(v, strlen(v), 0, &listen[nlisten], why,
					       sizeof why) < 0) {
				fail(err, errlen, "--listen: %s", why);
				goto out;
			}
			for (uint32_t j = 0; j < nlisten; j++)
				if (tlp_endpoint_same(&listen[j], &listen[nlisten])) {
					fail(err, errlen, "--listen: %s given twice",
					     clip(v, strlen(v), shown, sizeof shown));
					goto out;
				}
			listen_text[nlisten++] = v;
		} else if (!strcmp(o, "--upstream")) {
			const char *s = v;

			for (;;) {
				const char *comma = strchr(s, ',');
				size_t l = comma ? (size_t)(comma - s) : strlen(s);

				if (nup == TLP_MAX_SERVERS) {
					fail(err, errlen, "--upstream: more than %d servers",
					     TLP_MAX_SERVERS);
					goto out;
				}
				if (tlp_endpoint_parse(s, l, 1, &up[nup], why, sizeof why) < 0) {
					fail(err, errlen, "--upstream: %s", why);
					goto out;
				}
				up_text[nup].s = s;
				up_text[nup].len = l;
				/* Hosts compare lowercased, as the model keeps them. */
				if (up[nup].kind == TLP_EP_HOST) {
					for (uint32_t j = 0; j < nup; j++) {
						if (up[j].kind != TLP_EP_HOST ||
						    up[j].port != up[nup].port ||
						    up_text[j].len != l)
							continue;
						size_t k = 0;

						while (k < l &&
						       (up_text[j].s[k] | 0x20) == (s[k] | 0x20))
							k++;
						if (k == l) {
							fail(err, errlen,
							     "--upstream: %s given twice",
							     clip(s, l, shown, sizeof shown));
							goto out;
						}
					}
				} else {
					for (uint32_t j = 0; j < nup; j++)
						if (tlp_endpoint_same(&up[j], &up[nup])) {
							fail(err, errlen,
							     "--upstream: %s given twice",
							     clip(s, l, shown, sizeof shown));
							goto out;
						}
				}
				nup++;
				if (!comma)
					break;
				s = comma + 1;
			}
		} else if (!strcmp(o, "--shards")) {
			if (args_u32(v, 1, 1024, &shards)) {
				fail(err, errlen, "--shards: '%s' is not 1 to 1024",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
		} else if (!strcmp(o, "--cpus")) {
			uint64_t mask[16];

			if (tl_cpulist_parse(v, mask, 16) < 0) {
				fail(err, errlen,
				     "--cpus: '%s' is not a CPU list below 1024 (like 0-3,6)",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			cpus = v;
		} else if (!strcmp(o, "--balance")) {
			int k = tlp_bal_by_name(v, strlen(v));
			char names[160];

			if (k < 0) {
				tlp_bal_list(names, sizeof names, ", ", " or ");
				fail(err, errlen, "--balance: '%s' is not %s",
				     clip(v, strlen(v), shown, sizeof shown), names);
				goto out;
			}
			balance = k;
		} else if (!strcmp(o, "--proxy-protocol")) {
			int k;

			for (k = 0; k < 3 && strcmp(v, pp_names[k]); k++)
				;
			if (k == 3) {
				fail(err, errlen, "--proxy-protocol: '%s' is not none, v1 or v2",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			pp = k;
		} else if (!strcmp(o, "--max-conns")) {
			if (args_u32(v, 1, TLP_MAX_CONNS_LIMIT, &max_conns)) {
				fail(err, errlen, "--max-conns: '%s' is not 1 to %u",
				     clip(v, strlen(v), shown, sizeof shown),
				     TLP_MAX_CONNS_LIMIT);
				goto out;
			}
		} else if (!strcmp(o, "--splice-pipes")) {
			if (args_u32(v, 1, 4096, &spipes)) {
				fail(err, errlen, "--splice-pipes: '%s' is not 1 to 4096",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
		} else if (!strcmp(o, "--splice-pipe-size")) {
			uint64_t b;

			if (tlp_size_parse(v, strlen(v), &b, why, sizeof why) < 0 || b < (4u << 10) ||
			    b > (1u << 20) || (b & (b - 1))) {
				fail(err, errlen,
				     "--splice-pipe-size: '%s' is not a power of two from 4k to 1m",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			spsize = (uint32_t)b;
		} else if (!strcmp(o, "--connect-timeout")) {
			if (args_dur(o, v, R_CONNECT, &connect, err, errlen))
				goto out;
		} else if (!strcmp(o, "--idle-timeout")) {
			if (args_dur(o, v, R_IDLE, &idle, err, errlen))
				goto out;
		} else if (!strcmp(o, "--half-close")) {
			if (strcmp(v, "on") && strcmp(v, "off")) {
				fail(err, errlen, "--half-close: '%s' is not on or off",
				     clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			half_close = !strcmp(v, "on");
		} else {
			fail(err, errlen, "unknown option '%s'",
			     clip(o, strlen(o), shown, sizeof shown));
			goto out;
		}
	}
	if (path) {
		if (other) {
			fail(err, errlen, "%s takes no other options (put them in the file)",
			     path_opt);
			goto out;
		}
		a->config_path = path;
		r = 0;
		goto out;
	}
	if (shards && cpus) {
		fail(err, errlen, "--shards and --cpus: give one (--cpus sets the count too)");
		goto out;
	}
	if (!nlisten) {
		fail(err, errlen, "--listen HOST:PORT is required (or --config FILE)");
		goto out;
	}
	if (!nup) {
		fail(err, errlen, "--upstream HOST:PORT is required (or --config FILE)");
		goto out;
	}

	/* Build the model as the YAML path would. */
	{
		struct tlp_arena *arena;
		struct tlp_config *cfg = new_config(&arena);
		struct ctx c = {.name = "args"};
		struct tlp_listener_cfg *l;
		struct tlp_pool_cfg *pool;

		if (!cfg)
			goto nomem;
		c.model = arena;
		cfg->shards = shards;
		cfg->max_conns = max_conns;
		cfg->splice_pipes = spipes;
		cfg->splice_pipe_size = spsize;
		cfg->nlisteners = 1;
		cfg->npools = 1;
		cfg->listeners = l = zalloc(&c, arena, sizeof *l);
		cfg->pools = pool = zalloc(&c, arena, sizeof *pool);
		if (cpus && (cfg->cpus = zalloc(&c, arena, strlen(cpus) + 1)))
			memcpy((char *)cfg->cpus, cpus, strlen(cpus));
		if (c.nomem)
			goto nomem_cfg;
		listener_defaults(l);
		pool_defaults(pool);
		l->name = "default";
		pool->name = "default";
		l->pool = 0;
		l->connect_timeout_ns = connect;
		l->idle_timeout_ns = idle;
		l->splice = splice;
		l->half_close = half_close;
		pool->balance = balance;
		pool->proxy_protocol = pp;
		l->listen = zalloc(&c, arena, nlisten * sizeof *l->listen);
		pool->servers = zalloc(&c, arena, nup * sizeof *pool->servers);
		if (c.nomem)
			goto nomem_cfg;
		for (uint32_t k = 0; k < nlisten; k++) {
			l->listen[k] = listen[k];
			if (ep_own(&c, &l->listen[k], listen_text[k], strlen(listen_text[k])))
				goto nomem_cfg;
		}
		l->nlisten = nlisten;
		for (uint32_t k = 0; k < nup; k++) {
			struct tlp_server_cfg *s = &pool->servers[k];

			s->ep = up[k];
			if (ep_own(&c, &s->ep, up_text[k].s, up_text[k].len))
				goto nomem_cfg;
			s->weight = 1;
			s->id = ep_id(&s->ep);
		}
		pool->nservers = nup;
		a->cfg = cfg;
		r = 0;
		goto out;
nomem_cfg:
		tlp_config_free(cfg);
	}
nomem:
	if (err && errlen)
		snprintf(err, errlen, "out of memory");
	r = -ENOMEM;
out:
	free(up);
	free(up_text);
	if (r != 0) {
		a->cfg = NULL;
		a->config_path = NULL;
		a->check = 0;
		if (r == 1 && err && errlen)
			err[0] = '\0';
	}
	return r;
}
