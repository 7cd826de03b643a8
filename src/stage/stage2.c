/* Stage 2: likes.partials (read_committed) -> per-post merge -> one conditional store batch.
 *
 * The store is the source of truth for stage 2's position: on every assignment, after a lost
 * compare-and-set, the stage reads the stored offsets and assigns its partitions there. Each
 * partition remembers `start` (the stored offset its window began from: the batch's expected
 * value) and `next` (one past the last partial it consumed).
 *
 * A store outage pauses the partitions and retries the same batch with capped exponential
 * back-off. Retrying after an ambiguous failure is safe: if the first attempt did commit, the
 * retry loses the compare-and-set and the stage re-reads the offsets instead of counting twice. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/changelog.h"
#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"
#include "hotcount/table.h"
#include "hotcount/window.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

typedef struct part_state {
    bool assigned;
    bool touched;  /* consumed from in the open window */
    int64_t start; /* stored next_offset, or HC_OFFSET_NONE */
    int64_t next;  /* next offset to consume */
} part_state_t;

struct hc_stage2 {
    const hc_config_t *cfg;
    hc_metrics_t *metrics;
    char name[160];
    rd_kafka_t *consumer;      /* owned */
    hc_changelog_t *changelog; /* owned; NULL when topic.counts is off */
    hc_store_t *st;            /* owned */
    hc_table_t *tbl;           /* owned */
    part_state_t *parts;       /* owned, indexed by partition */
    int32_t parts_cap;
    atomic_int assigned; /* read by other threads */
    /* hc_now_ms() of the loop's last sign of life; the watchdog reads it from another thread */
    atomic_int_fast64_t heartbeat_ms;
    hc_store_delta_t *deltas; /* owned scratch for batches */
    size_t deltas_cap;
    hc_store_offset_t *offsets; /* owned scratch for batches */
    /* owned, deltas_cap long: each batch post's new total, for the changelog */
    int64_t *totals;
    bool window_open;
    int64_t window_start_ms;
    int64_t window_due_ms;      /* when the open window closes (window.h) */
    int64_t last_flush_wall_ms; /* when a flush last began, INT64_MIN before (window.h) */
    int64_t window_events;
    int64_t window_partials;
    /* a failed batch waiting for its retry; the partitions are paused meanwhile */
    bool retry_pending;
    int64_t retry_at_ms;
    int64_t backoff_ms;
    /* a partial arrived while paused and did not fit: re-assign at `next` after the flush */
    bool rewind_after_flush;
    /* partitions were taken over (or a changelog record was lost): republish the totals the
     * changelog may lack before its marks move again; see changelog.h */
    bool repair_pending;
    int64_t repair_at_ms;
    const atomic_bool *stop; /* borrowed from hc_stage2_run's caller */
    hc_err_t cb_err;
    char cb_errstr[512];
};

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque);

static int stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
    (void)rk;
    hc_stage2_t *s2 = opaque;
    hc_metrics_ingest_rdkafka_stats(s2->metrics, json, json_len);
    return 0;
}

hc_err_t hc_stage2_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage2_t **s2p, char *errstr, size_t errstr_size)
{
    *s2p = NULL;
    if (!instance_id) {
        instance_id = cfg->instance_id;
    }
    hc_err_t err = HC_ERR_INVALID;
    hc_stage2_t *s2 = calloc(1, sizeof(*s2));
    if (!s2) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    s2->last_flush_wall_ms = INT64_MIN;
    s2->cfg = cfg;
    s2->metrics = metrics;
    snprintf(s2->name, sizeof(s2->name), "stage2/%s", instance_id);
    s2->tbl = hc_table_new((size_t)cfg->max_keys);
    if (!s2->tbl) {
        hc_errstr_set(errstr, errstr_size, "out of memory for max.keys=%lld",
                      (long long)cfg->max_keys);
        goto fail;
    }
    err = hc_store_open(cfg, &s2->st, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    hc_kafka_opts_t copts = {.group_id = cfg->group_stage2,
                             .rebalance_cb = rebalance_cb,
                             .stats_cb = stats_cb,
                             .opaque = s2};
    s2->consumer = hc_kafka_new(cfg, HC_KAFKA_ROLE_STAGE2_CONSUMER, &copts, errstr, errstr_size);
    if (!s2->consumer) {
        err = HC_ERR_INVALID;
        goto fail;
    }
    err = hc_changelog_new(cfg, s2->name, &s2->changelog, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    *s2p = s2;
    return HC_OK;

fail:
    hc_stage2_destroy(s2);
    return err;
}

int64_t hc_stage2_heartbeat_ms(const hc_stage2_t *s2)
{
    return atomic_load(&s2->heartbeat_ms);
}

int hc_stage2_assigned(const hc_stage2_t *s2)
{
    return atomic_load(&s2->assigned);
}

void hc_stage2_destroy(hc_stage2_t *s2)
{
    if (!s2) {
        return;
    }
    if (s2->consumer) {
        rd_kafka_destroy(s2->consumer);
    }
    hc_changelog_destroy(s2->changelog); /* after the consumer: its marks are committed */
    free(s2->totals);
    hc_store_close(s2->st);
    hc_table_destroy(s2->tbl);
    free(s2->parts);
    free(s2->deltas);
    free(s2->offsets);
    free(s2);
}

static part_state_t *part(hc_stage2_t *s2, int32_t partition)
{
    if (partition >= s2->parts_cap) {
        int32_t cap = s2->parts_cap ? s2->parts_cap : 16;
        while (cap <= partition) {
            cap *= 2;
        }
        part_state_t *grown = realloc(s2->parts, (size_t)cap * sizeof(*grown));
        hc_store_offset_t *offs = realloc(s2->offsets, (size_t)cap * sizeof(*offs));
        if (offs) {
            s2->offsets = offs;
        }
        if (!grown || !offs) {
            if (grown) {
                s2->parts = grown;
            }
            return NULL;
        }
        memset(grown + s2->parts_cap, 0, (size_t)(cap - s2->parts_cap) * sizeof(*grown));
        s2->parts = grown;
        s2->parts_cap = cap;
    }
    return &s2->parts[partition];
}

static void window_drop(hc_stage2_t *s2)
{
    hc_table_clear(s2->tbl);
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        s2->parts[p].touched = false;
    }
    s2->window_open = false;
    s2->window_events = 0;
    s2->window_partials = 0;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Reads the stored offsets of `partitions` (retrying through store outages until stop) and
 * assigns the consumer there. */
static hc_err_t assign_from_store(hc_stage2_t *s2,
                                  const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                                  size_t errstr_size)
{
    int n = partitions->cnt;
    int32_t *ids = calloc((size_t)n + 1, sizeof(*ids));
    int64_t *stored = calloc((size_t)n + 1, sizeof(*stored));
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    hc_err_t err = HC_ERR_FATAL;
    if (!ids || !stored) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        ids[i] = partitions->elems[i].partition;
    }
    int64_t backoff = BACKOFF_MIN_MS;
    for (;;) {
        err = hc_store_read_offsets(s2->st, s2->cfg->group_stage2, s2->cfg->topic_partials, ids,
                                    (size_t)n, stored, errstr, errstr_size);
        if (err != HC_ERR_TRANSIENT || atomic_load(s2->stop)) {
            break;
        }
        hc_log(HC_LOG_WARN, s2->name, "reading offsets: %s; retrying in %" PRId64 " ms", errstr,
               backoff);
        sleep_ms(backoff);
        atomic_store(&s2->heartbeat_ms, hc_now_ms()); /* waiting out an outage is not hanging */
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    if (err != HC_OK) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        part_state_t *ps = part(s2, ids[i]);
        if (!ps) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            err = HC_ERR_FATAL;
            goto done;
        }
        ps->assigned = true;
        ps->touched = false;
        ps->start = stored[i];
        ps->next = stored[i];
        rd_kafka_topic_partition_list_add(list, partitions->elems[i].topic, ids[i])->offset =
            stored[i] == HC_OFFSET_NONE ? RD_KAFKA_OFFSET_BEGINNING : stored[i];
    }
    if (s2->changelog && n > 0) {
        s2->repair_pending = true;
        s2->repair_at_ms = 0;
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(s2->consumer, list);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "assign: %s", rd_kafka_err2str(rerr));
        err = HC_ERR_FATAL;
    }
done:
    rd_kafka_topic_partition_list_destroy(list);
    free(ids);
    free(stored);
    return err;
}

/* True when the assignment is lost and may not be re-assigned (hc_kafka_may_reassign). Every
 * partition is then treated as gone: its messages are dropped until the next assignment, which
 * reads the store's offsets anyway. */
static bool assignment_lost(hc_stage2_t *s2)
{
    if (hc_kafka_may_reassign(s2->consumer)) {
        return false;
    }
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        s2->parts[p].assigned = false;
    }
    hc_log(HC_LOG_INFO, s2->name, "assignment lost: waiting for the next one");
    return true;
}

/* Re-assigns every assigned partition at the offsets now in the store. */
static hc_err_t reassign_from_store(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    if (assignment_lost(s2)) {
        return HC_OK;
    }
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(s2->consumer, &assigned)) {
        hc_errstr_set(errstr, errstr_size, "assignment unavailable");
        return HC_ERR_FATAL;
    }
    hc_err_t err = HC_OK;
    if (assigned->cnt > 0) {
        err = assign_from_store(s2, assigned, errstr, errstr_size);
    }
    rd_kafka_topic_partition_list_destroy(assigned);
    return err;
}

/* Re-assigns every assigned partition at its in-memory `next` (after a flush that followed a
 * partial we could not hold). */
static hc_err_t reassign_from_memory(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    if (assignment_lost(s2)) {
        return HC_OK;
    }
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new(atomic_load(&s2->assigned));
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        if (s2->parts[p].assigned) {
            int64_t next = s2->parts[p].next;
            rd_kafka_topic_partition_list_add(list, s2->cfg->topic_partials, p)->offset =
                next == HC_OFFSET_NONE ? RD_KAFKA_OFFSET_BEGINNING : next;
        }
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(s2->consumer, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "assign: %s", rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

static void set_paused(hc_stage2_t *s2, bool paused)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(s2->consumer, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (paused) {
            rd_kafka_pause_partitions(s2->consumer, assigned);
        } else {
            rd_kafka_resume_partitions(s2->consumer, assigned);
        }
        rd_kafka_topic_partition_list_destroy(assigned);
    }
}

static hc_err_t grow_scratch(hc_stage2_t *s2, size_t n)
{
    size_t cap = n < 1024 ? 1024 : n;
    hc_store_delta_t *deltas = realloc(s2->deltas, cap * sizeof(*deltas));
    if (deltas) {
        s2->deltas = deltas;
    }
    /* only the changelog needs the totals */
    int64_t *totals = s2->changelog ? realloc(s2->totals, cap * sizeof(*totals)) : NULL;
    if (totals) {
        s2->totals = totals;
    }
    if (!deltas || (s2->changelog && !totals)) {
        return HC_ERR_FATAL;
    }
    s2->deltas_cap = cap;
    return HC_OK;
}

/* After a committed batch: the new total of every post it changed (as the batch left it, from
 * the store's apply), to topic.counts. */
static void publish_changelog(hc_stage2_t *s2, size_t n, size_t n_offsets, int64_t as_of_ms)
{
    if (!s2->changelog) {
        return;
    }
    hc_changelog_publish(s2->changelog, s2->deltas, s2->totals, n, as_of_ms, s2->offsets,
                         n_offsets);
}

/* Republishes what the changelog may lack for the assigned partitions: from its marks in Kafka
 * to the store's offsets. A failure is retried later; the marks stay put meanwhile. */
static hc_err_t repair_changelog(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    size_t n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        n += s2->parts[p].assigned;
    }
    int32_t *ids = calloc(n + 1, sizeof(*ids));
    int64_t *stored = calloc(n + 1, sizeof(*stored));
    hc_topic_range_t *ranges = calloc(n + 1, sizeof(*ranges));
    hc_err_t err = HC_ERR_FATAL;
    if (!ids || !stored || !ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto done;
    }
    n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        if (s2->parts[p].assigned) {
            ids[n] = p;
            stored[n++] = s2->parts[p].start;
        }
    }
    size_t count = 0;
    err = hc_changelog_ranges(s2->changelog, s2->consumer, ids, stored, n, ranges, &count, errstr,
                              errstr_size);
    if (err == HC_OK) {
        err = hc_changelog_repair(s2->changelog, s2->st, ranges, count, errstr, errstr_size);
    }
    atomic_store(&s2->heartbeat_ms, hc_now_ms());
    if (err == HC_OK) {
        s2->repair_pending = false;
    } else if (err == HC_ERR_TRANSIENT) {
        hc_log(HC_LOG_WARN, s2->name, "changelog repair: %s; retrying in %d ms", errstr,
               BACKOFF_MAX_MS);
        s2->repair_at_ms = hc_now_ms() + BACKOFF_MAX_MS;
        err = HC_OK;
    }
done:
    free(ids);
    free(stored);
    free(ranges);
    return err;
}

/* Event time to store commit, per post of the batch, from its oldest event: an upper bound of
 * each post's freshness, observed with one atomic add per bucket per batch. */
static void observe_end_to_end(hc_stage2_t *s2, int64_t committed_wall_ms)
{
    hc_histogram_acc_t acc;
    hc_histogram_acc_init(&acc, &s2->metrics->end_to_end_seconds);
    size_t n = hc_table_count(s2->tbl);
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s2->tbl, i);
        if (ent->ts_min != HC_TS_NONE) {
            hc_histogram_acc_add(&acc, (double)(committed_wall_ms - ent->ts_min) / 1000.0, 1);
        }
    }
    hc_histogram_acc_merge(&acc, &s2->metrics->end_to_end_seconds);
}

/* One conditional store batch for the open window. HC_OK: applied, window closed.
 * HC_ERR_CONFLICT: nothing applied, window dropped, positions re-read from the store.
 * HC_ERR_TRANSIENT: nothing known to be applied, window kept for a retry. HC_ERR_FATAL. */
static hc_err_t flush_window(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    int64_t t0 = hc_now_ms();
    s2->last_flush_wall_ms = hc_wall_ms();
    size_t n = hc_table_count(s2->tbl);
    if (n > s2->deltas_cap && grow_scratch(s2, n) != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s2->tbl, i);
        s2->deltas[i] = (hc_store_delta_t){ent->post_id, ent->post_id_len, ent->delta};
    }
    size_t n_offsets = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        part_state_t *ps = &s2->parts[p];
        if (ps->touched) {
            s2->offsets[n_offsets++] = (hc_store_offset_t){p, ps->start, ps->next};
        }
    }
    hc_store_batch_t batch = {
        .group = s2->cfg->group_stage2,
        .topic = s2->cfg->topic_partials,
        .offsets = s2->offsets,
        .offset_count = n_offsets,
        .deltas = s2->deltas,
        .delta_count = n,
        .now_ms = hc_wall_ms(),
        .totals_out = s2->changelog ? s2->totals : NULL,
    };
    hc_err_t err = hc_store_apply(s2->st, &batch, errstr, errstr_size);
    hc_metrics_t *m = s2->metrics;
    int64_t done_ms = hc_now_ms();
    hc_histogram_observe(&m->store_seconds, (double)(done_ms - t0) / 1000.0);
    switch (err) {
    case HC_OK:
        hc_metrics_stage_flushed(m, HC_METRICS_STAGE2, done_ms, (double)(done_ms - t0) / 1000.0);
        hc_histogram_observe(&m->batch_posts, (double)n);
        observe_end_to_end(s2, batch.now_ms);
        publish_changelog(s2, n, n_offsets, batch.now_ms);
        for (size_t i = 0; i < n_offsets; i++) {
            s2->parts[s2->offsets[i].partition].start = s2->offsets[i].next;
        }
        hc_metric_add(m->store_commit, 1);
        hc_metric_add(m->store_keys_written, (int64_t)n);
        hc_metric_add(m->events_stored, s2->window_events);
        hc_metric_add(m->partials_consumed, s2->window_partials);
        hc_log(HC_LOG_INFO, s2->name,
               "stored batch: %zu posts, %" PRId64 " events, %zu partitions, %" PRId64 " ms", n,
               s2->window_events, n_offsets, hc_now_ms() - t0);
        window_drop(s2);
        if (s2->retry_pending) {
            s2->retry_pending = false;
            s2->backoff_ms = 0;
            set_paused(s2, false);
            hc_log(HC_LOG_INFO, s2->name, "store batch applied after retry; resuming");
        }
        if (s2->rewind_after_flush) {
            s2->rewind_after_flush = false;
            return reassign_from_memory(s2, errstr, errstr_size);
        }
        return HC_OK;
    case HC_ERR_CONFLICT:
        hc_metric_add(m->store_conflict, 1);
        hc_log(HC_LOG_WARN, s2->name, "store batch refused (%s); re-reading offsets", errstr);
        window_drop(s2);
        if (s2->retry_pending) {
            s2->retry_pending = false;
            s2->backoff_ms = 0;
            set_paused(s2, false);
        }
        s2->rewind_after_flush = false;
        err = reassign_from_store(s2, errstr, errstr_size);
        return err == HC_OK ? HC_ERR_CONFLICT : err;
    case HC_ERR_TRANSIENT:
        hc_metric_add(m->store_error, 1);
        s2->backoff_ms = s2->backoff_ms == 0                   ? BACKOFF_MIN_MS
                         : s2->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                               : s2->backoff_ms * 2;
        s2->retry_at_ms = hc_now_ms() + s2->backoff_ms;
        hc_log(HC_LOG_WARN, s2->name, "store batch failed (%s); retrying in %" PRId64 " ms", errstr,
               s2->backoff_ms);
        if (!s2->retry_pending) {
            s2->retry_pending = true;
            set_paused(s2, true);
        }
        return HC_ERR_TRANSIENT;
    default:
        hc_metric_add(m->store_error, 1);
        return HC_ERR_FATAL;
    }
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    hc_stage2_t *s2 = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        hc_log(HC_LOG_INFO, s2->name, "assigned %d partitions", partitions->cnt);
        if (s2->cb_err == HC_OK) {
            hc_err_t ret = assign_from_store(s2, partitions, s2->cb_errstr, sizeof(s2->cb_errstr));
            if (ret != HC_OK) {
                s2->cb_err = ret;
                rd_kafka_assign(rk, NULL);
                return;
            }
        }
        atomic_store(&s2->assigned, partitions->cnt);
        hc_metric_add(s2->metrics->stage2_assigned, partitions->cnt);
        return;
    }
    /* Revoked or lost: one attempt to store the open window. If it fails, the window is
     * dropped; the stored offsets did not move, so the next owner re-reads those partials. */
    if (s2->window_open && s2->cb_err == HC_OK) {
        hc_err_t ret = flush_window(s2, s2->cb_errstr, sizeof(s2->cb_errstr));
        if (ret == HC_ERR_FATAL) {
            s2->cb_err = ret;
        }
        window_drop(s2);
    }
    s2->retry_pending = false;
    s2->rewind_after_flush = false;
    if (s2->changelog && !s2->repair_pending) {
        hc_changelog_drain(s2->changelog, rk, 5000);
    }
    hc_metrics_stage_released(s2->metrics, HC_METRICS_STAGE2);
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        s2->parts[p].assigned = false;
    }
    hc_log(HC_LOG_INFO, s2->name, "revoked %d partitions", partitions->cnt);
    rd_kafka_assign(rk, NULL);
    hc_metric_add(s2->metrics->stage2_assigned, -atomic_exchange(&s2->assigned, 0));
}

static hc_err_t handle_message(hc_stage2_t *s2, const rd_kafka_message_t *rkm, char *errstr,
                               size_t errstr_size)
{
    if (s2->rewind_after_flush) {
        /* A partial was dropped for lack of room: taking any later one would leave a gap.
         * All of them are fetched again from `next` once the window is stored. */
        return HC_OK;
    }
    part_state_t *ps = part(s2, rkm->partition);
    if (!ps) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    if (!ps->assigned) {
        return HC_OK; /* fetched before a revoke: not ours any more */
    }
    hc_partial_t partial;
    char why[256];
    if (hc_partial_decode(rkm->payload, rkm->payload ? rkm->len : 0, &partial, why, sizeof(why)) !=
        HC_OK) {
        /* Only stage 1 writes this topic; a bad record is a bug or a foreign writer. Skip it
         * (its offset still moves) rather than stall the stage. */
        hc_log(HC_LOG_ERROR, s2->name, "skipping bad partial at %s/%" PRId32 "/%" PRId64 ": %s",
               rd_kafka_topic_name(rkm->rkt), rkm->partition, rkm->offset, why);
    } else {
        hc_err_t err = hc_table_add(s2->tbl, partial.post_id, partial.post_id_len, partial.delta,
                                    partial.events, partial.ts_min, partial.ts_max);
        if (err == HC_ERR_FULL) {
            if (s2->retry_pending) {
                /* Paused and full: fetch this partial again after the flush. */
                s2->rewind_after_flush = true;
                return HC_OK;
            }
            err = flush_window(s2, errstr, errstr_size);
            if (err == HC_ERR_CONFLICT) {
                return HC_OK; /* positions re-read: this partial is fetched again */
            }
            if (err == HC_ERR_TRANSIENT) {
                s2->rewind_after_flush = true;
                return HC_OK;
            }
            if (err != HC_OK) {
                return err;
            }
            ps = &s2->parts[rkm->partition];
            err = hc_table_add(s2->tbl, partial.post_id, partial.post_id_len, partial.delta,
                               partial.events, partial.ts_min, partial.ts_max);
        }
        if (err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "aggregation table: %s", hc_err_name(err));
            return HC_ERR_FATAL;
        }
        s2->window_events += partial.events;
    }
    if (!s2->window_open) {
        s2->window_open = true;
        s2->window_start_ms = hc_now_ms();
        s2->window_due_ms = hc_window_stage2_due_ms(s2->window_start_ms, hc_wall_ms(),
                                                    s2->cfg->flush_ms, s2->last_flush_wall_ms);
        hc_metrics_stage_input(s2->metrics, HC_METRICS_STAGE2, s2->window_start_ms);
    }
    s2->window_partials++;
    ps->touched = true;
    ps->next = rkm->offset + 1;
    return HC_OK;
}

hc_err_t hc_stage2_run(hc_stage2_t *s2, const atomic_bool *stop, char *errstr, size_t errstr_size)
{
    const hc_config_t *cfg = s2->cfg;
    s2->stop = stop;
    atomic_store(&s2->heartbeat_ms, hc_now_ms());
    hc_err_t err = hc_store_init_schema(s2->st, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->topic_partials, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(s2->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "subscribe %s: %s", cfg->topic_partials,
                      rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    hc_metrics_stage_started(s2->metrics, HC_METRICS_STAGE2, hc_now_ms());
    hc_log(HC_LOG_INFO, s2->name, "consuming %s into %s store, flush.ms=%lld", cfg->topic_partials,
           hc_store_kind(s2->st), (long long)cfg->flush_ms);

    err = HC_OK;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
        int64_t now = hc_now_ms();
        atomic_store_explicit(&s2->heartbeat_ms, now, memory_order_relaxed); /* as stage 1's */
        int timeout = 100;
        if (s2->retry_pending) {
            int64_t left = s2->retry_at_ms - now;
            timeout = left <= 0 ? 0 : left < timeout ? (int)left : timeout;
        } else if (s2->window_open) {
            int64_t left = s2->window_due_ms - now;
            timeout = left <= 0 ? 0 : left < timeout ? (int)left : timeout;
        }
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(s2->consumer, timeout);
        if (s2->cb_err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "%s", s2->cb_errstr);
            err = s2->cb_err;
            if (rkm) {
                rd_kafka_message_destroy(rkm);
            }
            break;
        }
        if (rkm) {
            if (rkm->err) {
                hc_log(HC_LOG_WARN, s2->name, "consumer: %s", rd_kafka_message_errstr(rkm));
            } else {
                err = handle_message(s2, rkm, errstr, errstr_size);
            }
            rd_kafka_message_destroy(rkm);
            if (err != HC_OK) {
                break;
            }
        }
        now = hc_now_ms();
        bool due = s2->retry_pending ? now >= s2->retry_at_ms
                                     : s2->window_open && now >= s2->window_due_ms;
        if (due) {
            err = flush_window(s2, errstr, errstr_size);
            if (err == HC_ERR_CONFLICT || err == HC_ERR_TRANSIENT) {
                err = HC_OK;
            } else if (err != HC_OK) {
                break;
            }
        }
        if (s2->changelog) {
            if (hc_changelog_needs_repair(s2->changelog) && !s2->repair_pending) {
                s2->repair_pending = true;
                s2->repair_at_ms = 0;
            }
            if (!s2->repair_pending) {
                hc_changelog_poll(s2->changelog, s2->consumer);
            } else if (hc_now_ms() >= s2->repair_at_ms &&
                       (err = repair_changelog(s2, errstr, errstr_size)) != HC_OK) {
                break;
            }
        }
        if ((err = hc_kafka_fatal_check(s2->consumer, errstr, errstr_size)) != HC_OK) {
            break;
        }
    }

    /* A clean stop stores the open window once; if the store is down it is dropped and the
     * next run re-reads those partials from the stored offsets. */
    if (err == HC_OK && s2->window_open) {
        hc_err_t ret = flush_window(s2, errstr, errstr_size);
        if (ret == HC_ERR_FATAL) {
            err = ret;
        }
        window_drop(s2);
    }
    if (err != HC_OK && s2->cb_err == HC_OK) {
        s2->cb_err = err;
        snprintf(s2->cb_errstr, sizeof(s2->cb_errstr), "%s", errstr);
    }
    if (s2->changelog && !s2->repair_pending) {
        hc_changelog_drain(s2->changelog, s2->consumer, 10000);
    }
    rd_kafka_consumer_close(s2->consumer);
    if (err == HC_OK && s2->cb_err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s", s2->cb_errstr);
        err = s2->cb_err;
    }
    hc_metrics_stage_stopped(s2->metrics, HC_METRICS_STAGE2);
    if (err != HC_OK) {
        hc_log(HC_LOG_ERROR, s2->name, "stopping: %s", errstr);
    } else {
        hc_log(HC_LOG_INFO, s2->name, "stopped cleanly");
    }
    return err;
}
