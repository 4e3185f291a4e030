/* tools/tlproxy/resolve.c: re-resolving the host names of pools' servers (shard 0), and the new views that follow a changed answer. */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plane.h"
#include "resolve.h"

/* Calls: resolve -> plane, world. */

void tlp_resolve_start(uint32_t i, uint64_t now)
{
	struct tlp_host *h = tlp_w.host[i];
	struct addrinfo hints;
	tl_op op;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	h->next_at = now + (h->interval_ns == UINT64_MAX ? 10000000000ull : h->interval_ns);
	if (tl_resolve(tlp_cp.loop, h->name, h->service, &hints, h->tmp, TL_RESOLVE_MAX,
		       tl_token(TLP_H_DNS, i), &op) == 0)
		h->busy = 1;
}

static int addr_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(tl_addr));
}

void tlp_on_dns(tl_shard *s, const tl_completion *e)
{
	uint32_t i = (uint32_t)tl_token_data(e->token);
	struct tlp_world *w = &tlp_w;
	struct tlp_host *h;
	tl_addr got[TL_RESOLVE_MAX];
	uint32_t n;

	(void)s;
	if (i >= w->nhost)
		return;
	h = w->host[i];
	h->busy = 0;
	if (e->result < 0) {
		tl_shard_counter_add(tlp_cp.s, w->st_dns + 1, 1);
		if (!h->failing)
			tlp_log("cannot resolve %s: %s (keeping its %u addresses)", h->name,
				tl_strerror((int)e->result), h->n);
		h->failing = 1;
		return;
	}
	tl_shard_counter_add(tlp_cp.s, w->st_dns, 1);
	if (h->failing)
		tlp_log("%s resolves again", h->name);
	h->failing = 0;
	n = (uint32_t)e->result;
	memset(got, 0, sizeof got);
	for (uint32_t k = 0; k < n; k++) {
		/* Compare only what matters: family, address, port. */
		if (h->tmp[k].sa.sa_family == AF_INET) {
			got[k].in.sin_family = AF_INET;
			got[k].in.sin_addr = h->tmp[k].in.sin_addr;
			got[k].in.sin_port = htons(h->port);
		} else {
			got[k].in6.sin6_family = AF_INET6;
			got[k].in6.sin6_addr = h->tmp[k].in6.sin6_addr;
			got[k].in6.sin6_port = htons(h->port);
		}
	}
	qsort(got, n, sizeof got[0], addr_cmp);
	if (h->known && n == h->n && !memcmp(got, h->a, n * sizeof got[0]))
		return;
	memcpy(h->a, got, sizeof got);
	h->n = n;
	h->known = 1;
	tl_shard_counter_add(tlp_cp.s, w->st_dns + 2, 1);
	{
		char list[512] = "";
		size_t off = 0;

		for (uint32_t k = 0; k < n && off < sizeof list - 64; k++) {
			char ip[INET6_ADDRSTRLEN];

			if (got[k].sa.sa_family == AF_INET)
				inet_ntop(AF_INET, &got[k].in.sin_addr, ip, sizeof ip);
			else
				inet_ntop(AF_INET6, &got[k].in6.sin6_addr, ip, sizeof ip);
			off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", k ? " " : "", ip);
		}
		tlp_log("%s now resolves to %u address%s: %s", h->name, n, n == 1 ? "" : "es", list);
	}
	/* Every pool that names it gets a new view. */
	for (uint32_t p = 0; p < w->ngp; p++) {
		const struct tlp_pool_cfg *pc = w->gp[p]->cfg;

		if (!pc)
			continue;
		for (uint32_t k = 0; k < pc->nservers; k++) {
			const struct tlp_endpoint *ep = &pc->servers[k].ep;

			if (ep->kind == TLP_EP_HOST && ep->port == h->port && !strcmp(ep->host, h->name))
				w->gp[p]->dirty = 1;
		}
	}
	for (uint32_t p = 0; p < w->ngp; p++)
		if (w->gp[p]->dirty && tlp_pool_rebuild(w->gp[p]) > 0)
			tlp_cp.pending_view[p] = 1;
	tlp_publish_pending();
}

