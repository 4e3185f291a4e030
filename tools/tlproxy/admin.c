/* tools/tlproxy/admin.c: the admin socket (shard 0): commands by line, answers in batches, server states set by hand. */
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin.h"
#include "plane.h"

/* Calls: admin -> plane, world. */

/*
 * The admin socket. Commands are lines, taken one at a time from the bytes
 * as they come, however the client splits them: a read's lease is kept
 * until its last line is run (at most ADMIN_HOLD leases per client: its
 * reads pause at that, contract 4.10), and only the line being read is
 * copied, so a client may send any number of commands in one write. A line
 * longer than ADMIN_LINE is answered with an error and skipped. Answers are
 * written in batches of about ADMIN_BATCH bytes: lines wait while one is
 * being written, so a client that sends and never reads holds at most its
 * leases and one batch. A client that sends nothing and takes nothing for
 * admin_timeout is closed (its stream's idle deadline), and one that finds
 * every one of the ADMIN_MAX slots taken is told so and closed.
 */
#define ADMIN_MAX 16
#define ADMIN_LINE 4096
#define ADMIN_HOLD 4
#define ADMIN_BATCH 65536

enum { AOP_READ = 1, AOP_WRITE, AOP_CLOSE, AOP_LISTEN };

/* A lease read from an admin client, run up to off. */
struct admin_held {
	const uint8_t *data;
	uint32_t id, len, off;
};

struct admin_conn {
	tl_handle h;
	int used, writing, eof, quit, closing;
	int skipping;               /* the line being read is too long: skip to its end */
	uint32_t inlen;             /* bytes of the line being read */
	char in[ADMIN_LINE + 1];
	struct admin_held held[ADMIN_HOLD]; /* leases read and not yet run, oldest first */
	uint32_t nheld;
	char *out;
	size_t outlen, outcap;
};

static struct {
	tl_handle h;
	struct admin_conn adm[ADMIN_MAX];
} ad;

static void out_add(struct admin_conn *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(struct admin_conn *a, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = a->outcap - a->outlen;

		va_start(ap, fmt);
		n = vsnprintf(a->out ? a->out + a->outlen : NULL, a->out ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (a->out && (size_t)n < room) {
			a->outlen += (size_t)n;
			return;
		}
		size_t cap = a->outcap ? a->outcap * 2 : 4096;

		while (cap < a->outlen + (size_t)n + 1)
			cap *= 2;
		char *p = realloc(a->out, cap);

		if (!p)
			return;
		a->out = p;
		a->outcap = cap;
	}
}

static void cmd_servers(struct admin_conn *a, const char *pool)
{
	struct tlp_world *w = &tlp_w;
	uint64_t now = tlp_mono_ns();
	uint32_t p;

	for (p = 0; pool && p < w->ngp; p++)
		if (w->gp[p]->cfg && !strcmp(pool, w->gp[p]->name))
			break;
	if (pool && p == w->ngp) {
		out_add(a, "no pool '%.64s' (show pools lists them)\n", pool);
		return;
	}
	for (p = 0; p < w->ngp; p++) {
		struct tlp_gpool *gp = w->gp[p];

		if (!gp->cfg || !gp->view || (pool && strcmp(pool, gp->name)))
			continue;
		for (uint32_t i = 0; i < gp->view->n; i++) {
			struct tlp_vent *e = &gp->view->e[i];
			struct tlp_srv *s = e->srv;

			out_add(a, "%s state=%s health=%s conns=%u weight=%u max_conns=%u from=%s\n",
				s->name, tlp_ss_names[tlp_srv_state(s, now)],
				!gp->cfg->health.enabled ? "unchecked"
				: atomic_load(&s->health) ? "up" : "down",
				atomic_load(&s->conns), e->weight, e->max_conns, s->origin);
		}
	}
}

static void cmd(struct admin_conn *a, char *line)
{
	struct tlp_world *w = &tlp_w;
	char *verb = strtok(line, " \t\r"), *arg = verb ? strtok(NULL, " \t\r") : NULL;

	if (!verb)
		return;
	if (!strcmp(verb, "help")) {
		out_add(a, "commands:\n"
			   "  show servers [POOL]   every server: state, health, connections\n"
			   "  show pools            every pool: balancing, servers, clients queued\n"
			   "  show listeners        every listener: connections, clients queued\n"
			   "  enable POOL/ADDRESS   let the server take connections\n"
			   "  disable POOL/ADDRESS  take it out: no new connections, no checks\n"
			   "  drain POOL/ADDRESS    no new connections; its own ones finish\n"
			   "  quit\n");
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "servers")) {
		cmd_servers(a, strtok(NULL, " \t\r"));
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "pools")) {
		for (uint32_t p = 0; p < w->ngp; p++) {
			struct tlp_gpool *gp = w->gp[p];

			if (!gp->cfg)
				continue;
			out_add(a, "%s balance=%s servers=%u queued=%u\n", gp->name,
				tlp_bal_name(gp->cfg->balance), gp->view ? gp->view->n : 0,
				atomic_load(&gp->waiting));
		}
	} else if (!strcmp(verb, "show") && arg && !strcmp(arg, "listeners")) {
		struct tlp_gen *g = atomic_load(&w->gen);

		for (uint32_t i = 0; i < g->cfg->nlisteners; i++) {
			const struct tlp_lrt *l = &g->l[i];

			out_add(a, "%s conns=%u queued=%u listen=", l->cfg->name,
				atomic_load(&l->gl->conns), atomic_load(&l->gl->queued));
			for (uint32_t k = 0; k < l->cfg->nlisten; k++)
				out_add(a, "%s%s", k ? "," : "", l->cfg->listen[k].text);
			out_add(a, "\n");
		}
	} else if (!strcmp(verb, "enable") || !strcmp(verb, "disable") || !strcmp(verb, "drain")) {
		struct tlp_srv *s = arg ? tlp_srv_find(arg) : NULL;
		uint8_t st = verb[0] == 'e' ? TLP_ADM_ENABLED : verb[0] == 'd' && verb[1] == 'i'
								    ? TLP_ADM_DISABLED
								    : TLP_ADM_DRAIN;

		if (!s) {
			out_add(a, "no server '%s' (show servers lists them)\n", arg ? arg : "");
			return;
		}
		if (atomic_exchange(&s->admin, st) != st) {
			atomic_fetch_add(&s->pool->state_ver, 1);
			tlp_log("admin: server %s %s", s->name,
				st == TLP_ADM_ENABLED ? "enabled" : st == TLP_ADM_DRAIN ? "draining" : "disabled");
			if (st == TLP_ADM_ENABLED)
				tlp_cp_room(s->pool);
		}
		out_add(a, "ok\n");
	} else if (!strcmp(verb, "quit")) {
		a->quit = 1;
	} else {
		out_add(a, "unknown command '%.40s' (try help)\n", verb);
	}
}

static inline uint64_t atok(const struct admin_conn *a, int op)
{
	return tl_token(TLP_H_ADMIN, (uint64_t)(a - ad.adm) | (uint64_t)op << 8);
}

static void admin_close(struct admin_conn *a)
{
	if (a->closing)
		return;
	a->closing = 1;
	tl_close(tlp_cp.loop, a->h, atok(a, AOP_CLOSE));
}

/* Take bytes of the oldest held lease up to its next line end: run the
 * line once it is whole. Returns 1 when a line ended. */
static int admin_line(struct admin_conn *a)
{
	struct admin_held *l = &a->held[0];
	const uint8_t *p = l->data + l->off, *nl = memchr(p, '\n', l->len - l->off);
	uint32_t n = nl ? (uint32_t)(nl - p) : l->len - l->off;

	if (!a->skipping && a->inlen + n > ADMIN_LINE) {
		a->skipping = 1; /* answered when the line ends */
		a->inlen = 0;
	}
	if (!a->skipping) {
		memcpy(a->in + a->inlen, p, n);
		a->inlen += n;
	}
	l->off += n + (nl ? 1 : 0);
	if (l->off == l->len) {
		tl_lease_release(tlp_cp.loop, l->id);
		memmove(&a->held[0], &a->held[1], --a->nheld * sizeof a->held[0]);
	}
	if (!nl)
		return 0;
	if (a->skipping)
		out_add(a, "line longer than %d bytes: skipped\n", ADMIN_LINE);
	else {
		a->in[a->inlen] = '\0';
		cmd(a, a->in);
	}
	a->skipping = 0;
	a->inlen = 0;
	return 1;
}

/* Run the lines received, in batches, and send what they printed. */
static void admin_run(struct admin_conn *a)
{
	if (a->writing || a->closing)
		return;
	while (a->nheld && !a->quit && a->outlen < ADMIN_BATCH)
		admin_line(a);
	/* The client's end: its last line needs no line end. */
	if (a->eof && !a->nheld && !a->quit && (a->inlen || a->skipping)) {
		if (a->skipping)
			out_add(a, "line longer than %d bytes: skipped\n", ADMIN_LINE);
		else {
			a->in[a->inlen] = '\0';
			cmd(a, a->in);
		}
		a->inlen = 0;
		a->skipping = 0;
	}
	if (a->outlen) {
		tl_op op;

		if (tl_write(tlp_cp.loop, a->h, a->out, (uint32_t)a->outlen, atok(a, AOP_WRITE), &op) ==
		    0) {
			a->writing = 1;
			return;
		}
		admin_close(a);
		return;
	}
	if (a->quit || (a->eof && !a->nheld))
		admin_close(a);
}

void tlp_on_admin(tl_shard *s, const tl_completion *e)
{
	uint64_t t = tl_token_data(e->token);
	int op = (int)(t >> 8);
	struct admin_conn *a = &ad.adm[t & 0xff];
	tl_op id;

	(void)s;
	if (op == AOP_LISTEN) {
		struct ucred cr;
		socklen_t len = sizeof cr;
		int fd, slot = -1;

		if (e->kind != TL_K_ACCEPT || e->result < 0)
			return;
		fd = tl_handle_fd(tlp_cp.loop, e->u.accept.conn);
		if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
		    (cr.uid != 0 && cr.uid != geteuid())) {
			tlp_log("admin: refused a client of uid %d (only uid %u and root may connect)",
				fd < 0 ? -1 : (int)cr.uid, (unsigned)geteuid());
			tl_close(tlp_cp.loop, e->u.accept.conn, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			return;
		}
		for (int i = 0; i < ADMIN_MAX; i++)
			if (!ad.adm[i].used) {
				slot = i;
				break;
			}
		if (slot < 0) {
			/* A new Unix stream's send buffer is empty: the line goes
			 * whole, at once, before the close. */
			static const char busy[] = "busy: all 16 admin connections are in use; "
						   "try again later\n";

			_Static_assert(ADMIN_MAX == 16, "the message names the count");
			if (send(fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
				tlp_log("admin: all %d slots in use; a client was closed unanswered",
					ADMIN_MAX);
			tl_close(tlp_cp.loop, e->u.accept.conn, tlp_ctl_token(TLP_MSG_ORPHAN, 0));
			return;
		}
		a = &ad.adm[slot];
		memset(a, 0, sizeof *a);
		a->used = 1;
		a->h = e->u.accept.conn;
		if (tl_handle_caps(tlp_cp.loop, a->h, ADMIN_HOLD, 0) < 0 ||
		    tl_idle_deadline(tlp_cp.loop, a->h, atomic_load(&tlp_w.gen)->cfg->admin_timeout_ns) < 0 ||
		    tl_read_start(tlp_cp.loop, a->h, atok(a, AOP_READ), &id) < 0)
			admin_close(a);
		return;
	}
	if (!a->used) {
		if (e->kind == TL_K_READ && (e->flags & TL_F_LEASE) && e->result > 0)
			tl_lease_release(tlp_cp.loop, e->u.read.lease.id);
		return;
	}
	switch (op) {
	case AOP_READ:
		if (e->result > 0 && (e->flags & TL_F_LEASE)) {
			if (a->closing || a->nheld == ADMIN_HOLD) {
				/* Closing; or past the cap, which the caps forbid. */
				tl_lease_release(tlp_cp.loop, e->u.read.lease.id);
				if (!a->closing)
					admin_close(a);
				return;
			}
			a->held[a->nheld].data = e->u.read.lease.data;
			a->held[a->nheld].id = e->u.read.lease.id;
			a->held[a->nheld].len = (uint32_t)e->result;
			a->held[a->nheld++].off = 0;
		}
		if (e->result == -ETIMEDOUT && !a->closing) {
			out_add(a, "closing: idle for %llu ms\n",
				(unsigned long long)(atomic_load(&tlp_w.gen)->cfg->admin_timeout_ns /
						     1000000));
			a->quit = 1;
		} else if ((e->flags & TL_F_TERMINAL) && e->result != -ECANCELED) {
			a->eof = 1;
		}
		admin_run(a);
		return;
	case AOP_WRITE:
		a->writing = 0;
		a->outlen = 0;
		if (e->result < 0) {
			admin_close(a);
			return;
		}
		admin_run(a);
		return;
	case AOP_CLOSE:
		for (uint32_t i = 0; i < a->nheld; i++)
			tl_lease_release(tlp_cp.loop, a->held[i].id);
		free(a->out);
		memset(a, 0, sizeof *a);
		return;
	default:
		return;
	}
}

int tlp_admin_start(const char *path)
{
	tl_op op;
	int r;

	r = tl_unix_listen(tlp_cp.loop, path, NULL, &ad.h);
	if (r < 0) {
		fprintf(stderr, "tlproxy: admin socket %s: %s\n", path, tl_strerror(r));
		return r;
	}
	/* Owner only; SO_PEERCRED checks each client on top. */
	if (chmod(path, 0600) < 0) {
		r = -errno;
		fprintf(stderr, "tlproxy: admin socket %s: chmod: %s\n", path, tl_strerror(r));
		return r;
	}
	r = tl_accept_start(tlp_cp.loop, ad.h, tl_token(TLP_H_ADMIN, (uint64_t)AOP_LISTEN << 8),
			    &op);
	if (r < 0)
		fprintf(stderr, "tlproxy: admin socket %s: %s\n", path, tl_strerror(r));
	return r;
}

void tlp_admin_stop(void)
{
	for (int i = 0; i < ADMIN_MAX; i++)
		if (ad.adm[i].used)
			admin_close(&ad.adm[i]);
}

void tlp_admin_free(void)
{
	for (int i = 0; i < ADMIN_MAX; i++)
		free(ad.adm[i].out);
	memset(&ad, 0, sizeof ad);
}
