#!/usr/bin/env bash
# tests/test_tlecho_udp.sh TLECHO: tlecho --udp on one loop (TL_DRIVER picks the driver) with socat on
# loopback: a line comes back, three datagrams of one session come back in order, one longer than a
# pooled buffer comes back cut to it, --udp with --shards is one line and exit 2, SIGTERM ends it (0).
set -u
tlecho=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/tlecho-udp.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	[ -f "$work/tlecho.err" ] && tail -5 "$work/tlecho.err" >&2
	exit 1
}
command -v socat >/dev/null || fail "socat is not installed"

# a free UDP port on 127.0.0.1
port() { python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

out=$("$tlecho" -p 1 --udp --shards 2 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "--udp --shards: exit $rc, '$out'"

p=$(port)
"$tlecho" -p "$p" --udp --buffer-size 1024 2>"$work/tlecho.err" &
ep=$!
pids+=("$ep")
for _ in $(seq 100); do grep -q listening "$work/tlecho.err" && break; sleep 0.05; done
grep -q "listening.*(UDP)" "$work/tlecho.err" || fail "tlecho --udp did not start"
if [ -n "${TL_DRIVER:-}" ]; then
	grep -q "driver $TL_DRIVER" "$work/tlecho.err" || fail "not on driver $TL_DRIVER: $(head -1 "$work/tlecho.err")"
fi

# socat sends what it reads in blocks of -b bytes, one datagram each, and
# leaves -t seconds after its input ends.
printf 'hello udp\n' | timeout 10 socat -t 0.3 - "UDP:127.0.0.1:$p" >"$work/line.out" ||
	fail "socat (a line)"
[ "$(cat "$work/line.out")" = "hello udp" ] || fail "the line came back as '$(cat "$work/line.out")'"

head -c 300 /dev/urandom >"$work/three.bin"
timeout 10 socat -b 100 -t 0.3 - "UDP:127.0.0.1:$p" <"$work/three.bin" >"$work/three.out" ||
	fail "socat (three datagrams)"
cmp -s "$work/three.bin" "$work/three.out" ||
	fail "three datagrams came back changed ($(stat -c %s "$work/three.out") bytes)"

head -c 3000 /dev/urandom >"$work/long.bin"
timeout 10 socat -b 8192 -t 0.3 - "UDP:127.0.0.1:$p" <"$work/long.bin" >"$work/long.out" ||
	fail "socat (a long datagram)"
[ "$(stat -c %s "$work/long.out")" = 1024 ] || fail "a 3000-byte datagram came back as $(stat -c %s "$work/long.out") bytes, not cut to 1024"
cmp -s "$work/long.out" <(head -c 1024 "$work/long.bin") || fail "the cut datagram is not its first 1024 bytes"

kill -TERM "$ep"
wait "$ep" || fail "tlecho --udp exited $?"
grep -q "5 datagrams" "$work/tlecho.err" || fail "tlecho counted: $(tail -1 "$work/tlecho.err")"
echo "ok: tlecho --udp on ${TL_DRIVER:-the default driver}"
