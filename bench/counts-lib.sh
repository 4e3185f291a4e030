# bench/counts-lib.sh: what bench/echo-counts, bench/proxy-counts and
# bench/cpu-split share, sourced by each (not run on its own): from a
# callgrind profile and an strace -c summary of a run of SECS and of 2 x
# SECS, the cost of one operation (round trip, request), start-up and
# shutdown left out; and the proxy benches' nginx backend and nginx stream
# peer, configured as ../shared/bench/proxy-compare configures them.

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

# counts_backend DIR PORT BYTES: start the backend the proxies forward to,
# nginx on CPU 0 answering GET /index.html with BYTES bytes over keep-alive
# on 127.0.0.1:PORT, its files in DIR; its pid in counts_backend_pid.
counts_backend() {
	head -c "$3" /dev/zero | tr '\0' x >"$1/index.html"
	mkdir -p "$1/logs"
	cat >"$1/backend.conf" <<CONF
daemon off; master_process off; worker_processes 1; error_log $1/logs/backend.err warn; pid $1/backend.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000000; server { listen 127.0.0.1:$2; root $1; } }
CONF
	taskset -c 0 nginx -p "$1" -c "$1/backend.conf" &
	counts_backend_pid=$!
	sleep 0.3
}

# counts_nginx_stream DIR PORT UPSTREAM: write the nginx stream peer's
# config (one worker) for a listener on PORT forwarding to UPSTREAM, in DIR;
# print its command.
counts_nginx_stream() {
	cat >"$1/stream-$2.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off; master_process off; worker_processes 1; error_log $1/logs/stream.err warn; pid $1/stream-$2.pid;
events { worker_connections 4000; }
stream { server { listen 127.0.0.1:$2; proxy_pass 127.0.0.1:$3; } }
CONF
	echo "nginx -p $1 -c $1/stream-$2.conf"
}
