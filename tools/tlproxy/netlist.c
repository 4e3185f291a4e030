/* tools/tlproxy/netlist.c: CIDR parsing, network sets as sorted merged ranges, and the allow/deny decision (see netlist.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netlist.h"
#include "../reason.h"

/* s for a one-line reason: anything unprintable shown as '?'. */
static const char *printable(const char *s, char *buf, size_t cap)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < cap; i++)
		buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Clear every bit of a (nbytes long) past prefix; returns 1 if any was set. */
static int mask_off(uint8_t *a, unsigned nbytes, unsigned prefix)
{
	int dirty = 0;

	for (unsigned i = 0; i < nbytes; i++) {
		unsigned keep = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
		uint8_t m = keep ? (uint8_t)(0xff00u >> keep) : 0;

		if (a[i] & (uint8_t)~m)
			dirty = 1;
		a[i] &= m;
	}
	return dirty;
}

int tlp_cidr_parse(const char *s, size_t len, struct tlp_cidr *out, char *err, size_t errlen)
{
	char text[INET6_ADDRSTRLEN + 8], addr[INET6_ADDRSTRLEN + 1];
	const char *slash;
	size_t alen;
	unsigned prefix = 0, max;
	int has_prefix;

	if (err && errlen)
		err[0] = '\0';
	if (!out || (!s && len))
		return fail(err, errlen, "no network");
	if (!len)
		return fail(err, errlen, "empty network");
	/* The longest valid text is an IPv6 address, a slash and 3 digits. */
	if (len >= sizeof text)
		return fail(err, errlen, "network text too long (%zu bytes)", len);
	memcpy(text, s, len);
	text[len] = '\0';
	if (strlen(text) != len)
		return fail(err, errlen, "network contains a NUL byte");
	for (size_t i = 0; i < len; i++)
		if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f') ||
		      (text[i] >= 'A' && text[i] <= 'F') || text[i] == '.' || text[i] == ':' ||
		      text[i] == '/')) {
			char shown[sizeof text];

			/* Past this check the text is hex, '.', ':' and '/' only. */
			return fail(err, errlen, "bad character in network '%s'",
				    printable(text, shown, sizeof shown));
		}
	slash = strchr(text, '/');
	has_prefix = slash != NULL;
	alen = has_prefix ? (size_t)(slash - text) : len;
	if (alen == 0 || alen >= sizeof addr)
		return fail(err, errlen, "bad address in network '%s'", text);
	memcpy(addr, text, alen);
	addr[alen] = '\0';
	memset(out, 0, sizeof *out);
	if (inet_pton(AF_INET, addr, out->addr) == 1) {
		out->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
		out->family = AF_INET6;
		max = 128;
	} else {
		return fail(err, errlen, "'%s' is not an IPv4 or IPv6 address", addr);
	}
	if (has_prefix) {
		const char *p = slash + 1;

		if (!*p)
			return fail(err, errlen, "empty prefix length in '%s'", text);
		if (p[0] == '0' && p[1])
			return fail(err, errlen, "prefix length with a leading zero in '%s'", text);
		for (; *p; p++) {
			if (*p < '0' || *p > '9')
				return fail(err, errlen, "bad prefix length in '%s'", text);
			prefix = prefix * 10 + (unsigned)(*p - '0');
			if (prefix > max)
				return fail(err, errlen, "prefix length past /%u in '%s'", max,
					    text);
		}
	} else {
		prefix = max;
	}
	if (mask_off(out->addr, max / 8, prefix)) {
		char fixed[64];
		struct tlp_cidr c = *out;

		c.prefix = (uint8_t)prefix;
		if (tlp_cidr_format(&c, fixed, sizeof fixed) < 0)
			fixed[0] = '\0';
		return fail(err, errlen, "'%s' has bits set past its prefix (the network is %s)",
			    text, fixed);
	}
	out->prefix = (uint8_t)prefix;
	if (out->family == AF_INET6 && !memcmp(out->addr, v4mapped, 12) && prefix >= 96) {
		/* An IPv4 peer on a dual-stack socket shows up mapped; match it as IPv4. */
		memmove(out->addr, out->addr + 12, 4);
		memset(out->addr + 4, 0, 12);
		out->family = AF_INET;
		out->prefix = (uint8_t)(prefix - 96);
	}
	return 0;
}

int tlp_cidr_format(const struct tlp_cidr *c, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	int n;

	if (!c || !buf)
		return -EINVAL;
	if (!((c->family == AF_INET && c->prefix <= 32) ||
	      (c->family == AF_INET6 && c->prefix <= 128)))
		return -EINVAL;
	if (!inet_ntop(c->family, c->addr, a, sizeof a))
		return -EINVAL;
	n = snprintf(buf, len, "%s/%u", a, c->prefix);
	if (n < 0 || (size_t)n >= len) {
		if (len)
			buf[0] = '\0';
		return -ENOBUFS;
	}
	return n;
}

int tlp_netlist_parse(const char *s, size_t len, struct tlp_cidr *out, uint32_t cap, char *err,
		      size_t errlen)
{
	uint32_t n = 0;
	size_t i = 0;

	if (err && errlen)
		err[0] = '\0';
	if ((!s && len) || (!out && cap))
		return fail(err, errlen, "no list");
	while (i < len) {
		size_t j;
		int r;

		if (s[i] == ',' || s[i] == ' ' || s[i] == '\t') {
			i++;
			continue;
		}
		for (j = i; j < len && s[j] != ',' && s[j] != ' ' && s[j] != '\t'; j++)
			;
		if (n == cap) {
			if (err && errlen)
				snprintf(err, errlen, "more than %u networks", cap);
			return -ENOBUFS;
		}
		r = tlp_cidr_parse(s + i, j - i, &out[n], err, errlen);
		if (r < 0)
			return r;
		n++;
		i = j;
	}
	return (int)n;
}

/* ---- sets ---- */

static int cmp4(const void *a, const void *b)
{
	const struct tlp_range4 *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* 128-bit compare of (ah, al) with (bh, bl). */
static int cmp128(uint64_t ah, uint64_t al, uint64_t bh, uint64_t bl)
{
	if (ah != bh)
		return ah < bh ? -1 : 1;
	return al < bl ? -1 : al > bl;
}

static int cmp6(const void *a, const void *b)
{
	const struct tlp_range6 *x = a, *y = b;

	return cmp128(x->lo_hi, x->lo_lo, y->lo_hi, y->lo_lo);
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* The mask of the host bits of a prefix within one 64-bit half holding
 * bits [base, base + 64) of the address. */
static uint64_t host_bits(unsigned prefix, unsigned base)
{
	if (prefix <= base)
		return ~0ull;
	if (prefix >= base + 64)
		return 0;
	return ~0ull >> (prefix - base);
}

int tlp_netset_build(struct tlp_netset *set, const struct tlp_cidr *c, uint32_t n,
		     struct tlp_range4 *r4, struct tlp_range6 *r6)
{
	uint32_t n4 = 0, n6 = 0, m;

	if (!set || (n && (!c || !r4 || !r6)))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (c[i].family == AF_INET && c[i].prefix <= 32) {
			uint32_t a = (uint32_t)c[i].addr[0] << 24 | (uint32_t)c[i].addr[1] << 16 |
				     (uint32_t)c[i].addr[2] << 8 | c[i].addr[3];
			uint32_t host = c[i].prefix >= 32 ? 0 : 0xffffffffu >> c[i].prefix;

			r4[n4].lo = a & ~host;
			r4[n4].hi = a | host;
			n4++;
		} else if (c[i].family == AF_INET6 && c[i].prefix <= 128) {
			uint64_t h = be64(c[i].addr), l = be64(c[i].addr + 8);
			uint64_t hm = host_bits(c[i].prefix, 0), lm = host_bits(c[i].prefix, 64);

			r6[n6] = (struct tlp_range6){h & ~hm, l & ~lm, h | hm, l | lm};
			n6++;
		} else {
			return -EINVAL;
		}
	}
	if (n4 > 1)
		qsort(r4, n4, sizeof *r4, cmp4);
	if (n6 > 1)
		qsort(r6, n6, sizeof *r6, cmp6);
	/* Merge overlapping and adjacent ranges so that the ranges are disjoint
	 * and a binary search on lo finds the only candidate. */
	m = 0;
	for (uint32_t i = 0; i < n4; i++) {
		if (m && (r4[m - 1].hi == UINT32_MAX || r4[i].lo <= r4[m - 1].hi + 1)) {
			if (r4[i].hi > r4[m - 1].hi)
				r4[m - 1].hi = r4[i].hi;
		} else {
			r4[m++] = r4[i];
		}
	}
	n4 = m;
	m = 0;
	for (uint32_t i = 0; i < n6; i++) {
		if (m) {
			struct tlp_range6 *p = &r6[m - 1];
			/* p->hi + 1, with the carry; all ones means everything is covered. */
			int top = p->hi_hi == UINT64_MAX && p->hi_lo == UINT64_MAX;
			uint64_t nl = p->hi_lo + 1, nh = p->hi_hi + (nl == 0);

			if (top || cmp128(r6[i].lo_hi, r6[i].lo_lo, nh, nl) <= 0) {
				if (cmp128(r6[i].hi_hi, r6[i].hi_lo, p->hi_hi, p->hi_lo) > 0) {
					p->hi_hi = r6[i].hi_hi;
					p->hi_lo = r6[i].hi_lo;
				}
				continue;
			}
		}
		r6[m++] = r6[i];
	}
	n6 = m;
	set->n4 = n4;
	set->n6 = n6;
	set->r4 = n4 ? r4 : NULL;
	set->r6 = n6 ? r6 : NULL;
	return 0;
}

static int match4(const struct tlp_netset *set, uint32_t a)
{
	uint32_t lo = 0, hi = set->n4;

	/* The last range whose lo <= a is the only one that can hold a. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (set->r4[mid].lo <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && a <= set->r4[lo - 1].hi;
}

static int match6(const struct tlp_netset *set, uint64_t ah, uint64_t al)
{
	uint32_t lo = 0, hi = set->n6;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (cmp128(set->r6[mid].lo_hi, set->r6[mid].lo_lo, ah, al) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && cmp128(ah, al, set->r6[lo - 1].hi_hi, set->r6[lo - 1].hi_lo) <= 0;
}

int tlp_netset_match(const struct tlp_netset *set, const struct sockaddr *sa)
{
	if (!set || !sa)
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		return set->n4 ? match4(set, ntohl(in->sin_addr.s_addr)) : 0;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (!memcmp(b, v4mapped, 12))
			return set->n4 ? match4(set, (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 |
							     (uint32_t)b[14] << 8 | b[15])
				       : 0;
		return set->n6 ? match6(set, be64(b), be64(b + 8)) : 0;
	}
	return 0;
}

int tlp_acl_check(const struct tlp_netset *allow, const struct tlp_netset *deny,
		  const struct sockaddr *sa)
{
	if (!sa)
		return -EINVAL;
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return 1;
	if (deny && tlp_netset_match(deny, sa) == 1)
		return 0;
	if (!tlp_netset_count(allow))
		return 1;
	return tlp_netset_match(allow, sa) == 1;
}
