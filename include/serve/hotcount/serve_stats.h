/* Layer: serve. The pipeline at a glance, for `hotcount serve`'s GET /v1/stats and its live page:
 * scrapes each stage's Prometheus endpoint (serve.stages; hotkeys_scrape.h does the HTTP) and
 * aggregates:
 *
 *   {"as_of":ms, "stages":[{"addr":"h:p","up":true|false,"error":"..."}],
 *    "events_in":N|null, "events_in_per_second":R|null,       sum of hotcount_events_total
 *    "store_writes":N|null, "store_writes_per_second":R|null, sum of
 * hotcount_store_keys_written_total "events_stored":N|null,                                  sum of
 * hotcount_events_stored_total "events_per_store_write":R|null, events_stored / store_writes
 *    "consumer_lag":N|null,                                   sum of hotcount_consumer_lag
 *    "hot_keys":[{"post_id":…,"likes_per_second":R}],         stage 1's detectors, summed per post
 *    "top":[{"post_id":…,"likes":N,"likes_per_second":R|null}]}  the store's top, rates from the
 *                                                             previous call
 * A field is null when no stage answered with it (no stages configured: only "top" is filled).
 * Rates compare with the previous call, so they are per polling interval.
 *
 * Not thread-safe: one caller at a time (serve calls it from a coalesced cache load). */
#ifndef HOTCOUNT_SERVE_STATS_H
#define HOTCOUNT_SERVE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/store.h"

typedef struct hc_serve_stats hc_serve_stats_t;

/* stages: "host:port[,host:port...]" or "" (copied). HC_ERR_FATAL when out of memory. */
hc_err_t hc_serve_stats_new(const char *stages, int scrape_timeout_ms, hc_serve_stats_t **out,
                            char *errstr, size_t errstr_size);
void hc_serve_stats_destroy(hc_serve_stats_t *stats); /* accepts NULL */

/* The JSON above as a malloc'ed NUL-terminated string (NULL when out of memory). top: the
 * store's top rows (borrowed), mono_ms a monotonic clock for rates, wall_ms for as_of. Blocks
 * for up to scrape_timeout_ms per unreachable stage. */
char *hc_serve_stats_render(hc_serve_stats_t *stats, const hc_store_row_t *top, size_t top_count,
                            int64_t mono_ms, int64_t wall_ms);

/* Sum of every sample of the metric family `name` in a Prometheus text page whose labels contain
 * `label` (e.g. "outcome=\"commit\""; NULL: all). *found tells whether any sample matched. */
double hc_serve_stats_sum(const char *text, const char *name, const char *label, int *found);

#endif
