/* Per-partition progress (src/core/progress.c) on a fake clock: what counts as progress, what
 * is caught up, when a partition is stalled, and when the stage gives up on it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hotcount/progress.h"

#define BOUND 10000

static hc_progress_t pg;

static int setup(void **state)
{
    (void)state;
    hc_progress_init(&pg, BOUND);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hc_progress_fini(&pg);
    return 0;
}

static hc_progress_state_t state_of(int32_t p)
{
    return hc_progress_part(&pg, p)->state;
}

/* Every transition of the table, one per line. */
static void next_takes_every_transition(void **state)
{
    (void)state;
    struct {
        hc_progress_state_t from;
        hc_progress_event_t ev;
        bool outcome;
        hc_progress_state_t to;
    } cases[] = {
        {HC_PROGRESS_UNASSIGNED, HC_PROGRESS_EV_ASSIGN, false, HC_PROGRESS_MOVING},
        {HC_PROGRESS_UNASSIGNED, HC_PROGRESS_EV_MOVED, false, HC_PROGRESS_UNASSIGNED},
        {HC_PROGRESS_UNASSIGNED, HC_PROGRESS_EV_LAGGING, false, HC_PROGRESS_UNASSIGNED},
        {HC_PROGRESS_MOVING, HC_PROGRESS_EV_MOVED, false, HC_PROGRESS_MOVING},
        {HC_PROGRESS_MOVING, HC_PROGRESS_EV_LAGGING, false, HC_PROGRESS_STALLED},
        {HC_PROGRESS_MOVING, HC_PROGRESS_EV_REVOKE, false, HC_PROGRESS_UNASSIGNED},
        {HC_PROGRESS_MOVING, HC_PROGRESS_EV_RECOVERY_DUE, true, HC_PROGRESS_MOVING},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_MOVED, false, HC_PROGRESS_MOVING},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_LAGGING, false, HC_PROGRESS_STALLED},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_RECOVERY_DUE, false, HC_PROGRESS_STALLED},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_RECOVERY_DUE, true, HC_PROGRESS_GIVEN_UP},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_REVOKE, false, HC_PROGRESS_UNASSIGNED},
        {HC_PROGRESS_STALLED, HC_PROGRESS_EV_ASSIGN, false, HC_PROGRESS_MOVING},
        {HC_PROGRESS_GIVEN_UP, HC_PROGRESS_EV_LAGGING, false, HC_PROGRESS_GIVEN_UP},
        {HC_PROGRESS_GIVEN_UP, HC_PROGRESS_EV_MOVED, false, HC_PROGRESS_MOVING},
        {HC_PROGRESS_GIVEN_UP, HC_PROGRESS_EV_REVOKE, false, HC_PROGRESS_UNASSIGNED},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hc_progress_state_t to = hc_progress_next(cases[i].from, cases[i].ev, cases[i].outcome);
        if (to != cases[i].to) {
            fail_msg("case %zu: %s -> %s, want %s", i, hc_progress_state_name(cases[i].from),
                     hc_progress_state_name(to), hc_progress_state_name(cases[i].to));
        }
    }
}

/* An idle partition whose end is its committed offset, or whose fetch reached an end one
 * transaction marker past it, is caught up however long nothing is committed; one record
 * waiting behind a fetch that did not reach it is not.
 * Mutants seen failing: caught_up with a slack of one (log_end <= committed + 1: the record
 * hides); caught_up ignoring the EOF (the marker looks like input). */
static void idle_partition_is_caught_up_forever(void **state)
{
    (void)state;
    assert_int_equal(hc_progress_assign(&pg, 3, 0), HC_OK);
    hc_progress_committed(&pg, 3, 10, 0);
    hc_progress_eof(&pg, 3, 11);
    for (int64_t t = BOUND; t < 10 * BOUND; t += BOUND) {
        assert_int_equal(hc_progress_judge(&pg, 3, t % 2 ? 10 : 11, t), HC_PROGRESS_NONE);
        assert_int_equal(state_of(3), HC_PROGRESS_MOVING);
    }
    hc_progress_repositioned(&pg, 3);
    assert_int_equal(hc_progress_judge(&pg, 3, 11, 11 * BOUND), HC_PROGRESS_REPORT_STALL);
}

/* The fetch reached the end past an aborted transaction's records and its marker, which the
 * stage never sees as messages, and everything delivered is committed: caught up. */
static void fetch_at_end_with_nothing_pending_is_caught_up(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 0, 0);
    hc_progress_committed(&pg, 0, 10, 0);
    hc_progress_delivered(&pg, 0, 9);
    hc_progress_eof(&pg, 0, 17);
    assert_int_equal(hc_progress_judge(&pg, 0, 17, BOUND), HC_PROGRESS_NONE);
    assert_int_equal(state_of(0), HC_PROGRESS_MOVING);
    /* more came since: the old EOF no longer reaches the end */
    assert_int_equal(hc_progress_judge(&pg, 0, 30, 2 * BOUND), HC_PROGRESS_REPORT_STALL);
}

/* Input delivered but not committed (a batch that never lands) is not caught up, even with the
 * fetch at the end. Mutant seen failing: caught_up ignoring what was delivered. */
static void delivered_but_uncommitted_input_stalls(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 1, 0);
    hc_progress_committed(&pg, 1, 10, 0);
    hc_progress_delivered(&pg, 1, 14);
    hc_progress_eof(&pg, 1, 15);
    assert_int_equal(hc_progress_judge(&pg, 1, 15, BOUND - 1), HC_PROGRESS_NONE);
    assert_int_equal(hc_progress_judge(&pg, 1, 15, BOUND), HC_PROGRESS_REPORT_STALL);
    assert_int_equal(state_of(1), HC_PROGRESS_STALLED);
    assert_int_equal(hc_progress_stalled_count(&pg), 1);
}

/* A paused partition (the fetch stands at an old end) with input behind it: stalled at the
 * bound, not before; a commit ends the stall. */
static void paused_partition_stalls_then_a_commit_moves_it(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 2, 1000);
    hc_progress_committed(&pg, 2, 100, 1000);
    hc_progress_eof(&pg, 2, 100);
    int32_t due[4];
    assert_int_equal(hc_progress_due(&pg, 1000 + BOUND - 1, due, 4), 0);
    assert_int_equal(hc_progress_due(&pg, 1000 + BOUND, due, 4), 1);
    assert_int_equal(due[0], 2);
    assert_int_equal(hc_progress_judge(&pg, 2, 150, 1000 + BOUND), HC_PROGRESS_REPORT_STALL);
    assert_int_equal(hc_progress_recovered(&pg, 2, true, 1000 + BOUND), HC_PROGRESS_NONE);
    /* judged again every recheck, not only after a bound */
    assert_int_equal(hc_progress_due(&pg, 1000 + BOUND + pg.recheck_ms, due, 4), 1);
    assert_int_equal(hc_progress_committed(&pg, 2, 120, 1000 + BOUND + 1),
                     HC_PROGRESS_REPORT_MOVING);
    assert_int_equal(state_of(2), HC_PROGRESS_MOVING);
    assert_int_equal(hc_progress_stalled_count(&pg), 0);
    /* the same offset again is no progress */
    assert_int_equal(hc_progress_committed(&pg, 2, 120, 1000 + 3 * BOUND), HC_PROGRESS_NONE);
    assert_int_equal(hc_progress_judge(&pg, 2, 150, 1000 + 3 * BOUND), HC_PROGRESS_REPORT_STALL);
}

/* A recovery that acted and moved nothing, then another that would act again: give up. A
 * recovery that waits on an outside cause (the store is down) never gives up.
 * Mutant seen failing: hc_progress_recovered giving up on the first recovery. */
static void gives_up_only_after_an_own_recovery_failed(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 0, 0);
    hc_progress_committed(&pg, 0, 5, 0);
    hc_progress_assign(&pg, 1, 0);
    hc_progress_committed(&pg, 1, 5, 0);
    int64_t t = BOUND;
    assert_int_equal(hc_progress_judge(&pg, 0, 50, t), HC_PROGRESS_REPORT_STALL);
    assert_int_equal(hc_progress_recovered(&pg, 0, true, t), HC_PROGRESS_NONE);
    assert_int_equal(hc_progress_judge(&pg, 1, 50, t), HC_PROGRESS_REPORT_STALL);
    assert_int_equal(hc_progress_recovered(&pg, 1, false, t), HC_PROGRESS_NONE);
    /* within the bound of the recovery: nothing */
    assert_int_equal(hc_progress_judge(&pg, 0, 50, t + BOUND - 1), HC_PROGRESS_NONE);
    t += BOUND;
    assert_int_equal(hc_progress_judge(&pg, 0, 50, t), HC_PROGRESS_RECOVER);
    assert_int_equal(hc_progress_recovered(&pg, 0, true, t), HC_PROGRESS_GIVE_UP);
    assert_int_equal(state_of(0), HC_PROGRESS_GIVEN_UP);
    for (int i = 0; i < 5; i++, t += BOUND) {
        assert_int_equal(hc_progress_judge(&pg, 1, 50, t), HC_PROGRESS_RECOVER);
        assert_int_equal(hc_progress_recovered(&pg, 1, false, t), HC_PROGRESS_NONE);
        assert_int_equal(state_of(1), HC_PROGRESS_STALLED);
    }
    /* the outage ends and its recovery acts: a bound more to show, then give up */
    assert_int_equal(hc_progress_judge(&pg, 1, 50, t), HC_PROGRESS_RECOVER);
    assert_int_equal(hc_progress_recovered(&pg, 1, true, t), HC_PROGRESS_NONE);
    assert_int_equal(hc_progress_judge(&pg, 1, 50, t + BOUND), HC_PROGRESS_RECOVER);
    assert_int_equal(hc_progress_recovered(&pg, 1, true, t + BOUND), HC_PROGRESS_GIVE_UP);
}

/* A seek makes the last EOF and deliveries meaningless: the fetch must reach the end again. */
static void reposition_forgets_where_the_fetch_was(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 4, 0);
    hc_progress_eof(&pg, 4, 40);
    hc_progress_repositioned(&pg, 4);
    assert_int_equal(hc_progress_judge(&pg, 4, 40, BOUND), HC_PROGRESS_REPORT_STALL);
}

/* Revoked partitions are not watched; a re-assign starts a new clock. */
static void revoked_partitions_are_not_judged(void **state)
{
    (void)state;
    hc_progress_assign(&pg, 5, 0);
    hc_progress_revoke(&pg, 5);
    int32_t due[8];
    assert_int_equal(hc_progress_due(&pg, 10 * BOUND, due, 8), 0);
    assert_int_equal(hc_progress_judge(&pg, 5, 99, 10 * BOUND), HC_PROGRESS_NONE);
    hc_progress_assign(&pg, 5, 10 * BOUND);
    assert_int_equal(hc_progress_due(&pg, 11 * BOUND - 1, due, 8), 0);
    assert_int_equal(hc_progress_due(&pg, 11 * BOUND, due, 8), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(next_takes_every_transition),
        cmocka_unit_test_setup_teardown(idle_partition_is_caught_up_forever, setup, teardown),
        cmocka_unit_test_setup_teardown(fetch_at_end_with_nothing_pending_is_caught_up, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(delivered_but_uncommitted_input_stalls, setup, teardown),
        cmocka_unit_test_setup_teardown(paused_partition_stalls_then_a_commit_moves_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(gives_up_only_after_an_own_recovery_failed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(reposition_forgets_where_the_fetch_was, setup, teardown),
        cmocka_unit_test_setup_teardown(revoked_partitions_are_not_judged, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
