/* drivers/iocp/driver.c: the IOCP driver's instance, sockets and turn: set-up, handles, and one GetQueuedCompletionStatusEx per poll. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "iocp_int.h"

static void io_free(struct tl_drv *d)
{
	if (!d)
		return;
	if (d->afd)
		CloseHandle(d->afd);
	if (d->ops)
		tl__os_unmap(d->ops, d->ops_len);
	free(d->lwait);
	free(d);
}

static int wsa_fn(SOCKET s, GUID g, void *fn, size_t len)
{
	DWORD got = 0;
	return WSAIoctl(s, SIO_GET_EXTENSION_FUNCTION_POINTER, &g, sizeof g, fn, (DWORD)len, &got, NULL,
			NULL);
}

/* AcceptEx, ConnectEx, GetAcceptExSockaddrs and WSARecvMsg are reached
 * through a socket: 0, or the error. */
static int load_fns(struct tl_drv *d)
{
	GUID ga = WSAID_ACCEPTEX, gc = WSAID_CONNECTEX, gs = WSAID_GETACCEPTEXSOCKADDRS, gr = WSAID_WSARECVMSG;
	SOCKET s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
	if (s == INVALID_SOCKET)
		return tl__os_win_error((unsigned long)WSAGetLastError());
	int r = wsa_fn(s, ga, &d->acceptex, sizeof d->acceptex) ||
		wsa_fn(s, gc, &d->connectex, sizeof d->connectex) ||
		wsa_fn(s, gs, &d->acceptaddrs, sizeof d->acceptaddrs) ||
		wsa_fn(s, gr, &d->recvmsg, sizeof d->recvmsg);
	int e = r ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
	closesocket(s);
	return e;
}

static int io_init(tl_loop *loop, const tl_config *cfg, tl__os_notifier *wake, struct tl_drv **out)
{
	WSADATA wd;
	int r = -ENOMEM;
	if (WSAStartup(MAKEWORD(2, 2), &wd) != 0)
		return -ENOTSUP;
	struct tl_drv *d = calloc(1, sizeof *d);
	if (!d)
		goto fail;
	d->loop = loop;
	d->hs = tl__drv_handle(loop, 0);
	d->os = tl__drv_op(loop, 0);
	d->ops_len = (size_t)cfg->max_ops * sizeof *d->ops;
	d->ops = tl__os_map(d->ops_len); /* backed as op slots are used */
	d->lwait = calloc(cfg->max_handles ? cfg->max_handles : 1, sizeof *d->lwait);
	if (!d->ops || !d->lwait)
		goto fail;
	/* The notifier's port: its wake-ups and our sockets' completions
	 * arrive on the one object the turn waits on. */
	d->port = tl__os_notifier_port(wake, IO_KEY_WAKE);
	if (!d->port)
		goto fail;
	if ((r = load_fns(d)) < 0)
		goto fail;
	HMODULE nt = GetModuleHandleA("ntdll.dll");
	if (nt) {
		d->setinfo = (LONG(WINAPI *)(HANDLE, void *, void *, ULONG, int))(void (*)(void))GetProcAddress(
			nt, "NtSetInformationFile");
		/* Foreign sockets' polls (poll.c). */
		d->ntcreate = (LONG(WINAPI *)(HANDLE *, ACCESS_MASK, void *, void *, LARGE_INTEGER *, ULONG, ULONG,
					      ULONG, ULONG, void *, ULONG))(void (*)(void))GetProcAddress(nt, "NtCreateFile");
		d->ntioctl = (LONG(WINAPI *)(HANDLE, HANDLE, void *, void *, void *, ULONG, void *, ULONG, void *,
					     ULONG))(void (*)(void))GetProcAddress(nt, "NtDeviceIoControlFile");
	}
	*out = d;
	return 0;
fail:
	io_free(d);
	WSACleanup();
	return r;
}

static void io_destroy(struct tl_drv *d)
{
	io_free(d);
	WSACleanup();
}

static uint64_t io_now(struct tl_drv *d)
{
	(void)d;
	return tl__os_mono_ns();
}

static void reset_h(struct tl_hslot *h)
{
	*IH(h) = (struct io_h){.rhead = TL_NIL, .rtail = TL_NIL, .whead = TL_NIL, .wtail = TL_NIL};
}

/* Where option opt lives on Windows: 1, or 0 when Windows has none
 * (SO_MARK, TCP_DEFER_ACCEPT, TCP_FASTOPEN on a listener). */
static int opt_where(int opt, int v6, int *level, int *name)
{
	switch (opt) {
	case TL_SO_NODELAY: *level = IPPROTO_TCP; *name = TCP_NODELAY; return 1;
	case TL_SO_KEEPALIVE: *level = SOL_SOCKET; *name = SO_KEEPALIVE; return 1;
	case TL_SO_KEEPIDLE: *level = IPPROTO_TCP; *name = TCP_KEEPIDLE; return 1;
	case TL_SO_KEEPINTVL: *level = IPPROTO_TCP; *name = TCP_KEEPINTVL; return 1;
	case TL_SO_KEEPCNT: *level = IPPROTO_TCP; *name = TCP_KEEPCNT; return 1;
	case TL_SO_RCVBUF: *level = SOL_SOCKET; *name = SO_RCVBUF; return 1;
	case TL_SO_SNDBUF: *level = SOL_SOCKET; *name = SO_SNDBUF; return 1;
	case TL_SO_TCLASS:
		*level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
		*name = v6 ? IPV6_TCLASS : IP_TOS;
		return 1;
	default: return 0; /* TL_SO_USER_TIMEOUT (TCP_MAXRT counts seconds), MARK, DEFER_ACCEPT, FASTOPEN */
	}
}

static int sock_opt(SOCKET s, int v6, int set, int opt, int64_t *value)
{
	int level, name, v = set ? (int)*value : 0, len = sizeof v;
	if (!opt_where(opt, v6, &level, &name))
		return -ENOTSUP;
	if (set ? setsockopt(s, level, name, (char *)&v, sizeof v) : getsockopt(s, level, name, (char *)&v, &len))
		return tl__os_win_error((unsigned long)WSAGetLastError());
	if (!set)
		*value = opt == TL_SO_NODELAY || opt == TL_SO_KEEPALIVE ? !!v : v;
	return 0;
}

static int io_sockopt(struct tl_drv *d, struct tl_hslot *h, int set, int opt, int64_t *value)
{
	(void)d;
	return sock_opt(io_sock(h), !!(h->flags & TL_HF_V6), set, opt, value);
}

/* TCP_NODELAY on (the contract's default; accepted streams inherit the
 * listener's), then the spec's list in order: 0 or the first error. */
static int open_opts(SOCKET s, int v6, const struct tl_open_spec *sp)
{
	int64_t on = 1;
	int r = sock_opt(s, v6, 1, TL_SO_NODELAY, &on);
	for (uint32_t i = 0; !r && i < sp->nso; i++) {
		int64_t v = sp->so[i].value;
		r = sock_opt(s, v6, 1, sp->so[i].opt, &v);
	}
	return r;
}

/* A socket's blocking mode (FIONBIO): 0 or the error. Streams are
 * non-blocking, as libuv's are: a pooled read's recv after its zero-byte
 * probe (net.c) and tl_try_write's send must not wait; the overlapped
 * operations pend on such a socket as on a blocking one. */
static int set_nonblocking(SOCKET s, int on)
{
	u_long v = (u_long)on;
	return ioctlsocket(s, FIONBIO, &v) ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
}

static int io_open(struct tl_drv *d, struct tl_hslot *h, const struct tl_open_spec *sp)
{
	if (sp->kind == TL_OPEN_UDP) {
		reset_h(h);
		return tl__io_udp_open(d, h, sp);
	}
	if (sp->kind != TL_OPEN_TCP_LISTEN && sp->kind != TL_OPEN_TCP_STREAM)
		return -ENOTSUP; /* Unix-domain sockets: not yet (docs/WINDOWS.md) */
	/* What Windows has no way to do: one port over several listeners,
	 * deferred or fast-open accepts, a foreign or unreserved source. */
	if ((sp->kind == TL_OPEN_TCP_LISTEN &&
	     (sp->opts->reuseport || sp->opts->defer_accept || sp->opts->fastopen)) ||
	    (sp->conn && (sp->conn->freebind || sp->conn->transparent || sp->conn->bind_no_port)))
		return -ENOTSUP;
	const tl_addr *a = sp->kind == TL_OPEN_TCP_LISTEN ? sp->addr : NULL;
	int fam = sp->addr->sa.sa_family;
	SOCKET s = WSASocketW(fam, SOCK_STREAM, IPPROTO_TCP, NULL, 0, WSA_FLAG_OVERLAPPED);
	if (s == INVALID_SOCKET)
		return tl__os_win_error((unsigned long)WSAGetLastError());
	tl_addr any;
	int r = open_opts(s, fam == AF_INET6, sp);
	if (!r && fam == AF_INET6) {
		/* Windows' IPv6 sockets default to IPv6 only, Linux's take IPv4
		 * too (a listener's clients, a connect to a mapped address): a
		 * listener's option says which, on both; a connect's socket
		 * takes both, as on Linux. */
		int v6only = sp->kind == TL_OPEN_TCP_LISTEN && sp->opts->v6only;
		if (setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, (char *)&v6only, sizeof v6only))
			r = tl__os_win_error((unsigned long)WSAGetLastError());
	}
	if (!a) { /* ConnectEx needs a bound socket: the source, or any */
		if (sp->conn && sp->conn->source.sa.sa_family) {
			a = &sp->conn->source;
		} else {
			memset(&any, 0, sizeof any);
			any.sa.sa_family = (ADDRESS_FAMILY)fam;
			a = &any;
		}
	}
	if (!r && (bind(s, &a->sa, (int)tl_addr_len(a)) != 0 ||
		   (sp->kind == TL_OPEN_TCP_LISTEN && listen(s, sp->opts->backlog ? sp->opts->backlog : 511) != 0)))
		r = tl__os_win_error((unsigned long)WSAGetLastError());
	if (!r && sp->kind == TL_OPEN_TCP_STREAM)
		r = set_nonblocking(s, 1);
	if (r) {
		closesocket(s);
		return r;
	}
	h->fd = (int)(intptr_t)s;
	if (fam == AF_INET6)
		h->flags |= TL_HF_V6;
	reset_h(h);
	return 0;
}

/* An accepted stream: it joins the port at its first operation. */
static int io_attach(struct tl_drv *d, struct tl_hslot *h)
{
	reset_h(h);
	return h->type == TL_H_STREAM ? set_nonblocking(io_sock(h), 1) : 0;
}

/* FILE_COMPLETION_INFORMATION, IO_STATUS_BLOCK, and the class for
 * NtSetInformationFile that replaces a file's port. */
struct io_port_info {
	HANDLE port;
	void *key;
};
struct io_status {
	void *status;
	ULONG_PTR info;
};
#define IO_FILE_REPLACE_COMPLETION 61

/* tl_detach: a socket that never joined the port leaves as it came; one
 * that did is taken off it (Windows 8.1 and later; wine cannot:
 * -ENOTSUP, the socket stays on this loop). */
static int io_detach(struct tl_drv *d, struct tl_hslot *h)
{
	if (IH(h)->joined) {
		struct io_port_info none = {NULL, NULL};
		struct io_status iosb;
		if (!d->setinfo ||
		    d->setinfo((HANDLE)io_sock(h), &iosb, &none, sizeof none, IO_FILE_REPLACE_COMPLETION) < 0)
			return -ENOTSUP;
	}
	h->fd = -1;
	return 0;
}

/* tl_adopt: a listening or connected TCP socket, or a UDP one, made by
 * the caller (Winsock's sockets are overlapped by default). Its kind is
 * read from the socket; a stream is made non-blocking; it joins the loop's
 * port last, so a failure leaves it as it was (a socket already on another
 * port cannot join: -EINVAL). */
static int io_adopt(struct tl_drv *d, struct tl_hslot *h, int fd)
{
	SOCKET s = (SOCKET)(intptr_t)fd;
	int type = 0, listening = 0, len = sizeof type;
	tl_addr a;
	int alen = sizeof a;
	WSAPROTOCOL_INFOW pi;
	int plen = sizeof pi;
	if (getsockopt(s, SOL_SOCKET, SO_TYPE, (char *)&type, &len)) {
		int e = WSAGetLastError();
		return e == WSAENOTSOCK ? -ENOTSOCK : tl__os_win_error((unsigned long)e);
	}
	memset(&a, 0, sizeof a);
	if (getsockname(s, &a.sa, &alen) && WSAGetLastError() != WSAEINVAL) /* unbound: EINVAL */
		return tl__io_last_error();
	if (getsockopt(s, SOL_SOCKET, SO_PROTOCOL_INFOW, (char *)&pi, &plen))
		return tl__io_last_error();
	if (pi.iAddressFamily != AF_INET && pi.iAddressFamily != AF_INET6)
		return -EINVAL;
	len = sizeof listening;
	uint8_t kind;
	int connected = getpeername(s, &a.sa, &alen) == 0;
	if (type == SOCK_DGRAM && pi.iProtocol == IPPROTO_UDP) {
		kind = TL_H_UDP;
	} else if (type == SOCK_STREAM && pi.iProtocol == IPPROTO_TCP) {
		if (getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, (char *)&listening, &len))
			return tl__io_last_error();
		if (!listening && !connected)
			return -EINVAL; /* neither listening nor connected */
		kind = listening ? TL_H_LISTEN : TL_H_STREAM;
	} else {
		return -EINVAL;
	}
	reset_h(h);
	if (kind == TL_H_STREAM) {
		int r = set_nonblocking(s, 1);
		if (r)
			return r;
	}
	if (!CreateIoCompletionPort((HANDLE)s, d->port, 0, 0)) {
		DWORD e = GetLastError();
		return e == ERROR_INVALID_PARAMETER ? -EINVAL : tl__os_win_error(e);
	}
	IH(h)->joined = 1;
	h->type = kind;
	h->fd = fd;
	if (pi.iAddressFamily == AF_INET6)
		h->flags |= TL_HF_V6;
	if (kind == TL_H_UDP)
		tl__io_udp_adopted(h, connected);
	return 0;
}

/* tl_try_write: one send() on the non-blocking stream, no operation and
 * no completion, only while nothing of h's is queued to write or
 * connecting (order is kept). */
static int64_t io_try_write(struct tl_drv *d, struct tl_hslot *h, const void *buf, uint32_t len)
{
	(void)d;
	if (IH(h)->whead != TL_NIL || IH(h)->connecting)
		return -EAGAIN;
	SOCKET s = io_sock(h);
	int n = send(s, (const char *)buf, (int)len, 0);
	int e = n < 0 ? WSAGetLastError() : 0;
	if (n > 0)
		return n;
	if (n == 0 || e == WSAEWOULDBLOCK)
		return -EAGAIN;
	return tl__os_win_error((unsigned long)e);
}

static void io_release(struct tl_drv *d, struct tl_hslot *h)
{
	(void)d;
	if (h->fd == -1)
		return;
	if (h->flags & TL_HF_ABORT) { /* the peer sees a reset */
		struct linger lg = {1, 0};
		setsockopt(io_sock(h), SOL_SOCKET, SO_LINGER, (char *)&lg, sizeof lg);
	}
	closesocket(io_sock(h));
	h->fd = -1;
}

static int io_local_addr(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	int len = sizeof *out;
	(void)d;
	memset(out, 0, sizeof *out);
	return getsockname(io_sock(h), &out->sa, &len) ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
}

static int io_peer_addr(struct tl_drv *d, struct tl_hslot *h, tl_addr *out)
{
	int len = sizeof *out;
	(void)d;
	memset(out, 0, sizeof *out);
	return getpeername(io_sock(h), &out->sa, &len) ? tl__os_win_error((unsigned long)WSAGetLastError()) : 0;
}

/* One wait on the port: at most as many completions as the turn has room
 * for (each may be a nonterminal event), in the milliseconds Windows waits
 * in (rounded up). */
static int io_poll(struct tl_drv *d, int64_t timeout_ns, struct tl_poll_info *info)
{
	uint32_t room = tl__drv_room(d->loop);
	ULONG max = room < IO_BATCH ? room : IO_BATCH, got = 0;
	DWORD ms = timeout_ns < 0 ? INFINITE
		   : timeout_ns >= (int64_t)0xfffffffe * 1000000 ? 0xfffffffe
		   : (DWORD)((timeout_ns + 999999) / 1000000);
	if (!max) { /* no room this turn: the completions wait in the port */
		info->discovery_polls++;
		return 0;
	}
	if (ms)
		info->waits++;
	else
		info->discovery_polls++;
	if (!GetQueuedCompletionStatusEx(d->port, d->ev, max, &got, ms, FALSE)) {
		DWORD e = GetLastError();
		if (e == WAIT_TIMEOUT) {
			if (ms)
				info->zero_event_waits++;
			return 0;
		}
		return tl__os_win_error(e);
	}
	for (ULONG i = 0; i < got; i++) {
		if (!d->ev[i].lpOverlapped)
			continue; /* the notifier: the core looks at its rings */
		tl__io_complete(d, d->ev[i].lpOverlapped);
	}
	return 0;
}

static void io_lease_returned(struct tl_drv *d, uint32_t id)
{
	(void)id;
	while (d->nlwait) {
		struct tl_hslot *h = &d->hs[d->lwait[--d->nlwait]];
		if (h->type == TL_H_FREE)
			continue;
		IH(h)->lease_wait = 0;
		tl__io_kick(d, h);
	}
}

static void io_pause(struct tl_drv *d, struct tl_hslot *h, int paused)
{
	if (!paused)
		tl__io_kick(d, h);
}

const struct tl_driver tl__driver_iocp = {
	.name = "iocp",
	.caps = TL_CAP_TCP | TL_CAP_UDP | TL_CAP_OS | TL_CAP_NET | TL_CAP_DETACH | TL_CAP_POLL,
	.init = io_init,
	.destroy = io_destroy,
	.now = io_now,
	.open = io_open,
	.attach = io_attach,
	.release = io_release,
	.local_addr = io_local_addr,
	.peer_addr = io_peer_addr,
	.dgram_connect = tl__io_udp_connect,
	.sockopt = io_sockopt,
	.submit = tl__io_submit,
	.cancel = tl__io_cancel,
	.try_write = io_try_write,
	.adopt = io_adopt,
	.detach = io_detach,
	.poll = io_poll,
	.lease_returned = io_lease_returned,
	.pause = io_pause,
};
