#!/usr/bin/env bash
# tests/test_charts.sh: bench/charts draws every bench/results file as a non-empty SVG, the same bytes twice and the same as the committed docs/img, and refuses bad input or a missing gnuplot with one line.
# Usage: test_charts.sh SOURCE_ROOT
# Exit 77 (skip) only when gnuplot is not installed; tools/setup.sh installs
# it (gnuplot-nox), so under tools/check this always runs.
set -u
root=$1
charts=$root/bench/charts
if ! command -v gnuplot >/dev/null 2>&1; then
	echo "skip: gnuplot is not installed (Debian package gnuplot-nox)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}
ok() { echo "ok: $*"; }

csvs=("$root"/bench/results/*.csv)
[ -e "${csvs[0]}" ] || { echo "FAIL: no bench/results/*.csv"; exit 1; }

if "$charts" -o "$tmp/a" >"$tmp/out" 2>"$tmp/err"; then
	ok "bench/charts ran on ${#csvs[@]} results files"
else
	fail "bench/charts exited $?: $(cat "$tmp/err")"
fi
"$charts" -o "$tmp/b" >/dev/null 2>&1 || fail "second run of bench/charts failed"
for f in "${csvs[@]}"; do
	n=$(basename "$f" .csv)
	svg=$tmp/a/$n.svg
	if [ ! -s "$svg" ]; then
		fail "$n.svg missing or empty"
		continue
	fi
	title=$(sed -n 's/^# title: *//p' "$f" | head -1)
	# gnuplot escapes & < > in SVG text; the titles here use none of them.
	if grep -q '</svg>' "$svg" && grep -qF "$title" "$svg"; then
		ok "$n.svg is a whole SVG with its title"
	else
		fail "$n.svg lacks </svg> or its title \"$title\""
	fi
	# Every figure of the file is drawn: each row's bar label carries its
	# ratio, or for absolute units its value.
	unit=$(sed -n 's/^# unit: *//p' "$f" | head -1)
	missing=
	while IFS=, read -r srv vals; do
		for v in ${vals//,/ }; do
			if [ "$unit" = ratio ]; then
				printf -v want '%.3f' "$v"
			else
				want="($v $unit)"
			fi
			grep -qF ">$want<" "$svg" || missing="$missing $srv=$v"
		done
	done < <(grep -v '^#' "$f" | grep -v '^server,' | grep -v '^[[:space:]]*$')
	if [ -z "$missing" ]; then ok "$n.svg labels every figure"; else fail "$n.svg lacks labels for:$missing"; fi
	if cmp -s "$svg" "$tmp/b/$n.svg"; then ok "$n.svg is the same twice"; else fail "$n.svg differs between two runs"; fi
	if cmp -s "$svg" "$root/docs/img/$n.svg"; then
		ok "docs/img/$n.svg is up to date"
	else
		fail "docs/img/$n.svg is not what bench/charts makes of bench/results/$n.csv (run bench/charts)"
	fi
done

# Bad input: one line naming the file, non-zero status, no chart.
printf '# title: t\n# measure: m\n# unit: ratio\nserver,a\nx,1.000\ny,fast\n' >"$tmp/bad.csv"
if "$charts" -o "$tmp/c" "$tmp/bad.csv" >/dev/null 2>"$tmp/err"; then
	fail "a non-numeric value was accepted"
elif [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "bad.csv:6: not a number" "$tmp/err" && [ ! -e "$tmp/c/bad.svg" ]; then
	ok "a non-numeric value is refused with one line"
else
	fail "a non-numeric value: unexpected message or output: $(cat "$tmp/err")"
fi
printf '# title: t\n# unit: ratio\nserver,a\nx,1\ny,2\n' >"$tmp/nomeasure.csv"
if "$charts" -o "$tmp/c" "$tmp/nomeasure.csv" >/dev/null 2>"$tmp/err"; then
	fail "a file without '# measure:' was accepted"
elif [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q 'no "# measure: ..." line' "$tmp/err"; then
	ok "a file without '# measure:' is refused with one line"
else
	fail "a file without '# measure:': unexpected message: $(cat "$tmp/err")"
fi
printf '# title: t\n# measure: m\n# unit: s\nserver,a\nx,0\ny,2\n' >"$tmp/zero.csv"
if "$charts" -o "$tmp/c" "$tmp/zero.csv" >/dev/null 2>"$tmp/err"; then
	fail "a zero reference value was accepted"
elif [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "zero.csv:5: the first row" "$tmp/err"; then
	ok "a zero reference value is refused with one line"
else
	fail "a zero reference value: unexpected message: $(cat "$tmp/err")"
fi

# No gnuplot on PATH: one clear line, status 2, before anything else runs.
mkdir "$tmp/nobin"
PATH=$tmp/nobin "$BASH" "$charts" -o "$tmp/d" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "gnuplot not found" "$tmp/err" && [ ! -e "$tmp/d" ]; then
	ok "no gnuplot: one line, status 2"
else
	fail "no gnuplot: status $rc, message: $(cat "$tmp/err")"
fi

[ $failed = 0 ] && echo "all passed" || echo "$failed failed"
[ $failed = 0 ]
