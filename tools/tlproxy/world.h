/* tools/tlproxy/world.h: what every shard shares (servers, pools, listeners, configuration generations, views of a pool's servers), the messages between shards, and the functions of world.c that build and free it. */
#ifndef TLP_WORLD_H
#define TLP_WORLD_H

/*
 * Calls: the bottom of tlproxy's stages: world.c includes only the pure
 * modules (config, balance, netlist, sni); every stage and the control plane
 * include this. The control plane touches the data plane only through
 * what is here (registries, generations, views) and the messages below.
 */

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include "turnloop.h"
#include "balance.h"
#include "config.h"

/*
 * Who runs what. The main thread loads the configuration, sets the process
 * up (descriptor limit, privileges, first name lookups), starts the shards
 * and then only waits for signals: SIGHUP re-reads the file and hands the
 * result to shard 0, SIGUSR1 asks the access-log thread to reopen its file,
 * SIGTERM drains. Every shard accepts and forwards. Shard 0 also runs the
 * control plane: health checks, name re-resolution, the admin socket and the
 * application of a reload; it is the only thread that creates or frees
 * servers, pools, listeners, views and generations, and it tells the other
 * shards about new ones over the mesh.
 *
 * What is shared and how:
 *  - struct tlp_srv, tlp_gpool, tlp_glisten: one object per server address,
 *    pool name and listener name for the life of the process (servers are
 *    freed once nothing refers to them). Their counters are atomics: a
 *    server's connections (least connections and max_conns are per process),
 *    a listener's connections and queued clients, a pool's state version.
 *  - struct tlp_view: an immutable list of a pool's servers with their
 *    weights (and the Maglev table of a hash pool), replaced as a whole when
 *    DNS or a reload changes the list. Shards hold a reference to the view
 *    they use.
 *  - struct tlp_gen: one loaded configuration with its per-listener tables.
 *    A connection keeps the generation it was accepted under until it ends,
 *    so a reload never changes the rules under a connection.
 */

/* Process-wide registries (a reload may add names; each keeps its slot). */
#define TLP_REG_LISTENERS 1024
#define TLP_REG_POOLS 1024
/* Servers alive at once, addresses from DNS included. */
#define TLP_REG_SERVERS 16384
/* Host names resolved, since the start. */
#define TLP_REG_HOSTS 4096
/* Shards at most (the configuration's limit). */
#define TLP_SHARDS_MAX 1024
/* Rows of the per-server stat families at most (tlp_world.srv_rows: as
 * many as the configuration at start may need). */
#define TLP_SRV_ROWS 512

/* Token handlers (tl_token). */
enum {
	TLP_H_CONN = 1,   /* a proxied connection's operations */
	TLP_H_LISTEN = 2, /* accepts, and closes of refused clients */
	TLP_H_CTL = 3,    /* the shard's timers and messages */
	TLP_H_HEALTH = 4, /* health checks (shard 0) */
	TLP_H_ADMIN = 5,  /* the admin socket (shard 0) */
	TLP_H_DNS = 6,    /* name lookups (shard 0) */
	TLP_H_UDP = 7,    /* UDP listeners and sessions (udp.c) */
	TLP_H_TLS = 8,    /* the TLS layer's own stream operations (its token_tag) */
};

/* Why a connection ended (access log, error counters). */
enum tlp_cause {
	TLP_END_DONE = 0,      /* both sides closed their ends */
	TLP_END_CLIENT_RESET,  /* the client reset: passed on to the server */
	TLP_END_SERVER_RESET,  /* the server reset: passed on to the client */
	TLP_END_CLIENT_ERROR,  /* writing to the client failed */
	TLP_END_SERVER_ERROR,  /* writing to the server failed */
	TLP_END_IDLE,          /* timeouts.idle */
	TLP_END_CLIENT_FIN,    /* timeouts.client_fin */
	TLP_END_SERVER_FIN,    /* timeouts.server_fin */
	TLP_END_CONNECT,       /* no server could be connected (after retries) */
	TLP_END_NO_SERVER,     /* no server up */
	TLP_END_QUEUE_FULL,    /* every server full and the queue full */
	TLP_END_QUEUE_TIMEOUT, /* queue.timeout */
	TLP_END_DENIED,        /* allow/deny */
	TLP_END_LIMIT,         /* max_conns of the listener or the process */
	TLP_END_PROXY_BAD,     /* a malformed PROXY header */
	TLP_END_SNI_BAD,       /* not TLS, or a malformed ClientHello */
	TLP_END_PEEK_TIMEOUT,  /* no PROXY header or ClientHello within sni_timeout */
	TLP_END_NO_ROUTE,      /* no SNI rule matched and no default pool */
	TLP_END_BUSY,          /* a table of the shard was full */
	TLP_END_SHUTDOWN,      /* the proxy stopped */
	TLP_END_TLS,           /* the client's TLS handshake failed (tls_handshakes says why) */
	TLP_END_SERVER_TLS,    /* the server's TLS handshake failed (tls_server_handshakes) */
	TLP_END_COUNT
};
extern const char *const tlp_cause_names[TLP_END_COUNT];

/* A server's administrative state (admin socket). */
enum { TLP_ADM_ENABLED = 0, TLP_ADM_DRAIN = 1, TLP_ADM_DISABLED = 2 };

struct tlp_gpool;

/* One server address, shared by every shard. */
struct tlp_srv {
	_Atomic uint32_t conns;       /* connections now, whole process */
	_Atomic uint32_t views;       /* live views that list it */
	_Atomic uint8_t health;       /* 1: up (or not checked), 0: failed its checks */
	_Atomic uint8_t admin;        /* TLP_ADM_* */
	_Atomic uint32_t fails;       /* passive: failures in a row */
	_Atomic uint64_t down_until;  /* passive: down until this (CLOCK_MONOTONIC ns), 0 none */
	int unix_path;                /* 1: connect to path, else addr */
	tl_addr addr;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char label[TL_STATS_LABEL_MAX]; /* "ip:port" or "unix:/path", cut to fit */
	char name[384];               /* "pool/address" as the admin socket names it */
	uint64_t id;                  /* balancer identity (tlp_hash64 of the address) */
	struct tlp_gpool *pool;
	int row;                      /* per-server stat row, -1 none */
	uint32_t slot;                /* index in the registry */
	/* Origin: the server entry of the configuration it came from. */
	char origin[300];             /* the address as written ("db.internal:5432") */
	int in_use;                   /* registry: listed by the pool's current view */
	/* Health checks (shard 0 only). */
	uint32_t h_ok, h_bad;         /* passes / failures in a row */
	int h_known;                  /* a check has finished since it came */
	int h_busy;                   /* a check is in flight */
	uint32_t h_round;             /* the round the check belongs to */
	tl_handle h_h;
	uint32_t h_got;               /* expect bytes matched */
	uint32_t h_wq;                /* its writes in flight */
	uint8_t h_buf[256];
};

/*
 * Whose fault a failed connect, or an error on a server's side of a pair,
 * is: the one place that decides what passive health checks (and active
 * checks' connects) hold against a server. err is a negative errno.
 *  - TLP_BLAME_SERVER: the server or the way to it said no or said
 *    nothing: ECONNREFUSED (a reset answered the SYN; no one listens on a
 *    Unix path), ETIMEDOUT (no answer within timeouts.connect), ECONNRESET,
 *    ECONNABORTED, EPIPE (it reset), EHOSTUNREACH, ENETUNREACH, EHOSTDOWN
 *    (the network says it cannot be reached), ENOENT (a Unix server's
 *    socket file is gone). Only these count against it.
 *  - TLP_BLAME_FDS: the proxy is out of descriptors or kernel memory
 *    (EMFILE, ENFILE, ENOBUFS, ENOMEM): no server would do better, so the
 *    client waits for a descriptor, and the shard stops accepting until one
 *    is free (accept.c, "holding clients").
 *  - TLP_BLAME_LOCAL: anything else is the proxy's own trouble with this
 *    attempt (EADDRNOTAVAIL, EADDRINUSE: no local port for the pair;
 *    EAGAIN: a Unix server's queue is full, as HAProxy counts it; EACCES,
 *    EPERM: a local firewall or policy; ENETDOWN: a local interface):
 *    the client is tried on the next server, nothing is counted.
 */
enum tlp_blame { TLP_BLAME_SERVER, TLP_BLAME_FDS, TLP_BLAME_LOCAL };

static inline int tlp_blame(int err)
{
	switch (-err) {
	case ECONNREFUSED:
	case ETIMEDOUT:
	case ECONNRESET:
	case ECONNABORTED:
	case EPIPE:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENOENT:
		return TLP_BLAME_SERVER;
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM:
		return TLP_BLAME_FDS;
	default:
		return TLP_BLAME_LOCAL;
	}
}

/* Can the balancer give srv a new connection, state-wise (now: ns)? */
static inline int tlp_srv_up(struct tlp_srv *s, uint64_t now)
{
	uint64_t du = atomic_load_explicit(&s->down_until, memory_order_relaxed);
	return atomic_load_explicit(&s->health, memory_order_relaxed) &&
	       atomic_load_explicit(&s->admin, memory_order_relaxed) == TLP_ADM_ENABLED &&
	       (du == 0 || now >= du);
}

struct tlp_vent {
	struct tlp_srv *srv;
	uint32_t weight, max_conns;
};

/* A pool's servers as the balancers see them; immutable once published. */
struct tlp_view {
	_Atomic uint32_t refs;   /* shards using it, plus one while it is the pool's current */
	uint32_t n;
	int balance;             /* enum tlp_balance */
	int need_conns;          /* TLP_BAL_NEEDS_CONNS or some max_conns: picks read the conns */
	uint64_t ver;            /* grows with every new view of the pool */
	struct tlp_vent *e;
	struct tlp_bal_table tab; /* what balance's row builds (hash: a Maglev table with
				   * every server placed), shared by the shards' balancers */
};

/* A pool by name, for the life of the process. */
struct tlp_gpool {
	char name[TLP_NAME_MAX + 1];
	uint32_t idx;
	_Atomic uint32_t state_ver;  /* grows when a server's state may have changed */
	_Atomic uint32_t waiting;    /* clients in its queues, whole process */
	_Atomic uint64_t ticket;     /* the next queued client's place in line */
	/* Each shard's first queued client's ticket (UINT64_MAX: none): a
	 * server slot goes to the shard whose client has waited longest, so
	 * the queue is first come, first served across shards. */
	_Atomic uint64_t *head;
	/* Shard 0 only. */
	struct tlp_view *view;       /* current (shard 0 holds one reference) */
	uint64_t next_ver;
	const struct tlp_pool_cfg *cfg; /* in the current generation; NULL: not in it */
	uint64_t health_at, resolve_at; /* next round (ns) */
	uint32_t health_round;
	int resolving;               /* lookups in flight */
	int dirty;                   /* its server list changed: publish a new view */
};

/* A listener by name, for the life of the process. */
struct tlp_glisten {
	char name[TLP_NAME_MAX + 1];
	uint32_t idx;
	_Atomic uint32_t conns;   /* connections now, whole process */
	_Atomic uint32_t queued;  /* of which waiting in a queue */
};

/* One listener of a generation, as the shards use it. */
struct tlp_lrt {
	const struct tlp_listener_cfg *cfg;
	struct tlp_glisten *gl;
	struct tlp_gpool *pool;       /* NULL: none (SNI only) */
	const struct tlp_pool_cfg *pool_cfg;
	struct tlp_gpool *sni_default;
	struct tlp_gpool **sni_pool;  /* per rule */
	int peek;                     /* proxy_from or sni: read first */
	uint32_t queue_t, peek_t;     /* queue.timeout, sni_timeout in wheel ticks */
	tl_sockopt_val opts[8];       /* for upstream connects */
	uint32_t nopts;
	struct tl_tls_config *tls;    /* tls: the server config every shard uses; NULL: plain */
};

/* A loaded configuration. */
struct tlp_gen {
	_Atomic uint32_t refs;        /* shards using it, plus one while current */
	_Atomic uint32_t applied;     /* shards that have taken it from TLP_MSG_GEN */
	uint64_t ver;
	struct tlp_config *cfg;
	struct tlp_lrt *l;            /* cfg->nlisteners */
	struct tlp_lrt *by_gl[TLP_REG_LISTENERS]; /* by tlp_glisten.idx; NULL: not in it */
	struct tlp_gpool **pools;     /* by cfg pool index */
	const struct tlp_pool_cfg *pc_by_gp[TLP_REG_POOLS]; /* by tlp_gpool.idx */
	struct tl_tls_config *tls_by_gp[TLP_REG_POOLS]; /* a tls: pool's client config, or NULL */
	/* Each shard's connections under this generation, and whether the
	 * shard has moved on to a newer one: its reference goes when both say
	 * so. Written by that shard only; a cache line each. */
	struct tlp_gen_shard {
		uint32_t n, away;
		char pad[56];
	} *sc;
};

/* A listening socket handed over by systemd (LISTEN_FDS). */
struct tlp_inherit {
	int fd;          /* ours until the shards have adopted their copies */
	int unix_path;   /* 1: path, else addr */
	tl_addr addr;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int used;        /* a listener of the configuration matched it */
	int dgram;       /* a UDP socket (a takeover hands those over too) */
};
#define TLP_MAX_INHERIT 256

/* The process. */
struct tlp_world {
	tl_runtime *rt;
	uint32_t nshards;
	uint32_t conn_cap;          /* connections per shard */
	uint8_t conn_cap_udp;       /* conn_cap is the small one of a start without TCP listeners */
	uint32_t nleases;           /* pooled buffers of a shard's loop: its lease ids are below */
	_Atomic uint32_t conns;     /* whole process */
	uint32_t max_conns;         /* process limit, 0 none (of the current generation) */
	uint64_t tick_ns;           /* timeout wheel tick */
	struct tlp_gen *_Atomic gen;/* current; swapped by shard 0 */
	struct tlp_glisten *gl[TLP_REG_LISTENERS];
	uint32_t ngl;
	struct tlp_gpool *gp[TLP_REG_POOLS];
	uint32_t ngp;
	struct tlp_srv *srv[TLP_REG_SERVERS];
	uint32_t nsrv;
	struct tlp_host *host[TLP_REG_HOSTS];
	uint32_t nhost;
	struct tlp_shard **shard;   /* each shard's state, for the final free */
	struct tlp_inherit inh[TLP_MAX_INHERIT]; /* LISTEN_FDS, until the start is done */
	uint32_t ninh;
	uint8_t row_used[TLP_SRV_ROWS];
	uint32_t srv_rows;          /* rows the per-server families have */
	_Atomic int started;        /* shards done with on_launch */
	_Atomic int start_failed;
	int user_dropped;
	struct tlp_alog *alog;      /* NULL: no access log */
	tl_poster *post0;           /* shard 0's poster, for the main thread */
	/* stat ids */
	int st_conns, st_open, st_bytes_in, st_bytes_out, st_errors, st_queue;
	int st_srv_conns, st_srv_up, st_checks, st_changes, st_log_dropped;
	int st_dns;
	int st_splice;              /* family "splice" (splice.h's rows) */
	int st_spl_pipes;           /* gauges "splice_pipes": open, busy (splices holding one) */
	int st_tls_hs;              /* "tls_handshakes": row 0 ok, then a row per TL_TLS_R_* */
	int st_tls_resumed;         /* "tls_resumed" */
	int tls;                    /* the first configuration has a tls: listener or
				     * pool: each shard makes its TLS context */
	int st_tls_up;              /* "tls_server_handshakes": as tls_handshakes, towards servers */
	int st_tls_up_resumed;      /* "tls_server_resumed": of those, resumed from a ticket */
	/* Room for held clients (accept.c, "holding clients"): each shard's
	 * flag says it holds clients or stopped accepts and wants a
	 * TLP_MSG_RESUME when a connection ends elsewhere; npaused counts the
	 * flags set, so that shards skip the look when none is. */
	_Atomic uint8_t paused[TLP_SHARDS_MAX];
	_Atomic uint32_t npaused;
};

extern struct tlp_world tlp_w;

/* A host name of some pool's servers, and what it resolved to. */
struct tlp_host {
	char name[256];
	uint16_t port;
	char service[8];
	tl_addr a[TL_RESOLVE_MAX];   /* the last good answer */
	uint32_t n;
	int known;                   /* a lookup has succeeded */
	int failing;                 /* the last lookup failed (logged once) */
	int busy;                    /* a lookup is in flight (shard 0) */
	int used;                    /* the current configuration names it */
	uint64_t interval_ns, next_at;
	tl_addr tmp[TL_RESOLVE_MAX]; /* where the lookup in flight writes */
};

/* world.c: registries, views, generations and server states. */
/* The TLS contexts of a configuration, made from its certificate, key, CA
 * and ticket-key files by tlp_tls_make on the main thread (at the start,
 * and on SIGHUP before shard 0 gets the reload), so that no shard's loop
 * waits for a disk or for parsing keys: per listener and per pool of the
 * configuration (NULL: plain). */
struct tlp_tls_made {
	struct tl_tls_config **l, **p;
	uint32_t n[2];          /* listeners, pools */
};
/* A reload as the main thread hands it to shard 0 (TLP_MSG_RELOAD): the
 * configuration and its TLS contexts, already made. */
struct tlp_reload_req {
	struct tlp_config *cfg;
	struct tlp_tls_made tls;
};
/* Make cfg's contexts into *m. 0, or -1 with the reason in err (m then
 * holds nothing). */
int tlp_tls_make(const struct tlp_config *cfg, struct tlp_tls_made *m, char *err, size_t errlen);
/* Drop what m still holds (what no generation took). */
void tlp_tls_made_free(struct tlp_tls_made *m);
/* Build a generation from cfg (which it then owns) and its TLS contexts
 * (it takes those of m it uses) on the thread that owns the registries;
 * servers of host names take their addresses from the last lookup (or none
 * yet). Returns it with one reference, or NULL. */
struct tlp_gen *tlp_gen_build(struct tlp_config *cfg, struct tlp_tls_made *m, uint64_t tick_ns,
			      char *err, size_t errlen);
void tlp_gen_put(struct tlp_gen *g);
/* The entry of view v (NULL: none) whose server's label is label, or -1. */
static inline int tlp_view_find(const struct tlp_view *v, const char *label)
{
	for (uint32_t i = 0; v && i < v->n; i++)
		if (!strcmp(v->e[i].srv->label, label))
			return (int)i;
	return -1;
}
/* Has g a tls: listener or pool? */
int tlp_gen_has_tls(const struct tlp_gen *g);
void tlp_view_put(struct tlp_view *v);
/* Make a new view of gp from its configuration and the addresses its host
 * names resolved to (shard 0 or setup). */
int tlp_pool_rebuild(struct tlp_gpool *gp);
/* The host registry entry for name:port (created if absent; NULL if full). */
struct tlp_host *tlp_host_get(const char *name, uint16_t port);
/* Make gen g the current one for the registries (shard 0 or setup): pools
 * take their new settings, hosts their intervals, views are rebuilt.
 * Returns how many pools got a new view. */
int tlp_gen_apply(struct tlp_gen *g);
/* Find a server by "pool/address". NULL if none. */
struct tlp_srv *tlp_srv_find(const char *name);
/* Free servers no view lists and no connection uses (shard 0). */
void tlp_srv_collect(void);
/* The timeout wheel tick for cfg. */
uint64_t tlp_tick_for(const struct tlp_config *cfg);
/* Free everything (main thread, after the shards stopped). */
void tlp_world_free(void);
/* Log a line to stderr with a timestamp. */
void tlp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A server's passive state (any shard): a failure the server is blamed for
 * (tlp_blame) at now, or a success (ok). After pc's passive.failures in a
 * row it is down for passive.down_for; nothing when pc has passive checks
 * off or srv is NULL. */
void tlp_passive(struct tlp_srv *srv, const struct tlp_pool_cfg *pc, int ok, uint64_t now);

/* Control message types (token data low byte). */
enum {
	TLP_MSG_GEN = 1,     /* payload: struct tlp_gen *, one reference for the receiver */
	TLP_MSG_VIEW = 2,    /* payload: struct tlp_view *, likewise; arg: pool index */
	TLP_MSG_ROOM = 3,    /* arg: pool index: a server slot came free somewhere */
	TLP_MSG_RELOAD = 4,  /* shard 0, from the main thread: payload struct tlp_reload_req * */
	TLP_MSG_SWEEP = 5,   /* the wheel's timer */
	TLP_MSG_CTLTICK = 6, /* shard 0: health, DNS and collection timer */
	TLP_MSG_ORPHAN = 7,  /* Closed of a handle that belongs to nothing */
	TLP_MSG_HROUND = 8,  /* a health round's timeout */
	/* Takeover (takeover.c). */
	TLP_MSG_HO_LISTEN = 9,  /* send your listening sockets */
	TLP_MSG_HO_GO = 10,     /* stop accepting, hand your connections over */
	TLP_MSG_HO_STEP = 11,   /* arg: connection: try its detach again */
	TLP_MSG_HO_CONN = 12,   /* payload: struct tlp_ho_in * to adopt (shard 0 spreads them) */
	TLP_MSG_HO_STOP = 13,   /* the deadline: what is still on its way carries on here */
	TLP_MSG_HO_FIN = 14,    /* the end: keep the listening sockets away, or take them back */
	TLP_MSG_RESUME = 15,    /* room came free elsewhere: admit held clients, accept again */
	TLP_MSG_GEN_IN = 16,    /* shard 0: the last shard has applied a reload's generation */
};

static inline uint64_t tlp_ctl_token(uint32_t type, uint64_t arg)
{
	return tl_token(TLP_H_CTL, (arg << 8) | type);
}

/* The shard whose first queued client of gp has waited longest (the
 * TLP_MSG_ROOM goes there), or UINT32_MAX when none waits. */
static inline uint32_t tlp_oldest_shard(struct tlp_gpool *gp)
{
	uint64_t best = UINT64_MAX;
	uint32_t who = UINT32_MAX;

	for (uint32_t t = 0; t < tlp_w.nshards; t++) {
		uint64_t h = atomic_load_explicit(&gp->head[t], memory_order_relaxed);

		if (h < best) {
			best = h;
			who = t;
		}
	}
	return who;
}

/* The descriptor of a listening stream socket handed over for listen
 * address ep, or -1 (any thread, during the start only: the table is not
 * changed then). */
int tlp_inherited(const struct tlp_endpoint *ep);
/* The k-th descriptor handed over for ep (a takeover passes one per shard
 * of the old process), or -1. Same rules as tlp_inherited. */
int tlp_inherited_nth(const struct tlp_endpoint *ep, uint32_t k);
/* The k-th UDP socket a takeover handed over for address ep, or -1 (the
 * stream ones are tlp_inherited_nth's; same rules). */
int tlp_inherited_udp(const struct tlp_endpoint *ep, uint32_t k);

/* Process-wide time (CLOCK_MONOTONIC, the drivers' clock). */
uint64_t tlp_mono_ns(void);

#endif /* TLP_WORLD_H */
