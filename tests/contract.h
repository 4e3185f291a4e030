/* tests/contract.h: what the contract suite's files share: the test table type and small pattern helpers. */
#ifndef TL_TESTS_CONTRACT_H
#define TL_TESTS_CONTRACT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <CUnit/CUnit.h>
#include "harness.h"

/* One test of the suite: its contract section ("4.7 stream end") and name. */
struct test_def {
	const char *suite, *name;
	CU_TestFunc fn;
};
#define T(suite, fn) { suite, #fn, fn }

/* The tables of the suite's files, each ended by an entry with fn NULL;
 * contract.c runs them in this order. */
extern const struct test_def tl_contract_streams[]; /* contract_streams.c: 2.5, 4.2, 4.7 */
extern const struct test_def tl_contract_caps[];    /* contract_caps.c: 4.10 */
extern const struct test_def tl_contract_sockets[]; /* contract_sockets.c: 4.8 */
extern const struct test_def tl_contract_deadlines[]; /* contract_deadlines.c: 4.9 */
extern const struct test_def tl_contract_handover[]; /* contract_handover.c: 4.6 */
extern const struct test_def tl_contract_poll[];    /* contract_poll.c: 5 foreign descriptors, c-ares */
extern const struct test_def tl_contract_signal[];  /* contract_signal.c: 5 signals, external waits */
extern const struct test_def tl_contract_proc[];    /* contract_proc.c: 5 processes */
extern const struct test_def tl_contract_tty[];     /* contract_tty.c: 5 terminals, watches */
extern const struct test_def tl_contract_splice[];  /* contract_splice.c: 4.11 */
extern const struct test_def tl_contract_dgram[];   /* contract_dgram.c: D1-D10 */
extern const struct test_def tl_contract_data[];    /* contract_data.c: the pointer per handle */
extern const struct test_def tl_contract_try_write[]; /* contract_try_write.c: 4.4a */

/* tl_now() + ms. */
static inline uint64_t in_ms(tl_loop *l, uint64_t ms)
{
	return tl_now(l) + ms * H_MS;
}

static inline tl_config cfg_default(void)
{
	tl_config c;
	tl_config_init(&c);
	return c;
}

static inline tl_loop_stats stats(tl_loop *l)
{
	tl_loop_stats s;
	memset(&s, 0, sizeof s);
	tl_loop_stats_get(l, &s);
	return s;
}

/* Fill buf[0..len) with the test pattern from stream offset off. */
static inline void fill_pattern(void *buf, size_t len, uint64_t off)
{
	uint8_t *b = buf;
	for (size_t i = 0; i < len; i++)
		b[i] = h_pattern(off + i);
}

/* Index of the first mismatch of buf against the pattern at off, or -1. */
static inline long check_pattern(const void *buf, size_t len, uint64_t off)
{
	const uint8_t *b = buf;
	for (size_t i = 0; i < len; i++)
		if (b[i] != h_pattern(off + i))
			return (long)i;
	return -1;
}

static inline int all_bytes(const void *buf, size_t len, uint8_t v)
{
	const uint8_t *b = buf;
	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

#endif
