/* tools/util.h: small things the programs share that touch the system (the parsers stay in cli.c). */
#ifndef TL_TOOLS_UTIL_H
#define TL_TOOLS_UTIL_H

#include "turnloop.h"

/*
 * Is a TCP address already listened on by someone else? A listener with
 * SO_REUSEPORT (every shard of a turnloop server has one) lets a second
 * process of the same user bind the same port and silently take a share of
 * its connections; a server calls this before binding, unless it was asked
 * to share. Binds a probe socket without SO_REUSEPORT (with SO_REUSEADDR, so
 * sockets in TIME_WAIT do not count) and closes it.
 * Returns 1 (in use), 0 (free), or the probe's negative errno.
 */
int tl_tool_port_taken(const tl_addr *addr);

/* This process's id, as tl_stats_open and tlshard stats take it: getpid(),
 * or on Windows GetCurrentProcessId() (which under wine is not the Linux
 * pid of the process). */
unsigned long tl_tool_pid(void);

#endif
