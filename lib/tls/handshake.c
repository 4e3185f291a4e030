/* lib/tls/handshake.c: a session's library setup, the handshake pump, certificate selection by SNI, tickets, what a library error means, and what a session negotiated. */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include "tls_int.h"

static tl_tls_config *cfg_of(struct tl_tls_ctx *x, struct tls_sess *s)
{
	return x->cs[s->cslot].cfg;
}

/* After the ClientHello: the certificate for the name asked (the map of
 * the config, sni.h); certs[0] answers every other name and none. */
static int pick_cert(gnutls_session_t gs)
{
	struct tls_sess *s = gnutls_session_get_ptr(gs);
	tl_tls_config *c = cfg_of(s->x, s);
	char name[TLS_SNI_NAME_MAX + 2];
	size_t len = sizeof name;
	unsigned type;

	if (gnutls_server_name_get(gs, name, &len, &type, 0) == 0 && type == GNUTLS_NAME_DNS) {
		int64_t i = tls_sni_lookup(&c->sni, name, len);
		if (i > 0)
			gnutls_credentials_set(gs, GNUTLS_CRD_CERTIFICATE, c->creds[i]);
	}
	return 0;
}

static int verify_bits(unsigned st);

/* A server's check of a client certificate. GnuTLS's own check (the one
 * clients use) fails a session whose peer sent none, which OPTIONAL
 * allows; so servers check here: nothing sent passes (REQUIRE has refused
 * it already), anything sent must verify against the config's CAs. */
static int verify_client(gnutls_session_t gs)
{
	struct tls_sess *s = gnutls_session_get_ptr(gs);
	unsigned n = 0, st = 0;

	if (!gnutls_certificate_get_peers(gs, &n) || n == 0)
		return 0;
	int g = gnutls_certificate_verify_peers3(gs, NULL, &st);
	if (g < 0 || st) {
		s->verify = st ? (uint32_t)verify_bits(st) : TL_TLS_V_INVALID;
		return GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR;
	}
	return 0;
}

static int is_ip(const char *name)
{
	unsigned char b[16];

	return inet_pton(AF_INET, name, b) == 1 || inet_pton(AF_INET6, name, b) == 1;
}

int tls__session_setup(struct tl_tls_ctx *x, struct tls_sess *s, const tl_tls_client_opts *o)
{
	tl_tls_config *c = cfg_of(x, s);
	unsigned flags = GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL;

	if (s->server) {
		flags |= GNUTLS_SERVER;
		/* tickets are sent by us after the handshake, as many as asked */
		flags |= (c->flags & TL_TLS_NO_TICKETS) ? GNUTLS_NO_TICKETS : GNUTLS_NO_AUTO_SEND_TICKET;
	} else {
		flags |= GNUTLS_CLIENT;
	}
	if (gnutls_init(&s->gs, flags) < 0) {
		s->gs = NULL;
		return -ENOMEM;
	}
	gnutls_session_set_ptr(s->gs, s);
	tls__carry_keylog(s);
	if (gnutls_priority_set(s->gs, x->cs[s->cslot].prio) < 0 ||
	    gnutls_credentials_set(s->gs, GNUTLS_CRD_CERTIFICATE, c->creds[0]) < 0)
		return -ENOMEM;
	/* The deadlines are the loop's; the library keeps no clock of its own. */
	gnutls_handshake_set_timeout(s->gs, GNUTLS_INDEFINITE_TIMEOUT);
	tls__transport(s);
	if (s->server) {
		if (!(c->flags & TL_TLS_NO_TICKETS)) {
			gnutls_datum_t k = {c->ticket_key, sizeof c->ticket_key};
			if (gnutls_session_ticket_enable_server(s->gs, &k) < 0)
				return -ENOMEM;
			gnutls_db_set_cache_expiration(s->gs, (int)c->ticket_lifetime_s);
		}
		if (c->ncreds > 1)
			gnutls_handshake_set_post_client_hello_function(s->gs, pick_cert);
		if (c->verify != TL_TLS_VERIFY_NONE) {
			gnutls_certificate_server_set_request(s->gs, c->verify == TL_TLS_VERIFY_REQUIRE
									 ? GNUTLS_CERT_REQUIRE
									 : GNUTLS_CERT_REQUEST);
			gnutls_session_set_verify_function(s->gs, verify_client);
		}
		if (c->nalpn &&
		    gnutls_alpn_set_protocols(s->gs, c->alpn, c->nalpn,
					      GNUTLS_ALPN_SERVER_PRECEDENCE |
						      ((c->flags & TL_TLS_ALPN_STRICT) ? GNUTLS_ALPN_MANDATORY : 0)) < 0)
			return -ENOMEM;
		return 0;
	}
	const char *name = o ? o->server_name : NULL;
	if (name && (strlen(name) == 0 || strlen(name) > TLS_SNI_NAME_MAX))
		return -EINVAL;
	if (!name && c->verify == TL_TLS_VERIFY_REQUIRE)
		return -EINVAL;
	if (name && !is_ip(name) &&
	    gnutls_server_name_set(s->gs, GNUTLS_NAME_DNS, name, strlen(name)) < 0)
		return -EINVAL;
	if (c->verify == TL_TLS_VERIFY_REQUIRE) {
		memcpy(s->verify_name, name, strlen(name) + 1);
		gnutls_session_set_verify_cert(s->gs, s->verify_name, 0);
	}
	if (c->nalpn && gnutls_alpn_set_protocols(s->gs, c->alpn, c->nalpn, 0) < 0)
		return -ENOMEM;
	if (o && o->resume && o->resume_len &&
	    gnutls_session_set_data(s->gs, o->resume, o->resume_len) < 0)
		return -EINVAL;
	return 0;
}

/* ---- what a library error means ---- */

static int verify_bits(unsigned st)
{
	int v = 0;

	if (st & GNUTLS_CERT_EXPIRED)
		v |= TL_TLS_V_EXPIRED;
	if (st & GNUTLS_CERT_NOT_ACTIVATED)
		v |= TL_TLS_V_NOT_ACTIVE;
	if (st & (GNUTLS_CERT_SIGNER_NOT_FOUND | GNUTLS_CERT_SIGNER_NOT_CA))
		v |= TL_TLS_V_UNTRUSTED;
	if (st & GNUTLS_CERT_UNEXPECTED_OWNER)
		v |= TL_TLS_V_NAME;
	if (st & GNUTLS_CERT_REVOKED)
		v |= TL_TLS_V_REVOKED;
	if (st & (GNUTLS_CERT_SIGNATURE_FAILURE | GNUTLS_CERT_INSECURE_ALGORITHM |
		  GNUTLS_CERT_PURPOSE_MISMATCH | GNUTLS_CERT_SIGNER_CONSTRAINTS_FAILURE |
		  GNUTLS_CERT_MISMATCH | GNUTLS_CERT_INVALID_OCSP_STATUS |
		  GNUTLS_CERT_MISSING_OCSP_STATUS))
		v |= TL_TLS_V_INVALID;
	if (!v && (st & GNUTLS_CERT_INVALID))
		v |= TL_TLS_V_INVALID;
	return v;
}

int tls__map_error(struct tls_sess *s, int g, int *reason)
{
	switch (g) {
	case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
	case GNUTLS_E_CERTIFICATE_ERROR: {
		if (!s->verify) /* a server's check sets it; a client's is the library's */
			s->verify = (uint32_t)verify_bits(gnutls_session_get_verify_cert_status(s->gs));
		if (s->verify & TL_TLS_V_REVOKED) {
			*reason = TL_TLS_R_CERT_REVOKED;
			return -EKEYREVOKED;
		}
		if (s->verify & (TL_TLS_V_EXPIRED | TL_TLS_V_NOT_ACTIVE)) {
			*reason = TL_TLS_R_CERT_EXPIRED;
			return -EKEYEXPIRED;
		}
		*reason = (s->verify & TL_TLS_V_UNTRUSTED) ? TL_TLS_R_CERT_UNTRUSTED
			  : (s->verify & TL_TLS_V_NAME)	   ? TL_TLS_R_CERT_NAME
							   : TL_TLS_R_CERT_INVALID;
		if (!s->verify)
			s->verify = TL_TLS_V_INVALID;
		return -EKEYREJECTED;
	}
	case GNUTLS_E_NO_CERTIFICATE_FOUND:
	case GNUTLS_E_CERTIFICATE_REQUIRED:
		*reason = TL_TLS_R_NO_CERT;
		return -ENOKEY;
	case GNUTLS_E_FATAL_ALERT_RECEIVED:
		if (s->gs) /* an imported session noted it as it came */
			s->alert_in = gnutls_alert_get(s->gs);
		*reason = TL_TLS_R_ALERT;
		return -ECONNABORTED;
	case GNUTLS_E_NO_APPLICATION_PROTOCOL:
		*reason = TL_TLS_R_ALPN;
		return -ENOPROTOOPT;
	case GNUTLS_E_NO_CIPHER_SUITES:
	case GNUTLS_E_UNKNOWN_CIPHER_SUITE:
	case GNUTLS_E_UNSUPPORTED_VERSION_PACKET:
	case GNUTLS_E_NO_COMMON_KEY_SHARE:
	case GNUTLS_E_INSUFFICIENT_CREDENTIALS:
	case GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM:
	case GNUTLS_E_UNWANTED_ALGORITHM:
	case GNUTLS_E_NO_PRIORITIES_WERE_SET:
	case GNUTLS_E_ECC_UNSUPPORTED_CURVE:
	case GNUTLS_E_UNKNOWN_PK_ALGORITHM:
		*reason = TL_TLS_R_NO_SHARED;
		return -ENOPROTOOPT;
	case GNUTLS_E_PREMATURE_TERMINATION:
		*reason = TL_TLS_R_TRUNCATED;
		return -EPROTO;
	case GNUTLS_E_MEMORY_ERROR:
	case GNUTLS_E_INTERNAL_ERROR:
	case GNUTLS_E_RANDOM_FAILED:
	case GNUTLS_E_LOCKING_ERROR:
		*reason = TL_TLS_R_INTERNAL;
		return -EIO;
	default:
		/* The rest are the peer's: a malformed or unauthenticated
		 * record or message, or one not allowed where it came. */
		*reason = TL_TLS_R_PROTOCOL;
		return -EBADMSG;
	}
}

void tls__library_failed(struct tl_tls_ctx *x, struct tls_sess *s, int g)
{
	int reason, err = tls__map_error(s, g, &reason);

	/* Tell the peer, unless it told us (an alert answers no alert). */
	if (g != GNUTLS_E_FATAL_ALERT_RECEIVED && gnutls_error_is_fatal(g) &&
	    tls__out_ensure(x, s, 64) == 0) {
		int level;
		int a = s->cr ? tls__carry_alert_of(g) : gnutls_error_to_alert(g, &level);
		if (s->cr) {
			if (a >= 0)
				tls__carry_alert(x, s, GNUTLS_AL_FATAL, a);
		} else if (a >= 0 && gnutls_alert_send_appropriate(s->gs, g) == 0) {
			s->alert_out = a;
		}
		tls__out_flush(x, s, 0);
	}
	tls__unwait(x, s);
	tls__fail(x, s, err, reason);
}

/* ---- the handshake ---- */

static void handshake_done(struct tl_tls_ctx *x, struct tls_sess *s)
{
	tl_tls_config *c = cfg_of(x, s);
	unsigned n = 0;
	int tickets_out = (c->flags & TL_TLS_NO_TICKETS) || gnutls_protocol_get_version(s->gs) != GNUTLS_TLS1_3;

	s->hs_done = 1;
	s->hs_counted = 1;
	s->hs_ns = tl_now(x->loop) - s->hs_start;
	s->resumed = gnutls_session_is_resumed(s->gs) != 0;
	s->peer_cert = gnutls_certificate_get_peers(s->gs, &n) != NULL && n > 0;
	x->st.handshakes++;
	x->st.resumed += s->resumed;
	/* TLS 1.3 tickets (TLS 1.2's went in the handshake): sent now, so
	 * that they leave with the handshake's last flight. */
	if (s->server && !(c->flags & TL_TLS_NO_TICKETS) &&
	    gnutls_protocol_get_version(s->gs) == GNUTLS_TLS1_3 && tls__out_ensure(x, s, 1024) == 0) {
		int g = gnutls_session_ticket_send(s->gs, c->tickets, 0);
		if (g < 0 && g != GNUTLS_E_AGAIN) {
			tls__library_failed(x, s, g);
			return;
		}
		tickets_out = g >= 0;
	}
	tls__out_flush(x, s, 0);
	/* A server's records go to the layer's own record layer from here
	 * (carry.c): GnuTLS's is a fifth more instructions a request and
	 * half its allocations a record, and its session is let go. A client
	 * keeps the library's, which reads the tickets it may resume from. */
	if (s->server && tickets_out)
		tls__carry_own(x, s);
	if (s->hs_op != NONE)
		tls__op_end(x, &x->ops[s->hs_op], 0, 0);
	tls__read_deadline(x, s);
}

void tls__handshake_pump(struct tl_tls_ctx *x, struct tls_sess *s)
{
	for (;;) {
		if (tls__out_ensure(x, s, 1024) < 0)
			return; /* runs again with a buffer */
		uint32_t whole0 = s->whole;
		s->in_budget = 1;
		s->out_starved = 0;
		int g = gnutls_handshake(s->gs);
		s->in_budget = 0;
		tls__out_flush(x, s, 0);
		if (g == 0) {
			handshake_done(x, s);
			return;
		}
		if (g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED) {
			if (s->out_starved)
				return; /* the flight waits for a buffer; the library keeps it */
			if (s->whole < whole0 && s->whole > 0)
				continue;
			break;
		}
		if (g == GNUTLS_E_WARNING_ALERT_RECEIVED) {
			s->alert_in = gnutls_alert_get(s->gs);
			continue;
		}
		tls__library_failed(x, s, g);
		return;
	}
	/* Waiting for the peer: unless nothing more can come. */
	if (s->whole || s->window)
		return;
	if (s->frame_bad)
		tls__fail(x, s, -EBADMSG, TL_TLS_R_PROTOCOL);
	else if (s->in_err)
		tls__fail(x, s, s->in_err, TL_TLS_R_IO);
	else if (s->eof)
		tls__fail(x, s, -EPROTO, TL_TLS_R_TRUNCATED);
}

/* ---- what was negotiated ---- */

int tl_tls_info_get(tl_tls_ctx *x, tl_tls_id id, tl_tls_info *out)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof *out);
	out->alert_received = s->alert_in;
	out->alert_sent = s->alert_out;
	out->reason = s->fatal ? s->reason : TL_TLS_R_NONE;
	out->error = s->fatal ? s->err : 0;
	out->verify = s->verify;
	out->bytes_in = s->bytes_in;
	out->bytes_out = s->bytes_out;
	if (s->cr) {
		tls__carry_info(s, out);
		return 0;
	}
	if (!s->gs)
		return 0;
	size_t len = sizeof out->sni - 1;
	unsigned type;
	if (s->server) {
		if (gnutls_server_name_get(s->gs, out->sni, &len, &type, 0) != 0 || type != GNUTLS_NAME_DNS)
			out->sni[0] = '\0';
	} else if (gnutls_server_name_get(s->gs, out->sni, &len, &type, 0) != 0) {
		out->sni[0] = '\0';
	}
	if (!s->hs_done)
		return 0;
	gnutls_protocol_t v = gnutls_protocol_get_version(s->gs);
	out->version = v == GNUTLS_TLS1_3 ? TL_TLS_1_3 : v == GNUTLS_TLS1_2 ? TL_TLS_1_2 : 0;
	out->resumed = s->resumed;
	out->peer_cert = s->peer_cert;
	out->handshake_ns = s->hs_ns;
	const char *cs = gnutls_ciphersuite_get(s->gs);
	snprintf(out->cipher, sizeof out->cipher, "%s", cs ? cs : "");
	const char *gn = gnutls_group_get_name(gnutls_group_get(s->gs));
	snprintf(out->group, sizeof out->group, "%s", gn ? gn : "");
	gnutls_datum_t p;
	if (gnutls_alpn_get_selected_protocol(s->gs, &p) == 0)
		snprintf(out->alpn, sizeof out->alpn, "%.*s", (int)p.size, (const char *)p.data);
	return 0;
}

int tl_tls_resume_data(tl_tls_ctx *x, tl_tls_id id, void *buf, uint32_t cap)
{
	struct tls_sess *s = tls__sess_of(x, id);

	if (!s)
		return -ENOENT;
	if (!buf || s->server)
		return -EINVAL;
	if (s->cr)
		return -EAGAIN; /* an imported session keeps no ticket */
	if (!s->hs_done || (gnutls_protocol_get_version(s->gs) == GNUTLS_TLS1_3 &&
			    !(gnutls_session_get_flags(s->gs) & GNUTLS_SFLAGS_SESSION_TICKET)))
		return -EAGAIN;
	gnutls_datum_t d;
	if (gnutls_session_get_data2(s->gs, &d) < 0)
		return -EAGAIN;
	int r = d.size > cap ? -ENOBUFS : (int)d.size;
	if (r > 0)
		memcpy(buf, d.data, d.size);
	gnutls_memset(d.data, 0, d.size);
	gnutls_free(d.data);
	return r;
}

static const char *const reason_names[TL_TLS_R_COUNT_] = {
	[TL_TLS_R_NONE] = "none",
	[TL_TLS_R_TIMEOUT] = "timeout",
	[TL_TLS_R_TRUNCATED] = "truncated",
	[TL_TLS_R_IO] = "io",
	[TL_TLS_R_CERT_EXPIRED] = "cert-expired",
	[TL_TLS_R_CERT_UNTRUSTED] = "cert-untrusted",
	[TL_TLS_R_CERT_NAME] = "cert-name",
	[TL_TLS_R_CERT_REVOKED] = "cert-revoked",
	[TL_TLS_R_CERT_INVALID] = "cert-invalid",
	[TL_TLS_R_NO_CERT] = "no-cert",
	[TL_TLS_R_ALERT] = "alert",
	[TL_TLS_R_NO_SHARED] = "no-shared",
	[TL_TLS_R_ALPN] = "alpn",
	[TL_TLS_R_PROTOCOL] = "protocol",
	[TL_TLS_R_CANCELED] = "canceled",
	[TL_TLS_R_INTERNAL] = "internal",
};
_Static_assert(sizeof reason_names / sizeof *reason_names == TL_TLS_R_COUNT_, "a name per reason");

const char *tl_tls_reason_name(int reason)
{
	return reason >= 0 && reason < TL_TLS_R_COUNT_ ? reason_names[reason] : "?";
}

int tl_tls_verify_text(uint32_t v, char *buf, size_t len)
{
	static const struct {
		uint32_t bit;
		const char *text;
	} t[] = {
		{TL_TLS_V_EXPIRED, "expired"},
		{TL_TLS_V_NOT_ACTIVE, "not yet valid"},
		{TL_TLS_V_UNTRUSTED, "untrusted issuer (self-signed or unknown CA)"},
		{TL_TLS_V_NAME, "not for this name"},
		{TL_TLS_V_REVOKED, "revoked"},
		{TL_TLS_V_INVALID, "invalid"},
	};
	size_t n = 0;

	if (buf && len)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		if (!(v & t[i].bit))
			continue;
		const char *sep = n ? ", " : "";
		size_t w = strlen(sep) + strlen(t[i].text);
		if (buf && n + w < len)
			snprintf(buf + n, len - n, "%s%s", sep, t[i].text);
		else if (buf && len)
			buf[n < len ? n : len - 1] = '\0';
		n += w;
	}
	return (int)n;
}
