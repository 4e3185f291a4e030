/* tests/model_core.c: random public API call sequences on two loops (sim, epoll or io_uring), checked against a model of their promises. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "model_core.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <turnloop/loop.h>
#include "sim.h"

/*
 * The model knows, per loop, every handle and op the API ever handed out and
 * where each stands. Its rules are the contract's (sections 1-4), with the
 * sim driver's documented behaviour where a result depends on the driver
 * (drivers/sim.h): which errors a fault may produce, Unix connects to a path
 * nobody listens on (-ENOENT at once), and so on. Where the host cannot know
 * the exact state (a terminal may be queued but not yet delivered when it
 * cancels), the model accepts each answer the contract allows and then holds
 * the core to what that answer implies.
 *
 * On a kernel driver (m->real) the sockets are real loopback sockets and the
 * clock is the real one, so the model cannot know when the kernel finishes
 * anything: it never expects an event in a given turn, every wait for one is
 * bounded by wall-clock time, and where the kernel decides (a connect to a
 * full Unix backlog, an error of a real socket) the model accepts what Linux
 * documents for that call. What the contract promises whatever the timing is
 * checked as strictly as on sim: return codes of every call, exactly one
 * terminal per accepted op, nothing after it, Closed last, stale ids, alive(),
 * tables and leases.
 */

#define NLOOPS 2
#define NOH UINT32_MAX /* an op without a handle (a room wait) */
#define WBUF_SIZE (96 * 1024)
#define POST_TOKEN 0xb057000000000000ull
#define NPATHS 3
#define PATH_NONE (-1)
#define PATH_STALE (-2)
/* A kernel driver: how long the end of a run may wait for the kernel to
 * finish what was cancelled or closed, and a probe for its one event. */
#define REAL_DRAIN_S 10.0
#define REAL_PROBE_S 5.0

enum { MH_TCPL, MH_UNIXL, MH_STREAM, MH_UDP, MH_TIMER, MH_NTYPES };
enum { HS_OPEN, HS_CLOSING, HS_GONE };
enum { MO_LIVE, MO_DONE };
/* How a live op was asked to end. */
enum { RQ_NONE, RQ_CANCEL, RQ_STOP };

static const char *const type_names[MH_NTYPES] = {
	[MH_TCPL] = "tcp-listener", [MH_UNIXL] = "unix-listener", [MH_STREAM] = "stream",
	[MH_UDP] = "udp",           [MH_TIMER] = "timer",
};

struct mh {
	tl_handle id;
	uint8_t loop, type, state, ref;
	uint64_t close_token;
	tl_addr addr; /* TCP listeners and UDP: the bound address */
	int path;     /* Unix listeners: index into paths[] */
	int backlog;  /* listeners: the backlog asked for (0: the default, 511) */
	uint32_t waiting; /* Unix listeners: connections in its queue, at most */
	uint8_t conn; /* streams: CS_* (kernel drivers) */
	uint8_t unix_; /* a Unix-domain stream */
	uint64_t idle_due; /* streams: the earliest an idle deadline armed on it can
			    * end ops (arming time + duration), UINT64_MAX: never */
};

struct mo {
	tl_op id;
	uint8_t loop, state, multi, pooled;
	uint8_t rq;        /* RQ_*: a cancel or stop the core accepted (returned 0) */
	uint8_t closed;    /* its handle was closed while it was live */
	uint8_t queued;    /* a cancel said -ENOENT: its own terminal is queued */
	uint8_t late_data; /* data records of a read after its cancel, stop or close */
	uint8_t timedout;  /* a cancel said -EALREADY unasked: its deadline fired */
	uint8_t at_exact;  /* a one-shot timer never reset: check it is not early */
	int32_t late;      /* nonterminal events it may still deliver after a cancel
			    * (those queued when it was asked), -1: no limit yet */
	uint16_t kind;
	uint32_t h;        /* model handle, or NOH */
	uint64_t token, deadline, at;
	uint8_t *buf;      /* a read's buffer, ours until the terminal */
	uint32_t len;      /* read/recv buffer length, write or send length */
	/* A connect on a kernel driver: the results the kernel may give it
	 * (CW_*), from every state its target was in while it was pending,
	 * and its Unix path (-1 for TCP). */
	uint8_t want;
	int8_t path;
	uint8_t cross; /* a datagram to the other address family */
	uint16_t tport; /* a TCP connect: the port it connects to */
};

enum { CW_OK = 1, CW_REFUSED = 2, CW_NOENT = 4, CW_AGAIN = 8, CW_RESET = 16 };
/* A stream on a kernel driver: connected for sure (accepted, or its connect
 * said 0), or not known to be (its connect is pending, failed, timed out or
 * was cancelled: the kernel may or may not have connected it). */
enum { CS_PENDING, CS_OK, CS_NOTSURE };

struct mloop {
	tl_loop *l;
	tl_poster *p;
	tl_config cfg;
	uint32_t post_cap;      /* the poster ring's real capacity */
	uint64_t post_sent;     /* posts into this loop that were accepted */
	uint64_t post_seen;     /* ... and delivered */
	uint64_t last_now;
	uint32_t nh_live, no_live;
	uint32_t *leases, nleases; /* lease ids the host holds */
	uint64_t owner_id;      /* an id this loop issued (for never-issued ids) */
};

struct model {
	const struct model_params *p;
	struct model_result *r;
	jmp_buf jb;
	uint64_t rng;
	const uint8_t *data;
	size_t size, pos;
	int exhausted;
	struct mloop L[NLOOPS];
	struct mh *h;
	uint32_t nh, caph;
	struct mo *o;
	uint32_t no, capo;
	uint32_t step;
	uint64_t next_token;
	struct tl_sim_faults f[NLOOPS];
	int may_submit_err, may_accept_err, may_open_err, may_cancel_err;
	int last_accepted; /* model index of the last accepted connection */
	int by_destroy;    /* end with tl_loop_destroy, everything still in flight */
	uint8_t *wbuf;
	/* A kernel driver: real sockets, real time (see the top of the file). */
	int real;
	int have_v6;       /* ::1 can be bound */
	const char *paths[NPATHS];
	char pathbuf[NPATHS][108];
	char dir[64];      /* the run's directory for its Unix paths */
	int dir_made;
	/* Which listener's socket file is at each path: a model handle index,
	 * PATH_NONE (no file) or PATH_STALE (a file nobody listens on). */
	int path_owner[NPATHS];
	/* Ports bound by the model itself and never listened on or read: a
	 * connect there is refused and a datagram goes nowhere, without
	 * touching anything else on the machine. TCP v4, TCP v6, UDP v4. */
	int dead_fd[3];
	tl_addr dead[3];
};

static const char *const sim_paths[NPATHS] = {"/model/a", "/model/b", "/model/c"};

/* ---- failing ---- */

static const char *ename(long long v)
{
	static char b[4][40];
	static int k;
	if (v >= 0)
		return "";
	const char *n = strerrorname_np((int)-v);
	char *s = b[k++ & 3];
	snprintf(s, sizeof b[0], "(-%s)", n ? n : "?");
	return s;
}

static const char *addr_str(const tl_addr *a)
{
	static char b[4][64];
	static int k;
	char *s = b[k++ & 3], ip[48] = "?";
	if (a->sa.sa_family == AF_INET6)
		inet_ntop(AF_INET6, &a->in6.sin6_addr, ip, sizeof ip);
	else if (a->sa.sa_family == AF_INET)
		inet_ntop(AF_INET, &a->in.sin_addr, ip, sizeof ip);
	snprintf(s, sizeof b[0], a->sa.sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip,
		 ntohs(a->in.sin_port));
	return s;
}

__attribute__((format(printf, 2, 3), noreturn)) static void failf(struct model *m,
								   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->r->what, sizeof m->r->what, fmt, ap);
	va_end(ap);
	m->r->failed = 1;
	m->r->step = m->step;
	longjmp(m->jb, 1);
}

/* A failed CHECK ends the run (failf): its message is the run's verdict. */
#define CHECK_FAILED(...) failf(m, __VA_ARGS__)
#include "check.h"

__attribute__((format(printf, 2, 3))) static void say(struct model *m, const char *fmt, ...)
{
	if (!m->p->verbose)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%u] ", m->step);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- choices ---- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform-ish in [0, n): from the seed's PRNG, or two input bytes. */
static uint32_t pick(struct model *m, uint32_t n)
{
	if (n <= 1)
		return 0;
	if (m->data) {
		if (m->pos + 2 > m->size) {
			m->exhausted = 1;
			return 0;
		}
		uint32_t v = m->data[m->pos] | (uint32_t)m->data[m->pos + 1] << 8;
		m->pos += 2;
		return v % n;
	}
	m->rng += 0x9e3779b97f4a7c15ull;
	return (uint32_t)(((mix64(m->rng) >> 32) * n) >> 32);
}

static int chance(struct model *m, uint32_t pct)
{
	return pick(m, 100) < pct;
}

/* ---- the model's tables ---- */

static struct mh *H(struct model *m, uint32_t i) { return &m->h[i]; }
static struct mo *O(struct model *m, uint32_t i) { return &m->o[i]; }

/* Handle ids and op ids are separate spaces (a slot and a generation in
 * each table); within one, a new id never equals a live one. */
static void no_collision(struct model *m, uint64_t v, int is_op)
{
	CHECK(v != 0, "new %s id is 0", is_op ? "op" : "handle");
	if (!is_op)
		for (uint32_t i = 0; i < m->nh; i++)
			CHECK(m->h[i].state == HS_GONE || m->h[i].id.v != v,
			      "new handle id %#llx equals live handle #%u's", (unsigned long long)v,
			      i);
	else
		for (uint32_t i = 0; i < m->no; i++)
			CHECK(m->o[i].state == MO_DONE || m->o[i].id.v != v,
			      "new op id %#llx equals live op #%u's", (unsigned long long)v, i);
}

static uint32_t h_add(struct model *m, int li, tl_handle id, uint8_t type)
{
	no_collision(m, id.v, 0);
	if (m->nh == m->caph) {
		m->caph = m->caph ? 2 * m->caph : 64;
		m->h = realloc(m->h, m->caph * sizeof *m->h);
		CHECK(m->h != NULL, "out of memory");
	}
	struct mh *h = &m->h[m->nh];
	memset(h, 0, sizeof *h);
	h->id = id;
	h->loop = (uint8_t)li;
	h->type = type;
	h->state = HS_OPEN;
	h->ref = 1;
	h->path = -1;
	say(m, "    new %s #%u h=%#llx", type_names[type], m->nh, (unsigned long long)id.v);
	h->idle_due = UINT64_MAX;
	m->L[li].nh_live++;
	m->L[li].owner_id = id.v;
	return m->nh++;
}

static uint32_t o_add(struct model *m, int li, tl_op id, uint32_t h, uint16_t kind)
{
	no_collision(m, id.v, 1);
	if (m->no == m->capo) {
		m->capo = m->capo ? 2 * m->capo : 128;
		m->o = realloc(m->o, m->capo * sizeof *m->o);
		CHECK(m->o != NULL, "out of memory");
	}
	struct mo *o = &m->o[m->no];
	memset(o, 0, sizeof *o);
	o->id = id;
	o->loop = (uint8_t)li;
	o->state = MO_LIVE;
	o->kind = kind;
	o->h = h;
	o->late = -1;
	o->path = -1;
	say(m, "    new op #%u (kind %u) op=%#llx", m->no, kind, (unsigned long long)id.v);
	m->L[li].no_live++;
	return m->no++;
}

static void o_done(struct model *m, struct mo *o)
{
	o->state = MO_DONE;
	free(o->buf);
	o->buf = NULL;
	m->L[o->loop].no_live--;
}

static int find_h(struct model *m, int li, uint64_t v)
{
	for (uint32_t i = m->nh; i-- > 0;)
		if (m->h[i].loop == li && m->h[i].id.v == v && m->h[i].state != HS_GONE)
			return (int)i;
	return -1;
}

static int find_o(struct model *m, int li, uint64_t v)
{
	for (uint32_t i = m->no; i-- > 0;)
		if (m->o[i].loop == li && m->o[i].id.v == v && m->o[i].state == MO_LIVE)
			return (int)i;
	return -1;
}

static uint64_t tok(struct model *m)
{
	return ++m->next_token;
}

/* ---- what the loop must say ---- */

/* alive() by the contract: a referenced handle (timers only while closing),
 * or an undelivered terminal of an op of a referenced handle. *unsure is set
 * when a connection the host has not seen yet may keep the loop alive (an
 * accept on an unreferenced listener may have queued one). */
static int model_alive(struct model *m, int li, int *unsure)
{
	int alive = 0;
	*unsure = 0;
	for (uint32_t i = 0; i < m->nh; i++) {
		struct mh *h = &m->h[i];
		if (h->loop != li || h->state == HS_GONE || !h->ref)
			continue;
		if (h->type != MH_TIMER || h->state == HS_CLOSING)
			alive = 1;
	}
	for (uint32_t i = 0; i < m->no; i++) {
		struct mo *o = &m->o[i];
		if (o->loop != li || o->state != MO_LIVE)
			continue;
		if (o->h == NOH || m->h[o->h].ref)
			alive = 1;
		else if (o->kind == TL_K_ACCEPT)
			*unsure = 1;
	}
	return alive;
}

static void check_loop(struct model *m, int li, const char *when)
{
	struct mloop *L = &m->L[li];
	int unsure, want = model_alive(m, li, &unsure);
	int got = tl_alive(L->l);
	CHECK(got == want || (unsure && got), "%s: loop %d alive() = %d, the model says %d", when,
	      li, got, want);
	uint64_t now = tl_now(L->l);
	CHECK(now >= L->last_now, "loop %d clock went back", li);
	L->last_now = now;
	tl_loop_stats st;
	tl_loop_stats_get(L->l, &st);
	/* An op holds its slot until its terminal is delivered: exact. */
	CHECK(st.ops == L->no_live, "%s: loop %d has %u ops, the model %u live", when, li, st.ops,
	      L->no_live);
	/* Connections accepted into completions not yet delivered count in the
	 * core: at most one per queued record, and none with nothing queued. */
	CHECK(st.handles >= L->nh_live && st.handles - L->nh_live <= st.queued,
	      "%s: loop %d has %u handles, the model %u (%u queued)", when, li, st.handles,
	      L->nh_live, st.queued);
	/* Leases ride on queued completions too. */
	CHECK(st.leases_out >= L->nleases && st.leases_out - L->nleases <= st.queued,
	      "%s: loop %d has %u leases out, the host holds %u (%u queued)", when, li,
	      st.leases_out, L->nleases, st.queued);
}

/* ---- picking targets ---- */

struct tref {
	uint64_t v;
	int idx; /* model index, or -1 for a never-issued id */
};

static struct tref pick_h(struct model *m, int li, int want_type)
{
	uint32_t k = pick(m, 100);
	struct tref t = {0, -1};
	if (k < 86 && m->nh) {
		/* Mostly a live handle of this loop (of the wanted type if any),
		 * sometimes any handle it ever had (stale ones too). */
		uint32_t cand[64], n = 0;
		int live_only = k < 70;
		for (uint32_t i = m->nh; i-- > 0 && n < 64;) {
			struct mh *h = &m->h[i];
			if (h->loop != li || (live_only && h->state == HS_GONE))
				continue;
			if (want_type >= 0 && live_only && h->type != want_type && pick(m, 4))
				continue;
			cand[n++] = i;
		}
		if (n) {
			t.idx = (int)cand[pick(m, n)];
			t.v = m->h[t.idx].id.v;
			return t;
		}
	}
	if (k < 93 && m->nh) {
		/* Another loop's handle: foreign, -ENOENT whatever its state. */
		uint32_t i = pick(m, m->nh);
		if (m->h[i].loop != li) {
			t.idx = (int)i;
			t.v = m->h[i].id.v;
			return t;
		}
	}
	/* Never issued: a slot past the table, a generation no live id has,
	 * another owner, or 0. */
	uint64_t base = m->L[li].owner_id ? m->L[li].owner_id : ((uint64_t)0x123 << 40);
	switch (pick(m, 4)) {
	case 0:
		t.v = (base & ~0xffffffull) | (m->L[li].cfg.max_handles + pick(m, 1000));
		break;
	case 1:
		t.v = base ^ ((uint64_t)0x8000 << 24);
		break;
	case 2:
		t.v = base ^ ((uint64_t)0x800000 << 40);
		break;
	default:
		t.v = 0;
	}
	for (uint32_t i = 0; i < m->nh; i++)
		if (m->h[i].id.v == t.v && m->h[i].state != HS_GONE) /* a chance hit */
			t.v = 0;
	return t;
}

static struct tref pick_o(struct model *m, int li)
{
	uint32_t k = pick(m, 100);
	struct tref t = {0, -1};
	if (k < 88 && m->no) {
		uint32_t cand[64], n = 0;
		int live_only = k < 72;
		for (uint32_t i = m->no; i-- > 0 && n < 64;) {
			struct mo *o = &m->o[i];
			if (o->loop == li && (!live_only || o->state == MO_LIVE))
				cand[n++] = i;
		}
		if (n) {
			t.idx = (int)cand[pick(m, n)];
			t.v = m->o[t.idx].id.v;
			return t;
		}
	}
	if (k < 94 && m->no) {
		uint32_t i = pick(m, m->no);
		if (m->o[i].loop != li) {
			t.idx = (int)i;
			t.v = m->o[i].id.v;
			return t;
		}
	}
	uint64_t base = m->L[li].owner_id ? m->L[li].owner_id : ((uint64_t)0x123 << 40);
	t.v = pick(m, 2) ? ((base & ~0xffffffull) | (m->L[li].cfg.max_ops + pick(m, 1000)))
			 : base ^ ((uint64_t)0x4000 << 24);
	for (uint32_t i = 0; i < m->no; i++)
		if (m->o[i].id.v == t.v && m->o[i].state == MO_LIVE)
			t.v = 0;
	return t;
}

/* -ENOENT (stale, foreign, never issued), -EINVAL (closing, wrong kind) or 0
 * when the call gets past the handle check. */
static int pre_handle(struct model *m, int li, struct tref t, uint32_t types)
{
	if (t.idx < 0)
		return -ENOENT;
	struct mh *h = &m->h[t.idx];
	if (h->loop != li || h->state == HS_GONE)
		return -ENOENT;
	if (h->state == HS_CLOSING || !(types & (1u << h->type)))
		return -EINVAL;
	return 0;
}

/* Contract 4.9: a deadline may have ended o by now: its own (a connect's
 * or a read's) passed, or an idle deadline of its stream could have. */
static int may_time_out(struct model *m, int li, const struct mo *o)
{
	uint64_t now = tl_now(m->L[li].l);
	return (o->deadline && now >= o->deadline) || (o->h != NOH && now >= H(m, o->h)->idle_due);
}

static int ops_full(struct model *m, int li)
{
	return m->L[li].no_live >= m->L[li].cfg.max_ops;
}

/* The core also counts connections it accepted into completions the host
 * has not seen yet (check_loop bounds them by the queue), so the table is
 * full by its count. */
static int handles_full(struct model *m, int li)
{
	tl_loop_stats st;
	tl_loop_stats_get(m->L[li].l, &st);
	return st.handles >= m->L[li].cfg.max_handles;
}

/* A submission on a handle that passed pre_handle: 0, -ENOBUFS when the op
 * table is full, or a fault the sim may inject. */
static void check_submit(struct model *m, int li, int pre, int rc, const char *what)
{
	if (pre) {
		CHECK(rc == pre, "%s: %d%s, want %d%s", what, rc, ename(rc), pre, ename(pre));
		return;
	}
	if (ops_full(m, li)) {
		CHECK(rc == -ENOBUFS, "%s with the op table full: %d%s, want -ENOBUFS", what, rc,
		      ename(rc));
		return;
	}
	CHECK(rc == 0 || (m->may_submit_err && (rc == -ENOMEM || rc == -ENOBUFS)),
	      "%s: %d%s", what, rc, ename(rc));
}

/* After a cancel or close was accepted, the core drops every nonterminal
 * event the driver reports: the op's only nonterminal completions still to
 * come are the ones queued already. */
static void limit_late(struct model *m, int li, struct mo *o)
{
	if (o->late >= 0)
		return;
	tl_loop_stats st;
	tl_loop_stats_get(m->L[li].l, &st);
	o->late = (int32_t)st.queued;
}

/* ---- the calls ---- */

static uint32_t loop_of(struct model *m)
{
	return pick(m, NLOOPS);
}

static void listener_changed(struct model *m, const struct mh *h);

/* Without IPv6 on the machine, a kernel driver's run uses IPv4 instead. */
static const char *ip_of(struct model *m, const char *ip)
{
	if (!m->real || m->have_v6 || !strchr(ip, ':'))
		return ip;
	return strcmp(ip, "::") ? "127.0.0.1" : "0.0.0.0";
}

/* A port to listen on again (choice k of 3). On sim, fixed ports; on a
 * kernel driver the port of one of the run's own TCP listeners (maybe
 * closed since), so that a run never binds a port someone else may use;
 * 0 when there is none yet. */
static uint16_t fixed_port(struct model *m, uint32_t k)
{
	if (!m->real)
		return (uint16_t)(7000 + k);
	for (uint32_t i = m->nh; i-- > 0;)
		if (m->h[i].type == MH_TCPL && k-- == 0)
			return ntohs(m->h[i].addr.in.sin_port);
	return 0;
}

static void a_listen(struct model *m, int li)
{
	tl_loop *l = m->L[li].l;
	tl_addr a;
	static const char *const ips[] = {"127.0.0.1", "::1", "0.0.0.0", "::"};
	const char *ip = ip_of(m, ips[pick(m, 4)]);
	uint16_t port = pick(m, 2) ? 0 : fixed_port(m, pick(m, 3));
	CHECK(tl_addr_parse(&a, ip, port) == 0, "addr_parse");
	tl_listen_opts o = {.backlog = (int)pick(m, 4), .reuseport = chance(m, 50),
			    .v6only = chance(m, 30)};
	tl_handle h;
	int hfull = handles_full(m, li);
	int with_opts = chance(m, 80);
	int rc = tl_tcp_listen(l, &a, with_opts ? &o : NULL, &h);
	say(m, "L%d listen %s:%u reuse=%d -> %d%s", li, ip, port, o.reuseport, rc, ename(rc));
	if (hfull) {
		CHECK(rc == -ENOBUFS, "listen with the handle table full: %d%s", rc, ename(rc));
		return;
	}
	if (rc < 0) {
		CHECK((rc == -EADDRINUSE && port) || (rc == -EMFILE && m->may_open_err),
		      "listen %s:%u: %d%s", ip, port, rc, ename(rc));
		return;
	}
	uint32_t i = h_add(m, li, h, MH_TCPL);
	H(m, i)->backlog = with_opts ? o.backlog : 0;
	int r2 = tl_local_addr(l, h, &H(m, i)->addr);
	CHECK(r2 == 0, "local_addr of a listener: %d%s", r2, ename(r2));
	say(m, "    bound to %s backlog %d", addr_str(&H(m, i)->addr), H(m, i)->backlog);
	if (m->real)
		listener_changed(m, H(m, i));
	CHECK(port == 0 || ntohs(H(m, i)->addr.in.sin_port) == port, "listener bound elsewhere");
	CHECK(port != 0 || ntohs(H(m, i)->addr.in.sin_port) != 0, "port 0 stayed 0");
}

static int path_listened(struct model *m, int path)
{
	for (uint32_t i = 0; i < m->nh; i++)
		if (m->h[i].type == MH_UNIXL && m->h[i].path == path && m->h[i].state != HS_GONE)
			return 1;
	return 0;
}

/* A kernel driver: what a Unix connect to path may end with now (CW_*).
 * No socket file: -ENOENT. A file nobody listens on: -ECONNREFUSED. A
 * listener (open, or closing but not yet Closed, so its socket is still
 * there): connected, or -EAGAIN when its queue is full (Linux refuses a
 * connect while more than backlog connections wait), or -ECONNRESET once
 * it closes. The model counts the connections that may wait in each queue
 * (every connect that may have entered it, less the accepts delivered), an
 * upper bound, so -EAGAIN is allowed only where the queue may be full. */
static uint8_t unix_want(struct model *m, int path)
{
	int owner = m->path_owner[path];
	if (owner == PATH_NONE)
		return CW_NOENT;
	if (owner == PATH_STALE)
		return CW_REFUSED;
	const struct mh *h = &m->h[owner];
	uint32_t cap = h->backlog > 0 ? (uint32_t)h->backlog : 511;
	return CW_OK | (h->waiting > cap ? CW_AGAIN : 0) | (h->state != HS_OPEN ? CW_RESET : 0);
}

/* A listener on port that may get a TCP connect to it reset: one closing
 * (the connections in its queue are reset), or one whose small backlog may
 * overflow (Linux then may reset a connection it cannot queue). Any
 * listener on the port counts: with SO_REUSEPORT, and IPv4 beside IPv6,
 * the kernel picks which one a connection reaches. */
static int risky_listener(const struct mh *h, uint16_t port)
{
	return h->type == MH_TCPL && h->state != HS_GONE && ntohs(h->addr.in.sin_port) == port &&
	       (h->state == HS_CLOSING || (h->backlog > 0 && h->backlog < 8));
}

static uint8_t tcp_want(struct model *m, uint16_t port)
{
	for (uint32_t i = 0; i < m->nh; i++)
		if (risky_listener(&m->h[i], port))
			return CW_RESET;
	return 0;
}

/* A kernel driver: a listener changed; a TCP connect still pending to its
 * port (or a Unix one to its path) may meet what it now allows. */
static void listener_changed(struct model *m, const struct mh *h)
{
	for (uint32_t i = 0; i < m->no; i++) {
		struct mo *o = &m->o[i];
		if (o->state != MO_LIVE || o->kind != TL_K_CONNECT)
			continue;
		if (h->type == MH_TCPL && o->path < 0 && risky_listener(h, o->tport))
			o->want |= CW_RESET;
		if (h->type == MH_UNIXL && o->path == h->path && h->state == HS_CLOSING)
			o->want |= CW_RESET | CW_REFUSED;
	}
}

/* A kernel driver: the socket file at path changed; a connect still
 * pending there (io_uring issues it at the next turn) may meet either. */
static void path_changed(struct model *m, int path, int owner)
{
	m->path_owner[path] = owner;
	for (uint32_t i = 0; i < m->no; i++)
		if (m->o[i].state == MO_LIVE && m->o[i].kind == TL_K_CONNECT &&
		    m->o[i].path == path) {
			m->o[i].want |= unix_want(m, path);
			if (owner >= 0)
				m->h[owner].waiting++; /* it may land in this queue */
		}
}

static void a_unix_listen(struct model *m, int li)
{
	int path = (int)pick(m, NPATHS);
	tl_listen_opts o = {.backlog = (int)pick(m, 3)};
	tl_handle h;
	int hfull = handles_full(m, li);
	int rc = tl_unix_listen(m->L[li].l, m->paths[path], &o, &h);
	say(m, "L%d unix_listen %s backlog %d -> %d%s", li, m->paths[path], o.backlog, rc, ename(rc));
	if (hfull)
		CHECK(rc == -ENOBUFS, "unix_listen, table full: %d%s", rc, ename(rc));
	else if (m->real)
		/* The kernel drivers replace a socket file left at the path
		 * (tl_unix_listen), whether or not a listener still has it. */
		CHECK(rc == 0, "unix_listen: %d%s", rc, ename(rc));
	else if (path_listened(m, path))
		CHECK(rc == -EADDRINUSE || (rc == -EMFILE && m->may_open_err),
		      "unix_listen on a live path: %d%s", rc, ename(rc));
	else
		CHECK(rc == 0 || (rc == -EMFILE && m->may_open_err), "unix_listen: %d%s", rc,
		      ename(rc));
	if (rc == 0) {
		uint32_t i = h_add(m, li, h, MH_UNIXL);
		H(m, i)->path = path;
		H(m, i)->backlog = o.backlog;
		if (m->real)
			path_changed(m, path, (int)i);
	}
}

static void a_accept(struct model *m, int li, int multi)
{
	struct tref t = pick_h(m, li, MH_TCPL);
	if (!t.v && chance(m, 50))
		t = pick_h(m, li, MH_UNIXL);
	uint64_t tk = tok(m);
	tl_op op;
	int rc = multi ? tl_accept_start(m->L[li].l, (tl_handle){t.v}, tk, &op)
		       : tl_accept(m->L[li].l, (tl_handle){t.v}, tk, &op);
	say(m, "L%d accept%s h=%#llx -> %d%s", li, multi ? "_start" : "", (unsigned long long)t.v,
	    rc, ename(rc));
	int pre = pre_handle(m, li, t, 1u << MH_TCPL | 1u << MH_UNIXL);
	check_submit(m, li, pre, rc, "accept");
	if (rc == 0) {
		struct mo *o = O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_ACCEPT));
		o->token = tk;
		o->multi = (uint8_t)multi;
	}
}

static void a_connect(struct model *m, int li, int unix_)
{
	struct mloop *L = &m->L[li];
	uint64_t tk = tok(m), dl = 0;
	if (chance(m, 40))
		dl = tl_now(L->l) + (uint64_t)pick(m, 3000) * 1000;
	tl_handle h;
	tl_op op;
	int rc, path = -1;
	uint8_t want = 0;
	uint16_t tport = 0;
	int full = ops_full(m, li) || handles_full(m, li);
	char desc[96];
	if (unix_) {
		path = (int)pick(m, NPATHS);
		if (m->real)
			want = unix_want(m, path);
		rc = tl_unix_connect(L->l, m->paths[path], dl, tk, &h, &op);
		if (m->real && m->path_owner[path] >= 0 && rc == 0)
			m->h[m->path_owner[path]].waiting++;
		snprintf(desc, sizeof desc, "unix %s", m->paths[path]);
	} else {
		tl_addr a;
		uint32_t cand[32], n = 0;
		for (uint32_t i = 0; i < m->nh && n < 32; i++)
			if (m->h[i].type == MH_TCPL)
				cand[n++] = i;
		want = CW_OK | CW_REFUSED;
		if (n && pick(m, 5)) {
			a = H(m, cand[pick(m, n)])->addr; /* maybe closed since: refused */
			if (m->real)
				want |= tcp_want(m, ntohs(a.in.sin_port));
		} else if (m->real) {
			a = m->dead[m->have_v6 ? pick(m, 2) : 0];
			want = CW_REFUSED;
		} else {
			CHECK(tl_addr_parse(&a, pick(m, 2) ? "127.0.0.1" : "::1",
					    (uint16_t)(1 + pick(m, 30))) == 0,
			      "addr_parse");
		}
		rc = tl_tcp_connect(L->l, &a, dl, tk, &h, &op);
		tport = ntohs(a.in.sin_port);
		snprintf(desc, sizeof desc, "tcp port %u", tport);
	}
	say(m, "L%d connect %s dl=%llu -> %d%s h=%#llx op=%#llx", li, desc, (unsigned long long)dl,
	    rc, ename(rc), rc ? 0ull : (unsigned long long)h.v, rc ? 0ull : (unsigned long long)op.v);
	if (want & CW_AGAIN)
		say(m, "    its listener's queue may be full (-EAGAIN allowed)");
	if (full) {
		CHECK(rc == -ENOBUFS, "connect with a full table: %d%s", rc, ename(rc));
		return;
	}
	if (rc < 0) {
		int ok = (m->may_open_err && rc == -EMFILE) ||
			 (m->may_submit_err && (rc == -ENOMEM || rc == -ENOBUFS)) ||
			 (!m->real && unix_ && rc == -ENOENT && !path_listened(m, path));
		CHECK(ok, "connect %s: %d%s (want %#x)", desc, rc, ename(rc), want);
		return;
	}
	CHECK(m->real || !unix_ || path_listened(m, path), "unix connect to %s nobody listens on: 0",
	      m->paths[path]);
	uint32_t hi = h_add(m, li, h, MH_STREAM);
	struct mo *o = O(m, o_add(m, li, op, hi, TL_K_CONNECT));
	o->token = tk;
	o->deadline = dl;
	o->want = want;
	o->path = (int8_t)path;
	o->tport = unix_ ? 0 : tport;
	H(m, hi)->unix_ = (uint8_t)unix_;
	H(m, hi)->conn = CS_PENDING;
}

static void a_read(struct model *m, int li, int how)
{
	struct tref t = pick_h(m, li, MH_STREAM);
	uint64_t tk = tok(m);
	tl_op op;
	int rc;
	uint8_t *buf = NULL;
	uint32_t len = 0;
	int bad = 0;
	if (how == 0) {
		static const uint32_t lens[] = {1, 16, 512, 4096, 0};
		len = lens[pick(m, 5)];
		bad = len == 0;
		buf = malloc(len ? len : 1);
		rc = tl_read(m->L[li].l, (tl_handle){t.v}, buf, len, tk, &op);
	} else if (how == 1) {
		rc = tl_read_pooled(m->L[li].l, (tl_handle){t.v}, tk, &op);
	} else {
		rc = tl_read_start(m->L[li].l, (tl_handle){t.v}, tk, &op);
	}
	say(m, "L%d read%d h=%#llx len=%u -> %d%s", li, how, (unsigned long long)t.v, len, rc,
	    ename(rc));
	int pre = bad ? -EINVAL : pre_handle(m, li, t, 1u << MH_STREAM);
	check_submit(m, li, pre, rc, "read");
	if (rc == 0) {
		struct mo *o = O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_READ));
		o->token = tk;
		o->buf = buf;
		o->len = len;
		o->pooled = how != 0;
		o->multi = how == 2;
	} else {
		free(buf);
	}
}

static void a_write(struct model *m, int li, int vec)
{
	struct tref t = pick_h(m, li, MH_STREAM);
	uint64_t tk = tok(m);
	tl_op op;
	int rc, bad = 0;
	uint32_t total = 0;
	if (vec) {
		struct iovec iov[TL_IOV_MAX + 1];
		int n = (int)pick(m, TL_IOV_MAX + 2); /* 0 and 9 are invalid */
		bad = n < 1 || n > TL_IOV_MAX;
		for (int i = 0; i < n; i++) {
			uint32_t len = pick(m, 3) ? pick(m, 300) : pick(m, 20000);
			uint32_t off = pick(m, WBUF_SIZE - len);
			iov[i].iov_base = m->wbuf + off;
			iov[i].iov_len = len;
			total += len;
		}
		rc = tl_writev(m->L[li].l, (tl_handle){t.v}, iov, n, tk, &op);
	} else {
		static const uint32_t lens[] = {0, 1, 7, 100, 1500, 20000, 70000};
		total = lens[pick(m, 7)];
		rc = tl_write(m->L[li].l, (tl_handle){t.v}, m->wbuf, total, tk, &op);
	}
	say(m, "L%d write%s h=%#llx len=%u -> %d%s", li, vec ? "v" : "", (unsigned long long)t.v,
	    total, rc, ename(rc));
	int pre = bad ? -EINVAL : pre_handle(m, li, t, 1u << MH_STREAM);
	check_submit(m, li, pre, rc, "write");
	if (rc == 0) {
		struct mo *o = O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_WRITE));
		o->token = tk;
		o->len = total;
	}
}

static void a_shutdown(struct model *m, int li)
{
	struct tref t = pick_h(m, li, MH_STREAM);
	uint64_t tk = tok(m);
	tl_op op;
	int rc = tl_shutdown(m->L[li].l, (tl_handle){t.v}, tk, &op);
	say(m, "L%d shutdown h=%#llx -> %d%s", li, (unsigned long long)t.v, rc, ename(rc));
	check_submit(m, li, pre_handle(m, li, t, 1u << MH_STREAM), rc, "shutdown");
	if (rc == 0)
		O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_SHUTDOWN))->token = tk;
}

static void a_udp_bind(struct model *m, int li)
{
	tl_addr a;
	static const char *const ips[] = {"127.0.0.1", "::1", "0.0.0.0"};
	CHECK(tl_addr_parse(&a, ip_of(m, ips[pick(m, 3)]), 0) == 0, "addr_parse");
	tl_handle h;
	int hfull = handles_full(m, li);
	int rc = tl_udp_bind(m->L[li].l, &a, &h);
	say(m, "L%d udp_bind %s -> %d%s", li, addr_str(&a), rc, ename(rc));
	if (hfull) {
		CHECK(rc == -ENOBUFS, "udp_bind, table full: %d%s", rc, ename(rc));
		return;
	}
	CHECK(rc == 0 || (rc == -EMFILE && m->may_open_err), "udp_bind: %d%s", rc, ename(rc));
	if (rc == 0) {
		uint32_t i = h_add(m, li, h, MH_UDP);
		CHECK(tl_local_addr(m->L[li].l, h, &H(m, i)->addr) == 0, "udp local_addr");
		say(m, "    bound to %s", addr_str(&H(m, i)->addr));
	}
}

static void a_send(struct model *m, int li)
{
	struct tref t = pick_h(m, li, MH_UDP);
	tl_addr to;
	uint32_t cand[32], n = 0;
	for (uint32_t i = 0; i < m->nh && n < 32; i++)
		if (m->h[i].type == MH_UDP)
			cand[n++] = i;
	if (n && pick(m, 5))
		to = H(m, cand[pick(m, n)])->addr;
	else if (m->real)
		to = m->dead[2];
	else
		CHECK(tl_addr_parse(&to, "127.0.0.1", (uint16_t)(1 + pick(m, 20))) == 0, "parse");
	uint32_t len = pick(m, 4) ? pick(m, 200) : pick(m, 70000);
	uint64_t tk = tok(m);
	tl_op op;
	int rc = tl_udp_send(m->L[li].l, (tl_handle){t.v}, m->wbuf, len, &to, tk, &op);
	say(m, "L%d send h=%#llx%s%s len=%u to %s -> %d%s", li, (unsigned long long)t.v,
	    t.idx >= 0 ? " from " : "", t.idx >= 0 ? addr_str(&H(m, t.idx)->addr) : "", len,
	    addr_str(&to), rc, ename(rc));
	check_submit(m, li, pre_handle(m, li, t, 1u << MH_UDP), rc, "udp_send");
	if (rc == 0) {
		struct mo *o = O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_SEND));
		o->token = tk;
		o->len = len;
		o->cross = to.sa.sa_family != H(m, (uint32_t)t.idx)->addr.sa.sa_family;
	}
}

static void a_recv(struct model *m, int li)
{
	struct tref t = pick_h(m, li, MH_UDP);
	uint64_t tk = tok(m);
	tl_op op;
	uint32_t len = 0;
	uint8_t *buf = NULL;
	if (pick(m, 2)) {
		len = 1 + pick(m, 2048);
		buf = malloc(len);
	}
	int rc = tl_udp_recv(m->L[li].l, (tl_handle){t.v}, buf, len, tk, &op);
	say(m, "L%d recv h=%#llx len=%u -> %d%s", li, (unsigned long long)t.v, len, rc, ename(rc));
	check_submit(m, li, pre_handle(m, li, t, 1u << MH_UDP), rc, "udp_recv");
	if (rc == 0) {
		struct mo *o = O(m, o_add(m, li, op, (uint32_t)t.idx, TL_K_RECV));
		o->token = tk;
		o->buf = buf;
		o->len = len;
		o->pooled = buf == NULL;
	} else {
		free(buf);
	}
}

static void a_timer(struct model *m, int li)
{
	struct mloop *L = &m->L[li];
	uint64_t now = tl_now(L->l);
	uint64_t at = pick(m, 8) ? now + (uint64_t)pick(m, 5000) * 1000 : now - pick(m, 1000);
	uint64_t rep = pick(m, 3) ? 0 : 1000 + (uint64_t)pick(m, 2000) * 1000;
	uint64_t tk = tok(m);
	tl_handle h;
	tl_op op;
	int full = handles_full(m, li) || ops_full(m, li);
	int rc = tl_timer_start(L->l, at, rep, tk, &h, &op);
	say(m, "L%d timer at=+%lld rep=%llu -> %d%s", li, (long long)(at - now),
	    (unsigned long long)rep, rc, ename(rc));
	if (full) {
		CHECK(rc == -ENOBUFS, "timer_start with a full table: %d%s", rc, ename(rc));
		return;
	}
	if (rc != 0) {
		tl_loop_stats st;
		tl_loop_stats_get(L->l, &st);
		failf(m, "timer_start: %d%s (model: %u/%u handles, %u/%u ops; core: %u handles, %u ops, %u queued)",
		      rc, ename(rc), L->nh_live, L->cfg.max_handles, L->no_live, L->cfg.max_ops,
		      st.handles, st.ops, st.queued);
	}
	uint32_t hi = h_add(m, li, h, MH_TIMER);
	struct mo *o = O(m, o_add(m, li, op, hi, TL_K_TIMER));
	o->token = tk;
	o->at = at;
	o->multi = rep != 0;
	o->at_exact = 1;
}

/* The live op of a timer handle (or NULL once it ended). */
static struct mo *timer_op(struct model *m, uint32_t hi)
{
	for (uint32_t i = m->no; i-- > 0;)
		if (m->o[i].h == hi && m->o[i].kind == TL_K_TIMER && m->o[i].state == MO_LIVE)
			return &m->o[i];
	return NULL;
}

static void a_timer_reset(struct model *m, int li)
{
	struct tref t = pick_h(m, li, MH_TIMER);
	tl_loop *l = m->L[li].l;
	uint64_t now = tl_now(l), at = now + (uint64_t)pick(m, 3000) * 1000;
	int rc = tl_timer_reset(l, (tl_handle){t.v}, at);
	say(m, "L%d timer_reset h=%#llx -> %d%s", li, (unsigned long long)t.v, rc, ename(rc));
	int pre = pre_handle(m, li, t, 1u << MH_TIMER);
	if (pre) {
		CHECK(rc == pre, "timer_reset: %d%s, want %d%s", rc, ename(rc), pre, ename(pre));
		return;
	}
	struct mo *o = timer_op(m, (uint32_t)t.idx);
	if (!o || o->rq || o->queued) {
		CHECK(rc == -EINVAL, "timer_reset of an ended timer: %d%s", rc, ename(rc));
		return;
	}
	if (!o->multi && o->at <= m->L[li].last_now) {
		/* It may have fired already (its terminal queued). */
		CHECK(rc == 0 || rc == -EINVAL, "timer_reset of a due timer: %d%s", rc, ename(rc));
		if (rc == -EINVAL)
			o->queued = 1;
	} else {
		CHECK(rc == 0, "timer_reset of an armed timer: %d%s", rc, ename(rc));
	}
	if (rc == 0) {
		o->at = at;
		o->at_exact = !o->multi;
	}
}

static void a_cancel(struct model *m, int li, int stop)
{
	struct tref t = pick_o(m, li);
	int rc = stop ? tl_stop(m->L[li].l, (tl_op){t.v}) : tl_cancel(m->L[li].l, (tl_op){t.v});
	say(m, "L%d %s op=%#llx -> %d%s", li, stop ? "stop" : "cancel", (unsigned long long)t.v,
	    rc, ename(rc));
	if (t.idx < 0 || O(m, (uint32_t)t.idx)->loop != li ||
	    O(m, (uint32_t)t.idx)->state == MO_DONE) {
		CHECK(rc == -ENOENT, "cancel of a stale/foreign/never-issued op: %d%s", rc,
		      ename(rc));
		return;
	}
	struct mo *o = O(m, (uint32_t)t.idx);
	if (o->rq) {
		CHECK(rc == -EALREADY, "second cancel: %d%s, want -EALREADY", rc, ename(rc));
		return;
	}
	if (o->queued) {
		CHECK(rc == -ENOENT, "cancel after -ENOENT: %d%s", rc, ename(rc));
		return;
	}
	if (o->timedout) {
		CHECK(rc == -EALREADY, "cancel after its deadline fired: %d%s", rc, ename(rc));
		return;
	}
	if (rc == -EALREADY) {
		/* Unasked: a close or a deadline asked first. */
		CHECK(o->closed || may_time_out(m, li, o),
		      "cancel -EALREADY for an op nobody cancelled");
		if (!o->closed)
			o->timedout = 1;
		return;
	}
	if (rc == -ENOENT) {
		o->queued = 1; /* finished: its own terminal is on its way */
		return;
	}
	if (rc == -EAGAIN && m->may_cancel_err)
		return;
	CHECK(rc == 0, "cancel of a live op: %d%s", rc, ename(rc));
	CHECK(!o->closed || m->may_cancel_err, "cancel 0 for an op its close cancelled");
	o->rq = stop ? RQ_STOP : RQ_CANCEL;
	limit_late(m, li, o);
}

/* tl_close(h) returned 0: every op of h is cancelled, Closed follows. */
static void closing(struct model *m, uint32_t hi, uint64_t tk)
{
	struct mh *h = H(m, hi);
	h->state = HS_CLOSING;
	h->close_token = tk;
	for (uint32_t i = 0; i < m->no; i++) {
		struct mo *o = &m->o[i];
		if (o->state != MO_LIVE)
			continue;
		if (o->h == hi) {
			o->closed = 1;
			if (!m->may_cancel_err)
				limit_late(m, h->loop, o);
		}
	}
	if (m->real)
		listener_changed(m, h);
}

/* Contract 4.9: a read deadline (now, later, past or cleared) on any op. */
static void a_read_deadline(struct model *m, int li)
{
	struct tref t = pick_o(m, li);
	uint64_t now = tl_now(m->L[li].l);
	uint64_t at = pick(m, 4) ? now + 1000 * (uint64_t)pick(m, 20000) : pick(m, 2);
	int rc = tl_read_deadline(m->L[li].l, (tl_op){t.v}, at);
	say(m, "L%d read_deadline op=%#llx at=+%lld -> %d%s", li, (unsigned long long)t.v,
	    (long long)(at - now), rc, ename(rc));
	if (t.idx < 0 || O(m, (uint32_t)t.idx)->loop != li ||
	    O(m, (uint32_t)t.idx)->state == MO_DONE) {
		CHECK(rc == -ENOENT, "read deadline on a stale/foreign op: %d%s", rc, ename(rc));
		return;
	}
	struct mo *o = O(m, (uint32_t)t.idx);
	if (o->kind != TL_K_READ && o->kind != TL_K_RECV) {
		CHECK(rc == -EINVAL, "read deadline on a kind %u op: %d%s", o->kind, rc, ename(rc));
		return;
	}
	if (o->rq || o->timedout) {
		CHECK(rc == -EALREADY, "read deadline after its end was asked: %d%s", rc, ename(rc));
		return;
	}
	if (o->queued) {
		CHECK(rc == -ENOENT, "read deadline after -ENOENT: %d%s", rc, ename(rc));
		return;
	}
	if (rc == -EALREADY) {
		CHECK(o->closed || may_time_out(m, li, o), "read deadline -EALREADY unasked");
		o->timedout = !o->closed;
		return;
	}
	if (rc == -ENOENT) {
		o->queued = 1;
		return;
	}
	CHECK(rc == 0, "read deadline on a live read: %d%s", rc, ename(rc));
	o->deadline = at;
}

/* Contract 4.9: arm or clear an idle deadline. */
static void a_idle_deadline(struct model *m, int li)
{
	struct tref t = pick_h(m, li, MH_STREAM);
	uint64_t now = tl_now(m->L[li].l);
	uint64_t d = pick(m, 3) ? 1000 * (1 + (uint64_t)pick(m, 20000)) : 0;
	int rc = tl_idle_deadline(m->L[li].l, (tl_handle){t.v}, d);
	say(m, "L%d idle_deadline h=%#llx d=%llu -> %d%s", li, (unsigned long long)t.v,
	    (unsigned long long)d, rc, ename(rc));
	int pre = pre_handle(m, li, t, 1u << MH_STREAM);
	CHECK(rc == pre, "idle deadline: %d%s, want %d%s", rc, ename(rc), pre, ename(pre));
	/* Clearing it later does not undo a fire already asked for: keep the
	 * earliest time any arming allows. */
	if (rc == 0 && d && now + d < H(m, (uint32_t)t.idx)->idle_due)
		H(m, (uint32_t)t.idx)->idle_due = now + d;
}

static void a_close(struct model *m, int li)
{
	struct tref t = pick_h(m, li, -1);
	uint64_t tk = tok(m);
	int rc = tl_close(m->L[li].l, (tl_handle){t.v}, tk);
	say(m, "L%d close h=%#llx -> %d%s", li, (unsigned long long)t.v, rc, ename(rc));
	int pre = pre_handle(m, li, t, ~0u);
	CHECK(rc == pre, "close: %d%s, want %d%s", rc, ename(rc), pre, ename(pre));
	if (rc == 0)
		closing(m, (uint32_t)t.idx, tk);
}

static void a_set_ref(struct model *m, int li)
{
	struct tref t = pick_h(m, li, -1);
	int ref = chance(m, 50);
	int rc = tl_set_ref(m->L[li].l, (tl_handle){t.v}, ref);
	say(m, "L%d set_ref h=%#llx %d -> %d%s", li, (unsigned long long)t.v, ref, rc, ename(rc));
	int pre = pre_handle(m, li, t, ~0u);
	CHECK(rc == pre, "set_ref: %d%s, want %d%s", rc, ename(rc), pre, ename(pre));
	if (rc == 0)
		H(m, (uint32_t)t.idx)->ref = (uint8_t)ref;
}

static void a_lease_release(struct model *m, int li)
{
	struct mloop *L = &m->L[li];
	if (L->nleases && pick(m, 4)) {
		uint32_t k = pick(m, L->nleases), id = L->leases[k];
		int rc = tl_lease_release(L->l, id);
		say(m, "L%d lease_release %u -> %d%s", li, id, rc, ename(rc));
		CHECK(rc == 0, "release of a held lease: %d%s", rc, ename(rc));
		L->leases[k] = L->leases[--L->nleases];
		/* Nothing can take it before the next turn: a second release is
		 * refused. */
		rc = tl_lease_release(L->l, id);
		CHECK(rc == -ENOENT, "second release of lease %u: %d%s", id, rc, ename(rc));
		return;
	}
	uint32_t id = L->cfg.pooled_buffers + pick(m, 100);
	if (pick(m, 4) == 0)
		id = UINT32_MAX - pick(m, 3);
	int rc = tl_lease_release(L->l, id);
	CHECK(rc == -ENOENT, "release of lease %u that was never out: %d%s", id, rc, ename(rc));
}

static void a_post(struct model *m, int li)
{
	struct mloop *T = &m->L[li];
	uint64_t seq = T->post_sent;
	int rc = tl_post(T->p, POST_TOKEN ^ seq, seq);
	say(m, "post to L%d #%llu -> %d%s", li, (unsigned long long)seq, rc, ename(rc));
	if (T->post_sent - T->post_seen < T->post_cap)
		CHECK(rc == 0, "post with room: %d%s", rc, ename(rc));
	else
		CHECK(rc == 0 || rc == -ENOBUFS, "post to a full ring: %d%s", rc, ename(rc));
	if (rc == 0)
		T->post_sent++;
}

/* Ask for one TL_K_ROOM completion on loop li once the other loop's poster
 * has been drained (tl_post_wait_room): an op without a handle. */
static void a_room(struct model *m, int li)
{
	int self = pick(m, 8) == 0;
	struct mloop *T = &m->L[self ? li : 1 - li];
	uint32_t live = 0;
	for (uint32_t i = 0; i < m->no; i++)
		live += m->o[i].loop == li && m->o[i].state == MO_LIVE && m->o[i].kind == TL_K_ROOM;
	uint64_t tk = tok(m);
	tl_op op;
	int full = ops_full(m, li);
	int rc = tl_post_wait_room(m->L[li].l, T->p, tk, &op);
	say(m, "L%d wait_room%s -> %d%s", li, self ? " (own poster)" : "", rc, ename(rc));
	if (self) {
		CHECK(rc == -EINVAL, "wait_room on the loop's own poster: %d%s", rc, ename(rc));
		return;
	}
	if (rc == -ENOBUFS) {
		/* Both waiter tables hold at most this loop's undelivered room
		 * waits (all of them wait on the other loop). */
		CHECK(full || live >= m->L[li].cfg.room_waiters || live >= T->cfg.room_waiters,
		      "wait_room: -ENOBUFS with %u waits live", live);
		return;
	}
	CHECK(!full, "wait_room with the op table full: %d%s", rc, ename(rc));
	CHECK(rc == 0, "wait_room: %d%s", rc, ename(rc));
	O(m, o_add(m, li, op, NOH, TL_K_ROOM))->token = tk;
}

static void a_local_addr(struct model *m, int li)
{
	struct tref t = pick_h(m, li, -1);
	tl_addr a;
	int rc = tl_local_addr(m->L[li].l, (tl_handle){t.v}, &a);
	int pre = pre_handle(m, li, t, ~0u);
	if (pre == -EINVAL)
		pre = 0; /* closing handles still have an address */
	if (!pre && (H(m, (uint32_t)t.idx)->type == MH_TIMER ||
		     H(m, (uint32_t)t.idx)->type == MH_UNIXL))
		pre = -EINVAL;
	if (!pre && H(m, (uint32_t)t.idx)->type == MH_STREAM) {
		CHECK(rc == 0 || rc == -EINVAL || rc == -EAGAIN, "local_addr of a stream: %d%s", rc,
		      ename(rc));
		/* Unix streams say -EINVAL and connecting ones -EAGAIN; the
		 * model tracks neither. */
		return;
	}
	CHECK(rc == pre, "local_addr: %d%s, want %d%s", rc, ename(rc), pre, ename(pre));
}

/* ---- completions ---- */

static void hold_lease(struct model *m, int li, const tl_lease *ls, int64_t res)
{
	struct mloop *L = &m->L[li];
	CHECK(ls->id < L->cfg.pooled_buffers, "lease id %u out of range", ls->id);
	CHECK(ls->cap == L->cfg.pooled_buffer_size, "lease cap %u", ls->cap);
	CHECK(ls->data != NULL, "lease without data");
	CHECK(res > 0 && (uint64_t)res <= ls->cap, "lease with %lld bytes", (long long)res);
	for (uint32_t i = 0; i < L->nleases; i++)
		CHECK(L->leases[i] != ls->id, "lease %u handed out twice", ls->id);
	L->leases[L->nleases++] = ls->id;
}

static int in(int64_t v, const int *set, int n)
{
	for (int i = 0; i < n; i++)
		if (v == -set[i])
			return 1;
	return 0;
}

/* A kernel driver: the errors Linux gives a read or write on a stream. Any
 * stream may find its peer reset (-ECONNRESET) or, writing, gone (-EPIPE).
 * One not known to be connected may also get the error its connect left on
 * the socket (-ECONNREFUSED), or find no peer (-ENOTCONN; a Unix read on a
 * socket that never connected says -EINVAL). */
static int real_stream_err(struct model *m, const struct mo *o, int64_t r)
{
	const struct mh *h = H(m, o->h);
	if (r == -ECONNRESET || (r == -EPIPE && o->kind == TL_K_WRITE))
		return 1;
	if (h->conn == CS_OK)
		return 0;
	return r == -ECONNREFUSED || r == -ENOTCONN ||
	       (r == -EINVAL && h->unix_ && o->kind == TL_K_READ);
}

static const char *conn_note(struct model *m, const struct mo *o)
{
	const struct mh *h = H(m, o->h);
	if (!m->real || h->conn != CS_OK)
		return "";
	return h->unix_ ? " on a Unix stream known connected (accepted, or its connect said 0)"
			: " on a TCP stream known connected (accepted, or its connect said 0)";
}

/* The result an op's own completion may carry when nobody cancelled it. */
static void check_natural(struct model *m, int li, struct mo *o, const tl_completion *c)
{
	int64_t r = c->result;
	int term = c->flags & TL_F_TERMINAL;
	if (r == -ETIMEDOUT) {
		CHECK(term && may_time_out(m, li, o), "-ETIMEDOUT before any deadline (kind %u)",
		      o->kind);
		return;
	}
	switch (o->kind) {
	case TL_K_ACCEPT:
		if (r == 0) {
			m->last_accepted = (int)h_add(m, li, c->u.accept.conn, MH_STREAM);
			H(m, (uint32_t)m->last_accepted)->conn = CS_OK;
			H(m, (uint32_t)m->last_accepted)->unix_ = H(m, o->h)->type == MH_UNIXL;
			if (H(m, o->h)->waiting)
				H(m, o->h)->waiting--;
		} else {
			static const int e[] = {ENOBUFS, EMFILE, ENOMEM};
			CHECK(in(r, e, 3), "accept: %lld%s", (long long)r, ename(r));
		}
		CHECK(!term || !o->multi, "accept_start ended by itself: %lld%s", (long long)r,
		      ename(r));
		break;
	case TL_K_CONNECT: {
		static const int e[] = {ECONNREFUSED};
		if (m->real)
			CHECK((r == 0 && (o->want & CW_OK)) ||
				      (r == -ECONNREFUSED && (o->want & CW_REFUSED)) ||
				      (r == -ENOENT && (o->want & CW_NOENT)) ||
				      (r == -EAGAIN && (o->want & CW_AGAIN)) ||
				      (r == -ECONNRESET && (o->want & CW_RESET)),
			      "connect: %lld%s, the model allows %#x (1 ok, 2 refused, 4 noent, 8 "
			      "again, 16 reset)",
			      (long long)r, ename(r), o->want);
		else /* a Unix listener's full queue: -EAGAIN, as Linux */
			CHECK(r == 0 || in(r, e, 1) || (r == -EAGAIN && o->path >= 0),
			      "connect: %lld%s", (long long)r, ename(r));
		break;
	}
	case TL_K_READ:
		if (r > 0) {
			if (o->pooled) {
				CHECK(c->flags & TL_F_LEASE, "pooled read without a lease");
				hold_lease(m, li, &c->u.read.lease, r);
			} else {
				CHECK(!(c->flags & TL_F_LEASE), "a lease on a buffered read");
				CHECK((uint64_t)r <= o->len, "read %lld > %u", (long long)r, o->len);
			}
			CHECK(!(c->flags & TL_F_EOF), "EOF with data");
			CHECK(o->multi || term, "one read, nonterminal");
		} else if (r == 0) {
			CHECK(c->flags & TL_F_EOF, "read 0 without TL_F_EOF");
			CHECK(term, "EOF not terminal");
		} else {
			static const int e[] = {ECONNRESET, ENOTCONN};
			CHECK(m->real ? real_stream_err(m, o, r) : in(r, e, 2), "read: %lld%s%s",
			      (long long)r, ename(r), conn_note(m, o));
			CHECK(term, "read error not terminal");
		}
		break;
	case TL_K_WRITE: {
		static const int e[] = {EPIPE, ECONNRESET, ENOTCONN};
		CHECK(r == o->len || (m->real ? real_stream_err(m, o, r) : in(r, e, 3)),
		      "write of %u: %lld%s%s", o->len, (long long)r, ename(r), conn_note(m, o));
		break;
	}
	case TL_K_SHUTDOWN: {
		static const int e[] = {ENOTCONN, ECONNRESET};
		CHECK(r == 0 || in(r, e, 2), "shutdown: %lld%s", (long long)r, ename(r));
		break;
	}
	case TL_K_SEND: {
		static const int e[] = {EAFNOSUPPORT, EMSGSIZE};
		if (m->real) {
			/* Linux: one datagram carries at most 64 KiB less its
			 * headers; an IPv4 socket cannot send to IPv6
			 * (-EAFNOSUPPORT), one bound to ::1 reaches no IPv4
			 * address (-ENETUNREACH). */
			int big = o->len > 65535, small = o->len < 65000;
			CHECK((r == o->len && !big && !o->cross) ||
				      (r == -EMSGSIZE && !small) ||
				      ((r == -EAFNOSUPPORT || r == -ENETUNREACH) && o->cross),
			      "send of %u%s: %lld%s", o->len, o->cross ? " across families" : "",
			      (long long)r, ename(r));
			break;
		}
		CHECK(r == o->len || in(r, e, 2), "send of %u: %lld%s", o->len, (long long)r,
		      ename(r));
		break;
	}
	case TL_K_RECV:
		CHECK(r >= 0, "recv: %lld%s", (long long)r, ename(r));
		CHECK(!(c->flags & TL_F_EOF), "recv with EOF");
		if (o->pooled && r > 0) {
			CHECK(c->flags & TL_F_LEASE, "pooled recv without a lease");
			hold_lease(m, li, &c->u.recv.lease, r);
		} else {
			CHECK(!(c->flags & TL_F_LEASE), "a lease on an empty or buffered recv");
			CHECK(o->pooled || (uint64_t)r <= o->len, "recv %lld > %u", (long long)r,
			      o->len);
		}
		break;
	case TL_K_ROOM:
		CHECK(r == 0 && term, "room wait: %lld%s", (long long)r, ename(r));
		break;
	case TL_K_TIMER:
		CHECK(r == 0, "timer result %lld", (long long)r);
		CHECK(term == !o->multi, "timer terminal=%d for repeat=%d", term, o->multi);
		if (o->at_exact)
			CHECK(m->L[li].last_now >= o->at, "timer fired %llu ns early",
			      (unsigned long long)(o->at - m->L[li].last_now));
		break;
	default:
		failf(m, "completion of kind %u for an op of kind %u", c->kind, o->kind);
	}
}

static void on_completion(struct model *m, int li, const tl_completion *c)
{
	struct mloop *L = &m->L[li];
	m->r->completions++;
	L->last_now = tl_now(L->l);
	if (c->kind == TL_K_POST) {
		say(m, "  L%d POST #%llu", li, (unsigned long long)c->u.post.payload);
		CHECK(c->op.v == 0 && c->handle.v == 0, "post with an op or handle");
		CHECK(c->flags & TL_F_TERMINAL, "post not terminal");
		CHECK(c->u.post.payload == L->post_seen, "post #%llu arrived, #%llu expected",
		      (unsigned long long)c->u.post.payload, (unsigned long long)L->post_seen);
		CHECK(c->token == (POST_TOKEN ^ L->post_seen), "post token");
		L->post_seen++;
		return;
	}
	if (c->kind == TL_K_CLOSED) {
		say(m, "  L%d CLOSED h=%#llx", li, (unsigned long long)c->handle.v);
		int hi = find_h(m, li, c->handle.v);
		CHECK(hi >= 0, "Closed for an unknown or gone handle %#llx",
		      (unsigned long long)c->handle.v);
		struct mh *h = H(m, (uint32_t)hi);
		CHECK(h->state == HS_CLOSING, "Closed for a handle nobody closed");
		CHECK(c->token == h->close_token, "Closed with token %#llx, want %#llx",
		      (unsigned long long)c->token, (unsigned long long)h->close_token);
		CHECK(c->op.v == 0 && (c->flags & TL_F_TERMINAL), "Closed record shape");
		for (uint32_t i = 0; i < m->no; i++)
			CHECK(m->o[i].h != (uint32_t)hi || m->o[i].state == MO_DONE,
			      "Closed before the terminal of op #%u (kind %u)", i, m->o[i].kind);
		h->state = HS_GONE;
		L->nh_live--;
		/* Its socket is closed now; a Unix listener's file stays. */
		if (m->real && h->type == MH_UNIXL && m->path_owner[h->path] == hi)
			path_changed(m, h->path, PATH_STALE);
		return;
	}
	int oi = find_o(m, li, c->op.v);
	say(m, "  L%d kind=%u op=%#llx h=%#llx res=%lld%s flags=%#x", li, c->kind,
	    (unsigned long long)c->op.v, (unsigned long long)c->handle.v, (long long)c->result,
	    ename(c->result), c->flags);
	CHECK(oi >= 0, "completion (kind %u, result %lld) for op %#llx, which is not live", c->kind,
	      (long long)c->result, (unsigned long long)c->op.v);
	struct mo *o = O(m, (uint32_t)oi);
	if (o->h == NOH) {
		CHECK(c->handle.v == 0, "a room wait's completion names a handle");
	} else {
		struct mh *h = H(m, o->h);
		CHECK(h->state != HS_GONE, "completion after its handle's Closed");
		CHECK(c->handle.v == h->id.v, "completion names handle %#llx, op's is %#llx",
		      (unsigned long long)c->handle.v, (unsigned long long)h->id.v);
	}
	CHECK(c->token == o->token, "token %#llx, want %#llx", (unsigned long long)c->token,
	      (unsigned long long)o->token);
	CHECK(c->kind == o->kind, "kind %u, want %u", c->kind, o->kind);
	int term = c->flags & TL_F_TERMINAL;
	/* Contract 2.5: a read cancelled, stopped or closed still delivers the
	 * bytes the kernel had taken off the socket, as nonterminal records
	 * before its terminal (one-shot reads too); nothing else may. */
	if (!term && (o->kind == TL_K_READ || o->kind == TL_K_RECV) &&
	    (o->rq != RQ_NONE || o->closed || may_time_out(m, li, o))) {
		CHECK(c->result > 0, "a cancelled read's nonterminal without data: %lld%s",
		      (long long)c->result, ename(c->result));
		CHECK(!(c->flags & (TL_F_EOF | TL_F_STOPPED)), "late read data flags %#x", c->flags);
		/* A one-shot read had one read's worth in the kernel at most. */
		CHECK(o->multi || o->late_data == 0,
		      "a one-shot read gave a second data record after its cancel");
		o->late_data++;
		say(m, "    data after its cancel, stop or close (contract 2.5)");
		if (o->pooled) {
			CHECK(c->flags & TL_F_LEASE, "pooled late read without a lease");
			hold_lease(m, li, o->kind == TL_K_READ ? &c->u.read.lease : &c->u.recv.lease,
				   c->result);
		} else {
			CHECK(!(c->flags & TL_F_LEASE), "a lease on a buffered late read");
			CHECK((uint64_t)c->result <= o->len, "late read %lld > %u",
			      (long long)c->result, o->len);
		}
		return;
	}
	CHECK(term || o->multi, "nonterminal completion of a one-shot op");
	/* Contract 2.5: no other op produces a nonterminal completion once its
	 * cancel or stop returned 0 (or its close cancelled it); the only ones
	 * that may still come are those already queued, undelivered, when it
	 * was asked (late counts the queue then, an upper bound). */
	if (!term && o->late >= 0)
		CHECK(o->late-- > 0,
		      "a nonterminal completion (kind %u, result %lld%s) generated after its %s",
		      c->kind, (long long)c->result, ename(c->result),
		      o->rq == RQ_STOP ? "stop" : o->rq == RQ_CANCEL ? "cancel" : "close");
	if (term && o->rq == RQ_CANCEL) {
		CHECK(c->result == -ECANCELED && !(c->flags & TL_F_STOPPED),
		      "cancelled op ended with %lld%s flags %#x", (long long)c->result,
		      ename(c->result), c->flags);
	} else if (term && o->rq == RQ_STOP) {
		CHECK(c->result == 0 && (c->flags & TL_F_STOPPED),
		      "stopped op ended with %lld%s flags %#x", (long long)c->result,
		      ename(c->result), c->flags);
	} else if (term && o->timedout) {
		CHECK(c->result == -ETIMEDOUT, "timed-out op ended with %lld%s",
		      (long long)c->result, ename(c->result));
	} else {
		CHECK(!(c->flags & TL_F_STOPPED), "Stopped without a stop");
		/* Nonterminal events queued before a cancel still arrive, with
		 * what they found. */
		if (c->result == -ECANCELED && term)
			CHECK(o->closed && !o->queued, "-ECANCELED without a cancel or close");
		else
			check_natural(m, li, o, c);
	}
	if (term) {
		if (o->kind == TL_K_CONNECT)
			H(m, o->h)->conn =
				c->result == 0 && !(c->flags & TL_F_STOPPED) ? CS_OK : CS_NOTSURE;
		/* A lease on a terminal read: check_natural took it. */
		o_done(m, o);
	}
}

static void turn(struct model *m, int li, int64_t timeout, uint32_t cap)
{
	struct mloop *L = &m->L[li];
	tl_completion out[64];
	tl_turn_info info;
	if (cap > 64)
		cap = 64;
	int n = tl_turn(L->l, timeout, out, cap, &info);
	m->r->turns++;
	say(m, "L%d turn t=%lld cap=%u -> %d%s", li, (long long)timeout, cap, n, ename(n));
	if (n < 0) {
		CHECK(n == -EAGAIN && m->may_cancel_err, "turn: %d%s", n, ename(n));
		return;
	}
	CHECK((uint32_t)n <= cap, "turn returned %d > cap %u", n, cap);
	CHECK(info.completions == (uint32_t)n, "info.completions %u != %d", info.completions, n);
	CHECK(info.os_waits <= 1, "%u OS waits in one turn", info.os_waits);
	for (int i = 0; i < n; i++)
		on_completion(m, li, &out[i]);
	CHECK(info.alive == tl_alive(L->l), "info.alive %d, tl_alive %d", info.alive,
	      tl_alive(L->l));
}

static void a_turn(struct model *m)
{
	int li = (int)loop_of(m);
	int64_t t;
	switch (pick(m, 4)) {
	case 0:
		t = 0;
		break;
	case 1:
		t = 1000 * (int64_t)pick(m, 50);
		break;
	case 2:
		t = 1000000 * (int64_t)(1 + pick(m, 5));
		break;
	default:
		t = 100000;
	}
	uint32_t cap = pick(m, 3) ? 64 : 1 + pick(m, 4);
	turn(m, li, t, cap);
}

/* ---- a run ---- */

static void make_loops(struct model *m)
{
	m->by_destroy = pick(m, 8) == 0 ? 1 + (int)pick(m, 2) : 0;
	for (int li = 0; li < NLOOPS; li++) {
		struct mloop *L = &m->L[li];
		tl_config *c = &L->cfg;
		tl_config_init(c);
		static const uint32_t hs[] = {6, 16, 64}, os[] = {6, 16, 128}, ev[] = {1, 3, 16, 256},
				      pb[] = {1, 4, 32}, ps[] = {16, 512, 4096}, pc[] = {2, 16};
		c->max_handles = hs[pick(m, 3)];
		c->max_ops = os[pick(m, 3)];
		c->events_per_turn = ev[pick(m, 4)];
		c->pooled_buffers = pb[pick(m, 3)];
		c->pooled_buffer_size = ps[pick(m, 3)];
		c->post_capacity = pc[pick(m, 2)];
		/* Per-stream caps from tight to out of the way (contract 4.10):
		 * a paused stream only waits, so every invariant still holds. */
		static const uint32_t hl[] = {1, 2, 16};
		static const uint64_t hw[] = {64, 4096, 1u << 20};
		c->handle_leases = hl[pick(m, 3)];
		c->handle_write_bytes = hw[pick(m, 3)];
		c->driver = m->real ? m->p->driver : TL_DRIVER_SIM;
		c->sim_seed = m->p->seed * 2 + (uint64_t)li;
		int rc = tl_loop_new(&L->l, c);
		CHECK(rc == 0, "tl_loop_new: %d%s", rc, ename(rc));
		L->post_cap = 1;
		while (L->post_cap < c->post_capacity)
			L->post_cap <<= 1;
		L->p = tl_poster_get(L->l);
		L->leases = calloc(c->pooled_buffers, sizeof *L->leases);
		L->last_now = tl_now(L->l);
		if (m->real)
			continue; /* no knobs: the kernel decides */
		/* The seed's fault profile. */
		struct tl_sim_faults *f = &m->f[li];
		tl__sim_faults_default(f);
		f->shared_wait_us = 0; /* one thread: never wait for real */
		switch (pick(m, 4)) {
		case 0: /* the defaults */
			break;
		case 1: /* scheduling extremes */
			f->p[TL_SIM_SHORT_IO] = pick(m, 2);
			f->p[TL_SIM_SYNC_WRITE] = pick(m, 2);
			f->p[TL_SIM_ASYNC_CANCEL] = pick(m, 2);
			f->latency_us = pick(m, 2) ? 0 : 500;
			f->rcvbuf = 64 + pick(m, 2000);
			break;
		default: { /* faults */
			static const double ps_[] = {0, 0, 0.02, 0.1, 0.3};
			static const int k[] = {TL_SIM_CONNECT_REFUSED, TL_SIM_RESET,
						TL_SIM_CLOSE_RESET,     TL_SIM_ACCEPT_EMFILE,
						TL_SIM_ACCEPT_ENOMEM,   TL_SIM_ACCEPT_ENOBUFS,
						TL_SIM_SUBMIT_ENOMEM,   TL_SIM_SUBMIT_ENOBUFS,
						TL_SIM_OPEN_EMFILE,     TL_SIM_SLOW,
						TL_SIM_UDP_DROP};
			for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
				f->p[k[i]] = ps_[pick(m, 5)];
			f->slow_us = 1000 + pick(m, 20000);
			f->rcvbuf = pick(m, 2) ? 65536 : 256 + pick(m, 8000);
		}
		}
		if (m->p->faults && tl__sim_faults_parse(f, m->p->faults) < 0)
			failf(m, "bad --faults spec");
		CHECK(tl__sim_set_faults(L->l, f) == 0, "tl__sim_set_faults");
		if (f->p[TL_SIM_SUBMIT_ENOMEM] > 0 || f->p[TL_SIM_SUBMIT_ENOBUFS] > 0)
			m->may_submit_err = 1;
		if (f->p[TL_SIM_OPEN_EMFILE] > 0)
			m->may_open_err = 1;
		if (f->p[TL_SIM_CANCEL_FAIL] > 0)
			m->may_cancel_err = 1;
	}
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Close every open handle and turn both loops until nothing is left (on a
 * kernel driver: or until REAL_DRAIN_S of wall-clock time have passed). */
static void drain_all(struct model *m)
{
	double until = wall() + REAL_DRAIN_S;
	for (int li = 0; li < NLOOPS; li++) {
		struct mloop *L = &m->L[li];
		while (L->nleases) {
			uint32_t id = L->leases[--L->nleases];
			int rc = tl_lease_release(L->l, id);
			CHECK(rc == 0, "final release of lease %u: %d%s", id, rc, ename(rc));
		}
	}
	for (uint32_t i = 0; i < m->no; i++) {
		struct mo *o = &m->o[i];
		if (o->h != NOH || o->state != MO_LIVE || o->rq || o->queued)
			continue;
		int rc = tl_cancel(m->L[o->loop].l, o->id);
		CHECK(rc == 0 || rc == -ENOENT, "final cancel of a room wait: %d%s", rc, ename(rc));
		if (rc == 0)
			o->rq = RQ_CANCEL;
		else
			o->queued = 1;
	}
	for (int round = 0; round < 100000; round++) {
		int busy = 0;
		for (uint32_t i = 0; i < m->nh; i++) {
			struct mh *h = &m->h[i];
			if (h->state == HS_OPEN) {
				int rc = tl_close(m->L[h->loop].l, h->id, 0xc105e);
				CHECK(rc == 0, "final close: %d%s", rc, ename(rc));
				closing(m, i, 0xc105e);
			}
			busy |= h->state != HS_GONE;
		}
		for (int li = 0; li < NLOOPS; li++) {
			struct mloop *L = &m->L[li];
			busy |= tl_alive(L->l) || L->no_live;
			turn(m, li, 1000000, 64);
			while (L->nleases) {
				uint32_t id = L->leases[--L->nleases];
				CHECK(tl_lease_release(L->l, id) == 0, "final release");
			}
		}
		if (!busy || (m->real && wall() > until))
			break;
	}
	for (uint32_t i = 0; i < m->nh; i++)
		CHECK(m->h[i].state == HS_GONE, "handle #%u (%s) never got its Closed", i,
		      type_names[m->h[i].type]);
	for (uint32_t i = 0; i < m->no; i++)
		CHECK(m->o[i].state == MO_DONE, "op #%u (kind %u) never got its terminal", i,
		      m->o[i].kind);
	for (int li = 0; li < NLOOPS; li++) {
		tl_loop_stats st;
		tl_loop_stats_get(m->L[li].l, &st);
		CHECK(!tl_alive(m->L[li].l), "loop %d still alive after the drain", li);
		CHECK(st.handles == 0 && st.ops == 0 && st.queued == 0 && st.leases_out == 0 &&
			      st.timers == 0,
		      "loop %d leaks: handles %u ops %u queued %u leases %u timers %u", li,
		      st.handles, st.ops, st.queued, st.leases_out, st.timers);
	}
}

static void wait_done(struct model *m, int li, uint32_t oi, const char *what)
{
	double until = wall() + REAL_PROBE_S;
	for (int t = 0; (m->real || t < 10000) && O(m, oi)->state == MO_LIVE; t++) {
		if (m->real && wall() > until)
			break;
		turn(m, li, 1000000, 64);
	}
	CHECK(O(m, oi)->state == MO_DONE, "probe: %s never finished", what);
}

static uint32_t probe_op(struct model *m, int li, int rc, tl_op id, uint32_t h, uint16_t kind,
			 const char *what)
{
	CHECK(rc == 0, "probe: %s: %d%s", what, rc, ename(rc));
	uint32_t oi = o_add(m, li, id, h, kind);
	O(m, oi)->token = tok(m);
	return oi;
}

/* After the run, on a quiet network: every pooled buffer can be held at
 * once (none was lost), and a read that found none free resumes when one
 * comes back. */
static void probe_pool(struct model *m, int li)
{
	struct mloop *L = &m->L[li];
	if (!m->real) {
		struct tl_sim_faults f;
		tl__sim_faults_default(&f);
		f.shared_wait_us = 0;
		CHECK(tl__sim_set_faults(L->l, &f) == 0, "set faults");
	}
	tl_addr a;
	tl_handle lh, ch;
	tl_op op;
	CHECK(tl_addr_parse(&a, "127.0.0.1", 0) == 0, "parse");
	CHECK(tl_tcp_listen(L->l, &a, NULL, &lh) == 0, "probe: listen");
	uint32_t lhi = h_add(m, li, lh, MH_TCPL);
	CHECK(tl_local_addr(L->l, lh, &H(m, lhi)->addr) == 0, "probe: local_addr");
	uint64_t t = m->next_token + 1;
	uint32_t acc = probe_op(m, li, tl_accept(L->l, lh, t, &op), op, lhi, TL_K_ACCEPT, "accept");
	int rc = tl_tcp_connect(L->l, &H(m, lhi)->addr, 0, m->next_token + 1, &ch, &op);
	CHECK(rc == 0, "probe: connect: %d%s", rc, ename(rc));
	uint32_t chi = h_add(m, li, ch, MH_STREAM);
	uint32_t con = probe_op(m, li, 0, op, chi, TL_K_CONNECT, "connect");
	O(m, con)->want = CW_OK; /* a listener of its own, waiting */
	m->last_accepted = -1;
	wait_done(m, li, acc, "accept");
	wait_done(m, li, con, "connect");
	CHECK(m->last_accepted >= 0, "probe: no connection accepted");
	uint32_t shi = (uint32_t)m->last_accepted;
	/* One stream holds every buffer: lift its lease cap (contract 4.10)
	 * to all of them. */
	CHECK(tl_handle_caps(L->l, H(m, shi)->id, L->cfg.pooled_buffers, 0) == 0, "probe: caps");
	for (uint32_t k = 0; k <= L->cfg.pooled_buffers; k++) {
		uint32_t w = probe_op(m, li, tl_write(L->l, ch, m->wbuf, 1, m->next_token + 1, &op),
				      op, chi, TL_K_WRITE, "write");
		O(m, w)->len = 1;
		wait_done(m, li, w, "write");
		uint32_t r = probe_op(m, li, tl_read_pooled(L->l, H(m, shi)->id, m->next_token + 1, &op),
				      op, shi, TL_K_READ, "read_pooled");
		O(m, r)->pooled = 1;
		if (k == L->cfg.pooled_buffers) {
			/* Every buffer is out: the read waits, it does not fail. */
			for (int i = 0; i < 20; i++)
				turn(m, li, 1000000, 64);
			CHECK(O(m, r)->state == MO_LIVE, "probe: a read with no buffer free ended");
			uint32_t id = L->leases[--L->nleases];
			CHECK(tl_lease_release(L->l, id) == 0, "probe: release");
		}
		wait_done(m, li, r, "pooled read");
		CHECK(L->nleases == (k < L->cfg.pooled_buffers ? k + 1 : k),
		      "probe: %u leases held after %u reads", L->nleases, k + 1);
	}
}

/* Close everything, turn until nothing is alive, check the pools, and close
 * the loops. */
static void finish(struct model *m)
{
	m->step = UINT32_MAX;
	drain_all(m);
	for (int li = 0; li < NLOOPS; li++)
		probe_pool(m, li);
	drain_all(m);
	m->r->trace = 0;
	for (int li = 0; li < NLOOPS; li++) {
		struct mloop *L = &m->L[li];
		if (!m->real)
			m->r->trace = mix64(m->r->trace ^ tl__sim_trace(L->l));
		tl_poster_put(L->p);
		int rc = tl_loop_close(L->l);
		CHECK(rc == 0, "tl_loop_close: %d%s", rc, ename(rc));
		L->l = NULL;
	}
}

/* The other ending: destroy both loops with everything in flight (1: loop 0
 * first, 2: loop 1 first). Afterwards their posters refuse with -EPIPE; the
 * buffers of reads still pending are freed only after the destroy returned,
 * so a driver writing into them late shows up under ASan and valgrind. */
static void destroy_all(struct model *m)
{
	m->step = UINT32_MAX;
	m->r->trace = 0;
	for (int k = 0; k < NLOOPS; k++) {
		struct mloop *L = &m->L[(m->by_destroy - 1 + k) % NLOOPS];
		if (!m->real)
			m->r->trace = mix64(m->r->trace ^ tl__sim_trace(L->l));
		tl_loop_destroy(L->l);
		L->l = NULL;
		int rc = tl_post(L->p, 1, 1);
		CHECK(rc == -EPIPE, "post to a destroyed loop: %d%s", rc, ename(rc));
		rc = tl_poster_wake(L->p);
		CHECK(rc == -EPIPE, "wake of a destroyed loop: %d%s", rc, ename(rc));
		tl_poster_put(L->p);
	}
	for (uint32_t i = 0; i < m->no; i++)
		if (m->o[i].state == MO_LIVE)
			o_done(m, &m->o[i]);
}

static void step(struct model *m)
{
	int li = (int)loop_of(m);
	uint32_t k = pick(m, 1000);
	m->r->calls++;
	/* Weights in thousandths; turns are a quarter of the calls. */
	if (k < 250)
		a_turn(m);
	else if (k < 290)
		a_listen(m, li);
	else if (k < 305)
		a_unix_listen(m, li);
	else if (k < 365)
		a_connect(m, li, 0);
	else if (k < 380)
		a_connect(m, li, 1);
	else if (k < 420)
		a_accept(m, li, 0);
	else if (k < 445)
		a_accept(m, li, 1);
	else if (k < 490)
		a_read(m, li, 0);
	else if (k < 515)
		a_read(m, li, 1);
	else if (k < 535)
		a_read(m, li, 2);
	else if (k < 580)
		a_write(m, li, 0);
	else if (k < 605)
		a_write(m, li, 1);
	else if (k < 620)
		a_shutdown(m, li);
	else if (k < 640)
		a_udp_bind(m, li);
	else if (k < 665)
		a_send(m, li);
	else if (k < 690)
		a_recv(m, li);
	else if (k < 730)
		a_timer(m, li);
	else if (k < 750)
		a_timer_reset(m, li);
	else if (k < 800)
		a_cancel(m, li, 0);
	else if (k < 830)
		a_cancel(m, li, 1);
	else if (k < 900)
		a_close(m, li);
	else if (k < 920)
		a_set_ref(m, li);
	else if (k < 950)
		a_lease_release(m, li);
	else if (k < 965)
		a_post(m, li);
	else if (k < 975)
		a_room(m, li);
	else if (k < 985)
		a_local_addr(m, li);
	else if (k < 993)
		a_read_deadline(m, li);
	else
		a_idle_deadline(m, li);
	for (int i = 0; i < NLOOPS; i++)
		check_loop(m, i, "after a call");
}

/* A socket of the model's own, bound to a loopback port and left alone. */
static int dead_port(struct model *m, int k, int family, int type)
{
	tl_addr *a = &m->dead[k];
	CHECK(tl_addr_parse(a, family == AF_INET6 ? "::1" : "127.0.0.1", 0) == 0, "parse");
	int fd = socket(family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	socklen_t len = tl_addr_len(a);
	if (bind(fd, &a->sa, len) < 0 || getsockname(fd, &a->sa, &len) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	m->dead_fd[k] = fd;
	return 0;
}

/* A kernel driver's run: a fresh directory for the Unix paths, and the
 * ports nobody listens on. */
static void real_setup(struct model *m)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) > 40)
		tmp = "/tmp";
	snprintf(m->dir, sizeof m->dir, "%s/tlmodel.XXXXXX", tmp);
	CHECK(mkdtemp(m->dir) != NULL, "mkdtemp %s: %s", m->dir, strerror(errno));
	m->dir_made = 1;
	for (int i = 0; i < NPATHS; i++) {
		snprintf(m->pathbuf[i], sizeof m->pathbuf[i], "%s/%c", m->dir, 'a' + i);
		m->paths[i] = m->pathbuf[i];
	}
	int rc = dead_port(m, 0, AF_INET, SOCK_STREAM);
	CHECK(rc == 0, "a TCP port on 127.0.0.1: %s", strerror(-rc));
	m->have_v6 = dead_port(m, 1, AF_INET6, SOCK_STREAM) == 0;
	rc = dead_port(m, 2, AF_INET, SOCK_DGRAM);
	CHECK(rc == 0, "a UDP port on 127.0.0.1: %s", strerror(-rc));
}

static void real_cleanup(struct model *m)
{
	for (int k = 0; k < 3; k++)
		if (m->dead_fd[k] >= 0)
			close(m->dead_fd[k]);
	if (!m->dir_made)
		return;
	for (int i = 0; i < NPATHS; i++)
		unlink(m->pathbuf[i]);
	rmdir(m->dir);
}

int model_run(const struct model_params *p, struct model_result *r)
{
	struct model *m = calloc(1, sizeof *m);
	if (!m)
		return -1;
	memset(r, 0, sizeof *r);
	m->p = p;
	m->r = r;
	m->rng = mix64(p->seed ^ 0x6d6f64656cull);
	m->data = p->data;
	m->size = p->size;
	m->real = p->driver && p->driver != TL_DRIVER_SIM;
	for (int i = 0; i < NPATHS; i++) {
		m->paths[i] = sim_paths[i];
		m->path_owner[i] = PATH_NONE;
	}
	for (int k = 0; k < 3; k++)
		m->dead_fd[k] = -1;
	m->wbuf = malloc(WBUF_SIZE);
	for (uint32_t i = 0; m->wbuf && i < WBUF_SIZE; i++)
		m->wbuf[i] = (uint8_t)(i * 131u + (i >> 8));
	volatile int failed = 0;
	if (!m->wbuf) {
		snprintf(r->what, sizeof r->what, "out of memory");
		r->failed = 1;
		failed = 1;
	} else if (setjmp(m->jb) == 0) {
		if (m->real)
			real_setup(m);
		make_loops(m);
		uint32_t steps = p->steps ? p->steps : 300;
		for (m->step = 0; m->step < steps && !m->exhausted; m->step++)
			step(m);
		if (m->by_destroy)
			destroy_all(m);
		else
			finish(m);
	} else {
		failed = 1; /* the loops are abandoned: they may be inconsistent */
	}
	for (uint32_t i = 0; i < m->no; i++)
		if (!failed || m->o[i].state == MO_DONE)
			free(m->o[i].buf); /* a failed run may still have them in flight */
	for (int li = 0; li < NLOOPS; li++)
		free(m->L[li].leases);
	if (m->real)
		real_cleanup(m);
	free(m->h);
	free(m->o);
	/* After a failure the kernel may still be sending from wbuf. */
	if (!failed || !m->real)
		free(m->wbuf);
	free(m);
	return failed ? -1 : 0;
}
