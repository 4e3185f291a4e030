/* tests/fuzz_tlp_sni.c: libFuzzer target for tlproxy's ClientHello SNI reader and SNI matcher (tools/tlproxy/sni.c): the input is a connection's first bytes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_sni: %s (returned %d)\n", what, r);
	abort();
}

static int parse_n(const uint8_t *data, size_t n, char *host, int *why)
{
	uint8_t *b = malloc(n ? n : 1);
	int r;

	memcpy(b, data, n);
	r = tlp_sni_parse(n ? b : NULL, n, host, TLP_SNI_HOST_MAX + 1, why);
	free(b);
	return r;
}

static const struct tlp_sni_rule rules[] = {
	{"a.example.com", 13, 0}, {"*.example.com", 13, 1}, {"example.com", 11, 2},
	{"*.b", 3, 3},            {"x", 1, 4},
};

/* The matcher's rule, written plainly. */
static int reference(const char *host, size_t len)
{
	for (int i = 0; i < (int)(sizeof rules / sizeof rules[0]); i++) {
		const char *p = rules[i].name;
		size_t pl = rules[i].len;

		if (p[0] == '*') {
			if (len > pl - 1 && !strcmp(host + len - (pl - 1), p + 1))
				return i;
		} else if (len == pl && !strcmp(host, p)) {
			return i;
		}
	}
	return -ENOENT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char host[TLP_SNI_HOST_MAX + 1], h2[TLP_SNI_HOST_MAX + 1];
	int why = -1, w2, r, r2;

	r = tlp_sni_parse(data, size, host, sizeof host, &why);
	check(r >= 0 || r == -EAGAIN || r == -EPROTO, "unexpected return", r);
	check(r == -EPROTO ? why > TLP_SNI_OK && why < TLP_SNI_E_COUNT : why == TLP_SNI_OK,
	      "reason", r);
	if (r > 0) {
		check(r <= TLP_SNI_HOST_MAX && strlen(host) == (size_t)r, "host length", r);
		check(tlp_sni_host_check(host, (size_t)r) == 0, "host not a host name", r);
		for (int i = 0; i < r; i++)
			check(!(host[i] >= 'A' && host[i] <= 'Z'), "host not lowercased", r);
		check(tlp_sni_match(rules, sizeof rules / sizeof rules[0], host, (size_t)r) ==
			      reference(host, (size_t)r),
		      "matcher disagrees with the plain rule", r);
	} else {
		check(host[0] == '\0', "host left on no answer", r);
	}
	int decided = 0;

	for (size_t k = 0; k <= size; k++) {
		if (k > 128 && k != size - 1 && k != size / 2 && k % 997)
			continue;
		r2 = parse_n(data, k, h2, &w2);
		if (r2 == -EAGAIN && !decided)
			continue;
		decided = 1;
		check(r2 == r && w2 == why && !strcmp(h2, host),
		      "an answer changed with more bytes", r2);
	}
	/* A caller that keeps TLP_SNI_INPUT_MAX bytes always gets an answer. */
	if (size >= TLP_SNI_INPUT_MAX)
		check(r != -EAGAIN, "need more past the input cap", r);
	return 0;
}
