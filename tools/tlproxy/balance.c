/* tools/tlproxy/balance.c: the table of balancing algorithms and what every row shares: the pool balancer that calls through it, avoid sets, names, and the hashes of keys (see balance.h). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance_rows.h"

/* ---- the table ---- */

const struct tlp_bal_ops tlp_bal_ops[] = {
	[TLP_BAL_ROUNDROBIN] = {.name = "roundrobin", .pick = tlp__bal_swrr_pick},
	[TLP_BAL_WEIGHTED] = {.name = "weighted", .pick = tlp__bal_swrr_pick},
	[TLP_BAL_LEASTCONN] = {.name = "leastconn",
			       .needs = TLP_BAL_NEEDS_CONNS,
			       .pick = tlp__bal_leastconn_pick},
	[TLP_BAL_HASH] = {.name = "hash",
			  .needs = TLP_BAL_NEEDS_KEY,
			  .build = tlp__bal_maglev_build,
			  .free = tlp__bal_maglev_free,
			  .pick = tlp__bal_maglev_pick},
};
_Static_assert(sizeof tlp_bal_ops / sizeof tlp_bal_ops[0] == TLP_BAL_COUNT,
	       "tlp_bal_ops has a row per enum tlp_balance");

static const struct tlp_bal_ops *row(int method)
{
	return method >= 0 && method < TLP_BAL_COUNT ? &tlp_bal_ops[method] : NULL;
}

const char *tlp_bal_name(int method)
{
	return row(method) ? tlp_bal_ops[method].name : NULL;
}

int tlp_bal_by_name(const char *s, size_t len)
{
	for (int i = 0; s && i < TLP_BAL_COUNT; i++)
		if (strlen(tlp_bal_ops[i].name) == len && !memcmp(tlp_bal_ops[i].name, s, len))
			return i;
	return -EINVAL;
}

int tlp_bal_list(char *buf, size_t size, const char *sep, const char *last_sep)
{
	size_t k = 0;

	if (size)
		buf[0] = '\0';
	for (int i = 0; i < TLP_BAL_COUNT; i++) {
		const char *before = i == 0 ? "" : i == TLP_BAL_COUNT - 1 ? last_sep : sep;
		int w = snprintf(k < size ? buf + k : NULL, k < size ? size - k : 0, "%s%s",
				 before, tlp_bal_ops[i].name);

		if (w < 0)
			return w;
		k += (size_t)w;
	}
	return (int)k;
}

/* ---- avoid sets ---- */

int tlp_avoid_init(struct tlp_avoid *a, uint32_t n)
{
	if (!a)
		return -EINVAL;
	memset(a, 0, sizeof *a);
	if (n > TLP_BAL_MAX_SERVERS)
		return -EINVAL;
	if (n && !(a->bits = calloc((n + 63) / 64, sizeof *a->bits)))
		return -ENOMEM;
	a->n = n;
	return 0;
}

void tlp_avoid_free(struct tlp_avoid *a)
{
	if (!a)
		return;
	free(a->bits);
	memset(a, 0, sizeof *a);
}

int tlp_avoid_add(struct tlp_avoid *a, uint32_t i)
{
	uint64_t bit = 1ull << (i & 63);

	if (!a || i >= a->n || (a->bits[i >> 6] & bit))
		return 0;
	a->bits[i >> 6] |= bit;
	a->count++;
	return 1;
}

void tlp_avoid_del(struct tlp_avoid *a, uint32_t i)
{
	uint64_t bit = 1ull << (i & 63);

	if (!a || i >= a->n || !(a->bits[i >> 6] & bit))
		return;
	a->bits[i >> 6] &= ~bit;
	a->count--;
}

int tlp__bal_none(const struct tlp_bal_server *s, uint32_t n, const struct tlp_avoid *avoid)
{
	for (uint32_t i = 0; i < n; i++)
		if (s[i].state == TLP_SRV_UP && !tlp_avoid_has(avoid, i))
			return -ENOBUFS;
	return -EHOSTUNREACH;
}

/* ---- a pool's balancer ---- */

static int bad_servers(const struct tlp_bal_server *srv, uint32_t n)
{
	if (tlp__bal_bad_table(srv, n))
		return 1;
	for (uint32_t i = 0; i < n; i++)
		if (srv[i].weight < 1 || srv[i].weight > TLP_WEIGHT_MAX)
			return 1;
	return 0;
}

int tlp_bal_build(int method, struct tlp_bal_table *t, const struct tlp_bal_server *s,
		  uint32_t n)
{
	if (!t)
		return -EINVAL;
	memset(t, 0, sizeof *t);
	if (!row(method) || bad_servers(s, n))
		return -EINVAL;
	return tlp_bal_ops[method].build ? tlp_bal_ops[method].build(t, s, n) : 0;
}

void tlp_bal_table_free(int method, struct tlp_bal_table *t)
{
	if (!t)
		return;
	if (row(method) && tlp_bal_ops[method].free)
		tlp_bal_ops[method].free(t);
	memset(t, 0, sizeof *t);
}

int tlp_bal_attach(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n,
		   const struct tlp_bal_table *tab)
{
	if (!b)
		return -EINVAL;
	memset(b, 0, sizeof *b);
	if (!row(method) || bad_servers(srv, n) || (!tab && tlp_bal_ops[method].build))
		return -EINVAL;
	b->method = method;
	b->srv = srv;
	b->n = n;
	b->tab = tab ? tab : &b->own;
	return 0;
}

int tlp_bal_init(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n)
{
	int r;

	if (!b)
		return -EINVAL;
	memset(b, 0, sizeof *b);
	if (!row(method) || bad_servers(srv, n))
		return -EINVAL;
	r = tlp_bal_build(method, &b->own, srv, n);
	if (r < 0)
		return r;
	b->method = method;
	b->srv = srv;
	b->n = n;
	b->tab = &b->own;
	return 0;
}

int tlp_bal_update(struct tlp_balancer *b)
{
	if (!b)
		return -EINVAL;
	if (b->tab != &b->own || !row(b->method) || !tlp_bal_ops[b->method].build)
		return 0;
	return tlp_bal_ops[b->method].build(&b->own, b->srv, b->n);
}

int tlp_bal_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid)
{
	if (!b || !row(b->method))
		return -EINVAL;
	return tlp_bal_ops[b->method].pick(b, key, avoid);
}

void tlp_bal_free(struct tlp_balancer *b)
{
	if (!b)
		return;
	if (b->tab == &b->own)
		tlp_bal_table_free(b->method, &b->own);
	memset(b, 0, sizeof *b);
}

/* ---- hashing ---- */

uint64_t tlp_hash64(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = tlp__mix64(seed ^ (uint64_t)n ^ 0x9e3779b97f4a7c15ull);

	if (!p)
		n = 0;
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, b, 8);
		h = tlp__mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
		b += 8;
		n -= 8;
	}
	if (n) {
		uint64_t w = 0;

		memcpy(&w, b, n);
		h = tlp__mix64(h ^ w ^ (uint64_t)n << 59);
	}
	return tlp__mix64(h);
}

uint64_t tlp_hash_addr(const struct sockaddr *sa)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (sa && sa->sa_family == AF_INET)
		return tlp_hash64(&((const struct sockaddr_in *)sa)->sin_addr, 4, 4);
	if (sa && sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (!memcmp(a, mapped, 12))
			return tlp_hash64(a + 12, 4, 4);
		return tlp_hash64(a, 16, 6);
	}
	return tlp_hash64(NULL, 0, 0);
}
