/* Layer: stage. The lifecycle both stages share: one consumer in a group, its rebalance and
 * statistics callbacks, the watchdog's heartbeat, the fatal-error latch, the poll loop, and the
 * close-and-report tail. A stage keeps its window and its own clients; it plugs into the loop
 * through hc_stage_loop_ops_t.
 *
 * The loop's order, top to bottom (hc_stage_loop_run):
 *
 *   ops->start                 stage set-up that needs the network (init_transactions, schema)
 *   hc_timeouts_log, subscribe
 *   until *stop or an error:
 *     the next held message; none held: one batch call takes up to HC_STAGE_LOOP_BATCH queued
 *       messages (rebalances call ops->assign/revoke from it), and when none is queued one
 *       poll waits at most until ops->due_ms, at most 100 ms
 *     the latch: an error of a callback stops the loop
 *     ops->message for that message (consumer errors are logged, not passed on)
 *     ops->tick                 flush a due window, retry, repair
 *     fatal client errors of the consumer and the watched clients, when the clock was read
 *     every progress check: the partitions past partition.progress.ms judged against the
 *       broker's end; a stalled one reported (partition_stalled, the gauge, readiness) and
 *       ops->recover'ed; one the stage's own recovery does not move, while the stage commits
 *       nothing else either, ends the run (HC_ERR_STALLED: the supervisor restarts the
 *       process); one that lags while the stage commits others stays reported, not sought again
 *   ops->stopping (err)         close the open window on a clean stop, drain
 *   latch err, close the consumer (its last revoke sees hc_stage_loop_failed), report
 *
 * The held batch. librdkafka moves a partition's application position past every message the
 * batch call returns, so the messages the loop holds are the stage's responsibility: a stage that
 * moves a partition's fetch position (a seek: stage 1's rewind after an abort, stage 2's re-read
 * or rewind) calls hc_stage_loop_forget first, and one that pauses partitions calls
 * hc_stage_loop_give_back first; the loop itself drops the held messages of the partitions a
 * rebalance assigns, revokes or loses, and everything held when the run ends. A held message is
 * never handed to the stage after any of these, and one not handed over is fetched again (by
 * the seek, the resume or the next owner), so none is lost.
 *
 * Threading: hc_stage_loop_run and every hook run on the stage's one thread (rebalances are
 * served from inside its poll and close). The consumer's statistics and error callbacks run on
 * the loop's main-queue thread (they only write the metrics and the log, both locked).
 * hc_stage_loop_heartbeat_ms and hc_stage_loop_assigned may be read from any thread. The struct
 * lives in the stage's own storage (init/fini); its fields are read by the stage, written only
 * through these functions. */
#ifndef HOTCOUNT_STAGE_LOOP_H
#define HOTCOUNT_STAGE_LOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/kafka.h"
#include "hotcount/metrics.h"
#include "hotcount/progress.h"

#define HC_STAGE_LOOP_WATCH_MAX 2 /* clients besides the consumer whose fatal errors stop it */

/* Messages taken per batch call on the consumer's queue (docs/RELIABILITY.md, "The librdkafka
 * 2.0.2 workarounds on 2.14.2", says what it saves). A build with -DHC_CONSUME_BATCH=1 polls one
 * message per call instead (rd_kafka_consumer_poll, the loop before the batch): the A/B's other
 * side. */
#ifndef HC_CONSUME_BATCH
#define HC_CONSUME_BATCH 1000
#endif
#define HC_STAGE_LOOP_BATCH HC_CONSUME_BATCH

/* The stage's hooks. `stage` is hc_stage_loop_opts_t.stage. errstr: filled when a hook returns
 * an error. Every hook is optional (NULL) except message. */
typedef struct hc_stage_loop_ops {
    /* Before subscribing. HC_OK, or the error that ends the run (reported like any other). */
    hc_err_t (*start)(void *stage, char *errstr, size_t errstr_size);
    /* Partitions were assigned: assign them (rd_kafka_assign, with the offsets the stage
     * wants). NULL: rd_kafka_assign(partitions). An error is latched, the consumer unassigned,
     * and the loop stops. */
    hc_err_t (*assign)(void *stage, rd_kafka_t *consumer,
                       const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                       size_t errstr_size);
    /* Partitions are being revoked; lost: the group took them away already (another member may
     * own them: commit nothing). Close or drop the open window; never re-assign, never rewind:
     * the loop unassigns right after. Called also after a failure (then hc_stage_loop_failed
     * is true and nothing may be committed). HC_OK or an error to latch. */
    hc_err_t (*revoke)(void *stage, const rd_kafka_topic_partition_list_t *partitions, bool lost,
                       char *errstr, size_t errstr_size);
    /* When tick must run next (hc_now_ms), INT64_MAX for no deadline: bounds the poll's wait. */
    int64_t (*due_ms)(void *stage);
    /* One message without an error, borrowed for the call. HC_OK or the error that stops the
     * loop. */
    hc_err_t (*message)(void *stage, const rd_kafka_message_t *rkm, char *errstr,
                        size_t errstr_size);
    /* After every poll. now_ms: the loop's clock (read after any poll that waited, and at least
     * every 32 messages while they queue up); idle: the poll returned nothing. HC_OK or the
     * error that stops the loop. */
    hc_err_t (*tick)(void *stage, int64_t now_ms, bool idle, char *errstr, size_t errstr_size);
    /* Once, after the loop ended and before the consumer closes. err: why it ended (HC_OK:
     * *stop was set). Returns what to report: err itself, or a new error when err is HC_OK. */
    hc_err_t (*stopping)(void *stage, hc_err_t err, char *errstr, size_t errstr_size);
    /* Partition stands still (hotcount/progress.h): its input waits and the stage has
     * committed nothing on it for partition.progress.ms. Re-read what the stage knows of it
     * from the store or the broker and re-seek there, resumed. HC_OK: it acted; HC_ERR_TRANSIENT
     * with why: it waits on an outside cause (a store outage its batch retries through), which
     * an exit would not cure; another error stops the loop. NULL: nothing to recover. */
    hc_err_t (*recover)(void *stage, int32_t partition, char *why, size_t why_size);
    /* The partition's state as the stage sees it, for partition_stalled and the gauge
     * ("retry: <the store's error>", "idle", ...): a short NUL-terminated text in buf. */
    void (*describe)(void *stage, int32_t partition, char *buf, size_t size);
} hc_stage_loop_ops_t;

typedef struct hc_stage_loop_opts {
    hc_metrics_stage_kind_t kind;   /* names the stage ("stage1/<id>"), its metrics and gauge */
    const char *instance_id;        /* NULL: cfg->instance_id */
    hc_kafka_role_t role;           /* HC_KAFKA_ROLE_STAGE1_CONSUMER or _STAGE2_CONSUMER */
    const char *group_id;           /* borrowed, must outlive the loop */
    const char *topic;              /* subscribed; borrowed, must outlive the loop */
    const hc_stage_loop_ops_t *ops; /* borrowed (static storage) */
    void *stage;                    /* passed to every hook */
} hc_stage_loop_opts_t;

typedef struct hc_stage_loop {
    const hc_config_t *cfg;  /* borrowed */
    hc_metrics_t *metrics;   /* borrowed */
    char name[160];          /* "stage1/<instance>" or "stage2/<instance>": log area */
    const char *instance_id; /* points into name */
    rd_kafka_t *consumer;    /* owned */
    hc_stage_loop_opts_t opts;
    rd_kafka_t *watched[HC_STAGE_LOOP_WATCH_MAX]; /* borrowed */
    const atomic_bool *stop; /* borrowed from hc_stage_loop_run's caller; NULL before */
    atomic_int assigned;     /* partitions in the assignment now (any thread) */
    /* hc_now_ms() of the loop's last sign of life; the watchdog reads it from another thread */
    atomic_int_fast64_t heartbeat_ms;
    /* the first error of the run: a callback cannot return one, and a failed stage must not
     * commit from the revoke its close triggers */
    hc_err_t latched;
    char latched_errstr[512];
    /* the consumer close did not finish within its bound: the consumer is left to the exit */
    bool close_abandoned;
    /* hc_kafka_auth_failures' count at the last hc_stage_loop_auth_check */
    uint64_t auth_failures_seen;
    /* The held batch: held[held_next .. held_count) are owned by the loop (NULL: dropped). A
     * message leaves the array before its hook runs, so a hook that forgets its partition
     * never frees the message it was given. */
    rd_kafka_message_t **held; /* owned, HC_STAGE_LOOP_BATCH slots */
    size_t held_next;
    size_t held_count;
    rd_kafka_queue_t *queue; /* owned reference to the consumer's queue, during the poll loop */
    /* owned: serves the consumer's statistics and error callbacks on a thread of its own */
    hc_kafka_main_queue_t *main_queue;
    /* Every assigned partition's progress (hotcount/progress.h): fed by the rebalances, the
     * delivered messages, the partition EOFs and the stage's commits (hc_stage_loop_committed);
     * judged every progress_check_ms against the broker's end. */
    hc_progress_t progress;
    int64_t progress_check_at_ms;
    int64_t committed_ms; /* the stage's last commit on any partition (hc_stage_loop_committed) */
} hc_stage_loop_t;

/* Creates the consumer for opts->role with the loop's rebalance and statistics callbacks (the
 * statistics go into metrics: consumer lag; they are served on a thread of their own, so they
 * stay current while the stage thread is busy). On error nothing is left to free (fini is still
 * safe) and errstr names the bad property. cfg and metrics are borrowed. */
hc_err_t hc_stage_loop_init(hc_stage_loop_t *loop, const hc_config_t *cfg, hc_metrics_t *metrics,
                            const hc_stage_loop_opts_t *opts, char *errstr, size_t errstr_size);
/* Destroys the consumer (after a run whose consumer close was abandoned, leaves it to the process
 * exit: hc_kafka_consumer_destroy). Accepts a zeroed loop. Before the clients the stage's hooks
 * use. */
void hc_stage_loop_fini(hc_stage_loop_t *loop);

/* Adds a client (borrowed, e.g. stage 1's producer) whose fatal error stops the loop. */
void hc_stage_loop_watch(hc_stage_loop_t *loop, rd_kafka_t *rk);
/* Removes a watched client (before the stage destroys it, e.g. stage 1 replacing its producer). */
void hc_stage_loop_unwatch(hc_stage_loop_t *loop, rd_kafka_t *rk);

/* Runs the loop above until *stop (borrowed, read by hooks through
 * hc_stage_loop_stop_requested) or an error. Returns HC_OK after a clean stop, or the first
 * error with errstr. Logs "stopping: ..." or "stopped cleanly" and the stage's running gauge. */
hc_err_t hc_stage_loop_run(hc_stage_loop_t *loop, const atomic_bool *stop, char *errstr,
                           size_t errstr_size);

/* The watchdog's input: hc_now_ms() when the loop last showed progress (0 before it runs). Any
 * thread. */
int64_t hc_stage_loop_heartbeat_ms(const hc_stage_loop_t *loop);
/* Marks progress now (a hook waiting out a retry is not hanging). Stage thread. */
void hc_stage_loop_beat(hc_stage_loop_t *loop);
/* The stage committed progress on topic's partition: its next offset is `next` now (stage 1:
 * a committed transaction's offsets; stage 2: a landed batch's, and the offsets read from the
 * store at an assignment or a re-read). Stage thread. */
void hc_stage_loop_committed(hc_stage_loop_t *loop, int32_t partition, int64_t next);

/* Partitions assigned now. Any thread. */
int hc_stage_loop_assigned(const hc_stage_loop_t *loop);

/* Latches err (not HC_OK) with errstr unless an error is latched already: the loop stops at its
 * next poll. For callbacks, which cannot return an error. Stage thread. */
void hc_stage_loop_fail(hc_stage_loop_t *loop, hc_err_t err, const char *errstr);
/* True once an error is latched: commit nothing any more. */
bool hc_stage_loop_failed(const hc_stage_loop_t *loop);
/* True when the caller of hc_stage_loop_run asked it to stop (false before the run). */
bool hc_stage_loop_stop_requested(const hc_stage_loop_t *loop);

/* Waits ms milliseconds inside a retry loop: serves rk's callbacks meanwhile (rd_kafka_poll)
 * when rk is not NULL, else sleeps; beats the heartbeat after. Stage thread. */
void hc_stage_loop_pause(hc_stage_loop_t *loop, rd_kafka_t *rk, int64_t ms);

/* The stage is about to move the fetch position of topic's partition (a seek): drops the
 * messages the loop holds for it, fetched from the old position, so that none of them reaches
 * the stage after the seek. Only that partition's: the others' held messages are still next.
 * Call it right before the seek (a failed seek stops the stage anyway). Stage thread. */
void hc_stage_loop_forget(hc_stage_loop_t *loop, const char *topic, int32_t partition);
/* hc_stage_loop_forget for each partition of the list. */
void hc_stage_loop_forget_list(hc_stage_loop_t *loop,
                               const rd_kafka_topic_partition_list_t *partitions);
/* The stage is about to pause the listed partitions and may resume them without a seek (stage
 * 2's retry): drops their held messages and seeks each partition that had some back to the
 * first of them, because librdkafka resumes a paused partition after the last message it handed
 * out, and the batch call handed out all the held ones. HC_OK, or the seek's error (errstr).
 * Stage thread. */
hc_err_t hc_stage_loop_give_back(hc_stage_loop_t *loop,
                                 const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                                 size_t errstr_size);

/* Logs kafka_auth_failed (docs/EVENTS.md) when a Kafka client of this process has reported an
 * authentication or TLS handshake failure since the last call (hc_kafka_auth_failures). The
 * stage keeps running (src/stage/stage_loop.c says why). Stage thread; the poll loop calls it,
 * and so may a start hook that waits for the broker. */
void hc_stage_loop_auth_check(hc_stage_loop_t *loop);

#endif
