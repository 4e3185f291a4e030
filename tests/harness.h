/* tests/harness.h: shared helpers of the contract suite (leak checks, skips, bounded turning, socket pairs). */
#ifndef TL_TESTS_HARNESS_H
#define TL_TESTS_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <CUnit/CUnit.h>
#include <turnloop/loop.h>

/*
 * Every test follows one shape:
 *
 *     int fds = h_begin();          // descriptor count + per-test watchdog
 *     tl_loop *loop = h_loop();     // defaults; TL_DRIVER picks the driver
 *     ...
 *     h_end(loop, fds);             // drain, tl_loop_close() == 0, fds back
 *
 * Every wait is bounded (H_WAIT_MS of wall time unless a test says otherwise),
 * and a watchdog (SIGALRM, or a thread on Windows; H_TEST_TIMEOUT_S or $TL_TEST_TIMEOUT seconds) ends
 * the program with a message naming the test if a turn ever hangs.
 */

/* The factor every wait bound and time limit below stretches by, for runs
 * under valgrind or sanitizers: $TL_TEST_SLOW (an integer), else 4 under
 * valgrind, else 1. */
int h_slow(void);

#define H_MS 1000000ull                  /* nanoseconds per millisecond */
#define H_WAIT_MS (2000 * h_slow())      /* default bound of every wait */
#define H_SLOW_MS(ms) ((ms) * h_slow())  /* a time limit of a load test */
#define H_TEST_TIMEOUT_S 120             /* watchdog per test (x TL_TEST_SLOW) */

/* ---- Assertions that print what they saw ---- */

/* Formats a negative errno as its name for messages ("" otherwise). */
#define h_errname check_errname

/* The test running, in every failure's line; then the assertions,
 * under this frame's names (tests/check.h). */
#define CHECK_CONTEXT h_test_name()
#include "check.h"
#define H_EQ CHECK_EQ
#define H_EQ_FATAL CHECK_EQ_FATAL
#define H_TRUE CHECK_TRUE
#define H_TRUE_FATAL CHECK_TRUE_FATAL

/* ---- Test frame: leak check, watchdog, skips ---- */

/* Open descriptors of the process (entries of /proc/self/fd; on Windows
 * its handles, tests/harness.c says how). */
int h_fd_count(void);
/* Start a test: arms the watchdog, returns the descriptor count. */
int h_begin(void);
/* End a test: turn until !tl_alive (bounded, releasing stray leases), assert
 * tl_loop_close() == 0, then that the descriptor count is back to fds0 and
 * that no SIGPIPE was raised. loop may be NULL (already destroyed). */
void h_end(tl_loop *loop, int fds0);
/* The first half of h_end() for a second loop: drain it, assert
 * tl_loop_close() == 0 (destroying it otherwise). */
void h_drain_close(tl_loop *loop);
/* A loop with tl_config_init() defaults (or cfg); fatal assertion on failure. */
tl_loop *h_loop(void);
tl_loop *h_loop_cfg(const tl_config *cfg);

/* Record the current test as skipped (printed as "SKIP suite/test: why"). */
void h_skip(const char *fmt, ...) __attribute__((format(CHECK_PRINTF_, 1, 2)));
/* 1 when the test runs under wine (its ntdll names its version), not on
 * Windows itself; always 0 off Windows. A test skips what wine 8 does
 * differently from Windows only where this says so (docs/WINDOWS.md). */
int h_under_wine(void);
/* On the IOCP driver under wine, where wine 8 behaves unlike Windows in
 * what the test checks (what: which behaviour, named in docs/WINDOWS.md):
 * a skip recorded and 1, for the test to end; elsewhere 0. */
int h_wine_differs(tl_loop *loop, const char *what);
/* Number of tests that called h_skip(). */
int h_skip_count(void);
/* 1 when the loop's driver has cap. Otherwise checks that the capability's
 * entry point refuses with -ENOTSUP, records a skip and returns 0. */
int h_need_cap(tl_loop *loop, uint32_t cap);
/* 1 when an AF_INET6 socket can be bound to ::1 (else records a skip, 0). */
int h_need_ipv6(void);
/* The name of the current test ("suite/test"). */
const char *h_test_name(void);
/* Called once by main() with the process-wide settings. */
void h_init(void);

/* A table of tests for h_main_table: the suite, the case's name, its function. */
typedef struct h_test {
	const char *suite, *name;
	CU_TestFunc fn;
} h_test;

/* The whole main of a suite run once per driver: h_init, SIGPIPE ignored,
 * a first loop (exit 77 when TL_DRIVER's driver is missing here), the cases
 * of tests (ended by a NULL fn) whose "suite/name" contains one of
 * argv[1..] (all without arguments; none matching is a failure), then
 * "<name> suite (<driver>): N run, N failed ..." and the exit status. */
int h_main_table(int argc, char **argv, const char *name, const h_test *tests);

/* ---- Time ---- */

uint64_t h_wall_ns(void);            /* CLOCK_MONOTONIC */
void h_sleep_ms(int ms);

/* ---- Completion logs and bounded turning ---- */

/* Every completion a loop returned, in order (grows as needed). */
typedef struct h_log {
	tl_completion *v;
	uint32_t n, cap;
} h_log;

/* A loop under test with its log. Two contexts can be linked (a loop per side
 * of a connection, say): turning one turns the other too, so that waits on
 * either side make progress. */
typedef struct h_ctx {
	tl_loop *loop;
	h_log log;
	struct h_ctx *peer;
	int turn_errors;   /* turns that returned a negative code */
} h_ctx;

void h_ctx_init(h_ctx *c, tl_loop *loop);
void h_ctx_link(h_ctx *a, h_ctx *b);
void h_ctx_fini(h_ctx *c);

/* One turn of c->loop with timeout_ns (and a zero-timeout turn of c->peer),
 * appending to the logs. Returns the count from c->loop or its error. */
int h_turn(h_ctx *c, int64_t timeout_ns);
/* Turn until pred(arg) is true or ms of wall time passed; 1 or 0. */
int h_until(h_ctx *c, int (*pred)(void *arg), void *arg, int ms);
/* Turn until the terminal completion of op is in c->log: its index, or -1
 * after H_WAIT_MS (and a recorded failure). */
int h_wait_op(h_ctx *c, tl_op op);
int h_wait_op_ms(h_ctx *c, tl_op op, int ms);
/* Turn until TL_K_CLOSED for h is in c->log: its index or -1 (failure). */
int h_wait_closed(h_ctx *c, tl_handle h);
/* Turn until c->log holds at least n completions: 1 or 0 (no failure). */
int h_wait_count(h_ctx *c, uint32_t n, int ms);
/* Turn for ms of the loop's clock (and at least 2 turns), bounded by wall. */
void h_idle(h_ctx *c, int ms);
/* tl_close(h, token) == 0 and wait for its Closed: index or -1. */
int h_close(h_ctx *c, tl_handle h, uint64_t token);

/* Log queries. */
int h_find_op(const h_log *l, tl_op op, uint32_t from);       /* first index or -1 */
int h_find_term(const h_log *l, tl_op op);                    /* terminal index or -1 */
int h_find_closed(const h_log *l, tl_handle h);               /* Closed index or -1 */
uint32_t h_count_op(const h_log *l, tl_op op, uint32_t from);
uint32_t h_count_term(const h_log *l, tl_op op);
uint32_t h_count_handle(const h_log *l, tl_handle h, uint32_t from);
uint32_t h_count_kind(const h_log *l, uint16_t kind, uint32_t from);
/* Release every lease of c->log[from..] not released yet (asserting 0). */
void h_release_leases(h_ctx *c, uint32_t from);

/* ---- Sockets ---- */

/* The loopback address of family (AF_INET: 127.0.0.1, AF_INET6: ::1). */
void h_loopback(tl_addr *a, int family, uint16_t port);
/* Listen on loopback port 0; *addr gets the bound address. 0 or the error. */
int h_listen(h_ctx *c, int family, const tl_listen_opts *o, tl_handle *h, tl_addr *addr);
/* A connected TCP pair: *srv accepted on sc->loop, *cli connected from
 * cc->loop (cc may be sc). The listener is closed before returning. 0, or -1
 * with failures recorded. */
int h_pair(h_ctx *sc, h_ctx *cc, int family, tl_handle *srv, tl_handle *cli);
/* Write buf[0..len) on h and wait for the terminal: its result. */
int64_t h_write_all(h_ctx *c, tl_handle h, const void *buf, uint32_t len);
/* Read with tl_read until len bytes, EOF or an error: bytes read (>= 0) or
 * the error. *eof (may be NULL) tells whether EOF was seen. */
int64_t h_read_exact(h_ctx *c, tl_handle h, void *buf, uint32_t len, int *eof);
/* Same addresses (family, port and IP)? */
int h_addr_eq(const tl_addr *a, const tl_addr *b);

/* Close a socket of the test's own (or one tl_detach gave back): close(2),
 * or Winsock's closesocket on Windows, where a socket is no descriptor. */
#ifdef _WIN32
#define h_sock_close(fd) closesocket((SOCKET)(intptr_t)(fd))
#else
#define h_sock_close(fd) close(fd)
#endif

#ifdef _WIN32
/* mkdtemp(3), which mingw-w64 lacks: the template's X's made unique, then
 * the folder made (a "/tmp/..." template is the current drive's tmp folder:
 * under wine, the Unix /tmp). */
char *h_mkdtemp(char *tmpl);
#define mkdtemp h_mkdtemp
#endif

/* The byte at offset i of the test streams (a pattern that shows order). */
static inline uint8_t h_pattern(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13 ^ (i >> 16) ^ i);
}

#endif
