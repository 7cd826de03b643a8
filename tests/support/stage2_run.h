/* For the stage-2 unit tests (tests/unit/test_stage2.c, test_changelog.c): a stage 2 over the
 * fake store (fake_store.h), run on a thread of its own, and partials produced into the mock
 * cluster as stage 1 would write them. The helpers fail the running cmocka test on error. */
#ifndef HOTCOUNT_STAGE2_RUN_H
#define HOTCOUNT_STAGE2_RUN_H

#include <pthread.h>
#include <stdatomic.h>

#include <librdkafka/rdkafka.h>

#include "fake_store.h"
#include "hotcount/admin.h"
#include "hotcount/config.h"
#include "hotcount/metrics.h"
#include "hotcount/stage.h"

/* What every stage-2 test stands on: a configuration, a mock cluster, the fake store it points
 * at, and the test's own producer of partials. */
typedef struct hc_stage2_env {
    hc_config_t cfg;
    hc_mock_t mock;
    hc_fake_store_t *fake; /* owned */
    char uri[32];          /* the fake's */
    rd_kafka_t *producer;  /* owned: the test's, of partials */
} hc_stage2_env_t;

/* In two steps, so a test can place partitions and coordinators on the mock's brokers in
 * between: the defaults plus n key/value pairs, the fake store and a mock cluster of `brokers`
 * brokers; then the brokers key, the checks of the configuration, the fake as the store and the
 * producer. Timeouts set by a test after hc_stage2_env_ready stay as set. */
void hc_stage2_env_start(hc_stage2_env_t *env, const char *const (*kv)[2], size_t n, int brokers);
void hc_stage2_env_ready(hc_stage2_env_t *env);
void hc_stage2_env_fini(hc_stage2_env_t *env);

typedef struct hc_stage2_run {
    hc_stage2_t *s2; /* owned from start until hc_stage2_run_destroy */
    pthread_t thread;
    atomic_bool stop;
    hc_err_t err; /* what hc_stage2_run returned */
    char errstr[512];
} hc_stage2_run_t;

/* Points cfg->store at the fake's URI, past the "store" key's check of the real schemes: the
 * fake is opened over its own ops table, never by scheme. */
void hc_stage2_run_use_fake(hc_config_t *cfg, const char *fake_uri);

/* Creates a stage 2 (instance id `instance`) over the fake store that cfg->store names, and runs
 * it on a new thread. */
void hc_stage2_run_start(hc_stage2_run_t *run, const hc_config_t *cfg, const char *instance,
                         hc_metrics_t *metrics);
/* Asks the stage to stop and joins it; fails the test unless it stopped cleanly. The stage stays
 * readable (hc_stage2_turned_away) until hc_stage2_run_destroy. */
void hc_stage2_run_stop(hc_stage2_run_t *run);
void hc_stage2_run_destroy(hc_stage2_run_t *run);

/* One partial of post (delta, |delta| events, no timestamps) into topic/partition, delivered
 * before this returns. */
void hc_stage2_run_produce(rd_kafka_t *producer, const char *topic, int32_t partition,
                           const char *post, int64_t delta);

#endif
