/* tools/tlproxy/health.c: active health checks (shard 0): a round per pool every interval, each check a connect with an optional send and expect (or, proto: udp, a datagram and its answer), rise and fall. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "proxyproto.h"
#include "plane.h"

/* Calls: health -> plane, world. */

enum { HOP_CONNECT = 1, HOP_WRITE, HOP_READ, HOP_CLOSE };

static inline uint64_t htok(uint32_t slot, int op)
{
	return tl_token(TLP_H_HEALTH, slot | (uint64_t)op << 24);
}

/* Count a check's result and move the server up or down. */
static void check_result(struct tlp_srv *s, int ok, const char *why)
{
	const struct tlp_pool_cfg *pc = s->pool->cfg;
	uint32_t rise = pc ? pc->health.rise : 1, fall = pc ? pc->health.fall : 1;

	tl_shard_counter_add(tlp_cp.s, tlp_w.st_checks + (ok ? 0 : 1), 1);
	if (ok) {
		s->h_bad = 0;
		s->h_ok++;
		if (!atomic_load(&s->health) && s->h_ok >= rise) {
			atomic_store(&s->health, 1);
			atomic_fetch_add(&s->pool->state_ver, 1);
			tl_shard_counter_add(tlp_cp.s, tlp_w.st_changes, 1);
			tlp_log("server %s is up (%u health checks passed in a row)", s->name,
				s->h_ok);
			tlp_cp_room(s->pool);
		}
	} else {
		s->h_ok = 0;
		s->h_bad++;
		if (atomic_load(&s->health) && s->h_bad >= fall) {
			atomic_store(&s->health, 0);
			atomic_fetch_add(&s->pool->state_ver, 1);
			tl_shard_counter_add(tlp_cp.s, tlp_w.st_changes, 1);
			tlp_log("server %s is down (health check: %s; %u failed in a row)",
				s->name, why, s->h_bad);
		}
	}
}

static void check_done(struct tlp_srv *s, int ok, const char *why)
{
	s->h_busy = 0;
	tl_close(tlp_cp.loop, s->h_h, htok(s->slot, HOP_CLOSE));
	s->h_h = TL_HANDLE_NONE;
	check_result(s, ok, why);
}

/* A check ended with error err: a failure if the server is to blame
 * (tlp_blame), else no result at all (the proxy's own trouble, such as no
 * descriptor to check with, says nothing of the server). */
static void check_error(struct tlp_srv *s, int err)
{
	if (tlp_blame(err) == TLP_BLAME_SERVER) {
		check_done(s, 0, tl_strerror(err));
		return;
	}
	s->h_busy = 0;
	tl_close(tlp_cp.loop, s->h_h, htok(s->slot, HOP_CLOSE));
	s->h_h = TL_HANDLE_NONE;
}

/*
 * A UDP probe (health.proto: udp): a datagram socket of its own, connected
 * to the server; health.send goes out as one datagram, and the check
 * passes on the first datagram back that begins with health.expect (any
 * datagram, without it). The server's ICMP port unreachable comes back as
 * the receive's -ECONNREFUSED: failed at once. Nothing back by the
 * timeout: failed, as a TCP check that hangs. 0, or a negative errno with
 * nothing left open.
 */
static int udp_start(struct tlp_srv *s, const struct tlp_pool_cfg *pc)
{
	tl_addr any;
	tl_handle h;
	tl_op op;
	int r;

	if (s->unix_path)
		return -EAFNOSUPPORT;
	memset(&any, 0, sizeof any);
	any.sa.sa_family = s->addr.sa.sa_family;
	if ((r = tl_udp_bind(tlp_cp.loop, &any, &h)) < 0)
		return r;
	if ((r = tl_udp_connect(tlp_cp.loop, h, &s->addr)) < 0 ||
	    (r = tl_udp_recv_pooled(tlp_cp.loop, h, htok(s->slot, HOP_READ), &op)) < 0 ||
	    (r = tl_udp_send(tlp_cp.loop, h, pc->health.send, pc->health.send_len, NULL,
			     htok(s->slot, HOP_WRITE), &op)) < 0) {
		tl_close(tlp_cp.loop, h, htok(s->slot, HOP_CLOSE));
		return r;
	}
	s->h_wq = 1;
	s->h_busy = 1;
	s->h_h = h;
	s->h_round = s->pool->health_round;
	return 0;
}

/* The datagram a UDP probe got back (n bytes at d): does it pass? */
static void udp_answer(struct tlp_srv *s, const struct tlp_pool_cfg *pc, const uint8_t *d, uint32_t n)
{
	uint32_t want = pc->health.expect_len;

	if (n < want || (want && memcmp(d, pc->health.expect, want) != 0))
		check_done(s, 0, "unexpected reply");
	else
		check_done(s, 1, "");
}

static void check_start(struct tlp_srv *s, const struct tlp_pool_cfg *pc)
{
	uint64_t dl = tl_now(tlp_cp.loop) + pc->health.timeout_ns;
	tl_handle h;
	tl_op op;
	int r;

	if (s->h_busy || atomic_load(&s->admin) == TLP_ADM_DISABLED)
		return;
	s->h_got = 0;
	s->h_wq = 0;
	if (pc->health.proto == TLP_PROTO_UDP) {
		if ((r = udp_start(s, pc)) == -EAFNOSUPPORT)
			check_result(s, 0, "a UDP probe cannot reach a Unix socket");
		else if (r < 0 && tlp_blame(r) == TLP_BLAME_SERVER)
			check_result(s, 0, tl_strerror(r));
		return;
	}
	if (s->unix_path)
		r = tl_unix_connect(tlp_cp.loop, s->path, dl, htok(s->slot, HOP_CONNECT), &h, &op);
	else
		r = tl_tcp_connect(tlp_cp.loop, &s->addr, dl, htok(s->slot, HOP_CONNECT), &h, &op);
	if (r < 0) {
		/* Not even a socket (descriptors, tables): the proxy's trouble,
		 * unless the kernel refused the connect at once. */
		if (tlp_blame(r) == TLP_BLAME_SERVER)
			check_result(s, 0, tl_strerror(r));
		return;
	}
	s->h_busy = 1;
	s->h_h = h;
	s->h_round = s->pool->health_round;
}

static void health_round(struct tlp_gpool *gp)
{
	const struct tlp_pool_cfg *pc = gp->cfg;

	if (!pc || !pc->health.enabled || !gp->view)
		return;
	/* What the last round left unfinished has timed out. */
	for (uint32_t i = 0; i < gp->view->n; i++) {
		struct tlp_srv *s = gp->view->e[i].srv;

		if (s->h_busy)
			check_done(s, 0, "timed out");
	}
	gp->health_round++;
	for (uint32_t i = 0; i < gp->view->n; i++)
		check_start(gp->view->e[i].srv, pc);
}

/* A round's checks that outlive the timeout have failed. */
static void health_timeouts(struct tlp_gpool *gp, uint64_t now)
{
	const struct tlp_pool_cfg *pc = gp->cfg;

	if (!pc || !pc->health.enabled || !gp->view || !gp->health_at)
		return;
	if (now < gp->health_at - pc->health.interval_ns + pc->health.timeout_ns)
		return;
	for (uint32_t i = 0; i < gp->view->n; i++) {
		struct tlp_srv *s = gp->view->e[i].srv;

		if (s->h_busy && s->h_round == gp->health_round)
			check_done(s, 0, "timed out");
	}
}

void tlp_on_health(tl_shard *sh, const tl_completion *e)
{
	uint64_t t = tl_token_data(e->token);
	uint32_t slot = (uint32_t)(t & 0xffffff);
	int op = (int)(t >> 24);
	struct tlp_srv *s = slot < tlp_w.nsrv ? tlp_w.srv[slot] : NULL;
	const struct tlp_pool_cfg *pc;
	tl_op id;

	(void)sh;
	if (!s || !s->h_busy || !tl_handle_eq(e->handle, s->h_h) || op == HOP_CLOSE) {
		if (e->kind == TL_K_READ && (e->flags & TL_F_LEASE) && e->result > 0)
			tl_lease_release(tlp_cp.loop, e->u.read.lease.id);
		else if (e->kind == TL_K_RECV && (e->flags & TL_F_LEASE))
			tl_lease_release(tlp_cp.loop, e->u.recv.lease.id);
		return;
	}
	pc = s->pool->cfg;
	if (e->kind == TL_K_RECV) { /* a UDP probe's answer */
		if (e->result < 0) {
			check_error(s, (int)e->result);
			return;
		}
		if (e->flags & TL_F_LEASE) {
			udp_answer(s, pc, e->u.recv.lease.data, (uint32_t)e->result);
			tl_lease_release(tlp_cp.loop, e->u.recv.lease.id);
		} else {
			udp_answer(s, pc, NULL, 0);
		}
		return;
	}
	switch (op) {
	case HOP_CONNECT: {
		uint32_t n = 0;

		if (e->result < 0) {
			check_error(s, (int)e->result);
			return;
		}
		/* Our own connection: a PROXY header without addresses. */
		if (pc && pc->proxy_protocol == TLP_PP_SEND_V1)
			n = (uint32_t)tlp_pp_build_v1(s->h_buf, sizeof s->h_buf, NULL, NULL);
		else if (pc && pc->proxy_protocol == TLP_PP_SEND_V2)
			n = (uint32_t)tlp_pp_build_v2(s->h_buf, sizeof s->h_buf, NULL, NULL);
		if (n) {
			if (tl_write(tlp_cp.loop, s->h_h, s->h_buf, n, htok(slot, HOP_WRITE), &id) < 0) {
				check_done(s, 0, "cannot write");
				return;
			}
			s->h_wq++;
		}
		if (pc && pc->health.send_len) {
			if (tl_write(tlp_cp.loop, s->h_h, pc->health.send, pc->health.send_len,
				     htok(slot, HOP_WRITE), &id) < 0) {
				check_done(s, 0, "cannot write");
				return;
			}
			s->h_wq++;
		}
		if (pc && pc->health.expect_len) {
			if (tl_read_start(tlp_cp.loop, s->h_h, htok(slot, HOP_READ), &id) < 0)
				check_done(s, 0, "cannot read");
			return;
		}
		if (!s->h_wq)
			check_done(s, 1, "");
		return;
	}
	case HOP_WRITE:
		s->h_wq--;
		if (e->result < 0) {
			check_error(s, (int)e->result);
			return;
		}
		/* Sent, and nothing to wait for: passed (a UDP probe waits
		 * for its answer). */
		if (!s->h_wq && !(pc && (pc->health.expect_len || pc->health.proto == TLP_PROTO_UDP)))
			check_done(s, 1, "");
		return;
	case HOP_READ:
		if (e->result > 0 && (e->flags & TL_F_LEASE)) {
			const uint8_t *d = e->u.read.lease.data;
			uint32_t n = (uint32_t)e->result, want;
			int ok = 1;

			want = pc ? pc->health.expect_len : 0;
			for (uint32_t i = 0; i < n && s->h_got < want; i++, s->h_got++)
				if (d[i] != (uint8_t)pc->health.expect[s->h_got])
					ok = 0;
			tl_lease_release(tlp_cp.loop, e->u.read.lease.id);
			if (!ok) {
				check_done(s, 0, "unexpected reply");
				return;
			}
			if (s->h_got >= want)
				check_done(s, 1, "");
			return;
		}
		if ((e->flags & TL_F_TERMINAL) && e->result < 0)
			check_error(s, (int)e->result);
		else if (e->flags & TL_F_TERMINAL)
			check_done(s, 0, "closed before the expected reply");
		return;
	default:
		return;
	}
}

void tlp_health_tick(struct tlp_gpool *gp, uint64_t now)
{
	const struct tlp_pool_cfg *pc = gp->cfg;

	health_timeouts(gp, now);
	if (now >= gp->health_at) {
		gp->health_at = now + pc->health.interval_ns;
		health_round(gp);
	}
}

void tlp_health_stop(void)
{
	/* Checks in flight end with their handles (the runtime's drain). */
	for (uint32_t i = 0; i < tlp_w.nsrv; i++) {
		struct tlp_srv *sv = tlp_w.srv[i];

		if (sv && sv->h_busy) {
			sv->h_busy = 0;
			tl_close(tlp_cp.loop, sv->h_h, htok(sv->slot, HOP_CLOSE));
		}
	}
}
