/* tools/tlshard/json.c: tlshard's JSON, on cJSON: stats --json (one object with the runtime's header, every shard's figures (totals and rates, keyed as the field table says), the pool per NUMA node and the program's own values) and the plan of plan and topo --json. */
#include <stdio.h>
#include <time.h>

#include "json.h"

#define F(k) (&tlshard_fields[k])

static cJSON *num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v);
}

/* Row f of shard i into the object its obj names. */
static void put_field(const struct tlshard_field *f, const tl_stats_shard *x,
		      const tl_stats_shard *y, double dt, cJSON *into)
{
	double scale = f->json_s ? 1e-9 : 1, v;
	int has;

	if (f->how == H_KINDS) {
		cJSON *k = cJSON_CreateObject();

		for (uint32_t c = 0; c < TL_K_COUNT_; c++)
			num(k, tlshard_kind_names[c], (double)y->completions[c]);
		cJSON_AddItemToObject(into, f->key, k);
		return;
	}
	if (f->how == H_QUANT || f->how == H_MEAN) {
		v = tlshard_interval(f, x, y);
		/* A quantile without passes is null; a mean without jobs -1. */
		if (f->how == H_QUANT && v < 0)
			cJSON_AddNullToObject(into, f->key);
		else
			num(into, f->key, v);
		return;
	}
	v = tlshard_value(f, y, &has);
	if (!has)
		cJSON_AddNullToObject(into, f->key);
	else
		num(into, f->key, v * scale);
	if (f->rate)
		num(into, f->rate, tlshard_rate(f, x, y, dt) * scale);
}

static cJSON *shard_json(const struct sample *a, const struct sample *b, uint32_t i, int hot)
{
	const tl_stats_shard *x = &a->sh[i], *y = &b->sh[i];
	cJSON *e = cJSON_CreateObject(), *pool = cJSON_CreateObject();
	cJSON *pass = cJSON_CreateObject();
	cJSON *obj[] = {[O_SHARD] = e, [O_POOL] = pool, [O_PASS] = pass};
	double dt = b->t - a->t;

	num(e, "shard", y->shard);
	num(e, "cpu", y->cpu);
	num(e, "numa", y->numa);
	num(e, "tid", y->tid);
	cJSON_AddBoolToObject(e, "hottest", (int)i == hot);
	for (uint32_t k = 0; k < tlshard_nfields; k++)
		if (F(k)->key && !F(k)->node_only)
			put_field(F(k), x, y, dt, obj[F(k)->obj]);
	cJSON_AddItemToObject(e, "pass_ns", pass);
	cJSON_AddItemToObject(e, "pool", pool);
	return e;
}

static cJSON *nodes_json(const struct sample *a, const struct sample *b)
{
	struct tlshard_node nv[64];
	cJSON *nodes = cJSON_CreateArray();
	double dt = b->t - a->t;
	uint32_t nn = tlshard_nodes(a, b, nv, 64);

	for (uint32_t n = 0; n < nn; n++) {
		cJSON *e = cJSON_CreateObject();

		num(e, "node", (double)nv[n].node);
		for (uint32_t k = 0; k < tlshard_nfields; k++) {
			const struct tlshard_field *f = F(k);
			const char *key = f->node_key ? f->node_key : f->node_rate;

			if (key)
				num(e, key, tlshard_node_figure(f, &nv[n], dt));
		}
		cJSON_AddItemToArray(nodes, e);
	}
	return nodes;
}

static cJSON *program_json(const struct sample *a, const struct sample *b)
{
	const tl_stats_info *in = &b->info;
	cJSON *prog = cJSON_CreateArray();
	double dt = b->t - a->t;

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
				double y = f->kind == TL_STAT_GAUGE ? (double)(int64_t)tlshard_val(b, i, v)
								    : (double)tlshard_val(b, i, v);
				double rate = dt > 0 ? (double)tlshard_d(tlshard_val(b, i, v),
									 tlshard_val(a, i, v)) / dt
						     : 0;

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
	return prog;
}

/* One JSON object: totals and rates between a and b. */
static cJSON *stats_json(const struct sample *a, const struct sample *b, int pid)
{
	const tl_stats_info *in = &b->info;
	cJSON *j = cJSON_CreateObject(), *shards = cJSON_CreateArray();
	int hot = tlshard_hottest(a, b);
	char drv[4 * sizeof in->driver];

	num(j, "pid", pid);
	num(j, "layout_version", in->version);
	cJSON_AddStringToObject(j, "driver", tlshard_clean(in->driver, drv, sizeof drv));
	cJSON_AddStringToObject(j, "state", tlshard_state_name(in->state));
	num(j, "shards", in->shards);
	cJSON_AddBoolToObject(j, "arenas", (in->flags & TL_STATS_F_ARENAS) != 0);
	num(j, "stall_threshold_ns", (double)in->stall_ns);
	num(j, "interval_s", b->t - a->t);
	num(j, "time", (double)time(NULL));
	for (uint32_t i = 0; i < in->shards; i++)
		cJSON_AddItemToArray(shards, shard_json(a, b, i, hot));
	cJSON_AddItemToObject(j, "shard", shards);
	cJSON_AddItemToObject(j, "pool_nodes", nodes_json(a, b));
	cJSON_AddItemToObject(j, "program", program_json(a, b));
	return j;
}

int tlshard_put_stats_json(const struct sample *a, const struct sample *b, int pid, int pretty)
{
	return tlshard_put_json(stats_json(a, b, pid), pretty);
}

cJSON *tlshard_plan_json(const tl_plan *p, int smt)
{
	cJSON *j = cJSON_CreateObject(), *a = cJSON_CreateArray();

	cJSON_AddNumberToObject(j, "shards", p->count);
	cJSON_AddNumberToObject(j, "numa_nodes", p->numa_nodes);
	cJSON_AddBoolToObject(j, "smt", smt != 0);
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

int tlshard_put_plan_json(const tl_plan *p, int smt)
{
	return tlshard_put_json(tlshard_plan_json(p, smt), 1);
}

int tlshard_put_json(cJSON *j, int pretty)
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

const char *tlshard_json_absent(void)
{
	return NULL;
}
