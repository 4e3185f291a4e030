/* tests/test_tlp_balance.c: CUnit tests of tlproxy's server picks (tools/tlproxy/balance*.c): the table of algorithms, each row through the pool balancer the proxy runs over a fake view, avoid sets up to 1,024 servers, smooth weighted round robin, least connections, Maglev shares and disruption, full and down servers. */
#include <arpa/inet.h>
#include <stdint.h>

#include "balance.h"
#include "tlp_test.h"

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void servers(struct tlp_bal_server *s, uint32_t n, uint32_t weight)
{
	memset(s, 0, n * sizeof *s);
	for (uint32_t i = 0; i < n; i++) {
		s[i].id = tlp_hash64(&i, sizeof i, 77);
		s[i].weight = weight;
	}
}

/* ---- smooth weighted round robin ---- */

static void test_swrr_sequence(void)
{
	struct tlp_bal_server s[3];
	char seq[8];

	/* nginx's own example: weights 5, 1, 1 give a a b a c a a. */
	servers(s, 3, 1);
	s[0].weight = 5;
	for (int i = 0; i < 7; i++) {
		int r = tlp_pick_swrr(s, 3, NULL);

		seq[i] = r >= 0 ? (char)('a' + r) : '?';
	}
	seq[7] = '\0';
	T_STR(seq, "aabacaa");
	/* Back to all zero after one full cycle. */
	for (int i = 0; i < 3; i++)
		T_EQ(s[i].cw, 0);
}

static void test_swrr_shares(void)
{
	enum { N = 17 };
	struct tlp_bal_server s[N];
	uint32_t count[N] = {0}, total = 0;

	servers(s, N, 1);
	for (int i = 0; i < N; i++) {
		s[i].weight = (uint32_t)(rnd() % TLP_WEIGHT_MAX) + 1;
		total += s[i].weight;
	}
	/* Every run of sum-of-weights picks has each exactly weight times. */
	for (int cycle = 0; cycle < 3; cycle++) {
		memset(count, 0, sizeof count);
		for (uint32_t k = 0; k < total; k++) {
			int r = tlp_pick_swrr(s, N, NULL);

			T_TRUE(r >= 0 && r < N, "pick %d", r);
			if (r >= 0 && r < N)
				count[r]++;
		}
		for (int i = 0; i < N; i++)
			T_TRUE(count[i] == s[i].weight, "cycle %d server %d: %u picks, weight %u",
			       cycle, i, count[i], s[i].weight);
	}
	/* Smooth: with weights 1 and 3, never two picks of the light one in a row. */
	struct tlp_bal_server t[2];
	int last = -1;

	servers(t, 2, 1);
	t[1].weight = 3;
	for (int k = 0; k < 40; k++) {
		int r = tlp_pick_swrr(t, 2, NULL);

		T_TRUE(!(r == 0 && last == 0), "light server twice at %d", k);
		last = r;
	}
}

static void test_swrr_skip(void)
{
	struct tlp_bal_server s[3];
	uint32_t count[3] = {0};

	servers(s, 3, 1);
	s[1].max_conns = 2;
	s[1].conns = 2; /* full */
	for (int k = 0; k < 100; k++) {
		int r = tlp_pick_swrr(s, 3, NULL);

		T_TRUE(r == 0 || r == 2, "picked %d", r);
		if (r >= 0)
			count[r]++;
	}
	T_EQ(count[0], 50);
	T_EQ(count[2], 50);
	s[1].conns = 1; /* room again */
	memset(count, 0, sizeof count);
	for (int k = 0; k < 300; k++) {
		int r = tlp_pick_swrr(s, 3, NULL);

		if (r >= 0)
			count[r]++;
	}
	for (int i = 0; i < 3; i++)
		T_TRUE(count[i] >= 99 && count[i] <= 101, "server %d: %u", i, count[i]);
	/* Down and draining servers are skipped too. */
	s[0].state = TLP_SRV_DOWN;
	s[2].state = TLP_SRV_DRAIN;
	for (int k = 0; k < 10; k++)
		T_EQ(tlp_pick_swrr(s, 3, NULL), 1);
	/* Nothing usable: full (queue) or nothing up (fail). */
	s[1].conns = 2;
	T_EQ(tlp_pick_swrr(s, 3, NULL), -ENOBUFS);
	s[1].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_swrr(s, 3, NULL), -EHOSTUNREACH);
	s[1].state = TLP_SRV_DRAIN;
	T_EQ(tlp_pick_swrr(s, 3, NULL), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(s, 0, NULL), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(NULL, 0, NULL), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(NULL, 3, NULL), -EINVAL);
	T_EQ(tlp_pick_swrr(s, TLP_BAL_MAX_SERVERS + 1, NULL), -EINVAL);
}

/* ---- least connections ---- */

static void test_leastconn(void)
{
	struct tlp_bal_server s[4];
	uint32_t cur = 0;

	servers(s, 4, 1);
	s[0].conns = 5;
	s[1].conns = 2;
	s[2].conns = 7;
	s[3].conns = 3;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), 1);
	/* A tie: the heavier server. */
	s[3].conns = 2;
	s[3].weight = 2;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), 3);
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), 3);
	/* A tie of both: equal servers take turns. */
	s[3].weight = 1;
	int a = tlp_pick_leastconn(s, 4, &cur, NULL), b = tlp_pick_leastconn(s, 4, &cur, NULL),
	    c = tlp_pick_leastconn(s, 4, &cur, NULL);

	T_TRUE((a == 1 && b == 3 && c == 1) || (a == 3 && b == 1 && c == 3), "%d %d %d", a, b, c);
	/* Full servers are skipped even with the fewest connections. */
	s[1].max_conns = 2;
	s[3].max_conns = 2;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), 0);
	s[0].state = TLP_SRV_DRAIN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), 2);
	s[2].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), -ENOBUFS);
	s[1].state = s[3].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur, NULL), -EHOSTUNREACH);
	T_EQ(tlp_pick_leastconn(s, 4, NULL, NULL), -EINVAL);
	T_EQ(tlp_pick_leastconn(NULL, 4, &cur, NULL), -EINVAL);
	T_EQ(tlp_pick_leastconn(s, 0, &cur, NULL), -EHOSTUNREACH);

	/* With the caller counting, connections even out. */
	enum { N = 5 };
	struct tlp_bal_server t[N];

	servers(t, N, 1);
	cur = 0;
	for (int k = 0; k < 1000; k++) {
		int r = tlp_pick_leastconn(t, N, &cur, NULL);

		if (r < 0)
			break;
		t[r].conns++;
		/* Connections end now and then, a random one. */
		if (k % 3 == 0) {
			uint32_t i = (uint32_t)(rnd() % N);

			if (t[i].conns)
				t[i].conns--;
		}
	}
	uint32_t lo = UINT32_MAX, hi = 0;

	for (int i = 0; i < N; i++) {
		lo = t[i].conns < lo ? t[i].conns : lo;
		hi = t[i].conns > hi ? t[i].conns : hi;
	}
	T_TRUE(hi - lo <= 8, "conns from %u to %u", lo, hi);
}

/* ---- Maglev ---- */

enum { KEYS = 200000 };

static uint16_t *assign(const struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n)
{
	uint16_t *a = malloc(KEYS * sizeof *a);

	for (uint32_t k = 0; k < KEYS; k++) {
		int r = tlp_maglev_pick(m, s, n, tlp_hash64(&k, sizeof k, 5), NULL);

		a[k] = r >= 0 ? (uint16_t)r : 0xffff;
	}
	return a;
}

static void test_maglev_init(void)
{
	struct tlp_maglev m;
	struct tlp_bal_server s[2];

	T_EQ(tlp_maglev_init(&m, 4), -EINVAL);
	T_EQ(tlp_maglev_init(&m, 65536), -EINVAL);
	T_EQ(tlp_maglev_init(&m, 2), -EINVAL);
	T_EQ(tlp_maglev_init(&m, (1u << 24) + 1), -EINVAL);
	T_EQ(tlp_maglev_init(NULL, 7), -EINVAL);
	T_EQ(tlp_maglev_init(&m, 0), 0);
	T_EQ(m.size, TLP_MAGLEV_SIZE);
	/* Not built: no server for any key. */
	T_EQ(tlp_maglev_pick(&m, s, 0, 1, NULL), -EHOSTUNREACH);
	T_EQ(tlp_maglev_pick(&m, s, 2, 1, NULL), -EINVAL); /* n is not the built n */
	servers(s, 2, 1);
	s[1].weight = 0;
	T_EQ(tlp_maglev_build(&m, s, 2), -EINVAL);
	s[1].weight = 257;
	T_EQ(tlp_maglev_build(&m, s, 2), -EINVAL);
	s[1].weight = 1;
	T_EQ(tlp_maglev_build(&m, s, 2), 2);
	T_EQ(m.placed, 2);
	tlp_maglev_free(&m);
	T_EQ(m.size, 0);
	tlp_maglev_free(&m);
	tlp_maglev_free(NULL);
	/* More servers up than slots. */
	struct tlp_bal_server many[8];

	servers(many, 8, 1);
	T_EQ(tlp_maglev_init(&m, 7), 0);
	T_EQ(tlp_maglev_build(&m, many, 8), -EINVAL);
	T_EQ(tlp_maglev_build(&m, many, 7), 7);
	tlp_maglev_free(&m);
}

static double dabs(double x)
{
	return x < 0 ? -x : x;
}

/* Keys per share count: enough that sampling noise (about 0.2% of a
 * tenth's share) stays well inside the 1% the table promises. */
enum { SHARE_KEYS = 2000000 };

/* The largest |share / want - 1| over servers s[0..n) of m, of its slots
 * (*slot_dev) and of SHARE_KEYS keys (*key_dev, if not NULL). */
static void share_dev(const struct tlp_maglev *m, const struct tlp_bal_server *s, uint32_t n,
		      double *slot_dev, double *key_dev)
{
	uint32_t *slots = calloc(n, sizeof *slots), *keys = calloc(n, sizeof *keys);
	uint64_t tw = 0;

	*slot_dev = 0;
	for (uint32_t i = 0; i < n; i++)
		tw += s[i].weight;
	for (uint32_t i = 0; i < m->size; i++)
		if (m->slot[i] < n)
			slots[m->slot[i]]++;
	for (uint32_t k = 0; key_dev && k < SHARE_KEYS; k++) {
		int r = tlp_maglev_pick(m, s, n, tlp_hash64(&k, sizeof k, 5), NULL);

		if (r >= 0)
			keys[r]++;
	}
	if (key_dev)
		*key_dev = 0;
	for (uint32_t i = 0; i < n; i++) {
		double want = (double)s[i].weight / (double)tw;
		double ds = dabs((double)slots[i] / m->size / want - 1);
		double dk = dabs((double)keys[i] / SHARE_KEYS / want - 1);

		*slot_dev = ds > *slot_dev ? ds : *slot_dev;
		if (key_dev && dk > *key_dev)
			*key_dev = dk;
	}
	free(slots);
	free(keys);
}

/*
 * balance.h promises shares within about 1% of the weights for pools of up
 * to TLP_MAGLEV_SIZE / 100 servers. Measured (max |share / weight - 1|):
 * 10 equal servers 0.01% of slots, 0.19% of 2M keys; weights 1..4 0.01%
 * and 0.22%; 100 servers of weights 1..4 0.33% of slots; 600 equal
 * servers 0.71% of slots. The bound asserted is the promise, 1%.
 */
static void test_maglev_shares(void)
{
	enum { N = 10 };
	struct tlp_bal_server s[N];
	struct tlp_maglev m;
	uint32_t slots[N] = {0};
	double ds, dk;

	servers(s, N, 1);
	T_EQ(tlp_maglev_init(&m, 0), 0);
	T_EQ(tlp_maglev_build(&m, s, N), N);
	for (uint32_t i = 0; i < m.size; i++)
		if (m.slot[i] < N)
			slots[m.slot[i]]++;
	/* Equal weights: the slots differ by at most one; keys within 1%. */
	for (int i = 0; i < N; i++)
		T_TRUE(slots[i] == m.size / N || slots[i] == m.size / N + 1, "server %d: %u slots",
		       i, slots[i]);
	share_dev(&m, s, N, &ds, &dk);
	printf("\n    max share off its weight: 10 equal %.4f%% of slots, %.4f%% of keys", ds * 100,
	       dk * 100);
	T_TRUE(dk < 0.01, "equal weights: a key share %.4f%% off", dk * 100);

	/* Weights 1..4: shares 10%, 20%, 30%, 40%, each within 1%. */
	struct tlp_bal_server w[4];

	servers(w, 4, 1);
	for (int i = 0; i < 4; i++)
		w[i].weight = (uint32_t)i + 1;
	T_EQ(tlp_maglev_build(&m, w, 4), 4);
	share_dev(&m, w, 4, &ds, &dk);
	printf("; weights 1..4 %.4f%%, %.4f%%", ds * 100, dk * 100);
	T_TRUE(ds < 0.01, "weights 1..4: a slot share %.4f%% off", ds * 100);
	T_TRUE(dk < 0.01, "weights 1..4: a key share %.4f%% off", dk * 100);

	/* Larger pools: 100 servers of weights 1..4, 600 equal ones (about
	 * TLP_MAGLEV_SIZE / 100, the size the promise is for). */
	struct tlp_bal_server *big = calloc(600, sizeof *big);

	servers(big, 100, 1);
	for (uint32_t i = 0; i < 100; i++)
		big[i].weight = 1 + i % 4;
	T_EQ(tlp_maglev_build(&m, big, 100), 100);
	share_dev(&m, big, 100, &ds, NULL);
	printf("; 100 weighted %.4f%% of slots", ds * 100);
	T_TRUE(ds < 0.01, "100 servers: a slot share %.4f%% off", ds * 100);
	servers(big, 600, 1);
	T_EQ(tlp_maglev_build(&m, big, 600), 600);
	share_dev(&m, big, 600, &ds, NULL);
	printf("; 600 equal %.4f%% of slots\n   ", ds * 100);
	T_TRUE(ds < 0.01, "600 servers: a slot share %.4f%% off", ds * 100);
	free(big);

	/* The same key goes to the same server, build after build. */
	T_EQ(tlp_maglev_build(&m, w, 4), 4);
	uint16_t *a = assign(&m, w, 4);

	T_EQ(tlp_maglev_build(&m, w, 4), 4);
	uint16_t *b = assign(&m, w, 4);

	T_EQ(memcmp(a, b, KEYS * sizeof *a), 0);
	free(a);
	free(b);
	tlp_maglev_free(&m);
}

/* Fraction of keys whose server (by id) differs between two assignments. */
static double moved(const uint16_t *a, const struct tlp_bal_server *sa, const uint16_t *b,
		    const struct tlp_bal_server *sb, uint32_t *moved_other, uint16_t gone)
{
	uint32_t n = 0, other = 0;

	for (uint32_t k = 0; k < KEYS; k++) {
		if (sa[a[k]].id != sb[b[k]].id) {
			n++;
			if (a[k] != gone)
				other++;
		}
	}
	if (moved_other)
		*moved_other = other;
	return (double)n / KEYS;
}

static void test_maglev_disruption(void)
{
	enum { N = 10 };
	struct tlp_bal_server s[N], fewer[N - 1], more[N + 1];
	struct tlp_maglev m;
	uint32_t other;
	double f;

	servers(s, N, 1);
	T_EQ(tlp_maglev_init(&m, 0), 0);
	T_EQ(tlp_maglev_build(&m, s, N), N);
	uint16_t *before = assign(&m, s, N);

	/* Server 3 goes down: its keys (about 1/N) move, hardly any other. */
	s[3].state = TLP_SRV_DOWN;
	T_EQ(tlp_maglev_build(&m, s, N), N - 1);
	uint16_t *down = assign(&m, s, N);

	f = moved(before, s, down, s, &other, 3);
	printf("\n    one of %d down: %.4f of the keys moved (1/N = %.4f), %u not its own", N, f,
	       1.0 / N, other);
	T_TRUE(f > 0.9 / N && f < 1.2 / N, "moved %.4f", f);
	T_TRUE(other < KEYS / 100, "%u keys of other servers moved", other);
	for (uint32_t k = 0; k < KEYS; k++)
		if (down[k] == 3) {
			T_TRUE(0, "key %u still on the down server", k);
			break;
		}

	/* Removed from the table (the others shift down an index): the
	 * same, since servers are placed by id. */
	for (int i = 0, j = 0; i < N; i++)
		if (i != 3)
			fewer[j++] = s[i];
	for (int i = 0; i < N - 1; i++)
		fewer[i].state = TLP_SRV_UP;
	T_EQ(tlp_maglev_build(&m, fewer, N - 1), N - 1);
	uint16_t *removed = assign(&m, fewer, N - 1);

	s[3].state = TLP_SRV_UP;
	f = moved(before, s, removed, fewer, &other, 3);
	T_TRUE(f > 0.9 / N && f < 1.2 / N, "moved %.4f after removal", f);
	T_TRUE(other < KEYS / 100, "%u keys of other servers moved", other);

	/* A server added: about 1/(N+1) of the keys move to it. */
	memcpy(more, s, sizeof s);
	servers(more + N, 1, 1);
	more[N].id = 0xabcdef;
	T_EQ(tlp_maglev_build(&m, more, N + 1), N + 1);
	uint16_t *added = assign(&m, more, N + 1);
	uint32_t to_new = 0;

	f = moved(before, s, added, more, NULL, 0xffff);
	for (uint32_t k = 0; k < KEYS; k++)
		to_new += added[k] == N;
	printf("; one added: %.4f moved, %.4f to it\n   ", f, (double)to_new / KEYS);
	T_TRUE(f > 0.9 / (N + 1) && f < 1.2 / (N + 1), "moved %.4f after adding", f);
	T_TRUE(to_new > f * KEYS * 0.9, "%u keys to the new server, %.0f moved", to_new, f * KEYS);

	free(before);
	free(down);
	free(removed);
	free(added);
	tlp_maglev_free(&m);
}

static void test_maglev_skip(void)
{
	enum { N = 8 };
	struct tlp_bal_server s[N];
	struct tlp_maglev m;
	uint32_t spread[N] = {0}, targets = 0;

	servers(s, N, 1);
	T_EQ(tlp_maglev_init(&m, 0), 0);
	T_EQ(tlp_maglev_build(&m, s, N), N);
	uint16_t *before = assign(&m, s, N);

	/* Server 2 full: its keys spread over the others, the rest stay. */
	s[2].max_conns = 10;
	s[2].conns = 10;
	uint16_t *full = assign(&m, s, N);
	uint32_t stayed = 0, of2 = 0;

	for (uint32_t k = 0; k < KEYS; k++) {
		T_TRUE(full[k] != 2, "key %u on the full server", k);
		if (full[k] == 2)
			break;
		if (before[k] == 2) {
			of2++;
			spread[full[k]]++;
		} else {
			stayed += full[k] == before[k];
		}
	}
	for (int i = 0; i < N; i++)
		targets += spread[i] > of2 / (4 * N);
	T_TRUE(targets >= N - 2, "the full server's keys went to %u servers", targets);
	T_EQ(stayed, KEYS - of2);
	/* Room again: every key is back where it was, without a rebuild. */
	s[2].conns = 9;
	uint16_t *back = assign(&m, s, N);

	T_EQ(memcmp(before, back, KEYS * sizeof *back), 0);
	/* Down without a rebuild yet: skipped the same way. */
	s[5].state = TLP_SRV_DOWN;
	for (uint32_t k = 0; k < 1000; k++)
		T_TRUE(tlp_maglev_pick(&m, s, N, tlp_hash64(&k, sizeof k, 5), NULL) != 5, "key %u",
		       k);
	/* All full: queue. All down: fail. */
	for (int i = 0; i < N; i++) {
		s[i].state = TLP_SRV_UP;
		s[i].max_conns = 1;
		s[i].conns = 1;
	}
	T_EQ(tlp_maglev_pick(&m, s, N, 42, NULL), -ENOBUFS);
	s[6].conns = 0; /* one left with room: found by the walk */
	for (uint32_t k = 0; k < 100; k++)
		T_EQ(tlp_maglev_pick(&m, s, N, k * 7919, NULL), 6);
	for (int i = 0; i < N; i++)
		s[i].state = TLP_SRV_DOWN;
	T_EQ(tlp_maglev_pick(&m, s, N, 42, NULL), -EHOSTUNREACH);
	T_EQ(tlp_maglev_build(&m, s, N), 0);
	T_EQ(tlp_maglev_pick(&m, s, N, 42, NULL), -EHOSTUNREACH);
	/* Up again but not rebuilt: the walk still finds one. */
	s[4].state = TLP_SRV_UP;
	s[4].conns = 0;
	T_EQ(tlp_maglev_pick(&m, s, N, 42, NULL), 4);
	free(before);
	free(full);
	free(back);
	tlp_maglev_free(&m);
}

/* ---- the pool balancer and hashes ---- */

static void test_balancer(void)
{
	struct tlp_bal_server s[3];
	struct tlp_balancer b;
	int r;

	servers(s, 3, 1);
	T_EQ(tlp_bal_init(&b, TLP_BAL_COUNT, s, 3), -EINVAL);
	T_EQ(tlp_bal_init(&b, -1, s, 3), -EINVAL);
	T_EQ(tlp_bal_init(NULL, TLP_BAL_WEIGHTED, s, 3), -EINVAL);
	T_EQ(tlp_bal_init(&b, TLP_BAL_WEIGHTED, NULL, 3), -EINVAL);
	s[0].weight = 300;
	T_EQ(tlp_bal_init(&b, TLP_BAL_WEIGHTED, s, 3), -EINVAL);
	s[0].weight = 2;

	/* roundrobin and weighted: the same smooth weighted round robin. */
	for (int method = TLP_BAL_ROUNDROBIN; method <= TLP_BAL_WEIGHTED; method++) {
		uint32_t count[3] = {0};

		servers(s, 3, 1);
		s[0].weight = 2;
		T_EQ(tlp_bal_init(&b, method, s, 3), 0);
		for (int k = 0; k < 40; k++)
			if ((r = tlp_bal_pick(&b, 0, NULL)) >= 0)
				count[r]++;
		T_EQ(count[0], 20);
		T_EQ(count[1], 10);
		T_EQ(count[2], 10);
		T_EQ(tlp_bal_update(&b), 0);
		tlp_bal_free(&b);
	}
	servers(s, 3, 1);
	T_EQ(tlp_bal_init(&b, TLP_BAL_LEASTCONN, s, 3), 0);
	s[0].conns = 3;
	s[1].conns = 1;
	s[2].conns = 2;
	T_EQ(tlp_bal_pick(&b, 0, NULL), 1);
	tlp_bal_free(&b);

	T_EQ(tlp_bal_init(&b, TLP_BAL_HASH, s, 3), 0);
	T_EQ(b.own.mg.size, TLP_MAGLEV_SIZE);
	r = tlp_bal_pick(&b, 12345, NULL);
	T_TRUE(r >= 0 && r < 3, "%d", r);
	T_EQ(tlp_bal_pick(&b, 12345, NULL), r);
	s[r].state = TLP_SRV_DOWN;
	T_EQ(tlp_bal_update(&b), 0);
	T_EQ(b.own.mg.placed, 2);
	int r2 = tlp_bal_pick(&b, 12345, NULL);

	T_TRUE(r2 >= 0 && r2 != r, "%d after %d went down", r2, r);
	tlp_bal_free(&b);
	T_EQ(b.own.mg.slot == NULL, 1);
	tlp_bal_free(NULL);
	T_EQ(tlp_bal_pick(NULL, 0, NULL), -EINVAL);
	T_EQ(tlp_bal_update(NULL), -EINVAL);
}

/* ---- the table of algorithms ---- */

static void test_rows(void)
{
	char list[160];

	/* Every row is filled in: a name, a pick, build and free together. */
	for (int m = 0; m < TLP_BAL_COUNT; m++) {
		const struct tlp_bal_ops *o = &tlp_bal_ops[m];

		T_TRUE(o->name && o->name[0] && o->pick, "row %d is empty", m);
		if (!o->name)
			continue;
		T_TRUE(!o->build == !o->free, "row %s: build without free or free without build",
		       o->name);
		T_STR(tlp_bal_name(m), o->name);
		T_EQ(tlp_bal_by_name(o->name, strlen(o->name)), m);
		for (int k = 0; k < m; k++)
			T_TRUE(strcmp(tlp_bal_ops[k].name, o->name), "%s named twice", o->name);
	}
	T_TRUE(tlp_bal_name(-1) == NULL && tlp_bal_name(TLP_BAL_COUNT) == NULL, "out of range");
	T_EQ(tlp_bal_by_name("hashx", 5), -EINVAL);
	T_EQ(tlp_bal_by_name("hashx", 4), TLP_BAL_HASH);
	T_EQ(tlp_bal_by_name("", 0), -EINVAL);
	T_EQ(tlp_bal_by_name(NULL, 0), -EINVAL);
	/* What the configuration, the usage and the admin socket show. */
	T_EQ(tlp_bal_list(list, sizeof list, "|", "|"), 34);
	T_STR(list, "roundrobin|weighted|leastconn|hash");
	T_EQ(tlp_bal_list(list, sizeof list, ", ", " or "), 39);
	T_STR(list, "roundrobin, weighted, leastconn or hash");
	T_EQ(tlp_bal_list(list, 11, "|", "|"), 34);
	T_STR(list, "roundrobin");
	/* What the proxy provides to each. */
	T_EQ(tlp_bal_ops[TLP_BAL_LEASTCONN].needs, TLP_BAL_NEEDS_CONNS);
	T_EQ(tlp_bal_ops[TLP_BAL_HASH].needs, TLP_BAL_NEEDS_KEY);
	T_EQ(tlp_bal_ops[TLP_BAL_ROUNDROBIN].needs | tlp_bal_ops[TLP_BAL_WEIGHTED].needs, 0);
}

/*
 * A fake view, as the proxy holds a pool: the servers' table built once
 * with every server placed (world.c does this for the pool's view), and
 * per shard a copy of the servers with a balancer attached to the shared
 * table. Every row goes through tlp_bal_pick, the call the proxy makes.
 */
enum { FV = 6 };

struct fake_view {
	struct tlp_bal_server all[FV]; /* what the view's table is built from */
	struct tlp_bal_table tab;
	struct tlp_bal_server loc[2][FV]; /* two shards' copies */
	struct tlp_balancer bal[2];
};

static void fake_view(struct fake_view *v, int method)
{
	memset(v, 0, sizeof *v);
	servers(v->all, FV, 1);
	for (uint32_t i = 0; i < FV; i++)
		v->all[i].weight = i + 1;
	T_EQ(tlp_bal_build(method, &v->tab, v->all, FV), 0);
	for (int sh = 0; sh < 2; sh++) {
		memcpy(v->loc[sh], v->all, sizeof v->all);
		T_EQ(tlp_bal_attach(&v->bal[sh], method, v->loc[sh], FV, &v->tab), 0);
	}
}

static void fake_view_free(struct fake_view *v, int method)
{
	for (int sh = 0; sh < 2; sh++)
		tlp_bal_free(&v->bal[sh]);
	/* Freeing the balancers left the shared table alone. */
	if (tlp_bal_ops[method].build)
		T_TRUE(v->tab.mg.slot != NULL, "an attached balancer freed the view's table");
	tlp_bal_table_free(method, &v->tab);
	T_TRUE(v->tab.mg.slot == NULL, "table not freed");
}

static void test_fake_view(void)
{
	struct fake_view v;
	struct tlp_avoid av;
	int r;

	T_EQ(tlp_avoid_init(&av, FV), 0);
	/* roundrobin and weighted: every 21 picks (the weights' sum) each
	 * server weight times, on each shard; an avoided one gets none. */
	for (int method = TLP_BAL_ROUNDROBIN; method <= TLP_BAL_WEIGHTED; method++) {
		uint32_t count[FV] = {0};

		fake_view(&v, method);
		for (int k = 0; k < 2 * 21; k++)
			if ((r = tlp_bal_pick(&v.bal[k & 1], 0, NULL)) >= 0)
				count[r]++;
		for (uint32_t i = 0; i < FV; i++)
			T_TRUE(count[i] == 2 * (i + 1), "%s: server %u got %u of 42",
			       tlp_bal_name(method), i, count[i]);
		T_EQ(tlp_avoid_add(&av, 5), 1);
		for (int k = 0; k < 30; k++)
			T_TRUE(tlp_bal_pick(&v.bal[0], 0, &av) != 5, "pick %d: avoided server", k);
		tlp_avoid_del(&av, 5);
		fake_view_free(&v, method);
	}

	/* leastconn: the shard's copy of the conns decides; a tie, the
	 * heavier; an avoided one is passed over. */
	fake_view(&v, TLP_BAL_LEASTCONN);
	for (uint32_t i = 0; i < FV; i++)
		v.loc[0][i].conns = 10 - i;
	v.loc[0][2].conns = 1;
	T_EQ(tlp_bal_pick(&v.bal[0], 0, NULL), 2);
	v.loc[0][4].conns = 1;
	T_EQ(tlp_bal_pick(&v.bal[0], 0, NULL), 4);
	T_EQ(tlp_avoid_add(&av, 4), 1);
	T_EQ(tlp_bal_pick(&v.bal[0], 0, &av), 2);
	tlp_avoid_del(&av, 4);
	T_EQ(tlp_bal_pick(&v.bal[1], 0, NULL), 5); /* the other shard: all 0, heaviest */
	fake_view_free(&v, TLP_BAL_LEASTCONN);

	/* hash: both shards send a client to the same server; the shared
	 * table, built with all up, keeps a key's server while it is usable on
	 * the shard, and its keys go elsewhere when it is not (or avoided). */
	fake_view(&v, TLP_BAL_HASH);
	T_EQ(tlp_bal_update(&v.bal[0]), 0); /* not its table: nothing rebuilt */
	uint32_t moved = 0, same = 0, hit[FV] = {0};

	for (uint32_t k = 0; k < 3000; k++) {
		uint64_t key = tlp_hash64(&k, sizeof k, 9);
		int a = tlp_bal_pick(&v.bal[0], key, NULL), b = tlp_bal_pick(&v.bal[1], key, NULL);

		T_TRUE(a >= 0 && a == b, "key %u: shard 0 %d, shard 1 %d", k, a, b);
		if (a < 0)
			continue;
		hit[a]++;
		v.loc[1][a].state = TLP_SRV_DOWN;
		b = tlp_bal_pick(&v.bal[1], key, NULL);
		v.loc[1][a].state = TLP_SRV_UP;
		T_TRUE(b >= 0 && b != a, "key %u: its down server %d again (%d)", k, a, b);
		tlp_avoid_add(&av, (uint32_t)a);
		r = tlp_bal_pick(&v.bal[0], key, &av);
		tlp_avoid_del(&av, (uint32_t)a);
		moved += r >= 0 && r != a;
		same += tlp_bal_pick(&v.bal[0], key, NULL) == a;
	}
	T_EQ(moved, 3000);
	T_EQ(same, 3000);
	for (uint32_t i = 0; i < FV; i++)
		T_TRUE(hit[i] > 3000 * (i + 1) / 21 / 2, "server %u (weight %u): %u keys", i,
		       i + 1, hit[i]);
	fake_view_free(&v, TLP_BAL_HASH);

	/* A method with a table needs one to attach to. */
	struct tlp_balancer b;

	T_EQ(tlp_bal_attach(&b, TLP_BAL_HASH, v.loc[0], FV, NULL), -EINVAL);
	T_EQ(tlp_bal_attach(&b, TLP_BAL_COUNT, v.loc[0], FV, NULL), -EINVAL);
	T_EQ(tlp_bal_attach(NULL, TLP_BAL_LEASTCONN, v.loc[0], FV, NULL), -EINVAL);
	T_EQ(tlp_bal_attach(&b, TLP_BAL_LEASTCONN, v.loc[0], FV, NULL), 0);
	T_EQ(tlp_bal_build(TLP_BAL_COUNT, &v.tab, v.all, FV), -EINVAL);
	T_EQ(tlp_bal_build(TLP_BAL_HASH, NULL, v.all, FV), -EINVAL);
	T_EQ(tlp_bal_build(TLP_BAL_LEASTCONN, &v.tab, v.all, FV), 0);
	tlp_bal_table_free(TLP_BAL_LEASTCONN, &v.tab);
	tlp_bal_table_free(TLP_BAL_HASH, NULL);
	tlp_avoid_free(&av);
}

/* ---- avoid sets: a retry leaves out the servers it tried ---- */

static void test_avoid_set(void)
{
	struct tlp_avoid a;

	T_EQ(tlp_avoid_init(NULL, 4), -EINVAL);
	T_EQ(tlp_avoid_init(&a, TLP_BAL_MAX_SERVERS + 1), -EINVAL);
	T_EQ(tlp_avoid_init(&a, 0), 0);
	T_EQ(tlp_avoid_add(&a, 0), 0); /* names no server */
	T_EQ(tlp_avoid_has(&a, 0), 0);
	tlp_avoid_free(&a);
	T_EQ(tlp_avoid_init(&a, 130), 0);
	T_EQ(tlp_avoid_add(&a, 129), 1);
	T_EQ(tlp_avoid_add(&a, 129), 0);
	T_EQ(tlp_avoid_add(&a, 64), 1);
	T_EQ(tlp_avoid_add(&a, 130), 0); /* past the set: a table grown since */
	T_EQ(a.count, 2);
	T_TRUE(tlp_avoid_has(&a, 129) && tlp_avoid_has(&a, 64) && !tlp_avoid_has(&a, 63) &&
		       !tlp_avoid_has(&a, 130) && !tlp_avoid_has(NULL, 64),
	       "membership");
	tlp_avoid_del(&a, 64);
	tlp_avoid_del(&a, 64);
	tlp_avoid_del(&a, 5000);
	T_EQ(a.count, 1);
	T_EQ(tlp_avoid_has(&a, 64), 0);
	tlp_avoid_free(&a);
	T_TRUE(a.bits == NULL && a.n == 0 && a.count == 0, "freed");
	tlp_avoid_free(&a);
	tlp_avoid_free(NULL);
}

/*
 * A pool of 1,024 servers (TLP_MAX_SERVERS) whose first 1,000 a
 * connection tried: every algorithm picks one of the other 24, or none
 * when all are tried (-EHOSTUNREACH: nothing untried is up) or the
 * untried ones are full (-ENOBUFS). The proxy's retry once covered only
 * the first 64 servers.
 */
static void test_avoid_1024(void)
{
	enum { N = 1024, TRIED = 1000 };
	struct tlp_bal_server *s = calloc(N, sizeof *s);
	struct tlp_avoid av;

	servers(s, N, 1);
	T_EQ(tlp_avoid_init(&av, N), 0);
	for (uint32_t i = 0; i < TRIED; i++)
		T_EQ(tlp_avoid_add(&av, i), 1);
	T_EQ(av.count, TRIED);
	for (int m = 0; m < TLP_BAL_COUNT; m++) {
		struct tlp_balancer b;
		uint32_t other[N - TRIED] = {0}, bad = 0, seen = 0;

		memset(s, 0, N * sizeof *s);
		servers(s, N, 1);
		T_EQ(tlp_bal_init(&b, m, s, N), 0);
		for (uint32_t k = 0; k < 2400; k++) {
			int r = tlp_bal_pick(&b, tlp_hash64(&k, sizeof k, 3), &av);

			if (r < TRIED || r >= N) {
				if (bad++ < 3)
					T_TRUE(0, "%s: pick %u gave %d, a tried server or none",
					       tlp_bal_name(m), k, r);
				continue;
			}
			other[r - TRIED]++;
			if (tlp_bal_ops[m].needs & TLP_BAL_NEEDS_CONNS)
				s[r].conns++;
		}
		T_EQ(bad, 0);
		for (uint32_t i = 0; i < N - TRIED; i++)
			seen += other[i] > 0;
		/* Spread over the untried ones, not stuck on one. */
		T_TRUE(seen == N - TRIED, "%s: %u of the 24 untried servers picked",
		       tlp_bal_name(m), seen);
		/* The untried ones full: queue; all tried: none up to try. */
		for (uint32_t i = TRIED; i < N; i++) {
			s[i].max_conns = 1;
			s[i].conns = 1;
		}
		T_EQ(tlp_bal_pick(&b, 77, &av), -ENOBUFS);
		for (uint32_t i = TRIED; i < N; i++) {
			s[i].max_conns = 0;
			T_EQ(tlp_avoid_add(&av, i), 1);
		}
		T_EQ(tlp_bal_pick(&b, 77, &av), -EHOSTUNREACH);
		/* Without the avoid set they are all there again. */
		int r = tlp_bal_pick(&b, 77, NULL);

		T_TRUE(r >= 0 && r < N, "%s: %d with nothing avoided", tlp_bal_name(m), r);
		for (uint32_t i = TRIED; i < N; i++)
			tlp_avoid_del(&av, i);
		T_EQ(av.count, TRIED);
		tlp_bal_free(&b);
	}
	tlp_avoid_free(&av);
	free(s);
}

static void test_hash_addr(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
	struct sockaddr_in b = a;
	struct sockaddr_in6 m = {.sin6_family = AF_INET6, .sin6_port = htons(2)};
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
	struct sockaddr un = {.sa_family = AF_UNIX};

	inet_pton(AF_INET, "192.0.2.7", &a.sin_addr);
	b = a;
	b.sin_port = htons(9999);
	inet_pton(AF_INET6, "::ffff:192.0.2.7", &m.sin6_addr);
	inet_pton(AF_INET6, "2001:db8::7", &v6.sin6_addr);
	/* The port does not count; a mapped address is its IPv4 one. */
	T_TRUE(tlp_hash_addr((struct sockaddr *)&a) == tlp_hash_addr((struct sockaddr *)&b),
	       "port");
	T_TRUE(tlp_hash_addr((struct sockaddr *)&a) == tlp_hash_addr((struct sockaddr *)&m),
	       "mapped");
	T_TRUE(tlp_hash_addr((struct sockaddr *)&a) != tlp_hash_addr((struct sockaddr *)&v6), "v6");
	inet_pton(AF_INET, "192.0.2.8", &b.sin_addr);
	T_TRUE(tlp_hash_addr((struct sockaddr *)&a) != tlp_hash_addr((struct sockaddr *)&b),
	       "addr");
	T_TRUE(tlp_hash_addr(&un) == tlp_hash_addr(NULL), "non-IP");
	/* Bits spread: consecutive addresses differ in about half the bits. */
	uint32_t bits = 0;

	for (uint32_t i = 0; i < 1000; i++) {
		uint32_t x = htonl(0x0a000000 + i), y = htonl(0x0a000000 + i + 1);

		bits += (uint32_t)__builtin_popcountll(tlp_hash64(&x, 4, 4) ^ tlp_hash64(&y, 4, 4));
	}
	T_TRUE(bits > 1000 * 28 && bits < 1000 * 36, "%u bits per 1000", bits);
	T_TRUE(tlp_hash64("abc", 3, 1) != tlp_hash64("abc", 3, 2), "seed");
	T_TRUE(tlp_hash64("abcdefgh1", 9, 1) != tlp_hash64("abcdefgh2", 9, 1), "tail");
}

int main(void)
{
	static const struct tlp_case cases[] = {
		{"swrr: nginx's sequence", test_swrr_sequence},
		{"swrr: shares exactly the weights", test_swrr_shares},
		{"swrr: full, down, drain, none", test_swrr_skip},
		{"leastconn: fewest, weight, turns", test_leastconn},
		{"maglev: table setup", test_maglev_init},
		{"maglev: shares follow weights", test_maglev_shares},
		{"maglev: minimal disruption", test_maglev_disruption},
		{"maglev: full and down servers skipped", test_maglev_skip},
		{"pool balancer", test_balancer},
		{"the table: a row per algorithm, names", test_rows},
		{"every row through the pool balancer, over a fake view", test_fake_view},
		{"avoid set", test_avoid_set},
		{"avoid set: 1,024 servers, the first 1,000 tried", test_avoid_1024},
		{"client address hash", test_hash_addr},
	};

	return tlp_test_main("tlproxy-balance", cases, sizeof cases / sizeof cases[0]);
}
