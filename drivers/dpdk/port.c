/* drivers/dpdk/port.c: the process's EAL and its one port, set up by the first loop that runs on DPDK; queue pairs claimed by loops. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include "dpdk_int.h"

/* Queue pairs at most, mbufs per pair's pool, and its per-lcore cache. */
#define DP_QMAX 64
#define DP_MBUFS 8191
#define DP_CACHE 256
#define DP_RXD 1024
#define DP_TXD 1024
/* Slots of each hand-off ring unless TL_DPDK_HANDOFF says. */
#define DP_HANDOFF 256

static struct {
	pthread_mutex_t mu;
	int state; /* 0: not tried; 1: up; < 0: failed with this errno */
	struct dp_port_info info;
	uint16_t nq;
	uint8_t used[DP_QMAX];
	struct rte_mempool *mp[DP_QMAX];
	struct dp_shared sh;
	char why[160];
} P = {.mu = PTHREAD_MUTEX_INITIALIZER};

const char *tl__dp_why(void)
{
	return P.why;
}

static int fail(int err, const char *fmt, const char *arg)
{
	snprintf(P.why, sizeof P.why, fmt, arg);
	return err;
}

static int env_u32(const char *name, uint32_t def, uint32_t lo, uint32_t hi, uint32_t *out)
{
	const char *e = getenv(name);
	if (!e || !*e) {
		*out = def;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long v = strtoul(e, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return fail(-EINVAL, "%s is not a number in range", name);
	*out = (uint32_t)v;
	return 0;
}

/* Forget what other pairs handed pair q and its loop did not take (a
 * loop that ends leaves it; the next owner of the pair starts clean). On
 * the pair's owning thread, which is the rings' consumer. */
static void handoff_drain(uint16_t q)
{
	struct dp_shared *sh = P.info.sh;
	if (!sh)
		return;
	for (uint32_t s = 0; s < sh->nq; s++) {
		if (s == q)
			continue;
		struct dp_ring *r = &sh->rings[s * sh->nq + q];
		atomic_store_explicit(&r->tail, atomic_load_explicit(&r->head, memory_order_acquire),
				      memory_order_release);
	}
	/* The loop had no handle left when it ended; its bits go anyway, so
	 * no other loop hands this pair anything until its next owner binds. */
	uint64_t bit = 1ull << q;
	for (uint32_t p = 0; p < 65536; p++)
		if (atomic_load_explicit(&sh->owners[p], memory_order_relaxed) & bit)
			atomic_fetch_and_explicit(&sh->owners[p], ~bit, memory_order_release);
}

/* Split TL_DPDK into argv (words separated by spaces), after a program
 * name, adding "-l CPU" (the calling thread's CPU) unless it names lcores:
 * the EAL then makes no worker threads of its own. */
static int eal_args(char *buf, size_t len, char **argv, int max)
{
	const char *e = getenv("TL_DPDK");
	if (!e || !*e)
		return fail(-EINVAL, "%s", "TL_DPDK (the EAL's arguments) is not set");
	if (strlen(e) >= len - 32)
		return fail(-EINVAL, "%s", "TL_DPDK is too long");
	snprintf(buf, len, "%s", e);
	int argc = 0, lcores = 0;
	argv[argc++] = "turnloop";
	for (char *s = strtok(buf, " \t"); s; s = strtok(NULL, " \t")) {
		if (argc >= max - 3)
			return fail(-EINVAL, "%s", "TL_DPDK has too many words");
		if (!strcmp(s, "-l") || !strcmp(s, "-c") || !strncmp(s, "--lcores", 8) ||
		    !strncmp(s, "-l", 2))
			lcores = 1;
		argv[argc++] = s;
	}
	if (!lcores) {
		static char cpu[16];
		int c = sched_getcpu();
		snprintf(cpu, sizeof cpu, "%d", c < 0 ? 0 : c);
		argv[argc++] = "-l";
		argv[argc++] = cpu;
	}
	argv[argc] = NULL;
	return argc;
}

/* Let the port receive the multicast frames neighbour discovery needs:
 * the solicited-node group of each IPv6 address and all-nodes. A port
 * that filters multicast by a list takes the list (net_tap takes it and
 * filters nothing); one that has no list is asked for all multicast
 * (net_ring); one that has neither (net_memif) passes what it passes. The
 * driver's own check (tl__dp_nd_mac) takes only its groups either way. */
static void accept_nd_groups(uint16_t port)
{
	struct rte_ether_addr mc[DP_ADDRS + 1];
	uint32_t n = 0;
	mc[n++] = (struct rte_ether_addr){{0x33, 0x33, 0, 0, 0, 1}};
	for (uint32_t i = 0; i < P.info.nip6; i++) {
		dp_ip g;
		struct rte_ether_addr m;
		tl__dp_snm(&P.info.ip6[i], &g, &m);
		uint32_t k = 0;
		while (k < n && !rte_is_same_ether_addr(&mc[k], &m))
			k++;
		if (k == n)
			mc[n++] = m;
	}
	P.info.nd_mc = TL_DPDK_MC_LIST;
	if (rte_eth_dev_set_mc_addr_list(port, mc, n) != 0) {
		P.info.nd_mc = TL_DPDK_MC_ALL;
		if (rte_eth_allmulticast_enable(port) != 0)
			P.info.nd_mc = TL_DPDK_MC_PORT;
	}
}

/* The hand-off between nq pairs (dp_shared): the table of UDP ports, a
 * ring of `slots` slots from each pair to each other one, and a wake-up
 * per pair. Made once, with the port, and kept for the process's life (a
 * loop of another thread may still look at it while one is destroyed). */
static int setup_handoff(uint32_t nq, uint32_t slots)
{
	struct dp_shared *sh = &P.sh;
	sh->owners = calloc(65536, sizeof *sh->owners);
	sh->rings = aligned_alloc(64, (size_t)nq * nq * sizeof *sh->rings);
	sh->wake = aligned_alloc(64, (size_t)nq * sizeof *sh->wake);
	if (!sh->owners || !sh->rings || !sh->wake)
		return fail(-ENOMEM, "%s", "no memory for the hand-off between queue pairs");
	memset(sh->rings, 0, (size_t)nq * nq * sizeof *sh->rings);
	for (uint32_t q = 0; q < nq; q++) {
		atomic_init(&sh->wake[q].napping, 0);
		if (tl__os_notifier_open(&sh->wake[q].w) < 0)
			return fail(-errno, "%s", "cannot make a hand-off notifier");
	}
	for (uint32_t i = 0; i < nq * nq; i++) {
		if (i / nq == i % nq)
			continue; /* no ring from a pair to itself */
		struct dp_ring *r = &sh->rings[i];
		r->mask = slots - 1;
		r->s = aligned_alloc(64, (size_t)slots * sizeof *r->s);
		if (!r->s)
			return fail(-ENOMEM, "%s", "no memory for the hand-off rings (TL_DPDK_HANDOFF)");
	}
	sh->nq = nq;
	sh->slots = slots;
	P.info.sh = sh;
	return 0;
}

static int setup_port(void)
{
	uint32_t port, nq, slots;
	int r;
	if ((r = env_u32("TL_DPDK_PORT", 0, 0, RTE_MAX_ETHPORTS - 1, &port)) < 0 ||
	    (r = env_u32("TL_DPDK_QUEUES", 1, 1, DP_QMAX, &nq)) < 0 ||
	    (r = env_u32("TL_DPDK_HANDOFF", DP_HANDOFF, 0, 65536, &slots)) < 0)
		return r;
	if (slots & (slots - 1))
		return fail(-EINVAL, "%s", "TL_DPDK_HANDOFF is not 0 or a power of two");
	/* TL_DPDK_ADDR: the port's IPv4 and IPv6 addresses, comma
	 * separated, in any order; the first of each family is the source of
	 * what the loops send in that family. */
	const char *a = getenv("TL_DPDK_ADDR");
	char ab[DP_ADDRS * 2 * (INET6_ADDRSTRLEN + 1) + 1];
	if (!a || !*a || strlen(a) >= sizeof ab)
		return fail(-EINVAL, "%s", "TL_DPDK_ADDR (the port's IP addresses) is missing or too long");
	snprintf(ab, sizeof ab, "%s", a);
	P.info.nips = P.info.nip6 = 0;
	for (char *sv, *s = strtok_r(ab, ",", &sv); s; s = strtok_r(NULL, ",", &sv)) {
		struct in_addr ip;
		dp_ip ip6;
		if (inet_pton(AF_INET, s, &ip) == 1) {
			if (P.info.nips == DP_ADDRS || ip.s_addr == 0 || ip.s_addr == 0xffffffffu)
				return fail(-EINVAL, "TL_DPDK_ADDR: %s is not an IPv4 address of a host (or one too many)", s);
			P.info.ips[P.info.nips++] = ip.s_addr;
		} else if (inet_pton(AF_INET6, s, ip6.b) == 1) {
			/* Unicast, and not IPv4-mapped (an IPv4 address is
			 * listed as such). No scope: the port is one link. */
			if (P.info.nip6 == DP_ADDRS || ip6.b[0] == 0xff || (!ip6.q[0] && !ip6.q[1]) ||
			    dp_ip_is4(&ip6))
				return fail(-EINVAL, "TL_DPDK_ADDR: %s is not an IPv6 address of a host (or one too many)", s);
			P.info.ip6[P.info.nip6++] = ip6;
		} else {
			return fail(-EINVAL, "TL_DPDK_ADDR: %s is not an IP address", s);
		}
	}
	if (!P.info.nips && !P.info.nip6)
		return fail(-EINVAL, "%s", "TL_DPDK_ADDR names no address");
	if (!rte_eth_dev_is_valid_port((uint16_t)port))
		return fail(-ENODEV, "%s", "no DPDK port of that number (TL_DPDK_PORT; a --vdev?)");
	struct rte_eth_dev_info di;
	if ((r = rte_eth_dev_info_get((uint16_t)port, &di)) != 0)
		return fail(r, "%s", "rte_eth_dev_info_get failed");
	if (nq > di.max_rx_queues || nq > di.max_tx_queues) {
		nq = di.max_rx_queues < di.max_tx_queues ? di.max_rx_queues : di.max_tx_queues;
		if (!nq)
			return fail(-ENODEV, "%s", "the port has no queues");
	}
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof conf);
	uint64_t want_tx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
	conf.txmode.offloads = di.tx_offload_capa & want_tx;
	if ((conf.txmode.offloads & want_tx) != want_tx)
		conf.txmode.offloads = 0; /* both or neither: software does the rest */
	uint64_t want_rx = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
	conf.rxmode.offloads = di.rx_offload_capa & want_rx;
	if (nq > 1 && (di.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP))) {
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_hf =
			di.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP);
	}
	if ((r = rte_eth_dev_configure((uint16_t)port, (uint16_t)nq, (uint16_t)nq, &conf)) != 0)
		return fail(r, "%s", "rte_eth_dev_configure failed");
	int sock = rte_eth_dev_socket_id((uint16_t)port);
	if (sock < 0)
		sock = 0;
	for (uint16_t q = 0; q < nq; q++) {
		char name[RTE_MEMPOOL_NAMESIZE];
		snprintf(name, sizeof name, "tl_p%u_q%u", (unsigned)port, q);
		/* Each pool serves one queue pair, used by one thread at a
		 * time (the claim hands it over under P.mu): a single-producer,
		 * single-consumer ring. The per-lcore cache (each loop's thread
		 * is an lcore: tl__dp_claim registers it) hands back the
		 * buffers freed last, still in the CPU's cache; without it
		 * the ring gives the one freed longest ago, a cache miss on
		 * every frame built or received. */
		P.mp[q] = rte_pktmbuf_pool_create_by_ops(name, DP_MBUFS, DP_CACHE,
							 TL_DPDK_MBUF_PRIV,
							 RTE_MBUF_DEFAULT_BUF_SIZE, sock, "ring_sp_sc");
		if (!P.mp[q])
			return fail(-rte_errno, "%s", "cannot make an mbuf pool (more EAL memory: -m)");
		struct rte_eth_rxconf rxc = di.default_rxconf;
		rxc.offloads = conf.rxmode.offloads;
		struct rte_eth_txconf txc = di.default_txconf;
		txc.offloads = conf.txmode.offloads;
		if ((r = rte_eth_rx_queue_setup((uint16_t)port, q, DP_RXD, (unsigned)sock, &rxc,
						P.mp[q])) != 0 ||
		    (r = rte_eth_tx_queue_setup((uint16_t)port, q, DP_TXD, (unsigned)sock, &txc)) != 0)
			return fail(r, "%s", "queue setup failed");
	}
	if ((r = rte_eth_dev_start((uint16_t)port)) != 0)
		return fail(r, "%s", "rte_eth_dev_start failed");
	rte_eth_promiscuous_disable((uint16_t)port);
	if (P.info.nip6)
		accept_nd_groups((uint16_t)port);
	P.info.port = (uint16_t)port;
	P.info.tx_offload = conf.txmode.offloads;
	P.info.rx_offload = conf.rxmode.offloads;
	rte_eth_macaddr_get((uint16_t)port, &P.info.mac);
	P.nq = (uint16_t)nq;
	if (nq > 1 && slots)
		return setup_handoff(nq, slots);
	return 0;
}

static int setup(void)
{
	/* A program that set the EAL up itself (it runs DPDK for other work,
	 * or made its port from rings) leaves TL_DPDK unset: the loops use
	 * its EAL and port TL_DPDK_PORT. */
	const char *e = getenv("TL_DPDK");
	if ((!e || !*e) && rte_lcore_count() > 0)
		return setup_port();
	char buf[1024];
	char *argv[64];
	int argc = eal_args(buf, sizeof buf, argv, 64);
	if (argc < 0)
		return argc;
	/* The EAL pins the calling thread to its main lcore: keep the thread
	 * where the runtime put it. */
	cpu_set_t cs;
	int have = pthread_getaffinity_np(pthread_self(), sizeof cs, &cs) == 0;
	int r = rte_eal_init(argc, argv);
	if (have)
		pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
	if (r < 0)
		return fail(-rte_errno ? -rte_errno : -EINVAL, "%s",
			    "rte_eal_init refused TL_DPDK's arguments");
	return setup_port();
}

int tl__dp_claim(uint16_t *q, struct rte_mempool **mp, struct dp_port_info *info,
		 int *registered)
{
	pthread_mutex_lock(&P.mu);
	if (P.state == 0) {
		P.why[0] = 0;
		int r = setup();
		P.state = r < 0 ? r : 1;
	}
	*registered = 0;
	if (P.state == 1 && rte_lcore_id() == LCORE_ID_ANY) {
		/* A thread the EAL did not start: make it an lcore, so the
		 * pools' caches serve it (the PMD's own allocations too). */
		if (rte_thread_register() == 0)
			*registered = 1;
	}
	int r = P.state < 0 ? P.state : -EBUSY;
	if (P.state == 1) {
		for (uint16_t i = 0; i < P.nq; i++) {
			if (P.used[i])
				continue;
			P.used[i] = 1;
			*q = i;
			*mp = P.mp[i];
			*info = P.info;
			r = 0;
			break;
		}
		if (r == -EBUSY)
			fail(r, "%s", "every queue pair of the port is taken (TL_DPDK_QUEUES)");
	}
	if (r < 0 && *registered) {
		rte_thread_unregister();
		*registered = 0;
	}
	pthread_mutex_unlock(&P.mu);
	if (r == 0) {
		/* Frames left by the pair's last owner are not this loop's. */
		struct rte_mbuf *m[DP_BURST];
		uint16_t n;
		while ((n = rte_eth_rx_burst(info->port, *q, m, DP_BURST)) > 0)
			rte_pktmbuf_free_bulk(m, n);
		handoff_drain(*q);
	}
	return r;
}

void tl__dp_unclaim(uint16_t q, int registered)
{
	struct rte_mbuf *m[DP_BURST];
	uint16_t n;
	while ((n = rte_eth_rx_burst(P.info.port, q, m, DP_BURST)) > 0)
		rte_pktmbuf_free_bulk(m, n);
	handoff_drain(q);
	/* What this lcore's cache holds of the pool goes back to its ring
	 * before another thread may own the pair. */
	struct rte_mempool_cache *c = rte_mempool_default_cache(P.mp[q], rte_lcore_id());
	if (c)
		rte_mempool_cache_flush(c, P.mp[q]);
	pthread_mutex_lock(&P.mu);
	P.used[q] = 0;
	if (registered)
		rte_thread_unregister();
	pthread_mutex_unlock(&P.mu);
}
