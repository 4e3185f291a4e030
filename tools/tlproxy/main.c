/* tools/tlproxy/main.c: tlproxy's process: the command line and --check, setting the process up (descriptor limit, privileges, first lookups, the access log), starting the shards and waiting for signals (SIGHUP reload, SIGUSR1 log reopen, SIGTERM drain). */
/* Calls: main -> shard, accept (its handler), ctl, admin, health, resolve,
 * takeover, world, alog, splice, sdnotify, udp, dpdk: the top; nothing
 * calls in. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/capability.h>

#include "accept.h"
#include "admin.h"
#include "alog.h"
#include "ctl.h"
#include "dpdk.h"
#include "health.h"
#include "resolve.h"
#include "sdnotify.h"
#include "shard.h"
#include "splice.h"
#include "takeover.h"
#include "udp.h"
#include "tls.h"
#include "util.h"
#include "world.h"

/*
 * Shard loop sizes. A shard's pooled buffers are sized from the connections
 * it may hold: the loop reserves one buffer for each stream that reads
 * (lib/caps.c), so with one for each side of every connection plus
 * POOL_SPARE (health checks, admin clients, and the surplus that streams
 * share beyond their reserved buffer), clients that stop reading, up to the
 * connection limit, hold at most what the pool can spare and never the
 * buffer another connection needs for its next read. POOL_MAX is the
 * loop's limit; the table without max_conns is as large as it covers.
 */
#define POOLED_SIZE 16384
#define HANDLE_LEASES 8
#define POOL_SPARE 1024
#define POOL_MAX 32768
#define DEFAULT_CONNS ((POOL_MAX - POOL_SPARE) / 2) /* per shard without max_conns */
/*
 * A file without TCP listeners (a UDP proxy; a DPDK port serves datagrams
 * only) needs connections for its health checks and admin clients alone:
 * without max_conns its tables are sized for UDP_ONLY_CONNS a shard, not
 * DEFAULT_CONNS (a tenth of the memory, and no descriptor limit to raise
 * for connections it never makes). A reload that adds TCP listeners runs
 * them within that until a restart, and says so.
 */
#define UDP_ONLY_CONNS 1024

/* Pooled buffers for a shard of cap connections and udp_sess UDP sessions:
 * one for each side of a connection, one for each session (a datagram on
 * its way), and POOL_SPARE. */
static uint32_t pool_for(uint32_t cap, uint64_t udp_sess)
{
	uint64_t n = 2ull * cap + udp_sess + POOL_SPARE;
	return n < POOL_MAX ? (uint32_t)n : POOL_MAX;
}

static pthread_t main_thread;
static _Atomic int rt_done;
static int rt_result;
static char rt_why[320]; /* the joiner's tl_error_detail() of rt_result */

static void print_diag(const struct tlp_diag *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		fprintf(stderr, "%s\n", d->e[i].text);
	if (d->total > d->count)
		fprintf(stderr, "(and %u more errors)\n", d->total - d->count);
}

/* Drop to user: keep only CAP_NET_BIND_SERVICE, which binding low ports on
 * a reload needs. Done before any thread starts (capabilities are per
 * thread), and before the runtime exists, so that the live stats region
 * belongs to the user the process runs as. */
static int drop_privileges(const char *user)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	struct passwd *pw = getpwnam(user);

	if (!pw) {
		fprintf(stderr, "tlproxy: user %s: no such user\n", user);
		return -1;
	}
	if (geteuid() == pw->pw_uid)
		return 0;
	if (geteuid() != 0) {
		fprintf(stderr, "tlproxy: user %s: only root can switch to another user\n", user);
		return -1;
	}
	if (prctl(PR_SET_KEEPCAPS, 1) < 0 || initgroups(user, pw->pw_gid) < 0 ||
	    setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
		fprintf(stderr, "tlproxy: user %s: cannot switch: %s\n", user, strerror(errno));
		return -1;
	}
	memset(data, 0, sizeof data);
	data[0].permitted = data[0].effective = 1u << CAP_NET_BIND_SERVICE;
	if (syscall(SYS_capset, &hdr, data) < 0) {
		fprintf(stderr, "tlproxy: user %s: cannot keep CAP_NET_BIND_SERVICE: %s\n", user,
			strerror(errno));
		return -1;
	}
	prctl(PR_SET_KEEPCAPS, 0);
	/* setuid cleared it: /proc/PID would belong to root, and tlshard stats
	 * could not tell that the region is this process's. */
	prctl(PR_SET_DUMPABLE, 1);
	return 0;
}

/* Raise RLIMIT_NOFILE to want, or say clearly why not. */
static void raise_nofile(uint64_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur >= want)
		return;
	if (rl.rlim_max < want) {
		struct rlimit up = {want, want};

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < want)
		fprintf(stderr,
			"tlproxy: the descriptor limit (RLIMIT_NOFILE) is %llu and cannot be raised; "
			"the configured connection limits need up to %llu (raise it with ulimit -n "
			"or LimitNOFILE=); at it, accepting stops and clients wait in the backlog\n",
			(unsigned long long)rl.rlim_cur, (unsigned long long)want);
}

/* The first lookups of every host name, before the shards start. */
static void resolve_all(void)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->nhost; i++) {
		struct tlp_host *h = w->host[i];
		struct addrinfo hints, *res = NULL, *p;
		int r;

		memset(&hints, 0, sizeof hints);
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		r = getaddrinfo(h->name, h->service, &hints, &res);
		if (r) {
			fprintf(stderr, "tlproxy: cannot resolve %s: %s (it gets no server until it "
					"resolves)\n",
				h->name, gai_strerror(r));
			h->failing = 1;
			continue;
		}
		h->n = 0;
		for (p = res; p && h->n < TL_RESOLVE_MAX; p = p->ai_next) {
			tl_addr *a = &h->a[h->n];

			memset(a, 0, sizeof *a);
			if (p->ai_family == AF_INET) {
				a->in.sin_family = AF_INET;
				a->in.sin_addr = ((struct sockaddr_in *)p->ai_addr)->sin_addr;
				a->in.sin_port = htons(h->port);
			} else if (p->ai_family == AF_INET6) {
				a->in6.sin6_family = AF_INET6;
				a->in6.sin6_addr = ((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
				a->in6.sin6_port = htons(h->port);
			} else {
				continue;
			}
			int dup = 0;

			for (uint32_t k = 0; k < h->n; k++)
				dup |= !memcmp(&h->a[k], a, sizeof *a);
			if (!dup)
				h->n++;
		}
		freeaddrinfo(res);
		/* The same order as the periodic lookups keep. */
		for (uint32_t x = 1; x < h->n; x++)
			for (uint32_t y = x; y > 0 && memcmp(&h->a[y - 1], &h->a[y], sizeof(tl_addr)) > 0; y--) {
				tl_addr t = h->a[y];

				h->a[y] = h->a[y - 1];
				h->a[y - 1] = t;
			}
		h->known = 1;
	}
}

static int declare_stats(tl_runtime *rt)
{
	struct tlp_world *w = &tlp_w;
	static const char *const checks[] = {"pass", "fail"};
	static const char *const dns[] = {"ok", "failed", "changed"};

	w->st_conns = tl_runtime_counter(rt, "conns");
	w->st_open = tl_runtime_gauge(rt, "conns_open");
	w->st_bytes_in = tl_runtime_counter(rt, "bytes_in");
	w->st_bytes_out = tl_runtime_counter(rt, "bytes_out");
	w->st_errors = tl_runtime_stat(rt, "errors", TL_STAT_COUNTER, TLP_END_COUNT - 1);
	w->st_queue = tl_runtime_gauge(rt, "queued");
	w->st_checks = tl_runtime_stat(rt, "health_checks", TL_STAT_COUNTER, 2);
	w->st_changes = tl_runtime_counter(rt, "health_changes");
	w->st_dns = tl_runtime_stat(rt, "dns", TL_STAT_COUNTER, 3);
	w->st_log_dropped = tl_runtime_counter(rt, "log_dropped");
	w->st_srv_conns = tl_runtime_stat(rt, "server_conns", TL_STAT_GAUGE, w->srv_rows);
	w->st_srv_up = tl_runtime_stat(rt, "server_state", TL_STAT_GAUGE, w->srv_rows);
	if (w->st_conns < 0 || w->st_open < 0 || w->st_bytes_in < 0 || w->st_bytes_out < 0 ||
	    w->st_errors < 0 || w->st_queue < 0 || w->st_checks < 0 || w->st_changes < 0 ||
	    w->st_dns < 0 || w->st_log_dropped < 0 || w->st_srv_conns < 0 || w->st_srv_up < 0)
		return -1;
	/* Row c - 1 for cause c: a connection that ended well is no error. */
	for (int i = 1; i < TLP_END_COUNT; i++)
		tl_runtime_stat_label(rt, w->st_errors + i - 1, tlp_cause_names[i]);
	for (int i = 0; i < 2; i++)
		tl_runtime_stat_label(rt, w->st_checks + i, checks[i]);
	for (int i = 0; i < 3; i++)
		tl_runtime_stat_label(rt, w->st_dns + i, dns[i]);
	if (tlp_spl_declare(rt, &w->st_splice) < 0)
		return -1;
	w->st_spl_pipes = tl_runtime_stat(rt, "splice_pipes", TL_STAT_GAUGE, 2);
	if (w->st_spl_pipes < 0)
		return -1;
	tl_runtime_stat_label(rt, w->st_spl_pipes, "open");
	tl_runtime_stat_label(rt, w->st_spl_pipes + 1, "busy");
	if (tlp_udp_declare(rt) < 0)
		return -1;
	/* Row 0: handshakes done; row r: failed for reason r (tls.h's names). */
	w->st_tls_hs = tl_runtime_stat(rt, "tls_handshakes", TL_STAT_COUNTER, TL_TLS_R_COUNT_);
	w->st_tls_resumed = tl_runtime_counter(rt, "tls_resumed");
	w->st_tls_up = tl_runtime_stat(rt, "tls_server_handshakes", TL_STAT_COUNTER, TL_TLS_R_COUNT_);
	w->st_tls_up_resumed = tl_runtime_counter(rt, "tls_server_resumed");
	if (w->st_tls_hs < 0 || w->st_tls_resumed < 0 || w->st_tls_up < 0 || w->st_tls_up_resumed < 0)
		return -1;
	tl_runtime_stat_label(rt, w->st_tls_hs, "ok");
	tl_runtime_stat_label(rt, w->st_tls_up, "ok");
	for (int i = 1; i < TL_TLS_R_COUNT_; i++) {
		tl_runtime_stat_label(rt, w->st_tls_hs + i, tl_tls_reason_name(i));
		tl_runtime_stat_label(rt, w->st_tls_up + i, tl_tls_reason_name(i));
	}
	return 0;
}

static void *joiner(void *arg)
{
	rt_result = tl_runtime_run(arg);
	snprintf(rt_why, sizeof rt_why, "%s", tl_error_detail());
	atomic_store(&rt_done, 1);
	pthread_kill(main_thread, SIGUSR2);
	return NULL;
}

static int check_file(const char *path)
{
	struct tlp_config *cfg;
	struct tlp_diag *d = calloc(1, sizeof *d);
	char err[320];
	int r;

	if (!d) {
		fprintf(stderr, "tlproxy: out of memory\n");
		return 1;
	}
	r = tlp_config_load(path, &cfg, d);
	if (r < 0) {
		print_diag(d);
		free(d);
		return 1;
	}
	if (tlp_dpdk_on() && tlp_dpdk_check_config(cfg, err, sizeof err) < 0) {
		fprintf(stderr, "tlproxy: %s\n", err);
		tlp_config_free(cfg);
		free(d);
		return 1;
	}
	printf("%s: ok (%u listener%s, %u pool%s)\n", path, cfg->nlisteners,
	       cfg->nlisteners == 1 ? "" : "s", cfg->npools, cfg->npools == 1 ? "" : "s");
	tlp_config_free(cfg);
	free(d);
	return 0;
}

static int plan_shards(const struct tlp_config *cfg, uint32_t *n)
{
	tl_plan_request req = {.cpus = cfg->cpus, .shards = cfg->shards};
	tl_plan plan;
	int r;

	if ((r = tl_plan_from_env(&req)) < 0) {
		fprintf(stderr, "tlproxy: %s\n", tl_error_detail());
		return r;
	}
	r = tl_plan_compute(&plan, &req, NULL);
	if (r < 0) {
		fprintf(stderr, "tlproxy: cannot plan the shards: %s\n", tl_error_detail());
		return r;
	}
	*n = plan.count;
	tl_plan_free(&plan);
	return 0;
}

static const char *cfg_path;

/* Sockets handed over by systemd: LISTEN_PID is us, LISTEN_FDS of them
 * from descriptor 3 on. Each must be a listening stream socket; the
 * listeners of the configuration adopt the one with their address instead
 * of binding. Returns 0, or -1 with a line on stderr. */
static int take_listen_fds(void)
{
	const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
	struct tlp_world *w = &tlp_w;
	long k;

	if (!pid || !n || atol(pid) != (long)getpid())
		return 0;
	k = atol(n);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (k < 0 || k > TLP_MAX_INHERIT) {
		fprintf(stderr, "tlproxy: LISTEN_FDS=%s: 0 to %d sockets, please\n", n,
			TLP_MAX_INHERIT);
		return -1;
	}
	for (int fd = 3; fd < 3 + k; fd++) {
		struct tlp_inherit *h = &w->inh[w->ninh];
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		int acc = 0, type = 0;
		socklen_t l1 = sizeof acc, l2 = sizeof type;

		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l1) < 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) < 0 || !acc ||
		    type != SOCK_STREAM || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
			fprintf(stderr, "tlproxy: LISTEN_FDS: descriptor %d is not a listening stream "
					"socket\n",
				fd);
			return -1;
		}
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		memset(h, 0, sizeof *h);
		h->fd = fd;
		if (ss.ss_family == AF_UNIX) {
			h->unix_path = 1;
			memcpy(h->path, ((struct sockaddr_un *)&ss)->sun_path, sizeof h->path - 1);
		} else if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
			memcpy(&h->addr, &ss, ss.ss_family == AF_INET ? sizeof h->addr.in
								     : sizeof h->addr.in6);
		} else {
			fprintf(stderr, "tlproxy: LISTEN_FDS: descriptor %d is of a family tlproxy "
					"does not listen on\n",
				fd);
			return -1;
		}
		w->ninh++;
	}
	return 0;
}

/* After the start: the shards hold their own descriptors of what they
 * adopted; the handed-over ones, and those no listener wanted, go. */
static void close_inherited(void)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->ninh; i++)
		if (w->inh[i].fd >= 0) {
			if (!w->inh[i].used)
				fprintf(stderr, "tlproxy: LISTEN_FDS: descriptor %d matches no listener "
						"address; closed\n",
					w->inh[i].fd);
			close(w->inh[i].fd);
			w->inh[i].fd = -1;
		}
}

static void do_reload(void)
{
	struct tlp_config *cfg;
	struct tlp_reload_req *req;
	struct tlp_diag *d;
	char err[512];

	if (!cfg_path) {
		tlp_log("SIGHUP: nothing to reload (started from the command line, not --config)");
		return;
	}
	tlp_sd_notify("RELOADING=1");
	d = calloc(1, sizeof *d);
	if (!d)
		return;
	if (tlp_config_load(cfg_path, &cfg, d) < 0) {
		tlp_log("reload of %s refused; the running configuration stays:", cfg_path);
		print_diag(d);
		free(d);
		tlp_sd_notify("READY=1");
		return;
	}
	free(d);
	if (tlp_dpdk_on() && tlp_dpdk_check_config(cfg, err, sizeof err) < 0) {
		tlp_log("reload of %s refused; the running configuration stays: %s", cfg_path, err);
		tlp_config_free(cfg);
		tlp_sd_notify("READY=1");
		return;
	}
	/* Certificates and keys are read and parsed here, off every shard's
	 * loop: shard 0 only builds the generation from what they made. */
	req = calloc(1, sizeof *req);
	if (!req) {
		tlp_config_free(cfg);
		return;
	}
	req->cfg = cfg;
	if (tlp_tls_make(cfg, &req->tls, err, sizeof err) < 0) {
		tlp_log("reload of %s refused; the running configuration stays: %s", cfg_path, err);
		tlp_config_free(cfg);
		free(req);
		tlp_sd_notify("READY=1");
		return;
	}
	if (!tlp_w.post0 ||
	    tl_post(tlp_w.post0, tlp_ctl_token(TLP_MSG_RELOAD, 0), (uint64_t)(uintptr_t)req) < 0) {
		tlp_log("reload: shard 0 cannot take it now; send SIGHUP again");
		tlp_tls_made_free(&req->tls);
		tlp_config_free(cfg);
		free(req);
	}
}

int main(int argc, char **argv)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_args args;
	struct tlp_config *cfg;
	struct tlp_gen *gen;
	struct tlp_tls_made made;
	tl_runtime_config rc;
	tl_runtime *rt;
	uint32_t nshards, cap, pool, spl_pipes = 0, spl_size = 0;
	uint64_t udp_sess = 0;
	uint64_t spl_all;
	char err[512];
	sigset_t sigs;
	pthread_t jt;
	int r, drains = 0;

	/* A bad command line: one line (the usage is --help's). */
	if (tlp_takeover_args(&argc, argv, err, sizeof err) < 0) {
		fprintf(stderr, "tlproxy: %s (see --help)\n", err);
		return 2;
	}
	tlp_dpdk_args(&argc, argv);
	r = tlp_args_parse(argc, argv, &args, err, sizeof err);
	if (r == 1) {
		fputs(tlp_args_usage(), stdout);
		fputs(tlp_takeover_usage(), stdout);
		fputs(tlp_dpdk_usage(), stdout);
		return 0;
	}
	if (r < 0) {
		fprintf(stderr, "tlproxy: %s (see --help)\n", err);
		return 2;
	}
	if (args.check)
		return check_file(args.config_path);
	if (args.config_path) {
		struct tlp_diag *d = calloc(1, sizeof *d);

		if (!d || tlp_config_load(args.config_path, &cfg, d) < 0) {
			if (d)
				print_diag(d);
			free(d);
			return 1;
		}
		free(d);
		cfg_path = args.config_path;
	} else {
		cfg = args.cfg;
	}
	if (take_listen_fds() < 0) {
		tlp_config_free(cfg);
		return 1;
	}
	if (tlp_dpdk_on()) {
		struct tlp_dpdk_proc dp = {.takeover = tlp_takeover_wanted(),
					   .handover = tlp_takeover_serving(),
					   .inherited = w->ninh};

		if (tlp_dpdk_check_start(cfg, &dp, err, sizeof err) < 0) {
			fprintf(stderr, "tlproxy: %s\n", err);
			tlp_config_free(cfg);
			return 1;
		}
	}
	for (uint32_t i = 0; i < cfg->nlisteners; i++) {
		const struct tlp_listener_cfg *l = &cfg->listeners[i];

		for (uint32_t k = 0; k < l->nlisten; k++) {
			tl_addr a;
			int t;

			int inh = l->proto == TLP_PROTO_UDP ? tlp_inherited_udp(&l->listen[k], 0)
							    : tlp_inherited(&l->listen[k]);

			if (inh >= 0) {
				for (uint32_t j = 0; j < w->ninh; j++)
					if (w->inh[j].fd == inh)
						w->inh[j].used = 1;
				continue; /* systemd bound it */
			}
			/* A takeover brings the sockets later; one it does not
			 * bring is bound, and a clash is said then. On a DPDK
			 * port no kernel socket can tell: its UDP ports are this
			 * process's alone (the address was checked against the
			 * port's by tlp_dpdk_check_start). */
			if (l->listen[k].kind != TLP_EP_IP || tlp_takeover_wanted() || tlp_dpdk_on())
				continue;
			memset(&a, 0, sizeof a);
			memcpy(&a, &l->listen[k].addr,
			       l->listen[k].addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
			t = l->proto == TLP_PROTO_UDP ? tlp_udp_port_taken(&a) : tl_tool_port_taken(&a);
			if (t) {
				fprintf(stderr, "tlproxy: listener %s: %s %s\n", l->name,
					l->listen[k].text,
					t > 0 ? "is already in use by another process" : tl_strerror(t));
				tlp_config_free(cfg);
				return 1;
			}
		}
	}
	if (plan_shards(cfg, &nshards) < 0) {
		tlp_config_free(cfg);
		return 2;
	}
	if (tlp_dpdk_on() && tlp_dpdk_setup(nshards, err, sizeof err) < 0) {
		fprintf(stderr, "tlproxy: %s\n", err);
		tlp_config_free(cfg);
		return 1;
	}
	w->conn_cap_udp = !cfg->max_conns && !tlp_config_tcp_listeners(cfg);
	cap = cfg->max_conns ? cfg->max_conns : w->conn_cap_udp ? UDP_ONLY_CONNS : DEFAULT_CONNS;
	if (cap > (1u << 20))
		cap = 1u << 20;
	if (cap > DEFAULT_CONNS)
		fprintf(stderr,
			"tlproxy: max_conns %u: a shard's %u pooled buffers cover clients that "
			"stop reading up to %u connections on it; past that they can hold "
			"every buffer of the shard\n",
			cap, POOL_MAX, DEFAULT_CONNS);
	/* A UDP session is a socket with a receive and sends in flight; the
	 * tables are sized at the start, so a reload that raises the sessions
	 * limits past them has sessions refused (drop_error). */
	for (uint32_t i = 0; i < cfg->nlisteners; i++)
		if (cfg->listeners[i].proto == TLP_PROTO_UDP)
			udp_sess += cfg->listeners[i].sessions;
	if (udp_sess > (1u << 21))
		udp_sess = 1u << 21;
	pool = pool_for(cap, udp_sess);
	/* A pipe of the splice pool is two descriptors. */
	spl_all = tlp_spl_pool(cfg, nshards, &spl_pipes, &spl_size);
	/* On a DPDK port connections and sessions hold no descriptors. */
	if (!tlp_dpdk_on())
		raise_nofile((cfg->max_conns ? 2ull * cfg->max_conns + 1024
					     : 2ull * cap * nshards + 1024) + 2 * spl_all + udp_sess * nshards);
	if (cfg->access_log) {
		/* Opened before privileges go; reopened (SIGUSR1) as the user. */
		r = tlp_alog_new(cfg->access_log, nshards, 4096, &w->alog, err, sizeof err);
		if (r < 0) {
			fprintf(stderr, "tlproxy: access log: %s\n", err);
			tlp_config_free(cfg);
			return 1;
		}
	}
	/* A takeover connects as the user the process runs as: the running
	 * process takes over only from its own user (SO_PEERCRED). */
	if ((cfg->user && drop_privileges(cfg->user) < 0) ||
	    (tlp_takeover_wanted() && tlp_takeover_begin() < 0) || tlp_handover_listen() < 0) {
		tlp_alog_free(w->alog);
		tlp_config_free(cfg);
		return 1;
	}

	/* Signals: the shards and every thread they start block them; the main
	 * thread takes them with sigwaitinfo. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGUSR2);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	main_thread = pthread_self();

	tl_runtime_config_init(&rc);
	rc.plan.shards = cfg->shards;
	rc.plan.cpus = cfg->cpus;
	rc.signals = 0;
	rc.loop.max_handles = 2 * cap + (uint32_t)udp_sess + 8192;
	rc.loop.max_ops = 4 * cap + pool + 3 * (uint32_t)udp_sess + 8192;
	rc.loop.pooled_buffers = pool;
	rc.loop.pooled_buffer_size = POOLED_SIZE;
	rc.loop.handle_leases = HANDLE_LEASES;
	rc.loop.spin_ns = (uint64_t)cfg->spin_us * 1000;
	/* Naps by default only where no listener is UDP: clients that wait
	 * for each answer met up to two naps a query, and loopback DNS through
	 * a napping shard served 0.78-0.88x the queries a second, at about
	 * the same CPU a query (docs/TLPROXY.md, "Napping before parking"). */
	rc.loop.nap_ns = (uint64_t)cfg->nap_us * 1000;
	if (!cfg->nap_given && tlp_config_tcp_listeners(cfg) < cfg->nlisteners)
		rc.loop.nap_ns = 0;
	if (spl_pipes) {
		rc.loop.pipes = spl_pipes;
		rc.loop.pipe_size = spl_size;
	}
	/* The write cap pauses the reads of the stream written to, which for a
	 * proxy is the wrong side: a server slow to read what the client sent
	 * would stop the proxy reading that server's answers, and a server that
	 * only reads once its answers are taken (an echo) would never read
	 * again (the full-duplex deadlock, see tl_config.handle_write_bytes).
	 * What is written here is leases (and small headers, and the bytes a
	 * takeover carries), which the lease cap of the side they were read
	 * from already bounds, so the write cap is set past the whole pool,
	 * where it never acts. */
	rc.loop.handle_write_bytes = (uint64_t)pool * POOLED_SIZE + (1u << 20);
	/* Rows for the servers the file names, a host name's answers (up to
	 * TL_RESOLVE_MAX each) and some to spare for reloads: a shard copies
	 * every slot each time it publishes, so no more than that. */
	{
		uint64_t rows = 16;

		for (uint32_t i = 0; i < cfg->npools; i++)
			for (uint32_t k = 0; k < cfg->pools[i].nservers; k++)
				rows += cfg->pools[i].servers[k].ep.kind == TLP_EP_HOST ? 2 * TL_RESOLVE_MAX : 2;
		w->srv_rows = rows > TLP_SRV_ROWS ? TLP_SRV_ROWS : (uint32_t)rows;
	}
	rc.stats_values = TLP_END_COUNT + 16 + TLP_SPL_ST_ROWS + 2 + 2 * w->srv_rows + 2 * TL_TLS_R_COUNT_ + 2;
	rc.stats_values += TLP_UDP_ST_VALUES;
	rc.grace_ns = cfg->drain_timeout_ns;
	rc.on_launch = tlp_shard_launch;
	rc.on_stop = tlp_shard_stop;
	rc.on_drain = tlp_shard_drain;
	rc.on_pass = tlp_shard_pass;
	rc.on_completion = tlp_on_other;
	rc.handlers[TLP_H_CONN] = tlp_on_conn;
	rc.handlers[TLP_H_LISTEN] = tlp_on_listen;
	rc.handlers[TLP_H_CTL] = tlp_on_ctl;
	rc.handlers[TLP_H_HEALTH] = tlp_on_health;
	rc.handlers[TLP_H_ADMIN] = tlp_on_admin;
	rc.handlers[TLP_H_DNS] = tlp_on_dns;
	rc.handlers[TLP_H_UDP] = tlp_on_udp;
	rc.handlers[TLP_H_TLS] = tlp_on_tls;
	r = tl_runtime_new(&rt, &rc);
	if (r < 0) {
		fprintf(stderr, "tlproxy: cannot set the shards up: %s\n",
			tl_error_detail()[0] ? tl_error_detail() : tl_strerror(r));
		tlp_alog_free(w->alog);
		tlp_config_free(cfg);
		return 1;
	}
	w->rt = rt;
	w->nshards = tl_runtime_shards(rt);
	w->conn_cap = cap;
	w->nleases = rc.loop.pooled_buffers;
	w->tick_ns = tlp_tick_for(cfg);
	w->shard = calloc(w->nshards, sizeof *w->shard);
	if (!w->shard || declare_stats(rt) < 0) {
		fprintf(stderr, "tlproxy: cannot declare the stats\n");
		goto fail;
	}
	for (uint32_t i = 0; i < cfg->nlisteners; i++)
		w->tls |= cfg->listeners[i].tls.enabled;
	for (uint32_t i = 0; i < cfg->npools; i++)
		w->tls |= cfg->pools[i].tls.enabled;
	if (tlp_tls_make(cfg, &made, err, sizeof err) < 0) {
		fprintf(stderr, "tlproxy: %s\n", err);
		goto fail;
	}
	gen = tlp_gen_build(cfg, &made, w->tick_ns, err, sizeof err);
	tlp_tls_made_free(&made);
	cfg = NULL; /* the generation owns it now (or freed it) */
	if (!gen) {
		fprintf(stderr, "tlproxy: %s\n", err);
		goto fail;
	}
	for (uint32_t i = 0; i < w->nhost; i++)
		w->host[i]->used = 1;
	resolve_all();
	tlp_gen_apply(gen);
	/* One reference for each shard (on_launch takes them). */
	atomic_fetch_add(&gen->refs, w->nshards);
	for (uint32_t i = 0; i < w->ngp; i++)
		if (w->gp[i]->view)
			atomic_fetch_add(&w->gp[i]->view->refs, w->nshards);
	atomic_store(&w->gen, gen);

	r = tl_runtime_launch(rt);
	if (r < 0) {
		fprintf(stderr, "tlproxy: cannot start: %s\n", tl_error_detail());
		goto fail_started;
	}
	if (w->alog && (r = tlp_alog_start(w->alog)) < 0)
		fprintf(stderr, "tlproxy: access log: cannot start its thread: %s\n", tl_strerror(r));
	if (pthread_create(&jt, NULL, joiner, rt)) {
		fprintf(stderr, "tlproxy: cannot start a thread\n");
		tl_runtime_stop(rt);
		goto fail_started;
	}
	while ((uint32_t)atomic_load(&w->started) < w->nshards && !atomic_load(&w->start_failed) &&
	       !atomic_load(&rt_done)) {
		struct timespec t = {0, 2000000};

		nanosleep(&t, NULL);
	}
	close_inherited();
	if ((uint32_t)atomic_load(&w->started) == w->nshards) {
		tl_driver_info di;

		tl_driver_info_get(&di);
		uint32_t used = 0;

		for (uint32_t i = 0; i < w->ninh; i++)
			used += w->inh[i].used;
		if (used)
			tlp_log("adopted %u listening socket%s handed over by %s", used,
				used == 1 ? "" : "s",
				tlp_takeover_wanted() ? "the running process (--takeover)"
						      : "systemd (LISTEN_FDS)");
		tlp_log("running: %u listener%s, %u pool%s on %u shard%s (driver %s), pid %d",
			gen->cfg->nlisteners, gen->cfg->nlisteners == 1 ? "" : "s", gen->cfg->npools,
			gen->cfg->npools == 1 ? "" : "s", w->nshards, w->nshards == 1 ? "" : "s",
			di.reason, (int)getpid());
		tlp_sd_notify("READY=1");
		if ((r = tlp_takeover_ready()) < 0 || (r = tlp_handover_start()) < 0)
			tlp_log("takeover: %s", tl_strerror(r));
	}
	while (!atomic_load(&rt_done)) {
		siginfo_t si;
		int sig = sigwaitinfo(&sigs, &si);

		if (sig == SIGHUP) {
			do_reload();
		} else if (sig == SIGUSR1) {
			tlp_alog_reopen(w->alog);
			tlp_log("SIGUSR1: reopening the access log");
		} else if (sig == SIGTERM || sig == SIGINT) {
			if (drains++ == 0) {
				tlp_log("%s: draining: listeners closed, open connections may finish "
					"within %.1f s (a second signal stops at once)",
					sig == SIGTERM ? "SIGTERM" : "SIGINT",
					(double)rc.grace_ns / 1e9);
				tlp_sd_notify("STOPPING=1");
				tl_runtime_drain(rt);
			} else {
				tl_runtime_stop(rt);
			}
		}
	}
	pthread_join(jt, NULL);
	tlp_takeover_stop();
	r = rt_result;
	if (r < 0)
		fprintf(stderr, "tlproxy: %s\n", rt_why);
	else
		tlp_log("stopped");
	tl_runtime_destroy(rt);
	w->rt = NULL;
	/* The lookups' workers end too (the process ends cleanly). */
	tl_pool_shutdown();
	tlp_alog_free(w->alog);
	for (uint32_t i = 0; i < w->nshards; i++)
		tlp_shard_free(w->shard[i]);
	free(w->shard);
	tlp_ctl_free();
	tlp_world_free();
	return r < 0 ? 1 : 0;

fail_started:
	tlp_takeover_stop();
	tl_runtime_destroy(rt);
	w->rt = NULL;
	for (uint32_t i = 0; i < w->nshards; i++)
		tlp_shard_free(w->shard[i]);
	free(w->shard);
	tlp_ctl_free();
	tlp_alog_free(w->alog);
	tlp_world_free();
	return 1;
fail:
	tl_runtime_destroy(rt);
	free(w->shard);
	tlp_alog_free(w->alog);
	tlp_config_free(cfg);
	w->rt = NULL;
	tlp_world_free();
	return 1;
}
