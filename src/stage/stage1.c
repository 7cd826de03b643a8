/* Stage 1: likes.raw -> per-post window sums -> one Kafka transaction per window.
 *
 * A window opens with the first message after the previous commit (no empty transactions) and
 * closes after flush.ms, when the table is full, on revocation, or on shutdown. Closing it
 * produces one partial per post, then sends the window's offsets to the transaction and commits.
 * The dead-letter records are produced into the same transaction as their messages arrive, so a
 * window's partials, its DLQ records and its offsets become visible together or not at all.
 *
 * Offsets are tracked here per partition from the messages actually processed, not with
 * rd_kafka_position(): when the table fills, the message that did not fit is already returned
 * by poll but must not be part of the committed window. The same ranges go, when topic.manifest
 * is set, into one manifest record per window inside its transaction (hotcount/manifest.h), so
 * a checker can prove that the committed windows tile every raw partition exactly once. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/hotkeys.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/manifest.h"
#include "hotcount/partial.h"
#include "hotcount/stage.h"
#include "hotcount/table.h"
#include "hotcount/window.h"

/* Back-off between retries of a retriable transactional call. */
#define TXN_RETRY_MS 200
/* messages consumed between clock reads while they queue up (see hc_stage1_run) */
#define CLOCK_EVERY 32

struct hc_stage1 {
    const hc_config_t *cfg;
    hc_metrics_t *metrics;
    char name[160];         /* for log lines: "stage1/<instance>" */
    rd_kafka_t *consumer;   /* owned */
    rd_kafka_t *producer;   /* owned, transactional */
    hc_table_t *tbl;        /* owned */
    hc_hotkeys_t *hk;       /* owned: the window's hottest posts */
    hc_manifest_t win;      /* owned: offsets this window consumed per raw partition */
    char txn_id[300];       /* <group.stage1>-<instance>: the producer's transactional.id */
    int64_t incarnation_ms; /* wall clock at hc_stage1_new, names this process in manifests */
    int64_t window_seq;     /* windows begun by this incarnation */
    atomic_int assigned;    /* partitions in our assignment; read by other threads */
    /* hc_now_ms() of the loop's last sign of life; the watchdog reads it from another thread */
    atomic_int_fast64_t heartbeat_ms;
    int64_t unpublished; /* messages polled but not yet added to metrics->events_consumed */
    bool in_txn;
    /* an aborted window's assignment was lost before it could rewind: rewind to the committed
     * offsets once partitions are assigned again, and drop every message until then */
    bool rewind_pending;
    int64_t window_start_ms;
    int64_t window_due_ms; /* when the open window closes (window.h) */
    int64_t window_ok;
    int64_t window_invalid;
    int64_t window_by_reason[HC_EVENT_REASON_COUNT];
    /* set by the rebalance callback, which cannot return an error to the loop */
    hc_err_t cb_err;
    char cb_errstr[512];
};

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque);

static int stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
    (void)rk;
    hc_stage1_t *s1 = opaque;
    hc_metrics_ingest_rdkafka_stats(s1->metrics, json, json_len);
    return 0;
}

hc_err_t hc_stage1_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage1_t **s1p, char *errstr, size_t errstr_size)
{
    *s1p = NULL;
    if (!instance_id) {
        instance_id = cfg->instance_id;
    }
    hc_stage1_t *s1 = calloc(1, sizeof(*s1));
    if (!s1) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    s1->cfg = cfg;
    s1->metrics = metrics;
    hc_manifest_init(&s1->win);
    s1->incarnation_ms = hc_wall_ms();
    snprintf(s1->name, sizeof(s1->name), "stage1/%s", instance_id);
    s1->tbl = hc_table_new((size_t)cfg->max_keys);
    if (!s1->tbl) {
        hc_errstr_set(errstr, errstr_size, "out of memory for max.keys=%lld",
                      (long long)cfg->max_keys);
        goto fail;
    }
    s1->hk = hc_hotkeys_new(HC_HOTKEYS_DEFAULT_K, (double)cfg->hotkeys_enter_rate,
                            (double)cfg->hotkeys_leave_rate);
    if (!s1->hk) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto fail;
    }
    snprintf(s1->txn_id, sizeof(s1->txn_id), "%s-%s", cfg->group_stage1, instance_id);
    hc_kafka_opts_t popts = {.transactional_id = s1->txn_id};
    s1->producer = hc_kafka_new(cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &popts, errstr, errstr_size);
    if (!s1->producer) {
        goto fail;
    }
    hc_kafka_opts_t copts = {.group_id = cfg->group_stage1,
                             .rebalance_cb = rebalance_cb,
                             .stats_cb = stats_cb,
                             .opaque = s1};
    s1->consumer = hc_kafka_new(cfg, HC_KAFKA_ROLE_STAGE1_CONSUMER, &copts, errstr, errstr_size);
    if (!s1->consumer) {
        goto fail;
    }
    *s1p = s1;
    return HC_OK;

fail:
    hc_stage1_destroy(s1);
    return HC_ERR_INVALID;
}

int64_t hc_stage1_heartbeat_ms(const hc_stage1_t *s1)
{
    return atomic_load(&s1->heartbeat_ms);
}

int hc_stage1_assigned(const hc_stage1_t *s1)
{
    return atomic_load(&s1->assigned);
}

void hc_stage1_destroy(hc_stage1_t *s1)
{
    if (!s1) {
        return;
    }
    if (s1->consumer) {
        rd_kafka_destroy(s1->consumer);
    }
    if (s1->producer) {
        rd_kafka_destroy(s1->producer);
    }
    hc_table_destroy(s1->tbl);
    hc_hotkeys_destroy(s1->hk);
    hc_manifest_fini(&s1->win);
    free(s1);
}

static void window_reset(hc_stage1_t *s1)
{
    hc_table_clear(s1->tbl);
    hc_manifest_clear(&s1->win);
    s1->window_ok = 0;
    s1->window_invalid = 0;
    memset(s1->window_by_reason, 0, sizeof(s1->window_by_reason));
    s1->in_txn = false;
}

/* A message this window processed. An offset that does not move forwards would be counted
 * twice in one window: stop rather than commit it. */
static hc_err_t record_offset(hc_stage1_t *s1, const rd_kafka_message_t *rkm, char *errstr,
                              size_t errstr_size)
{
    hc_err_t err = hc_manifest_record(&s1->win, rkm->partition, rkm->offset);
    if (err == HC_ERR_INVALID) {
        const hc_manifest_range_t *r = hc_manifest_range(&s1->win, rkm->partition);
        hc_errstr_set(errstr, errstr_size,
                      "%s/%" PRId32 ": offset %" PRId64 " after %" PRId64 " in one window",
                      s1->cfg->topic_raw, rkm->partition, rkm->offset,
                      r ? r->next - 1 : HC_MANIFEST_NONE);
        return HC_ERR_FATAL;
    }
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
    }
    return err;
}

/* Produces into the open transaction, waiting while the local queue is full. timestamp_ms: the
 * record's timestamp, 0 for the time of the call (a window's records share the window's close
 * time, which also spares librdkafka a clock read per partial). */
static hc_err_t produce(hc_stage1_t *s1, const char *topic, const void *key, size_t key_len,
                        const void *value, size_t value_len, int64_t timestamp_ms,
                        rd_kafka_headers_t *hdrs, char *errstr, size_t errstr_size)
{
    for (;;) {
        rd_kafka_resp_err_t err;
        if (hdrs) {
            err = rd_kafka_producev(
                s1->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_TIMESTAMP(timestamp_ms),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        } else {
            err = rd_kafka_producev(
                s1->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                RD_KAFKA_V_VALUE((void *)value, value_len), RD_KAFKA_V_TIMESTAMP(timestamp_ms),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        }
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            return HC_OK; /* the headers now belong to the message */
        }
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(s1->producer, 50);
            continue;
        }
        if (hdrs) {
            rd_kafka_headers_destroy(hdrs);
        }
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
            hc_errstr_set(errstr, errstr_size, "%s", rd_kafka_err2str(err));
            return HC_ERR_INVALID;
        }
        if (hc_kafka_fatal_check(s1->producer, errstr, errstr_size) != HC_OK) {
            return HC_ERR_FATAL;
        }
        /* e.g. __STATE: the transaction already failed; the window must be aborted */
        hc_errstr_set(errstr, errstr_size, "produce to %s: %s", topic, rd_kafka_err2str(err));
        return HC_ERR_ABORT;
    }
}

static hc_err_t produce_dlq(hc_stage1_t *s1, const rd_kafka_message_t *rkm,
                            hc_event_reason_t reason, char *errstr, size_t errstr_size)
{
    char source[400];
    snprintf(source, sizeof(source), "%s/%" PRId32 "/%" PRId64, rd_kafka_topic_name(rkm->rkt),
             rkm->partition, rkm->offset);
    size_t len = rkm->payload ? rkm->len : 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new(3);
        rd_kafka_header_add(hdrs, "hotcount-error", -1, hc_event_reason_str(reason), -1);
        rd_kafka_header_add(hdrs, "hotcount-source", -1, source, -1);
        if (len < (rkm->payload ? rkm->len : 0)) {
            char orig[32];
            snprintf(orig, sizeof(orig), "%zu", rkm->len);
            rd_kafka_header_add(hdrs, "hotcount-truncated-from", -1, orig, -1);
        }
        hc_err_t err = produce(s1, s1->cfg->topic_dlq, rkm->key, rkm->key_len, rkm->payload, len, 0,
                               hdrs, errstr, errstr_size);
        if (err != HC_ERR_INVALID) {
            return err;
        }
        /* The original is over the producer's size limit: keep its first event.max.bytes, the
         * source header still points at the whole message in likes.raw. */
        len = (size_t)s1->cfg->event_max_bytes;
    }
    return HC_ERR_FATAL;
}

static hc_err_t begin_window(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    hc_err_t err =
        hc_kafka_error_take(rd_kafka_begin_transaction(s1->producer), errstr, errstr_size);
    if (err != HC_OK) {
        /* begin fails only on programming or fatal errors */
        return HC_ERR_FATAL;
    }
    s1->in_txn = true;
    s1->window_seq++;
    s1->window_start_ms = hc_now_ms();
    s1->window_due_ms = hc_window_due_ms(s1->window_start_ms, hc_wall_ms(), s1->cfg->flush_ms, 0);
    hc_metrics_stage_input(s1->metrics, HC_METRICS_STAGE1, s1->window_start_ms);
    return HC_OK;
}

/* Rewinds every assigned partition to its committed offset by re-assigning: re-assigning
 * resets the fetch positions without seek, whose timeout is broken in librdkafka 2.0.2. */
static hc_err_t rewind_to_committed(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    rd_kafka_resp_err_t err = rd_kafka_assignment(s1->consumer, &assigned);
    if (err) {
        hc_errstr_set(errstr, errstr_size, "assignment: %s", rd_kafka_err2str(err));
        return HC_ERR_FATAL;
    }
    hc_err_t ret = HC_OK;
    if (assigned->cnt > 0) {
        for (int attempt = 0;; attempt++) {
            err = rd_kafka_committed(s1->consumer, assigned, 10000);
            if (!err) {
                break;
            }
            if (attempt == 5) {
                hc_errstr_set(errstr, errstr_size, "reading committed offsets: %s",
                              rd_kafka_err2str(err));
                ret = HC_ERR_FATAL;
                goto done;
            }
        }
        err = rd_kafka_assign(s1->consumer, assigned);
        if (err) {
            hc_errstr_set(errstr, errstr_size, "re-assign: %s", rd_kafka_err2str(err));
            ret = HC_ERR_FATAL;
        }
    }
done:
    rd_kafka_topic_partition_list_destroy(assigned);
    return ret;
}

/* Aborts the open transaction and drops the window; rewinds unless the partitions are going
 * away anyway. Returns HC_ERR_ABORT (the window is gone) or HC_ERR_FATAL. */
static hc_err_t abort_window(hc_stage1_t *s1, bool rewind, const char *why, char *errstr,
                             size_t errstr_size)
{
    /* A lost assignment (hc_kafka_may_reassign): the rewind waits for the next assignment
     * (hc_stage1_run); until then no message is trusted, since the fetch position is past the
     * aborted window. */
    bool lost = rewind && !hc_kafka_may_reassign(s1->consumer);
    if (lost) {
        rewind = false;
        s1->rewind_pending = true;
    }
    hc_log(HC_LOG_WARN, s1->name, "aborting window (%" PRId64 " events): %s%s",
           s1->window_ok + s1->window_invalid, why,
           lost ? " (assignment lost: rewinding at the next assignment)" : "");
    for (;;) {
        hc_err_t err =
            hc_kafka_error_take(rd_kafka_abort_transaction(s1->producer, -1), errstr, errstr_size);
        if (err == HC_OK) {
            break;
        }
        if (err != HC_ERR_TRANSIENT) {
            return HC_ERR_FATAL;
        }
        rd_kafka_poll(s1->producer, TXN_RETRY_MS);
        atomic_store(&s1->heartbeat_ms, hc_now_ms()); /* retrying is not hanging */
    }
    hc_metric_add(s1->metrics->txn_abort, 1);
    hc_hotkeys_reset(s1->hk);
    if (!rewind) {
        hc_metrics_stage_released(s1->metrics, HC_METRICS_STAGE1);
    }
    window_reset(s1);
    if (rewind) {
        hc_err_t err = rewind_to_committed(s1, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_ERR_ABORT;
}

/* Calls a transactional step until it is not retriable. */
#define TXN_RETRY(s1, call, err, errstr, errstr_size)                                              \
    for (;;) {                                                                                     \
        (err) = hc_kafka_error_take((call), (errstr), (errstr_size));                              \
        if ((err) != HC_ERR_TRANSIENT) {                                                           \
            break;                                                                                 \
        }                                                                                          \
        hc_log(HC_LOG_WARN, (s1)->name, "retrying: %s", (errstr));                                 \
        rd_kafka_poll((s1)->producer, TXN_RETRY_MS);                                               \
        atomic_store(&(s1)->heartbeat_ms, hc_now_ms());                                            \
    }

/* The window's hottest posts to the metrics, and one log line per post crossing the
 * hotkeys.enter.rate / hotkeys.leave.rate thresholds. The sketch gets each post of the table
 * once, with its exact count: per event it cost a second hash and lookup of every post id
 * (40 % of the hot path in one benchmark run). */
static void publish_hot_keys(hc_stage1_t *s1, int64_t now)
{
    hc_hotkey_t top[HC_METRICS_HOT_KEYS];
    size_t n = 0;
    size_t entries = hc_table_count(s1->tbl);
    for (size_t i = 0; i < entries; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s1->tbl, i);
        hc_hotkeys_offer_n(s1->hk, ent->post_id, ent->post_id_len, ent->events);
    }
    int64_t window_ms = now - s1->window_start_ms;
    hc_hotkeys_window_end(s1->hk, window_ms > 0 ? window_ms : 1, top, HC_METRICS_HOT_KEYS, &n);
    hc_metrics_publish_hot_keys(s1->metrics, s1->name, top, n, now);
    size_t nt = 0;
    const hc_hotkey_transition_t *tr = hc_hotkeys_transitions(s1->hk, &nt);
    for (size_t i = 0; i < nt; i++) {
        hc_log(HC_LOG_INFO, s1->name, "post %.*s %s: %.0f likes/s", (int)tr[i].post_id_len,
               tr[i].post_id, tr[i].change == HC_HOTKEY_ENTER ? "is hot" : "cooled down",
               tr[i].events_per_second);
    }
}

/* The window's manifest record into its transaction (topic.manifest set). */
static hc_err_t produce_manifest(hc_stage1_t *s1, int64_t timestamp_ms, char *errstr,
                                 size_t errstr_size)
{
    /* From the table, not from what was produced: a partial that went missing on the way shows
     * as a difference between the committed partials and the committed manifests. */
    size_t n = hc_table_count(s1->tbl);
    int64_t likes = 0;
    for (size_t i = 0; i < n; i++) {
        likes += hc_table_entry(s1->tbl, i)->delta;
    }
    hc_manifest_meta_t meta = {.transactional_id = s1->txn_id,
                               .instance_id = s1->name + strlen("stage1/"),
                               .incarnation_ms = s1->incarnation_ms,
                               .window = s1->window_seq,
                               .topic = s1->cfg->topic_raw,
                               .events = s1->window_ok,
                               .invalid = s1->window_invalid,
                               .partials = (int64_t)n,
                               .likes = likes};
    char *buf = NULL;
    size_t len = 0;
    if (hc_manifest_encode(&s1->win, &meta, &buf, &len) != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hc_err_t err = produce(s1, s1->cfg->topic_manifest, s1->txn_id, strlen(s1->txn_id), buf, len,
                           timestamp_ms, NULL, errstr, errstr_size);
    free(buf);
    return err == HC_ERR_INVALID ? HC_ERR_FATAL : err;
}

/* Produces the partials, sends the offsets and commits. Returns HC_OK (committed), HC_ERR_ABORT
 * (aborted and, if rewind, rewound: the window is gone) or HC_ERR_FATAL. */
static hc_err_t commit_window(hc_stage1_t *s1, bool rewind, char *errstr, size_t errstr_size)
{
    const hc_config_t *cfg = s1->cfg;
    int64_t t0 = hc_now_ms();
    int64_t closed_at = hc_wall_ms(); /* the timestamp of the window's records */
    size_t n = hc_table_count(s1->tbl);
    hc_err_t err = HC_OK;
#ifdef HC_MUTANT_DROP_PARTIAL
    /* Mutant build (tests/faults/mutants.sh), never the product: the third window silently
     * loses its first partial that carries likes. */
    bool dropped = s1->window_seq != 3;
#endif
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s1->tbl, i);
#ifdef HC_MUTANT_DROP_PARTIAL
        if (!dropped && ent->delta != 0) {
            dropped = true;
            continue;
        }
#endif
        char buf[HC_PARTIAL_MAX_BYTES];
        size_t len = hc_partial_encode(ent, buf, sizeof(buf));
        if (len == 0) {
            hc_errstr_set(errstr, errstr_size, "partial too large for post of %u bytes",
                          ent->post_id_len);
            return HC_ERR_FATAL;
        }
        err = produce(s1, cfg->topic_partials, ent->post_id, ent->post_id_len, buf, len, closed_at,
                      NULL, errstr, errstr_size);
        if (err == HC_ERR_ABORT) {
            return abort_window(s1, rewind, errstr, errstr, errstr_size);
        }
        if (err != HC_OK) {
            return HC_ERR_FATAL;
        }
    }

    if (cfg->topic_manifest[0]) {
        err = produce_manifest(s1, closed_at, errstr, errstr_size);
        if (err == HC_ERR_ABORT) {
            return abort_window(s1, rewind, errstr, errstr, errstr_size);
        }
        if (err != HC_OK) {
            return HC_ERR_FATAL;
        }
    }

    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(16);
    for (int32_t p = 0; p < s1->win.cap; p++) {
        const hc_manifest_range_t *r = hc_manifest_range(&s1->win, p);
        if (r) {
            rd_kafka_topic_partition_list_add(offsets, cfg->topic_raw, p)->offset = r->next;
        }
    }
    rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata(s1->consumer);
    TXN_RETRY(s1, rd_kafka_send_offsets_to_transaction(s1->producer, offsets, cgmd, -1), err,
              errstr, errstr_size);
    rd_kafka_consumer_group_metadata_destroy(cgmd);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (err == HC_ERR_ABORT) {
        return abort_window(s1, rewind, errstr, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return HC_ERR_FATAL;
    }

    TXN_RETRY(s1, rd_kafka_commit_transaction(s1->producer, -1), err, errstr, errstr_size);
    if (err == HC_ERR_ABORT) {
        return abort_window(s1, rewind, errstr, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return HC_ERR_FATAL;
    }

    hc_metrics_t *m = s1->metrics;
    int64_t now = hc_now_ms();
    double secs = (double)(now - t0) / 1000.0;
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE1, now, secs);
    hc_histogram_observe(&m->txn_seconds, secs);
    publish_hot_keys(s1, now);
    hc_metric_add(m->events_ok, s1->window_ok);
    hc_metric_add(m->events_invalid, s1->window_invalid);
    for (int r = 0; r < HC_EVENT_REASON_COUNT; r++) {
        if (s1->window_by_reason[r]) {
            hc_metric_add(m->invalid_by_reason[r], s1->window_by_reason[r]);
        }
    }
    hc_metric_add(m->partials, (int64_t)n);
    hc_metric_add(m->txn_commit, 1);
    hc_log(HC_LOG_INFO, s1->name,
           "committed window: %" PRId64 " events, %" PRId64 " invalid, %zu partials, %" PRId64
           " ms",
           s1->window_ok, s1->window_invalid, n, hc_now_ms() - t0);
    window_reset(s1);
    return HC_OK;
}

/* Commits the open window before partitions go; aborts it if they were lost (another consumer
 * may already own them, so our offsets must not be committed). */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    hc_stage1_t *s1 = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        hc_log(HC_LOG_INFO, s1->name, "assigned %d partitions", partitions->cnt);
        rd_kafka_assign(rk, partitions);
        atomic_store(&s1->assigned, partitions->cnt);
        hc_metric_add(s1->metrics->stage1_assigned, partitions->cnt);
        return;
    }
    if (s1->in_txn && s1->cb_err == HC_OK) {
        hc_err_t ret;
        if (rd_kafka_assignment_lost(rk)) {
            ret = abort_window(s1, false, "assignment lost", s1->cb_errstr, sizeof(s1->cb_errstr));
        } else {
            ret = commit_window(s1, false, s1->cb_errstr, sizeof(s1->cb_errstr));
        }
        if (ret == HC_ERR_FATAL) {
            s1->cb_err = HC_ERR_FATAL;
        }
    }
    hc_log(HC_LOG_INFO, s1->name, "revoked %d partitions", partitions->cnt);
    rd_kafka_assign(rk, NULL);
    hc_metric_add(s1->metrics->stage1_assigned, -atomic_exchange(&s1->assigned, 0));
}

static hc_err_t handle_message(hc_stage1_t *s1, const rd_kafka_message_t *rkm, char *errstr,
                               size_t errstr_size)
{
    hc_err_t err;
    if (!s1->in_txn && (err = begin_window(s1, errstr, errstr_size)) != HC_OK) {
        return err;
    }
    hc_event_t ev;
    const char *payload = rkm->payload;
    hc_event_reason_t reason = hc_event_parse(payload ? payload : "", payload ? rkm->len : 0,
                                              (size_t)s1->cfg->event_max_bytes, &ev);
    if (reason == HC_EVENT_OK) {
        int64_t ts = ev.has_ts ? ev.ts : HC_TS_NONE;
        err = hc_table_add(s1->tbl, ev.post_id, ev.post_id_len, ev.delta, 1, ts, ts);
        if (err == HC_ERR_FULL) {
            /* Close the window without this message (its offset is not recorded yet). */
            err = commit_window(s1, true, errstr, errstr_size);
            if (err != HC_OK) {
                return err; /* aborted: the message is fetched again after the rewind */
            }
            if ((err = begin_window(s1, errstr, errstr_size)) != HC_OK) {
                return err;
            }
            err = hc_table_add(s1->tbl, ev.post_id, ev.post_id_len, ev.delta, 1, ts, ts);
        }
        if (err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "aggregation table: %s", hc_err_name(err));
            return HC_ERR_FATAL;
        }
        s1->window_ok++;
    } else {
        err = produce_dlq(s1, rkm, reason, errstr, errstr_size);
        if (err == HC_ERR_ABORT) {
            return abort_window(s1, true, errstr, errstr, errstr_size);
        }
        if (err != HC_OK) {
            return err;
        }
        s1->window_invalid++;
        s1->window_by_reason[reason]++;
    }
    return record_offset(s1, rkm, errstr, errstr_size);
}

hc_err_t hc_stage1_run(hc_stage1_t *s1, const atomic_bool *stop, char *errstr, size_t errstr_size)
{
    const hc_config_t *cfg = s1->cfg;
    atomic_store(&s1->heartbeat_ms, hc_now_ms());
    hc_err_t err =
        hc_kafka_error_take(rd_kafka_init_transactions(s1->producer, 60000), errstr, errstr_size);
    for (int attempt = 0; err == HC_ERR_TRANSIENT && attempt < 10 && !atomic_load(stop);
         attempt++) {
        hc_log(HC_LOG_WARN, s1->name, "init_transactions: %s; retrying", errstr);
        err = hc_kafka_error_take(rd_kafka_init_transactions(s1->producer, 60000), errstr,
                                  errstr_size);
    }
    if (err != HC_OK) {
        return HC_ERR_FATAL;
    }
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->topic_raw, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(s1->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "subscribe %s: %s", cfg->topic_raw,
                      rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    hc_metrics_stage_started(s1->metrics, HC_METRICS_STAGE1, hc_now_ms());
    hc_log(HC_LOG_INFO, s1->name, "consuming %s, flush.ms=%lld, max.keys=%lld", cfg->topic_raw,
           (long long)cfg->flush_ms, (long long)cfg->max_keys);

    err = HC_OK;
    /* The clock is read once per CLOCK_EVERY messages while they queue up (a read costs 60-90 ns
     * on a VM: three per message were 13 % of stage 1's CPU), and after every poll that may
     * have waited, so windows still close within a millisecond of their due time. */
    int64_t now = hc_now_ms();
    unsigned since_clock = 0;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
        /* relaxed: a plain store, not a locked instruction per message; the watchdog only
         * needs the value, no ordering with anything else */
        atomic_store_explicit(&s1->heartbeat_ms, now, memory_order_relaxed);
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(s1->consumer, 0);
        /* fatal client errors are looked for whenever the clock is read */
        bool checkpoint = !rkm || since_clock + 1 == CLOCK_EVERY;
        if (rkm && ++since_clock == CLOCK_EVERY) {
            now = hc_now_ms();
            since_clock = 0;
        } else if (!rkm) {
            int timeout = 100;
            if (s1->in_txn) {
                int64_t left = s1->window_due_ms - hc_now_ms();
                timeout = left <= 0 ? 0 : left < timeout ? (int)left : timeout;
            }
            if (timeout > 0) {
                rkm = rd_kafka_consumer_poll(s1->consumer, timeout);
            }
            now = hc_now_ms();
            since_clock = 0;
        }
        if (s1->cb_err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "%s", s1->cb_errstr);
            err = s1->cb_err;
            if (rkm) {
                rd_kafka_message_destroy(rkm);
            }
            break;
        }
        if (s1->rewind_pending) {
            if (rkm) {
                rd_kafka_message_destroy(rkm); /* fetched from past the aborted window */
                rkm = NULL;
            }
            if (atomic_load(&s1->assigned) > 0 && hc_kafka_may_reassign(s1->consumer)) {
                s1->rewind_pending = false;
                if ((err = rewind_to_committed(s1, errstr, errstr_size)) != HC_OK) {
                    break;
                }
                hc_log(HC_LOG_INFO, s1->name,
                       "rewound to the committed offsets after a lost "
                       "assignment");
            }
        }
        if (rkm) {
            if (rkm->err) {
                hc_log(HC_LOG_WARN, s1->name, "consumer: %s", rd_kafka_message_errstr(rkm));
            } else {
                err = handle_message(s1, rkm, errstr, errstr_size);
            }
            rd_kafka_message_destroy(rkm);
            if (++s1->unpublished == 1024) {
                hc_metric_add(s1->metrics->events_consumed, s1->unpublished);
                s1->unpublished = 0;
            }
            if (err == HC_ERR_ABORT) {
                err = HC_OK;
            } else if (err != HC_OK) {
                break;
            }
        }
        if (!rkm && s1->unpublished) {
            hc_metric_add(s1->metrics->events_consumed, s1->unpublished);
            s1->unpublished = 0;
        }
        if (s1->in_txn && now >= s1->window_due_ms) {
            err = commit_window(s1, true, errstr, errstr_size);
            if (err == HC_ERR_ABORT) {
                err = HC_OK;
            } else if (err != HC_OK) {
                break;
            }
        }
        if (checkpoint &&
            ((err = hc_kafka_fatal_check(s1->consumer, errstr, errstr_size)) != HC_OK ||
             (err = hc_kafka_fatal_check(s1->producer, errstr, errstr_size)) != HC_OK)) {
            break;
        }
    }

    if (err == HC_OK && s1->in_txn) {
        err = commit_window(s1, false, errstr, errstr_size);
        if (err == HC_ERR_ABORT) {
            err = HC_OK; /* nothing committed: the next owner starts from the committed offsets */
        }
    }
    if (err != HC_OK && s1->cb_err == HC_OK) {
        s1->cb_err = err; /* a failed stage must not commit from the revoke callback */
        snprintf(s1->cb_errstr, sizeof(s1->cb_errstr), "%s", errstr);
    }
    /* Leaves the group; the revoke callback finds no open window. */
    rd_kafka_consumer_close(s1->consumer);
    if (err == HC_OK && s1->cb_err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s", s1->cb_errstr);
        err = s1->cb_err;
    }
    hc_metrics_stage_stopped(s1->metrics, HC_METRICS_STAGE1);
    hc_metrics_publish_hot_keys(s1->metrics, s1->name, NULL, 0, 0);
    if (err != HC_OK) {
        hc_log(HC_LOG_ERROR, s1->name, "stopping: %s", errstr);
    } else {
        hc_log(HC_LOG_INFO, s1->name, "stopped cleanly");
    }
    return err;
}
