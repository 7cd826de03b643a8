/* /v1/stats' aggregation without HTTP: scraped metrics pages fed straight into the stats
 * (hc_serve_stats_ingest / _tick, as the refresher does), the JSON rendered and read back. The
 * history ring: bounded, oldest first, rates from counter growth over the rate span, a restarted
 * stage's counters, ticks without a sample; the stage-2 hot set with its thresholds; stage kinds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/hotkeys_scrape.h"
#include "hotcount/metrics.h"
#include "hotcount/serve_stats.h"

/* Two unroutable stages: the stats are never started, so nothing is scraped. */
static hc_serve_stats_t *new_stats(const char *stages)
{
    hc_serve_stats_t *s = NULL;
    char err[128];
    assert_int_equal(hc_serve_stats_new(stages, 100, 100, false, &s, err, sizeof(err)), HC_OK);
    return s;
}

/* A stage-1 page (events) or a stage-2 page (writes), as metrics.c renders them. */
static char *page(double events, double writes, int stage1, int stage2)
{
    static char buf[4096];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                          "# TYPE hotcount_stage_instances gauge\n"
                          "hotcount_stage_instances{stage=\"1\"} %d\n"
                          "hotcount_stage_instances{stage=\"2\"} %d\n",
                          stage1, stage2);
    if (events >= 0) {
        n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                              "hotcount_events_total{result=\"ok\"} %.0f\n"
                              "hotcount_events_total{result=\"invalid\"} 0\n",
                              events);
    }
    if (writes >= 0) {
        snprintf(buf + n, sizeof(buf) - n, "hotcount_store_keys_written_total %.0f\n", writes);
    }
    return buf;
}

static json_t *render_with(hc_serve_stats_t *s, const hc_hotkey_record_t *topic, size_t n,
                           int64_t now)
{
    char *text = hc_serve_stats_render(s, NULL, 0, topic, n, now, 1700000000000 + now);
    assert_non_null(text);
    json_error_t e;
    json_t *root = json_loads(text, 0, &e);
    free(text);
    assert_non_null(root);
    return root;
}

static json_t *render(hc_serve_stats_t *s, int64_t now)
{
    return render_with(s, NULL, 0, now);
}

static json_t *series(json_t *root, const char *name)
{
    json_t *h = json_object_get(root, "history");
    assert_true(json_is_object(h));
    json_t *a = json_object_get(h, name);
    assert_true(json_is_array(a));
    return a;
}

/* Point i, which must be a number (a null compares equal to nothing, NaN to everything). */
static double at(json_t *a, size_t i)
{
    json_t *v = json_array_get(a, i);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* One stage counting 100 events and 2 writes a second, a sample every second. */
static void rates_are_counter_growth_over_time(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1");
    for (int k = 0; k < 10; k++) {
        int64_t t = 1000 * (int64_t)k;
        hc_serve_stats_ingest(s, 0, page(5000 + 100.0 * k, 70 + 2.0 * k, 1, 1), NULL, t);
        hc_serve_stats_tick(s, k, t);
    }
    json_t *root = render(s, 9500);
    json_t *in = series(root, "likes_in_per_s"), *w = series(root, "store_writes_per_s");
    json_t *h = json_object_get(root, "history");
    assert_int_equal(json_integer_value(json_object_get(h, "step_ms")), 1000);
    assert_int_equal(json_integer_value(json_object_get(h, "newest_age_ms")), 500);
    assert_int_equal(json_array_size(in), 10);
    assert_int_equal(json_array_size(w), 10);
    assert_true(json_is_null(json_array_get(in, 0))); /* no earlier point: no rate */
    for (size_t i = 1; i < 10; i++) {
        assert_float_equal(at(in, i), 100.0, 1e-9);
        assert_float_equal(at(w, i), 2.0, 1e-9);
    }
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* Events 0, 100, 200, 300, then the stage restarts: 50, 150. The drop is no negative rate: the
 * new value is all growth (350 events by tick 4, 450 by tick 5). */
static void restarted_stage_counts_its_new_value(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1");
    const double events[] = {0, 100, 200, 300, 50, 150};
    for (int k = 0; k < 6; k++) {
        hc_serve_stats_ingest(s, 0, page(events[k], 0, 1, 0), NULL, 1000 * (int64_t)k);
        hc_serve_stats_tick(s, k, 1000 * (int64_t)k);
    }
    json_t *root = render(s, 5000);
    json_t *in = series(root, "likes_in_per_s");
    assert_float_equal(at(in, 3), 100.0, 1e-9); /* (300 - 0) / 3 s */
    assert_float_equal(at(in, 4), 87.5, 1e-9);  /* (350 - 0) / 4 s */
    assert_float_equal(at(in, 5), 90.0, 1e-9);  /* (450 - 0) / 5 s */
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* 400 ticks into a ring of 300: the newest 300, oldest first. Growth k at tick k, so the rate
 * at tick t is over ticks t-4..t: (5t - 10) / 5 s = t - 2, rising with t. */
static void ring_is_bounded_and_ordered(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1");
    double total = 0;
    for (int k = 0; k < 400; k++) {
        total += k;
        hc_serve_stats_ingest(s, 0, page(total, -1, 1, 0), NULL, 1000 * (int64_t)k);
        hc_serve_stats_tick(s, k, 1000 * (int64_t)k);
    }
    hc_serve_stats_tick(s, 399, 999999); /* not forward: ignored */
    json_t *root = render(s, 399000);
    json_t *in = series(root, "likes_in_per_s");
    assert_int_equal(json_array_size(in), 300);
    for (size_t i = 0; i < 300; i++) {
        assert_float_equal(at(in, i), (double)(100 + i) - 2, 1e-9);
    }
    /* no stage reports writes: every point null, the array as long */
    json_t *w = series(root, "store_writes_per_s");
    assert_int_equal(json_array_size(w), 300);
    assert_true(json_is_null(json_array_get(w, 299)));
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* A tick skipped (a refresh that overran) and a tick where one of two stages did not answer:
 * both null, not a dip; the rates around them still hold. */
static void missing_samples_are_null(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1,127.0.0.1:2");
    for (int k = 0; k < 8; k++) {
        int64_t t = 1000 * (int64_t)k;
        if (k == 3) {
            continue; /* tick 3 never happened */
        }
        hc_serve_stats_ingest(s, 0, page(10.0 * k, -1, 1, 0), NULL, t);
        hc_serve_stats_ingest(s, 1, k == 5 ? NULL : page(10.0 * k, 1.0 * k, 0, 1), "refused", t);
        hc_serve_stats_tick(s, k, t);
    }
    json_t *root = render(s, 7000);
    json_t *in = series(root, "likes_in_per_s"), *w = series(root, "store_writes_per_s");
    assert_int_equal(json_array_size(in), 8);
    assert_true(json_is_null(json_array_get(in, 3)));
    assert_true(json_is_null(json_array_get(in, 5))); /* stage 2 reports events too: partial */
    assert_true(json_is_null(json_array_get(w, 5)));
    assert_float_equal(at(in, 4), 20.0, 1e-9); /* both stages, 10/s each */
    assert_float_equal(at(w, 7), 1.0, 1e-9);
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* Stage 2's hot set: two posts, with the thresholds; state from the rate against leave; the
 * same post in two stages (a rebalance) once, with the larger rate. */
static void hot_set_with_thresholds_and_source(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1,127.0.0.1:2");
    const char *stage2 = "hotcount_stage_instances{stage=\"1\"} 0\n"
                         "hotcount_stage_instances{stage=\"2\"} 1\n"
                         "hotcount_hot_post_events_per_second{post_id=\"p\\\"1\",source="
                         "\"detected\"} 1500\n"
                         "hotcount_hot_post_events_per_second{post_id=\"p2\",source="
                         "\"detected\"} 300\n"
                         "hotcount_hotkeys_enter_rate 1000\n"
                         "hotcount_hotkeys_leave_rate 500\n";
    const char *other = "hotcount_stage_instances{stage=\"2\"} 1\n"
                        "hotcount_hot_post_events_per_second{post_id=\"p2\",source="
                        "\"detected\"} 200\n";
    hc_serve_stats_ingest(s, 0, stage2, NULL, 0);
    hc_serve_stats_ingest(s, 1, other, NULL, 0);
    json_t *root = render(s, 10);
    assert_float_equal(json_number_value(json_object_get(root, "hotkeys_enter_rate")), 1000, 0);
    assert_float_equal(json_number_value(json_object_get(root, "hotkeys_leave_rate")), 500, 0);
    assert_int_equal(json_integer_value(json_object_get(root, "stage1_instances")), 0);
    assert_int_equal(json_integer_value(json_object_get(root, "stage2_instances")), 2);
    json_t *set = json_object_get(root, "hot_set");
    assert_int_equal(json_array_size(set), 2);
    json_t *a = json_array_get(set, 0), *b = json_array_get(set, 1);
    assert_string_equal(json_string_value(json_object_get(a, "post_id")), "p\"1");
    assert_float_equal(json_number_value(json_object_get(a, "likes_per_second")), 1500, 0);
    assert_string_equal(json_string_value(json_object_get(a, "source")), "detected");
    assert_string_equal(json_string_value(json_object_get(a, "state")), "hot");
    assert_string_equal(json_string_value(json_object_get(b, "post_id")), "p2");
    assert_float_equal(json_number_value(json_object_get(b, "likes_per_second")), 300, 0);
    assert_string_equal(json_string_value(json_object_get(b, "state")), "cooling");
    json_decref(root);
    hc_serve_stats_destroy(s);
}

static hc_hotkey_record_t topic_rec(const char *post, hc_hotkey_source_t source)
{
    hc_hotkey_record_t rec = {.hot = true, .since_ms = 1, .source = source, .expires_ms = 99000};
    rec.post_id_len = strlen(post);
    memcpy(rec.post_id, post, rec.post_id_len);
    return rec;
}

/* topic.hotkeys' declared posts join the hot set, which only detected ones reach through the
 * stages' metrics: once per post, after the detected members, none for a post already detected
 * and none from a detected record of the topic (the stages' own figure is the exact one).
 * mutant: every topic record appended (a detected one, a post twice) */
static void declared_posts_join_the_hot_set_once(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("127.0.0.1:1");
    hc_serve_stats_ingest(s, 0,
                          "hotcount_stage_instances{stage=\"2\"} 1\n"
                          "hotcount_hot_post_events_per_second{post_id=\"p1\",source="
                          "\"detected\"} 1500\n"
                          "hotcount_hotkeys_enter_rate 1000\n"
                          "hotcount_hotkeys_leave_rate 500\n",
                          NULL, 0);
    hc_hotkey_record_t topic[4] = {
        topic_rec("final", HC_HOTKEY_DECLARED), topic_rec("p1", HC_HOTKEY_DECLARED),
        topic_rec("p9", HC_HOTKEY_DETECTED), topic_rec("final", HC_HOTKEY_DECLARED)};
    json_t *root = render_with(s, topic, 4, 10);
    json_t *set = json_object_get(root, "hot_set");
    assert_int_equal(json_array_size(set), 2);
    json_t *d = json_array_get(set, 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(set, 0), "post_id")),
                        "p1");
    assert_string_equal(json_string_value(json_object_get(d, "post_id")), "final");
    assert_string_equal(json_string_value(json_object_get(d, "source")), "declared");
    assert_true(json_is_null(json_object_get(d, "likes_per_second")));
    assert_int_equal(json_integer_value(json_object_get(d, "until")), 99000);
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* What a stage 2 renders (metrics.c) is what serve reads: the hot set published by two instances,
 * the thresholds, the running stage kinds. */
static void stage2_metrics_page_round_trip(void **state)
{
    (void)state;
    hc_metrics_t m;
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    hc_metrics_stage_started(&m, HC_METRICS_STAGE2, 0);
    hc_metric_set(m.hotkeys_enter_milli, 1000000);
    hc_metric_set(m.hotkeys_leave_milli, 500500);
    hc_hotkey_t keys[2] = {
        {.post_id = "viral \"one\"", .post_id_len = 11, .events_per_second = 2500},
        {.post_id = "cool", .post_id_len = 4, .events_per_second = 120}};
    hc_metrics_publish_hot_set(&m, "stage2/a", keys, 1, 1000);
    hc_metrics_publish_hot_set(&m, "stage2/b", keys + 1, 1, 1000);
    char *text = NULL;
    assert_true(hc_metrics_render(&m, 1500, 1000, &text) > 0);
    hc_serve_stats_t *s = new_stats("127.0.0.1:1");
    hc_serve_stats_ingest(s, 0, text, NULL, 1500);
    free(text);
    json_t *root = render(s, 1500);
    assert_float_equal(json_number_value(json_object_get(root, "hotkeys_enter_rate")), 1000, 0);
    assert_float_equal(json_number_value(json_object_get(root, "hotkeys_leave_rate")), 500.5, 1e-9);
    assert_int_equal(json_integer_value(json_object_get(root, "stage1_instances")), 0);
    assert_int_equal(json_integer_value(json_object_get(root, "stage2_instances")), 1);
    json_t *set = json_object_get(root, "hot_set");
    assert_int_equal(json_array_size(set), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(set, 0), "post_id")),
                        "viral \"one\"");
    assert_string_equal(json_string_value(json_object_get(json_array_get(set, 0), "source")),
                        "detected");
    assert_string_equal(json_string_value(json_object_get(json_array_get(set, 1), "state")),
                        "cooling");
    assert_int_equal(json_array_size(json_object_get(root, "hot_keys")), 0); /* stage 1's */
    json_decref(root);
    /* a stage-2 page without a hot set has no thresholds: null, not 0 */
    hc_metric_set(m.hotkeys_enter_milli, 0);
    assert_true(hc_metrics_render(&m, 1500, 1000, &text) > 0);
    hc_serve_stats_ingest(s, 0, text, NULL, 1600);
    free(text);
    root = render(s, 1600);
    assert_true(json_is_null(json_object_get(root, "hotkeys_enter_rate")));
    json_decref(root);
    hc_serve_stats_destroy(s);
    hc_metrics_fini(&m);
}

/* No stages: nothing is known, and says so (null), the history empty. */
static void no_stages_is_null_not_zero(void **state)
{
    (void)state;
    hc_serve_stats_t *s = new_stats("");
    hc_serve_stats_tick(s, 0, 0);
    json_t *root = render(s, 10);
    assert_true(json_is_null(json_object_get(root, "stage1_instances")));
    assert_true(json_is_null(json_object_get(root, "hotkeys_enter_rate")));
    assert_int_equal(json_array_size(json_object_get(root, "hot_set")), 0);
    json_t *in = series(root, "likes_in_per_s");
    assert_int_equal(json_array_size(in), 1);
    assert_true(json_is_null(json_array_get(in, 0)));
    json_decref(root);
    hc_serve_stats_destroy(s);
}

/* A rogue stage page (issue 25, item 8) is parsed in time linear in its size: 4 MiB of lines
 * that open a label set and never close it, for every family the stats read. Before, each
 * such line searched the rest of the page ("} " with strstr, a label value to its quote), so
 * 4 MB kept serve's scraper at a full core for seconds and SIGTERM waited on it.
 * mutant: strstr(value, "} ") over the rest of the text (seconds here) */
static void rogue_page_is_parsed_in_linear_time(void **state)
{
    (void)state;
    static const char *const lines[] = {
        "hotcount_events_total{result=\"ok\"\n",
        "hotcount_stage_instances{stage=\"1\n",
        "hotcount_hot_post_events_per_second{post_id=\"p\n",
        "hotcount_hot_key_events_per_second{post_id=\"p\\\n",
    };
    size_t size = 4u << 20;
    char *text = malloc(size + 1);
    assert_non_null(text);
    for (size_t l = 0; l < sizeof(lines) / sizeof(lines[0]); l++) {
        size_t len = strlen(lines[l]), off = 0;
        while (off + len <= size) {
            memcpy(text + off, lines[l], len);
            off += len;
        }
        text[off] = '\0';
        struct timespec t0, t1;
        /* the thread's CPU time, not the wall clock: a loaded machine (a parallel test pass)
         * stretched the wall time of the linear parse past the bound, never its CPU time */
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        hc_serve_stats_t *s = new_stats("127.0.0.1:1");
        hc_serve_stats_ingest(s, 0, text, NULL, 1000);
        int found = 1;
        (void)hc_serve_stats_sum(text, "hotcount_stage_instances", "stage=\"1\"", &found);
        assert_int_equal(found, 0);
        hc_scraped_hotkey_t keys[4];
        assert_int_equal(hc_hotkeys_parse(text, keys, 4), 0);
        hc_serve_stats_destroy(s);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        print_message("%.40s...: %.3f CPU-s\n", lines[l], secs);
        assert_true(secs < 1.0); /* milliseconds when linear, even under ASan; seconds if not */
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rates_are_counter_growth_over_time),
        cmocka_unit_test(restarted_stage_counts_its_new_value),
        cmocka_unit_test(ring_is_bounded_and_ordered),
        cmocka_unit_test(missing_samples_are_null),
        cmocka_unit_test(hot_set_with_thresholds_and_source),
        cmocka_unit_test(declared_posts_join_the_hot_set_once),
        cmocka_unit_test(stage2_metrics_page_round_trip),
        cmocka_unit_test(no_stages_is_null_not_zero),
        cmocka_unit_test(rogue_page_is_parsed_in_linear_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
