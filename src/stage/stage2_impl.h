/* Stage 2's insides that its unit tests reach (tests/unit/test_stage2*.c): the window's states,
 * events and transition function (the shape of fsm.h), and a constructor over a store of the
 * test's own. Only stage2.c and those tests include this file.
 *
 * The window, as a state machine. The loop feeds hc_stage2_next one event at a time and then
 * does what the new state asks (pause, resume, reposition); nothing else moves the state.
 * REWIND and REREAD ask for their action at once: the step loop (step() in stage2.c) seeks and
 * feeds REPOSITIONED back, in a loop.
 *
 *   IDLE --partial--> OPEN --due: apply--+--ok--------> IDLE
 *                      |                 +--transient--> RETRY (partitions paused)
 *                      |                 +--conflict---> REREAD -> IDLE (positions from the store)
 *                      +--no room--> FULL --apply--> as OPEN, but transient -> RETRY_REWIND
 *   IDLE --store moved (the store check, store.check.ms)--> REREAD -> IDLE
 *   RETRY --a partial arrives: turned away--> RETRY_REWIND
 *   RETRY --retry due: apply the same batch--> IDLE / RETRY / REREAD
 *   RETRY_REWIND --apply--> REWIND -> IDLE (the turned-away partials fetched again) /
 *                           RETRY_REWIND / REREAD
 *   OPEN, FULL, RETRY, RETRY_REWIND --too big (a failed batch above the shrunk batch
 *                           limit)--> REWIND -> IDLE (every partition sought back to the
 *                           batch's start: smaller windows carry the same partials)
 *   OPEN, FULL, RETRY, RETRY_REWIND --close (revoke, stop)--> CLOSING --one apply, any
 *                           outcome--> IDLE: the partitions are going away, nothing repositions
 *   any --fatal outcome, the stage failing elsewhere, or an event the state does not
 *         take--> FAILED */
#ifndef HOTCOUNT_STAGE2_IMPL_H
#define HOTCOUNT_STAGE2_IMPL_H

#include <librdkafka/rdkafka.h>

#include "hotcount/err.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"

typedef enum hc_stage2_state {
    HC_STAGE2_IDLE,         /* no window: the next partial opens one */
    HC_STAGE2_OPEN,         /* partials merge into the window until it is due */
    HC_STAGE2_FULL,         /* a partial did not fit: the window is applied now, then the partial
                             * opens the next one */
    HC_STAGE2_RETRY,        /* the batch failed transiently: partitions paused; at retry time the
                             * same batch (same deltas, same expected offsets) is applied again */
    HC_STAGE2_RETRY_REWIND, /* RETRY, and a partial was turned away meanwhile */
    HC_STAGE2_REWIND,       /* seek to each partition's next offset: after a landed batch, it
                             * fetches the turned-away partials again; after one too big, next
                             * was set back to start, and the whole window is fetched again */
    HC_STAGE2_REREAD,       /* the compare-and-set was lost: the window is dropped, seek to the
                             * offsets the store holds now */
    HC_STAGE2_CLOSING,      /* the partitions are going away (revoke, stop): one apply, then IDLE
                             * whatever it returned */
    HC_STAGE2_FAILED,       /* a fatal error: the loop stops */
    HC_STAGE2_STATE_COUNT
} hc_stage2_state_t;

typedef enum hc_stage2_event {
    HC_STAGE2_EV_PARTIAL,      /* a partial joined the window */
    HC_STAGE2_EV_NO_ROOM,      /* a partial could not join (table full, or batch frozen) */
    HC_STAGE2_EV_APPLIED,      /* the window's batch went to the store; outcome: its result */
    HC_STAGE2_EV_REPOSITIONED, /* the seek REWIND or REREAD asked for is done */
    HC_STAGE2_EV_CLOSE,        /* the partitions are going away */
    HC_STAGE2_EV_STORE_MOVED,  /* IDLE: the store check found offsets other than those stage 2
                                * last wrote or read (the store forgot, went back, or another
                                * owner moved them), or another server: re-read them */
    HC_STAGE2_EV_FAIL,         /* the stage failed elsewhere: drop the window, commit nothing */
    HC_STAGE2_EV_TOO_BIG,      /* the batch failed transiently (a timeout, throttling, an
                                * outage) and holds more posts than the store is now trusted to
                                * take (stage 2's batch limit shrank below it): drop the window
                                * and fetch again from the batch's start offsets, so that
                                * smaller windows carry the same partials */
    HC_STAGE2_EVENT_COUNT
} hc_stage2_event_t;

/* The legal transitions, all of them. outcome is read for HC_STAGE2_EV_APPLIED only (an
 * hc_store_apply class). An event the state does not take gives HC_STAGE2_FAILED, and errstr
 * (may be NULL) names both (fsm.h); otherwise errstr is left as it is. Pure. */
hc_stage2_state_t hc_stage2_next(hc_stage2_state_t state, hc_stage2_event_t ev, hc_err_t outcome,
                                 char *errstr, size_t errstr_size);

/* Static names ("idle", "open", ...; "partial", "applied", ...) for logs, errors and tests; "?"
 * out of range. */
const char *hc_stage2_state_name(hc_stage2_state_t state);
const char *hc_stage2_event_name(hc_stage2_event_t ev);

/* hc_stage2_new with the store opened over store_ops (hc_store_open_ops) instead of by
 * cfg->store's scheme; NULL: by the scheme. */
hc_err_t hc_stage2_new_ops(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                           const struct hc_store_ops *store_ops, hc_stage2_t **s2p, char *errstr,
                           size_t errstr_size);

/* The posts a window may hold now (the adaptive batch limit: max.keys, shrunk while the store
 * is slow or throttles, grown back as it keeps up). The stage's thread, or after the run. */
size_t hc_stage2_batch_limit(const hc_stage2_t *s2);

/* Partials turned away while a batch waited for its retry, since hc_stage2_new (the stage's
 * thread, or after hc_stage2_run returned). Paused partitions deliver none. */
int64_t hc_stage2_turned_away(const hc_stage2_t *s2);

/* The stage's consumer (borrowed), for a test that plays a bug behind the stage's back (pauses
 * a partition the stage did not pause) to drive the progress check. */
rd_kafka_t *hc_stage2_consumer(hc_stage2_t *s2);

#endif
