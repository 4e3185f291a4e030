/* tools/cli.h: the command-line parsers of tlecho, tlload and tlshard, kept apart from the tools so that tests and fuzzers can run them. */
#ifndef TL_TOOLS_CLI_H
#define TL_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop.h"

/*
 * Every parser below reads argv[0..argc-1] (argv[argc] need not be NULL),
 * never writes it, prints nothing and keeps no state, so any argv is safe to
 * hand it. Strings in the results point into argv.
 *
 * Returns 0 (the options are in *o), 1 (help was asked for: print the usage
 * on stdout, exit 0), or -EINVAL with a one-line reason in err (err may be
 * NULL or errlen 0; a long reason is cut to errlen - 1 bytes). The tools
 * print the reason as "<tool>: <reason>" on stderr and exit 2.
 */

/* tlecho -p PORT [--host IP] [--driver epoll|uring] [--buffers N]
 * [--buffer-size BYTES] [--shards N] [--cpus LIST] [--reuseport]
 * [--tls-cert FILE --tls-key FILE] [--udp] */
struct tlecho_opts {
	uint32_t port;        /* 1..65535, required */
	const char *host;     /* default "127.0.0.1" */
	tl_addr addr;         /* host and port, parsed */
	int driver;           /* enum tl_driver_kind; TL_DRIVER_DEFAULT unless --driver */
	uint32_t buffers;     /* pooled read buffers, 1..32768, default 4096 */
	uint32_t buffer_size; /* bytes per buffer, 64..1048576, default 4096 */
	uint32_t shards;      /* 1..1024, 0 = not given */
	const char *cpus;     /* a CPU list below 1024, NULL = not given */
	int reuseport;        /* --reuseport: share the port with other processes */
	const char *tls_cert; /* --tls-cert: echo over TLS with this PEM certificate... */
	const char *tls_key;  /* ... and --tls-key: its key (both or neither) */
	int udp;              /* --udp: echo datagrams (one loop; not with TLS or shards) */
};
int tlecho_parse(int argc, char **argv, struct tlecho_opts *o, char *err, size_t errlen);

/* tlload -p PORT [--host IP] [-c CONNS] [-s SIZE] [-d SECS] [--churn N] */
struct tlload_opts {
	uint32_t port;    /* 1..65535, required */
	const char *host; /* default "127.0.0.1" */
	tl_addr addr;     /* host and port, parsed */
	uint32_t conns;   /* 1..10000, default 50 */
	uint32_t size;    /* message bytes, 1..2^20, default 64 */
	uint32_t secs;    /* 1..86400, default 3 */
	uint32_t churn;   /* round trips per connection, 1..2^30; 0 = no churn */
};
int tlload_parse(int argc, char **argv, struct tlload_opts *o, char *err, size_t errlen);

/*
 * tlshard plan [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]
 * tlshard topo [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]
 * tlshard run [--cpus LIST] [--shards N] [--smt] -- CMD [ARGS...]
 * argv[1] is the command; its options start at argv[2]. -h or --help among
 * them (before "--" for run) returns 1: print that command's manual. req is
 * what the options asked for; the environment is the caller's to add
 * (tl_plan_from_env).
 */
struct tlshard_plan_opts {
	tl_plan_request req;
	int set_cpus, set_shards, set_smt; /* which options were given */
	const char *topology;              /* --topology: synthetic or XML; NULL = this machine */
	int json;                          /* --json */
	int cmd;                           /* run: argv index of CMD (< argc) */
};
int tlshard_plan_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		       size_t errlen);
int tlshard_topo_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		       size_t errlen);
int tlshard_run_parse(int argc, char **argv, struct tlshard_plan_opts *o, char *err,
		      size_t errlen);

/*
 * tlshard stats PID [--watch [SECS]] [--count N] [--json]
 *                   [--format table|json|prometheus]
 * argv[2] is the PID (or -h/--help). --watch without a number watches every
 * second. --json is --format json. --count needs --watch; --watch does not
 * go with prometheus (a scraper asks again by itself).
 */
enum { TLSHARD_TABLE = 0, TLSHARD_JSON = 1, TLSHARD_PROMETHEUS = 2 };
struct tlshard_stats_opts {
	int pid;        /* 1..2^31-1 */
	int watch;      /* --watch given */
	double secs;    /* its interval, 0.01..3600 (1 when not given); 0 without --watch */
	uint64_t count; /* --count, 1..10^9; 0 = forever (only with --watch) */
	int format;     /* TLSHARD_TABLE, _JSON, _PROMETHEUS */
};
int tlshard_stats_parse(int argc, char **argv, struct tlshard_stats_opts *o, char *err,
			size_t errlen);

#endif /* TL_TOOLS_CLI_H */
