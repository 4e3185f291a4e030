/* tests/pkgconfig_probe.c: a program built outside the build system, as turnloop.pc says (tests/test_pkgconfig.sh): it launches a one-shard runtime and prints whether the shards got their jemalloc arenas. */
#include <stdio.h>

#include <turnloop.h>

int main(void)
{
	tl_runtime_config cfg;
	tl_runtime *rt;
	const char *why = "";
	int on, rc;

	tl_runtime_config_init(&cfg);
	cfg.plan.shards = 1;
	cfg.plan.overcommit = 1;
	cfg.no_env = 1;
	cfg.signals = 0;
	cfg.stats = 0;
	rc = tl_runtime_new(&rt, &cfg);
	if (rc < 0) {
		fprintf(stderr, "tl_runtime_new: %s\n", tl_strerror(rc));
		return 2;
	}
	rc = tl_runtime_launch(rt);
	if (rc < 0) {
		fprintf(stderr, "tl_runtime_launch: %s\n", tl_strerror(rc));
		tl_runtime_destroy(rt);
		return 2;
	}
	on = tl_runtime_arenas(rt, &why);
	tl_runtime_stop(rt);
	rc = tl_runtime_run(rt);
	tl_runtime_destroy(rt);
	printf("arenas %d %s\n", on, why);
	return rc < 0 ? 2 : 0;
}
