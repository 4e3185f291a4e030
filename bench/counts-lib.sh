# bench/counts-lib.sh: what bench/echo-counts and bench/proxy-counts share,
# sourced by each (not run on its own): from a callgrind profile and an
# strace -c summary of a run of SECS and of 2 x SECS, the cost of one
# operation (round trip, request), start-up and shutdown left out.

# counts_ir FILE: the profile's instructions, fprintf's own (inclusive) left
# out: under valgrind that is the runtime's stall warning (a pass the tool
# made slow), or a program's last words, not its work.
counts_ir() {
	callgrind_annotate --auto=no --inclusive=yes --show-percs=no --threshold=100 "$1" 2>/dev/null |
		awk '{ v = $1; gsub(/,/, "", v) }
		     /PROGRAM TOTALS/ { t = v }
		     $2 ~ /stdio-common\/fprintf\.c:fprintf$/ { f = v }
		     END { print t - f }'
}

# counts_row NAME CG1 CG2 ST1 ST2 N1 N2 M1 M2: one row: instructions per
# operation from the profiles of runs of N1 and N2 operations, system calls
# per operation (all, then each call that makes at least 0.01) and
# operations per OS wait from the summaries of runs of M1 and M2.
counts_row() {
	local ir
	ir=$(awk -v a="$(counts_ir "$2")" -v b="$(counts_ir "$3")" -v n1="$6" -v n2="$7" \
		'BEGIN {printf "%.0f", (b - a) / (n2 - n1)}')
	# strace -c: "% time seconds usecs/call calls [errors] syscall"
	awk -v n1="$8" -v n2="$9" -v name="$1" -v ir="$ir" '
		FNR == 1 { f++ }
		$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { c[f, $NF] = $4; seen[$NF] = 1 }
		END {
			for (k in seen) {
				v = (c[2, k] - c[1, k]) / (n2 - n1)
				all += v
				if (k ~ /^epoll_(p?wait2?|pwait)$/) waits += v
				if (v >= 0.01) line = line sprintf(" %s %.3f", k, v)
			}
			printf "%-10s %9s %9.3f %9.1f  %s\n", name, ir, all, (waits > 0 ? 1 / waits : 0), line
		}' "$4" "$5"
}
