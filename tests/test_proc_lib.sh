#!/usr/bin/env bash
# tests/test_proc_lib.sh: bench/proc-lib.sh gives numbers for a live process and its defined "gone" for a vanished, a zombie and a vanishing one, under set -euo pipefail, with nothing on stderr.
#
#   tests/test_proc_lib.sh SOURCE_ROOT
#
# Exit 0 if every check holds, 1 otherwise (each failure named on stderr).
set -euo pipefail
root=${1:?usage: test_proc_lib.sh SOURCE_ROOT}
. "$root/bench/proc-lib.sh"
fails=0
err=$(mktemp)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -f "$err"
}
trap cleanup EXIT
fail() {
	echo "test_proc_lib: $*" >&2
	fails=$((fails + 1))
}
num() { [[ $1 =~ ^[0-9]+$ ]]; }

# A live process: numbers, status 0, no default used.
sleep 60 &
live=$!
pids+=("$live")
t=$(proc_ticks "$live" 2>"$err") || fail "proc_ticks of a live process failed"
num "$t" || fail "proc_ticks of a live process: '$t'"
us=$(proc_user_sys "$live" 2>>"$err") || fail "proc_user_sys of a live process failed"
[[ $us =~ ^[0-9]+\ [0-9]+$ ]] || fail "proc_user_sys of a live process: '$us'"
# The split adds up to the total: a process that burns CPU in user space.
sh -c 'while :; do :; done' &
spin=$!
pids+=("$spin")
sleep 0.5
read -r u s < <(proc_user_sys "$spin" "x x")
t=$(proc_ticks "$spin" x)
num "$u" && num "$s" && num "$t" || fail "proc_user_sys/proc_ticks of a spinning process: '$u' '$s' '$t'"
if num "$u" && num "$s" && num "$t"; then
	[ "$u" -gt 0 ] || fail "proc_user_sys: a process spinning in user space shows user time $u"
	[ $((u + s)) -le "$t" ] && [ $((u + s)) -ge $((t - 5)) ] || fail "proc_user_sys $u + $s against proc_ticks $t"
fi
kill "$spin" 2>/dev/null || true
r=$(proc_rss_kib "$live" -1 2>>"$err")
num "$r" && [ "$r" -gt 0 ] || fail "proc_rss_kib of a live process: '$r'"
f=$(proc_fds "$live" -1 2>>"$err")
num "$f" && [ "$f" -ge 3 ] || fail "proc_fds of a live process: '$f'"
proc_alive "$live" || fail "proc_alive of a live process"
# Our own descriptors, counted as the kernel lists them.
exec {extra}</dev/null
mine=$(proc_fds $$)
want=$(find /proc/$$/fd -mindepth 1 -maxdepth 1 | wc -l)
# find itself ran in a child: its own descriptors are not ours, but the
# pipe to wc was opened by us as well; allow that one.
[ "$mine" -ge $((want - 1)) ] && [ "$mine" -le $((want + 1)) ] || fail "proc_fds of this shell: $mine, find: $want"
exec {extra}<&-

# A command name with spaces and parentheses does not shift the fields.
cp "$(command -v sleep)" "${TMPDIR:-/tmp}/x) (y $$"
"${TMPDIR:-/tmp}/x) (y $$" 60 &
odd=$!
pids+=("$odd")
sleep 0.1
t=$(proc_ticks "$odd") || fail "proc_ticks with an odd name failed"
num "$t" || fail "proc_ticks with an odd name: '$t'"
rm -f "${TMPDIR:-/tmp}/x) (y $$"

# proc_fds leaves nullglob as it found it.
shopt -q nullglob && fail "nullglob was on before proc_fds"
proc_fds "$live" >/dev/null
shopt -q nullglob && fail "proc_fds left nullglob on"

# Vanished and reaped: the default, or nothing and status 1.
sleep 0.01 &
gone=$!
wait "$gone" || true
for f in proc_ticks proc_user_sys proc_rss_kib proc_fds; do
	out=$($f "$gone" NA 2>>"$err") || fail "$f of a vanished pid with a default failed"
	[ "$out" = NA ] || fail "$f of a vanished pid: '$out', not the default"
	if out=$($f "$gone" 2>>"$err"); then
		fail "$f of a vanished pid without a default: status 0 ('$out')"
	fi
	[ -z "$out" ] || fail "$f of a vanished pid printed '$out'"
done
if proc_alive "$gone"; then fail "proc_alive of a vanished pid"; fi
# In an assignment with a default, set -e does not end the script.
x=$(proc_rss_kib "$gone" 0)
[ "$x" = 0 ] || fail "assignment with a default: '$x'"

# A zombie (exited, its parent not reaping it): not alive, no RSS, no
# descriptors; its final CPU time is still there.
exec {zfd}< <(sh -c 'sleep 0.05 & echo $!; exec sleep 30')
pids+=("$!") # the parent: killed at the end, then init reaps the zombie
read -r zombie <&"$zfd"
sleep 0.5
state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' /proc/"$zombie"/status 2>/dev/null || true)
if [ "$state" = Z ]; then
	if proc_alive "$zombie"; then fail "proc_alive of a zombie"; fi
	[ "$(proc_rss_kib "$zombie" NA)" = NA ] || fail "proc_rss_kib of a zombie"
	[ "$(proc_fds "$zombie" NA)" = NA ] || fail "proc_fds of a zombie"
	num "$(proc_ticks "$zombie" NA)" || fail "proc_ticks of a zombie"
else
	fail "no zombie to test (state '$state')"
fi
exec {zfd}<&-

# Vanishing while read: short-lived processes, each read (in this shell,
# under set -e) as it ends; every answer is one line, a number or the
# default, and the script lives on.
outs=$(mktemp)
for i in $(seq 100); do
	# A subshell that ends at once, or a sleep of a millisecond or two:
	# the reads meet them running, exiting, as zombies and reaped.
	if ((i % 3 == 0)); then (:) & else sleep 0.00$((i % 3)) & fi
	p=$!
	proc_ticks "$p" NA >>"$outs" 2>>"$err"
	proc_rss_kib "$p" NA >>"$outs" 2>>"$err"
	proc_fds "$p" NA >>"$outs" 2>>"$err"
	wait "$p" || true
done
lines=$(wc -l <"$outs")
bad=$(grep -cvE '^([0-9]+|NA)$' "$outs" || true)
seen_na=$(grep -c '^NA$' "$outs" || true)
rm -f "$outs"
[ "$lines" = 300 ] || fail "300 reads of vanishing processes gave $lines lines"
[ "$bad" = 0 ] || fail "$bad reads of vanishing processes gave neither a number nor the default"
echo "test_proc_lib: 300 reads of vanishing processes, $seen_na of them after the process had gone"

[ -s "$err" ] && fail "stderr was not empty: $(head -3 "$err")"
[ "$fails" = 0 ] && echo "test_proc_lib: ok"
exit $((fails > 0))
