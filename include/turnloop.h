/* turnloop.h: the umbrella header; include this one. */
#ifndef TURNLOOP_H
#define TURNLOOP_H

/*
 * The rules of the public API. Every declaration in include/ keeps them;
 * where one cannot, it is listed here as an exception.
 *
 * 1. Names. Public names start with tl_ or TL_ (tl__ is the library's own
 *    and never public). A function is tl_<object>_<verb> or
 *    tl_<object>_<noun>, the object being what it acts on: loop, runtime,
 *    shard, plan, stats, pool, proc, tty, dns... The loop's calls on its
 *    handles and operations leave the object out (tl_read, tl_close,
 *    tl_cancel, tl_turn, tl_now, tl_alive).
 *
 * 2. "start" means one thing: begin an operation that delivers completions
 *    until it ends or is stopped (tl_stop): tl_accept_start,
 *    tl_read_start, tl_timer_start, tl_poll_start, tl_signal_start,
 *    tl_watch_start. Threads are launched, not started: tl_runtime_launch,
 *    tl_pool_launch, and the runtime's per-shard callback is on_launch.
 *
 * 3. Returns. A function returns 0 on success, or a value >= 0 that its
 *    declaration names (a count, a length, an id, a descriptor, a kind), or
 *    a negative errno on failure (turnloop/error.h). The exceptions, which
 *    cannot fail:
 *     - void: the config initialisers (tl_config_init, ..._config_init),
 *       what ends an object whatever state it is in (tl_loop_destroy,
 *       tl_runtime_destroy, tl_plan_free, tl_stats_close, tl_poster_put,
 *       tl_rbuf_fini, tl_server_free, tl_conn_end, tl_conn_close),
 *       tl_server_size (a config's sizes raised), a connection's
 *       references (tl_conn_hold, tl_conn_release) and tl_conn_ready,
 *       a ring of replies' tl_replies_fini, tl_replies_wait and
 *       tl_replies_made, a request reader's tl_resp_done and
 *       tl_resp_consume,
 *       the requests tl_runtime_stop, tl_runtime_drain and
 *       tl_server_drain, the snapshots of counters (tl_loop_stats_get,
 *       tl_pool_loop_stats_get, tl_driver_info_get) and the setters
 *       tl_shard_set_data and tl_pool_set_ptr;
 *     - accessors return what they access (rule 5): tl_now,
 *       tl_loop_driver, tl_loop_caps, tl_addr_len, tl_runtime_shards,
 *       tl_runtime_plan, tl_shard_loop, tl_shard_id, tl_shard_count,
 *       tl_shard_runtime, tl_shard_arg, tl_shard_data, tl_poster_get,
 *       tl_token, tl_token_data, tl_token_handler, tl_strerror,
 *       tl_error_detail, tl_rbuf_buffered, tl_rbuf_leases, tl_wbuf_room,
 *       tl_wbuf_pending, tl_server_listener, tl_replies_away,
 *       tl_replies_kept, and tl_resp_error_reply (a code's line, like
 *       tl_strerror);
 *     - memory, or NULL when there is none (malloc's way): tl_shard_alloc,
 *       tl_replies_add, tl_reply_buf;
 *     - predicates return 1 or 0: tl_alive, tl_handle_eq, tl_op_eq,
 *       tl_pool_cancelled, tl_watch_next, tl_runtime_arenas,
 *       tl_shard_should_yield, tl_server_completion, tl_server_pass,
 *       tl_replies_direct, tl_replies_owed, tl_replies_flush,
 *       tl_replies_completion;
 *     - tl_close_all and tl_close_listeners return how many handles they
 *       started closing (unsigned).
 *
 * 4. Errors: one channel. The code says what failed; tl_strerror(code)
 *    is its text. A call that can say more is marked "Detail" at its
 *    declaration and leaves one line for the calling thread, read with
 *    tl_error_detail() right after the call. No call takes an error
 *    buffer or keeps a reason string of its own. (A state is not an
 *    error: tl_driver_info says which driver runs and why, and
 *    tl_runtime_arenas why arenas are off; both are records, not the
 *    outcome of a call.)
 *
 * 5. Getters and setters. A value an object always has is
 *    tl_<object>_<noun>(obj), returning it (tl_shard_id, tl_shard_loop,
 *    tl_loop_caps). A snapshot copied into the caller's memory is
 *    tl_<object>_<noun>_get(obj, [which,] out), returning 0 or a negative
 *    errno (tl_shard_place_get, tl_stats_info_get, tl_stats_shard_get,
 *    tl_sockopt_get), or nothing where it cannot fail (rule 3:
 *    tl_loop_stats_get). A setter is tl_<object>_set_<noun>. The loop's
 *    queries of a handle that may fail follow rule 1 (tl_local_addr,
 *    tl_peer_addr, tl_handle_fd, tl_proc_pid, tl_tty_winsize).
 *
 * 6. Argument order: the object (loop, runtime, shard, reader, poster)
 *    first; then the handle or operation it acts on; then the inputs, a
 *    source before its destination (tl_splice, tl_sendfile); then the
 *    token and, where there is one, the payload, in that order
 *    (tl_post, tl_shard_post, tl_shard_broadcast, tl_shard_migrate); then
 *    the out-parameters. A constructor of an object that stands alone
 *    takes the place it fills first (tl_loop_new(&loop, cfg),
 *    tl_runtime_new, tl_plan_compute, tl_stats_open(&reader, pid),
 *    tl_addr_parse(&addr, ...)); a call that makes a handle on a loop
 *    takes the loop first and gives the handle back last, like any
 *    out-parameter (tl_tcp_listen, tl_dns_open, tl_stdio_open).
 *
 * 7. Ids. tl_handle and tl_op are opaque values: copy them, compare them
 *    with tl_handle_eq and tl_op_eq, and test for "none" against
 *    TL_HANDLE_NONE and TL_OP_NONE.
 *
 * 8. Pooled reads, one way: a read that should land in one of the loop's
 *    pooled buffers (a lease, released with tl_lease_release) says so in
 *    its name: tl_read_pooled (a stream, once), tl_udp_recv_pooled (a
 *    datagram, once), tl_read_start (a stream, until stopped: always
 *    pooled). tl_read and tl_udp_recv read into the caller's buffer.
 *
 * 9. Ownership and threads. Memory passed in stays the caller's; what a
 *    call keeps (an op's buffer, a config, a string) its declaration says,
 *    with how long. An object made through an out-parameter is the
 *    caller's until its destroy, free or close. A loop and everything
 *    taking it belong to the thread that made it; the calls any thread may
 *    make say so (posters, tl_runtime_stop, the pool's snapshots).
 *
 * 10. Every declaration says what it does, who owns what, and exactly what
 *    it returns.
 *
 * Deprecated names. Kept for one release (removed after 0.1), each still
 * works and draws a compiler warning naming its replacement:
 *   tl_runtime_start        -> tl_runtime_launch        (rule 2)
 *   tl_pool_start           -> tl_pool_launch           (rule 2)
 *   cfg.on_start            -> cfg.on_launch            (rule 2)
 *   tl_shard_start_fn       -> tl_shard_launch_fn       (rule 2)
 *   tl_runtime_strerror     -> tl_error_detail() after tl_runtime_launch
 *                              or tl_runtime_run        (rule 4)
 *   tl_runtime_stats_error  -> tl_runtime_stats_published and
 *                              tl_error_detail()        (rule 4)
 *   tl_plan_explain         -> tl_error_detail() after tl_plan_compute
 *                              or tl_runtime_new        (rule 4)
 *   tl_shard_place_of       -> tl_shard_place_get       (rule 5)
 *   tl_stats_read           -> tl_stats_shard_get       (rule 5)
 *   tl_udp_recv with buf NULL -> tl_udp_recv_pooled     (rule 8; not
 *                              flagged by the compiler)
 *   tl_udp_* from turnloop/loop.h -> turnloop/dgram.h (loop.h still
 *                              includes it; not flagged)
 *   #include <turnloop/shard.h> -> turnloop.h, or turnloop/plan.h,
 *                              runtime.h and stats.h (the header still
 *                              includes the three; not flagged)
 * Changed without an alias (same name, every caller in the tree moved):
 * tl_shard_migrate takes token before payload (rule 6); tl_stats_open and
 * tl_stats_open_path take no error buffer (rule 4).
 */

#include "turnloop/error.h"
#include "turnloop/loop.h"
#include "turnloop/dgram.h"
#include "turnloop/pool.h"
#include "turnloop/plan.h"
#include "turnloop/runtime.h"
#include "turnloop/stats.h"
#include "turnloop/sched.h"
#include "turnloop/poll.h"
#include "turnloop/signal.h"
#include "turnloop/ewait.h"
#include "turnloop/proc.h"
#include "turnloop/tty.h"
#include "turnloop/watch.h"
#include "turnloop/dns.h"
#include "turnloop/tls.h"
#include "turnloop/bufio.h"
#include "turnloop/server.h"
#include "turnloop/replies.h"
#include "turnloop/resp.h"

#endif
