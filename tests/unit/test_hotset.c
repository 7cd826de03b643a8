/* Unit tests for stage 2's hot set and the topic.hotkeys records (src/core/hotset.c), on a fake
 * clock: every window's length is what the test says, so rates are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/hotset.h"

typedef struct fake_clock {
    int64_t now;
} fake_clock_t;

static int64_t fake_now(void *opaque)
{
    return ((fake_clock_t *)opaque)->now;
}

/* enter 1000/s, leave 500/s, dwell 5 s, 1 s windows, ttl 60 s */
static hc_hotset_opts_t opts_for(fake_clock_t *clk, size_t max)
{
    return (hc_hotset_opts_t){.enter_rate = 1000,
                              .leave_rate = 500,
                              .dwell_ms = 5000,
                              .max = max,
                              .window_ms = 1000,
                              .ttl_ms = 60000,
                              .flap_ms = 30000,
                              .now_ms = fake_now,
                              .clock_opaque = clk};
}

static hc_hotset_t *new_set(fake_clock_t *clk, size_t max)
{
    hc_hotset_opts_t o = opts_for(clk, max);
    char errstr[256];
    hc_hotset_t *hs = hc_hotset_new(&o, errstr, sizeof(errstr));
    assert_non_null(hs);
    return hs;
}

/* One 1 s window in which post id has `events` events (none when events is 0). Returns the
 * transitions of id in that window (TO_HOT / TO_COOL / REFRESH), -1 when none. */
static int window(hc_hotset_t *hs, fake_clock_t *clk, const char *id, int64_t events)
{
    clk->now += 1000;
    hc_hotset_begin(hs);
    hc_hotset_offer(hs, id, strlen(id), events);
    size_t n = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(hs, &n);
    int change = -1;
    for (size_t i = 0; i < n; i++) {
        if (t[i].post_id_len == strlen(id) && memcmp(t[i].post_id, id, t[i].post_id_len) == 0) {
            assert_int_equal(change, -1); /* at most one per post per window */
            change = (int)t[i].change;
        }
    }
    return change;
}

/* ---- the transition function, one case per transition ---- */

static void next_covers_every_transition(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_opts_t o = opts_for(&clk, 10);
    assert_int_equal(hc_hotset_next(HC_HOTSET_COLD, 999, 0, &o), HC_HOTSET_COLD);
    assert_int_equal(hc_hotset_next(HC_HOTSET_COLD, 1000, 0, &o), HC_HOTSET_HOT);
    assert_int_equal(hc_hotset_next(HC_HOTSET_HOT, 500, 0, &o), HC_HOTSET_HOT);
    assert_int_equal(hc_hotset_next(HC_HOTSET_HOT, 499, 0, &o), HC_HOTSET_COOLING);
    assert_int_equal(hc_hotset_next(HC_HOTSET_COOLING, 500, 4999, &o), HC_HOTSET_HOT);
    assert_int_equal(hc_hotset_next(HC_HOTSET_COOLING, 0, 4999, &o), HC_HOTSET_COOLING);
    assert_int_equal(hc_hotset_next(HC_HOTSET_COOLING, 0, 5000, &o), HC_HOTSET_COLD);
    o.dwell_ms = 0;
    assert_int_equal(hc_hotset_next(HC_HOTSET_HOT, 499, 0, &o), HC_HOTSET_COLD);
}

static void new_rejects_bad_options(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    char errstr[256];
    hc_hotset_opts_t o = opts_for(&clk, 10);
    o.leave_rate = o.enter_rate;
    assert_null(hc_hotset_new(&o, errstr, sizeof(errstr)));
    o = opts_for(&clk, 0);
    assert_null(hc_hotset_new(&o, errstr, sizeof(errstr)));
    o = opts_for(&clk, 10);
    o.now_ms = NULL;
    assert_null(hc_hotset_new(&o, errstr, sizeof(errstr)));
}

/* ---- the set over windows ---- */

static void enters_at_the_enter_rate_only(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    assert_int_equal(window(hs, &clk, "p", 999), -1);
    assert_int_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_COLD);
    assert_int_equal(hc_hotset_size(hs), 0); /* a cold post is not remembered */
    assert_int_equal(window(hs, &clk, "p", 1000), HC_HOTSET_TO_HOT);
    assert_int_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_HOT);
    hc_hotset_destroy(hs);
}

/* The window's length comes from the clock: 1500 events over 2 s is 750/s, not hot. */
static void rate_is_events_over_the_clock(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    assert_int_equal(window(hs, &clk, "q", 1), -1); /* sets the first end */
    clk.now += 1000;                                /* then a 2 s window */
    assert_int_equal(window(hs, &clk, "p", 1500), -1);
    clk.now += 500; /* a 0.5 s window: 600 events is 1200/s */
    hc_hotset_begin(hs);
    hc_hotset_offer(hs, "p", 1, 600);
    size_t n = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(hs, &n);
    assert_int_equal(n, 1);
    assert_int_equal(t[0].change, HC_HOTSET_TO_HOT);
    assert_true(t[0].rate > 1199.9 && t[0].rate < 1200.1);
    assert_int_equal(t[0].expires_ms, clk.now + 60000);
    hc_hotset_destroy(hs);
}

static void leaves_only_after_the_dwell(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    assert_int_equal(window(hs, &clk, "p", 2000), HC_HOTSET_TO_HOT);
    /* below leave_rate: COOLING at once, but silent for the 5 s dwell */
    assert_int_equal(window(hs, &clk, "p", 0), -1);
    assert_int_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_COOLING);
    int64_t cooling_since = clk.now;
    while (clk.now + 1000 - cooling_since < 5000) {
        assert_int_equal(window(hs, &clk, "p", 100), -1);
        assert_int_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_COOLING);
    }
    assert_int_equal(window(hs, &clk, "p", 100), HC_HOTSET_TO_COOL);
    assert_int_equal(clk.now - cooling_since, 5000);
    assert_int_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_COLD);
    assert_int_equal(hc_hotset_size(hs), 0);
    hc_hotset_stats_t st = hc_hotset_stats(hs);
    assert_int_equal(st.to_hot, 1);
    assert_int_equal(st.to_cool, 1);
    hc_hotset_destroy(hs);
}

/* The rate moves between the thresholds, and dips below leave_rate for less than the dwell:
 * one TO_HOT, no TO_COOL, over two minutes. */
static void rate_between_thresholds_does_not_flap(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    int enters = 0, leaves = 0;
    /* cold and oscillating 600..990: never enters */
    for (int i = 0; i < 60; i++) {
        int c = window(hs, &clk, "p", i % 2 ? 990 : 600);
        enters += c == HC_HOTSET_TO_HOT;
    }
    assert_int_equal(enters, 0);
    assert_int_equal(window(hs, &clk, "p", 1100), HC_HOTSET_TO_HOT);
    /* hot: 510..1400, and every fifth window a dip to 100 (shorter than the dwell) */
    for (int i = 0; i < 120; i++) {
        int64_t ev = i % 5 == 4 ? 100 : (i % 2 ? 1400 : 510);
        int c = window(hs, &clk, "p", ev);
        enters += c == HC_HOTSET_TO_HOT;
        leaves += c == HC_HOTSET_TO_COOL;
        assert_int_not_equal(hc_hotset_state(hs, "p", 1), HC_HOTSET_COLD);
    }
    assert_int_equal(enters, 0);
    assert_int_equal(leaves, 0);
    /* every dip but the last (no window after it) went back to HOT */
    assert_int_equal(hc_hotset_stats(hs).dips, 23);
    hc_hotset_destroy(hs);
}

/* A HOT member is announced again every ttl / 3, with its first `since`. */
static void hot_member_is_refreshed_before_it_expires(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    assert_int_equal(window(hs, &clk, "p", 2000), HC_HOTSET_TO_HOT);
    int64_t since = clk.now;
    int refreshes = 0;
    for (int i = 0; i < 60; i++) {
        clk.now += 1000;
        hc_hotset_begin(hs);
        hc_hotset_offer(hs, "p", 1, 2000);
        size_t n = 0;
        const hc_hotset_transition_t *t = hc_hotset_end(hs, &n);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(t[k].change, HC_HOTSET_REFRESH);
            assert_int_equal(t[k].since_ms, since);
            assert_int_equal(t[k].expires_ms, clk.now + 60000);
            refreshes++;
        }
    }
    assert_int_equal(refreshes, 3); /* at 20, 40, 60 s */
    hc_hotset_destroy(hs);
}

/* 1M distinct posts, every one over enter_rate, in one window and then in another: the set
 * holds max members, the hottest ones, and new hotter posts evict the coldest. */
static void memory_is_bounded_with_a_million_posts(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    enum { MAX = 100, POSTS = 1000000 };
    hc_hotset_t *hs = new_set(&clk, MAX);
    char id[32];
    clk.now += 1000;
    hc_hotset_begin(hs);
    for (int i = 0; i < POSTS; i++) {
        int len = snprintf(id, sizeof(id), "post-%d", i);
        hc_hotset_offer(hs, id, (size_t)len, 1000 + i); /* post-i has 1000 + i events/s */
    }
    size_t n = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(hs, &n);
    assert_int_equal(n, MAX);
    assert_int_equal(hc_hotset_size(hs), MAX);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(t[i].change, HC_HOTSET_TO_HOT);
        /* hottest first */
        assert_int_equal((int64_t)t[i].rate, 1000 + POSTS - 1 - (int64_t)i);
    }
    assert_int_equal(hc_hotset_stats(hs).dropped, POSTS - MAX);
    /* next window: the members stay at their rates, 10 newcomers are hotter than 10 of them */
    clk.now += 1000;
    hc_hotset_begin(hs);
    for (int i = POSTS - MAX; i < POSTS; i++) {
        int len = snprintf(id, sizeof(id), "post-%d", i);
        hc_hotset_offer(hs, id, (size_t)len, 1000 + i);
    }
    for (int i = 0; i < 10; i++) {
        int len = snprintf(id, sizeof(id), "new-%d", i);
        hc_hotset_offer(hs, id, (size_t)len, 1000 + POSTS - MAX + 10);
    }
    t = hc_hotset_end(hs, &n);
    assert_int_equal(n, 20);
    int evicted = 0, entered = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].change == HC_HOTSET_TO_COOL) {
            assert_true(t[i].evicted);
            assert_true(t[i].rate < 1000 + POSTS - MAX + 10);
            evicted++;
        } else {
            assert_int_equal(t[i].change, HC_HOTSET_TO_HOT);
            assert_memory_equal(t[i].post_id, "new-", 4);
            entered++;
        }
    }
    assert_int_equal(evicted, 10);
    assert_int_equal(entered, 10);
    assert_int_equal(hc_hotset_size(hs), MAX);
    assert_int_equal(hc_hotset_state(hs, "post-999900", 11), HC_HOTSET_COLD); /* the coldest */
    assert_int_equal(hc_hotset_state(hs, "post-999999", 11), HC_HOTSET_HOT);
    hc_hotset_destroy(hs);
}

/* A member COOLING is evicted before a HOT one, whatever their rates this window. */
static void cooling_member_is_evicted_first(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 2);
    clk.now += 1000;
    hc_hotset_begin(hs);
    hc_hotset_offer(hs, "a", 1, 5000);
    hc_hotset_offer(hs, "b", 1, 2000);
    size_t n = 0;
    hc_hotset_end(hs, &n);
    assert_int_equal(n, 2);
    /* a dips (COOLING), b stays at 600/s (HOT) */
    clk.now += 1000;
    hc_hotset_begin(hs);
    hc_hotset_offer(hs, "a", 1, 400);
    hc_hotset_offer(hs, "b", 1, 600);
    hc_hotset_end(hs, &n);
    assert_int_equal(hc_hotset_state(hs, "a", 1), HC_HOTSET_COOLING);
    clk.now += 1000;
    hc_hotset_begin(hs);
    hc_hotset_offer(hs, "a", 1, 499);
    hc_hotset_offer(hs, "b", 1, 600);
    hc_hotset_offer(hs, "c", 1, 1000);
    const hc_hotset_transition_t *t = hc_hotset_end(hs, &n);
    assert_int_equal(n, 2);
    assert_int_equal(t[0].change, HC_HOTSET_TO_COOL);
    assert_string_equal(t[0].post_id, "a");
    assert_true(t[0].evicted);
    assert_int_equal(t[1].change, HC_HOTSET_TO_HOT);
    assert_string_equal(t[1].post_id, "c");
    assert_int_equal(hc_hotset_state(hs, "b", 1), HC_HOTSET_HOT);
    hc_hotset_destroy(hs);
}

/* A burst after an idle hour is measured over the hour (so a backlog read at start-up is not a
 * burst either), and seen in the next window. */
static void burst_after_idle_gap_is_seen_one_window_late(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    clk.now += 3600000;
    assert_int_equal(window(hs, &clk, "p", 5000), -1);
    assert_int_equal(window(hs, &clk, "p", 5000), HC_HOTSET_TO_HOT);
    hc_hotset_destroy(hs);
}

/* Leaving (after the dwell) and entering again within flap_ms is a flap; later it is not. */
static void reentry_soon_after_leaving_is_a_flap(void **state)
{
    (void)state;
    fake_clock_t clk = {0};
    hc_hotset_t *hs = new_set(&clk, 10);
    assert_int_equal(window(hs, &clk, "p", 2000), HC_HOTSET_TO_HOT);
    while (window(hs, &clk, "p", 0) != HC_HOTSET_TO_COOL) {
    }
    assert_int_equal(window(hs, &clk, "p", 2000), HC_HOTSET_TO_HOT); /* 1 s after leaving */
    assert_int_equal(hc_hotset_stats(hs).flaps, 1);
    while (window(hs, &clk, "p", 0) != HC_HOTSET_TO_COOL) {
    }
    int64_t left = clk.now;
    while (clk.now + 1000 - left < 30000) {
        assert_int_equal(window(hs, &clk, "q", 1), -1);
    }
    assert_int_equal(window(hs, &clk, "p", 2000), HC_HOTSET_TO_HOT); /* 30 s after: no flap */
    assert_int_equal(hc_hotset_stats(hs).flaps, 1);
    hc_hotset_destroy(hs);
}

/* ---- records ---- */

static void record_round_trips_and_keys_by_source(void **state)
{
    (void)state;
    hc_hotkey_record_t rec = {.post_id = "p\"1",
                              .post_id_len = 3,
                              .hot = true,
                              .rate = 1234.56,
                              .since_ms = 1700000000000,
                              .source = HC_HOTKEY_DECLARED,
                              .expires_ms = 1700000600000,
                              .salts = 32};
    char *json = hc_hotkey_record_encode(&rec);
    assert_non_null(json);
    assert_string_equal(json, "{\"post\":\"p\\\"1\",\"state\":\"hot\",\"rate\":1234.6,\"since\":"
                              "1700000000000,\"source\":\"declared\",\"expires\":1700000600000,"
                              "\"salts\":32}");
    hc_hotkey_record_t back;
    char errstr[256];
    assert_int_equal(hc_hotkey_record_parse(json, strlen(json), &back, errstr, sizeof(errstr)),
                     HC_OK);
    free(json);
    assert_int_equal(back.post_id_len, 3);
    assert_memory_equal(back.post_id, "p\"1", 3);
    assert_true(back.hot);
    assert_int_equal(back.since_ms, rec.since_ms);
    assert_int_equal(back.expires_ms, rec.expires_ms);
    assert_int_equal(back.source, HC_HOTKEY_DECLARED);
    assert_int_equal(back.salts, 32);
    char key[300];
    size_t kl = hc_hotkey_record_key(&back, key, sizeof(key));
    assert_int_equal(kl, strlen("declared:p\"1"));
    assert_memory_equal(key, "declared:p\"1", kl);
    back.source = HC_HOTKEY_DETECTED;
    kl = hc_hotkey_record_key(&back, key, sizeof(key));
    assert_memory_equal(key, "detected:p\"1", kl);

    const char *cool = "{\"post\":\"x\",\"state\":\"cool\",\"rate\":0,\"since\":5,"
                       "\"source\":\"detected\",\"expires\":null}";
    assert_int_equal(hc_hotkey_record_parse(cool, strlen(cool), &back, errstr, sizeof(errstr)),
                     HC_OK);
    assert_false(back.hot);
    assert_int_equal(back.expires_ms, HC_HOTSET_NONE);
    const char *bad[] = {"", "[]",
                         "{\"post\":\"x\",\"state\":\"warm\",\"since\":1,\"source\":"
                         "\"detected\"}",
                         "{\"post\":\"\",\"state\":\"hot\",\"since\":1,\"source\":\"detected\"}",
                         "{\"post\":\"x\",\"state\":\"hot\",\"since\":\"1\",\"source\":\"x\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(
            hc_hotkey_record_parse(bad[i], strlen(bad[i]), &back, errstr, sizeof(errstr)),
            HC_ERR_RECORD);
    }
}

/* A declared record is hot from its start to its expiry, whatever the rate; a detected one
 * until its expiry. */
static void declared_record_is_hot_from_its_start(void **state)
{
    (void)state;
    hc_hotkey_record_t rec = {.post_id = "p",
                              .post_id_len = 1,
                              .hot = true,
                              .since_ms = 1000,
                              .source = HC_HOTKEY_DECLARED,
                              .expires_ms = 2000};
    assert_false(hc_hotkey_record_is_hot(&rec, 999));
    assert_true(hc_hotkey_record_is_hot(&rec, 1000));
    assert_true(hc_hotkey_record_is_hot(&rec, 1999));
    assert_false(hc_hotkey_record_is_hot(&rec, 2000));
    rec.source = HC_HOTKEY_DETECTED;
    assert_true(hc_hotkey_record_is_hot(&rec, 999));
    rec.expires_ms = HC_HOTSET_NONE;
    assert_true(hc_hotkey_record_is_hot(&rec, INT64_MAX));
    rec.hot = false;
    assert_false(hc_hotkey_record_is_hot(&rec, 1500));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(next_covers_every_transition),
        cmocka_unit_test(new_rejects_bad_options),
        cmocka_unit_test(enters_at_the_enter_rate_only),
        cmocka_unit_test(rate_is_events_over_the_clock),
        cmocka_unit_test(leaves_only_after_the_dwell),
        cmocka_unit_test(rate_between_thresholds_does_not_flap),
        cmocka_unit_test(hot_member_is_refreshed_before_it_expires),
        cmocka_unit_test(memory_is_bounded_with_a_million_posts),
        cmocka_unit_test(cooling_member_is_evicted_first),
        cmocka_unit_test(burst_after_idle_gap_is_seen_one_window_late),
        cmocka_unit_test(reentry_soon_after_leaving_is_a_flap),
        cmocka_unit_test(record_round_trips_and_keys_by_source),
        cmocka_unit_test(declared_record_is_hot_from_its_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
