#!/usr/bin/env bash
# tests/test_tlecho_tls.sh TLECHO CERTS_SCRIPT: tlecho --tls-cert/--tls-key on one loop and on two
# shards (TL_DRIVER picks the driver): openssl s_client's lines come back, 4 MiB come back
# unchanged (cmp), a lone --tls-cert is one line and exit 2, a missing file is one line and exit 1.
set -u
tlecho=$1
certs_script=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tlecho-tls.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$work"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
	exit 1
}
command -v openssl >/dev/null || fail "openssl is not installed"
sh "$certs_script" "$work/certs" >"$work/certs.log" 2>&1 || fail "certificates: $(tail -1 "$work/certs.log")"
c=$work/certs

# a free port on 127.0.0.1
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

out=$("$tlecho" -p 1 --tls-cert "$c/server.pem" 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "--tls-cert alone: exit $rc, '$out'"
case $out in *"--tls-key"*) ;; *) fail "--tls-cert alone does not name --tls-key: $out" ;; esac
p=$(port)
out=$("$tlecho" -p "$p" --tls-cert "$c/nonexistent.pem" --tls-key "$c/server.key" 2>&1)
rc=$?
[ $rc = 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "a missing certificate: exit $rc, '$out'"
case $out in *nonexistent.pem*) ;; *) fail "the missing file is not named: $out" ;; esac

head -c $((4 << 20)) /dev/urandom >"$work/big.bin"
for mode in "" "--shards 2"; do
	p=$(port)
	# shellcheck disable=SC2086 # mode is zero or two words
	"$tlecho" -p "$p" --tls-cert "$c/server.pem" --tls-key "$c/server.key" $mode 2>"$work/tlecho.err" &
	ep=$!
	pids+=("$ep")
	for _ in $(seq 100); do grep -q listening "$work/tlecho.err" && break; sleep 0.05; done
	grep -q "listening.*(TLS)" "$work/tlecho.err" || fail "tlecho $mode did not start"
	# a line, and the session's end by close_notify (s_client leaves at its stdin's end)
	(printf 'hello over tls\n'; sleep 1) |
		timeout 10 openssl s_client -connect "127.0.0.1:$p" -CAfile "$c/ca.pem" -servername localhost \
			-verify_return_error >"$work/line.out" 2>"$work/line.err" ||
		fail "s_client $mode"
	grep -qa '^hello over tls$' "$work/line.out" || fail "$mode: the line did not come back"
	# 4 MiB echoed back: s_client -quiet stays until tlecho has sent all of it
	timeout 30 openssl s_client -connect "127.0.0.1:$p" -CAfile "$c/ca.pem" -servername localhost \
		-quiet <"$work/big.bin" >"$work/big.out" 2>"$work/big.err" &
	sp=$!
	pids+=("$sp")
	for _ in $(seq 300); do
		[ "$(stat -c %s "$work/big.out")" -ge $((4 << 20)) ] && break
		sleep 0.1
	done
	kill "$sp" 2>/dev/null
	cmp -s "$work/big.bin" "$work/big.out" || fail "$mode: the 4 MiB came back changed or cut ($(stat -c %s "$work/big.out") bytes)"
	kill -TERM "$ep"
	wait "$ep" || fail "tlecho $mode exited $?"
	echo "ok: tlecho ${mode:-(one loop)} over TLS"
done
