/* tools/tlproxy/config_values.c: tlproxy's config, the values with a syntax of their own: durations, sizes, endpoints and network lists (shared by the YAML reader and the command line). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "turnloop/plan.h"

#include "config_int.h"
#include "../reason.h"

/* ---- values with their own syntax ---- */

/* Text for a reason: the first bytes of s that fit (at most SHOW), the
 * unprintable ones as '?', "..." when cut. */
const char *tlp__clip(const char *s, size_t len, char *buf, size_t cap)
{
	size_t k = 0, lim = len < SHOW ? len : SHOW;

	if (lim + 4 > cap)
		lim = cap > 4 ? cap - 4 : 0;

	for (size_t i = 0; i < lim && k + 1 < cap; i++)
		buf[k++] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	if (len > lim && k + 4 < cap) {
		memcpy(buf + k, "...", 3);
		k += 3;
	}
	buf[k] = '\0';
	return buf;
}

int tlp_duration_parse(const char *s, size_t len, uint64_t *ns, char *err, size_t errlen)
{
	static const struct {
		const char *unit;
		uint64_t ns;
	} units[] = {{"ms", MS}, {"s", SEC}, {"m", MIN}, {"h", HOUR}, {"d", DAY}};
	char b[SHOW + 4];
	uint64_t v = 0;
	size_t i = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!ns || (!s && len))
		return fail(err, errlen, "no duration");
	if (len == 0)
		return fail(err, errlen, "empty duration");
	tlp__clip(s, len, b, sizeof b);
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 15)
			return fail(err, errlen, "'%s' is too large a duration", b);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i == 0)
		return fail(err, errlen, "'%s' is not a duration (like 500ms, 2s, 1m, 1h)", b);
	if (i == len)
		return fail(
			err, errlen,
			"bare number '%s' has no unit: write %ss or %sms (units: ms, s, m, h, d)",
			b, b, b);
	if (s[i] == '.' || s[i] == ',')
		return fail(err, errlen, "'%s': fractions are not taken; use a smaller unit (ms)",
			    b);
	for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
		size_t ul = strlen(units[u].unit);

		if (len - i == ul && !memcmp(s + i, units[u].unit, ul)) {
			if (v > UINT64_MAX / units[u].ns)
				return fail(err, errlen, "'%s' is too large a duration", b);
			*ns = v * units[u].ns;
			return 0;
		}
	}
	return fail(err, errlen, "'%s' has an unknown unit (ms, s, m, h or d, as in 500ms, 2s)", b);
}

int tlp_size_parse(const char *s, size_t len, uint64_t *bytes, char *err, size_t errlen)
{
	char b[SHOW + 4];
	uint64_t v = 0, mult = 1;
	size_t i = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!bytes || (!s && len))
		return fail(err, errlen, "no size");
	if (len == 0)
		return fail(err, errlen, "empty size");
	tlp__clip(s, len, b, sizeof b);
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		if (i >= 15)
			return fail(err, errlen, "'%s' is too large a size", b);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i == 0)
		return fail(err, errlen, "'%s' is not a size (like 4096, 64k, 1m)", b);
	if (i < len) {
		if (len - i != 1)
			return fail(err, errlen, "'%s' has an unknown unit (k, m or g, as in 64k)",
				    b);
		switch (s[i]) {
		case 'k': case 'K': mult = 1ull << 10; break;
		case 'm': case 'M': mult = 1ull << 20; break;
		case 'g': case 'G': mult = 1ull << 30; break;
		default:
			return fail(err, errlen, "'%s' has an unknown unit (k, m or g, as in 64k)",
				    b);
		}
	}
	if (v > (1ull << 40) / mult)
		return fail(err, errlen, "'%s' is too large a size (at most 1024g)", b);
	*bytes = v * mult;
	return 0;
}

static int parse_port(const char *s, size_t len, uint16_t *out)
{
	uint32_t v = 0;

	if (len == 0 || len > 5 || s[0] == '0')
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int tlp_endpoint_parse(const char *s, size_t len, int allow_host, struct tlp_endpoint *ep,
		       char *err, size_t errlen)
{
	char b[SHOW + 4], host[INET6_ADDRSTRLEN + 1];
	const char *colon, *hs, *ps;
	size_t hl, pl;
	int bracket = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!ep || (!s && len))
		return fail(err, errlen, "no address");
	memset(ep, 0, sizeof *ep);
	if (len == 0)
		return fail(err, errlen, "empty address");
	tlp__clip(s, len, b, sizeof b);
	if (memchr(s, '\0', len))
		return fail(err, errlen, "address '%s' contains a NUL byte", b);
	if (len > 512)
		return fail(err, errlen, "address '%s' is too long", b);
	if (len >= 5 && !memcmp(s, "unix:", 5)) {
		if (len == 5)
			return fail(err, errlen, "empty Unix socket path in '%s'", b);
		if (len - 5 >= sizeof ep->addr.un.sun_path)
			return fail(err, errlen, "Unix socket path of %zu bytes: at most %zu",
				    len - 5, sizeof ep->addr.un.sun_path - 1);
		ep->kind = TLP_EP_UNIX;
		ep->addr.un.sun_family = AF_UNIX;
		memcpy(ep->addr.un.sun_path, s + 5, len - 5);
		return 0;
	}
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close)
			return fail(err, errlen, "'%s': no ']' after the IPv6 address", b);
		hs = s + 1;
		hl = (size_t)(close - hs);
		if ((size_t)(close - s) + 1 >= len || close[1] != ':')
			return fail(err, errlen, "'%s' needs :PORT after the ']'", b);
		ps = close + 2;
		pl = len - (size_t)(ps - s);
		bracket = 1;
	} else {
		colon = NULL;
		for (size_t i = 0; i < len; i++)
			if (s[i] == ':') {
				if (colon)
					return fail(err, errlen,
						    "'%s': an IPv6 address goes in brackets, as in [::1]:8080",
						    b);
				colon = s + i;
			}
		if (!colon)
			return fail(err, errlen, "'%s' needs a port (HOST:PORT)", b);
		hs = s;
		hl = (size_t)(colon - s);
		ps = colon + 1;
		pl = len - hl - 1;
	}
	if (hl == 0 || (hl == 1 && hs[0] == '*'))
		return fail(err, errlen,
			    "'%s' has no host: write 0.0.0.0:PORT or [::]:PORT for every address",
			    b);
	if (parse_port(ps, pl, &ep->port))
		return fail(err, errlen, "'%s': port must be 1 to 65535 (plain decimal)", b);
	if (bracket) {
		if (hl >= sizeof host)
			return fail(err, errlen, "'%s' is not an IPv6 address", b);
		memcpy(host, hs, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET6, host, &ep->addr.in6.sin6_addr) != 1)
			return fail(err, errlen, "'%s' is not an IPv6 address", b);
		ep->kind = TLP_EP_IP;
		ep->addr.in6.sin6_family = AF_INET6;
		ep->addr.in6.sin6_port = htons(ep->port);
		return 0;
	}
	if (hl < sizeof host) {
		memcpy(host, hs, hl);
		host[hl] = '\0';
		if (inet_pton(AF_INET, host, &ep->addr.in.sin_addr) == 1) {
			ep->kind = TLP_EP_IP;
			ep->addr.in.sin_family = AF_INET;
			ep->addr.in.sin_port = htons(ep->port);
			return 0;
		}
	}
	/* Digits and dots only is a mistyped IPv4 address, not a name. */
	int numeric = 1;

	for (size_t i = 0; i < hl; i++)
		if (!((hs[i] >= '0' && hs[i] <= '9') || hs[i] == '.'))
			numeric = 0;
	if (numeric)
		return fail(err, errlen, "'%s' is not an IPv4 address", b);
	if (tlp_sni_host_check(hs, hl) < 0)
		return fail(err, errlen, "'%s': the host is neither an IP address nor a host name",
			    b);
	if (!allow_host)
		return fail(err, errlen,
			    "'%s': listen on a numeric IP address (host names are for servers)", b);
	ep->kind = TLP_EP_HOST;
	return 0;
}

int tlp_endpoint_same(const struct tlp_endpoint *a, const struct tlp_endpoint *b)
{
	if (!a || !b || a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case TLP_EP_IP:
		if (a->addr.sa.sa_family != b->addr.sa.sa_family || a->port != b->port)
			return 0;
		if (a->addr.sa.sa_family == AF_INET)
			return a->addr.in.sin_addr.s_addr == b->addr.in.sin_addr.s_addr;
		return !memcmp(&a->addr.in6.sin6_addr, &b->addr.in6.sin6_addr, 16);
	case TLP_EP_UNIX:
		return !strcmp(a->addr.un.sun_path, b->addr.un.sun_path);
	case TLP_EP_HOST:
		return a->port == b->port && a->host && b->host && !strcmp(a->host, b->host);
	default:
		return 0;
	}
}

/* The identity Maglev places a server by: its canonical address. */
uint64_t tlp__ep_id(const struct tlp_endpoint *ep)
{
	uint8_t k[2 + 16 + 2];

	switch (ep->kind) {
	case TLP_EP_IP:
		memset(k, 0, sizeof k);
		k[0] = (uint8_t)ep->addr.sa.sa_family;
		if (ep->addr.sa.sa_family == AF_INET)
			memcpy(k + 2, &ep->addr.in.sin_addr, 4);
		else
			memcpy(k + 2, &ep->addr.in6.sin6_addr, 16);
		k[18] = (uint8_t)(ep->port >> 8);
		k[19] = (uint8_t)ep->port;
		return tlp_hash64(k, sizeof k, 1);
	case TLP_EP_HOST:
		return tlp_hash64(ep->host, strlen(ep->host), 2) ^ ep->port;
	default:
		return tlp_hash64(ep->addr.un.sun_path, strlen(ep->addr.un.sun_path), 3);
	}
}

/* Complete ep (from tlp_endpoint_parse) with copies of text and host. */
int tlp__ep_own(struct ctx *c, struct tlp_endpoint *ep, const char *s, size_t len)
{
	char *t = tlp__zalloc(c, c->model, len + 1);

	if (!t)
		return -1;
	memcpy(t, s, len);
	ep->text = t;
	if (ep->kind == TLP_EP_HOST) {
		const char *colon = strrchr(t, ':');
		size_t hl = (size_t)(colon - t);
		char *h = tlp__zalloc(c, c->model, hl + 1);

		if (!h)
			return -1;
		for (size_t i = 0; i < hl; i++)
			h[i] = t[i] >= 'A' && t[i] <= 'Z' ? (char)(t[i] - 'A' + 'a') : t[i];
		ep->host = h;
	}
	return 0;
}

int tlp__get_ep(struct ctx *c, const struct ynode *n, const char *path, int allow_host,
		struct tlp_endpoint *ep)
{
	char why[200];

	if (tlp__scalar(c, n, path))
		return -1;
	if (tlp_endpoint_parse(n->s, n->len, allow_host, ep, why, sizeof why) < 0) {
		tlp__errat(c, n->line, n->col, "%s: %s", path, why);
		return -1;
	}
	return tlp__ep_own(c, ep, n->s, n->len);
}

/* A list of networks into a set (storage in the model). */
int tlp__get_nets(struct ctx *c, const struct ynode *n, const char *path, struct tlp_netset *set)
{
	uint32_t count = tlp__item_count(n), k = 0;
	struct tlp_cidr *cidr;
	struct tlp_range4 *r4;
	struct tlp_range6 *r6;
	int bad = 0;

	if (n->kind == YN_MAP) {
		tlp__errat(c, n->line, n->col, "%s: expected a list of networks", path);
		return -1;
	}
	if (count > TLP_MAX_CIDRS) {
		tlp__errat(c, n->line, n->col, "%s: more than %d networks", path, TLP_MAX_CIDRS);
		return -1;
	}
	cidr = tlp__zalloc(c, c->tree, (count ? count : 1) * sizeof *cidr);
	r4 = tlp__zalloc(c, c->model, (count ? count : 1) * sizeof *r4);
	r6 = tlp__zalloc(c, c->model, (count ? count : 1) * sizeof *r6);
	if (!cidr || !r4 || !r6)
		return -1;
	for (const struct ynode *it = tlp__first_item(n); it; it = tlp__next_item(n, it), k++) {
		char p[256], why[200];

		PATH(p, "%s[%u]", path, k);
		if (tlp__scalar(c, it, p)) {
			bad = 1;
			continue;
		}
		if (tlp_cidr_parse(it->s, it->len, &cidr[k], why, sizeof why) < 0) {
			tlp__errat(c, it->line, it->col, "%s: %s", p, why);
			bad = 1;
		}
	}
	if (bad)
		return -1;
	if (tlp_netset_build(set, cidr, count, r4, r6) < 0) {
		tlp__errat(c, n->line, n->col, "%s: cannot build the network set", path);
		return -1;
	}
	return 0;
}
