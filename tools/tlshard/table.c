/* tools/tlshard/table.c: tlshard stats as tables: one row per shard and their sum, the pool per NUMA node and per shard, then the program's own counters and gauges; the columns come from the field table (fields.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tlshard.h"

#define F(k) (&tlshard_fields[k])

/* One cell of row f for shard i (x, y: its records at the interval's ends). */
static const char *cell(const struct tlshard_field *f, const tl_stats_shard *x,
			const tl_stats_shard *y, double dt, char *buf, size_t len)
{
	double v;
	int has;

	switch (f->cell) {
	case C_RATE:
		return tlshard_fmt_num(tlshard_rate(f, x, y, dt), buf, len);
	case C_SHARE:
		snprintf(buf, len, "%.1f%%", 100 * tlshard_rate(f, x, y, dt) / 1e9);
		return buf;
	case C_VALUE:
		snprintf(buf, len, "%.0f", tlshard_value(f, y, &has));
		return buf;
	case C_BYTES:
		v = tlshard_value(f, y, &has);
		return has ? tlshard_fmt_bytes(v, buf, len) : "-";
	case C_NS:
		v = f->how == H_QUANT || f->how == H_MEAN ? tlshard_interval(f, x, y)
							   : tlshard_value(f, y, &has);
		return v < 0 ? "-" : tlshard_fmt_ns(v, buf, len);
	default:
		return "";
	}
}

/* The "all" cell of row f: the shards' rates or values summed, or the
 * largest value. */
static const char *total(const struct tlshard_field *f, const struct sample *a,
			 const struct sample *b, double dt, char *buf, size_t len)
{
	double sum = 0, max = 0;
	int has;

	if (f->total == T_NONE)
		return "";
	if ((b->info.flags & f->total_needs) != f->total_needs)
		return "-";
	for (uint32_t i = 0; i < b->info.shards; i++) {
		double v = f->cell == C_RATE || f->cell == C_SHARE
				   ? tlshard_rate(f, &a->sh[i], &b->sh[i], dt)
				   : tlshard_value(f, &b->sh[i], &has);

		sum += v;
		max = v > max ? v : max;
	}
	switch (f->cell) {
	case C_RATE:
		return tlshard_fmt_num(sum, buf, len);
	case C_SHARE:
		snprintf(buf, len, "%.1f%%", 100 * sum / 1e9);
		return buf;
	case C_BYTES:
		return tlshard_fmt_bytes(sum, buf, len);
	case C_NS:
		return tlshard_fmt_ns(f->total == T_MAX ? max : sum, buf, len);
	default:
		snprintf(buf, len, "%.0f", f->total == T_MAX ? max : sum);
		return buf;
	}
}

/* The table of rows tbl, one line per shard (and their sum when all). */
static void shard_table(const struct sample *a, const struct sample *b, enum tlshard_tbl tbl,
			int hot, int all)
{
	const tl_stats_info *in = &b->info;
	double dt = b->t - a->t;
	char c[24];

	if (tbl == TB_SHARDS)
		printf("%-6s %4s %4s", "SHARD", "CPU", "NODE");
	else
		printf("%-10s", "POOL SHARD");
	for (uint32_t k = 0; k < tlshard_nfields; k++)
		if (F(k)->col && F(k)->tbl == tbl)
			printf(" %*s", F(k)->width, F(k)->col);
	putchar('\n');
	for (uint32_t i = 0; i < in->shards; i++) {
		const tl_stats_shard *y = &b->sh[i];
		char id[16];

		if (tbl == TB_SHARDS) {
			snprintf(id, sizeof id, "%s%u", (int)i == hot ? "*" : "", y->shard);
			printf("%-6s %4d %4d", id, y->cpu, y->numa);
		} else {
			printf("%-10u", y->shard);
		}
		for (uint32_t k = 0; k < tlshard_nfields; k++)
			if (F(k)->col && F(k)->tbl == tbl)
				printf(" %*s", F(k)->width, cell(F(k), &a->sh[i], y, dt, c, sizeof c));
		putchar('\n');
	}
	if (!all)
		return;
	printf("%-6s %4s %4s", "all", "", "");
	for (uint32_t k = 0; k < tlshard_nfields; k++)
		if (F(k)->col && F(k)->tbl == tbl)
			printf(" %*s", F(k)->width, total(F(k), a, b, dt, c, sizeof c));
	putchar('\n');
}

/* The pool per NUMA node, then per shard; "not started" until it is. */
static void pool_tables(const struct sample *a, const struct sample *b)
{
	struct tlshard_node nodes[64];
	double dt = b->t - a->t;
	uint32_t nn = tlshard_nodes(a, b, nodes, 64);
	int started = 0;
	char c[24];

	for (uint32_t k = 0; k < nn; k++)
		started |= nodes[k].fresh->node_threads || nodes[k].fresh->node_long_threads;
	for (uint32_t i = 0; i < b->info.shards; i++)
		started |= b->sh[i].pool_submitted != 0;
	if (!started) {
		printf("\npool: not started\n");
		return;
	}
	printf("\n%-9s", "POOL NODE");
	for (uint32_t k = 0; k < tlshard_nfields; k++)
		if (F(k)->node_col)
			printf(" %*s", F(k)->node_width, F(k)->node_col);
	putchar('\n');
	for (uint32_t n = 0; n < nn; n++) {
		printf("%-9lld", (long long)nodes[n].node);
		for (uint32_t k = 0; k < tlshard_nfields; k++) {
			const struct tlshard_field *f = F(k);
			double v;

			if (!f->node_col)
				continue;
			v = tlshard_node_figure(f, &nodes[n], dt);
			if (f->node_cell == C_RATE)
				tlshard_fmt_num(v, c, sizeof c);
			else if (f->node_cell == C_NS && v < 0)
				snprintf(c, sizeof c, "-");
			else if (f->node_cell == C_NS)
				tlshard_fmt_ns(v, c, sizeof c);
			else
				snprintf(c, sizeof c, "%.0f", v);
			printf(" %*s", f->node_width, c);
		}
		putchar('\n');
	}
	shard_table(a, b, TB_POOL, -1, 0);
}

/* ---- the program's own ---- */

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
		if (tlshard_val(b, i, v) || tlshard_val(a, i, v))
			return 0;
	return 1;
}

static void program_table(const struct sample *a, const struct sample *b)
{
	const tl_stats_info *in = &b->info;
	double dt = b->t - a->t;

	/* Counters as rates, gauges as values. Per shard when there are few
	 * shards, else the spread. */
	if (!in->families)
		return;
	int wide = in->shards <= 8;
	int namew = 20;

	for (uint32_t k = 0; k < in->families; k++)
		for (uint32_t j = 0; j < b->fams[k].rows; j++) {
			char n[TLSHARD_NAME_OUT + TLSHARD_LABEL_OUT + 16];
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
			char n[TLSHARD_NAME_OUT + TLSHARD_LABEL_OUT + 16], c[24];

			if (row_unused(a, b, f, j))
				continue;
			printf("%-*s %-7s", namew, row_name(b, f, j, n, sizeof n),
			       gauge ? "gauge" : "counter");
			for (uint32_t i = 0; i < in->shards; i++) {
				double x = gauge ? (double)(int64_t)tlshard_val(b, i, v)
						 : (double)tlshard_d(tlshard_val(b, i, v),
								    tlshard_val(a, i, v)) / dt;

				sum += x;
				lo = x < lo ? x : lo;
				hi = x > hi ? x : hi;
				if (wide) {
					tlshard_fmt_num(x, c, sizeof c);
					if (!gauge)
						strcat(c, "/s");
					printf(" %10s", c);
				}
			}
			if (!wide) {
				char c2[24];

				tlshard_fmt_num(lo, c, sizeof c);
				tlshard_fmt_num(hi, c2, sizeof c2);
				if (!gauge) {
					strcat(c, "/s");
					strcat(c2, "/s");
				}
				printf(" %10s %10s", c, c2);
			}
			tlshard_fmt_num(sum, c, sizeof c);
			if (!gauge)
				strcat(c, "/s");
			printf(" %10s\n", c);
		}
	}
}


void tlshard_put_table(const struct sample *a, const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	char drv[4 * sizeof in->driver], stall[24];

	if (in->stall_ns)
		snprintf(stall, sizeof stall, "%.1f ms", (double)in->stall_ns / 1e6);
	printf("pid %d: %u shard%s, driver %s, %s, arenas %s, stall threshold %s; rates over %.2f s\n",
	       pid, in->shards, in->shards == 1 ? "" : "s",
	       in->driver[0] ? tlshard_clean(in->driver, drv, sizeof drv) : "?",
	       tlshard_state_name(in->state), (in->flags & TL_STATS_F_ARENAS) ? "on" : "off",
	       in->stall_ns ? stall : "off", b->t - a->t);
	shard_table(a, b, TB_SHARDS, tlshard_hottest(a, b), in->shards > 1);
	pool_tables(a, b);
	program_table(a, b);
}
