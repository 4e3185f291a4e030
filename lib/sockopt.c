/* lib/sockopt.c: socket control (contract 4.8): options, peer address, abortive close, descriptor. */
#include <errno.h>
#include <stdint.h>
#include "core.h"

/*
 * Every option is checked here, once, against the kinds of handle that take
 * it and its range, so that a driver only applies or reads it: the kernel
 * drivers with setsockopt/getsockopt (drivers/sock.c), the simulation driver
 * by keeping the values per socket. The lists of tl_listen_opts and
 * tl_connect_opts go through the same table before the socket exists.
 */

#define K_STREAMS (TL_SOK_TCP | TL_SOK_TCP_LISTEN)
#define K_BUFS (K_STREAMS | TL_SOK_UNIX | TL_SOK_UDP)
#define K_IP (K_STREAMS | TL_SOK_UDP)

static const struct optdef {
	unsigned kinds; /* TL_SOK_* that take it */
	int64_t lo, hi;
} defs[] = {
	[0] = {0, 0, 0}, /* no option 0 */
	[TL_SO_NODELAY] = {K_STREAMS, 0, 1},
	[TL_SO_KEEPALIVE] = {K_STREAMS, 0, 1},
	/* Linux's own limits (MAX_TCP_KEEPIDLE, _KEEPINTVL, _KEEPCNT). */
	[TL_SO_KEEPIDLE] = {K_STREAMS, 1, 32767},
	[TL_SO_KEEPINTVL] = {K_STREAMS, 1, 32767},
	[TL_SO_KEEPCNT] = {K_STREAMS, 1, 127},
	[TL_SO_USER_TIMEOUT] = {K_STREAMS, 0, INT32_MAX},
	/* Linux doubles the value into an int: keep the double in range. */
	[TL_SO_RCVBUF] = {K_BUFS, 1, INT32_MAX / 2},
	[TL_SO_SNDBUF] = {K_BUFS, 1, INT32_MAX / 2},
	[TL_SO_MARK] = {K_IP, 0, UINT32_MAX},
	[TL_SO_TCLASS] = {K_IP, 0, 255},
	[TL_SO_DEFER_ACCEPT] = {TL_SOK_TCP_LISTEN, 0, INT32_MAX},
	[TL_SO_FASTOPEN] = {TL_SOK_TCP_LISTEN, 0, INT32_MAX},
};
_Static_assert(sizeof defs / sizeof defs[0] == TL_SO_COUNT_, "one entry per enum tl_sockopt");

unsigned tl__sok_of(const struct tl_hslot *h)
{
	int un = !!(h->flags & TL_HF_UNIX);
	switch (h->type) {
	case TL_H_STREAM:
		return un ? TL_SOK_UNIX : TL_SOK_TCP;
	case TL_H_LISTEN:
		return un ? TL_SOK_UNIX_LISTEN : TL_SOK_TCP_LISTEN;
	case TL_H_UDP:
		return TL_SOK_UDP;
	}
	return 0;
}

/* Is opt known and taken by kind? */
static int opt_taken(unsigned kind, int opt)
{
	return opt > 0 && opt < TL_SO_COUNT_ && (defs[opt].kinds & kind);
}

static int value_ok(int opt, int64_t v)
{
	if (v < defs[opt].lo || v > defs[opt].hi)
		return 0;
	/* The ECN bits belong to the kernel: Linux silently keeps its own for
	 * TCP, so a value with them set would not read back; refuse it on
	 * every kind alike. */
	if (opt == TL_SO_TCLASS && (v & 3))
		return 0;
	return 1;
}

int tl__sockopts_check(unsigned kind, const tl_sockopt_val *v, uint32_t n)
{
	if (n > TL_SOCKOPTS_MAX || (n && !v))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!opt_taken(kind, v[i].opt) || !value_ok(v[i].opt, v[i].value))
			return -EINVAL;
	return 0;
}

int tl__listen_opts_check(tl_loop *l, const tl_listen_opts *o, int is_unix,
			  struct tl_open_spec *s)
{
	if (is_unix) {
		if (o->defer_accept || o->fastopen || o->nsockopts)
			return -EINVAL;
		return 0;
	}
	if (!value_ok(TL_SO_DEFER_ACCEPT, o->defer_accept) ||
	    !value_ok(TL_SO_FASTOPEN, o->fastopen))
		return -EINVAL;
	int r = tl__sockopts_check(TL_SOK_TCP_LISTEN, o->sockopts, o->nsockopts);
	if (r < 0)
		return r;
	if ((o->nsockopts || o->defer_accept || o->fastopen) && !l->dv->sockopt)
		return -ENOTSUP;
	s->so = o->sockopts;
	s->nso = o->nsockopts;
	return 0;
}

int tl__connect_opts_check(tl_loop *l, const tl_addr *dst, const tl_connect_opts *o,
			   struct tl_open_spec *s)
{
	int fam = o->source.sa.sa_family;
	if (fam != AF_UNSPEC && fam != dst->sa.sa_family)
		return -EINVAL;
	if (fam == AF_UNSPEC && (o->bind_no_port || o->freebind || o->transparent))
		return -EINVAL;
	int r = tl__sockopts_check(TL_SOK_TCP, o->sockopts, o->nsockopts);
	if (r < 0)
		return r;
	if (o->nsockopts && !l->dv->sockopt)
		return -ENOTSUP;
	s->conn = o;
	s->so = o->sockopts;
	s->nso = o->nsockopts;
	return 0;
}

/* The socket handle behind id for an option call: NULL with *err set. */
static struct tl_hslot *sock_get(tl_loop *l, tl_handle id, int opt, int *err)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h) {
		*err = -ENOENT;
		return NULL;
	}
	if (!opt_taken(tl__sok_of(h), opt)) {
		*err = -EINVAL;
		return NULL;
	}
	if (!l->dv->sockopt) {
		*err = -ENOTSUP;
		return NULL;
	}
	return h;
}

int tl_sockopt_set(tl_loop *l, tl_handle id, int opt, int64_t value)
{
	int err;
	struct tl_hslot *h = sock_get(l, id, opt, &err);
	if (!h)
		return err;
	if ((h->flags & TL_HF_CLOSING) || !value_ok(opt, value))
		return -EINVAL;
	return l->dv->sockopt(l->d, h, 1, opt, &value);
}

int tl_sockopt_get(tl_loop *l, tl_handle id, int opt, int64_t *value)
{
	int err;
	struct tl_hslot *h = sock_get(l, id, opt, &err);
	if (!h)
		return err;
	if (!value)
		return -EINVAL;
	int64_t v = 0;
	int r = l->dv->sockopt(l->d, h, 0, opt, &v);
	if (r == 0)
		*value = v;
	return r;
}

int tl_peer_addr(tl_loop *l, tl_handle id, tl_addr *out)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (!out || h->type != TL_H_STREAM)
		return -EINVAL;
	if (h->flags & TL_HF_CONNECTING)
		return -EAGAIN;
	if (!l->dv->peer_addr)
		return -ENOTSUP;
	return l->dv->peer_addr(l->d, h, out);
}

int tl_close_abort(tl_loop *l, tl_handle id, uint64_t token)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_STREAM || (h->flags & TL_HF_CLOSING))
		return -EINVAL;
	int r = tl_close(l, id, token);
	/* After tl_close: the flag only matters at release, which comes
	 * when Closed is handed out, never inside this call. */
	if (r == 0)
		h->flags |= TL_HF_ABORT;
	return r;
}

int tl_handle_fd(tl_loop *l, tl_handle id)
{
	struct tl_hslot *h = tl__handle_get(l, id);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_LISTEN && h->type != TL_H_STREAM && h->type != TL_H_UDP)
		return -EINVAL;
	if (!(l->dv->caps & TL_CAP_OS))
		return -ENOTSUP;
	return h->fd;
}
