/* tools/tlecho.c: a TCP echo server on one turnloop loop (the echo benchmark's subject). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "turnloop.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tlecho -p PORT [--host IP] [--driver epoll|uring] [--buffers N] "
		   "[--buffer-size BYTES]\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t port = 0, nbuf = 4096, bufsz = 4096;
	const char *host = "127.0.0.1";
	tl_config cfg;
	tl_config_init(&cfg);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "tlecho: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "-p") || !strcmp(a, "--port")) {
			if (parse_u32(v, 1, 65535, &port)) {
				fprintf(stderr, "tlecho: bad port '%s' (1-65535)\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--host")) {
			host = v;
		} else if (!strcmp(a, "--driver")) {
			if (!strcmp(v, "epoll"))
				cfg.driver = TL_DRIVER_EPOLL;
			else if (!strcmp(v, "uring"))
				cfg.driver = TL_DRIVER_URING;
			else {
				fprintf(stderr, "tlecho: unknown driver '%s' (epoll, uring)\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--buffers")) {
			if (parse_u32(v, 1, 32768, &nbuf)) {
				fprintf(stderr, "tlecho: bad buffer count '%s' (1-32768)\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--buffer-size")) {
			if (parse_u32(v, 64, 1u << 20, &bufsz)) {
				fprintf(stderr, "tlecho: bad buffer size '%s' (64-1048576)\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "tlecho: unknown option '%s'\n", a);
			return 2;
		}
	}
	if (!port) {
		fprintf(stderr, "tlecho: -p PORT is required\n");
		return 2;
	}
	tl_addr addr;
	if (tl_addr_parse(&addr, host, (uint16_t)port) < 0) {
		fprintf(stderr, "tlecho: bad address '%s'\n", host);
		return 2;
	}
	cfg.pooled_buffers = nbuf;
	cfg.pooled_buffer_size = bufsz;
	cfg.max_handles = 16384;
	cfg.max_ops = 65536;
	tl_loop *loop;
	int r = tl_loop_new(&loop, &cfg);
	if (r < 0) {
		fprintf(stderr, "tlecho: cannot create the loop: %s\n", tl_strerror(r));
		return 1;
	}
	tl_handle lh;
	tl_op accept_op;
	tl_listen_opts lo = {.backlog = 4096, .reuseport = 1};
	if ((r = tl_tcp_listen(loop, &addr, &lo, &lh)) < 0 ||
	    (r = tl_accept_start(loop, lh, 0, &accept_op)) < 0) {
		fprintf(stderr, "tlecho: cannot listen on %s:%u: %s\n", host, port, tl_strerror(r));
		tl_loop_destroy(loop);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "tlecho: listening on %s:%u (driver %s)\n", host, port, tl_loop_driver(loop));
	static tl_completion out[512];
	uint64_t conns = 0, bytes = 0;
	while (!stop_flag) {
		int n = tl_turn(loop, 100 * 1000000, out, 512, NULL);
		if (n < 0 && n != -EINTR) {
			fprintf(stderr, "tlecho: turn failed: %s\n", tl_strerror(n));
			break;
		}
		for (int i = 0; i < n; i++) {
			tl_completion *c = &out[i];
			tl_op op;
			switch (c->kind) {
			case TL_K_ACCEPT:
				if (c->result < 0)
					break; /* e.g. EMFILE: accepting resumes by itself */
				conns++;
				if (tl_read_start(loop, c->u.accept.conn, 0, &op) < 0)
					tl_close(loop, c->u.accept.conn, 0);
				break;
			case TL_K_READ:
				if (c->result > 0) {
					/* Echo straight from the lease; it goes back once
					 * the write is done (the token carries its id). */
					bytes += (uint64_t)c->result;
					if (tl_write(loop, c->handle, c->u.read.lease.data,
						     (uint32_t)c->result, c->u.read.lease.id, &op) < 0) {
						tl_lease_release(loop, c->u.read.lease.id);
						tl_close(loop, c->handle, 0);
					}
				} else if (c->flags & TL_F_TERMINAL) {
					tl_close(loop, c->handle, 0);
				}
				break;
			case TL_K_WRITE:
				tl_lease_release(loop, (uint32_t)c->token);
				if (c->result < 0)
					tl_close(loop, c->handle, 0);
				break;
			default:
				break;
			}
		}
	}
	fprintf(stderr, "tlecho: %llu connections, %llu bytes echoed\n", (unsigned long long)conns,
		(unsigned long long)bytes);
	tl_loop_destroy(loop);
	return 0;
}
