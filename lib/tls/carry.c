/* lib/tls/carry.c: the layer's own record layer (every server session after its handshake, every imported session), over GnuTLS's AEAD and HKDF primitives, and a session's record state written out (tl_tls_release) and taken in (tl_tls_import). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <gnutls/crypto.h>
#include "tls_int.h"
#include "state.h"

/*
 * After its handshake a TLS session is its record state: per direction
 * an AEAD key, an IV and a sequence number, and in TLS 1.3 the traffic
 * secret the next key derives from (RFC 8446 7.2). GnuTLS gives the keys,
 * IVs and sequence numbers (gnutls_record_get_state, made for kernel
 * TLS) and the first traffic secrets (its key log callback), but takes no
 * state back in: an imported session seals and opens its records here,
 * with gnutls_aead_cipher_* (no cipher of ours) and gnutls_hkdf_expand.
 * A server session moves here in place once its handshake and tickets are
 * out (tls__carry_own): a fifth fewer instructions a request than
 * GnuTLS's record layer, none of its allocations, and its session freed.
 *
 * The record formats (RFC 8446 5.2, RFC 5288 3, RFC 7905 2):
 *   TLS 1.3: 23 03 03 len | AEAD(plaintext | type | zeros) + tag,
 *            nonce = iv XOR seq, additional data = the 5-byte header;
 *   TLS 1.2 AES-GCM: type 03 03 len | explicit(8) | AEAD(plaintext) + tag,
 *            nonce = salt(4) | explicit, additional data = seq | type |
 *            03 03 | plaintext length; we send seq as the explicit part;
 *   TLS 1.2 ChaCha20-Poly1305: the same without the explicit part, nonce
 *            = iv XOR seq.
 *
 * The state's layout, what it holds and its check are in state.h.
 */

#define TAG 16

struct tls_carry {
	uint16_t tls;
	uint8_t cipher;
	struct tls_st_dir in, out;
	gnutls_aead_cipher_hd_t hin, hout;
	/* plaintext of a record opened but not all delivered: a spill buffer */
	uint32_t pend, pend_off, pend_len;
	char cipher_name[64], group[16], sni[256], alpn[64];
	uint8_t resumed, peer_cert;
	uint32_t verify;
	struct tls_carry *next; /* the ctx's free list */
};

/* A record state from the ctx's free list, or a new one: a ctx makes as
 * many as it has had sessions on the layer's records at once, and reuses
 * them (no allocation of ours once that many were made). Zeroed. */
static struct tls_carry *carry_get(struct tl_tls_ctx *x)
{
	struct tls_carry *cr = x->carry_free;

	if (cr)
		x->carry_free = cr->next;
	else if (!(cr = malloc(sizeof *cr)))
		return NULL;
	memset(cr, 0, sizeof *cr);
	cr->pend = NONE;
	return cr;
}

void tls__carry_pool_free(struct tl_tls_ctx *x)
{
	while (x->carry_free) {
		struct tls_carry *cr = x->carry_free;
		x->carry_free = cr->next;
		free(cr);
	}
}

static gnutls_cipher_algorithm_t alg_of(int c)
{
	return c == TLS_TC_AES128GCM ? GNUTLS_CIPHER_AES_128_GCM
	       : c == TLS_TC_AES256GCM ? GNUTLS_CIPHER_AES_256_GCM
				   : GNUTLS_CIPHER_CHACHA20_POLY1305;
}

static int keylen_of(int c) { return c == TLS_TC_AES128GCM ? 16 : 32; }
/* The suite's hash (TLS 1.3: SHA-384 for AES-256-GCM, SHA-256 otherwise). */
static int hashlen_of(int c) { return c == TLS_TC_AES256GCM ? 48 : 32; }
static gnutls_mac_algorithm_t mac_of(int c) { return c == TLS_TC_AES256GCM ? GNUTLS_MAC_SHA384 : GNUTLS_MAC_SHA256; }

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* HKDF-Expand-Label(secret, label, "", len) of RFC 8446 7.1. */
static int expand_label(int c, const uint8_t *secret, const char *label, uint8_t *out, size_t len)
{
	uint8_t info[2 + 1 + 6 + 16 + 1];
	size_t ll = strlen(label), n = 0;

	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + ll);
	memcpy(info + n, "tls13 ", 6);
	n += 6;
	memcpy(info + n, label, ll);
	n += ll;
	info[n++] = 0;
	gnutls_datum_t k = {(unsigned char *)secret, (unsigned)hashlen_of(c)};
	gnutls_datum_t i = {info, (unsigned)n};
	return gnutls_hkdf_expand(mac_of(c), &k, &i, out, len);
}

/* The key and IV of a TLS 1.3 traffic secret. */
static int traffic_keys(int c, const uint8_t *secret, uint8_t *key, uint8_t *iv)
{
	if (expand_label(c, secret, "key", key, (size_t)keylen_of(c)) < 0 ||
	    expand_label(c, secret, "iv", iv, 12) < 0)
		return -1;
	return 0;
}

/* The next generation of a direction: secret, key and IV (KeyUpdate). */
static int next_generation(int c, struct tls_st_dir *d)
{
	uint8_t next[48];

	if (expand_label(c, d->secret, "traffic upd", next, (size_t)hashlen_of(c)) < 0)
		return -1;
	memcpy(d->secret, next, sizeof next);
	if (traffic_keys(c, d->secret, d->key, d->iv) < 0)
		return -1;
	d->seq = 0;
	return 0;
}

/* ---- the key log: the first traffic secrets of every session ---- */

static int keylog(gnutls_session_t gs, const char *label, const gnutls_datum_t *secret)
{
	struct tls_sess *s = gnutls_session_get_ptr(gs);

	if (!s || secret->size > sizeof s->sec_client)
		return 0;
	if (strcmp(label, "CLIENT_TRAFFIC_SECRET_0") == 0)
		memcpy(s->sec_client, secret->data, secret->size);
	else if (strcmp(label, "SERVER_TRAFFIC_SECRET_0") == 0)
		memcpy(s->sec_server, secret->data, secret->size);
	return 0;
}

void tls__carry_keylog(struct tls_sess *s)
{
	gnutls_session_set_keylog_function(s->gs, keylog);
}

/* ---- writing the state out ---- */

/* One direction of a library session: its key, IV and sequence number,
 * and (TLS 1.3) the secret of the generation in use, found by deriving
 * from the first until the key matches (a KeyUpdate before the move). */
static int export_dir(struct tls_sess *s, int c, int tls13, int read, struct tls_st_dir *d)
{
	gnutls_datum_t mac, iv, key;
	uint8_t seq[8];

	memset(d, 0, sizeof *d);
	if (gnutls_record_get_state(s->gs, (unsigned)read, &mac, &iv, &key, seq) < 0 ||
	    key.size != (unsigned)keylen_of(c))
		return -EOPNOTSUPP;
	unsigned want_iv = tls13 || c == TLS_TC_CHACHA ? 12 : 4;
	if (iv.size != want_iv)
		return -EOPNOTSUPP;
	memcpy(d->key, key.data, key.size);
	memcpy(d->iv, iv.data, iv.size);
	for (int i = 0; i < 8; i++)
		d->seq = d->seq << 8 | seq[i];
	if (!tls13)
		return 0;
	/* the peer's secret is the one read with */
	const uint8_t *first = (s->server == read) ? s->sec_client : s->sec_server;
	struct tls_st_dir g = {0};
	memcpy(g.secret, first, sizeof g.secret);
	if (traffic_keys(c, g.secret, g.key, g.iv) < 0)
		return -EOPNOTSUPP;
	for (int n = 0; memcmp(g.key, d->key, key.size) != 0; n++)
		if (n == 64 || next_generation(c, &g) < 0)
			return -EOPNOTSUPP;
	memcpy(d->secret, g.secret, sizeof d->secret);
	return 0;
}

static int cipher_code(gnutls_cipher_algorithm_t a)
{
	switch (a) {
	case GNUTLS_CIPHER_AES_128_GCM:
		return TLS_TC_AES128GCM;
	case GNUTLS_CIPHER_AES_256_GCM:
		return TLS_TC_AES256GCM;
	case GNUTLS_CIPHER_CHACHA20_POLY1305:
		return TLS_TC_CHACHA;
	default:
		return 0;
	}
}

int tls__carry_movable(struct tl_tls_ctx *x, struct tls_sess *s)
{
	(void)x;
	if (!s->hs_done || s->fatal || s->frame_bad || s->out_err)
		return -EOPNOTSUPP;
	if (s->cr)
		return 0;
	gnutls_protocol_t v = gnutls_protocol_get_version(s->gs);
	if ((v != GNUTLS_TLS1_3 && v != GNUTLS_TLS1_2) || !cipher_code(gnutls_cipher_get(s->gs)))
		return -EOPNOTSUPP;
	return 0;
}

/* The info strings a library session reports, into the state. */
static void export_info(struct tl_tls_ctx *x, struct tls_sess *s, struct tls_st_fixed *f)
{
	tl_tls_info in;

	tl_tls_info_get(x, tls_sess_id(x, s), &in);
	memcpy(f->cipher_name, in.cipher, sizeof f->cipher_name);
	memcpy(f->group, in.group, sizeof f->group);
	memcpy(f->sni, in.sni, sizeof f->sni);
	memcpy(f->alpn, in.alpn, sizeof f->alpn);
	f->resumed = in.resumed;
	f->peer_cert = in.peer_cert;
	f->verify = in.verify;
}

int tls__carry_export(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *out, uint32_t cap)
{
	struct tls_st_fixed f;
	int r;

	memset(&f, 0, sizeof f);
	f.magic = TLS_ST_MAGIC;
	f.closed = (uint8_t)((s->notify_in ? TLS_ST_CLOSED_IN : 0) | (s->notify_out ? TLS_ST_CLOSED_OUT : 0));
	f.version = f.closed ? TLS_ST_VERSION : 1; /* (state.h: versions) */
	f.server = s->server;
	f.alert_in = s->alert_in;
	f.alert_out = s->alert_out;
	f.bytes_in = s->bytes_in;
	f.bytes_out = s->bytes_out;
	if (s->cr) {
		struct tls_carry *cr = s->cr;
		f.tls = cr->tls;
		f.cipher = cr->cipher;
		f.in = cr->in;
		f.out = cr->out;
		memcpy(f.cipher_name, cr->cipher_name, sizeof f.cipher_name);
		memcpy(f.group, cr->group, sizeof f.group);
		memcpy(f.sni, cr->sni, sizeof f.sni);
		memcpy(f.alpn, cr->alpn, sizeof f.alpn);
		f.resumed = cr->resumed;
		f.peer_cert = cr->peer_cert;
		f.verify = cr->verify;
	} else {
		int tls13 = gnutls_protocol_get_version(s->gs) == GNUTLS_TLS1_3;
		f.tls = tls13 ? TL_TLS_1_3 : TL_TLS_1_2;
		f.cipher = (uint8_t)cipher_code(gnutls_cipher_get(s->gs));
		if ((r = export_dir(s, f.cipher, tls13, 1, &f.in)) < 0 ||
		    (r = export_dir(s, f.cipher, tls13, 0, &f.out)) < 0)
			return r;
		export_info(x, s, &f);
	}
	/* the record under way: no whole one is left (the caller saw to it);
	 * after the peer's close_notify, nothing it sent counts */
	uint32_t n = s->notify_in ? 0 : s->fr.partial;
	if (sizeof f + n > cap)
		return -ENOBUFS;
	f.partial = n;
	memcpy(out, &f, sizeof f);
	uint32_t at = sizeof f;
	for (uint32_t i = s->lq_head; n && i != NONE; i = x->lents[i].next) {
		const struct tls_lent *e = &x->lents[i];
		uint32_t c = e->len - e->off < n ? e->len - e->off : n;
		memcpy(out + at, e->data + e->off, c);
		at += c;
		n -= c;
	}
	memset(&f, 0, sizeof f);
	return (int)at;
}

static int aead_init(gnutls_aead_cipher_hd_t *h, int c, uint8_t *key)
{
	gnutls_datum_t k = {key, (unsigned)keylen_of(c)};
	return gnutls_aead_cipher_init(h, alg_of(c), &k) < 0 ? -ENOMEM : 0;
}

/* ---- a library session's records taken over in place ---- */

int tls__carry_own(struct tl_tls_ctx *x, struct tls_sess *s)
{
	struct tls_st_fixed f;
	int tls13, r;

	if (s->cr || !s->gs || tls__carry_movable(x, s) < 0 || s->notify_in || s->notify_out ||
	    s->shut_op != NONE || gnutls_record_check_pending(s->gs))
		return -EOPNOTSUPP;
	memset(&f, 0, sizeof f);
	tls13 = gnutls_protocol_get_version(s->gs) == GNUTLS_TLS1_3;
	f.cipher = (uint8_t)cipher_code(gnutls_cipher_get(s->gs));
	if ((r = export_dir(s, f.cipher, tls13, 1, &f.in)) < 0 || (r = export_dir(s, f.cipher, tls13, 0, &f.out)) < 0) {
		memset(&f, 0, sizeof f);
		return r;
	}
	export_info(x, s, &f);
	struct tls_carry *cr = carry_get(x);
	if (!cr) {
		memset(&f, 0, sizeof f);
		return -ENOMEM;
	}
	cr->tls = tls13 ? TL_TLS_1_3 : TL_TLS_1_2;
	cr->cipher = f.cipher;
	cr->in = f.in;
	cr->out = f.out;
	memcpy(cr->cipher_name, f.cipher_name, sizeof cr->cipher_name);
	memcpy(cr->group, f.group, sizeof cr->group);
	memcpy(cr->sni, f.sni, sizeof cr->sni);
	memcpy(cr->alpn, f.alpn, sizeof cr->alpn);
	cr->resumed = f.resumed;
	cr->peer_cert = f.peer_cert;
	cr->verify = f.verify;
	memset(&f, 0, sizeof f);
	s->cr = cr;
	if (aead_init(&cr->hin, cr->cipher, cr->in.key) < 0 || aead_init(&cr->hout, cr->cipher, cr->out.key) < 0) {
		tls__carry_free(s);
		return -ENOMEM;
	}
	gnutls_deinit(s->gs);
	s->gs = NULL;
	return 0;
}

/* ---- taking it in ---- */


/* A direction's cipher context for its new key (KeyUpdate). A new
 * context, not gnutls_aead_cipher_set_key: with GnuTLS 3.7's AES-GCM that
 * leaves the old key's GHASH state in place (records sealed with it fail
 * at the peer; ChaCha20-Poly1305 was unaffected). A KeyUpdate is rare: the
 * allocation is the library's, once per update. */
static int rekey(struct tls_carry *cr, gnutls_aead_cipher_hd_t *h, struct tls_st_dir *d)
{
	gnutls_aead_cipher_hd_t n;

	if (aead_init(&n, cr->cipher, d->key) < 0)
		return -1;
	gnutls_aead_cipher_deinit(*h);
	*h = n;
	return 0;
}

void tls__carry_free(struct tls_sess *s)
{
	struct tls_carry *cr = s->cr;

	if (!cr)
		return;
	if (cr->hin)
		gnutls_aead_cipher_deinit(cr->hin);
	if (cr->hout)
		gnutls_aead_cipher_deinit(cr->hout);
	if (cr->pend != NONE)
		tls__spill_put(s->x, cr->pend);
	memset(cr, 0, sizeof *cr); /* keys */
	cr->next = s->x->carry_free;
	s->x->carry_free = cr;
	s->cr = NULL;
}

int tls__carry_import(struct tl_tls_ctx *x, struct tls_sess *s, const uint8_t *st, uint32_t len)
{
	struct tls_st_fixed f;
	int r = tls_state_check(st, len, s->server, &f);

	if (r < 0) {
		memset(&f, 0, sizeof f);
		return r;
	}
	struct tls_carry *cr = carry_get(x);
	if (!cr)
		return -ENOMEM;
	s->cr = cr;
	cr->tls = f.tls;
	cr->cipher = f.cipher;
	cr->in = f.in;
	cr->out = f.out;
	memcpy(cr->cipher_name, f.cipher_name, sizeof cr->cipher_name);
	memcpy(cr->group, f.group, sizeof cr->group);
	memcpy(cr->sni, f.sni, sizeof cr->sni);
	memcpy(cr->alpn, f.alpn, sizeof cr->alpn);
	cr->resumed = f.resumed;
	cr->peer_cert = f.peer_cert;
	cr->verify = f.verify;
	s->alert_in = f.alert_in;
	s->alert_out = f.alert_out;
	s->notify_in = (f.closed & TLS_ST_CLOSED_IN) != 0;
	s->notify_out = (f.closed & TLS_ST_CLOSED_OUT) != 0;
	s->bytes_in = f.bytes_in;
	s->bytes_out = f.bytes_out;
	s->resumed = f.resumed;
	s->peer_cert = f.peer_cert;
	s->verify = f.verify;
	memset(&f, 0, sizeof f);
	if (aead_init(&cr->hin, cr->cipher, cr->in.key) < 0 || aead_init(&cr->hout, cr->cipher, cr->out.key) < 0)
		return -ENOMEM;
	uint32_t n = len - (uint32_t)sizeof f;
	if (n) {
		/* the record under way, into a spill buffer at the queue's head */
		uint32_t sp = tls__spill_get(x, NULL);
		if (sp == NONE)
			return -ENOBUFS;
		uint32_t node = x->lent_free; /* one per spill buffer: there is one */
		x->lent_free = x->lents[node].next;
		struct tls_lent *e = &x->lents[node];
		e->id = TLS_SPILL_BIT | sp;
		e->data = tls_spill(x, sp);
		e->len = n;
		e->off = 0;
		e->next = NONE;
		memcpy(e->data, st + sizeof f, n);
		s->lq_head = s->lq_tail = node;
		s->lq_n = 1;
		s->whole += tls_frame_feed(&s->fr, e->data, n);
	}
	return 0;
}

void tls__carry_info(const struct tls_sess *s, tl_tls_info *out)
{
	const struct tls_carry *cr = s->cr;

	out->version = cr->tls;
	out->resumed = cr->resumed;
	out->peer_cert = cr->peer_cert;
	out->handshake_ns = 0;
	memcpy(out->cipher, cr->cipher_name, sizeof out->cipher);
	memcpy(out->group, cr->group, sizeof out->group);
	memcpy(out->sni, cr->sni, sizeof out->sni);
	memcpy(out->alpn, cr->alpn, sizeof out->alpn);
}

/* ---- the record layer of an imported session ---- */

static void nonce_of(const struct tls_carry *cr, const struct tls_st_dir *d, const uint8_t *explicit_, uint8_t n[12])
{
	if (cr->tls == TL_TLS_1_2 && cr->cipher != TLS_TC_CHACHA) {
		memcpy(n, d->iv, 4);
		memcpy(n + 4, explicit_, 8);
		return;
	}
	uint8_t sq[8];
	put_be64(sq, d->seq);
	memcpy(n, d->iv, 12);
	for (int i = 0; i < 8; i++)
		n[4 + i] ^= sq[i];
}

static int explicit_len(const struct tls_carry *cr)
{
	return cr->tls == TL_TLS_1_2 && cr->cipher != TLS_TC_CHACHA ? 8 : 0;
}

/* Seal a record of type t holding p[0..n) (n <= 16384) at the end of the
 * buffer being filled (the caller made room: n + TLS_REC_OVERHEAD). */
static int seal(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t t, const struct iovec *v, int nv, uint32_t n)
{
	struct tls_carry *cr = s->cr;
	uint8_t *rec = tls_out(x, s->out_cur) + s->out_len;
	int ex = explicit_len(cr), tls13 = cr->tls == TL_TLS_1_3;
	uint32_t body_plain = n + (uint32_t)tls13; /* TLS 1.3: the inner type */
	uint32_t len = (uint32_t)ex + body_plain + TAG;
	uint8_t nonce[12], sq[8], aad[13];
	uint8_t *p = rec + TLS_REC_HDR + ex;

	rec[0] = tls13 ? TLS_CT_APPDATA : t;
	rec[1] = 3;
	rec[2] = 3;
	rec[3] = (uint8_t)(len >> 8);
	rec[4] = (uint8_t)len;
	put_be64(sq, cr->out.seq);
	if (ex)
		memcpy(rec + TLS_REC_HDR, sq, 8);
	for (int i = 0, at = 0; i < nv; i++) {
		memcpy(p + at, v[i].iov_base, v[i].iov_len);
		at += (int)v[i].iov_len;
	}
	if (tls13)
		p[n] = t;
	nonce_of(cr, &cr->out, sq, nonce);
	giovec_t a, d = {p, body_plain};
	if (tls13) {
		a = (giovec_t){rec, TLS_REC_HDR};
	} else {
		memcpy(aad, sq, 8);
		aad[8] = t;
		aad[9] = 3;
		aad[10] = 3;
		aad[11] = (uint8_t)(n >> 8);
		aad[12] = (uint8_t)n;
		a = (giovec_t){aad, 13};
	}
	size_t tag = TAG;
	if (gnutls_aead_cipher_encryptv2(cr->hout, nonce, 12, &a, 1, &d, 1, p + body_plain, &tag) < 0)
		return GNUTLS_E_ENCRYPTION_FAILED;
	cr->out.seq++;
	s->out_len += TLS_REC_HDR + len;
	return 0;
}

int tls__carry_send(struct tl_tls_ctx *x, struct tls_sess *s, const struct iovec *v, int nv, uint32_t n)
{
	return seal(x, s, TLS_CT_APPDATA, v, nv, n);
}

int tls__carry_alert(struct tl_tls_ctx *x, struct tls_sess *s, int level, int desc)
{
	uint8_t a[2] = {(uint8_t)level, (uint8_t)desc};
	struct iovec v = {a, 2};

	if (tls__out_ensure(x, s, 2 + TLS_REC_OVERHEAD) < 0)
		return GNUTLS_E_AGAIN;
	int r = seal(x, s, TLS_CT_ALERT, &v, 1, 2);
	if (r == 0)
		s->alert_out = desc;
	return r;
}

int tls__carry_key_update(struct tl_tls_ctx *x, struct tls_sess *s, int request)
{
	struct tls_carry *cr = s->cr;
	uint8_t m[5] = {24, 0, 0, 1, (uint8_t)(request != 0)};
	struct iovec v = {m, 5};

	if (cr->tls != TL_TLS_1_3)
		return GNUTLS_E_INVALID_REQUEST;
	if (tls__out_ensure(x, s, 5 + TLS_REC_OVERHEAD) < 0)
		return GNUTLS_E_AGAIN;
	int r = seal(x, s, TLS_CT_HANDSHAKE, &v, 1, 5);
	if (r < 0)
		return r;
	if (next_generation(cr->cipher, &cr->out) < 0 || rekey(cr, &cr->hout, &cr->out) < 0)
		return GNUTLS_E_INTERNAL_ERROR;
	return 0;
}

int tls__carry_version(const struct tls_sess *s)
{
	return s->cr->tls;
}

uint32_t tls__carry_pending(const struct tls_sess *s)
{
	return s->cr->pend_len - s->cr->pend_off;
}

/* Post-handshake messages in a record's plaintext p[0..n). */
static int handshake_msgs(struct tl_tls_ctx *x, struct tls_sess *s, const uint8_t *p, uint32_t n)
{
	struct tls_carry *cr = s->cr;

	while (n) {
		if (n < 4)
			return GNUTLS_E_UNEXPECTED_PACKET_LENGTH;
		uint32_t len = (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
		if (len > n - 4)
			return GNUTLS_E_UNEXPECTED_PACKET_LENGTH; /* a message split across records */
		if (cr->tls == TL_TLS_1_2) {
			if (p[0] != 0 || s->server) /* only a server's HelloRequest comes */
				return GNUTLS_E_UNEXPECTED_HANDSHAKE_PACKET;
			/* no renegotiation, refused as RFC 5746 allows */
			int r = tls__carry_alert(x, s, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION);
			if (r < 0)
				return r;
		} else if (p[0] == 24) { /* KeyUpdate */
			if (len != 1 || p[4] > 1)
				return GNUTLS_E_UNEXPECTED_PACKET;
			if (next_generation(cr->cipher, &cr->in) < 0 || rekey(cr, &cr->hin, &cr->in) < 0)
				return GNUTLS_E_INTERNAL_ERROR;
			if (p[4] == 1) {
				int r = tls__carry_key_update(x, s, 0);
				if (r < 0)
					return r;
			}
		} else if (p[0] != 4 || s->server) { /* a client drops a NewSessionTicket */
			return GNUTLS_E_UNEXPECTED_HANDSHAKE_PACKET;
		}
		p += 4 + len;
		n -= 4 + len;
	}
	return 0;
}

/* Give up to room bytes of the pending plaintext. */
static ssize_t serve_pending(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *buf, uint32_t room)
{
	struct tls_carry *cr = s->cr;
	uint32_t c = cr->pend_len - cr->pend_off;

	if (c > room)
		c = room;
	memcpy(buf, tls_spill(x, cr->pend) + cr->pend_off, c);
	cr->pend_off += c;
	if (cr->pend_off == cr->pend_len) {
		tls__spill_put(x, cr->pend);
		cr->pend = NONE;
		cr->pend_off = cr->pend_len = 0;
	}
	return (ssize_t)c;
}

ssize_t tls__carry_recv(struct tl_tls_ctx *x, struct tls_sess *s, uint8_t *buf, uint32_t room, uint8_t *scratch)
{
	struct tls_carry *cr = s->cr;

	if (cr->pend != NONE)
		return serve_pending(x, s, buf, room);
	if (s->whole < TLS_REC_HDR)
		return GNUTLS_E_AGAIN;
	uint8_t h[TLS_REC_HDR];
	tls__lq_peek(x, s, h, TLS_REC_HDR);
	uint32_t size = tls_frame_size(h);
	int ex = explicit_len(cr), tls13 = cr->tls == TL_TLS_1_3;
	if (size > TLS_REC_HDR + 16384 + 256 + (uint32_t)ex)
		return GNUTLS_E_RECORD_OVERFLOW;
	uint32_t body = size - TLS_REC_HDR, sp = NONE;
	if (body < (uint32_t)ex + TAG + (uint32_t)tls13)
		return GNUTLS_E_DECRYPTION_FAILED;
	/* a record whose plaintext may not fit keeps the rest in a spill
	 * buffer: taken before the record, or the session waits for one */
	if (body - (uint32_t)ex - TAG > room && (sp = tls__spill_get(x, s)) == NONE)
		return GNUTLS_E_AGAIN;
	tls__lq_take(x, s, scratch, size);
	s->whole -= size;
	if (tls13 && h[0] == TLS_CT_CCS)
		return GNUTLS_E_UNEXPECTED_PACKET; /* only before the handshake's end */
	if (tls13 && h[0] != TLS_CT_APPDATA)
		return GNUTLS_E_UNEXPECTED_PACKET;
	uint8_t *p = scratch + TLS_REC_HDR + ex;
	uint32_t n = body - (uint32_t)ex - TAG;
	uint8_t nonce[12], sq[8], aad[13];
	put_be64(sq, cr->in.seq);
	nonce_of(cr, &cr->in, scratch + TLS_REC_HDR, nonce);
	giovec_t a, d = {p, n};
	if (tls13) {
		a = (giovec_t){scratch, TLS_REC_HDR};
	} else {
		memcpy(aad, sq, 8);
		aad[8] = h[0];
		aad[9] = 3;
		aad[10] = 3;
		aad[11] = (uint8_t)(n >> 8);
		aad[12] = (uint8_t)n;
		a = (giovec_t){aad, 13};
	}
	int ok = gnutls_aead_cipher_decryptv2(cr->hin, nonce, 12, &a, 1, &d, 1, p + n, TAG) >= 0;
	uint8_t t = h[0];
	if (ok) {
		cr->in.seq++;
		if (tls13) { /* the inner type: the last byte that is not padding */
			while (n && p[n - 1] == 0)
				n--;
			t = n ? p[--n] : 0;
		}
	}
	if (sp != NONE && (!ok || t != TLS_CT_APPDATA || n <= room || n > 16384)) {
		tls__spill_put(x, sp);
		sp = NONE;
	}
	if (!ok)
		return GNUTLS_E_DECRYPTION_FAILED;
	if (n > 16384)
		return GNUTLS_E_RECORD_OVERFLOW;
	switch (t) {
	case TLS_CT_APPDATA:
		if (n == 0)
			return GNUTLS_E_AGAIN;
		if (sp == NONE) {
			memcpy(buf, p, n);
			return (ssize_t)n;
		}
		/* the rest waits in the spill buffer (pending) */
		cr->pend = sp;
		memcpy(tls_spill(x, cr->pend), p, n);
		cr->pend_off = 0;
		cr->pend_len = n;
		return serve_pending(x, s, buf, room);
	case TLS_CT_ALERT:
		if (n != 2)
			return GNUTLS_E_UNEXPECTED_PACKET_LENGTH;
		s->alert_in = p[1];
		if (p[1] == GNUTLS_A_CLOSE_NOTIFY)
			return 0;
		if (p[1] == GNUTLS_A_USER_CANCELED || (!tls13 && p[0] == GNUTLS_AL_WARNING))
			return GNUTLS_E_AGAIN; /* a warning: the record carried no data */
		return GNUTLS_E_FATAL_ALERT_RECEIVED;
	case TLS_CT_HANDSHAKE: {
		int r = handshake_msgs(x, s, p, n);
		return r < 0 ? r : GNUTLS_E_AGAIN;
	}
	default:
		return GNUTLS_E_UNEXPECTED_PACKET;
	}
}

/* The alert a failure of ours sends (RFC 8446 6.2). */
int tls__carry_alert_of(int g)
{
	switch (g) {
	case GNUTLS_E_DECRYPTION_FAILED:
		return GNUTLS_A_BAD_RECORD_MAC;
	case GNUTLS_E_RECORD_OVERFLOW:
		return GNUTLS_A_RECORD_OVERFLOW;
	case GNUTLS_E_UNEXPECTED_PACKET_LENGTH:
		return GNUTLS_A_DECODE_ERROR;
	case GNUTLS_E_UNEXPECTED_PACKET:
	case GNUTLS_E_UNEXPECTED_HANDSHAKE_PACKET:
		return GNUTLS_A_UNEXPECTED_MESSAGE;
	case GNUTLS_E_FATAL_ALERT_RECEIVED:
		return -1;
	default:
		return GNUTLS_A_INTERNAL_ERROR;
	}
}
