#!/usr/bin/env bash
# tests/test_pkgconfig.sh: turnloop.pc works as documented: its Cflags name include/ only (installed and uninstalled), a program built with cc as turnloop-uninstalled.pc says runs with the shards' jemalloc arenas on (shared, under --as-needed, and static with --static), one linked with jemalloc behind libc hears why not at launch, and --static names no library only a static hwloc needs.
set -uo pipefail
src=$1 build=$2 sanitize=$3 jemalloc=$4
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PKG_CONFIG_PATH=$build/meson-uninstalled
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# A sanitizer build's library needs the runtime at link time; its arenas
# are off by design (the sanitizer replaces malloc).
san=()
want=1
if [ "$sanitize" != none ]; then
	san=(-fsanitize="$sanitize")
	want=0
fi
[ "$jemalloc" = 1 ] || want=0

cflags=$(pkg-config --cflags turnloop) || fail "pkg-config --cflags turnloop"
for f in $cflags; do
	[ "$f" = "-I$src/include" ] || fail "uninstalled Cflags hand out $f (only -I$src/include)"
done
[ -n "$cflags" ] || fail "uninstalled Cflags are empty"
inst=$(PKG_CONFIG_PATH=$build/meson-private pkg-config --cflags turnloop)
prefix=$(PKG_CONFIG_PATH=$build/meson-private pkg-config --variable=includedir turnloop)
for f in $inst; do
	[ "$f" = "-I$prefix" ] || fail "installed Cflags hand out $f (only -I$prefix)"
done

libdir=$(pkg-config --variable=tl_libdir turnloop)
libs=$(pkg-config --libs turnloop) || fail "pkg-config --libs turnloop"
slibs=$(pkg-config --static --libs turnloop) || fail "pkg-config --static --libs turnloop"
case " $slibs " in *" -ludev "*) fail "--static names -ludev (only a static hwloc needs it): $slibs" ;; esac

# run NAME: the probe built as "$@" says; checks what it prints.
probe() {
	local name=$1
	shift
	if ! $cc "${san[@]}" -o "$tmp/$name" "$src/tests/pkgconfig_probe.c" "$@" \
		-Wl,-rpath,"$libdir" 2>"$tmp/$name.cc"; then
		fail "$name: cc failed:"; cat "$tmp/$name.cc"
		return 1
	fi
	"$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" || {
		fail "$name: the probe failed:"; cat "$tmp/$name.err"
		return 1
	}
	echo "$name: $(cat "$tmp/$name.out")"
}

# shellcheck disable=SC2086
if probe shared $cflags $libs; then
	grep -q "^arenas $want" "$tmp/shared.out" || fail "shared: arenas not $want"
	[ "$want" = 0 ] || [ ! -s "$tmp/shared.err" ] || { fail "shared: stderr"; cat "$tmp/shared.err"; }
fi
# shellcheck disable=SC2086
if probe as-needed -Wl,--as-needed $cflags $libs; then
	grep -q "^arenas $want" "$tmp/as-needed.out" || fail "as-needed: arenas not $want"
fi
# The archive, linked with what --static adds.
# shellcheck disable=SC2086
if probe static $cflags ${slibs/-lturnloop/-l:libturnloop.a}; then
	grep -q "^arenas $want" "$tmp/static.out" || fail "static: arenas not $want"
fi
# Linked the way that leaves jemalloc behind libc (it comes in only as a
# dependency of libturnloop.so): arenas are off, and launch says so.
if [ "$want" = 1 ]; then
	if probe behind $cflags -L"$libdir" -lturnloop; then
		grep -q "^arenas 0 jemalloc is linked but is not the process allocator" \
			"$tmp/behind.out" || fail "behind: $(cat "$tmp/behind.out")"
		grep -q "^turnloop: per-shard jemalloc arenas are off: " "$tmp/behind.err" ||
			fail "behind: launch did not say why arenas are off"
	fi
fi
exit $failed
