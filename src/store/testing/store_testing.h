/* Test-only (the library hc_store_testing, src/store/testing/): what the tests and the
 * benchmark plug into a store handle, and never the product, which does not link this library
 * (tests/layers proves hotcount holds none of it). Today the DynamoDB backend's: the fault hooks
 * that the multi-part protocol's tests use (tests/integration/test_store_dynamodb.c), a peek at
 * its tables, and the cost meter that prices each request (bench/src/bench_dynamodb_units.c).
 * A backend's instrumentation goes here, behind a seam of its own (dynamodb/ddb_seam.h), so
 * that the backend itself holds no test switch. See docs/DYNAMODB.md for the protocol these
 * hooks break into and for the cost rules. */
#ifndef HOTCOUNT_STORE_TESTING_H
#define HOTCOUNT_STORE_TESTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddb_seam.h" /* hc_ddb_test_hooks_t */
#include "hotcount/store.h"

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

/* Starts st's cost meter (st must be a DynamoDB store, not metered yet): from now on every
 * answered request is priced and counted. HC_ERR_FATAL only when out of memory. The meter is
 * freed with the handle. */
hc_err_t hc_store_dynamodb_meter(hc_store_t *st);

/* Copies st's counters (since hc_store_dynamodb_meter) into *out. */
void hc_store_dynamodb_usage(hc_store_t *st, hc_ddb_usage_t *out);

#endif
