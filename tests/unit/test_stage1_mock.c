/* Stage 1's error paths on librdkafka's mock cluster, with errors injected into the requests the
 * stage's transactional producer and consumer send: fast, no servers.
 *
 * Each test loads EVENTS valid events into a fresh mock cluster, injects its error, runs one
 * stage 1 on a thread and watches it through the stage's observer (every state transition) and
 * the metrics (hotcount_transactions_total{outcome}, hotcount_events_total). What the mock can't
 * show is not asserted: it stores no transactional offsets (a rewind goes back to the start of
 * the partition, which is right here because nothing was committed before the injected error)
 * and it shows aborted records to readers. So "re-read and committed once" reads: every event
 * is counted by exactly one committed window, events_ok == EVENTS.
 *
 * Each test names the mutant of src/stage/stage1.c it catches. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/metrics.h"
#include "hotcount/offset.h"
#include "hotcount/partial.h"
#include "hotcount/partial_pack.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"
#include "hotcount/topic_read.h"
#include "stage1_impl.h"

#define EVENTS 200
#define POSTS 17
#define WAIT_MS 30000 /* a bound for a condition that holds within a second or two */

/* Kafka protocol API keys (the mock takes them as plain numbers) */
#define API_PRODUCE 0
#define API_HEARTBEAT 12
#define API_ADD_OFFSETS_TO_TXN 25
#define API_END_TXN 26
#define API_TXN_OFFSET_COMMIT 28

#define MAX_STEPS 4096

typedef struct step {
    hc_stage1_state_t from;
    hc_stage1_event_t ev;
    hc_err_t outcome;
    hc_stage1_state_t to;
    int64_t at_ms; /* hc_now_ms when it happened */
} step_t;

typedef struct fixture {
    hc_config_t cfg;
    hc_mock_t mock;
    hc_metrics_t metrics;
    hc_stage1_t *s1;
    pthread_t tid;
    atomic_bool stop;
    hc_err_t run_err;
    char run_errstr[512];
    atomic_bool done; /* hc_stage1_run returned */
    bool joined;
    int confirm_answers; /* timeouts.committed_read_attempts for the stage, 0: the default */
    /* written by the stage thread (the observer), read by the test after a release store */
    step_t steps[MAX_STEPS];
    atomic_size_t nsteps;
} fixture_t;

static void observe(void *opaque, hc_stage1_state_t from, hc_stage1_event_t ev, hc_err_t outcome,
                    hc_stage1_state_t to)
{
    fixture_t *f = opaque;
    size_t n = atomic_load_explicit(&f->nsteps, memory_order_relaxed);
    /* a REWIND that must wait repeats every poll: keep one of each in a row */
    if (n > 0 && f->steps[n - 1].from == from && f->steps[n - 1].ev == ev &&
        f->steps[n - 1].outcome == outcome && f->steps[n - 1].to == to) {
        return;
    }
    if (n < MAX_STEPS) {
        f->steps[n] = (step_t){from, ev, outcome, to, hc_now_ms()};
        atomic_store_explicit(&f->nsteps, n + 1, memory_order_release);
    }
}

/* How many times the transition (from, ev, outcome) happened. */
static int count_steps(fixture_t *f, hc_stage1_state_t from, hc_stage1_event_t ev, hc_err_t outcome)
{
    size_t n = atomic_load_explicit(&f->nsteps, memory_order_acquire);
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        c += f->steps[i].from == from && f->steps[i].ev == ev && f->steps[i].outcome == outcome;
    }
    return c;
}

/* How many transitions entered `to`. */
static int count_entered(fixture_t *f, hc_stage1_state_t to)
{
    size_t n = atomic_load_explicit(&f->nsteps, memory_order_acquire);
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        c += f->steps[i].to == to;
    }
    return c;
}

/* The index of the first such transition, or -1. */
static int first_step(fixture_t *f, hc_stage1_state_t from, hc_stage1_event_t ev, hc_err_t outcome)
{
    size_t n = atomic_load_explicit(&f->nsteps, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        if (f->steps[i].from == from && f->steps[i].ev == ev && f->steps[i].outcome == outcome) {
            return (int)i;
        }
    }
    return -1;
}

static void print_steps(fixture_t *f)
{
    size_t n = atomic_load_explicit(&f->nsteps, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        print_message("  %s --%s/%s--> %s\n", hc_stage1_state_name(f->steps[i].from),
                      hc_stage1_event_name(f->steps[i].ev), hc_err_name(f->steps[i].outcome),
                      hc_stage1_state_name(f->steps[i].to));
    }
}

static void set(fixture_t *f, const char *key, const char *value)
{
    char errstr[512];
    if (hc_config_set(&f->cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s=%s: %s", key, value, errstr);
    }
}

/* Writes n likes to the raw topic, keyed and posted as "<prefix><i % posts><suffix>". */
static void produce_likes(fixture_t *f, int n, const char *prefix, int posts, const char *suffix)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(&f->cfg, HC_KAFKA_ROLE_PRODUCER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    for (int i = 0; i < n; i++) {
        char post[128], ev[192];
        snprintf(post, sizeof(post), "%s%04d%s", prefix, i % posts, suffix);
        int len = snprintf(ev, sizeof(ev), "{\"post_id\":\"%s\",\"op\":\"like\"}", post);
        assert_int_equal(
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(f->cfg.topic_raw),
                              RD_KAFKA_V_KEY(post, strlen(post)), RD_KAFKA_V_VALUE(ev, (size_t)len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
            RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    assert_int_equal(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    char errstr[512];
    const char *level = getenv("HC_TEST_LOG");
    hc_log_setup(level && strcmp(level, "info") == 0 ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&f->cfg, hc_store_facts()), HC_OK);
    set(f, "instance.id", "s1mock");
    set(f, "topic.raw.partitions", "2");
    set(f, "topic.partials.partitions", "2");
    set(f, "topic.dlq.partitions", "1");
    set(f, "flush.ms", "200");
    /* a lost heartbeat is noticed within 100 ms */
    set(f, "kafka.consumer.heartbeat.interval.ms", "100");
    set(f, "kafka.statistics.interval.ms", "0");
    assert_int_equal(hc_mock_start(&f->mock, &f->cfg, 1, errstr, sizeof(errstr)), HC_OK);
    set(f, "brokers", f->mock.bootstraps);
    assert_int_equal(hc_config_validate(&f->cfg, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_metrics_init(&f->metrics), HC_OK);
    /* The mock keeps no transactional offsets, so every partition it assigns has records and no
     * committed offset, which stage 1 asks again committed_read_attempts times, backing off,
     * before it reads from the first record (hotcount/start_offset.h): 3.1 s by default at
     * every assignment and rewind. Two answers here (100 ms), applied by start() after every
     * set() (which derives the timeouts again); unconfirmed_start_waits_for_the_answers_to_agree
     * keeps the default. */
    f->confirm_answers = 2;

    /* EVENTS likes over POSTS posts, before the stage starts */
    produce_likes(f, EVENTS, "p", POSTS, "");
    *state = f;
    return 0;
}

static void finish(fixture_t *f);

static int teardown(void **state)
{
    fixture_t *f = *state;
    if (f->s1) {
        finish(f);
    }
    hc_stage1_destroy(f->s1);
    hc_mock_stop(&f->mock);
    hc_metrics_fini(&f->metrics);
    hc_config_fini(&f->cfg);
    free(f);
    return 0;
}

static void *run_stage(void *arg)
{
    fixture_t *f = arg;
    f->run_err = hc_stage1_run(f->s1, &f->stop, f->run_errstr, sizeof(f->run_errstr));
    atomic_store(&f->done, true);
    return NULL;
}

static void start(fixture_t *f)
{
    char errstr[512];
    if (f->confirm_answers > 0) {
        f->cfg.timeouts.committed_read_attempts = f->confirm_answers;
    }
    assert_int_equal(hc_stage1_new(&f->cfg, NULL, &f->metrics, &f->s1, errstr, sizeof(errstr)),
                     HC_OK);
    hc_stage1_observe(f->s1, observe, f);
    assert_int_equal(pthread_create(&f->tid, NULL, run_stage, f), 0);
}

/* Stops the stage (if it still runs) and joins it. */
static void finish(fixture_t *f)
{
    atomic_store(&f->stop, true);
    if (!f->joined) {
        pthread_join(f->tid, NULL);
        f->joined = true;
    }
}

/* Polls until every event was counted by a committed window, or WAIT_MS; false on timeout or
 * when the stage ended first. */
static bool wait_committed(fixture_t *f, int64_t events)
{
    int64_t deadline = hc_now_ms() + WAIT_MS;
    while (hc_now_ms() < deadline) {
        if (hc_metric_get(f->metrics.events_ok) >= events) {
            return true;
        }
        if (atomic_load(&f->done)) {
            return false;
        }
        hc_sleep_ms(5);
    }
    return false;
}

/* Runs the stage until `events` are counted by committed windows and stops it: the run must
 * end cleanly (its steps and error are printed when it does not). */
static void run_to_committed(fixture_t *f, int64_t events)
{
    start(f);
    bool committed = wait_committed(f, events);
    finish(f);
    if (!committed || f->run_err != HC_OK) {
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_true(committed);
    assert_int_equal(f->run_err, HC_OK);
}

/* The stage's run has returned on its own (it failed), within WAIT_MS. */
static bool wait_failed(fixture_t *f)
{
    int64_t deadline = hc_now_ms() + WAIT_MS;
    while (hc_now_ms() < deadline && !atomic_load(&f->done)) {
        hc_sleep_ms(5);
    }
    bool failed = atomic_load(&f->done);
    finish(f);
    return failed;
}

/* After an abortable error: the window was aborted and rewound (`aborts` times, 0: at least
 * once), every event then read again and counted exactly once, and the stage stopped cleanly.
 * Each abort was counted, and each was followed by a new producer (a new epoch fences what the
 * aborted transaction may still have on the way: docs/RELIABILITY.md, "Late writes"; mutant
 * no_endtxn_defence keeps the producer) and by its rewind. */
static void assert_aborted_then_committed(fixture_t *f, int64_t aborts)
{
    bool committed = wait_committed(f, EVENTS);
    finish(f);
    if (!committed || f->run_err != HC_OK) {
        print_steps(f);
    }
    assert_true(committed);
    assert_int_equal(f->run_err, HC_OK);
    int64_t n = hc_metric_get(f->metrics.txn_abort);
    if (aborts > 0) {
        assert_int_equal(n, aborts);
    } else {
        assert_true(n >= 1);
    }
    assert_true(hc_metric_get(f->metrics.txn_commit) >= 1);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
    assert_int_equal(count_steps(f, HC_STAGE1_ABORTING, HC_STAGE1_EV_ABORT, HC_OK), n);
    assert_int_equal(count_steps(f, HC_STAGE1_RENEWING, HC_STAGE1_EV_RENEW, HC_OK), n);
    assert_int_equal(count_steps(f, HC_STAGE1_REWINDING, HC_STAGE1_EV_REWIND, HC_OK), n);
    /* the abort came before any commit */
    int aborted = first_step(f, HC_STAGE1_ABORTING, HC_STAGE1_EV_ABORT, HC_OK);
    int committed_at = first_step(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_OK);
    assert_true(aborted >= 0 && committed_at > aborted);
}

/* A produce of the first window's partials fails for good (TOPIC_AUTHORIZATION_FAILED): the
 * commit reports an abortable error.
 * Mutant caught: the tick does not rewind an aborted window (REWINDING -> IDLE without
 * rewind_txn): the aborted events are never re-read, events_ok < EVENTS. */
static void abortable_produce_error_aborts_rewinds_and_rereads(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_PRODUCE, 1,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    start(f);
    /* The failed batch leaves a gap in the producer's sequence numbers: the windows after the
     * rewind are aborted too (OUT_OF_ORDER_SEQUENCE_NUMBER, "requires epoch bump") until
     * librdkafka has bumped its epoch: once more with 2.14, three times with 2.0.2. */
    assert_aborted_then_committed(f, 0);
    assert_int_equal(count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_ABORT),
                     hc_metric_get(f->metrics.txn_abort));
}

/* AddOffsetsToTxn refused (GROUP_AUTHORIZATION_FAILED: abortable).
 * Mutant caught: an abortable send_offsets error taken as fatal (COMMIT/abort -> FAILED): the
 * run returns HC_ERR_FATAL. */
static void abortable_add_offsets_error_aborts_rewinds_and_rereads(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_ADD_OFFSETS_TO_TXN, 1,
                                      RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED);
    start(f);
    assert_aborted_then_committed(f, 1);
}

/* TxnOffsetCommit refused (UNKNOWN_MEMBER_ID: abortable; e.g. a rebalance moved the group on).
 * Mutant caught: the aborted window not cleared (no window_reset on abort): the re-read events
 * would be counted twice; here the re-read offsets are behind the window's own ranges, the
 * stage stops (record_offset) and nothing is ever committed. */
static void abortable_txn_offset_commit_error_aborts_rewinds_and_rereads(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_TXN_OFFSET_COMMIT, 1,
                                      RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID);
    start(f);
    assert_aborted_then_committed(f, 1);
}

/* EndTxn (the commit) refused with an abortable error.
 * Mutant caught: the abort not counted (no txn_abort on entering REWINDING): the
 * hotcount_transactions_total{outcome="abort"} the fault suite reads stays 0. */
static void abortable_end_txn_error_aborts_rewinds_and_rereads(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_END_TXN, 1,
                                      RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED);
    start(f);
    assert_aborted_then_committed(f, 1);
}

/* The same abortable EndTxn, with the abort in the middle of a held batch: max.keys 5 closes
 * the first window at its sixth post, inside on_message, while the stage loop still holds the
 * rest of the events it took in one batch call (all were loaded before the start, so the call
 * after the first message takes the rest of the fetch). The rewind seeks back to the committed
 * offsets; the held events, fetched from past the aborted window, must never reach the stage:
 * they are read again after the seek. Exactness: every event counted once by a committed
 * window.
 * Mutant caught (keep_held: hc_stage_loop_forget drops nothing): the held events are counted
 * after the rewind, then read again from the rewound position, so a window meets an offset
 * behind its own range and the stage stops ("offset … after … in one window"), or counts
 * them twice (events_ok > EVENTS). */
static void abort_mid_batch_drops_the_held_events(void **state)
{
    fixture_t *f = *state;
    set(f, "max.keys", "5");
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_END_TXN, 1,
                                      RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED);
    start(f);
    assert_aborted_then_committed(f, 1);
    /* many small windows: they closed on the full table, inside a message */
    assert_true(hc_metric_get(f->metrics.txn_commit) >= 10);
}

/* The commit's EndTxn answers after 3 s while one call may wait 500 ms: commit_transaction
 * times out (retriable) and is called again until the background commit completes.
 * Mutant caught: txn_call returns a retriable error at once instead of retrying: COMMIT with
 * a transient outcome fails the stage. */
static void commit_timeout_is_retried_and_commits_once(void **state)
{
    fixture_t *f = *state;
    f->cfg.timeouts.txn_call_ms = 500;
    assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                         f->mock.mcluster, 1, API_END_TXN, 1, RD_KAFKA_RESP_ERR_NO_ERROR, 3000),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    run_to_committed(f, EVENTS);
    /* the first window's close waited out the delayed EndTxn: longer than one call may wait,
     * so the commit was called again */
    assert_true(hc_histogram_sum(&f->metrics.txn_seconds) >= 2.5);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
    assert_int_equal(count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_ABORT), 0);
    assert_int_equal(count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_TRANSIENT), 0);
}

/* The commit's EndTxn answers after 8 s, while one call may wait 500 ms and all of a commit's
 * retries 4 s (transaction.timeout.ms here): when the retries run out, the commit's outcome is
 * unknown, the case KAFKA-17754 turns into a late EndTxn landing on the next transaction of
 * the same epoch. The stage replaces its producer (init_transactions: a new epoch, which fences
 * the old one's delayed requests and settles the old transaction), rewinds to the committed
 * offsets, reads the window again and commits it once, without stopping.
 * Mutant caught (no_endtxn_defence): the unknown commit fails the stage (hc_stage1_run returns
 * HC_ERR_FATAL, `hotcount stage1` exits 1), no producer is renewed. */
static void commit_of_unknown_outcome_renews_the_producer(void **state)
{
    fixture_t *f = *state;
    f->cfg.timeouts.txn_call_ms = 500;
    /* The delayed EndTxn must be the first window's commit, not an abort's: a produce that
     * outlived message.timeout.ms would abort the window first (and the abort's EndTxn take the
     * delay), so the produce gets 3 s, room on a loaded machine (1.5 s was seen to run out at
     * load 36). */
    f->cfg.timeouts.txn_timeout_ms = 4000;
    f->cfg.timeouts.message_timeout_ms = 3000;
    assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                         f->mock.mcluster, 1, API_END_TXN, 1, RD_KAFKA_RESP_ERR_NO_ERROR, 8000),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    start(f);
    bool committed = wait_committed(f, EVENTS);
    finish(f);
    int unknown = count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_TRANSIENT);
    if (!committed || f->run_err != HC_OK || unknown != 1) { /* which path it took instead */
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_true(committed);
    assert_int_equal(f->run_err, HC_OK);
    assert_int_equal(unknown, 1);
    assert_int_equal(count_steps(f, HC_STAGE1_RENEWING, HC_STAGE1_EV_RENEW, HC_OK), 1);
    assert_int_equal(count_steps(f, HC_STAGE1_REWINDING, HC_STAGE1_EV_REWIND, HC_OK), 1);
    /* the window read again committed after the renewal, and nothing was aborted */
    int renewed = first_step(f, HC_STAGE1_RENEWING, HC_STAGE1_EV_RENEW, HC_OK);
    int committed_at = first_step(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_OK);
    assert_true(renewed >= 0 && committed_at > renewed);
    assert_int_equal(count_entered(f, HC_STAGE1_ABORTING), 0);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
}

/* The transaction coordinator says another producer with our transactional.id took over
 * (PRODUCER_FENCED at EndTxn): fatal, hc_stage1_run returns HC_ERR_FATAL (`hotcount stage1`
 * exits 1) and nothing is committed or aborted.
 * Mutant caught: a fatal commit outcome handled as abortable (COMMIT/fatal -> ABORTING): the
 * stage tries to abort, and a failing stage is seen to abort. */
static void fenced_producer_fails_the_stage(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_END_TXN, 1,
                                      RD_KAFKA_RESP_ERR_PRODUCER_FENCED);
    start(f);
    bool failed = wait_failed(f);
    if (!failed) {
        print_steps(f);
    }
    assert_true(failed);
    assert_int_equal(f->run_err, HC_ERR_FATAL);
    assert_int_equal(hc_metric_get(f->metrics.txn_commit), 0);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), 0);
    assert_int_equal(count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_FATAL), 1);
    /* straight to FAILED: no abort was tried (a fenced producer can't abort) */
    assert_int_equal(count_entered(f, HC_STAGE1_ABORTING), 0);
    assert_int_equal(count_entered(f, HC_STAGE1_FAILED), 1);
}

/* Produce answered INVALID_PRODUCER_EPOCH: a newer epoch of our producer exists (fenced); the
 * commit reports it, and the stage fails without committing, counting or renewing anything.
 * librdkafka may hand the failed produce to a step as abortable before it raises the fatal
 * error (seen once in five runs at load ~10), so a window may reach ABORTING first; then its
 * abort must fail fatally too, and a producer is never renewed (a renewed fenced producer
 * would take the transactional id back from the newer instance).
 * Mutant caught: commit_txn reports a fatal error as abortable and the abort's fatal error as
 * unknown (the window is then "aborted" and re-read by a producer that can do neither): the
 * window enters RENEWING. */
static void invalid_producer_epoch_fails_the_stage(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_PRODUCE, 1,
                                      RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH);
    start(f);
    bool failed = wait_failed(f);
    if (!failed) {
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_true(failed);
    assert_int_equal(f->run_err, HC_ERR_FATAL);
    assert_int_equal(hc_metric_get(f->metrics.txn_commit), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), 0);
    assert_int_equal(count_entered(f, HC_STAGE1_ABORTING),
                     count_steps(f, HC_STAGE1_ABORTING, HC_STAGE1_EV_ABORT, HC_ERR_FATAL));
    assert_int_equal(count_entered(f, HC_STAGE1_RENEWING), 0);
    assert_int_equal(count_entered(f, HC_STAGE1_FAILED), 1);
}

/* The group takes the assignment away under an open window (a Heartbeat answered
 * ILLEGAL_GENERATION: the member is behind the group). The revoke must abort the window, not
 * commit it, and rewind nothing; the next assignment re-reads from the committed offsets.
 * flush.ms is long here, so the window is still open when the loss arrives.
 * Mutant caught: the revoke ignores `lost` and commits: the window commits, then the
 * re-assigned partitions are read again (the mock keeps no transactional offsets), so
 * events_ok reaches 2 x EVENTS and the lost window's COMMIT precedes any LOSE. */
static void lost_assignment_aborts_the_window_and_commits_nothing(void **state)
{
    fixture_t *f = *state;
    set(f, "flush.ms", "20000");
    /* the mock lets a re-joining group wait session.timeout.ms - 1 s for its members */
    set(f, "kafka.consumer.session.timeout.ms", "6000");
    start(f);
    /* the window is open with every event in it */
    int64_t deadline = hc_now_ms() + WAIT_MS;
    while (hc_now_ms() < deadline &&
           (count_steps(f, HC_STAGE1_IDLE, HC_STAGE1_EV_BEGIN, HC_OK) == 0 ||
            hc_metric_get(f->metrics.events_consumed) < EVENTS)) {
        hc_sleep_ms(5);
    }
    assert_true(hc_metric_get(f->metrics.events_consumed) >= EVENTS);
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_HEARTBEAT, 1,
                                      RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION);
    /* the loss, its abort, the re-assignment and the re-read of every event */
    while (hc_now_ms() < deadline && hc_metric_get(f->metrics.events_consumed) < 2 * EVENTS) {
        hc_sleep_ms(5);
    }
    finish(f); /* commits the re-read window */
    if (f->run_err != HC_OK || hc_metric_get(f->metrics.events_ok) != EVENTS) {
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_int_equal(f->run_err, HC_OK);
    assert_true(hc_metric_get(f->metrics.events_consumed) >= 2 * EVENTS);
    int lost = first_step(f, HC_STAGE1_OPEN, HC_STAGE1_EV_LOSE, HC_OK);
    int committed = first_step(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_OK);
    assert_true(lost >= 0);
    assert_true(committed > lost);
    assert_int_equal(count_steps(f, HC_STAGE1_ABORTING, HC_STAGE1_EV_ABORT, HC_OK), 1);
    assert_int_equal(count_steps(f, HC_STAGE1_RENEWING, HC_STAGE1_EV_RENEW, HC_OK), 1);
    /* the revoke rewound nothing: the aborted window went straight to IDLE */
    assert_int_equal(count_steps(f, HC_STAGE1_REWINDING, HC_STAGE1_EV_REWIND, HC_OK), 0);
    assert_true(count_steps(f, HC_STAGE1_REWINDING, HC_STAGE1_EV_REVOKE, HC_OK) == 1);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 1);
    assert_int_equal(hc_metric_get(f->metrics.txn_commit), 1);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
}

/* The abort of a window (here after an abortable EndTxn) is itself answered with
 * INVALID_TXN_STATE, which librdkafka makes a fatal error of the producer: the transaction is in
 * a state the coordinator no longer accepts (seen after a stage-1 process was frozen past its
 * session under group.protocol=consumer: docs/RELIABILITY.md, F4). No other producer has taken
 * the transactional id, so the stage replaces its producer (the new epoch aborts whatever the
 * old one left open), rewinds, and counts every event once, without stopping.
 * Mutant caught (the code before: a fatal abort fails the window): hc_stage1_run returns
 * HC_ERR_FATAL, `hotcount stage1` exits 1. */
static void unusable_producer_at_an_abort_is_renewed(void **state)
{
    fixture_t *f = *state;
    rd_kafka_mock_push_request_errors(f->mock.mcluster, API_END_TXN, 2,
                                      RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED,
                                      RD_KAFKA_RESP_ERR_INVALID_TXN_STATE);
    start(f);
    bool committed = wait_committed(f, EVENTS);
    finish(f);
    if (!committed || f->run_err != HC_OK) {
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_true(committed);
    assert_int_equal(f->run_err, HC_OK);
    assert_int_equal(count_steps(f, HC_STAGE1_OPEN, HC_STAGE1_EV_COMMIT, HC_ERR_ABORT), 1);
    /* the abort's outcome is unknown: renewed, rewound, read again */
    assert_int_equal(count_steps(f, HC_STAGE1_ABORTING, HC_STAGE1_EV_ABORT, HC_ERR_TRANSIENT), 1);
    assert_int_equal(count_steps(f, HC_STAGE1_RENEWING, HC_STAGE1_EV_RENEW, HC_OK), 1);
    assert_int_equal(count_steps(f, HC_STAGE1_REWINDING, HC_STAGE1_EV_REWIND, HC_OK), 1);
    assert_int_equal(count_entered(f, HC_STAGE1_FAILED), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
}

/* Runs the stage until `want` events are committed, its log at INFO into log (NUL-terminated),
 * and requires a clean run. */
static void run_logged(fixture_t *f, int64_t want, char *log, size_t log_size)
{
    char path[] = "/tmp/hc-s1mock-log.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    hc_log_setup(HC_LOG_INFO, HC_LOG_TEXT);
    hc_log_set_fd(fd);
    start(f);
    bool committed = wait_committed(f, want);
    finish(f);
    hc_log_set_fd(2);
    const char *level = getenv("HC_TEST_LOG");
    hc_log_setup(level && strcmp(level, "info") == 0 ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    ssize_t n = pread(fd, log, log_size - 1, 0);
    close(fd);
    unlink(path);
    if (!committed || f->run_err != HC_OK) {
        print_steps(f);
        print_message("run: %s\n", f->run_errstr);
    }
    assert_true(committed);
    assert_int_equal(f->run_err, HC_OK);
    assert_true(n > 0);
    log[n] = 0;
}

/* The partitions have records and the group no committed offset for them (the mock keeps none),
 * which is also what a committed-offset fetch answered once for partitions that had one, right
 * after a broker restart (docs/RELIABILITY.md, F3: 68 000 events read a second time). Stage 1
 * asks again, committed_read_attempts answers backing off from 100 ms (3.1 s by default),
 * before it believes "none" and reads from the first record; it says so with the start_offset
 * event (answers_none: how many reads said none); then every event is counted once.
 * Mutant caught (the code before, auto.offset.reset at the first answer; or "none" believed
 * at the first answer): no start_offset event with six answers. */
static void unconfirmed_start_waits_for_the_answers_to_agree(void **state)
{
    fixture_t *f = *state;
    f->confirm_answers = 0; /* the default: 6 */
    assert_int_equal(f->cfg.timeouts.committed_read_attempts, 6);
    char log[65536];
    run_logged(f, EVENTS, log, sizeof(log));
    /* both partitions: started at the first record after six reads said none */
    int confirmed = 0;
    for (const char *at = log; (at = strstr(at, "start_offset ")) != NULL; at++) {
        const char *eol = strchr(at, '\n');
        size_t len = eol ? (size_t)(eol - at) : strlen(at);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1),
                 at);
        confirmed += strstr(line, "start=first") && strstr(line, "answers_none=6");
    }
    if (confirmed != 2) {
        print_message("log:\n%s\n", log);
    }
    assert_int_equal(confirmed, 2);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);
}

/* ---- a committed offset the log no longer holds ------------------------------------------ */

/* A client of the test's own on the mock (a consumer in stage 1's group that never joins it:
 * its commits are plain OffsetCommits, which the mock keeps). */
static rd_kafka_t *test_client(fixture_t *f, rd_kafka_type_t type)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    bool producer = type == RD_KAFKA_PRODUCER;
    const char *props[][2] = {
        {"bootstrap.servers", f->mock.bootstraps},
        {producer ? "message.max.bytes" : "group.id", producer ? "2000000" : f->cfg.group_stage1},
        {producer ? "linger.ms" : "enable.auto.commit", producer ? "0" : "false"},
    };
    for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++) {
        assert_int_equal(rd_kafka_conf_set(conf, props[i][0], props[i][1], errstr, sizeof(errstr)),
                         RD_KAFKA_CONF_OK);
    }
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
    assert_non_null(rk);
    return rk;
}

/* The start_offset lines of the log for raw partition `partition` that hold `needle`. */
static int count_start_lines(const char *log, int32_t partition, const char *needle)
{
    char part[32];
    snprintf(part, sizeof(part), "partition=%" PRId32 " ", partition);
    int found = 0;
    for (const char *at = log; (at = strstr(at, "start_offset ")) != NULL; at++) {
        const char *eol = strchr(at, '\n');
        size_t len = eol ? (size_t)(eol - at) : strlen(at);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1),
                 at);
        found += strstr(line, part) && strstr(line, needle);
    }
    return found;
}

/* A committed offset the log no longer holds: on raw partition 0 offset 1 was committed and
 * retention then dropped it (the mock keeps at most 5 MB a partition: seven records of 900 kB
 * push its log start past the likes); on partition 1 offset 1000000 was committed and the log
 * ends far below it (a log truncated under the group, as after an unclean leader election).
 * Stage 1 reads each partition's ends with its committed offset (read_starts) and starts both
 * at their first record, saying why with a start_offset event (start "first (retention)" and
 * "first (truncated)"), rather than seeking to the offset and leaving the jump to the
 * consumer's auto.offset.reset, silently; then every like still in the log is counted once.
 * Mutant caught (the code before: low = high = committed for a found offset, so
 * hc_start_decide's retention and truncation branches were never reached from the stage): no
 * start_offset event for either partition. */
static void committed_offset_out_of_the_log_starts_at_the_first_record_and_says_so(void **state)
{
    fixture_t *f = *state;
    rd_kafka_t *pr = test_client(f, RD_KAFKA_PRODUCER);
    size_t big_len = 900000;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    memset(big, 'x', big_len);
    big[big_len] = 0;
    for (int i = 0; i < 7; i++) { /* one message set each: flushed one by one */
        assert_int_equal(rd_kafka_producev(pr, RD_KAFKA_V_TOPIC(f->cfg.topic_raw),
                                           RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_VALUE(big, big_len),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_END),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
        assert_int_equal(rd_kafka_flush(pr, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    free(big);
    rd_kafka_destroy(pr);

    rd_kafka_t *cons = test_client(f, RD_KAFKA_CONSUMER);
    int64_t low0, high0, low1, high1;
    assert_int_equal(
        rd_kafka_query_watermark_offsets(cons, f->cfg.topic_raw, 0, &low0, &high0, 10000),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(
        rd_kafka_query_watermark_offsets(cons, f->cfg.topic_raw, 1, &low1, &high1, 10000),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    /* the premise: partition 0 keeps only big records, past offset 1; partition 1 every like */
    assert_true(low0 > 1 && high0 - low0 < 7);
    assert_true(low1 == 0 && high1 > 0 && high1 < 1000000);
    rd_kafka_topic_partition_list_t *commit = rd_kafka_topic_partition_list_new(2);
    rd_kafka_topic_partition_list_add(commit, f->cfg.topic_raw, 0)->offset = 1;
    rd_kafka_topic_partition_list_add(commit, f->cfg.topic_raw, 1)->offset = 1000000;
    assert_int_equal(rd_kafka_commit(cons, commit, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(commit);
    rd_kafka_consumer_close(cons);
    rd_kafka_destroy(cons);

    char log[65536];
    run_logged(f, high1, log, sizeof(log));
    char start0[64], start1[64];
    snprintf(start0, sizeof(start0), "log_start=%" PRId64 " ", low0);
    snprintf(start1, sizeof(start1), "log_end=%" PRId64 " ", high1);
    int retention = count_start_lines(log, 0, "start=\"first (retention)\"") > 0 &&
                    count_start_lines(log, 0, "committed_offset=1 ") > 0 &&
                    count_start_lines(log, 0, start0) > 0;
    int truncated = count_start_lines(log, 1, "start=\"first (truncated)\"") > 0 &&
                    count_start_lines(log, 1, "committed_offset=1000000 ") > 0 &&
                    count_start_lines(log, 1, start1) > 0;
    if (!retention || !truncated) {
        print_message("log:\n%s\n", log);
    }
    assert_true(retention);
    assert_true(truncated);
    /* every like left: partition 1's, from its first record, once; partition 0's big records
     * are dead letters */
    assert_int_equal(hc_metric_get(f->metrics.events_ok), high1);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);
}

/* ---- poison records: any message is counted or dead-lettered ---------------------------- */

#define BIG_KEY 1000000 /* over the stage's producer's message.max.bytes with any value */

/* Writes one raw message with a producer that may send up to 2 MB (the stage's own may not). */
static void produce_raw(fixture_t *f, const void *key, size_t key_len, const char *value,
                        rd_kafka_headers_t *hdrs)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(
        rd_kafka_conf_set(conf, "bootstrap.servers", f->mock.bootstraps, errstr, sizeof(errstr)),
        RD_KAFKA_CONF_OK);
    assert_int_equal(
        rd_kafka_conf_set(conf, "message.max.bytes", "2000000", errstr, sizeof(errstr)),
        RD_KAFKA_CONF_OK);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    assert_non_null(rk);
    rd_kafka_resp_err_t err;
    if (hdrs) {
        err = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(f->cfg.topic_raw), RD_KAFKA_V_PARTITION(0),
            RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)value, strlen(value)),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    } else {
        err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(f->cfg.topic_raw), RD_KAFKA_V_PARTITION(0),
                                RD_KAFKA_V_KEY(key, key_len),
                                RD_KAFKA_V_VALUE((void *)value, strlen(value)),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    }
    assert_int_equal(err, RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

typedef struct dead_letter {
    char error[64];
    size_t key_len;
    size_t value_len;
    char key_truncated_from[32];
    char truncated_from[32];
} dead_letter_t;

typedef struct read_out {
    dead_letter_t dl[8];
    int ndl;
    int64_t likes[4]; /* "bigkey", "old", "min", "new": summed partial deltas */
    int64_t ts_min[4];
    int64_t ts_max[4];
    int32_t partition[4]; /* where the post's partials were, -1: none yet, -2: several */
    int packed, single;   /* partials records of each format */
} read_out_t;

static void header_copy(rd_kafka_headers_t *hdrs, const char *name, char *out, size_t size)
{
    const void *v = NULL;
    size_t len = 0;
    out[0] = '\0';
    if (hdrs && rd_kafka_header_get_last(hdrs, name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(out, size, "%.*s", (int)len, (const char *)v);
    }
}

static hc_err_t on_dead_letter(const rd_kafka_message_t *rkm, void *opaque)
{
    read_out_t *out = opaque;
    rd_kafka_headers_t *hdrs = NULL;
    assert_true(out->ndl < 8);
    dead_letter_t *dl = &out->dl[out->ndl++];
    (void)rd_kafka_message_headers(rkm, &hdrs);
    header_copy(hdrs, "hotcount-error", dl->error, sizeof(dl->error));
    header_copy(hdrs, "hotcount-key-truncated-from", dl->key_truncated_from,
                sizeof(dl->key_truncated_from));
    header_copy(hdrs, "hotcount-truncated-from", dl->truncated_from, sizeof(dl->truncated_from));
    dl->key_len = rkm->key ? rkm->key_len : 0;
    dl->value_len = rkm->payload ? rkm->len : 0;
    return HC_OK;
}

static hc_err_t on_partial(const rd_kafka_message_t *rkm, void *opaque)
{
    static const char *const names[4] = {"bigkey", "old", "min", "new"};
    static hc_pack_entry_t ents[HC_PACK_MAX_POSTS];
    read_out_t *out = opaque;
    hc_partial_t pt;
    char errstr[256];
    size_t n = 1;
    if (hc_pack_is_packed(rkm->payload, rkm->len)) { /* partials.format=packed, the default */
        assert_int_equal(hc_pack_decode(rkm->payload, rkm->len, ents, &n, errstr, sizeof(errstr)),
                         HC_PARTIAL_OK);
        out->packed++;
    } else {
        out->single++;
        assert_int_equal(hc_partial_decode(rkm->payload, rkm->len, &pt, errstr, sizeof(errstr)),
                         HC_OK);
        ents[0] = (hc_pack_entry_t){.post_id = pt.post_id,
                                    .post_id_len = (uint32_t)pt.post_id_len,
                                    .delta = pt.delta,
                                    .ts_min = pt.ts_min,
                                    .ts_max = pt.ts_max};
    }
    for (size_t e = 0; e < n; e++) {
        for (int i = 0; i < 4; i++) {
            if (ents[e].post_id_len == strlen(names[i]) &&
                memcmp(ents[e].post_id, names[i], ents[e].post_id_len) == 0) {
                out->likes[i] += ents[e].delta;
                out->partition[i] = out->partition[i] == -1 || out->partition[i] == rkm->partition
                                        ? rkm->partition
                                        : -2;
                out->ts_min[i] = ents[e].ts_min < out->ts_min[i] ? ents[e].ts_min : out->ts_min[i];
                out->ts_max[i] = ents[e].ts_max > out->ts_max[i] ? ents[e].ts_max : out->ts_max[i];
            }
        }
    }
    return HC_OK;
}

static void read_topic(fixture_t *f, const char *topic, int partitions, hc_topic_message_fn fn,
                       void *out)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(&f->cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    hc_topic_range_t ranges[4];
    assert_true(partitions <= 4);
    for (int p = 0; p < partitions; p++) {
        ranges[p] = (hc_topic_range_t){p, HC_OFFSET_NONE, INT64_MAX};
    }
    hc_err_t err = hc_topic_read_ranges(rk, topic, ranges, (size_t)partitions, fn, out, errstr,
                                        sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("reading %s: %s", topic, errstr);
    }
    rd_kafka_destroy(rk);
}

/* Poison raw messages: a key of 1 MB (with an invalid and with a valid value), 960 KB of
 * headers, timestamps at both ends of int64. Each is counted or dead-lettered with its reason,
 * the cuts marked, every valid event counted exactly, and the stage never stops.
 * Mutant caught: the dead letter's retry cuts only the value (the old produce_dlq): both sends
 * of the 1 MB key fail, the window FAILED and the run returns HC_ERR_FATAL. And: the ts
 * INT64_MIN not clamped: "min" loses its ts (null). */
static void poison_run(void **state, const char *partials_format)
{
    fixture_t *f = *state;
    set(f, "partials.format", partials_format);
    char *big = malloc(BIG_KEY);
    assert_non_null(big);
    memset(big, 'k', BIG_KEY);
    produce_raw(f, big, BIG_KEY, "not json", NULL);
    produce_raw(f, big, BIG_KEY, "{\"post_id\":\"bigkey\",\"op\":\"like\"}", NULL);
    free(big);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(16);
    char *hv = malloc(60000);
    assert_non_null(hv);
    memset(hv, 'h', 60000);
    for (int i = 0; i < 16; i++) {
        rd_kafka_header_add(hdrs, "x-poison", -1, hv, 60000);
    }
    free(hv);
    produce_raw(f, "hdrs", 4, "[]", hdrs); /* the headers now belong to the message */
    produce_raw(f, "o", 1, "{\"post_id\":\"old\",\"ts\":-9223372036854775807}", NULL);
    produce_raw(f, "m", 1, "{\"post_id\":\"min\",\"ts\":-9223372036854775808}", NULL);
    produce_raw(f, "n", 1, "{\"post_id\":\"new\",\"ts\":9223372036854775807}", NULL);

    run_to_committed(f, EVENTS + 4);
    assert_int_equal(count_entered(f, HC_STAGE1_FAILED), 0);
    assert_int_equal(hc_metric_get(f->metrics.events_ok), EVENTS + 4);
    assert_int_equal(hc_metric_get(f->metrics.events_invalid), 2);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);

    read_out_t out;
    memset(&out, 0, sizeof(out));
    for (int i = 0; i < 4; i++) {
        out.ts_min[i] = INT64_MAX;
        out.ts_max[i] = INT64_MIN;
        out.partition[i] = -1;
    }
    read_topic(f, f->cfg.topic_dlq, (int)f->cfg.topic_dlq_partitions, on_dead_letter, &out);
    assert_int_equal(out.ndl, 2);
    /* the 1 MB key: cut to 1024 bytes and marked; the value is whole */
    assert_string_equal(out.dl[0].error, "not_json");
    assert_int_equal(out.dl[0].key_len, 1024);
    assert_string_equal(out.dl[0].key_truncated_from, "1000000");
    assert_int_equal(out.dl[0].value_len, strlen("not json"));
    assert_string_equal(out.dl[0].truncated_from, "");
    /* the huge headers are not copied: nothing to cut */
    assert_string_equal(out.dl[1].error, "not_object");
    assert_int_equal(out.dl[1].key_len, 4);
    assert_string_equal(out.dl[1].key_truncated_from, "");

    read_topic(f, f->cfg.topic_partials, (int)f->cfg.topic_partials_partitions, on_partial, &out);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(out.likes[i], 1);
    }
    assert_int_equal(out.ts_min[1], INT64_MIN + 1);
    assert_int_equal(out.ts_max[1], INT64_MIN + 1);
    /* INT64_MIN, which means "no ts" inside hotcount, is kept as the oldest ts there is */
    assert_int_equal(out.ts_min[2], INT64_MIN + 1);
    assert_int_equal(out.ts_max[2], INT64_MIN + 1);
    assert_int_equal(out.ts_min[3], INT64_MAX);
    assert_int_equal(out.ts_max[3], INT64_MAX);
    /* the format asked for, and in either a post's partials on the partition
     * hc_pack_partition names (librdkafka's default partitioner on the one-post records) */
    bool packed = strcmp(partials_format, "packed") == 0;
    assert_true(packed ? out.packed > 0 && out.single == 0 : out.single > 0 && out.packed == 0);
    static const char *const names[4] = {"bigkey", "old", "min", "new"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(out.partition[i],
                         hc_pack_partition(names[i], strlen(names[i]),
                                           (int32_t)f->cfg.topic_partials_partitions));
    }
}

static void poison_messages_are_counted_or_dead_lettered(void **state)
{
    poison_run(state, "packed");
}

/* Mutant seen failing: hc_pack_partition with CRC initial value 0 (librdkafka put a post's
 * one-post records on another partition than the one packed records would use). */
static void poison_messages_in_single_partials(void **state)
{
    poison_run(state, "single");
}

/* ---- a producer limit below a packed record's 256 KiB -------------------------------------- */

#define SMALL_MMB 9000 /* kafka.producer.message.max.bytes: event.max.bytes (4096) + 4096 + 808 */
#define WIDE_POSTS 1000

typedef struct small_out {
    int records;
    int64_t likes;  /* summed deltas of the "q..." posts */
    int posts;      /* their entries */
    size_t largest; /* value + key + headers' bytes of the largest record */
} small_out_t;

static hc_err_t on_small_record(const rd_kafka_message_t *rkm, void *opaque)
{
    static hc_pack_entry_t ents[HC_PACK_MAX_POSTS];
    small_out_t *out = opaque;
    char errstr[256];
    size_t n = 0;
    size_t hdr_bytes = 0;
    rd_kafka_headers_t *hdrs = NULL;
    const char *name;
    const void *v;
    size_t len;
    if (rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
            hdr_bytes += strlen(name) + len;
        }
    }
    size_t bytes = rkm->len + rkm->key_len + hdr_bytes;
    out->largest = bytes > out->largest ? bytes : out->largest;
    out->records++;
    assert_true(hc_pack_is_packed(rkm->payload, rkm->len));
    assert_int_equal(hc_pack_decode(rkm->payload, rkm->len, ents, &n, errstr, sizeof(errstr)),
                     HC_PARTIAL_OK);
    for (size_t e = 0; e < n; e++) {
        if (ents[e].post_id_len > 0 && ents[e].post_id[0] == 'q') {
            out->likes += ents[e].delta;
            out->posts++;
        }
    }
    return HC_OK;
}

/* kafka.producer.message.max.bytes below HC_PACK_MAX_BYTES (a setting the configuration check
 * accepts): a window whose posts need 35 KB of packed records per partition is written as
 * records the producer may send, each post once, and the stage keeps running.
 * Mutant caught: produce_packed encoding up to HC_PACK_MAX_BYTES whatever the producer's limit
 * (MSG_SIZE_TOO_LARGE: the window FAILED and the run returns HC_ERR_FATAL). */
static void small_message_max_bytes_makes_smaller_records(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    produce_likes(f, WIDE_POSTS, "q", WIDE_POSTS,
                  "-wide-post-id-wide-post-id-wide-post-id-wide-post-id-wide");
    char mmb[16];
    snprintf(mmb, sizeof(mmb), "%d", SMALL_MMB);
    set(f, "kafka.producer.message.max.bytes", mmb);
    /* one window for all of it, so each partition's posts need several records */
    set(f, "flush.ms", "2000");
    assert_int_equal(hc_config_validate(&f->cfg, errstr, sizeof(errstr)), HC_OK);

    run_to_committed(f, EVENTS + WIDE_POSTS);
    assert_int_equal(count_entered(f, HC_STAGE1_FAILED), 0);
    assert_int_equal(hc_metric_get(f->metrics.txn_abort), 0);

    small_out_t out = {0};
    read_topic(f, f->cfg.topic_partials, (int)f->cfg.topic_partials_partitions, on_small_record,
               &out);
    assert_int_equal(out.posts, WIDE_POSTS);
    assert_int_equal(out.likes, WIDE_POSTS);
    assert_true(out.largest <= SMALL_MMB);
    /* about 35 KB per partition: at least 4 records each on the 2 partitions */
    assert_true(out.records >= 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(abortable_produce_error_aborts_rewinds_and_rereads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(abortable_add_offsets_error_aborts_rewinds_and_rereads,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            abortable_txn_offset_commit_error_aborts_rewinds_and_rereads, setup, teardown),
        cmocka_unit_test_setup_teardown(abortable_end_txn_error_aborts_rewinds_and_rereads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(abort_mid_batch_drops_the_held_events, setup, teardown),
        cmocka_unit_test_setup_teardown(commit_timeout_is_retried_and_commits_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(commit_of_unknown_outcome_renews_the_producer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(fenced_producer_fails_the_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(invalid_producer_epoch_fails_the_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(unusable_producer_at_an_abort_is_renewed, setup, teardown),
        cmocka_unit_test_setup_teardown(unconfirmed_start_waits_for_the_answers_to_agree, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            committed_offset_out_of_the_log_starts_at_the_first_record_and_says_so, setup,
            teardown),
        cmocka_unit_test_setup_teardown(lost_assignment_aborts_the_window_and_commits_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(poison_messages_in_single_partials, setup, teardown),
        cmocka_unit_test_setup_teardown(poison_messages_are_counted_or_dead_lettered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(small_message_max_bytes_makes_smaller_records, setup,
                                        teardown),
    };
    if (getenv("HC_TEST_FILTER")) {
        cmocka_set_test_filter(getenv("HC_TEST_FILTER")); /* one test by name, for debugging */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
