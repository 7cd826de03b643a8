/* Layer: core. A stage-1 window's provenance: for every raw partition, the offsets the window
 * consumed. The record's format: docs/FORMATS.md, "Manifests".
 *
 * Stage 1 records each message it processes (valid or dead-lettered) here. The ranges give the
 * offsets it commits (`next` of every partition) and, when topic.manifest is set, one manifest
 * record that stage 1 produces inside the window's transaction:
 *
 *   {"transactional_id":"…","instance_id":"…","incarnation_ms":N,"window":N,"topic":"…",
 *    "events":N,"invalid":N,"partials":N,"likes":N,
 *    "ranges":[{"partition":P,"first":F,"next":X,"messages":M},…]}
 *
 * `first` is the offset of the window's first message on P, `next` one past its last, and
 * `messages` how many it processed there (next - first when no offset was skipped). Ranges are
 * in partition order; partitions the window did not read are absent. Committed manifests tile
 * every raw partition exactly once when nothing was lost or counted twice (tests/faults/
 * tiling.py checks it); an aborted window's manifest is aborted with it. `partials` and `likes`
 * are what the window's table held (posts, sum of deltas), so the committed partials must add up
 * to the committed manifests' figures.
 *
 * Pure (no I/O). Not thread-safe: one owner thread. */
#ifndef HOTCOUNT_MANIFEST_H
#define HOTCOUNT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

#define HC_MANIFEST_NONE (-1) /* first/next of a partition the window has not read */

typedef struct hc_manifest_range {
    int64_t first;    /* offset of the window's first message, or HC_MANIFEST_NONE */
    int64_t next;     /* offset after the window's last message, or HC_MANIFEST_NONE */
    int64_t messages; /* messages processed in [first, next) */
} hc_manifest_range_t;

typedef struct hc_manifest {
    hc_manifest_range_t *ranges; /* owned, indexed by partition */
    int32_t cap;                 /* entries in ranges */
} hc_manifest_t;

/* Who wrote a manifest record and which window it describes; the strings are borrowed. */
typedef struct hc_manifest_meta {
    const char *transactional_id;
    const char *instance_id;
    int64_t incarnation_ms; /* wall clock when this process's stage 1 started */
    int64_t window;         /* windows begun by this incarnation, 1-based */
    const char *topic;      /* the raw topic */
    int64_t events;         /* valid events in the window */
    int64_t invalid;        /* dead-lettered messages in the window */
    int64_t partials;       /* posts in the window's table: the partials it commits */
    int64_t likes;          /* sum of the window's deltas */
} hc_manifest_meta_t;

void hc_manifest_init(hc_manifest_t *man);
void hc_manifest_fini(hc_manifest_t *man); /* accepts NULL */

/* Forgets every range (a new window); keeps the memory. */
void hc_manifest_clear(hc_manifest_t *man);

/* The window processed the message at offset on partition. HC_ERR_INVALID for a negative
 * partition or offset, or an offset below the partition's `next` (a window reads each partition
 * forwards); HC_ERR_FATAL when out of memory. On error nothing changed. */
hc_err_t hc_manifest_record(hc_manifest_t *man, int32_t partition, int64_t offset);

/* The range of partition, or NULL when the window has not read it. Iterate with
 * `for (p = 0; p < man->cap; p++)`. */
const hc_manifest_range_t *hc_manifest_range(const hc_manifest_t *man, int32_t partition);

/* Encodes the record described in the file comment (no spaces; strings JSON-escaped) into a
 * new NUL-terminated buffer that the caller frees. Returns HC_OK with *out and *out_len set, or
 * HC_ERR_FATAL when out of memory (*out NULL). */
hc_err_t hc_manifest_encode(const hc_manifest_t *man, const hc_manifest_meta_t *meta, char **out,
                            size_t *out_len);

#endif
