/* tools/tlproxy/balance.c: server picks (smooth weighted round robin, least connections, Maglev) and the hashes they use (see balance.h). */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"

#define EMPTY 0xffffu

/* ---- hashing ---- */

/* The splitmix64 finalizer (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", 2014): every input bit reaches every
 * output bit. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

uint64_t tlp_hash64(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = mix(seed ^ (uint64_t)n ^ 0x9e3779b97f4a7c15ull);

	if (!p)
		n = 0;
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, b, 8);
		h = mix(h ^ w) + 0x9e3779b97f4a7c15ull;
		b += 8;
		n -= 8;
	}
	if (n) {
		uint64_t w = 0;

		memcpy(&w, b, n);
		h = mix(h ^ w ^ (uint64_t)n << 59);
	}
	return mix(h);
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

/* ---- picks ---- */

static int bad_table(const struct tlp_bal_server *s, uint32_t n)
{
	return (!s && n) || n > TLP_BAL_MAX_SERVERS;
}

/* Nothing usable: -ENOBUFS if something is up (full), else -EHOSTUNREACH. */
static int none(const struct tlp_bal_server *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (s[i].state == TLP_SRV_UP)
			return -ENOBUFS;
	return -EHOSTUNREACH;
}

int tlp_pick_swrr(struct tlp_bal_server *s, uint32_t n)
{
	int64_t total = 0;
	int best = -1;

	if (bad_table(s, n))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!tlp_bal_usable(&s[i]))
			continue;
		s[i].cw += s[i].weight;
		total += s[i].weight;
		if (best < 0 || s[i].cw > s[best].cw)
			best = (int)i;
	}
	if (best < 0)
		return none(s, n);
	s[best].cw -= total;
	return best;
}

int tlp_pick_leastconn(const struct tlp_bal_server *s, uint32_t n, uint32_t *cursor)
{
	uint32_t start;
	int best = -1;

	if (bad_table(s, n) || !cursor)
		return -EINVAL;
	start = n ? *cursor % n : 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = start + k < n ? start + k : start + k - n;

		if (!tlp_bal_usable(&s[i]))
			continue;
		/* Strictly better only: among equals the first after the
		 * cursor stays, which is what makes them take turns. */
		if (best < 0 || s[i].conns < s[best].conns ||
		    (s[i].conns == s[best].conns && s[i].weight > s[best].weight))
			best = (int)i;
	}
	if (best < 0)
		return none(s, n);
	*cursor = (uint32_t)best + 1 < n ? (uint32_t)best + 1 : 0;
	return best;
}

/* ---- Maglev ---- */

static int is_prime(uint32_t v)
{
	if (v < 2)
		return 0;
	for (uint32_t d = 2; (uint64_t)d * d <= v; d++)
		if (v % d == 0)
			return 0;
	return 1;
}

int tlp_maglev_init(struct tlp_maglev *m, uint32_t size)
{
	if (!m)
		return -EINVAL;
	memset(m, 0, sizeof *m);
	if (size == 0)
		size = TLP_MAGLEV_SIZE;
	if (size < 3 || size > (1u << 24) || !is_prime(size))
		return -EINVAL;
	m->slot = malloc((size_t)size * sizeof *m->slot);
	if (!m->slot)
		return -ENOMEM;
	for (uint32_t i = 0; i < size; i++)
		m->slot[i] = EMPTY;
	m->size = size;
	return 0;
}

int tlp_maglev_build(struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n)
{
	struct perm {
		uint32_t pos, skip, server, weight;
	} *p;
	uint16_t *next;
	uint32_t up = 0, filled = 0, size;

	if (!m || !m->slot || bad_table(s, n))
		return -EINVAL;
	size = m->size;
	for (uint32_t i = 0; i < n; i++) {
		if (s[i].weight < 1 || s[i].weight > TLP_WEIGHT_MAX)
			return -EINVAL;
		if (s[i].state == TLP_SRV_UP)
			up++;
	}
	if (up > size)
		return -EINVAL;
	p = up ? malloc(up * sizeof *p) : NULL;
	next = malloc((size_t)size * sizeof *next);
	if ((up && !p) || !next) {
		free(p);
		free(next);
		return -ENOMEM;
	}
	up = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (s[i].state != TLP_SRV_UP)
			continue;
		/* Two independent hashes of the identity: where the server's
		 * permutation starts and its stride (1..size-1, coprime to the
		 * prime size, so the permutation visits every slot). */
		p[up].pos = (uint32_t)(tlp_hash64(&s[i].id, 8, 0x6d61676c) % size);
		p[up].skip = (uint32_t)(tlp_hash64(&s[i].id, 8, 0x65762121) % (size - 1)) + 1;
		p[up].server = i;
		p[up].weight = s[i].weight;
		up++;
	}
	for (uint32_t i = 0; i < size; i++)
		next[i] = EMPTY;
	while (up && filled < size) {
		for (uint32_t k = 0; k < up && filled < size; k++) {
			for (uint32_t w = 0; w < p[k].weight && filled < size; w++) {
				while (next[p[k].pos] != EMPTY) {
					p[k].pos += p[k].skip;
					if (p[k].pos >= size)
						p[k].pos -= size;
				}
				next[p[k].pos] = (uint16_t)p[k].server;
				filled++;
			}
		}
	}
	free(p);
	free(m->slot);
	m->slot = next;
	m->n = n;
	m->placed = up;
	return (int)up;
}

int tlp_maglev_pick(const struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n,
		    uint64_t key)
{
	uint32_t slot, first;

	if (!m || !m->slot || bad_table(s, n) || n != m->n)
		return -EINVAL;
	if (!n)
		return -EHOSTUNREACH;
	slot = (uint32_t)(mix(key) % m->size);
	first = m->slot[slot];
	if (first != EMPTY && tlp_bal_usable(&s[first]))
		return (int)first;
	for (uint32_t k = 1; k <= TLP_MAGLEV_PROBES && k < m->size; k++) {
		uint32_t j = slot + k < m->size ? slot + k : slot + k - m->size;
		uint32_t i = m->slot[j];

		if (i != EMPTY && tlp_bal_usable(&s[i]))
			return (int)i;
	}
	/* Everything nearby is out: walk the servers themselves, which also
	 * finds a server that came up after the build. */
	first = first == EMPTY ? 0 : first + 1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = (first + k) % n;

		if (tlp_bal_usable(&s[i]))
			return (int)i;
	}
	return none(s, n);
}

void tlp_maglev_free(struct tlp_maglev *m)
{
	if (!m)
		return;
	free(m->slot);
	memset(m, 0, sizeof *m);
}

/* ---- a pool's balancer ---- */

int tlp_bal_init(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n)
{
	int r;

	if (!b)
		return -EINVAL;
	memset(b, 0, sizeof *b);
	if (method < 0 || method >= TLP_BAL_COUNT || bad_table(srv, n))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (srv[i].weight < 1 || srv[i].weight > TLP_WEIGHT_MAX)
			return -EINVAL;
	b->method = method;
	b->srv = srv;
	b->n = n;
	if (method != TLP_BAL_HASH)
		return 0;
	r = tlp_maglev_init(&b->mg, TLP_MAGLEV_SIZE);
	if (r < 0)
		return r;
	r = tlp_maglev_build(&b->mg, srv, n);
	if (r < 0) {
		tlp_maglev_free(&b->mg);
		return r;
	}
	return 0;
}

int tlp_bal_update(struct tlp_balancer *b)
{
	int r;

	if (!b)
		return -EINVAL;
	if (b->method != TLP_BAL_HASH)
		return 0;
	r = tlp_maglev_build(&b->mg, b->srv, b->n);
	return r < 0 ? r : 0;
}

int tlp_bal_pick(struct tlp_balancer *b, uint64_t key)
{
	if (!b)
		return -EINVAL;
	switch (b->method) {
	case TLP_BAL_ROUNDROBIN:
	case TLP_BAL_WEIGHTED:
		return tlp_pick_swrr(b->srv, b->n);
	case TLP_BAL_LEASTCONN:
		return tlp_pick_leastconn(b->srv, b->n, &b->cursor);
	case TLP_BAL_HASH:
		return tlp_maglev_pick(&b->mg, b->srv, b->n, key);
	default:
		return -EINVAL;
	}
}

void tlp_bal_free(struct tlp_balancer *b)
{
	if (!b)
		return;
	tlp_maglev_free(&b->mg);
	memset(b, 0, sizeof *b);
}
