/* tests/test_tlp_balance.c: CUnit tests of tlproxy's server picks (tools/tlproxy/balance.c): smooth weighted round robin, least connections, Maglev shares and disruption, full and down servers. */
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
		int r = tlp_pick_swrr(s, 3);

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
			int r = tlp_pick_swrr(s, N);

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
		int r = tlp_pick_swrr(t, 2);

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
		int r = tlp_pick_swrr(s, 3);

		T_TRUE(r == 0 || r == 2, "picked %d", r);
		if (r >= 0)
			count[r]++;
	}
	T_EQ(count[0], 50);
	T_EQ(count[2], 50);
	s[1].conns = 1; /* room again */
	memset(count, 0, sizeof count);
	for (int k = 0; k < 300; k++) {
		int r = tlp_pick_swrr(s, 3);

		if (r >= 0)
			count[r]++;
	}
	for (int i = 0; i < 3; i++)
		T_TRUE(count[i] >= 99 && count[i] <= 101, "server %d: %u", i, count[i]);
	/* Down and draining servers are skipped too. */
	s[0].state = TLP_SRV_DOWN;
	s[2].state = TLP_SRV_DRAIN;
	for (int k = 0; k < 10; k++)
		T_EQ(tlp_pick_swrr(s, 3), 1);
	/* Nothing usable: full (queue) or nothing up (fail). */
	s[1].conns = 2;
	T_EQ(tlp_pick_swrr(s, 3), -ENOBUFS);
	s[1].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_swrr(s, 3), -EHOSTUNREACH);
	s[1].state = TLP_SRV_DRAIN;
	T_EQ(tlp_pick_swrr(s, 3), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(s, 0), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(NULL, 0), -EHOSTUNREACH);
	T_EQ(tlp_pick_swrr(NULL, 3), -EINVAL);
	T_EQ(tlp_pick_swrr(s, TLP_BAL_MAX_SERVERS + 1), -EINVAL);
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
	T_EQ(tlp_pick_leastconn(s, 4, &cur), 1);
	/* A tie: the heavier server. */
	s[3].conns = 2;
	s[3].weight = 2;
	T_EQ(tlp_pick_leastconn(s, 4, &cur), 3);
	T_EQ(tlp_pick_leastconn(s, 4, &cur), 3);
	/* A tie of both: equal servers take turns. */
	s[3].weight = 1;
	int a = tlp_pick_leastconn(s, 4, &cur), b = tlp_pick_leastconn(s, 4, &cur),
	    c = tlp_pick_leastconn(s, 4, &cur);

	T_TRUE((a == 1 && b == 3 && c == 1) || (a == 3 && b == 1 && c == 3), "%d %d %d", a, b, c);
	/* Full servers are skipped even with the fewest connections. */
	s[1].max_conns = 2;
	s[3].max_conns = 2;
	T_EQ(tlp_pick_leastconn(s, 4, &cur), 0);
	s[0].state = TLP_SRV_DRAIN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur), 2);
	s[2].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur), -ENOBUFS);
	s[1].state = s[3].state = TLP_SRV_DOWN;
	T_EQ(tlp_pick_leastconn(s, 4, &cur), -EHOSTUNREACH);
	T_EQ(tlp_pick_leastconn(s, 4, NULL), -EINVAL);
	T_EQ(tlp_pick_leastconn(NULL, 4, &cur), -EINVAL);
	T_EQ(tlp_pick_leastconn(s, 0, &cur), -EHOSTUNREACH);

	/* With the caller counting, connections even out. */
	enum { N = 5 };
	struct tlp_bal_server t[N];

	servers(t, N, 1);
	cur = 0;
	for (int k = 0; k < 1000; k++) {
		int r = tlp_pick_leastconn(t, N, &cur);

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
		int r = tlp_maglev_pick(m, s, n, tlp_hash64(&k, sizeof k, 5));

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
	T_EQ(tlp_maglev_pick(&m, s, 0, 1), -EHOSTUNREACH);
	T_EQ(tlp_maglev_pick(&m, s, 2, 1), -EINVAL); /* n is not the built n */
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

static void test_maglev_shares(void)
{
	enum { N = 10 };
	struct tlp_bal_server s[N];
	struct tlp_maglev m;
	uint32_t slots[N] = {0}, keys[N] = {0};

	servers(s, N, 1);
	T_EQ(tlp_maglev_init(&m, 0), 0);
	T_EQ(tlp_maglev_build(&m, s, N), N);
	for (uint32_t i = 0; i < m.size; i++)
		if (m.slot[i] < N)
			slots[m.slot[i]]++;
	uint16_t *a = assign(&m, s, N);

	for (uint32_t k = 0; k < KEYS; k++)
		if (a[k] < N)
			keys[a[k]]++;
	/* Equal weights: the slots differ by at most one; keys within 5%. */
	for (int i = 0; i < N; i++) {
		T_TRUE(slots[i] == m.size / N || slots[i] == m.size / N + 1, "server %d: %u slots",
		       i, slots[i]);
		T_TRUE(keys[i] > KEYS / N * 95 / 100 && keys[i] < KEYS / N * 105 / 100,
		       "server %d: %u keys of %u", i, keys[i], KEYS);
	}
	free(a);

	/* Weights 1..4: shares 10%, 20%, 30%, 40%. */
	struct tlp_bal_server w[4];
	uint32_t wk[4] = {0};

	servers(w, 4, 1);
	for (int i = 0; i < 4; i++)
		w[i].weight = (uint32_t)i + 1;
	T_EQ(tlp_maglev_build(&m, w, 4), 4);
	a = assign(&m, w, 4);
	for (uint32_t k = 0; k < KEYS; k++)
		if (a[k] < 4)
			wk[a[k]]++;
	for (int i = 0; i < 4; i++) {
		double share = (double)wk[i] / KEYS, want = (i + 1) / 10.0;

		T_TRUE(share > want * 0.95 && share < want * 1.05, "weight %d: share %.4f", i + 1,
		       share);
	}
	free(a);
	/* The same key goes to the same server, build after build. */
	T_EQ(tlp_maglev_build(&m, w, 4), 4);
	uint16_t *b = assign(&m, w, 4);

	a = assign(&m, w, 4);
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
		T_TRUE(tlp_maglev_pick(&m, s, N, tlp_hash64(&k, sizeof k, 5)) != 5, "key %u", k);
	/* All full: queue. All down: fail. */
	for (int i = 0; i < N; i++) {
		s[i].state = TLP_SRV_UP;
		s[i].max_conns = 1;
		s[i].conns = 1;
	}
	T_EQ(tlp_maglev_pick(&m, s, N, 42), -ENOBUFS);
	s[6].conns = 0; /* one left with room: found by the walk */
	for (uint32_t k = 0; k < 100; k++)
		T_EQ(tlp_maglev_pick(&m, s, N, k * 7919), 6);
	for (int i = 0; i < N; i++)
		s[i].state = TLP_SRV_DOWN;
	T_EQ(tlp_maglev_pick(&m, s, N, 42), -EHOSTUNREACH);
	T_EQ(tlp_maglev_build(&m, s, N), 0);
	T_EQ(tlp_maglev_pick(&m, s, N, 42), -EHOSTUNREACH);
	/* Up again but not rebuilt: the walk still finds one. */
	s[4].state = TLP_SRV_UP;
	s[4].conns = 0;
	T_EQ(tlp_maglev_pick(&m, s, N, 42), 4);
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
			if ((r = tlp_bal_pick(&b, 0)) >= 0)
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
	T_EQ(tlp_bal_pick(&b, 0), 1);
	tlp_bal_free(&b);

	T_EQ(tlp_bal_init(&b, TLP_BAL_HASH, s, 3), 0);
	T_EQ(b.mg.size, TLP_MAGLEV_SIZE);
	r = tlp_bal_pick(&b, 12345);
	T_TRUE(r >= 0 && r < 3, "%d", r);
	T_EQ(tlp_bal_pick(&b, 12345), r);
	s[r].state = TLP_SRV_DOWN;
	T_EQ(tlp_bal_update(&b), 0);
	T_EQ(b.mg.placed, 2);
	int r2 = tlp_bal_pick(&b, 12345);

	T_TRUE(r2 >= 0 && r2 != r, "%d after %d went down", r2, r);
	tlp_bal_free(&b);
	T_EQ(b.mg.slot == NULL, 1);
	tlp_bal_free(NULL);
	T_EQ(tlp_bal_pick(NULL, 0), -EINVAL);
	T_EQ(tlp_bal_update(NULL), -EINVAL);
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
		{"client address hash", test_hash_addr},
	};

	return tlp_test_main("tlproxy-balance", cases, sizeof cases / sizeof cases[0]);
}
