/* The shape both stages' window state machines share (stage1_impl.h, stage2_impl.h): one
 * vocabulary, one kind of table, one way to look it up. Private to src/stage and its tests.
 *
 * A machine has states and events. An event is something that happened to the window (a
 * message opened it, a commit or a batch was done, the partitions went); its outcome is the
 * class of that thing's result (hc_err_t; HC_OK for an event that cannot fail). The transition
 * table lists every legal (state, event, outcome) -> state, and nothing else: any other step
 * leads to the machine's failed state, which is final.
 *
 * Two ways to reach the failed state, told apart because they mean different things:
 *   - the (state, event) pair is listed, but not for this outcome (a fatal commit, a store that
 *     refused the batch for good): the error is the event's own, errstr is left as it is;
 *   - the pair is not listed at all (the state does not take the event): a bug in the stage;
 *     errstr says so, naming the machine, the event and the state.
 * From the failed state nothing is listed and errstr is left as it is: the error that led there
 * stands.
 *
 * A state may ask for an action at once (stage 1's ABORTING aborts, stage 2's REWIND seeks): the
 * stage's step function then does it and feeds its event back into the table, in a loop, never
 * by recursion. Each stage's table is a static array in its own .c file; only the lookup, the
 * names and the refusal message are shared.
 *
 * Pure and read-only: any thread. */
#ifndef HOTCOUNT_STAGE_FSM_H
#define HOTCOUNT_STAGE_FSM_H

#include <stdbool.h>
#include <stddef.h>

#include "hotcount/err.h"

/* A transition's state or outcome that matches any. */
#define HC_FSM_ANY (-1)

typedef struct hc_fsm_edge {
    int from;    /* a state, or HC_FSM_ANY */
    int event;   /* an event */
    int outcome; /* an hc_err_t, or HC_FSM_ANY */
    int to;      /* a state */
} hc_fsm_edge_t;

typedef struct hc_fsm {
    const char *name; /* "stage 1 window": starts the refusal message */
    const hc_fsm_edge_t *edges;
    size_t edge_count;
    const char *const *state_names; /* state_count long, each non-empty and unique */
    int state_count;
    const char *const *event_names; /* event_count long, each non-empty and unique */
    int event_count;
    int failed; /* the final state every step outside the table leads to */
} hc_fsm_t;

/* The state `event` with `outcome` leads to from `from`: the first edge that matches, else
 * fsm->failed. When the pair (from, event) has no edge at all and from is not fsm->failed,
 * errstr (may be NULL) gets "<name>: event \"<event>\" is not allowed in state \"<state>\" (a
 * bug)". */
int hc_fsm_next(const hc_fsm_t *fsm, int from, int event, hc_err_t outcome, char *errstr,
                size_t errstr_size);

/* Whether the table lists (from, event) for some outcome. */
bool hc_fsm_takes(const hc_fsm_t *fsm, int from, int event);

/* Static names; "?" out of range. */
const char *hc_fsm_state_name(const hc_fsm_t *fsm, int state);
const char *hc_fsm_event_name(const hc_fsm_t *fsm, int event);

#endif
