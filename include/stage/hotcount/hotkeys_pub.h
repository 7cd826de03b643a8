/* Layer: stage. Stage 2's hot set (core/hotset.h) fed after each landed batch, and its changes
 * published to topic.hotkeys (docs/FORMATS.md) with a plain idempotent producer.
 *
 * Advisory, not part of exactly-once: a record is produced after the store batch committed and
 * outside any transaction, so a crash between the two loses the record, and a window that is
 * applied again after a lost compare-and-set may announce a change twice. Readers take the last
 * record per post and source, and detected "hot" records expire (hotset.h: ttl and refresh), so
 * neither leaves a post wrongly hot for long. A delivery failure is counted and logged, never
 * stops the stage. Counts never depend on it.
 *
 * Owned by one stage-2 instance; called from its thread only. */
#ifndef HOTCOUNT_HOTKEYS_PUB_H
#define HOTCOUNT_HOTKEYS_PUB_H

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/hotset.h"
#include "hotcount/metrics.h"
#include "hotcount/table.h"

typedef struct hc_hotkeys_pub hc_hotkeys_pub_t;

/* *out = NULL (and HC_OK) when topic.hotkeys is empty. area: the log area; metrics: where
 * hotcount_hot_posts, hotcount_hotkey_transitions_total and hotcount_hotkey_flaps_total go, as
 * increments (borrowed, both must outlive the publisher). clock: NULL for the wall clock
 * (hc_wall_ms); tests pass a fake one. HC_ERR_INVALID / HC_ERR_FATAL with errstr when the producer
 * or the set cannot be made. */
hc_err_t hc_hotkeys_pub_new(const hc_config_t *cfg, const char *area, hc_metrics_t *metrics,
                            hc_hotset_clock_fn clock, void *clock_opaque, hc_hotkeys_pub_t **out,
                            char *errstr, size_t errstr_size);

/* One landed window: every post of tbl with its events, then the set's transitions produced
 * (without waiting for their delivery) and logged. Accepts NULL hp. */
void hc_hotkeys_pub_window(hc_hotkeys_pub_t *hp, const hc_table_t *tbl);

/* The set, for tests and the metrics. NULL hp: NULL. */
const hc_hotset_t *hc_hotkeys_pub_set(const hc_hotkeys_pub_t *hp);

/* Records whose delivery failed so far. */
int64_t hc_hotkeys_pub_failed(const hc_hotkeys_pub_t *hp);

/* Waits up to min(cfg->timeouts.drain_ms, 1 s) for the records in flight, drops the rest (they
 * are advisory), then frees. Accepts NULL. */
void hc_hotkeys_pub_destroy(hc_hotkeys_pub_t *hp);

#endif
