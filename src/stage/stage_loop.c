/* The lifecycle both stages share (hotcount/stage_loop.h). */
#include "hotcount/stage_loop.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/clock.h"
#include "hotcount/log.h"
#include "hotcount/timeouts.h"

/* messages consumed between clock reads while they queue up (see hc_stage_loop_run) */
#define CLOCK_EVERY 32
/* the longest the poll waits when no deadline is nearer: how soon *stop is seen */
#define POLL_MAX_MS 100
/* The consumer close at the end of a run: LeaveGroup's round trip and the last revoke, whose
 * window `stopping` has closed already (so it commits or stores nothing more). Past it the
 * close is abandoned, the consumer left to the process exit (hc_kafka_consumer_destroy), and the
 * group times the member out: a LeaveGroup stuck behind a JoinGroup that the broker holds for a
 * member that does not answer must not keep a stage from exiting. */
#define CLOSE_MS 5000
/* One ListOffsets for a partition's end at a progress check: short, because the loop waits for
 * it; a check that cannot reach the broker judges nothing (an outage is not the stage's stall),
 * and stops asking for the rest of that round. */
#define PROGRESS_QUERY_MS 2000
/* Partitions judged per check (the rest at the next one). */
#define PROGRESS_BATCH 64

static atomic_int_fast64_t *assigned_gauge(hc_stage_loop_t *loop)
{
    return loop->opts.kind == HC_METRICS_STAGE1 ? &loop->metrics->stage1_assigned
                                                : &loop->metrics->stage2_assigned;
}

/* Drops held[i] if it is topic's partition (topic NULL: any topic; partition -1: any). */
static size_t drop_held(hc_stage_loop_t *loop, const char *topic, int32_t partition)
{
    size_t dropped = 0;
    for (size_t i = loop->held_next; i < loop->held_count; i++) {
        rd_kafka_message_t *rkm = loop->held[i];
        if (!rkm || (partition >= 0 && rkm->partition != partition) ||
            (topic && (!rkm->rkt || strcmp(rd_kafka_topic_name(rkm->rkt), topic) != 0))) {
            continue;
        }
        rd_kafka_message_destroy(rkm);
        loop->held[i] = NULL;
        dropped++;
    }
    return dropped;
}

static void drop_held_list(hc_stage_loop_t *loop, const rd_kafka_topic_partition_list_t *list)
{
    for (int i = 0; list && i < list->cnt && loop->held_next < loop->held_count; i++) {
        drop_held(loop, list->elems[i].topic, list->elems[i].partition);
    }
}

static int stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
    (void)rk;
    hc_stage_loop_t *loop = opaque;
    hc_metrics_ingest_rdkafka_stats(loop->metrics, json, json_len);
    return 0;
}

/* A stalled partition's gauge goes: it moves again. */
static void stall_gone(hc_stage_loop_t *loop, int32_t partition)
{
    hc_metrics_partition_stalled(loop->metrics, loop->opts.kind, loop->opts.topic, partition, false,
                                 NULL, hc_now_ms());
}

/* The gauge of a partition that is stalled now goes (it is not ours any more). */
static void stall_cleared(hc_stage_loop_t *loop, int32_t partition)
{
    const hc_progress_part_t *pp = hc_progress_part(&loop->progress, partition);
    if (pp && (pp->state == HC_PROGRESS_STALLED || pp->state == HC_PROGRESS_GIVEN_UP)) {
        stall_gone(loop, partition);
    }
}

/* Eager rebalances (classic protocol, range assignor) revoke everything, then hand out a whole
 * new assignment; incremental ones (group.protocol=consumer) add and take away increments, so
 * the count and the stage's hooks work per list, and the assignment calls are the incremental
 * ones (hc_kafka_assign_add/remove choose). */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *partitions, void *opaque)
{
    hc_stage_loop_t *loop = opaque;
    const hc_stage_loop_ops_t *ops = loop->opts.ops;
    bool incremental = hc_kafka_is_incremental(rk);
    char errstr[512] = "";
    /* What is held of these partitions was fetched under the assignment that ends here (or, for
     * an assigned one, under an earlier one): the new owner, or the new assignment's offsets,
     * fetch it again. Only these: under incremental rebalancing the others stay assigned, and
     * their held messages are the next ones of their positions. (The batch call serves
     * rebalances only when nothing is held; this is for a callback served elsewhere.) */
    drop_held_list(loop, partitions);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        hc_log(HC_LOG_INFO, loop->name, "assigned %d partitions%s", partitions->cnt,
               incremental ? " more" : "");
        hc_err_t ret = HC_OK;
        int64_t now = hc_now_ms();
        if (!incremental) {
            for (int32_t p = 0; p < loop->progress.cap; p++) {
                hc_progress_revoke(&loop->progress, p); /* eager: the whole assignment is new */
            }
        }
        /* before the hook: the offsets it reads are the partitions' first commits */
        for (int i = 0; i < partitions->cnt && ret == HC_OK; i++) {
            if (hc_progress_assign(&loop->progress, partitions->elems[i].partition, now) != HC_OK) {
                hc_errstr_set(errstr, sizeof(errstr), "out of memory");
                ret = HC_ERR_FATAL;
            }
        }
        if (ret != HC_OK) {
            /* out of memory tracking them: latched below */
        } else if (hc_stage_loop_failed(loop)) {
            ret = loop->latched; /* the loop stops at its next poll: take nothing on */
        } else if (ops->assign) {
            ret = ops->assign(loop->opts.stage, rk, partitions, errstr, sizeof(errstr));
        } else {
            ret = hc_kafka_assign_add(rk, partitions, errstr, sizeof(errstr));
        }
        if (ret != HC_OK) {
            hc_stage_loop_fail(loop, ret, errstr);
            if (incremental) {
                /* whatever of the increment the hook took; an error says it took none */
                rd_kafka_error_t *error = rd_kafka_incremental_unassign(rk, partitions);
                if (error) {
                    rd_kafka_error_destroy(error);
                }
            } else {
                rd_kafka_assign(rk, NULL);
            }
            return;
        }
        if (incremental) {
            atomic_fetch_add(&loop->assigned, partitions->cnt);
        } else {
            atomic_store(&loop->assigned, partitions->cnt);
        }
        hc_metric_add(*assigned_gauge(loop), partitions->cnt);
        return;
    }
    /* revoked or lost: the stage closes its window, then the partitions go */
    if (ops->revoke) {
        hc_err_t ret = ops->revoke(loop->opts.stage, partitions, rd_kafka_assignment_lost(rk),
                                   errstr, sizeof(errstr));
        if (ret != HC_OK) {
            hc_stage_loop_fail(loop, ret, errstr);
        }
    }
    hc_log(HC_LOG_INFO, loop->name, "revoked %d partitions", partitions->cnt);
    for (int i = 0; i < partitions->cnt; i++) {
        stall_cleared(loop, partitions->elems[i].partition); /* not ours to watch any more */
        hc_progress_revoke(&loop->progress, partitions->elems[i].partition);
    }
    /* librdkafka keeps a partition's pause across an unassign and the next assign of it: a
     * stage that paused partitions (stage 2 waiting to retry a batch) and lost them before it
     * resumed would get them back paused and never fetch from them again, while its poll loop
     * kept turning (issue 23's stall). A partition leaves the assignment resumed, so every
     * assignment starts fetching; a stage that wants a new partition paused pauses it itself. */
    rd_kafka_resume_partitions(rk, partitions);
    if (hc_kafka_assign_remove(rk, partitions, errstr, sizeof(errstr)) != HC_OK) {
        hc_stage_loop_fail(loop, HC_ERR_FATAL, errstr);
    }
    int gone = incremental ? partitions->cnt : atomic_load(&loop->assigned);
    atomic_fetch_sub(&loop->assigned, gone);
    hc_metric_add(*assigned_gauge(loop), -gone);
}

hc_err_t hc_stage_loop_init(hc_stage_loop_t *loop, const hc_config_t *cfg, hc_metrics_t *metrics,
                            const hc_stage_loop_opts_t *opts, char *errstr, size_t errstr_size)
{
    memset(loop, 0, sizeof(*loop));
    if (HC_STAGE_LOOP_BATCH > 1 &&
        !(loop->held = calloc(HC_STAGE_LOOP_BATCH, sizeof(*loop->held)))) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    loop->cfg = cfg;
    loop->metrics = metrics;
    loop->opts = *opts;
    hc_progress_init(&loop->progress,
                     hc_timeouts_of(cfg, &(hc_timeouts_t){0})->partition_progress_ms);
    const char *prefix = opts->kind == HC_METRICS_STAGE1 ? "stage1/" : "stage2/";
    snprintf(loop->name, sizeof(loop->name), "%s%s", prefix,
             opts->instance_id ? opts->instance_id : cfg->instance_id);
    loop->instance_id = loop->name + strlen(prefix);
    /* static membership: the replica's instance id is its member id across restarts */
    hc_kafka_opts_t copts = {.group_id = opts->group_id,
                             .group_instance_id = cfg->group_static ? loop->instance_id : NULL,
                             .rebalance_cb = rebalance_cb,
                             .stats_cb = stats_cb,
                             .opaque = loop,
                             .own_main_queue = true};
    loop->consumer = hc_kafka_new(cfg, opts->role, &copts, errstr, errstr_size);
    if (!loop->consumer) {
        free(loop->held);
        loop->held = NULL;
        return HC_ERR_INVALID;
    }
    /* the statistics (consumer lag) stay current while the stage is behind or in a store call */
    loop->main_queue = hc_kafka_main_queue_start(loop->consumer);
    if (!loop->main_queue) {
        rd_kafka_destroy(loop->consumer);
        loop->consumer = NULL;
        free(loop->held);
        loop->held = NULL;
        hc_errstr_set(errstr, errstr_size, "out of memory or threads");
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

void hc_stage_loop_fini(hc_stage_loop_t *loop)
{
    if (loop->held) {
        drop_held(loop, NULL, -1); /* none after a run: poll_loop drops them as it ends */
        free(loop->held);
        loop->held = NULL;
    }
    hc_kafka_main_queue_stop(loop->main_queue);
    loop->main_queue = NULL;
    if (loop->consumer) {
        hc_kafka_consumer_destroy(loop->consumer, loop->close_abandoned);
        loop->consumer = NULL;
    }
    for (int32_t p = 0; p < loop->progress.cap; p++) {
        stall_cleared(loop, p);
    }
    hc_progress_fini(&loop->progress);
}

void hc_stage_loop_watch(hc_stage_loop_t *loop, rd_kafka_t *rk)
{
    for (int i = 0; i < HC_STAGE_LOOP_WATCH_MAX; i++) {
        if (!loop->watched[i]) {
            loop->watched[i] = rk;
            return;
        }
    }
}

void hc_stage_loop_unwatch(hc_stage_loop_t *loop, rd_kafka_t *rk)
{
    for (int i = 0; i < HC_STAGE_LOOP_WATCH_MAX; i++) {
        if (loop->watched[i] == rk) {
            /* keep the array dense: fatal_check stops at the first empty slot */
            memmove(&loop->watched[i], &loop->watched[i + 1],
                    (size_t)(HC_STAGE_LOOP_WATCH_MAX - i - 1) * sizeof(loop->watched[0]));
            loop->watched[HC_STAGE_LOOP_WATCH_MAX - 1] = NULL;
            return;
        }
    }
}

int64_t hc_stage_loop_heartbeat_ms(const hc_stage_loop_t *loop)
{
    return atomic_load(&loop->heartbeat_ms);
}

void hc_stage_loop_beat(hc_stage_loop_t *loop)
{
    atomic_store(&loop->heartbeat_ms, hc_now_ms());
}

int hc_stage_loop_assigned(const hc_stage_loop_t *loop)
{
    return atomic_load(&loop->assigned);
}

void hc_stage_loop_committed(hc_stage_loop_t *loop, int32_t partition, int64_t next)
{
    int64_t now = hc_now_ms();
    const hc_progress_part_t *pp = hc_progress_part(&loop->progress, partition);
    if (pp && pp->committed != HC_PROGRESS_UNKNOWN && next > pp->committed) {
        loop->committed_ms = now; /* a commit that moved on, not a baseline read */
    }
    if (hc_progress_committed(&loop->progress, partition, next, now) == HC_PROGRESS_REPORT_MOVING) {
        stall_gone(loop, partition);
        hc_log_event(HC_LOG_INFO, loop->name, "partition_moving",
                     HC_LOG_STR("topic", loop->opts.topic), HC_LOG_INT("partition", partition),
                     HC_LOG_INT("committed_offset", next));
    }
}

void hc_stage_loop_fail(hc_stage_loop_t *loop, hc_err_t err, const char *errstr)
{
    if (err == HC_OK || loop->latched != HC_OK) {
        return;
    }
    loop->latched = err;
    snprintf(loop->latched_errstr, sizeof(loop->latched_errstr), "%s", errstr ? errstr : "");
}

bool hc_stage_loop_failed(const hc_stage_loop_t *loop)
{
    return loop->latched != HC_OK;
}

bool hc_stage_loop_stop_requested(const hc_stage_loop_t *loop)
{
    return loop->stop && atomic_load(loop->stop);
}

void hc_stage_loop_pause(hc_stage_loop_t *loop, rd_kafka_t *rk, int64_t ms)
{
    if (rk) {
        int64_t until = hc_now_ms() + ms;
        for (int64_t left = ms; left > 0; left = until - hc_now_ms()) {
            rd_kafka_poll(rk, left > POLL_MAX_MS ? POLL_MAX_MS : (int)left);
        }
    } else {
        hc_sleep_ms(ms);
    }
    hc_stage_loop_beat(loop);
}

void hc_stage_loop_forget(hc_stage_loop_t *loop, const char *topic, int32_t partition)
{
    if (strcmp(topic, loop->opts.topic) == 0) {
        hc_progress_repositioned(&loop->progress, partition);
    }
#ifndef HC_MUTANT_KEEP_HELD
    size_t dropped = drop_held(loop, topic, partition);
    if (dropped > 0) {
        hc_log(HC_LOG_INFO, loop->name, "repositioning %s/%" PRId32 ": %zu held messages dropped",
               topic, partition, dropped);
    }
#else
    /* mutant keep_held: the held messages of a repositioned partition reach the stage after
     * its seek (tests/unit/test_stage1_mock.c and test_stage2.c catch it) */
    (void)loop;
    (void)topic;
    (void)partition;
#endif
}

void hc_stage_loop_forget_list(hc_stage_loop_t *loop,
                               const rd_kafka_topic_partition_list_t *partitions)
{
    for (int i = 0; i < partitions->cnt; i++) {
        hc_stage_loop_forget(loop, partitions->elems[i].topic, partitions->elems[i].partition);
    }
}

hc_err_t hc_stage_loop_give_back(hc_stage_loop_t *loop,
                                 const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                                 size_t errstr_size)
{
    if (loop->held_next == loop->held_count) {
        return HC_OK; /* nothing held: the pause keeps the position right after the last one */
    }
    rd_kafka_topic_partition_list_t *back = rd_kafka_topic_partition_list_new(partitions->cnt);
    for (int i = 0; i < partitions->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &partitions->elems[i];
        /* a partition's held messages are in offset order: the first is where to go back to */
        for (size_t h = loop->held_next; h < loop->held_count; h++) {
            const rd_kafka_message_t *rkm = loop->held[h];
            if (rkm && !rkm->err && rkm->partition == tp->partition && rkm->rkt &&
                strcmp(rd_kafka_topic_name(rkm->rkt), tp->topic) == 0) {
                rd_kafka_topic_partition_list_add(back, tp->topic, tp->partition)->offset =
                    rkm->offset;
                break;
            }
        }
        drop_held(loop, tp->topic, tp->partition);
    }
    for (int i = 0; i < back->cnt; i++) {
        hc_progress_repositioned(&loop->progress, back->elems[i].partition);
    }
    hc_err_t err = HC_OK;
    if (back->cnt > 0) {
        err = hc_kafka_reposition(loop->consumer, back, (int)loop->cfg->timeouts.committed_read_ms,
                                  errstr, errstr_size);
    }
    rd_kafka_topic_partition_list_destroy(back);
    return err;
}

/* A Kafka broker refusing the stage's credentials or failing its TLS handshake is named, but
 * the stage does not stop on it. A wrong password or CA in the configuration is the likelier
 * cause, and a stage that exits would put it right in front of the operator; but the same errors
 * come from the broker's side during a rotation (a renewed broker certificate signed by a CA
 * the client is about to be given, a SCRAM credential that reaches one broker before another),
 * and then an exit turns a pause into an outage that outlives the rotation, and under a
 * supervisor the restarted stage meets the same error anyway. librdkafka keeps reconnecting
 * with its back-off; the stage holds no partitions it cannot fetch, so it is not ready
 * (/readyz), and each new failure is an error event naming the broker and the cause (never a
 * secret: hc_kafka_auth_failures scrubs them). The commands, which have no one to wait for,
 * exit non-zero with the same sentence (src/cli/main.c). */
void hc_stage_loop_auth_check(hc_stage_loop_t *loop)
{
    char why[512] = "";
    uint64_t n = hc_kafka_auth_failures(why, sizeof(why));
    if (n == loop->auth_failures_seen) {
        return;
    }
    hc_log_event(HC_LOG_ERROR, loop->name, "kafka_auth_failed", HC_LOG_STR("error", why));
    loop->auth_failures_seen = n;
}

static hc_err_t subscribe(hc_stage_loop_t *loop, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, loop->opts.topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(loop->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "subscribe %s: %s", loop->opts.topic,
                      rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

/* The wait of a poll that found nothing queued: until the stage's next deadline, at most
 * POLL_MAX_MS. */
static int poll_timeout_ms(hc_stage_loop_t *loop)
{
    int64_t due = loop->opts.ops->due_ms ? loop->opts.ops->due_ms(loop->opts.stage) : INT64_MAX;
    if (due == INT64_MAX) {
        return POLL_MAX_MS;
    }
    int64_t left = due - hc_now_ms();
    return left <= 0 ? 0 : left < POLL_MAX_MS ? (int)left : POLL_MAX_MS;
}

static hc_err_t fatal_check(hc_stage_loop_t *loop, char *errstr, size_t errstr_size)
{
    hc_err_t err = hc_kafka_fatal_check(loop->consumer, errstr, errstr_size);
    for (int i = 0; i < HC_STAGE_LOOP_WATCH_MAX && err == HC_OK && loop->watched[i]; i++) {
        err = hc_kafka_fatal_check(loop->watched[i], errstr, errstr_size);
    }
    return err;
}

/* One message to the stage; consumer errors (a broker down, a partition EOF) are librdkafka's
 * to retry and only logged. Destroys rkm. */
static hc_err_t deliver(hc_stage_loop_t *loop, rd_kafka_message_t *rkm, char *errstr,
                        size_t errstr_size)
{
    hc_err_t err = HC_OK;
    if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        /* the fetch reached the partition's end (for read_committed, its last stable offset,
         * past aborted records and markers): what the progress check calls caught up */
        hc_progress_eof(&loop->progress, rkm->partition, rkm->offset);
    } else if (rkm->err) {
        hc_log(HC_LOG_WARN, loop->name, "consumer: %s", rd_kafka_message_errstr(rkm));
    } else {
        hc_progress_delivered(&loop->progress, rkm->partition, rkm->offset);
        err = loop->opts.ops->message(loop->opts.stage, rkm, errstr, errstr_size);
    }
    rd_kafka_message_destroy(rkm);
    return err;
}

/* The next message for the stage, or NULL when none came within the poll's wait. Held ones
 * first; when none is held, one batch call takes what is queued (without waiting: it would wait
 * for a full batch), and only when nothing is queued does a poll wait, for one message, until
 * the stage's next deadline (*waited: it was called). The caller owns the message. */
static rd_kafka_message_t *next_message(hc_stage_loop_t *loop, bool *waited)
{
    *waited = false;
    if (loop->queue) {
        while (loop->held_next < loop->held_count) {
            rd_kafka_message_t *rkm = loop->held[loop->held_next];
            loop->held[loop->held_next++] = NULL;
            if (rkm) {
                return rkm;
            }
        }
        /* empty before the call: a rebalance it serves finds nothing held */
        loop->held_next = loop->held_count = 0;
        ssize_t n = rd_kafka_consume_batch_queue(loop->queue, 0, loop->held, HC_STAGE_LOOP_BATCH);
        if (n > 0) {
            loop->held_count = (size_t)n;
            loop->held_next = 1;
            rd_kafka_message_t *rkm = loop->held[0];
            loop->held[0] = NULL;
            return rkm;
        }
    } else {
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(loop->consumer, 0);
        if (rkm) {
            return rkm;
        }
    }
    *waited = true;
    int timeout = poll_timeout_ms(loop);
    return timeout > 0 ? rd_kafka_consumer_poll(loop->consumer, timeout) : NULL;
}

/* One partition's stall, said on every surface: the event, the gauge (and with it /readyz and
 * `hotcount status`), then the stage's recovery. HC_OK, HC_ERR_STALLED when the stage's own
 * recovery no longer moves it, or the error that stops the loop. */
static hc_err_t stalled(hc_stage_loop_t *loop, int32_t p, hc_progress_action_t action, int64_t now,
                        char *errstr, size_t errstr_size)
{
    const hc_stage_loop_ops_t *ops = loop->opts.ops;
    const hc_progress_part_t *pp = hc_progress_part(&loop->progress, p);
    char state[HC_METRICS_STALL_STATE_MAX] = "";
    if (ops->describe) {
        ops->describe(loop->opts.stage, p, state, sizeof(state));
    }
    char why[256] = "";
    hc_err_t rec = HC_ERR_TRANSIENT;
    if (action == HC_PROGRESS_RECOVER && loop->committed_ms > pp->recovered_ms) {
        /* The stage committed other partitions since the last recovery: it is working, this
         * partition is behind the others (a backlog drained through small batches, its records
         * deep in the fetch queue), not forgotten. Seeking it again would send it to the back
         * of that queue every bound, and an exit would meet the same backlog: it stays
         * reported, and is left to come round. */
        hc_errstr_set(why, sizeof(why), "behind the partitions the stage is committing");
    } else {
        rec = ops->recover ? ops->recover(loop->opts.stage, p, why, sizeof(why)) : HC_OK;
    }
    if (rec != HC_OK && rec != HC_ERR_TRANSIENT) {
        hc_errstr_set(errstr, errstr_size, "%s", why);
        return rec;
    }
    bool acted = rec == HC_OK;
    int64_t committed = pp->committed == HC_PROGRESS_UNKNOWN ? -1 : pp->committed;
    int64_t stalled_ms = now - pp->since_ms;
    if (action == HC_PROGRESS_REPORT_STALL) {
        hc_metrics_partition_stalled(loop->metrics, loop->opts.kind, loop->opts.topic, p, true,
                                     state, now);
        hc_log_event(HC_LOG_ERROR, loop->name, "partition_stalled",
                     HC_LOG_STR("topic", loop->opts.topic), HC_LOG_INT("partition", p),
                     HC_LOG_STR("state", state), HC_LOG_INT("committed_offset", committed),
                     HC_LOG_INT("log_end", pp->log_end), HC_LOG_INT("stalled_ms", stalled_ms),
                     HC_LOG_INT("bound_ms", loop->progress.bound_ms),
                     HC_LOG_STR("recovery", acted ? "re-read and re-sought" : why));
    } else {
        hc_metrics_partition_stalled(loop->metrics, loop->opts.kind, loop->opts.topic, p, true,
                                     state, now); /* its state may have changed */
    }
    if (hc_progress_recovered(&loop->progress, p, acted, now) != HC_PROGRESS_GIVE_UP) {
        return HC_OK;
    }
    hc_log_event(HC_LOG_ERROR, loop->name, "partition_stalled_exit",
                 HC_LOG_STR("topic", loop->opts.topic), HC_LOG_INT("partition", p),
                 HC_LOG_STR("state", state), HC_LOG_INT("committed_offset", committed),
                 HC_LOG_INT("log_end", pp->log_end), HC_LOG_INT("stalled_ms", stalled_ms));
    hc_errstr_set(errstr, errstr_size,
                  "partition %s/%" PRId32 " stood still %" PRId64
                  " ms with input waiting (state %s) and re-reading and re-seeking it did not "
                  "move it: exiting for a fresh start",
                  loop->opts.topic, p, stalled_ms, state);
    return HC_ERR_STALLED;
}

/* Judges the partitions past their progress bound against the broker's end for each (one
 * ListOffsets each, read_committed: the last stable offset). */
static hc_err_t progress_check(hc_stage_loop_t *loop, int64_t now, char *errstr, size_t errstr_size)
{
    if (now < loop->progress_check_at_ms) {
        return HC_OK;
    }
    loop->progress_check_at_ms = now + loop->progress.recheck_ms;
    int32_t due[PROGRESS_BATCH];
    size_t n = hc_progress_due(&loop->progress, now, due, PROGRESS_BATCH);
    for (size_t i = 0; i < n; i++) {
        int64_t lo = 0;
        int64_t hi = 0;
        rd_kafka_resp_err_t rerr = rd_kafka_query_watermark_offsets(
            loop->consumer, loop->opts.topic, due[i], &lo, &hi, PROGRESS_QUERY_MS);
        hc_stage_loop_beat(loop); /* a bounded wait, not a hang */
        if (rerr) {
            hc_log(HC_LOG_DEBUG, loop->name, "progress check of %s/%" PRId32 " skipped: %s",
                   loop->opts.topic, due[i], rd_kafka_err2str(rerr));
            return HC_OK; /* the broker is out of reach: no verdict this round */
        }
        int64_t at = hc_now_ms();
        hc_progress_action_t action = hc_progress_judge(&loop->progress, due[i], hi, at);
        hc_err_t err = HC_OK;
        if (action == HC_PROGRESS_REPORT_MOVING) {
            stall_gone(loop, due[i]);
            hc_log_event(HC_LOG_INFO, loop->name, "partition_moving",
                         HC_LOG_STR("topic", loop->opts.topic), HC_LOG_INT("partition", due[i]),
                         HC_LOG_INT("log_end", hi));
        } else if (action == HC_PROGRESS_REPORT_STALL || action == HC_PROGRESS_RECOVER) {
            err = stalled(loop, due[i], action, at, errstr, errstr_size);
        }
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

/* Polls and dispatches until *stop or an error. The clock is read once per CLOCK_EVERY
 * messages while they queue up (a read costs 60-90 ns on a VM: three per message were 13 % of
 * stage 1's CPU), and after every poll that may have waited, so windows still close within a
 * millisecond of their due time; fatal client errors are looked for whenever it is read. */
static hc_err_t poll_loop(hc_stage_loop_t *loop, char *errstr, size_t errstr_size)
{
    const hc_stage_loop_ops_t *ops = loop->opts.ops;
    int64_t now = hc_now_ms();
    unsigned since_clock = 0;
    while (!atomic_load_explicit(loop->stop, memory_order_relaxed)) {
        /* relaxed: a plain store, not a locked instruction per message; the watchdog only
         * needs the value, no ordering with anything else */
        atomic_store_explicit(&loop->heartbeat_ms, now, memory_order_relaxed);
        bool waited;
        rd_kafka_message_t *rkm = next_message(loop, &waited);
        bool checkpoint = waited || ++since_clock == CLOCK_EVERY;
        if (checkpoint) {
            now = hc_now_ms();
            since_clock = 0;
        }
        if (hc_stage_loop_failed(loop)) {
            if (rkm) {
                rd_kafka_message_destroy(rkm);
            }
            hc_errstr_set(errstr, errstr_size, "%s", loop->latched_errstr);
            return loop->latched;
        }
        bool idle = !rkm;
        hc_err_t err = rkm ? deliver(loop, rkm, errstr, errstr_size) : HC_OK;
        if (err == HC_OK && ops->tick) {
            err = ops->tick(loop->opts.stage, now, idle, errstr, errstr_size);
        }
        if (err == HC_OK && checkpoint) {
            hc_stage_loop_auth_check(loop);
            err = fatal_check(loop, errstr, errstr_size);
        }
        if (err == HC_OK && checkpoint) {
            err = progress_check(loop, now, errstr, errstr_size);
        }
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

hc_err_t hc_stage_loop_run(hc_stage_loop_t *loop, const atomic_bool *stop, char *errstr,
                           size_t errstr_size)
{
    const hc_stage_loop_ops_t *ops = loop->opts.ops;
    loop->stop = stop;
    hc_stage_loop_beat(loop);
    hc_timeouts_log(&loop->cfg->timeouts);
    hc_err_t err = ops->start ? ops->start(loop->opts.stage, errstr, errstr_size) : HC_OK;
    if (err == HC_OK) {
        err = subscribe(loop, errstr, errstr_size);
    }
    if (err == HC_OK) {
        hc_metrics_stage_started(loop->metrics, loop->opts.kind, hc_now_ms());
        /* librdkafka: the reference must be gone before the consumer closes */
        loop->queue = loop->held ? rd_kafka_queue_get_consumer(loop->consumer) : NULL;
        err = poll_loop(loop, errstr, errstr_size);
        /* what is held was not processed: not in the window `stopping` closes, so the next
         * owner (or run) fetches it again */
        drop_held(loop, NULL, -1);
        if (loop->queue) {
            rd_kafka_queue_destroy(loop->queue);
            loop->queue = NULL;
        }
        if (ops->stopping) {
            err = ops->stopping(loop->opts.stage, err, errstr, errstr_size);
        }
        /* latched before the close: its revoke must see a failed stage and commit nothing */
        hc_stage_loop_fail(loop, err, errstr);
        /* leaves the group (a static member does not: the group keeps its partitions for it
         * until its session times out, so a restart within that takes them back unmoved) */
        loop->close_abandoned =
            !hc_kafka_consumer_close_bounded(loop->consumer, CLOSE_MS, rebalance_cb, loop);
        if (loop->close_abandoned) {
            hc_log_event(HC_LOG_WARN, loop->name, "consumer_close_timeout",
                         HC_LOG_INT("timeout_ms", CLOSE_MS));
        }
        if (err == HC_OK && hc_stage_loop_failed(loop)) {
            hc_errstr_set(errstr, errstr_size, "%s", loop->latched_errstr);
            err = loop->latched; /* the close's revoke failed */
        }
        hc_metrics_stage_stopped(loop->metrics, loop->opts.kind);
    }
    if (err != HC_OK) {
        hc_log(HC_LOG_ERROR, loop->name, "stopping: %s", errstr);
    } else {
        hc_log(HC_LOG_INFO, loop->name, "stopped cleanly");
    }
    return err;
}
