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
 * table and store handle and borrows cfg and metrics.
 *
 * Each stage's window is a state machine of its own, private to its module (its states, events
 * and transition table: src/stage/stage1_impl.h, src/stage/stage2_impl.h, in the one shape of
 * src/stage/fsm.h). */
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

hc_err_t hc_stage2_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage2_t **s2p, char *errstr, size_t errstr_size);
hc_err_t hc_stage2_run(hc_stage2_t *s2, const atomic_bool *stop, char *errstr, size_t errstr_size);
void hc_stage2_destroy(hc_stage2_t *s2);
int hc_stage2_assigned(const hc_stage2_t *s2);
int64_t hc_stage2_heartbeat_ms(const hc_stage2_t *s2);

#endif
