/* tools/tlhttp/args.h: tlhttp's command line, parsed without I/O so that tests and a fuzzer can run it. */
#ifndef TLHTTP_ARGS_H
#define TLHTTP_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop.h"

/*
 * tlhttp --listen HOST:PORT [--shards N] [--cpus LIST] (--body TEXT | --root DIR)
 *        [--reuseport] [--access-log FILE] [--header-timeout D] [--idle-timeout D]
 *        [--max-conns N] [--tls-cert FILE --tls-key FILE] [-h | --help]
 *
 * HOST is a numeric IPv4 address or an IPv6 address in brackets
 * ("[::1]:8080"); PORT is 1..65535. A duration D is whole digits with an
 * optional unit, ms, s or m (no unit: seconds), from 10 ms to 24 h.
 * Exactly one of --body and --root is required. --body's text is at most
 * TLHTTP_BODY_MAX bytes. --tls-cert and --tls-key go together (HTTPS).
 */
#define TLHTTP_BODY_MAX (1u << 20)

struct tlhttp_opts {
	tl_addr addr;               /* --listen, parsed */
	char host[48];              /* its host part as given, brackets removed */
	uint16_t port;              /* its port */
	uint32_t shards;            /* --shards 1..1024; 0 = not given */
	const char *cpus;           /* --cpus, a CPU list below 1024; NULL = not given */
	const char *body;           /* --body, or NULL */
	uint32_t body_len;          /* its length */
	const char *root;           /* --root, or NULL */
	int reuseport;              /* --reuseport: share the port with another process */
	const char *access_log;     /* --access-log FILE, or NULL */
	uint64_t header_timeout_ns; /* --header-timeout, default 10 s */
	uint64_t idle_timeout_ns;   /* --idle-timeout, default 60 s */
	uint64_t file_idle_ns;      /* --file-cache-idle, default 2 s (TLHTTP_FCACHE_IDLE_NS) */
	uint32_t max_conns;         /* --max-conns per shard, 1..1048576, default 4096 */
	const char *tls_cert;       /* --tls-cert FILE (PEM, chain after it), or NULL */
	const char *tls_key;        /* --tls-key FILE, or NULL */
};

/*
 * Reads argv[0..argc-1] (argv[argc] need not be NULL), never writes it,
 * prints nothing and keeps no state. Strings in *o point into argv.
 * Returns 0 (the options are in *o), 1 (help was asked for: print the usage
 * on stdout, exit 0), or -EINVAL with a one-line reason in err (err may be
 * NULL or errlen 0; a long reason is cut to errlen - 1 bytes). tlhttp
 * prints the reason as "tlhttp: <reason>" and exits 2.
 */
int tlhttp_args_parse(int argc, char **argv, struct tlhttp_opts *o, char *err, size_t errlen);

/* Parses a duration as above into nanoseconds. 0, or -EINVAL. */
int tlhttp_duration_parse(const char *s, uint64_t *ns);

#endif
