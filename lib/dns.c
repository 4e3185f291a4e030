/* lib/dns.c: the c-ares resolver on the loop: its sockets polled through the core's poll ops, its timeouts as a loop deadline, lookups as ops. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tl_config.h"
#include "sysmod.h"
#include "turnloop/dns.h"

#if TL_HAVE_CARES

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <ares.h>

/*
 * c-ares tells which sockets to watch through its sock_state_cb; each
 * watched socket becomes an op of the resolver's handle: a one-shot poll
 * (kind TL_K_RESOLVE, code TL_OP_POLL) that the host never sees. When it
 * is ready, ares_process_fd reads or writes it (finishing lookups through
 * their callbacks) and the poll is armed again with what c-ares wants now;
 * a socket c-ares closes, or a resolver closing, retires its op silently.
 * A change of the events wanted while the poll is in the driver cancels
 * that poll, and its acknowledgement arms the new one.
 *
 * c-ares calls back only from inside the calls we make into it (on the
 * loop's thread); `cur` names the resolver those calls are for, so that a
 * lookup's callback finds its loop. A lookup's callback argument is its op
 * id: a lookup cancelled before c-ares answered has a stale id by then, and
 * its answer is dropped.
 */

/* A resolver (one per handle, made by tl_dns_open, freed at release). */
struct dns_ctx {
	tl_loop *l;
	uint32_t hidx;
	int dead;          /* being destroyed: ignore c-ares's last calls */
	uint32_t lookups;  /* lookups c-ares still runs for us */
	uint64_t at;       /* when c-ares next needs the loop (reschedule) */
	ares_channel ch;
	struct dns_ctx *next, *prev;
};

struct tl_dnsloc {
	struct dns_ctx *head;
};

/* The handle's u.sys words hold its resolver. */
static inline struct dns_ctx **CTX(struct tl_hslot *h) { return (struct dns_ctx **)h->u.sys; }

/* poll.flags of a socket's op */
#define SF_DEAD 0x1    /* c-ares closed the socket: retire at the next sight */
#define SF_CUT 0x2     /* we cancelled the poll to change its events */

static __thread struct dns_ctx *cur;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;

static void lib_init(void)
{
	lib_rc = ares_library_init(ARES_LIB_INIT_ALL);
}

static struct tl_hslot *hslot_of(struct dns_ctx *x)
{
	return &x->l->h[x->hidx];
}

/* When c-ares next needs the loop (a retry, a timeout): x->at, after every
 * call into c-ares. ares_timeout counts whole milliseconds, rounded down:
 * waking at what it says would find the timeout not quite due and spin for
 * up to a millisecond, so the loop wakes a millisecond later. */
static void reschedule(struct dns_ctx *x)
{
	struct timeval tv, *t = x->lookups ? ares_timeout(x->ch, NULL, &tv) : NULL;
	x->at = t ? tl_now(x->l) + (uint64_t)t->tv_sec * 1000000000ull +
			    (uint64_t)t->tv_usec * 1000ull + 1000000ull
		  : UINT64_MAX;
}

/* ---- sockets ---- */

static struct tl_opslot *sock_op(tl_loop *l, struct tl_hslot *h, int fd)
{
	for (uint32_t i = h->head; i != TL_NIL; i = l->o[i].next) {
		struct tl_opslot *o = &l->o[i];
		if (o->code == TL_OP_POLL && o->poll.fd == fd && !(o->poll.flags & SF_DEAD))
			return o;
	}
	return NULL;
}

static void arm(tl_loop *l, struct tl_opslot *o)
{
	if (tl__poll_arm(l, o) < 0)
		tl__op_retire_silent(l, o); /* the lookups on it time out */
}

static void on_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
	struct dns_ctx *x = data;
	if (x->dead)
		return;
	tl_loop *l = x->l;
	struct tl_hslot *h = hslot_of(x);
	uint16_t ev = (uint16_t)((readable ? POLLIN : 0) | (writable ? POLLOUT : 0));
	struct tl_opslot *o = sock_op(l, h, fd);
	if (!o) {
		if (!ev || (h->flags & TL_HF_CLOSING) || tl__op_new(l, h, TL_OP_POLL, TL_K_RESOLVE, 0, &o) < 0)
			return;
		o->poll.fd = fd;
		o->poll.events = ev;
		o->poll.flags = 0;
		arm(l, o);
		return;
	}
	if (o->poll.events == ev)
		return;
	o->poll.events = ev;
	if (!ev)
		o->poll.flags |= SF_DEAD;
	/* In the driver with the old events: cut it short; its end arms the
	 * new ones (or retires it). Off the driver: its next sight does. */
	if ((o->flags & TL_OPF_NATIVE) && !(o->poll.flags & SF_CUT) &&
	    l->dv->cancel(l->d, h, o) == 0)
		o->poll.flags |= SF_CUT;
}

static int on_sock_create(ares_socket_t fd, int type, void *data)
{
	/* c-ares's sockets are not close-on-exec; a child we spawn must not
	 * keep them. */
	int fl = fcntl(fd, F_GETFD);
	if (fl >= 0)
		fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	return 0;
}

static void dns_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	struct tl_hslot *h = &l->h[o->hidx];
	struct dns_ctx *x = *CTX(h);
	if ((o->poll.flags & SF_DEAD) || (o->flags & TL_OPF_CANCEL) || (h->flags & TL_HF_CLOSING)) {
		tl__op_retire_silent(l, o);
		return;
	}
	int cut = o->poll.flags & SF_CUT;
	o->poll.flags &= (uint8_t)~SF_CUT;
	if (res > 0 || (res < 0 && !cut)) {
		/* An error of the poll itself: let c-ares find it on the socket. */
		int fd = o->poll.fd, any = res < 0 || (res & (POLLERR | POLLHUP));
		ares_socket_t rfd = (any || (res & POLLIN)) ? fd : ARES_SOCKET_BAD;
		ares_socket_t wfd = (any || (res & POLLOUT)) ? fd : ARES_SOCKET_BAD;
		cur = x;
		ares_process_fd(x->ch, rfd, wfd);
		reschedule(x);
	}
	if (o->poll.flags & SF_DEAD)
		tl__op_retire_silent(l, o);
	else
		arm(l, o);
}

const struct tl_pollkind tl__dns_kind = {.ready = dns_ready};

/* ---- lookups ---- */

static int status_errno(int st)
{
	switch (st) {
	case ARES_ENOTFOUND:
	case ARES_ENODATA:
	case ARES_ENONAME:
		return -ENOENT;
	case ARES_ETIMEOUT:
		return -ETIMEDOUT;
	case ARES_ECONNREFUSED:
	case ARES_EREFUSED:
		return -ECONNREFUSED;
	case ARES_ESERVFAIL:
		return -EAGAIN;
	case ARES_EBADNAME:
	case ARES_EBADFAMILY:
		return -EINVAL;
	case ARES_ENOMEM:
		return -ENOMEM;
	case ARES_ECANCELLED:
	case ARES_EDESTRUCTION:
		return -ECANCELED;
	}
	return -EIO;
}

static void on_addrinfo(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	struct dns_ctx *x = cur;
	(void)timeouts;
	x->lookups--;
	struct tl_opslot *o = x->dead ? NULL : tl__op_lookup(x->l, (tl_op){(uint64_t)(uintptr_t)arg});
	if (!o || o->code != TL_OP_DNS) { /* cancelled meanwhile */
		ares_freeaddrinfo(res);
		return;
	}
	tl_addr *out = o->u.dns.out;
	uint32_t cap = o->u.dns.cap, n = 0, found = 0;
	int64_t r = status == ARES_SUCCESS ? 0 : status_errno(status);
	if (status == ARES_SUCCESS && res) {
		for (struct ares_addrinfo_node *ai = res->nodes; ai && found < TL_RESOLVE_MAX;
		     ai = ai->ai_next) {
			tl_addr a;
			memset(&a, 0, sizeof a);
			if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof a.in)
				memcpy(&a.in, ai->ai_addr, sizeof a.in);
			else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof a.in6)
				memcpy(&a.in6, ai->ai_addr, sizeof a.in6);
			else
				continue;
			if (a.sa.sa_family == AF_INET)
				a.in.sin_port = 0;
			else
				a.in6.sin6_port = 0;
			if (n < cap)
				out[n++] = a;
			found++;
		}
		r = found ? (int64_t)n : -ENOENT;
	}
	ares_freeaddrinfo(res);
	tl_completion *c = tl__op_event(x->l, o, r, TL_F_TERMINAL, TL_NO_LEASE);
	if (c) {
		c->u.pool.value = r >= 0 ? found : (uint64_t)r;
		c->u.pool.ptr = out;
	}
}

int tl_dns_resolve(tl_loop *l, tl_handle hid, const char *name, int family, tl_addr *out,
		   uint32_t cap, uint64_t token, tl_op *oid)
{
	struct tl_hslot *h = tl__handle_get(l, hid);
	if (!h)
		return -ENOENT;
	if (h->type != TL_H_DNS || (h->flags & TL_HF_CLOSING) || !name || strlen(name) > 253 ||
	    (family != AF_UNSPEC && family != AF_INET && family != AF_INET6) || !out || !cap ||
	    !oid)
		return -EINVAL;
	struct dns_ctx *x = *CTX(h);
	struct tl_opslot *o;
	int r = tl__op_new(l, h, TL_OP_DNS, TL_K_RESOLVE, token, &o);
	if (r < 0)
		return r;
	o->u.dns.out = out;
	o->u.dns.cap = cap < TL_RESOLVE_MAX ? cap : TL_RESOLVE_MAX;
	tl_op id = tl__op_id(l, o);
	struct ares_addrinfo_hints hints;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = family;
	/* Keep the servers' order: sorting connects a probe socket per
	 * address, and buys nothing for a server that picks its own. */
	hints.ai_flags = ARES_AI_NOSORT;
	x->lookups++;
	cur = x;
	ares_getaddrinfo(x->ch, name, NULL, &hints, on_addrinfo, (void *)(uintptr_t)id.v);
	reschedule(x);
	*oid = id;
	return 0;
}

void tl__dns_cancel(tl_loop *l, struct tl_opslot *o)
{
	/* c-ares cannot drop one lookup: it runs on, and its answer finds the
	 * op id stale. The caller's out is never written after this. */
	tl_addr *out = o->u.dns.out;
	tl_completion *c = tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE);
	if (c) {
		c->u.pool.value = 0;
		c->u.pool.ptr = out;
	}
}

/* ---- open, timeouts, release ---- */

int tl_dns_open(tl_loop *l, const tl_dns_config *cfg, tl_handle *hid)
{
	tl_dns_config def;
	memset(&def, 0, sizeof def);
	if (!cfg)
		cfg = &def;
	if (!hid || cfg->nservers > TL_DNS_SERVERS_MAX || (cfg->nservers && !cfg->servers) ||
	    (cfg->flags & ~(uint32_t)(TL_DNS_NO_HOSTS | TL_DNS_NO_SEARCH)))
		return -EINVAL;
	struct ares_addr_port_node nodes[TL_DNS_SERVERS_MAX];
	for (uint32_t i = 0; i < cfg->nservers; i++) {
		const tl_addr *a = &cfg->servers[i];
		memset(&nodes[i], 0, sizeof nodes[i]);
		nodes[i].next = i + 1 < cfg->nservers ? &nodes[i + 1] : NULL;
		nodes[i].family = a->sa.sa_family;
		uint16_t port;
		if (a->sa.sa_family == AF_INET) {
			nodes[i].addr.addr4 = a->in.sin_addr;
			port = ntohs(a->in.sin_port);
		} else if (a->sa.sa_family == AF_INET6) {
			memcpy(&nodes[i].addr.addr6, &a->in6.sin6_addr, sizeof a->in6.sin6_addr);
			port = ntohs(a->in6.sin6_port);
		} else {
			return -EINVAL;
		}
		nodes[i].udp_port = nodes[i].tcp_port = port ? port : 53;
	}
	if (!tl__can_poll(l))
		return -ENOTSUP;
	if (l->nhandles == l->cfg.max_handles)
		return -ENOBUFS;
	pthread_once(&lib_once, lib_init);
	if (lib_rc != ARES_SUCCESS)
		return -EIO;
	if (!l->dns && !(l->dns = calloc(1, sizeof *l->dns)))
		return -ENOMEM;
	struct dns_ctx *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	x->l = l;
	x->at = UINT64_MAX;
	struct ares_options opt;
	memset(&opt, 0, sizeof opt);
	int mask = ARES_OPT_SOCK_STATE_CB;
	opt.sock_state_cb = on_sock_state;
	opt.sock_state_cb_data = x;
	char lookups[] = "b";
	if (cfg->flags & TL_DNS_NO_HOSTS) {
		mask |= ARES_OPT_LOOKUPS;
		opt.lookups = lookups;
	}
	if (cfg->flags & TL_DNS_NO_SEARCH) {
		mask |= ARES_OPT_DOMAINS;
		opt.domains = NULL;
		opt.ndomains = 0;
	}
	if (cfg->timeout_ms) {
		mask |= ARES_OPT_TIMEOUTMS;
		opt.timeout = (int)cfg->timeout_ms;
	}
	if (cfg->tries) {
		mask |= ARES_OPT_TRIES;
		opt.tries = (int)cfg->tries;
	}
	int st = ares_init_options(&x->ch, &opt, mask);
	if (st == ARES_SUCCESS && cfg->nservers)
		st = ares_set_servers_ports(x->ch, nodes);
	if (st != ARES_SUCCESS) {
		if (x->ch) {
			x->dead = 1;
			ares_destroy(x->ch);
		}
		free(x);
		return st == ARES_ENOMEM ? -ENOMEM : -EIO;
	}
	ares_set_socket_configure_callback(x->ch, on_sock_create, NULL);
	struct tl_hslot *h = tl__handle_new(l, TL_H_DNS);
	x->hidx = h->idx;
	*CTX(h) = x;
	x->next = l->dns->head;
	if (x->next)
		x->next->prev = x;
	l->dns->head = x;
	*hid = tl__h_id(l, h);
	return 0;
}

uint64_t tl__dns_deadline(tl_loop *l)
{
	uint64_t d = UINT64_MAX;
	for (struct dns_ctx *x = l->dns->head; x; x = x->next)
		if (x->at < d)
			d = x->at;
	return d;
}

void tl__dns_run(tl_loop *l, uint64_t now)
{
	for (struct dns_ctx *x = l->dns->head; x; x = x->next) {
		if (x->at > now || (hslot_of(x)->flags & TL_HF_CLOSING))
			continue;
		cur = x;
		ares_process_fd(x->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
		reschedule(x);
	}
}

void tl__dns_release(tl_loop *l, struct tl_hslot *h)
{
	struct dns_ctx *x = *CTX(h);
	if (x->prev)
		x->prev->next = x->next;
	else
		l->dns->head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	/* Its lookups were cancelled and its polls retired before Closed;
	 * what c-ares still calls back now is ignored. */
	x->dead = 1;
	cur = x;
	ares_destroy(x->ch);
	cur = NULL;
	free(x);
}

void tl__dns_destroy(tl_loop *l)
{
	free(l->dns);
	l->dns = NULL;
}

#else /* !TL_HAVE_CARES */

static void dns_ready(tl_loop *l, struct tl_opslot *o, int32_t res)
{
	(void)res;
	tl__op_retire_silent(l, o); /* not reached: no resolver exists */
}

const struct tl_pollkind tl__dns_kind = {.ready = dns_ready};

int tl_dns_open(tl_loop *l, const tl_dns_config *cfg, tl_handle *h)
{
	(void)l;
	(void)cfg;
	return h ? -ENOTSUP : -EINVAL;
}

int tl_dns_resolve(tl_loop *l, tl_handle h, const char *name, int family, tl_addr *out,
		   uint32_t cap, uint64_t token, tl_op *op)
{
	return tl__handle_get(l, h) ? -EINVAL : -ENOENT;
}

void tl__dns_cancel(tl_loop *l, struct tl_opslot *o) { tl__op_event(l, o, 0, TL_F_TERMINAL, TL_NO_LEASE); }
uint64_t tl__dns_deadline(tl_loop *l) { return UINT64_MAX; }
void tl__dns_run(tl_loop *l, uint64_t now) {}
void tl__dns_release(tl_loop *l, struct tl_hslot *h) {}
void tl__dns_destroy(tl_loop *l) {}

#endif
