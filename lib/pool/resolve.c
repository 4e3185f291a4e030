/* lib/pool/resolve.c: getaddrinfo lookups (tl_resolve), one bounded pool job each. */
#include <errno.h>
#include <string.h>
#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h> /* getaddrinfo, in Winsock */
#else
#include <netdb.h>
#include <sys/socket.h>
#endif
#include "job.h"

/* A lookup, in its job record's data words. The names are copied in, so the
 * worker never touches caller memory; the addresses go where the names were
 * and the loop copies them out while it produces the completion. */
struct rs_job {
	tl_addr *out;
	uint32_t cap, n;
	int family, socktype, protocol, flags;
	uint8_t has_host, has_service;
	union {
		struct {
			char host[256];
			char service[32];
		} in;
		tl_addr addrs[TL_RESOLVE_MAX]; /* written after the call */
	} io;
};
_Static_assert(sizeof(struct rs_job) <= sizeof(((struct tl_job *)0)->data), "rs_job fits");

static inline struct rs_job *RS(struct tl_job *j)
{
	return (struct rs_job *)j->data;
}

/* Map getaddrinfo's codes to the project's errno convention (pool.h).
 * Winsock's are WSA* codes under the same names, without EAI_SYSTEM or
 * EAI_ADDRFAMILY (and some headers make EAI_NODATA EAI_NONAME). */
static int64_t eai_errno(int e)
{
	switch (e) {
	case EAI_NONAME:
#if defined(EAI_NODATA) && EAI_NODATA != EAI_NONAME
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -ENOENT;
	case EAI_AGAIN:
		return -EAGAIN;
	case EAI_MEMORY:
		return -ENOMEM;
#ifdef EAI_SYSTEM
	case EAI_SYSTEM:
		return errno ? -(int64_t)errno : -EIO;
#endif
	case EAI_FAMILY:
	case EAI_SOCKTYPE:
	case EAI_SERVICE:
	case EAI_BADFLAGS:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static void rs_run(struct tl_job *j)
{
	struct rs_job *q = RS(j);
	struct addrinfo h, *res = NULL;
	memset(&h, 0, sizeof h);
	h.ai_family = q->family;
	h.ai_socktype = q->socktype;
	h.ai_protocol = q->protocol;
	h.ai_flags = q->flags;
	const char *host = q->has_host ? q->io.in.host : NULL;
	const char *svc = q->has_service ? q->io.in.service : NULL;
	errno = 0;
#ifdef _WIN32
	/* Winsock answers only a process that started it: count this lookup
	 * as one more user (a reference count, cheap while the host holds
	 * one, as the IOCP driver does). */
	WSADATA wd;
	int wsa = WSAStartup(MAKEWORD(2, 2), &wd) == 0;
	int e = getaddrinfo(host, svc, &h, &res);
	if (e && wsa)
		WSACleanup();
#else
	int e = getaddrinfo(host, svc, &h, &res);
#endif
	if (e) {
		j->res = eai_errno(e);
		j->value = (uint64_t)j->res;
		return;
	}
	/* The names are dead now; their space takes the addresses. */
	uint32_t n = 0;
	for (struct addrinfo *ai = res; ai && n < TL_RESOLVE_MAX; ai = ai->ai_next) {
		tl_addr *a = &q->io.addrs[n];
		if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof a->in) {
			memset(a, 0, sizeof *a);
			memcpy(&a->in, ai->ai_addr, sizeof a->in);
			n++;
		} else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof a->in6) {
			memset(a, 0, sizeof *a);
			memcpy(&a->in6, ai->ai_addr, sizeof a->in6);
			n++;
		}
	}
	freeaddrinfo(res);
#ifdef _WIN32
	if (wsa)
		WSACleanup();
#endif
	q->n = n;
	if (!n) {
		j->res = -ENOENT;
		j->value = (uint64_t)j->res;
		return;
	}
	j->res = n < q->cap ? n : q->cap;
	j->value = n;
}

/* On the loop's thread: the addresses into the caller's array. */
static void rs_deliver(struct tl_job *j, tl_completion *c, int cancelled)
{
	struct rs_job *q = RS(j);
	(void)c;
	if (!cancelled && j->res > 0)
		memcpy(q->out, q->io.addrs, (size_t)j->res * sizeof(tl_addr));
}

static const struct tl_job_ops rs_ops = {
	.run = rs_run,
	.deliver = rs_deliver,
};

int tl_resolve(tl_loop *l, const char *host, const char *service,
	       const struct addrinfo *hints, tl_addr *out, uint32_t cap, uint64_t token,
	       tl_op *op)
{
	if ((!host && !service) || !out || !cap || !op)
		return -EINVAL;
	size_t hl = host ? strlen(host) : 0, sl = service ? strlen(service) : 0;
	if (hl > 255 || sl > 31)
		return -EINVAL;
	struct tl_pool_loop *pl;
	int r = tl__pool_loop_setup(l, &pl);
	if (r < 0)
		return r;
	struct tl_job *j = tl__pool_job_new(l, pl);
	if (!j)
		return -ENOBUFS;
	struct rs_job *q = RS(j);
	j->ops = &rs_ops;
	j->ptr = out; /* the terminal's ptr, even for a lookup cancelled before it ran */
	q->out = out;
	q->cap = cap < TL_RESOLVE_MAX ? cap : TL_RESOLVE_MAX;
	q->n = 0;
	q->family = hints ? hints->ai_family : AF_UNSPEC;
	q->socktype = hints ? hints->ai_socktype : SOCK_STREAM;
	q->protocol = hints ? hints->ai_protocol : 0;
	q->flags = hints ? hints->ai_flags : 0;
	q->has_host = host != NULL;
	q->has_service = service != NULL;
	if (host)
		memcpy(q->io.in.host, host, hl + 1);
	if (service)
		memcpy(q->io.in.service, service, sl + 1);
	return tl__pool_submit(l, pl, j, TL_POOL_BOUNDED, TL_K_RESOLVE, token, -1, op);
}
