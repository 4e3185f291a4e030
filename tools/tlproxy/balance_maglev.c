/* tools/tlproxy/balance_maglev.c: Maglev consistent hashing (the hash row of the balancer table; see balance.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "balance_rows.h"

#define EMPTY 0xffffu

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

	if (!m || !m->slot || tlp__bal_bad_table(s, n))
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
		    uint64_t key, const struct tlp_avoid *avoid)
{
	uint32_t slot, first;

	if (!m || !m->slot || tlp__bal_bad_table(s, n) || n != m->n)
		return -EINVAL;
	if (!n)
		return -EHOSTUNREACH;
	slot = (uint32_t)(tlp__mix64(key) % m->size);
	first = m->slot[slot];
	if (first != EMPTY && tlp_bal_can(s, first, avoid))
		return (int)first;
	for (uint32_t k = 1; k <= TLP_MAGLEV_PROBES && k < m->size; k++) {
		uint32_t j = slot + k < m->size ? slot + k : slot + k - m->size;
		uint32_t i = m->slot[j];

		if (i != EMPTY && tlp_bal_can(s, i, avoid))
			return (int)i;
	}
	/* Everything nearby is out: walk the servers themselves, which also
	 * finds a server that came up after the build. */
	first = first == EMPTY ? 0 : first + 1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = (first + k) % n;

		if (tlp_bal_can(s, i, avoid))
			return (int)i;
	}
	return tlp__bal_none(s, n, avoid);
}

void tlp_maglev_free(struct tlp_maglev *m)
{
	if (!m)
		return;
	free(m->slot);
	memset(m, 0, sizeof *m);
}

/* ---- the hash row ---- */

int tlp__bal_maglev_build(struct tlp_bal_table *t, const struct tlp_bal_server *s, uint32_t n)
{
	int r, fresh = !t->mg.slot;

	if (fresh && (r = tlp_maglev_init(&t->mg, TLP_MAGLEV_SIZE)) < 0)
		return r;
	r = tlp_maglev_build(&t->mg, s, n);
	if (r < 0 && fresh)
		tlp_maglev_free(&t->mg);
	return r < 0 ? r : 0;
}

void tlp__bal_maglev_free(struct tlp_bal_table *t)
{
	tlp_maglev_free(&t->mg);
}

int tlp__bal_maglev_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid)
{
	return tlp_maglev_pick(&b->tab->mg, b->srv, b->n, key, avoid);
}
