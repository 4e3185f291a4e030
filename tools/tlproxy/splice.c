/* tools/tlproxy/splice.c: tlproxy's rule for switching a direction between copying and splicing, the "splice" stat rows and the size of the shards' pipe pools. */
#include <stdio.h>
#include <unistd.h>

#include "splice.h"

int tlp_spl_after_read(struct tlp_spl *d, uint32_t n, uint32_t cap)
{
	if (d->mode != TLP_SPL_COPY)
		return 0;
	if (d->wait) {
		/* Refused a while ago: copy this much before asking again. */
		d->wait = n >= d->wait ? 0 : d->wait - n;
		return 0;
	}
	if (n < cap) {
		d->streak = 0;
		return 0;
	}
	d->streak += n;
	if (d->streak < TLP_SPL_ENTER)
		return 0;
	d->streak = 0;
	return 1;
}

int tlp_spl_after_splice(struct tlp_spl *d, uint64_t moved)
{
	if (moved >= TLP_SPL_BACK) {
		d->shorts = 0;
		return 1;
	}
	if (++d->shorts < TLP_SPL_BACK_N)
		return 1;
	d->shorts = 0;
	return 0;
}

void tlp_spl_refused(struct tlp_spl *d)
{
	d->streak = 0;
	d->wait = TLP_SPL_RETRY;
}

int tlp_spl_declare(tl_runtime *rt, int *id)
{
	static const char *const rows[TLP_SPL_ST_ROWS] = {
		[TLP_SPL_ST_TO_SPLICE] = "to_splice",
		[TLP_SPL_ST_TO_COPY] = "to_copy",
		[TLP_SPL_ST_BYTES] = "bytes",
		[TLP_SPL_ST_REFUSED] = "refused",
	};
	int r = tl_runtime_stat(rt, "splice", TL_STAT_COUNTER, TLP_SPL_ST_ROWS);

	if (r < 0)
		return r;
	*id = r;
	for (int i = 0; i < TLP_SPL_ST_ROWS; i++)
		tl_runtime_stat_label(rt, r + i, rows[i]);
	return 0;
}

/* fs.pipe-user-pages-soft in bytes; 0 when unreadable or unlimited. */
static uint64_t budget_bytes(void)
{
	unsigned long long pages = 0;
	FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &pages) != 1)
		pages = 0;
	fclose(f);
	return (uint64_t)pages * 4096;
}

uint64_t tlp_spl_pool(const struct tlp_config *cfg, uint32_t nshards, uint32_t *pipes,
		      uint32_t *pipe_size)
{
	uint32_t size = cfg->splice_pipe_size ? cfg->splice_pipe_size : TLP_SPL_PIPE_SIZE;
	uint64_t n = cfg->splice_pipes;
	int any = 0;

	for (uint32_t i = 0; i < cfg->nlisteners; i++)
		any |= cfg->listeners[i].splice;
	if (!any)
		return 0;
	if (nshards == 0)
		nshards = 1;
	if (!n) {
		uint64_t budget = geteuid() == 0 ? 0 : budget_bytes();

		/* The shards share the user's budget, and the runtime cannot see
		 * the others': give each its part, so the pipes they make are of
		 * the size asked for. */
		n = budget ? budget / nshards / size : TLP_SPL_PIPES_ROOT;
		if (n == 0)
			n = 1;
		if (n > 4096)
			n = 4096;
	}
	*pipes = (uint32_t)n;
	*pipe_size = size;
	return n * nshards;
}
