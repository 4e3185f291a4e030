# bench/proc-lib.sh: a process's figures read from /proc without dying when it vanishes mid-read; sourced by the bench scripts (not run on its own).
#
#   proc_ticks PID [DEFAULT]    utime+stime+cutime+cstime, in clock ticks (a
#                               zombie's are final and still counted)
#   proc_user_sys PID [DEFAULT] the same split in two: utime+cutime, then
#                               stime+cstime (user space, then the kernel),
#                               one line, two numbers (DEFAULT as given)
#   proc_rss_kib PID [DEFAULT]  VmRSS in KiB
#   proc_fds PID [DEFAULT]      open descriptors
#   proc_alive PID              status 0 if PID runs (exists, not a zombie)
#
# Each prints one whole number (proc_user_sys two) and returns 0. When the process is gone (no
# /proc entry, a zombie for RSS and descriptors, or the entry vanishing
# while it is read) it prints DEFAULT and returns 0 if DEFAULT was given,
# else prints nothing and returns 1. They print nothing on stderr, run no
# pipeline and no other program (a `cat` or `ls` of a vanished entry
# under `set -o pipefail` ended whole runs), and each file is read once,
# so a figure is never pieced together from two moments. Safe under
# `set -euo pipefail` when a DEFAULT is given or the status is tested
# (`x=$(proc_rss_kib "$pid") || ...`). tests/test_proc_lib.sh checks them
# against vanished and vanishing processes.

# The fields of /proc/PID/stat after the command name (which may hold
# spaces and parentheses: cut at the last ") "), into _proc_f: index 0 is
# field 3 (the state), field N is index N-3.
_proc_stat() {
	local line
	{ read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
	[[ $line == *") "* ]] || return 1
	read -ra _proc_f <<<"${line##*) }"
	[ "${#_proc_f[@]}" -ge 15 ]
}

_proc_gone() { # [DEFAULT]
	[ $# -gt 0 ] || return 1
	printf '%s\n' "$1"
}

proc_alive() {
	local _proc_f
	_proc_stat "$1" && [[ ${_proc_f[0]} != [ZX] ]]
}

proc_ticks() {
	local pid=$1 _proc_f
	shift
	if _proc_stat "$pid" && [[ ${_proc_f[11]} =~ ^[0-9]+$ && ${_proc_f[12]} =~ ^[0-9]+$ &&
		${_proc_f[13]} =~ ^[0-9]+$ && ${_proc_f[14]} =~ ^[0-9]+$ ]]; then
		echo $((_proc_f[11] + _proc_f[12] + _proc_f[13] + _proc_f[14]))
	else
		_proc_gone "$@"
	fi
}

proc_user_sys() {
	local pid=$1 _proc_f
	shift
	if _proc_stat "$pid" && [[ ${_proc_f[11]} =~ ^[0-9]+$ && ${_proc_f[12]} =~ ^[0-9]+$ &&
		${_proc_f[13]} =~ ^[0-9]+$ && ${_proc_f[14]} =~ ^[0-9]+$ ]]; then
		echo "$((_proc_f[11] + _proc_f[13])) $((_proc_f[12] + _proc_f[14]))"
	else
		_proc_gone "$@"
	fi
}

proc_rss_kib() {
	local pid=$1 k v rest rss=
	shift
	# A zombie's status has no VmRSS line: gone.
	{ while read -r k v rest; do
		if [ "$k" = VmRSS: ]; then
			rss=$v
			break
		fi
	done <"/proc/$pid/status"; } 2>/dev/null || true
	if [[ $rss =~ ^[0-9]+$ ]]; then
		echo "$rss"
	else
		_proc_gone "$@"
	fi
}

proc_fds() {
	local pid=$1 had=0 fds
	shift
	! shopt -q nullglob || had=1
	shopt -s nullglob
	fds=(/proc/"$pid"/fd/*)
	[ "$had" = 1 ] || shopt -u nullglob
	# The listing is only the process's if it still ran once it was read
	# (an entry that vanished mid-listing reads as empty or short).
	if [ -r "/proc/$pid/fd" ] && proc_alive "$pid"; then
		echo "${#fds[@]}"
	else
		_proc_gone "$@"
	fi
}
