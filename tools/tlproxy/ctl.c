/* tools/tlproxy/ctl.c: shard 0's control plane (health checks, name re-resolution, the admin socket, applying a reload, publishing generations and views) and every shard's control messages. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "proxyproto.h"
#include "sdnotify.h"
#include "world.h"

/*
 * Everything here but tlp_ctl_msg and tlp_passive runs on shard 0, the only
 * thread that changes the registries. One repeating timer (CTL_TICK) drives
 * it: health rounds, lookups and the collection of unused servers are due
 * at times this timer looks at, so a health check's timeout past its
 * connect is enforced within one tick.
 */

#define CTL_TICK_NS 50000000ull

/*
 * The admin socket. Commands are lines, taken one at a time from the bytes
 * as they come, however the client splits them: a read's lease is kept
 * until its last line is run (at most ADMIN_HOLD leases per client: its
 * reads pause at that, contract 4.10), and only the line being read is
 * copied, so a client may send any number of commands in one write. A line
 * longer than ADMIN_LINE is answered with an error and skipped. Answers are
 * written in batches of about ADMIN_BATCH bytes: lines wait while one is
 * being written, so a client that sends and never reads holds at most its
 * leases and one batch. A client that sends nothing and takes nothing for
 * admin_timeout is closed (its stream's idle deadline), and one that finds
 * every one of the ADMIN_MAX slots taken is told so and closed.
 */
#define ADMIN_MAX 16
#define ADMIN_LINE 4096
#define ADMIN_HOLD 4
#define ADMIN_BATCH 65536

enum { HOP_CONNECT = 1, HOP_WRITE, HOP_READ, HOP_CLOSE };
enum { AOP_READ = 1, AOP_WRITE, AOP_CLOSE, AOP_LISTEN };

/* A lease read from an admin client, run up to off. */
struct admin_held {
	const uint8_t *data;
	uint32_t id, len, off;
};

struct admin_conn {
	tl_handle h;
	int used, writing, eof, quit, closing;
	int skipping;               /* the line being read is too long: skip to its end */
	uint32_t inlen;             /* bytes of the line being read */
	char in[ADMIN_LINE + 1];
	struct admin_held held[ADMIN_HOLD]; /* leases read and not yet run, oldest first */
	uint32_t nheld;
	char *out;
	size_t outlen, outcap;
};

static struct ctl {
	tl_shard *s;
	tl_loop *loop;
	tl_handle tick_h, admin_h;
	int running;
	uint64_t collect_at;
	struct tlp_gen *pending_gen; /* built, applied, not yet published */
	uint8_t pending_view[TLP_REG_POOLS];
	struct admin_conn adm[ADMIN_MAX];
	uint8_t shown[TLP_REG_SERVERS]; /* server_state last published, +1 */
} ctl;

/* ---- publishing ---- */

/* A server of gp may take clients again: the shard whose queued client
 * waited longest is told (a message, even to shard 0 itself: the control
 * plane calls no shard code). */
static void room(struct tlp_gpool *gp)
{
	uint32_t who = tlp_oldest_shard(gp);

	if (who != UINT32_MAX)
		tl_shard_post(ctl.s, who, tlp_ctl_token(TLP_MSG_ROOM, gp->idx), 0);
}

int tlp_publish_gen(tl_shard *s, struct tlp_gen *g)
{
	uint32_t n = tl_shard_count(s);
	int r;

	atomic_fetch_add(&g->refs, n);
	r = tl_shard_broadcast(s, tlp_ctl_token(TLP_MSG_GEN, 0), (uint64_t)(uintptr_t)g);
	if (r < 0)
		atomic_fetch_sub(&g->refs, n);
	return r < 0 ? r : 0;
}

int tlp_publish_view(tl_shard *s, struct tlp_gpool *gp)
{
	uint32_t n = tl_shard_count(s);
	struct tlp_view *v = gp->view;
	int r;

	if (v)
		atomic_fetch_add(&v->refs, n);
	r = tl_shard_broadcast(s, tlp_ctl_token(TLP_MSG_VIEW, gp->idx), (uint64_t)(uintptr_t)v);
	if (r < 0 && v)
		atomic_fetch_sub(&v->refs, n);
	return r < 0 ? r : 0;
}

static void publish_pending(void)
{
	if (ctl.pending_gen) {
		if (tlp_publish_gen(ctl.s, ctl.pending_gen) < 0)
			return;
		ctl.pending_gen = NULL;
	}
	for (uint32_t i = 0; i < tlp_w.ngp; i++)
		if (ctl.pending_view[i]) {
			if (tlp_publish_view(ctl.s, tlp_w.gp[i]) < 0)
				return;
			ctl.pending_view[i] = 0;
		}
}

/* ---- server state as the stats show it ---- */

enum { SS_DOWN = 0, SS_UP = 1, SS_DRAIN = 2, SS_DISABLED = 3, SS_PASSIVE = 4 };

static int srv_state(struct tlp_srv *s, uint64_t now)
{
	uint8_t a = atomic_load(&s->admin);
	uint64_t du = atomic_load(&s->down_until);

	if (a == TLP_ADM_DISABLED)
		return SS_DISABLED;
	if (a == TLP_ADM_DRAIN)
		return SS_DRAIN;
	if (!atomic_load(&s->health))
		return SS_DOWN;
	if (du && now < du)
		return SS_PASSIVE;
	return SS_UP;
}

static const char *const ss_names[] = {"down", "up", "drain", "disabled", "passive-down"};

static void show_states(uint64_t now)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->nsrv; i++) {
		struct tlp_srv *s = w->srv[i];
		int st;

		if (!s) {
			ctl.shown[i] = 0;
			continue;
		}
		/* A passive mark that ran out goes away here. */
		uint64_t du = atomic_load(&s->down_until);

		if (du && now >= du && atomic_compare_exchange_strong(&s->down_until, &du, 0)) {
			tlp_log("server %s takes connections again (passive down time over)",
				s->name);
			atomic_fetch_add(&s->pool->state_ver, 1);
		}
		st = s->in_use ? srv_state(s, now) : SS_DOWN;
		if (ctl.shown[i] != st + 1 && s->row >= 0) {
			ctl.shown[i] = (uint8_t)(st + 1);
			tl_shard_gauge_set(ctl.s, w->st_srv_up + s->row, st);
		}
	}
}

/* ---- health checks ---- */

static inline uint64_t htok(uint32_t slot, int op)
{
	return tl_token(TLP_H_HEALTH, slot | (uint64_t)op << 24);
}

/* Count a check's result and move the server up or down. */
static void check_result(struct tlp_srv *s, int ok, const char *why)
{
	const struct tlp_pool_cfg *pc = s->pool->cfg;
	uint32_t rise = pc ? pc->health.rise : 1, fall = pc ? pc->health.fall : 1;

	tl_shard_counter_add(ctl.s, tlp_w.st_checks + (ok ? 0 : 1), 1);
	if (ok) {
		s->h_bad = 0;
		s->h_ok++;
		if (!atomic_load(&s->health) && s->h_ok >= rise) {
			atomic_store(&s->health, 1);
			atomic_fetch_add(&s->pool->state_ver, 1);
			tl_shard_counter_add(ctl.s, tlp_w.st_changes, 1);
			tlp_log("server %s is up (%u health checks passed in a row)", s->name,
				s->h_ok);
			room(s->pool);
		}
	} else {
		s->h_ok = 0;
		s->h_bad++;
		if (atomic_load(&s->health) && s->h_bad >= fall) {
			atomic_store(&s->health, 0);
			atomic_fetch_add(&s->pool->state_ver, 1);
			tl_shard_counter_add(ctl.s, tlp_w.st_changes, 1);
			tlp_log("server %s is down (health check: %s; %u failed in a row)",
				s->name, why, s->h_bad);
		}
	}
}

static void check_done(struct tlp_srv *s, int ok, const char *why)
{
	s->h_busy = 0;
	tl_close(ctl.loop, s->h_h, htok(s->slot, HOP_CLOSE));
	s->h_h = TL_HANDLE_NONE;
	check_result(s, ok, why);
}

/* A check ended with error err: a failure if the server is to blame
 * (tlp_blame), else no result at all (the proxy's own trouble, such as no
 * descriptor to check with, says nothing of the server). */
static void check_error(struct tlp_srv *s, int err)
{
	if (tlp_blame(err) == TLP_BLAME_SERVER) {
		check_done(s, 0, tl_strerror(err));
		return;
	}
	s->h_busy = 0;
	tl_close(ctl.loop, s->h_h, htok(s->slot, HOP_CLOSE));
	s->h_h = TL_HANDLE_NONE;
}

static void check_start(struct tlp_srv *s, const struct tlp_pool_cfg *pc)
{
	uint64_t dl = tl_now(ctl.loop) + pc->health.timeout_ns;
	tl_handle h;
	tl_op op;
	int r;

	if (s->h_busy || atomic_load(&s->admin) == TLP_ADM_DISABLED)
		return;
	s->h_got = 0;
	s->h_wq = 0;
	if (s->unix_path)
		r = tl_unix_connect(ctl.loop, s->path, dl, htok(s->slot, HOP_CONNECT), &h, &op);
	else
		r = tl_tcp_connect(ctl.loop, &s->addr, dl, htok(s->slot, HOP_CONNECT), &h, &op);
	if (r < 0) {
		/* Not even a socket (descriptors, tables): the proxy's trouble,
		 * unless the kernel refused the connect at once. */
		if (tlp_blame(r) == TLP_BLAME_SERVER)
			check_result(s, 0, tl_strerror(r));
		return;
	}
	s->h_busy = 1;
	s->h_h = h;
	s->h_round = s->pool->health_round;
}

static void health_round(struct tlp_gpool *gp)
{
	const struct tlp_pool_cfg *pc = gp->cfg;

	if (!pc || !pc->health.enabled || !gp->view)
		return;
	/* What the last round left unfinished has timed out. */
	for (uint32_t i = 0; i < gp->view->n; i++) {
		struct tlp_srv *s = gp->view->e[i].srv;

		if (s->h_busy)
			check_done(s, 0, "timed out");
	}
	gp->health_round++;
	for (uint32_t i = 0; i < gp->view->n; i++)
		check_start(gp->view->e[i].srv, pc);
}

/* A round's checks that outlive the timeout have failed. */
static void health_timeouts(struct tlp_gpool *gp, uint64_t now)
{
	const struct tlp_pool_cfg *pc = gp->cfg;

	if (!pc || !pc->health.enabled || !gp->view || !gp->health_at)
		return;
	if (now < gp->health_at - pc->health.interval_ns + pc->health.timeout_ns)
		return;
	for (uint32_t i = 0; i < gp->view->n; i++) {
		struct tlp_srv *s = gp->view->e[i].srv;

		if (s->h_busy && s->h_round == gp->health_round)
			check_done(s, 0, "timed out");
	}
}

void tlp_on_health(tl_shard *sh, const tl_completion *e)
{
	uint64_t t = tl_token_data(e->token);
	uint32_t slot = (uint32_t)(t & 0xffffff);
	int op = (int)(t >> 24);
	struct tlp_srv *s = slot < tlp_w.nsrv ? tlp_w.srv[slot] : NULL;
	const struct tlp_pool_cfg *pc;
	tl_op id;

	(void)sh;
	if (!s || !s->h_busy || !tl_handle_eq(e->handle, s->h_h) || op == HOP_CLOSE) {
		if (e->kind == TL_K_READ && (e->flags & TL_F_LEASE) && e->result > 0)
			tl_lease_release(ctl.loop, e->u.read.lease.id);
		return;
	}
	pc = s->pool->cfg;
	switch (op) {
	case HOP_CONNECT: {
		uint32_t n = 0;

		if (e->result < 0) {
			check_error(s, (int)e->result);
			return;
		}
		/* Our own connection: a PROXY header without addresses. */
		if (pc && pc->proxy_protocol == TLP_PP_SEND_V1)
			n = (uint32_t)tlp_pp_build_v1(s->h_buf, sizeof s->h_buf, NULL, NULL);
		else if (pc && pc->proxy_protocol == TLP_PP_SEND_V2)
			n = (uint32_t)tlp_pp_build_v2(s->h_buf, sizeof s->h_buf, NULL, NULL);
		if (n) {
			if (tl_write(ctl.loop, s->h_h, s->h_buf, n, htok(slot, HOP_WRITE), &id) < 0) {
				check_done(s, 0, "cannot write");
				return;
			}
			s->h_wq++;
		}
		if (pc && pc->health.send_len) {
			if (tl_write(ctl.loop, s->h_h, pc->health.send, pc->health.send_len,
				     htok(slot, HOP_WRITE), &id) < 0) {
				check_done(s, 0, "cannot write");
				return;
			}
			s->h_wq++;
		}
		if (pc && pc->health.expect_len) {
			if (tl_read_start(ctl.loop, s->h_h, htok(slot, HOP_READ), &id) < 0)
				check_done(s, 0, "cannot read");
			return;
		}
		if (!s->h_wq)
			check_done(s, 1, "");
		return;
	}
	case HOP_WRITE:
		s->h_wq--;
		if (e->result < 0) {
			check_error(s, (int)e->result);
			return;
		}
		/* Sent, and nothing to wait for: passed. */
		if (!s->h_wq && !(pc && pc->health.expect_len))
			check_done(s, 1, "");
		return;
	case HOP_READ:
		if (e->result > 0 && (e->flags & TL_F_LEASE)) {
			const uint8_t *d = e->u.read.lease.data;
			uint32_t n = (uint32_t)e->result, want;
			int ok = 1;

			want = pc ? pc->health.expect_len : 0;
			for (uint32_t i = 0; i < n && s->h_got < want; i++, s->h_got++)
				if (d[i] != (uint8_t)pc->health.expect[s->h_got])
					ok = 0;
			tl_lease_release(ctl.loop, e->u.read.lease.id);
			if (!ok) {
				check_done(s, 0, "unexpected reply");
				return;
			}
			if (s->h_got >= want)
				check_done(s, 1, "");
			return;
		}
		if ((e->flags & TL_F_TERMINAL) && e->result < 0)
			check_error(s, (int)e->result);
		else if (e->flags & TL_F_TERMINAL)
			check_done(s, 0, "closed before the expected reply");
		return;
	default:
		return;
	}
}

/* ---- name lookups ---- */

static void dns_start(uint32_t i, uint64_t now)
{
	struct tlp_host *h = tlp_w.host[i];
	struct addrinfo hints;
	tl_op op;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	h->next_at = now + (h->interval_ns == UINT64_MAX ? 10000000000ull : h->interval_ns);
	if (tl_resolve(ctl.loop, h->name, h->service, &hints, h->tmp, TL_RESOLVE_MAX,
		       tl_token(TLP_H_DNS, i), &op) == 0)
		h->busy = 1;
}

static int addr_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(tl_addr));
}

void tlp_on_dns(tl_shard *s, const tl_completion *e)
{
	uint32_t i = (uint32_t)tl_token_data(e->token);
	struct tlp_world *w = &tlp_w;
	struct tlp_host *h;
	tl_addr got[TL_RESOLVE_MAX];
	uint32_t n;

	(void)s;
	if (i >= w->nhost)
		return;
	h = w->host[i];
	h->busy = 0;
	if (e->result < 0) {
		tl_shard_counter_add(ctl.s, w->st_dns + 1, 1);
		if (!h->failing)
			tlp_log("cannot resolve %s: %s (keeping its %u addresses)", h->name,
				tl_strerror((int)e->result), h->n);
		h->failing = 1;
		return;
	}
	tl_shard_counter_add(ctl.s, w->st_dns, 1);
	if (h->failing)
		tlp_log("%s resolves again", h->name);
	h->failing = 0;
	n = (uint32_t)e->result;
	memset(got, 0, sizeof got);
	for (uint32_t k = 0; k < n; k++) {
		/* Compare only what matters: family, address, port. */
		if (h->tmp[k].sa.sa_family == AF_INET) {
			got[k].in.sin_family = AF_INET;
			got[k].in.sin_addr = h->tmp[k].in.sin_addr;
			got[k].in.sin_port = htons(h->port);
		} else {
			got[k].in6.sin6_family = AF_INET6;
			got[k].in6.sin6_addr = h->tmp[k].in6.sin6_addr;
			got[k].in6.sin6_port = htons(h->port);
		}
	}
	qsort(got, n, sizeof got[0], addr_cmp);
	if (h->known && n == h->n && !memcmp(got, h->a, n * sizeof got[0]))
		return;
	memcpy(h->a, got, sizeof got);
	h->n = n;
	h->known = 1;
	tl_shard_counter_add(ctl.s, w->st_dns + 2, 1);
	{
		char list[512] = "";
		size_t off = 0;

		for (uint32_t k = 0; k < n && off < sizeof list - 64; k++) {
			char ip[INET6_ADDRSTRLEN];

			if (got[k].sa.sa_family == AF_INET)
				inet_ntop(AF_INET, &got[k].in.sin_addr, ip, sizeof ip);
			else
				inet_ntop(AF_INET6, &got[k].in6.sin6_addr, ip, sizeof ip);
			off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", k ? " " : "", ip);
		}
		tlp_log("%s now resolves to %u address%s: %s", h->name, n, n == 1 ? "" : "es", list);
	}
	/* Every pool that names it gets a new view. */
	for (uint32_t p = 0; p < w->ngp; p++) {
		const struct tlp_pool_cfg *pc = w->gp[p]->cfg;

		if (!pc)
			continue;
		for (uint32_t k = 0; k < pc->nservers; k++) {
			const struct tlp_endpoint *ep = &pc->servers[k].ep;

			if (ep->kind == TLP_EP_HOST && ep->port == h->port && !strcmp(ep->host, h->name))
				w->gp[p]->dirty = 1;
		}
	}
	for (uint32_t p = 0; p < w->ngp; p++)
		if (w->gp[p]->dirty && tlp_pool_rebuild(w->gp[p]) > 0)
			ctl.pending_view[p] = 1;
	publish_pending();
}

/* ---- the admin socket ---- */

static void out_add(struct admin_conn *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(struct admin_conn *a, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = a->outcap - a->outlen;

		va_start(ap, fmt);
		n = vsnprintf(a->out ? a->out + a->outlen : NULL, a->out ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (a->out && (size_t)n < room) {
			a->outlen += (size_t)n;
			return;
		}
		size_t cap = a->outcap ? a->outcap * 2 : 4096;

		while (cap < a->outlen + (size_t)n + 1)
			cap *= 2;
		char *p = realloc(a->out, cap);

		if (!p)
			return;
		a->out = p;
		a->outcap = cap;
	}
}

static void cmd_servers(struct admin_conn *a, const char *pool)
{
	struct tlp_world *w = &tlp_w;
	uint64_t now = tlp_mono_ns();
	uint32_t p;

	for (p = 0; pool && p < w->ngp; p++)
		if (w->gp[p]->cfg && !strcmp(pool, w->gp[p]->name))
			break;
	if (pool && p == w->ngp) {
		out_add(a, "no pool '%.64s' (show pools lists them)\n", pool);
		return;
	}
	for (p = 0; p < w->ngp; p++) {
		struct tlp_gpool *gp = w->gp[p];

		if (!gp->cfg || !gp->view || (pool && strcmp(pool, gp->name)))
			continue;
		for (uint32_t i = 0; i < gp->view->n; i++) {
			struct tlp_vent *e = &gp->view->e[i];
			struct tlp_srv *s = e->srv;

			out_add(a, "%s state=%s health=%s conns=%u weight=%u max_conns=%u from=%s\n",
				s->name, ss_names[srv_state(s, now)],
				!gp->cfg->health.enabled ? "unchecked"
				: atomic_load(&s->health) ? "up" : "down",
				atomic_load(&s->conns), e->weight, e->max_conns, s->origin);
		}
	}
}

static void cmd(struct admin_conn *a, char *line)
{
	struct tlp_world *w = &tlp_w;
	char *verb = strtok(line, " \t\r"), *arg = verb ? strtok(NULL, " \t\r") : NULL;

	if (!verb)
		return;
	if (!strcmp(verb, "help")) {
		out_add(a, "commands:\n"
			   "  show servers [POOL]   every server: state, health, connections\n"
			   "  show pools            every pool: balancing, servers, clients queued\n"
			   "  show listeners        every listener: connections, clients queued\n"
			   "  enable POOL/ADDRESS   let the server take connections\n"
			   "  disable POOL/ADDRESS  take it out: no new connections, no checks\n"
			   "  drain POOL/ADDRESS    no new connections; its own ones finish\n"
			   "  quit\n");
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "servers")) {
		cmd_servers(a, strtok(NULL, " \t\r"));
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "pools")) {
		for (uint32_t p = 0; p < w->ngp; p++) {
			struct tlp_gpool *gp = w->gp[p];

			if (!gp->cfg)
				continue;
			out_add(a, "%s balance=%s servers=%u queued=%u\n", gp->name,
				tlp_bal_name(gp->cfg->balance), gp->view ? gp->view->n : 0,
				atomic_load(&gp->waiting));
		}
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "listeners")) {
		struct tlp_gen *g = atomic_load(&w->gen);

		for (uint32_t i = 0; i < g->cfg->nlisteners; i++) {
			const struct tlp_lrt *l = &g->l[i];

			out_add(a, "%s conns=%u queued=%u listen=", l->cfg->name,
				atomic_load(&l->gl->conns), atomic_load(&l->gl->queued));
			for (uint32_t k = 0; k < l->cfg->nlisten; k++)
				out_add(a, "%s%s", k ? "," : "", l->cfg->listen[k].text);
			out_add(a, "\n");
		}
	} else if (!strcmp(verb, "enable") || !strcmp(verb, "disable") || !strcmp(verb, "drain")) {
		struct tlp_srv *s = arg ? tlp_srv_find(arg) : NULL;
		uint8_t st = verb[0] == 'e' ? TLP_ADM_ENABLED : verb[0] == 'd' && verb[1] == 'i'
								    ? TLP_ADM_DISABLED
								    : TLP_ADM_DRAIN;

		if (!s) {
			out_add(a, "no server '%s' (show servers lists them)\n", arg ? arg : "");
			return;
		}
		if (atomic_exchange(&s->admin, st) != st) {
			atomic_fetch_add(&s->pool->state_ver, 1);
			tlp_log("admin: server %s %s", s->name,
				st == TLP_ADM_ENABLED ? "enabled" : st == TLP_ADM_DRAIN ? "draining" : "disabled");
			if (st == TLP_ADM_ENABLED)
				room(s->pool);
		}
		out_add(a, "ok\n");
	} else if (!strcmp(verb, "quit")) {
		a->quit = 1;
	} else {
		out_add(a, "unknown command '%.40s' (try help)\n", verb);
	}
}

static inline uint64_t atok(const struct admin_conn *a, int op)
{
	return tl_token(TLP_H_ADMIN, (uint64_t)(a - ctl.adm) | (uint64_t)op << 8);
}

static void admin_close(struct admin_conn *a)
{
	if (a->closing)
		return;
	a->closing = 1;
	tl_close(ctl.loop, a->h, atok(a, AOP_CLOSE));
}

/* Take bytes of the oldest held lease up to its next line end: run the
 * line once it is whole. Returns 1 when a line ended. */
static int admin_line(struct admin_conn *a)
{
	struct admin_held *l = &a->held[0];
	const uint8_t *p = l->data + l->off, *nl = memchr(p, '\n', l->len - l->off);
	uint32_t n = nl ? (uint32_t)(nl - p) : l->len - l->off;

	if (!a->skipping && a->inlen + n > ADMIN_LINE) {
		a->skipping = 1; /* answered when the line ends */
		a->inlen = 0;
	}
	if (!a->skipping) {
		memcpy(a->in + a->inlen, p, n);
		a->inlen += n;
	}
	l->off += n + (nl ? 1 : 0);
	if (l->off == l->len) {
		tl_lease_release(ctl.loop, l->id);
		memmove(&a->held[0], &a->held[1], --a->nheld * sizeof a->held[0]);
	}
	if (!nl)
		return 0;
	if (a->skipping)
		out_add(a, "line longer than %d bytes: skipped\n", ADMIN_LINE);
	else {
		a->in[a->inlen] = '\0';
		cmd(a, a->in);
	}
	a->skipping = 0;
	a->inlen = 0;
	return 1;
}

/* Run the lines received, in batches, and send what they printed. */
static void admin_run(struct admin_conn *a)
{
	if (a->writing || a->closing)
		return;
	while (a->nheld && !a->quit && a->outlen < ADMIN_BATCH)
		admin_line(a);
	/* The client's end: its last line needs no line end. */
	if (a->eof && !a->nheld && !a->quit && (a->inlen || a->skipping)) {
		if (a->skipping)
			out_add(a, "line longer than %d bytes: skipped\n", ADMIN_LINE);
		else {
			a->in[a->inlen] = '\0';
			cmd(a, a->in);
		}
		a->inlen = 0;
		a->skipping = 0;
	}
	if (a->outlen) {
		tl_op op;

		if (tl_write(ctl.loop, a->h, a->out, (uint32_t)a->outlen, atok(a, AOP_WRITE), &op) ==
		    0) {
			a->writing = 1;
			return;
		}
		admin_close(a);
		return;
	}
	if (a->quit || (a->eof && !a->nheld))
		admin_close(a);
}

void tlp_on_admin(tl_shard *s, const tl_completion *e)
{
	uint64_t t = tl_token_data(e->token);
	int op = (int)(t >> 8);
	struct admin_conn *a = &ctl.adm[t & 0xff];
	tl_op id;

	(void)s;
	if (op == AOP_LISTEN) {
		struct ucred cr;
		socklen_t len = sizeof cr;
		int fd, slot = -1;

		if (e->kind != TL_K_ACCEPT || e->result < 0)
			return;
		fd = tl_handle_fd(ctl.loop, e->u.accept.conn);
		if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
		    (cr.uid != 0 && cr.uid != geteuid())) {
			tlp_log("admin: refused a client of uid %d (only uid %u and root may connect)",
				fd < 0 ? -1 : (int)cr.uid, (unsigned)geteuid());
			tl_close(ctl.loop, e->u.accept.conn, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			return;
		}
		for (int i = 0; i < ADMIN_MAX; i++)
			if (!ctl.adm[i].used) {
				slot = i;
				break;
			}
		if (slot < 0) {
			/* A new Unix stream's send buffer is empty: the line goes
			 * whole, at once, before the close. */
			static const char busy[] = "busy: all 16 admin connections are in use; "
						   "try again later\n";

			_Static_assert(ADMIN_MAX == 16, "the message names the count");
			if (send(fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
				tlp_log("admin: all %d slots in use; a client was closed unanswered",
					ADMIN_MAX);
			tl_close(ctl.loop, e->u.accept.conn, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			return;
		}
		a = &ctl.adm[slot];
		memset(a, 0, sizeof *a);
		a->used = 1;
		a->h = e->u.accept.conn;
		if (tl_handle_caps(ctl.loop, a->h, ADMIN_HOLD, 0) < 0 ||
		    tl_idle_deadline(ctl.loop, a->h, atomic_load(&tlp_w.gen)->cfg->admin_timeout_ns) < 0 ||
		    tl_read_start(ctl.loop, a->h, atok(a, AOP_READ), &id) < 0)
			admin_close(a);
		return;
	}
	if (!a->used) {
		if (e->kind == TL_K_READ && (e->flags & TL_F_LEASE) && e->result > 0)
			tl_lease_release(ctl.loop, e->u.read.lease.id);
		return;
	}
	switch (op) {
	case AOP_READ:
		if (e->result > 0 && (e->flags & TL_F_LEASE)) {
			if (a->closing || a->nheld == ADMIN_HOLD) {
				/* Closing; or past the cap, which the caps forbid. */
				tl_lease_release(ctl.loop, e->u.read.lease.id);
				if (!a->closing)
					admin_close(a);
				return;
			}
			a->held[a->nheld].data = e->u.read.lease.data;
			a->held[a->nheld].id = e->u.read.lease.id;
			a->held[a->nheld].len = (uint32_t)e->result;
			a->held[a->nheld++].off = 0;
		}
		if (e->result == -ETIMEDOUT && !a->closing) {
			out_add(a, "closing: idle for %llu ms\n",
				(unsigned long long)(atomic_load(&tlp_w.gen)->cfg->admin_timeout_ns /
						     1000000));
			a->quit = 1;
		} else if ((e->flags & TL_F_TERMINAL) && e->result != -ECANCELED) {
			a->eof = 1;
		}
		admin_run(a);
		return;
	case AOP_WRITE:
		a->writing = 0;
		a->outlen = 0;
		if (e->result < 0) {
			admin_close(a);
			return;
		}
		admin_run(a);
		return;
	case AOP_CLOSE:
		for (uint32_t i = 0; i < a->nheld; i++)
			tl_lease_release(ctl.loop, a->held[i].id);
		free(a->out);
		memset(a, 0, sizeof *a);
		return;
	default:
		return;
	}
}

static int admin_start(const char *path)
{
	tl_op op;
	int r;

	r = tl_unix_listen(ctl.loop, path, NULL, &ctl.admin_h);
	if (r < 0) {
		fprintf(stderr, "tlproxy: admin socket %s: %s\n", path, tl_strerror(r));
		return r;
	}
	/* Owner only; SO_PEERCRED checks each client on top. */
	if (chmod(path, 0600) < 0) {
		r = -errno;
		fprintf(stderr, "tlproxy: admin socket %s: chmod: %s\n", path, tl_strerror(r));
		return r;
	}
	r = tl_accept_start(ctl.loop, ctl.admin_h, tl_token(TLP_H_ADMIN, (uint64_t)AOP_LISTEN << 8),
			    &op);
	if (r < 0)
		fprintf(stderr, "tlproxy: admin socket %s: %s\n", path, tl_strerror(r));
	return r;
}

/* ---- reload ---- */

static void reload(struct tlp_config *cfg)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_gen *old = atomic_load(&w->gen), *g;
	char err[256];
	int n;

	if (tlp_tick_for(cfg) < w->tick_ns)
		tlp_log("reload: queue timeouts below %llu ms are enforced to within %llu ms until a "
			"restart",
			(unsigned long long)(w->tick_ns * 8 / 1000000),
			(unsigned long long)(w->tick_ns / 1000000));
	if ((cfg->admin || old->cfg->admin) &&
	    (!cfg->admin || !old->cfg->admin || strcmp(cfg->admin, old->cfg->admin)))
		tlp_log("reload: the admin socket stays where it is until a restart");
	if ((cfg->access_log || old->cfg->access_log) &&
	    (!cfg->access_log || !old->cfg->access_log ||
	     strcmp(cfg->access_log, old->cfg->access_log)))
		tlp_log("reload: the access log stays where it is until a restart");
	if (cfg->shards != old->cfg->shards || (cfg->cpus || old->cfg->cpus))
		if (cfg->shards != old->cfg->shards ||
		    !cfg->cpus != !old->cfg->cpus || (cfg->cpus && strcmp(cfg->cpus, old->cfg->cpus)))
			tlp_log("reload: shards and cpus change only with a restart");
	g = tlp_gen_build(cfg, w->tick_ns, err, sizeof err);
	if (!g) {
		tlp_log("reload failed: %s; the running configuration stays", err);
		return;
	}
	g->ver = old->ver + 1;
	n = tlp_gen_apply(g);
	atomic_store(&w->gen, g);
	ctl.pending_gen = g;
	for (uint32_t i = 0; i < w->ngp; i++)
		ctl.pending_view[i] = 1;
	publish_pending();
	tlp_gen_put(old);
	for (uint32_t i = 0; i < w->nhost; i++)
		if (w->host[i]->used && !w->host[i]->known && !w->host[i]->busy)
			dns_start(i, tlp_mono_ns());
	tlp_log("reloaded: %u listeners, %u pools (%d with new servers)", g->cfg->nlisteners,
		g->cfg->npools, n);
	tlp_sd_notify("READY=1");
}

/* ---- every shard's messages ---- */

void tlp_ctl_msg(tl_shard *s, uint64_t t, uint64_t payload)
{
	uint32_t type = (uint32_t)(t & 0xff);
	uint64_t now;

	switch (type) {
	case TLP_MSG_RELOAD:
		if (tl_shard_id(s) == 0 && payload)
			reload((struct tlp_config *)(uintptr_t)payload);
		return;
	case TLP_MSG_CTLTICK:
		if (tl_shard_id(s) != 0 || !ctl.running)
			return;
		if ((uint32_t)atomic_load(&tlp_w.started) < tlp_w.nshards)
			return;
		now = tlp_mono_ns();
		publish_pending();
		for (uint32_t i = 0; i < tlp_w.ngp; i++) {
			struct tlp_gpool *gp = tlp_w.gp[i];
			const struct tlp_pool_cfg *pc = gp->cfg;

			if (!pc || !pc->health.enabled)
				continue;
			health_timeouts(gp, now);
			if (now >= gp->health_at) {
				gp->health_at = now + pc->health.interval_ns;
				health_round(gp);
			}
		}
		for (uint32_t i = 0; i < tlp_w.nhost; i++) {
			struct tlp_host *h = tlp_w.host[i];

			if (h->used && !h->busy && now >= h->next_at)
				dns_start(i, now);
		}
		show_states(now);
		if (now >= ctl.collect_at) {
			ctl.collect_at = now + 1000000000ull;
			tlp_srv_collect();
		}
		return;
	default:
		return;
	}
}

/* ---- start, stop ---- */

int tlp_ctl_start(tl_shard *s)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_gen *g = atomic_load(&w->gen);
	uint64_t now = tlp_mono_ns();
	tl_op op;
	int r;

	ctl.s = s;
	ctl.loop = tl_shard_loop(s);
	w->post0 = tl_poster_get(ctl.loop);
	r = tl_timer_start(ctl.loop, tl_now(ctl.loop) + CTL_TICK_NS, CTL_TICK_NS,
			   tlp_ctl_token(TLP_MSG_CTLTICK, 0), &ctl.tick_h, &op);
	if (r < 0)
		return r;
	tl_set_ref(ctl.loop, ctl.tick_h, 0);
	for (uint32_t i = 0; i < w->nhost; i++)
		w->host[i]->next_at = now + w->host[i]->interval_ns;
	ctl.collect_at = now + 1000000000ull;
	ctl.running = 1;
	if (g->cfg->admin && (r = admin_start(g->cfg->admin)) < 0)
		return r;
	return 0;
}

void tlp_ctl_stop(tl_shard *s)
{
	(void)s;
	if (!ctl.running)
		return;
	ctl.running = 0;
	tl_close(ctl.loop, ctl.tick_h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
	for (int i = 0; i < ADMIN_MAX; i++)
		if (ctl.adm[i].used)
			admin_close(&ctl.adm[i]);
	/* Checks in flight end with their handles (the runtime's drain). */
	for (uint32_t i = 0; i < tlp_w.nsrv; i++) {
		struct tlp_srv *sv = tlp_w.srv[i];

		if (sv && sv->h_busy) {
			sv->h_busy = 0;
			tl_close(ctl.loop, sv->h_h, htok(sv->slot, HOP_CLOSE));
		}
	}
	if (ctl.pending_gen) {
		ctl.pending_gen = NULL;
	}
}

void tlp_ctl_free(void)
{
	for (int i = 0; i < ADMIN_MAX; i++)
		free(ctl.adm[i].out);
	if (tlp_w.post0)
		tl_poster_put(tlp_w.post0);
	tlp_w.post0 = NULL;
	memset(&ctl, 0, sizeof ctl);
}
