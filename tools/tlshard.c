/* tools/tlshard.c: show the machine and the shard plan, run a program on a chosen set of shards, or read a running program's live per-shard stats (table, JSON, Prometheus). */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <hwloc.h>

#include "turnloop.h"
#include "cli.h"

/* ---- manuals ---- */

static const char help_main[] =
	"NAME\n"
	"    tlshard - the shard plan, the machine, and live stats of turnloop programs\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard topo  [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]\n"
	"    tlshard plan  [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]\n"
	"    tlshard run   [--cpus LIST] [--shards N] [--smt] -- PROGRAM [ARGS...]\n"
	"    tlshard stats PID [--watch [SECS]] [--count N] [--json]\n"
	"                      [--format table|json|prometheus]\n"
	"    tlshard COMMAND --help\n"
	"\n"
	"DESCRIPTION\n"
	"    topo   the machine as hwloc sees it (packages, NUMA nodes, cores, PUs,\n"
	"           caches), which PUs this process may use and why not, and the plan\n"
	"           the runtime would choose\n"
	"    plan   just the plan: which CPU, core and NUMA node each shard gets\n"
	"    run    plan, then run PROGRAM on exactly those CPUs (TL_CPUS, TL_SHARDS,\n"
	"           TL_SMT and the CPU affinity are set for it)\n"
	"    stats  read the live per-shard counters of a running turnloop program\n"
	"\n"
	"    The environment variables TL_CPUS, TL_SHARDS and TL_SMT narrow every plan\n"
	"    as they narrow the runtime's; an option given here wins over them.\n"
	"\n"
	"EXIT STATUS\n"
	"    0 success; 1 failure (the target went away, cannot be read, cannot run);\n"
	"    2 bad arguments or a plan that cannot be met (one line on stderr says why);\n"
	"    127 PROGRAM could not be started.\n";

static const char help_plan_opts[] =
	"    --cpus LIST     only these CPUs (like 0-3,6), OS numbers as taskset uses them\n"
	"    --shards N      this many shards (a prefix of the plan: whole NUMA nodes first)\n"
	"    --smt           every PU of a core, not just its first one\n";

static const char help_topo[] =
	"NAME\n"
	"    tlshard topo - the machine, what this process may use, and the plan\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard topo [--cpus LIST] [--shards N] [--smt] [--topology T] [--json]\n"
	"\n"
	"DESCRIPTION\n"
	"    Prints the machine as hwloc sees it: a drawing of packages, NUMA nodes,\n"
	"    cores and their PUs, then one row per PU with its core, node, package,\n"
	"    caches, whether this process may use it and, if not, why: outside the\n"
	"    cgroup cpuset, or outside the CPU affinity (taskset). Then the plan the\n"
	"    runtime would choose with the options given: one shard per physical core of\n"
	"    the allowed PUs, shards of one NUMA node adjacent.\n"
	"\n"
	"OPTIONS\n"
	"%s"
	"    --topology T    plan for another machine: a hwloc synthetic description\n"
	"                    such as \"pack:2 numa:2 core:4 pu:2\", or a file ending in\n"
	"                    .xml exported by lstopo; everything is allowed there\n"
	"    --json          the same as one JSON object\n"
	"\n"
	"EXAMPLES\n"
	"    tlshard topo\n"
	"    tlshard topo --topology \"pack:2 numa:2 core:4 pu:2\" --smt\n";

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

static const char help_run[] =
	"NAME\n"
	"    tlshard run - run a program on a chosen set of shards\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard run [--cpus LIST] [--shards N] [--smt] -- PROGRAM [ARGS...]\n"
	"\n"
	"DESCRIPTION\n"
	"    Computes the plan first and refuses, with a one-line reason, one that cannot\n"
	"    be met (a CPU that does not exist or is not allowed, more shards than usable\n"
	"    cores). Then sets TL_CPUS to the plan's CPUs, TL_SHARDS to its shard count\n"
	"    (and TL_SMT=1 with --smt), binds the process to those CPUs and executes\n"
	"    PROGRAM, whose runtime then plans the same shards.\n"
	"\n"
	"OPTIONS\n"
	"%s"
	"\n"
	"EXAMPLES\n"
	"    tlshard run --cpus 0,1 -- tlecho -p 7000 --shards 2\n";

static const char help_stats[] =
	"NAME\n"
	"    tlshard stats - live per-shard stats of a running turnloop program\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard stats PID [--watch [SECS]] [--count N] [--json]\n"
	"                      [--format table|json|prometheus]\n"
	"\n"
	"DESCRIPTION\n"
	"    Reads the stats region of process PID (/dev/shm/turnloop-UID/PID) after\n"
	"    checking that it belongs to that process's user and that the process\n"
	"    that wrote it is PID itself and alive. Reading never stops or slows the\n"
	"    program: every shard's record is copied under its own sequence lock.\n"
	"    Rates are measured over half a second (or the --watch interval).\n"
	"\n"
	"    One row per shard:\n"
	"      CPU, NODE     the shard's CPU and NUMA node (* marks the busiest shard)\n"
	"      TURNS/s       turns of its loop\n"
	"      COMPL/s       completions handed to the program\n"
	"      BUSY          the share of the interval the shard's thread was on a CPU,\n"
	"                    user and kernel time together: the socket work the kernel\n"
	"                    does inside io_uring_enter or epoll_wait counts. 100% is a\n"
	"                    full core; a shard near it cannot take more load\n"
	"      WAITS/s       OS waits that could block (few when busy)\n"
	"      MESH-IN/s, MESH-OUT/s   messages between shards\n"
	"      LEASES        pooled read buffers the program holds now\n"
	"      ALLOC         bytes the shard's jemalloc arena holds (- when arenas are off)\n"
	"      STALLS        passes longer than the stall threshold, since start\n"
	"      P50, P99      pass time in the interval (a turn and the program's code\n"
	"                    after it, without the OS wait): the upper bound of the\n"
	"                    power-of-two bucket the percentile falls in\n"
	"      MAX           the longest pass since start\n"
	"    Then the blocking pool per NUMA node (threads, busy, queued, long threads,\n"
	"    long busy, submissions and refusals per second, mean queue wait and run\n"
	"    time of the jobs finished in the interval) and per shard, and last the\n"
	"    program's own counters (as rates) and gauges (as values), per shard and\n"
	"    summed.\n"
	"\n"
	"OPTIONS\n"
	"    --watch [SECS]  redraw every SECS seconds (default 1), in place like top\n"
	"                    on a terminal, as successive blocks otherwise; ends with a\n"
	"                    line on stderr and status 1 when the program goes away\n"
	"    --count N       stop after N redraws (status 0)\n"
	"    --json          one JSON object (one per line with --watch): totals and rates\n"
	"    --format F      table (the default), json, or prometheus: the text\n"
	"                    exposition format, totals only (a scraper computes rates)\n"
	"\n"
	"EXAMPLES\n"
	"    tlshard stats 4242 --watch\n"
	"    tlshard stats 4242 --format prometheus > /var/lib/node_exporter/tl.prom\n";

static void print_help(const char *fmt)
{
	printf(fmt, help_plan_opts);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr, exit status 2. */
static int bad(const char *fmt, ...)
{
	va_list ap;

	fputs("tlshard: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

/* ---- text helpers ---- */

/* Bytes from another process, printable: anything but printable ASCII is
 * shown as \xNN (and a backslash as \\), so that no control sequence ever
 * reaches the terminal, a JSON string or a metric. */
static const char *clean(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; *s && o + 5 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, len - o, c == '\\' ? "\\\\" : "\\x%02x", c);
	}
	buf[o] = '\0';
	return buf;
}

/* 1234567 -> "1.23M". */
static const char *fmt_num(double v, char *buf, size_t len)
{
	static const char *const sfx[] = {"", "k", "M", "G", "T"};
	int k = 0;

	while (fabs(v) >= 1000 && k < 4) {
		v /= 1000;
		k++;
	}
	if (k == 0 && v == floor(v))
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, fabs(v) < 10 ? "%.2f%s" : fabs(v) < 100 ? "%.1f%s" : "%.0f%s", v,
			 sfx[k]);
	return buf;
}

static const char *fmt_bytes(double v, char *buf, size_t len)
{
	static const char *const sfx[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int k = 0;

	while (v >= 1024 && k < 4) {
		v /= 1024;
		k++;
	}
	snprintf(buf, len, k ? "%.1f %s" : "%.0f %s", v, sfx[k]);
	return buf;
}

static const char *fmt_ns(double ns, char *buf, size_t len)
{
	if (ns < 1000)
		snprintf(buf, len, "%.0fns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1fus", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.2fms", ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", ns / 1e9);
	return buf;
}

/* ---- topology ---- */

static int ends_with(const char *s, const char *sfx)
{
	size_t n = strlen(s), m = strlen(sfx);

	return n >= m && !strcmp(s + n - m, sfx);
}

/* The machine (with the PUs the cgroup forbids, to show them) or the
 * description given. */
static int topo_load(hwloc_topology_t *out, const char *topology)
{
	hwloc_topology_t t;

	if (hwloc_topology_init(&t))
		return -1;
	if (topology) {
		if ((ends_with(topology, ".xml") ? hwloc_topology_set_xml(t, topology)
						 : hwloc_topology_set_synthetic(t, topology))) {
			hwloc_topology_destroy(t);
			return -1;
		}
	} else {
		hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
	}
	if (hwloc_topology_load(t)) {
		hwloc_topology_destroy(t);
		return -1;
	}
	*out = t;
	return 0;
}

/* What may this process use? cgroup: the cpuset hwloc reads from the
 * cgroup; affinity: the process's CPU binding (both everything on a
 * synthetic or XML topology). */
struct allowed {
	hwloc_bitmap_t cgroup, affinity, both;
};

static int allowed_get(hwloc_topology_t t, struct allowed *a)
{
	a->cgroup = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t));
	a->affinity = hwloc_bitmap_dup(hwloc_topology_get_complete_cpuset(t));
	a->both = hwloc_bitmap_alloc();
	if (!a->cgroup || !a->affinity || !a->both)
		return -1;
	if (hwloc_topology_is_thissystem(t)) {
		hwloc_bitmap_t b = hwloc_bitmap_alloc();

		if (b && (hwloc_get_cpubind(t, b, HWLOC_CPUBIND_PROCESS) == 0 ||
			  hwloc_get_cpubind(t, b, HWLOC_CPUBIND_THREAD) == 0) &&
		    !hwloc_bitmap_iszero(b))
			hwloc_bitmap_copy(a->affinity, b);
		hwloc_bitmap_free(b);
	}
	hwloc_bitmap_and(a->both, a->cgroup, a->affinity);
	return 0;
}

static void allowed_free(struct allowed *a)
{
	hwloc_bitmap_free(a->cgroup);
	hwloc_bitmap_free(a->affinity);
	hwloc_bitmap_free(a->both);
}

static const char *why_not(const struct allowed *a, unsigned pu)
{
	if (!hwloc_bitmap_isset(a->cgroup, pu))
		return "cgroup";
	if (!hwloc_bitmap_isset(a->affinity, pu))
		return "affinity";
	return NULL;
}

static const char *list_str(hwloc_const_bitmap_t set, char *buf, size_t len)
{
	if (hwloc_bitmap_iszero(set))
		snprintf(buf, len, "none");
	else
		hwloc_bitmap_list_snprintf(buf, len, set);
	return buf;
}

static uint64_t cache_size(hwloc_topology_t t, hwloc_obj_t pu, hwloc_obj_type_t type)
{
	hwloc_obj_t c = hwloc_get_ancestor_obj_by_type(t, type, pu);

	return c && c->attr ? c->attr->cache.size : 0;
}

static const char *cache_str(uint64_t size, char *buf, size_t len)
{
	if (!size)
		snprintf(buf, len, "-");
	else
		fmt_bytes((double)size, buf, len);
	return buf;
}

/* The shard on PU os index pu, or -1. */
static int shard_on(const tl_plan *p, unsigned pu)
{
	for (uint32_t i = 0; i < p->count; i++)
		if (p->shards[i].pu_os_index == (int)pu)
			return (int)i;
	return -1;
}

static int nb(hwloc_topology_t t, hwloc_obj_type_t type)
{
	int n = hwloc_get_nbobjs_by_type(t, type);

	return n < 0 ? 0 : n;
}

/* The first NUMA node local to pu (as the plan takes it), or NULL. */
static hwloc_obj_t node_of(hwloc_topology_t t, hwloc_obj_t pu)
{
	hwloc_obj_t n = NULL;

	while ((n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)))
		if (n->cpuset && hwloc_bitmap_isset(n->cpuset, pu->os_index))
			return n;
	return NULL;
}

/* Packages, their NUMA nodes, each node's cores with their PUs:
 *   "    core 3: pu 6=s3 pu 7" */
static void draw(hwloc_topology_t t, const struct allowed *a, const tl_plan *p)
{
	int npk = nb(t, HWLOC_OBJ_PACKAGE), nn = nb(t, HWLOC_OBJ_NUMANODE);
	char b1[32];

	for (int k = 0; k < (npk ? npk : 1); k++) {
		hwloc_obj_t pk = npk ? hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, (unsigned)k)
				     : hwloc_get_root_obj(t);

		printf("%s %d\n", npk ? "package" : "machine", k);
		for (int j = 0; j < (nn ? nn : 1); j++) {
			hwloc_obj_t node = nn ? hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE,
								      (unsigned)j)
					      : NULL;
			hwloc_obj_t core = NULL;
			int shown = 0;

			if (node && !hwloc_bitmap_intersects(node->cpuset, pk->cpuset))
				continue;
			while ((core = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, core))) {
				hwloc_obj_t pu = NULL;

				if (!hwloc_bitmap_isincluded(core->cpuset, pk->cpuset))
					continue;
				/* A core belongs to the node of its first PU. */
				pu = hwloc_get_next_obj_inside_cpuset_by_type(t, core->cpuset,
									      HWLOC_OBJ_PU, NULL);
				if (node && (!pu || node_of(t, pu) != node))
					continue;
				if (!shown++) {
					if (node && node->attr && node->attr->numanode.local_memory)
						printf("  numa %u (%s)\n", node->os_index,
						       fmt_bytes((double)node->attr->numanode
									 .local_memory,
								 b1, sizeof b1));
					else if (node)
						printf("  numa %u\n", node->os_index);
				}
				printf("    core %u:", core->logical_index);
				for (pu = NULL; (pu = hwloc_get_next_obj_inside_cpuset_by_type(
							 t, core->cpuset, HWLOC_OBJ_PU, pu));) {
					const char *why = why_not(a, pu->os_index);
					int s = shard_on(p, pu->os_index);

					printf(" pu %u", pu->os_index);
					if (s >= 0)
						printf("=s%d", s);
					else if (why)
						printf("%s", why[0] == 'c' ? "!" : "~");
				}
				putchar('\n');
			}
		}
	}
	printf("  (pu N=sK: shard K runs there; N!: outside the cgroup cpuset; N~: "
	       "outside the CPU affinity)\n");
}

static int plan_for(struct tlshard_plan_opts *o, tl_plan *plan)
{
	int r = tl_plan_from_env(&o->req);
	const char *why;

	if (r < 0)
		return bad("%s", tl_error_detail());
	r = tl_plan_compute(plan, &o->req, o->topology);
	if (r == 0)
		return 0;
	why = tl_error_detail();
	if (r == -EINVAL)
		return bad("no such plan: %s", why[0] ? why : "the request cannot be met");
	fprintf(stderr, "tlshard: %s\n", why[0] ? why : tl_strerror(r));
	return 1;
}

static cJSON *plan_json(const tl_plan *p, const struct tlshard_plan_opts *o)
{
	cJSON *j = cJSON_CreateObject(), *a = cJSON_CreateArray();

	cJSON_AddNumberToObject(j, "shards", p->count);
	cJSON_AddNumberToObject(j, "numa_nodes", p->numa_nodes);
	cJSON_AddBoolToObject(j, "smt", o->req.smt != 0);
	for (uint32_t i = 0; i < p->count; i++) {
		const tl_shard_place *s = &p->shards[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddNumberToObject(e, "shard", s->shard);
		cJSON_AddNumberToObject(e, "cpu", s->pu_os_index);
		cJSON_AddNumberToObject(e, "core", s->core);
		cJSON_AddNumberToObject(e, "numa", s->numa_node);
		cJSON_AddNumberToObject(e, "package", s->package);
		cJSON_AddItemToArray(a, e);
	}
	cJSON_AddItemToObject(j, "places", a);
	return j;
}

/* Print j (and free it); 1 if cJSON ran out of memory. */
static int put_json(cJSON *j, int pretty)
{
	char *s = j ? (pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j)) : NULL;

	cJSON_Delete(j);
	if (!s) {
		fprintf(stderr, "tlshard: out of memory\n");
		return 1;
	}
	puts(s);
	cJSON_free(s);
	return 0;
}

static void plan_summary(const tl_plan *p, const struct tlshard_plan_opts *o)
{
	printf("%u shard%s on %u NUMA node%s", p->count, p->count == 1 ? "" : "s", p->numa_nodes,
	       p->numa_nodes == 1 ? "" : "s");
	if (!o->req.cpus && !o->req.shards)
		printf(" (one per %s)", o->req.smt ? "PU" : "physical core");
	putchar('\n');
}

static int cmd_plan(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	char err[1024];
	tl_plan plan;
	size_t len;
	char *buf;
	int r = tlshard_plan_parse(argc, argv, &o, err, sizeof err);

	if (r == 1) {
		print_help(help_plan);
		return 0;
	}
	if (r < 0)
		return bad("%s", err);
	r = plan_for(&o, &plan);
	if (r)
		return r;
	if (o.json) {
		r = put_json(plan_json(&plan, &o), 1);
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
	plan_summary(&plan, &o);
	free(buf);
	tl_plan_free(&plan);
	return 0;
}

static int cmd_topo(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	struct allowed a = {0};
	hwloc_topology_t t = NULL;
	char err[1024], l1[256], l2[256], l3[256];
	tl_plan plan;
	int r = tlshard_topo_parse(argc, argv, &o, err, sizeof err);
	hwloc_obj_t pu = NULL;

	if (r == 1) {
		print_help(help_topo);
		return 0;
	}
	if (r < 0)
		return bad("%s", err);
	r = plan_for(&o, &plan);
	if (r)
		return r;
	if (topo_load(&t, o.topology) < 0 || allowed_get(t, &a) < 0) {
		fprintf(stderr, "tlshard: cannot load the topology: %s\n", strerror(errno));
		allowed_free(&a);
		if (t)
			hwloc_topology_destroy(t);
		tl_plan_free(&plan);
		return 1;
	}
	if (o.json) {
		cJSON *j = cJSON_CreateObject(), *pus = cJSON_CreateArray();

		cJSON_AddStringToObject(j, "topology", o.topology ? clean(o.topology, l1, sizeof l1)
								  : "this machine");
		cJSON_AddNumberToObject(j, "packages", nb(t, HWLOC_OBJ_PACKAGE));
		cJSON_AddNumberToObject(j, "numa_nodes", nb(t, HWLOC_OBJ_NUMANODE));
		cJSON_AddNumberToObject(j, "cores", nb(t, HWLOC_OBJ_CORE));
		cJSON_AddNumberToObject(j, "pus", nb(t, HWLOC_OBJ_PU));
		cJSON_AddStringToObject(j, "allowed", list_str(a.both, l1, sizeof l1));
		cJSON_AddStringToObject(j, "cgroup_cpuset", list_str(a.cgroup, l2, sizeof l2));
		cJSON_AddStringToObject(j, "affinity", list_str(a.affinity, l3, sizeof l3));
		while ((pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu))) {
			hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
			hwloc_obj_t pk = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu);
			hwloc_obj_t node = node_of(t, pu);
			const char *why = why_not(&a, pu->os_index);
			cJSON *e = cJSON_CreateObject();

			cJSON_AddNumberToObject(e, "pu", pu->os_index);
			cJSON_AddNumberToObject(e, "core", core ? (int)core->logical_index : -1);
			cJSON_AddNumberToObject(e, "numa", node ? (int)node->os_index : -1);
			cJSON_AddNumberToObject(e, "package", pk ? (int)pk->logical_index : -1);
			cJSON_AddNumberToObject(e, "l1d_bytes", (double)cache_size(t, pu, HWLOC_OBJ_L1CACHE));
			cJSON_AddNumberToObject(e, "l2_bytes", (double)cache_size(t, pu, HWLOC_OBJ_L2CACHE));
			cJSON_AddNumberToObject(e, "l3_bytes", (double)cache_size(t, pu, HWLOC_OBJ_L3CACHE));
			cJSON_AddBoolToObject(e, "allowed", why == NULL);
			if (why)
				cJSON_AddStringToObject(e, "why_not", why);
			else
				cJSON_AddNullToObject(e, "why_not");
			cJSON_AddNumberToObject(e, "shard", shard_on(&plan, pu->os_index));
			cJSON_AddItemToArray(pus, e);
		}
		cJSON_AddItemToObject(j, "pu_list", pus);
		cJSON_AddItemToObject(j, "plan", plan_json(&plan, &o));
		r = put_json(j, 1);
		goto out;
	}
	printf("%s: %d package%s, %d NUMA node%s, %d cores, %d PUs\n",
	       o.topology ? clean(o.topology, l1, sizeof l1) : "this machine",
	       nb(t, HWLOC_OBJ_PACKAGE), nb(t, HWLOC_OBJ_PACKAGE) == 1 ? "" : "s",
	       nb(t, HWLOC_OBJ_NUMANODE), nb(t, HWLOC_OBJ_NUMANODE) == 1 ? "" : "s",
	       nb(t, HWLOC_OBJ_CORE), nb(t, HWLOC_OBJ_PU));
	if (hwloc_topology_is_thissystem(t))
		printf("allowed to this process: PUs %s (cgroup cpuset %s, CPU affinity %s)\n\n",
		       list_str(a.both, l1, sizeof l1), list_str(a.cgroup, l2, sizeof l2),
		       list_str(a.affinity, l3, sizeof l3));
	else
		printf("allowed: every PU (a topology given with --topology: nothing is bound)\n\n");
	draw(t, &a, &plan);
	printf("\n%-4s %-5s %-5s %-8s %-10s %-10s %-10s %-15s %s\n", "PU", "CORE", "NUMA",
	       "PACKAGE", "L1d", "L2", "L3", "ALLOWED", "SHARD");
	while ((pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu))) {
		hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
		hwloc_obj_t pk = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu);
		hwloc_obj_t node = node_of(t, pu);
		const char *why = why_not(&a, pu->os_index);
		char c1[16], c2[16], c3[16], al[24], sh[16];
		int s = shard_on(&plan, pu->os_index);

		snprintf(al, sizeof al, why ? "no (%s)" : "yes", why);
		snprintf(sh, sizeof sh, s >= 0 ? "%d" : "-", s);
		printf("%-4u %-5d %-5d %-8d %-10s %-10s %-10s %-15s %s\n", pu->os_index,
		       core ? (int)core->logical_index : -1, node ? (int)node->os_index : -1,
		       pk ? (int)pk->logical_index : -1,
		       cache_str(cache_size(t, pu, HWLOC_OBJ_L1CACHE), c1, sizeof c1),
		       cache_str(cache_size(t, pu, HWLOC_OBJ_L2CACHE), c2, sizeof c2),
		       cache_str(cache_size(t, pu, HWLOC_OBJ_L3CACHE), c3, sizeof c3), al, sh);
	}
	printf("\nplan: ");
	plan_summary(&plan, &o);
	printf("%-6s %-4s %-5s %-5s %s\n", "SHARD", "CPU", "CORE", "NUMA", "PACKAGE");
	for (uint32_t i = 0; i < plan.count; i++) {
		const tl_shard_place *s = &plan.shards[i];

		printf("%-6u %-4d %-5d %-5d %d\n", s->shard, s->pu_os_index, s->core, s->numa_node,
		       s->package);
	}
	r = 0;
out:
	allowed_free(&a);
	hwloc_topology_destroy(t);
	tl_plan_free(&plan);
	return r;
}

static int cmd_run(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	tl_plan plan;
	cpu_set_t set;
	char list[64], err[1024], *cpus;
	size_t cap, off = 0;
	int i, r = tlshard_run_parse(argc, argv, &o, err, sizeof err);

	if (r == 1) {
		print_help(help_run);
		return 0;
	}
	if (r < 0)
		return bad("%s", err);
	i = o.cmd;
	/* Plan first, so that a request that cannot be met fails here and
	 * not inside the program. */
	r = plan_for(&o, &plan);
	if (r)
		return r;
	cap = (size_t)plan.count * 8 + 1;
	cpus = malloc(cap);
	if (!cpus) {
		tl_plan_free(&plan);
		fprintf(stderr, "tlshard: out of memory\n");
		return 1;
	}
	cpus[0] = '\0';
	CPU_ZERO(&set);
	for (uint32_t k = 0; k < plan.count; k++) {
		int c = plan.shards[k].pu_os_index;

		if (c >= 0 && c < CPU_SETSIZE && !CPU_ISSET(c, &set)) {
			CPU_SET(c, &set);
			off += (size_t)snprintf(cpus + off, cap - off, "%s%d", off ? "," : "", c);
		}
	}
	/* The program then plans the same shards: TL_CPUS names exactly the
	 * plan's CPUs, TL_SHARDS its count. */
	snprintf(list, sizeof list, "%u", plan.count);
	tl_plan_free(&plan);
	if (setenv("TL_CPUS", cpus, 1) || setenv("TL_SHARDS", list, 1) ||
	    (o.set_smt && setenv("TL_SMT", "1", 1))) {
		free(cpus);
		perror("tlshard: setenv");
		return 1;
	}
	free(cpus);
	if (sched_setaffinity(0, sizeof set, &set) < 0) {
		perror("tlshard: sched_setaffinity");
		return 1;
	}
	execvp(argv[i], &argv[i]);
	fprintf(stderr, "tlshard: cannot run '%s': %s\n", argv[i], strerror(errno));
	return 127;
}

/* ---- stats: samples ---- */

#define LABEL_OUT (4 * TL_STATS_LABEL_MAX)
#define NAME_OUT (4 * TL_STATS_NAME_MAX)

/* One reading of every shard, with the program's families and labels
 * (escaped) as they were then. */
struct sample {
	double t;               /* CLOCK_MONOTONIC, seconds */
	tl_stats_info info;
	tl_stats_shard *sh;     /* info.shards */
	uint64_t *vals;         /* info.shards * info.values, shard-major */
	tl_stats_family *fams;  /* info.families, names escaped */
	char (*labels)[LABEL_OUT]; /* info.values, escaped */
};

static void sample_free(struct sample *s)
{
	free(s->sh);
	free(s->vals);
	free(s->fams);
	free(s->labels);
	memset(s, 0, sizeof *s);
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Read everything; on failure print one line that says why (the target
 * exited, removed its region, ...) and return -1. */
static int sample_read(tl_stats_reader *r, int pid, struct sample *s)
{
	tl_stats_info *in = &s->info;
	int rc;

	sample_free(s);
	rc = tl_stats_info_get(r, in);
	if (rc == -ESRCH) {
		fprintf(stderr, "tlshard: process %d has exited\n", pid);
		return -1;
	}
	if (rc == -ENOENT) {
		fprintf(stderr, "tlshard: process %d removed its stats region (its runtime stopped)\n",
			pid);
		return -1;
	}
	if (rc < 0) {
		fprintf(stderr, "tlshard: cannot read the stats of process %d: %s\n", pid,
			tl_strerror(rc));
		return -1;
	}
	s->sh = calloc(in->shards, sizeof *s->sh);
	s->vals = calloc((size_t)in->shards * in->values + 1, sizeof *s->vals);
	s->fams = calloc(in->families + 1, sizeof *s->fams);
	s->labels = calloc(in->values + 1, sizeof *s->labels);
	if (!s->sh || !s->vals || !s->fams || !s->labels) {
		fprintf(stderr, "tlshard: out of memory\n");
		return -1;
	}
	for (uint32_t i = 0; i < in->families; i++) {
		char name[NAME_OUT];

		rc = tl_stats_family_get(r, i, &s->fams[i]);
		if (rc < 0) {
			fprintf(stderr, "tlshard: process %d: its stat family %u cannot be read: %s\n",
				pid, i, tl_strerror(rc));
			return -1;
		}
		clean(s->fams[i].name, name, sizeof name);
		snprintf(s->fams[i].name, sizeof s->fams[i].name, "%.*s",
			 (int)sizeof s->fams[i].name - 1, name);
	}
	for (uint32_t v = 0; v < in->values; v++) {
		char raw[TL_STATS_LABEL_MAX];

		if (tl_stats_label_get(r, v, raw, sizeof raw) < 0)
			raw[0] = '\0';
		clean(raw, s->labels[v], LABEL_OUT);
	}
	for (uint32_t i = 0; i < in->shards; i++) {
		rc = tl_stats_shard_get(r, i, &s->sh[i], s->vals + (size_t)i * in->values, in->values);
		if (rc < 0) {
			fprintf(stderr, "tlshard: process %d: cannot read shard %u: %s\n", pid, i,
				tl_strerror(rc));
			return -1;
		}
	}
	s->t = mono_s();
	return 0;
}

/* ---- stats: figures between two samples ---- */

static const char *const kind_names[TL_K_COUNT_] = {
	[TL_K_NONE] = "none",       [TL_K_ACCEPT] = "accept", [TL_K_CONNECT] = "connect",
	[TL_K_READ] = "read",       [TL_K_WRITE] = "write",   [TL_K_SHUTDOWN] = "shutdown",
	[TL_K_SEND] = "send",       [TL_K_RECV] = "recv",     [TL_K_TIMER] = "timer",
	[TL_K_POST] = "post",       [TL_K_ROOM] = "room",     [TL_K_CLOSED] = "closed",
	[TL_K_POOL] = "pool",       [TL_K_FS] = "fs",         [TL_K_RESOLVE] = "resolve",
	[TL_K_MESH] = "mesh",       [TL_K_POLL] = "poll",     [TL_K_SIGNAL] = "signal",
	[TL_K_EXIT] = "exit",       [TL_K_WATCH] = "watch",   [TL_K_EWAIT] = "ewait",
	[TL_K_SPLICE] = "splice",
};
_Static_assert(TL_K_SPLICE + 1 == TL_K_COUNT_, "a completion kind without a name");

static const char *state_name(uint32_t s)
{
	static const char *const names[] = {"starting", "running", "stopping", "stopped"};

	return s < 4 ? names[s] : "unknown";
}

static uint64_t completions(const tl_stats_shard *s)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < TL_STATS_KINDS; k++)
		n += s->completions[k];
	return n;
}

/* b - a, 0 if a counter went back (a region that restarted under us). */
static uint64_t d(uint64_t b, uint64_t a)
{
	return b >= a ? b - a : 0;
}

/* Quantile q of the passes between a and b (a NULL: since start), as the
 * upper bound of its bucket in ns; -1 without passes. */
static double pass_quantile(const tl_stats_shard *a, const tl_stats_shard *b, double q)
{
	uint64_t h[TL_STATS_HIST], total = 0, run = 0;

	for (uint32_t i = 0; i < TL_STATS_HIST; i++) {
		h[i] = a ? d(b->pass_hist[i], a->pass_hist[i]) : b->pass_hist[i];
		total += h[i];
	}
	if (!total)
		return -1;
	for (uint32_t i = 0; i < TL_STATS_HIST; i++) {
		run += h[i];
		if ((double)run >= q * (double)total)
			return i ? ldexp(1, (int)i) : 0;
	}
	return ldexp(1, TL_STATS_HIST - 1);
}

/* The figures of one shard over the interval. */
struct row {
	double turns, compl, busy, waits, mesh_in, mesh_out;
	double p50, p99;
	double pool_sub, pool_ref, pool_wait, pool_run; /* rates; means in ns, -1 if none */
};

static void row_of(const struct sample *a, const struct sample *b, uint32_t i, struct row *r)
{
	const tl_stats_shard *x = &a->sh[i], *y = &b->sh[i];
	double dt = b->t - a->t;
	uint64_t done = d(y->pool_completed, x->pool_completed);

	if (dt <= 0)
		dt = 1e-9;
	r->turns = (double)d(y->turns, x->turns) / dt;
	r->compl = (double)d(completions(y), completions(x)) / dt;
	r->busy = (double)d(y->cpu_ns, x->cpu_ns) / (dt * 1e9);
	r->waits = (double)d(y->os_waits, x->os_waits) / dt;
	r->mesh_in = (double)d(y->mesh_in, x->mesh_in) / dt;
	r->mesh_out = (double)d(y->mesh_out, x->mesh_out) / dt;
	r->p50 = pass_quantile(x, y, 0.50);
	r->p99 = pass_quantile(x, y, 0.99);
	r->pool_sub = (double)d(y->pool_submitted, x->pool_submitted) / dt;
	r->pool_ref = (double)d(y->pool_refused, x->pool_refused) / dt;
	r->pool_wait = done ? (double)d(y->pool_wait_ns, x->pool_wait_ns) / (double)done : -1;
	r->pool_run = done ? (double)d(y->pool_run_ns, x->pool_run_ns) / (double)done : -1;
}

/* The busiest shard, -1 if none did anything. */
static int hottest(const struct sample *a, const struct sample *b)
{
	double best = 0;
	int hot = -1;

	for (uint32_t i = 0; i < b->info.shards; i++) {
		struct row r;

		row_of(a, b, i, &r);
		if (r.busy > best) {
			best = r.busy;
			hot = (int)i;
		}
	}
	return hot;
}

/* A NUMA node of the pool as the shards on it see it: the freshest
 * record's worker counts, and the sums of their jobs. */
struct node_view {
	int64_t node;
	const tl_stats_shard *fresh;
	uint64_t sub, ref, done, wait, run;
};

static uint32_t nodes_of(const struct sample *a, const struct sample *b, struct node_view *v,
			 uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < b->info.shards; i++) {
		const tl_stats_shard *x = &a->sh[i], *y = &b->sh[i];
		uint32_t k;

		if (y->node_id < 0)
			continue;
		for (k = 0; k < n && v[k].node != y->node_id; k++)
			;
		if (k == n) {
			if (n == cap)
				continue;
			memset(&v[n], 0, sizeof v[n]);
			v[n].node = y->node_id;
			v[n++].fresh = y;
		}
		if (y->updated_ns > v[k].fresh->updated_ns)
			v[k].fresh = y;
		v[k].sub += d(y->pool_submitted, x->pool_submitted);
		v[k].ref += d(y->pool_refused, x->pool_refused);
		v[k].done += d(y->pool_completed, x->pool_completed);
		v[k].wait += d(y->pool_wait_ns, x->pool_wait_ns);
		v[k].run += d(y->pool_run_ns, x->pool_run_ns);
	}
	return n;
}

/* Value slot v of shard i in s (0 when s had fewer slots). */
static uint64_t val(const struct sample *s, uint32_t i, uint32_t v)
{
	return v < s->info.values ? s->vals[(size_t)i * s->info.values + v] : 0;
}

/* "name", "name[label]" or "name[row]". */
static const char *row_name(const struct sample *s, const tl_stats_family *f, uint32_t j,
			    char *buf, size_t len)
{
	const char *l = s->labels[f->first + j];

	if (l[0])
		snprintf(buf, len, "%s[%s]", f->name, l);
	else if (f->rows > 1)
		snprintf(buf, len, "%s[%u]", f->name, j);
	else
		snprintf(buf, len, "%s", f->name);
	return buf;
}

/* ---- stats: the table ---- */

/* A row of a family declared with room for things that come at run time
 * (servers, say) that has not come into use: no label, zero everywhere.
 * The table leaves it out; JSON and Prometheus keep every row. */
static int row_unused(const struct sample *a, const struct sample *b, const tl_stats_family *f,
		      uint32_t j)
{
	uint32_t v = f->first + j;

	if (f->rows < 2 || b->labels[v][0])
		return 0;
	for (uint32_t i = 0; i < b->info.shards; i++)
		if (val(b, i, v) || val(a, i, v))
			return 0;
	return 1;
}

static void put_table(const struct sample *a, const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	double dt = b->t - a->t;
	int hot = hottest(a, b);
	struct node_view nodes[64];
	uint32_t nn;
	char drv[4 * sizeof in->driver], t[16][24];
	struct row tot = {0};

	if (in->stall_ns)
		snprintf(t[0], sizeof t[0], "%.1f ms", (double)in->stall_ns / 1e6);
	printf("pid %d: %u shard%s, driver %s, %s, arenas %s, stall threshold %s; rates over %.2f s\n",
	       pid, in->shards, in->shards == 1 ? "" : "s",
	       in->driver[0] ? clean(in->driver, drv, sizeof drv) : "?", state_name(in->state),
	       (in->flags & TL_STATS_F_ARENAS) ? "on" : "off", in->stall_ns ? t[0] : "off", dt);
	printf("%-6s %4s %4s %9s %9s %6s %9s %9s %10s %7s %9s %6s %8s %8s %8s\n", "SHARD", "CPU",
	       "NODE", "TURNS/s", "COMPL/s", "BUSY", "WAITS/s", "MESH-IN/s", "MESH-OUT/s", "LEASES",
	       "ALLOC", "STALLS", "P50", "P99", "MAX");
	uint64_t leases = 0, stalls = 0, live = 0, maxp = 0;

	for (uint32_t i = 0; i < in->shards; i++) {
		const tl_stats_shard *y = &b->sh[i];
		struct row r;
		char id[16];

		row_of(a, b, i, &r);
		tot.turns += r.turns;
		tot.compl += r.compl;
		tot.busy += r.busy;
		tot.waits += r.waits;
		tot.mesh_in += r.mesh_in;
		tot.mesh_out += r.mesh_out;
		leases += y->leases_out;
		stalls += y->stalls;
		if (y->arena != UINT32_MAX)
			live += d(y->alloc_bytes, y->freed_bytes);
		if (y->max_pass_ns > maxp)
			maxp = y->max_pass_ns;
		snprintf(id, sizeof id, "%s%u", (int)i == hot ? "*" : "", y->shard);
		snprintf(t[5], sizeof t[5], "%.1f%%", 100 * r.busy);
		snprintf(t[7], sizeof t[7], "%llu", (unsigned long long)y->leases_out);
		printf("%-6s %4d %4d %9s %9s %6s %9s %9s %10s %7s %9s %6llu %8s %8s %8s\n", id, y->cpu,
		       y->numa, fmt_num(r.turns, t[0], 24), fmt_num(r.compl, t[1], 24), t[5],
		       fmt_num(r.waits, t[2], 24), fmt_num(r.mesh_in, t[3], 24),
		       fmt_num(r.mesh_out, t[4], 24), t[7],
		       y->arena == UINT32_MAX ? "-"
					      : fmt_bytes((double)d(y->alloc_bytes, y->freed_bytes),
							  t[6], 24),
		       (unsigned long long)y->stalls, r.p50 < 0 ? "-" : fmt_ns(r.p50, t[8], 24),
		       r.p99 < 0 ? "-" : fmt_ns(r.p99, t[9], 24),
		       fmt_ns((double)y->max_pass_ns, t[10], 24));
	}
	if (in->shards > 1) {
		snprintf(t[5], sizeof t[5], "%.1f%%", 100 * tot.busy);
		snprintf(t[7], sizeof t[7], "%llu", (unsigned long long)leases);
		printf("%-6s %4s %4s %9s %9s %6s %9s %9s %10s %7s %9s %6llu %8s %8s %8s\n", "all", "",
		       "", fmt_num(tot.turns, t[0], 24), fmt_num(tot.compl, t[1], 24), t[5],
		       fmt_num(tot.waits, t[2], 24), fmt_num(tot.mesh_in, t[3], 24),
		       fmt_num(tot.mesh_out, t[4], 24), t[7],
		       (in->flags & TL_STATS_F_ARENAS) ? fmt_bytes((double)live, t[6], 24) : "-",
		       (unsigned long long)stalls, "", "", fmt_ns((double)maxp, t[10], 24));
	}

	/* The pool. */
	nn = nodes_of(a, b, nodes, 64);
	int started = 0;

	for (uint32_t k = 0; k < nn; k++)
		started |= nodes[k].fresh->node_threads || nodes[k].fresh->node_long_threads;
	for (uint32_t i = 0; i < in->shards; i++)
		started |= b->sh[i].pool_submitted != 0;
	if (!started) {
		printf("\npool: not started\n");
	} else {
		printf("\n%-9s %7s %5s %6s %5s %9s %9s %9s %9s %9s\n", "POOL NODE", "THREADS", "BUSY",
		       "QUEUED", "LONG", "LONG-BUSY", "SUBMIT/s", "REFUSED/s", "WAIT", "RUN");
		for (uint32_t k = 0; k < nn; k++) {
			const struct node_view *v = &nodes[k];
			const tl_stats_shard *f = v->fresh;

			printf("%-9lld %7llu %5llu %6llu %5llu %9llu %9s %9s %9s %9s\n",
			       (long long)v->node, (unsigned long long)f->node_threads,
			       (unsigned long long)f->node_busy, (unsigned long long)f->node_queued,
			       (unsigned long long)f->node_long_threads,
			       (unsigned long long)f->node_long_busy,
			       fmt_num((double)v->sub / dt, t[0], 24),
			       fmt_num((double)v->ref / dt, t[1], 24),
			       v->done ? fmt_ns((double)v->wait / (double)v->done, t[2], 24) : "-",
			       v->done ? fmt_ns((double)v->run / (double)v->done, t[3], 24) : "-");
		}
		printf("%-10s %9s %9s %9s %9s %9s\n", "POOL SHARD", "SUBMIT/s", "REFUSED/s",
		       "IN-FLIGHT", "WAIT", "RUN");
		for (uint32_t i = 0; i < in->shards; i++) {
			struct row r;

			row_of(a, b, i, &r);
			printf("%-10u %9s %9s %9llu %9s %9s\n", b->sh[i].shard,
			       fmt_num(r.pool_sub, t[0], 24), fmt_num(r.pool_ref, t[1], 24),
			       (unsigned long long)b->sh[i].pool_in_flight,
			       r.pool_wait < 0 ? "-" : fmt_ns(r.pool_wait, t[2], 24),
			       r.pool_run < 0 ? "-" : fmt_ns(r.pool_run, t[3], 24));
		}
	}

	/* The program's own: counters as rates, gauges as values. Per shard
	 * when there are few shards, else the spread. */
	if (!in->families)
		return;
	int wide = in->shards <= 8;
	int namew = 20;

	for (uint32_t k = 0; k < in->families; k++)
		for (uint32_t j = 0; j < b->fams[k].rows; j++) {
			char n[NAME_OUT + LABEL_OUT + 16];
			int w;

			if (row_unused(a, b, &b->fams[k], j))
				continue;
			w = (int)strlen(row_name(b, &b->fams[k], j, n, sizeof n));

			if (w > namew)
				namew = w;
		}
	printf("\n%-*s %-7s", namew, "PROGRAM", "KIND");
	if (wide)
		for (uint32_t i = 0; i < in->shards; i++)
			printf(" %8s%-2u", "SHARD ", i);
	else
		printf(" %10s %10s", "MIN", "MAX");
	printf(" %10s\n", "ALL");
	for (uint32_t k = 0; k < in->families; k++) {
		const tl_stats_family *f = &b->fams[k];
		int gauge = f->kind == TL_STAT_GAUGE;

		for (uint32_t j = 0; j < f->rows; j++) {
			uint32_t v = f->first + j;
			double sum = 0, lo = INFINITY, hi = -INFINITY;
			char n[NAME_OUT + LABEL_OUT + 16], c[24];

			if (row_unused(a, b, f, j))
				continue;
			printf("%-*s %-7s", namew, row_name(b, f, j, n, sizeof n),
			       gauge ? "gauge" : "counter");
			for (uint32_t i = 0; i < in->shards; i++) {
				double x = gauge ? (double)(int64_t)val(b, i, v)
						 : (double)d(val(b, i, v), val(a, i, v)) / dt;

				sum += x;
				lo = x < lo ? x : lo;
				hi = x > hi ? x : hi;
				if (wide) {
					fmt_num(x, c, sizeof c);
					if (!gauge)
						strcat(c, "/s");
					printf(" %10s", c);
				}
			}
			if (!wide) {
				char c2[24];

				fmt_num(lo, c, sizeof c);
				fmt_num(hi, c2, sizeof c2);
				if (!gauge) {
					strcat(c, "/s");
					strcat(c2, "/s");
				}
				printf(" %10s %10s", c, c2);
			}
			fmt_num(sum, c, sizeof c);
			if (!gauge)
				strcat(c, "/s");
			printf(" %10s\n", c);
		}
	}
}

/* ---- stats: JSON ---- */

static cJSON *num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v);
}

static cJSON *stats_json(const struct sample *a, const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	cJSON *j = cJSON_CreateObject(), *shards = cJSON_CreateArray(), *nodes = cJSON_CreateArray();
	cJSON *prog = cJSON_CreateArray();
	struct node_view nv[64];
	double dt = b->t - a->t;
	int hot = hottest(a, b);
	char drv[4 * sizeof in->driver];
	uint32_t nn;

	num(j, "pid", pid);
	num(j, "layout_version", in->version);
	cJSON_AddStringToObject(j, "driver", clean(in->driver, drv, sizeof drv));
	cJSON_AddStringToObject(j, "state", state_name(in->state));
	num(j, "shards", in->shards);
	cJSON_AddBoolToObject(j, "arenas", (in->flags & TL_STATS_F_ARENAS) != 0);
	num(j, "stall_threshold_ns", (double)in->stall_ns);
	num(j, "interval_s", dt);
	num(j, "time", (double)time(NULL));
	for (uint32_t i = 0; i < in->shards; i++) {
		const tl_stats_shard *y = &b->sh[i];
		cJSON *e = cJSON_CreateObject(), *k = cJSON_CreateObject(), *p = cJSON_CreateObject();
		cJSON *pass = cJSON_CreateObject();
		struct row r;

		row_of(a, b, i, &r);
		num(e, "shard", y->shard);
		num(e, "cpu", y->cpu);
		num(e, "numa", y->numa);
		num(e, "tid", y->tid);
		cJSON_AddBoolToObject(e, "hottest", (int)i == hot);
		num(e, "busy", r.busy);
		num(e, "cpu_seconds", (double)y->cpu_ns / 1e9);
		num(e, "turns", (double)y->turns);
		num(e, "turns_per_s", r.turns);
		num(e, "completions", (double)completions(y));
		num(e, "completions_per_s", r.compl);
		num(e, "os_waits", (double)y->os_waits);
		num(e, "os_waits_per_s", r.waits);
		num(e, "mesh_in", (double)y->mesh_in);
		num(e, "mesh_in_per_s", r.mesh_in);
		num(e, "mesh_out", (double)y->mesh_out);
		num(e, "mesh_out_per_s", r.mesh_out);
		num(e, "mesh_refused", (double)y->mesh_refused);
		num(e, "mesh_inbound", (double)y->mesh_inbound);
		num(e, "mesh_backlog", (double)y->mesh_backlog);
		num(e, "mesh_dropped", (double)y->mesh_dropped);
		num(e, "leases_out", (double)y->leases_out);
		num(e, "handles", (double)y->handles);
		num(e, "ops", (double)y->ops);
		num(e, "queued", (double)y->queued);
		num(e, "timers", (double)y->timers);
		if (y->arena != UINT32_MAX)
			num(e, "alloc_live_bytes", (double)d(y->alloc_bytes, y->freed_bytes));
		else
			cJSON_AddNullToObject(e, "alloc_live_bytes");
		num(e, "stalls", (double)y->stalls);
		if (r.p50 >= 0) {
			num(pass, "p50", r.p50);
			num(pass, "p99", r.p99);
		} else {
			cJSON_AddNullToObject(pass, "p50");
			cJSON_AddNullToObject(pass, "p99");
		}
		num(pass, "max", (double)y->max_pass_ns);
		cJSON_AddItemToObject(e, "pass_ns", pass);
		for (uint32_t c = 0; c < TL_K_COUNT_; c++)
			num(k, kind_names[c], (double)y->completions[c]);
		cJSON_AddItemToObject(e, "completions_by_kind", k);
		num(p, "submitted", (double)y->pool_submitted);
		num(p, "submitted_per_s", r.pool_sub);
		num(p, "refused", (double)y->pool_refused);
		num(p, "refused_per_s", r.pool_ref);
		num(p, "completed", (double)y->pool_completed);
		num(p, "cancelled", (double)y->pool_cancelled);
		num(p, "in_flight", (double)y->pool_in_flight);
		num(p, "wait_ns", (double)y->pool_wait_ns);
		num(p, "run_ns", (double)y->pool_run_ns);
		num(p, "mean_wait_ns", r.pool_wait);
		num(p, "mean_run_ns", r.pool_run);
		cJSON_AddItemToObject(e, "pool", p);
		cJSON_AddItemToArray(shards, e);
	}
	cJSON_AddItemToObject(j, "shard", shards);
	nn = nodes_of(a, b, nv, 64);
	for (uint32_t k = 0; k < nn; k++) {
		const tl_stats_shard *f = nv[k].fresh;
		cJSON *e = cJSON_CreateObject();

		num(e, "node", (double)nv[k].node);
		num(e, "threads", (double)f->node_threads);
		num(e, "busy", (double)f->node_busy);
		num(e, "queued", (double)f->node_queued);
		num(e, "reserved", (double)f->node_reserved);
		num(e, "long_threads", (double)f->node_long_threads);
		num(e, "long_busy", (double)f->node_long_busy);
		num(e, "submitted_per_s", dt > 0 ? (double)nv[k].sub / dt : 0);
		num(e, "refused_per_s", dt > 0 ? (double)nv[k].ref / dt : 0);
		num(e, "mean_wait_ns", nv[k].done ? (double)nv[k].wait / (double)nv[k].done : -1);
		num(e, "mean_run_ns", nv[k].done ? (double)nv[k].run / (double)nv[k].done : -1);
		cJSON_AddItemToArray(nodes, e);
	}
	cJSON_AddItemToObject(j, "pool_nodes", nodes);
	for (uint32_t k = 0; k < in->families; k++) {
		const tl_stats_family *f = &b->fams[k];
		cJSON *e = cJSON_CreateObject(), *rows = cJSON_CreateArray();

		cJSON_AddStringToObject(e, "name", f->name);
		cJSON_AddStringToObject(e, "kind", f->kind == TL_STAT_GAUGE ? "gauge" : "counter");
		for (uint32_t r = 0; r < f->rows; r++) {
			uint32_t v = f->first + r;
			cJSON *x = cJSON_CreateObject(), *vals = cJSON_CreateArray();
			cJSON *rates = cJSON_CreateArray();
			double sum = 0, rsum = 0;

			num(x, "row", r);
			cJSON_AddStringToObject(x, "label", b->labels[v]);
			for (uint32_t i = 0; i < in->shards; i++) {
				double y = f->kind == TL_STAT_GAUGE ? (double)(int64_t)val(b, i, v)
								    : (double)val(b, i, v);
				double rate = dt > 0 ? (double)d(val(b, i, v), val(a, i, v)) / dt : 0;

				sum += y;
				rsum += rate;
				cJSON_AddItemToArray(vals, cJSON_CreateNumber(y));
				if (f->kind == TL_STAT_COUNTER)
					cJSON_AddItemToArray(rates, cJSON_CreateNumber(rate));
			}
			cJSON_AddItemToObject(x, "values", vals);
			num(x, "total", sum);
			if (f->kind == TL_STAT_COUNTER) {
				cJSON_AddItemToObject(x, "per_s", rates);
				num(x, "total_per_s", rsum);
			} else {
				cJSON_Delete(rates);
			}
			cJSON_AddItemToArray(rows, x);
		}
		cJSON_AddItemToObject(e, "rows", rows);
		cJSON_AddItemToArray(prog, e);
	}
	cJSON_AddItemToObject(j, "program", prog);
	return j;
}

/* ---- stats: Prometheus text exposition ---- */

/* A metric family: HELP and TYPE once, then its samples. */
static void prom_head(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

enum {
	F_TURNS, F_WAITS, F_DISC, F_ZERO, F_CPU, F_BUSY, F_IDLE, F_MESH_IN, F_MESH_OUT,
	F_MESH_REF, F_MESH_DROP, F_ALLOC, F_FREED, F_STALLS, F_POOL_SUB, F_POOL_REF,
	F_POOL_DONE, F_POOL_CANC, F_POOL_WAIT, F_POOL_RUN, F_NCOUNTERS
};

static const struct {
	const char *name, *help;
} counters[F_NCOUNTERS] = {
	[F_TURNS] = {"turnloop_turns_total", "Turns of the shard's loop."},
	[F_WAITS] = {"turnloop_os_waits_total", "OS waits that could block."},
	[F_DISC] = {"turnloop_discovery_polls_total", "Zero-timeout native polls."},
	[F_ZERO] = {"turnloop_zero_event_waits_total", "OS waits that returned no event."},
	[F_CPU] = {"turnloop_cpu_seconds_total",
		   "CPU time of the shard's thread, user and kernel."},
	[F_BUSY] = {"turnloop_busy_seconds_total", "Time in passes outside OS waits."},
	[F_IDLE] = {"turnloop_idle_seconds_total", "Time in OS waits."},
	[F_MESH_IN] = {"turnloop_mesh_received_total", "Mesh messages received."},
	[F_MESH_OUT] = {"turnloop_mesh_sent_total", "Mesh messages sent."},
	[F_MESH_REF] = {"turnloop_mesh_refused_total", "Mesh sends refused for a full ring."},
	[F_MESH_DROP] = {"turnloop_mesh_dropped_total", "Mesh results dropped at stop."},
	[F_ALLOC] = {"turnloop_allocated_bytes_total", "Bytes allocated by the shard thread."},
	[F_FREED] = {"turnloop_freed_bytes_total", "Bytes freed by the shard thread."},
	[F_STALLS] = {"turnloop_stalls_total", "Passes longer than the stall threshold."},
	[F_POOL_SUB] = {"turnloop_pool_submitted_total", "Blocking-pool jobs submitted."},
	[F_POOL_REF] = {"turnloop_pool_refused_total", "Blocking-pool submissions refused."},
	[F_POOL_DONE] = {"turnloop_pool_completed_total", "Blocking-pool jobs completed."},
	[F_POOL_CANC] = {"turnloop_pool_cancelled_total", "Blocking-pool jobs cancelled."},
	[F_POOL_WAIT] = {"turnloop_pool_queue_wait_seconds_total",
			 "Queue wait of the shard's pool jobs."},
	[F_POOL_RUN] = {"turnloop_pool_run_seconds_total", "Run time of the shard's pool jobs."},
};

static double counter_of(const tl_stats_shard *s, int f)
{
	switch (f) {
	case F_TURNS: return (double)s->turns;
	case F_WAITS: return (double)s->os_waits;
	case F_DISC: return (double)s->discovery_polls;
	case F_ZERO: return (double)s->zero_event_waits;
	case F_CPU: return (double)s->cpu_ns / 1e9;
	case F_BUSY: return (double)s->busy_ns / 1e9;
	case F_IDLE: return (double)s->idle_ns / 1e9;
	case F_MESH_IN: return (double)s->mesh_in;
	case F_MESH_OUT: return (double)s->mesh_out;
	case F_MESH_REF: return (double)s->mesh_refused;
	case F_MESH_DROP: return (double)s->mesh_dropped;
	case F_ALLOC: return (double)s->alloc_bytes;
	case F_FREED: return (double)s->freed_bytes;
	case F_STALLS: return (double)s->stalls;
	case F_POOL_SUB: return (double)s->pool_submitted;
	case F_POOL_REF: return (double)s->pool_refused;
	case F_POOL_DONE: return (double)s->pool_completed;
	case F_POOL_CANC: return (double)s->pool_cancelled;
	case F_POOL_WAIT: return (double)s->pool_wait_ns / 1e9;
	default: return (double)s->pool_run_ns / 1e9;
	}
}

enum { G_HANDLES, G_OPS, G_QUEUED, G_TIMERS, G_LEASES, G_INBOUND, G_BACKLOG, G_INFLIGHT,
       G_MAXPASS, G_NGAUGES };

static const struct {
	const char *name, *help;
} gauges[G_NGAUGES] = {
	[G_HANDLES] = {"turnloop_handles", "Live handles of the shard's loop."},
	[G_OPS] = {"turnloop_ops", "Pending operations of the shard's loop."},
	[G_QUEUED] = {"turnloop_queued_completions", "Completions queued for the next turns."},
	[G_TIMERS] = {"turnloop_timers", "Armed timers."},
	[G_LEASES] = {"turnloop_leases_out", "Pooled read buffers held."},
	[G_INBOUND] = {"turnloop_mesh_inbound", "Mesh messages waiting in inbound rings."},
	[G_BACKLOG] = {"turnloop_mesh_backlog", "Mesh results waiting for ring room."},
	[G_INFLIGHT] = {"turnloop_pool_in_flight", "The shard's pool jobs not yet delivered."},
	[G_MAXPASS] = {"turnloop_pass_max_seconds", "The longest pass since the shard started."},
};

static double gauge_of(const tl_stats_shard *s, int g)
{
	switch (g) {
	case G_HANDLES: return (double)s->handles;
	case G_OPS: return (double)s->ops;
	case G_QUEUED: return (double)s->queued;
	case G_TIMERS: return (double)s->timers;
	case G_LEASES: return (double)s->leases_out;
	case G_INBOUND: return (double)s->mesh_inbound;
	case G_BACKLOG: return (double)s->mesh_backlog;
	case G_INFLIGHT: return (double)s->pool_in_flight;
	default: return (double)s->max_pass_ns / 1e9;
	}
}

/* A label value: backslash, quote and newline escaped (the escaped names
 * hold no newline, but the rule is the format's). */
static const char *prom_label(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; *s && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"')
			buf[o++] = '\\';
		buf[o++] = *s == '\n' ? 'n' : *s;
	}
	buf[o] = '\0';
	return buf;
}

/* A family name as a metric name: [A-Za-z0-9_] kept, anything else '_'. */
static void prom_name(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; *s && o + 1 < len; s++)
		buf[o++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			    (*s >= '0' && *s <= '9'))
				   ? *s
				   : '_';
	buf[o] = '\0';
}

static void put_prometheus(const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	char drv[4 * sizeof in->driver], lab[2 * sizeof drv];
	struct node_view nv[64];
	uint32_t nn;

	prom_head("turnloop_info", "gauge", "The runtime behind these stats (always 1).");
	printf("turnloop_info{pid=\"%d\",driver=\"%s\",state=\"%s\",layout=\"%u\",arenas=\"%s\"} 1\n",
	       pid, prom_label(clean(in->driver, drv, sizeof drv), lab, sizeof lab),
	       state_name(in->state), in->version, (in->flags & TL_STATS_F_ARENAS) ? "on" : "off");
	prom_head("turnloop_shard_info", "gauge", "Where each shard runs (always 1).");
	for (uint32_t i = 0; i < in->shards; i++)
		printf("turnloop_shard_info{shard=\"%u\",cpu=\"%d\",numa=\"%d\",tid=\"%d\"} 1\n", i,
		       b->sh[i].cpu, b->sh[i].numa, b->sh[i].tid);
	for (int f = 0; f < F_NCOUNTERS; f++) {
		prom_head(counters[f].name, "counter", counters[f].help);
		/* Seconds to the nanosecond; counts are whole (exact up to
		 * 2^53 as doubles). */
		for (uint32_t i = 0; i < in->shards; i++)
			printf(strstr(counters[f].name, "seconds") ? "%s{shard=\"%u\"} %.9f\n"
								   : "%s{shard=\"%u\"} %.0f\n",
			       counters[f].name, i, counter_of(&b->sh[i], f));
	}
	prom_head("turnloop_completions_total", "counter", "Completions handed out, by kind.");
	for (uint32_t i = 0; i < in->shards; i++)
		for (uint32_t k = 0; k < TL_K_COUNT_; k++)
			printf("turnloop_completions_total{shard=\"%u\",kind=\"%s\"} %llu\n", i,
			       kind_names[k], (unsigned long long)b->sh[i].completions[k]);
	for (int g = 0; g < G_NGAUGES; g++) {
		prom_head(gauges[g].name, "gauge", gauges[g].help);
		for (uint32_t i = 0; i < in->shards; i++)
			printf(g == G_MAXPASS ? "%s{shard=\"%u\"} %.9f\n" : "%s{shard=\"%u\"} %.0f\n",
			       gauges[g].name, i, gauge_of(&b->sh[i], g));
	}
	/* Bucket i holds passes of [2^(i-1), 2^i) ns, so le = 2^i ns is its
	 * bound to within a nanosecond; the last bucket is everything else.
	 * The sum is busy_ns: the same passes, timed the same way. */
	prom_head("turnloop_pass_seconds", "histogram",
		  "Pass time (a turn and the program's code after it, without the OS wait).");
	for (uint32_t i = 0; i < in->shards; i++) {
		const tl_stats_shard *s = &b->sh[i];
		uint64_t run = 0;

		for (uint32_t k = 0; k + 1 < TL_STATS_HIST; k++) {
			run += s->pass_hist[k];
			printf("turnloop_pass_seconds_bucket{shard=\"%u\",le=\"%.9g\"} %llu\n", i,
			       k ? ldexp(1, (int)k) / 1e9 : 0.0, (unsigned long long)run);
		}
		run += s->pass_hist[TL_STATS_HIST - 1];
		printf("turnloop_pass_seconds_bucket{shard=\"%u\",le=\"+Inf\"} %llu\n", i,
		       (unsigned long long)run);
		printf("turnloop_pass_seconds_sum{shard=\"%u\"} %.9f\n", i, (double)s->busy_ns / 1e9);
		printf("turnloop_pass_seconds_count{shard=\"%u\"} %llu\n", i, (unsigned long long)run);
	}
	/* The pool per node: a sample's own two readings give no rates, so
	 * only its gauges. */
	nn = nodes_of(b, b, nv, 64);
	static const char *const pn[6][2] = {
		{"turnloop_pool_node_threads", "Bounded pool workers of the node."},
		{"turnloop_pool_node_busy", "Bounded pool workers running a job."},
		{"turnloop_pool_node_queued", "Bounded pool jobs waiting."},
		{"turnloop_pool_node_reserved", "Bounded pool queue slots promised."},
		{"turnloop_pool_node_long_threads", "Long pool workers of the node."},
		{"turnloop_pool_node_long_busy", "Long pool workers running a job."},
	};
	for (int g = 0; g < 6; g++) {
		prom_head(pn[g][0], "gauge", pn[g][1]);
		for (uint32_t k = 0; k < nn; k++) {
			const tl_stats_shard *f = nv[k].fresh;
			uint64_t v[6] = {f->node_threads, f->node_busy, f->node_queued,
					 f->node_reserved, f->node_long_threads, f->node_long_busy};

			printf("%s{node=\"%lld\"} %llu\n", pn[g][0], (long long)nv[k].node,
			       (unsigned long long)v[g]);
		}
	}
	/* The program's families: turnloop_program_<name>[_total]. */
	for (uint32_t k = 0; k < in->families; k++) {
		const tl_stats_family *f = &b->fams[k];
		char base[NAME_OUT], metric[NAME_OUT + 32];
		int gauge = f->kind == TL_STAT_GAUGE, dup = 0;

		prom_name(f->name, base, sizeof base);
		snprintf(metric, sizeof metric, "turnloop_program_%s%s", base, gauge ? "" : "_total");
		/* Names the runtime keeps apart may meet once escaped (a
		 * region written by something else): the first one wins. */
		for (uint32_t e = 0; e < k && !dup; e++) {
			char other[NAME_OUT];

			prom_name(b->fams[e].name, other, sizeof other);
			dup = !strcmp(other, base);
		}
		if (dup) {
			printf("# %s: skipped, a family of the same name came first\n", metric);
			continue;
		}
		prom_head(metric, gauge ? "gauge" : "counter", "A statistic of the program's own.");
		for (uint32_t r = 0; r < f->rows; r++) {
			uint32_t v = f->first + r;
			char row[2 * LABEL_OUT + 16];

			if (b->labels[v][0]) {
				char l[2 * LABEL_OUT];

				snprintf(row, sizeof row, ",row=\"%s\"",
					 prom_label(b->labels[v], l, sizeof l));
			} else if (f->rows > 1) {
				snprintf(row, sizeof row, ",row=\"%u\"", r);
			} else {
				row[0] = '\0';
			}
			for (uint32_t i = 0; i < in->shards; i++) {
				if (gauge)
					printf("%s{shard=\"%u\"%s} %lld\n", metric, i, row,
					       (long long)(int64_t)val(b, i, v));
				else
					printf("%s{shard=\"%u\"%s} %llu\n", metric, i, row,
					       (unsigned long long)val(b, i, v));
			}
		}
	}
}

/* ---- stats: the command ---- */

static void sleep_s(double secs)
{
	struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int cmd_stats(int argc, char **argv)
{
	struct tlshard_stats_opts o;
	struct sample s[2] = {{0}};
	tl_stats_reader *r;
	char err[1024];
	int rc = tlshard_stats_parse(argc, argv, &o, err, sizeof err), cur = 0, tty;

	if (rc == 1) {
		fputs(help_stats, stdout);
		return 0;
	}
	if (rc < 0)
		return bad("%s", err);
	rc = tl_stats_open(&r, o.pid);
	if (rc < 0) {
		fprintf(stderr, "tlshard: %s\n", tl_error_detail());
		return 1;
	}
	rc = 1;
	if (sample_read(r, o.pid, &s[0]) < 0)
		goto out;
	if (o.format == TLSHARD_PROMETHEUS) {
		put_prometheus(&s[0], o.pid);
		rc = 0;
		goto out;
	}
	if (!o.watch) {
		/* Rates need two readings. */
		sleep_s(0.5);
		if (sample_read(r, o.pid, &s[1]) < 0)
			goto out;
		if (o.format == TLSHARD_JSON) {
			rc = put_json(stats_json(&s[0], &s[1], o.pid), 1);
		} else {
			put_table(&s[0], &s[1], o.pid);
			rc = 0;
		}
		goto out;
	}
	tty = isatty(1);
	for (uint64_t k = 0; !o.count || k < o.count; k++) {
		sleep_s(o.secs);
		if (sample_read(r, o.pid, &s[cur ^ 1]) < 0)
			goto out;
		cur ^= 1;
		if (o.format == TLSHARD_JSON) {
			if (put_json(stats_json(&s[cur ^ 1], &s[cur], o.pid), 0))
				goto out;
		} else {
			time_t now = time(NULL);
			char when[32];

			strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
			/* On a terminal: home and clear, then the frame, as top
			 * does; elsewhere successive blocks. */
			printf("%s%stlshard stats %d at %s (every %.2f s)\n", tty ? "\033[H\033[J" : "",
			       k && !tty ? "\n" : "", o.pid, when, o.secs);
			put_table(&s[cur ^ 1], &s[cur], o.pid);
		}
		fflush(stdout);
	}
	rc = 0;
out:
	fflush(stdout);
	sample_free(&s[0]);
	sample_free(&s[1]);
	tl_stats_close(r);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return bad("a command is needed (topo, plan, run, stats); see tlshard --help");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(help_main, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "plan"))
		return cmd_plan(argc, argv);
	if (!strcmp(argv[1], "topo"))
		return cmd_topo(argc, argv);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc, argv);
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(argc, argv);
	return bad("unknown command '%s' (topo, plan, run, stats; see tlshard --help)", argv[1]);
}
