/* tools/tlshard/stats.c: tlshard stats: reads a running program's live stats region twice (or every --watch interval) and hands the two samples to the table, JSON or Prometheus output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

#include "cli.h"
#include "tlshard.h"

static const char help_stats[] =
	"NAME\n"
	"    tlshard stats - live per-shard stats of a running turnloop program\n"
	"\n"
	"SYNOPSIS\n"
	"    tlshard stats PID [--watch [SECS]] [--count N] [--json]\n"
	"                      [--format table|json|prometheus]\n"
	"\n"
	"DESCRIPTION\n"
#ifdef _WIN32
	"    Reads the stats region of process PID (its Windows process id: the\n"
	"    mapping Local\\turnloop-stats-PID) after checking that the process is\n"
	"    this user's, that the mapping is owned by this user and admits no one\n"
	"    else, and that the process that wrote it is PID itself and alive.\n"
	"    Reading never stops or slows the program: every shard's record is\n"
	"    copied under its own sequence lock. This build writes no JSON (it has\n"
	"    no cJSON): --json and --format json answer one line, status 1.\n"
#else
	"    Reads the stats region of process PID (/dev/shm/turnloop-UID/PID) after\n"
	"    checking that it belongs to that process's user and that the process\n"
	"    that wrote it is PID itself and alive. Reading never stops or slows the\n"
	"    program: every shard's record is copied under its own sequence lock.\n"
#endif
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
	"      NAPS/s        turns that napped before parking (tl_config.nap_ns: a\n"
	"                    short sleep that lets more work gather; 0 when off)\n"
	"      MESH-IN/s, MESH-OUT/s   messages between shards\n"
	"      LEASES        pooled read buffers the program holds now\n"
	"      ALLOC         bytes the shard's thread allocated less what it freed\n"
	"                    (jemalloc's counters; - when arenas are off): a block one\n"
	"                    shard allocates and another frees moves both columns,\n"
	"                    unless it goes back by tl_shard_free\n"
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

/* ---- samples ---- */

const char *tlshard_state_name(uint32_t state)
{
	static const char *const names[] = {"starting", "running", "stopping", "stopped"};

	return state < 4 ? names[state] : "unknown";
}

uint64_t tlshard_val(const struct sample *s, uint32_t i, uint32_t v)
{
	return v < s->info.values ? s->vals[(size_t)i * s->info.values + v] : 0;
}

static void sample_free(struct sample *s)
{
	free(s->sh);
	free(s->vals);
	free(s->fams);
	free(s->labels);
	memset(s, 0, sizeof *s);
}

/* Windows: the performance counter, so that tlshard.exe needs no
 * winpthreads DLL for clock_gettime and nanosleep. */
static double mono_s(void)
{
#ifdef _WIN32
	LARGE_INTEGER f, c;

	QueryPerformanceFrequency(&f);
	QueryPerformanceCounter(&c);
	return (double)c.QuadPart / (double)f.QuadPart;
#else
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
#endif
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
		char name[TLSHARD_NAME_OUT];

		rc = tl_stats_family_get(r, i, &s->fams[i]);
		if (rc < 0) {
			fprintf(stderr, "tlshard: process %d: its stat family %u cannot be read: %s\n",
				pid, i, tl_strerror(rc));
			return -1;
		}
		tlshard_clean(s->fams[i].name, name, sizeof name);
		snprintf(s->fams[i].name, sizeof s->fams[i].name, "%.*s",
			 (int)sizeof s->fams[i].name - 1, name);
	}
	for (uint32_t v = 0; v < in->values; v++) {
		char raw[TL_STATS_LABEL_MAX];

		if (tl_stats_label_get(r, v, raw, sizeof raw) < 0)
			raw[0] = '\0';
		tlshard_clean(raw, s->labels[v], TLSHARD_LABEL_OUT);
	}
	for (uint32_t i = 0; i < in->shards; i++) {
		rc = tl_stats_shard_get(r, i, &s->sh[i], s->vals + (size_t)i * in->values,
					in->values);
		if (rc < 0) {
			fprintf(stderr, "tlshard: process %d: cannot read shard %u: %s\n", pid, i,
				tl_strerror(rc));
			return -1;
		}
	}
	s->t = mono_s();
	return 0;
}


/* ---- the command ---- */

/* Can the terminal on stdout take the escape sequences that redraw in
 * place? A Windows console needs them turned on (Windows 10 and later);
 * without them --watch prints successive blocks. */
static int vt_on(void)
{
#ifdef _WIN32
	HANDLE h = GetStdHandle(STD_OUTPUT_HANDLE);
	DWORD mode;

	return GetConsoleMode(h, &mode) &&
	       SetConsoleMode(h, mode | ENABLE_VIRTUAL_TERMINAL_PROCESSING);
#else
	return 1;
#endif
}

/* The Prometheus text format ends its lines with \n alone; the C runtime on
 * Windows writes \r\n to a file in text mode. */
static void plain_newlines(void)
{
#ifdef _WIN32
	fflush(stdout);
	_setmode(_fileno(stdout), _O_BINARY);
#endif
}

static void sleep_s(double secs)
{
#ifdef _WIN32
	Sleep((DWORD)(secs * 1e3 + 0.5));
#else
	struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
#endif
}

int tlshard_cmd_stats(int argc, char **argv)
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
		return tlshard_bad("%s", err);
	if (o.format == TLSHARD_JSON && tlshard_json_absent()) {
		fprintf(stderr, "tlshard: %s\n", tlshard_json_absent());
		return 1;
	}
	rc = tl_stats_open(&r, o.pid);
	if (rc < 0) {
		fprintf(stderr, "tlshard: %s\n", tl_error_detail());
		return 1;
	}
	rc = 1;
	if (sample_read(r, o.pid, &s[0]) < 0)
		goto out;
	if (o.format == TLSHARD_PROMETHEUS) {
		plain_newlines();
		tlshard_put_prometheus(&s[0], o.pid);
		rc = 0;
		goto out;
	}
	if (!o.watch) {
		/* Rates need two readings. */
		sleep_s(0.5);
		if (sample_read(r, o.pid, &s[1]) < 0)
			goto out;
		if (o.format == TLSHARD_JSON) {
			rc = tlshard_put_stats_json(&s[0], &s[1], o.pid, 1);
		} else {
			tlshard_put_table(&s[0], &s[1], o.pid);
			rc = 0;
		}
		goto out;
	}
	tty = isatty(1) && vt_on();
	for (uint64_t k = 0; !o.count || k < o.count; k++) {
		sleep_s(o.secs);
		if (sample_read(r, o.pid, &s[cur ^ 1]) < 0)
			goto out;
		cur ^= 1;
		if (o.format == TLSHARD_JSON) {
			if (tlshard_put_stats_json(&s[cur ^ 1], &s[cur], o.pid, 0))
				goto out;
		} else {
			time_t now = time(NULL);
			char when[32];

			strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
			/* On a terminal: home and clear, then the frame, as top
			 * does; elsewhere successive blocks. */
			printf("%s%stlshard stats %d at %s (every %.2f s)\n", tty ? "\033[H\033[J" : "",
			       k && !tty ? "\n" : "", o.pid, when, o.secs);
			tlshard_put_table(&s[cur ^ 1], &s[cur], o.pid);
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
