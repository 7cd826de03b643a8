/* Layer: store. Private to the DynamoDB backend, its tests and its benchmark: the fault seam that
 * the multi-part protocol's tests use (tests/integration/test_store_dynamodb.c), and the
 * handle's request and capacity-unit counters (bench/src/bench_dynamodb_units.c). Nothing in
 * the product calls it; a handle without hooks behaves as if this header did not exist.
 * See docs/DYNAMODB.md for the protocol these hooks break into and for the cost rules. */
#ifndef HOTCOUNT_STORE_DYNAMODB_H
#define HOTCOUNT_STORE_DYNAMODB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/store.h"

typedef struct hc_ddb_test_hooks {
    /* Deltas per part of a split batch; 0: the default (98, the most one transaction holds
     * beside the progress marker and the staged part's delete). */
    size_t part_deltas;
    /* > 0: after this many part transactions of one apply have landed, the apply stops as if
     * the process died there (no finish, no clean-up) and returns HC_ERR_TRANSIENT. */
    long crash_after_parts;
    /* Every part transaction that lands is sent a second time, byte for byte (same
     * ClientRequestToken), as a client does whose reply was lost. */
    bool resend_parts;
    /* Called before each part transaction is sent (part = its index), e.g. to let another
     * handle finish the batch first. */
    void (*before_part)(void *opaque, size_t part);
    void *opaque;
} hc_ddb_test_hooks_t;

/* Sets (or, with NULL, clears) st's hooks; st must be a DynamoDB store. Borrowed: *hooks must
 * outlive their use. */
void hc_store_dynamodb_set_test_hooks(hc_store_t *st, const hc_ddb_test_hooks_t *hooks);

/* What the tables hold: the stored offset of (group, topic, partition) or HC_OFFSET_NONE, and
 * the marker's parts_done, or -1 when no batch is in flight on (group, topic). */
hc_err_t hc_store_dynamodb_test_peek(hc_store_t *st, const char *group, const char *topic,
                                     int32_t partition, int64_t *offset, int64_t *parts_done,
                                     char *errstr, size_t errstr_size);

/* What a handle's requests cost, by DynamoDB's published rules (docs/DYNAMODB.md, "Cost"),
 * computed from the requests it sent, and what the server reported (ConsumedCapacity; every
 * data request asks for it with ReturnConsumedCapacity=TOTAL). Counted per answered request:
 * a throttled, failed (5xx) or unanswered attempt is not charged and not counted here. */
typedef struct hc_ddb_usage {
    uint64_t requests;       /* answered requests (each attempt of a retried one) */
    uint64_t write_requests; /* of which TransactWriteItems and BatchWriteItem */
    uint64_t transactions;   /* TransactWriteItems that committed */
    uint64_t cancelled;      /* TransactWriteItems that were cancelled */
    double write_units;      /* committed writes: counts + offsets + staging */
    double write_units_counts;
    double write_units_offsets; /* offsets items and the progress marker */
    double write_units_staging;
    double write_units_cancelled; /* what cancelled transactions would cost if charged whole */
    double read_units;            /* strongly consistent reads */
    /* replies that carried a ConsumedCapacity figure, and their sums: of write requests
     * (TransactWriteItems, BatchWriteItem) and of reads */
    uint64_t reported_write_replies;
    double reported_write_units;
    uint64_t reported_read_replies;
    double reported_read_units;
} hc_ddb_usage_t;

/* Copies st's counters (since its open) into *out; st must be a DynamoDB store. */
void hc_store_dynamodb_usage(hc_store_t *st, hc_ddb_usage_t *out);

#endif
