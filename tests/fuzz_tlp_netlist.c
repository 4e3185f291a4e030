/* tests/fuzz_tlp_netlist.c: libFuzzer target for tlproxy's CIDR list parser and network sets (tools/tlproxy/netlist.c): the input is a list's text. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 64

static void check(int ok, const char *what, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_netlist: %s (returned %d)\n", what, r);
	abort();
}

static int brute(const struct tlp_cidr *c, int n, const uint8_t *a, int family)
{
	for (int i = 0; i < n; i++) {
		int k;

		if (c[i].family != family)
			continue;
		for (k = 0; k < c[i].prefix; k++)
			if (((a[k / 8] ^ c[i].addr[k / 8]) >> (7 - k % 8)) & 1)
				break;
		if (k == c[i].prefix)
			return 1;
	}
	return 0;
}

static int match_bytes(const struct tlp_netset *set, const uint8_t *a, int family)
{
	if (family == AF_INET) {
		struct sockaddr_in s = {.sin_family = AF_INET};

		memcpy(&s.sin_addr, a, 4);
		return tlp_netset_match(set, (struct sockaddr *)&s);
	}
	struct sockaddr_in6 s = {.sin6_family = AF_INET6};

	memcpy(&s.sin6_addr, a, 16);
	return tlp_netset_match(set, (struct sockaddr *)&s);
}

static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tlp_cidr c[CAP], back;
	struct tlp_range4 r4[CAP];
	struct tlp_range6 r6[CAP];
	struct tlp_netset set;
	char err[160], text[64];
	int n;

	n = tlp_netlist_parse((const char *)data, size, c, CAP, err, sizeof err);
	check(n == -EINVAL || n == -ENOBUFS || (n >= 0 && n <= CAP), "unexpected return", n);
	check(memchr(err, '\0', sizeof err) != NULL && (n < 0) == (err[0] != '\0'), "reason", n);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		unsigned bits = c[i].family == AF_INET ? 32 : 128;

		check((c[i].family == AF_INET || c[i].family == AF_INET6) && c[i].prefix <= bits,
		      "family or prefix", i);
		for (unsigned k = c[i].prefix; k < 128; k++)
			check(!((c[i].addr[k / 8] >> (7 - k % 8)) & 1), "bits past the prefix", i);
		check(c[i].family == AF_INET || c[i].prefix < 96 || memcmp(c[i].addr, mapped, 12),
		      "a mapped network left as IPv6", i);
		/* Format and parse back: the same network. */
		int l = tlp_cidr_format(&c[i], text, sizeof text);

		check(l > 0 && tlp_cidr_parse(text, (size_t)l, &back, NULL, 0) == 0 &&
			      !memcmp(&back, &c[i], sizeof back),
		      "format round trip", l);
	}
	check(tlp_netset_build(&set, c, (uint32_t)n, r4, r6) == 0, "build", n);
	check(set.n4 + set.n6 <= (uint32_t)n, "more ranges than networks", n);
	for (uint32_t i = 1; i < set.n4; i++)
		check(set.r4[i - 1].hi < set.r4[i].lo && set.r4[i - 1].hi + 1 < set.r4[i].lo,
		      "IPv4 ranges not sorted, disjoint, apart", (int)i);
	/* Each network's edges are inside; probes from the input agree with
	 * the plain definition. */
	for (int i = 0; i < n; i++) {
		uint8_t a[16];
		unsigned bits = c[i].family == AF_INET ? 32 : 128;

		memcpy(a, c[i].addr, 16);
		if (c[i].family == AF_INET6 && !memcmp(a, mapped, 12))
			continue; /* looked up as IPv4 */
		check(match_bytes(&set, a, c[i].family) == 1, "first address outside", i);
		for (unsigned k = c[i].prefix; k < bits; k++)
			a[k / 8] |= (uint8_t)(0x80 >> (k % 8));
		/* An IPv6 network wider than /96 can end inside ::ffff:0:0/96
		 * (::/80 ends at ::ffff:ffff:ffff): such an address is looked
		 * up as IPv4, so an IPv6 network never holds it. */
		if (c[i].family == AF_INET6 && !memcmp(a, mapped, 12))
			check(match_bytes(&set, a, AF_INET6) == brute(c, n, a + 12, AF_INET),
			      "mapped last address not looked up as IPv4", i);
		else
			check(match_bytes(&set, a, c[i].family) == 1, "last address outside", i);
		for (int j = 0; j < 2; j++) {
			int last = c[i].family == AF_INET ? 3 : 15;

			/* one past the end, and one before the start */
			if (j == 0)
				for (int b = last; b >= 0 && ++a[b] == 0; b--)
					;
			else {
				memcpy(a, c[i].addr, 16);
				for (int b = last; b >= 0 && a[b]-- == 0; b--)
					;
			}
			if (c[i].family == AF_INET6 && !memcmp(a, mapped, 12))
				continue;
			check(match_bytes(&set, a, c[i].family) == brute(c, n, a, c[i].family),
			      "edge disagrees", i);
		}
	}
	for (size_t off = 0; off + 16 <= size; off += 7) {
		uint8_t a[16];

		memcpy(a, data + off, 16);
		check(match_bytes(&set, a, AF_INET) == brute(c, n, a, AF_INET), "IPv4 probe",
		      (int)off);
		if (memcmp(a, mapped, 12))
			check(match_bytes(&set, a, AF_INET6) == brute(c, n, a, AF_INET6),
			      "IPv6 probe", (int)off);
	}
	return 0;
}
