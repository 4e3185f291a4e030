/* tests/tlp_alloc_shim.c: an LD_PRELOAD allocator shim for tlproxy's steady-state test: counts the allocations made by shard threads (named tl-shard-N) and writes the count to a file when asked. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*
 * TLP_ALLOC_DIR names a directory. While the shim runs, a thread of its own
 * looks every 20 ms for DIR/ask; when it is there, the shim writes the
 * number of allocator calls (malloc, calloc, realloc, memalign and friends)
 * made so far by threads whose name starts with "tl-shard" to DIR/count
 * (written to DIR/count.tmp, then renamed) and removes DIR/ask. Threads are
 * told apart by their name, read at every call: slow, and only for tests.
 */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_memalign)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static _Atomic unsigned long calls;
static __thread int in_shim;

/* calloc during dlsym: a small static area. */
static char early[4096];
static size_t early_used;

static void count(void)
{
	char name[17] = "";

	if (in_shim)
		return;
	in_shim = 1;
	if (prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && !strncmp(name, "tl-shard", 8))
		atomic_fetch_add(&calls, 1);
	in_shim = 0;
}

static void resolve(void)
{
	if (real_malloc)
		return;
	in_shim = 1;
	real_calloc = dlsym(RTLD_NEXT, "calloc");
	real_malloc = dlsym(RTLD_NEXT, "malloc");
	real_realloc = dlsym(RTLD_NEXT, "realloc");
	real_memalign = dlsym(RTLD_NEXT, "memalign");
	real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
	real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
	in_shim = 0;
}

void *malloc(size_t n)
{
	resolve();
	count();
	return real_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	if (!real_calloc) {
		/* dlsym itself may calloc before the real one is known. */
		size_t n = (a * b + 15) & ~(size_t)15;
		void *p;

		if (in_shim && early_used + n <= sizeof early) {
			p = early + early_used;
			early_used += n;
			return p;
		}
		resolve();
	}
	count();
	return real_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	resolve();
	count();
	return real_realloc(p, n);
}

void *memalign(size_t a, size_t n);
void *memalign(size_t a, size_t n)
{
	resolve();
	count();
	return real_memalign(a, n);
}

int posix_memalign(void **p, size_t a, size_t n)
{
	resolve();
	count();
	return real_posix_memalign(p, a, n);
}

void *aligned_alloc(size_t a, size_t n)
{
	resolve();
	count();
	return real_aligned_alloc(a, n);
}

void free(void *p)
{
	static void (*real_free)(void *);

	if ((char *)p >= early && (char *)p < early + sizeof early)
		return;
	if (!real_free) {
		in_shim = 1;
		real_free = dlsym(RTLD_NEXT, "free");
		in_shim = 0;
	}
	real_free(p);
}

static void *watcher(void *arg)
{
	const char *dir = arg;
	char ask[4096], out[4096], tmp[4200];
	struct timespec nap = {0, 20000000};
	sigset_t all;

	/* Signals are the program's: this thread must never take one. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	snprintf(ask, sizeof ask, "%s/ask", dir);
	snprintf(out, sizeof out, "%s/count", dir);
	snprintf(tmp, sizeof tmp, "%s/count.tmp", dir);
	for (;;) {
		struct stat st;

		if (stat(ask, &st) == 0) {
			FILE *f = fopen(tmp, "w");

			if (f) {
				fprintf(f, "%lu\n", atomic_load(&calls));
				fclose(f);
				rename(tmp, out);
			}
			unlink(ask);
		}
		nanosleep(&nap, NULL);
	}
	return NULL;
}

__attribute__((constructor)) static void start(void)
{
	const char *dir = getenv("TLP_ALLOC_DIR");
	pthread_t t;

	resolve();
	if (dir && pthread_create(&t, NULL, watcher, (void *)dir) == 0)
		pthread_detach(t);
}
