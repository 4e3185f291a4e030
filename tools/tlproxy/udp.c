/* tools/tlproxy/udp.c: UDP listeners: a socket per address and shard (SO_REUSEPORT), sessions keyed by client address in a fixed table, each with a connected socket to one server, ended by replies, idleness, errors or the stop. */
/* Calls: udp -> backend (tlp_pick), alog, state, world, takeover (the
 * process side of a live takeover). shard.c, main.c and the takeover's
 * shard half (ho.c, ho_adopt.c) call in. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "udp.h"
#include "backend.h"
#include "takeover.h"

/*
 * A datagram from a client either finds its session (by listening socket
 * and source address, in a hash table of chains) or starts one: a server
 * of the listener's pool picked by the pool's balancer (hash: by the
 * client's address, so a client keeps its server), and a socket of the
 * session's own, connected to that server, whose receive takes only that
 * server's replies; the reply goes back from the listening socket to the
 * client. A session per socket (not one shared socket per shard) keeps the
 * reply's way home in the kernel: the server's 4-tuple names the session,
 * no lookup of ours is needed, and a server's ICMP error reaches the one
 * session it concerns (docs/DESIGN.md).
 *
 * The table has room for the sessions limits of the shard's listeners,
 * allocated at the start: a session costs no allocation, and a client past
 * its listener's limit is dropped and counted (drop_limit), never queued.
 *
 * A session ends (its socket closed, one access-log line) when it has had
 * the replies it expects (responses N: N per request; 0: once its
 * datagrams are sent), when it was idle for timeouts.idle, when its
 * server's socket reports an error (an ICMP port unreachable: the server
 * is down), or at the stop. Its slot is free again once the socket's
 * Closed came and every send of it is done.
 *
 * Datagrams take pooled leases (16 KiB) unless the listener's
 * max_datagram is larger: then it has buffers of its own of max_datagram
 * bytes, JUMBO_RX per listening socket, each in a one-shot receive that is
 * armed again once what it took is sent on, and one per session for its
 * server's replies, armed again the same way; so the session's next reply
 * waits in its socket while one is on its way to the client. They are
 * mapped at the start (sessions x max_datagram per listener and shard, at
 * most TLP_UDP_JUMBO_BYTES_MAX), and the kernel gives them memory as they
 * are first used. A datagram longer than max_datagram, either way, is
 * dropped and counted (drop_trunc), never sent cut.
 */

enum { K_LRECV = 1, K_URECV, K_TOSRV, K_TOCLI, K_CLOSED, K_LCLOSED, K_SWEEP };
enum { U_FREE = 0, U_OPEN, U_CLOSING };    /* a session slot */
enum { S_FREE = 0, S_OPEN, S_CLOSING };    /* a listening socket slot */
#define NO_LEASE 0xffffffu
/* The lease field of a token names an own buffer of a listener with large
 * datagrams: JL_LEASE | j, buffer j of the listening socket; JS_LEASE, the
 * session's own (pooled lease ids stay under both). */
#define JL_LEASE 0x800000u
#define JS_LEASE 0xfffffeu
#define JUMBO_RX 4
/* A listening socket's lease cap. Its datagrams hold their leases from
 * their receive until their send to the server completes, and its receive
 * takes no more a turn than the cap leaves: at the loop's cap for streams
 * (HANDLE_LEASES, 8) a turn took about 3 queries, and a turn that naps
 * lasts a nap, so loopback DNS through a shard napping 50 us on io_uring
 * served a fifth of the queries a second it serves without naps; with 64,
 * 0.78-0.88 of them (docs/PERFORMANCE.md, "UDP listeners and naps").
 * Each shard's pool has a lease per session and POOL_SPARE beside. */
#define LISTEN_LEASES 64

static uint64_t utok(int k, uint32_t i, uint32_t lease)
{
	return tl_token(TLP_H_UDP, (uint64_t)k | (uint64_t)i << 4 | (uint64_t)lease << 28);
}
#define UT_K(t) ((int)((t) & 0xf))
#define UT_I(t) ((uint32_t)(((t) >> 4) & 0xffffff))
#define UT_LEASE(t) ((uint32_t)(((t) >> 28) & 0xffffff))

struct usess {
	tl_addr peer;           /* the client */
	tl_handle up;           /* connected to the server */
	uint32_t sock;          /* the listening socket it came in on */
	uint32_t next;          /* hash chain, or the free list */
	uint32_t pending;       /* replies still expected (responses > 0) */
	uint32_t wq;            /* sends of it in flight, either way */
	uint8_t state, cause, closed;
	uint8_t ho;             /* being handed over to a new process */
	uint8_t stray;          /* out of the table: one handed in took its client */
	int16_t err;            /* the error that ended it, 0 none */
	uint64_t t0, t_act;     /* started, last datagram either way */
	uint64_t dg[2], bytes[2]; /* from the client, from the server */
	/* Its listener in the generation it began under (held: a reload
	 * changes the settings of new sessions only). */
	const struct tlp_lrt *lr;
	struct tlp_gen *gen;
	struct tlp_srv *srv;
	struct tlp_gpool *gp;
	uint8_t *jbuf;          /* its own reply buffer (large datagrams), NULL: pooled */
};

/* The own buffers of a listener with large datagrams (max_datagram over a
 * pooled buffer): one per session it may have, a stack of free ones. */
struct ujumbo {
	uint8_t *mem;
	size_t len;             /* mapped */
	uint32_t *free, nfree;
};

/* A listener, by its registry index, for the shard's life: what is fixed
 * when it is first set up (a reload keeps it). */
struct ulst {
	uint32_t nsess;         /* its sessions now */
	uint32_t dgmax;         /* max_datagram; 0: never set up */
	uint32_t jsessions;     /* sessions its own buffers cover (large datagrams) */
	struct ujumbo j;        /* mem NULL: pooled leases */
	int said;               /* a reload's change it keeps out was logged */
};

struct usock {
	tl_handle h;
	const struct tlp_lrt *lr; /* its listener in gen */
	struct tlp_gen *gen;    /* held (a reference) while the slot is in use */
	tl_addr addr;
	uint32_t gi;            /* the listener's registry index */
	uint32_t nsess;         /* sessions that came in on it */
	uint8_t state;          /* S_* */
	uint8_t retiring;       /* takes no new client; closes when nsess is 0 */
	uint8_t gone;           /* its Closed came: the slot is free once nsess is 0 */
	uint8_t handing;        /* a takeover: it receives nothing, its sessions move */
	uint8_t rxlive;         /* its receives not ended yet (bit j: rop[j]) */
	uint8_t *jbuf;          /* JUMBO_RX own receive buffers, NULL: pooled */
	size_t jlen;
	tl_op rop[JUMBO_RX];    /* its receives: one multishot (pooled), or JUMBO_RX */
	uint64_t ino;           /* the socket's identity (registered while open) */
};

struct tlp_udp {
	struct usock *sock;
	uint32_t nsock;         /* slots (in use or free) */
	struct usess *s;
	uint32_t cap, free_head, nopen;
	uint32_t *bucket, mask;
	struct ulst *lst;       /* TLP_REG_LISTENERS */
	tl_handle sweep_h;
	uint64_t tick;          /* of the idle sweep; 0: not started */
	uint64_t d[TLP_UDP_ST_ROWS];
	int open_dirty;
	int draining;
	uint32_t nho;           /* sessions being handed over */
	struct tlp_shard *sh;
};

static int st_udp = -1, st_udp_open = -1;

/*
 * Which shard serves which listening socket, by the socket's identity (its
 * inode): a takeover hands a UDP session over with a descriptor of the
 * socket its client writes to, and the session is carried on by the shard
 * that receives on that socket (so the client's next datagram finds it).
 * Written at a bind and a close, read once per session handed in.
 */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t ino; uint32_t shard; } *reg;
static uint32_t nreg, capreg;

static uint64_t ino_of(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void reg_put(uint64_t ino, uint32_t shard)
{
	pthread_mutex_lock(&reg_mu);
	if (nreg == capreg) {
		uint32_t c = capreg ? 2 * capreg : 16;
		void *n = realloc(reg, c * sizeof *reg);

		if (n) {
			reg = n;
			capreg = c;
		}
	}
	if (nreg < capreg) {
		reg[nreg].ino = ino;
		reg[nreg++].shard = shard;
	}
	pthread_mutex_unlock(&reg_mu);
}

static void reg_drop(uint64_t ino)
{
	pthread_mutex_lock(&reg_mu);
	for (uint32_t i = 0; i < nreg; i++)
		if (reg[i].ino == ino) {
			reg[i] = reg[--nreg];
			break;
		}
	if (!nreg) {
		free(reg);
		reg = NULL;
		capreg = 0;
	}
	pthread_mutex_unlock(&reg_mu);
}

int tlp_udp_owner(int fd)
{
	uint64_t ino = ino_of(fd);
	int r = -1;

	pthread_mutex_lock(&reg_mu);
	for (uint32_t i = 0; ino && i < nreg; i++)
		if (reg[i].ino == ino)
			r = (int)reg[i].shard;
	pthread_mutex_unlock(&reg_mu);
	return r;
}

int tlp_udp_declare(tl_runtime *rt)
{
	static const char *const rows[TLP_UDP_ST_ROWS] = {
		[TLP_UDP_ST_DGRAMS_IN] = "dgrams_in",
		[TLP_UDP_ST_DGRAMS_OUT] = "dgrams_out",
		[TLP_UDP_ST_BYTES_IN] = "bytes_in",
		[TLP_UDP_ST_BYTES_OUT] = "bytes_out",
		[TLP_UDP_ST_SESSIONS] = "sessions",
		[TLP_UDP_ST_DROP_LIMIT] = "drop_limit",
		[TLP_UDP_ST_DROP_NO_SERVER] = "drop_no_server",
		[TLP_UDP_ST_DROP_ERROR] = "drop_error",
		[TLP_UDP_ST_DROP_LATE] = "drop_late",
		[TLP_UDP_ST_DROP_TRUNC] = "drop_trunc",
		[TLP_UDP_ST_DROP_CLOSING] = "drop_closing",
	};
	_Static_assert(sizeof rows / sizeof rows[0] == TLP_UDP_ST_ROWS, "a name per row");
	int r = tl_runtime_stat(rt, "udp", TL_STAT_COUNTER, TLP_UDP_ST_ROWS);

	if (r < 0)
		return r;
	st_udp = r;
	for (int i = 0; i < TLP_UDP_ST_ROWS; i++)
		tl_runtime_stat_label(rt, r + i, rows[i]);
	st_udp_open = tl_runtime_gauge(rt, "udp_sessions");
	return st_udp_open < 0 ? st_udp_open : 0;
}

static uint32_t hash_of(uint32_t sock, const tl_addr *a)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull * (sock + 1);

	if (a->sa.sa_family == AF_INET)
		return (uint32_t)tlp_hash64(&a->in.sin_addr, 4,
					    seed ^ a->in.sin_port);
	return (uint32_t)tlp_hash64(&a->in6.sin6_addr, 16, seed ^ a->in6.sin6_port);
}

static int same_addr(const tl_addr *a, const tl_addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET)
		return a->in.sin_port == b->in.sin_port &&
		       a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
	return a->in6.sin6_port == b->in6.sin6_port &&
	       !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16);
}

static uint32_t find(struct tlp_udp *u, uint32_t sock, const tl_addr *a, uint32_t hv)
{
	for (uint32_t i = u->bucket[hv & u->mask]; i != NONE; i = u->s[i].next)
		if (u->s[i].sock == sock && same_addr(&u->s[i].peer, a))
			return i;
	return NONE;
}

static void unlink_hash(struct tlp_udp *u, uint32_t si)
{
	struct usess *x = &u->s[si];
	uint32_t *p = &u->bucket[hash_of(x->sock, &x->peer) & u->mask];

	while (*p != NONE && *p != si)
		p = &u->s[*p].next;
	if (*p == si)
		*p = x->next;
	x->next = NONE;
}

static void log_end(struct tlp_shard *sh, const struct usess *x)
{
	struct tlp_alog_rec *r;

	if (!sh->log)
		return;
	r = tlp_alog_claim(sh->log);
	if (!r)
		return;
	memset(r, 0, sizeof *r);
	clock_gettime(CLOCK_REALTIME, &r->end);
	r->dur_ns = tl_now(sh->loop) - x->t0;
	r->bytes[0] = x->bytes[0];
	r->bytes[1] = x->bytes[1];
	r->dgrams[0] = x->dg[0];
	r->dgrams[1] = x->dg[1];
	r->udp = 1;
	r->peer = x->peer;
	r->cause = x->cause;
	r->cerr = x->err;
	r->listener = x->lr->gl;
	if (x->srv)
		memcpy(r->server, x->srv->label, sizeof r->server);
	tlp_alog_commit(sh->log);
}

/* Listening socket k closes (its Closed frees the slot). */
static void close_sock(struct tlp_shard *sh, uint32_t k)
{
	struct usock *us = &sh->udp->sock[k];

	if (us->state != S_OPEN)
		return;
	us->state = S_CLOSING;
	tl_close(sh->loop, us->h, utok(K_LCLOSED, k, NO_LEASE));
}

/* Slot si is free once its socket is closed and its sends are done. */
static void maybe_free(struct tlp_shard *sh, uint32_t si)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];
	struct usock *us = &u->sock[x->sock];
	struct ulst *ls = &u->lst[us->gi];

	if (x->state != U_CLOSING || !x->closed || x->wq)
		return;
	x->state = U_FREE;
	if (x->jbuf) {
		ls->j.free[ls->j.nfree++] = (uint32_t)((x->jbuf - ls->j.mem) / ls->dgmax);
		x->jbuf = NULL;
	}
	tlp_gen_unhold(sh, x->gen);
	x->gen = NULL;
	x->next = u->free_head;
	u->free_head = si;
	u->nopen--;
	u->open_dirty = 1;
	ls->nsess--;
	if (!--us->nsess && us->gone)
		us->state = S_FREE;
	else if (!us->nsess && us->retiring)
		close_sock(sh, x->sock);
}

static void end(struct tlp_shard *sh, uint32_t si, int cause, int err)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];

	if (x->state != U_OPEN)
		return;
	if (x->ho) {
		/* Marked for a takeover, it ended here first. */
		x->ho = 0;
		u->nho--;
		tlp_ho_gone();
	}
	x->state = U_CLOSING;
	x->cause = (uint8_t)cause;
	x->err = (int16_t)err;
	unlink_hash(u, si);
	if (x->srv) {
		atomic_fetch_sub_explicit(&x->srv->conns, 1, memory_order_relaxed);
		srv_count(sh, x->srv, -1);
		if (atomic_load_explicit(&x->gp->waiting, memory_order_relaxed))
			tlp_room_later(sh, x->gp);
	}
	count_err(sh, cause);
	log_end(sh, x);
	if (tl_close(sh->loop, x->up, utok(K_CLOSED, si, NO_LEASE)) < 0)
		x->closed = 1;
	maybe_free(sh, si);
}

/* After a send or a reply: a session with the replies it expects ends. */
static void check_done(struct tlp_shard *sh, uint32_t si)
{
	struct usess *x = &sh->udp->s[si];
	uint32_t want = x->lr->cfg->responses;

	if (x->state == U_OPEN && want != TLP_RESPONSES_ANY && !x->pending && !x->wq)
		end(sh, si, TLP_END_DONE, 0);
}

/* Socket k takes no new client: its sessions that wait for no reply end
 * now, the others when their replies come or they go idle, and it closes
 * once none is left (replies go out from it). */
static void retire(struct tlp_shard *sh, uint32_t k)
{
	struct tlp_udp *u = sh->udp;

	if (u->sock[k].state != S_OPEN || u->sock[k].retiring)
		return;
	u->sock[k].retiring = 1;
	for (uint32_t i = 0; i < u->cap && u->sock[k].nsess; i++) {
		struct usess *x = &u->s[i];

		if (x->state == U_OPEN && x->sock == k &&
		    (x->lr->cfg->responses == TLP_RESPONSES_ANY || !x->pending))
			end(sh, i, TLP_END_SHUTDOWN, 0);
	}
	if (!u->sock[k].nsess)
		close_sock(sh, k);
}

/* The longest datagram of socket k's listener. */
static uint32_t dgmax_of(const struct tlp_udp *u, uint32_t k)
{
	return u->lst[u->sock[k].gi].dgmax;
}

/* Own buffer j of listening socket k into a receive. */
static int arm_lrecv(struct tlp_shard *sh, uint32_t k, uint32_t j)
{
	struct usock *us = &sh->udp->sock[k];
	uint32_t size = dgmax_of(sh->udp, k);
	int r = tl_udp_recv(sh->loop, us->h, us->jbuf + (size_t)j * size, size,
			    utok(K_LRECV, k, JL_LEASE | j), &us->rop[j]);

	if (r == 0)
		us->rxlive |= (uint8_t)(1u << j);
	return r;
}

/* Listening socket k's pooled multishot receive. */
static int arm_lstart(struct tlp_shard *sh, uint32_t k)
{
	struct usock *us = &sh->udp->sock[k];
	int r = tl_udp_recv_start(sh->loop, us->h, utok(K_LRECV, k, NO_LEASE), &us->rop[0]);

	if (r == 0)
		us->rxlive |= 1;
	return r;
}

/* Session si's own buffer into a receive of its server's reply. */
static int arm_srecv(struct tlp_shard *sh, uint32_t si)
{
	struct usess *x = &sh->udp->s[si];
	tl_op op;

	return tl_udp_recv(sh->loop, x->up, x->jbuf, dgmax_of(sh->udp, x->sock),
			   utok(K_URECV, si, JS_LEASE), &op);
}

/* What a datagram of socket k or session si took is done with: a pooled
 * lease goes back to the loop, an own buffer into its receive again while
 * its socket (or session) is open. */
static void give_back(struct tlp_shard *sh, uint32_t k, uint32_t si, uint32_t lease)
{
	struct tlp_udp *u = sh->udp;
	int r;

	if (lease == NO_LEASE)
		return;
	if (lease == JS_LEASE) {
		if (u->s[si].state == U_OPEN && (r = arm_srecv(sh, si)) < 0) {
			u->d[TLP_UDP_ST_DROP_ERROR]++;
			end(sh, si, TLP_END_BUSY, r);
		}
		return;
	}
	if (lease & JL_LEASE) {
		if (u->sock[k].state == S_OPEN && !u->sock[k].handing &&
		    (r = arm_lrecv(sh, k, lease & ~JL_LEASE)) < 0)
			tlp_log("udp listener %s: a receive cannot be armed again: %s",
				u->sock[k].lr->cfg->name, tl_strerror(r));
		return;
	}
	tl_lease_release(sh->loop, lease);
}

/* Free slot si, for a client of listening socket k: its receive of its
 * server's replies on x->up, into a buffer of its own (a listener with
 * large datagrams: the top of the listener's stack, taken by claim) or
 * pooled leases. 0 or a negative errno (no buffer then). */
static int arm_up(struct tlp_shard *sh, uint32_t si, uint32_t k)
{
	struct usess *x = &sh->udp->s[si];
	const struct ulst *ls = &sh->udp->lst[sh->udp->sock[k].gi];
	tl_op op;
	int r;

	x->sock = k;
	x->jbuf = NULL;
	if (!ls->j.mem)
		return tl_udp_recv_start(sh->loop, x->up, utok(K_URECV, si, NO_LEASE), &op);
	x->jbuf = ls->j.mem + (size_t)ls->j.free[ls->j.nfree - 1] * ls->dgmax;
	if ((r = arm_srecv(sh, si)) < 0)
		x->jbuf = NULL;
	return r;
}

/* Slot si, the free list's head (its x->up receiving: arm_up), opens for
 * client peer of socket k (arm_up's) under the socket's listener and
 * generation: taken off the free list, counted, its state reset; the
 * caller sets its times, counters and server, and puts it in the table
 * (hash_in). */
static void claim(struct tlp_shard *sh, uint32_t si, uint32_t k, const tl_addr *peer)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];
	struct usock *us = &u->sock[k];
	struct ulst *ls = &u->lst[us->gi];

	u->free_head = x->next;
	if (x->jbuf)
		ls->j.nfree--;
	x->peer = *peer;
	x->pending = x->wq = 0;
	x->ho = x->stray = 0;
	x->state = U_OPEN;
	x->closed = 0;
	x->cause = 0;
	x->err = 0;
	x->gp = us->lr->pool;
	x->lr = us->lr;
	x->gen = us->gen;
	tlp_gen_hold(sh, x->gen);
	ls->nsess++;
	us->nsess++;
	u->nopen++;
	u->open_dirty = 1;
}

static void hash_in(struct tlp_udp *u, uint32_t si, uint32_t hv)
{
	u->s[si].next = u->bucket[hv & u->mask];
	u->bucket[hv & u->mask] = si;
}

/* A new session for a client of socket k: its server and socket. The
 * slot, or NONE with the drop counted. */
static uint32_t open_session(struct tlp_shard *sh, uint32_t k, const tl_addr *peer, uint32_t hv)
{
	struct tlp_udp *u = sh->udp;
	struct usock *us = &u->sock[k];
	const struct tlp_listener_cfg *lc = us->lr->cfg;
	struct ulst *ls = &u->lst[us->gi];
	struct tlp_srv *srv = NULL;
	uint8_t ntried = 0;
	tl_addr any;
	uint32_t si;
	int r;

	if (ls->nsess >= lc->sessions || u->free_head == NONE || (ls->j.mem && !ls->j.nfree)) {
		u->d[TLP_UDP_ST_DROP_LIMIT]++;
		return NONE;
	}
	if (!us->lr->pool ||
	    tlp_pick(sh, us->lr->pool, &peer->sa, NULL, &ntried, &srv) < 0) {
		u->d[TLP_UDP_ST_DROP_NO_SERVER]++;
		return NONE;
	}
	si = u->free_head;
	struct usess *x = &u->s[si];

	memset(&any, 0, sizeof any);
	any.sa.sa_family = srv->addr.sa.sa_family;
	x->up = TL_HANDLE_NONE;
	/* A Unix server has no UDP way to it. */
	r = srv->unix_path ? -EAFNOSUPPORT : tl_udp_bind(sh->loop, &any, &x->up);
	if (r == 0 && (r = tl_udp_connect(sh->loop, x->up, &srv->addr)) == 0)
		r = arm_up(sh, si, k);
	if (r < 0) {
		if (!tl_handle_eq(x->up, TL_HANDLE_NONE))
			tl_close(sh->loop, x->up, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		x->up = TL_HANDLE_NONE;
		atomic_fetch_sub_explicit(&srv->conns, 1, memory_order_relaxed);
		srv_count(sh, srv, -1);
		u->d[TLP_UDP_ST_DROP_ERROR]++;
		return NONE;
	}
	claim(sh, si, k, peer);
	x->t0 = x->t_act = tl_now(sh->loop);
	memset(x->dg, 0, sizeof x->dg);
	memset(x->bytes, 0, sizeof x->bytes);
	x->srv = srv;
	hash_in(u, si, hv);
	u->d[TLP_UDP_ST_SESSIONS]++;
	return si;
}

/* A datagram (n bytes at p) from a client of socket k, in a pooled lease
 * (NO_LEASE for an empty one) or in own buffer lease (JL_LEASE | j). */
static void from_client(struct tlp_shard *sh, uint32_t k, const tl_completion *c,
			const uint8_t *p, uint32_t lease)
{
	struct tlp_udp *u = sh->udp;
	uint32_t n = (uint32_t)c->result;
	uint32_t hv = hash_of(k, &c->u.recv.from);
	uint32_t si = find(u, k, &c->u.recv.from, hv);
	tl_op op;

	if (n > dgmax_of(u, k)) {
		/* Over a smaller max_datagram than a pooled buffer. */
		u->d[TLP_UDP_ST_DROP_TRUNC]++;
		give_back(sh, k, NONE, lease);
		return;
	}
	if (si == NONE && (u->draining || u->sock[k].retiring)) {
		/* The socket is closing (a drain, or its listener gone in a
		 * reload): a new client is refused as a TCP one would be. */
		u->d[TLP_UDP_ST_DROP_CLOSING]++;
		give_back(sh, k, NONE, lease);
		return;
	}
	if (si == NONE && (si = open_session(sh, k, &c->u.recv.from, hv)) == NONE) {
		give_back(sh, k, NONE, lease); /* counted by open_session */
		return;
	}
	struct usess *x = &u->s[si];
	uint32_t want = x->lr->cfg->responses;

	x->t_act = tl_now(sh->loop);
	x->dg[0]++;
	x->bytes[0] += n;
	u->d[TLP_UDP_ST_DGRAMS_IN]++;
	u->d[TLP_UDP_ST_BYTES_IN] += n;
	if (want != TLP_RESPONSES_ANY)
		x->pending += want;
	if (tl_udp_send(sh->loop, x->up, p, n, NULL, utok(K_TOSRV, si, lease), &op) < 0) {
		u->d[TLP_UDP_ST_DROP_ERROR]++;
		give_back(sh, k, si, lease);
		end(sh, si, TLP_END_SERVER_ERROR, 0);
		return;
	}
	x->wq++;
}

/* A reply from session si's server (n bytes at p), in a pooled lease
 * (NO_LEASE for an empty one) or the session's own buffer (JS_LEASE). */
static void from_server(struct tlp_shard *sh, uint32_t si, const tl_completion *c,
			const uint8_t *p, uint32_t lease)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];
	uint32_t n = (uint32_t)c->result;
	uint32_t want = x->lr->cfg->responses;
	struct usock *us = &u->sock[x->sock];
	tl_op op;

	if (n > dgmax_of(u, x->sock)) {
		u->d[TLP_UDP_ST_DROP_TRUNC]++;
		give_back(sh, x->sock, si, lease);
		return;
	}
	if (x->state != U_OPEN || us->state != S_OPEN ||
	    (want != TLP_RESPONSES_ANY && !x->pending)) {
		u->d[TLP_UDP_ST_DROP_LATE]++;
		give_back(sh, x->sock, si, lease);
		return;
	}
	if (!x->dg[1])
		tlp_passive(x->srv, x->gen->pc_by_gp[x->gp->idx], 1, tlp_mono_ns());
	x->t_act = tl_now(sh->loop);
	x->dg[1]++;
	x->bytes[1] += n;
	u->d[TLP_UDP_ST_DGRAMS_OUT]++;
	u->d[TLP_UDP_ST_BYTES_OUT] += n;
	if (want != TLP_RESPONSES_ANY)
		x->pending--;
	if (tl_udp_send(sh->loop, us->h, p, n, &x->peer, utok(K_TOCLI, si, lease), &op) < 0) {
		u->d[TLP_UDP_ST_DROP_ERROR]++;
		give_back(sh, x->sock, si, lease);
		check_done(sh, si);
		return;
	}
	x->wq++;
}

static void sent(struct tlp_shard *sh, uint32_t si, const tl_completion *c, int to_srv)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];

	x->wq--;
	if (c->result < 0 && c->result != -ECANCELED) {
		u->d[TLP_UDP_ST_DROP_ERROR]++;
		if (to_srv) {
			/* A connected socket's send fails with the ICMP error
			 * of an earlier one: the server is not there. */
			if (tlp_blame((int)c->result) == TLP_BLAME_SERVER)
				tlp_passive(x->srv, x->gen->pc_by_gp[x->gp->idx], 0,
					    tlp_mono_ns());
			end(sh, si, TLP_END_SERVER_ERROR, (int)c->result);
		}
	}
	check_done(sh, si);
	/* After the session's end, if it ended: its own buffer is not armed
	 * again then. */
	give_back(sh, x->sock, si, UT_LEASE(c->token));
	maybe_free(sh, si);
}

/* Session si's receive ended with error r: its server is not there. */
static void server_gone(struct tlp_shard *sh, uint32_t si, int r)
{
	struct usess *x = &sh->udp->s[si];

	if (r >= 0 || r == -ECANCELED || x->state != U_OPEN)
		return;
	if (tlp_blame(r) == TLP_BLAME_SERVER)
		tlp_passive(x->srv, x->gen->pc_by_gp[x->gp->idx], 0, tlp_mono_ns());
	end(sh, si, TLP_END_SERVER_ERROR, r);
}

/* A one-shot receive into own buffer j of listening socket k completed. */
static void lrecv_own(struct tlp_shard *sh, uint32_t k, const tl_completion *c)
{
	struct tlp_udp *u = sh->udp;
	struct usock *us = &u->sock[k];
	uint32_t lease = UT_LEASE(c->token);

	us->rxlive &= (uint8_t)~(1u << (lease & ~JL_LEASE)); /* a one-shot receive ended */
	if (c->result >= 0 && !(c->flags & TL_F_TRUNC)) {
		from_client(sh, k, c, us->jbuf + (size_t)(lease & ~JL_LEASE) * dgmax_of(u, k),
			    lease);
		return;
	}
	if (c->flags & TL_F_TRUNC)
		u->d[TLP_UDP_ST_DROP_TRUNC]++;
	else if (c->result == -ECANCELED || (c->flags & TL_F_STOPPED) || us->state != S_OPEN)
		return; /* closing: the buffer rests */
	else
		tlp_log("udp listener %s: receive failed: %s", us->lr->cfg->name,
			tl_strerror((int)c->result));
	give_back(sh, k, NONE, lease);
}

/* A one-shot receive into session si's own buffer completed. */
static void srecv_own(struct tlp_shard *sh, uint32_t si, const tl_completion *c)
{
	struct usess *x = &sh->udp->s[si];

	if (c->result >= 0 && !(c->flags & TL_F_TRUNC)) {
		from_server(sh, si, c, x->jbuf, JS_LEASE);
	} else if (c->flags & TL_F_TRUNC) {
		sh->udp->d[TLP_UDP_ST_DROP_TRUNC]++;
		give_back(sh, x->sock, si, JS_LEASE);
	} else {
		server_gone(sh, si, (int)c->result);
	}
}

static void sweep(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;
	uint64_t now = tl_now(sh->loop);

	for (uint32_t i = 0; i < u->cap && u->nopen; i++) {
		struct usess *x = &u->s[i];

		if (x->state == U_OPEN && now - x->t_act >= x->lr->cfg->idle_timeout_ns)
			end(sh, i, TLP_END_IDLE, 0);
	}
}

/* Listening socket k's Closed: every op of it has ended. Sessions that
 * came in on it may outlive it (a stop, or a receive that could not be
 * armed again closed it under them): the slot is free once they are. */
static void sock_closed(struct tlp_shard *sh, uint32_t k)
{
	struct usock *us = &sh->udp->sock[k];

	if (us->ino)
		reg_drop(us->ino);
	us->ino = 0;
	us->rxlive = 0;
	us->handing = 0;
	if (us->jbuf)
		munmap(us->jbuf, us->jlen);
	us->jbuf = NULL;
	tlp_gen_put(us->gen);
	us->gen = NULL;
	us->lr = NULL;
	if (us->nsess)
		us->gone = 1;
	else
		us->state = S_FREE;
}

void tlp_on_udp(tl_shard *s, const tl_completion *c)
{
	struct tlp_shard *sh = SH(s);
	struct tlp_udp *u = sh->udp;
	uint32_t i = UT_I(c->token);

	switch (UT_K(c->token)) {
	case K_LRECV:
		if (UT_LEASE(c->token) != NO_LEASE) {
			lrecv_own(sh, i, c);
			return;
		}
		if (c->kind == TL_K_RECV && !(c->flags & TL_F_TERMINAL) && c->result >= 0 &&
		    !(c->flags & TL_F_TRUNC)) {
			from_client(sh, i, c, (c->flags & TL_F_LEASE) ? c->u.recv.lease.data : NULL,
				    (c->flags & TL_F_LEASE) ? c->u.recv.lease.id : NO_LEASE);
			return;
		}
		u->d[TLP_UDP_ST_DROP_TRUNC] += !!(c->flags & TL_F_TRUNC);
		if (c->flags & TL_F_LEASE)
			tl_lease_release(sh->loop, c->u.recv.lease.id);
		if (c->flags & TL_F_TERMINAL)
			u->sock[i].rxlive &= (uint8_t)~1u;
		if ((c->flags & TL_F_TERMINAL) && u->sock[i].state == S_OPEN && !u->sock[i].handing &&
		    c->result != -ECANCELED && !(c->flags & TL_F_STOPPED)) {
			/* An error the socket reported (not the stop): go on. */
			tlp_log("udp listener %s: receive ended: %s", u->sock[i].lr->cfg->name,
				tl_strerror((int)c->result));
			if (arm_lstart(sh, i) < 0)
				close_sock(sh, i);
		}
		return;
	case K_URECV:
		if (UT_LEASE(c->token) == JS_LEASE) {
			srecv_own(sh, i, c);
			return;
		}
		if (c->kind == TL_K_RECV && !(c->flags & TL_F_TERMINAL) && c->result >= 0 &&
		    !(c->flags & TL_F_TRUNC)) {
			from_server(sh, i, c, (c->flags & TL_F_LEASE) ? c->u.recv.lease.data : NULL,
				    (c->flags & TL_F_LEASE) ? c->u.recv.lease.id : NO_LEASE);
			return;
		}
		u->d[TLP_UDP_ST_DROP_TRUNC] += !!(c->flags & TL_F_TRUNC);
		if (c->flags & TL_F_LEASE)
			tl_lease_release(sh->loop, c->u.recv.lease.id);
		if (c->flags & TL_F_TERMINAL)
			server_gone(sh, i, (int)c->result);
		return;
	case K_TOSRV:
		sent(sh, i, c, 1);
		return;
	case K_TOCLI:
		sent(sh, i, c, 0);
		return;
	case K_CLOSED:
		u->s[i].closed = 1;
		maybe_free(sh, i);
		return;
	case K_LCLOSED:
		sock_closed(sh, i);
		return;
	case K_SWEEP:
		sweep(sh);
		return;
	}
}

/* Is a the address of endpoint ep? */
static int is_ep(const tl_addr *a, const struct tlp_endpoint *ep)
{
	tl_addr b;

	memset(&b, 0, sizeof b);
	memcpy(&b, &ep->addr, ep->addr.sa.sa_family == AF_INET ? sizeof b.in : sizeof b.in6);
	return same_addr(a, &b);
}

/* Does listener lc list address a? */
static int lists(const struct tlp_listener_cfg *lc, const tl_addr *a)
{
	for (uint32_t k = 0; k < lc->nlisten; k++)
		if (is_ep(a, &lc->listen[k]))
			return 1;
	return 0;
}

/* Room for cap sessions (the table only grows; at a start or a reload). */
static int grow_sessions(struct tlp_udp *u, uint32_t cap)
{
	uint32_t nb = 16, *bucket;
	struct usess *s;

	if (cap <= u->cap)
		return 0;
	while (nb < 2 * cap)
		nb <<= 1;
	s = realloc(u->s, (size_t)cap * sizeof *s);
	if (!s)
		return -ENOMEM;
	u->s = s;
	bucket = malloc(nb * sizeof *bucket);
	if (!bucket)
		return -ENOMEM;
	memset(&s[u->cap], 0, (size_t)(cap - u->cap) * sizeof *s);
	for (uint32_t i = cap; i-- > u->cap;) {
		s[i].next = u->free_head;
		u->free_head = i;
	}
	for (uint32_t i = 0; i < nb; i++)
		bucket[i] = NONE;
	free(u->bucket);
	u->bucket = bucket;
	u->mask = nb - 1;
	u->cap = cap;
	/* The open sessions in the new chains. */
	for (uint32_t i = 0; i < u->cap; i++)
		if (s[i].state == U_OPEN && !s[i].stray) {
			uint32_t b = hash_of(s[i].sock, &s[i].peer) & u->mask;

			s[i].next = u->bucket[b];
			u->bucket[b] = i;
		}
	return 0;
}

/* What listener lr fixes when first set up: its max_datagram, and with
 * large datagrams its own session buffers. A reload keeps them. */
static int setup_listener(struct tlp_udp *u, const struct tlp_lrt *lr)
{
	const struct tlp_listener_cfg *lc = lr->cfg;
	struct ulst *ls = &u->lst[lr->gl->idx];
	struct ujumbo *j = &ls->j;

	if (ls->dgmax) {
		if ((lc->max_datagram != ls->dgmax ||
		     (j->mem && lc->sessions != ls->jsessions)) && !ls->said && u->sh->id == 0) {
			ls->said = 1;
			tlp_log("reload: udp listener %s keeps max_datagram %u%s until a restart",
				lc->name, ls->dgmax, j->mem ? " and its sessions" : "");
		}
		return 0;
	}
	ls->dgmax = lc->max_datagram;
	if (ls->dgmax <= TLP_UDP_DGRAM_DFLT)
		return 0;
	/* A buffer per session, mapped now and given memory by the kernel
	 * as sessions use them. */
	ls->jsessions = lc->sessions;
	j->len = (size_t)lc->sessions * ls->dgmax;
	j->mem = mmap(NULL, j->len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (j->mem == MAP_FAILED) {
		j->mem = NULL;
		return -errno;
	}
	j->free = malloc(lc->sessions * sizeof *j->free);
	if (!j->free)
		return -ENOMEM;
	for (uint32_t b = 0; b < lc->sessions; b++)
		j->free[b] = lc->sessions - 1 - b;
	j->nfree = lc->sessions;
	return 0;
}

/* A listening socket for address ai of listener lr of generation g:
 * bound here, or (inh >= 0) a descriptor of one a takeover handed over. */
static int open_sock(struct tlp_shard *sh, struct tlp_gen *g, const struct tlp_lrt *lr,
		     uint32_t ai, int inh)
{
	struct tlp_udp *u = sh->udp;
	const struct tlp_listener_cfg *lc = lr->cfg;
	tl_udp_opts o = {.flags = TL_UDP_REUSEPORT};
	struct usock *us;
	uint32_t k = 0, size;
	int r, fd = -1;

	while (k < u->nsock && u->sock[k].state != S_FREE)
		k++;
	if (k == u->nsock) {
		us = realloc(u->sock, (size_t)(u->nsock + 1) * sizeof *us);
		if (!us)
			return -ENOMEM;
		u->sock = us;
		memset(&us[u->nsock++], 0, sizeof *us);
	}
	us = &u->sock[k];
	memset(&us->addr, 0, sizeof us->addr);
	memcpy(&us->addr, &lc->listen[ai].addr,
	       lc->listen[ai].addr.sa.sa_family == AF_INET ? sizeof us->addr.in
							   : sizeof us->addr.in6);
	if (inh >= 0) {
		fd = fcntl(inh, F_DUPFD_CLOEXEC, 3);
		r = fd < 0 ? -errno : tl_adopt(sh->loop, fd, &us->h);
		if (r < 0 && fd >= 0)
			close(fd);
	} else {
		r = tl_udp_bind_opts(sh->loop, &us->addr, &o, &us->h);
	}
	if (r < 0) {
		tlp_log("udp listener %s: cannot %s %s: %s", lc->name, inh >= 0 ? "adopt" : "bind",
			lc->listen[ai].text ? lc->listen[ai].text : "?", tl_strerror(r));
		return r;
	}
	/* A pool far smaller than usual keeps the loop's cap (-EINVAL). */
	(void)tl_handle_caps(sh->loop, us->h, LISTEN_LEASES, 0);
	atomic_fetch_add(&g->refs, 1);
	us->gen = g;
	us->lr = lr;
	us->gi = lr->gl->idx;
	us->nsess = 0;
	us->retiring = 0;
	us->gone = 0;
	us->handing = 0;
	us->rxlive = 0;
	us->state = S_OPEN;
	us->ino = ino_of(tl_handle_fd(sh->loop, us->h));
	if (us->ino)
		reg_put(us->ino, sh->id);
	size = u->lst[us->gi].dgmax;
	if (size > TLP_UDP_DGRAM_DFLT) {
		us->jlen = (size_t)JUMBO_RX * size;
		us->jbuf = mmap(NULL, us->jlen, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (us->jbuf == MAP_FAILED) {
			us->jbuf = NULL;
			r = -errno;
			close_sock(sh, k);
			return r;
		}
		for (uint32_t b = 0; b < JUMBO_RX; b++)
			if ((r = arm_lrecv(sh, k, b)) < 0) {
				close_sock(sh, k);
				return r;
			}
		return 0;
	}
	r = arm_lstart(sh, k);
	if (r < 0)
		close_sock(sh, k);
	return r;
}

/* The idle sweep at least every tick (it only ever gets shorter). */
static int sweep_every(struct tlp_shard *sh, uint64_t tick)
{
	struct tlp_udp *u = sh->udp;
	tl_handle h;
	tl_op op;
	int r;

	if (tick < 10 * 1000 * 1000ull)
		tick = 10 * 1000 * 1000ull;
	if (u->tick && u->tick <= tick)
		return 0;
	r = tl_timer_start(sh->loop, tl_now(sh->loop) + tick, tick, utok(K_SWEEP, 0, NO_LEASE),
			   &h, &op);
	if (r < 0)
		return r;
	tl_set_ref(sh->loop, h, 0);
	if (u->tick)
		tl_close(sh->loop, u->sweep_h, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
	u->sweep_h = h;
	u->tick = tick;
	return 0;
}

int tlp_udp_use(struct tlp_shard *sh, struct tlp_gen *g)
{
	const struct tlp_config *cfg = g->cfg;
	struct tlp_udp *u = sh->udp;
	uint64_t tick = 1000 * 1000 * 1000ull;
	uint32_t cap = 0;
	int r, rc = 0;

	for (uint32_t i = 0; i < cfg->nlisteners; i++)
		if (cfg->listeners[i].proto == TLP_PROTO_UDP) {
			cap += cfg->listeners[i].sessions;
			if (cfg->listeners[i].idle_timeout_ns / 4 < tick)
				tick = cfg->listeners[i].idle_timeout_ns / 4;
		}
	if (!u) {
		if (!cap)
			return 0;
		u = calloc(1, sizeof *u);
		if (!u)
			return -ENOMEM;
		sh->udp = u;
		u->sh = sh;
		u->free_head = NONE;
		u->lst = calloc(TLP_REG_LISTENERS, sizeof *u->lst);
		if (!u->lst)
			return -ENOMEM;
	}
	if (u->draining)
		return 0;
	/* Sockets whose listener and address the generation keeps move to
	 * it; the others retire. */
	for (uint32_t k = 0; k < u->nsock; k++) {
		struct usock *us = &u->sock[k];
		const struct tlp_lrt *lr = g->by_gl[us->gi];

		if (us->state != S_OPEN || us->retiring)
			continue;
		if (lr && lr->cfg->proto == TLP_PROTO_UDP && lists(lr->cfg, &us->addr)) {
			if (us->gen != g) {
				atomic_fetch_add(&g->refs, 1);
				tlp_gen_put(us->gen);
				us->gen = g;
			}
			us->lr = lr;
		} else {
			retire(sh, k);
		}
	}
	/* Sessions of listeners on their way out may stay a while beside a
	 * full complement of the new ones. */
	if ((r = grow_sessions(u, cap + u->nopen)) < 0)
		return r;
	for (uint32_t i = 0; i < cfg->nlisteners; i++) {
		const struct tlp_lrt *lr = &g->l[i];

		if (lr->cfg->proto != TLP_PROTO_UDP)
			continue;
		if ((r = setup_listener(u, lr)) < 0)
			return r;
		for (uint32_t ai = 0; ai < lr->cfg->nlisten; ai++) {
			const struct tlp_endpoint *ep = &lr->cfg->listen[ai];
			uint32_t k = 0;

			while (k < u->nsock &&
			       !(u->sock[k].state == S_OPEN && !u->sock[k].retiring &&
				 u->sock[k].gi == lr->gl->idx && is_ep(&u->sock[k].addr, ep)))
				k++;
			if (k < u->nsock)
				continue;
			/* At the start of a takeover, shard k takes the k-th socket
			 * the old process handed over for the address, and those
			 * numbered k + N, k + 2N, ... that no shard of ours would
			 * otherwise receive on; a shard with none binds its own
			 * (SO_REUSEPORT: it joins their group). */
			int inh = tlp_inherited_udp(ep, sh->id);

			if ((r = open_sock(sh, g, lr, ai, inh)) < 0 && !rc)
				rc = r;
			for (uint32_t x = sh->id + tlp_w.nshards; inh >= 0; x += tlp_w.nshards)
				if ((inh = tlp_inherited_udp(ep, x)) >= 0 &&
				    (r = open_sock(sh, g, lr, ai, inh)) < 0 && !rc)
					rc = r;
		}
	}
	if (cap && (r = sweep_every(sh, tick)) < 0)
		return r;
	return rc;
}

static void ho_step(struct tlp_shard *sh);

void tlp_udp_pass(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	if (!u)
		return;
	if (u->nho)
		ho_step(sh);
	for (int i = 0; i < TLP_UDP_ST_ROWS; i++)
		if (u->d[i]) {
			tl_shard_counter_add(sh->s, st_udp + i, u->d[i]);
			u->d[i] = 0;
		}
	if (u->open_dirty) {
		tl_shard_gauge_set(sh->s, st_udp_open, u->nopen);
		u->open_dirty = 0;
	}
}

void tlp_udp_drain(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	if (!u)
		return;
	u->draining = 1;
	for (uint32_t k = 0; k < u->nsock; k++)
		retire(sh, k);
}

void tlp_udp_stop(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	if (!u)
		return;
	u->draining = 1;
	for (uint32_t i = 0; i < u->cap; i++)
		if (u->s[i].state == U_OPEN)
			end(sh, i, TLP_END_SHUTDOWN, 0);
	for (uint32_t k = 0; k < u->nsock; k++)
		close_sock(sh, k);
}

int tlp_udp_port_taken(const tl_addr *a)
{
	/* Without SO_REUSEPORT: a bind fails on a port any socket holds. */
	int fd = socket(a->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;

	if (fd < 0)
		return -errno;
	if (bind(fd, &a->sa, tl_addr_len(a)) < 0)
		r = errno == EADDRINUSE ? 1 : -errno;
	close(fd);
	return r;
}

void tlp_udp_free(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	if (!u)
		return;
	/* What the end of the loop left: sessions and sockets whose Closed
	 * never came. */
	for (uint32_t i = 0; i < u->cap; i++)
		if (u->s[i].gen)
			tlp_gen_unhold(sh, u->s[i].gen);
	for (uint32_t k = 0; k < u->nsock; k++)
		if (u->sock[k].state != S_FREE)
			sock_closed(sh, k);
	for (uint32_t i = 0; u->lst && i < TLP_REG_LISTENERS; i++) {
		if (u->lst[i].j.mem)
			munmap(u->lst[i].j.mem, u->lst[i].j.len);
		free(u->lst[i].j.free);
	}
	free(u->lst);
	free(u->sock);
	free(u->s);
	free(u->bucket);
	free(u);
	sh->udp = NULL;
}

/* ---- live takeover (ho.c, ho_adopt.c; docs/TLPROXY.md) ----
 *
 * The old process hands each listening socket over with the TCP ones; once
 * the new one accepts, every shard here stops receiving on them (the
 * datagrams that come meanwhile wait in the sockets, for the new process)
 * and hands each of their sessions over once its sends are done: its
 * socket to the server is detached (what its receive had taken is passed
 * to the client first; replies still to come wait in the socket) and goes
 * as a CONN record with a descriptor of the listening socket, by which the
 * new process finds the shard that receives on the same socket. A session
 * that ends first ends here; one still moving at the handover's deadline
 * ends here too. If the new process goes away, the sockets receive here
 * again and the sessions it never acknowledged come back the same way.
 */

void tlp_udp_ho_listeners(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	for (uint32_t k = 0; u && k < u->nsock; k++) {
		int fd;

		if (u->sock[k].state != S_OPEN || u->sock[k].retiring)
			continue;
		fd = tl_handle_fd(sh->loop, u->sock[k].h);
		if (fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
			tlp_ho_push_listener(sh->id, fd);
	}
}

uint32_t tlp_udp_handover(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;
	uint32_t n = 0;

	if (!u)
		return 0;
	for (uint32_t k = 0; k < u->nsock; k++) {
		struct usock *us = &u->sock[k];

		if (us->state != S_OPEN || us->retiring)
			continue;
		us->handing = 1;
		for (uint32_t j = 0; j < JUMBO_RX; j++)
			if (us->rxlive & (1u << j))
				tl_cancel(sh->loop, us->rop[j]);
	}
	for (uint32_t i = 0; i < u->cap; i++) {
		struct usess *x = &u->s[i];

		if (x->state == U_OPEN && u->sock[x->sock].handing) {
			x->ho = 1;
			u->nho++;
			n++;
		}
	}
	return n;
}

/* Session si leaves as a record, its socket detached as fd (taken). */
static void hand_over(struct tlp_shard *sh, uint32_t si, int fd)
{
	struct tlp_udp *u = sh->udp;
	struct usess *x = &u->s[si];
	struct tlp_ho_msg m;
	int fds[2];

	memset(&m, 0, offsetof(struct tlp_ho_msg, u) + sizeof m.u.conn);
	m.type = TLP_HO_CONN;
	m.u.conn.flags = TLP_HO_UDP;
	m.u.conn.bytes[0] = x->bytes[0];
	m.u.conn.bytes[1] = x->bytes[1];
	m.u.conn.dgrams[0] = x->dg[0];
	m.u.conn.dgrams[1] = x->dg[1];
	m.u.conn.pending = x->pending;
	m.u.conn.age_ns = tl_now(sh->loop) - x->t0;
	snprintf(m.u.conn.listener, sizeof m.u.conn.listener, "%s", x->lr->gl->name);
	snprintf(m.u.conn.pool, sizeof m.u.conn.pool, "%s", x->gp ? x->gp->name : "");
	snprintf(m.u.conn.srv, sizeof m.u.conn.srv, "%s", x->srv ? x->srv->label : "");
	m.u.conn.peer_len = x->peer.sa.sa_family == AF_INET ? sizeof x->peer.in : sizeof x->peer.in6;
	memcpy(&m.u.conn.peer, &x->peer, m.u.conn.peer_len);
	fds[0] = tl_handle_fd(sh->loop, u->sock[x->sock].h);
	fds[0] = fds[0] < 0 ? -1 : fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
	fds[1] = fd;
	x->ho = 0;
	u->nho--;
	if (fds[0] < 0) {
		tlp_log("takeover: a udp session cannot be handed over: %s", tl_strerror(-errno));
		close(fd);
		tlp_ho_gone();
	} else {
		tlp_ho_push_conn(&m, fds); /* takes the descriptors whatever happens */
	}
	/* Gone from here: what end() releases, without a close or a log line
	 * (the new process logs it when it ends). */
	unlink_hash(u, si);
	if (x->srv) {
		atomic_fetch_sub_explicit(&x->srv->conns, 1, memory_order_relaxed);
		srv_count(sh, x->srv, -1);
	}
	x->up = TL_HANDLE_NONE;
	x->state = U_CLOSING;
	x->closed = 1;
	x->cause = TLP_END_DONE;
	maybe_free(sh, si);
}

/* Each pass while sessions are being handed over: those whose listening
 * socket receives no more and whose sends are done are detached. */
static void ho_step(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;

	for (uint32_t i = 0; i < u->cap && u->nho; i++) {
		struct usess *x = &u->s[i];
		int fd, r;

		if (!x->ho || u->sock[x->sock].rxlive || x->wq)
			continue;
		r = tl_detach(sh->loop, x->up, &fd);
		if (r == -EAGAIN)
			continue; /* its receive's end comes as a completion: the next pass */
		if (r < 0) {
			u->d[TLP_UDP_ST_DROP_ERROR]++;
			end(sh, i, TLP_END_BUSY, r);
			continue;
		}
		hand_over(sh, i, fd);
	}
}

uint32_t tlp_udp_ho_stop(struct tlp_shard *sh)
{
	struct tlp_udp *u = sh->udp;
	uint32_t n = 0;

	for (uint32_t i = 0; u && i < u->cap && u->nho; i++)
		if (u->s[i].ho) {
			n++;
			end(sh, i, TLP_END_SHUTDOWN, 0);
		}
	return n;
}

void tlp_udp_ho_end(struct tlp_shard *sh, int ok)
{
	struct tlp_udp *u = sh->udp;

	for (uint32_t k = 0; u && k < u->nsock; k++) {
		struct usock *us = &u->sock[k];

		if (!us->handing)
			continue;
		us->handing = 0;
		if (ok || us->state != S_OPEN)
			continue; /* the new process receives on it; this one drains */
		/* The successor went away: receive here again. */
		if (us->jbuf) {
			for (uint32_t j = 0; j < JUMBO_RX; j++)
				if (!(us->rxlive & (1u << j)) && arm_lrecv(sh, k, j) < 0)
					close_sock(sh, k);
		} else if (!(us->rxlive & 1) && arm_lstart(sh, k) < 0) {
			close_sock(sh, k);
		}
	}
}

int tlp_udp_adopt(struct tlp_shard *sh, struct tlp_ho_in *in)
{
	struct tlp_udp *u = sh->udp;
	const struct tlp_ho_conn *hc = &in->c;
	uint64_t ino = ino_of(in->fd[0]);
	uint32_t k = 0, si, hv, old;
	struct usock *us;
	struct usess *x;
	struct ulst *ls;
	tl_addr peer;
	int r;

	while (u && ino && k < u->nsock &&
	       !(u->sock[k].state == S_OPEN && !u->sock[k].retiring && u->sock[k].ino == ino))
		k++;
	if (!u || !ino || k == u->nsock || strcmp(u->sock[k].lr->gl->name, hc->listener)) {
		r = -ENOENT; /* no socket of ours, or not that listener's */
		goto fail;
	}
	us = &u->sock[k];
	ls = &u->lst[us->gi];
	if (sh->stopping || u->draining) {
		r = -ESHUTDOWN;
		goto fail;
	}
	if (u->free_head == NONE || (ls->j.mem && !ls->j.nfree)) {
		r = -ENOBUFS;
		goto fail;
	}
	memset(&peer, 0, sizeof peer);
	memcpy(&peer, &hc->peer, hc->peer_len <= sizeof peer ? hc->peer_len : sizeof peer);
	if (peer.sa.sa_family != AF_INET && peer.sa.sa_family != AF_INET6) {
		r = -EAFNOSUPPORT;
		goto fail;
	}
	si = u->free_head;
	x = &u->s[si];
	if ((r = tl_adopt(sh->loop, in->fd[1], &x->up)) < 0)
		goto fail;
	in->fd[1] = -1;
	if ((r = arm_up(sh, si, k)) < 0) {
		tl_close(sh->loop, x->up, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
		x->up = TL_HANDLE_NONE;
		goto fail;
	}
	claim(sh, si, k, &peer);
	x->pending = hc->pending;
	x->t_act = tl_now(sh->loop);
	x->t0 = x->t_act - hc->age_ns;
	x->dg[0] = hc->dgrams[0];
	x->dg[1] = hc->dgrams[1];
	x->bytes[0] = hc->bytes[0];
	x->bytes[1] = hc->bytes[1];
	x->srv = NULL;
	/* Count it where the old process did: its server, if the pool still
	 * has it (else it forwards on, counted nowhere). */
	if (x->gp && !strcmp(x->gp->name, hc->pool)) {
		const struct tlp_view *v = sh->lp[x->gp->idx].v;
		int e = tlp_view_find(v, hc->srv);

		if (e >= 0) {
			x->srv = v->e[e].srv;
			atomic_fetch_add_explicit(&x->srv->conns, 1, memory_order_relaxed);
			srv_count(sh, x->srv, 1);
		}
	}
	/* A client of it whose datagram came to us before the session did has
	 * a session of ours already: the one handed over, whose server knows
	 * the client by its socket, takes the client's datagrams from now on;
	 * the other passes on the replies still owed to it and ends (when it
	 * has them, or idle). */
	hv = hash_of(k, &peer);
	old = find(u, k, &peer, hv);
	if (old != NONE) {
		unlink_hash(u, old);
		u->s[old].stray = 1;
		/* (With responses any it may be owed some: it ends idle.) */
		if (u->s[old].lr->cfg->responses != TLP_RESPONSES_ANY && !u->s[old].pending)
			end(sh, old, TLP_END_DONE, 0);
	}
	hash_in(u, si, hv);
	close(in->fd[0]);
	free(in);
	return 0;
fail:
	if (in->fd[0] >= 0)
		close(in->fd[0]);
	if (in->fd[1] >= 0)
		close(in->fd[1]);
	free(in);
	return r;
}
