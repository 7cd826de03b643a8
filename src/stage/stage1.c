/* Stage 1: likes.raw -> per-post window sums -> one Kafka transaction per window.
 *
 * A window opens with the first message after the previous commit (no empty transactions) and
 * closes after flush.ms, when the table is full, on revocation, or on shutdown. Closing it
 * produces one partial per post, then sends the window's offsets to the transaction and commits.
 * The dead-letter records are produced into the same transaction as their messages arrive, so a
 * window's partials, its DLQ records and its offsets become visible together or not at all
 * (the records: docs/FORMATS.md, "Partials", "Dead letters", "Manifests").
 *
 * Offsets are tracked here per partition from the messages actually processed, not with
 * rd_kafka_position(): when the table fills, the message that did not fit is already returned
 * by poll but must not be part of the committed window. The same ranges go, when topic.manifest
 * is set, into one manifest record per window inside its transaction (hotcount/manifest.h), so
 * a checker can prove that the committed windows tile every raw partition exactly once.
 *
 * The window is a state machine (stage1_impl.h, in the shape of fsm.h): every step is an event
 * whose result's class picks the next state in hc_stage1_next, and act() then does what the new
 * state asks for, in one place: count a commit or an abort, abort an unusable transaction,
 * replace the producer after an aborted or unknown-outcome transaction (docs/RELIABILITY.md,
 * "Late writes"), reset the window. Every partial carries its window's raw ranges
 * (hotcount/source_check.h). The consumer, its rebalances, the heartbeat and the error latch are
 * the shared loop's (hotcount/stage_loop.h); this file plugs into it with the hooks below. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsm.h"
#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/hotkeys.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/manifest.h"
#include "hotcount/offset.h"
#include "hotcount/partial.h"
#include "hotcount/partial_pack.h"
#include "hotcount/partials_key.h"
#include "hotcount/source_check.h"
#include "hotcount/stage.h"
#include "hotcount/stage_loop.h"
#include "hotcount/start_offset.h"
#include "hotcount/table.h"
#include "hotcount/timeouts.h"
#include "hotcount/window.h"
#include "stage1_impl.h"

/* messages polled between two additions to metrics->events_consumed */
#define PUBLISH_EVERY 1024

/* A dead letter that the producer refuses as too large keeps this much of the original key
 * (a producer's key is "<post_id>#<salt>", at most ~270 bytes): with event.max.bytes of value
 * and the headers it stays within the 4096 bytes that the configuration check keeps free
 * beside event.max.bytes in message.max.bytes. */
#define DLQ_KEY_MAX 1024
/* What a produced record takes beside its key, value and headers' bytes: librdkafka counts the
 * record's framing (length, attributes, varints: well under 100 bytes) against
 * message.max.bytes; kept generous. */
#define PACK_RECORD_FRAMING 256
/* A replayed record's mark (hotcount-replayed-from: "<dlq topic>/<partition>/<offset>") is
 * copied into its dead letter up to this many bytes; with DLQ_KEY_MAX and the other headers
 * still within those 4096 bytes. */
#define DLQ_REPLAY_MARK_MAX 256

/* The bound on one committed-offset read at an assignment or a recovery (read_starts). */
#define START_READ_MS 1000

struct hc_stage1 {
    hc_stage_loop_t loop;   /* owned: the consumer, heartbeat, latch; loop.name for logs */
    hc_auth_keyring_t auth; /* partials.auth.key.file: signs every partial (auth_on) */
    bool auth_on;
    const hc_config_t *cfg; /* borrowed */
    hc_metrics_t *metrics;  /* borrowed */
    rd_kafka_t *producer;   /* owned, transactional */
    hc_table_t *tbl;        /* owned */
    hc_hotkeys_t *hk;       /* owned: the window's hottest posts */
    hc_manifest_t win;      /* owned: offsets this window consumed per raw partition */
    char txn_id[300];       /* <group.stage1>-<instance>: the producer's transactional.id */
    int64_t incarnation_ms; /* wall clock at hc_stage1_new, names this process in manifests */
    int64_t window_seq;     /* windows begun by this incarnation */
    int64_t unpublished;    /* messages polled but not yet added to metrics->events_consumed */
    hc_stage1_state_t state;
    hc_stage1_observer_fn observer; /* NULL: none */
    void *observer_opaque;
    int64_t window_start_ms;
    int64_t window_due_ms;   /* when the open window closes (window.h) */
    int64_t commit_start_ms; /* when its close began (the transaction-seconds histogram) */
    int64_t window_ok;
    int64_t window_invalid;
    int64_t window_by_reason[HC_EVENT_REASON_COUNT];
    char *window_hdr; /* owned: the window's hotcount-window value (hotcount/source_check.h) */
    size_t window_hdr_cap;
    /* Packed partials (partials.format=packed): the partials topic's partition count as last
     * read (0: read it at the next commit; reset with every new producer) and when, and owned
     * scratch: the window's entries grouped by partition, each partition's first index there
     * (pack_parts_cap + 1 long), and one record's bytes (HC_PACK_MAX_BYTES). */
    int32_t partials_parts;
    int64_t partials_parts_at_ms;
    const hc_table_entry_t **pack_ents;
    int32_t *pack_of; /* each table entry's partition */
    size_t pack_cap;
    size_t *pack_start;
    int32_t pack_parts_cap;
    uint8_t *pack_buf;
    int64_t window_records; /* likes.partials records the committing window produced */
};

/* ---- the state machine ------------------------------------------------------------------- */

#define S(x) HC_STAGE1_##x
#define EV(x) HC_STAGE1_EV_##x

/* The table of stage1_impl.h, row for row. */
static const hc_fsm_edge_t edges[] = {
    {S(IDLE), EV(BEGIN), HC_OK, S(OPEN)},
    {S(IDLE), EV(REVOKE), HC_OK, S(IDLE)},
    {S(OPEN), EV(PRODUCE), HC_OK, S(OPEN)},
    {S(OPEN), EV(PRODUCE), HC_ERR_ABORT, S(ABORTING)},
    {S(OPEN), EV(COMMIT), HC_OK, S(IDLE)},
    {S(OPEN), EV(COMMIT), HC_ERR_ABORT, S(ABORTING)},
#ifdef HC_MUTANT_NO_ENDTXN_DEFENCE
    /* Mutant build (tests/unit/test_stage1_fsm.c, test_stage1_mock.c), never the product: the
     * producer outlives an aborted transaction, and a commit or abort of unknown outcome stops
     * the stage, as before the late-write defence. */
    {S(ABORTING), EV(ABORT), HC_OK, S(REWINDING)},
#else
    /* the commit's retries ran out: it may still land; only a new epoch fences it */
    {S(OPEN), EV(COMMIT), HC_ERR_TRANSIENT, S(RENEWING)},
    /* aborted, or of unknown outcome (the abort's retries ran out): either way writes of this
     * epoch may still be on the way */
    {S(ABORTING), EV(ABORT), HC_OK, S(RENEWING)},
    {S(ABORTING), EV(ABORT), HC_ERR_TRANSIENT, S(RENEWING)},
#endif
    {S(OPEN), EV(LOSE), HC_OK, S(ABORTING)},
    {S(RENEWING), EV(RENEW), HC_OK, S(REWINDING)},
    {S(REWINDING), EV(REWIND), HC_OK, S(IDLE)},
    {S(REWINDING), EV(REWIND), HC_ERR_TRANSIENT, S(REWINDING)},
    {S(REWINDING), EV(REVOKE), HC_OK, S(IDLE)},
};

static const char *const state_names[HC_STAGE1_STATE_COUNT] = {"idle",      "open",     "aborting",
                                                               "rewinding", "renewing", "failed"};
static const char *const event_names[HC_STAGE1_EVENT_COUNT] = {
    "begin", "produce", "commit", "lose", "abort", "rewind", "revoke", "renew"};

static const hc_fsm_t fsm = {.name = "stage 1 window",
                             .edges = edges,
                             .edge_count = sizeof(edges) / sizeof(edges[0]),
                             .state_names = state_names,
                             .state_count = HC_STAGE1_STATE_COUNT,
                             .event_names = event_names,
                             .event_count = HC_STAGE1_EVENT_COUNT,
                             .failed = HC_STAGE1_FAILED};

#undef S
#undef EV

hc_stage1_state_t hc_stage1_next(hc_stage1_state_t from, hc_stage1_event_t ev, hc_err_t outcome,
                                 char *errstr, size_t errstr_size)
{
    return (hc_stage1_state_t)hc_fsm_next(&fsm, (int)from, (int)ev, outcome, errstr, errstr_size);
}

const char *hc_stage1_state_name(hc_stage1_state_t state)
{
    return hc_fsm_state_name(&fsm, (int)state);
}

const char *hc_stage1_event_name(hc_stage1_event_t ev)
{
    return hc_fsm_event_name(&fsm, (int)ev);
}

/* ---- creation ---------------------------------------------------------------------------- */

static const hc_stage_loop_ops_t stage1_ops; /* the hooks, at the bottom */

hc_err_t hc_stage1_new(const hc_config_t *cfg, const char *instance_id, hc_metrics_t *metrics,
                       hc_stage1_t **s1p, char *errstr, size_t errstr_size)
{
    *s1p = NULL;
    hc_stage1_t *s1 = calloc(1, sizeof(*s1));
    if (!s1) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    s1->cfg = cfg;
    s1->metrics = metrics;
    s1->state = HC_STAGE1_IDLE;
    hc_manifest_init(&s1->win);
    s1->incarnation_ms = hc_wall_ms();
    hc_err_t err = hc_partials_key_load(cfg, &s1->auth, &s1->auth_on, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    if (!s1->auth_on) {
        hc_log(HC_LOG_WARN, "stage1",
               "partials.auth.key.file is not set: partials go out unsigned, and anyone who may "
               "write %s can make stage 2 count (docs/FORMATS.md, \"Authenticated partials\")",
               cfg->topic_partials);
    }
    err = HC_ERR_FATAL;
    s1->tbl = hc_table_new((size_t)cfg->max_keys);
    if (!s1->tbl) {
        hc_errstr_set(errstr, errstr_size, "out of memory for max.keys=%lld",
                      (long long)cfg->max_keys);
        goto fail;
    }
    s1->hk = hc_hotkeys_new(HC_HOTKEYS_DEFAULT_K, (double)cfg->hotkeys_enter_rate,
                            (double)cfg->hotkeys_leave_rate);
    if (!s1->hk) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        goto fail;
    }
    hc_stage_loop_opts_t lopts = {.kind = HC_METRICS_STAGE1,
                                  .instance_id = instance_id,
                                  .role = HC_KAFKA_ROLE_STAGE1_CONSUMER,
                                  .group_id = cfg->group_stage1,
                                  .topic = cfg->topic_raw,
                                  .ops = &stage1_ops,
                                  .stage = s1};
    err = hc_stage_loop_init(&s1->loop, cfg, metrics, &lopts, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail;
    }
    snprintf(s1->txn_id, sizeof(s1->txn_id), "%s-%s", cfg->group_stage1, s1->loop.instance_id);
    hc_kafka_opts_t popts = {.transactional_id = s1->txn_id};
    s1->producer = hc_kafka_new(cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &popts, errstr, errstr_size);
    if (!s1->producer) {
        err = HC_ERR_INVALID;
        goto fail;
    }
    hc_stage_loop_watch(&s1->loop, s1->producer);
    *s1p = s1;
    return HC_OK;

fail:
    hc_stage1_destroy(s1);
    return err;
}

int64_t hc_stage1_heartbeat_ms(const hc_stage1_t *s1)
{
    return hc_stage_loop_heartbeat_ms(&s1->loop);
}

int hc_stage1_assigned(const hc_stage1_t *s1)
{
    return hc_stage_loop_assigned(&s1->loop);
}

void hc_stage1_observe(hc_stage1_t *s1, hc_stage1_observer_fn fn, void *opaque)
{
    s1->observer = fn;
    s1->observer_opaque = opaque;
}

void hc_stage1_destroy(hc_stage1_t *s1)
{
    if (!s1) {
        return;
    }
    hc_stage_loop_fini(&s1->loop);
    if (s1->producer) {
        rd_kafka_destroy(s1->producer);
    }
    hc_table_destroy(s1->tbl);
    hc_hotkeys_destroy(s1->hk);
    hc_manifest_fini(&s1->win);
    hc_auth_keyring_wipe(&s1->auth);
    free(s1->window_hdr);
    free(s1->pack_ents);
    free(s1->pack_of);
    free(s1->pack_start);
    free(s1->pack_buf);
    free(s1);
}

/* ---- the window's contents --------------------------------------------------------------- */

static void window_reset(hc_stage1_t *s1)
{
    hc_table_clear(s1->tbl);
    hc_manifest_clear(&s1->win);
    s1->window_ok = 0;
    s1->window_invalid = 0;
    memset(s1->window_by_reason, 0, sizeof(s1->window_by_reason));
}

/* A message this window processed. An offset that does not move forwards would be counted
 * twice in one window: stop rather than commit it. */
static hc_err_t record_offset(hc_stage1_t *s1, const rd_kafka_message_t *rkm, char *errstr,
                              size_t errstr_size)
{
    hc_err_t err = hc_manifest_record(&s1->win, rkm->partition, rkm->offset);
    if (err == HC_ERR_INVALID) {
        const hc_manifest_range_t *r = hc_manifest_range(&s1->win, rkm->partition);
        hc_errstr_set(errstr, errstr_size,
                      "%s/%" PRId32 ": offset %" PRId64 " after %" PRId64 " in one window",
                      s1->cfg->topic_raw, rkm->partition, rkm->offset,
                      r ? r->next - 1 : HC_MANIFEST_NONE);
        return HC_ERR_FATAL;
    }
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
    }
    return err;
}

/* A partial's headers: its window (hdr_len 0: a window without a range has no event, hence no
 * partial), and with partials.auth.key.file its signature over the value and the window
 * (core/partial_auth.h). NULL when it has neither. */
static rd_kafka_headers_t *partial_headers(hc_stage1_t *s1, size_t hdr_len, const void *value,
                                           size_t len)
{
    if (hdr_len == 0 && !s1->auth_on) {
        return NULL;
    }
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(2);
    if (hdr_len > 0) {
        rd_kafka_header_add(hdrs, HC_SOURCE_HEADER, -1, s1->window_hdr, (ssize_t)hdr_len);
    }
    if (s1->auth_on) {
        char sig[HC_AUTH_VALUE_MAX + 1];
        size_t n =
            hc_auth_sign(&s1->auth, hdr_len > 0 ? s1->window_hdr : NULL, hdr_len, value, len, sig);
        rd_kafka_header_add(hdrs, HC_AUTH_HEADER, -1, sig, (ssize_t)n);
    }
    return hdrs;
}

/* Produces into the open transaction, waiting while the local queue is full. timestamp_ms: the
 * record's timestamp, 0 for the time of the call (a window's records share the window's close
 * time, which also spares librdkafka a clock read per partial). */
/* Into partition, or by the key with RD_KAFKA_PARTITION_UA (librdkafka's partitioner). */
static hc_err_t produce_to(hc_stage1_t *s1, const char *topic, int32_t partition, const void *key,
                           size_t key_len, const void *value, size_t value_len,
                           int64_t timestamp_ms, rd_kafka_headers_t *hdrs, char *errstr,
                           size_t errstr_size)
{
    for (;;) {
        rd_kafka_resp_err_t err;
        if (hdrs) {
            err = rd_kafka_producev(
                s1->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)value, value_len),
                RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
        } else {
            err = rd_kafka_producev(s1->producer, RD_KAFKA_V_TOPIC(topic),
                                    RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key, key_len),
                                    RD_KAFKA_V_VALUE((void *)value, value_len),
                                    RD_KAFKA_V_TIMESTAMP(timestamp_ms),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        }
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            return HC_OK; /* the headers now belong to the message */
        }
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(s1->producer, 50);
            continue;
        }
        if (hdrs) {
            rd_kafka_headers_destroy(hdrs);
        }
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
            hc_errstr_set(errstr, errstr_size, "%s", rd_kafka_err2str(err));
            return HC_ERR_INVALID;
        }
        if (hc_kafka_fatal_check(s1->producer, errstr, errstr_size) != HC_OK) {
            return HC_ERR_FATAL;
        }
        /* e.g. __STATE: the transaction already failed; the window must be aborted */
        hc_errstr_set(errstr, errstr_size, "produce to %s: %s", topic, rd_kafka_err2str(err));
        return HC_ERR_ABORT;
    }
}

static hc_err_t produce(hc_stage1_t *s1, const char *topic, const void *key, size_t key_len,
                        const void *value, size_t value_len, int64_t timestamp_ms,
                        rd_kafka_headers_t *hdrs, char *errstr, size_t errstr_size)
{
    return produce_to(s1, topic, RD_KAFKA_PARTITION_UA, key, key_len, value, value_len,
                      timestamp_ms, hdrs, errstr, errstr_size);
}

/* The message's dead letter into the open transaction. Any message has one, whatever its key,
 * value or headers (its headers are not copied, but for a replay's mark, below): when the
 * producer refuses it as too large,
 * the key and the value are cut to DLQ_KEY_MAX and event.max.bytes bytes, each cut marked with
 * a header naming the original length, and should even that be refused (a message.max.bytes
 * far below the default), to nothing; hotcount-source still points at the whole message in
 * likes.raw. HC_ERR_FATAL only when not even that can be sent: then no message could be. */
static hc_err_t produce_dlq(hc_stage1_t *s1, const rd_kafka_message_t *rkm,
                            hc_event_reason_t reason, char *errstr, size_t errstr_size)
{
    char source[400];
    snprintf(source, sizeof(source), "%s/%" PRId32 "/%" PRId64, rd_kafka_topic_name(rkm->rkt),
             rkm->partition, rkm->offset);
    size_t value_len = rkm->payload ? rkm->len : 0;
    size_t key_len = rkm->key ? rkm->key_len : 0;
    const size_t value_cap[] = {value_len, (size_t)s1->cfg->event_max_bytes, 0};
    const size_t key_cap[] = {key_len, DLQ_KEY_MAX, 0};
    /* A record `hotcount dlq replay` put back into likes.raw carries hotcount-replayed-from;
     * failing again, its dead letter keeps the mark so that no replay picks it up a second time
     * (no loop). Only the mark is copied, cut to DLQ_REPLAY_MARK_MAX: anyone can write headers. */
    rd_kafka_headers_t *in = NULL;
    const void *mark = NULL;
    size_t mark_len = 0;
    if (rd_kafka_message_headers(rkm, &in) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(in, HC_DLQ_HDR_REPLAYED_FROM, &mark, &mark_len) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
        mark = NULL;
    }
    mark_len = mark_len < DLQ_REPLAY_MARK_MAX ? mark_len : DLQ_REPLAY_MARK_MAX;
    for (int attempt = 0; attempt < 3; attempt++) {
        size_t vlen = value_len < value_cap[attempt] ? value_len : value_cap[attempt];
        size_t klen = key_len < key_cap[attempt] ? key_len : key_cap[attempt];
        rd_kafka_headers_t *hdrs = hc_kafka_dead_letter_headers(
            hc_event_reason_str(reason), source, mark, mark_len, value_len, vlen, key_len, klen);
        hc_err_t err = produce(s1, s1->cfg->topic_dlq, rkm->key, klen, rkm->payload, vlen, 0, hdrs,
                               errstr, errstr_size);
        if (err != HC_ERR_INVALID) {
            return err;
        }
    }
    char why[256];
    snprintf(why, sizeof(why), "%s", errstr ? errstr : "");
    hc_errstr_set(errstr, errstr_size, "dead letter of %s refused even empty: %s", source, why);
    return HC_ERR_FATAL;
}

/* The window's hottest posts to the metrics, and one log line per post crossing the
 * hotkeys.enter.rate / hotkeys.leave.rate thresholds. The sketch gets each post of the table
 * once, with its exact count: per event it cost a second hash and lookup of every post id
 * (40 % of the hot path in one benchmark run). */
static void publish_hot_keys(hc_stage1_t *s1, int64_t now)
{
    hc_hotkey_t top[HC_METRICS_HOT_KEYS];
    size_t n = 0;
    size_t entries = hc_table_count(s1->tbl);
    for (size_t i = 0; i < entries; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s1->tbl, i);
        hc_hotkeys_offer_n(s1->hk, ent->post_id, ent->post_id_len, ent->events);
    }
    int64_t window_ms = now - s1->window_start_ms;
    hc_hotkeys_window_end(s1->hk, window_ms > 0 ? window_ms : 1, top, HC_METRICS_HOT_KEYS, &n);
    hc_metrics_publish_hot_keys(s1->metrics, s1->loop.name, top, n, now);
    size_t nt = 0;
    const hc_hotkey_transition_t *tr = hc_hotkeys_transitions(s1->hk, &nt);
    for (size_t i = 0; i < nt; i++) {
        hc_log(HC_LOG_INFO, s1->loop.name, "post %.*s %s: %.0f likes/s", (int)tr[i].post_id_len,
               tr[i].post_id, tr[i].change == HC_HOTKEY_ENTER ? "is hot" : "cooled down",
               tr[i].events_per_second);
    }
}

/* The window's manifest record into its transaction (topic.manifest set). */
static hc_err_t produce_manifest(hc_stage1_t *s1, int64_t timestamp_ms, char *errstr,
                                 size_t errstr_size)
{
    /* From the table, not from what was produced: a partial that went missing on the way shows
     * as a difference between the committed partials and the committed manifests. */
    size_t n = hc_table_count(s1->tbl);
    int64_t likes = 0;
    for (size_t i = 0; i < n; i++) {
        likes += hc_table_entry(s1->tbl, i)->delta;
    }
    hc_manifest_meta_t meta = {.transactional_id = s1->txn_id,
                               .instance_id = s1->loop.instance_id,
                               .incarnation_ms = s1->incarnation_ms,
                               .window = s1->window_seq,
                               .topic = s1->cfg->topic_raw,
                               .events = s1->window_ok,
                               .invalid = s1->window_invalid,
                               .partials = (int64_t)n,
                               .likes = likes};
    char *buf = NULL;
    size_t len = 0;
    if (hc_manifest_encode(&s1->win, &meta, &buf, &len) != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hc_err_t err = produce(s1, s1->cfg->topic_manifest, s1->txn_id, strlen(s1->txn_id), buf, len,
                           timestamp_ms, NULL, errstr, errstr_size);
    free(buf);
    return err == HC_ERR_INVALID ? HC_ERR_FATAL : err;
}

/* ---- transactional calls ----------------------------------------------------------------- */

typedef enum txn_call { TXN_SEND_OFFSETS, TXN_COMMIT, TXN_ABORT } txn_call_t;

/* One transactional step, retried while librdkafka calls it retriable (a timed-out commit goes
 * on in the background: calling it again is how to wait for it), backing off between attempts.
 * Each call is bounded by timeouts.txn_call_ms, all of them by txn_timeout_ms: past it the
 * coordinator aborts the transaction anyway. Returns HC_OK, HC_ERR_ABORT, HC_ERR_FATAL, or
 * HC_ERR_TRANSIENT when the retries ran out. */
static hc_err_t txn_call(hc_stage1_t *s1, txn_call_t call,
                         const rd_kafka_topic_partition_list_t *offsets, char *errstr,
                         size_t errstr_size)
{
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    int timeout = (int)t->txn_call_ms;
    int64_t give_up_at = hc_now_ms() + t->txn_timeout_ms;
    for (int attempt = 0;; attempt++) {
        rd_kafka_error_t *error = NULL;
        if (call == TXN_SEND_OFFSETS) {
            /* fresh group metadata for each attempt (KAFKA-FACTS: it carries the generation) */
            rd_kafka_consumer_group_metadata_t *cgmd =
                rd_kafka_consumer_group_metadata(s1->loop.consumer);
            error = rd_kafka_send_offsets_to_transaction(s1->producer, offsets, cgmd, timeout);
            rd_kafka_consumer_group_metadata_destroy(cgmd);
        } else if (call == TXN_COMMIT) {
            error = rd_kafka_commit_transaction(s1->producer, timeout);
        } else {
            error = rd_kafka_abort_transaction(s1->producer, timeout);
        }
        hc_err_t err = hc_kafka_txn_error_take(s1->producer, error, errstr, errstr_size);
        if (err == HC_ERR_FATAL && hc_kafka_fatal_renewable(s1->producer)) {
            /* The transaction's outcome is as unknown as after a commit whose retries ran out,
             * and the cure is the same: a new producer (RENEWING), whose new epoch aborts
             * what this one left open; then the rewind reads the committed offsets. A
             * stage-1 process frozen past its session met it at its abort (RELIABILITY.md, F4). */
            hc_log(HC_LOG_WARN, s1->loop.name, "the producer is unusable, not fenced: %s", errstr);
            return HC_ERR_TRANSIENT;
        }
        if (err != HC_ERR_TRANSIENT || hc_now_ms() >= give_up_at) {
            return err;
        }
        int64_t pause = hc_timeouts_backoff_ms(t, attempt);
        hc_log(HC_LOG_WARN, s1->loop.name, "retrying in %" PRId64 " ms: %s", pause, errstr);
        hc_stage_loop_pause(&s1->loop, s1->producer, pause);
    }
}

/* init_transactions on s1->producer, retried while retriable (txn_init_attempts, backing off):
 * HC_OK, or the last error's class. */
static hc_err_t init_producer(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    hc_err_t err = HC_OK;
    for (int attempt = 0;; attempt++) {
        err = hc_kafka_error_take(rd_kafka_init_transactions(s1->producer, (int)t->txn_call_ms),
                                  errstr, errstr_size);
        if (err != HC_ERR_TRANSIENT || attempt + 1 >= t->txn_init_attempts ||
            hc_stage_loop_stop_requested(&s1->loop)) {
            return err;
        }
        int64_t pause = hc_timeouts_backoff_ms(t, attempt);
        hc_log(HC_LOG_WARN, s1->loop.name, "init_transactions: %s; retrying in %" PRId64 " ms",
               errstr, pause);
        hc_stage_loop_pause(&s1->loop, NULL, pause);
    }
}

/* Replaces the transactional producer by a new one with the same transactional.id (RENEW).
 * No librdkafka implements transactions v2 (KIP-890), so a transaction's Produce or EndTxn
 * requests delayed in the network could otherwise land in a later transaction of the same
 * producer epoch (KAFKA-17754). The new producer's init_transactions bumps the epoch, so the
 * broker refuses them, and it first completes or aborts the old transaction at the
 * coordinator, so the committed offsets the rewind reads next are final. The old producer is
 * destroyed without waiting for what it still has in flight: nothing of it may count. */
static hc_err_t renew_producer(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    hc_stage_loop_unwatch(&s1->loop, s1->producer);
    rd_kafka_destroy(s1->producer);
    s1->partials_parts = 0; /* read again through the new producer */
    hc_kafka_opts_t popts = {.transactional_id = s1->txn_id};
    s1->producer = hc_kafka_new(s1->cfg, HC_KAFKA_ROLE_TXN_PRODUCER, &popts, errstr, errstr_size);
    if (!s1->producer) {
        return HC_ERR_FATAL;
    }
    hc_stage_loop_watch(&s1->loop, s1->producer);
    return init_producer(s1, errstr, errstr_size);
}

static hc_err_t begin_txn(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    /* begin fails only on programming or fatal errors */
    hc_err_t err =
        hc_kafka_error_take(rd_kafka_begin_transaction(s1->producer), errstr, errstr_size);
    return err == HC_OK ? HC_OK : HC_ERR_FATAL;
}

/* The partials topic's partition count, read again a minute after it last was: partitions
 * added to the topic then get their share of the posts (until then the posts of the new ones
 * go to the old ones, still each counted once). */
static hc_err_t partials_partitions(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    int64_t now = hc_now_ms();
    if (s1->partials_parts > 0 && now - s1->partials_parts_at_ms < 60000) {
        return HC_OK;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(s1->producer, s1->cfg->topic_partials, NULL);
    if (!rkt) {
        hc_errstr_set(errstr, errstr_size, "topic handle for %s", s1->cfg->topic_partials);
        return HC_ERR_ABORT;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t rerr =
        rd_kafka_metadata(s1->producer, 0, rkt, &md, (int)s1->cfg->timeouts.txn_call_ms);
    rd_kafka_topic_destroy(rkt);
    if (rerr) {
        /* the window is aborted and read again: no partial of it was produced */
        hc_errstr_set(errstr, errstr_size, "metadata for %s: %s", s1->cfg->topic_partials,
                      rd_kafka_err2str(rerr));
        return HC_ERR_ABORT;
    }
    hc_err_t err = HC_OK;
    if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt < 1) {
        hc_errstr_set(errstr, errstr_size, "topic %s: %s", s1->cfg->topic_partials,
                      md->topic_cnt && md->topics[0].err ? rd_kafka_err2str(md->topics[0].err)
                                                         : "no partitions");
        err = HC_ERR_ABORT;
    } else {
        s1->partials_parts = md->topics[0].partition_cnt;
        s1->partials_parts_at_ms = now;
    }
    rd_kafka_metadata_destroy(md);
    return err;
}

/* The window's partials as packed records (partial_pack.h): its posts grouped by the partials
 * partition each belongs to (hc_pack_partition), each group in post-id order in as many
 * bounded records as it needs, produced to that partition. Key of the k-th record (k from 0)
 * of a partition: "<transactional id>/<window>/<partition>/<k>", unique per window, naming
 * its writer; stage 2 does not read it. */
static hc_err_t produce_packed(hc_stage1_t *s1, int64_t closed_at, size_t hdr_len, char *errstr,
                               size_t errstr_size)
{
    size_t n = hc_table_count(s1->tbl);
    if (n == 0) {
        return HC_OK; /* a window of dead letters only: no metadata to read */
    }
    hc_err_t err = partials_partitions(s1, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    int32_t parts = s1->partials_parts;
    if (n > s1->pack_cap) {
        const hc_table_entry_t **ents = realloc(s1->pack_ents, n * sizeof(*ents));
        if (ents) {
            s1->pack_ents = ents;
        }
        int32_t *of = realloc(s1->pack_of, n * sizeof(*of));
        if (of) {
            s1->pack_of = of;
        }
        if (!ents || !of) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            return HC_ERR_FATAL;
        }
        s1->pack_cap = n;
    }
    if (parts > s1->pack_parts_cap) {
        size_t *start = realloc(s1->pack_start, ((size_t)parts + 1) * sizeof(*start));
        if (!start) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            return HC_ERR_FATAL;
        }
        s1->pack_start = start;
        s1->pack_parts_cap = parts;
    }
    if (!s1->pack_buf && !(s1->pack_buf = malloc(HC_PACK_MAX_BYTES))) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    /* a counting sort by partition: counts, then each partition's first slot, then placed */
#ifdef HC_MUTANT_DROP_PARTIAL
    bool dropped = s1->window_seq != 3; /* the mutant's third window (commit_txn) */
#endif
    size_t *start = s1->pack_start;
    memset(start, 0, ((size_t)parts + 1) * sizeof(*start));
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s1->tbl, i);
        s1->pack_of[i] = hc_pack_partition(ent->post_id, ent->post_id_len, parts);
#ifdef HC_MUTANT_DROP_PARTIAL
        if (!dropped && ent->delta != 0) { /* the mutant's drop, as commit_txn's below */
            dropped = true;
            s1->pack_of[i] = -1;
            continue;
        }
#endif
        start[s1->pack_of[i] + 1]++;
    }
    for (int32_t p = 0; p < parts; p++) {
        start[p + 1] += start[p];
    }
    for (size_t i = 0; i < n; i++) {
        if (s1->pack_of[i] >= 0) {
            s1->pack_ents[start[s1->pack_of[i]]++] = hc_table_entry(s1->tbl, i);
        }
    }
    /* A record must fit what the producer may send (else MSG_SIZE_TOO_LARGE stops the stage):
     * its message.max.bytes less what each record carries beside its value, the key (at most
     * sizeof(key) below), the hotcount-window header and the record's framing. Kafka's default
     * (about 1 MB) leaves HC_PACK_MAX_BYTES; a smaller setting makes more, smaller records. */
    char key[sizeof(s1->txn_id) + 64];
    int64_t room = hc_kafka_max_message_bytes(s1->producer) - (int64_t)sizeof(key) -
                   (int64_t)hdr_len - (int64_t)strlen(HC_SOURCE_HEADER) - PACK_RECORD_FRAMING -
                   (s1->auth_on ? (int64_t)(strlen(HC_AUTH_HEADER) + HC_AUTH_VALUE_MAX) : 0);
    size_t limit = room <= 0                           ? 0
                   : room < (int64_t)HC_PACK_MAX_BYTES ? (size_t)room
                                                       : HC_PACK_MAX_BYTES;
    /* start[p] is now partition p's end, which is p + 1's first slot */
    size_t first = 0;
    for (int32_t p = 0; p < parts && err == HC_OK; p++) {
        size_t end = start[p];
        const hc_table_entry_t **group = s1->pack_ents + first;
        size_t left = end - first;
        hc_pack_sort(group, left);
        for (int64_t k = 0; left > 0 && err == HC_OK; k++) {
            size_t taken = 0;
            size_t len = hc_pack_encode(group, left, &taken, s1->pack_buf, limit);
            if (len == 0) {
                hc_errstr_set(errstr, errstr_size,
                              "packed partial: a post does not fit in %zu bytes, the "
                              "producer's message.max.bytes (%" PRId64 ") less the record's key "
                              "and headers; raise kafka.producer.message.max.bytes",
                              limit, hc_kafka_max_message_bytes(s1->producer));
                return HC_ERR_FATAL;
            }
            int key_len = snprintf(key, sizeof(key), "%s/%" PRId64 "/%" PRId32 "/%" PRId64,
                                   s1->txn_id, s1->window_seq, p, k);
            rd_kafka_headers_t *hdrs = partial_headers(s1, hdr_len, s1->pack_buf, len);
            err = produce_to(s1, s1->cfg->topic_partials, p, key, (size_t)key_len, s1->pack_buf,
                             len, closed_at, hdrs, errstr, errstr_size);
            s1->window_records++;
            group += taken;
            left -= taken;
        }
        first = end;
    }
    return err;
}

/* Produces the partials and the manifest, sends the offsets and commits: the window applied.
 * HC_OK, HC_ERR_ABORT (the transaction is unusable), HC_ERR_TRANSIENT (retries ran out) or
 * HC_ERR_FATAL. Changes nothing but the transaction. */
static hc_err_t commit_txn(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    const hc_config_t *cfg = s1->cfg;
    s1->commit_start_ms = hc_now_ms();
    int64_t closed_at = hc_wall_ms(); /* the timestamp of the window's records */
    size_t n = hc_table_count(s1->tbl);
    hc_err_t err = HC_OK;
#ifdef HC_MUTANT_DROP_PARTIAL
    /* Mutant build (tests/faults/mutants.sh), never the product: the third window silently
     * loses its first partial that carries likes. */
    bool dropped = s1->window_seq != 3;
#endif
    /* Every partial names its window and the raw offsets the window read, so that stage 2 can
     * refuse a late write of a stale transaction (hotcount/source_check.h); encoded once per
     * window. */
    size_t hdr_max = hc_source_encoded_max(&s1->win);
    if (hdr_max > s1->window_hdr_cap) {
        char *grown = realloc(s1->window_hdr, hdr_max);
        if (!grown) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            return HC_ERR_FATAL;
        }
        s1->window_hdr = grown;
        s1->window_hdr_cap = hdr_max;
    }
    size_t hdr_len = hc_source_encode(s1->txn_id, s1->incarnation_ms, s1->window_seq, &s1->win,
                                      s1->window_hdr, s1->window_hdr_cap);
    s1->window_records = 0;
    if (strcmp(cfg->partials_format, "packed") == 0) {
        err = produce_packed(s1, closed_at, hdr_len, errstr, errstr_size);
        n = 0; /* nothing left for the one-post loop below */
    }
    for (size_t i = 0; i < n && err == HC_OK; i++) {
        const hc_table_entry_t *ent = hc_table_entry(s1->tbl, i);
#ifdef HC_MUTANT_DROP_PARTIAL
        if (!dropped && ent->delta != 0) {
            dropped = true;
            continue;
        }
#endif
        s1->window_records++;
        char buf[HC_PARTIAL_MAX_BYTES];
        size_t len = hc_partial_encode(ent, buf, sizeof(buf));
        if (len == 0) {
            hc_errstr_set(errstr, errstr_size, "partial too large for post of %u bytes",
                          ent->post_id_len);
            return HC_ERR_FATAL;
        }
        rd_kafka_headers_t *hdrs = partial_headers(s1, hdr_len, buf, len);
        err = produce(s1, cfg->topic_partials, ent->post_id, ent->post_id_len, buf, len, closed_at,
                      hdrs, errstr, errstr_size);
    }
    if (err == HC_OK && cfg->topic_manifest[0]) {
        err = produce_manifest(s1, closed_at, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return err == HC_ERR_ABORT ? HC_ERR_ABORT : HC_ERR_FATAL;
    }
    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(16);
    for (int32_t p = 0; p < s1->win.cap; p++) {
        const hc_manifest_range_t *r = hc_manifest_range(&s1->win, p);
        if (r) {
            rd_kafka_topic_partition_list_add(offsets, cfg->topic_raw, p)->offset = r->next;
        }
    }
    err = txn_call(s1, TXN_SEND_OFFSETS, offsets, errstr, errstr_size);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (err == HC_OK) {
        err = txn_call(s1, TXN_COMMIT, NULL, errstr, errstr_size);
    }
    return err;
}

/* ---- where a raw partition starts (hotcount/start_offset.h) ------------------------------- */

/* Where each partition of `list` starts (hotcount/start_offset.h), read from the group
 * coordinator: each element's offset is set to its committed offset, or to the first record
 * (RD_KAFKA_OFFSET_BEGINNING) once every one of committed_read_attempts reads, backing off, said
 * the group has none for a partition that has records. A partition without records starts at
 * once. Blocks the stage's thread for that long (3.1 s by default), beating the watchdog: a
 * fresh group's first start on a backlog, or a read that missed an offset.
 *
 * A read that fails (the coordinator loading after a restart; offsets held unstable by another
 * process's open transaction, which a read_committed read waits out, up to the transaction
 * timeout) is tried again only when `patient` (the rewind, which cannot go on without the
 * offsets); otherwise one read, bounded to START_READ_MS, and the caller leaves the partitions
 * to the consumer's own asynchronous read: the stage's thread must not wait on a transaction
 * of another process while its other partitions have windows to commit (a combined-fault run
 * stood a whole stage still for 50 s that way). asked (list->cnt long, or NULL): set for the
 * partitions with records that some read said "none" for. HC_OK, or HC_ERR_TRANSIENT when the
 * committed offsets or the partition's ends could not be read (errstr says which). */
static hc_err_t read_starts(hc_stage1_t *s1, rd_kafka_topic_partition_list_t *list, bool patient,
                            bool *asked, char *errstr, size_t errstr_size)
{
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    rd_kafka_t *consumer = s1->loop.consumer;
    int *answers = calloc((size_t)list->cnt + 1, sizeof(*answers));
    bool *known = calloc((size_t)list->cnt + 1, sizeof(*known));
    if (!answers || !known) {
        free(answers);
        free(known);
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hc_err_t err = HC_ERR_TRANSIENT;
    bool ends_failed = false; /* a found offset's ends could not be read: no more tries */
    for (int attempt = 0; attempt < t->committed_read_attempts; attempt++) {
        if (attempt > 0) {
            hc_stage_loop_pause(&s1->loop, NULL, hc_timeouts_backoff_ms(t, attempt - 1));
        }
        rd_kafka_topic_partition_list_t *read = rd_kafka_topic_partition_list_copy(list);
        int bound = patient ? (int)t->committed_read_ms : START_READ_MS;
        rd_kafka_resp_err_t rerr = rd_kafka_committed(consumer, read, bound);
        hc_stage_loop_beat(&s1->loop);
        bool again = false;
        for (int i = 0; i < list->cnt && !rerr; i++) {
            rd_kafka_topic_partition_t *tp = &read->elems[i];
            if (known[i]) {
                continue;
            }
            if (tp->err) {
                rerr = tp->err;
                break;
            }
            int64_t committed = tp->offset >= 0 ? tp->offset : HC_OFFSET_NONE;
            int64_t low = 0, high = 0;
            if (committed == HC_OFFSET_NONE) {
                answers[i]++;
                rerr = rd_kafka_query_watermark_offsets(consumer, tp->topic, tp->partition, &low,
                                                        &high, bound);
                if (rerr) {
                    break;
                }
            } else if (ends_failed || rd_kafka_query_watermark_offsets(
                                          consumer, tp->topic, tp->partition, &low, &high, bound) !=
                                          RD_KAFKA_RESP_ERR_NO_ERROR) {
                /* The ends only say whether the offset is still in the log (retention, a
                 * truncated log): without them it is taken as found, and one out of range is
                 * the consumer's auto.offset.reset=earliest, silently. After one failed
                 * try no more in this call: the thread must not wait on each partition in
                 * turn. */
                ends_failed = true;
                high = low = committed;
            }
            hc_start_decision_t how =
                hc_start_decide(committed, low, high, answers[i], t->committed_read_attempts);
            if (how == HC_START_ASK_AGAIN) {
                again = true;
                continue;
            }
            known[i] = true;
            list->elems[i].offset =
                how == HC_START_COMMITTED ? committed : RD_KAFKA_OFFSET_BEGINNING;
            if (asked) {
                asked[i] = answers[i] > 0 && (committed != HC_OFFSET_NONE || high > low);
            }
            if (answers[i] > 1 || (answers[i] > 0 && committed != HC_OFFSET_NONE) ||
                how == HC_START_FIRST_RETENTION || how == HC_START_FIRST_TRUNCATED) {
                /* a confirmed "none" on a partition with records, an offset found after a
                 * read that said none, or one no longer in the log (its records lost to
                 * retention, or the log truncated below it) */
                hc_log_event(
                    committed != HC_OFFSET_NONE ? HC_LOG_WARN : HC_LOG_INFO, s1->loop.name,
                    "start_offset", HC_LOG_STR("topic", tp->topic),
                    HC_LOG_INT("partition", tp->partition),
                    HC_LOG_STR("start", hc_start_decision_name(how)),
                    HC_LOG_INT("committed_offset", committed == HC_OFFSET_NONE ? -1 : committed),
                    HC_LOG_INT("log_start", low), HC_LOG_INT("log_end", high),
                    HC_LOG_INT("answers_none", answers[i]));
            }
        }
        rd_kafka_topic_partition_list_destroy(read);
        hc_stage_loop_beat(&s1->loop);
        if (rerr) {
            hc_errstr_set(errstr, errstr_size, "reading committed offsets: %s",
                          rd_kafka_err2str(rerr));
            if (!patient) {
                break;
            }
            continue; /* asked again after the back-off, within the attempts */
        }
        if (!again) {
            err = HC_OK;
            break;
        }
    }
    if (err != HC_OK && errstr && !errstr[0]) {
        hc_errstr_set(errstr, errstr_size, "committed offsets not confirmed");
    }
    free(answers);
    free(known);
    return err;
}

/* Partitions given to stage 1 start where read_starts says, read here rather than by the
 * consumer, so that an answer of "none" for a partition with records is asked again before the
 * partition is read from its first record (hotcount/start_offset.h). When the reads fail
 * throughout, the partitions are handed to the consumer without offsets, which reads them from
 * the group coordinator itself (and retries), as before. */
static hc_err_t on_assign(void *stage, rd_kafka_t *consumer,
                          const rd_kafka_topic_partition_list_t *partitions, char *errstr,
                          size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_copy(partitions);
    bool *confirmed = calloc((size_t)list->cnt + 1, sizeof(*confirmed));
    if (!confirmed) {
        rd_kafka_topic_partition_list_destroy(list);
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    char why[256] = "";
    hc_err_t err = read_starts(s1, list, false, confirmed, why, sizeof(why));
    if (err == HC_OK) {
        /* Where no read said "none" (a committed offset found at once, or an empty partition),
         * the consumer reads the start itself, as it always did: the same offset, and with it
         * the committed offset its statistics compute the lag from (hotcount_consumer_lag).
         * Only an answer the confirmation overruled, or confirmed, is handed over as read. */
        for (int i = 0; i < list->cnt; i++) {
            if (!confirmed[i]) {
                list->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
            }
        }
    }
    if (err == HC_ERR_TRANSIENT) {
        hc_log(HC_LOG_WARN, s1->loop.name, "%s; the consumer reads them itself", why);
        for (int i = 0; i < list->cnt; i++) {
            list->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
        }
        err = HC_OK;
    } else if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s", why);
    }
    if (err == HC_OK) {
        err = hc_kafka_assign_add(consumer, list, errstr, errstr_size);
    }
    free(confirmed);
    rd_kafka_topic_partition_list_destroy(list);
    return err;
}

/* Rewinds every assigned partition to its committed offset (hc_kafka_reposition: a seek, under
 * either protocol; the eager one re-assigned while librdkafka 2.0.2's seek timeout was broken).
 * HC_ERR_TRANSIENT when the assignment is lost (hc_kafka_may_reassign): the rewind waits for
 * the revoke or for the group to give the partitions back. */
static hc_err_t rewind_consumer(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    rd_kafka_t *consumer = s1->loop.consumer;
    if (!hc_kafka_may_reassign(consumer)) {
        hc_errstr_set(errstr, errstr_size, "assignment lost");
        return HC_ERR_TRANSIENT;
    }
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    rd_kafka_topic_partition_list_t *assigned = NULL;
    rd_kafka_resp_err_t rerr = rd_kafka_assignment(consumer, &assigned);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "assignment: %s", rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    hc_err_t err =
        assigned->cnt > 0 ? read_starts(s1, assigned, true, NULL, errstr, errstr_size) : HC_OK;
    if (err == HC_OK && assigned->cnt > 0) {
        /* what the loop holds was fetched from past the aborted window */
        hc_stage_loop_forget_list(&s1->loop, assigned);
        err =
            hc_kafka_reposition(consumer, assigned, (int)t->committed_read_ms, errstr, errstr_size);
    } else if (err == HC_ERR_TRANSIENT) {
        err = HC_ERR_FATAL; /* as before: the committed offsets unreadable through every attempt */
    }
    rd_kafka_topic_partition_list_destroy(assigned);
    return err;
}

/* ---- transitions and what each new state asks for ---------------------------------------- */

static void window_committed(hc_stage1_t *s1)
{
    hc_metrics_t *m = s1->metrics;
    int64_t now = hc_now_ms();
    double secs = (double)(now - s1->commit_start_ms) / 1000.0;
    size_t n = hc_table_count(s1->tbl);
    hc_metrics_stage_flushed(m, HC_METRICS_STAGE1, now, secs);
    hc_histogram_observe(&m->txn_seconds, secs);
    publish_hot_keys(s1, now);
    hc_metric_add(m->events_ok, s1->window_ok);
    hc_metric_add(m->events_invalid, s1->window_invalid);
    for (int r = 0; r < HC_EVENT_REASON_COUNT; r++) {
        if (s1->window_by_reason[r]) {
            hc_metric_add(m->invalid_by_reason[r], s1->window_by_reason[r]);
        }
    }
    hc_metric_add(m->partials, (int64_t)n);
    hc_metric_add(m->partial_records, s1->window_records);
    hc_metric_add(m->txn_commit, 1);
    hc_log(HC_LOG_INFO, s1->loop.name,
           "committed window: %" PRId64 " events, %" PRId64 " invalid, %zu partials, %" PRId64
           " ms",
           s1->window_ok, s1->window_invalid, n, now - s1->commit_start_ms);
    for (int32_t p = 0; p < s1->win.cap; p++) {
        const hc_manifest_range_t *r = hc_manifest_range(&s1->win, p);
        if (r) {
            hc_stage_loop_committed(&s1->loop, p, r->next); /* the progress check's input */
        }
    }
    window_reset(s1);
}

/* The side effects of entering s1->state from `from` by `ev`: the one place where windows are
 * counted, dropped and begun. why: the event's errstr (for the abort's log line). */
static void enter(hc_stage1_t *s1, hc_stage1_state_t from, hc_stage1_event_t ev, const char *why)
{
    switch (s1->state) {
    case HC_STAGE1_OPEN:
        if (from == HC_STAGE1_IDLE) {
            s1->window_seq++;
            s1->window_start_ms = hc_now_ms();
            s1->window_due_ms =
                hc_window_due_ms(s1->window_start_ms, hc_wall_ms(), s1->cfg->flush_ms, 0);
            hc_metrics_stage_input(s1->metrics, HC_METRICS_STAGE1, s1->window_start_ms);
        }
        break;
    case HC_STAGE1_IDLE:
        if (ev == HC_STAGE1_EV_COMMIT) {
            window_committed(s1);
        } else if (ev == HC_STAGE1_EV_REWIND) {
            hc_log(HC_LOG_INFO, s1->loop.name, "rewound to the committed offsets");
        } else if (ev == HC_STAGE1_EV_REVOKE && from == HC_STAGE1_REWINDING) {
            /* the aborted window's input is the next owner's now */
            hc_metrics_stage_released(s1->metrics, HC_METRICS_STAGE1);
        }
        break;
    case HC_STAGE1_ABORTING:
        hc_log(HC_LOG_WARN, s1->loop.name, "aborting window (%" PRId64 " events): %s",
               s1->window_ok + s1->window_invalid, why);
        break;
    case HC_STAGE1_RENEWING:
        if (from == HC_STAGE1_ABORTING) {
            hc_metric_add(s1->metrics->txn_abort, 1); /* the new epoch aborts it if it did not */
        }
        hc_log_event(HC_LOG_WARN, s1->loop.name, "producer_renew",
                     HC_LOG_STR("after", from == HC_STAGE1_ABORTING ? "abort" : "commit"),
                     HC_LOG_STR("error", why ? why : ""));
        break;
    case HC_STAGE1_REWINDING:
        if (from == HC_STAGE1_ABORTING || from == HC_STAGE1_RENEWING) {
#ifdef HC_MUTANT_NO_ENDTXN_DEFENCE
            hc_metric_add(s1->metrics->txn_abort, from == HC_STAGE1_ABORTING);
#endif
            hc_hotkeys_reset(s1->hk);
            window_reset(s1);
        }
        break;
    case HC_STAGE1_FAILED:
        if (from != HC_STAGE1_FAILED) {
            hc_log(HC_LOG_ERROR, s1->loop.name, "window failed (event %s in state %s): %s",
                   hc_stage1_event_name(ev), hc_stage1_state_name(from), why);
        }
        break;
    case HC_STAGE1_STATE_COUNT:
        break;
    }
}

/* The step loop (the shape of fsm.h): takes the transition for `ev`'s outcome and does what
 * the new state asks for; an unusable transaction (ABORTING) is aborted at once, and a producer
 * to replace (RENEWING) replaced at once, their events fed back in turn, before any other
 * message or callback. Returns HC_OK, or HC_ERR_FATAL with errstr when the window FAILED (an
 * event the state does not take: errstr names both). */
static hc_err_t act(hc_stage1_t *s1, hc_stage1_event_t ev, hc_err_t outcome, char *errstr,
                    size_t errstr_size)
{
    for (;;) {
        hc_stage1_state_t from = s1->state;
        s1->state = hc_stage1_next(from, ev, outcome, errstr, errstr_size);
        enter(s1, from, ev, errstr);
        if (s1->observer) {
            s1->observer(s1->observer_opaque, from, ev, outcome, s1->state);
        }
        if (s1->state == HC_STAGE1_ABORTING) {
            ev = HC_STAGE1_EV_ABORT;
            outcome = txn_call(s1, TXN_ABORT, NULL, errstr, errstr_size);
        } else if (s1->state == HC_STAGE1_RENEWING) {
            ev = HC_STAGE1_EV_RENEW;
            outcome = renew_producer(s1, errstr, errstr_size);
        } else {
            return s1->state == HC_STAGE1_FAILED ? HC_ERR_FATAL : HC_OK;
        }
    }
}

/* The flush path: apply (commit the transaction), classify, transition. */
static hc_err_t close_window(hc_stage1_t *s1, char *errstr, size_t errstr_size)
{
    hc_err_t outcome = commit_txn(s1, errstr, errstr_size);
    return act(s1, HC_STAGE1_EV_COMMIT, outcome, errstr, errstr_size);
}

/* ---- one message ------------------------------------------------------------------------- */

static hc_err_t count_event(hc_stage1_t *s1, const hc_event_t *ev, char *errstr, size_t errstr_size)
{
    /* Any int64 is a legal ts. INT64_MIN is also HC_TS_NONE ("no ts"): it is clamped one up,
     * so the event keeps a timestamp; no arithmetic on ts happens in this stage (stage 2's
     * ages saturate: hc_ts_age_ms). */
    int64_t ts = !ev->has_ts ? HC_TS_NONE : ev->ts == HC_TS_NONE ? HC_TS_NONE + 1 : ev->ts;
    hc_err_t err = hc_table_add(s1->tbl, ev->post_id, ev->post_id_len, ev->delta, 1, ts, ts);
    if (err == HC_ERR_FULL) {
        /* Close the window without this event (its offset is not recorded yet) and begin the
         * next one with it. Aborted: it is fetched again after the rewind. */
        if ((err = close_window(s1, errstr, errstr_size)) != HC_OK || s1->state != HC_STAGE1_IDLE) {
            return err;
        }
        if ((err = act(s1, HC_STAGE1_EV_BEGIN, begin_txn(s1, errstr, errstr_size), errstr,
                       errstr_size)) != HC_OK) {
            return err;
        }
        err = hc_table_add(s1->tbl, ev->post_id, ev->post_id_len, ev->delta, 1, ts, ts);
    }
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "aggregation table: %s", hc_err_name(err));
        return HC_ERR_FATAL;
    }
    s1->window_ok++;
    return HC_OK;
}

static hc_err_t on_message(void *stage, const rd_kafka_message_t *rkm, char *errstr,
                           size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    if (++s1->unpublished == PUBLISH_EVERY) {
        hc_metric_add(s1->metrics->events_consumed, s1->unpublished);
        s1->unpublished = 0;
    }
    if (s1->state == HC_STAGE1_REWINDING) {
        return HC_OK; /* fetched from past the aborted window: read again after the rewind */
    }
    hc_err_t err;
    if (s1->state == HC_STAGE1_IDLE &&
        (err = act(s1, HC_STAGE1_EV_BEGIN, begin_txn(s1, errstr, errstr_size), errstr,
                   errstr_size)) != HC_OK) {
        return err;
    }
    hc_event_t ev;
    const char *payload = rkm->payload;
    hc_event_reason_t reason = hc_event_parse(payload ? payload : "", payload ? rkm->len : 0,
                                              (size_t)s1->cfg->event_max_bytes, &ev);
    if (reason == HC_EVENT_OK) {
        err = count_event(s1, &ev, errstr, errstr_size);
    } else {
        err = act(s1, HC_STAGE1_EV_PRODUCE, produce_dlq(s1, rkm, reason, errstr, errstr_size),
                  errstr, errstr_size);
        if (err == HC_OK && s1->state == HC_STAGE1_OPEN) {
            s1->window_invalid++;
            s1->window_by_reason[reason]++;
        }
    }
    if (err != HC_OK || s1->state != HC_STAGE1_OPEN) {
        return err; /* failed, or aborted: not part of any window */
    }
    return record_offset(s1, rkm, errstr, errstr_size);
}

/* ---- the loop's hooks -------------------------------------------------------------------- */

/* A stage started while the broker is down waits for it, as a running one rides out an outage
 * (and as stage 2, whose consumer just waits for its group): init_transactions is retried for
 * as long as it fails transiently, not txn_init_attempts times (5 x 60 s, then exit 1), backing
 * off between calls and saying why (broker_unreachable). Each call is bounded by
 * START_CALL_MS, so a stop is seen within about a second: librdkafka resumes the same
 * initialisation at the next call. The stage subscribes only after, so it holds no partitions
 * meanwhile: not ready. Asked to stop while waiting, it stops cleanly, having consumed nothing
 * (IDLE: on_stopping has no window to close). */
#define START_CALL_MS 1000
static hc_err_t on_start(void *stage, char *errstr, size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    int64_t call_ms = t->txn_call_ms < START_CALL_MS ? t->txn_call_ms : START_CALL_MS;
    for (int attempt = 0;; attempt++) {
        hc_err_t err = hc_kafka_error_take(rd_kafka_init_transactions(s1->producer, (int)call_ms),
                                           errstr, errstr_size);
        if (err == HC_OK) {
            break;
        }
        if (err != HC_ERR_TRANSIENT) {
            return HC_ERR_FATAL;
        }
        if (hc_stage_loop_stop_requested(&s1->loop)) {
            return HC_OK;
        }
        int64_t pause = hc_timeouts_backoff_ms(t, attempt);
        hc_stage_loop_auth_check(&s1->loop); /* why the broker does not answer, if it refused */
        hc_log_event(HC_LOG_WARN, s1->loop.name, "broker_unreachable",
                     HC_LOG_INT("backoff_ms", pause), HC_LOG_STR("error", errstr));
        hc_stage_loop_pause(&s1->loop, NULL, pause);
    }
    hc_log(HC_LOG_INFO, s1->loop.name, "consuming %s, flush.ms=%lld, max.keys=%lld",
           s1->cfg->topic_raw, (long long)s1->cfg->flush_ms, (long long)s1->cfg->max_keys);
    return HC_OK;
}

/* Closes the open window before the partitions go: commits it, or aborts it when they were
 * lost (another consumer may own them already, so its offsets must not be committed). Rewinds
 * nothing and never re-assigns: the loop unassigns next. After a failure, does nothing.
 *
 * The window spans every partition, so an incremental revoke (group.protocol=consumer) closes
 * it whole too, whichever partitions go. If partitions stay and the window was aborted (now or
 * before), the stage stays REWINDING: the partitions that stay are rewound at the next tick,
 * once the loop has taken the revoked ones away. */
static hc_err_t on_revoke(void *stage, const rd_kafka_topic_partition_list_t *partitions, bool lost,
                          char *errstr, size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    if (hc_stage_loop_failed(&s1->loop)) {
        return HC_OK;
    }
    hc_err_t err = HC_OK;
    if (s1->state == HC_STAGE1_OPEN && lost) {
        hc_errstr_set(errstr, errstr_size, "assignment lost");
        err = act(s1, HC_STAGE1_EV_LOSE, HC_OK, errstr, errstr_size);
    } else if (s1->state == HC_STAGE1_OPEN) {
        err = close_window(s1, errstr, errstr_size);
    }
    bool some_stay = hc_stage_loop_assigned(&s1->loop) > partitions->cnt;
    if (err == HC_OK && some_stay && s1->state == HC_STAGE1_REWINDING) {
        return HC_OK;
    }
    return err != HC_OK ? err : act(s1, HC_STAGE1_EV_REVOKE, HC_OK, errstr, errstr_size);
}

static int64_t on_due_ms(void *stage)
{
    const hc_stage1_t *s1 = stage;
    return s1->state == HC_STAGE1_OPEN ? s1->window_due_ms : INT64_MAX;
}

/* After every poll: a due window is closed, an aborted one rewound. */
static hc_err_t on_tick(void *stage, int64_t now_ms, bool idle, char *errstr, size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    if (idle && s1->unpublished) {
        hc_metric_add(s1->metrics->events_consumed, s1->unpublished);
        s1->unpublished = 0;
    }
    if (s1->state == HC_STAGE1_OPEN && now_ms >= s1->window_due_ms) {
        return close_window(s1, errstr, errstr_size);
    }
    if (s1->state == HC_STAGE1_REWINDING) {
        return act(s1, HC_STAGE1_EV_REWIND, rewind_consumer(s1, errstr, errstr_size), errstr,
                   errstr_size);
    }
    return HC_OK;
}

/* A clean stop commits the open window; aborted, nothing is committed and the next owner
 * starts from the committed offsets. */
static hc_err_t on_stopping(void *stage, hc_err_t err, char *errstr, size_t errstr_size)
{
    hc_stage1_t *s1 = stage;
    if (err == HC_OK && s1->state == HC_STAGE1_OPEN) {
        err = close_window(s1, errstr, errstr_size);
    }
    hc_metrics_publish_hot_keys(s1->metrics, s1->loop.name, NULL, 0, 0);
    return err;
}

/* A raw partition that stands still (stage_loop.h, hotcount/progress.h). Nothing of it in the
 * open window (it fetched nothing since the last commit): it is sought to its committed offset
 * read again from the group coordinator, and resumed, whatever left it paused or unsought. A
 * window that holds some of it commits within flush.ms, and an abort's rewind is under way: no
 * second repositioning over those. */
static hc_err_t on_recover(void *stage, int32_t partition, char *why, size_t why_size)
{
    hc_stage1_t *s1 = stage;
    if (s1->state != HC_STAGE1_IDLE && s1->state != HC_STAGE1_OPEN) {
        hc_errstr_set(why, why_size, "the window is %s", hc_stage1_state_name(s1->state));
        return HC_ERR_TRANSIENT;
    }
    if (hc_manifest_range(&s1->win, partition)) {
        hc_errstr_set(why, why_size, "in the open window, which commits within flush.ms");
        return HC_ERR_TRANSIENT;
    }
    if (!hc_kafka_may_reassign(s1->loop.consumer)) {
        hc_errstr_set(why, why_size, "assignment lost");
        return HC_ERR_TRANSIENT;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, s1->cfg->topic_raw, partition);
    const hc_timeouts_t *t = &s1->cfg->timeouts;
    hc_err_t err = read_starts(s1, list, false, NULL, why, why_size); /* as at an assignment */
    if (err == HC_OK) {
        hc_stage_loop_forget_list(&s1->loop, list);
        err =
            hc_kafka_reposition(s1->loop.consumer, list, (int)t->committed_read_ms, why, why_size);
        if (err == HC_OK) {
            rd_kafka_resume_partitions(s1->loop.consumer, list);
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
    return err == HC_OK || err == HC_ERR_TRANSIENT ? err : HC_ERR_FATAL;
}

static void on_describe(void *stage, int32_t partition, char *buf, size_t size)
{
    hc_stage1_t *s1 = stage;
    snprintf(buf, size, "%s%s", hc_stage1_state_name(s1->state),
             hc_manifest_range(&s1->win, partition) ? ", in the window" : "");
}

static const hc_stage_loop_ops_t stage1_ops = {
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

hc_err_t hc_stage1_run(hc_stage1_t *s1, const atomic_bool *stop, char *errstr, size_t errstr_size)
{
    return hc_stage_loop_run(&s1->loop, stop, errstr, errstr_size);
}
