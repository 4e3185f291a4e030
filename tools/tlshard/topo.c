/* tools/tlshard/topo.c: tlshard topo and run: the machine as hwloc sees it, what this process may use and the plan on it, and a program run on exactly the plan's CPUs (POSIX: the CPU affinity, exec). The plan itself is plan.c's. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "cli.h"
#include "json.h"
#include "tlshard.h"

/* ---- manuals ---- */

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
		tlshard_fmt_bytes((double)size, buf, len);
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
						       tlshard_fmt_bytes((double)node->attr->numanode
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

int tlshard_cmd_topo(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	struct allowed a = {0};
	hwloc_topology_t t = NULL;
	char err[1024], l1[256], l2[256], l3[256];
	tl_plan plan;
	int r = tlshard_topo_parse(argc, argv, &o, err, sizeof err);
	hwloc_obj_t pu = NULL;

	if (r == 1) {
		tlshard_print_help(help_topo);
		return 0;
	}
	if (r < 0)
		return tlshard_bad("%s", err);
	r = tlshard_plan_for(&o, &plan);
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

		cJSON_AddStringToObject(j, "topology", o.topology ? tlshard_clean(o.topology, l1, sizeof l1)
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
		cJSON_AddItemToObject(j, "plan", tlshard_plan_json(&plan, o.req.smt));
		r = tlshard_put_json(j, 1);
		goto out;
	}
	printf("%s: %d package%s, %d NUMA node%s, %d cores, %d PUs\n",
	       o.topology ? tlshard_clean(o.topology, l1, sizeof l1) : "this machine",
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
	tlshard_plan_summary(&plan, &o);
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

int tlshard_cmd_run(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	tl_plan plan;
	cpu_set_t set;
	char list[64], err[1024], *cpus;
	size_t cap, off = 0;
	int i, r = tlshard_run_parse(argc, argv, &o, err, sizeof err);

	if (r == 1) {
		tlshard_print_help(help_run);
		return 0;
	}
	if (r < 0)
		return tlshard_bad("%s", err);
	i = o.cmd;
	/* Plan first, so that a request that cannot be met fails here and
	 * not inside the program. */
	r = tlshard_plan_for(&o, &plan);
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
