/* tools/tlkv.c: a sharded key-value server speaking the Redis protocol: each shard owns the keys that hash to it, commands on other keys go to their owner over the mesh, and each connection's replies leave in request order; the model program of docs/GUIDE-SHARDED.md. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <turnloop.h>
#define XXH_INLINE_ALL /* the keys' hash: xxHash's XXH3 (Debian: libxxhash-dev), inlined */
#include <xxhash.h>

/* Limits: a key or value 512 KiB, a command 1 MiB or 1024 arguments; 64
 * replies owed per connection (a deeper pipeline waits for them). */
enum { MAX_SHARDS = 64, MAX_ARGS = 1024, VAL_MAX = 512 << 10, CMD_MAX = 1 << 20, WBUF = 1 << 20,
       REPLY_MAX = VAL_MAX + 64, REC_N = 64, IN_N = 96, CHUNK = 64 << 10 };
enum { OP_GET, OP_SET, OP_INCR, OP_DEL, OP_COUNT, OP_SAVE, K_KEY, K_EACH, K_ALL, K_PING, K_QUIT };
enum { R_SUM = 1, R_EMIT = 2 }; /* DEL's parts (no bytes) add up; its last part replies with the sum */
#define S(lit) lit, (uint32_t)(sizeof lit - 1)
#define ERR(o, lit) reply(o, S(lit), NULL, 0)

struct item { struct item *next; uint64_t h; uint32_t klen, vlen; uint8_t kv[]; }; /* key, value */

/* A reply owed to a client, in its connection's ring (turnloop/replies.h).
 * For a remote key the owner runs the command (run) and makes the reply. */
struct rec {
	tl_reply r; /* first */
	uint8_t op;
	uint32_t klen, vlen;
	uint64_t h;
	const uint8_t *key, *val; /* in in[], or (kept) in the reader */
	uint8_t in[IN_N];
} __attribute__((aligned(64))); /* the owner writes one while we fill the next */

struct conn { /* a connection's state, in a slot of the shard's server */
	tl_conn b;        /* first: its reader (b.rd), writer (b.wr) and life */
	struct shard *sh;
	uint32_t argi;
	uint8_t quit;
	const char *bye;  /* the line before the close: QUIT's +OK, a protocol error */
	int64_t sum;
	struct rec *grec; /* the reply that its gather answers */
	tl_resp rs;       /* from here on: set up at open */
	tl_replies q;
	tl_mesh_chain chains[MAX_SHARDS];
	tl_mesh_gather g;
	tl_mesh_part parts[MAX_SHARDS];
	struct rec rec[REC_N];
};

struct save { /* a shard's part of a SAVE: its result, deferred until the file is in place */
	tl_mesh_reply reply;
	tl_fout f;
	uint64_t next, keys;
	uint8_t *buf;
};

struct shard {
	tl_shard *s; /* NULL once the runtime is gone */
	tl_server *srv;
	uint32_t id;
	struct item **b; /* the buckets: a power of two, --keys or more */
	uint64_t mask, live, ncmd, nremote;
	struct save sv;
	tl_resp_arg av[MAX_ARGS];
};

static struct {
	tl_addr addr;
	const char *dir;
	uint32_t keys, conns, nshards;
	int local, group, st_cmds, st_remote;
	atomic_int saving;
	struct shard *sh;
} kv = {.dir = ".", .keys = 1u << 20, .conns = 1024};

/* ---- The table: a fixed array of buckets, chains of malloc'd items ---- */

static uint32_t owner(const struct shard *sh, uint64_t h) { /* the hash's top half, scaled */
	return kv.local ? sh->id : (uint32_t)(((h >> 32) * kv.nshards) >> 32);
}

/* The link to key k's item; *link is NULL when k is not there (insert there). */
static struct item **find(struct shard *sh, uint64_t h, const uint8_t *k, uint32_t kl) {
	struct item **p = &sh->b[h & sh->mask];
	while (*p && ((*p)->h != h || (*p)->klen != kl || memcmp((*p)->kv, k, kl))) p = &(*p)->next;
	return p;
}

/* Items are malloc'd: with jemalloc, from the shard's own arena; a SET whose
 * value keeps its size class reuses the memory (realloc). */
static int set(struct shard *sh, struct item **p, uint64_t h, const uint8_t *k, uint32_t kl,
	       const uint8_t *v, uint32_t vl) {
	struct item *it;
	if (*p && (*p)->vlen == vl) return memcpy((*p)->kv + kl, v, vl), 0; /* in place */
	if (!*p && sh->live >= kv.keys) return -ENOSPC;
	if (!(it = realloc(*p, sizeof *it + kl + vl))) return -ENOMEM;
	if (!*p) { *it = (struct item){.h = h, .klen = kl}; memcpy(it->kv, k, kl); sh->live++; }
	memcpy(it->kv + kl, v, it->vlen = vl);
	*p = it;
	return 0;
}

/* ---- Replies ---- */

/* Where a reply goes: straight into the connection's writer (w, whose room
 * was checked), or into a record that waits for its turn (r), made by shard s. */
struct out { tl_wbuf *w; tl_reply *r; tl_shard *s; };

/* Inlined everywhere: left to the compiler, GET's reply became a call, 12
 * instructions a request more at -P 16 (callgrind). */
static inline __attribute__((always_inline)) void reply(struct out *o, const void *head, uint32_t hn,
							const void *body, uint32_t bn) {
	uint32_t n = hn + (body ? bn + 2 : 0);
	uint8_t *p;
	if (o->w && tl_wbuf_reserve(o->w, n, &p) < 0) { /* not in one run: in pieces */
		tl_wbuf_append(o->w, head, hn);
		if (body && !tl_wbuf_append(o->w, body, bn)) tl_wbuf_append(o->w, "\r\n", 2);
		return;
	}
	if (!o->w && !(p = tl_reply_buf(o->s, o->r, n)))
		p = tl_reply_buf(o->s, o->r, n = 20), head = "-ERR out of memory\r\n", hn = 20, body = NULL;
	memcpy(p, head, hn);
	if (body) memcpy((uint8_t *)memcpy(p + hn, body, bn) + bn, "\r\n", 2);
	if (o->w) tl_wbuf_commit(o->w, n); /* straight into the writer */
}

/* One key's command, on the shard that owns the key. Returns DEL's count. */
static int64_t exec(struct shard *sh, int op, uint64_t h, const uint8_t *k, uint32_t kl,
		    const uint8_t *v, uint32_t vl, struct out *o) {
	struct item **p = find(sh, h, k, kl), *it = *p;
	uint8_t b[24];
	int64_t n = 0;
	int rc = 0;
	if (op == OP_GET && it) reply(o, b, tl_resp_num(b, '$', it->vlen), it->kv + kl, it->vlen);
	else if (op == OP_GET) ERR(o, "$-1\r\n");
	else if (op == OP_DEL && it) { *p = it->next; free(it); sh->live--; return 1; }
	else if (op == OP_INCR && it && tl_resp_num_parse(it->kv + kl, it->vlen, &n) < 0)
		ERR(o, "-ERR value is not an integer or out of range\r\n");
	else if (op == OP_INCR && n == INT64_MAX) ERR(o, "-ERR increment or decrement would overflow\r\n");
	else if (op == OP_INCR && !(rc = set(sh, p, h, k, kl, b + 1, tl_resp_num(b, ':', n + 1) - 3)))
		reply(o, b, tl_resp_num(b, ':', n + 1), NULL, 0);
	else if (op == OP_SET && !(rc = set(sh, p, h, k, kl, v, vl))) ERR(o, "+OK\r\n");
	if (rc) rc == -ENOSPC ? ERR(o, "-ERR table full (--keys)\r\n") : ERR(o, "-ERR out of memory\r\n");
	return 0;
}

/* ---- A connection's replies, in request order (turnloop/replies.h) ---- */

/* A reply with no bytes as it leaves: DEL's parts add up and the last one
 * says the sum; a command the stop refused says so, and the connection ends. */
static uint32_t say_sum(tl_reply *r, uint8_t *p, void *arg) {
	struct conn *c = arg;
	uint32_t n = 0;
	if (r->result < 0) return c->quit = 1, memcpy(p, "-ERR shutting down\r\n", 20), 20;
	c->sum += r->result;
	if (r->flags & R_EMIT) n = tl_resp_num(p, ':', c->sum), c->sum = 0;
	return n;
}

/* A reply made here and now, in its place: 1, or 0 when no record is free. */
static int say(struct conn *c, const void *head, uint32_t hn, const void *body, uint32_t bn) {
	struct out o = {tl_replies_direct(&c->q, REPLY_MAX) ? &c->b.wr : NULL, NULL, c->sh->s};
	if (!o.w && !(o.r = tl_replies_add(&c->q))) return 0;
	reply(&o, head, hn, body, bn);
	return 1;
}

/* A command on its key's owner: the queue sends the pass's commands for one
 * owner as one call (a call per command cost a quarter of the instructions
 * a remote command adds), in order. */
static int64_t run(tl_shard *s, tl_reply *x) {
	struct rec *r = (struct rec *)x;
	struct out o = {NULL, x, s};
	return exec(tl_shard_data(s), r->op, r->h, r->key, r->klen, r->val, r->vlen, &o);
}

/* One key's command: run here (into the writer when no reply is owed before
 * it), or sent to the key's owner. 1 when done or sent, 0 stalled. */
static int route(struct conn *c, int op, int flags, const tl_resp_arg *k, const tl_resp_arg *v) {
	struct shard *sh = c->sh;
	uint64_t h = XXH3_64bits(k->p, k->n);
	uint32_t to = owner(sh, h), vl = v ? v->n : 0;
	struct out o = {&c->b.wr, NULL, sh->s};
	struct rec *r;
	if (to == sh->id && !flags && tl_replies_direct(&c->q, REPLY_MAX))
		return exec(sh, op, h, k->p, k->n, v ? v->p : NULL, vl, &o), 1;
	if (!(o.r = tl_replies_add(&c->q))) return 0;
	r = (struct rec *)o.r;
	r->r.flags = (uint16_t)flags;
	if (to == sh->id) return o.w = NULL, r->r.result = exec(sh, op, h, k->p, k->n, v ? v->p : NULL, vl, &o), 1;
	r->op = (uint8_t)op; r->h = h;
	r->key = k->p; r->klen = k->n; r->val = v ? v->p : NULL; r->vlen = vl;
	if (k->n + vl <= IN_N) { /* copied: the command's bytes may go at once */
		r->key = memcpy(r->in, k->p, k->n);
		r->val = v ? memcpy(r->in + k->n, v->p, vl) : NULL;
	}
	sh->nremote++;
	tl_replies_send(&c->q, &r->r, to, r->key != r->in); /* refused: done, say_sum tells */
	return 1;
}

/* ---- SAVE: on each shard, a task writes the shard's keys to its own file ---- */

static void save_end(struct shard *sh, int64_t err) { /* the part's result: the keys, or the error */
	tl_shard_reply(sh->s, &sh->sv.reply, err < 0 ? err : (int64_t)sh->sv.keys);
}

/* The task: a slice of the walk over the buckets, each key as a SET command (a
 * file `redis-cli --pipe` replays), into the file's buffer, which goes to the
 * file (write(2): a copy into the page cache) whenever less than the largest
 * command is free, every CHUNK bytes or so. A key set or deleted during the
 * walk may be in the file or not; every other one is. */
static int save_task(tl_shard *s, void *arg) {
	struct save *v = arg;
	struct shard *sh = tl_shard_data(s);
	uint8_t *p, *q;
	for (int rc; v->next <= sh->mask; v->next++) {
		for (struct item *it = sh->b[v->next]; it; it = it->next, v->keys++) {
			if ((rc = tl_fout_reserve(&v->f, 2 * REPLY_MAX, &p)) < 0) return rc;
			q = (uint8_t *)memcpy(p, "*3\r\n$3\r\nSET\r\n", 13) + 13;
			q += tl_resp_bulk(q, it->kv, it->klen);
			q += tl_resp_bulk(q, it->kv + it->klen, it->vlen);
			tl_fout_commit(&v->f, (uint32_t)(q - p));
		}
		if ((v->next & 63) == 63 && tl_shard_should_yield(s)) { v->next++; return TL_TASK_MORE; }
	}
	return TL_TASK_DONE;
}

/* A gather's part, on each shard: count its keys, or start its save (its
 * result comes once the file is written: a deferred reply). */
static int64_t run_all(tl_shard *s, void *arg) {
	struct shard *sh = tl_shard_data(s);
	struct save *v = &sh->sv;
	char path[4200];
	int rc;
	if (((struct rec *)arg)->op == OP_COUNT) return (int64_t)sh->live;
	*v = (struct save){.buf = v->buf};
	tl_shard_defer(s, &v->reply);
	snprintf(path, sizeof path, "%s/tlkv-%u.resp", kv.dir, sh->id); /* written whole, then renamed */
	if ((rc = tl_fout_open(&v->f, path, v->buf, CHUNK + 2 * REPLY_MAX)) < 0 ||
	    (rc = tl_shard_task_spawn(s, kv.group, save_task, v, 0)) < 0) { tl_fout_abort(&v->f); save_end(sh, rc); }
	return 0;
}

/* A command for every shard (DBSIZE, SAVE): a gather, one at a time per
 * connection, that waits in the runtime while the mesh has no room. 1 when
 * sent, 0 stalled. Its end: on_completion. */
static int gather(struct conn *c, int op) {
	struct rec *r;
	/* The one in flight first, and the keys before it: done, so counted. */
	if (c->g.busy || tl_replies_away(&c->q)) return 0;
	if (op == OP_SAVE && atomic_exchange(&kv.saving, 1)) return say(c, S("-ERR a SAVE is in progress\r\n"), NULL, 0);
	if ((r = c->grec = (struct rec *)tl_replies_add(&c->q)) && (r->op = (uint8_t)op, 1) &&
	    tl_shard_gather_wait(c->sh->s, &c->g, NULL, 0, run_all, r, tl_token(0, (uintptr_t)c)) > 0)
		return tl_replies_wait(&c->q, &r->r), 1;
	if (op == OP_SAVE) atomic_store(&kv.saving, 0);
	if (r) r->r.result = -EPIPE; /* the runtime is stopping: say_sum tells */
	return r != NULL;
}

/* ---- Commands ---- */

static const struct cmd { tl_resp_command c; uint8_t op, kind; } cmds[] = { /* names and arities: turnloop/resp.h */
	{{"get", 2}, OP_GET, K_KEY}, {{"set", 3}, OP_SET, K_KEY}, {{"incr", 2}, OP_INCR, K_KEY}, {{"del", -2}, OP_DEL, K_EACH},
	{{"mget", -2}, OP_GET, K_EACH}, {{"dbsize", 1}, OP_COUNT, K_ALL}, {{"save", 1}, OP_SAVE, K_ALL},
	{{"ping", -1}, 0, K_PING}, {{"echo", 2}, 0, K_PING}, {{"quit", 1}, 0, K_QUIT}};

/* Run the command av[0..ac) from argument c->argi on: 1 when all of it is done
 * or sent, 0 when it stalled (it goes on from c->argi later). */
static int dispatch(struct conn *c, tl_resp_arg *av, uint32_t ac) {
	int i = tl_resp_command_find(av, ac, cmds, sizeof cmds / sizeof *cmds, sizeof *cmds); /* again when resumed */
	const struct cmd *k = &cmds[i < 0 ? 0 : i];
	uint8_t b[24];
	if (c->argi >= ac) return 1;
	if (i < 0) return say(c, tl_resp_error_reply(i), (uint32_t)strlen(tl_resp_error_reply(i)), NULL, 0) ? (int)(c->argi = ac) : 0;
	switch (k->kind) {
	case K_KEY: if (!route(c, k->op, 0, &av[1], ac > 2 ? &av[2] : NULL)) return 0; break;
	case K_EACH: /* MGET: "*N", then each key's GET; DEL: each key's count, summed */
		if (!c->argi && k->op == OP_GET && !say(c, b, tl_resp_num(b, '*', ac - 1), NULL, 0)) return 0;
		for (c->argi += !c->argi; c->argi < ac; c->argi++)
			if (!route(c, k->op, k->op == OP_DEL ? R_SUM | (c->argi == ac - 1 ? R_EMIT : 0) : 0, &av[c->argi], NULL))
				return 0;
		break;
	case K_ALL: if (!gather(c, k->op)) return 0; break;
	case K_PING: /* PING, or ECHO (which redis-cli --pipe sends last) */
		if (ac == 1 ? !say(c, S("+PONG\r\n"), NULL, 0) : !say(c, b, tl_resp_num(b, '$', av[1].n), av[1].p, av[1].n)) return 0;
		break;
	default: c->bye = "+OK\r\n"; c->quit = 1; /* QUIT */
	}
	c->argi = ac;
	return 1;
}

/* Run the commands c has read (turnloop/resp.h), as far as they can go now. */
static void serve_cmds(struct conn *c) {
	uint32_t ac;
	int rc = 0;
	/* A gather in flight (DBSIZE, SAVE) holds the commands after it: one on
	 * a key of this shard would run before the gather's part here. */
	while (!tl_replies_kept(&c->q) && !c->g.busy && !c->quit && (rc = tl_resp_next(&c->rs, c->sh->av, &ac)) > 0) {
		/* Stalled, or an owner reads these bytes: done once that is over. */
		if (!dispatch(c, c->sh->av, ac) || tl_replies_kept(&c->q)) break;
		tl_resp_done(&c->rs);
		c->argi = 0;
		c->sh->ncmd++;
	}
	tl_resp_consume(&c->rs);
	if (rc < 0) c->bye = tl_resp_error_reply(rc), c->quit = 1; /* -EPROTO: ended inside a command: no one to tell */
}

/* ---- Connections (the shard's tl_server), and everything a shard is handed ---- */

/* Go on once what c waited for came (on_ready, a result): replies out, more commands, the end. */
static void after(tl_conn *b, void *arg) {
	struct conn *c = (struct conn *)b;
	if (b->closed) return; /* its slot waits for what is in flight (tl_conn_hold) */
	c->quit |= c->b.draining; /* SIGTERM: answer what came, then close */
	tl_replies_flush(&c->q);
	serve_cmds(c);
	if (tl_replies_flush(&c->q) && (c->quit || (c->b.eof && !tl_rbuf_buffered(&c->b.rd))))
		tl_conn_end(b, c->bye, c->bye ? (uint32_t)strlen(c->bye) : 0);
}

static void conn_open(tl_conn *b, void *arg) {
	struct conn *c = (struct conn *)b;
	memset(&c->sh, 0, offsetof(struct conn, rs) - offsetof(struct conn, sh));
	c->sh = arg;
	tl_resp_init(&c->rs, &b->rd, MAX_ARGS, VAL_MAX);
	tl_mesh_gather_init(&c->g, c->parts, MAX_SHARDS);
	tl_replies_init(&c->q, b, c->sh->s, &(tl_replies_config){.recs = c->rec, .nrecs = REC_N, .rec_size = sizeof *c->rec,
			.chains = c->chains, .nchains = MAX_SHARDS, .run = run, .out = say_sum, .out_max = 24, .arg = c});
}

static void conn_free(tl_conn *b, void *arg) { /* replies never written: back to their owners */
	tl_replies_fini(&((struct conn *)b)->q, ((struct shard *)arg)->s);
}

static void on_completion(tl_shard *s, const tl_completion *x) {
	struct shard *sh = tl_shard_data(s);
	struct conn *c;
	tl_op op;
	if (tl_server_completion(sh->srv, x) || tl_replies_completion(x)) return; /* a connection's reads, writes, close, remote replies */
	if (x->kind == TL_K_POOL) return save_end(sh, x->result); /* a SAVE's file: in place, or not */
	if (x->kind != TL_K_MESH) return;
	if (x->aux & TL_MESH_TASK) { /* a SAVE's walk ended: fsync and rename on the pool */
		int64_t rc = x->result < 0 ? x->result : tl_fout_finish(&sh->sv.f, tl_shard_loop(s), 0, &op);
		if (rc < 0) { tl_fout_abort(&sh->sv.f); save_end(sh, rc); }
	} else { /* a gather: DBSIZE's parts add up, SAVE's say how each shard's file went */
		char b[96];
		int64_t n = 0, err = 0;
		struct out o = {NULL, &(c = (struct conn *)(uintptr_t)tl_token_data(x->token))->grec->r, s};
		for (uint32_t t = 0; t < kv.nshards; t++) c->parts[t].result < 0 ? (err = c->parts[t].result) : (n += c->parts[t].result);
		if (c->grec->op == OP_SAVE) atomic_store(&kv.saving, 0);
		if (x->result < 0) ERR(&o, "-ERR shutting down\r\n");
		else if (err) reply(&o, b, (uint32_t)snprintf(b, sizeof b, "-ERR save failed: %s\r\n", tl_strerror((int)err)), NULL, 0);
		else c->grec->op == OP_SAVE ? ERR(&o, "+OK\r\n") : reply(&o, (uint8_t *)b, tl_resp_num((uint8_t *)b, ':', n), NULL, 0);
		tl_replies_made(&c->q, o.r); /* out it goes in its turn */
	}
}

static int on_pass(tl_shard *s, void *arg) { /* once per pass: a write per connection at most */
	struct shard *sh = tl_shard_data(s);
	tl_shard_counter_add(s, kv.st_cmds, sh->ncmd);
	tl_shard_counter_add(s, kv.st_remote, sh->nremote);
	sh->ncmd = sh->nremote = 0;
	return tl_server_pass(sh->srv);
}

static void on_drain(tl_shard *s, void *arg) { tl_server_drain(((struct shard *)tl_shard_data(s))->srv); }

static int on_launch(tl_shard *s, void *arg) { /* memory at launch, touched as it is used */
	struct shard *sh = &kv.sh[tl_shard_id(s)];
	tl_server_config sc = {.addr = kv.addr, .reuseport = 1, .backlog = 1024, .conns = kv.conns, /* a listener per shard */
			       .conn_size = sizeof(struct conn), .read_max = CMD_MAX, .write_cap = WBUF,
			       .on_open = conn_open, .on_ready = after, .on_free = conn_free, .arg = sh};
	sh->s = s;
	sh->id = tl_shard_id(s);
	for (sh->mask = 1; sh->mask < kv.keys - 1; sh->mask = sh->mask * 2 + 1) {}
	sh->b = calloc(sh->mask + 1, sizeof *sh->b);
	if (!sh->b || !(sh->sv.buf = malloc(CHUNK + 2 * REPLY_MAX))) return -ENOMEM;
	tl_shard_set_data(s, sh);
	return tl_server_start(&sh->srv, tl_shard_loop(s), &sc);
}

/* The command line: 0, or 2 (main prints one line, then exits 2). */
struct opts { uint32_t port, keys, conns; int local; const char *dir; };

static int options(int argc, char **argv, struct opts *o, tl_runtime_config *rc) {
	const tl_runtime_option opts[] = {{"--port", TL_OPTION_U32, &o->port, 1, 65535}, {"--keys", TL_OPTION_U32, &o->keys, 1, 1u << 30},
		{"--conns", TL_OPTION_U32, &o->conns, 1, 16384}, {"--save-dir", TL_OPTION_STR, &o->dir, 0, 0},
		{"--local", TL_OPTION_FLAG, &o->local, 0, 0}, {0}}; /* --local: every key local, each shard owns a key space */
	*o = (struct opts){.port = 6379, .keys = kv.keys, .conns = kv.conns, .dir = kv.dir};
	return tl_runtime_config_args(rc, argc, argv, opts) < 0 || rc->plan.shards > MAX_SHARDS ? 2 : 0;
}

int main(int argc, char **argv) {
	struct opts o;
	tl_runtime_config rc;
	tl_runtime *rt = NULL;
	int r;
	tl_runtime_config_init(&rc); /* then tlkv's defaults: */
	rc.mesh_spin_ns = 0;         /* no polling for replies: with clients on the shards' CPUs it took their time */
	rc.loop.nap_ns = 200000;     /* naps: about half the CPU a request at -P 1 (docs/PERFORMANCE.md) */
	if (options(argc, argv, &o, &rc) || tl_addr_parse(&kv.addr, "127.0.0.1", (uint16_t)o.port) < 0)
		return fprintf(stderr, "tlkv: %s; usage: tlkv [--port P] [--keys N] [--conns N] [--save-dir DIR] [--local] [--shards N] [--cpus LIST] [--mesh-inflight N] [--mesh-spin-us N] [--nap-us N]\n",
			       rc.plan.shards > MAX_SHARDS ? "--shards: 64 at most" : tl_error_detail()), 2;
	kv.local = o.local, kv.keys = o.keys, kv.conns = o.conns, kv.dir = o.dir;
	tl_server_size(&rc.loop, kv.conns);
	rc.grace_ns = 5000000000ull;
	rc.on_launch = on_launch;
	rc.on_completion = on_completion;
	rc.on_pass = on_pass;
	rc.on_drain = on_drain;
	if ((r = tl_runtime_new(&rt, &rc)) == 0) {
		kv.nshards = tl_runtime_shards(rt);
		kv.group = tl_runtime_sched_group(rt, "save", 250); /* a fifth of a busy shard */
		kv.st_cmds = tl_runtime_counter(rt, "cmds");
		kv.st_remote = tl_runtime_counter(rt, "remote");
		kv.sh = calloc(kv.nshards, sizeof *kv.sh);
		r = kv.nshards > MAX_SHARDS ? -E2BIG : !kv.sh ? -ENOMEM : kv.group < 0 ? kv.group : 0;
	}
	if (r == 0 && (r = tl_runtime_launch(rt)) == 0) {
		fprintf(stderr, "tlkv: listening on 127.0.0.1:%u, %u shard%s%s\n", o.port, kv.nshards,
			kv.nshards > 1 ? "s" : "", kv.local ? ", every key local" : "");
		r = tl_runtime_run(rt);
	}
	if (r < 0) fprintf(stderr, "tlkv: %s %s\n", tl_strerror(r), tl_error_detail());
	tl_runtime_destroy(rt); /* the threads are gone: free what the shards held */
	while (tl_pool_shutdown() == -EBUSY) usleep(1000); /* a SAVE's last job, cut short */
	for (uint32_t i = 0; kv.sh && i < kv.nshards; i++) {
		struct shard *sh = &kv.sh[i];
		sh->s = NULL; /* conn_free frees here: the shards are gone */
		tl_server_free(sh->srv);
		for (uint64_t j = 0; sh->b && j <= sh->mask; j++)
			for (struct item *it = sh->b[j], *n; it; it = n) n = it->next, free(it);
		tl_fout_abort(&sh->sv.f); /* a save the stop cut short */
		free(sh->b);
		free(sh->sv.buf);
	}
	free(kv.sh);
	return r < 0;
}
