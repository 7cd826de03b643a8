/* Window boundaries: aligned to the wall clock, expressed on the monotonic clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include "hotcount/window.h"

static void closes_at_the_next_boundary(void **state)
{
    (void)state;
    /* wall 10 250 ms, mono 500: the boundary 11 000 is 750 ms away */
    assert_int_equal(hc_window_due_ms(500, 10250, 1000, 0), 1250);
    /* on a boundary: the next one, a full window later, never an empty window now */
    assert_int_equal(hc_window_due_ms(500, 10000, 1000, 0), 1500);
    assert_int_equal(hc_window_due_ms(0, 10999, 1000, 0), 1);
}

static void phase_shifts_the_boundary(void **state)
{
    (void)state;
    assert_int_equal(hc_window_due_ms(0, 10250, 1000, 500), 250);  /* 10 500 */
    assert_int_equal(hc_window_due_ms(0, 10600, 1000, 500), 900);  /* 11 500 */
    assert_int_equal(hc_window_due_ms(0, 10500, 1000, 500), 1000); /* on it: the next */
}

static void every_process_gets_the_same_boundary(void **state)
{
    (void)state;
    /* Two processes with different monotonic clocks agree on the wall-clock instant. */
    int64_t a = hc_window_due_ms(123456, 50300, 1000, 0) - 123456 + 50300;
    int64_t b = hc_window_due_ms(9, 50800, 1000, 0) - 9 + 50800;
    assert_int_equal(a, 51000);
    assert_int_equal(b, 51000);
}

static void never_more_than_one_window_away(void **state)
{
    (void)state;
    for (int64_t flush = 1; flush <= 5000; flush = flush * 3 + 1) {
        for (int64_t wall = -3 * flush; wall < 3 * flush; wall += 7) {
            int64_t phase = hc_window_stage2_phase_ms(flush);
            int64_t left = hc_window_due_ms(0, wall, flush, phase);
            assert_true(left >= 1 && left <= flush);
            assert_int_equal(((wall + left - phase) % flush + flush) % flush, 0);
        }
    }
}

static void stage2_on_time_waits_for_the_phase(void **state)
{
    (void)state;
    /* flushed at 10 500, the last phase point: a window opened at 11 100 closes at 11 500 */
    assert_int_equal(hc_window_stage2_due_ms(0, 11100, 1000, 10500), 400);
    assert_int_equal(hc_window_stage2_due_ms(0, 11100, 1000, 10700), 400);
    /* a window opened on a phase point at which stage 2 just flushed: the next one */
    assert_int_equal(hc_window_stage2_due_ms(0, 11500, 1000, 11500), 1000);
}

static void stage2_late_window_lingers_only(void **state)
{
    (void)state;
    /* nothing flushed at 11 500 (stage 1's commit ran late): a window opened at 11 600 closes
     * after the linger, not at 12 500 */
    assert_int_equal(hc_window_stage2_linger_ms(1000), 100);
    assert_int_equal(hc_window_stage2_due_ms(0, 11600, 1000, 10500), 100);
    assert_int_equal(hc_window_stage2_due_ms(0, 11600, 1000, INT64_MIN), 100);
    /* never later than the next phase point */
    assert_int_equal(hc_window_stage2_due_ms(0, 12450, 1000, 10500), 50);
}

static void stage2_at_most_two_flushes_per_window(void **state)
{
    (void)state;
    /* Opened right after any flush, a window closes no sooner than the next phase point; so
     * between two phase points there is at most the late flush and the on-time one. */
    for (int64_t flush = 10; flush <= 5000; flush = flush * 3 + 1) {
        int64_t phase = hc_window_stage2_phase_ms(flush);
        for (int64_t last = 0; last < 3 * flush; last += 3) {
            int64_t due = hc_window_stage2_due_ms(0, last, flush, last);
            assert_true(due >= 1 && due <= flush);
            assert_int_equal(((last + due - phase) % flush + flush) % flush, 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(closes_at_the_next_boundary),
        cmocka_unit_test(phase_shifts_the_boundary),
        cmocka_unit_test(every_process_gets_the_same_boundary),
        cmocka_unit_test(never_more_than_one_window_away),
        cmocka_unit_test(stage2_on_time_waits_for_the_phase),
        cmocka_unit_test(stage2_late_window_lingers_only),
        cmocka_unit_test(stage2_at_most_two_flushes_per_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
