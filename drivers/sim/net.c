/* drivers/sim/net.c: the simulated world: virtual clock, knobs, seeded randomness, sockets, addresses and connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "sim_int.h"

struct tl__sim_world tl__sim_w = {
	.mu = TL__OS_RMUTEX_INIT,
	.clock = SIM_T0,
	.next_port = PORT_LO,
};

/* ---- knobs ---- */

static const char *const knob_names[TL_SIM_NKNOBS] = {
	[TL_SIM_CONNECT_REFUSED] = "connect_refused",
	[TL_SIM_RESET] = "reset",
	[TL_SIM_CLOSE_RESET] = "close_reset",
	[TL_SIM_SHORT_IO] = "short_io",
	[TL_SIM_ACCEPT_EMFILE] = "accept_emfile",
	[TL_SIM_ACCEPT_ENOMEM] = "accept_enomem",
	[TL_SIM_ACCEPT_ENOBUFS] = "accept_enobufs",
	[TL_SIM_SUBMIT_ENOMEM] = "submit_enomem",
	[TL_SIM_SUBMIT_ENOBUFS] = "submit_enobufs",
	[TL_SIM_OPEN_EMFILE] = "open_emfile",
	[TL_SIM_SLOW] = "slow",
	[TL_SIM_UDP_DROP] = "udp_drop",
	[TL_SIM_CANCEL_FAIL] = "cancel_fail",
	[TL_SIM_SYNC_WRITE] = "sync_write",
	[TL_SIM_ASYNC_CANCEL] = "async_cancel",
	[TL_SIM_UDP_DUP] = "udp_dup",
	[TL_SIM_UDP_REORDER] = "udp_reorder",
};
_Static_assert(sizeof knob_names / sizeof knob_names[0] == TL_SIM_NKNOBS, "a name per knob");

const char *tl__sim_knob_name(enum tl_sim_knob k)
{
	return (unsigned)k < TL_SIM_NKNOBS ? knob_names[k] : "?";
}

void tl__sim_faults_default(struct tl_sim_faults *f)
{
	memset(f, 0, sizeof *f);
	f->p[TL_SIM_SHORT_IO] = 0.25;
	f->p[TL_SIM_SYNC_WRITE] = 0.5;
	f->p[TL_SIM_ASYNC_CANCEL] = 0.5;
	f->latency_us = 20;
	f->slow_us = 50000;
	f->rcvbuf = 65536;
	f->poll_ns = 5000;
	f->shared_wait_us = 1000;
}

int tl__sim_faults_valid(const struct tl_sim_faults *f)
{
	for (int i = 0; i < TL_SIM_NKNOBS; i++)
		if (!(f->p[i] >= 0.0 && f->p[i] <= 1.0)) /* NaN fails too */
			return 0;
	/* A datagram record needs its header; more than 64 MiB is a typo. */
	return f->rcvbuf >= 64 && f->rcvbuf <= (64u << 20) && f->latency_us <= 10000000 &&
	       f->slow_us <= 1000000000 && f->poll_ns <= 1000000000 &&
	       f->shared_wait_us <= 1000000;
}

int tl__sim_faults_parse(struct tl_sim_faults *f, const char *spec)
{
	struct tl_sim_faults t = *f;
	char buf[1024];
	if (!spec)
		return 0;
	if (strlen(spec) >= sizeof buf) {
		fprintf(stderr, "turnloop: sim faults: spec too long\n");
		return -EINVAL;
	}
	strcpy(buf, spec);
	char *save = NULL;
	for (char *item = strtok_r(buf, ", ", &save); item; item = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(item, '=');
		if (!eq)
			goto bad;
		*eq = 0;
		const char *name = item, *val = eq + 1;
		char *end;
		errno = 0;
		uint32_t *num = !strcmp(name, "latency_us")       ? &t.latency_us
				: !strcmp(name, "slow_us")        ? &t.slow_us
				: !strcmp(name, "rcvbuf")         ? &t.rcvbuf
				: !strcmp(name, "poll_ns")        ? &t.poll_ns
				: !strcmp(name, "shared_wait_us") ? &t.shared_wait_us
								  : NULL;
		if (num) {
			/* strtoul takes a sign and negates: "-18446744073709551615"
			 * would be 1. A count starts with a digit. */
			if (*val < '0' || *val > '9')
				goto bad;
			unsigned long v = strtoul(val, &end, 0);
			if (errno || end == val || *end || v > UINT32_MAX)
				goto bad;
			*num = (uint32_t)v;
			continue;
		}
		double p = strtod(val, &end);
		if (errno || end == val || *end)
			goto bad;
		int k;
		for (k = 0; k < TL_SIM_NKNOBS; k++)
			if (!strcmp(name, knob_names[k]))
				break;
		if (k == TL_SIM_NKNOBS)
			goto bad;
		t.p[k] = p;
		continue;
	bad:
		fprintf(stderr, "turnloop: sim faults: bad entry '%s' in \"%s\" (knobs:", item,
			spec);
		for (k = 0; k < TL_SIM_NKNOBS; k++)
			fprintf(stderr, " %s", knob_names[k]);
		fprintf(stderr, " latency_us slow_us rcvbuf poll_ns shared_wait_us)\n");
		return -EINVAL;
	}
	if (!tl__sim_faults_valid(&t)) {
		fprintf(stderr, "turnloop: sim faults: value out of range in \"%s\"\n", spec);
		return -EINVAL;
	}
	*f = t;
	return 0;
}

/* ---- randomness and the trace ---- */


static uint64_t rnd(struct tl_drv *d)
{
	d->rng += 0x9e3779b97f4a7c15ull;
	return mix64(d->rng);
}

/* Uniform in [0, n). */
uint32_t tl__sim_below(struct tl_drv *d, uint32_t n)
{
	return n ? (uint32_t)(((rnd(d) >> 32) * n) >> 32) : 0;
}

/* One decision of knob k. Certain outcomes draw nothing, so that a knob at 0
 * does not shift the stream of the others. */
int tl__sim_draw(struct tl_drv *d, enum tl_sim_knob k)
{
	double p = d->f.p[k];
	if (p <= 0.0)
		return 0;
	int yes = p >= 1.0 || (double)(rnd(d) >> 11) * 0x1p-53 < p;
	d->st.injected[k] += (uint64_t)yes;
	return yes;
}

void tl__sim_hash_u64(struct tl_drv *d, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		d->trace ^= (v >> (8 * i)) & 0xff;
		d->trace *= FNV_PRIME;
	}
}

/* Every event the core hears from us goes through here, into the trace. */
void tl__sim_report(struct tl_drv *d, struct tl_opslot *o, int64_t res, uint32_t flags,
		   uint32_t lease)
{
	tl__sim_hash_u64(d, now_ns());
	tl__sim_hash_u64(d, ((uint64_t)o->code << 48) | ((uint64_t)o->gen << 32) | o->idx);
	tl__sim_hash_u64(d, (uint64_t)res);
	tl__sim_hash_u64(d, ((uint64_t)flags << 32) | lease);
	d->st.events++;
	tl__drv_event(d->loop, o, res, flags, lease);
}

/* ---- scheduling ---- */

/* Latency of one delivery, drawn by the acting loop. */
static uint64_t delay(struct tl_drv *a)
{
	uint64_t us = a->f.latency_us ? tl__sim_below(a, a->f.latency_us + 1) : 0;
	if (tl__sim_draw(a, TL_SIM_SLOW))
		us += a->f.slow_us;
	return us * 1000;
}

/* Run s on its owner loop at virtual time `at` (or earlier if it already is
 * scheduled earlier). `a` is the loop whose thread calls. */
void tl__sim_sched_at(struct tl_drv *a, struct sim_sock *s, uint64_t at)
{
	struct tl_drv *d = s->d;
	struct tl_heap *hp = &d->sched;
	if (tl__heap_has(hp, s->idx)) {
		if (hp->a[hp->pos[s->idx]].at <= at)
			return;
		tl__heap_remove(hp, s->idx);
	}
	tl__heap_push(hp, s->idx, at, d->seq++);
	/* A loop on another thread may be blocked on its eventfd. */
	if (d != a)
		tl__drv_wake(d->loop);
}

void tl__sim_sched(struct tl_drv *a, struct sim_sock *s)
{
	tl__sim_sched_at(a, s, now_ns() + delay(a));
}

/* ---- sockets ---- */

struct sim_sock *tl__sim_sock_new(struct tl_drv *d, uint8_t type)
{
	if (d->sfree == TL_NIL)
		return NULL;
	struct sim_sock *s = &d->socks[d->sfree];
	d->sfree = s->next_free;
	/* The slot keeps its buffer: after warm-up, sockets cost no allocation. */
	uint8_t *buf = s->buf;
	uint32_t bufcap = s->bufcap, idx = s->idx;
	memset(s, 0, sizeof *s);
	s->buf = buf;
	s->bufcap = bufcap;
	s->idx = idx;
	s->d = d;
	s->type = type;
	s->hidx = TL_NIL;
	s->conn_res = CONN_PENDING;
	s->rhead = s->rtail = s->whead = s->wtail = TL_NIL;
	tl__sim_so_defaults(s);
	s->spl = TL_NIL;
	return s;
}

/* What Linux reports for a fresh socket (NODELAY is the loop's own default;
 * the buffers are the simulation's receive buffer). */
void tl__sim_so_defaults(struct sim_sock *s)
{
	memset(s->so, 0, sizeof s->so);
	s->so[TL_SO_NODELAY] = 1;
	s->so[TL_SO_KEEPIDLE] = 7200;
	s->so[TL_SO_KEEPINTVL] = 75;
	s->so[TL_SO_KEEPCNT] = 9;
	s->so[TL_SO_RCVBUF] = s->d->f.rcvbuf;
	s->so[TL_SO_SNDBUF] = s->d->f.rcvbuf;
}

void tl__sim_sock_free(struct sim_sock *s)
{
	struct tl_drv *d = s->d;
	tl__heap_remove(&d->sched, s->idx);
	if (s->lease_wait) {
		for (uint32_t i = 0; i < d->nlwait; i++)
			if (d->lwait[i] == s->idx) {
				d->lwait[i] = d->lwait[--d->nlwait];
				break;
			}
	}
	s->type = SK_FREE;
	s->peer = NULL;
	s->next_free = d->sfree;
	d->sfree = s->idx;
}

/* Give s an empty receive ring of its owner's configured size. */
int tl__sim_ring_init(struct sim_sock *s)
{
	uint32_t want = s->d->f.rcvbuf;
	if (s->bufcap < want) {
		free(s->buf);
		s->buf = malloc(want);
		s->bufcap = s->buf ? want : 0;
		if (!s->buf)
			return -ENOMEM;
	}
	s->cap = want;
	s->head = s->len = s->ndgram = 0;
	s->segh = s->segn = 0;
	return 0;
}

void tl__sim_seg_add(struct sim_sock *s, uint32_t n)
{
	if (!n)
		return;
	if (s->segn == SEGS)
		s->seg[(s->segh + SEGS - 1) % SEGS] += n;
	else
		s->seg[(s->segh + s->segn++) % SEGS] = n;
}

void tl__sim_seg_take(struct sim_sock *s, uint32_t n)
{
	while (n && s->segn) {
		uint32_t *f = &s->seg[s->segh];
		uint32_t k = *f < n ? *f : n;
		*f -= k;
		n -= k;
		if (!*f) {
			s->segh = (uint8_t)((s->segh + 1) % SEGS);
			s->segn--;
		}
	}
}

/* Bytes in the first k segments. */
uint32_t tl__sim_seg_prefix(const struct sim_sock *s, uint32_t k)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < k && i < s->segn; i++)
		n += s->seg[(s->segh + i) % SEGS];
	return n;
}

void tl__sim_ring_put(struct sim_sock *s, const void *src, uint32_t n)
{
	if (!n)
		return;
	uint32_t tail = (uint32_t)(((uint64_t)s->head + s->len) % s->cap);
	uint32_t k = s->cap - tail < n ? s->cap - tail : n;
	memcpy(s->buf + tail, src, k);
	if (n > k)
		memcpy(s->buf, (const uint8_t *)src + k, n - k);
	s->len += n;
}

void tl__sim_ring_put_front(struct sim_sock *s, const void *src, uint32_t n)
{
	if (!n)
		return;
	s->head = (uint32_t)(((uint64_t)s->head + s->cap - n) % s->cap);
	uint32_t k = s->cap - s->head < n ? s->cap - s->head : n;
	memcpy(s->buf + s->head, src, k);
	if (n > k)
		memcpy(s->buf, (const uint8_t *)src + k, n - k);
	s->len += n;
}

/* Take n bytes off the ring into dst (NULL: discard them). */
void tl__sim_ring_get(struct sim_sock *s, void *dst, uint32_t n)
{
	if (!n)
		return;
	uint32_t k = s->cap - s->head < n ? s->cap - s->head : n;
	if (dst) {
		memcpy(dst, s->buf + s->head, k);
		if (n > k)
			memcpy((uint8_t *)dst + k, s->buf, n - k);
	}
	s->head = (uint32_t)(((uint64_t)s->head + n) % s->cap);
	s->len -= n;
}

/* ---- addresses and the registry ---- */

uint16_t tl__sim_port_of(const tl_addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

void tl__sim_set_port(tl_addr *a, uint16_t p)
{
	if (a->sa.sa_family == AF_INET6)
		a->in6.sin6_port = htons(p);
	else
		a->in.sin_port = htons(p);
}

int tl__sim_ip_any(const tl_addr *a)
{
	if (a->sa.sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&a->in6.sin6_addr);
	return a->in.sin_addr.s_addr == htonl(INADDR_ANY);
}

static int ip_eq(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET6)
		return !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
	return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
}

/* Connecting or sending to a wildcard means the host itself: loopback. */
tl_addr tl__sim_dest_of(const tl_addr *a)
{
	tl_addr r = *a;
	if (tl__sim_ip_any(&r)) {
		if (r.sa.sa_family == AF_INET6)
			r.in6.sin6_addr = in6addr_loopback;
		else
			r.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	return r;
}

static int is_mapped(const tl_addr *a)
{
	return a->sa.sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a->in6.sin6_addr);
}

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it
 * stands for: what a connection to it really is, as in Linux (so that an
 * IPV6_V6ONLY listener does not get it). Any other address as it is. */
tl_addr tl__sim_unmapped(const tl_addr *a)
{
	if (!is_mapped(a))
		return *a;
	tl_addr r;
	memset(&r, 0, sizeof r);
	r.in.sin_family = AF_INET;
	r.in.sin_port = a->in6.sin6_port;
	memcpy(&r.in.sin_addr, &a->in6.sin6_addr.s6_addr[12], 4);
	return r;
}

/* An IPv4 address as a dual-stack IPv6 socket sees it (::ffff:a.b.c.d),
 * and a mapped one as an IPv4 socket sees it. */
tl_addr tl__sim_as_family(const tl_addr *a, int family)
{
	if (family == AF_INET)
		return tl__sim_unmapped(a);
	if (a->sa.sa_family != AF_INET || family != AF_INET6)
		return *a;
	tl_addr r;
	memset(&r, 0, sizeof r);
	r.in6.sin6_family = AF_INET6;
	r.in6.sin6_port = a->in.sin_port;
	r.in6.sin6_addr.s6_addr[10] = 0xff;
	r.in6.sin6_addr.s6_addr[11] = 0xff;
	memcpy(&r.in6.sin6_addr.s6_addr[12], &a->in.sin_addr, 4);
	return r;
}

/* Does a socket bound to b's address get what is sent to dst? */
static int addr_hits(const struct sim_sock *b, const tl_addr *dst)
{
	if (tl__sim_port_of(&b->local) != tl__sim_port_of(dst))
		return 0;
	if (b->local.sa.sa_family == dst->sa.sa_family)
		return tl__sim_ip_any(&b->local) || ip_eq(&b->local, dst);
	/* A dual-stack IPv6 wildcard takes IPv4 too. */
	return b->local.sa.sa_family == AF_INET6 && dst->sa.sa_family == AF_INET && !b->v6only &&
	       tl__sim_ip_any(&b->local);
}

/* Would binding a (v6only as given) collide with bound socket b? */
static int addr_clash(const struct sim_sock *b, const tl_addr *a, int v6only)
{
	if (tl__sim_port_of(&b->local) != tl__sim_port_of(a))
		return 0;
	int fb = b->local.sa.sa_family, fa = a->sa.sa_family;
	if (fb == fa)
		return tl__sim_ip_any(&b->local) || tl__sim_ip_any(a) || ip_eq(&b->local, a);
	if (fb == AF_INET6)
		return tl__sim_ip_any(&b->local) && !b->v6only;
	return tl__sim_ip_any(a) && !v6only;
}

static int ip_bound(const struct sim_sock *s)
{
	return (s->type == SK_LISTEN && !s->is_unix) || s->type == SK_UDP;
}

static int port_used(uint8_t type, uint16_t p)
{
	for (struct sim_sock *b = tl__sim_w.bound; b; b = b->reg_next)
		if (b->type == type && ip_bound(b) && tl__sim_port_of(&b->local) == p)
			return 1;
	return 0;
}

/* The next free ephemeral port for sockets of type, from the world's
 * counter (deterministic: it restarts with the world). */
int tl__sim_pick_port(uint8_t type)
{
	for (uint32_t i = 0; i <= PORT_HI - PORT_LO; i++) {
		uint16_t p = (uint16_t)tl__sim_w.next_port;
		tl__sim_w.next_port = p == PORT_HI ? PORT_LO : p + 1u;
		if (!port_used(type, p))
			return p;
	}
	return -EADDRINUSE;
}

void tl__sim_reg_add(struct sim_sock *s)
{
	s->reg_next = tl__sim_w.bound;
	tl__sim_w.bound = s;
}

static void reg_del(struct sim_sock *s)
{
	for (struct sim_sock **pp = &tl__sim_w.bound; *pp; pp = &(*pp)->reg_next)
		if (*pp == s) {
			*pp = s->reg_next;
			break;
		}
	s->reg_next = NULL;
}

int tl__sim_bind_ip(struct sim_sock *s, const tl_addr *addr, int reuseport, int v6only)
{
	tl_addr a = *addr;
	if (tl__sim_port_of(&a) == 0) {
		int p = tl__sim_pick_port(s->type);
		if (p < 0)
			return p;
		tl__sim_set_port(&a, (uint16_t)p);
	} else {
		for (struct sim_sock *b = tl__sim_w.bound; b; b = b->reg_next) {
			if (b->type != s->type || !ip_bound(b) || !addr_clash(b, &a, v6only))
				continue;
			/* SO_REUSEPORT shares an address only when every owner asked. */
			if (reuseport && b->reuseport && b->local.sa.sa_family == a.sa.sa_family &&
			    ip_eq(&b->local, &a))
				continue;
			return -EADDRINUSE;
		}
	}
	s->local = a;
	s->reuseport = (uint8_t)!!reuseport;
	s->v6only = (uint8_t)!!v6only;
	tl__sim_reg_add(s);
	return 0;
}

/* The listener a connect to dst reaches: the most specific address wins, and
 * a SO_REUSEPORT group spreads connections by a seeded draw. */
struct sim_sock *tl__sim_find_listener(struct tl_drv *a, const tl_addr *dst, const char *path)
{
	uint32_t exact = 0, wild = 0;
	for (struct sim_sock *b = tl__sim_w.bound; b; b = b->reg_next) {
		if (b->type != SK_LISTEN)
			continue;
		if (path) {
			if (b->is_unix && !strcmp(b->path, path))
				return b;
			continue;
		}
		if (b->is_unix || !addr_hits(b, dst))
			continue;
		if (tl__sim_ip_any(&b->local))
			wild++;
		else
			exact++;
	}
	uint32_t n = exact ? exact : wild;
	if (!n)
		return NULL;
	uint32_t k = n > 1 ? tl__sim_below(a, n) : 0;
	for (struct sim_sock *b = tl__sim_w.bound; b; b = b->reg_next) {
		if (b->type != SK_LISTEN || b->is_unix || !addr_hits(b, dst))
			continue;
		if (!!exact == !tl__sim_ip_any(&b->local) && k-- == 0)
			return b;
	}
	return NULL;
}

struct sim_sock *tl__sim_find_udp(const tl_addr *dst)
{
	struct sim_sock *wild = NULL;
	for (struct sim_sock *b = tl__sim_w.bound; b; b = b->reg_next) {
		if (b->type != SK_UDP || !addr_hits(b, dst))
			continue;
		if (!tl__sim_ip_any(&b->local))
			return b;
		if (!wild)
			wild = b;
	}
	return wild;
}

/* ---- listener queues ---- */

void tl__sim_list_append(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s)
{
	s->qnext = NULL;
	s->qprev = *tail;
	if (*tail)
		(*tail)->qnext = s;
	else
		*head = s;
	*tail = s;
}

void tl__sim_list_unlink(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s)
{
	if (s->qprev)
		s->qprev->qnext = s->qnext;
	else
		*head = s->qnext;
	if (s->qnext)
		s->qnext->qprev = s->qprev;
	else
		*tail = s->qprev;
	s->qnext = s->qprev = NULL;
}

/* ---- connections ---- */

/* An abortive end of one side: bytes already received stay readable (as in
 * Linux), then the next read or write reports err once, reads find EOF and
 * writes EPIPE from then on. */
void tl__sim_abort_side(struct tl_drv *a, struct sim_sock *s, int err)
{
	s->err = err;
	s->broken = 1;
	s->rd_eof = 1;
	s->peer = NULL;
	tl__sim_sched(a, s);
}

void tl__sim_reset_conn(struct tl_drv *a, struct sim_sock *s)
{
	struct sim_sock *p = s->peer;
	if (p)
		tl__sim_abort_side(a, p, ECONNRESET);
	tl__sim_abort_side(a, s, ECONNRESET);
}

/* Linux keeps backlog + 1 connections on an accept queue. Queued
 * connections use no handle, so they get their own share of the socket
 * pool: opening a socket fails only when the handle table is full. */
int tl__sim_can_establish(const struct sim_sock *L)
{
	return L->acc_n <= L->backlog && L->d->nqueued < L->d->maxqueued;
}

/* Complete connector c's handshake with listener L: a server socket on L's
 * accept queue (owned by L's loop), c connected. 0 or -ENOMEM. */
int tl__sim_establish(struct tl_drv *a, struct sim_sock *L, struct sim_sock *c)
{
	struct sim_sock *sv = tl__sim_sock_new(L->d, SK_STREAM);
	if (!sv)
		return -ENOMEM;
	if (tl__sim_ring_init(sv) < 0) {
		tl__sim_sock_free(sv);
		return -ENOMEM;
	}
	sv->cs = CS_CONNECTED;
	sv->conn_res = 0;
	sv->is_unix = L->is_unix;
	sv->in_accq = 1;
	sv->listener = L;
	if (L->is_unix) {
		sv->local.sa.sa_family = AF_UNIX;
		sv->remote.sa.sa_family = AF_UNIX;
	} else {
		sv->local = tl__sim_as_family(&c->remote, L->local.sa.sa_family);
		sv->remote = tl__sim_as_family(&c->local, L->local.sa.sa_family);
	}
	/* An accepted socket starts with its listener's options, as Linux
	 * clones them. */
	memcpy(sv->so, L->so, sizeof sv->so);
	sv->peer = c;
	c->peer = sv;
	c->cs = CS_CONNECTED;
	c->conn_res = 0;
	c->listener = NULL;
	tl__sim_list_append(&L->acc_head, &L->acc_tail, sv);
	L->acc_n++;
	L->d->nqueued++;
	tl__sim_sched(a, L);
	tl__sim_sched(a, c);
	return 0;
}

/* Connectors waiting for room on L's accept queue go in while it has room. */
void tl__sim_promote(struct tl_drv *a, struct sim_sock *L)
{
	while (L->wait_head && tl__sim_can_establish(L)) {
		struct sim_sock *c = L->wait_head;
		tl__sim_list_unlink(&L->wait_head, &L->wait_tail, c);
		if (tl__sim_establish(a, L, c) < 0) {
			tl__sim_list_append(&L->wait_head, &L->wait_tail, c); /* retried on the next accept */
			c->listener = L;
			break;
		}
	}
}

/* The host closed s (or its listener went away): tell the other side. */
void tl__sim_close_sock(struct tl_drv *a, struct sim_sock *s)
{
	switch (s->type) {
	case SK_STREAM:
		if (s->cs == CS_WAITING && s->listener)
			tl__sim_list_unlink(&s->listener->wait_head, &s->listener->wait_tail, s);
		if (s->in_accq && s->listener) {
			tl__sim_list_unlink(&s->listener->acc_head, &s->listener->acc_tail, s);
			s->listener->acc_n--;
			s->d->nqueued--;
		}
		if (s->peer) {
			struct sim_sock *p = s->peer;
			p->peer = NULL;
			s->peer = NULL;
			/* Unread data makes the close abortive, as in TCP, and so
			 * does tl_close_abort (SO_LINGER {1, 0}). */
			if (s->len || s->aborting || tl__sim_draw(a, TL_SIM_CLOSE_RESET)) {
				tl__sim_abort_side(a, p, ECONNRESET);
			} else {
				p->rd_eof = 1;
				tl__sim_sched(a, p);
			}
		}
		break;
	case SK_LISTEN:
		reg_del(s);
		/* Connections nobody accepted are reset; connectors still waiting
		 * are refused. */
		while (s->acc_head) {
			struct sim_sock *sv = s->acc_head;
			tl__sim_list_unlink(&s->acc_head, &s->acc_tail, sv);
			s->acc_n--;
			sv->d->nqueued--;
			sv->in_accq = 0;
			sv->listener = NULL;
			if (sv->peer) {
				sv->peer->peer = NULL;
				tl__sim_abort_side(a, sv->peer, ECONNRESET);
			}
			tl__sim_sock_free(sv);
		}
		while (s->wait_head) {
			struct sim_sock *c = s->wait_head;
			tl__sim_list_unlink(&s->wait_head, &s->wait_tail, c);
			c->listener = NULL;
			c->cs = CS_FAILED;
			c->conn_res = -ECONNREFUSED;
			tl__sim_sched(a, c);
		}
		break;
	case SK_UDP:
		reg_del(s);
		break;
	default:
		break;
	}
	tl__sim_sock_free(s);
}
