/* tests/test_tlp_netlist.c: CUnit tests of tlproxy's CIDR parser, network sets and allow/deny decision (tools/tlproxy/netlist.c). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/un.h>

#include "netlist.h"
#include "tlp_test.h"

static int parse(const char *s, struct tlp_cidr *c, char *err, size_t errlen)
{
	return tlp_cidr_parse(s, strlen(s), c, err, errlen);
}

static struct sockaddr_in v4(const char *ip)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1234)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		abort();
	return a;
}

static struct sockaddr_in6 v6(const char *ip)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(1234)};

	if (inet_pton(AF_INET6, ip, &a.sin6_addr) != 1)
		abort();
	return a;
}

static void test_parse_ok(void)
{
	static const uint8_t ten[4] = {10, 0, 0, 0};
	static const uint8_t host[4] = {10, 1, 2, 3};
	static const uint8_t db8[16] = {0x20, 0x01, 0x0d, 0xb8};
	uint8_t zero[16] = {0}, one[16] = {0};
	struct tlp_cidr c;
	char err[128];

	one[15] = 1;
	T_EQ(parse("10.0.0.0/8", &c, err, sizeof err), 0);
	T_EQ(c.family, AF_INET);
	T_EQ(c.prefix, 8);
	T_EQ(memcmp(c.addr, ten, 4), 0);
	T_EQ(memcmp(c.addr + 4, zero, 12), 0);
	T_STR(err, "");

	T_EQ(parse("10.1.2.3", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET);
	T_EQ(c.prefix, 32);
	T_EQ(memcmp(c.addr, host, 4), 0);

	T_EQ(parse("2001:db8::/32", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET6);
	T_EQ(c.prefix, 32);
	T_EQ(memcmp(c.addr, db8, 16), 0);

	T_EQ(parse("::1", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET6);
	T_EQ(c.prefix, 128);
	T_EQ(memcmp(c.addr, one, 16), 0);

	T_EQ(parse("0.0.0.0/0", &c, NULL, 0), 0);
	T_EQ(c.prefix, 0);
	T_EQ(parse("::/0", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET6);
	T_EQ(c.prefix, 0);

	/* IPv4-mapped networks become the IPv4 network they name. */
	T_EQ(parse("::ffff:10.0.0.0/104", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET);
	T_EQ(c.prefix, 8);
	T_EQ(memcmp(c.addr, ten, 4), 0);
	T_EQ(parse("::FFFF:10.1.2.3", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET);
	T_EQ(c.prefix, 32);
	T_EQ(memcmp(c.addr, host, 4), 0);
	T_EQ(parse("::ffff:0.0.0.0/96", &c, NULL, 0), 0);
	T_EQ(c.family, AF_INET);
	T_EQ(c.prefix, 0);

	/* Length-bounded: bytes past len are not read. */
	T_EQ(tlp_cidr_parse("10.0.0.0/8garbage", 10, &c, NULL, 0), 0);
	T_EQ(c.prefix, 8);
}

static void test_parse_bad(void)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"", "empty"},
		{"10.0.0.0/", "empty prefix"},
		{"10.0.0.0/33", "past /32"},
		{"::/129", "past /128"},
		{"10.0.0.0/08", "leading zero"},
		{"10.0.0.0/8/8", "bad prefix"},
		{"10.0.0.0/-1", "bad character"},
		{"10.1.0.0/8", "the network is 10.0.0.0/8"},
		{"2001:db8::1/32", "the network is 2001:db8::/32"},
		{"10.0.0", "not an IPv4 or IPv6"},
		{"10.0.0.0.0", "not an IPv4 or IPv6"},
		{"256.0.0.0", "not an IPv4 or IPv6"},
		{"010.0.0.0", "not an IPv4 or IPv6"},
		{"1O.0.0.0/8", "bad character"},
		{" 10.0.0.0/8", "bad character"},
		{"10.0.0.0/8 ", "bad character"},
		{"/8", "bad address"},
		{"1:2:3:4:5:6:7:8:9", "not an IPv4 or IPv6"},
		{"1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa:bbbb/128", "too long"},
		{"[::1]", "bad character"},
	};
	struct tlp_cidr c;
	char err[128];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		strcpy(err, "x");
		T_EQ(parse(bad[i].text, &c, err, sizeof err), -EINVAL);
		T_TRUE(strstr(err, bad[i].why), "'%s': reason '%s' lacks '%s'", bad[i].text, err,
		       bad[i].why);
	}
	/* A NUL inside the given length. */
	T_EQ(tlp_cidr_parse("10.0\0.0.0", 9, &c, err, sizeof err), -EINVAL);
	T_HAS(err, "NUL");
	T_EQ(tlp_cidr_parse(NULL, 3, &c, NULL, 0), -EINVAL);
	T_EQ(tlp_cidr_parse("10.0.0.0", 8, NULL, NULL, 0), -EINVAL);
	/* The reason is one line: a newline in the text is shown as '?'. */
	T_EQ(parse("10.0.0.0/8\n", &c, err, sizeof err), -EINVAL);
	T_TRUE(!strchr(err, '\n') && strstr(err, "'10.0.0.0/8?'"), "%s", err);
	/* A short error buffer is cut and terminated. */
	T_EQ(parse("10.1.0.0/8", &c, err, 5), -EINVAL);
	T_EQ(strlen(err), 4);
}

static void test_format(void)
{
	static const char *const texts[] = {"10.0.0.0/8", "192.168.1.0/24", "0.0.0.0/0",
					    "2001:db8::/32", "::1/128", "::/0", "fe80::/10"};
	struct tlp_cidr c;
	char buf[64];

	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		T_EQ(parse(texts[i], &c, NULL, 0), 0);
		T_EQ(tlp_cidr_format(&c, buf, sizeof buf), (long long)strlen(texts[i]));
		T_STR(buf, texts[i]);
	}
	T_EQ(parse("::ffff:10.0.0.0/104", &c, NULL, 0), 0);
	T_EQ(tlp_cidr_format(&c, buf, sizeof buf), 10);
	T_STR(buf, "10.0.0.0/8");
	T_EQ(tlp_cidr_format(&c, buf, 10), -ENOBUFS);
	T_STR(buf, "");
	c.prefix = 33;
	T_EQ(tlp_cidr_format(&c, buf, sizeof buf), -EINVAL);
	c.family = AF_UNIX;
	c.prefix = 0;
	T_EQ(tlp_cidr_format(&c, buf, sizeof buf), -EINVAL);
}

static void test_list(void)
{
	struct tlp_cidr c[4];
	char err[128];
	const char *s;

	s = "10.0.0.0/8, ::1/128\t192.168.0.0/16";
	T_EQ(tlp_netlist_parse(s, strlen(s), c, 4, err, sizeof err), 3);
	T_EQ(c[0].prefix, 8);
	T_EQ(c[1].family, AF_INET6);
	T_EQ(c[2].prefix, 16);
	T_EQ(tlp_netlist_parse("", 0, c, 4, err, sizeof err), 0);
	T_EQ(tlp_netlist_parse(" ,, ,", 5, c, 4, err, sizeof err), 0);
	s = "1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8";
	T_EQ(tlp_netlist_parse(s, strlen(s), c, 4, err, sizeof err), -ENOBUFS);
	T_HAS(err, "more than 4");
	s = "10.0.0.0/8,10.1.0.0/8";
	T_EQ(tlp_netlist_parse(s, strlen(s), c, 4, err, sizeof err), -EINVAL);
	T_HAS(err, "'10.1.0.0/8'");
	T_EQ(tlp_netlist_parse(NULL, 1, c, 4, err, sizeof err), -EINVAL);
	T_EQ(tlp_netlist_parse("1.2.3.4", 7, NULL, 4, err, sizeof err), -EINVAL);
}

static struct tlp_netset set_of(const char *const *texts, uint32_t n, struct tlp_cidr *c,
				struct tlp_range4 *r4, struct tlp_range6 *r6)
{
	struct tlp_netset set;

	for (uint32_t i = 0; i < n; i++)
		if (parse(texts[i], &c[i], NULL, 0))
			abort();
	if (tlp_netset_build(&set, c, n, r4, r6))
		abort();
	return set;
}

static void test_match(void)
{
	static const char *const nets[] = {"10.1.0.0/16", "10.0.0.0/8", "192.168.0.0/25",
					   "192.168.0.128/25", "2001:db8::/32", "::1/128"};
	struct tlp_cidr c[6];
	struct tlp_range4 r4[6];
	struct tlp_range6 r6[6];
	struct tlp_netset set = set_of(nets, 6, c, r4, r6);
	struct sockaddr_in a;
	struct sockaddr_in6 b;
	struct sockaddr_un u = {.sun_family = AF_UNIX};

	/* Overlapping and adjacent networks were merged. */
	T_EQ(set.n4, 2);
	T_EQ(set.n6, 2);
	T_EQ(tlp_netset_count(&set), 4);
	a = v4("10.0.0.0");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 1);
	a = v4("10.255.255.255");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 1);
	a = v4("11.0.0.0");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 0);
	a = v4("9.255.255.255");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 0);
	a = v4("192.168.0.255");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 1);
	a = v4("192.168.1.0");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 0);
	b = v6("2001:db8::");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("2001:db9::");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 0);
	b = v6("::1");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("::2");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 0);
	/* An IPv4 peer on a dual-stack socket is matched as IPv4. */
	b = v6("::ffff:10.9.8.7");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("::ffff:11.9.8.7");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 0);
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&u), 0);
	T_EQ(tlp_netset_match(NULL, (struct sockaddr *)&u), -EINVAL);
	T_EQ(tlp_netset_match(&set, NULL), -EINVAL);
}

static void test_match_everything(void)
{
	static const char *const nets[] = {"0.0.0.0/0", "255.255.255.255", "::/0",
					   "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"};
	struct tlp_cidr c[4];
	struct tlp_range4 r4[4];
	struct tlp_range6 r6[4];
	struct tlp_netset set = set_of(nets, 4, c, r4, r6);
	struct sockaddr_in a = v4("255.255.255.255");
	struct sockaddr_in6 b = v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");

	/* Merging at the top of the space must not wrap around. */
	T_EQ(set.n4, 1);
	T_EQ(set.n6, 1);
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 1);
	a = v4("0.0.0.0");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 1);
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("::");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);

	/* The empty set matches nothing; building it needs no storage. */
	struct tlp_netset empty = {0};

	T_EQ(tlp_netset_build(&empty, NULL, 0, NULL, NULL), 0);
	T_EQ(tlp_netset_count(&empty), 0);
	T_EQ(tlp_netset_match(&empty, (struct sockaddr *)&a), 0);
	T_EQ(tlp_netset_match(&empty, (struct sockaddr *)&b), 0);
	T_EQ(tlp_netset_build(NULL, c, 0, r4, r6), -EINVAL);
	T_EQ(tlp_netset_build(&empty, c, 1, NULL, r6), -EINVAL);
	c[0].prefix = 40;
	T_EQ(tlp_netset_build(&empty, c, 1, r4, r6), -EINVAL);
}

/* A simple PRNG so that the randomized test replays exactly. */
static uint64_t rnd_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* The plain definition: some network whose prefix bits equal the address's. */
static int brute(const struct tlp_cidr *c, uint32_t n, const uint8_t *addr, int family)
{
	for (uint32_t i = 0; i < n; i++) {
		unsigned p = c[i].prefix, k;

		if (c[i].family != family)
			continue;
		for (k = 0; k < p; k++)
			if (((addr[k / 8] ^ c[i].addr[k / 8]) >> (7 - k % 8)) & 1)
				break;
		if (k == p)
			return 1;
	}
	return 0;
}

static void test_match_random(void)
{
	enum { N = 40, ROUNDS = 300, PROBES = 200 };
	struct tlp_cidr c[N];
	struct tlp_range4 r4[N];
	struct tlp_range6 r6[N];
	unsigned mismatches = 0, hits = 0;

	for (int round = 0; round < ROUNDS; round++) {
		struct tlp_netset set;
		uint32_t n = (uint32_t)(rnd() % N) + 1;

		for (uint32_t i = 0; i < n; i++) {
			int six = rnd() % 2;
			unsigned bits = six ? 128 : 32;

			memset(&c[i], 0, sizeof c[i]);
			c[i].family = six ? AF_INET6 : AF_INET;
			/* Few distinct top bits, so that networks overlap and touch. */
			for (unsigned k = 0; k < bits / 8; k++)
				c[i].addr[k] = (uint8_t)rnd();
			c[i].addr[0] &= 0x83;
			c[i].prefix = (uint8_t)(rnd() % (bits + 1));
			for (unsigned k = c[i].prefix; k < bits; k++)
				c[i].addr[k / 8] &= (uint8_t)~(0x80 >> (k % 8));
		}
		T_EQ(tlp_netset_build(&set, c, n, r4, r6), 0);
		for (int p = 0; p < PROBES; p++) {
			uint32_t i = (uint32_t)(rnd() % n);
			int six = c[i].family == AF_INET6;
			uint8_t a[16];
			int got, want;

			/* Near a network's edges: its first or last address, one off. */
			memcpy(a, c[i].addr, 16);
			for (unsigned k = c[i].prefix; k < (six ? 128u : 32u); k++)
				if (rnd() % 4 == 0 || p % 3 == 0)
					a[k / 8] |= (uint8_t)(0x80 >> (k % 8));
			if (rnd() % 2) {
				int last = six ? 15 : 3;

				for (int k = last; k >= 0 && ++a[k] == 0; k--)
					;
			}
			/* Or a bit of the prefix flipped: outside this network. */
			if (c[i].prefix && rnd() % 2) {
				unsigned k = (unsigned)(rnd() % c[i].prefix);

				a[k / 8] ^= (uint8_t)(0x80 >> (k % 8));
			}
			if (six) {
				struct sockaddr_in6 s = {.sin6_family = AF_INET6};

				memcpy(&s.sin6_addr, a, 16);
				/* A mapped address is IPv4 to the matcher. */
				if (!memcmp(a, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12))
					continue;
				got = tlp_netset_match(&set, (struct sockaddr *)&s);
			} else {
				struct sockaddr_in s = {.sin_family = AF_INET};

				memcpy(&s.sin_addr, a, 4);
				got = tlp_netset_match(&set, (struct sockaddr *)&s);
			}
			want = brute(c, n, a, c[i].family);
			hits += want;
			if (got != want)
				mismatches++;
		}
	}
	T_EQ(mismatches, 0);
	/* Both answers came up often enough for the comparison to mean something. */
	T_TRUE(hits > ROUNDS * PROBES / 5 && hits < ROUNDS * PROBES * 4 / 5, "hits %u", hits);
}

/* An IPv6 network that spans ::ffff:0:0/96 does not hold IPv4 peers: a
 * mapped address is looked up as IPv4 (the finding of fuzz_tlp_netlist
 * that ::/80 ends on one). */
static void test_match_spans_mapped(void)
{
	static const char *const nets[] = {"::/80"};
	struct tlp_cidr c[1];
	struct tlp_range4 r4[1];
	struct tlp_range6 r6[1];
	struct tlp_netset set = set_of(nets, 1, c, r4, r6);
	struct sockaddr_in6 b = v6("::fffe:ffff:ffff");
	struct sockaddr_in a = v4("255.255.255.255");

	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 1);
	b = v6("::ffff:255.255.255.255");
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&b), 0);
	T_EQ(tlp_netset_match(&set, (struct sockaddr *)&a), 0);
}

static void test_acl(void)
{
	static const char *const allow_nets[] = {"10.0.0.0/8", "::1/128"};
	static const char *const deny_nets[] = {"10.1.0.0/16"};
	struct tlp_cidr ca[2], cd[1];
	struct tlp_range4 a4[2], d4[1];
	struct tlp_range6 a6[2], d6[1];
	struct tlp_netset allow = set_of(allow_nets, 2, ca, a4, a6);
	struct tlp_netset deny = set_of(deny_nets, 1, cd, d4, d6);
	struct tlp_netset empty = {0};
	struct sockaddr_in a;
	struct sockaddr_in6 b;
	struct sockaddr_un u = {.sun_family = AF_UNIX};

	a = v4("10.2.3.4");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&a), 1);
	a = v4("10.1.3.4"); /* in allow too: deny wins */
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&a), 0);
	a = v4("11.1.3.4");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&a), 0);
	T_EQ(tlp_acl_check(&empty, &deny, (struct sockaddr *)&a), 1);
	T_EQ(tlp_acl_check(NULL, NULL, (struct sockaddr *)&a), 1);
	a = v4("10.1.3.4");
	T_EQ(tlp_acl_check(NULL, &deny, (struct sockaddr *)&a), 0);
	b = v6("::1");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&b), 1);
	b = v6("::2");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&b), 0);
	b = v6("::ffff:10.1.0.9");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&b), 0);
	b = v6("::ffff:10.2.0.9");
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&b), 1);
	/* Unix peers: no address for a list to name. */
	T_EQ(tlp_acl_check(&allow, &deny, (struct sockaddr *)&u), 1);
	T_EQ(tlp_acl_check(&allow, &deny, NULL), -EINVAL);
}

int main(void)
{
	static const struct tlp_case cases[] = {
		{"parse: valid networks", test_parse_ok},
		{"parse: every bad shape", test_parse_bad},
		{"format round trip", test_format},
		{"list of networks", test_list},
		{"set: match at the edges", test_match},
		{"set: everything, and empty", test_match_everything},
		{"set: against a brute-force match", test_match_random},
		{"set: an IPv6 network spanning the mapped range", test_match_spans_mapped},
		{"allow/deny decision", test_acl},
	};

	return tlp_test_main("tlproxy-netlist", cases, sizeof cases / sizeof cases[0]);
}
