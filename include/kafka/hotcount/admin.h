/* Layer: kafka. Topic creation for `hotcount init` (Kafka Admin API), and the in-process mock
 * cluster that the demo, `hotcount mock-broker` and the fast tests run on. */
#ifndef HOTCOUNT_ADMIN_H
#define HOTCOUNT_ADMIN_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "hotcount/config.h"
#include "hotcount/err.h"

/* Creates topic.raw, topic.partials, topic.dlq and, when set, topic.counts (compacted),
 * topic.manifest and topic.hotkeys (compacted) with the configured partitions and replication
 * factor. A topic that exists already is left as it is (reported through the log if its
 * partition count differs). Returns once the broker's metadata lists every one of them, so that
 * what runs next finds them.
 * HC_ERR_TRANSIENT when the cluster cannot be reached, or does not list the topics, within
 * timeout_ms. */
hc_err_t hc_admin_create_topics(const hc_config_t *cfg, int timeout_ms, char *errstr,
                                size_t errstr_size);

/* librdkafka's mock cluster: real TCP listeners on 127.0.0.1, owned by a private client
 * handle. It does not implement CreateTopics, so hc_mock_start creates hotcount's topics with
 * the configured partition counts itself. */
typedef struct hc_mock {
    rd_kafka_t *rk;                    /* owned: the handle the cluster lives in */
    rd_kafka_mock_cluster_t *mcluster; /* owned by rk */
    const char *bootstraps;            /* "127.0.0.1:port,..." valid while the mock lives */
} hc_mock_t;

hc_err_t hc_mock_start(hc_mock_t *mock, const hc_config_t *cfg, int brokers, char *errstr,
                       size_t errstr_size);
void hc_mock_stop(hc_mock_t *mock);

#endif
