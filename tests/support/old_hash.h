/* The aggregation table's hash before it was keyed (git history of src/core/table.c), kept for
 * the hash-flooding test and the colliding-id generator: an attacker who knows an unkeyed hash
 * computes ids that all land on one slot, offline. */
#ifndef HOTCOUNT_TEST_OLD_HASH_H
#define HOTCOUNT_TEST_OLD_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HC_COLLIDE_ID_MAX 24

/* The old unkeyed table hash. */
uint32_t hc_old_table_hash(const char *key, size_t len);

/* Writes the next id after *counter (ids "c<hex counter>", advancing *counter) whose old hash has
 * its low `bits` bits all zero, so that every such id has the same home slot in any table of at
 * most 2^bits slots. Returns its length; out holds HC_COLLIDE_ID_MAX bytes. About 2^bits hashes
 * per id. */
size_t hc_old_hash_next_colliding(uint64_t *counter, unsigned bits, char *out);

#endif
