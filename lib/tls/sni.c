/* lib/tls/sni.c: the SNI map: names parsed, normalized, sorted and looked up (see sni.h for the rules). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "sni.h"

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Normalize n[0..len) into out (lowercase, no trailing dot); returns its
 * length, or -1 when it is not a valid name (wild: a leading "*." allowed,
 * and set when present). */
static int normalize(const char *n, size_t len, char *out, int allow_wild, int *wild)
{
	size_t o = 0, label = 0;

	*wild = 0;
	if (len && n[len - 1] == '.')
		len--;
	if (len == 0 || len > TLS_SNI_NAME_MAX)
		return -1;
	if (allow_wild && len >= 2 && n[0] == '*' && n[1] == '.') {
		*wild = 1;
		n += 2;
		len -= 2;
		if (len == 0)
			return -1;
	}
	for (size_t i = 0; i < len; i++) {
		int c = lower((unsigned char)n[i]);
		if (c == '.') {
			if (label == 0)
				return -1;
			label = 0;
		} else if (name_char(c)) {
			if (++label > 63)
				return -1;
		} else {
			return -1;
		}
		out[o++] = (char)c;
	}
	if (label == 0)
		return -1;
	return (int)o;
}

static int push(struct tls_sni_entry **v, uint32_t *n, uint32_t *cap, struct tls_sni_entry e)
{
	if (*n == *cap) {
		uint32_t nc = *cap ? *cap * 2 : 16;
		struct tls_sni_entry *nv = realloc(*v, nc * sizeof *nv);
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = e;
	return 0;
}

int tls_sni_add(struct tls_sni_map *m, const char *list, size_t len, uint32_t cert, char *bad)
{
	size_t i = 0, used0 = m->used;
	uint32_t nexact0 = m->nexact, nwild0 = m->nwild;
	int r = 0;

	while (i <= len) {
		size_t a = i, b;
		while (i < len && list[i] != ',')
			i++;
		b = i++;
		while (a < b && (list[a] == ' ' || list[a] == '\t'))
			a++;
		while (b > a && (list[b - 1] == ' ' || list[b - 1] == '\t'))
			b--;
		char norm[TLS_SNI_NAME_MAX + 1];
		int wild, nl = normalize(list + a, b - a, norm, 1, &wild);
		if (nl < 0) {
			if (bad) {
				size_t bl = b - a > TLS_SNI_NAME_MAX ? TLS_SNI_NAME_MAX : b - a;
				memcpy(bad, list + a, bl);
				bad[bl] = '\0';
			}
			r = -EINVAL;
			break;
		}
		if (m->used + (size_t)nl > m->size) {
			size_t ns = m->size ? m->size * 2 : 1024;
			while (ns < m->used + (size_t)nl)
				ns *= 2;
			char *nn = realloc(m->names, ns);
			if (!nn) {
				r = -ENOMEM;
				break;
			}
			m->names = nn;
			m->size = ns;
		}
		memcpy(m->names + m->used, norm, (size_t)nl);
		struct tls_sni_entry e = {.off = (uint32_t)m->used, .len = (uint32_t)nl, .cert = cert};
		m->used += (size_t)nl;
		r = wild ? push(&m->wild, &m->nwild, &m->cap_wild, e)
			 : push(&m->exact, &m->nexact, &m->cap_exact, e);
		if (r < 0)
			break;
	}
	if (r < 0) { /* all of the list or none of it */
		m->used = used0;
		m->nexact = nexact0;
		m->nwild = nwild0;
	}
	return r;
}

/* qsort has no context argument: the names being sorted, for cmp_entry (per
 * thread: configs are made on pool workers at once). */
static __thread const char *sorting;

static int cmp(const char *a, uint32_t al, const char *b, uint32_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

static int cmp_entry(const void *x, const void *y)
{
	const struct tls_sni_entry *a = x, *b = y;
	int c = cmp(sorting + a->off, a->len, sorting + b->off, b->len);
	/* equal names: the first certificate first, so that it wins */
	return c ? c : (a->cert > b->cert) - (a->cert < b->cert);
}

void tls_sni_seal(struct tls_sni_map *m)
{
	sorting = m->names;
	if (m->nexact)
		qsort(m->exact, m->nexact, sizeof *m->exact, cmp_entry);
	if (m->nwild)
		qsort(m->wild, m->nwild, sizeof *m->wild, cmp_entry);
	sorting = NULL;
}

/* The first entry of v[0..n) named k[0..kl), or -1. */
static int64_t find(const struct tls_sni_map *m, const struct tls_sni_entry *v, uint32_t n,
		    const char *k, uint32_t kl)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (cmp(m->names + v[mid].off, v[mid].len, k, kl) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < n && cmp(m->names + v[lo].off, v[lo].len, k, kl) == 0)
		return v[lo].cert;
	return -1;
}

int64_t tls_sni_lookup(const struct tls_sni_map *m, const char *name, size_t len)
{
	char norm[TLS_SNI_NAME_MAX + 1];
	int wild, nl = normalize(name, len, norm, 0, &wild);
	int64_t r;

	if (nl < 0)
		return -1;
	if ((r = find(m, m->exact, m->nexact, norm, (uint32_t)nl)) >= 0)
		return r;
	const char *dot = memchr(norm, '.', (size_t)nl);
	if (!dot)
		return -1;
	return find(m, m->wild, m->nwild, dot + 1, (uint32_t)(norm + nl - dot - 1));
}

void tls_sni_free(struct tls_sni_map *m)
{
	free(m->exact);
	free(m->wild);
	free(m->names);
	memset(m, 0, sizeof *m);
}
