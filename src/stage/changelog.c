/* The counts changelog and its repair after a takeover; see include/stage/hotcount/changelog.h. */
#include "hotcount/changelog.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/partial_pack.h"
#include "hotcount/table.h"

/* posts whose totals one store read fetches during a repair */
#define REPAIR_CHUNK 1000
/* distinct posts a repair holds before publishing them */
#define REPAIR_KEYS 65536
/* the bound on one read of the marks (hc_changelog_ranges) */
#define CHANGELOG_MARKS_READ_MS 1000

struct hc_changelog {
    const hc_config_t *cfg;
    char name[160];
    char txn_id[300];     /* <group.stage2>-counts-<instance>: the producer's transactional.id */
    rd_kafka_t *producer; /* owned, transactional */
    bool ready;           /* init_transactions done on this producer */
    bool fenced;          /* another process took txn_id: this one publishes nothing more */
    int64_t outstanding;  /* records produced, delivery not yet reported */
    bool failed;          /* a record was not delivered since the last repair */
    bool taken_over;      /* partitions were assigned since the last repair */
    int64_t repair_at_ms; /* hc_now_ms() before which no repair is due (after a failed one) */
    int repair_failures;  /* failed repairs in a row: the back-off's attempt */
    int64_t *marks;       /* owned, by partition: the mark last committed or read, or -1 */
    int32_t marks_cap;
};

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    hc_changelog_t *cl = opaque;
    cl->outstanding--;
    if (rkm->err) {
        if (!cl->failed) {
            hc_log(HC_LOG_WARN, cl->name, "changelog record not delivered: %s; will repair",
                   rd_kafka_err2str(rkm->err));
        }
        cl->failed = true;
    }
}

hc_err_t hc_changelog_new(const hc_config_t *cfg, const char *name, const char *instance_id,
                          hc_changelog_t **clp, char *errstr, size_t errstr_size)
{
    *clp = NULL;
    if (!cfg->topic_counts[0]) {
        return HC_OK;
    }
    hc_changelog_t *cl = calloc(1, sizeof(*cl));
    if (!cl) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    cl->cfg = cfg;
    snprintf(cl->name, sizeof(cl->name), "%s", name);
    snprintf(cl->txn_id, sizeof(cl->txn_id), "%s-counts-%s", cfg->group_stage2, instance_id);
    hc_kafka_opts_t opts = {.dr_msg_cb = dr_msg_cb, .opaque = cl, .transactional_id = cl->txn_id};
    cl->producer = hc_kafka_new(cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &opts, errstr, errstr_size);
    if (!cl->producer) {
        free(cl);
        return HC_ERR_INVALID;
    }
    *clp = cl;
    return HC_OK;
}

/* Replaces the producer with a new one: after a fatal error (the idempotent producer's state is
 * gone for good), or to drop records that must not be delivered late. The old producer's
 * records go with it, unreported; failed is set, so the marks wait for a repair. */
static void renew_producer(hc_changelog_t *cl, const char *why)
{
    char errstr[512];
    hc_kafka_opts_t opts = {.dr_msg_cb = dr_msg_cb, .opaque = cl, .transactional_id = cl->txn_id};
    rd_kafka_t *fresh =
        hc_kafka_new(cl->cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &opts, errstr, sizeof(errstr));
    if (!fresh) {
        hc_log(HC_LOG_ERROR, cl->name, "changelog: a new producer (%s): %s", why, errstr);
        return;
    }
    hc_log(HC_LOG_WARN, cl->name, "changelog: new producer (%s); %" PRId64 " records dropped", why,
           cl->outstanding);
    rd_kafka_t *old = cl->producer;
    cl->producer = fresh;
    /* nothing of it may count: an open transaction is aborted by the new one's init */
    rd_kafka_purge(old, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_destroy(old);
    cl->ready = false;
    cl->outstanding = 0;
    cl->failed = true;
}

/* A fatal error: fenced (another process with this instance.id took the transactional id; a
 * new producer would take it back, and the two would fence each other in turn) stops this
 * process's changelog, anything else gets a new producer. */
static void renew_if_fatal(hc_changelog_t *cl)
{
    char reason[256];
    rd_kafka_resp_err_t err = rd_kafka_fatal_error(cl->producer, reason, sizeof(reason));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR || cl->fenced) {
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__FENCED || err == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
        err == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH) {
        hc_log(HC_LOG_ERROR, cl->name,
               "changelog: %s; another process runs with this instance.id, so this one "
               "publishes no more totals (its store writes are fenced by the store's offsets)",
               reason);
        cl->fenced = true;
        cl->failed = true;
        return;
    }
    renew_producer(cl, reason);
}

/* init_transactions once per producer, bounded by drain_ms; false (and failed set) when it
 * cannot be done now: the next publish tries again, the marks wait for a repair. */
static bool ready(hc_changelog_t *cl)
{
    if (cl->ready || cl->fenced) {
        return cl->ready;
    }
    rd_kafka_error_t *error =
        rd_kafka_init_transactions(cl->producer, (int)cl->cfg->timeouts.drain_ms);
    if (error) {
        if (!cl->failed) {
            hc_log(HC_LOG_WARN, cl->name, "changelog: init_transactions: %s; will repair",
                   rd_kafka_error_string(error));
        }
        rd_kafka_error_destroy(error);
        cl->failed = true;
        renew_if_fatal(cl);
        return false;
    }
    cl->ready = true;
    return true;
}

/* Ends the open transaction: its records flushed first (so that every record of a transaction
 * whose offsets the group accepted is in the log before that answer: a process frozen after
 * it can only add a commit marker, never a late record), then `offsets` (may be NULL) sent
 * with the consumer's group metadata, then the commit. The group coordinator refuses the
 * offsets of a member that is no longer in the group (its generation or member epoch), which
 * aborts the transaction: a zombie's totals never become visible (docs/RELIABILITY.md, F2).
 * true when committed; false after an abort or a new producer (failed set). Every blocking call
 * of a transaction (this, and ready()'s init) waits up to drain_ms; src/base/timeouts.c counts
 * them (CHANGELOG_TXN_CALLS) into the longest step of stage 2's loop: a call added here must be
 * counted there. */
static bool end_txn(hc_changelog_t *cl, rd_kafka_t *consumer,
                    const rd_kafka_topic_partition_list_t *offsets)
{
    int timeout = (int)cl->cfg->timeouts.drain_ms;
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t ferr = rd_kafka_flush(cl->producer, timeout);
    if (ferr || cl->outstanding > 0 || cl->failed) {
        error = rd_kafka_error_new(ferr ? ferr : RD_KAFKA_RESP_ERR__TIMED_OUT,
                                   "changelog records not delivered");
    }
    if (!error && offsets && offsets->cnt > 0) {
        rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata(consumer);
        error = rd_kafka_send_offsets_to_transaction(cl->producer, offsets, cgmd, timeout);
        rd_kafka_consumer_group_metadata_destroy(cgmd);
    }
    if (!error) {
        error = rd_kafka_commit_transaction(cl->producer, timeout);
    }
    if (!error) {
        return true;
    }
    if (!cl->failed) {
        hc_log(HC_LOG_WARN, cl->name, "changelog transaction not committed: %s; will repair",
               rd_kafka_error_string(error));
    }
    cl->failed = true;
    bool abortable = rd_kafka_error_txn_requires_abort(error) ||
                     (!rd_kafka_error_is_fatal(error) && !rd_kafka_error_is_retriable(error));
    rd_kafka_error_destroy(error);
    if (abortable) {
        error = rd_kafka_abort_transaction(cl->producer, timeout);
        if (!error) {
            cl->outstanding = 0;
            return false;
        }
        rd_kafka_error_destroy(error);
    }
    renew_if_fatal(cl);
    if (!cl->fenced && rd_kafka_fatal_error(cl->producer, NULL, 0) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* a commit or abort of unknown outcome: a new epoch settles it (stage 1's RENEWING) */
        renew_producer(cl, "a changelog transaction of unknown outcome");
    }
    return false;
}

/* The ranges' partitions at `to` (moved) or at their marks as they stand (a partition whose
 * mark is unknown left out): what a repair's transactions carry. NULL when empty. */
static rd_kafka_topic_partition_list_t *
ranges_marks(hc_changelog_t *cl, const hc_topic_range_t *ranges, size_t count, bool move)
{
    rd_kafka_topic_partition_list_t *list = NULL;
    for (size_t i = 0; i < count; i++) {
        int32_t p = ranges[i].partition;
        int64_t at = move ? ranges[i].to : (p < cl->marks_cap ? cl->marks[p] : -1);
        if (at < 0) {
            continue;
        }
        if (!list) {
            list = rd_kafka_topic_partition_list_new((int)count);
        }
        rd_kafka_topic_partition_list_add(list, cl->cfg->topic_partials, p)->offset = at;
    }
    return list;
}

void hc_changelog_destroy(hc_changelog_t *cl)
{
    if (!cl) {
        return;
    }
    rd_kafka_destroy(cl->producer); /* nothing is queued outside a finished transaction */
    free(cl->marks);
    free(cl);
}

static bool mark(hc_changelog_t *cl, int32_t partition, int64_t next)
{
    if (partition >= cl->marks_cap) {
        int32_t cap = cl->marks_cap ? cl->marks_cap : 16;
        while (cap <= partition) {
            cap *= 2;
        }
        int64_t *grown = realloc(cl->marks, (size_t)cap * sizeof(*grown));
        if (!grown) {
            return false; /* an unmarked batch is only repaired again later */
        }
        for (int32_t p = cl->marks_cap; p < cap; p++) {
            grown[p] = -1;
        }
        cl->marks = grown;
        cl->marks_cap = cap;
    }
    cl->marks[partition] = next;
    return true;
}

/* Queues one total; false when the producer refused it (counted as a failed delivery). */
static bool produce(hc_changelog_t *cl, const char *id, size_t len, int64_t total, int64_t as_of)
{
    char buf[HC_PARTIAL_MAX_BYTES];
    size_t n = hc_count_encode(id, len, total, as_of, buf, sizeof(buf));
    rd_kafka_resp_err_t err;
    while ((err = rd_kafka_producev(cl->producer, RD_KAFKA_V_TOPIC(cl->cfg->topic_counts),
                                    RD_KAFKA_V_KEY(id, len), RD_KAFKA_V_VALUE(buf, n),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(cl->producer, 10);
    }
    if (err) {
        if (!cl->failed) {
            hc_log(HC_LOG_WARN, cl->name, "changelog: %s; will repair", rd_kafka_err2str(err));
        }
        cl->failed = true;
        return false;
    }
    cl->outstanding++;
    return true;
}

void hc_changelog_publish(hc_changelog_t *cl, rd_kafka_t *consumer, const hc_store_delta_t *posts,
                          const int64_t *totals, size_t n, int64_t as_of_ms,
                          const hc_store_offset_t *offsets, size_t offset_count)
{
    renew_if_fatal(cl);
    if (cl->failed) {
        /* The marks stand until a repair, which republishes these posts' totals from the store
         * anyway; trying each batch's transaction against a Kafka that just failed one would
         * hold stage 2 for drain_ms a batch. */
        return;
    }
    if (!ready(cl)) {
        return; /* failed now: the marks wait, the next repair republishes these posts */
    }
    rd_kafka_error_t *error = rd_kafka_begin_transaction(cl->producer);
    if (error) {
        hc_log(HC_LOG_WARN, cl->name, "changelog: begin_transaction: %s; will repair",
               rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
        cl->failed = true;
        renew_producer(cl, "begin_transaction failed");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!produce(cl, posts[i].post_id, posts[i].post_id_len, totals[i], as_of_ms)) {
            break;
        }
    }
    /* After a takeover the marks wait for the repair (moving them would skip the previous
     * owner's lost records on the next takeover); the transaction still carries them unmoved,
     * for the membership check. */
    bool move = !cl->failed && !cl->taken_over;
    rd_kafka_topic_partition_list_t *list = NULL;
    for (size_t i = 0; i < offset_count; i++) {
        int32_t p = offsets[i].partition;
        int64_t at = move ? offsets[i].next : (p < cl->marks_cap ? cl->marks[p] : -1);
        if (at >= 0) { /* a partition whose mark is unknown is left out */
            if (!list) {
                list = rd_kafka_topic_partition_list_new((int)offset_count);
            }
            rd_kafka_topic_partition_list_add(list, cl->cfg->topic_partials, p)->offset = at;
        }
    }
    if (end_txn(cl, consumer, list) && move) {
        for (size_t i = 0; i < offset_count; i++) {
            mark(cl, offsets[i].partition, offsets[i].next);
        }
        if (list) {
            /* The same marks through the consumer too (asynchronous; the group refuses them from
             * a member that lost its partitions, as it refused the transaction's): librdkafka
             * computes the consumer's committed offset, and with it the lag its statistics
             * report (hotcount_consumer_lag of stage 2: partials not yet stored and published),
             * only from its own commits, not from a producer's transaction. */
            rd_kafka_commit(consumer, list, 1);
        }
    }
    if (list) {
        rd_kafka_topic_partition_list_destroy(list);
    }
}

void hc_changelog_poll(hc_changelog_t *cl, rd_kafka_t *consumer)
{
    (void)consumer; /* the marks travel in each batch's transaction */
    rd_kafka_poll(cl->producer, 0);
    renew_if_fatal(cl);
}

void hc_changelog_assigned(hc_changelog_t *cl)
{
    cl->taken_over = true;
    cl->repair_at_ms = 0;
    cl->repair_failures = 0;
}

bool hc_changelog_repair_due(const hc_changelog_t *cl, int64_t now_ms)
{
    return hc_changelog_repair_wanted(cl) && now_ms >= cl->repair_at_ms;
}

bool hc_changelog_repair_wanted(const hc_changelog_t *cl)
{
    return cl->taken_over || (cl->failed && cl->outstanding == 0);
}

/* A repair that could not finish: the marks stay put (failed), and the next attempt waits a
 * back-off that grows with each failure in a row. */
static void repair_failed(hc_changelog_t *cl, const char *why)
{
    cl->failed = true;
    int64_t backoff = hc_timeouts_backoff_ms(&cl->cfg->timeouts, cl->repair_failures++);
    cl->repair_at_ms = hc_now_ms() + backoff;
    hc_log(HC_LOG_WARN, cl->name, "changelog repair: %s; retrying in %" PRId64 " ms", why, backoff);
}

hc_err_t hc_changelog_ranges(hc_changelog_t *cl, rd_kafka_t *consumer, const int32_t *partitions,
                             const int64_t *stored_next, size_t count, hc_topic_range_t *ranges_out,
                             size_t *range_count_out, char *errstr, size_t errstr_size)
{
    *range_count_out = 0;
    /* A predecessor of this instance (a killed process restarted with the same instance.id) may
     * have left a transaction open with marks in it: the marks read as unstable (the read below
     * waits) until it ends. This producer's init_transactions ends it now, instead of the
     * transaction timeout a minute later. */
    (void)ready(cl);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)count + 1);
    for (size_t i = 0; i < count; i++) {
        rd_kafka_topic_partition_list_add(list, cl->cfg->topic_partials, partitions[i]);
    }
    /* Bounded short: while another instance's transaction holds the marks unstable, the read
     * waits, and stage 2 commits nothing meanwhile; the repair is tried again after a back-off
     * while the batches go on (RELIABILITY.md, F2). */
    rd_kafka_resp_err_t err = rd_kafka_committed(consumer, list, CHANGELOG_MARKS_READ_MS);
    if (err) {
        hc_errstr_set(errstr, errstr_size, "reading changelog marks: %s", rd_kafka_err2str(err));
        repair_failed(cl, errstr);
        rd_kafka_topic_partition_list_destroy(list);
        return HC_ERR_TRANSIENT;
    }
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        int64_t to = stored_next[i];
        if (to == HC_OFFSET_NONE) {
            continue; /* nothing stored, nothing published */
        }
        const rd_kafka_topic_partition_t *tp = &list->elems[i];
        int64_t from = tp->err || tp->offset < 0 ? HC_OFFSET_NONE : tp->offset;
        if (from != HC_OFFSET_NONE) {
            mark(cl, partitions[i], from); /* what the transactions carry until it moves */
        }
        if (from != HC_OFFSET_NONE && from >= to) {
            continue;
        }
        if (to > HC_CHANGELOG_REPAIR_MAX &&
            (from == HC_OFFSET_NONE || to - from > HC_CHANGELOG_REPAIR_MAX)) {
            if (from != HC_OFFSET_NONE) {
                hc_log(HC_LOG_WARN, cl->name,
                       "changelog of partition %" PRId32 " behind by %" PRId64
                       " partials; republishing the last %d only",
                       partitions[i], to - from, HC_CHANGELOG_REPAIR_MAX);
            }
            from = to - HC_CHANGELOG_REPAIR_MAX;
        }
        ranges_out[n++] = (hc_topic_range_t){partitions[i], from, to};
    }
    rd_kafka_topic_partition_list_destroy(list);
    *range_count_out = n;
    return HC_OK;
}

static hc_err_t produce_current(hc_changelog_t *cl, hc_store_t *st, const hc_table_t *tbl,
                                char *errstr, size_t errstr_size);

/* Publishes the current store total of every post in tbl, in one transaction that carries the
 * repair's marks unmoved (fence: the membership check). */
static hc_err_t publish_current(hc_changelog_t *cl, rd_kafka_t *consumer, hc_store_t *st,
                                const hc_table_t *tbl, const rd_kafka_topic_partition_list_t *fence,
                                char *errstr, size_t errstr_size)
{
    if (!ready(cl)) {
        hc_errstr_set(errstr, errstr_size, "the changelog producer is not ready");
        return HC_ERR_TRANSIENT;
    }
    rd_kafka_error_t *error = rd_kafka_begin_transaction(cl->producer);
    if (error) {
        hc_errstr_set(errstr, errstr_size, "begin_transaction: %s", rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
        renew_producer(cl, "begin_transaction failed");
        return HC_ERR_TRANSIENT;
    }
    hc_err_t err = produce_current(cl, st, tbl, errstr, errstr_size);
    if (err == HC_OK) {
        if (!end_txn(cl, consumer, fence)) {
            hc_errstr_set(errstr, errstr_size, "republished totals not committed");
            err = HC_ERR_TRANSIENT;
        }
    } else {
        /* a store read failed mid-way: nothing of this transaction may count */
        rd_kafka_error_t *aerr =
            rd_kafka_abort_transaction(cl->producer, (int)cl->cfg->timeouts.drain_ms);
        if (aerr) {
            rd_kafka_error_destroy(aerr);
            renew_producer(cl, "a repair's transaction not aborted");
        }
        cl->outstanding = 0;
    }
    return err;
}

/* The records of publish_current. */
static hc_err_t produce_current(hc_changelog_t *cl, hc_store_t *st, const hc_table_t *tbl,
                                char *errstr, size_t errstr_size)
{
    const char *ids[REPAIR_CHUNK];
    size_t lens[REPAIR_CHUNK];
    int64_t totals[REPAIR_CHUNK];
    size_t count = hc_table_count(tbl);
    for (size_t at = 0; at < count; at += REPAIR_CHUNK) {
        size_t k = count - at < REPAIR_CHUNK ? count - at : REPAIR_CHUNK;
        for (size_t i = 0; i < k; i++) {
            const hc_table_entry_t *ent = hc_table_entry(tbl, at + i);
            ids[i] = ent->post_id;
            lens[i] = ent->post_id_len;
        }
        hc_err_t err = hc_store_get(st, ids, lens, k, totals, errstr, errstr_size);
        if (err != HC_OK) {
            return err == HC_ERR_FATAL ? err : HC_ERR_TRANSIENT;
        }
        int64_t as_of = hc_wall_ms();
        for (size_t i = 0; i < k; i++) {
            if (!produce(cl, ids[i], lens[i], totals[i], as_of)) {
                hc_errstr_set(errstr, errstr_size, "changelog producer refused a record");
                return HC_ERR_TRANSIENT;
            }
        }
    }
    return HC_OK;
}

typedef struct collect_ctx {
    hc_changelog_t *cl;
    rd_kafka_t *consumer;
    const rd_kafka_topic_partition_list_t *fence; /* the repair's marks, unmoved */
    hc_store_t *st;
    hc_table_t *tbl;
    size_t posts;          /* published so far */
    hc_pack_entry_t *pack; /* owned scratch, HC_PACK_MAX_POSTS long */
    char *errstr;
    size_t errstr_size;
} collect_ctx_t;

static hc_err_t collect_one(collect_ctx_t *ctx, const char *post_id, size_t post_id_len)
{
    hc_err_t err = hc_table_add(ctx->tbl, post_id, post_id_len, 0, 1, HC_TS_NONE, HC_TS_NONE);
    if (err == HC_ERR_FULL) {
        ctx->posts += hc_table_count(ctx->tbl);
        err = publish_current(ctx->cl, ctx->consumer, ctx->st, ctx->tbl, ctx->fence, ctx->errstr,
                              ctx->errstr_size);
        hc_table_clear(ctx->tbl);
        if (err == HC_OK) {
            err = hc_table_add(ctx->tbl, post_id, post_id_len, 0, 1, HC_TS_NONE, HC_TS_NONE);
        }
    }
    return err;
}

/* Collects the posts of one partials record (either format, as stage 2 tells them apart),
 * publishing the collected ones whenever the table fills. A record that does not decode is
 * skipped (stage 2 dead-lettered it); republishing a post's current total is harmless in any
 * case. */
static hc_err_t collect_post(const rd_kafka_message_t *rkm, void *opaque)
{
    collect_ctx_t *ctx = opaque;
    char why[256];
    const void *value = rkm->payload;
    size_t len = value ? rkm->len : 0;
    if (hc_pack_is_packed(value, len)) {
        size_t n = 0;
        if (hc_pack_decode(value, len, ctx->pack, &n, why, sizeof(why)) != HC_PARTIAL_OK) {
            return HC_OK; /* stage 2 skipped it too */
        }
        hc_err_t err = HC_OK;
        for (size_t i = 0; i < n && err == HC_OK; i++) {
            err = collect_one(ctx, ctx->pack[i].post_id, ctx->pack[i].post_id_len);
        }
        return err;
    }
    hc_partial_t partial;
    if (hc_partial_decode(value, len, &partial, why, sizeof(why)) != HC_OK) {
        return HC_OK; /* stage 2 skipped it too */
    }
    return collect_one(ctx, partial.post_id, partial.post_id_len);
}

hc_err_t hc_changelog_repair(hc_changelog_t *cl, rd_kafka_t *consumer, hc_store_t *st,
                             const hc_topic_range_t *ranges, size_t count, char *errstr,
                             size_t errstr_size)
{
    if (count == 0) {
        cl->taken_over = false;
        cl->failed = false;
        cl->repair_failures = 0;
        return HC_OK;
    }
    int64_t t0 = hc_now_ms();
    rd_kafka_topic_partition_list_t *fence = NULL, *moved = NULL;
    renew_if_fatal(cl);
    cl->failed = false; /* what failed before is in these ranges */
    hc_table_t *tbl = hc_table_new(REPAIR_KEYS);
    hc_pack_entry_t *pack = malloc(HC_PACK_MAX_POSTS * sizeof(*pack));
    rd_kafka_t *reader = hc_kafka_new(cl->cfg, HC_KAFKA_ROLE_READER, NULL, errstr, errstr_size);
    hc_err_t err = HC_ERR_FATAL;
    if (!tbl || !pack || !reader) {
        if (!tbl || !pack) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
        }
        goto done;
    }
    fence = ranges_marks(cl, ranges, count, false);
    moved = ranges_marks(cl, ranges, count, true);
    collect_ctx_t ctx = {cl, consumer, fence, st, tbl, 0, pack, errstr, errstr_size};
    err = hc_topic_read_ranges_idle(reader, cl->cfg->topic_partials, ranges, count,
                                    cl->cfg->timeouts.topic_read_idle_ms, collect_post, &ctx,
                                    errstr, errstr_size);
    if (err == HC_OK) {
        ctx.posts += hc_table_count(tbl);
        err = publish_current(cl, consumer, st, tbl, fence, errstr, errstr_size);
    }
    if (err == HC_OK) {
        /* every post republished: the marks move, in a transaction of their own */
        rd_kafka_error_t *error = rd_kafka_begin_transaction(cl->producer);
        if (error) {
            hc_errstr_set(errstr, errstr_size, "begin_transaction: %s",
                          rd_kafka_error_string(error));
            rd_kafka_error_destroy(error);
            renew_producer(cl, "begin_transaction failed");
            err = HC_ERR_TRANSIENT;
        } else if (!end_txn(cl, consumer, moved)) {
            hc_errstr_set(errstr, errstr_size, "the repaired marks not committed");
            err = HC_ERR_TRANSIENT;
        }
    }
    if (err == HC_OK) {
        for (size_t i = 0; i < count; i++) {
            mark(cl, ranges[i].partition, ranges[i].to);
        }
        cl->taken_over = false;
        cl->repair_failures = 0;
        int64_t ms = hc_now_ms() - t0;
        hc_log_event(HC_LOG_INFO, cl->name, "changelog_repaired", HC_LOG_INT("partitions", count),
                     HC_LOG_INT("posts", ctx.posts), HC_LOG_INT("ms", ms));
    } else {
        repair_failed(cl, errstr);
    }
done:
    if (fence) {
        rd_kafka_topic_partition_list_destroy(fence);
    }
    if (moved) {
        rd_kafka_topic_partition_list_destroy(moved);
    }
    if (reader) {
        rd_kafka_consumer_close(reader);
        rd_kafka_destroy(reader);
    }
    hc_table_destroy(tbl);
    free(pack);
    return err;
}
