/* tools/tlproxy/balance.h: which server of a pool takes the next connection: the table of balancing algorithms (smooth weighted round robin, least connections, Maglev consistent hashing), each a function over a server table with a set of servers to leave out. */
#ifndef TLP_BALANCE_H
#define TLP_BALANCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The balancing algorithms: each value is a row of tlp_bal_ops (below). */
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
 * An avoid set: servers a pick must leave out, by index in the server
 * table (a connection's retry leaves out the servers it already tried, as
 * nginx's per-peer "tried" bitmap does). One bit per server of the pool,
 * allocated once at setup for the pool's size; adding, removing and
 * testing allocate nothing.
 */
struct tlp_avoid {
	uint32_t n;     /* servers it can name: indexes 0..n-1 */
	uint32_t count; /* servers in it */
	uint64_t *bits; /* (n + 63) / 64 words */
};

/*
 * Make a an empty set able to hold servers 0..n-1 (setup: allocates).
 * Returns 0; -EINVAL (a NULL, n > TLP_BAL_MAX_SERVERS); -ENOMEM.
 */
int tlp_avoid_init(struct tlp_avoid *a, uint32_t n);

/* Free a's bits; *a is zeroed (an empty set of no servers). a may be NULL. */
void tlp_avoid_free(struct tlp_avoid *a);

/* Put server i in a. Returns 1 if it was not in a, 0 if it was or if i is
 * past what a can name (a table grown since: nothing to leave out). */
int tlp_avoid_add(struct tlp_avoid *a, uint32_t i);

/* Take server i out of a (nothing if it is not in it). */
void tlp_avoid_del(struct tlp_avoid *a, uint32_t i);

/* Is server i in a? a may be NULL (the empty set). */
static inline int tlp_avoid_has(const struct tlp_avoid *a, uint32_t i)
{
	return a && a->count && i < a->n && (a->bits[i >> 6] >> (i & 63) & 1);
}

/* May a pick give server i of s a new connection: usable and not avoided? */
static inline int tlp_bal_can(const struct tlp_bal_server *s, uint32_t i,
			      const struct tlp_avoid *avoid)
{
	return tlp_bal_usable(&s[i]) && !tlp_avoid_has(avoid, i);
}

/*
 * The picks. Each skips servers that are not usable (down, draining, or at
 * max_conns) and those in avoid (NULL: none), and takes the next one by its
 * rule; none allocates. Each returns the index of the chosen server
 * (0..n-1), or:
 *   -ENOBUFS      no server usable but some are up (all full): queue the
 *                 connection and try again when one ends;
 *   -EHOSTUNREACH no server is up (n == 0 included), avoided ones counting
 *                 as not up: fail now (or, for a retry, try without avoid);
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
int tlp_pick_swrr(struct tlp_bal_server *s, uint32_t n, const struct tlp_avoid *avoid);

/* Least connections: the usable server with the fewest conns; on a tie the
 * higher weight; on a tie of both, the first at or after *cursor, so equal
 * servers take turns. *cursor moves past the chosen one. */
int tlp_pick_leastconn(const struct tlp_bal_server *s, uint32_t n, uint32_t *cursor,
		       const struct tlp_avoid *avoid);

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
 * its slot's server if usable and not avoided; else the first usable one in the next
 * TLP_MAGLEV_PROBES slots; else the first usable server after the slot's
 * own in index order. So a key keeps its server while that server can take
 * it, and a full or failed server's keys spread over the others. s and n
 * must be the table the build saw (states may have changed since).
 * Returns as the picks above; -EINVAL also when n is not the built n.
 */
int tlp_maglev_pick(const struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n,
		    uint64_t key, const struct tlp_avoid *avoid);

/* Free the table; *m is zeroed. m may be NULL or never initialized (zeroed). */
void tlp_maglev_free(struct tlp_maglev *m);

/*
 * What an algorithm builds once over a pool's servers and its picks then
 * only read, so that the shards of a process can share one (the proxy keeps
 * it in the pool's view). Each algorithm with a build uses its own member.
 */
struct tlp_bal_table {
	struct tlp_maglev mg; /* TLP_BAL_HASH */
};

/* What a pick reads besides each server's weight, state and max_conns: the
 * caller provides these only to the algorithms whose row asks for them. */
#define TLP_BAL_NEEDS_CONNS 0x1u /* every server's conns up to date (process-wide) */
#define TLP_BAL_NEEDS_KEY 0x2u   /* a key: the hash of the client (tlp_hash_addr) */

/* A pool's balancer: its method, its server table and the state of its
 * picks. One per pool per shard (conns are per shard). */
struct tlp_balancer {
	int method; /* enum tlp_balance */
	uint32_t n;
	struct tlp_bal_server *srv;      /* the caller's table, not owned */
	uint32_t cursor;
	const struct tlp_bal_table *tab; /* &own, or one built and owned elsewhere */
	struct tlp_bal_table own;        /* what tlp_bal_init built */
};

/*
 * One balancing algorithm: a row of tlp_bal_ops, indexed by enum
 * tlp_balance. Adding an algorithm is an enum value, a row and the file
 * with its functions (docs/TLPROXY.md, "Adding a balancing algorithm").
 */
struct tlp_bal_ops {
	const char *name; /* as the configuration and the admin socket spell it */
	unsigned needs;   /* TLP_BAL_NEEDS_* */
	/* Build t over s[0..n) (setup: may allocate); NULL if the algorithm
	 * builds nothing. t is zeroed or was built by this row before.
	 * Returns 0 or a negative errno (t is then as before). */
	int (*build)(struct tlp_bal_table *t, const struct tlp_bal_server *s, uint32_t n);
	/* Free what build made; NULL with build. */
	void (*free)(struct tlp_bal_table *t);
	/* Choose a server of b->srv[0..b->n) for key, leaving out avoid.
	 * Returns as the picks above. Allocation-free. */
	int (*pick)(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid);
};

/* The algorithms, a row per enum tlp_balance (a build-time check in
 * balance.c holds the count to TLP_BAL_COUNT). */
extern const struct tlp_bal_ops tlp_bal_ops[];

/* The name of method, or NULL if it is not one. */
const char *tlp_bal_name(int method);

/* The method named s[0..len) exactly; -EINVAL if none is. */
int tlp_bal_by_name(const char *s, size_t len);

/*
 * Write the names of all methods, in enum order, into buf[0..size) as
 * text: sep between two names, last_sep before the last one (so "a|b|c"
 * or "a, b or c"). Returns the length of the whole list (snprintf's way:
 * it was cut if that is >= size).
 */
int tlp_bal_list(char *buf, size_t size, const char *sep, const char *last_sep);

/*
 * Build t for method over s[0..n) (setup: may allocate): what the
 * method's row builds, or nothing. *t is zeroed first.
 * Returns 0; -EINVAL (t NULL, bad method, bad table or weight); -ENOMEM.
 */
int tlp_bal_build(int method, struct tlp_bal_table *t, const struct tlp_bal_server *s,
		  uint32_t n);

/* Free what tlp_bal_build made for method; *t is zeroed. t may be NULL. */
void tlp_bal_table_free(int method, struct tlp_bal_table *t);

/*
 * Set up b over the caller's table srv[0..n) (which must outlive b), with
 * a table of its own built from srv's states now (for TLP_BAL_HASH, a
 * Maglev table of TLP_MAGLEV_SIZE slots over the servers up).
 * Returns 0; -EINVAL (b NULL, bad method, srv NULL with n > 0, n too large,
 * a bad weight); -ENOMEM.
 */
int tlp_bal_init(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n);

/*
 * Set up b over srv[0..n) with tab, built by tlp_bal_build for the same
 * method over the same servers and owned by the caller (it must outlive b;
 * b only reads it): the shards of the proxy share their pool view's table.
 * tab may be NULL for a method without a build.
 * Returns 0; -EINVAL (as tlp_bal_init, or tab NULL where needed).
 */
int tlp_bal_attach(struct tlp_balancer *b, int method, struct tlp_bal_server *srv, uint32_t n,
		   const struct tlp_bal_table *tab);

/* Tell b that states, weights or the table's contents changed: rebuilds a
 * table b built itself (allocates scratch), nothing otherwise.
 * Returns 0 or what the build returns when negative. */
int tlp_bal_update(struct tlp_balancer *b);

/* Pick by b's method's row, leaving out avoid (NULL: none); key is read
 * by methods that need it (TLP_BAL_NEEDS_KEY). Allocation-free.
 * Returns as the picks above (-EINVAL if b is NULL). */
int tlp_bal_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid);

/* Free what tlp_bal_init built (not an attached table); *b is zeroed.
 * b may be NULL. */
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
