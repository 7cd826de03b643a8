/* Layer: serve. The pipeline at a glance, for `hotcount serve`'s GET /v1/stats and its live page:
 * a refresher thread scrapes each stage's Prometheus endpoint (serve.stages; hotkeys_scrape.h
 * does the HTTP, with a connect and a whole-answer deadline) once per interval and keeps each
 * stage's last good sample; a render (no I/O) aggregates them:
 *
 *   {"as_of":ms, "sample_age_ms":N|null,       age of the oldest stage sample summed below
 *    "stages_up":N,
 *    "stages":[{"stage":i,"up":bool,"age_ms":N|null}],   + "addr","error" with expose only
 *    "events_in":N|null, "events_in_per_second":R|null,       sum of hotcount_events_total
 *    "store_writes":N|null, "store_writes_per_second":R|null, sum of
 *                                                             hotcount_store_keys_written_total
 *    "events_stored":N|null,                                  sum of hotcount_events_stored_total
 *    "events_per_store_write":R|null,                         events_stored / store_writes
 *    "consumer_lag":N|null,                                   sum of hotcount_consumer_lag
 *    "stage1_instances":N|null, "stage2_instances":N|null,    sum of hotcount_stage_instances
 *                                                             {stage=…}: 0 = no stage runs it
 *    "hot_keys":[{"post_id":…,"likes_per_second":R}],         stage 1's detectors, summed per post
 *    "hotkeys_enter_rate":R|null, "hotkeys_leave_rate":R|null, stage 2's thresholds
 *    "hot_set":[{"post_id":…,"likes_per_second":R,            stage 2's hot-set members,
 *                "source":"detected"|null,                    hottest first, from
 *                "state":"hot"|"cooling"|null}],              hotcount_hot_post_events_per_second
 *                                                             (state null: no leave rate)
 *    "history":{"step_ms":N,"rate_span_ms":N,"newest_age_ms":N|null,
 *               "likes_in_per_s":[R|null…],"store_writes_per_s":[R|null…]},
 *    "top":[{"post_id":…,"likes":N,"likes_per_second":R|null}]}  the store's top, rates from the
 *                                                             previous render
 * history: one point per refresh tick (step_ms), oldest first, at most 300 (5 min at 1 s) in a
 * ring: each the rate of the summed hotcount_events_total / hotcount_store_keys_written_total
 * over the rate_span_ms before it (5 ticks), from counter growth (a counter that went down is a
 * restarted stage: its new value is all growth); null where a tick has no sample or a stage that
 * reports the family did not answer. Kept here, so a reloaded page has it at once.
 * A field is null when no stage has answered with it (no stages configured: only "top" is
 * filled). A stage that stops answering keeps its last good sample (its age_ms grows); rates are
 * per stage between its last two good samples, summed. Scraped values are trusted only as
 * numbers: NaN and infinities are skipped, magnitudes clamped to +-9.2e18 before any integer
 * conversion. The stages' addresses and scrape errors are internal: shown only with expose
 * (serve.stats.expose = 1).
 *
 * Threads: the refresher is the only scraper; render may run concurrently with it but one
 * render at a time (serve calls it from a coalesced cache load). */
#ifndef HOTCOUNT_SERVE_STATS_H
#define HOTCOUNT_SERVE_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/hotset.h"
#include "hotcount/store.h"

typedef struct hc_serve_stats hc_serve_stats_t;

/* stages: "host:port[,host:port...]" or "" (copied); each scrape must connect within
 * connect_ms and be whole within total_ms. HC_ERR_FATAL when out of memory. */
hc_err_t hc_serve_stats_new(const char *stages, int connect_ms, int total_ms, bool expose,
                            hc_serve_stats_t **out, char *errstr, size_t errstr_size);
/* Starts the refresher thread (nothing to do without stages): a refresh every interval_ms.
 * hc_serve_stats_destroy stops it within one scrape deadline. */
hc_err_t hc_serve_stats_start(hc_serve_stats_t *stats, int interval_ms, char *errstr,
                              size_t errstr_size);
/* One scrape of every stage, blocking (the refresher's body; tests call it directly). */
void hc_serve_stats_refresh(hc_serve_stats_t *stats);
/* refresh's two halves, for tests: one stage's scrape (text its /metrics body, or NULL when the
 * scrape failed, then error says why) at now_ms, and the end of a round, which adds the history
 * point of refresh tick `tick` (ticks only go forward: an older or equal tick is ignored). */
void hc_serve_stats_ingest(hc_serve_stats_t *stats, size_t stage, const char *text,
                           const char *error, int64_t now_ms);
void hc_serve_stats_tick(hc_serve_stats_t *stats, int64_t tick, int64_t now_ms);
void hc_serve_stats_destroy(hc_serve_stats_t *stats); /* accepts NULL; stops the refresher */

/* The JSON above as a malloc'ed NUL-terminated string (NULL when out of memory). top: the
 * store's top rows (borrowed), mono_ms the hc_now_ms clock, wall_ms for as_of. topic: hot
 * records of topic.hotkeys (borrowed; NULL/0: none): its declared posts join hot_set with source
 * "declared" (no stage's metrics name them), after the detected ones and once per post. No I/O. */
char *hc_serve_stats_render(hc_serve_stats_t *stats, const hc_store_row_t *top, size_t top_count,
                            const hc_hotkey_record_t *topic, size_t topic_count, int64_t mono_ms,
                            int64_t wall_ms);

/* v clamped to [-9.2e18, 9.2e18], so that it converts to int64. */
double hc_serve_stats_clamp(double v);

/* Sum of every sample of the metric family `name` in a Prometheus text page whose labels contain
 * `label` (e.g. "outcome=\"commit\""; NULL: all). *found tells whether any sample matched.
 * Samples that are NaN or infinite are skipped; the sum is clamped (hc_serve_stats_clamp). */
double hc_serve_stats_sum(const char *text, const char *name, const char *label, int *found);

#endif
