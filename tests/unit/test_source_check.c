/* Stage 2's provenance check (hotcount/source_check.h): the hotcount-window header stage 1 puts
 * on every partial, and the memory that refuses a partial whose raw range overlaps one taken
 * before on its partials partition. Pure: no Kafka.
 *
 * The late-write cases are the ones docs/RELIABILITY.md ("Late writes") argues through: window
 * N of a producer is aborted and re-read as window N+1 from the same offsets, and a write of N
 * delayed in the network lands after N+1's own partials (refused: no double count) or before
 * them (N+1's overlapping partials refused: a shortfall in the dead-letter topic, never a
 * double count). The overlap tests fail on -DHC_MUTANT=no_endtxn_defence (every partial
 * passes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hotcount/manifest.h"
#include "hotcount/source_check.h"

#define PRODUCER_A "0123456789abcdef"
#define PRODUCER_B "fedcba9876543210"

typedef struct fixture {
    hc_source_check_t *sc;
    char errstr[256];
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    f.sc = hc_source_check_new();
    assert_non_null(f.sc);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    hc_source_check_destroy(f->sc);
    return 0;
}

/* A header value: producer (16 hex digits), incarnation 1000, window, ranges text. */
static const char *hdr(char *buf, size_t size, const char *producer, int64_t window,
                       const char *ranges)
{
    snprintf(buf, size, "1 %s 1000 %" PRId64 " %s", producer, window, ranges);
    return buf;
}

static hc_partial_reason_t check(fixture_t *f, int32_t q, const char *value)
{
    f->errstr[0] = '\0';
    return hc_source_check(f->sc, q, value, value ? strlen(value) : 0, f->errstr,
                           sizeof(f->errstr));
}

/* check, and when it passes, take the partial into the open batch */
static hc_partial_reason_t take(fixture_t *f, int32_t q, const char *value)
{
    hc_partial_reason_t r = check(f, q, value);
    if (r == HC_PARTIAL_OK) {
        assert_int_equal(hc_source_accept(f->sc, q, value, value ? strlen(value) : 0), HC_OK);
    }
    return r;
}

/* mutant: encode forgets a range or writes first/next instead of first+count */
static void encode_names_the_window_and_its_ranges(void **state)
{
    fixture_t *f = *state;
    hc_manifest_t win;
    hc_manifest_init(&win);
    for (int64_t o = 100; o < 110; o++) {
        assert_int_equal(hc_manifest_record(&win, 0, o), HC_OK);
    }
    assert_int_equal(hc_manifest_record(&win, 3, 5), HC_OK);
    char buf[256];
    size_t len = hc_source_encode("hotcount-stage1-a", 1764600000123, 7, &win, buf, sizeof(buf));
    assert_true(len > 0 && len < hc_source_encoded_max(&win));
    buf[len] = '\0';
    /* "1 " + 16 hex + the rest */
    assert_int_equal(strncmp(buf, "1 ", 2), 0);
    assert_string_equal(buf + 18, " 1764600000123 7 0:100+10,3:5+1");
    /* the same transactional id hashes the same (a stable, unkeyed hash) */
    char again[256];
    size_t len2 = hc_source_encode("hotcount-stage1-a", 1, 1, &win, again, sizeof(again));
    assert_true(len2 > 18);
    assert_memory_equal(buf, again, 18);
    /* too small a buffer: 0, never a cut value */
    char small[30];
    assert_int_equal(hc_source_encode("x", 1, 1, &win, small, sizeof(small)), 0);
    /* and stage 2 reads it: the window's siblings pass */
    assert_int_equal(take(f, 0, buf), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, buf), HC_PARTIAL_OK);
    hc_manifest_fini(&win);
}

/* mutant: a sibling partial of the window just taken (same window, same ranges) is refused */
static void siblings_of_one_window_pass_across_batches(void **state)
{
    fixture_t *f = *state;
    char a[128];
    hdr(a, sizeof(a), PRODUCER_A, 5, "0:0+10,1:40+2");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(take(f, 2, a), HC_PARTIAL_OK);
    }
    hc_source_commit(f->sc); /* the batch landed mid-window: the next batch has more siblings */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(take(f, 2, a), HC_PARTIAL_OK);
    }
}

/* mutant: windows in order (contiguous ranges, another producer taking a partition over) are
 * refused */
static void windows_in_order_pass(void **state)
{
    fixture_t *f = *state;
    char h[128];
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 1, "0:0+10,1:0+5")), HC_PARTIAL_OK);
    hc_source_commit(f->sc);
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:10+10")), HC_PARTIAL_OK);
    /* raw partition 1 moved to producer B, which starts at the committed offset 5 */
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_B, 1, "1:5+7")), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 3, "0:20+1")), HC_PARTIAL_OK);
}

/* Window N (aborted) re-read as N+1 from the same offsets; N's late write lands after N+1's
 * partials. mutant (no_endtxn_defence): the late write passes and is counted twice. */
static void late_write_after_the_next_window_is_refused(void **state)
{
    fixture_t *f = *state;
    char n[128], n1[128];
    hdr(n, sizeof(n), PRODUCER_A, 4, "0:100+10");
    hdr(n1, sizeof(n1), PRODUCER_A, 5, "0:100+14");
    assert_int_equal(take(f, 1, n1), HC_PARTIAL_OK);
    assert_int_equal(take(f, 1, n1), HC_PARTIAL_OK);
    assert_int_equal(check(f, 1, n), HC_PARTIAL_SOURCE_OVERLAP);
    assert_non_null(strstr(f->errstr, "raw partition 0 [100, 110)"));
    /* also once N+1 is in the store */
    hc_source_commit(f->sc);
    assert_int_equal(check(f, 1, n), HC_PARTIAL_SOURCE_OVERLAP);
    /* and from a later window of the same producer that starts inside it */
    char b[128];
    assert_int_equal(check(f, 1, hdr(b, sizeof(b), PRODUCER_A, 9, "0:105+30")),
                     HC_PARTIAL_SOURCE_OVERLAP);
}

/* N's late write lands before N+1's own partials on the partition: it is taken (nothing shows
 * it is stale yet), and N+1's partials there are refused instead, because their range starts
 * inside N's. A shortfall that the dead-letter topic holds, never a double count. mutant: both
 * count. */
static void late_write_before_the_next_window_refuses_the_next(void **state)
{
    fixture_t *f = *state;
    char n[128], n1[128], n2[128];
    hdr(n, sizeof(n), PRODUCER_A, 4, "0:100+10");
    hdr(n1, sizeof(n1), PRODUCER_A, 5, "0:100+6"); /* N+1 read less than N */
    hdr(n2, sizeof(n2), PRODUCER_A, 6, "0:106+10");
    assert_int_equal(take(f, 1, n), HC_PARTIAL_OK);
    assert_int_equal(check(f, 1, n1), HC_PARTIAL_SOURCE_OVERLAP);
    /* N+2 starts inside N's range ([106, 110) was counted by N's late write): refused too */
    assert_int_equal(check(f, 1, n2), HC_PARTIAL_SOURCE_OVERLAP);
    /* the first window past N's end passes */
    assert_int_equal(take(f, 1, hdr(n2, sizeof(n2), PRODUCER_A, 7, "0:110+3")), HC_PARTIAL_OK);
}

/* mutant: the window id alone decides "sibling": a partial claiming the window with another
 * range passes */
static void same_window_with_another_range_is_refused(void **state)
{
    fixture_t *f = *state;
    char h[128];
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:0+10")), HC_PARTIAL_OK);
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:0+11")),
                     HC_PARTIAL_SOURCE_OVERLAP);
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:0+10,1:0+1")),
                     HC_PARTIAL_OK); /* raw partition 1 is new here: only 0 is compared */
}

/* One range of the partial overlapping is enough. mutant: only the first range is compared. */
static void any_overlapping_range_refuses_the_partial(void **state)
{
    fixture_t *f = *state;
    char h[128];
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 1, "0:0+10,5:0+10")), HC_PARTIAL_OK);
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:10+1,5:9+2")),
                     HC_PARTIAL_SOURCE_OVERLAP);
}

/* Issue 25, item 1: a header is a claim anyone who may write likes.partials can make. A legal
 * no-op partial claiming raw offsets around 10^15 under a writer of its own is taken (it
 * decides nothing) and blocks no later partial of the real writer, pending or stored; nor do
 * claims under many made-up writers, which only take turns in the memory.
 * mutant: comparing with every writer's history (every real partial is refused) */
static void a_forged_claim_never_blocks_another_writer(void **state)
{
    fixture_t *f = *state;
    char h[160];
    for (int q = 0; q < 3; q++) {
        assert_int_equal(
            take(f, q,
                 hdr(h, sizeof(h), PRODUCER_B, 1, "0:1000000000000000+1,1:1000000000000000+1")),
            HC_PARTIAL_OK);
    }
    for (int64_t w = 1; w <= 4; w++) {
        char ranges[64];
        snprintf(ranges, sizeof(ranges), "0:%" PRId64 "+10,1:%" PRId64 "+10", 10 * (w - 1),
                 10 * (w - 1));
        for (int q = 0; q < 3; q++) {
            assert_int_equal(take(f, q, hdr(h, sizeof(h), PRODUCER_A, w, ranges)), HC_PARTIAL_OK);
        }
        if (w == 2) {
            hc_source_commit(f->sc);
        }
    }
    hc_source_commit(f->sc);
    /* writers made up by the dozen: the real one keeps counting, and its own late write is
     * still refused as long as it took a range more recently than the oldest forger */
    for (int i = 0; i < 40; i++) {
        char producer[17];
        snprintf(producer, sizeof(producer), "%016x", 0x1000 + i);
        assert_int_equal(take(f, 0, hdr(h, sizeof(h), producer, 1, "0:0+1000000000000000")),
                         HC_PARTIAL_OK);
        char ranges[64];
        snprintf(ranges, sizeof(ranges), "0:%d+1", 40 + i);
        assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 5 + i, ranges)), HC_PARTIAL_OK);
    }
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 3, "0:20+10")),
                     HC_PARTIAL_SOURCE_OVERLAP);
}

/* The memory per raw partition is bounded: a third writer replaces the one that took a range
 * longest ago, and the two kept are still compared.
 * mutant: a newcomer replaces the most recent writer (A's late write passes) */
static void a_third_writer_replaces_the_oldest(void **state)
{
    fixture_t *f = *state;
    char h[128];
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_B, 1, "0:0+10")), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 1, "0:10+10")), HC_PARTIAL_OK);
    hc_source_commit(f->sc);
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), "00000000000000cc", 1, "0:20+10")),
                     HC_PARTIAL_OK);
    /* B was the oldest: forgotten; A is still compared */
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_B, 2, "0:5+1")), HC_PARTIAL_OK);
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 0, "0:10+3")),
                     HC_PARTIAL_SOURCE_OVERLAP);
}

/* mutant: a dropped batch's partials stay remembered, so its re-read (the same partials
 * fetched again after a lost compare-and-set) is refused; or commit keeps nothing */
static void rollback_forgets_the_open_batch_commit_keeps_it(void **state)
{
    fixture_t *f = *state;
    char w1[128], w2[128];
    hdr(w1, sizeof(w1), PRODUCER_A, 1, "0:0+10");
    hdr(w2, sizeof(w2), PRODUCER_A, 2, "0:10+10");
    assert_int_equal(take(f, 3, w1), HC_PARTIAL_OK);
    hc_source_commit(f->sc);
    assert_int_equal(take(f, 3, w2), HC_PARTIAL_OK);
    hc_source_rollback(f->sc);
    /* w2 is fetched again: passes; w1 was stored: refused as a late write */
    assert_int_equal(take(f, 3, w2), HC_PARTIAL_OK);
    assert_int_equal(check(f, 3, w1), HC_PARTIAL_SOURCE_OVERLAP);
}

/* mutant: the memory survives a re-read of the store's offsets (a store that went back would
 * then have stage 2 refuse every partial it must count again) */
static void forget_starts_the_partition_afresh(void **state)
{
    fixture_t *f = *state;
    char w1[128], w2[128];
    hdr(w1, sizeof(w1), PRODUCER_A, 1, "0:0+10");
    hdr(w2, sizeof(w2), PRODUCER_A, 2, "0:10+10");
    assert_int_equal(take(f, 0, w1), HC_PARTIAL_OK);
    assert_int_equal(take(f, 1, w2), HC_PARTIAL_OK);
    hc_source_commit(f->sc);
    assert_int_equal(take(f, 0, w2), HC_PARTIAL_OK);
    hc_source_forget(f->sc, 0);
    assert_int_equal(take(f, 0, w1), HC_PARTIAL_OK);
    /* partition 1 kept its memory; partitions never see each other's */
    assert_int_equal(check(f, 1, w1), HC_PARTIAL_SOURCE_OVERLAP);
    assert_int_equal(check(f, 7, w1), HC_PARTIAL_OK);
    hc_source_forget(f->sc, 99); /* never seen: nothing to do */
    /* within the partitions the check has room for, but never given a partial: no slots yet
     * (a stage 2 assigned a partition it has not read from; UBSan caught a memset of NULL) */
    hc_source_forget(f->sc, 5);
    assert_int_equal(check(f, 5, w1), HC_PARTIAL_OK);
}

/* A stage 1 older than the header, a foreign writer, or a newer format: counted unchecked.
 * mutant: a partial without the header is refused (an upgrade would stop counting) */
static void no_header_or_unknown_version_passes(void **state)
{
    fixture_t *f = *state;
    char h[128];
    assert_int_equal(take(f, 0, hdr(h, sizeof(h), PRODUCER_A, 1, "0:0+10")), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, NULL), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, "2 whatever it says"), HC_PARTIAL_OK);
    assert_int_equal(take(f, 0, "not a header"), HC_PARTIAL_OK);
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 2, "0:0+10")),
                     HC_PARTIAL_SOURCE_OVERLAP); /* nothing above changed the memory */
}

/* mutant: the parser takes what the format refuses (and would then compare garbage) */
static void malformed_version_1_values_are_refused(void **state)
{
    fixture_t *f = *state;
    static const char *const bad[] = {
        "1",
        "1 ",
        "1 0123456789abcde 1 1 0:0+1",                     /* 15 hex digits */
        "1 0123456789ABCDEF 1 1 0:0+1",                    /* upper case */
        "1 0123456789abcdef 1 1",                          /* no range */
        "1 0123456789abcdef 1 1 ",                         /* no range */
        "1 0123456789abcdef 1 1 0:0+0",                    /* empty range */
        "1 0123456789abcdef 1 1 0:0",                      /* no count */
        "1 0123456789abcdef 1 1 0:0+1,",                   /* trailing comma */
        "1 0123456789abcdef 1 1 1:0+1,1:5+1",              /* a partition twice */
        "1 0123456789abcdef 1 1 2:0+1,1:5+1",              /* out of order */
        "1 0123456789abcdef 1 1 01:0+1",                   /* leading zero */
        "1 0123456789abcdef 1 1 -1:0+1",                   /* negative */
        "1 0123456789abcdef 1 1 16384:0+1",                /* past HC_SOURCE_MAX_RAW_PARTITIONS */
        "1 0123456789abcdef 1 1 0:9223372036854775807+1",  /* first + count past int64 */
        "1 0123456789abcdef 1 1 0:99999999999999999999+1", /* past int64 */
        "1 0123456789abcdef 1 1 0:0+1 ",                   /* trailing space */
        "1 0123456789abcdef  1 1 0:0+1",                   /* two spaces */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (check(f, 0, bad[i]) != HC_PARTIAL_SOURCE_MALFORMED) {
            fail_msg("taken: \"%s\"", bad[i]);
        }
        assert_non_null(strstr(f->errstr, HC_SOURCE_HEADER));
        /* accept ignores what check refuses: nothing remembered */
        assert_int_equal(hc_source_accept(f->sc, 0, bad[i], strlen(bad[i])), HC_OK);
    }
    char h[128];
    assert_int_equal(check(f, 0, hdr(h, sizeof(h), PRODUCER_A, 1, "0:0+1,16383:5+1")),
                     HC_PARTIAL_OK);
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_SOURCE_OVERLAP), "source_overlap");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_SOURCE_MALFORMED), "source_malformed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(encode_names_the_window_and_its_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(siblings_of_one_window_pass_across_batches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(windows_in_order_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(late_write_after_the_next_window_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(late_write_before_the_next_window_refuses_the_next, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(same_window_with_another_range_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(any_overlapping_range_refuses_the_partial, setup, teardown),
        cmocka_unit_test_setup_teardown(a_forged_claim_never_blocks_another_writer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_third_writer_replaces_the_oldest, setup, teardown),
        cmocka_unit_test_setup_teardown(rollback_forgets_the_open_batch_commit_keeps_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(forget_starts_the_partition_afresh, setup, teardown),
        cmocka_unit_test_setup_teardown(no_header_or_unknown_version_passes, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_version_1_values_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
