/* lib/dgram.c: datagram handles (turnloop/dgram.h): bind, connect, sends and receives; the drivers batch them (docs/CONTRACT-DGRAM.md). */
#include <errno.h>
#include <string.h>
#include "core.h"

int tl_udp_bind_opts(tl_loop *l, const tl_addr *addr, const tl_udp_opts *opts, tl_handle *out)
{
	tl_listen_opts def = {0};
	uint32_t flags = opts ? opts->flags : 0;
	if (!tl__valid_addr(addr) || !out || (flags & ~TL_UDP_FLAGS_ALL))
		return -EINVAL;
	if ((flags & TL_UDP_GRO) && !(tl_loop_caps(l) & TL_CAP_UDP_GRO))
		return -EOPNOTSUPP;
	struct tl_open_spec s = {.kind = TL_OPEN_UDP, .addr = addr, .opts = &def,
				 .udp_flags = flags};
	int r = tl__open_bound(l, TL_H_UDP, &s, out);
	if (r == 0 && (flags & TL_UDP_PKTINFO))
		tl__handle_get(l, *out)->flags |= TL_HF_PKTINFO;
	return r;
}

int tl_udp_bind(tl_loop *l, const tl_addr *addr, tl_handle *out)
{
	return tl_udp_bind_opts(l, addr, NULL, out);
}

int tl_udp_connect(tl_loop *l, tl_handle hid, const tl_addr *peer)
{
	int err;
	struct tl_hslot *h = tl__stream_get(l, hid, TL_H_UDP, &err);
	if (!h)
		return err;
	if (!tl__valid_addr(peer))
		return -EINVAL;
	if (!l->dv->dgram_connect)
		return -ENOTSUP;
	return l->dv->dgram_connect(l->d, h, peer);
}

int tl_udp_sendmsg(tl_loop *l, tl_handle hid, const tl_udp_msg *m, uint64_t token, tl_op *oid)
{
	int err;
	if (!m || (!m->buf && m->len) || (m->to && !tl__valid_addr(m->to)) || !oid)
		return -EINVAL;
	if (m->from && (!tl__valid_addr(m->from) ||
			(m->to && m->to->sa.sa_family != m->from->sa.sa_family)))
		return -EINVAL;
	if (m->segment && !(tl_loop_caps(l) & TL_CAP_UDP_GSO))
		return -EOPNOTSUPP;
	struct tl_hslot *h = tl__stream_get(l, hid, TL_H_UDP, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_SEND, TL_K_SEND, token, &o);
	if (r < 0)
		return r;
	o->u.dg.buf = (uint8_t *)(uintptr_t)m->buf;
	o->u.dg.len = m->len;
	if (m->to)
		o->u.dg.addr = *m->to;
	else
		memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	if (m->from)
		o->u.dg.local = *m->from;
	else
		memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
	o->u.dg.seg = m->segment;
	return tl__stream_submit(l, h, o, oid);
}

int tl_udp_send(tl_loop *l, tl_handle hid, const void *buf, uint32_t len, const tl_addr *to,
		uint64_t token, tl_op *oid)
{
	tl_udp_msg m = {.buf = buf, .len = len, .to = to};
	return tl_udp_sendmsg(l, hid, &m, token, oid);
}

static int recv_common(tl_loop *l, tl_handle hid, void *buf, uint32_t len, uint16_t flags,
		       uint64_t token, tl_op *oid)
{
	int err;
	if ((buf && !len) || !oid)
		return -EINVAL;
	struct tl_hslot *h = tl__stream_get(l, hid, TL_H_UDP, &err);
	if (!h)
		return err;
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_RECV, TL_K_RECV, token, &o);
	if (r < 0)
		return r;
	if (!buf)
		flags |= TL_OPF_POOLED;
	o->flags |= flags;
	o->u.dg.buf = buf;
	o->u.dg.len = len;
	memset(&o->u.dg.addr, 0, sizeof o->u.dg.addr);
	memset(&o->u.dg.local, 0, sizeof o->u.dg.local);
	o->u.dg.full = o->u.dg.seg = 0;
	return tl__stream_submit(l, h, o, oid);
}

int tl_udp_recv(tl_loop *l, tl_handle hid, void *buf, uint32_t len, uint64_t token, tl_op *oid)
{
	return recv_common(l, hid, buf, len, 0, token, oid);
}

int tl_udp_recv_pooled(tl_loop *l, tl_handle hid, uint64_t token, tl_op *oid)
{
	return recv_common(l, hid, NULL, 0, 0, token, oid);
}

int tl_udp_recv_start(tl_loop *l, tl_handle hid, uint64_t token, tl_op *oid)
{
	return recv_common(l, hid, NULL, 0, TL_OPF_MULTI, token, oid);
}
