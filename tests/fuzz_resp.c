/* tests/fuzz_resp.c: libFuzzer target for the Redis protocol's request reader (lib/bufio/resp.c, turnloop/resp.h): what a client sends, cut into leases as the input says, read command after command; every answer held to what resp.h promises, and to what the same bytes give read in one piece; each command looked up in a command table, held to a reference lookup. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turnloop/resp.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The reader under test is this file's, in place of the library's
 * tl_rbuf_peek and tl_rbuf_consume (the target links resp.c alone): the
 * stream's bytes cut into leases, a peek's view being the rest of the lease
 * at the stream's next byte when it holds min, else exactly min bytes
 * copied into a heap block of that size (an overread is ASan's), as
 * bufio.h says. Fed whole: the stream ends (EOF) or not, as the input says.
 *
 * The input: byte 0: bit 0 the stream ended, bits 1-7 the first lease's
 * length - 1 (0: one lease of every byte); byte 1: max_args = 1 + value;
 * bytes 2-3: max_len, big-endian; byte 4: the reader's max = 64 << (value
 * & 7); then the stream (up to 64 KiB). Leases after the first take the
 * stream's bytes as values in turn, each its own length (1 .. 256).
 */
enum { STREAM_MAX = 64 << 10, CMDS_MAX = STREAM_MAX / 10 + 1 }; /* a command takes 10 bytes at least */

static struct {
	const uint8_t *s;       /* the stream */
	uint32_t n, pos;        /* its length, the next unconsumed byte */
	uint32_t cut[STREAM_MAX + 1], ncut; /* where leases end, ascending; the last is n */
	uint32_t max;           /* the reader's max */
	int ended;
	uint8_t *block;         /* the last assembled view */
	uint32_t view;          /* the last view's length (0: none) */
} fk;

int tl_rbuf_peek(tl_rbuf *r, uint32_t min, const uint8_t **data) {
	uint32_t end = fk.n;
	(void)r;
	if (min == 0)
		min = 1;
	free(fk.block);
	fk.block = NULL;
	fk.view = 0;
	if (min > fk.max)
		return -EMSGSIZE;
	if (fk.n - fk.pos < min)
		return fk.ended && fk.n > fk.pos ? -EPROTO : 0;
	for (uint32_t i = 0; i < fk.ncut; i++)
		if (fk.cut[i] > fk.pos) {
			end = fk.cut[i];
			break;
		}
	if (end - fk.pos >= min) {
		*data = fk.s + fk.pos;
		return (int)(fk.view = end - fk.pos);
	}
	if (!(fk.block = malloc(min)))
		abort();
	memcpy(fk.block, fk.s + fk.pos, min);
	*data = fk.block;
	return (int)(fk.view = min);
}

int tl_rbuf_consume(tl_rbuf *r, uint32_t n) {
	(void)r;
	if (n > fk.view) /* resp.c consumes no more than the view it was given */
		abort();
	fk.pos += n;
	fk.view = 0;
	free(fk.block);
	fk.block = NULL;
	return 0;
}

/* What one reading gave: each command's arguments as offsets in the stream
 * (an argument is checked to lie inside the view it came in, which is the
 * stream's bytes at the stream's position), and how it ended. */
struct run {
	uint32_t ncmd, err;
	uint64_t sig[CMDS_MAX + 1]; /* sig[k]: a hash of the first k commands' arguments */
};
static struct run cut, whole;

static tl_resp_arg av[1u << 8];

/* A command table as a host's: what tl_resp_command_find says of a
 * command is held to a reference: the entry whose name equals the
 * command's first argument with A-Z read as a-z (no other byte folded). */
static const struct ent {
	tl_resp_command c;
	int tag;
} table[] = {{{"get", 2}, 0}, {{"set", 3}, 1}, {{"del", -2}, 2}, {{"ping", -1}, 3}, {{"config|get", 3}, 4},
	     {{"a", 1}, 5}, {{"fifteen-bytes-x", -1}, 6}};

static void check_find(const tl_resp_arg *a, uint32_t ac) {
	int rc = tl_resp_command_find(a, ac, table, sizeof table / sizeof *table, sizeof *table), want = -ENOENT;
	for (uint32_t i = 0; i < sizeof table / sizeof *table && want == -ENOENT; i++) {
		const char *nm = table[i].c.name;
		uint32_t j = 0;
		while (j < a[0].n && nm[j] &&
		       (uint8_t)nm[j] == (a[0].p[j] >= 'A' && a[0].p[j] <= 'Z' ? a[0].p[j] + 32 : a[0].p[j]))
			j++;
		if (j == a[0].n && !nm[j])
			want = (table[i].c.arity >= 0 ? ac == (uint32_t)table[i].c.arity : ac >= (uint32_t)-table[i].c.arity)
				       ? (int)i
				       : -EDOM;
	}
	if (rc != want || (rc < 0 && !tl_resp_error_reply(rc)))
		abort();
}

static void read_all(tl_resp *s, struct run *out, uint32_t max_args) {
	uint32_t ac;
	int rc;
	uint64_t sig = 1469598103934665603ull;
	out->ncmd = 0;
	out->sig[0] = sig;
	while ((rc = tl_resp_next(s, av, &ac)) > 0) {
		uint32_t at = fk.pos;
		if (ac == 0 || ac > max_args || out->ncmd >= CMDS_MAX)
			abort();
		if (rc != 1)
			abort();
		for (uint32_t i = 0; i < ac; i++) {
			const uint8_t *lo = fk.block ? fk.block : fk.s + at, *hi = lo + fk.view;
			if (av[i].p < lo || av[i].p + av[i].n > hi || av[i].n > s->max_len)
				abort(); /* inside the view it came in */
			for (uint32_t j = 0; j < av[i].n; j++)
				sig = (sig ^ av[i].p[j]) * 1099511628211ull;
			sig = (sig ^ 0x100 ^ av[i].n) * 1099511628211ull;
		}
		out->sig[++out->ncmd] = sig = (sig ^ 0x200) * 1099511628211ull;
		check_find(av, ac);
		if (rc == 1 && (tl_resp_next(s, av, &ac) != 1)) /* not done: the same again */
			abort();
		tl_resp_done(s);
		if ((out->ncmd & 3) == 0)
			tl_resp_consume(s); /* now and then, as a host that stalls does */
	}
	tl_resp_consume(s);
	if (rc == 0 && fk.ended && fk.pos != fk.n)
		abort(); /* at the end, bytes held mean -EPROTO, not "wait" */
	if (rc < 0 && tl_resp_next(s, av, &ac) != rc)
		abort(); /* sticky */
	if (rc < 0 && rc != -EBADMSG && rc != -ERANGE && rc != -EILSEQ && rc != -EMSGSIZE && rc != -EPROTO)
		abort();
	if (rc < 0 && rc != -EPROTO && !tl_resp_error_reply(rc))
		abort(); /* every error but the stream's end has a line for the client */
	out->err = (uint32_t)-rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
	tl_resp s;
	uint32_t max_args, max_len, first;
	if (size < 5)
		return 0;
	max_args = 1 + (uint32_t)data[1] % (sizeof av / sizeof *av);
	max_len = (uint32_t)data[2] << 8 | data[3];
	fk = (typeof(fk)){.s = data + 5, .n = (uint32_t)(size - 5 > STREAM_MAX ? STREAM_MAX : size - 5),
			  .max = 64u << (data[4] & 7), .ended = data[0] & 1};
	first = data[0] >> 1;
	/* Cut into leases. */
	for (uint32_t at = first ? first : fk.n, k = 0; at < fk.n; at += 1 + fk.s[k++ % fk.n])
		fk.cut[fk.ncut++] = at;
	fk.cut[fk.ncut++] = fk.n;
	if (tl_resp_init(&s, (tl_rbuf *)&fk, max_args, max_len) != 0)
		abort();
	read_all(&s, &cut, max_args);
	/* The same bytes in one lease: the same commands and the same end. But
	 * a command longer than the reader's max is -EMSGSIZE only where it
	 * must be assembled (a lease's view may be longer than max): when
	 * either reading ends so, the other read the same commands before. And
	 * a bad command seen in pieces may first ask for more bytes than the
	 * stream has (its lower bound counts the arguments still to come). */
	fk.pos = 0;
	fk.ncut = 0;
	fk.cut[fk.ncut++] = fk.n;
	if (tl_resp_init(&s, (tl_rbuf *)&fk, max_args, max_len) != 0)
		abort();
	read_all(&s, &whole, max_args);
	if (cut.err == EMSGSIZE || whole.err == EMSGSIZE) {
		uint32_t k = cut.ncmd < whole.ncmd ? cut.ncmd : whole.ncmd;
		if (cut.sig[k] != whole.sig[k] || (cut.ncmd < whole.ncmd && cut.err != EMSGSIZE) ||
		    (whole.ncmd < cut.ncmd && whole.err != EMSGSIZE))
			abort(); /* the one that read fewer stopped at a command too long */
	} else if (cut.ncmd != whole.ncmd || cut.sig[cut.ncmd] != whole.sig[whole.ncmd]) {
		abort();
	} else if (cut.err != whole.err && !((cut.err == 0 || cut.err == EPROTO) && whole.err)) {
		abort(); /* but a reader waiting for bytes a bad command's lower bound asked
			    for has not seen yet, where the whole stream shows it bad */
	}
	free(fk.block);
	fk.block = NULL;
	return 0;
}
