/* Layer: kafka. librdkafka clients built from hotcount's configuration, and the one place that
 * reads rd_kafka_error_t.
 *
 * Client properties are applied in this order, later winning: hotcount's own settings for the
 * role (src/kafka/kafka.c says why each is there), then the user's kafka.* props (each only to
 * the kind of client that reads it, so librdkafka never warns about a property it ignores),
 * then kafka.consumer.* / kafka.producer.*. The settings exactly-once depends on (isolation
 * level, auto commit and offset store, auto.offset.reset, transactional id, idempotence and
 * acks, the eager assignor, group ids, partition EOF, delivery reports) are hotcount's: an
 * override of any of them is refused (hc_kafka_check_overrides). The stage consumers' group
 * protocol is the group.protocol key's (classic: the eager range assignor; consumer: KIP-848,
 * no assignor, the classic session settings refused) and their group.instance.id group.static's.
 * The transactional producer's transaction.timeout.ms and message.timeout.ms are cfg->timeouts'
 * (hotcount/timeouts.h).
 *
 * librdkafka's log lines are routed into hc_log (area "rdkafka"). */
#ifndef HOTCOUNT_KAFKA_H
#define HOTCOUNT_KAFKA_H

#include <stdbool.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "hotcount/config.h"
#include "hotcount/dead_letter.h"
#include "hotcount/err.h"

/* Which client a stage or command needs. */
typedef enum hc_kafka_role {
    HC_KAFKA_ROLE_STAGE1_CONSUMER, /* likes.raw, manual offsets, group.protocol's rebalancing */
    HC_KAFKA_ROLE_STAGE2_CONSUMER, /* likes.partials, read_committed, offsets from the store */
    HC_KAFKA_ROLE_TXN_PRODUCER,    /* stage 1's transactional producer */
    HC_KAFKA_ROLE_PRODUCER,        /* load generator / changelog: idempotent, acks=all */
    HC_KAFKA_ROLE_READER,          /* verify, tests: no group, read_committed, no commits */
    HC_KAFKA_ROLE_ADMIN,           /* init */
} hc_kafka_role_t;

/* A rebalance callback, as librdkafka calls it. */
typedef void (*hc_kafka_rebalance_fn)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                      rd_kafka_topic_partition_list_t *partitions, void *opaque);

typedef struct hc_kafka_opts {
    const char *group_id;         /* consumers with a group */
    const char *transactional_id; /* HC_KAFKA_ROLE_TXN_PRODUCER */
    /* the stage consumers' group.instance.id (static membership, group.static=1); NULL: none */
    const char *group_instance_id;
    /* Called from rd_kafka_consumer_poll on the polling thread; opaque is passed back. */
    hc_kafka_rebalance_fn rebalance_cb;
    void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *rkmessage, void *opaque);
    /* librdkafka statistics (JSON), every statistics.interval.ms; returns 0 (librdkafka then
     * frees json). Called from the thread that serves the main queue: the consumer's polling
     * thread, or with own_main_queue the hc_kafka_main_queue thread. */
    int (*stats_cb)(rd_kafka_t *rk, char *json, size_t json_len, void *opaque);
    void *opaque;
    /* Consumers: keep the main queue (statistics, error callbacks) apart from the message
     * queue; the caller serves it with hc_kafka_main_queue_start. */
    bool own_main_queue;
} hc_kafka_opts_t;

/* A thread that serves a consumer's main queue (rd_kafka_poll), so its statistics and error
 * callbacks run while the consumer's own thread is busy or behind: forwarded to the message
 * queue, a statistics report waits behind every message fetched before it (src/kafka/
 * main_queue.c). For a consumer made with own_main_queue; the callbacks must be thread-safe.
 * Start after hc_kafka_new; stop (joins, within 100 ms) before the consumer is destroyed.
 * NULL: out of memory or threads. */
typedef struct hc_kafka_main_queue hc_kafka_main_queue_t;
hc_kafka_main_queue_t *hc_kafka_main_queue_start(rd_kafka_t *rk);
void hc_kafka_main_queue_stop(hc_kafka_main_queue_t *mq); /* NULL: nothing */

/* Creates a client for the role. Returns NULL with errstr naming the bad property (a user's
 * kafka.* key is reported as written, e.g. "kafka.consumer.fetch.max.bytes"). For consumers
 * rd_kafka_poll_set_consumer() is already called (rd_kafka_consumer_poll serves the callbacks
 * too), unless opts->own_main_queue. */
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

/* hc_kafka_error_take for a transactional producer's call: an abortable error while the
 * producer has a fatal error is HC_ERR_FATAL. A fenced producer's failed produce can reach a
 * commit as abortable ("message(s) failed") before librdkafka raises its fatal error, and a
 * fatal producer can abort nothing. */
hc_err_t hc_kafka_txn_error_take(rd_kafka_t *producer, rd_kafka_error_t *error, char *errstr,
                                 size_t errstr_size);

/* The largest message the client will send: its message.max.bytes as librdkafka applies it
 * (kafka.message.max.bytes, kafka.producer.message.max.bytes or librdkafka's default). A
 * message whose key, value and headers with the record's framing exceed it is refused with
 * MSG_SIZE_TOO_LARGE. Any thread. */
int64_t hc_kafka_max_message_bytes(rd_kafka_t *rk);

/* True when the transactional producer rk has a fatal error that says its transaction is in a
 * state the coordinator no longer accepts (INVALID_TXN_STATE, the producer id unknown or its
 * mapping gone), not that another producer took its transactional.id (fenced) or that it is
 * refused for good (authorization, configuration): a new producer with the same id recovers,
 * and its init_transactions settles what the old one left open. Any thread. */
bool hc_kafka_fatal_renewable(rd_kafka_t *rk);

/* rd_kafka_fatal_error() as an hc_err_t: HC_ERR_FATAL with the reason, or HC_OK. */
hc_err_t hc_kafka_fatal_check(rd_kafka_t *rk, char *errstr, size_t errstr_size);

/* How many authentication or TLS handshake failures (RD_KAFKA_RESP_ERR__AUTHENTICATION,
 * RD_KAFKA_RESP_ERR__SSL in the error callback) the Kafka clients of this process have reported
 * so far; when any, errstr gets the last one: "Kafka broker <broker>: authentication failed:
 * <librdkafka's reason>" (or "TLS handshake failed: ..."), every secret of the client blanked
 * out. librdkafka keeps retrying such a broker; a caller compares the count with one it saw
 * before to tell a new failure. Any thread. */
uint64_t hc_kafka_auth_failures(char *errstr, size_t errstr_size);

/* Whether a consumer may re-assign its partitions now (to rewind them, or to re-read them from
 * stored offsets): not while the group has taken the assignment away after a session timeout
 * and the revoke is still to come. librdkafka 2.0.2 stops lost partitions itself, and an assign
 * racing that stop trips its assertion (rktp_started; seen in about 1 of 10 broker-outage and
 * SIGSTOP runs). Still needed on 2.14.2: no release up to 2.15.0 lists a fix, and
 * rd_kafka_assignment_partition_stopped asserts rktp_started unchanged. A caller told no
 * re-assigns at the next assignment instead, and trusts no message fetched until then. */
bool hc_kafka_may_reassign(rd_kafka_t *rk);

/* Whether cfg's stage consumers use the consumer group protocol of KIP-848
 * (group.protocol=consumer): the broker assigns, rebalances are incremental, and the classic
 * protocol's settings (session.timeout.ms, heartbeat.interval.ms,
 * partition.assignment.strategy, group.protocol.type) are refused. */
bool hc_kafka_group_protocol_is_consumer(const hc_config_t *cfg);

/* Whether rk's group hands out increments (rd_kafka_rebalance_protocol() "COOPERATIVE": the
 * consumer protocol, or a cooperative assignor): a rebalance callback's list is what is added
 * or taken away, not the whole assignment. "EAGER" and "NONE" (not joined yet): false. */
bool hc_kafka_is_incremental(rd_kafka_t *rk);

/* The assignment calls of a rebalance callback for either kind of rebalance. add: the
 * increment (incremental) or the new whole assignment (eager; offsets in the list are where
 * fetching starts). remove: the revoked increment, or everything (eager). HC_ERR_FATAL with
 * errstr when librdkafka refuses. Consumer's polling thread. */
hc_err_t hc_kafka_assign_add(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions,
                             char *errstr, size_t errstr_size);
hc_err_t hc_kafka_assign_remove(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions,
                                char *errstr, size_t errstr_size);

/* Moves the fetch positions of `partitions` (all of them assigned) to their offsets in the
 * list, dropping whatever was fetched beyond: a seek (bounded by timeout_ms) under either
 * protocol, where a negative offset other than RD_KAFKA_OFFSET_BEGINNING is rewritten to it in
 * the list. HC_ERR_FATAL with errstr on failure. Polling thread. */
hc_err_t hc_kafka_reposition(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions,
                             int timeout_ms, char *errstr, size_t errstr_size);

/* Closes a group consumer (leaves the group; the last revoke is served from inside, on the
 * calling thread, by `rebalance` with `opaque`: the consumer's own rebalance callback) but
 * waits at most timeout_ms: a LeaveGroup queued behind a JoinGroup that the broker
 * holds (a member that does not answer) would otherwise block rd_kafka_consumer_close for the
 * whole rebalance. Returns whether the close finished; pass that to hc_kafka_consumer_destroy. */
bool hc_kafka_consumer_close_bounded(rd_kafka_t *rk, int64_t timeout_ms,
                                     hc_kafka_rebalance_fn rebalance, void *opaque);

/* Destroys a group consumer (NULL: nothing). abandoned: hc_kafka_consumer_close_bounded gave
 * up on its close; then rk is not destroyed at all (librdkafka's destroy would wait for the
 * close it began, without a bound), only left for the process exit, and the group times the
 * member out. Call it only when the process is about to end. */
void hc_kafka_consumer_destroy(rd_kafka_t *rk, bool abandoned);

/* Destroys a HC_KAFKA_ROLE_READER client (NULL: nothing). A reader joins no group, so it skips
 * the consumer close that rd_kafka_destroy would run: that close waits on the brokers (seen
 * hanging past any bound against the mock cluster), and a command must end when it is done. */
void hc_kafka_reader_destroy(rd_kafka_t *rk);

/* A dead letter's headers (hc_dead_letter_headers, hotcount/dead_letter.h, with the same
 * arguments) as librdkafka's. The caller owns the result and hands it to the producer (which
 * takes it on success) or destroys it. */
rd_kafka_headers_t *hc_kafka_dead_letter_headers(const char *reason, const char *source,
                                                 const void *mark, size_t mark_len,
                                                 size_t value_len, size_t sent_value,
                                                 size_t key_len, size_t sent_key);

#endif
