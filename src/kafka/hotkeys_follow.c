/* See include/kafka/hotcount/hotkeys_follow.h. */
#include "hotcount/hotkeys_follow.h"

#include <stdbool.h>
#include <stdlib.h>

#include "hotcount/clock.h"
#include "hotcount/group_admin.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"

/* A bound per poll: a producer that polls between sends must not stall on a burst of records. */
#define FOLLOW_POLL_MAX 10000

struct hc_hotkeys_follow {
    rd_kafka_t *rk; /* owned: a HC_KAFKA_ROLE_READER client, partition EOF on */
    hc_hotview_t *hv;
    int64_t invalid;
};

/* Applies one message: records to the view, EOF and errors to the caller. -1 out of memory,
 * 1 applied, 0 anything else. */
static int apply(hc_hotkeys_follow_t *f, const rd_kafka_message_t *rkm)
{
    if (rkm->err) {
        if (rkm->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            hc_log(HC_LOG_WARN, "hotkeys", "following %s: %s", rd_kafka_topic_name(rkm->rkt),
                   rd_kafka_message_errstr(rkm));
        }
        return 0;
    }
    char errstr[256];
    /* rkm->payload NULL is a tombstone: the post left the set (hotkeys_pub.h) */
    hc_err_t err = hc_hotview_apply_message(f->hv, rkm->key, rkm->key_len, rkm->payload, rkm->len,
                                            hc_wall_ms(), errstr, sizeof(errstr));
    if (err == HC_ERR_FATAL) {
        return -1;
    }
    if (err != HC_OK) {
        f->invalid++; /* counted, not logged: a writer of junk must not flood the log */
        return 0;
    }
    return 1;
}

hc_err_t hc_hotkeys_follow_open(const hc_config_t *cfg, hc_hotview_t *hv, int timeout_ms,
                                hc_hotkeys_follow_t **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (!cfg->topic_hotkeys || !cfg->topic_hotkeys[0]) {
        hc_errstr_set(errstr, errstr_size, "topic.hotkeys is off: nothing to follow");
        return HC_ERR_INVALID;
    }
    hc_hotkeys_follow_t *f = calloc(1, sizeof(*f));
    if (!f) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    f->hv = hv;
    hc_err_t err = HC_OK;
    int count = 0;
    int64_t *low = NULL, *high = NULL;
    bool *at_end = NULL;
    rd_kafka_topic_partition_list_t *list = NULL;
    f->rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, errstr_size);
    if (!f->rk) {
        err = HC_ERR_INVALID;
        goto fail;
    }
    err = hc_topic_watermarks(f->rk, cfg->topic_hotkeys, timeout_ms, &count, &low, &high, errstr,
                              errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    at_end = calloc((size_t)count + 1, sizeof(*at_end));
    list = rd_kafka_topic_partition_list_new(count + 1);
    if (!at_end || !list) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto fail;
    }
    for (int p = 0; p < count; p++) {
        rd_kafka_topic_partition_list_add(list, cfg->topic_hotkeys, p)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(f->rk, list);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "following %s: assign: %s", cfg->topic_hotkeys,
                      rd_kafka_err2str(rerr));
        err = HC_ERR_TRANSIENT;
        goto fail;
    }
    /* Catch up: every partition to its end (EOF), so the first key is already adaptive. */
    int remaining = count;
    int64_t deadline = hc_now_ms() + timeout_ms;
    while (remaining > 0) {
        if (hc_now_ms() >= deadline) {
            hc_errstr_set(errstr, errstr_size,
                          "following %s: %d partitions not read to their end "
                          "within %d ms",
                          cfg->topic_hotkeys, remaining, timeout_ms);
            err = HC_ERR_TRANSIENT;
            goto fail;
        }
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(f->rk, 100);
        if (!rkm) {
            continue;
        }
        if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && rkm->partition >= 0 &&
            rkm->partition < count && !at_end[rkm->partition]) {
            at_end[rkm->partition] = true;
            remaining--;
        }
        int r = apply(f, rkm);
        rd_kafka_message_destroy(rkm);
        if (r < 0) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            err = HC_ERR_FATAL;
            goto fail;
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
    free(at_end);
    free(low);
    free(high);
    *out = f;
    return HC_OK;

fail:
    if (list) {
        rd_kafka_topic_partition_list_destroy(list);
    }
    free(at_end);
    free(low);
    free(high);
    hc_kafka_reader_destroy(f->rk);
    free(f);
    return err;
}

int64_t hc_hotkeys_follow_poll(hc_hotkeys_follow_t *f, int timeout_ms)
{
    int64_t applied = 0;
    for (int i = 0; i < FOLLOW_POLL_MAX; i++) {
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(f->rk, i == 0 ? timeout_ms : 0);
        if (!rkm) {
            break;
        }
        int r = apply(f, rkm);
        rd_kafka_message_destroy(rkm);
        if (r < 0) {
            return -1;
        }
        applied += r;
    }
    return applied;
}

int64_t hc_hotkeys_follow_invalid(const hc_hotkeys_follow_t *f)
{
    return f->invalid;
}

void hc_hotkeys_follow_close(hc_hotkeys_follow_t *f)
{
    if (f) {
        hc_kafka_reader_destroy(f->rk);
        free(f);
    }
}
