/* Layer: base. Every timeout, retry bound and back-off of the stages, derived once.
 *
 * Built at start-up from the configuration and the clients' effective settings (a user's
 * kafka.producer.transaction.timeout.ms counts, not only hotcount's default), checked as a whole,
 * and logged once when a stage starts. The stages, the store backends and the watchdog read
 * their bounds from here and from nowhere else, so the relations below hold by construction:
 *
 *   2 x flush_ms <= txn_timeout_ms            a window commits before the coordinator aborts it
 *                                             (the other half for the commit and a late start)
 *   message_timeout_ms < txn_timeout_ms       librdkafka's own rule for transactional producers
 *   longest_call_ms < watchdog_ms             a stage that waits on a bounded call is not stuck
 *   longest_call_ms < max.poll.interval.ms    nor dropped from its consumer group
 *
 * where longest_call_ms is the longest single blocking step a stage loop can take: one
 * transactional call, a committed-offset read with all its retries and back-offs, one store
 * batch (statement bound x statements per batch) and, with topic.counts, the changelog
 * transaction that follows it, a changelog repair (an idle topic read and two transactions),
 * a drain. Every retry loop is bounded by an
 * attempt count and backs off between attempts (backoff_min_ms doubling up to backoff_max_ms).
 *
 * Plain data: filled by hc_timeouts_derive, read-only (any thread) afterwards. */
#ifndef HOTCOUNT_TIMEOUTS_H
#define HOTCOUNT_TIMEOUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

struct hc_config;

typedef struct hc_timeouts {
    int64_t flush_ms;           /* flush.ms: a window's length */
    int64_t txn_timeout_ms;     /* the transactional producer's transaction.timeout.ms */
    int64_t message_timeout_ms; /* the producers' message.timeout.ms */
    int64_t txn_call_ms;        /* bound on one init/send_offsets/commit/abort call */
    int txn_init_attempts;      /* init_transactions tries before the stage gives up */
    int64_t committed_read_ms;  /* bound on one rd_kafka_committed call (stage 1's rewind) */
    int committed_read_attempts;
    int64_t backoff_min_ms;         /* first pause of every retry loop, doubling ... */
    int64_t backoff_max_ms;         /* ... up to this */
    int64_t drain_ms;               /* changelog/producer drain at a revoke or at shutdown */
    int64_t topic_read_idle_ms;     /* a topic read gives up after this long without a message */
    int64_t store_connect_ms;       /* a store connection attempt */
    int64_t store_statement_ms;     /* one store statement or command */
    int store_statements_per_batch; /* most statements one store batch issues */
    int64_t store_batch_ms;  /* store_statement_ms x store_statements_per_batch, capped at 90 s:
                                the backends hold every statement of one batch to this deadline */
    int64_t longest_call_ms; /* the longest blocking step of a stage loop (see above) */
    int64_t watchdog_ms;     /* watchdog.ms; 0 = off */
    /* Additions: */
    bool derived; /* set by hc_timeouts_derive: a zeroed hc_config_t built by hand has none */
    int64_t committed_read_total_ms;   /* every committed-read attempt and the back-offs between */
    int64_t store_server_statement_ms; /* PostgreSQL's statement_timeout (below the client's
                                          store_statement_ms, so the server's fires first) */
    /* one counts-changelog transaction that fails late: its blocking calls (init, flush,
     * send_offsets, commit, abort) at drain_ms each; 0 when topic.counts is off */
    int64_t changelog_txn_ms;
    /* partition.progress.ms, or derived: 5 x flush_ms + store_batch_ms + changelog_txn_ms +
     * 2 x backoff_max_ms (a few windows, the longest batch and its changelog transaction, and
     * the back-off around it): an assigned partition with input waiting that commits nothing
     * this long stands still (hotcount/progress.h) */
    int64_t partition_progress_ms;
} hc_timeouts_t;

/* Kafka's broker default for transaction.max.timeout.ms: a transactional producer asking for a
 * longer transaction.timeout.ms is refused by such a broker at init_transactions. */
#define HC_TIMEOUTS_BROKER_TXN_MAX_MS 900000

/* topic_read_idle_ms, which depends on no key: also the bound of the commands' topic reads,
 * which have no stage configuration at hand (hc_topic_read_ranges). */
#define HC_TIMEOUTS_TOPIC_READ_IDLE_MS 30000

/* Derives t from cfg (flush.ms, watchdog.ms, store, max.keys, the kafka.* overrides of the
 * producer's transaction.timeout.ms and message.timeout.ms, the consumers'
 * max.poll.interval.ms, which the longest call must also stay below)
 * and checks the relations above. HC_ERR_INVALID with errstr naming the keys and the reason
 * ("flush.ms=3600000 must be at most half of transaction.timeout.ms=60000: ..."). On error t still
 * holds every value that could be derived (a kafka.* timeout that is not an integer leaves its
 * default), so hc_config_t's copy is never garbage. */
hc_err_t hc_timeouts_derive(const struct hc_config *cfg, hc_timeouts_t *t, char *errstr,
                            size_t errstr_size);

/* cfg's timeouts: &cfg->timeouts, or, for a configuration built by hand without hc_config_init
 * (some tests), the ones derived from it into *scratch (relations unchecked). */
const hc_timeouts_t *hc_timeouts_of(const struct hc_config *cfg, hc_timeouts_t *scratch);

/* The next pause of a retry loop: backoff_min_ms doubled per attempt (0-based), capped at
 * backoff_max_ms. */
int64_t hc_timeouts_backoff_ms(const hc_timeouts_t *t, int attempt);

/* One INFO line (area "timeouts") with every field, for a stage's start. */
void hc_timeouts_log(const hc_timeouts_t *t);

#endif
