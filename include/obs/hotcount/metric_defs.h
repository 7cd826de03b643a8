/* Layer: obs. The metric registry: every metric hotcount exposes, declared once, here.
 *
 * One row per metric and page: its id (HC_M_<id>), the page that shows it (STAGES: the stages'
 * /metrics on metrics.listen, src/obs/metrics.c; SERVE: `hotcount serve`'s /metrics on
 * serve.listen, src/serve/serve_http.c), its name, type, labels (as the docs show them: a label
 * with a fixed set of values lists them, `name="a"|"b"`), its # HELP text, and its meaning for the
 * docs. The renderers take the name, type and HELP text from this table and nothing else; the
 * metric tables of docs/OPERATIONS.md and docs/FORMATS.md are `hotcount metrics --markdown
 * [--serve]`'s output (tools/gen-docs writes them; the docs_generated test fails when they differ),
 * and tests/deploy/check_deploy.py checks the alerts and dashboards against the same output.
 * hotcount_up is on both pages, so it has a row on each. Metric names and labels are the
 * contract users script against: never rename one (unit_metrics_page compares the whole page).
 *
 * Rows are in the order the pages render them. Markdown in the meaning (backticks) is kept; the
 * table printer escapes `|`. */
#ifndef HOTCOUNT_METRIC_DEFS_H
#define HOTCOUNT_METRIC_DEFS_H

#include <stdio.h>

/* clang-format off */
#define HC_METRIC_TABLE(X) \
    X(UP, STAGES, "hotcount_up", GAUGE, "", \
      "1 while the process serves metrics.", \
      "always 1 while the process serves /metrics") \
    X(READY, STAGES, "hotcount_ready", GAUGE, "", \
      "1 when every running stage holds partitions and none is behind on its flushes.", \
      "1 when /readyz answers 200 (`hc_metrics_is_ready`)") \
    X(EVENTS_CONSUMED, STAGES, "hotcount_events_consumed_total", COUNTER, "", \
      "Raw messages polled by stage 1, including those of windows not committed yet.", \
      "raw messages polled by stage 1, committed or not") \
    X(EVENTS, STAGES, "hotcount_events_total", COUNTER, "result=\"ok\"|\"invalid\"", \
      "Raw events in committed stage-1 windows, by parse result.", \
      "raw events in committed stage-1 windows") \
    X(INVALID_EVENTS, STAGES, "hotcount_invalid_events_total", COUNTER, "reason", \
      "Invalid raw events sent to the dead-letter topic, by reason.", \
      "invalid events by reason (the `hotcount-error` header values; one series per reason, " \
      "zeros included)") \
    X(PARTIALS, STAGES, "hotcount_partials_total", COUNTER, "", \
      "Partials produced in committed stage-1 transactions.", \
      "partials produced in committed stage-1 transactions (one per post and window, in either " \
      "`partials.format`)") \
    X(PARTIAL_RECORDS, STAGES, "hotcount_partial_records_total", COUNTER, "", \
      "likes.partials records produced in committed stage-1 transactions.", \
      "`likes.partials` records produced in committed stage-1 transactions (packed: a record " \
      "carries up to 1024 partials; single: equal to `hotcount_partials_total`)") \
    X(TRANSACTIONS, STAGES, "hotcount_transactions_total", COUNTER, \
      "outcome=\"commit\"|\"abort\"", \
      "Stage-1 Kafka transactions by outcome.", \
      "stage-1 Kafka transactions") \
    X(TRANSACTION_SECONDS, STAGES, "hotcount_transaction_seconds", HISTOGRAM, "", \
      "Stage-1 window close: producing the partials through the commit.", \
      "stage-1 window close: first partial produced to commit acknowledged") \
    X(PARTIALS_CONSUMED, STAGES, "hotcount_partials_consumed_total", COUNTER, "", \
      "Partials in committed store batches.", \
      "partials in committed store batches") \
    X(PARTIALS_INVALID, STAGES, "hotcount_partials_invalid_total", COUNTER, "reason", \
      "Partials stage 2 sent to the dead-letter topic instead of counting, by reason.", \
      "partials stage 2 dead-lettered instead of counting, by reason (the `hotcount-error` " \
      "header values of docs/FORMATS.md \"Partials\", `hotcount/partial_check.h`)") \
    X(STORE_BATCHES, STAGES, "hotcount_store_batches_total", COUNTER, \
      "outcome=\"commit\"|\"conflict\"|\"error\"", \
      "Stage-2 store batches by outcome.", \
      "stage-2 store batches") \
    X(STORE_KEYS_WRITTEN, STAGES, "hotcount_store_keys_written_total", COUNTER, "", \
      "Posts written by committed store batches.", \
      "posts written by committed store batches") \
    X(EVENTS_STORED, STAGES, "hotcount_events_stored_total", COUNTER, "", \
      "Raw events covered by committed store batches.", \
      "raw events covered by committed store batches") \
    X(STORE_FORGOT, STAGES, "hotcount_store_forgot_total", COUNTER, "", \
      "Stage-2 store checks that found the store had forgotten or gone back (rebuilt).", \
      "stage-2 store checks (`store.check.ms`) that found the store no longer holding the " \
      "offsets stage 2 last wrote, or another server (docs/EVENTS.md `store_forgot`): each " \
      "re-read the store's offsets and rebuilt the counts from likes.partials") \
    X(RETENTION_GAP_PARTITIONS, STAGES, "hotcount_retention_gap_partitions", GAUGE, "", \
      "Stage-2 partitions not applied: the partials their counts need are past retention.", \
      "stage-2 partitions not applied because the partials their counts need are past " \
      "retention (the store's offset, or the beginning when it has none, is below the " \
      "partition's log start; docs/EVENTS.md `retention_gap`); while above 0 the process is " \
      "not ready") \
    X(HOT_POSTS, STAGES, "hotcount_hot_posts", GAUGE, "", \
      "Posts in this process's stage-2 hot sets.", \
      "posts in this process's stage-2 hot sets (detected: hot or cooling; docs/FORMATS.md " \
      "\"Hot keys\")") \
    X(HOTKEY_TRANSITIONS, STAGES, "hotcount_hotkey_transitions_total", COUNTER, \
      "to=\"hot\"|\"cool\"", \
      "Stage-2 hot-set changes: posts entering (to=hot) and leaving (to=cool).", \
      "stage-2 hot-set changes: posts entering (over `hotkeys.enter.rate`) and leaving (below " \
      "`hotkeys.leave.rate` for `hotkeys.dwell.ms`, or evicted from a full set)") \
    X(HOTKEY_FLAPS, STAGES, "hotcount_hotkey_flaps_total", COUNTER, "", \
      "Posts entering the stage-2 hot set again soon after leaving it.", \
      "posts entering the hot set again less than max(60 s, 6 x `hotkeys.dwell.ms`) after " \
      "leaving it: thresholds too close or a dwell too short for the traffic (alert " \
      "HotcountHotKeyFlapping; counted through a fixed-size memory of departures: may err low)") \
    X(STORE_SECONDS, STAGES, "hotcount_store_seconds", HISTOGRAM, "", \
      "Time to apply one store batch, any outcome.", \
      "one store batch apply (`hc_store_apply`), any outcome") \
    X(BATCH_POSTS, STAGES, "hotcount_batch_posts", HISTOGRAM, "", \
      "Posts per committed store batch.", \
      "posts per committed store batch") \
    X(FLUSH_SECONDS, STAGES, "hotcount_flush_seconds", HISTOGRAM, "stage=\"1\"|\"2\"", \
      "Time to flush one window: stage 1 commits a transaction, stage 2 stores a batch.", \
      "one window flush, from its decision to done") \
    X(END_TO_END_SECONDS, STAGES, "hotcount_end_to_end_seconds", HISTOGRAM, "", \
      "From an event's ts to the store commit that counted it.", \
      "event `ts` to the store commit that counted it") \
    X(CONSUMER_LAG, STAGES, "hotcount_consumer_lag", GAUGE, "topic, partition", \
      "Messages between a partition's high watermark and this process's consumer position, " \
      "from librdkafka statistics.", \
      "messages behind the high watermark, from librdkafka statistics (every 5 s unless " \
      "`kafka.statistics.interval.ms` says otherwise), served on a thread of their own: " \
      "current while the stage is behind or waits on a slow store; a series is left out " \
      "when its client reported nothing for 3 intervals") \
    X(PARTITION_STALLED, STAGES, "hotcount_partition_stalled", GAUGE, \
      "stage=\"1\"|\"2\", topic, partition, state", \
      "1 for each assigned partition with input waiting that has committed no progress for " \
      "partition.progress.ms (event partition_stalled); absent while it moves.", \
      "1 for each assigned partition whose input waits and that has committed no progress for " \
      "`partition.progress.ms` (docs/EVENTS.md `partition_stalled`; state: the stage's view of " \
      "it, e.g. `retry`); absent while it moves. While any is present the process is not ready") \
    X(PARTITIONS_STALLED, STAGES, "hotcount_partitions_stalled", GAUGE, "stage=\"1\"|\"2\"", \
      "Assigned partitions standing still now (hotcount_partition_stalled), per stage.", \
      "how many `hotcount_partition_stalled` series the stage has now (0 normally: alert on > " \
      "0)") \
    X(PARTITION_STALLS, STAGES, "hotcount_partition_stalls_total", COUNTER, "stage=\"1\"|\"2\"", \
      "Partitions found standing still past partition.progress.ms, per stage.", \
      "partitions found standing still past `partition.progress.ms`") \
    X(STORE_BATCH_LIMIT, STAGES, "hotcount_store_batch_limit_posts", GAUGE, "", \
      "Stage 2's batch limit in posts: max.keys, shrunk while the store is slow or " \
      "throttles, grown back as it keeps up.", \
      "stage 2's batch limit: `max.keys`, shrunk while the store commits slowly, throttles or " \
      "times out, grown back as it keeps up (docs/EVENTS.md `store_batch_limit`)") \
    X(ASSIGNED_PARTITIONS, STAGES, "hotcount_assigned_partitions", GAUGE, "stage=\"1\"|\"2\"", \
      "Partitions assigned to this process's stages.", \
      "partitions assigned to this process's stages") \
    X(UNFLUSHED_INPUT_SECONDS, STAGES, "hotcount_unflushed_input_seconds", GAUGE, \
      "stage=\"1\"|\"2\"", \
      "How long input a stage consumed has waited for a successful flush (its open window, " \
      "counted from the first attempt when it is read again); 0 when none waits.", \
      "how long input the stage consumed has waited for a successful flush (its open window; a " \
      "window aborted or refused and read again counts from its first attempt); 0 when none " \
      "waits") \
    X(STAGE_INSTANCES, STAGES, "hotcount_stage_instances", GAUGE, "stage=\"1\"|\"2\"", \
      "Stage instances running in this process (0: it does not run that stage).", \
      "stage instances running in this process (0: the process does not run that stage)") \
    X(HOT_KEY_EVENTS_PER_SECOND, STAGES, "hotcount_hot_key_events_per_second", GAUGE, "post_id", \
      "Events per second of the busiest posts over stage 1's last window (space-saving " \
      "estimate, never below the true rate), summed over this process's stage-1 instances.", \
      "the current top posts (at most 20) by events/s over stage 1's last window, summed over " \
      "this process's stage-1 instances") \
    X(HOT_POST_EVENTS_PER_SECOND, STAGES, "hotcount_hot_post_events_per_second", GAUGE, \
      "post_id, source=\"detected\"", \
      "Stage 2's hot-set members (hot or cooling) with their exact events per second over " \
      "its last window.", \
      "the members of this process's stage-2 hot sets (at most 20, hottest first; hot or " \
      "cooling) with their exact global events/s over stage 2's last window; a member below " \
      "`hotcount_hotkeys_leave_rate` is cooling") \
    X(HOTKEYS_ENTER_RATE, STAGES, "hotcount_hotkeys_enter_rate", GAUGE, "", \
      "Stage 2's hotkeys.enter.rate: events/s at which a post enters the hot set.", \
      "stage 2's `hotkeys.enter.rate` (events/s at which a post enters the hot set); absent " \
      "without a stage-2 hot set") \
    X(HOTKEYS_LEAVE_RATE, STAGES, "hotcount_hotkeys_leave_rate", GAUGE, "", \
      "Stage 2's hotkeys.leave.rate: events/s below which a member cools.", \
      "stage 2's `hotkeys.leave.rate` (events/s below which a member cools, for " \
      "`hotkeys.dwell.ms`); absent without a stage-2 hot set") \
    X(CONSUMER_FETCH_QUEUE_BYTES, STAGES, "hotcount_consumer_fetch_queue_bytes", GAUGE, "", \
      "Bytes of messages this process's consumers have pre-fetched and not yet handed to " \
      "a stage, from librdkafka statistics (bounded by queued.max.messages.kbytes).", \
      "message bytes the stages' consumers have pre-fetched and not yet handed over " \
      "(librdkafka statistics, every statistics.interval.ms; bounded by " \
      "`queued.max.messages.kbytes`); RSS is about 4 times it for 130-byte events") \
    X(MEMORY_RSS_BYTES, STAGES, "hotcount_memory_rss_bytes", GAUGE, "", \
      "Resident set size of the process (/proc/self/statm).", \
      "resident set size of the process") \
    X(MEMORY_ALLOCATED_BYTES, STAGES, "hotcount_memory_allocated_bytes", GAUGE, "", \
      "Bytes in live allocations (jemalloc stats.allocated).", \
      "bytes in live allocations (jemalloc builds only: stats.allocated)") \
    X(MEMORY_RESIDENT_BYTES, STAGES, "hotcount_memory_resident_bytes", GAUGE, "", \
      "Bytes of the allocator's pages in memory: live allocations, free pages not yet " \
      "returned to the kernel, metadata (jemalloc stats.resident).", \
      "the allocator's resident pages: live allocations, free pages not yet returned to the " \
      "kernel, metadata (jemalloc builds only: stats.resident); minus allocated, what the " \
      "allocator retains") \
    X(MEMORY_RETAINED_BYTES, STAGES, "hotcount_memory_retained_bytes", GAUGE, "", \
      "Address space jemalloc keeps for reuse after returning its pages to the kernel: " \
      "not resident (jemalloc stats.retained).", \
      "address space jemalloc keeps after returning its pages to the kernel, not resident " \
      "(jemalloc builds only: stats.retained)") \
    X(SERVE_UP, SERVE, "hotcount_up", GAUGE, "", \
      "always 1 while the process serves /metrics", \
      "always 1 while the process serves /metrics") \
    X(SERVE_REQUESTS, SERVE, "hotcount_serve_requests_total", COUNTER, \
      "code=\"200\"|\"304\"|\"400\"|\"404\"|\"405\"|\"500\"|\"503\"|\"other\"", \
      "HTTP requests answered, by status code", \
      "HTTP requests answered, by status (libmicrohttpd's own refusals included)") \
    X(SERVE_STORE_READS, SERVE, "hotcount_serve_store_reads_total", COUNTER, \
      "kind=\"likes\"|\"top\"", \
      "store reads (hc_store_get of one post, hc_store_top), at most one per post per " \
      "serve.ttl.ms", \
      "store reads, at most one per post (or top query) per `serve.ttl.ms` (rate it for store " \
      "reads per second)") \
    X(SERVE_STORE_READ_ERRORS, SERVE, "hotcount_serve_store_read_errors_total", COUNTER, "", \
      "store reads that failed", \
      "store reads that failed") \
    X(SERVE_CONNECTIONS_REFUSED, SERVE, "hotcount_serve_connections_refused_total", COUNTER, "", \
      "connections refused at accept (serve.max.connections, .per.ip)", \
      "connections refused at accept (`serve.max.connections`, " \
      "`serve.max.connections.per.ip`)") \
    X(SERVE_CONNECTIONS_TIMED_OUT, SERVE, "hotcount_serve_connections_timed_out_total", \
      COUNTER, "", \
      "connections cut at their deadline (serve.request.timeout.ms)", \
      "connections cut at their deadline (`serve.request.timeout.ms`)") \
    X(SERVE_CONNECTIONS_EVICTED, SERVE, "hotcount_serve_connections_evicted_total", COUNTER, "", \
      "connections shed to admit an address holding fewer (fair share)", \
      "connections shed to admit an address holding fewer (fair share)") \
    X(SERVE_BAD_FRAMING, SERVE, "hotcount_serve_bad_framing_total", COUNTER, "", \
      "requests refused for their framing (a body, Transfer-Encoding, two Content-Lengths)", \
      "requests refused for their framing (a body, Transfer-Encoding, two Content-Lengths)") \
    X(SERVE_CONNECTIONS_OPEN, SERVE, "hotcount_serve_connections_open", GAUGE, "", \
      "HTTP connections open now", \
      "HTTP connections open now") \
    X(SERVE_CACHE_HITS, SERVE, "hotcount_serve_cache_hits_total", COUNTER, "", \
      "post lookups answered from a fresh cache entry", \
      "post lookups answered from a fresh cache entry") \
    X(SERVE_CACHE_COALESCED, SERVE, "hotcount_serve_cache_coalesced_total", COUNTER, "", \
      "post lookups that waited for another request's store read", \
      "post lookups that waited for another request's store read") \
    X(SERVE_CACHE_EVICTIONS, SERVE, "hotcount_serve_cache_evictions_total", COUNTER, "", \
      "posts evicted from the cache (serve.cache.max.keys)", \
      "posts evicted from the cache (`serve.cache.max.keys`)") \
    X(SERVE_CACHE_ENTRIES, SERVE, "hotcount_serve_cache_entries", GAUGE, "", \
      "posts in the cache", \
      "posts in the cache") \
    X(SERVE_HOT_POSTS, SERVE, "hotcount_serve_hot_posts", GAUGE, "", \
      "posts read-hot now (their counts cached serve.hot.ttl.ms)", \
      "posts read-hot now (cached `serve.hot.ttl.ms`; README, \"Read-hot promotion\")") \
    X(SERVE_HOT_PROMOTIONS, SERVE, "hotcount_serve_hot_promotions_total", COUNTER, \
      "source=\"reads\"|\"topic\"", \
      "posts promoted to read-hot, by source", \
      "posts promoted to read-hot: by their read rate, or from `topic.hotkeys`") \
    X(SERVE_HOT_DEMOTIONS, SERVE, "hotcount_serve_hot_demotions_total", COUNTER, \
      "source=\"reads\"|\"topic\"", \
      "read-hot posts demoted, by source", \
      "read-hot posts demoted (after `serve.hot.dwell.ms` below the leave rate, or cooled in " \
      "the topic)") \
    X(SERVE_HOT_FLAPS, SERVE, "hotcount_serve_hot_flaps_total", COUNTER, "", \
      "promotions by read rate within a minute of the same post's demotion", \
      "promotions by read rate within 60 s of the same post's demotion") \
    X(SERVE_REQUEST_SECONDS, SERVE, "hotcount_serve_request_seconds", HISTOGRAM, "", \
      "one request, from its first byte parsed to its answer sent", \
      "one request, first byte parsed to answer sent; buckets 0.0001 0.00025 0.0005 0.001 " \
      "0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5")
/* clang-format on */

typedef enum hc_metric_page {
    HC_METRIC_PAGE_STAGES, /* the stages' /metrics (metrics.listen) */
    HC_METRIC_PAGE_SERVE,  /* `hotcount serve`'s /metrics (serve.listen) */
} hc_metric_page_t;

typedef enum hc_metric_type {
    HC_METRIC_COUNTER,
    HC_METRIC_GAUGE,
    HC_METRIC_HISTOGRAM,
} hc_metric_type_t;

typedef enum hc_metric_id {
#define HC_METRIC_ID_(id, page, name, type, labels, help, doc) HC_M_##id,
    HC_METRIC_TABLE(HC_METRIC_ID_)
#undef HC_METRIC_ID_
        HC_METRIC_COUNT
} hc_metric_id_t;

typedef struct hc_metric_def {
    hc_metric_page_t page;
    const char *name;
    hc_metric_type_t type;
    const char *labels; /* as the docs show them; "" for none */
    const char *help;   /* the # HELP text */
    const char *doc;    /* the docs' meaning (Markdown) */
} hc_metric_def_t;

/* The table above, indexed by hc_metric_id_t; static storage, read-only. */
extern const hc_metric_def_t hc_metric_defs[HC_METRIC_COUNT];

/* "counter", "gauge" or "histogram": the # TYPE word. */
const char *hc_metric_type_str(hc_metric_type_t type);

/* The page's metrics as a Markdown table (| metric | type | labels | meaning |), in page order:
 * what docs/OPERATIONS.md and docs/FORMATS.md hold. */
void hc_metric_defs_print_markdown(FILE *out, hc_metric_page_t page);
/* One line per metric of the page: name, type, labels, # HELP text, tab-separated. */
void hc_metric_defs_print(FILE *out, hc_metric_page_t page);

#endif
