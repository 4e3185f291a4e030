/* tests/noalloc.c: steady state allocates nothing (contract 1.2): a TCP echo measured through an interposed malloc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <turnloop/loop.h>
#include <turnloop/dgram.h>
#include <turnloop/signal.h>
#include <turnloop/watch.h>
#include <turnloop/bufio.h>
#include "tl_config.h"
#if TL_HAVE_DPDK
#include "dpdk.h"
#endif

/*
 * Exit status: 0 when the measured phase made no allocator call at all, 1 on
 * any allocator call or echo error, 77 (skip) in sanitizer builds (the
 * sanitizer owns malloc) or when the driver has no OS-level TCP.
 *
 * The measured phase: 10,000 echo round trips, a new connection every 100
 * (so 100 accepts, EOFs and closes), reads alternating between a provided
 * buffer and a pooled lease, a repeating 1 ms timer, a one-shot timer
 * started and closed every 10 round trips, a far timer reset every round
 * trip, and one post per round trip from the client thread. Each accepted
 * connection's peer address is read and an option set and read back
 * (socket control, contract 4.8), and every other one is closed abortively.
 * Deadlines (contract 4.9): every echo stream has an idle deadline
 * (re-armed by its traffic, moved lazily every period) and its pooled reads
 * a far read deadline; beside it the client holds a silent connection (a
 * new one every 100 round trips) whose reads end by a read deadline and by
 * the idle deadline, in turn, and are issued again: both must fire in the
 * measured phase. On drivers with TL_CAP_SPLICE, beside the echo: a relay,
 * every other round trip a message the client sends on one connection and
 * reads back on another, the loop splicing it across (a splice always
 * pending), and every tenth a small static file the loop sends with
 * tl_sendfile on request.
 *
 * Then, on drivers with UDP, a measured phase of datagrams: 4,000 echoed
 * through two multishot receives, eight sends queued per turn (udp_phase).
 *
 * Then, on drivers that pass descriptors (TL_CAP_DETACH), a second measured
 * phase: 2,000 descriptors sent with tl_send_fds and received with
 * tl_recv_fds over a Unix-domain socketpair adopted by the loop. Adopting
 * (tl_adopt) and detaching are setup, not steady state, so the pair is
 * adopted before the phase and detached after it.
 *
 * Then a measured phase of buffered streams (turnloop/bufio.h,
 * bufio_phase): a connection of the loop to itself, each side with a
 * reader and a writer on memory of the test's, 16 requests of up to 3,000
 * bytes a round (lines, so some span the 16 KiB leases) answered with
 * length-prefixed replies coalesced per pass, and every 50 rounds the four
 * objects ended and made again.
 *
 * The loop also holds a signal subscription (SIGUSR1) and a directory watch
 * (contract 5): every 100 round trips the client raises the signal and
 * creates and removes a file in the watched directory, and the server
 * takes the signal completion and the watch's batch (releasing its lease).
 */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NOALLOC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define NOALLOC_SANITIZED 1
#endif
#endif

#ifdef NOALLOC_SANITIZED

int main(void)
{
	printf("SKIP noalloc: sanitizer build (the sanitizer owns the allocator)\n");
	return 77;
}

#else

static atomic_int counting;
static atomic_ulong calls_alloc, calls_free;

/* ---- Allocator interposition ---- */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);

/* dlsym() may itself call malloc/calloc before the real ones are known:
 * serve those calls from a static buffer that is never freed. */
static _Alignas(64) unsigned char boot[16384];
static size_t boot_used;
static int resolving;

static void *boot_alloc(size_t n)
{
	n = (n + 63) & ~(size_t)63;
	if (boot_used + n > sizeof boot)
		abort();
	void *p = boot + boot_used;
	boot_used += n;
	return p;
}

static int in_boot(const void *p)
{
	return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + sizeof boot;
}

static void resolve(void)
{
	if (real_malloc || resolving)
		return;
	resolving = 1;
	real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
	real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
	real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
	real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
	real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
	real_valloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "valloc");
	real_pvalloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "pvalloc");
	resolving = 0;
	if (!real_malloc || !real_calloc || !real_realloc || !real_free)
		abort();
}

static inline void count_alloc(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&calls_alloc, 1, memory_order_relaxed);
}

static inline void count_free(void)
{
	if (atomic_load_explicit(&counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&calls_free, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
	if (!real_malloc) {
		if (resolving)
			return boot_alloc(n);
		resolve();
	}
	count_alloc();
	return real_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	if (!real_calloc) {
		if (resolving) {
			if (m && n > SIZE_MAX / m)
				return NULL;
			return boot_alloc(n * m); /* static storage: already zero */
		}
		resolve();
	}
	count_alloc();
	return real_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	if (!real_realloc)
		resolve();
	count_alloc();
	if (p && in_boot(p)) {
		void *q = real_malloc(n);
		if (q) {
			size_t avail = (size_t)(boot + sizeof boot - (unsigned char *)p);
			memcpy(q, p, n < avail ? n : avail);
		}
		return q;
	}
	return real_realloc(p, n);
}

void *reallocarray(void *p, size_t n, size_t m)
{
	if (m && n > SIZE_MAX / m) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, n * m);
}

void free(void *p)
{
	if (!p || in_boot(p))
		return;
	if (!real_free)
		resolve();
	count_free();
	real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (!real_posix_memalign)
		resolve();
	count_alloc();
	return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	if (!real_aligned_alloc)
		resolve();
	count_alloc();
	return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n)
{
	if (!real_memalign)
		resolve();
	count_alloc();
	return real_memalign(align, n);
}

void *valloc(size_t n)
{
	if (!real_valloc)
		resolve();
	count_alloc();
	return real_valloc(n);
}

void *pvalloc(size_t n)
{
	if (!real_pvalloc)
		resolve();
	count_alloc();
	return real_pvalloc(n);
}

/* ---- The echo scenario ---- */

enum {
	MSG = 512,
	WARM_ROUNDS = 1000,
	ROUNDS = 10000,
	RECONNECT_EVERY = 100,
	MAXCONN = 8,
};

enum { TOK_ACCEPT = 1, TOK_TICK, TOK_ONESHOT, TOK_FAR, TOK_POST, TOK_ACCEPT_SILENT, TOK_SIG,
       TOK_WATCH, TOK_CONN_BASE = 100 };

/* Deadlines: echo streams go idle only when the client thread stalls (and
 * then read again); a silent stream's provided reads end by their read
 * deadline, its pooled reads by the idle deadline. */
#define ECHO_IDLE_NS (20 * 1000000ull)
#define SILENT_IDLE_NS (2 * 1000000ull)
#define SILENT_READ_NS (1 * 1000000ull)

/* The relay and the file server (tokens below TOK_CONN_BASE). */
enum { TOK_RIN = 10, TOK_ROUT, TOK_FACC, TOK_SPLICE, TOK_FREQ, TOK_SENDFILE };
enum { RELAY_EVERY = 2, FILE_EVERY = 10, FILE_LEN = 20000 };

struct conn {
	int used;
	tl_handle h;
	int reads;          /* alternates provided / pooled */
	int closing;
	int abortive;       /* closed with tl_close_abort */
	uint32_t lease;     /* lease being echoed, if has_lease */
	int has_lease;
	int silent;         /* from the silent listener: nothing is ever sent */
	int writing;        /* an echo write is pending: it starts the next read */
	uint8_t buf[MSG];
};

static struct conn conns[MAXCONN];
static tl_addr listen_addr, silent_addr;
static tl_poster *poster;
static atomic_int client_done, client_failed;
static atomic_int round_no;
/* Errors seen by the server while counting (printed afterwards). */
static int server_errors;
static long long first_error;
static int first_error_where;

static void server_error(int where, long long code)
{
	if (server_errors++ == 0) {
		first_error = code;
		first_error_where = where;
	}
}

/* ---- Client thread: plain blocking sockets, no allocation after warm-up ---- */

static unsigned char out_buf[MSG], in_buf[MSG];
static char watch_dir[64], watch_file[80];

/* Every 100 round trips: a signal and a file event for the loop. */
static int poke(int i)
{
	if (i % 100 != 50)
		return 0;
	if (kill(getpid(), SIGUSR1) != 0)
		return -5;
	int fd = open(watch_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -6;
	close(fd);
	return unlink(watch_file) == 0 ? 0 : -7;
}
static int splicing;                    /* the loop has TL_CAP_SPLICE */
static tl_addr rin_addr, rout_addr, file_addr;
static unsigned char file_data[FILE_LEN]; /* the file's content */
static int client_rin = -1, client_rout = -1, client_file = -1;
static unsigned long relays_done, files_done;

static int client_connect(const tl_addr *to)
{
	int fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, &to->sa, tl_addr_len(to)) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static int send_all(int fd, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = recv(fd, (char *)buf + off, len - off, 0);
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

static unsigned char file_in[FILE_LEN];

/* The relay: out_buf goes in on one connection, comes back on the other. */
static int relay_trip(void)
{
	if (send_all(client_rin, out_buf, MSG) || recv_all(client_rout, in_buf, MSG))
		return -5;
	if (memcmp(in_buf, out_buf, MSG) != 0)
		return -6;
	relays_done++;
	return 0;
}

/* The file server: one request byte, the whole file back. */
static int file_trip(void)
{
	if (send_all(client_file, "F", 1) || recv_all(client_file, file_in, FILE_LEN))
		return -7;
	if (memcmp(file_in, file_data, FILE_LEN) != 0)
		return -8;
	files_done++;
	return 0;
}

static int round_trip(int fd, int i)
{
	for (int k = 0; k < MSG; k++)
		out_buf[k] = (unsigned char)(i * 31 + k * 7);
	size_t off = 0;
	while (off < MSG) {
		ssize_t n = send(fd, out_buf + off, MSG - off, MSG_NOSIGNAL);
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	off = 0;
	while (off < MSG) {
		ssize_t n = recv(fd, in_buf + off, MSG - off, 0);
		if (n <= 0)
			return -2;
		off += (size_t)n;
	}
	if (memcmp(in_buf, out_buf, MSG) != 0)
		return -3;
	/* One post per round trip, retried if the ring is momentarily full. */
	int rc;
	while ((rc = tl_post(poster, TOK_POST, (uint64_t)i)) == -ENOBUFS)
		sched_yield();
	if (rc != 0)
		return -4;
	if (splicing && i % RELAY_EVERY == 1 && (rc = relay_trip()) != 0)
		return rc;
	if (splicing && i % FILE_EVERY == 5 && (rc = file_trip()) != 0)
		return rc;
	return 0;
}

static int silent_fd = -1;

static int client_phase(int *fd, int first, int rounds)
{
	for (int i = first; i < first + rounds; i++) {
		if (i % RECONNECT_EVERY == 0) {
			if (*fd >= 0)
				close(*fd);
			*fd = client_connect(&listen_addr);
			if (*fd < 0)
				return *fd;
		}
		/* The silent connection lives through the phase: replaced with
		 * the echo one, it could close before a 2 ms idle deadline came
		 * (100 round trips take about that on a fast machine). */
		if (silent_fd < 0) {
			silent_fd = client_connect(&silent_addr);
			if (silent_fd < 0)
				return silent_fd;
		}
		int rc = round_trip(*fd, i);
		if (rc == 0)
			rc = poke(i);
		if (rc != 0)
			return rc;
		atomic_store(&round_no, i);
	}
	return 0;
}

static int client_rc;

static void *client_main(void *arg)
{
	(void)arg;
	int fd = -1;
	if (splicing) {
		/* In this order: the loop tells them apart by listener. */
		client_rin = client_connect(&rin_addr);
		client_rout = client_connect(&rout_addr);
		client_file = client_connect(&file_addr);
		if (client_rin < 0 || client_rout < 0 || client_file < 0) {
			client_rc = -9;
			atomic_store(&client_failed, 1);
			atomic_store(&client_done, 1);
			tl_poster_wake(poster);
			return NULL;
		}
	}
	client_rc = client_phase(&fd, 0, WARM_ROUNDS);
	if (client_rc == 0) {
		atomic_store(&counting, 1);
		client_rc = client_phase(&fd, WARM_ROUNDS, ROUNDS);
		atomic_store(&counting, 0);
	}
	if (fd >= 0)
		close(fd);
	if (silent_fd >= 0)
		close(silent_fd);
	if (client_rin >= 0) {
		close(client_rin);
		close(client_rout);
		close(client_file);
	}
	if (client_rc != 0)
		atomic_store(&client_failed, 1);
	atomic_store(&client_done, 1);
	tl_poster_wake(poster);
	return NULL;
}

/* ---- Server: the loop on the main thread ---- */

static tl_loop *loop;
static tl_handle listener, silent_listener, tick, oneshot, far_timer;
/* Deadlines that ended a silent stream's read in the measured phase. */
static uint64_t read_timeouts, idle_timeouts;
static int tearing_down; /* teardown closed the timers: completions after it touch none */
static int oneshot_live;
static uint64_t posts_seen, rounds_seen, accepts_seen, signals_seen, watch_events;
static tl_handle sig_h, watch_h;
static tl_handle rin_lis, rout_lis, file_lis, rin, rout, fconn;
static int file_fd = -1;
static unsigned char freq[1];
static uint64_t splices_seen, sendfiles_seen;

static void relay_splice(void)
{
	tl_op op;
	int rc = tl_splice(loop, rin, rout, MSG, TOK_SPLICE, &op);
	if (rc != 0)
		server_error(__LINE__, rc);
}

static void file_read(void)
{
	tl_op op;
	int rc = tl_read(loop, fconn, freq, 1, TOK_FREQ, &op);
	if (rc != 0)
		server_error(__LINE__, rc);
}

/* The client's end (it closes when done) or the teardown's cancel. */
static int ends_quietly(int64_t res)
{
	return res == 0 || res == -ECANCELED || res == -ECONNRESET || res == -EPIPE;
}

/* The relay's and the file server's completions. */
static void on_relay(const tl_completion *x)
{
	tl_op op;
	int rc;
	switch (x->token) {
	case TOK_RIN:
	case TOK_ROUT:
	case TOK_FACC:
		if (x->kind != TL_K_ACCEPT)
			break;
		if (x->result < 0) {
			if (x->result != -ECANCELED)
				server_error(__LINE__, x->result);
			break;
		}
		if (x->token == TOK_RIN)
			rin = x->u.accept.conn;
		else if (x->token == TOK_ROUT)
			rout = x->u.accept.conn;
		else {
			fconn = x->u.accept.conn;
			file_read();
		}
		if (x->token != TOK_FACC && rin.v && rout.v)
			relay_splice();
		break;
	case TOK_SPLICE:
		if (x->result > 0) {
			splices_seen++;
			if (!tearing_down)
				relay_splice();
		} else if (!ends_quietly(x->result)) {
			server_error(__LINE__, x->result);
		}
		break;
	case TOK_FREQ:
		if (x->kind != TL_K_READ)
			break;
		if (x->result == 1) {
			rc = tl_sendfile(loop, file_fd, 0, FILE_LEN, fconn, TOK_SENDFILE, &op);
			if (rc != 0)
				server_error(__LINE__, rc);
		} else if (!ends_quietly(x->result)) {
			server_error(__LINE__, x->result);
		}
		break;
	case TOK_SENDFILE:
		if (x->result == FILE_LEN) {
			sendfiles_seen++;
			if (!tearing_down)
				file_read();
		} else if (!ends_quietly(x->result)) {
			server_error(__LINE__, x->result);
		}
		break;
	default:
		break;
	}
}

static struct conn *conn_of(uint64_t token)
{
	if (token < TOK_CONN_BASE || token >= TOK_CONN_BASE + MAXCONN)
		return NULL;
	return &conns[token - TOK_CONN_BASE];
}

static void start_read(struct conn *c)
{
	tl_op op;
	uint64_t tok = TOK_CONN_BASE + (uint64_t)(c - conns);
	int pooled = c->reads++ & 1;
	int rc = pooled ? tl_read_pooled(loop, c->h, tok, &op)
			: tl_read(loop, c->h, c->buf, MSG, tok, &op);
	if (rc != 0) {
		server_error(__LINE__, rc);
		return;
	}
	if (c->silent && !pooled)
		rc = tl_read_deadline(loop, op, tl_now(loop) + SILENT_READ_NS);
	else if (!c->silent && pooled)
		rc = tl_read_deadline(loop, op, tl_now(loop) + 3600ull * 1000000000ull);
	if (rc != 0)
		server_error(__LINE__, rc);
}

static void close_conn(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	/* The client closed first: the reset of an abortive close reaches
	 * nobody, the release path runs all the same. */
	uint64_t tok = TOK_CONN_BASE + (uint64_t)(c - conns);
	int rc = c->abortive ? tl_close_abort(loop, c->h, tok) : tl_close(loop, c->h, tok);
	if (rc != 0)
		server_error(__LINE__, rc);
}

static void on_completion(const tl_completion *x)
{
	struct conn *c;
	tl_op op;
	int rc;
	if (x->token >= TOK_RIN && x->token <= TOK_SENDFILE && x->kind != TL_K_CLOSED) {
		on_relay(x);
		return;
	}
	switch (x->kind) {
	case TL_K_ACCEPT:
		if (x->result < 0) {
			if (x->result != -ECANCELED) /* the listener closed at teardown */
				server_error(__LINE__, x->result);
			break;
		}
		c = NULL;
		for (int i = 0; i < MAXCONN; i++)
			if (!conns[i].used) {
				c = &conns[i];
				break;
			}
		if (!c) {
			server_error(__LINE__, -ENOBUFS);
			tl_close(loop, x->u.accept.conn, 0);
			break;
		}
		c->used = 1;
		c->closing = 0;
		c->reads = 0;
		c->has_lease = 0;
		c->writing = 0;
		c->silent = x->token == TOK_ACCEPT_SILENT;
		c->h = x->u.accept.conn;
		c->abortive = (int)(++accepts_seen & 1);
		{
			tl_addr peer;
			int64_t v = 0;
			if ((rc = tl_peer_addr(loop, c->h, &peer)) != 0 ||
			    peer.sa.sa_family != AF_INET)
				server_error(__LINE__, rc);
			if ((rc = tl_sockopt_set(loop, c->h, TL_SO_KEEPALIVE, 1)) != 0 ||
			    (rc = tl_sockopt_get(loop, c->h, TL_SO_KEEPALIVE, &v)) != 0 || v != 1)
				server_error(__LINE__, rc);
		}
		rc = tl_idle_deadline(loop, c->h, c->silent ? SILENT_IDLE_NS : ECHO_IDLE_NS);
		if (rc != 0)
			server_error(__LINE__, rc);
		start_read(c);
		break;
	case TL_K_READ:
		c = conn_of(x->token);
		if (!c || !c->used) {
			server_error(__LINE__, -ENOENT);
			break;
		}
		if (x->result == -ETIMEDOUT) {
			/* A silent stream's read ended by a deadline (or an
			 * echo stream's, if the client stalled): read again,
			 * unless bytes it had taken are being echoed. */
			if (c->silent && atomic_load(&counting))
				*(c->reads & 1 ? &read_timeouts : &idle_timeouts) += 1;
			if (!c->writing && !c->closing)
				start_read(c);
			break;
		}
		if (x->result <= 0) {
			if (x->result < 0 && x->result != -ECANCELED && x->result != -ECONNRESET)
				server_error(__LINE__, x->result);
			close_conn(c);
			break;
		}
		if (c->silent) {
			server_error(__LINE__, -EPROTO);
			break;
		}
		c->writing = 1;
		if (x->flags & TL_F_LEASE) {
			c->lease = x->u.read.lease.id;
			c->has_lease = 1;
			rc = tl_write(loop, c->h, x->u.read.lease.data, (uint32_t)x->result, x->token, &op);
		} else {
			rc = tl_write(loop, c->h, c->buf, (uint32_t)x->result, x->token, &op);
		}
		if (rc != 0)
			server_error(__LINE__, rc);
		break;
	case TL_K_WRITE:
		c = conn_of(x->token);
		if (!c || !c->used) {
			server_error(__LINE__, -ENOENT);
			break;
		}
		if (c->has_lease) {
			rc = tl_lease_release(loop, c->lease);
			if (rc != 0)
				server_error(__LINE__, rc);
			c->has_lease = 0;
		}
		c->writing = 0;
		if (x->result < 0) {
			if (x->result != -ECANCELED && x->result != -EPIPE && x->result != -ECONNRESET)
				server_error(__LINE__, x->result);
			close_conn(c);
			break;
		}
		rounds_seen++;
		if (tearing_down)
			break;
		/* Timers: move the far one every round trip, replace the
		 * one-shot every 10. */
		rc = tl_timer_reset(loop, far_timer, tl_now(loop) + 3600ull * 1000000000ull);
		if (rc != 0)
			server_error(__LINE__, rc);
		if (rounds_seen % 10 == 0 && !oneshot_live) {
			rc = tl_timer_start(loop, tl_now(loop) + 1000000ull, 0, TOK_ONESHOT, &oneshot, &op);
			if (rc != 0)
				server_error(__LINE__, rc);
			else
				oneshot_live = 1;
		}
		if (!c->closing)
			start_read(c);
		break;
	case TL_K_TIMER:
		if (x->token == TOK_ONESHOT && (x->flags & TL_F_TERMINAL) && x->result == 0 &&
		    oneshot_live) {
			rc = tl_close(loop, oneshot, TOK_ONESHOT);
			if (rc != 0)
				server_error(__LINE__, rc);
		}
		break;
	case TL_K_POST:
		posts_seen++;
		break;
	case TL_K_SIGNAL:
		if (!(x->flags & TL_F_TERMINAL))
			signals_seen += x->aux;
		break;
	case TL_K_WATCH:
		if (x->flags & TL_F_LEASE) {
			watch_events += x->u.watch.events;
			if ((rc = tl_lease_release(loop, x->u.watch.lease.id)) != 0)
				server_error(__LINE__, rc);
		} else if (!(x->flags & TL_F_TERMINAL)) {
			server_error(__LINE__, x->result);
		}
		break;
	case TL_K_CLOSED:
		if (x->token == TOK_ONESHOT) {
			oneshot_live = 0;
		} else if ((c = conn_of(x->token)) != NULL) {
			if (c->has_lease) {
				tl_lease_release(loop, c->lease);
				c->has_lease = 0;
			}
			c->used = 0;
		}
		break;
	default:
		break;
	}
}

/* ---- Passing descriptors (TL_CAP_DETACH) ---- */

enum { FD_ROUNDS = 2000, FD_WARM = 100, TOK_FDS_SEND = 900, TOK_FDS_RECV };

/* Turn until the terminals of ops s and r: 0 with them in *cs and *cr, or -1. */
static int fd_wait(tl_op s, tl_op r, tl_completion *cs, tl_completion *cr)
{
	tl_completion c[16];
	int seen = 0;
	for (int k = 0; k < 2000 && seen != 3; k++) {
		int n = tl_turn(loop, 10 * 1000000ll, c, 16, NULL);
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			if (!(c[i].flags & TL_F_TERMINAL))
				continue;
			if (c[i].op.v == s.v) {
				*cs = c[i];
				seen |= 1;
			} else if (c[i].op.v == r.v) {
				*cr = c[i];
				seen |= 2;
			}
		}
	}
	return seen == 3 ? 0 : -1;
}

/* One descriptor from a to b and back to the pipe: 0 or a step < 0. */
static int fd_round(tl_handle a, tl_handle b, int pass_fd, int i)
{
	static int got[4];
	static char in[8];
	char out[8];
	tl_op s, r;
	tl_completion cs, cr;
	memcpy(out, &i, sizeof i);
	memcpy(out + 4, "fds!", 4);
	if (tl_recv_fds(loop, b, got, 4, in, sizeof in, TOK_FDS_RECV, &r) != 0)
		return -1;
	if (tl_send_fds(loop, a, &pass_fd, 1, out, sizeof out, TOK_FDS_SEND, &s) != 0)
		return -2;
	if (fd_wait(s, r, &cs, &cr) != 0 || cs.result != (int64_t)sizeof out)
		return -3;
	if (cr.result != (int64_t)sizeof out || cr.aux != 1 || memcmp(in, out, sizeof out) != 0)
		return -4;
	if (close(got[0]) != 0)
		return -5;
	return 0;
}

static int pass_fds_phase(unsigned long *allocs)
{
	int sv[2], pfd[2];
	tl_handle a, b;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
	    pipe2(pfd, O_CLOEXEC) != 0)
		return -10;
	if (tl_adopt(loop, sv[0], &a) != 0 || tl_adopt(loop, sv[1], &b) != 0)
		return -11;
	int rc = 0;
	for (int i = 0; i < FD_WARM && rc == 0; i++)
		rc = fd_round(a, b, pfd[1], i);
	unsigned long a0 = atomic_load(&calls_alloc) + atomic_load(&calls_free);
	atomic_store(&counting, 1);
	for (int i = 0; i < FD_ROUNDS && rc == 0; i++)
		rc = fd_round(a, b, pfd[1], i);
	atomic_store(&counting, 0);
	*allocs = atomic_load(&calls_alloc) + atomic_load(&calls_free) - a0;
	int fa = -1, fb = -1;
	if (rc == 0 && (tl_detach(loop, a, &fa) != 0 || tl_detach(loop, b, &fb) != 0))
		rc = -12;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	close(pfd[0]);
	close(pfd[1]);
	return rc < 0 ? rc : FD_ROUNDS;
}

/* ---- Datagrams (turnloop/dgram.h) ---- */

/* Two datagram handles: the client (b, on loop lb) sends UDP_BATCH
 * datagrams a round (queued in one turn: one sendmmsg on epoll), the
 * server (a, on loop la) receives them with a multishot receive and echoes
 * each from its lease, released when its send completes; the client's
 * multishot receive takes the echoes. la and lb are one loop, or (the DPDK
 * driver's hand-off between queue pairs) two loops turned in turn. */
enum { UDP_ROUNDS = 500, UDP_WARM = 50, UDP_BATCH = 8, UDP_LEN = 200 };
enum { TOK_UDP_RA = 950, TOK_UDP_RB, TOK_UDP_SEND, TOK_UDP_ECHO = 1u << 20 };

struct udp_tally {
	int sent, echoed, back;
};

/* One completion of the datagram phase: 0, or a negative step. */
static int udp_take(tl_loop *la, tl_loop *lb, tl_handle a, const tl_completion *x,
		    struct udp_tally *t)
{
	tl_op op;
	if (x->kind == TL_K_SEND && x->token == TOK_UDP_SEND) {
		if (x->result != UDP_LEN)
			return -3;
		t->sent++;
	} else if (x->kind == TL_K_SEND && x->token >= TOK_UDP_ECHO) {
		if (x->result != UDP_LEN)
			return -4;
		if (tl_lease_release(la, (uint32_t)(x->token - TOK_UDP_ECHO)) != 0)
			return -5;
		t->echoed++;
	} else if (x->kind == TL_K_RECV && (x->flags & TL_F_LEASE)) {
		if (x->token == TOK_UDP_RA) {
			tl_udp_msg m = {.buf = x->u.recv.lease.data, .len = (uint32_t)x->result,
					.to = &x->u.recv.from};
			if (tl_udp_sendmsg(la, a, &m, TOK_UDP_ECHO + x->u.recv.lease.id, &op) != 0)
				return -6;
		} else {
			if (x->result != UDP_LEN)
				return -7;
			if (tl_lease_release(lb, x->u.recv.lease.id) != 0)
				return -8;
			t->back++;
		}
	} else if (x->kind == TL_K_RECV && (x->flags & TL_F_TERMINAL)) {
		return -9;
	}
	return 0;
}

static int udp_round(tl_loop *la, tl_loop *lb, tl_handle a, tl_handle b, const tl_addr *aa, int i)
{
	static unsigned char out[UDP_BATCH][UDP_LEN];
	struct udp_tally t = {0, 0, 0};
	tl_op op;
	for (int k = 0; k < UDP_BATCH; k++) {
		memset(out[k], (unsigned char)(i + k), UDP_LEN);
		tl_udp_msg m = {.buf = out[k], .len = UDP_LEN, .to = aa};
		if (tl_udp_sendmsg(lb, b, &m, TOK_UDP_SEND, &op) != 0)
			return -1;
	}
	tl_completion c[32];
	for (int k = 0; k < 4000 && (t.sent < UDP_BATCH || t.echoed < UDP_BATCH || t.back < UDP_BATCH);
	     k++) {
		for (int side = 0; side < (la == lb ? 1 : 2); side++) {
			tl_loop *l = side ? lb : la;
			int n = tl_turn(l, la == lb ? 10 * 1000000ll : side ? 1000000ll : 0, c, 32, NULL);
			if (n < 0)
				return -2;
			for (int j = 0; j < n; j++) {
				int r = udp_take(la, lb, a, &c[j], &t);
				if (r < 0)
					return r;
			}
		}
	}
	return t.sent == UDP_BATCH && t.echoed == UDP_BATCH && t.back == UDP_BATCH ? 0 : -10;
}

/* The datagram phase over loopback of family (IPv4: 127.0.0.1, IPv6:
 * ::1), the server on la and the client on lb. */
static int udp_phase2(tl_loop *la, tl_loop *lb, int family, unsigned long *allocs)
{
	tl_addr lo, aa;
	if (tl_addr_parse(&lo, family == AF_INET6 ? "::1" : "127.0.0.1", 0) != 0)
		return -19;
	tl_handle a, b;
	tl_op ra, rb;
	if (tl_udp_bind(la, &lo, &a) != 0 || tl_udp_bind(lb, &lo, &b) != 0 ||
	    tl_local_addr(la, a, &aa) != 0)
		return -20;
	if (tl_udp_recv_start(la, a, TOK_UDP_RA, &ra) != 0 ||
	    tl_udp_recv_start(lb, b, TOK_UDP_RB, &rb) != 0)
		return -21;
	int rc = 0;
	for (int i = 0; i < UDP_WARM && rc == 0; i++)
		rc = udp_round(la, lb, a, b, &aa, i);
	unsigned long a0 = atomic_load(&calls_alloc) + atomic_load(&calls_free);
	atomic_store(&counting, 1);
	for (int i = 0; i < UDP_ROUNDS && rc == 0; i++)
		rc = udp_round(la, lb, a, b, &aa, i);
	atomic_store(&counting, 0);
	*allocs = atomic_load(&calls_alloc) + atomic_load(&calls_free) - a0;
	tl_close(la, a, 0);
	tl_close(lb, b, 0);
	/* Both closed (their receives' terminals taken) before another
	 * phase starts. */
	tl_completion c[32];
	for (int t = 0, closed = 0; t < 400 && closed < 2; t++) {
		for (int side = 0; side < (la == lb ? 1 : 2); side++) {
			tl_loop *l = side ? lb : la;
			int n = tl_turn(l, la == lb ? 10 * 1000000ll : 1000000ll, c, 32, NULL);
			for (int j = 0; j < n; j++) {
				if (c[j].kind == TL_K_CLOSED)
					closed++;
				else if (c[j].kind == TL_K_RECV && (c[j].flags & TL_F_LEASE))
					tl_lease_release(l, c[j].u.recv.lease.id);
			}
		}
	}
	return rc < 0 ? rc : UDP_ROUNDS * UDP_BATCH;
}

static int udp_phase(int family, unsigned long *allocs)
{
	return udp_phase2(loop, loop, family, allocs);
}

/* ---- Buffered streams (turnloop/bufio.h) ---- */

/* The client side sends BIO_BATCH lines a round through its writer (one
 * write per pass); the server reads them with a reader framed by "\n" and
 * answers each with its length, a 2-byte prefix and the digits, through
 * its writer; the client's reader takes the replies. Readers and writers
 * live in static memory and are made again every BIO_RENEW rounds. */
enum { BIO_ROUNDS = 300, BIO_WARM = 30, BIO_BATCH = 16, BIO_LINE = 3000, BIO_RENEW = 50 };
enum { TOK_BIO_SR = 960, TOK_BIO_CR, TOK_BIO_SW, TOK_BIO_CW, TOK_BIO_CONN };

static struct {
	tl_handle s, c;
	tl_op sr, cr;
	tl_rbuf srd, crd;
	tl_wbuf swr, cwr;
	tl_wbuf_list dirty;
	uint8_t srd_mem[4096], crd_mem[64], swr_mem[8192], cwr_mem[65536];
	uint8_t line[BIO_LINE];
	uint32_t want[BIO_BATCH];
	unsigned long assembled; /* requests that spanned leases */
} bio;

static int bio_make(void)
{
	if (tl_rbuf_init(&bio.srd, loop, bio.srd_mem, sizeof bio.srd_mem) != 0 ||
	    tl_rbuf_set_delim(&bio.srd, "\n", 1) != 0 ||
	    tl_rbuf_init(&bio.crd, loop, bio.crd_mem, sizeof bio.crd_mem) != 0 ||
	    tl_rbuf_set_prefix(&bio.crd, 2, 0) != 0 ||
	    tl_wbuf_init(&bio.swr, loop, bio.s, bio.swr_mem, sizeof bio.swr_mem, TOK_BIO_SW) != 0 ||
	    tl_wbuf_init(&bio.cwr, loop, bio.c, bio.cwr_mem, sizeof bio.cwr_mem, TOK_BIO_CW) != 0 ||
	    tl_wbuf_set_list(&bio.swr, &bio.dirty) != 0 || tl_wbuf_set_list(&bio.cwr, &bio.dirty) != 0)
		return -1;
	return 0;
}

static void bio_end(void)
{
	tl_rbuf_fini(&bio.srd);
	tl_rbuf_fini(&bio.crd);
	tl_wbuf_fini(&bio.swr);
	tl_wbuf_fini(&bio.cwr);
}

static int bio_round(int i)
{
	for (int k = 0; k < BIO_BATCH; k++) {
		uint32_t n = (uint32_t)(i * 131 + k * 977) % BIO_LINE;
		bio.want[k] = n;
		if (k % 2) {
			if (tl_wbuf_append(&bio.cwr, bio.line, n) != 0 ||
			    tl_wbuf_append(&bio.cwr, "\n", 1) != 0)
				return -1;
		} else {
			uint8_t *p;
			if (tl_wbuf_reserve(&bio.cwr, n + 1, &p) < (int)n + 1)
				return -2;
			memset(p, 'r', n);
			p[n] = '\n';
			if (tl_wbuf_commit(&bio.cwr, n + 1) != 0)
				return -3;
		}
	}
	if (tl_wbuf_flush_all(&bio.dirty) != 1)
		return -4;
	int got = 0;
	tl_completion c[64];
	for (int t = 0; t < 4000 && (got < BIO_BATCH || tl_wbuf_pending(&bio.swr) ||
				     tl_wbuf_pending(&bio.cwr)); t++) {
		int n = tl_turn(loop, 10 * 1000000ll, c, 64, NULL);
		if (n < 0)
			return -5;
		for (int j = 0; j < n; j++) {
			const tl_completion *x = &c[j];
			const uint8_t *m;
			uint32_t len;
			int rc;
			if (x->token == TOK_BIO_SW || x->token == TOK_BIO_CW) {
				if (tl_wbuf_on_write(x->token == TOK_BIO_SW ? &bio.swr : &bio.cwr, x) <= 0)
					return -6;
			} else if (x->token == TOK_BIO_SR) {
				if (tl_rbuf_feed(&bio.srd, x) != 0 || (x->flags & TL_F_TERMINAL))
					return -7;
				while ((rc = tl_rbuf_next(&bio.srd, &m, &len)) == 1) {
					bio.assembled += m >= bio.srd_mem && m < bio.srd_mem + sizeof bio.srd_mem;
					char d[16];
					int k = snprintf(d, sizeof d, "%u", len);
					uint8_t hdr[2] = {0, (uint8_t)k};
					if (tl_wbuf_append(&bio.swr, hdr, 2) != 0 ||
					    tl_wbuf_append(&bio.swr, d, (uint32_t)k) != 0)
						return -8;
				}
				if (rc < 0)
					return -9;
			} else if (x->token == TOK_BIO_CR) {
				if (tl_rbuf_feed(&bio.crd, x) != 0 || (x->flags & TL_F_TERMINAL))
					return -10;
				while ((rc = tl_rbuf_next(&bio.crd, &m, &len)) == 1) {
					char d[16];
					snprintf(d, sizeof d, "%u", bio.want[got]);
					if (got >= BIO_BATCH || len != strlen(d) || memcmp(m, d, len) != 0)
						return -11;
					got++;
				}
				if (rc < 0)
					return -12;
			}
		}
		tl_wbuf_flush_all(&bio.dirty);
	}
	if (got != BIO_BATCH)
		return -13;
	if ((i + 1) % BIO_RENEW == 0) {
		bio_end();
		if (bio_make() != 0)
			return -14;
	}
	return 0;
}

static int bio_phase(unsigned long *allocs)
{
	tl_addr a, at;
	tl_handle l;
	tl_op aop, cop;
	if (tl_addr_parse(&a, "127.0.0.1", 0) != 0 || tl_tcp_listen(loop, &a, NULL, &l) != 0 ||
	    tl_local_addr(loop, l, &at) != 0 || tl_accept(loop, l, TOK_BIO_CONN, &aop) != 0 ||
	    tl_tcp_connect(loop, &at, 0, TOK_BIO_CONN, &bio.c, &cop) != 0)
		return -20;
	tl_completion c[16];
	int done = 0;
	for (int t = 0; t < 1000 && done < 2; t++) {
		int n = tl_turn(loop, 10 * 1000000ll, c, 16, NULL);
		for (int j = 0; j < n; j++) {
			if (c[j].token != TOK_BIO_CONN || c[j].result < 0)
				continue;
			if (c[j].kind == TL_K_ACCEPT)
				bio.s = c[j].u.accept.conn;
			done++;
		}
	}
	tl_close(loop, l, 0);
	memset(bio.line, 'l', sizeof bio.line);
	if (done < 2 || bio_make() != 0 || tl_read_start(loop, bio.s, TOK_BIO_SR, &bio.sr) != 0 ||
	    tl_read_start(loop, bio.c, TOK_BIO_CR, &bio.cr) != 0)
		return -21;
	int rc = 0;
	for (int i = 0; i < BIO_WARM && rc == 0; i++)
		rc = bio_round(i);
	unsigned long a0 = atomic_load(&calls_alloc) + atomic_load(&calls_free);
	atomic_store(&counting, 1);
	for (int i = 0; i < BIO_ROUNDS && rc == 0; i++)
		rc = bio_round(i);
	atomic_store(&counting, 0);
	*allocs = atomic_load(&calls_alloc) + atomic_load(&calls_free) - a0;
	tl_close(loop, bio.s, 0);
	tl_close(loop, bio.c, 0);
	for (int t = 0; t < 200; t++) { /* their last reads' leases to the readers */
		int n = tl_turn(loop, 1000000ll, c, 16, NULL);
		if (n <= 0)
			break;
		for (int j = 0; j < n; j++) {
			if (c[j].token == TOK_BIO_SR)
				tl_rbuf_feed(&bio.srd, &c[j]);
			else if (c[j].token == TOK_BIO_CR)
				tl_rbuf_feed(&bio.crd, &c[j]);
			else if (c[j].token == TOK_BIO_SW)
				tl_wbuf_on_write(&bio.swr, &c[j]);
			else if (c[j].token == TOK_BIO_CW)
				tl_wbuf_on_write(&bio.cwr, &c[j]);
		}
	}
	bio_end();
	if (rc == 0 && !bio.assembled)
		rc = -22; /* no request spanned two leases: the phase missed the copying path */
	return rc < 0 ? rc : BIO_ROUNDS * BIO_BATCH;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "noalloc: timed out\n";
	ssize_t r = write(2, m, sizeof m - 1);
	(void)r;
	_exit(1);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	alarm(120);
	tl_config cfg;
	tl_config_init(&cfg);
	int rc = tl_loop_new(&loop, &cfg);
	if (rc == -ENOTSUP) {
		printf("SKIP noalloc: driver unavailable\n");
		return 77;
	}
	if (rc != 0) {
		fprintf(stderr, "tl_loop_new: %d\n", rc);
		return 1;
	}
	printf("noalloc: driver %s\n", tl_loop_driver(loop));
	if (!(tl_loop_caps(loop) & TL_CAP_TCP) && (tl_loop_caps(loop) & TL_CAP_UDP)) {
		/* A datagram driver (DPDK): the datagram phase alone, over
		 * IPv4 and then IPv6 (the port has ::1 among its addresses). */
		unsigned long udp_allocs = 0, udp6_allocs = 0;
		const char *drv = tl_loop_driver(loop); /* a static string */
		int udp_echoed = udp_phase(AF_INET, &udp_allocs);
		int udp6_echoed = udp_echoed > 0 ? udp_phase(AF_INET6, &udp6_allocs) : 0;
		/* With more than one queue pair, the hand-off between them:
		 * a second loop (the next pair) is the client; its datagrams
		 * come back on its own pair (net_ring brings a pair's frames
		 * back to it), whose loop has no handle on the server's port,
		 * and are handed to the first loop; the echoes come back on the
		 * first loop's pair and are handed to the second. */
		int hand_echoed = 0;
		unsigned long hand_allocs = 0;
		uint64_t handed[2] = {0, 0};
		tl_loop *l2 = NULL;
		if (udp6_echoed > 0 && tl_loop_new(&l2, &cfg) == 0) {
			hand_echoed = udp_phase2(loop, l2, AF_INET, &hand_allocs);
#if TL_HAVE_DPDK
			struct tl_dpdk_stats s1, s2;
			if (tl__dpdk_stats(loop, &s1) == 0 && tl__dpdk_stats(l2, &s2) == 0) {
				handed[0] = s1.handed_out;
				handed[1] = s2.handed_out;
			}
#endif
			for (int k = 0; k < 200 && tl_alive(l2); k++) {
				tl_completion o2[64];
				tl_turn(l2, 1000000ll, o2, 64, NULL);
			}
			tl_loop_close(l2);
		}
		if (l2 && (hand_echoed <= 0 || hand_allocs || handed[0] < (uint64_t)hand_echoed ||
			   handed[1] < (uint64_t)hand_echoed)) {
			fprintf(stderr, "noalloc: driver %s: hand-off phase %d, %lu allocator calls "
				"(want 0), handed out %llu and %llu\n", tl_loop_driver(loop), hand_echoed,
				hand_allocs, (unsigned long long)handed[0], (unsigned long long)handed[1]);
			return 1;
		}
		tl_completion out[64];
		for (int k = 0; k < 200 && tl_alive(loop); k++)
			tl_turn(loop, 10 * 1000000ll, out, 64, NULL);
		int close_rc = tl_loop_close(loop);
		if (udp_echoed <= 0 || udp_allocs || udp6_echoed <= 0 || udp6_allocs || close_rc) {
			fprintf(stderr, "noalloc: driver %s: datagram phase IPv4 %d, %lu allocator "
				"calls, IPv6 %d, %lu allocator calls (want 0), tl_loop_close %d\n",
				drv, udp_echoed, udp_allocs, udp6_echoed, udp6_allocs, close_rc);
			return 1;
		}
		printf("noalloc: driver %s has datagrams only: %d datagrams echoed over IPv4 and "
		       "%d over IPv6, 0 allocator calls\n", drv, udp_echoed, udp6_echoed);
		if (l2)
			printf("noalloc: %d datagrams echoed between two loops, each handed between "
			       "their queue pairs (%llu and %llu), 0 allocator calls\n", hand_echoed,
			       (unsigned long long)handed[0], (unsigned long long)handed[1]);
		else
			printf("noalloc: one queue pair: no hand-off phase\n");
		return 0;
	}
	if (!(tl_loop_caps(loop) & TL_CAP_TCP)) {
		printf("SKIP noalloc: driver %s lacks TCP\n", tl_loop_driver(loop));
		tl_loop_close(loop);
		return 77;
	}
	tl_addr a;
	tl_op op;
	if (tl_addr_parse(&a, "127.0.0.1", 0) != 0 || tl_tcp_listen(loop, &a, NULL, &listener) != 0 ||
	    tl_local_addr(loop, listener, &listen_addr) != 0 ||
	    tl_accept_start(loop, listener, TOK_ACCEPT, &op) != 0 ||
	    tl_tcp_listen(loop, &a, NULL, &silent_listener) != 0 ||
	    tl_local_addr(loop, silent_listener, &silent_addr) != 0 ||
	    tl_accept_start(loop, silent_listener, TOK_ACCEPT_SILENT, &op) != 0) {
		fprintf(stderr, "noalloc: listen failed\n");
		return 1;
	}
	uint64_t now = tl_now(loop);
	if (tl_timer_start(loop, now + 1000000ull, 1000000ull, TOK_TICK, &tick, &op) != 0 ||
	    tl_timer_start(loop, now + 3600ull * 1000000000ull, 0, TOK_FAR, &far_timer, &op) != 0) {
		fprintf(stderr, "noalloc: timers failed\n");
		return 1;
	}
	poster = tl_poster_get(loop);
	snprintf(watch_dir, sizeof watch_dir, "/tmp/tl-noalloc-XXXXXX");
	if (!mkdtemp(watch_dir)) {
		fprintf(stderr, "noalloc: mkdtemp failed\n");
		return 1;
	}
	snprintf(watch_file, sizeof watch_file, "%s/f", watch_dir);
	int have_watch = (tl_loop_caps(loop) & TL_CAP_POLL) != 0;
	if (tl_signal_start(loop, SIGUSR1, TOK_SIG, &sig_h, &op) != 0 ||
	    (have_watch &&
	     tl_watch_start(loop, watch_dir, IN_CREATE | IN_DELETE, TOK_WATCH, &watch_h, &op) != 0)) {
		fprintf(stderr, "noalloc: signal subscription or watch failed\n");
		return 1;
	}
	splicing = (tl_loop_caps(loop) & TL_CAP_SPLICE) != 0;
	if (splicing) {
		/* Setup, not measured: the relay's and file server's listeners,
		 * and the file (unlinked at once). */
		char path[] = "/tmp/tl-noalloc-XXXXXX";
		file_fd = mkstemp(path);
		if (file_fd < 0) {
			fprintf(stderr, "noalloc: mkstemp failed\n");
			return 1;
		}
		unlink(path);
		for (int k = 0; k < FILE_LEN; k++)
			file_data[k] = (unsigned char)(k * 13 + (k >> 8));
		if (pwrite(file_fd, file_data, FILE_LEN, 0) != FILE_LEN) {
			fprintf(stderr, "noalloc: cannot write the file\n");
			return 1;
		}
		tl_handle *lis[3] = {&rin_lis, &rout_lis, &file_lis};
		tl_addr *at[3] = {&rin_addr, &rout_addr, &file_addr};
		for (int k = 0; k < 3; k++)
			if (tl_tcp_listen(loop, &a, NULL, lis[k]) != 0 ||
			    tl_local_addr(loop, *lis[k], at[k]) != 0 ||
			    tl_accept(loop, *lis[k], (uint64_t)(TOK_RIN + k), &op) != 0) {
				fprintf(stderr, "noalloc: relay listen failed\n");
				return 1;
			}
	}
	/* A first probe: a driver without OS sockets (simulation) cannot serve a
	 * plain socket client. */
	int probe = client_connect(&listen_addr);
	if (probe < 0) {
		fprintf(stderr, "noalloc: a plain socket cannot connect to the loop's listener (%s)\n",
			strerror(-probe));
		if (strcmp(tl_loop_driver(loop), "sim") == 0) {
			printf("SKIP noalloc: the sim driver's sockets are not OS sockets\n");
			tl_loop_destroy(loop);
			tl_poster_put(poster);
			rmdir(watch_dir);
			return 77;
		}
		return 1;
	}
	close(probe);

	pthread_t t;
	if (pthread_create(&t, NULL, client_main, NULL) != 0) {
		fprintf(stderr, "noalloc: pthread_create failed\n");
		return 1;
	}
	tl_completion out[64];
	while (!atomic_load(&client_done)) {
		int n = tl_turn(loop, 10 * 1000000ll, out, 64, NULL);
		if (n < 0) {
			server_error(__LINE__, n);
			break;
		}
		for (int i = 0; i < n; i++)
			on_completion(&out[i]);
	}
	pthread_join(t, NULL);
	unsigned long allocs = atomic_load(&calls_alloc), frees = atomic_load(&calls_free);
	unsigned long fd_allocs = 0;
	int fd_rounds = 0;
	if (tl_loop_caps(loop) & TL_CAP_DETACH)
		fd_rounds = pass_fds_phase(&fd_allocs);
	unsigned long udp_allocs = 0;
	int udp_echoed = 0;
	if (tl_loop_caps(loop) & TL_CAP_UDP)
		udp_echoed = udp_phase(AF_INET, &udp_allocs);

	unsigned long bio_allocs = 0;
	int bio_msgs = bio_phase(&bio_allocs);

	/* Tear down (not measured). */
	tearing_down = 1;
	for (int i = 0; i < MAXCONN; i++)
		if (conns[i].used)
			close_conn(&conns[i]);
	tl_close(loop, listener, 0);
	tl_close(loop, silent_listener, 0);
	if (splicing) {
		tl_close(loop, rin_lis, 0);
		tl_close(loop, rout_lis, 0);
		tl_close(loop, file_lis, 0);
		if (rin.v)
			tl_close(loop, rin, 0);
		if (rout.v)
			tl_close(loop, rout, 0);
		if (fconn.v)
			tl_close(loop, fconn, 0);
	}
	tl_close(loop, tick, 0);
	tl_close(loop, far_timer, 0);
	tl_close(loop, sig_h, 0);
	if (have_watch)
		tl_close(loop, watch_h, 0);
	if (oneshot_live)
		tl_close(loop, oneshot, TOK_ONESHOT);
	for (int k = 0; k < 200 && tl_alive(loop); k++) {
		int n = tl_turn(loop, 10 * 1000000ll, out, 64, NULL);
		for (int i = 0; i < n; i++)
			on_completion(&out[i]);
	}
	int close_rc = tl_loop_close(loop);
	if (close_rc != 0)
		tl_loop_destroy(loop);
	tl_poster_put(poster);
	rmdir(watch_dir);
	if (file_fd >= 0)
		close(file_fd);

	printf("noalloc: %d round trips measured (last %d), %llu echoed by the server, %llu posts, "
	       "%llu read and %llu idle deadlines fired, %llu signals, %llu watch events, "
	       "%lu allocation calls, %lu frees during the measured phase\n",
	       ROUNDS, atomic_load(&round_no), (unsigned long long)rounds_seen,
	       (unsigned long long)posts_seen, (unsigned long long)read_timeouts,
	       (unsigned long long)idle_timeouts, (unsigned long long)signals_seen,
	       (unsigned long long)watch_events, allocs, frees);
	if (splicing)
		printf("noalloc: %lu relays through %llu splices, %lu files by sendfile (%llu)\n",
		       relays_done, (unsigned long long)splices_seen, files_done,
		       (unsigned long long)sendfiles_seen);
	int fail = 0;
	/* The mix must have happened (the warm-up raised some too). */
	if (signals_seen < (ROUNDS + WARM_ROUNDS) / 100 || (have_watch && !watch_events)) {
		fprintf(stderr, "noalloc: the loop saw %llu signals and %llu watch events\n",
			(unsigned long long)signals_seen, (unsigned long long)watch_events);
		fail = 1;
	}
	if (fd_rounds < 0) {
		fprintf(stderr, "noalloc: the descriptor phase failed at step %d\n", -fd_rounds);
		fail = 1;
	} else if (fd_rounds) {
		printf("noalloc: %d descriptors passed, %lu allocator calls during that phase\n",
		       fd_rounds, fd_allocs);
		if (fd_allocs) {
			fprintf(stderr, "noalloc: passing descriptors made %lu allocator calls (want 0)\n",
				fd_allocs);
			fail = 1;
		}
	}
	if (udp_echoed < 0) {
		fprintf(stderr, "noalloc: the datagram phase failed at step %d\n", -udp_echoed);
		fail = 1;
	} else if (udp_echoed) {
		printf("noalloc: %d datagrams echoed, %lu allocator calls during that phase\n",
		       udp_echoed, udp_allocs);
		if (udp_allocs) {
			fprintf(stderr, "noalloc: datagrams made %lu allocator calls (want 0)\n",
				udp_allocs);
			fail = 1;
		}
	}
	if (bio_msgs < 0) {
		fprintf(stderr, "noalloc: the buffered-stream phase failed at step %d\n", -bio_msgs);
		fail = 1;
	} else {
		printf("noalloc: %d framed requests answered through bufio (%lu assembled across "
		       "leases), %lu allocator calls during that phase\n", bio_msgs, bio.assembled,
		       bio_allocs);
		if (bio_allocs) {
			fprintf(stderr, "noalloc: buffered streams made %lu allocator calls (want 0)\n",
				bio_allocs);
			fail = 1;
		}
	}
	if (atomic_load(&client_failed)) {
		fprintf(stderr, "noalloc: the echo client failed (%d)\n", client_rc);
		fail = 1;
	}
	if (splicing && (relays_done < ROUNDS / RELAY_EVERY || files_done < ROUNDS / FILE_EVERY)) {
		fprintf(stderr, "noalloc: %lu relays and %lu files, want at least %d and %d\n",
			relays_done, files_done, ROUNDS / RELAY_EVERY, ROUNDS / FILE_EVERY);
		fail = 1;
	}
	if (server_errors) {
		fprintf(stderr, "noalloc: %d server errors, first %lld at line %d\n", server_errors,
			first_error, first_error_where);
		fail = 1;
	}
	if (allocs != 0 || frees != 0) {
		fprintf(stderr, "noalloc: steady state made %lu allocation and %lu free calls (want 0)\n",
			allocs, frees);
		fail = 1;
	}
	if (close_rc != 0) {
		fprintf(stderr, "noalloc: tl_loop_close: %d\n", close_rc);
		fail = 1;
	}
	if (!read_timeouts || !idle_timeouts) {
		fprintf(stderr, "noalloc: a kind of deadline never fired in the measured phase\n");
		fail = 1;
	}
	return fail;
}

#endif /* !NOALLOC_SANITIZED */
