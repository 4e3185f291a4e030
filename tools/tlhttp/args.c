/* tools/tlhttp/args.c: tlhttp's command-line parser (see args.h); no I/O. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tlhttp/args.h"
#include "tlhttp/fcache.h"
#include "digits.h"
#include "reason.h"

int tlhttp_duration_parse(const char *s, uint64_t *ns)
{
	const uint64_t lo = 10 * 1000000ull, hi = 86400 * 1000000000ull;
	uint64_t v = 0, unit;
	const char *p = s;

	if (!s || !ns || *s < '0' || *s > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > hi / 1000000ull) /* past 24 h in any unit */
			return -EINVAL;
	}
	if (!*p || !strcmp(p, "s"))
		unit = 1000000000ull;
	else if (!strcmp(p, "ms"))
		unit = 1000000ull;
	else if (!strcmp(p, "m"))
		unit = 60 * 1000000000ull;
	else
		return -EINVAL;
	if (v > hi / unit || v * unit < lo)
		return -EINVAL;
	*ns = v * unit;
	return 0;
}

/* "1.2.3.4:80" or "[::1]:80". */
static int parse_listen(const char *s, struct tlhttp_opts *o)
{
	const char *colon = strrchr(s, ':'), *h = s;
	size_t hl;
	uint32_t port;

	if (!colon || tools_digits32(colon + 1, 1, 65535, &port))
		return -1;
	hl = (size_t)(colon - s);
	if (hl && s[0] == '[') {
		if (hl < 3 || s[hl - 1] != ']')
			return -1;
		h = s + 1;
		hl -= 2;
	} else if (memchr(s, ':', hl)) {
		return -1; /* an IPv6 address needs its brackets */
	}
	if (!hl || hl >= sizeof o->host)
		return -1;
	memcpy(o->host, h, hl);
	o->host[hl] = '\0';
	if (tl_addr_parse(&o->addr, o->host, (uint16_t)port) < 0)
		return -1;
	if ((s[0] == '[') != (o->addr.sa.sa_family == AF_INET6))
		return -1;
	o->port = (uint16_t)port;
	return 0;
}

int tlhttp_args_parse(int argc, char **argv, struct tlhttp_opts *o, char *err, size_t errlen)
{
	int have_listen = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!o || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(o, 0, sizeof *o);
	o->header_timeout_ns = 10 * 1000000000ull;
	o->idle_timeout_ns = 60 * 1000000000ull;
	o->file_idle_ns = TLHTTP_FCACHE_IDLE_NS;
	o->max_conns = 4096;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!a)
			return fail(err, errlen, "missing argument %d", i);
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		if (!strcmp(a, "--reuseport")) {
			o->reuseport = 1;
			continue;
		}
		if (strncmp(a, "--", 2) || !strcmp(a, "--"))
			return fail(err, errlen, "unexpected argument '%s' (see --help)", a);
		if (!v)
			return fail(err, errlen, "%s needs a value", a);
		i++;
		if (!strcmp(a, "--listen")) {
			if (parse_listen(v, o))
				return fail(err, errlen,
					    "bad --listen '%s' (HOST:PORT, HOST a numeric IPv4 address "
					    "or [IPv6], PORT 1-65535)", v);
			have_listen = 1;
		} else if (!strcmp(a, "--shards")) {
			if (tools_digits32(v, 1, 1024, &o->shards))
				return fail(err, errlen, "bad shard count '%s' (1-1024)", v);
		} else if (!strcmp(a, "--cpus")) {
			uint64_t mask[16];
			if (tl_cpulist_parse(v, mask, 16) < 0)
				return fail(err, errlen, "bad CPU list '%s' (like 0-3,6; CPUs below 1024)",
					    v);
			o->cpus = v;
		} else if (!strcmp(a, "--body")) {
			size_t n = strlen(v);
			if (n > TLHTTP_BODY_MAX)
				return fail(err, errlen, "--body is %zu bytes, more than %u", n,
					    TLHTTP_BODY_MAX);
			o->body = v;
			o->body_len = (uint32_t)n;
		} else if (!strcmp(a, "--root")) {
			if (!*v)
				return fail(err, errlen, "--root needs a directory");
			o->root = v;
		} else if (!strcmp(a, "--access-log")) {
			if (!*v)
				return fail(err, errlen, "--access-log needs a file name");
			o->access_log = v;
		} else if (!strcmp(a, "--header-timeout") || !strcmp(a, "--idle-timeout") ||
			   !strcmp(a, "--file-cache-idle")) {
			uint64_t ns;
			if (tlhttp_duration_parse(v, &ns) < 0)
				return fail(err, errlen,
					    "bad %s '%s' (digits and ms, s or m; 10ms to 24h)", a, v);
			*(a[2] == 'h' ? &o->header_timeout_ns
				      : a[2] == 'i' ? &o->idle_timeout_ns : &o->file_idle_ns) = ns;
		} else if (!strcmp(a, "--tls-cert") || !strcmp(a, "--tls-key")) {
			if (!*v)
				return fail(err, errlen, "%s needs a file name", a);
			*(a[6] == 'c' ? &o->tls_cert : &o->tls_key) = v;
		} else if (!strcmp(a, "--max-conns")) {
			if (tools_digits32(v, 1, 1u << 20, &o->max_conns))
				return fail(err, errlen, "bad --max-conns '%s' (1-1048576)", v);
		} else {
			return fail(err, errlen, "unknown option '%s' (see --help)", a);
		}
	}
	if (!have_listen)
		return fail(err, errlen, "--listen HOST:PORT is required");
	if (!o->tls_cert != !o->tls_key)
		return fail(err, errlen, "%s needs %s too", o->tls_cert ? "--tls-cert" : "--tls-key",
			    o->tls_cert ? "--tls-key" : "--tls-cert");
	if (!o->body == !o->root)
		return fail(err, errlen, o->body ? "--body and --root do not go together"
						 : "one of --body TEXT or --root DIR is required");
	return 0;
}
