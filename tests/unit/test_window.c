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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(closes_at_the_next_boundary),
        cmocka_unit_test(phase_shifts_the_boundary),
        cmocka_unit_test(every_process_gets_the_same_boundary),
        cmocka_unit_test(never_more_than_one_window_away),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
