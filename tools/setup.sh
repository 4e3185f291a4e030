# tools/setup.sh: install what the build needs (apt-get as root, else name it) and build; sourced by demo and check.
# Usage: . tools/setup.sh [BUILD_DIR [BUILD_TYPE]]
tl_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tl_pkgs="gcc g++ pkg-config meson ninja-build liburing-dev libhwloc-dev libjemalloc-dev libcunit1-dev libxxhash-dev valgrind clang libclang-rt-14-dev libyaml-dev libcjson-dev prometheus libc-ares-dev libgnutls28-dev libssl-dev libwolfssl-dev nginx libnginx-mod-stream wrk redis-server redis-tools socat iperf3 openssl curl haproxy nghttp2-client gnuplot-nox libuv1-dev strace nsd dnsperf bind9-dnsutils libdpdk-dev gcc-mingw-w64-x86-64"

tl_missing() {
	local p missing=
	for p in $tl_pkgs $*; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	echo "$missing"
}

tl_install() {
	local missing
	missing=$(tl_missing "$@")
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "turnloop: missing packages:$missing (run: sudo apt-get install$missing)" >&2
		return 1
	fi
	echo "turnloop: installing$missing" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null || {
		echo "turnloop: apt-get install$missing failed" >&2
		return 1
	}
}

# tl_install_bare PKG...: install what is missing of PKG without the packages they
# recommend (the test command's wine: about 1.2 GB so, much more with them).
tl_install_bare() {
	local p missing=
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "turnloop: missing packages:$missing (run: sudo apt-get install --no-install-recommends$missing)" >&2
		return 1
	fi
	echo "turnloop: installing$missing" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null || {
		echo "turnloop: apt-get install$missing failed" >&2
		return 1
	}
}

# tl_build DIR TYPE [meson options...]: configure once, then build.
tl_build() {
	local dir=$1 type=$2
	shift 2
	if [ ! -f "$dir/build.ninja" ]; then
		local log
		log=$(mktemp)
		meson setup "$dir" "$tl_root" --buildtype="$type" "$@" >"$log" 2>&1 || {
			cat "$log" >&2
			rm -f "$log"
			echo "turnloop: meson setup of $dir failed" >&2
			return 1
		}
		rm -f "$log"
	fi
	ninja -C "$dir" >"$dir/build.log" 2>&1 || {
		tail -40 "$dir/build.log" >&2
		echo "turnloop: build in $dir failed" >&2
		return 1
	}
}
