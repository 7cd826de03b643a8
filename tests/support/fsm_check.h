/* The checks both stages' window state machines get (src/stage/fsm.h), against an oracle of each
 * test's own: every (state, event, outcome) goes where the oracle says or is refused as fsm.h
 * says, and every state and event has a name of its own. Header only, for test programs that
 * include cmocka.h first (after setjmp.h, stdarg.h, stddef.h, stdint.h). */
#ifndef HOTCOUNT_TEST_FSM_CHECK_H
#define HOTCOUNT_TEST_FSM_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hotcount/err.h"

#define HC_FSM_CHECK_SENTINEL "the event's own error"

typedef struct hc_fsm_check {
    const char *machine; /* as the refusal message starts: "stage 1 window" */
    int state_count, event_count, failed;
    /* the product's step, and its names */
    int (*next)(int from, int event, hc_err_t outcome, char *errstr, size_t errstr_size);
    const char *(*state_name)(int state);
    const char *(*event_name)(int event);
    /* the test's oracle: true and *to when the step is legal; *pair_listed when the oracle lists
     * (from, event) for some outcome */
    bool (*legal)(int from, int event, hc_err_t outcome, int *to, bool *pair_listed);
} hc_fsm_check_t;

/* Every (state, event, outcome), every outcome class there is: a legal step leads where the
 * oracle says and leaves errstr alone; a listed pair with another outcome fails and leaves the
 * event's own error; a pair not listed at all fails with an error naming the event and the
 * state; the failed state leaves the error that led there. */
static inline void hc_fsm_check_every_step(const hc_fsm_check_t *m)
{
    for (int from = 0; from < m->state_count; from++) {
        for (int ev = 0; ev < m->event_count; ev++) {
            for (int o = HC_OK; o <= HC_ERR_STALLED; o++) {
                char errstr[256] = HC_FSM_CHECK_SENTINEL;
                bool pair_listed = false;
                int want_to = -1;
                bool ok = m->legal(from, ev, (hc_err_t)o, &want_to, &pair_listed);
                int to = m->next(from, ev, (hc_err_t)o, errstr, sizeof(errstr));
                if (ok) {
                    assert_int_equal(to, want_to);
                    assert_string_equal(errstr, HC_FSM_CHECK_SENTINEL);
                    continue;
                }
                assert_int_equal(to, m->failed);
                if (pair_listed || from == m->failed) {
                    assert_string_equal(errstr, HC_FSM_CHECK_SENTINEL);
                } else {
                    char want[256];
                    snprintf(want, sizeof(want),
                             "%s: event \"%s\" is not allowed in state \"%s\" (a bug)", m->machine,
                             m->event_name(ev), m->state_name(from));
                    assert_string_equal(errstr, want);
                }
            }
        }
    }
}

static inline void hc_fsm_check_names_of(const char *(*name_of)(int), int count)
{
    for (int a = 0; a < count; a++) {
        const char *name = name_of(a);
        assert_non_null(name);
        assert_true(name[0] != '\0' && strcmp(name, "?") != 0);
        for (int b = a + 1; b < count; b++) {
            assert_string_not_equal(name, name_of(b));
        }
    }
    assert_string_equal(name_of(count), "?");
}

/* Every state and event named, each name non-empty, not "?", and unique; "?" past the end. */
static inline void hc_fsm_check_names(const hc_fsm_check_t *m)
{
    hc_fsm_check_names_of(m->state_name, m->state_count);
    hc_fsm_check_names_of(m->event_name, m->event_count);
}

#endif
