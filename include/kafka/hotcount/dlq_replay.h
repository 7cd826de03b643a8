/* Layer: kafka. `hotcount dlq replay`: re-publishes selected dead letters of topic.dlq to
 * topic.raw, exactly once per dead letter even when a replay is killed and run again.
 *
 * How: one transactional producer (a transactional id of the replay's own, so a rerun fences a
 * killed predecessor and its open transaction is aborted) writes each selected record's
 * original key and value to topic.raw with a header hotcount-replayed-from =
 * "<dlq topic>/<partition>/<offset>", and in the same transaction commits the replay's progress
 * (the next dlq offset of every partition read) as the offsets of a consumer group of its own
 * (send_offsets_to_transaction; the group is never joined). A rerun starts from those offsets:
 * what a committed transaction replayed is behind them, what an aborted one wrote is invisible
 * to stage 1 (read_committed). Progress covers every record read, selected or not.
 *
 * Never in a loop: a dead letter that carries hotcount-replayed-from (a replayed record that
 * failed again, once stage 1 copies that header into its dead letter) is not replayed again, nor
 * is one whose value stage 1 cut (hotcount-truncated-from: the original bytes are gone). One
 * that the producer refuses as too large is skipped and counted (skipped_oversized), never
 * retried: it would abort every run at the same place.
 * Blocking; runs on the calling thread. */
#ifndef HOTCOUNT_DLQ_REPLAY_H
#define HOTCOUNT_DLQ_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"

#define HC_REPLAY_TIME_NONE INT64_MIN

typedef struct hc_replay_opts {
    const char *reason; /* required: the hotcount-error value to replay */
    int64_t since_ms;   /* record timestamps from since_ms on, or HC_REPLAY_TIME_NONE */
    int64_t until_ms;   /* and before until_ms, or HC_REPLAY_TIME_NONE */
    bool dry_run;       /* count what would be replayed; write nothing, commit nothing */
    const char *group;  /* the progress group */
    const char *transactional_id;
    int64_t batch; /* records per transaction (> 0) */
    /* Optional: called after a batch's records are produced (flushed), before its transaction
     * commits; batch counts from 1. The tests' way to kill a replay at its worst moment. */
    void (*before_commit)(int64_t batch, void *opaque);
    void *opaque;
} hc_replay_opts_t;

typedef struct hc_replay_stats {
    int64_t scanned;           /* dead letters read past the stored progress */
    int64_t replayed;          /* selected and written (dry run: would be) */
    int64_t skipped_replayed;  /* selected by reason and time, but already a replay */
    int64_t skipped_truncated; /* selected, but cut by stage 1 */
    int64_t skipped_foreign;   /* selected, but its hotcount-source is not in topic.raw: stage
                                * 2's dead partials (or a foreign writer's) are never likes */
    int64_t skipped_oversized; /* selected, but the producer refuses it (larger than its
                                * message.max.bytes with the replay's header); not counted in
                                * a dry run, which produces nothing */
    int64_t transactions;      /* committed */
} hc_replay_stats_t;

/* HC_ERR_TRANSIENT when Kafka is unreachable or a transaction had to be aborted (nothing of it
 * counts: run it again); HC_ERR_FATAL when the producer was fenced (another replay with the
 * same transactional id runs) or failed for good. */
hc_err_t hc_dlq_replay(const hc_config_t *cfg, const hc_replay_opts_t *opts,
                       hc_replay_stats_t *stats, char *errstr, size_t errstr_size);

#endif
