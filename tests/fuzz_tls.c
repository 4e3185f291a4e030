/* tests/fuzz_tls.c: libFuzzer target for the TLS layer's own readers of outside input: the record framer (lib/tls/frame.h), the SNI map with its name lists (lib/tls/sni.c), each against a plain reference, and a moved session's record state (lib/tls/state.h), against the rules it states. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "sni.h"
#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tls: %s\n", what);
	abort();
}

/*
 * The framer: the stream is data[1..), cut into pieces whose sizes come
 * from a generator seeded by data[0]. The reference walks the whole
 * buffer at once: whole records up to the first bad header.
 */
static void framing(const uint8_t *data, size_t size)
{
	const uint8_t *p = data + 1;
	size_t n = size - 1, i = 0, ref_whole = 0;
	int ref_bad = 0;

	while (i + TLS_REC_HDR <= n) {
		if (tls_frame_check(p + i) != TLS_FRAME_OK) {
			ref_bad = 1;
			break;
		}
		size_t rec = tls_frame_size(p + i);
		if (i + rec > n)
			break;
		ref_whole += rec;
		i += rec;
	}

	struct tls_frame f;
	memset(&f, 0, sizeof f);
	uint32_t seed = data[0] * 2654435761u + 1;
	size_t off = 0, whole = 0;
	int bad = 0;
	while (off < n) {
		seed = seed * 1103515245u + 12345u;
		size_t piece = 1 + (seed >> 16) % 97;
		if (piece > n - off)
			piece = n - off;
		uint32_t w = tls_frame_feed(&f, p + off, (uint32_t)piece);
		check((uint64_t)w <= piece + TLS_REC_HDR + TLS_REC_BODY_MAX, "more whole than seen");
		whole += w;
		off += piece;
		if (f.error) {
			bad = 1;
			/* nothing more is taken once a header was refused */
			check(tls_frame_feed(&f, p, n) == 0, "taken after a refusal");
			break;
		}
	}
	check(bad == ref_bad, "refusal differs from the reference");
	check(whole == ref_whole, "whole bytes differ from the reference");
	if (!bad)
		check(f.partial == n - ref_whole, "partial bytes differ");
}

/* The map's rules, written plainly: lowercase, no trailing dot, exact
 * first, then "*." + the name's parent; the first certificate wins. */
struct ref_name {
	char name[TLS_SNI_NAME_MAX + 1];
	int wild;
	uint32_t cert;
};

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The map's name rules as sni.h states them, checked label by label: after
 * one trailing dot is dropped, 1 to TLS_SNI_NAME_MAX bytes (a wildcard's
 * "*." counted), an optional whole first label "*" where wildcards are
 * allowed, then labels of 1 to 63 letters, digits, '-' or '_'. */
static int ref_valid(const char *n, size_t len, int allow_wild)
{
	if (len && n[len - 1] == '.')
		len--;
	if (len == 0 || len > TLS_SNI_NAME_MAX)
		return 0;
	if (allow_wild && len >= 2 && n[0] == '*' && n[1] == '.') {
		n += 2;
		len -= 2;
	}
	size_t a = 0;
	for (;;) {
		size_t b = a;
		while (b < len && n[b] != '.')
			b++;
		if (b == a || b - a > 63)
			return 0;
		for (size_t i = a; i < b; i++) {
			int c = lower((unsigned char)n[i]);
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
				return 0;
		}
		if (b == len)
			return 1;
		a = b + 1;
	}
}

static int ref_lookup(const struct ref_name *v, size_t nv, const char *q, size_t ql)
{
	char k[TLS_SNI_NAME_MAX + 2];
	if (ql && q[ql - 1] == '.')
		ql--;
	if (ql == 0 || ql > TLS_SNI_NAME_MAX)
		return -1;
	for (size_t i = 0; i < ql; i++)
		k[i] = (char)lower((unsigned char)q[i]);
	k[ql] = '\0';
	/* A query with an empty label (".x", "a..b") is no host name: it
	 * matches nothing, not even a wildcard through its empty first label. */
	if (k[0] == '.' || strstr(k, ".."))
		return -1;
	int best = -1;
	for (size_t i = 0; i < nv; i++)
		if (!v[i].wild && !strcmp(v[i].name, k) && (best < 0 || v[i].cert < (uint32_t)best))
			best = (int)v[i].cert;
	if (best >= 0)
		return best;
	const char *dot = strchr(k, '.');
	if (!dot)
		return -1;
	for (size_t i = 0; i < nv; i++)
		if (v[i].wild && !strcmp(v[i].name, dot + 1) && (best < 0 || v[i].cert < (uint32_t)best))
			best = (int)v[i].cert;
	return best;
}

/* data: "list0 \n list1 \n query" (a missing part is empty). */
static void sni(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	const char *part[3] = {s, s, s};
	size_t len[3] = {0, 0, 0};
	int k = 0;
	size_t start = 0;
	for (size_t i = 0; i <= n && k < 3; i++) {
		if (i == n || (s[i] == '\n' && k < 2)) {
			part[k] = s + start;
			len[k++] = i - start;
			start = i + 1;
		}
	}
	struct tls_sni_map m;
	memset(&m, 0, sizeof m);
	static struct ref_name ref[4096];
	size_t nref = 0;
	for (uint32_t c = 0; c < 2; c++) {
		char bad[TLS_SNI_NAME_MAX + 1];
		int r = tls_sni_add(&m, part[c], len[c], c, bad);
		check(r == 0 || r == -EINVAL, "tls_sni_add: unexpected error");
		int list_ok = 1;
		for (size_t i = 0, a = 0; i <= len[c]; i++) {
			if (i < len[c] && part[c][i] != ',')
				continue;
			size_t b = i, x = a;
			while (x < b && (part[c][x] == ' ' || part[c][x] == '\t'))
				x++;
			while (b > x && (part[c][b - 1] == ' ' || part[c][b - 1] == '\t'))
				b--;
			if (!ref_valid(part[c] + x, b - x, 1))
				list_ok = 0;
			a = i + 1;
		}
		check((r == 0) == list_ok, "list taken or refused unlike the reference");
		if (r < 0)
			continue; /* a list that fails adds nothing */
		/* the reference of this list: the names tls_sni_add took */
		size_t a = 0;
		for (size_t i = 0; i <= len[c] && nref < 4096; i++) {
			if (i < len[c] && part[c][i] != ',')
				continue;
			size_t b = i, x = a;
			while (x < b && (part[c][x] == ' ' || part[c][x] == '\t'))
				x++;
			while (b > x && (part[c][b - 1] == ' ' || part[c][b - 1] == '\t'))
				b--;
			if (b > x && part[c][b - 1] == '.')
				b--;
			struct ref_name *e = &ref[nref];
			e->wild = b - x >= 2 && part[c][x] == '*' && part[c][x + 1] == '.';
			if (e->wild)
				x += 2;
			check(b - x <= TLS_SNI_NAME_MAX, "a name longer than allowed was taken");
			for (size_t j = x; j < b; j++)
				e->name[j - x] = (char)lower((unsigned char)part[c][j]);
			e->name[b - x] = '\0';
			e->cert = c;
			nref++;
			a = i + 1;
		}
	}
	tls_sni_seal(&m);
	int64_t got = tls_sni_lookup(&m, part[2], len[2]);
	/* a query that is no valid name matches nothing */
	if (ref_valid(part[2], len[2], 0))
		check(got == ref_lookup(ref, nref, part[2], len[2]), "lookup differs from the reference");
	else
		check(got == -1, "a malformed name matched");
	tls_sni_free(&m);
}

/*
 * A record state (what a takeover's CONN record carries to tl_tls_import):
 * data[1..) as the state, for either role. Taken only when every rule of
 * state.h holds, checked here one by one; never read past its end.
 */
static void state(const uint8_t *data, size_t size)
{
	const uint8_t *st = data + 1;
	uint32_t n = (uint32_t)(size - 1);

	for (int server = 0; server < 2; server++) {
		struct tls_st_fixed f;
		int r = tls_state_check(st, n, server, &f);

		if (r != 0) {
			check(r == -EINVAL || r == -EOPNOTSUPP, "state: an error outside the two it says");
			continue;
		}
		check(n >= sizeof f && f.partial == n - sizeof f, "state: taken with lengths that do not add up");
		check(f.magic == TLS_ST_MAGIC && (f.version == 1 || f.version == TLS_ST_VERSION),
		      "state: taken with another magic or version");
		/* version 1 has no closed directions; 2 has one or both, and
		 * no partial record after the peer's close_notify */
		if (f.version == 1)
			check(f.closed == 0, "state: a version 1 taken with a closed direction");
		else
			check(f.closed >= 1 && f.closed <= (TLS_ST_CLOSED_IN | TLS_ST_CLOSED_OUT) &&
				      !((f.closed & TLS_ST_CLOSED_IN) && f.partial),
			      "state: a version 2 taken with a closed byte it cannot have");
		check(f.server == server, "state: taken for the other role");
		check(f.tls == 0x0303 || f.tls == 0x0304, "state: taken with another TLS version");
		check(f.cipher >= TLS_TC_AES128GCM && f.cipher <= TLS_TC_CHACHA, "state: taken with another suite");
		check(memchr(f.cipher_name, 0, sizeof f.cipher_name) && memchr(f.group, 0, sizeof f.group) &&
			      memchr(f.sni, 0, sizeof f.sni) && memchr(f.alpn, 0, sizeof f.alpn),
		      "state: a name left unterminated");
		/* the partial record: a prefix of one record, with a good header */
		const uint8_t *p = st + sizeof f;
		if (f.partial >= TLS_REC_HDR) {
			check(tls_frame_check(p) == TLS_FRAME_OK, "state: a partial record with a bad header");
			check(f.partial < tls_frame_size(p), "state: a whole record taken as a partial one");
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] == 0x5a) /* a state; (the framer takes odd first bytes) */
		state(data, size);
	else if (data[0] & 1)
		framing(data, size);
	else
		sni(data, size);
	return 0;
}
