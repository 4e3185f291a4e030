/* tools/tlproxy/dpdk.h: tlproxy on the DPDK driver (--dpdk): what it serves there (UDP listeners), what it refuses at the start and at a reload and why, and the driver settings it fills in; the one place of that policy. */
#ifndef TLP_DPDK_H
#define TLP_DPDK_H

/* Calls: main -> dpdk -> config. */
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/*
 * The DPDK driver serves datagrams only (docs/DPDK.md): no TCP, no
 * Unix-domain sockets, no descriptors. On it tlproxy runs its UDP
 * listeners, their sessions (a handle of the port per session, on an
 * ephemeral UDP port, "connected" to its server) and UDP health checks.
 * What needs a kernel socket on a loop is refused at the start with one
 * line, never dropped silently: TCP (and so TLS and splice) listeners, TCP
 * health checks, the admin socket, a live takeover either way and sockets
 * from systemd, Unix-domain servers. The start's check that a listening
 * address is free (a kernel socket bound to it) becomes a check that the
 * address is one of the port's (TL_DPDK_ADDR): the port belongs to this
 * process, so nobody else can hold its UDP ports.
 */

/* Take --dpdk out of argv (argc updated; anywhere, as the takeover's
 * options are), so that the rest parses as before. */
void tlp_dpdk_args(int *argc, char **argv);
/* The usage line of --dpdk (static). */
const char *tlp_dpdk_usage(void);
/* 1 when the process runs on the DPDK driver: --dpdk given, or
 * TL_DRIVER=dpdk in the environment (the way tlecho is put there). */
int tlp_dpdk_on(void);

/* What the process was asked for outside the configuration. */
struct tlp_dpdk_proc {
	int takeover;   /* --takeover */
	int handover;   /* --handover-socket */
	uint32_t inherited; /* sockets handed over by systemd (LISTEN_FDS) */
};

/* The configuration (a file's, a reload's, --check's) against the DPDK
 * driver: 0, or -1 with one line in err naming the first thing it cannot
 * serve and why. */
int tlp_dpdk_check_config(const struct tlp_config *cfg, char *err, size_t errlen);
/* The start: the environment (TL_DPDK, TL_DPDK_ADDR, TL_DRIVER), what p
 * asks for, and cfg (tlp_dpdk_check_config). 0, or -1 with one line. */
int tlp_dpdk_check_start(const struct tlp_config *cfg, const struct tlp_dpdk_proc *p, char *err,
			 size_t errlen);
/* Before the runtime is made: TL_DRIVER=dpdk, and one queue pair per
 * shard (TL_DPDK_QUEUES set to nshards unless given; given, it must be
 * nshards, since a pair no shard claims is never read). 0, or -1 with one
 * line in err. */
int tlp_dpdk_setup(uint32_t nshards, char *err, size_t errlen);

#endif /* TLP_DPDK_H */
