/* Layer: obs. Process metrics shared by the stages and read by the progress lines and the
 * /metrics endpoint.
 *
 * The owner (a command) keeps one hc_metrics_t per process, calls hc_metrics_init before any
 * thread uses it and hc_metrics_fini after they are joined, and lends it to the stages. Counters
 * and gauges are plain relaxed atomics and histograms are lock-free (any thread, no lock); only
 * the consumer-lag table and the hot-keys snapshot take a mutex, a few times per flush.ms at
 * most. A zeroed hc_metrics_t that was never initialised is still safe: counters work, and the
 * histograms, lag and hot keys silently record nothing. */

/* Exposition (Prometheus text format 0.0.4, served at /metrics), all names prefixed hotcount_.
 * Every metric is declared once, in the registry hotcount/metric_defs.h (name, type, labels,
 * help, meaning): hc_metrics_render takes its names and # HELP / # TYPE lines from there, and
 * `hotcount metrics --markdown` prints the table docs/OPERATIONS.md and docs/FORMATS.md hold. */
/* clang-format off */
/*
 * Histogram buckets (le, seconds unless noted):
 *   end_to_end            0.05 0.1 0.25 0.5 1 2 3 5 10 20 30 60
 *   flush                 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10
 *   transaction, store    0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30
 *   batch_posts (posts)   1 3 10 30 100 300 1000 3000 10000 30000 100000 300000 1000000
 */
/* clang-format on */
#ifndef HOTCOUNT_METRICS_H
#define HOTCOUNT_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/clock.h"
#include "hotcount/err.h"
#include "hotcount/event.h"
#include "hotcount/hotkeys.h"
#include "hotcount/partial_check.h"

/* ---- histograms ---------------------------------------------------------------------------- */

#define HC_HISTOGRAM_MAX_BUCKETS 24 /* finite upper bounds; +Inf is implicit */

/* A fixed-bucket histogram: observe is lock-free (a binary search over the bounds, then three
 * relaxed atomic adds), any thread. Render shows cumulative `le` buckets, Prometheus-style. */
typedef struct hc_histogram {
    const double *bounds; /* borrowed, static storage: finite, strictly ascending */
    size_t bound_count;
    atomic_uint_fast64_t buckets[HC_HISTOGRAM_MAX_BUCKETS + 1]; /* not cumulative; last: +Inf */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_bits; /* a double's bits, added by compare-and-swap */
} hc_histogram_t;

/* Zeroes h and sets its buckets. HC_ERR_INVALID when bounds are not 1..HC_HISTOGRAM_MAX_BUCKETS
 * finite, strictly ascending values. Before threads use h. */
hc_err_t hc_histogram_init(hc_histogram_t *h, const double *bounds, size_t bound_count);
/* Counts n observations of value (value <= bound goes in that bucket). NaN is ignored; so is
 * anything observed into a histogram that was never initialised. */
void hc_histogram_observe_n(hc_histogram_t *h, double value, uint64_t n);
void hc_histogram_observe(hc_histogram_t *h, double value);
uint64_t hc_histogram_count(const hc_histogram_t *h);
double hc_histogram_sum(const hc_histogram_t *h);
/* Observations <= bounds[i] (i < bound_count), or all of them (i == bound_count: +Inf). */
uint64_t hc_histogram_cumulative(const hc_histogram_t *h, size_t i);

/* A single-thread accumulator for many observations of one flush (e.g. one end-to-end latency
 * per stored post), merged into the shared histogram with one atomic add per bucket. */
typedef struct hc_histogram_acc {
    const hc_histogram_t *h; /* borrowed: whose bounds */
    uint64_t buckets[HC_HISTOGRAM_MAX_BUCKETS + 1];
    uint64_t count;
    double sum;
} hc_histogram_acc_t;

void hc_histogram_acc_init(hc_histogram_acc_t *acc, const hc_histogram_t *h);
void hc_histogram_acc_add(hc_histogram_acc_t *acc, double value, uint64_t n);
/* Adds acc into h (the histogram acc was initialised from) and empties acc. */
void hc_histogram_acc_merge(hc_histogram_acc_t *acc, hc_histogram_t *h);

/* ---- the process metrics ------------------------------------------------------------------- */

typedef enum hc_metrics_stage_kind {
    HC_METRICS_STAGE1 = 0,
    HC_METRICS_STAGE2 = 1,
    HC_METRICS_STAGE_COUNT
} hc_metrics_stage_kind_t;

/* Readiness inputs of one stage kind, shared by this process's instances of it (one per kind
 * outside the demo). Times are hc_now_ms() (monotonic, > 0). */
typedef struct hc_metrics_stage {
    atomic_int_fast64_t running;       /* instances inside hc_stageN_run */
    atomic_int_fast64_t started_ms;    /* when the last instance started running */
    atomic_int_fast64_t last_flush_ms; /* last successful flush (commit / store batch); 0 never */
    /* since when consumed input has been waiting for a successful flush; 0: none waiting */
    atomic_int_fast64_t input_since_ms;
} hc_metrics_stage_t;

#define HC_METRICS_LAG_MAX 4096   /* (topic, partition) lag entries kept */
#define HC_METRICS_LAG_CLIENTS 64 /* librdkafka clients whose statistics are tracked */
/* Assumed statistics.interval.ms of a client until its second report measures it. */
#define HC_METRICS_STATS_INTERVAL_MS 5000
#define HC_METRICS_HOT_KEYS 20    /* hot keys exposed */
#define HC_METRICS_HOT_SOURCES 16 /* stage-1 instances publishing hot keys */

struct hc_metrics_lag; /* private: src/obs/metrics.c */
struct hc_metrics_hot;

typedef struct hc_metrics {
    /* stage 1 */
    atomic_int_fast64_t events_consumed; /* live: raw messages polled (published in chunks) */
    atomic_int_fast64_t events_ok;
    atomic_int_fast64_t events_invalid;
    atomic_int_fast64_t invalid_by_reason[HC_EVENT_REASON_COUNT];
    atomic_int_fast64_t partials;
    atomic_int_fast64_t partial_records; /* likes.partials records (packed: many partials each) */
    atomic_int_fast64_t txn_commit;
    atomic_int_fast64_t txn_abort;
    atomic_int_fast64_t stage1_assigned; /* partitions currently assigned, all stage-1 consumers */
    /* stage 2 */
    atomic_int_fast64_t partials_consumed;
    atomic_int_fast64_t partials_invalid[HC_PARTIAL_REASON_COUNT]; /* dead-lettered, by reason */
    atomic_int_fast64_t store_commit;
    atomic_int_fast64_t store_conflict;
    atomic_int_fast64_t store_error;
    atomic_int_fast64_t store_keys_written;
    atomic_int_fast64_t events_stored; /* sum of partial `events` in committed store batches */
    atomic_int_fast64_t stage2_assigned;
    atomic_int_fast64_t store_forgot;        /* store checks that found the store forgot */
    atomic_int_fast64_t retention_gap_parts; /* partitions held back by a retention gap */
    atomic_int_fast64_t hot_posts;           /* members of the stage-2 hot sets */
    atomic_int_fast64_t hotkey_to_hot;       /* hot-set entries */
    atomic_int_fast64_t hotkey_to_cool;      /* hot-set departures */
    atomic_int_fast64_t hotkey_flaps;        /* re-entries soon after a departure */
    atomic_int_fast64_t hotkeys_enter_milli; /* hotkeys.enter.rate x 1000; 0: no hot set */
    atomic_int_fast64_t hotkeys_leave_milli; /* hotkeys.leave.rate x 1000 */
    /* both stages: partitions found standing still (hc_metrics_partition_stalled), by kind */
    atomic_int_fast64_t partition_stalls[HC_METRICS_STAGE_COUNT];
    atomic_int_fast64_t store_batch_limit; /* stage 2's adaptive batch limit, in posts */

    /* histograms: buckets set by hc_metrics_init */
    hc_histogram_t end_to_end_seconds;                    /* event ts -> store commit */
    hc_histogram_t flush_seconds[HC_METRICS_STAGE_COUNT]; /* indexed by hc_metrics_stage_kind_t */
    hc_histogram_t batch_posts;                           /* posts per committed store batch */
    hc_histogram_t txn_seconds;                           /* stage-1 transaction close */
    hc_histogram_t store_seconds;                         /* stage-2 hc_store_apply */

    /* readiness inputs, indexed by hc_metrics_stage_kind_t */
    hc_metrics_stage_t stage[HC_METRICS_STAGE_COUNT];

    struct hc_metrics_lag *lag;    /* owned; NULL until hc_metrics_init */
    struct hc_metrics_hot *hot;    /* owned; NULL until hc_metrics_init */
    struct hc_metrics_hot *hotset; /* owned: stage 2's hot-set members, as hot */
} hc_metrics_t;

#define hc_metric_add(field, n) atomic_fetch_add_explicit(&(field), (n), memory_order_relaxed)
#define hc_metric_get(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define hc_metric_set(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* Zeroes *m, sets the histogram buckets and allocates the lag table and hot-keys snapshot
 * (about 100 KiB). HC_ERR_FATAL when out of memory (then *m is zeroed, fini is still safe).
 * Before any thread uses m. */
hc_err_t hc_metrics_init(hc_metrics_t *m);
/* Frees what init allocated; after every thread using m is gone. Accepts a zeroed m. */
void hc_metrics_fini(hc_metrics_t *m);

/* ---- stage hooks (any thread; one or two relaxed atomics, a few times per window) ----------- */

/* At the start and the end of hc_stageN_run (stopped also forgets waiting input). */
void hc_metrics_stage_started(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms);
void hc_metrics_stage_stopped(hc_metrics_t *m, hc_metrics_stage_kind_t kind);

/* Input is waiting to be flushed: call when a window opens (its first message). Keeps the
 * earlier time when input was already waiting, so a window that is aborted or refused and read
 * again keeps counting from its first attempt. Exported as hotcount_unflushed_input_seconds,
 * which the fault scripts read to tell a window open from an idle stage (docs/EVENTS.md). */
void hc_metrics_stage_input(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms);

/* A flush succeeded (stage 1: transaction committed; stage 2: store batch committed) at now_ms
 * and took `seconds`: records the time, clears waiting input, observes flush_seconds{stage}. */
void hc_metrics_stage_flushed(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms,
                              double seconds);

/* The waiting input is no longer this stage's: its partitions were revoked or lost and the open
 * window was dropped. (Not for an abort or a lost compare-and-set that re-reads the input.) */
void hc_metrics_stage_released(hc_metrics_t *m, hc_metrics_stage_kind_t kind);

/* Ready when at least one stage runs, every running stage kind holds partitions, and no stage
 * kind has input that has waited more than 3 x flush_ms for a successful flush (counted from
 * when it started waiting, or from the stage's start if later). So an idle stage is ready, a
 * stage whose windows keep aborting or whose store is down is not, even while it stops polling.
 * Not ready either while a stage-2 partition is held back by a retention gap, or while any
 * partition stands still (hc_metrics_partition_stalled). Any thread. */
bool hc_metrics_is_ready(const hc_metrics_t *m, int64_t now_ms, int64_t flush_ms);

/* hc_metrics_is_ready, and when not ready one line of why into why (/readyz's body): "no stage
 * is running", "stage1 holds no partitions (joining its group, or the broker is unreachable)",
 * "stage2 has input waiting 12.3 s for a flush (3 x flush.ms: commits or store batches keep
 * failing)", "stage2 holds back 2 partitions: their partials are past retention (event
 * retention_gap)". why may be NULL. Any thread. */
bool hc_metrics_readiness(const hc_metrics_t *m, int64_t now_ms, int64_t flush_ms, char *why,
                          size_t why_size);

/* ---- partitions that stand still ---------------------------------------------------------- */

#define HC_METRICS_STALLS_MAX 256     /* stalled partitions shown at once (more are counted only) */
#define HC_METRICS_STALL_STATE_MAX 64 /* the state label's bytes, NUL included */

/* A stage's assigned partition stands still past partition.progress.ms (stalled true: shown as
 * hotcount_partition_stalled with `state`, the stage's view of it, and the process is not
 * ready, /readyz saying which) or moves again, or is no longer the stage's (false). Any thread;
 * takes the lag mutex. */
void hc_metrics_partition_stalled(hc_metrics_t *m, hc_metrics_stage_kind_t kind, const char *topic,
                                  int32_t partition, bool stalled, const char *state,
                                  int64_t now_ms);

/* ---- consumer lag from librdkafka statistics ----------------------------------------------- */

/* Feeds one statistics JSON document (the stats_cb argument; need not be NUL-terminated): for
 * every topics.<t>.partitions.<p> with partition >= 0 and consumer_lag >= 0 it records the lag
 * of (t, p) for the reporting client (top-level "name"). Entries that client reported before but
 * not now (revoked partitions) are dropped, and so is any entry whose client has not updated it
 * for 3 of its statistics intervals (measured between its reports; HC_METRICS_STATS_INTERVAL_MS
 * until then). Beyond HC_METRICS_LAG_MAX entries new partitions are not recorded.
 * HC_ERR_INVALID when json is not a statistics object (nothing changes). Any thread (the stats
 * callback runs on the polling thread); takes the lag mutex. _at takes the hc_now_ms() time. */
hc_err_t hc_metrics_ingest_rdkafka_stats(hc_metrics_t *m, const char *json, size_t len);
hc_err_t hc_metrics_ingest_rdkafka_stats_at(hc_metrics_t *m, const char *json, size_t len,
                                            int64_t now_ms);

/* ---- hot keys ------------------------------------------------------------------------------ */

/* Replaces the hot keys published by `source` (a stable name per stage-1 instance, e.g.
 * "stage1/<instance>") with keys[0..n) (only the first HC_METRICS_HOT_KEYS are kept); n = 0
 * withdraws them (call it when the stage stops). Render sums the rates of a post over sources
 * and hides a source's keys once they are older than 3 x flush_ms (windows only close while
 * events arrive). Beyond HC_METRICS_HOT_SOURCES sources the longest-silent one gives way. Any
 * thread; takes the hot-keys mutex. */
void hc_metrics_publish_hot_keys(hc_metrics_t *m, const char *source, const hc_hotkey_t *keys,
                                 size_t n, int64_t now_ms);
/* The same for stage 2's hot set (hotcount_hot_post_events_per_second): `source` a stage-2
 * instance ("stage2/<instance>"), keys its members' exact rates (only post_id, post_id_len and
 * events_per_second are read), hidden once older than 3 x flush_ms like stage 1's. */
void hc_metrics_publish_hot_set(hc_metrics_t *m, const char *source, const hc_hotkey_t *keys,
                                size_t n, int64_t now_ms);

/* ---- exposition ---------------------------------------------------------------------------- */

/* Renders every metric in the Prometheus text format 0.0.4 (# HELP and # TYPE per family; label
 * values escaped: backslash, double quote and newline; invalid UTF-8 and control characters other
 * than tab replaced by U+FFFD) into a malloc'ed, NUL-terminated *out that the caller frees. now_ms
 * (hc_now_ms()) and flush_ms decide staleness and readiness. Returns the length, or 0 with *out
 * NULL when out of memory. Any thread. */
size_t hc_metrics_render(hc_metrics_t *m, int64_t now_ms, int64_t flush_ms, char **out);

#endif
