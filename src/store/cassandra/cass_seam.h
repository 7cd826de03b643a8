/* Layer: store (private to src/store/cassandra/ and the test-only library src/store/testing/).
 * The Cassandra backend's fault seam: what a test plugs into a handle through
 * src/store/testing/store_testing.h (hc_store_cassandra_set_test_hooks). The product never sets
 * the handle's hooks; a handle without them behaves as if this header did not exist. The steps
 * are the requests of docs/CASSANDRA.md's apply. */
#ifndef HOTCOUNT_STORE_CASS_SEAM_H
#define HOTCOUNT_STORE_CASS_SEAM_H

#include <stdbool.h>
#include <stddef.h>

typedef enum hc_cass_step {
    HC_CASS_R0_CLAIMS,  /* the claims and done rows read (and any recovery they lead to) */
    HC_CASS_R1_BASES,   /* one group of base reads */
    HC_CASS_R2_STAGING, /* one group of staged parts */
    HC_CASS_R3_CLAIM,   /* the claim (the batch's LWT) */
    HC_CASS_R4_COUNTS,  /* one group of count writes */
    HC_CASS_R5_DONE,    /* the done rows */
} hc_cass_step_t;

typedef struct hc_cass_test_hooks {
    /* Statements per request group of R1, R2 and R4 (0: the product's 4096), so that a test can
     * stop between any two count writes. */
    size_t group_size;
    /* Called before each request group of an apply is sent (e.g. to pause a zombie there). */
    void (*before)(void *opaque, hc_cass_step_t step);
    /* Called after each request group of an apply got its answer, k counting the groups of this
     * apply from 1. false: the apply stops there, as if the process died (no further request,
     * nothing cleared), and returns HC_ERR_TRANSIENT. */
    bool (*after)(void *opaque, hc_cass_step_t step, size_t k);
    void *opaque;
} hc_cass_test_hooks_t;

#endif
