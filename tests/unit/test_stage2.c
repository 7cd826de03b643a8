/* Stage 2's error paths, end to end and without servers: a real stage 2 on librdkafka's mock
 * cluster (hc_mock_start), reading partials the test produces into it, over the fake store of
 * tests/support/fake_store.c, whose next batches are scripted to fail.
 *
 * Every test checks, besides its own claim, that the final store is exact: each post's count is
 * the sum of its partials' deltas, once. Each names the mutant of src/stage/stage2.c it was
 * seen to fail on. Waits are for a condition (a batch arrived, offsets reached), bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_store.h"
#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/partial.h"
#include "hotcount/stage.h"
#include "stage2_impl.h"
#include "stage2_run.h"

#define PARTITIONS 2
#define WAIT_MS 30000

typedef struct fixture {
    hc_stage2_env_t env; /* config, mock cluster, fake store, the test's producer */
    hc_metrics_t metrics;
    /* the expected store: every produced partial's delta, per post */
    char posts[16][8];
    int64_t want[16];
    int nposts;
    int64_t produced[PARTITIONS]; /* partials produced per partition: the final offsets */
    hc_stage2_run_t run;          /* the stage under test, on its own thread */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    static const char *const kv[][2] = {
        {"flush.ms", "100"}, {"instance.id", "t"}, {"topic.partials.partitions", "2"}};
    hc_stage2_env_start(&f->env, kv, sizeof(kv) / sizeof(kv[0]), 1);
    hc_stage2_env_ready(&f->env);
    /* a retry every 300, 600, 1200 ms: long enough for a fetch to land in between */
    f->env.cfg.timeouts.backoff_min_ms = 300;
    f->env.cfg.timeouts.backoff_max_ms = 1200;
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

/* One partial of `post` into `partition`, delivered before this returns; counted in the
 * expected store. */
static void produce(fixture_t *f, int32_t partition, const char *post, int64_t delta)
{
    hc_stage2_run_produce(f->env.producer, f->env.cfg.topic_partials, partition, post, delta);
    f->produced[partition]++;
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

/* Waits until every partition's stored offset is the count of partials produced into it. */
static void wait_all_stored(fixture_t *f)
{
    int64_t want[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++) {
        want[p] = f->produced[p] ? f->produced[p] : HC_OFFSET_NONE;
    }
    if (!hc_fake_store_wait_offsets(f->env.fake, f->env.cfg.group_stage2, f->env.cfg.topic_partials,
                                    want, PARTITIONS, WAIT_MS)) {
        fail_msg("stored offsets did not reach %lld/%lld: %lld/%lld", (long long)want[0],
                 (long long)want[1],
                 (long long)hc_fake_store_offset(f->env.fake, f->env.cfg.group_stage2,
                                                 f->env.cfg.topic_partials, 0),
                 (long long)hc_fake_store_offset(f->env.fake, f->env.cfg.group_stage2,
                                                 f->env.cfg.topic_partials, 1));
    }
}

/* Every post's stored count is the sum of its deltas, once, and no other post is stored. */
static void assert_store_exact(fixture_t *f)
{
    for (int i = 0; i < f->nposts; i++) {
        int64_t got = hc_fake_store_likes(f->env.fake, f->posts[i], strlen(f->posts[i]));
        if (got != f->want[i]) {
            fail_msg("post %s: stored %lld, produced %lld", f->posts[i], (long long)got,
                     (long long)f->want[i]);
        }
    }
    assert_int_equal(hc_fake_store_posts(f->env.fake), (size_t)f->nposts);
}

static void assert_same_batch(const hc_fake_batch_t *a, const hc_fake_batch_t *b)
{
    assert_int_equal(a->offset_count, b->offset_count);
    for (size_t i = 0; i < a->offset_count; i++) {
        assert_int_equal(a->offsets[i].partition, b->offsets[i].partition);
        assert_true(a->offsets[i].expected == b->offsets[i].expected);
        assert_true(a->offsets[i].next == b->offsets[i].next);
    }
    assert_int_equal(a->delta_count, b->delta_count);
    for (size_t i = 0; i < a->delta_count; i++) {
        assert_int_equal(a->deltas[i].post_id_len, b->deltas[i].post_id_len);
        assert_memory_equal(a->deltas[i].post_id, b->deltas[i].post_id, a->deltas[i].post_id_len);
        assert_int_equal(a->deltas[i].delta, b->deltas[i].delta);
    }
}

static const hc_store_offset_t *batch_offset(const hc_fake_batch_t *b, int32_t partition)
{
    for (size_t i = 0; i < b->offset_count; i++) {
        if (b->offsets[i].partition == partition) {
            return &b->offsets[i];
        }
    }
    return NULL;
}

/* A store outage: the stage pauses its partitions and retries the same batch (same deltas,
 * same expected offsets) until it lands, once.
 * Mutants seen failing: (a) enter() does not pause on RETRY (a partial produced during the
 * retry is fetched and turned away: turned_away > 0); (b) apply_window moves each partition's
 * start on every outcome, not only HC_OK (the retry's expected offsets differ); (c) a
 * transient outcome drops the window like a landed one (after_apply: TRANSIENT -> IDLE; the
 * store misses those likes). */
static void transient_error_retries_the_same_batch_paused(void **state)
{
    fixture_t *f = *state;
    produce(f, 0, "a", 3);
    produce(f, 0, "b", 2);
    produce(f, 0, "a", 1);
    produce(f, 1, "c", 5);
    produce(f, 1, "c", -1);
    hc_fake_store_script(f->env.fake, HC_FAKE_TRANSIENT);
    hc_fake_store_script(f->env.fake, HC_FAKE_TRANSIENT);
    hc_fake_store_script(f->env.fake, HC_FAKE_TRANSIENT);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    /* after the second failure the partitions have been paused since the first: a partial
     * produced now must not reach the stage before the batch lands */
    assert_true(hc_fake_store_wait_batches(f->env.fake, 2, WAIT_MS));
    produce(f, 0, "b", 7);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);

    assert_true(hc_fake_store_batch_count(f->env.fake) >= 5);
    const hc_fake_batch_t *first = hc_fake_store_batch(f->env.fake, 0);
    for (size_t i = 0; i < 4; i++) {
        const hc_fake_batch_t *b = hc_fake_store_batch(f->env.fake, i);
        assert_int_equal(b->returned, i < 3 ? HC_ERR_TRANSIENT : HC_OK);
        assert_int_equal(b->applied, i == 3);
        assert_same_batch(first, b);
    }
    assert_int_equal(hc_stage2_turned_away(f->run.s2), 0);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
}

/* A lost compare-and-set: another owner stored the first three partials of partition 0 just
 * before the stage's batch. The window is dropped, the consumer re-seeks to the stored offset
 * (3), and the partials after it are applied once.
 * Mutants seen failing: (a) REREAD re-assigns at the in-memory positions instead of the
 * store's (the stage's start stays HC_OFFSET_NONE: it conflicts forever); (b) a conflict is
 * retried like an outage (after_apply: CONFLICT -> RETRY: the same refused batch forever). */
static void lost_cas_drops_the_window_and_rereads(void **state)
{
    fixture_t *f = *state;
    produce(f, 0, "a", 1);
    produce(f, 0, "b", 2);
    produce(f, 0, "a", 3);
    produce(f, 0, "c", 4);
    produce(f, 0, "b", 5);
    produce(f, 0, "a", 6);
    hc_store_offset_t other_offsets[] = {{0, HC_OFFSET_NONE, 3}};
    hc_store_delta_t other_deltas[] = {{"a", 1, 4}, {"b", 1, 2}};
    hc_store_batch_t other = {.group = f->env.cfg.group_stage2,
                              .topic = f->env.cfg.topic_partials,
                              .offsets = other_offsets,
                              .offset_count = 1,
                              .deltas = other_deltas,
                              .delta_count = 2};
    hc_fake_store_lose_cas(f->env.fake, &other);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    size_t n = hc_fake_store_batch_count(f->env.fake);
    assert_true(n >= 2);
    const hc_fake_batch_t *lost = hc_fake_store_batch(f->env.fake, 0);
    assert_int_equal(lost->script, HC_FAKE_LOSE_CAS);
    assert_int_equal(lost->returned, HC_ERR_CONFLICT);
    assert_false(lost->applied);
    /* every later batch of partition 0 starts from what the store held, never from NONE */
    bool reread = false;
    for (size_t i = 1; i < n; i++) {
        const hc_store_offset_t *off = batch_offset(hc_fake_store_batch(f->env.fake, i), 0);
        assert_non_null(off);
        assert_true(off->expected != HC_OFFSET_NONE);
        reread |= off->expected == 3;
        assert_int_equal(hc_fake_store_batch(f->env.fake, i)->returned, HC_OK);
    }
    assert_true(reread);
    assert_store_exact(f);
}

/* An ambiguous commit that did land (the store applied the batch, then reported an outage):
 * the stage retries the same batch, which loses the compare-and-set; nothing is counted
 * twice and the stage goes on from the stored offsets.
 * Mutants seen failing: (a) apply_window moves start on every outcome (the retry's expected
 * offset is the applied next: the compare-and-set passes and the likes count twice); (b) the
 * retry re-reads the stored offsets into start before applying again (same double count). */
static void ambiguous_commit_retry_loses_cas_counts_once(void **state)
{
    fixture_t *f = *state;
    produce(f, 0, "a", 2);
    produce(f, 0, "b", 1);
    produce(f, 1, "a", 5);
    produce(f, 1, "d", 1);
    hc_fake_store_script(f->env.fake, HC_FAKE_APPLY_TRANSIENT);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    assert_true(hc_fake_store_wait_batches(f->env.fake, 2, WAIT_MS));
    wait_all_stored(f);
    /* one more partial after the refused retry: the stage goes on from the stored offsets */
    produce(f, 0, "b", 3);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_store_exact(f); /* first: the claim is that nothing counts twice */
    const hc_fake_batch_t *landed = hc_fake_store_batch(f->env.fake, 0);
    const hc_fake_batch_t *retry = hc_fake_store_batch(f->env.fake, 1);
    assert_int_equal(landed->script, HC_FAKE_APPLY_TRANSIENT);
    assert_true(landed->applied);
    assert_int_equal(landed->returned, HC_ERR_TRANSIENT);
    assert_same_batch(landed, retry);
    assert_false(retry->applied);
    assert_int_equal(retry->returned, HC_ERR_CONFLICT);
}

/* A stage 2 started while its store is down (issue 16, item 5): the open and then the offset
 * reads fail; the stage neither exits nor consumes, is not ready meanwhile, and once the store
 * answers it counts everything exactly.
 * Mutants seen failing: (a) hc_stage2_new_ops fails on the transient open, as before (the start
 * fails: "stage 2: fake store 0: scripted outage"); (b) assign_from_store returns its first
 * transient read instead of retrying (the run stops with "transient"). */
static void start_while_store_down_waits_and_retries(void **state)
{
    fixture_t *f = *state;
    produce(f, 0, "a", 2);
    produce(f, 1, "b", 1);
    hc_fake_store_fail_opens(f->env.fake, 2);
    hc_fake_store_fail_reads(f->env.fake, 3);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    assert_true(hc_fake_store_wait_reads(f->env.fake, 2, WAIT_MS)); /* still down */
    assert_false(hc_metrics_is_ready(&f->metrics, hc_now_ms(), f->env.cfg.flush_ms));
    assert_int_equal(hc_fake_store_batch_count(f->env.fake), 0);
    wait_all_stored(f);
    produce(f, 0, "a", 1); /* and it keeps running */
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
}

/* HELD partials on partition 0 before the start, over six posts, sent in one produce request:
 * the mock cluster answers a fetch with one message set, so one fetch brings them all, and the
 * loop's first batch call (after the poll that waited for the first) holds the rest while
 * max.keys 2 fills the window at the third: the window is applied from inside on_message, with
 * the batch held. */
#define HELD 24
static void produce_held(fixture_t *f)
{
    static const char *const posts[] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < HELD; i++) {
        const char *post = posts[i % 6];
        hc_table_entry_t ent = {.post_id = post,
                                .post_id_len = (uint32_t)strlen(post),
                                .delta = i + 1,
                                .events = i + 1,
                                .ts_min = HC_TS_NONE,
                                .ts_max = HC_TS_NONE};
        char buf[HC_PARTIAL_MAX_BYTES];
        size_t len = hc_partial_encode(&ent, buf, sizeof(buf));
        assert_true(len > 0);
        assert_int_equal(
            rd_kafka_producev(f->env.producer, RD_KAFKA_V_TOPIC(f->env.cfg.topic_partials),
                              RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(post, 1),
                              RD_KAFKA_V_VALUE(buf, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END),
            RD_KAFKA_RESP_ERR_NO_ERROR);
        f->produced[0]++;
        f->want[i % 6] += i + 1;
        snprintf(f->posts[i % 6], sizeof(f->posts[0]), "%s", post);
    }
    f->nposts = 6;
    assert_int_equal(rd_kafka_flush(f->env.producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    f->env.cfg.max_keys = 2;
}

/* The full window's batch (the first two partials) loses the compare-and-set: another owner
 * stored exactly those two. The stage re-reads the store's offset (2) and seeks there, while the
 * loop holds the partials from offset 3 on; they must not reach the stage after the seek.
 * Mutant seen failing: keep_held (hc_stage_loop_forget drops nothing): the held partials from 3
 * on are applied from the stored 2 without the one at 2, then fetched again (a wrong count). */
static void full_window_refused_mid_batch_drops_the_held_partials(void **state)
{
    fixture_t *f = *state;
    produce_held(f);
    hc_store_offset_t other_offsets[] = {{0, HC_OFFSET_NONE, 2}};
    hc_store_delta_t other_deltas[] = {{"a", 1, 1}, {"b", 1, 2}};
    hc_store_batch_t other = {.group = f->env.cfg.group_stage2,
                              .topic = f->env.cfg.topic_partials,
                              .offsets = other_offsets,
                              .offset_count = 1,
                              .deltas = other_deltas,
                              .delta_count = 2};
    hc_fake_store_lose_cas(f->env.fake, &other);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    const hc_fake_batch_t *lost = hc_fake_store_batch(f->env.fake, 0);
    assert_int_equal(lost->returned, HC_ERR_CONFLICT);
    assert_int_equal(batch_offset(lost, 0)->next, 2);
    assert_store_exact(f);
}

/* The full window's batch meets an outage: the stage pauses its partitions to retry the same
 * batch, while the loop holds the partials from offset 3 on. Paused partitions deliver nothing:
 * the held partials are given back (dropped, the partition sought back to 3) before the pause,
 * so none is turned away, and all are counted once after the retry lands.
 * Mutant seen failing: a give-back that drops nothing (hc_stage_loop_give_back returns at once):
 * the held partials reach the paused stage and are turned away (turned_away > 0). */
static void full_window_outage_mid_batch_gives_the_held_partials_back(void **state)
{
    fixture_t *f = *state;
    produce_held(f);
    hc_fake_store_script(f->env.fake, HC_FAKE_TRANSIENT);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);

    const hc_fake_batch_t *failed = hc_fake_store_batch(f->env.fake, 0);
    assert_int_equal(failed->returned, HC_ERR_TRANSIENT);
    assert_int_equal(batch_offset(failed, 0)->next, 2);
    assert_int_equal(hc_stage2_turned_away(f->run.s2), 0);
    hc_stage2_run_destroy(&f->run);
    assert_store_exact(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(transient_error_retries_the_same_batch_paused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(lost_cas_drops_the_window_and_rereads, setup, teardown),
        cmocka_unit_test_setup_teardown(ambiguous_commit_retry_loses_cas_counts_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(start_while_store_down_waits_and_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(full_window_refused_mid_batch_drops_the_held_partials,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(full_window_outage_mid_batch_gives_the_held_partials_back,
                                        setup, teardown),
    };
    if (getenv("HC_TEST_FILTER")) { /* one test by name: the keep_held mutant's run */
        cmocka_set_test_filter(getenv("HC_TEST_FILTER"));
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
