# tests/win_common.sh: what the Windows end-to-end scripts share (sourced; they set $work, and
# $tlload and $tlecho where they use them, first): fail; run_tlload, one tlload.exe run under wine
# that must end with round trips done, errors=0 and driver=iocp; start_tlecho_shards.
fail() {
	echo "FAIL: $*" >&2
	[ -n "${fail_tail:-}" ] && [ -f "$fail_tail" ] && grep -v '^wine\|fixme' "$fail_tail" | tail -5 >&2
	exit 1
}

run_tlload() { # name, port, tlload arguments...
	local name=$1 port=$2
	shift 2
	timeout 60 wine "$tlload" -p "$port" --host 127.0.0.1 "$@" >"$work/$name.out" 2>"$work/$name.err"
	local rc=$?
	local line
	line=$(grep '^tlload ' "$work/$name.out")
	[ $rc = 0 ] || fail "$name: tlload exited $rc: $line $(grep -v '^wine\|fixme' "$work/$name.err" | tail -3)"
	case $line in
	*" errors=0 "*"driver=iocp"*) ;;
	*) fail "$name: $line" ;;
	esac
	local rps=${line#*rps=}
	rps=${rps%% *}
	[ "$rps" -gt 0 ] || fail "$name: no round trips: $line"
	echo "ok: $name: $line"
}

# start_tlecho_shards PORT: tlecho.exe --shards 2 on 127.0.0.1:PORT under wine ($tlecho; its output
# in $work/tlecho.out and .err), waited for until it says it listens. Sets wpid (wine's
# launcher, what to wait for), epid (the Windows program's own process, what SIGINT goes to)
# and start_line (its start line, \r removed); fails unless it runs 2 shards on iocp.
start_tlecho_shards() {
	local port=$1 up=0
	wine "$tlecho" -p "$port" --host 127.0.0.1 --shards 2 >"$work/tlecho.out" 2>"$work/tlecho.err" &
	wpid=$!
	for _ in $(seq 300); do
		if grep -q "listening on" "$work/tlecho.err" 2>/dev/null; then
			up=1
			break
		fi
		kill -0 "$wpid" 2>/dev/null || break
		sleep 0.1
	done
	[ $up = 1 ] || fail "tlecho never said it listens on port $port"
	# wine's launcher may have forked the program: take the process that is not wine.
	epid=$(pgrep -f "tlecho.exe -p $port --host" | while read -r q; do
		[ "$(ps -o comm= -p "$q")" != wine ] && echo "$q"; done | head -1)
	[ -n "$epid" ] || epid=$wpid
	start_line=$(grep "listening on" "$work/tlecho.err" | tr -d '\r')
	case $start_line in
	*"with 2 shards, driver iocp"*) ;;
	*) fail "tlecho did not start 2 shards on iocp: $start_line" ;;
	esac
}
