# tests/win_common.sh: what the Windows end-to-end scripts share (sourced; they set $work and $tlload
# first): fail, and run_tlload, one tlload.exe run under wine that must end with round trips done,
# errors=0 and driver=iocp.
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
