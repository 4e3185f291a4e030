/* tools/tlproxy/config.h: tlproxy's configuration: the data model it runs from, loaded from YAML (libyaml) or built from command-line options, with every error located and collected. */
#ifndef TLP_CONFIG_H
#define TLP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "balance.h"
#include "netlist.h"
#include "sni.h"

/* Limits of the model (a config past one is refused with a message). */
#define TLP_CFG_MAX_ERRORS 32     /* errors kept per load; the rest only counted */
#define TLP_MAX_LISTENERS 256
#define TLP_MAX_POOLS 256
#define TLP_MAX_LISTEN 16         /* addresses per listener */
#define TLP_MAX_SERVERS 1024      /* servers per pool */
#define TLP_RETRIES_MAX 10        /* a pool's retries */
#define TLP_MAX_SNI_RULES 1024    /* per listener */
#define TLP_MAX_CIDRS 4096        /* per allow, deny or proxy_protocol_from list */
#define TLP_NAME_MAX 63           /* listener and pool names */
#define TLP_HEALTH_DATA_MAX 1024  /* health send and expect strings */
#define TLP_MAX_CONNS_LIMIT 10000000u
#define TLP_CONFIG_FILE_MAX (4u << 20) /* tlp_config_load refuses bigger files */

/* An address to listen on or connect to. */
enum tlp_ep_kind {
	TLP_EP_IP = 1, /* numeric IPv4/IPv6 address and port: addr.in or addr.in6 */
	TLP_EP_HOST,   /* a host name and port, to be resolved (servers only) */
	TLP_EP_UNIX,   /* a Unix socket path: addr.un */
};

struct tlp_endpoint {
	int kind;          /* enum tlp_ep_kind */
	uint16_t port;     /* TLP_EP_IP and TLP_EP_HOST */
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
		struct sockaddr_un un; /* sun_path NUL-terminated */
	} addr;            /* TLP_EP_IP (port included) and TLP_EP_UNIX */
	const char *host;  /* TLP_EP_HOST: the name, lowercased; NULL otherwise */
	const char *text;  /* as written, for messages and logs */
};

/*
 * Parse an address from s[0..len): "IPv4:PORT", "[IPv6]:PORT",
 * "unix:/path" (path shorter than 108 bytes), and, if allow_host,
 * "host.name:PORT" (a DNS name). Ports are 1..65535 in plain decimal. No
 * wildcard form: write 0.0.0.0:PORT or [::]:PORT. ep->text and ep->host are
 * set to NULL: the caller keeps its own copy of the text.
 * Returns 0; -EINVAL with a one-line reason in err (may be NULL, cut to
 * errlen - 1 bytes).
 */
int tlp_endpoint_parse(const char *s, size_t len, int allow_host, struct tlp_endpoint *ep,
		       char *err, size_t errlen);

/* Are two endpoints the same address (same kind, address, port, path or
 * host name)? Returns 1 or 0. */
int tlp_endpoint_same(const struct tlp_endpoint *a, const struct tlp_endpoint *b);

/*
 * Durations: digits and a unit, "500ms", "2s", "1m", "1h", "1d", into
 * nanoseconds. A bare number is refused: "300" could mean seconds or
 * milliseconds. Returns 0; -EINVAL with the reason in err.
 */
int tlp_duration_parse(const char *s, size_t len, uint64_t *ns, char *err, size_t errlen);

/* Sizes: digits with an optional k, m or g (either case; powers of 1024),
 * "64k", "1m", "4096", into bytes (at most 2^40). Returns 0; -EINVAL. */
int tlp_size_parse(const char *s, size_t len, uint64_t *bytes, char *err, size_t errlen);

/* ---- the model ---- */

enum tlp_pp_send { TLP_PP_SEND_NONE = 0, TLP_PP_SEND_V1, TLP_PP_SEND_V2 };
enum tlp_proto { TLP_PROTO_TCP = 0, TLP_PROTO_UDP };
#define TLP_RESPONSES_ANY UINT32_MAX
#define TLP_UDP_SESSIONS_MAX 1000000u /* per shard */
/* spin_us, --spin-us (docs/TLPROXY.md, "Spinning before parking"). */
#define TLP_SPIN_US_DFLT 0u
#define TLP_SPIN_US_MAX 1000u
/* nap_us, --nap-us (docs/TLPROXY.md, "Napping before parking"). */
#define TLP_NAP_US_DFLT 50u
#define TLP_NAP_US_MAX 1000u
/* A UDP listener's longest datagram (max_datagram): by default a pooled
 * buffer's size, at most what an IPv4 UDP datagram can carry. */
#define TLP_UDP_DGRAM_DFLT 16384u
#define TLP_UDP_DGRAM_MAX 65507u
/* Own buffers of a listener whose max_datagram is over a pooled buffer:
 * sessions x max_datagram per shard at most (udp.c). */
#define TLP_UDP_JUMBO_BYTES_MAX (1ull << 30)

struct tlp_server_cfg {
	struct tlp_endpoint ep;
	uint32_t weight;    /* 1..256, default 1 */
	uint32_t max_conns; /* 0 = no limit (default) */
	uint64_t id;        /* tlp_hash64 of the address, for tlp_bal_server.id */
};

struct tlp_health_cfg {
	int enabled;            /* the health mapping was given */
	int proto;              /* enum tlp_proto: TCP (default) connects, UDP sends a datagram */
	uint64_t interval_ns;   /* default 2 s */
	uint64_t timeout_ns;    /* default 1 s, at most interval */
	uint32_t rise, fall;    /* defaults 2 and 3 */
	const char *send;       /* NULL: connect only; may hold NUL bytes */
	uint32_t send_len;
	const char *expect;     /* NULL: any answer (or none; UDP: a datagram) will do */
	uint32_t expect_len;
};

struct tlp_passive_cfg {
	int enabled;         /* the passive mapping was given */
	uint32_t failures;   /* default 3 */
	uint64_t down_for_ns; /* default 10 s */
};

/* TLS towards a pool's servers (tls: of a pool). */
struct tlp_pool_tls_cfg {
	int enabled;                    /* tls: given */
	int verify;                     /* the servers' certificates: 1 (default) or 0 */
	const char *ca;                 /* trust anchors (PEM); NULL: the system's store */
	const char *server_name;        /* SNI sent and name checked; NULL: each server's
					 * host name, or its IP address (checked, not sent) */
	const char *cert, *key;         /* a client certificate to present; NULL: none */
	const char *alpn;               /* comma separated; NULL: none */
	const char *ciphers;            /* colon separated; NULL: the layer's */
	uint16_t min_version, max_version; /* 0: the layer's (1.2, 1.3) */
	uint64_t handshake_timeout_ns;  /* default 10 s */
};

struct tlp_pool_cfg {
	const char *name;
	int balance;                 /* enum tlp_balance, default TLP_BAL_ROUNDROBIN */
	int proxy_protocol;          /* enum tlp_pp_send, default none */
	uint32_t retries;            /* 0..TLP_RETRIES_MAX, default 2 */
	uint64_t resolve_interval_ns; /* default 10 s */
	struct tlp_health_cfg health;
	struct tlp_passive_cfg passive;
	uint32_t nservers;           /* 1..TLP_MAX_SERVERS */
	struct tlp_server_cfg *servers;
	struct tlp_pool_tls_cfg tls; /* enabled 0: plain TCP to the servers */
};

struct tlp_socket_cfg {
	int nodelay;           /* default 1 */
	int keepalive;         /* the keepalive mapping was given */
	uint32_t ka_idle_s;    /* default 60 */
	uint32_t ka_interval_s; /* default 10 */
	uint32_t ka_count;     /* default 5 */
	uint32_t rcvbuf, sndbuf; /* bytes; 0 = the system's default */
};

/* TLS termination of a listener (tls: in YAML, --tls-cert/--tls-key/--tls-ocsp). */
#define TLP_TLS_CERTS_MAX 64      /* certificates per listener */
#define TLP_TLS_PATH_MAX 4096     /* a file name */

struct tlp_tls_cert_cfg {
	const char *cert;  /* PEM: the certificate and its chain */
	const char *key;   /* PEM private key; NULL: in cert */
	const char *names; /* SNI names it answers, comma separated; NULL: its own */
	const char *ocsp;  /* a DER OCSP response to staple; NULL: none */
};

enum tlp_tls_verify { TLP_TLS_VERIFY_OFF = 0, TLP_TLS_VERIFY_OPTIONAL, TLP_TLS_VERIFY_ON };

struct tlp_tls_cfg {
	int enabled;                    /* tls: given */
	uint32_t ncerts;                /* 1..TLP_TLS_CERTS_MAX; [0] answers unknown names */
	struct tlp_tls_cert_cfg *certs;
	const char *alpn;               /* comma separated, preferred first; NULL: none */
	const char *ciphers;            /* colon separated (tls.h's names); NULL: the layer's */
	uint16_t min_version, max_version; /* 0x0303 / 0x0304; 0: the layer's (1.2, 1.3) */
	const char *client_ca;          /* CAs of client certificates (mTLS); NULL: none */
	int verify;                     /* enum tlp_tls_verify: with client_ca, default on */
	uint64_t handshake_timeout_ns;  /* default 10 s */
	/* A file of TL_TLS_TICKET_KEY_SIZE bytes sealing session tickets, so
	 * that a reload, a successor of a takeover or another instance resumes
	 * this one's sessions; NULL: a random key per configuration. */
	const char *ticket_key;
};

struct tlp_listener_cfg {
	const char *name;
	uint32_t nlisten;                /* 1..TLP_MAX_LISTEN */
	struct tlp_endpoint *listen;     /* kinds TLP_EP_IP and TLP_EP_UNIX only */
	int32_t pool;                    /* index into pools; -1 none */
	uint32_t max_conns;              /* 0 = no limit (default) */
	struct tlp_netset allow, deny;   /* empty allow: everyone */
	struct tlp_netset proxy_from;    /* peers that must send a PROXY header */
	uint32_t nsni;
	struct tlp_sni_rule *sni;        /* .target is a pool index; names lowercased */
	int32_t sni_default;             /* pool index for hellos no rule matches; -1 none
					  * (then pool is used; if that is -1 too, close) */
	uint64_t sni_timeout_ns;         /* default 3 s */
	uint32_t queue_max;              /* 0 = no queue (default) */
	uint64_t queue_timeout_ns;       /* default 5 s */
	uint64_t connect_timeout_ns;     /* default 5 s */
	uint64_t idle_timeout_ns;        /* default 300 s */
	uint64_t client_fin_ns;          /* default 30 s */
	uint64_t server_fin_ns;          /* default 30 s */
	struct tlp_socket_cfg socket;
	int splice;                      /* default 0 */
	int half_close;                  /* 1 (default): a side's FIN is passed on and the
					  * other side may go on; 0: the pair ends once a
					  * side's FIN and every byte read are passed on */
	/* UDP listeners (proto: udp; udp.h): sessions by client address. */
	int proto;                       /* enum tlp_proto, default TLP_PROTO_TCP */
	uint32_t responses;              /* replies a request expects (0: none, 1 for DNS);
					  * TLP_RESPONSES_ANY (default): any, until idle */
	uint32_t sessions;               /* sessions per shard at most, default 4096 */
	uint32_t max_datagram;           /* longest datagram either way (1..65507), default
					  * TLP_UDP_DGRAM_DFLT; longer ones are dropped */
	struct tlp_tls_cfg tls;          /* enabled 0: plain TCP (passthrough) */
};

struct tlp_arena;

struct tlp_config {
	uint32_t shards;         /* 0 = not given */
	const char *cpus;        /* a CPU list (< 1024); NULL = not given */
	const char *user;        /* NULL = keep the starting user */
	const char *admin;       /* admin socket path; NULL = none */
	uint64_t admin_timeout_ns; /* an admin client idle this long is closed; default 60 s */
	uint32_t spin_us;          /* a shard about to park polls this long first
				    * (tl_config.spin_ns), default TLP_SPIN_US_DFLT */
	uint32_t nap_us;           /* and, while events come in batches, sleeps
				    * this long first (tl_config.nap_ns), default
				    * TLP_NAP_US_DFLT where no listener is UDP */
	int nap_given;             /* nap_us was set (the key or --nap-us) */
	uint64_t drain_timeout_ns; /* a SIGTERM drain lets connections finish this long, then
				    * cuts them; default 30 s (read at start: a reload keeps it) */
	const char *access_log;  /* NULL = no access log */
	uint32_t max_conns;      /* process-wide; 0 = no limit */
	uint32_t splice_pipes;   /* splice pipe pool per shard; 0 = from the pipe budget */
	uint32_t splice_pipe_size; /* bytes per pipe, a power of two 4k..1m; 0 = 1m */
	uint32_t nlisteners;     /* 1..TLP_MAX_LISTENERS */
	struct tlp_listener_cfg *listeners;
	uint32_t npools;         /* 1..TLP_MAX_POOLS */
	struct tlp_pool_cfg *pools;
	struct tlp_arena *arena; /* everything above lives in it */
};

/* The errors of one load, each one line "NAME:LINE:COL: message" (line and
 * column 1-based, NAME the file name given), in the order found. */
struct tlp_diag {
	uint32_t count; /* lines kept in e[], at most TLP_CFG_MAX_ERRORS */
	uint32_t total; /* errors found; past count when the cap was reached */
	struct tlp_diag_entry {
		uint32_t line, col;
		char text[320];
	} e[TLP_CFG_MAX_ERRORS];
};

/*
 * Load a config from YAML text[0..len) (no NUL needed); name is what the
 * messages call it (NULL: "config"). The whole document is checked: every
 * unknown or repeated key, bad value and cross-reference (unknown pool,
 * repeated name or address) is reported, not only the first; a YAML syntax
 * error ends the load at that point. Anchors and aliases are refused.
 * The model is allocated in one arena (config loads may allocate).
 * Returns 0 with *out set (free it with tlp_config_free) and diag->count 0;
 * -EINVAL with *out NULL and the errors in *diag (diag may be NULL);
 * -ENOMEM likewise (with a line saying so when diag has room).
 */
int tlp_config_parse(const char *text, size_t len, const char *name, struct tlp_config **out,
		     struct tlp_diag *diag);

/*
 * Read the file at path (at most TLP_CONFIG_FILE_MAX bytes) and parse it,
 * naming it path in messages. Returns as tlp_config_parse, or the negated
 * errno of open/read (-EFBIG for a file too big), with a line in diag.
 */
int tlp_config_load(const char *path, struct tlp_config **out, struct tlp_diag *diag);

/* Free a model from tlp_config_parse, tlp_config_load or tlp_args_parse;
 * NULL is fine. */
void tlp_config_free(struct tlp_config *c);

/* How many of c's listeners take TCP connections (proto tcp). */
uint32_t tlp_config_tcp_listeners(const struct tlp_config *c);

/* ---- the command line ---- */

/* What the command line asked for: a model built from options, or a file
 * to load (and, for --check, only check). */
struct tlp_args {
	struct tlp_config *cfg;  /* built from --listen/--upstream...; NULL with a path */
	const char *config_path; /* --config or --check FILE (points into argv) */
	int check;               /* 1 for --check: load, report, exit */
};

/*
 * tlproxy --listen HOST:PORT --upstream HOST:PORT[,HOST:PORT...]
 *         [--shards N | --cpus LIST] [--balance NAME]  (NAME: a row of tlp_bal_ops)
 *         [--proxy-protocol none|v1|v2] [--splice] [--splice-pipes N]
 *         [--splice-pipe-size SIZE] [--max-conns N]
 *         [--connect-timeout D] [--idle-timeout D] [--half-close on|off]
 *         [--udp [--responses N] [--sessions N] [--max-datagram N]]
 *         [--tls-cert FILE --tls-key FILE [--tls-ocsp FILE]] (TLS termination; not
 *         with --splice; --tls-ocsp: a DER OCSP response stapled to --tls-cert)
 * tlproxy --config FILE | --check FILE
 *
 * --listen and --upstream may be repeated (up to the model's limits). The
 * model has one listener and one pool, both named "default"; --max-conns is
 * process-wide; every other setting has the YAML default. --config and
 * --check take no other option. Reads argv[0..argc-1] (argv[argc] need not
 * be NULL), never writes it, prints nothing.
 * Returns 0 (*a filled: a->cfg to free with tlp_config_free, or a path);
 * 1 (help asked for: print the usage, exit 0); -EINVAL with a one-line
 * reason in err (may be NULL; cut to errlen - 1 bytes); -ENOMEM. On
 * anything but 0, a->cfg is NULL.
 */
int tlp_args_parse(int argc, char **argv, struct tlp_args *a, char *err, size_t errlen);

/* The usage text of tlp_args_parse's options (a static buffer, written by the first call). */
const char *tlp_args_usage(void);

#endif /* TLP_CONFIG_H */
