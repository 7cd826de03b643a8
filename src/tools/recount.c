#include "hotcount/recount.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/event.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/topic_read.h"

#define META_TIMEOUT_MS 10000

/* Partition count of a topic, from the cluster's metadata. */
static hc_err_t partition_count(rd_kafka_t *rk, const char *topic, int *count, char *errstr,
                                size_t errstr_size)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, META_TIMEOUT_MS);
    rd_kafka_topic_destroy(rkt);
    if (err) {
        hc_errstr_set(errstr, errstr_size, "metadata for %s: %s", topic, rd_kafka_err2str(err));
        return HC_ERR_TRANSIENT;
    }
    hc_err_t ret = HC_OK;
    if (md->topic_cnt != 1 || md->topics[0].err) {
        hc_errstr_set(errstr, errstr_size, "topic %s: %s", topic,
                      md->topic_cnt ? rd_kafka_err2str(md->topics[0].err) : "not found");
        ret = HC_ERR_FATAL;
    } else {
        *count = md->topics[0].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
    return ret;
}

/* Reads [low, high) of every partition of topic (from start[p] instead of low when that is
 * later), snapshotting high at the start. fn gets each message. */
static hc_err_t read_topic(rd_kafka_t *rk, const char *topic, const int64_t *start,
                           hc_topic_message_fn fn, void *opaque, char *errstr, size_t errstr_size)
{
    int n = 0;
    hc_err_t err = partition_count(rk, topic, &n, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    hc_topic_range_t *ranges = calloc((size_t)n + 1, sizeof(*ranges));
    if (!ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    for (int p = 0; p < n; p++) {
        int64_t low, high;
        rd_kafka_resp_err_t rerr =
            rd_kafka_query_watermark_offsets(rk, topic, p, &low, &high, META_TIMEOUT_MS);
        if (rerr) {
            hc_errstr_set(errstr, errstr_size, "watermarks of %s/%d: %s", topic, p,
                          rd_kafka_err2str(rerr));
            free(ranges);
            return HC_ERR_TRANSIENT;
        }
        int64_t from = start && start[p] != HC_OFFSET_NONE && start[p] > low ? start[p] : low;
        ranges[p] = (hc_topic_range_t){p, from, high};
    }
    err = hc_topic_read_ranges(rk, topic, ranges, (size_t)n, fn, opaque, errstr, errstr_size);
    free(ranges);
    return err;
}

typedef struct recount_ctx {
    const hc_config_t *cfg;
    hc_table_t *counts;
    int64_t valid;
    int64_t invalid;
} recount_ctx_t;

static hc_err_t recount_one(const rd_kafka_message_t *rkm, void *opaque)
{
    recount_ctx_t *ctx = opaque;
    hc_event_t ev;
    const char *payload = rkm->payload;
    if (hc_event_parse(payload ? payload : "", payload ? rkm->len : 0,
                       (size_t)ctx->cfg->event_max_bytes, &ev) != HC_EVENT_OK) {
        ctx->invalid++;
        return HC_OK;
    }
    ctx->valid++;
    return hc_table_add(ctx->counts, ev.post_id, ev.post_id_len, ev.delta, 1, HC_TS_NONE,
                        HC_TS_NONE);
}

hc_err_t hc_recount_raw(const hc_config_t *cfg, hc_table_t *counts, int64_t *valid,
                        int64_t *invalid, char *errstr, size_t errstr_size)
{
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, errstr_size);
    if (!rk) {
        return HC_ERR_INVALID;
    }
    recount_ctx_t ctx = {.cfg = cfg, .counts = counts};
    hc_err_t err = read_topic(rk, cfg->topic_raw, NULL, recount_one, &ctx, errstr, errstr_size);
    if (err == HC_ERR_FULL) {
        hc_errstr_set(errstr, errstr_size, "more distinct posts than the recount can hold");
    }
    *valid = ctx.valid;
    *invalid = ctx.invalid;
    rd_kafka_destroy(rk);
    return err;
}

static hc_err_t count_message(const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rkm;
    (*(int64_t *)opaque)++;
    return HC_OK;
}

hc_err_t hc_recount_caught_up(const hc_config_t *cfg, hc_store_t *st, bool *caught_up, int64_t *lag,
                              char *errstr, size_t errstr_size)
{
    *caught_up = false;
    *lag = 0;
    /* a consumer with stage 1's group id reads its committed offsets without joining */
    hc_kafka_opts_t gopts = {.group_id = cfg->group_stage1};
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, &gopts, errstr, errstr_size);
    if (!rk) {
        return HC_ERR_INVALID;
    }
    int32_t *ids = NULL;
    int64_t *stored = NULL;
    rd_kafka_topic_partition_list_t *list = NULL;
    int n = 0;
    hc_err_t err = partition_count(rk, cfg->topic_raw, &n, errstr, errstr_size);
    if (err != HC_OK) {
        goto done;
    }
    list = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++) {
        rd_kafka_topic_partition_list_add(list, cfg->topic_raw, p);
    }
    rd_kafka_resp_err_t rerr = rd_kafka_committed(rk, list, META_TIMEOUT_MS);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "committed offsets of %s: %s", cfg->group_stage1,
                      rd_kafka_err2str(rerr));
        err = HC_ERR_TRANSIENT;
        goto done;
    }
    int64_t raw_lag = 0;
    for (int p = 0; p < n; p++) {
        int64_t low, high;
        rerr =
            rd_kafka_query_watermark_offsets(rk, cfg->topic_raw, p, &low, &high, META_TIMEOUT_MS);
        if (rerr) {
            hc_errstr_set(errstr, errstr_size, "watermarks: %s", rd_kafka_err2str(rerr));
            err = HC_ERR_TRANSIENT;
            goto done;
        }
        int64_t committed = list->elems[p].offset >= 0 ? list->elems[p].offset : low;
        raw_lag += high > committed ? high - committed : 0;
    }

    int np = 0;
    if ((err = partition_count(rk, cfg->topic_partials, &np, errstr, errstr_size)) != HC_OK) {
        goto done;
    }
    ids = calloc((size_t)np, sizeof(*ids));
    stored = calloc((size_t)np, sizeof(*stored));
    for (int p = 0; p < np; p++) {
        ids[p] = p;
    }
    err = hc_store_read_offsets(st, cfg->group_stage2, cfg->topic_partials, ids, (size_t)np, stored,
                                errstr, errstr_size);
    if (err != HC_OK) {
        goto done;
    }
    /* Committed partials past the stored offsets: read them (read_committed) and count. */
    int64_t partial_lag = 0;
    err = read_topic(rk, cfg->topic_partials, stored, count_message, &partial_lag, errstr,
                     errstr_size);
    if (err != HC_OK) {
        goto done;
    }
    *lag = raw_lag + partial_lag;
    *caught_up = *lag == 0;
done:
    if (list) {
        rd_kafka_topic_partition_list_destroy(list);
    }
    free(ids);
    free(stored);
    rd_kafka_destroy(rk);
    return err;
}

typedef struct compare_ctx {
    const hc_table_t *counts;
    hc_recount_diff_t *diff;
    hc_recount_report_fn report;
    void *opaque;
} compare_ctx_t;

static bool compare_row(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    compare_ctx_t *ctx = opaque;
    const hc_table_entry_t *ent = hc_table_find(ctx->counts, post_id, post_id_len);
    if (!ent) {
        ctx->diff->posts++;
        if (likes != 0) {
            ctx->diff->mismatches++;
            if (ctx->report) {
                ctx->report(post_id, post_id_len, 0, likes, ctx->opaque);
            }
        }
    }
    return true;
}

hc_err_t hc_recount_compare(hc_store_t *st, const hc_table_t *counts, hc_recount_diff_t *diff,
                            hc_recount_report_fn report, void *opaque, char *errstr,
                            size_t errstr_size)
{
    memset(diff, 0, sizeof(*diff));
    /* recounted posts, in batches through hc_store_get */
    enum { BATCH = 512 };
    const char *ids[BATCH];
    size_t lens[BATCH];
    int64_t likes[BATCH];
    size_t total = hc_table_count(counts);
    for (size_t base = 0; base < total; base += BATCH) {
        size_t m = total - base < BATCH ? total - base : BATCH;
        for (size_t i = 0; i < m; i++) {
            const hc_table_entry_t *ent = hc_table_entry(counts, base + i);
            ids[i] = ent->post_id;
            lens[i] = ent->post_id_len;
        }
        hc_err_t err = hc_store_get(st, ids, lens, m, likes, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        for (size_t i = 0; i < m; i++) {
            const hc_table_entry_t *ent = hc_table_entry(counts, base + i);
            diff->posts++;
            if (likes[i] != ent->delta) {
                diff->mismatches++;
                if (report) {
                    report(ent->post_id, ent->post_id_len, ent->delta, likes[i], opaque);
                }
            }
        }
    }
    /* stored posts that never appear in likes.raw */
    compare_ctx_t ctx = {counts, diff, report, opaque};
    return hc_store_foreach(st, compare_row, &ctx, errstr, errstr_size);
}
