/* lib/select.c: the process's driver: chosen once (forced, io_uring, or the epoll fallback), held for every later loop, and why. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"

/*
 * Contract 10: every loop of a process runs on the same driver kind. The
 * first loop that does not name a driver in its config decides: TL_DRIVER
 * if set, else io_uring, else (io_uring refused at setup: seccomp, sysctl,
 * memlock, an old kernel) epoll. Later such loops get that kind or fail with
 * the driver's error; they never switch, because a process whose shards run
 * on different drivers behaves differently shard by shard (near the
 * RLIMIT_MEMLOCK limit, one shard would come up on io_uring and the next on
 * epoll). A loop that names its driver in cfg.driver (tests) is exempt and
 * changes nothing here. The library prints nothing: tl_driver_info_get()
 * tells a program what was chosen and why, for it to print if it wants.
 */

static struct {
	tl__os_mutex mu;
	const struct tl_driver *dv; /* the process's driver; NULL until decided */
	tl_driver_info info;
} proc = {.mu = TL__OS_MUTEX_INIT};

static const struct tl_driver *by_kind(int kind)
{
	switch (kind) {
#if TL_HAVE_LINUX_DRIVERS
	case TL_DRIVER_EPOLL:
		return &tl__driver_epoll;
	case TL_DRIVER_URING:
		return &tl__driver_uring;
#endif
	case TL_DRIVER_SIM:
		return &tl__driver_sim;
#if TL_HAVE_DPDK
	case TL_DRIVER_DPDK:
		return &tl__driver_dpdk;
#endif
#ifdef _WIN32
	case TL_DRIVER_IOCP:
		return &tl__driver_iocp;
#endif
	default:
		return NULL;
	}
}

static int kind_of(const struct tl_driver *dv)
{
#if TL_HAVE_DPDK
	if (dv == &tl__driver_dpdk)
		return TL_DRIVER_DPDK;
#endif
#ifdef _WIN32
	if (dv == &tl__driver_iocp)
		return TL_DRIVER_IOCP;
#endif
#if TL_HAVE_LINUX_DRIVERS
	if (dv == &tl__driver_uring)
		return TL_DRIVER_URING;
	if (dv == &tl__driver_epoll)
		return TL_DRIVER_EPOLL;
#endif
	(void)dv;
	return TL_DRIVER_SIM;
}

/* The kind TL_DRIVER names: TL_DRIVER_DEFAULT when unset or empty, -EINVAL
 * when it names no driver. */
static int env_kind(void)
{
	const char *env = getenv("TL_DRIVER");
	if (!env || !*env)
		return TL_DRIVER_DEFAULT;
	if (!strcmp(env, "epoll"))
		return TL_DRIVER_EPOLL;
	if (!strcmp(env, "uring") || !strcmp(env, "io_uring"))
		return TL_DRIVER_URING;
	if (!strcmp(env, "sim"))
		return TL_DRIVER_SIM;
	if (!strcmp(env, "dpdk"))
		return TL_DRIVER_DPDK;
	if (!strcmp(env, "iocp"))
		return TL_DRIVER_IOCP;
	return -EINVAL;
}

static int start(const struct tl_driver *dv, tl_loop *l, const tl_config *cfg, tl__os_notifier *wake,
		 struct tl_drv **d)
{
	if (!dv || !dv->init)
		return -ENOTSUP; /* not built in: DPDK without -Ddpdk=enabled, another OS's driver */
	return dv->init(l, cfg, wake, d);
}

/* The words for error r in a reason: the C library's (Windows' C runtime
 * names none of the network codes: tl_strerror does). */
static const char *err_text(int r)
{
#ifdef _WIN32
	return tl_strerror(r);
#else
	return strerror(-r);
#endif
}

/* Note (under proc.mu) why a loop could not start its driver (dv NULL:
 * kind's, which this build left out). */
static void failed(const char *fmt, const struct tl_driver *dv, int kind, const char *by, int r)
{
	char hint[96] = "";
	if (!dv) {
		static const char *const name[] = {"default", "epoll", "uring", "sim", "dpdk", "iocp"};
		snprintf(proc.info.last_error, sizeof proc.info.last_error, fmt,
			 kind >= 0 && kind <= TL_DRIVER_IOCP ? name[kind] : "?", by, err_text(r),
			 kind == TL_DRIVER_DPDK   ? "; this build has no DPDK driver (-Ddpdk=enabled)"
			 : kind == TL_DRIVER_IOCP ? "; IOCP is Windows' driver (docs/WINDOWS.md)"
						  : "; this build has no Linux drivers (a Windows build: docs/WINDOWS.md)");
		return;
	}
	if (dv->init_hint)
		dv->init_hint(r, hint, sizeof hint);
	snprintf(proc.info.last_error, sizeof proc.info.last_error, fmt, dv->name, by,
		 err_text(r), hint);
}

/* A loop whose config names its driver: exempt from the process's choice. */
static int start_named(tl_loop *l, const tl_config *cfg, tl__os_notifier *wake,
		       const struct tl_driver **dv, struct tl_drv **d)
{
	*dv = by_kind(cfg->driver);
	int r = start(*dv, l, cfg, wake, d);
	if (r < 0) {
		tl__os_mutex_lock(&proc.mu);
		failed("driver %s%s is unavailable: %s%s", *dv, cfg->driver, " (named by the loop's config)", r);
		tl__os_mutex_unlock(&proc.mu);
		/* A named io_uring that cannot start is "unavailable". */
		if (cfg->driver == TL_DRIVER_URING)
			r = -ENOTSUP;
	}
	return r;
}

/* The first default loop: decide the process's driver (under proc.mu). */
static int decide(tl_loop *l, const tl_config *cfg, tl__os_notifier *wake, const struct tl_driver **dv,
		  struct tl_drv **d)
{
	int kind = env_kind();
	if (kind < 0) {
		snprintf(proc.info.last_error, sizeof proc.info.last_error,
			 "TL_DRIVER=%.60s is not a driver (epoll, uring, sim, dpdk, iocp)", getenv("TL_DRIVER"));
		return -EINVAL;
	}
	int r;
	if (kind != TL_DRIVER_DEFAULT) {
		*dv = by_kind(kind);
		r = start(*dv, l, cfg, wake, d);
		if (r < 0) {
			failed("driver %s%s is unavailable: %s%s", *dv, kind, " (forced by TL_DRIVER)", r);
			return kind == TL_DRIVER_URING ? -ENOTSUP : r;
		}
		proc.info.how = TL_HOW_ENV;
		snprintf(proc.info.reason, sizeof proc.info.reason, "%s (forced by TL_DRIVER)",
			 (*dv)->name);
	} else {
#ifdef _WIN32
		/* Windows: completion ports, its one driver of its own. */
		*dv = &tl__driver_iocp;
		r = start(*dv, l, cfg, wake, d);
		if (r < 0) {
			failed("driver %s%s is unavailable: %s%s", *dv, TL_DRIVER_IOCP, " (the default)", r);
			return r;
		}
		proc.info.how = TL_HOW_DEFAULT;
		snprintf(proc.info.reason, sizeof proc.info.reason, "iocp (default)");
#else
		char hint[96] = "";
		*dv = &tl__driver_uring;
		r = start(*dv, l, cfg, wake, d);
		if (r < 0) {
			int uerr = r;
			*dv = &tl__driver_epoll;
			r = start(*dv, l, cfg, wake, d);
			if (r < 0) {
				failed("no driver could start: %s%s %s%s", *dv, TL_DRIVER_EPOLL, "", r);
				return r;
			}
			if (tl__driver_uring.init_hint)
				tl__driver_uring.init_hint(uerr, hint, sizeof hint);
			proc.info.how = TL_HOW_FALLBACK;
			proc.info.uring_error = uerr;
			snprintf(proc.info.reason, sizeof proc.info.reason,
				 "epoll (io_uring unavailable: %s%s)", strerror(-uerr), hint);
		} else {
			proc.info.how = TL_HOW_DEFAULT;
			snprintf(proc.info.reason, sizeof proc.info.reason, "uring (default)");
		}
#endif
	}
	proc.dv = *dv;
	proc.info.kind = kind_of(*dv);
	return 0;
}

int tl__driver_start(tl_loop *l, const tl_config *cfg, tl__os_notifier *wake, const struct tl_driver **dv,
		     struct tl_drv **d)
{
	if (cfg->driver != TL_DRIVER_DEFAULT)
		return start_named(l, cfg, wake, dv, d);
	tl__os_mutex_lock(&proc.mu);
	int r;
	if (!proc.dv) {
		r = decide(l, cfg, wake, dv, d);
	} else {
		*dv = proc.dv;
		r = start(*dv, l, cfg, wake, d);
		if (r < 0)
			failed("driver %s%s could not start for a new loop: %s%s", *dv, proc.info.kind,
			       " (the process's driver)", r);
	}
	tl__os_mutex_unlock(&proc.mu);
	return r;
}

void tl_driver_info_get(tl_driver_info *out)
{
	if (!out)
		return;
	tl__os_mutex_lock(&proc.mu);
	*out = proc.info;
	tl__os_mutex_unlock(&proc.mu);
}
