/* tools/tlproxy/handover.c: encode and decode the records of a live takeover (handover.h), checking every length and field of what comes in. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "handover.h"

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int tlp_ho_type_fds(uint32_t type)
{
	switch (type) {
	case TLP_HO_LISTENER:
		return 1;
	case TLP_HO_CONN:
		return 2;
	case TLP_HO_HELLO:
	case TLP_HO_REFUSE:
	case TLP_HO_LISTENERS_END:
	case TLP_HO_READY:
	case TLP_HO_END:
	case TLP_HO_ACK:
		return 0;
	default:
		return -1;
	}
}

static uint32_t body_max(uint32_t type)
{
	switch (type) {
	case TLP_HO_HELLO:
	case TLP_HO_END:
		return 8;
	case TLP_HO_REFUSE:
		return 4 + TLP_HO_TEXT_MAX;
	case TLP_HO_LISTENER:
		return 4 + sizeof(struct sockaddr_storage);
	case TLP_HO_LISTENERS_END:
	case TLP_HO_ACK:
		return 4;
	case TLP_HO_READY:
		return 0;
	default:
		return TLP_HO_BODY_MAX;
	}
}

int tlp_ho_hdr_decode(const uint8_t *b, size_t n, struct tlp_ho_hdr *h)
{
	int fds;

	if (!b || !h)
		return -EINVAL;
	if (n < TLP_HO_HDR)
		return -EAGAIN;
	if (memcmp(b, TLP_HO_MAGIC, 4))
		return -EPROTO;
	memset(h, 0, sizeof *h);
	h->version = (uint16_t)get16(b + 4);
	if (h->version != TLP_HO_VERSION)
		return -EPROTONOSUPPORT;
	h->type = (uint16_t)get16(b + 6);
	h->len = get32(b + 8);
	h->nfds = b[12];
	fds = tlp_ho_type_fds(h->type);
	if (fds < 0 || b[13] || b[14] || b[15] || h->nfds != fds || h->len > body_max(h->type))
		return -EPROTO;
	return TLP_HO_HDR;
}

/* An address of a family a listener or a client has, and of its length. */
static int addr_ok(const struct sockaddr_storage *a, uint32_t len)
{
	if (len == 0)
		return 1;
	if (len < sizeof(sa_family_t))
		return 0;
	switch (a->ss_family) {
	case AF_INET:
		return len == sizeof(struct sockaddr_in);
	case AF_INET6:
		return len == sizeof(struct sockaddr_in6);
	case AF_UNIX:
		return len > offsetof(struct sockaddr_un, sun_path) &&
		       len <= sizeof(struct sockaddr_un);
	default:
		return 0;
	}
}

/* SHUT(d) is sent only after side d^1's FIN; a UDP session has no FINs. */
static int flags_ok(uint32_t f)
{
	if (f & ~TLP_HO_FLAGS_ALL)
		return 0;
	if ((f & TLP_HO_UDP) && (f & ~TLP_HO_UDP))
		return 0;
	for (int d = 0; d < 2; d++)
		if ((f & TLP_HO_SHUT(d)) && !(f & TLP_HO_EOF(d ^ 1)))
			return 0;
	return 1;
}

/* A UDP session carries no bytes and no TLS state; a connection pair no
 * datagram fields. */
static int kind_ok(const struct tlp_ho_conn *c)
{
	if (c->flags & TLP_HO_UDP)
		return !c->carry_len[0] && !c->carry_len[1] && !c->tls_len[0] && !c->tls_len[1];
	return !c->dgrams[0] && !c->dgrams[1] && !c->pending;
}

static int name_ok(const char *s, size_t *len)
{
	size_t n = strnlen(s, TLP_HO_NAME_MAX + 1);

	*len = n;
	return n <= TLP_HO_NAME_MAX;
}

static long body_size(const struct tlp_ho_msg *m)
{
	const struct tlp_ho_conn *c;
	size_t a, b, d;

	switch (m->type) {
	case TLP_HO_HELLO:
	case TLP_HO_END:
		return 8;
	case TLP_HO_REFUSE:
		a = strnlen(m->u.refuse.text, TLP_HO_TEXT_MAX + 1);
		return a > TLP_HO_TEXT_MAX ? -EINVAL : (long)(4 + a);
	case TLP_HO_LISTENER:
		if (!m->u.listener.addr_len || !addr_ok(&m->u.listener.addr, m->u.listener.addr_len))
			return -EINVAL;
		return 4 + m->u.listener.addr_len;
	case TLP_HO_LISTENERS_END:
	case TLP_HO_ACK:
		return 4;
	case TLP_HO_READY:
		return 0;
	case TLP_HO_CONN:
		c = &m->u.conn;
		if (!flags_ok(c->flags) || !kind_ok(c) || !name_ok(c->listener, &a) ||
		    !name_ok(c->pool, &b) ||
		    !name_ok(c->srv, &d) || !addr_ok(&c->peer, c->peer_len))
			return -EINVAL;
		for (int s = 0; s < 2; s++)
			if (c->carry_len[s] > TLP_HO_CARRY_MAX || (c->carry_len[s] && !c->carry[s]) ||
			    c->tls_len[s] > TLP_HO_TLS_MAX || (c->tls_len[s] && !c->tls[s]))
				return -EINVAL;
		return (long)(TLP_HO_CONN_FIXED + a + b + d + c->peer_len + c->carry_len[0] +
			      c->carry_len[1] + c->tls_len[0] + c->tls_len[1]);
	default:
		return -EINVAL;
	}
}

long tlp_ho_size(const struct tlp_ho_msg *m)
{
	long n;

	if (!m)
		return -EINVAL;
	n = body_size(m);
	return n < 0 ? n : n + TLP_HO_HDR;
}

int tlp_ho_encode(uint8_t *b, size_t cap, const struct tlp_ho_msg *m)
{
	long total = tlp_ho_size(m);
	uint8_t *p;

	if (total < 0)
		return (int)total;
	if (!b || (size_t)total > cap)
		return -ENOSPC;
	memcpy(b, TLP_HO_MAGIC, 4);
	put16(b + 4, TLP_HO_VERSION);
	put16(b + 6, m->type);
	put32(b + 8, (uint32_t)(total - TLP_HO_HDR));
	b[12] = (uint8_t)tlp_ho_type_fds(m->type);
	b[13] = b[14] = b[15] = 0;
	p = b + TLP_HO_HDR;
	switch (m->type) {
	case TLP_HO_HELLO:
		put32(p, m->u.hello.pid);
		put32(p + 4, 0);
		break;
	case TLP_HO_END:
		put32(p, m->u.end.handed);
		put32(p + 4, m->u.end.left);
		break;
	case TLP_HO_REFUSE: {
		size_t n = strlen(m->u.refuse.text);

		put16(p, m->u.refuse.reason);
		put16(p + 2, (uint32_t)n);
		memcpy(p + 4, m->u.refuse.text, n);
		break;
	}
	case TLP_HO_LISTENER:
		put16(p, m->u.listener.shard);
		put16(p + 2, m->u.listener.addr_len);
		memcpy(p + 4, &m->u.listener.addr, m->u.listener.addr_len);
		break;
	case TLP_HO_LISTENERS_END:
		put32(p, m->u.lend.count);
		break;
	case TLP_HO_ACK:
		put32(p, m->u.ack.count);
		break;
	case TLP_HO_READY:
		break;
	case TLP_HO_CONN: {
		const struct tlp_ho_conn *c = &m->u.conn;
		size_t nl = strlen(c->listener), np = strlen(c->pool), ns = strlen(c->srv);

		put32(p, c->flags);
		put32(p + 4, c->server);
		put64(p + 8, c->bytes[0]);
		put64(p + 16, c->bytes[1]);
		put64(p + 24, c->age_ns);
		put16(p + 32, (uint32_t)nl);
		put16(p + 34, (uint32_t)np);
		put16(p + 36, (uint32_t)ns);
		put16(p + 38, c->peer_len);
		put32(p + 40, c->carry_len[0]);
		put32(p + 44, c->carry_len[1]);
		put32(p + 48, c->tls_len[0]);
		put32(p + 52, c->tls_len[1]);
		put64(p + 56, c->dgrams[0]);
		put64(p + 64, c->dgrams[1]);
		put32(p + 72, c->pending);
		p += TLP_HO_CONN_FIXED;
		memcpy(p, c->listener, nl);
		p += nl;
		memcpy(p, c->pool, np);
		p += np;
		memcpy(p, c->srv, ns);
		p += ns;
		memcpy(p, &c->peer, c->peer_len);
		p += c->peer_len;
		for (int s = 0; s < 2; s++) {
			if (c->carry_len[s])
				memcpy(p, c->carry[s], c->carry_len[s]);
			p += c->carry_len[s];
		}
		for (int s = 0; s < 2; s++) {
			if (c->tls_len[s])
				memcpy(p, c->tls[s], c->tls_len[s]);
			p += c->tls_len[s];
		}
		break;
	}
	}
	return (int)total;
}

/* Copy a name of len bytes from p; no NUL inside. */
static int take_name(char *dst, const uint8_t *p, uint32_t len)
{
	if (len > TLP_HO_NAME_MAX || memchr(p, '\0', len))
		return -1;
	memcpy(dst, p, len);
	dst[len] = '\0';
	return 0;
}

static int decode_conn(const uint8_t *b, size_t n, struct tlp_ho_conn *c)
{
	uint32_t nl, np, ns, na;
	uint64_t need;
	const uint8_t *p;

	if (n < TLP_HO_CONN_FIXED)
		return -EPROTO;
	c->flags = get32(b);
	c->server = get32(b + 4);
	c->bytes[0] = get64(b + 8);
	c->bytes[1] = get64(b + 16);
	c->age_ns = get64(b + 24);
	nl = get16(b + 32);
	np = get16(b + 34);
	ns = get16(b + 36);
	na = get16(b + 38);
	c->carry_len[0] = get32(b + 40);
	c->carry_len[1] = get32(b + 44);
	c->tls_len[0] = get32(b + 48);
	c->tls_len[1] = get32(b + 52);
	c->dgrams[0] = get64(b + 56);
	c->dgrams[1] = get64(b + 64);
	c->pending = get32(b + 72);
	if (!flags_ok(c->flags) || !kind_ok(c) || c->carry_len[0] > TLP_HO_CARRY_MAX ||
	    c->carry_len[1] > TLP_HO_CARRY_MAX || na > sizeof c->peer ||
	    c->tls_len[0] > TLP_HO_TLS_MAX || c->tls_len[1] > TLP_HO_TLS_MAX)
		return -EPROTO;
	need = (uint64_t)TLP_HO_CONN_FIXED + nl + np + ns + na + c->carry_len[0] + c->carry_len[1] +
	       c->tls_len[0] + c->tls_len[1];
	if (need != n)
		return -EPROTO;
	p = b + TLP_HO_CONN_FIXED;
	if (take_name(c->listener, p, nl) < 0 || take_name(c->pool, p + nl, np) < 0 ||
	    take_name(c->srv, p + nl + np, ns) < 0)
		return -EPROTO;
	p += nl + np + ns;
	memset(&c->peer, 0, sizeof c->peer);
	memcpy(&c->peer, p, na);
	c->peer_len = (uint16_t)na;
	if (!addr_ok(&c->peer, na))
		return -EPROTO;
	p += na;
	c->carry[0] = c->carry_len[0] ? p : NULL;
	p += c->carry_len[0];
	c->carry[1] = c->carry_len[1] ? p : NULL;
	p += c->carry_len[1];
	c->tls[0] = c->tls_len[0] ? p : NULL;
	p += c->tls_len[0];
	c->tls[1] = c->tls_len[1] ? p : NULL;
	return 0;
}

int tlp_ho_decode(const struct tlp_ho_hdr *h, const uint8_t *b, size_t n, struct tlp_ho_msg *m)
{
	uint32_t k;

	if (!h || !m || (n && !b) || n != h->len)
		return -EINVAL;
	memset(m, 0, offsetof(struct tlp_ho_msg, u));
	m->type = h->type;
	switch (h->type) {
	case TLP_HO_HELLO:
		if (n != 8 || get32(b + 4))
			return -EPROTO;
		m->u.hello.pid = get32(b);
		return 0;
	case TLP_HO_END:
		if (n != 8)
			return -EPROTO;
		m->u.end.handed = get32(b);
		m->u.end.left = get32(b + 4);
		return 0;
	case TLP_HO_REFUSE:
		if (n < 4)
			return -EPROTO;
		k = get16(b + 2);
		if (k > TLP_HO_TEXT_MAX || 4 + k != n || memchr(b + 4, '\0', k))
			return -EPROTO;
		m->u.refuse.reason = (uint16_t)get16(b);
		memcpy(m->u.refuse.text, b + 4, k);
		m->u.refuse.text[k] = '\0';
		return 0;
	case TLP_HO_LISTENER:
		if (n < 4)
			return -EPROTO;
		k = get16(b + 2);
		if (!k || k > sizeof m->u.listener.addr || 4 + k != n)
			return -EPROTO;
		m->u.listener.shard = (uint16_t)get16(b);
		m->u.listener.addr_len = (uint16_t)k;
		memset(&m->u.listener.addr, 0, sizeof m->u.listener.addr);
		memcpy(&m->u.listener.addr, b + 4, k);
		return addr_ok(&m->u.listener.addr, k) ? 0 : -EPROTO;
	case TLP_HO_LISTENERS_END:
		if (n != 4)
			return -EPROTO;
		m->u.lend.count = get32(b);
		return 0;
	case TLP_HO_ACK:
		if (n != 4)
			return -EPROTO;
		m->u.ack.count = get32(b);
		return 0;
	case TLP_HO_READY:
		return n == 0 ? 0 : -EPROTO;
	case TLP_HO_CONN:
		return decode_conn(b, n, &m->u.conn);
	default:
		return -EPROTO;
	}
}
