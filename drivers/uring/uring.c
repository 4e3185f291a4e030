/* drivers/uring/uring.c: the io_uring driver's table of operations for the core, and its diagnostic hooks (drivers/uring.h). */
#include <stdio.h>
#include <string.h>
#include "uring_int.h"

struct tl_uring_debug tl__ur_debug;

void tl__uring_debug(const struct tl_uring_debug *dbg)
{
	if (dbg)
		tl__ur_debug = *dbg;
	else
		memset(&tl__ur_debug, 0, sizeof tl__ur_debug);
}

uint32_t tl__uring_flags(const tl_loop *loop, uint32_t *dropped)
{
	const struct tl_drv *d = tl__drv_self(loop, &tl__driver_uring);
	if (!d)
		return 0;
	if (dropped)
		*dropped = d->dropped;
	return d->flags;
}

int tl__uring_stats(const tl_loop *loop, struct tl_uring_stats *out)
{
	const struct tl_drv *d = tl__drv_self(loop, &tl__driver_uring);
	if (!d)
		return -ENOTSUP;
	*out = d->st;
	return 0;
}

static int ur_dgram_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer)
{
	(void)d;
	return tl__dg_connect(h->fd, peer);
}

static uint32_t ur_probed_caps(struct tl_drv *d)
{
	(void)d;
	return tl__dg_probe();
}

/* The usual reasons io_uring cannot be set up, named for the one who reads
 * why the process fell back to epoll (or refused a loop that named uring). */
void tl__ur_init_hint(int err, char *buf, size_t len)
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

const struct tl_driver tl__driver_uring = {
	.name = "uring",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX | TL_CAP_EMBED | TL_CAP_OS | TL_CAP_NET | TL_CAP_DETACH |
		TL_CAP_POLL | TL_CAP_SPLICE |
		TL_DRV_CAP_KBUF,
	.init = tl__ur_init,
	.destroy = tl__ur_destroy,
	.now = tl__ur_now,
	.open = tl__ur_open,
	.attach = tl__ur_attach,
	.release = tl__ur_release,
	.adopt = tl__ur_adopt,
	.detach = tl__ur_detach,
	.local_addr = tl__ur_local,
	.peer_addr = tl__ur_peer,
	.sockopt = tl__ur_sockopt,
	.dgram_connect = ur_dgram_connect,
	.probed_caps = ur_probed_caps,
	.submit = tl__ur_submit,
	.cancel = tl__ur_cancel,
	.poll = tl__ur_poll,
	.flush = tl__ur_flush,
	.lease_returned = tl__ur_lease_returned,
	.lease_take = tl__ur_lease_take,
	.pause = tl__ur_pause,
	.embed_fd = tl__ur_embed_fd,
	.embed_deadline = tl__ur_embed_deadline,
	.init_hint = tl__ur_init_hint,
	.fs_route = tl__ur_fs_route, /* opdef.c */
	.fs_submit = tl__ur_fs_submit,
};
