/* tests/fuzz_tlp_handover.c: libFuzzer target for tlproxy's takeover wire format (tools/tlproxy/handover.c): the input is a stream of records as a successor or predecessor process might send them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, long r)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tlp_handover: %s (returned %ld)\n", what, r);
	abort();
}

static uint8_t out[TLP_HO_HDR + TLP_HO_BODY_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	/* Records one after the other, as the stream carries them. */
	while (off < size) {
		struct tlp_ho_hdr h;
		struct tlp_ho_msg m;
		size_t left = size - off;
		uint8_t *body;
		int r = tlp_ho_hdr_decode(data + off, left, &h), e;

		check(r == TLP_HO_HDR || r == -EAGAIN || r == -EPROTO || r == -EPROTONOSUPPORT,
		      "header: unexpected return", r);
		if (r != TLP_HO_HDR)
			return 0;
		check(h.version == TLP_HO_VERSION && h.type > 0 && h.type < TLP_HO_TYPE_COUNT &&
			      h.nfds == tlp_ho_type_fds(h.type) && h.len <= TLP_HO_BODY_MAX,
		      "header fields", h.len);
		if (h.len > left - TLP_HO_HDR)
			return 0;
		/* An exact heap copy of the body: ASan sees any read past it. */
		body = malloc(h.len ? h.len : 1);
		memcpy(body, data + off + TLP_HO_HDR, h.len);
		r = tlp_ho_decode(&h, h.len ? body : NULL, h.len, &m);
		check(r == 0 || r == -EPROTO, "body: unexpected return", r);
		if (r == 0) {
			/* What decodes encodes back to the same bytes. */
			long want = tlp_ho_size(&m);

			check(want == (long)(TLP_HO_HDR + h.len), "size of the decoded record", want);
			e = tlp_ho_encode(out, sizeof out, &m);
			check(e == want, "re-encode", e);
			check(!memcmp(out, data + off, (size_t)e), "re-encoded bytes differ", e);
			if (m.type == TLP_HO_CONN)
				for (int s = 0; s < 2; s++)
					check(m.u.conn.carry_len[s] <= TLP_HO_CARRY_MAX &&
						      (!m.u.conn.carry_len[s] ||
						       (m.u.conn.carry[s] >= body &&
							m.u.conn.carry[s] + m.u.conn.carry_len[s] <= body + h.len)),
					      "carry outside the body", s);
		}
		free(body);
		off += TLP_HO_HDR + h.len;
	}
	return 0;
}
