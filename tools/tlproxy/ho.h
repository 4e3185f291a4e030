/* tools/tlproxy/ho.h: the interface of the per-connection half of live takeover (ho.c); the process side is takeover.h. */
#ifndef TLP_HO_H
#define TLP_HO_H

/* Calls: ho -> backend, fwd, conn, wheel, state, world, takeover. Only the
 * shard's switch calls in; the stages below reach it by tlp_ho_hook. */
#include "state.h"

/* A TLP_MSG_HO_* message on this shard (arg and payload as sent). */
void tlp_ho_msg(tl_shard *s, uint32_t type, uint64_t arg, uint64_t payload);
/* A write to side d of c, being handed over, completed (e): what it did
 * not write of its len bytes at p (number seq) is kept. */
void tlp_ho_cut_write(struct tlp_shard *sh, struct tlp_conn *c, int d, const tl_completion *e,
		      const uint8_t *p, uint32_t len, uint32_t seq);
/* Something c, being handed over, waited for ended: detach it when all has. */
void tlp_ho_step(struct tlp_shard *sh, struct tlp_conn *c);
/* A write of the carry c came with completed. */
void tlp_carry_written(struct tlp_shard *sh, struct tlp_conn *c);

/* Between ho.c and ho_adopt.c. Carry on forwarding a connection handed
 * in (takes in); 0 or a negative errno (in freed, its descriptors
 * closed). */
int tlp_shard_adopt(tl_shard *s, struct tlp_ho_in *in);
/* Forward c again: the bytes of in (or none) first, then reads on the
 * sides still open, and the FINs read but not passed on (ho.c). */
void tlp_ho_carry_on(struct tlp_shard *sh, struct tlp_conn *c, struct tlp_ho_in *in);
#endif /* TLP_HO_H */
