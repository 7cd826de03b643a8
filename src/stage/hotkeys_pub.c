/* Stage 2's hot set and its records in topic.hotkeys (see hotcount/hotkeys_pub.h). */
#include "hotcount/hotkeys_pub.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"

/* Records carry expires = since + this (a minute, or 6 dwell times when longer), and a hot post
 * is announced again every third of it: long enough that the refreshes cost nothing (a handful
 * of records per hot post per minute), short enough that a stage 2 that died with posts in its
 * set stops claiming them within a minute or so. */
#define TTL_MIN_MS 60000

struct hc_hotkeys_pub {
    const hc_config_t *cfg;
    const char *area;
    hc_metrics_t *metrics;
    hc_hotset_t *hs;             /* owned */
    rd_kafka_t *rk;              /* owned: idempotent producer */
    int64_t failed;              /* deliveries that failed: dr_msg_cb, on the calling thread */
    hc_hotset_stats_t published; /* the stats already added to the metrics */
    int64_t size;                /* the members already added to hotcount_hot_posts */
    hc_hotkey_t *top;            /* owned, HC_METRICS_HOT_KEYS: the hottest members, for the
                                    metrics */
};

static int64_t wall_clock(void *opaque)
{
    (void)opaque;
    return hc_wall_ms();
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    if (rkm->err) {
        hc_hotkeys_pub_t *hp = opaque;
        if (hp->failed++ == 0) { /* one line, then the count: a dead broker fails every record */
            hc_log(HC_LOG_WARN, hp->area, "hotkeys record not delivered to %s: %s",
                   hp->cfg->topic_hotkeys, rd_kafka_err2str(rkm->err));
        }
    }
}

hc_err_t hc_hotkeys_pub_new(const hc_config_t *cfg, const char *area, hc_metrics_t *metrics,
                            hc_hotset_clock_fn clock, void *clock_opaque, hc_hotkeys_pub_t **out,
                            char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (!cfg->topic_hotkeys[0]) {
        return HC_OK;
    }
    hc_hotkeys_pub_t *hp = calloc(1, sizeof(*hp));
    if (!hp) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hp->cfg = cfg;
    hp->area = area;
    hp->metrics = metrics;
    int64_t ttl = 6 * cfg->hotkeys_dwell_ms > TTL_MIN_MS ? 6 * cfg->hotkeys_dwell_ms : TTL_MIN_MS;
    hc_hotset_opts_t o = {.enter_rate = (double)cfg->hotkeys_enter_rate,
                          .leave_rate = (double)cfg->hotkeys_leave_rate,
                          .dwell_ms = cfg->hotkeys_dwell_ms,
                          .max = (size_t)cfg->hotkeys_max,
                          .window_ms = cfg->flush_ms,
                          .ttl_ms = ttl,
                          .flap_ms = ttl,
                          .now_ms = clock ? clock : wall_clock,
                          .clock_opaque = clock_opaque};
    hp->hs = hc_hotset_new(&o, errstr, errstr_size);
    hp->top = calloc(HC_METRICS_HOT_KEYS, sizeof(*hp->top));
    if (!hp->hs || !hp->top) {
        if (hp->hs) { /* the set's own errors are in errstr already */
            hc_errstr_set(errstr, errstr_size, "out of memory");
        }
        hc_hotset_destroy(hp->hs);
        free(hp->top);
        free(hp);
        return HC_ERR_INVALID;
    }
    hc_kafka_opts_t kopts = {.dr_msg_cb = dr_msg_cb, .opaque = hp};
    hp->rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_PRODUCER, &kopts, errstr, errstr_size);
    if (!hp->rk) {
        hc_hotset_destroy(hp->hs);
        free(hp->top);
        free(hp);
        return HC_ERR_INVALID;
    }
    /* The thresholds beside the members' rates, so that a dashboard shows how near each is. */
    hc_metric_set(metrics->hotkeys_enter_milli, cfg->hotkeys_enter_rate * 1000);
    hc_metric_set(metrics->hotkeys_leave_milli, cfg->hotkeys_leave_rate * 1000);
    *out = hp;
    return HC_OK;
}

static void publish(hc_hotkeys_pub_t *hp, const hc_hotset_transition_t *t)
{
    hc_hotkey_record_t rec = {.post_id_len = t->post_id_len,
                              .hot = t->change != HC_HOTSET_TO_COOL,
                              .rate = t->rate,
                              .since_ms = t->since_ms,
                              .source = HC_HOTKEY_DETECTED,
                              .expires_ms = t->expires_ms};
    memcpy(rec.post_id, t->post_id, t->post_id_len);
    char key[HC_POST_ID_MAX + 16];
    size_t klen = hc_hotkey_record_key(&rec, key, sizeof(key));
    char *value = hc_hotkey_record_encode(&rec);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__FAIL;
    if (value && klen > 0) {
        /* copied: the producer queue outlives this call */
        err = rd_kafka_producev(hp->rk, RD_KAFKA_V_TOPIC(hp->cfg->topic_hotkeys),
                                RD_KAFKA_V_KEY(key, klen), RD_KAFKA_V_VALUE(value, strlen(value)),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    }
    free(value);
    if (!err && !rec.hot) {
        /* The post left the set: a tombstone after its "cool" record, so compaction forgets the
         * post (after delete.retention.ms) instead of keeping its last record forever. Readers
         * that start later then never read the posts of a deployment's whole life (issue 25,
         * item 4); readers following now saw the "cool" record, the audit's last line. */
        err = rd_kafka_producev(hp->rk, RD_KAFKA_V_TOPIC(hp->cfg->topic_hotkeys),
                                RD_KAFKA_V_KEY(key, klen), RD_KAFKA_V_VALUE(NULL, 0),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    }
    if (err) {
        if (hp->failed++ == 0) {
            hc_log(HC_LOG_WARN, hp->area, "hotkeys record not produced to %s: %s",
                   hp->cfg->topic_hotkeys, rd_kafka_err2str(err));
        }
    }
}

/* The set's counters into the process's metrics, as increments: several stage-2 instances of
 * one process add into the same fields. */
static void publish_metrics(hc_hotkeys_pub_t *hp)
{
    hc_hotset_stats_t st = hc_hotset_stats(hp->hs);
    int64_t size = (int64_t)hc_hotset_size(hp->hs);
    hc_metric_add(hp->metrics->hot_posts, size - hp->size);
    hc_metric_add(hp->metrics->hotkey_to_hot, st.to_hot - hp->published.to_hot);
    hc_metric_add(hp->metrics->hotkey_to_cool, st.to_cool - hp->published.to_cool);
    hc_metric_add(hp->metrics->hotkey_flaps, st.flaps - hp->published.flaps);
    hp->published = st;
    hp->size = size;
    /* The hottest members, kept sorted by an insertion into HC_METRICS_HOT_KEYS slots: O(members)
     * per window, no allocation. */
    size_t n = 0;
    for (size_t i = 0; i < (size_t)size; i++) {
        hc_hotset_member_t mb = hc_hotset_member(hp->hs, i);
        if (n == HC_METRICS_HOT_KEYS && mb.rate <= hp->top[n - 1].events_per_second) {
            continue;
        }
        size_t j = n < HC_METRICS_HOT_KEYS ? n++ : n - 1;
        while (j > 0 && hp->top[j - 1].events_per_second < mb.rate) {
            hp->top[j] = hp->top[j - 1];
            j--;
        }
        memcpy(hp->top[j].post_id, mb.post_id, mb.post_id_len);
        hp->top[j].post_id[mb.post_id_len] = '\0';
        hp->top[j].post_id_len = mb.post_id_len;
        hp->top[j].events_per_second = mb.rate;
    }
    hc_metrics_publish_hot_set(hp->metrics, hp->area, hp->top, n, hc_now_ms());
}

void hc_hotkeys_pub_window(hc_hotkeys_pub_t *hp, const hc_table_t *tbl)
{
    if (!hp) {
        return;
    }
    hc_hotset_begin(hp->hs);
    size_t n = hc_table_count(tbl);
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, i);
        hc_hotset_offer(hp->hs, ent->post_id, ent->post_id_len, ent->events);
    }
    size_t nt = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(hp->hs, &nt);
    for (size_t i = 0; i < nt; i++) {
        publish(hp, &t[i]);
        if (t[i].change == HC_HOTSET_REFRESH) {
            continue;
        }
        hc_log_event(HC_LOG_INFO, hp->area, "hot_key", HC_LOG_STR("post", t[i].post_id),
                     HC_LOG_STR("state", t[i].change == HC_HOTSET_TO_HOT ? "hot" : "cool"),
                     HC_LOG_INT("rate", (int64_t)(t[i].rate + 0.5)),
                     HC_LOG_STR("reason", t[i].change == HC_HOTSET_TO_HOT ? "enter"
                                          : t[i].evicted                  ? "evicted"
                                                                          : "dwell"));
    }
    rd_kafka_poll(hp->rk, 0); /* delivery reports: counts failures */
    publish_metrics(hp);
}

const hc_hotset_t *hc_hotkeys_pub_set(const hc_hotkeys_pub_t *hp)
{
    return hp ? hp->hs : NULL;
}

int64_t hc_hotkeys_pub_failed(const hc_hotkeys_pub_t *hp)
{
    return hp ? hp->failed : 0;
}

void hc_hotkeys_pub_destroy(hc_hotkeys_pub_t *hp)
{
    if (!hp) {
        return;
    }
    hc_metric_add(hp->metrics->hot_posts, -hp->size); /* its members leave the process's gauge */
    hc_metrics_publish_hot_set(hp->metrics, hp->area, NULL, 0, hc_now_ms());
    /* Advisory records do not hold up a stop: at most a second for those in flight (a topic
     * that does not exist would keep them until message.timeout.ms), then drop the rest. */
    int64_t wait_ms = hp->cfg->timeouts.drain_ms < 1000 ? hp->cfg->timeouts.drain_ms : 1000;
    rd_kafka_flush(hp->rk, (int)wait_ms);
    if (rd_kafka_outq_len(hp->rk) > 0) {
        rd_kafka_purge(hp->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(hp->rk, 0); /* the purged records' reports */
    }
    rd_kafka_destroy(hp->rk);
    hc_hotset_destroy(hp->hs);
    free(hp->top);
    free(hp);
}
