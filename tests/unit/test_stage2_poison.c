/* Stage 2 on untrusted input (issue 16, item 3): anyone who can write to likes.partials can put
 * any bytes there. A real stage 2 on librdkafka's mock cluster over the fake store
 * (tests/support/fake_store.c) is fed one poison record per test among valid partials; each
 * test checks that the record went to topic.dlq with its reason (header hotcount-error) and
 * source (hotcount-source, topic/partition/offset), that hotcount_partials_invalid_total counted
 * it, that every valid count is exact, and that the stage still runs (a partial produced after
 * the poison is stored, and the stage stops cleanly). Each names the mutant of
 * src/stage/stage2.c or src/core/partial_check.c it was seen to fail on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_store.h"
#include "hotcount/admin.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/partial_auth.h"
#include "hotcount/partial_check.h"
#include "hotcount/partial_pack.h"
#include "hotcount/stage.h"
#include "hotcount/topic_read.h"
#include "stage2_impl.h"
#include "stage2_run.h"

#define PARTITIONS 2
#define WAIT_MS 30000
#define MAX_DL 8

typedef struct dead_letter {
    char error[64];
    char source[128];
    char key[64];
    size_t key_len;
    char value[HC_PARTIAL_MAX_BYTES];
    size_t value_len;
} dead_letter_t;

typedef struct fixture {
    hc_stage2_env_t env; /* config, mock cluster, fake store, the test's producer */
    hc_metrics_t metrics;
    char posts[16][16];
    int64_t want[16];
    int nposts;
    int64_t produced[PARTITIONS];
    hc_stage2_run_t run;
    dead_letter_t dl[MAX_DL];
    int ndl;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    static const char *const kv[][2] = {{"flush.ms", "100"},
                                        {"instance.id", "t"},
                                        {"topic.partials.partitions", "2"},
                                        {"topic.dlq.partitions", "1"}};
    hc_stage2_env_start(&f->env, kv, sizeof(kv) / sizeof(kv[0]), 1);
    hc_stage2_env_ready(&f->env);
    f->env.cfg.timeouts.backoff_min_ms = 100;
    f->env.cfg.timeouts.backoff_max_ms = 400;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    hc_stage2_env_fini(&f->env);
    free(f);
    return 0;
}

static void expect_post(fixture_t *f, const char *post, int64_t delta)
{
    int i = 0;
    while (i < f->nposts && strcmp(f->posts[i], post) != 0) {
        i++;
    }
    if (i == f->nposts) {
        assert_true(f->nposts < 16);
        snprintf(f->posts[f->nposts++], sizeof(f->posts[0]), "%s", post);
    }
    f->want[i] += delta;
}

/* A valid partial (as stage 1 writes it), counted in the expected store. */
static void produce(fixture_t *f, int32_t partition, const char *post, int64_t delta)
{
    hc_stage2_run_produce(f->env.producer, f->env.cfg.topic_partials, partition, post, delta);
    f->produced[partition]++;
    expect_post(f, post, delta);
}

/* Any bytes into a partition; returns the record's offset. Not counted. */
static int64_t produce_raw(fixture_t *f, int32_t partition, const char *key, const void *value,
                           size_t len)
{
    assert_int_equal(rd_kafka_producev(f->env.producer, RD_KAFKA_V_TOPIC(f->env.cfg.topic_partials),
                                       RD_KAFKA_V_PARTITION(partition),
                                       RD_KAFKA_V_KEY(key, strlen(key)),
                                       RD_KAFKA_V_VALUE((void *)value, len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(f->env.producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    return f->produced[partition]++;
}

static int64_t produce_json(fixture_t *f, int32_t partition, const char *key, const char *json)
{
    return produce_raw(f, partition, key, json, strlen(json));
}

static void wait_all_stored(fixture_t *f)
{
    int64_t want[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++) {
        want[p] = f->produced[p] ? f->produced[p] : HC_OFFSET_NONE;
    }
    if (!hc_fake_store_wait_offsets(f->env.fake, f->env.cfg.group_stage2, f->env.cfg.topic_partials,
                                    want, PARTITIONS, WAIT_MS)) {
        fail_msg("stored offsets did not reach %" PRId64 "/%" PRId64 ": %" PRId64 "/%" PRId64,
                 want[0], want[1],
                 hc_fake_store_offset(f->env.fake, f->env.cfg.group_stage2,
                                      f->env.cfg.topic_partials, 0),
                 hc_fake_store_offset(f->env.fake, f->env.cfg.group_stage2,
                                      f->env.cfg.topic_partials, 1));
    }
}

static void assert_store_exact(fixture_t *f)
{
    for (int i = 0; i < f->nposts; i++) {
        int64_t got = hc_fake_store_likes(f->env.fake, f->posts[i], strlen(f->posts[i]));
        if (got != f->want[i]) {
            fail_msg("post %s: stored %" PRId64 ", produced %" PRId64, f->posts[i], got,
                     f->want[i]);
        }
    }
    assert_int_equal(hc_fake_store_posts(f->env.fake), (size_t)f->nposts);
}

static void header_copy(rd_kafka_headers_t *hdrs, const char *name, char *out, size_t size)
{
    const void *val = NULL;
    size_t len = 0;
    out[0] = '\0';
    if (hdrs && rd_kafka_header_get_last(hdrs, name, &val, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(out, size, "%.*s", (int)len, (const char *)val);
    }
}

static hc_err_t on_dead_letter(const rd_kafka_message_t *rkm, void *opaque)
{
    fixture_t *f = opaque;
    assert_true(f->ndl < MAX_DL);
    dead_letter_t *dl = &f->dl[f->ndl++];
    rd_kafka_headers_t *hdrs = NULL;
    (void)rd_kafka_message_headers(rkm, &hdrs);
    header_copy(hdrs, "hotcount-error", dl->error, sizeof(dl->error));
    header_copy(hdrs, "hotcount-source", dl->source, sizeof(dl->source));
    dl->key_len = rkm->key ? rkm->key_len : 0;
    assert_true(dl->key_len <= sizeof(dl->key));
    memcpy(dl->key, rkm->key, dl->key_len);
    dl->value_len = rkm->payload ? rkm->len : 0;
    assert_true(dl->value_len <= sizeof(dl->value));
    memcpy(dl->value, rkm->payload, dl->value_len);
    return HC_OK;
}

/* Every record of topic.dlq into f->dl. */
static void read_dead_letters(fixture_t *f)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(&f->env.cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    hc_topic_range_t range = {0, HC_OFFSET_NONE, INT64_MAX};
    f->ndl = 0;
    if (hc_topic_read_ranges(rk, f->env.cfg.topic_dlq, &range, 1, on_dead_letter, f, errstr,
                             sizeof(errstr)) != HC_OK) {
        fail_msg("reading %s: %s", f->env.cfg.topic_dlq, errstr);
    }
    rd_kafka_destroy(rk);
}

static void assert_dead_letter(const dead_letter_t *dl, hc_partial_reason_t reason,
                               const char *topic, int32_t partition, int64_t offset)
{
    char source[128];
    snprintf(source, sizeof(source), "%s/%" PRId32 "/%" PRId64, topic, partition, offset);
    assert_string_equal(dl->error, hc_partial_reason_str(reason));
    assert_string_equal(dl->source, source);
}

/* Only `reason` counted in the metric, `n` times. */
static void assert_invalid_metric(fixture_t *f, hc_partial_reason_t reason, int64_t n)
{
    for (int r = HC_PARTIAL_OK + 1; r < HC_PARTIAL_REASON_COUNT; r++) {
        int64_t got = hc_metric_get(f->metrics.partials_invalid[r]);
        if (got != (r == (int)reason ? n : 0)) {
            fail_msg("hotcount_partials_invalid_total{reason=\"%s\"} = %" PRId64,
                     hc_partial_reason_str((hc_partial_reason_t)r), got);
        }
    }
}

/* Valid partials, then one poison record `json` (value), more valid partials after it on the
 * same partition and on the other; the stage must dead-letter the poison and count the rest,
 * and still run: a partial produced after everything was stored is stored too. */
static void poison_is_dead_lettered(fixture_t *f, const void *value, size_t len,
                                    hc_partial_reason_t reason)
{
    produce(f, 0, "a", 3);
    produce(f, 1, "b", -1);
    int64_t at = produce_raw(f, 0, "poison", value, len);
    produce(f, 0, "a", 2);
    produce(f, 1, "c", 4);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    produce(f, 0, "a", 1); /* still running */
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 1);
    assert_dead_letter(&f->dl[0], reason, f->env.cfg.topic_partials, 0, at);
    assert_int_equal(f->dl[0].key_len, strlen("poison"));
    assert_int_equal(f->dl[0].value_len, len); /* the original bytes */
    assert_memory_equal(f->dl[0].value, value, len);
    assert_invalid_metric(f, reason, 1);
}

/* Mutant seen failing: on_message counts an undecodable partial as before (logs and skips it
 * without dead-lettering: no record in topic.dlq). */
static void garbage_bytes_are_dead_lettered(void **state)
{
    static const char garbage[] = {'\x00', '\xff', '{', '"', 'p', '\x01', '\x80'};
    poison_is_dead_lettered(*state, garbage, sizeof(garbage), HC_PARTIAL_UNDECODABLE);
}

/* A C1 control character (U+0085, UTF-8 C2 85): valid UTF-8, valid JSON, a post id no event
 * may carry. Mutant seen failing: hc_partial_check without the hc_post_id_valid rule (the post
 * is stored: one post too many). */
static void control_char_post_id_is_dead_lettered(void **state)
{
    const char *json =
        "{\"post_id\":\"x\xc2\x85y\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}";
    poison_is_dead_lettered(*state, json, strlen(json), HC_PARTIAL_BAD_POST_ID);
}

/* The record: a delta of 10^9 with events 1. Mutant seen failing: the |delta| <= events
 * rule dropped from hc_partial_check (the post "top" is stored with 10^9). */
static void delta_over_events_is_dead_lettered(void **state)
{
    const char *json = "{\"post_id\":\"top\",\"delta\":1000000000,\"events\":1,\"ts_min\":null,"
                       "\"ts_max\":null}";
    poison_is_dead_lettered(*state, json, strlen(json), HC_PARTIAL_DELTA_EXCEEDS_EVENTS);
}

/* Mutant seen failing: ts_is_the_problem always false (the reason is partial_undecodable). */
static void ts_min_after_ts_max_is_dead_lettered(void **state)
{
    const char *json =
        "{\"post_id\":\"t\",\"delta\":1,\"events\":1,\"ts_min\":2000,\"ts_max\":1000}";
    poison_is_dead_lettered(*state, json, strlen(json), HC_PARTIAL_BAD_TS);
}

/* Two partials of one post whose deltas sum past int64 in one window: the first counts, the
 * second (the one that would overflow) closes the window and opens the next one (issue 25,
 * item 2), where the store refuses the sum: it is dead-lettered store_refused, the window's
 * other posts count. Mutant seen failing: on_message treats hc_table_add's HC_ERR_INVALID as
 * fatal, as before (the stage stops with "aggregation table: invalid"). */
static void overflowing_pair_closes_the_window_and_the_store_refuses_the_second(void **state)
{
    fixture_t *f = *state;
    /* Both partials in one window: every record of the window is on partition 0, so they come
     * in one fetch and are taken within microseconds; a window closes on a wall-clock boundary
     * or flush.ms / 10 after it opened (window.h). With "b" on partition 1, as before, b could
     * open the window before partition 0 was fetchable, and the window closed between the two
     * "big" partials (seen once under ASan in a loaded CI run: store_refused, not
     * partial_overflow). */
    f->env.cfg.flush_ms = 5000;
    char json[HC_PARTIAL_MAX_BYTES];
    snprintf(json, sizeof(json),
             "{\"post_id\":\"big\",\"delta\":%" PRId64 ",\"events\":%" PRId64
             ",\"ts_min\":null,\"ts_max\":null}",
             INT64_MAX - 5, INT64_MAX - 5);
    produce(f, 0, "b", 2);
    produce_json(f, 0, "big", json);
    expect_post(f, "big", INT64_MAX - 5);
    int64_t at = produce_json(
        f, 0, "big",
        "{\"post_id\":\"big\",\"delta\":6,\"events\":6,\"ts_min\":null,\"ts_max\":null}");
    produce(f, 0, "a", 1);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    produce(f, 1, "b", 1);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 1);
    assert_dead_letter(&f->dl[0], HC_PARTIAL_STORE_REFUSED, f->env.cfg.topic_partials, 0, at);
    assert_invalid_metric(f, HC_PARTIAL_STORE_REFUSED, 1);
}

/* Issue 25, item 2: a legal record whose events (2^63 - 1) fill the window's event total closes
 * the window first and takes the next one alone; every later record of the window counts.
 * Before, each of them was dead-lettered partial_overflow (595 of 2 000 likes counted with one
 * such record every 0.5 s). mutant: the window is not closed first (a, c dead-lettered) */
static void a_record_filling_the_event_total_closes_the_window(void **state)
{
    fixture_t *f = *state;
    f->env.cfg.flush_ms = 5000; /* one window, were it not closed: all on partition 0 */
    char json[HC_PARTIAL_MAX_BYTES];
    snprintf(json, sizeof(json),
             "{\"post_id\":\"fill\",\"delta\":0,\"events\":%" PRId64
             ",\"ts_min\":null,\"ts_max\":null}",
             INT64_MAX);
    produce(f, 0, "b", 2);
    produce_json(f, 0, "fill", json);
    expect_post(f, "fill", 0);
    produce(f, 0, "a", 1);
    produce(f, 0, "c", 3);
    produce_json(f, 0, "fill", json); /* and again, after them */
    produce(f, 0, "a", 4);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 0);
    assert_invalid_metric(f, HC_PARTIAL_OVERFLOW, 0);
}

/* The store refuses one post of a batch (HC_ERR_RECORD, as PostgreSQL refuses an id with a NUL
 * byte): that post's partials are dead-lettered, each with its own source, and the batch is
 * applied without it, with the same expected and next offsets, once. No retry, no pause.
 * Mutants seen failing: (a) apply_window passes HC_ERR_RECORD to the state machine (FAILED: the
 * stage stops); (b) the re-applied batch keeps the refused post (refused forever: the offsets
 * never reach the end); (c) the dead letters written after the re-applied batch instead of
 * before (none is in topic.dlq when the offsets are). */
static void store_refusal_of_one_post_is_dead_lettered(void **state)
{
    fixture_t *f = *state;
    hc_fake_store_refuse_post(f->env.fake, "bad", 3);
    produce(f, 0, "a", 3);
    int64_t at0 = f->produced[0];
    hc_stage2_run_produce(f->env.producer, f->env.cfg.topic_partials, 0, "bad", 2);
    f->produced[0]++;
    produce(f, 1, "c", 5);
    int64_t at1 = f->produced[0];
    hc_stage2_run_produce(f->env.producer, f->env.cfg.topic_partials, 0, "bad", -1);
    f->produced[0]++;
    produce(f, 0, "a", -1);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    read_dead_letters(f); /* written before the batch that moved past them */
    assert_int_equal(f->ndl, 2);
    produce(f, 1, "c", 1);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_store_exact(f);
    assert_dead_letter(&f->dl[0], HC_PARTIAL_STORE_REFUSED, f->env.cfg.topic_partials, 0, at0);
    assert_dead_letter(&f->dl[1], HC_PARTIAL_STORE_REFUSED, f->env.cfg.topic_partials, 0, at1);
    /* each dead letter holds its own partial: replayed, they sum to the refused delta */
    hc_partial_t pt;
    char errstr[256];
    assert_int_equal(
        hc_partial_decode(f->dl[0].value, f->dl[0].value_len, &pt, errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(pt.post_id, "bad");
    assert_int_equal(pt.delta, 2);
    assert_int_equal(
        hc_partial_decode(f->dl[1].value, f->dl[1].value_len, &pt, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(pt.delta, -1);
    assert_invalid_metric(f, HC_PARTIAL_STORE_REFUSED, 2);

    /* Each refused batch (one, or two if the windows split the "bad" partials) is followed by
     * the same offsets without "bad", applied once; every batch holding "bad" was refused. */
    size_t n = hc_fake_store_batch_count(f->env.fake);
    int refusals = 0;
    for (size_t b = 0; b < n; b++) {
        const hc_fake_batch_t *refused = hc_fake_store_batch(f->env.fake, b);
        bool has_bad = false;
        for (size_t i = 0; i < refused->delta_count; i++) {
            has_bad |= refused->deltas[i].post_id_len == 3 &&
                       memcmp(refused->deltas[i].post_id, "bad", 3) == 0;
        }
        assert_int_equal(refused->returned, has_bad ? HC_ERR_RECORD : HC_OK);
        if (!has_bad) {
            continue;
        }
        refusals++;
        assert_false(refused->applied);
        assert_true(b + 1 < n);
        const hc_fake_batch_t *landed = hc_fake_store_batch(f->env.fake, b + 1);
        assert_int_equal(landed->returned, HC_OK);
        assert_true(landed->applied);
        assert_int_equal(landed->offset_count, refused->offset_count);
        for (size_t i = 0; i < refused->offset_count; i++) {
            assert_int_equal(landed->offsets[i].partition, refused->offsets[i].partition);
            assert_true(landed->offsets[i].expected == refused->offsets[i].expected);
            assert_true(landed->offsets[i].next == refused->offsets[i].next);
        }
        assert_int_equal(landed->delta_count, refused->delta_count - 1);
    }
    assert_true(refusals >= 1);
    assert_int_equal(hc_metric_get(f->metrics.store_error), 0);
}

/* ---- packed records (partial_pack.h) ---- */

typedef struct pack_post {
    const char *post;
    int64_t delta, events;
} pack_post_t;

/* A packed record of posts (given in the format's order), as stage 1 writes it. */
static size_t pack(const pack_post_t *posts, size_t n, uint8_t *buf, size_t size)
{
    hc_table_entry_t ents[8];
    const hc_table_entry_t *ptrs[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        ents[i] = (hc_table_entry_t){.post_id = posts[i].post,
                                     .post_id_len = (uint32_t)strlen(posts[i].post),
                                     .delta = posts[i].delta,
                                     .events = posts[i].events,
                                     .ts_min = 1000 + (int64_t)i,
                                     .ts_max = 2000};
        ptrs[i] = &ents[i];
    }
    size_t taken = 0;
    size_t len = hc_pack_encode(ptrs, n, &taken, buf, size);
    assert_int_equal(taken, n);
    return len;
}

/* A packed record among one-post ones: every post of it counts, once, and the record's offset
 * moves with the window like any other's. Mutant seen failing: on_message adds only the first
 * entry of a packed record (the record's other posts missing from the store). */
static void packed_record_counts_every_post(void **state)
{
    fixture_t *f = *state;
    static const pack_post_t posts[] = {{"a", 2, 3}, {"b", -1, 1}, {"c", 5, 5}, {"dd", 0, 2}};
    uint8_t buf[256];
    size_t len = pack(posts, 4, buf, sizeof(buf));
    produce(f, 0, "a", 1);
    produce_raw(f, 0, "batch", buf, len);
    for (size_t i = 0; i < 4; i++) {
        expect_post(f, posts[i].post, posts[i].delta);
    }
    produce(f, 1, "b", 4);
    produce(f, 0, "c", -2);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 0);
    /* posts, as stage 1 counts them: 3 one-post records and 4 posts of the packed one */
    assert_int_equal(hc_metric_get(f->metrics.partials_consumed), 7);
}

/* One entry breaks a rule: the record is dead-lettered whole (its original bytes), none of its
 * posts counts. Mutant seen failing: hc_pack_decode without the delta rule ("q" and "zz" stored).
 */
static void packed_record_with_a_bad_entry_is_dead_lettered_whole(void **state)
{
    static const pack_post_t posts[] = {{"q", 1, 1}, {"zz", 5, 1}};
    uint8_t buf[256];
    size_t len = pack(posts, 2, buf, sizeof(buf));
    poison_is_dead_lettered(*state, buf, len, HC_PARTIAL_DELTA_EXCEEDS_EVENTS);
}

/* Cut by one byte: undecodable, dead-lettered, nothing of it counted. */
static void truncated_packed_record_is_dead_lettered(void **state)
{
    static const pack_post_t posts[] = {{"q", 1, 1}, {"r", -1, 1}};
    uint8_t buf[256];
    size_t len = pack(posts, 2, buf, sizeof(buf));
    poison_is_dead_lettered(*state, buf, len - 1, HC_PARTIAL_UNDECODABLE);
}

/* A packed record that overflows even a window of its own (its posts' events sum past int64):
 * the open window is closed first, then the whole record is dead-lettered before any of it
 * counts (its other post "q" included). Mutant seen failing: overflow_check skipped (the stage
 * stops: "aggregation table: invalid"). */
static void overflowing_packed_record_is_dead_lettered_whole(void **state)
{
    fixture_t *f = *state;
    f->env.cfg.flush_ms = 5000; /* both in one window: all on partition 0, as above */
    produce(f, 0, "b", 2);
    static const pack_post_t posts[] = {{"q", 1, 1}, {"huge", 0, INT64_MAX}};
    uint8_t buf[256];
    size_t len = pack(posts, 2, buf, sizeof(buf));
    int64_t at = produce_raw(f, 0, "batch", buf, len);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f); /* no "q" */
    read_dead_letters(f);
    assert_int_equal(f->ndl, 1);
    assert_dead_letter(&f->dl[0], HC_PARTIAL_OVERFLOW, f->env.cfg.topic_partials, 0, at);
    assert_int_equal(f->dl[0].value_len, len);
    assert_invalid_metric(f, HC_PARTIAL_OVERFLOW, 1);
}

/* max.keys 2 and a record of 3 posts: the open window is stored first and the record counts
 * whole in the next (the table holds max.keys plus one record). Mutant seen failing: the table
 * sized max.keys only (the stage stops: "aggregation table: full"). */
static void packed_record_larger_than_max_keys_counts(void **state)
{
    fixture_t *f = *state;
    f->env.cfg.max_keys = 2;
    static const pack_post_t posts[] = {{"x", 1, 1}, {"y", 2, 2}, {"z", 3, 3}};
    uint8_t buf[256];
    size_t len = pack(posts, 3, buf, sizeof(buf));
    produce(f, 0, "a", 1);
    produce(f, 0, "b", 1);
    produce_raw(f, 0, "batch", buf, len);
    for (size_t i = 0; i < 3; i++) {
        expect_post(f, posts[i].post, posts[i].delta);
    }
    produce(f, 0, "a", 1);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 0);
}

/* A partial of post (delta likes, |delta| events) signed with kr (core/partial_auth.h), or
 * with the given hotcount-auth value when auth is not NULL (forged); counted only when signed
 * by kr. */
static int64_t produce_signed(fixture_t *f, const hc_auth_keyring_t *kr, const char *auth,
                              int32_t partition, const char *post, int64_t delta)
{
    char json[HC_PARTIAL_MAX_BYTES];
    int64_t events = delta < 0 ? -delta : delta;
    int len = snprintf(json, sizeof(json),
                       "{\"post_id\":\"%s\",\"delta\":%" PRId64 ",\"events\":%" PRId64
                       ",\"ts_min\":null,\"ts_max\":null}",
                       post, delta, events ? events : 1);
    char sig[HC_AUTH_VALUE_MAX + 1];
    if (!auth) {
        hc_auth_sign(kr, NULL, 0, json, (size_t)len, sig);
        auth = sig;
        expect_post(f, post, delta);
    }
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    if (auth[0]) {
        rd_kafka_header_add(hdrs, HC_AUTH_HEADER, -1, auth, -1);
    }
    assert_int_equal(rd_kafka_producev(f->env.producer, RD_KAFKA_V_TOPIC(f->env.cfg.topic_partials),
                                       RD_KAFKA_V_PARTITION(partition),
                                       RD_KAFKA_V_KEY(post, strlen(post)),
                                       RD_KAFKA_V_VALUE(json, (size_t)len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                       RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(f->env.producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    return f->produced[partition]++;
}

/* Issue 25: with partials.auth.key.file set, a partial without a signature, with a wrong one,
 * or signed under a key id the stage does not hold is dead-lettered partial_unauthenticated
 * before it counts (a delta of 1000 each); signed ones count, under either key of a rotation.
 * mutant: stage 2 without the check (post "a" counts 3000 more) */
static void unsigned_partials_are_dead_lettered_with_a_key(void **state)
{
    fixture_t *f = *state;
    char path[] = "/tmp/hc-test-partials-key.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "new 1111111111111111111111111111111111111111111111111111111111111111\n"
                       "old 2222222222222222222222222222222222222222222222222222222222222222\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char errstr[256];
    assert_int_equal(
        hc_config_set(&f->env.cfg, "partials.auth.key.file", path, errstr, sizeof(errstr)), HC_OK);
    hc_auth_keyring_t both, old_only, stranger;
    assert_int_equal(hc_auth_keyring_parse(&both, text, strlen(text), errstr, sizeof(errstr)),
                     HC_OK);
    const char *o = "old 2222222222222222222222222222222222222222222222222222222222222222\n";
    assert_int_equal(hc_auth_keyring_parse(&old_only, o, strlen(o), errstr, sizeof(errstr)), HC_OK);
    const char *x = "new 3333333333333333333333333333333333333333333333333333333333333333\n";
    assert_int_equal(hc_auth_keyring_parse(&stranger, x, strlen(x), errstr, sizeof(errstr)), HC_OK);
    produce_signed(f, &both, NULL, 0, "a", 3);
    produce_signed(f, &old_only, NULL, 1, "b", -1); /* the rotation's old key still verifies */
    int64_t at[3];
    at[0] = produce_signed(f, &both, "", 0, "a", 1000); /* no signature */
    at[1] = produce_signed(f, &both,
                           "new:00000000000000000000000000000000000000000000000000000000000000"
                           "00",
                           0, "a", 1000);
    char forged[HC_AUTH_VALUE_MAX + 1];
    const char *v = "{\"post_id\":\"a\",\"delta\":1000,\"events\":1000,\"ts_min\":null,"
                    "\"ts_max\":null}";
    hc_auth_sign(&stranger, NULL, 0, v, strlen(v), forged); /* id "new", another secret */
    at[2] = produce_signed(f, &both, forged, 0, "a", 1000);
    produce_signed(f, &both, NULL, 0, "a", 2);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    unlink(path);
    assert_store_exact(f);
    read_dead_letters(f);
    assert_int_equal(f->ndl, 3);
    for (int i = 0; i < 3; i++) {
        assert_dead_letter(&f->dl[i], HC_PARTIAL_UNAUTHENTICATED, f->env.cfg.topic_partials, 0,
                           at[i]);
    }
    assert_invalid_metric(f, HC_PARTIAL_UNAUTHENTICATED, 3);
}

/* A key file that is no key file stops the stage at its start, naming the path, not a byte. */
static void a_bad_key_file_stops_stage2_at_start(void **state)
{
    fixture_t *f = *state;
    char path[] = "/tmp/hc-test-partials-key.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "k1 not-hex-SECRETSECRET\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char errstr[512];
    assert_int_equal(
        hc_config_set(&f->env.cfg, "partials.auth.key.file", path, errstr, sizeof(errstr)), HC_OK);
    hc_stage2_t *s2 = NULL;
    assert_int_equal(hc_stage2_new(&f->env.cfg, "t", &f->metrics, &s2, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    unlink(path);
    assert_null(s2);
    assert_non_null(strstr(errstr, path));
    assert_null(strstr(errstr, "SECRET"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(packed_record_counts_every_post, setup, teardown),
        cmocka_unit_test_setup_teardown(packed_record_with_a_bad_entry_is_dead_lettered_whole,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_packed_record_is_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(overflowing_packed_record_is_dead_lettered_whole, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(packed_record_larger_than_max_keys_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_bytes_are_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(control_char_post_id_is_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(delta_over_events_is_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(ts_min_after_ts_max_is_dead_lettered, setup, teardown),
        cmocka_unit_test_setup_teardown(a_record_filling_the_event_total_closes_the_window, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unsigned_partials_are_dead_lettered_with_a_key, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_bad_key_file_stops_stage2_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(
            overflowing_pair_closes_the_window_and_the_store_refuses_the_second, setup, teardown),
        cmocka_unit_test_setup_teardown(store_refusal_of_one_post_is_dead_lettered, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
