/* Adaptive salting on librdkafka's mock cluster (docs/FORMATS.md, "Adaptive salting").
 *
 * 1. The follower keeps following topic.hotkeys after its catch-up: a record written after
 *    hc_hotkeys_follow_open reaches the view through hc_hotkeys_follow_poll.
 * 2. Counts stay exact when the hot set changes mid-stream: the whole pipeline (two stage-1, two
 *    stage-2 consumers) counts an adaptive producer's events while post "1" is cold (every key
 *    "<post>#0", asserted: no event salted), then, once it is declared hot, salted over the
 *    declaration's 32 ways (asserted: events salted). Stage 1 counts the value's post_id, never
 *    the key, so every stored count must equal the producer's tally of acknowledged events.
 *
 * Detection is kept out of the way (hotkeys.enter.rate far above this stream), so that the only
 * change of the hot set is the declaration the test makes. */
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
#include "hotcount/clock.h"
#include "hotcount/hotkeys_follow.h"
#include "hotcount/kafka.h"
#include "hotcount/loadgen.h"
#include "hotcount/log.h"
#include "hotcount/pipeline.h"
#include "hotcount/producer_key.h"
#include "hotcount/store.h"

#define HALF 10000
#define POSTS 2000
#define DECLARED_SALTS 32

typedef struct fixture {
    hc_config_t cfg;
    hc_mock_t mock;
    char db[64];
} fixture_t;

static void set(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[512];
    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s=%s: %s", key, value, errstr);
    }
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char errstr[512];
    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&f->cfg, hc_store_facts()), HC_OK);
    snprintf(f->db, sizeof(f->db), "/tmp/hc-adaptive-%d.db", (int)getpid());
    char uri[128];
    snprintf(uri, sizeof(uri), "sqlite:%s", f->db);
    set(&f->cfg, "store", uri);
    set(&f->cfg, "flush.ms", "300");
    set(&f->cfg, "instance.id", "adaptive");
    set(&f->cfg, "hotkeys.enter.rate", "1000000000");
    set(&f->cfg, "hotkeys.leave.rate", "999999999");
    assert_int_equal(hc_mock_start(&f->mock, &f->cfg, 1, errstr, sizeof(errstr)), HC_OK);
    set(&f->cfg, "brokers", f->mock.bootstraps);
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

/* What `hotcount hotkeys declare POST --until now+1h --salts N` writes. */
static void declare(const hc_config_t *cfg, const char *post, int32_t salts)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_PRODUCER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    hc_hotkey_record_t rec = {0};
    rec.post_id_len = strlen(post);
    memcpy(rec.post_id, post, rec.post_id_len);
    rec.hot = true;
    rec.since_ms = hc_wall_ms() - 1000;
    rec.source = HC_HOTKEY_DECLARED;
    rec.expires_ms = hc_wall_ms() + 3600000;
    rec.salts = salts;
    char key[HC_POST_ID_MAX + 16];
    size_t klen = hc_hotkey_record_key(&rec, key, sizeof(key));
    char *value = hc_hotkey_record_encode(&rec);
    assert_non_null(value);
    assert_int_equal(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cfg->topic_hotkeys),
                                       RD_KAFKA_V_KEY(key, klen),
                                       RD_KAFKA_V_VALUE(value, strlen(value)),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    free(value);
    assert_int_equal(rd_kafka_flush(rk, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);
}

static void follower_sees_records_written_after_open(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    hc_hotview_t *hv = hc_hotview_new(16);
    hc_hotkeys_follow_t *follow = NULL;
    assert_int_equal(hc_hotkeys_follow_open(&f->cfg, hv, 30000, &follow, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "7", 1, hc_wall_ms()), 0);
    declare(&f->cfg, "7", 8);
    /* bounded by the poll's own wait, not a sleep: 300 polls of up to 100 ms */
    for (int i = 0; i < 300 && hc_hotview_records(hv) == 0; i++) {
        assert_true(hc_hotkeys_follow_poll(follow, 100) >= 0);
    }
    assert_int_equal(hc_hotview_records(hv), 1);
    assert_int_equal(hc_hotview_salts(hv, "7", 1, hc_wall_ms()), 8);
    assert_int_equal(hc_hotkeys_follow_invalid(follow), 0);
    hc_hotkeys_follow_close(follow);
    hc_hotview_destroy(hv);
}

static void report(const char *post_id, size_t len, int64_t acked, int64_t stored, void *opaque)
{
    int *shown = opaque;
    if ((*shown)++ < 10) {
        print_message("post %.*s: stored %" PRId64 ", acknowledged %" PRId64 "\n", (int)len,
                      post_id, stored, acked);
    }
}

static void counts_stay_exact_when_hot_set_changes_mid_stream(void **state)
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
        .events = HALF,
        .posts = POSTS,
        .zipf_s = 1.1,
        .unlike_ratio = 0.1,
        .seed = 7,
        .adaptive = true,
    };
    /* first half: nothing hot, every key "<post>#0" */
    assert_int_equal(hc_loadgen_run(&f->cfg, &opts, &tally, NULL, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(atomic_load(&tally.salted), 0);
    int64_t first_half_post1 = tally.likes[1];

    /* second half: post 1 declared hot; the producer salts it over 32 ways */
    declare(&f->cfg, "1", DECLARED_SALTS);
    opts.seed = 8;
    assert_int_equal(hc_loadgen_run(&f->cfg, &opts, &tally, NULL, errstr, sizeof(errstr)), HC_OK);
    int64_t salted = atomic_load(&tally.salted);
    /* post 1 is rank 1 of a Zipf(1.1) over 2000 posts, about 15 % of the events: salted it
     * lands on salt 0 once in 32, so most of its events carry another salt */
    assert_true(salted > HALF / 20);
    assert_true(atomic_load(&tally.hot_records) >= 1);
    assert_true(tally.likes[1] != first_half_post1);

    int64_t valid = atomic_load(&tally.acked_valid);
    assert_int_equal(valid, 2 * HALF);
    assert_int_equal(atomic_load(&tally.failed), 0);
    for (int i = 0; i < 1200; i++) {
        if (hc_metric_get(metrics.events_ok) == valid &&
            hc_metric_get(metrics.partials_consumed) == hc_metric_get(metrics.partials) &&
            hc_metric_get(metrics.events_stored) == valid) {
            break;
        }
        assert_false(hc_pipeline_failed(pl, errstr, sizeof(errstr)));
        sleep_ms(100);
    }
    assert_int_equal(hc_pipeline_stop(pl, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_metric_get(metrics.events_stored), valid);

    hc_store_t *st = NULL;
    assert_int_equal(hc_store_open(&f->cfg, &st, errstr, sizeof(errstr)), HC_OK);
    int64_t rows = 0, mismatches = 0;
    int shown = 0;
    assert_int_equal(
        hc_tally_compare(&tally, st, &rows, &mismatches, report, &shown, errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(mismatches, 0);
    assert_true(rows > 100);
    hc_store_close(st);
    hc_tally_fini(&tally);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(follower_sees_records_written_after_open, setup, teardown),
        cmocka_unit_test_setup_teardown(counts_stay_exact_when_hot_set_changes_mid_stream, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
