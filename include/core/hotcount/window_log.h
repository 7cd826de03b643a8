/* Layer: core. Stage 2's window log: where each partial of the open window came from (its
 * partition and offset, its table entry) and what it carried (delta, events, ts range), kept only
 * for the rare window whose store refuses a post: each partial of that post is then dead-lettered
 * on its own, with its own fields and its own source.
 *
 * The log is an append-only byte buffer of varint records, not an array of structs: every field
 * is zigzag-encoded, the offset and ts_min as the difference from the previous record's and ts_max
 * as its difference from ts_min, so the common record (the next post of the same packed record,
 * a small delta, ts equal to its neighbour's) takes about 10 bytes where a struct took 48. Stage 2
 * keeps one record per partial for the whole window, so this is most of its memory per live key
 * beyond the table's (bench/RESULTS.md, "Stage 2 bytes per live key"). Differences are taken in
 * uint64 arithmetic, so every int64 value, HC_TS_NONE and hostile extremes included, decodes to
 * itself (tests/unit/test_window_log.c checks it against a plain array).
 *
 * Reading is sequential from the start (hc_window_log_next): the log is read only when the store
 * refused something, or to sum the refused partials' events after such a batch.
 *
 * Pure module, no I/O. Not thread-safe: one owner thread (a stage-2 instance). */
#ifndef HOTCOUNT_WINDOW_LOG_H
#define HOTCOUNT_WINDOW_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

typedef struct hc_window_log_rec {
    int32_t partition;
    uint32_t entry; /* its post's index in the window's table */
    int64_t offset;
    int64_t delta, events, ts_min, ts_max;
} hc_window_log_rec_t;

typedef struct hc_window_log {
    uint8_t *buf; /* owned */
    size_t len, cap;
    size_t count;        /* records appended since the last clear */
    int64_t last_offset; /* the previous record's, for the next difference */
    int64_t last_ts_min; /* the same */
} hc_window_log_t;

/* A position in the log, for hc_window_log_next: zero-initialise it to start from the first
 * record. */
typedef struct hc_window_log_pos {
    size_t at;
    int64_t last_offset, last_ts_min;
} hc_window_log_pos_t;

void hc_window_log_init(hc_window_log_t *log);
/* Frees the buffer; the log is empty and may be used again. */
void hc_window_log_fini(hc_window_log_t *log);
/* Forgets every record, keeping the buffer's memory for the next window. */
void hc_window_log_clear(hc_window_log_t *log);
/* HC_OK, or HC_ERR_FATAL when the buffer cannot grow (nothing appended). */
hc_err_t hc_window_log_append(hc_window_log_t *log, const hc_window_log_rec_t *rec);
/* The record at *pos into *out, and *pos moved past it; false at the end of the log. */
bool hc_window_log_next(const hc_window_log_t *log, hc_window_log_pos_t *pos,
                        hc_window_log_rec_t *out);

#endif
