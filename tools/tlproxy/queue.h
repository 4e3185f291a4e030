/* tools/tlproxy/queue.h: the queue's interface: clients waiting for a server of a pool. */
#ifndef TLP_QUEUE_H
#define TLP_QUEUE_H

/* Calls: queue -> wheel, state, world. */
#include "state.h"

/* Queue c behind the pool's waiting clients (every server full): 0, or -1
 * when the listener's queue is full (queue_max; 0: no queue). */
int tlp_q_add(struct tlp_shard *sh, struct tlp_conn *c);
/* Take c out of its pool's queue (it must be in it). */
void tlp_q_del(struct tlp_shard *sh, struct tlp_conn *c);

#endif /* TLP_QUEUE_H */
