#!/usr/bin/env bash
# tests/test_win_stats.sh TLECHO_EXE TLSHARD_EXE TLLOAD_EXE: tlshard stats as a Windows program, under
# wine on the IOCP driver. tlecho --shards 2 names its Windows process id (not the Linux pid of
# its wine process) on its startup line; after a short tlload, `tlshard stats ID` must show the
# table of 2 shards and the Prometheus output (plain \n lines) counts connections and bytes on both
# shards; a process id with no process, a PID that is no number, JSON (no cJSON in this build) and
# topo (no hwloc) each answer one line and a non-zero status. Then SIGINT (wine's Ctrl+C) stops
# tlecho: a --watch reader already running ends with one line and status 1, and its region is
# gone (tlshard stats ID fails). tlecho is stopped by its Linux pid.
set -u
tlecho=$1
tlshard=$2
tlload=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/win-stats.XXXXXX")
epid=
watch=
cleanup() {
	[ -n "$epid" ] && kill -KILL "$epid" 2>/dev/null
	[ -n "$watch" ] && kill -KILL "$watch" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
. "$(dirname "$0")/win_common.sh"
fail_tail=$work/tlecho.err
command -v wine >/dev/null || fail "wine is not installed (apt-get install --no-install-recommends wine wine64)"

# ts NAME ARGS...: run tlshard; NAME.out and NAME.err hold what it printed (the C runtime's
# \r\n made \n, so that a line of the table reads as on Linux), its status is returned.
ts() {
	local name=$1
	shift
	timeout 60 wine "$tlshard" "$@" >"$work/$name.raw" 2>"$work/$name.err.raw"
	local rc=$?
	tr -d '\r' <"$work/$name.raw" >"$work/$name.out"
	grep -v '^wine\|fixme' "$work/$name.err.raw" | tr -d '\r' >"$work/$name.err"
	return $rc
}
# one_line NAME STATUS PATTERN: NAME exited with STATUS, printed nothing on stdout and one line
# matching PATTERN (an extended regular expression) on stderr.
one_line() {
	local name=$1 want=$2 pat=$3 rc
	rc=$(cat "$work/$name.rc")
	[ "$rc" = "$want" ] || fail "$name: status $rc, not $want: $(cat "$work/$name.err")"
	[ ! -s "$work/$name.out" ] || fail "$name: printed on stdout: $(head -3 "$work/$name.out")"
	[ "$(wc -l <"$work/$name.err")" = 1 ] || fail "$name: not one line on stderr: $(cat "$work/$name.err")"
	grep -Eq "^tlshard: .*$pat" "$work/$name.err" || fail "$name: '$(cat "$work/$name.err")' does not say '$pat'"
	echo "ok: $name: $(cat "$work/$name.err")"
}
run_one() { # NAME ARGS...: ts, its status kept in NAME.rc
	local name=$1
	ts "$@"
	echo $? >"$work/$name.rc"
}

p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_tlecho_shards "$p"
line=$start_line
case $line in
*", pid "*) ;;
*) fail "tlecho did not name its process id: $line" ;;
esac
id=${line##*, pid }
[ "$id" -gt 0 ] 2>/dev/null || fail "no process id in '$line'"
echo "ok: $line (Linux pid $epid)"

run_tlload load "$p" -c 8 -s 256 -d 1

# The table, one reading: its header line and a row per shard.
ts table stats "$id" || fail "tlshard stats $id exited $?: $(cat "$work/table.err")"
head=$(head -1 "$work/table.out")
case $head in
"pid $id: 2 shards, driver iocp, running,"*) echo "ok: $head" ;;
*) fail "table: '$head'" ;;
esac
grep -q '^SHARD ' "$work/table.out" || fail "table: no SHARD header"
grep -Eq '^\*?0 ' "$work/table.out" && grep -Eq '^\*?1 ' "$work/table.out" || fail "table: no row for shard 0 and 1"
grep -Eq '^conns +counter' "$work/table.out" && grep -Eq '^bytes +counter' "$work/table.out" ||
	fail "table: tlecho's counters (conns, bytes) missing"
echo "ok: table: shards 0 and 1, tlecho's conns and bytes"

# Prometheus: totals, so the load shows after it ended; lines end in \n alone.
ts prom stats "$id" --format prometheus || fail "--format prometheus exited $?: $(cat "$work/prom.err")"
if grep -q $'\r' "$work/prom.raw"; then fail "prometheus output has \\r\\n line ends"; fi
grep -q "^turnloop_info{pid=\"$id\",driver=\"iocp\",state=\"running\"" "$work/prom.out" ||
	fail "prometheus: no turnloop_info of pid $id: $(head -3 "$work/prom.out")"
conns=0
for s in 0 1; do
	c=$(sed -n "s/^turnloop_program_conns_total{shard=\"$s\"} \([0-9]*\)$/\1/p" "$work/prom.out")
	b=$(sed -n "s/^turnloop_program_bytes_total{shard=\"$s\"} \([0-9]*\)$/\1/p" "$work/prom.out")
	t=$(sed -n "s/^turnloop_turns_total{shard=\"$s\"} \([0-9]*\)$/\1/p" "$work/prom.out")
	[ "${c:-0}" -gt 0 ] && [ "${b:-0}" -gt 0 ] && [ "${t:-0}" -gt 0 ] ||
		fail "shard $s: conns=${c:-none} bytes=${b:-none} turns=${t:-none}"
	echo "ok: shard $s: $c connections, $b bytes, $t turns"
	conns=$((conns + c))
done
[ $conns -ge 8 ] || fail "only $conns connections counted for tlload's 8"
# tlshard's figures agree with tlecho's own, printed when it stops (below).

# What tlshard cannot do here, or a target that is not there: one line each.
run_one nobody stats 1073676288
one_line nobody 1 "pid 1073676288: no such process"
run_one notanumber stats 12ab
one_line notanumber 2 "bad PID '12ab'"
run_one json stats "$id" --json
one_line json 1 "JSON output needs cJSON"
run_one topo topo
one_line topo 1 "topo needs hwloc"

# A reader watching as tlecho stops, then SIGINT.
timeout 60 wine "$tlshard" stats "$id" --watch 0.2 >"$work/watch.raw" 2>"$work/watch.err.raw" &
watch=$!
for _ in $(seq 100); do
	grep -q "^pid $id: " "$work/watch.raw" 2>/dev/null && break
	sleep 0.1
done
grep -q "^pid $id: " "$work/watch.raw" || fail "--watch drew nothing"
kill -INT "$epid"
for _ in $(seq 200); do
	kill -0 "$wpid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$wpid" 2>/dev/null && fail "tlecho did not stop within 20 s of SIGINT"
wait "$wpid"
rc=$?
epid=
[ $rc = 0 ] || fail "tlecho exited $rc after SIGINT"
echo "ok: tlecho stopped by SIGINT"
wait "$watch"
rc=$?
watch=
grep -v '^wine\|fixme' "$work/watch.err.raw" | tr -d '\r' >"$work/watch.err"
[ $rc = 1 ] || fail "--watch exited $rc when tlecho stopped: $(cat "$work/watch.err")"
[ "$(wc -l <"$work/watch.err")" = 1 ] &&
	grep -Eq "^tlshard: process $id (has exited|removed its stats region)" "$work/watch.err" ||
	fail "--watch ended with: $(cat "$work/watch.err")"
echo "ok: --watch: $(cat "$work/watch.err")"
# tlecho's own counts: at least what tlshard read.
echo=0
for s in 0 1; do
	n=$(tr -d '\r' <"$work/tlecho.err" | sed -n "s/^tlecho: shard $s .*: \([0-9]*\) connections.*/\1/p")
	echo=$((echo + ${n:-0}))
done
[ $echo -ge $conns ] || fail "tlecho counted $echo connections, tlshard read $conns"
# The region went with the process (wine may give the id to the next process at once, even to
# tlshard itself, which then finds no region of its own).
run_one after stats "$id"
one_line after 1 "pid $id: no (such process|stats region)"
