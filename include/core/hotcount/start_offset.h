/* Layer: core. Where stage 1 starts reading a raw partition that the consumer found no offset to
 * start from (auto.offset.reset=error: librdkafka reports it instead of jumping to the first
 * record).
 *
 * Why not let the consumer jump: a committed-offset fetch can come back without an offset for a
 * partition that has one (seen once in the combined-fault runs: a stage 1 restarted right after
 * the broker's restart read 8 partitions again from offset 0, some 68 000 events a second time;
 * docs/RELIABILITY.md, F3). With `earliest` that answer and "this group never committed here"
 * look the same. So stage 1 reads the committed offset again itself, with the partition's first
 * and end offsets, and decides here; a partition with records and no committed offset is asked
 * again a few times, backing off, before its first record is believed. A committed offset that
 * was found is checked against the same ends: one below the log's start (its records lost to
 * retention) or past its end (a truncated log) starts at the first record too, and says so.
 *
 * Pure: no I/O, no clock. */
#ifndef HOTCOUNT_START_OFFSET_H
#define HOTCOUNT_START_OFFSET_H

#include <stdint.h>

typedef enum hc_start_decision {
    HC_START_COMMITTED,       /* the committed offset, which the consumer's fetch missed */
    HC_START_FIRST,           /* the first record: nothing committed (confirmed), or no record */
    HC_START_FIRST_RETENTION, /* the first record: the committed one is gone (retention) */
    HC_START_FIRST_TRUNCATED, /* the first record: the log ends before the committed offset */
    HC_START_ASK_AGAIN,       /* records and no committed offset: read it again after a pause */
    HC_START_DECISION_COUNT,
} hc_start_decision_t;

/* committed: the offset read again (HC_OFFSET_NONE: none); low, high: the partition's first
 * offset and end; answers: how many reads so far said "none" (this one included), confirm: how
 * many such reads are believed. */
hc_start_decision_t hc_start_decide(int64_t committed, int64_t low, int64_t high, int answers,
                                    int confirm);

/* Static name for logs ("committed", "first", ...). */
const char *hc_start_decision_name(hc_start_decision_t d);

#endif
