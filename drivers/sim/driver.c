/* drivers/sim/driver.c: the simulation driver's table of operations and its test controls (drivers/sim.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "os.h"
#include "sim_int.h"

/* ---- the driver interface ---- */

static int env_seed(uint64_t *seed)
{
	const char *e = getenv("TL_SIM_SEED");
	if (!e || !*e)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(e, &end, 0);
	if (errno || *end) {
		fprintf(stderr, "turnloop: TL_SIM_SEED=%s is not a number\n", e);
		return -EINVAL;
	}
	*seed = v;
	return 0;
}

static int sim_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out)
{
	uint64_t seed = cfg->sim_seed;
	struct tl_sim_faults f;
	tl__sim_faults_default(&f);
	if (env_seed(&seed) < 0 || tl__sim_faults_parse(&f, getenv("TL_SIM_FAULTS")) < 0)
		return -EINVAL;
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->loop = loop;
	d->wake = wake;
	d->f = f;
	/* Room for every handle plus as many connections queued on listeners. */
	d->nsocks = cfg->max_handles < (1u << 22) ? 2 * cfg->max_handles : (1u << 23);
	d->maxqueued = d->nsocks - cfg->max_handles;
	d->socks = calloc(d->nsocks, sizeof *d->socks);
	d->lwait = malloc(d->nsocks * sizeof *d->lwait);
	d->npipes = cfg->pipes;
	d->pipes = calloc(d->npipes, sizeof *d->pipes);
	if (!d->socks || !d->lwait || !d->pipes || tl__heap_init(&d->sched, d->nsocks) < 0) {
		free(d->socks);
		free(d->lwait);
		free(d->pipes);
		free(d);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < d->nsocks; i++) {
		d->socks[i].idx = i;
		d->socks[i].d = d;
		d->socks[i].next_free = i + 1 < d->nsocks ? i + 1 : TL_NIL;
	}
	d->sfree = 0;
	lock();
	d->order = tl__sim_w.created++;
	tl__sim_w.nloops++;
	unlock();
	d->seed = mix64(seed ^ mix64(0x5157ull + d->order));
	d->rng = d->seed;
	d->trace = FNV_OFF;
	*out = d;
	return 0;
}

static void sim_destroy(struct tl_drv *d)
{
	lock();
	/* The core released every handle; anything left (nothing, normally)
	 * is closed so that no other loop keeps a pointer into this one. */
	for (uint32_t i = 0; i < d->nsocks; i++)
		if (d->socks[i].type != SK_FREE && !d->socks[i].in_accq)
			tl__sim_close_sock(d, &d->socks[i]);
	if (--tl__sim_w.nloops == 0) {
		atomic_store(&tl__sim_w.clock, SIM_T0);
		tl__sim_w.created = 0;
		tl__sim_w.next_port = PORT_LO;
		tl__sim_w.bound = NULL;
	}
	unlock();
	for (uint32_t i = 0; i < d->nsocks; i++)
		free(d->socks[i].buf);
	tl__heap_free(&d->sched);
	for (uint32_t i = 0; i < d->npipes; i++)
		free(d->pipes[i]);
	free(d->pipes);
	free(d->socks);
	free(d->lwait);
	free(d);
}

static uint64_t sim_now(struct tl_drv *d)
{
	(void)d;
	return now_ns();
}

static struct sim_sock *sock_of(struct tl_drv *d, const struct tl_hslot *h)
{
	if (h->fd < 0 || (uint32_t)h->fd >= d->nsocks || d->socks[h->fd].type == SK_FREE)
		return NULL;
	return &d->socks[h->fd];
}

/*
 * Socket options. The simulation keeps every option per socket and reports
 * it as Linux would (buffer sizes doubled, TCP_DEFER_ACCEPT rounded to its
 * retransmission schedule), and accepted sockets start with their
 * listener's values, as Linux clones them; what an option does to traffic
 * (Nagle, keepalive probes, marks, traffic classes, window sizes, TFO,
 * deferred accepts) is not modelled, and nothing needs a capability. Every
 * address is this host's, so freebind and transparent change nothing.
 */

/* Linux keeps TCP_DEFER_ACCEPT as a count of SYN-ACK retransmissions (the
 * first after 1 s, each next one twice as late up to 120 s, at most 255 of
 * them) and reports the seconds that count covers: the value set, rounded
 * up to that schedule. */
static uint32_t defer_reported(int64_t secs)
{
	if (secs <= 0)
		return 0;
	uint64_t covered = 1, step = 1;
	for (int n = 1; (uint64_t)secs > covered && n < 255; n++) {
		step = step * 2 > 120 ? 120 : step * 2;
		covered += step;
	}
	return (uint32_t)covered;
}

static void so_set(struct sim_sock *s, int opt, int64_t v)
{
	if (opt == TL_SO_RCVBUF || opt == TL_SO_SNDBUF)
		v *= 2; /* as Linux reports it (the core keeps 2v within 32 bits) */
	else if (opt == TL_SO_DEFER_ACCEPT)
		v = defer_reported(v);
	s->so[opt] = (uint32_t)v;
}

static void so_list(struct sim_sock *s, const struct tl_open_spec *sp)
{
	for (uint32_t i = 0; i < sp->nso; i++)
		so_set(s, sp->so[i].opt, sp->so[i].value);
}

static int sim_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *sp)
{
	int r = 0;
	static const uint8_t types[] = {
		[TL_OPEN_TCP_LISTEN] = SK_LISTEN,  [TL_OPEN_UNIX_LISTEN] = SK_LISTEN,
		[TL_OPEN_TCP_STREAM] = SK_STREAM,  [TL_OPEN_UNIX_STREAM] = SK_STREAM,
		[TL_OPEN_UDP] = SK_UDP,
	};
	if ((unsigned)sp->kind >= sizeof types || !types[sp->kind])
		return -EINVAL;
	lock();
	struct sim_sock *s = NULL;
	if (tl__sim_draw(d, TL_SIM_OPEN_EMFILE) || !(s = tl__sim_sock_new(d, types[sp->kind]))) {
		r = -EMFILE;
		goto out;
	}
	switch (sp->kind) {
	case TL_OPEN_TCP_LISTEN:
		r = tl__sim_bind_ip(s, sp->addr, sp->opts->reuseport,
			    sp->addr->sa.sa_family == AF_INET6 && sp->opts->v6only);
		s->backlog = sp->opts->backlog > 0 ? (uint32_t)sp->opts->backlog : 511;
		so_list(s, sp);
		if (sp->opts->defer_accept)
			so_set(s, TL_SO_DEFER_ACCEPT, sp->opts->defer_accept);
		if (sp->opts->fastopen)
			so_set(s, TL_SO_FASTOPEN, sp->opts->fastopen);
		break;
	case TL_OPEN_UNIX_LISTEN:
		if (tl__sim_find_listener(d, NULL, sp->path)) {
			r = -EADDRINUSE; /* a live listener's path is not stale */
			break;
		}
		s->is_unix = 1;
		snprintf(s->path, sizeof s->path, "%s", sp->path);
		s->local.sa.sa_family = AF_UNIX;
		s->backlog = sp->opts->backlog > 0 ? (uint32_t)sp->opts->backlog : 511;
		tl__sim_reg_add(s);
		break;
	case TL_OPEN_TCP_STREAM:
		s->local.sa.sa_family = sp->addr->sa.sa_family;
		so_list(s, sp);
		if (sp->conn && sp->conn->source.sa.sa_family != AF_UNSPEC) {
			/* The port (0: picked) and a wildcard IP are settled at
			 * connect, as IP_BIND_ADDRESS_NO_PORT does; a fixed port
			 * is not checked against other connections. */
			s->local = sp->conn->source;
			s->src_bound = 1;
		}
		r = tl__sim_ring_init(s);
		break;
	case TL_OPEN_UNIX_STREAM:
		s->is_unix = 1;
		s->local.sa.sa_family = AF_UNIX;
		r = tl__sim_ring_init(s);
		break;
	case TL_OPEN_UDP:
		r = tl__sim_ring_init(s);
		if (r == 0)
			r = tl__sim_bind_ip(s, sp->addr, !!(sp->udp_flags & TL_UDP_REUSEPORT), 0);
		break;
	}
	if (r < 0) {
		tl__sim_sock_free(s);
		goto out;
	}
	h->fd = (int)s->idx;
	s->hidx = h->idx;
out:
	unlock();
	return r;
}

static int sim_attach(struct tl_drv *d, struct tl_hslot *h)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s)
		s->hidx = h->idx;
	unlock();
	return s ? 0 : -EBADF;
}

static void sim_release(struct tl_drv *d, struct tl_hslot *h)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s) {
		/* Linux has no reset for Unix-domain streams: their peer
		 * sees an end of stream (unless it left data unread). */
		s->aborting = (h->flags & TL_HF_ABORT) && !s->is_unix;
		tl__sim_close_sock(d, s);
	}
	h->fd = -1;
	unlock();
}

static int sim_local(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s)
		*out = s->local;
	unlock();
	return s ? 0 : -EBADF;
}

static int sim_peer(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	int r = 0;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (!s)
		r = -EBADF;
	else if (s->cs != CS_CONNECTED || s->broken)
		r = -ENOTCONN; /* as getpeername after a failed connect or a reset */
	else if (s->is_unix) {
		memset(out, 0, sizeof *out);
		out->sa.sa_family = AF_UNIX;
	} else
		*out = s->remote;
	unlock();
	return r;
}

static int sim_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s) {
		if (set)
			so_set(s, opt, *value);
		else
			*value = s->so[opt];
	}
	unlock();
	return s ? 0 : -EBADF;
}

static int start_connect(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	tl_addr dst;
	struct sim_sock *L;
	if (s->is_unix) {
		L = tl__sim_find_listener(d, NULL, o->u.conn.path);
		if (!L)
			return -ENOENT; /* no such socket file: refused at once, as Linux */
	} else {
		dst = tl__sim_dest_of(&o->u.conn.addr);
		/* A mapped destination is an IPv4 connection. */
		tl_addr route = tl__sim_unmapped(&dst);
		L = tl__sim_find_listener(d, &route, NULL);
		s->remote = dst;
		uint16_t port = 0;
		if (s->src_bound) {
			port = tl__sim_port_of(&s->local);
			/* A wildcard source IP: the host's address the route
			 * takes, which is the destination's (it is this host). */
			if (tl__sim_ip_any(&s->local))
				s->local = dst;
		} else {
			s->local = dst;
		}
		if (!port) {
			int p = tl__sim_pick_port(SK_LISTEN);
			if (p < 0)
				return p;
			port = (uint16_t)p;
		}
		tl__sim_set_port(&s->local, port);
	}
	tl__sim_q_push(d->loop, &s->whead, &s->wtail, o);
	if (!L || tl__sim_draw(d, TL_SIM_CONNECT_REFUSED)) {
		s->cs = CS_FAILED;
		s->conn_res = -ECONNREFUSED;
		tl__sim_sched(d, s);
		return 0;
	}
	if (tl__sim_can_establish(L) && tl__sim_establish(d, L, s) == 0)
		return 0;
	if (s->is_unix) {
		/* A Unix listener with a full queue: Linux answers a non-blocking
		 * connect with EAGAIN at once. */
		s->cs = CS_FAILED;
		s->conn_res = -EAGAIN;
		tl__sim_sched(d, s);
		return 0;
	}
	/* The accept queue is full: the handshake waits, as a SYN that Linux
	 * drops and the client retransmits, until an accept makes room or the
	 * connect is cancelled (its deadline). */
	s->cs = CS_WAITING;
	s->listener = L;
	tl__sim_list_append(&L->wait_head, &L->wait_tail, s);
	return 0;
}

static int sim_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int r = 0;
	/* No OS descriptors here: the core never hands us TL_OP_POLL (no
	 * TL_CAP_POLL); refuse it should it ever. */
	if (o->code == TL_OP_POLL)
		return -ENOTSUP;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (!s)
		r = -EBADF;
	else if (tl__sim_draw(d, TL_SIM_SUBMIT_ENOMEM))
		r = -ENOMEM;
	else if (tl__sim_draw(d, TL_SIM_SUBMIT_ENOBUFS))
		r = -ENOBUFS;
	if (r < 0)
		goto out;
	SO(o)->cancel = CX_NONE;
	if (o->code == TL_OP_CONNECT) {
		r = start_connect(d, s, o);
	} else if (is_rside(o)) {
		tl__sim_q_push(d->loop, &s->rhead, &s->rtail, o);
		if (s->rhead == o->idx)
			tl__sim_sched(d, s);
	} else {
		tl__sim_q_push(d->loop, &s->whead, &s->wtail, o);
		if (s->whead == o->idx) {
			/* Sometimes at once, as the epoll driver writes; sometimes
			 * at the next poll, as io_uring completes. */
			if (tl__sim_draw(d, TL_SIM_SYNC_WRITE))
				tl__sim_run_queue(d, s, &s->whead, &s->wtail);
			else
				tl__sim_sched(d, s);
		}
	}
out:
	unlock();
	return r;
}

static int64_t sim_try_write(struct tl_drv *d, struct tl_hslot *h, const void *buf, uint32_t len)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	int64_t r = s ? tl__sim_try_write(d, s, buf, len) : -EBADF;
	unlock();
	return r;
}

static int sim_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int r = 0;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s && o->code == TL_OP_SPLICE) {
		r = tl__sim_splice_cancel(d, s, h, o);
		unlock();
		return r;
	}
	if (!s || SO(o)->cancel ||
	    !tl__sim_q_has(d->loop, is_rside(o) ? s->rhead : s->whead, o))
		r = -ENOENT;
	else if (tl__sim_draw(d, TL_SIM_CANCEL_FAIL))
		r = -EAGAIN;
	else if (tl__sim_draw(d, TL_SIM_ASYNC_CANCEL)) {
		/* Acknowledged by a later poll, as io_uring does: the core must
		 * keep the op (and its memory) until then, and drop what the op
		 * still reports meanwhile. */
		SO(o)->cancel = tl__sim_below(d, 2) ? CX_RACE : CX_ACK;
		tl__sim_sched(d, s);
	} else {
		tl__sim_ack_cancel(d, s, o);
		/* Ops queued behind it may run now. */
		if (s->rhead != TL_NIL || s->whead != TL_NIL)
			tl__sim_sched(d, s);
	}
	unlock();
	return r;
}

/* Wait on the loop's notifier for real, at most timeout_ns (< 0: no
 * limit). Called with the world locked; unlocks while waiting. 1 if woken. */
static int real_wait(struct tl_drv *d, int64_t timeout_ns, int *err)
{
	unlock();
	int n = tl__os_notifier_wait(d->wake, timeout_ns);
	lock();
	d->st.real_waits++;
	*err = n < 0 ? n : 0;
	return n > 0;
}

static int sim_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	tl_loop *l = d->loop;
	uint32_t before = tl__drv_queued(l);
	int r = 0, woke = 0;
	lock();
	uint64_t start = now_ns();
	tl__sim_run_due(d, start);
	if (tl__drv_queued(l) != before || timeout_ns == 0) {
		/* No wait; the poll itself took a little time. */
		info->discovery_polls++;
		advance(start + d->f.poll_ns);
		goto out;
	}
	/* Nothing due: "wait". */
	info->waits++;
	uint64_t span = (uint64_t)timeout_ns > d->f.poll_ns ? (uint64_t)timeout_ns : d->f.poll_ns;
	uint64_t limit = timeout_ns > 0 ? start + span : UINT64_MAX;
	const struct tl_heap_ent *e = tl__heap_top(&d->sched);
	uint64_t next = e ? e->at : UINT64_MAX;
	if (d->f.shared_wait_us && (next != UINT64_MAX || limit != UINT64_MAX) &&
	    tl__drv_shared(l)) {
		/* Another thread may post: let real time pass, a little, before
		 * virtual time jumps (with nothing to jump to, the wait below is
		 * real anyway). */
		uint64_t budget = (uint64_t)d->f.shared_wait_us * 1000;
		uint64_t until = next < limit ? next : limit;
		if (until <= start)
			budget = 0; /* something is due already */
		else if (until - start < budget)
			budget = until - start;
		if (budget) {
			uint64_t t0 = tl__os_mono_ns();
			woke = real_wait(d, (int64_t)budget, &r);
			uint64_t spent = woke ? tl__os_mono_ns() - t0 : budget;
			advance(start + (spent < budget ? spent : budget));
			tl__sim_run_due(d, now_ns());
			if (woke || r < 0)
				goto done;
		}
	}
	/* Virtual time jumps to each scheduled event in turn until one of them
	 * produces an event or the timeout is reached; events that produce
	 * nothing (bytes for a socket with no read yet) do not end the wait. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t guard = 0; tl__drv_queued(l) == before && guard < (1u << 20); guard++) {
			e = tl__heap_top(&d->sched);
			if (!e || e->at > limit)
				break;
			advance(e->at);
			tl__sim_run_due(d, now_ns());
		}
		if (tl__drv_queued(l) != before || timeout_ns > 0 || tl__heap_top(&d->sched) || pass)
			break;
		/* No timeout and nothing scheduled: only another thread can bring
		 * work now. Block for real on the wake eventfd (the core marked us
		 * parked, so posters and other loops write it). */
		woke = real_wait(d, -1, &r);
		if (r < 0)
			goto out;
		/* A post, or another loop's traffic scheduled here: the second
		 * pass jumps to the latter. */
		tl__sim_run_due(d, now_ns());
	}
	if (tl__drv_queued(l) == before && timeout_ns > 0 && !woke)
		advance(limit);
done:
	if (tl__drv_queued(l) == before && !woke)
		info->zero_event_waits++;
out:
	d->st.advanced_ns += now_ns() - start;
	unlock();
	return r;
}

static void sim_lease_returned(struct tl_drv *d, uint32_t id)
{
	(void)id;
	lock();
	while (d->nlwait) {
		struct sim_sock *s = &d->socks[d->lwait[--d->nlwait]];
		s->lease_wait = 0;
		tl__sim_sched_at(d, s, now_ns());
	}
	unlock();
}

/* Connect a datagram socket: its sends' default destination, and the only
 * source it takes datagrams from (checked as they are sent, run_send). */
static int sim_dgram_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer)
{
	lock();
	struct sim_sock *s = sock_of(d, h);
	int r = s ? 0 : -EBADF;
	if (s && peer->sa.sa_family == AF_INET6 && s->local.sa.sa_family == AF_INET)
		r = -EAFNOSUPPORT;
	if (r == 0) {
		s->remote = *peer;
		s->dg_conn = 1;
	}
	unlock();
	return r;
}

/* A stream or datagram socket back under its caps: run its reads again. */
static void sim_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	if (paused)
		return;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (s)
		tl__sim_sched_at(d, s, now_ns());
	unlock();
}

const struct tl_driver tl__driver_sim = {
	.name = "sim",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX | TL_CAP_SPLICE,
	.init = sim_init,
	.destroy = sim_destroy,
	.now = sim_now,
	.open = sim_open,
	.attach = sim_attach,
	.release = sim_release,
	.local_addr = sim_local,
	.peer_addr = sim_peer,
	.sockopt = sim_sockopt,
	.submit = sim_submit,
	.cancel = sim_cancel,
	.try_write = sim_try_write,
	.poll = sim_poll,
	.lease_returned = sim_lease_returned,
	.pause = sim_pause,
	.dgram_connect = sim_dgram_connect,
	.embed_fd = NULL,
};

/* ---- test controls (drivers/sim.h) ---- */

static struct tl_drv *sim_of(tl_loop *loop)
{
	return tl__drv_self(loop, &tl__driver_sim);
}

int tl__sim_set_faults(tl_loop *loop, const struct tl_sim_faults *f)
{
	struct tl_drv *d = sim_of(loop);
	if (!d)
		return -ENOTSUP;
	if (!f || !tl__sim_faults_valid(f))
		return -EINVAL;
	lock();
	d->f = *f;
	unlock();
	return 0;
}

int tl__sim_get_faults(tl_loop *loop, struct tl_sim_faults *out)
{
	struct tl_drv *d = sim_of(loop);
	if (!d)
		return -ENOTSUP;
	*out = d->f;
	return 0;
}

uint64_t tl__sim_trace(tl_loop *loop)
{
	struct tl_drv *d = sim_of(loop);
	return d ? d->trace : 0;
}

uint64_t tl__sim_seed(tl_loop *loop)
{
	struct tl_drv *d = sim_of(loop);
	return d ? d->seed : 0;
}

int tl__sim_stats(tl_loop *loop, struct tl_sim_stats *out)
{
	struct tl_drv *d = sim_of(loop);
	if (!d)
		return -ENOTSUP;
	*out = d->st;
	return 0;
}
