/* tests/test_dpdk_handoff.c: the DPDK driver's hand-off between queue pairs: datagrams that come in on a pair whose loop has no handle on their port go to the loop that has one (in order, with their addresses), a full ring (or a datagram longer than a slot) drops and counts, REUSEPORT keeps a flow on one loop, a closed handle ends it, a napping loop is woken, and a sharded runtime's shard gets what came in on another shard's pair. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <CUnit/Basic.h>
#include <rte_arp.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_eth_ring.h>
#include <rte_eal.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <rte_udp.h>
#include "harness.h"
#include "dpdk_frames.h"
#include "dpdk.h"
#include "turnloop/runtime.h"
#include "turnloop/stats.h"

/*
 * The test sets the EAL up itself and makes a port of three queue pairs
 * from rings (rte_eth_from_rings): what it puts on in[q] pair q's loop
 * receives, what pair q's loop sends waits on out[q]. TL_DPDK_QUEUES=3,
 * hand-off rings of HANDOFF slots. Loops made in order claim pairs 0, 1,
 * 2; frames are put on pair 0's ring, where loop A has no handle.
 */

#define NQ 3
#define HANDOFF 64
static struct rte_ring *in[NQ], *out[NQ];
static struct rte_mempool *tp;
static struct rte_ether_addr port_mac;
static const struct rte_ether_addr peer_mac = {{0x02, 0, 0, 0, 0x42, 0x01}};
static struct dpf_wire wire; /* tp, port_mac and peer_mac, once set up */
#define LOOP_IP 0x7f000001u /* TL_DPDK_ADDR's first address */
#define PEER_IP 0x0a090909u
static const uint8_t LOOP6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
static const uint8_t PEER6[16] = {0x20, 0x01, 0x0d, 0xb8, [14] = 0x42, [15] = 7};

static struct tl_dpdk_stats st(tl_loop *l)
{
	struct tl_dpdk_stats s;
	memset(&s, 0, sizeof s);
	H_EQ(tl__dpdk_stats(l, &s), 0);
	return s;
}

static void put(uint16_t q, struct rte_mbuf *m)
{
	H_EQ(rte_ring_enqueue(in[q], m), 0);
}

static void drain_out(void)
{
	struct rte_mbuf *m[32];
	unsigned n;
	for (int q = 0; q < NQ; q++)
		while ((n = rte_ring_dequeue_burst(out[q], (void **)m, 32, NULL)) > 0)
			rte_pktmbuf_free_bulk(m, n);
}

/* A UDP frame from PEER_IP:sport to LOOP_IP:dport with payload pay[0..len). */
static struct rte_mbuf *udp_frame(uint16_t sport, uint16_t dport, const void *pay, uint16_t len)
{
	return dpf_udp4(&wire, PEER_IP, LOOP_IP, sport, dport, pay, len, 0);
}

/* The same over IPv6: PEER6:sport to LOOP6:dport. */
static struct rte_mbuf *udp6_frame(uint16_t sport, uint16_t dport, const void *pay, uint16_t len)
{
	return dpf_udp6(&wire, PEER6, LOOP6, sport, dport, pay, len);
}

static tl_addr addr4(uint32_t ip, uint16_t port)
{
	tl_addr a;
	memset(&a, 0, sizeof a);
	a.in.sin_family = AF_INET;
	a.in.sin_addr.s_addr = htonl(ip);
	a.in.sin_port = htons(port);
	return a;
}

/* What a loop received, kept as it came (a lease's payload copied before
 * the lease goes back, so the handle's lease cap never stalls it). */
struct rx {
	tl_op op;
	int64_t result;
	uint8_t pay[8];
	tl_addr from, to;
};
struct rxlog {
	struct rx v[256];
	uint32_t n, seen;
};

/* Take c's completions since the last call into g, giving their leases back. */
static void collect(h_ctx *c, struct rxlog *g)
{
	for (; g->seen < c->log.n; g->seen++) {
		tl_completion *x = &c->log.v[g->seen];
		if (x->kind != TL_K_RECV || g->n == 256)
			continue;
		struct rx *e = &g->v[g->n++];
		memset(e, 0, sizeof *e);
		e->op = x->op;
		e->result = x->result;
		e->from = x->u.recv.from;
		e->to = x->u.recv.to;
		if (!(x->flags & TL_F_LEASE))
			continue;
		if (x->result > 0)
			memcpy(e->pay, x->u.recv.lease.data, x->result < 8 ? (size_t)x->result : 8);
		H_EQ(tl_lease_release(c->loop, x->u.recv.lease.id), 0);
		x->flags &= (uint16_t)~TL_F_LEASE;
	}
}

/* Loops made one after the other claim pairs 0, 1, 2 (checked). */
static tl_loop *new_loop(h_ctx *c, uint32_t queue)
{
	tl_loop *l = h_loop();
	h_ctx_init(c, l);
	H_EQ(st(l).queue, queue);
	return l;
}

static void end_loops(h_ctx *c, tl_loop **l, int n)
{
	for (int k = n; k-- > 0;) {
		h_ctx_fini(&c[k]);
		tl_loop_close(l[k]);
	}
	drain_out();
}

/* Only B (pair 1) binds the port; datagrams that come in on A's pair (0)
 * reach B's receive in order, with their source, the address they were
 * sent to (TL_UDP_PKTINFO) and their payload in leases; A counts them
 * handed out (not dropped), B handed in. IPv6 too, to a dual handle. */
static void test_handed_in_order(void)
{
	int fds = h_begin();
	h_ctx c[2];
	tl_loop *l[2] = {new_loop(&c[0], 0), new_loop(&c[1], 1)};
	h_ctx_link(&c[1], &c[0]);
	tl_addr a = addr4(LOOP_IP, 5500);
	tl_udp_opts pi = {.flags = TL_UDP_PKTINFO};
	tl_handle h, h6;
	H_EQ_FATAL(tl_udp_bind_opts(l[1], &a, &pi, &h), 0);
	tl_addr any6;
	memset(&any6, 0, sizeof any6);
	any6.in6.sin6_family = AF_INET6;
	any6.in6.sin6_port = htons(5501);
	H_EQ_FATAL(tl_udp_bind_opts(l[1], &any6, &pi, &h6), 0);
	tl_op r, r6;
	H_EQ(tl_udp_recv_start(l[1], h, 1, &r), 0);
	H_EQ(tl_udp_recv_start(l[1], h6, 2, &r6), 0);
	struct tl_dpdk_stats a0 = st(l[0]), b0 = st(l[1]);
	enum { N = 40 };
	for (uint32_t k = 0; k < N; k++)
		put(0, udp_frame(40000, 5500, &k, sizeof k));
	put(0, udp6_frame(40001, 5501, "six", 3));
	static struct rxlog g;
	memset(&g, 0, sizeof g);
	uint64_t t0 = h_wall_ns();
	while (g.n < N + 1 && h_wall_ns() - t0 < 3000 * H_MS) {
		h_turn(&c[1], 10 * H_MS);
		collect(&c[1], &g);
	}
	H_EQ(g.n, N + 1);
	uint32_t want = 0;
	for (uint32_t i = 0; i < g.n; i++) {
		struct rx *x = &g.v[i];
		if (tl_op_eq(x->op, r6)) {
			H_EQ(x->result, 3);
			H_EQ(x->from.sa.sa_family, AF_INET6);
			H_TRUE(!memcmp(&x->from.in6.sin6_addr, PEER6, 16), "from the IPv6 peer");
			H_EQ(ntohs(x->from.in6.sin6_port), 40001);
			H_EQ(x->to.sa.sa_family, AF_INET6);
			H_TRUE(!memcmp(&x->to.in6.sin6_addr, LOOP6, 16), "to the port's IPv6 address");
			H_EQ(ntohs(x->to.in6.sin6_port), 5501);
			H_TRUE(!memcmp(x->pay, "six", 3), "payload");
			continue;
		}
		if (!tl_op_eq(x->op, r))
			continue;
		H_EQ(x->result, 4);
		uint32_t v;
		memcpy(&v, x->pay, 4);
		H_EQ(v, want);
		want++;
		H_EQ(x->from.sa.sa_family, AF_INET);
		H_EQ(ntohl(x->from.in.sin_addr.s_addr), PEER_IP);
		H_EQ(ntohs(x->from.in.sin_port), 40000);
		H_EQ(x->to.sa.sa_family, AF_INET);
		H_EQ(ntohl(x->to.in.sin_addr.s_addr), LOOP_IP);
		H_EQ(ntohs(x->to.in.sin_port), 5500);
	}
	H_EQ(want, N);
	struct tl_dpdk_stats a1 = st(l[0]), b1 = st(l[1]);
	H_EQ(a1.rx_frames - a0.rx_frames, N + 1);
	H_EQ(a1.handed_out - a0.handed_out, N + 1);
	H_EQ(a1.drop_no_port - a0.drop_no_port, 0);
	H_EQ(a1.rx_datagrams - a0.rx_datagrams, 0);
	H_EQ(b1.handed_in - b0.handed_in, N + 1);
	H_EQ(b1.rx_datagrams - b0.rx_datagrams, N + 1);
	H_EQ(b1.rx_frames - b0.rx_frames, 0);
	H_EQ(b1.handed_out + b1.drop_handoff + a1.drop_handoff, 0);
	h_close(&c[1], h, 3);
	h_close(&c[1], h6, 4);
	end_loops(c, l, 2);
	h_end(NULL, fds);
}

/* B does not poll while A hands it more than its ring holds: the ring's
 * worth goes, the rest is dropped and counted on A (drop_handoff), and B
 * then takes what the ring held, oldest first. */
static void test_full_ring_drops(void)
{
	int fds = h_begin();
	h_ctx c[2];
	tl_loop *l[2] = {new_loop(&c[0], 0), new_loop(&c[1], 1)};
	tl_addr a = addr4(LOOP_IP, 5502);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l[1], &a, &h), 0);
	struct tl_dpdk_stats a0 = st(l[0]), b0 = st(l[1]);
	for (uint32_t k = 0; k < HANDOFF + 36; k++)
		put(0, udp_frame(40000, 5502, &k, sizeof k));
	h_turn(&c[0], 0); /* A alone */
	h_turn(&c[0], 0);
	struct tl_dpdk_stats a1 = st(l[0]);
	H_EQ(a1.handed_out - a0.handed_out, HANDOFF);
	H_EQ(a1.drop_handoff - a0.drop_handoff, 36);
	H_EQ(a1.drop_no_port - a0.drop_no_port, 0);
	h_turn(&c[1], 0);
	struct tl_dpdk_stats b1 = st(l[1]);
	H_EQ(b1.handed_in - b0.handed_in, HANDOFF);
	uint8_t buf[8];
	tl_op r;
	H_EQ(tl_udp_recv(l[1], h, buf, sizeof buf, 1, &r), 0);
	int i = h_wait_op(&c[1], r);
	if (i >= 0) {
		H_EQ(c[1].log.v[i].result, 4);
		uint32_t v;
		memcpy(&v, buf, 4);
		H_EQ(v, 0);
	}
	h_close(&c[1], h, 2);
	end_loops(c, l, 2);
	h_end(NULL, fds);
}

/* B and C (pairs 1 and 2) both bind the port with TL_UDP_REUSEPORT; what
 * comes in on A's pair is spread by flow: each flow's datagrams all reach
 * one loop, in order, and both loops get flows. */
static void test_reuseport_flow_stays(void)
{
	int fds = h_begin();
	h_ctx c[3];
	tl_loop *l[3] = {new_loop(&c[0], 0), new_loop(&c[1], 1), new_loop(&c[2], 2)};
	tl_addr a = addr4(LOOP_IP, 5503);
	tl_udp_opts ru = {.flags = TL_UDP_REUSEPORT};
	tl_handle h[3];
	tl_op r[3];
	for (int k = 1; k < 3; k++) {
		H_EQ_FATAL(tl_udp_bind_opts(l[k], &a, &ru, &h[k]), 0);
		H_EQ(tl_udp_recv_start(l[k], h[k], 1, &r[k]), 0);
	}
	enum { FLOWS = 15, EACH = 4 }; /* odd: a turn-taking pick would split flows */
	for (uint32_t n = 0; n < EACH; n++)
		for (uint32_t f = 0; f < FLOWS; f++) {
			uint32_t v = f << 8 | n;
			put(0, udp_frame((uint16_t)(41000 + f), 5503, &v, sizeof v));
		}
	static struct rxlog g[3];
	memset(g, 0, sizeof g);
	uint64_t t0 = h_wall_ns();
	while (g[1].n + g[2].n < FLOWS * EACH && h_wall_ns() - t0 < 3000 * H_MS) {
		h_turn(&c[0], 0);
		for (int k = 1; k < 3; k++) {
			h_turn(&c[k], 0);
			collect(&c[k], &g[k]);
		}
	}
	H_EQ(g[1].n + g[2].n, FLOWS * EACH);
	int owner[FLOWS];
	uint32_t next[FLOWS];
	for (int f = 0; f < FLOWS; f++)
		owner[f] = 0, next[f] = 0;
	int got[3] = {0, 0, 0};
	for (int k = 1; k < 3; k++)
		for (uint32_t i = 0; i < g[k].n; i++) {
			struct rx *x = &g[k].v[i];
			if (!tl_op_eq(x->op, r[k]) || x->result != 4)
				continue;
			uint32_t v;
			memcpy(&v, x->pay, 4);
			uint32_t f = v >> 8;
			H_TRUE(f < FLOWS && ntohs(x->from.in.sin_port) == 41000 + f, "flow %u", f);
			if (f >= FLOWS)
				continue;
			if (!owner[f])
				owner[f] = k;
			H_TRUE(owner[f] == k, "flow %u on loop %d and %d", f, owner[f], k);
			H_EQ(v & 0xff, next[f]);
			next[f]++;
			got[k]++;
		}
	H_TRUE(got[1] > 0 && got[2] > 0, "both loops got flows (%d, %d)", got[1], got[2]);
	for (int k = 1; k < 3; k++)
		h_close(&c[k], h[k], 2);
	struct tl_dpdk_stats s0 = st(l[0]);
	H_EQ(s0.handed_out, FLOWS * EACH);
	H_EQ(st(l[1]).handed_in + st(l[2]).handed_in, FLOWS * EACH);
	end_loops(c, l, 3);
	h_end(NULL, fds);
}

/* Once B closes its handle, what comes in on A's pair for the port is
 * A's drop_no_port again, not handed out. */
static void test_closed_handle_drops(void)
{
	int fds = h_begin();
	h_ctx c[2];
	tl_loop *l[2] = {new_loop(&c[0], 0), new_loop(&c[1], 1)};
	h_ctx_link(&c[1], &c[0]);
	tl_addr a = addr4(LOOP_IP, 5504);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l[1], &a, &h), 0);
	tl_op r;
	H_EQ(tl_udp_recv_start(l[1], h, 1, &r), 0);
	put(0, udp_frame(40000, 5504, "one", 3));
	H_TRUE(h_wait_count(&c[1], 1, 3000), "handed while bound");
	h_release_leases(&c[1], 0);
	h_close(&c[1], h, 2);
	struct tl_dpdk_stats a0 = st(l[0]), b0 = st(l[1]);
	put(0, udp_frame(40000, 5504, "two", 3));
	put(0, udp_frame(40000, 5504, "six", 3));
	h_turn(&c[0], 0);
	h_turn(&c[1], 0);
	struct tl_dpdk_stats a1 = st(l[0]), b1 = st(l[1]);
	H_EQ(a1.drop_no_port - a0.drop_no_port, 2);
	H_EQ(a1.handed_out - a0.handed_out, 0);
	H_EQ(b1.handed_in - b0.handed_in, 0);
	end_loops(c, l, 2);
	h_end(NULL, fds);
}

/* An ephemeral port is one no other loop of the process holds: B takes
 * the port A would pick next, and A's next bind skips it. (Two sessions
 * connected to one server on one port of two loops would take each
 * other's replies.) */
static void test_ephemeral_not_shared(void)
{
	int fds = h_begin();
	h_ctx c[2];
	tl_loop *l[2] = {new_loop(&c[0], 0), new_loop(&c[1], 1)};
	tl_addr any = addr4(0, 0), got, peer = addr4(PEER_IP, 53);
	tl_handle a1, a2, b;
	H_EQ_FATAL(tl_udp_bind(l[0], &any, &a1), 0);
	H_EQ_FATAL(tl_local_addr(l[0], a1, &got), 0);
	uint16_t first = ntohs(got.in.sin_port), next = first >= 60999 ? 32768 : first + 1;
	tl_addr taken = addr4(0, next);
	H_EQ_FATAL(tl_udp_bind(l[1], &taken, &b), 0);
	H_EQ_FATAL(tl_udp_bind(l[0], &any, &a2), 0);
	H_EQ_FATAL(tl_local_addr(l[0], a2, &got), 0);
	H_TRUE(ntohs(got.in.sin_port) != next, "A's ephemeral port is B's");
	H_EQ(tl_udp_connect(l[0], a2, &peer), 0);
	h_close(&c[0], a1, 1);
	h_close(&c[0], a2, 2);
	h_close(&c[1], b, 3);
	end_loops(c, l, 2);
	h_end(NULL, fds);
}

/* A datagram longer than a slot holds (1,472 bytes, the most the driver
 * sends; a ring port has no MTU and brings it) is not handed: dropped on A
 * under drop_handoff, nothing copied. */
static void test_oversize_not_handed(void)
{
	int fds = h_begin();
	h_ctx c[2];
	tl_loop *l[2] = {new_loop(&c[0], 0), new_loop(&c[1], 1)};
	tl_addr a = addr4(LOOP_IP, 5506);
	tl_handle h;
	H_EQ_FATAL(tl_udp_bind(l[1], &a, &h), 0);
	static uint8_t big[1600];
	memset(big, 0x5a, sizeof big);
	struct tl_dpdk_stats a0 = st(l[0]), b0 = st(l[1]);
	put(0, udp_frame(40000, 5506, big, 1473));
	put(0, udp_frame(40000, 5506, big, 1472));
	h_turn(&c[0], 0);
	h_turn(&c[1], 0);
	struct tl_dpdk_stats a1 = st(l[0]), b1 = st(l[1]);
	H_EQ(a1.drop_handoff - a0.drop_handoff, 1);
	H_EQ(a1.handed_out - a0.handed_out, 1);
	H_EQ(b1.handed_in - b0.handed_in, 1);
	h_close(&c[1], h, 2);
	end_loops(c, l, 2);
	h_end(NULL, fds);
}

/* ---- a napping loop is woken: B waits on another thread ---- */

struct waiter {
	h_ctx c;
	tl_handle h;
	tl_op r;
	uint64_t got_ns;
	volatile int ready;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	w->ready = 1;
	uint64_t t0 = h_wall_ns();
	while (!w->c.log.n && h_wall_ns() - t0 < 5000 * H_MS)
		h_turn(&w->c, 5000 * H_MS);
	w->got_ns = h_wall_ns();
	return NULL;
}

/* B naps for a second at a time (TL_DPDK_NAP_US) and waits on its own
 * thread; a datagram that A hands it wakes it at once, not at the end
 * of its nap. */
static void test_napping_loop_woken(void)
{
	int fds = h_begin();
	setenv("TL_DPDK_NAP_US", "1000000", 1);
	setenv("TL_DPDK_SPIN_US", "0", 1);
	h_ctx ca;
	struct waiter w;
	memset(&w, 0, sizeof w);
	tl_loop *la = new_loop(&ca, 0);
	tl_loop *lb = h_loop();
	h_ctx_init(&w.c, lb);
	unsetenv("TL_DPDK_NAP_US");
	unsetenv("TL_DPDK_SPIN_US");
	tl_addr a = addr4(LOOP_IP, 5505);
	H_EQ_FATAL(tl_udp_bind(lb, &a, &w.h), 0);
	H_EQ(tl_udp_recv_start(lb, w.h, 1, &w.r), 0);
	pthread_t t;
	H_EQ_FATAL(pthread_create(&t, NULL, wait_main, &w), 0);
	while (!w.ready)
		sched_yield();
	h_sleep_ms(50); /* B is napping now */
	put(0, udp_frame(40000, 5505, "wake", 4));
	uint64_t t0 = h_wall_ns();
	h_turn(&ca, 0);
	pthread_join(t, NULL);
	uint64_t lat = w.got_ns - t0;
	H_EQ(w.c.log.n, 1);
	printf("\n    woken %llu us after the hand-off (naps of 1 s)\n", (unsigned long long)(lat / 1000));
	H_TRUE(lat < 300 * H_MS, "woken after %llu us", (unsigned long long)(lat / 1000));
	h_release_leases(&w.c, 0);
	h_close(&w.c, w.h, 2);
	h_ctx_fini(&w.c);
	tl_loop_close(lb);
	h_ctx_fini(&ca);
	tl_loop_close(la);
	drain_out();
	h_end(NULL, fds);
}

/* ---- the sharded runtime: two shards, only one binds ---- */

static tl_handle rt_h;
/* Each shard's queue pair, and its driver's counters as the stop began
 * (each written on its shard's thread, read once the runtime has run). */
static uint32_t rt_queue[2];
static struct tl_dpdk_stats rt_final[2];
static int rt_final_rc[2] = {-1, -1};

/* The shard on pair 1 binds and echoes; the one on pair 0 binds nothing. */
static int rt_launch(tl_shard *s, void *arg)
{
	(void)arg;
	tl_loop *l = tl_shard_loop(s);
	struct tl_dpdk_stats x;
	if (tl__dpdk_stats(l, &x) < 0 || tl_shard_id(s) >= 2)
		return -ENOTSUP;
	rt_queue[tl_shard_id(s)] = x.queue;
	if (x.queue != 1)
		return 0;
	tl_addr a = addr4(LOOP_IP, 5400);
	tl_op op;
	int r = tl_udp_bind(l, &a, &rt_h);
	return r < 0 ? r : tl_udp_recv_start(l, rt_h, 1, &op);
}

static void rt_stop(tl_shard *s, void *arg)
{
	(void)arg;
	rt_final_rc[tl_shard_id(s)] = tl__dpdk_stats(tl_shard_loop(s), &rt_final[tl_shard_id(s)]);
}

static void rt_completion(tl_shard *s, const tl_completion *c)
{
	dpf_echo(tl_shard_loop(s), rt_h, c);
}

/* A runtime of two shards on the driver: a datagram that comes in on the
 * pair of the shard that bound nothing is echoed by the other shard, out
 * of that shard's own pair; each shard's record in the live stats region
 * shows the hand-off as its driver counted it. */
static void test_runtime_shards(void)
{
	int fds = h_begin();
	tl_runtime_config cfg;
	dpf_runtime_config(&cfg, 2);
	cfg.on_launch = rt_launch;
	cfg.on_completion = rt_completion;
	cfg.on_stop = rt_stop;
	tl_runtime *rt = NULL;
	H_EQ_FATAL(tl_runtime_new(&rt, &cfg), 0);
	H_EQ(tl_runtime_launch(rt), 0);
	/* The peer's MAC, for the echo: an ARP reply on each pair. */
	for (uint16_t q = 0; q < 2; q++) {
		struct rte_mbuf *m = rte_pktmbuf_alloc(tp);
		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		struct rte_ether_hdr *eh = (struct rte_ether_hdr *)rte_pktmbuf_append(m, 14 + 28);
		struct rte_arp_hdr *ah = (struct rte_arp_hdr *)(eh + 1);
		eh->src_addr = peer_mac;
		eh->dst_addr = port_mac;
		eh->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
		ah->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
		ah->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
		ah->arp_hlen = 6;
		ah->arp_plen = 4;
		ah->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
		ah->arp_data.arp_sha = peer_mac;
		ah->arp_data.arp_sip = htonl(PEER_IP);
		ah->arp_data.arp_tha = port_mac;
		ah->arp_data.arp_tip = htonl(LOOP_IP);
		put(q, m);
	}
	h_sleep_ms(20);
	put(0, udp_frame(40002, 5400, "shard", 5));
	struct rte_mbuf *m[8];
	unsigned got = 0, elsewhere = 0;
	uint64_t t0 = h_wall_ns();
	while (!got && h_wall_ns() - t0 < 3000 * H_MS) {
		elsewhere += rte_ring_dequeue_burst(out[0], (void **)m, 8, NULL);
		rte_pktmbuf_free_bulk(m, elsewhere);
		unsigned n = rte_ring_dequeue_burst(out[1], (void **)m, 8, NULL);
		for (unsigned k = 0; k < n; k++) {
			struct rte_ether_hdr *eh = rte_pktmbuf_mtod(m[k], struct rte_ether_hdr *);
			if (rte_be_to_cpu_16(eh->ether_type) != RTE_ETHER_TYPE_IPV4)
				continue;
			struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eh + 1);
			struct rte_udp_hdr *u = (struct rte_udp_hdr *)(ip + 1);
			H_EQ(ntohs(u->src_port), 5400);
			H_EQ(ntohs(u->dst_port), 40002);
			H_TRUE(!memcmp(u + 1, "shard", 5), "echoed payload");
			got++;
		}
		rte_pktmbuf_free_bulk(m, n);
		elsewhere = 0;
		if (!got)
			h_sleep_ms(1);
	}
	H_EQ(got, 1);
	/* The live stats: the shard on pair 0 handed one datagram out, the
	 * shard on pair 1 took it in, no hand-off drop. */
	H_TRUE(rt_queue[0] != rt_queue[1], "pairs %u and %u", rt_queue[0], rt_queue[1]);
	uint32_t s0 = rt_queue[0] == 0 ? 0 : 1, s1 = 1 - s0;
	tl_stats_reader *sr = NULL;
	H_EQ(tl_stats_open(&sr, getpid()), 0);
	tl_stats_shard sh[2];
	memset(sh, 0, sizeof sh);
	t0 = h_wall_ns();
	while (sr && h_wall_ns() - t0 < 3000 * H_MS) {
		H_EQ(tl_stats_shard_get(sr, s0, &sh[s0], NULL, 0), 0);
		H_EQ(tl_stats_shard_get(sr, s1, &sh[s1], NULL, 0), 0);
		if (sh[s0].nic_handed_out >= 1 && sh[s1].nic_handed_in >= 1)
			break;
		h_sleep_ms(5);
	}
	tl_stats_close(sr);
	tl_runtime_stop(rt);
	H_EQ(tl_runtime_run(rt), 0);
	for (uint32_t i = 0; i < 2; i++) {
		H_EQ(rt_final_rc[i], 0);
		H_EQ(sh[i].nic_handed_out, rt_final[i].handed_out);
		H_EQ(sh[i].nic_handed_in, rt_final[i].handed_in);
		H_EQ(sh[i].nic_handoff_drops, rt_final[i].drop_handoff);
	}
	H_EQ(sh[s0].nic_handed_out, 1);
	H_EQ(sh[s0].nic_handed_in, 0);
	H_EQ(sh[s1].nic_handed_in, 1);
	H_EQ(sh[s1].nic_handed_out, 0);
	H_EQ(sh[s0].nic_handoff_drops + sh[s1].nic_handoff_drops, 0);
	tl_runtime_destroy(rt);
	drain_out();
	h_end(NULL, fds);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	h_init();
	if (dpf_eal_init("test_dpdk_handoff") < 0)
		return 1;
	for (int q = 0; q < NQ; q++) {
		char n[32];
		snprintf(n, sizeof n, "h_in%d", q);
		in[q] = rte_ring_create(n, 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
		snprintf(n, sizeof n, "h_out%d", q);
		out[q] = rte_ring_create(n, 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (!in[q] || !out[q]) {
			fprintf(stderr, "test_dpdk_handoff: cannot make the rings\n");
			return 1;
		}
	}
	int port = rte_eth_from_rings("tl_hand", in, NQ, out, NQ, 0);
	tp = rte_pktmbuf_pool_create("test_frames", 4095, 0, TL_DPDK_MBUF_PRIV, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
	if (port < 0 || !tp) {
		fprintf(stderr, "test_dpdk_handoff: cannot make the ring port or the pool\n");
		return 1;
	}
	char pn[16], hn[16];
	snprintf(pn, sizeof pn, "%d", port);
	snprintf(hn, sizeof hn, "%d", HANDOFF);
	setenv("TL_DPDK_PORT", pn, 1);
	setenv("TL_DPDK_QUEUES", "3", 1);
	setenv("TL_DPDK_HANDOFF", hn, 1);
	unsetenv("TL_DPDK");
	if (dpf_driver_check("test_dpdk_handoff") < 0)
		return 1;
	rte_eth_macaddr_get((uint16_t)port, &port_mac);
	wire = (struct dpf_wire){tp, port_mac, peer_mac};
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	CU_pSuite s = CU_add_suite("dpdk-handoff", NULL, NULL);
	CU_add_test(s, "handed_in_order", test_handed_in_order);
	CU_add_test(s, "full_ring_drops", test_full_ring_drops);
	CU_add_test(s, "reuseport_flow_stays", test_reuseport_flow_stays);
	CU_add_test(s, "closed_handle_drops", test_closed_handle_drops);
	CU_add_test(s, "oversize_not_handed", test_oversize_not_handed);
	CU_add_test(s, "ephemeral_not_shared", test_ephemeral_not_shared);
	CU_add_test(s, "napping_loop_woken", test_napping_loop_woken);
	CU_add_test(s, "runtime_shards", test_runtime_shards);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
