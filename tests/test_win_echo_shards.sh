#!/usr/bin/env bash
# tests/test_win_echo_shards.sh TLECHO_EXE TLLOAD_EXE: the sharded runtime on Windows, under wine on
# the IOCP driver: tlecho --shards 2 (one listener on shard 0, each other connection handed to
# shard 1 by the mesh: Windows has no SO_REUSEPORT) serves tlload, 16 connections of 256-byte
# round trips for 2 s, then a new connection every 10 round trips; each run must end with round
# trips done and errors=0. Then SIGINT (wine's Ctrl+C) must drain the runtime: tlecho exits 0 and
# reports connections and bytes on both shards. tlecho is stopped by its pid.
set -u
tlecho=$1
tlload=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/win-echo-shards.XXXXXX")
epid=
cleanup() {
	[ -n "$epid" ] && kill -KILL "$epid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
. "$(dirname "$0")/win_common.sh"
fail_tail=$work/tlecho.err
command -v wine >/dev/null || fail "wine is not installed (apt-get install --no-install-recommends wine wine64)"

p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_tlecho_shards "$p"

run_tlload steady "$p" -c 16 -s 256 -d 2
run_tlload churn "$p" -c 16 -s 256 -d 2 --churn 10

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
total=0
for s in 0 1; do
	line=$(grep "^tlecho: shard $s " "$work/tlecho.err") || fail "no count for shard $s"
	n=$(echo "$line" | sed -n 's/.*: \([0-9]*\) connections, \([0-9]*\) bytes.*/\1 \2/p')
	set -- $n
	[ "${1:-0}" -gt 0 ] && [ "${2:-0}" -gt 0 ] || fail "shard $s served nothing: $line"
	total=$((total + $1))
	echo "ok: $line"
done
# 16 steady connections, then 16 churning ones for 2 s, every connection counted once
[ $total -gt 32 ] || fail "only $total connections counted"
echo "ok: $total connections over both shards"
