/* tools/tlhttp/main.c: tlhttp, a small HTTP/1.1 server on the sharded runtime: the command line, the runtime and the summary at exit. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "turnloop.h"
#include "util.h"
#include "tlhttp/alog.h"
#include "tlhttp/args.h"
#include "tlhttp/path.h"
#include "tlhttp/server.h"

/* Bytes of access log a shard may have waiting for the writer. */
#define ALOG_RING (1u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tlhttp --listen HOST:PORT (--body TEXT | --root DIR) [--shards N] [--cpus LIST]\n"
		"              [--reuseport] [--access-log FILE] [--header-timeout D] [--idle-timeout D]\n"
		"              [--file-cache-idle D] [--max-conns N] [--tls-cert FILE --tls-key FILE]\n"
		"Serves GET and HEAD over HTTP/1.1 (and 1.0), keep-alive and pipelined, on one shard per\n"
		"core (or --shards N, --cpus LIST), each with its own listener on HOST:PORT.\n"
		"  --listen HOST:PORT    a numeric IPv4 address, or [IPv6], and a port\n"
		"  --body TEXT           answer every GET with TEXT (text/plain)\n"
		"  --root DIR            serve the files beneath DIR (a directory gives its index.html;\n"
		"                        symbolic links and paths leaving DIR are not found)\n"
		"  --reuseport           share the port with another process already listening on it\n"
		"                        (without it, tlhttp refuses to start on a port in use)\n"
		"  --access-log FILE     append one line per answer to FILE, written off the shards'\n"
		"                        threads (lines are dropped, and counted, if it falls behind)\n"
		"  --header-timeout D    a request head must arrive within D (default 10s)\n"
		"  --idle-timeout D      close a connection idle for D (default 60s)\n"
		"  --file-cache-idle D   with --root: close a served file's descriptor once unused\n"
		"                        for D (default 2s)\n"
		"  --max-conns N         connections per shard (default 4096); more are closed at once\n"
		"  --tls-cert FILE       serve HTTPS (TLS 1.2 and 1.3) with this PEM certificate (its\n"
		"                        chain after it); --tls-key FILE is its key\n"
		"Durations: digits with ms, s or m (10ms to 24h). Stats: tlshard stats PID.\n");
}

static int declare_stats(tl_runtime *rt, struct tlhttp_server *srv)
{
	static const char *const classes[4] = {"2xx", "3xx", "4xx", "5xx"};

	srv->st_resp = tl_runtime_stat(rt, "responses", TL_STAT_COUNTER, 4);
	srv->st_conns = tl_runtime_gauge(rt, "conns");
	srv->st_refused = tl_runtime_counter(rt, "conns_refused");
	srv->st_dropped = tl_runtime_counter(rt, "log_dropped");
	/* only with HTTPS: a plain server's stats have no TLS row */
	srv->st_tls_failed = srv->tls ? tl_runtime_counter(rt, "tls_failed") : 0;
	if (srv->st_resp < 0 || srv->st_conns < 0 || srv->st_refused < 0 || srv->st_dropped < 0 ||
	    srv->st_tls_failed < 0)
		return -ENOMEM;
	for (int i = 0; i < 4; i++)
		if (tl_runtime_stat_label(rt, srv->st_resp + i, classes[i]) < 0)
			return -EINVAL;
	return 0;
}

/* tl_runtime_new failed with r: which part of the plan (the options or
 * TL_CPUS, TL_SHARDS, TL_SMT) cannot be met, and why. */
static int plan_failed(int r, const struct tlhttp_opts *o)
{
	const char *why = tl_error_detail();

	fprintf(stderr, "tlhttp: cannot plan the shards%s%s: %s\n", o->cpus ? " on cpus " : "",
		o->cpus ? o->cpus : "", why[0] ? why : tl_strerror(r));
	return r == -EINVAL ? 2 : 1;
}

int main(int argc, char **argv)
{
	struct tlhttp_opts o;
	struct tlhttp_server srv = {.o = &o, .root = -1};
	const struct tlhttp_limits lim = TLHTTP_LIMITS_DEFAULT;
	tl_runtime_config rc;
	tl_runtime *rt;
	char err[512];
	int r, status = 0;

	switch (tlhttp_args_parse(argc, argv, &o, err, sizeof err)) {
	case 0:
		break;
	case 1:
		usage(stdout);
		return 0;
	default:
		fprintf(stderr, "tlhttp: %s\n", err);
		return 2;
	}
	srv.lim = lim;
	/* Every connection and every cached file is a descriptor: take what
	 * the hard limit allows (the soft one is often 1024). */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (!o.reuseport) {
		int taken = tl_tool_port_taken(&o.addr);
		if (taken > 0) {
			fprintf(stderr, "tlhttp: %s:%u is already in use by another process "
					"(--reuseport shares it)\n", o.host, o.port);
			return 1;
		}
		if (taken < 0) {
			fprintf(stderr, "tlhttp: cannot listen on %s:%u: %s\n", o.host, o.port,
				tl_strerror(taken));
			return 1;
		}
	}
	if (o.root) {
		srv.root = tlhttp_root_open(o.root);
		if (srv.root < 0) {
			fprintf(stderr, "tlhttp: cannot serve %s: %s%s\n", o.root, tl_strerror(srv.root),
				srv.root == -ENOSYS ? " (openat2 is needed: Linux 5.6 or later)" : "");
			return 1;
		}
	}

	if (o.tls_cert) {
		/* read once, before the shards start, and shared by all of them */
		tl_tls_cert c = {.cert_file = o.tls_cert, .key_file = o.tls_key};
		tl_tls_settings ts = {.role = TL_TLS_SERVER, .certs = &c, .ncerts = 1, .alpn = "http/1.1"};
		r = tl_tls_config_new(&ts, &srv.tls, err, sizeof err);
		if (r < 0) {
			fprintf(stderr, "tlhttp: %s\n", err);
			if (srv.root >= 0)
				close(srv.root);
			return 1;
		}
	}

	tl_runtime_config_init(&rc);
	rc.plan.shards = o.shards;
	rc.plan.cpus = o.cpus;
	tlhttp_loop_config(&o, &rc.loop);
	rc.on_launch = tlhttp_shard_launch;
	rc.on_drain = tlhttp_shard_drain;
	rc.on_stop = tlhttp_shard_stop;
	rc.on_pass = tlhttp_shard_pass;
	rc.on_completion = tlhttp_shard_completion;
	if (srv.tls)
		rc.handlers[TLHTTP_TLS_TAG] = tlhttp_shard_tls;
	rc.arg = &srv;
	r = tl_runtime_new(&rt, &rc);
	if (r < 0) {
		if (srv.root >= 0)
			close(srv.root);
		tl_tls_config_unref(srv.tls);
		return plan_failed(r, &o);
	}
	srv.nshards = tl_runtime_shards(rt);
	srv.shards = calloc(srv.nshards, sizeof *srv.shards);
	srv.totals = calloc(srv.nshards, sizeof *srv.totals);
	if (!srv.shards || !srv.totals || declare_stats(rt, &srv) < 0) {
		fprintf(stderr, "tlhttp: out of memory\n");
		status = 1;
		goto out;
	}
	if (o.access_log) {
		r = tlhttp_alog_open(&srv.alog, o.access_log, srv.nshards, ALOG_RING);
		if (r == 0 && (r = tlhttp_alog_start(srv.alog)) < 0) {
			tlhttp_alog_stop(srv.alog, 0, NULL);
			srv.alog = NULL;
		}
		if (r < 0) {
			fprintf(stderr, "tlhttp: cannot write the access log %s: %s\n", o.access_log,
				tl_strerror(r));
			status = 1;
			goto out;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	r = tl_runtime_launch(rt);
	if (r < 0) {
		fprintf(stderr, "tlhttp: cannot start: %s\n", tl_error_detail());
		status = 1;
		goto out;
	}
	tl_driver_info di;
	tl_driver_info_get(&di);
	char what[sizeof o.host + 64];
	if (o.root)
		snprintf(what, sizeof what, "files beneath %s", o.root);
	else
		snprintf(what, sizeof what, "a body of %u bytes", o.body_len);
	fprintf(stderr, "tlhttp: listening on %s%s%s:%u%s with %u shard%s, serving %s, driver %s\n",
		o.addr.sa.sa_family == AF_INET6 ? "[" : "", o.host,
		o.addr.sa.sa_family == AF_INET6 ? "]" : "", o.port, srv.tls ? " (HTTPS)" : "", srv.nshards,
		srv.nshards == 1 ? "" : "s", what, di.reason);
	r = tl_runtime_run(rt);
	if (r < 0) {
		fprintf(stderr, "tlhttp: %s\n", tl_error_detail());
		status = 1;
	}
	for (uint32_t i = 0; i < srv.nshards; i++) {
		const struct tlhttp_totals *t = &srv.totals[i];
		fprintf(stderr, "tlhttp: shard %u (cpu %d): %llu connections (%llu refused), %llu "
				"answers: %llu 2xx, %llu 3xx, %llu 4xx, %llu 5xx%s",
			i, tl_runtime_plan(rt)->shards[i].pu_os_index, (unsigned long long)t->conns,
			(unsigned long long)t->refused, (unsigned long long)t->requests,
			(unsigned long long)t->status[2], (unsigned long long)t->status[3],
			(unsigned long long)t->status[4], (unsigned long long)t->status[5],
			srv.alog ? "" : "\n");
		if (srv.alog)
			fprintf(stderr, ", %llu log lines dropped\n", (unsigned long long)t->log_dropped);
		if (srv.tls)
			fprintf(stderr, "tlhttp: shard %u: %llu TLS handshakes failed\n", i,
				(unsigned long long)t->tls_failed);
	}
out:
	tl_runtime_destroy(rt);
	if (srv.shards)
		tlhttp_shards_free(&srv);
	if (srv.alog) {
		uint64_t left = 0;
		if (tlhttp_alog_stop(srv.alog, 5000, &left) < 0)
			fprintf(stderr, "tlhttp: access log: the file takes no more; %llu bytes not "
					"written\n", (unsigned long long)left);
	}
	if (srv.root >= 0)
		close(srv.root);
	free(srv.shards);
	free(srv.totals);
	tl_tls_config_unref(srv.tls);
	return status;
}
