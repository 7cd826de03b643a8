/* Layer: store (private to src/store/dynamodb/ and the test-only library src/store/testing/).
 * The DynamoDB backend's instrumentation seam: what a test or the benchmark plugs into a handle
 * through src/store/testing/store_testing.h. The product never sets either field of the handle
 * (ddb_store_t.hooks, .observer): a handle without them behaves as if this header did not exist.
 * See docs/DYNAMODB.md for the protocol the hooks break into. */
#ifndef HOTCOUNT_STORE_DDB_SEAM_H
#define HOTCOUNT_STORE_DDB_SEAM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The multi-part protocol's fault points (test_store_dynamodb.c). */
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
    /* > 0: every Scan page holds at most this many items (Scan's Limit), so that a test reaches
     * top's page bound with a few posts. */
    size_t scan_page_items;
} hc_ddb_test_hooks_t;

/* An observer of every answered request (the cost meter of src/store/testing/): on_reply after
 * each reply with a body (ok: 2xx; a refused request, e.g. a cancelled transaction, with ok
 * false), destroy when the handle closes. */
typedef struct ddb_observer ddb_observer_t;
struct ddb_observer {
    void (*on_reply)(ddb_observer_t *obs, const char *op, const json_t *req, const json_t *body,
                     bool ok);
    void (*destroy)(ddb_observer_t *obs);
};

#endif
