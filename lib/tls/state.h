/* lib/tls/state.h: the layout of a released session's record state (tl_tls_release writes it, tl_tls_import reads it) and its check, pure code that trusts nothing in it (tests/fuzz_tls.c drives it). */
#ifndef TL_TLS_STATE_H
#define TL_TLS_STATE_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "frame.h"

/*
 * A state is the fixed part below (host byte order: it crosses to a
 * process of the same build on the same machine, or at least of the same
 * layout: magic and version say so), then the bytes of the record under
 * way that the stream had already delivered: a prefix of one record, never
 * a whole one. What crosses, exactly: the role, the TLS version and the
 * AEAD suite; per direction the sequence number, the key, the IV (TLS 1.2
 * AES-GCM: its 4-byte salt) and, in TLS 1.3, the traffic secret in use;
 * the alerts seen, the byte counts; the suite, group, SNI and ALPN names
 * for tl_tls_info; the partial record (ciphertext); which directions a
 * close_notify has ended (a half-closed session moves too). No private
 * key, no certificate, no ticket key.
 *
 * Versions: 1 has no closed directions (its closed byte was padding and
 * reads as 0); 2 is written only when a direction is closed, so that a
 * state of an open session stays readable by a build that knows only 1
 * (a takeover back to it), and one it could not honour is refused there.
 */

#define TLS_ST_MAGIC 0x54534c54u /* "TLST" */
#define TLS_ST_VERSION 2         /* the newest this build reads and writes */

enum { TLS_TC_AES128GCM = 1, TLS_TC_AES256GCM, TLS_TC_CHACHA };

/* closed: the peer's close_notify was read; ours was sent */
enum { TLS_ST_CLOSED_IN = 1, TLS_ST_CLOSED_OUT = 2 };

struct tls_st_dir {
	uint64_t seq;
	uint8_t key[32], iv[12], secret[48];
};

struct tls_st_fixed {
	uint32_t magic;
	uint16_t version, tls;   /* TLS_ST_VERSION; 0x0304 or 0x0303 */
	uint8_t server, cipher, resumed, peer_cert;
	uint32_t verify;
	int32_t alert_in, alert_out;
	uint64_t bytes_in, bytes_out;
	struct tls_st_dir in, out;
	char cipher_name[64], group[16], sni[256], alpn[64];
	uint32_t partial;        /* bytes of the record under way that follow */
	uint8_t closed, pad[3];  /* TLS_ST_CLOSED_*: version 2 (in what was padding) */
};

_Static_assert(sizeof(struct tls_st_fixed) == 656, "the state's fixed part keeps version 1's size");

/*
 * Check st[0..len) as a state for a session of role server (1, 0): 0 and
 * its fixed part copied into *f (its strings NUL-terminated), -EINVAL (not
 * a state of this layout and version, another role, lengths that do not
 * add up, a partial record that is not a prefix of one record or that
 * follows the peer's close_notify, a closed byte outside its two bits or
 * none in a version 2), or
 * -EOPNOTSUPP (a suite this build does not carry).
 */
static inline int tls_state_check(const uint8_t *st, uint32_t len, int server, struct tls_st_fixed *f)
{
	struct tls_frame fr;

	if (!st || len < sizeof *f)
		return -EINVAL;
	memcpy(f, st, sizeof *f);
	if (f->magic != TLS_ST_MAGIC || (f->version != 1 && f->version != TLS_ST_VERSION) ||
	    f->server != (server != 0) || (f->tls != 0x0304 && f->tls != 0x0303) ||
	    f->partial != len - sizeof *f)
		return -EINVAL;
	if (f->version == 1)
		f->closed = 0;
	else if (f->closed == 0 || (f->closed & ~(TLS_ST_CLOSED_IN | TLS_ST_CLOSED_OUT)) ||
		 ((f->closed & TLS_ST_CLOSED_IN) && f->partial))
		return -EINVAL;
	memset(f->pad, 0, sizeof f->pad);
	memset(&fr, 0, sizeof fr);
	if (tls_frame_feed(&fr, st + sizeof *f, f->partial) != 0 || fr.error)
		return -EINVAL; /* a whole record, or a bad header */
	if (f->cipher < TLS_TC_AES128GCM || f->cipher > TLS_TC_CHACHA)
		return -EOPNOTSUPP;
	f->cipher_name[sizeof f->cipher_name - 1] = '\0';
	f->group[sizeof f->group - 1] = '\0';
	f->sni[sizeof f->sni - 1] = '\0';
	f->alpn[sizeof f->alpn - 1] = '\0';
	return 0;
}

#endif
