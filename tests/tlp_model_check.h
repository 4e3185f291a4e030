/* tests/tlp_model_check.h: what every tlproxy config model that a load accepted must satisfy, for the fuzzers of the YAML and argv paths. */
#ifndef TLP_MODEL_CHECK_H
#define TLP_MODEL_CHECK_H

#include <arpa/inet.h>
#include <string.h>

#include "turnloop.h"

#include "config.h"

static int tlp_mc_name(const char *s)
{
	size_t n;

	if (!s)
		return 0;
	n = strlen(s);
	if (n < 1 || n > TLP_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

static int tlp_mc_ep(const struct tlp_endpoint *e, int allow_host)
{
	if (!e->text || !*e->text)
		return 0;
	switch (e->kind) {
	case TLP_EP_IP:
		if (e->port < 1)
			return 0;
		if (e->addr.sa.sa_family == AF_INET)
			return e->addr.in.sin_port == htons(e->port);
		if (e->addr.sa.sa_family == AF_INET6)
			return e->addr.in6.sin6_port == htons(e->port);
		return 0;
	case TLP_EP_UNIX:
		return e->addr.un.sun_family == AF_UNIX && e->addr.un.sun_path[0] &&
		       memchr(e->addr.un.sun_path, '\0', sizeof e->addr.un.sun_path);
	case TLP_EP_HOST:
		if (!allow_host || !e->host || e->port < 1)
			return 0;
		for (const char *p = e->host; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				return 0;
		return tlp_sni_host_check(e->host, strlen(e->host)) == 0;
	default:
		return 0;
	}
}

static int tlp_mc_dur(uint64_t ns, uint64_t lo_ns, uint64_t hi_ns)
{
	return ns >= lo_ns && ns <= hi_ns;
}

/* NULL if c is a model a load may give, else what is wrong with it. */
static const char *tlp_model_problem(const struct tlp_config *c)
{
	const uint64_t ms = 1000000ull, s = 1000 * ms, day = 86400 * s;
	uint64_t mask[16];

	if (!c || !c->arena)
		return "no model";
	if (c->shards > 1024 || (c->shards && c->cpus))
		return "shards";
	if (c->cpus && tl_cpulist_parse(c->cpus, mask, 16) != 0)
		return "cpus";
	if (c->max_conns > TLP_MAX_CONNS_LIMIT)
		return "max_conns";
	if (c->nlisteners < 1 || c->nlisteners > TLP_MAX_LISTENERS || !c->listeners)
		return "listener count";
	if (c->npools < 1 || c->npools > TLP_MAX_POOLS || !c->pools)
		return "pool count";
	for (uint32_t i = 0; i < c->npools; i++) {
		const struct tlp_pool_cfg *p = &c->pools[i];

		if (!tlp_mc_name(p->name))
			return "pool name";
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(c->pools[j].name, p->name))
				return "pool names repeat";
		if (p->balance < 0 || p->balance >= TLP_BAL_COUNT)
			return "balance";
		if (p->proxy_protocol < TLP_PP_SEND_NONE || p->proxy_protocol > TLP_PP_SEND_V2)
			return "proxy_protocol";
		if (p->retries > 10 || !tlp_mc_dur(p->resolve_interval_ns, s, day))
			return "retries or resolve_interval";
		if (p->health.timeout_ns > p->health.interval_ns ||
		    !tlp_mc_dur(p->health.interval_ns, 100 * ms, 3600 * s) ||
		    !tlp_mc_dur(p->health.timeout_ns, ms, 3600 * s) || p->health.rise < 1 ||
		    p->health.rise > 100 || p->health.fall < 1 || p->health.fall > 100 ||
		    p->health.send_len > TLP_HEALTH_DATA_MAX ||
		    p->health.expect_len > TLP_HEALTH_DATA_MAX ||
		    (!p->health.send && p->health.send_len) ||
		    (!p->health.expect && p->health.expect_len))
			return "health";
		if (p->passive.failures < 1 || p->passive.failures > 1000 ||
		    !tlp_mc_dur(p->passive.down_for_ns, s, 3600 * s))
			return "passive";
		if (p->nservers < 1 || p->nservers > TLP_MAX_SERVERS || !p->servers)
			return "server count";
		for (uint32_t k = 0; k < p->nservers; k++) {
			const struct tlp_server_cfg *sv = &p->servers[k];

			if (!tlp_mc_ep(&sv->ep, 1))
				return "server address";
			if (sv->weight < 1 || sv->weight > TLP_WEIGHT_MAX ||
			    sv->max_conns > TLP_MAX_CONNS_LIMIT)
				return "server weight or max_conns";
			for (uint32_t j = 0; j < k; j++)
				if (tlp_endpoint_same(&p->servers[j].ep, &sv->ep))
					return "server addresses repeat";
		}
	}
	for (uint32_t i = 0; i < c->nlisteners; i++) {
		const struct tlp_listener_cfg *l = &c->listeners[i];

		if (!tlp_mc_name(l->name))
			return "listener name";
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(c->listeners[j].name, l->name))
				return "listener names repeat";
		if (l->nlisten < 1 || l->nlisten > TLP_MAX_LISTEN || !l->listen)
			return "listen count";
		for (uint32_t k = 0; k < l->nlisten; k++) {
			if (!tlp_mc_ep(&l->listen[k], 0))
				return "listen address";
			for (uint32_t j = 0; j <= i; j++)
				for (uint32_t m = 0;
				     m < c->listeners[j].nlisten && (j < i || m < k); m++)
					if (tlp_endpoint_same(&c->listeners[j].listen[m],
							      &l->listen[k]))
						return "listen addresses repeat";
		}
		if (l->pool < -1 || l->pool >= (int32_t)c->npools)
			return "pool index";
		if (l->sni_default < -1 || l->sni_default >= (int32_t)c->npools)
			return "sni_default index";
		if (l->pool < 0 && l->nsni == 0)
			return "no route";
		if (l->nsni > TLP_MAX_SNI_RULES || (l->nsni && !l->sni))
			return "sni count";
		for (uint32_t k = 0; k < l->nsni; k++) {
			const struct tlp_sni_rule *r = &l->sni[k];

			if (!r->name || strlen(r->name) != r->len ||
			    tlp_sni_pattern_check(r->name, r->len) != 0 || r->target >= c->npools)
				return "sni rule";
			for (uint32_t j = 0; j < r->len; j++)
				if (r->name[j] >= 'A' && r->name[j] <= 'Z')
					return "sni rule not lowercased";
		}
		if (!tlp_mc_dur(l->sni_timeout_ns, ms, 600 * s) ||
		    !tlp_mc_dur(l->queue_timeout_ns, ms, 3600 * s) ||
		    !tlp_mc_dur(l->connect_timeout_ns, ms, 600 * s) ||
		    !tlp_mc_dur(l->idle_timeout_ns, 100 * ms, 30 * day) ||
		    !tlp_mc_dur(l->client_fin_ns, ms, day) ||
		    !tlp_mc_dur(l->server_fin_ns, ms, day))
			return "listener durations";
		if (l->queue_max > 1000000 || l->max_conns > TLP_MAX_CONNS_LIMIT)
			return "queue or max_conns";
		if ((l->socket.nodelay != 0 && l->socket.nodelay != 1) ||
		    (l->socket.keepalive != 0 && l->socket.keepalive != 1) ||
		    l->socket.ka_idle_s < 1 || l->socket.ka_idle_s > 32767 ||
		    l->socket.ka_interval_s < 1 || l->socket.ka_interval_s > 32767 ||
		    l->socket.ka_count < 1 || l->socket.ka_count > 127 ||
		    (l->socket.rcvbuf &&
		     (l->socket.rcvbuf < 1024 || l->socket.rcvbuf > (256u << 20))) ||
		    (l->socket.sndbuf &&
		     (l->socket.sndbuf < 1024 || l->socket.sndbuf > (256u << 20))))
			return "socket";
		if (l->splice != 0 && l->splice != 1)
			return "splice";
		if (tlp_netset_count(&l->allow) > 2 * TLP_MAX_CIDRS ||
		    tlp_netset_count(&l->deny) > 2 * TLP_MAX_CIDRS ||
		    tlp_netset_count(&l->proxy_from) > 2 * TLP_MAX_CIDRS)
			return "networks";
	}
	return NULL;
}

#endif /* TLP_MODEL_CHECK_H */
