/* Unit tests for the process metrics (src/obs/metrics.c): histograms, the text exposition and its
 * escaping, librdkafka statistics ingestion, hot keys and readiness. No sockets, no sleeps:
 * every time is passed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/metrics.h"

#define FLUSH_MS 1000

/* A captured-like consumer statistics document, shaped after librdkafka's STATISTICS.md: top
 * level, brokers with toppars, topics with partitions (including the internal partition -1 and a
 * partition this client does not consume, lag -1), and cgrp. %s: the client name; %d x3: the
 * lags of likes.raw partitions 0, 1 and 2 (a negative lag leaves that partition out as not
 * consumed). */
static const char stats_template[] =
    "{\n"
    "  \"name\": \"%s\",\n"
    "  \"client_id\": \"hotcount\",\n"
    "  \"type\": \"consumer\",\n"
    "  \"ts\": 5016483227792,\n"
    "  \"time\": 1527060869,\n"
    "  \"age\": 5006012,\n"
    "  \"replyq\": 0,\n"
    "  \"msg_cnt\": 0,\n"
    "  \"msg_size\": 0,\n"
    "  \"msg_max\": 100000,\n"
    "  \"msg_size_max\": 1073741824,\n"
    "  \"simple_cnt\": 0,\n"
    "  \"metadata_cache_cnt\": 1,\n"
    "  \"brokers\": {\n"
    "    \"localhost:9092/1\": {\n"
    "      \"name\": \"localhost:9092/1\", \"nodeid\": 1, \"nodename\": \"localhost:9092\",\n"
    "      \"source\": \"learned\", \"state\": \"UP\", \"stateage\": 4995012,\n"
    "      \"outbuf_cnt\": 0, \"outbuf_msg_cnt\": 0, \"waitresp_cnt\": 1,\n"
    "      \"tx\": 12, \"txbytes\": 1024, \"rx\": 11, \"rxbytes\": 4096,\n"
    "      \"rtt\": {\"min\": 80, \"max\": 1800, \"avg\": 300, \"sum\": 3300, \"cnt\": 11,\n"
    "              \"stddev\": 120, \"hdrsize\": 13424, \"p50\": 250, \"p75\": 300, \"p90\": 500,\n"
    "              \"p95\": 900, \"p99\": 1800, \"p99_99\": 1800, \"outofrange\": 0},\n"
    "      \"toppars\": {\n"
    "        \"likes.raw-0\": {\"topic\": \"likes.raw\", \"partition\": 0},\n"
    "        \"likes.raw-1\": {\"topic\": \"likes.raw\", \"partition\": 1}\n"
    "      }\n"
    "    }\n"
    "  },\n"
    "  \"topics\": {\n"
    "    \"likes.raw\": {\n"
    "      \"topic\": \"likes.raw\", \"age\": 5004000, \"metadata_age\": 4000,\n"
    "      \"batchsize\": {\"min\": 0, \"max\": 0, \"avg\": 0, \"sum\": 0, \"cnt\": 0},\n"
    "      \"batchcnt\": {\"min\": 0, \"max\": 0, \"avg\": 0, \"sum\": 0, \"cnt\": 0},\n"
    "      \"partitions\": {\n"
    "        \"0\": {\"partition\": 0, \"broker\": 1, \"leader\": 1, \"desired\": true,\n"
    "               \"unknown\": false, \"msgq_cnt\": 0, \"xmit_msgq_cnt\": 0,\n"
    "               \"fetchq_cnt\": 12, \"fetch_state\": \"active\", \"query_offset\": -1001,\n"
    "               \"next_offset\": 1200, \"app_offset\": %d, \"stored_offset\": -1001,\n"
    "               \"committed_offset\": 1000, \"eof_offset\": -1001, \"lo_offset\": 0,\n"
    "               \"hi_offset\": 1400, \"ls_offset\": 1400, \"consumer_lag\": %d,\n"
    "               \"consumer_lag_stored\": 400, \"txmsgs\": 0, \"txbytes\": 0,\n"
    "               \"rxmsgs\": 1200, \"rxbytes\": 90000, \"msgs\": 1200, \"rx_ver_drops\": 0},\n"
    "        \"1\": {\"partition\": 1, \"broker\": 1, \"leader\": 1, \"desired\": true,\n"
    "               \"fetch_state\": \"active\", \"hi_offset\": 77, \"consumer_lag\": %d},\n"
    "        \"2\": {\"partition\": 2, \"broker\": 1, \"leader\": 1, \"desired\": true,\n"
    "               \"fetch_state\": \"active\", \"hi_offset\": 10, \"consumer_lag\": %d},\n"
    "        \"3\": {\"partition\": 3, \"broker\": 1, \"leader\": 1, \"desired\": false,\n"
    "               \"fetch_state\": \"none\", \"hi_offset\": -1, \"consumer_lag\": -1},\n"
    "        \"-1\": {\"partition\": -1, \"broker\": -1, \"leader\": -1, \"desired\": false,\n"
    "                \"unknown\": false, \"msgq_cnt\": 0, \"fetch_state\": \"none\",\n"
    "                \"consumer_lag\": -1, \"consumer_lag_stored\": -1}\n"
    "      }\n"
    "    }\n"
    "  },\n"
    "  \"cgrp\": {\"state\": \"up\", \"stateage\": 4000, \"join_state\": \"steady\",\n"
    "           \"rebalance_age\": 3000, \"rebalance_cnt\": 1, \"rebalance_reason\": \"\",\n"
    "           \"assignment_size\": 3}\n"
    "}\n";

static hc_err_t ingest(hc_metrics_t *m, const char *client, int lag0, int lag1, int lag2,
                       int64_t now_ms)
{
    char json[sizeof(stats_template) + 256];
    /* a partition this client does not consume has no position (-1001) */
    int app0 = lag0 < 0 ? -1001 : 1200;
    int len = snprintf(json, sizeof(json), stats_template, client, app0, lag0, lag1, lag2);
    assert_true(len > 0 && (size_t)len < sizeof(json));
    return hc_metrics_ingest_rdkafka_stats_at(m, json, (size_t)len, now_ms);
}

static char *render(hc_metrics_t *m, int64_t now_ms)
{
    char *text = NULL;
    size_t len = hc_metrics_render(m, now_ms, FLUSH_MS, &text);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    assert_true(len > 0 && text[len - 1] == '\n');
    return text;
}

/* The value text of the sample line "<sample> <value>", or NULL when there is no such line. The
 * returned pointer is into a static buffer. */
static const char *sample(const char *text, const char *name)
{
    static char value[128];
    size_t name_len = strlen(name);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > name_len && strncmp(line, name, name_len) == 0 && line[name_len] == ' ') {
            size_t vlen = len - name_len - 1;
            assert_true(vlen < sizeof(value));
            memcpy(value, line + name_len + 1, vlen);
            value[vlen] = '\0';
            return value;
        }
        line = end ? end + 1 : line + len;
    }
    return NULL;
}

static void assert_sample(const char *text, const char *name, const char *want)
{
    const char *got = sample(text, name);
    if (!got) {
        fail_msg("no sample %s in:\n%s", name, text);
    }
    assert_string_equal(got, want);
}

static size_t count_lines_starting(const char *text, const char *prefix)
{
    size_t n = 0;
    size_t plen = strlen(prefix);
    for (const char *line = text; *line;) {
        if (strncmp(line, prefix, plen) == 0) {
            n++;
        }
        const char *end = strchr(line, '\n');
        if (!end) {
            break;
        }
        line = end + 1;
    }
    return n;
}

static int setup(void **state)
{
    hc_metrics_t *m = malloc(sizeof(*m));
    if (!m || hc_metrics_init(m) != HC_OK) {
        free(m);
        return -1;
    }
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    hc_metrics_t *m = *state;
    hc_metrics_fini(m);
    free(m);
    return 0;
}

/* ---- histograms ---------------------------------------------------------------------------- */

static void histogram_init_rejects_bad_bounds(void **state)
{
    (void)state;
    hc_histogram_t h;
    static const double unsorted[] = {1, 3, 2};
    static const double equal[] = {1, 1};
    static const double inf[] = {1, INFINITY};
    static const double many[HC_HISTOGRAM_MAX_BUCKETS + 1] = {0};
    static const double ok[] = {-1, 0, 2.5};
    assert_int_equal(hc_histogram_init(&h, unsorted, 3), HC_ERR_INVALID);
    assert_int_equal(hc_histogram_init(&h, equal, 2), HC_ERR_INVALID);
    assert_int_equal(hc_histogram_init(&h, inf, 2), HC_ERR_INVALID);
    assert_int_equal(hc_histogram_init(&h, ok, 0), HC_ERR_INVALID);
    assert_int_equal(hc_histogram_init(&h, many, HC_HISTOGRAM_MAX_BUCKETS + 1), HC_ERR_INVALID);
    assert_int_equal(hc_histogram_init(&h, ok, 3), HC_OK);
}

static void histogram_counts_each_value_in_its_le_bucket(void **state)
{
    (void)state;
    static const double bounds[] = {1, 2, 5};
    hc_histogram_t h;
    assert_int_equal(hc_histogram_init(&h, bounds, 3), HC_OK);
    hc_histogram_observe(&h, -3);  /* below the first bound: first bucket */
    hc_histogram_observe(&h, 1);   /* on a bound: that bucket (le) */
    hc_histogram_observe(&h, 1.5); /* (1, 2] */
    hc_histogram_observe(&h, 2);
    hc_histogram_observe(&h, 5);
    hc_histogram_observe(&h, 5.0001); /* +Inf */
    hc_histogram_observe(&h, 1e300);
    hc_histogram_observe(&h, NAN); /* ignored */
    hc_histogram_observe_n(&h, 3, 0);
    assert_int_equal(hc_histogram_cumulative(&h, 0), 2);
    assert_int_equal(hc_histogram_cumulative(&h, 1), 4);
    assert_int_equal(hc_histogram_cumulative(&h, 2), 5);
    assert_int_equal(hc_histogram_cumulative(&h, 3), 7);
    assert_int_equal(hc_histogram_cumulative(&h, 99), 7);
    assert_int_equal(hc_histogram_count(&h), 7);
    assert_true(fabs(hc_histogram_sum(&h) - (-3 + 1 + 1.5 + 2 + 5 + 5.0001 + 1e300)) < 1e286);

    hc_histogram_t h2;
    assert_int_equal(hc_histogram_init(&h2, bounds, 3), HC_OK);
    hc_histogram_observe_n(&h2, 1.5, 4);
    assert_int_equal(hc_histogram_cumulative(&h2, 0), 0);
    assert_int_equal(hc_histogram_cumulative(&h2, 1), 4);
    assert_int_equal(hc_histogram_count(&h2), 4);
    assert_true(hc_histogram_sum(&h2) == 6.0);
}

static void histogram_accumulator_merges_like_single_observes(void **state)
{
    (void)state;
    static const double bounds[] = {0.1, 1, 10};
    hc_histogram_t direct;
    hc_histogram_t merged;
    hc_histogram_acc_t acc;
    assert_int_equal(hc_histogram_init(&direct, bounds, 3), HC_OK);
    assert_int_equal(hc_histogram_init(&merged, bounds, 3), HC_OK);
    hc_histogram_acc_init(&acc, &merged);
    const double values[] = {0.05, 0.1, 0.5, 3, 30, 0.7, NAN};
    const uint64_t weights[] = {1, 2, 3, 1, 5, 0, 1};
    for (size_t i = 0; i < 7; i++) {
        hc_histogram_observe_n(&direct, values[i], weights[i]);
        hc_histogram_acc_add(&acc, values[i], weights[i]);
    }
    hc_histogram_acc_merge(&acc, &merged);
    assert_int_equal(acc.count, 0); /* emptied for the next flush */
    for (size_t b = 0; b <= 3; b++) {
        assert_int_equal(hc_histogram_cumulative(&direct, b), hc_histogram_cumulative(&merged, b));
    }
    assert_int_equal(hc_histogram_count(&merged), 12);
    assert_true(fabs(hc_histogram_sum(&direct) - hc_histogram_sum(&merged)) < 1e-9);
    hc_histogram_acc_merge(&acc, &merged); /* empty: no change */
    assert_int_equal(hc_histogram_count(&merged), 12);
}

static void render_shows_cumulative_buckets(void **state)
{
    hc_metrics_t *m = *state;
    hc_histogram_observe(&m->batch_posts, 1);
    hc_histogram_observe(&m->batch_posts, 2);
    hc_histogram_observe(&m->batch_posts, 50);
    hc_histogram_observe(&m->batch_posts, 2e6);
    hc_histogram_observe(&m->flush_seconds[HC_METRICS_STAGE2], 0.003);
    hc_histogram_observe(&m->end_to_end_seconds, 0.1);
    char *text = render(m, 0);
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"1\"}", "1");
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"3\"}", "2");
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"10\"}", "2");
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"100\"}", "3");
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"1000000\"}", "3");
    assert_sample(text, "hotcount_batch_posts_bucket{le=\"+Inf\"}", "4");
    assert_sample(text, "hotcount_batch_posts_count", "4");
    assert_sample(text, "hotcount_batch_posts_sum", "2000053");
    assert_sample(text, "hotcount_flush_seconds_bucket{stage=\"2\",le=\"0.0025\"}", "0");
    assert_sample(text, "hotcount_flush_seconds_bucket{stage=\"2\",le=\"0.005\"}", "1");
    assert_sample(text, "hotcount_flush_seconds_bucket{stage=\"1\",le=\"+Inf\"}", "0");
    assert_sample(text, "hotcount_flush_seconds_count{stage=\"2\"}", "1");
    assert_sample(text, "hotcount_flush_seconds_sum{stage=\"2\"}", "0.003");
    assert_sample(text, "hotcount_end_to_end_seconds_bucket{le=\"0.05\"}", "0");
    assert_sample(text, "hotcount_end_to_end_seconds_bucket{le=\"0.1\"}", "1");
    assert_sample(text, "hotcount_end_to_end_seconds_bucket{le=\"60\"}", "1");
    assert_sample(text, "hotcount_end_to_end_seconds_sum", "0.1");
    assert_sample(text, "hotcount_transaction_seconds_count", "0");
    assert_sample(text, "hotcount_store_seconds_bucket{le=\"+Inf\"}", "0");
    /* exactly one # TYPE per family, even with a label */
    assert_int_equal(count_lines_starting(text, "# TYPE hotcount_flush_seconds "), 1);
    free(text);
}

/* ---- exposition ---------------------------------------------------------------------------- */

static void render_names_every_family_with_help_and_type(void **state)
{
    hc_metrics_t *m = *state;
    static const char *const families[][2] = {
        {"hotcount_up", "gauge"},
        {"hotcount_ready", "gauge"},
        {"hotcount_events_consumed_total", "counter"},
        {"hotcount_events_total", "counter"},
        {"hotcount_invalid_events_total", "counter"},
        {"hotcount_partials_total", "counter"},
        {"hotcount_partial_records_total", "counter"},
        {"hotcount_transactions_total", "counter"},
        {"hotcount_transaction_seconds", "histogram"},
        {"hotcount_partials_consumed_total", "counter"},
        {"hotcount_store_batches_total", "counter"},
        {"hotcount_store_keys_written_total", "counter"},
        {"hotcount_events_stored_total", "counter"},
        {"hotcount_store_seconds", "histogram"},
        {"hotcount_batch_posts", "histogram"},
        {"hotcount_flush_seconds", "histogram"},
        {"hotcount_end_to_end_seconds", "histogram"},
        {"hotcount_consumer_lag", "gauge"},
        {"hotcount_assigned_partitions", "gauge"},
        {"hotcount_unflushed_input_seconds", "gauge"},
        {"hotcount_hot_key_events_per_second", "gauge"},
    };
    char *text = render(m, 0);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char want[160];
        snprintf(want, sizeof(want), "# TYPE %s %s\n", families[i][0], families[i][1]);
        assert_non_null(strstr(text, want));
        snprintf(want, sizeof(want), "# HELP %s ", families[i][0]);
        assert_int_equal(count_lines_starting(text, want), 1);
    }
    /* every line is a comment or starts with hotcount_ */
    size_t lines = 0;
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        assert_true(line[0] == '#' || strncmp(line, "hotcount_", 9) == 0);
        lines++;
    }
    assert_true(lines > 50);
    assert_sample(text, "hotcount_up", "1");
    free(text);
}

static void render_shows_counter_values(void **state)
{
    hc_metrics_t *m = *state;
    hc_metric_add(m->events_consumed, 1234);
    hc_metric_add(m->events_ok, 1000);
    hc_metric_add(m->events_invalid, 7);
    hc_metric_add(m->invalid_by_reason[HC_EVENT_DUPLICATE_KEY], 5);
    hc_metric_add(m->invalid_by_reason[HC_EVENT_BAD_EVENT_ID], 2);
    hc_metric_add(m->partials, 90);
    hc_metric_add(m->txn_commit, 3);
    hc_metric_add(m->txn_abort, 1);
    hc_metric_add(m->partials_consumed, 88);
    hc_metric_add(m->store_commit, 4);
    hc_metric_add(m->store_conflict, 2);
    hc_metric_add(m->store_error, 9);
    hc_metric_add(m->store_keys_written, 70);
    hc_metric_add(m->events_stored, 999);
    hc_metric_add(m->stage1_assigned, 16);
    hc_metric_add(m->stage2_assigned, 8);
    char *text = render(m, 0);
    assert_sample(text, "hotcount_events_consumed_total", "1234");
    assert_sample(text, "hotcount_events_total{result=\"ok\"}", "1000");
    assert_sample(text, "hotcount_events_total{result=\"invalid\"}", "7");
    assert_sample(text, "hotcount_invalid_events_total{reason=\"duplicate_key\"}", "5");
    assert_sample(text, "hotcount_invalid_events_total{reason=\"bad_event_id_type\"}", "2");
    assert_sample(text, "hotcount_invalid_events_total{reason=\"too_large\"}", "0");
    assert_null(sample(text, "hotcount_invalid_events_total{reason=\"ok\"}"));
    assert_int_equal(count_lines_starting(text, "hotcount_invalid_events_total{"),
                     HC_EVENT_REASON_COUNT - 1);
    assert_sample(text, "hotcount_partials_total", "90");
    assert_sample(text, "hotcount_transactions_total{outcome=\"commit\"}", "3");
    assert_sample(text, "hotcount_transactions_total{outcome=\"abort\"}", "1");
    assert_sample(text, "hotcount_partials_consumed_total", "88");
    assert_sample(text, "hotcount_store_batches_total{outcome=\"commit\"}", "4");
    assert_sample(text, "hotcount_store_batches_total{outcome=\"conflict\"}", "2");
    assert_sample(text, "hotcount_store_batches_total{outcome=\"error\"}", "9");
    assert_sample(text, "hotcount_store_keys_written_total", "70");
    assert_sample(text, "hotcount_events_stored_total", "999");
    assert_sample(text, "hotcount_assigned_partitions{stage=\"1\"}", "16");
    assert_sample(text, "hotcount_assigned_partitions{stage=\"2\"}", "8");
    free(text);
}

static hc_hotkey_t hot_key(const char *id, size_t len, double rate)
{
    hc_hotkey_t key;
    memset(&key, 0, sizeof(key));
    memcpy(key.post_id, id, len);
    key.post_id_len = len;
    key.events_per_second = rate;
    key.count = (int64_t)rate;
    return key;
}

static void render_escapes_label_values(void **state)
{
    hc_metrics_t *m = *state;
    /* quote, backslash, newline; UTF-8 kept; an invalid byte, a lone continuation byte, an
     * overlong form, a surrogate and a NUL replaced by U+FFFD; a tab kept */
    static const char quoted[] = "say \"hi\"\\now\nthen";
    static const char utf8[] = "caf\xc3\xa9 \xf0\x9f\x94\xa5 \xe2\x82\xac";
    static const char bad[] = "a\xff"
                              "b\x80"
                              "c\xc0\xaf"
                              "d\xed\xa0\x80"
                              "e\0f\tg";
    hc_hotkey_t keys[3] = {
        hot_key(quoted, sizeof(quoted) - 1, 300),
        hot_key(utf8, sizeof(utf8) - 1, 200),
        hot_key(bad, sizeof(bad) - 1, 100),
    };
    hc_metrics_publish_hot_keys(m, "stage1/a", keys, 3, 0);
    char *text = render(m, 0);
    assert_sample(text,
                  "hotcount_hot_key_events_per_second{post_id=\"say \\\"hi\\\"\\\\now\\nthen\"}",
                  "300");
    assert_sample(text,
                  "hotcount_hot_key_events_per_second{post_id=\"caf\xc3\xa9 \xf0\x9f\x94\xa5 "
                  "\xe2\x82\xac\"}",
                  "200");
    /* U+FFFD per bad byte (the overlong and surrogate forms: one per byte) */
    assert_sample(text,
                  "hotcount_hot_key_events_per_second{post_id=\"a\xef\xbf\xbd"
                  "b\xef\xbf\xbd"
                  "c\xef\xbf\xbd\xef\xbf\xbd"
                  "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                  "e\xef\xbf\xbd"
                  "f\tg\"}",
                  "100");
    /* the rendered text has no raw newline inside a sample line: 3 hot-key lines */
    assert_int_equal(count_lines_starting(text, "hotcount_hot_key_events_per_second{"), 3);
    free(text);
}

static void render_formats_doubles_shortest_exact(void **state)
{
    hc_metrics_t *m = *state;
    hc_hotkey_t keys[3] = {
        hot_key("a", 1, 0.1),
        hot_key("b", 1, 1.0 / 3.0),
        hot_key("c", 1, 1e21),
    };
    hc_metrics_publish_hot_keys(m, "s", keys, 3, 0);
    char *text = render(m, 0);
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"a\"}", "0.1");
    assert_true(strtod(sample(text, "hotcount_hot_key_events_per_second{post_id=\"b\"}"), NULL) ==
                1.0 / 3.0);
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"c\"}", "1e+21");
    free(text);
}

/* ---- hot keys ------------------------------------------------------------------------------ */

static void hot_keys_sum_over_sources_and_expire(void **state)
{
    hc_metrics_t *m = *state;
    hc_hotkey_t a[2] = {hot_key("p1", 2, 100), hot_key("p2", 2, 50)};
    hc_hotkey_t b[2] = {hot_key("p1", 2, 30), hot_key("p3", 2, 60)};
    hc_metrics_publish_hot_keys(m, "stage1/a", a, 2, 10000);
    hc_metrics_publish_hot_keys(m, "stage1/b", b, 2, 11000);
    char *text = render(m, 12000);
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p1\"}", "130");
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p2\"}", "50");
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p3\"}", "60");
    /* largest first */
    assert_true(strstr(text, "post_id=\"p3\"") < strstr(text, "post_id=\"p2\""));
    free(text);

    /* a republish replaces that source's keys */
    hc_hotkey_t a2[1] = {hot_key("p9", 2, 7)};
    hc_metrics_publish_hot_keys(m, "stage1/a", a2, 1, 12500);
    text = render(m, 13000);
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p1\"}", "30");
    assert_null(sample(text, "hotcount_hot_key_events_per_second{post_id=\"p2\"}"));
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p9\"}", "7");
    free(text);

    /* stage1/b published at 11000: hidden after 3 x flush.ms */
    text = render(m, 11000 + 3 * FLUSH_MS + 1);
    assert_null(sample(text, "hotcount_hot_key_events_per_second{post_id=\"p3\"}"));
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p9\"}", "7");
    free(text);

    /* n = 0 withdraws */
    hc_metrics_publish_hot_keys(m, "stage1/a", NULL, 0, 13000);
    text = render(m, 13000);
    assert_int_equal(count_lines_starting(text, "hotcount_hot_key_events_per_second{"), 2);
    free(text);
}

static void hot_keys_are_capped_at_twenty(void **state)
{
    hc_metrics_t *m = *state;
    hc_hotkey_t keys[30];
    char id[16];
    for (int i = 0; i < 30; i++) {
        int len = snprintf(id, sizeof(id), "p%02d", i);
        keys[i] = hot_key(id, (size_t)len, 1000 - i);
    }
    hc_metrics_publish_hot_keys(m, "s1", keys, 30, 0);
    hc_metrics_publish_hot_keys(m, "s2", keys + 10, 20, 0);
    char *text = render(m, 0);
    assert_int_equal(count_lines_starting(text, "hotcount_hot_key_events_per_second{"),
                     HC_METRICS_HOT_KEYS);
    /* p10..p19 are in both sources: they sum to the top */
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p10\"}", "1980");
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p00\"}", "1000");
    free(text);

    /* more sources than slots: the oldest gives way, nothing breaks */
    for (int s = 0; s < HC_METRICS_HOT_SOURCES + 4; s++) {
        char name[16];
        snprintf(name, sizeof(name), "x%d", s);
        hc_metrics_publish_hot_keys(m, name, keys, 1, 100 + s);
    }
    text = render(m, 200);
    char want[32];
    snprintf(want, sizeof(want), "%d", HC_METRICS_HOT_SOURCES * 1000);
    assert_sample(text, "hotcount_hot_key_events_per_second{post_id=\"p00\"}", want);
    free(text);
}

/* ---- consumer lag -------------------------------------------------------------------------- */

static void stats_record_lag_per_partition(void **state)
{
    hc_metrics_t *m = *state;
    assert_int_equal(ingest(m, "hotcount#consumer-1", 200, 0, 13, 1000), HC_OK);
    char *text = render(m, 1000);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", "200");
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}", "0");
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"2\"}", "13");
    /* lag -1 (not consumed here) and the internal partition -1 are not shown */
    assert_null(sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"3\"}"));
    assert_null(sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"-1\"}"));
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 3);
    free(text);

    /* the latest report wins */
    assert_int_equal(ingest(m, "hotcount#consumer-1", 5, 6, 7, 2000), HC_OK);
    text = render(m, 2000);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", "5");
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"2\"}", "7");
    free(text);
}

static void stats_drop_partitions_the_client_no_longer_reports(void **state)
{
    hc_metrics_t *m = *state;
    assert_int_equal(ingest(m, "c1", 10, 20, 30, 1000), HC_OK);
    /* partition 1 revoked: librdkafka reports it with lag -1 (or not at all) */
    assert_int_equal(ingest(m, "c1", 11, -1, 31, 2000), HC_OK);
    char *text = render(m, 2000);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", "11");
    assert_null(sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}"));
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"2\"}", "31");
    free(text);

    /* a report without topics at all: nothing consumed now */
    static const char empty[] = "{\"name\":\"c1\",\"type\":\"consumer\",\"ts\":1}";
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, empty, sizeof(empty) - 1, 3000), HC_OK);
    text = render(m, 3000);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 0);
    free(text);
}

static void stats_drop_lag_of_a_client_that_went_quiet(void **state)
{
    hc_metrics_t *m = *state;
    /* client "old" reports once (interval unknown: the 5 s default applies) */
    assert_int_equal(ingest(m, "old", 100, -1, -1, 0), HC_OK);
    /* client "live" takes partitions 1 and 2, reporting every second */
    for (int64_t t = 1000; t <= 15000; t += 1000) {
        assert_int_equal(ingest(m, "live", -1, 7, 8, t), HC_OK);
    }
    char *text = render(m, 15000);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", "100");
    free(text);
    /* 3 x 5000 ms after its report: hidden at render even before the next ingest */
    text = render(m, 15001);
    assert_null(sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}"));
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}", "7");
    free(text);
    /* and removed by the next report of any client */
    assert_int_equal(ingest(m, "live", -1, 9, 8, 16000), HC_OK);
    text = render(m, 16000);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 2);
    free(text);

    /* "live" measured a 1000 ms interval: its lag is stale 3000 ms after its last report */
    text = render(m, 19000);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 2);
    free(text);
    text = render(m, 19001);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 0);
    free(text);
}

/* hotcount commits no offsets through its consumers, so librdkafka 2.0.2 reports consumer_lag
 * -1 for every partition: the lag comes from the position and the end of the partition. */
static void stats_derive_lag_from_position_when_librdkafka_has_none(void **state)
{
    hc_metrics_t *m = *state;
    static const char json[] =
        "{\"name\": \"c#consumer-1\", \"type\": \"consumer\", \"ts\": 1, \"time\": 1,\n"
        " \"topics\": {\"likes.partials\": {\"topic\": \"likes.partials\", \"partitions\": {\n"
        "  \"0\": {\"partition\": 0, \"app_offset\": 1200, \"hi_offset\": 1500,\n"
        "         \"ls_offset\": 1400, \"consumer_lag\": -1},\n"
        "  \"1\": {\"partition\": 1, \"app_offset\": 90, \"hi_offset\": 90,\n"
        "         \"ls_offset\": -1, \"consumer_lag\": -1},\n"
        "  \"2\": {\"partition\": 2, \"app_offset\": -1001, \"hi_offset\": 70,\n"
        "         \"ls_offset\": 70, \"consumer_lag\": -1}}}}}\n";
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, json, sizeof(json) - 1, 1000), HC_OK);
    char *text = render(m, 1000);
    /* read_committed reads up to the last stable offset */
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.partials\",partition=\"0\"}", "200");
    /* no stable offset reported: the high watermark */
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.partials\",partition=\"1\"}", "0");
    /* not consumed here: no series */
    assert_null(sample(text, "hotcount_consumer_lag{topic=\"likes.partials\",partition=\"2\"}"));
    free(text);
}

/* librdkafka forwards every partition's fetch queue to the consumer's queue and reports that
 * one queue as each partition's fetchq_size: a client's pre-fetch is the largest, not the sum;
 * the gauge sums over clients, and a client that went quiet drops out as its lag does. */
static void stats_fetch_queue_is_each_consumers_queue_summed_over_consumers(void **state)
{
    hc_metrics_t *m = *state;
    static const char fmt[] =
        "{\"name\": \"%s\", \"type\": \"consumer\", \"ts\": 1, \"time\": 1,\n"
        " \"topics\": {\"likes.raw\": {\"topic\": \"likes.raw\", \"partitions\": {\n"
        "  \"0\": {\"partition\": 0, \"fetchq_cnt\": 9, \"fetchq_size\": %d},\n"
        "  \"1\": {\"partition\": 1, \"fetchq_cnt\": 9, \"fetchq_size\": %d},\n"
        "  \"-1\": {\"partition\": -1, \"fetchq_cnt\": 0, \"fetchq_size\": 999999}}}}}\n";
    char json[sizeof(fmt) + 64];
    int len = snprintf(json, sizeof(json), fmt, "a", 4096, 4096);
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, json, (size_t)len, 1000), HC_OK);
    char *text = render(m, 1000);
    assert_sample(text, "hotcount_consumer_fetch_queue_bytes", "4096");
    free(text);
    /* a second consumer in the process (a reported partition mid-rebalance may lag behind) */
    len = snprintf(json, sizeof(json), fmt, "b", 100, 300);
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, json, (size_t)len, 2000), HC_OK);
    text = render(m, 2000);
    assert_sample(text, "hotcount_consumer_fetch_queue_bytes", "4396");
    free(text);
    /* "a" last reported at 1000 with no interval measured: gone after 3 x 5000 ms */
    text = render(m, 16001);
    assert_sample(text, "hotcount_consumer_fetch_queue_bytes", "300");
    free(text);
}

/* The process's RSS is always shown; the allocator's breakdown only with jemalloc (this test
 * links libc's allocator). */
static void render_shows_rss(void **state)
{
    hc_metrics_t *m = *state;
    char *text = render(m, 0);
    const char *rss = sample(text, "hotcount_memory_rss_bytes");
    assert_non_null(rss);
    assert_true(strtoll(rss, NULL, 10) > 0);
    free(text);
}

static void stats_keep_one_series_when_a_partition_moves(void **state)
{
    hc_metrics_t *m = *state;
    assert_int_equal(ingest(m, "a", 10, 11, -1, 1000), HC_OK);
    /* rebalance: b already reports partition 1 while a still does */
    assert_int_equal(ingest(m, "b", -1, 50, 60, 1500), HC_OK);
    char *text = render(m, 1500);
    assert_int_equal(
        count_lines_starting(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}"),
        1);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}", "50");
    free(text);
    /* a no longer reports partition 1: b's entry must survive a's report */
    assert_int_equal(ingest(m, "a", 12, -1, -1, 2000), HC_OK);
    text = render(m, 2000);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", "12");
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"1\"}", "50");
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"2\"}", "60");
    free(text);
}

static void stats_reject_documents_that_are_not_statistics(void **state)
{
    hc_metrics_t *m = *state;
    assert_int_equal(ingest(m, "c", 1, 2, 3, 1000), HC_OK);
    static const char *const bad[] = {
        "",
        "{",
        "[]",
        "42",
        "{\"topics\":{}}",
        "{\"name\":\"c\",\"topics\":[]}",
        "{\"name\":7,\"topics\":{}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, bad[i], strlen(bad[i]), 2000),
                         HC_ERR_INVALID);
    }
    /* odd shapes inside topics are skipped, not fatal */
    static const char odd[] =
        "{\"name\":\"c\",\"topics\":{\"t\":{\"partitions\":{\"0\":{\"partition\":\"0\","
        "\"consumer_lag\":5},\"1\":{\"partition\":1,\"consumer_lag\":2.5},\"2\":{\"partition\":2,"
        "\"consumer_lag\":4}}},\"u\":{\"topic\":\"u\",\"partitions\":[]},\"v\":7}}";
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, odd, sizeof(odd) - 1, 2000), HC_OK);
    char *text = render(m, 2000);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 1);
    assert_sample(text, "hotcount_consumer_lag{topic=\"t\",partition=\"2\"}", "4");
    free(text);
}

static void stats_table_is_bounded(void **state)
{
    hc_metrics_t *m = *state;
    json_t *parts = json_object();
    for (int p = 0; p < HC_METRICS_LAG_MAX + 100; p++) {
        char key[16];
        snprintf(key, sizeof(key), "%d", p);
        json_object_set_new(parts, key, json_pack("{s:i,s:i}", "partition", p, "consumer_lag", 1));
    }
    json_t *doc = json_pack("{s:s,s:{s:{s:s,s:o}}}", "name", "big", "topics", "huge", "topic",
                            "huge", "partitions", parts);
    char *json = json_dumps(doc, JSON_COMPACT);
    assert_non_null(json);
    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, json, strlen(json), 1000), HC_OK);
    char *text = render(m, 1000);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), HC_METRICS_LAG_MAX);
    free(text);
    free(json);
    json_decref(doc);
}

static void stats_of_many_clients_stay_bounded(void **state)
{
    hc_metrics_t *m = *state;
    char name[32];
    for (int c = 0; c < HC_METRICS_LAG_CLIENTS + 10; c++) {
        snprintf(name, sizeof(name), "client-%d", c);
        assert_int_equal(ingest(m, name, c, -1, -1, 1000 + c), HC_OK);
    }
    /* partition 0 moved from client to client: one series, the last reporter's lag */
    char *text = render(m, 1000 + HC_METRICS_LAG_CLIENTS + 10);
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 1);
    char want[16];
    snprintf(want, sizeof(want), "%d", HC_METRICS_LAG_CLIENTS + 9);
    assert_sample(text, "hotcount_consumer_lag{topic=\"likes.raw\",partition=\"0\"}", want);
    free(text);
}

/* ---- readiness ----------------------------------------------------------------------------- */

static void ready_needs_a_running_stage_with_partitions(void **state)
{
    hc_metrics_t *m = *state;
    char why[256];
    assert_false(hc_metrics_readiness(m, 1000, FLUSH_MS, why, sizeof(why))); /* nothing runs */
    assert_string_equal(why, "no stage is running");
    hc_metrics_stage_started(m, HC_METRICS_STAGE1, 1000);
    assert_false(hc_metrics_readiness(m, 1000, FLUSH_MS, why, sizeof(why))); /* no partitions */
    assert_string_equal(why, "stage1 holds no partitions (joining its group, or the broker is "
                             "unreachable)");
    hc_metric_add(m->stage1_assigned, 4);
    assert_true(hc_metrics_is_ready(m, 1000, FLUSH_MS));
    assert_true(hc_metrics_is_ready(m, 100000, FLUSH_MS)); /* idle for long: still ready */

    hc_metrics_stage_started(m, HC_METRICS_STAGE2, 2000);
    assert_false(hc_metrics_readiness(m, 2000, FLUSH_MS, why, sizeof(why))); /* stage 2: none */
    assert_non_null(strstr(why, "stage2 holds no partitions"));
    hc_metric_add(m->stage2_assigned, 2);
    assert_true(hc_metrics_is_ready(m, 2000, FLUSH_MS));

    hc_metric_add(m->stage2_assigned, -2); /* revoked */
    assert_false(hc_metrics_is_ready(m, 2000, FLUSH_MS));
    hc_metrics_stage_stopped(m, HC_METRICS_STAGE2); /* a stopped stage does not count */
    assert_true(hc_metrics_is_ready(m, 2000, FLUSH_MS));
    hc_metric_add(m->retention_gap_parts, 2); /* counts that cannot be rebuilt */
    assert_false(hc_metrics_readiness(m, 2000, FLUSH_MS, why, sizeof(why)));
    assert_string_equal(why, "stage2 holds back 2 partitions: their partials are past retention "
                             "(event retention_gap)");
    hc_metric_add(m->retention_gap_parts, -2);
    assert_true(hc_metrics_readiness(m, 2000, FLUSH_MS, NULL, 0));

    char *text = render(m, 2000);
    assert_sample(text, "hotcount_ready", "1");
    free(text);
    hc_metrics_stage_stopped(m, HC_METRICS_STAGE1);
    assert_false(hc_metrics_is_ready(m, 2000, FLUSH_MS));
    text = render(m, 2000);
    assert_sample(text, "hotcount_ready", "0");
    free(text);
}

static void ready_fails_when_input_waits_three_flush_intervals(void **state)
{
    hc_metrics_t *m = *state;
    hc_metrics_stage_started(m, HC_METRICS_STAGE2, 10000);
    hc_metric_add(m->stage2_assigned, 8);

    /* a window opens and is not flushed */
    hc_metrics_stage_input(m, HC_METRICS_STAGE2, 10100);
    assert_true(hc_metrics_is_ready(m, 13100, FLUSH_MS));
    assert_false(hc_metrics_is_ready(m, 13101, FLUSH_MS));

    /* a flush: ready again, however long it then stays idle */
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE2, 13200, 0.01);
    assert_true(hc_metrics_is_ready(m, 13200, FLUSH_MS));
    assert_true(hc_metrics_is_ready(m, 99999, FLUSH_MS));
    assert_int_equal(hc_metric_get(m->stage[HC_METRICS_STAGE2].last_flush_ms), 13200);
    assert_int_equal(hc_histogram_count(&m->flush_seconds[HC_METRICS_STAGE2]), 1);

    /* after an hour idle, a new window is judged from its own start, not the old flush */
    hc_metrics_stage_input(m, HC_METRICS_STAGE2, 3600000);
    assert_true(hc_metrics_is_ready(m, 3600001, FLUSH_MS));
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE2, 3601000, 0.01);

    /* steady traffic, a window per second: ready throughout */
    for (int64_t t = 3601000; t < 3610000; t += 1000) {
        hc_metrics_stage_input(m, HC_METRICS_STAGE2, t); /* the next window opens at once */
        assert_true(hc_metrics_is_ready(m, t + 999, FLUSH_MS));
        hc_metrics_stage_flushed(m, HC_METRICS_STAGE2, t + 1000, 0.005);
    }

    /* the store goes down: the window opened at 3610000 keeps waiting */
    hc_metrics_stage_input(m, HC_METRICS_STAGE2, 3610000);
    assert_true(hc_metrics_is_ready(m, 3613000, FLUSH_MS));
    assert_false(hc_metrics_is_ready(m, 3613001, FLUSH_MS));
    assert_true(hc_metrics_is_ready(m, 3613001, 5000)); /* a longer flush.ms allows it */
}

static void ready_counts_reread_input_from_its_first_attempt(void **state)
{
    hc_metrics_t *m = *state;
    hc_metrics_stage_started(m, HC_METRICS_STAGE1, 1000);
    hc_metric_add(m->stage1_assigned, 16);
    /* every window aborts and is read again: each reopening keeps the first time */
    for (int64_t t = 2000; t <= 5000; t += 500) {
        hc_metrics_stage_input(m, HC_METRICS_STAGE1, t);
    }
    assert_true(hc_metrics_is_ready(m, 5000, FLUSH_MS));
    assert_false(hc_metrics_is_ready(m, 5001, FLUSH_MS));
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE1, 5100, 0.2);
    assert_true(hc_metrics_is_ready(m, 5101, FLUSH_MS));
}

static void ready_forgets_input_of_released_partitions(void **state)
{
    hc_metrics_t *m = *state;
    hc_metrics_stage_started(m, HC_METRICS_STAGE1, 1000);
    hc_metric_add(m->stage1_assigned, 4);
    hc_metrics_stage_input(m, HC_METRICS_STAGE1, 2000);
    /* revoked: the window is aborted, another consumer reads that input */
    hc_metric_add(m->stage1_assigned, -4);
    hc_metrics_stage_released(m, HC_METRICS_STAGE1);
    assert_false(hc_metrics_is_ready(m, 2100, FLUSH_MS)); /* no partitions */
    /* new partitions of an idle topic: nothing waits */
    hc_metric_add(m->stage1_assigned, 2);
    assert_true(hc_metrics_is_ready(m, 60000, FLUSH_MS));

    /* a stage that stops forgets its waiting input too */
    hc_metrics_stage_input(m, HC_METRICS_STAGE1, 61000);
    hc_metrics_stage_stopped(m, HC_METRICS_STAGE1);
    hc_metrics_stage_started(m, HC_METRICS_STAGE1, 70000);
    assert_true(hc_metrics_is_ready(m, 70000, FLUSH_MS));
}

/* The fault scripts read from this gauge whether a stage has a window open (tests/faults/lib.sh
 * in_flight, docs/EVENTS.md); a gauge stuck at 0, or not cleared by a flush, would make them
 * report every kill as idle, or every one as in flight. */
static void unflushed_input_shows_how_long_input_waits(void **state)
{
    hc_metrics_t *m = *state;
    char *text = render(m, 5000);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"1\"}", "0");
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"2\"}", "0");
    free(text);

    hc_metrics_stage_input(m, HC_METRICS_STAGE1, 6000);
    text = render(m, 7500);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"1\"}", "1.5");
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"2\"}", "0");
    free(text);

    /* aborted and read again: still counted from the first attempt */
    hc_metrics_stage_input(m, HC_METRICS_STAGE1, 7600);
    text = render(m, 8000);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"1\"}", "2");
    free(text);

    /* flushed: nothing waits */
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE1, 8100, 0.1);
    text = render(m, 9000);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"1\"}", "0");
    free(text);

    /* stage 2's window opens, then its partitions are revoked */
    hc_metrics_stage_input(m, HC_METRICS_STAGE2, 9000);
    text = render(m, 9250);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"2\"}", "0.25");
    free(text);
    hc_metrics_stage_released(m, HC_METRICS_STAGE2);
    text = render(m, 9500);
    assert_sample(text, "hotcount_unflushed_input_seconds{stage=\"2\"}", "0");
    free(text);
}

/* ---- an uninitialised (zeroed) metrics block ----------------------------------------------- */

static void zeroed_metrics_are_safe(void **state)
{
    (void)state;
    hc_metrics_t m;
    memset(&m, 0, sizeof(m));
    hc_metric_add(m.events_ok, 3);
    hc_histogram_observe(&m.end_to_end_seconds, 1.0);
    hc_histogram_acc_t acc;
    hc_histogram_acc_init(&acc, &m.batch_posts);
    hc_histogram_acc_add(&acc, 5, 1);
    hc_histogram_acc_merge(&acc, &m.batch_posts);
    hc_hotkey_t key = hot_key("p", 1, 5);
    hc_metrics_publish_hot_keys(&m, "s", &key, 1, 0);
    assert_int_equal(ingest(&m, "c", 1, 2, 3, 0), HC_OK);
    char *text = render(&m, 0);
    assert_sample(text, "hotcount_events_total{result=\"ok\"}", "3");
    assert_sample(text, "hotcount_end_to_end_seconds_count", "0");
    assert_int_equal(count_lines_starting(text, "hotcount_consumer_lag{"), 0);
    free(text);
    hc_metrics_fini(&m);
    hc_metrics_fini(&m); /* idempotent */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(histogram_init_rejects_bad_bounds),
        cmocka_unit_test(histogram_counts_each_value_in_its_le_bucket),
        cmocka_unit_test(histogram_accumulator_merges_like_single_observes),
        cmocka_unit_test_setup_teardown(render_shows_cumulative_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(render_names_every_family_with_help_and_type, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(render_shows_counter_values, setup, teardown),
        cmocka_unit_test_setup_teardown(render_escapes_label_values, setup, teardown),
        cmocka_unit_test_setup_teardown(render_formats_doubles_shortest_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(hot_keys_sum_over_sources_and_expire, setup, teardown),
        cmocka_unit_test_setup_teardown(hot_keys_are_capped_at_twenty, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_record_lag_per_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_drop_partitions_the_client_no_longer_reports, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stats_drop_lag_of_a_client_that_went_quiet, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stats_keep_one_series_when_a_partition_moves, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            stats_fetch_queue_is_each_consumers_queue_summed_over_consumers, setup, teardown),
        cmocka_unit_test_setup_teardown(render_shows_rss, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_derive_lag_from_position_when_librdkafka_has_none,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(stats_reject_documents_that_are_not_statistics, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stats_table_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(stats_of_many_clients_stay_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(ready_needs_a_running_stage_with_partitions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ready_fails_when_input_waits_three_flush_intervals, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ready_counts_reread_input_from_its_first_attempt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(ready_forgets_input_of_released_partitions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unflushed_input_shows_how_long_input_waits, setup,
                                        teardown),
        cmocka_unit_test(zeroed_metrics_are_safe),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
