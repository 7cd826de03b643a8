/* Process counters shared by the stages and read by progress lines and the metrics endpoint.
 *
 * Plain relaxed atomics: each is written by the stage threads and read by anyone. The owner
 * (a command) allocates one hc_metrics_t per process and lends it to the stages. */
#ifndef HOTCOUNT_METRICS_H
#define HOTCOUNT_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "hotcount/event.h"

typedef struct hc_metrics {
    /* stage 1 */
    atomic_int_fast64_t events_consumed; /* live: raw messages polled (published in chunks) */
    atomic_int_fast64_t events_ok;
    atomic_int_fast64_t events_invalid;
    atomic_int_fast64_t invalid_by_reason[HC_EVENT_REASON_COUNT];
    atomic_int_fast64_t partials;
    atomic_int_fast64_t txn_commit;
    atomic_int_fast64_t txn_abort;
    atomic_int_fast64_t stage1_assigned; /* partitions currently assigned, all stage-1 consumers */
    /* stage 2 */
    atomic_int_fast64_t partials_consumed;
    atomic_int_fast64_t store_commit;
    atomic_int_fast64_t store_conflict;
    atomic_int_fast64_t store_error;
    atomic_int_fast64_t store_keys_written;
    atomic_int_fast64_t events_stored; /* sum of partial `events` in committed store batches */
    atomic_int_fast64_t stage2_assigned;
} hc_metrics_t;

#define hc_metric_add(field, n) atomic_fetch_add_explicit(&(field), (n), memory_order_relaxed)
#define hc_metric_get(field) atomic_load_explicit(&(field), memory_order_relaxed)

#endif
