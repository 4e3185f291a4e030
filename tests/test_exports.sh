#!/usr/bin/env bash
# tests/test_exports.sh: the shared library exports exactly the functions include/ declares (the version script lib/libturnloop.map kept in step): each declared function, deprecated ones included, is exported, and nothing else is.
set -uo pipefail
root=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declarations: a line of a public header that starts with a return type
# and names tl_something( at the top level (static inline helpers and
# typedefs of function pointers are not symbols).
grep -hE '^[a-z][a-z0-9_ ]*[ *]tl_[a-z0-9_]+\(' "$root"/include/turnloop.h "$root"/include/turnloop/*.h |
	grep -vE '^(static|typedef)' |
	sed -E 's/.*[ *](tl_[a-z0-9_]+)\(.*/\1/' | sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	grep -E '^tl_' | sort -u >"$tmp/exported"
nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	grep -E '^tl__' | sort -u >"$tmp/internal"

failed=0
n=$(wc -l <"$tmp/declared")
if [ "$n" -lt 100 ]; then
	echo "FAIL: only $n declarations found in include/: the scan is broken"
	failed=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
	echo "FAIL: declared in include/ but not exported by $(basename "$lib"):"
	echo "$missing" | sed 's/^/  /'
	failed=1
fi
if [ -n "$extra" ]; then
	echo "FAIL: exported but declared nowhere in include/:"
	echo "$extra" | sed 's/^/  /'
	failed=1
fi
if [ -s "$tmp/internal" ]; then
	echo "FAIL: internal tl__ names exported (lib/libturnloop.map keeps them local):"
	sed 's/^/  /' "$tmp/internal"
	failed=1
fi
[ $failed = 0 ] && echo "ok: $n functions declared, the same $n exported, no tl__ name"
exit $failed
