/* Layer: core. Per-post sums for one window: the aggregation table both stages use.
 *
 * Stage 1 adds one event at a time (delta +-1, events 1); stage 2 adds whole partials. An entry
 * keeps the sum of deltas, the number of events and the min/max event ts seen.
 *
 * Bounded: at most max_keys distinct posts; adding a new post to a full table returns
 * HC_ERR_FULL and changes nothing, so the caller flushes and adds again. An existing post is
 * still accepted when the table is full.
 *
 * Memory: hc_table_new allocates for min(max_keys, 1024) keys; the table then grows by doubling
 * (never past max_keys) as a window needs more, and never shrinks: hc_table_clear resets it in
 * O(used) and keeps the capacity, so windows after the first busy one do not allocate. Per live
 * key it costs a 48-byte entry, 2..4 8-byte slots and the key bytes in an arena; with the
 * doubling slack that is 80..160 bytes per key for 16-byte post ids (see hc_table_memory), on
 * top of a ~80 KiB base. On Linux the arrays are mappings of their own that grow in place
 * (mremap) and go back to the kernel on destroy: a growth leaves no copy behind in the
 * allocator, so the table's resident memory is what hc_table_memory counts, at most, and only
 * the pages its keys touched.
 *
 * Open addressing with linear probing on a power-of-two slot array kept <= 50% full. The hash
 * is SipHash-1-3 under a per-process random key (hotcount/siphash.h): post ids come from any
 * producer, and ids that collide cannot be computed without the key (hash flooding). Per
 * process: never persist hc_table_entry_t.hash.
 *
 * Not thread-safe: one owner thread. */
#ifndef HOTCOUNT_TABLE_H
#define HOTCOUNT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

#define HC_TS_NONE INT64_MIN /* ts_min/ts_max of an entry with no timestamped event */

/* now_ms - ts_ms saturated to int64: the age of an event ts, which is any int64 a producer
 * wrote (a ts of -2^63 + 1 must not overflow the latency arithmetic). Any thread. */
static inline int64_t hc_ts_age_ms(int64_t now_ms, int64_t ts_ms)
{
    int64_t age;
    if (__builtin_sub_overflow(now_ms, ts_ms, &age)) {
        return ts_ms < 0 ? INT64_MAX : INT64_MIN;
    }
    return age;
}

typedef struct hc_table_entry {
    /* borrowed from the table's arena; not NUL-terminated; may contain NUL bytes; valid until
     * the next add/clear/destroy (an add may move the arena) */
    const char *post_id;
    uint32_t post_id_len;
    uint32_t hash; /* the table's own hash of post_id: per process, never persist it */
    int64_t delta;
    int64_t events;
    int64_t ts_min; /* HC_TS_NONE when no event carried ts */
    int64_t ts_max;
} hc_table_entry_t;

typedef struct hc_table hc_table_t;

/* 1 <= max_keys <= 2^31. Returns NULL on allocation failure or a max_keys out of range. */
hc_table_t *hc_table_new(size_t max_keys);
void hc_table_destroy(hc_table_t *tbl);

/* Adds to post_id's entry, creating it if absent (the key bytes are copied). ts_min/ts_max:
 * HC_TS_NONE when unknown; otherwise the entry's ts_min becomes the min and its ts_max the max
 * over the values that are not HC_TS_NONE (each stays HC_TS_NONE until a ts arrives). Stage 1
 * passes ts, ts (or HC_TS_NONE twice) for one event; stage 2 passes a partial's pair.
 * Returns HC_OK; or, with nothing changed: HC_ERR_FULL when the post is new and the table holds
 * max_keys posts; HC_ERR_INVALID when post_id_len > UINT32_MAX or the entry's delta or events, or
 * the table's event total, would overflow int64; HC_ERR_FATAL when memory cannot grow.
 * Invalidates pointers from hc_table_entry(). */
hc_err_t hc_table_add(hc_table_t *tbl, const char *post_id, size_t post_id_len, int64_t delta,
                      int64_t events, int64_t ts_min, int64_t ts_max);

bool hc_table_is_full(const hc_table_t *tbl);
bool hc_table_is_empty(const hc_table_t *tbl);
size_t hc_table_count(const hc_table_t *tbl);   /* distinct posts */
int64_t hc_table_events(const hc_table_t *tbl); /* sum of events over entries */
size_t hc_table_max_keys(const hc_table_t *tbl);

/* Entries in insertion order, 0 <= i < hc_table_count(). Borrowed; valid until the next
 * add/clear/destroy. */
const hc_table_entry_t *hc_table_entry(const hc_table_t *tbl, size_t i);

/* The entry of post_id, or NULL. Borrowed; valid until the next add/clear/destroy. */
const hc_table_entry_t *hc_table_find(const hc_table_t *tbl, const char *post_id,
                                      size_t post_id_len);

/* Empties the table, keeping its memory (and capacity): O(used) when few keys were used. */
void hc_table_clear(hc_table_t *tbl);

/* Slots examined by every hc_table_add so far (1 per add when nothing collides), never reset:
 * the cost measure of the hash-flooding test. */
uint64_t hc_table_probes(const hc_table_t *tbl);

/* Bytes the table holds now, allocated capacity included (for the memory metrics and
 * benchmarks). */
size_t hc_table_memory(const hc_table_t *tbl);

#endif
