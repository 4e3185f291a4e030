/* tests/dns_responder.c: the tests' DNS server on loopback (see dns_responder.h). */
#include "dns_responder.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

enum { T_A = 1, T_AAAA = 28 };

static const struct rec {
	const char *name;
	int type;
	const char *addr;
} recs[] = {
	{"one.tl.test", T_A, "192.0.2.1"},
	{"two.tl.test", T_A, "192.0.2.2"},
	{"two.tl.test", T_AAAA, "2001:db8::2"},
	{"six.tl.test", T_AAAA, "2001:db8::6"},
};
#define NRECS (sizeof recs / sizeof recs[0])

/* The question's name as dotted text; its length in the packet in *qlen.
 * 0, or -1 when malformed (or compressed: queries never are). */
static int qname(const uint8_t *p, size_t n, char *out, size_t cap, size_t *qlen)
{
	size_t i = 0, o = 0;
	while (i < n && p[i]) {
		size_t len = p[i];
		if (len > 63 || i + 1 + len > n || o + len + 1 >= cap)
			return -1;
		if (o)
			out[o++] = '.';
		memcpy(out + o, p + i + 1, len);
		o += len;
		i += 1 + len;
	}
	if (i >= n)
		return -1;
	out[o] = 0;
	*qlen = i + 1;
	return 0;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static size_t answer(const uint8_t *q, size_t n, uint8_t *out, size_t cap)
{
	char name[256];
	size_t ql;
	if (n < 12 || qname(q + 12, n - 12, name, sizeof name, &ql) < 0 || 12 + ql + 4 > n)
		return 0;
	int type = q[12 + ql] << 8 | q[12 + ql + 1];
	size_t qend = 12 + ql + 4;
	if (qend > cap)
		return 0;
	memcpy(out, q, qend);
	int known = 0;
	uint16_t an = 0;
	size_t o = qend;
	for (size_t k = 0; k < NRECS; k++) {
		if (strcasecmp(recs[k].name, name) != 0)
			continue;
		known = 1;
		if (recs[k].type != type)
			continue;
		size_t rdlen = type == T_A ? 4 : 16;
		if (o + 12 + rdlen > cap)
			break;
		put16(out + o, 0xc00c); /* the question's name */
		put16(out + o + 2, (uint16_t)type);
		put16(out + o + 4, 1);  /* IN */
		out[o + 6] = 0, out[o + 7] = 0, out[o + 8] = 0, out[o + 9] = 60; /* TTL */
		put16(out + o + 10, (uint16_t)rdlen);
		inet_pton(type == T_A ? AF_INET : AF_INET6, recs[k].addr, out + o + 12);
		o += 12 + rdlen;
		an++;
	}
	/* QR, the opcode and RD as asked, AA; RA; NXDOMAIN for a name we do
	 * not know. */
	out[2] = (uint8_t)(0x80 | (q[2] & 0x79) | 0x04);
	out[3] = (uint8_t)(0x80 | (known ? 0 : 3));
	put16(out + 4, 1);
	put16(out + 6, an);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return o;
}

static void *run(void *arg)
{
	struct dnsr *r = arg;
	uint8_t q[1500], a[1500];
	while (!atomic_load(&r->stop)) {
		struct pollfd pf = {.fd = r->fd, .events = POLLIN};
		if (poll(&pf, 1, 20) <= 0)
			continue;
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(r->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
		if (n <= 0)
			continue;
		atomic_fetch_add(&r->queries, 1);
		if (r->silent)
			continue;
		size_t m = answer(q, (size_t)n, a, sizeof a);
		if (m)
			sendto(r->fd, a, m, 0, (struct sockaddr *)&from, fl);
	}
	return NULL;
}

int dnsr_start(struct dnsr *r, int silent)
{
	memset(r, 0, sizeof *r);
	r->silent = silent;
	r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (r->fd < 0)
		return -errno;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (bind(r->fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    getsockname(r->fd, (struct sockaddr *)&a, &al) < 0) {
		int e = -errno;
		close(r->fd);
		return e;
	}
	r->port = ntohs(a.sin_port);
	int e = pthread_create(&r->thread, NULL, run, r);
	if (e) {
		close(r->fd);
		return -e;
	}
	return 0;
}

void dnsr_stop(struct dnsr *r)
{
	atomic_store(&r->stop, 1);
	pthread_join(r->thread, NULL);
	close(r->fd);
}
