#!/usr/bin/env bash
# tests/test_tlkv.sh: tlkv, the sharded key-value server, on two shards as Redis's own tools use it: each command's exact reply (MGET and DEL across shards, INCR of a non-number, DBSIZE, SAVE and its files), redis-benchmark's keys and values read back, a pipelined client checking every reply in order (DBSIZE counting the keys set before it in its pipeline), bad input answered with an error and a close, the program's stats, a clean stop; then, with the mesh refusing calls (one in flight per pair), redis-benchmark and the pipelined checks again; then with --nap-us.
# Usage: test_tlkv.sh TLKV CHECKER TLSHARD    (exit 0 pass, 1 fail, 77 skip)
set -u
tlkv=$1 checker=$2 tlshard=$3
for t in redis-cli redis-benchmark python3; do
	command -v $t >/dev/null || { echo "SKIP: no $t (tools/setup.sh installs redis-tools)"; exit 77; }
done
[ "$(nproc)" -ge 2 ] || { echo "SKIP: two shards need two CPUs"; exit 77; }
tmp=$(mktemp -d)
srv=
failed=0
cleanup() {
	[ -n "$srv" ] && kill -KILL "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}
ok() { echo "ok: $*"; }

# A port nothing listens on, below the ephemeral range.
port=$((20000 + ($$ * 13) % 12000))
while (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
# start OPTION...: tlkv on two shards and the port, waited for.
start() {
	"$tlkv" --port "$port" --shards 2 --keys 65536 --conns 64 "$@" 2>"$tmp/err" &
	srv=$!
	for _ in $(seq 200); do
		(exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
		sleep 0.05
	done
}
# stop WHAT: SIGTERM drains, the process exits 0 (ASan builds: no leak).
stop() {
	kill -TERM "$srv"
	wait "$srv"
	local rc=$?
	srv=
	[ "$rc" = 0 ] && ! grep -q "Sanitizer\|runtime error" "$tmp/err" && ok "$1: SIGTERM, exit 0, no sanitizer report" ||
		fail "$1: exit $rc, stderr: $(cat "$tmp/err")"
}
start --save-dir "$tmp"

R() { timeout 10 redis-cli --no-raw -p "$port" "$@" 2>&1; }
# expect WANT COMMAND...: the reply as redis-cli prints it, exactly.
expect() {
	local want=$1 got
	shift
	got=$(R "$@")
	if [ "$got" = "$want" ]; then ok "$(printf '%.40s' "$*") -> $(printf '%.60s' "${want//$'\n'/ }")"
	else fail "$*: got '$got', expected '$want'"; fi
}

# (a) Every command, every kind of reply.
expect PONG PING
expect '"hi there"' ECHO "hi there"
mget=
for i in $(seq 1 20); do
	[ "$(R SET k$i v$i)" = OK ] || fail "SET k$i"
	mget="$mget$(printf '%2d) "v%d"' "$i" "$i")"$'\n'
done
# Twenty keys hash to both shards (SAVE's files below show it): the replies
# come back in the order of the keys, a key of neither shard in between.
expect "${mget}21) (nil)" MGET k1 k2 k3 k4 k5 k6 k7 k8 k9 k10 k11 k12 k13 k14 k15 k16 k17 k18 k19 k20 nokey
expect OK SET n 41
expect '(integer) 42' INCR n
expect '"42"' GET n
expect OK SET m -10
expect '(integer) -9' INCR m
expect '(integer) 1' INCR fresh
expect '(error) ERR value is not an integer or out of range' INCR k20
expect OK SET top 9223372036854775807
expect '(error) ERR increment or decrement would overflow' INCR top
expect '(integer) 3' DEL k1 k2 nokey k3 k2
expect '(nil)' GET k1
expect '(integer) 0' DEL k1
# Values longer than a record's inline room, some on the other shard.
for i in 1 2 3 4; do
	head -c $((100000 * i)) /dev/zero | tr '\0' "$i" | redis-cli -p "$port" -x SET big$i >/dev/null
	n=$(redis-cli --raw -p "$port" GET big$i | tr -d '\n' | tr -d "$i" | wc -c)
	len=$(redis-cli --raw -p "$port" GET big$i | head -c -1 | wc -c)
	[ "$len" = $((100000 * i)) ] && [ "$n" = 0 ] && ok "a value of $len bytes back as set" ||
		fail "big$i: $len bytes back (expected $((100000 * i))), $n of them wrong"
done
expect "(error) ERR unknown command" FOO bar
expect "(error) ERR wrong number of arguments" GET
expect "(error) ERR wrong number of arguments" SET a
# k4..k20, n, m, fresh, top, big1..big4
expect '(integer) 25' DBSIZE
expect OK SAVE
[ -s "$tmp/tlkv-0.resp" ] && [ -s "$tmp/tlkv-1.resp" ] && ! ls "$tmp"/*.tmp 2>/dev/null &&
	ok "SAVE wrote a file per shard, no temporary left" || fail "SAVE's files: $(ls "$tmp")"
# A shard whose file cannot be made fails the SAVE, and says why; the other
# shard's file is written all the same. Its temporary file's name taken by a
# directory fails the open; its file's name taken by one fails the rename,
# after the write.
mkdir "$tmp/tlkv-1.resp.tmp"
expect '(error) ERR save failed: Is a directory' SAVE
rmdir "$tmp/tlkv-1.resp.tmp"
mv "$tmp/tlkv-1.resp" "$tmp/keep" && mkdir -p "$tmp/tlkv-1.resp/x"
expect '(error) ERR save failed: Is a directory' SAVE
rm -rf "$tmp/tlkv-1.resp" "$tmp/tlkv-1.resp.tmp" && mv "$tmp/keep" "$tmp/tlkv-1.resp"
expect OK SAVE
files="files:$tmp:25"
all="k4 k5 k6 k7 k8 k9 k10 k11 k12 k13 k14 k15 k16 k17 k18 k19 k20 n m fresh top big1 big2 big3 big4"
expect '(integer) 25' DEL $all
# The files replay with redis-cli --pipe (which ends with an empty line and an ECHO).
cat "$tmp"/tlkv-*.resp | timeout 10 redis-cli -p "$port" --pipe >"$tmp/pipe" 2>&1 || fail "--pipe: $(cat "$tmp/pipe")"
expect '"42"' GET n
expect '(integer) 25' DEL $all
expect '(integer) 0' DBSIZE

# (b) redis-benchmark's keys (key:000000000000 .. key:000000000999) and its
# value (the same -d 3 bytes in every SET), read back.
timeout 60 redis-benchmark -p "$port" -t set,get -n 20000 -c 20 -P 16 -r 1000 -q >"$tmp/bench" 2>&1 ||
	fail "redis-benchmark: $(tail -3 "$tmp/bench")"
expect '(integer) 1000' DBSIZE
first=$(redis-cli --raw -p "$port" GET key:000000000000)
bad=0
for k in 000 001 017 128 255 256 511 512 700 999; do
	v=$(redis-cli --raw -p "$port" GET key:000000000$k)
	[ "$v" = "$first" ] && [ ${#v} = 3 ] || bad=$((bad + 1))
done
[ "$bad" = 0 ] && ok "redis-benchmark's keys hold its 3-byte value ('$first')" ||
	fail "$bad of 10 keys of redis-benchmark do not hold '$first'"

# (c) Pipelined replies checked in order (deeper than a connection's 64
# records, and one at a time), SAVE's files parsed, bad input.
timeout 60 python3 "$checker" "$port" "$files" pipeline pipeline:3000:200 pipeline:300:1 count split leave bad || fail "checker"
expect PONG PING

# The program's counters in the live stats: commands on both shards, and hops
# to the other shard (half the keys are the other's).
"$tlshard" stats "$srv" --json >"$tmp/stats.json" 2>&1
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
fams = {f["name"]: f["rows"][0]["values"] for f in j["program"]}
assert all(v > 0 for v in fams["cmds"]) and all(v > 0 for v in fams["remote"]), fams
assert sum(fams["remote"]) * 4 > sum(fams["cmds"]), fams
naps = [(s["naps"], s["nap_parks"], s["spins"]) for s in j["shard"]]
# A loop naps only after a batch of small reads (lib/turn.c): one shard
# whose batches all came alone has none (seen once in 16 runs).
assert sum(n for n, p, sp in naps) > 0 and all(p <= n and sp == 0 for n, p, sp in naps), naps
' "$tmp/stats.json" && ok "stats: commands and remote hops on each shard, naps (the default), no spins" ||
	fail "stats: $(head -c 300 "$tmp/stats.json")"

expect OK QUIT
stop "a clean stop"

# (d) The mesh refusing: one call in flight per pair of shards (--mesh-inflight
# 1), so a connection's batch of remote keys waits for room again and again;
# every reply still right and in order, the count after its keys. The shards
# poll for replies here (--mesh-spin-us 20; above they park at once) and
# never nap (--nap-us 0; above they nap 200 us, the default).
start --mesh-inflight 1 --mesh-spin-us 20 --nap-us 0
timeout 60 redis-benchmark -p "$port" -t set,get -n 20000 -c 20 -P 16 -r 1000 -q >"$tmp/bench" 2>&1 ||
	fail "redis-benchmark, one call in flight: $(tail -3 "$tmp/bench")"
expect '(integer) 1000' DBSIZE
timeout 60 python3 "$checker" "$port" pipeline:3000:200 pipeline:300:1 count || fail "checker, one call in flight"
"$tlshard" stats "$srv" --json >"$tmp/stats.json" 2>&1
python3 -c '
import json, sys
sh = json.load(open(sys.argv[1]))["shard"]
n = sum(s["mesh_refused"] for s in sh)
assert n > 0, "no call was refused"
assert all(s["naps"] == 0 for s in sh), [(s["naps"], s["spins"]) for s in sh]
print("ok: the mesh refused %d calls, every reply right; no naps (--nap-us 0)" % n)
' "$tmp/stats.json" || fail "one call in flight: $(head -c 300 "$tmp/stats.json")"
stop "one call in flight"

# (e) Naps before parking (--nap-us): redis-benchmark at -P 16 and -P 1
# finishes, and the pipelined checks find every reply right. The shards' mesh wakes a
# shard while it naps; before the loop asked for such wakes after its nap,
# both shards could park with calls waiting for each: this load hung in
# 2 runs of 3 without that (and in none of 5 with it). Whether a turn
# napped is the contract suite's to check (test_turn_nap).
start --nap-us 50
for p in 16 1; do
	timeout 60 redis-benchmark -p "$port" -t set,get -n $((p * 12500)) -c 50 -P $p -r 60000 -q >"$tmp/bench" 2>&1 ||
		fail "redis-benchmark -P $p with naps: $(tail -3 "$tmp/bench")"
done
timeout 60 python3 "$checker" "$port" pipeline:3000:200 count || fail "checker, with naps"
stop "with naps"
# Options out of range or not numbers: one usage line, exit 2, no server
# (a server that starts is stopped by timeout: exit 124).
for bad in "--mesh-spin-us 1001" "--mesh-spin-us x" "--nap-us 1001" "--nap-us" "--mesh-inflight 0" "--shards 0" "--shards 1x" "--shards 65" "--cpus" \
	"--keys 10k" "--conns -5" "--port 99999999999999999999999" "--conns"; do
	out=$(timeout 10 "$tlkv" --port "$port" $bad 2>&1)
	rc=$?
	[ "$rc" = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && ok "tlkv $bad: exit 2, one line" ||
		fail "tlkv $bad: exit $rc, '$out'"
done
echo "$failed failed"
[ "$failed" = 0 ]
