/* tests/test_api.c: CUnit tests of the public API's rules that a compiler cannot check (turnloop.h): id equality, the per-thread error detail, and the deprecated names that must keep working for one release. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "shard_test.h"

#define TOPO "pack:1 numa:1 core:2 pu:1"

/* ---- ids compare with tl_handle_eq / tl_op_eq ---- */

static void test_id_equality(void)
{
	tl_config c;
	tl_loop *l;
	tl_handle h1, h2, copy;
	tl_op o1, o2;
	int fds = st_begin("api/id_equality");

	tl_config_init(&c);
	c.driver = TL_DRIVER_SIM;
	CU_ASSERT_EQUAL_FATAL(tl_loop_new(&l, &c), 0);
	CU_ASSERT_EQUAL(tl_timer_start(l, tl_now(l) + 1000000000ull, 0, 1, &h1, &o1), 0);
	CU_ASSERT_EQUAL(tl_timer_start(l, tl_now(l) + 1000000000ull, 0, 2, &h2, &o2), 0);
	copy = h1;
	CU_ASSERT_EQUAL(tl_handle_eq(h1, copy), 1);
	CU_ASSERT_EQUAL(tl_handle_eq(h1, h2), 0);
	CU_ASSERT_EQUAL(tl_handle_eq(h1, TL_HANDLE_NONE), 0);
	CU_ASSERT_EQUAL(tl_handle_eq(TL_HANDLE_NONE, TL_HANDLE_NONE), 1);
	CU_ASSERT_EQUAL(tl_op_eq(o1, o1), 1);
	CU_ASSERT_EQUAL(tl_op_eq(o1, o2), 0);
	CU_ASSERT_EQUAL(tl_op_eq(o2, TL_OP_NONE), 0);
	CU_ASSERT_EQUAL(tl_op_eq(TL_OP_NONE, TL_OP_NONE), 1);
	tl_loop_destroy(l);
	st_end(fds);
}

/* ---- the error detail: one line per thread, cleared by each call ---- */

static char other_detail[320];

static void *fail_plan_elsewhere(void *arg)
{
	tl_plan_request req = {.cpus = "7"};
	tl_plan p;

	(void)arg;
	if (tl_plan_compute(&p, &req, TOPO) == -EINVAL)
		snprintf(other_detail, sizeof other_detail, "%s", tl_error_detail());
	return NULL;
}

static void test_detail_per_thread(void)
{
	tl_plan_request req = {.cpus = "5"};
	tl_addr none = {0};
	tl_plan p;
	pthread_t t;
	int fds = st_begin("api/detail_per_thread");

	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), -EINVAL);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "cpu 5 does not exist (this machine has cpus 0-1)");
	/* Another thread's failure leaves this thread's detail alone. */
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, fail_plan_elsewhere, NULL), 0);
	pthread_join(t, NULL);
	CU_ASSERT_STRING_EQUAL(other_detail, "cpu 7 does not exist (this machine has cpus 0-1)");
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "cpu 5 does not exist (this machine has cpus 0-1)");
	/* A call without a detail (its declaration does not say "Detail")
	 * leaves it; the next call with one clears it when it succeeds. */
	CU_ASSERT_EQUAL(tl_addr_len(&none), 0);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "cpu 5 does not exist (this machine has cpus 0-1)");
	req.cpus = "1";
	CU_ASSERT_EQUAL(tl_plan_compute(&p, &req, TOPO), 0);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "");
	tl_plan_free(&p);
	st_end(fds);
}

/* tl_runtime_new names the config field at fault; a runtime's failure
 * comes back as the detail of tl_runtime_launch and tl_runtime_run. */
static int fail_launch(tl_shard *s, void *arg)
{
	(void)arg;
	return tl_shard_id(s) == 1 ? -EADDRINUSE : 0;
}

static void test_runtime_detail(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt = NULL;
	int fds = st_begin("api/runtime_detail");

	st_config(&cfg, 2);
	cfg.batch = 0;
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	CU_ASSERT_PTR_NULL(rt);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "runtime config: batch must be 1..65536");
	st_config(&cfg, 2);
	cfg.plan.cpus = "0-";
	CU_ASSERT_EQUAL(tl_runtime_new(&rt, &cfg), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "'0-' is not a CPU list"));
	st_config(&cfg, 2);
	cfg.on_launch = fail_launch;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_STRING_EQUAL(tl_error_detail(), "");
	CU_ASSERT_EQUAL(tl_runtime_stats_published(rt), 0); /* stats off in st_config */
	CU_ASSERT_EQUAL(tl_runtime_launch(rt), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), -EADDRINUSE);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "shard 1"));
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "on_launch returned"));
	/* A second run returns the same, with the same detail. */
	CU_ASSERT_EQUAL(tl_runtime_run(rt), -EADDRINUSE);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_error_detail(), "shard 1"));
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(tl_runtime_stats_published(NULL), -EINVAL);
	st_end(fds);
}

/* ---- the deprecated names still work (turnloop.h lists them) ---- */

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static atomic_int old_launches, old_cpu_ok;

static int old_start(tl_shard *s, void *arg)
{
	const tl_shard_place *p = tl_shard_place_of(s);
	tl_shard_place q;

	(void)arg;
	if (tl_shard_place_get(s, &q) == 0 && p->pu_os_index == q.pu_os_index &&
	    p->shard == tl_shard_id(s))
		atomic_fetch_add(&old_cpu_ok, 1);
	atomic_fetch_add(&old_launches, 1);
	return 0;
}

static void test_deprecated_names(void)
{
	tl_shard_start_fn fn = old_start;
	tl_runtime_config cfg;
	tl_runtime *rt;
	tl_stats_reader *r;
	tl_stats_shard a, b;
	tl_pool_config pc;
	int fds = st_begin("api/deprecated_names");

	atomic_store(&old_launches, 0);
	atomic_store(&old_cpu_ok, 0);
	st_config(&cfg, 2);
	cfg.stats = 1;
	cfg.on_start = fn; /* the same field as on_launch */
	CU_ASSERT_TRUE(cfg.on_launch == old_start);
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_STRING_EQUAL(tl_runtime_stats_error(rt), "");
	CU_ASSERT_EQUAL(tl_runtime_stats_published(rt), 1);
	CU_ASSERT_EQUAL(tl_runtime_start(rt), 0);
	CU_ASSERT_EQUAL(tl_runtime_start(rt), -EINVAL);
	CU_ASSERT_EQUAL_FATAL(tl_stats_open(&r, getpid()), 0);
	CU_ASSERT_EQUAL(tl_stats_read(r, 1, &a, NULL, 0), 0);
	CU_ASSERT_EQUAL(tl_stats_shard_get(r, 1, &b, NULL, 0), 0);
	CU_ASSERT_EQUAL(a.shard, 1);
	CU_ASSERT_EQUAL(a.cpu, b.cpu);
	CU_ASSERT_EQUAL(tl_stats_read(r, 2, &a, NULL, 0), -EINVAL);
	tl_stats_close(r);
	tl_runtime_stop(rt);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), 0);
	CU_ASSERT_STRING_EQUAL(tl_runtime_strerror(rt), "");
	tl_runtime_destroy(rt);
	CU_ASSERT_EQUAL(atomic_load(&old_launches), 2);
	CU_ASSERT_EQUAL(atomic_load(&old_cpu_ok), 2);
	/* A failed run's reason, the old way. */
	st_config(&cfg, 2);
	cfg.on_launch = fail_launch;
	CU_ASSERT_EQUAL_FATAL(tl_runtime_new(&rt, &cfg), 0);
	CU_ASSERT_EQUAL(tl_runtime_run(rt), -EADDRINUSE);
	CU_ASSERT_PTR_NOT_NULL(strstr(tl_runtime_strerror(rt), "shard 1"));
	tl_runtime_destroy(rt);
	/* The pool launched by its old name. */
	tl_pool_config_init(&pc);
	pc.topology = TOPO;
	pc.workers_per_node = 1;
	CU_ASSERT_EQUAL(tl_pool_start(&pc), 0);
	CU_ASSERT_EQUAL(tl_pool_launch(&pc), 0); /* the same configuration: 0 */
	CU_ASSERT_EQUAL(tl_pool_shutdown(), 0);
	st_end(fds);
}

#pragma GCC diagnostic pop

int main(void)
{
	CU_pSuite s;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("api", NULL, NULL);
	st_add(s, "id_equality", test_id_equality);
	st_add(s, "detail_per_thread", test_detail_per_thread);
	st_add(s, "runtime_detail", test_runtime_detail);
	st_add(s, "deprecated_names", test_deprecated_names);
	return st_run();
}
