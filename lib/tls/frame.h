/* lib/tls/frame.h: finding TLS record boundaries in a byte stream, so that the library is only ever given whole records (pure code: tests/fuzz_tls.c drives it). */
#ifndef TL_TLS_FRAME_H
#define TL_TLS_FRAME_H

#include <stdint.h>

/*
 * Why the layer frames records itself instead of letting the library read
 * the stream as it likes: a session hands the library one whole record per
 * call (so that a call never reads ahead into bytes the layer may still
 * hand out or account for), it knows at every moment how many bytes of
 * complete records it holds (a read that can make progress) and where a
 * partial record starts, and a peer that announces an oversized or
 * malformed record is refused before its bytes are buffered anywhere.
 *
 * A record header is 5 bytes: content type, protocol version (2 bytes),
 * length (2 bytes, big-endian). What this checks is what any record of TLS
 * 1.0 to 1.3 satisfies; everything else is the library's to judge.
 */

#define TLS_REC_HDR 5
/* The largest record body any TLS version allows on the wire (TLS 1.2:
 * 2^14 + 2048; TLS 1.3 is stricter, 2^14 + 256, which the library checks). */
#define TLS_REC_BODY_MAX (16384 + 2048)

enum {
	TLS_CT_CCS = 20,
	TLS_CT_ALERT = 21,
	TLS_CT_HANDSHAKE = 22,
	TLS_CT_APPDATA = 23,
};

/* Why a header was refused (tls_frame.error). */
enum {
	TLS_FRAME_OK = 0,
	TLS_FRAME_BAD_TYPE,    /* not one of the four content types above */
	TLS_FRAME_BAD_VERSION, /* major version not 3 (an SSLv2 hello, or not TLS at all) */
	TLS_FRAME_TOO_LONG,    /* body longer than TLS_REC_BODY_MAX */
};

/* The framing state of one direction: the record being received. */
struct tls_frame {
	uint8_t hdr[TLS_REC_HDR];
	uint8_t hn;          /* header bytes seen of the current record */
	uint8_t error;       /* TLS_FRAME_*; once set, nothing more is taken */
	uint32_t body_left;  /* body bytes still to come (valid when hn == 5) */
	uint32_t partial;    /* bytes of the current record seen so far */
	uint64_t records;    /* whole records seen */
};

/* Check a complete header: TLS_FRAME_OK or why not. */
static inline int tls_frame_check(const uint8_t h[TLS_REC_HDR])
{
	uint32_t len = (uint32_t)h[3] << 8 | h[4];

	if (h[0] < TLS_CT_CCS || h[0] > TLS_CT_APPDATA)
		return TLS_FRAME_BAD_TYPE;
	if (h[1] != 3)
		return TLS_FRAME_BAD_VERSION;
	if (len > TLS_REC_BODY_MAX)
		return TLS_FRAME_TOO_LONG;
	return TLS_FRAME_OK;
}

/*
 * Account for the next n bytes of the stream, p[0..n). Returns how many
 * bytes became part of whole records with them (bytes of the records that
 * completed inside p, counted from each record's first byte, which may
 * have come in earlier calls). When a header is refused, f->error says why
 * and the count stops before that record: the records before it in p are
 * still counted, nothing from it on is, and every later call returns 0.
 */
static inline uint32_t tls_frame_feed(struct tls_frame *f, const uint8_t *p, uint32_t n)
{
	uint32_t whole = 0;

	if (f->error)
		return 0;
	while (n) {
		if (f->hn < TLS_REC_HDR) {
			uint32_t take = TLS_REC_HDR - f->hn;
			if (take > n)
				take = n;
			for (uint32_t i = 0; i < take; i++)
				f->hdr[f->hn + i] = p[i];
			f->hn = (uint8_t)(f->hn + take);
			f->partial += take;
			p += take;
			n -= take;
			if (f->hn < TLS_REC_HDR)
				break;
			if ((f->error = (uint8_t)tls_frame_check(f->hdr)) != TLS_FRAME_OK)
				return whole;
			f->body_left = (uint32_t)f->hdr[3] << 8 | f->hdr[4];
		}
		uint32_t take = f->body_left < n ? f->body_left : n;
		f->body_left -= take;
		f->partial += take;
		p += take;
		n -= take;
		if (f->body_left == 0) {
			whole += f->partial;
			f->partial = 0;
			f->hn = 0;
			f->records++;
		}
	}
	return whole;
}

/* The size of the record whose header is h (header included). */
static inline uint32_t tls_frame_size(const uint8_t h[TLS_REC_HDR])
{
	return TLS_REC_HDR + ((uint32_t)h[3] << 8 | h[4]);
}

#endif
