#!/usr/bin/env bash
# tests/test_headers_win.sh: the public headers compile for Windows. Each of
# include/ alone, then all of them with the checks that tie them to Winsock:
# tl_iovec has WSABUF's layout, and every error code a header names
# (-EXXX) exists there. Compiled with Debian's mingw-w64 C compiler, which
# tools/setup.sh installs.
# The platform layer's header (lib/shared/os.h) is compiled for Windows too
# (the sources themselves are the Windows build's: tools/check's build-win).
# Usage: test_headers_win.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
root=$1
build=$2
cc=x86_64-w64-mingw32-gcc
command -v "$cc" >/dev/null || {
	echo "test_headers_win: $cc is not installed (apt-get install gcc-mingw-w64-x86-64)" >&2
	exit 1
}
flags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$root/include")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each header alone, two at a time. WIN32_LEAN_AND_MEAN halves what
# <winsock2.h> pulls in; the checks below compile without it.
n=0
for h in "$root"/include/turnloop.h "$root"/include/turnloop/*.h; do
	rel=${h#"$root/include/"}
	printf '#include "%s"\n' "$rel" >"$tmp/alone$n.c"
	n=$((n + 1))
done
# shellcheck disable=SC2016
if ! printf '%s\n' "$tmp"/alone*.c | xargs -P 2 -I{} sh -c '"$0" "$@" {} || { echo "test_headers_win: $(cat {}) does not compile alone for Windows" >&2; exit 255; }' \
	"$cc" "${flags[@]}" -DWIN32_LEAN_AND_MEAN; then
	exit 1
fi
[ "$n" -ge 10 ] || { echo "test_headers_win: only $n headers found under $root/include" >&2; exit 1; }
codes=$(grep -ho -- '-E[A-Z0-9]\{3,\}' "$root"/include/turnloop.h "$root"/include/turnloop/*.h | sort -u | sed 's/^-//')
[ -n "$codes" ] || { echo "test_headers_win: no error codes found in the headers" >&2; exit 1; }
{
	echo '#include <turnloop.h>'
	echo '#include <stddef.h>'
	echo '_Static_assert(sizeof(tl_iovec) == sizeof(WSABUF), "tl_iovec is not WSABUF-sized");'
	echo '_Static_assert(offsetof(tl_iovec, iov_len) == offsetof(WSABUF, len), "iov_len is not WSABUF.len");'
	echo '_Static_assert(offsetof(tl_iovec, iov_base) == offsetof(WSABUF, buf), "iov_base is not WSABUF.buf");'
	echo '_Static_assert(sizeof(((tl_addr *)0)->in6) == sizeof(struct sockaddr_in6), "tl_addr");'
	for c in $codes; do
		printf '#ifndef %s\n#error "%s, named by a public header, is not defined on Windows"\n#endif\n' "$c" "$c"
	done
	echo 'int main(void) { return 0; }'
} >"$tmp/all.c"
"$cc" "${flags[@]}" "$tmp/all.c" || { echo "test_headers_win: the public headers' Windows checks failed" >&2; exit 1; }
# The platform layer's Windows branch (lib/shared/os.h), every function
# type-checked by a call, and the topology interface's header (topo.h).
cat >"$tmp/os.c" <<'C'
#include "os.h"
#include "topo.h"
static TL__OS_THREAD_FN thread_fn(void *arg)
{
	tl__os_thread_name("probe");
	tl__os_yield();
	tl__os_sleep_us(1);
	(void)arg;
	return 0;
}
int main(void)
{
	tl__os_mutex m;
	tl__os_cond c;
	tl__os_thread t = tl__os_thread_self();
	tl__os_thread_handle th;
	_Atomic uint32_t word = 0;
	tl__cpuset cpus;
	char b[4];
	void *p = tl__os_map(4096);
	tl__os_mutex_init(&m);
	tl__os_cond_init(&c);
	tl__os_mutex_lock(&m);
	(void)tl__os_cond_timedwait(&c, &m, tl__os_mono_ns() + 1000);
	tl__os_mutex_unlock(&m);
	tl__os_cond_signal(&c);
	tl__os_cond_broadcast(&c);
	tl__os_cond_destroy(&c);
	tl__os_mutex_destroy(&m);
	if (tl__os_thread_start(&th, thread_fn, NULL) == 0)
		tl__os_thread_join(th);
	tl__os_addr_wake(&word, 1);
	tl__cpuset_zero(&cpus);
	tl__cpuset_add(&cpus, (unsigned)tl__os_cpu());
	(void)tl__os_pwrite(0, b, 0, 0);
	(void)tl__os_pread(0, b, sizeof b, 0);
	tl__os_notifier n;
	if (tl__os_notifier_open(&n) == 0) {
		(void)tl__os_notifier_port(&n, 1);
		tl__os_notifier_signal(&n);
		(void)tl__os_notifier_drain(&n);
		(void)tl__os_notifier_wait(&n, 1000);
		tl__os_notifier_close(&n);
	}
	if (p)
		tl__os_unmap(p, 4096);
	if (word)
		tl__os_addr_wait(&word, 1);
	return (int)(tl__os_mono_ns() + tl__os_coarse_ns() + tl__os_thread_cpu_ns()) + tl__os_thread_is(t) +
	       tl__cpuset_last(&cpus) + (int)tl__cpuset_count(&cpus) + tl__cpuset_has(&cpus, 0);
}
C
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$root/lib/shared" "$tmp/os.c" ||
	{ echo "test_headers_win: lib/shared/os.h does not compile for Windows" >&2; exit 1; }
echo "test_headers_win: $n headers compile for Windows; tl_iovec is WSABUF; $(echo $codes | wc -w) error codes defined; the platform layer compiles"
