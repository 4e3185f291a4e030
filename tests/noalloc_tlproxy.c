/* tests/noalloc_tlproxy.c: tlproxy's per-connection decisions allocate nothing (PROXY parse/build, SNI parse and match, balancer picks with and without an avoid set, network matches), counted through an interposed malloc. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "balance.h"
#include "netlist.h"
#include "proxyproto.h"
#include "sni.h"

/*
 * Exit status: 0 when the measured phase made no allocator call, 1 when it
 * made some or a call failed, 77 (skip) when the interposed allocator is
 * not the one in use (sanitizers and valgrind bring their own), which the
 * program finds out by allocating once on purpose and looking.
 *
 * The measured phase, 10,000 rounds of: parse a v1 and a v2 PROXY header,
 * build both for IPv4 and IPv6 pairs, read the SNI of a captured
 * ClientHello and of the same hello in small records, match the name
 * against rules, pick a server by each method (with full servers), and
 * decide allow/deny for IPv4, IPv6 and mapped peers.
 */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NOALLOC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define NOALLOC_SANITIZED 1
#endif
#endif

#ifdef NOALLOC_SANITIZED

/* The sanitizer owns the allocator: replacing it would mix two heaps. */
int main(void)
{
	printf("SKIP noalloc_tlproxy: sanitizer build (the sanitizer owns the allocator)\n");
	return 77;
}

#else

/* glibc's own entry points, so that no dlsym is needed. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static volatile int counting;
static volatile unsigned long calls;

void *malloc(size_t n)
{
	if (counting)
		calls++;
	return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	if (counting)
		calls++;
	return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	if (counting)
		calls++;
	return __libc_realloc(p, n);
}

void free(void *p)
{
	if (counting && p)
		calls++;
	__libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	if (counting)
		calls++;
	p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	if (counting)
		calls++;
	return __libc_memalign(align, n);
}

static int failures;

static void expect(int ok, const char *what)
{
	if (!ok && failures++ < 10)
		fprintf(stderr, "noalloc_tlproxy: %s\n", what);
}

int main(int argc, char **argv)
{
	static uint8_t hello[4096], split[8192];
	static const char v1[] = "PROXY TCP6 2001:db8::1 2001:db8::2 40000 443\r\nGET /";
	static const uint8_t v2[] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
				     0x54, 0x0a, 0x21, 0x11, 0x00, 0x0f, 10, 0, 0, 1, 10, 0, 0, 2,
				     0x1f, 0x90, 0x01, 0xbb, 0x04, 0x00, 0x00};
	struct tlp_sni_rule rules[] = {{"a.example.com", 13, 0}, {"*.example.com", 13, 1}};
	struct tlp_bal_server srv[16];
	struct tlp_balancer bal[3];
	struct tlp_avoid avoid;
	struct tlp_cidr cidr[3];
	struct tlp_range4 r4[3];
	struct tlp_range6 r6[3];
	struct tlp_netset allow, deny;
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(1)};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(2)}, m6 = a6;
	struct sockaddr_storage a6s;
	char path[512], host[TLP_SNI_HOST_MAX + 1];
	size_t hlen = 0, slen = 0;
	FILE *f;

	/* ---- setup: allocation allowed ---- */
	memset(&a6s, 0, sizeof a6s);
	memcpy(&a6s, &a6, sizeof a6);
	snprintf(path, sizeof path, "%s/tlproxy/hello/tls13-www.example.com.bin",
		 argc > 1 ? argv[1] : ".");
	f = fopen(path, "rb");
	if (!f || (hlen = fread(hello, 1, sizeof hello, f)) < 10) {
		fprintf(stderr, "noalloc_tlproxy: cannot read %s\n", path);
		return 1;
	}
	fclose(f);
	for (size_t at = 5; at < hlen; at += 50) { /* the handshake in 50-byte records */
		size_t k = hlen - at < 50 ? hlen - at : 50;

		memcpy(split + slen, "\x16\x03\x01\x00", 4);
		split[slen + 4] = (uint8_t)k;
		memcpy(split + slen + 5, hello + at, k);
		slen += 5 + k;
	}
	memset(srv, 0, sizeof srv);
	for (uint32_t i = 0; i < 16; i++) {
		srv[i].id = tlp_hash64(&i, sizeof i, 1);
		srv[i].weight = i % 4 + 1;
		srv[i].max_conns = 50;
	}
	if (tlp_bal_init(&bal[0], TLP_BAL_WEIGHTED, srv, 16) ||
	    tlp_bal_init(&bal[1], TLP_BAL_LEASTCONN, srv, 16) ||
	    tlp_bal_init(&bal[2], TLP_BAL_HASH, srv, 16) || tlp_avoid_init(&avoid, 16)) {
		fprintf(stderr, "noalloc_tlproxy: balancer setup failed\n");
		return 1;
	}
	if (tlp_netlist_parse("10.0.0.0/8,2001:db8::/32", 24, cidr, 3, NULL, 0) != 2 ||
	    tlp_netset_build(&allow, cidr, 2, r4, r6) ||
	    tlp_netlist_parse("10.1.0.0/16", 11, cidr + 2, 1, NULL, 0) != 1 ||
	    tlp_netset_build(&deny, cidr + 2, 1, r4 + 2, r6 + 2)) {
		fprintf(stderr, "noalloc_tlproxy: network setup failed\n");
		return 1;
	}
	inet_pton(AF_INET, "10.2.3.4", &a4.sin_addr);
	inet_pton(AF_INET6, "2001:db8::9", &a6.sin6_addr);
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &m6.sin6_addr);

	/* Is this allocator the one in use? */
	counting = 1;
	free(malloc(16));
	counting = 0;
	if (calls != 2) {
		printf("SKIP noalloc_tlproxy: the program's malloc is not in use (sanitizer or valgrind)\n");
		for (int m = 0; m < 3; m++)
			tlp_bal_free(&bal[m]);
		tlp_avoid_free(&avoid);
		return 77;
	}
	calls = 0;

	/* ---- measured ---- */
	counting = 1;
	for (int round = 0; round < 10000; round++) {
		struct tlp_pp_header h;
		uint8_t out[TLP_PP_BUILD_MAX];
		int r;

		expect(tlp_pp_parse(v1, sizeof v1 - 1, &h, NULL) == 46, "v1 parse");
		expect(tlp_pp_parse(v2, sizeof v2, &h, NULL) == 31 && h.tlv_count == 1, "v2 parse");
		expect(tlp_pp_build_v1(out, sizeof out, (struct sockaddr *)&a4,
				       (struct sockaddr *)&a4) > 0,
		       "v1 build, IPv4");
		expect(tlp_pp_build_v1(out, sizeof out, (struct sockaddr *)&a6,
				       (struct sockaddr *)&a4) > 0,
		       "v1 build, mixed");
		/* Through storage of any family's size, as tlproxy passes its
		 * tl_addr: the builder may read a Unix-domain path's bytes. */
		expect(tlp_pp_build_v2(out, sizeof out, (struct sockaddr *)&a6s,
				       (struct sockaddr *)&a6s) == 52,
		       "v2 build");
		expect(tlp_sni_parse(hello, hlen, host, sizeof host, NULL) == 15, "SNI");
		expect(tlp_sni_parse(split, slen, host, sizeof host, NULL) == 15, "SNI in records");
		expect(tlp_sni_match(rules, 2, host, 15) == 1, "SNI match");
		for (int m = 0; m < 3; m++) {
			/* Every other round a retry: two servers tried. */
			int tried = round & 1;
			uint64_t key = tlp_hash_addr((struct sockaddr *)&a4) + (uint64_t)round;

			if (tried) {
				tlp_avoid_add(&avoid, (uint32_t)round % 16);
				tlp_avoid_add(&avoid, (uint32_t)round % 16 ^ 1);
			}
			r = tlp_bal_pick(&bal[m], key, tried ? &avoid : NULL);
			expect(r >= 0 && !(tried && (uint32_t)r / 2 == (uint32_t)round % 16 / 2),
			       "pick");
			if (tried) {
				tlp_avoid_del(&avoid, (uint32_t)round % 16);
				tlp_avoid_del(&avoid, (uint32_t)round % 16 ^ 1);
			}
			if (r >= 0 && ++srv[r].conns == srv[r].max_conns) /* fill, then drain */
				srv[r].conns = 0;
		}
		expect(tlp_acl_check(&allow, &deny, (struct sockaddr *)&a4) == 1, "allow IPv4");
		expect(tlp_acl_check(&allow, &deny, (struct sockaddr *)&a6) == 1, "allow IPv6");
		expect(tlp_acl_check(&allow, &deny, (struct sockaddr *)&m6) == 0, "deny mapped");
	}
	counting = 0;

	for (int m = 0; m < 3; m++)
		tlp_bal_free(&bal[m]);
	tlp_avoid_free(&avoid);
	if (calls) {
		fprintf(stderr, "noalloc_tlproxy: %lu allocator calls in the measured phase\n",
			calls);
		return 1;
	}
	if (failures) {
		fprintf(stderr, "noalloc_tlproxy: %d calls gave a wrong answer\n", failures);
		return 1;
	}
	printf("noalloc_tlproxy: 10000 rounds, 0 allocator calls\n");
	return 0;
}

#endif /* NOALLOC_SANITIZED */
