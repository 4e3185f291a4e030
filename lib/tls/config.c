/* lib/tls/config.c: tl_tls_config: settings checked, files read and parsed, the library's credentials, priority string and SNI map built (any thread; tl_tls_config_load runs it on the pool). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include "turnloop/pool.h"
#include "tls_int.h"

/* Files larger than this are not certificates, keys or OCSP responses. */
#define FILE_MAX (4u << 20)

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Read a whole file into d (gnutls_free'd by the caller): 0 or -errno. */
static int read_file(const char *path, gnutls_datum_t *d, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, -e, "%s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
		close(fd);
		if (!S_ISREG(st.st_mode))
			return fail(err, errlen, -EINVAL, "%s: not a regular file", path);
		return fail(err, errlen, -EINVAL, "%s: larger than %u bytes", path, FILE_MAX);
	}
	d->size = (unsigned)st.st_size;
	d->data = gnutls_malloc(d->size + 1);
	if (!d->data) {
		close(fd);
		return fail(err, errlen, -ENOMEM, "out of memory");
	}
	size_t got = 0;
	while (got < d->size) {
		ssize_t r = read(fd, d->data + got, d->size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			close(fd);
			gnutls_free(d->data);
			d->data = NULL;
			return fail(err, errlen, -e, "%s: %s", path, strerror(e));
		}
		got += (size_t)r;
	}
	close(fd);
	d->data[d->size] = 0;
	return 0;
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;

static void lib_init(void)
{
	lib_rc = gnutls_global_init();
}

/* GnuTLS initializes itself in a constructor; this makes sure of it once
 * per process (and is never undone: the library's destructor frees it). */
int tls__library_init(void)
{
	pthread_once(&lib_once, lib_init);
	return lib_rc;
}

static void wipe_free(gnutls_datum_t *d)
{
	if (d->data) {
		gnutls_memset(d->data, 0, d->size);
		gnutls_free(d->data);
	}
	d->data = NULL;
	d->size = 0;
}

/* ---- the priority string ---- */

struct name_map {
	const char *name, *prio;
};

static const struct name_map ciphers[] = {
	{"AES-128-GCM", "AES-128-GCM"},
	{"AES-256-GCM", "AES-256-GCM"},
	{"CHACHA20-POLY1305", "CHACHA20-POLY1305"},
};

static const struct name_map groups[] = {
	{"X25519", "GROUP-X25519"},   {"P-256", "GROUP-SECP256R1"}, {"P-384", "GROUP-SECP384R1"},
	{"P-521", "GROUP-SECP521R1"}, {"X448", "GROUP-X448"},
};

/* Append "+X" for every name of list (colon separated) found in map to
 * out; -EINVAL names the first unknown one. */
static int add_list(char *out, size_t cap, const char *list, const struct name_map *map, size_t n,
		    const char *what, char *err, size_t errlen)
{
	const char *p = list;

	while (*p) {
		const char *e = strchr(p, ':');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		size_t i;
		for (i = 0; i < n; i++)
			if (strlen(map[i].name) == l && strncasecmp(map[i].name, p, l) == 0)
				break;
		if (i == n || l == 0)
			return fail(err, errlen, -EINVAL, "unknown %s '%.*s' (known: %s)", what, (int)l, p,
				    map == ciphers ? "AES-128-GCM, AES-256-GCM, CHACHA20-POLY1305"
						   : "X25519, P-256, P-384, P-521, X448");
		size_t used = strlen(out);
		snprintf(out + used, cap - used, ":+%s", map[i].prio);
		p = e ? e + 1 : p + l;
	}
	return 0;
}

/*
 * What sessions are told to accept. The defaults prefer the cheapest
 * choices that every current client offers: AES-128-GCM (AES-NI makes it
 * the fastest AEAD here; docs/PERFORMANCE.md) and X25519. Only AEAD
 * ciphers and ECDHE key exchanges: no CBC, no static RSA, no finite-field
 * DHE. A server picks by its own order (%SERVER_PRECEDENCE).
 */
static int build_priority(tl_tls_config *c, const tl_tls_settings *s, char *err, size_t errlen)
{
	char buf[512];

	if (s->priority) {
		snprintf(buf, sizeof buf, "%s", s->priority);
	} else {
		int r;
		snprintf(buf, sizeof buf, "NORMAL:-VERS-ALL%s%s:-CIPHER-ALL",
			 c->max_version >= TL_TLS_1_3 ? ":+VERS-TLS1.3" : "",
			 c->min_version <= TL_TLS_1_2 ? ":+VERS-TLS1.2" : "");
		if ((r = add_list(buf, sizeof buf, s->ciphers ? s->ciphers : "AES-128-GCM:AES-256-GCM:CHACHA20-POLY1305",
				  ciphers, sizeof ciphers / sizeof *ciphers, "cipher", err, errlen)) < 0)
			return r;
		size_t used = strlen(buf);
		snprintf(buf + used, sizeof buf - used, ":-MAC-ALL:+AEAD:-GROUP-ALL");
		if ((r = add_list(buf, sizeof buf, s->groups ? s->groups : "X25519:P-256:P-384", groups,
				  sizeof groups / sizeof *groups, "group", err, errlen)) < 0)
			return r;
		used = strlen(buf);
		snprintf(buf + used, sizeof buf - used, ":-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA%s",
			 c->role == TL_TLS_SERVER ? ":%SERVER_PRECEDENCE" : "");
	}
	gnutls_priority_t p;
	const char *at = NULL;
	int g = gnutls_priority_init2(&p, buf, &at, 0);
	if (g < 0)
		return fail(err, errlen, -EINVAL, "priority '%s': %s at '%s'", buf, gnutls_strerror(g),
			    at ? at : "?");
	gnutls_priority_deinit(p);
	c->priority = strdup(buf);
	return c->priority ? 0 : fail(err, errlen, -ENOMEM, "out of memory");
}

/* ---- ALPN ---- */

static int build_alpn(tl_tls_config *c, const char *list, char *err, size_t errlen)
{
	size_t len = strlen(list), n = 1;

	for (size_t i = 0; i < len; i++)
		n += list[i] == ',';
	c->alpn_buf = strdup(list);
	c->alpn = calloc(n, sizeof *c->alpn);
	if (!c->alpn_buf || !c->alpn)
		return fail(err, errlen, -ENOMEM, "out of memory");
	char *p = c->alpn_buf;
	for (size_t i = 0; i < n; i++) {
		char *e = strchr(p, ',');
		if (e)
			*e = '\0';
		size_t l = strlen(p);
		if (l == 0 || l > 255)
			return fail(err, errlen, -EINVAL, "alpn '%s': protocol %zu is %s", list, i + 1,
				    l ? "longer than 255 bytes" : "empty");
		c->alpn[c->nalpn].data = (unsigned char *)p;
		c->alpn[c->nalpn++].size = (unsigned)l;
		p = e ? e + 1 : p + l;
	}
	return 0;
}

/* ---- certificates ---- */

/* The DNS names of the first certificate of pem (subjectAltName, else the
 * CN), added to the SNI map for cert i. */
static int cert_names(tl_tls_config *c, const gnutls_datum_t *pem, uint32_t i, const char *file,
		      char *err, size_t errlen)
{
	gnutls_x509_crt_t crt;
	char name[512];
	size_t size;
	int found = 0, r = 0;

	if (gnutls_x509_crt_init(&crt) < 0)
		return fail(err, errlen, -ENOMEM, "out of memory");
	if (gnutls_x509_crt_import(crt, pem, GNUTLS_X509_FMT_PEM) < 0) {
		gnutls_x509_crt_deinit(crt);
		return fail(err, errlen, -EBADMSG, "%s: no PEM certificate", file);
	}
	for (unsigned k = 0;; k++) {
		size = sizeof name;
		int t = gnutls_x509_crt_get_subject_alt_name(crt, k, name, &size, NULL);
		if (t == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
			break;
		if (t == GNUTLS_SAN_DNSNAME) {
			char bad[TLS_SNI_NAME_MAX + 1];
			/* a name the map cannot hold is one no client can send */
			if (tls_sni_add(&c->sni, name, size, i, bad) == -ENOMEM)
				r = -ENOMEM;
			found = 1;
		}
	}
	if (!found) {
		size = sizeof name;
		if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, name, &size) == 0)
			if (tls_sni_add(&c->sni, name, size, i, NULL) == -ENOMEM)
				r = -ENOMEM;
	}
	gnutls_x509_crt_deinit(crt);
	return r < 0 ? fail(err, errlen, r, "out of memory") : 0;
}

/* Load one certificate and key (and OCSP staple, and the client CAs) into
 * a credentials set of its own. */
static int load_cert(tl_tls_config *c, const tl_tls_settings *s, uint32_t i, const gnutls_datum_t *ca,
		     char *err, size_t errlen)
{
	const tl_tls_cert *t = &s->certs[i];
	gnutls_datum_t crt = {0}, key = {0}, ocsp = {0};
	gnutls_certificate_credentials_t cred = c->creds[i];
	int r, g;

	if (!t->cert_file)
		return fail(err, errlen, -EINVAL, "certificate %u has no cert_file", i + 1);
	if ((r = read_file(t->cert_file, &crt, err, errlen)) < 0)
		return r;
	if (t->key_file && (r = read_file(t->key_file, &key, err, errlen)) < 0)
		goto out;
	/* Name the file that is not PEM: the library's own words for it
	 * ("Base64 decoding error", "The requested data were not available")
	 * name neither the file nor what is missing. */
	if (!memmem(crt.data, crt.size, "-----BEGIN CERTIFICATE-----", 27)) {
		r = fail(err, errlen, -EBADMSG, "%s: no PEM certificate in it", t->cert_file);
		goto out;
	}
	if (!memmem(t->key_file ? key.data : crt.data, t->key_file ? key.size : crt.size, "PRIVATE KEY-----", 16)) {
		r = fail(err, errlen, -EBADMSG, "%s: no PEM private key in it",
			 t->key_file ? t->key_file : t->cert_file);
		goto out;
	}
	/* An ECDSA P-256 key signs by libcrypto (lib/tls/ecsign.c); others,
	 * or where that path declines, by GnuTLS. */
	g = tls_set_p256_key(cred, &crt, t->key_file ? &key : &crt);
	if (g == 0)
		g = gnutls_certificate_set_x509_key_mem2(cred, &crt, t->key_file ? &key : &crt,
							 GNUTLS_X509_FMT_PEM, NULL, 0);
	if (g < 0) {
		r = fail(err, errlen, g == GNUTLS_E_MEMORY_ERROR ? -ENOMEM : -EBADMSG, "%s%s%s: %s",
			 t->cert_file, t->key_file ? " with " : "", t->key_file ? t->key_file : "",
			 g == GNUTLS_E_CERTIFICATE_KEY_MISMATCH ? "the key does not match the certificate"
								: gnutls_strerror(g));
		goto out;
	}
	if (t->ocsp_file) {
		if (c->role != TL_TLS_SERVER) {
			r = fail(err, errlen, -EINVAL, "%s: an OCSP staple is a server's", t->ocsp_file);
			goto out;
		}
		if ((r = read_file(t->ocsp_file, &ocsp, err, errlen)) < 0)
			goto out;
		g = gnutls_certificate_set_ocsp_status_request_mem(cred, &ocsp, 0, GNUTLS_X509_FMT_DER);
		if (g < 0) {
			r = fail(err, errlen, -EBADMSG, "%s: %s", t->ocsp_file,
				 g == GNUTLS_E_OCSP_MISMATCH_WITH_CERTS
					 ? "the OCSP response is not for this certificate"
					 : gnutls_strerror(g));
			goto out;
		}
	}
	if (ca && c->role == TL_TLS_SERVER) {
		g = gnutls_certificate_set_x509_trust_mem(cred, ca, GNUTLS_X509_FMT_PEM);
		if (g <= 0) {
			r = fail(err, errlen, -EBADMSG, "%s: %s", s->ca_file,
				 g == 0 ? "no certificate in it" : gnutls_strerror(g));
			goto out;
		}
	}
	if (c->role == TL_TLS_SERVER) {
		if (t->names) {
			char bad[TLS_SNI_NAME_MAX + 1];
			r = tls_sni_add(&c->sni, t->names, strlen(t->names), i, bad);
			if (r < 0) {
				r = r == -EINVAL ? fail(err, errlen, r, "%s: bad SNI name '%s'", t->cert_file, bad)
						 : fail(err, errlen, r, "out of memory");
				goto out;
			}
		} else if ((r = cert_names(c, &crt, i, t->cert_file, err, errlen)) < 0) {
			goto out;
		}
	}
	r = 0;
out:
	wipe_free(&key);
	gnutls_free(crt.data);
	gnutls_free(ocsp.data);
	return r;
}

static void config_free(tl_tls_config *c)
{
	for (uint32_t i = 0; i < c->ncreds; i++)
		if (c->creds[i])
			gnutls_certificate_free_credentials(c->creds[i]);
	free(c->creds);
	tls_sni_free(&c->sni);
	free(c->priority);
	free(c->alpn);
	free(c->alpn_buf);
	gnutls_memset(c->ticket_key, 0, sizeof c->ticket_key);
	free(c);
}

int tl_tls_config_new(const tl_tls_settings *s, tl_tls_config **out, char *err, size_t errlen)
{
	tl_tls_config *c;
	gnutls_datum_t ca = {0};
	int r;

	if (err && errlen)
		err[0] = '\0';
	if (!s || !out)
		return fail(err, errlen, -EINVAL, "no settings");
	if (s->role != TL_TLS_SERVER && s->role != TL_TLS_CLIENT)
		return fail(err, errlen, -EINVAL, "role is neither server nor client");
	if (s->role == TL_TLS_SERVER ? s->ncerts < 1 || s->ncerts > TL_TLS_CERTS_MAX : s->ncerts > 1)
		return fail(err, errlen, -EINVAL, s->role == TL_TLS_SERVER
			    ? "a server needs 1 to %u certificates" : "a client has at most one certificate",
			    TL_TLS_CERTS_MAX);
	if (s->ncerts && !s->certs)
		return fail(err, errlen, -EINVAL, "certs is NULL");
	if (s->verify < TL_TLS_VERIFY_DEFAULT || s->verify > TL_TLS_VERIFY_REQUIRE)
		return fail(err, errlen, -EINVAL, "verify is not a tl_tls_verify value");
	if (s->flags & ~(uint32_t)(TL_TLS_NO_TICKETS | TL_TLS_ALPN_STRICT | TL_TLS_NO_SYSTEM_CA))
		return fail(err, errlen, -EINVAL, "unknown flags 0x%x", s->flags);
	if (s->tickets > 8)
		return fail(err, errlen, -EINVAL, "tickets is %u: at most 8", s->tickets);
	uint16_t lo = s->min_version ? s->min_version : TL_TLS_1_2;
	uint16_t hi = s->max_version ? s->max_version : TL_TLS_1_3;
	if ((lo != TL_TLS_1_2 && lo != TL_TLS_1_3) || (hi != TL_TLS_1_2 && hi != TL_TLS_1_3) || lo > hi)
		return fail(err, errlen, -EINVAL, "versions 0x%04x..0x%04x: TLS 1.2 (0x0303) and 1.3 (0x0304) only",
			    lo, hi);
	int verify = s->verify ? s->verify : s->role == TL_TLS_SERVER ? TL_TLS_VERIFY_NONE
								   : TL_TLS_VERIFY_REQUIRE;
	if (s->role == TL_TLS_SERVER && verify != TL_TLS_VERIFY_NONE && !s->ca_file)
		return fail(err, errlen, -EINVAL, "verifying clients needs ca_file");
	if (s->role == TL_TLS_CLIENT && verify == TL_TLS_VERIFY_OPTIONAL)
		return fail(err, errlen, -EINVAL, "a client verifies (REQUIRE) or not (NONE)");
	if (s->role == TL_TLS_CLIENT && (s->flags & TL_TLS_NO_SYSTEM_CA) && !s->ca_file &&
	    verify == TL_TLS_VERIFY_REQUIRE)
		return fail(err, errlen, -EINVAL, "TL_TLS_NO_SYSTEM_CA without ca_file trusts nothing");
	if ((r = tls__library_init()) < 0)
		return fail(err, errlen, -ENOMEM, "the TLS library could not start: %s", gnutls_strerror(r));

	c = calloc(1, sizeof *c);
	if (!c)
		return fail(err, errlen, -ENOMEM, "out of memory");
	atomic_init(&c->refs, 1);
	c->role = s->role;
	c->verify = verify;
	c->flags = s->flags;
	c->tickets = s->tickets ? s->tickets : 1;
	c->ticket_lifetime_s = s->ticket_lifetime_s ? s->ticket_lifetime_s : 21600;
	c->min_version = lo;
	c->max_version = hi;
	if (s->ticket_key)
		memcpy(c->ticket_key, s->ticket_key, sizeof c->ticket_key);
	else if (gnutls_rnd(GNUTLS_RND_KEY, c->ticket_key, sizeof c->ticket_key) < 0) {
		r = fail(err, errlen, -EIO, "no random bytes for the ticket key");
		goto bad;
	}
	if ((r = build_priority(c, s, err, errlen)) < 0)
		goto bad;
	if (s->alpn && (r = build_alpn(c, s->alpn, err, errlen)) < 0)
		goto bad;
	if (s->ca_file && (r = read_file(s->ca_file, &ca, err, errlen)) < 0)
		goto bad;
	c->ncreds = s->role == TL_TLS_SERVER ? s->ncerts : 1;
	c->creds = calloc(c->ncreds, sizeof *c->creds);
	if (!c->creds) {
		r = fail(err, errlen, -ENOMEM, "out of memory");
		goto bad;
	}
	for (uint32_t i = 0; i < c->ncreds; i++)
		if (gnutls_certificate_allocate_credentials(&c->creds[i]) < 0) {
			r = fail(err, errlen, -ENOMEM, "out of memory");
			goto bad;
		}
	if (s->role == TL_TLS_CLIENT) {
		if (!(s->flags & TL_TLS_NO_SYSTEM_CA) && verify == TL_TLS_VERIFY_REQUIRE)
			gnutls_certificate_set_x509_system_trust(c->creds[0]); /* none is fine with a ca_file */
		if (ca.data) {
			int g = gnutls_certificate_set_x509_trust_mem(c->creds[0], &ca, GNUTLS_X509_FMT_PEM);
			if (g <= 0) {
				r = fail(err, errlen, -EBADMSG, "%s: %s", s->ca_file,
					 g == 0 ? "no certificate in it" : gnutls_strerror(g));
				goto bad;
			}
		}
	}
	for (uint32_t i = 0; i < s->ncerts; i++)
		if ((r = load_cert(c, s, i, verify != TL_TLS_VERIFY_NONE ? &ca : NULL, err, errlen)) < 0)
			goto bad;
	if (s->role == TL_TLS_SERVER)
		tls_sni_seal(&c->sni);
	gnutls_free(ca.data);
	*out = c;
	return 0;
bad:
	gnutls_free(ca.data);
	config_free(c);
	return r;
}

void tl_tls_config_ref(tl_tls_config *cfg)
{
	atomic_fetch_add_explicit(&cfg->refs, 1, memory_order_relaxed);
}

void tl_tls_config_unref(tl_tls_config *cfg)
{
	if (cfg && atomic_fetch_sub_explicit(&cfg->refs, 1, memory_order_acq_rel) == 1)
		config_free(cfg);
}

int tl_tls_config_role(const tl_tls_config *cfg)
{
	return cfg->role;
}

int tl_tls_config_ticket_key(const tl_tls_config *cfg, uint8_t key[TL_TLS_TICKET_KEY_SIZE])
{
	if (!cfg || !key || cfg->role != TL_TLS_SERVER)
		return -EINVAL;
	memcpy(key, cfg->ticket_key, TL_TLS_TICKET_KEY_SIZE);
	return 0;
}

/* ---- on the pool ---- */

static int64_t load_job(void *arg, tl_cancel_flag *cf)
{
	tl_tls_load *req = arg;
	tl_tls_config *c = NULL;

	if (tl_pool_cancelled(cf))
		return -ECANCELED;
	int r = tl_tls_config_new(req->settings, &c, req->err, sizeof req->err);
	if (r == 0)
		tl_pool_set_ptr(cf, c);
	return r;
}

int tl_tls_config_load(tl_loop *loop, tl_tls_load *req, uint64_t token, tl_op *op)
{
	if (!req || !req->settings || !op)
		return -EINVAL;
	req->err[0] = '\0';
	return tl_blocking(loop, load_job, req, TL_POOL_BOUNDED, token, op);
}
