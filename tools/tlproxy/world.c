/* tools/tlproxy/world.c: what the shards share: the registries of listeners, pools, servers and host names, configuration generations and the views of a pool's servers, and how they are made and freed. */
/* Calls: world -> the pure modules (config, balance, netlist, sni): the
 * bottom of the stages (tests/check_layers.py). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

struct tlp_world tlp_w;

uint64_t tlp_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void tlp_log(const char *fmt, ...)
{
	char line[1024], ts[40];
	struct timespec now;
	struct tm tm;
	va_list ap;
	int n;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* One write per line, so lines of several threads never interleave. */
	fprintf(stderr, "%s.%03ldZ tlproxy: %s\n", ts, now.tv_nsec / 1000000, line);
}

/* ---- registries ---- */

static struct tlp_gpool *gpool_get(const char *name)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_gpool *gp;

	for (uint32_t i = 0; i < w->ngp; i++)
		if (!strcmp(w->gp[i]->name, name))
			return w->gp[i];
	if (w->ngp == TLP_REG_POOLS || !(gp = calloc(1, sizeof *gp)))
		return NULL;
	gp->head = calloc(w->nshards ? w->nshards : 1, sizeof *gp->head);
	if (!gp->head) {
		free(gp);
		return NULL;
	}
	for (uint32_t i = 0; i < (w->nshards ? w->nshards : 1); i++)
		atomic_init(&gp->head[i], UINT64_MAX);
	snprintf(gp->name, sizeof gp->name, "%s", name);
	gp->idx = w->ngp;
	w->gp[w->ngp++] = gp;
	return gp;
}

static struct tlp_glisten *glisten_get(const char *name)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_glisten *gl;

	for (uint32_t i = 0; i < w->ngl; i++)
		if (!strcmp(w->gl[i]->name, name))
			return w->gl[i];
	if (w->ngl == TLP_REG_LISTENERS || !(gl = calloc(1, sizeof *gl)))
		return NULL;
	snprintf(gl->name, sizeof gl->name, "%s", name);
	gl->idx = w->ngl;
	w->gl[w->ngl++] = gl;
	return gl;
}

struct tlp_host *tlp_host_get(const char *name, uint16_t port)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_host *h;

	for (uint32_t i = 0; i < w->nhost; i++)
		if (w->host[i]->port == port && !strcmp(w->host[i]->name, name))
			return w->host[i];
	if (w->nhost == TLP_REG_HOSTS || strlen(name) >= sizeof h->name ||
	    !(h = calloc(1, sizeof *h)))
		return NULL;
	snprintf(h->name, sizeof h->name, "%s", name);
	h->port = port;
	snprintf(h->service, sizeof h->service, "%u", port);
	w->host[w->nhost++] = h;
	return h;
}

static void fmt_addr(const tl_addr *a, char *buf, size_t cap)
{
	char ip[INET6_ADDRSTRLEN];

	if (a->sa.sa_family == AF_INET) {
		inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip);
		snprintf(buf, cap, "%s:%u", ip, ntohs(a->in.sin_port));
	} else if (a->sa.sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip);
		snprintf(buf, cap, "[%s]:%u", ip, ntohs(a->in6.sin6_port));
	} else {
		snprintf(buf, cap, "unix");
	}
}

static int same_addr(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET)
		return a->in.sin_port == b->in.sin_port &&
		       a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
	if (a->sa.sa_family == AF_INET6)
		return a->in6.sin6_port == b->in6.sin6_port &&
		       !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
	return 0;
}

/* A stat label: [A-Za-z0-9_.:/@+=-] and brackets; anything else becomes '_'. */
static void set_label(struct tlp_srv *s, const char *text)
{
	size_t i = 0;

	for (; text[i] && i + 1 < sizeof s->label; i++) {
		char ch = text[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			 (ch >= '0' && ch <= '9') || strchr("_.:/@+=-[]", ch);

		s->label[i] = ok ? ch : '_';
	}
	s->label[i] = '\0';
}

static void srv_row(struct tlp_srv *s)
{
	struct tlp_world *w = &tlp_w;
	char lab[128];

	s->row = -1;
	for (int r = 0; r < (int)w->srv_rows; r++)
		if (!w->row_used[r]) {
			w->row_used[r] = 1;
			s->row = r;
			break;
		}
	if (s->row < 0 || !w->rt)
		return;
	/* "pool/label", cut to fit. */
	snprintf(lab, sizeof lab, "%s/%s", s->pool->name, s->label);
	lab[TL_STATS_LABEL_MAX - 1] = '\0';
	for (char *p = lab; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr("_.:/@+=-[]", *p)))
			*p = '_';
	tl_runtime_stat_label(w->rt, w->st_srv_conns + s->row, lab);
	tl_runtime_stat_label(w->rt, w->st_srv_up + s->row, lab);
}

/* Find or make the server of pool gp at address a (or Unix path). */
static struct tlp_srv *srv_get(struct tlp_gpool *gp, const char *origin, const tl_addr *a,
			       const char *path)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_srv *s;
	uint32_t slot = TLP_REG_SERVERS;
	char text[300];

	for (uint32_t i = 0; i < w->nsrv; i++) {
		s = w->srv[i];
		if (!s) {
			if (slot == TLP_REG_SERVERS)
				slot = i;
			continue;
		}
		if (s->pool != gp)
			continue;
		if (path ? (s->unix_path && !strcmp(s->path, path))
			 : (!s->unix_path && same_addr(&s->addr, a)))
			return s;
	}
	if (slot == TLP_REG_SERVERS) {
		if (w->nsrv == TLP_REG_SERVERS)
			return NULL;
		slot = w->nsrv++;
	}
	s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	atomic_init(&s->health, 1);
	s->pool = gp;
	s->slot = slot;
	if (path) {
		s->unix_path = 1;
		snprintf(s->path, sizeof s->path, "%s", path);
		snprintf(text, sizeof text, "unix:%s", path);
	} else {
		s->addr = *a;
		fmt_addr(a, text, sizeof text);
	}
	set_label(s, text);
	snprintf(s->name, sizeof s->name, "%s/%s", gp->name, text);
	snprintf(s->origin, sizeof s->origin, "%s", origin);
	s->id = tlp_hash64(text, strlen(text), 0);
	srv_row(s);
	w->srv[slot] = s;
	return s;
}

static int inherited(const struct tlp_endpoint *ep, uint32_t k, int dgram)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->ninh; i++) {
		const struct tlp_inherit *h = &w->inh[i];

		if (h->fd < 0 || h->dgram != dgram)
			continue;
		if (ep->kind == TLP_EP_UNIX) {
			if (h->unix_path && !strcmp(h->path, ep->addr.un.sun_path) && k-- == 0)
				return h->fd;
		} else if (ep->kind == TLP_EP_IP && !h->unix_path) {
			tl_addr a;

			memset(&a, 0, sizeof a);
			memcpy(&a, &ep->addr,
			       ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
			if (same_addr(&a, &h->addr) && k-- == 0)
				return h->fd;
		}
	}
	return -1;
}

int tlp_inherited(const struct tlp_endpoint *ep)
{
	return inherited(ep, 0, 0);
}

int tlp_inherited_nth(const struct tlp_endpoint *ep, uint32_t k)
{
	return inherited(ep, k, 0);
}

int tlp_inherited_udp(const struct tlp_endpoint *ep, uint32_t k)
{
	return ep->kind == TLP_EP_IP ? inherited(ep, k, 1) : -1;
}

struct tlp_srv *tlp_srv_find(const char *name)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->nsrv; i++)
		if (w->srv[i] && w->srv[i]->in_use && !strcmp(w->srv[i]->name, name))
			return w->srv[i];
	return NULL;
}

static void srv_free(struct tlp_srv *s)
{
	struct tlp_world *w = &tlp_w;

	if (s->row >= 0) {
		w->row_used[s->row] = 0;
		if (w->rt) {
			tl_runtime_stat_label(w->rt, w->st_srv_conns + s->row, "");
			tl_runtime_stat_label(w->rt, w->st_srv_up + s->row, "");
		}
	}
	w->srv[s->slot] = NULL;
	free(s);
}

void tlp_srv_collect(void)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->nsrv; i++) {
		struct tlp_srv *s = w->srv[i];

		if (s && !s->in_use && !s->h_busy && !atomic_load(&s->views) &&
		    !atomic_load(&s->conns))
			srv_free(s);
	}
}

/* ---- views ---- */

void tlp_view_put(struct tlp_view *v)
{
	if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
		return;
	for (uint32_t i = 0; i < v->n; i++)
		atomic_fetch_sub(&v->e[i].srv->views, 1);
	tlp_bal_table_free(v->balance, &v->tab);
	free(v->e);
	free(v);
}

static int view_same(const struct tlp_view *a, const struct tlp_view *b)
{
	if (!a || a->n != b->n || a->balance != b->balance)
		return 0;
	for (uint32_t i = 0; i < a->n; i++)
		if (a->e[i].srv != b->e[i].srv || a->e[i].weight != b->e[i].weight ||
		    a->e[i].max_conns != b->e[i].max_conns)
			return 0;
	return 1;
}

int tlp_pool_rebuild(struct tlp_gpool *gp)
{
	const struct tlp_pool_cfg *pc = gp->cfg;
	struct tlp_view *v;
	uint32_t cap = 0, n = 0;

	gp->dirty = 0;
	if (!pc)
		return 0;
	for (uint32_t i = 0; i < pc->nservers; i++) {
		const struct tlp_endpoint *ep = &pc->servers[i].ep;

		if (ep->kind == TLP_EP_HOST) {
			struct tlp_host *h = tlp_host_get(ep->host, ep->port);

			cap += h ? h->n : 0;
		} else {
			cap++;
		}
	}
	v = calloc(1, sizeof *v);
	if (!v || !(v->e = calloc(cap ? cap : 1, sizeof *v->e)))
		goto nomem;
	v->balance = pc->balance;
	v->need_conns = !!(tlp_bal_ops[pc->balance].needs & TLP_BAL_NEEDS_CONNS);
	for (uint32_t i = 0; i < pc->nservers; i++) {
		const struct tlp_server_cfg *sc = &pc->servers[i];
		const struct tlp_endpoint *ep = &sc->ep;
		tl_addr a;

		if (ep->kind == TLP_EP_HOST) {
			struct tlp_host *h = tlp_host_get(ep->host, ep->port);

			for (uint32_t k = 0; h && k < h->n && n < cap; k++) {
				struct tlp_srv *s = srv_get(gp, ep->text, &h->a[k], NULL);
				int dup = 0;

				for (uint32_t j = 0; j < n; j++)
					dup |= v->e[j].srv == s;
				if (!s || dup)
					continue;
				v->e[n++] = (struct tlp_vent){s, sc->weight, sc->max_conns};
			}
			continue;
		}
		struct tlp_srv *s;

		if (ep->kind == TLP_EP_UNIX) {
			s = srv_get(gp, ep->text, NULL, ep->addr.un.sun_path);
		} else {
			memset(&a, 0, sizeof a);
			memcpy(&a, &ep->addr,
			       ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
			s = srv_get(gp, ep->text, &a, NULL);
		}
		if (!s)
			continue;
		v->e[n++] = (struct tlp_vent){s, sc->weight, sc->max_conns};
	}
	v->n = n;
	for (uint32_t i = 0; i < n; i++)
		if (v->e[i].max_conns)
			v->need_conns = 1;
	if (view_same(gp->view, v)) {
		free(v->e);
		free(v);
		return 0;
	}
	if (tlp_bal_ops[v->balance].build && n) {
		struct tlp_bal_server *tmp = calloc(n, sizeof *tmp);
		int r;

		if (!tmp)
			goto nomem;
		/* Every server gets its place (a Maglev table's slots); picks
		 * skip the unusable ones, so a server going down moves only
		 * its own clients. */
		for (uint32_t i = 0; i < n; i++) {
			tmp[i].id = v->e[i].srv->id;
			tmp[i].weight = v->e[i].weight;
			tmp[i].state = TLP_SRV_UP;
		}
		r = tlp_bal_build(v->balance, &v->tab, tmp, n);
		free(tmp);
		if (r < 0)
			goto nomem;
	}
	atomic_init(&v->refs, 1);
	v->ver = ++gp->next_ver;
	/* Which servers the pool lists now. */
	if (gp->view)
		for (uint32_t i = 0; i < gp->view->n; i++)
			gp->view->e[i].srv->in_use = 0;
	for (uint32_t i = 0; i < n; i++) {
		v->e[i].srv->in_use = 1;
		atomic_fetch_add(&v->e[i].srv->views, 1);
	}
	tlp_view_put(gp->view);
	gp->view = v;
	return 1;
nomem:
	if (v) {
		tlp_bal_table_free(v->balance, &v->tab);
		free(v->e);
	}
	free(v);
	tlp_log("pool %s: out of memory for its servers", gp->name);
	return -ENOMEM;
}

/* ---- generations ---- */

static uint32_t ticks(uint64_t ns, uint64_t tick)
{
	uint64_t t = (ns + tick - 1) / tick;

	return t > 0x7fffffff ? 0x7fffffff : (uint32_t)(t ? t : 1);
}

uint64_t tlp_tick_for(const struct tlp_config *cfg)
{
	uint64_t m = UINT64_MAX;

	for (uint32_t i = 0; i < cfg->nlisteners; i++) {
		const struct tlp_listener_cfg *l = &cfg->listeners[i];
		/* Only the waits without an operation use the wheel. */
		uint64_t t[2] = {l->queue_max ? l->queue_timeout_ns : UINT64_MAX,
				 (l->nsni || tlp_netset_count(&l->proxy_from)) ? l->sni_timeout_ns
									     : UINT64_MAX};

		for (int k = 0; k < 2; k++)
			if (t[k] < m)
				m = t[k];
	}
	m /= 8;
	if (m < 5000000)
		m = 5000000;
	if (m > 100000000)
		m = 100000000;
	return m;
}

/* Read a ticket key file: exactly TL_TLS_TICKET_KEY_SIZE bytes (make one
 * with `openssl rand 64`). 0, or -1 with the reason in why. */
static int read_ticket_key(const char *path, uint8_t key[TL_TLS_TICKET_KEY_SIZE], char *why, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, extra;
	uint8_t more;

	if (fd < 0) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	n = read(fd, key, TL_TLS_TICKET_KEY_SIZE);
	extra = n == TL_TLS_TICKET_KEY_SIZE ? read(fd, &more, 1) : 0;
	close(fd);
	if (n != TL_TLS_TICKET_KEY_SIZE || extra != 0) {
		explicit_bzero(key, TL_TLS_TICKET_KEY_SIZE);
		snprintf(why, len, "%s: not %d bytes (make one with: openssl rand %d > FILE)", path,
			 TL_TLS_TICKET_KEY_SIZE, TL_TLS_TICKET_KEY_SIZE);
		return -1;
	}
	return 0;
}

/* Make listener lc's server config: its files are read now (on the main
 * thread: tlp_tls_make). 0, or -1 with the reason in err. */
static int tls_config(const struct tlp_listener_cfg *lc, struct tl_tls_config **out, char *err,
		      size_t errlen)
{
	const struct tlp_tls_cfg *t = &lc->tls;
	tl_tls_cert certs[TLP_TLS_CERTS_MAX];
	tl_tls_settings st;
	char why[256];
	int r;

	memset(&st, 0, sizeof st);
	for (uint32_t i = 0; i < t->ncerts && i < TLP_TLS_CERTS_MAX; i++)
		certs[i] = (tl_tls_cert){.cert_file = t->certs[i].cert, .key_file = t->certs[i].key,
					 .ocsp_file = t->certs[i].ocsp, .names = t->certs[i].names};
	st.role = TL_TLS_SERVER;
	st.certs = certs;
	st.ncerts = t->ncerts;
	st.alpn = t->alpn;
	st.ciphers = t->ciphers;
	st.min_version = t->min_version;
	st.max_version = t->max_version;
	st.ca_file = t->client_ca;
	st.verify = t->verify == TLP_TLS_VERIFY_ON	   ? TL_TLS_VERIFY_REQUIRE
		    : t->verify == TLP_TLS_VERIFY_OPTIONAL ? TL_TLS_VERIFY_OPTIONAL
							   : TL_TLS_VERIFY_NONE;
	uint8_t tkey[TL_TLS_TICKET_KEY_SIZE];
	if (t->ticket_key) {
		if (read_ticket_key(t->ticket_key, tkey, why, sizeof why) < 0) {
			snprintf(err, errlen, "listener %s: tls.ticket_key: %s", lc->name, why);
			*out = NULL;
			return -1;
		}
		st.ticket_key = tkey;
	}
	why[0] = '\0';
	r = tl_tls_config_new(&st, out, why, sizeof why);
	explicit_bzero(tkey, sizeof tkey);
	if (r < 0) {
		snprintf(err, errlen, "listener %s: tls: %s", lc->name, why[0] ? why : tl_strerror(r));
		*out = NULL;
		return -1;
	}
	return 0;
}

/* Make pool pc's client config (files read now, as a listener's). 0, or -1
 * with the reason in err. */
static int pool_tls_config(const struct tlp_pool_cfg *pc, struct tl_tls_config **out, char *err,
			   size_t errlen)
{
	const struct tlp_pool_tls_cfg *t = &pc->tls;
	tl_tls_cert cert = {.cert_file = t->cert, .key_file = t->key};
	tl_tls_settings st;
	char why[256];
	int r;

	memset(&st, 0, sizeof st);
	st.role = TL_TLS_CLIENT;
	st.certs = t->cert ? &cert : NULL;
	st.ncerts = t->cert ? 1 : 0;
	st.ca_file = t->ca;
	st.verify = t->verify ? TL_TLS_VERIFY_REQUIRE : TL_TLS_VERIFY_NONE;
	st.alpn = t->alpn;
	st.ciphers = t->ciphers;
	st.min_version = t->min_version;
	st.max_version = t->max_version;
	why[0] = '\0';
	r = tl_tls_config_new(&st, out, why, sizeof why);
	if (r < 0) {
		snprintf(err, errlen, "pool %s: tls: %s", pc->name, why[0] ? why : tl_strerror(r));
		*out = NULL;
		return -1;
	}
	return 0;
}

int tlp_tls_make(const struct tlp_config *cfg, struct tlp_tls_made *m, char *err, size_t errlen)
{
	m->n[0] = cfg->nlisteners;
	m->n[1] = cfg->npools;
	m->l = calloc(cfg->nlisteners ? cfg->nlisteners : 1, sizeof *m->l);
	m->p = calloc(cfg->npools ? cfg->npools : 1, sizeof *m->p);
	if (!m->l || !m->p) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < cfg->npools; i++)
		if (cfg->pools[i].tls.enabled && pool_tls_config(&cfg->pools[i], &m->p[i], err, errlen) < 0)
			goto fail;
	for (uint32_t i = 0; i < cfg->nlisteners; i++)
		if (cfg->listeners[i].tls.enabled &&
		    tls_config(&cfg->listeners[i], &m->l[i], err, errlen) < 0)
			goto fail;
	return 0;
fail:
	tlp_tls_made_free(m);
	return -1;
}

void tlp_tls_made_free(struct tlp_tls_made *m)
{
	for (uint32_t i = 0; m->l && i < m->n[0]; i++)
		tl_tls_config_unref(m->l[i]);
	for (uint32_t i = 0; m->p && i < m->n[1]; i++)
		tl_tls_config_unref(m->p[i]);
	free(m->l);
	free(m->p);
	m->l = m->p = NULL;
}

int tlp_gen_has_tls(const struct tlp_gen *g)
{
	for (uint32_t i = 0; i < g->cfg->nlisteners; i++)
		if (g->cfg->listeners[i].tls.enabled)
			return 1;
	for (uint32_t i = 0; i < g->cfg->npools; i++)
		if (g->cfg->pools[i].tls.enabled)
			return 1;
	return 0;
}

void tlp_gen_put(struct tlp_gen *g)
{
	if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
		return;
	if (g->l)
		for (uint32_t i = 0; i < g->cfg->nlisteners; i++) {
			free(g->l[i].sni_pool);
			tl_tls_config_unref(g->l[i].tls);
		}
	free(g->l);
	/* By registry index, not through g->pools: at the end the pools'
	 * registry goes before the last generation. */
	for (uint32_t i = 0; i < TLP_REG_POOLS; i++)
		tl_tls_config_unref(g->tls_by_gp[i]);
	free(g->pools);
	free(g->sc);
	tlp_config_free(g->cfg);
	free(g);
}

struct tlp_gen *tlp_gen_build(struct tlp_config *cfg, struct tlp_tls_made *m, uint64_t tick_ns,
			      char *err, size_t errlen)
{
	struct tlp_world *w = &tlp_w;
	struct tlp_gen *g = calloc(1, sizeof *g);

	if (!g) {
		tlp_config_free(cfg);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	atomic_init(&g->refs, 1);
	g->cfg = cfg;
	g->pools = calloc(cfg->npools, sizeof *g->pools);
	g->l = calloc(cfg->nlisteners, sizeof *g->l);
	g->sc = calloc(w->nshards ? w->nshards : 1, sizeof *g->sc);
	if (!g->pools || !g->l || !g->sc)
		goto nomem;
	for (uint32_t i = 0; i < cfg->npools; i++) {
		g->pools[i] = gpool_get(cfg->pools[i].name);
		if (!g->pools[i]) {
			snprintf(err, errlen, "more than %d pools since the start", TLP_REG_POOLS);
			goto fail;
		}
		g->pc_by_gp[g->pools[i]->idx] = &cfg->pools[i];
		if (cfg->pools[i].tls.enabled) {
			/* made off the loop (tlp_tls_make): taken from m */
			g->tls_by_gp[g->pools[i]->idx] = m->p[i];
			m->p[i] = NULL;
		}
		for (uint32_t k = 0; k < cfg->pools[i].nservers; k++) {
			const struct tlp_endpoint *ep = &cfg->pools[i].servers[k].ep;

			if (ep->kind == TLP_EP_HOST && !tlp_host_get(ep->host, ep->port)) {
				snprintf(err, errlen, "more than %d host names since the start",
					 TLP_REG_HOSTS);
				goto fail;
			}
		}
	}
	for (uint32_t i = 0; i < cfg->nlisteners; i++) {
		const struct tlp_listener_cfg *lc = &cfg->listeners[i];
		struct tlp_lrt *l = &g->l[i];
		const struct tlp_socket_cfg *so = &lc->socket;

		l->cfg = lc;
		l->gl = glisten_get(lc->name);
		if (!l->gl) {
			snprintf(err, errlen, "more than %d listeners since the start",
				 TLP_REG_LISTENERS);
			goto fail;
		}
		g->by_gl[l->gl->idx] = l;
		if (lc->pool >= 0) {
			l->pool = g->pools[lc->pool];
			l->pool_cfg = &cfg->pools[lc->pool];
		}
		l->sni_default = lc->sni_default >= 0 ? g->pools[lc->sni_default] : NULL;
		if (lc->nsni) {
			l->sni_pool = calloc(lc->nsni, sizeof *l->sni_pool);
			if (!l->sni_pool)
				goto nomem;
			for (uint32_t k = 0; k < lc->nsni; k++)
				l->sni_pool[k] = g->pools[lc->sni[k].target];
		}
		if (lc->tls.enabled) {
			l->tls = m->l[i];
			m->l[i] = NULL;
		}
		/* A TLS listener routes by the name its handshake brought. */
		l->peek = !lc->tls.enabled && (lc->nsni > 0 || tlp_netset_count(&lc->proxy_from) > 0);
		l->queue_t = ticks(lc->queue_timeout_ns, tick_ns);
		l->peek_t = ticks(lc->sni_timeout_ns, tick_ns);
		/* Upstream sockets: what differs from the runtime's defaults. */
		if (!so->nodelay)
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_NODELAY, 0};
		if (so->keepalive) {
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_KEEPALIVE, 1};
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_KEEPIDLE, so->ka_idle_s};
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_KEEPINTVL, so->ka_interval_s};
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_KEEPCNT, so->ka_count};
		}
		if (so->rcvbuf)
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_RCVBUF, so->rcvbuf};
		if (so->sndbuf)
			l->opts[l->nopts++] = (tl_sockopt_val){TL_SO_SNDBUF, so->sndbuf};
	}
	return g;
nomem:
	snprintf(err, errlen, "out of memory");
fail:
	tlp_gen_put(g);
	return NULL;
}

int tlp_gen_apply(struct tlp_gen *g)
{
	struct tlp_world *w = &tlp_w;
	const struct tlp_config *cfg = g->cfg;
	int changed = 0;

	for (uint32_t i = 0; i < w->nhost; i++) {
		w->host[i]->used = 0;
		w->host[i]->interval_ns = UINT64_MAX;
	}
	for (uint32_t i = 0; i < w->ngp; i++) {
		struct tlp_gpool *gp = w->gp[i];
		const struct tlp_pool_cfg *pc = g->pc_by_gp[i];

		gp->cfg = pc;
		if (!pc) {
			/* Gone from the file: nothing lists its servers. */
			if (gp->view) {
				for (uint32_t k = 0; k < gp->view->n; k++)
					gp->view->e[k].srv->in_use = 0;
				tlp_view_put(gp->view);
				gp->view = NULL;
				changed++;
			}
			continue;
		}
		for (uint32_t k = 0; k < pc->nservers; k++) {
			const struct tlp_endpoint *ep = &pc->servers[k].ep;
			struct tlp_host *h;

			if (ep->kind != TLP_EP_HOST || !(h = tlp_host_get(ep->host, ep->port)))
				continue;
			h->used = 1;
			if (pc->resolve_interval_ns < h->interval_ns)
				h->interval_ns = pc->resolve_interval_ns;
		}
		int r = tlp_pool_rebuild(gp);

		if (r > 0)
			changed++;
	}
	w->max_conns = cfg->max_conns;
	return changed;
}

void tlp_world_free(void)
{
	struct tlp_world *w = &tlp_w;

	for (uint32_t i = 0; i < w->ngp; i++) {
		if (w->gp[i]->view) {
			for (uint32_t k = 0; k < w->gp[i]->view->n; k++)
				w->gp[i]->view->e[k].srv->in_use = 0;
			tlp_view_put(w->gp[i]->view);
		}
		free(w->gp[i]->head);
		free(w->gp[i]);
	}
	for (uint32_t i = 0; i < w->nsrv; i++)
		free(w->srv[i]);
	for (uint32_t i = 0; i < w->ngl; i++)
		free(w->gl[i]);
	for (uint32_t i = 0; i < w->nhost; i++)
		free(w->host[i]);
	tlp_gen_put(atomic_load(&w->gen));
	memset(w, 0, sizeof *w);
}

/* ---- causes ---- */

const char *const tlp_cause_names[TLP_END_COUNT] = {
	[TLP_END_DONE] = "done",
	[TLP_END_CLIENT_RESET] = "client_reset",
	[TLP_END_SERVER_RESET] = "server_reset",
	[TLP_END_CLIENT_ERROR] = "client_error",
	[TLP_END_SERVER_ERROR] = "server_error",
	[TLP_END_IDLE] = "idle_timeout",
	[TLP_END_CLIENT_FIN] = "client_fin_timeout",
	[TLP_END_SERVER_FIN] = "server_fin_timeout",
	[TLP_END_CONNECT] = "connect_failed",
	[TLP_END_NO_SERVER] = "no_server",
	[TLP_END_QUEUE_FULL] = "queue_full",
	[TLP_END_QUEUE_TIMEOUT] = "queue_timeout",
	[TLP_END_DENIED] = "denied",
	[TLP_END_LIMIT] = "limit",
	[TLP_END_PROXY_BAD] = "proxy_header_bad",
	[TLP_END_SNI_BAD] = "sni_bad",
	[TLP_END_PEEK_TIMEOUT] = "peek_timeout",
	[TLP_END_NO_ROUTE] = "no_route",
	[TLP_END_BUSY] = "busy",
	[TLP_END_SHUTDOWN] = "shutdown",
	[TLP_END_TLS] = "tls_handshake",
	[TLP_END_SERVER_TLS] = "server_tls_handshake",
};
_Static_assert(sizeof tlp_cause_names / sizeof tlp_cause_names[0] == TLP_END_COUNT,
	       "a name per cause");

/* ---- passive failure detection (any shard) ---- */

void tlp_passive(struct tlp_srv *srv, const struct tlp_pool_cfg *pc, int ok, uint64_t now)
{
	uint32_t f;

	if (!srv || !pc || !pc->passive.enabled)
		return;
	if (ok) {
		if (atomic_load_explicit(&srv->fails, memory_order_relaxed))
			atomic_store_explicit(&srv->fails, 0, memory_order_relaxed);
		return;
	}
	f = atomic_fetch_add(&srv->fails, 1) + 1;
	if (f < pc->passive.failures)
		return;
	atomic_store(&srv->fails, 0);
	if (atomic_exchange(&srv->down_until, now + pc->passive.down_for_ns) == 0)
		tlp_log("server %s is down for %llu ms: %u failed connects or resets in a row "
			"(passive)",
			srv->name, (unsigned long long)(pc->passive.down_for_ns / 1000000), f);
	atomic_fetch_add(&srv->pool->state_ver, 1);
}
