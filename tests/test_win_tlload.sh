#!/usr/bin/env bash
# tests/test_win_tlload.sh TLLOAD_EXE: tlload built for Windows, run under wine on the IOCP driver,
# loads socat's echo server on loopback (a real peer, native): 16 connections of 256-byte round
# trips for 2 s, then the same with a new connection every 10 round trips; each run must end with
# round trips done, errors=0 and driver=iocp. socat is stopped by its pid.
set -u
tlload=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/win-tlload.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
. "$(dirname "$0")/win_common.sh"
command -v socat >/dev/null || fail "socat is not installed"
command -v wine >/dev/null || fail "wine is not installed (apt-get install --no-install-recommends wine wine64)"

p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
socat "TCP-LISTEN:$p,bind=127.0.0.1,reuseaddr,fork,backlog=128" PIPE 2>"$work/socat.err" &
pids+=($!)
for _ in $(seq 100); do
	python3 -c "import socket; socket.create_connection(('127.0.0.1', $p), 1).close()" 2>/dev/null && break
	sleep 0.05
done

run_tlload steady "$p" -c 16 -s 256 -d 2
run_tlload churn "$p" -c 16 -s 256 -d 2 --churn 10
