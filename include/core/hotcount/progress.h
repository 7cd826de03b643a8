/* Layer: core. Per-partition progress: does every assigned partition whose input waits commit
 * progress within a bound (partition.progress.ms)? A stage's poll loop can keep turning while one
 * of its partitions stands still (paused and never resumed, sought nowhere, left out of a window,
 * behind a batch that never lands), and nothing else would say so: this module is the one place
 * that watches each partition on its own.
 *
 * Pure: no I/O and no clock (the caller passes now_ms and what the broker said), so a fake clock
 * drives its tests. One tracker per stage consumer, used by that stage's thread only; the caller
 * owns the storage (init/fini).
 *
 * What counts as progress on a partition (its clock, since_ms, restarts):
 *   - it is assigned (hc_progress_assign);
 *   - the stage commits a new offset for it (hc_progress_committed: stage 1's transaction with
 *     its offsets, stage 2's store batch that moved it);
 *   - it is seen caught up when judged (hc_progress_judge): the broker's end for it (the last
 *     stable offset, as a read_committed consumer is told it) is the committed offset, or the
 *     consumer's fetch has reached that end (a partition-EOF at or past it) and nothing it
 *     delivered waits uncommitted. An end past transaction markers or aborted records, which
 *     the stage never sees as messages, is covered by the second rule.
 *
 * A partition is judged once its clock is older than the bound (hc_progress_due lists those):
 * the caller asks the broker for the partition's end and passes it in. The states and their
 * transitions, all in hc_progress_next:
 *
 *   UNASSIGNED --assign--> MOVING --moved (commit, caught up)--> MOVING
 *   MOVING --lagging past the bound--> STALLED       report partition_stalled, then recover
 *   STALLED --moved--> MOVING                        report partition_moving
 *   STALLED --a bound after the last recovery, still lagging: recover again--> STALLED, or
 *            GIVEN_UP when the last recovery acted (re-read, re-sought), did not move it, and
 *            this one acts again; a recovery that waits on an outside cause (the store is down:
 *            an exit would not cure it) never leads to GIVEN_UP
 *   GIVEN_UP                                          the stage exits (HC_ERR_STALLED)
 *   any --revoke--> UNASSIGNED */
#ifndef HOTCOUNT_PROGRESS_H
#define HOTCOUNT_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

typedef enum hc_progress_state {
    HC_PROGRESS_UNASSIGNED,
    HC_PROGRESS_MOVING,   /* committing, caught up, or within its bound */
    HC_PROGRESS_STALLED,  /* input waits and nothing was committed for longer than the bound */
    HC_PROGRESS_GIVEN_UP, /* stalled past a recovery that acted: the last resort is an exit */
} hc_progress_state_t;

typedef enum hc_progress_event {
    HC_PROGRESS_EV_ASSIGN,
    HC_PROGRESS_EV_REVOKE,
    HC_PROGRESS_EV_MOVED,        /* a commit moved it, or it was seen caught up */
    HC_PROGRESS_EV_LAGGING,      /* judged: input waits, and the clock is past the bound */
    HC_PROGRESS_EV_RECOVERY_DUE, /* STALLED, a recovery ran: the outcome is whether it acted
                                  * again after an earlier one that acted (and moved nothing) */
} hc_progress_event_t;

/* What the caller does after hc_progress_judge. */
typedef enum hc_progress_action {
    HC_PROGRESS_NONE,
    HC_PROGRESS_REPORT_STALL,  /* log partition_stalled, raise the gauge, then recover */
    HC_PROGRESS_RECOVER,       /* still stalled a bound after the last recovery: recover again */
    HC_PROGRESS_REPORT_MOVING, /* it moves again: log partition_moving, clear the gauge */
    HC_PROGRESS_GIVE_UP,       /* log partition_stalled_exit; the stage ends with HC_ERR_STALLED */
} hc_progress_action_t;

/* Offsets not known yet. */
#define HC_PROGRESS_UNKNOWN INT64_MIN

typedef struct hc_progress_part {
    hc_progress_state_t state;
    int64_t since_ms;     /* the last progress (assign, commit, caught up) */
    int64_t stalled_ms;   /* when it entered STALLED */
    int64_t recovered_ms; /* the last recovery (STALLED) */
    bool recovery_acted;  /* a recovery since the stall acted (it was not an outside wait) */
    int64_t committed;    /* the last committed next offset, or HC_PROGRESS_UNKNOWN */
    int64_t delivered;    /* one past the last offset delivered to the stage, or UNKNOWN */
    int64_t fetched_end;  /* the offset of the last partition-EOF, or UNKNOWN */
    int64_t log_end;      /* the end the last judgement was given, or UNKNOWN */
    int64_t judged_ms;    /* the last judgement */
} hc_progress_part_t;

typedef struct hc_progress {
    int64_t bound_ms;          /* partition.progress.ms */
    int64_t recheck_ms;        /* how often a STALLED partition is judged again */
    hc_progress_part_t *parts; /* owned, indexed by partition */
    int32_t cap;
} hc_progress_t;

/* bound_ms > 0. */
void hc_progress_init(hc_progress_t *pg, int64_t bound_ms);
void hc_progress_fini(hc_progress_t *pg);

/* The transition function: the new state for ev in state. outcome is read for
 * HC_PROGRESS_EV_RECOVERY_DUE only (true: a recovery has acted since the stall). Pure. */
hc_progress_state_t hc_progress_next(hc_progress_state_t state, hc_progress_event_t ev,
                                     bool outcome);
const char *hc_progress_state_name(hc_progress_state_t state);

/* The partition, or NULL when it was never seen (or out of memory growing the array). */
const hc_progress_part_t *hc_progress_part(const hc_progress_t *pg, int32_t partition);

/* The rebalance: the clock starts (assign) or the partition is forgotten (revoke). HC_ERR_FATAL
 * when out of memory. */
hc_err_t hc_progress_assign(hc_progress_t *pg, int32_t partition, int64_t now_ms);
void hc_progress_revoke(hc_progress_t *pg, int32_t partition);

/* The stage committed `next` for the partition (stage 2 also after reading its stored offset:
 * the baseline). A change restarts the clock. Returns REPORT_MOVING when that ended a stall. */
hc_progress_action_t hc_progress_committed(hc_progress_t *pg, int32_t partition, int64_t next,
                                           int64_t now_ms);
/* A message at `offset` reached the stage (every message: keep it cheap). */
void hc_progress_delivered(hc_progress_t *pg, int32_t partition, int64_t offset);
/* The consumer's fetch reached `end` (a partition-EOF). */
void hc_progress_eof(hc_progress_t *pg, int32_t partition, int64_t end);
/* The stage is moving the fetch position (a seek, a give-back): what was delivered and where the
 * fetch had reached no longer describe the position. */
void hc_progress_repositioned(hc_progress_t *pg, int32_t partition);

/* Up to max assigned partitions due a judgement at now_ms into out (MOVING with a clock older
 * than the bound; STALLED every recheck_ms); returns how many. */
size_t hc_progress_due(const hc_progress_t *pg, int64_t now_ms, int32_t *out, size_t max);

/* Judges a partition, given the broker's end for it (log_end): caught up (moved), lagging past
 * the bound, or neither yet. Returns what the caller must do. */
hc_progress_action_t hc_progress_judge(hc_progress_t *pg, int32_t partition, int64_t log_end,
                                       int64_t now_ms);
/* The stage's recovery for a STALLED partition ran at now_ms (after REPORT_STALL or RECOVER);
 * acted: it re-read and re-sought (false: it waits on an outside cause, a store or broker
 * outage, which an exit would not cure). GIVE_UP when an earlier recovery acted, a bound passed
 * without the partition moving, and this one acted again: the stage's own recovery does not
 * cure it. */
hc_progress_action_t hc_progress_recovered(hc_progress_t *pg, int32_t partition, bool acted,
                                           int64_t now_ms);

/* Assigned partitions STALLED or GIVEN_UP now. */
size_t hc_progress_stalled_count(const hc_progress_t *pg);

#endif
