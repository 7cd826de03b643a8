/* DynamoDB write units per event and per window: hotcount's store batches against the naive
 * one-UpdateItem-per-event design (docs/DYNAMODB.md, "Cost"; bench/README.md, "DynamoDB").
 *
 *   bench_dynamodb_units --store dynamodb://... [--events N] [--rate R] [--flush-ms F]
 *                        [--posts P] [--zipf S] [--celeb-rate C] [--seed X] [--variant NAME]
 *
 * The events come from the benchmark's generator (bench/src/workload.c: Zipfian likes, 5 %
 * unlikes, optionally a celebrity post bursting to C likes/s) at R events/s of event time. They
 * are cut into windows of F ms of event time, each summed per post as stage 1 and stage 2 do,
 * and each window is applied as one stage-2 batch (one partition's offsets moving) through
 * the real DynamoDB store, whose requests are what is counted: the store's cost meter
 * (src/store/testing/store_testing.h, started right after the open) prices every request it sends
 * by DynamoDB's published rules, and sum what the server reports in ConsumedCapacity (an emulator
 * may report nothing). The naive baseline is one standard UpdateItem per event: ceil(item size / 1
 * KB) units each, the same rule. At the end a Scan checks that the table holds exactly the sums
 * applied (a cheap wrong answer is no result) -- its reads are not counted.
 *
 * Prints one JSON line. The store's URI names a table prefix of its own (the caller makes one
 * per run and drops the tables after). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/event.h"
#include "hotcount/store.h"
#include "store_testing.h"
#include "workload.h"

typedef struct like {
    char id[HC_POST_ID_MAX + 1];
    size_t len;
    int64_t delta;
} like_t;

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return argv[i + 1];
        }
    }
    return def;
}

static int cmp_like(const void *a, const void *b)
{
    const like_t *x = a;
    const like_t *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->id, y->id, n);

    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

typedef struct sum_visit {
    int64_t likes;
    uint64_t rows;
} sum_visit_t;

static bool on_row(const char *post_id, size_t len, int64_t likes, void *opaque)
{
    sum_visit_t *v = opaque;

    (void)post_id;
    (void)len;
    v->likes += likes;
    v->rows++;
    return true;
}

static double now_s(void)
{
    return (double)hc_now_ms() / 1000.0;
}

int main(int argc, char **argv)
{
    const char *uri = arg(argc, argv, "--store", NULL);
    const char *variant = arg(argc, argv, "--variant", "default");
    int64_t flush_ms = strtoll(arg(argc, argv, "--flush-ms", "1000"), NULL, 10);
    bench_workload_opts_t o = {
        .events = strtoull(arg(argc, argv, "--events", "10000"), NULL, 10),
        .posts = strtoull(arg(argc, argv, "--posts", "1000000"), NULL, 10),
        .zipf_s = strtod(arg(argc, argv, "--zipf", "0.99"), NULL),
        .unlike_ratio = 0.05,
        .base_rate = strtod(arg(argc, argv, "--rate", "2000"), NULL),
        .celeb_rate = strtod(arg(argc, argv, "--celeb-rate", "0"), NULL),
        .seed = strtoull(arg(argc, argv, "--seed", "1"), NULL, 10),
        .salts = 16,
        .start_ms = 1764460800000,
    };
    char errstr[512];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_err_t err;

    if (uri == NULL || o.events == 0 || flush_ms <= 0 || o.base_rate <= 0) {
        fprintf(stderr, "bench_dynamodb_units: --store dynamodb://... is required, and --events, "
                        "--rate and --flush-ms must be positive\n");
        return 2;
    }
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK ||
        hc_config_set(&cfg, "store", uri, errstr, sizeof(errstr)) != HC_OK ||
        (err = hc_store_open(&cfg, &st, errstr, sizeof(errstr))) != HC_OK ||
        strcmp(hc_store_kind(st), "dynamodb") != 0 || hc_store_dynamodb_meter(st) != HC_OK ||
        hc_store_init_schema(st, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_dynamodb_units: store: %s\n", errstr);
        return 1;
    }

    /* The whole stream, then its windows: a window is every event of F ms of event time. */
    like_t *ev = malloc(o.events * sizeof(*ev));
    int64_t *win_of = malloc(o.events * sizeof(*win_of));
    hc_store_delta_t *deltas = malloc(o.events * sizeof(*deltas));
    if (ev == NULL || win_of == NULL || deltas == NULL) {
        fprintf(stderr, "bench_dynamodb_units: out of memory\n");
        return 1;
    }
    bench_workload_t w;
    char key[BENCH_KEY_MAX];
    char value[BENCH_VALUE_MAX];
    size_t key_len;
    size_t value_len;
    bool celeb;
    size_t n = 0;
    size_t celeb_events = 0;
    double naive_units = 0;
    int64_t applied = 0;
    bench_workload_init(&w, &o);
    while (bench_workload_next(&w, key, &key_len, value, &value_len, &celeb)) {
        hc_event_t e;
        if (hc_event_parse(value, value_len, BENCH_VALUE_MAX, &e) != HC_EVENT_OK || !e.has_ts) {
            continue;
        }
        memcpy(ev[n].id, e.post_id, e.post_id_len);
        ev[n].len = e.post_id_len;
        ev[n].delta = e.delta;
        celeb_events += celeb;
        win_of[n] = (e.ts - o.start_ms) / flush_ms;
        /* naive: UpdateItem ADD likes :d SET updated_at = :t, a standard write of the count item
         * (post_id, likes, updated_at: under 1 KB for any id of at most 256 bytes) */
        naive_units += (double)((7 + e.post_id_len + 5 + 11 + 10 + 8 + 1023) / 1024);
        n++;
    }

    hc_ddb_usage_t before;
    hc_ddb_usage_t after;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 0};
    double max_window_units = 0;
    size_t windows = 0;
    size_t posts_written = 0;
    size_t max_posts = 0;
    size_t celeb_windows = 0; /* windows that wrote the celebrity's count */
    double t0 = now_s();
    hc_store_dynamodb_usage(st, &before);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && win_of[j] == win_of[i]) {
            j++;
        }
        /* the window's sums per post (stage 1's tables, merged by stage 2) */
        qsort(ev + i, j - i, sizeof(*ev), cmp_like);
        size_t k = 0;
        for (size_t m = i; m < j; m++) {
            if (k > 0 && cmp_like(&ev[m], &ev[i + k - 1]) == 0) {
                ev[i + k - 1].delta += ev[m].delta;
            } else {
                ev[i + k] = ev[m];
                k++;
            }
        }
        for (size_t m = 0; m < k; m++) {
            deltas[m] = (hc_store_delta_t){ev[i + m].id, ev[i + m].len, ev[i + m].delta};
            celeb_windows += ev[i + m].len == strlen(BENCH_CELEB_POST) &&
                             memcmp(ev[i + m].id, BENCH_CELEB_POST, ev[i + m].len) == 0;
            applied += ev[i + m].delta;
        }
        off.next = (int64_t)j;
        hc_store_batch_t b = {.group = "bench",
                              .topic = "likes.partials",
                              .offsets = &off,
                              .offset_count = 1,
                              .deltas = deltas,
                              .delta_count = k,
                              .now_ms = o.start_ms + win_of[i] * flush_ms};
        hc_ddb_usage_t u0;
        hc_ddb_usage_t u1;
        hc_store_dynamodb_usage(st, &u0);
        err = hc_store_apply(st, &b, errstr, sizeof(errstr));
        if (err != HC_OK) {
            fprintf(stderr, "bench_dynamodb_units: window %zu: %s: %s\n", windows, hc_err_name(err),
                    errstr);
            return 1;
        }
        hc_store_dynamodb_usage(st, &u1);
        if (u1.write_units - u0.write_units > max_window_units) {
            max_window_units = u1.write_units - u0.write_units;
        }
        off.expected = off.next;
        posts_written += k;
        max_posts = k > max_posts ? k : max_posts;
        windows++;
        i = j;
    }
    double wall = now_s() - t0;
    hc_store_dynamodb_usage(st, &after);

    sum_visit_t sum = {0, 0};
    err = hc_store_foreach(st, on_row, &sum, errstr, sizeof(errstr));
    if (err != HC_OK || sum.likes != applied) {
        fprintf(stderr,
                "bench_dynamodb_units: the table holds %" PRId64 " likes, %" PRId64
                " were applied (%s)\n",
                sum.likes, applied, err != HC_OK ? errstr : "mismatch");
        return 1;
    }

    /* The server's figure where it gave one for every write request (DynamoDB does with
     * ReturnConsumedCapacity=TOTAL), else the units computed by the rules (the emulator
     * reports none for transactions). */
    double computed = after.write_units - before.write_units;
    double reported = after.reported_write_units - before.reported_write_units;
    bool server = after.write_requests > before.write_requests &&
                  after.reported_write_replies - before.reported_write_replies ==
                      after.write_requests - before.write_requests;
    double wu = server ? reported : computed;
    printf("{\"scenario\": \"dynamodb_units\", \"variant\": \"%s\", \"server\": \"emulator\", "
           "\"events\": %zu, \"rate\": %.0f, \"celeb_rate\": %.0f, \"flush_ms\": %" PRId64
           ", \"zipf\": %.2f, \"posts\": %" PRIu64 ", \"windows\": %zu, \"posts_written\": %zu, "
           "\"max_posts_per_window\": %zu, \"write_units\": %.0f, \"write_units_from\": \"%s\", "
           "\"computed_write_units\": %.0f, \"write_units_counts\": %.0f, "
           "\"write_units_offsets\": %.0f, \"write_units_staging\": %.0f, "
           "\"write_units_cancelled\": %.0f, \"read_units\": %.0f, \"requests\": %" PRIu64
           ", \"transactions\": %" PRIu64 ", \"cancelled\": %" PRIu64
           ", \"reported_write_replies\": %" PRIu64 ", \"reported_write_units\": %.1f, "
           "\"reported_read_replies\": %" PRIu64 ", \"reported_read_units\": %.1f, "
           "\"write_units_per_event\": %.4f, \"write_units_per_window\": %.1f, "
           "\"max_write_units_per_window\": %.0f, \"write_units_per_post_written\": %.3f, "
           "\"naive_write_units\": %.0f, \"naive_write_units_per_window\": %.1f, "
           "\"naive_over_hotcount\": %.2f, \"celeb_events\": %zu, \"celeb_windows\": %zu, "
           "\"wall_s\": %.2f}\n",
           variant, n, o.base_rate, o.celeb_rate, flush_ms, o.zipf_s, o.posts, windows,
           posts_written, max_posts, wu, server ? "server" : "computed", computed,
           after.write_units_counts - before.write_units_counts,
           after.write_units_offsets - before.write_units_offsets,
           after.write_units_staging - before.write_units_staging,
           after.write_units_cancelled - before.write_units_cancelled,
           after.read_units - before.read_units, after.requests - before.requests,
           after.transactions - before.transactions, after.cancelled - before.cancelled,
           after.reported_write_replies - before.reported_write_replies,
           after.reported_write_units - before.reported_write_units,
           after.reported_read_replies - before.reported_read_replies,
           after.reported_read_units - before.reported_read_units, wu / (double)n,
           wu / (double)windows, max_window_units, wu / (double)posts_written, naive_units,
           naive_units / (double)windows, naive_units / wu, celeb_events, celeb_windows, wall);
    hc_store_close(st);
    hc_config_fini(&cfg);
    free(ev);
    free(win_of);
    free(deltas);
    return 0;
}
