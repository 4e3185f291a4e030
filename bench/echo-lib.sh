# bench/echo-lib.sh: what bench/echo-pairs, bench/echo-layers and bench/echo-counts share,
# sourced by each (not run on its own). $tool names the caller in errors.

# The load generator and the peers ../shared/bench/echo-compare builds.
bin=${BENCH_BIN:-${TMPDIR:-/tmp}/tl-bench-bin}
[ -x "$bin/pingpong" ] || { echo "$tool: no $bin/pingpong: run ../shared/bench/echo-compare once" >&2; exit 2; }

# server_spec SPEC: set name and cmd from a built-in peer name (epoll,
# uring, libuv, tokio) or NAME='CMD'.
server_spec() {
	local exe
	case $1 in
	epoll | uring | libuv | tokio)
		exe=$bin/$(case $1 in epoll) echo epoll_echo ;; uring) echo uring_echo ;; libuv) echo uv_echo ;; tokio) echo tokio-echo ;; esac)
		[ -x "$exe" ] || { echo "$tool: peer $1 not built: run ../shared/bench/echo-compare $1 once" >&2; exit 2; }
		name=$1 cmd="$exe -p {port}" ;;
	*=*) name=${1%%=*} cmd=${1#*=} ;;
	*) echo "$tool: unknown server '$1'" >&2; exit 2 ;;
	esac
}

# wait_port PORT: until something accepts on 127.0.0.1:PORT (at most 5 s).
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
