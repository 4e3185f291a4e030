/* turnloop/dns.h: a non-blocking resolver on the loop (c-ares), beside the pool's getaddrinfo (contract 5 and 6: name lookups). */
#ifndef TURNLOOP_DNS_H
#define TURNLOOP_DNS_H

#include "turnloop/loop.h"
#include "turnloop/pool.h" /* TL_RESOLVE_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A resolver handle runs c-ares on the loop: the sockets c-ares opens are
 * polled through the loop (foreign descriptors, turnloop/poll.h, inside
 * the core), its retry and timeout schedule bounds the loop's OS wait like
 * a timer, and each lookup is an op of the handle. Nothing blocks and no
 * thread is used, unlike tl_resolve (turnloop/pool.h), which runs
 * getaddrinfo on the blocking pool and follows the system's whole
 * nsswitch configuration; this one speaks DNS (and reads /etc/hosts unless
 * told not to) and nothing else.
 *
 * The resolver needs the library built with c-ares (Debian's
 * libc-ares-dev) and a driver with TL_CAP_POLL; otherwise tl_dns_open is
 * -ENOTSUP. c-ares allocates for each lookup (its own memory, freed when
 * the lookup ends): lookups are not part of the loop's allocation-free
 * steady state. Each socket c-ares has open takes one op of the loop's
 * table while open (an op table that is full leaves a new socket unwatched
 * and its lookups end with -ETIMEDOUT).
 */

#define TL_DNS_NO_HOSTS  0x1 /* do not read /etc/hosts: DNS only */
#define TL_DNS_NO_SEARCH 0x2 /* no search domains: names are looked up as given */
#define TL_DNS_SERVERS_MAX 8

/* A resolver's settings; zeroed fields take the defaults given. Read
 * during tl_dns_open() only. */
typedef struct tl_dns_config {
	const tl_addr *servers; /* IPv4/IPv6 servers, their ports (0: 53) included */
	uint32_t nservers;      /* <= TL_DNS_SERVERS_MAX; 0: /etc/resolv.conf's */
	uint32_t timeout_ms;    /* a first try's timeout (later tries wait longer);
				 * 0: /etc/resolv.conf's, else c-ares's default */
	uint32_t tries;         /* tries per server; 0: c-ares's default */
	uint32_t flags;         /* TL_DNS_NO_HOSTS, TL_DNS_NO_SEARCH */
} tl_dns_config;

/* Open a resolver (cfg NULL: all defaults). 0 and *h, or -EINVAL (h NULL,
 * too many servers, a server not IPv4/IPv6, flags unknown), -ENOBUFS
 * (handle table full), -ENOTSUP (no c-ares in this build, or no
 * TL_CAP_POLL), -ENOMEM, or -EIO (c-ares could not start: an unreadable
 * /etc/resolv.conf, ...). tl_close(h, token) cancels the lookups still
 * running (each ends -ECANCELED), stops its sockets' polls, then delivers
 * Closed; c-ares's state is freed then. */
int tl_dns_open(tl_loop *loop, const tl_dns_config *cfg, tl_handle *h);

/*
 * Look name up: its A records (family AF_INET), AAAA records (AF_INET6) or
 * both (AF_UNSPEC). The terminal TL_K_RESOLVE completion has, as
 * tl_resolve's: result = addresses written to out[0..min(cap,
 * TL_RESOLVE_MAX)) (port 0), u.pool.value = addresses found (up to
 * TL_RESOLVE_MAX), u.pool.ptr = out; out is written on the loop's thread
 * while the completion is produced, and only on success. Failures: -ENOENT
 * (no such name, or no address of the family asked), -ETIMEDOUT (no server
 * answered), -ECONNREFUSED (servers refused), -EAGAIN (a server failure),
 * -EINVAL (a malformed name), -ENOMEM, -ECANCELED (tl_cancel, or the
 * resolver closed), -EIO (anything else). A name c-ares can answer at once
 * (numeric, /etc/hosts) has its completion queued before this returns. Submission: 0 and *op,
 * or -ENOENT (h stale or foreign), -EINVAL (h not a resolver or closing,
 * name NULL or longer than 253 bytes, family unknown, out NULL, cap 0, op
 * NULL), -ENOBUFS (op table full).
 */
int tl_dns_resolve(tl_loop *loop, tl_handle h, const char *name, int family, tl_addr *out,
		   uint32_t cap, uint64_t token, tl_op *op);

#ifdef __cplusplus
}
#endif
#endif
