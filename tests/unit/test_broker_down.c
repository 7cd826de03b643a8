/* A stage started while the broker is down (issue 16, item 5) waits and retries with back-off,
 * not ready meanwhile, instead of exiting; once the broker answers it counts everything. On
 * librdkafka's mock cluster with its one broker set down (rd_kafka_mock_broker_set_down)
 * before the stage starts and set up again after WAIT_DOWN_MS.
 *
 * Stage 1 used to give up after txn_init_attempts init_transactions calls (5 x 60 s, then exit
 * 1); the test shortens those calls to 300 ms x 2 attempts, so that mutant (src/stage/stage1.c
 * on_start calling init_producer, as before) exits within a second and the test sees it.
 * Stage 2 always waited (its consumer waits for its group); the test keeps it that way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/metrics.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"
#include "stage2_run.h"

#include <librdkafka/rdkafka_mock.h> /* after rdkafka.h (stage2_run.h) */

#define EVENTS 50
#define WAIT_MS 30000     /* a bound for a condition that holds within seconds */
#define WAIT_DOWN_MS 3000 /* how long the broker stays down after the stage started */

typedef struct s1_run {
    hc_stage1_t *s1;
    pthread_t tid;
    atomic_bool stop;
    atomic_bool done;
    hc_err_t err;
    char errstr[512];
} s1_run_t;

static void *run_stage1(void *arg)
{
    s1_run_t *r = arg;
    r->err = hc_stage1_run(r->s1, &r->stop, r->errstr, sizeof(r->errstr));
    atomic_store(&r->done, true);
    return NULL;
}

static void broker_down(hc_mock_t *mock, bool down)
{
    rd_kafka_resp_err_t err = down ? rd_kafka_mock_broker_set_down(mock->mcluster, 1)
                                   : rd_kafka_mock_broker_set_up(mock->mcluster, 1);
    assert_int_equal(err, RD_KAFKA_RESP_ERR_NO_ERROR);
}

/* Waits WAIT_DOWN_MS, failing the test as soon as `done` turns true; checks meanwhile that the
 * process is not ready. */
static void assert_waits(const atomic_bool *done, hc_metrics_t *m, int64_t flush_ms,
                         const char *who, const char *errstr)
{
    int64_t until = hc_now_ms() + WAIT_DOWN_MS;
    while (hc_now_ms() < until) {
        if (atomic_load(done)) {
            fail_msg("%s exited while the broker was down: %s", who, errstr);
        }
        assert_false(hc_metrics_is_ready(m, hc_now_ms(), flush_ms));
        hc_sleep_ms(20);
    }
}

static void stage1_waits_for_the_broker(void **state)
{
    (void)state;
    hc_config_t cfg;
    hc_mock_t mock;
    hc_metrics_t metrics;
    char errstr[512];
    hc_log_setup(getenv("HC_TEST_LOG") ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    const char *const kv[][2] = {{"instance.id", "down1"},
                                 {"topic.raw.partitions", "1"},
                                 {"topic.partials.partitions", "1"},
                                 {"flush.ms", "100"}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
        assert_int_equal(hc_config_set(&cfg, kv[i][0], kv[i][1], errstr, sizeof(errstr)), HC_OK);
    }
    assert_int_equal(hc_mock_start(&mock, &cfg, 1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "brokers", mock.bootstraps, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_config_validate(&cfg, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_metrics_init(&metrics), HC_OK);
    rd_kafka_t *rk = hc_kafka_new(&cfg, HC_KAFKA_ROLE_PRODUCER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    for (int i = 0; i < EVENTS; i++) {
        static const char ev[] = "{\"post_id\":\"p1\",\"op\":\"like\"}";
        assert_int_equal(
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cfg.topic_raw), RD_KAFKA_V_KEY("p1", 2),
                              RD_KAFKA_V_VALUE((void *)ev, sizeof(ev) - 1),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
            RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    assert_int_equal(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(rk);

    /* short init_transactions calls, few attempts: the old start gave up after 2 x 300 ms */
    cfg.timeouts.txn_call_ms = 300;
    cfg.timeouts.txn_init_attempts = 2;
    broker_down(&mock, true);
    s1_run_t r = {0};
    assert_int_equal(hc_stage1_new(&cfg, NULL, &metrics, &r.s1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(pthread_create(&r.tid, NULL, run_stage1, &r), 0);
    assert_waits(&r.done, &metrics, cfg.flush_ms, "stage 1", r.errstr);
    broker_down(&mock, false);
    int64_t deadline = hc_now_ms() + WAIT_MS;
    while (hc_metric_get(metrics.events_ok) < EVENTS && !atomic_load(&r.done) &&
           hc_now_ms() < deadline) {
        hc_sleep_ms(10);
    }
    assert_int_equal(hc_metric_get(metrics.events_ok), EVENTS);
    atomic_store(&r.stop, true);
    assert_int_equal(pthread_join(r.tid, NULL), 0);
    if (r.err != HC_OK) {
        fail_msg("stage 1 stopped with %s: %s", hc_err_name(r.err), r.errstr);
    }
    hc_stage1_destroy(r.s1);
    hc_metrics_fini(&metrics);
    hc_mock_stop(&mock);
    hc_config_fini(&cfg);
}

static void stage2_waits_for_the_broker(void **state)
{
    (void)state;
    hc_stage2_env_t env;
    hc_metrics_t metrics;
    static const char *const kv[][2] = {
        {"flush.ms", "100"}, {"instance.id", "down2"}, {"topic.partials.partitions", "1"}};
    hc_stage2_env_start(&env, kv, sizeof(kv) / sizeof(kv[0]), 1);
    hc_stage2_env_ready(&env);
    assert_int_equal(hc_metrics_init(&metrics), HC_OK);
    hc_stage2_run_produce(env.producer, env.cfg.topic_partials, 0, "a", 3);
    broker_down(&env.mock, true);
    hc_stage2_run_t run;
    hc_stage2_run_start(&run, &env.cfg, "down2", &metrics);
    /* hc_stage2_run_t has no "done": a run that returned has err or errstr set, or a joinable
     * thread; the store seeing no read is the sign it is still waiting for the group */
    int64_t until = hc_now_ms() + WAIT_DOWN_MS;
    while (hc_now_ms() < until) {
        assert_int_equal(pthread_tryjoin_np(run.thread, NULL), EBUSY);
        assert_false(hc_metrics_is_ready(&metrics, hc_now_ms(), env.cfg.flush_ms));
        hc_sleep_ms(20);
    }
    broker_down(&env.mock, false);
    int64_t want[1] = {1};
    assert_true(hc_fake_store_wait_offsets(env.fake, env.cfg.group_stage2, env.cfg.topic_partials,
                                           want, 1, WAIT_MS));
    assert_int_equal(hc_fake_store_likes(env.fake, "a", 1), 3);
    hc_stage2_run_stop(&run);
    hc_stage2_run_destroy(&run);
    hc_metrics_fini(&metrics);
    hc_stage2_env_fini(&env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stage1_waits_for_the_broker),
        cmocka_unit_test(stage2_waits_for_the_broker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
