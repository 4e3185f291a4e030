/* drivers/iocp/poll.c: the IOCP driver's readiness polls of sockets the loop does not own (TL_OP_POLL), by AFD's poll request on the loop's port. */
#include <errno.h>
#include <string.h>
#include "iocp_int.h"
#include "turnloop/poll.h"

/*
 * Winsock has no readiness call that completes on a port, but the
 * ancillary function driver beneath it (AFD, which every socket is a file
 * of) has one: IOCTL_AFD_POLL, issued with NtDeviceIoControlFile on any
 * handle of the AFD device, names sockets by their base handles and the
 * AFD_POLL_* events to wait for, and completes once one of them holds, as
 * any overlapped request does: a packet on the port the issuing handle is
 * on. libuv's uv_poll and the wepoll library are built on it. So a
 * foreign socket's poll is one such request, issued on a handle of the
 * AFD device that the loop opens at its first poll and keeps on its port,
 * with the op's own record (struct io_op: its OVERLAPPED as the request's
 * status block and context, its io_afd_poll as the request) made at
 * init: nothing allocated per poll, no thread, and the socket itself is
 * not touched (it need not be overlapped, nor on any port, nor this
 * loop's).
 *
 * AFD's poll is one-shot: it completes once. A one-shot op ends there. A
 * multishot op (level-triggered, driver.h) reports the readiness as a
 * nonterminal event when the turn has room and issues the request again
 * at once: while the socket stays ready it completes again at once, and
 * its packet is taken by the next turn's wait (a turn takes only the
 * packets already queued), so a ready socket is reported once a turn, as
 * on epoll.
 *
 * Cancellation is CancelIoEx on the AFD handle with the op's OVERLAPPED;
 * the request's own completion (STATUS_CANCELLED, or the events if they
 * came first) is the op's terminal. A socket closed under its poll
 * completes it with AFD_POLL_LOCAL_CLOSE: the op is not issued again and
 * reports nothing more until it is stopped (poll.h: closing the
 * descriptor before the stop is the caller's mistake), and then ends at
 * once, having nothing in the OS.
 */

/* AFD_POLL_* (afd.h of the driver kits; not in the SDK). */
#define AFD_RECEIVE 0x0001
#define AFD_RECEIVE_EXPEDITED 0x0002
#define AFD_SEND 0x0004
#define AFD_DISCONNECT 0x0008
#define AFD_ABORT 0x0010
#define AFD_LOCAL_CLOSE 0x0020
#define AFD_ACCEPT 0x0080
#define AFD_CONNECT_FAIL 0x0100

#define IOCTL_AFD_POLL 0x00012024
#define IO_SIO_BASE_HANDLE 0x48000022 /* _WSAIOR(IOC_WS2, 34) */
#define IO_STATUS_PENDING 0x00000103L
#define IO_STATUS_CANCELLED ((LONG)0xC0000120L)
#define IO_STATUS_INVALID_HANDLE ((LONG)0xC0000008L)

/* Only the fields of NT's UNICODE_STRING and OBJECT_ATTRIBUTES that
 * NtCreateFile reads. */
struct io_ustr {
	USHORT len, max;
	const WCHAR *buf;
};
struct io_attrs {
	ULONG len;
	HANDLE root;
	struct io_ustr *name;
	ULONG attributes;
	void *security, *qos;
};

static struct io_op *IO(struct tl_drv *d, const struct tl_opslot *o)
{
	return &d->ops[o->idx];
}

/* The AFD device, opened once per loop and put on its port: 0 or a
 * negative errno. Any name under \Device\Afd opens it; the part after the
 * device is AFD's to ignore. */
static int afd_open(struct tl_drv *d)
{
	static const WCHAR path[] = L"\\Device\\Afd\\turnloop";
	struct io_ustr name = {sizeof path - sizeof(WCHAR), sizeof path, path};
	struct io_attrs attrs = {sizeof attrs, NULL, &name, 0, NULL, NULL};
	struct { void *status; ULONG_PTR info; } iosb;
	HANDLE f = NULL;
	if (d->afd)
		return 0;
	if (!d->ntcreate || !d->ntioctl)
		return -ENOTSUP;
	if (d->ntcreate(&f, SYNCHRONIZE, &attrs, &iosb, NULL, 0, FILE_SHARE_READ | FILE_SHARE_WRITE,
			1 /* FILE_OPEN */, 0, NULL, 0) < 0)
		return -ENOTSUP; /* no AFD device to talk to */
	if (!CreateIoCompletionPort(f, d->port, 0, 0)) {
		int e = tl__os_win_error(GetLastError());
		CloseHandle(f);
		return e;
	}
	d->afd = f;
	return 0;
}

/* AFD's events for poll(2)'s: what poll(2) always reports (errors, a
 * reset, a failed connect) and the socket's closing are asked whatever
 * the host asked. */
static ULONG afd_events(uint16_t want)
{
	ULONG e = AFD_ABORT | AFD_CONNECT_FAIL | AFD_LOCAL_CLOSE | AFD_DISCONNECT;
	if (want & POLLIN)
		e |= AFD_RECEIVE | AFD_ACCEPT;
	if (want & POLLPRI)
		e |= AFD_RECEIVE_EXPEDITED;
	if (want & POLLOUT)
		e |= AFD_SEND;
	return e;
}

/* poll(2)'s revents for what AFD reported, as WSAPoll reports them: the
 * end of the stream is readable and a hang-up (POLLRDHUP too, for those
 * who asked), a reset is a hang-up and an error, a failed connect is
 * writable, a hang-up and an error. Only what was asked, and POLLERR and
 * POLLHUP. */
static uint32_t revents(uint16_t want, ULONG got)
{
	uint32_t r = 0;
	if (got & (AFD_RECEIVE | AFD_ACCEPT | AFD_DISCONNECT | AFD_ABORT))
		r |= POLLIN;
	if (got & AFD_RECEIVE_EXPEDITED)
		r |= POLLPRI;
	if (got & (AFD_SEND | AFD_CONNECT_FAIL))
		r |= POLLOUT;
	if (got & AFD_DISCONNECT)
		r |= POLLRDHUP | POLLHUP;
	if (got & (AFD_ABORT | AFD_CONNECT_FAIL))
		r |= POLLHUP | POLLERR;
	return r & ((uint32_t)want | POLLERR | POLLHUP);
}

static int status_errno(LONG st)
{
	return st == IO_STATUS_CANCELLED ? -ECANCELED : st == IO_STATUS_INVALID_HANDLE ? -EBADF : -EIO;
}

/* Issue o's request (its io_afd_poll filled): 0, or the negative errno
 * of a request AFD refused at once (then no completion comes). */
static int issue(struct tl_drv *d, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	struct io_afd_poll *p = &io->u.poll;
	p->timeout.QuadPart = INT64_MAX;
	p->count = 1;
	p->exclusive = FALSE;
	p->h[0].events = afd_events(o->poll.events);
	p->h[0].status = 0;
	memset(&io->ov, 0, sizeof io->ov);
	/* The status block is the OVERLAPPED's Internal and InternalHigh (as
	 * for Winsock's own requests), the context the OVERLAPPED itself: the
	 * port's packet names it, and CancelIoEx finds the request by it. */
	LONG st = d->ntioctl(d->afd, NULL, NULL, &io->ov, &io->ov.Internal, IOCTL_AFD_POLL, p, sizeof *p, p,
			     sizeof *p);
	if (st < 0)
		return status_errno(st);
	io->inflight = 1; /* pending, or done at once: a packet comes either way */
	return 0;
}

int tl__io_poll_submit(struct tl_drv *d, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	SOCKET s = (SOCKET)(intptr_t)o->poll.fd, base = INVALID_SOCKET;
	DWORD n = 0;
	int r = afd_open(d);
	if (r)
		return r;
	/* AFD knows the base provider's socket, not a layered one's. */
	if (WSAIoctl(s, IO_SIO_BASE_HANDLE, NULL, 0, &base, sizeof base, &n, NULL, NULL) != 0) {
		int e = WSAGetLastError();
		if (e == WSAENOTSOCK)
			return -ENOTSOCK;
		base = s;
	}
	io->u.poll.h[0].handle = (HANDLE)base;
	return issue(d, o);
}

int tl__io_poll_cancel(struct tl_drv *d, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	if (io->inflight) {
		/* Its own completion ends it (iocp_int.h). */
		io->cancelled = 1;
		CancelIoEx(d->afd, &io->ov);
		return 0;
	}
	/* Its socket was closed under it: nothing in the OS to wait for. */
	tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
	return 0;
}

void tl__io_poll_done(struct tl_drv *d, struct tl_opslot *o)
{
	struct io_op *io = IO(d, o);
	LONG st = (LONG)io->ov.Internal;
	io->inflight = 0;
	if (io->cancelled) {
		tl__drv_event(d->loop, o, -ECANCELED, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	if (st < 0) {
		tl__drv_event(d->loop, o, status_errno(st), TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	ULONG got = io->u.poll.count ? io->u.poll.h[0].events : 0;
	if (got & AFD_LOCAL_CLOSE)
		return; /* closed under it: silent until stopped (above) */
	uint32_t res = revents(o->poll.events, got);
	if (!o->poll.multi) {
		tl__drv_event(d->loop, o, res, TL_F_TERMINAL, TL_NO_LEASE);
		return;
	}
	/* Level-triggered: without room now, the request issued again
	 * completes again while the socket is ready, for a later turn. */
	if (res && tl__drv_room(d->loop))
		tl__drv_event(d->loop, o, res, 0, TL_NO_LEASE);
	int r = issue(d, o);
	if (r < 0)
		tl__drv_event(d->loop, o, r, TL_F_TERMINAL, TL_NO_LEASE);
}
