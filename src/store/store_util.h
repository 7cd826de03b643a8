/* Layer: store (private to src/store/). What the backends share, written once: the order of post
 * ids, sorting and merging a batch's deltas, a top-N heap over a scan, a set of post ids seen by
 * a scan (keyed hash), FNV-1a (for ids, not tables) and percent-decoding. Plain functions on the
 * caller's memory: no I/O, no server library, any thread (each call on its own data). */
#ifndef HOTCOUNT_STORE_UTIL_H
#define HOTCOUNT_STORE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/fnv.h"
#include "hotcount/store.h"
#include "hotcount/topn.h"

/* ---- order ---- */

/* Post ids in byte order, the shorter first on a common prefix (the "C" collation's order, which
 * PostgreSQL's and SQLite's indexes use too): < 0, 0 or > 0. */
int hc_store_post_id_cmp(const char *a, size_t a_len, const char *b, size_t b_len);

/* qsort comparators: hc_store_delta_t by post id, hc_store_offset_t by partition. */
int hc_store_delta_cmp(const void *a, const void *b);
int hc_store_offset_cmp(const void *a, const void *b);

/* Sorts d[0..count) by post id and sums the deltas of an id listed more than once into one entry;
 * *count_out is the number of distinct ids. false when such a sum overflows: *bad_out is then the
 * index (in d, as sorted) of the delta that would overflow it, and d is sorted but half merged. */
bool hc_store_deltas_merge(hc_store_delta_t *d, size_t count, size_t *count_out, size_t *bad_out);

/* ---- top N ---- */

/* The ranking of `top`: more likes first, then post ids in hc_store_post_id_cmp's order; < 0 when
 * a ranks before b. */
int hc_store_row_rank(const hc_store_row_t *a, const hc_store_row_t *b);

/* The best n rows of a scan, holding only n: the core's top-N heap (hotcount/topn.h) over the
 * caller's rows (borrowed), ranked by hc_store_row_rank. */
typedef struct hc_store_top {
    hc_topn_t heap;
} hc_store_top_t;

void hc_store_top_init(hc_store_top_t *top, hc_store_row_t *rows, size_t n);
/* An hc_store_row_fn (opaque: the hc_store_top_t): offers one row; always true. */
bool hc_store_top_offer(const char *post_id, size_t post_id_len, int64_t likes, void *opaque);
/* Sorts the rows held in rank order; returns how many there are. */
size_t hc_store_top_finish(hc_store_top_t *top);

/* ---- hashes ---- */

/* SipHash-1-3 of a post id under the process key (hotcount/siphash.h): the hash for any table
 * of ours keyed by ids, which come from producers and writers of likes.partials. Never 0, so
 * that 0 can mark an empty slot. Differs from process to process: never persist it. */
uint64_t hc_store_id_hash(const char *id, size_t len);

/* ---- a set of post ids ---- */

/* The post ids a scan has reported (a Redis SCAN may return a key twice) or a batch holds: open
 * addressing over SipHash-1-3 under the process key (hotcount/siphash.h; the ids are untrusted
 * input, docs/THREAT-MODEL.md "Seeded hashing"), the ids themselves in one arena so that equal
 * hashes are settled by their bytes. Zero-initialise; it grows with the ids added (one scan's
 * distinct ids: bounded by the store). */
typedef struct hc_store_seen_slot {
    uint64_t hash; /* 0: empty */
    size_t off;
    size_t len;
} hc_store_seen_slot_t;

typedef struct hc_store_seen {
    hc_store_seen_slot_t *slots; /* owned */
    size_t cap;                  /* a power of two, or 0 */
    size_t count;
    char *arena; /* owned */
    size_t used;
    size_t size;
    uint64_t probes; /* occupied slots passed by lookups, all told: what a flood would inflate */
} hc_store_seen_t;

/* Adds id; *fresh tells whether it was new. false only when out of memory (nothing changed). */
bool hc_store_seen_add(hc_store_seen_t *s, const char *id, size_t len, bool *fresh);
void hc_store_seen_fini(hc_store_seen_t *s);

/* ---- URIs ---- */

/* A percent-decoded, NUL-terminated copy of [p, p + len) (malloc'd, the caller frees), or NULL:
 * out of memory, or *bad set when the encoding is broken (a '%' not followed by two hex digits,
 * or %00, which would cut the C string short). */
char *hc_store_percent_decode(const char *p, size_t len, bool *bad);

#endif
