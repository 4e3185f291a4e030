/* tests/test_tlp_config.c: CUnit tests of tlproxy's config (tools/tlproxy/config.c): the YAML schema into the model, every kind of error with its line, column and key, and the command-line builder. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "tlp_test.h"

static const char *srcdir = ".";

#define MSEC 1000000ull
#define SECS (1000 * MSEC)

static int parse(const char *yaml, struct tlp_config **c, struct tlp_diag *d)
{
	return tlp_config_parse(yaml, strlen(yaml), "t.yaml", c, d);
}

static void dump(const struct tlp_diag *d)
{
	for (uint32_t i = 0; i < d->count; i++)
		fprintf(stderr, "    [%u] %s\n", i, d->e[i].text);
}

/* Some error line starts with prefix (file:line:col: key) and contains sub. */
static int has_error(const struct tlp_diag *d, const char *prefix, const char *sub)
{
	for (uint32_t i = 0; i < d->count; i++)
		if (!strncmp(d->e[i].text, prefix, strlen(prefix)) && strstr(d->e[i].text, sub))
			return 1;
	return 0;
}

/* The config is refused with exactly one error, at prefix, saying sub. */
static void one_error(const char *yaml, const char *prefix, const char *sub)
{
	struct tlp_config *c = (void *)1;
	static struct tlp_diag d;
	int r = parse(yaml, &c, &d);

	T_EQ(r, -EINVAL);
	T_TRUE(c == NULL, "model left behind");
	T_TRUE(d.count == 1 && d.total == 1 && has_error(&d, prefix, sub),
	       "want one error \"%s...%s\", got %u:", prefix, sub, d.count);
	if (!(d.count == 1 && has_error(&d, prefix, sub)))
		dump(&d);
	if (r == 0)
		tlp_config_free(c);
}

/* A listener whose extra keys start on line 5 (col 5), and one pool p. */
#define LST(extra)                                                                                 \
	"listeners:\n  - name: l\n    listen: \"127.0.0.1:80\"\n    pool: p\n" extra               \
	"pools:\n  - name: p\n    servers: [{address: \"127.0.0.1:9000\"}]\n"
/* The same with extra pool keys from line 8 (col 5). */
#define POOL(extra)                                                                                \
	"listeners:\n  - name: l\n    listen: \"127.0.0.1:80\"\n    pool: p\n"                     \
	"pools:\n  - name: p\n    servers: [{address: \"127.0.0.1:9000\"}]\n" extra

static void test_full(void)
{
	char path[512], a[INET6_ADDRSTRLEN];
	struct tlp_config *c = NULL;
	static struct tlp_diag d;
	int r;

	snprintf(path, sizeof path, "%s/tlproxy/full.yaml", srcdir);
	r = tlp_config_load(path, &c, &d);
	T_EQ(r, 0);
	if (r) {
		dump(&d);
		return;
	}
	T_EQ(d.count, 0);
	T_EQ(c->shards, 2);
	T_TRUE(c->cpus == NULL, "cpus");
	T_STR(c->user, "nobody");
	T_STR(c->admin, "/run/tlproxy.sock");
	T_EQ(c->admin_timeout_ns, 60 * SECS);
	T_STR(c->access_log, "/var/log/tlproxy/access.log");
	T_EQ(c->max_conns, 100000);
	T_EQ(c->splice_pipes, 64);
	T_EQ(c->splice_pipe_size, 1u << 20);
	T_EQ(c->nap_us, 100);
	T_EQ(c->nap_given, 1);
	T_EQ(c->nlisteners, 2);
	T_EQ(c->npools, 4);
	if (c->nlisteners != 2 || c->npools != 4)
		goto out;

	const struct tlp_listener_cfg *l = &c->listeners[0];

	T_STR(l->name, "web");
	T_EQ(l->nlisten, 3);
	T_EQ(l->listen[0].kind, TLP_EP_IP);
	T_EQ(l->listen[0].addr.sa.sa_family, AF_INET);
	T_STR(inet_ntop(AF_INET, &l->listen[0].addr.in.sin_addr, a, sizeof a), "127.0.0.1");
	T_EQ(ntohs(l->listen[0].addr.in.sin_port), 8080);
	T_STR(l->listen[0].text, "127.0.0.1:8080");
	T_EQ(l->listen[1].addr.sa.sa_family, AF_INET6);
	T_EQ(ntohs(l->listen[1].addr.in6.sin6_port), 8080);
	T_EQ(l->listen[2].kind, TLP_EP_UNIX);
	T_STR(l->listen[2].addr.un.sun_path, "/run/web.sock");
	T_EQ(l->pool, 0);
	T_EQ(l->max_conns, 10000);
	T_EQ(l->allow.n4, 1);
	T_EQ(l->allow.n6, 1);
	T_EQ(tlp_netset_count(&l->deny), 1);
	T_EQ(tlp_netset_count(&l->proxy_from), 1);
	{
		struct sockaddr_in p = {.sin_family = AF_INET};

		inet_pton(AF_INET, "10.1.2.3", &p.sin_addr);
		T_EQ(tlp_acl_check(&l->allow, &l->deny, (struct sockaddr *)&p), 0);
		T_EQ(tlp_netset_match(&l->proxy_from, (struct sockaddr *)&p), 1);
		inet_pton(AF_INET, "10.2.2.3", &p.sin_addr);
		T_EQ(tlp_acl_check(&l->allow, &l->deny, (struct sockaddr *)&p), 1);
	}
	T_EQ(l->nsni, 2);
	T_STR(l->sni[0].name, "a.example.com");
	T_EQ(l->sni[0].len, 13);
	T_EQ(l->sni[0].target, 1);
	T_STR(l->sni[1].name, "*.example.com");
	T_EQ(l->sni[1].target, 2);
	T_EQ(tlp_sni_match(l->sni, l->nsni, "x.example.com", 13), 1);
	T_EQ(l->sni_default, 0);
	T_EQ(l->sni_timeout_ns, 3 * SECS);
	T_EQ(l->queue_max, 1000);
	T_EQ(l->queue_timeout_ns, 5 * SECS);
	T_EQ(l->connect_timeout_ns, 2 * SECS);
	T_EQ(l->idle_timeout_ns, 300 * SECS);
	T_EQ(l->client_fin_ns, 30 * SECS);
	T_EQ(l->server_fin_ns, 30 * SECS);
	T_EQ(l->socket.nodelay, 1);
	T_EQ(l->socket.keepalive, 1);
	T_EQ(l->socket.ka_idle_s, 60);
	T_EQ(l->socket.ka_interval_s, 10);
	T_EQ(l->socket.ka_count, 5);
	T_EQ(l->socket.rcvbuf, 256 * 1024);
	T_EQ(l->socket.sndbuf, 256 * 1024);
	T_EQ(l->splice, 0);
	T_EQ(l->half_close, 1);

	l = &c->listeners[1];
	T_STR(l->name, "db");
	T_EQ(l->nlisten, 1);
	T_STR(l->listen[0].text, "0.0.0.0:5432");
	T_EQ(l->pool, 3);
	T_EQ(l->idle_timeout_ns, 3600 * SECS);
	T_EQ(l->connect_timeout_ns, 5 * SECS);
	T_EQ(l->splice, 1);
	T_EQ(l->half_close, 0);
	T_EQ(l->nsni, 0);
	T_EQ(l->sni_default, -1);

	const struct tlp_pool_cfg *p = &c->pools[0];

	T_STR(p->name, "web_pool");
	T_EQ(p->balance, TLP_BAL_ROUNDROBIN);
	T_EQ(p->proxy_protocol, TLP_PP_SEND_NONE);
	T_EQ(p->retries, 2);
	T_EQ(p->resolve_interval_ns, 10 * SECS);
	T_EQ(p->health.enabled, 1);
	T_EQ(p->health.interval_ns, 2 * SECS);
	T_EQ(p->health.timeout_ns, 1 * SECS);
	T_EQ(p->health.rise, 2);
	T_EQ(p->health.fall, 3);
	T_EQ(p->health.send_len, 6);
	T_EQ(memcmp(p->health.send, "PING\r\n", 6), 0);
	T_STR(p->health.expect, "+PONG");
	T_EQ(p->passive.enabled, 1);
	T_EQ(p->passive.failures, 3);
	T_EQ(p->passive.down_for_ns, 10 * SECS);
	T_EQ(p->nservers, 2);
	T_EQ(p->servers[0].ep.kind, TLP_EP_IP);
	T_EQ(p->servers[0].weight, 1);
	T_EQ(p->servers[0].max_conns, 100);
	T_EQ(p->servers[1].ep.kind, TLP_EP_HOST);
	T_STR(p->servers[1].ep.host, "backend.internal");
	T_EQ(p->servers[1].ep.port, 9000);
	T_EQ(p->servers[1].weight, 2);
	T_EQ(p->servers[1].max_conns, 0);
	T_TRUE(p->servers[0].id != p->servers[1].id, "ids");

	p = &c->pools[1];
	T_STR(p->name, "a_pool");
	T_EQ(p->balance, TLP_BAL_LEASTCONN);
	T_EQ(p->health.enabled, 0);
	T_EQ(p->passive.enabled, 0);
	T_EQ(p->servers[0].ep.addr.sa.sa_family, AF_INET6);
	T_EQ(p->servers[1].ep.kind, TLP_EP_UNIX);
	T_STR(p->servers[1].ep.addr.un.sun_path, "/run/a.sock");
	p = &c->pools[2];
	T_EQ(p->balance, TLP_BAL_HASH);
	T_EQ(p->proxy_protocol, TLP_PP_SEND_V2);
	T_EQ(p->servers[0].weight, 3);
	p = &c->pools[3];
	T_EQ(p->balance, TLP_BAL_WEIGHTED);
	T_EQ(p->proxy_protocol, TLP_PP_SEND_V1);
	T_STR(p->servers[1].ep.text, "db2.internal:5432");
out:
	tlp_config_free(c);
}

/* docs/TLPROXY.md's example is the file test_full checks, byte for byte. */
static void test_docs_example(void)
{
	char path[512];
	size_t dlen = 0, flen = 0;
	unsigned char *doc, *full;
	const char *start, *end;

	snprintf(path, sizeof path, "%s/../docs/TLPROXY.md", srcdir);
	doc = tlp_read_file(path, &dlen);
	snprintf(path, sizeof path, "%s/tlproxy/full.yaml", srcdir);
	full = tlp_read_file(path, &flen);
	T_TRUE(doc && full, "cannot read the docs or the example");
	if (doc && full) {
		start = strstr((const char *)doc, "```yaml\n");
		end = start ? strstr(start + 8, "```\n") : NULL;
		T_TRUE(start && end, "no yaml block in the docs");
		if (start && end) {
			start += 8;
			T_TRUE((size_t)(end - start) == flen && !memcmp(start, full, flen),
			       "the docs' example differs from tests/tlproxy/full.yaml");
		}
	}
	free(doc);
	free(full);
}

static void test_defaults(void)
{
	struct tlp_config *c = NULL;
	static struct tlp_diag d;
	int r = parse(LST("") , &c, &d);

	T_EQ(r, 0);
	if (r) {
		dump(&d);
		return;
	}
	const struct tlp_listener_cfg *l = &c->listeners[0];
	const struct tlp_pool_cfg *p = &c->pools[0];

	T_EQ(c->shards, 0);
	T_TRUE(!c->cpus && !c->user && !c->admin && !c->access_log, "optional strings set");
	T_EQ(c->admin_timeout_ns, 60 * SECS);
	T_EQ(c->drain_timeout_ns, 30 * SECS);
	T_EQ(c->spin_us, 0);
	T_EQ(c->nap_us, 50);
	T_EQ(c->nap_given, 0);
	T_EQ(c->max_conns, 0);
	T_EQ(c->splice_pipes, 0);
	T_EQ(c->splice_pipe_size, 0);
	T_EQ(l->pool, 0);
	T_EQ(l->max_conns, 0);
	T_EQ(tlp_netset_count(&l->allow) + tlp_netset_count(&l->deny), 0);
	T_EQ(tlp_netset_count(&l->proxy_from), 0);
	T_EQ(l->nsni, 0);
	T_EQ(l->sni_default, -1);
	T_EQ(l->sni_timeout_ns, 3 * SECS);
	T_EQ(l->queue_max, 0);
	T_EQ(l->queue_timeout_ns, 5 * SECS);
	T_EQ(l->connect_timeout_ns, 5 * SECS);
	T_EQ(l->idle_timeout_ns, 300 * SECS);
	T_EQ(l->client_fin_ns, 30 * SECS);
	T_EQ(l->server_fin_ns, 30 * SECS);
	T_EQ(l->socket.nodelay, 1);
	T_EQ(l->socket.keepalive, 0);
	T_EQ(l->socket.ka_idle_s, 60);
	T_EQ(l->socket.ka_interval_s, 10);
	T_EQ(l->socket.ka_count, 5);
	T_EQ(l->socket.rcvbuf, 0);
	T_EQ(l->socket.sndbuf, 0);
	T_EQ(l->splice, 0);
	T_EQ(l->half_close, 1);
	T_EQ(p->balance, TLP_BAL_ROUNDROBIN);
	T_EQ(p->proxy_protocol, TLP_PP_SEND_NONE);
	T_EQ(p->retries, 2);
	T_EQ(p->resolve_interval_ns, 10 * SECS);
	T_EQ(p->health.enabled, 0);
	T_EQ(p->passive.enabled, 0);
	T_EQ(p->servers[0].weight, 1);
	T_EQ(p->servers[0].max_conns, 0);
	tlp_config_free(c);

	/* Sub-mappings given empty-handed take their defaults. */
	r = parse(LST("    socket: {keepalive: true}\n") "    health: {}\n    passive: {}\n", &c,
		  &d);
	T_EQ(r, 0);
	if (r) {
		dump(&d);
		return;
	}
	T_EQ(c->listeners[0].socket.keepalive, 1);
	T_EQ(c->listeners[0].socket.ka_idle_s, 60);
	T_EQ(c->pools[0].health.enabled, 1);
	T_EQ(c->pools[0].health.interval_ns, 2 * SECS);
	T_EQ(c->pools[0].health.timeout_ns, 1 * SECS);
	T_EQ(c->pools[0].health.rise, 2);
	T_EQ(c->pools[0].health.fall, 3);
	T_TRUE(c->pools[0].health.send == NULL && c->pools[0].health.expect == NULL, "send");
	T_EQ(c->pools[0].passive.enabled, 1);
	T_EQ(c->pools[0].passive.failures, 3);
	T_EQ(c->pools[0].passive.down_for_ns, 10 * SECS);
	tlp_config_free(c);

	/* cpus instead of shards; a single listen address without a list. */
	r = parse("cpus: \"0-1,3\"\n" LST(""), &c, &d);
	T_EQ(r, 0);
	if (!r) {
		T_STR(c->cpus, "0-1,3");
		T_EQ(c->shards, 0);
		tlp_config_free(c);
	}
}

static void test_listener_errors(void)
{
	one_error(LST("    max_conns: 0\n"),
		  "t.yaml:5:16: listeners[0].max_conns: ", "out of range (1 to 10000000)");
	one_error(LST("    max_conns: 10k\n"),
		  "t.yaml:5:16: listeners[0].max_conns: ", "not a whole number");
	one_error(LST("    max_conns: -5\n"),
		  "t.yaml:5:16: listeners[0].max_conns: ", "not a whole number");
	one_error(LST("    maxconns: 5\n"), "t.yaml:5:5: listeners[0]: ", "unknown key 'maxconns'");
	one_error(LST("    pool: q\n"),
		  "t.yaml:5:5: listeners[0].pool: ", "given twice (first on line 4)");
	one_error(LST("    timeouts: {idle: 300}\n"), "t.yaml:5:22: listeners[0].timeouts.idle: ",
		  "bare number '300' has no unit: write 300s or 300ms");
	one_error(LST("    timeouts: {connect: 1.5s}\n"),
		  "t.yaml:5:25: listeners[0].timeouts.connect: ", "fractions");
	one_error(LST("    timeouts: {connect: 2 s}\n"),
		  "t.yaml:5:25: listeners[0].timeouts.connect: ", "unknown unit");
	one_error(LST("    timeouts: {connect: 11m}\n"),
		  "t.yaml:5:25: listeners[0].timeouts.connect: ", "out of range (1ms to 10m)");
	one_error(LST("    timeouts: {idle: 50ms}\n"),
		  "t.yaml:5:22: listeners[0].timeouts.idle: ", "out of range (100ms to 30d)");
	one_error(LST("    timeouts: {connect: 0s}\n"),
		  "t.yaml:5:25: listeners[0].timeouts.connect: ", "out of range");
	one_error(LST("    timeouts: {connect: }\n"),
		  "t.yaml:5:25: listeners[0].timeouts.connect: ", "needs a value");
	one_error(LST("    timeouts: {read: 2s}\n"),
		  "t.yaml:5:16: listeners[0].timeouts: ", "unknown key 'read'");
	one_error(LST("    timeouts: 5s\n"),
		  "t.yaml:5:15: listeners[0].timeouts: ", "expected a mapping");
	one_error(LST("    queue: {max: 1000001}\n"),
		  "t.yaml:5:18: listeners[0].queue.max: ", "out of range");
	one_error(LST("    splice: yes\n"),
		  "t.yaml:5:13: listeners[0].splice: ", "'yes' is not true or false");
	one_error(LST("    half_close: off\n"),
		  "t.yaml:5:17: listeners[0].half_close: ", "'off' is not true or false");
	one_error(LST("    socket: {rcvbuf: 64kb}\n"),
		  "t.yaml:5:22: listeners[0].socket.rcvbuf: ", "unknown unit");
	one_error(LST("    socket: {rcvbuf: 512}\n"),
		  "t.yaml:5:22: listeners[0].socket.rcvbuf: ", "out of range (1k to 256m)");
	one_error(LST("    socket: {sndbuf: 1g}\n"),
		  "t.yaml:5:22: listeners[0].socket.sndbuf: ", "out of range");
	one_error(LST("    socket: {keepalive: {idle: 1500ms}}\n"),
		  "t.yaml:5:32: listeners[0].socket.keepalive.idle: ", "not whole seconds");
	one_error(LST("    socket: {keepalive: {count: 128}}\n"),
		  "t.yaml:5:33: listeners[0].socket.keepalive.count: ", "out of range (1 to 127)");
	one_error(LST("    socket: {keepalive: maybe}\n"),
		  "t.yaml:5:25: listeners[0].socket.keepalive: ", "not true or false");
	one_error(LST("    allow: [\"10.1.0.0/8\"]\n"), "t.yaml:5:13: listeners[0].allow[0]: ",
		  "bits set past its prefix (the network is 10.0.0.0/8)");
	one_error(LST("    deny: [\"10.0.0.0/8\", \"1.2.3.400\"]\n"),
		  "t.yaml:5:26: listeners[0].deny[1]: ",
		  "'1.2.3.400' is not an IPv4 or IPv6 address");
	one_error(LST("    deny: [\"10.0.0.0/8\", \"nope\"]\n"),
		  "t.yaml:5:26: listeners[0].deny[1]: ", "bad character in network 'nope'");
	one_error(LST("    proxy_protocol_from: {a: 1}\n"),
		  "t.yaml:5:26: listeners[0].proxy_protocol_from: ", "expected a list of networks");
	one_error(LST("    sni_default: p\n"),
		  "t.yaml:5:18: listeners[0].sni_default: ", "no sni rules");
	one_error(LST("    sni_timeout: 1s\n"),
		  "t.yaml:5:18: listeners[0].sni_timeout: ", "no sni rules");
	one_error(LST("    sni: [{name: \"a.b\", pool: q}]\n"),
		  "t.yaml:5:31: listeners[0].sni[0].pool: ", "no pool named 'q'");
	one_error(LST("    sni: [{name: \"a b\", pool: p}]\n"),
		  "t.yaml:5:18: listeners[0].sni[0].name: ", "neither a host name nor *.host.name");
	one_error(LST("    sni: [{name: \"*\", pool: p}]\n"),
		  "t.yaml:5:18: listeners[0].sni[0].name: ", "neither");
	one_error(LST("    sni: [{pool: p}]\n"),
		  "t.yaml:5:11: listeners[0].sni[0]: ", "name is required");
	one_error(LST("    sni: [{name: a.b}]\n"),
		  "t.yaml:5:11: listeners[0].sni[0]: ", "pool is required");
	one_error(LST("    sni:\n      - {name: A.b, pool: p}\n      - {name: a.B, pool: p}\n"),
		  "t.yaml:7:16: listeners[0].sni[1].name: ", "'a.b' is already a rule (line 6)");
	one_error(LST("    timeouts: {[x]: 1s}\n"),
		  "t.yaml:5:16: listeners[0].timeouts: ", "a key must be a plain word");
	one_error(LST("    sni: \"a.b\"\n"), "t.yaml:5:10: listeners[0].sni: ", "expected a list");
	/* Listen addresses. */
	one_error("listeners:\n  - {name: l, pool: p, listen: \"::1:80\"}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:32: listeners[0].listen[0]: ",
		  "an IPv6 address goes in brackets, as in [::1]:8080");
	one_error("listeners:\n  - {name: l, pool: p, listen: \"localhost:80\"}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:32: listeners[0].listen[0]: ", "listen on a numeric IP address");
	one_error("listeners:\n  - {name: l, pool: p, listen: \"*:80\"}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:32: listeners[0].listen[0]: ", "write 0.0.0.0:PORT or [::]:PORT");
	one_error(
		"listeners:\n  - {name: l, pool: p, listen: [\"127.0.0.1:80\", \"127.0.0.1:0\"]}\n"
		"pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		"t.yaml:2:49: listeners[0].listen[1]: ", "port must be 1 to 65535");
	one_error("listeners:\n  - {name: l, pool: p, listen: [\"[::1]:80\", \"[0::1]:80\"]}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:45: listeners[0].listen[1]: ", "is already listened on (line 2)");
	one_error("listeners:\n  - {name: l, pool: p, listen: []}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:32: listeners[0].listen: ", "needs at least one address");
	one_error("listeners:\n  - {name: l, pool: p}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:5: listeners[0]: ", "listen is required");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\"}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:5: listeners[0]: ", "needs a pool (or sni rules)");
	one_error("listeners:\n  - {name: \"a/b\", listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:2:12: listeners[0].name: ", "is not a name");
	/* Across listeners: names and addresses. */
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "  - {name: l, listen: \"127.0.0.1:81\", pool: p}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:3:12: listeners[1].name: ", "'l' is already the name of listeners[0]");
	one_error("listeners:\n  - {name: l, listen: \"unix:/run/x\", pool: p}\n"
		  "  - {name: m, listen: \"unix:/run/x\", pool: p}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:3:23: listeners[1].listen[0]: ",
		  "unix:/run/x is already listened on (line 2)");
	/* A Unix path of 108 bytes does not fit sun_path with its NUL. */
	char yaml[1024], path[109];

	memset(path, 'u', 108);
	path[0] = '/';
	path[108] = '\0';
	snprintf(yaml, sizeof yaml,
		 "listeners:\n  - {name: l, pool: p, listen: \"unix:%s\"}\n"
		 "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		 path);
	one_error(yaml, "t.yaml:2:32: listeners[0].listen[0]: ",
		  "Unix socket path of 108 bytes: at most 107");
	path[107] = '\0';
	snprintf(yaml, sizeof yaml,
		 "listeners:\n  - {name: l, pool: p, listen: \"unix:%s\"}\n"
		 "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		 path);
	struct tlp_config *c;
	static struct tlp_diag d;

	T_EQ(parse(yaml, &c, &d), 0);
	if (!d.count)
		tlp_config_free(c);
}

static void test_pool_errors(void)
{
	one_error(POOL("    balance: random\n"), "t.yaml:8:14: pools[0].balance: ",
		  "'random' is not one of: roundrobin, weighted, leastconn, hash");
	one_error(POOL("    proxy_protocol: v3\n"),
		  "t.yaml:8:21: pools[0].proxy_protocol: ", "not one of: none, v1, v2");
	one_error(POOL("    retries: 11\n"),
		  "t.yaml:8:14: pools[0].retries: ", "out of range (0 to 10)");
	one_error(POOL("    resolve_interval: 10\n"),
		  "t.yaml:8:23: pools[0].resolve_interval: ", "bare number");
	one_error(POOL("    health: {interval: 1s, timeout: 2s}\n"),
		  "t.yaml:8:37: pools[0].health.timeout: ", "2s is longer than the interval (1s)");
	one_error(POOL("    health: {rise: 0}\n"),
		  "t.yaml:8:20: pools[0].health.rise: ", "out of range (1 to 100)");
	one_error(POOL("    health: {check: tcp}\n"),
		  "t.yaml:8:14: pools[0].health: ", "unknown key 'check'");
	one_error(POOL("    passive: {failures: 0}\n"),
		  "t.yaml:8:25: pools[0].passive.failures: ", "out of range");
	one_error(POOL("    passive: {down_for: 2h}\n"),
		  "t.yaml:8:25: pools[0].passive.down_for: ", "out of range (1s to 1h)");
	one_error(POOL("    health: [1]\n"),
		  "t.yaml:8:13: pools[0].health: ", "expected a mapping");
	/* Servers. */
	one_error(
		"listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		"pools:\n  - name: p\n    servers:\n      - {address: \"127.0.0.1:1\", weight: 0}\n",
		"t.yaml:6:42: pools[0].servers[0].weight: ", "out of range (1 to 256)");
	one_error(
		"listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		"pools:\n  - name: p\n    servers:\n      - {address: \"127.0.0.1:1\", weight: 257}\n",
		"t.yaml:6:42: pools[0].servers[0].weight: ", "out of range (1 to 256)");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers:\n      - {address: \"127.0.0.1:65536\"}\n",
		  "t.yaml:6:19: pools[0].servers[0].address: ", "port must be 1 to 65535");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers:\n      - {address: \"300.1.1.1:80\"}\n",
		  "t.yaml:6:19: pools[0].servers[0].address: ", "not an IPv4 address");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers:\n      - {address: \"bad_host!:80\"}\n",
		  "t.yaml:6:19: pools[0].servers[0].address: ",
		  "neither an IP address nor a host name");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers:\n      - {address: \"Db.Internal:80\"}\n"
		  "      - {address: \"db.internal:80\"}\n",
		  "t.yaml:7:19: pools[0].servers[1].address: ",
		  "the same address as pools[0].servers[0] (line 6)");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers:\n      - {weight: 2}\n",
		  "t.yaml:6:9: pools[0].servers[0]: ", "address is required");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n    servers: []\n",
		  "t.yaml:5:14: pools[0].servers: ", "needs at least one server");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - name: p\n",
		  "t.yaml:4:5: pools[0]: ", "servers is required");
	one_error(
		"listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		"pools:\n  - {servers: [{address: \"127.0.0.1:1\"}]}\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		"t.yaml:4:5: pools[0]: ", "name is required");
	one_error("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		  "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n"
		  "  - {name: p, servers: [{address: \"127.0.0.1:2\"}]}\n",
		  "t.yaml:5:12: pools[1].name: ", "'p' is already the name of pools[0] (line 4)");
	/* Too many servers. */
	size_t cap = 64 * (TLP_MAX_SERVERS + 2) + 256, n;
	char *y = malloc(cap);

	n = (size_t)snprintf(y, cap,
			     "listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
			     "pools:\n  - name: p\n    servers:\n");
	for (int i = 0; i < TLP_MAX_SERVERS + 1; i++)
		n += (size_t)snprintf(y + n, cap - n, "      - {address: \"10.0.%d.%d:80\"}\n",
				      i / 250, i % 250 + 1);
	one_error(y, "t.yaml:6:7: pools[0].servers: ", "more than 1024 servers");
	free(y);
}

static void test_top_errors(void)
{
	one_error("shards: 0\n" LST(""), "t.yaml:1:9: shards: ", "out of range (1 to 1024)");
	one_error("shards: 2\ncpus: \"0-1\"\n" LST(""),
		  "t.yaml:2:7: cpus: ", "give shards or cpus, not both");
	one_error("cpus: \"1-0\"\n" LST(""), "t.yaml:1:7: cpus: ", "not a CPU list below 1024");
	one_error("cpus: \"2000\"\n" LST(""), "t.yaml:1:7: cpus: ", "not a CPU list below 1024");
	one_error("user: \"a b\"\n" LST(""), "t.yaml:1:7: user: ", "not a user name");
	one_error("admin: \"\"\n" LST(""), "t.yaml:1:8: admin: ", "needs a value");
	one_error("admin_timeout: 5s\n" LST(""), "t.yaml:1:16: admin_timeout: ",
		  "there is no admin socket for it to apply to");
	one_error("admin: /a\nadmin_timeout: 50ms\n" LST(""), "t.yaml:2:16: admin_timeout: ",
		  "out of range (100ms to 1d)");
	one_error("admin: /a\nadmin_timeout: 5\n" LST(""), "t.yaml:2:16: admin_timeout: ",
		  "has no unit");
	one_error("drain_timeout: 50ms\n" LST(""), "t.yaml:1:16: drain_timeout: ",
		  "out of range (100ms to 1d)");
	one_error("max_conns: 10000001\n" LST(""), "t.yaml:1:12: max_conns: ", "out of range");
	one_error("splice_pipes: 0\n" LST(""), "t.yaml:1:15: splice_pipes: ",
		  "out of range (1 to 4096)");
	one_error("splice_pipes: 4097\n" LST(""), "t.yaml:1:15: splice_pipes: ", "out of range");
	one_error("splice_pipe_size: 2k\n" LST(""), "t.yaml:1:19: splice_pipe_size: ",
		  "out of range");
	one_error("splice_pipe_size: 2m\n" LST(""), "t.yaml:1:19: splice_pipe_size: ",
		  "out of range");
	one_error("splice_pipe_size: 48k\n" LST(""), "t.yaml:1:19: splice_pipe_size: ",
		  "not a power of two");
	one_error("Listeners: []\n" LST(""), "t.yaml:1:1: ", "unknown key 'Listeners'");
	one_error("pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:1:1: listeners: ", "at least one listener is required");
	{
		struct tlp_config *c;
		static struct tlp_diag d;

		T_EQ(parse("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n", &c,
			   &d),
		     -EINVAL);
		T_EQ(d.count, 2);
		T_TRUE(has_error(&d, "t.yaml:1:1: pools: ", "at least one pool is required"),
		       "pools");
		T_TRUE(has_error(&d, "t.yaml:2:45: listeners[0].pool: ", "no pool named 'p'"),
		       "pool");
	}
	one_error("listeners: {}\npools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:1:12: listeners: ", "expected a list");
	one_error("listeners: []\npools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		  "t.yaml:1:12: listeners: ", "needs 1 to 256 listeners");
	one_error(LST("") "shards: 3\nshards: 4\n",
		  "t.yaml:9:1: shards: ", "given twice (first on line 8)");
	one_error(LST("") "? [a, b]\n: c\n", "t.yaml:8:3: a key", "must be a plain word");
	/* Text that is not a config at all. */
	one_error("", "t.yaml:1:1: ", "the config is empty");
	one_error("---\n", "t.yaml:1:1: ", "the config is empty");
	one_error("# nothing\n", "t.yaml:1:1: ", "the config is empty");
	one_error("42\n", "t.yaml:1:1: ", "must be a mapping");
	one_error("- a\n- b\n", "t.yaml:1:1: ", "must be a mapping");
	one_error("user: \"a\\0b\"\n" LST(""), "t.yaml:1:7: user: ", "not a user name");
	one_error("access_log: \"a\\0b\"\n" LST(""),
		  "t.yaml:1:13: access_log: ", "contains a NUL byte");
}

static void test_yaml_errors(void)
{
	one_error("listeners: [\n",
		  "t.yaml:2:1: ", "YAML syntax: did not find expected node content");
	one_error("a: \"unterminated\n",
		  "t.yaml:2:1: ", "YAML syntax: found unexpected end of stream");
	one_error("a: b: c\n", "t.yaml:1:5: ", "YAML syntax: mapping values are not allowed");
	one_error("a:\n\t- b\n", "t.yaml:2:1: ", "YAML syntax");
	one_error(LST("") "---\nshards: 1\n", "t.yaml:8:1: ", "a second YAML document");
	/* Anchors and aliases: refused where they are, the rest still read. */
	struct tlp_config *c;
	static struct tlp_diag d;

	T_EQ(parse("listeners:\n  - &l {name: l, listen: \"127.0.0.1:80\", pool: p}\n  - *l\n"
		   "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		   &c, &d),
	     -EINVAL);
	T_TRUE(has_error(&d, "t.yaml:2:5: ", "anchors (&l) are not supported"), "anchor");
	T_TRUE(has_error(&d, "t.yaml:3:5: ", "aliases (*l) are not supported"), "alias");
	T_EQ(d.count, 2);
	/* A deep nest is refused, not recursed into. */
	char deep[200];

	memset(deep, '[', 100);
	deep[100] = '\0';
	one_error(deep, "t.yaml:1:33: ", "nested deeper than 32 levels");
	/* Bytes that are not UTF-8. */
	one_error("user: \"\xff\xfe\"\n", "t.yaml:", "YAML syntax");
}

static void test_many_errors(void)
{
	struct tlp_config *c = (void *)1;
	static struct tlp_diag d;
	int r;

	/* Errors all over are all reported, in one load. */
	r = parse("shards: x\n"
		  "listeners:\n"
		  "  - name: l\n"
		  "    listen: [\"127.0.0.1:80\", \"1.2.3.4\"]\n"
		  "    pool: nope\n"
		  "    timeouts: {idle: 5}\n"
		  "pools:\n"
		  "  - name: p\n"
		  "    balance: fast\n"
		  "    servers: [{address: \"h:0\"}]\n",
		  &c, &d);
	T_EQ(r, -EINVAL);
	T_TRUE(c == NULL, "model");
	T_EQ(d.count, 6);
	T_EQ(d.total, 6);
	T_TRUE(has_error(&d, "t.yaml:1:9: shards: ", "not a whole number"), "shards");
	T_TRUE(has_error(&d, "t.yaml:9:14: pools[0].balance: ", "'fast'"), "balance");
	T_TRUE(has_error(&d, "t.yaml:10:25: pools[0].servers[0].address: ", "port"), "address");
	T_TRUE(has_error(&d, "t.yaml:4:30: listeners[0].listen[1]: ", "needs a port"), "listen");
	T_TRUE(has_error(&d, "t.yaml:5:11: listeners[0].pool: ", "no pool named 'nope'"), "pool");
	T_TRUE(has_error(&d, "t.yaml:6:22: listeners[0].timeouts.idle: ", "bare number"), "idle");
	for (uint32_t i = 0; i < d.count; i++) {
		T_EQ(strncmp(d.e[i].text, "t.yaml:", 7), 0);
		T_TRUE(d.e[i].line >= 1 && d.e[i].line <= 10 && d.e[i].col >= 1, "%u:%u",
		       d.e[i].line, d.e[i].col);
	}
	if (d.count != 6)
		dump(&d);

	/* Past the cap, errors are counted and not kept. */
	char y[4096];
	size_t n = 0;

	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(y + n, sizeof y - n, "bogus%d: 1\n", i);
	T_EQ(tlp_config_parse(y, n, NULL, &c, &d), -EINVAL);
	T_EQ(d.count, TLP_CFG_MAX_ERRORS);
	T_EQ(d.total, 42); /* and listeners and pools are missing */
	T_HAS(d.e[0].text, "config:1:1: unknown key 'bogus0'");
	T_HAS(d.e[31].text, "config:32:1: unknown key 'bogus31'");
	/* Without a diag the result is the same. */
	T_EQ(tlp_config_parse(y, n, NULL, &c, NULL), -EINVAL);
	T_EQ(tlp_config_parse(NULL, 1, NULL, &c, &d), -EINVAL);
	T_EQ(tlp_config_parse("a: b", 4, NULL, NULL, &d), -EINVAL);
}

/* Every reason is one line, whatever bytes the input held. */
static void test_one_line(void)
{
	struct tlp_config *c;
	static struct tlp_diag d;
	struct tlp_args a;
	char err[256];

	T_EQ(parse(LST("    deny: [\"10.0.0.0/8\\n- x\"]\n"), &c, &d), -EINVAL);
	T_EQ(d.count, 1);
	T_TRUE(!strchr(d.e[0].text, '\n') && strstr(d.e[0].text, "'10.0.0.0/8?- x'"), "%s",
	       d.e[0].text);
	T_EQ(parse("listeners:\n  - {name: l, pool: p, listen: [\"unix:/a\\nb\", \"unix:/a\\nb\"]}\n"
		   "pools:\n  - {name: p, servers: [{address: \"127.0.0.1:1\"}]}\n",
		   &c, &d),
	     -EINVAL);
	T_EQ(d.count, 1);
	T_TRUE(!strchr(d.e[0].text, '\n') &&
		       strstr(d.e[0].text, "unix:/a?b is already listened on"),
	       "%s", d.e[0].text);
	T_EQ(tlp_config_parse("x: 1\n", 5, "dir\nname.yaml", &c, &d), -EINVAL);
	T_TRUE(d.count >= 1 && !strncmp(d.e[0].text, "dir?name.yaml:1:1: ", 19), "%s", d.e[0].text);
	T_EQ(tlp_config_load("/nonexistent/a\nb", &c, &d), -ENOENT);
	T_TRUE(!strchr(d.e[0].text, '\n'), "%s", d.e[0].text);

	static char *const bad[][4] = {
		{"--shards", "1\n2", NULL},
		{"--cpus", "0\n", NULL},
		{"--balance", "hash\n", NULL},
		{"--proxy-protocol", "v1\n", NULL},
		{"--max-conns", "\n", NULL},
		{"--bogus\n", "x", NULL},
		{"--listen", "127.0.0.1:1", "--bogus\n"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *argv[5] = {"tlproxy", bad[i][0], bad[i][1], bad[i][2], NULL};
		int argc = bad[i][2] ? 4 : 3;

		T_EQ(tlp_args_parse(argc, argv, &a, err, sizeof err), -EINVAL);
		T_TRUE(!strchr(err, '\n') && strchr(err, '?'), "%s: '%s'", bad[i][0], err);
	}
	char *dup[] = {"tlproxy", "--listen", "unix:/a\nb", "--listen", "unix:/a\nb", NULL};

	T_EQ(tlp_args_parse(5, dup, &a, err, sizeof err), -EINVAL);
	T_TRUE(!strchr(err, '\n') && strstr(err, "unix:/a?b given twice"), "'%s'", err);
	char *dup2[] = {"tlproxy", "--listen", "127.0.0.1:1", "--upstream", "unix:/u\n,unix:/u\n",
			NULL};

	T_EQ(tlp_args_parse(5, dup2, &a, err, sizeof err), -EINVAL);
	T_TRUE(!strchr(err, '\n') && strstr(err, "unix:/u? given twice"), "'%s'", err);
}

static void test_durations_sizes(void)
{
	uint64_t v;
	char err[200];

	T_EQ(tlp_duration_parse("500ms", 5, &v, err, sizeof err), 0);
	T_EQ(v, 500 * MSEC);
	T_EQ(tlp_duration_parse("2s", 2, &v, err, sizeof err), 0);
	T_EQ(v, 2 * SECS);
	T_EQ(tlp_duration_parse("1m", 2, &v, err, sizeof err), 0);
	T_EQ(v, 60 * SECS);
	T_EQ(tlp_duration_parse("1h", 2, &v, err, sizeof err), 0);
	T_EQ(v, 3600 * SECS);
	T_EQ(tlp_duration_parse("7d", 2, &v, err, sizeof err), 0);
	T_EQ(v, 7 * 86400 * SECS);
	T_EQ(tlp_duration_parse("0s", 2, &v, err, sizeof err), 0);
	T_EQ(v, 0);
	T_EQ(tlp_duration_parse("300", 3, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "bare number '300' has no unit");
	T_HAS(err, "write 300s or 300ms");
	T_EQ(tlp_duration_parse("1.5s", 4, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "fractions");
	T_EQ(tlp_duration_parse("5sec", 4, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "unknown unit");
	T_EQ(tlp_duration_parse("5S", 2, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_duration_parse("1m30s", 5, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_duration_parse("-1s", 3, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "not a duration");
	T_EQ(tlp_duration_parse(" 1s", 3, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_duration_parse("s", 1, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_duration_parse("", 0, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_duration_parse("999999999999999d", 16, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "too large");
	T_EQ(tlp_duration_parse("999999999999d", 13, &v, err, sizeof err), -EINVAL);
	T_HAS(err, "too large");
	T_EQ(tlp_duration_parse("2s", 1, &v, err, sizeof err), -EINVAL); /* "2": bounded by len */

	T_EQ(tlp_size_parse("64k", 3, &v, err, sizeof err), 0);
	T_EQ(v, 65536);
	T_EQ(tlp_size_parse("1M", 2, &v, err, sizeof err), 0);
	T_EQ(v, 1048576);
	T_EQ(tlp_size_parse("2g", 2, &v, err, sizeof err), 0);
	T_EQ(v, 2ull << 30);
	T_EQ(tlp_size_parse("4096", 4, &v, err, sizeof err), 0);
	T_EQ(v, 4096);
	T_EQ(tlp_size_parse("1024g", 5, &v, err, sizeof err), 0);
	T_EQ(tlp_size_parse("1025g", 5, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_size_parse("64kb", 4, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_size_parse("64t", 3, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_size_parse("k", 1, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_size_parse("1.5m", 4, &v, err, sizeof err), -EINVAL);
	T_EQ(tlp_size_parse("", 0, &v, err, sizeof err), -EINVAL);
}

static void test_endpoints(void)
{
	struct tlp_endpoint e, f;
	char err[200];

#define EP(s, host) tlp_endpoint_parse(s, strlen(s), host, &e, err, sizeof err)
	T_EQ(EP("127.0.0.1:80", 0), 0);
	T_EQ(e.kind, TLP_EP_IP);
	T_EQ(e.port, 80);
	T_EQ(e.addr.sa.sa_family, AF_INET);
	T_EQ(ntohs(e.addr.in.sin_port), 80);
	T_EQ(EP("[::1]:65535", 0), 0);
	T_EQ(e.addr.sa.sa_family, AF_INET6);
	T_EQ(e.port, 65535);
	T_EQ(EP("[::ffff:1.2.3.4]:1", 0), 0);
	T_EQ(EP("unix:/run/x.sock", 0), 0);
	T_EQ(e.kind, TLP_EP_UNIX);
	T_STR(e.addr.un.sun_path, "/run/x.sock");
	T_EQ(EP("unix:rel/x.sock", 0), 0);
	T_EQ(EP("Backend-1.internal:9000", 1), 0);
	T_EQ(e.kind, TLP_EP_HOST);
	T_EQ(e.port, 9000);
	T_TRUE(e.host == NULL && e.text == NULL, "the caller keeps the text");
	T_EQ(EP("localhost:1", 1), 0);

	static const struct {
		const char *s;
		int host;
		const char *why;
	} bad[] = {
		{"", 1, "empty address"},
		{"127.0.0.1", 1, "needs a port"},
		{"127.0.0.1:", 1, "port must be 1 to 65535"},
		{"127.0.0.1:0", 1, "port must be 1 to 65535"},
		{"127.0.0.1:65536", 1, "port must be 1 to 65535"},
		{"127.0.0.1:080", 1, "port must be 1 to 65535"},
		{"127.0.0.1:+80", 1, "port must be 1 to 65535"},
		{"127.0.0.1:8o", 1, "port must be 1 to 65535"},
		{":80", 1, "has no host"},
		{"*:80", 1, "has no host"},
		{"[*]:80", 1, "has no host"},
		{"::1:80", 1, "brackets"},
		{"[::1]", 1, "needs :PORT after the ']'"},
		{"[::1]80", 1, "needs :PORT after the ']'"},
		{"[::1:80", 1, "no ']'"},
		{"[1.2.3.4]:80", 1, "not an IPv6 address"},
		{"[::g]:80", 1, "not an IPv6 address"},
		{"1.2.3:80", 1, "not an IPv4 address"},
		{"1.2.3.4.5:80", 1, "not an IPv4 address"},
		{"01.2.3.4:80", 1, "not an IPv4 address"},
		{"host name:80", 1, "neither an IP address nor a host name"},
		{"host.:80", 1, "neither an IP address nor a host name"},
		{"db.internal:80", 0, "listen on a numeric IP address"},
		{"unix:", 1, "empty Unix socket path"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int r = EP(bad[i].s, bad[i].host);

		T_TRUE(r == -EINVAL && strstr(err, bad[i].why), "'%s': %d '%s', want '%s'",
		       bad[i].s, r, err, bad[i].why);
	}
	T_EQ(tlp_endpoint_parse("1.2.3.4\0:80", 10, 1, &e, err, sizeof err), -EINVAL);
	T_HAS(err, "NUL");
	T_EQ(tlp_endpoint_parse(NULL, 2, 1, &e, err, sizeof err), -EINVAL);
	T_EQ(tlp_endpoint_parse("1.2.3.4:1", 9, 1, NULL, err, sizeof err), -EINVAL);

	/* Sameness is by address, not by text. */
	T_EQ(EP("[::1]:80", 0), 0);
	f = e;
	T_EQ(EP("[0:0::1]:80", 0), 0);
	T_EQ(tlp_endpoint_same(&e, &f), 1);
	T_EQ(EP("[::1]:81", 0), 0);
	T_EQ(tlp_endpoint_same(&e, &f), 0);
	T_EQ(EP("127.0.0.1:81", 0), 0);
	T_EQ(tlp_endpoint_same(&e, &f), 0);
	T_EQ(tlp_endpoint_same(NULL, &f), 0);
#undef EP
}

static void test_load_file(void)
{
	struct tlp_config *c = (void *)1;
	static struct tlp_diag d;
	char path[] = "/tmp/tlp-config-XXXXXX";
	int fd;

	T_EQ(tlp_config_load("/nonexistent/tlproxy.yaml", &c, &d), -ENOENT);
	T_TRUE(c == NULL, "model");
	T_EQ(d.count, 1);
	T_HAS(d.e[0].text, "/nonexistent/tlproxy.yaml: No such file or directory");
	T_EQ(tlp_config_load("/", &c, &d), -EINVAL);
	T_HAS(d.e[0].text, "/: not a regular file");
	fd = mkstemp(path);
	T_TRUE(fd >= 0, "mkstemp");
	if (fd < 0)
		return;
	T_EQ(ftruncate(fd, TLP_CONFIG_FILE_MAX + 1), 0);
	T_EQ(tlp_config_load(path, &c, &d), -EFBIG);
	T_HAS(d.e[0].text, "larger than 4 MiB");
	/* A config in it loads, and messages name the file. */
	const char *bad = LST("    splice: 1\n");

	T_EQ(ftruncate(fd, 0), 0);
	T_EQ(pwrite(fd, bad, strlen(bad), 0), (long long)strlen(bad));
	T_EQ(tlp_config_load(path, &c, &d), -EINVAL);
	T_EQ(d.count, 1);
	T_TRUE(!strncmp(d.e[0].text, path, strlen(path)) &&
		       strstr(d.e[0].text, ":5:13: listeners[0].splice:"),
	       "%s", d.e[0].text);
	const char *good = LST("");

	T_EQ(ftruncate(fd, 0), 0);
	T_EQ(pwrite(fd, good, strlen(good), 0), (long long)strlen(good));
	T_EQ(tlp_config_load(path, &c, &d), 0);
	T_EQ(d.count, 0);
	tlp_config_free(c);
	close(fd);
	unlink(path);
	T_EQ(tlp_config_load(NULL, &c, &d), -EINVAL);
	tlp_config_free(NULL);
}

/* ---- the command line ---- */

static int args(struct tlp_args *a, char *err, size_t errlen, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;

	argv[argc++] = "tlproxy";
	va_start(ap, errlen);
	for (char *s; (s = va_arg(ap, char *));)
		argv[argc++] = s;
	va_end(ap);
	return tlp_args_parse(argc, argv, a, err, errlen);
}

static void args_bad(const char *why, ...)
{
	char *argv[64], err[256];
	struct tlp_args a;
	int argc = 0, r;
	va_list ap;

	argv[argc++] = "tlproxy";
	va_start(ap, why);
	for (char *s; (s = va_arg(ap, char *));)
		argv[argc++] = s;
	va_end(ap);
	r = tlp_args_parse(argc, argv, &a, err, sizeof err);
	T_TRUE(r == -EINVAL && strstr(err, why) && !strchr(err, '\n'), "%s...: %d '%s', want '%s'",
	       argv[1], r, err, why);
	T_TRUE(a.cfg == NULL && a.config_path == NULL, "result left set");
}

static void test_args(void)
{
	struct tlp_args a;
	char err[256];
	int r;

	r = args(&a, err, sizeof err, "--listen", "127.0.0.1:8080", "--upstream",
		 "10.0.0.1:80,[2001:db8::1]:80,Backend.Internal:81", "--upstream",
		 "unix:/run/u.sock", "--shards", "4", "--balance", "hash", "--proxy-protocol", "v2",
		 "--splice", "--max-conns", "5000", "--connect-timeout", "750ms", "--idle-timeout",
		 "2m", "--listen", "[::]:8080", "--splice-pipes", "3", "--splice-pipe-size", "256k",
		 "--half-close", "off", "--drain-timeout", "3s", "--spin-us", "20", "--nap-us", "0", NULL);
	T_EQ(r, 0);
	T_STR(err, "");
	if (r == 0 && a.cfg) {
		const struct tlp_config *c = a.cfg;
		const struct tlp_listener_cfg *l = &c->listeners[0];
		const struct tlp_pool_cfg *p = &c->pools[0];

		T_TRUE(a.config_path == NULL && a.check == 0, "path");
		T_EQ(c->shards, 4);
		T_EQ(c->drain_timeout_ns, 3 * SECS);
		T_EQ(c->spin_us, 20);
		T_EQ(c->nap_us, 0);
		T_EQ(c->nap_given, 1);
		T_EQ(c->max_conns, 5000);
		T_EQ(c->splice_pipes, 3);
		T_EQ(c->splice_pipe_size, 256u << 10);
		T_EQ(c->nlisteners, 1);
		T_EQ(c->npools, 1);
		T_STR(l->name, "default");
		T_EQ(l->nlisten, 2);
		T_STR(l->listen[0].text, "127.0.0.1:8080");
		T_EQ(l->listen[1].addr.sa.sa_family, AF_INET6);
		T_EQ(l->pool, 0);
		T_EQ(l->connect_timeout_ns, 750 * MSEC);
		T_EQ(l->idle_timeout_ns, 120 * SECS);
		T_EQ(l->client_fin_ns, 30 * SECS);
		T_EQ(l->splice, 1);
		T_EQ(l->half_close, 0);
		T_EQ(l->socket.nodelay, 1);
		T_STR(p->name, "default");
		T_EQ(p->balance, TLP_BAL_HASH);
		T_EQ(p->proxy_protocol, TLP_PP_SEND_V2);
		T_EQ(p->retries, 2);
		T_EQ(p->nservers, 4);
		T_EQ(p->servers[1].ep.addr.sa.sa_family, AF_INET6);
		T_EQ(p->servers[2].ep.kind, TLP_EP_HOST);
		T_STR(p->servers[2].ep.host, "backend.internal");
		T_STR(p->servers[2].ep.text, "Backend.Internal:81");
		T_EQ(p->servers[3].ep.kind, TLP_EP_UNIX);
		for (uint32_t i = 0; i < p->nservers; i++) {
			T_EQ(p->servers[i].weight, 1);
			T_TRUE(p->servers[i].id != 0, "id");
		}
		T_TRUE(p->servers[0].id != p->servers[1].id, "ids differ");
	}
	tlp_config_free(a.cfg);

	/* The same servers from YAML get the same ids (Maglev agrees). */
	struct tlp_config *y;
	static struct tlp_diag d;

	T_EQ(parse("listeners:\n  - {name: l, listen: \"127.0.0.1:80\", pool: p}\n"
		   "pools:\n  - {name: p, servers: [{address: \"10.0.0.1:80\"}, {address: \"backend.internal:81\"}]}\n",
		   &y, &d),
	     0);
	T_EQ(args(&a, err, sizeof err, "--listen", "127.0.0.1:8080", "--upstream",
		  "10.0.0.1:80,BACKEND.internal:81", NULL),
	     0);
	if (!d.count && a.cfg) {
		T_TRUE(y->pools[0].servers[0].id == a.cfg->pools[0].servers[0].id, "ip id");
		T_TRUE(y->pools[0].servers[1].id == a.cfg->pools[0].servers[1].id, "host id");
		tlp_config_free(y);
	}
	tlp_config_free(a.cfg);

	/* --cpus, defaults. */
	T_EQ(args(&a, err, sizeof err, "--cpus", "0-1", "--listen", "127.0.0.1:1", "--upstream",
		  "127.0.0.1:2", NULL),
	     0);
	if (a.cfg) {
		T_STR(a.cfg->cpus, "0-1");
		T_EQ(a.cfg->shards, 0);
		T_EQ(a.cfg->pools[0].balance, TLP_BAL_ROUNDROBIN);
		T_EQ(a.cfg->pools[0].proxy_protocol, TLP_PP_SEND_NONE);
		T_EQ(a.cfg->listeners[0].connect_timeout_ns, 5 * SECS);
		T_EQ(a.cfg->listeners[0].idle_timeout_ns, 300 * SECS);
		T_EQ(a.cfg->listeners[0].half_close, 1);
		T_EQ(a.cfg->max_conns, 0);
	}
	tlp_config_free(a.cfg);

	/* A file instead. */
	T_EQ(args(&a, err, sizeof err, "--config", "/etc/tlproxy.yaml", NULL), 0);
	T_STR(a.config_path, "/etc/tlproxy.yaml");
	T_EQ(a.check, 0);
	T_TRUE(a.cfg == NULL, "cfg");
	T_EQ(args(&a, err, sizeof err, "--check", "x.yaml", NULL), 0);
	T_STR(a.config_path, "x.yaml");
	T_EQ(a.check, 1);
	T_EQ(args(&a, err, sizeof err, "--help", NULL), 1);
	T_TRUE(a.cfg == NULL, "cfg");
	T_EQ(args(&a, err, sizeof err, "--listen", "127.0.0.1:1", "-h", NULL), 1);
	T_TRUE(strstr(tlp_args_usage(), "--upstream HOST:PORT[,HOST:PORT...]") != NULL, "usage");
	/* A short err buffer holds a cut, terminated reason. */
	T_EQ(args(&a, err, 8, "--bogus", NULL), -EINVAL);
	T_EQ(strlen(err), 7);
	T_EQ(args(&a, NULL, 0, "--bogus", NULL), -EINVAL);
	T_EQ(tlp_args_parse(1, NULL, &a, err, sizeof err), -EINVAL);
	char *none[] = {"tlproxy", NULL};

	T_EQ(tlp_args_parse(1, none, NULL, err, sizeof err), -EINVAL);
	T_EQ(tlp_args_parse(0, none, &a, err, sizeof err), -EINVAL);
	T_HAS(err, "--listen HOST:PORT is required");
}

static void test_args_bad(void)
{
	args_bad("--listen HOST:PORT is required", NULL);
	args_bad("--upstream HOST:PORT is required", "--listen", "127.0.0.1:1", NULL);
	args_bad("--listen HOST:PORT is required", "--upstream", "127.0.0.1:1", NULL);
	args_bad("unknown option '--port'", "--port", "80", NULL);
	/* Unknown last, with no value after it: still unknown, not "needs a value". */
	args_bad("unknown option '--bogus'", "--listen", "127.0.0.1:1", "--bogus", NULL);
	args_bad("--listen needs a value", "--upstream", "127.0.0.1:1", "--listen", NULL);
	args_bad("--listen: 'localhost:80': listen on a numeric IP address", "--listen",
		 "localhost:80", "--upstream", "127.0.0.1:1", NULL);
	args_bad("--listen: 127.0.0.1:1 given twice", "--listen", "127.0.0.1:1", "--listen",
		 "127.0.0.1:1", "--upstream", "127.0.0.1:2", NULL);
	args_bad("--upstream: '127.0.0.1:0': port must be", "--listen", "127.0.0.1:1", "--upstream",
		 "127.0.0.1:2,127.0.0.1:0", NULL);
	args_bad("--upstream: 'a b:1'", "--listen", "127.0.0.1:1", "--upstream", "a b:1", NULL);
	args_bad("--upstream: empty address", "--listen", "127.0.0.1:1", "--upstream",
		 "127.0.0.1:2,", NULL);
	args_bad("--upstream: db:1 given twice", "--listen", "127.0.0.1:1", "--upstream",
		 "DB:1,db:1", NULL);
	args_bad("--upstream: 127.0.0.1:2 given twice", "--listen", "127.0.0.1:1", "--upstream",
		 "127.0.0.1:2", "--upstream", "127.0.0.1:2", NULL);
	args_bad("--shards: '0' is not 1 to 1024", "--shards", "0", NULL);
	args_bad("--shards: '+2' is not 1 to 1024", "--shards", "+2", NULL);
	args_bad("--cpus: '0-' is not a CPU list", "--cpus", "0-", NULL);
	args_bad("--shards and --cpus: give one", "--shards", "2", "--cpus", "0-1", "--listen",
		 "127.0.0.1:1", "--upstream", "127.0.0.1:2", NULL);
	args_bad("--balance: 'random' is not roundrobin, weighted, leastconn or hash", "--balance",
		 "random", NULL);
	args_bad("--proxy-protocol: 'v3' is not none, v1 or v2", "--proxy-protocol", "v3", NULL);
	args_bad("--max-conns: '0' is not 1 to 10000000", "--max-conns", "0", NULL);
	args_bad("--spin-us: '1001' is not a number from 0 to 1000", "--spin-us", "1001", NULL);
	args_bad("--nap-us: '1001' is not a number from 0 to 1000", "--nap-us", "1001", NULL);
	args_bad("--max-datagram: '65508' is not a number from 1 to 65507", "--udp",
		 "--max-datagram", "65508", NULL);
	args_bad("--splice-pipes: '0' is not 1 to 4096", "--splice-pipes", "0", NULL);
	args_bad("--splice-pipes: '5000' is not 1 to 4096", "--splice-pipes", "5000", NULL);
	args_bad("--splice-pipe-size: '48k' is not a power of two from 4k to 1m",
		 "--splice-pipe-size", "48k", NULL);
	args_bad("--splice-pipe-size: '2m' is not a power of two", "--splice-pipe-size", "2m",
		 NULL);
	args_bad("--splice-pipe-size: 'big' is not", "--splice-pipe-size", "big", NULL);
	args_bad("--connect-timeout: bare number '5' has no unit", "--connect-timeout", "5", NULL);
	args_bad("--connect-timeout: out of range (1ms to 10m)", "--connect-timeout", "1h", NULL);
	args_bad("--idle-timeout: '1.5m': fractions", "--idle-timeout", "1.5m", NULL);
	args_bad("--drain-timeout: out of range (100ms to 1d)", "--drain-timeout", "0s", NULL);
	args_bad("--half-close: 'no' is not on or off", "--half-close", "no", NULL);
	args_bad("--config takes no other options", "--config", "x.yaml", "--splice", NULL);
	args_bad("--check takes no other options", "--listen", "127.0.0.1:1", "--check", "x.yaml",
		 NULL);
	args_bad("--check: only one of --config and --check", "--config", "x", "--check", "y",
		 NULL);
	args_bad("--config needs a file name", "--config", "", NULL);
}

/* proto: udp, responses and sessions; the idle default of a UDP listener;
 * what a UDP listener cannot have; --udp on the command line. */
static void test_udp(void)
{
	struct tlp_config *c = NULL;
	static struct tlp_diag d;
	struct tlp_args a;
	char err[256];

	T_EQ(parse(LST("    proto: udp\n    responses: 1\n    sessions: 100\n"), &c, &d), 0);
	if (c) {
		const struct tlp_listener_cfg *l = &c->listeners[0];

		T_EQ(l->proto, TLP_PROTO_UDP);
		T_EQ(l->responses, 1);
		T_EQ(l->sessions, 100);
		T_EQ(l->idle_timeout_ns, 30000000000ull);
		tlp_config_free(c);
	}
	T_EQ(parse(LST("    proto: udp\n    timeouts: {idle: 5s}\n"), &c, &d), 0);
	if (c) {
		T_EQ(c->listeners[0].idle_timeout_ns, 5000000000ull);
		T_EQ(c->listeners[0].responses, TLP_RESPONSES_ANY);
		T_EQ(c->listeners[0].sessions, 4096);
		tlp_config_free(c);
	}
	T_EQ(parse(LST(""), &c, &d), 0);
	if (c) {
		T_EQ(c->listeners[0].proto, TLP_PROTO_TCP);
		T_EQ(c->listeners[0].idle_timeout_ns, 300000000000ull);
		tlp_config_free(c);
	}
	one_error(LST("    proto: sctp\n"), "t.yaml:5:12: listeners[0].proto: ", "sctp");
	one_error(LST("    responses: 1\n"), "t.yaml:5:16: listeners[0]: ", "is for proto: udp");
	one_error(LST("    proto: udp\n    sessions: 0\n"),
		  "t.yaml:6:15: listeners[0].sessions: ", "out of range");
	one_error(LST("    proto: udp\n    splice: true\n"),
		  "t.yaml:6:13: listeners[0]: ", "splice is not for proto: udp");
	T_EQ(args(&a, err, sizeof err, "--udp", "--listen", "127.0.0.1:53", "--upstream",
		  "127.0.0.1:5353", "--responses", "1", "--sessions", "64", NULL), 0);
	if (a.cfg) {
		const struct tlp_listener_cfg *l = &a.cfg->listeners[0];

		T_EQ(l->proto, TLP_PROTO_UDP);
		T_EQ(l->responses, 1);
		T_EQ(l->sessions, 64);
		T_EQ(l->idle_timeout_ns, 30000000000ull);
		tlp_config_free(a.cfg);
	}
	T_EQ(args(&a, err, sizeof err, "--listen", "127.0.0.1:53", "--upstream", "127.0.0.1:5353",
		  "--responses", "1", NULL), -EINVAL);
	T_TRUE(strstr(err, "for --udp") != NULL, "err '%s'", err);
	T_EQ(args(&a, err, sizeof err, "--udp", "--listen", "unix:/x", "--upstream",
		  "127.0.0.1:5353", NULL), -EINVAL);
	/* TLS is for TCP listeners (no DTLS). */
	T_EQ(args(&a, err, sizeof err, "--udp", "--listen", "127.0.0.1:53", "--upstream",
		  "127.0.0.1:5353", "--tls-cert", "/c", "--tls-key", "/k", NULL), -EINVAL);
	T_TRUE(strstr(err, "not with --udp") != NULL, "err '%s'", err);
	one_error(LST("    proto: udp\n    tls: {certificates: [{cert: /c}]}\n"),
		  "t.yaml:6:10: listeners[0]: ", "tls is not for proto: udp");
}

/* A listener's tls: mapping, its defaults, its errors, and the command line. */
static void test_tls(void)
{
	struct tlp_config *c = NULL;
	static struct tlp_diag d;
	struct tlp_args a;
	char err[256];
	int r = parse(LST("    tls:\n      certificates:\n        - {cert: /c.pem, key: /c.key, ocsp: /c.ocsp}\n"
			  "        - {cert: /o.pem, names: \"o.test,*.w.test\"}\n"
			  "      alpn: \"h2,http/1.1\"\n      min_version: \"1.3\"\n"
			  "      ciphers: AES-256-GCM\n      client_ca: /ca.pem\n"
			  "      verify: optional\n      handshake_timeout: 2s\n"
			  "      ticket_key: /t.key\n"),
		      &c, &d);

	T_EQ(r, 0);
	if (r == 0) {
		const struct tlp_tls_cfg *t = &c->listeners[0].tls;

		T_TRUE(t->enabled && t->ncerts == 2, "two certificates");
		T_TRUE(t->ncerts == 2 && !strcmp(t->certs[0].cert, "/c.pem") &&
			       !strcmp(t->certs[0].key, "/c.key") && !t->certs[0].names &&
			       !strcmp(t->certs[0].ocsp, "/c.ocsp") && !t->certs[1].key &&
			       !t->certs[1].ocsp && !strcmp(t->certs[1].names, "o.test,*.w.test"),
		       "certificates as written");
		T_TRUE(!strcmp(t->alpn, "h2,http/1.1") && !strcmp(t->ciphers, "AES-256-GCM") &&
			       !strcmp(t->client_ca, "/ca.pem"),
		       "strings as written");
		T_EQ(t->min_version, 0x0304);
		T_EQ(t->max_version, 0);
		T_EQ(t->verify, TLP_TLS_VERIFY_OPTIONAL);
		T_EQ(t->handshake_timeout_ns, 2000000000ull);
		T_TRUE(t->ticket_key && !strcmp(t->ticket_key, "/t.key"), "ticket_key as written");
		tlp_config_free(c);
	} else {
		dump(&d);
	}
	r = parse(LST("    tls: {certificates: [{cert: /c.pem}], client_ca: /ca.pem}\n"), &c, &d);
	T_EQ(r, 0);
	if (r == 0) {
		T_EQ(c->listeners[0].tls.verify, TLP_TLS_VERIFY_ON); /* on with a CA */
		T_EQ(c->listeners[0].tls.handshake_timeout_ns, 10000000000ull);
		T_EQ(c->listeners[1 - 1].splice, 0);
		tlp_config_free(c);
	}
	r = parse(LST(""), &c, &d);
	T_TRUE(r == 0 && !c->listeners[0].tls.enabled, "no tls: plain");
	if (r == 0)
		tlp_config_free(c);
	one_error(LST("    tls: {alpn: h2}\n"), "t.yaml:5:10: listeners[0].tls: ",
		  "certificates is required");
	one_error(LST("    tls: {certificates: [{key: /k}]}\n"),
		  "t.yaml:5:26: listeners[0].tls.certificates[0]: ", "cert is required");
	one_error(LST("    tls: {certificates: [{cert: /c}], min_version: \"1.1\"}\n"),
		  "t.yaml:5:52: listeners[0].tls.min_version: ", "'1.1' is not 1.2 or 1.3");
	one_error(LST("    tls: {certificates: [{cert: /c}], min_version: \"1.3\", max_version: \"1.2\"}\n"),
		  "t.yaml:5:10: listeners[0].tls: ", "min_version is above max_version");
	one_error(LST("    tls: {certificates: [{cert: /c}], verify: on}\n"),
		  "t.yaml:5:47: listeners[0].tls.verify: ", "client certificates need client_ca");
	one_error(LST("    tls: {certificates: [{cert: /c}], handshake_timeout: 0s}\n"),
		  "t.yaml:5:58: listeners[0].tls.handshake_timeout: ", "out of range");
	one_error(LST("    tls: {certificates: [{cert: /c}], sni: x}\n"), "t.yaml:5:39: listeners[0].tls: ",
		  "unknown key 'sni'");
	one_error(LST("    splice: true\n    tls: {certificates: [{cert: /c}]}\n"),
		  "t.yaml:6:10: listeners[0].tls: ", "splice is for plain TCP, not with tls");
	one_error(LST("    proxy_protocol_from: [10.0.0.0/8]\n    tls: {certificates: [{cert: /c}]}\n"),
		  "t.yaml:6:10: listeners[0].tls: ", "proxy_protocol_from is not read with tls yet");
	r = parse(POOL("    tls: {ca: /ca.pem, server_name: db.test, cert: /c.pem, key: /c.key,"
		       " alpn: h2, max_version: \"1.2\", handshake_timeout: 3s}\n"),
		  &c, &d);
	T_EQ(r, 0);
	if (r == 0) {
		const struct tlp_pool_tls_cfg *t = &c->pools[0].tls;

		T_TRUE(t->enabled && t->verify && !strcmp(t->ca, "/ca.pem") &&
			       !strcmp(t->server_name, "db.test") && !strcmp(t->cert, "/c.pem") &&
			       !strcmp(t->key, "/c.key") && !strcmp(t->alpn, "h2") &&
			       t->max_version == 0x0303 && t->handshake_timeout_ns == 3000000000ull,
		       "a pool's tls: as written, verify on by default");
		tlp_config_free(c);
	}
	r = parse(POOL("    tls: {verify: false}\n"), &c, &d);
	T_TRUE(r == 0 && c->pools[0].tls.enabled && !c->pools[0].tls.verify &&
		       c->pools[0].tls.handshake_timeout_ns == 10000000000ull,
	       "verify: false");
	if (r == 0)
		tlp_config_free(c);
	one_error(POOL("    tls: {key: /k}\n"), "t.yaml:8:16: pools[0].tls: ", "key without cert");
	/* A PROXY header goes before the pool's TLS. */
	r = parse(POOL("    proxy_protocol: v2\n    tls: {}\n"), &c, &d);
	T_TRUE(r == 0 && c->pools[0].tls.enabled && c->pools[0].proxy_protocol == TLP_PP_SEND_V2,
	       "proxy_protocol with tls");
	if (r == 0)
		tlp_config_free(c);
	r = tlp_args_parse(7, (char *[]){"tlproxy", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
					 "--tls-cert", "/c.pem", "--tls-key", "/c.key", NULL},
			   &a, err, sizeof err);
	T_EQ(r, -EINVAL); /* --tls-cert alone */
	args_bad("--tls-cert and --tls-key go together", "--listen", "127.0.0.1:1", "--upstream",
		 "127.0.0.1:2", "--tls-key", "/k", NULL);
	args_bad("--splice is for plain TCP", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
		 "--tls-cert", "/c", "--tls-key", "/k", "--splice", NULL);
	args_bad("--tls-ocsp is for --tls-cert", "--listen", "127.0.0.1:1", "--upstream",
		 "127.0.0.1:2", "--tls-ocsp", "/o", NULL);
	args_bad("--tls-ocsp needs a value", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
		 "--tls-cert", "/c", "--tls-key", "/k", "--tls-ocsp", NULL);
	r = tlp_args_parse(9, (char *[]){"tlproxy", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
					 "--tls-cert", "/c.pem", "--tls-key", "/c.key", NULL},
			   &a, err, sizeof err);
	T_EQ(r, 0);
	if (r == 0) {
		const struct tlp_tls_cfg *t = &a.cfg->listeners[0].tls;

		T_TRUE(t->enabled && t->ncerts == 1 && !strcmp(t->certs[0].cert, "/c.pem") &&
			       !strcmp(t->certs[0].key, "/c.key") && !t->certs[0].ocsp &&
			       t->handshake_timeout_ns == 10000000000ull,
		       "--tls-cert/--tls-key: one certificate");
		tlp_config_free(a.cfg);
	}
	r = tlp_args_parse(11, (char *[]){"tlproxy", "--listen", "127.0.0.1:1", "--upstream", "127.0.0.1:2",
					  "--tls-cert", "/c.pem", "--tls-key", "/c.key", "--tls-ocsp", "/c.ocsp",
					  NULL},
			   &a, err, sizeof err);
	T_EQ(r, 0);
	if (r == 0) {
		const struct tlp_tls_cfg *t = &a.cfg->listeners[0].tls;

		T_TRUE(t->ncerts == 1 && t->certs[0].ocsp && !strcmp(t->certs[0].ocsp, "/c.ocsp"),
		       "--tls-ocsp: the certificate's staple");
		tlp_config_free(a.cfg);
	}
}

int main(int argc, char **argv)
{
	static const struct tlp_case cases[] = {
		{"the full example", test_full},
		{"the docs show the same example", test_docs_example},
		{"defaults", test_defaults},
		{"listener errors, located", test_listener_errors},
		{"pool and server errors, located", test_pool_errors},
		{"top-level errors, located", test_top_errors},
		{"YAML syntax, aliases, documents", test_yaml_errors},
		{"every error in one load, and the cap", test_many_errors},
		{"every reason is one line", test_one_line},
		{"durations and sizes", test_durations_sizes},
		{"addresses", test_endpoints},
		{"loading a file", test_load_file},
		{"command line", test_args},
		{"command line errors", test_args_bad},
		{"UDP listeners", test_udp},
		{"tls: and --tls-cert", test_tls},
	};

	if (argc > 1)
		srcdir = argv[1];
	return tlp_test_main("tlproxy-config", cases, sizeof cases / sizeof cases[0]);
}
