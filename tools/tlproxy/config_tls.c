/* tools/tlproxy/config_tls.c: the tls: mappings of a listener (certificates with their SNI names and OCSP staples, ALPN, versions, ciphers, client CA, handshake timeout) and of a pool (verification, CA, SNI name, client certificate) into the model. */
/* Calls: config_tls -> config (the YAML helpers of config_int.h). Files are
 * only named here: they are read when a generation is built (world.c). */
#include <string.h>

#include "config_int.h"

static int version_of(const struct ynode *n, uint16_t *out)
{
	if (n->len == 3 && !memcmp(n->s, "1.2", 3))
		*out = 0x0303;
	else if (n->len == 3 && !memcmp(n->s, "1.3", 3))
		*out = 0x0304;
	else
		return -1;
	return 0;
}

static void get_version(struct ctx *c, const struct ynode *n, const char *path, uint16_t *out)
{
	char b[64];

	if (tlp__scalar(c, n, path))
		return;
	if (version_of(n, out) < 0)
		tlp__errat(c, n->line, n->col, "%s: '%s' is not 1.2 or 1.3", path,
			   tlp__shown(n, b, sizeof b));
}

static void parse_cert(struct ctx *c, const struct ynode *n, const char *path,
		       struct tlp_tls_cert_cfg *k)
{
	static const char *const keys[] = {"cert", "key", "names", "ocsp"};
	const struct ynode *v[4];
	char p[300];

	if (tlp__take(c, n, path, keys, 4, v))
		return;
	if (!v[0])
		tlp__errat(c, n->line, n->col, "%s: cert is required", path);
	if (v[0] && (PATH(p, "%s.cert", path), 1))
		tlp__get_text(c, v[0], p, TLP_TLS_PATH_MAX, 0, &k->cert, NULL);
	if (v[1] && (PATH(p, "%s.key", path), 1))
		tlp__get_text(c, v[1], p, TLP_TLS_PATH_MAX, 0, &k->key, NULL);
	if (v[2] && (PATH(p, "%s.names", path), 1))
		tlp__get_text(c, v[2], p, 64 * 1024, 0, &k->names, NULL);
	if (v[3] && (PATH(p, "%s.ocsp", path), 1))
		tlp__get_text(c, v[3], p, TLP_TLS_PATH_MAX, 0, &k->ocsp, NULL);
}

/* What a listener's and a pool's tls: share: alpn, the version range and
 * the ciphers (each node may be NULL: not given). */
static void parse_suite(struct ctx *c, const struct ynode *n, const char *path,
			const struct ynode *alpn, const struct ynode *minv, const struct ynode *maxv,
			const struct ynode *ciphers, const char **alpn_out, uint16_t *min_out,
			uint16_t *max_out, const char **ciphers_out)
{
	char p[300];

	if (alpn && (PATH(p, "%s.alpn", path), 1))
		tlp__get_text(c, alpn, p, 1024, 0, alpn_out, NULL);
	if (minv && (PATH(p, "%s.min_version", path), 1))
		get_version(c, minv, p, min_out);
	if (maxv && (PATH(p, "%s.max_version", path), 1))
		get_version(c, maxv, p, max_out);
	if (*min_out && *max_out && *min_out > *max_out)
		tlp__errat(c, n->line, n->col, "%s: min_version is above max_version", path);
	if (ciphers && (PATH(p, "%s.ciphers", path), 1))
		tlp__get_text(c, ciphers, p, 1024, 0, ciphers_out, NULL);
}

void tlp__parse_tls(struct ctx *c, const struct ynode *n, const char *path, struct tlp_tls_cfg *t)
{
	static const char *const keys[] = {"certificates", "alpn",      "min_version",
					   "max_version",  "ciphers",   "client_ca",
					   "verify",       "handshake_timeout", "ticket_key"};
	enum { CERTS, ALPN, MINV, MAXV, CIPHERS, CA, VERIFY, HSTO, TKEY, NKEYS };
	const struct ynode *v[NKEYS];
	char p[300];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	if (tlp__take(c, n, path, keys, NKEYS, v))
		return;
	t->enabled = 1;
	if (!v[CERTS]) {
		tlp__errat(c, n->line, n->col, "%s: certificates is required", path);
	} else if ((PATH(p, "%s.certificates", path), 1) && !tlp__is_list(c, v[CERTS], p)) {
		uint32_t count = tlp__item_count(v[CERTS]), i = 0;

		if (count == 0 || count > TLP_TLS_CERTS_MAX) {
			tlp__errat(c, v[CERTS]->line, v[CERTS]->col, "%s: 1 to %d certificates", p,
				   TLP_TLS_CERTS_MAX);
		} else if ((t->certs = tlp__zalloc(c, c->model, count * sizeof *t->certs))) {
			t->ncerts = count;
			for (const struct ynode *it = tlp__first_item(v[CERTS]); it;
			     it = tlp__next_item(v[CERTS], it), i++) {
				char q[320];

				PATH(q, "%s[%u]", p, i);
				parse_cert(c, it, q, &t->certs[i]);
			}
		}
	}
	parse_suite(c, n, path, v[ALPN], v[MINV], v[MAXV], v[CIPHERS], &t->alpn, &t->min_version,
		    &t->max_version, &t->ciphers);
	if (v[CA] && (PATH(p, "%s.client_ca", path), 1) &&
	    !tlp__get_text(c, v[CA], p, TLP_TLS_PATH_MAX, 0, &t->client_ca, NULL))
		t->verify = TLP_TLS_VERIFY_ON;
	if (v[VERIFY]) {
		char b[64];
		const struct ynode *x = v[VERIFY];

		PATH(p, "%s.verify", path);
		if (!tlp__scalar(c, x, p)) {
			if (x->len == 2 && !memcmp(x->s, "on", 2))
				t->verify = TLP_TLS_VERIFY_ON;
			else if (x->len == 3 && !memcmp(x->s, "off", 3))
				t->verify = TLP_TLS_VERIFY_OFF;
			else if (x->len == 8 && !memcmp(x->s, "optional", 8))
				t->verify = TLP_TLS_VERIFY_OPTIONAL;
			else
				tlp__errat(c, x->line, x->col, "%s: '%s' is not on, off or optional", p,
					   tlp__shown(x, b, sizeof b));
		}
		if (t->verify != TLP_TLS_VERIFY_OFF && !v[CA])
			tlp__errat(c, x->line, x->col, "%s: client certificates need client_ca", p);
	}
	if (v[HSTO] && (PATH(p, "%s.handshake_timeout", path), 1))
		tlp__get_dur(c, v[HSTO], p, R_TLS_HANDSHAKE, &t->handshake_timeout_ns);
	if (v[TKEY] && (PATH(p, "%s.ticket_key", path), 1))
		tlp__get_text(c, v[TKEY], p, TLP_TLS_PATH_MAX, 0, &t->ticket_key, NULL);
}

void tlp__parse_pool_tls(struct ctx *c, const struct ynode *n, const char *path,
			 struct tlp_pool_tls_cfg *t)
{
	static const char *const keys[] = {"verify",      "ca",      "server_name", "cert",
					   "key",         "alpn",    "min_version", "max_version",
					   "ciphers",     "handshake_timeout"};
	enum { VERIFY, CA, NAME, CERT, KEY, ALPN, MINV, MAXV, CIPHERS, HSTO, NKEYS };
	const struct ynode *v[NKEYS];
	char p[300];

	_Static_assert(sizeof keys / sizeof keys[0] == NKEYS, "one name per key");
	if (tlp__take(c, n, path, keys, NKEYS, v))
		return;
	t->enabled = 1;
	t->verify = 1;
	t->handshake_timeout_ns = R_TLS_HANDSHAKE.dflt;
	if (v[VERIFY] && (PATH(p, "%s.verify", path), 1))
		tlp__get_bool(c, v[VERIFY], p, &t->verify);
	if (v[CA] && (PATH(p, "%s.ca", path), 1))
		tlp__get_text(c, v[CA], p, TLP_TLS_PATH_MAX, 0, &t->ca, NULL);
	if (v[NAME] && (PATH(p, "%s.server_name", path), 1))
		tlp__get_text(c, v[NAME], p, 253, 0, &t->server_name, NULL);
	if (v[CERT] && (PATH(p, "%s.cert", path), 1))
		tlp__get_text(c, v[CERT], p, TLP_TLS_PATH_MAX, 0, &t->cert, NULL);
	if (v[KEY] && (PATH(p, "%s.key", path), 1))
		tlp__get_text(c, v[KEY], p, TLP_TLS_PATH_MAX, 0, &t->key, NULL);
	if (v[KEY] && !v[CERT])
		tlp__errat(c, v[KEY]->line, v[KEY]->col, "%s: key without cert", path);
	parse_suite(c, n, path, v[ALPN], v[MINV], v[MAXV], v[CIPHERS], &t->alpn, &t->min_version,
		    &t->max_version, &t->ciphers);
	if (v[HSTO] && (PATH(p, "%s.handshake_timeout", path), 1))
		tlp__get_dur(c, v[HSTO], p, R_TLS_HANDSHAKE, &t->handshake_timeout_ns);
}

void tlp__check_tls(struct ctx *c, const struct ynode *n, const char *path,
		    const struct tlp_listener_cfg *l)
{
	if (!l->tls.enabled)
		return;
	/* A splice moves bytes the proxy never sees: nothing to decrypt. */
	if (l->splice)
		tlp__errat(c, n->line, n->col, "%s: splice is for plain TCP, not with tls", path);
	/* The header would come before the handshake: not read yet. */
	if (tlp_netset_count(&l->proxy_from) > 0)
		tlp__errat(c, n->line, n->col, "%s: proxy_protocol_from is not read with tls yet",
			   path);
}
