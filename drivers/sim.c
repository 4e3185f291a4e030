/* drivers/sim.c: the simulation driver: virtual time, an in-memory network and seeded faults. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/un.h>
#include "internal.h"
#include "sim.h"

/*
 * The world. Every sim loop of the process shares one network (a registry of
 * bound listeners and datagram sockets, and the connections between them) and
 * one virtual clock. Both are guarded by one recursive mutex: loops on
 * different threads can talk to each other, and the driver's entry points may
 * nest (a lease dropped by the core inside poll() comes back through
 * lease_returned()). The world resets (clock, ports, creation order) when its
 * last loop goes away, so consecutive tests in one process each start from the
 * same state and replay alike.
 *
 * Time. The clock starts at SIM_T0 and moves only inside poll(). A poll that
 * does not wait costs poll_ns (busy loops and zero-timeout spinning still see
 * time pass and deliveries arrive). A poll that may wait and finds nothing due
 * jumps to the loop's next scheduled event, or by the whole timeout when there
 * is none; no real time passes. With no timeout and nothing scheduled the
 * loop really blocks on the core's wake eventfd, so posts and sim traffic from
 * other threads still wake it. While another party holds the loop's poster
 * (it may post from another thread), a jump is preceded by a short real wait
 * (shared_wait_us) so that such threads get to run.
 *
 * Scheduling. A socket whose state changes (bytes arrived, room freed, a
 * connection queued, EOF, reset, an op submitted or cancelled) is scheduled to
 * run on its owner loop at now + a seeded delivery latency; the owner's poll()
 * runs due sockets in (time, sequence) order, each running its write queue,
 * then its read queue, in submission order per direction, as the epoll driver
 * does. Bytes are copied into the peer's bounded receive buffer at once; the
 * latency only delays when the peer notices. Partial I/O follows TCP: a short
 * read ends on a write's boundary, a short write moves at least one MSS.
 *
 * Determinism. Every choice is drawn from the acting loop's PRNG (splitmix64),
 * seeded from sim_seed ($TL_SIM_SEED wins) and the loop's creation order; no
 * choice depends on real time, addresses or thread timing. One thread, one
 * seed: one run, and tl__sim_trace() proves it.
 */

#define SIM_T0 (1000ull * 1000000000ull) /* virtual time of a fresh world: 1000 s */
#define PORT_LO 32768
#define PORT_HI 60999
#define UDP_MAX 65507
#define CONN_PENDING 1 /* conn_res before the connect's outcome is known */
#define SIM_MSS 1448   /* a short write still moves one segment's worth */
#define SEGS 16        /* write boundaries a receive ring remembers */
#define FNV_OFF 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

enum { SK_FREE = 0, SK_LISTEN, SK_STREAM, SK_UDP };
/* Stream connection states. */
enum { CS_NEW = 0, CS_WAITING, CS_CONNECTED, CS_FAILED };

struct sim_sock {
	uint8_t type, cs;
	uint8_t is_unix, reuseport, v6only;
	uint8_t rd_eof;    /* nothing more will arrive: EOF once the buffer is read */
	uint8_t wr_shut;   /* our write side is shut down */
	uint8_t broken;    /* reset: writes fail with EPIPE from now on */
	uint8_t lease_wait;
	uint8_t in_accq;   /* a server socket on its listener's accept queue */
	int err;           /* a pending error, reported once by the next read or write */
	int conn_res;      /* the connect's outcome: CONN_PENDING, 0 or -errno */
	struct tl_drv *d;  /* owner */
	uint32_t idx, hidx, next_free;
	struct sim_sock *peer;
	struct sim_sock *listener;     /* while waiting for, or queued on, a listener */
	struct sim_sock *qnext, *qprev;/* on a listener's accept queue or wait list */
	struct sim_sock *reg_next;     /* the world's registry of bound sockets */
	/* listeners */
	struct sim_sock *acc_head, *acc_tail, *wait_head, *wait_tail;
	uint32_t acc_n, backlog;
	tl_addr local, remote;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* receive ring: stream bytes, or datagram records (struct dg_hdr + bytes) */
	uint8_t *buf;
	uint32_t bufcap, cap, head, len, ndgram;
	/* Stream segments in the ring: what each write put there. A short read
	 * ends on a segment boundary, as TCP delivers; beyond SEGS, new
	 * segments coalesce into the last one, as TCP does too. */
	uint32_t seg[SEGS];
	uint8_t segh, segn;
	/* op queues, oldest first (linked through the ops' drv words) */
	uint32_t rhead, rtail, whead, wtail;
};

struct dg_hdr {
	uint32_t len;
	tl_addr from;
};

struct sim_o {
	uint32_t qnext;
	uint32_t cancel; /* CX_*: cancellation asked, acknowledgement pending */
};

/* An asynchronous cancellation is acknowledged by the next run of the socket
 * (CX_ACK), or races: the op runs once more as if nothing was asked, then the
 * run after acknowledges it (CX_RACE), as io_uring completions that were in
 * flight when the cancel request went in. */
enum { CX_NONE = 0, CX_ACK, CX_RACE };
_Static_assert(sizeof(struct sim_o) <= sizeof(((struct tl_opslot *)0)->drv), "sim_o fits");

struct tl_drv {
	tl_loop *loop;
	int wake_fd;
	uint32_t order;
	uint64_t seed, rng, trace, seq;
	struct tl_sim_faults f;
	struct tl_sim_stats st;
	struct sim_sock *socks;
	uint32_t nsocks, sfree;
	uint32_t nqueued, maxqueued; /* server sockets on accept queues, and their cap */
	struct tl_heap sched; /* sockets to run, by (virtual time, sequence) */
	uint32_t *lwait, nlwait;
};

static struct {
	pthread_mutex_t mu;
	_Atomic uint64_t clock;
	uint32_t nloops, created, next_port;
	struct sim_sock *bound;
} W = {
	.mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP,
	.clock = SIM_T0,
	.next_port = PORT_LO,
};

static void lock(void) { pthread_mutex_lock(&W.mu); }
static void unlock(void) { pthread_mutex_unlock(&W.mu); }

static inline uint64_t now_ns(void)
{
	return atomic_load_explicit(&W.clock, memory_order_acquire);
}

static void advance(uint64_t t)
{
	uint64_t c = now_ns();
	while (c < t && !atomic_compare_exchange_weak(&W.clock, &c, t))
		;
}

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

static int faults_valid(const struct tl_sim_faults *f)
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
	if (!faults_valid(&t)) {
		fprintf(stderr, "turnloop: sim faults: value out of range in \"%s\"\n", spec);
		return -EINVAL;
	}
	*f = t;
	return 0;
}

/* ---- randomness and the trace ---- */

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd(struct tl_drv *d)
{
	d->rng += 0x9e3779b97f4a7c15ull;
	return mix64(d->rng);
}

/* Uniform in [0, n). */
static uint32_t below(struct tl_drv *d, uint32_t n)
{
	return n ? (uint32_t)(((rnd(d) >> 32) * n) >> 32) : 0;
}

/* One decision of knob k. Certain outcomes draw nothing, so that a knob at 0
 * does not shift the stream of the others. */
static int draw(struct tl_drv *d, enum tl_sim_knob k)
{
	double p = d->f.p[k];
	if (p <= 0.0)
		return 0;
	int yes = p >= 1.0 || (double)(rnd(d) >> 11) * 0x1p-53 < p;
	d->st.injected[k] += (uint64_t)yes;
	return yes;
}

static void hash_u64(struct tl_drv *d, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		d->trace ^= (v >> (8 * i)) & 0xff;
		d->trace *= FNV_PRIME;
	}
}

/* Every event the core hears from us goes through here, into the trace. */
static void report(struct tl_drv *d, struct tl_opslot *o, int64_t res, uint32_t flags,
		   uint32_t lease)
{
	hash_u64(d, now_ns());
	hash_u64(d, ((uint64_t)o->code << 48) | ((uint64_t)o->gen << 32) | o->idx);
	hash_u64(d, (uint64_t)res);
	hash_u64(d, ((uint64_t)flags << 32) | lease);
	d->st.events++;
	tl__drv_event(d->loop, o, res, flags, lease);
}

/* ---- scheduling ---- */

/* Latency of one delivery, drawn by the acting loop. */
static uint64_t delay(struct tl_drv *a)
{
	uint64_t us = a->f.latency_us ? below(a, a->f.latency_us + 1) : 0;
	if (draw(a, TL_SIM_SLOW))
		us += a->f.slow_us;
	return us * 1000;
}

/* Run s on its owner loop at virtual time `at` (or earlier if it already is
 * scheduled earlier). `a` is the loop whose thread calls. */
static void sched_at(struct tl_drv *a, struct sim_sock *s, uint64_t at)
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
	if (d != a && !pthread_equal(d->loop->thread, pthread_self()))
		tl_poster_wake(d->loop->poster);
}

static void sched(struct tl_drv *a, struct sim_sock *s)
{
	sched_at(a, s, now_ns() + delay(a));
}

/* ---- sockets ---- */

static struct sim_sock *sock_new(struct tl_drv *d, uint8_t type)
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
	return s;
}

static void sock_free(struct sim_sock *s)
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
static int ring_init(struct sim_sock *s)
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

static void seg_add(struct sim_sock *s, uint32_t n)
{
	if (!n)
		return;
	if (s->segn == SEGS)
		s->seg[(s->segh + SEGS - 1) % SEGS] += n;
	else
		s->seg[(s->segh + s->segn++) % SEGS] = n;
}

static void seg_take(struct sim_sock *s, uint32_t n)
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
static uint32_t seg_prefix(const struct sim_sock *s, uint32_t k)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < k && i < s->segn; i++)
		n += s->seg[(s->segh + i) % SEGS];
	return n;
}

static void ring_put(struct sim_sock *s, const void *src, uint32_t n)
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

/* Take n bytes off the ring into dst (NULL: discard them). */
static void ring_get(struct sim_sock *s, void *dst, uint32_t n)
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

static uint16_t port_of(const tl_addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in.sin_port);
}

static void set_port(tl_addr *a, uint16_t p)
{
	if (a->sa.sa_family == AF_INET6)
		a->in6.sin6_port = htons(p);
	else
		a->in.sin_port = htons(p);
}

static int ip_any(const tl_addr *a)
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
static tl_addr dest_of(const tl_addr *a)
{
	tl_addr r = *a;
	if (ip_any(&r)) {
		if (r.sa.sa_family == AF_INET6)
			r.in6.sin6_addr = in6addr_loopback;
		else
			r.in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	return r;
}

/* An IPv4 address as a dual-stack IPv6 socket sees it (::ffff:a.b.c.d). */
static tl_addr as_family(const tl_addr *a, int family)
{
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
	if (port_of(&b->local) != port_of(dst))
		return 0;
	if (b->local.sa.sa_family == dst->sa.sa_family)
		return ip_any(&b->local) || ip_eq(&b->local, dst);
	/* A dual-stack IPv6 wildcard takes IPv4 too. */
	return b->local.sa.sa_family == AF_INET6 && dst->sa.sa_family == AF_INET && !b->v6only &&
	       ip_any(&b->local);
}

/* Would binding a (v6only as given) collide with bound socket b? */
static int addr_clash(const struct sim_sock *b, const tl_addr *a, int v6only)
{
	if (port_of(&b->local) != port_of(a))
		return 0;
	int fb = b->local.sa.sa_family, fa = a->sa.sa_family;
	if (fb == fa)
		return ip_any(&b->local) || ip_any(a) || ip_eq(&b->local, a);
	if (fb == AF_INET6)
		return ip_any(&b->local) && !b->v6only;
	return ip_any(a) && !v6only;
}

static int ip_bound(const struct sim_sock *s)
{
	return (s->type == SK_LISTEN && !s->is_unix) || s->type == SK_UDP;
}

static int port_used(uint8_t type, uint16_t p)
{
	for (struct sim_sock *b = W.bound; b; b = b->reg_next)
		if (b->type == type && ip_bound(b) && port_of(&b->local) == p)
			return 1;
	return 0;
}

/* The next free ephemeral port for sockets of type, from the world's
 * counter (deterministic: it restarts with the world). */
static int pick_port(uint8_t type)
{
	for (uint32_t i = 0; i <= PORT_HI - PORT_LO; i++) {
		uint16_t p = (uint16_t)W.next_port;
		W.next_port = p == PORT_HI ? PORT_LO : p + 1u;
		if (!port_used(type, p))
			return p;
	}
	return -EADDRINUSE;
}

static void reg_add(struct sim_sock *s)
{
	s->reg_next = W.bound;
	W.bound = s;
}

static void reg_del(struct sim_sock *s)
{
	for (struct sim_sock **pp = &W.bound; *pp; pp = &(*pp)->reg_next)
		if (*pp == s) {
			*pp = s->reg_next;
			break;
		}
	s->reg_next = NULL;
}

static int bind_ip(struct sim_sock *s, const tl_addr *addr, int reuseport, int v6only)
{
	tl_addr a = *addr;
	if (port_of(&a) == 0) {
		int p = pick_port(s->type);
		if (p < 0)
			return p;
		set_port(&a, (uint16_t)p);
	} else {
		for (struct sim_sock *b = W.bound; b; b = b->reg_next) {
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
	reg_add(s);
	return 0;
}

/* The listener a connect to dst reaches: the most specific address wins, and
 * a SO_REUSEPORT group spreads connections by a seeded draw. */
static struct sim_sock *find_listener(struct tl_drv *a, const tl_addr *dst, const char *path)
{
	uint32_t exact = 0, wild = 0;
	for (struct sim_sock *b = W.bound; b; b = b->reg_next) {
		if (b->type != SK_LISTEN)
			continue;
		if (path) {
			if (b->is_unix && !strcmp(b->path, path))
				return b;
			continue;
		}
		if (b->is_unix || !addr_hits(b, dst))
			continue;
		if (ip_any(&b->local))
			wild++;
		else
			exact++;
	}
	uint32_t n = exact ? exact : wild;
	if (!n)
		return NULL;
	uint32_t k = n > 1 ? below(a, n) : 0;
	for (struct sim_sock *b = W.bound; b; b = b->reg_next) {
		if (b->type != SK_LISTEN || b->is_unix || !addr_hits(b, dst))
			continue;
		if (!!exact == !ip_any(&b->local) && k-- == 0)
			return b;
	}
	return NULL;
}

static struct sim_sock *find_udp(const tl_addr *dst)
{
	struct sim_sock *wild = NULL;
	for (struct sim_sock *b = W.bound; b; b = b->reg_next) {
		if (b->type != SK_UDP || !addr_hits(b, dst))
			continue;
		if (!ip_any(&b->local))
			return b;
		if (!wild)
			wild = b;
	}
	return wild;
}

/* ---- op queues ---- */

static inline struct sim_o *SO(struct tl_opslot *o) { return (struct sim_o *)o->drv; }

static int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ || o->code == TL_OP_RECV;
}

static void q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	SO(o)->qnext = TL_NIL;
	if (*tail == TL_NIL)
		*head = o->idx;
	else
		SO(tl__drv_op(l, *tail))->qnext = o->idx;
	*tail = o->idx;
}

static int q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o)
{
	uint32_t prev = TL_NIL;
	for (uint32_t i = *head; i != TL_NIL; prev = i, i = SO(tl__drv_op(l, i))->qnext) {
		if (i != o->idx)
			continue;
		uint32_t next = SO(o)->qnext;
		if (prev == TL_NIL)
			*head = next;
		else
			SO(tl__drv_op(l, prev))->qnext = next;
		if (*tail == i)
			*tail = prev;
		return 1;
	}
	return 0;
}

static int q_has(tl_loop *l, uint32_t head, const struct tl_opslot *o)
{
	for (uint32_t i = head; i != TL_NIL; i = SO(tl__drv_op(l, i))->qnext)
		if (i == o->idx)
			return 1;
	return 0;
}

/* ---- listener queues ---- */

static void list_append(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s)
{
	s->qnext = NULL;
	s->qprev = *tail;
	if (*tail)
		(*tail)->qnext = s;
	else
		*head = s;
	*tail = s;
}

static void list_unlink(struct sim_sock **head, struct sim_sock **tail, struct sim_sock *s)
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
static void abort_side(struct tl_drv *a, struct sim_sock *s, int err)
{
	s->err = err;
	s->broken = 1;
	s->rd_eof = 1;
	s->peer = NULL;
	sched(a, s);
}

static void reset_conn(struct tl_drv *a, struct sim_sock *s)
{
	struct sim_sock *p = s->peer;
	if (p)
		abort_side(a, p, ECONNRESET);
	abort_side(a, s, ECONNRESET);
}

/* Linux keeps backlog + 1 connections on an accept queue. Queued
 * connections use no handle, so they get their own share of the socket
 * pool: opening a socket fails only when the handle table is full. */
static int can_establish(const struct sim_sock *L)
{
	return L->acc_n <= L->backlog && L->d->nqueued < L->d->maxqueued;
}

/* Complete connector c's handshake with listener L: a server socket on L's
 * accept queue (owned by L's loop), c connected. 0 or -ENOMEM. */
static int establish(struct tl_drv *a, struct sim_sock *L, struct sim_sock *c)
{
	struct sim_sock *sv = sock_new(L->d, SK_STREAM);
	if (!sv)
		return -ENOMEM;
	if (ring_init(sv) < 0) {
		sock_free(sv);
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
		sv->local = as_family(&c->remote, L->local.sa.sa_family);
		sv->remote = as_family(&c->local, L->local.sa.sa_family);
	}
	sv->peer = c;
	c->peer = sv;
	c->cs = CS_CONNECTED;
	c->conn_res = 0;
	c->listener = NULL;
	list_append(&L->acc_head, &L->acc_tail, sv);
	L->acc_n++;
	L->d->nqueued++;
	sched(a, L);
	sched(a, c);
	return 0;
}

/* Connectors waiting for room on L's accept queue go in while it has room. */
static void promote(struct tl_drv *a, struct sim_sock *L)
{
	while (L->wait_head && can_establish(L)) {
		struct sim_sock *c = L->wait_head;
		list_unlink(&L->wait_head, &L->wait_tail, c);
		if (establish(a, L, c) < 0) {
			list_append(&L->wait_head, &L->wait_tail, c); /* retried on the next accept */
			c->listener = L;
			break;
		}
	}
}

/* The host closed s (or its listener went away): tell the other side. */
static void close_sock(struct tl_drv *a, struct sim_sock *s)
{
	switch (s->type) {
	case SK_STREAM:
		if (s->cs == CS_WAITING && s->listener)
			list_unlink(&s->listener->wait_head, &s->listener->wait_tail, s);
		if (s->in_accq && s->listener) {
			list_unlink(&s->listener->acc_head, &s->listener->acc_tail, s);
			s->listener->acc_n--;
			s->d->nqueued--;
		}
		if (s->peer) {
			struct sim_sock *p = s->peer;
			p->peer = NULL;
			s->peer = NULL;
			/* Unread data makes the close abortive, as in TCP. */
			if (s->len || draw(a, TL_SIM_CLOSE_RESET)) {
				abort_side(a, p, ECONNRESET);
			} else {
				p->rd_eof = 1;
				sched(a, p);
			}
		}
		break;
	case SK_LISTEN:
		reg_del(s);
		/* Connections nobody accepted are reset; connectors still waiting
		 * are refused. */
		while (s->acc_head) {
			struct sim_sock *sv = s->acc_head;
			list_unlink(&s->acc_head, &s->acc_tail, sv);
			s->acc_n--;
			sv->d->nqueued--;
			sv->in_accq = 0;
			sv->listener = NULL;
			if (sv->peer) {
				sv->peer->peer = NULL;
				abort_side(a, sv->peer, ECONNRESET);
			}
			sock_free(sv);
		}
		while (s->wait_head) {
			struct sim_sock *c = s->wait_head;
			list_unlink(&s->wait_head, &s->wait_tail, c);
			c->listener = NULL;
			c->cs = CS_FAILED;
			c->conn_res = -ECONNREFUSED;
			sched(a, c);
		}
		break;
	case SK_UDP:
		reg_del(s);
		break;
	default:
		break;
	}
	sock_free(s);
}

/* ---- running operations (1: the op reported its terminal event) ---- */

static void lease_wait(struct tl_drv *d, struct sim_sock *s)
{
	if (!s->lease_wait) {
		s->lease_wait = 1;
		d->lwait[d->nlwait++] = s->idx;
	}
}

/* The buffer of a read: the caller's or a pooled lease (0: none free). */
static int read_buf(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o, uint8_t *ubuf,
		    uint32_t ulen, uint8_t **buf, uint32_t *len, uint32_t *lease)
{
	*lease = TL_NO_LEASE;
	if (!(o->flags & TL_OPF_POOLED)) {
		*buf = ubuf;
		*len = ulen;
		return 1;
	}
	uint32_t id = tl__drv_lease_take(d->loop), size, count;
	if (id == TL_NO_LEASE) {
		/* Never an error: wait until the host gives one back. */
		lease_wait(d, s);
		return 0;
	}
	*buf = tl__drv_lease_base(d->loop, &size, &count) + (size_t)id * size;
	*len = size;
	*lease = id;
	return 1;
}

static int run_accept(struct tl_drv *d, struct sim_sock *L, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	for (;;) {
		if (!L->acc_head)
			return 0;
		if (multi && !tl__drv_room(d->loop)) {
			sched_at(d, L, now_ns());
			return 0;
		}
		int e = draw(d, TL_SIM_ACCEPT_EMFILE)   ? EMFILE
			: draw(d, TL_SIM_ACCEPT_ENOMEM)  ? ENOMEM
			: draw(d, TL_SIM_ACCEPT_ENOBUFS) ? ENOBUFS
							 : 0;
		if (e) {
			/* The connection stays queued; a multishot accept tries
			 * again a little later rather than in a busy loop. */
			report(d, o, -e, multi ? 0 : TL_F_TERMINAL, TL_NO_LEASE);
			if (!multi)
				return 1;
			sched(d, L);
			return 0;
		}
		struct sim_sock *sv = L->acc_head;
		list_unlink(&L->acc_head, &L->acc_tail, sv);
		L->acc_n--;
		L->d->nqueued--;
		sv->in_accq = 0;
		sv->listener = NULL;
		promote(d, L);
		tl_addr peer = sv->remote;
		hash_u64(d, now_ns());
		hash_u64(d, ((uint64_t)TL_OP_ACCEPT << 48) | ((uint64_t)o->gen << 32) | o->idx);
		hash_u64(d, ((uint64_t)sv->idx << 16) | port_of(&peer));
		d->st.events++;
		if (tl__drv_accept(d->loop, o, (int)sv->idx, &peer, !multi) < 0)
			close_sock(d, sv); /* no handle: the peer sees EOF */
		if (!multi || !(o->flags & TL_OPF_LIVE))
			return 1;
		if (o->flags & TL_OPF_CANCEL)
			return 0;
	}
}

static int run_read(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	int multi = o->flags & TL_OPF_MULTI;
	for (;;) {
		if (!s->len) {
			if (s->err) {
				int e = s->err;
				s->err = 0;
				report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
				return 1;
			}
			if (s->rd_eof) {
				report(d, o, 0, TL_F_TERMINAL | TL_F_EOF, TL_NO_LEASE);
				return 1;
			}
			if (s->cs == CS_FAILED || s->cs == CS_NEW) {
				report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
				return 1;
			}
			return 0;
		}
		if (multi && !tl__drv_room(d->loop)) {
			sched_at(d, s, now_ns());
			return 0;
		}
		uint8_t *buf;
		uint32_t len, lease;
		if (!read_buf(d, s, o, o->u.rw.buf, o->u.rw.len, &buf, &len, &lease))
			return 0;
		uint32_t n = s->len < len ? s->len : len;
		if (s->segn > 1 && draw(d, TL_SIM_SHORT_IO)) {
			uint32_t m = seg_prefix(s, 1 + below(d, s->segn - 1u));
			if (m < n)
				n = m;
		}
		ring_get(s, buf, n);
		seg_take(s, n);
		/* Room freed: a writer on the other side may go on. */
		if (s->peer && s->peer->whead != TL_NIL)
			sched(d, s->peer);
		report(d, o, n, multi ? 0 : TL_F_TERMINAL, lease);
		if (!multi)
			return 1;
	}
}

static int run_recv(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (!s->ndgram)
		return 0;
	uint8_t *buf;
	uint32_t len, lease;
	if (!read_buf(d, s, o, o->u.dg.buf, o->u.dg.len, &buf, &len, &lease))
		return 0;
	struct dg_hdr h;
	ring_get(s, &h, sizeof h);
	uint32_t n = h.len < len ? h.len : len; /* the rest is truncated, as with UDP */
	ring_get(s, buf, n);
	ring_get(s, NULL, h.len - n);
	s->ndgram--;
	o->u.dg.addr = h.from;
	if (!n && lease != TL_NO_LEASE) {
		tl__drv_lease_drop(d->loop, lease);
		lease = TL_NO_LEASE;
	}
	report(d, o, n, TL_F_TERMINAL, lease);
	return 1;
}

/* Copy n bytes of a write's remaining iovecs into p's ring; the iovecs are
 * the core's copies, advanced in place. */
static void gather(struct tl_opslot *o, struct sim_sock *p, uint32_t n)
{
	uint32_t done = 0;
	while (done < n && o->u.wv.cur < o->u.wv.n) {
		struct iovec *v = &o->u.wv.iov[o->u.wv.cur];
		uint32_t k = v->iov_len < n - done ? (uint32_t)v->iov_len : n - done;
		if (k) {
			ring_put(p, v->iov_base, k);
			v->iov_base = (uint8_t *)v->iov_base + k;
			v->iov_len -= k;
			done += k;
		}
		if (!v->iov_len)
			o->u.wv.cur++;
	}
	o->u.wv.off += done;
}

static int fail_pending(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	int e = s->err;
	s->err = 0;
	report(d, o, -e, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_write(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->err)
		return fail_pending(d, s, o);
	if (s->broken || s->wr_shut) {
		report(d, o, -EPIPE, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (s->cs != CS_CONNECTED) {
		report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	size_t left = o->u.wv.total - o->u.wv.off;
	struct sim_sock *p = s->peer;
	if (left && !p && s->is_unix) {
		report(d, o, -EPIPE, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (left && !p) {
		/* The TCP peer closed: these bytes go out and are answered by a
		 * reset, which the next operation reports. */
		o->u.wv.off = o->u.wv.total;
		report(d, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
		abort_side(d, s, ECONNRESET);
		return 1;
	}
	if (left) {
		uint32_t space = p->cap - p->len;
		if (!space)
			return 0; /* the peer's reads wake us */
		uint32_t n = left < space ? (uint32_t)left : space;
		if (n > SIM_MSS && draw(d, TL_SIM_SHORT_IO))
			n = SIM_MSS + below(d, n - SIM_MSS);
		if (draw(d, TL_SIM_RESET)) {
			reset_conn(d, s);
			return fail_pending(d, s, o);
		}
		gather(o, p, n);
		seg_add(p, n);
		sched(d, p);
		if (o->u.wv.off < o->u.wv.total) {
			/* A partial write: go on when the next chunk fits. */
			if (p->len < p->cap)
				sched(d, s);
			return 0;
		}
	}
	report(d, o, (int64_t)o->u.wv.total, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_shutdown(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->err)
		return fail_pending(d, s, o);
	if (s->cs != CS_CONNECTED || s->broken) {
		report(d, o, -ENOTCONN, TL_F_TERMINAL, TL_NO_LEASE);
		return 1;
	}
	if (!s->wr_shut) {
		s->wr_shut = 1;
		if (s->peer) {
			s->peer->rd_eof = 1; /* after the bytes already in its ring */
			sched(d, s->peer);
		}
	}
	report(d, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_send(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	const tl_addr *to = &o->u.dg.addr;
	int64_t res = o->u.dg.len;
	if (o->u.dg.len > UDP_MAX)
		res = -EMSGSIZE;
	else if (to->sa.sa_family == AF_INET6 && s->local.sa.sa_family == AF_INET)
		res = -EAFNOSUPPORT;
	else {
		tl_addr dst = dest_of(to);
		struct sim_sock *t = find_udp(&dst);
		struct dg_hdr h = {.len = o->u.dg.len};
		/* The source: our port, and the address the datagram went to when
		 * we are bound to a wildcard or send IPv4 from a dual-stack socket
		 * (every address is this host). */
		if (ip_any(&s->local) || dst.sa.sa_family != s->local.sa.sa_family)
			h.from = dst;
		else
			h.from = s->local;
		set_port(&h.from, port_of(&s->local));
		h.from = as_family(&h.from, t ? t->local.sa.sa_family : AF_INET);
		/* Datagrams are lost when the receiver's ring is full, as UDP. */
		if (t && !draw(d, TL_SIM_UDP_DROP) && t->cap - t->len >= sizeof h + o->u.dg.len) {
			ring_put(t, &h, sizeof h);
			ring_put(t, o->u.dg.buf, o->u.dg.len);
			t->ndgram++;
			sched(d, t);
		}
	}
	report(d, o, res, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_connect(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (s->conn_res == CONN_PENDING)
		return 0;
	if (s->conn_res < 0)
		s->cs = CS_FAILED;
	report(d, o, s->conn_res, TL_F_TERMINAL, TL_NO_LEASE);
	return 1;
}

static int run_op(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	switch (o->code) {
	case TL_OP_ACCEPT:
		return run_accept(d, s, o);
	case TL_OP_READ:
		return run_read(d, s, o);
	case TL_OP_RECV:
		return run_recv(d, s, o);
	case TL_OP_CONNECT:
		return run_connect(d, s, o);
	case TL_OP_WRITE:
		return run_write(d, s, o);
	case TL_OP_SHUTDOWN:
		return run_shutdown(d, s, o);
	case TL_OP_SEND:
		return run_send(d, s, o);
	}
	return 1;
}

/* Acknowledge a cancellation: the op leaves its queue (and a connect its
 * listener's wait list) and reports its terminal event. */
static void ack_cancel(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	if (is_rside(o))
		q_remove(d->loop, &s->rhead, &s->rtail, o);
	else
		q_remove(d->loop, &s->whead, &s->wtail, o);
	if (o->code == TL_OP_CONNECT && s->cs != CS_CONNECTED) {
		if (s->cs == CS_WAITING && s->listener)
			list_unlink(&s->listener->wait_head, &s->listener->wait_tail, s);
		s->listener = NULL;
		s->cs = CS_FAILED;
	}
	SO(o)->cancel = CX_NONE;
	report(d, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
}

static void sweep_cancels(struct tl_drv *d, struct sim_sock *s, uint32_t head)
{
	for (uint32_t i = head; i != TL_NIL;) {
		struct tl_opslot *o = tl__drv_op(d->loop, i);
		i = SO(o)->qnext;
		if (SO(o)->cancel == CX_ACK)
			ack_cancel(d, s, o);
	}
}

/* Ops that raced through this run are acknowledged by the next one. */
static void settle_races(struct tl_drv *d, struct sim_sock *s, uint32_t head)
{
	for (uint32_t i = head; i != TL_NIL; i = SO(tl__drv_op(d->loop, i))->qnext) {
		struct tl_opslot *o = tl__drv_op(d->loop, i);
		if (SO(o)->cancel == CX_RACE) {
			SO(o)->cancel = CX_ACK;
			sched(d, s);
		}
	}
}

static void run_queue(struct tl_drv *d, struct sim_sock *s, uint32_t *head, uint32_t *tail)
{
	while (*head != TL_NIL) {
		struct tl_opslot *o = tl__drv_op(d->loop, *head);
		if (SO(o)->cancel == CX_ACK) {
			ack_cancel(d, s, o);
			continue;
		}
		uint32_t idx = o->idx;
		if (!run_op(d, s, o))
			break;
		/* The op's slot is retired but its drv words are intact. */
		if (*head == idx) {
			*head = SO(o)->qnext;
			if (*head == TL_NIL)
				*tail = TL_NIL;
		}
	}
}

static void run_sock(struct tl_drv *d, struct sim_sock *s)
{
	if (s->type == SK_FREE || s->hidx == TL_NIL)
		return;
	d->st.runs++;
	sweep_cancels(d, s, s->whead);
	sweep_cancels(d, s, s->rhead);
	run_queue(d, s, &s->whead, &s->wtail);
	run_queue(d, s, &s->rhead, &s->rtail);
	settle_races(d, s, s->whead);
	settle_races(d, s, s->rhead);
}

/* Run the sockets due at `now` that were scheduled before this call: what
 * they schedule for `now` waits for the next poll, so a ping-pong between two
 * sockets of one loop cannot spin inside a poll. */
static void run_due(struct tl_drv *d, uint64_t now)
{
	uint64_t limit = d->seq;
	const struct tl_heap_ent *e;
	while ((e = tl__heap_top(&d->sched)) && e->at <= now && e->seq < limit) {
		uint32_t idx = e->slot;
		tl__heap_remove(&d->sched, idx);
		run_sock(d, &d->socks[idx]);
	}
}

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

static int sim_init(tl_loop *loop, const tl_config *cfg, int wake_fd, struct tl_drv **out)
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
	d->wake_fd = wake_fd;
	d->f = f;
	/* Room for every handle plus as many connections queued on listeners. */
	d->nsocks = cfg->max_handles < (1u << 22) ? 2 * cfg->max_handles : (1u << 23);
	d->maxqueued = d->nsocks - cfg->max_handles;
	d->socks = calloc(d->nsocks, sizeof *d->socks);
	d->lwait = malloc(d->nsocks * sizeof *d->lwait);
	if (!d->socks || !d->lwait || tl__heap_init(&d->sched, d->nsocks) < 0) {
		free(d->socks);
		free(d->lwait);
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
	d->order = W.created++;
	W.nloops++;
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
			close_sock(d, &d->socks[i]);
	if (--W.nloops == 0) {
		atomic_store(&W.clock, SIM_T0);
		W.created = 0;
		W.next_port = PORT_LO;
		W.bound = NULL;
	}
	unlock();
	for (uint32_t i = 0; i < d->nsocks; i++)
		free(d->socks[i].buf);
	tl__heap_free(&d->sched);
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
	if (draw(d, TL_SIM_OPEN_EMFILE) || !(s = sock_new(d, types[sp->kind]))) {
		r = -EMFILE;
		goto out;
	}
	switch (sp->kind) {
	case TL_OPEN_TCP_LISTEN:
		r = bind_ip(s, sp->addr, sp->opts->reuseport,
			    sp->addr->sa.sa_family == AF_INET6 && sp->opts->v6only);
		s->backlog = sp->opts->backlog > 0 ? (uint32_t)sp->opts->backlog : 511;
		break;
	case TL_OPEN_UNIX_LISTEN:
		if (find_listener(d, NULL, sp->path)) {
			r = -EADDRINUSE; /* a live listener's path is not stale */
			break;
		}
		s->is_unix = 1;
		snprintf(s->path, sizeof s->path, "%s", sp->path);
		s->local.sa.sa_family = AF_UNIX;
		s->backlog = sp->opts->backlog > 0 ? (uint32_t)sp->opts->backlog : 511;
		reg_add(s);
		break;
	case TL_OPEN_TCP_STREAM:
		s->local.sa.sa_family = sp->addr->sa.sa_family;
		r = ring_init(s);
		break;
	case TL_OPEN_UNIX_STREAM:
		s->is_unix = 1;
		s->local.sa.sa_family = AF_UNIX;
		r = ring_init(s);
		break;
	case TL_OPEN_UDP:
		r = ring_init(s);
		if (r == 0)
			r = bind_ip(s, sp->addr, 0, 0);
		break;
	}
	if (r < 0) {
		sock_free(s);
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
	if (s)
		close_sock(d, s);
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

static int start_connect(struct tl_drv *d, struct sim_sock *s, struct tl_opslot *o)
{
	tl_addr dst;
	struct sim_sock *L;
	if (s->is_unix) {
		L = find_listener(d, NULL, o->u.conn.path);
		if (!L)
			return -ENOENT; /* no such socket file: refused at once, as Linux */
	} else {
		dst = dest_of(&o->u.conn.addr);
		L = find_listener(d, &dst, NULL);
		s->remote = dst;
		s->local = dst;
		int p = pick_port(SK_LISTEN);
		if (p < 0)
			return p;
		set_port(&s->local, (uint16_t)p);
	}
	q_push(d->loop, &s->whead, &s->wtail, o);
	if (!L || draw(d, TL_SIM_CONNECT_REFUSED)) {
		s->cs = CS_FAILED;
		s->conn_res = -ECONNREFUSED;
		sched(d, s);
		return 0;
	}
	if (can_establish(L) && establish(d, L, s) == 0)
		return 0;
	/* The accept queue is full: the handshake waits, as a SYN that Linux
	 * drops and the client retransmits, until an accept makes room or the
	 * connect is cancelled (its deadline). */
	s->cs = CS_WAITING;
	s->listener = L;
	list_append(&L->wait_head, &L->wait_tail, s);
	return 0;
}

static int sim_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int r = 0;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (!s)
		r = -EBADF;
	else if (draw(d, TL_SIM_SUBMIT_ENOMEM))
		r = -ENOMEM;
	else if (draw(d, TL_SIM_SUBMIT_ENOBUFS))
		r = -ENOBUFS;
	if (r < 0)
		goto out;
	SO(o)->cancel = CX_NONE;
	if (o->code == TL_OP_CONNECT) {
		r = start_connect(d, s, o);
	} else if (is_rside(o)) {
		q_push(d->loop, &s->rhead, &s->rtail, o);
		if (s->rhead == o->idx)
			sched(d, s);
	} else {
		q_push(d->loop, &s->whead, &s->wtail, o);
		if (s->whead == o->idx) {
			/* Sometimes at once, as the epoll driver writes; sometimes
			 * at the next poll, as io_uring completes. */
			if (draw(d, TL_SIM_SYNC_WRITE))
				run_queue(d, s, &s->whead, &s->wtail);
			else
				sched(d, s);
		}
	}
out:
	unlock();
	return r;
}

static int sim_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o)
{
	int r = 0;
	lock();
	struct sim_sock *s = sock_of(d, h);
	if (!s || SO(o)->cancel ||
	    !q_has(d->loop, is_rside(o) ? s->rhead : s->whead, o))
		r = -ENOENT;
	else if (draw(d, TL_SIM_CANCEL_FAIL))
		r = -EAGAIN;
	else if (draw(d, TL_SIM_ASYNC_CANCEL)) {
		/* Acknowledged by a later poll, as io_uring does: the core must
		 * keep the op (and its memory) until then, and drop what the op
		 * still reports meanwhile. */
		SO(o)->cancel = below(d, 2) ? CX_RACE : CX_ACK;
		sched(d, s);
	} else {
		ack_cancel(d, s, o);
		/* Ops queued behind it may run now. */
		if (s->rhead != TL_NIL || s->whead != TL_NIL)
			sched(d, s);
	}
	unlock();
	return r;
}

/* Wait on the wake eventfd for real, at most timeout_ns (< 0: no limit).
 * Called with the world locked; unlocks while waiting. 1 if woken. */
static int real_wait(struct tl_drv *d, int64_t timeout_ns, int *err)
{
	struct timespec ts = {.tv_sec = timeout_ns / 1000000000, .tv_nsec = timeout_ns % 1000000000};
	struct pollfd pf = {.fd = d->wake_fd, .events = POLLIN};
	unlock();
	int n = ppoll(&pf, 1, timeout_ns < 0 ? NULL : &ts, NULL);
	int e = errno;
	lock();
	d->st.real_waits++;
	*err = n < 0 && e != EINTR ? -e : 0;
	if (n <= 0)
		return 0;
	uint64_t v;
	ssize_t rd = read(d->wake_fd, &v, sizeof v);
	(void)rd;
	return 1;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int sim_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	tl_loop *l = d->loop;
	uint32_t before = l->qlen;
	int r = 0, woke = 0;
	lock();
	uint64_t start = now_ns();
	run_due(d, start);
	if (l->qlen != before || timeout_ns == 0) {
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
	    atomic_load(&l->poster->refs) > 1) {
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
			uint64_t t0 = mono_ns();
			woke = real_wait(d, (int64_t)budget, &r);
			uint64_t spent = woke ? mono_ns() - t0 : budget;
			advance(start + (spent < budget ? spent : budget));
			run_due(d, now_ns());
			if (woke || r < 0)
				goto done;
		}
	}
	/* Virtual time jumps to each scheduled event in turn until one of them
	 * produces an event or the timeout is reached; events that produce
	 * nothing (bytes for a socket with no read yet) do not end the wait. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t guard = 0; l->qlen == before && guard < (1u << 20); guard++) {
			e = tl__heap_top(&d->sched);
			if (!e || e->at > limit)
				break;
			advance(e->at);
			run_due(d, now_ns());
		}
		if (l->qlen != before || timeout_ns > 0 || tl__heap_top(&d->sched) || pass)
			break;
		/* No timeout and nothing scheduled: only another thread can bring
		 * work now. Block for real on the wake eventfd (the core marked us
		 * parked, so posters and other loops write it). */
		woke = real_wait(d, -1, &r);
		if (r < 0)
			goto out;
		/* A post, or another loop's traffic scheduled here: the second
		 * pass jumps to the latter. */
		run_due(d, now_ns());
	}
	if (l->qlen == before && timeout_ns > 0 && !woke)
		advance(limit);
done:
	if (l->qlen == before && !woke)
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
		sched_at(d, s, now_ns());
	}
	unlock();
}

const struct tl_driver tl__driver_sim = {
	.name = "sim",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_UNIX,
	.init = sim_init,
	.destroy = sim_destroy,
	.now = sim_now,
	.open = sim_open,
	.attach = sim_attach,
	.release = sim_release,
	.local_addr = sim_local,
	.submit = sim_submit,
	.cancel = sim_cancel,
	.poll = sim_poll,
	.lease_returned = sim_lease_returned,
	.embed_fd = NULL,
};

/* ---- test controls (drivers/sim.h) ---- */

static struct tl_drv *sim_of(tl_loop *loop)
{
	return loop && loop->dv == &tl__driver_sim ? loop->d : NULL;
}

int tl__sim_set_faults(tl_loop *loop, const struct tl_sim_faults *f)
{
	struct tl_drv *d = sim_of(loop);
	if (!d)
		return -ENOTSUP;
	if (!f || !faults_valid(f))
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
