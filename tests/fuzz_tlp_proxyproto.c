/* tests/fuzz_tlp_proxyproto.c: libFuzzer target for tlproxy's PROXY protocol parser and builders (tools/tlproxy/proxyproto.c): the input is what a client sent first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxyproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_proxyproto: %s (returned %d)\n", what, r);
	abort();
}

/* Parse data[0..n) from a heap block of exactly n bytes. */
static int parse_n(const uint8_t *data, size_t n, struct tlp_pp_header *h, int *why)
{
	uint8_t *b = malloc(n ? n : 1);
	int r;

	memcpy(b, data, n);
	r = tlp_pp_parse(n ? b : NULL, n, h, why);
	free(b);
	return r;
}

static int same_addr(int family, const union tlp_pp_addr *a, const union tlp_pp_addr *b)
{
	if (family == AF_INET)
		return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr &&
		       a->in.sin_port == b->in.sin_port;
	if (family == AF_INET6)
		return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16) &&
		       a->in6.sin6_port == b->in6.sin6_port;
	size_t n = strnlen(a->un.sun_path, sizeof a->un.sun_path);

	return n == strnlen(b->un.sun_path, sizeof b->un.sun_path) &&
	       !memcmp(a->un.sun_path, b->un.sun_path, n);
}

/* A v1 line built from addresses taken from the input: no proper prefix
 * of it is refused (the early refusal of lines that cannot become valid
 * never refuses one that can), and the whole line parses. */
static void v1_prefixes(const uint8_t *data, size_t size)
{
	struct sockaddr_in6 a6[2];
	struct sockaddr_in a4[2];
	struct tlp_pp_header h;
	uint8_t line[TLP_PP_V1_MAX];
	const struct sockaddr *sa[2];
	int n, r;

	if (size < 37)
		return;
	for (int k = 0; k < 2; k++) {
		memset(&a6[k], 0, sizeof a6[k]);
		memset(&a4[k], 0, sizeof a4[k]);
		a6[k].sin6_family = AF_INET6;
		memcpy(&a6[k].sin6_addr, data + 1 + 16 * k, 16);
		a4[k].sin_family = AF_INET;
		memcpy(&a4[k].sin_addr, data + 1 + 4 * k, 4);
		a6[k].sin6_port = a4[k].sin_port = (uint16_t)(data[33 + 2 * k] << 8 | data[34 + 2 * k]);
		/* data[0] picks each side's family: mixed pairs are written mapped. */
		sa[k] = data[0] & (1 << k) ? (const struct sockaddr *)&a4[k]
					   : (const struct sockaddr *)&a6[k];
	}
	n = tlp_pp_build_v1(line, sizeof line, sa[0], sa[1]);
	check(n > 0, "v1 build of fuzzed addresses", n);
	for (int k = 0; k < n; k++) {
		r = parse_n(line, (size_t)k, &h, NULL);
		check(r == -EAGAIN, "a prefix of a valid v1 line was refused", r);
	}
	r = parse_n(line, (size_t)n, &h, NULL);
	check(r == n, "a built v1 line does not parse", r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tlp_pp_header h, g;
	uint8_t out[TLP_PP_BUILD_MAX + TLP_PP_TLS_TLV_MAX];
	int why = -1, w2, r, r2, n;

	v1_prefixes(data, size);

	r = tlp_pp_parse(data, size, &h, &why);
	check(r > 0 || r == -EAGAIN || r == -EPROTO, "unexpected return", r);
	check(r == -EPROTO ? why > TLP_PP_OK && why < TLP_PP_E_COUNT : why == TLP_PP_OK, "reason",
	      r);
	if (r > 0) {
		check((size_t)r <= size && (uint32_t)r == h.len, "length", r);
		check(h.version == 1 || h.version == 2, "version", r);
		if (h.version == 1)
			check(r <= TLP_PP_V1_MAX && data[r - 2] == '\r' && data[r - 1] == '\n' &&
				      !memchr(data, '\r', (size_t)r - 2) &&
				      h.command == TLP_PP_CMD_PROXY,
			      "v1 line", r);
		else
			check(r >= 16 && r <= TLP_PP_V2_MAX && (data[12] >> 4) == 2, "v2 header",
			      r);
		check(h.family == AF_UNSPEC || h.family == AF_INET || h.family == AF_INET6 ||
			      h.family == AF_UNIX,
		      "family", r);
		if (h.tlv_len || h.tlv_count)
			check(h.version == 2 && h.tlv_off + h.tlv_len == (uint32_t)r &&
				      h.tlv_count <= h.tlv_len / 3,
			      "TLV bounds", r);
	}
	/* The answer depends only on the bytes read: once a prefix is
	 * decided, every longer one says the same. */
	int decided = 0;

	for (size_t k = 0; k <= size; k++) {
		if (k > 160 && k != size - 1 && k != size / 2)
			continue;
		r2 = parse_n(data, k, &g, &w2);
		if (r2 == -EAGAIN && !decided)
			continue;
		decided = 1;
		check(r2 == r && w2 == why, "an answer changed with more bytes", r2);
	}
	if (r <= 0 || h.family == AF_UNSPEC)
		return 0;
	/* What was parsed builds back into headers that parse the same. */
	n = tlp_pp_build_v2(out, sizeof out, &h.src.sa, &h.dst.sa);
	check(n >= 16, "v2 build", n);
	r2 = parse_n(out, (size_t)n, &g, NULL);
	check(r2 == n && g.family == h.family && same_addr(h.family, &h.src, &g.src) &&
		      same_addr(h.family, &h.dst, &g.dst),
	      "v2 round trip", r2);
	{
		/* With TLS TLVs whose strings come from the input: still a
		 * header that parses, to the same addresses, with 1 to 3 TLVs. */
		char f[4][64];
		struct tlp_pp_tls t;
		int m;

		for (int i = 0; i < 4; i++) {
			size_t l = size > (size_t)i * 16 ? size - (size_t)i * 16 : 0;

			l = l > 63 ? 63 : l;
			memcpy(f[i], data + (size - l), l);
			f[i][l] = '\0';
		}
		t = (struct tlp_pp_tls){f[0], f[1], f[2], f[3], (int)(size & 1), (int)(size & 2)};
		m = tlp_pp_add_tls(out, (size_t)n, sizeof out, &t);
		check(m >= n + 8, "add TLS TLVs", m);
		r2 = parse_n(out, (size_t)m, &g, NULL);
		check(r2 == m && g.tlv_count >= 1 && g.tlv_count <= 3 && same_addr(h.family, &h.src, &g.src),
		      "v2 with TLS TLVs round trip", r2);
	}
	n = tlp_pp_build_v1(out, sizeof out, &h.src.sa, &h.dst.sa);
	check(n > 0 && n <= TLP_PP_V1_MAX, "v1 build", n);
	r2 = parse_n(out, (size_t)n, &g, NULL);
	check(r2 == n, "v1 build does not parse", r2);
	if (h.family == AF_UNIX)
		check(g.family == AF_UNSPEC, "v1 of Unix not UNKNOWN", r2);
	else
		check(g.family == h.family && same_addr(h.family, &h.src, &g.src) &&
			      same_addr(h.family, &h.dst, &g.dst),
		      "v1 round trip", r2);
	check(tlp_pp_build_v1(out, (size_t)n - 1, &h.src.sa, &h.dst.sa) == -ENOBUFS, "v1 room", n);
	return 0;
}
