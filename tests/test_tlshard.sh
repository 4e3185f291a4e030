#!/usr/bin/env bash
# tests/test_tlshard.sh: drives the real tlshard CLI: plans of synthetic machines, run's pinning, stats of a loaded tlecho in every format (promtool checks the Prometheus one), --watch of a target that exits, one clear line for bad arguments.
# Usage: test_tlshard.sh TLSHARD TLECHO TLLOAD
set -u
tlshard=$1 tlecho=$2 tlload=$3
tmp=$(mktemp -d)
srv= load=
failed=0
cleanup() {
	[ -n "$load" ] && kill "$load" 2>/dev/null && wait "$load" 2>/dev/null
	[ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}
ok() { echo "ok: $*"; }

# A port nothing listens on, below the ephemeral range (32768 and up), so
# that no other process's outgoing connection holds it.
free_port() {
	local p=$((20000 + ($$ * 7 + $1 * 101) % 12000))
	while (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; do p=$((p + 1)); done
	echo $p
}

wait_listen() {
	for _ in $(seq 200); do
		(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# Start tlecho with the given arguments (through "$@" prefix) on a free port.
start_echo() {
	port=$(free_port "$1")
	shift
	"$@" "$tlecho" -p "$port" --shards "$nshards" 2>"$tmp/echo.err" &
	srv=$!
	wait_listen "$port" || { fail "tlecho did not listen on $port"; cat "$tmp/echo.err"; return 1; }
}

stop_echo() {
	kill -TERM "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
	srv=
}

# json FILE EXPR: evaluate a Python expression on the parsed JSON j (meson
# runs on Python, so it is there wherever these tests run).
json() {
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

ncpu=$(nproc)
nshards=$((ncpu >= 2 ? 2 : 1))

# ---- bad arguments: non-zero, nothing on stdout, exactly one line on stderr ----
one_line() { # expected status, what, command...
	local want=$1 what=$2 rc lines
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" != "$want" ] || [ "$lines" != 1 ] || [ -s "$tmp/out" ]; then
		fail "$what: status $rc (want $want), $lines lines on stderr, $(wc -c <"$tmp/out") bytes on stdout"
		cat "$tmp/err"
	else
		ok "$what: $(cat "$tmp/err")"
	fi
}
one_line 2 "no command" "$tlshard"
one_line 2 "unknown command" "$tlshard" frob
one_line 2 "bad CPU list" "$tlshard" plan --cpus 1-x
one_line 2 "CPU that does not exist" "$tlshard" plan --cpus 1000
grep -q "cpu 1000 does not exist" "$tmp/err" || fail "the missing CPU is not named: $(cat "$tmp/err")"
one_line 2 "too many shards" "$tlshard" topo --shards 65536
grep -q "65536 shards asked, but this process has" "$tmp/err" || fail "no count in: $(cat "$tmp/err")"
one_line 2 "bad topology" "$tlshard" topo --topology "pack:zero"
one_line 2 "run without a command" "$tlshard" run --cpus 0 --
one_line 2 "run on a CPU that does not exist" "$tlshard" run --cpus 1000 -- true
one_line 2 "stats without a PID" "$tlshard" stats
one_line 2 "stats with a bad PID" "$tlshard" stats 12x
one_line 2 "stats with a bad interval" "$tlshard" stats 1 --watch 0
one_line 2 "stats with a bad format" "$tlshard" stats 1 --format xml
one_line 2 "stats --count without --watch" "$tlshard" stats 1 --count 3
one_line 2 "stats --watch with prometheus" "$tlshard" stats 1 --watch --format prometheus
one_line 1 "stats of a process without stats" "$tlshard" stats $$
one_line 2 "tlecho on a CPU that does not exist" "$tlecho" -p 1 --cpus 1000
grep -q "cpu 1000 does not exist" "$tmp/err" || fail "tlecho does not name the CPU: $(cat "$tmp/err")"

# ---- manuals ----
"$tlshard" --help >"$tmp/out" && grep -q SYNOPSIS "$tmp/out" && ok "tlshard --help" || fail "tlshard --help"
for c in topo plan run stats; do
	if "$tlshard" $c --help >"$tmp/out" && grep -q "^NAME" "$tmp/out" && grep -q "^OPTIONS" "$tmp/out"; then
		ok "tlshard $c --help"
	else
		fail "tlshard $c --help"
	fi
done
grep -q "BUSY" "$tmp/out" && grep -q "kernel" "$tmp/out" || fail "stats --help does not say what BUSY means"

# ---- plans of synthetic machines ----
T="pack:2 numa:2 core:4 pu:2"
"$tlshard" plan --topology "$T" >"$tmp/out" || fail "plan of $T"
for i in $(seq 0 15); do
	echo "shard $i: cpu $((2 * i)) core $i numa $((i / 4)) package $((i / 8))"
done >"$tmp/want"
echo "16 shards on 4 NUMA nodes (one per physical core)" >>"$tmp/want"
diff "$tmp/want" "$tmp/out" >/dev/null && ok "plan of $T" || { fail "plan of $T"; diff "$tmp/want" "$tmp/out"; }
"$tlshard" topo --topology "$T" >"$tmp/out" || fail "topo of $T"
grep -q "^plan: 16 shards on 4 NUMA nodes" "$tmp/out" && grep -q "2 packages, 4 NUMA nodes, 16 cores, 32 PUs" "$tmp/out" &&
	grep -q "core 5: pu 10=s5 pu 11$" "$tmp/out" && ok "topo of $T" || fail "topo of $T: $(cat "$tmp/out")"
"$tlshard" topo --topology "$T" --smt >"$tmp/out" || fail "topo --smt of $T"
grep -q "^plan: 32 shards on 4 NUMA nodes" "$tmp/out" && grep -q "core 5: pu 10=s10 pu 11=s11$" "$tmp/out" &&
	ok "topo --smt of $T" || fail "topo --smt of $T: $(grep plan: "$tmp/out")"
"$tlshard" topo --topology "$T" --json >"$tmp/j" || fail "topo --json"
json "$tmp/j" 'j["plan"]["shards"] == 16 and j["plan"]["numa_nodes"] == 4 and j["pus"] == 32 and len(j["pu_list"]) == 32 and [p["cpu"] for p in j["plan"]["places"]] == list(range(0, 32, 2))' &&
	ok "topo --json of $T" || fail "topo --json of $T"
"$tlshard" topo --topology "$T" --smt --json >"$tmp/j" || fail "topo --smt --json"
json "$tmp/j" 'j["plan"]["shards"] == 32 and j["plan"]["numa_nodes"] == 4 and j["plan"]["smt"]' &&
	ok "topo --smt --json of $T" || fail "topo --smt --json of $T"
"$tlshard" plan --topology "$T" --shards 5 --json >"$tmp/j" || fail "plan --shards 5 --json"
json "$tmp/j" 'j["shards"] == 5 and j["numa_nodes"] == 2 and [p["numa"] for p in j["places"]] == [0, 0, 0, 0, 1]' &&
	ok "plan --shards 5 fills node 0 first" || fail "plan --shards 5 of $T"
"$tlshard" topo --topology "$T" --cpus 8-11 >"$tmp/out" && grep -q "^plan: 2 shards on 1 NUMA node" "$tmp/out" &&
	ok "topo --cpus 8-11 of $T" || fail "topo --cpus 8-11 of $T"
# This machine: every PU listed, the plan as the runtime makes it.
"$tlshard" topo --json >"$tmp/j" || fail "topo of this machine"
json "$tmp/j" "j['pus'] == $ncpu and j['plan']['shards'] >= 1" && ok "topo of this machine" || fail "topo of this machine"

# ---- run pins the program as asked ----
cpu=$((ncpu - 1))
"$tlshard" run --cpus $cpu -- sleep 5 &
p=$!
# Until tlshard has made its plan and become sleep (loading the topology
# alone takes 0.3 s on a loaded machine, more under ASan).
for _ in $(seq 100); do
	[ "$(cat /proc/$p/comm 2>/dev/null)" = sleep ] && break
	sleep 0.1
done
got=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/$p/status)
env=$(tr '\0' '\n' </proc/$p/environ | grep -E '^TL_(CPUS|SHARDS)=' | sort | tr '\n' ' ')
[ "$got" = "$cpu" ] && [ "$env" = "TL_CPUS=$cpu TL_SHARDS=1 " ] && ok "run --cpus $cpu pins sleep ($got; $env)" ||
	fail "run --cpus $cpu: Cpus_allowed_list $got, environment $env"
kill $p 2>/dev/null
wait $p 2>/dev/null
list=$(seq -s, 0 $((nshards - 1)))
start_echo 1 "$tlshard" run --cpus "$list" -- || exit 1
bad_pin=0 shards_seen=0
for t in /proc/$srv/task/*; do
	name=$(cat "$t/comm")
	allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")
	case $name in
	tl-shard-*)
		shards_seen=$((shards_seen + 1))
		[ "$allowed" = "${name#tl-shard-}" ] || { bad_pin=1; echo "  $name on $allowed"; }
		;;
	*)
		# The main thread keeps the affinity run gave the process (other
		# threads, like the kernel's io_uring workers, are the kernel's).
		[ "${t##*/}" = "$srv" ] || continue
		want=$([ "$nshards" = 2 ] && echo 0-1 || echo 0)
		[ "$allowed" = "$want" ] || { bad_pin=1; echo "  $name on $allowed, not $want"; }
		;;
	esac
done
[ $bad_pin = 0 ] && [ $shards_seen = "$nshards" ] && ok "run --cpus $list: $shards_seen shard threads each on its CPU" ||
	fail "run --cpus $list: shard threads not pinned as planned ($shards_seen seen)"

# ---- stats of a live server: idle, then under load, in every format ----
"$tlshard" stats "$srv" --json >"$tmp/idle.json" || fail "stats --json of an idle server"
json "$tmp/idle.json" 'len(j["shard"]) == '"$nshards"' and all(s["busy"] < 0.2 for s in j["shard"])' &&
	ok "an idle server's shards are not busy: $(python3 -c 'import json,sys; print([round(s["busy"],3) for s in json.load(open(sys.argv[1]))["shard"]])' "$tmp/idle.json")" ||
	fail "an idle server's shards read busy: $(cat "$tmp/idle.json")"
"$tlshard" stats "$srv" >"$tmp/idle.txt" || fail "stats of an idle server"
awk '$1 ~ /^\*?[0-9]+$/ { b = $6; sub("%", "", b); if (b + 0 >= 20) bad = 1 } END { exit bad }' "$tmp/idle.txt" &&
	ok "the table says so too" || { fail "the table shows an idle shard busy"; cat "$tmp/idle.txt"; }
"$tlshard" stats "$srv" --format prometheus >"$tmp/p0" || fail "prometheus of the idle server"
# The load runs until the three readings are taken, however long a busy
# machine makes them (with a fixed 3 s it could end before the last, whose
# rates then read 0), and is stopped by its pid.
"$tlload" -p "$port" -c 8 -s 64 -d 120 >"$tmp/load.out" 2>&1 &
load=$!
sleep 1
"$tlshard" stats "$srv" >"$tmp/load.txt" || fail "stats under load"
awk '$1 == "bytes" && $2 == "counter" && $NF != "0/s" { found = 1 } END { exit !found }' "$tmp/load.txt" &&
	awk '$1 ~ /^\*?[0-9]+$/ && $4 != "0" { t = 1 } END { exit !t }' "$tmp/load.txt" &&
	ok "table under load: turns and the program's bytes move" || { fail "table under load"; cat "$tmp/load.txt"; }
grep -q '^\*' "$tmp/load.txt" || fail "no shard marked hottest under load"
"$tlshard" stats "$srv" --json >"$tmp/load.json" || fail "stats --json under load"
json "$tmp/load.json" 'sum(s["turns_per_s"] for s in j["shard"]) > 0 and sum(s["completions_by_kind"]["read"] for s in j["shard"]) > 0 and [r for f in j["program"] if f["name"] == "bytes" for r in f["rows"]][0]["total_per_s"] > 0' &&
	ok "json under load: turns, reads and bytes move" || fail "json under load: $(head -c 600 "$tmp/load.json")"
"$tlshard" stats "$srv" --format prometheus >"$tmp/p1" || fail "prometheus under load"
sum() { awk -v m="$1" '$1 ~ "^"m"[{]" { s += $2 } END { printf "%.0f\n", s }' "$2"; }
t0=$(sum turnloop_turns_total "$tmp/p0") t1=$(sum turnloop_turns_total "$tmp/p1")
b0=$(sum turnloop_program_bytes_total "$tmp/p0") b1=$(sum turnloop_program_bytes_total "$tmp/p1")
[ "$t1" -gt "$t0" ] && [ "$b1" -gt "$b0" ] && ok "prometheus under load: turns $t0 -> $t1, bytes $b0 -> $b1" ||
	fail "prometheus counters do not move: turns $t0 -> $t1, bytes $b0 -> $b1"
# A kernel driver owns no NIC: the NIC and hand-off counters are there, 0.
json "$tmp/load.json" 'all(s[k] == 0 for s in j["shard"] for k in ("nic_rx_frames", "nic_dropped_frames", "nic_handed_out_datagrams", "nic_handed_in_datagrams", "nic_handoff_dropped_datagrams"))' &&
	ok "json: the NIC and hand-off counters are 0 on a kernel driver" ||
	fail "json: NIC or hand-off counters missing or not 0: $(head -c 600 "$tmp/load.json")"
nm=0
for m in turnloop_nic_handed_out_datagrams_total turnloop_nic_handed_in_datagrams_total turnloop_nic_handoff_dropped_datagrams_total; do
	[ "$(grep -c "^$m{.*} 0\$" "$tmp/p1")" = "$nshards" ] && nm=$((nm + 1))
done
[ $nm = 3 ] && ok "prometheus: the hand-off counters, 0 on each shard" ||
	fail "prometheus: hand-off counters: $(grep -E "handed|handoff" "$tmp/p1")"
if command -v promtool >/dev/null; then
	promtool check metrics <"$tmp/p1" >"$tmp/promtool" 2>&1 && ok "promtool check metrics" ||
		{ fail "promtool check metrics"; cat "$tmp/promtool"; }
else
	fail "promtool is not installed (Debian: prometheus)"
fi
kill $load 2>/dev/null
wait $load 2>/dev/null
load=

# ---- --watch: a fixed count, then a target that goes away ----
"$tlshard" stats "$srv" --watch 0.2 --count 2 >"$tmp/w" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c "^tlshard stats $srv at" "$tmp/w")" = 2 ] && ok "--watch --count 2: two frames, status 0" ||
	fail "--watch --count 2: status $rc, $(grep -c "^tlshard stats" "$tmp/w") frames"
"$tlshard" stats "$srv" --watch 0.2 >"$tmp/w" 2>"$tmp/werr" &
w=$!
sleep 0.5
stop_echo
for _ in $(seq 50); do kill -0 $w 2>/dev/null || break; sleep 0.1; done
if kill -0 $w 2>/dev/null; then
	kill $w
	fail "--watch did not notice that its target exited"
fi
wait $w
rc=$?
[ $rc != 0 ] && grep -qE "has exited|removed its stats region" "$tmp/werr" &&
	ok "--watch of a target that exits: status $rc, $(cat "$tmp/werr")" ||
	fail "--watch of a target that exits: status $rc, stderr: $(cat "$tmp/werr")"

echo
if [ $failed != 0 ]; then
	echo "$failed check(s) failed"
	exit 1
fi
echo "all checks passed"
