/* Unit tests for stage 2's window log (src/core/window_log.c): every record read back is the one
 * appended, against a plain array of the same records, for ordinary windows and for hostile
 * extremes (INT64_MIN/MAX in every field, offsets and timestamps that jump both ways). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hotcount/window_log.h"

/* splitmix64: a seeded, reproducible stream of 64-bit values */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static const int64_t extremes[] = {0,
                                   1,
                                   -1,
                                   INT64_MIN,
                                   INT64_MAX,
                                   INT64_MIN + 1,
                                   INT64_MAX - 1,
                                   (int64_t)1 << 62,
                                   -((int64_t)1 << 62),
                                   1733400000000};

/* a field: mostly an extreme, sometimes any 64-bit value, sometimes small */
static int64_t any_field(uint64_t *s)
{
    uint64_t r = next_u64(s);
    switch (r % 3) {
    case 0:
        return extremes[(r >> 8) % (sizeof(extremes) / sizeof(extremes[0]))];
    case 1:
        return (int64_t)next_u64(s);
    default:
        return (int64_t)((r >> 8) % 2001) - 1000;
    }
}

static void check_equal(const hc_window_log_rec_t *a, const hc_window_log_rec_t *b, size_t i)
{
    if (memcmp(a, b, sizeof(*a)) != 0) {
        fail_msg("record %zu: partition %d/%d entry %u/%u offset %lld/%lld delta %lld/%lld "
                 "events %lld/%lld ts %lld-%lld/%lld-%lld",
                 i, a->partition, b->partition, a->entry, b->entry, (long long)a->offset,
                 (long long)b->offset, (long long)a->delta, (long long)b->delta,
                 (long long)a->events, (long long)b->events, (long long)a->ts_min,
                 (long long)a->ts_max, (long long)b->ts_min, (long long)b->ts_max);
    }
}

/* Appends want[0..n), reads them back, requires the same records in order and nothing more. */
static void round_trip(hc_window_log_t *log, const hc_window_log_rec_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(hc_window_log_append(log, &want[i]), HC_OK);
    }
    assert_int_equal(log->count, n);
    hc_window_log_pos_t pos = {0};
    hc_window_log_rec_t got;
    for (size_t i = 0; i < n; i++) {
        memset(&got, 0xa5, sizeof(got)); /* padding compared too: none in this struct */
        assert_true(hc_window_log_next(log, &pos, &got));
        check_equal(&got, &want[i], i);
    }
    assert_false(hc_window_log_next(log, &pos, &got));
}

/* Mutants seen failing: zigzag without the sign mask, ts_max stored as is but read as a
 * difference, the offset difference taken from the first record instead of the previous. */
static void hostile_values_read_back_exactly(void **state)
{
    (void)state;
    enum { N = 20000 };
    hc_window_log_rec_t *want = calloc(N, sizeof(*want));
    assert_non_null(want);
    uint64_t seed = 20261205;
    for (size_t i = 0; i < N; i++) {
        want[i] = (hc_window_log_rec_t){.partition = (int32_t)next_u64(&seed),
                                        .entry = (uint32_t)next_u64(&seed),
                                        .offset = any_field(&seed),
                                        .delta = any_field(&seed),
                                        .events = any_field(&seed),
                                        .ts_min = any_field(&seed),
                                        .ts_max = any_field(&seed)};
    }
    hc_window_log_t log;
    hc_window_log_init(&log);
    round_trip(&log, want, N);
    hc_window_log_fini(&log);
    free(want);
}

/* The common window: posts of packed records, offsets in a few partitions, small deltas, one
 * timestamp range per record. Small is the point of the log: at most 16 bytes a record here. */
static void ordinary_window_is_small_and_reusable(void **state)
{
    (void)state;
    enum { N = 100000 };
    hc_window_log_rec_t *want = calloc(N, sizeof(*want));
    assert_non_null(want);
    uint64_t seed = 7;
    for (size_t i = 0; i < N; i++) {
        int64_t rec = (int64_t)(i / 250); /* 250 posts per packed record */
        int64_t ts = 1733400000000 + rec * 1000;
        want[i] = (hc_window_log_rec_t){.partition = (int32_t)(rec % 8),
                                        .entry = (uint32_t)i,
                                        .offset = 1000000 + rec / 8,
                                        .delta = 1 + (int64_t)(next_u64(&seed) % 40),
                                        .events = 1 + (int64_t)(next_u64(&seed) % 40),
                                        .ts_min = ts,
                                        .ts_max = ts + 999};
    }
    hc_window_log_t log;
    hc_window_log_init(&log);
    round_trip(&log, want, N);
    assert_true(log.len <= (size_t)N * 16);
    /* the next window reuses the memory and starts its differences afresh */
    size_t cap = log.cap;
    hc_window_log_clear(&log);
    assert_int_equal(log.count, 0);
    round_trip(&log, want + N / 2, N / 2);
    assert_int_equal(log.cap, cap);
    hc_window_log_fini(&log);
    free(want);
}

static void empty_log_has_no_record(void **state)
{
    (void)state;
    hc_window_log_t log;
    hc_window_log_init(&log);
    hc_window_log_pos_t pos = {0};
    hc_window_log_rec_t got;
    assert_false(hc_window_log_next(&log, &pos, &got));
    hc_window_log_fini(&log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hostile_values_read_back_exactly),
        cmocka_unit_test(ordinary_window_is_small_and_reusable),
        cmocka_unit_test(empty_log_has_no_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
