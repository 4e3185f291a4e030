/* drivers/iocp/iocp_int.h: the IOCP driver's private structures, seen only by its own files. */
#ifndef TL_IOCP_INT_H
#define TL_IOCP_INT_H

#include <stdint.h>
#include "driver.h" /* os.h: winsock2.h, windows.h */
#include <mswsock.h>

/*
 * Windows' I/O completion ports. A socket joins the loop's port at its
 * first overlapped operation (tl__io_join), not when it is made: an
 * accepted connection that the program hands to another loop first
 * (tl_detach, the runtime's tl_shard_migrate) leaves without ever having
 * joined, since Windows takes a socket off a port only from 8.1 on
 * (FileReplaceCompletionInformation, which wine lacks); tl_adopt joins at
 * once, so that a socket already on another port is refused there. Each
 * operation the OS runs is one overlapped
 * call whose OVERLAPPED sits in the driver's own record for the op slot
 * (struct io_op: made at init for every slot, so nothing is allocated per
 * operation), and its completion, dequeued by the turn's one
 * GetQueuedCompletionStatusEx, names the record and so the op. The
 * notifier's wake-ups are packets on the same port (lib/shared/os.h), so
 * the turn waits on one object.
 *
 * Order. Each handle keeps two queues, as the epoll driver does: reads
 * and accepts, and connect, writes and shutdown. Only the head of each is
 * in the OS at a time (one WSARecv, one WSASend), so a write never
 * overtakes another and a read never holds more than one pooled buffer.
 * A multishot op (accepts, pooled reads) stays at its queue's head and is
 * posted again after each completion while it lives.
 *
 * Cancellation is asked with CancelIoEx; the op's terminal is its own
 * completion (ERROR_OPERATION_ABORTED, or its result if it finished
 * first). An op still queued behind the head is taken off at once.
 *
 * Pooled reads hold no buffer while they wait: what is posted is a
 * zero-byte WSARecv (libuv's way), whose completion says that bytes (or
 * the end) are there; then the read takes a lease, only while the stream
 * is under its caps and the pool lets it (tl__drv_lease_may), and a recv
 * on the non-blocking socket fills it, again while more is there and the
 * turn has room. So an idle stream holds no lease, as on epoll, and the
 * caps hold as the core counts them. Without a lease the stream waits on
 * the lease-wait list. Reads into the caller's buffer post that buffer.
 */

struct io_h {
	uint32_t rhead, rtail;  /* accepts, reads, datagram receives */
	uint32_t whead, wtail;  /* connect, writes, shutdown */
	uint8_t rbusy, wbusy;   /* the queue's head is in the OS */
	uint8_t connecting, lease_wait;
	uint8_t connected;      /* a datagram handle's tl_udp_connect */
	uint8_t joined;         /* the socket is on the loop's port */
};
_Static_assert(sizeof(struct io_h) <= sizeof(((struct tl_hslot *)0)->u.drv), "io_h fits");

#define IO_ADDR_LEN (sizeof(struct sockaddr_in6) + 16) /* AcceptEx: each address's room */

/* AFD's poll request (IOCTL_AFD_POLL, poll.c): the ancillary function
 * driver's own structures, which no SDK header declares; libuv and wepoll
 * use the same layout. One socket per request here. */
struct io_afd_handle {
	HANDLE handle; /* the socket's base handle (SIO_BASE_HANDLE) */
	ULONG events;  /* AFD_POLL_* asked; on completion, those that hold */
	LONG status;
};
struct io_afd_poll {
	LARGE_INTEGER timeout; /* INT64_MAX: none */
	ULONG count;           /* handles: 1 asked; on completion, 0 or 1 */
	ULONG exclusive;
	struct io_afd_handle h[1];
};

struct io_op {
	OVERLAPPED ov;
	uint32_t qnext;   /* its queue, TL_NIL at the tail */
	uint32_t lease;   /* a pooled read's buffer while it is posted */
	uint8_t inflight; /* posted, its completion not yet dequeued */
	uint8_t cancelled;
	uint8_t probe;    /* a pooled read's zero-byte WSARecv: bytes are there */
	SOCKET accepted;  /* an AcceptEx's new socket */
	union {
		uint8_t addrs[2 * IO_ADDR_LEN]; /* AcceptEx's two addresses */
		struct io_afd_poll poll;        /* a foreign socket's poll (poll.c) */
		struct {                        /* a datagram's WSARecvMsg or WSASendMsg */
			WSAMSG msg;
			WSABUF buf;
			uint64_t ctl[8]; /* its control data (packet info) */
		} dg;
	} u;
};

#define IO_KEY_WAKE 1 /* the notifier's packets (sockets' completions have key 0) */
#define IO_BATCH 256

struct tl_drv {
	tl_loop *loop;
	struct tl_hslot *hs;
	struct tl_opslot *os;
	HANDLE port; /* the notifier's: it outlives the driver */
	struct io_op *ops;
	size_t ops_len;
	uint32_t *lwait, nlwait;
	LPFN_ACCEPTEX acceptex;
	LPFN_CONNECTEX connectex;
	LPFN_GETACCEPTEXSOCKADDRS acceptaddrs;
	LPFN_WSARECVMSG recvmsg;
	/* ntdll's NtSetInformationFile: takes a socket off the port (detach). */
	LONG(WINAPI *setinfo)(HANDLE f, void *iosb, void *info, ULONG len, int cls);
	/* ntdll's NtCreateFile and NtDeviceIoControlFile, and the AFD device
	 * the foreign sockets' polls are issued on, opened at the first
	 * (poll.c): NULL until then. */
	LONG(WINAPI *ntcreate)(HANDLE *f, ACCESS_MASK access, void *attrs, void *iosb, LARGE_INTEGER *size,
			       ULONG attributes, ULONG share, ULONG disposition, ULONG options, void *ea,
			       ULONG ealen);
	LONG(WINAPI *ntioctl)(HANDLE f, HANDLE event, void *apc, void *apc_ctx, void *iosb, ULONG code,
			      void *in, ULONG inlen, void *out, ULONG outlen);
	HANDLE afd;
	OVERLAPPED_ENTRY ev[IO_BATCH];
};

static inline struct io_h *IH(struct tl_hslot *h)
{
	return (struct io_h *)h->u.drv;
}

static inline SOCKET io_sock(const struct tl_hslot *h)
{
	return (SOCKET)(intptr_t)h->fd; /* handles are 32-bit significant, sign-extended */
}

/* net.c: the operations */
int tl__io_join(struct tl_drv *d, struct tl_hslot *h);
int tl__io_submit(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__io_cancel(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__io_complete(struct tl_drv *d, OVERLAPPED *ov);
void tl__io_kick(struct tl_drv *d, struct tl_hslot *h);
int tl__io_last_error(void);
void tl__io_rpop(struct tl_drv *d, struct tl_hslot *h);

/* poll.c: readiness of foreign sockets (TL_OP_POLL) */
int tl__io_poll_submit(struct tl_drv *d, struct tl_opslot *o);
int tl__io_poll_cancel(struct tl_drv *d, struct tl_opslot *o);
void tl__io_poll_done(struct tl_drv *d, struct tl_opslot *o);

/* dgram.c: UDP sockets and their datagrams */
int tl__io_udp_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *sp);
int tl__io_udp_connect(struct tl_drv *d, struct tl_hslot *h, const tl_addr *peer);
void tl__io_udp_adopted(struct tl_hslot *h, int connected);
int tl__io_send(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
int tl__io_post_recv(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o);
void tl__io_send_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n);
void tl__io_recv_done(struct tl_drv *d, struct tl_hslot *h, struct tl_opslot *o, int err, DWORD n);

#endif
