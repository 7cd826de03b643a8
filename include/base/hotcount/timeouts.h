/* Layer: base. Every timeout, retry bound and back-off of the stages, derived once.
 *
 * Built at start-up from the configuration and the clients' effective settings (a user's
 * kafka.producer.transaction.timeout.ms counts, not only hotcount's default), checked as a whole,
 * and logged once when a stage starts. The stages, the store backends and the watchdog read
 * their bounds from here and from nowhere else, so the relations below hold by construction:
 *
 *   flush_ms < txn_timeout_ms                 a window commits before the coordinator aborts it
 *   message_timeout_ms < txn_timeout_ms       librdkafka's own rule for transactional producers
 *   longest_call_ms < watchdog_ms             a stage that waits on a bounded call is not stuck
 *
 * where longest_call_ms is the longest single blocking step a stage loop can take: one
 * transactional call, a committed-offset read with all its retries and back-offs, one store
 * batch (statement bound x statements per batch), a drain. Every retry loop is bounded by an
 * attempt count and backs off between attempts (backoff_min_ms doubling up to backoff_max_ms).
 *
 * Plain data: filled by hc_timeouts_derive, read-only (any thread) afterwards. */
#ifndef HOTCOUNT_TIMEOUTS_H
#define HOTCOUNT_TIMEOUTS_H

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
    int64_t backoff_min_ms; /* first pause of every retry loop, doubling ... */
    int64_t backoff_max_ms; /* ... up to this */
    int64_t drain_ms;           /* changelog/producer drain at a revoke or at shutdown */
    int64_t topic_read_idle_ms; /* a topic read gives up after this long without a message */
    int64_t store_connect_ms;   /* a store connection attempt */
    int64_t store_statement_ms; /* one store statement or command */
    int store_statements_per_batch; /* most statements one store batch issues */
    int64_t store_batch_ms;  /* store_statement_ms x store_statements_per_batch */
    int64_t longest_call_ms; /* the longest blocking step of a stage loop (see above) */
    int64_t watchdog_ms;     /* watchdog.ms; 0 = off */
} hc_timeouts_t;

/* Derives t from cfg (flush.ms, watchdog.ms, the kafka.* overrides of the producer's timeouts)
 * and checks the relations above. HC_ERR_INVALID with errstr naming the keys and the reason
 * ("flush.ms=3600000 must be below transaction.timeout.ms=60000: ..."); on error t is
 * unspecified. */
hc_err_t hc_timeouts_derive(const struct hc_config *cfg, hc_timeouts_t *t, char *errstr,
                            size_t errstr_size);

/* The next pause of a retry loop: backoff_min_ms doubled per attempt (0-based), capped at
 * backoff_max_ms. */
int64_t hc_timeouts_backoff_ms(const hc_timeouts_t *t, int attempt);

/* One INFO line (area "timeouts") with every field, for a stage's start. */
void hc_timeouts_log(const hc_timeouts_t *t);

#endif
