/* Layer: stage. Provenance fencing between the stages (docs/RELIABILITY.md, "Late writes";
 * the header's format: docs/FORMATS.md, "Partials").
 *
 * Every partial stage 1 writes carries a header `hotcount-window` naming its window and the raw
 * offsets the window consumed:
 *
 *   1 <producer> <incarnation_ms> <window> <p>:<first>+<count>[,<p>:<first>+<count>]...
 *
 * `1` is the format's version; <producer> 16 lowercase hex digits, the FNV-1a 64-bit hash of
 * the transactional id; <incarnation_ms> and <window> as in the window's manifest; then, in
 * ascending raw partition order, each raw partition the window read with its range
 * [first, first + count), count >= 1. All of a window's partials carry the same value.
 *
 * Stage 2 remembers, per partials partition, raw partition and writer (the producer's hash and
 * incarnation: the window id without its number; the last two writers per raw partition), the
 * range and window of the writer's last partial it took (hc_source_accept) and refuses
 * (HC_PARTIAL_SOURCE_OVERLAP) a partial of another window of the same writer whose range starts
 * before the remembered range's end, or one that claims the remembered window with another
 * range: a raw offset the store already counted, or is about to count in the open batch, is
 * never counted a second time through a late write of a stale transaction (KAFKA-17754: no
 * librdkafka implements transactions v2, KIP-890), which the broker appends to the same
 * producer's next transaction. A partial is never compared with another writer's history
 * (issue 25, item 1): a header is a claim anyone who may write the topic can make, and one
 * forged claim of offsets near 10^15 blocked every later partial of its partition. A late
 * write across writers needs a producer that kept its epoch past an abort, which stage 1's
 * renewal rules out (docs/RELIABILITY.md, "Late writes", defence 1). The memory
 * follows the store batch: what the open batch took is pending until the batch lands
 * (hc_source_commit) or is dropped (hc_source_rollback); a partition whose position is read
 * from the store again starts with no memory (hc_source_forget), so a store that went back
 * never makes stage 2 refuse what it must count again.
 *
 * A partial without the header (a stage 1 older than this, a foreign writer) or with a version
 * this code does not know is counted unchecked, so an upgrade in any order keeps counting.
 *
 * Not thread-safe: one owner (stage 2's thread). No call allocates per partial: only
 * hc_source_accept grows the memory, when a partials or raw partition is seen for the first
 * time. */
#ifndef HOTCOUNT_SOURCE_CHECK_H
#define HOTCOUNT_SOURCE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "hotcount/err.h"
#include "hotcount/manifest.h"
#include "hotcount/partial_check.h"

#define HC_SOURCE_HEADER "hotcount-window"
#define HC_SOURCE_VERSION 1
/* A raw partition number at or above this makes a header malformed: it bounds the memory one
 * forged header can make stage 2 allocate (a slot of about 200 bytes per raw partition and
 * partials partition). */
#define HC_SOURCE_MAX_RAW_PARTITIONS 16384

/* Bytes hc_source_encode may need for win: the fixed fields plus 42 per range. */
size_t hc_source_encoded_max(const hc_manifest_t *win);

/* Writes the header value for the window (not NUL-terminated). Returns its length, or 0 when
 * size is too small (hc_source_encoded_max(win) always suffices) or win has no range. Pure. */
size_t hc_source_encode(const char *transactional_id, int64_t incarnation_ms, int64_t window,
                        const hc_manifest_t *win, char *buf, size_t size);

/* rkm's hotcount-window value (borrowed from rkm: valid while it lives), or NULL with *len 0
 * when it has none. */
const void *hc_source_header_of(const rd_kafka_message_t *rkm, size_t *len);

typedef struct hc_source_check hc_source_check_t;

/* NULL when out of memory. */
hc_source_check_t *hc_source_check_new(void);
void hc_source_check_destroy(hc_source_check_t *sc); /* accepts NULL */

/* Whether the partial at partials partition `partition` with header value hdr (NULL: none) may
 * count: HC_PARTIAL_OK, HC_PARTIAL_SOURCE_OVERLAP or HC_PARTIAL_SOURCE_MALFORMED (a version-1
 * value that breaks the format), with the detail in errstr. Changes nothing. */
hc_partial_reason_t hc_source_check(const hc_source_check_t *sc, int32_t partition, const void *hdr,
                                    size_t hdr_len, char *errstr, size_t errstr_size);

/* The partial that hc_source_check passed now counts in the open batch: its ranges become the
 * partition's pending memory. HC_OK, or HC_ERR_FATAL when out of memory (nothing changed). */
hc_err_t hc_source_accept(hc_source_check_t *sc, int32_t partition, const void *hdr,
                          size_t hdr_len);

/* The open batch landed in the store: its pending memory becomes the applied memory. */
void hc_source_commit(hc_source_check_t *sc);
/* The open batch was dropped: its pending memory is forgotten. */
void hc_source_rollback(hc_source_check_t *sc);
/* The partials partition's position comes from the store again: forget all it remembers. */
void hc_source_forget(hc_source_check_t *sc, int32_t partition);

#endif
