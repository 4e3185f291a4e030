#!/usr/bin/env bash
# tests/test_dpdk_e2e.sh CASE TLECHO DPDK_PEER: tlecho --udp on the DPDK driver (TL_DRIVER=dpdk)
# against a peer in another process. CASE memif: the server end of a net_memif port, dpdk_peer the
# client end (ARP, 2,000 datagrams of every size checked, bad frames not echoed). CASE tap: a net_tap
# port in a network namespace of its own, the kernel on the other side of it, and a Python UDP
# client that checks every echo (root and `ip netns` needed, else a skip, 77). CASE tap6: the same
# over IPv6, neighbour discovery both ways (no static entry), checked in the kernel's counters.
# Either way tlecho ends
# on SIGTERM with status 0 and counts exactly the datagrams the peer had echoed.
set -euo pipefail
case=$1 tlecho=$2 peer=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/dpdk-e2e.XXXXXX")
ns='' echo_pid=''
# Each process's EAL prefix, and where the EAL makes its runtime folder
# for it (an empty one with --no-shconf, left behind at exit).
echo_prefix=tl-e2e-echo-$$ peer_prefix=tl-e2e-peer-$$
if [ "$(id -u)" = 0 ]; then rundir=/var/run/dpdk; else rundir=${XDG_RUNTIME_DIR:-/tmp}/dpdk; fi
cleanup() {
	if [ -n "$echo_pid" ]; then
		kill -KILL "$echo_pid" 2>/dev/null || true
		wait "$echo_pid" 2>/dev/null || true
	fi
	if [ -n "$ns" ]; then
		ip netns delete "$ns" 2>/dev/null || true
	fi
	rm -rf "$work" "${rundir:?}/$echo_prefix" "${rundir:?}/$peer_prefix"
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	if [ -s "$work/tlecho.err" ]; then
		echo "--- tlecho's last lines:" >&2
		tail -5 "$work/tlecho.err" >&2
	fi
	exit 1
}
skip() {
	echo "SKIP ($case): $*"
	exit 77
}

# The EAL on ordinary memory, no PCI, no files shared between processes;
# each process has a --file-prefix of its own.
eal=(--no-huge -m 256 --no-pci --no-shconf --no-telemetry -l 0 '--log-level=*:error')
srv_ip=198.18.0.2 cli_ip=198.18.0.1 srv_port=9000

# Wait (10 s at most) for tlecho's "listening" line; fail if it died first.
wait_listening() {
	for _ in $(seq 200); do
		grep -q "listening.*(UDP)" "$work/tlecho.err" 2>/dev/null && break
		kill -0 "$echo_pid" 2>/dev/null || fail "tlecho ended before it listened"
		sleep 0.05
	done
	grep -q "listening.*(UDP)" "$work/tlecho.err" || fail "tlecho did not listen in 10 s"
	grep -q "driver dpdk" "$work/tlecho.err" || fail "tlecho is not on the DPDK driver: $(grep listening "$work/tlecho.err")"
}

# SIGTERM to tlecho: it must end in 10 s with status 0 and count DGRAMS
# datagrams of BYTES bytes echoed on its last line.
stop_echo() {
	local dgrams=$1 bytes=$2 rc=0 last
	kill -TERM "$echo_pid"
	for _ in $(seq 200); do
		kill -0 "$echo_pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$echo_pid" 2>/dev/null; then
		fail "tlecho still runs 10 s after SIGTERM"
	fi
	wait "$echo_pid" || rc=$?
	echo_pid=
	[ "$rc" = 0 ] || fail "tlecho exited with status $rc"
	last=$(tail -1 "$work/tlecho.err")
	[ "$last" = "tlecho: $dgrams datagrams, $bytes bytes echoed" ] ||
		fail "tlecho's last line is '$last', not $dgrams datagrams of $bytes bytes"
	echo "ok: $last"
}

case_memif() {
	local mac=02:00:00:00:00:02 sock=$work/memif.sock line sent bytes rc=0
	TL_DRIVER=dpdk TL_DPDK_ADDR=$srv_ip \
	TL_DPDK="${eal[*]} --file-prefix=$echo_prefix --vdev=net_memif0,role=server,socket=$sock,mac=$mac" \
		"$tlecho" --udp -p $srv_port --host 0.0.0.0 2>"$work/tlecho.err" &
	echo_pid=$!
	wait_listening
	timeout 60 "$peer" "${eal[@]}" --file-prefix=$peer_prefix --vdev=net_memif0,role=client,socket="$sock" -- \
		--ip $cli_ip --server-ip $srv_ip --server-mac $mac --dport $srv_port --count 2000 \
		>"$work/peer.out" 2>&1 || rc=$?
	cat "$work/peer.out"
	[ "$rc" = 0 ] || fail "dpdk_peer exited with status $rc"
	# "N of N datagrams echoed right (B payload bytes, ...": tlecho must
	# have echoed exactly those (and not the bad frames).
	line=$(grep "^dpdk_peer: ok:" "$work/peer.out") || fail "no summary from dpdk_peer"
	sent=$(sed -n 's/.* of \([0-9]*\) datagrams echoed right.*/\1/p' <<<"$line")
	bytes=$(sed -n 's/.*right (\([0-9]*\) payload bytes.*/\1/p' <<<"$line")
	if [ -z "$sent" ] || [ -z "$bytes" ]; then fail "cannot read dpdk_peer's summary: $line"; fi
	stop_echo "$sent" "$bytes"
}

# Start tlecho --udp on a net_tap port in a namespace of its own, with the
# port's addresses $1 (TL_DPDK_ADDR) and bound to $2.
tap_up() {
	[ "$(id -u)" = 0 ] || skip "needs root (a network namespace and a tap interface)"
	command -v ip >/dev/null || skip "no ip command (iproute2)"
	local name=tl-e2e-$$
	ip netns add "$name" 2>"$work/netns.err" || skip "ip netns add failed: $(cat "$work/netns.err")"
	ns=$name
	# One queue pair: the kernel spreads what it sends over a tap
	# interface's queues by its own hash, and a queue no loop claimed is
	# never read (the default, 4, loses most flows and the kernel's ARP).
	ip netns exec "$ns" env TL_DRIVER=dpdk TL_DPDK_ADDR="$1" TL_DPDK_QUEUES=1 \
		TL_DPDK="${eal[*]} --file-prefix=$echo_prefix --vdev=net_tap0,iface=tltap0" \
		"$tlecho" --udp -p $srv_port --host "$2" 2>"$work/tlecho.err" &
	echo_pid=$!
	for _ in $(seq 200); do
		ip netns exec "$ns" ip link show tltap0 >/dev/null 2>&1 && break
		kill -0 "$echo_pid" 2>/dev/null || fail "tlecho ended before its tap interface appeared"
		sleep 0.05
	done
	ip netns exec "$ns" ip link show tltap0 >/dev/null 2>&1 || fail "no tltap0 in the namespace in 10 s"
	wait_listening
}

# The kernel's UDP client in the namespace: client SERVER_IP PORT BIND_IP COUNT (IPv4 or
# IPv6 by the addresses). The echoes so far are added up in $sent and $bytes.
sent=0 bytes=0
client() {
	local rc=0 out n b
	ip netns exec "$ns" timeout 60 python3 - "$@" >"$work/client.out" 2>&1 <<'EOF' || rc=$?
# COUNT datagrams of sizes 0 to the most one frame carries (1472 bytes over IPv4,
# 1452 over IPv6: no fragments) in windows of 16 to the server; each echo must be
# the datagram sent (a number and a pattern), from the server's address and port,
# once. Missing echoes after 2 s fail.
import socket, sys, time
srv = (sys.argv[1], int(sys.argv[2]))
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
top = 1452 if fam == socket.AF_INET6 else 1472
s = socket.socket(fam, socket.SOCK_DGRAM)
s.bind((sys.argv[3], 0))
def size(i):
    return i * 7919 % (top + 1) if i % 50 else (0, top)[i // 50 % 2]
def payload(i):
    n = size(i)
    head = i.to_bytes(4, "big")
    body = bytes((i * 7 + k * 13 + 0x5a) & 0xff for k in range(n))
    return (head + body[4:])[:n] if n >= 4 else body
count, window, total = int(sys.argv[4]), 16, 0
t0 = time.monotonic()
for base in range(0, count, window):
    want = {}
    for i in range(base, min(base + window, count)):
        want.setdefault(size(i), []).append(i)
        s.sendto(payload(i), srv)
    deadline = time.monotonic() + 2
    left = sum(len(v) for v in want.values())
    while left:
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            data, frm = s.recvfrom(2048)
        except socket.timeout:
            sys.exit("FAIL: %d of the datagrams %d-%d not echoed in 2 s" %
                     (left, base, min(base + window, count) - 1))
        if frm[:2] != srv:
            sys.exit("FAIL: a datagram from %s port %d, not the server" % frm[:2])
        cands = want.get(len(data), [])
        match = [i for i in cands if payload(i) == data]
        if not match and cands:
            i = cands[0]
            at = next(k for k in range(len(data)) if payload(i)[k] != data[k])
            sys.exit("FAIL: datagram %d (%d bytes) came back changed from byte %d" % (i, len(data), at))
        if not match:
            sys.exit("FAIL: an echo of %d bytes that is no datagram in flight (%d-%d)" %
                     (len(data), base, min(base + window, count) - 1))
        cands.remove(match[0])
        left -= 1
        total += len(data)
print("client: ok: %d of %d datagrams echoed right (%d payload bytes, sizes 0-%d) in %.2f s, from %s" %
      (count, count, total, top, time.monotonic() - t0, sys.argv[3]))
EOF
	cat "$work/client.out"
	if [ "$rc" != 0 ]; then
		# A checksum the kernel refused shows here, not as a wrong echo.
		ip netns exec "$ns" grep "^Udp" /proc/net/snmp /proc/net/snmp6 >&2 || true
		fail "the kernel's client ($3) exited with status $rc"
	fi
	out=$(grep "^client: ok:" "$work/client.out") || fail "no summary from the client"
	n=$(sed -n 's/.* of \([0-9]*\) datagrams echoed right.*/\1/p' <<<"$out")
	b=$(sed -n 's/.*right (\([0-9]*\) payload bytes.*/\1/p' <<<"$out")
	if [ -z "$n" ] || [ -z "$b" ]; then fail "cannot read the client's summary: $out"; fi
	sent=$((sent + n)) bytes=$((bytes + b))
}

case_tap() {
	tap_up $srv_ip 0.0.0.0
	# The kernel's end: an address on the tap interface. Its neighbour
	# entry for the server comes from the driver's ARP answers.
	ip netns exec "$ns" ip addr add $cli_ip/24 dev tltap0
	ip netns exec "$ns" ip link set tltap0 up
	client $srv_ip $srv_port $cli_ip 500
	stop_echo "$sent" "$bytes"
}

# IPv6: tlecho on [::] (the port has an IPv4 and an IPv6 address), two
# kernel IPv6 addresses on the tap interface, no static neighbour entry
# either way. The first client's datagrams make the kernel solicit the
# server's address (the driver answers, and learns the client from the
# solicitation's link-layer option); the second client's address the
# driver has never seen, and IPv6 data frames teach it nothing, so its
# echoes wait for the driver's own solicitation and the kernel's
# advertisement. The kernel's ND counters must show both ways.
case_tap6() {
	local srv6=fd00:7e57:e2e::2 cli6=fd00:7e57:e2e::1 cli6b=fd00:7e57:e2e::3 snmp
	tap_up "$srv_ip,$srv6" ::
	ip netns exec "$ns" ip -6 addr add $cli6/64 dev tltap0 nodad
	ip netns exec "$ns" ip -6 addr add $cli6b/64 dev tltap0 nodad
	ip netns exec "$ns" ip link set tltap0 up
	client $srv6 $srv_port $cli6 300
	client $srv6 $srv_port $cli6b 100
	ip netns exec "$ns" ip -6 neigh show dev tltap0 >"$work/neigh"
	cat "$work/neigh"
	grep -q "^$srv6 lladdr " "$work/neigh" || fail "the kernel has no neighbour entry for $srv6"
	if grep -q "^$srv6 .*PERMANENT" "$work/neigh"; then fail "the entry for $srv6 is static"; fi
	snmp=$(ip netns exec "$ns" cat /proc/net/snmp6)
	nd() { awk -v k="$1" '$1 == k { print $2 }' <<<"$snmp"; }
	echo "kernel: NS out $(nd Icmp6OutNeighborSolicits), NA in $(nd Icmp6InNeighborAdvertisements)," \
		"NS in $(nd Icmp6InNeighborSolicits), NA out $(nd Icmp6OutNeighborAdvertisements)," \
		"ICMPv6 in errors $(nd Icmp6InErrors)"
	[ "$(nd Icmp6InNeighborAdvertisements)" -ge 1 ] || fail "the driver answered no solicitation of the kernel's"
	[ "$(nd Icmp6InNeighborSolicits)" -ge 1 ] || fail "the driver solicited no neighbour (the second client's address)"
	[ "$(nd Icmp6OutNeighborAdvertisements)" -ge 1 ] || fail "the kernel answered no solicitation of the driver's"
	[ "$(nd Icmp6InErrors)" = 0 ] || fail "the kernel refused ICMPv6 messages (checksum?)"
	stop_echo "$sent" "$bytes"
}

case $case in
memif) case_memif ;;
tap) case_tap ;;
tap6) case_tap6 ;;
*)
	echo "usage: $0 memif|tap|tap6 TLECHO DPDK_PEER" >&2
	exit 2
	;;
esac
echo "ok: dpdk-e2e-$case"
