/* tools/tlshard/tlshard.h: what tlshard's files share: the text helpers, a sample of a program's stats, and the one table of its fields that the table, JSON and Prometheus outputs all read. */
#ifndef TLSHARD_H
#define TLSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "turnloop.h"

struct tlshard_plan_opts; /* cli.h */

/*
 * The files: main.c (the commands), plan.c (plan), topo.c (topo, run: hwloc
 * and POSIX), stats.c (stats: reading samples, the watch loop), fields.c
 * (the field table and the figures it gives), table.c, json.c (cJSON) and
 * prom.c (the three outputs). A build without hwloc or cJSON (Windows)
 * has absent.c in place of topo.c and json.c: those commands and the JSON
 * output answer one line saying so.
 * A stats field is named once, in its row of fields.c, with its JSON key,
 * its Prometheus metric and its table column; a new field is a new row.
 */

/* ---- text (main.c) ---- */

/* One line on stderr ("tlshard: ..."); returns 2, the status of bad usage. */
int tlshard_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Bytes from another process, printable: anything but printable ASCII is
 * shown as \xNN (and a backslash as \\). Returns buf. */
const char *tlshard_clean(const char *s, char *buf, size_t len);
/* 1234567 -> "1.23M"; bytes -> "1.5 MiB"; ns -> "1.2us". Return buf. */
const char *tlshard_fmt_num(double v, char *buf, size_t len);
const char *tlshard_fmt_bytes(double v, char *buf, size_t len);
const char *tlshard_fmt_ns(double ns, char *buf, size_t len);
/* ---- the commands ---- */

int tlshard_cmd_plan(int argc, char **argv);  /* plan.c */
int tlshard_cmd_topo(int argc, char **argv);  /* topo.c */
int tlshard_cmd_run(int argc, char **argv);   /* topo.c */
int tlshard_cmd_stats(int argc, char **argv); /* stats.c */

/* ---- the plan (plan.c), for plan, topo and run ---- */

/* The options' part of a command's manual, put into fmt's %s. */
void tlshard_print_help(const char *fmt);
/* The plan o asks for (the environment's TL_* narrowing it); 0, or the
 * command's status after one line on stderr. */
int tlshard_plan_for(struct tlshard_plan_opts *o, tl_plan *plan);
/* "2 shards on 1 NUMA node (one per physical core)". */
void tlshard_plan_summary(const tl_plan *p, const struct tlshard_plan_opts *o);

/* ---- a sample (stats.c) ---- */

#define TLSHARD_LABEL_OUT (4 * TL_STATS_LABEL_MAX)
#define TLSHARD_NAME_OUT (4 * TL_STATS_NAME_MAX)

/* One reading of every shard, with the program's families and labels
 * (escaped) as they were then. */
struct sample {
	double t;               /* CLOCK_MONOTONIC, seconds */
	tl_stats_info info;
	tl_stats_shard *sh;     /* info.shards */
	uint64_t *vals;         /* info.shards * info.values, shard-major */
	tl_stats_family *fams;  /* info.families, names escaped */
	char (*labels)[TLSHARD_LABEL_OUT]; /* info.values, escaped */
};

/* Value slot v of shard i in s (0 when s had fewer slots). */
uint64_t tlshard_val(const struct sample *s, uint32_t i, uint32_t v);
/* "starting", "running", ... */
const char *tlshard_state_name(uint32_t state);

/* ---- the fields (fields.c) ---- */

/* How a row's figure is read from a record (or from two: the interval). */
enum tlshard_how {
	H_FIELD = 0, /* the uint64_t at off */
	H_COMPL,     /* the completions of every kind, summed */
	H_LIVE,      /* bytes the shard's thread allocated less what it freed; none without an arena */
	H_QUANT,     /* a quantile (q) of the interval's pass times, ns; none without passes */
	H_MEAN,      /* the interval's growth of off per growth of per; none when per did not grow */
	H_KINDS,     /* completions[]: one value per completion kind */
	H_HIST,      /* pass_hist[]: the pass-time histogram */
};

enum tlshard_kind { K_COUNTER = 0, K_GAUGE };
enum tlshard_unit { U_COUNT = 0, U_NS, U_BYTES };
/* Which JSON object of a shard the row's keys go in. */
enum tlshard_obj { O_SHARD = 0, O_POOL, O_PASS };
/* How the table shows a cell: a rate, a share of a CPU (ns per s, as a
 * percentage), the value, bytes, a duration. */
enum tlshard_cell { C_NONE = 0, C_RATE, C_SHARE, C_VALUE, C_BYTES, C_NS };
/* What the table's "all" row shows for the column. */
enum tlshard_total { T_NONE = 0, T_SUM, T_MAX };
/* Which table: the shards', or the pool's per shard. */
enum tlshard_tbl { TB_SHARDS = 0, TB_POOL };

/*
 * One field of tl_stats_shard and every name it has. Per shard: JSON keys
 * (key for the value, rate for its growth per second over the interval),
 * a Prometheus metric (counter or gauge after kind; U_NS values exported
 * in seconds), a table column. Per NUMA node of the pool (the shards on a
 * node summed, or the node's freshest record for node_* gauges): the JSON
 * key of pool_nodes[], a Prometheus gauge, a column of the pool's node
 * table. A NULL name leaves the row out of that output.
 */
struct tlshard_field {
	enum tlshard_how how;
	size_t off, per;        /* H_FIELD, H_MEAN: offsetof(tl_stats_shard, ...) */
	double q;               /* H_QUANT */
	enum tlshard_kind kind;
	enum tlshard_unit unit;
	/* JSON, per shard. */
	enum tlshard_obj obj;
	const char *key, *rate;
	int json_s;             /* 1: key and rate in seconds (ns / 1e9) */
	/* Prometheus, per shard. */
	const char *metric, *help;
	/* The table, per shard. */
	enum tlshard_tbl tbl;
	const char *col;
	int width;
	enum tlshard_cell cell;
	enum tlshard_total total;
	uint32_t total_needs;   /* TL_STATS_F_* the "all" cell needs, else "-" */
	/* Per NUMA node of the pool. */
	int node_only;          /* 1: a node's figure (node_*), nothing per shard */
	const char *node_key, *node_rate, *node_metric, *node_help, *node_col;
	int node_width;
	enum tlshard_cell node_cell;
};

extern const struct tlshard_field tlshard_fields[];
extern const uint32_t tlshard_nfields;
/* The JSON and Prometheus names of the completion kinds. */
extern const char *const tlshard_kind_names[TL_K_COUNT_];

/* The row's value in record y: its unit's raw number (ns, bytes, a
 * count); *has 0 when there is none (H_LIVE without an arena). Not for
 * H_QUANT, H_MEAN, H_KINDS, H_HIST. */
double tlshard_value(const struct tlshard_field *f, const tl_stats_shard *y, int *has);
/* Its growth per second from x to y over dt seconds (0 if it went back). */
double tlshard_rate(const struct tlshard_field *f, const tl_stats_shard *x,
		    const tl_stats_shard *y, double dt);
/* H_QUANT and H_MEAN: the figure of the interval from x to y, or -1 when
 * there is none. */
double tlshard_interval(const struct tlshard_field *f, const tl_stats_shard *x,
			const tl_stats_shard *y);
/* b - a, 0 if a counter went back (a region that restarted under us). */
uint64_t tlshard_d(uint64_t b, uint64_t a);

/* The shards on one NUMA node of the pool between two samples. */
struct tlshard_node {
	int64_t node;
	const tl_stats_shard *fresh;  /* its freshest record (the node_* gauges) */
	const struct sample *a, *b;   /* the interval */
};
/* Fill v[0..cap) with the nodes of b (in the order of their first shard);
 * returns how many. */
uint32_t tlshard_nodes(const struct sample *a, const struct sample *b, struct tlshard_node *v,
		       uint32_t cap);
/* The row's figure for node n over dt: a node_* gauge's value, a counter's
 * rate, a mean (-1: none). */
double tlshard_node_figure(const struct tlshard_field *f, const struct tlshard_node *n,
			   double dt);

/* The shard whose thread used most CPU between a and b, -1 if none did. */
int tlshard_hottest(const struct sample *a, const struct sample *b);

/* ---- the outputs ---- */

/* The table, for rates between a and b (table.c). */
void tlshard_put_table(const struct sample *a, const struct sample *b, int pid);
/* JSON (json.c; absent.c where there is no cJSON): NULL when this build
 * writes JSON, else why not (one line). The other two print one object
 * (stats: totals and rates between a and b, pretty or on one line; the
 * plan) and return 0, or 1 after a line on stderr. */
const char *tlshard_json_absent(void);
int tlshard_put_stats_json(const struct sample *a, const struct sample *b, int pid, int pretty);
int tlshard_put_plan_json(const tl_plan *p, int smt);
/* The Prometheus text exposition of b: totals only (prom.c). */
void tlshard_put_prometheus(const struct sample *b, int pid);

#endif /* TLSHARD_H */
