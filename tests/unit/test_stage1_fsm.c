/* Stage 1's window state machine (hc_stage1_next, hotcount/stage.h): one test per legal
 * transition, and the rule that everything else fails. Pure: no Kafka.
 *
 * Each test names the mutant of src/stage/stage1.c it catches: a table entry changed to
 * another state (e.g. COMMIT ok -> OPEN instead of IDLE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "hotcount/stage.h"

#define S(x) HC_STAGE1_##x

/* mutant: BEGIN ok leaves the window IDLE (no transaction would ever be open) */
static void begin_opens_a_window(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), S(BEGIN), HC_OK), S(OPEN));
}

/* mutant: a failed begin_transaction keeps going (events added outside any transaction) */
static void failed_begin_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), S(BEGIN), HC_ERR_FATAL), S(FAILED));
}

/* mutant: a revoke with no window open is treated as a bug */
static void revoke_when_idle_stays_idle(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), S(REVOKE), HC_OK), S(IDLE));
}

/* mutant: a dead-letter record produced closes or aborts the window */
static void produce_keeps_the_window_open(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(PRODUCE), HC_OK), S(OPEN));
}

/* mutant: an abortable produce error is ignored (the window would commit without the record)
 * or made fatal (the stage would exit instead of re-reading) */
static void abortable_produce_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(PRODUCE), HC_ERR_ABORT), S(ABORTING));
}

/* mutant: a committed window stays OPEN (the next events would join a finished transaction) */
static void commit_closes_the_window(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(COMMIT), HC_OK), S(IDLE));
}

/* mutant: an abortable commit error is fatal, or is taken as committed */
static void abortable_commit_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(COMMIT), HC_ERR_ABORT), S(ABORTING));
}

/* mutant: a fenced producer (fatal) is aborted and retried instead of stopping the stage */
static void fatal_commit_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(COMMIT), HC_ERR_FATAL), S(FAILED));
}

/* mutant: a commit whose retries ran out (transient) is aborted and rewound with the same
 * producer, or stops the stage (no_endtxn_defence): its outcome is unknown, and only a new
 * producer epoch fences what of it may still land (docs/RELIABILITY.md, "Late writes") */
static void exhausted_commit_retries_renew_the_producer(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(COMMIT), HC_ERR_TRANSIENT), S(RENEWING));
}

/* mutant: a lost assignment commits the window (another consumer may own the partitions) */
static void lost_assignment_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), S(LOSE), HC_OK), S(ABORTING));
}

/* mutant: an aborted window keeps its producer (no_endtxn_defence: a write of the aborted
 * transaction delayed in the network could land in the next one, same epoch), or is not
 * rewound */
static void abort_renews_the_producer(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(ABORTING), S(ABORT), HC_OK), S(RENEWING));
}

/* mutant: an abort whose retries ran out (outcome unknown) stops the stage instead of letting
 * a new epoch settle it, or a fatal abort is retried */
static void unknown_abort_renews_fatal_abort_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(ABORTING), S(ABORT), HC_ERR_TRANSIENT), S(RENEWING));
    assert_int_equal(hc_stage1_next(S(ABORTING), S(ABORT), HC_ERR_FATAL), S(FAILED));
}

/* mutant: a renewed producer leaves the window un-rewound (the aborted events skipped) */
static void renewed_producer_rewinds(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(RENEWING), S(RENEW), HC_OK), S(REWINDING));
}

/* mutant: a producer that could not be made or initialised is used anyway, or retried forever
 * (init_transactions already retried its retriable errors) */
static void failed_renew_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(RENEWING), S(RENEW), HC_ERR_FATAL), S(FAILED));
    assert_int_equal(hc_stage1_next(S(RENEWING), S(RENEW), HC_ERR_TRANSIENT), S(FAILED));
}

/* mutant: a rewind done leaves messages dropped for ever (REWINDING) */
static void rewind_done_is_idle(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), S(REWIND), HC_OK), S(IDLE));
}

/* mutant: a rewind that must wait (assignment lost) stops dropping messages: events past the
 * aborted window would be counted while the aborted ones never are */
static void rewind_not_yet_keeps_dropping(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), S(REWIND), HC_ERR_TRANSIENT), S(REWINDING));
}

/* mutant: a failed committed-offset read is ignored */
static void failed_rewind_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), S(REWIND), HC_ERR_FATAL), S(FAILED));
}

/* mutant: a revoke leaves a pending rewind behind (the next assignment starts from the
 * committed offsets anyway; a rewind then would re-assign partitions no longer ours) */
static void revoke_clears_a_pending_rewind(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), S(REVOKE), HC_OK), S(IDLE));
}

/* mutant: FAILED is left by some action (a failed stage would commit again) */
static void failed_is_final(void **state)
{
    (void)state;
    for (int a = 0; a < HC_STAGE1_ACTION_COUNT; a++) {
        for (int e = HC_OK; e <= HC_ERR_FATAL; e++) {
            assert_int_equal(hc_stage1_next(S(FAILED), (hc_stage1_action_t)a, (hc_err_t)e),
                             S(FAILED));
        }
    }
}

/* The legal pairs, as the table in stage.h lists them. */
static bool is_legal(hc_stage1_state_t from, hc_stage1_action_t a, hc_err_t e)
{
    static const struct {
        hc_stage1_state_t from;
        hc_stage1_action_t action;
        hc_err_t outcome;
    } legal[] = {
        {S(IDLE), S(BEGIN), HC_OK},
        {S(IDLE), S(REVOKE), HC_OK},
        {S(OPEN), S(PRODUCE), HC_OK},
        {S(OPEN), S(PRODUCE), HC_ERR_ABORT},
        {S(OPEN), S(COMMIT), HC_OK},
        {S(OPEN), S(COMMIT), HC_ERR_ABORT},
        {S(OPEN), S(LOSE), HC_OK},
        {S(ABORTING), S(ABORT), HC_OK},
        {S(OPEN), S(COMMIT), HC_ERR_TRANSIENT},
        {S(ABORTING), S(ABORT), HC_ERR_TRANSIENT},
        {S(RENEWING), S(RENEW), HC_OK},
        {S(REWINDING), S(REWIND), HC_OK},
        {S(REWINDING), S(REWIND), HC_ERR_TRANSIENT},
        {S(REWINDING), S(REVOKE), HC_OK},
    };
    for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++) {
        if (legal[i].from == from && legal[i].action == a && legal[i].outcome == e) {
            return true;
        }
    }
    return false;
}

/* mutant: any extra entry (e.g. COMMIT allowed from IDLE, a revoke while OPEN taken without
 * closing the window): every pair outside the table fails */
static void everything_else_fails(void **state)
{
    (void)state;
    for (int s = 0; s < HC_STAGE1_STATE_COUNT; s++) {
        for (int a = 0; a < HC_STAGE1_ACTION_COUNT; a++) {
            for (int e = HC_OK; e <= HC_ERR_FATAL; e++) {
                hc_stage1_state_t from = (hc_stage1_state_t)s;
                hc_stage1_state_t to = hc_stage1_next(from, (hc_stage1_action_t)a, (hc_err_t)e);
                if (!is_legal(from, (hc_stage1_action_t)a, (hc_err_t)e)) {
                    assert_int_equal(to, S(FAILED));
                } else {
                    assert_int_not_equal(to, S(FAILED));
                }
            }
        }
    }
}

/* mutant: a name table out of step with the enum */
static void names_are_distinct(void **state)
{
    (void)state;
    for (int s = 0; s < HC_STAGE1_STATE_COUNT; s++) {
        for (int t = s + 1; t < HC_STAGE1_STATE_COUNT; t++) {
            assert_string_not_equal(hc_stage1_state_name((hc_stage1_state_t)s),
                                    hc_stage1_state_name((hc_stage1_state_t)t));
        }
    }
    for (int a = 0; a < HC_STAGE1_ACTION_COUNT; a++) {
        for (int b = a + 1; b < HC_STAGE1_ACTION_COUNT; b++) {
            assert_string_not_equal(hc_stage1_action_name((hc_stage1_action_t)a),
                                    hc_stage1_action_name((hc_stage1_action_t)b));
        }
    }
    assert_string_equal(hc_stage1_state_name(S(REWINDING)), "rewinding");
    assert_string_equal(hc_stage1_action_name(S(LOSE)), "lose");
    assert_string_equal(hc_stage1_state_name(S(RENEWING)), "renewing");
    assert_string_equal(hc_stage1_action_name(S(RENEW)), "renew");
    assert_string_equal(hc_stage1_state_name(S(FAILED)), "failed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(begin_opens_a_window),
        cmocka_unit_test(failed_begin_fails),
        cmocka_unit_test(revoke_when_idle_stays_idle),
        cmocka_unit_test(produce_keeps_the_window_open),
        cmocka_unit_test(abortable_produce_aborts),
        cmocka_unit_test(commit_closes_the_window),
        cmocka_unit_test(abortable_commit_aborts),
        cmocka_unit_test(fatal_commit_fails),
        cmocka_unit_test(exhausted_commit_retries_renew_the_producer),
        cmocka_unit_test(lost_assignment_aborts),
        cmocka_unit_test(abort_renews_the_producer),
        cmocka_unit_test(unknown_abort_renews_fatal_abort_fails),
        cmocka_unit_test(renewed_producer_rewinds),
        cmocka_unit_test(failed_renew_fails),
        cmocka_unit_test(rewind_done_is_idle),
        cmocka_unit_test(rewind_not_yet_keeps_dropping),
        cmocka_unit_test(failed_rewind_fails),
        cmocka_unit_test(revoke_clears_a_pending_rewind),
        cmocka_unit_test(failed_is_final),
        cmocka_unit_test(everything_else_fails),
        cmocka_unit_test(names_are_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
