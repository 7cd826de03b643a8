/* Unit tests for the one reader of Prometheus text (src/obs/prom_text.c): samples, labels and
 * their escapes, lines that are no sample, a page of the stages' own renderer read back, and
 * linear time on a hostile page. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/metrics.h"
#include "hotcount/prom_text.h"

/* The samples of text as "name|labels|value" lines. */
static char *samples(const char *text)
{
    static char out[4096];
    size_t o = 0;
    hc_prom_sample_t s;
    for (const char *pos = text; hc_prom_next(&pos, &s);) {
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%.*s|%.*s|%g\n", (int)s.name_len, s.name,
                              (int)s.labels_len, s.labels, s.value);
    }
    out[o] = '\0';
    return out;
}

static void reads_samples_and_skips_comments_and_broken_lines(void **state)
{
    (void)state;
    const char *page = "# HELP a_total A counter.\n"
                       "# TYPE a_total counter\n"
                       "a_total 3\n"
                       "\n"
                       "b{x=\"1\",y=\"two\"} 2.5 1700000000000\n"
                       "c{x=\"1\" 7\n" /* label set never closes on its line */
                       "d\n"           /* no value */
                       "e \n"          /* no value: the next line's is not taken */
                       "5\n"
                       "f NaN\n"
                       "g{le=\"+Inf\"} +Inf\n"
                       "h{v=\"a}b\\\"c\"} 1"; /* no final newline */
    assert_string_equal(samples(page), "a_total||3\n"
                                       "b|x=\"1\",y=\"two\"|2.5\n"
                                       "f||nan\n"
                                       "g|le=\"+Inf\"|inf\n"
                                       "h|v=\"a}b\\\"c\"|1\n");
}

static void family_match_is_exact(void **state)
{
    (void)state;
    hc_prom_sample_t s;
    const char *pos = "hotcount_events_total_extra 1\nhotcount_events_total{result=\"ok\"} 2\n";
    assert_true(hc_prom_next(&pos, &s));
    assert_false(hc_prom_is(&s, "hotcount_events_total"));
    assert_true(hc_prom_next(&pos, &s));
    assert_true(hc_prom_is(&s, "hotcount_events_total"));
    assert_false(hc_prom_is(&s, "hotcount_events"));
    assert_false(hc_prom_next(&pos, &s));
}

static void label_values_are_unescaped_and_found_by_whole_name(void **state)
{
    (void)state;
    hc_prom_sample_t s;
    const char *pos = "m{xstage=\"9\",v=\"q\\\"u\\\\o\\nte\",stage=\"1\"} 1\n";
    assert_true(hc_prom_next(&pos, &s));
    char buf[32];
    size_t len = 0;
    assert_true(hc_prom_label(&s, "stage", buf, sizeof(buf), &len));
    assert_string_equal(buf, "1"); /* not xstage's */
    assert_true(hc_prom_label(&s, "v", buf, sizeof(buf), &len));
    assert_int_equal(len, 8);
    assert_string_equal(buf, "q\"u\\o\nte");
    assert_false(hc_prom_label(&s, "stag", buf, sizeof(buf), NULL));
    assert_true(hc_prom_has_label(&s, "stage", "1"));
    assert_false(hc_prom_has_label(&s, "stage", "2"));
    /* cut to the buffer, still terminated */
    char small[4];
    assert_true(hc_prom_label(&s, "v", small, sizeof(small), &len));
    assert_int_equal(len, 3);
    assert_string_equal(small, "q\"u");
}

/* What the stages render, the reader reads: every sample line, escaped label values back. */
static void reads_back_the_stages_page(void **state)
{
    (void)state;
    hc_metrics_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    assert_int_equal(hc_metrics_init(m), HC_OK);
    hc_metrics_partition_stalled(m, HC_METRICS_STAGE1, "li\"kes\\raw", 2, true, "paused\n}", 1000);
    hc_metric_set(m->txn_commit, 42);
    char *text = NULL;
    assert_true(hc_metrics_render(m, 1000, 1000, &text) > 0);
    size_t lines = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
        lines += l[0] != '#';
    }
    size_t read = 0;
    bool stalled = false;
    bool commits = false;
    hc_prom_sample_t s;
    for (const char *pos = text; hc_prom_next(&pos, &s);) {
        read++;
        char buf[64];
        if (hc_prom_is(&s, "hotcount_partition_stalled")) {
            assert_true(hc_prom_label(&s, "topic", buf, sizeof(buf), NULL));
            assert_string_equal(buf, "li\"kes\\raw");
            assert_true(hc_prom_label(&s, "state", buf, sizeof(buf), NULL));
            assert_string_equal(buf, "paused\n}");
            assert_true(hc_prom_has_label(&s, "partition", "2"));
            stalled = true;
        }
        if (hc_prom_is(&s, "hotcount_transactions_total") &&
            hc_prom_has_label(&s, "outcome", "commit")) {
            commits = s.value == 42;
        }
    }
    assert_int_equal(read, lines);
    assert_true(stalled && commits);
    free(text);
    hc_metrics_fini(m);
    free(m);
}

/* A hostile page (issue 25, item 8): 4 MiB of lines that open a label set or a quoted value and
 * never close it, or whose value is missing, read in time linear in its size.
 * mutant: labels_end scanning to the end of the text instead of the line (seconds here) */
static void hostile_page_is_read_in_linear_time(void **state)
{
    (void)state;
    static const char *const lines[] = {"a{x=\"1\"\n", "a{x=\"1\\\n", "a{\n", "a \n"};
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
        /* CPU time, not wall time: a loaded machine stretches the wall clock, not this */
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        hc_prom_sample_t s;
        const char *pos = text;
        assert_false(hc_prom_next(&pos, &s));
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        print_message("%.10s...: %.3f CPU-s\n", lines[l], secs);
        assert_true(secs < 1.0);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_samples_and_skips_comments_and_broken_lines),
        cmocka_unit_test(family_match_is_exact),
        cmocka_unit_test(label_values_are_unescaped_and_found_by_whole_name),
        cmocka_unit_test(reads_back_the_stages_page),
        cmocka_unit_test(hostile_page_is_read_in_linear_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
