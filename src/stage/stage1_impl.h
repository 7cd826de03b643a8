/* Stage 1's insides that its unit tests reach (tests/unit/test_stage1_fsm.c,
 * test_stage1_mock.c): the window's states, events and transition function (the shape of
 * fsm.h), and an observer of its transitions. Only stage1.c and those tests include this file.
 *
 * The window, as a state machine. Every change of state is hc_stage1_next(state, event,
 * outcome): the event just done and the class of its result (hc_err_t) give the next state. The
 * table (src/stage/stage1.c):
 *
 *   IDLE       BEGIN ok -> OPEN                 REVOKE ok -> IDLE
 *   OPEN       PRODUCE ok -> OPEN               PRODUCE abort -> ABORTING
 *              COMMIT ok -> IDLE                COMMIT abort -> ABORTING
 *              COMMIT transient -> RENEWING     LOSE ok -> ABORTING
 *   ABORTING   ABORT ok -> RENEWING             ABORT transient -> RENEWING
 *   RENEWING   RENEW ok -> REWINDING
 *   REWINDING  REWIND ok -> IDLE                REWIND transient -> REWINDING
 *              REVOKE ok -> IDLE
 *   FAILED     anything -> FAILED
 *
 * Any other step (a fatal or unclassified outcome, an event the state does not take) leads to
 * FAILED: the run returns HC_ERR_FATAL and nothing is committed any more. ABORTING and RENEWING
 * ask for their action at once: the step loop (act() in stage1.c) aborts the transaction or
 * replaces the producer and feeds ABORT or RENEW back, before any other message or callback. A
 * revoke closes the window (COMMIT, or LOSE when the assignment was lost) and then REVOKEs: it
 * never rewinds, the partitions are going.
 *
 * RENEWING is the defence against late writes (docs/RELIABILITY.md, "Late writes"): after a
 * transaction was aborted, or ended with an unknown outcome (a commit or an abort whose retries
 * ran out), the producer is replaced by a new one with the same transactional.id, whose
 * init_transactions bumps the epoch (the broker then refuses whatever the old epoch still has
 * on the way) and settles the old transaction; the committed offsets the rewind reads next are
 * then final, whether the window committed or not. */
#ifndef HOTCOUNT_STAGE1_IMPL_H
#define HOTCOUNT_STAGE1_IMPL_H

#include <stddef.h>

#include "hotcount/err.h"
#include "hotcount/stage.h"

typedef enum hc_stage1_state {
    HC_STAGE1_IDLE,      /* no transaction: the next message begins one */
    HC_STAGE1_OPEN,      /* a transaction is open and the window collects events */
    HC_STAGE1_ABORTING,  /* the transaction must be aborted (abortable error, lost assignment) */
    HC_STAGE1_REWINDING, /* aborted: every message is dropped until the partitions are back at
                          * their committed offsets (REWIND) or gone (REVOKE) */
    HC_STAGE1_RENEWING,  /* aborted or of unknown outcome: the producer must be replaced (RENEW)
                          * before anything else; messages are dropped as in REWINDING */
    HC_STAGE1_FAILED,    /* fatal: the run stops with HC_ERR_FATAL */
    HC_STAGE1_STATE_COUNT
} hc_stage1_state_t;

typedef enum hc_stage1_event {
    HC_STAGE1_EV_BEGIN,   /* rd_kafka_begin_transaction, at the window's first message */
    HC_STAGE1_EV_PRODUCE, /* a dead-letter record into the open transaction */
    HC_STAGE1_EV_COMMIT,  /* the partials and manifest produced, offsets sent, transaction
                           * committed */
    HC_STAGE1_EV_LOSE,    /* the assignment was lost under the open window: it must not commit */
    HC_STAGE1_EV_ABORT,   /* rd_kafka_abort_transaction */
    HC_STAGE1_EV_REWIND,  /* re-assign at the committed offsets; transient: not allowed yet (the
                           * assignment is lost, the revoke is still to come) */
    HC_STAGE1_EV_REVOKE,  /* the partitions went, after the revoke closed the window */
    HC_STAGE1_EV_RENEW,   /* a new transactional producer made and initialised (epoch bumped) */
    HC_STAGE1_EVENT_COUNT
} hc_stage1_event_t;

/* The transition table above. When the state does not take the event at all, errstr (may be
 * NULL) names both (fsm.h); otherwise it is left as it is. Pure. */
hc_stage1_state_t hc_stage1_next(hc_stage1_state_t from, hc_stage1_event_t ev, hc_err_t outcome,
                                 char *errstr, size_t errstr_size);
/* Static names ("idle", "commit", ...) for logs, errors and tests; "?" out of range. */
const char *hc_stage1_state_name(hc_stage1_state_t state);
const char *hc_stage1_event_name(hc_stage1_event_t ev);

/* Called on the stage's thread after every transition, side effects done (metrics counted, the
 * window reset). For tests and tracing; must not call back into the stage. */
typedef void (*hc_stage1_observer_fn)(void *opaque, hc_stage1_state_t from, hc_stage1_event_t ev,
                                      hc_err_t outcome, hc_stage1_state_t to);

/* Sets the observer (NULL: none); before hc_stage1_run. */
void hc_stage1_observe(hc_stage1_t *s1, hc_stage1_observer_fn fn, void *opaque);

#endif
