/* Layer: core. FNV-1a, 32 and 64 bits (offset bases and primes of the FNV reference): the one
 * home of this unkeyed hash. Only for what must hash the same in every process and is compared
 * for equality or picks a partition: the producer keying of the contract (hc_salt), the writer
 * tag of the hotcount-window header, serve's ETags, DynamoDB's batch id. Never to index a table
 * keyed by input anyone can choose: that is hc_siphash13 under the process key
 * (tests/hostile/hash_seeding.py fails on any other use). Pure functions, any thread. */
#ifndef HOTCOUNT_FNV_H
#define HOTCOUNT_FNV_H

#include <stddef.h>
#include <stdint.h>

#define HC_FNV1A32_OFFSET_BASIS 2166136261u
#define HC_FNV1A32_PRIME 16777619u
#define HC_FNV1A64_BASIS 14695981039346656037ULL
#define HC_FNV1A64_PRIME 1099511628211ULL

/* FNV-1a 32-bit of len bytes (data may be NULL when len is 0). */
uint32_t hc_fnv1a32(const void *data, size_t len);

/* FNV-1a 64-bit over len bytes, continuing from h (HC_FNV1A64_BASIS to start), so that several
 * pieces hash as their concatenation. */
uint64_t hc_fnv1a64(uint64_t h, const void *data, size_t len);

#endif
