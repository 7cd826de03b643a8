/* Layer: store. Private to the DynamoDB backend and its tests: the fault seam that the
 * multi-part protocol's tests use (tests/integration/test_store_dynamodb.c). Nothing in the
 * product calls it; a handle without hooks behaves as if this header did not exist.
 * See docs/DYNAMODB.md for the protocol these hooks break into. */
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

#endif
