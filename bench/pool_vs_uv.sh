#!/bin/sh
# bench/pool_vs_uv.sh: run pool_bench and libuv's uv_work side by side, alternating, and print medians and ratios.
#
#   bench/pool_vs_uv.sh POOL_BENCH UV_WORK [ROUNDS=7] [SECONDS=2]
#
# Both use 4 workers (pool_bench's default; UV_THREADPOOL_SIZE is left unset,
# so libuv uses its default of 4) and keep 64 empty jobs in flight, then one
# at a time. The runs alternate so that both see the same machine; on a
# shared machine compare within a round, and look at the medians.
set -eu
pb=${1:?usage: pool_vs_uv.sh POOL_BENCH UV_WORK [ROUNDS] [SECONDS]}
uv=${2:?usage: pool_vs_uv.sh POOL_BENCH UV_WORK [ROUNDS] [SECONDS]}
rounds=${3:-7}
secs=${4:-2}
unset UV_THREADPOOL_SIZE || true
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=1
while [ "$i" -le "$rounds" ]; do
	p=$("$pb" -k 64 -d "$secs" 2>/dev/null)
	u=$("$uv" -k 64 -d "$secs")
	pj=$(printf '%s\n' "$p" | sed -n 's/.*jobs_per_s=//p')
	pr=$(printf '%s\n' "$p" | sed -n 's/.*rtt_ns=//p')
	uj=$(printf '%s\n' "$u" | sed -n 's/.*jobs_per_s=//p')
	ur=$(printf '%s\n' "$u" | sed -n 's/.*rtt_ns=//p')
	echo "$i $pj $uj $pr $ur" >> "$out"
	i=$((i + 1))
done
awk '
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
BEGIN {
	printf "%5s %14s %14s %7s   %10s %10s %7s\n", "round", "pool jobs/s", "uv jobs/s", "ratio",
	       "pool rtt", "uv rtt", "ratio"
}
{
	n++
	pj[n] = $2; uj[n] = $3; pr[n] = $4; ur[n] = $5
	tr[n] = $2 / $3; rr[n] = $4 / $5
	printf "%5d %14d %14d %6.2fx   %8.1fus %8.1fus %6.2fx\n", $1, $2, $3, $2 / $3, $4 / 1000,
	       $5 / 1000, $4 / $5
}
END {
	printf "%5s %14d %14d %6.2fx   %8.1fus %8.1fus %6.2fx\n", "med", median(pj, n), median(uj, n),
	       median(tr, n), median(pr, n) / 1000, median(ur, n) / 1000, median(rr, n)
	printf "throughput: pool/libuv median %.2fx (goal >= 1.5x); round trip: pool/libuv median %.2fx (goal <= 0.7x)\n",
	       median(tr, n), median(rr, n)
}' "$out"
