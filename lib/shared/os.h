/* lib/shared/os.h: the platform layer: what every layer needs of the OS that POSIX and Windows give differently (clocks, locks, condition variables, threads, barriers, thread identity, waits on an address, the current CPU, aligned blocks, memory mapping, positioned file reads and writes, the notifier), one inline function each. */
#ifndef TL_OS_H
#define TL_OS_H

/*
 * The library, the runtime and the drivers read clocks, take the poster's,
 * the driver choice's and the simulated world's locks, ask which thread
 * they run on, allocate cache-aligned rings, map the loop's lease memory
 * and wake a parked loop only through these (and get the socket headers
 * the public ones leave out, Unix-domain addresses and address text,
 * here), so a port to another OS adds a branch here instead of editing
 * each caller (libuv's src/unix and src/win split the same way). Each is
 * small enough to inline: the monotonic clock is read on every turn.
 *
 * POSIX is what the whole tree builds on. The Windows branch runs in the
 * Windows build (cross/mingw-w64.ini; docs/WINDOWS.md): the loop core, the
 * blocking pool, the IOCP driver and the simulation driver, under wine in
 * the test command.
 *
 * The blocking pool (lib/pool/) reaches its threads, condition variables
 * and the futex its workers park on through here too; its topology (NUMA
 * nodes, binding) is lib/shared/topo.h. Not here yet: descriptors (the
 * public calls take an int).
 */

#include <stddef.h>
#include <stdint.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h> /* before windows.h, which would pull in the old winsock.h */
#include <ws2tcpip.h> /* inet_pton, inet_ntop */
#include <windows.h>
#include <afunix.h>   /* struct sockaddr_un */
#include <errno.h>
#include <io.h>       /* _get_osfhandle */
#include <process.h>  /* _beginthreadex */
#include <stdatomic.h>
/* TCP keep-alive per socket (Windows 10 1709 and later); mingw-w64 10's
 * headers lack the names, so their values (ws2ipdef.h) are given here. */
#ifndef TCP_KEEPIDLE
#define TCP_KEEPIDLE 3
#endif
#ifndef TCP_KEEPCNT
#define TCP_KEEPCNT 16
#endif
#ifndef TCP_KEEPINTVL
#define TCP_KEEPINTVL 17
#endif
typedef SRWLOCK tl__os_mutex;
#define TL__OS_MUTEX_INIT SRWLOCK_INIT
typedef CONDITION_VARIABLE tl__os_cond;
typedef DWORD tl__os_thread;
typedef HANDLE tl__os_thread_handle;
typedef struct {
	SRWLOCK mu;
	CONDITION_VARIABLE cv;
	unsigned n, waiting, gen;
} tl__os_barrier; /* wine 8 has no SYNCHRONIZATION_BARRIER */
#define TL__OS_THREAD_FN unsigned __stdcall
#else
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h> /* inet_pton, inet_ntop */
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/un.h>    /* struct sockaddr_un */
typedef pthread_mutex_t tl__os_mutex;
#define TL__OS_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER /* a static tl__os_mutex's initialiser */
typedef pthread_cond_t tl__os_cond;
typedef pthread_t tl__os_thread;
typedef pthread_t tl__os_thread_handle;
typedef pthread_barrier_t tl__os_barrier;
#define TL__OS_THREAD_FN void *
#endif

/* ---- clocks, in nanoseconds ---- */

#ifdef _WIN32
/* 100 ns units (FILETIME) to ns. */
static inline uint64_t tl__os_ft_ns(FILETIME ft)
{
	return ((uint64_t)ft.dwHighDateTime << 32 | ft.dwLowDateTime) * 100u;
}
#else
static inline uint64_t tl__os_ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}
#endif

/* The monotonic clock: what deadlines, timers and every "now" use. */
static inline uint64_t tl__os_mono_ns(void)
{
#ifdef _WIN32
	static LARGE_INTEGER freq; /* fixed at boot: a race writes the same value */
	LARGE_INTEGER c;
	if (!freq.QuadPart)
		QueryPerformanceFrequency(&freq);
	QueryPerformanceCounter(&c);
	uint64_t f = (uint64_t)freq.QuadPart, v = (uint64_t)c.QuadPart;
	return v / f * 1000000000ull + v % f * 1000000000ull / f;
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return tl__os_ts_ns(&ts);
#endif
}

/* The same clock at the last scheduler tick: a few ns to read, for marks
 * that only need to tell milliseconds apart. Its values are compared with
 * tl__os_mono_ns's (the stall report, shards/sched.c), so it must share
 * that clock's origin: Windows' tick count does not, and QPC itself is
 * cheap there, so Windows reads the fine clock. */
static inline uint64_t tl__os_coarse_ns(void)
{
#ifdef _WIN32
	return tl__os_mono_ns();
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return tl__os_ts_ns(&ts);
#endif
}

/* CPU time the calling thread has used, user and system; 0 when the OS
 * does not say. */
static inline uint64_t tl__os_thread_cpu_ns(void)
{
#ifdef _WIN32
	FILETIME created, exited, sys, user;
	if (!GetThreadTimes(GetCurrentThread(), &created, &exited, &sys, &user))
		return 0;
	return tl__os_ft_ns(sys) + tl__os_ft_ns(user);
#else
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return tl__os_ts_ns(&ts);
#endif
}

/* ---- a lock ---- */

static inline void tl__os_mutex_init(tl__os_mutex *m)
{
#ifdef _WIN32
	InitializeSRWLock(m);
#else
	pthread_mutex_init(m, NULL);
#endif
}

static inline void tl__os_mutex_lock(tl__os_mutex *m)
{
#ifdef _WIN32
	AcquireSRWLockExclusive(m);
#else
	pthread_mutex_lock(m);
#endif
}

static inline void tl__os_mutex_unlock(tl__os_mutex *m)
{
#ifdef _WIN32
	ReleaseSRWLockExclusive(m);
#else
	pthread_mutex_unlock(m);
#endif
}

static inline void tl__os_mutex_destroy(tl__os_mutex *m)
{
#ifdef _WIN32
	(void)m; /* an SRW lock holds nothing to free */
#else
	pthread_mutex_destroy(m);
#endif
}

/* A recursive lock: the thread holding it may take it again (the
 * simulation driver's world lock, whose entry points nest). */
#ifdef _WIN32
typedef struct tl__os_rmutex {
	SRWLOCK m;
	volatile LONG owner; /* the holder's thread id, 0 when free */
	unsigned depth;
} tl__os_rmutex;
#define TL__OS_RMUTEX_INIT {SRWLOCK_INIT, 0, 0}
#else
typedef pthread_mutex_t tl__os_rmutex;
#define TL__OS_RMUTEX_INIT PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP /* static only */
#endif

static inline void tl__os_rmutex_lock(tl__os_rmutex *m)
{
#ifdef _WIN32
	LONG me = (LONG)GetCurrentThreadId();
	if (InterlockedCompareExchange(&m->owner, 0, 0) == me) { /* only we write our id */
		m->depth++;
		return;
	}
	AcquireSRWLockExclusive(&m->m);
	InterlockedExchange(&m->owner, me);
	m->depth = 1;
#else
	pthread_mutex_lock(m);
#endif
}

static inline void tl__os_rmutex_unlock(tl__os_rmutex *m)
{
#ifdef _WIN32
	if (--m->depth)
		return;
	InterlockedExchange(&m->owner, 0);
	ReleaseSRWLockExclusive(&m->m);
#else
	pthread_mutex_unlock(m);
#endif
}

/* ---- a condition variable, used with a tl__os_mutex ---- */

/* Make c; its timed waits count on the monotonic clock (tl__os_mono_ns). */
static inline void tl__os_cond_init(tl__os_cond *c)
{
#ifdef _WIN32
	InitializeConditionVariable(c);
#else
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
#endif
}

static inline void tl__os_cond_destroy(tl__os_cond *c)
{
#ifdef _WIN32
	(void)c; /* a condition variable holds nothing to free */
#else
	pthread_cond_destroy(c);
#endif
}

/* Release m, sleep until c is signalled (or spuriously), take m again. */
static inline void tl__os_cond_wait(tl__os_cond *c, tl__os_mutex *m)
{
#ifdef _WIN32
	SleepConditionVariableSRW(c, m, INFINITE, 0);
#else
	pthread_cond_wait(c, m);
#endif
}

/* tl__os_cond_wait until deadline_ns on the monotonic clock: 0 when woken
 * (or spuriously), -ETIMEDOUT once the deadline has passed. m is held
 * again either way. Windows waits in milliseconds, rounded up. */
static inline int tl__os_cond_timedwait(tl__os_cond *c, tl__os_mutex *m, uint64_t deadline_ns)
{
#ifdef _WIN32
	uint64_t now = tl__os_mono_ns();
	if (now >= deadline_ns)
		return -ETIMEDOUT;
	uint64_t ms = (deadline_ns - now + 999999) / 1000000;
	if (SleepConditionVariableSRW(c, m, ms >= INFINITE ? INFINITE - 1 : (DWORD)ms, 0))
		return 0;
	return GetLastError() == ERROR_TIMEOUT ? -ETIMEDOUT : 0;
#else
	struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
			      (long)(deadline_ns % 1000000000ull)};
	return pthread_cond_timedwait(c, m, &ts) == ETIMEDOUT ? -ETIMEDOUT : 0;
#endif
}

/* Wake one waiter of c / every waiter of c. */
static inline void tl__os_cond_signal(tl__os_cond *c)
{
#ifdef _WIN32
	WakeConditionVariable(c);
#else
	pthread_cond_signal(c);
#endif
}

static inline void tl__os_cond_broadcast(tl__os_cond *c)
{
#ifdef _WIN32
	WakeAllConditionVariable(c);
#else
	pthread_cond_broadcast(c);
#endif
}

/* ---- threads ---- */

/*
 * A thread's function is written `static TL__OS_THREAD_FN fn(void *arg)`
 * and returns 0: a void * on POSIX, the unsigned __stdcall function
 * _beginthreadex calls on Windows. A tl__os_thread_handle is what joins it
 * (pthread_t; a HANDLE on Windows); the zero value is no thread.
 */

/* What a new thread starts with blocked (POSIX; Windows has no signals
 * to block): every signal, so the process's handlers run on its own
 * threads as they would without the runtime's; or only SIGINT and SIGTERM
 * (a shard: those reach the runtime's controlling thread, while a shard's
 * loop may take others through turnloop/signal.h). */
enum { TL__OS_BLOCK_ALL = 0, TL__OS_BLOCK_STOP = 1 };

/* Start fn(arg) on a new thread, *t set, with the signals block says
 * blocked: 0, or a negative errno. */
static inline int tl__os_thread_start_ex(tl__os_thread_handle *t, TL__OS_THREAD_FN (*fn)(void *),
					 void *arg, int block)
{
#ifdef _WIN32
	(void)block;
	uintptr_t h = _beginthreadex(NULL, 0, fn, arg, 0, NULL);
	if (!h)
		return errno ? -errno : -EAGAIN;
	*t = (HANDLE)h;
	return 0;
#else
	sigset_t mask, old;
	if (block == TL__OS_BLOCK_STOP) {
		sigemptyset(&mask);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &mask, &old);
	} else {
		sigfillset(&mask);
		pthread_sigmask(SIG_SETMASK, &mask, &old);
	}
	int r = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
#endif
}

/* tl__os_thread_start_ex with every signal blocked. */
static inline int tl__os_thread_start(tl__os_thread_handle *t, TL__OS_THREAD_FN (*fn)(void *),
				      void *arg)
{
	return tl__os_thread_start_ex(t, fn, arg, TL__OS_BLOCK_ALL);
}

/* Wait for thread t to return, and free what it held (a Windows handle). */
static inline void tl__os_thread_join(tl__os_thread_handle t)
{
#ifdef _WIN32
	WaitForSingleObject(t, INFINITE);
	CloseHandle(t);
#else
	pthread_join(t, NULL);
#endif
}

/* ---- a barrier: n threads wait until all n are there ---- */

/* 0, or a negative errno. */
static inline int tl__os_barrier_init(tl__os_barrier *b, unsigned n)
{
#ifdef _WIN32
	InitializeSRWLock(&b->mu);
	InitializeConditionVariable(&b->cv);
	b->n = n;
	b->waiting = b->gen = 0;
	return n ? 0 : -EINVAL;
#else
	return -pthread_barrier_init(b, NULL, n);
#endif
}

static inline void tl__os_barrier_wait(tl__os_barrier *b)
{
#ifdef _WIN32
	AcquireSRWLockExclusive(&b->mu);
	unsigned gen = b->gen;
	if (++b->waiting == b->n) {
		b->waiting = 0;
		b->gen++;
		WakeAllConditionVariable(&b->cv);
	} else {
		while (gen == b->gen)
			SleepConditionVariableSRW(&b->cv, &b->mu, INFINITE, 0);
	}
	ReleaseSRWLockExclusive(&b->mu);
#else
	pthread_barrier_wait(b);
#endif
}

static inline void tl__os_barrier_destroy(tl__os_barrier *b)
{
#ifdef _WIN32
	(void)b; /* SRW locks and condition variables hold nothing */
#else
	pthread_barrier_destroy(b);
#endif
}

#ifdef _WIN32
/* Windows 10 1607 and later; mingw-w64 10's headers lack them. */
WINBASEAPI HRESULT WINAPI SetThreadDescription(HANDLE thread, PCWSTR description);
WINBASEAPI HRESULT WINAPI GetThreadDescription(HANDLE thread, PWSTR *description);
#endif

/* Name the calling thread, as top -H, gdb and Windows' debuggers show it:
 * Linux keeps 15 bytes, so name must be at most that; ASCII. */
static inline void tl__os_thread_name(const char *name)
{
#ifdef _WIN32
	WCHAR w[64];
	size_t i = 0;
	for (; name[i] && i < 63; i++)
		w[i] = (WCHAR)(unsigned char)name[i];
	w[i] = 0;
	(void)SetThreadDescription(GetCurrentThread(), w);
#else
	pthread_setname_np(pthread_self(), name);
#endif
}

/* Give the CPU to another ready thread, if there is one. */
static inline void tl__os_yield(void)
{
#ifdef _WIN32
	SwitchToThread();
#else
	sched_yield();
#endif
}

/* Sleep for at least us microseconds (Windows: whole milliseconds, rounded
 * up). */
static inline void tl__os_sleep_us(uint32_t us)
{
#ifdef _WIN32
	Sleep((us + 999) / 1000);
#else
	usleep(us);
#endif
}

#ifndef _WIN32
/* Sleep about ns nanoseconds on the monotonic clock, as nobody's waiter (the
 * loop's nap, lib/turn.c). The kernel adds the thread's timer slack (50 us
 * by default on Linux). Not on Windows, whose sleeps are whole milliseconds:
 * loops do not nap there. */
static inline void tl__os_nap_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}
#endif

/* ---- sockets ---- */

/* Close socket fd, one the loop took from tl_detach or was given to adopt
 * (Windows: a SOCKET as the public calls carry it, in an int). */
static inline void tl__os_sock_close(int fd)
{
#ifdef _WIN32
	closesocket((SOCKET)(intptr_t)fd);
#else
	close(fd);
#endif
}

/* ---- waiting on an address: the pool's futex ---- */

/* Sleep while *addr == v: returns at once if it differs, after a
 * tl__os_addr_wake on addr, or spuriously; callers look again. Linux: the
 * futex (private to the process); Windows: WaitOnAddress. */
static inline void tl__os_addr_wait(_Atomic uint32_t *addr, uint32_t v)
{
#ifdef _WIN32
	WaitOnAddress((volatile VOID *)addr, &v, sizeof v, INFINITE);
#else
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
#endif
}

/* Wake one sleeper on addr, or all of them (all != 0). Change *addr first:
 * a sleeper that has not slept yet then sees the new value. */
static inline void tl__os_addr_wake(_Atomic uint32_t *addr, int all)
{
#ifdef _WIN32
	if (all)
		WakeByAddressAll((PVOID)addr);
	else
		WakeByAddressSingle((PVOID)addr);
#else
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, all ? INT_MAX : 1, NULL, NULL, 0);
#endif
}

/* ---- thread identity ---- */

static inline tl__os_thread tl__os_thread_self(void)
{
#ifdef _WIN32
	return GetCurrentThreadId();
#else
	return pthread_self();
#endif
}

/* The OS's number for the calling thread: what ps, top and tlshard show. */
static inline long tl__os_tid(void)
{
#ifdef _WIN32
	return (long)GetCurrentThreadId();
#else
	return (long)gettid();
#endif
}

/* 1 when the calling thread is t. */
static inline int tl__os_thread_is(tl__os_thread t)
{
#ifdef _WIN32
	return t == GetCurrentThreadId();
#else
	return pthread_equal(t, pthread_self()) != 0;
#endif
}

/* The CPU the calling thread runs on, numbered as the OS numbers CPUs
 * (Windows: 64 × its processor group + its number in the group, the
 * numbering lib/shared/topo.h's CPU sets use there); -1 when the OS does
 * not say. It may have moved by the time the caller looks. */
static inline int tl__os_cpu(void)
{
#ifdef _WIN32
	PROCESSOR_NUMBER pn;
	GetCurrentProcessorNumberEx(&pn);
	return (int)pn.Group * 64 + (int)pn.Number;
#else
	return sched_getcpu();
#endif
}

/* ---- memory ---- */

/* size bytes aligned to align (a power of two; size a multiple of it), from
 * the process's allocator; NULL when it has none. Free it with
 * tl__os_aligned_free, never free(): Windows keeps such blocks apart. */
static inline void *tl__os_aligned_alloc(size_t align, size_t size)
{
#ifdef _WIN32
	return _aligned_malloc(size, align);
#else
	return aligned_alloc(align, size);
#endif
}

static inline void tl__os_aligned_free(void *p)
{
#ifdef _WIN32
	_aligned_free(p);
#else
	free(p);
#endif
}


/* n bytes of zeroed, private, read-write memory that the OS backs only as
 * it is touched; NULL when it refuses. */
static inline void *tl__os_map(size_t n)
{
#ifdef _WIN32
	return VirtualAlloc(NULL, n, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
#else
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
#endif
}

/* Give back a mapping of n bytes that tl__os_map made. */
static inline void tl__os_unmap(void *p, size_t n)
{
#ifdef _WIN32
	(void)n;
	VirtualFree(p, 0, MEM_RELEASE);
#else
	munmap(p, n);
#endif
}

/* ---- errors ---- */

#ifdef _WIN32
/* A Winsock (WSAE*) or Win32 (ERROR_*) code as the contract's negative
 * errno: one table for every Windows caller (lib/os_win.c); -EIO for a
 * code it does not list. */
int tl__os_win_error(unsigned long code);
#endif

/* ---- files ---- */

#ifdef _WIN32
/* A positioned read (write != 0: write) of descriptor fd's handle. On a
 * handle opened for synchronous I/O (the C runtime's are) Windows moves
 * the position to the end of what it transferred, where pread(2) leaves it
 * alone: it is put back, which is not atomic against another thread using
 * the same descriptor's position meanwhile. */
static inline long tl__os_win_prw(int fd, void *buf, size_t n, uint64_t off, int write)
{
	HANDLE h = (HANDLE)_get_osfhandle(fd);
	OVERLAPPED ov = {0};
	LARGE_INTEGER zero = {0}, pos;
	DWORD got = 0, want = n > 0x7fffffff ? 0x7fffffff : (DWORD)n;
	if (h == INVALID_HANDLE_VALUE) {
		errno = EBADF;
		return -1;
	}
	int seekable = SetFilePointerEx(h, zero, &pos, FILE_CURRENT) != 0;
	ov.Offset = (DWORD)off;
	ov.OffsetHigh = (DWORD)(off >> 32);
	BOOL ok = write ? WriteFile(h, buf, want, &got, &ov) : ReadFile(h, buf, want, &got, &ov);
	DWORD e = ok ? 0 : GetLastError();
	if (seekable)
		SetFilePointerEx(h, pos, NULL, FILE_BEGIN);
	if (!ok) {
		if (!write && e == ERROR_HANDLE_EOF)
			return 0;
		errno = -tl__os_win_error(e);
		return -1;
	}
	return (long)got;
}
#endif

/* pread(2): up to n bytes of file descriptor fd from offset off, leaving
 * its position alone: how many (0 at the end), or -1 with errno set. */
static inline long tl__os_pread(int fd, void *buf, size_t n, uint64_t off)
{
#ifdef _WIN32
	return tl__os_win_prw(fd, buf, n, off, 0);
#else
	return (long)pread(fd, buf, n, (off_t)off);
#endif
}

/* pwrite(2): up to n bytes of buf to descriptor fd at offset off, leaving
 * its position alone: how many, or -1 with errno set. */
static inline long tl__os_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
#ifdef _WIN32
	return tl__os_win_prw(fd, (void *)(uintptr_t)buf, n, off, 1);
#else
	return (long)pwrite(fd, buf, n, (off_t)off);
#endif
}

/* ---- the notifier: many threads wake one waiting loop ---- */

/*
 * A loop's poster signals it when another thread posts to it while it is
 * parked (lib/poster.c); the loop's driver waits for that signal beside its
 * own events. Signals coalesce: any number before a drain is one wake-up.
 * POSIX: an eventfd, which each driver watches with its own mechanism
 * (epoll, a multishot poll on io_uring, ppoll) through tl__os_notifier_fd.
 * Windows: an auto-reset event, until a driver that waits on a completion
 * port asks the notifier for one (tl__os_notifier_port); from then on a
 * signal is a packet posted to that port, the one wait an IOCP loop makes.
 * The notifier owns the port, so a late signal from another thread never
 * reaches a port the driver has closed.
 */
typedef struct tl__os_notifier {
#ifdef _WIN32
	HANDLE event;
	HANDLE port;    /* made once, before any thread can signal; NULL: the event */
	ULONG_PTR key;  /* the packets' completion key */
#else
	int fd;
#endif
} tl__os_notifier;

/* Make n: 0, or a negative errno. */
static inline int tl__os_notifier_open(tl__os_notifier *n)
{
#ifdef _WIN32
	n->port = NULL;
	n->key = 0;
	n->event = CreateEventW(NULL, FALSE, FALSE, NULL);
	return n->event ? 0 : -ENOMEM;
#else
	n->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return n->fd < 0 ? -errno : 0;
#endif
}

static inline void tl__os_notifier_close(tl__os_notifier *n)
{
#ifdef _WIN32
	CloseHandle(n->event);
	if (n->port)
		CloseHandle(n->port);
#else
	close(n->fd);
#endif
}

/* Wake the waiter, from any thread. A signal already pending absorbs this
 * one (the eventfd's counter is non-zero: EAGAIN, still readable). */
static inline void tl__os_notifier_signal(tl__os_notifier *n)
{
#ifdef _WIN32
	if (n->port)
		PostQueuedCompletionStatus(n->port, 0, n->key, NULL);
	else
		SetEvent(n->event);
#else
	uint64_t one = 1;
	ssize_t r = write(n->fd, &one, sizeof one);
	(void)r;
#endif
}

/* Forget a pending signal, on the waiter's thread: 1 if there was one.
 * (A bound Windows notifier's packets are consumed by the port's wait.) */
static inline int tl__os_notifier_drain(tl__os_notifier *n)
{
#ifdef _WIN32
	return !n->port && WaitForSingleObject(n->event, 0) == WAIT_OBJECT_0;
#else
	uint64_t v;
	return read(n->fd, &v, sizeof v) == (ssize_t)sizeof v;
#endif
}

/* Sleep until a signal or timeout_ns (negative: no limit), for a driver
 * with no wait of its own: 1 signalled (and drained), 0 timed out, or a
 * negative errno. Windows waits in milliseconds, rounded up. */
static inline int tl__os_notifier_wait(tl__os_notifier *n, int64_t timeout_ns)
{
#ifdef _WIN32
	DWORD ms = timeout_ns < 0 ? INFINITE
		   : timeout_ns >= (int64_t)0xfffffffe * 1000000 ? 0xfffffffe
		   : (DWORD)((timeout_ns + 999999) / 1000000);
	DWORD r = WaitForSingleObject(n->event, ms);
	return r == WAIT_OBJECT_0 ? 1 : r == WAIT_TIMEOUT ? 0 : -EIO;
#else
	struct pollfd pf = {.fd = n->fd, .events = POLLIN};
	struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
	int r = ppoll(&pf, 1, timeout_ns < 0 ? NULL : &ts, NULL);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	return r > 0 ? tl__os_notifier_drain(n), 1 : 0;
#endif
}

#ifdef _WIN32
/* A completion port of the notifier's own (it closes it), on which every
 * signal from now on is a packet with key `key` and no OVERLAPPED: for a
 * driver that waits on a port. Call before the notifier is shared with
 * other threads. NULL when Windows refuses one. */
static inline HANDLE tl__os_notifier_port(tl__os_notifier *n, ULONG_PTR key)
{
	if (!n->port) {
		n->port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
		n->key = key;
	}
	return n->port;
}
#else
/* The descriptor a POSIX driver watches for readability. */
static inline int tl__os_notifier_fd(const tl__os_notifier *n)
{
	return n->fd;
}
#endif

#endif
