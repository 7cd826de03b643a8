/* Stage 1's window state machine (hc_stage1_next, src/stage/stage1_impl.h): one test per legal
 * transition, and the rule that everything else fails, by name. Pure: no Kafka.
 *
 * Each test names the mutant of src/stage/stage1.c it catches: a table entry changed to
 * another state (e.g. COMMIT ok -> OPEN instead of IDLE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fsm_check.h"
#include "stage1_impl.h"

#define S(x) HC_STAGE1_##x
#define EV(x) HC_STAGE1_EV_##x

/* mutant: BEGIN ok leaves the window IDLE (no transaction would ever be open) */
static void begin_opens_a_window(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), EV(BEGIN), HC_OK, NULL, 0), S(OPEN));
}

/* mutant: a failed begin_transaction keeps going (events added outside any transaction) */
static void failed_begin_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), EV(BEGIN), HC_ERR_FATAL, NULL, 0), S(FAILED));
}

/* mutant: a revoke with no window open is treated as a bug */
static void revoke_when_idle_stays_idle(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(IDLE), EV(REVOKE), HC_OK, NULL, 0), S(IDLE));
}

/* mutant: a dead-letter record produced closes or aborts the window */
static void produce_keeps_the_window_open(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(PRODUCE), HC_OK, NULL, 0), S(OPEN));
}

/* mutant: an abortable produce error is ignored (the window would commit without the record)
 * or made fatal (the stage would exit instead of re-reading) */
static void abortable_produce_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(PRODUCE), HC_ERR_ABORT, NULL, 0), S(ABORTING));
}

/* mutant: a committed window stays OPEN (the next events would join a finished transaction) */
static void commit_closes_the_window(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(COMMIT), HC_OK, NULL, 0), S(IDLE));
}

/* mutant: an abortable commit error is fatal, or is taken as committed */
static void abortable_commit_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(COMMIT), HC_ERR_ABORT, NULL, 0), S(ABORTING));
}

/* mutant: a fenced producer (fatal) is aborted and retried instead of stopping the stage */
static void fatal_commit_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(COMMIT), HC_ERR_FATAL, NULL, 0), S(FAILED));
}

/* mutant: a commit whose retries ran out (transient) is aborted and rewound with the same
 * producer, or stops the stage (no_endtxn_defence): its outcome is unknown, and only a new
 * producer epoch fences what of it may still land (docs/RELIABILITY.md, "Late writes") */
static void exhausted_commit_retries_renew_the_producer(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(COMMIT), HC_ERR_TRANSIENT, NULL, 0), S(RENEWING));
}

/* mutant: a lost assignment commits the window (another consumer may own the partitions) */
static void lost_assignment_aborts(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(OPEN), EV(LOSE), HC_OK, NULL, 0), S(ABORTING));
}

/* mutant: an aborted window keeps its producer (no_endtxn_defence: a write of the aborted
 * transaction delayed in the network could land in the next one, same epoch), or is not
 * rewound */
static void abort_renews_the_producer(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(ABORTING), EV(ABORT), HC_OK, NULL, 0), S(RENEWING));
}

/* mutant: an abort whose retries ran out (outcome unknown) stops the stage instead of letting
 * a new epoch settle it, or a fatal abort is retried */
static void unknown_abort_renews_fatal_abort_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(ABORTING), EV(ABORT), HC_ERR_TRANSIENT, NULL, 0),
                     S(RENEWING));
    assert_int_equal(hc_stage1_next(S(ABORTING), EV(ABORT), HC_ERR_FATAL, NULL, 0), S(FAILED));
}

/* mutant: a renewed producer leaves the window un-rewound (the aborted events skipped) */
static void renewed_producer_rewinds(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(RENEWING), EV(RENEW), HC_OK, NULL, 0), S(REWINDING));
}

/* mutant: a producer that could not be made or initialised is used anyway, or retried forever
 * (init_transactions already retried its retriable errors) */
static void failed_renew_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(RENEWING), EV(RENEW), HC_ERR_FATAL, NULL, 0), S(FAILED));
    assert_int_equal(hc_stage1_next(S(RENEWING), EV(RENEW), HC_ERR_TRANSIENT, NULL, 0), S(FAILED));
}

/* mutant: a rewind done leaves messages dropped for ever (REWINDING) */
static void rewind_done_is_idle(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), EV(REWIND), HC_OK, NULL, 0), S(IDLE));
}

/* mutant: a rewind that must wait (assignment lost) stops dropping messages: events past the
 * aborted window would be counted while the aborted ones never are */
static void rewind_not_yet_keeps_dropping(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), EV(REWIND), HC_ERR_TRANSIENT, NULL, 0),
                     S(REWINDING));
}

/* mutant: a failed committed-offset read is ignored */
static void failed_rewind_fails(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), EV(REWIND), HC_ERR_FATAL, NULL, 0), S(FAILED));
}

/* mutant: a revoke leaves a pending rewind behind (the next assignment starts from the
 * committed offsets anyway; a rewind then would re-assign partitions no longer ours) */
static void revoke_clears_a_pending_rewind(void **state)
{
    (void)state;
    assert_int_equal(hc_stage1_next(S(REWINDING), EV(REVOKE), HC_OK, NULL, 0), S(IDLE));
}

/* mutant: FAILED is left by some action (a failed stage would commit again) */
static void failed_is_final(void **state)
{
    (void)state;
    for (int a = 0; a < HC_STAGE1_EVENT_COUNT; a++) {
        for (int e = HC_OK; e <= HC_ERR_FATAL; e++) {
            assert_int_equal(hc_stage1_next(S(FAILED), (hc_stage1_event_t)a, (hc_err_t)e, NULL, 0),
                             S(FAILED));
        }
    }
}

/* The legal steps, as the table in stage1_impl.h lists them: an oracle of the test's own,
 * not a copy of the product's array. */
typedef struct row {
    hc_stage1_state_t from;
    hc_stage1_event_t ev;
    hc_err_t outcome;
    hc_stage1_state_t to;
} row_t;

static const row_t legal[] = {
    {S(IDLE), EV(BEGIN), HC_OK, S(OPEN)},
    {S(IDLE), EV(REVOKE), HC_OK, S(IDLE)},
    {S(OPEN), EV(PRODUCE), HC_OK, S(OPEN)},
    {S(OPEN), EV(PRODUCE), HC_ERR_ABORT, S(ABORTING)},
    {S(OPEN), EV(COMMIT), HC_OK, S(IDLE)},
    {S(OPEN), EV(COMMIT), HC_ERR_ABORT, S(ABORTING)},
    {S(OPEN), EV(COMMIT), HC_ERR_TRANSIENT, S(RENEWING)},
    {S(OPEN), EV(LOSE), HC_OK, S(ABORTING)},
    {S(ABORTING), EV(ABORT), HC_OK, S(RENEWING)},
    {S(ABORTING), EV(ABORT), HC_ERR_TRANSIENT, S(RENEWING)},
    {S(RENEWING), EV(RENEW), HC_OK, S(REWINDING)},
    {S(REWINDING), EV(REWIND), HC_OK, S(IDLE)},
    {S(REWINDING), EV(REWIND), HC_ERR_TRANSIENT, S(REWINDING)},
    {S(REWINDING), EV(REVOKE), HC_OK, S(IDLE)},
};

/* The oracle for hc_fsm_check_every_step: the legal step for (from, ev, outcome). */
static bool legal_step(int from, int ev, hc_err_t outcome, int *to, bool *pair_listed)
{
    bool found = false;
    *pair_listed = false;
    for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++) {
        if ((int)legal[i].from == from && (int)legal[i].ev == ev) {
            *pair_listed = true;
            if (legal[i].outcome == outcome) {
                *to = (int)legal[i].to;
                found = true;
            }
        }
    }
    return found;
}

static int next_of(int from, int ev, hc_err_t outcome, char *errstr, size_t errstr_size)
{
    return (int)hc_stage1_next((hc_stage1_state_t)from, (hc_stage1_event_t)ev, outcome, errstr,
                               errstr_size);
}

static const char *state_name_of(int s)
{
    return hc_stage1_state_name((hc_stage1_state_t)s);
}

static const char *event_name_of(int e)
{
    return hc_stage1_event_name((hc_stage1_event_t)e);
}

static const hc_fsm_check_t machine = {.machine = "stage 1 window",
                                       .state_count = HC_STAGE1_STATE_COUNT,
                                       .event_count = HC_STAGE1_EVENT_COUNT,
                                       .failed = S(FAILED),
                                       .next = next_of,
                                       .state_name = state_name_of,
                                       .event_name = event_name_of,
                                       .legal = legal_step};

/* Every (state, event, outcome), every outcome class there is: a listed step leads where the
 * table says and leaves errstr alone; a listed pair with another outcome fails and leaves the
 * event's own error; a pair the table does not list at all fails with an error naming the
 * event and the state; FAILED leads nowhere and leaves the error that led there.
 * mutants: any extra entry (COMMIT allowed from IDLE, a revoke while OPEN taken without closing
 * the window), any entry missing or leading elsewhere, the refusal left unnamed (the old
 * stage 2's "event %d"), the refusal overwriting a commit's own error. */
static void every_step_is_listed_or_refused_by_name(void **state)
{
    (void)state;
    hc_fsm_check_every_step(&machine);
}

/* mutant: a name table out of step with the enum (a name missing, empty or twice), or a name
 * changed under the logs that print it */
static void every_name_is_present_and_unique(void **state)
{
    (void)state;
    hc_fsm_check_names(&machine);
    assert_string_equal(hc_stage1_state_name(S(REWINDING)), "rewinding");
    assert_string_equal(hc_stage1_event_name(EV(LOSE)), "lose");
    assert_string_equal(hc_stage1_state_name(S(RENEWING)), "renewing");
    assert_string_equal(hc_stage1_event_name(EV(RENEW)), "renew");
    assert_string_equal(hc_stage1_state_name(S(FAILED)), "failed");
    assert_string_equal(hc_stage1_state_name(HC_STAGE1_STATE_COUNT), "?");
    assert_string_equal(hc_stage1_event_name(HC_STAGE1_EVENT_COUNT), "?");
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
        cmocka_unit_test(every_step_is_listed_or_refused_by_name),
        cmocka_unit_test(every_name_is_present_and_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
