/* Unit tests for src/base/timeouts.c: the timeouts derived once from the configuration, and the
 * relations between them that hc_timeouts_derive (and so hc_config_validate) refuses to break.
 * Each test names the mutant of timeouts.c it catches. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#endif

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/log.h"
#include "hotcount/timeouts.h"
#include "store_facts_stub.h"

#define ERRSTR_SIZE 1024

static int setup(void **state)
{
    hc_config_t *cfg = malloc(sizeof(*cfg));
    if (cfg == NULL || hc_config_init(cfg, stub_stores) != HC_OK) {
        free(cfg);
        return -1;
    }
    *state = cfg;
    return 0;
}

static int teardown(void **state)
{
    hc_config_fini(*state);
    free(*state);
    return 0;
}

static void set_ok(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[ERRSTR_SIZE] = "";
    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s=%s: %s", key, value, errstr);
    }
}

/* Derives, expects HC_ERR_INVALID and every needle in the message. */
static void assert_derive_fails(const hc_config_t *cfg, const char *const *needles)
{
    hc_timeouts_t t;
    char errstr[ERRSTR_SIZE] = "";
    assert_int_equal(hc_timeouts_derive(cfg, &t, errstr, sizeof(errstr)), HC_ERR_INVALID);
    for (size_t i = 0; needles[i]; i++) {
        if (!strstr(errstr, needles[i])) {
            fail_msg("\"%s\" not in \"%s\"", needles[i], errstr);
        }
    }
}

static void derive_ok(const hc_config_t *cfg, hc_timeouts_t *t)
{
    char errstr[ERRSTR_SIZE] = "";
    if (hc_timeouts_derive(cfg, t, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("derive: %s", errstr);
    }
}

/* Mutant: a default changed so that one relation breaks (e.g. message.timeout.ms 60000), or
 * today's values lost. */
static void defaults_keep_todays_values_and_every_relation(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    derive_ok(cfg, &t);
    assert_int_equal(t.flush_ms, 1000);
    assert_int_equal(t.txn_timeout_ms, 60000);
    assert_int_equal(t.message_timeout_ms, 50000);
    assert_int_equal(t.watchdog_ms, 180000);
    assert_true(t.flush_ms * 2 <= t.txn_timeout_ms);
    assert_true(t.message_timeout_ms < t.txn_timeout_ms);
    assert_true(t.longest_call_ms < t.watchdog_ms);
    assert_true(t.txn_call_ms <= t.longest_call_ms);
    assert_true(t.committed_read_total_ms <= t.longest_call_ms);
    assert_true(t.store_connect_ms + t.store_batch_ms <= t.longest_call_ms);
    assert_true(t.drain_ms <= t.longest_call_ms);
    assert_true(t.topic_read_idle_ms <= t.longest_call_ms);
    assert_true(t.txn_init_attempts >= 1);
    assert_true(t.committed_read_attempts >= 1);
    /* hc_config_init filled cfg->timeouts with the same */
    assert_memory_equal(&cfg->timeouts, &t, sizeof(t));
}

/* Mutant: the committed-offset read counted without its back-offs (the 6 x 10 s loop that
 * never backed off), or the back-offs not doubling. */
static void committed_read_total_counts_every_attempt_and_backoff(void **state)
{
    hc_timeouts_t t;
    derive_ok(*state, &t);
    int64_t want = t.committed_read_ms * t.committed_read_attempts;
    for (int i = 0; i + 1 < t.committed_read_attempts; i++) {
        want += hc_timeouts_backoff_ms(&t, i);
    }
    assert_int_equal(t.committed_read_total_ms, want);
    assert_true(t.committed_read_total_ms > t.committed_read_ms * t.committed_read_attempts);
}

/* Mutant: no cap, no doubling, or an overflow for a large attempt number. */
static void backoff_doubles_from_min_and_caps_at_max(void **state)
{
    hc_timeouts_t t;
    derive_ok(*state, &t);
    assert_int_equal(hc_timeouts_backoff_ms(&t, 0), t.backoff_min_ms);
    assert_int_equal(hc_timeouts_backoff_ms(&t, 1), 2 * t.backoff_min_ms);
    assert_int_equal(hc_timeouts_backoff_ms(&t, 2), 4 * t.backoff_min_ms);
    assert_int_equal(hc_timeouts_backoff_ms(&t, 30), t.backoff_max_ms);
    assert_int_equal(hc_timeouts_backoff_ms(&t, 1000000), t.backoff_max_ms);
    for (int i = 1; i < 64; i++) {
        assert_true(hc_timeouts_backoff_ms(&t, i) >= hc_timeouts_backoff_ms(&t, i - 1));
    }
}

/* The case: -X flush.ms=3600000 against a 60 s transaction.
 * Mutant: the flush.ms check removed or compared against the wrong field. */
static void flush_beyond_half_the_transaction_timeout_fails_naming_both(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    set_ok(cfg, "flush.ms", "30000");
    derive_ok(cfg, &t);
    set_ok(cfg, "flush.ms", "30001");
    assert_derive_fails(cfg, (const char *const[]){"flush.ms=30001", "transaction.timeout.ms=60000",
                                                   "transaction.max.timeout.ms", NULL});
}

/* Mutant: the broker's transaction.max.timeout.ms not mentioned when no transaction timeout a
 * default broker accepts could hold the window. */
static void flush_no_broker_could_hold_names_transaction_max_timeout(void **state)
{
    hc_config_t *cfg = *state;
    set_ok(cfg, "flush.ms", "3600000");
    assert_derive_fails(cfg, (const char *const[]){"flush.ms=3600000", "transaction.max.timeout.ms",
                                                   "900000", "lower flush.ms", NULL});
}

/* Mutant: hotcount's default used although the user set the producer's timeout. */
static void users_producer_transaction_timeout_counts(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "200000");
    set_ok(cfg, "watchdog.ms", "240000"); /* above the longer transactional call */
    set_ok(cfg, "flush.ms", "100000");
    derive_ok(cfg, &t);
    assert_int_equal(t.txn_timeout_ms, 200000);
    assert_int_equal(t.txn_call_ms, 200000);
    assert_int_equal(t.message_timeout_ms, 50000); /* never raised past hotcount's default */
    set_ok(cfg, "flush.ms", "100001");
    assert_derive_fails(cfg, (const char *const[]){"flush.ms=100001",
                                                   "kafka.producer.transaction.timeout.ms=200000",
                                                   NULL});
}

/* Mutant: kafka.<prop> ignored, or applied after kafka.producer.<prop> (kafka.c applies the
 * producer scope last, so it wins whatever the order given). */
static void kafka_all_scope_counts_and_producer_scope_wins(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    set_ok(cfg, "kafka.transaction.timeout.ms", "40000");
    derive_ok(cfg, &t);
    assert_int_equal(t.txn_timeout_ms, 40000);
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "30000");
    set_ok(cfg, "kafka.transaction.timeout.ms", "45000"); /* replaced in place, still first */
    derive_ok(cfg, &t);
    assert_int_equal(t.txn_timeout_ms, 30000);
    /* a consumer never reads it: it does not count */
    set_ok(cfg, "kafka.consumer.message.timeout.ms", "900000");
    derive_ok(cfg, &t);
    assert_true(t.message_timeout_ms < t.txn_timeout_ms);
}

/* Mutant: message.timeout.ms left at 50 s under a user's 12 s transaction (librdkafka would
 * refuse the producer). */
static void smaller_transaction_timeout_lowers_message_timeout(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "12000");
    derive_ok(cfg, &t);
    assert_int_equal(t.txn_timeout_ms, 12000);
    assert_int_equal(t.message_timeout_ms, 10000);
}

/* Mutant: the message.timeout.ms < transaction.timeout.ms check removed or made <=. */
static void message_timeout_not_below_transaction_timeout_fails(void **state)
{
    hc_config_t *cfg = *state;
    set_ok(cfg, "kafka.producer.message.timeout.ms", "60000");
    assert_derive_fails(cfg, (const char *const[]){"kafka.producer.message.timeout.ms=60000",
                                                   "transaction.timeout.ms=60000", "below", NULL});
    set_ok(cfg, "kafka.producer.message.timeout.ms", "59999");
    hc_timeouts_t t;
    derive_ok(cfg, &t);
}

/* Mutant: the watchdog check removed, made <=, or skipping watchdog.ms=0 wrongly. */
static void watchdog_not_above_longest_call_fails_naming_the_call(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    char v[32];
    derive_ok(cfg, &t);
    snprintf(v, sizeof(v), "%lld", (long long)t.longest_call_ms);
    set_ok(cfg, "watchdog.ms", v);
    assert_derive_fails(cfg, (const char *const[]){"watchdog.ms=", "longest blocking call", NULL});
    snprintf(v, sizeof(v), "%lld", (long long)t.longest_call_ms + 1);
    set_ok(cfg, "watchdog.ms", v);
    derive_ok(cfg, &t);
    set_ok(cfg, "watchdog.ms", "3000");
    assert_derive_fails(cfg, (const char *const[]){"watchdog.ms=3000", NULL});
    set_ok(cfg, "watchdog.ms", "0"); /* off: nothing to contradict */
    derive_ok(cfg, &t);
}

/* Mutant: a user's longer transaction timeout not counted into the longest call. */
static void long_transaction_timeout_needs_a_longer_watchdog(void **state)
{
    hc_config_t *cfg = *state;
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "600000");
    assert_derive_fails(
        cfg, (const char *const[]){"watchdog.ms=180000", "600000", "transactional call", NULL});
    set_ok(cfg, "watchdog.ms", "600001");
    /* and the consumer's max.poll.interval.ms (300 s), as stage 1 polls between such calls */
    assert_derive_fails(cfg, (const char *const[]){"max.poll.interval.ms=300000", NULL});
    set_ok(cfg, "kafka.consumer.max.poll.interval.ms", "600001");
    hc_timeouts_t t;
    derive_ok(cfg, &t);
    assert_int_equal(t.longest_call_ms, 600000);
}

/* Mutant: the store's statement bound or statements per batch ignored by backend; the batch
 * not capped (PostgreSQL's 20 statements of 45 s each were 15 minutes past the watchdog). */
static void store_bounds_follow_the_backend_and_cap_the_batch(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;

    derive_ok(cfg, &t); /* sqlite */
    assert_int_equal(t.store_statement_ms, 5000);
    assert_int_equal(t.store_batch_ms, t.store_statement_ms * t.store_statements_per_batch);

    set_ok(cfg, "store", "redis://127.0.0.1:6379/0");
    derive_ok(cfg, &t);
    assert_int_equal(t.store_statement_ms, 10000);
    assert_int_equal(t.store_statements_per_batch, 1000000 / 10000 + 1);
    assert_true(t.store_batch_ms < t.store_statement_ms * t.store_statements_per_batch);
    assert_true(t.store_connect_ms + t.store_batch_ms < t.watchdog_ms);

    set_ok(cfg, "store", "postgresql://h/db");
    derive_ok(cfg, &t);
    assert_int_equal(t.store_statement_ms, 45000);
    assert_int_equal(t.store_server_statement_ms, 30000);
    assert_true(t.store_server_statement_ms < t.store_statement_ms);
    assert_int_equal(t.store_statements_per_batch, 16 + 4); /* 1 000 000 posts / 65 536 */
    assert_true(t.store_connect_ms + t.store_batch_ms <= t.longest_call_ms);
    assert_true(t.longest_call_ms < t.watchdog_ms);

    set_ok(cfg, "max.keys", "1000");
    derive_ok(cfg, &t);
    assert_int_equal(t.store_statements_per_batch, 5);
    assert_int_equal(t.store_batch_ms, 5 * 45000 < 90000 ? 5 * 45000 : 90000);
}

/* With topic.counts, stage 2 follows every store batch with a changelog transaction in the
 * same step of its loop (init_transactions, flush, send_offsets, commit, abort: drain_ms each),
 * and a changelog repair runs two after its topic read: the watchdog and the derived progress
 * bound must wait for them. Mutants: changelog_txn_ms left out of the longest call or of the
 * derived partition.progress.ms, counted with topic.counts off, or fewer calls counted. */
static void changelog_transactions_count_in_the_longest_call_and_progress(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t off;
    hc_timeouts_t on;
    set_ok(cfg, "store", "postgresql://h/db");
    derive_ok(cfg, &off);
    assert_int_equal(off.changelog_txn_ms, 0);

    set_ok(cfg, "topic.counts", "likes.counts");
    derive_ok(cfg, &on);
    assert_int_equal(on.changelog_txn_ms, 5 * on.drain_ms);
    assert_true(on.longest_call_ms >=
                on.store_connect_ms + on.store_batch_ms + on.changelog_txn_ms);
    assert_true(on.longest_call_ms >= on.topic_read_idle_ms + 2 * on.changelog_txn_ms);
    assert_true(on.longest_call_ms > off.longest_call_ms);
    assert_true(on.longest_call_ms < on.watchdog_ms); /* the defaults still hold together */
    assert_int_equal(on.partition_progress_ms, off.partition_progress_ms + on.changelog_txn_ms);

    /* a watchdog that waits out a batch alone but not its changelog transaction: refused,
     * naming the step */
    char v[32];
    snprintf(v, sizeof(v), "%lld", (long long)on.longest_call_ms);
    set_ok(cfg, "watchdog.ms", v);
    assert_derive_fails(cfg, (const char *const[]){"watchdog.ms=", "changelog transaction", NULL});
    set_ok(cfg, "topic.counts", "");
    derive_ok(cfg, &off);
}

/* Mutant: a consumer that does not poll for longer than max.poll.interval.ms is not refused. */
static void max_poll_interval_below_longest_call_fails(void **state)
{
    hc_config_t *cfg = *state;
    set_ok(cfg, "kafka.consumer.max.poll.interval.ms", "30000");
    assert_derive_fails(
        cfg, (const char *const[]){"kafka.consumer.max.poll.interval.ms=30000", "group", NULL});
}

/* Mutant: a timeout that is no number silently taken as 0 or as the default. */
static void non_numeric_kafka_timeout_fails_naming_the_key(void **state)
{
    hc_config_t *cfg = *state;
    hc_timeouts_t t;
    char errstr[ERRSTR_SIZE] = "";
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "1min");
    assert_int_equal(hc_timeouts_derive(cfg, &t, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "kafka.producer.transaction.timeout.ms"));
    assert_non_null(strstr(errstr, "1min"));
    /* t is still whole: the default in place of what did not parse */
    assert_int_equal(t.txn_timeout_ms, 60000);
    assert_true(t.longest_call_ms > 0);
}

/* Mutant: hc_config_validate not re-deriving (a stale cfg->timeouts), or hc_config_set not
 * keeping it in step. */
static void config_set_and_validate_keep_cfg_timeouts_in_step(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";
    set_ok(cfg, "flush.ms", "2000");
    assert_int_equal(cfg->timeouts.flush_ms, 2000);
    set_ok(cfg, "kafka.producer.transaction.timeout.ms", "30000");
    assert_int_equal(cfg->timeouts.txn_timeout_ms, 30000);
    cfg->timeouts.flush_ms = 1; /* validate derives again from the keys */
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(cfg->timeouts.flush_ms, 2000);
    set_ok(cfg, "flush.ms", "20000");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "flush.ms=20000"));
}

/* Mutant: the start-up line missing a field the maintainer needs to see. */
static void log_line_names_every_bound(void **state)
{
    hc_timeouts_t t;
    char path[] = "/tmp/hc-test-timeouts-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    derive_ok(*state, &t);
    hc_log_setup(HC_LOG_INFO, HC_LOG_TEXT);
    hc_log_set_fd(fd);
    hc_timeouts_log(&t);
    hc_log_set_fd(-1);
    char buf[4096] = "";
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    const char *needles[] = {"[timeouts]",
                             "flush.ms=1000",
                             "transaction.timeout.ms=60000",
                             "message.timeout.ms=50000",
                             "longest call=",
                             "watchdog.ms=180000",
                             "statement=",
                             NULL};
    for (size_t i = 0; needles[i]; i++) {
        if (!strstr(buf, needles[i])) {
            fail_msg("\"%s\" not in \"%s\"", needles[i], buf);
        }
    }
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(defaults_keep_todays_values_and_every_relation),
        T(committed_read_total_counts_every_attempt_and_backoff),
        T(backoff_doubles_from_min_and_caps_at_max),
        T(flush_beyond_half_the_transaction_timeout_fails_naming_both),
        T(flush_no_broker_could_hold_names_transaction_max_timeout),
        T(users_producer_transaction_timeout_counts),
        T(kafka_all_scope_counts_and_producer_scope_wins),
        T(smaller_transaction_timeout_lowers_message_timeout),
        T(message_timeout_not_below_transaction_timeout_fails),
        T(watchdog_not_above_longest_call_fails_naming_the_call),
        T(long_transaction_timeout_needs_a_longer_watchdog),
        T(store_bounds_follow_the_backend_and_cap_the_batch),
        T(changelog_transactions_count_in_the_longest_call_and_progress),
        T(max_poll_interval_below_longest_call_fails),
        T(non_numeric_kafka_timeout_fails_naming_the_key),
        T(config_set_and_validate_keep_cfg_timeouts_in_step),
        T(log_line_names_every_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
