/* tools/tlproxy/config_schema.c: tlproxy's config, the schema: the tree checked key by key into the model, each section with its defaults and cross-checks (pools named by listeners and SNI routes). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "turnloop/plan.h"

#include "config_int.h"
#include "../reason.h"

/* ---- the schema ---- */

const char *const tlp__pp_names[] = {
	[TLP_PP_SEND_NONE] = "none", [TLP_PP_SEND_V1] = "v1", [TLP_PP_SEND_V2] = "v2"};

static const char *pp_name(int i)
{
	return tlp__pp_names[i];
}

void tlp__pool_defaults(struct tlp_pool_cfg *p)
{
	p->balance = TLP_BAL_ROUNDROBIN;
	p->proxy_protocol = TLP_PP_SEND_NONE;
	p->retries = 2;
	p->resolve_interval_ns = R_RESOLVE.dflt;
	p->health.interval_ns = R_HEALTH_INTERVAL.dflt;
	p->health.timeout_ns = R_HEALTH_TIMEOUT.dflt;
	p->health.rise = 2;
	p->health.fall = 3;
	p->passive.failures = 3;
	p->passive.down_for_ns = R_DOWN_FOR.dflt;
}

void tlp__listener_defaults(struct tlp_listener_cfg *l)
{
	l->pool = -1;
	l->sni_default = -1;
	l->sni_timeout_ns = R_SNI_TIMEOUT.dflt;
	l->queue_timeout_ns = R_QUEUE_TIMEOUT.dflt;
	l->connect_timeout_ns = R_CONNECT.dflt;
	l->idle_timeout_ns = R_IDLE.dflt;
	l->client_fin_ns = R_FIN.dflt;
	l->server_fin_ns = R_FIN.dflt;
	l->half_close = 1;
	l->tls.handshake_timeout_ns = R_TLS_HANDSHAKE.dflt;
	l->socket.nodelay = 1;
	l->socket.ka_idle_s = (uint32_t)(R_KA_IDLE.dflt / SEC);
	l->socket.ka_interval_s = (uint32_t)(R_KA_INTERVAL.dflt / SEC);
	l->socket.ka_count = 5;
	l->responses = TLP_RESPONSES_ANY;
	l->sessions = 4096;
	l->max_datagram = TLP_UDP_DGRAM_DFLT;
}

static const char *proto_name(int i);

static void parse_health(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_health_cfg *h)
{
	static const char *const keys[] = {"interval", "timeout", "rise", "fall", "send", "expect", "proto"};
	const struct ynode *v[7];
	char p[256];

	if (tlp__take(c, n, path, keys, 7, v))
		return;
	h->enabled = 1;
	if (v[6] && (PATH(p, "%s.proto", path), 1))
		tlp__get_enum(c, v[6], p, proto_name, 2, &h->proto);
	if (h->proto == TLP_PROTO_UDP && !v[4])
		tlp__errat(c, n->line, n->col, "%s: a UDP probe needs send (the datagram it sends)", path);
	if (v[0] && (PATH(p, "%s.interval", path), 1))
		tlp__get_dur(c, v[0], p, R_HEALTH_INTERVAL, &h->interval_ns);
	if (v[1] && (PATH(p, "%s.timeout", path), 1) &&
	    !tlp__get_dur(c, v[1], p, R_HEALTH_TIMEOUT, &h->timeout_ns) &&
	    h->timeout_ns > h->interval_ns) {
		char a[32], b[32];

		tlp__errat(c, v[1]->line, v[1]->col, "%s: %s is longer than the interval (%s)", p,
		      tlp__fmt_dur(h->timeout_ns, a, sizeof a), tlp__fmt_dur(h->interval_ns, b, sizeof b));
	}
	if (v[2] && (PATH(p, "%s.rise", path), 1))
		tlp__get_uint(c, v[2], p, 1, 100, &h->rise);
	if (v[3] && (PATH(p, "%s.fall", path), 1))
		tlp__get_uint(c, v[3], p, 1, 100, &h->fall);
	if (v[4] && (PATH(p, "%s.send", path), 1))
		tlp__get_text(c, v[4], p, TLP_HEALTH_DATA_MAX, 1, &h->send, &h->send_len);
	if (v[5] && (PATH(p, "%s.expect", path), 1))
		tlp__get_text(c, v[5], p, TLP_HEALTH_DATA_MAX, 1, &h->expect, &h->expect_len);
}

static void parse_passive(struct ctx *c, const struct ynode *n, const char *path,
			  struct tlp_passive_cfg *ps)
{
	static const char *const keys[] = {"failures", "down_for"};
	const struct ynode *v[2];
	char p[256];

	if (tlp__take(c, n, path, keys, 2, v))
		return;
	ps->enabled = 1;
	if (v[0] && (PATH(p, "%s.failures", path), 1))
		tlp__get_uint(c, v[0], p, 1, 1000, &ps->failures);
	if (v[1] && (PATH(p, "%s.down_for", path), 1))
		tlp__get_dur(c, v[1], p, R_DOWN_FOR, &ps->down_for_ns);
}

static void parse_servers(struct ctx *c, const struct ynode *n, const char *path,
			  struct tlp_pool_cfg *pool)
{
	static const char *const keys[] = {"address", "weight", "max_conns"};
	const struct ynode **addr_node;
	uint32_t k = 0;

	if (tlp__is_list(c, n, path))
		return;
	if (n->count == 0) {
		tlp__errat(c, n->line, n->col, "%s: needs at least one server", path);
		return;
	}
	if (n->count > TLP_MAX_SERVERS) {
		tlp__errat(c, n->line, n->col, "%s: more than %d servers", path, TLP_MAX_SERVERS);
		return;
	}
	pool->servers = tlp__zalloc(c, c->model, n->count * sizeof *pool->servers);
	addr_node = tlp__zalloc(c, c->tree, n->count * sizeof *addr_node);
	if (!pool->servers || !addr_node)
		return;
	for (const struct ynode *it = n->child; it; it = it->next, k++) {
		struct tlp_server_cfg *s = &pool->servers[k];
		const struct ynode *v[3];
		char p[256], q[300];

		PATH(p, "%s[%u]", path, k);
		s->weight = 1;
		if (tlp__take(c, it, p, keys, 3, v))
			continue;
		if (!v[0]) {
			tlp__errat(c, it->line, it->col, "%s: address is required", p);
		} else if ((PATH(q, "%s.address", p), 1) && !tlp__get_ep(c, v[0], q, 1, &s->ep)) {
			s->id = tlp__ep_id(&s->ep);
			addr_node[k] = v[0];
			for (uint32_t j = 0; j < k; j++)
				if (addr_node[j] &&
				    tlp_endpoint_same(&pool->servers[j].ep, &s->ep)) {
					tlp__errat(c, v[0]->line, v[0]->col,
					      "%s: the same address as %s[%u] (line %u)", q, path,
					      j, addr_node[j]->line);
					break;
				}
		}
		if (v[1]) {
			PATH(q, "%s.weight", p);
			tlp__get_uint(c, v[1], q, 1, TLP_WEIGHT_MAX, &s->weight);
		}
		if (v[2] && (PATH(q, "%s.max_conns", p), 1))
			tlp__get_uint(c, v[2], q, 1, TLP_MAX_CONNS_LIMIT, &s->max_conns);
	}
	pool->nservers = n->count;
}

static void parse_pool(struct ctx *c, const struct ynode *n, const char *path,
		       struct tlp_pool_cfg *pool, const struct ynode **name_node)
{
	static const char *const keys[] = {"name",   "balance", "proxy_protocol", "retries",
					   "resolve_interval", "health", "passive", "servers", "tls"};
	const struct ynode *v[9];
	char p[256];

	tlp__pool_defaults(pool);
	*name_node = n;
	if (tlp__take(c, n, path, keys, 9, v))
		return;
	if (v[8] && (PATH(p, "%s.tls", path), 1))
		tlp__parse_pool_tls(c, v[8], p, &pool->tls);
	if (v[0])
		*name_node = v[0];
	if (!v[0])
		tlp__errat(c, n->line, n->col, "%s: name is required", path);
	else if ((PATH(p, "%s.name", path), 1))
		tlp__get_name(c, v[0], p, &pool->name);
	if (v[1] && (PATH(p, "%s.balance", path), 1))
		tlp__get_enum(c, v[1], p, tlp_bal_name, TLP_BAL_COUNT, &pool->balance);
	if (v[2] && (PATH(p, "%s.proxy_protocol", path), 1))
		tlp__get_enum(c, v[2], p, pp_name, 3, &pool->proxy_protocol);
	if (v[3] && (PATH(p, "%s.retries", path), 1))
		tlp__get_uint(c, v[3], p, 0, TLP_RETRIES_MAX, &pool->retries);
	if (v[4] && (PATH(p, "%s.resolve_interval", path), 1))
		tlp__get_dur(c, v[4], p, R_RESOLVE, &pool->resolve_interval_ns);
	if (v[5] && (PATH(p, "%s.health", path), 1))
		parse_health(c, v[5], p, &pool->health);
	if (v[6] && (PATH(p, "%s.passive", path), 1))
		parse_passive(c, v[6], p, &pool->passive);
	if (!v[7])
		tlp__errat(c, n->line, n->col, "%s: servers is required", path);
	else if ((PATH(p, "%s.servers", path), 1))
		parse_servers(c, v[7], p, pool);
}

/* The index of the pool named by n, or -1 (reported). */
static int32_t pool_ref(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
			const char *path)
{
	char b[SHOW + 4];

	if (tlp__scalar(c, n, path))
		return -1;
	for (uint32_t i = 0; i < cfg->npools; i++)
		if (cfg->pools[i].name && strlen(cfg->pools[i].name) == n->len &&
		    !memcmp(cfg->pools[i].name, n->s, n->len))
			return (int32_t)i;
	tlp__errat(c, n->line, n->col, "%s: no pool named '%s'", path, tlp__shown(n, b, sizeof b));
	return -1;
}

static void parse_sni(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
		      const char *path, struct tlp_listener_cfg *l)
{
	static const char *const keys[] = {"name", "pool"};
	const struct ynode **name_node;
	uint32_t k = 0;

	if (tlp__is_list(c, n, path))
		return;
	if (n->count > TLP_MAX_SNI_RULES) {
		tlp__errat(c, n->line, n->col, "%s: more than %d rules", path, TLP_MAX_SNI_RULES);
		return;
	}
	l->sni = tlp__zalloc(c, c->model, (n->count ? n->count : 1) * sizeof *l->sni);
	name_node = tlp__zalloc(c, c->tree, (n->count ? n->count : 1) * sizeof *name_node);
	if (!l->sni || !name_node)
		return;
	for (const struct ynode *it = n->child; it; it = it->next, k++) {
		struct tlp_sni_rule *r = &l->sni[k];
		const struct ynode *v[2];
		char p[256], q[300], b[SHOW + 4];

		PATH(p, "%s[%u]", path, k);
		r->target = UINT32_MAX;
		if (tlp__take(c, it, p, keys, 2, v))
			continue;
		if (!v[0]) {
			tlp__errat(c, it->line, it->col, "%s: name is required", p);
		} else if (!tlp__scalar(c, v[0], (PATH(q, "%s.name", p), q))) {
			if (tlp_sni_pattern_check(v[0]->s, v[0]->len) < 0) {
				tlp__errat(c, v[0]->line, v[0]->col,
				      "%s: '%s' is neither a host name nor *.host.name", q,
				      tlp__shown(v[0], b, sizeof b));
			} else {
				char *lc = tlp__zalloc(c, c->model, v[0]->len + 1);

				if (!lc)
					return;
				for (size_t i = 0; i < v[0]->len; i++) {
					char ch = v[0]->s[i];

					lc[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a')
								       : ch;
				}
				r->name = lc;
				r->len = (uint32_t)v[0]->len;
				name_node[k] = v[0];
				for (uint32_t j = 0; j < k; j++)
					if (l->sni[j].name && l->sni[j].len == r->len &&
					    !memcmp(l->sni[j].name, lc, r->len)) {
						tlp__errat(c, v[0]->line, v[0]->col,
						      "%s: '%s' is already a rule (line %u): this one "
						      "would never match",
						      q, lc, name_node[j]->line);
						break;
					}
			}
		}
		if (!v[1]) {
			tlp__errat(c, it->line, it->col, "%s: pool is required", p);
		} else {
			int32_t pi = pool_ref(c, cfg, v[1], (PATH(q, "%s.pool", p), q));

			if (pi >= 0)
				r->target = (uint32_t)pi;
		}
	}
	l->nsni = n->count;
}

static void parse_socket(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_socket_cfg *s)
{
	static const char *const keys[] = {"nodelay", "keepalive", "rcvbuf", "sndbuf"};
	static const char *const ka_keys[] = {"idle", "interval", "count"};
	const struct ynode *v[4], *kv[3];
	char p[256], q[300];

	if (tlp__take(c, n, path, keys, 4, v))
		return;
	if (v[0] && (PATH(p, "%s.nodelay", path), 1))
		tlp__get_bool(c, v[0], p, &s->nodelay);
	if (v[1]) {
		PATH(p, "%s.keepalive", path);
		if (v[1]->kind == YN_SCALAR) {
			tlp__get_bool(c, v[1], p, &s->keepalive);
		} else if (!tlp__take(c, v[1], p, ka_keys, 3, kv)) {
			s->keepalive = 1;
			if (kv[0] && (PATH(q, "%s.idle", p), 1))
				tlp__get_secs(c, kv[0], q, R_KA_IDLE, &s->ka_idle_s);
			if (kv[1] && (PATH(q, "%s.interval", p), 1))
				tlp__get_secs(c, kv[1], q, R_KA_INTERVAL, &s->ka_interval_s);
			if (kv[2] && (PATH(q, "%s.count", p), 1))
				tlp__get_uint(c, kv[2], q, 1, 127, &s->ka_count);
		}
	}
	if (v[2] && (PATH(p, "%s.rcvbuf", path), 1))
		tlp__get_size(c, v[2], p, 1u << 10, 256u << 20, &s->rcvbuf);
	if (v[3] && (PATH(p, "%s.sndbuf", path), 1))
		tlp__get_size(c, v[3], p, 1u << 10, 256u << 20, &s->sndbuf);
}

/* Every listen address seen so far, to refuse one used twice. */
struct seen_ep {
	const struct tlp_endpoint *ep;
	const struct ynode *node;
};

static const char *proto_name(int i)
{
	return i == TLP_PROTO_UDP ? "udp" : "tcp";
}

/* Was key k given in mapping m? */
static int has_key(const struct ynode *m, const char *k)
{
	for (const struct ynode *it = m && m->kind == YN_MAP ? m->child : NULL; it && it->next;
	     it = it->next->next)
		if (it->s && !strcmp(it->s, k))
			return 1;
	return 0;
}

/* A listener's proto, responses, sessions and max_datagram; what a UDP
 * listener cannot have (Unix addresses, PROXY headers, SNI, queues,
 * splicing) is refused. v is parse_listener's keys, by its enum (the
 * TCP-only ones named below). */
static void parse_udp(struct ctx *c, const struct ynode *n, const char *path,
		      const struct ynode *proto, const struct ynode *resp, const struct ynode *sess,
		      const struct ynode *dgmax, const struct ynode *const *v,
		      struct tlp_listener_cfg *l)
{
	static const struct { int key; const char *name; } tcp_only[] = {
		{6, "proxy_protocol_from"}, {7, "sni"}, {10, "queue"}, {12, "socket"},
		{13, "splice"}, {14, "half_close"}, {15, "tls"}};
	char p[256];

	if (proto && (PATH(p, "%s.proto", path), 1))
		tlp__get_enum(c, proto, p, proto_name, 2, &l->proto);
	if (l->proto != TLP_PROTO_UDP) {
		const struct ynode *u = resp ? resp : sess ? sess : dgmax;

		if (u)
			tlp__errat(c, u->line, u->col, "%s: %s is for proto: udp", path,
				   resp ? "responses" : sess ? "sessions" : "max_datagram");
		return;
	}
	if (resp && (PATH(p, "%s.responses", path), 1))
		tlp__get_uint(c, resp, p, 0, 1000000, &l->responses);
	if (sess && (PATH(p, "%s.sessions", path), 1))
		tlp__get_uint(c, sess, p, 1, TLP_UDP_SESSIONS_MAX, &l->sessions);
	if (dgmax && (PATH(p, "%s.max_datagram", path), 1))
		tlp__get_uint(c, dgmax, p, 1, TLP_UDP_DGRAM_MAX, &l->max_datagram);
	if (l->max_datagram > TLP_UDP_DGRAM_DFLT &&
	    (uint64_t)l->max_datagram * l->sessions > TLP_UDP_JUMBO_BYTES_MAX)
		tlp__errat(c, (dgmax ? dgmax : n)->line, (dgmax ? dgmax : n)->col,
			   "%s: max_datagram %u x sessions %u is over 1 GiB of buffers per shard: "
			   "lower sessions", path, l->max_datagram, l->sessions);
	for (uint32_t k = 0; k < sizeof tcp_only / sizeof tcp_only[0]; k++)
		if (v[tcp_only[k].key])
			tlp__errat(c, v[tcp_only[k].key]->line, v[tcp_only[k].key]->col,
				   "%s: %s is not for proto: udp", path, tcp_only[k].name);
	for (uint32_t k = 0; k < l->nlisten; k++)
		if (l->listen[k].kind != TLP_EP_IP)
			tlp__errat(c, n->line, n->col, "%s.listen[%u]: proto: udp takes IP addresses",
				   path, k);
	if (!v[11] || !has_key(v[11], "idle"))
		l->idle_timeout_ns = UDP_IDLE_DFLT;
}

static void parse_listener(struct ctx *c, const struct tlp_config *cfg, const struct ynode *n,
			   const char *path, struct tlp_listener_cfg *l, struct seen_ep *seen,
			   uint32_t *nseen, const struct ynode **name_node)
{
	static const char *const keys[] = {"name", "listen", "pool", "max_conns", "allow", "deny",
					   "proxy_protocol_from", "sni", "sni_default",
					   "sni_timeout", "queue", "timeouts", "socket", "splice",
					   "half_close", "tls",
					   "proto", "responses", "sessions", "max_datagram"};
	enum { NAME, LISTEN, POOL, MAXC, ALLOW, DENY, PPFROM, SNI, SNIDEF, SNITO, QUEUE, TIMEOUTS,
	       SOCKET, SPLICE, HALFC, TLS,
	       PROTO, RESP, SESS, DGMAX, NKEYS };
	const struct ynode *v[NKEYS];
	char p[256];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	tlp__listener_defaults(l);
	*name_node = n;
	if (tlp__take(c, n, path, keys, NKEYS, v))
		return;
	if (v[NAME])
		*name_node = v[NAME];
	if (!v[NAME])
		tlp__errat(c, n->line, n->col, "%s: name is required", path);
	else if ((PATH(p, "%s.name", path), 1))
		tlp__get_name(c, v[NAME], p, &l->name);
	if (!v[LISTEN]) {
		tlp__errat(c, n->line, n->col, "%s: listen is required", path);
	} else {
		uint32_t count = tlp__item_count(v[LISTEN]), k = 0;

		PATH(p, "%s.listen", path);
		if (v[LISTEN]->kind == YN_MAP) {
			tlp__errat(c, v[LISTEN]->line, v[LISTEN]->col,
			      "%s: expected a list of addresses", p);
		} else if (count == 0) {
			tlp__errat(c, v[LISTEN]->line, v[LISTEN]->col, "%s: needs at least one address",
			      p);
		} else if (count > TLP_MAX_LISTEN) {
			tlp__errat(c, v[LISTEN]->line, v[LISTEN]->col, "%s: more than %d addresses", p,
			      TLP_MAX_LISTEN);
		} else if ((l->listen = tlp__zalloc(c, c->model, count * sizeof *l->listen))) {
			for (const struct ynode *it = tlp__first_item(v[LISTEN]); it;
			     it = tlp__next_item(v[LISTEN], it), k++) {
				char q[300];

				PATH(q, "%s[%u]", p, k);
				if (tlp__get_ep(c, it, q, 0, &l->listen[k]))
					continue;
				for (uint32_t j = 0; j < *nseen; j++)
					if (tlp_endpoint_same(seen[j].ep, &l->listen[k])) {
						char b[SHOW + 4];

						tlp__errat(c, it->line, it->col,
						      "%s: %s is already listened on (line %u)", q,
						      tlp__shown(it, b, sizeof b), seen[j].node->line);
						break;
					}
				seen[*nseen].ep = &l->listen[k];
				seen[*nseen].node = it;
				(*nseen)++;
			}
			l->nlisten = count;
		}
	}
	if (v[POOL] && (PATH(p, "%s.pool", path), 1))
		l->pool = pool_ref(c, cfg, v[POOL], p);
	if (v[MAXC] && (PATH(p, "%s.max_conns", path), 1))
		tlp__get_uint(c, v[MAXC], p, 1, TLP_MAX_CONNS_LIMIT, &l->max_conns);
	if (v[ALLOW] && (PATH(p, "%s.allow", path), 1))
		tlp__get_nets(c, v[ALLOW], p, &l->allow);
	if (v[DENY] && (PATH(p, "%s.deny", path), 1))
		tlp__get_nets(c, v[DENY], p, &l->deny);
	if (v[PPFROM] && (PATH(p, "%s.proxy_protocol_from", path), 1))
		tlp__get_nets(c, v[PPFROM], p, &l->proxy_from);
	if (v[SNI] && (PATH(p, "%s.sni", path), 1))
		parse_sni(c, cfg, v[SNI], p, l);
	if (v[SNIDEF]) {
		PATH(p, "%s.sni_default", path);
		if (!v[SNI])
			tlp__errat(c, v[SNIDEF]->line, v[SNIDEF]->col,
			      "%s: there are no sni rules for it to be the default of", p);
		else
			l->sni_default = pool_ref(c, cfg, v[SNIDEF], p);
	}
	if (v[SNITO]) {
		PATH(p, "%s.sni_timeout", path);
		if (!v[SNI])
			tlp__errat(c, v[SNITO]->line, v[SNITO]->col,
			      "%s: there are no sni rules: nothing waits for a ClientHello", p);
		else
			tlp__get_dur(c, v[SNITO], p, R_SNI_TIMEOUT, &l->sni_timeout_ns);
	}
	if (v[QUEUE]) {
		static const char *const qk[] = {"max", "timeout"};
		const struct ynode *qv[2];
		char q[300];

		PATH(p, "%s.queue", path);
		if (!tlp__take(c, v[QUEUE], p, qk, 2, qv)) {
			if (qv[0] && (PATH(q, "%s.max", p), 1))
				tlp__get_uint(c, qv[0], q, 0, 1000000, &l->queue_max);
			if (qv[1] && (PATH(q, "%s.timeout", p), 1))
				tlp__get_dur(c, qv[1], q, R_QUEUE_TIMEOUT, &l->queue_timeout_ns);
		}
	}
	if (v[TIMEOUTS]) {
		static const char *const tk[] = {"connect", "idle", "client_fin", "server_fin"};
		const struct ynode *tv[4];
		char q[300];

		PATH(p, "%s.timeouts", path);
		if (!tlp__take(c, v[TIMEOUTS], p, tk, 4, tv)) {
			if (tv[0] && (PATH(q, "%s.connect", p), 1))
				tlp__get_dur(c, tv[0], q, R_CONNECT, &l->connect_timeout_ns);
			if (tv[1] && (PATH(q, "%s.idle", p), 1))
				tlp__get_dur(c, tv[1], q, R_IDLE, &l->idle_timeout_ns);
			if (tv[2] && (PATH(q, "%s.client_fin", p), 1))
				tlp__get_dur(c, tv[2], q, R_FIN, &l->client_fin_ns);
			if (tv[3] && (PATH(q, "%s.server_fin", p), 1))
				tlp__get_dur(c, tv[3], q, R_FIN, &l->server_fin_ns);
		}
	}
	if (v[SOCKET] && (PATH(p, "%s.socket", path), 1))
		parse_socket(c, v[SOCKET], p, &l->socket);
	if (v[SPLICE] && (PATH(p, "%s.splice", path), 1))
		tlp__get_bool(c, v[SPLICE], p, &l->splice);
	if (v[HALFC] && (PATH(p, "%s.half_close", path), 1))
		tlp__get_bool(c, v[HALFC], p, &l->half_close);
	if (v[TLS] && (PATH(p, "%s.tls", path), 1)) {
		tlp__parse_tls(c, v[TLS], p, &l->tls);
		tlp__check_tls(c, v[TLS], p, l);
	}
	if (!v[POOL] && !v[SNI])
		tlp__errat(c, n->line, n->col, "%s: needs a pool (or sni rules) to send connections to",
		      path);
	_Static_assert(PPFROM == 6 && SNI == 7 && QUEUE == 10 && TIMEOUTS == 11 && SOCKET == 12 &&
		       SPLICE == 13 && HALFC == 14, "the key numbers parse_udp names");
	parse_udp(c, n, path, v[PROTO], v[RESP], v[SESS], v[DGMAX], v, l);
}

void tlp__parse_top(struct ctx *c, const struct ynode *root, struct tlp_config *cfg)
{
	static const char *const keys[] = {"shards",     "cpus",         "user",
					   "admin",      "access_log",   "max_conns",
					   "listeners",  "pools",        "splice_pipes",
					   "splice_pipe_size", "admin_timeout", "drain_timeout",
					   "spin_us",    "nap_us"};
	enum { SHARDS, CPUS, USER, ADMIN, LOG, MAXC, LISTENERS, POOLS, SPIPES, SPSIZE, ADMINTO,
	       DRAINTO, SPIN, NAP, NKEYS };
	const struct ynode *v[NKEYS];
	char p[64];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	if (root->kind != YN_MAP) {
		if (root->kind != YN_ALIAS)
			tlp__errat(c, root->line, root->col,
			      "the config must be a mapping of keys (listeners:, pools:, ...)");
		return;
	}
	if (tlp__take(c, root, "", keys, NKEYS, v))
		return;
	if (v[SHARDS])
		tlp__get_uint(c, v[SHARDS], "shards", 1, 1024, &cfg->shards);
	if (v[CPUS] && !tlp__get_text(c, v[CPUS], "cpus", 4096, 0, &cfg->cpus, NULL)) {
		uint64_t mask[16];

		if (tl_cpulist_parse(cfg->cpus, mask, 16) < 0) {
			char b[SHOW + 4];

			tlp__errat(c, v[CPUS]->line, v[CPUS]->col,
			      "cpus: '%s' is not a CPU list below 1024 (like 0-3,6)",
			      tlp__shown(v[CPUS], b, sizeof b));
		}
		if (v[SHARDS])
			tlp__errat(c, v[CPUS]->line, v[CPUS]->col,
			      "cpus: give shards or cpus, not both (cpus sets the count too)");
	}
	if (v[USER] && !tlp__scalar(c, v[USER], "user")) {
		char b[SHOW + 4];

		if (!tlp__name_ok(v[USER]->s, v[USER]->len) || v[USER]->len > 32)
			tlp__errat(c, v[USER]->line, v[USER]->col,
			      "user: '%s' is not a user name (1 to 32 letters, digits, '_', '-', '.')",
			      tlp__shown(v[USER], b, sizeof b));
		else
			tlp__get_text(c, v[USER], "user", 32, 0, &cfg->user, NULL);
	}
	if (v[ADMIN])
		tlp__get_text(c, v[ADMIN], "admin", sizeof(((struct sockaddr_un *)0)->sun_path) - 1, 0,
			 &cfg->admin, NULL);
	if (v[ADMINTO]) {
		if (!v[ADMIN])
			tlp__errat(c, v[ADMINTO]->line, v[ADMINTO]->col,
			      "admin_timeout: there is no admin socket for it to apply to");
		else
			tlp__get_dur(c, v[ADMINTO], "admin_timeout", R_ADMIN_TIMEOUT,
				&cfg->admin_timeout_ns);
	}
	if (v[DRAINTO])
		tlp__get_dur(c, v[DRAINTO], "drain_timeout", R_DRAIN, &cfg->drain_timeout_ns);
	if (v[SPIN])
		tlp__get_uint(c, v[SPIN], "spin_us", 0, TLP_SPIN_US_MAX, &cfg->spin_us);
	if (v[NAP]) {
		tlp__get_uint(c, v[NAP], "nap_us", 0, TLP_NAP_US_MAX, &cfg->nap_us);
		cfg->nap_given = 1;
	}
	if (v[LOG])
		tlp__get_text(c, v[LOG], "access_log", 4095, 0, &cfg->access_log, NULL);
	if (v[MAXC])
		tlp__get_uint(c, v[MAXC], "max_conns", 1, TLP_MAX_CONNS_LIMIT, &cfg->max_conns);
	if (v[SPIPES])
		tlp__get_uint(c, v[SPIPES], "splice_pipes", 1, 4096, &cfg->splice_pipes);
	if (v[SPSIZE] && !tlp__get_size(c, v[SPSIZE], "splice_pipe_size", 4u << 10, 1u << 20,
				   &cfg->splice_pipe_size) &&
	    (cfg->splice_pipe_size & (cfg->splice_pipe_size - 1)))
		tlp__errat(c, v[SPSIZE]->line, v[SPSIZE]->col,
		      "splice_pipe_size: %u is not a power of two (4k, 8k, ... 1m)",
		      cfg->splice_pipe_size);

	/* Pools first: listeners name them. */
	if (!v[POOLS]) {
		tlp__errat(c, root->line, root->col, "pools: at least one pool is required");
	} else if (!tlp__is_list(c, v[POOLS], "pools")) {
		const struct ynode *pn = v[POOLS];
		const struct ynode **name_node;
		uint32_t k = 0;

		if (pn->count == 0 || pn->count > TLP_MAX_POOLS) {
			tlp__errat(c, pn->line, pn->col, "pools: needs 1 to %d pools", TLP_MAX_POOLS);
		} else if ((cfg->pools = tlp__zalloc(c, c->model, pn->count * sizeof *cfg->pools)) &&
			   (name_node = tlp__zalloc(c, c->tree, pn->count * sizeof *name_node))) {
			cfg->npools = pn->count;
			for (const struct ynode *it = pn->child; it; it = it->next, k++) {
				PATH(p, "pools[%u]", k);
				parse_pool(c, it, p, &cfg->pools[k], &name_node[k]);
				if (!cfg->pools[k].name)
					continue;
				for (uint32_t j = 0; j < k; j++)
					if (cfg->pools[j].name &&
					    !strcmp(cfg->pools[j].name, cfg->pools[k].name)) {
						tlp__errat(c, name_node[k]->line, name_node[k]->col,
						      "pools[%u].name: '%s' is already the name of pools[%u] "
						      "(line %u)",
						      k, cfg->pools[k].name, j, name_node[j]->line);
						/* References find the first one. */
						cfg->pools[k].name = NULL;
						break;
					}
			}
		}
	}
	if (!v[LISTENERS]) {
		tlp__errat(c, root->line, root->col, "listeners: at least one listener is required");
	} else if (!tlp__is_list(c, v[LISTENERS], "listeners")) {
		const struct ynode *ln = v[LISTENERS], *name_node = NULL;
		struct seen_ep *seen;
		uint32_t k = 0, nseen = 0;

		if (ln->count == 0 || ln->count > TLP_MAX_LISTENERS) {
			tlp__errat(c, ln->line, ln->col, "listeners: needs 1 to %d listeners",
			      TLP_MAX_LISTENERS);
		} else if ((cfg->listeners =
				    tlp__zalloc(c, c->model, ln->count * sizeof *cfg->listeners)) &&
			   (seen = tlp__zalloc(c, c->tree,
					  (size_t)ln->count * TLP_MAX_LISTEN * sizeof *seen))) {
			cfg->nlisteners = ln->count;
			for (const struct ynode *it = ln->child; it; it = it->next, k++) {
				PATH(p, "listeners[%u]", k);
				parse_listener(c, cfg, it, p, &cfg->listeners[k], seen, &nseen,
					       &name_node);
				for (uint32_t j = 0; j < k; j++)
					if (cfg->listeners[k].name && cfg->listeners[j].name &&
					    !strcmp(cfg->listeners[j].name,
						    cfg->listeners[k].name)) {
						tlp__errat(c, name_node->line, name_node->col,
						      "listeners[%u].name: '%s' is already the name of "
						      "listeners[%u]",
						      k, cfg->listeners[k].name, j);
						break;
					}
			}
		}
	}
}

/* A file name for messages, which are one line each whatever the file is
 * called: unprintable bytes as '?', cut to cap - 1. */
