/* tools/tlshard/json.h: tlshard's JSON output on cJSON (Debian: libcjson-dev), for the files that build it (json.c, topo.c); the others reach it through tlshard.h's calls, which a build without cJSON answers with one line (absent.c). */
#ifndef TLSHARD_JSON_H
#define TLSHARD_JSON_H

#include <cJSON.h>

#include "tlshard.h"

/* Print j (and free it), pretty or on one line; 1 if cJSON ran out of
 * memory, else 0. */
int tlshard_put_json(cJSON *j, int pretty);
/* The plan as an object: shards, numa_nodes, smt, places[]. */
cJSON *tlshard_plan_json(const tl_plan *p, int smt);

#endif /* TLSHARD_JSON_H */
