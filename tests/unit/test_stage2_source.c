/* Stage 2 refuses a late write of a stale stage-1 transaction (docs/RELIABILITY.md, "Late
 * writes"; hotcount/source_check.h): a real stage 2 on librdkafka's mock cluster over the fake
 * store (tests/support/fake_store.c) reads partials carrying hotcount-window headers laid out
 * as KAFKA-17754 would leave them in the log (a write of aborted window N landing in the
 * committed window N+1 of the same producer epoch), and must count every raw offset once: the
 * stale partial goes to topic.dlq with reason source_overlap and is counted in
 * hotcount_partials_invalid_total. Both tests fail on -DHC_MUTANT=no_endtxn_defence (the late
 * write is counted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_store.h"
#include "hotcount/kafka.h"
#include "hotcount/partial_check.h"
#include "hotcount/source_check.h"
#include "hotcount/topic_read.h"
#include "stage2_run.h"

#define PARTITIONS 2
#define WAIT_MS 30000
#define PRODUCER "00000000000000aa"

typedef struct fixture {
    hc_stage2_env_t env;
    hc_metrics_t metrics;
    int64_t produced[PARTITIONS];
    hc_stage2_run_t run;
    int dead_letters;
    char dl_error[64];
    char dl_source[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    static const char *const kv[][2] = {{"flush.ms", "100"},
                                        {"instance.id", "t"},
                                        {"topic.partials.partitions", "2"},
                                        {"topic.dlq.partitions", "1"},
                                        /* the mock keeps a member that left until its session
                                         * times out: the restart joins within 6 s */
                                        {"kafka.consumer.session.timeout.ms", "6000"}};
    hc_stage2_env_start(&f->env, kv, sizeof(kv) / sizeof(kv[0]), 1);
    hc_stage2_env_ready(&f->env);
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

/* A partial of post (delta likes) from window `window` of PRODUCER, which read `ranges` (the
 * header's range text), into partials partition 0. Returns its offset. */
static int64_t produce(fixture_t *f, const char *post, int64_t delta, int64_t window,
                       const char *ranges)
{
    char value[160], hdr[160];
    int len = snprintf(value, sizeof(value),
                       "{\"post_id\":\"%s\",\"delta\":%" PRId64 ",\"events\":%" PRId64
                       ",\"ts_min\":null,\"ts_max\":null}",
                       post, delta, delta < 0 ? -delta : delta);
    int hlen = snprintf(hdr, sizeof(hdr), "1 %s 1000 %" PRId64 " %s", PRODUCER, window, ranges);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    rd_kafka_header_add(hdrs, HC_SOURCE_HEADER, -1, hdr, hlen);
    assert_int_equal(rd_kafka_producev(f->env.producer, RD_KAFKA_V_TOPIC(f->env.cfg.topic_partials),
                                       RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_KEY(post, strlen(post)),
                                       RD_KAFKA_V_VALUE(value, (size_t)len),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                       RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(f->env.producer, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    return f->produced[0]++;
}

static void wait_all_stored(fixture_t *f)
{
    int64_t want[PARTITIONS] = {f->produced[0], HC_OFFSET_NONE};
    if (!hc_fake_store_wait_offsets(f->env.fake, f->env.cfg.group_stage2, f->env.cfg.topic_partials,
                                    want, 1, WAIT_MS)) {
        fail_msg("stored offset did not reach %" PRId64 ": %" PRId64, want[0],
                 hc_fake_store_offset(f->env.fake, f->env.cfg.group_stage2,
                                      f->env.cfg.topic_partials, 0));
    }
}

static void assert_likes(fixture_t *f, const char *post, int64_t want)
{
    int64_t got = hc_fake_store_likes(f->env.fake, post, strlen(post));
    if (got != want) {
        fail_msg("post %s: stored %" PRId64 ", want %" PRId64, post, got, want);
    }
}

static void header_copy(const rd_kafka_message_t *rkm, const char *name, char *out, size_t size)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val = NULL;
    size_t len = 0;
    out[0] = '\0';
    if (rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        rd_kafka_header_get_last(hdrs, name, &val, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        snprintf(out, size, "%.*s", (int)len, (const char *)val);
    }
}

static hc_err_t on_dead_letter(const rd_kafka_message_t *rkm, void *opaque)
{
    fixture_t *f = opaque;
    f->dead_letters++;
    header_copy(rkm, "hotcount-error", f->dl_error, sizeof(f->dl_error));
    header_copy(rkm, "hotcount-source", f->dl_source, sizeof(f->dl_source));
    return HC_OK;
}

static void read_dead_letters(fixture_t *f)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(&f->env.cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    assert_non_null(rk);
    hc_topic_range_t range = {0, HC_OFFSET_NONE, INT64_MAX};
    f->dead_letters = 0;
    if (hc_topic_read_ranges(rk, f->env.cfg.topic_dlq, &range, 1, on_dead_letter, f, errstr,
                             sizeof(errstr)) != HC_OK) {
        fail_msg("reading %s: %s", f->env.cfg.topic_dlq, errstr);
    }
    rd_kafka_destroy(rk);
}

/* Window 4 read raw partition 0 [100, 110) and was aborted; window 5 re-read it as
 * [100, 114) and committed; a write of window 4 (post a, 3 likes) delayed in the network
 * landed in window 5's transaction after its partials. Then window 6 goes on from 114.
 * Mutant seen failing (no_endtxn_defence): a is stored as 8. */
static void late_write_after_the_next_window_is_dead_lettered(void **state)
{
    fixture_t *f = *state;
    produce(f, "a", 5, 5, "0:100+14");
    produce(f, "b", 2, 5, "0:100+14");
    int64_t late = produce(f, "a", 3, 4, "0:100+10");
    produce(f, "c", 1, 6, "0:114+3");
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_likes(f, "a", 5);
    assert_likes(f, "b", 2);
    assert_likes(f, "c", 1);
    read_dead_letters(f);
    assert_int_equal(f->dead_letters, 1);
    assert_string_equal(f->dl_error, "source_overlap");
    char source[128];
    snprintf(source, sizeof(source), "%s/0/%" PRId64, f->env.cfg.topic_partials, late);
    assert_string_equal(f->dl_source, source);
    assert_int_equal(hc_metric_get(f->metrics.partials_invalid[HC_PARTIAL_SOURCE_OVERLAP]), 1);
}

/* A window's sibling partials straddle a stage-2 restart: the restarted stage 2 has no memory
 * of the first ones (it starts from the store's offset) and takes the rest, while the late
 * write after them is still refused, from the memory of this run.
 * Mutant seen failing (no_endtxn_defence): the late write counts, a is 11. */
static void siblings_across_a_restart_count_and_the_late_write_does_not(void **state)
{
    fixture_t *f = *state;
    produce(f, "a", 4, 5, "0:100+14");
    produce(f, "b", 1, 5, "0:100+14");
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    produce(f, "a", 3, 5, "0:100+14"); /* more posts of window 5 on this partition */
    produce(f, "a", 4, 4, "0:100+10"); /* window 4's late write */
    hc_stage2_run_start(&f->run, &f->env.cfg, "t2", &f->metrics); /* another member: no wait */
    wait_all_stored(f);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);

    assert_likes(f, "a", 7);
    assert_likes(f, "b", 1);
    read_dead_letters(f);
    assert_int_equal(f->dead_letters, 1);
    assert_string_equal(f->dl_error, "source_overlap");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(late_write_after_the_next_window_is_dead_lettered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(siblings_across_a_restart_count_and_the_late_write_does_not,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
