#include "hotcount/admin.h"

#include <stdio.h>
#include <string.h>

#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"

typedef struct topic_spec {
    const char *name;
    int partitions;
    bool compacted;
} topic_spec_t;

#define MAX_TOPICS 6

static size_t topic_specs(const hc_config_t *cfg, topic_spec_t specs[MAX_TOPICS])
{
    size_t n = 0;
    specs[n++] = (topic_spec_t){cfg->topic_raw, cfg->topic_raw_partitions, false};
    specs[n++] = (topic_spec_t){cfg->topic_partials, cfg->topic_partials_partitions, false};
    specs[n++] = (topic_spec_t){cfg->topic_dlq, cfg->topic_dlq_partitions, false};
    if (cfg->topic_counts[0]) {
        specs[n++] = (topic_spec_t){cfg->topic_counts, cfg->topic_counts_partitions, true};
    }
    if (cfg->topic_manifest[0]) {
        specs[n++] = (topic_spec_t){cfg->topic_manifest, cfg->topic_manifest_partitions, false};
    }
    /* compacted: the last record per post and source is the current state (docs/FORMATS.md) */
    if (cfg->topic_hotkeys[0]) {
        specs[n++] = (topic_spec_t){cfg->topic_hotkeys, cfg->topic_hotkeys_partitions, true};
    }
    return n;
}

/* Whether the broker's metadata lists every topic of specs with partitions and no error. All
 * topics are asked for, not the ones named: naming a topic that is missing could create it on a
 * broker that creates topics on use. */
static bool all_listed(rd_kafka_t *rk, const topic_spec_t *specs, size_t n, int timeout_ms)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return false;
    }
    size_t listed = 0;
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < md->topic_cnt; t++) {
            const rd_kafka_metadata_topic_t *mt = &md->topics[t];
            if (strcmp(mt->topic, specs[i].name) == 0 && !mt->err && mt->partition_cnt > 0) {
                listed++;
                break;
            }
        }
    }
    rd_kafka_metadata_destroy(md);
    return listed == n;
}

/* CreateTopics returns once the controller has the topics; a broker's metadata may show them a
 * moment later (KRaft brokers apply the controller's log asynchronously), and a command run
 * right after init (a stage, a producer, a script's topic listing) must find them. */
static hc_err_t wait_listed(rd_kafka_t *rk, const topic_spec_t *specs, size_t n,
                            int64_t deadline_ms, char *errstr, size_t errstr_size)
{
    for (;;) {
        int64_t left = deadline_ms - hc_now_ms();
        if (all_listed(rk, specs, n, left < 1000 ? (left > 100 ? (int)left : 100) : 1000)) {
            return HC_OK;
        }
        if (hc_now_ms() >= deadline_ms) {
            hc_errstr_set(errstr, errstr_size,
                          "the topics were created but the broker's metadata does not list them "
                          "all yet");
            return HC_ERR_TRANSIENT;
        }
        hc_sleep_ms(100);
    }
}

hc_err_t hc_admin_create_topics(const hc_config_t *cfg, int timeout_ms, char *errstr,
                                size_t errstr_size)
{
    int64_t deadline_ms = hc_now_ms() + timeout_ms;
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_ADMIN, NULL, errstr, errstr_size);
    if (!rk) {
        return HC_ERR_INVALID;
    }
    topic_spec_t specs[MAX_TOPICS];
    size_t n = topic_specs(cfg, specs);
    rd_kafka_NewTopic_t *topics[MAX_TOPICS] = {NULL};
    hc_err_t err = HC_OK;
    char rderr[256];
    for (size_t i = 0; i < n; i++) {
        topics[i] = rd_kafka_NewTopic_new(specs[i].name, specs[i].partitions,
                                          cfg->topic_replication_factor, rderr, sizeof(rderr));
        if (!topics[i]) {
            hc_errstr_set(errstr, errstr_size, "topic %s: %s", specs[i].name, rderr);
            err = HC_ERR_INVALID;
            goto done;
        }
        if (specs[i].compacted) {
            rd_kafka_NewTopic_set_config(topics[i], "cleanup.policy", "compact");
        }
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *aopts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(aopts, timeout_ms, rderr, sizeof(rderr));
    rd_kafka_AdminOptions_set_operation_timeout(aopts, timeout_ms, rderr, sizeof(rderr));
    rd_kafka_CreateTopics(rk, topics, n, aopts, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 5000);
    if (!ev) {
        hc_errstr_set(errstr, errstr_size, "no answer from %s within %d ms", cfg->brokers,
                      timeout_ms);
        err = HC_ERR_TRANSIENT;
    } else if (rd_kafka_event_error(ev)) {
        hc_errstr_set(errstr, errstr_size, "create topics: %s", rd_kafka_event_error_string(ev));
        err = rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__TIMED_OUT ? HC_ERR_TRANSIENT
                                                                       : HC_ERR_FATAL;
    } else {
        size_t cnt;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &cnt);
        for (size_t i = 0; i < cnt; i++) {
            rd_kafka_resp_err_t terr = rd_kafka_topic_result_error(res[i]);
            const char *name = rd_kafka_topic_result_name(res[i]);
            if (terr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
                hc_log(HC_LOG_INFO, "init", "topic %s exists already", name);
            } else if (terr) {
                hc_errstr_set(errstr, errstr_size, "topic %s: %s", name,
                              rd_kafka_topic_result_error_string(res[i]));
                err = HC_ERR_FATAL;
            } else {
                hc_log(HC_LOG_INFO, "init", "created topic %s", name);
            }
        }
    }
    if (ev) {
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_AdminOptions_destroy(aopts);
    rd_kafka_queue_destroy(q);
    if (err == HC_OK) {
        err = wait_listed(rk, specs, n, deadline_ms, errstr, errstr_size);
    }
done:
    for (size_t i = 0; i < n; i++) {
        if (topics[i]) {
            rd_kafka_NewTopic_destroy(topics[i]);
        }
    }
    rd_kafka_destroy(rk);
    return err;
}

hc_err_t hc_mock_start(hc_mock_t *mock, const hc_config_t *cfg, int brokers, char *errstr,
                       size_t errstr_size)
{
    memset(mock, 0, sizeof(*mock));
    char rderr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* The host handle never connects anywhere, it only owns the cluster's threads: keep its
     * "no bootstrap.servers" notice out of the user's terminal. */
    rd_kafka_conf_set(conf, "log_level", "4", rderr, sizeof(rderr));
    mock->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, rderr, sizeof(rderr));
    if (!mock->rk) {
        rd_kafka_conf_destroy(conf);
        hc_errstr_set(errstr, errstr_size, "mock cluster host: %s", rderr);
        return HC_ERR_FATAL;
    }
    mock->mcluster = rd_kafka_mock_cluster_new(mock->rk, brokers);
    if (!mock->mcluster) {
        hc_errstr_set(errstr, errstr_size, "could not start the mock cluster");
        hc_mock_stop(mock);
        return HC_ERR_FATAL;
    }
    mock->bootstraps = rd_kafka_mock_cluster_bootstraps(mock->mcluster);
    topic_spec_t specs[MAX_TOPICS];
    size_t n = topic_specs(cfg, specs);
    for (size_t i = 0; i < n; i++) {
        rd_kafka_resp_err_t err =
            rd_kafka_mock_topic_create(mock->mcluster, specs[i].name, specs[i].partitions, 1);
        if (err) {
            hc_errstr_set(errstr, errstr_size, "mock topic %s: %s", specs[i].name,
                          rd_kafka_err2str(err));
            hc_mock_stop(mock);
            return HC_ERR_FATAL;
        }
    }
    return HC_OK;
}

void hc_mock_stop(hc_mock_t *mock)
{
    if (mock->mcluster) {
        rd_kafka_mock_cluster_destroy(mock->mcluster);
    }
    if (mock->rk) {
        rd_kafka_destroy(mock->rk);
    }
    memset(mock, 0, sizeof(*mock));
}
