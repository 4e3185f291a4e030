/* drivers/epoll/epoll_int.h: the epoll driver's private structures, seen only by its own files. */
#ifndef TL_EPOLL_INT_H
#define TL_EPOLL_INT_H

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "driver.h"
#include "sock.h"
#include "splice_io.h"

/*
 * Every socket is registered once, edge-triggered for input and output, so a
 * connection costs no epoll_ctl per operation. Each handle remembers whether
 * it is known readable/writable; an edge sets the flag, EAGAIN or a short
 * read/write clears it (a short stream read means the socket was drained at
 * that instant, and any later data raises a new edge: this saves the extra
 * read that would only return EAGAIN). The exception is the peer's end: once
 * an edge reported EPOLLRDHUP, EPOLLHUP or EPOLLERR, no edge will follow the
 * data already queued, so a short read no longer means drained and reads go
 * on until they return EOF or the error (contract 4.7). Operations queue per direction in
 * submission order. Writes are tried at submission when nothing is queued
 * ahead of them; their completion is queued like any other.
 *
 * The ready ring holds handles with work that needs no new edge: an op
 * submitted to a handle already readable, a multishot that ran out of
 * per-turn room, a read that waited for a pooled buffer. The event's
 * data carries the handle's slot and generation, so that an event for a
 * descriptor closed earlier in the same batch is recognised and dropped.
 *
 * TL_OP_POLL (a descriptor the loop does not own) registers a duplicate of
 * it, level-triggered (one-shot: EPOLLONESHOT), with the op's slot and
 * generation as its data: a registration per op, so two polls of one
 * descriptor (a terminal's reader and writer) never collide, and the
 * duplicate is removed from the set and closed when the op ends, whatever
 * the owner did with the original meanwhile (epoll keys registrations by
 * open file, so closing a descriptor does not remove it while a duplicate
 * lives: the driver always deletes before it closes).
 */

/*
 * The stream calls of the hot path, made through syscall(2). In a process
 * with more than one thread (a runtime's shards, the blocking pool, a
 * program's signal thread) glibc makes read(2), send(2) and sendmsg(2)
 * cancellation points: it switches the thread's cancellation state on
 * before the call and off after it, about 30 instructions each way, some
 * 120 of a proxied request's (four calls). turnloop never cancels a thread
 * (a loop ends when it is told to, never by pthread_cancel), so the
 * driver goes around that; syscall(2) returns -1 and sets errno as the
 * wrappers do.
 *
 * A stream read is recvfrom(2), not read(2): every stream handle of the
 * driver is a socket (terminals and pipes go through lib/tty.c), and
 * read(2) on a socket first passes the file layer (its position lock
 * check, the access-notification hook, the I/O accounting), about 0.15 us
 * a call more on a loopback TCP ping-pong (docs/PERFORMANCE.md, issue 31).
 */
static inline ssize_t ep_read(int fd, void *buf, size_t len)
{
	return syscall(SYS_recvfrom, fd, buf, len, 0, NULL, NULL);
}

static inline ssize_t ep_send(int fd, const void *buf, size_t len, int flags)
{
	return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

static inline ssize_t ep_sendmsg(int fd, const struct msghdr *mh, int flags)
{
	return syscall(SYS_sendmsg, fd, mh, flags);
}

struct ep_h {
	uint32_t rhead, rtail; /* reads, accepts, receives */
	uint32_t whead, wtail; /* connect, writes, shutdown, sends */
	uint8_t readable, writable, registered, queued, lease_wait, connecting, emfile;
	uint8_t peer_end; /* the peer's FIN or reset arrived: read until EOF/error */
	uint8_t fdpass;   /* a Unix stream that receives descriptors: see run_recv_fds */
	uint32_t spl;     /* a splice waiting for this stream (its source) to be
			   * readable or unpaused, TL_NIL: none */
};
_Static_assert(sizeof(struct ep_h) <= sizeof(((struct tl_hslot *)0)->u.drv), "ep_h fits");

struct ep_o {
	uint32_t qnext;
	int dfd; /* TL_OP_POLL: the registered duplicate, -1 once removed */
};

#define EV_WAKE UINT64_MAX
#define EV_TIMER (UINT64_MAX - 1)
#define EV_POLL (1ull << 62) /* | op generation << 32 | op slot */
#define MAX_EVENTS 1024

/* Listeners parked on EMFILE/ENFILE go again when the loop releases a
 * descriptor, or after EMFILE_RETRY_NS whatever freed one (another loop, a
 * raised limit): a slow timed retry, never a busy loop. */
#define EMFILE_RETRY_NS (100 * 1000 * 1000)

struct tl_drv {
	tl_loop *loop;
	struct tl_hslot *hs;  /* the loop's tables, which never move (driver.h): */
	struct tl_opslot *os; /* the hot paths index them without a call */
	int epfd;
	tl__os_notifier *wake; /* the loop's notifier */
	int tfd;           /* embedded loops: a timerfd for the next deadline */
	uint64_t tfd_at;
	uint32_t *ready, rcap, rhead, rlen; /* ring of handle slots */
	uint32_t *lwait, nlwait;           /* handles waiting for a lease */
	uint32_t *emfile, nemfile;         /* listeners waiting for a free fd */
	uint64_t emfile_retry_at;          /* ... and when to try them anyway */
	uint32_t maxev;
	uint8_t waited;     /* the last poll made an OS wait (see ep_poll) */
	uint8_t no_pwait2;  /* epoll_pwait2 is missing or refused: epoll_wait */
	struct epoll_event ev[MAX_EVENTS];
};


static inline struct ep_h *EH(struct tl_hslot *h) { return (struct ep_h *)h->u.drv; }
static inline struct ep_o *EO(struct tl_opslot *o) { return (struct ep_o *)o->drv; }
static inline struct tl_hslot *ep_handle(struct tl_drv *d, uint32_t idx) { return &d->hs[idx]; }
static inline struct tl_opslot *ep_op(struct tl_drv *d, uint32_t idx) { return &d->os[idx]; }

static inline int is_rside(const struct tl_opslot *o)
{
	return o->code == TL_OP_ACCEPT || o->code == TL_OP_READ || o->code == TL_OP_RECV ||
	       o->code == TL_OP_RECV_FDS;
}

/* Shared between the driver's files (each defined in one of them). */
uint64_t tl__ep_now(struct tl_drv *d);
void tl__ep_mark_ready(struct tl_drv *d, struct tl_hslot *h);
int tl__ep_do_register(struct tl_drv *d, struct tl_hslot *h);
void tl__ep_q_push(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o);
void tl__ep_q_pop(tl_loop *l, uint32_t *head, uint32_t *tail);
int tl__ep_q_remove(tl_loop *l, uint32_t *head, uint32_t *tail, struct tl_opslot *o);
struct tl_hslot *tl__ep_splice_waiter(struct tl_drv *d, struct tl_hslot *h);
int tl__ep_splice_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ep_run_wop(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int64_t tl__ep_try_write(struct tl_drv *d, struct tl_hslot *h, const void *buf, uint32_t len);
void tl__ep_run_handle(struct tl_drv *d, struct tl_hslot *h);
/* A pooled buffer for a read or receive of h, or TL_NO_LEASE with h parked
 * until one comes back (ops.c). */
uint32_t tl__ep_take_lease(struct tl_drv *d, struct tl_hslot *h, uint8_t **buf, uint32_t *len);
/* Datagrams (dgram.c): run h's receive o, or the sends at the head of h's
 * write queue from o on; 1: o finished, 0: it waits. */
int tl__ep_run_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ep_run_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ep_start_connect(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__ep_poll_submit(struct tl_drv *d, struct tl_opslot *o);
int tl__ep_poll_cancel(struct tl_drv *d, struct tl_opslot *o);
void tl__ep_poll_event(struct tl_drv *d, uint64_t tag, uint32_t ev);

#endif
