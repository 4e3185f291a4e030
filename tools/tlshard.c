/* tools/tlshard.c: print a shard plan, run a program on a chosen set of shards, or watch a running program's live per-shard stats. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "turnloop.h"
#include "turnloop/shard.h"
#include "cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tlshard plan [--cpus LIST] [--shards N] [--smt]\n"
		"       tlshard run [--cpus LIST] [--shards N] [--smt] -- CMD [ARGS...]\n"
		"       tlshard stats PID [--watch SECS] [--count N]\n"
		"  plan   print which CPU, core and NUMA node each shard gets\n"
		"  run    set TL_CPUS/TL_SHARDS/TL_SMT and the CPU affinity, then exec CMD\n"
		"  stats  read the live counters of a turnloop process (one line per shard);\n"
		"         --watch prints rates every SECS seconds, --count times (default: forever)\n");
}

static int bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "tlshard: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return 2;
}

/* ---- plan and run ---- */

static int compute(struct tlshard_plan_opts *o, tl_plan *plan)
{
	int r = tl_plan_from_env(&o->req);

	if (r < 0) {
		fprintf(stderr, "tlshard: bad TL_CPUS, TL_SHARDS or TL_SMT in the environment\n");
		return 2;
	}
	r = tl_plan_compute(plan, &o->req, NULL);
	if (r == -EINVAL) {
		char why[256];

		tl_plan_explain(&o->req, NULL, why, sizeof why);
		fprintf(stderr, "tlshard: no such plan: %s\n", why);
		return 2;
	}
	if (r < 0) {
		fprintf(stderr, "tlshard: cannot read the topology: %s\n", tl_strerror(r));
		return 1;
	}
	return 0;
}

static int cmd_plan(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	char err[1024];
	tl_plan plan;
	size_t len;
	char *buf;
	int r;

	if (tlshard_plan_parse(argc, argv, &o, err, sizeof err) < 0)
		return bad("%s", err);
	r = compute(&o, &plan);
	if (r)
		return r;
	len = (size_t)plan.count * 80 + 1;
	buf = malloc(len);
	if (!buf || tl_plan_format(&plan, buf, len) < 0) {
		fprintf(stderr, "tlshard: out of memory\n");
		free(buf);
		tl_plan_free(&plan);
		return 1;
	}
	fputs(buf, stdout);
	printf("%u shard%s on %u NUMA node%s\n", plan.count, plan.count == 1 ? "" : "s",
	       plan.numa_nodes, plan.numa_nodes == 1 ? "" : "s");
	free(buf);
	tl_plan_free(&plan);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct tlshard_plan_opts o;
	tl_plan plan;
	cpu_set_t set;
	char list[64], err[1024], *cpus;
	size_t cap, off = 0;
	int i, r;

	if (tlshard_run_parse(argc, argv, &o, err, sizeof err) < 0)
		return bad("%s", err);
	i = o.cmd;
	/* Plan first, so that a request that cannot be met fails here and
	 * not inside the program. */
	r = compute(&o, &plan);
	if (r)
		return r;
	cap = (size_t)plan.count * 8 + 1;
	cpus = malloc(cap);
	if (!cpus) {
		tl_plan_free(&plan);
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
	if (setenv("TL_CPUS", cpus, 1) || setenv("TL_SHARDS", list, 1) ||
	    (o.set_smt && setenv("TL_SMT", "1", 1))) {
		perror("tlshard: setenv");
		return 1;
	}
	tl_plan_free(&plan);
	free(cpus);
	if (sched_setaffinity(0, sizeof set, &set) < 0) {
		perror("tlshard: sched_setaffinity");
		return 1;
	}
	execvp(argv[i], &argv[i]);
	fprintf(stderr, "tlshard: cannot run '%s': %s\n", argv[i], strerror(errno));
	return 127;
}

/* ---- stats ---- */

static uint64_t sum_completions(const tl_stats_shard *s)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < TL_STATS_KINDS; k++)
		n += s->completions[k];
	return n;
}

static const char *state_name(uint32_t s)
{
	static const char *names[] = {"starting", "running", "stopping", "stopped"};

	return s < 4 ? names[s] : "?";
}

static const char *clean(const char *s, char *buf, size_t len);

static void print_header(const tl_stats_info *in)
{
	char drv[4 * sizeof in->driver];

	printf("pid %d: %u shard%s, driver %s, %s, arenas %s, pool stats %s, stall threshold %.1f ms\n",
	       in->pid, in->shards, in->shards == 1 ? "" : "s",
	       in->driver[0] ? clean(in->driver, drv, sizeof drv) : "?", state_name(in->state),
	       (in->flags & TL_STATS_F_ARENAS) ? "on" : "off",
	       (in->flags & TL_STATS_F_POOL) ? "on" : "n/a", (double)in->stall_ns / 1e6);
}

/* Bytes from another process, printable: anything but printable ASCII is
 * shown as \xNN (and a backslash as \\), so no control sequence reaches the
 * terminal. */
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

static void print_named(tl_stats_reader *r, const tl_stats_info *in, const uint64_t *a,
			const uint64_t *b, double secs)
{
	for (uint32_t k = 0; k < in->families; k++) {
		tl_stats_family f;
		char name[4 * TL_STATS_NAME_MAX];

		if (tl_stats_family_get(r, k, &f) < 0)
			continue;
		clean(f.name, name, sizeof name);
		for (uint32_t j = 0; j < f.rows; j++) {
			uint32_t v = f.first + j;

			printf(" %s", name);
			if (f.rows > 1)
				printf("[%u]", j);
			if (f.kind == TL_STAT_GAUGE)
				printf("=%lld", (long long)b[v]);
			else if (a && secs > 0)
				printf("=%.0f/s", (double)(b[v] - a[v]) / secs);
			else
				printf("=%llu", (unsigned long long)b[v]);
		}
	}
}

/* One line per shard: totals (a NULL), or rates between a and b. busy is
 * the share of time the shard's thread was on a CPU (kernel work in its OS
 * waits included): over the interval, or since the region was made. */
static void print_shard(tl_stats_reader *r, const tl_stats_info *in, const tl_stats_shard *a,
			const tl_stats_shard *b, const uint64_t *va, const uint64_t *vb,
			double secs)
{
	double live = (double)(b->alloc_bytes - b->freed_bytes) / 1048576.0;

	if (!a) {
		uint64_t t = b->updated_ns > in->started_ns ? b->updated_ns - in->started_ns : 0;

		printf("shard %u cpu %d numa %d: turns %llu waits %llu completions %llu busy %.1f%% "
		       "mesh in %llu out %llu refused %llu inbound %llu alloc %.1f MiB live",
		       b->shard, b->cpu, b->numa, (unsigned long long)b->turns,
		       (unsigned long long)b->os_waits, (unsigned long long)sum_completions(b),
		       t ? 100.0 * (double)b->cpu_ns / (double)t : 0.0,
		       (unsigned long long)b->mesh_in, (unsigned long long)b->mesh_out,
		       (unsigned long long)b->mesh_refused, (unsigned long long)b->mesh_inbound,
		       b->arena == UINT32_MAX ? 0.0 : live);
	} else {
		uint64_t busy = b->cpu_ns - a->cpu_ns;

		printf("shard %u cpu %d: turns/s %.0f waits/s %.0f completions/s %.0f busy %.1f%% "
		       "mesh in/s %.0f out/s %.0f inbound %llu alloc %.1f MiB live",
		       b->shard, b->cpu, (double)(b->turns - a->turns) / secs,
		       (double)(b->os_waits - a->os_waits) / secs,
		       (double)(sum_completions(b) - sum_completions(a)) / secs,
		       100.0 * (double)busy / (secs * 1e9),
		       (double)(b->mesh_in - a->mesh_in) / secs,
		       (double)(b->mesh_out - a->mesh_out) / secs, (unsigned long long)b->mesh_inbound,
		       b->arena == UINT32_MAX ? 0.0 : live);
	}
	/* Pool: submitted/refused/completed and in flight by this shard; its
	 * node's bounded workers/busy/queued and long workers/busy. */
	printf(" pool %llu/%llu/%llu inflight %llu node %llu/%llu/%llu long %llu/%llu",
	       (unsigned long long)b->pool_submitted, (unsigned long long)b->pool_refused,
	       (unsigned long long)b->pool_completed, (unsigned long long)b->pool_in_flight,
	       (unsigned long long)b->node_threads, (unsigned long long)b->node_busy,
	       (unsigned long long)b->node_queued, (unsigned long long)b->node_long_threads,
	       (unsigned long long)b->node_long_busy);
	printf(" stalls %llu max_pass %.2f ms", (unsigned long long)b->stalls,
	       (double)b->max_pass_ns / 1e6);
	print_named(r, in, va, vb, a ? secs : 0);
	putchar('\n');
}

/* Every shard's record and values; a target that went away ends it with a
 * line that says so. */
static int read_all(tl_stats_reader *r, int pid, const tl_stats_info *in, tl_stats_shard *v,
		    uint64_t *vals)
{
	tl_stats_info now;
	int rc = tl_stats_info_get(r, &now);

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
	for (uint32_t i = 0; i < in->shards; i++) {
		rc = tl_stats_read(r, i, &v[i], vals + (size_t)i * in->values, in->values);
		if (rc < 0) {
			fprintf(stderr, "tlshard: cannot read shard %u: %s\n", i, tl_strerror(rc));
			return -1;
		}
	}
	return 0;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmd_stats(int argc, char **argv)
{
	struct tlshard_stats_opts o;
	uint64_t count, *va = NULL, *vb = NULL;
	double secs, ta, tb;
	tl_stats_reader *r;
	tl_stats_info info;
	tl_stats_shard *a, *b;
	char err[1024];
	int rc;

	if (tlshard_stats_parse(argc, argv, &o, err, sizeof err) < 0)
		return bad("%s", err);
	count = o.count;
	secs = o.secs;
	rc = tl_stats_open(&r, o.pid, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "tlshard: %s\n", err);
		return 1;
	}
	if (tl_stats_info_get(r, &info) < 0) {
		fprintf(stderr, "tlshard: the region changed while reading it\n");
		tl_stats_close(r);
		return 1;
	}
	a = calloc(info.shards, sizeof *a);
	b = calloc(info.shards, sizeof *b);
	va = calloc((size_t)info.shards * info.values + 1, sizeof *va);
	vb = calloc((size_t)info.shards * info.values + 1, sizeof *vb);
	rc = 1;
	if (!a || !b || !va || !vb) {
		fprintf(stderr, "tlshard: out of memory\n");
		goto out;
	}
	print_header(&info);
	if (read_all(r, o.pid, &info, b, vb) < 0)
		goto out;
	tb = mono_s();
	if (!secs) {
		for (uint32_t i = 0; i < info.shards; i++)
			print_shard(r, &info, NULL, &b[i], NULL, vb + (size_t)i * info.values, 0);
		rc = 0;
		goto out;
	}
	for (uint64_t k = 0; !count || k < count; k++) {
		struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
		tl_stats_shard *t = a;
		uint64_t *tv = va;

		a = b;
		b = t;
		va = vb;
		vb = tv;
		ta = tb;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		if (read_all(r, o.pid, &info, b, vb) < 0)
			goto out;
		tb = mono_s();
		for (uint32_t i = 0; i < info.shards; i++)
			print_shard(r, &info, &a[i], &b[i], va + (size_t)i * info.values,
				    vb + (size_t)i * info.values, tb - ta);
		fflush(stdout);
	}
	rc = 0;
out:
	free(a);
	free(b);
	free(va);
	free(vb);
	tl_stats_close(r);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "plan"))
		return cmd_plan(argc, argv);
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc, argv);
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(argc, argv);
	return bad("unknown command '%s' (plan, run, stats)", argv[1]);
}
