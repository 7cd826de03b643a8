/* The stages' whole /metrics page, byte for byte: every family, name, label, HELP and TYPE line
 * of a fully populated hc_metrics_t, against tests/unit/metrics_page.golden (rendered by the
 * renderer before the metric registry, hotcount/metric_defs.h, replaced its literals). Values
 * that depend on the machine (the hotcount_memory_* samples) are masked, and the one series per
 * reason of the dead-letter reasons (core enums that grow) are counted rather than compared. A
 * change to the page is deliberate only when the golden file changes with it:
 *   build/test_metrics_page --print > tests/unit/metrics_page.golden */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/metric_defs.h"
#include "hotcount/metrics.h"

#define FLUSH_MS 1000
#define NOW_MS 100000

static const char stats_doc[] =
    "{\"name\":\"rdkafka#consumer-1\",\"type\":\"consumer\",\"topics\":{\"likes.raw\":{"
    "\"topic\":\"likes.raw\",\"partitions\":{"
    "\"0\":{\"partition\":0,\"fetchq_size\":2048,\"hi_offset\":1400,\"consumer_lag\":400},"
    "\"3\":{\"partition\":3,\"fetchq_size\":100,\"hi_offset\":10,\"consumer_lag\":7}}},"
    "\"li\\\"kes\\nodd\":{\"topic\":\"li\\\"kes\\nodd\",\"partitions\":{"
    "\"1\":{\"partition\":1,\"hi_offset\":5,\"consumer_lag\":5}}}}}";

static hc_hotkey_t hot_key(const char *id, double rate)
{
    hc_hotkey_t k;
    memset(&k, 0, sizeof(k));
    size_t len = strlen(id);
    memcpy(k.post_id, id, len);
    k.post_id_len = len;
    k.count = (int64_t)rate;
    k.events_per_second = rate;
    return k;
}

/* Every counter a distinct value, every histogram a few observations, every table an entry. */
static void populate(hc_metrics_t *m)
{
    int64_t v = 1;
    hc_metric_set(m->events_consumed, v++);
    hc_metric_set(m->events_ok, v++);
    hc_metric_set(m->events_invalid, v++);
    /* the reason series: their own values, so that a new reason moves no other value */
    for (int r = 0; r < HC_EVENT_REASON_COUNT; r++) {
        hc_metric_set(m->invalid_by_reason[r], 1000 + r);
    }
    hc_metric_set(m->partials, v++);
    hc_metric_set(m->partial_records, v++);
    hc_metric_set(m->txn_commit, v++);
    hc_metric_set(m->txn_abort, v++);
    hc_metric_set(m->stage1_assigned, v++);
    hc_metric_set(m->partials_consumed, v++);
    for (int r = 0; r < HC_PARTIAL_REASON_COUNT; r++) {
        hc_metric_set(m->partials_invalid[r], 2000 + r);
    }
    hc_metric_set(m->store_commit, v++);
    hc_metric_set(m->store_conflict, v++);
    hc_metric_set(m->store_error, v++);
    hc_metric_set(m->store_keys_written, v++);
    hc_metric_set(m->events_stored, v++);
    hc_metric_set(m->stage2_assigned, v++);
    hc_metric_set(m->store_forgot, v++);
    hc_metric_set(m->retention_gap_parts, 0);
    hc_metric_set(m->hot_posts, v++);
    hc_metric_set(m->hotkey_to_hot, v++);
    hc_metric_set(m->hotkey_to_cool, v++);
    hc_metric_set(m->hotkey_flaps, v++);
    hc_metric_set(m->hotkeys_enter_milli, 1000500);
    hc_metric_set(m->hotkeys_leave_milli, 500250);
    hc_metric_set(m->partition_stalls[HC_METRICS_STAGE1], v++);
    hc_metric_set(m->partition_stalls[HC_METRICS_STAGE2], v++);
    hc_metric_set(m->store_batch_limit, v++);

    double samples[] = {0.0004, 0.003, 0.02, 0.7, 4, 45, 1e6};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        hc_histogram_observe(&m->end_to_end_seconds, samples[i]);
        hc_histogram_observe(&m->flush_seconds[HC_METRICS_STAGE1], samples[i]);
        hc_histogram_observe_n(&m->flush_seconds[HC_METRICS_STAGE2], samples[i] * 2, 3);
        hc_histogram_observe(&m->batch_posts, samples[i] * 1000);
        hc_histogram_observe(&m->txn_seconds, samples[i] / 3);
        hc_histogram_observe(&m->store_seconds, samples[i] * 7);
    }

    hc_metrics_stage_started(m, HC_METRICS_STAGE1, NOW_MS - 5000);
    hc_metrics_stage_started(m, HC_METRICS_STAGE2, NOW_MS - 5000);
    hc_metrics_stage_input(m, HC_METRICS_STAGE2, NOW_MS - 1250);

    assert_int_equal(hc_metrics_ingest_rdkafka_stats_at(m, stats_doc, strlen(stats_doc), NOW_MS),
                     HC_OK);
    hc_metrics_partition_stalled(m, HC_METRICS_STAGE2, "likes.partials", 5, true, "retry", NOW_MS);
    hc_metrics_partition_stalled(m, HC_METRICS_STAGE1, "li\"kes\\raw", 2, true, "paused\n", NOW_MS);

    hc_hotkey_t keys[3] = {hot_key("p1", 120.5), hot_key("p\"2\"", 80), hot_key("\xff", 3)};
    hc_metrics_publish_hot_keys(m, "stage1/a", keys, 3, NOW_MS);
    hc_hotkey_t set[2] = {hot_key("p1", 1200.25), hot_key("p7", 600)};
    hc_metrics_publish_hot_set(m, "stage2/a", set, 2, NOW_MS);
}

static bool is_reason_sample(const char *line)
{
    return strncmp(line, "hotcount_invalid_events_total{reason=", 37) == 0 ||
           strncmp(line, "hotcount_partials_invalid_total{reason=", 39) == 0;
}

static size_t count_lines_starting(const char *text, const char *prefix)
{
    size_t n = 0;
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    }
    return n;
}

/* The page with the values of the machine-dependent samples replaced by "MASKED". */
static char *render_masked(void)
{
    hc_metrics_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    assert_int_equal(hc_metrics_init(m), HC_OK);
    populate(m);
    char *text = NULL;
    size_t len = hc_metrics_render(m, NOW_MS, FLUSH_MS, &text);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    hc_metrics_fini(m);
    free(m);
    assert_int_equal(count_lines_starting(text, "hotcount_invalid_events_total{reason="),
                     HC_EVENT_REASON_COUNT - 1);
    assert_int_equal(count_lines_starting(text, "hotcount_partials_invalid_total{reason="),
                     HC_PARTIAL_REASON_COUNT - 1);

    char *out = malloc(len * 2 + 1);
    assert_non_null(out);
    size_t o = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *space = memchr(line, ' ', n);
        if (is_reason_sample(line)) {
            /* one series per reason of the core's enums, which grow: counted, not compared */
        } else if (strncmp(line, "hotcount_memory_", 16) == 0 && space) {
            size_t keep = (size_t)(space - line) + 1;
            memcpy(out + o, line, keep);
            o += keep;
            memcpy(out + o, "MASKED", 6);
            o += 6;
        } else {
            memcpy(out + o, line, n);
            o += n;
        }
        if (!is_reason_sample(line)) {
            out[o++] = '\n';
        }
        line = end ? end + 1 : line + n;
    }
    out[o] = '\0';
    free(text);
    return out;
}

static const char *golden_path;

static void page_matches_the_golden_page_byte_for_byte(void **state)
{
    (void)state;
    char *page = render_masked();
    FILE *f = fopen(golden_path, "rb");
    if (!f) {
        fail_msg("cannot read %s", golden_path);
    }
    char *want = malloc(1 << 20);
    assert_non_null(want);
    size_t n = fread(want, 1, (1 << 20) - 1, f);
    fclose(f);
    want[n] = '\0';
    if (strcmp(page, want) != 0) {
        /* the first line that differs, to say what changed */
        const char *a = page;
        const char *b = want;
        int line = 1;
        while (*a && *a == *b) {
            if (*a == '\n') {
                line++;
            }
            a++;
            b++;
        }
        while (a > page && a[-1] != '\n') {
            a--;
            b--;
        }
        const char *ae = strchr(a, '\n');
        const char *be = strchr(b, '\n');
        print_error("line %d differs:\n  rendered: %.*s\n  golden:   %.*s\n", line,
                    ae ? (int)(ae - a) : (int)strlen(a), a, be ? (int)(be - b) : (int)strlen(b), b);
        free(page);
        free(want);
        fail();
    }
    free(page);
    free(want);
}

/* The registry itself: names unique per page and prefixed, one line of HELP each. */
static void registry_names_are_unique_per_page_and_prefixed(void **state)
{
    (void)state;
    for (size_t i = 0; i < HC_METRIC_COUNT; i++) {
        const hc_metric_def_t *a = &hc_metric_defs[i];
        assert_non_null(a->name);
        assert_int_equal(strncmp(a->name, "hotcount_", 9), 0);
        assert_true(a->help[0] != '\0' && strchr(a->help, '\n') == NULL);
        assert_true(a->doc[0] != '\0' && strchr(a->doc, '\n') == NULL);
        assert_true(a->type != HC_METRIC_COUNTER || strstr(a->name, "_total") != NULL);
        for (size_t j = 0; j < i; j++) {
            const hc_metric_def_t *b = &hc_metric_defs[j];
            assert_false(a->page == b->page && strcmp(a->name, b->name) == 0);
        }
    }
}

/* Every family on the page is declared, in the registry's order, and every declared metric of
 * the stages' page is on it (but jemalloc's, absent without jemalloc, as here). */
static void page_shows_exactly_the_declared_metrics_in_order(void **state)
{
    (void)state;
    char *page = render_masked();
    size_t next = 0; /* the registry row the next # TYPE line must name */
    for (const char *line = page; *line;) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, "# TYPE ", 7) == 0) {
            while (next < HC_METRIC_COUNT && (hc_metric_defs[next].page != HC_METRIC_PAGE_STAGES ||
                                              strncmp(line + 7, hc_metric_defs[next].name,
                                                      strlen(hc_metric_defs[next].name)) != 0 ||
                                              line[7 + strlen(hc_metric_defs[next].name)] != ' ')) {
                /* skipped: only jemalloc's may be missing */
                assert_true(hc_metric_defs[next].page != HC_METRIC_PAGE_STAGES ||
                            next == HC_M_MEMORY_ALLOCATED_BYTES ||
                            next == HC_M_MEMORY_RESIDENT_BYTES ||
                            next == HC_M_MEMORY_RETAINED_BYTES);
                next++;
            }
            assert_true(next < HC_METRIC_COUNT); /* a family the registry does not declare */
            next++;
        }
        line = end ? end + 1 : line + strlen(line);
    }
    for (; next < HC_METRIC_COUNT; next++) {
        assert_true(hc_metric_defs[next].page != HC_METRIC_PAGE_STAGES ||
                    next == HC_M_MEMORY_ALLOCATED_BYTES || next == HC_M_MEMORY_RESIDENT_BYTES ||
                    next == HC_M_MEMORY_RETAINED_BYTES);
    }
    free(page);
}

/* The docs' table: one row per metric of the page, `|` escaped. */
static void markdown_has_a_row_per_metric_with_pipes_escaped(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    hc_metric_defs_print_markdown(f, HC_METRIC_PAGE_STAGES);
    fclose(f);
    size_t rows = 0;
    for (size_t i = 0; i < HC_METRIC_COUNT; i++) {
        rows += hc_metric_defs[i].page == HC_METRIC_PAGE_STAGES;
    }
    assert_int_equal(count_lines_starting(buf, "| `hotcount_"), rows);
    assert_non_null(strstr(buf, "| `hotcount_events_total` | counter | "
                                "`result=\"ok\"\\|\"invalid\"` | "));
    assert_non_null(strstr(buf, "| `hotcount_consumer_lag` | gauge | `topic`, `partition` | "));
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print") == 0) {
        char *page = render_masked();
        fputs(page, stdout);
        free(page);
        return 0;
    }
    golden_path = argc > 1 ? argv[1] : HC_METRICS_GOLDEN;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(page_matches_the_golden_page_byte_for_byte),
        cmocka_unit_test(registry_names_are_unique_per_page_and_prefixed),
        cmocka_unit_test(page_shows_exactly_the_declared_metrics_in_order),
        cmocka_unit_test(markdown_has_a_row_per_metric_with_pipes_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
