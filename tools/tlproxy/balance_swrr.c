/* tools/tlproxy/balance_swrr.c: smooth weighted round robin (the roundrobin and weighted rows of the balancer table; see balance.h). */
#include <errno.h>

#include "balance_rows.h"

int tlp_pick_swrr(struct tlp_bal_server *s, uint32_t n, const struct tlp_avoid *avoid)
{
	int64_t total = 0;
	int best = -1;

	if (tlp__bal_bad_table(s, n))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!tlp_bal_can(s, i, avoid))
			continue;
		s[i].cw += s[i].weight;
		total += s[i].weight;
		if (best < 0 || s[i].cw > s[best].cw)
			best = (int)i;
	}
	if (best < 0)
		return tlp__bal_none(s, n, avoid);
	s[best].cw -= total;
	return best;
}

int tlp__bal_swrr_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid)
{
	(void)key;
	return tlp_pick_swrr(b->srv, b->n, avoid);
}
