/* tools/cli.c: the command-line parsers of tlecho, tlload and tlshard (see cli.h); no I/O, so tests and fuzzers can call them. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "digits.h"
#include "reason.h"

/* Seconds like "1", "0.5", "2.25": 0.01 .. 3600. The first character is
 * checked by hand because strtod would skip spaces and take a sign. */
static int parse_secs(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s || (*s != '.' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0.01 || v > 3600)
		return -1;
	*out = v;
	return 0;
}

/* The tools take CPU lists below 1024: tl_cpulist_parse on 16 words. */
static int cpulist_ok(const char *s)
{
	uint64_t mask[16];

	return tl_cpulist_parse(s, mask, 16) == 0;
}

/* ---- tlecho ---- */

int tlecho_parse(int argc, char **argv, struct tlecho_opts *o, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!o || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(o, 0, sizeof *o);
	o->host = "127.0.0.1";
	o->driver = TL_DRIVER_DEFAULT;
	o->buffers = 4096;
	o->buffer_size = 4096;
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
		if (!strcmp(a, "--udp")) {
			o->udp = 1;
			continue;
		}
		if (!v)
			return fail(err, errlen, "%s needs a value", a);
		i++;
		if (!strcmp(a, "-p") || !strcmp(a, "--port")) {
			if (tools_digits32(v, 1, 65535, &o->port))
				return fail(err, errlen, "bad port '%s' (1-65535)", v);
		} else if (!strcmp(a, "--host")) {
			o->host = v;
		} else if (!strcmp(a, "--driver")) {
			if (!strcmp(v, "epoll"))
				o->driver = TL_DRIVER_EPOLL;
			else if (!strcmp(v, "uring"))
				o->driver = TL_DRIVER_URING;
			else
				return fail(err, errlen, "unknown driver '%s' (epoll, uring)", v);
		} else if (!strcmp(a, "--buffers")) {
			if (tools_digits32(v, 1, 32768, &o->buffers))
				return fail(err, errlen, "bad buffer count '%s' (1-32768)", v);
		} else if (!strcmp(a, "--shards")) {
			if (tools_digits32(v, 1, 1024, &o->shards))
				return fail(err, errlen, "bad shard count '%s' (1-1024)", v);
		} else if (!strcmp(a, "--cpus")) {
			if (!cpulist_ok(v))
				return fail(err, errlen, "bad CPU list '%s' (like 0-3,6)", v);
			o->cpus = v;
		} else if (!strcmp(a, "--buffer-size")) {
			if (tools_digits32(v, 64, 1u << 20, &o->buffer_size))
				return fail(err, errlen, "bad buffer size '%s' (64-1048576)", v);
		} else if (!strcmp(a, "--tls-cert")) {
			o->tls_cert = v;
		} else if (!strcmp(a, "--tls-key")) {
			o->tls_key = v;
		} else {
			return fail(err, errlen, "unknown option '%s'", a);
		}
	}
	if (!o->port)
		return fail(err, errlen, "-p PORT is required");
	if (!o->tls_cert != !o->tls_key)
		return fail(err, errlen, "%s needs %s too", o->tls_cert ? "--tls-cert" : "--tls-key",
			    o->tls_cert ? "--tls-key" : "--tls-cert");
	if (o->udp && (o->tls_cert || o->shards || o->cpus))
		return fail(err, errlen, "--udp takes no %s", o->tls_cert ? "--tls-cert"
							       : "--shards or --cpus");
	if (tl_addr_parse(&o->addr, o->host, (uint16_t)o->port) < 0)
		return fail(err, errlen, "bad address '%s'", o->host);
	return 0;
}

/* ---- tlload ---- */

int tlload_parse(int argc, char **argv, struct tlload_opts *o, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!o || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(o, 0, sizeof *o);
	o->host = "127.0.0.1";
	o->conns = 50;
	o->size = 64;
	o->secs = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!a)
			return fail(err, errlen, "missing argument %d", i);
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return 1;
		if (!v)
			return fail(err, errlen, "%s needs a value", a);
		i++;
		if (!strcmp(a, "-p"))
			bad = tools_digits32(v, 1, 65535, &o->port);
		else if (!strcmp(a, "--host"))
			o->host = v;
		else if (!strcmp(a, "-c"))
			bad = tools_digits32(v, 1, 10000, &o->conns);
		else if (!strcmp(a, "-s"))
			bad = tools_digits32(v, 1, 1u << 20, &o->size);
		else if (!strcmp(a, "-d"))
			bad = tools_digits32(v, 1, 86400, &o->secs);
		else if (!strcmp(a, "--churn"))
			bad = tools_digits32(v, 1, 1u << 30, &o->churn);
		else
			return fail(err, errlen, "unknown option '%s'", a);
		if (bad)
			return fail(err, errlen, "bad value '%s' for %s", v, a);
	}
	if (!o->port)
		return fail(err, errlen, "-p PORT is required");
	if (tl_addr_parse(&o->addr, o->host, (uint16_t)o->port) < 0)
		return fail(err, errlen, "bad address '%s'", o->host);
	return 0;
}

/* ---- tlshard plan, topo and run ---- */

enum { CMD_PLAN, CMD_TOPO, CMD_RUN };

static int is_help(const char *a)
{
	return !strcmp(a, "-h") || !strcmp(a, "--help");
}

/* Options shared by plan, topo and run, from argv[2]; run stops at "--". */
static int plan_opts(int argc, char **argv, struct tlshard_plan_opts *o, int cmd, char *err,
		     size_t errlen)
{
	int i;

	if (err && errlen)
		err[0] = '\0';
	if (!o || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(o, 0, sizeof *o);
	for (i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;

		if (!a)
			return fail(err, errlen, "missing argument %d", i);
		if (cmd == CMD_RUN && !strcmp(a, "--")) {
			if (i + 1 >= argc || !argv[i + 1])
				return fail(err, errlen, "run needs a command after --");
			o->cmd = i + 1;
			return 0;
		}
		if (is_help(a))
			return 1;
		if (!strcmp(a, "--smt")) {
			o->req.smt = 1;
			o->set_smt = 1;
			continue;
		}
		if (cmd != CMD_RUN && !strcmp(a, "--json")) {
			o->json = 1;
			continue;
		}
		if (strcmp(a, "--cpus") && strcmp(a, "--shards") &&
		    (cmd == CMD_RUN || strcmp(a, "--topology")))
			return fail(err, errlen,
				    cmd == CMD_RUN ? "unknown option '%s' (options end with --)"
						   : "unknown option '%s'",
				    a);
		if (!v)
			return fail(err, errlen, "%s needs a value", a);
		i++;
		if (!strcmp(a, "--cpus")) {
			/* A list is checked for form here, for allowed CPUs
			 * by the plan. */
			if (!cpulist_ok(v))
				return fail(err, errlen,
					    "bad CPU list '%s' (like 0-3,6; CPUs below 1024)", v);
			o->req.cpus = v;
			o->set_cpus = 1;
		} else if (!strcmp(a, "--shards")) {
			if (tools_digits(v, 1, TL_PLAN_MAX_SHARDS, &n))
				return fail(err, errlen, "bad shard count '%s' (1-65536)", v);
			o->req.shards = (uint32_t)n;
			o->set_shards = 1;
		} else {
			/* hwloc judges the description; only an empty one is
			 * refused here. */
			if (!*v)
				return fail(err, errlen, "--topology needs a synthetic description "
							 "or an XML file");
			o->topology = v;
		}
	}
	if (cmd == CMD_RUN)
		return fail(err, errlen, "run needs -- CMD [ARGS...]");
	return 0;
}

int tlshard_plan_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		       size_t errlen)
{
	return plan_opts(argc, argv, o, CMD_PLAN, err, errlen);
}

int tlshard_topo_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		       size_t errlen)
{
	return plan_opts(argc, argv, o, CMD_TOPO, err, errlen);
}

int tlshard_run_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		      size_t errlen)
{
	return plan_opts(argc, argv, o, CMD_RUN, err, errlen);
}

/* ---- tlshard stats ---- */

int tlshard_stats_parse(int argc, char **argv, struct tlshard_stats_opts *o, char *err,
			size_t errlen)
{
	uint64_t pid;
	int json = 0, format = -1;

	if (err && errlen)
		err[0] = '\0';
	if (!o || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(o, 0, sizeof *o);
	for (int i = 2; i < argc; i++)
		if (argv[i] && is_help(argv[i]))
			return 1;
	if (argc < 3 || !argv[2])
		return fail(err, errlen, "stats needs a PID");
	if (tools_digits(argv[2], 1, 0x7fffffff, &pid))
		return fail(err, errlen, "bad PID '%s'", argv[2]);
	o->pid = (int)pid;
	for (int i = 3; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!a)
			return fail(err, errlen, "missing argument %d", i);
		if (!strcmp(a, "--watch")) {
			o->watch = 1;
			o->secs = 1;
			/* The interval is optional: a number right after it. */
			if (v && ((*v >= '0' && *v <= '9') || *v == '.')) {
				if (parse_secs(v, &o->secs))
					return fail(err, errlen,
						    "bad interval '%s' (seconds, 0.01-3600)", v);
				i++;
			}
			continue;
		}
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (strcmp(a, "--count") && strcmp(a, "--format"))
			return fail(err, errlen, "unknown option '%s'", a);
		if (!v)
			return fail(err, errlen, "%s needs a value", a);
		i++;
		if (!strcmp(a, "--count")) {
			if (tools_digits(v, 1, 1000000000, &o->count))
				return fail(err, errlen, "bad count '%s' (1-1000000000)", v);
		} else if (!strcmp(v, "table")) {
			format = TLSHARD_TABLE;
		} else if (!strcmp(v, "json")) {
			format = TLSHARD_JSON;
		} else if (!strcmp(v, "prometheus")) {
			format = TLSHARD_PROMETHEUS;
		} else {
			return fail(err, errlen, "unknown format '%s' (table, json, prometheus)", v);
		}
	}
	if (json && format >= 0 && format != TLSHARD_JSON)
		return fail(err, errlen, "--json and --format %s contradict each other",
			    format == TLSHARD_TABLE ? "table" : "prometheus");
	o->format = json ? TLSHARD_JSON : format >= 0 ? format : TLSHARD_TABLE;
	if (o->count && !o->watch)
		return fail(err, errlen, "--count needs --watch");
	if (o->watch && o->format == TLSHARD_PROMETHEUS)
		return fail(err, errlen, "--watch does not go with --format prometheus (a scraper "
					 "asks again by itself)");
	return 0;
}
