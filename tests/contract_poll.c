/* tests/contract_poll.c: contract 5 foreign descriptors (tl_poll_start) and the c-ares resolver built on them (tl_dns_*), on every driver. */
#include "contract.h"
#include "dns_responder.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <turnloop/dns.h>
#include <turnloop/poll.h>
#include <CUnit/CUnit.h>

/* Completions of op in c->log from index from. */
static uint32_t polls_of(h_ctx *c, tl_op op, uint32_t from)
{
	return h_count_op(&c->log, op, from);
}

/* Rule: an eventfd polled for input reports nothing until it is readable,
 * then reports POLLIN every turn while it stays readable (level-triggered,
 * nonterminal), and nothing once it was read; the loop never read it (the
 * value is still there) nor closed it. Stop: Stopped, then Closed with the
 * op's token, last. */
static void test_poll_level(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	H_TRUE_FATAL(efd >= 0, "eventfd");
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_poll_start(l, efd, POLLIN, 0x90, &h, &op), 0);
	h_idle(&c, 20);
	H_EQ(polls_of(&c, op, 0), 0);
	uint64_t v = 5;
	H_EQ(write(efd, &v, sizeof v), (ssize_t)sizeof v);
	uint32_t from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness");
	int i = h_find_op(&c.log, op, from);
	H_TRUE_FATAL(i >= 0, "no TL_K_POLL");
	H_EQ(c.log.v[i].kind, TL_K_POLL);
	H_EQ(c.log.v[i].result, POLLIN);
	H_EQ(c.log.v[i].token, 0x90);
	H_EQ(c.log.v[i].flags & TL_F_TERMINAL, 0);
	H_TRUE(c.log.v[i].handle.v == h.v, "handle");
	/* Not consumed: told again in later turns, one each. */
	uint32_t t0 = c.log.n;
	for (int k = 0; k < 5; k++)
		h_turn(&c, 10 * (int64_t)H_MS);
	H_TRUE(polls_of(&c, op, t0) >= 3, "level-triggered: %u reports in 5 turns",
	       polls_of(&c, op, t0));
	/* Consumed (by us: the loop never read it, the value is intact). */
	uint64_t got = 0;
	H_EQ(read(efd, &got, sizeof got), (ssize_t)sizeof got);
	H_EQ(got, 5);
	h_turn(&c, 0);
	uint32_t t1 = c.log.n;
	h_idle(&c, 20);
	H_EQ(polls_of(&c, op, t1), 0);
	H_EQ(tl_stop(l, op), 0);
	H_EQ(tl_stop(l, op), -EALREADY);
	int term = h_wait_op(&c, op);
	int closed = h_wait_closed(&c, h);
	H_TRUE_FATAL(term >= 0 && closed > term, "Stopped %d then Closed %d", term, closed);
	H_EQ(c.log.v[term].flags & (TL_F_TERMINAL | TL_F_STOPPED), TL_F_TERMINAL | TL_F_STOPPED);
	H_EQ(c.log.v[term].result, 0);
	H_EQ(c.log.v[closed].token, 0x90);
	H_EQ(h_count_handle(&c.log, h, (uint32_t)closed + 1), 0);
	H_EQ(tl_stop(l, op), -ENOENT);
	H_EQ(tl_close(l, h, 0), -ENOENT);
	/* Still open, still ours. */
	H_EQ(fcntl(efd, F_GETFD), FD_CLOEXEC);
	H_EQ(write(efd, &v, sizeof v), (ssize_t)sizeof v);
	close(efd);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: tl_close of a poll handle: Cancelled, then Closed with the close
 * token; two polls of one descriptor (input and output) are independent;
 * a peer's hang-up shows as POLLHUP. */
static void test_poll_close_two_hup(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	h_ctx c;
	h_ctx_init(&c, l);
	int sv[2];
	H_EQ_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
	tl_handle hin, hout;
	tl_op oin, oout;
	H_EQ_FATAL(tl_poll_start(l, sv[0], POLLIN | POLLRDHUP, 1, &hin, &oin), 0);
	H_EQ_FATAL(tl_poll_start(l, sv[0], POLLOUT, 2, &hout, &oout), 0);
	/* Writable at once; not readable. */
	H_TRUE(h_wait_count(&c, 1, H_WAIT_MS), "no POLLOUT");
	int i = h_find_op(&c.log, oout, 0);
	H_TRUE(i >= 0 && c.log.v[i].result == POLLOUT, "POLLOUT: %lld",
	       i >= 0 ? (long long)c.log.v[i].result : -1ll);
	H_EQ(h_find_op(&c.log, oin, 0), -1);
	H_EQ(tl_close(l, hout, 0x77), 0);
	H_EQ(tl_close(l, hout, 0x77), -EINVAL);
	int t = h_wait_op(&c, oout);
	int cl = h_wait_closed(&c, hout);
	H_TRUE_FATAL(t >= 0 && cl > t, "Cancelled %d then Closed %d", t, cl);
	H_EQ(c.log.v[t].result, -ECANCELED);
	H_EQ(c.log.v[cl].token, 0x77);
	/* The peer goes: input reports the hang-up. */
	close(sv[1]);
	uint32_t from = c.log.n;
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "no readiness after the hang-up");
	i = h_find_op(&c.log, oin, from);
	H_TRUE(i >= 0 && (c.log.v[i].result & (POLLIN | POLLRDHUP)) && (c.log.v[i].result & POLLHUP),
	       "revents %#llx", i >= 0 ? (long long)c.log.v[i].result : -1ll);
	H_EQ(h_close(&c, hin, 3) >= 0, 1);
	close(sv[0]);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: bad arguments are refused, and nothing is left behind. */
static void test_poll_refusals(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	tl_handle h;
	tl_op op;
	int p[2];
	H_EQ_FATAL(pipe2(p, O_CLOEXEC), 0);
	H_EQ(tl_poll_start(l, -1, POLLIN, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], 0, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN | 0x8000, 0, &h, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN, 0, NULL, &op), -EINVAL);
	H_EQ(tl_poll_start(l, p[0], POLLIN, 0, &h, NULL), -EINVAL);
	int dead = dup(p[0]);
	close(dead);
	H_EQ(tl_poll_start(l, dead, POLLIN, 0, &h, &op), -EBADF);
	char path[] = "/tmp/tl-poll-XXXXXX";
	int f = mkstemp(path);
	H_TRUE_FATAL(f >= 0, "mkstemp");
	unlink(path);
	H_EQ(tl_poll_start(l, f, POLLIN, 0, &h, &op), -EPERM);
	close(f);
	tl_loop_stats st = stats(l);
	H_EQ(st.handles, 0);
	H_EQ(st.ops, 0);
	H_TRUE(!tl_alive(l), "alive after refusals");
	close(p[0]);
	close(p[1]);
	h_end(l, fds);
}

/* ---- the resolver ---- */

struct lookup {
	tl_addr out[TL_RESOLVE_MAX];
	tl_op op;
};

static int resolve(h_ctx *c, tl_handle r, const char *name, int family, struct lookup *lk,
		   tl_completion *res)
{
	memset(lk->out, 0, sizeof lk->out);
	int rc = tl_dns_resolve(c->loop, r, name, family, lk->out, TL_RESOLVE_MAX, 0x5e, &lk->op);
	if (rc)
		return rc;
	int i = h_wait_op(c, lk->op);
	if (i < 0)
		return -1;
	*res = c->log.v[i];
	return 0;
}

static int has_addr(const struct lookup *lk, int n, int fam, const char *text)
{
	uint8_t want[16];
	inet_pton(fam, text, want);
	for (int i = 0; i < n; i++) {
		const tl_addr *a = &lk->out[i];
		if (a->sa.sa_family != fam)
			continue;
		if (fam == AF_INET && !memcmp(&a->in.sin_addr, want, 4))
			return 1;
		if (fam == AF_INET6 && !memcmp(&a->in6.sin6_addr, want, 16))
			return 1;
	}
	return 0;
}

static tl_handle open_resolver(tl_loop *l, uint16_t port, uint32_t timeout_ms, uint32_t tries)
{
	tl_addr srv;
	h_loopback(&srv, AF_INET, port);
	tl_dns_config cfg = {.servers = &srv, .nservers = 1, .timeout_ms = timeout_ms,
			     .tries = tries, .flags = TL_DNS_NO_HOSTS | TL_DNS_NO_SEARCH};
	tl_handle r = TL_HANDLE_NONE;
	H_EQ(tl_dns_open(l, &cfg, &r), 0);
	return r;
}

/* Rule (foreign descriptors, shown with c-ares): lookups of A, AAAA and
 * both are answered through the loop by a DNS server on loopback (which
 * saw the queries: no other source answered), an unknown name is -ENOENT,
 * a known name without the family asked is -ENOENT; closing the resolver
 * delivers Closed and leaves no descriptor behind. */
static void test_dns_lookups(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle r;
	if (!(tl_loop_caps(l) & TL_CAP_POLL)) {
		H_EQ(tl_dns_open(l, NULL, &r), -ENOTSUP);
		h_skip("driver %s lacks TL_CAP_POLL", tl_loop_driver(l));
		h_end(l, fds);
		return;
	}
	struct dnsr d;
	H_EQ_FATAL(dnsr_start(&d, 0), 0);
	h_ctx c;
	h_ctx_init(&c, l);
	r = open_resolver(l, d.port, 500, 2);
	struct lookup lk;
	tl_completion res;
	H_EQ(resolve(&c, r, "one.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.kind, TL_K_RESOLVE);
	H_EQ(res.result, 1);
	H_EQ(res.u.pool.value, 1);
	H_TRUE(res.u.pool.ptr == lk.out, "ptr");
	H_TRUE(has_addr(&lk, 1, AF_INET, "192.0.2.1"), "192.0.2.1");
	H_EQ(resolve(&c, r, "TWO.tl.test", AF_UNSPEC, &lk, &res), 0);
	H_EQ(res.result, 2);
	H_TRUE(has_addr(&lk, 2, AF_INET, "192.0.2.2") && has_addr(&lk, 2, AF_INET6, "2001:db8::2"),
	       "both families of two.tl.test");
	H_EQ(resolve(&c, r, "six.tl.test", AF_INET6, &lk, &res), 0);
	H_EQ(res.result, 1);
	H_TRUE(has_addr(&lk, 1, AF_INET6, "2001:db8::6"), "2001:db8::6");
	H_EQ(resolve(&c, r, "six.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.result, -ENOENT);
	H_EQ(resolve(&c, r, "nope.tl.test", AF_INET, &lk, &res), 0);
	H_EQ(res.result, -ENOENT);
	H_TRUE(atomic_load(&d.queries) >= 6, "the responder saw %u queries",
	       atomic_load(&d.queries));
	/* Refusals. */
	tl_op op;
	H_EQ(tl_dns_resolve(l, r, NULL, AF_INET, lk.out, 1, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, r, "x", AF_UNIX, lk.out, 1, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, r, "x", AF_INET, lk.out, 0, 0, &op), -EINVAL);
	H_EQ(tl_dns_resolve(l, (tl_handle){r.v + 1}, "x", AF_INET, lk.out, 1, 0, &op), -ENOENT);
	H_TRUE(h_close(&c, r, 9) >= 0, "Closed");
	dnsr_stop(&d);
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* Rule: a server that never answers: the lookup ends -ETIMEDOUT after its
 * tries (the timeout runs as a loop deadline: the loop does not spin); a
 * lookup cancelled while waiting ends -ECANCELED and its out is not
 * written; closing the resolver with a lookup in flight cancels it. */
static void test_dns_timeout_cancel(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	if (!h_need_cap(l, TL_CAP_POLL)) {
		h_end(l, fds);
		return;
	}
	struct dnsr d;
	H_EQ_FATAL(dnsr_start(&d, 1), 0);
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle r = open_resolver(l, d.port, 100, 1);
	struct lookup lk;
	tl_completion res;
	uint64_t t0 = h_wall_ns();
	tl_loop_stats s0 = stats(l);
	H_EQ(resolve(&c, r, "one.tl.test", AF_INET, &lk, &res), 0);
	uint64_t took = h_wall_ns() - t0;
	tl_loop_stats s1 = stats(l);
	H_EQ(res.result, -ETIMEDOUT);
	H_TRUE(took >= 80 * H_MS, "timed out after %llu ms", (unsigned long long)(took / H_MS));
	H_TRUE(s1.turns - s0.turns < 100, "%llu turns to time out: the loop spun",
	       (unsigned long long)(s1.turns - s0.turns));
	/* Cancel one in flight. */
	tl_addr sentinel;
	memset(&sentinel, 0xab, sizeof sentinel);
	lk.out[0] = sentinel;
	tl_op op;
	H_EQ(tl_dns_resolve(l, r, "one.tl.test", AF_INET, lk.out, 1, 7, &op), 0);
	h_turn(&c, 0);
	H_EQ(tl_cancel(l, op), 0);
	H_EQ(tl_cancel(l, op), -EALREADY);
	int i = h_wait_op(&c, op);
	H_TRUE_FATAL(i >= 0, "no terminal");
	H_EQ(c.log.v[i].result, -ECANCELED);
	h_idle(&c, 300); /* c-ares gives up on it meanwhile: nothing more comes */
	H_EQ(h_count_op(&c.log, op, 0), 1);
	H_TRUE(!memcmp(&lk.out[0], &sentinel, sizeof sentinel), "out written after the cancel");
	/* Close with one in flight. */
	H_EQ(tl_dns_resolve(l, r, "two.tl.test", AF_INET, lk.out, 1, 8, &op), 0);
	h_turn(&c, 0);
	H_EQ(tl_close(l, r, 4), 0);
	i = h_wait_op(&c, op);
	int cl = h_wait_closed(&c, r);
	H_TRUE(i >= 0 && cl > i, "lookup %d before Closed %d", i, cl);
	if (i >= 0)
		H_EQ(c.log.v[i].result, -ECANCELED);
	dnsr_stop(&d);
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_poll[] = {
	T("5 foreign descriptors", test_poll_level),
	T("5 foreign descriptors", test_poll_close_two_hup),
	T("5 foreign descriptors", test_poll_refusals),
	T("5 foreign descriptors", test_dns_lookups),
	T("5 foreign descriptors", test_dns_timeout_cancel),
	{ NULL, NULL, NULL },
};
