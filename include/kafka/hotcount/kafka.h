/* Layer: kafka. librdkafka clients built from hotcount's configuration, and the one place that
 * reads rd_kafka_error_t.
 *
 * Client properties are applied in this order, later winning: hotcount's own settings for the
 * role (src/kafka/kafka.c says why each is there), then the user's kafka.* props (each only to
 * the kind of client that reads it, so librdkafka never warns about a property it ignores),
 * then kafka.consumer.* / kafka.producer.*. The settings exactly-once depends on (isolation
 * level, auto commit and offset store, auto.offset.reset, transactional id, idempotence and
 * acks, the eager assignor, group ids, partition EOF, delivery reports) are hotcount's: an
 * override of any of them is refused (hc_kafka_check_overrides). The transactional producer's
 * transaction.timeout.ms and message.timeout.ms are cfg->timeouts' (hotcount/timeouts.h).
 *
 * librdkafka's log lines are routed into hc_log (area "rdkafka"). */
#ifndef HOTCOUNT_KAFKA_H
#define HOTCOUNT_KAFKA_H

#include <stdbool.h>

#include <librdkafka/rdkafka.h>

#include "hotcount/config.h"
#include "hotcount/err.h"

/* Which client a stage or command needs. */
typedef enum hc_kafka_role {
    HC_KAFKA_ROLE_STAGE1_CONSUMER, /* likes.raw, manual offsets, eager assignor */
    HC_KAFKA_ROLE_STAGE2_CONSUMER, /* likes.partials, read_committed, offsets from the store */
    HC_KAFKA_ROLE_TXN_PRODUCER,    /* stage 1's transactional producer */
    HC_KAFKA_ROLE_PRODUCER,        /* load generator / changelog: idempotent, acks=all */
    HC_KAFKA_ROLE_READER,          /* verify, tests: no group, read_committed, no commits */
    HC_KAFKA_ROLE_ADMIN,           /* init */
} hc_kafka_role_t;

typedef struct hc_kafka_opts {
    const char *group_id;         /* consumers with a group */
    const char *transactional_id; /* HC_KAFKA_ROLE_TXN_PRODUCER */
    /* Called from rd_kafka_consumer_poll on the polling thread; opaque is passed back. */
    void (*rebalance_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque);
    void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage, void *opaque);
    /* librdkafka statistics (JSON), every statistics.interval.ms; returns 0 (librdkafka then
     * frees json). Called from the polling thread. */
    int (*stats_cb)(rd_kafka_t *rk, char *json, size_t json_len, void *opaque);
    void *opaque;
} hc_kafka_opts_t;

/* Creates a client for the role. Returns NULL with errstr naming the bad property (a user's
 * kafka.* key is reported as written, e.g. "kafka.consumer.fetch.max.bytes"). For consumers,
 * rd_kafka_poll_set_consumer() is already called. */
rd_kafka_t *hc_kafka_new(const hc_config_t *cfg, hc_kafka_role_t role, const hc_kafka_opts_t *opts,
                         char *errstr, size_t errstr_size);

/* Builds each role's client from cfg without connecting anywhere and destroys it again: checks
 * every librdkafka property the way creating the real clients would. HC_ERR_INVALID with
 * errstr naming the bad key. */
hc_err_t hc_kafka_check(const hc_config_t *cfg, const hc_kafka_role_t *roles, size_t count,
                        char *errstr, size_t errstr_size);

/* Refuses kafka.* settings that would break exactly-once (any scope, any value other than the
 * one hotcount sets itself) and kafka.consumer.* / kafka.producer.* properties that the other
 * kind of client reads. HC_ERR_INVALID with errstr naming the key and why; secret values are
 * never quoted. hc_kafka_new and hc_kafka_check run it too. */
hc_err_t hc_kafka_check_overrides(const hc_config_t *cfg, char *errstr, size_t errstr_size);

/* Classifies and destroys a librdkafka error object (NULL -> HC_OK):
 * retriable -> HC_ERR_TRANSIENT, requires abort -> HC_ERR_ABORT, fatal or unflagged ->
 * HC_ERR_FATAL. */
hc_err_t hc_kafka_error_take(rd_kafka_error_t *error, char *errstr, size_t errstr_size);

/* rd_kafka_fatal_error() as an hc_err_t: HC_ERR_FATAL with the reason, or HC_OK. */
hc_err_t hc_kafka_fatal_check(rd_kafka_t *rk, char *errstr, size_t errstr_size);

/* Whether a consumer may re-assign its partitions now (to rewind them, or to re-read them from
 * stored offsets): not while the group has taken the assignment away after a session timeout
 * and the revoke is still to come. librdkafka 2.0.2 stops lost partitions itself, and an assign
 * racing that stop trips its assertion (rktp_started; seen in about 1 of 10 broker-outage and
 * SIGSTOP runs). A caller told no re-assigns at the next assignment instead, and trusts no
 * message fetched until then. */
bool hc_kafka_may_reassign(rd_kafka_t *rk);

/* Destroys a HC_KAFKA_ROLE_READER client (NULL: nothing). A reader joins no group, so it skips
 * the consumer close that rd_kafka_destroy would run: that close waits on the brokers (seen
 * hanging past any bound against the mock cluster), and a command must end when it is done. */
void hc_kafka_reader_destroy(rd_kafka_t *rk);

#endif
