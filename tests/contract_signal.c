/* tests/contract_signal.c: contract 5 signals (per-loop subscriptions) and external waits, on every driver (neither needs one), and signals beside the sharded runtime's SIGTERM drain. */
#include "contract.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <turnloop/ewait.h>
#include <turnloop/runtime.h>
#include <turnloop/signal.h>
#include <CUnit/CUnit.h>

/* Sum of the aux counts of c's TL_K_SIGNAL completions of op from index from. */
static uint32_t sig_count(h_ctx *c, tl_op op, uint32_t from)
{
	uint32_t n = 0;
	for (uint32_t i = from; i < c->log.n; i++)
		if (c->log.v[i].op.v == op.v && c->log.v[i].kind == TL_K_SIGNAL &&
		    !(c->log.v[i].flags & TL_F_TERMINAL))
			n += c->log.v[i].aux;
	return n;
}

static void sentinel(int sig)
{
	(void)sig;
}

/* Rule: two loops subscribed to one signal each get their own completion;
 * a second subscription on one loop gets it too; repeats before a turn
 * coalesce into one completion whose aux counts them. */
static void test_signal_two_loops(void)
{
	int fds = h_begin();
	tl_loop *a = h_loop(), *b = h_loop();
	h_ctx ca, cb;
	h_ctx_init(&ca, a);
	h_ctx_init(&cb, b);
	tl_handle ha, hb, hb2;
	tl_op oa, ob, ob2;
	H_EQ_FATAL(tl_signal_start(a, SIGUSR1, 0xa, &ha, &oa), 0);
	H_EQ_FATAL(tl_signal_start(b, SIGUSR1, 0xb, &hb, &ob), 0);
	H_EQ_FATAL(tl_signal_start(b, SIGUSR1, 0xb2, &hb2, &ob2), 0);
	H_EQ(raise(SIGUSR1), 0);
	H_TRUE(h_wait_count(&ca, 1, H_WAIT_MS), "loop a got nothing");
	H_TRUE(h_wait_count(&cb, 2, H_WAIT_MS), "loop b got %u", cb.log.n);
	int i = h_find_op(&ca.log, oa, 0);
	H_TRUE_FATAL(i >= 0, "no completion on a");
	H_EQ(ca.log.v[i].kind, TL_K_SIGNAL);
	H_EQ(ca.log.v[i].result, SIGUSR1);
	H_EQ(ca.log.v[i].aux, 1);
	H_EQ(ca.log.v[i].token, 0xa);
	H_EQ(ca.log.v[i].flags & TL_F_TERMINAL, 0);
	H_EQ(sig_count(&cb, ob, 0), 1);
	H_EQ(sig_count(&cb, ob2, 0), 1);
	/* Three more before anyone turns: coalesced, counted. */
	uint32_t fa = ca.log.n;
	for (int k = 0; k < 3; k++)
		H_EQ(raise(SIGUSR1), 0);
	H_TRUE(h_wait_count(&ca, fa + 1, H_WAIT_MS), "no second completion");
	h_idle(&ca, 10);
	H_EQ(sig_count(&ca, oa, fa), 3);
	H_EQ(h_count_op(&ca.log, oa, fa), 1);
	h_idle(&cb, 10);
	H_EQ(sig_count(&cb, ob, 0), 4);
	H_TRUE(h_close(&ca, ha, 1) >= 0, "Closed a");
	H_TRUE(h_close(&cb, hb, 1) >= 0, "Closed b");
	H_TRUE(h_close(&cb, hb2, 1) >= 0, "Closed b2");
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule: stopping a subscription delivers Stopped, then Closed (the op's
 * token), last; the signal's previous action is back once the last
 * subscription ended (and not before); a signal after that reaches only
 * the previous action. */
static void test_signal_stop_restores(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	h_ctx c;
	h_ctx_init(&c, l);
	struct sigaction sa, before, now;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = sentinel;
	sigemptyset(&sa.sa_mask);
	H_EQ_FATAL(sigaction(SIGUSR2, &sa, &before), 0);
	tl_handle h1, h2;
	tl_op o1, o2;
	H_EQ_FATAL(tl_signal_start(l, SIGUSR2, 0x21, &h1, &o1), 0);
	H_EQ_FATAL(tl_signal_start(l, SIGUSR2, 0x22, &h2, &o2), 0);
	sigaction(SIGUSR2, NULL, &now);
	H_TRUE(now.sa_handler != sentinel, "the process's handler is not installed");
	H_EQ(tl_stop(l, o1), 0);
	H_EQ(tl_stop(l, o1), -EALREADY);
	int t = h_wait_op(&c, o1);
	int cl = h_wait_closed(&c, h1);
	H_TRUE_FATAL(t >= 0 && cl > t, "Stopped %d, Closed %d", t, cl);
	H_EQ(c.log.v[t].flags & TL_F_STOPPED, TL_F_STOPPED);
	H_EQ(c.log.v[cl].token, 0x21);
	sigaction(SIGUSR2, NULL, &now);
	H_TRUE(now.sa_handler != sentinel, "restored while a subscription remains");
	/* The other still hears it. */
	uint32_t from = c.log.n;
	raise(SIGUSR2);
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "the remaining subscription got nothing");
	H_EQ(sig_count(&c, o2, from), 1);
	H_EQ(h_count_op(&c.log, o1, (uint32_t)cl), 0);
	H_TRUE(h_close(&c, h2, 0x99) >= 0, "Closed");
	sigaction(SIGUSR2, NULL, &now);
	H_TRUE(now.sa_handler == sentinel, "previous action not restored");
	/* With nothing subscribed, a raise reaches only the sentinel. */
	from = c.log.n;
	raise(SIGUSR2);
	h_idle(&c, 10);
	H_EQ(c.log.n, from);
	sigaction(SIGUSR2, &before, NULL);
	h_ctx_fini(&c);
	h_end(l, fds);
}

struct sender {
	pthread_t t;
	tl_poster *p;
	int sig;
	int delay_ms;
	atomic_int done;
};

static void *send_later(void *arg)
{
	struct sender *s = arg;
	h_sleep_ms(s->delay_ms);
	kill(getpid(), s->sig);
	/* A fallback so a broken wake fails the test instead of hanging it. */
	for (int k = 0; k < 300 * h_slow() && !atomic_load(&s->done); k++)
		h_sleep_ms(10);
	tl_poster_wake(s->p);
	return NULL;
}

/* Rule: a signal sent from another thread wakes a loop parked in its OS
 * wait without limit, and is delivered. */
static void test_signal_wakes_parked(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_signal_start(l, SIGUSR1, 5, &h, &op), 0);
	/* The sender's kill() runs the handler on the sender's thread (the
	 * kernel prefers the thread that sent it): the wake crosses threads. */
	struct sender s = {.p = tl_poster_get(l), .sig = SIGUSR1, .delay_ms = 50};
	H_EQ_FATAL(pthread_create(&s.t, NULL, send_later, &s), 0);
	tl_completion out[8];
	uint64_t t0 = h_wall_ns();
	int n = 0;
	tl_turn_info ti;
	while (n == 0 && h_wall_ns() - t0 < 5000ull * H_MS * (uint64_t)h_slow())
		n = tl_turn(l, -1, out, 8, &ti);
	uint64_t took = h_wall_ns() - t0;
	H_EQ_FATAL(n, 1);
	H_EQ(out[0].kind, TL_K_SIGNAL);
	H_EQ(out[0].result, SIGUSR1);
	H_TRUE(took < 2000ull * H_MS * (uint64_t)h_slow(), "woke after %llu ms",
	       (unsigned long long)(took / H_MS));
	atomic_store(&s.done, 1);
	pthread_join(s.t, NULL);
	tl_poster_put(s.p);
	h_ctx c;
	h_ctx_init(&c, l);
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	h_ctx_fini(&c);
	h_end(l, fds);
}

static atomic_int hook_calls;
static void hook_a(int sig)
{
	(void)sig;
	atomic_fetch_add(&hook_calls, 1);
}
static void hook_b(int sig)
{
	(void)sig;
}

/* Rule: bad subscriptions are refused; a hook and a subscription on one
 * signal are both told; one hook per signal. */
static void test_signal_refusals_and_hook(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	h_ctx c;
	h_ctx_init(&c, l);
	tl_handle h;
	tl_op op;
	int bad[] = {0, -1, 65, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
		H_EQ(tl_signal_start(l, bad[k], 0, &h, &op), -EINVAL);
	H_EQ(tl_signal_start(l, SIGUSR1, 0, NULL, &op), -EINVAL);
	H_EQ(tl_signal_start(l, SIGUSR1, 0, &h, NULL), -EINVAL);
	H_EQ(tl_signal_hook(SIGKILL, hook_a), -EINVAL);
	H_EQ(stats(l).handles, 0);
	atomic_store(&hook_calls, 0);
	struct sigaction before, now;
	sigaction(SIGUSR1, NULL, &before);
	H_EQ(tl_signal_hook(SIGUSR1, hook_a), 0);
	H_EQ(tl_signal_hook(SIGUSR1, hook_b), -EBUSY);
	H_EQ_FATAL(tl_signal_start(l, SIGUSR1, 3, &h, &op), 0);
	raise(SIGUSR1);
	H_TRUE(h_wait_count(&c, 1, H_WAIT_MS), "the subscription got nothing");
	H_EQ(sig_count(&c, op, 0), 1);
	H_EQ(atomic_load(&hook_calls), 1);
	/* The subscription ends, the hook stays: still installed. */
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	raise(SIGUSR1);
	H_EQ(atomic_load(&hook_calls), 2);
	H_EQ(tl_signal_hook(SIGUSR1, NULL), 0);
	sigaction(SIGUSR1, NULL, &now);
	H_TRUE(now.sa_handler == before.sa_handler, "previous action not restored");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- beside the sharded runtime ---- */

static atomic_int shard_sigs, shard_drains, shard_ready;
static tl_handle shard_sub;

static int shard_start(tl_shard *s, void *arg)
{
	(void)arg;
	tl_op op;
	int r = tl_signal_start(tl_shard_loop(s), SIGTERM, 0, &shard_sub, &op);
	atomic_store(&shard_ready, 1);
	return r;
}

/* A subscription keeps the shard's loop alive, so its drain ends (before
 * the grace period) only once the signal came and this closed it. */
static void shard_completion(tl_shard *s, const tl_completion *c)
{
	if (c->kind == TL_K_SIGNAL && c->result == SIGTERM) {
		atomic_fetch_add(&shard_sigs, 1);
		tl_close(tl_shard_loop(s), shard_sub, 0);
	}
}

static void shard_drain(tl_shard *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_fetch_add(&shard_drains, 1);
}

/* Rule: with a runtime holding SIGINT/SIGTERM (cfg.signals), a loop
 * subscribed to SIGTERM and a shard's own subscription are both told of a
 * SIGTERM, and the runtime drains all the same; destroying the runtime
 * leaves the subscription working, and the action from before both comes
 * back when the subscription ends. */
static void test_signal_beside_runtime(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	h_ctx c;
	h_ctx_init(&c, l);
	struct sigaction before, now;
	sigaction(SIGTERM, NULL, &before);
	tl_handle h;
	tl_op op;
	H_EQ_FATAL(tl_signal_start(l, SIGTERM, 0x7e, &h, &op), 0);
	tl_runtime_config cfg;
	tl_runtime_config_init(&cfg);
	cfg.plan.shards = 1;
	cfg.plan.overcommit = 1;
	cfg.no_env = 1;
	cfg.bind = 0;
	cfg.stats = 0;
	cfg.stall_ns = 0;
	cfg.signals = 1;
	cfg.grace_ns = 2000ull * H_MS;
	/* The runtime refuses drivers without OS sockets: the simulation
	 * driver's run of this test puts the runtime on epoll. */
	if (!(tl_loop_caps(l) & TL_CAP_OS))
		cfg.loop.driver = TL_DRIVER_EPOLL;
	cfg.on_launch = shard_start;
	cfg.on_completion = shard_completion;
	cfg.on_drain = shard_drain;
	atomic_store(&shard_sigs, 0);
	atomic_store(&shard_drains, 0);
	atomic_store(&shard_ready, 0);
	tl_runtime *rt;
	H_EQ_FATAL(tl_runtime_new(&rt, &cfg), 0);
	H_EQ_FATAL(tl_runtime_launch(rt), 0);
	while (!atomic_load(&shard_ready))
		h_sleep_ms(1);
	H_EQ(kill(getpid(), SIGTERM), 0);
	uint64_t t0 = h_wall_ns();
	H_EQ(tl_runtime_run(rt), 0); /* drained (it was told) */
	H_TRUE(h_wall_ns() - t0 < 1500ull * H_MS, "the drain waited out its grace");
	H_EQ(atomic_load(&shard_drains), 1);
	H_EQ(atomic_load(&shard_sigs), 1);
	tl_runtime_destroy(rt);
	H_TRUE(h_wait_count(&c, 1, H_WAIT_MS), "the subscribed loop was not told");
	H_EQ(sig_count(&c, op, 0), 1);
	/* The runtime is gone; the subscription still holds SIGTERM (else
	 * this would end the test program). */
	sigaction(SIGTERM, NULL, &now);
	H_TRUE(now.sa_handler != before.sa_handler, "SIGTERM's action went with the runtime");
	uint32_t from = c.log.n;
	H_EQ(kill(getpid(), SIGTERM), 0);
	H_TRUE(h_wait_count(&c, from + 1, H_WAIT_MS), "second SIGTERM not delivered");
	H_EQ(sig_count(&c, op, from), 1);
	H_TRUE(h_close(&c, h, 0) >= 0, "Closed");
	sigaction(SIGTERM, NULL, &now);
	H_TRUE(now.sa_handler == before.sa_handler, "SIGTERM's action not restored");
	h_ctx_fini(&c);
	h_end(l, fds);
}

/* ---- external waits ---- */

struct notifier {
	pthread_t t;
	_Atomic uint64_t *v;
	uint64_t to;
	int delay_ms;
	int woke;
};

static void *notify_later(void *arg)
{
	struct notifier *n = arg;
	h_sleep_ms(n->delay_ms);
	atomic_store_explicit(n->v, n->to, memory_order_relaxed);
	n->woke = tl_ewait_notify(n->v);
	return NULL;
}

/* Rule: a wait on a value another thread changes and notifies ends with
 * result 0 and the new value, in two loops at once (one notify wakes
 * both); a notify that changes nothing leaves a wait pending. */
static void test_ewait_woken_by_thread(void)
{
	int fds = h_begin();
	tl_loop *a = h_loop(), *b = h_loop();
	h_ctx ca, cb;
	h_ctx_init(&ca, a);
	h_ctx_init(&cb, b);
	static _Atomic uint64_t v;
	atomic_store(&v, 10);
	tl_op oa, ob;
	H_EQ_FATAL(tl_ewait(a, &v, 10, 0, 0xe1, &oa), 0);
	H_EQ_FATAL(tl_ewait(b, &v, 10, 0, 0xe2, &ob), 0);
	/* A notify with nothing changed: both look, neither ends. */
	H_TRUE(tl_ewait_notify(&v) >= 2, "notify found fewer than 2 waiting loops");
	h_idle(&ca, 10);
	h_idle(&cb, 10);
	H_EQ(h_find_op(&ca.log, oa, 0), -1);
	H_EQ(h_find_op(&cb.log, ob, 0), -1);
	struct notifier n = {.v = &v, .to = 11, .delay_ms = 30};
	H_EQ_FATAL(pthread_create(&n.t, NULL, notify_later, &n), 0);
	int ia = h_wait_op(&ca, oa), ib = h_wait_op(&cb, ob);
	pthread_join(n.t, NULL);
	H_TRUE_FATAL(ia >= 0 && ib >= 0, "a %d b %d", ia, ib);
	H_EQ(ca.log.v[ia].kind, TL_K_EWAIT);
	H_EQ(ca.log.v[ia].result, 0);
	H_EQ(ca.log.v[ia].u.ewait.value, 11);
	H_EQ(ca.log.v[ia].token, 0xe1);
	H_EQ(cb.log.v[ib].result, 0);
	H_EQ(cb.log.v[ib].u.ewait.value, 11);
	H_EQ(n.woke, 2);
	/* Nobody waits now. */
	H_EQ(tl_ewait_notify(&v), 0);
	h_ctx_fini(&ca);
	h_ctx_fini(&cb);
	h_drain_close(b);
	h_end(a, fds);
}

/* Rule: a wait whose deadline passes first ends -ETIMEDOUT (not before the
 * deadline, on the loop's clock) with the value as it is; a value already
 * different at submission ends the wait with 0 at once; cancel ends it
 * -ECANCELED; bad arguments are refused. */
static void test_ewait_timeout_cancel(void)
{
	int fds = h_begin();
	tl_loop *l = h_loop();
	h_ctx c;
	h_ctx_init(&c, l);
	static _Atomic uint64_t v;
	atomic_store(&v, 1);
	tl_op op;
	uint64_t dl = in_ms(l, 50);
	H_EQ_FATAL(tl_ewait(l, &v, 1, dl, 0x70, &op), 0);
	int i = h_wait_op(&c, op);
	H_TRUE_FATAL(i >= 0, "no terminal");
	H_EQ(c.log.v[i].result, -ETIMEDOUT);
	H_EQ(c.log.v[i].u.ewait.value, 1);
	H_TRUE(tl_now(l) >= dl, "timed out before the deadline");
	/* Already changed. */
	H_EQ_FATAL(tl_ewait(l, &v, 0, 0, 0x71, &op), 0);
	i = h_wait_op(&c, op);
	H_TRUE(i >= 0 && c.log.v[i].result == 0 && c.log.v[i].u.ewait.value == 1, "already changed");
	/* Cancel. */
	H_EQ_FATAL(tl_ewait(l, &v, 1, 0, 0x72, &op), 0);
	H_EQ(tl_cancel(l, op), 0);
	H_EQ(tl_cancel(l, op), -EALREADY);
	i = h_wait_op(&c, op);
	H_TRUE(i >= 0 && c.log.v[i].result == -ECANCELED, "cancelled");
	H_EQ(tl_cancel(l, op), -ENOENT);
	/* Refusals. */
	H_EQ(tl_ewait(l, NULL, 0, 0, 0, &op), -EINVAL);
	H_EQ(tl_ewait(l, (const _Atomic uint64_t *)((char *)&v + 1), 0, 0, 0, &op), -EINVAL);
	H_EQ(tl_ewait(l, &v, 0, 0, 0, NULL), -EINVAL);
	H_EQ(tl_ewait_notify(NULL), -EINVAL);
	H_TRUE(!tl_alive(l), "alive");
	h_ctx_fini(&c);
	h_end(l, fds);
}

const struct test_def tl_contract_signal[] = {
	T("5 signals", test_signal_two_loops),
	T("5 signals", test_signal_stop_restores),
	T("5 signals", test_signal_wakes_parked),
	T("5 signals", test_signal_refusals_and_hook),
	T("5 signals", test_signal_beside_runtime),
	T("5 external waits", test_ewait_woken_by_thread),
	T("5 external waits", test_ewait_timeout_cancel),
	{ NULL, NULL, NULL },
};
