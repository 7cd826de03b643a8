/* Layer: stage. The two consumer loops.
 *
 * Stage 1 (src/stage/stage1.c): consumes likes.raw in a consumer group, parses each event, sums per
 * post in a window and, every flush.ms (or earlier when the table holds max.keys posts, or on
 * revocation or shutdown), commits one Kafka transaction holding the window's partials, its
 * dead-letter records and the consumed offsets.
 *
 * Stage 2 (src/stage/stage2.c): consumes likes.partials (read_committed) in a consumer group,
 * merges partials per post and, every flush.ms, applies one atomic store batch: the deltas plus the
 * next offset of every partition consumed, conditional on the offsets it started from. Its
 * partitions start at the offsets stored in the store, never Kafka's committed offsets.
 *
 * A stage is created, run on one thread until *stop becomes true, then destroyed. Several
 * stages may run in one process on separate threads (the demo does); each owns its clients,
 * table and store handle and borrows cfg and metrics. */
#ifndef HOTCOUNT_STAGE_H
#define HOTCOUNT_STAGE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/metrics.h"

typedef struct hc_stage1 hc_stage1_t;
typedef struct hc_stage2 hc_stage2_t;

/* ---- stage 1's window: one state at a time -------------------------------------------------
 *
 * Every change of state is hc_stage1_next(state, action, outcome): the action just done and the
 * class of its result (hc_err_t) give the next state. The table (src/stage/stage1.c):
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
 * Any other pair (a fatal or unclassified outcome, an action the state does not allow) leads to
 * FAILED: the run returns HC_ERR_FATAL and nothing is committed any more. A revoke closes the
 * window (COMMIT, or LOSE when the assignment was lost) and then REVOKEs: it never rewinds, the
 * partitions are going.
 *
 * RENEWING is the defence against late writes (docs/RELIABILITY.md, "Late writes"): after a
 * transaction was aborted, or ended with an unknown outcome (a commit or an abort whose retries
 * ran out), the producer is replaced by a new one with the same transactional.id, whose
 * init_transactions bumps the epoch (the broker then refuses whatever the old epoch still has
 * on the way) and settles the old transaction; the committed offsets the rewind reads next are
 * then final, whether the window committed or not. */
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

typedef enum hc_stage1_action {
    HC_STAGE1_BEGIN,   /* rd_kafka_begin_transaction, at the window's first message */
    HC_STAGE1_PRODUCE, /* a dead-letter record into the open transaction */
    HC_STAGE1_COMMIT,  /* the partials and manifest produced, offsets sent, transaction committed */
    HC_STAGE1_LOSE,    /* the assignment was lost under the open window: it must not commit */
    HC_STAGE1_ABORT,   /* rd_kafka_abort_transaction */
    HC_STAGE1_REWIND,  /* re-assign at the committed offsets; transient: not allowed yet (the
                        * assignment is lost, the revoke is still to come) */
    HC_STAGE1_REVOKE,  /* the partitions went, after the revoke closed the window */
    HC_STAGE1_RENEW,   /* a new transactional producer made and initialised (epoch bumped) */
    HC_STAGE1_ACTION_COUNT
} hc_stage1_action_t;

/* The transition table above. Pure. */
hc_stage1_state_t hc_stage1_next(hc_stage1_state_t from, hc_stage1_action_t action,
                                 hc_err_t outcome);
/* Static names ("idle", "commit", ...) for logs and tests. */
const char *hc_stage1_state_name(hc_stage1_state_t state);
const char *hc_stage1_action_name(hc_stage1_action_t action);

/* Called on the stage's thread after every transition, side effects done (metrics counted, the
 * window reset). For tests and tracing; must not call back into the stage. */
typedef void (*hc_stage1_observer_fn)(void *opaque, hc_stage1_state_t from,
                                      hc_stage1_action_t action, hc_err_t outcome,
                                      hc_stage1_state_t to);

/* ---- stages ------------------------------------------------------------------------------- */

/* instance_id: names the transactional id "<group.stage1>-<instance_id>"; NULL uses
 * cfg->instance_id. Two live stage-1 processes with one instance id fence each other. */
hc_err_t hc_stage1_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage1_t **s1p, char *errstr, size_t errstr_size);
/* Runs until *stop: returns HC_OK after a clean stop (the open window committed, or aborted if
 * the commit failed), HC_ERR_FATAL with errstr on an unrecoverable error (fenced, fatal client
 * error). */
hc_err_t hc_stage1_run(hc_stage1_t *s1, const atomic_bool *stop, char *errstr, size_t errstr_size);
void hc_stage1_destroy(hc_stage1_t *s1);
/* Partitions assigned to this stage instance now (any thread). */
int hc_stage1_assigned(const hc_stage1_t *s1);
/* hc_now_ms() when the stage's loop last showed progress (any thread; 0 before it runs). A call
 * into librdkafka or the store that hangs stops it from moving: the watchdog's input. */
int64_t hc_stage1_heartbeat_ms(const hc_stage1_t *s1);
/* Sets the observer (NULL: none); before hc_stage1_run. */
void hc_stage1_observe(hc_stage1_t *s1, hc_stage1_observer_fn fn, void *opaque);

hc_err_t hc_stage2_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage2_t **s2p, char *errstr, size_t errstr_size);
hc_err_t hc_stage2_run(hc_stage2_t *s2, const atomic_bool *stop, char *errstr, size_t errstr_size);
void hc_stage2_destroy(hc_stage2_t *s2);
int hc_stage2_assigned(const hc_stage2_t *s2);
int64_t hc_stage2_heartbeat_ms(const hc_stage2_t *s2);

#endif
