/* tools/tlshard/fields.c: the one table of the stats fields tlshard shows, each with its JSON key, Prometheus metric and table column, and the figures read through it. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "tlshard.h"

#define OFF(f) offsetof(tl_stats_shard, f)

/*
 * A field of tl_stats_shard per row; the table's columns, the JSON keys of
 * a shard (or of its "pool" and "pass_ns" objects), the Prometheus metrics
 * and the pool's per-node figures come out in this order. Rows are in the
 * table's column order first; the node gauges come before the pool's
 * shard rows so that the node table reads threads first.
 */
const struct tlshard_field tlshard_fields[] = {
	/* ---- the shards' table ---- */
	{.how = H_FIELD, .off = OFF(turns), .kind = K_COUNTER,
	 .key = "turns", .rate = "turns_per_s",
	 .metric = "turnloop_turns_total", .help = "Turns of the shard's loop.",
	 .col = "TURNS/s", .width = 9, .cell = C_RATE, .total = T_SUM},
	{.how = H_COMPL, .kind = K_COUNTER,
	 .key = "completions", .rate = "completions_per_s",
	 .col = "COMPL/s", .width = 9, .cell = C_RATE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(cpu_ns), .kind = K_COUNTER, .unit = U_NS,
	 .key = "cpu_seconds", .rate = "busy", .json_s = 1,
	 .metric = "turnloop_cpu_seconds_total",
	 .help = "CPU time of the shard's thread, user and kernel.",
	 .col = "BUSY", .width = 6, .cell = C_SHARE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(os_waits), .kind = K_COUNTER,
	 .key = "os_waits", .rate = "os_waits_per_s",
	 .metric = "turnloop_os_waits_total", .help = "OS waits that could block.",
	 .col = "WAITS/s", .width = 9, .cell = C_RATE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(naps), .kind = K_COUNTER,
	 .key = "naps", .rate = "naps_per_s",
	 .metric = "turnloop_naps_total",
	 .help = "Turns that napped before parking (tl_config.nap_ns).",
	 .col = "NAPS/s", .width = 8, .cell = C_RATE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(mesh_in), .kind = K_COUNTER,
	 .key = "mesh_in", .rate = "mesh_in_per_s",
	 .metric = "turnloop_mesh_received_total", .help = "Mesh messages received.",
	 .col = "MESH-IN/s", .width = 9, .cell = C_RATE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(mesh_out), .kind = K_COUNTER,
	 .key = "mesh_out", .rate = "mesh_out_per_s",
	 .metric = "turnloop_mesh_sent_total", .help = "Mesh messages sent.",
	 .col = "MESH-OUT/s", .width = 10, .cell = C_RATE, .total = T_SUM},
	{.how = H_FIELD, .off = OFF(leases_out), .kind = K_GAUGE,
	 .key = "leases_out",
	 .metric = "turnloop_leases_out", .help = "Pooled read buffers held.",
	 .col = "LEASES", .width = 7, .cell = C_VALUE, .total = T_SUM},
	{.how = H_LIVE, .kind = K_GAUGE, .unit = U_BYTES,
	 .key = "alloc_live_bytes",
	 .col = "ALLOC", .width = 9, .cell = C_BYTES, .total = T_SUM,
	 .total_needs = TL_STATS_F_ARENAS},
	{.how = H_FIELD, .off = OFF(stalls), .kind = K_COUNTER,
	 .key = "stalls",
	 .metric = "turnloop_stalls_total", .help = "Passes longer than the stall threshold.",
	 .col = "STALLS", .width = 6, .cell = C_VALUE, .total = T_SUM},
	{.how = H_QUANT, .q = 0.50, .unit = U_NS, .obj = O_PASS, .key = "p50",
	 .col = "P50", .width = 8, .cell = C_NS},
	{.how = H_QUANT, .q = 0.99, .unit = U_NS, .obj = O_PASS, .key = "p99",
	 .col = "P99", .width = 8, .cell = C_NS},
	{.how = H_FIELD, .off = OFF(max_pass_ns), .kind = K_GAUGE, .unit = U_NS,
	 .obj = O_PASS, .key = "max",
	 .metric = "turnloop_pass_max_seconds", .help = "The longest pass since the shard started.",
	 .col = "MAX", .width = 8, .cell = C_NS, .total = T_MAX},
	{.how = H_FIELD, .off = OFF(nap_parks), .kind = K_COUNTER,
	 .key = "nap_parks",
	 .metric = "turnloop_nap_parks_total",
	 .help = "Naps that found no work and parked after all."},
	{.how = H_FIELD, .off = OFF(spins), .kind = K_COUNTER,
	 .key = "spins",
	 .metric = "turnloop_spins_total",
	 .help = "Turns that spun before parking (tl_config.spin_ns)."},
	{.how = H_FIELD, .off = OFF(spin_parks), .kind = K_COUNTER,
	 .key = "spin_parks",
	 .metric = "turnloop_spin_parks_total",
	 .help = "Spins that found no work and parked after all."},

	/* ---- the rest of a shard's loop and mesh ---- */
	{.how = H_FIELD, .off = OFF(discovery_polls), .kind = K_COUNTER,
	 .key = "discovery_polls",
	 .metric = "turnloop_discovery_polls_total", .help = "Zero-timeout native polls."},
	{.how = H_FIELD, .off = OFF(zero_event_waits), .kind = K_COUNTER,
	 .key = "zero_event_waits",
	 .metric = "turnloop_zero_event_waits_total", .help = "OS waits that returned no event."},
	{.how = H_FIELD, .off = OFF(busy_ns), .kind = K_COUNTER, .unit = U_NS,
	 .key = "busy_seconds", .json_s = 1,
	 .metric = "turnloop_busy_seconds_total", .help = "Time in passes outside OS waits."},
	{.how = H_FIELD, .off = OFF(idle_ns), .kind = K_COUNTER, .unit = U_NS,
	 .key = "idle_seconds", .json_s = 1,
	 .metric = "turnloop_idle_seconds_total", .help = "Time in OS waits."},
	{.how = H_FIELD, .off = OFF(mesh_refused), .kind = K_COUNTER,
	 .key = "mesh_refused",
	 .metric = "turnloop_mesh_refused_total", .help = "Mesh sends refused, or made to wait, for want of room."},
	{.how = H_FIELD, .off = OFF(mesh_dropped), .kind = K_COUNTER,
	 .key = "mesh_dropped",
	 .metric = "turnloop_mesh_dropped_total", .help = "Mesh results dropped at stop."},
	{.how = H_FIELD, .off = OFF(mesh_inbound), .kind = K_GAUGE,
	 .key = "mesh_inbound",
	 .metric = "turnloop_mesh_inbound", .help = "Mesh messages waiting in inbound rings."},
	{.how = H_FIELD, .off = OFF(mesh_backlog), .kind = K_GAUGE,
	 .key = "mesh_backlog",
	 .metric = "turnloop_mesh_backlog", .help = "Mesh results waiting for ring room."},
	{.how = H_FIELD, .off = OFF(handles), .kind = K_GAUGE,
	 .key = "handles",
	 .metric = "turnloop_handles", .help = "Live handles of the shard's loop."},
	{.how = H_FIELD, .off = OFF(ops), .kind = K_GAUGE,
	 .key = "ops",
	 .metric = "turnloop_ops", .help = "Pending operations of the shard's loop."},
	{.how = H_FIELD, .off = OFF(queued), .kind = K_GAUGE,
	 .key = "queued",
	 .metric = "turnloop_queued_completions", .help = "Completions queued for the next turns."},
	{.how = H_FIELD, .off = OFF(timers), .kind = K_GAUGE,
	 .key = "timers",
	 .metric = "turnloop_timers", .help = "Armed timers."},
	{.how = H_FIELD, .off = OFF(alloc_bytes), .kind = K_COUNTER, .unit = U_BYTES,
	 .key = "allocated_bytes",
	 .metric = "turnloop_allocated_bytes_total", .help = "Bytes allocated by the shard thread."},
	{.how = H_FIELD, .off = OFF(freed_bytes), .kind = K_COUNTER, .unit = U_BYTES,
	 .key = "freed_bytes",
	 .metric = "turnloop_freed_bytes_total", .help = "Bytes freed by the shard thread."},
	{.how = H_FIELD, .off = OFF(nic_rx), .kind = K_COUNTER,
	 .key = "nic_rx_frames",
	 .metric = "turnloop_nic_rx_frames_total",
	 .help = "Frames the shard's NIC queue pair received (DPDK; 0 on kernel drivers)."},
	{.how = H_FIELD, .off = OFF(nic_tx), .kind = K_COUNTER,
	 .key = "nic_tx_frames",
	 .metric = "turnloop_nic_tx_frames_total",
	 .help = "Frames the shard's NIC queue pair sent (DPDK; 0 on kernel drivers)."},
	{.how = H_FIELD, .off = OFF(nic_drops), .kind = K_COUNTER,
	 .key = "nic_dropped_frames",
	 .metric = "turnloop_nic_dropped_frames_total",
	 .help = "Frames the shard's NIC driver dropped, every reason (DPDK)."},
	{.how = H_FIELD, .off = OFF(nic_tx_full), .kind = K_COUNTER,
	 .key = "nic_tx_full",
	 .metric = "turnloop_nic_tx_full_total",
	 .help = "TX bursts the NIC ring took only part of; the rest waited (DPDK)."},
	{.how = H_FIELD, .off = OFF(nic_handed_out), .kind = K_COUNTER,
	 .key = "nic_handed_out_datagrams",
	 .metric = "turnloop_nic_handed_out_datagrams_total",
	 .help = "Datagrams the shard had no handle for, handed to the shard "
		 "that has one (DPDK)."},
	{.how = H_FIELD, .off = OFF(nic_handed_in), .kind = K_COUNTER,
	 .key = "nic_handed_in_datagrams",
	 .metric = "turnloop_nic_handed_in_datagrams_total",
	 .help = "Datagrams other shards' queue pairs handed to this shard (DPDK)."},
	{.how = H_FIELD, .off = OFF(nic_handoff_drops), .kind = K_COUNTER,
	 .key = "nic_handoff_dropped_datagrams",
	 .metric = "turnloop_nic_handoff_dropped_datagrams_total",
	 .help = "Datagrams not handed to another shard, its ring full; "
		 "also in the dropped frames (DPDK)."},
	{.how = H_KINDS, .kind = K_COUNTER,
	 .key = "completions_by_kind",
	 .metric = "turnloop_completions_total", .help = "Completions handed out, by kind."},
	{.how = H_HIST, .kind = K_COUNTER, .unit = U_NS,
	 .metric = "turnloop_pass_seconds",
	 .help = "Pass time (a turn and the program's code after it, without the OS wait)."},

	/* ---- the pool: its NUMA nodes' workers (the freshest record's) ---- */
	{.how = H_FIELD, .off = OFF(node_threads), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "threads", .node_metric = "turnloop_pool_node_threads",
	 .node_help = "Bounded pool workers of the node.",
	 .node_col = "THREADS", .node_width = 7, .node_cell = C_VALUE},
	{.how = H_FIELD, .off = OFF(node_busy), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "busy", .node_metric = "turnloop_pool_node_busy",
	 .node_help = "Bounded pool workers running a job.",
	 .node_col = "BUSY", .node_width = 5, .node_cell = C_VALUE},
	{.how = H_FIELD, .off = OFF(node_queued), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "queued", .node_metric = "turnloop_pool_node_queued",
	 .node_help = "Bounded pool jobs waiting.",
	 .node_col = "QUEUED", .node_width = 6, .node_cell = C_VALUE},
	{.how = H_FIELD, .off = OFF(node_reserved), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "reserved", .node_metric = "turnloop_pool_node_reserved",
	 .node_help = "Bounded pool queue slots promised."},
	{.how = H_FIELD, .off = OFF(node_long_threads), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "long_threads", .node_metric = "turnloop_pool_node_long_threads",
	 .node_help = "Long pool workers of the node.",
	 .node_col = "LONG", .node_width = 5, .node_cell = C_VALUE},
	{.how = H_FIELD, .off = OFF(node_long_busy), .kind = K_GAUGE, .node_only = 1,
	 .node_key = "long_busy", .node_metric = "turnloop_pool_node_long_busy",
	 .node_help = "Long pool workers running a job.",
	 .node_col = "LONG-BUSY", .node_width = 9, .node_cell = C_VALUE},

	/* ---- the pool: what each shard's loop did with it ---- */
	{.how = H_FIELD, .off = OFF(pool_submitted), .kind = K_COUNTER, .obj = O_POOL,
	 .key = "submitted", .rate = "submitted_per_s",
	 .metric = "turnloop_pool_submitted_total", .help = "Blocking-pool jobs submitted.",
	 .tbl = TB_POOL, .col = "SUBMIT/s", .width = 9, .cell = C_RATE,
	 .node_rate = "submitted_per_s", .node_col = "SUBMIT/s", .node_width = 9,
	 .node_cell = C_RATE},
	{.how = H_FIELD, .off = OFF(pool_refused), .kind = K_COUNTER, .obj = O_POOL,
	 .key = "refused", .rate = "refused_per_s",
	 .metric = "turnloop_pool_refused_total", .help = "Blocking-pool submissions refused.",
	 .tbl = TB_POOL, .col = "REFUSED/s", .width = 9, .cell = C_RATE,
	 .node_rate = "refused_per_s", .node_col = "REFUSED/s", .node_width = 9,
	 .node_cell = C_RATE},
	{.how = H_FIELD, .off = OFF(pool_completed), .kind = K_COUNTER, .obj = O_POOL,
	 .key = "completed",
	 .metric = "turnloop_pool_completed_total", .help = "Blocking-pool jobs completed."},
	{.how = H_FIELD, .off = OFF(pool_cancelled), .kind = K_COUNTER, .obj = O_POOL,
	 .key = "cancelled",
	 .metric = "turnloop_pool_cancelled_total", .help = "Blocking-pool jobs cancelled."},
	{.how = H_FIELD, .off = OFF(pool_in_flight), .kind = K_GAUGE, .obj = O_POOL,
	 .key = "in_flight",
	 .metric = "turnloop_pool_in_flight", .help = "The shard's pool jobs not yet delivered.",
	 .tbl = TB_POOL, .col = "IN-FLIGHT", .width = 9, .cell = C_VALUE},
	{.how = H_FIELD, .off = OFF(pool_wait_ns), .kind = K_COUNTER, .unit = U_NS, .obj = O_POOL,
	 .key = "wait_ns",
	 .metric = "turnloop_pool_queue_wait_seconds_total",
	 .help = "Queue wait of the shard's pool jobs."},
	{.how = H_FIELD, .off = OFF(pool_run_ns), .kind = K_COUNTER, .unit = U_NS, .obj = O_POOL,
	 .key = "run_ns",
	 .metric = "turnloop_pool_run_seconds_total", .help = "Run time of the shard's pool jobs."},
	{.how = H_MEAN, .off = OFF(pool_wait_ns), .per = OFF(pool_completed), .unit = U_NS,
	 .obj = O_POOL, .key = "mean_wait_ns",
	 .tbl = TB_POOL, .col = "WAIT", .width = 9, .cell = C_NS,
	 .node_key = "mean_wait_ns", .node_col = "WAIT", .node_width = 9, .node_cell = C_NS},
	{.how = H_MEAN, .off = OFF(pool_run_ns), .per = OFF(pool_completed), .unit = U_NS,
	 .obj = O_POOL, .key = "mean_run_ns",
	 .tbl = TB_POOL, .col = "RUN", .width = 9, .cell = C_NS,
	 .node_key = "mean_run_ns", .node_col = "RUN", .node_width = 9, .node_cell = C_NS},
};

const uint32_t tlshard_nfields = sizeof tlshard_fields / sizeof tlshard_fields[0];

const char *const tlshard_kind_names[TL_K_COUNT_] = {
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
_Static_assert(TL_K_COUNT_ <= TL_STATS_KINDS, "more completion kinds than the record holds");

uint64_t tlshard_d(uint64_t b, uint64_t a)
{
	return b >= a ? b - a : 0;
}

static uint64_t word(const tl_stats_shard *s, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)s + off, sizeof v);
	return v;
}

/* The raw number a counter-like row counts in record y. */
static uint64_t count(const struct tlshard_field *f, const tl_stats_shard *y)
{
	uint64_t n = 0;

	if (f->how == H_COMPL) {
		for (uint32_t k = 0; k < TL_STATS_KINDS; k++)
			n += y->completions[k];
		return n;
	}
	if (f->how == H_LIVE)
		return tlshard_d(y->alloc_bytes, y->freed_bytes);
	return word(y, f->off);
}

double tlshard_value(const struct tlshard_field *f, const tl_stats_shard *y, int *has)
{
	*has = f->how != H_LIVE || y->arena != UINT32_MAX;
	return *has ? (double)count(f, y) : 0;
}

double tlshard_rate(const struct tlshard_field *f, const tl_stats_shard *x,
		    const tl_stats_shard *y, double dt)
{
	return dt > 0 ? (double)tlshard_d(count(f, y), count(f, x)) / dt : 0;
}

/* Quantile q of the passes between x and y (x NULL: since start), as the
 * upper bound of its bucket in ns; -1 without passes. */
static double quantile(const tl_stats_shard *x, const tl_stats_shard *y, double q)
{
	uint64_t h[TL_STATS_HIST], total = 0, run = 0;

	for (uint32_t i = 0; i < TL_STATS_HIST; i++) {
		h[i] = x ? tlshard_d(y->pass_hist[i], x->pass_hist[i]) : y->pass_hist[i];
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

double tlshard_interval(const struct tlshard_field *f, const tl_stats_shard *x,
			const tl_stats_shard *y)
{
	uint64_t per;

	if (f->how == H_QUANT)
		return quantile(x, y, f->q);
	per = tlshard_d(word(y, f->per), word(x, f->per));
	return per ? (double)tlshard_d(word(y, f->off), word(x, f->off)) / (double)per : -1;
}

int tlshard_hottest(const struct sample *a, const struct sample *b)
{
	const struct tlshard_field *cpu = NULL;
	double best = 0, dt = b->t - a->t;
	int hot = -1;

	for (uint32_t k = 0; k < tlshard_nfields && !cpu; k++)
		if (tlshard_fields[k].cell == C_SHARE)
			cpu = &tlshard_fields[k];
	for (uint32_t i = 0; cpu && i < b->info.shards; i++) {
		double busy = tlshard_rate(cpu, &a->sh[i], &b->sh[i], dt > 0 ? dt : 1e-9);

		if (busy > best) {
			best = busy;
			hot = (int)i;
		}
	}
	return hot;
}

uint32_t tlshard_nodes(const struct sample *a, const struct sample *b, struct tlshard_node *v,
		       uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < b->info.shards; i++) {
		const tl_stats_shard *y = &b->sh[i];
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
	}
	for (uint32_t k = 0; k < n; k++) {
		v[k].a = a;
		v[k].b = b;
	}
	return n;
}

/* The growth of the word at off from a to b, summed over node n's shards. */
static uint64_t node_growth(const struct tlshard_node *n, size_t off)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < n->b->info.shards; i++)
		if (n->b->sh[i].node_id == n->node)
			sum += tlshard_d(word(&n->b->sh[i], off), word(&n->a->sh[i], off));
	return sum;
}

double tlshard_node_figure(const struct tlshard_field *f, const struct tlshard_node *n,
			   double dt)
{
	uint64_t per;

	if (f->node_only)
		return (double)word(n->fresh, f->off);
	if (f->how == H_MEAN) {
		per = node_growth(n, f->per);
		return per ? (double)node_growth(n, f->off) / (double)per : -1;
	}
	return dt > 0 ? (double)node_growth(n, f->off) / dt : 0;
}
