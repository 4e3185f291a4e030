#!/usr/bin/env bash
# tests/test_dpdk_tlproxy.sh CASE TLPROXY TLSHARD: tlproxy --udp --dpdk end to end. CASE dns: tlproxy on a
# net_tap port in a network namespace of its own forwards DNS from the kernel's dnsperf, on the tap
# interface, to an NSD behind the same interface, through the same port; dnsperf must lose nothing and
# get NOERROR for every query, and tlproxy's UDP counters must count exactly those (root and `ip netns`
# needed, else a skip, 77; nsd, dnsperf and dig missing is a failure: tools/setup.sh installs them).
# CASE dns2: the same on 2 shards, so 2 queue pairs, over which the kernel spreads what it sends
# into the tap interface: datagrams for one shard's sessions land on the other's pair and are
# handed over; tlshard's hand-off counters must show as many handed out as in, none dropped.
# CASE refuse: what --dpdk cannot serve (a TCP listener, the admin socket, a TCP health check, a
# takeover, a loopback server, an address not the port's) ends the start with one line and status 1.
set -euo pipefail
case=$1 tlproxy=$2 tlshard=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/dpdk-tlp.XXXXXX")
ns='' proxy_pid='' nsd_pid=''
prefix=tl-e2e-tlp-$$
if [ "$(id -u)" = 0 ]; then rundir=/var/run/dpdk; else rundir=${XDG_RUNTIME_DIR:-/tmp}/dpdk; fi
cleanup() {
	local p
	for p in $proxy_pid $nsd_pid; do
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ -n "$ns" ]; then
		ip netns delete "$ns" 2>/dev/null || true
	fi
	rm -rf "$work" "${rundir:?}/$prefix"
}
trap cleanup EXIT
fail() {
	echo "FAIL ($case): $*" >&2
	local f
	for f in tlproxy.err nsd.err; do
		if [ -s "$work/$f" ]; then
			echo "--- $f, last lines:" >&2
			tail -5 "$work/$f" >&2
		fi
	done
	exit 1
}
skip() {
	echo "SKIP ($case): $*"
	exit 77
}

# The EAL on ordinary memory, no PCI, no files shared between processes.
eal=(--no-huge -m 256 --no-pci --no-shconf --no-telemetry -l 0 '--log-level=*:error')
# The port's address (tlproxy listens there), the kernel's client address
# and NSD's, both on the tap interface.
srv_ip=198.18.0.2 cli_ip=198.18.0.1 nsd_ip=198.18.0.3 dns_port=53

# One of tlproxy's stat rows (FAMILY ROW) from the live stats region.
stat() {
	"$tlshard" stats "$proxy_pid" --json | python3 -c '
import json, sys
fam, row = sys.argv[1], sys.argv[2]
for f in json.load(sys.stdin)["program"]:
    if f["name"] == fam:
        for r in f["rows"]:
            if (r["label"] or str(r["row"])) == row:
                print(r["total"])
                sys.exit(0)
print(0)' "$1" "$2"
}

# A NIC counter of the loops (nic_rx_frames, ...), summed over the shards;
# nic_each: each shard's, comma separated.
nic() {
	"$tlshard" stats "$proxy_pid" --json |
		python3 -c 'import json, sys; print(sum(s[sys.argv[1]] for s in json.load(sys.stdin)["shard"]))' "$1"
}
nic_each() {
	"$tlshard" stats "$proxy_pid" --json |
		python3 -c 'import json, sys; print(",".join(str(s[sys.argv[1]]) for s in json.load(sys.stdin)["shard"]))' "$1"
}

case_dns() {
	local shards=$1 t qf out sent done lost codes qps before_in before_out rc=0
	for t in nsd dnsperf dig; do
		command -v $t >/dev/null || PATH=$PATH:/usr/sbin command -v $t >/dev/null ||
			fail "no $t (tools/setup.sh installs nsd, dnsperf and bind9-dnsutils)"
	done
	[ "$(id -u)" = 0 ] || skip "needs root (a network namespace and a tap interface)"
	command -v ip >/dev/null || skip "no ip command (iproute2)"
	local name=tl-tlp-$$
	ip netns add "$name" 2>"$work/netns.err" || skip "ip netns add failed: $(cat "$work/netns.err")"
	ns=$name

	# tlproxy first: its port makes the tap interface. No TL_DPDK_QUEUES:
	# --dpdk sets one queue pair per shard.
	ip netns exec "$ns" env TL_DPDK_ADDR=$srv_ip \
		TL_DPDK="${eal[*]} --file-prefix=$prefix --vdev=net_tap0,iface=tltap0" \
		"$tlproxy" --dpdk --udp --listen $srv_ip:$dns_port --upstream $nsd_ip:$dns_port \
		--shards "$shards" --responses 1 2>"$work/tlproxy.err" &
	proxy_pid=$!
	for _ in $(seq 200); do
		grep -q "running:" "$work/tlproxy.err" 2>/dev/null && break
		kill -0 "$proxy_pid" 2>/dev/null || fail "tlproxy ended before it ran"
		sleep 0.05
	done
	grep -q "running:" "$work/tlproxy.err" || fail "tlproxy did not run in 10 s"
	grep -q "running:.*driver dpdk" "$work/tlproxy.err" ||
		fail "tlproxy is not on the DPDK driver: $(grep running: "$work/tlproxy.err")"
	ip netns exec "$ns" ip link show tltap0 >/dev/null 2>&1 || fail "no tltap0 in the namespace"

	# The kernel's side: the client's and NSD's addresses on the tap
	# interface. Each side finds the other by ARP (the driver answers for
	# its address and asks for NSD's).
	ip netns exec "$ns" ip addr add $cli_ip/24 dev tltap0
	ip netns exec "$ns" ip addr add $nsd_ip/24 dev tltap0
	ip netns exec "$ns" ip link set tltap0 up
	ip netns exec "$ns" ip link set lo up

	# NSD on its address, serving a zone of three names.
	cat >"$work/test.example.zone" <<'EOF'
$ORIGIN test.example.
$TTL 300
@    IN SOA ns.test.example. admin.test.example. 1 3600 600 86400 300
@    IN NS  ns.test.example.
ns   IN A   192.0.2.53
www  IN A   192.0.2.10
mail IN A   192.0.2.25
EOF
	cat >"$work/nsd.conf" <<EOF
server:
  ip-address: $nsd_ip
  port: $dns_port
  username: ""
  chroot: ""
  zonesdir: "$work"
  database: ""
  pidfile: "$work/nsd.pid"
  xfrdfile: "$work/xfrd.state"
  zonelistfile: "$work/zone.list"
  xfrdir: "$work"
  server-count: 1
  verbosity: 1
  do-ip6: no
  rrl-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: test.example
  zonefile: "$work/test.example.zone"
EOF
	ip netns exec "$ns" env PATH="$PATH:/usr/sbin" nsd -d -c "$work/nsd.conf" 2>"$work/nsd.err" &
	nsd_pid=$!
	for _ in $(seq 100); do
		out=$(ip netns exec "$ns" dig +short +time=1 +tries=1 @$nsd_ip -p $dns_port www.test.example A 2>/dev/null) || true
		[ "$out" = 192.0.2.10 ] && break
		kill -0 "$nsd_pid" 2>/dev/null || fail "nsd ended"
		sleep 0.1
	done
	[ "$out" = 192.0.2.10 ] || fail "nsd does not answer on $nsd_ip"

	# One query through tlproxy (the path, and both ARP lookups), then the load.
	out=$(ip netns exec "$ns" dig +short +time=2 +tries=2 @$srv_ip -p $dns_port mail.test.example A) ||
		fail "dig through tlproxy failed: $out"
	[ "$out" = 192.0.2.25 ] || fail "dig through tlproxy: '$out', not 192.0.2.25"
	echo "ok: dig through tlproxy on the DPDK port: mail.test.example A $out"
	before_in=$(stat udp dgrams_in) before_out=$(stat udp dgrams_out)

	qf=$work/queries
	printf 'www.test.example A\nmail.test.example A\nns.test.example A\n' >"$qf"
	# 1,000 queries a second for 3 s, 4 clients: a few thousand in all,
	# gently (the test machine is shared).
	ip netns exec "$ns" timeout 60 dnsperf -s $srv_ip -p $dns_port -d "$qf" -l 3 -c 4 -Q 1000 -t 2 \
		>"$work/dnsperf.out" 2>&1 || rc=$?
	grep -E "Queries (sent|completed|lost)|Response codes|Queries per second" "$work/dnsperf.out" || true
	[ "$rc" = 0 ] || fail "dnsperf exited with status $rc: $(tail -3 "$work/dnsperf.out")"
	sent=$(sed -n 's/^ *Queries sent: *\([0-9]*\).*/\1/p' "$work/dnsperf.out")
	done=$(sed -n 's/^ *Queries completed: *\([0-9]*\).*/\1/p' "$work/dnsperf.out")
	lost=$(sed -n 's/^ *Queries lost: *\([0-9]*\).*/\1/p' "$work/dnsperf.out")
	codes=$(sed -n 's/^ *Response codes: *//p' "$work/dnsperf.out")
	qps=$(sed -n 's/^ *Queries per second: *//p' "$work/dnsperf.out")
	if [ -z "$sent" ] || [ -z "$done" ] || [ -z "$lost" ] || [ -z "$codes" ]; then
		fail "cannot read dnsperf's summary: $(cat "$work/dnsperf.out")"
	fi
	[ "$done" -ge 2000 ] || fail "only $done queries completed (of $sent)"
	[ "$lost" = 0 ] || fail "$lost queries lost (of $sent)"
	[ "$done" = "$sent" ] || fail "$done of $sent queries completed"
	[ "$codes" = "NOERROR $done (100.00%)" ] || fail "response codes: $codes"

	# tlproxy counted exactly those, each its own session (responses 1),
	# all ended, and dropped nothing.
	for _ in $(seq 100); do
		[ "$(stat udp_sessions 0)" = 0 ] && break
		sleep 0.1
	done
	[ "$(stat udp_sessions 0)" = 0 ] || fail "tlproxy still has $(stat udp_sessions 0) sessions open"
	local din dout drop r
	din=$(($(stat udp dgrams_in) - before_in)) dout=$(($(stat udp dgrams_out) - before_out))
	[ "$din" = "$done" ] || fail "tlproxy counts $din queries in, dnsperf $done"
	[ "$dout" = "$done" ] || fail "tlproxy counts $dout answers out, dnsperf $done"
	for r in drop_limit drop_no_server drop_error drop_late drop_trunc drop_closing; do
		drop=$(stat udp $r)
		[ "$drop" = 0 ] || fail "tlproxy dropped $drop datagrams ($r)"
	done
	# Every query and answer crossed the DPDK port twice (in and out, on
	# each side of tlproxy). Dropped frames are not all ours to judge: the
	# kernel's IPv6 router and multicast messages are dropped there too.
	local rx tx
	rx=$(nic nic_rx_frames) tx=$(nic nic_tx_frames)
	echo "tlproxy: udp dgrams_in +$din, dgrams_out +$dout, sessions $(stat udp sessions);" \
		"the port's frames: rx $rx ($(nic_each nic_rx_frames) by shard), tx $tx ($(nic_each nic_tx_frames))," \
		"dropped $(nic nic_dropped_frames)"
	[ "$rx" -ge $((2 * done)) ] && [ "$tx" -ge $((2 * done)) ] ||
		fail "the DPDK port carried $rx frames in and $tx out, fewer than 2 x $done"
	# The hand-off between the shards' pairs, as the live stats show it:
	# none on one shard; on two, every datagram one shard handed out the
	# other took in (all done, so none is left on a ring), none dropped
	# (dnsperf lost none). How many are handed is the kernel's choice:
	# its tap driver steers a flow into the queue the flow last came
	# from, so an answer lands on its session's own pair, and a run may
	# hand none.
	local hout hin hdrop
	hout=$(nic nic_handed_out_datagrams) hin=$(nic nic_handed_in_datagrams)
	hdrop=$(nic nic_handoff_dropped_datagrams)
	echo "hand-off: out $hout ($(nic_each nic_handed_out_datagrams) by shard)," \
		"in $hin ($(nic_each nic_handed_in_datagrams)), dropped $hdrop"
	[ "$hdrop" = 0 ] || fail "$hdrop datagrams dropped by the hand-off"
	[ "$hout" = "$hin" ] || fail "$hout datagrams handed out, $hin handed in"
	[ "$shards" != 1 ] || [ "$hout" = 0 ] || fail "one shard handed $hout datagrams"
	echo "ok: dnsperf: $sent sent, $done completed, $lost lost, NOERROR 100%, $qps queries a second"

	# Stop by pid: tlproxy drains (no session open) and ends with status 0.
	kill -TERM "$proxy_pid"
	for _ in $(seq 200); do
		kill -0 "$proxy_pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$proxy_pid" 2>/dev/null && fail "tlproxy still runs 10 s after SIGTERM"
	rc=0
	wait "$proxy_pid" || rc=$?
	proxy_pid=
	[ "$rc" = 0 ] || fail "tlproxy exited with status $rc"
	kill -TERM "$nsd_pid"
	wait "$nsd_pid" || true
	nsd_pid=
}

# tlproxy ARGS... must end at once with status 1 and exactly one line on
# stderr matching WANT (the first argument), never running.
refused() {
	local want=$1 rc=0 n
	shift
	env TL_DPDK="${eal[*]} --file-prefix=$prefix --vdev=net_ring0" TL_DPDK_ADDR=$srv_ip \
		timeout 20 "$tlproxy" "$@" >"$work/out" 2>"$work/err" || rc=$?
	n=$(wc -l <"$work/err")
	[ "$rc" = 1 ] || fail "tlproxy $* exited with status $rc, not 1: $(cat "$work/err")"
	[ "$n" = 1 ] || fail "tlproxy $* said $n lines, not one: $(cat "$work/err")"
	grep -q -- "$want" "$work/err" || fail "tlproxy $*: '$(cat "$work/err")' does not say '$want'"
	echo "ok: refused: $(cat "$work/err")"
}

case_refuse() {
	local up=198.18.0.3:53
	refused "a TCP listener; --dpdk serves UDP listeners only" --dpdk --listen $srv_ip:80 --upstream 198.18.0.3:80
	refused "a TCP listener" --listen $srv_ip:80 --upstream 198.18.0.3:80 --dpdk
	refused "not an address of the DPDK port" --dpdk --udp --listen 198.18.0.9:53 --upstream $up
	refused "cannot be reached through the DPDK port" --dpdk --udp --listen $srv_ip:53 --upstream 127.0.0.1:53
	refused "--takeover: not with --dpdk" --dpdk --udp --listen $srv_ip:53 --upstream $up --takeover "$work/ho"
	refused "--handover-socket: not with --dpdk" --dpdk --udp --listen $srv_ip:53 --upstream $up \
		--handover-socket "$work/ho"
	TL_DRIVER=epoll refused "TL_DRIVER=epoll names another driver" --dpdk --udp --listen $srv_ip:53 --upstream $up
	TL_DPDK_QUEUES=2 refused "one queue pair per shard" --dpdk --udp --listen $srv_ip:53 --upstream $up --shards 1
	# A file: TL_DRIVER=dpdk puts tlproxy on the driver as --dpdk does.
	cat >"$work/admin.yaml" <<EOF
admin: $work/admin.sock
listeners:
  - name: dns
    listen: $srv_ip:53
    proto: udp
    pool: dns
pools:
  - name: dns
    servers:
      - address: $up
EOF
	TL_DRIVER=dpdk refused "the admin socket is a Unix-domain socket" --config "$work/admin.yaml"
	cat >"$work/health.yaml" <<EOF
listeners:
  - name: dns
    listen: $srv_ip:53
    proto: udp
    pool: dns
pools:
  - name: dns
    health:
      interval: 1s
    servers:
      - address: $up
EOF
	refused "TCP health checks connect" --dpdk --config "$work/health.yaml"
	# --check says so too, and a file it can serve passes.
	refused "TCP health checks connect" --dpdk --check "$work/health.yaml"
	sed -i 's/interval: 1s/interval: 1s\n      proto: udp\n      send: "x"/' "$work/health.yaml"
	env TL_DPDK_ADDR=$srv_ip "$tlproxy" --dpdk --check "$work/health.yaml" >"$work/out" 2>&1 ||
		fail "--check of a file with UDP health checks: $(cat "$work/out")"
	echo "ok: $(cat "$work/out")"
}

case $case in
dns) case_dns 1 ;;
dns2) case_dns 2 ;;
refuse) case_refuse ;;
*)
	echo "usage: $0 dns|dns2|refuse TLPROXY TLSHARD" >&2
	exit 2
	;;
esac
echo "ok: dpdk-tlproxy-$case"
