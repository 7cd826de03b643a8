#include "hotcount/kafka.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hotcount/log.h"

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    /* syslog levels: 0-3 error, 4 warning, 5-6 notice/info, 7 debug */
    hc_log_level_t lvl = level <= 3   ? HC_LOG_ERROR
                         : level == 4 ? HC_LOG_WARN
                         : level <= 6 ? HC_LOG_INFO
                                      : HC_LOG_DEBUG;
    hc_log(lvl, "rdkafka", "%s: %s", fac, buf);
}

/* Errors arriving through error_cb are mostly transient (broker down, transport): librdkafka
 * retries them itself. Fatal ones are picked up by hc_kafka_fatal_check in the stage loops. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    hc_log(err == RD_KAFKA_RESP_ERR__FATAL ? HC_LOG_ERROR : HC_LOG_WARN, "rdkafka", "%s: %s: %s",
           rd_kafka_name(rk), rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

typedef struct prop {
    const char *name;
    const char *value;
} prop_t;

static bool conf_set(rd_kafka_conf_t *conf, const char *shown, const char *name, const char *value,
                     char *errstr, size_t errstr_size)
{
    char rderr[256];
    if (rd_kafka_conf_set(conf, name, value, rderr, sizeof(rderr)) != RD_KAFKA_CONF_OK) {
        hc_errstr_set(errstr, errstr_size, "%s: %s", shown, rderr);
        return false;
    }
    return true;
}

/* hotcount's settings per role; the user's kafka.* props are applied after them. */
static const prop_t stage1_consumer_props[] = {
    /* offsets travel inside stage 1's transaction, never through the consumer */
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "earliest"},
    /* eager assignors only: cooperative-sticky can resume from stale positions in 2.0.2 */
    {"partition.assignment.strategy", "range"},
    {"isolation.level", "read_committed"},
    /* consumer lag per partition for the metrics endpoint */
    {"statistics.interval.ms", "5000"},
    /* The pre-fetch queue is bounded by bytes (queued.max.messages.kbytes, 64 MiB), not by
     * count: in librdkafka 2.0.2 the count is of the whole assignment's queue, and crossing it
     * stops fetching for a fixed second. Stage 1 lets the queue fill while it commits a window,
     * so at the default (100 000) it fetched about 200 000 events a second whatever its speed.
     * Stage 2 keeps the default: a third as many messages, and its memory is per live key. */
    {"queued.min.messages", "10000000"}, /* librdkafka's maximum */
    {NULL, NULL},
};

#ifdef HC_MUTANT_READ_UNCOMMITTED
#define STAGE2_ISOLATION "read_uncommitted" /* mutant build (tests/faults/mutants.sh) */
#else
#define STAGE2_ISOLATION "read_committed"
#endif

static const prop_t stage2_consumer_props[] = {
    /* offsets live in the store, in the same atomic step as the counts */
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "earliest"},
    {"partition.assignment.strategy", "range"},
    /* only committed stage-1 transactions: an aborted window's partials are never counted */
    {"isolation.level", STAGE2_ISOLATION},
    {"statistics.interval.ms", "5000"},
    {NULL, NULL},
};

static const prop_t reader_props[] = {
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"isolation.level", "read_committed"},
    {"enable.partition.eof", "true"},
    {NULL, NULL},
};

static const prop_t txn_producer_props[] = {
    /* a stalled window must abort well before the broker's transaction.max.timeout.ms */
    {"transaction.timeout.ms", "60000"},
    /* must stay below transaction.timeout.ms */
    {"message.timeout.ms", "50000"},
    {"linger.ms", "5"},
    {NULL, NULL},
};

static const prop_t producer_props[] = {
    {"enable.idempotence", "true"},
    {"linger.ms", "5"},
    {"batch.num.messages", "10000"},
    {"queue.buffering.max.messages", "1000000"},
    {NULL, NULL},
};

static const prop_t *role_props(hc_kafka_role_t role)
{
    switch (role) {
    case HC_KAFKA_ROLE_STAGE1_CONSUMER:
        return stage1_consumer_props;
    case HC_KAFKA_ROLE_STAGE2_CONSUMER:
        return stage2_consumer_props;
    case HC_KAFKA_ROLE_TXN_PRODUCER:
        return txn_producer_props;
    case HC_KAFKA_ROLE_PRODUCER:
        return producer_props;
    case HC_KAFKA_ROLE_READER:
        return reader_props;
    case HC_KAFKA_ROLE_ADMIN:
        break;
    }
    static const prop_t none[] = {{NULL, NULL}};
    return none;
}

static bool role_is_consumer(hc_kafka_role_t role)
{
    return role == HC_KAFKA_ROLE_STAGE1_CONSUMER || role == HC_KAFKA_ROLE_STAGE2_CONSUMER ||
           role == HC_KAFKA_ROLE_READER;
}

static bool apply_user_props(rd_kafka_conf_t *conf, const hc_config_t *cfg, hc_kafka_scope_t scope,
                             char *errstr, size_t errstr_size)
{
    static const char *const prefix[] = {"kafka.", "kafka.consumer.", "kafka.producer."};
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];
        if (kp->scope != scope) {
            continue;
        }
        char shown[300];
        snprintf(shown, sizeof(shown), "%s%s", prefix[scope], kp->name);
        if (!conf_set(conf, shown, kp->name, kp->value, errstr, errstr_size)) {
            return false;
        }
    }
    return true;
}

/* offline: no bootstrap servers, so the client is built and checked but never connects. */
static rd_kafka_t *kafka_new(const hc_config_t *cfg, hc_kafka_role_t role,
                             const hc_kafka_opts_t *opts, bool offline, char *errstr,
                             size_t errstr_size)
{
    static const hc_kafka_opts_t no_opts = {0};
    if (!opts) {
        opts = &no_opts;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (!conf_set(conf, "brokers", "bootstrap.servers", cfg->brokers, errstr, errstr_size)) {
        goto fail_conf;
    }
    char client_id[256];
    snprintf(client_id, sizeof(client_id), "hotcount-%s", cfg->instance_id);
    if (!conf_set(conf, "instance.id", "client.id", client_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    for (const prop_t *p = role_props(role); p->name; p++) {
        if (!conf_set(conf, p->name, p->name, p->value, errstr, errstr_size)) {
            goto fail_conf;
        }
    }
    /* librdkafka's consumer API (assign, poll) needs a group id even when it never joins or
     * commits, as a reader doesn't. */
    char reader_group[300];
    const char *group_id = opts->group_id;
    if (!group_id && role == HC_KAFKA_ROLE_READER) {
        snprintf(reader_group, sizeof(reader_group), "hotcount-reader-%s", cfg->instance_id);
        group_id = reader_group;
    }
    if (group_id && !conf_set(conf, "group.id", "group.id", group_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    if (opts->transactional_id && !conf_set(conf, "instance.id", "transactional.id",
                                            opts->transactional_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    bool consumer = role_is_consumer(role);
    if (!apply_user_props(conf, cfg, HC_KAFKA_ALL, errstr, errstr_size) ||
        !apply_user_props(conf, cfg, consumer ? HC_KAFKA_CONSUMER : HC_KAFKA_PRODUCER, errstr,
                          errstr_size)) {
        goto fail_conf;
    }
    if (opts->rebalance_cb) {
        rd_kafka_conf_set_rebalance_cb(conf, opts->rebalance_cb);
    }
    if (opts->dr_msg_cb) {
        rd_kafka_conf_set_dr_msg_cb(conf, opts->dr_msg_cb);
    }
    if (opts->stats_cb) {
        rd_kafka_conf_set_stats_cb(conf, opts->stats_cb);
    }
    rd_kafka_conf_set_opaque(conf, opts->opaque);
    if (offline && !conf_set(conf, "brokers", "bootstrap.servers", "", errstr, errstr_size)) {
        goto fail_conf;
    }

    char rderr[512];
    rd_kafka_t *rk =
        rd_kafka_new(consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, rderr, sizeof(rderr));
    if (!rk) {
        hc_errstr_set(errstr, errstr_size, "kafka client: %s", rderr);
        goto fail_conf;
    }
    if (consumer) {
        rd_kafka_poll_set_consumer(rk);
    }
    return rk;

fail_conf:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

rd_kafka_t *hc_kafka_new(const hc_config_t *cfg, hc_kafka_role_t role, const hc_kafka_opts_t *opts,
                         char *errstr, size_t errstr_size)
{
    return kafka_new(cfg, role, opts, false, errstr, errstr_size);
}

hc_err_t hc_kafka_check(const hc_config_t *cfg, const hc_kafka_role_t *roles, size_t count,
                        char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < count; i++) {
        /* ids as the stages set them, so transactional checks run too */
        hc_kafka_opts_t opts = {
            .group_id =
                roles[i] == HC_KAFKA_ROLE_STAGE2_CONSUMER ? cfg->group_stage2 : cfg->group_stage1,
            .transactional_id = roles[i] == HC_KAFKA_ROLE_TXN_PRODUCER ? cfg->instance_id : NULL};
        rd_kafka_t *rk = kafka_new(cfg, roles[i], &opts, true, errstr, errstr_size);
        if (!rk) {
            return HC_ERR_INVALID;
        }
        rd_kafka_destroy(rk);
    }
    return HC_OK;
}

hc_err_t hc_kafka_error_take(rd_kafka_error_t *error, char *errstr, size_t errstr_size)
{
    if (!error) {
        return HC_OK;
    }
    hc_err_t err;
    if (rd_kafka_error_is_fatal(error)) {
        err = HC_ERR_FATAL;
    } else if (rd_kafka_error_txn_requires_abort(error)) {
        err = HC_ERR_ABORT;
    } else if (rd_kafka_error_is_retriable(error)) {
        err = HC_ERR_TRANSIENT;
    } else {
        /* librdkafka's transaction docs: an error with none of the flags is to be treated
         * as fatal */
        err = HC_ERR_FATAL;
    }
    hc_errstr_set(errstr, errstr_size, "%s: %s", rd_kafka_error_name(error),
                  rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
    return err;
}

bool hc_kafka_may_reassign(rd_kafka_t *rk)
{
    return !rd_kafka_assignment_lost(rk);
}

hc_err_t hc_kafka_fatal_check(rd_kafka_t *rk, char *errstr, size_t errstr_size)
{
    char reason[512];
    rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk, reason, sizeof(reason));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size, "%s: %s", rd_kafka_err2name(err), reason);
    return HC_ERR_FATAL;
}
