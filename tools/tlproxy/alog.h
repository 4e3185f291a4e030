/* tools/tlproxy/alog.h: the access log: one line per connection, handed by each shard to a ring that a thread of its own writes out, so a slow disk never stalls forwarding. */
#ifndef TLP_ALOG_H
#define TLP_ALOG_H

#include <stdint.h>
#include <time.h>

#include "turnloop.h"

struct tlp_glisten;

/* What a connection's TLS handshakes agreed: the client's (a tls:
 * listener's) and the server's (a tls: pool's). */
struct tlp_alog_tls {
	uint8_t sides;         /* bit 0: the client side is TLS, bit 1: the server side */
	uint8_t up_reason;     /* TL_TLS_R_* of the server's failed handshake; 0 */
	uint16_t up_version;   /* the server's: 0x0303 / 0x0304; 0: none agreed */
	uint16_t version;      /* 0x0303 / 0x0304; 0: none agreed */
	uint8_t resumed;       /* 1: resumed from a ticket */
	uint8_t up_resumed;    /* 1: the server's session resumed from a ticket */
	uint8_t reason;        /* TL_TLS_R_* of a failed handshake; 0 */
	uint32_t hs_us;        /* handshake time, microseconds */
	char cipher[32];
	char alpn[16];
	char sni[64];          /* the name the client sent, cut at 63 bytes */
};

/* One connection's line, as a shard hands it over. */
struct tlp_alog_rec {
	struct timespec end;   /* CLOCK_REALTIME when it ended */
	uint64_t dur_ns;       /* accepted to ended */
	uint64_t bytes[2];     /* from the client, from the server */
	tl_addr peer;          /* the client (after a PROXY header, what it said) */
	const struct tlp_glisten *listener; /* lives as long as the process */
	char server[TL_STATS_LABEL_MAX];    /* the server's label, "" if none */
	uint8_t cause;         /* enum tlp_cause */
	uint8_t retries;       /* connects retried on another server */
	int16_t cerr;          /* the last failed connect's error (negative errno), 0 none */
	uint8_t udp;           /* a UDP session (udp.c): dgrams counts its datagrams */
	uint64_t dgrams[2];    /* from the client, from the server */
	struct tlp_alog_tls tls; /* tls.sides 0: plain */
};

struct tlp_alog;
struct tlp_alog_ring;

/*
 * Open path for appending (O_APPEND|O_CREAT, mode 0640) and make one ring of
 * `slots` records (a power of two) per shard. Nothing runs until
 * tlp_alog_start. Returns 0 and *out, or a negative errno (of open, or
 * -ENOMEM) with a reason in err.
 */
int tlp_alog_new(const char *path, uint32_t shards, uint32_t slots, struct tlp_alog **out,
		 char *err, size_t errlen);
/* Start the writer thread. 0 or a negative errno. */
int tlp_alog_start(struct tlp_alog *a);
/* The ring of shard `shard` (its only producer). */
struct tlp_alog_ring *tlp_alog_ring(struct tlp_alog *a, uint32_t shard);
/* A record to fill, or NULL when the ring is full (the line is dropped and
 * counted). Producer only; allocation-free. */
struct tlp_alog_rec *tlp_alog_claim(struct tlp_alog_ring *r);
/* Hand the record claimed last to the writer. */
void tlp_alog_commit(struct tlp_alog_ring *r);
/* Lines this ring dropped since the last call (producer only). */
uint64_t tlp_alog_dropped(struct tlp_alog_ring *r);
/* Ask the writer to reopen the file (SIGUSR1; any thread, async-signal-safe). */
void tlp_alog_reopen(struct tlp_alog *a);
/* Write what is left, stop the thread, close, free. NULL is fine. */
void tlp_alog_free(struct tlp_alog *a);

#endif /* TLP_ALOG_H */
