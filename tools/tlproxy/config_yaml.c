/* tools/tlproxy/config_yaml.c: tlproxy's config, the YAML reader: libyaml's events into a tree (in an arena), the errors with their line and column, and the typed readers of the tree's values. */
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

#include "config_int.h"
#include "../reason.h"

/* ---- arena ---- */


void *tlp__arena_alloc(struct tlp_arena *a, size_t n)
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

void tlp__arena_free(struct tlp_arena *a)
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



void tlp__errat(struct ctx *c, uint32_t line, uint32_t col, const char *fmt, ...)
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

void *tlp__zalloc(struct ctx *c, struct tlp_arena *a, size_t n)
{
	void *p = tlp__arena_alloc(a, n);

	if (!p)
		c->nomem = 1;
	return p;
}

/* ---- the YAML tree ---- */


static struct ynode *new_node(struct ctx *c, int kind, yaml_mark_t m)
{
	struct ynode *n = tlp__zalloc(c, c->tree, sizeof *n);

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
		tlp__errat(c, (uint32_t)m.line + 1, (uint32_t)m.column + 1,
		      "anchors (&%.*s) are not supported: write the value out", SHOW,
		      (const char *)anchor);
}

/* Read the whole stream into a tree; NULL on a syntax error or no memory
 * (both reported) or an empty stream (*empty set). */
struct ynode *tlp__load_tree(struct ctx *c, const char *text, size_t len, int *empty)
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

				tlp__errat(c, (uint32_t)m.line + 1, (uint32_t)m.column + 1,
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
				tlp__errat(c, (uint32_t)ev.start_mark.line + 1,
				      (uint32_t)ev.start_mark.column + 1,
				      "a second YAML document: the config is one document");
				ok = 0;
				done = 1;
			}
			break;
		case YAML_ALIAS_EVENT:
			tlp__errat(c, (uint32_t)ev.start_mark.line + 1,
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
				n->s = tlp__zalloc(c, c->tree, n->len + 1);
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
					tlp__errat(c, n->line, n->col, "nested deeper than %d levels",
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
const char *tlp__shown(const struct ynode *n, char *buf, size_t cap)
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
int tlp__scalar(struct ctx *c, const struct ynode *n, const char *path)
{
	if (!n)
		return -1;
	if (n->kind == YN_ALIAS)
		return -1; /* already reported */
	if (n->kind != YN_SCALAR) {
		tlp__errat(c, n->line, n->col, "%s: expected a single value, not a %s", path,
		      n->kind == YN_MAP ? "mapping" : "list");
		return -1;
	}
	if (!n->s)
		return -1;
	if (n->len == 0) {
		tlp__errat(c, n->line, n->col, "%s: needs a value", path);
		return -1;
	}
	return 0;
}

int tlp__get_uint(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		  uint64_t hi, uint32_t *out)
{
	char b[SHOW + 4];
	uint64_t v = 0;

	if (tlp__scalar(c, n, path))
		return -1;
	for (size_t i = 0; i < n->len; i++) {
		if (n->s[i] < '0' || n->s[i] > '9') {
			tlp__errat(c, n->line, n->col, "%s: '%s' is not a whole number", path,
			      tlp__shown(n, b, sizeof b));
			return -1;
		}
		v = v * 10 + (uint64_t)(n->s[i] - '0');
		if (v > hi)
			break;
	}
	if (v < lo || v > hi) {
		tlp__errat(c, n->line, n->col, "%s: %s is out of range (%llu to %llu)", path,
		      tlp__shown(n, b, sizeof b), (unsigned long long)lo, (unsigned long long)hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

int tlp__get_bool(struct ctx *c, const struct ynode *n, const char *path, int *out)
{
	char b[SHOW + 4];

	if (tlp__scalar(c, n, path))
		return -1;
	if (n->len == 4 && !memcmp(n->s, "true", 4)) {
		*out = 1;
		return 0;
	}
	if (n->len == 5 && !memcmp(n->s, "false", 5)) {
		*out = 0;
		return 0;
	}
	tlp__errat(c, n->line, n->col, "%s: '%s' is not true or false", path, tlp__shown(n, b, sizeof b));
	return -1;
}

/* A duration for messages: the largest unit that divides it. */
const char *tlp__fmt_dur(uint64_t ns, char *buf, size_t cap)
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

int tlp__get_dur(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		 uint64_t *out)
{
	char why[160], a[32], b[32];
	uint64_t v;

	if (tlp__scalar(c, n, path))
		return -1;
	if (tlp_duration_parse(n->s, n->len, &v, why, sizeof why) < 0) {
		tlp__errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	if (v < r.lo || v > r.hi) {
		char s[SHOW + 4];

		tlp__errat(c, n->line, n->col, "%s: %s is out of range (%s to %s)", path,
		      tlp__shown(n, s, sizeof s), tlp__fmt_dur(r.lo, a, sizeof a),
		      tlp__fmt_dur(r.hi, b, sizeof b));
		return -1;
	}
	*out = v;
	return 0;
}

/* Keepalive times: whole seconds, since the socket options take seconds. */
int tlp__get_secs(struct ctx *c, const struct ynode *n, const char *path, struct dur_range r,
		  uint32_t *out)
{
	uint64_t v;

	if (tlp__get_dur(c, n, path, r, &v))
		return -1;
	if (v % SEC) {
		char s[SHOW + 4];

		tlp__errat(c, n->line, n->col,
		      "%s: %s is not whole seconds (the socket option takes seconds)", path,
		      tlp__shown(n, s, sizeof s));
		return -1;
	}
	*out = (uint32_t)(v / SEC);
	return 0;
}

int tlp__get_size(struct ctx *c, const struct ynode *n, const char *path, uint64_t lo,
		  uint64_t hi, uint32_t *out)
{
	char why[160], s[SHOW + 4];
	uint64_t v;

	if (tlp__scalar(c, n, path))
		return -1;
	if (tlp_size_parse(n->s, n->len, &v, why, sizeof why) < 0) {
		tlp__errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	if (v < lo || v > hi) {
		tlp__errat(c, n->line, n->col, "%s: %s is out of range (%lluk to %llum)", path,
		      tlp__shown(n, s, sizeof s), (unsigned long long)(lo >> 10),
		      (unsigned long long)(hi >> 20));
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* A string copied into the model; NUL bytes only if allow_nul. */
int tlp__get_text(struct ctx *c, const struct ynode *n, const char *path, size_t max,
		  int allow_nul, const char **out, uint32_t *outlen)
{
	char *s;

	if (tlp__scalar(c, n, path))
		return -1;
	if (n->len > max) {
		tlp__errat(c, n->line, n->col, "%s: longer than %zu bytes", path, max);
		return -1;
	}
	if (!allow_nul && memchr(n->s, '\0', n->len)) {
		tlp__errat(c, n->line, n->col, "%s: contains a NUL byte", path);
		return -1;
	}
	s = tlp__zalloc(c, c->model, n->len + 1);
	if (!s)
		return -1;
	memcpy(s, n->s, n->len);
	*out = s;
	if (outlen)
		*outlen = (uint32_t)n->len;
	return 0;
}

int tlp__name_ok(const char *s, size_t len)
{
	if (len == 0 || len > TLP_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

int tlp__get_name(struct ctx *c, const struct ynode *n, const char *path, const char **out)
{
	char b[SHOW + 4];

	if (tlp__scalar(c, n, path))
		return -1;
	if (!tlp__name_ok(n->s, n->len)) {
		tlp__errat(c, n->line, n->col,
		      "%s: '%s' is not a name (1 to %d letters, digits, '_', '-', '.')", path,
		      tlp__shown(n, b, sizeof b), TLP_NAME_MAX);
		return -1;
	}
	return tlp__get_text(c, n, path, TLP_NAME_MAX, 0, out, NULL);
}

int tlp__get_enum(struct ctx *c, const struct ynode *n, const char *path,
		  const char *(*name)(int), int count, int *out)
{
	char b[SHOW + 4], list[160];
	size_t k = 0;

	if (tlp__scalar(c, n, path))
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
	tlp__errat(c, n->line, n->col, "%s: '%s' is not one of: %s", path,
		   tlp__shown(n, b, sizeof b), list);
	return -1;
}

/*
 * The values of map n's keys, by the order of keys[], into vals[] (NULL
 * where absent); unknown, repeated and non-scalar keys are reported.
 * Returns 0, or -1 (reported) when n is not a mapping.
 */
int tlp__take(struct ctx *c, const struct ynode *n, const char *path, const char *const *keys,
	      size_t nk, const struct ynode **vals)
{
	for (size_t i = 0; i < nk; i++)
		vals[i] = NULL;
	if (!n || n->kind == YN_ALIAS)
		return -1;
	if (n->kind != YN_MAP) {
		tlp__errat(c, n->line, n->col, "%s: expected a mapping (key: value, ...)", path);
		return -1;
	}
	for (const struct ynode *k = n->child; k && k->next; k = k->next->next) {
		const struct ynode *v = k->next;
		char b[SHOW + 4], list[200];
		size_t i, w = 0;

		if (k->kind != YN_SCALAR || !k->s) {
			if (k->kind != YN_ALIAS)
				tlp__errat(c, k->line, k->col, "%s%sa key must be a plain word", path,
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
			tlp__errat(c, k->line, k->col, "%s%sunknown key '%s' (known here: %s)", path,
			      *path ? ": " : "", tlp__shown(k, b, sizeof b), list);
			continue;
		}
		if (vals[i]) {
			tlp__errat(c, k->line, k->col, "%s%s%s: given twice (first on line %u)", path,
			      *path ? "." : "", keys[i], vals[i]->line);
			continue;
		}
		vals[i] = v;
	}
	return 0;
}

/* Items of a list; a single value counts as a list of one. */
const struct ynode *tlp__first_item(const struct ynode *n)
{
	if (!n)
		return NULL;
	return n->kind == YN_SEQ ? n->child : n;
}

uint32_t tlp__item_count(const struct ynode *n)
{
	if (!n)
		return 0;
	return n->kind == YN_SEQ ? n->count : 1;
}

const struct ynode *tlp__next_item(const struct ynode *list, const struct ynode *it)
{
	return list->kind == YN_SEQ ? it->next : NULL;
}

/* A list's items must be lists of what was expected. */
int tlp__is_list(struct ctx *c, const struct ynode *n, const char *path)
{
	if (n->kind == YN_SEQ)
		return 0;
	if (n->kind != YN_ALIAS)
		tlp__errat(c, n->line, n->col, "%s: expected a list", path);
	return -1;
}


void tlp__mkpath(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}
