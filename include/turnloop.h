/* turnloop.h: the umbrella header; include this one. */
#ifndef TURNLOOP_H
#define TURNLOOP_H

#include "turnloop/error.h"
#include "turnloop/loop.h"
#include "turnloop/pool.h"
#include "turnloop/shard.h"
#include "turnloop/poll.h"
#include "turnloop/signal.h"
#include "turnloop/ewait.h"
#include "turnloop/proc.h"
#include "turnloop/tty.h"
#include "turnloop/watch.h"
#include "turnloop/dns.h"
#include "turnloop/tls.h"

#endif
