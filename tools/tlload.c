/* tools/tlload.c: a ping-pong load generator on one turnloop loop (drives the demo). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "turnloop.h"
#include "cli.h"

/*
 * Each connection writes a SIZE-byte message, reads until all SIZE bytes came
 * back, checks them, and repeats; the round-trip time of each exchange goes
 * into a log2 histogram. Everything is allocated before the run starts.
 */

struct conn {
	tl_handle h;
	uint8_t *tx, *rx;
	uint32_t got;
	uint32_t rounds; /* round trips on the current connection */
	uint64_t sent_at;
	int up;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tlload -p PORT [--host IP] [-c CONNS] [-s SIZE] [-d SECS] [--churn N]\n"
		   "  --churn N  close each connection after N round trips and open a new one\n");
}

static uint64_t pct(const uint64_t *hist, uint64_t total, double q)
{
	uint64_t want = (uint64_t)(q * (double)total), seen = 0;
	for (int b = 0; b < 64; b++) {
		seen += hist[b];
		if (seen > want)
			return (uint64_t)1 << b;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tlload_opts o;
	char err[1024];

	switch (tlload_parse(argc, argv, &o, err, sizeof err)) {
	case 0:
		break;
	case 1:
		usage(stdout);
		return 0;
	default:
		fprintf(stderr, "tlload: %s\n", err);
		return 2;
	}
	uint32_t nconn = o.conns, size = o.size, secs = o.secs, churn = o.churn;
	tl_addr addr = o.addr;
	tl_config cfg;
	tl_config_init(&cfg);
	cfg.max_handles = nconn + 16;
	cfg.max_ops = 4 * nconn + 16;
	tl_loop *loop;
	int r = tl_loop_new(&loop, &cfg);
	if (r < 0) {
		fprintf(stderr, "tlload: cannot create the loop: %s\n", tl_strerror(r));
		return 1;
	}
	struct conn *cs = calloc(nconn, sizeof *cs);
	uint8_t *mem = malloc((size_t)nconn * size * 2);
	tl_completion *out = malloc(1024 * sizeof *out);
	if (!cs || !mem || !out) {
		fprintf(stderr, "tlload: out of memory\n");
		return 1;
	}
	tl_op op;
	for (uint32_t i = 0; i < nconn; i++) {
		cs[i].tx = mem + (size_t)i * size * 2;
		cs[i].rx = cs[i].tx + size;
		for (uint32_t k = 0; k < size; k++)
			cs[i].tx[k] = (uint8_t)(i * 31 + k);
		if ((r = tl_tcp_connect(loop, &addr, tl_now(loop) + 2000000000ull, i, &cs[i].h, &op)) < 0) {
			fprintf(stderr, "tlload: connect: %s\n", tl_strerror(r));
			return 1;
		}
	}
	uint64_t hist[64] = {0}, rts = 0, errors = 0, reconnects = 0;
	/* Connects that failed, with the first reason: one line at the end,
	 * not one per connection (a closed port fails all of them). */
	uint64_t cfail = 0;
	int cfail_first = 0;
	uint64_t start = tl_now(loop), end = start + (uint64_t)secs * 1000000000ull;
	uint32_t up = 0, down = 0;
	while (tl_now(loop) < end && down < nconn) {
		int n = tl_turn(loop, 50 * 1000000, out, 1024, NULL);
		if (n < 0) {
			fprintf(stderr, "tlload: turn: %s\n", tl_strerror(n));
			break;
		}
		for (int k = 0; k < n; k++) {
			tl_completion *c = &out[k];
			struct conn *x = &cs[c->token];
			switch (c->kind) {
			case TL_K_CONNECT:
				if (c->result < 0) {
					if (!cfail++)
						cfail_first = (int)c->result;
					errors++;
					down++;
					break;
				}
				x->up = 1;
				up++;
				x->sent_at = tl_now(loop);
				if (tl_write(loop, x->h, x->tx, size, c->token, &op) < 0 ||
				    tl_read(loop, x->h, x->rx, size, c->token, &op) < 0)
					errors++;
				break;
			case TL_K_READ:
				if (c->result <= 0) {
					if (c->result < 0 && c->result != -ECANCELED)
						errors++;
					x->up = 0;
					down++;
					break;
				}
				x->got += (uint32_t)c->result;
				if (x->got < size) {
					tl_read(loop, x->h, x->rx + x->got, size - x->got, c->token, &op);
					break;
				}
				if (memcmp(x->rx, x->tx, size))
					errors++;
				x->got = 0;
				uint64_t now = tl_now(loop), us = (now - x->sent_at) / 1000;
				hist[us ? 63 - __builtin_clzll(us) : 0]++;
				rts++;
				x->sent_at = now;
				if (churn && ++x->rounds == churn) {
					/* Churn: Closed brings a fresh connection (below). */
					x->rounds = 0;
					x->up = 0;
					up--;
					tl_close(loop, x->h, c->token);
					break;
				}
				if (tl_write(loop, x->h, x->tx, size, c->token, &op) < 0 ||
				    tl_read(loop, x->h, x->rx, size, c->token, &op) < 0)
					errors++;
				break;
			case TL_K_WRITE:
				if (c->result < 0 && c->result != -ECANCELED)
					errors++;
				break;
			case TL_K_CLOSED:
				if (!churn)
					break;
				reconnects++;
				r = tl_tcp_connect(loop, &addr, tl_now(loop) + 2000000000ull, c->token, &x->h,
						   &op);
				if (r < 0) {
					if (!cfail++)
						cfail_first = r;
					errors++;
					down++;
				}
				break;
			default:
				break;
			}
		}
	}
	double el = (double)(tl_now(loop) - start) / 1e9;
	if (cfail)
		fprintf(stderr, "tlload: %llu of %llu connects failed, the first with: %s\n",
			(unsigned long long)cfail, (unsigned long long)(nconn + reconnects),
			tl_strerror(cfail_first));
	printf("tlload conns=%u size=%u secs=%.1f rps=%.0f p50_us<=%llu p99_us<=%llu errors=%llu "
	       "reconnects=%llu driver=%s\n",
	       nconn, size, el, (double)rts / el, (unsigned long long)pct(hist, rts, 0.5) * 2,
	       (unsigned long long)pct(hist, rts, 0.99) * 2, (unsigned long long)errors,
	       (unsigned long long)reconnects, tl_loop_driver(loop));
	tl_loop_destroy(loop);
	free(cs);
	free(mem);
	free(out);
	return errors || !rts ? 1 : 0;
}
