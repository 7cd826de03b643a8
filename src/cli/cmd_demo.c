/* demo: the whole pipeline in one process, on librdkafka's in-process mock cluster and a fresh
 * SQLite file, checked against the load generator's own tally of acknowledged events.
 *
 * The mock cluster stores no transactional offsets, writes no transaction markers and keeps only
 * ~5 MiB per partition (see KAFKA-FACTS). So the demo lets both consumer groups settle before it
 * produces (a later rebalance would restart partitions from the beginning), holds the producer
 * back when stage 1 falls behind (so no partition overflows), and never trusts a re-read of the
 * topic: the tally of acknowledged events is the oracle. */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/loadgen.h"
#include "hotcount/log.h"
#include "hotcount/metrics_http.h"
#include "hotcount/partial_auth.h"
#include "hotcount/pipeline.h"
#include "hotcount/store.h"

static const hc_cli_opt_t demo_opts[] = {
    {"events", 'n', "N", "like events to produce (default 1000000)"},
    {"posts", 'p', "N", "distinct posts (default 100000)"},
    {"zipf", 's', "S", "Zipf exponent of post popularity (default 1.1)"},
    {"unlike-ratio", 'u', "F", "share of unlikes (default 0.05)"},
    {"invalid-ratio", 'i', "F", "share of malformed events sent to the DLQ (default 0.001)"},
    {"stage1", 0, "N", "stage-1 consumers (default 2)"},
    {"stage2", 0, "N", "stage-2 consumers (default 2)"},
    {"db", 0, "PATH", "SQLite file, recreated (default hotcount-demo.db)"},
    {"quiet", 'q', NULL, "no live progress lines"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t demo_cmd = {
    "demo", "",
    "Runs everything in one process: an in-process Kafka (librdkafka's mock cluster), stage 1 "
    "with several consumers, stage 2, and a fresh SQLite store. Produces Zipfian likes, shows "
    "live progress, then prints the top posts, events per store write and a verification "
    "against the producer's tally of acknowledged events. Exit 0 only when every count is "
    "exact.",
    demo_opts};

typedef struct producer_thread {
    const hc_config_t *cfg;
    hc_loadgen_opts_t opts;
    hc_tally_t *tally;
    atomic_bool *stop;
    atomic_bool done;
    hc_err_t err;
    char errstr[512];
} producer_thread_t;

static void *producer_main(void *arg)
{
    producer_thread_t *p = arg;
    p->err = hc_loadgen_run(p->cfg, &p->opts, p->tally, p->stop, p->errstr, sizeof(p->errstr));
    atomic_store(&p->done, true);
    return NULL;
}

typedef struct progress {
    int64_t t;
    int64_t produced, aggregated, stored;
} progress_t;

static progress_t progress_now(const hc_tally_t *tally, hc_metrics_t *m)
{
    return (progress_t){
        hc_now_ms(),
        (int64_t)(atomic_load(&tally->acked_valid) + atomic_load(&tally->acked_invalid)),
        (int64_t)(hc_metric_get(m->events_ok) + hc_metric_get(m->events_invalid)),
        (int64_t)hc_metric_get(m->events_stored),
    };
}

static void print_progress(const progress_t *now, const progress_t *prev, hc_metrics_t *m)
{
    double dt = (double)(now->t - prev->t) / 1000.0;
    if (dt <= 0) {
        dt = 1;
    }
    printf("  produced %9" PRId64 " (%7.0f/s)   aggregated %9" PRId64
           " (%7.0f/s)   stored %9" PRId64 " (%7.0f/s)   store writes %8" PRId64 "\n",
           now->produced, (double)(now->produced - prev->produced) / dt, now->aggregated,
           (double)(now->aggregated - prev->aggregated) / dt, now->stored,
           (double)(now->stored - prev->stored) / dt,
           (int64_t)hc_metric_get(m->store_keys_written));
    fflush(stdout);
}

static void report_mismatch(const char *post, size_t len, int64_t acked, int64_t stored,
                            void *opaque)
{
    int64_t *shown = opaque;
    if ((*shown)++ < 20) {
        printf("  mismatch: post %.*s: produced %" PRId64 ", stored %" PRId64 "\n", (int)len, post,
               acked, stored);
    }
}

/* The demo signs its partials like a production deployment should (docs/FORMATS.md,
 * "Authenticated partials"): a fresh key in a private temporary file (mode 0600), removed when
 * the demo ends. false when no file could be made (errstr says why). */
static bool demo_auth_key(char *path, size_t path_size, char *errstr, size_t errstr_size)
{
    uint8_t rnd[32];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        hc_errstr_set(errstr, errstr_size, "no random bytes for the demo's partials key");
        return false;
    }
    char text[200];
    size_t len = hc_auth_key_file_text("demo", rnd, text, sizeof(text));
    memset(rnd, 0, sizeof(rnd));
    const char *dir = getenv("TMPDIR");
    snprintf(path, path_size, "%s/hotcount-demo-key.XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path); /* 0600 */
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    memset(text, 0, sizeof(text));
    if (fd >= 0) {
        close(fd);
    }
    if (!ok) {
        hc_errstr_set(errstr, errstr_size, "cannot write the demo's partials key in %s",
                      dir && dir[0] ? dir : "/tmp");
        if (fd >= 0) {
            unlink(path);
        }
        path[0] = '\0';
    }
    return ok;
}

int hc_cmd_demo(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &demo_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_config_t *cfg = &cli.cfg;
    producer_thread_t prod = {.cfg = cfg};
    uint64_t n1, n2;
    if (!hc_cli_u64(&cli, "events", 1000000, &prod.opts.events) ||
        !hc_cli_u64(&cli, "posts", 100000, &prod.opts.posts) ||
        !hc_cli_double(&cli, "zipf", 1.1, &prod.opts.zipf_s) ||
        !hc_cli_double(&cli, "unlike-ratio", 0.05, &prod.opts.unlike_ratio) ||
        !hc_cli_double(&cli, "invalid-ratio", 0.001, &prod.opts.invalid_ratio) ||
        !hc_cli_u64(&cli, "stage1", 2, &n1) || !hc_cli_u64(&cli, "stage2", 2, &n2)) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    if (n1 < 1 || n2 < 1 || n1 + n2 > HC_PIPELINE_MAX_STAGES || prod.opts.posts < 1) {
        fprintf(stderr,
                "hotcount demo: --stage1 and --stage2 must be >= 1 and %d in all; "
                "--posts >= 1\n",
                HC_PIPELINE_MAX_STAGES);
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    prod.opts.seed = 1;
    bool quiet = hc_cli_has(&cli, "quiet");
    hc_cli_install_signals();

    char errstr[512];
    hc_mock_t mock = {0};
    hc_tally_t tally = {0};
    hc_metrics_t metrics;
    hc_metrics_http_t *http = NULL;
    hc_pipeline_t *pl = NULL;
    pthread_t ptid;
    bool producing = false;
    atomic_bool stop_stages = false;
    hc_store_t *st = NULL;
    char key_path[512] = "";
    status = HC_EXIT_FAILED;
    if (hc_metrics_init(&metrics) != HC_OK) {
        fprintf(stderr, "hotcount demo: out of memory\n");
        hc_cli_fini(&cli);
        return HC_EXIT_FAILED;
    }

    /* A fresh store: counts from an earlier run would not match this run's tally. */
    const char *db = hc_cli_str(&cli, "db", "hotcount-demo.db");
    char store_uri[1024];
    snprintf(store_uri, sizeof(store_uri), "sqlite:%s", db);
    const char *suffixes[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[1100];
        snprintf(path, sizeof(path), "%s%s", db, suffixes[i]);
        unlink(path);
    }
    if (hc_config_set(cfg, "store", store_uri, errstr, sizeof(errstr)) != HC_OK ||
        hc_mock_start(&mock, cfg, 1, errstr, sizeof(errstr)) != HC_OK ||
        hc_config_set(cfg, "brokers", mock.bootstraps, errstr, sizeof(errstr)) != HC_OK) {
        goto fail;
    }
    if (hc_tally_init(&tally, prod.opts.posts) != HC_OK) {
        hc_errstr_set(errstr, sizeof(errstr), "out of memory");
        goto fail;
    }
    printf("hotcount demo: in-process Kafka at %s (%d raw partitions, %d partials partitions), "
           "SQLite %s\n",
           mock.bootstraps, cfg->topic_raw_partitions, cfg->topic_partials_partitions, db);
    /* Metrics are a bonus in the demo: a busy port must not stop it. */
    if (hc_metrics_http_start(cfg->metrics_listen, &metrics, cfg->flush_ms, &http, errstr,
                              sizeof(errstr)) != HC_OK) {
        hc_log(HC_LOG_WARN, "demo", "no metrics endpoint: %s", errstr);
    } else if (http) {
        printf("metrics: http://%s/metrics\n", cfg->metrics_listen);
    }
    printf("starting %" PRIu64 " stage-1 and %" PRIu64 " stage-2 consumers, flush.ms=%lld\n", n1,
           n2, (long long)cfg->flush_ms);
    if (!cfg->partials_auth_key_file[0] &&
        (!demo_auth_key(key_path, sizeof(key_path), errstr, sizeof(errstr)) ||
         hc_config_set(cfg, "partials.auth.key.file", key_path, errstr, sizeof(errstr)) != HC_OK)) {
        goto fail;
    }
    if (hc_config_set(cfg, "instance.id", "demo", errstr, sizeof(errstr)) != HC_OK ||
        hc_pipeline_start(cfg, (int)n1, (int)n2, &metrics, &stop_stages, &pl, errstr,
                          sizeof(errstr)) != HC_OK) {
        goto fail;
    }
    if (!hc_pipeline_wait_settled(pl, 1000, 60000)) {
        if (!hc_pipeline_failed(pl, errstr, sizeof(errstr))) {
            hc_errstr_set(errstr, sizeof(errstr), "consumer groups did not settle within 60 s");
        }
        goto fail;
    }

    printf("producing %" PRIu64 " events over %" PRIu64 " posts (Zipf s=%.2f, %.1f%% unlikes, "
           "%.2f%% malformed)\n",
           prod.opts.events, prod.opts.posts, prod.opts.zipf_s, prod.opts.unlike_ratio * 100,
           prod.opts.invalid_ratio * 100);
    /* Keep stage 1 within ~2 MiB per raw partition of the producer. */
    prod.opts.consumed = &metrics.events_consumed;
    prod.opts.max_ahead = 16000 * (int64_t)cfg->topic_raw_partitions;
    prod.tally = &tally;
    prod.stop = &hc_cli_stop;
    int64_t t0 = hc_now_ms();
    pthread_create(&ptid, NULL, producer_main, &prod);
    producing = true;

    progress_t prev = progress_now(&tally, &metrics);
    int64_t settle_deadline = -1;
    for (;;) {
        hc_cli_wait(quiet ? 50 : 1000, &hc_cli_stop); /* a stop is looked at below */
        progress_t now = progress_now(&tally, &metrics);
        if (!quiet) {
            print_progress(&now, &prev, &metrics);
            prev = now;
        }
        if (hc_pipeline_failed(pl, NULL, 0) || atomic_load(&hc_cli_stop)) {
            break;
        }
        if (!atomic_load(&prod.done)) {
            continue;
        }
        if (settle_deadline < 0) {
            settle_deadline = hc_now_ms() + 60000;
        }
        bool drained = now.aggregated == now.produced &&
                       hc_metric_get(metrics.events_stored) == hc_metric_get(metrics.events_ok) &&
                       hc_metric_get(metrics.partials_consumed) == hc_metric_get(metrics.partials);
        if (drained || hc_now_ms() > settle_deadline) {
            break;
        }
    }
    double secs = (double)(hc_now_ms() - t0) / 1000.0;
    pthread_join(ptid, NULL);
    producing = false;
    hc_err_t stage_err = hc_pipeline_stop(pl, errstr, sizeof(errstr));
    pl = NULL;
    if (stage_err != HC_OK) {
        goto fail;
    }
    if (prod.err != HC_OK) {
        hc_errstr_set(errstr, sizeof(errstr), "producer: %s", prod.errstr);
        goto fail;
    }
    if (atomic_load(&hc_cli_stop)) {
        hc_errstr_set(errstr, sizeof(errstr), "interrupted");
        goto fail;
    }

    if (hc_store_open(cfg, &st, errstr, sizeof(errstr)) != HC_OK) {
        goto fail;
    }
    hc_store_row_t top[10];
    size_t ntop = 0;
    if (hc_store_top(st, 10, top, &ntop, errstr, sizeof(errstr)) != HC_OK) {
        goto fail;
    }
    int64_t valid = atomic_load(&tally.acked_valid);
    int64_t invalid = atomic_load(&tally.acked_invalid);
    int64_t writes = hc_metric_get(metrics.store_keys_written);
    printf("\ndone in %.1f s: %" PRId64 " events (%.0f/s end to end)\n", secs, valid + invalid,
           secs > 0 ? (double)(valid + invalid) / secs : 0);
    printf("top posts:\n");
    for (size_t i = 0; i < ntop; i++) {
        printf("  %2zu. post %-10s %9" PRId64 " likes\n", i + 1, top[i].post_id, top[i].likes);
    }
    printf("stage 1: %" PRId64 " transactions, %" PRId64 " partials from %" PRId64
           " valid events\n",
           (int64_t)hc_metric_get(metrics.txn_commit), (int64_t)hc_metric_get(metrics.partials),
           (int64_t)hc_metric_get(metrics.events_ok));
    printf("stage 2: %" PRId64 " store batches, %" PRId64 " post writes, %" PRId64 " conflicts\n",
           (int64_t)hc_metric_get(metrics.store_commit), writes,
           (int64_t)hc_metric_get(metrics.store_conflict));
    printf("events per store write: %.1f\n", writes ? (double)valid / (double)writes : 0.0);
    int64_t dlq = hc_metric_get(metrics.events_invalid);
    printf("dead-letter topic: %" PRId64 " malformed events (%" PRId64 " sent)\n", dlq, invalid);

    int64_t rows = 0, mismatches = 0, shown = 0;
    if (hc_tally_compare(&tally, st, &rows, &mismatches, report_mismatch, &shown, errstr,
                         sizeof(errstr)) != HC_OK) {
        goto fail;
    }
    int64_t failed = atomic_load(&tally.failed);
    if (mismatches == 0 && dlq == invalid && failed == 0 &&
        hc_metric_get(metrics.events_ok) == valid) {
        printf("verify: exact (%" PRId64 " posts, 0 mismatches)\n", rows);
        status = HC_EXIT_OK;
    } else {
        printf("verify: FAILED (%" PRId64 " posts, %" PRId64 " mismatches, %" PRId64 " of %" PRId64
               " malformed in the DLQ, %" PRId64 " deliveries failed)\n",
               rows, mismatches, dlq, invalid, failed);
        status = HC_EXIT_FAILED;
    }
    goto done;

fail:
    fprintf(stderr, "hotcount demo: %s\n", errstr);
    status = HC_EXIT_FAILED;
done:
    if (producing) {
        atomic_store(&hc_cli_stop, true);
        pthread_join(ptid, NULL);
    }
    hc_pipeline_stop(pl, NULL, 0);
    if (key_path[0]) {
        unlink(key_path);
    }
    hc_metrics_http_stop(http);
    hc_metrics_fini(&metrics);
    hc_store_close(st);
    hc_tally_fini(&tally);
    hc_mock_stop(&mock);
    hc_cli_fini(&cli);
    return status;
}
