#include "hotcount/dlq_replay.h"

#include "hotcount/clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/group_admin.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/offset.h"
#include "hotcount/timeouts.h"
#include "hotcount/topic_read.h"

#define META_TIMEOUT_MS 10000

typedef struct replay {
    const hc_config_t *cfg;
    const hc_replay_opts_t *opts;
    hc_replay_stats_t *stats;
    rd_kafka_t *producer; /* NULL on a dry run */
    int64_t txn_ms;
    int count;     /* partitions of topic.dlq */
    int64_t *next; /* owned: progress per partition, HC_OFFSET_NONE while untouched */
    bool *moved;   /* owned: next[p] moved since the last commit */
    bool txn_open;
    int64_t pending; /* records produced in the open transaction */
    char *errstr;
    size_t errstr_size;
} replay_t;

static bool header_is(const hc_dead_letter_t *dl, const char *want)
{
    return dl->reason && dl->reason_len == strlen(want) &&
           memcmp(dl->reason, want, dl->reason_len) == 0;
}

static hc_err_t begin(replay_t *r)
{
    if (r->txn_open) {
        return HC_OK;
    }
    hc_err_t err =
        hc_kafka_error_take(rd_kafka_begin_transaction(r->producer), r->errstr, r->errstr_size);
    r->txn_open = err == HC_OK;
    return err;
}

/* Commits the open transaction with the progress; aborts it when the commit cannot be. */
static hc_err_t commit(replay_t *r)
{
    bool any = false;
    for (int p = 0; p < r->count; p++) {
        any = any || r->moved[p];
    }
    if (!any && !r->txn_open) {
        return HC_OK;
    }
    hc_err_t err = begin(r);
    if (err != HC_OK) {
        return err;
    }
    if (r->opts->before_commit) {
        rd_kafka_flush(r->producer, (int)r->txn_ms);
        r->opts->before_commit(r->stats->transactions + 1, r->opts->opaque);
    }
    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(r->count);
    for (int p = 0; p < r->count; p++) {
        if (r->moved[p]) {
            rd_kafka_topic_partition_list_add(offsets, r->cfg->topic_dlq, p)->offset = r->next[p];
        }
    }
    rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata_new(r->opts->group);
    err = hc_kafka_txn_error_take(
        r->producer,
        rd_kafka_send_offsets_to_transaction(r->producer, offsets, cgmd, (int)r->txn_ms), r->errstr,
        r->errstr_size);
    rd_kafka_consumer_group_metadata_destroy(cgmd);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (err == HC_OK) {
        err = hc_kafka_txn_error_take(r->producer,
                                      rd_kafka_commit_transaction(r->producer, (int)r->txn_ms),
                                      r->errstr, r->errstr_size);
    }
    if (err == HC_OK) {
        r->txn_open = false;
        r->pending = 0;
        r->stats->transactions++;
        memset(r->moved, 0, (size_t)r->count * sizeof(*r->moved));
        return HC_OK;
    }
    if (err != HC_ERR_FATAL) {
        /* nothing of this transaction counts: a rerun starts from the last committed progress */
        char ignored[256];
        hc_kafka_error_take(rd_kafka_abort_transaction(r->producer, (int)r->txn_ms), ignored,
                            sizeof(ignored));
        r->txn_open = false;
        return HC_ERR_TRANSIENT;
    }
    return err;
}

static hc_err_t replay_one(const hc_dead_letter_t *dl, void *opaque)
{
    replay_t *r = opaque;
    const hc_replay_opts_t *o = r->opts;
    r->stats->scanned++;
    r->next[dl->partition] = dl->offset + 1;
    r->moved[dl->partition] = true;
    if (!header_is(dl, o->reason) ||
        (o->since_ms != HC_REPLAY_TIME_NONE && dl->timestamp_ms < o->since_ms) ||
        (o->until_ms != HC_REPLAY_TIME_NONE && dl->timestamp_ms >= o->until_ms)) {
        return HC_OK;
    }
    if (dl->replayed_from) {
        r->stats->skipped_replayed++;
        return HC_OK;
    }
    if (dl->truncated_from) {
        r->stats->skipped_truncated++;
        return HC_OK;
    }
    /* Only what stage 1 refused is a raw event. Stage 2 dead-letters partials into the same
     * topic with reasons of their own, and anyone with write access can add records: replayed
     * into topic.raw, a partial's JSON could parse as a like. */
    size_t raw_len = strlen(r->cfg->topic_raw);
    if (!dl->source || dl->source_len <= raw_len || dl->source[raw_len] != '/' ||
        memcmp(dl->source, r->cfg->topic_raw, raw_len) != 0) {
        r->stats->skipped_foreign++;
        return HC_OK;
    }
    r->stats->replayed++;
    if (!r->producer) {
        return HC_OK;
    }
    hc_err_t err = begin(r);
    if (err != HC_OK) {
        return err;
    }
    char from[400];
    snprintf(from, sizeof(from), "%s/%" PRId32 "/%" PRId64, r->cfg->topic_dlq, dl->partition,
             dl->offset);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    rd_kafka_header_add(hdrs, HC_DLQ_HDR_REPLAYED_FROM, -1, from, -1);
    for (;;) {
        rd_kafka_resp_err_t rerr = rd_kafka_producev(
            r->producer, RD_KAFKA_V_TOPIC(r->cfg->topic_raw),
            RD_KAFKA_V_KEY((void *)dl->key, dl->key_len),
            RD_KAFKA_V_VALUE((void *)dl->value, dl->value_len),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        if (rerr == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(r->producer, 50);
            continue;
        }
        if (rerr == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
            /* The producer refuses this record whatever happens (past message.max.bytes with
             * the replay's header): an error here made every run abort and restart at this
             * same dead letter (issue 25, item 9). Skipped and counted; the progress moves
             * past it with the rest of the transaction. */
            rd_kafka_headers_destroy(hdrs);
            r->stats->replayed--;
            r->stats->skipped_oversized++;
            return HC_OK;
        }
        if (rerr) {
            rd_kafka_headers_destroy(hdrs);
            hc_errstr_set(r->errstr, r->errstr_size, "produce to %s: %s", r->cfg->topic_raw,
                          rd_kafka_err2str(rerr));
            return HC_ERR_TRANSIENT;
        }
        break; /* the headers now belong to the message */
    }
    rd_kafka_poll(r->producer, 0);
    if (++r->pending >= o->batch) {
        return commit(r);
    }
    return HC_OK;
}

hc_err_t hc_dlq_replay(const hc_config_t *cfg, const hc_replay_opts_t *opts,
                       hc_replay_stats_t *stats, char *errstr, size_t errstr_size)
{
    memset(stats, 0, sizeof(*stats));
    if (!opts->reason || !*opts->reason || !opts->group || !opts->transactional_id ||
        opts->batch <= 0) {
        hc_errstr_set(errstr, errstr_size, "replay needs a reason, a group, an id and a batch");
        return HC_ERR_INVALID;
    }
    hc_timeouts_t scratch;
    replay_t r = {.cfg = cfg,
                  .opts = opts,
                  .stats = stats,
                  .txn_ms = hc_timeouts_of(cfg, &scratch)->txn_call_ms,
                  .errstr = errstr,
                  .errstr_size = errstr_size};
    int64_t *low = NULL, *high = NULL, *done = NULL;
    hc_topic_range_t *ranges = NULL;
    hc_err_t err = HC_OK;
    rd_kafka_t *reader = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, errstr_size);
    if (!reader) {
        return HC_ERR_INVALID;
    }
    if ((err = hc_topic_watermarks(reader, cfg->topic_dlq, META_TIMEOUT_MS, &r.count, &low, &high,
                                   errstr, errstr_size)) != HC_OK) {
        goto destroy_reader;
    }
    done = calloc((size_t)r.count + 1, sizeof(*done));
    r.next = calloc((size_t)r.count + 1, sizeof(*r.next));
    r.moved = calloc((size_t)r.count + 1, sizeof(*r.moved));
    ranges = calloc((size_t)r.count + 1, sizeof(*ranges));
    if (!done || !r.next || !r.moved || !ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto free_arrays;
    }
    if (!opts->dry_run) {
        hc_kafka_opts_t popts = {.transactional_id = opts->transactional_id};
        r.producer = hc_kafka_new(cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &popts, errstr, errstr_size);
        if (!r.producer) {
            err = HC_ERR_INVALID;
            goto free_arrays;
        }
        /* fences a killed predecessor with this id and aborts its open transaction */
        if ((err = hc_kafka_error_take(rd_kafka_init_transactions(r.producer, (int)r.txn_ms),
                                       errstr, errstr_size)) != HC_OK) {
            goto destroy_producer;
        }
    }
    /* The progress, read only now: until init_transactions has aborted a killed predecessor's
     * open transaction, the offsets it holds are unstable (and the broker answers so). A few
     * tries with back-off while the abort reaches the group's coordinator. */
    const hc_timeouts_t *t = hc_timeouts_of(cfg, &scratch);
    for (int attempt = 0;; attempt++) {
        err = hc_group_committed(reader, opts->group, cfg->topic_dlq, r.count, META_TIMEOUT_MS,
                                 done, errstr, errstr_size);
        if (err != HC_ERR_TRANSIENT || attempt + 1 >= t->committed_read_attempts) {
            break;
        }
        hc_sleep_ms(hc_timeouts_backoff_ms(t, attempt));
    }
    if (err != HC_OK) {
        goto destroy_producer;
    }
    size_t nranges = 0;
    for (int p = 0; p < r.count; p++) {
        int64_t from = done[p] != HC_OFFSET_NONE && done[p] > low[p] ? done[p] : low[p];
        if (from < high[p]) {
            ranges[nranges++] = (hc_topic_range_t){p, from, high[p]};
        }
    }
    int64_t scanned = 0;
    if (nranges > 0) {
        err = hc_dead_letters_read_ranges(reader, cfg->topic_dlq, ranges, nranges, replay_one, &r,
                                          &scanned, errstr, errstr_size);
    }
    if (err == HC_OK && r.producer) {
        err = commit(&r);
    } else if (r.txn_open) {
        char ignored[256];
        hc_kafka_error_take(rd_kafka_abort_transaction(r.producer, (int)r.txn_ms), ignored,
                            sizeof(ignored));
    }
destroy_producer:
    if (r.producer) {
        rd_kafka_destroy(r.producer);
    }
free_arrays:
    free(ranges);
    free(done);
    free(r.next);
    free(r.moved);
    free(low);
    free(high);
destroy_reader:
    hc_kafka_reader_destroy(reader);
    return err;
}
