/* tests/fuzz_tlp_config.c: libFuzzer target for tlproxy's YAML config loader (tools/tlproxy/config.c): the input is the config text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tlp_model_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, int r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_config: %s (returned %d)\n", what, r);
	abort();
}

static struct tlp_diag d1, d2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tlp_config *c1 = (void *)1, *c2 = (void *)1;
	const char *problem;
	int r1, r2;

	/* The loader must not read past size: libFuzzer's buffer has no NUL. */
	r1 = tlp_config_parse((const char *)data, size, "fuzz", &c1, &d1);
	check(r1 == 0 || r1 == -EINVAL || r1 == -ENOMEM, "unexpected return", r1);
	if (r1 == 0) {
		check(c1 != NULL && d1.count == 0 && d1.total == 0, "accepted with errors", r1);
		problem = tlp_model_problem(c1);
		if (problem)
			fprintf(stderr, "fuzz_tlp_config: model: %s\n", problem);
		check(problem == NULL, "accepted a bad model", r1);
	} else {
		check(c1 == NULL, "model left after an error", r1);
		check(d1.count >= 1 && d1.count <= TLP_CFG_MAX_ERRORS && d1.total >= d1.count,
		      "refused without a reason", r1);
	}
	for (uint32_t i = 0; i < d1.count; i++) {
		const struct tlp_diag_entry *e = &d1.e[i];
		char prefix[64];

		check(memchr(e->text, '\0', sizeof e->text) != NULL, "error not terminated", r1);
		snprintf(prefix, sizeof prefix, "fuzz:%u:%u: ", e->line, e->col);
		check(r1 == -ENOMEM || (e->line >= 1 && e->col >= 1 &&
					!strncmp(e->text, prefix, strlen(prefix))),
		      "error not located as fuzz:LINE:COL:", r1);
		check(strchr(e->text, '\n') == NULL, "error of more than one line", r1);
	}
	/* No hidden state: the same text loads the same way, diag or not. */
	r2 = tlp_config_parse((const char *)data, size, "fuzz", &c2, &d2);
	check(r1 == r2 && d1.count == d2.count && d1.total == d2.total, "not repeatable", r2);
	for (uint32_t i = 0; i < d1.count; i++)
		check(!strcmp(d1.e[i].text, d2.e[i].text), "different errors the second time", r2);
	tlp_config_free(c2);
	c2 = (void *)1;
	r2 = tlp_config_parse((const char *)data, size, "fuzz", &c2, NULL);
	check(r1 == r2, "different without a diag", r2);
	tlp_config_free(c1);
	tlp_config_free(c2);
	return 0;
}
