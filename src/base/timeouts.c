/* Every timeout of the stages, derived once from the configuration (see
 * include/base/hotcount/timeouts.h). The constants below are the only place these numbers are
 * written, but for each store backend's own bounds, which its descriptor states
 * (hotcount/store_facts.h, handed in as cfg->stores); the stages, the store backends, the topic
 * reads and the watchdog read the derived structure. */
#include "hotcount/timeouts.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/config.h"
#include "hotcount/log.h"

/* librdkafka's own default is 60 s too; below the broker's transaction.max.timeout.ms (15 min)
 * with room to spare, and long enough for a window of flush.ms plus its commit. */
#define TXN_TIMEOUT_DEFAULT_MS 60000
/* librdkafka requires message.timeout.ms <= transaction.timeout.ms for a transactional producer;
 * five sixths of it (50 s of 60 s) leaves the commit time to fail the window cleanly. */
#define MESSAGE_TIMEOUT_NUM 5
#define MESSAGE_TIMEOUT_DEN 6
#define MESSAGE_TIMEOUT_DEFAULT_MS 50000
/* init_transactions may wait out a previous incarnation's transaction (up to its timeout), so
 * a few attempts of one transaction timeout each; between them the stage backs off and shows
 * progress, so the watchdog sees a bounded wait, not a hang. */
#define TXN_INIT_ATTEMPTS 5
/* A committed-offset read is one round trip to the group coordinator. */
#define COMMITTED_READ_MS 10000
#define COMMITTED_READ_ATTEMPTS 6
/* Every retry loop: 100 ms doubling to 5 s (stage 2's store back-off before the derivation). */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
/* A changelog or producer drain at a revoke or at shutdown; also the bound of each blocking call
 * of the counts changelog's transactions (src/stage/changelog.c). */
#define DRAIN_MS 10000
/* The blocking calls of one changelog transaction that fails late, each bounded by drain_ms:
 * init_transactions (a new producer's first transaction), the flush of its records,
 * send_offsets_to_transaction, commit_transaction, and the abort that follows an abortable
 * commit. Stage 2 runs one after each store batch, in the same step of its loop. */
#define CHANGELOG_TXN_CALLS 5
/* A changelog repair runs two such transactions in one step: the republished totals, then the
 * moved marks (hc_changelog_repair), after its read of the partials topic. */
#define CHANGELOG_REPAIR_TXNS 2
/* One store batch as a whole, every statement included: the backends cut each statement's wait
 * to what is left of it, so a batch of any size is bounded by this. 90 s is 200 times what a
 * million-post batch took on PostgreSQL (0.45 s) and on Redis (about 9 s at 9 us a delta). */
#define STORE_BATCH_MAX_MS 90000
/* partition.progress.ms's default: this many windows plus the longest batch and its back-off */
#define PROGRESS_WINDOWS 5
/* librdkafka's default max.poll.interval.ms: a consumer that does not poll this long leaves its
 * group, so a stage's longest blocking call must stay below it too. */
#define MAX_POLL_INTERVAL_DEFAULT_MS 300000

typedef struct kafka_ms {
    int64_t ms;
    const char *key; /* as the user wrote it, or NULL: hotcount's default */
    char key_buf[96];
} kafka_ms_t;

/* The value one kind of client gets for prop: its own scope (kafka.producer. or
 * kafka.consumer.) wins over kafka., as kafka.c applies them; def when neither is set. */
static hc_err_t client_prop_ms(const hc_config_t *cfg, hc_kafka_scope_t kind, const char *prop,
                               int64_t def, kafka_ms_t *out, char *errstr, size_t errstr_size)
{
    const hc_kafka_prop_t *found = NULL;

    out->ms = def;
    out->key = NULL;
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];

        if (strcmp(kp->name, prop) != 0 || (kp->scope != kind && kp->scope != HC_KAFKA_ALL)) {
            continue;
        }
        if (found == NULL || kp->scope == kind) {
            found = kp;
        }
    }
    if (found == NULL) {
        return HC_OK;
    }
    const char *prefix = found->scope == HC_KAFKA_ALL        ? "kafka."
                         : found->scope == HC_KAFKA_PRODUCER ? "kafka.producer."
                                                             : "kafka.consumer.";
    snprintf(out->key_buf, sizeof(out->key_buf), "%s%s", prefix, prop);
    out->key = out->key_buf;

    char *end;
    errno = 0;
    long long v = strtoll(found->value, &end, 10);
    if (found->value[0] == '\0' || *end != '\0' || errno != 0 || v <= 0) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not a positive number of ms", out->key,
                      found->value);
        return HC_ERR_INVALID;
    }
    out->ms = (int64_t)v;
    return HC_OK;
}

/* The store's bounds, from its backend's facts (hotcount/store_facts.h): this file knows no
 * backend. A store no backend answers to (a hand-built configuration) has none: zero. */
static void derive_store(const hc_config_t *cfg, hc_timeouts_t *t)
{
    const hc_store_facts_t *f = hc_store_facts_find(cfg->stores, cfg->store);
    int64_t keys = cfg->max_keys > 0 ? cfg->max_keys : 1;

    t->store_connect_ms = 0;
    t->store_statement_ms = 0;
    t->store_server_statement_ms = 0;
    t->store_statements_per_batch = 0;
    if (f != NULL) {
        t->store_connect_ms = f->connect_ms;
        t->store_statement_ms = f->statement_ms;
        t->store_server_statement_ms = f->server_statement_ms;
        t->store_statements_per_batch = (int)f->statements_per_batch(keys);
    }
    int64_t all = t->store_statement_ms * t->store_statements_per_batch;
    t->store_batch_ms = all < STORE_BATCH_MAX_MS ? all : STORE_BATCH_MAX_MS;
}

/* The longest blocking step, and which one it is (for the error message). */
static const char *longest_step(const hc_timeouts_t *t, int64_t *ms)
{
    struct {
        const char *what;
        int64_t ms;
    } steps[] = {
        {"one transactional call (transaction.timeout.ms)", t->txn_call_ms},
        {"a committed-offset read with its retries", t->committed_read_total_ms},
        {"a store connection plus one store batch", t->store_connect_ms + t->store_batch_ms},
        {"a store connection, one store batch and its changelog transaction (topic.counts)",
         t->changelog_txn_ms > 0 ? t->store_connect_ms + t->store_batch_ms + t->changelog_txn_ms
                                 : 0},
        {"a changelog repair: an idle topic read and two changelog transactions (topic.counts)",
         t->changelog_txn_ms > 0
             ? t->topic_read_idle_ms + CHANGELOG_REPAIR_TXNS * t->changelog_txn_ms
             : 0},
        {"a changelog drain", t->drain_ms},
        {"an idle topic read", t->topic_read_idle_ms},
    };
    size_t best = 0;
    for (size_t i = 1; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (steps[i].ms > steps[best].ms) {
            best = i;
        }
    }
    *ms = steps[best].ms;
    return steps[best].what;
}

hc_err_t hc_timeouts_derive(const struct hc_config *cfg, hc_timeouts_t *t, char *errstr,
                            size_t errstr_size)
{
    kafka_ms_t txn;
    kafka_ms_t msg;
    kafka_ms_t poll;
    char txn_err[256] = "";
    char msg_err[256] = "";
    char poll_err[256] = "";

    memset(t, 0, sizeof(*t));
    /* Parse errors are reported after everything is filled, so t is never half-built. */
    hc_err_t txn_perr = client_prop_ms(cfg, HC_KAFKA_PRODUCER, "transaction.timeout.ms",
                                       TXN_TIMEOUT_DEFAULT_MS, &txn, txn_err, sizeof(txn_err));
    /* message.timeout.ms follows a user's transaction timeout down, never up */
    int64_t msg_default = txn.ms / MESSAGE_TIMEOUT_DEN * MESSAGE_TIMEOUT_NUM;
    msg_default = msg_default > MESSAGE_TIMEOUT_DEFAULT_MS ? MESSAGE_TIMEOUT_DEFAULT_MS
                  : msg_default < 1                        ? 1
                                                           : msg_default;
    hc_err_t msg_perr = client_prop_ms(cfg, HC_KAFKA_PRODUCER, "message.timeout.ms", msg_default,
                                       &msg, msg_err, sizeof(msg_err));
    hc_err_t poll_perr =
        client_prop_ms(cfg, HC_KAFKA_CONSUMER, "max.poll.interval.ms", MAX_POLL_INTERVAL_DEFAULT_MS,
                       &poll, poll_err, sizeof(poll_err));

    t->flush_ms = cfg->flush_ms;
    t->txn_timeout_ms = txn.ms;
    t->message_timeout_ms = msg.ms;
    /* librdkafka bounds a transactional call given -1 by transaction.timeout.ms */
    t->txn_call_ms = txn.ms;
    t->txn_init_attempts = TXN_INIT_ATTEMPTS;
    t->committed_read_ms = COMMITTED_READ_MS;
    t->committed_read_attempts = COMMITTED_READ_ATTEMPTS;
    t->backoff_min_ms = BACKOFF_MIN_MS;
    t->backoff_max_ms = BACKOFF_MAX_MS;
    t->committed_read_total_ms = t->committed_read_ms * t->committed_read_attempts;
    for (int i = 0; i + 1 < t->committed_read_attempts; i++) {
        t->committed_read_total_ms += hc_timeouts_backoff_ms(t, i);
    }
    t->drain_ms = DRAIN_MS;
    t->changelog_txn_ms =
        cfg->topic_counts != NULL && cfg->topic_counts[0] ? CHANGELOG_TXN_CALLS * t->drain_ms : 0;
    t->topic_read_idle_ms = HC_TIMEOUTS_TOPIC_READ_IDLE_MS;
    derive_store(cfg, t);
    t->watchdog_ms = cfg->watchdog_ms;
    t->partition_progress_ms = cfg->partition_progress_ms > 0
                                   ? cfg->partition_progress_ms
                                   : PROGRESS_WINDOWS * t->flush_ms + t->store_batch_ms +
                                         t->changelog_txn_ms + 2 * t->backoff_max_ms;
    t->derived = true;
    const char *longest = longest_step(t, &t->longest_call_ms);

    if (txn_perr != HC_OK || msg_perr != HC_OK || poll_perr != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s",
                      txn_perr != HC_OK   ? txn_err
                      : msg_perr != HC_OK ? msg_err
                                          : poll_err);
        return HC_ERR_INVALID;
    }
    const char *txn_key = txn.key != NULL ? txn.key : "transaction.timeout.ms";
    const char *txn_src = txn.key != NULL ? "" : " (hotcount's setting for stage 1's producer)";
    /* A window is open flush.ms, then commits; the coordinator aborts a transaction older than
     * transaction.timeout.ms. Half of it for the window leaves the other half to the commit and
     * to a window that starts late on a slow poll. */
    if (t->flush_ms * 2 > t->txn_timeout_ms) {
        char advice[256];
        if (t->flush_ms * 2 > HC_TIMEOUTS_BROKER_TXN_MAX_MS) {
            hc_errstr_set(advice, sizeof(advice),
                          "lower flush.ms: a transaction timeout of %" PRId64
                          " ms would exceed the broker's transaction.max.timeout.ms (%d by "
                          "default)",
                          t->flush_ms * 2, HC_TIMEOUTS_BROKER_TXN_MAX_MS);
        } else {
            hc_errstr_set(advice, sizeof(advice),
                          "lower flush.ms or set kafka.producer.transaction.timeout.ms to at least "
                          "%" PRId64 " (at most the broker's transaction.max.timeout.ms, %d by "
                          "default)",
                          t->flush_ms * 2, HC_TIMEOUTS_BROKER_TXN_MAX_MS);
        }
        hc_errstr_set(errstr, errstr_size,
                      "flush.ms=%" PRId64 " must be at most half of %s=%" PRId64
                      "%s: a stage-1 window stays open flush.ms before it commits, and the "
                      "transaction coordinator aborts a transaction open longer than that; %s",
                      t->flush_ms, txn_key, t->txn_timeout_ms, txn_src, advice);
        return HC_ERR_INVALID;
    }
    if (t->message_timeout_ms >= t->txn_timeout_ms) {
        hc_errstr_set(errstr, errstr_size,
                      "%s=%" PRId64 " must be below %s=%" PRId64
                      ": a transactional producer's messages may not outlive its transaction "
                      "(librdkafka refuses the producer otherwise)",
                      msg.key != NULL ? msg.key : "message.timeout.ms", t->message_timeout_ms,
                      txn_key, t->txn_timeout_ms);
        return HC_ERR_INVALID;
    }
    if (cfg->partition_progress_ms > 0 && t->partition_progress_ms < 3 * t->flush_ms) {
        hc_errstr_set(errstr, errstr_size,
                      "partition.progress.ms=%" PRId64 " must be at least 3 x flush.ms=%" PRId64
                      ": a partition commits once a window at best, so a shorter bound calls "
                      "every partition with input stalled",
                      t->partition_progress_ms, t->flush_ms);
        return HC_ERR_INVALID;
    }
    char txn_from[128];
    snprintf(txn_from, sizeof(txn_from), ", from %s", txn_key);
    if (t->watchdog_ms > 0 && t->longest_call_ms >= t->watchdog_ms) {
        hc_errstr_set(errstr, errstr_size,
                      "watchdog.ms=%" PRId64 " must be above the longest blocking call of a stage, "
                      "%" PRId64 " ms (%s%s): the watchdog would end a stage that is waiting on a "
                      "bounded call, not stuck; raise watchdog.ms (0 turns it off)",
                      t->watchdog_ms, t->longest_call_ms, longest,
                      t->longest_call_ms == t->txn_call_ms && txn.key != NULL ? txn_from : "");
        return HC_ERR_INVALID;
    }
    if (t->longest_call_ms >= poll.ms) {
        hc_errstr_set(errstr, errstr_size,
                      "%s=%" PRId64 " must be above the longest blocking call of a stage, %" PRId64
                      " ms (%s): a consumer that does not poll that long is dropped from its "
                      "group and its partitions move mid-window",
                      poll.key != NULL ? poll.key : "max.poll.interval.ms", poll.ms,
                      t->longest_call_ms, longest);
        return HC_ERR_INVALID;
    }
    return HC_OK;
}

const hc_timeouts_t *hc_timeouts_of(const struct hc_config *cfg, hc_timeouts_t *scratch)
{
    char ignored[8];
    if (cfg->timeouts.derived) {
        return &cfg->timeouts;
    }
    (void)hc_timeouts_derive(cfg, scratch, ignored, sizeof(ignored));
    return scratch;
}

int64_t hc_timeouts_backoff_ms(const hc_timeouts_t *t, int attempt)
{
    int64_t ms = t->backoff_min_ms;
    for (int i = 0; i < attempt && ms < t->backoff_max_ms; i++) {
        ms *= 2;
    }
    return ms < t->backoff_max_ms ? ms : t->backoff_max_ms;
}

void hc_timeouts_log(const hc_timeouts_t *t)
{
    hc_log(HC_LOG_INFO, "timeouts",
           "flush.ms=%" PRId64 " transaction.timeout.ms=%" PRId64 " message.timeout.ms=%" PRId64
           " txn_call=%" PRId64 " ms x %d init attempts, committed_read=%" PRId64
           " ms x %d (%" PRId64 " ms with back-off), backoff=%" PRId64 "..%" PRId64
           " ms, drain=%" PRId64 " ms, changelog_txn=%" PRId64 " ms, topic_read_idle=%" PRId64
           " ms, store: connect=%" PRId64 " ms statement=%" PRId64 " ms x %d = batch %" PRId64
           " ms, longest call=%" PRId64 " ms, watchdog.ms=%" PRId64
           ", partition.progress.ms=%" PRId64,
           t->flush_ms, t->txn_timeout_ms, t->message_timeout_ms, t->txn_call_ms,
           t->txn_init_attempts, t->committed_read_ms, t->committed_read_attempts,
           t->committed_read_total_ms, t->backoff_min_ms, t->backoff_max_ms, t->drain_ms,
           t->changelog_txn_ms, t->topic_read_idle_ms, t->store_connect_ms, t->store_statement_ms,
           t->store_statements_per_batch, t->store_batch_ms, t->longest_call_ms, t->watchdog_ms,
           t->partition_progress_ms);
}
