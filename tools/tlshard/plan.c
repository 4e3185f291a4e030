/* tools/tlshard/plan.c: tlshard plan: which CPU, core and NUMA node each shard gets, as the runtime plans it (tl_plan_compute: hwloc on Linux, the system's own tables on Windows); the option manual and the plan's summary that topo and run share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "tlshard.h"

static const char help_plan_opts[] =
	"    --cpus LIST     only these CPUs (like 0-3,6), OS numbers as taskset uses them\n"
	"    --shards N      this many shards (a prefix of the plan: whole NUMA nodes first)\n"
	"    --smt           every PU of a core, not just its first one\n";

static const char help_plan[] =
	"NAME\n"
	"    tlshard plan - which CPU, core and NUMA node each shard gets\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard plan [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]\n"
	"\n"
	"DESCRIPTION\n"
	"    One line per shard, as tl_plan_format prints it, then the shard and node\n"
	"    count. A plan that cannot be met is refused with the reason.\n"
	"\n"
	"OPTIONS\n"
	"%s"
	"    --topology T    a hwloc synthetic description or an XML file (see topo)\n"
	"    --json          the plan as one JSON object\n";

void tlshard_print_help(const char *fmt)
{
	printf(fmt, help_plan_opts);
}

int tlshard_plan_for(struct tlshard_plan_opts *o, tl_plan *plan)
{
	int r = tl_plan_from_env(&o->req);
	const char *why;

	if (r < 0)
		return tlshard_bad("%s", tl_error_detail());
	r = tl_plan_compute(plan, &o->req, o->topology);
	if (r == 0)
		return 0;
	why = tl_error_detail();
	if (r == -EINVAL)
		return tlshard_bad("no such plan: %s", why[0] ? why : "the request cannot be met");
	fprintf(stderr, "tlshard: %s\n", why[0] ? why : tl_strerror(r));
	return 1;
}

void tlshard_plan_summary(const tl_plan *p, const struct tlshard_plan_opts *o)
{
	printf("%u shard%s on %u NUMA node%s", p->count, p->count == 1 ? "" : "s", p->numa_nodes,
	       p->numa_nodes == 1 ? "" : "s");
	if (!o->req.cpus && !o->req.shards)
		printf(" (one per %s)", o->req.smt ? "PU" : "physical core");
	putchar('\n');
}

int tlshard_cmd_plan(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	char err[1024];
	tl_plan plan;
	size_t len;
	char *buf;
	int r = tlshard_plan_parse(argc, argv, &o, err, sizeof err);

	if (r == 1) {
		tlshard_print_help(help_plan);
		return 0;
	}
	if (r < 0)
		return tlshard_bad("%s", err);
	if (o.json && tlshard_json_absent()) {
		fprintf(stderr, "tlshard: %s\n", tlshard_json_absent());
		return 1;
	}
	r = tlshard_plan_for(&o, &plan);
	if (r)
		return r;
	if (o.json) {
		r = tlshard_put_plan_json(&plan, o.req.smt);
		tl_plan_free(&plan);
		return r;
	}
	len = (size_t)plan.count * 80 + 1;
	buf = malloc(len);
	if (!buf || tl_plan_format(&plan, buf, len) < 0) {
		fprintf(stderr, "tlshard: out of memory\n");
		free(buf);
		tl_plan_free(&plan);
		return 1;
	}
	fputs(buf, stdout);
	tlshard_plan_summary(&plan, &o);
	free(buf);
	tl_plan_free(&plan);
	return 0;
}
