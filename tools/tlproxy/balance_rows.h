/* tools/tlproxy/balance_rows.h: private to the balancing files: the functions each algorithm's file gives its row of tlp_bal_ops, and the helpers they share. */
#ifndef TLP_BALANCE_ROWS_H
#define TLP_BALANCE_ROWS_H

#include "balance.h"

/* The splitmix64 finalizer (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", 2014): every input bit reaches every
 * output bit. */
static inline uint64_t tlp__mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* s and n unfit for a pick: s NULL with n > 0, or n too large. */
static inline int tlp__bal_bad_table(const struct tlp_bal_server *s, uint32_t n)
{
	return (!s && n) || n > TLP_BAL_MAX_SERVERS;
}

/* What a pick returns when it found nothing: -ENOBUFS if a server outside
 * avoid is up (full), else -EHOSTUNREACH. */
int tlp__bal_none(const struct tlp_bal_server *s, uint32_t n, const struct tlp_avoid *avoid);

/* balance_swrr.c: roundrobin and weighted. */
int tlp__bal_swrr_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid);

/* balance_leastconn.c: leastconn. */
int tlp__bal_leastconn_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid);

/* balance_maglev.c: hash. */
int tlp__bal_maglev_build(struct tlp_bal_table *t, const struct tlp_bal_server *s, uint32_t n);
void tlp__bal_maglev_free(struct tlp_bal_table *t);
int tlp__bal_maglev_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid);

#endif /* TLP_BALANCE_ROWS_H */
