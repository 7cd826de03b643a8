/* Stage 2's window state machine (src/stage/stage2_impl.h), one test per transition: pure,
 * no Kafka, no store, and the rule that everything else fails, by name. Each test names the
 * mutant of hc_stage2_next it catches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fsm_check.h"
#include "stage2_impl.h"

#define S(x) HC_STAGE2_##x
#define EV(x) HC_STAGE2_EV_##x

static hc_stage2_state_t next(hc_stage2_state_t s, hc_stage2_event_t ev, hc_err_t outcome)
{
    return hc_stage2_next(s, ev, outcome, NULL, 0);
}

static hc_stage2_state_t applied(hc_stage2_state_t s, hc_err_t outcome)
{
    return next(s, EV(APPLIED), outcome);
}

/* Mutant: a partial in IDLE does not open a window (the loop never flushes it). */
static void idle_partial_opens_a_window(void **state)
{
    (void)state;
    assert_int_equal(next(S(IDLE), EV(PARTIAL), HC_OK), S(OPEN));
}

/* Mutant: closing with no window goes to CLOSING (a batch of nothing would be applied). */
static void idle_close_stays_idle(void **state)
{
    (void)state;
    assert_int_equal(next(S(IDLE), EV(CLOSE), HC_OK), S(IDLE));
}

/* Mutant: IDLE takes an apply or a re-position (a bug in the loop would go unnoticed). */
static void idle_refuses_what_needs_a_window(void **state)
{
    (void)state;
    assert_int_equal(applied(S(IDLE), HC_OK), S(FAILED));
    assert_int_equal(next(S(IDLE), EV(NO_ROOM), HC_OK), S(FAILED));
    assert_int_equal(next(S(IDLE), EV(REPOSITIONED), HC_OK), S(FAILED));
}

/* Mutant: a further partial closes or resets the open window. */
static void open_partial_stays_open(void **state)
{
    (void)state;
    assert_int_equal(next(S(OPEN), EV(PARTIAL), HC_OK), S(OPEN));
}

/* Mutant: a full table drops the partial (OPEN) instead of applying now (FULL). */
static void open_no_room_is_full(void **state)
{
    (void)state;
    assert_int_equal(next(S(OPEN), EV(NO_ROOM), HC_OK), S(FULL));
}

/* Mutant: a landed batch leaves the window open (applied twice at the next due time). */
static void open_applied_ok_is_idle(void **state)
{
    (void)state;
    assert_int_equal(applied(S(OPEN), HC_OK), S(IDLE));
}

/* Mutant: a transient failure drops the window (its likes are lost: the position moved on). */
static void open_transient_retries(void **state)
{
    (void)state;
    assert_int_equal(applied(S(OPEN), HC_ERR_TRANSIENT), S(RETRY));
}

/* Mutant: a failed batch above the shrunk batch limit is retried as it is (it fails the same
 * way forever) instead of being fetched again from its start in smaller windows. From every
 * state that holds a batch; nowhere else. */
static void too_big_rewinds_from_every_batch_state(void **state)
{
    (void)state;
    assert_int_equal(next(S(OPEN), EV(TOO_BIG), HC_ERR_TRANSIENT), S(REWIND));
    assert_int_equal(next(S(FULL), EV(TOO_BIG), HC_ERR_TRANSIENT), S(REWIND));
    assert_int_equal(next(S(RETRY), EV(TOO_BIG), HC_ERR_TRANSIENT), S(REWIND));
    assert_int_equal(next(S(RETRY_REWIND), EV(TOO_BIG), HC_ERR_TRANSIENT), S(REWIND));
    assert_int_equal(next(S(IDLE), EV(TOO_BIG), HC_ERR_TRANSIENT), S(FAILED));
    assert_int_equal(next(S(CLOSING), EV(TOO_BIG), HC_ERR_TRANSIENT), S(FAILED));
    assert_int_equal(next(S(REWIND), EV(TOO_BIG), HC_ERR_TRANSIENT), S(FAILED));
}

/* Mutant: a lost compare-and-set is retried (forever: the offsets moved) instead of re-read. */
static void open_conflict_rereads(void **state)
{
    (void)state;
    assert_int_equal(applied(S(OPEN), HC_ERR_CONFLICT), S(REREAD));
}

/* Mutant: a fatal or invalid store answer is retried. */
static void open_fatal_fails(void **state)
{
    (void)state;
    assert_int_equal(applied(S(OPEN), HC_ERR_FATAL), S(FAILED));
    assert_int_equal(applied(S(OPEN), HC_ERR_INVALID), S(FAILED));
}

/* Mutant: a revoke re-assigns or retries instead of the one last attempt. */
static void open_close_is_closing(void **state)
{
    (void)state;
    assert_int_equal(next(S(OPEN), EV(CLOSE), HC_OK), S(CLOSING));
}

/* Mutant: FULL after landing rewinds (needless re-fetch) or stays full. */
static void full_applied_ok_is_idle(void **state)
{
    (void)state;
    assert_int_equal(applied(S(FULL), HC_OK), S(IDLE));
}

/* Mutant: FULL's transient failure forgets the partial in hand (RETRY: it is never fetched
 * again, a gap). */
static void full_transient_retries_and_rewinds(void **state)
{
    (void)state;
    assert_int_equal(applied(S(FULL), HC_ERR_TRANSIENT), S(RETRY_REWIND));
}

static void full_conflict_rereads(void **state)
{
    (void)state;
    assert_int_equal(applied(S(FULL), HC_ERR_CONFLICT), S(REREAD));
    assert_int_equal(applied(S(FULL), HC_ERR_FATAL), S(FAILED));
}

/* Mutant: a partial joins a FULL window before it was applied. */
static void full_takes_no_partial(void **state)
{
    (void)state;
    assert_int_equal(next(S(FULL), EV(PARTIAL), HC_OK), S(FAILED));
    assert_int_equal(next(S(FULL), EV(CLOSE), HC_OK), S(CLOSING));
}

/* Mutant: a partial joins a batch that waits for its retry (the retry is not the same batch). */
static void retry_takes_no_partial(void **state)
{
    (void)state;
    assert_int_equal(next(S(RETRY), EV(PARTIAL), HC_OK), S(FAILED));
    assert_int_equal(next(S(RETRY_REWIND), EV(PARTIAL), HC_OK), S(FAILED));
}

/* Mutant: a partial turned away during a retry is not remembered (RETRY: a gap after it). */
static void retry_no_room_rewinds(void **state)
{
    (void)state;
    assert_int_equal(next(S(RETRY), EV(NO_ROOM), HC_OK), S(RETRY_REWIND));
    assert_int_equal(next(S(RETRY_REWIND), EV(NO_ROOM), HC_OK), S(RETRY_REWIND));
}

/* Mutant: the retried batch lands but the stage stays paused or re-fetches for nothing. */
static void retry_applied_ok_is_idle(void **state)
{
    (void)state;
    assert_int_equal(applied(S(RETRY), HC_OK), S(IDLE));
}

/* Mutant: a second failure gives up the batch. */
static void retry_transient_retries_again(void **state)
{
    (void)state;
    assert_int_equal(applied(S(RETRY), HC_ERR_TRANSIENT), S(RETRY));
    assert_int_equal(applied(S(RETRY_REWIND), HC_ERR_TRANSIENT), S(RETRY_REWIND));
}

/* Mutant: the retry of an ambiguous commit that had landed meets the lost compare-and-set and
 * retries again (forever) instead of re-reading the store's offsets. */
static void retry_conflict_rereads(void **state)
{
    (void)state;
    assert_int_equal(applied(S(RETRY), HC_ERR_CONFLICT), S(REREAD));
    assert_int_equal(applied(S(RETRY_REWIND), HC_ERR_CONFLICT), S(REREAD));
    assert_int_equal(applied(S(RETRY), HC_ERR_FATAL), S(FAILED));
}

/* Mutant: after the retried batch lands the turned-away partials are not fetched again (IDLE:
 * they are skipped, a gap). */
static void retry_rewind_applied_ok_rewinds(void **state)
{
    (void)state;
    assert_int_equal(applied(S(RETRY_REWIND), HC_OK), S(REWIND));
}

/* Mutant: a revoke during a retry keeps retrying on partitions that are going away. */
static void retry_close_is_closing(void **state)
{
    (void)state;
    assert_int_equal(next(S(RETRY), EV(CLOSE), HC_OK), S(CLOSING));
    assert_int_equal(next(S(RETRY_REWIND), EV(CLOSE), HC_OK), S(CLOSING));
}

/* Mutant: REWIND/REREAD become IDLE before the loop re-assigned (messages from the old
 * positions would be taken), or take a partial meanwhile. */
static void reposition_then_idle(void **state)
{
    (void)state;
    assert_int_equal(next(S(REWIND), EV(REPOSITIONED), HC_OK), S(IDLE));
    assert_int_equal(next(S(REREAD), EV(REPOSITIONED), HC_OK), S(IDLE));
    assert_int_equal(next(S(REWIND), EV(PARTIAL), HC_OK), S(FAILED));
    assert_int_equal(next(S(REREAD), EV(PARTIAL), HC_OK), S(FAILED));
    assert_int_equal(applied(S(REREAD), HC_OK), S(FAILED));
}

/* Mutant (the old flush_window reused by the revoke): a conflict or an outage during a revoke
 * re-reads / re-assigns or retries. Closing drops the window whatever the store said. */
static void closing_never_reassigns(void **state)
{
    (void)state;
    assert_int_equal(applied(S(CLOSING), HC_OK), S(IDLE));
    assert_int_equal(applied(S(CLOSING), HC_ERR_CONFLICT), S(IDLE));
    assert_int_equal(applied(S(CLOSING), HC_ERR_TRANSIENT), S(IDLE));
    assert_int_equal(applied(S(CLOSING), HC_ERR_FATAL), S(FAILED));
    assert_int_equal(next(S(CLOSING), EV(PARTIAL), HC_OK), S(FAILED));
    assert_int_equal(next(S(CLOSING), EV(CLOSE), HC_OK), S(FAILED));
}

/* Mutant: a stage that failed elsewhere still commits its window at the revoke; FAILED is left. */
static void fail_from_anywhere_and_stay(void **state)
{
    (void)state;
    for (int s = S(IDLE); s <= S(FAILED); s++) {
        assert_int_equal(next((hc_stage2_state_t)s, EV(FAIL), HC_OK), S(FAILED));
    }
    for (int ev = EV(PARTIAL); ev <= EV(FAIL); ev++) {
        assert_int_equal(next(S(FAILED), (hc_stage2_event_t)ev, HC_OK), S(FAILED));
    }
    assert_string_equal(hc_stage2_state_name(S(RETRY_REWIND)), "retry_rewind");
}

/* The legal steps, as stage2_impl.h draws them: an oracle of the test's own, not a copy of the
 * product's array. ANY: an event whose outcome is not read. */
#define ANY (-1)
typedef struct row {
    hc_stage2_state_t from;
    hc_stage2_event_t ev;
    int outcome;
    hc_stage2_state_t to;
} row_t;

static const row_t legal[] = {
    {S(IDLE), EV(PARTIAL), ANY, S(OPEN)},
    {S(IDLE), EV(CLOSE), ANY, S(IDLE)},
    {S(IDLE), EV(STORE_MOVED), ANY, S(REREAD)},
    {S(OPEN), EV(PARTIAL), ANY, S(OPEN)},
    {S(OPEN), EV(NO_ROOM), ANY, S(FULL)},
    {S(OPEN), EV(APPLIED), HC_OK, S(IDLE)},
    {S(OPEN), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY)},
    {S(OPEN), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(OPEN), EV(CLOSE), ANY, S(CLOSING)},
    {S(OPEN), EV(TOO_BIG), ANY, S(REWIND)},
    {S(FULL), EV(APPLIED), HC_OK, S(IDLE)},
    {S(FULL), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY_REWIND)},
    {S(FULL), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(FULL), EV(CLOSE), ANY, S(CLOSING)},
    {S(FULL), EV(TOO_BIG), ANY, S(REWIND)},
    {S(RETRY), EV(NO_ROOM), ANY, S(RETRY_REWIND)},
    {S(RETRY), EV(APPLIED), HC_OK, S(IDLE)},
    {S(RETRY), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY)},
    {S(RETRY), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(RETRY), EV(CLOSE), ANY, S(CLOSING)},
    {S(RETRY), EV(TOO_BIG), ANY, S(REWIND)},
    {S(RETRY_REWIND), EV(NO_ROOM), ANY, S(RETRY_REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_OK, S(REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY_REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(RETRY_REWIND), EV(CLOSE), ANY, S(CLOSING)},
    {S(RETRY_REWIND), EV(TOO_BIG), ANY, S(REWIND)},
    {S(REWIND), EV(REPOSITIONED), ANY, S(IDLE)},
    {S(REREAD), EV(REPOSITIONED), ANY, S(IDLE)},
    {S(CLOSING), EV(APPLIED), HC_OK, S(IDLE)},
    {S(CLOSING), EV(APPLIED), HC_ERR_TRANSIENT, S(IDLE)},
    {S(CLOSING), EV(APPLIED), HC_ERR_CONFLICT, S(IDLE)},
};

/* The oracle for hc_fsm_check_every_step: the legal step for (from, ev, outcome). FAIL leads
 * to FAILED from anywhere, whatever the outcome. */
static bool legal_step(int from, int ev, hc_err_t outcome, int *to, bool *pair_listed)
{
    *pair_listed = true;
    if (ev == EV(FAIL)) {
        *to = S(FAILED);
        return true;
    }
    bool found = false;
    *pair_listed = false;
    for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++) {
        if ((int)legal[i].from == from && (int)legal[i].ev == ev) {
            *pair_listed = true;
            if (legal[i].outcome == ANY || legal[i].outcome == (int)outcome) {
                *to = (int)legal[i].to;
                found = true;
            }
        }
    }
    return found;
}

static int next_of(int from, int ev, hc_err_t outcome, char *errstr, size_t errstr_size)
{
    return (int)hc_stage2_next((hc_stage2_state_t)from, (hc_stage2_event_t)ev, outcome, errstr,
                               errstr_size);
}

static const char *state_name_of(int s)
{
    return hc_stage2_state_name((hc_stage2_state_t)s);
}

static const char *event_name_of(int e)
{
    return hc_stage2_event_name((hc_stage2_event_t)e);
}

static const hc_fsm_check_t machine = {.machine = "stage 2 window",
                                       .state_count = HC_STAGE2_STATE_COUNT,
                                       .event_count = HC_STAGE2_EVENT_COUNT,
                                       .failed = S(FAILED),
                                       .next = next_of,
                                       .state_name = state_name_of,
                                       .event_name = event_name_of,
                                       .legal = legal_step};

/* Every (state, event, outcome), every outcome class there is: a listed step leads where the
 * table says and leaves errstr alone; a listed pair with another outcome (a fatal store answer)
 * fails and leaves the store's error; a pair the table does not list at all fails with an
 * error naming the event and the state; FAILED leaves the error that led there.
 * Mutants: an extra entry (a partial joining a waiting batch), an entry missing or leading
 * elsewhere, an outcome read where it is not (CLOSE with a transient outcome failing), the
 * refusal unnamed ("event %d"), the refusal overwriting the store's error. */
static void every_step_is_listed_or_refused_by_name(void **state)
{
    (void)state;
    hc_fsm_check_every_step(&machine);
}

/* Mutant: a name table out of step with the enum (a name missing, empty or twice: the fatal
 * error and the stall report would print "?" or the wrong state). */
static void every_name_is_present_and_unique(void **state)
{
    (void)state;
    hc_fsm_check_names(&machine);
    assert_string_equal(hc_stage2_event_name(EV(STORE_MOVED)), "store_moved");
    assert_string_equal(hc_stage2_event_name(EV(TOO_BIG)), "too_big");
    assert_string_equal(hc_stage2_state_name(HC_STAGE2_STATE_COUNT), "?");
    assert_string_equal(hc_stage2_event_name(HC_STAGE2_EVENT_COUNT), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_partial_opens_a_window),
        cmocka_unit_test(idle_close_stays_idle),
        cmocka_unit_test(idle_refuses_what_needs_a_window),
        cmocka_unit_test(open_partial_stays_open),
        cmocka_unit_test(open_no_room_is_full),
        cmocka_unit_test(open_applied_ok_is_idle),
        cmocka_unit_test(open_transient_retries),
        cmocka_unit_test(open_conflict_rereads),
        cmocka_unit_test(too_big_rewinds_from_every_batch_state),
        cmocka_unit_test(open_fatal_fails),
        cmocka_unit_test(open_close_is_closing),
        cmocka_unit_test(full_applied_ok_is_idle),
        cmocka_unit_test(full_transient_retries_and_rewinds),
        cmocka_unit_test(full_conflict_rereads),
        cmocka_unit_test(full_takes_no_partial),
        cmocka_unit_test(retry_takes_no_partial),
        cmocka_unit_test(retry_no_room_rewinds),
        cmocka_unit_test(retry_applied_ok_is_idle),
        cmocka_unit_test(retry_transient_retries_again),
        cmocka_unit_test(retry_conflict_rereads),
        cmocka_unit_test(retry_rewind_applied_ok_rewinds),
        cmocka_unit_test(retry_close_is_closing),
        cmocka_unit_test(reposition_then_idle),
        cmocka_unit_test(closing_never_reassigns),
        cmocka_unit_test(fail_from_anywhere_and_stay),
        cmocka_unit_test(every_step_is_listed_or_refused_by_name),
        cmocka_unit_test(every_name_is_present_and_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
