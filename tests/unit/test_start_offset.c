/* Where stage 1 starts a raw partition the consumer found no offset for (src/core/start_offset.c).
 * Mutants this fails on: "none" believed at the first answer (the jump to offset 0 after a
 * broker restart, docs/RELIABILITY.md F3); a committed offset below the log start sought anyway
 * (the fetch fails out of range again, for ever); an empty partition asked again (every fresh
 * group's start waits for nothing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hotcount/offset.h"
#include "hotcount/start_offset.h"

#define CONFIRM 4

static void a_committed_offset_within_the_log_is_where_it_starts(void **state)
{
    (void)state;
    assert_int_equal(hc_start_decide(8006, 0, 12000, 1, CONFIRM), HC_START_COMMITTED);
    assert_int_equal(hc_start_decide(0, 0, 12000, 1, CONFIRM), HC_START_COMMITTED);
    assert_int_equal(hc_start_decide(12000, 0, 12000, 1, CONFIRM), HC_START_COMMITTED);
    assert_int_equal(hc_start_decide(500, 500, 600, 1, CONFIRM), HC_START_COMMITTED);
}

static void no_committed_offset_with_records_is_asked_again_before_it_is_believed(void **state)
{
    (void)state;
    for (int answers = 1; answers < CONFIRM; answers++) {
        assert_int_equal(hc_start_decide(HC_OFFSET_NONE, 0, 12000, answers, CONFIRM),
                         HC_START_ASK_AGAIN);
    }
    assert_int_equal(hc_start_decide(HC_OFFSET_NONE, 0, 12000, CONFIRM, CONFIRM), HC_START_FIRST);
    /* a later read that finds the offset wins, whatever came before */
    assert_int_equal(hc_start_decide(8006, 0, 12000, CONFIRM - 1, CONFIRM), HC_START_COMMITTED);
}

static void an_empty_partition_starts_at_once(void **state)
{
    (void)state;
    assert_int_equal(hc_start_decide(HC_OFFSET_NONE, 0, 0, 1, CONFIRM), HC_START_FIRST);
    assert_int_equal(hc_start_decide(HC_OFFSET_NONE, 700, 700, 1, CONFIRM), HC_START_FIRST);
}

static void a_committed_offset_outside_the_log_starts_at_the_first_record(void **state)
{
    (void)state;
    assert_int_equal(hc_start_decide(10, 500, 600, 1, CONFIRM), HC_START_FIRST_RETENTION);
    assert_int_equal(hc_start_decide(900, 500, 600, 1, CONFIRM), HC_START_FIRST_TRUNCATED);
}

static void every_decision_has_a_name(void **state)
{
    (void)state;
    for (int d = 0; d < HC_START_DECISION_COUNT; d++) {
        assert_string_not_equal(hc_start_decision_name((hc_start_decision_t)d), "?");
    }
    assert_string_equal(hc_start_decision_name(HC_START_DECISION_COUNT), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_committed_offset_within_the_log_is_where_it_starts),
        cmocka_unit_test(no_committed_offset_with_records_is_asked_again_before_it_is_believed),
        cmocka_unit_test(an_empty_partition_starts_at_once),
        cmocka_unit_test(a_committed_offset_outside_the_log_starts_at_the_first_record),
        cmocka_unit_test(every_decision_has_a_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
