/* tools/tlproxy/config.c: tlproxy's config: YAML text or a file into the model (config_yaml.c reads, config_schema.c checks, config_values.c parses values), and its release; the command line is config_args.c (see config.h and docs/TLPROXY.md). */
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
#include "../reason.h"

static const char *clean_name(const char *s, char *buf, size_t cap)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < cap; i++)
		buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

struct tlp_config *tlp__new_config(struct tlp_arena **arena)
{
	struct tlp_config *cfg;

	*arena = calloc(1, sizeof **arena);
	if (!*arena)
		return NULL;
	cfg = tlp__arena_alloc(*arena, sizeof *cfg);
	if (!cfg) {
		tlp__arena_free(*arena);
		*arena = NULL;
		return NULL;
	}
	cfg->arena = *arena;
	cfg->admin_timeout_ns = R_ADMIN_TIMEOUT.dflt;
	cfg->drain_timeout_ns = R_DRAIN.dflt;
	cfg->spin_us = TLP_SPIN_US_DFLT;
	cfg->nap_us = TLP_NAP_US_DFLT;
	return cfg;
}

static void note_nomem(struct ctx *c)
{
	struct tlp_diag *d = c->diag;

	if (d && d->count < TLP_CFG_MAX_ERRORS) {
		struct tlp_diag_entry *e = &d->e[d->count++];

		e->line = 0;
		e->col = 0;
		snprintf(e->text, sizeof e->text, "%s: out of memory", c->name);
	}
	if (d)
		d->total++;
}

int tlp_config_parse(const char *text, size_t len, const char *name, struct tlp_config **out,
		     struct tlp_diag *diag)
{
	char clean[200];
	struct ctx c = {.diag = diag,
			.name = clean_name(name ? name : "config", clean, sizeof clean)};
	struct tlp_arena *model = NULL;
	struct tlp_config *cfg;
	struct ynode *root;
	int empty;

	if (diag)
		memset(diag, 0, sizeof *diag);
	if (out)
		*out = NULL;
	if (!out || (!text && len))
		return -EINVAL;
	c.tree = calloc(1, sizeof *c.tree);
	cfg = tlp__new_config(&model);
	if (!c.tree || !cfg) {
		free(c.tree);
		tlp__arena_free(model);
		note_nomem(&c);
		return -ENOMEM;
	}
	c.model = model;
	root = tlp__load_tree(&c, text ? text : "", len, &empty);
	/* "---" alone is a document holding one empty value. */
	if (root && root->kind == YN_SCALAR && root->len == 0) {
		root = NULL;
		empty = 1;
	}
	if (root)
		tlp__parse_top(&c, root, cfg);
	else if (empty && !c.errors && !c.nomem)
		tlp__errat(&c, 1, 1, "the config is empty (it needs listeners and pools)");
	tlp__arena_free(c.tree);
	if (c.nomem) {
		tlp__arena_free(model);
		note_nomem(&c);
		return -ENOMEM;
	}
	if (c.errors) {
		tlp__arena_free(model);
		return -EINVAL;
	}
	*out = cfg;
	return 0;
}

int tlp_config_load(const char *path, struct tlp_config **out, struct tlp_diag *diag)
{
	struct tlp_diag local;
	struct stat st;
	char *text, shown[200];
	size_t got = 0;
	int fd, r;

	if (!diag)
		diag = &local;
	memset(diag, 0, sizeof *diag);
	if (out)
		*out = NULL;
	if (!path || !out)
		return -EINVAL;
	clean_name(path, shown, sizeof shown);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown, strerror(-r));
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TLP_CONFIG_FILE_MAX) {
		close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown,
			 S_ISREG(st.st_mode) ? "larger than 4 MiB" : "not a regular file");
		return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		diag->total = diag->count = 1;
		snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: out of memory", shown);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			free(text);
			close(fd);
			diag->total = diag->count = 1;
			snprintf(diag->e[0].text, sizeof diag->e[0].text, "%s: %s", shown,
				 n < 0 ? strerror(-r) : "file shrank while being read");
			return r;
		}
		got += (size_t)n;
	}
	close(fd);
	r = tlp_config_parse(text, got, path, out, diag);
	free(text);
	return r;
}

uint32_t tlp_config_tcp_listeners(const struct tlp_config *c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->nlisteners; i++)
		n += c->listeners[i].proto == TLP_PROTO_TCP;
	return n;
}

void tlp_config_free(struct tlp_config *c)
{
	if (c)
		tlp__arena_free(c->arena);
}
