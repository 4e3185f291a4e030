/* tools/tlproxy/balance_leastconn.c: least connections (the leastconn row of the balancer table; see balance.h). */
#include <errno.h>

#include "balance_rows.h"

int tlp_pick_leastconn(const struct tlp_bal_server *s, uint32_t n, uint32_t *cursor,
		       const struct tlp_avoid *avoid)
{
	uint32_t start;
	int best = -1;

	if (tlp__bal_bad_table(s, n) || !cursor)
		return -EINVAL;
	start = n ? *cursor % n : 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = start + k < n ? start + k : start + k - n;

		if (!tlp_bal_can(s, i, avoid))
			continue;
		/* Strictly better only: among equals the first after the
		 * cursor stays, which is what makes them take turns. */
		if (best < 0 || s[i].conns < s[best].conns ||
		    (s[i].conns == s[best].conns && s[i].weight > s[best].weight))
			best = (int)i;
	}
	if (best < 0)
		return tlp__bal_none(s, n, avoid);
	*cursor = (uint32_t)best + 1 < n ? (uint32_t)best + 1 : 0;
	return best;
}

int tlp__bal_leastconn_pick(struct tlp_balancer *b, uint64_t key, const struct tlp_avoid *avoid)
{
	(void)key;
	return tlp_pick_leastconn(b->srv, b->n, &b->cursor, avoid);
}
