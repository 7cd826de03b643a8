/* Stage 2: likes.partials (read_committed) -> per-post merge -> one conditional store batch.
 *
 * The store is the source of truth for stage 2's position: on every assignment, after a lost
 * compare-and-set, the stage reads the stored offsets and assigns its partitions there. Each
 * partition remembers `start` (the stored offset its window began from: the batch's expected
 * value) and `next` (one past the last partial it consumed).
 *
 * The window is the state machine of stage2_impl.h: hc_stage2_next is the only place a state
 * changes, and enter() below does what the new state asks of the consumer. A store outage
 * pauses the partitions and retries the same batch with capped exponential back-off
 * (cfg->timeouts). Retrying after an ambiguous failure is safe: if the first attempt did
 * commit, the retry loses the compare-and-set and the stage re-reads the offsets instead of
 * counting twice. A revoke or a stop applies the open window once and drops it whatever the
 * store answers: the partitions are going away, so nothing repositions there.
 *
 * The consumer, the heartbeat, the error latch and the close are the shared loop's
 * (stage_loop.h); this file plugs into it through the hooks at the end. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsm.h"
#include "hotcount/changelog.h"
#include "hotcount/clock.h"
#include "hotcount/hotkeys_pub.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/partial_check.h"
#include "hotcount/partial_pack.h"
#include "hotcount/partials_key.h"
#include "hotcount/source_check.h"
#include "hotcount/stage.h"
#include "hotcount/stage_loop.h"
#include "hotcount/store.h"
#include "hotcount/table.h"
#include "hotcount/timeouts.h"
#include "hotcount/window.h"
#include "hotcount/window_log.h"
#include "stage2_impl.h"

/* The batch limit's start (batch_adapt's slow start): four full packed records. */
#define BATCH_START_POSTS (4 * HC_PACK_MAX_POSTS)

typedef struct part_state {
    bool assigned;
    bool gap;      /* held back: the partials its counts need are past retention (retention_gap) */
    bool touched;  /* consumed from in the open window */
    int64_t start; /* stored next_offset, or HC_OFFSET_NONE */
    int64_t next;  /* next offset to consume */
} part_state_t;

/* One partial that joined the open window: where it came from and what it added, so that the
 * post's partials can be dead-lettered if the store refuses the post (HC_ERR_RECORD). */
/* refused[i] for table entry i */
enum { ENTRY_OK = 0, ENTRY_REFUSED, ENTRY_DEAD_LETTERED };

struct hc_stage2 {
    const hc_config_t *cfg;
    hc_auth_keyring_t auth; /* partials.auth.key.file: every partial must be signed (auth_on) */
    bool auth_on;
    hc_metrics_t *metrics;
    hc_stage_loop_t loop;      /* owns the consumer; loop.name is the log area */
    hc_changelog_t *changelog; /* owned; NULL when topic.counts is off */
    hc_hotkeys_pub_t *hot;     /* owned; NULL when topic.hotkeys is off (hotkeys_pub.h) */
    hc_store_t *st;            /* owned; NULL until the store could first be reached */
    hc_table_t *tbl;           /* owned */
    hc_source_check_t *src;    /* owned: the raw ranges taken per partition (source_check.h) */
    part_state_t *parts;       /* owned, indexed by partition */
    int32_t parts_cap;
    hc_store_delta_t *deltas; /* owned scratch for batches */
    size_t deltas_cap;
    hc_store_offset_t *offsets; /* owned scratch for batches */
    /* owned, deltas_cap long: each batch post's new total, for the changelog */
    int64_t *totals;
    hc_stage2_state_t state; /* changed by step() only */
    int64_t window_start_ms;
    int64_t window_due_ms;      /* when the open window closes (window.h) */
    int64_t last_flush_wall_ms; /* when a flush last began, INT64_MIN before (window.h) */
    int64_t window_events;
    int64_t window_partials;
    int64_t window_records; /* records taken into the open window (a window takes them whole) */
    int64_t retry_at_ms;    /* RETRY, RETRY_REWIND: when the batch is applied again */
    int retry_attempt;      /* failed attempts of the waiting batch: the back-off's attempt */
    int64_t turned_away;    /* partials turned away while a batch waited (hc_stage2_turned_away) */
    char store_error[200];  /* the last failed batch's error: what a stalled partition waits on */
    /* The adaptive batch limit (batch_adapt): the posts a window may hold, between
     * batch_floor and max.keys; the duration a batch should stay under; and the last applied
     * batch's size and duration. */
    size_t batch_limit;
    size_t batch_floor;
    bool batch_pushed_back; /* the limit shrank once: grow by quarters from then on */
    int64_t batch_target_ms;
    size_t last_batch_posts;
    int64_t last_batch_ms;
    /* Untrusted input (partial_check.h): the dead-letter producer (owned, created at the first
     * dead letter), its failed deliveries (its dr_msg_cb), the open window's sources (owned) and
     * each table entry's refusal state (owned, refused_cap long). */
    rd_kafka_t *dlq;
    int64_t dlq_failed;
    hc_window_log_t sources; /* where each partial of the open window came from */
    uint8_t *refused;
    size_t refused_cap;
    size_t *map; /* owned, deltas_cap long: a batch delta's table index */
    /* The record being taken, decoded whole before any of it counts: its entries (owned,
     * HC_PACK_MAX_POSTS long; post ids borrowed from the message or from `single`) and the
     * one-post JSON record's decoding. */
    hc_pack_entry_t *pack;
    hc_partial_t single;
    /* borrowed; NULL: the store by cfg->store's scheme */
    const struct hc_store_ops *store_ops;
    /* The store check (check_store): when it runs next, and the store's identity as last seen
     * ("" for a backend without one; identity_known false until first read). */
    int64_t check_at_ms;
    char identity[HC_STORE_IDENTITY_MAX];
    bool identity_known;
};

/* ---- the state machine ---- */

#define S(x) HC_STAGE2_##x
#define EV(x) HC_STAGE2_EV_##x
#define ANY HC_FSM_ANY

/* The table of stage2_impl.h. An event other than APPLIED cannot fail: its outcome is not read
 * (ANY). */
static const hc_fsm_edge_t edges[] = {
    /* the stage failed elsewhere: drop the window, commit nothing */
    {ANY, EV(FAIL), ANY, S(FAILED)},
    /* the store check runs only without a window: an open one's batch finds out by its
     * compare-and-set anyway */
    {S(IDLE), EV(PARTIAL), ANY, S(OPEN)},
    {S(IDLE), EV(CLOSE), ANY, S(IDLE)},
    {S(IDLE), EV(STORE_MOVED), ANY, S(REREAD)},
    {S(OPEN), EV(PARTIAL), ANY, S(OPEN)},
    {S(OPEN), EV(TOO_BIG), ANY, S(REWIND)},
    {S(OPEN), EV(NO_ROOM), ANY, S(FULL)},
    {S(OPEN), EV(APPLIED), HC_OK, S(IDLE)},
    {S(OPEN), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY)},
    {S(OPEN), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(OPEN), EV(CLOSE), ANY, S(CLOSING)},
    /* the partial that did not fit is in hand: lost with the batch's retry, so RETRY_REWIND */
    {S(FULL), EV(APPLIED), HC_OK, S(IDLE)},
    {S(FULL), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY_REWIND)},
    {S(FULL), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(FULL), EV(CLOSE), ANY, S(CLOSING)},
    {S(FULL), EV(TOO_BIG), ANY, S(REWIND)},
    /* a partial may not join a batch that waits */
    {S(RETRY), EV(NO_ROOM), ANY, S(RETRY_REWIND)},
    {S(RETRY), EV(APPLIED), HC_OK, S(IDLE)},
    {S(RETRY), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY)},
    {S(RETRY), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(RETRY), EV(CLOSE), ANY, S(CLOSING)},
    {S(RETRY), EV(TOO_BIG), ANY, S(REWIND)},
    {S(RETRY_REWIND), EV(NO_ROOM), ANY, S(RETRY_REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_OK, S(REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_ERR_TRANSIENT, S(RETRY_REWIND)},
    {S(RETRY_REWIND), EV(APPLIED), HC_ERR_CONFLICT, S(REREAD)},
    {S(RETRY_REWIND), EV(CLOSE), ANY, S(CLOSING)},
    /* the turned-away partials too: all from the store's */
    {S(RETRY_REWIND), EV(TOO_BIG), ANY, S(REWIND)},
    {S(REWIND), EV(REPOSITIONED), ANY, S(IDLE)},
    {S(REREAD), EV(REPOSITIONED), ANY, S(IDLE)},
    /* landed, or dropped: the stored offsets did not move */
    {S(CLOSING), EV(APPLIED), HC_OK, S(IDLE)},
    {S(CLOSING), EV(APPLIED), HC_ERR_TRANSIENT, S(IDLE)},
    {S(CLOSING), EV(APPLIED), HC_ERR_CONFLICT, S(IDLE)},
};

static const char *const state_names[HC_STAGE2_STATE_COUNT] = {
    "idle", "open", "full", "retry", "retry_rewind", "rewind", "reread", "closing", "failed"};
static const char *const event_names[HC_STAGE2_EVENT_COUNT] = {
    "partial", "no_room", "applied", "repositioned", "close", "store_moved", "fail", "too_big"};

static const hc_fsm_t fsm = {.name = "stage 2 window",
                             .edges = edges,
                             .edge_count = sizeof(edges) / sizeof(edges[0]),
                             .state_names = state_names,
                             .state_count = HC_STAGE2_STATE_COUNT,
                             .event_names = event_names,
                             .event_count = HC_STAGE2_EVENT_COUNT,
                             .failed = HC_STAGE2_FAILED};

#undef S
#undef EV
#undef ANY

hc_stage2_state_t hc_stage2_next(hc_stage2_state_t state, hc_stage2_event_t ev, hc_err_t outcome,
                                 char *errstr, size_t errstr_size)
{
    return (hc_stage2_state_t)hc_fsm_next(&fsm, (int)state, (int)ev, outcome, errstr, errstr_size);
}

const char *hc_stage2_state_name(hc_stage2_state_t state)
{
    return hc_fsm_state_name(&fsm, (int)state);
}

const char *hc_stage2_event_name(hc_stage2_event_t ev)
{
    return hc_fsm_event_name(&fsm, (int)ev);
}

static bool is_paused(hc_stage2_state_t state)
{
    return state == HC_STAGE2_RETRY || state == HC_STAGE2_RETRY_REWIND;
}

static bool has_window(hc_stage2_state_t state)
{
    return state == HC_STAGE2_OPEN || state == HC_STAGE2_FULL || is_paused(state);
}

/* ---- partitions and positions ---- */

static part_state_t *part(hc_stage2_t *s2, int32_t partition)
{
    if (partition >= s2->parts_cap) {
        int32_t cap = s2->parts_cap ? s2->parts_cap : 16;
        while (cap <= partition) {
            cap *= 2;
        }
        part_state_t *grown = realloc(s2->parts, (size_t)cap * sizeof(*grown));
        hc_store_offset_t *offs = realloc(s2->offsets, (size_t)cap * sizeof(*offs));
        if (offs) {
            s2->offsets = offs;
        }
        if (!grown || !offs) {
            if (grown) {
                s2->parts = grown;
            }
            return NULL;
        }
        memset(grown + s2->parts_cap, 0, (size_t)(cap - s2->parts_cap) * sizeof(*grown));
        s2->parts = grown;
        s2->parts_cap = cap;
    }
    return &s2->parts[partition];
}

static void window_drop(hc_stage2_t *s2)
{
    if (s2->refused) {
        size_t n = hc_table_count(s2->tbl);
        memset(s2->refused, 0, n < s2->refused_cap ? n : s2->refused_cap);
    }
    hc_table_clear(s2->tbl);
    hc_source_rollback(s2->src); /* after a landed batch: nothing is pending any more */
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        s2->parts[p].touched = false;
    }
    s2->window_events = 0;
    s2->window_partials = 0;
    s2->window_records = 0;
    hc_window_log_clear(&s2->sources);
}

/* Every partition treated as gone: its messages are dropped until the next assignment, which
 * reads the store's offsets anyway. */
static void forget_positions(hc_stage2_t *s2)
{
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        s2->parts[p].assigned = false;
        if (s2->parts[p].gap) {
            s2->parts[p].gap = false; /* the next owner checks it again */
            hc_metric_add(s2->metrics->retention_gap_parts, -1);
        }
    }
}

/* Whether the partials partition p's counts need from `stored` on are still in Kafka: they are
 * not when `stored` (the beginning when the store has no offset) lies below the partition's log
 * start, which retention (or a delete-records) moved past records no count includes; nor when
 * it lies past the log's end (the topic was re-created: the fetch would be reset to the
 * beginning and count its partials on top of counts from the old one). Asks the broker (one
 * ListOffsets, bounded like a committed read), retrying through a broker outage until the stage
 * is asked to stop. HC_OK with *gap set, or the error that stops the stage. */
static hc_err_t retention_gap(hc_stage2_t *s2, int32_t p, int64_t stored, bool *gap,
                              int64_t *log_start, int64_t *log_end, char *errstr,
                              size_t errstr_size)
{
    *gap = false;
    for (int attempt = 0;; attempt++) {
        int64_t lo = 0;
        int64_t hi = 0;
        rd_kafka_resp_err_t rerr =
            rd_kafka_query_watermark_offsets(s2->loop.consumer, s2->cfg->topic_partials, p, &lo,
                                             &hi, (int)s2->cfg->timeouts.committed_read_ms);
        if (rerr == RD_KAFKA_RESP_ERR_NO_ERROR) {
            *log_start = lo;
            *log_end = hi;
            *gap = lo > (stored == HC_OFFSET_NONE ? 0 : stored) ||
                   (stored != HC_OFFSET_NONE && stored > hi);
            return HC_OK;
        }
        if (hc_stage_loop_stop_requested(&s2->loop)) {
            hc_errstr_set(errstr, errstr_size, "log start of %s/%" PRId32 ": %s",
                          s2->cfg->topic_partials, p, rd_kafka_err2str(rerr));
            return HC_ERR_TRANSIENT;
        }
        int64_t backoff = hc_timeouts_backoff_ms(&s2->cfg->timeouts, attempt);
        hc_log(HC_LOG_WARN, s2->loop.name,
               "log start of %s/%" PRId32 ": %s; retrying in %" PRId64 " ms",
               s2->cfg->topic_partials, p, rd_kafka_err2str(rerr), backoff);
        hc_stage_loop_pause(&s2->loop, NULL, backoff);
    }
}

/* Reads the stored offsets of `partitions` (retrying through store outages, backing off as
 * cfg->timeouts says, until the stage is asked to stop) and assigns the consumer there: adds
 * them to the assignment (a rebalance's), or with `reposition` (they are assigned already)
 * moves their fetch positions there (hc_kafka_reposition). */
static hc_err_t assign_from_store(hc_stage2_t *s2,
                                  const rd_kafka_topic_partition_list_t *partitions,
                                  bool reposition, char *errstr, size_t errstr_size)
{
    int n = partitions->cnt;
    int32_t *ids = calloc((size_t)n + 1, sizeof(*ids));
    int64_t *stored = calloc((size_t)n + 1, sizeof(*stored));
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    hc_err_t err = HC_ERR_FATAL;
    if (!ids || !stored) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        ids[i] = partitions->elems[i].partition;
    }
    if (n == 0) {
        /* an incremental rebalance may hand out nothing; the group still waits for the call */
        err =
            reposition ? HC_OK : hc_kafka_assign_add(s2->loop.consumer, list, errstr, errstr_size);
        goto done;
    }
    for (int attempt = 0;; attempt++) {
        err = hc_store_read_offsets(s2->st, s2->cfg->group_stage2, s2->cfg->topic_partials, ids,
                                    (size_t)n, stored, errstr, errstr_size);
        if (err != HC_ERR_TRANSIENT || hc_stage_loop_stop_requested(&s2->loop)) {
            break;
        }
        int64_t backoff = hc_timeouts_backoff_ms(&s2->cfg->timeouts, attempt);
        hc_log(HC_LOG_WARN, s2->loop.name, "reading offsets: %s; retrying in %" PRId64 " ms",
               errstr, backoff);
        hc_stage_loop_pause(&s2->loop, NULL, backoff); /* waiting out an outage is not hanging */
    }
    if (err != HC_OK) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        part_state_t *ps = part(s2, ids[i]);
        if (!ps) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            err = HC_ERR_FATAL;
            goto done;
        }
        bool gap = false;
        int64_t log_start = 0;
        int64_t log_end = 0;
        if ((err = retention_gap(s2, ids[i], stored[i], &gap, &log_start, &log_end, errstr,
                                 errstr_size)) != HC_OK) {
            goto done;
        }
        if (gap) {
            /* Reading on would count only what retention left: the counts would be wrong for
             * good, and quietly (auto.offset.reset would move to the log start). Exiting
             * instead would not help: the restart, or the instance the partition moves to,
             * meets the same gap, and the metric and readiness that show it would be gone with
             * the process. So the partition stays held back (not assigned, nothing applied),
             * the process not ready, until an operator repairs the store (`hotcount verify`
             * shows the counts it lacks) and the stage is restarted; the other partitions go
             * on counting exactly. */
            if (!ps->gap) {
                hc_metric_add(s2->metrics->retention_gap_parts, 1);
            }
            ps->gap = true;
            ps->assigned = false;
            hc_log_event(HC_LOG_ERROR, s2->loop.name, "retention_gap",
                         HC_LOG_STR("topic", s2->cfg->topic_partials),
                         HC_LOG_INT("partition", ids[i]),
                         HC_LOG_INT("store_offset", stored[i] == HC_OFFSET_NONE ? -1 : stored[i]),
                         HC_LOG_INT("log_start", log_start), HC_LOG_INT("log_end", log_end));
            continue;
        }
        ps->assigned = true;
        ps->touched = false;
        hc_source_forget(s2->src, ids[i]); /* the store's offsets rule now, not our memory */
        ps->start = stored[i];
        ps->next = stored[i];
        /* the baseline of the progress check: a fresh store's partition starts at 0 */
        hc_stage_loop_committed(&s2->loop, ids[i], stored[i] == HC_OFFSET_NONE ? 0 : stored[i]);
        rd_kafka_topic_partition_list_add(list, partitions->elems[i].topic, ids[i])->offset =
            stored[i] == HC_OFFSET_NONE ? RD_KAFKA_OFFSET_BEGINNING : stored[i];
    }
    if (s2->changelog && n > 0) {
        hc_changelog_assigned(s2->changelog);
    }
    if (reposition) {
        hc_stage_loop_forget_list(&s2->loop, list); /* held: fetched from the old positions */
    }
    err = reposition
              ? hc_kafka_reposition(s2->loop.consumer, list,
                                    (int)s2->cfg->timeouts.committed_read_ms, errstr, errstr_size)
              : hc_kafka_assign_add(s2->loop.consumer, list, errstr, errstr_size);
    if (err == HC_OK && !reposition && is_paused(s2->state) && list->cnt > 0) {
        /* an increment handed out while a batch waits for its retry: fetch nothing from it
         * until the batch is decided, as from the others (the loop hands partitions over
         * resumed; set_paused resumes all of them together) */
        rd_kafka_pause_partitions(s2->loop.consumer, list);
    }
done:
    rd_kafka_topic_partition_list_destroy(list);
    free(ids);
    free(stored);
    return err;
}

/* True when the assignment is lost and may not be re-assigned (hc_kafka_may_reassign). */
static bool assignment_lost(hc_stage2_t *s2)
{
    if (hc_kafka_may_reassign(s2->loop.consumer)) {
        return false;
    }
    forget_positions(s2);
    hc_log(HC_LOG_INFO, s2->loop.name, "assignment lost: waiting for the next one");
    return true;
}

/* Re-assigns every assigned partition at the offsets now in the store. */
static hc_err_t reassign_from_store(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    if (assignment_lost(s2)) {
        return HC_OK;
    }
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(s2->loop.consumer, &assigned)) {
        hc_errstr_set(errstr, errstr_size, "assignment unavailable");
        return HC_ERR_FATAL;
    }
    hc_err_t err = HC_OK;
    if (assigned->cnt > 0) {
        err = assign_from_store(s2, assigned, true, errstr, errstr_size);
    }
    rd_kafka_topic_partition_list_destroy(assigned);
    if (err == HC_ERR_TRANSIENT && hc_stage_loop_stop_requested(&s2->loop)) {
        forget_positions(s2); /* stopping in a store outage: take nothing until the end */
        err = HC_OK;
    }
    return err;
}

/* Re-assigns every assigned partition at its in-memory `next`. */
static hc_err_t reassign_from_memory(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    if (assignment_lost(s2)) {
        return HC_OK;
    }
    rd_kafka_topic_partition_list_t *list =
        rd_kafka_topic_partition_list_new(hc_stage_loop_assigned(&s2->loop));
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        if (s2->parts[p].assigned) {
            int64_t next = s2->parts[p].next;
            rd_kafka_topic_partition_list_add(list, s2->cfg->topic_partials, p)->offset =
                next == HC_OFFSET_NONE ? RD_KAFKA_OFFSET_BEGINNING : next;
        }
    }
    hc_stage_loop_forget_list(&s2->loop, list); /* held: fetched past the turned-away partials */
    hc_err_t err = hc_kafka_reposition(
        s2->loop.consumer, list, (int)s2->cfg->timeouts.committed_read_ms, errstr, errstr_size);
    rd_kafka_topic_partition_list_destroy(list);
    return err;
}

static void set_paused(hc_stage2_t *s2, bool paused)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(s2->loop.consumer, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (paused) {
            /* the held partials first, so that a resume without a seek fetches them again */
            char errstr[512];
            hc_err_t err = hc_stage_loop_give_back(&s2->loop, assigned, errstr, sizeof(errstr));
            if (err != HC_OK) {
                hc_stage_loop_fail(&s2->loop, err, errstr); /* the loop stops at its next poll */
            }
            rd_kafka_pause_partitions(s2->loop.consumer, assigned);
        } else {
            rd_kafka_resume_partitions(s2->loop.consumer, assigned);
        }
        rd_kafka_topic_partition_list_destroy(assigned);
    }
}

/* ---- dead letters ---- */

static void dlq_dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    if (rkm->err) {
        ((hc_stage2_t *)opaque)->dlq_failed++; /* served by rd_kafka_flush on the stage thread */
    }
}

/* Writes one record to topic.dlq and waits until the broker has it (acks=all: the producer is
 * idempotent), retrying with back-off through a Kafka outage until it lands or the stage is
 * asked to stop (HC_ERR_TRANSIENT then). This must finish before the store batch that moves
 * the offsets past the record commits: stage 2 has no transaction that could hold both, so a
 * crash in between dead-letters the record again on the next run (twice, never lost). Rare (one
 * call per bad record), hence one flush per record. HC_ERR_FATAL when no producer can be made. */
static hc_err_t dead_letter(hc_stage2_t *s2, int32_t partition, int64_t offset, const void *key,
                            size_t key_len, const void *value, size_t value_len,
                            hc_partial_reason_t reason, char *errstr, size_t errstr_size)
{
    char source[400];
    snprintf(source, sizeof(source), "%s/%" PRId32 "/%" PRId64, s2->cfg->topic_partials, partition,
             offset);
    if (!s2->dlq) {
        hc_kafka_opts_t opts = {.dr_msg_cb = dlq_dr_msg_cb, .opaque = s2};
        s2->dlq = hc_kafka_new(s2->cfg, HC_KAFKA_ROLE_PRODUCER, &opts, errstr, errstr_size);
        if (!s2->dlq) {
            return HC_ERR_FATAL;
        }
    }
    bool produced = false;
    for (int attempt = 0;; attempt++) {
        if (!produced) {
            /* a record the broker took can be too large for our producer: cut it, and say so */
            size_t vlen =
                value_len > HC_PARTIAL_MAX_BYTES && attempt > 0 ? HC_PARTIAL_MAX_BYTES : value_len;
            size_t klen =
                key_len > HC_PARTIAL_MAX_BYTES && attempt > 0 ? HC_PARTIAL_MAX_BYTES : key_len;
            rd_kafka_headers_t *hdrs = hc_kafka_dead_letter_headers(
                hc_partial_reason_str(reason), source, NULL, 0, value_len, vlen, key_len, klen);
            rd_kafka_resp_err_t rerr = rd_kafka_producev(
                s2->dlq, RD_KAFKA_V_TOPIC(s2->cfg->topic_dlq), RD_KAFKA_V_KEY(key, klen),
                RD_KAFKA_V_VALUE((void *)value, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
            if (rerr == RD_KAFKA_RESP_ERR_NO_ERROR) {
                produced = true;
            } else {
                rd_kafka_headers_destroy(hdrs);
                hc_errstr_set(errstr, errstr_size, "dead letter of %s: %s", source,
                              rd_kafka_err2str(rerr));
            }
        }
        if (produced) {
            int64_t failed = s2->dlq_failed;
            rd_kafka_flush(s2->dlq, (int)s2->cfg->timeouts.drain_ms);
            if (rd_kafka_outq_len(s2->dlq) == 0) {
                if (s2->dlq_failed == failed) {
                    hc_metric_add(s2->metrics->partials_invalid[reason], 1);
                    hc_log_event(HC_LOG_WARN, s2->loop.name, "partial_dead_lettered",
                                 HC_LOG_STR("reason", hc_partial_reason_str(reason)),
                                 HC_LOG_STR("source", source));
                    return HC_OK;
                }
                produced = false; /* not delivered: produce it again */
                hc_errstr_set(errstr, errstr_size, "dead letter of %s not delivered", source);
            } else {
                hc_errstr_set(errstr, errstr_size, "dead letter of %s: not acknowledged yet",
                              source);
            }
        }
        if (hc_stage_loop_stop_requested(&s2->loop)) {
            return HC_ERR_TRANSIENT;
        }
        int64_t backoff = hc_timeouts_backoff_ms(&s2->cfg->timeouts, attempt);
        hc_log(HC_LOG_WARN, s2->loop.name, "%s; retrying in %" PRId64 " ms", errstr, backoff);
        hc_stage_loop_pause(&s2->loop, s2->dlq, backoff);
    }
}

/* Dead-letters every partial of the table entries the store refused and that are not dead
 * lettered yet: one record per partial, its value the partial as stage 2 decoded it
 * (re-encoded: the same fields, not necessarily the same bytes), its source its own offset. */
static hc_err_t dead_letter_refused(hc_stage2_t *s2, size_t n, char *errstr, size_t errstr_size)
{
    for (size_t e = 0; e < n; e++) {
        if (s2->refused[e] != ENTRY_REFUSED) {
            continue;
        }
        const hc_table_entry_t *ent = hc_table_entry(s2->tbl, e);
        hc_window_log_pos_t pos = {0};
        hc_window_log_rec_t src;
        while (hc_window_log_next(&s2->sources, &pos, &src)) {
            if (src.entry != e) {
                continue;
            }
            hc_table_entry_t one = {.post_id = ent->post_id,
                                    .post_id_len = ent->post_id_len,
                                    .delta = src.delta,
                                    .events = src.events,
                                    .ts_min = src.ts_min,
                                    .ts_max = src.ts_max};
            char buf[HC_PARTIAL_MAX_BYTES];
            size_t len = hc_partial_encode(&one, buf, sizeof(buf));
            hc_err_t err =
                dead_letter(s2, src.partition, src.offset, ent->post_id, ent->post_id_len, buf, len,
                            HC_PARTIAL_STORE_REFUSED, errstr, errstr_size);
            if (err != HC_OK) {
                return err; /* the entry stays REFUSED: all its partials go again next time */
            }
        }
        s2->refused[e] = ENTRY_DEAD_LETTERED;
    }
    return HC_OK;
}

/* ---- the batch ---- */

static hc_err_t grow_scratch(hc_stage2_t *s2, size_t n)
{
    size_t cap = n < 1024 ? 1024 : n;
    hc_store_delta_t *deltas = realloc(s2->deltas, cap * sizeof(*deltas));
    if (deltas) {
        s2->deltas = deltas;
    }
    size_t *map = realloc(s2->map, cap * sizeof(*map));
    if (map) {
        s2->map = map;
    }
    uint8_t *refused = cap > s2->refused_cap ? realloc(s2->refused, cap) : s2->refused;
    if (refused) {
        if (cap > s2->refused_cap) {
            memset(refused + s2->refused_cap, 0, cap - s2->refused_cap);
            s2->refused_cap = cap;
        }
        s2->refused = refused;
    }
    /* only the changelog needs the totals */
    int64_t *totals = s2->changelog ? realloc(s2->totals, cap * sizeof(*totals)) : NULL;
    if (totals) {
        s2->totals = totals;
    }
    if (!deltas || !map || !refused || (s2->changelog && !totals)) {
        return HC_ERR_FATAL;
    }
    s2->deltas_cap = cap;
    return HC_OK;
}

static void store_progress(void *opaque)
{
    hc_stage_loop_beat(opaque);
}

/* Event time to store commit, per post of the batch, from its oldest event: an upper bound of
 * each post's freshness, observed with one atomic add per bucket per batch. */
static void observe_end_to_end(hc_stage2_t *s2, int64_t committed_wall_ms)
{
    hc_histogram_acc_t acc;
    hc_histogram_acc_init(&acc, &s2->metrics->end_to_end_seconds);
    size_t n = hc_table_count(s2->tbl);
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s2->tbl, i);
        if (ent->ts_min != HC_TS_NONE && s2->refused[i] == ENTRY_OK) {
            hc_histogram_acc_add(&acc,
                                 (double)hc_ts_age_ms(committed_wall_ms, ent->ts_min) / 1000.0, 1);
        }
    }
    hc_histogram_acc_merge(&acc, &s2->metrics->end_to_end_seconds);
}

/* Builds the open window's batch from the table and the partitions it touched, applies it,
 * and returns hc_store_apply's class. On HC_OK the batch is recorded as landed (metrics, the
 * changelog, each partition's start moves to its next); whatever else happens to the window is
 * the state machine's. The same window always gives the same batch: nothing joins a window
 * that waits for its retry.
 *
 * A post the store refuses (HC_ERR_RECORD: its count would leave int64, or the backend cannot
 * hold its id) is a bad record, not an outage: it never reaches the state machine (no retry, no
 * pause). Its partials are dead-lettered, then the batch is applied again without its delta.
 * Why the offsets still move exactly once and the compare-and-set still holds: a refused batch
 * changed nothing (store.h), so every stored offset still equals the partition's `start`; the
 * batch without the post carries the same expected and next offsets, so it is one more attempt
 * at the same conditional step. The refused post's partials lie below those next offsets: they
 * are consumed by it, counted in the dead-letter topic instead. If that batch loses the
 * compare-and-set (another owner moved the offsets), the window is re-read as any other and
 * the partials are dead-lettered a second time, never lost. The refusal marks live as long as
 * the window, so a retry after an outage leaves the post out again without asking the store. */
static hc_err_t apply_window(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    int64_t t0 = hc_now_ms();
    s2->last_flush_wall_ms = hc_wall_ms();
    size_t n = hc_table_count(s2->tbl);
    if ((n > s2->deltas_cap || !s2->refused) && grow_scratch(s2, n) != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    size_t n_offsets = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        part_state_t *ps = &s2->parts[p];
        if (ps->touched) {
            s2->offsets[n_offsets++] = (hc_store_offset_t){p, ps->start, ps->next};
        }
    }
    hc_store_batch_t batch;
    size_t n_all = n;
    hc_err_t err;
    for (;;) {
        /* before the batch that moves past them: dead letters first (dead_letter) */
        if ((err = dead_letter_refused(s2, n_all, errstr, errstr_size)) != HC_OK) {
            return err; /* transient: retried with the batch; fatal: no producer */
        }
        n = 0;
        for (size_t i = 0; i < n_all; i++) {
            if (s2->refused[i] == ENTRY_OK) {
                const hc_table_entry_t *ent = hc_table_entry(s2->tbl, i);
                s2->map[n] = i;
                s2->deltas[n++] = (hc_store_delta_t){ent->post_id, ent->post_id_len, ent->delta};
            }
        }
        size_t refused_at = SIZE_MAX;
        s2->last_batch_posts = n;
        batch = (hc_store_batch_t){
            .group = s2->cfg->group_stage2,
            .topic = s2->cfg->topic_partials,
            .offsets = s2->offsets,
            .offset_count = n_offsets,
            .deltas = s2->deltas,
            .delta_count = n,
            .now_ms = hc_wall_ms(),
            .totals_out = s2->changelog ? s2->totals : NULL,
            .refused_out = &refused_at,
            /* a slow store that still gets requests through is alive, not hung */
            .on_progress = store_progress,
            .progress_opaque = &s2->loop,
        };
        err = hc_store_apply(s2->st, &batch, errstr, errstr_size);
        if (err != HC_ERR_RECORD) {
            break;
        }
        if (refused_at >= n) { /* a post the batch does not hold: a store bug */
            hc_errstr_set(errstr, errstr_size, "store refused a post outside the batch");
            err = HC_ERR_FATAL;
            break;
        }
        size_t e = s2->map[refused_at];
        s2->refused[e] = ENTRY_REFUSED;
        hc_log(HC_LOG_WARN, s2->loop.name,
               "store refused a post of the batch (%s): dead-lettering its partials", errstr);
    }
    hc_metrics_t *m = s2->metrics;
    int64_t done_ms = hc_now_ms();
    s2->last_batch_ms = done_ms - t0;
    hc_histogram_observe(&m->store_seconds, (double)(done_ms - t0) / 1000.0);
    switch (err) {
    case HC_OK:
        hc_metrics_stage_flushed(m, HC_METRICS_STAGE2, done_ms, (double)(done_ms - t0) / 1000.0);
        hc_histogram_observe(&m->batch_posts, (double)n);
        observe_end_to_end(s2, batch.now_ms);
        hc_hotkeys_pub_window(s2->hot, s2->tbl); /* exact per-post likes of the landed window */
        if (s2->changelog) {
            hc_changelog_publish(s2->changelog, s2->loop.consumer, s2->deltas, s2->totals, n,
                                 batch.now_ms, s2->offsets, n_offsets);
            hc_stage_loop_beat(&s2->loop);
        }
        for (size_t i = 0; i < n_offsets; i++) {
            s2->parts[s2->offsets[i].partition].start = s2->offsets[i].next;
            hc_stage_loop_committed(&s2->loop, s2->offsets[i].partition, s2->offsets[i].next);
        }
        hc_source_commit(s2->src);
        hc_metric_add(m->store_commit, 1);
        hc_metric_add(m->store_keys_written, (int64_t)n);
        int64_t refused_events = 0;
        int64_t refused_partials = 0;
        hc_window_log_pos_t pos = {0};
        hc_window_log_rec_t src;
        while (n < n_all && hc_window_log_next(&s2->sources, &pos, &src)) {
            if (s2->refused[src.entry] != ENTRY_OK) {
                refused_events += src.events;
                refused_partials++;
            }
        }
        hc_metric_add(m->events_stored, s2->window_events - refused_events);
        hc_metric_add(m->partials_consumed, s2->window_partials - refused_partials);
        hc_log(HC_LOG_INFO, s2->loop.name,
               "stored batch: %zu posts, %" PRId64 " events, %zu partitions, %" PRId64 " ms", n,
               s2->window_events, n_offsets, hc_now_ms() - t0);
        break;
    case HC_ERR_CONFLICT:
        hc_metric_add(m->store_conflict, 1);
        hc_log(HC_LOG_WARN, s2->loop.name, "store batch refused (%s); re-reading offsets", errstr);
        if (s2->changelog) {
            /* another owner stored batches here, whose changelog records its fence may have
             * aborted (a zombie's store write can land after this stage's takeover repair):
             * republish from the marks (RELIABILITY.md, S3) */
            hc_changelog_assigned(s2->changelog);
        }
        break;
    default:
        hc_metric_add(m->store_error, 1);
        snprintf(s2->store_error, sizeof(s2->store_error), "%s", errstr);
        break;
    }
    return err;
}

/* ---- transitions and their effects ---- */

/* What entering `to` from `from` asks of the consumer and the window, but for REWIND's and
 * REREAD's seek, which step() does. HC_OK, or the error that stops the stage. */
static hc_err_t enter(hc_stage2_t *s2, hc_stage2_state_t from, hc_stage2_state_t to,
                      hc_stage2_event_t ev, hc_err_t outcome, char *errstr, size_t errstr_size)
{
    if (is_paused(from) && !is_paused(to) && to != HC_STAGE2_CLOSING && to != HC_STAGE2_FAILED) {
        set_paused(s2, false);
        hc_log(HC_LOG_INFO, s2->loop.name, "store batch %s after retry; resuming",
               outcome == HC_OK ? "applied" : "refused");
    }
    switch (to) {
    case HC_STAGE2_OPEN:
        if (from == HC_STAGE2_IDLE) {
            s2->window_start_ms = hc_now_ms();
            s2->window_due_ms = hc_window_stage2_due_ms(s2->window_start_ms, hc_wall_ms(),
                                                        s2->cfg->flush_ms, s2->last_flush_wall_ms);
            /* Issue 27: a window closes hc_window_stage2_linger_ms after its first partial,
             * on time or late, rather than waiting for the phase point. The partials of one
             * stage-1 transaction arrive together, and stage 1's aligned windows commit
             * within tens of milliseconds of each other, so the window still holds one burst
             * and stage 2 still writes once per flush.ms; a like no longer waits up to half a
             * window in stage 2 (the p99 of produce -> visible in bench/RESULTS.md). */
            int64_t burst_due = s2->window_start_ms + hc_window_stage2_linger_ms(s2->cfg->flush_ms);
            if (burst_due < s2->window_due_ms) {
                s2->window_due_ms = burst_due;
            }
            hc_metrics_stage_input(s2->metrics, HC_METRICS_STAGE2, s2->window_start_ms);
        }
        return HC_OK;
    case HC_STAGE2_FULL:
    case HC_STAGE2_CLOSING:
        return HC_OK;
    case HC_STAGE2_RETRY:
    case HC_STAGE2_RETRY_REWIND:
        if (!is_paused(from)) {
            set_paused(s2, true); /* the batch waits as it is: fetch nothing meanwhile */
        }
        if (ev == HC_STAGE2_EV_APPLIED) {
            int64_t backoff = hc_timeouts_backoff_ms(&s2->cfg->timeouts, s2->retry_attempt++);
            s2->retry_at_ms = hc_now_ms() + backoff;
            hc_log_event(HC_LOG_WARN, s2->loop.name, "store_batch_failed",
                         HC_LOG_INT("backoff_ms", backoff), HC_LOG_STR("error", errstr));
        }
        return HC_OK;
    case HC_STAGE2_IDLE:
        window_drop(s2);
        s2->retry_attempt = 0;
        return HC_OK;
    case HC_STAGE2_REWIND:
    case HC_STAGE2_REREAD:
        window_drop(s2);
        s2->retry_attempt = 0;
        return HC_OK;
    case HC_STAGE2_FAILED:
    default:
        /* errstr: the event's own (the store's answer to APPLIED, the failure behind FAIL), or
         * hc_stage2_next's naming of an event the state does not take */
        window_drop(s2);
        if (from == HC_STAGE2_FAILED && ev != HC_STAGE2_EV_FAIL) {
            hc_errstr_set(errstr, errstr_size, "stage 2 window: event \"%s\" in state \"%s\"",
                          hc_stage2_event_name(ev), hc_stage2_state_name(from));
        }
        return HC_ERR_FATAL;
    }
}

/* The step loop (the shape of fsm.h), the one way the state changes: hc_stage2_next, then the
 * new state's effects; REWIND and REREAD seek at once and feed REPOSITIONED back. A seek that
 * fails returns its error and leaves the state as it is (the stage stops, or the revoke that
 * follows closes it). */
static hc_err_t step(hc_stage2_t *s2, hc_stage2_event_t ev, hc_err_t outcome, char *errstr,
                     size_t errstr_size)
{
    for (;;) {
        hc_stage2_state_t from = s2->state;
        s2->state = hc_stage2_next(from, ev, outcome, errstr, errstr_size);
        hc_err_t err = enter(s2, from, s2->state, ev, outcome, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (s2->state == HC_STAGE2_REWIND) {
            err = reassign_from_memory(s2, errstr, errstr_size);
        } else if (s2->state == HC_STAGE2_REREAD) {
            err = reassign_from_store(s2, errstr, errstr_size);
        } else {
            return HC_OK;
        }
        if (err != HC_OK) {
            return err;
        }
        ev = HC_STAGE2_EV_REPOSITIONED;
        outcome = HC_OK;
    }
}

/* Applies the window's batch and moves on by its outcome (returned in *outcome when not NULL).
 * HC_OK unless the stage must stop. */
/* The batch limit follows the store's pace, so that a slow or throttling store slows stage 2
 * down instead of stopping it (it starts at BATCH_START_POSTS and doubles while batches are
 * fast, until the store first pushes back): a window the store cannot commit within its bound would
 * fail the same way at every retry (and a restart would meet the same backlog). A batch that landed
 * slower than batch_target_ms shrinks the limit to what would have taken the target; one that
 * failed transiently (a timeout, throttling, an outage) cuts it to a quarter of its size; one
 * that landed well within the target, near the limit, grows it by a quarter, up to max.keys
 * (multiplicative both ways: a store that comes back is used fully again within a few dozen
 * windows). Never below batch_floor, one packed record (or max.keys if smaller): a window
 * takes records whole, and an empty window takes any record (has_room). Returns
 * true when a failed batch of several records is above the new limit: retrying it as it is
 * would fail again. */
static bool batch_adapt(hc_stage2_t *s2, hc_err_t applied)
{
    size_t was = s2->batch_limit;
    size_t n = s2->last_batch_posts;
    size_t max = (size_t)s2->cfg->max_keys;
    size_t limit = was;
    if (applied == HC_OK && s2->last_batch_ms > s2->batch_target_ms) {
        double fit = (double)n * (double)s2->batch_target_ms / (double)s2->last_batch_ms;
        limit = fit < (double)limit ? (size_t)fit : limit;
    } else if (applied == HC_OK && s2->last_batch_ms * 2 < s2->batch_target_ms && n * 2 >= was) {
        /* doubling until the store first pushed back (a slow start), then by quarters */
        limit = s2->batch_pushed_back ? was + was / 4 + 1 : was * 2;
    } else if (applied == HC_ERR_TRANSIENT) {
        limit = n / 4 < limit ? n / 4 : limit;
    }
    limit = limit < s2->batch_floor ? s2->batch_floor : limit > max ? max : limit;
    s2->batch_pushed_back |= limit < was;
    if (limit != was) {
        s2->batch_limit = limit;
        hc_metric_set(s2->metrics->store_batch_limit, (int64_t)limit);
        hc_log_event(limit < was ? HC_LOG_WARN : HC_LOG_INFO, s2->loop.name, "store_batch_limit",
                     HC_LOG_INT("posts", (int64_t)limit), HC_LOG_INT("was", (int64_t)was),
                     HC_LOG_INT("batch_posts", (int64_t)n),
                     HC_LOG_INT("batch_ms", s2->last_batch_ms),
                     HC_LOG_STR("outcome", hc_err_name(applied)));
    }
    /* one record cannot be cut (a window takes records whole): it is retried as it is */
    return applied == HC_ERR_TRANSIENT && n > limit && s2->window_records > 1;
}

static hc_err_t flush(hc_stage2_t *s2, hc_err_t *outcome, char *errstr, size_t errstr_size)
{
    hc_err_t applied = apply_window(s2, errstr, errstr_size);
    if (outcome) {
        *outcome = applied;
    }
    bool too_big = batch_adapt(s2, applied);
    if (too_big && s2->state != HC_STAGE2_CLOSING) {
        /* Fetched again from where the batch started, into smaller windows: no store read
         * needed (the store is failing), and safe whatever the failed attempt did: if it did
         * land, the next batch's compare-and-set against the same start fails and the stage
         * re-reads the store's offsets, as after any ambiguous commit. */
        for (int32_t p = 0; p < s2->parts_cap; p++) {
            s2->parts[p].next = s2->parts[p].start;
        }
        hc_log_event(HC_LOG_WARN, s2->loop.name, "store_batch_failed", HC_LOG_INT("backoff_ms", 0),
                     HC_LOG_STR("error", errstr),
                     HC_LOG_STR("then", "smaller windows from the batch's start"));
        return step(s2, HC_STAGE2_EV_TOO_BIG, applied, errstr, errstr_size);
    }
    return step(s2, HC_STAGE2_EV_APPLIED, applied, errstr, errstr_size);
}

/* ---- the changelog ---- */

/* Republishes what the changelog may lack for the assigned partitions: from its marks in Kafka
 * to the store's offsets. A failure is retried later (the changelog backs off); the marks stay
 * put meanwhile. */
static hc_err_t repair_changelog(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    size_t n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        n += s2->parts[p].assigned;
    }
    int32_t *ids = calloc(n + 1, sizeof(*ids));
    int64_t *stored = calloc(n + 1, sizeof(*stored));
    hc_topic_range_t *ranges = calloc(n + 1, sizeof(*ranges));
    hc_err_t err = HC_ERR_FATAL;
    if (!ids || !stored || !ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto done;
    }
    n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        if (s2->parts[p].assigned) {
            ids[n] = p;
            stored[n++] = s2->parts[p].start;
        }
    }
    size_t count = 0;
    err = hc_changelog_ranges(s2->changelog, s2->loop.consumer, ids, stored, n, ranges, &count,
                              errstr, errstr_size);
    if (err == HC_OK) {
        err = hc_changelog_repair(s2->changelog, s2->loop.consumer, s2->st, ranges, count, errstr,
                                  errstr_size);
    }
    hc_stage_loop_beat(&s2->loop);
    if (err == HC_ERR_TRANSIENT) {
        err = HC_OK; /* hc_changelog_repair_due says when to try again */
    }
done:
    free(ids);
    free(stored);
    free(ranges);
    return err;
}

/* Remembers where a partial that joined the window came from; before: the table's count
 * before the add (a new post is the last entry, an old one is looked up). */
static hc_err_t add_source(hc_stage2_t *s2, const rd_kafka_message_t *rkm,
                           const hc_pack_entry_t *partial, size_t before)
{
    size_t entry = before;
    if (hc_table_count(s2->tbl) == before) {
        entry = (size_t)(hc_table_find(s2->tbl, partial->post_id, partial->post_id_len) -
                         hc_table_entry(s2->tbl, 0));
    }
    hc_window_log_rec_t rec = {.partition = rkm->partition,
                               .entry = (uint32_t)entry,
                               .offset = rkm->offset,
                               .delta = partial->delta,
                               .events = partial->events,
                               .ts_min = partial->ts_min,
                               .ts_max = partial->ts_max};
    return hc_window_log_append(&s2->sources, &rec);
}

/* ---- the loop's hooks (stage_loop.h) ---- */

static hc_err_t open_store(hc_stage2_t *s2, char *errstr, size_t errstr_size)
{
    return s2->store_ops ? hc_store_open_ops(s2->store_ops, s2->cfg, &s2->st, errstr, errstr_size)
                         : hc_store_open(s2->cfg, &s2->st, errstr, errstr_size);
}

/* ---- the store check ---- */

/* A new handle on the store, for a store that is another one now (an SQLite handle would go on
 * reading the old, unlinked file): opened and its schema made sure of, as at the start; on any
 * error the old handle stays and false is returned (the next check tries again). */
static bool reopen_store(hc_stage2_t *s2, char *why, size_t why_size)
{
    hc_store_t *old = s2->st;
    s2->st = NULL;
    hc_err_t err = open_store(s2, why, why_size);
    if (err == HC_OK) {
        err = hc_store_init_schema(s2->st, why, why_size);
    }
    if (err != HC_OK) {
        hc_store_close(s2->st);
        s2->st = old;
        return false;
    }
    hc_store_close(old);
    return true;
}

/* Whether the store still holds what stage 2 last wrote, checked every store.check.ms while no
 * window is open. An open window's batch finds a store that forgot by its compare-and-set; an
 * idle stage has no batch that would, so a store that restarted empty would serve zeros until
 * traffic came. Two signs, both one cheap call: the store's identity (hc_store_identity: a
 * restart, a failover, a replaced file) changed, or the offsets it holds for the assigned
 * partitions differ from each one's `start` (the offset the last batch wrote or the last
 * assignment read: in IDLE nothing was consumed past it). Then the stage re-reads the offsets
 * on the path a lost compare-and-set takes (REREAD): a store that forgot or went back is rebuilt
 * from the partials still in likes.partials (or, when they are past retention, the partition is
 * held back: retention_gap); offsets another owner moved forward are taken as a conflict would.
 * A check that cannot reach the store is skipped: an outage is the batches' to ride out. */
static hc_err_t check_store(hc_stage2_t *s2, int64_t now_ms, char *errstr, size_t errstr_size)
{
    if (s2->cfg->store_check_ms <= 0 || !s2->st || s2->state != HC_STAGE2_IDLE ||
        now_ms < s2->check_at_ms) {
        return HC_OK;
    }
    s2->check_at_ms = now_ms + s2->cfg->store_check_ms;
    char id[HC_STORE_IDENTITY_MAX];
    char why[512];
    if (hc_store_identity(s2->st, id, sizeof(id), why, sizeof(why)) != HC_OK) {
        hc_log(HC_LOG_DEBUG, s2->loop.name, "store check skipped: %s", why);
        return HC_OK;
    }
    bool other = s2->identity_known && strcmp(id, s2->identity) != 0;
    if (other && !reopen_store(s2, why, sizeof(why))) {
        hc_log(HC_LOG_WARN, s2->loop.name, "store is another one; reopening it: %s", why);
        return HC_OK; /* the identity stays the old one: the next check tries again */
    }
    snprintf(s2->identity, sizeof(s2->identity), "%s", id);
    s2->identity_known = true;
    size_t n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        n += s2->parts[p].assigned;
    }
    int32_t *ids = calloc(n + 1, sizeof(*ids));
    int64_t *stored = calloc(n + 1, sizeof(*stored));
    hc_err_t err = HC_OK;
    if (!ids || !stored) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto done;
    }
    n = 0;
    for (int32_t p = 0; p < s2->parts_cap; p++) {
        if (s2->parts[p].assigned) {
            ids[n++] = p;
        }
    }
    err = hc_store_read_offsets(s2->st, s2->cfg->group_stage2, s2->cfg->topic_partials, ids, n,
                                stored, why, sizeof(why));
    if (err == HC_ERR_TRANSIENT) {
        hc_log(HC_LOG_DEBUG, s2->loop.name, "store check skipped: %s", why);
        err = HC_OK;
        goto done;
    }
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s", why);
        goto done;
    }
    size_t moved = 0;
    size_t behind = 0;
    size_t first = 0; /* the first partition behind (or else moved) */
    for (size_t i = 0; i < n; i++) {
        int64_t start = s2->parts[ids[i]].start;
        if (stored[i] == start) {
            continue;
        }
        bool back = stored[i] == HC_OFFSET_NONE || (start != HC_OFFSET_NONE && stored[i] < start);
        if (moved++ == 0 || (back && behind == 0)) {
            first = i;
        }
        behind += back;
    }
    if (behind > 0 || (other && moved == 0)) {
        /* forgot or went back; or another server whose offsets happen to match ours (nothing
         * lost: re-reading them changes nothing, but a restart is worth a line) */
        if (behind > 0) {
            hc_metric_add(s2->metrics->store_forgot, 1);
        }
        int64_t was = n ? s2->parts[ids[first]].start : HC_OFFSET_NONE;
        int64_t now = n ? stored[first] : HC_OFFSET_NONE;
        hc_log_event(behind > 0 ? HC_LOG_WARN : HC_LOG_INFO, s2->loop.name,
                     behind > 0 ? "store_forgot" : "store_restarted",
                     HC_LOG_INT("partitions", behind), HC_LOG_INT("partition", n ? ids[first] : -1),
                     HC_LOG_INT("written_offset", was == HC_OFFSET_NONE ? -1 : was),
                     HC_LOG_INT("stored_offset", now == HC_OFFSET_NONE ? -1 : now),
                     HC_LOG_INT("identity_changed", other ? 1 : 0));
    } else if (moved > 0) {
        hc_log(HC_LOG_INFO, s2->loop.name,
               "store check: %zu partitions' offsets moved ahead (another owner); re-reading",
               moved);
        if (s2->changelog) {
            hc_changelog_assigned(s2->changelog); /* as after a lost compare-and-set */
        }
    } else {
        goto done;
    }
    err = step(s2, HC_STAGE2_EV_STORE_MOVED, HC_OK, errstr, errstr_size);
done:
    free(ids);
    free(stored);
    return err;
}

/* A stage started while its store is down waits for it, as a running one rides out an outage:
 * it retries the open and the schema check with back-off, not ready meanwhile (it holds no
 * partitions: hc_metrics_is_ready), saying why in the log. Asked to stop while waiting, it
 * stops cleanly without having consumed anything. */
static hc_err_t on_start(void *stage, char *errstr, size_t errstr_size)
{
    hc_stage2_t *s2 = stage;
    hc_err_t err;
    for (int attempt = 0;; attempt++) {
        err = s2->st ? HC_OK : open_store(s2, errstr, errstr_size);
        if (err == HC_OK) {
            err = hc_store_init_schema(s2->st, errstr, errstr_size);
        }
        if (err != HC_ERR_TRANSIENT) {
            break;
        }
        if (hc_stage_loop_stop_requested(&s2->loop)) {
            return HC_OK; /* s2->st may stay NULL: on_assign takes nothing then */
        }
        int64_t backoff = hc_timeouts_backoff_ms(&s2->cfg->timeouts, attempt);
        hc_log_event(HC_LOG_WARN, s2->loop.name, "store_unreachable",
                     HC_LOG_INT("backoff_ms", backoff), HC_LOG_STR("error", errstr));
        hc_stage_loop_pause(&s2->loop, NULL, backoff);
    }
    if (err == HC_OK) {
        hc_log(HC_LOG_INFO, s2->loop.name, "consuming %s into %s store, flush.ms=%lld",
               s2->cfg->topic_partials, hc_store_kind(s2->st), (long long)s2->cfg->flush_ms);
    }
    return err;
}

static hc_err_t on_assign(void *stage, rd_kafka_t *consumer,
                          const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                          size_t errstr_size)
{
    (void)consumer; /* the loop's own, s2->loop.consumer */
    hc_stage2_t *s2 = stage;
    if (!s2->st) {
        return HC_OK; /* stopped before the store was ever reached: take nothing */
    }
    hc_err_t err = assign_from_store(s2, partitions, false, errstr, errstr_size);
    if (err == HC_ERR_TRANSIENT && hc_stage_loop_stop_requested(&s2->loop)) {
        /* asked to stop while the store is down: take none of them (nothing was read or
         * consumed; the next owner reads the store's offsets) and stop cleanly */
        hc_log(HC_LOG_INFO, s2->loop.name, "stopping with the store down: %s", errstr);
        rd_kafka_topic_partition_list_t *none = rd_kafka_topic_partition_list_new(0);
        err = hc_kafka_assign_add(s2->loop.consumer, none, errstr, errstr_size);
        rd_kafka_topic_partition_list_destroy(none);
    }
    return err;
}

/* The assigned partitions that are not in `gone` (a revoke's list): those an incremental
 * revoke leaves. NULL when librdkafka has no assignment to give. */
static rd_kafka_topic_partition_list_t *
staying_partitions(hc_stage2_t *s2, const rd_kafka_topic_partition_list_t *gone)
{
    rd_kafka_topic_partition_list_t *assigned = NULL;
    if (rd_kafka_assignment(s2->loop.consumer, &assigned)) {
        return NULL;
    }
    for (int i = 0; i < gone->cnt; i++) {
        rd_kafka_topic_partition_list_del(assigned, gone->elems[i].topic, gone->elems[i].partition);
    }
    return assigned;
}

/* One attempt to store the open window, also when the assignment was lost: the batch is
 * conditional on the stored offsets, so if another owner moved them it changes nothing. Then
 * the window is gone whatever the store said; the stored offsets did not move, so the next
 * owner re-reads those partials. Never re-assigns the revoked partitions: the loop unassigns
 * them right after.
 *
 * An incremental revoke (group.protocol=consumer) takes some partitions and leaves others. The
 * window spanned them all and is gone now, stored or not, and the partitions that stay may
 * have been paused for a retry or have turned partials away: when a window was open they are
 * re-read from the stored offsets (as after a lost compare-and-set) and resumed, so the next
 * window starts exactly where the store stands. */
static hc_err_t on_revoke(void *stage, const rd_kafka_topic_partition_list_t *partitions, bool lost,
                          char *errstr, size_t errstr_size)
{
    (void)lost;
    hc_stage2_t *s2 = stage;
    hc_err_t err = HC_OK;
    bool had_window = has_window(s2->state);
    if (hc_stage_loop_failed(&s2->loop)) {
        (void)step(s2, HC_STAGE2_EV_FAIL, HC_OK, errstr, errstr_size); /* commit nothing */
    } else {
        err = step(s2, HC_STAGE2_EV_CLOSE, HC_OK, errstr, errstr_size);
        if (err == HC_OK && had_window) {
            err = flush(s2, NULL, errstr, errstr_size);
        }
    }
    hc_metrics_stage_released(s2->metrics, HC_METRICS_STAGE2);
    rd_kafka_topic_partition_list_t *staying = staying_partitions(s2, partitions);
    if (!staying || staying->cnt == 0 || hc_stage_loop_failed(&s2->loop) || err != HC_OK) {
        forget_positions(s2);
    } else {
        for (int i = 0; i < partitions->cnt; i++) {
            part_state_t *ps = part(s2, partitions->elems[i].partition);
            if (ps) {
                ps->assigned = false;
            }
        }
        if (had_window) {
            err = assign_from_store(s2, staying, true, errstr, errstr_size);
            rd_kafka_resume_partitions(s2->loop.consumer, staying);
            if (err == HC_ERR_TRANSIENT && hc_stage_loop_stop_requested(&s2->loop)) {
                forget_positions(s2); /* stopping with the store down: take nothing more */
                err = HC_OK;
            }
        }
    }
    if (staying) {
        rd_kafka_topic_partition_list_destroy(staying);
    }
    return err;
}

static int64_t on_due_ms(void *stage)
{
    hc_stage2_t *s2 = stage;
    if (is_paused(s2->state)) {
        return s2->retry_at_ms;
    }
    return s2->state == HC_STAGE2_OPEN ? s2->window_due_ms : INT64_MAX;
}

/* Decodes a likes.partials record of either format into s2->pack[0..*n), checking every rule
 * that holds without context (partial_check.h): a packed record whole (partial_pack.h), any
 * other value as the one-post JSON record. */
static hc_partial_reason_t decode_record(hc_stage2_t *s2, const rd_kafka_message_t *rkm, size_t *n,
                                         char *why, size_t why_size)
{
    const void *value = rkm->payload;
    size_t len = value ? rkm->len : 0;
    if (hc_pack_is_packed(value, len)) {
        return hc_pack_decode(value, len, s2->pack, n, why, why_size);
    }
    *n = 0;
    hc_partial_reason_t reason = hc_partial_check(value, len, &s2->single, why, why_size);
    if (reason == HC_PARTIAL_OK) {
        const hc_partial_t *pt = &s2->single;
        s2->pack[0] = (hc_pack_entry_t){.post_id = pt->post_id,
                                        .post_id_len = (uint32_t)pt->post_id_len,
                                        .delta = pt->delta,
                                        .events = pt->events,
                                        .ts_min = pt->ts_min,
                                        .ts_max = pt->ts_max};
        *n = 1;
    }
    return reason;
}

/* Whether the record's n posts fit the open window within the batch limit (max.keys, or less
 * while the store is slow: batch_adapt). The table holds max.keys plus one record
 * (HC_PACK_MAX_POSTS), so a record also fits an empty window when the limit is smaller. */
static bool has_room(const hc_stage2_t *s2, size_t n)
{
    size_t count = hc_table_count(s2->tbl);
    if (count == 0 || count + n <= s2->batch_limit) {
        return true; /* fits even if every post is new: no lookups (the usual case) */
    }
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++) {
        fresh += hc_table_find(s2->tbl, s2->pack[i].post_id, s2->pack[i].post_id_len) == NULL;
    }
    return count + fresh <= s2->batch_limit;
}

/* HC_PARTIAL_OVERFLOW when adding the record would take a post's delta or events, or the
 * window's event total, past int64; else HC_PARTIAL_OK with the record's events in *events. A
 * record's post ids are distinct (the decoders refuse a repeat), so each post is checked once
 * against the table. */
static hc_partial_reason_t overflow_check(const hc_stage2_t *s2, size_t n, int64_t *events,
                                          char *why, size_t why_size)
{
    int64_t total = hc_table_events(s2->tbl);
    for (size_t i = 0; i < n; i++) {
        const hc_pack_entry_t *e = &s2->pack[i];
        const hc_table_entry_t *ent = hc_table_find(s2->tbl, e->post_id, e->post_id_len);
        bool over = e->events > INT64_MAX - total; /* total >= 0, events >= 1 */
        if (!over && ent) {
            over = ent->events > INT64_MAX - e->events ||
                   (e->delta > 0 ? ent->delta > INT64_MAX - e->delta
                                 : ent->delta < INT64_MIN - e->delta);
        }
        if (over) {
            hc_errstr_set(why, why_size,
                          "partial: entry %zu: delta %" PRId64 " overflows the window", i,
                          e->delta);
            return HC_PARTIAL_OVERFLOW;
        }
        total += e->events;
    }
    *events = total - hc_table_events(s2->tbl);
    return HC_PARTIAL_OK;
}

/* Whether rkm carries a hotcount-auth signature of its value and window under a key of
 * partials.auth.key.file (core/partial_auth.h). */
static bool is_authentic(const hc_stage2_t *s2, const rd_kafka_message_t *rkm, const void *window,
                         size_t window_len, char *why, size_t why_size)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *auth = NULL;
    size_t auth_len = 0;
    if (rd_kafka_message_headers(rkm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, HC_AUTH_HEADER, &auth, &auth_len) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
        auth = NULL;
        auth_len = 0;
    }
    return hc_auth_verify(&s2->auth, auth, auth_len, window, window_len, rkm->payload,
                          rkm->payload ? rkm->len : 0, why, why_size);
}

static hc_err_t on_message(void *stage, const rd_kafka_message_t *rkm, char *errstr,
                           size_t errstr_size)
{
    hc_stage2_t *s2 = stage;
    part_state_t *ps = part(s2, rkm->partition);
    if (!ps) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    if (!ps->assigned) {
        return HC_OK; /* fetched before a revoke: not ours any more */
    }
    if (is_paused(s2->state)) {
        /* The batch waits for its retry as it is: taking this partial would change it, and
         * skipping it would leave a gap. All are fetched again from `next` once it lands. */
        s2->turned_away++;
        return step(s2, HC_STAGE2_EV_NO_ROOM, HC_OK, errstr, errstr_size);
    }
    size_t n = 0;
    char why[256];
    size_t src_len = 0;
    const void *src_hdr = hc_source_header_of(rkm, &src_len);
    hc_partial_reason_t reason = HC_PARTIAL_OK;
    if (s2->auth_on && !is_authentic(s2, rkm, src_hdr, src_len, why, sizeof(why))) {
        /* before anything of the record is read: a writer without the key decides nothing */
        reason = HC_PARTIAL_UNAUTHENTICATED;
    }
    if (reason == HC_PARTIAL_OK) {
        reason = decode_record(s2, rkm, &n, why, sizeof(why));
    }
    if (reason == HC_PARTIAL_OK) {
        /* a late write of a stale stage-1 transaction: raw offsets counted already. Once per
         * record: every post of a packed record shares its window's header. */
        reason = hc_source_check(s2->src, rkm->partition, src_hdr, src_len, why, sizeof(why));
    }
    int64_t events = 0;
    if (reason == HC_PARTIAL_OK && s2->state == HC_STAGE2_OPEN &&
        (!has_room(s2, n) || (hc_table_count(s2->tbl) > 0 &&
                              overflow_check(s2, n, &events, NULL, 0) != HC_PARTIAL_OK))) {
        /* The window first, so that the record joins the next one whole: when it has no room,
         * and when the record would take the window's event total or a post's sum past int64
         * (issue 25, item 2: one legal record with events 2^63 - 1 voided the rest of its
         * window before, every later record dead-lettered partial_overflow). Only a record that
         * overflows an empty window is dead-lettered (overflow_check below). */
        hc_err_t outcome;
        hc_err_t err;
        if ((err = step(s2, HC_STAGE2_EV_NO_ROOM, HC_OK, errstr, errstr_size)) != HC_OK ||
            (err = flush(s2, &outcome, errstr, errstr_size)) != HC_OK) {
            return err;
        }
        if (outcome != HC_OK) {
            /* waiting for a retry (RETRY_REWIND) or re-read from the store: this record is
             * fetched again either way */
            return HC_OK;
        }
        ps = &s2->parts[rkm->partition];
    }
    if (reason == HC_PARTIAL_OK) {
        /* a post's sum (or the window's event total) would leave int64 even in a window of its
         * own: this record is the bad one */
        reason = overflow_check(s2, n, &events, why, sizeof(why));
    }
    bool counted = false;
    if (reason == HC_PARTIAL_OK) {
        for (size_t i = 0; i < n; i++) {
            const hc_pack_entry_t *e = &s2->pack[i];
            size_t before = hc_table_count(s2->tbl);
            /* neither FULL (has_room, and the table holds max.keys plus one record) nor
             * INVALID (overflow_check) can happen here: only running out of memory */
            hc_err_t err = hc_table_add(s2->tbl, e->post_id, e->post_id_len, e->delta, e->events,
                                        e->ts_min, e->ts_max);
            if (err != HC_OK) {
                hc_errstr_set(errstr, errstr_size, "aggregation table: %s", hc_err_name(err));
                return HC_ERR_FATAL;
            }
            if (add_source(s2, rkm, e, before) != HC_OK) {
                hc_errstr_set(errstr, errstr_size, "out of memory");
                return HC_ERR_FATAL;
            }
        }
        hc_err_t err = hc_source_accept(s2->src, rkm->partition, src_hdr, src_len);
        if (err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            return err;
        }
        counted = true;
        s2->window_events += events;
    }
    if (!counted) {
        /* Untrusted input: a record no stage 1 wrote (a bug or a foreign writer) goes to the
         * dead-letter topic with its reason and source, and its offset moves with the window
         * like any other's; it never stops the stage. */
        hc_log(HC_LOG_WARN, s2->loop.name, "bad partial at %s/%" PRId32 "/%" PRId64 ": %s",
               rd_kafka_topic_name(rkm->rkt), rkm->partition, rkm->offset, why);
        hc_err_t err =
            dead_letter(s2, rkm->partition, rkm->offset, rkm->key, rkm->key ? rkm->key_len : 0,
                        rkm->payload, rkm->payload ? rkm->len : 0, reason, errstr, errstr_size);
        if (err == HC_ERR_TRANSIENT) {
            /* stopping while Kafka is down: the record is not in the dead-letter topic, so the
             * window may not move past it; take nothing more from this partition (the window's
             * offsets end before the record, the next run reads it again) */
            ps->assigned = false;
            return HC_OK;
        }
        if (err != HC_OK) {
            return err;
        }
    }
    hc_err_t err = step(s2, HC_STAGE2_EV_PARTIAL, HC_OK, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    s2->window_partials += counted ? (int64_t)n : 0; /* posts, as stage 1 counts them */
    s2->window_records++;
    ps->touched = true;
    ps->next = rkm->offset + 1;
    return HC_OK;
}

static hc_err_t on_tick(void *stage, int64_t now_ms, bool idle, char *errstr, size_t errstr_size)
{
    (void)idle;
    hc_stage2_t *s2 = stage;
    hc_err_t err = HC_OK;
    bool due = is_paused(s2->state) ? now_ms >= s2->retry_at_ms
                                    : s2->state == HC_STAGE2_OPEN && now_ms >= s2->window_due_ms;
    if (due && (err = flush(s2, NULL, errstr, errstr_size)) != HC_OK) {
        return err;
    }
    if ((err = check_store(s2, now_ms, errstr, errstr_size)) != HC_OK) {
        return err;
    }
    if (s2->changelog) {
        if (hc_changelog_repair_due(s2->changelog, hc_now_ms())) {
            err = repair_changelog(s2, errstr, errstr_size);
        } else {
            hc_changelog_poll(s2->changelog, s2->loop.consumer);
        }
    }
    return err;
}

/* A clean stop stores the open window once; if the store is down it is dropped and the next
 * run re-reads those partials from the stored offsets. A changelog repair still wanted (its
 * last try failed, or it waits out its back-off) gets one try, without the back-off: a stage
 * stopped after a broker or store outage would otherwise leave its last totals unpublished
 * until the next owner of its partitions repairs them, which may be the next deployment.
 * Its calls are bounded like any repair's, and stop.timeout.ms bounds the whole stop. */
static hc_err_t on_stopping(void *stage, hc_err_t err, char *errstr, size_t errstr_size)
{
    hc_stage2_t *s2 = stage;
    if (err != HC_OK) {
        (void)step(s2, HC_STAGE2_EV_FAIL, HC_OK, errstr, errstr_size); /* keeps errstr */
        return err;
    }
    if (has_window(s2->state)) {
        err = step(s2, HC_STAGE2_EV_CLOSE, HC_OK, errstr, errstr_size);
        if (err == HC_OK) {
            err = flush(s2, NULL, errstr, errstr_size);
        }
    }
    if (err == HC_OK && s2->changelog && hc_changelog_repair_wanted(s2->changelog)) {
        hc_log(HC_LOG_INFO, s2->loop.name, "changelog repair wanted at the stop: one try");
        err = repair_changelog(s2, errstr, errstr_size);
    }
    return err;
}

/* A partition that stands still (stage_loop.h, hotcount/progress.h). What it waits on decides:
 * a retention gap, a batch waiting for its retry (the store's outage or throttling: the retry
 * is the recovery) and a window holding its partials (it closes within flush.ms) are outside
 * causes or already on their way; otherwise nothing of it is in flight, so its stored offset is
 * read again, its fetch sought there and resumed: whatever left it paused, unsought or with a
 * stale position, it fetches from where the store stands. */
static hc_err_t on_recover(void *stage, int32_t partition, char *why, size_t why_size)
{
    hc_stage2_t *s2 = stage;
    part_state_t *ps = partition < s2->parts_cap ? &s2->parts[partition] : NULL;
    if (ps && ps->gap) {
        hc_errstr_set(why, why_size, "held back: its partials are past retention");
        return HC_ERR_TRANSIENT;
    }
    if (is_paused(s2->state)) {
        hc_errstr_set(why, why_size, "a store batch waits for its retry: %s", s2->store_error);
        return HC_ERR_TRANSIENT;
    }
    if (ps && ps->touched) {
        hc_errstr_set(why, why_size, "in the open window, which closes within flush.ms");
        return HC_ERR_TRANSIENT;
    }
    if (!s2->st) {
        hc_errstr_set(why, why_size, "the store was never reached");
        return HC_ERR_TRANSIENT;
    }
    if (assignment_lost(s2)) { /* a zombie back from a pause: the group moved on */
        hc_errstr_set(why, why_size, "assignment lost: waiting for the next one");
        return HC_ERR_TRANSIENT;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, s2->cfg->topic_partials, partition);
    hc_err_t err = assign_from_store(s2, list, true, why, why_size);
    if (err == HC_OK) {
        rd_kafka_resume_partitions(s2->loop.consumer, list);
    }
    rd_kafka_topic_partition_list_destroy(list);
    if (err == HC_ERR_TRANSIENT && hc_stage_loop_stop_requested(&s2->loop)) {
        return HC_ERR_TRANSIENT; /* stopping in a store outage: nothing more to do */
    }
    return err;
}

static void on_describe(void *stage, int32_t partition, char *buf, size_t size)
{
    hc_stage2_t *s2 = stage;
    const part_state_t *ps = partition < s2->parts_cap ? &s2->parts[partition] : NULL;
    snprintf(buf, size, "%s%s%s", hc_stage2_state_name(s2->state),
             ps && ps->gap       ? ", retention gap"
             : ps && ps->touched ? ", in the window"
                                 : "",
             is_paused(s2->state) ? ", paused for the store" : "");
}

static const hc_stage_loop_ops_t stage2_loop_ops = {
    .start = on_start,
    .assign = on_assign,
    .revoke = on_revoke,
    .due_ms = on_due_ms,
    .message = on_message,
    .tick = on_tick,
    .stopping = on_stopping,
    .recover = on_recover,
    .describe = on_describe,
};

/* ---- lifecycle ---- */

hc_err_t hc_stage2_new_ops(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                           const struct hc_store_ops *store_ops, hc_stage2_t **s2p, char *errstr,
                           size_t errstr_size)
{
    *s2p = NULL;
    hc_err_t err = HC_ERR_INVALID;
    hc_stage2_t *s2 = calloc(1, sizeof(*s2));
    if (!s2) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    s2->last_flush_wall_ms = INT64_MIN;
    s2->cfg = cfg;
    s2->metrics = metrics;
    s2->state = HC_STAGE2_IDLE;
    err = hc_partials_key_load(cfg, &s2->auth, &s2->auth_on, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    if (!s2->auth_on) {
        hc_log(HC_LOG_WARN, "stage2",
               "partials.auth.key.file is not set: any well-formed record in %s counts, whoever "
               "wrote it (docs/FORMATS.md, \"Authenticated partials\")",
               cfg->topic_partials);
    }
    err = HC_ERR_INVALID;
    s2->tbl = hc_table_new((size_t)cfg->max_keys + HC_PACK_MAX_POSTS);
    s2->src = hc_source_check_new();
    s2->pack = malloc(HC_PACK_MAX_POSTS * sizeof(*s2->pack));
    if (!s2->tbl || !s2->src || !s2->pack) {
        hc_errstr_set(errstr, errstr_size, "out of memory for max.keys=%lld",
                      (long long)cfg->max_keys);
        goto fail;
    }
    s2->store_ops = store_ops;
    /* A slow start: the first batches are a few records, doubling while the store keeps up,
     * so that a backlog's first batch against a slow store is not max.keys posts that take
     * minutes before the limit has learned anything (a DynamoDB drain stood still for its first
     * minute that way). */
    s2->batch_floor =
        (size_t)cfg->max_keys < HC_PACK_MAX_POSTS ? (size_t)cfg->max_keys : HC_PACK_MAX_POSTS;
    s2->batch_limit =
        (size_t)cfg->max_keys < BATCH_START_POSTS ? (size_t)cfg->max_keys : BATCH_START_POSTS;
    /* a batch should take at most a quarter of the store's batch bound (and never less than
     * a window's length) */
    int64_t target = hc_timeouts_of(cfg, &(hc_timeouts_t){0})->store_batch_ms / 4;
    s2->batch_target_ms = target > cfg->flush_ms ? target : cfg->flush_ms;
    hc_metric_set(metrics->store_batch_limit, (int64_t)s2->batch_limit);
    err = open_store(s2, errstr, errstr_size);
    if (err == HC_ERR_TRANSIENT) {
        /* the store is down: on_start waits for it */
        hc_log(HC_LOG_WARN, "stage2", "store unreachable (%s): stage 2 will wait for it", errstr);
        err = HC_OK;
    }
    if (err != HC_OK) {
        goto fail;
    }
    hc_stage_loop_opts_t lopts = {.kind = HC_METRICS_STAGE2,
                                  .instance_id = instance_id,
                                  .role = HC_KAFKA_ROLE_STAGE2_CONSUMER,
                                  .group_id = cfg->group_stage2,
                                  .topic = cfg->topic_partials,
                                  .ops = &stage2_loop_ops,
                                  .stage = s2};
    err = hc_stage_loop_init(&s2->loop, cfg, metrics, &lopts, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    err = hc_changelog_new(cfg, s2->loop.name, s2->loop.instance_id, &s2->changelog, errstr,
                           errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    err =
        hc_hotkeys_pub_new(cfg, s2->loop.name, metrics, NULL, NULL, &s2->hot, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    *s2p = s2;
    return HC_OK;

fail:
    hc_stage2_destroy(s2);
    return err;
}

hc_err_t hc_stage2_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage2_t **s2p, char *errstr, size_t errstr_size)
{
    return hc_stage2_new_ops(cfg, instance_id, metrics, NULL, s2p, errstr, errstr_size);
}

int64_t hc_stage2_heartbeat_ms(const hc_stage2_t *s2)
{
    return hc_stage_loop_heartbeat_ms(&s2->loop);
}

int hc_stage2_assigned(const hc_stage2_t *s2)
{
    return hc_stage_loop_assigned(&s2->loop);
}

size_t hc_stage2_batch_limit(const hc_stage2_t *s2)
{
    return s2->batch_limit;
}

rd_kafka_t *hc_stage2_consumer(hc_stage2_t *s2)
{
    return s2->loop.consumer;
}

int64_t hc_stage2_turned_away(const hc_stage2_t *s2)
{
    return s2->turned_away;
}

void hc_stage2_destroy(hc_stage2_t *s2)
{
    if (!s2) {
        return;
    }
    hc_stage_loop_fini(&s2->loop);
    hc_changelog_destroy(s2->changelog); /* after the consumer: its marks are committed */
    hc_hotkeys_pub_destroy(s2->hot);
    if (s2->dlq) {
        rd_kafka_flush(s2->dlq, (int)s2->cfg->timeouts.drain_ms);
        rd_kafka_destroy(s2->dlq);
    }
    hc_window_log_fini(&s2->sources);
    free(s2->refused);
    free(s2->map);
    free(s2->totals);
    hc_store_close(s2->st);
    hc_table_destroy(s2->tbl);
    free(s2->pack);
    hc_source_check_destroy(s2->src);
    hc_auth_keyring_wipe(&s2->auth);
    free(s2->parts);
    free(s2->deltas);
    free(s2->offsets);
    free(s2);
}

hc_err_t hc_stage2_run(hc_stage2_t *s2, const atomic_bool *stop, char *errstr, size_t errstr_size)
{
    return hc_stage_loop_run(&s2->loop, stop, errstr, errstr_size);
}
