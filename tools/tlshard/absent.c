/* tools/tlshard/absent.c: what a tlshard built without cJSON and hwloc (the Windows build: Debian builds neither for mingw-w64) answers in place of json.c and topo.c: one line on stderr saying what is missing, and status 1. stats (table, Prometheus) and plan (text) need neither. */
#include <stdio.h>

#include "tlshard.h"

const char *tlshard_json_absent(void)
{
	return "JSON output needs cJSON, which this build has not (docs/WINDOWS.md); "
	       "use --format table or prometheus";
}

static int absent(const char *what)
{
	fprintf(stderr, "tlshard: %s\n", what);
	return 1;
}

int tlshard_put_stats_json(const struct sample *a, const struct sample *b, int pid, int pretty)
{
	(void)a;
	(void)b;
	(void)pid;
	(void)pretty;
	return absent(tlshard_json_absent());
}

int tlshard_put_plan_json(const tl_plan *p, int smt)
{
	(void)p;
	(void)smt;
	return absent(tlshard_json_absent());
}

int tlshard_cmd_topo(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return absent("topo needs hwloc, which this build has not (docs/WINDOWS.md); "
		      "tlshard plan shows the shard plan");
}

int tlshard_cmd_run(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return absent("run is not built here: it binds itself to the plan's CPUs and executes "
		      "the program, POSIX's way (docs/WINDOWS.md); set TL_CPUS and TL_SHARDS "
		      "for the program instead");
}
