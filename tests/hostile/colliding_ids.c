/* A hash-flooding event stream: N like events whose post ids all collide in the low BITS bits
 * of the aggregation table's OLD (unkeyed) hash, one JSON object per line, for
 * `hotcount produce` or any producer:
 *
 *   colliding_ids N [BITS]      BITS default 16 (every table of up to 65 536 slots)
 *
 * Against the old hash these ids cost O(N) probes each (the issue measured 640x random ids for
 * 48 870 of them); against the keyed hash they cost what random ids cost
 * (tests/unit/test_table.c, table_resists_old_hash_collisions). */
#include <stdio.h>
#include <stdlib.h>

#include "old_hash.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: colliding_ids N [BITS]\n");
        return 2;
    }
    unsigned long long n = strtoull(argv[1], NULL, 10);
    unsigned long bits = argc == 3 ? strtoul(argv[2], NULL, 10) : 16;
    if (bits < 1 || bits > 28) {
        fprintf(stderr, "colliding_ids: BITS must be within 1..28\n");
        return 2;
    }
    uint64_t counter = 0;
    char id[HC_COLLIDE_ID_MAX];
    for (unsigned long long i = 0; i < n; i++) {
        hc_old_hash_next_colliding(&counter, (unsigned)bits, id);
        printf("{\"post_id\":\"%s\",\"op\":\"like\"}\n", id);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
