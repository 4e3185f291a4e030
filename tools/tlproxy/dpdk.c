/* tools/tlproxy/dpdk.c: tlproxy on the DPDK driver (--dpdk): the option, the checks of the environment and the configuration against what the driver serves, and the driver settings made from the shard count. */
/* Calls: dpdk -> config. main calls in. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpdk.h"

static int dpdk_opt; /* --dpdk given */

void tlp_dpdk_args(int *argc, char **argv)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		if (argv[i] && !strcmp(argv[i], "--dpdk"))
			dpdk_opt = 1;
		else
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
}

const char *tlp_dpdk_usage(void)
{
	return "On a DPDK port (with either form above; docs/DPDK.md):\n"
	       "  --dpdk                   run the shards on the DPDK driver (as TL_DRIVER=dpdk),\n"
	       "                           the port set up by TL_DPDK and TL_DPDK_ADDR: UDP\n"
	       "                           listeners only; TCP, the admin socket and takeover\n"
	       "                           are refused at the start\n";
}

int tlp_dpdk_on(void)
{
	const char *d = getenv("TL_DRIVER");

	return dpdk_opt || (d && !strcmp(d, "dpdk"));
}

static int say(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* The port's addresses (TL_DPDK_ADDR, comma separated), parsed as the
 * driver parses them: IPv4 ones, IPv6 ones. -1 when unset or unreadable. */
struct port_addrs {
	struct in_addr v4[8];
	struct in6_addr v6[8];
	uint32_t n4, n6;
};

static int port_addrs(struct port_addrs *pa)
{
	const char *s = getenv("TL_DPDK_ADDR");

	memset(pa, 0, sizeof *pa);
	if (!s || !*s)
		return -1;
	while (*s) {
		const char *comma = strchr(s, ',');
		size_t l = comma ? (size_t)(comma - s) : strlen(s);
		char one[INET6_ADDRSTRLEN + 1];

		while (l && *s == ' ')
			s++, l--;
		while (l && s[l - 1] == ' ')
			l--;
		if (l && l < sizeof one) {
			memcpy(one, s, l);
			one[l] = '\0';
			if (pa->n4 < 8 && inet_pton(AF_INET, one, &pa->v4[pa->n4]) == 1)
				pa->n4++;
			else if (pa->n6 < 8 && inet_pton(AF_INET6, one, &pa->v6[pa->n6]) == 1)
				pa->n6++;
		}
		if (!comma)
			break;
		s = comma + 1;
	}
	return pa->n4 + pa->n6 ? 0 : -1;
}

static int is_v4mapped(const struct in6_addr *a)
{
	static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return !memcmp(a->s6_addr, pre, 12);
}

/* Can the port receive on listening endpoint ep: a wildcard (:: takes
 * both families, as on the driver), or one of its addresses? */
static int port_has(const struct port_addrs *pa, const struct tlp_endpoint *ep)
{
	struct in_addr v4;

	if (ep->addr.sa.sa_family == AF_INET) {
		v4 = ep->addr.in.sin_addr;
		if (v4.s_addr == htonl(INADDR_ANY))
			return 1;
	} else {
		const struct in6_addr *a = &ep->addr.in6.sin6_addr;

		if (IN6_IS_ADDR_UNSPECIFIED(a))
			return 1;
		if (!is_v4mapped(a)) {
			for (uint32_t i = 0; i < pa->n6; i++)
				if (!memcmp(&pa->v6[i], a, sizeof *a))
					return 1;
			return 0;
		}
		memcpy(&v4, &a->s6_addr[12], 4);
		if (v4.s_addr == htonl(INADDR_ANY))
			return 0; /* ::ffff:0.0.0.0: the driver serves it not */
	}
	for (uint32_t i = 0; i < pa->n4; i++)
		if (pa->v4[i].s_addr == v4.s_addr)
			return 1;
	return 0;
}

/* A server the port cannot reach: loopback or unspecified (the driver
 * sends only to neighbours on its link; the host's own stack is not one). */
static int unreachable(const struct tlp_endpoint *ep)
{
	if (ep->kind != TLP_EP_IP)
		return 0;
	if (ep->addr.sa.sa_family == AF_INET) {
		uint32_t a = ntohl(ep->addr.in.sin_addr.s_addr);

		return (a >> 24) == 127 || a == 0;
	}
	const struct in6_addr *a = &ep->addr.in6.sin6_addr;

	if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a))
		return 1;
	return is_v4mapped(a) && (a->s6_addr[12] == 127 || !memcmp(&a->s6_addr[12], "\0\0\0\0", 4));
}

int tlp_dpdk_check_config(const struct tlp_config *cfg, char *err, size_t errlen)
{
	struct port_addrs pa;
	int have = port_addrs(&pa) == 0;

	if (cfg->admin)
		return say(err, errlen,
			   "admin %s: not with --dpdk: the admin socket is a Unix-domain socket "
			   "on shard 0's loop, which the DPDK driver does not have",
			   cfg->admin);
	if (cfg->user)
		return say(err, errlen,
			   "user %s: not with --dpdk: the DPDK port is set up when the shards "
			   "start, after the switch, and needs the privileges it would drop",
			   cfg->user);
	for (uint32_t i = 0; i < cfg->nlisteners; i++) {
		const struct tlp_listener_cfg *l = &cfg->listeners[i];

		if (l->proto != TLP_PROTO_UDP)
			return say(err, errlen,
				   "listener %s: a TCP listener; --dpdk serves UDP listeners only "
				   "(the DPDK driver has no TCP)",
				   l->name);
		for (uint32_t k = 0; k < l->nlisten; k++)
			if (l->listen[k].kind == TLP_EP_IP && have && !port_has(&pa, &l->listen[k]))
				return say(err, errlen,
					   "listener %s: %s is not an address of the DPDK port "
					   "(TL_DPDK_ADDR=%s)",
					   l->name, l->listen[k].text ? l->listen[k].text : "?",
					   getenv("TL_DPDK_ADDR"));
	}
	for (uint32_t i = 0; i < cfg->npools; i++) {
		const struct tlp_pool_cfg *p = &cfg->pools[i];

		if (p->health.enabled && p->health.proto != TLP_PROTO_UDP)
			return say(err, errlen,
				   "pool %s: TCP health checks connect, which the DPDK driver cannot "
				   "(it has no TCP): use health proto: udp, or none",
				   p->name);
		for (uint32_t k = 0; k < p->nservers; k++) {
			const struct tlp_endpoint *ep = &p->servers[k].ep;

			if (ep->kind == TLP_EP_UNIX)
				return say(err, errlen,
					   "pool %s: server %s is a Unix-domain socket, which the "
					   "DPDK driver has not",
					   p->name, ep->text ? ep->text : "?");
			if (unreachable(ep))
				return say(err, errlen,
					   "pool %s: server %s cannot be reached through the DPDK "
					   "port (it reaches neighbours on its link, not this host's "
					   "own stack)",
					   p->name, ep->text ? ep->text : "?");
		}
	}
	return 0;
}

int tlp_dpdk_check_start(const struct tlp_config *cfg, const struct tlp_dpdk_proc *p, char *err,
			 size_t errlen)
{
	const char *drv = getenv("TL_DRIVER");
	struct port_addrs pa;

	if (drv && *drv && strcmp(drv, "dpdk"))
		return say(err, errlen, "--dpdk: TL_DRIVER=%s names another driver", drv);
	if (p->takeover)
		return say(err, errlen,
			   "--takeover: not with --dpdk: a takeover hands over kernel sockets "
			   "(the DPDK port belongs to one process)");
	if (p->handover)
		return say(err, errlen,
			   "--handover-socket: not with --dpdk: a takeover hands over kernel "
			   "sockets (the DPDK port belongs to one process)");
	if (p->inherited)
		return say(err, errlen,
			   "LISTEN_FDS: not with --dpdk: systemd's sockets are kernel sockets, "
			   "which the DPDK driver cannot adopt");
	if (!getenv("TL_DPDK"))
		return say(err, errlen,
			   "--dpdk: TL_DPDK is not set (the EAL's arguments; docs/DPDK.md)");
	if (port_addrs(&pa) < 0)
		return say(err, errlen,
			   "--dpdk: TL_DPDK_ADDR names no address (the port's IPv4 and IPv6 "
			   "addresses, comma separated; docs/DPDK.md)");
	return tlp_dpdk_check_config(cfg, err, errlen);
}

int tlp_dpdk_setup(uint32_t nshards, char *err, size_t errlen)
{
	const char *q = getenv("TL_DPDK_QUEUES");
	char n[16];

	if (q && *q) {
		char *end;
		unsigned long v = strtoul(q, &end, 10);

		if (*end || v != nshards)
			return say(err, errlen,
				   "--dpdk: TL_DPDK_QUEUES=%s, but %u shard%s: one queue pair per "
				   "shard (a pair no shard claims is never read)",
				   q, nshards, nshards == 1 ? "" : "s");
	} else {
		snprintf(n, sizeof n, "%u", nshards);
		if (setenv("TL_DPDK_QUEUES", n, 1) < 0)
			return say(err, errlen, "--dpdk: cannot set TL_DPDK_QUEUES");
	}
	if (setenv("TL_DRIVER", "dpdk", 1) < 0)
		return say(err, errlen, "--dpdk: cannot set TL_DRIVER");
	return 0;
}
