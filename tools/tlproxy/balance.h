/* tools/tlproxy/balance.h: which server of a pool takes the next connection: smooth weighted round robin, least connections and Maglev consistent hashing, as functions over a server table. */
#ifndef TLP_BALANCE_H
#define TLP_BALANCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum tlp_balance {
	TLP_BAL_ROUNDROBIN = 0, /* smooth weighted round robin (as nginx does it); with
				 * equal weights, each usable server in turn */
	TLP_BAL_WEIGHTED,       /* the same algorithm, under the name that says so */
	TLP_BAL_LEASTCONN,      /* fewest current connections */
	TLP_BAL_HASH,           /* Maglev consistent hashing of a key (the client address) */
	TLP_BAL_COUNT
};

enum tlp_srv_state {
	TLP_SRV_UP = 0, /* takes new connections */
	TLP_SRV_DOWN,   /* failed its checks: takes none */
	TLP_SRV_DRAIN,  /* being taken out by the operator: takes none, keeps its own */
};

#define TLP_WEIGHT_MAX 256
/* Servers a table may hold (Maglev keeps 16-bit indexes, 0xffff is empty). */
#define TLP_BAL_MAX_SERVERS 65535
/* The Maglev lookup table's default size: a prime well above 100 times the
 * servers of a large pool, so that shares stay within about 1% of weights. */
#define TLP_MAGLEV_SIZE 65537
/* Table slots a Maglev pick tries after its own before it walks the table
 * of servers (which it does only when these are all unusable too). */
#define TLP_MAGLEV_PROBES 32

/*
 * One server as the balancer sees it. The caller owns the table: it keeps
 * conns up to date (one more when a connection to the server is made, one
 * less when it ends), sets state from health checks, and may change weight
 * and max_conns (then calls tlp_bal_update for a hash pool).
 */
struct tlp_bal_server {
	uint64_t id;        /* stable identity (tlp_hash64 of the address text): Maglev
			     * places a server by it, not by its index, so the others keep
			     * their keys when one is added or removed */
	uint32_t weight;    /* 1..TLP_WEIGHT_MAX */
	uint32_t max_conns; /* 0 = no limit */
	uint32_t conns;     /* current connections */
	uint8_t state;      /* enum tlp_srv_state */
	int64_t cw;         /* smooth weighted round robin's running weight; start at 0 */
};

/* Can s take a new connection now: up, and below its max_conns? */
static inline int tlp_bal_usable(const struct tlp_bal_server *s)
{
	return s->state == TLP_SRV_UP && (s->max_conns == 0 || s->conns < s->max_conns);
}

/*
 * The picks. Each skips servers that are not usable (down, draining, or at
 * max_conns) and takes the next one by its rule; none allocates.
 * Each returns the index of the chosen server (0..n-1), or:
 *   -ENOBUFS      no server usable but some are up (all full): queue the
 *                 connection and try again when one ends;
 *   -EHOSTUNREACH no server is up (n == 0 included): fail now;
 *   -EINVAL       s NULL with n > 0, n > TLP_BAL_MAX_SERVERS, or (where
 *                 taken) cursor NULL.
 * They do not count the connection: the caller adds one to conns.
 */

/*
 * Smooth weighted round robin: every usable server's cw grows by its
 * weight, the largest cw wins (the lowest index on ties) and gives back the
 * sum of the weights that grew. Over any run of picks with the same usable
 * set, server i is chosen weight_i times in every sum-of-weights picks, and
 * the choices are spread out rather than in bursts. Updates s[].cw.
 */
int tlp_pick_swrr(struct tlp_bal_server *s, uint32_t n);

/* Least connections: the usable server with the fewest conns; on a tie the
 * higher weight; on a tie of both, the first at or after *cursor, so equal
 * servers take turns. *cursor moves past the chosen one. */
int tlp_pick_leastconn(const struct tlp_bal_server *s, uint32_t n, uint32_t *cursor);

/*
 * Maglev (Eisenbud et al., NSDI 2016): a lookup table of a prime number of
 * slots, each naming a server. Every server up at build time fills slots
 * along its own permutation of the table (offset and skip from its id), in
 * turns, weight slots per turn, so its share of the slots is proportional to
 * its weight and a server's removal moves little more than its own keys.
 */
struct tlp_maglev {
	uint32_t size;   /* slots, prime */
	uint32_t n;      /* servers the table was built over */
	uint32_t placed; /* servers that got slots (those up at the build) */
	uint16_t *slot;  /* size entries: a server index or 0xffff (none up) */
};

/*
 * Allocate a table of size slots (0 means TLP_MAGLEV_SIZE); it names no
 * server until built. size must be a prime in 3..2^24. Setup only.
 * Returns 0; -EINVAL (m NULL, size not such a prime); -ENOMEM.
 */
int tlp_maglev_init(struct tlp_maglev *m, uint32_t size);

/*
 * (Re)build the table over s[0..n): every server whose state is up at this
 * moment gets slots (full ones too: being full passes). Call again when the
 * set of servers, a state, or a weight changes. Allocates scratch memory
 * (setup, not steady state) and frees it before returning.
 * Returns the number of servers placed (0 if none is up); -EINVAL (m not
 * initialized, s NULL with n > 0, n > TLP_BAL_MAX_SERVERS, a weight outside
 * 1..TLP_WEIGHT_MAX, or more servers up than the table has slots);
 * -ENOMEM (the table is then unchanged).
 */
int tlp_maglev_build(struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n);

/*
 * The server for key (a hash such as tlp_hash_addr's; it is mixed again):
 * its slot's server if usable; else the first usable one in the next
 * TLP_MAGLEV_PROBES slots; else the first usable server after the slot's
 * own in index order. So a key keeps its server while that server can take
 * it, and a full or failed server's keys spread over the others. s and n
 * must be the table the build saw (states may have changed since).
 * Returns as the picks above; -EINVAL also when n is not the built n.
 */
int tlp_maglev_pick(const struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n,
		    uint64_t key);

/* Free the table; *m is zeroed. m may be NULL or never initialized (zeroed). */
void tlp_maglev_free(struct tlp_maglev *m);

/* A pool's balancer: its method, its server table and the state of its
 * picks. One per pool per shard (conns are per shard). */
struct tlp_balancer {
	int method; /* enum tlp_balance */
	uint32_t n;
	struct tlp_bal_server *srv; /* the caller's table, not owned */
	uint32_t cursor;
	struct tlp_maglev mg;       /* TLP_BAL_HASH only */
};

/*
 * Set up b over the caller's table srv[0..n) (which must outlive b); for
 * TLP_BAL_HASH allocate and build a table of TLP_MAGLEV_SIZE slots.
 * Returns 0; -EINVAL (b NULL, bad method, srv NULL with n > 0, n too large,
 * a bad weight); -ENOMEM.
 */
int tlp_bal_init(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n);

/* Tell b that states, weights or the table's contents changed: rebuilds the
 * Maglev table of a hash pool (allocates scratch), nothing otherwise.
 * Returns 0 or what tlp_maglev_build returns when negative. */
int tlp_bal_update(struct tlp_balancer *b);

/* Pick by b's method; key is used by TLP_BAL_HASH only. Allocation-free.
 * Returns as the picks above (-EINVAL if b is NULL). */
int tlp_bal_pick(struct tlp_balancer *b, uint64_t key);

/* Free what tlp_bal_init allocated; *b is zeroed. b may be NULL. */
void tlp_bal_free(struct tlp_balancer *b);

/* A 64-bit hash of p[0..n) with a seed (not cryptographic; spreads well). */
uint64_t tlp_hash64(const void *p, size_t n, uint64_t seed);

/*
 * The hash key of a client: its IP address alone (not the port), so that a
 * client keeps its server across connections; an IPv4-mapped IPv6 address
 * hashes as the IPv4 one. Any other family (AF_UNIX) and NULL give one fixed
 * value.
 */
uint64_t tlp_hash_addr(const struct sockaddr *sa);

#endif /* TLP_BALANCE_H */
