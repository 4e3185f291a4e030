/* lib/error.c: tl_strerror and address helpers. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include "turnloop/error.h"
#include "turnloop/loop.h"

const char *tl_strerror(int code)
{
	switch (code) {
	case 0: return "success";
	case -EINVAL: return "invalid argument, limit or handle state";
	case -ENOENT: return "unknown, foreign or stale id";
	case -EALREADY: return "cancellation already requested";
	case -ENOBUFS: return "table, ring or queue full";
	case -EAGAIN: return "would block: retry after a turn";
	case -ECANCELED: return "operation cancelled";
	case -ETIMEDOUT: return "deadline passed";
	case -ENOTSUP: return "not supported by this driver";
	case -EPIPE: return "endpoint closed";
	case -EBUSY: return "loop still has live handles";
	default: return code < 0 ? strerror(-code) : "not an error code";
	}
}

int tl_addr_parse(tl_addr *out, const char *ip, uint16_t port)
{
	if (!out || !ip)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	if (inet_pton(AF_INET, ip, &out->in.sin_addr) == 1) {
		out->in.sin_family = AF_INET;
		out->in.sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &out->in6.sin6_addr) == 1) {
		out->in6.sin6_family = AF_INET6;
		out->in6.sin6_port = htons(port);
		return 0;
	}
	return -EINVAL;
}

unsigned tl_addr_len(const tl_addr *a)
{
	if (a->sa.sa_family == AF_INET)
		return sizeof a->in;
	if (a->sa.sa_family == AF_INET6)
		return sizeof a->in6;
	return 0;
}
