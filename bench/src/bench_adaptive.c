/* Partials per event with static and adaptive salting (issue 18, docs/FORMATS.md "Adaptive
 * salting"), on librdkafka's mock cluster in this process: the whole pipeline (two stage-1, one
 * stage-2 consumer, SQLite in a temp file) counts a Zipfian stream from the load generator at a
 * fixed rate, once keyed statically (every post over `salts` ways) and once adaptively
 * (`--adaptive`'s follower): the hot set is what stage 2 detects (hotkeys.enter.rate, default
 * 1000 likes/s, published to topic.hotkeys) plus, with --hot K, the top K posts declared hot
 * before the stream starts. A partial is one (stage-1 window, post) record; salting spreads a
 * post over raw partitions and so over both stage-1 consumers' tables.
 *
 *   bench_adaptive [--events N] [--rate R] [--posts N] [--zipf S] [--hot K] [--flush-ms MS]
 *
 * Prints one JSON object per mode. Counts are checked against the producer's tally; a mismatch
 * exits 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/hotset.h"
#include "hotcount/kafka.h"
#include "hotcount/loadgen.h"
#include "hotcount/log.h"
#include "hotcount/pipeline.h"
#include "hotcount/store.h"

typedef struct args {
    uint64_t events, posts, hot;
    double rate, zipf;
    const char *flush_ms;
} args_t;

static int set(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[512];
    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_adaptive: %s=%s: %s\n", key, value, errstr);
        return -1;
    }
    return 0;
}

static int declare_top(const hc_config_t *cfg, uint64_t hot)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_PRODUCER, NULL, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "bench_adaptive: %s\n", errstr);
        return -1;
    }
    for (uint64_t rank = 1; rank <= hot; rank++) {
        hc_hotkey_record_t rec = {0};
        rec.post_id_len = (size_t)snprintf(rec.post_id, sizeof(rec.post_id), "%" PRIu64, rank);
        rec.hot = true;
        rec.since_ms = hc_wall_ms() - 1000;
        rec.source = HC_HOTKEY_DECLARED;
        rec.expires_ms = hc_wall_ms() + 3600000;
        char key[HC_POST_ID_MAX + 16];
        size_t klen = hc_hotkey_record_key(&rec, key, sizeof(key));
        char *value = hc_hotkey_record_encode(&rec);
        if (!value ||
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cfg->topic_hotkeys), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE(value, strlen(value)),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            free(value);
            rd_kafka_destroy(rk);
            return -1;
        }
        free(value);
    }
    int rc = rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
    rd_kafka_destroy(rk);
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int run(const args_t *a, bool adaptive)
{
    char errstr[512], db[64], uri[96];
    hc_config_t cfg;
    hc_mock_t mock;
    int rc = 1;
    if (hc_config_init(&cfg) != HC_OK) {
        return 1;
    }
    snprintf(db, sizeof(db), "/tmp/hc-bench-adaptive-%d.db", (int)getpid());
    snprintf(uri, sizeof(uri), "sqlite:%s", db);
    unlink(db);
    if (set(&cfg, "store", uri) || set(&cfg, "flush.ms", a->flush_ms) ||
        set(&cfg, "instance.id", "bench-adaptive")) {
        hc_config_fini(&cfg);
        return 1;
    }
    if (hc_mock_start(&mock, &cfg, 1, errstr, sizeof(errstr)) != HC_OK ||
        set(&cfg, "brokers", mock.bootstraps)) {
        fprintf(stderr, "bench_adaptive: mock: %s\n", errstr);
        hc_config_fini(&cfg);
        return 1;
    }
    hc_metrics_t metrics = {0};
    atomic_bool stop = false;
    hc_pipeline_t *pl = NULL;
    hc_tally_t tally;
    bool tally_ok = false;
    if (hc_pipeline_start(&cfg, 2, 1, &metrics, &stop, &pl, errstr, sizeof(errstr)) != HC_OK ||
        !hc_pipeline_wait_settled(pl, 500, 60000)) {
        fprintf(stderr, "bench_adaptive: pipeline: %s\n", errstr);
        goto out;
    }
    if (adaptive && declare_top(&cfg, a->hot) != 0) {
        fprintf(stderr, "bench_adaptive: declaring the hot posts failed\n");
        goto out;
    }
    if (hc_tally_init(&tally, a->posts) != HC_OK) {
        goto out;
    }
    tally_ok = true;
    hc_loadgen_opts_t opts = {.events = a->events,
                              .rate = a->rate,
                              .posts = a->posts,
                              .zipf_s = a->zipf,
                              .seed = 1,
                              .adaptive = adaptive};
    if (hc_loadgen_run(&cfg, &opts, &tally, NULL, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_adaptive: produce: %s\n", errstr);
        goto out;
    }
    int64_t valid = atomic_load(&tally.acked_valid);
    for (int i = 0;
         i < 1200 && !(hc_metric_get(metrics.events_stored) == valid &&
                       hc_metric_get(metrics.partials_consumed) == hc_metric_get(metrics.partials));
         i++) {
        if (hc_pipeline_failed(pl, errstr, sizeof(errstr))) {
            fprintf(stderr, "bench_adaptive: %s\n", errstr);
            goto out;
        }
        sleep_ms(100);
    }
    if (hc_pipeline_stop(pl, errstr, sizeof(errstr)) != HC_OK) {
        pl = NULL;
        fprintf(stderr, "bench_adaptive: stop: %s\n", errstr);
        goto out;
    }
    pl = NULL;
    hc_store_t *st = NULL;
    int64_t rows = 0, mismatches = -1;
    if (hc_store_open(&cfg, &st, errstr, sizeof(errstr)) == HC_OK) {
        hc_tally_compare(&tally, st, &rows, &mismatches, NULL, NULL, errstr, sizeof(errstr));
        hc_store_close(st);
    }
    int64_t events = hc_metric_get(metrics.events_ok);
    int64_t partials = hc_metric_get(metrics.partials);
    printf(
        "{\"mode\":\"%s\",\"events\":%" PRId64 ",\"partials\":%" PRId64
        ",\"partials_per_event\":%.4f,\"salted_events\":%" PRId64 ",\"hot_posts\":%" PRIu64
        ",\"hot_records\":%" PRId64 ",\"posts_stored\":%" PRId64 ",\"mismatches\":%" PRId64 "}\n",
        adaptive ? "adaptive" : "static", events, partials,
        events > 0 ? (double)partials / (double)events : 0.0, (int64_t)atomic_load(&tally.salted),
        adaptive ? a->hot : 0, (int64_t)atomic_load(&tally.hot_records), rows, mismatches);
    fflush(stdout);
    rc = mismatches == 0 && events == valid ? 0 : 1;
out:
    if (pl) {
        atomic_store(&stop, true);
        hc_pipeline_stop(pl, errstr, sizeof(errstr));
    }
    if (tally_ok) {
        hc_tally_fini(&tally);
    }
    hc_mock_stop(&mock);
    hc_config_fini(&cfg);
    const char *suffixes[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[96];
        snprintf(path, sizeof(path), "%s%s", db, suffixes[i]);
        unlink(path);
    }
    return rc;
}

int main(int argc, char **argv)
{
    args_t a = {.events = 200000,
                .posts = 100000,
                .hot = 16,
                .rate = 20000,
                .zipf = 1.1,
                .flush_ms = "1000"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--events") == 0) {
            a.events = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--rate") == 0) {
            a.rate = strtod(argv[i + 1], NULL);
        } else if (strcmp(argv[i], "--posts") == 0) {
            a.posts = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--zipf") == 0) {
            a.zipf = strtod(argv[i + 1], NULL);
        } else if (strcmp(argv[i], "--hot") == 0) {
            a.hot = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--flush-ms") == 0) {
            a.flush_ms = argv[i + 1];
        } else {
            fprintf(stderr, "bench_adaptive: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    hc_log_setup(HC_LOG_ERROR, HC_LOG_TEXT);
    int rc = run(&a, false);
    return run(&a, true) | rc;
}
