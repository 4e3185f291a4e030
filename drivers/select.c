/* drivers/select.c: choose the process's driver: forced, io_uring, or the epoll fallback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

int tl__driver_pick(const tl_config *cfg, const struct tl_driver **out, int *forced)
{
	int kind = cfg->driver;
	const char *env = getenv("TL_DRIVER");
	*forced = 0;
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
	}
	switch (kind) {
	case TL_DRIVER_EPOLL:
		*forced = 1;
		*out = &tl__driver_epoll;
		return 0;
	case TL_DRIVER_URING:
		*forced = 1;
		*out = &tl__driver_uring;
		return tl__driver_uring.init ? 0 : -ENOTSUP;
	case TL_DRIVER_SIM:
		*forced = 1;
		*out = &tl__driver_sim;
		return tl__driver_sim.init ? 0 : -ENOTSUP;
	default:
		*out = tl__driver_uring.init ? &tl__driver_uring : &tl__driver_epoll;
		return 0;
	}
}
