/* tools/tlshard/prom.c: tlshard stats --format prometheus: the text exposition format of one sample (totals; a scraper computes rates), every metric named in the field table, then the program's own families. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tlshard.h"

#define F(k) (&tlshard_fields[k])

/* A metric family: HELP and TYPE once, then its samples. */
static void prom_head(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
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

/* Row f's samples for every shard of b: seconds to the nanosecond, counts
 * and bytes whole (exact up to 2^53 as doubles). */
static void put_field(const struct tlshard_field *f, const struct sample *b)
{
	const tl_stats_info *in = &b->info;
	double v;
	int has;

	if (f->how == H_HIST) {
		prom_head(f->metric, "histogram", f->help);
		/* Bucket i holds passes of [2^(i-1), 2^i) ns, so le = 2^i ns is
		 * its bound to within a nanosecond; the last bucket is
		 * everything else. The sum is busy_ns: the same passes, timed
		 * the same way. */
		for (uint32_t i = 0; i < in->shards; i++) {
			const tl_stats_shard *s = &b->sh[i];
			uint64_t run = 0;

			for (uint32_t k = 0; k + 1 < TL_STATS_HIST; k++) {
				run += s->pass_hist[k];
				printf("%s_bucket{shard=\"%u\",le=\"%.9g\"} %llu\n", f->metric, i,
				       k ? ldexp(1, (int)k) / 1e9 : 0.0, (unsigned long long)run);
			}
			run += s->pass_hist[TL_STATS_HIST - 1];
			printf("%s_bucket{shard=\"%u\",le=\"+Inf\"} %llu\n", f->metric, i,
			       (unsigned long long)run);
			printf("%s_sum{shard=\"%u\"} %.9f\n", f->metric, i, (double)s->busy_ns / 1e9);
			printf("%s_count{shard=\"%u\"} %llu\n", f->metric, i, (unsigned long long)run);
		}
		return;
	}
	prom_head(f->metric, f->kind == K_GAUGE ? "gauge" : "counter", f->help);
	for (uint32_t i = 0; i < in->shards; i++) {
		const tl_stats_shard *s = &b->sh[i];

		if (f->how == H_KINDS) {
			for (uint32_t k = 0; k < TL_K_COUNT_; k++)
				printf("%s{shard=\"%u\",kind=\"%s\"} %llu\n", f->metric, i,
				       tlshard_kind_names[k], (unsigned long long)s->completions[k]);
			continue;
		}
		v = tlshard_value(f, s, &has);
		if (!has)
			continue;
		if (f->unit == U_NS)
			printf("%s{shard=\"%u\"} %.9f\n", f->metric, i, v / 1e9);
		else
			printf("%s{shard=\"%u\"} %.0f\n", f->metric, i, v);
	}
}

/* The program's families: turnloop_program_<name>[_total]. */
static void put_program(const struct sample *b)
{
	const tl_stats_info *in = &b->info;

	for (uint32_t k = 0; k < in->families; k++) {
		const tl_stats_family *f = &b->fams[k];
		char base[TLSHARD_NAME_OUT], metric[TLSHARD_NAME_OUT + 32];
		int gauge = f->kind == TL_STAT_GAUGE, dup = 0;

		prom_name(f->name, base, sizeof base);
		snprintf(metric, sizeof metric, "turnloop_program_%s%s", base, gauge ? "" : "_total");
		/* Names the runtime keeps apart may meet once escaped (a
		 * region written by something else): the first one wins. */
		for (uint32_t e = 0; e < k && !dup; e++) {
			char other[TLSHARD_NAME_OUT];

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
			char row[2 * TLSHARD_LABEL_OUT + 16];

			if (b->labels[v][0]) {
				char l[2 * TLSHARD_LABEL_OUT];

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
					       (long long)(int64_t)tlshard_val(b, i, v));
				else
					printf("%s{shard=\"%u\"%s} %llu\n", metric, i, row,
					       (unsigned long long)tlshard_val(b, i, v));
			}
		}
	}
}

void tlshard_put_prometheus(const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	char drv[4 * sizeof in->driver], lab[2 * sizeof drv];
	struct tlshard_node nv[64];
	uint32_t nn;

	prom_head("turnloop_info", "gauge", "The runtime behind these stats (always 1).");
	printf("turnloop_info{pid=\"%d\",driver=\"%s\",state=\"%s\",layout=\"%u\",arenas=\"%s\"} 1\n",
	       pid, prom_label(tlshard_clean(in->driver, drv, sizeof drv), lab, sizeof lab),
	       tlshard_state_name(in->state), in->version,
	       (in->flags & TL_STATS_F_ARENAS) ? "on" : "off");
	prom_head("turnloop_shard_info", "gauge", "Where each shard runs (always 1).");
	for (uint32_t i = 0; i < in->shards; i++)
		printf("turnloop_shard_info{shard=\"%u\",cpu=\"%d\",numa=\"%d\",tid=\"%d\"} 1\n", i,
		       b->sh[i].cpu, b->sh[i].numa, b->sh[i].tid);
	for (uint32_t k = 0; k < tlshard_nfields; k++)
		if (F(k)->metric)
			put_field(F(k), b);
	/* The pool per node: a sample's own two readings give no rates, so
	 * only its gauges. */
	nn = tlshard_nodes(b, b, nv, 64);
	for (uint32_t k = 0; k < tlshard_nfields; k++) {
		const struct tlshard_field *f = F(k);

		if (!f->node_metric)
			continue;
		prom_head(f->node_metric, "gauge", f->node_help);
		for (uint32_t n = 0; n < nn; n++)
			printf("%s{node=\"%lld\"} %.0f\n", f->node_metric, (long long)nv[n].node,
			       tlshard_node_figure(f, &nv[n], 0));
	}
	put_program(b);
}
