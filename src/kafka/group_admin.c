#include "hotcount/group_admin.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/offset.h"
#include "hotcount/topic_read.h"

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void hc_group_desc_fini(hc_group_desc_t *desc)
{
    if (!desc) {
        return;
    }
    for (size_t i = 0; i < desc->member_count; i++) {
        hc_group_member_t *m = &desc->members[i];
        free(m->consumer_id);
        free(m->client_id);
        free(m->instance_id);
        free(m->host);
        free(m->partitions);
    }
    free(desc->members);
    memset(desc, 0, sizeof(*desc));
}

/* Waits on q for the result event of one admin request; NULL after timeout_ms. */
static rd_kafka_event_t *wait_result(rd_kafka_queue_t *q, rd_kafka_event_type_t type,
                                     int timeout_ms)
{
    rd_kafka_event_t *rkev = rd_kafka_queue_poll(q, timeout_ms);
    if (rkev && rd_kafka_event_type(rkev) != type) {
        rd_kafka_event_destroy(rkev);
        return NULL;
    }
    return rkev;
}

static hc_err_t copy_member(const rd_kafka_MemberDescription_t *md, const char *topic,
                            hc_group_member_t *m)
{
    m->consumer_id = dup_or_empty(rd_kafka_MemberDescription_consumer_id(md));
    m->client_id = dup_or_empty(rd_kafka_MemberDescription_client_id(md));
    m->instance_id = dup_or_empty(rd_kafka_MemberDescription_group_instance_id(md));
    m->host = dup_or_empty(rd_kafka_MemberDescription_host(md));
    if (!m->consumer_id || !m->client_id || !m->instance_id || !m->host) {
        return HC_ERR_FATAL;
    }
    const rd_kafka_MemberAssignment_t *ma = rd_kafka_MemberDescription_assignment(md);
    const rd_kafka_topic_partition_list_t *parts =
        ma ? rd_kafka_MemberAssignment_partitions(ma) : NULL;
    if (!parts || parts->cnt == 0) {
        return HC_OK;
    }
    m->partitions = calloc((size_t)parts->cnt, sizeof(*m->partitions));
    if (!m->partitions) {
        return HC_ERR_FATAL;
    }
    for (int i = 0; i < parts->cnt; i++) {
        if (strcmp(parts->elems[i].topic, topic) == 0) {
            m->partitions[m->partition_count++] = parts->elems[i].partition;
        }
    }
    qsort(m->partitions, m->partition_count, sizeof(*m->partitions), cmp_i32);
    return HC_OK;
}

hc_err_t hc_group_describe(rd_kafka_t *rk, const char *group, const char *topic, int timeout_ms,
                           hc_group_desc_t *desc, char *errstr, size_t errstr_size)
{
    memset(desc, 0, sizeof(*desc));
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS);
    char ebuf[256];
    hc_err_t err = HC_OK;
    if (rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, ebuf, sizeof(ebuf))) {
        hc_errstr_set(errstr, errstr_size, "describe %s: %s", group, ebuf);
        err = HC_ERR_INVALID;
        goto done;
    }
    const char *groups[] = {group};
    rd_kafka_DescribeConsumerGroups(rk, groups, 1, opts, q);
    rd_kafka_event_t *rkev =
        wait_result(q, RD_KAFKA_EVENT_DESCRIBECONSUMERGROUPS_RESULT, timeout_ms + 1000);
    if (!rkev) {
        hc_errstr_set(errstr, errstr_size, "describe %s: no answer within %d ms", group,
                      timeout_ms);
        err = HC_ERR_TRANSIENT;
        goto done;
    }
    if (rd_kafka_event_error(rkev)) {
        hc_errstr_set(errstr, errstr_size, "describe %s: %s", group,
                      rd_kafka_event_error_string(rkev));
        err = HC_ERR_TRANSIENT;
        goto destroy_event;
    }
    const rd_kafka_DescribeConsumerGroups_result_t *res =
        rd_kafka_event_DescribeConsumerGroups_result(rkev);
    size_t cnt = 0;
    const rd_kafka_ConsumerGroupDescription_t **gds =
        rd_kafka_DescribeConsumerGroups_result_groups(res, &cnt);
    if (cnt != 1) {
        hc_errstr_set(errstr, errstr_size, "describe %s: %zu groups in the answer", group, cnt);
        err = HC_ERR_TRANSIENT;
        goto destroy_event;
    }
    const rd_kafka_error_t *gerr = rd_kafka_ConsumerGroupDescription_error(gds[0]);
    if (gerr) {
        hc_errstr_set(errstr, errstr_size, "describe %s: %s", group, rd_kafka_error_string(gerr));
        err = HC_ERR_TRANSIENT;
        goto destroy_event;
    }
    snprintf(desc->state, sizeof(desc->state), "%s",
             rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(gds[0])));
    const char *assignor = rd_kafka_ConsumerGroupDescription_partition_assignor(gds[0]);
    snprintf(desc->protocol, sizeof(desc->protocol), "%s", assignor ? assignor : "");
    size_t n = rd_kafka_ConsumerGroupDescription_member_count(gds[0]);
    desc->members = n ? calloc(n, sizeof(*desc->members)) : NULL;
    if (n && !desc->members) {
        err = HC_ERR_FATAL;
    }
    for (size_t i = 0; err == HC_OK && i < n; i++) {
        desc->member_count++;
        err = copy_member(rd_kafka_ConsumerGroupDescription_member(gds[0], i), topic,
                          &desc->members[i]);
    }
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "describe %s: out of memory", group);
        hc_group_desc_fini(desc);
    }
destroy_event:
    rd_kafka_event_destroy(rkev);
done:
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    return err;
}

/* *n = the partition count of topic, from the cluster's metadata. */
static hc_err_t partition_count(rd_kafka_t *rk, const char *topic, int timeout_ms, int *n,
                                char *errstr, size_t errstr_size)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t rerr = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    rd_kafka_topic_destroy(rkt);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "metadata for %s: %s", topic, rd_kafka_err2str(rerr));
        return HC_ERR_TRANSIENT;
    }
    *n = md->topic_cnt == 1 && !md->topics[0].err ? md->topics[0].partition_cnt : -1;
    if (*n < 0) {
        hc_errstr_set(errstr, errstr_size, "topic %s: %s", topic,
                      md->topic_cnt ? rd_kafka_err2str(md->topics[0].err) : "not found");
    }
    rd_kafka_metadata_destroy(md);
    return *n < 0 ? HC_ERR_FATAL : HC_OK;
}

hc_err_t hc_topic_watermarks(rd_kafka_t *rk, const char *topic, int timeout_ms, int *count,
                             int64_t **low, int64_t **high, char *errstr, size_t errstr_size)
{
    *count = 0;
    *low = *high = NULL;
    int n = 0;
    hc_err_t err = partition_count(rk, topic, timeout_ms, &n, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    rd_kafka_resp_err_t rerr;
    int64_t *lo = calloc((size_t)n + 1, sizeof(*lo));
    int64_t *hi = calloc((size_t)n + 1, sizeof(*hi));
    if (!lo || !hi) {
        free(lo);
        free(hi);
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    for (int p = 0; p < n; p++) {
        rerr = rd_kafka_query_watermark_offsets(rk, topic, p, &lo[p], &hi[p], timeout_ms);
        if (rerr) {
            hc_errstr_set(errstr, errstr_size, "watermarks of %s/%d: %s", topic, p,
                          rd_kafka_err2str(rerr));
            free(lo);
            free(hi);
            return HC_ERR_TRANSIENT;
        }
    }
    *count = n;
    *low = lo;
    *high = hi;
    return HC_OK;
}

hc_err_t hc_group_committed(rd_kafka_t *rk, const char *group, const char *topic, int count,
                            int timeout_ms, int64_t *offsets_out, char *errstr, size_t errstr_size)
{
    for (int p = 0; p < count; p++) {
        offsets_out[p] = HC_OFFSET_NONE;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(count);
    for (int p = 0; p < count; p++) {
        rd_kafka_topic_partition_list_add(parts, topic, p);
    }
    rd_kafka_ListConsumerGroupOffsets_t *req = rd_kafka_ListConsumerGroupOffsets_new(group, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS);
    char ebuf[256];
    hc_err_t err = HC_OK;
    rd_kafka_event_t *rkev = NULL;
    if (rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, ebuf, sizeof(ebuf))) {
        hc_errstr_set(errstr, errstr_size, "offsets of %s: %s", group, ebuf);
        err = HC_ERR_INVALID;
        goto done;
    }
    rd_kafka_ListConsumerGroupOffsets(rk, &req, 1, opts, q);
    rkev = wait_result(q, RD_KAFKA_EVENT_LISTCONSUMERGROUPOFFSETS_RESULT, timeout_ms + 1000);
    if (!rkev || rd_kafka_event_error(rkev)) {
        hc_errstr_set(errstr, errstr_size, "offsets of %s: %s", group,
                      rkev ? rd_kafka_event_error_string(rkev) : "no answer");
        err = HC_ERR_TRANSIENT;
        goto done;
    }
    size_t cnt = 0;
    const rd_kafka_group_result_t **grs = rd_kafka_ListConsumerGroupOffsets_result_groups(
        rd_kafka_event_ListConsumerGroupOffsets_result(rkev), &cnt);
    const rd_kafka_error_t *gerr = cnt == 1 ? rd_kafka_group_result_error(grs[0]) : NULL;
    if (cnt != 1 || gerr) {
        hc_errstr_set(errstr, errstr_size, "offsets of %s: %s", group,
                      gerr ? rd_kafka_error_string(gerr) : "no group in the answer");
        err = HC_ERR_TRANSIENT;
        goto done;
    }
    const rd_kafka_topic_partition_list_t *got = rd_kafka_group_result_partitions(grs[0]);
    for (int i = 0; got && i < got->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &got->elems[i];
        if (strcmp(tp->topic, topic) != 0 || tp->partition < 0 || tp->partition >= count) {
            continue;
        }
        /* A partition's error is no "nothing committed": UNSTABLE_OFFSET_COMMIT, for one, says
         * a transaction holding offsets of this group is still open. Taking it for no offset
         * would start a reader over from the beginning. */
        if (tp->err) {
            hc_errstr_set(errstr, errstr_size, "offsets of %s on %s/%d: %s", group, topic,
                          (int)tp->partition, rd_kafka_err2str(tp->err));
            err = HC_ERR_TRANSIENT;
            goto done;
        }
        if (tp->offset >= 0) {
            offsets_out[tp->partition] = tp->offset;
        }
    }
done:
    if (rkev) {
        rd_kafka_event_destroy(rkev);
    }
    rd_kafka_ListConsumerGroupOffsets_destroy(req);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    return err;
}

#if RD_KAFKA_VERSION >= 0x020300ff
/* out[p] = the offset ListOffsets answers for spec (an rd_kafka_OffsetSpec_t or a timestamp) of
 * each partition p of topic marked in want (every partition when want is NULL), under isolation;
 * -1 when the broker has none (a timestamp past every record). */
static hc_err_t list_offsets(rd_kafka_t *rk, const char *topic, int n, const bool *want,
                             int64_t spec, rd_kafka_IsolationLevel_t isolation, int timeout_ms,
                             int64_t *out, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++) {
        out[p] = -1;
        if (!want || want[p]) {
            rd_kafka_topic_partition_list_add(parts, topic, p)->offset = spec;
        }
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_LISTOFFSETS);
    rd_kafka_event_t *rkev = NULL;
    char ebuf[256];
    hc_err_t err = HC_OK;
    rd_kafka_error_t *error = rd_kafka_AdminOptions_set_isolation_level(opts, isolation);
    if (error || rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, ebuf, sizeof(ebuf))) {
        hc_errstr_set(errstr, errstr_size, "list offsets of %s: %s", topic,
                      error ? rd_kafka_error_string(error) : ebuf);
        rd_kafka_error_destroy(error);
        err = HC_ERR_INVALID;
        goto done;
    }
    if (parts->cnt == 0) {
        goto done;
    }
    rd_kafka_ListOffsets(rk, parts, opts, q);
    rkev = wait_result(q, RD_KAFKA_EVENT_LISTOFFSETS_RESULT, timeout_ms + 1000);
    if (!rkev || rd_kafka_event_error(rkev)) {
        hc_errstr_set(errstr, errstr_size, "list offsets of %s: %s", topic,
                      rkev ? rd_kafka_event_error_string(rkev) : "no answer");
        err = HC_ERR_TRANSIENT;
        goto done;
    }
    size_t cnt = 0;
    const rd_kafka_ListOffsetsResultInfo_t **infos =
        rd_kafka_ListOffsets_result_infos(rd_kafka_event_ListOffsets_result(rkev), &cnt);
    for (size_t i = 0; i < cnt; i++) {
        const rd_kafka_topic_partition_t *tp =
            rd_kafka_ListOffsetsResultInfo_topic_partition(infos[i]);
        if (tp->err) {
            hc_errstr_set(errstr, errstr_size, "list offsets of %s/%d: %s", topic,
                          (int)tp->partition, rd_kafka_err2str(tp->err));
            err = HC_ERR_TRANSIENT;
            goto done;
        }
        if (tp->partition >= 0 && tp->partition < n) {
            out[tp->partition] = tp->offset;
        }
    }
done:
    if (rkev) {
        rd_kafka_event_destroy(rkev);
    }
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    rd_kafka_topic_partition_list_destroy(parts);
    return err;
}

hc_err_t hc_topic_held_partitions(rd_kafka_t *rk, const char *topic, int64_t older_than_ms,
                                  int timeout_ms, hc_held_partition_t **held, size_t *count,
                                  char *errstr, size_t errstr_size)
{
    *held = NULL;
    *count = 0;
    int n = 0;
    hc_err_t err = partition_count(rk, topic, timeout_ms, &n, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    int64_t *stable = calloc((size_t)n + 1, sizeof(*stable));
    int64_t *end = calloc((size_t)n + 1, sizeof(*end));
    int64_t *at_time = calloc((size_t)n + 1, sizeof(*at_time));
    bool *is_held = calloc((size_t)n + 1, sizeof(*is_held));
    hc_held_partition_t *out = NULL;
    if (!stable || !end || !at_time || !is_held) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto done;
    }
    /* the stable offsets first: a transaction that ends between the two reads then shows as
     * held for a moment, never one that began as unheld; and a moment's hold is no lingering */
    err = list_offsets(rk, topic, n, NULL, RD_KAFKA_OFFSET_SPEC_LATEST,
                       RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED, timeout_ms, stable, errstr,
                       errstr_size);
    if (err == HC_OK) {
        err = list_offsets(rk, topic, n, NULL, RD_KAFKA_OFFSET_SPEC_LATEST,
                           RD_KAFKA_ISOLATION_LEVEL_READ_UNCOMMITTED, timeout_ms, end, errstr,
                           errstr_size);
    }
    size_t nheld = 0;
    for (int p = 0; err == HC_OK && p < n; p++) {
        is_held[p] = stable[p] >= 0 && end[p] > stable[p];
        nheld += is_held[p];
    }
    /* the first offset written at or after older_than_ms, among the held partitions only */
    if (err == HC_OK && nheld > 0) {
        err = list_offsets(rk, topic, n, is_held, older_than_ms,
                           RD_KAFKA_ISOLATION_LEVEL_READ_UNCOMMITTED, timeout_ms, at_time, errstr,
                           errstr_size);
    }
    if (err != HC_OK || nheld == 0) {
        goto done;
    }
    out = calloc(nheld, sizeof(*out));
    if (!out) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto done;
    }
    for (int p = 0; p < n; p++) {
        if (is_held[p]) {
            /* -1: no record that new at all, so the held one is older too */
            out[*count] = (hc_held_partition_t){p, stable[p], end[p],
                                                at_time[p] < 0 || at_time[p] > stable[p]};
            (*count)++;
        }
    }
    *held = out;
done:
    free(stable);
    free(end);
    free(at_time);
    free(is_held);
    return err;
}
#else
hc_err_t hc_topic_held_partitions(rd_kafka_t *rk, const char *topic, int64_t older_than_ms,
                                  int timeout_ms, hc_held_partition_t **held, size_t *count,
                                  char *errstr, size_t errstr_size)
{
    (void)rk;
    (void)older_than_ms;
    (void)timeout_ms;
    *held = NULL;
    *count = 0;
    hc_errstr_set(errstr, errstr_size,
                  "%s: librdkafka %s has no ListOffsets with an isolation level (2.3 has)", topic,
                  rd_kafka_version_str());
    return HC_ERR_INVALID;
}
#endif

typedef struct dl_ctx {
    hc_dead_letter_fn fn;
    void *opaque;
    int64_t scanned;
} dl_ctx_t;

static hc_err_t dead_letter_one(const rd_kafka_message_t *rkm, void *opaque)
{
    dl_ctx_t *ctx = opaque;
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_timestamp_type_t tstype;
    ctx->scanned++;
    if (rd_kafka_message_headers(rkm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        hdrs = NULL;
    }
    hc_dead_letter_t dl = {
        .partition = rkm->partition,
        .offset = rkm->offset,
        .timestamp_ms = rd_kafka_message_timestamp(rkm, &tstype),
        .key = rkm->key,
        .key_len = rkm->key ? rkm->key_len : 0,
        .value = rkm->payload,
        .value_len = rkm->payload ? rkm->len : 0,
    };
    const char *name;
    const void *v;
    size_t n;
    for (size_t i = 0;
         hdrs && rd_kafka_header_get_all(hdrs, i, &name, &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++) {
        hc_dead_letter_take_header(&dl, name, v, n); /* in order: the last of a name wins */
    }
    return ctx->fn(&dl, ctx->opaque);
}

hc_err_t hc_dead_letters_read_ranges(rd_kafka_t *rk, const char *topic,
                                     const struct hc_topic_range *ranges, size_t count,
                                     hc_dead_letter_fn fn, void *opaque, int64_t *scanned,
                                     char *errstr, size_t errstr_size)
{
    dl_ctx_t ctx = {fn, opaque, 0};
    hc_err_t err =
        hc_topic_read_ranges(rk, topic, ranges, count, dead_letter_one, &ctx, errstr, errstr_size);
    *scanned = ctx.scanned;
    return err;
}

hc_err_t hc_dead_letters_read(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset,
                              int64_t max_per_partition, hc_dead_letter_fn fn, void *opaque,
                              int64_t *scanned, bool *partial, char *errstr, size_t errstr_size)
{
    *scanned = 0;
    *partial = false;
    int n = 0;
    int64_t *low = NULL, *high = NULL;
    hc_err_t err = hc_topic_watermarks(rk, topic, 10000, &n, &low, &high, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    hc_topic_range_t *ranges = calloc((size_t)n + 1, sizeof(*ranges));
    size_t count = 0;
    if (!ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto done;
    }
    if (partition >= n) {
        hc_errstr_set(errstr, errstr_size, "%s has no partition %d (%d partitions)", topic,
                      (int)partition, n);
        err = HC_ERR_INVALID;
        goto done;
    }
    for (int p = 0; p < n; p++) {
        if (partition >= 0 && p != partition) {
            continue;
        }
        int64_t from = low[p], to = high[p];
        if (offset >= 0) {
            from = offset;
            to = offset + 1;
        } else if (max_per_partition > 0 && to - from > max_per_partition) {
            from = to - max_per_partition;
            *partial = true;
        }
        if (from < to && from >= low[p] && to <= high[p]) {
            ranges[count++] = (hc_topic_range_t){p, from, to};
        }
    }
    if (count > 0) {
        err = hc_dead_letters_read_ranges(rk, topic, ranges, count, fn, opaque, scanned, errstr,
                                          errstr_size);
    }
done:
    free(ranges);
    free(low);
    free(high);
    return err;
}

#define LAST_RECORDS 16

static hc_err_t newest_timestamp(const rd_kafka_message_t *rkm, void *opaque)
{
    int64_t *ts_ms = opaque;
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(rkm, &tstype);
    if (ts > *ts_ms) {
        *ts_ms = ts;
    }
    return HC_OK;
}

hc_err_t hc_topic_last_timestamp(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *ts_ms,
                                 char *errstr, size_t errstr_size)
{
    *ts_ms = -1;
    int n = 0;
    int64_t *low = NULL, *high = NULL;
    hc_err_t err = hc_topic_watermarks(rk, topic, timeout_ms, &n, &low, &high, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    hc_topic_range_t *ranges = calloc((size_t)n + 1, sizeof(*ranges));
    size_t count = 0;
    for (int p = 0; ranges && p < n; p++) {
        /* the last record is the commit marker of the last transaction, the one before it that
         * transaction's last record in the partition; but an open transaction may hold the
         * last few (read_committed stops below them), so a few more are read */
        if (high[p] > low[p]) {
            int64_t from = high[p] - LAST_RECORDS > low[p] ? high[p] - LAST_RECORDS : low[p];
            ranges[count++] = (hc_topic_range_t){p, from, high[p]};
        }
    }
    if (!ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
    } else if (count > 0) {
        err = hc_topic_read_ranges(rk, topic, ranges, count, newest_timestamp, ts_ms, errstr,
                                   errstr_size);
    }
    free(ranges);
    free(low);
    free(high);
    return err;
}

typedef struct count_ctx {
    const hc_topic_range_t *ranges;
    size_t count;
    int64_t *counts;
} count_ctx_t;

static hc_err_t count_one(const rd_kafka_message_t *rkm, void *opaque)
{
    count_ctx_t *ctx = opaque;
    for (size_t r = 0; r < ctx->count; r++) {
        if (ctx->ranges[r].partition == rkm->partition) {
            ctx->counts[r]++;
            break;
        }
    }
    return HC_OK;
}

hc_err_t hc_topic_count_records(rd_kafka_t *rk, const char *topic,
                                const struct hc_topic_range *ranges, size_t count,
                                int64_t *counts_out, char *errstr, size_t errstr_size)
{
    memset(counts_out, 0, count * sizeof(*counts_out));
    if (count == 0) {
        return HC_OK;
    }
    count_ctx_t ctx = {ranges, count, counts_out};
    return hc_topic_read_ranges(rk, topic, ranges, count, count_one, &ctx, errstr, errstr_size);
}
