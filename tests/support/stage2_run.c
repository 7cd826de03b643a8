/* See stage2_run.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "stage2_run.h"

#include <stdlib.h>
#include <string.h>

#include "fake_store.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/store.h"
#include "stage2_impl.h"

void hc_stage2_run_use_fake(hc_config_t *cfg, const char *fake_uri)
{
    free(cfg->store);
    cfg->store = strdup(fake_uri);
    assert_non_null(cfg->store);
}

void hc_stage2_env_start(hc_stage2_env_t *env, const char *const (*kv)[2], size_t n, int brokers)
{
    char errstr[512];
    memset(env, 0, sizeof(*env));
    hc_log_setup(getenv("HC_TEST_LOG") ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&env->cfg, hc_store_facts()), HC_OK);
    env->fake = hc_fake_store_new(env->uri, sizeof(env->uri));
    assert_non_null(env->fake);
    for (size_t i = 0; i < n; i++) {
        if (hc_config_set(&env->cfg, kv[i][0], kv[i][1], errstr, sizeof(errstr)) != HC_OK) {
            fail_msg("%s", errstr);
        }
    }
    if (hc_mock_start(&env->mock, &env->cfg, brokers, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("mock cluster: %s", errstr);
    }
}

void hc_stage2_env_ready(hc_stage2_env_t *env)
{
    char errstr[512];
    if (hc_config_set(&env->cfg, "brokers", env->mock.bootstraps, errstr, sizeof(errstr)) !=
            HC_OK ||
        hc_config_validate(&env->cfg, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s", errstr);
    }
    hc_stage2_run_use_fake(&env->cfg, env->uri);
    hc_kafka_opts_t popts = {0};
    env->producer = hc_kafka_new(&env->cfg, HC_KAFKA_ROLE_PRODUCER, &popts, errstr, sizeof(errstr));
    if (env->producer == NULL) {
        fail_msg("producer: %s", errstr);
    }
}

void hc_stage2_env_fini(hc_stage2_env_t *env)
{
    if (env->producer != NULL) {
        rd_kafka_destroy(env->producer);
    }
    hc_mock_stop(&env->mock);
    hc_fake_store_destroy(env->fake);
    hc_config_fini(&env->cfg);
}

static void *run_thread(void *opaque)
{
    hc_stage2_run_t *run = opaque;
    run->err = hc_stage2_run(run->s2, &run->stop, run->errstr, sizeof(run->errstr));
    return NULL;
}

void hc_stage2_run_start(hc_stage2_run_t *run, const hc_config_t *cfg, const char *instance,
                         hc_metrics_t *metrics)
{
    char errstr[512];
    memset(run, 0, sizeof(*run));
    if (hc_stage2_new_ops(cfg, instance, metrics, hc_fake_store_ops(), &run->s2, errstr,
                          sizeof(errstr)) != HC_OK) {
        fail_msg("stage 2: %s", errstr);
    }
    atomic_store(&run->stop, false);
    assert_int_equal(pthread_create(&run->thread, NULL, run_thread, run), 0);
}

void hc_stage2_run_stop(hc_stage2_run_t *run)
{
    atomic_store(&run->stop, true);
    assert_int_equal(pthread_join(run->thread, NULL), 0);
    if (run->err != HC_OK) {
        fail_msg("stage 2 stopped with %s: %s", hc_err_name(run->err), run->errstr);
    }
}

void hc_stage2_run_destroy(hc_stage2_run_t *run)
{
    hc_stage2_destroy(run->s2);
    run->s2 = NULL;
}

void hc_stage2_run_produce(rd_kafka_t *producer, const char *topic, int32_t partition,
                           const char *post, int64_t delta)
{
    hc_table_entry_t ent = {.post_id = post,
                            .post_id_len = (uint32_t)strlen(post),
                            .delta = delta,
                            .events = delta < 0 ? -delta : delta,
                            .ts_min = HC_TS_NONE,
                            .ts_max = HC_TS_NONE};
    char buf[HC_PARTIAL_MAX_BYTES];
    size_t len = hc_partial_encode(&ent, buf, sizeof(buf));
    assert_true(len > 0);
    assert_int_equal(
        rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                          RD_KAFKA_V_KEY(post, strlen(post)), RD_KAFKA_V_VALUE(buf, len),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
}
