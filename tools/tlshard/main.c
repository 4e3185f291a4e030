/* tools/tlshard/main.c: tlshard's command dispatch, its main manual, and the text helpers its commands share. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tlshard.h"

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

int tlshard_bad(const char *fmt, ...)
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

/* Anything but printable ASCII shown as \xNN, so that no control sequence
 * from another process ever reaches the terminal, a JSON string or a
 * metric. */
const char *tlshard_clean(const char *s, char *buf, size_t len)
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
const char *tlshard_fmt_num(double v, char *buf, size_t len)
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

const char *tlshard_fmt_bytes(double v, char *buf, size_t len)
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

const char *tlshard_fmt_ns(double ns, char *buf, size_t len)
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

int main(int argc, char **argv)
{
	if (argc < 2)
		return tlshard_bad("a command is needed (topo, plan, run, stats); see tlshard --help");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(help_main, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "plan"))
		return tlshard_cmd_plan(argc, argv);
	if (!strcmp(argv[1], "topo"))
		return tlshard_cmd_topo(argc, argv);
	if (!strcmp(argv[1], "run"))
		return tlshard_cmd_run(argc, argv);
	if (!strcmp(argv[1], "stats"))
		return tlshard_cmd_stats(argc, argv);
	return tlshard_bad("unknown command '%s' (topo, plan, run, stats; see tlshard --help)",
			   argv[1]);
}
