/* The whole pipeline on librdkafka's in-process mock cluster: two stage-1 and two stage-2
 * consumers on threads, 200 000 Zipfian events with unlikes and malformed events mixed in.
 *
 * The oracle is independent of hotcount's parser: the load generator's tally of what the
 * broker acknowledged, per post. Every post's stored count must equal it, no other post may be
 * stored, and the dead-letter topic must hold exactly the malformed events, each with its
 * reason and source. Exactly-once across aborts and restarts is proven on the real broker
 * (the mock neither stores transactional offsets nor filters aborted records). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/admin.h"
#include "hotcount/event.h"
#include "hotcount/kafka.h"
#include "hotcount/loadgen.h"
#include "hotcount/log.h"
#include "hotcount/pipeline.h"
#include "hotcount/store.h"
#include "hotcount/topic_read.h"

#define EVENTS 200000
#define POSTS 20000

typedef struct fixture {
    hc_config_t cfg;
    hc_mock_t mock;
    char db[64];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char errstr[512];
    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&f->cfg, hc_store_facts()), HC_OK);
    snprintf(f->db, sizeof(f->db), "/tmp/hc-e2e-%d.db", (int)getpid());
    char uri[128];
    snprintf(uri, sizeof(uri), "sqlite:%s", f->db);
    assert_int_equal(hc_config_set(&f->cfg, "store", uri, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "flush.ms", "300", errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "instance.id", "e2e", errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_mock_start(&f->mock, &f->cfg, 1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "brokers", f->mock.bootstraps, errstr, sizeof(errstr)),
                     HC_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    hc_mock_stop(&f->mock);
    hc_config_fini(&f->cfg);
    const char *suffixes[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[80];
        snprintf(path, sizeof(path), "%s%s", f->db, suffixes[i]);
        unlink(path);
    }
    free(f);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void report(const char *post_id, size_t len, int64_t acked, int64_t stored, void *opaque)
{
    int *shown = opaque;
    if ((*shown)++ < 10) {
        print_message("post %.*s: stored %" PRId64 ", acknowledged %" PRId64 "\n", (int)len,
                      post_id, stored, acked);
    }
}

typedef struct dlq_tally {
    const hc_config_t *cfg;
    int64_t records;
    int64_t bad_headers;
} dlq_tally_t;

/* One dead letter: its headers must be the contract's, its reason the one the contract's rules
 * give for the original bytes. */
static hc_err_t check_dead_letter(const rd_kafka_message_t *rkm, void *opaque)
{
    dlq_tally_t *t = opaque;
    const hc_config_t *cfg = t->cfg;
    t->records++;
    rd_kafka_headers_t *hdrs = NULL;
    const void *reason = NULL, *source = NULL;
    size_t reason_len = 0, source_len = 0;
    bool ok = rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
              rd_kafka_header_get_last(hdrs, "hotcount-error", &reason, &reason_len) ==
                  RD_KAFKA_RESP_ERR_NO_ERROR &&
              rd_kafka_header_get_last(hdrs, "hotcount-source", &source, &source_len) ==
                  RD_KAFKA_RESP_ERR_NO_ERROR;
    if (ok) {
        hc_event_t ev;
        hc_event_reason_t why = hc_event_parse(rkm->payload ? rkm->payload : "", rkm->len,
                                               (size_t)cfg->event_max_bytes, &ev);
        const char *want = hc_event_reason_str(why);
        ok = why != HC_EVENT_OK && strlen(want) == reason_len &&
             memcmp(want, reason, reason_len) == 0 && source_len > strlen(cfg->topic_raw) + 1 &&
             memcmp(source, cfg->topic_raw, strlen(cfg->topic_raw)) == 0;
    }
    t->bad_headers += !ok;
    return HC_OK;
}

/* Reads the whole dead-letter topic; checks each record's headers against the contract. */
static int64_t read_dlq(const hc_config_t *cfg, int64_t *bad_headers)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    hc_topic_range_t ranges[64];
    assert_true(cfg->topic_dlq_partitions <= 64);
    for (int p = 0; p < cfg->topic_dlq_partitions; p++) {
        ranges[p] = (hc_topic_range_t){p, HC_OFFSET_NONE, INT64_MAX};
    }
    dlq_tally_t t = {cfg, 0, 0};
    hc_err_t err =
        hc_topic_read_ranges(rk, cfg->topic_dlq, ranges, (size_t)cfg->topic_dlq_partitions,
                             check_dead_letter, &t, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("reading %s: %s", cfg->topic_dlq, errstr);
    }
    rd_kafka_destroy(rk);
    *bad_headers = t.bad_headers;
    return t.records;
}

static void pipeline_counts_every_like_exactly_once(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    hc_metrics_t metrics = {0};
    atomic_bool stop = false;
    hc_pipeline_t *pl = NULL;
    assert_int_equal(hc_pipeline_start(&f->cfg, 2, 2, &metrics, &stop, &pl, errstr, sizeof(errstr)),
                     HC_OK);
    assert_true(hc_pipeline_wait_settled(pl, 500, 60000));

    hc_tally_t tally;
    assert_int_equal(hc_tally_init(&tally, POSTS), HC_OK);
    hc_loadgen_opts_t opts = {
        .events = EVENTS,
        .posts = POSTS,
        .zipf_s = 1.1,
        .unlike_ratio = 0.1,
        .invalid_ratio = 0.01,
        .seed = 42,
        .consumed = &metrics.events_consumed,
        .max_ahead = 100000,
    };
    assert_int_equal(hc_loadgen_run(&f->cfg, &opts, &tally, NULL, errstr, sizeof(errstr)), HC_OK);
    int64_t valid = atomic_load(&tally.acked_valid);
    int64_t invalid = atomic_load(&tally.acked_invalid);
    assert_int_equal(valid + invalid, EVENTS);
    assert_int_equal(atomic_load(&tally.failed), 0);
    assert_true(invalid > 0);

    /* drained: stage 1 committed every event and stage 2 stored every partial */
    for (int i = 0; i < 1200; i++) {
        if (hc_metric_get(metrics.events_ok) == valid &&
            hc_metric_get(metrics.events_invalid) == invalid &&
            hc_metric_get(metrics.partials_consumed) == hc_metric_get(metrics.partials) &&
            hc_metric_get(metrics.events_stored) == valid) {
            break;
        }
        assert_false(hc_pipeline_failed(pl, errstr, sizeof(errstr)));
        sleep_ms(100);
    }
    assert_int_equal(hc_pipeline_stop(pl, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_metric_get(metrics.events_ok), valid);
    assert_int_equal(hc_metric_get(metrics.events_invalid), invalid);
    assert_int_equal(hc_metric_get(metrics.events_stored), valid);
    assert_int_equal(hc_metric_get(metrics.txn_abort), 0);

    hc_store_t *st = NULL;
    assert_int_equal(hc_store_open(&f->cfg, &st, errstr, sizeof(errstr)), HC_OK);
    int64_t rows = 0, mismatches = 0;
    int shown = 0;
    assert_int_equal(
        hc_tally_compare(&tally, st, &rows, &mismatches, report, &shown, errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(mismatches, 0);
    assert_true(rows > 1000);
    /* A hot post's likes arrive as several partials (from both stage-1 consumers, which share
     * its salted partitions, and from successive windows) that stage 2 sums into one count:
     * more partials than posts. Timing-free, unlike counting merges inside one stage-2 window,
     * which a loaded machine can make vanish. */
    assert_true(hc_metric_get(metrics.partials) > rows);
    hc_store_close(st);

    int64_t bad_headers = 0;
    assert_int_equal(read_dlq(&f->cfg, &bad_headers), invalid);
    assert_int_equal(bad_headers, 0);
    hc_tally_fini(&tally);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(pipeline_counts_every_like_exactly_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
