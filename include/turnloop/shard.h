/* turnloop/shard.h: the sharded runtime's three headers in one, for programs written before they were split (contract section 9). */
#ifndef TURNLOOP_SHARD_H
#define TURNLOOP_SHARD_H

/*
 * The plan (which CPU each shard runs on), the runtime (threads, lifecycle,
 * mesh) and live stats (the program's counters, the region and its reader)
 * each have a header of their own; turnloop.h includes all three. This one
 * stays for programs that include it by name.
 */
#include "turnloop/plan.h"
#include "turnloop/runtime.h"
#include "turnloop/stats.h"

#endif /* TURNLOOP_SHARD_H */
