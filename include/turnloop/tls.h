/* turnloop/tls.h: TLS 1.2 and 1.3 sessions on stream handles, driven by completions (GnuTLS underneath; docs/TLS.md). */
#ifndef TURNLOOP_TLS_H
#define TURNLOOP_TLS_H

#include <stdint.h>
#include "turnloop/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Three objects, one per role in a sharded program:
 *
 *  - tl_tls_config: what one side presents and accepts (certificates and
 *    keys, each serving a set of SNI names; trust anchors; ALPN; versions,
 *    ciphers and groups; session tickets). Made off the loop (file reading
 *    and parsing on the blocking pool: tl_tls_config_load) or at setup
 *    (tl_tls_config_new), then immutable and reference counted: every
 *    shard uses the same one. Its certificates, keys and trust are
 *    read-only to the library, so sharing them costs no lock.
 *  - tl_tls_ctx: one per loop (per shard), used on that loop's thread
 *    only: the library state that sessions change (one priority cache per
 *    config, so even the library's usage counters stay on the shard),
 *    fixed tables of sessions and operations, a pool of plaintext buffers
 *    (the leases reads deliver), a pool of ciphertext buffers (what goes
 *    out), and the queue of TLS completions.
 *  - a session (tl_tls_id): TLS on one stream handle of that loop, as
 *    server or client. The session owns the stream: until the session's
 *    Closed, the host neither reads, writes, shuts down nor closes it
 *    (socket options, tl_peer_addr, tl_handle_fd queries and
 *    tl_idle_deadline stay the host's to use).
 *
 * Driving. The layer submits the stream's reads and writes itself, with
 * tokens whose top byte is the ctx's token_tag. The host hands every loop
 * completion to tl_tls_complete() (it takes the ones with that tag and
 * returns 0 for the others), and takes the TLS completions with
 * tl_tls_poll() after each batch of loop completions and after
 * tl_tls_lease_release(); while tl_tls_pending() is nonzero the next
 * tl_turn() should not wait. With the sharded runtime: a handler at index
 * token_tag that calls tl_tls_complete(), and an on_pass that polls and
 * returns tl_tls_pending(). No user code runs inside the layer.
 *
 * A TLS completion is a tl_completion whose handle.v is the session's id
 * (tl_tls_id.v), op is the TLS op, token the host's, data NULL (the
 * stream's pointer, tl_handle_set_data, stays on the stream's own
 * completions, which the layer takes):
 *  - TL_K_TLS_HANDSHAKE (terminal): result 0 once the handshake is done,
 *    or a negative errno from the table below.
 *  - TL_K_READ: nonterminal with TL_F_LEASE: result plaintext bytes in
 *    u.read.lease, a buffer of the ctx's plaintext pool that the host
 *    gives back with tl_tls_lease_release() (never tl_lease_release).
 *    Terminal: 0 with TL_F_EOF at the peer's close_notify, 0 with
 *    TL_F_STOPPED after tl_tls_stop(), or a negative errno.
 *  - TL_K_WRITE (terminal): result = the bytes given, once the records
 *    carrying the last of them were written to the stream; u.write.written
 *    = the bytes sealed into records, which go out whatever comes (all of
 *    them on success; on -ECANCELED or an error, those before the cut).
 *  - TL_K_SHUTDOWN (terminal): 0 once close_notify and the stream's
 *    half-close are out.
 *  - TL_K_CLOSED: the session's last completion; token = the close token.
 *
 * Errors a session's operations end with (besides the stream's own:
 * -ECONNRESET, -EPIPE, ...; -ETIMEDOUT for a deadline; -ECANCELED):
 *
 *   -EPROTO       truncated: the peer's stream ended without close_notify
 *                 (during the handshake, or after it; a clean end of a
 *                 read is 0 with TL_F_EOF, never this)
 *   -EKEYEXPIRED  the peer's certificate has expired or is not yet valid
 *   -EKEYREJECTED the peer's certificate is not trusted (self-signed,
 *                 unknown issuer), does not name the server, or is
 *                 otherwise invalid (tl_tls_info.verify says which)
 *   -EKEYREVOKED  the peer's certificate is revoked (its OCSP staple says so)
 *   -ENOKEY       the peer sent no certificate where one is required
 *   -ECONNABORTED the peer sent a fatal alert (tl_tls_info.alert_received)
 *   -ENOPROTOOPT  nothing in common: version, cipher, group, signature,
 *                 or (TL_TLS_ALPN_STRICT) application protocol
 *   -EBADMSG      a malformed or unauthenticated record or message, or one
 *                 the protocol does not allow there
 *   -EIO          anything else the library reported
 *
 * tl_tls_info.reason names the cause with one of TL_TLS_R_* (for stats and
 * logs). After a fatal error the session only closes: later operations end
 * with the same error.
 *
 * Memory: everything the layer itself uses is allocated by tl_tls_ctx_new;
 * sessions, operations and records allocate nothing of ours. GnuTLS
 * allocates inside its calls (per session and per record; the figures are
 * in docs/TLS.md).
 */

/* Completion kind of a handshake (the other TLS completions use the loop's
 * kinds, above). Outside the loop's range: a loop never produces it. */
#define TL_K_TLS_HANDSHAKE 0x100

/* Protocol versions (the wire's numbers). */
#define TL_TLS_1_2 0x0303
#define TL_TLS_1_3 0x0304

enum tl_tls_role {
	TL_TLS_SERVER = 1,
	TL_TLS_CLIENT = 2,
};

/* Peer certificate verification (tl_tls_settings.verify). */
enum tl_tls_verify {
	TL_TLS_VERIFY_DEFAULT = 0, /* server: NONE; client: REQUIRE */
	TL_TLS_VERIFY_NONE,        /* server: ask for none; client: accept any (tests only) */
	TL_TLS_VERIFY_OPTIONAL,    /* server: ask; verify one if sent, accept none */
	TL_TLS_VERIFY_REQUIRE,     /* ask, and refuse a session without a valid one */
};

/* tl_tls_settings.flags */
#define TL_TLS_NO_TICKETS  0x1 /* server: no session tickets, so no resumption */
#define TL_TLS_ALPN_STRICT 0x2 /* server: refuse a client whose ALPN list has none of ours
				* (no_application_protocol); without it, such a client is
				* answered without ALPN */
#define TL_TLS_NO_SYSTEM_CA 0x4 /* client: only ca_file is trusted, not the system's store */

/* One certificate with its key. */
typedef struct tl_tls_cert {
	const char *cert_file; /* PEM: the certificate, then the chain to send with it */
	const char *key_file;  /* PEM private key; NULL: in cert_file */
	const char *ocsp_file; /* server: a DER OCSP response to staple; NULL: none */
	/* Server: the SNI names this certificate answers, comma separated;
	 * "*.example.com" answers one label under example.com. NULL: the
	 * DNS names of the certificate (subjectAltName, else its CN). */
	const char *names;
} tl_tls_cert;

/*
 * What a config is made from. Zeroed fields take the defaults given. The
 * strings and files are read during tl_tls_config_new, or copied at the
 * call of tl_tls_config_load.
 */
typedef struct tl_tls_settings {
	int role;                 /* enum tl_tls_role (required) */
	/* Server: 1..TL_TLS_CERTS_MAX certificates; certs[0] also answers a
	 * client that sends no SNI name, or one no certificate names.
	 * Client: 0, or 1 (the certificate it presents when asked). */
	const tl_tls_cert *certs;
	uint32_t ncerts;
	/* Server: the CAs a client certificate must chain to (with verify
	 * OPTIONAL or REQUIRE; required then). Client: trust anchors added
	 * to the system's store (see TL_TLS_NO_SYSTEM_CA). PEM. */
	const char *ca_file;
	int verify;               /* enum tl_tls_verify */
	/* ALPN protocols, comma separated, in preference order ("h2,http/1.1");
	 * NULL: no ALPN. A server chooses its own first one the client offers. */
	const char *alpn;
	uint16_t min_version;     /* TL_TLS_1_2 or TL_TLS_1_3; 0: TL_TLS_1_2 */
	uint16_t max_version;     /* 0: TL_TLS_1_3 */
	/* AEAD ciphers, colon separated, preferred first: AES-128-GCM,
	 * AES-256-GCM, CHACHA20-POLY1305. NULL: all three in that order. */
	const char *ciphers;
	/* Key exchange groups, colon separated, preferred first: X25519,
	 * P-256, P-384, P-521, X448. NULL: X25519:P-256:P-384. */
	const char *groups;
	/* A GnuTLS priority string used instead of the three settings above
	 * (versions, ciphers, groups), for what they cannot say. NULL: none. */
	const char *priority;
	uint32_t flags;           /* TL_TLS_* flags above */
	/* Server: session tickets sent after a full TLS 1.3 handshake, 1..8;
	 * 0: 1. (TLS 1.2 sends one within the handshake.) */
	uint32_t tickets;
	/* Server: how long a ticket resumes, seconds; 0: 21600 (6 h). The
	 * library rotates the key tickets are sealed with every 3 lifetimes
	 * (keys derived from the ticket key and the time, so every shard and
	 * every process with the same ticket key agrees), and accepts the
	 * previous period's key. */
	uint32_t ticket_lifetime_s;
	/* Server: the 64-byte ticket key, shared with other processes that
	 * must resume each other's sessions; NULL: a random one made for this
	 * config (tl_tls_config_ticket_key reads it, for a reload that must
	 * keep its tickets valid). */
	const uint8_t *ticket_key;
} tl_tls_settings;

#define TL_TLS_CERTS_MAX 1024
#define TL_TLS_TICKET_KEY_SIZE 64

typedef struct tl_tls_config tl_tls_config;

/*
 * Make a config from s: reads and parses every file (blocking: call it at
 * setup, or use tl_tls_config_load), checks that each key matches its
 * certificate, builds the SNI map. Returns 0 and *out (one reference), or
 * -EINVAL (a bad setting: role, counts, versions, a cipher or group name,
 * ALPN list, priority string, verify OPTIONAL/REQUIRE on a server
 * without ca_file), -ENOENT / -EACCES (a file could not be read), -EBADMSG
 * (a file does not parse, a key does not match its certificate, an OCSP
 * response does not match), -ENOMEM, -ENOTSUP (the library was built
 * without TLS). err (may be NULL) receives one line naming the setting or
 * file and why ("key.pem: the key does not match cert.pem"). Any thread.
 */
int tl_tls_config_new(const tl_tls_settings *s, tl_tls_config **out, char *err, size_t errlen);

/* A config made on the blocking pool (tl_tls_config_load): the caller's,
 * with the settings it points to, until the request's terminal. */
typedef struct tl_tls_load {
	const tl_tls_settings *settings;
	char err[256]; /* why it failed, one line */
} tl_tls_load;

/*
 * tl_tls_config_new(req->settings) on the blocking pool. Its completion is
 * TL_K_POOL (as tl_blocking's): result 0 and u.pool.ptr the config (one
 * reference, the host's), or result a negative errno of tl_tls_config_new
 * with req->err filled, or -ECANCELED (u.pool.ptr is then a config made
 * before the cancel took effect, for the host to unref, or NULL). Returns
 * 0 and *op, -EINVAL (req, its settings or op NULL), or the refusals of
 * tl_blocking (-ENOBUFS, ...).
 */
int tl_tls_config_load(tl_loop *loop, tl_tls_load *req, uint64_t token, tl_op *op);

/* Take one more reference (any thread). */
void tl_tls_config_ref(tl_tls_config *cfg);
/* Drop one reference; the last one frees the config (any thread). NULL: nothing. */
void tl_tls_config_unref(tl_tls_config *cfg);
/* The role the config was made for (enum tl_tls_role). */
int tl_tls_config_role(const tl_tls_config *cfg);
/* Copy a server config's ticket key into key (a secret: keep it in
 * memory). 0, or -EINVAL (NULL, or a client config). */
int tl_tls_config_ticket_key(const tl_tls_config *cfg, uint8_t key[TL_TLS_TICKET_KEY_SIZE]);

/* Per-loop context settings; tl_tls_ctx_config_init fills the defaults
 * shown, tl_tls_ctx_new validates them (-EINVAL). */
typedef struct tl_tls_ctx_config {
	uint8_t token_tag;         /* top byte of the layer's loop tokens, 1..255 (no default) */
	uint32_t max_sessions;     /* sessions open at once                1024, <= 2^24 */
	uint32_t max_ops;          /* TLS ops at once (handshakes, reads,
	                            * writes, shutdowns)                   4096, <= 2^24 */
	uint32_t plain_buffers;    /* plaintext leases in the pool        256, <= 2^20 */
	uint32_t plain_buffer_size;/* bytes each (a record's plaintext
	                            * is at most 16384)                    16384, 1024..1 MiB */
	uint32_t out_buffers;      /* ciphertext buffers in the pool, 17 KiB
	                            * each (one full record and room)      256, 4..2^20 */
	uint32_t session_leases;   /* plaintext leases one session's reads
	                            * may hold before they pause            4, 1..plain_buffers */
	uint32_t session_out;      /* ciphertext buffers one session may
	                            * have in flight                        2, 1..out_buffers/2 */
	uint64_t close_linger_ns;  /* a graceful close waits this long for
	                            * its close_notify to leave            1 s */
	/* The loop's pooled_buffers (tl_config): the most stream leases the
	 * sessions can hold at once. A session keeps a stream's leases until
	 * their records are decrypted, and the loop may deliver a burst past
	 * a stream's lease cap (docs/TLS.md); a lease beyond this count ends
	 * its session with -ENOBUFS.                                    32768, <= 32768 */
	uint32_t loop_leases;
	/* Buffers of 18.5 KiB a session copies a record into when the stream
	 * brings it in so many small pieces that it fills the stream's lease
	 * cap before it is whole; a session that finds none waits for one.  64, <= 2^20 */
	uint32_t spill_buffers;
} tl_tls_ctx_config;

void tl_tls_ctx_config_init(tl_tls_ctx_config *cc);

typedef struct tl_tls_ctx tl_tls_ctx;

/*
 * Make loop's TLS context with settings cc (NULL: the defaults, which
 * have no token_tag: -EINVAL). Allocates every table and pool now.
 * Returns 0 and *out, -EINVAL, -ENOMEM, -ENOTSUP (built without TLS).
 * Call on loop's thread.
 */
int tl_tls_ctx_new(tl_loop *loop, const tl_tls_ctx_config *cc, tl_tls_ctx **out);

/*
 * Free ctx and every session left in it (their library state; their
 * configs' references). Call it once the loop is destroyed, or once every
 * session has delivered its Closed: the loop may otherwise still write
 * from ctx's buffers. Plaintext leases still held become invalid.
 */
void tl_tls_ctx_destroy(tl_tls_ctx *ctx);

/* 1 when c is one of the layer's loop completions (its token's top byte
 * is the ctx's tag): it is consumed, and may have queued TLS completions.
 * 0 for any other completion (left to the host). */
int tl_tls_complete(tl_tls_ctx *ctx, const tl_completion *c);

/* Move up to cap queued TLS completions, oldest first, into out. Returns
 * how many (0 when none), or -EINVAL (out NULL, cap 0). */
int tl_tls_poll(tl_tls_ctx *ctx, tl_completion *out, uint32_t cap);

/* The number of TLS completions queued (the host's next turn should not
 * wait while it is nonzero). */
uint32_t tl_tls_pending(const tl_tls_ctx *ctx);

/* A session: ctx identity, generation and slot, as loop handles, with
 * TL_ID_LAYER_BIT set (so does every TLS op id): a loop's handle or op id
 * given to tl_tls_* is refused (-ENOENT), and a TLS id given to the loop.
 * 0 is never issued. */
typedef struct tl_tls_id {
	uint64_t v;
} tl_tls_id;

/*
 * Start a server session with cfg (a server config; ctx takes its own
 * reference for the session's life) on the stream h of ctx's loop. Nothing
 * is read or sent until tl_tls_handshake. token is the host's for the
 * session's Closed. The stream's lease cap is set to what the session's
 * reads need (tl_handle_caps). Returns 0 and *id, or -EINVAL (cfg not a
 * server config, h not a connected stream of the loop or closing, id
 * NULL), -ENOENT (h stale or foreign), -ENOBUFS (session table full), or
 * -ENOMEM (the library could not make its session).
 */
int tl_tls_server(tl_tls_ctx *ctx, tl_tls_config *cfg, tl_handle h, uint64_t token,
		  tl_tls_id *id);

/* Per-session client options (tl_tls_client). */
typedef struct tl_tls_client_opts {
	/* Sent as SNI (unless it is an IP address) and the name the server's
	 * certificate must have (verify REQUIRE needs it). NULL: none. Copied:
	 * it need not outlive the call. */
	const char *server_name;
	/* A ticket of an earlier session with this server (tl_tls_resume_data):
	 * tried for resumption; a ticket the server refuses costs nothing
	 * but a full handshake. NULL: none. */
	const void *resume;
	uint32_t resume_len;
} tl_tls_client_opts;

/* Start a client session with cfg (a client config) on stream h. opts may
 * be NULL (no name: only with verify NONE). Return codes as tl_tls_server,
 * and -EINVAL for a name over 253 bytes, a name missing under verify
 * REQUIRE, or resume data the library cannot read. */
int tl_tls_client(tl_tls_ctx *ctx, tl_tls_config *cfg, tl_handle h,
		  const tl_tls_client_opts *opts, uint64_t token, tl_tls_id *id);

/*
 * Run the handshake: its one completion is TL_K_TLS_HANDSHAKE. deadline_ns
 * (absolute, tl_now clock; 0: none) ends it with -ETIMEDOUT however many
 * bytes trickle in. The stream is read from now on (reads deliver nothing
 * until the handshake is done). A client sends its hello at once. Returns
 * 0 and *op, -ENOENT (id stale or foreign), -EINVAL (a handshake already
 * ran or runs, the session closing, op NULL), -ENOBUFS (op table full).
 */
int tl_tls_handshake(tl_tls_ctx *ctx, tl_tls_id id, uint64_t deadline_ns, uint64_t token,
		     tl_op *op);

/*
 * Read plaintext until the peer's close_notify, an error, tl_tls_stop or
 * tl_tls_cancel, as described above. Records that arrived before the
 * handshake completed or before this call are delivered first. A session
 * whose host holds session_leases plaintext leases, or finds the pool
 * empty, stops decrypting until one comes back (the stream's reads pause
 * behind it); nothing is lost or reported. One read at a time: a second is
 * -EINVAL. Returns 0 and *op, -ENOENT, -EINVAL (a read pending, closing,
 * op NULL), -ENOBUFS.
 */
int tl_tls_read_start(tl_tls_ctx *ctx, tl_tls_id id, uint64_t token, tl_op *op);

/* Give the read op a deadline (absolute; 0 clears it), as tl_read_deadline
 * does for a stream read: it ends the read with -ETIMEDOUT then, whatever
 * arrives. 0, -ENOENT (stale, foreign or terminal op), -EINVAL (not a
 * read), -EALREADY (its cancel or stop was asked). */
int tl_tls_read_deadline(tl_tls_ctx *ctx, tl_op op, uint64_t deadline_ns);

/* A plaintext lease's id is TL_TLS_LEASE_BIT | its index in the pool
 * (below plain_buffers): never a loop lease's id, and a host that keeps
 * ids in fewer bits can keep the index alone. */
#define TL_TLS_LEASE_BIT 0x80000000u

/* Give a plaintext lease back. 0, -ENOENT (not a lease the host holds). */
int tl_tls_lease_release(tl_tls_ctx *ctx, uint32_t lease_id);

/*
 * Write buf[0..len) (len >= 1) as records, after the session's earlier
 * writes, in records of up to 16 KiB; a write given before the handshake
 * completed waits for it. buf stays the caller's until the terminal. The
 * terminal is TL_K_WRITE with result len once every record carrying it was
 * written to the stream. Returns 0 and *op, -ENOENT, -EINVAL (buf or op
 * NULL, len 0, a shutdown queued before it, closing), -ENOBUFS.
 */
int tl_tls_write(tl_tls_ctx *ctx, tl_tls_id id, const void *buf, uint32_t len, uint64_t token,
		 tl_op *op);

/* tl_tls_write of every segment of iov[0..n) in order (1 <= n <= TL_IOV_MAX;
 * the array is copied, the buffers are not); small segments share records.
 * Result: the total. Returns as tl_tls_write (-EINVAL for a total of 0 or
 * over 4 GiB - 1). */
int tl_tls_writev(tl_tls_ctx *ctx, tl_tls_id id, const tl_iovec *iov, int n, uint64_t token,
		  tl_op *op);

/*
 * After the writes before it: send close_notify, then half-close the
 * stream. Reads go on until the peer's close_notify or end. TL_K_SHUTDOWN
 * result 0, or the error that stopped it. Returns 0 and *op, -ENOENT,
 * -EINVAL (one already queued or done, closing, op NULL), -ENOBUFS.
 */
int tl_tls_shutdown(tl_tls_ctx *ctx, tl_tls_id id, uint64_t token, tl_op *op);

/*
 * TLS 1.3: send a KeyUpdate after the earlier writes (new write keys),
 * asking the peer to update its own too if request_peer. 0, -ENOENT,
 * -EINVAL (handshake not done, closing, a shutdown queued), -ENOTSUP (TLS
 * 1.2 has no KeyUpdate). The peer's KeyUpdates are answered by themselves.
 */
int tl_tls_key_update(tl_tls_ctx *ctx, tl_tls_id id, int request_peer);

/* Cancel a TLS op: its terminal -ECANCELED follows (a handshake cancelled
 * leaves the session fit only for closing). 0, -EALREADY, -ENOENT. */
int tl_tls_cancel(tl_tls_ctx *ctx, tl_op op);
/* End a read with a terminal 0 and TL_F_STOPPED. 0, -EALREADY, -ENOENT,
 * -EINVAL (not a read). */
int tl_tls_stop(tl_tls_ctx *ctx, tl_op op);

#define TL_TLS_CLOSE_ABORT 0x1 /* no close_notify: the peer sees a reset (tl_close_abort) */

/*
 * Close the session: every pending op ends with -ECANCELED, then the
 * session sends close_notify if the handshake completed and it has not
 * sent one (unless TL_TLS_CLOSE_ABORT, or its writes are stuck behind a
 * peer that does not read), waits up to close_linger_ns for it to be
 * written, closes the stream, and delivers TL_K_CLOSED with token last.
 * Plaintext leases the host holds stay valid until released. 0, -ENOENT,
 * -EINVAL (already closing, flags unknown).
 */
int tl_tls_close(tl_tls_ctx *ctx, tl_tls_id id, uint32_t flags, uint64_t token);

/* The session's stream handle (for socket options, the peer address, the
 * idle deadline). 0 and *h, -ENOENT. */
int tl_tls_stream(tl_tls_ctx *ctx, tl_tls_id id, tl_handle *h);

/*
 * Moving a session: its record state leaves this ctx and another ctx (of
 * this process, another shard, or another process that received the
 * stream's descriptor) carries on the same TLS session with the peer,
 * which sees nothing. After the handshake a session is its record state:
 * the suite, the traffic keys and IVs of each direction, their sequence
 * numbers (and, in TLS 1.3, the traffic secrets that a KeyUpdate derives
 * the next keys from), and the part of a record already read. The
 * importing ctx encrypts and decrypts records itself with GnuTLS's
 * AEAD primitives (docs/TLS.md, "Moving a session"): application data,
 * close_notify and alerts both ways, a peer's KeyUpdate (answered when it
 * asks) and tl_tls_key_update; a NewSessionTicket a moved client receives
 * is read and dropped (tl_tls_resume_data is -EAGAIN there).
 *
 * Movable: a session whose handshake is done, with no fatal error, using
 * an AEAD suite: TLS 1.3 with AES-128-GCM, AES-256-GCM or
 * ChaCha20-Poly1305, or TLS 1.2 with AES-GCM or ChaCha20-Poly1305.
 * Anything else (a CBC suite, a handshake under way) is -EOPNOTSUPP and
 * stays where it is. A half-closed session moves as it is: after the
 * peer's close_notify the imported session's reads end at once with
 * TL_F_EOF (it still writes); after ours (tl_tls_shutdown done; a release
 * waits for one under way) it still reads, and a second tl_tls_shutdown
 * is -EINVAL.
 */

/* The largest state tl_tls_release writes (its fixed part and a partial
 * record). */
#define TL_TLS_STATE_MAX (1024 + 5 + 16384 + 2048)

/*
 * Release session id from ctx: write its record state into
 * state[0..cap) and give its stream handle back in *h, still open, with
 * every byte the session read from it accounted for. Like tl_detach, it
 * lets the session go only once the session holds nothing more:
 *  - the first call stops the session's stream read and refuses new
 *    writes (-EINVAL); the host's writes already queued are encrypted and
 *    written as usual;
 *  - while the stream read has not ended, whole records are still to be
 *    decrypted (they come to the host's read as ordinary TL_K_READ
 *    completions: keep releasing plaintext leases), or writes or a
 *    shutdown are still going out: -EAGAIN. Call again after the next
 *    tl_tls_poll;
 *  - then the host's read (if any) ends with -ECANCELED, and once the
 *    host has polled every completion of the session, the next call
 *    returns the state's length: id is stale (-ENOENT) from then on, no
 *    Closed follows, and *h is the host's again (tl_detach it, or give it
 *    to tl_tls_import of another ctx of this loop). Plaintext leases the
 *    host still holds stay valid until tl_tls_lease_release.
 * The state holds secret keys: keep it in memory, pass it only over a
 * channel as private as the descriptor's (a Unix socket), and wipe it.
 * Returns the length (> 0), -EAGAIN, -ENOENT, -EINVAL (state or h NULL,
 * the session closing), -ENOBUFS (cap < TL_TLS_STATE_MAX; nothing
 * changed), -EOPNOTSUPP (not movable, above; nothing changed: the session
 * goes on as before). Setup, not steady state.
 *
 * tl_tls_release(ctx, id, NULL, 0, NULL) abandons a release under way
 * (the mover gave up): the session reads its stream and takes writes
 * again; a host read the release had ended is the host's to start again.
 * 0, -ENOENT, -EINVAL (no release under way, or the session closing).
 */
int tl_tls_release(tl_tls_ctx *ctx, tl_tls_id id, void *state, uint32_t cap, tl_handle *h);

/*
 * Carry on a released session (state[0..len) from tl_tls_release) on
 * stream h of ctx's loop: the new session is open, its handshake done
 * (tl_tls_handshake is -EINVAL), and takes reads, writes, key updates,
 * shutdown and close as any other; cfg (of the session's role) is held
 * for its settings. tl_tls_info reports what the original negotiated
 * (handshake_ns 0). Allocates the library's two cipher contexts.
 * Returns 0 and *id, -EINVAL (a NULL argument; state not a state of this
 * format and version, or cut short; the role differs from cfg's),
 * -EOPNOTSUPP (a suite this build cannot carry), -ENOBUFS (no session
 * slot), -ENOMEM, or tl_handle_caps's error for h.
 */
int tl_tls_import(tl_tls_ctx *ctx, tl_tls_config *cfg, tl_handle h, const void *state, uint32_t len,
		  uint64_t token, tl_tls_id *id);

/* Why a handshake or a session failed (tl_tls_info.reason, and the rows of
 * tl_tls_stats.failed). */
enum tl_tls_reason {
	TL_TLS_R_NONE = 0,
	TL_TLS_R_TIMEOUT,        /* -ETIMEDOUT: a deadline */
	TL_TLS_R_TRUNCATED,      /* -EPROTO: the stream ended without close_notify */
	TL_TLS_R_IO,             /* the stream's error (-ECONNRESET, ...) */
	TL_TLS_R_CERT_EXPIRED,   /* -EKEYEXPIRED */
	TL_TLS_R_CERT_UNTRUSTED, /* -EKEYREJECTED: self-signed or unknown issuer */
	TL_TLS_R_CERT_NAME,      /* -EKEYREJECTED: not for the name asked */
	TL_TLS_R_CERT_REVOKED,   /* -EKEYREVOKED */
	TL_TLS_R_CERT_INVALID,   /* -EKEYREJECTED: anything else wrong with it */
	TL_TLS_R_NO_CERT,        /* -ENOKEY */
	TL_TLS_R_ALERT,          /* -ECONNABORTED: the peer's fatal alert */
	TL_TLS_R_NO_SHARED,      /* -ENOPROTOOPT: version, cipher, group, signature */
	TL_TLS_R_ALPN,           /* -ENOPROTOOPT: application protocol */
	TL_TLS_R_PROTOCOL,       /* -EBADMSG */
	TL_TLS_R_CANCELED,       /* -ECANCELED: cancelled or closed before it ended */
	TL_TLS_R_INTERNAL,       /* -EIO */
	TL_TLS_R_COUNT_
};
/* A short name for reason ("timeout", "cert-expired", ...); "?" if unknown. */
const char *tl_tls_reason_name(int reason);

/* Why a peer certificate failed verification (tl_tls_info.verify bits). */
#define TL_TLS_V_EXPIRED       0x01 /* past its notAfter */
#define TL_TLS_V_NOT_ACTIVE    0x02 /* before its notBefore */
#define TL_TLS_V_UNTRUSTED     0x04 /* its issuer is not trusted (self-signed, unknown CA) */
#define TL_TLS_V_NAME          0x08 /* does not name the server */
#define TL_TLS_V_REVOKED       0x10 /* revoked */
#define TL_TLS_V_INVALID       0x20 /* a bad signature, an insecure algorithm, a wrong purpose */

/* What a session negotiated, and why it failed. */
typedef struct tl_tls_info {
	uint16_t version;      /* TL_TLS_1_2 / TL_TLS_1_3; 0 before the handshake's end */
	uint8_t resumed;       /* 1: resumed from a ticket */
	uint8_t peer_cert;     /* 1: the peer presented a certificate (and it verified if asked) */
	char cipher[64];       /* "TLS_AES_128_GCM_SHA256"; "" before the handshake's end */
	char group[16];        /* key exchange group, "X25519" */
	char sni[256];         /* server: the name the client sent; client: the name sent */
	char alpn[64];         /* the protocol agreed; "" for none */
	uint32_t verify;       /* TL_TLS_V_* of a failed verification; 0 otherwise */
	int alert_received;    /* the last alert the peer sent (RFC 8446 numbers), -1: none */
	int alert_sent;        /* the last alert sent, -1: none */
	int reason;            /* enum tl_tls_reason of the failure; TL_TLS_R_NONE */
	int error;             /* its negative errno; 0 */
	uint64_t handshake_ns; /* tl_tls_handshake to its completion (loop clock) */
	uint64_t bytes_in, bytes_out; /* plaintext delivered and written */
} tl_tls_info;

/* Fill *out for session id (works until its Closed). 0, -ENOENT, -EINVAL
 * (out NULL). */
int tl_tls_info_get(tl_tls_ctx *ctx, tl_tls_id id, tl_tls_info *out);

/* One line naming each reason in verify bits v ("expired, untrusted
 * issuer"). Returns the length written (as snprintf). */
int tl_tls_verify_text(uint32_t v, char *buf, size_t len);

/*
 * Client: the data that resumes this session later (a ticket with its
 * secrets): copied into buf[0..cap). Returns its length, or -EAGAIN (no
 * ticket received yet: TLS 1.3 tickets come after the handshake, with the
 * first reads), -ENOBUFS (cap too small; nothing copied), -ENOENT, -EINVAL
 * (a server session, buf NULL). It is a secret: keep it in memory only.
 */
int tl_tls_resume_data(tl_tls_ctx *ctx, tl_tls_id id, void *buf, uint32_t cap);

/* Counters of a ctx, read on its loop's thread in constant time. */
typedef struct tl_tls_stats {
	uint32_t sessions;      /* open now */
	uint32_t plain_held;    /* plaintext leases the host holds now */
	uint32_t out_busy;      /* ciphertext buffers in use now */
	uint64_t handshakes;    /* completed */
	uint64_t resumed;       /* of which resumed from a ticket */
	uint64_t failed[TL_TLS_R_COUNT_]; /* handshakes that failed, by reason */
	uint64_t waits;         /* times a session waited for a pool's buffer */
	uint64_t spills;        /* records copied into a spill buffer (spill_buffers) */
} tl_tls_stats;

void tl_tls_stats_get(const tl_tls_ctx *ctx, tl_tls_stats *out);

#ifdef __cplusplus
}
#endif
#endif
