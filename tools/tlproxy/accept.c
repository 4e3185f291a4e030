/* tools/tlproxy/accept.c: listeners and accepts: the limits (max_conns, descriptors) with held clients and stopped accepts, allow/deny, and listening on what a generation lists. */
/* Calls: accept -> tls, peek, backend, conn, wheel, state, world. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "accept.h"
#include "backend.h"
#include "conn.h"
#include "netlist.h"
#include "peek.h"
#include "tls.h"
#include "wheel.h"

/*
 * At a limit the proxy stops accepting, rather than accept and close, as
 * HAProxy does: clients past it wait in the kernel's listen backlog and
 * are accepted once there is room. The limits are the process's and each
 * listener's max_conns, and the descriptors: a connect or an accept that
 * fails for want of one (TLP_BLAME_FDS) is the proxy's trouble, never a
 * server's. The accept that brought a client past a limit is stopped
 * (tl_stop), and that client, with any its accept had already taken, is
 * held: accepted, nothing read, not counted, first in line for the room
 * (up to HELD_MAX a shard, the table's spare; past that one is closed as
 * `limit`). A shard's table is a limit too: it admits at most admit_cap
 * clients (max_conns, or 15,872 without, 1,024 without TCP listeners:
 * main.c), so that held ones always find
 * a slot. A client
 * that has its server chosen and finds no descriptor to connect with is
 * held the same way (F_FDWAIT), its server slot given back and no retry
 * spent. Room is looked for when a connection of the shard ends (its
 * descriptors and counts are back), when another shard's does (a
 * TLP_MSG_RESUME to every shard that holds or stopped something), and at
 * each sweep tick (descriptors freed elsewhere). Then held clients go
 * first, oldest first, and a listener's accept starts again once none of
 * its clients is held and it has room; one that overshoots is held and
 * stops it again.
 */

static void admitted(struct tlp_shard *sh, struct tlp_conn *c);

/* Count c in the limits, or say it must wait (0). */
static int admit(struct tlp_shard *sh, struct tlp_conn *c)
{
	struct tlp_world *w = &tlp_w;
	const struct tlp_lrt *lr = c->lr;

	if (sh->fd_short || sh->nadm >= sh->admit_cap)
		return 0;
	if (w->max_conns &&
	    atomic_fetch_add_explicit(&w->conns, 1, memory_order_relaxed) >= w->max_conns) {
		atomic_fetch_sub_explicit(&w->conns, 1, memory_order_relaxed);
		return 0;
	}
	if (lr->cfg->max_conns && atomic_fetch_add_explicit(&lr->gl->conns, 1, memory_order_relaxed) >=
					  lr->cfg->max_conns) {
		atomic_fetch_sub_explicit(&lr->gl->conns, 1, memory_order_relaxed);
		if (w->max_conns)
			atomic_fetch_sub_explicit(&w->conns, 1, memory_order_relaxed);
		return 0;
	}
	if (w->max_conns)
		c->flags |= F_WCOUNT;
	if (lr->cfg->max_conns)
		c->flags |= F_LCOUNT;
	c->flags |= F_ADM;
	sh->nadm++;
	return 1;
}

/* Would a client of listener gli be let in now, behind no held one? */
static int room_for(struct tlp_shard *sh, uint32_t gli)
{
	const struct tlp_lrt *lr = gli < TLP_REG_LISTENERS ? sh->gen->by_gl[gli] : NULL;

	if (sh->fd_short || sh->nadm >= sh->admit_cap)
		return 0;
	if (tlp_w.max_conns &&
	    atomic_load_explicit(&tlp_w.conns, memory_order_relaxed) >= tlp_w.max_conns)
		return 0;
	if (lr && lr->cfg->max_conns &&
	    atomic_load_explicit(&lr->gl->conns, memory_order_relaxed) >= lr->cfg->max_conns)
		return 0;
	for (uint32_t ci = sh->held_head; ci != NONE; ci = sh->c[ci].qnext)
		if (sh->c[ci].lr->gl->idx == gli)
			return 0;
	return 1;
}


/*
 * A listener's accept that waits for room: PZ_STOPPING (tl_stop asked, its
 * terminal not come), PZ_STOPPED (to be started again once its listener
 * has room), PZ_ONESHOT (started again as a one-shot accept, tl_accept).
 * After a shortage of descriptors, for TIGHT_NS after the last, accepts are
 * started again one client at a time: a multishot accept takes every client
 * of the backlog it can find descriptors for, and with the last few taken
 * by clients that then have none to connect with, no one moves until a
 * connection ends. One at a time, each client is accepted only after the
 * one before has its connect.
 */
enum { PZ_STOPPING, PZ_STOPPED, PZ_ONESHOT };

static struct tlp_paused *pz_find(struct tlp_shard *sh, tl_handle h)
{
	for (uint32_t i = 0; i < sh->npz; i++)
		if (tl_handle_eq(sh->pz[i].h, h))
			return &sh->pz[i];
	return NULL;
}

static struct tlp_paused *pz_add(struct tlp_shard *sh, const tl_completion *e, int st)
{
	if (sh->npz == sh->pzcap) {
		uint32_t cap = sh->pzcap ? 2 * sh->pzcap : 16;
		struct tlp_paused *n = realloc(sh->pz, cap * sizeof *n);

		if (!n)
			return NULL;
		sh->pz = n;
		sh->pzcap = cap;
	}
	sh->pz[sh->npz] = (struct tlp_paused){.h = e->handle, .tok = e->token, .st = st};
	tlp_set_paused(sh);
	sh->resume_due = 1; /* room may have come before the flag was seen */
	return &sh->pz[sh->npz++];
}

/* Stop the accept that brought e until there is room. */
static void pause_accept(struct tlp_shard *sh, const tl_completion *e)
{
	struct tlp_paused *z = pz_find(sh, e->handle);

	if (z)
		return; /* stopping, or a one-shot: it starts again with room */
	if (!(e->flags & TL_F_TERMINAL) && tl_stop(sh->loop, e->op) != 0)
		return; /* ended meanwhile */
	/* No memory for the entry: the accept, stopped, would never start
	 * again; so it goes on, and each client past the limit is held. */
	if (!pz_add(sh, e, e->flags & TL_F_TERMINAL ? PZ_STOPPED : PZ_STOPPING) &&
	    !(e->flags & TL_F_TERMINAL)) {
		tl_op op;

		tl_accept_start(sh->loop, e->handle, e->token, &op);
	}
}

/* An accept's terminal (no client with it): one stopped, or a one-shot
 * that failed, starts again when there is room; one cancelled by a close
 * has no handle left to start on. */
static void accept_ended(struct tlp_shard *sh, const tl_completion *e)
{
	struct tlp_paused *z = pz_find(sh, e->handle);

	if (!z)
		return;
	if (e->result == -ECANCELED && z->st == PZ_ONESHOT) {
		*z = sh->pz[--sh->npz];
		return;
	}
	if (e->result < 0 && tlp_blame((int)e->result) == TLP_BLAME_FDS)
		tlp_fd_short_set(sh, (int)e->result);
	z->st = PZ_STOPPED;
	sh->resume_due = 1;
}

/* Held clients first, oldest first, then the accepts stopped. */
void tlp_resume(struct tlp_shard *sh)
{
	uint32_t next;

	sh->resume_due = 0;
	if (sh->resuming)
		return;
	sh->resuming = 1;
	/* Out of descriptors, try again only once one may be free (a
	 * connection ended, here or elsewhere, or a tick passed): an accept
	 * started again would only fail again, at once. */
	if (sh->fd_freed)
		sh->fd_short = 0;
	sh->fd_freed = 0;
	for (uint32_t ci = sh->held_head; ci != NONE && !sh->fd_short && !sh->stopping; ci = next) {
		struct tlp_conn *c = &sh->c[ci];

		next = c->qnext;
		if (c->flags & F_FDWAIT) {
			tlp_held_del(sh, c);
			c->flags &= ~F_FDWAIT;
			tlp_assign(sh, c); /* held again, first, if still short */
			continue;
		}
		if (!admit(sh, c))
			continue;
		tlp_held_del(sh, c);
		admitted(sh, c);
	}
	for (uint32_t i = 0; i < sh->npz && !sh->stopping;) {
		struct tlp_paused *z = &sh->pz[i];
		tl_op op;

		if (z->st != PZ_STOPPED ||
		    !room_for(sh, (uint32_t)(tl_token_data(z->tok) & 0xffff))) {
			i++;
			continue;
		}
		/* A handle a reload, drain or takeover closed meanwhile refuses:
		 * nothing to start then. */
		if (tlp_mono_ns() < sh->fd_tight_until) {
			if (tl_accept(sh->loop, z->h, z->tok, &op) == 0) {
				z->st = PZ_ONESHOT;
				i++;
				continue;
			}
		} else {
			tl_accept_start(sh->loop, z->h, z->tok, &op);
		}
		*z = sh->pz[--sh->npz];
	}
	if (sh->nheld || sh->npz)
		tlp_set_paused(sh);
	sh->resuming = 0;
}

static void refuse(struct tlp_shard *sh, const struct tlp_lrt *lr, tl_handle h, const tl_addr *peer,
		   int cause)
{
	tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
	count_err(sh, cause);
	tlp_log_conn(sh, lr, peer, NULL, NULL, tl_now(sh->loop), cause, 0, 0, NULL);
}

/* A client counted in the limits: read its header or hello, or route it. */
static void admitted(struct tlp_shard *sh, struct tlp_conn *c)
{
	const struct tlp_lrt *lr = c->lr;

	/* Its time starts now: held, it was in the backlog, as far as the
	 * timeouts go. */
	c->t0 = tl_now(sh->loop);
	c->t_state = sh->tick;
	if (lr->tls) {
		tlp_tls_start(sh, c);
		return;
	}
	if (lr->peek) {
		if (tlp_netset_match(&lr->cfg->proxy_from, &c->peer.sa) == 1)
			c->flags |= F_NEED_PP;
		if (c->flags & F_NEED_PP || lr->cfg->nsni) {
			c->state = C_PEEK;
			tlp_peek_next(sh, c);
			return;
		}
	}
	c->state = C_CONNECT;
	c->pc = lr->pool_cfg;
	if (!c->gp || !c->pc) {
		tlp_conn_end(sh, c, TLP_END_NO_ROUTE, 0);
		return;
	}
	tlp_assign(sh, c);
}

void tlp_on_listen(tl_shard *s, const tl_completion *e)
{
	struct tlp_shard *sh = SH(s);
	uint64_t t = tl_token_data(e->token);
	uint32_t gli = (uint32_t)(t & 0xffff), ai = (uint32_t)((t >> 16) & 0xff);
	const struct tlp_lrt *lr;
	struct tlp_conn *c;
	tl_handle h;

	if (e->kind != TL_K_ACCEPT)
		return;
	if ((e->flags & TL_F_TERMINAL) && (e->result < 0 || (e->flags & TL_F_STOPPED))) {
		accept_ended(sh, e);
		return;
	}
	if (e->result < 0) {
		/* No descriptor for the client: it stays in the backlog, and
		 * this accept stops until one is free (the driver would try
		 * again by itself, but one accepted with the last descriptor
		 * would have none to connect with). */
		if (tlp_blame((int)e->result) == TLP_BLAME_FDS) {
			tlp_fd_short_set(sh, (int)e->result);
			pause_accept(sh, e);
		}
		return;
	}
	if (e->flags & TL_F_TERMINAL) {
		/* A one-shot accept (accepting one at a time) brought a client:
		 * the next once this one has its turn (resume). */
		struct tlp_paused *z = pz_find(sh, e->handle);

		if (z) {
			z->st = PZ_STOPPED;
			sh->resume_due = 1;
		}
	}
	h = e->u.accept.conn;
	lr = gli < TLP_REG_LISTENERS ? sh->gen->by_gl[gli] : NULL;
	if (!lr || sh->stopping) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_SHUTDOWN);
		return;
	}
	if (tlp_acl_check(&lr->cfg->allow, &lr->cfg->deny, &e->u.accept.peer.sa) != 1) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_DENIED);
		return;
	}
	c = tlp_conn_new(sh);
	if (!c) {
		refuse(sh, lr, h, &e->u.accept.peer, TLP_END_BUSY);
		return;
	}
	sh->d_conns++;
	c->h[0] = h;
	c->peer = e->u.accept.peer;
	c->laddr = (uint8_t)ai;
	c->t0 = tl_now(sh->loop);
	c->gen = sh->gen;
	tlp_gen_hold(sh, c->gen);
	c->lr = lr;
	c->gp = lr->pool;
	if (sh->nheld || !admit(sh, c)) {
		/* Past a limit (or behind held clients): held, and this
		 * listener's accept stops. */
		if (sh->nheld >= HELD_MAX) {
			tlp_conn_end(sh, c, TLP_END_LIMIT, 0);
		} else {
			tlp_held_add(sh, c, 0);
			sh->resume_due = 1;
		}
		pause_accept(sh, e);
		return;
	}
	admitted(sh, c);
}

/* A predecessor with more shards handed over more sockets of an address
 * than this process has shards: shard k accepts on those numbered k + N,
 * k + 2N, ... as well, so that none of them is closed with clients queued
 * in it. */
static void listen_extra(struct tlp_shard *sh, const struct tlp_lrt *lr, uint32_t ai)
{
	const struct tlp_endpoint *ep = &lr->cfg->listen[ai];

	for (uint32_t k = sh->id + tlp_w.nshards; sh->nxlh < TLP_MAX_INHERIT; k += tlp_w.nshards) {
		int inh = tlp_inherited_nth(ep, k), fd;
		tl_handle h;
		tl_op op;

		if (inh < 0)
			return;
		fd = fcntl(inh, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			return;
		if (tl_adopt(sh->loop, fd, &h) < 0) {
			close(fd);
			continue;
		}
		if (tl_accept_start(sh->loop, h, tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16),
				    &op) < 0) {
			tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			continue;
		}
		sh->xtok[sh->nxlh] = tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16);
		sh->xlh[sh->nxlh++] = h;
	}
}

static int listen_one(struct tlp_shard *sh, const struct tlp_lrt *lr, uint32_t ai)
{
	const struct tlp_listener_cfg *lc = lr->cfg;
	const struct tlp_endpoint *ep = &lc->listen[ai];
	const struct tlp_socket_cfg *so = &lc->socket;
	tl_sockopt_val opts[8];
	uint32_t n = 0;
	tl_listen_opts lo = {.backlog = 4096, .reuseport = 1};
	tl_handle h;
	tl_op op;
	int r, inh, own = 0;

	if (ep->kind == TLP_EP_UNIX && sh->id != 0)
		return 0; /* a path has one listener: shard 0's */
	if (ep->kind == TLP_EP_IP) {
		if (!so->nodelay)
			opts[n++] = (tl_sockopt_val){TL_SO_NODELAY, 0};
		if (so->keepalive) {
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPALIVE, 1};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPIDLE, so->ka_idle_s};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPINTVL, so->ka_interval_s};
			opts[n++] = (tl_sockopt_val){TL_SO_KEEPCNT, so->ka_count};
		}
		if (so->rcvbuf)
			opts[n++] = (tl_sockopt_val){TL_SO_RCVBUF, so->rcvbuf};
		if (so->sndbuf)
			opts[n++] = (tl_sockopt_val){TL_SO_SNDBUF, so->sndbuf};
	}
	/* A takeover hands over one socket per shard of the old process: this
	 * shard takes its own, if there is one for it. */
	inh = sh->id ? tlp_inherited_nth(ep, sh->id) : -1;
	if (inh < 0)
		inh = tlp_inherited(ep);
	else
		own = 1;
	if (inh >= 0 && ep->kind == TLP_EP_IP && sh->id != 0 && !own) {
		/* A socket with SO_REUSEPORT (systemd's ReusePort=yes): the
		 * other shards join its group with sockets of their own, and the
		 * kernel spreads connections over the shards. Without it, or if
		 * the group refuses us, they accept on the one socket too. */
		int one = 0;
		socklen_t len = sizeof one;

		if (getsockopt(inh, SOL_SOCKET, SO_REUSEPORT, &one, &len) == 0 && one) {
			tl_addr a;

			memset(&a, 0, sizeof a);
			memcpy(&a, &ep->addr,
			       ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
			lo.v6only = a.sa.sa_family == AF_INET6;
			lo.sockopts = opts;
			lo.nsockopts = n;
			if (tl_tcp_listen(sh->loop, &a, &lo, &h) == 0)
				inh = -2;
		}
	}
	if (inh == -2) {
		r = 0;
	} else if (inh >= 0) {
		/* Handed over by systemd: adopt a descriptor of that socket. */
		int fd = fcntl(inh, F_DUPFD_CLOEXEC, 3);

		r = fd < 0 ? -errno : tl_adopt(sh->loop, fd, &h);
		if (r < 0 && fd >= 0)
			close(fd);
		for (uint32_t k = 0; r == 0 && k < n; k++)
			tl_sockopt_set(sh->loop, h, opts[k].opt, opts[k].value);
	} else if (ep->kind == TLP_EP_UNIX) {
		lo.reuseport = 0;
		r = tl_unix_listen(sh->loop, ep->addr.un.sun_path, &lo, &h);
	} else {
		tl_addr a;

		memset(&a, 0, sizeof a);
		memcpy(&a, &ep->addr, ep->addr.sa.sa_family == AF_INET ? sizeof a.in : sizeof a.in6);
		lo.v6only = a.sa.sa_family == AF_INET6;
		lo.sockopts = opts;
		lo.nsockopts = n;
		r = tl_tcp_listen(sh->loop, &a, &lo, &h);
	}
	if (r < 0) {
		fprintf(stderr, "tlproxy: listener %s: cannot listen on %s: %s\n", lc->name,
			ep->text, tl_strerror(r));
		return r;
	}
	r = tl_accept_start(sh->loop, h, tl_token(TLP_H_LISTEN, lr->gl->idx | (uint64_t)ai << 16),
			    &op);
	if (r < 0) {
		tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		fprintf(stderr, "tlproxy: listener %s: cannot accept on %s: %s\n", lc->name,
			ep->text, tl_strerror(r));
		return r;
	}
	sh->lh[lr->gl->idx][ai] = h;
	if (own || (sh->id == 0 && inh >= 0))
		listen_extra(sh, lr, ai);
	return 0;
}

/* Listen on what generation g lists that this shard does not listen on
 * yet, and stop listening on what it no longer lists. */
int tlp_shard_listen(tl_shard *s, struct tlp_gen *g)
{
	struct tlp_shard *sh = SH(s);
	static const tl_handle none = {0};
	int rc = 0;

	for (uint32_t gi = 0; gi < tlp_w.ngl; gi++) {
		const struct tlp_lrt *lr = g->by_gl[gi];

		for (uint32_t ai = 0; ai < TLP_MAX_LISTEN; ai++) {
			tl_handle h = sh->lh[gi][ai];
			/* UDP listeners are udp.c's. */
			int want = lr && ai < lr->cfg->nlisten && lr->cfg->proto != TLP_PROTO_UDP;

			if (!want && !tl_handle_eq(h, none)) {
				tl_close(sh->loop, h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
				sh->lh[gi][ai] = none;
			} else if (want && tl_handle_eq(h, none) && !sh->draining) {
				int r = listen_one(sh, lr, ai);

				if (r < 0 && !rc)
					rc = r;
			}
		}
	}
	return rc;
}
