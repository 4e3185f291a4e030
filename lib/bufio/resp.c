/* lib/bufio/resp.c: the Redis protocol's requests, read from a tl_rbuf without copying (turnloop/resp.h), on the public API only. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include "turnloop/resp.h"

/* A line "<t><digits>\r\n" of at most 16 bytes at p[*i..n), its number at
 * most max: 1 (and *v), 0 when not all of it is here, -1 when bad. The
 * general case; line() below reads the one- and two-digit lines. */
static __attribute__((noinline)) int line_slow(const uint8_t *p, uint32_t n, uint32_t *i, char t, uint32_t max,
					       uint32_t *v) {
	const uint8_t *s = p + *i, *e = s + (n - *i < 16 ? n - *i : 16), *d = s + 1;
	uint64_t x = 0; /* 15 digits at most: no overflow */
	unsigned dg;
	if (s == e)
		return 0;
	if (*s != t)
		return -1;
	for (; d < e && (dg = (unsigned)*d - '0') <= 9; d++)
		x = x * 10 + dg;
	if (d + 1 >= e) /* the line goes on past what is here: bad already, or not yet */
		return (d < e && *d != '\r') || x > max || e - s == 16 ? -1 : 0;
	if (d == s + 1 || x > max || d[0] != '\r' || d[1] != '\n')
		return -1;
	*v = (uint32_t)x;
	*i = (uint32_t)(d + 2 - p);
	return 1;
}

/* line_slow's answer, the one- and two-digit lines (nearly every count and
 * key length) read at once: the general loop cost about a sixth of a GET's
 * instructions at -P 16. */
static inline __attribute__((always_inline)) int line(const uint8_t *p, uint32_t n, uint32_t *i, char t,
							uint32_t max, uint32_t *v) {
	const uint8_t *s = p + *i;
	uint32_t left = n - *i;
	unsigned d1, d2;
	if (left >= 4 && s[0] == (uint8_t)t && (d1 = (unsigned)s[1] - '0') <= 9) {
		if (s[2] == '\r' && s[3] == '\n' && d1 <= max)
			return *v = d1, *i += 4, 1;
		if (left >= 5 && (d2 = (unsigned)s[2] - '0') <= 9 && s[3] == '\r' && s[4] == '\n' && d1 * 10 + d2 <= max)
			return *v = d1 * 10 + d2, *i += 5, 1;
	}
	return line_slow(p, n, i, t, max, v);
}

/* One command from p[0..n): its length, av[0..*ac) pointing into p; 0 when
 * not whole yet (*need: the bytes it takes at least, more than n); or a
 * negative errno (resp.h). An empty line is a command of no arguments. */
static int parse(const uint8_t *p, uint32_t n, uint32_t max_args, uint32_t max_len, tl_resp_arg *av, uint32_t *ac,
		 uint32_t *need) {
	uint32_t i = 0, cnt = 0, len = 0, k;
	int r;
	if (n >= 2 && p[0] == '\r' && p[1] == '\n')
		return *ac = 0, 2;
	if (n == 1 && p[0] == '\r') /* perhaps an empty line, cut by the read */
		return *need = 2, 0;
	if (p[0] != '*')
		return -EBADMSG;
	if ((r = line(p, n, &i, '*', max_args, &cnt)) == 0)
		return *need = n + 1, 0;
	if (r < 0 || cnt == 0)
		return -ERANGE;
	for (k = 0; k < cnt; k++, i += len + 2) {
		if ((r = line(p, n, &i, '$', max_len, &len)) < 0)
			return -EILSEQ;
		if (r == 0 || n - i < len + 2) { /* each argument after this one takes 6 bytes or more */
			*need = (r ? i + len + 2 : n + 1) + 6 * (cnt - k - 1);
			return 0;
		}
		if (p[i + len] != '\r' || p[i + len + 1] != '\n')
			return -EILSEQ;
		av[k] = (tl_resp_arg){p + i, len};
	}
	*ac = cnt;
	return (int)i;
}

int tl_resp_init(tl_resp *s, tl_rbuf *rd, uint32_t max_args, uint32_t max_len) {
	if (!s || !rd || max_args == 0 || max_args > 1u << 20 || max_len > 1u << 30)
		return -EINVAL;
	*s = (tl_resp){.rd = rd, .need = 1, .max_args = max_args, .max_len = max_len};
	return 0;
}

int tl_resp_next(tl_resp *s, tl_resp_arg *av, uint32_t *ac) {
	int rc;
	if (!s || !av || !ac || !s->rd)
		return -EINVAL;
	for (;;) {
		if (s->off == s->n) { /* the view is used up, the command goes on past it, or an error */
			if (s->err)
				return s->err;
			tl_resp_consume(s);
			if ((rc = tl_rbuf_peek(s->rd, s->need, &s->p)) <= 0)
				return rc < 0 ? (s->err = rc) : 0;
			s->n = (uint32_t)rc;
		}
		if ((rc = parse(s->p + s->off, s->n - s->off, s->max_args, s->max_len, av, ac, &s->need)) > 0) {
			s->used = (uint32_t)rc;
			if (*ac)
				return 1;
			tl_resp_done(s); /* an empty line */
		} else if (rc < 0) {
			s->err = rc;
			s->n = s->off; /* every later call: the error */
		} else { /* not whole here: ask the reader for what it needs */
			tl_resp_consume(s);
		}
	}
}

void tl_resp_done(tl_resp *s) {
	if (!s || !s->used)
		return;
	s->off += s->used;
	s->used = 0;
	s->need = 1;
}

void tl_resp_consume(tl_resp *s) {
	if (!s || !s->rd || !s->p)
		return;
	tl_rbuf_consume(s->rd, s->off);
	s->p = NULL;
	s->off = s->n = s->used = 0;
}

const char *tl_resp_error_reply(int code) {
	switch (code) {
	case -EBADMSG: return "-ERR Protocol error: expected '*' (no inline commands)\r\n";
	case -ERANGE: return "-ERR Protocol error: invalid multibulk length\r\n";
	case -EILSEQ: return "-ERR Protocol error: invalid bulk length\r\n";
	case -EMSGSIZE: return "-ERR Protocol error: command too long\r\n";
	case -ENOENT: return "-ERR unknown command\r\n";
	case -EDOM: return "-ERR wrong number of arguments\r\n";
	default: return NULL;
	}
}

uint32_t tl_resp_num(uint8_t *out, char type, int64_t v) {
	char d[24], *e = d + sizeof d;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	uint32_t n;
	do
		*--e = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--e = '-';
	*--e = type;
	n = (uint32_t)(d + sizeof d - e);
	memcpy(out, e, n);
	memcpy(out + n, "\r\n", 2);
	return n + 2;
}

int tl_resp_num_parse(const uint8_t *p, uint32_t n, int64_t *v) {
	uint32_t neg, i;
	uint64_t x = 0, lim;
	if (!p || !v)
		return -EINVAL;
	neg = n && p[0] == '-';
	lim = (uint64_t)INT64_MAX + neg;
	if (n == neg)
		return -EINVAL;
	for (i = neg; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		if (x > (lim - (uint64_t)(p[i] - '0')) / 10)
			return -ERANGE;
		x = x * 10 + (uint64_t)(p[i] - '0');
	}
	*v = neg ? (int64_t)(0 - x) : (int64_t)x;
	return 0;
}

/* The name, folded to lower case, as two words against each entry's (a
 * byte loop over names of any length cost 35 instructions a GET more). */
int tl_resp_command_find(const tl_resp_arg *av, uint32_t ac, const void *table, uint32_t n, size_t stride) {
	uint8_t f[16] = {0};
	uint64_t w[2], e[2];
	uint32_t len, i, j;
	if (!av || !table || stride < sizeof(tl_resp_command))
		return -EINVAL;
	if (!ac || (len = av[0].n) == 0 || len > 15)
		return -ENOENT;
	for (j = 0; j < len; j++) /* A-Z as a-z, branch-free */
		f[j] = (uint8_t)(av[0].p[j] | ((uint8_t)(av[0].p[j] - 'A') < 26) << 5);
	memcpy(w, f, 16);
	for (i = 0; i < n; i++) {
		const tl_resp_command *k = (const tl_resp_command *)(const void *)((const char *)table + i * stride);
		memcpy(e, k->name, 16);
		if (e[0] != w[0] || e[1] != w[1])
			continue;
		if (!k->name[len - 1])
			break; /* a name shorter than the command's, which has a 0 byte ("get\0" is no "get") */
		return (k->arity >= 0 ? ac == (uint32_t)k->arity : ac >= (uint32_t)-k->arity) ? (int)i : -EDOM;
	}
	return -ENOENT;
}

uint32_t tl_resp_bulk(uint8_t *out, const void *p, uint32_t n) {
	uint32_t h = tl_resp_num(out, '$', n);
	memcpy(out + h, p, n);
	memcpy(out + h + n, "\r\n", 2);
	return h + n + 2;
}
