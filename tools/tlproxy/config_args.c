/* tools/tlproxy/config_args.c: tlproxy's command line: its usage text and the argument parser, which builds the same model as a config file (config.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "turnloop/plan.h"

#include "config_int.h"
#include "../digits.h"
#include "../reason.h"

/* ---- the command line ---- */

/* Is o an option that takes a value? (The parser's chain below names
 * each; an option not here is unknown, with or without a value after it.) */
static int takes_value(const char *o)
{
	static const char *const opts[] = {
		"--config", "--check", "--listen", "--upstream", "--shards", "--cpus", "--balance",
		"--proxy-protocol", "--max-conns", "--splice-pipes", "--splice-pipe-size",
		"--connect-timeout", "--drain-timeout", "--idle-timeout", "--tls-cert", "--tls-key",
		"--tls-ocsp", "--half-close", "--spin-us", "--nap-us", "--max-datagram", "--responses",
		"--sessions",
	};

	for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
		if (!strcmp(o, opts[k]))
			return 1;
	return 0;
}

const char *tlp_args_usage(void)
{
	/* The methods' names come from the balancer table; written once. */
	static char text[1024];
	char names[160];

	if (!text[0]) {
		tlp_bal_list(names, sizeof names, "|", "|");
		snprintf(text, sizeof text,
			 "usage: tlproxy --listen HOST:PORT --upstream HOST:PORT[,HOST:PORT...]\n"
			 "               [--shards N | --cpus LIST] [--balance %s]\n"
			 "               [--proxy-protocol none|v1|v2] [--splice] [--splice-pipes N]\n"
			 "               [--splice-pipe-size SIZE] [--max-conns N]\n"
			 "               [--tls-cert FILE --tls-key FILE [--tls-ocsp FILE]]\n"
			 "               [--connect-timeout D] [--idle-timeout D] [--half-close on|off]\n"
			 "               [--drain-timeout D] [--spin-us N] [--nap-us N]\n"
			 "               [--udp [--responses N] [--sessions N] [--max-datagram N]]\n"
			 "       tlproxy --config FILE\n"
			 "       tlproxy --check FILE\n"
			 "durations D take a unit: 500ms, 2s, 1m, 1h\n",
			 names);
	}
	return text;
}

static int args_dur(const char *opt, const char *s, struct dur_range r, uint64_t *out, char *err,
		    size_t errlen)
{
	char why[160], a[32], b[32];

	if (tlp_duration_parse(s, strlen(s), out, why, sizeof why) < 0)
		return fail(err, errlen, "%s: %s", opt, why);
	if (*out < r.lo || *out > r.hi)
		return fail(err, errlen, "%s: out of range (%s to %s)", opt,
			    tlp__fmt_dur(r.lo, a, sizeof a), tlp__fmt_dur(r.hi, b, sizeof b));
	return 0;
}

int tlp_args_parse(int argc, char **argv, struct tlp_args *a, char *err, size_t errlen)
{
	struct tlp_endpoint listen[TLP_MAX_LISTEN], *up = NULL;
	const char *listen_text[TLP_MAX_LISTEN];
	const char *path = NULL, *path_opt = NULL, *cpus = NULL;
	uint32_t nlisten = 0, nup = 0, shards = 0, max_conns = 0, spipes = 0, spsize = 0;
	int balance = TLP_BAL_ROUNDROBIN, pp = TLP_PP_SEND_NONE, splice = 0, other = 0, r;
	int half_close = 1;
	int udp = 0;
	uint32_t responses = TLP_RESPONSES_ANY, sessions = 4096, dgmax = TLP_UDP_DGRAM_DFLT;
	uint32_t spin = TLP_SPIN_US_DFLT, nap = TLP_NAP_US_DFLT;
	int nap_given = 0;
	int idle_given = 0;
	const char *tls_cert = NULL, *tls_key = NULL, *tls_ocsp = NULL;
	uint64_t connect = R_CONNECT.dflt, idle = R_IDLE.dflt, drain = R_DRAIN.dflt;
	struct {
		const char *s;
		size_t len;
	} *up_text = NULL;
	char why[200], shown[SHOW + 4];

	if (err && errlen)
		err[0] = '\0';
	if (!a || (argc > 0 && !argv))
		return fail(err, errlen, "no arguments");
	memset(a, 0, sizeof *a);
	up = calloc(TLP_MAX_SERVERS, sizeof *up);
	up_text = calloc(TLP_MAX_SERVERS, sizeof *up_text);
	if (!up || !up_text) {
		free(up);
		free(up_text);
		if (err && errlen)
			snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = -EINVAL;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v;

		if (!o) {
			fail(err, errlen, "missing argument %d", i);
			goto out;
		}
		if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
			r = 1;
			goto out;
		}
		if (!strcmp(o, "--splice")) {
			splice = 1;
			other = 1;
			continue;
		}
		if (!strcmp(o, "--udp")) {
			udp = 1;
			other = 1;
			continue;
		}
		v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fail(err, errlen, takes_value(o) ? "%s needs a value" : "unknown option '%s'",
			     tlp__clip(o, strlen(o), shown, sizeof shown));
			goto out;
		}
		i++;
		if (!strcmp(o, "--config") || !strcmp(o, "--check")) {
			if (path) {
				fail(err, errlen, "%s: only one of --config and --check, once", o);
				goto out;
			}
			if (!*v) {
				fail(err, errlen, "%s needs a file name", o);
				goto out;
			}
			path = v;
			path_opt = o;
			a->check = !strcmp(o, "--check");
			continue;
		}
		other = 1;
		if (!strcmp(o, "--listen")) {
			if (nlisten == TLP_MAX_LISTEN) {
				fail(err, errlen, "--listen: more than %d addresses",
				     TLP_MAX_LISTEN);
				goto out;
			}
			if (tlp_endpoint_parse(v, strlen(v), 0, &listen[nlisten], why,
					       sizeof why) < 0) {
				fail(err, errlen, "--listen: %s", why);
				goto out;
			}
			for (uint32_t j = 0; j < nlisten; j++)
				if (tlp_endpoint_same(&listen[j], &listen[nlisten])) {
					fail(err, errlen, "--listen: %s given twice",
					     tlp__clip(v, strlen(v), shown, sizeof shown));
					goto out;
				}
			listen_text[nlisten++] = v;
		} else if (!strcmp(o, "--upstream")) {
			const char *s = v;

			for (;;) {
				const char *comma = strchr(s, ',');
				size_t l = comma ? (size_t)(comma - s) : strlen(s);

				if (nup == TLP_MAX_SERVERS) {
					fail(err, errlen, "--upstream: more than %d servers",
					     TLP_MAX_SERVERS);
					goto out;
				}
				if (tlp_endpoint_parse(s, l, 1, &up[nup], why, sizeof why) < 0) {
					fail(err, errlen, "--upstream: %s", why);
					goto out;
				}
				up_text[nup].s = s;
				up_text[nup].len = l;
				/* Hosts compare lowercased, as the model keeps them. */
				if (up[nup].kind == TLP_EP_HOST) {
					for (uint32_t j = 0; j < nup; j++) {
						if (up[j].kind != TLP_EP_HOST ||
						    up[j].port != up[nup].port ||
						    up_text[j].len != l)
							continue;
						size_t k = 0;

						while (k < l &&
						       (up_text[j].s[k] | 0x20) == (s[k] | 0x20))
							k++;
						if (k == l) {
							fail(err, errlen,
							     "--upstream: %s given twice",
							     tlp__clip(s, l, shown, sizeof shown));
							goto out;
						}
					}
				} else {
					for (uint32_t j = 0; j < nup; j++)
						if (tlp_endpoint_same(&up[j], &up[nup])) {
							fail(err, errlen,
							     "--upstream: %s given twice",
							     tlp__clip(s, l, shown, sizeof shown));
							goto out;
						}
				}
				nup++;
				if (!comma)
					break;
				s = comma + 1;
			}
		} else if (!strcmp(o, "--shards")) {
			if (tools_digits32(v, 1, 1024, &shards)) {
				fail(err, errlen, "--shards: '%s' is not 1 to 1024",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
		} else if (!strcmp(o, "--cpus")) {
			uint64_t mask[16];

			if (tl_cpulist_parse(v, mask, 16) < 0) {
				fail(err, errlen,
				     "--cpus: '%s' is not a CPU list below 1024 (like 0-3,6)",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			cpus = v;
		} else if (!strcmp(o, "--balance")) {
			int k = tlp_bal_by_name(v, strlen(v));
			char names[160];

			if (k < 0) {
				tlp_bal_list(names, sizeof names, ", ", " or ");
				fail(err, errlen, "--balance: '%s' is not %s",
				     tlp__clip(v, strlen(v), shown, sizeof shown), names);
				goto out;
			}
			balance = k;
		} else if (!strcmp(o, "--proxy-protocol")) {
			int k;

			for (k = 0; k < 3 && strcmp(v, tlp__pp_names[k]); k++)
				;
			if (k == 3) {
				fail(err, errlen, "--proxy-protocol: '%s' is not none, v1 or v2",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			pp = k;
		} else if (!strcmp(o, "--max-conns")) {
			if (tools_digits32(v, 1, TLP_MAX_CONNS_LIMIT, &max_conns)) {
				fail(err, errlen, "--max-conns: '%s' is not 1 to %u",
				     tlp__clip(v, strlen(v), shown, sizeof shown),
				     TLP_MAX_CONNS_LIMIT);
				goto out;
			}
		} else if (!strcmp(o, "--splice-pipes")) {
			if (tools_digits32(v, 1, 4096, &spipes)) {
				fail(err, errlen, "--splice-pipes: '%s' is not 1 to 4096",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
		} else if (!strcmp(o, "--splice-pipe-size")) {
			uint64_t b;

			if (tlp_size_parse(v, strlen(v), &b, why, sizeof why) < 0 || b < (4u << 10) ||
			    b > (1u << 20) || (b & (b - 1))) {
				fail(err, errlen,
				     "--splice-pipe-size: '%s' is not a power of two from 4k to 1m",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			spsize = (uint32_t)b;
		} else if (!strcmp(o, "--connect-timeout")) {
			if (args_dur(o, v, R_CONNECT, &connect, err, errlen))
				goto out;
		} else if (!strcmp(o, "--drain-timeout")) {
			if (args_dur(o, v, R_DRAIN, &drain, err, errlen))
				goto out;
		} else if (!strcmp(o, "--idle-timeout")) {
			if (args_dur(o, v, R_IDLE, &idle, err, errlen))
				goto out;
			idle_given = 1;
		} else if (!strcmp(o, "--tls-cert")) {
			tls_cert = v;
		} else if (!strcmp(o, "--tls-key")) {
			tls_key = v;
		} else if (!strcmp(o, "--tls-ocsp")) {
			tls_ocsp = v;
		} else if (!strcmp(o, "--half-close")) {
			if (strcmp(v, "on") && strcmp(v, "off")) {
				fail(err, errlen, "--half-close: '%s' is not on or off",
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
			half_close = !strcmp(v, "on");
		} else if (!strcmp(o, "--spin-us")) {
			if (tools_digits32(v, 0, TLP_SPIN_US_MAX, &spin) < 0) {
				fail(err, errlen, "%s: '%s' is not a number from 0 to %u", o,
				     tlp__clip(v, strlen(v), shown, sizeof shown), TLP_SPIN_US_MAX);
				goto out;
			}
		} else if (!strcmp(o, "--nap-us")) {
			if (tools_digits32(v, 0, TLP_NAP_US_MAX, &nap) < 0) {
				fail(err, errlen, "%s: '%s' is not a number from 0 to %u", o,
				     tlp__clip(v, strlen(v), shown, sizeof shown), TLP_NAP_US_MAX);
				goto out;
			}
			nap_given = 1;
		} else if (!strcmp(o, "--max-datagram")) {
			if (tools_digits32(v, 1, TLP_UDP_DGRAM_MAX, &dgmax) < 0) {
				fail(err, errlen, "%s: '%s' is not a number from 1 to %u", o,
				     tlp__clip(v, strlen(v), shown, sizeof shown), TLP_UDP_DGRAM_MAX);
				goto out;
			}
		} else if (!strcmp(o, "--responses") || !strcmp(o, "--sessions")) {
			int rs = !strcmp(o, "--responses");

			if (tools_digits32(v, rs ? 0 : 1, rs ? 1000000 : TLP_UDP_SESSIONS_MAX,
				     rs ? &responses : &sessions) < 0) {
				fail(err, errlen, "%s: '%s' is not a number in range", o,
				     tlp__clip(v, strlen(v), shown, sizeof shown));
				goto out;
			}
		} else {
			fail(err, errlen, "unknown option '%s'",
			     tlp__clip(o, strlen(o), shown, sizeof shown));
			goto out;
		}
	}
	if (path) {
		if (other) {
			fail(err, errlen, "%s takes no other options (put them in the file)",
			     path_opt);
			goto out;
		}
		a->config_path = path;
		r = 0;
		goto out;
	}
	if (shards && cpus) {
		fail(err, errlen, "--shards and --cpus: give one (--cpus sets the count too)");
		goto out;
	}
	if (!nlisten) {
		fail(err, errlen, "--listen HOST:PORT is required (or --config FILE)");
		goto out;
	}
	if (!udp && (responses != TLP_RESPONSES_ANY || sessions != 4096 ||
		     dgmax != TLP_UDP_DGRAM_DFLT)) {
		fail(err, errlen, "--responses, --sessions and --max-datagram are for --udp");
		goto out;
	}
	if (udp && dgmax > TLP_UDP_DGRAM_DFLT &&
	    (uint64_t)dgmax * sessions > TLP_UDP_JUMBO_BYTES_MAX) {
		fail(err, errlen, "--max-datagram %u x --sessions %u is over 1 GiB of buffers "
		     "per shard: lower --sessions", dgmax, sessions);
		goto out;
	}
	if (udp && splice) {
		fail(err, errlen, "--splice is not for --udp");
		goto out;
	}
	for (uint32_t k = 0; udp && k < nlisten; k++)
		if (listen[k].kind != TLP_EP_IP) {
			fail(err, errlen, "--udp listens on IP addresses only");
			goto out;
		}
	if (!nup) {
		fail(err, errlen, "--upstream HOST:PORT is required (or --config FILE)");
		goto out;
	}
	if (!tls_cert != !tls_key) {
		fail(err, errlen, "--tls-cert and --tls-key go together");
		goto out;
	}
	if (tls_ocsp && !tls_cert) {
		fail(err, errlen, "--tls-ocsp is for --tls-cert (its OCSP staple)");
		goto out;
	}
	if (tls_cert && udp) {
		fail(err, errlen, "--tls-cert is for TCP listeners: not with --udp");
		goto out;
	}
	if (tls_cert && splice) {
		fail(err, errlen, "--splice is for plain TCP: not with --tls-cert (TLS is decrypted "
				  "in the proxy)");
		goto out;
	}

	/* Build the model as the YAML path would. */
	{
		struct tlp_arena *arena;
		struct tlp_config *cfg = tlp__new_config(&arena);
		struct ctx c = {.name = "args"};
		struct tlp_listener_cfg *l;
		struct tlp_pool_cfg *pool;

		if (!cfg)
			goto nomem;
		c.model = arena;
		cfg->shards = shards;
		cfg->drain_timeout_ns = drain;
		cfg->spin_us = spin;
		cfg->nap_us = nap;
		cfg->nap_given = nap_given;
		cfg->max_conns = max_conns;
		cfg->splice_pipes = spipes;
		cfg->splice_pipe_size = spsize;
		cfg->nlisteners = 1;
		cfg->npools = 1;
		cfg->listeners = l = tlp__zalloc(&c, arena, sizeof *l);
		cfg->pools = pool = tlp__zalloc(&c, arena, sizeof *pool);
		if (cpus && (cfg->cpus = tlp__zalloc(&c, arena, strlen(cpus) + 1)))
			memcpy((char *)cfg->cpus, cpus, strlen(cpus));
		if (c.nomem)
			goto nomem_cfg;
		tlp__listener_defaults(l);
		tlp__pool_defaults(pool);
		l->name = "default";
		pool->name = "default";
		l->pool = 0;
		l->connect_timeout_ns = connect;
		l->idle_timeout_ns = idle;
		l->splice = splice;
		l->half_close = half_close;
		if (udp) {
			l->proto = TLP_PROTO_UDP;
			l->responses = responses;
			l->sessions = sessions;
			l->max_datagram = dgmax;
			if (!idle_given)
				l->idle_timeout_ns = UDP_IDLE_DFLT;
		}
		if (tls_cert) {
			struct tlp_tls_cert_cfg *k = tlp__zalloc(&c, arena, sizeof *k);
			char *cp = tlp__zalloc(&c, arena, strlen(tls_cert) + 1);
			char *kp = tlp__zalloc(&c, arena, strlen(tls_key) + 1);
			char *op = tls_ocsp ? tlp__zalloc(&c, arena, strlen(tls_ocsp) + 1) : NULL;

			if (c.nomem)
				goto nomem_cfg;
			memcpy(cp, tls_cert, strlen(tls_cert));
			memcpy(kp, tls_key, strlen(tls_key));
			if (op)
				memcpy(op, tls_ocsp, strlen(tls_ocsp));
			k->cert = cp;
			k->key = kp;
			k->ocsp = op;
			l->tls.enabled = 1;
			l->tls.certs = k;
			l->tls.ncerts = 1;
		}
		pool->balance = balance;
		pool->proxy_protocol = pp;
		l->listen = tlp__zalloc(&c, arena, nlisten * sizeof *l->listen);
		pool->servers = tlp__zalloc(&c, arena, nup * sizeof *pool->servers);
		if (c.nomem)
			goto nomem_cfg;
		for (uint32_t k = 0; k < nlisten; k++) {
			l->listen[k] = listen[k];
			if (tlp__ep_own(&c, &l->listen[k], listen_text[k], strlen(listen_text[k])))
				goto nomem_cfg;
		}
		l->nlisten = nlisten;
		for (uint32_t k = 0; k < nup; k++) {
			struct tlp_server_cfg *s = &pool->servers[k];

			s->ep = up[k];
			if (tlp__ep_own(&c, &s->ep, up_text[k].s, up_text[k].len))
				goto nomem_cfg;
			s->weight = 1;
			s->id = tlp__ep_id(&s->ep);
		}
		pool->nservers = nup;
		a->cfg = cfg;
		r = 0;
		goto out;
nomem_cfg:
		tlp_config_free(cfg);
	}
nomem:
	if (err && errlen)
		snprintf(err, errlen, "out of memory");
	r = -ENOMEM;
out:
	free(up);
	free(up_text);
	if (r != 0) {
		a->cfg = NULL;
		a->config_path = NULL;
		a->check = 0;
		if (r == 1 && err && errlen)
			err[0] = '\0';
	}
	return r;
}
