/* drivers/select.c: choose the process's driver (forced, io_uring, or the epoll fallback) and say why, once. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* How a choice was made (tl__driver_pick's *forced). */
enum { PICK_DEFAULT = 0, PICK_CONFIG = 1, PICK_ENV = 2 };

int tl__driver_pick(const tl_config *cfg, const struct tl_driver **out, int *forced)
{
	int kind = cfg->driver;
	const char *env = getenv("TL_DRIVER");
	*forced = kind == TL_DRIVER_DEFAULT ? PICK_DEFAULT : PICK_CONFIG;
	if (kind == TL_DRIVER_DEFAULT && env && *env) {
		if (!strcmp(env, "epoll"))
			kind = TL_DRIVER_EPOLL;
		else if (!strcmp(env, "uring") || !strcmp(env, "io_uring"))
			kind = TL_DRIVER_URING;
		else if (!strcmp(env, "sim"))
			kind = TL_DRIVER_SIM;
		else {
			fprintf(stderr, "turnloop: TL_DRIVER=%s is not a driver (epoll, uring, sim)\n", env);
			return -EINVAL;
		}
		*forced = PICK_ENV;
	}
	switch (kind) {
	case TL_DRIVER_EPOLL:
		*out = &tl__driver_epoll;
		return 0;
	case TL_DRIVER_URING:
		*out = &tl__driver_uring;
		return tl__driver_uring.init ? 0 : -ENOTSUP;
	case TL_DRIVER_SIM:
		*out = &tl__driver_sim;
		return tl__driver_sim.init ? 0 : -ENOTSUP;
	default:
		*out = tl__driver_uring.init ? &tl__driver_uring : &tl__driver_epoll;
		return 0;
	}
}

/* A hint on why io_uring setup failed with err, "" when there is none. */
static void uring_hint(int err, char *buf, size_t len)
{
	int disabled = -1;
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "re");
	if (f) {
		if (fscanf(f, "%d", &disabled) != 1)
			disabled = -1;
		fclose(f);
	}
	if (disabled > 0)
		snprintf(buf, len, "; kernel.io_uring_disabled=%d%s", disabled,
			 disabled == 1 ? " and not in kernel.io_uring_group" : "");
	else if (err == -EPERM)
		snprintf(buf, len, "; refused by seccomp or a security policy");
	else if (err == -ENOSYS)
		snprintf(buf, len, "; kernel built without io_uring");
	else if (err == -ENOMEM)
		snprintf(buf, len, "; out of memory or RLIMIT_MEMLOCK too low");
	else if (err == -ENOTSUP)
		snprintf(buf, len, "; needs Linux 6.0 or later");
	else
		buf[0] = 0;
}

/* Print msg unless a message of this kind was printed before: a process
 * normally runs every loop on one driver, so this is one line per process. */
static void say_once(unsigned kind, const char *msg)
{
	static atomic_uint said;
	unsigned bit = 1u << kind;
	if (atomic_fetch_or(&said, bit) & bit)
		return;
	fprintf(stderr, "turnloop: %s\n", msg);
}

void tl__driver_note(const struct tl_driver *dv, int forced, int uring_err, int r)
{
	static const char *const by[] = {"default", "the program's configuration", "TL_DRIVER"};
	char msg[256], hint[96];
	unsigned kind;
	int err = r < 0 ? r : uring_err;
	hint[0] = 0;
	if (err && (dv == &tl__driver_uring || uring_err))
		uring_hint(err, hint, sizeof hint);
	if (r < 0 && forced) {
		/* The choice was explicit: no fallback, a clear error. */
		snprintf(msg, sizeof msg, "driver %s forced by %s is unavailable: %s%s", dv->name,
			 by[forced], strerror(-r), hint);
		kind = 0;
	} else if (r < 0) {
		snprintf(msg, sizeof msg, "no driver could start: %s %s%s", dv->name, strerror(-r),
			 hint);
		kind = 1;
	} else if (forced) {
		snprintf(msg, sizeof msg, "driver %s (forced by %s)", dv->name, by[forced]);
		kind = 2 + (dv == &tl__driver_epoll) + 2 * (dv == &tl__driver_sim);
	} else if (uring_err) {
		snprintf(msg, sizeof msg, "driver %s (io_uring unavailable: %s%s)", dv->name,
			 strerror(-uring_err), hint);
		kind = 5;
	} else {
		snprintf(msg, sizeof msg, "driver %s (default%s)", dv->name,
			 dv == &tl__driver_uring ? "" : ", io_uring not built in");
		kind = 6;
	}
	say_once(kind, msg);
}
